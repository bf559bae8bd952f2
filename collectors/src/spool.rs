//! The on-disk spool: every batch is written here (gzip JSON, fsynced, renamed into place) before
//! anything tries to send it, and removed only when the server acknowledged it. A collector that
//! restarts finds its unsent batches and its next sequence number. The spool has a size cap;
//! batches dropped to stay under it are counted so the next batch can report the loss.

use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Debug)]
pub struct Spool {
    dir: PathBuf,
    max_bytes: u64,
    next_seq: u64,
    /// Samples in batches dropped to stay under the cap, not yet reported.
    pub dropped_samples: u64,
}

fn seq_of(path: &Path) -> Option<u64> {
    path.file_name()?
        .to_str()?
        .strip_suffix(".json.gz")?
        .parse()
        .ok()
}

impl Spool {
    /// Opens (creating) the spool in `dir`; removes half-written files from a crash.
    pub fn open(dir: &Path, max_bytes: u64) -> std::io::Result<Spool> {
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
        let stored: u64 = std::fs::read_to_string(dir.join("next_seq"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(1);
        Ok(Spool {
            dir: dir.to_path_buf(),
            max_bytes,
            next_seq: stored.max(max_seen + 1),
            dropped_samples: 0,
        })
    }

    /// The sequence number the next batch gets (persisted, so it increases across restarts).
    pub fn take_seq(&mut self) -> std::io::Result<u64> {
        let seq = self.next_seq;
        self.next_seq += 1;
        std::fs::write(self.dir.join("next_seq"), self.next_seq.to_string())?;
        Ok(seq)
    }

    fn path(&self, seq: u64) -> PathBuf {
        self.dir.join(format!("{seq:020}.json.gz"))
    }

    /// Appends a batch durably. Drops the oldest batches if the spool is over its cap.
    pub fn push(&mut self, batch: &wire::Batch) -> std::io::Result<()> {
        let part = self.dir.join(format!("{:020}.part", batch.seq));
        {
            let f = std::fs::File::create(&part)?;
            let mut gz = flate2::write::GzEncoder::new(
                std::io::BufWriter::new(f),
                flate2::Compression::fast(),
            );
            serde_json::to_writer(&mut gz, batch)?;
            let f = gz.finish()?.into_inner().map_err(|e| e.into_error())?;
            f.sync_all()?;
        }
        std::fs::rename(&part, self.path(batch.seq))?;
        self.enforce_cap()
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

    fn enforce_cap(&mut self) -> std::io::Result<()> {
        let mut batches = self.batches()?;
        let mut total: u64 = batches.iter().map(|(_, _, len)| len).sum();
        while total > self.max_bytes && batches.len() > 1 {
            let (_, path, len) = batches.remove(0);
            if let Ok(b) = read_batch(&path) {
                self.dropped_samples +=
                    (b.gpus.len() + b.processes.len() + b.allocator.len()) as u64;
            }
            std::fs::remove_file(&path)?;
            total -= len;
        }
        Ok(())
    }

    /// Unsent batches, newest first (fresh data goes ahead of a backlog).
    pub fn pending(&self) -> std::io::Result<Vec<(u64, PathBuf)>> {
        Ok(self
            .batches()?
            .into_iter()
            .rev()
            .map(|(s, p, _)| (s, p))
            .collect())
    }

    /// The server acknowledged `seq`: forget it.
    pub fn ack(&self, seq: u64) -> std::io::Result<()> {
        match std::fs::remove_file(self.path(seq)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

/// Reads a spooled batch (for tests and for counting drops).
pub fn read_batch(path: &Path) -> std::io::Result<wire::Batch> {
    let f = std::fs::File::open(path)?;
    serde_json::from_reader(flate2::read::GzDecoder::new(std::io::BufReader::new(f)))
        .map_err(std::io::Error::other)
}

/// Writes `bytes` as the body of a new file (used by tests to fake a crash mid-write).
pub fn write_raw(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    std::fs::File::create(path)?.write_all(bytes)
}
