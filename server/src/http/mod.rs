//! The HTTP API (documented in the README), one `router()` per resource: the library and uploads,
//! a snapshot's views, the diff, live ingest, the live pages, and `/metrics`; plus the embedded
//! dashboard. Handlers are thin: they parse the request (into `api` query types), call the
//! library, the live store or the engine (on a blocking thread: a query over a million events
//! should not stall the runtime), and answer an `api` type. Paths come from `api::routes`, so the
//! dashboard's URLs and the router cannot drift apart.
//!
//! Every request runs in a `TraceLayer` span; errors are `ApiError`s, logged once inside it.

mod diff;
mod error;
mod ingest;
mod library;
mod live;
mod metrics;
mod snapshots;

use axum::Router;
use axum::extract::{DefaultBodyLimit, FromRequestParts};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;
use tower_http::trace::TraceLayer;

pub use error::{ApiError, ApiResult};

use crate::state::AppState;

pub fn app(state: AppState) -> Router {
    Router::new()
        .merge(library::router())
        .merge(snapshots::router())
        .merge(diff::router())
        .merge(ingest::router())
        .merge(live::router())
        .merge(metrics::router())
        .merge(crate::assets::router())
        .fallback(not_found)
        // Uploads are streamed to disk and bounded by --max-upload-bytes instead.
        .layer(DefaultBodyLimit::disable())
        .layer(TraceLayer::new_for_http())
        .with_state(state)
}

async fn not_found() -> ApiError {
    ApiError::BadRequest("no such endpoint; see the README's API section".into())
}

/// The query string decoded into an `api` query type; a malformed one is a 400 with the
/// decoder's message as JSON (`{"error": …}`), like every other error.
#[derive(Debug)]
pub struct ApiQuery<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        serde_urlencoded::from_str(parts.uri.query().unwrap_or(""))
            .map(ApiQuery)
            .map_err(|e| ApiError::BadRequest(e.to_string()))
    }
}
