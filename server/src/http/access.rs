//! Who may do what (issue 13, finding 8; issue 38, items 6, 7 and 14): anyone who reached the
//! port could delete or rename snapshots, any Host was answered (DNS rebinding) and uploads were
//! accepted cross-site.
//!
//! - **Origin**: a write (POST, PUT, PATCH, DELETE) from a browser page of another site is
//!   refused: its `Origin` must be exactly the origin it was sent to (scheme aside: the `Host`
//!   with its port; a page on another port of the same host is another site). Tools that send no
//!   `Origin` (curl, the agent, collectors) are unaffected. Always on.
//! - **Host**: a request for a `Host` the server does not answer for is refused (a page that
//!   rebinds its DNS name to this address cannot read it): with `--allowed-host`, those names;
//!   bound to loopback without it, `localhost`, `127.0.0.1` and `[::1]` (`access::HostRule`).
//! - **Tokens**: with any API token configured (`--api-token`), uploads, renames, retags and
//!   deletes need a write token; with read tokens, reading the API (and `/metrics`) needs a read
//!   or write token. A token comes as `Authorization: Bearer TOKEN` (the scheme in any case) or
//!   as the cookie the server sets when a person enters it in the dashboard (`POST
//!   /api/session`: HttpOnly, `SameSite=Strict`, named for this server's port; writes are
//!   Origin-checked, so the cookie cannot be ridden cross-site). Collector ingest has its own
//!   tokens (`--collector-token`).
//!
//! Tokens are off by default: a server on 127.0.0.1 needs no setup.

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use crate::access::{Access, Role, host_name, host_port, token_cookie};
use crate::state::AppState;

/// The token of an `Authorization: Bearer TOKEN` header (the scheme in any case, RFC 9110
/// 11.1), if there is one.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?.trim();
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

/// The `Host` a request was sent to (the header, else the URI's authority).
fn host_of(req: &Request) -> Option<String> {
    req.headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .or_else(|| req.uri().authority().map(|a| a.to_string()))
}

/// The token cookie's name for a request sent to `host` (per port: `access::token_cookie`).
fn cookie_name(host: Option<&str>) -> String {
    token_cookie(host.map_or(80, |h| host_port(h, 80)))
}

fn presented_token(req: &Request) -> Option<String> {
    let h = req.headers();
    if let Some(t) = bearer(h) {
        return Some(t.to_string());
    }
    let name = cookie_name(host_of(req).as_deref());
    h.get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|c| {
            c.trim()
                .strip_prefix(name.as_str())
                .and_then(|r| r.strip_prefix('='))
                .map(|t| t.trim().to_string())
        })
}

pub fn router() -> Router<AppState> {
    Router::new().route(
        api::routes::SESSION,
        axum::routing::post(start_session).delete(end_session),
    )
}

/// `POST /api/session` with `Authorization: Bearer TOKEN`: sets the dashboard's token cookie,
/// HttpOnly (no script on any page can read it) and named for this server's port. The dashboard
/// calls it when a person enters a token.
async fn start_session(State(s): State<AppState>, req: Request) -> Result<Response, ApiError> {
    let token = bearer(req.headers()).ok_or_else(|| {
        ApiError::BadRequest("send the token as `Authorization: Bearer TOKEN`".into())
    })?;
    if s.access.role_of(token).is_none() {
        return Err(ApiError::Unauthorized(
            "this is not one of this server's API tokens".into(),
        ));
    }
    let cookie = format!(
        "{}={token}; Path=/; HttpOnly; SameSite=Strict; Max-Age=31536000",
        cookie_name(host_of(&req).as_deref())
    );
    session_answer(&cookie)
}

/// `DELETE /api/session`: forgets the dashboard's token cookie.
async fn end_session(req: Request) -> Result<Response, ApiError> {
    let cookie = format!(
        "{}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0",
        cookie_name(host_of(&req).as_deref())
    );
    session_answer(&cookie)
}

fn session_answer(cookie: &str) -> Result<Response, ApiError> {
    let value = axum::http::HeaderValue::from_str(cookie).map_err(|_| {
        ApiError::BadRequest("a token is printable ASCII without spaces or `;`".into())
    })?;
    let mut response = axum::http::StatusCode::NO_CONTENT.into_response();
    response.headers_mut().insert(header::SET_COOKIE, value);
    Ok(response)
}

/// The middleware: Host, Origin, then the token the route needs.
pub async fn guard(State(s): State<AppState>, req: Request, next: Next) -> Response {
    match check(&s.access, &req) {
        Ok(()) => next.run(req).await,
        Err(e) => e.into_response(),
    }
}

fn check(access: &Access, req: &Request) -> Result<(), ApiError> {
    let host = host_of(req);
    let name = host.as_deref().map(host_name);
    if !access.hosts.allows(name.as_deref()) {
        return Err(ApiError::Forbidden(format!(
            "this server answers for {}, not {:?}",
            access.hosts.describe(),
            name.unwrap_or_default()
        )));
    }
    let path = req.uri().path();
    let api = path.starts_with("/api/") || path == "/metrics";
    let write = !matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    if write && let Some(origin) = req.headers().get(header::ORIGIN) {
        // The whole origin: a page on another port of the same host is another site.
        let origin = origin.to_str().unwrap_or("");
        let origin_authority = origin.split_once("://").map_or("", |(_, rest)| rest);
        let same_site = host
            .as_deref()
            .is_some_and(|h| h.trim().eq_ignore_ascii_case(origin_authority));
        if !same_site {
            return Err(ApiError::Forbidden(format!(
                "a write from another site ({origin}) is refused; use the dashboard this server serves"
            )));
        }
    }
    // Open to all: the dashboard's own files (it asks for a token when the API needs one), the
    // health check, collector ingest (its own tokens) and the session (it checks the token it
    // is given).
    if !api
        || path == api::routes::HEALTH
        || path == api::routes::INGEST
        || path == api::routes::SESSION
    {
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
