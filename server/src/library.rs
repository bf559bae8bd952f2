//! The snapshot library, [`Library`]: the `snapshots` and `snapshot_tags` rows (through
//! `db::Db`, beside `live::Live`, which owns the live tables) and the data folder's files, of
//! which it is the only writer.
//!
//! Layout of the data folder:
//! - `memscope.db`: the `snapshots` and `snapshot_tags` tables (`migrations/sqlite/`), unless the
//!   server runs on PostgreSQL.
//! - `originals/SHA256`: each upload exactly as received (the source of truth).
//! - `models/SHA256.msmodel`: the parsed tables (`snapshot::store`), so opening never re-parses.
//!   A cache: an upload is answered before its model file is written ([`Library::place_model`]),
//!   and a missing or damaged one is rebuilt from the original (`crate::models`).
//! - `tmp/INSTANCE/`: uploads and models being written, one folder per server process (several
//!   may share the data folder on PostgreSQL); a gone server's folder is removed at start.
//!
//! An upload becomes visible only when its row is inserted, after its original was renamed into
//! place; its model file follows. Files without a row (a crash between rename and insert, a
//! delete) are removed at start, and a model file is placed only while its row stands.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::Context;
use sqlx::FromRow;

use crate::db::{Db, instance_id};
use crate::with_db;

pub use api::{SnapshotInfo, Tag};

#[derive(Debug, Clone, FromRow)]
struct Row {
    id: String,
    sha256: String,
    name: String,
    uploaded_at_ms: i64,
    size_bytes: i64,
    decoded_bytes: i64,
    encoding: String,
    compression: String,
    devices: String,
    entries: i64,
    peak_bytes: i64,
    peak_reserved_bytes: i64,
    reserved_bytes: i64,
    allocated_bytes: i64,
    leak_suspects: i64,
    ooms: i64,
    warnings: i64,
    index_ms: i64,
    device_total_bytes: Option<i64>,
    device_total_source: Option<String>,
    device_total_detail: Option<String>,
}

/// A stored name of a closed set that does not read: the database was written by something else.
fn decode_error(column: &str, value: &str) -> sqlx::Error {
    sqlx::Error::Decode(
        format!("snapshots.{column} holds {value:?}, which memscope never writes").into(),
    )
}

impl Row {
    fn into_info(self, tags: Vec<Tag>) -> sqlx::Result<SnapshotInfo> {
        Ok(SnapshotInfo {
            id: self.id,
            sha256: self.sha256,
            name: self.name,
            uploaded_at_ms: self.uploaded_at_ms,
            size_bytes: self.size_bytes as u64,
            decoded_bytes: self.decoded_bytes as u64,
            encoding: api::Encoding::from_name(&self.encoding)
                .ok_or_else(|| decode_error("encoding", &self.encoding))?,
            compression: api::Compression::from_name(&self.compression)
                .ok_or_else(|| decode_error("compression", &self.compression))?,
            devices: serde_json::from_str(&self.devices).unwrap_or_default(),
            entries: self.entries as u64,
            peak_bytes: self.peak_bytes as u64,
            peak_reserved_bytes: self.peak_reserved_bytes as u64,
            reserved_bytes: self.reserved_bytes as u64,
            allocated_bytes: self.allocated_bytes as u64,
            leak_suspects: self.leak_suspects as u64,
            ooms: self.ooms as u64,
            warnings: self.warnings as u64,
            index_ms: self.index_ms as u64,
            tags,
            device_total: match (self.device_total_bytes, &self.device_total_source) {
                (Some(bytes), Some(source)) => Some(api::DeviceTotal {
                    total_bytes: bytes as u64,
                    source: api::DeviceTotalSource::from_name(source)
                        .ok_or_else(|| decode_error("device_total_source", source))?,
                    detail: self.device_total_detail,
                }),
                _ => None,
            },
        })
    }
}

/// Inserts a snapshot's tags in transaction `$tx` (either backend).
macro_rules! insert_tags {
    ($tx:expr, $id:expr, $tags:expr) => {
        for t in $tags {
            sqlx::query(
                "INSERT INTO snapshot_tags (snapshot_id, key, value) VALUES ($1, $2, $3) \
                 ON CONFLICT DO NOTHING",
            )
            .bind($id)
            .bind(&t.key)
            .bind(&t.value)
            .execute(&mut *$tx)
            .await?;
        }
    };
}

/// The columns of [`Row`], for `concat!` (sqlx takes only static SQL).
macro_rules! columns {
    () => {
        "id, sha256, name, uploaded_at_ms, size_bytes, decoded_bytes, encoding, compression, devices, \
         entries, peak_bytes, peak_reserved_bytes, reserved_bytes, allocated_bytes, leak_suspects, ooms, \
         warnings, index_ms, device_total_bytes, device_total_source, device_total_detail"
    };
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

/// Libraries opened by this process (see `tmp_name`).
static OPENED: AtomicU64 = AtomicU64::new(0);

/// A snapshot's stored report: current, or written by another version (or unreadable) and to be
/// computed again from the snapshot (`http::snapshots::report_of`).
#[derive(Debug)]
pub enum Stored {
    Current(Box<api::Report>),
    Stale,
}

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
        let lib = Library {
            db,
            dir: dir.to_path_buf(),
            tmp_name,
            _tmp_lock: std::sync::Arc::new(tmp_lock),
            model_writes: Default::default(),
        };
        lib.remove_orphans().await?;
        Ok(lib)
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
            with_db!(&self.db, |p| sqlx::query_scalar::<_, String>(
                "SELECT sha256 FROM snapshots"
            )
            .fetch_all(p)
            .await)?
            .into_iter()
            .collect();
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
    /// Stored first views of a snapshot (`crate::views`).
    pub fn views_dir(&self, sha256: &str) -> PathBuf {
        self.dir.join("views").join(sha256)
    }

    async fn tags(&self, id: &str) -> sqlx::Result<Vec<Tag>> {
        let rows: Vec<(String, String)> = with_db!(&self.db, |p| sqlx::query_as(
            "SELECT key, value FROM snapshot_tags WHERE snapshot_id = $1 ORDER BY key, value",
        )
        .bind(id)
        .fetch_all(p)
        .await)?;
        Ok(rows
            .into_iter()
            .map(|(key, value)| Tag { key, value })
            .collect())
    }

    pub async fn get(&self, id: &str) -> sqlx::Result<Option<SnapshotInfo>> {
        let row = with_db!(&self.db, |p| sqlx::query_as::<_, Row>(concat!(
            "SELECT ",
            columns!(),
            " FROM snapshots WHERE id = $1"
        ))
        .bind(id)
        .fetch_optional(p)
        .await)?;
        Ok(match row {
            Some(r) => {
                let tags = self.tags(&r.id).await?;
                Some(r.into_info(tags)?)
            }
            None => None,
        })
    }

    pub async fn find_by_sha(&self, sha256: &str) -> sqlx::Result<Option<SnapshotInfo>> {
        let id: Option<String> = with_db!(&self.db, |p| sqlx::query_scalar(
            "SELECT id FROM snapshots WHERE sha256 = $1"
        )
        .bind(sha256)
        .fetch_optional(p)
        .await)?;
        match id {
            Some(id) => self.get(&id).await,
            None => Ok(None),
        }
    }

    /// The entry whose decoded bytes hash to `content_hash` (the same snapshot, however it was
    /// compressed), if any.
    pub async fn find_by_content(&self, content_hash: &str) -> sqlx::Result<Option<SnapshotInfo>> {
        let id: Option<String> = with_db!(&self.db, |p| sqlx::query_scalar(
            "SELECT id FROM snapshots WHERE content_hash = $1 LIMIT 1"
        )
        .bind(content_hash)
        .fetch_optional(p)
        .await)?;
        match id {
            Some(id) => self.get(&id).await,
            None => Ok(None),
        }
    }

    /// Every snapshot, newest first; `query` matches name, id or any tag (case-insensitive).
    pub async fn list(&self, query: Option<&str>) -> sqlx::Result<Vec<SnapshotInfo>> {
        let pattern = format!("%{}%", query.unwrap_or("").to_lowercase());
        let rows = with_db!(&self.db, |p| sqlx::query_as::<_, Row>(concat!(
            "SELECT ",
            columns!(),
            " FROM snapshots s WHERE $1 = '%%' OR lower(s.name) LIKE $1 OR s.id LIKE $1 \
             OR EXISTS (SELECT 1 FROM snapshot_tags t WHERE t.snapshot_id = s.id \
                        AND (lower(t.value) LIKE $1 OR lower(t.key || '=' || t.value) LIKE $1)) \
             ORDER BY uploaded_at_ms DESC, id"
        ))
        .bind(&pattern)
        .fetch_all(p)
        .await)?;
        let mut out = Vec::with_capacity(rows.len());
        for r in rows {
            let tags = self.tags(&r.id).await?;
            out.push(r.into_info(tags)?);
        }
        Ok(out)
    }

    /// Snapshots tagged `job=…` (of `job` only, when given), with their `rank=` tag: what runs
    /// are made of (`crate::runs`).
    pub async fn job_rows(&self, job: Option<&str>) -> sqlx::Result<Vec<crate::runs::JobRow>> {
        type R = (String, String, String, i64, i64, i64, Option<String>);
        let rows: Vec<R> = with_db!(&self.db, |p| sqlx::query_as(
            "SELECT t.value, s.id, s.name, s.uploaded_at_ms, s.peak_bytes, s.ooms, \
             (SELECT r.value FROM snapshot_tags r WHERE r.snapshot_id = s.id AND r.key = 'rank' \
              ORDER BY r.value LIMIT 1) \
             FROM snapshots s JOIN snapshot_tags t ON t.snapshot_id = s.id AND t.key = 'job' \
             WHERE $1 IS NULL OR t.value = $1",
        )
        .bind(job)
        .fetch_all(p)
        .await)?;
        Ok(rows
            .into_iter()
            .map(
                |(job, id, name, at, peak, ooms, rank)| crate::runs::JobRow {
                    job,
                    id,
                    name,
                    uploaded_at_ms: at,
                    peak_bytes: peak.max(0) as u64,
                    ooms: ooms.max(0) as u64,
                    rank_tag: rank,
                },
            )
            .collect())
    }

    /// Inserts a fully ingested snapshot (the commit point of an upload). Returns false if a
    /// snapshot with the same content was inserted first.
    async fn insert(
        &self,
        info: &SnapshotInfo,
        report_json: &str,
        content_hash: &str,
    ) -> sqlx::Result<bool> {
        with_db!(&self.db, |p| {
            let mut tx = p.begin().await?;
            let done = sqlx::query(
                "INSERT INTO snapshots (id, sha256, name, uploaded_at_ms, size_bytes, decoded_bytes, encoding, \
                 compression, devices, entries, peak_bytes, reserved_bytes, allocated_bytes, leak_suspects, ooms, \
                 warnings, index_ms, report_json, device_total_bytes, device_total_source, device_total_detail, \
                 content_hash, peak_reserved_bytes) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, \
                 $14, $15, $16, $17, $18, $19, $20, $21, $22, $23) ON CONFLICT DO NOTHING",
            )
            .bind(&info.id)
            .bind(&info.sha256)
            .bind(&info.name)
            .bind(info.uploaded_at_ms)
            .bind(info.size_bytes as i64)
            .bind(info.decoded_bytes as i64)
            .bind(info.encoding.as_str())
            .bind(info.compression.as_str())
            .bind(serde_json::to_string(&info.devices).unwrap_or_else(|_| "[]".into()))
            .bind(info.entries as i64)
            .bind(info.peak_bytes as i64)
            .bind(info.reserved_bytes as i64)
            .bind(info.allocated_bytes as i64)
            .bind(info.leak_suspects as i64)
            .bind(info.ooms as i64)
            .bind(info.warnings as i64)
            .bind(info.index_ms as i64)
            .bind(report_json)
            .bind(info.device_total.as_ref().map(|t| t.total_bytes as i64))
            .bind(info.device_total.as_ref().map(|t| t.source.as_str()))
            .bind(info.device_total.as_ref().and_then(|t| t.detail.clone()))
            .bind(content_hash)
            .bind(info.peak_reserved_bytes as i64)
            .execute(&mut *tx)
            .await?;
            if done.rows_affected() == 0 {
                return Ok(false);
            }
            insert_tags!(tx, &info.id, &info.tags);
            tx.commit().await?;
            Ok(true)
        })
    }

    /// The report stored at upload (`memscope analyze --json`'s object).
    pub async fn report(&self, id: &str) -> anyhow::Result<Option<Stored>> {
        let json: Option<String> = with_db!(&self.db, |p| sqlx::query_scalar(
            "SELECT report_json FROM snapshots WHERE id = $1"
        )
        .bind(id)
        .fetch_optional(p)
        .await)?;
        Ok(json.map(|j| match serde_json::from_str::<api::Report>(&j) {
            Ok(r) if r.report_version == api::REPORT_VERSION => Stored::Current(Box::new(r)),
            Ok(_) => Stored::Stale,
            Err(e) => {
                tracing::info!(id, error = %e, "a stored report does not read; it will be computed again");
                Stored::Stale
            }
        }))
    }

    /// The report that stands when snapshot `id` arrives again: the stored one, or, where an
    /// older version stored it, `fresh` (the same snapshot's, computed now) stored in its place.
    /// None if there is no such snapshot.
    pub async fn standing_report(
        &self,
        id: &str,
        fresh: &api::Report,
    ) -> anyhow::Result<Option<api::Report>> {
        Ok(match self.report(id).await? {
            Some(Stored::Current(r)) => Some(*r),
            Some(Stored::Stale) => {
                self.set_report(id, fresh).await?;
                Some(fresh.clone())
            }
            None => None,
        })
    }

    /// Replaces a snapshot's stored report (one computed again by this version) and the peaks
    /// the library lists from it. False if there is no such snapshot.
    pub async fn set_report(&self, id: &str, report: &api::Report) -> anyhow::Result<bool> {
        let report_json = serde_json::to_string(report)?;
        let (peak, peak_reserved) = report.peaks();
        let done = with_db!(&self.db, |p| {
            sqlx::query(
            "UPDATE snapshots SET report_json = $1, peak_bytes = $2, peak_reserved_bytes = $3 WHERE id = $4"
        )
        .bind(&report_json)
        .bind(peak as i64)
        .bind(peak_reserved as i64)
        .bind(id)
        .execute(p)
        .await
        .map(|d| d.rows_affected())
        })?;
        Ok(done == 1)
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

    /// Renames and/or replaces the tags of a snapshot; false if there is none with that id.
    pub async fn update(
        &self,
        id: &str,
        name: Option<&str>,
        tags: Option<&[Tag]>,
    ) -> sqlx::Result<bool> {
        with_db!(&self.db, |p| {
            let mut tx = p.begin().await?;
            let exists: Option<String> =
                sqlx::query_scalar("SELECT id FROM snapshots WHERE id = $1")
                    .bind(id)
                    .fetch_optional(&mut *tx)
                    .await?;
            if exists.is_none() {
                return Ok(false);
            }
            if let Some(name) = name {
                sqlx::query("UPDATE snapshots SET name = $1 WHERE id = $2")
                    .bind(name)
                    .bind(id)
                    .execute(&mut *tx)
                    .await?;
            }
            if let Some(tags) = tags {
                sqlx::query("DELETE FROM snapshot_tags WHERE snapshot_id = $1")
                    .bind(id)
                    .execute(&mut *tx)
                    .await?;
                insert_tags!(tx, id, tags);
            }
            tx.commit().await?;
            Ok(true)
        })
    }

    /// Records a snapshot's device total memory with the report judged under it (one
    /// transaction: the stored verdicts always match the stored total). False if there is no
    /// such snapshot.
    pub async fn set_device_total(
        &self,
        id: &str,
        total: &api::DeviceTotal,
        report: &api::Report,
    ) -> anyhow::Result<bool> {
        let report_json = serde_json::to_string(report)?;
        let done = with_db!(&self.db, |p| sqlx::query(
            "UPDATE snapshots SET device_total_bytes = $1, device_total_source = $2, \
             device_total_detail = $3, report_json = $4 WHERE id = $5",
        )
        .bind(total.total_bytes as i64)
        .bind(total.source.as_str())
        .bind(&total.detail)
        .bind(&report_json)
        .bind(id)
        .execute(p)
        .await
        .map(|d| d.rows_affected()))?;
        Ok(done == 1)
    }

    /// Stores a first view of snapshot `id` (`crate::views`), unless the snapshot was deleted
    /// meanwhile (under the files lock, so a delete never leaves a views folder behind).
    pub async fn store_view(&self, id: &str, key: &str, answer: Vec<u8>) -> anyhow::Result<()> {
        let _files = self.db.files_lock(id).await?;
        let Some(info) = self.get(id).await? else {
            return Ok(());
        };
        let (dir, key) = (self.views_dir(&info.sha256), key.to_string());
        tokio::task::spawn_blocking(move || crate::views::write(&dir, &key, &answer)).await?;
        Ok(())
    }

    /// Removes a snapshot: the row first (it disappears at once), then its files; never while a
    /// commit is placing files.
    pub async fn delete(&self, id: &str) -> sqlx::Result<bool> {
        let _files = self.db.files_lock(id).await?;
        let sha: Option<String> = with_db!(&self.db, |p| sqlx::query_scalar(
            "DELETE FROM snapshots WHERE id = $1 RETURNING sha256"
        )
        .bind(id)
        .fetch_optional(p)
        .await)?;
        match sha {
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
    path: &Path,
) -> std::io::Result<()> {
    snapshot::analysis::timeline::derive_views(snap, index);
    // Named by this server: two servers sharing the folder may rebuild the same model at once.
    let part = path.with_extension(format!("part-{}", instance_id()));
    {
        let mut f = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(&part)?);
        snapshot::store::write(snap, Some(index), &mut f)?;
        f.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    }
    std::fs::rename(&part, path)
}
