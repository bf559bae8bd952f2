//! The database behind the library and the live tables: SQLite in the data folder (the default:
//! nothing to set up) or a shared PostgreSQL (`--database-url`, issue 16: several servers, one
//! truth). One storage interface, two implementations:
//!
//! - [`Db`] holds either backend's pool; [`with_db!`] runs the same query code against either
//!   (the body is compiled once per backend, so every query is type-checked for both, with no
//!   generic bounds to carry).
//! - SQL is written once where the two dialects agree, which is almost everywhere: `$N`
//!   placeholders (SQLite binds `$N` to argument N), `ON CONFLICT … DO UPDATE` with qualified
//!   columns, `IS NOT DISTINCT FROM`, `CAST(… AS BIGINT)`, aliased subqueries. Where they differ
//!   (scalar `max`/`min` against `greatest`/`least`; keys on a nullable start time, an expression
//!   index in SQLite and `NULLS NOT DISTINCT` in PostgreSQL) a query is a [`Dialects`] pair.
//! - Migrations per backend: `migrations/sqlite/` and `migrations/postgres/`, the same tables and
//!   meaning (`server/tests/pg_schema.rs` compares them). Several servers may start against one
//!   PostgreSQL at once: sqlx's migrator holds an advisory lock while it applies migrations, so
//!   the first to take it applies them and the others find them applied.

use std::str::FromStr;

use anyhow::Context;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use sqlx::SqlitePool;
use sqlx::pool::PoolConnection;

/// This server process's name in a shared data folder: its temporary files' folder and the
/// suffix of files it writes before renaming them into place. Unique across hosts sharing the
/// folder (process id and start time).
pub fn instance_id() -> &'static str {
    static ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    ID.get_or_init(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        format!("{}-{nanos:x}", std::process::id())
    })
}

/// Which engine a [`Db`] runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
    }
}

/// A pool of either backend.
#[derive(Debug, Clone)]
pub enum Db {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

impl Db {
    pub fn backend(&self) -> Backend {
        match self {
            Db::Sqlite(_) => Backend::Sqlite,
            Db::Postgres(_) => Backend::Postgres,
        }
    }

    /// The SQLite pool, when on SQLite (for SQLite-only tools and benchmarks).
    pub fn as_sqlite(&self) -> Option<&SqlitePool> {
        match self {
            Db::Sqlite(p) => Some(p),
            Db::Postgres(_) => None,
        }
    }

    /// Closes the pool: waits for its connections to be returned and closes them.
    pub async fn close(&self) {
        crate::with_db!(self, |p| p.close().await)
    }

    /// The query text for this backend.
    pub fn sql(&self, q: &Dialects) -> &'static str {
        q.get(self.backend())
    }
}

/// One query in each dialect, where they differ.
#[derive(Debug, Clone, Copy)]
pub struct Dialects {
    pub sqlite: &'static str,
    pub postgres: &'static str,
}

impl Dialects {
    pub fn get(&self, backend: Backend) -> &'static str {
        match backend {
            Backend::Sqlite => self.sqlite,
            Backend::Postgres => self.postgres,
        }
    }
}

/// Runs `$body` with `$pool` bound to the backend's pool (`&SqlitePool` or `&PgPool`): the same
/// code, compiled for each backend.
#[macro_export]
macro_rules! with_db {
    ($db:expr, |$pool:ident| $body:expr) => {
        match $db {
            $crate::db::Db::Sqlite($pool) => $body,
            $crate::db::Db::Postgres($pool) => $body,
        }
    };
}

/// SQLite virtual-machine steps between looks at a [`LiveRead`]'s cancel flag (well under 1 ms).
const INTERRUPT_CHECK_STEPS: i32 = 10_000;

/// Longest a live read may run on PostgreSQL (see [`LiveRead`]).
pub const LIVE_READ_TIMEOUT_MS: u64 = 30_000;

/// One connection of a live-read pool, held for one request's queries ([`with_live!`]).
///
/// Dropping it while a statement runs (the request's future was dropped: its client went away)
/// stops the statement instead of leaving it to scan for nobody. On SQLite a progress handler
/// set at acquire looks at a flag the drop raises, and SQLite stops the statement with
/// `SQLITE_INTERRUPT`; the connection goes back to the pool. On PostgreSQL the connection is
/// closed instead of going back to the pool, and the server, which looks at its client every
/// 100 ms (`client_connection_check_interval`, PostgreSQL 14+), ends the statement; a cancel
/// request by process id could reach the connection's next user instead. `statement_timeout`
/// ([`LIVE_READ_TIMEOUT_MS`]) bounds any live read on PostgreSQL as a backstop.
pub struct LiveRead {
    pub conn: LiveConn,
    gone: Arc<AtomicBool>,
    /// A statement is running ([`with_live!`] sets it around each one).
    pub busy: bool,
    interrupted: Arc<AtomicU64>,
}

pub enum LiveConn {
    Sqlite(PoolConnection<sqlx::Sqlite>),
    Postgres(PoolConnection<sqlx::Postgres>),
}

impl Drop for LiveRead {
    fn drop(&mut self) {
        self.gone.store(true, Ordering::Relaxed);
        if let (LiveConn::Postgres(c), true) = (&mut self.conn, self.busy) {
            c.close_on_drop();
            self.interrupted.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Runs `$body` with `$conn` bound to a [`LiveRead`]'s connection (`&mut SqliteConnection` or
/// `&mut PgConnection`), marked busy while it runs.
#[macro_export]
macro_rules! with_live {
    ($read:expr, |$conn:ident| $body:expr) => {{
        $read.busy = true;
        let out = match &mut $read.conn {
            $crate::db::LiveConn::Sqlite(c) => {
                let $conn = &mut **c;
                $body
            }
            $crate::db::LiveConn::Postgres(c) => {
                let $conn = &mut **c;
                $body
            }
        };
        $read.busy = false;
        out
    }};
}

/// A pool for live reads: read-only connections of their own, so that a slow window query can
/// hold these, never the ones ingest, uploads and the library use (issue 13).
pub async fn live_read_pool(
    db: &Db,
    sqlite: Option<SqliteConnectOptions>,
    postgres_url: Option<&str>,
    max_connections: u32,
) -> anyhow::Result<Db> {
    Ok(match (db, sqlite, postgres_url) {
        (Db::Sqlite(_), Some(options), _) => Db::Sqlite(
            SqlitePoolOptions::new()
                .max_connections(max_connections)
                // A connection comes back without its last request's progress handler.
                .after_release(|conn, _| {
                    Box::pin(async move {
                        conn.lock_handle().await?.remove_progress_handler();
                        Ok(true)
                    })
                })
                .connect_with(options.read_only(true))
                .await
                .context("cannot open the database for live reads")?,
        ),
        (Db::Postgres(_), _, Some(url)) => Db::Postgres(
            PgPoolOptions::new()
                .max_connections(max_connections)
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
                .with_context(|| format!("cannot connect to {} for live reads", redact(url)))?,
        ),
        _ => anyhow::bail!("a live-read pool needs its backend's settings"),
    })
}

impl Db {
    /// A connection for one request's live reads, interrupted if the request goes away
    /// (SQLite; see [`LiveRead`]). `interrupted` counts the reads stopped so.
    pub async fn live_read(&self, interrupted: &Arc<AtomicU64>) -> sqlx::Result<LiveRead> {
        let gone = Arc::new(AtomicBool::new(false));
        let conn = match self {
            Db::Sqlite(pool) => {
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
                LiveConn::Sqlite(conn)
            }
            Db::Postgres(pool) => LiveConn::Postgres(pool.acquire().await?),
        };
        Ok(LiveRead {
            conn,
            gone,
            busy: false,
            interrupted: interrupted.clone(),
        })
    }
}

/// Opens (creating if needed) the SQLite database at `path` and applies `migrations/sqlite/`.
/// Returns the pool for writes and the options for read-only pools of the same file.
pub async fn open_sqlite(
    path: &std::path::Path,
) -> anyhow::Result<(SqlitePool, SqliteConnectOptions)> {
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
    Ok((db, options))
}

/// Connects to the PostgreSQL database at `url` and applies the migrations it lacks.
pub async fn connect_postgres(url: &str, max_connections: u32) -> anyhow::Result<PgPool> {
    let pool = PgPoolOptions::new()
        .max_connections(max_connections)
        // A server that cannot reach its database says so soon instead of retrying for long.
        .acquire_timeout(std::time::Duration::from_secs(10))
        .connect(url)
        .await
        .with_context(|| format!("cannot connect to the PostgreSQL database {}", redact(url)))?;
    sqlx::migrate!("../migrations/postgres")
        .run(&pool)
        .await
        .context("cannot apply the PostgreSQL migrations (migrations/postgres/)")?;
    Ok(pool)
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

/// The PostgreSQL advisory lock that lets one server at a time roll up, expire and make day
/// partitions (`live/rollup.rs`).
pub(crate) const ROLL_UP_LOCK: i64 = 0x6d65_6d73_726f_6c6c; // "memsroll"

/// One day in milliseconds: a day partition's width (PostgreSQL).
const DAY_MS: i64 = 86_400_000;

/// PostgreSQL: makes the day partitions from yesterday to the day after tomorrow (those not made
/// yet) and, with `drop_before_ms`, drops whole days before it; returns the rows dropped, or
/// `None` when another server holds the roll-up's lock (it is doing the same).
pub(crate) async fn make_days(
    pool: &sqlx::PgPool,
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

/// The roll-up's turn for a transaction on either backend's connection: on PostgreSQL its
/// advisory lock (false: another server holds it and is doing the same work); SQLite has one
/// server, whose roll-ups queue on `Library::live_writer`, so it is always its turn.
pub(crate) trait RollUpTurn {
    fn roll_up_turn(&mut self) -> impl std::future::Future<Output = sqlx::Result<bool>> + Send;
}

impl RollUpTurn for sqlx::SqliteConnection {
    fn roll_up_turn(&mut self) -> impl std::future::Future<Output = sqlx::Result<bool>> + Send {
        std::future::ready(Ok(true))
    }
}

impl RollUpTurn for sqlx::PgConnection {
    fn roll_up_turn(&mut self) -> impl std::future::Future<Output = sqlx::Result<bool>> + Send {
        try_lock(self)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_password_never_reaches_a_message() {
        assert_eq!(
            super::redact("postgres://memscope:s3cret@db:5432/memscope"),
            "postgres://memscope:***@db:5432/memscope"
        );
        assert_eq!(
            super::redact("postgres://memscope@db/memscope"),
            "postgres://memscope@db/memscope"
        );
    }
}
