//! What handlers read from a request before its body: the query-string extractor every handler
//! uses (decodes into an `api` query type; a malformed query is a 400 with the decoder's message
//! as JSON, like every other error), the client's address, and the body length a request
//! declares.

use axum::http::{HeaderMap, header};

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use super::error::ApiError;

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

/// The body length a request declares (`Content-Length`), if it does: what a handler checks
/// against its limit before reading any of the body.
pub fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.trim().parse().ok())
}

/// The address of the client that sent the request, when it came over a socket
/// (`listen::serve` attaches it); `None` in-process.
#[derive(Debug, Clone, Copy)]
pub struct Client(pub Option<std::net::IpAddr>);

impl<S: Send + Sync> FromRequestParts<S> for Client {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(Client(
            parts
                .extensions
                .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
                .map(|c| c.0.ip()),
        ))
    }
}
