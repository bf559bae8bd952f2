//! The dashboard, embedded: index.html for every page route (the app routes in the browser),
//! the stylesheet, the wasm app with its JS glue built by `build.rs`, and the worker script that
//! reads a large file in the page while it uploads (`frontend/src/local/`).

use std::sync::OnceLock;

use axum::Router;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use sha2::{Digest, Sha256};

use api::routes;

const INDEX_HTML: &str = include_str!("../../frontend/index.html");
const FAVICON_SVG: &str = include_str!("../../frontend/favicon.svg");
const STYLE_CSS: &str = include_str!("../../frontend/style.css");
const WORKER_JS: &str = include_str!("../../frontend/worker.js");
const APP_JS: &str = include_str!(concat!(env!("OUT_DIR"), "/frontend.js"));
const APP_WASM: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/frontend_bg.wasm"));

/// An embedded file with its type and a validator: the first 96 bits of its SHA-256, worked out
/// at its first request. Served with `Cache-Control: no-cache` and an `ETag`, so a browser asks
/// again at every page load (a new build is never mixed with a cached old one) and is answered
/// `304 Not Modified` while the file is the same. Without a validator every navigation fetched
/// the 3.9 MB wasm app again and compiled it again, where a cached one is also compiled once:
/// Chromium keeps the compiled code with the cached response (bench/README.md, issue 41,
/// twenty-fourth part).
struct Asset {
    body: &'static [u8],
    content_type: &'static str,
    etag: OnceLock<String>,
}

impl Asset {
    const fn new(body: &'static [u8], content_type: &'static str) -> Asset {
        Asset {
            body,
            content_type,
            etag: OnceLock::new(),
        }
    }

    fn etag(&self) -> &str {
        self.etag.get_or_init(|| {
            let digest = Sha256::digest(self.body);
            let hex: String = digest[..12].iter().map(|b| format!("{b:02x}")).collect();
            format!("\"{hex}\"")
        })
    }

    /// The file, or `304 Not Modified` when the request's `If-None-Match` names its tag.
    fn respond(&self, request: &HeaderMap) -> Response {
        let etag = self.etag();
        let cached = request
            .get_all(header::IF_NONE_MATCH)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(|t| t.trim().trim_start_matches("W/"))
            .any(|t| t == etag || t == "*");
        let validators = [(header::CACHE_CONTROL, "no-cache"), (header::ETAG, etag)];
        if cached {
            (StatusCode::NOT_MODIFIED, validators).into_response()
        } else {
            (
                validators,
                [(header::CONTENT_TYPE, self.content_type)],
                self.body,
            )
                .into_response()
        }
    }
}

static STYLE: Asset = Asset::new(STYLE_CSS.as_bytes(), "text/css");
static APP: Asset = Asset::new(APP_JS.as_bytes(), "text/javascript");
static WORKER: Asset = Asset::new(WORKER_JS.as_bytes(), "text/javascript");
static WASM: Asset = Asset::new(APP_WASM, "application/wasm");

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
            get(|h: HeaderMap| async move { STYLE.respond(&h) }),
        )
        .route(
            "/pkg/frontend.js",
            get(|h: HeaderMap| async move { APP.respond(&h) }),
        )
        .route(
            routes::WORKER_JS,
            get(|h: HeaderMap| async move { WORKER.respond(&h) }),
        )
        .route(
            "/pkg/frontend_bg.wasm",
            get(|h: HeaderMap| async move { WASM.respond(&h) }),
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
