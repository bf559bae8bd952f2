//! Support for test suites (the server's and the collectors'): which database a test's server
//! runs on. By default SQLite in the test's data folder; with `MEMSCOPE_TEST_DATABASE_URL` set to
//! a PostgreSQL cluster's URL (`./scripts/test` starts a throwaway one for its second pass, see
//! `scripts/pg-cluster`), a database of the test's own in that cluster, named after its data
//! folder: a server restarted on the same folder finds its data again, and tests running at once
//! never share one.

use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::Digest;

use crate::config::ServeArgs;
use crate::db::Backend;

/// The variable naming the PostgreSQL cluster tests run against.
pub const TEST_DATABASE_URL: &str = "MEMSCOPE_TEST_DATABASE_URL";

/// The backend test servers run on in this process.
pub fn backend() -> Backend {
    let url = std::env::var(TEST_DATABASE_URL).ok();
    Backend::of_url(url.as_deref().filter(|u| !u.is_empty()))
}

/// Settings for a test server on `data_dir`, on the backend of this run (see the module docs).
pub fn serve_args(data_dir: PathBuf) -> ServeArgs {
    let database_url = database_for(&data_dir);
    ServeArgs {
        database_url,
        ..ServeArgs::for_data_dir(data_dir)
    }
}

/// The PostgreSQL database of a test data folder, created if missing; `None` on SQLite runs.
pub fn database_for(data_dir: &Path) -> Option<String> {
    let cluster = std::env::var(TEST_DATABASE_URL)
        .ok()
        .filter(|u| !u.is_empty())?;
    let path = std::path::absolute(data_dir).unwrap_or_else(|_| data_dir.to_path_buf());
    let digest = sha2::Sha256::digest(path.to_string_lossy().as_bytes());
    let name: String = std::iter::once("memscope_t_".to_string())
        .chain([crate::hex(&digest[..8])])
        .collect();
    let exists = psql(
        &cluster,
        &format!("SELECT 1 FROM pg_database WHERE datname = '{name}'"),
    );
    if exists.trim() != "1" {
        // Another server of the same test may create it first; either way it exists after.
        let _ = Command::new("psql")
            .args([&cluster, "-qtAc", &format!("CREATE DATABASE {name}")])
            .output();
    }
    let mut url = url::Url::parse(&cluster).expect("MEMSCOPE_TEST_DATABASE_URL is a URL");
    url.set_path(&name);
    Some(url.to_string())
}

/// Runs one statement through `psql` and returns what it printed.
fn psql(url: &str, sql: &str) -> String {
    let out = Command::new("psql")
        .args([url, "-qtAc", sql])
        .output()
        .expect("psql not found: install Debian's postgresql-client (./scripts/test does)");
    assert!(
        out.status.success(),
        "psql {sql:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The live tables of a test data folder, on the backend of this run (for looking at what a test
/// server stored; it hears no other server's notices).
pub async fn open_live(data_dir: &Path) -> anyhow::Result<crate::live::Live> {
    let db = crate::db::Db::open(data_dir, database_for(data_dir).as_deref()).await?;
    crate::live::Live::open(db, tokio::sync::watch::channel(false).1).await
}
