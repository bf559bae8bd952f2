//! An upload's original bytes on their way to disk: a thread of its own hashes each chunk
//! (SHA-256, the library's name for the bytes) and appends it to the temporary file, syncing as
//! it goes, while the receive loop goes back to the socket.
//!
//! Why a thread: done in the receive loop, each chunk was hashed there and then waited for its
//! write on the blocking pool (`tokio::fs` copies each chunk and hands it to a pool thread, one
//! at a time). A 164 MB upload from Chromium, in 2,400–5,200 chunks, spent 0.37–0.50 s of its
//! 0.75–0.9 s in those waits while its next bytes sat in the socket and the parser waited for
//! them. On the writer's thread, choosing real_bert_164m in the dashboard went from 0.98–1.11 s
//! to 0.80–0.94 s, medians of 8–10 rounds alternated (bench/README.md, issue 41). The chunks are
//! `Bytes`: the parser's queue and this one share them.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::body::Bytes;
use sha2::{Digest, Sha256};

/// Chunks queued for the writer (hyper's chunks are 400 KiB at most). Behind a browser the
/// writer keeps up and the queue is short; behind a fast local client it is the slower side and
/// the receive loop waits for it. 16 chunks were no faster than 4 in the dashboard and held
/// ~5 MB more at an upload's peak (bench/README.md, issue 41).
const QUEUE_CHUNKS: usize = 4;

/// How much of an upload is written between two background syncs of the original: the sync
/// before the commit has only the tail left (on a 1 GB upload a single sync at the end held the
/// answer back by most of a second).
const SYNC_EVERY_BYTES: u64 = 128 << 20;

/// The writer of one upload's original. Dropped without [`Original::finish`] (the upload
/// failed), the writer writes what it was given and stops without syncing.
pub struct Original {
    tx: Option<tokio::sync::mpsc::Sender<Bytes>>,
    finishing: Arc<AtomicBool>,
    /// Taken when awaited: once after a failed push, or by `finish`.
    writer: Option<tokio::task::JoinHandle<std::io::Result<(String, u64)>>>,
}

impl Original {
    /// Creates the file at `path` and starts its writer.
    pub async fn create(path: &Path) -> std::io::Result<Original> {
        let path = path.to_path_buf();
        let file = tokio::task::spawn_blocking(move || std::fs::File::create(path))
            .await
            .map_err(std::io::Error::other)??;
        let (tx, rx) = tokio::sync::mpsc::channel(QUEUE_CHUNKS);
        let finishing = Arc::new(AtomicBool::new(false));
        let writer = tokio::task::spawn_blocking({
            let finishing = finishing.clone();
            move || write(file, rx, &finishing)
        });
        Ok(Original {
            tx: Some(tx),
            finishing,
            writer: Some(writer),
        })
    }

    /// Queues `chunk` to be hashed and written; waits only while the queue is full. A writer
    /// that stopped (a failed write) answers with its error.
    pub async fn push(&mut self, chunk: Bytes) -> std::io::Result<()> {
        let tx = self.tx.as_ref().expect("pushed after finish");
        if tx.send(chunk).await.is_ok() {
            return Ok(());
        }
        self.tx = None;
        Err(match self.writer().await {
            Err(e) => e,
            Ok(_) => std::io::Error::other("the original's writer stopped early"),
        })
    }

    /// Waits for every chunk to be written and the file synced: the original's SHA-256 (hex)
    /// and size.
    pub async fn finish(mut self) -> std::io::Result<(String, u64)> {
        self.finishing.store(true, Ordering::SeqCst);
        self.tx = None;
        self.writer().await
    }

    /// The writer's result, the first time it is asked for.
    async fn writer(&mut self) -> std::io::Result<(String, u64)> {
        match self.writer.take() {
            Some(writer) => writer.await.map_err(std::io::Error::other)?,
            None => Err(std::io::Error::other(
                "the original's writer already stopped",
            )),
        }
    }
}

/// The writer's thread: every chunk hashed and appended in order; a sync started in the
/// background after each [`SYNC_EVERY_BYTES`]; at the end, if the upload is finishing, the
/// last sync.
fn write(
    mut file: std::fs::File,
    mut rx: tokio::sync::mpsc::Receiver<Bytes>,
    finishing: &AtomicBool,
) -> std::io::Result<(String, u64)> {
    let mut hasher = Sha256::new();
    let (mut size, mut synced) = (0u64, 0u64);
    let mut syncing: Option<(u64, std::thread::JoinHandle<std::io::Result<()>>)> = None;
    while let Some(chunk) = rx.blocking_recv() {
        hasher.update(&chunk);
        file.write_all(&chunk)?;
        size += chunk.len() as u64;
        if syncing.as_ref().is_some_and(|(_, s)| s.is_finished()) {
            synced = settle(syncing.take())?.unwrap_or(synced);
        }
        if syncing.is_none() && size - synced >= SYNC_EVERY_BYTES {
            let copy = file.try_clone()?;
            syncing = Some((size, std::thread::spawn(move || copy.sync_data())));
        }
    }
    if !finishing.load(Ordering::SeqCst) {
        return Err(std::io::Error::other("the upload stopped"));
    }
    settle(syncing)?;
    file.sync_all()?;
    Ok((crate::hex(&hasher.finalize()), size))
}

/// Waits for a background sync: the bytes it made durable.
fn settle(
    syncing: Option<(u64, std::thread::JoinHandle<std::io::Result<()>>)>,
) -> std::io::Result<Option<u64>> {
    let Some((upto, sync)) = syncing else {
        return Ok(None);
    };
    sync.join()
        .map_err(|_| std::io::Error::other("the original's sync panicked"))??;
    Ok(Some(upto))
}

#[cfg(test)]
mod tests {
    use super::Original;
    use axum::body::Bytes;
    use sha2::{Digest, Sha256};

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn the_original_is_written_and_hashed_in_order() {
        let path =
            std::env::temp_dir().join(format!("memscope-original-test-{}", std::process::id()));
        let mut original = Original::create(&path).await.unwrap();
        let mut all = Vec::new();
        for i in 0..200u32 {
            let chunk: Vec<u8> = (0..(i * 37 % 5000)).map(|b| (b ^ i) as u8).collect();
            all.extend_from_slice(&chunk);
            original.push(Bytes::from(chunk)).await.unwrap();
        }
        let (sha, size) = original.finish().await.unwrap();
        assert_eq!(size, all.len() as u64);
        assert_eq!(std::fs::read(&path).unwrap(), all);
        let want: String = Sha256::digest(&all)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(sha, want);
        std::fs::remove_file(&path).unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_failed_write_is_the_pushers_error() {
        // /dev/full takes no byte: every write fails with "No space left on device".
        let mut original = Original::create(std::path::Path::new("/dev/full"))
            .await
            .unwrap();
        let mut failed = None;
        for _ in 0..100 {
            if let Err(e) = original.push(Bytes::from(vec![0u8; 4096])).await {
                failed = Some(e);
                break;
            }
        }
        let e = failed.expect("a write to a full disk fails");
        assert_eq!(e.raw_os_error(), Some(28), "{e}");
        // Finishing after that is an error too, not a second wait on the stopped writer.
        assert!(original.finish().await.is_err());
    }
}
