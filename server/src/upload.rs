//! Snapshot uploads: the body is streamed to a temporary file (hashed on the way, never held whole
//! in memory) and, at the same time, parsed and analysed on a blocking thread (the async runtime
//! keeps serving; indexing overlaps the transfer), deduplicated by content hash, and handed to
//! `Library::commit` (the original renamed into place, then the row); the model file, index
//! included, is written after the answer. Any failure removes the temporary files, so a bad or
//! interrupted upload leaves nothing behind. Errors are `UploadError`s; the
//! HTTP layer turns them into answers.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use futures_util::StreamExt;
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;

use crate::library::{SnapshotInfo, Tag, write_model_file};
use crate::models::Loaded;
use crate::state::{AppState, UploadProgress};

/// Why an upload was not stored.
#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    /// The client stopped sending (or the connection broke) before the end.
    #[error("{0}")]
    Interrupted(String),
    #[error("upload is larger than the limit of {limit_bytes} bytes")]
    TooLarge { limit_bytes: u64 },
    /// The client sent too slowly to keep a parse slot (see `--min-upload-rate`).
    #[error(
        "the upload arrived at {got_bytes_per_s} bytes/s, below the server's minimum of {min_bytes_per_s} bytes/s \
         (--min-upload-rate); it was cut off so that slow clients cannot hold every parse slot"
    )]
    TooSlow {
        got_bytes_per_s: u64,
        min_bytes_per_s: u64,
    },
    /// Not a snapshot memscope can read: the engine's message, for the user.
    #[error("{0}")]
    Unreadable(String),
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

/// Deletes a temporary file when dropped (every early return and error path).
struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn unique_name(prefix: &str) -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{prefix}-{}-{n}", std::process::id())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Where upload bytes go: the temporary file and the hash, with the size limit checked.
struct Sink {
    file: Option<tokio::fs::File>,
    hasher: Sha256,
    size: u64,
    limit: u64,
    progress: Arc<UploadProgress>,
    rate: RateFloor,
    /// Bytes known to be on disk, and the sync in flight: the original is synced as it arrives,
    /// so the sync before the commit has only the tail left (on a 1 GB upload a single sync at
    /// the end held the answer back by most of a second).
    synced_bytes: u64,
    syncing: Option<(u64, tokio::task::JoinHandle<std::io::Result<()>>)>,
}

/// How much of an upload is written between two background syncs of the original.
const SYNC_EVERY_BYTES: u64 = 128 << 20;

/// The slowest an upload may arrive while it holds a parse slot: at least `min_bytes_per_s`,
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
        self.hasher.update(&chunk);
        self.file
            .as_mut()
            .expect("file created before receiving")
            .write_all(&chunk)
            .await?;
        if self.syncing.as_ref().is_some_and(|(_, h)| h.is_finished()) {
            self.settle().await?;
        }
        if self.syncing.is_none() && self.size - self.synced_bytes >= SYNC_EVERY_BYTES {
            let file = self.file.as_mut().expect("file created before receiving");
            file.flush().await?;
            let std = file.try_clone().await?.into_std().await;
            let upto = self.size;
            self.syncing = Some((upto, tokio::task::spawn_blocking(move || std.sync_data())));
        }
        Ok(chunk)
    }

    /// Waits for the background sync in flight, if any.
    async fn settle(&mut self) -> UploadResult<()> {
        if let Some((upto, sync)) = self.syncing.take() {
            sync.await.map_err(|e| UploadError::Internal(e.into()))??;
            self.synced_bytes = upto;
        }
        Ok(())
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

/// Feeds upload chunks from the async side to the parser thread.
struct ChannelReader {
    rx: tokio::sync::mpsc::Receiver<axum::body::Bytes>,
    current: axum::body::Bytes,
    progress: Arc<UploadProgress>,
}

impl std::io::Read for ChannelReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.current.is_empty() {
            match self.rx.blocking_recv() {
                Some(b) => self.current = b,
                None => return Ok(0),
            }
        }
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

/// Writes a committed upload's model file, index included, in the background: it is a cache
/// (`crate::models` rebuilds a missing one from the original), so the client is answered without
/// waiting for it. A failure is logged; the next load after the snapshot leaves memory rebuilds
/// the file.
fn write_model_later(state: &AppState, id: String, sha256: String, loaded: Arc<Loaded>) {
    let lib = state.library.clone();
    let counted = lib.model_write();
    tokio::spawn(async move {
        let _counted = counted;
        let started = Instant::now();
        let tmp = TempFile(lib.tmp_path(&format!("{}.msmodel", unique_name("model"))));
        let path = tmp.0.clone();
        let written = tokio::task::spawn_blocking(move || {
            write_model_file(&loaded.snap, &loaded.index, &path)
        })
        .await
        .map_err(anyhow::Error::from)
        .and_then(|w| w.map_err(anyhow::Error::from));
        let placed = match written {
            Ok(()) => lib.place_model(&id, &sha256, &tmp.0).await,
            Err(e) => Err(e),
        };
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

/// Stores, parses and commits one upload. The body goes to a temporary file (hashed on the way)
/// and, at the same time, to the parser on a blocking thread, so indexing overlaps the transfer;
/// a file the parser rejects ends the upload at once.
///
/// The work runs in its own task, so a client that disconnects does not cut it short from
/// outside: its body ends in an error, the parser sees the end of its input and stops, and only
/// then are the parse slot released and the temporary files removed (issue 13, finding 4). An
/// upload whose body had fully arrived is committed even if its client is gone.
pub async fn upload(
    state: &AppState,
    name: String,
    tags: Vec<Tag>,
    device_total: Option<u64>,
    body: Body,
    progress: Arc<UploadProgress>,
) -> UploadResult<Uploaded> {
    let state = state.clone();
    tokio::spawn(async move { upload_task(&state, name, tags, device_total, body, progress).await })
        .await
        .map_err(|e| UploadError::Internal(e.into()))?
}

async fn upload_task(
    state: &AppState,
    name: String,
    tags: Vec<Tag>,
    device_total: Option<u64>,
    body: Body,
    progress: Arc<UploadProgress>,
) -> UploadResult<Uploaded> {
    let size_hint = progress.total_bytes;
    let lib = &state.library;
    let started = Instant::now();
    let device_total = match device_total {
        Some(bytes) => Some(api::DeviceTotal {
            total_bytes: bytes,
            source: api::DeviceTotalSource::Upload,
            detail: None,
        }),
        None => collector_device_total(&state.live, &tags).await,
    };
    let options = snapshot::analysis::Options {
        device_total_bytes: device_total.as_ref().map(|t| t.total_bytes),
    };
    let _slot = state
        .index_slots
        .acquire()
        .await
        .map_err(|e| UploadError::Internal(e.into()))?;
    let tmp = TempFile(lib.tmp_path(&unique_name("upload")));
    let (tx, rx) = tokio::sync::mpsc::channel::<axum::body::Bytes>(64);
    let parse_progress = progress.clone();
    let limits = state.config.read_limits(size_hint);
    let parser = tokio::task::spawn_blocking(move || -> UploadResult<_> {
        let reader = ChannelReader {
            rx,
            current: axum::body::Bytes::new(),
            progress: parse_progress,
        };
        // The trace is indexed while it is parsed, so only the reconciliation with the final
        // segments is left when the last byte arrives.
        let (snap, index) = snapshot::read_indexed_with_limits(reader, limits)
            .map_err(|e| UploadError::Unreadable(e.to_string()))?;
        let parsed_at = Instant::now();
        // The model file is written after the answer (`write_model_later`).
        let report = crate::convert::report(snapshot::analysis::report(&snap, &index, &options));
        Ok((snap, index, report, parsed_at))
    });

    // Fused: the drain loop below may poll again after the end.
    let mut stream = body.into_data_stream().fuse();
    let mut sink = Sink {
        file: None,
        hasher: Sha256::new(),
        size: 0,
        limit: state.config.max_upload_bytes,
        progress,
        rate: RateFloor {
            min_bytes_per_s: state.config.min_upload_bytes_per_s,
            window: state.config.conn_limits().body_idle_timeout,
            started: Instant::now(),
            bytes: 0,
        },
        synced_bytes: 0,
        syncing: None,
    };
    // When the last byte of the body arrived: the indexing after it is what the client waits
    // for once its upload is sent (logged as `after_last_byte_ms`).
    let mut last_byte_at = Instant::now();
    // Receive until the end or the parser stops; the parser is joined on every path, so its
    // files are never written after the guards removed them.
    let received: UploadResult<()> = async {
        sink.file = Some(tokio::fs::File::create(&tmp.0).await?);
        let mut tx = Some(tx);
        while let Some(chunk) = stream.next().await {
            let chunk = sink.take(chunk).await?;
            last_byte_at = Instant::now();
            if let Some(t) = &tx
                && t.send(chunk).await.is_err()
            {
                // The parser stopped: either it failed (reject now) or the pickle ended early.
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
    let receive_ms = started.elapsed().as_millis() as u64;
    let analysed_after_last_byte = last_byte_at.elapsed();
    if sink.size == 0 {
        return Err(UploadError::Unreadable("the upload is empty".into()));
    }
    let (snap, index, report, parsed_at) = parsed?;
    let parsed_after_last_byte = parsed_at.saturating_duration_since(last_byte_at);
    // Store what the parser did not need (trailing bytes after the pickle's STOP).
    while let Some(chunk) = stream.next().await {
        sink.take(chunk).await?;
        last_byte_at = Instant::now();
    }
    sink.settle().await?;
    let Sink {
        file, hasher, size, ..
    } = sink;
    let file = file.expect("created above");
    file.sync_all().await?;
    drop(file);
    let sha = hex(&hasher.finalize());
    // The same bytes, or the same snapshot compressed another way: the entry that stands.
    let content_hash = format!("{:032x}", snap.content_hash);
    let existing = match lib.find_by_sha(&sha).await? {
        Some(e) => Some(e),
        None => lib.find_by_content(&content_hash).await?,
    };
    if let Some(existing) = existing {
        // Gone since (a delete racing this upload): this upload's own copy is committed below.
        if let Some(report) = lib.standing_report(&existing.id, &report).await? {
            return Ok(Uploaded {
                created: false,
                snapshot: existing,
                report,
            });
        }
    }
    let index_ms = started.elapsed().as_millis() as u64;
    let committed = Instant::now();

    let id = sha[..16].to_string();
    let (peak_bytes, peak_reserved_bytes) = report.peaks();
    let info = SnapshotInfo {
        id: id.clone(),
        sha256: sha.clone(),
        name,
        uploaded_at_ms: crate::now_ms(),
        size_bytes: size,
        decoded_bytes: report.format.decoded_bytes,
        encoding: report.format.encoding,
        compression: report.format.compression,
        devices: report.devices.keys().copied().collect(),
        entries: snap.trace.len() as u64,
        peak_bytes,
        peak_reserved_bytes,
        reserved_bytes: report.reserved_bytes,
        allocated_bytes: report.allocated_bytes,
        leak_suspects: report.leak_suspects.len() as u64,
        ooms: report.ooms.len() as u64,
        warnings: report.warnings.len() as u64,
        index_ms,
        tags,
        device_total,
    };
    let (info, created, report) = lib.commit(&info, &content_hash, report, &tmp.0).await?;
    if !created {
        // The same bytes were committed by a concurrent upload; theirs stands.
        return Ok(Uploaded {
            created: false,
            snapshot: info,
            report,
        });
    }
    let commit_ms = committed.elapsed().as_millis() as u64;
    tracing::info!(
        id,
        size,
        entries = info.entries,
        receive_ms,
        index_ms,
        commit_ms,
        parsed_after_last_byte_ms = parsed_after_last_byte.as_millis() as u64,
        analysed_after_last_byte_ms = analysed_after_last_byte.as_millis() as u64,
        after_last_byte_ms = last_byte_at.elapsed().as_millis() as u64,
        "snapshot ingested (index_ms counts from the first byte; after_last_byte_ms: from the body's last byte to the commit)"
    );
    let loaded = Arc::new(Loaded { snap, index });
    state.models.insert(&id, loaded.clone());
    write_model_later(state, id, info.sha256.clone(), loaded);
    Ok(Uploaded {
        created: true,
        snapshot: info,
        report,
    })
}
