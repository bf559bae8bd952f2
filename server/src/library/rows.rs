//! The `snapshots` and `snapshot_tags` rows: a snapshot's entry, tags and stored report, read
//! and written on either backend. Every query of the library is here; `files.rs` places and
//! removes the files that go with a row.

use api::{SnapshotInfo, Tag};
use sqlx::FromRow;

use super::files::Library;
use crate::db::Tx;
use crate::{with_db, with_tx};

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

/// The columns of [`Row`], for `concat!` (sqlx takes only static SQL).
macro_rules! columns {
    () => {
        "id, sha256, name, uploaded_at_ms, size_bytes, decoded_bytes, encoding, compression, devices, \
         entries, peak_bytes, peak_reserved_bytes, reserved_bytes, allocated_bytes, leak_suspects, ooms, \
         warnings, index_ms, device_total_bytes, device_total_source, device_total_detail"
    };
}

/// A snapshot's stored report: current, or written by another version (or unreadable) and to be
/// computed again from the snapshot (`http::snapshots::report_of`).
#[derive(Debug)]
pub enum Stored {
    Current(Box<api::Report>),
    Stale,
}

impl Library {
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

    /// Every snapshot, newest first; `query` matches name, id or any tag (case-insensitive, as
    /// text: `%` and `_` are themselves, not wildcards).
    pub async fn list(&self, query: Option<&str>) -> sqlx::Result<Vec<SnapshotInfo>> {
        let pattern = format!("%{}%", like_literal(&query.unwrap_or("").to_lowercase()));
        let rows = with_db!(&self.db, |p| {
            sqlx::query_as::<_, Row>(concat!(
            "SELECT ",
            columns!(),
            " FROM snapshots s WHERE $1 = '%%' OR lower(s.name) LIKE $1 ESCAPE '\\' OR s.id LIKE $1 ESCAPE '\\' \
             OR EXISTS (SELECT 1 FROM snapshot_tags t WHERE t.snapshot_id = s.id \
                        AND (lower(t.value) LIKE $1 ESCAPE '\\' OR lower(t.key || '=' || t.value) LIKE $1 ESCAPE '\\')) \
             ORDER BY uploaded_at_ms DESC, id"
        ))
        .bind(&pattern)
        .fetch_all(p)
        .await
        })?;
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
    pub(super) async fn insert(
        &self,
        info: &SnapshotInfo,
        report_json: &str,
        content_hash: &str,
    ) -> sqlx::Result<bool> {
        let mut tx = self.db.begin().await?;
        let inserted = with_tx!(&mut tx, |c| {
            sqlx::query(
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
            .execute(&mut *c)
            .await?
            .rows_affected()
        });
        if inserted == 0 {
            return Ok(false);
        }
        insert_tags(&mut tx, &info.id, &info.tags).await?;
        tx.commit().await?;
        Ok(true)
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

    /// Renames and/or replaces the tags of a snapshot; false if there is none with that id.
    pub async fn update(
        &self,
        id: &str,
        name: Option<&str>,
        tags: Option<&[Tag]>,
    ) -> sqlx::Result<bool> {
        let mut tx = self.db.begin().await?;
        let exists = with_tx!(&mut tx, |c| {
            let exists: Option<String> =
                sqlx::query_scalar("SELECT id FROM snapshots WHERE id = $1")
                    .bind(id)
                    .fetch_optional(&mut *c)
                    .await?;
            if exists.is_some() {
                if let Some(name) = name {
                    sqlx::query("UPDATE snapshots SET name = $1 WHERE id = $2")
                        .bind(name)
                        .bind(id)
                        .execute(&mut *c)
                        .await?;
                }
                if tags.is_some() {
                    sqlx::query("DELETE FROM snapshot_tags WHERE snapshot_id = $1")
                        .bind(id)
                        .execute(&mut *c)
                        .await?;
                }
            }
            exists.is_some()
        });
        if !exists {
            return Ok(false);
        }
        if let Some(tags) = tags {
            insert_tags(&mut tx, id, tags).await?;
        }
        tx.commit().await?;
        Ok(true)
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

    /// The content hash of every snapshot (which files in the data folder have a row).
    pub(super) async fn all_sha256(&self) -> sqlx::Result<Vec<String>> {
        with_db!(&self.db, |p| sqlx::query_scalar(
            "SELECT sha256 FROM snapshots"
        )
        .fetch_all(p)
        .await)
    }

    /// Deletes snapshot `id`'s row (its tags go with it); its content hash, or `None` if there
    /// was none.
    pub(super) async fn delete_row(&self, id: &str) -> sqlx::Result<Option<String>> {
        with_db!(&self.db, |p| sqlx::query_scalar(
            "DELETE FROM snapshots WHERE id = $1 RETURNING sha256"
        )
        .bind(id)
        .fetch_optional(p)
        .await)
    }
}

/// `text` for a LIKE pattern with `ESCAPE '\'`: its `%`, `_` and `\` match themselves.
fn like_literal(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '%' | '_' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Inserts a snapshot's tags in its transaction.
async fn insert_tags(tx: &mut Tx, id: &str, tags: &[Tag]) -> sqlx::Result<()> {
    with_tx!(tx, |c| {
        for t in tags {
            sqlx::query(
                "INSERT INTO snapshot_tags (snapshot_id, key, value) VALUES ($1, $2, $3) \
                 ON CONFLICT DO NOTHING",
            )
            .bind(id)
            .bind(&t.key)
            .bind(&t.value)
            .execute(&mut *c)
            .await?;
        }
        Ok(())
    })
}
