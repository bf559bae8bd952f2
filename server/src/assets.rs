//! The dashboard, embedded: index.html for every page route (the app routes in the browser),
//! the stylesheet, the wasm app with its JS glue built by `build.rs`, and the worker script that
//! reads a large file in the page while it uploads (`frontend/src/local/`).

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use api::routes;

const INDEX_HTML: &str = include_str!("../../frontend/index.html");
const FAVICON_SVG: &str = include_str!("../../frontend/favicon.svg");
const STYLE_CSS: &str = include_str!("../../frontend/style.css");
const WORKER_JS: &str = include_str!("../../frontend/worker.js");
const APP_JS: &str = include_str!(concat!(env!("OUT_DIR"), "/frontend.js"));
const APP_WASM: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/frontend_bg.wasm"));

pub fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route(routes::PAGE_LIBRARY, get(index))
        .route(routes::PAGE_SNAPSHOT, get(index))
        .route(routes::PAGE_DIFF, get(index))
        .route(routes::PAGE_RUN, get(index))
        .route(routes::PAGE_FIT, get(index))
        .route(routes::PAGE_COMPARE, get(index))
        .route(routes::PAGE_LIVE, get(index))
        .route(routes::PAGE_LIVE_GPU, get(index))
        .route(routes::PAGE_LIVE_PROCESS, get(index))
        .route("/favicon.svg", get(favicon))
        // Asked for by browsers and tools that do not read the page's <link rel="icon">.
        .route("/favicon.ico", get(favicon))
        .route(
            "/style.css",
            get(|| async { ([(header::CONTENT_TYPE, "text/css")], STYLE_CSS) }),
        )
        .route(
            "/pkg/frontend.js",
            get(|| async { ([(header::CONTENT_TYPE, "text/javascript")], APP_JS) }),
        )
        .route(
            routes::WORKER_JS,
            get(|| async { ([(header::CONTENT_TYPE, "text/javascript")], WORKER_JS) }),
        )
        .route(
            "/pkg/frontend_bg.wasm",
            get(|| async { ([(header::CONTENT_TYPE, "application/wasm")], APP_WASM) }),
        )
}

async fn index() -> impl IntoResponse {
    page(StatusCode::OK)
}

/// The app's page with `status` (404 for a path no page has: the app then draws its own
/// not-found page).
pub fn page(status: StatusCode) -> impl IntoResponse {
    (
        status,
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        INDEX_HTML,
    )
}

async fn favicon() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "image/svg+xml"),
            (header::CACHE_CONTROL, "max-age=86400"),
        ],
        FAVICON_SVG,
    )
}
