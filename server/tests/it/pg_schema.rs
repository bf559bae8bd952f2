//! The PostgreSQL schema (`migrations/postgres/`, issue 16) against the SQLite one the server
//! applies today (`migrations/sqlite/`): the same tables with the same columns and the same
//! NOT NULLs, and the dialect's own mechanisms doing what SQLite's do (a process key with an
//! unknown start time stays one key; rows of a day with no partition yet wait in the DEFAULT
//! partition and move when the day is made).
//!
//! Runs a throwaway cluster through `scripts/pg-cluster` (Debian's `postgresql`, which
//! `scripts/test` installs) and talks to it with `psql`.

use std::collections::BTreeSet;

use server::config::ServeArgs;
use server::state::AppState;

use crate::support::pg::{Cluster, root};

/// Applies `migrations/postgres/` the way a server does at start.
async fn migrate(pg: &Cluster) {
    server::db::Db::open(std::path::Path::new("."), Some(&pg.url))
        .await
        .unwrap()
        .close()
        .await;
}

/// (table, column, NOT NULL) of every table the server's SQLite migrations make.
async fn sqlite_columns() -> BTreeSet<(String, String, bool)> {
    let dir = std::env::temp_dir().join(format!("memscope-pg-sqlite-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let state = AppState::open(ServeArgs::for_data_dir(dir.clone()))
        .await
        .unwrap();
    drop(state);
    let pool = sqlx::SqlitePool::connect(&format!("sqlite:{}", dir.join("memscope.db").display()))
        .await
        .unwrap();
    let rows: Vec<(String, String, i64, i64)> = sqlx::query_as(
        "SELECT m.name, p.name, p.\"notnull\", p.pk FROM sqlite_master m, pragma_table_info(m.name) p \
         WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite_%' AND m.name != '_sqlx_migrations'",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    pool.close().await;
    let _ = std::fs::remove_dir_all(&dir);
    // A primary key's columns are NOT NULL in PostgreSQL; SQLite allows NULL in a non-integer
    // primary key only for compatibility, and the server never writes one.
    rows.into_iter()
        .map(|(t, c, notnull, pk)| (t, c, notnull == 1 || pk > 0))
        .collect()
}

#[tokio::test]
async fn postgres_has_the_sqlite_schema_in_its_own_dialect() {
    let pg = Cluster::start("schema");
    migrate(&pg).await;
    // Tables as queries see them: partitioned parents and plain tables, not the partitions.
    let pg_columns: BTreeSet<(String, String, bool)> = pg
        .sql(
            "SELECT c.relname, a.attname, a.attnotnull FROM pg_class c \
             JOIN pg_namespace n ON n.oid = c.relnamespace \
             JOIN pg_attribute a ON a.attrelid = c.oid \
             WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND NOT c.relispartition \
             AND a.attnum > 0 AND NOT a.attisdropped AND c.relname != '_sqlx_migrations'",
        )
        .into_iter()
        .map(|l| {
            let f: Vec<&str> = l.split('|').collect();
            (f[0].to_string(), f[1].to_string(), f[2] == "t")
        })
        .collect();
    let sqlite = sqlite_columns().await;
    let only_pg: Vec<_> = pg_columns.difference(&sqlite).collect();
    let only_sqlite: Vec<_> = sqlite.difference(&pg_columns).collect();
    assert!(
        only_pg.is_empty() && only_sqlite.is_empty(),
        "(table, column, NOT NULL) only in PostgreSQL: {only_pg:?}; only in SQLite: {only_sqlite:?}"
    );
    assert!(sqlite.len() > 150, "{} columns", sqlite.len());
}

#[tokio::test]
async fn postgres_keys_and_day_partitions_behave_as_sqlite_does() {
    let pg = Cluster::start("behaviour");
    migrate(&pg).await;
    // A process with an unknown start time is one key, as `coalesce(start_time_ms, -1)` makes
    // it in SQLite: the second insert conflicts and updates.
    for _ in 0..2 {
        pg.sql(
            "INSERT INTO processes (host, pid, start_time_ms, first_seen_ms, last_seen_ms) \
             VALUES ('h', 7, NULL, 1, 2) ON CONFLICT (host, pid, start_time_ms) \
             DO UPDATE SET last_seen_ms = processes.last_seen_ms + 1",
        );
    }
    assert_eq!(
        pg.sql("SELECT count(*), max(last_seen_ms) FROM processes"),
        vec!["1|3"]
    );
    // A roll-up of a day with no partition yet waits in the default partition ...
    let day_ms: i64 = 86_400_000;
    let t = 20_000 * day_ms + 3_600_000; // 2024-10-04, 01:00 UTC
    pg.sql(&format!(
        "INSERT INTO gpu_samples_1m (gpu_uuid, minute_ms, n) VALUES ('GPU-1', {t}, 60)"
    ));
    assert_eq!(
        pg.sql("SELECT tableoid::regclass FROM gpu_samples_1m"),
        vec!["gpu_samples_1m_default"]
    );
    // ... and moves to its day when the day is made (six tables, one day each).
    assert_eq!(
        pg.sql(&format!("SELECT memscope_day_partitions({t}, {})", t + 1)),
        vec!["6"]
    );
    assert_eq!(
        pg.sql("SELECT tableoid::regclass, n FROM gpu_samples_1m"),
        vec!["gpu_samples_1m_d20241004|60"]
    );
    // Made once: calling again makes none; the next day is separate.
    assert_eq!(
        pg.sql(&format!(
            "SELECT memscope_day_partitions({t}, {})",
            t + day_ms
        )),
        vec!["6"]
    );
    assert_eq!(
        pg.sql(&format!(
            "SELECT memscope_day_partitions({t}, {})",
            t + day_ms
        )),
        vec!["0"]
    );
    // Retention drops a whole day.
    pg.sql("DROP TABLE gpu_samples_1m_d20241004");
    assert_eq!(pg.sql("SELECT count(*) FROM gpu_samples_1m"), vec!["0"]);
}

/// Several servers starting at once against one new database: the first to take sqlx's
/// migration lock applies the migrations, the others find them applied; every one starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn servers_starting_together_apply_the_migrations_once() {
    let pg = Cluster::start("together");
    let starts: Vec<_> = (0..4)
        .map(|_| {
            let url = pg.url.clone();
            tokio::spawn(async move {
                server::db::Db::open(std::path::Path::new("."), Some(&url)).await
            })
        })
        .collect();
    for s in starts {
        s.await.unwrap().unwrap().close().await;
    }
    let files = std::fs::read_dir(root().join("migrations/postgres"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "sql")
        })
        .count();
    assert_eq!(
        pg.sql("SELECT count(*), bool_and(success) FROM _sqlx_migrations"),
        vec![format!("{files}|t")]
    );
    assert_eq!(pg.sql("SELECT rows FROM ingest_totals"), vec!["0"]);
    // A wrong address is an error that names it, without the password.
    let e = server::db::Db::open(
        std::path::Path::new("."),
        Some("postgres://memscope:s3cret-0123456789abcdef@127.0.0.1:1/memscope"),
    )
    .await
    .unwrap_err();
    let text = format!("{e:#}");
    assert!(
        text.contains("127.0.0.1:1") && !text.contains("s3cret-0123456789abcdef"),
        "{text}"
    );
}
