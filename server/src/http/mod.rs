//! The HTTP API (documented in the README), one `router()` per resource: the library and uploads,
//! a snapshot's views, the diff, live ingest, the live pages, and `/metrics`; plus the embedded
//! dashboard. Handlers are thin: they parse the request (into `api` query types), call the
//! library, the live store or the engine (on a blocking thread: a query over a million events
//! should not stall the runtime), and answer an `api` type. Paths come from `api::routes`, so the
//! dashboard's URLs and the router cannot drift apart.
//!
//! Every request runs in a `TraceLayer` span; errors are `ApiError`s, logged once inside it.

mod access;
mod diff;
pub mod download;
mod error;
mod ingest;
mod library;
mod live;
mod metrics;
mod query;
mod runs;
mod snapshots;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use tower_http::trace::{DefaultMakeSpan, DefaultOnFailure, TraceLayer};

pub use error::{ApiError, ApiResult};
pub use query::ApiQuery;

use crate::state::AppState;

pub fn app(state: AppState) -> Router {
    Router::new()
        .merge(access::router())
        .merge(library::router())
        .merge(snapshots::router())
        .merge(diff::router())
        .merge(runs::router())
        .merge(ingest::router())
        .merge(live::router())
        .merge(metrics::router())
        .merge(crate::assets::router())
        .fallback(not_found)
        // Host, Origin and tokens before anything else reads the request.
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            access::guard,
        ))
        // Uploads are streamed to disk and bounded by --max-upload-bytes instead.
        .layer(DefaultBodyLimit::disable())
        // A span per request at INFO, so an error logged while answering it (ApiError, once)
        // names the method and path at the default log level. The layer's own events stay at
        // DEBUG (MEMSCOPE_LOG=debug), its failure event too: the ApiError line is the one.
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(DefaultMakeSpan::new().level(tracing::Level::INFO))
                .on_failure(DefaultOnFailure::new().level(tracing::Level::DEBUG)),
        )
        .with_state(state)
}

/// What answers a path no route has: under `/api/` (or any method but GET), the API's 404,
/// "no such endpoint"; any other page, the dashboard with status 404, so the app shows its own
/// not-found page with a way back rather than a bare error.
async fn not_found(method: axum::http::Method, uri: axum::http::Uri) -> axum::response::Response {
    use axum::response::IntoResponse;
    let path = uri.path();
    if method != axum::http::Method::GET || path == "/api" || path.starts_with("/api/") {
        return ApiError::Missing("no such endpoint; see the README's API section".into())
            .into_response();
    }
    crate::assets::page(axum::http::StatusCode::NOT_FOUND).into_response()
}
