//! What every request handler shares.

use std::sync::Arc;

use crate::config::ServeArgs;
use crate::library::Library;
use crate::library::models::Models;
use crate::library::upload::{UploadLimits, Uploads};
use crate::live::Live;

#[derive(Debug, Clone)]
pub struct AppState {
    /// The snapshot library: its rows and the data folder's files.
    pub library: Library,
    /// The live-collection tables, beside the library over the same database.
    pub live: Live,
    pub models: Arc<Models>,
    pub config: Arc<ServeArgs>,
    /// Who may read and change what (`http::access`).
    pub access: Arc<crate::access::Access>,
    /// Uploads: what they use, and the progress of those in flight.
    pub uploads: Uploads,
    /// Set when the server is shutting down, so long-lived event streams end.
    pub shutdown: Arc<tokio::sync::watch::Sender<bool>>,
    /// Engine work on blocking threads now, and how much stopped early (`/metrics`).
    pub engine: Arc<EngineCounters>,
    /// Run reports computed lately (`http::runs`).
    pub runs: Arc<crate::runs::RunCache>,
    /// Live event streams open now, at most `--max-live-streams`: streams never end on their
    /// own, so they have a budget of their own, apart from other requests'.
    pub streams: Arc<tokio::sync::Semaphore>,
}

/// What the engine's blocking threads are doing for requests.
#[derive(Debug, Default)]
pub struct EngineCounters {
    /// Engine queries running now.
    pub running: std::sync::atomic::AtomicU64,
    /// Engine queries that stopped early because their client went away.
    pub cancelled_total: std::sync::atomic::AtomicU64,
}

impl AppState {
    pub async fn open(config: ServeArgs) -> anyhow::Result<AppState> {
        let access = Arc::new(config.access()?);
        let library = Library::open(&config.data_dir, config.database()?.as_deref()).await?;
        let shutdown = Arc::new(tokio::sync::watch::channel(false).0);
        // Listening to every server's batches before the first request can store one.
        let live = Live::open(library.db.clone(), shutdown.subscribe()).await?;
        let models = Arc::new(Models::new(config.cached_snapshots));
        let limits = UploadLimits {
            max_bytes: config.max_upload_bytes,
            min_bytes_per_s: config.min_upload_bytes_per_s,
            max_time: std::time::Duration::from_secs_f64(config.max_upload_secs.clamp(1.0, 1e7)),
            open_per_client: (config.index_workers / 2).max(1),
            rate_window: config.conn_limits().body_idle_timeout,
            read: config.read_limits(),
        };
        let uploads = Uploads::new(
            library.clone(),
            live.clone(),
            models.clone(),
            config.index_workers,
            limits,
        );
        if let Some(url) = &config.webhook_url {
            tokio::spawn(crate::notify::run(
                live.clone(),
                url.clone(),
                config.public_url.clone(),
                shutdown.subscribe(),
            ));
        }
        Ok(AppState {
            access,
            library,
            models,
            uploads,
            live,
            shutdown,
            engine: Default::default(),
            runs: Default::default(),
            streams: Arc::new(tokio::sync::Semaphore::new(config.live_streams())),
            config: Arc::new(config),
        })
    }
}
