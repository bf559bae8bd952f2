//! The roll-up: raw samples older than the raw retention folded into one-minute rows (min, max,
//! mean) and everything older than the roll-up retention deleted, in one transaction; then the
//! one-minute rows of days over packed (`days`), a transaction per table.

use super::days;
use super::store::Live;
use crate::db::Tx;
use crate::db::{Conn, Dialects};
use crate::with_tx;

/// Folds raw `gpu_samples` older than `$1` into one-minute rows (merging into a row already
/// there). `$max`/`$min`: the dialect's larger and smaller of two values.
macro_rules! gpu_roll_up {
    ($max:literal, $min:literal) => {
        concat!(
            "INSERT INTO gpu_samples_1m (gpu_uuid, minute_ms, n, used_min_bytes, used_max_bytes, used_mean_bytes, \
             reserved_bytes, gpu_util_mean, temperature_max_c, power_mean_mw) \
             SELECT gpu_uuid, time_ms / 60000 * 60000 AS m, count(*), min(used_bytes), max(used_bytes), ",
            mean!("used_bytes"),
            ", max(reserved_bytes), ",
            mean!("gpu_util"),
            ", max(temperature_c), ",
            mean!("power_mw"),
            " FROM gpu_samples WHERE time_ms < $1 GROUP BY gpu_uuid, m \
             ON CONFLICT (gpu_uuid, minute_ms) DO UPDATE SET \
             used_mean_bytes = (gpu_samples_1m.used_mean_bytes * gpu_samples_1m.n \
             + excluded.used_mean_bytes * excluded.n) / (gpu_samples_1m.n + excluded.n), \
             n = gpu_samples_1m.n + excluded.n, \
             used_min_bytes = ", $min, "(gpu_samples_1m.used_min_bytes, excluded.used_min_bytes), \
             used_max_bytes = ", $max, "(gpu_samples_1m.used_max_bytes, excluded.used_max_bytes), \
             temperature_max_c = ", $max, "(gpu_samples_1m.temperature_max_c, excluded.temperature_max_c)"
        )
    };
}

/// The mean of a BIGINT column as a BIGINT, truncated, in either dialect (PostgreSQL's `avg`
/// is NUMERIC and rounds; SQLite's is REAL).
macro_rules! mean {
    ($col:literal) => {
        concat!(
            "CAST(sum(",
            $col,
            ") AS BIGINT) / NULLIF(count(",
            $col,
            "), 0)"
        )
    };
}

/// Folds raw `process_samples` older than `$1` into one-minute rows (merging into a row already
/// there). `$key`: the conflict target (a nullable start time keys by expression in SQLite).
macro_rules! process_roll_up {
    ($key:literal, $max:literal, $min:literal) => {
        concat!(
            "INSERT INTO process_samples_1m (host, gpu_uuid, pid, start_time_ms, minute_ms, name, n, used_min_bytes, \
             used_max_bytes, used_mean_bytes) \
             SELECT host, gpu_uuid, pid, start_time_ms, time_ms / 60000 * 60000 AS m, max(name), count(*), \
             min(used_bytes), max(used_bytes), ",
            mean!("used_bytes"),
            " FROM process_samples WHERE time_ms < $1 GROUP BY host, gpu_uuid, pid, start_time_ms, m \
             ON CONFLICT ", $key, " DO UPDATE SET \
             used_mean_bytes = (process_samples_1m.used_mean_bytes * process_samples_1m.n \
             + excluded.used_mean_bytes * excluded.n) / (process_samples_1m.n + excluded.n), \
             n = process_samples_1m.n + excluded.n, \
             used_min_bytes = ", $min, "(process_samples_1m.used_min_bytes, excluded.used_min_bytes), \
             used_max_bytes = ", $max, "(process_samples_1m.used_max_bytes, excluded.used_max_bytes)"
        )
    };
}

/// Folds raw `allocator_samples` older than `$1` into one-minute rows (merging into a row
/// already there).
macro_rules! allocator_roll_up {
    ($key:literal, $max:literal, $min:literal) => {
        concat!(
            "INSERT INTO allocator_samples_1m (host, pid, start_time_ms, device, gpu_uuid, minute_ms, n, last_step, \
             allocated_min_bytes, allocated_max_bytes, allocated_mean_bytes, reserved_max_bytes, reserved_mean_bytes, \
             inactive_split_max_bytes, alloc_retries, ooms) \
             SELECT host, pid, start_time_ms, device, max(gpu_uuid), time_ms / 60000 * 60000 AS m, count(*), max(step), \
             min(allocated_bytes), max(allocated_bytes), ",
            mean!("allocated_bytes"),
            ", max(reserved_bytes), ",
            mean!("reserved_bytes"),
            ", max(inactive_split_bytes), max(alloc_retries), max(ooms) \
             FROM allocator_samples WHERE time_ms < $1 GROUP BY host, pid, start_time_ms, device, m \
             ON CONFLICT ", $key, " DO UPDATE SET \
             allocated_mean_bytes = (allocator_samples_1m.allocated_mean_bytes * allocator_samples_1m.n \
             + excluded.allocated_mean_bytes * excluded.n) / (allocator_samples_1m.n + excluded.n), \
             reserved_mean_bytes = (allocator_samples_1m.reserved_mean_bytes * allocator_samples_1m.n \
             + excluded.reserved_mean_bytes * excluded.n) / (allocator_samples_1m.n + excluded.n), \
             n = allocator_samples_1m.n + excluded.n, \
             last_step = ", $max, "(allocator_samples_1m.last_step, excluded.last_step), \
             allocated_min_bytes = ", $min, "(allocator_samples_1m.allocated_min_bytes, excluded.allocated_min_bytes), \
             allocated_max_bytes = ", $max, "(allocator_samples_1m.allocated_max_bytes, excluded.allocated_max_bytes), \
             reserved_max_bytes = ", $max, "(allocator_samples_1m.reserved_max_bytes, excluded.reserved_max_bytes), \
             inactive_split_max_bytes = ", $max,
            "(allocator_samples_1m.inactive_split_max_bytes, excluded.inactive_split_max_bytes), \
             alloc_retries = ", $max, "(allocator_samples_1m.alloc_retries, excluded.alloc_retries), \
             ooms = ", $max, "(allocator_samples_1m.ooms, excluded.ooms)"
        )
    };
}

const GPU_ROLL_UP: Dialects = Dialects {
    sqlite: gpu_roll_up!("max", "min"),
    postgres: gpu_roll_up!("greatest", "least"),
};
const PROCESS_ROLL_UP: Dialects = Dialects {
    sqlite: process_roll_up!(
        "(host, gpu_uuid, pid, coalesce(start_time_ms, -1), minute_ms)",
        "max",
        "min"
    ),
    postgres: process_roll_up!(
        "(host, gpu_uuid, pid, start_time_ms, minute_ms)",
        "greatest",
        "least"
    ),
};
const ALLOCATOR_ROLL_UP: Dialects = Dialects {
    sqlite: allocator_roll_up!(
        "(host, pid, coalesce(start_time_ms, -1), device, minute_ms)",
        "max",
        "min"
    ),
    postgres: allocator_roll_up!(
        "(host, pid, start_time_ms, device, minute_ms)",
        "greatest",
        "least"
    ),
};

/// What one roll-up pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RollUp {
    /// Raw rows folded into one-minute rows (and deleted).
    pub rolled_rows: u64,
    /// Rows (raw, one-minute or packed) deleted for being older than their retention.
    pub expired_rows: u64,
    /// One-minute rows of days over, packed into one row per series and day (`days`).
    pub packed_rows: u64,
    /// Packed rows written.
    pub packed_series_days: u64,
    /// Another server was rolling up (PostgreSQL): this pass did nothing.
    pub skipped: bool,
}

impl Live {
    /// Folds raw samples older than `raw_before_ms` (rounded down to a minute) into one-minute
    /// rows (min/max/mean; a late sample for an already rolled-up minute is merged in) and deletes
    /// them; deletes one-minute rows, events and batch records older than `rollup_before_ms` (and
    /// packed days wholly older); packs the one-minute rows of the days before the cut's day.
    /// One transaction for the roll-up and retention, then one per table for packing: a crash
    /// leaves either the raw rows or their roll-up, never both or neither, and either a day's
    /// one-minute rows or its packed rows.
    pub async fn roll_up(&self, raw_before_ms: i64, rollup_before_ms: i64) -> sqlx::Result<RollUp> {
        let cut = raw_before_ms.div_euclid(60_000) * 60_000;
        let _turn = self.db.sole_writer_turn().await;
        // Partitions first: the coming days', so that new rows never land in a DEFAULT
        // partition, and whole days past the retention dropped rather than deleted.
        let Some(dropped) = self.db.retire_days(Some(rollup_before_ms)).await? else {
            return Ok(RollUp {
                skipped: true,
                ..RollUp::default()
            });
        };
        let mut tx = self.db.begin().await?;
        // One server at a time (PostgreSQL): the others skip this minute.
        if !with_tx!(&mut tx, |c| c.roll_up_turn().await)? {
            return Ok(RollUp {
                skipped: true,
                ..RollUp::default()
            });
        }
        let rolled = roll_raw(&mut tx, cut).await?;
        let expired = expire(&mut tx, rollup_before_ms).await?;
        tx.commit().await?;
        let packed = self.pack_closed_days(cut).await?;
        Ok(RollUp {
            rolled_rows: rolled,
            expired_rows: expired + dropped,
            packed_rows: packed.rows,
            packed_series_days: packed.series_days,
            skipped: false,
        })
    }
}

/// Folds the raw samples before `cut` into one-minute rows and deletes them (and the latest rows,
/// which stand for them): the raw rows deleted.
async fn roll_raw(tx: &mut Tx, cut: i64) -> sqlx::Result<u64> {
    with_tx!(tx, |c| {
        let mut rolled = 0u64;
        for (insert, delete) in [
            (GPU_ROLL_UP, "DELETE FROM gpu_samples WHERE time_ms < $1"),
            (
                PROCESS_ROLL_UP,
                "DELETE FROM process_samples WHERE time_ms < $1",
            ),
            (
                ALLOCATOR_ROLL_UP,
                "DELETE FROM allocator_samples WHERE time_ms < $1",
            ),
        ] {
            sqlx::query(c.sql(&insert))
                .bind(cut)
                .execute(&mut *c)
                .await?;
            rolled += sqlx::query(delete)
                .bind(cut)
                .execute(&mut *c)
                .await?
                .rows_affected();
        }
        for q in [
            "DELETE FROM gpu_latest WHERE time_ms < $1",
            "DELETE FROM allocator_latest WHERE time_ms < $1",
            "DELETE FROM process_latest WHERE time_ms < $1",
        ] {
            sqlx::query(q).bind(cut).execute(&mut *c).await?;
        }
        Ok(rolled)
    })
}

/// Deletes one-minute rows, events, batch records, processes and hosts older than `before_ms`,
/// and packed days once all of the day is past it: the rows deleted.
async fn expire(tx: &mut Tx, before_ms: i64) -> sqlx::Result<u64> {
    with_tx!(tx, |c| {
        let mut expired = 0u64;
        for q in [
            "DELETE FROM gpu_samples_1m WHERE minute_ms < $1",
            "DELETE FROM process_samples_1m WHERE minute_ms < $1",
            "DELETE FROM allocator_samples_1m WHERE minute_ms < $1",
            "DELETE FROM events WHERE time_ms < $1",
            "DELETE FROM ingested_batches WHERE received_at_ms < $1",
            "DELETE FROM processes WHERE last_seen_ms < $1",
            "DELETE FROM hosts WHERE last_seen_ms < $1",
        ] {
            expired += sqlx::query(q)
                .bind(before_ms)
                .execute(&mut *c)
                .await?
                .rows_affected();
        }
        for t in days::TABLES {
            expired += sqlx::query(sqlx::AssertSqlSafe(format!(
                "DELETE FROM {} WHERE day_ms <= $1",
                t.packed
            )))
            .bind(before_ms.saturating_sub(days::DAY_MS))
            .execute(&mut *c)
            .await?
            .rows_affected();
        }
        Ok(expired)
    })
}

impl Live {
    /// Packs the days over (before the cut's day), one row per series and day: a transaction
    /// per table, so that the lock PostgreSQL's TRUNCATE of a packed day's partition takes is
    /// held for a moment, not while the next table is packed.
    async fn pack_closed_days(&self, cut: i64) -> sqlx::Result<days::Packed> {
        let before_ms = cut.div_euclid(days::DAY_MS) * days::DAY_MS;
        let mut packed = days::Packed::default();
        for t in days::TABLES {
            let mut tx = self.db.begin().await?;
            if !with_tx!(&mut tx, |c| c.roll_up_turn().await)? {
                break;
            }
            let p = days::pack_days(&mut tx, t, before_ms).await?;
            tx.commit().await?;
            packed.rows += p.rows;
            packed.series_days += p.series_days;
        }
        Ok(packed)
    }
}
