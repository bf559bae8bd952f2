//! A snapshot's views: the report, the timeline window, the allocator's state at a position,
//! memory by stack, segment lifetimes, one stack's frames. Each runs the engine on the loaded
//! model (never the pickle) on a blocking thread and converts the result to its `api` type.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::extract::{Path, State};
use axum::routing::get;
use axum::{Json, Router};
use snapshot::Cancel;
use snapshot::analysis::whatif::WhatIfError;
use snapshot::analysis::{self, index::DeviceIndex};

use super::error::{ApiError, ApiResult};
use super::query::ApiQuery;
use crate::convert;
use crate::library::models::{Answers, Loaded, narrowed};
use crate::library::replays;
use crate::state::{AppState, EngineCounters};
use api::routes;

pub fn router() -> Router<AppState> {
    Router::new()
        .route(routes::SNAPSHOT, get(report))
        .route(routes::TIMELINE, get(timeline))
        .route(routes::STATE, get(state_at))
        .route(routes::STACKS, get(stacks))
        .route(routes::SEGMENTS, get(segment_spans))
        .route(routes::FRAMES, get(frames))
        .route(routes::ALLOCATION, get(allocation))
        .route(routes::EVENTS, get(events))
        .route(routes::WHATIF, get(whatif))
        .route(routes::WHATIF_PROGRESS, get(whatif_progress))
        .route(routes::CATEGORIES, get(categories))
        .route(routes::PREDICT, get(predict))
        .route(routes::REPORT, get(shared_report))
}

/// A report to share (`?format=html|md`): the file `memscope report` writes, from the stored
/// report (the figures the dashboard shows) and the views beside it, as a download named for
/// the snapshot.
async fn shared_report(
    State(s): State<AppState>,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<api::ReportQuery>,
) -> ApiResult<axum::response::Response> {
    use axum::response::IntoResponse;
    let format = q.format.unwrap_or_default();
    let info = s
        .library
        .get(&id)
        .await?
        .ok_or_else(|| ApiError::NotFound(id.clone()))?;
    let report = report_of(&s, &id).await?;
    let name = info.name.clone();
    let text = query(&s, &id, move |m, _| {
        let shared = crate::report::gather(&name, &m.snap, &m.index, report, true);
        Ok(crate::report::render(&shared, format))
    })
    .await?;
    Ok((
        [
            (
                axum::http::header::CONTENT_TYPE,
                format.content_type().to_string(),
            ),
            (
                axum::http::header::CONTENT_DISPOSITION,
                super::download::attachment(&format.file_name(&info.name)),
            ),
        ],
        text,
    )
        .into_response())
}

/// Will it fit: a run's peak at sizes never recorded, from library snapshots of one program at
/// small sizes (`recordings=id:8,id:16`).
async fn predict(
    State(s): State<AppState>,
    ApiQuery(q): ApiQuery<api::PredictQuery>,
) -> ApiResult<Json<api::PredictAnswer>> {
    let bad = |m: String| ApiError::BadRequest(m);
    let mut wanted = Vec::new();
    for pair in q.recordings.split(',').filter(|p| !p.is_empty()) {
        let (id, size) = pair
            .rsplit_once(':')
            .ok_or_else(|| bad(format!("{pair:?}: give each recording as ID:SIZE")))?;
        let size: u64 = size.parse().map_err(|_| {
            bad(format!(
                "{pair:?}: the size after ':' must be a whole number"
            ))
        })?;
        wanted.push((model(&s, id).await?, size));
    }
    let sizes = q
        .sizes
        .as_deref()
        .unwrap_or("")
        .split(',')
        .filter(|x| !x.is_empty())
        .map(|x| x.trim().parse::<u64>())
        .collect::<Result<Vec<u64>, _>>()
        .map_err(|_| bad("sizes: whole numbers, comma-separated".into()))?;
    let ask = crate::predict::Ask {
        sizes,
        search: q.search.unwrap_or(false),
        limit_bytes: q.limit_bytes,
        kind: q.limit_kind.unwrap_or_default(),
        gpu: q.gpu,
        alloc_conf: q.alloc_conf.unwrap_or_default(),
    };
    let r = on_engine(&s, move |_| {
        let mut recordings = Vec::new();
        for (m, size) in &wanted {
            let d = m.index.default_device().ok_or_else(|| {
                ApiError::BadRequest("a recording has no trace to learn from".into())
            })?;
            recordings.push(snapshot::analysis::whatif::predict::Recording {
                snap: &m.snap,
                index: &m.index,
                device: d.device,
                size: *size as f64,
            });
        }
        crate::predict::answer(&recordings, &ask).map_err(ApiError::BadRequest)
    })
    .await?;
    Ok(Json(r))
}

/// Memory by category at a position (default: the peak of live bytes): every live allocation
/// labelled, the largest `limit` (default 500) listed, and the bytes per category.
async fn categories(
    State(s): State<AppState>,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<api::CategoriesQuery>,
) -> ApiResult<Json<api::CategoriesAt>> {
    let r = query(&s, &id, move |m, _| {
        let d = device_of(m, q.device)?;
        if d.len == 0 {
            return Err(ApiError::BadRequest(format!(
                "device {} has no trace: categories are read from the allocation history",
                d.device
            )));
        }
        let p = q.position.unwrap_or(d.peak_position).min(d.len);
        let at = analysis::categories::at(&m.snap, &m.index, d, p);
        Ok(convert::categories_at(
            at,
            &m.snap,
            &m.index,
            q.category,
            Some(q.limit.unwrap_or(500) as usize),
        ))
    })
    .await?;
    Ok(Json(r))
}

/// The snapshot `id`, loaded (from memory or its model file); 404 if there is none.
pub(super) async fn model(s: &AppState, id: &str) -> ApiResult<Arc<Loaded>> {
    s.models
        .get(&s.library, id)
        .await?
        .ok_or_else(|| ApiError::NotFound(id.to_string()))
}

/// Runs a query on a loaded snapshot off the async runtime (see [`on_engine`]).
async fn query<T: Send + 'static>(
    s: &AppState,
    id: &str,
    f: impl FnOnce(&Loaded, &Cancel) -> ApiResult<T> + Send + 'static,
) -> ApiResult<T> {
    let model = model(s, id).await?;
    on_engine(s, move |cancel| f(&model, cancel)).await
}

/// Runs engine work on a blocking thread. When the request goes away (its client disconnected,
/// so the server dropped the handler's future), the work's [`Cancel`] fires: analyses that check
/// it stop early and answer [`ApiError::Cancelled`], counted in `/metrics`.
pub(super) async fn on_engine<T: Send + 'static>(
    s: &AppState,
    f: impl FnOnce(&Cancel) -> ApiResult<T> + Send + 'static,
) -> ApiResult<T> {
    /// Fires the work's cancel when the request's future is dropped (or, harmlessly, ends).
    struct CancelOnDrop(Cancel);
    impl Drop for CancelOnDrop {
        fn drop(&mut self) {
            self.0.cancel();
        }
    }
    let cancel = Cancel::new();
    let _fires_when_dropped = CancelOnDrop(cancel.clone());
    /// Counts the work as running until it ends, by returning or by panicking.
    struct Running(Arc<EngineCounters>);
    impl Drop for Running {
        fn drop(&mut self) {
            self.0.running.fetch_sub(1, Ordering::Relaxed);
        }
    }
    s.engine.running.fetch_add(1, Ordering::Relaxed);
    let running = Running(s.engine.clone());
    tokio::task::spawn_blocking(move || {
        let out = f(&cancel);
        if matches!(out, Err(ApiError::Cancelled)) {
            running.0.cancelled_total.fetch_add(1, Ordering::Relaxed);
        }
        drop(running);
        out
    })
    .await?
}

/// The requested device's trace index (default: the device that held the most memory).
pub(super) fn device_of(m: &Loaded, device: Option<i32>) -> ApiResult<&DeviceIndex> {
    convert::device_index(&m.index, device).map_err(ApiError::BadRequest)
}

/// The same object `memscope analyze --json` prints, stored at upload.
async fn report(State(s): State<AppState>, Path(id): Path<String>) -> ApiResult<Json<api::Report>> {
    Ok(Json(report_of(&s, &id).await?))
}

/// A snapshot's report: the stored one, or, where an older version stored it, the report
/// computed again from the snapshot (with its device total) and stored in its place.
pub(crate) async fn report_of(s: &AppState, id: &str) -> ApiResult<api::Report> {
    match s.library.report(id).await? {
        Some(crate::library::Stored::Current(r)) => return Ok(*r),
        Some(crate::library::Stored::Stale) => {}
        None => return Err(ApiError::NotFound(id.to_string())),
    }
    let info = s
        .library
        .get(id)
        .await?
        .ok_or_else(|| ApiError::NotFound(id.to_string()))?;
    let m = s
        .models
        .get(&s.library, id)
        .await?
        .ok_or_else(|| ApiError::NotFound(id.to_string()))?;
    let options = analysis::Options {
        device_total_bytes: info.device_total.map(|t| t.total_bytes),
    };
    let report = tokio::task::spawn_blocking(move || {
        convert::report(analysis::report(&m.snap, &m.index, &options))
    })
    .await
    .map_err(|e| ApiError::Internal(e.into()))?;
    s.library.set_report(id, &report).await?;
    tracing::info!(
        id,
        "the report stored by an older version was computed again"
    );
    Ok(report)
}

/// The timeline of a window, or of the whole trace: that answer is stored once computed
/// (`library::views`) and read back from then on, and a model not in memory is loaded meanwhile.
async fn timeline(
    State(s): State<AppState>,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<api::TimelineQuery>,
) -> ApiResult<axum::response::Response> {
    let json = |body: Vec<u8>| {
        use axum::response::IntoResponse;
        (
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response()
    };
    let stored = match crate::library::views::timeline_key(&q) {
        Some(key) => {
            let info = s
                .library
                .get(&id)
                .await?
                .ok_or_else(|| ApiError::NotFound(id.clone()))?;
            Some((s.library.views_dir(&info.sha256), key))
        }
        None => None,
    };
    if let Some((dir, key)) = &stored
        && let Some(body) = crate::library::views::read(dir, key).await
    {
        if s.models.cached(&id).is_none() {
            // For the page's next question (a zoom, an event's state).
            let (models, library, id) = (s.models.clone(), s.library.clone(), id.clone());
            tokio::spawn(async move {
                if let Err(e) = models.get(&library, &id).await {
                    tracing::warn!(error = %e, id, "loading a model ahead failed");
                }
            });
        }
        return Ok(json(body));
    }
    let answer = timeline_answer(&s, &id, q).await?;
    let body = serde_json::to_vec(&answer).map_err(anyhow::Error::from)?;
    if let Some((_, key)) = stored {
        let (library, copy) = (s.library.clone(), body.clone());
        tokio::spawn(async move {
            if let Err(e) = library.store_view(&id, &key, copy).await {
                tracing::warn!(error = %e, id, "could not store a first view");
            }
        });
    }
    Ok(json(body))
}

async fn timeline_answer(
    s: &AppState,
    id: &str,
    q: api::TimelineQuery,
) -> ApiResult<api::TimelineAnswer> {
    query(s, id, move |m, _| {
        let d = device_of(m, q.device)?;
        convert::timeline_answer(&m.snap, &m.index, d, &q)
            .ok_or_else(|| ApiError::BadRequest("empty trace".into()))
    })
    .await
}

async fn state_at(
    State(s): State<AppState>,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<api::PositionQuery>,
) -> ApiResult<Json<api::AllocatorState>> {
    let r = query(&s, &id, move |m, _| {
        Ok(convert::state_answer(&m.snap, &m.index, &q))
    })
    .await?;
    Ok(Json(r))
}

async fn stacks(
    State(s): State<AppState>,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<api::StacksQuery>,
) -> ApiResult<Json<api::StackReport>> {
    let r = query(&s, &id, move |m, _| {
        convert::stacks_report(&m.snap, &m.index, &q).map_err(ApiError::BadRequest)
    })
    .await?;
    Ok(Json(r))
}

/// The trace entries around a position (the segments view lists them beside the state).
async fn events(
    State(s): State<AppState>,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<api::EventsQuery>,
) -> ApiResult<Json<api::EventsAround>> {
    let r = query(&s, &id, move |m, _| {
        convert::events_answer(&m.snap, &m.index, &q).map_err(ApiError::BadRequest)
    })
    .await?;
    Ok(Json(r))
}

/// Every segment's lifetime on a device (cudaMalloc → cudaFree, in event positions), for the
/// cached-segment timeline.
async fn segment_spans(
    State(s): State<AppState>,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<api::DeviceQuery>,
) -> ApiResult<Json<api::SegmentSpans>> {
    let r = query(&s, &id, move |m, _| {
        convert::segments_answer(&m.snap, &m.index, &q).map_err(ApiError::BadRequest)
    })
    .await?;
    Ok(Json(r))
}

/// The trace replayed through the allocator model under the recorded settings (the check) and
/// the candidates or the one setting asked for, ranked (`snapshot::analysis::whatif`).
async fn whatif(
    State(s): State<AppState>,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<api::WhatIfQuery>,
) -> ApiResult<Json<api::WhatIf>> {
    // Kept with the model once computed; one computed at a time per model, so a request for
    // the answer an upload's background replay is computing waits for it (`Answers`), and
    // puts every core to work on it meanwhile.
    let m = model(&s, &id).await?;
    if let Some(kept) = m.answers.whatif(&q) {
        return Ok(Json((*kept).clone()));
    }
    m.answers.hurry();
    let _computing = m.answers.computing.lock().await;
    if let Some(kept) = m.answers.whatif(&q) {
        return Ok(Json((*kept).clone()));
    }
    let target = Answers::computed_query(&q);
    let model = m.clone();
    let key = Answers::whatif_key(&target);
    let r = on_engine(&s, move |cancel| {
        model.whatif(&target, cancel, None).map_err(|e| match e {
            WhatIfError::Cancelled => ApiError::Cancelled,
            e => ApiError::BadRequest(e.to_string()),
        })
    })
    .await?;
    let r = Arc::new(r);
    m.answers.keep_whatif(key, r.clone());
    Ok(Json(narrowed(&r, &q).unwrap_or_else(|| (*r).clone())))
}

/// The what-if `q` asks for as far as its replays have got, without waiting: what is known
/// before any replay, the check and the runs replayed so far, or the whole answer. Asking
/// starts the replays if they are not under way (for the table, the table with every run's
/// curve, which also answers each candidate's chart) and puts every core to work on them.
async fn whatif_progress(
    State(s): State<AppState>,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<api::WhatIfQuery>,
) -> ApiResult<Json<api::WhatIfProgress>> {
    let m = model(&s, &id).await?;
    let outline = m
        .whatif_outline(&q)
        .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    let all_events = u64::from(outline.settings) * u64::from(outline.events);
    if let Some(kept) = m.answers.whatif(&q) {
        return Ok(Json(api::WhatIfProgress {
            outline,
            done: true,
            events_replayed: all_events,
            events_total: all_events,
            elapsed_ms: 0,
            answer: Some((*kept).clone()),
        }));
    }
    let target = Answers::computed_query(&q);
    let flight = replays::fly(&m, &target, 0, false, &s.models.replays).map_err(
        |replays::NotStarted::Busy| {
            ApiError::Unavailable(format!(
                "{} what-ifs of this snapshot are under way or waiting: ask again when one is done",
                replays::MAX_FLIGHTS
            ))
        },
    )?;
    flight.progress.hurry();
    if let Some(why) = flight.failed() {
        return Err(ApiError::BadRequest(why.to_string()));
    }
    let seen = flight.progress.seen();
    Ok(Json(api::WhatIfProgress {
        outline,
        done: false,
        events_replayed: seen.events_replayed,
        events_total: seen.events_total,
        elapsed_ms: flight.elapsed_ms(),
        answer: seen
            .so_far
            .map(crate::convert::whatif)
            .and_then(|w| narrowed(&w, &q).or(Some(w))),
    }))
}

/// One allocation of a device's trace, by index: its lifetime, site and segment.
async fn allocation(
    State(s): State<AppState>,
    Path((id, n)): Path<(String, u32)>,
    ApiQuery(q): ApiQuery<api::DeviceQuery>,
) -> ApiResult<Json<api::AllocationInfo>> {
    let r = query(&s, &id, move |m, _| {
        convert::allocation_answer(&m.snap, &m.index, n, &q).map_err(ApiError::BadRequest)
    })
    .await?;
    Ok(Json(r))
}

async fn frames(
    State(s): State<AppState>,
    Path((id, stack)): Path<(String, u32)>,
) -> ApiResult<Json<Vec<api::Frame>>> {
    let r = query(&s, &id, move |m, _| {
        convert::frames_answer(&m.snap, &m.index, stack).map_err(ApiError::BadRequest)
    })
    .await?;
    Ok(Json(r))
}
