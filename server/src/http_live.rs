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
use serde::{Deserialize, Serialize};

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

/// A process on the fleet page: what NVML, its agent and the processes table say of it.
#[derive(Debug, Default, Serialize)]
struct FleetProcess {
    host: String,
    pid: i64,
    name: Option<String>,
    cgroup: Option<String>,
    start_time_ms: Option<i64>,
    first_seen_ms: Option<i64>,
    last_seen_ms: Option<i64>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    has_agent: bool,
    /// NVML's reading, summed over the GPUs the process is on.
    nvml_used_bytes: i64,
    /// The agent's latest figures, summed over the process's devices.
    step: Option<i64>,
    reserved_bytes: Option<i64>,
    allocated_bytes: Option<i64>,
    alloc_retries: Option<i64>,
    ooms: Option<i64>,
    stale: bool,
}

/// The page's entry for (host, pid), made on first mention.
fn fleet_process<'a>(
    all: &'a mut BTreeMap<(String, i64), FleetProcess>,
    host: &str,
    pid: i64,
) -> &'a mut FleetProcess {
    all.entry((host.to_string(), pid))
        .or_insert_with(|| FleetProcess {
            host: host.to_string(),
            pid,
            ..Default::default()
        })
}

impl FleetProcess {
    fn seen(&mut self, time_ms: i64) {
        self.last_seen_ms = Some(self.last_seen_ms.map_or(time_ms, |t| t.max(time_ms)));
    }
}

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
    // Every process we know of: NVML's current ones, the agents heard from recently, and the
    // processes table's names, containers and sightings.
    let mut processes: BTreeMap<(String, i64), FleetProcess> = BTreeMap::new();
    for p in &procs {
        let host = gpus
            .iter()
            .find(|g| g.uuid == p.gpu_uuid)
            .map_or("", |g| g.host.as_str());
        let e = fleet_process(&mut processes, host, p.pid);
        e.name = p.name.clone();
        e.start_time_ms = p.start_time_ms;
        e.nvml_used_bytes += p.used_bytes;
    }
    for a in &agents {
        let e = fleet_process(&mut processes, &a.host, a.pid);
        e.start_time_ms = a.start_time_ms;
        e.has_agent = true;
        e.seen(a.time_ms);
        e.step = a.step;
        for (sum, v) in [
            (&mut e.reserved_bytes, a.reserved_bytes),
            (&mut e.allocated_bytes, a.allocated_bytes),
            (&mut e.alloc_retries, a.alloc_retries.unwrap_or(0)),
            (&mut e.ooms, a.ooms.unwrap_or(0)),
        ] {
            *sum.get_or_insert(0) += v;
        }
    }
    for p in &known {
        let e = fleet_process(&mut processes, &p.host, p.pid);
        e.name = e.name.take().or_else(|| p.name.clone());
        e.cgroup = p.cgroup.clone();
        e.first_seen_ms = Some(p.first_seen_ms);
        e.seen(p.last_seen_ms);
        e.start_time_ms = e.start_time_ms.or(p.start_time_ms);
        e.has_agent |= p.has_agent;
    }
    for p in processes.values_mut() {
        p.stale = now - p.last_seen_ms.unwrap_or(0) > STALE_MS;
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
