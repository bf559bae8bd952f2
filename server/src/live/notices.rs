//! Live notices across servers: every server's live stream (SSE) carries the batches any of
//! them stored. A batch's transaction publishes its notice (`db::Conn::publish_notice`): on
//! PostgreSQL a `NOTIFY`, delivered at its commit to every server listening, the one that stored
//! it included, and each server forwards what it hears to its own stream ([`forward`]); on
//! SQLite the one server delivers it itself after the commit.
//!
//! A notice only tells the pages to fetch again: one lost while a server's listening connection
//! was being reconnected costs a refresh, never data.

use std::time::Duration;

use crate::db::NoticeListener;

/// Forwards every notice `listener` hears to `to` until `stop` turns true.
pub async fn forward(
    mut listener: NoticeListener,
    to: tokio::sync::broadcast::Sender<api::LiveNotice>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            n = listener.recv() => match n {
                // Nobody listening is fine.
                Ok(Some(notice)) => {
                    let _ = to.send(notice);
                }
                Ok(None) => {}
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
