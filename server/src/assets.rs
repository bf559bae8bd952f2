//! The dashboard, embedded: index.html for every page route (the app routes in the browser),
//! the stylesheet, the wasm app with its JS glue built by `build.rs`, and the worker script that
//! reads a large file in the page while it uploads (`frontend/src/local/`).

use std::io::Write;
use std::sync::OnceLock;

use axum::Router;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
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
///
/// A browser that accepts gzip gets the file gzipped (the wasm app 3.9 → 1.2 MB: a dashboard on
/// a GPU host opened over a network), once that copy is made: on a thread of its own at the
/// lowest priority, started with the router ([`prepare`]) and until then the plain file is
/// served. Both copies are the same file, so either's tag is answered `304`, made or not.
struct Asset {
    body: &'static [u8],
    content_type: &'static str,
    etag: OnceLock<String>,
    /// The gzipped copy (its tag: [`Asset::gzipped_etag`]).
    gzipped: OnceLock<Vec<u8>>,
}

impl Asset {
    const fn new(body: &'static [u8], content_type: &'static str) -> Asset {
        Asset {
            body,
            content_type,
            etag: OnceLock::new(),
            gzipped: OnceLock::new(),
        }
    }

    fn etag(&self) -> &str {
        self.etag.get_or_init(|| {
            let digest = Sha256::digest(self.body);
            format!("\"{}\"", crate::hex(&digest[..12]))
        })
    }

    /// Makes the gzipped copy (once; later calls return at once).
    fn gzip(&self) {
        self.gzipped.get_or_init(|| {
            let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            z.write_all(self.body).expect("writing to memory");
            z.finish().expect("writing to memory")
        });
    }

    /// The gzipped copy's tag: the plain one with `-gz`. Known without the copy, so a browser
    /// that cached it is answered `304` by a server that has not made its copy yet (just
    /// started) instead of being sent the whole file again.
    fn gzipped_etag(&self) -> String {
        format!("{}-gz\"", self.etag().trim_end_matches('"'))
    }

    /// The file (gzipped where the request accepts it and the copy is made), or `304 Not
    /// Modified` when the request's `If-None-Match` names either copy's tag.
    fn respond(&'static self, request: &HeaderMap) -> Response {
        let plain = self.etag();
        let gzipped = self.gzipped.get();
        let gzipped_etag = self.gzipped_etag();
        let named = request
            .get_all(header::IF_NONE_MATCH)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(|t| t.trim().trim_start_matches("W/"))
            .find(|&t| t == plain || t == "*" || t == gzipped_etag);
        let mut headers = HeaderMap::new();
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        headers.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
        if let Some(named) = named {
            let tag = if named == "*" { plain } else { named };
            headers.insert(
                header::ETAG,
                HeaderValue::from_str(tag).expect("a quoted hex tag"),
            );
            return (StatusCode::NOT_MODIFIED, headers).into_response();
        }
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(self.content_type),
        );
        let (body, tag): (&'static [u8], &str) = match gzipped.filter(|_| accepts_gzip(request)) {
            Some(g) => {
                headers.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
                (g, &gzipped_etag)
            }
            None => (self.body, plain),
        };
        headers.insert(
            header::ETAG,
            HeaderValue::from_str(tag).expect("a quoted hex tag"),
        );
        (headers, body).into_response()
    }
}

/// Whether `Accept-Encoding` lists gzip (and not with `q=0`).
fn accepts_gzip(request: &HeaderMap) -> bool {
    request
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|coding| {
            let mut parts = coding.split(';').map(str::trim);
            let name = parts.next().unwrap_or("");
            let refused = parts.any(|p| {
                p.strip_prefix("q=")
                    .and_then(|q| q.parse::<f32>().ok())
                    .is_some_and(|q| q == 0.0)
            });
            (name.eq_ignore_ascii_case("gzip") || name == "*") && !refused
        })
}

/// Starts making the gzipped copies, once a process, in the background.
fn prepare() {
    static STARTED: std::sync::Once = std::sync::Once::new();
    STARTED.call_once(|| {
        if let Err(e) = crate::background::spawn("memscope-gzip", || {
            for asset in ASSETS {
                asset.gzip();
            }
        }) {
            tracing::warn!(error = %e, "the app's files are served uncompressed");
        }
    });
}

static STYLE: Asset = Asset::new(STYLE_CSS.as_bytes(), "text/css");
static APP: Asset = Asset::new(APP_JS.as_bytes(), "text/javascript");
static WORKER: Asset = Asset::new(WORKER_JS.as_bytes(), "text/javascript");
static WASM: Asset = Asset::new(APP_WASM, "application/wasm");
/// The largest first: the wasm app is the one a first page load waits for.
static ASSETS: [&Asset; 4] = [&WASM, &APP, &STYLE, &WORKER];

pub fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    prepare();
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A browser holding the gzipped copy is answered `304` by a server that has not made its
    /// own copy yet (just started), and gets the plain file otherwise until the copy is made.
    #[test]
    fn the_gzipped_tag_is_known_before_the_copy_is_made() {
        static FILE: Asset = Asset::new(b"body { color: black }", "text/css");
        let ask = |pairs: &[(header::HeaderName, String)]| {
            let mut h = HeaderMap::new();
            for (k, v) in pairs {
                h.insert(k, HeaderValue::from_str(v).unwrap());
            }
            FILE.respond(&h)
        };
        let tag = FILE.gzipped_etag();
        assert!(FILE.gzipped.get().is_none());
        let res = ask(&[(header::IF_NONE_MATCH, tag.clone())]);
        assert_eq!(res.status(), StatusCode::NOT_MODIFIED);
        assert_eq!(res.headers()[header::ETAG], tag.as_str());
        let res = ask(&[(header::ACCEPT_ENCODING, "gzip".into())]);
        assert_eq!(res.status(), StatusCode::OK);
        assert!(res.headers().get(header::CONTENT_ENCODING).is_none());
        FILE.gzip();
        let res = ask(&[(header::ACCEPT_ENCODING, "gzip".into())]);
        assert_eq!(res.headers()[header::CONTENT_ENCODING], "gzip");
        assert_eq!(res.headers()[header::ETAG], tag.as_str());
    }
}
