//! The live pages' resource: the fleet (hosts × GPUs now, processes, alerts), one GPU over a
//! window, one process over a window, and `GET /api/live/stream`, a server-sent event per stored
//! batch so pages update without reload. The answers are shaped in `crate::live`.

use std::convert::Infallible;

use axum::extract::{Path, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::routing::get;
use axum::{Json, Router};

use super::error::{ApiError, ApiResult};
use super::query::ApiQuery;
use crate::live::Window;
use crate::now_ms;
use crate::state::AppState;
use api::routes;

pub fn router() -> Router<AppState> {
    Router::new()
        .route(routes::LIVE_FLEET, get(fleet))
        .route(routes::LIVE_GPU, get(gpu))
        .route(routes::LIVE_PROCESS, get(process))
        .route(routes::LIVE_STREAM, get(stream))
}

/// The window a query asks for: `from_ms`/`to_ms` (default: the last `minutes`, 10, at most a
/// year), `points` buckets (default 600).
fn window(q: &api::WindowQuery) -> Window {
    let to = q.to_ms.unwrap_or_else(now_ms);
    let span = (q.minutes.unwrap_or(10.0).clamp(0.1, 60.0 * 24.0 * 366.0) * 60_000.0) as i64;
    let from = q.from_ms.unwrap_or(to.saturating_sub(span));
    Window::new(from, to, q.points.unwrap_or(600))
}

async fn fleet(State(s): State<AppState>) -> ApiResult<Json<api::Fleet>> {
    let names = s.access.collector_names();
    Ok(Json(
        crate::live::pages::fleet_page(&s.live, now_ms(), names).await?,
    ))
}

async fn gpu(
    State(s): State<AppState>,
    Path(uuid): Path<String>,
    ApiQuery(q): ApiQuery<api::WindowQuery>,
) -> ApiResult<Json<api::GpuPage>> {
    crate::live::pages::gpu_page(&s.live, &uuid, &window(&q))
        .await?
        .map(Json)
        .ok_or_else(|| ApiError::Missing(format!("no GPU {uuid} has reported to this server")))
}

async fn process(
    State(s): State<AppState>,
    Path((host, pid)): Path<(String, i64)>,
    ApiQuery(q): ApiQuery<api::WindowQuery>,
) -> ApiResult<Json<api::ProcessPage>> {
    crate::live::pages::process_page(&s.live, &host, pid, q.start_time_ms, &window(&q))
        .await?
        .map(Json)
        .ok_or_else(|| ApiError::Missing(format!("no process {pid} on {host} has reported")))
}

/// Server-sent events: `ingest` (an `api::LiveNotice`) for every stored batch; ends at shutdown.
/// Each holds one of the streams' slots (`AppState::streams`) while it is open; with none left,
/// 503.
async fn stream(
    State(s): State<AppState>,
) -> ApiResult<Sse<impl futures_util::Stream<Item = Result<Event, Infallible>>>> {
    let slot = s.streams.clone().try_acquire_owned().map_err(|_| {
        ApiError::Unavailable(format!(
            "{} live streams are open, this server's most (--max-live-streams); try again later",
            s.config.live_streams()
        ))
    })?;
    let rx = s.live.subscribe();
    let stop = s.shutdown.subscribe();
    let events =
        futures_util::stream::unfold((rx, stop, slot), |(mut rx, mut stop, slot)| async move {
            loop {
                if *stop.borrow() {
                    return None;
                }
                tokio::select! {
                    got = rx.recv() => match got {
                        Ok(n) => {
                            let ev = Event::default()
                                .event("ingest")
                                .json_data(&n)
                                .unwrap_or_else(|_| Event::default().event("ingest"));
                            return Some((Ok(ev), (rx, stop, slot)));
                        }
                        // A slow page missed some notices: one notice is as good as many.
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                        Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
                    },
                    _ = stop.changed() => return None,
                }
            }
        });
    Ok(Sse::new(events).keep_alive(KeepAlive::default()))
}
