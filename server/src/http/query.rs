//! The query-string extractor every handler uses: decodes into an `api` query type, and a
//! malformed query is a 400 with the decoder's message as JSON, like every other error.

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
