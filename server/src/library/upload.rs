//! Snapshot uploads: the body is streamed to a temporary file (hashed on the way, never held whole
//! in memory) and, at the same time, parsed and analysed on a blocking thread (the async runtime
//! keeps serving; indexing overlaps the transfer), deduplicated by content hash, and handed to
//! `Library::commit` (the original renamed into place, then the row); the model file, index
//! included, is written after the answer. Any failure removes the temporary files, so a bad or
//! interrupted upload leaves nothing behind. Errors are `UploadError`s; the
//! HTTP layer turns them into answers.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use futures_util::StreamExt;

use api::{SnapshotInfo, Tag};

use super::files::Library;
use super::files::{TempFile, Waited, unique_name, write_model_file};
use super::models::Loaded;
use super::models::Models;
use super::original::Original;
use crate::live::Live;

/// Uploads open at once per parse slot: those waiting for their clients' bytes hold no slot,
/// so a few slow ones cannot keep a fast one from being parsed.
const OPEN_UPLOADS_PER_SLOT: usize = 4;

/// The most of an upload's declared length the engine reserves its tables for before the bytes
/// arrive (a 256 MiB snapshot's tables: about 200 MB).
const MAX_RESERVE_HINT_BYTES: u64 = 256 << 20;

/// Why an upload was not stored.
#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    /// The client stopped sending (or the connection broke) before the end.
    #[error("{0}")]
    Interrupted(String),
    #[error("upload is larger than the limit of {limit_bytes} bytes")]
    TooLarge { limit_bytes: u64 },
    /// The client sent too slowly to keep its upload open (see `--min-upload-rate`).
    #[error(
        "the upload arrived at {got_bytes_per_s} bytes/s, below the server's minimum of {min_bytes_per_s} bytes/s \
         (--min-upload-rate); it was cut off so that slow clients cannot hold every open upload"
    )]
    TooSlow {
        got_bytes_per_s: u64,
        min_bytes_per_s: u64,
    },
    /// The upload took longer than its time budget (`--max-upload-secs`, or less for a small
    /// one), however fast it was going: an endless body sent just above the minimum rate
    /// cannot stay open for days.
    #[error(
        "the upload took longer than its budget of {budget_s} s (60 s and its size at --min-upload-rate, at most --max-upload-secs); it was cut off"
    )]
    OverTime { budget_s: u64 },
    /// Not a snapshot memscope can read: the engine's message, for the user.
    #[error("{0}")]
    Unreadable(String),
    /// The memory shared by parses (`--max-parse-memory-bytes`) is held by other uploads: the
    /// client may send it again shortly.
    #[error("{0}")]
    Busy(String),
    #[error(transparent)]
    Internal(#[from] anyhow::Error),
}

impl From<std::io::Error> for UploadError {
    fn from(e: std::io::Error) -> Self {
        UploadError::Internal(e.into())
    }
}

impl From<sqlx::Error> for UploadError {
    fn from(e: sqlx::Error) -> Self {
        UploadError::Internal(e.into())
    }
}

type UploadResult<T> = Result<T, UploadError>;

/// Where upload bytes go: the original's writer (hashed, written, synced: [`Original`]), with
/// the size limit and the rate floor checked.
struct Sink {
    original: Option<Original>,
    size: u64,
    limit: u64,
    progress: Arc<UploadProgress>,
    rate: RateFloor,
}

/// The slowest an upload may arrive and stay open: at least `min_bytes_per_s`,
/// averaged over each `window`.
struct RateFloor {
    min_bytes_per_s: u64,
    window: std::time::Duration,
    started: Instant,
    bytes: u64,
}

impl RateFloor {
    fn take(&mut self, n: u64) -> UploadResult<()> {
        self.bytes += n;
        let elapsed = self.started.elapsed();
        if elapsed < self.window {
            return Ok(());
        }
        let got_bytes_per_s = (self.bytes as f64 / elapsed.as_secs_f64()) as u64;
        if got_bytes_per_s < self.min_bytes_per_s {
            return Err(UploadError::TooSlow {
                got_bytes_per_s,
                min_bytes_per_s: self.min_bytes_per_s,
            });
        }
        (self.started, self.bytes) = (Instant::now(), 0);
        Ok(())
    }
}

impl Sink {
    async fn take(
        &mut self,
        chunk: Result<axum::body::Bytes, axum::Error>,
    ) -> UploadResult<axum::body::Bytes> {
        let chunk = chunk.map_err(|e| UploadError::Interrupted(e.to_string()))?;
        self.size += chunk.len() as u64;
        self.progress
            .received_bytes
            .store(self.size, std::sync::atomic::Ordering::Relaxed);
        if self.size > self.limit {
            return Err(UploadError::TooLarge {
                limit_bytes: self.limit,
            });
        }
        self.rate.take(chunk.len() as u64)?;
        self.original
            .as_mut()
            .expect("file created before receiving")
            .push(chunk.clone())
            .await?;
        Ok(chunk)
    }

    /// Syncs what is left of the original and closes it: its sha256 (hex) and size.
    async fn close(mut self) -> UploadResult<(String, u64)> {
        let original = self.original.take().expect("created before receiving");
        Ok(original.finish().await?)
    }
}

/// Result of an upload.
#[derive(Debug)]
pub struct Uploaded {
    /// False when the same bytes were uploaded before (the existing snapshot is returned).
    pub created: bool,
    pub snapshot: SnapshotInfo,
    /// The entry's report, read with it (so a delete racing the upload cannot separate them).
    pub report: api::Report,
}

/// Feeds upload chunks from the async side to the parser thread, which holds a parse slot
/// only while it has bytes to work on: waiting for its client's next bytes it gives the slot
/// back, so uploads that trickle in (however many clients send them) leave the slots to those
/// whose bytes have arrived (issue 38, item 3).
struct ChannelReader {
    rx: tokio::sync::mpsc::Receiver<axum::body::Bytes>,
    current: axum::body::Bytes,
    progress: Arc<UploadProgress>,
    slot: ParseSlot,
    /// The body's end was read: the heap is trimmed only the first time, whoever asks again
    /// (the parser's input stops asking at the end, `snapshot::pickle::Input`; a decoder
    /// layered above this reader may not).
    ended: bool,
}

/// A parse's hold on one of the parse slots, taken when it has work and given back when it
/// waits.
struct ParseSlot {
    slots: Arc<tokio::sync::Semaphore>,
    held: Option<tokio::sync::OwnedSemaphorePermit>,
    runtime: tokio::runtime::Handle,
}

impl ParseSlot {
    /// Holds a slot, waiting for one if none is free (on the parser's blocking thread).
    fn take(&mut self) -> std::io::Result<()> {
        if self.held.is_none() {
            let permit = self
                .runtime
                .block_on(self.slots.clone().acquire_owned())
                .map_err(std::io::Error::other)?;
            self.held = Some(permit);
        }
        Ok(())
    }

    fn give_back(&mut self) {
        self.held = None;
    }
}

impl std::io::Read for ChannelReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        use tokio::sync::mpsc::error::TryRecvError;
        while self.current.is_empty() {
            let next = match self.rx.try_recv() {
                Ok(b) => Some(b),
                Err(TryRecvError::Disconnected) => None,
                Err(TryRecvError::Empty) => {
                    self.slot.give_back();
                    self.rx.blocking_recv()
                }
            };
            match next {
                Some(b) => self.current = b,
                None => {
                    // The end: what follows (lowering, indexing, the report) is work. The
                    // body's buffers are all free now: their pages go back before that work,
                    // where the upload's memory peaks. Once: before the parser's input
                    // remembered the end, it asked here again and again, and a trim each time
                    // held a 164 MB upload's answer back by up to 150 ms (bench/README.md,
                    // issue 41, fourteenth part).
                    if !self.ended {
                        self.ended = true;
                        crate::release_free_heap();
                    }
                    self.slot.take()?;
                    return Ok(0);
                }
            }
        }
        self.slot.take()?;
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current[..n]);
        self.current = self.current.slice(n..);
        self.progress
            .parsed_bytes
            .fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(n)
    }
}

/// The device total of a snapshot tagged with a host (and pid) the collectors report on; a
/// failed lookup only costs the verdict its certainty, so it is logged, not raised.
async fn collector_device_total(
    live: &crate::live::Live,
    tags: &[Tag],
) -> Option<api::DeviceTotal> {
    let tag = |k: &str| tags.iter().find(|t| t.key == k).map(|t| t.value.as_str());
    let host = tag("host")?;
    let pid = tag("pid").and_then(|p| p.parse().ok());
    match live.nvml_device_total(host, pid).await {
        Ok(found) => found.map(|(total_bytes, detail)| api::DeviceTotal {
            total_bytes,
            source: api::DeviceTotalSource::Collector,
            detail: Some(detail),
        }),
        Err(e) => {
            tracing::warn!(error = %e, host, "could not look up the device total in the live tables");
            None
        }
    }
}

/// How far an upload has got: bytes received, bytes the parser has consumed, and the total the
/// client announced (Content-Length; 0 if unknown).
#[derive(Debug, Default)]
pub struct UploadProgress {
    pub received_bytes: std::sync::atomic::AtomicU64,
    pub parsed_bytes: std::sync::atomic::AtomicU64,
    pub total_bytes: u64,
    pub finished: std::sync::atomic::AtomicBool,
}

/// The limits an upload is held to (`--max-upload-bytes`, `--min-upload-rate`, the decoded size
/// and expansion limits).
#[derive(Debug, Clone)]
pub struct UploadLimits {
    pub max_bytes: u64,
    pub min_bytes_per_s: u64,
    /// The longest any one upload may take from its first byte.
    pub max_time: std::time::Duration,
    /// Uploads one client address may have open at once (the others wait for theirs).
    pub open_per_client: usize,
    /// The window the rate is averaged over (the body-idle timeout).
    pub rate_window: std::time::Duration,
    /// The parser's limits, but for the size hint (each upload's declared size).
    pub read: snapshot::Limits,
}

/// The stream's next item, unless `budget` from `started` passes first.
async fn next_within<S: futures_util::Stream + Unpin>(
    stream: &mut S,
    started: Instant,
    budget: std::time::Duration,
) -> UploadResult<Option<S::Item>> {
    tokio::time::timeout_at((started + budget).into(), stream.next())
        .await
        .map_err(|_| UploadError::OverTime {
            budget_s: budget.as_secs(),
        })
}

impl UploadLimits {
    /// How long an upload of `size_bytes` may take to arrive: a minute, and its size at the
    /// minimum rate, at most `max_time`.
    pub fn time_budget(&self, size_bytes: u64) -> std::time::Duration {
        let at_floor = size_bytes as f64 / self.min_bytes_per_s.max(1) as f64;
        std::time::Duration::from_secs_f64(60.0 + at_floor).min(self.max_time)
    }
}

/// Uploads: what they use of the server, and nothing else (the library they commit into, the
/// live tables a device's total is looked up in, the models they leave in memory, the parse
/// slots, the limits) and the progress of those in flight.
#[derive(Debug, Clone)]
pub struct Uploads {
    library: Library,
    live: Live,
    models: Arc<Models>,
    /// Bounds how many uploads are parsed at once: held by a parse while it has bytes to work
    /// on (`ParseSlot`).
    slots: Arc<tokio::sync::Semaphore>,
    /// Bounds how many uploads are open at once (received and parsed, or waiting for their
    /// client's bytes): four per parse slot.
    open: Arc<tokio::sync::Semaphore>,
    /// Each client address's share of the open uploads (half the parse slots' count, at least
    /// one), taken first.
    shares: Arc<
        std::sync::Mutex<std::collections::HashMap<std::net::IpAddr, Arc<tokio::sync::Semaphore>>>,
    >,
    limits: UploadLimits,
    /// Progress of uploads in flight, by the token the client chose.
    progress: Arc<std::sync::Mutex<std::collections::HashMap<String, Arc<UploadProgress>>>>,
}

/// An upload's own settings: its name and tags, the device total it gave, and the address of
/// the client sending it (when known: not for uploads made in-process).
#[derive(Debug, Clone)]
pub struct NewUpload {
    pub name: String,
    pub tags: Vec<Tag>,
    pub device_total: Option<u64>,
    pub client: Option<std::net::IpAddr>,
}

/// A client's share of the open uploads, held by one upload.
struct ClientShare {
    shares: Arc<
        std::sync::Mutex<std::collections::HashMap<std::net::IpAddr, Arc<tokio::sync::Semaphore>>>,
    >,
    ip: std::net::IpAddr,
    permit: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl Drop for ClientShare {
    fn drop(&mut self) {
        drop(self.permit.take());
        let mut shares = self.shares.lock().expect("shares lock");
        // Only the map holds it, with every permit back: the client holds nothing.
        if shares
            .get(&self.ip)
            .is_some_and(|s| Arc::strong_count(s) == 1)
        {
            shares.remove(&self.ip);
        }
    }
}

/// What the body and the parser gave: the original's hash and size, and the parsed snapshot.
struct Received {
    sha256: String,
    size_bytes: u64,
    snap: snapshot::Snapshot,
    index: snapshot::analysis::Index,
    report: api::Report,
    /// When the body's last byte arrived, and how long after it the parse ended.
    last_byte_at: Instant,
    parsed_after_last_byte: std::time::Duration,
}

impl Uploads {
    pub fn new(
        library: Library,
        live: Live,
        models: Arc<Models>,
        parse_slots: usize,
        limits: UploadLimits,
    ) -> Uploads {
        Uploads {
            library,
            live,
            models,
            slots: Arc::new(tokio::sync::Semaphore::new(parse_slots.max(1))),
            open: Arc::new(tokio::sync::Semaphore::new(
                parse_slots.max(1) * OPEN_UPLOADS_PER_SLOT,
            )),
            shares: Default::default(),
            limits,
            progress: Default::default(),
        }
    }

    /// Parse slots free now (none taken: the configured count).
    pub fn free_parse_slots(&self) -> usize {
        self.slots.available_permits()
    }

    /// The memory parses share (`--max-parse-memory-bytes`): (total, free now), in bytes.
    pub fn parse_memory_bytes(&self) -> (u64, u64) {
        self.limits
            .read
            .budget
            .as_ref()
            .map_or((0, 0), |b| (b.total_bytes(), b.free_bytes()))
    }

    /// The largest upload taken, in bytes.
    pub fn max_bytes(&self) -> u64 {
        self.limits.max_bytes
    }

    /// A new upload's progress, of `total_bytes` as declared, followed under `token` if given.
    pub fn start(&self, token: Option<&str>, total_bytes: u64) -> Arc<UploadProgress> {
        let progress = Arc::new(UploadProgress {
            total_bytes,
            ..Default::default()
        });
        if let Some(t) = token {
            self.progress
                .lock()
                .expect("uploads lock")
                .insert(t.to_string(), progress.clone());
        }
        progress
    }

    /// Marks an upload finished; its progress is still answered for a minute, so that a poller
    /// whose request crosses the upload's answer gets `finished`, not a 404.
    pub fn finish(&self, token: Option<String>, progress: Arc<UploadProgress>) {
        progress
            .finished
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let Some(t) = token else {
            return;
        };
        let all = self.progress.clone();
        tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_secs(60)).await;
            let mut all = all.lock().expect("uploads lock");
            if all.get(&t).is_some_and(|p| Arc::ptr_eq(p, &progress)) {
                all.remove(&t);
            }
        });
    }

    /// The progress of the upload followed under `token`, if any.
    pub fn progress(&self, token: &str) -> Option<Arc<UploadProgress>> {
        self.progress
            .lock()
            .expect("uploads lock")
            .get(token)
            .cloned()
    }

    /// Stores, parses and commits one upload. The body goes to a temporary file (hashed on the
    /// way) and, at the same time, to the parser on a blocking thread, so indexing overlaps the
    /// transfer; a file the parser rejects ends the upload at once.
    ///
    /// The work runs in its own task, so a client that disconnects does not cut it short from
    /// outside: its body ends in an error, the parser sees the end of its input and stops, and
    /// only then are its place among the open uploads released and the temporary files removed
    /// (issue 13, finding 4). An upload whose body had fully arrived is committed even if its
    /// client is gone.
    ///
    /// `client` (its address, when known) takes its share of the open uploads first: one client
    /// cannot hold every place, however many uploads it sends.
    pub async fn upload(
        &self,
        upload: NewUpload,
        body: Body,
        progress: Arc<UploadProgress>,
    ) -> UploadResult<Uploaded> {
        let this = self.clone();
        tokio::spawn(async move { this.run(upload, body, progress).await })
            .await
            .map_err(|e| UploadError::Internal(e.into()))?
    }

    async fn run(
        &self,
        upload: NewUpload,
        body: Body,
        progress: Arc<UploadProgress>,
    ) -> UploadResult<Uploaded> {
        let NewUpload {
            name,
            tags,
            device_total,
            client,
        } = upload;
        let started = Instant::now();
        let device_total = self.device_total(device_total, &tags).await;
        let _share = match client {
            Some(ip) => Some(self.share(ip).await?),
            None => None,
        };
        let _open = self
            .open
            .acquire()
            .await
            .map_err(|e| UploadError::Internal(e.into()))?;
        let tmp = TempFile(self.library.tmp_path(&unique_name("upload")));
        let options = snapshot::analysis::Options {
            device_total_bytes: device_total.as_ref().map(|t| t.total_bytes),
        };
        let got = self.receive(body, &tmp, progress, options).await?;
        let receive_ms = started.elapsed().as_millis() as u64;
        let analysed_after_last_byte = got.last_byte_at.elapsed();
        // The same bytes, or the same snapshot compressed another way: the entry that stands.
        let content_hash = format!("{:032x}", got.snap.content_hash);
        if let Some(standing) = self
            .standing(&got.sha256, &content_hash, &got.report)
            .await?
        {
            return Ok(standing);
        }
        let index_ms = started.elapsed().as_millis() as u64;
        let committed = Instant::now();
        let info = snapshot_info(&got, name, tags, device_total, index_ms);
        let (info, created, report) = self
            .library
            .commit(&info, &content_hash, got.report, &tmp.0)
            .await?;
        if !created {
            // The same bytes were committed by a concurrent upload; theirs stands.
            return Ok(Uploaded {
                created: false,
                snapshot: info,
                report,
            });
        }
        tracing::info!(
            id = info.id,
            size = info.size_bytes,
            entries = info.entries,
            receive_ms,
            index_ms,
            commit_ms = committed.elapsed().as_millis() as u64,
            parsed_after_last_byte_ms = got.parsed_after_last_byte.as_millis() as u64,
            analysed_after_last_byte_ms = analysed_after_last_byte.as_millis() as u64,
            after_last_byte_ms = got.last_byte_at.elapsed().as_millis() as u64,
            "snapshot ingested (index_ms counts from the first byte; after_last_byte_ms: from the body's last byte to the commit)"
        );
        let loaded = Arc::new(Loaded::new(got.snap, got.index));
        self.models.insert(&info.id, loaded.clone());
        super::replays::replay_later(
            info.id.clone(),
            Arc::downgrade(&loaded),
            self.models.replays.clone(),
        );
        self.write_model_later(info.id.clone(), info.sha256.clone(), loaded);
        Ok(Uploaded {
            created: true,
            snapshot: info,
            report,
        })
    }

    /// One of `ip`'s share of the open uploads, waited for; given back when dropped (and the
    /// client forgotten once it holds none).
    async fn share(&self, ip: std::net::IpAddr) -> UploadResult<ClientShare> {
        let per_client = self.limits.open_per_client.max(1);
        let semaphore = self
            .shares
            .lock()
            .expect("shares lock")
            .entry(ip)
            .or_insert_with(|| Arc::new(tokio::sync::Semaphore::new(per_client)))
            .clone();
        let permit = semaphore
            .acquire_owned()
            .await
            .map_err(|e| UploadError::Internal(e.into()))?;
        Ok(ClientShare {
            shares: self.shares.clone(),
            ip,
            permit: Some(permit),
        })
    }

    /// The device's total memory: as the upload gave it, else from the collectors' readings of
    /// the host (and pid) the snapshot is tagged with.
    async fn device_total(&self, given: Option<u64>, tags: &[Tag]) -> Option<api::DeviceTotal> {
        match given {
            Some(bytes) => Some(api::DeviceTotal {
                total_bytes: bytes,
                source: api::DeviceTotalSource::Upload,
                detail: None,
            }),
            None => collector_device_total(&self.live, tags).await,
        }
    }

    /// Receives the body into `tmp` (hashed, synced) while the parser reads it on a blocking
    /// thread; the parser is joined on every path, so its files are never written after the
    /// guards removed them.
    async fn receive(
        &self,
        body: Body,
        tmp: &TempFile,
        progress: Arc<UploadProgress>,
        options: snapshot::analysis::Options,
    ) -> UploadResult<Received> {
        // Chunks received but not parsed yet: the parser is slower than a local client, so the
        // channel stays full, and 64 chunks held 15 MB more than 8 at the peak of a 164 MB
        // upload (89–90 against 75 MB; bench/README.md, issue 41) for no faster upload.
        let (tx, rx) = tokio::sync::mpsc::channel::<axum::body::Bytes>(8);
        // The engine reserves its tables from the size hint up front: a declared length is
        // only a claim (a Content-Length near the cap reserved ~4 GB of address space before a
        // byte arrived), so the hint is bounded and the tables grow with what really arrives.
        let limits = snapshot::Limits {
            size_hint_bytes: progress.total_bytes.min(MAX_RESERVE_HINT_BYTES),
            content_secret: Some(self.library.content_secret().clone()),
            ..self.limits.read.clone()
        };
        let slot = ParseSlot {
            slots: self.slots.clone(),
            held: None,
            runtime: tokio::runtime::Handle::current(),
        };
        let parser = spawn_parser(rx, progress.clone(), slot, limits, options);
        // Fused: the drain loop below may poll again after the end.
        let mut stream = body.into_data_stream().fuse();
        let mut sink = Sink {
            original: None,
            size: 0,
            limit: self.limits.max_bytes,
            progress,
            rate: RateFloor {
                min_bytes_per_s: self.limits.min_bytes_per_s,
                window: self.limits.rate_window,
                started: Instant::now(),
                bytes: 0,
            },
        };
        // When the last byte of the body arrived: the indexing after it is what the client
        // waits for once its upload is sent (logged as `after_last_byte_ms`).
        let mut last_byte_at = Instant::now();
        // Receive until the end or the parser stops, within the upload's time budget.
        let receiving = Instant::now();
        let declared = sink.progress.total_bytes;
        let limits = self.limits.clone();
        let budget =
            move |received: u64| limits.time_budget(if declared > 0 { declared } else { received });
        let received: UploadResult<()> = async {
            sink.original = Some(Original::create(&tmp.0).await?);
            let mut tx = Some(tx);
            while let Some(chunk) = next_within(&mut stream, receiving, budget(sink.size)).await? {
                let chunk = sink.take(chunk).await?;
                last_byte_at = Instant::now();
                if let Some(t) = &tx
                    && t.send(chunk).await.is_err()
                {
                    // The parser stopped: either it failed (reject now) or the pickle ended
                    // early.
                    tx = None;
                    if parser.is_finished() {
                        break;
                    }
                }
            }
            Ok(())
        }
        .await;
        let parsed = parser.await.map_err(|e| UploadError::Internal(e.into()))?;
        received?;
        if sink.size == 0 {
            return Err(UploadError::Unreadable("the upload is empty".into()));
        }
        let (snap, index, report, parsed_at) = parsed?;
        let parsed_after_last_byte = parsed_at.saturating_duration_since(last_byte_at);
        // Store what the parser did not need (trailing bytes after the pickle's STOP).
        while let Some(chunk) = next_within(&mut stream, receiving, budget(sink.size)).await? {
            sink.take(chunk).await?;
            last_byte_at = Instant::now();
        }
        let (sha256, size_bytes) = sink.close().await?;
        Ok(Received {
            sha256,
            size_bytes,
            snap,
            index,
            report,
            last_byte_at,
            parsed_after_last_byte,
        })
    }

    /// The entry that stands for these bytes or this snapshot, if one was committed before, with
    /// its report. One gone since (a delete racing this upload) stands for nothing: this
    /// upload's own copy is committed.
    async fn standing(
        &self,
        sha256: &str,
        content_hash: &str,
        report: &api::Report,
    ) -> UploadResult<Option<Uploaded>> {
        let existing = match self.library.find_by_sha(sha256).await? {
            Some(e) => Some(e),
            None => self.library.find_by_content(content_hash).await?,
        };
        let Some(existing) = existing else {
            return Ok(None);
        };
        let report = self.library.standing_report(&existing.id, report).await?;
        Ok(report.map(|report| Uploaded {
            created: false,
            snapshot: existing,
            report,
        }))
    }

    /// Writes a committed upload's model file, index included, in the background: it is a
    /// cache (`library::models` rebuilds a missing one from the original), so the client is
    /// answered without waiting for it. A failure is logged; the next load after the snapshot
    /// leaves memory rebuilds the file.
    fn write_model_later(&self, id: String, sha256: String, loaded: Arc<Loaded>) {
        let lib = self.library.clone();
        let counted = lib.model_write();
        tokio::spawn(async move {
            let _counted = counted;
            let started = Instant::now();
            let origin = sha256.clone();
            let warm = loaded.clone();
            let placed = lib
                .write_model(&id, &sha256, Waited::ByNoOne, move |path| {
                    write_model_file(&loaded.snap, &loaded.index, &origin, path)
                })
                .await;
            // The segment view's frees that waited, found once here at the lowest priority and
            // kept with the model, so that the view's first load does not compute them beside
            // the page (64 ms on a 12M-event trace, 0.2–0.4 s while the page built itself).
            // The labels were found by the report.
            let _ = super::models::warm(warm).await;
            match placed {
                Ok(placed) => tracing::info!(
                    id,
                    placed,
                    model_write_ms = started.elapsed().as_millis() as u64,
                    model_bytes = std::fs::metadata(lib.model_path(&sha256)).map_or(0, |m| m.len()),
                    "model file written after the answer"
                ),
                Err(e) => {
                    tracing::warn!(id, error = %e, "could not write the model file; it is rebuilt from the original when next needed")
                }
            }
        });
    }
}

/// Parses and analyses the upload's bytes as they arrive through `rx`, on a blocking thread.
/// The trace is indexed while it is parsed, so only the reconciliation with the final segments
/// is left when the last byte arrives; the model file is written after the answer.
fn spawn_parser(
    rx: tokio::sync::mpsc::Receiver<axum::body::Bytes>,
    progress: Arc<UploadProgress>,
    slot: ParseSlot,
    limits: snapshot::Limits,
    options: snapshot::analysis::Options,
) -> tokio::task::JoinHandle<
    UploadResult<(
        snapshot::Snapshot,
        snapshot::analysis::Index,
        api::Report,
        Instant,
    )>,
> {
    tokio::task::spawn_blocking(move || {
        // Held to the end of this thread: the report is work too.
        let mut reader = ChannelReader {
            rx,
            current: axum::body::Bytes::new(),
            progress,
            slot,
            ended: false,
        };
        let (snap, index) =
            snapshot::read_indexed_with_limits(&mut reader, limits).map_err(|e| match e {
                snapshot::Error::Busy { .. } => UploadError::Busy(e.to_string()),
                e => UploadError::Unreadable(e.to_string()),
            })?;
        let parsed_at = Instant::now();
        let report = crate::convert::report(snapshot::analysis::report(&snap, &index, &options));
        Ok((snap, index, report, parsed_at))
    })
}

/// The library entry of a received upload.
fn snapshot_info(
    got: &Received,
    name: String,
    tags: Vec<Tag>,
    device_total: Option<api::DeviceTotal>,
    index_ms: u64,
) -> SnapshotInfo {
    SnapshotInfo {
        id: got.sha256[..16].to_string(),
        sha256: got.sha256.clone(),
        name,
        uploaded_at_ms: crate::now_ms(),
        index_ms,
        tags,
        device_total,
        ..SnapshotInfo::from_report(&got.report, got.snap.trace.len() as u64, got.size_bytes)
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;
    use std::sync::Arc;
    use std::sync::atomic::Ordering;

    use super::{ChannelReader, ParseSlot, UploadProgress};

    /// Asked for more past the body's end again and again (as the parser once did, 1,561 times
    /// in one 164 MB upload), the reader trims the heap the first time only (a trim at each
    /// ask held that upload's answer back by up to 150 ms).
    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn the_heap_is_trimmed_once_at_the_bodys_end() {
        let (tx, rx) = tokio::sync::mpsc::channel(2);
        tx.send(axum::body::Bytes::from_static(b"abc"))
            .await
            .unwrap();
        tx.send(axum::body::Bytes::from_static(b"def"))
            .await
            .unwrap();
        drop(tx);
        let progress = Arc::new(UploadProgress::default());
        let mut reader = ChannelReader {
            rx,
            current: axum::body::Bytes::new(),
            progress: progress.clone(),
            slot: ParseSlot {
                slots: Arc::new(tokio::sync::Semaphore::new(1)),
                held: None,
                runtime: tokio::runtime::Handle::current(),
            },
            ended: false,
        };
        let (body, trims) = tokio::task::spawn_blocking(move || {
            let before = crate::HEAP_RELEASES.load(Ordering::Relaxed);
            let mut body = Vec::new();
            reader.read_to_end(&mut body).unwrap();
            let mut buf = [0u8; 16];
            for _ in 0..100 {
                assert_eq!(reader.read(&mut buf).unwrap(), 0, "the end stays the end");
            }
            (body, crate::HEAP_RELEASES.load(Ordering::Relaxed) - before)
        })
        .await
        .unwrap();
        assert_eq!(body, b"abcdef");
        assert_eq!(trims, 1);
        assert_eq!(progress.parsed_bytes.load(Ordering::Relaxed), 6);
    }
}
