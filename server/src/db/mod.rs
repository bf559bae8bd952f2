//! The database behind the library and the live tables: SQLite in the data folder (the default:
//! nothing to set up) or a shared PostgreSQL (`--database-url`, issue 16: several servers, one
//! truth). This folder is the one seam to it: nothing outside `db/` asks which backend it is on
//! (`scripts/backend-seam` fails the test suite if something does).
//!
//! - [`Db`] owns the pools (one for writes, one of read-only connections for live reads) and
//!   every behaviour that differs between the backends, each under its own name: a writer's turn
//!   ([`Db::writer_turn`]), the files lock ([`Db::files_lock`]), how long an orphan file is
//!   spared ([`Db::orphan_grace`]), live reads stopped when their request goes away
//!   ([`Db::live_read`]), notices heard from other servers ([`Db::listen_notices`]) and the day
//!   partitions ([`Db::retire_days`]).
//! - [`Conn`] is what a connection of either backend does its own way inside a transaction:
//!   the roll-up's turn, publishing a notice, storing samples, reading a closed day's rows in
//!   steps, retiring packed days, and which text a [`Dialects`] query takes. `sqlite.rs` and
//!   `postgres.rs` implement it.
//! - `with_db!`, `with_tx!` and `with_live!` run the same query code against either
//!   backend's pool, transaction or live-read connection (the body is compiled once per
//!   backend, so every query is type-checked for both, with no generic bounds to carry); code
//!   inside them calls [`Conn`]'s methods rather than branching.
//! - SQL is written once where the two dialects agree, which is almost everywhere: `$N`
//!   placeholders (SQLite binds `$N` to argument N), `ON CONFLICT … DO UPDATE` with qualified
//!   columns, `IS NOT DISTINCT FROM`, `CAST(… AS BIGINT)`, aliased subqueries. Where they differ
//!   (scalar `max`/`min` against `greatest`/`least`; keys on a nullable start time, an expression
//!   index in SQLite and `NULLS NOT DISTINCT` in PostgreSQL) a query is a [`Dialects`] pair.
//! - Migrations per backend: `migrations/sqlite/` and `migrations/postgres/`, the same tables and
//!   meaning (`server/tests/it/pg_schema.rs` compares them). Several servers may start against one
//!   PostgreSQL at once: sqlx's migrator holds an advisory lock while it applies migrations, so
//!   the first to take it applies them and the others find them applied.

mod conn;
mod postgres;
mod sqlite;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use sqlx::PgPool;
use sqlx::pool::PoolConnection;
use sqlx::{FromRow, SqlitePool};

pub use conn::{Backend, Conn, Dialects, Pool, Published, RowSteps, opt};
pub use postgres::{LIVE_READ_TIMEOUT_MS, redact};

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

/// Whether `e` says the database was busy with other writers (SQLite's "database is locked"
/// past its busy timeout; PostgreSQL's lock timeouts, deadlocks and serialization failures): the
/// request may succeed if sent again, so it is answered 503 with `Retry-After`, not 500.
pub fn is_busy(e: &sqlx::Error) -> bool {
    let Some(db) = e.as_database_error() else {
        return matches!(e, sqlx::Error::PoolTimedOut);
    };
    let code = db.code();
    match code.as_deref() {
        // SQLITE_BUSY, SQLITE_LOCKED and their extended codes (the low byte is the primary).
        Some(c) if c.parse::<i32>().is_ok_and(|n| matches!(n & 0xff, 5 | 6)) => true,
        Some("40001" | "40P01" | "55P03") => true,
        _ => false,
    }
}

/// Connections the live pages' and `/metrics`' reads may hold at once.
pub const LIVE_READ_CONNECTIONS: u32 = 3;

/// The database: its pools and the behaviours that differ between backends (module docs).
#[derive(Debug, Clone)]
pub struct Db {
    pool: Pool,
    /// The live pages' and `/metrics`' reads, on connections of their own (read-only): a slow
    /// window query can hold these, never the ones ingest, uploads and the library use
    /// (issue 13: abandoned scrapes filled the one pool and ingest timed out).
    reads: Pool,
    /// This server's writers of live data take turns here (see [`Db::writer_turn`]).
    writers: Arc<tokio::sync::Mutex<()>>,
    /// See [`Db::files_lock`].
    files: Arc<tokio::sync::Mutex<()>>,
    /// Live reads interrupted because their request went away ([`LiveRead`]; `/metrics`).
    interrupted: Arc<AtomicU64>,
}

impl Db {
    /// Opens the SQLite database `memscope.db` in `dir` (created if missing), or connects to the
    /// PostgreSQL database at `url`; applies the migrations it lacks.
    pub async fn open(dir: &Path, url: Option<&str>) -> anyhow::Result<Db> {
        let (pool, reads) = match url {
            None => sqlite::open(&dir.join("memscope.db"), LIVE_READ_CONNECTIONS).await?,
            Some(url) => postgres::open(url, LIVE_READ_CONNECTIONS).await?,
        };
        Ok(Db {
            pool,
            reads,
            writers: Default::default(),
            files: Default::default(),
            interrupted: Default::default(),
        })
    }

    /// The pool for writes and the library's reads (`with_db!`).
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    pub fn backend(&self) -> Backend {
        match self.pool {
            Pool::Sqlite(_) => Backend::Sqlite,
            Pool::Postgres(_) => Backend::Postgres,
        }
    }

    /// The SQLite pool, when on SQLite (for SQLite-only tools and benchmarks).
    pub fn as_sqlite(&self) -> Option<&SqlitePool> {
        match &self.pool {
            Pool::Sqlite(p) => Some(p),
            Pool::Postgres(_) => None,
        }
    }

    /// The PostgreSQL pool, when on PostgreSQL (for PostgreSQL-only tests and benchmarks).
    pub fn as_postgres(&self) -> Option<&PgPool> {
        match &self.pool {
            Pool::Sqlite(_) => None,
            Pool::Postgres(p) => Some(p),
        }
    }

    /// Closes the pools: waits for their connections to be returned and closes them.
    pub async fn close(&self) {
        crate::with_db!(self, |p| p.close().await);
        match &self.reads {
            Pool::Sqlite(p) => p.close().await,
            Pool::Postgres(p) => p.close().await,
        }
    }

    /// Begins a transaction on the pool for writes.
    pub async fn begin(&self) -> sqlx::Result<Tx> {
        Ok(match &self.pool {
            // IMMEDIATE: the write lock is taken at BEGIN, where SQLite's busy handler waits for
            // it. A deferred transaction that reads and then writes asks for the lock mid-way,
            // where SQLite answers "database is locked" at once (a rename beside uploads failed
            // so in 3.6–35% of calls).
            Pool::Sqlite(p) => Tx::Sqlite(p.begin_with("BEGIN IMMEDIATE").await?),
            Pool::Postgres(p) => Tx::Postgres(p.begin().await?),
        })
    }

    /// The query text for this backend.
    pub fn sql(&self, q: &Dialects) -> &'static str {
        q.get(self.backend())
    }

    /// A live-data writer's turn, held until dropped. SQLite has one writer at a time: this
    /// server's writers queue here in order rather than in SQLite's busy handler, which sleeps
    /// and retries (p99 latency of a small batch under saturating load: 835 ms → 37 ms,
    /// bench/README.md). PostgreSQL takes concurrent writers, whichever server they reach; row
    /// locks order them, so the turn is free.
    pub async fn writer_turn(&self) -> WriterTurn<'_> {
        let guard = match self.pool {
            Pool::Sqlite(_) => Some(self.writers.lock().await),
            Pool::Postgres(_) => None,
        };
        WriterTurn { _guard: guard }
    }

    /// The turn of a writer that runs alone among this server's writers on either backend (the
    /// roll-up: one pass at a time, and on SQLite never beside a batch).
    pub async fn sole_writer_turn(&self) -> WriterTurn<'_> {
        WriterTurn {
            _guard: Some(self.writers.lock().await),
        }
    }

    /// Held while a snapshot's files are placed or removed with its row: this server's lock,
    /// and on PostgreSQL an advisory lock on the snapshot's id held by a transaction, so that
    /// servers sharing the data folder take turns too (a snapshot's id is its content's: a
    /// re-upload of deleted bytes has the same). Dropping it releases both.
    pub async fn files_lock(&self, id: &str) -> sqlx::Result<FilesLock<'_>> {
        let local = self.files.lock().await;
        let shared = match &self.pool {
            Pool::Sqlite(_) => None,
            Pool::Postgres(pool) => Some(postgres::advisory_lock(pool, id).await?),
        };
        Ok(FilesLock {
            _local: local,
            _shared: shared,
        })
    }

    /// How old a file without a row must be before it is removed as an orphan: at once on
    /// SQLite (one server per data folder), after ten minutes on a shared database (another
    /// server may be between renaming an upload's files into place and inserting its row).
    pub fn orphan_grace(&self) -> std::time::Duration {
        match self.pool {
            Pool::Sqlite(_) => std::time::Duration::ZERO,
            Pool::Postgres(_) => postgres::ORPHAN_GRACE,
        }
    }

    /// A connection for one request's live reads, interrupted if the request goes away (see
    /// [`LiveRead`]).
    pub async fn live_read(&self) -> sqlx::Result<LiveRead> {
        let gone = Arc::new(AtomicBool::new(false));
        let conn = match &self.reads {
            Pool::Sqlite(pool) => LiveConn::Sqlite(
                sqlite::acquire_interruptible(pool, &gone, &self.interrupted).await?,
            ),
            Pool::Postgres(pool) => LiveConn::Postgres(pool.acquire().await?),
        };
        Ok(LiveRead {
            conn,
            gone,
            busy: false,
            interrupted: self.interrupted.clone(),
        })
    }

    /// Live reads stopped because their request went away, since the start.
    pub fn live_reads_interrupted(&self) -> u64 {
        self.interrupted.load(Ordering::Relaxed)
    }

    /// Starts listening for the notices every server's stored batches publish ([`Conn::
    /// publish_notice`]), so that none published after this returns is missed: `None` on SQLite,
    /// where the one server delivers its own.
    pub async fn listen_notices(&self) -> anyhow::Result<Option<NoticeListener>> {
        Ok(match &self.pool {
            Pool::Sqlite(_) => None,
            Pool::Postgres(pool) => Some(NoticeListener(postgres::listen(pool).await?)),
        })
    }

    /// Makes the coming days' partitions of the sample tables and drops whole days before
    /// `drop_before_ms` (PostgreSQL, in a short transaction of its own: making and dropping one
    /// locks its table briefly); returns the rows dropped, or `None` when another server holds
    /// the roll-up's lock (it is doing the same). SQLite has no partitions: `Some(0)`.
    pub async fn retire_days(&self, drop_before_ms: Option<i64>) -> sqlx::Result<Option<u64>> {
        match &self.pool {
            Pool::Sqlite(_) => Ok(Some(0)),
            Pool::Postgres(pool) => postgres::make_days(pool, drop_before_ms).await,
        }
    }

    /// The steps of SQLite's plan for `sql` ("SCAN …", "SEARCH …"; its parameters bound to 0);
    /// `None` on PostgreSQL.
    pub async fn query_plan(&self, sql: &str) -> sqlx::Result<Option<Vec<String>>> {
        match &self.pool {
            Pool::Sqlite(pool) => sqlite::query_plan(pool, sql).await.map(Some),
            Pool::Postgres(_) => Ok(None),
        }
    }
}

/// A transaction on either backend (`with_tx!` runs the same code in it); rolled back if
/// dropped before [`Tx::commit`].
pub enum Tx {
    Sqlite(sqlx::Transaction<'static, sqlx::Sqlite>),
    Postgres(sqlx::Transaction<'static, sqlx::Postgres>),
}

impl Tx {
    pub async fn commit(self) -> sqlx::Result<()> {
        match self {
            Tx::Sqlite(t) => t.commit().await,
            Tx::Postgres(t) => t.commit().await,
        }
    }
}

/// Runs `$body` with `$conn` bound to a [`Tx`]'s connection (`&mut SqliteConnection` or
/// `&mut PgConnection`): the same code, compiled for each backend, so that a transaction's work
/// can be cut into steps that each take `&mut Tx`.
#[macro_export]
macro_rules! with_tx {
    ($tx:expr, |$conn:ident| $body:expr) => {
        match $tx {
            $crate::db::Tx::Sqlite(t) => {
                let $conn = &mut **t;
                $body
            }
            $crate::db::Tx::Postgres(t) => {
                let $conn = &mut **t;
                $body
            }
        }
    };
}

/// A writer's turn ([`Db::writer_turn`]); released when dropped.
pub struct WriterTurn<'a> {
    _guard: Option<tokio::sync::MutexGuard<'a, ()>>,
}

/// See [`Db::files_lock`]; released when dropped.
pub struct FilesLock<'a> {
    _local: tokio::sync::MutexGuard<'a, ()>,
    /// Rolled back on drop, which releases the advisory lock.
    _shared: Option<sqlx::Transaction<'static, sqlx::Postgres>>,
}

/// Notices of batches stored by any server sharing the database ([`Db::listen_notices`]).
pub struct NoticeListener(sqlx::postgres::PgListener);

impl NoticeListener {
    /// The next notice (`None`: one that does not read, logged); an error when the connection
    /// was lost (the next call connects and listens again).
    pub async fn recv(&mut self) -> sqlx::Result<Option<api::LiveNotice>> {
        let n = self.0.recv().await?;
        match serde_json::from_str(n.payload()) {
            Ok(notice) => Ok(Some(notice)),
            Err(e) => {
                tracing::warn!(error = %e, "an unreadable live notice");
                Ok(None)
            }
        }
    }
}

/// Runs `$body` with `$pool` bound to the database's pool (`&SqlitePool` or `&PgPool`): the
/// same code, compiled for each backend.
#[macro_export]
macro_rules! with_db {
    ($db:expr, |$pool:ident| $body:expr) => {
        match $crate::db::Db::pool($db) {
            $crate::db::Pool::Sqlite($pool) => $body,
            $crate::db::Pool::Postgres($pool) => $body,
        }
    };
}

/// One connection of the live-read pool, held for one request's queries (`with_live!`).
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
    /// A statement is running (`with_live!` sets it around each one).
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

/// A row type either backend's rows decode into (for code generic over what a live read
/// returns).
pub trait FromEitherRow:
    for<'r> FromRow<'r, sqlx::sqlite::SqliteRow>
    + for<'r> FromRow<'r, sqlx::postgres::PgRow>
    + Send
    + Unpin
{
}

impl<T> FromEitherRow for T where
    T: for<'r> FromRow<'r, sqlx::sqlite::SqliteRow>
        + for<'r> FromRow<'r, sqlx::postgres::PgRow>
        + Send
        + Unpin
{
}
