//! Two snapshots compared: snapshot `b` against snapshot `a`, matched by call site
//! (`snapshot::analysis::diff`), with both names.

use axum::extract::{Path, State};
use axum::routing::get;
use axum::{Json, Router};
use snapshot::analysis;

use super::error::{ApiError, ApiResult};
use super::query::ApiQuery;
use super::snapshots::{device_of, model, on_engine};
use crate::convert;
use crate::state::AppState;
use api::routes;

pub fn router() -> Router<AppState> {
    Router::new().route(routes::DIFF, get(diff))
}

async fn diff(
    State(s): State<AppState>,
    Path((a, b)): Path<(String, String)>,
    ApiQuery(q): ApiQuery<api::DiffQuery>,
) -> ApiResult<Json<api::DiffAnswer>> {
    let mut sides = Vec::new();
    for id in [&a, &b] {
        let info = s
            .library
            .get(id)
            .await?
            .ok_or_else(|| ApiError::NotFound(id.to_string()))?;
        sides.push((info, model(&s, id).await?));
    }
    let (info_b, model_b) = sides.pop().expect("two sides");
    let (info_a, model_a) = sides.pop().expect("two sides");
    let diff = on_engine(&s, move |_| -> ApiResult<api::Diff> {
        let side = |m, device| -> ApiResult<analysis::Side<'_>> {
            let m: &crate::library::models::Loaded = m;
            Ok(analysis::Side {
                snap: &m.snap,
                index: &m.index,
                device: device_of(m, device)?.device,
            })
        };
        Ok(convert::diff(analysis::compare(
            side(&model_a, q.device_a)?,
            side(&model_b, q.device_b)?,
            200,
        )))
    })
    .await?;
    Ok(Json(api::DiffAnswer {
        diff,
        a: api::SnapshotRef {
            id: info_a.id,
            name: info_a.name,
        },
        b: api::SnapshotRef {
            id: info_b.id,
            name: info_b.name,
        },
    }))
}
