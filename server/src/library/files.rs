//! The data folder, of which [`Library`] is the only writer: each snapshot's original, model
//! file and stored first views, placed and removed with its row under the files lock
//! (`db::Db::files_lock`).
//!
//! Layout of the data folder:
//! - `memscope.db`: the `snapshots` and `snapshot_tags` tables (`migrations/sqlite/`), unless the
//!   server runs on PostgreSQL.
//! - `originals/SHA256`: each upload exactly as received (the source of truth).
//! - `models/SHA256.msmodel`: the parsed tables (`snapshot::store`), so opening never re-parses.
//!   A cache: an upload is answered before its model file is written ([`Library::place_model`]),
//!   and a missing or damaged one is rebuilt from the original (`library::models`).
//! - `tmp/INSTANCE/`: uploads and models being written, one folder per server process (several
//!   may share the data folder on PostgreSQL); a gone server's folder is removed at start.
//!
//! An upload becomes visible only when its row is inserted, after its original was renamed into
//! place; its model file follows. Files without a row (a crash between rename and insert, a
//! delete) are removed at start, and a model file is placed only while its row stands.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::Context;

use crate::db::{Db, instance_id};
use api::SnapshotInfo;

/// Deletes a temporary file when dropped (every early return and error path).
pub(super) struct TempFile(pub(super) PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

pub(super) fn unique_name(prefix: &str) -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{prefix}-{}-{n}", std::process::id())
}

/// The data folder and its database.
#[derive(Debug, Clone)]
pub struct Library {
    pub db: Db,
    dir: PathBuf,
    /// This library's folder in `tmp/` (instance and a count: one process may open a folder's
    /// library more than once, as tests do).
    tmp_name: String,
    /// Held while this server runs: its `tmp/INSTANCE/` is in use (see [`Library::take_tmp`]).
    _tmp_lock: std::sync::Arc<std::fs::File>,
    /// Model files being written after their upload was answered.
    model_writes: std::sync::Arc<InFlight>,
    /// The key of the content hashes uploads are deduplicated by (`secret.rs`).
    content_secret: snapshot::ContentSecret,
}

/// A count of background jobs and a way to wait until there are none.
#[derive(Debug, Default)]
struct InFlight {
    count: std::sync::atomic::AtomicUsize,
    idle: tokio::sync::Notify,
}

/// One model file being written ([`Library::model_write`]); counted until dropped.
#[derive(Debug)]
pub struct ModelWrite(std::sync::Arc<InFlight>);

impl Drop for ModelWrite {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

/// Whether anyone waits for a model file being written: a request answered only once it is
/// written, or no one (an upload's, written after its answer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waited {
    ByARequest,
    ByNoOne,
}

/// Libraries opened by this process (see `tmp_name`).
static OPENED: AtomicU64 = AtomicU64::new(0);

impl Library {
    /// Opens (creating if needed) the library in `dir` on SQLite in `dir`, or on the PostgreSQL
    /// database at `database_url`; applies migrations and removes leftovers of interrupted
    /// uploads.
    pub async fn open(dir: &Path, database_url: Option<&str>) -> anyhow::Result<Library> {
        for sub in ["originals", "models", "tmp"] {
            std::fs::create_dir_all(dir.join(sub))
                .with_context(|| format!("cannot create {}", dir.join(sub).display()))?;
        }
        let tmp_name = format!(
            "{}-{}",
            instance_id(),
            OPENED.fetch_add(1, Ordering::Relaxed)
        );
        let tmp_lock = Self::take_tmp(dir, &tmp_name)?;
        let db = Db::open(dir, database_url).await?;
        let content_secret = super::secret::content_secret(&db).await?;
        let lib = Library {
            db,
            dir: dir.to_path_buf(),
            tmp_name,
            _tmp_lock: std::sync::Arc::new(tmp_lock),
            model_writes: Default::default(),
            content_secret,
        };
        lib.remove_orphans().await?;
        Ok(lib)
    }

    /// The key an upload's content hash is taken with, so that it matches this library's
    /// entries (and cannot be aimed at them from outside).
    pub fn content_secret(&self) -> &snapshot::ContentSecret {
        &self.content_secret
    }

    /// Makes this server's `tmp/INSTANCE/` and locks it (an exclusive lock on its `.lock`, held
    /// until the process ends), and removes what servers that are gone left in `tmp/`: folders
    /// whose lock is free, and loose files of older versions. Several servers may share the data
    /// folder (PostgreSQL); none removes another's upload in progress.
    fn take_tmp(dir: &Path, name: &str) -> anyhow::Result<std::fs::File> {
        let tmp = dir.join("tmp");
        for e in std::fs::read_dir(&tmp)?.flatten() {
            let path = e.path();
            if !path.is_dir() {
                let _ = std::fs::remove_file(&path);
                continue;
            }
            let free = match std::fs::File::open(path.join(".lock")) {
                Ok(f) => f.try_lock().is_ok(),
                Err(_) => true,
            };
            if free {
                let _ = std::fs::remove_dir_all(&path);
            }
        }
        let mine = tmp.join(name);
        std::fs::create_dir_all(&mine)
            .with_context(|| format!("cannot create {}", mine.display()))?;
        let lock = std::fs::File::create(mine.join(".lock"))?;
        lock.try_lock()
            .with_context(|| format!("cannot lock {}", mine.display()))?;
        Ok(lock)
    }

    async fn remove_orphans(&self) -> anyhow::Result<()> {
        let known: std::collections::HashSet<String> =
            self.all_sha256().await?.into_iter().collect();
        for sub in ["originals", "models"] {
            for e in std::fs::read_dir(self.dir.join(sub))? {
                let path = e?.path();
                let stem = path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .unwrap_or("")
                    .split('.')
                    .next()
                    .unwrap_or("")
                    .to_string();
                if !known.contains(&stem) && self.may_remove_orphan(&path) {
                    tracing::warn!(path = %path.display(), "removing a file left by an interrupted upload");
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
        // Stored first views of snapshots no longer in the library (a crash during a delete).
        if let Ok(views) = std::fs::read_dir(self.dir.join("views")) {
            for e in views.flatten() {
                if !known.contains(e.file_name().to_string_lossy().as_ref()) {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
        Ok(())
    }

    /// Whether a file without a row is an orphan to remove: one older than the database's
    /// grace ([`Db::orphan_grace`]: none on SQLite, this server's own folder).
    fn may_remove_orphan(&self, path: &Path) -> bool {
        let grace = self.db.orphan_grace();
        grace.is_zero()
            || std::fs::metadata(path)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age > grace)
    }

    pub fn tmp_path(&self, name: &str) -> PathBuf {
        self.tmp_dir().join(name)
    }

    /// This server's folder of temporary files (and its `.lock`).
    pub fn tmp_dir(&self) -> PathBuf {
        self.dir.join("tmp").join(&self.tmp_name)
    }

    pub fn original_path(&self, sha256: &str) -> PathBuf {
        self.dir.join("originals").join(sha256)
    }

    pub fn model_path(&self, sha256: &str) -> PathBuf {
        self.dir.join("models").join(format!("{sha256}.msmodel"))
    }

    /// Stored first views of a snapshot (`library::views`).
    pub fn views_dir(&self, sha256: &str) -> PathBuf {
        self.dir.join("views").join(sha256)
    }

    /// Commits an upload: its original (a temporary file, fully written and synced) is renamed
    /// into place, then the row is inserted: the row is the commit point. The model file follows
    /// ([`Library::place_model`]). Returns the entry that stands, with its report: this one, or
    /// the one a concurrent upload of the same bytes committed first (`false`).
    pub async fn commit(
        &self,
        info: &SnapshotInfo,
        content_hash: &str,
        report: api::Report,
        original_tmp: &Path,
    ) -> anyhow::Result<(SnapshotInfo, bool, api::Report)> {
        let report_json = serde_json::to_string(&report)?;
        let _files = self.db.files_lock(&info.id).await?;
        std::fs::rename(original_tmp, self.original_path(&info.sha256))?;
        if self.insert(info, &report_json, content_hash).await? {
            return Ok((info.clone(), true, report));
        }
        // Deletes wait for the lock held here, so the entry that stands is still there.
        let existing = self
            .find_by_sha(&info.sha256)
            .await?
            .ok_or_else(|| anyhow::anyhow!("snapshot {} vanished while committing", info.id))?;
        let report = self
            .standing_report(&existing.id, &report)
            .await?
            .ok_or_else(|| anyhow::anyhow!("snapshot {} has no report", existing.id))?;
        Ok((existing, false, report))
    }

    /// Counts a model file write begun after its upload was answered, until the returned guard
    /// drops ([`Library::model_writes_done`] waits for none to be left).
    pub fn model_write(&self) -> ModelWrite {
        self.model_writes.count.fetch_add(1, Ordering::AcqRel);
        ModelWrite(self.model_writes.clone())
    }

    /// Waits until no model file is being written (shutdown, and tests that look at the files).
    pub async fn model_writes_done(&self) {
        loop {
            let idle = self.model_writes.idle.notified();
            if self.model_writes.count.load(Ordering::Acquire) == 0 {
                return;
            }
            idle.await;
        }
    }

    /// Writes snapshot `id`'s model file with `write` into this server's temporary folder and
    /// places it ([`Library::place_model`]). Whether it was placed. A write someone waits for
    /// runs on the blocking pool; one after the answer runs at the lowest CPU priority
    /// (`crate::background`), so the answered page's own requests come first.
    pub async fn write_model(
        &self,
        id: &str,
        sha256: &str,
        waited: Waited,
        write: impl FnOnce(&Path) -> std::io::Result<()> + Send + 'static,
    ) -> anyhow::Result<bool> {
        let tmp = TempFile(self.tmp_path(&format!("{}.msmodel", unique_name("model"))));
        let path = tmp.0.clone();
        match waited {
            Waited::ByARequest => tokio::task::spawn_blocking(move || write(&path)).await??,
            Waited::ByNoOne => {
                crate::background::run("memscope-model", move || write(&path)).await??
            }
        }
        self.place_model(id, sha256, &tmp.0).await
    }

    /// Puts snapshot `id`'s model file, written to `model_tmp`, in place, if its row still
    /// stands (under the files lock, `Db::files_lock`: a delete in between leaves no model file behind). Returns
    /// whether it was placed.
    pub async fn place_model(
        &self,
        id: &str,
        sha256: &str,
        model_tmp: &Path,
    ) -> anyhow::Result<bool> {
        let _files = self.db.files_lock(id).await?;
        if self.get(id).await?.is_none_or(|info| info.sha256 != sha256) {
            return Ok(false);
        }
        std::fs::rename(model_tmp, self.model_path(sha256))?;
        Ok(true)
    }

    /// Stores a first view of snapshot `id` (`library::views`), unless the snapshot was deleted
    /// meanwhile (under the files lock, so a delete never leaves a views folder behind).
    pub async fn store_view(&self, id: &str, key: &str, answer: Vec<u8>) -> anyhow::Result<()> {
        let _files = self.db.files_lock(id).await?;
        let Some(info) = self.get(id).await? else {
            return Ok(());
        };
        let (dir, key) = (self.views_dir(&info.sha256), key.to_string());
        tokio::task::spawn_blocking(move || super::views::write(&dir, &key, &answer)).await?;
        Ok(())
    }

    /// Removes a snapshot: the row first (it disappears at once), then its files; never while a
    /// commit is placing files.
    pub async fn delete(&self, id: &str) -> sqlx::Result<bool> {
        let _files = self.db.files_lock(id).await?;
        match self.delete_row(id).await? {
            Some(sha) => {
                let _ = std::fs::remove_file(self.original_path(&sha));
                let _ = std::fs::remove_file(self.model_path(&sha));
                let _ = std::fs::remove_dir_all(self.views_dir(&sha));
                Ok(true)
            }
            None => Ok(false),
        }
    }
}

/// Writes a model file (`snapshot::store`) atomically: to a sibling `.part`, fsync, rename. The
/// index is stored with it, with what a first timeline derives (derived here if not yet), so that
/// reopening the snapshot derives nothing.
pub fn write_model_file(
    snap: &snapshot::Snapshot,
    index: &snapshot::analysis::Index,
    sha256: &str,
    path: &Path,
) -> std::io::Result<()> {
    snapshot::analysis::timeline::derive_views(snap, index);
    // Named by this server: two servers sharing the folder may rebuild the same model at once.
    let part = path.with_extension(format!("part-{}", instance_id()));
    {
        let mut f = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(&part)?);
        snapshot::store::write_for(snap, Some(index), sha256, &mut f)?;
        f.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    }
    std::fs::rename(&part, path)
}
