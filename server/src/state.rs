//! What every request handler shares.

use std::sync::Arc;

use crate::config::ServeArgs;
use crate::library::Library;
use crate::models::Models;

#[derive(Debug, Clone)]
pub struct AppState {
    pub library: Library,
    pub models: Arc<Models>,
    pub config: Arc<ServeArgs>,
    /// Bounds how many uploads are parsed at once.
    pub index_slots: Arc<tokio::sync::Semaphore>,
}

impl AppState {
    pub async fn open(config: ServeArgs) -> anyhow::Result<AppState> {
        let library = Library::open(&config.data_dir).await?;
        Ok(AppState {
            library,
            models: Arc::new(Models::new(config.cached_snapshots)),
            index_slots: Arc::new(tokio::sync::Semaphore::new(config.index_workers.max(1))),
            config: Arc::new(config),
        })
    }
}
