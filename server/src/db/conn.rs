//! The seam's vocabulary, shared by `db/mod.rs` and each backend's side: which backend, a
//! query in two dialects, a pool of either, and [`Conn`], what a connection of either backend
//! does its own way.

use sqlx::{PgPool, SqlitePool};

/// Which engine a `Db` runs on (for messages and tests; code decides nothing by it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    /// The backend a server given `database_url` runs on (none: SQLite in its data folder).
    pub fn of_url(database_url: Option<&str>) -> Backend {
        match database_url {
            Some(_) => Backend::Postgres,
            None => Backend::Sqlite,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
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

/// A pool of either backend (`with_db!` runs the same code on either).
#[derive(Debug, Clone)]
pub enum Pool {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

/// A notice published inside a batch's transaction ([`Conn::publish_notice`]): on PostgreSQL
/// the database delivers it to every server listening at the commit; on SQLite the server
/// delivers it itself, after the commit ([`Published::deliver`]).
#[must_use = "deliver it after the commit"]
pub enum Published {
    ByTheDatabase,
    Here(api::LiveNotice),
}

impl Published {
    /// Delivers the notice to this server's live streams if the database does not (call it
    /// after the commit, so that pages fetching again find the batch). Nobody listening is fine.
    pub fn deliver(self, to: &tokio::sync::broadcast::Sender<api::LiveNotice>) {
        if let Published::Here(notice) = self {
            let _ = to.send(notice);
        }
    }
}

/// Where a closed day's one-minute rows are read from, a step at a time ([`Conn::next_rows`]):
/// the rows query (`$1`: the day the rows end before) and how far the reading got.
pub struct RowSteps {
    pub(super) sql: String,
    pub(super) before_ms: i64,
    pub(super) state: StepState,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum StepState {
    NotStarted,
    Open,
    Done,
}

impl RowSteps {
    pub fn new(sql: String, before_ms: i64) -> RowSteps {
        RowSteps {
            sql,
            before_ms,
            state: StepState::NotStarted,
        }
    }
}

/// What a connection of either backend does its own way (module docs). Code written once for
/// both backends, inside `with_db!` or `with_live!`, calls these instead of branching.
#[allow(async_fn_in_trait)]
pub trait Conn {
    /// The rows a query of this backend returns.
    type Row;

    /// Which engine this connection speaks to.
    const BACKEND: Backend;

    /// The query text for this connection's backend.
    fn sql(&self, q: &Dialects) -> &'static str {
        q.get(Self::BACKEND)
    }

    /// The roll-up's turn for this transaction: on PostgreSQL its advisory lock (false: another
    /// server holds it and is doing the same work); SQLite has one server, whose roll-ups queue
    /// on `Db::sole_writer_turn`, so it is always its turn.
    async fn roll_up_turn(&mut self) -> sqlx::Result<bool>;

    /// Publishes "new live data from this host" in this transaction (see [`Published`]).
    async fn publish_notice(&mut self, notice: api::LiveNotice) -> sqlx::Result<Published>;

    /// A batch's samples into their tables, in the fastest way the backend offers.
    async fn insert_samples(&mut self, b: &wire::Batch) -> sqlx::Result<()>;

    /// The next step of a closed day's rows ([`RowSteps`]); empty when all were read. SQLite
    /// reads them in one step; PostgreSQL through a cursor (a closed day of a fleet is millions
    /// of rows).
    async fn next_rows(&mut self, steps: &mut RowSteps) -> sqlx::Result<Vec<Self::Row>>;

    /// Removes the one-minute rows of `table` that packing read (the days in `days`, all before
    /// `before_ms`): SQLite deletes them; PostgreSQL empties each day's partition with
    /// `TRUNCATE` (and deletes the rows of days without one from the DEFAULT partition).
    async fn retire_rolled_days(
        &mut self,
        table: &str,
        days: &std::collections::BTreeSet<i64>,
        before_ms: i64,
    ) -> sqlx::Result<()>;
}

/// An optional count as the database stores it (a signed 64-bit integer; counts stay far below
/// 2^63).
pub fn opt(v: Option<u64>) -> Option<i64> {
    v.map(|v| v as i64)
}
