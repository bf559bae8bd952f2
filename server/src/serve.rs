//! `memscope serve`: opens the library, listens, and shuts down gracefully on Ctrl-C or SIGTERM
//! (requests in flight finish, then model files being written; uploads not yet committed leave
//! only temporary files, removed at the next start).

use crate::config::ServeArgs;
use crate::state::AppState;

pub async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let addr = args.addr;
    let data_dir = args.data_dir.clone();
    let database = match &args.database_url {
        Some(url) => crate::db::redact(url),
        None => format!("sqlite:{}", data_dir.join("memscope.db").display()),
    };
    let state = AppState::open(args).await?;
    if !addr.ip().is_loopback() && !state.access.guards_writes() {
        tracing::warn!(
            "listening on {addr} with no --api-token: anyone who can reach this port can upload, rename \
             and delete snapshots (see the README's \"Deploying\")"
        );
    }
    tokio::spawn(roll_up_forever(state.clone()));
    let shutdown = state.shutdown.clone();
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {addr}: {e}"))?;
    tracing::info!(addr = %listener.local_addr()?, data_dir = %data_dir.display(), %database, "memscope is serving; open http://{}/", listener.local_addr()?);
    let limits = state.config.conn_limits();
    let library = state.library.clone();
    crate::listen::serve(listener, crate::http::app(state), limits, async move {
        shutdown_signal().await;
        // Live event streams never end on their own: end them so shutdown can finish.
        let _ = shutdown.send(true);
    })
    .await;
    // Model files of answered uploads still being written: finished if they can be in the
    // grace period, else rebuilt from the originals when next opened.
    if tokio::time::timeout(limits.shutdown_grace, library.model_writes_done())
        .await
        .is_err()
    {
        tracing::warn!("model files still being written at shutdown are rebuilt when next needed");
    }
    tracing::info!("stopped");
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        if let Ok(mut s) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        {
            s.recv().await;
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}

/// Every minute: roll raw live samples older than the raw retention into one-minute rows, and
/// drop roll-ups older than theirs.
async fn roll_up_forever(state: AppState) {
    let raw_ms = (state.config.raw_retention_hours * 3_600_000.0) as i64;
    let rollup_ms = (state.config.rollup_retention_days * 86_400_000.0) as i64;
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(60));
    loop {
        tick.tick().await;
        let now = crate::now_ms();
        match state.live.roll_up(now - raw_ms, now - rollup_ms).await {
            Ok(r) if r.rolled_rows + r.expired_rows > 0 => {
                tracing::info!(
                    rolled = r.rolled_rows,
                    expired = r.expired_rows,
                    "live data rolled up"
                )
            }
            Ok(_) => {}
            Err(e) => tracing::warn!("roll-up failed (will retry in a minute): {e}"),
        }
    }
}
