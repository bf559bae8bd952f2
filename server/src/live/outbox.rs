//! The webhook notifier's outbox (`webhook_outbox`): what it owes its receiver. A message is a
//! row before it is sent, keyed by what it tells of (an OOM, a process found growing), so the
//! same one is never queued twice, a restart resends what was not delivered, and a scan after a
//! restart resumes where the queued OOMs end. `crate::notify` fills it and sends it.

use sqlx::FromRow;

use super::store::Live;
use crate::with_db;

/// One message owed.
#[derive(Debug, Clone, FromRow)]
pub struct Owed {
    pub id: i64,
    pub key: String,
    pub body: String,
    pub attempts: i32,
}

/// Messages by state (`/metrics`).
#[derive(Debug, Clone, Copy, Default)]
pub struct OutboxCounts {
    pub pending: i64,
    pub delivered: i64,
    /// Attempts that failed so far (each retried later).
    pub failed_attempts: i64,
}

impl Live {
    /// Queues a message unless one with its key is queued already; whether it was new.
    pub async fn outbox_add(&self, key: &str, event_ms: i64, body: &str) -> sqlx::Result<bool> {
        let _turn = self.db.writer_turn().await;
        let now = crate::now_ms();
        let done = with_db!(&self.db, |p| {
            sqlx::query(
            "INSERT INTO webhook_outbox (key, created_ms, event_ms, body, next_try_ms) VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (key) DO NOTHING",
        )
        .bind(key)
        .bind(now)
        .bind(event_ms)
        .bind(body)
        .bind(now)
        .execute(p)
        .await
        .map(|r| r.rows_affected())
        })?;
        Ok(done == 1)
    }

    /// Messages due at `now_ms`, oldest first.
    pub async fn outbox_due(&self, now_ms: i64, limit: i64) -> sqlx::Result<Vec<Owed>> {
        with_db!(&self.db, |p| {
            sqlx::query_as(
            "SELECT id, key, body, attempts FROM webhook_outbox WHERE delivered_ms IS NULL AND next_try_ms <= $1 \
             ORDER BY id LIMIT $2",
        )
        .bind(now_ms)
        .bind(limit)
        .fetch_all(p)
        .await
        })
    }

    /// The receiver took message `id`.
    pub async fn outbox_delivered(&self, id: i64) -> sqlx::Result<()> {
        let _turn = self.db.writer_turn().await;
        with_db!(&self.db, |p| {
            sqlx::query(
            "UPDATE webhook_outbox SET delivered_ms = $2, attempts = attempts + 1, last_error = NULL WHERE id = $1",
        )
        .bind(id)
        .bind(crate::now_ms())
        .execute(p)
        .await
        .map(|r| r.rows_affected())
        })?;
        Ok(())
    }

    /// Sending message `id` failed: try again at `next_try_ms`.
    pub async fn outbox_failed(&self, id: i64, next_try_ms: i64, error: &str) -> sqlx::Result<()> {
        let _turn = self.db.writer_turn().await;
        with_db!(&self.db, |p| {
            sqlx::query(
            "UPDATE webhook_outbox SET attempts = attempts + 1, next_try_ms = $2, last_error = $3 WHERE id = $1",
        )
        .bind(id)
        .bind(next_try_ms)
        .bind(error)
        .execute(p)
        .await
        .map(|r| r.rows_affected())
        })?;
        Ok(())
    }

    /// Where a scan for OOMs resumes: the latest queued OOM's time, if any.
    pub async fn outbox_latest_oom_ms(&self) -> sqlx::Result<Option<i64>> {
        with_db!(&self.db, |p| sqlx::query_scalar(
            "SELECT max(event_ms) FROM webhook_outbox WHERE key LIKE 'oom:%'",
        )
        .fetch_one(p)
        .await)
    }

    pub async fn outbox_counts(&self) -> sqlx::Result<OutboxCounts> {
        let (pending, delivered, failed): (Option<i64>, Option<i64>, Option<i64>) = with_db!(
            &self.db,
            |p| {
                sqlx::query_as(
                "SELECT CAST(sum(CASE WHEN delivered_ms IS NULL THEN 1 ELSE 0 END) AS BIGINT), \
                 CAST(sum(CASE WHEN delivered_ms IS NULL THEN 0 ELSE 1 END) AS BIGINT), \
                 CAST(sum(CASE WHEN delivered_ms IS NULL THEN attempts ELSE attempts - 1 END) AS BIGINT) \
                 FROM webhook_outbox",
            )
            .fetch_one(p)
            .await
            }
        )?;
        Ok(OutboxCounts {
            pending: pending.unwrap_or(0),
            delivered: delivered.unwrap_or(0),
            failed_attempts: failed.unwrap_or(0),
        })
    }

    /// OOM events stored with a time from `since_ms` on, oldest first (at most `limit`).
    pub async fn ooms_since(
        &self,
        since_ms: i64,
        limit: i64,
    ) -> sqlx::Result<Vec<super::queries::EventRow>> {
        with_db!(&self.db, |p| sqlx::query_as(
            "SELECT host, time_ms, kind, pid, device, message, snapshot_id FROM events \
             WHERE kind = 'oom' AND time_ms >= $1 ORDER BY time_ms LIMIT $2",
        )
        .bind(since_ms)
        .bind(limit)
        .fetch_all(p)
        .await)
    }
}
