//! `POST /api/ingest`: one collector batch (`wire::Batch`, JSON, optionally gzip), authenticated
//! by the collector's bearer token (whose NAME is the one host it speaks for), checked for what
//! no backend stores alike (`wire::Batch::problem`), stored once per `(collector, seq)`,
//! announced to the live pages' event stream. This is the collector ↔ server boundary: its types are `wire`'s.

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, header};
use axum::routing::post;
use axum::{Json, Router};

use super::error::{ApiError, ApiResult};
use super::query::declared_length;
use crate::state::AppState;
use api::routes;

pub fn router() -> Router<AppState> {
    Router::new().route(routes::INGEST, post(ingest_batch))
}

/// Largest ingest batch accepted (as sent, and decompressed).
const MAX_BATCH_BYTES: usize = 64 << 20;

/// The body is read only once the token is known, and never past `MAX_BATCH_BYTES`: a client
/// without a token, or one declaring a larger body, is answered before any of it is read.
async fn ingest_batch(
    State(s): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Json<wire::Ack>> {
    let token = super::access::bearer(&headers).ok_or_else(|| {
        ApiError::Unauthorized("missing `Authorization: Bearer <collector token>`".into())
    })?;
    let collector = s
        .access
        .collector_for_token(token)
        .ok_or_else(|| {
            ApiError::Unauthorized(
                "unknown collector token; add it with --collector-token NAME=TOKEN".into(),
            )
        })?
        .to_string();
    let too_large = || ApiError::BodyTooLarge {
        what: "batch",
        limit_bytes: MAX_BATCH_BYTES as u64,
    };
    if declared_length(&headers).is_some_and(|n| n > MAX_BATCH_BYTES as u64) {
        return Err(too_large());
    }
    let body = axum::body::to_bytes(body, MAX_BATCH_BYTES)
        .await
        .map_err(|e| {
            let over = std::error::Error::source(&e)
                .is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
            if over {
                too_large()
            } else {
                ApiError::BadRequest(format!("the batch did not arrive whole: {e}"))
            }
        })?;
    let gzip = headers
        .get(header::CONTENT_ENCODING)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"gzip"));
    let json = if gzip {
        use std::io::Read;
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&body[..])
            .take(MAX_BATCH_BYTES as u64 + 1)
            .read_to_end(&mut out)
            .map_err(|e| ApiError::BadRequest(format!("batch is not valid gzip: {e}")))?;
        out
    } else {
        body.to_vec()
    };
    if json.len() > MAX_BATCH_BYTES {
        return Err(ApiError::BadRequest(format!(
            "batch is larger than {MAX_BATCH_BYTES} bytes; send smaller batches"
        )));
    }
    let batch: wire::Batch = serde_json::from_slice(&json)
        .map_err(|e| ApiError::BadRequest(format!("malformed batch: {e}")))?;
    if batch.version > wire::VERSION {
        return Err(ApiError::BadRequest(format!(
            "batch version {} is newer than this server's {}; upgrade the server",
            batch.version,
            wire::VERSION
        )));
    }
    if let Some(why) = batch.problem() {
        return Err(ApiError::BadRequest(format!("malformed batch: {why}")));
    }
    // A token for NAME covers NAME and NAME/… (the agents a collector's owner runs with it, each
    // with its own sequence space).
    let covered = batch.collector == collector
        || batch
            .collector
            .strip_prefix(collector.as_str())
            .is_some_and(|rest| rest.starts_with('/'));
    if !covered {
        return Err(ApiError::Unauthorized(format!(
            "this token belongs to collector {collector:?}, not {:?}",
            batch.collector
        )));
    }
    let ack = s.live.ingest_batch(&batch, &collector).await?;
    Ok(Json(ack))
}
