//! Runs: a job's ranks side by side (`GET /api/runs`, `/api/runs/{id}`, `/api/runs/{id}/series`).
//! The report and the series are computed together, once per set of member snapshots, and kept
//! in a small cache: the run page asks for both, and a run of 64 ranks loads 64 models.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::routing::get;
use axum::{Json, Router};
use futures_util::{StreamExt, TryStreamExt};

use super::error::{ApiError, ApiResult};
use super::query::ApiQuery;
use super::snapshots::{model, on_engine};
use crate::runs::{self, Computed, Key, Member};
use crate::state::AppState;
use api::routes;

pub fn router() -> Router<AppState> {
    Router::new()
        .route(routes::RUNS, get(list))
        .route(routes::RUN, get(report))
        .route(routes::RUN_SERIES, get(series))
}

async fn list(State(s): State<AppState>) -> ApiResult<Json<Vec<api::RunInfo>>> {
    Ok(Json(runs::list(s.library.job_rows(None).await?)))
}

/// Buckets of the series unless asked otherwise, and the most that may be asked.
const DEFAULT_BUCKETS: u32 = 600;
const MAX_BUCKETS: u32 = 4_000;

/// Ranks a run may have to be opened (each rank's model is in memory while its run is computed:
/// ~5 MB for 100k events).
const MAX_RANKS: usize = 256;

/// Model loads of one run at a time.
const LOADS_AT_ONCE: usize = 2;

async fn computed(s: &AppState, id: &str, buckets: u32) -> ApiResult<Computed> {
    let mut chosen = runs::choose(s.library.job_rows(Some(id)).await?)
        .remove(id)
        .ok_or_else(|| {
            ApiError::NotFound(format!("{id} (no snapshots tagged job={id} with a rank)"))
        })?;
    chosen.sort_by_key(|c| c.rank);
    if chosen.len() > MAX_RANKS {
        return Err(ApiError::BadRequest(format!(
            "{id} has {} ranks; a run page opens at most {MAX_RANKS} (their models are held in \
             memory together): tag a subset with its own job to compare them",
            chosen.len()
        )));
    }
    let key: Key = (
        id.to_string(),
        chosen
            .iter()
            .map(|c| (c.row.id.clone(), c.earlier))
            .collect(),
        buckets,
    );
    if let Some(hit) = s.runs.get(&key) {
        return Ok(hit);
    }
    let _turn = s.runs.1.lock().await;
    if let Some(hit) = s.runs.get(&key) {
        return Ok(hit);
    }
    // Two loads at a time (each reads a model file and indexes it on a blocking thread): a run
    // of 64 ranks opens in about half the time of one by one on two cores.
    let loaded: Vec<_> = futures_util::stream::iter(chosen)
        .map(|c| async move {
            let report = super::snapshots::report_of(s, &c.row.id).await?;
            let m = model(s, &c.row.id).await?;
            Ok::<_, ApiError>((c, report, m))
        })
        .buffered(LOADS_AT_ONCE)
        .try_collect()
        .await?;
    let run_id = id.to_string();
    let value = on_engine(s, move |_| {
        let members: Vec<Member> = loaded
            .iter()
            .map(|(c, report, m)| Member {
                rank: c.rank,
                snapshot_id: c.row.id.clone(),
                name: c.row.name.clone(),
                earlier: c.earlier,
                report,
                snap: &m.snap,
                index: &m.index,
            })
            .collect();
        Ok(Arc::new(runs::report(&run_id, &members, buckets as usize)))
    })
    .await?;
    s.runs.put(key, value.clone());
    Ok(value)
}

async fn report(
    State(s): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Json<api::RunReport>> {
    Ok(Json(computed(&s, &id, DEFAULT_BUCKETS).await?.0.clone()))
}

async fn series(
    State(s): State<AppState>,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<api::RunSeriesQuery>,
) -> ApiResult<Json<api::RunSeries>> {
    let buckets = q.buckets.unwrap_or(DEFAULT_BUCKETS);
    if buckets == 0 || buckets > MAX_BUCKETS {
        return Err(ApiError::BadRequest(format!(
            "buckets must be 1 to {MAX_BUCKETS}"
        )));
    }
    Ok(Json(computed(&s, &id, buckets).await?.1.clone()))
}
