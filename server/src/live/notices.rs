//! Live notices across servers: every server's live stream (SSE) carries the batches any of
//! them stored. On PostgreSQL a batch's transaction sends a `NOTIFY` on [`CHANNEL`]
//! (`store.rs`), delivered at its commit to every server listening, the one that stored it
//! included; each server forwards what it hears to its own stream. On SQLite the one server
//! sends its notices itself (`http/ingest.rs`).
//!
//! A notice only tells the pages to fetch again: one lost while a server's listening connection
//! was being reconnected costs a refresh, never data.

use std::time::Duration;

use sqlx::postgres::PgListener;

use crate::db::Db;
use crate::library::Library;

/// The PostgreSQL channel batches are announced on.
pub const CHANNEL: &str = "memscope_live";

impl Library {
    /// Starts listening for stored batches' notices (PostgreSQL; `None` on SQLite), so that none
    /// stored after this returns is missed.
    pub async fn listen_live(&self) -> anyhow::Result<Option<PgListener>> {
        let Db::Postgres(pool) = &self.db else {
            return Ok(None);
        };
        let mut listener = PgListener::connect_with(pool).await?;
        listener.listen(CHANNEL).await?;
        Ok(Some(listener))
    }
}

/// Forwards every notice `listener` hears to `to` until `stop` turns true.
pub async fn forward(
    mut listener: PgListener,
    to: tokio::sync::broadcast::Sender<api::LiveNotice>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            n = listener.recv() => match n {
                Ok(n) => match serde_json::from_str::<api::LiveNotice>(n.payload()) {
                    // Nobody listening is fine.
                    Ok(notice) => {
                        let _ = to.send(notice);
                    }
                    Err(e) => tracing::warn!(error = %e, "an unreadable live notice"),
                },
                // The listener connects and listens again on its next call.
                Err(e) => {
                    tracing::warn!(error = %e, "lost the live notices' connection; reconnecting in 1 s");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            },
            _ = stop.changed() => return,
        }
    }
}
