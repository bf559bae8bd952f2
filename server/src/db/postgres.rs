//! PostgreSQL's side of the seam: a database shared by several servers (issue 16). Where SQLite
//! has one server per data folder, here servers take turns through advisory locks (the roll-up,
//! a snapshot's files), hear each other's batches through `LISTEN`/`NOTIFY`, keep the sample
//! tables in day partitions, and bound every live read with a statement timeout.

use std::str::FromStr;

use anyhow::Context;
use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};

use super::conn::{Backend, Conn, Pool, Published, RowSteps, StepState, opt};

/// Longest a live read may run on PostgreSQL (see `LiveRead`).
pub const LIVE_READ_TIMEOUT_MS: u64 = 30_000;

/// Connections for ingest, uploads and the library (live reads have their own).
const CONNECTIONS: u32 = 8;

/// Files without a row younger than this are left at start: another server may be between
/// renaming an upload's files into place and inserting its row.
pub(super) const ORPHAN_GRACE: std::time::Duration = std::time::Duration::from_secs(600);

/// The channel stored batches are announced on.
const CHANNEL: &str = "memscope_live";

/// The advisory lock that lets one server at a time roll up, expire and make day partitions.
const ROLL_UP_LOCK: i64 = 0x6d65_6d73_726f_6c6c; // "memsroll"

/// One day in milliseconds: a day partition's width.
const DAY_MS: i64 = 86_400_000;

/// One-minute rows read per step of the packing cursor.
const CURSOR_ROWS: i64 = 50_000;

/// Connects to the database at `url`, applies the migrations it lacks, makes today's
/// partitions, and opens the live-read pool (read-only, bounded by [`LIVE_READ_TIMEOUT_MS`]).
pub(super) async fn open(url: &str, read_connections: u32) -> anyhow::Result<(Pool, Pool)> {
    let pool = PgPoolOptions::new()
        .max_connections(CONNECTIONS)
        // A server that cannot reach its database says so soon instead of retrying for long.
        .acquire_timeout(std::time::Duration::from_secs(10))
        .connect(url)
        .await
        .with_context(|| format!("cannot connect to the PostgreSQL database {}", redact(url)))?;
    sqlx::migrate!("../migrations/postgres")
        .run(&pool)
        .await
        .context("cannot apply the PostgreSQL migrations (migrations/postgres/)")?;
    // Today's partitions before the first batch (the roll-up makes the coming days' every
    // minute); skipped while another server rolls up (it makes them).
    make_days(&pool, None)
        .await
        .context("cannot create the day partitions of the sample tables")?;
    let reads = PgPoolOptions::new()
        .max_connections(read_connections)
        .acquire_timeout(std::time::Duration::from_secs(10))
        .after_connect(|conn, _| {
            Box::pin(async move {
                // PostgreSQL 14+; an older server keeps only the statement timeout.
                let _ = sqlx::query("SET client_connection_check_interval = 100")
                    .execute(&mut *conn)
                    .await;
                Ok(())
            })
        })
        .connect_with(PgConnectOptions::from_str(url)?.options([
            ("statement_timeout", LIVE_READ_TIMEOUT_MS.to_string()),
            ("default_transaction_read_only", "on".to_string()),
        ]))
        .await
        .with_context(|| format!("cannot connect to {} for live reads", redact(url)))?;
    Ok((Pool::Postgres(pool), Pool::Postgres(reads)))
}

/// A transaction holding the advisory lock on `key` (released when it ends: dropped, rolled
/// back).
pub(super) async fn advisory_lock(
    pool: &PgPool,
    key: &str,
) -> sqlx::Result<sqlx::Transaction<'static, sqlx::Postgres>> {
    let mut tx = pool.begin().await?;
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))")
        .bind(key)
        .execute(&mut *tx)
        .await?;
    Ok(tx)
}

/// A listener on the batches' channel.
pub(super) async fn listen(pool: &PgPool) -> anyhow::Result<PgListener> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener.listen(CHANNEL).await?;
    Ok(listener)
}

/// Makes the day partitions from yesterday to the day after tomorrow (those not made yet) and,
/// with `drop_before_ms`, drops whole days before it; returns the rows dropped, or `None` when
/// another server holds the roll-up's lock (it is doing the same).
pub(super) async fn make_days(
    pool: &PgPool,
    drop_before_ms: Option<i64>,
) -> sqlx::Result<Option<u64>> {
    let mut tx = pool.begin().await?;
    if !try_lock(&mut tx).await? {
        return Ok(None);
    }
    let now = crate::now_ms();
    sqlx::query("SELECT memscope_day_partitions($1, $2)")
        .bind(now - DAY_MS)
        .bind(now + 2 * DAY_MS)
        .execute(&mut *tx)
        .await?;
    let mut dropped = 0;
    if let Some(before_ms) = drop_before_ms {
        let rows: i64 = sqlx::query_scalar("SELECT memscope_drop_days_before($1)")
            .bind(before_ms)
            .fetch_one(&mut *tx)
            .await?;
        dropped = rows as u64;
    }
    tx.commit().await?;
    Ok(Some(dropped))
}

/// Takes the roll-up's advisory lock for the transaction `tx`, if no other server holds it.
async fn try_lock(tx: &mut sqlx::PgConnection) -> sqlx::Result<bool> {
    sqlx::query_scalar("SELECT pg_try_advisory_xact_lock($1)")
        .bind(ROLL_UP_LOCK)
        .fetch_one(tx)
        .await
}

/// A UTC day as its partitions name it: `YYYYMMDD`.
fn day_name(day_ms: i64) -> String {
    // Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
    let z = day_ms.div_euclid(DAY_MS) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}{m:02}{d:02}")
}

impl Conn for sqlx::PgConnection {
    type Row = sqlx::postgres::PgRow;
    const BACKEND: Backend = Backend::Postgres;

    async fn roll_up_turn(&mut self) -> sqlx::Result<bool> {
        try_lock(self).await
    }

    /// `NOTIFY`, delivered at the commit to every server listening, the one that stored the
    /// batch included.
    async fn publish_notice(&mut self, notice: api::LiveNotice) -> sqlx::Result<Published> {
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(CHANNEL)
            .bind(serde_json::to_string(&notice).expect("a notice serialises"))
            .execute(&mut *self)
            .await?;
        Ok(Published::ByTheDatabase)
    }

    /// One `INSERT … SELECT FROM UNNEST` per table: a column per array parameter, so a statement
    /// takes any number of rows and parses once (no 65,535-parameter limit, no VALUES list).
    async fn insert_samples(&mut self, b: &wire::Batch) -> sqlx::Result<()> {
        if !b.gpus.is_empty() {
            let g = &b.gpus;
            sqlx::query(
                "INSERT INTO gpu_samples (gpu_uuid, time_ms, used_bytes, free_bytes, reserved_bytes, gpu_util, mem_util, \
                 temperature_c, power_mw) SELECT * FROM UNNEST($1::text[], $2::bigint[], $3::bigint[], $4::bigint[], \
                 $5::bigint[], $6::bigint[], $7::bigint[], $8::bigint[], $9::bigint[])",
            )
            .bind(g.iter().map(|g| g.uuid.as_str()).collect::<Vec<_>>())
            .bind(g.iter().map(|g| g.time_ms).collect::<Vec<_>>())
            .bind(g.iter().map(|g| opt(g.memory_used_bytes)).collect::<Vec<_>>())
            .bind(g.iter().map(|g| opt(g.memory_free_bytes)).collect::<Vec<_>>())
            .bind(g.iter().map(|g| opt(g.memory_reserved_bytes)).collect::<Vec<_>>())
            .bind(g.iter().map(|g| g.gpu_util_percent.map(i64::from)).collect::<Vec<_>>())
            .bind(g.iter().map(|g| g.mem_util_percent.map(i64::from)).collect::<Vec<_>>())
            .bind(g.iter().map(|g| g.temperature_c.map(i64::from)).collect::<Vec<_>>())
            .bind(g.iter().map(|g| g.power_mw.map(i64::from)).collect::<Vec<_>>())
            .execute(&mut *self)
            .await?;
        }
        if !b.processes.is_empty() {
            let p = &b.processes;
            sqlx::query(
                "INSERT INTO process_samples (host, gpu_uuid, pid, start_time_ms, time_ms, name, cgroup, used_bytes) \
                 SELECT $1, * FROM UNNEST($2::text[], $3::bigint[], $4::bigint[], $5::bigint[], $6::text[], $7::text[], \
                 $8::bigint[])",
            )
            .bind(&b.host)
            .bind(p.iter().map(|p| p.gpu_uuid.as_str()).collect::<Vec<_>>())
            .bind(p.iter().map(|p| i64::from(p.pid)).collect::<Vec<_>>())
            .bind(p.iter().map(|p| p.start_time_ms).collect::<Vec<_>>())
            .bind(p.iter().map(|p| p.time_ms).collect::<Vec<_>>())
            .bind(p.iter().map(|p| p.name.as_deref()).collect::<Vec<_>>())
            .bind(p.iter().map(|p| p.cgroup.as_deref()).collect::<Vec<_>>())
            .bind(p.iter().map(|p| p.used_bytes as i64).collect::<Vec<_>>())
            .execute(&mut *self)
            .await?;
        }
        if !b.allocator.is_empty() {
            let a = &b.allocator;
            let col = |f: fn(&wire::AllocatorSample) -> Option<u64>| {
                a.iter().map(|x| opt(f(x))).collect::<Vec<_>>()
            };
            sqlx::query(
                "INSERT INTO allocator_samples (host, pid, start_time_ms, device, time_ms, step, allocated_bytes, \
                 reserved_bytes, active_bytes, inactive_split_bytes, requested_bytes, alloc_retries, ooms, gpu_uuid, \
                 segments, largest_free_block_bytes) \
                 SELECT $1, * FROM UNNEST($2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[], $6::bigint[], \
                 $7::bigint[], $8::bigint[], $9::bigint[], $10::bigint[], $11::bigint[], $12::bigint[], $13::bigint[], \
                 $14::text[], $15::bigint[], $16::bigint[]) ON CONFLICT DO NOTHING",
            )
            .bind(&b.host)
            .bind(a.iter().map(|x| i64::from(x.pid)).collect::<Vec<_>>())
            .bind(a.iter().map(|x| x.start_time_ms).collect::<Vec<_>>())
            .bind(a.iter().map(|x| i64::from(x.device)).collect::<Vec<_>>())
            .bind(a.iter().map(|x| x.time_ms).collect::<Vec<_>>())
            .bind(col(|x| x.step))
            .bind(a.iter().map(|x| x.allocated_bytes as i64).collect::<Vec<_>>())
            .bind(a.iter().map(|x| x.reserved_bytes as i64).collect::<Vec<_>>())
            .bind(col(|x| x.active_bytes))
            .bind(col(|x| x.inactive_split_bytes))
            .bind(col(|x| x.requested_bytes))
            .bind(col(|x| x.alloc_retries))
            .bind(col(|x| x.ooms))
            .bind(a.iter().map(|x| x.gpu_uuid.as_deref()).collect::<Vec<_>>())
            .bind(col(|x| x.segments))
            .bind(col(|x| x.largest_free_block_bytes))
            .execute(&mut *self)
            .await?;
        }
        Ok(())
    }

    /// Through a cursor, `CURSOR_ROWS` rows a step.
    async fn next_rows(&mut self, steps: &mut RowSteps) -> sqlx::Result<Vec<Self::Row>> {
        match steps.state {
            StepState::Done => return Ok(Vec::new()),
            StepState::NotStarted => {
                // The sort of a closed day's rows spills to disk with the default 4 MB.
                sqlx::query("SET LOCAL work_mem = '64MB'")
                    .execute(&mut *self)
                    .await?;
                sqlx::query(sqlx::AssertSqlSafe(format!(
                    "DECLARE memscope_packing NO SCROLL CURSOR FOR {}",
                    steps.sql.replace("$1", &steps.before_ms.to_string())
                )))
                .execute(&mut *self)
                .await?;
                steps.state = StepState::Open;
            }
            StepState::Open => {}
        }
        // Not a prepared statement: the cursor's columns are the table's, and a FETCH's text is
        // the same for every table.
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "FETCH {CURSOR_ROWS} FROM memscope_packing"
        )))
        .persistent(false)
        .fetch_all(&mut *self)
        .await?;
        if (rows.len() as i64) < CURSOR_ROWS {
            sqlx::query("CLOSE memscope_packing")
                .execute(&mut *self)
                .await?;
            steps.state = StepState::Done;
        }
        Ok(rows)
    }

    async fn retire_rolled_days(
        &mut self,
        table: &str,
        days: &std::collections::BTreeSet<i64>,
        _before_ms: i64,
    ) -> sqlx::Result<()> {
        for &day_ms in days {
            let part = format!("{table}_d{}", day_name(day_ms));
            let exists: bool = sqlx::query_scalar("SELECT to_regclass($1) IS NOT NULL")
                .bind(&part)
                .fetch_one(&mut *self)
                .await?;
            if exists {
                sqlx::query(sqlx::AssertSqlSafe(format!("TRUNCATE {part}")))
                    .execute(&mut *self)
                    .await?;
            }
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "DELETE FROM {table} WHERE minute_ms >= $1 AND minute_ms < $2"
            )))
            .bind(day_ms)
            .bind(day_ms + DAY_MS)
            .execute(&mut *self)
            .await?;
        }
        Ok(())
    }
}

/// `url` with its password replaced, for messages and logs.
pub fn redact(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) if u.password().is_some() => {
            let _ = u.set_password(Some("***"));
            u.to_string()
        }
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_are_named_by_their_utc_day() {
        assert_eq!(day_name(0), "19700101");
        assert_eq!(day_name(20_000 * DAY_MS + 5), "20241004");
        assert_eq!(day_name(-DAY_MS), "19691231");
    }

    #[test]
    fn a_password_never_reaches_a_message() {
        assert_eq!(
            redact("postgres://memscope:s3cret@db:5432/memscope"),
            "postgres://memscope:***@db:5432/memscope"
        );
        assert_eq!(
            redact("postgres://memscope@db/memscope"),
            "postgres://memscope@db/memscope"
        );
    }
}
