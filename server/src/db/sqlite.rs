//! SQLite's side of the seam: the database file in the data folder (one server per folder),
//! its read-only pool whose statements stop when their request goes away, and [`Conn`] for its
//! connections.

use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use anyhow::Context;
use sqlx::SqlitePool;
use sqlx::pool::PoolConnection;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};

use super::conn::{Backend, Conn, Pool, Published, RowSteps, StepState, opt};

/// SQLite virtual-machine steps between looks at a live read's cancel flag (well under 1 ms).
const INTERRUPT_CHECK_STEPS: i32 = 10_000;

/// Rows per multi-row INSERT (16 columns at most: well under SQLite's 32,766 variables).
const ROWS_PER_INSERT: usize = 1000;

/// Opens (creating if needed) the database at `path`, applies `migrations/sqlite/`, and opens a
/// read-only pool of `read_connections` on the same file for live reads.
pub(super) async fn open(path: &Path, read_connections: u32) -> anyhow::Result<(Pool, Pool)> {
    let options = SqliteConnectOptions::from_str("sqlite:")?
        .filename(path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        // An acknowledged upload or batch survives a crash or power loss.
        .synchronous(SqliteSynchronous::Full)
        .foreign_keys(true);
    let db = SqlitePoolOptions::new()
        .max_connections(4)
        .connect_with(options.clone())
        .await
        .with_context(|| format!("cannot open the database {}", path.display()))?;
    sqlx::migrate!("../migrations/sqlite")
        .run(&db)
        .await
        .context("cannot apply database migrations (migrations/sqlite/)")?;
    let reads = SqlitePoolOptions::new()
        .max_connections(read_connections)
        // A connection comes back without its last request's progress handler.
        .after_release(|conn, _| {
            Box::pin(async move {
                conn.lock_handle().await?.remove_progress_handler();
                Ok(true)
            })
        })
        .connect_with(options.read_only(true))
        .await
        .context("cannot open the database for live reads")?;
    Ok((Pool::Sqlite(db), Pool::Sqlite(reads)))
}

/// A connection whose statements stop once `gone` is raised (SQLite's progress handler looks
/// at it every [`INTERRUPT_CHECK_STEPS`] steps); each read stopped so is counted once in
/// `interrupted`.
pub(super) async fn acquire_interruptible(
    pool: &SqlitePool,
    gone: &Arc<AtomicBool>,
    interrupted: &Arc<AtomicU64>,
) -> sqlx::Result<PoolConnection<sqlx::Sqlite>> {
    let mut conn = pool.acquire().await?;
    let (flag, interrupted) = (gone.clone(), interrupted.clone());
    let mut counted = false;
    conn.lock_handle()
        .await?
        .set_progress_handler(INTERRUPT_CHECK_STEPS, move || {
            let go_on = !flag.load(Ordering::Relaxed);
            if !go_on && !counted {
                counted = true;
                interrupted.fetch_add(1, Ordering::Relaxed);
            }
            go_on
        });
    Ok(conn)
}

/// The steps of SQLite's plan for `sql`, its parameters bound to 0.
pub(super) async fn query_plan(pool: &SqlitePool, sql: &str) -> sqlx::Result<Vec<String>> {
    let rows: Vec<(i64, i64, i64, String)> =
        sqlx::query_as(sqlx::AssertSqlSafe(format!("EXPLAIN QUERY PLAN {sql}")))
            .bind(0i64)
            .fetch_all(pool)
            .await?;
    Ok(rows.into_iter().map(|r| r.3).collect())
}

impl Conn for sqlx::SqliteConnection {
    type Row = sqlx::sqlite::SqliteRow;
    const BACKEND: Backend = Backend::Sqlite;

    async fn roll_up_turn(&mut self) -> sqlx::Result<bool> {
        Ok(true)
    }

    async fn publish_notice(&mut self, notice: api::LiveNotice) -> sqlx::Result<Published> {
        Ok(Published::Here(notice))
    }

    /// Multi-row `INSERT … VALUES`, `ROWS_PER_INSERT` rows per statement.
    async fn insert_samples(&mut self, b: &wire::Batch) -> sqlx::Result<()> {
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
                    .push_bind(g.gpu_util_percent.map(i64::from))
                    .push_bind(g.mem_util_percent.map(i64::from))
                    .push_bind(g.temperature_c.map(i64::from))
                    .push_bind(g.power_mw.map(i64::from));
            });
            q.build().execute(&mut *self).await?;
        }
        for chunk in b.processes.chunks(ROWS_PER_INSERT) {
            let mut q = sqlx::QueryBuilder::<sqlx::Sqlite>::new(
                "INSERT INTO process_samples (host, gpu_uuid, pid, start_time_ms, time_ms, name, cgroup, used_bytes) ",
            );
            q.push_values(chunk, |mut row, p| {
                row.push_bind(&b.host)
                    .push_bind(&p.gpu_uuid)
                    .push_bind(i64::from(p.pid))
                    .push_bind(p.start_time_ms)
                    .push_bind(p.time_ms)
                    .push_bind(&p.name)
                    .push_bind(&p.cgroup)
                    .push_bind(p.used_bytes as i64);
            });
            q.build().execute(&mut *self).await?;
        }
        for chunk in b.allocator.chunks(ROWS_PER_INSERT) {
            let mut q = sqlx::QueryBuilder::<sqlx::Sqlite>::new(
                "INSERT INTO allocator_samples (host, pid, start_time_ms, device, time_ms, step, allocated_bytes, \
                 reserved_bytes, active_bytes, inactive_split_bytes, requested_bytes, alloc_retries, ooms, gpu_uuid, \
                 segments, largest_free_block_bytes) ",
            );
            q.push_values(chunk, |mut row, a| {
                row.push_bind(&b.host)
                    .push_bind(i64::from(a.pid))
                    .push_bind(a.start_time_ms)
                    .push_bind(i64::from(a.device))
                    .push_bind(a.time_ms)
                    .push_bind(opt(a.step))
                    .push_bind(a.allocated_bytes as i64)
                    .push_bind(a.reserved_bytes as i64)
                    .push_bind(opt(a.active_bytes))
                    .push_bind(opt(a.inactive_split_bytes))
                    .push_bind(opt(a.requested_bytes))
                    .push_bind(opt(a.alloc_retries))
                    .push_bind(opt(a.ooms))
                    .push_bind(&a.gpu_uuid)
                    .push_bind(opt(a.segments))
                    .push_bind(opt(a.largest_free_block_bytes));
            });
            // Relayed agent samples can arrive twice (see the migration); store them once.
            q.push(" ON CONFLICT DO NOTHING");
            q.build().execute(&mut *self).await?;
        }
        Ok(())
    }

    /// All of them in one step.
    async fn next_rows(&mut self, steps: &mut RowSteps) -> sqlx::Result<Vec<Self::Row>> {
        if steps.state == StepState::Done {
            return Ok(Vec::new());
        }
        steps.state = StepState::Done;
        sqlx::query(sqlx::AssertSqlSafe(steps.sql.clone()))
            .bind(steps.before_ms)
            .fetch_all(&mut *self)
            .await
    }

    async fn retire_rolled_days(
        &mut self,
        table: &str,
        _days: &std::collections::BTreeSet<i64>,
        before_ms: i64,
    ) -> sqlx::Result<()> {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DELETE FROM {table} WHERE minute_ms < $1"
        )))
        .bind(before_ms)
        .execute(&mut *self)
        .await?;
        Ok(())
    }
}
