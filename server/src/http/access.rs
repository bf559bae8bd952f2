//! Who may do what (issue 13, finding 8): anyone who reached the port could delete or rename
//! snapshots, any Host was answered (DNS rebinding) and uploads were accepted cross-site.
//!
//! - **Origin**: a write (POST, PUT, PATCH, DELETE) from a browser page of another site is
//!   refused: its `Origin` must name this server's own host (the `Host` it was sent to, or one of
//!   `--allowed-host`). Tools that send no `Origin` (curl, the agent, collectors) are unaffected.
//!   Always on.
//! - **Host**: with `--allowed-host` given, a request for any other `Host` is refused (a page
//!   that rebinds its DNS name to this address cannot read it).
//! - **Tokens**: with write tokens (`--api-token`), uploads, renames, retags and deletes need one;
//!   with read tokens, reading the API (and `/metrics`) needs a read or write token. A token comes
//!   as `Authorization: Bearer TOKEN` or as the `memscope_token` cookie the dashboard sets when a
//!   user enters it (once; `SameSite=Strict`, and writes are Origin-checked, so the cookie cannot
//!   be ridden cross-site). Collector ingest has its own tokens (`--collector-token`).
//!
//! All off by default except Origin: a server on 127.0.0.1 needs no setup.

use axum::extract::{Request, State};
use axum::http::{Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use crate::access::{Access, Role, TOKEN_COOKIE, host_name};
use crate::state::AppState;

fn presented_token(req: &Request) -> Option<String> {
    let h = req.headers();
    if let Some(t) = h
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
    {
        return Some(t.trim().to_string());
    }
    h.get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|c| {
            c.trim()
                .strip_prefix(TOKEN_COOKIE)
                .and_then(|r| r.strip_prefix('='))
                .map(|t| t.trim().to_string())
        })
}

/// The middleware: Host, Origin, then the token the route needs.
pub async fn guard(State(s): State<AppState>, req: Request, next: Next) -> Response {
    match check(&s.access, &req) {
        Ok(()) => next.run(req).await,
        Err(e) => e.into_response(),
    }
}

fn check(access: &Access, req: &Request) -> Result<(), ApiError> {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .or_else(|| req.uri().authority().map(|a| a.to_string()));
    if !access.allowed_hosts.is_empty() {
        let name = host.as_deref().map(host_name).unwrap_or_default();
        if !access.host_allowed(&name) {
            return Err(ApiError::Forbidden(format!(
                "this server answers for {} only (--allowed-host), not {name:?}",
                access.allowed_hosts.join(", ")
            )));
        }
    }
    let path = req.uri().path();
    let api = path.starts_with("/api/") || path == "/metrics";
    let write = !matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    if write && let Some(origin) = req.headers().get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("");
        let origin_host = origin.split_once("://").map_or("", |(_, rest)| rest);
        let same_site = host
            .as_deref()
            .is_some_and(|h| h.eq_ignore_ascii_case(origin_host))
            || (!access.allowed_hosts.is_empty() && access.host_allowed(&host_name(origin_host)));
        if !same_site {
            return Err(ApiError::Forbidden(format!(
                "a write from another site ({origin}) is refused; use the dashboard this server serves"
            )));
        }
    }
    // Open to all: the dashboard's own files (it asks for a token when the API needs one), the
    // health check, and collector ingest (its own tokens).
    if !api || path == api::routes::HEALTH || path == api::routes::INGEST {
        return Ok(());
    }
    let needed = if write {
        access.guards_writes().then_some(Role::Write)
    } else {
        access.guards_reads().then_some(Role::Read)
    };
    let Some(needed) = needed else {
        return Ok(());
    };
    match presented_token(req).and_then(|t| access.role_of(&t)) {
        Some(role) if role >= needed => Ok(()),
        Some(_) => Err(ApiError::Forbidden(
            "this token may read, not change the library; use a write token".into(),
        )),
        None => Err(ApiError::Unauthorized(format!(
            "this memscope server needs an access token to {} (Authorization: Bearer TOKEN, or enter it in the dashboard)",
            if write { "change the library" } else { "read" }
        ))),
    }
}
