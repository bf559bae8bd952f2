//! The snapshot library on disk: the SQLite database (through sqlx, migrations applied at start)
//! and the data folder's files. Only this module talks to the database.
//!
//! Layout of the data folder:
//! - `memscope.db`: the `snapshots` and `snapshot_tags` tables (`migrations/`).
//! - `originals/SHA256`: each upload exactly as received (the source of truth).
//! - `models/SHA256.msmodel`: the parsed tables (`snapshot::store`), so opening never re-parses.
//! - `tmp/`: uploads and models being written; emptied at start.
//!
//! An upload becomes visible only when its row is inserted, after both files were renamed into
//! place. Files without a row (a crash between rename and insert) are removed at start.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use anyhow::Context;
use serde::{Deserialize, Serialize};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{FromRow, SqlitePool};

/// A tag on a snapshot: `job=…`, `rank=…`, `host=…`, or free text (empty key).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, FromRow)]
pub struct Tag {
    #[serde(default)]
    pub key: String,
    pub value: String,
}

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
    reserved_bytes: i64,
    allocated_bytes: i64,
    leak_suspects: i64,
    ooms: i64,
    warnings: i64,
    index_ms: i64,
}

/// A library entry as the API lists it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SnapshotInfo {
    pub id: String,
    pub sha256: String,
    pub name: String,
    pub uploaded_at_ms: i64,
    pub size_bytes: u64,
    pub decoded_bytes: u64,
    pub encoding: String,
    pub compression: String,
    pub devices: Vec<i32>,
    pub entries: u64,
    pub peak_bytes: u64,
    pub reserved_bytes: u64,
    pub allocated_bytes: u64,
    pub leak_suspects: u64,
    pub ooms: u64,
    pub warnings: u64,
    pub index_ms: u64,
    pub tags: Vec<Tag>,
}

impl SnapshotInfo {
    fn from_row(r: Row, tags: Vec<Tag>) -> SnapshotInfo {
        SnapshotInfo {
            id: r.id,
            sha256: r.sha256,
            name: r.name,
            uploaded_at_ms: r.uploaded_at_ms,
            size_bytes: r.size_bytes as u64,
            decoded_bytes: r.decoded_bytes as u64,
            encoding: r.encoding,
            compression: r.compression,
            devices: serde_json::from_str(&r.devices).unwrap_or_default(),
            entries: r.entries as u64,
            peak_bytes: r.peak_bytes as u64,
            reserved_bytes: r.reserved_bytes as u64,
            allocated_bytes: r.allocated_bytes as u64,
            leak_suspects: r.leak_suspects as u64,
            ooms: r.ooms as u64,
            warnings: r.warnings as u64,
            index_ms: r.index_ms as u64,
            tags,
        }
    }
}

async fn insert_tags(
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
    id: &str,
    tags: &[Tag],
) -> sqlx::Result<()> {
    for t in tags {
        sqlx::query(
            "INSERT OR IGNORE INTO snapshot_tags (snapshot_id, key, value) VALUES (?, ?, ?)",
        )
        .bind(id)
        .bind(&t.key)
        .bind(&t.value)
        .execute(&mut **tx)
        .await?;
    }
    Ok(())
}

/// The latest NVML reading of one GPU.
#[derive(Debug, Clone, FromRow)]
pub struct GpuLatest {
    pub host: String,
    pub uuid: String,
    pub idx: i64,
    pub used_bytes: Option<i64>,
    pub total_bytes: Option<i64>,
    pub reserved_bytes: Option<i64>,
}

/// PyTorch allocator figures of one device, summed over its processes' latest samples.
#[derive(Debug, Clone, FromRow)]
pub struct DeviceAllocator {
    pub host: String,
    pub device: i64,
    pub allocated_bytes: i64,
    pub reserved_bytes: i64,
    pub alloc_retries: i64,
    pub ooms: i64,
}

/// Rows per multi-row INSERT (13 columns at most: well under SQLite's 32,766 variables).
const ROWS_PER_INSERT: usize = 1000;

/// The columns of [`Row`], for `concat!` (sqlx takes only static SQL).
macro_rules! columns {
    () => {
        "id, sha256, name, uploaded_at_ms, size_bytes, decoded_bytes, encoding, compression, devices, \
         entries, peak_bytes, reserved_bytes, allocated_bytes, leak_suspects, ooms, warnings, index_ms"
    };
}

/// The data folder and its database.
#[derive(Debug, Clone)]
pub struct Library {
    pub db: SqlitePool,
    dir: PathBuf,
}

impl Library {
    /// Opens (creating if needed) the library in `dir`, applies migrations and removes leftovers
    /// of interrupted uploads.
    pub async fn open(dir: &Path) -> anyhow::Result<Library> {
        for sub in ["originals", "models", "tmp"] {
            std::fs::create_dir_all(dir.join(sub))
                .with_context(|| format!("cannot create {}", dir.join(sub).display()))?;
        }
        for e in std::fs::read_dir(dir.join("tmp"))? {
            let _ = std::fs::remove_file(e?.path());
        }
        let options = SqliteConnectOptions::from_str("sqlite:")?
            .filename(dir.join("memscope.db"))
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            // An acknowledged upload survives a crash or power loss.
            .synchronous(SqliteSynchronous::Full)
            .foreign_keys(true);
        let db = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(options)
            .await
            .with_context(|| format!("cannot open the database in {}", dir.display()))?;
        sqlx::migrate!("../migrations")
            .run(&db)
            .await
            .context("cannot apply database migrations")?;
        let lib = Library {
            db,
            dir: dir.to_path_buf(),
        };
        lib.remove_orphans().await?;
        Ok(lib)
    }

    async fn remove_orphans(&self) -> anyhow::Result<()> {
        let known: std::collections::HashSet<String> =
            sqlx::query_scalar::<_, String>("SELECT sha256 FROM snapshots")
                .fetch_all(&self.db)
                .await?
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
                if !known.contains(&stem) {
                    tracing::warn!(path = %path.display(), "removing a file left by an interrupted upload");
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
        Ok(())
    }

    pub fn tmp_path(&self, name: &str) -> PathBuf {
        self.dir.join("tmp").join(name)
    }
    pub fn original_path(&self, sha256: &str) -> PathBuf {
        self.dir.join("originals").join(sha256)
    }
    pub fn model_path(&self, sha256: &str) -> PathBuf {
        self.dir.join("models").join(format!("{sha256}.msmodel"))
    }

    async fn tags(&self, id: &str) -> sqlx::Result<Vec<Tag>> {
        sqlx::query_as::<_, Tag>(
            "SELECT key, value FROM snapshot_tags WHERE snapshot_id = ? ORDER BY key, value",
        )
        .bind(id)
        .fetch_all(&self.db)
        .await
    }

    pub async fn get(&self, id: &str) -> sqlx::Result<Option<SnapshotInfo>> {
        let row = sqlx::query_as::<_, Row>(concat!(
            "SELECT ",
            columns!(),
            " FROM snapshots WHERE id = ?"
        ))
        .bind(id)
        .fetch_optional(&self.db)
        .await?;
        Ok(match row {
            Some(r) => {
                let tags = self.tags(&r.id).await?;
                Some(SnapshotInfo::from_row(r, tags))
            }
            None => None,
        })
    }

    pub async fn find_by_sha(&self, sha256: &str) -> sqlx::Result<Option<SnapshotInfo>> {
        let id: Option<String> = sqlx::query_scalar("SELECT id FROM snapshots WHERE sha256 = ?")
            .bind(sha256)
            .fetch_optional(&self.db)
            .await?;
        match id {
            Some(id) => self.get(&id).await,
            None => Ok(None),
        }
    }

    /// Every snapshot, newest first; `query` matches name, id or any tag (case-insensitive).
    pub async fn list(&self, query: Option<&str>) -> sqlx::Result<Vec<SnapshotInfo>> {
        let pattern = format!("%{}%", query.unwrap_or("").to_lowercase());
        let rows = sqlx::query_as::<_, Row>(concat!(
            "SELECT ",
            columns!(),
            " FROM snapshots s WHERE ?1 = '%%' OR lower(s.name) LIKE ?1 OR s.id LIKE ?1 \
             OR EXISTS (SELECT 1 FROM snapshot_tags t WHERE t.snapshot_id = s.id \
                        AND (lower(t.value) LIKE ?1 OR lower(t.key || '=' || t.value) LIKE ?1)) \
             ORDER BY uploaded_at_ms DESC, id"
        ))
        .bind(&pattern)
        .fetch_all(&self.db)
        .await?;
        let mut out = Vec::with_capacity(rows.len());
        for r in rows {
            let tags = self.tags(&r.id).await?;
            out.push(SnapshotInfo::from_row(r, tags));
        }
        Ok(out)
    }

    /// Inserts a fully ingested snapshot (the commit point of an upload). Returns false if a
    /// snapshot with the same content was inserted first.
    pub async fn insert(&self, info: &SnapshotInfo, report_json: &str) -> sqlx::Result<bool> {
        let mut tx = self.db.begin().await?;
        let done = sqlx::query(
            "INSERT INTO snapshots (id, sha256, name, uploaded_at_ms, size_bytes, decoded_bytes, encoding, compression, \
             devices, entries, peak_bytes, reserved_bytes, allocated_bytes, leak_suspects, ooms, warnings, index_ms, report_json) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
        )
        .bind(&info.id)
        .bind(&info.sha256)
        .bind(&info.name)
        .bind(info.uploaded_at_ms)
        .bind(info.size_bytes as i64)
        .bind(info.decoded_bytes as i64)
        .bind(&info.encoding)
        .bind(&info.compression)
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
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() == 0 {
            return Ok(false);
        }
        insert_tags(&mut tx, &info.id, &info.tags).await?;
        tx.commit().await?;
        Ok(true)
    }

    pub async fn report_json(&self, id: &str) -> sqlx::Result<Option<String>> {
        sqlx::query_scalar("SELECT report_json FROM snapshots WHERE id = ?")
            .bind(id)
            .fetch_optional(&self.db)
            .await
    }

    /// Renames and/or replaces the tags of a snapshot; false if there is none with that id.
    pub async fn update(
        &self,
        id: &str,
        name: Option<&str>,
        tags: Option<&[Tag]>,
    ) -> sqlx::Result<bool> {
        let mut tx = self.db.begin().await?;
        let exists: Option<i64> = sqlx::query_scalar("SELECT 1 FROM snapshots WHERE id = ?")
            .bind(id)
            .fetch_optional(&mut *tx)
            .await?;
        if exists.is_none() {
            return Ok(false);
        }
        if let Some(name) = name {
            sqlx::query("UPDATE snapshots SET name = ? WHERE id = ?")
                .bind(name)
                .bind(id)
                .execute(&mut *tx)
                .await?;
        }
        if let Some(tags) = tags {
            sqlx::query("DELETE FROM snapshot_tags WHERE snapshot_id = ?")
                .bind(id)
                .execute(&mut *tx)
                .await?;
            insert_tags(&mut tx, id, tags).await?;
        }
        tx.commit().await?;
        Ok(true)
    }

    /// Removes a snapshot: the row first (it disappears at once), then its files.
    pub async fn delete(&self, id: &str) -> sqlx::Result<bool> {
        let sha: Option<String> =
            sqlx::query_scalar("DELETE FROM snapshots WHERE id = ? RETURNING sha256")
                .bind(id)
                .fetch_optional(&self.db)
                .await?;
        match sha {
            Some(sha) => {
                let _ = std::fs::remove_file(self.original_path(&sha));
                let _ = std::fs::remove_file(self.model_path(&sha));
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Stores one collector batch in one transaction, once per `(collector, seq)`.
    pub async fn ingest_batch(&self, b: &wire::Batch) -> sqlx::Result<wire::Ack> {
        let mut tx = self.db.begin().await?;
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let rows = (b.gpus.len() + b.processes.len() + b.allocator.len() + b.events.len()) as i64;
        let fresh = sqlx::query(
            "INSERT INTO ingested_batches (collector, seq, received_at_ms, rows, dropped) VALUES (?, ?, ?, ?, ?) \
             ON CONFLICT DO NOTHING",
        )
        .bind(&b.collector)
        .bind(b.seq as i64)
        .bind(now_ms)
        .bind(rows)
        .bind(b.dropped_samples as i64)
        .execute(&mut *tx)
        .await?
        .rows_affected()
            == 1;
        if !fresh {
            return Ok(wire::Ack {
                seq: b.seq,
                duplicate: true,
                stored: 0,
            });
        }
        // Each GPU once per batch (its latest reading), then the samples in multi-row inserts.
        let mut latest: Vec<&wire::GpuSample> = Vec::new();
        for g in &b.gpus {
            match latest.iter_mut().find(|x| x.uuid == g.uuid) {
                Some(x) if x.time_ms <= g.time_ms => *x = g,
                Some(_) => {}
                None => latest.push(g),
            }
        }
        for g in latest {
            sqlx::query(
                "INSERT INTO gpus (uuid, host, idx, name, total_bytes, last_seen_ms) VALUES (?, ?, ?, ?, ?, ?) \
                 ON CONFLICT (uuid) DO UPDATE SET host = excluded.host, idx = excluded.idx, \
                 name = coalesce(excluded.name, gpus.name), total_bytes = coalesce(excluded.total_bytes, gpus.total_bytes), \
                 last_seen_ms = max(gpus.last_seen_ms, excluded.last_seen_ms)",
            )
            .bind(&g.uuid)
            .bind(&b.host)
            .bind(g.index as i64)
            .bind(&g.name)
            .bind(g.memory_total_bytes.map(|v| v as i64))
            .bind(g.time_ms)
            .execute(&mut *tx)
            .await?;
        }
        let opt = |v: Option<u64>| v.map(|v| v as i64);
        for chunk in b.gpus.chunks(ROWS_PER_INSERT) {
            let mut q = sqlx::QueryBuilder::<sqlx::Sqlite>::new(
                "INSERT INTO gpu_samples (gpu_uuid, time_ms, used_bytes, free_bytes, reserved_bytes, gpu_util, mem_util, \
                 temperature_c, power_mw) ",
            );
            q.push_values(chunk, |mut row, g| {
                row.push_bind(&g.uuid)
                    .push_bind(g.time_ms)
                    .push_bind(opt(g.memory_used_bytes))
                    .push_bind(opt(g.memory_free_bytes))
                    .push_bind(opt(g.memory_reserved_bytes))
                    .push_bind(g.gpu_util_percent.map(|v| v as i64))
                    .push_bind(g.mem_util_percent.map(|v| v as i64))
                    .push_bind(g.temperature_c)
                    .push_bind(g.power_mw.map(|v| v as i64));
            });
            q.build().execute(&mut *tx).await?;
        }
        for chunk in b.processes.chunks(ROWS_PER_INSERT) {
            let mut q = sqlx::QueryBuilder::<sqlx::Sqlite>::new(
                "INSERT INTO process_samples (host, gpu_uuid, pid, start_time_ms, time_ms, name, cgroup, used_bytes) ",
            );
            q.push_values(chunk, |mut row, p| {
                row.push_bind(&b.host)
                    .push_bind(&p.gpu_uuid)
                    .push_bind(p.pid as i64)
                    .push_bind(p.start_time_ms)
                    .push_bind(p.time_ms)
                    .push_bind(&p.name)
                    .push_bind(&p.cgroup)
                    .push_bind(p.used_bytes as i64);
            });
            q.build().execute(&mut *tx).await?;
        }
        for chunk in b.allocator.chunks(ROWS_PER_INSERT) {
            let mut q = sqlx::QueryBuilder::<sqlx::Sqlite>::new(
                "INSERT INTO allocator_samples (host, pid, start_time_ms, device, time_ms, step, allocated_bytes, \
                 reserved_bytes, active_bytes, inactive_split_bytes, requested_bytes, alloc_retries, ooms) ",
            );
            q.push_values(chunk, |mut row, a| {
                row.push_bind(&b.host)
                    .push_bind(a.pid as i64)
                    .push_bind(a.start_time_ms)
                    .push_bind(a.device)
                    .push_bind(a.time_ms)
                    .push_bind(opt(a.step))
                    .push_bind(a.allocated_bytes as i64)
                    .push_bind(a.reserved_bytes as i64)
                    .push_bind(opt(a.active_bytes))
                    .push_bind(opt(a.inactive_split_bytes))
                    .push_bind(opt(a.requested_bytes))
                    .push_bind(opt(a.alloc_retries))
                    .push_bind(opt(a.ooms));
            });
            q.build().execute(&mut *tx).await?;
        }
        for e in &b.events {
            sqlx::query(
                "INSERT INTO events (host, time_ms, kind, pid, device, message, snapshot_id) VALUES (?, ?, ?, ?, ?, ?, ?)",
            )
            .bind(&b.host)
            .bind(e.time_ms)
            .bind(&e.kind)
            .bind(e.pid.map(|v| v as i64))
            .bind(e.device)
            .bind(&e.message)
            .bind(&e.snapshot_id)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(wire::Ack {
            seq: b.seq,
            duplicate: false,
            stored: rows as u64,
        })
    }

    /// Row counts of the live tables (for tests and the status page).
    pub async fn live_counts(&self) -> sqlx::Result<[i64; 5]> {
        let mut out = [0i64; 5];
        for (i, q) in [
            "SELECT count(*) FROM gpu_samples",
            "SELECT count(*) FROM process_samples",
            "SELECT count(*) FROM allocator_samples",
            "SELECT count(*) FROM events",
            "SELECT count(*) FROM ingested_batches",
        ]
        .into_iter()
        .enumerate()
        {
            out[i] = sqlx::query_scalar(sqlx::AssertSqlSafe(q))
                .fetch_one(&self.db)
                .await?;
        }
        Ok(out)
    }

    /// The latest reading of every GPU.
    pub async fn latest_gpu_readings(&self) -> sqlx::Result<Vec<GpuLatest>> {
        sqlx::query_as(
            "SELECT g.host, g.uuid, g.idx, s.used_bytes, g.total_bytes, s.reserved_bytes FROM gpus g \
             JOIN gpu_samples s ON s.gpu_uuid = g.uuid \
             AND s.time_ms = (SELECT max(time_ms) FROM gpu_samples WHERE gpu_uuid = g.uuid) \
             GROUP BY g.uuid ORDER BY g.host, g.idx",
        )
        .fetch_all(&self.db)
        .await
    }

    /// PyTorch allocator figures summed per host and device over each process's latest sample
    /// (no per-process labels).
    pub async fn latest_allocator_by_device(&self) -> sqlx::Result<Vec<DeviceAllocator>> {
        sqlx::query_as(
            "SELECT a.host, a.device, sum(a.allocated_bytes) AS allocated_bytes, sum(a.reserved_bytes) AS reserved_bytes, \
             coalesce(sum(a.alloc_retries), 0) AS alloc_retries, coalesce(sum(a.ooms), 0) AS ooms FROM allocator_samples a \
             WHERE a.time_ms = (SELECT max(time_ms) FROM allocator_samples b WHERE b.host = a.host AND b.pid = a.pid \
             AND b.device = a.device AND b.start_time_ms IS a.start_time_ms) \
             GROUP BY a.host, a.device ORDER BY a.host, a.device",
        )
        .fetch_all(&self.db)
        .await
    }

    /// (batches, samples stored, samples collectors dropped, snapshots, events by kind).
    pub async fn counters(&self) -> sqlx::Result<(i64, i64, i64, i64, Vec<(String, i64)>)> {
        let (batches, rows, dropped): (i64, i64, i64) =
            sqlx::query_as("SELECT count(*), coalesce(sum(rows), 0), coalesce(sum(dropped), 0) FROM ingested_batches")
                .fetch_one(&self.db)
                .await?;
        let snapshots: i64 = sqlx::query_scalar("SELECT count(*) FROM snapshots")
            .fetch_one(&self.db)
            .await?;
        let events =
            sqlx::query_as("SELECT kind, count(*) FROM events GROUP BY kind ORDER BY kind")
                .fetch_all(&self.db)
                .await?;
        Ok((batches, rows, dropped, snapshots, events))
    }
}
