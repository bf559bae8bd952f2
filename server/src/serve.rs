//! `memscope serve`: opens the library, listens, and shuts down gracefully on Ctrl-C or SIGTERM
//! (requests in flight finish; uploads not yet committed leave only temporary files, removed at
//! the next start).

use crate::config::ServeArgs;
use crate::state::AppState;

pub async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let addr = args.addr;
    let data_dir = args.data_dir.clone();
    let state = AppState::open(args).await?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {addr}: {e}"))?;
    tracing::info!(addr = %listener.local_addr()?, data_dir = %data_dir.display(), "memscope is serving; open http://{}/", listener.local_addr()?);
    axum::serve(listener, crate::http::app(state))
        .with_graceful_shutdown(shutdown_signal())
        .await?;
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
