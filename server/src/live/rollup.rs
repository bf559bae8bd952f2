//! The roll-up: raw samples older than the raw retention folded into one-minute rows (min, max,
//! mean), and everything older than the roll-up retention deleted, in one transaction.

use crate::library::Library;

/// Folds raw `gpu_samples` older than `?1` into one-minute rows (merging into a row already there).
const GPU_ROLL_UP: &str = "INSERT INTO gpu_samples_1m (gpu_uuid, minute_ms, n, used_min_bytes, used_max_bytes, used_mean_bytes, \
     reserved_bytes, gpu_util_mean, temperature_max_c, power_mean_mw) \
     SELECT gpu_uuid, time_ms / 60000 * 60000 AS m, count(*), min(used_bytes), max(used_bytes), \
     CAST(avg(used_bytes) AS INTEGER), max(reserved_bytes), CAST(avg(gpu_util) AS INTEGER), max(temperature_c), \
     CAST(avg(power_mw) AS INTEGER) FROM gpu_samples WHERE time_ms < ?1 GROUP BY gpu_uuid, m \
     ON CONFLICT (gpu_uuid, minute_ms) DO UPDATE SET \
     used_mean_bytes = (used_mean_bytes * n + excluded.used_mean_bytes * excluded.n) / (n + excluded.n), \
     n = n + excluded.n, used_min_bytes = min(used_min_bytes, excluded.used_min_bytes), \
     used_max_bytes = max(used_max_bytes, excluded.used_max_bytes), \
     temperature_max_c = max(temperature_max_c, excluded.temperature_max_c)";

/// Folds raw `process_samples` older than `?1` into one-minute rows (merging into a row already there).
const PROCESS_ROLL_UP: &str = "INSERT INTO process_samples_1m (host, gpu_uuid, pid, start_time_ms, minute_ms, name, n, used_min_bytes, \
     used_max_bytes, used_mean_bytes) \
     SELECT host, gpu_uuid, pid, start_time_ms, time_ms / 60000 * 60000 AS m, max(name), count(*), \
     min(used_bytes), max(used_bytes), CAST(avg(used_bytes) AS INTEGER) FROM process_samples \
     WHERE time_ms < ?1 GROUP BY host, gpu_uuid, pid, start_time_ms, m \
     ON CONFLICT (host, gpu_uuid, pid, coalesce(start_time_ms, -1), minute_ms) DO UPDATE SET \
     used_mean_bytes = (used_mean_bytes * n + excluded.used_mean_bytes * excluded.n) / (n + excluded.n), \
     n = n + excluded.n, used_min_bytes = min(used_min_bytes, excluded.used_min_bytes), \
     used_max_bytes = max(used_max_bytes, excluded.used_max_bytes)";

/// Folds raw `allocator_samples` older than `?1` into one-minute rows (merging into a row already there).
const ALLOCATOR_ROLL_UP: &str = "INSERT INTO allocator_samples_1m (host, pid, start_time_ms, device, gpu_uuid, minute_ms, n, last_step, \
     allocated_min_bytes, allocated_max_bytes, allocated_mean_bytes, reserved_max_bytes, reserved_mean_bytes, \
     inactive_split_max_bytes, alloc_retries, ooms) \
     SELECT host, pid, start_time_ms, device, max(gpu_uuid), time_ms / 60000 * 60000 AS m, count(*), max(step), \
     min(allocated_bytes), max(allocated_bytes), CAST(avg(allocated_bytes) AS INTEGER), max(reserved_bytes), \
     CAST(avg(reserved_bytes) AS INTEGER), max(inactive_split_bytes), max(alloc_retries), max(ooms) \
     FROM allocator_samples WHERE time_ms < ?1 GROUP BY host, pid, start_time_ms, device, m \
     ON CONFLICT (host, pid, coalesce(start_time_ms, -1), device, minute_ms) DO UPDATE SET \
     allocated_mean_bytes = (allocated_mean_bytes * n + excluded.allocated_mean_bytes * excluded.n) / (n + excluded.n), \
     reserved_mean_bytes = (reserved_mean_bytes * n + excluded.reserved_mean_bytes * excluded.n) / (n + excluded.n), \
     n = n + excluded.n, last_step = max(last_step, excluded.last_step), \
     allocated_min_bytes = min(allocated_min_bytes, excluded.allocated_min_bytes), \
     allocated_max_bytes = max(allocated_max_bytes, excluded.allocated_max_bytes), \
     reserved_max_bytes = max(reserved_max_bytes, excluded.reserved_max_bytes), \
     inactive_split_max_bytes = max(inactive_split_max_bytes, excluded.inactive_split_max_bytes), \
     alloc_retries = max(alloc_retries, excluded.alloc_retries), ooms = max(ooms, excluded.ooms)";

/// What one roll-up pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RollUp {
    /// Raw rows folded into one-minute rows (and deleted).
    pub rolled_rows: u64,
    /// Rows (raw or one-minute) deleted for being older than their retention.
    pub expired_rows: u64,
}

impl Library {
    /// Folds raw samples older than `raw_before_ms` (rounded down to a minute) into one-minute
    /// rows (min/max/mean; a late sample for an already rolled-up minute is merged in) and deletes
    /// them; deletes one-minute rows, events and batch records older than `rollup_before_ms`.
    /// One transaction: a crash leaves either the raw rows or their roll-up, never both or neither.
    pub async fn roll_up(&self, raw_before_ms: i64, rollup_before_ms: i64) -> sqlx::Result<RollUp> {
        let cut = raw_before_ms.div_euclid(60_000) * 60_000;
        let _turn = self.live_writer.lock().await;
        let mut tx = self.db.begin().await?;
        let mut rolled = 0u64;
        for (insert, delete) in [
            (GPU_ROLL_UP, "DELETE FROM gpu_samples WHERE time_ms < ?"),
            (
                PROCESS_ROLL_UP,
                "DELETE FROM process_samples WHERE time_ms < ?",
            ),
            (
                ALLOCATOR_ROLL_UP,
                "DELETE FROM allocator_samples WHERE time_ms < ?",
            ),
        ] {
            sqlx::query(insert).bind(cut).execute(&mut *tx).await?;
            rolled += sqlx::query(delete)
                .bind(cut)
                .execute(&mut *tx)
                .await?
                .rows_affected();
        }
        // The latest rows stand for raw samples: they go with them.
        for q in [
            "DELETE FROM gpu_latest WHERE time_ms < ?",
            "DELETE FROM allocator_latest WHERE time_ms < ?",
        ] {
            sqlx::query(sqlx::AssertSqlSafe(q))
                .bind(cut)
                .execute(&mut *tx)
                .await?;
        }
        let mut expired = 0u64;
        for q in [
            "DELETE FROM gpu_samples_1m WHERE minute_ms < ?",
            "DELETE FROM process_samples_1m WHERE minute_ms < ?",
            "DELETE FROM allocator_samples_1m WHERE minute_ms < ?",
            "DELETE FROM events WHERE time_ms < ?",
            "DELETE FROM ingested_batches WHERE received_at_ms < ?",
            "DELETE FROM processes WHERE last_seen_ms < ?",
            "DELETE FROM hosts WHERE last_seen_ms < ?",
        ] {
            expired += sqlx::query(sqlx::AssertSqlSafe(q))
                .bind(rollup_before_ms)
                .execute(&mut *tx)
                .await?
                .rows_affected();
        }
        tx.commit().await?;
        Ok(RollUp {
            rolled_rows: rolled,
            expired_rows: expired,
        })
    }
}
