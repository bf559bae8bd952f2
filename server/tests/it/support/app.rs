//! The in-process server API tests share: a fresh app on the run's backend, requests sent
//! through its router (`oneshot`, no socket), answers decoded into the `api` types the dashboard
//! reads them as, and the fixtures.

use std::path::PathBuf;

use axum::body::{Body, Bytes};
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use server::state::AppState;
use tower::ServiceExt;

/// A fixture's path (`tests/fixtures/NAME`).
pub fn fixture_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures")
        .join(name)
}

/// A fixture's bytes.
pub fn fixture_bytes(name: &str) -> Vec<u8> {
    std::fs::read(fixture_path(name)).unwrap()
}

/// A fresh app on data folder `memscope-TAG-PID` (emptied first), on the run's backend, that
/// takes batches from the collector tokens given (`NAME=TOKEN`).
pub async fn app_state(tag: &str, collector_tokens: &[&str]) -> AppState {
    let dir = std::env::temp_dir().join(format!("memscope-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut args = server::testing::serve_args(dir);
    args.collector_tokens = collector_tokens.iter().map(|t| t.to_string()).collect();
    AppState::open(args).await.unwrap()
}

/// The answer to `req`: its status and body.
pub async fn respond(s: &AppState, req: Request<Body>) -> (StatusCode, Bytes) {
    let res = server::http::app(s.clone()).oneshot(req).await.unwrap();
    let status = res.status();
    (status, res.into_body().collect().await.unwrap().to_bytes())
}

/// The answer to `req` as JSON (`null` when it is not JSON).
pub async fn respond_json(s: &AppState, req: Request<Body>) -> (StatusCode, serde_json::Value) {
    let (status, bytes) = respond(s, req).await;
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null),
    )
}

/// `uri`'s answer, which must be 200, decoded into `T`.
pub async fn get_as<T: serde::de::DeserializeOwned>(s: &AppState, uri: &str) -> T {
    let (status, bytes) = respond(s, Request::get(uri).body(Body::empty()).unwrap()).await;
    assert_eq!(
        status,
        StatusCode::OK,
        "{uri}: {}",
        String::from_utf8_lossy(&bytes)
    );
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{uri}: {e}"))
}

/// The error `req` is answered with: its status and message.
pub async fn error_of(s: &AppState, req: Request<Body>) -> (StatusCode, String) {
    let (status, bytes) = respond(s, req).await;
    let body: api::ErrorBody = serde_json::from_slice(&bytes).unwrap_or_else(|e| {
        panic!(
            "not an error body ({e}): {}",
            String::from_utf8_lossy(&bytes)
        )
    });
    (status, body.error)
}

/// The message of an error answer read as JSON (`api::ErrorBody`).
pub fn error_message(body: &serde_json::Value) -> String {
    serde_json::from_value::<api::ErrorBody>(body.clone())
        .unwrap_or_else(|e| panic!("not an error body ({e}): {body}"))
        .error
}
