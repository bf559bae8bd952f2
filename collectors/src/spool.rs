//! The on-disk spool: every batch is written here (gzip JSON, fsynced, renamed into place) before
//! anything tries to send it, and removed only when the server acknowledged it. A collector that
//! restarts finds its unsent batches and its next sequence number.
//!
//! Each spool has a random id, created with it and written atomically (`spool_id`), that every
//! batch carries: a collector started with a fresh spool (new container, wiped disk, another
//! working directory) numbers its batches in a new space, so the server never mistakes them for
//! batches it has seen (issue 13, finding 1).
//!
//! Losing the disk does not stop the collector: when a batch cannot be written (disk full,
//! read-only, folder gone) it is kept in memory (bounded) and shipped from there, and what does
//! not fit is dropped and counted. Every drop — the spool's size cap, the memory bound — is
//! carried by the next batch that is stored, and a dropped batch's own report of earlier drops is
//! carried forward, so the server's count of lost samples is exact.

use std::collections::VecDeque;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Batches kept in memory while the disk cannot take them, at most this many bytes (gzip).
const MEMORY_MAX_BYTES: u64 = 32 << 20;

#[derive(Debug)]
pub struct Spool {
    dir: PathBuf,
    id: String,
    /// Whether `id` is the one in the folder's `spool_id` file. An id is kept only in memory
    /// while the disk refuses `next_seq`: numbers not persisted are reused by the next start,
    /// so they must not be numbered under the folder's id.
    id_saved: bool,
    max_bytes: u64,
    next_seq: u64,
    /// Samples in batches dropped and not yet reported to the server.
    pub dropped_samples: u64,
    /// Batches the disk refused, oldest first: (seq, gzip JSON).
    memory: VecDeque<(u64, Vec<u8>)>,
    /// Why the disk was last refused, while it still is (for one log line per outage).
    pub disk_error: Option<String>,
}

fn seq_of(path: &Path) -> Option<u64> {
    path.file_name()?
        .to_str()?
        .strip_suffix(".json.gz")?
        .parse()
        .ok()
}

/// Samples a batch holds, and those it reports dropped before it: what is lost if it is dropped.
fn weight(b: &wire::Batch) -> u64 {
    (b.gpus.len() + b.processes.len() + b.allocator.len()) as u64 + b.dropped_samples
}

/// Writes `bytes` to `dir/name` so that a crash leaves the old content or the new, never half:
/// a temporary file, fsynced, renamed over the name, then the folder fsynced.
pub fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = dir.join(format!("{name}.part"));
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, dir.join(name))?;
    sync_dir(dir);
    Ok(())
}

fn sync_dir(dir: &Path) {
    // Best effort: some filesystems cannot fsync a folder.
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
}

/// A new spool id: 128 random bits from the OS, in hex.
fn new_id() -> String {
    use std::io::Read;
    let mut b = [0u8; 16];
    let from_os = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut b));
    if from_os.is_err() {
        // No /dev/urandom: the clock and pid, hashed by std's random-keyed hasher.
        use std::hash::{BuildHasher, Hasher};
        for half in b.chunks_mut(8) {
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u128(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos()),
            );
            h.write_u32(std::process::id());
            half.copy_from_slice(&h.finish().to_le_bytes());
        }
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Where the spool lives unless `--spool-dir` says otherwise: the user's state folder
/// (`$XDG_STATE_HOME/memscope/spool`, else `~/.local/state/memscope/spool`), not the working
/// directory, so a collector started from elsewhere finds the same spool.
pub fn default_dir() -> PathBuf {
    let state = std::env::var_os("XDG_STATE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".local/state"))
        })
        .unwrap_or_else(|| PathBuf::from("/var/lib"));
    state.join("memscope/spool")
}

impl Spool {
    /// Opens (creating) the spool in `dir`: its id (created now if it has none), its next
    /// sequence number, its unsent batches; removes half-written files from a crash.
    ///
    /// A folder that cannot be created or written is not fatal: the spool runs in memory with a
    /// fresh id (`disk_error` says why) and tries the disk again with every batch.
    pub fn open(dir: &Path, max_bytes: u64) -> Spool {
        let mut s = Spool {
            dir: dir.to_path_buf(),
            id: String::new(),
            id_saved: false,
            max_bytes,
            next_seq: 1,
            dropped_samples: 0,
            memory: VecDeque::new(),
            disk_error: None,
        };
        if let Err(e) = s.load() {
            s.id = new_id();
            s.disk_error = Some(format!(
                "cannot use the spool folder {}: {e}",
                dir.display()
            ));
        }
        s
    }

    fn load(&mut self) -> std::io::Result<()> {
        let dir = &self.dir;
        std::fs::create_dir_all(dir)?;
        let mut max_seen = 0;
        for e in std::fs::read_dir(dir)? {
            let path = e?.path();
            match seq_of(&path) {
                Some(seq) => max_seen = max_seen.max(seq),
                None if path.extension().is_some_and(|x| x == "part") => {
                    std::fs::remove_file(&path)?
                }
                None => {}
            }
        }
        let read = |name: &str| std::fs::read_to_string(dir.join(name)).ok();
        self.id = match read("spool_id").map(|s| s.trim().to_string()) {
            Some(id) if !id.is_empty() => id,
            _ => {
                let id = new_id();
                write_atomic(dir, "spool_id", id.as_bytes())?;
                id
            }
        };
        self.id_saved = true;
        let stored: u64 = read("next_seq")
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(1);
        self.next_seq = stored.max(max_seen + 1);
        self.dropped_samples = read("dropped")
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0);
        Ok(())
    }

    /// The spool's id, which every batch from it carries.
    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The sequence number the next batch gets, persisted first so numbers only increase across
    /// restarts. A disk that refuses it does not stop the batch: the spool goes on under a fresh
    /// id kept in memory (the next start, reading the old `next_seq`, would number batches the
    /// server has stored under the folder's id again: every one a conflict), saved once the
    /// disk takes it; `disk_error` says why.
    fn take_seq(&mut self) -> u64 {
        if !self.save_next_seq(self.next_seq + 1) && self.id_saved {
            self.id = new_id();
            self.id_saved = false;
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        seq
    }

    /// Persists `next` as the next sequence number (then the id, if it is not saved yet): true
    /// if the disk took both. In this order, a crash between the two leaves the folder's old id
    /// with a next number past every one used under either id.
    fn save_next_seq(&mut self, next: u64) -> bool {
        let saved = (|| {
            write_atomic(&self.dir, "next_seq", next.to_string().as_bytes())?;
            if !self.id_saved {
                write_atomic(&self.dir, "spool_id", self.id.as_bytes())?;
            }
            Ok::<(), std::io::Error>(())
        })();
        match saved {
            Ok(()) => {
                self.id_saved = true;
                true
            }
            Err(e) => {
                self.disk_error.get_or_insert(e.to_string());
                false
            }
        }
    }

    /// A new, empty batch from this spool: the next sequence number, the spool's id, and the
    /// drops not yet reported.
    pub fn batch(&mut self, collector: &str, host: &str) -> wire::Batch {
        let seq = self.take_seq();
        wire::Batch {
            spool_id: Some(self.id.clone()),
            dropped_samples: self.dropped_samples,
            ..wire::Batch::new(collector, seq, host)
        }
    }

    fn path(&self, seq: u64) -> PathBuf {
        self.dir.join(format!("{seq:020}.json.gz"))
    }

    /// Keeps a batch until it is acknowledged: on disk (durably), else in memory. The drops it
    /// reports are then its to deliver. Returns whether it reached the disk.
    pub fn push(&mut self, batch: &wire::Batch) -> std::io::Result<bool> {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        serde_json::to_writer(&mut gz, batch)?;
        let body = gz.finish()?;
        self.dropped_samples = self.dropped_samples.saturating_sub(batch.dropped_samples);
        let on_disk = match self.write_batch(batch.seq, &body) {
            Ok(()) => {
                self.disk_error = None;
                true
            }
            Err(e) => {
                self.disk_error.get_or_insert(e.to_string());
                self.memory.push_back((batch.seq, body));
                false
            }
        };
        self.enforce_caps();
        self.save_dropped();
        Ok(on_disk)
    }

    fn write_batch(&self, seq: u64, body: &[u8]) -> std::io::Result<()> {
        let part = self.dir.join(format!("{seq:020}.part"));
        let written = (|| {
            let mut f = std::fs::File::create(&part)?;
            f.write_all(body)?;
            f.sync_all()?;
            std::fs::rename(&part, self.path(seq))
        })();
        if written.is_err() {
            let _ = std::fs::remove_file(&part);
        }
        written
    }

    fn save_dropped(&self) {
        if self.disk_error.is_none() {
            // Best effort: the count also rides in memory and in the next batch.
            let _ = write_atomic(
                &self.dir,
                "dropped",
                self.dropped_samples.to_string().as_bytes(),
            );
        }
    }

    fn batches(&self) -> std::io::Result<Vec<(u64, PathBuf, u64)>> {
        let mut v = Vec::new();
        for e in std::fs::read_dir(&self.dir)? {
            let e = e?;
            if let Some(seq) = seq_of(&e.path()) {
                v.push((seq, e.path(), e.metadata()?.len()));
            }
        }
        v.sort_by_key(|(s, _, _)| *s);
        Ok(v)
    }

    /// Drops the oldest batches beyond the disk cap and the memory bound, counting what they held.
    fn enforce_caps(&mut self) {
        let mut lost = 0;
        if let Ok(mut batches) = self.batches() {
            let mut total: u64 = batches.iter().map(|(_, _, len)| len).sum();
            while total > self.max_bytes && batches.len() > 1 {
                let (_, path, len) = batches.remove(0);
                lost += read_batch(&path).map_or(0, |b| weight(&b));
                if std::fs::remove_file(&path).is_err() {
                    break;
                }
                total -= len;
            }
        }
        let bound = MEMORY_MAX_BYTES.min(self.max_bytes);
        let mut total: u64 = self.memory.iter().map(|(_, b)| b.len() as u64).sum();
        while total > bound && self.memory.len() > 1 {
            let (_, body) = self.memory.pop_front().expect("not empty");
            total -= body.len() as u64;
            lost += decode(&body).map_or(0, |b| weight(&b));
        }
        self.dropped_samples += lost;
    }

    /// Unsent batches' sequence numbers, newest first (fresh data goes ahead of a backlog).
    pub fn pending(&self) -> std::io::Result<Vec<u64>> {
        let mut seqs: Vec<u64> = match self.batches() {
            Ok(b) => b.into_iter().map(|(s, _, _)| s).collect(),
            Err(_) if self.disk_error.is_some() => Vec::new(),
            Err(e) => return Err(e),
        };
        seqs.extend(self.memory.iter().map(|(s, _)| *s));
        seqs.sort_unstable_by(|a, b| b.cmp(a));
        seqs.dedup();
        Ok(seqs)
    }

    /// The body to send for `seq` (gzip JSON), from memory or disk.
    pub fn body(&self, seq: u64) -> std::io::Result<Vec<u8>> {
        match self.memory.iter().find(|(s, _)| *s == seq) {
            Some((_, body)) => Ok(body.clone()),
            None => std::fs::read(self.path(seq)),
        }
    }

    /// The server acknowledged `seq`: forget it.
    pub fn ack(&mut self, seq: u64) -> std::io::Result<()> {
        self.memory.retain(|(s, _)| *s != seq);
        match std::fs::remove_file(self.path(seq)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// The server refused `seq` for good (its key was stored with other content, or it is
    /// malformed): moved out of the way into `folder` (`conflicts/`, `refused/`), kept for an
    /// operator, never deleted.
    pub fn set_aside(&mut self, seq: u64, folder: &str) -> std::io::Result<PathBuf> {
        let dir = self.dir.join(folder);
        std::fs::create_dir_all(&dir)?;
        let to = dir.join(format!("{}-{seq:020}.json.gz", self.id));
        match self.memory.iter().position(|(s, _)| *s == seq) {
            Some(i) => {
                let (_, body) = self.memory.remove(i).expect("found");
                std::fs::write(&to, body)?;
            }
            None => std::fs::rename(self.path(seq), &to)?,
        }
        Ok(to)
    }
}

/// The spool id a spooled batch (gzip JSON) was numbered under: the id its acknowledgement must
/// echo, which is not the spool's current one for a batch from before the id changed.
pub fn spool_id_of(gz: &[u8]) -> Option<String> {
    decode(gz).ok()?.spool_id
}

fn decode(gz: &[u8]) -> std::io::Result<wire::Batch> {
    serde_json::from_reader(flate2::read::GzDecoder::new(gz)).map_err(std::io::Error::other)
}

/// Reads a spooled batch (for tests and for counting drops).
pub fn read_batch(path: &Path) -> std::io::Result<wire::Batch> {
    decode(&std::fs::read(path)?)
}

/// Writes `bytes` as the body of a new file (used by tests to fake a crash mid-write).
pub fn write_raw(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    std::fs::File::create(path)?.write_all(bytes)
}
