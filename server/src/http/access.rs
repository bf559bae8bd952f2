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
use crate::state::AppState;

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    Read,
    Write,
}

/// The access settings, parsed from the flags.
#[derive(Debug, Clone, Default)]
pub struct Access {
    tokens: Vec<(Role, String)>,
    allowed_hosts: Vec<String>,
}

/// The cookie the dashboard keeps a token in.
pub const TOKEN_COOKIE: &str = "memscope_token";

impl Access {
    /// From `--api-token` entries (`TOKEN` or `write:TOKEN` give write, `read:TOKEN` read), the
    /// tokens file's lines (`write TOKEN`, `read TOKEN`, `#` comments) and `--allowed-host`.
    pub fn new(
        api_tokens: &[String],
        tokens_file: Option<&str>,
        allowed_hosts: &[String],
    ) -> anyhow::Result<Access> {
        let mut tokens = Vec::new();
        for entry in api_tokens {
            let (role, token) = match entry.split_once(':') {
                Some(("read", t)) => (Role::Read, t),
                Some(("write", t)) => (Role::Write, t),
                _ => (Role::Write, entry.as_str()),
            };
            tokens.push((role, token.trim().to_string()));
        }
        for (n, line) in tokens_file.unwrap_or("").lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (role, token) = match line.split_once(char::is_whitespace) {
                Some(("read", t)) => (Role::Read, t),
                Some(("write", t)) => (Role::Write, t),
                _ => anyhow::bail!(
                    "tokens file line {}: expected `read TOKEN` or `write TOKEN`",
                    n + 1
                ),
            };
            tokens.push((role, token.trim().to_string()));
        }
        if let Some((_, short)) = tokens.iter().find(|(_, t)| t.len() < 16) {
            anyhow::bail!(
                "API token {:?}… is too short: use at least 16 characters (e.g. `openssl rand -hex 16`)",
                short.chars().take(3).collect::<String>()
            );
        }
        Ok(Access {
            tokens,
            allowed_hosts: allowed_hosts
                .iter()
                .map(|h| h.trim().to_ascii_lowercase())
                .collect(),
        })
    }

    /// Whether writes need a token.
    pub fn guards_writes(&self) -> bool {
        self.tokens.iter().any(|(r, _)| *r == Role::Write)
    }

    /// Whether reads need a token.
    pub fn guards_reads(&self) -> bool {
        self.tokens.iter().any(|(r, _)| *r == Role::Read)
    }

    /// The role of a presented token, if it is one.
    fn role_of(&self, presented: &str) -> Option<Role> {
        self.tokens
            .iter()
            .filter(|(_, t)| same(t.as_bytes(), presented.as_bytes()))
            .map(|(r, _)| *r)
            .max()
    }

    fn host_allowed(&self, host: &str) -> bool {
        self.allowed_hosts.is_empty() || self.allowed_hosts.iter().any(|h| *h == host)
    }
}

/// Compares without stopping at the first difference (no timing hint of how much matched).
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// `host[:port]` without the port, lower-cased.
fn host_name(authority: &str) -> String {
    let a = authority.trim().to_ascii_lowercase();
    if let Some(rest) = a.strip_prefix('[') {
        return rest.split(']').next().unwrap_or("").to_string();
    }
    a.rsplit_once(':')
        .filter(|(_, port)| port.chars().all(|c| c.is_ascii_digit()))
        .map_or(a.clone(), |(h, _)| h.to_string())
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_names_drop_ports_and_brackets() {
        assert_eq!(host_name("Example.com:8080"), "example.com");
        assert_eq!(host_name("[::1]:8080"), "::1");
        assert_eq!(host_name("127.0.0.1"), "127.0.0.1");
    }

    #[test]
    fn roles_come_from_entries_and_the_file() {
        let a = Access::new(
            &["0123456789abcdef".into(), "read:fedcba9876543210".into()],
            Some("# ops\nwrite aaaaaaaaaaaaaaaa\n"),
            &[],
        )
        .unwrap();
        assert_eq!(a.role_of("0123456789abcdef"), Some(Role::Write));
        assert_eq!(a.role_of("fedcba9876543210"), Some(Role::Read));
        assert_eq!(a.role_of("aaaaaaaaaaaaaaaa"), Some(Role::Write));
        assert_eq!(a.role_of("nope"), None);
        assert!(Access::new(&["short".into()], None, &[]).is_err());
        assert!(Access::new(&[], Some("admin x"), &[]).is_err());
    }
}
