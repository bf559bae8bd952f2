//! The live pages' API: the fleet (hosts × GPUs now, processes, alerts), one GPU over a window
//! (NVML used vs. each process's PyTorch reserved/allocated and the memory outside PyTorch), one
//! process over a window (allocator series, per-step figures, the leak signal, OOMs linking to
//! their snapshots), and `GET /api/live/stream`, a server-sent event per stored batch so pages
//! update without reload. Queries live in `live.rs`; this file shapes them into answers.

use std::collections::BTreeMap;
use std::convert::Infallible;

use axum::Json;
use axum::Router;
use axum::extract::{Path, Query, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::routing::get;
use serde::Deserialize;

use crate::error::{ApiError, ApiResult};
use crate::live::Window;
use crate::now_ms;
use crate::state::AppState;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/live/fleet", get(fleet))
        .route("/api/live/gpus/{uuid}", get(gpu))
        .route("/api/live/processes/{host}/{pid}", get(process))
        .route("/api/live/stream", get(stream))
}

/// A window: `from_ms`/`to_ms` (default: the last `minutes`, 10), `points` buckets (default 600).
#[derive(Debug, Deserialize)]
struct WindowQuery {
    from_ms: Option<i64>,
    to_ms: Option<i64>,
    minutes: Option<f64>,
    points: Option<i64>,
    start_time_ms: Option<i64>,
}

impl WindowQuery {
    fn window(&self) -> Window {
        let to = self.to_ms.unwrap_or_else(now_ms);
        let span = (self.minutes.unwrap_or(10.0).clamp(0.1, 60.0 * 24.0 * 366.0) * 60_000.0) as i64;
        let from = self.from_ms.unwrap_or(to - span);
        Window::new(from, to, self.points.unwrap_or(600))
    }
}

/// Processes and GPUs not heard from for this long are not on the fleet page.
const FLEET_RECENT_MS: i64 = 3_600_000;
/// Not heard from for this long: shown as stale, and not counted in what a GPU holds now.
const STALE_MS: i64 = 60_000;

async fn fleet(State(s): State<AppState>) -> ApiResult<Json<serde_json::Value>> {
    let now = now_ms();
    let lib = &s.library;
    let gpus = lib.fleet_gpus().await?;
    let procs = lib.current_gpu_processes().await?;
    let agents = lib.agents_since(now - FLEET_RECENT_MS).await?;
    let events = lib.events_since(now - 24 * 3_600_000, 100).await?;
    let known = lib.processes_since(now - FLEET_RECENT_MS).await?;
    let host_rows = lib.hosts().await?;

    let mut hosts: BTreeMap<String, Vec<serde_json::Value>> = BTreeMap::new();
    for g in &gpus {
        let on_gpu: Vec<_> = procs.iter().filter(|p| p.gpu_uuid == g.uuid).collect();
        // Only agents heard from lately count towards the GPU's figures: a finished job's last
        // sample is history, not memory held now.
        let mine: Vec<_> = agents
            .iter()
            .filter(|a| {
                a.gpu_uuid.as_deref() == Some(g.uuid.as_str()) && now - a.time_ms <= STALE_MS
            })
            .collect();
        let stale = now - g.last_seen_ms > STALE_MS;
        hosts
            .entry(g.host.clone())
            .or_default()
            .push(serde_json::json!({
                "gpu": g,
                "stale": stale,
                "processes": on_gpu.len(),
                "top_process": on_gpu.first(),
                "pytorch_reserved_bytes": mine.iter().map(|a| a.reserved_bytes).sum::<i64>(),
                "pytorch_allocated_bytes": mine.iter().map(|a| a.allocated_bytes).sum::<i64>(),
                "alloc_retries": mine.iter().filter_map(|a| a.alloc_retries).sum::<i64>(),
                "ooms": mine.iter().filter_map(|a| a.ooms).sum::<i64>(),
            }));
    }
    // Hosts without GPU readings (no NVML there; agents relayed) are on the page too.
    for h in &host_rows {
        hosts.entry(h.host.clone()).or_default();
    }
    // Alerts: OOMs and allocation retries the agents reported, newest first.
    let alerts: Vec<_> = events
        .iter()
        .filter(|e| matches!(e.kind.as_str(), "oom" | "alloc_retry"))
        .collect();
    // Every process we know of: NVML's current ones and the agents heard from recently.
    let mut processes: BTreeMap<(String, i64), serde_json::Value> = BTreeMap::new();
    for p in &procs {
        let host = gpus
            .iter()
            .find(|g| g.uuid == p.gpu_uuid)
            .map(|g| g.host.clone())
            .unwrap_or_default();
        let e = processes.entry((host.clone(), p.pid)).or_insert_with(
            || serde_json::json!({"host": host, "pid": p.pid, "nvml_used_bytes": 0}),
        );
        e["name"] = serde_json::json!(p.name);
        e["start_time_ms"] = serde_json::json!(p.start_time_ms);
        e["nvml_used_bytes"] =
            serde_json::json!(e["nvml_used_bytes"].as_i64().unwrap_or(0) + p.used_bytes);
    }
    for a in &agents {
        let e = processes.entry((a.host.clone(), a.pid)).or_insert_with(
            || serde_json::json!({"host": a.host, "pid": a.pid, "nvml_used_bytes": 0}),
        );
        let add = |e: &mut serde_json::Value, k: &str, v: i64| {
            e[k] = serde_json::json!(e[k].as_i64().unwrap_or(0) + v);
        };
        e["start_time_ms"] = serde_json::json!(a.start_time_ms);
        e["has_agent"] = serde_json::json!(true);
        e["last_seen_ms"] =
            serde_json::json!(a.time_ms.max(e["last_seen_ms"].as_i64().unwrap_or(0)));
        e["step"] = serde_json::json!(a.step);
        add(e, "reserved_bytes", a.reserved_bytes);
        add(e, "allocated_bytes", a.allocated_bytes);
        add(e, "alloc_retries", a.alloc_retries.unwrap_or(0));
        add(e, "ooms", a.ooms.unwrap_or(0));
    }
    // Names, containers and first/last sightings from the processes table.
    for p in &known {
        let e = processes.entry((p.host.clone(), p.pid)).or_insert_with(
            || serde_json::json!({"host": p.host, "pid": p.pid, "nvml_used_bytes": 0}),
        );
        if e["name"].is_null() {
            e["name"] = serde_json::json!(p.name);
        }
        e["cgroup"] = serde_json::json!(p.cgroup);
        e["first_seen_ms"] = serde_json::json!(p.first_seen_ms);
        e["last_seen_ms"] =
            serde_json::json!(p.last_seen_ms.max(e["last_seen_ms"].as_i64().unwrap_or(0)));
        if e["start_time_ms"].is_null() {
            e["start_time_ms"] = serde_json::json!(p.start_time_ms);
        }
        if p.has_agent {
            e["has_agent"] = serde_json::json!(true);
        }
    }
    for p in processes.values_mut() {
        let seen = p["last_seen_ms"].as_i64().unwrap_or(0);
        p["stale"] = serde_json::json!(now - seen > STALE_MS);
    }
    let host_info = |h: &str| host_rows.iter().find(|r| r.host == h);
    Ok(Json(serde_json::json!({
        "now_ms": now,
        "hosts": hosts.into_iter().map(|(host, gpus)| {
            let info = host_info(&host);
            serde_json::json!({
                "host": host,
                "gpus": gpus,
                "collector": info.map(|i| i.collector.clone()),
                "last_seen_ms": info.map(|i| i.last_seen_ms),
            })
        }).collect::<Vec<_>>(),
        "processes": processes.into_values().collect::<Vec<_>>(),
        "alerts": alerts,
    })))
}

async fn gpu(
    State(s): State<AppState>,
    Path(uuid): Path<String>,
    Query(q): Query<WindowQuery>,
) -> ApiResult<Json<serde_json::Value>> {
    s.library
        .gpu_page(&uuid, &q.window())
        .await?
        .map(Json)
        .ok_or_else(|| ApiError::Missing(format!("no GPU {uuid} has reported to this server")))
}

async fn process(
    State(s): State<AppState>,
    Path((host, pid)): Path<(String, i64)>,
    Query(q): Query<WindowQuery>,
) -> ApiResult<Json<serde_json::Value>> {
    s.library
        .process_page(&host, pid, q.start_time_ms, &q.window())
        .await?
        .map(Json)
        .ok_or_else(|| ApiError::Missing(format!("no process {pid} on {host} has reported")))
}

/// Server-sent events: `ingest` (a `LiveNotice`) for every stored batch; ends at shutdown.
async fn stream(
    State(s): State<AppState>,
) -> Sse<impl futures_util::Stream<Item = Result<Event, Infallible>>> {
    let rx = s.live.subscribe();
    let stop = s.shutdown.subscribe();
    let events = futures_util::stream::unfold((rx, stop), |(mut rx, mut stop)| async move {
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
                        return Some((Ok(ev), (rx, stop)));
                    }
                    // A slow page missed some notices: one notice is as good as many.
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
                },
                _ = stop.changed() => return None,
            }
        }
    });
    Sse::new(events).keep_alive(KeepAlive::default())
}
