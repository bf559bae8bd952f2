//! PostgreSQL as the shared store (issue 16, in progress): connecting and applying
//! `migrations/postgres/` at start. Several servers may start against one database at once;
//! sqlx's migrator holds a PostgreSQL advisory lock while it applies migrations, so the first
//! to take it applies them and the others find them applied.
//!
//! Not yet used by `memscope serve`: the library and the live tables still run on SQLite
//! (`library.rs`, `live/`). This is the first piece of the storage layer that will choose
//! between the two.

use anyhow::Context;
use sqlx::postgres::{PgPool, PgPoolOptions};

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
