//! The library resource: list and search, upload (streamed, parsed while it arrives) and its
//! progress, an entry's info, rename/retag, delete, the original file; and the health check.

use axum::body::Body;
use axum::extract::DefaultBodyLimit;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};

use super::error::{ApiError, ApiResult};
use super::query::ApiQuery;
use crate::state::AppState;
use api::routes;

/// The largest body of a small JSON request (rename, retag).
const SMALL_BODY_BYTES: usize = 64 << 10;

pub fn router() -> Router<AppState> {
    Router::new()
        .route(routes::HEALTH, get(health))
        .route(routes::SNAPSHOTS, get(list).post(upload))
        .route(routes::INFO, get(info))
        .route(routes::ORIGINAL, get(original))
        .route(routes::UPLOAD_PROGRESS, get(upload_progress))
        // GET of the same path is the report (`snapshots.rs`).
        // A rename or retag is a few hundred bytes: nothing larger is read.
        .route(
            routes::SNAPSHOT,
            axum::routing::patch(update)
                .layer(DefaultBodyLimit::max(SMALL_BODY_BYTES))
                .delete(remove),
        )
}

async fn health() -> Json<api::Health> {
    Json(api::Health {
        ok: true,
        version: env!("CARGO_PKG_VERSION").to_string(),
    })
}

async fn list(
    State(s): State<AppState>,
    ApiQuery(q): ApiQuery<api::ListQuery>,
) -> ApiResult<Json<Vec<api::SnapshotInfo>>> {
    let items = s
        .library
        .list(q.q.as_deref().filter(|q| !q.is_empty()))
        .await?;
    Ok(Json(items))
}

async fn upload(
    State(s): State<AppState>,
    ApiQuery(q): ApiQuery<api::UploadQuery>,
    super::query::Client(client): super::query::Client,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    let name = q
        .name
        .or_else(|| {
            headers
                .get("x-filename")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        })
        .filter(|n| !n.trim().is_empty())
        .unwrap_or_else(|| "snapshot".into());
    let tags = q.tags.as_deref().map(api::parse_tags).unwrap_or_default();
    refuse_bad_labels(Some(&name), Some(&tags))?;
    // A declared size over the limit is refused before a byte is read; the declared size is
    // the parser's size hint, so it is never trusted past the limit.
    let limit_bytes = s.uploads.max_bytes();
    let total_bytes = super::query::declared_length(&headers).unwrap_or(0);
    if total_bytes > limit_bytes {
        return Err(ApiError::TooLarge { limit_bytes });
    }
    let token = q.token.filter(|t| !t.is_empty() && t.len() <= 64);
    let progress = s.uploads.start(token.as_deref(), total_bytes);
    let result = s
        .uploads
        .upload(
            crate::library::upload::NewUpload {
                name,
                tags,
                device_total: q.device_total_bytes,
                client,
            },
            body,
            progress.clone(),
        )
        .await;
    s.uploads.finish(token, progress);
    let up = result?;
    let status = if up.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    let answer = api::Uploaded {
        id: up.snapshot.id.clone(),
        created: up.created,
        summary: upload_summary(&up.report),
        snapshot: up.snapshot,
    };
    Ok((status, Json(answer)).into_response())
}

/// The report's headline figures (what an upload's answer shows).
fn upload_summary(r: &api::Report) -> api::UploadSummary {
    api::UploadSummary {
        segments: r.segments,
        blocks: r.blocks,
        reserved_bytes: r.reserved_bytes,
        allocated_bytes: r.allocated_bytes,
        requested_bytes: r.requested_bytes,
        block_states: r.block_states.clone(),
        devices: r.devices.clone(),
        warnings: r.warnings.clone(),
        leak_suspects: r.leak_suspects.len() as u64,
        ooms: r.ooms.len() as u64,
    }
}

/// Progress of an upload. A token not (yet) seen answers zeros: the dashboard starts polling as
/// it starts sending, and its first poll may reach the server before the upload does.
async fn upload_progress(
    State(s): State<AppState>,
    Path(token): Path<String>,
) -> ApiResult<Json<api::UploadProgress>> {
    use std::sync::atomic::Ordering::Relaxed;
    let p = s.uploads.progress(&token);
    Ok(Json(match p {
        Some(p) => api::UploadProgress {
            received_bytes: p.received_bytes.load(Relaxed),
            parsed_bytes: p.parsed_bytes.load(Relaxed),
            total_bytes: p.total_bytes,
            finished: p.finished.load(Relaxed),
        },
        None => api::UploadProgress::default(),
    }))
}

async fn info(
    State(s): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Json<api::SnapshotInfo>> {
    let info = s.library.get(&id).await?.ok_or(ApiError::NotFound(id))?;
    Ok(Json(info))
}

async fn update(
    State(s): State<AppState>,
    Path(id): Path<String>,
    Json(u): Json<api::UpdateSnapshot>,
) -> ApiResult<Json<api::SnapshotInfo>> {
    refuse_bad_labels(u.name.as_deref(), u.tags.as_deref())?;
    if u.device_total_bytes == Some(0) {
        return Err(ApiError::BadRequest(
            "device_total_bytes must be the device's memory in bytes, not 0".into(),
        ));
    }
    if !s
        .library
        .update(&id, u.name.as_deref(), u.tags.as_deref())
        .await?
    {
        return Err(ApiError::NotFound(id));
    }
    if let Some(bytes) = u.device_total_bytes {
        set_device_total(&s, &id, bytes).await?;
    }
    let info = s.library.get(&id).await?.ok_or(ApiError::NotFound(id))?;
    Ok(Json(info))
}

/// Refuses a name or tags the library cannot keep alike on every backend and serve back in a
/// header (`api::name_problem`, `api::tags_problem`), before anything is read or stored.
fn refuse_bad_labels(name: Option<&str>, tags: Option<&[api::Tag]>) -> ApiResult<()> {
    let why = name
        .and_then(api::name_problem)
        .or_else(|| tags.and_then(api::tags_problem));
    match why {
        Some(why) => Err(ApiError::BadRequest(why)),
        None => Ok(()),
    }
}

/// Judges the snapshot's OOMs again under a device total and stores both.
async fn set_device_total(s: &AppState, id: &str, total_bytes: u64) -> ApiResult<()> {
    let loaded = s
        .models
        .get(&s.library, id)
        .await?
        .ok_or_else(|| ApiError::NotFound(id.to_string()))?;
    let mut report = super::snapshots::report_of(s, id).await?;
    report.ooms =
        snapshot::analysis::oom::oom_reports(&loaded.snap, &loaded.index, Some(total_bytes))
            .into_iter()
            .map(crate::convert::oom_report)
            .collect();
    let total = api::DeviceTotal {
        total_bytes,
        source: api::DeviceTotalSource::Set,
        detail: None,
    };
    if !s.library.set_device_total(id, &total, &report).await? {
        return Err(ApiError::NotFound(id.to_string()));
    }
    Ok(())
}

async fn remove(State(s): State<AppState>, Path(id): Path<String>) -> ApiResult<StatusCode> {
    if !s.library.delete(&id).await? {
        return Err(ApiError::NotFound(id));
    }
    s.models.remove(&id);
    Ok(StatusCode::NO_CONTENT)
}

async fn original(State(s): State<AppState>, Path(id): Path<String>) -> ApiResult<Response> {
    let info = s
        .library
        .get(&id)
        .await?
        .ok_or_else(|| ApiError::NotFound(id.clone()))?;
    let file = tokio::fs::File::open(s.library.original_path(&info.sha256)).await?;
    Ok((
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_string()),
            (
                header::CONTENT_DISPOSITION,
                super::download::attachment(&info.name),
            ),
        ],
        Body::from_stream(super::download::file_chunks(file)),
    )
        .into_response())
}
