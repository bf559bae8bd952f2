//! The HTTP layer's one error type: each variant has its status; the layers below return their
//! own errors (`sqlx::Error`, `UploadError`, `anyhow::Error`) and are converted here. An internal
//! error is logged once, inside the request's span (so the log line carries the method and
//! path), and answered with a generic message.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::library::upload::UploadError;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("no snapshot with id {0}")]
    NotFound(String),
    /// Something other than a snapshot is missing; the message names it.
    #[error("{0}")]
    Missing(String),
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    Unauthorized(String),
    /// The client sent its request too slowly (a stalled body, an upload below the minimum rate).
    #[error("{0}")]
    Timeout(String),
    /// Authenticated, but not allowed to do this.
    #[error("{0}")]
    Forbidden(String),
    /// The request contradicts what is stored (a batch key resent with other content).
    #[error("{0}")]
    Conflict(String),
    #[error(
        "upload is larger than the limit of {limit_bytes} bytes; raise --max-upload-bytes (MEMSCOPE_MAX_UPLOAD_BYTES) to accept it"
    )]
    TooLarge { limit_bytes: u64 },
    /// A request body (other than an upload's) over its route's limit, refused before it is read.
    #[error("the {what} is larger than {limit_bytes} bytes")]
    BodyTooLarge {
        what: &'static str,
        limit_bytes: u64,
    },
    /// The upload is not a snapshot memscope can read: the engine's message, for the user.
    #[error("{0}")]
    Unreadable(String),
    /// A shared budget is spent for now (the database busy with other writers past its wait,
    /// every live-stream slot taken): the request may be sent again in a moment.
    #[error("{0}")]
    Unavailable(String),
    /// The client went away and its request's engine work stopped early; nobody reads this.
    #[error("the client went away before the answer was ready")]
    Cancelled,
    #[error(transparent)]
    Internal(#[from] anyhow::Error),
}

impl ApiError {
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::NotFound(_) | ApiError::Missing(_) => StatusCode::NOT_FOUND,
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::Timeout(_) => StatusCode::REQUEST_TIMEOUT,
            ApiError::TooLarge { .. } | ApiError::BodyTooLarge { .. } => {
                StatusCode::PAYLOAD_TOO_LARGE
            }
            ApiError::Unreadable(_) => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            // nginx's "client closed request": never sent, the client is gone.
            ApiError::Cancelled => StatusCode::from_u16(499).expect("499 is a valid status"),
        }
    }
}

impl From<crate::live::IngestError> for ApiError {
    fn from(e: crate::live::IngestError) -> Self {
        match e {
            crate::live::IngestError::Db(e) => e.into(),
            crate::live::IngestError::Forbidden(m) => ApiError::Forbidden(m),
            conflict @ crate::live::IngestError::Conflict { .. } => {
                ApiError::Conflict(conflict.to_string())
            }
        }
    }
}

impl From<sqlx::Error> for ApiError {
    fn from(e: sqlx::Error) -> Self {
        if crate::db::is_busy(&e) {
            ApiError::Unavailable(
                "the database is busy with other writes; try again in a moment".into(),
            )
        } else {
            ApiError::Internal(e.into())
        }
    }
}

impl From<std::io::Error> for ApiError {
    fn from(e: std::io::Error) -> Self {
        ApiError::Internal(e.into())
    }
}

impl From<tokio::task::JoinError> for ApiError {
    fn from(e: tokio::task::JoinError) -> Self {
        ApiError::Internal(e.into())
    }
}

impl From<UploadError> for ApiError {
    fn from(e: UploadError) -> Self {
        match e {
            UploadError::Interrupted(m) => ApiError::BadRequest(format!("upload interrupted: {m}")),
            UploadError::TooLarge { limit_bytes } => ApiError::TooLarge { limit_bytes },
            e @ (UploadError::TooSlow { .. } | UploadError::OverTime { .. }) => {
                ApiError::Timeout(e.to_string())
            }
            UploadError::Unreadable(m) => ApiError::Unreadable(m),
            UploadError::Busy(m) => ApiError::Unavailable(m),
            UploadError::Internal(e) => ApiError::Internal(e),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let message = match &self {
            ApiError::Internal(e) => {
                // Inside the request's span (TraceLayer): the line says which request failed.
                tracing::error!(error = format!("{e:#}"), "internal error");
                "internal error; see the server log".to_string()
            }
            other => other.to_string(),
        };
        let mut response = (self.status(), Json(api::ErrorBody { error: message })).into_response();
        if matches!(self, ApiError::Unavailable(_)) {
            response.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from_static("1"),
            );
        }
        response
    }
}

pub type ApiResult<T> = Result<T, ApiError>;
