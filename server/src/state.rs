//! What every request handler shares.

use std::sync::Arc;

use crate::config::ServeArgs;
use crate::library::Library;
use crate::live::Live;
use crate::models::Models;

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
    /// Bounds how many uploads are parsed at once.
    pub index_slots: Arc<tokio::sync::Semaphore>,
    /// Progress of uploads in flight, by the token the client chose.
    pub uploads: Arc<std::sync::Mutex<std::collections::HashMap<String, Arc<UploadProgress>>>>,
    /// Set when the server is shutting down, so long-lived event streams end.
    pub shutdown: Arc<tokio::sync::watch::Sender<bool>>,
    /// Engine work on blocking threads now, and how much stopped early (`/metrics`).
    pub engine: Arc<EngineCounters>,
    /// Run reports computed lately (`http::runs`).
    pub runs: Arc<crate::runs::RunCache>,
}

/// What the engine's blocking threads are doing for requests.
#[derive(Debug, Default)]
pub struct EngineCounters {
    /// Engine queries running now.
    pub running: std::sync::atomic::AtomicU64,
    /// Engine queries that stopped early because their client went away.
    pub cancelled_total: std::sync::atomic::AtomicU64,
}

/// How far an upload has got: bytes received, bytes the parser has consumed, and the total the
/// client announced (Content-Length; 0 if unknown).
#[derive(Debug, Default)]
pub struct UploadProgress {
    pub received_bytes: std::sync::atomic::AtomicU64,
    pub parsed_bytes: std::sync::atomic::AtomicU64,
    pub total_bytes: u64,
    pub finished: std::sync::atomic::AtomicBool,
}

impl AppState {
    pub async fn open(config: ServeArgs) -> anyhow::Result<AppState> {
        let access = Arc::new(config.access()?);
        let library = Library::open(&config.data_dir, config.database_url.as_deref()).await?;
        let shutdown = Arc::new(tokio::sync::watch::channel(false).0);
        // Listening to every server's batches before the first request can store one.
        let live = Live::open(library.db.clone(), shutdown.subscribe()).await?;
        Ok(AppState {
            access,
            library,
            models: Arc::new(Models::new(config.cached_snapshots)),
            index_slots: Arc::new(tokio::sync::Semaphore::new(config.index_workers.max(1))),
            uploads: Default::default(),
            live,
            shutdown,
            engine: Default::default(),
            runs: Default::default(),
            config: Arc::new(config),
        })
    }
}
