//! The JSON API under `/api` (documented in the README). Handlers are thin: they parse the
//! request, call the library or the engine's analyses (on a blocking thread: a query over a
//! million events should not stall the runtime), and answer JSON; errors are `ApiError`s.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use snapshot::analysis::{self, Axis};
use snapshot::frames::FrameView;
use snapshot::model::{Action, StackId};

use crate::error::{ApiError, ApiResult};
use crate::library::Tag;
use crate::models::Loaded;
use crate::state::AppState;

pub fn app(state: AppState) -> Router {
    Router::new()
        .route("/api/health", get(health))
        .route("/api/snapshots", get(list).post(upload))
        .route(
            "/api/snapshots/{id}",
            get(report).patch(update).delete(remove),
        )
        .route("/api/snapshots/{id}/info", get(info))
        .route("/api/snapshots/{id}/original", get(original))
        .route("/api/snapshots/{id}/timeline", get(timeline))
        .route("/api/snapshots/{id}/state", get(state_at))
        .route("/api/snapshots/{id}/stacks", get(stacks))
        .route("/api/snapshots/{id}/segments", get(segment_spans))
        .route("/api/uploads/{token}", get(upload_progress))
        .route("/api/ingest", axum::routing::post(ingest_batch))
        .route("/metrics", get(metrics))
        .route("/api/snapshots/{id}/frames/{stack}", get(frames))
        .route("/api/diff/{a}/{b}", get(diff))
        .merge(crate::http_live::router())
        .merge(crate::assets::router())
        .fallback(not_found)
        // Uploads are streamed to disk and bounded by --max-upload-bytes instead.
        .layer(DefaultBodyLimit::disable())
        .with_state(state)
}

async fn not_found() -> ApiError {
    ApiError::BadRequest("no such endpoint; see the README's API section".into())
}

async fn health() -> Json<serde_json::Value> {
    Json(serde_json::json!({ "ok": true, "version": env!("CARGO_PKG_VERSION") }))
}

#[derive(Debug, Deserialize)]
struct ListQuery {
    q: Option<String>,
}

async fn list(State(s): State<AppState>, Query(q): Query<ListQuery>) -> ApiResult<Response> {
    let items = s
        .library
        .list(q.q.as_deref().filter(|q| !q.is_empty()))
        .await?;
    Ok(Json(items).into_response())
}

#[derive(Debug, Deserialize)]
struct UploadQuery {
    /// Display name (else the `X-Filename` header, else "snapshot").
    name: Option<String>,
    /// Comma-separated tags, `key=value` or free text: `job=bert,rank=0,nightly`.
    tags: Option<String>,
    /// A client-chosen token; `GET /api/uploads/{token}` reports progress while this runs.
    token: Option<String>,
}

fn parse_tags(s: &str) -> Vec<Tag> {
    s.split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|t| match t.split_once('=') {
            Some((k, v)) => Tag {
                key: k.trim().to_string(),
                value: v.trim().to_string(),
            },
            None => Tag {
                key: String::new(),
                value: t.to_string(),
            },
        })
        .collect()
}

async fn upload(
    State(s): State<AppState>,
    Query(q): Query<UploadQuery>,
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
    let tags = q.tags.as_deref().map(parse_tags).unwrap_or_default();
    let total_bytes = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse().ok())
        .unwrap_or(0);
    let progress = Arc::new(crate::state::UploadProgress {
        total_bytes,
        ..Default::default()
    });
    let token = q.token.filter(|t| !t.is_empty() && t.len() <= 64);
    if let Some(t) = &token {
        s.uploads
            .lock()
            .expect("uploads lock")
            .insert(t.clone(), progress.clone());
    }
    let result = crate::ingest::ingest(&s, name, tags, body, progress).await;
    if let Some(t) = &token {
        s.uploads.lock().expect("uploads lock").remove(t);
    }
    let up = result?;
    let report = s.library.report_json(&up.id).await?.unwrap_or_default();
    let summary: serde_json::Value = serde_json::from_str(&report).unwrap_or_default();
    let status = if up.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    let mut body = serde_json::to_value(&up).map_err(|e| ApiError::Internal(e.into()))?;
    body["summary"] = summary_subset(&summary);
    Ok((status, Json(body)).into_response())
}

/// The report's headline figures (what the library page and an upload answer show).
fn summary_subset(report: &serde_json::Value) -> serde_json::Value {
    let mut out = serde_json::Map::new();
    for k in [
        "segments",
        "blocks",
        "reserved_bytes",
        "allocated_bytes",
        "requested_bytes",
        "block_states",
        "devices",
        "warnings",
    ] {
        if let Some(v) = report.get(k) {
            out.insert(k.to_string(), v.clone());
        }
    }
    out.insert(
        "leak_suspects".into(),
        report["leak_suspects"]
            .as_array()
            .map_or(0, |a| a.len())
            .into(),
    );
    out.insert(
        "ooms".into(),
        report["ooms"].as_array().map_or(0, |a| a.len()).into(),
    );
    serde_json::Value::Object(out)
}

/// Prometheus text exposition: one `memscope_` prefix, bytes and `_total` counters, no pid labels.
async fn metrics(State(s): State<AppState>) -> ApiResult<Response> {
    use std::fmt::Write;
    fn esc(v: &str) -> String {
        v.replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\n', "\\n")
    }
    let lib = &s.library;
    let mut o = String::new();
    let gpus = lib.latest_gpu_readings().await?;
    type GpuField = fn(&crate::live::GpuLatest) -> Option<i64>;
    let gauges: [(&str, &str, GpuField); 3] = [
        (
            "memscope_gpu_memory_used_bytes",
            "GPU memory in use (NVML), latest reading",
            |g| g.used_bytes,
        ),
        (
            "memscope_gpu_memory_total_bytes",
            "GPU memory in total (NVML)",
            |g| g.total_bytes,
        ),
        (
            "memscope_gpu_memory_reserved_bytes",
            "GPU memory reserved by the firmware (NVML v2)",
            |g| g.reserved_bytes,
        ),
    ];
    for (name, help, get) in gauges {
        let _ = writeln!(o, "# HELP {name} {help}.\n# TYPE {name} gauge");
        for g in &gpus {
            if let Some(v) = get(g) {
                let _ = writeln!(
                    o,
                    "{name}{{host=\"{}\",gpu=\"{}\",index=\"{}\"}} {v}",
                    esc(&g.host),
                    esc(&g.uuid),
                    g.idx
                );
            }
        }
    }
    let alloc = lib.latest_allocator_by_device().await?;
    type DeviceField = fn(&crate::live::DeviceAllocator) -> i64;
    let series: [(&str, &str, &str, DeviceField); 4] = [
        (
            "memscope_pytorch_allocated_bytes",
            "gauge",
            "Memory PyTorch's allocator has handed out, all processes",
            |a| a.allocated_bytes,
        ),
        (
            "memscope_pytorch_reserved_bytes",
            "gauge",
            "Memory PyTorch's allocator holds from CUDA, all processes",
            |a| a.reserved_bytes,
        ),
        (
            "memscope_pytorch_alloc_retries_total",
            "counter",
            "cudaMalloc retries after flushing the cache",
            |a| a.alloc_retries,
        ),
        (
            "memscope_pytorch_ooms_total",
            "counter",
            "Out-of-memory errors",
            |a| a.ooms,
        ),
    ];
    for (name, kind, help, get) in series {
        let _ = writeln!(o, "# HELP {name} {help}.\n# TYPE {name} {kind}");
        for a in &alloc {
            let _ = writeln!(
                o,
                "{name}{{host=\"{}\",device=\"{}\"}} {}",
                esc(&a.host),
                a.device,
                get(a)
            );
        }
    }
    let (batches, rows, dropped, snapshots, events) = lib.counters().await?;
    let _ = writeln!(
        o,
        "# HELP memscope_ingest_batches_total Collector batches stored.\n# TYPE memscope_ingest_batches_total counter\nmemscope_ingest_batches_total {batches}"
    );
    let _ = writeln!(
        o,
        "# HELP memscope_ingest_samples_total Samples stored from collectors.\n# TYPE memscope_ingest_samples_total counter\nmemscope_ingest_samples_total {rows}"
    );
    let _ = writeln!(
        o,
        "# HELP memscope_ingest_dropped_samples_total Samples collectors dropped (spool full) and reported.\n# TYPE memscope_ingest_dropped_samples_total counter\nmemscope_ingest_dropped_samples_total {dropped}"
    );
    let _ = writeln!(
        o,
        "# HELP memscope_snapshots Snapshots in the library.\n# TYPE memscope_snapshots gauge\nmemscope_snapshots {snapshots}"
    );
    let _ = writeln!(
        o,
        "# HELP memscope_events_total Events received, by kind.\n# TYPE memscope_events_total counter"
    );
    for (kind, n) in events {
        let _ = writeln!(o, "memscope_events_total{{kind=\"{}\"}} {n}", esc(&kind));
    }
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], o).into_response())
}

/// Largest ingest batch accepted (decompressed).
const MAX_BATCH_BYTES: usize = 64 << 20;

/// `POST /api/ingest`: one collector batch (`wire::Batch`, JSON, optionally gzip). Authenticated
/// by the collector's bearer token; idempotent by `(collector, seq)`.
async fn ingest_batch(
    State(s): State<AppState>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> ApiResult<Response> {
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .ok_or_else(|| {
            ApiError::Unauthorized("missing `Authorization: Bearer <collector token>`".into())
        })?;
    let collector = s
        .config
        .collector_for_token(token.trim())
        .ok_or_else(|| {
            ApiError::Unauthorized(
                "unknown collector token; add it with --collector-token NAME=TOKEN".into(),
            )
        })?
        .to_string();
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
    let ack = s.library.ingest_batch(&batch).await?;
    if !ack.duplicate {
        // Nobody listening is fine.
        let _ = s.live.send(crate::state::LiveNotice {
            host: batch.host.clone(),
            time_ms: crate::now_ms(),
            rows: ack.stored,
            events: batch.events.len(),
        });
    }
    Ok(Json(ack).into_response())
}

/// Progress of an upload in flight (404 once it has finished or failed).
async fn upload_progress(
    State(s): State<AppState>,
    Path(token): Path<String>,
) -> ApiResult<Response> {
    use std::sync::atomic::Ordering::Relaxed;
    let p = s
        .uploads
        .lock()
        .expect("uploads lock")
        .get(&token)
        .cloned()
        .ok_or(ApiError::NotFound(token))?;
    Ok(Json(serde_json::json!({
        "received_bytes": p.received_bytes.load(Relaxed),
        "parsed_bytes": p.parsed_bytes.load(Relaxed),
        "total_bytes": p.total_bytes,
    }))
    .into_response())
}

/// The same object `memscope analyze --json` prints, stored at upload.
async fn report(State(s): State<AppState>, Path(id): Path<String>) -> ApiResult<Response> {
    let json = s
        .library
        .report_json(&id)
        .await?
        .ok_or(ApiError::NotFound(id))?;
    Ok(([(header::CONTENT_TYPE, "application/json")], json).into_response())
}

async fn info(State(s): State<AppState>, Path(id): Path<String>) -> ApiResult<Response> {
    let info = s.library.get(&id).await?.ok_or(ApiError::NotFound(id))?;
    Ok(Json(info).into_response())
}

#[derive(Debug, Deserialize)]
struct Update {
    name: Option<String>,
    tags: Option<Vec<Tag>>,
}

async fn update(
    State(s): State<AppState>,
    Path(id): Path<String>,
    Json(u): Json<Update>,
) -> ApiResult<Response> {
    if let Some(n) = &u.name
        && n.trim().is_empty()
    {
        return Err(ApiError::BadRequest("name must not be empty".into()));
    }
    if !s
        .library
        .update(&id, u.name.as_deref(), u.tags.as_deref())
        .await?
    {
        return Err(ApiError::NotFound(id));
    }
    let info = s.library.get(&id).await?.ok_or(ApiError::NotFound(id))?;
    Ok(Json(info).into_response())
}

async fn remove(State(s): State<AppState>, Path(id): Path<String>) -> ApiResult<Response> {
    if !s.library.delete(&id).await? {
        return Err(ApiError::NotFound(id));
    }
    s.models.remove(&id);
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn original(State(s): State<AppState>, Path(id): Path<String>) -> ApiResult<Response> {
    let info = s
        .library
        .get(&id)
        .await?
        .ok_or_else(|| ApiError::NotFound(id.clone()))?;
    let file = tokio::fs::File::open(s.library.original_path(&info.sha256)).await?;
    let stream = tokio_util_stream(file);
    Ok((
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_string()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{}\"", info.name.replace('"', "")),
            ),
        ],
        Body::from_stream(stream),
    )
        .into_response())
}

/// Streams a file in 256 KiB chunks.
fn tokio_util_stream(
    file: tokio::fs::File,
) -> impl futures_util::Stream<Item = std::io::Result<Vec<u8>>> {
    futures_util::stream::unfold(file, |mut f| async move {
        use tokio::io::AsyncReadExt;
        let mut buf = vec![0u8; 256 << 10];
        match f.read(&mut buf).await {
            Ok(0) => None,
            Ok(n) => {
                buf.truncate(n);
                Some((Ok(buf), f))
            }
            Err(e) => Some((Err(e), f)),
        }
    })
}

/// Runs a query on a loaded snapshot off the async runtime.
async fn query<T: Send + 'static>(
    s: &AppState,
    id: &str,
    f: impl FnOnce(&Loaded) -> ApiResult<T> + Send + 'static,
) -> ApiResult<T> {
    let model = s.models.get(&s.library, id).await?;
    tokio::task::spawn_blocking(move || f(&model))
        .await
        .map_err(|e| ApiError::Internal(e.into()))?
}

/// The requested device's trace index (default: the first device with a trace).
fn device_of(
    m: &Loaded,
    device: Option<i32>,
) -> ApiResult<&snapshot::analysis::index::DeviceIndex> {
    match device {
        Some(d) => m
            .index
            .device(d)
            .ok_or_else(|| ApiError::BadRequest(format!("snapshot has no trace for device {d}"))),
        None => m
            .index
            .traced()
            .next()
            .or(m.index.devices.first())
            .ok_or_else(|| {
                ApiError::BadRequest(
                    "snapshot has no device traces (history was not recorded)".into(),
                )
            }),
    }
}

#[derive(Debug, Deserialize)]
struct TimelineQuery {
    device: Option<i32>,
    /// `time` (µs since the epoch) or `event` (index); default: time when recorded.
    axis: Option<Axis>,
    from: Option<f64>,
    to: Option<f64>,
    /// Buckets to reduce the window to (about the canvas width in pixels).
    buckets: Option<usize>,
    /// How many of the largest allocations overlapping the window to include.
    allocations: Option<usize>,
}

#[derive(Debug, Serialize)]
struct Marker {
    position: u32,
    time_us: i64,
    bytes: u64,
}

/// An annotated range (`external_annotations` START/END pairs of one name). Ranges of the same
/// name closer than one bucket are merged (`count` says how many), so a window never carries more
/// ranges per name than it has buckets: a 1M-entry trace has thousands of `Optimizer.step`s.
#[derive(Debug, Serialize, PartialEq)]
struct AnnotationView {
    name: String,
    start_us: i64,
    end_us: i64,
    count: u32,
}

/// Pairs START/END marks by name (innermost first) within `[t0, t1]` and merges ranges of one
/// name whose gap is below `merge_us`. A range open at either edge is cut at the window.
fn annotation_ranges(
    marks: impl Iterator<Item = (String, bool, i64)>,
    t0: i64,
    t1: i64,
    merge_us: i64,
) -> Vec<AnnotationView> {
    let mut open: Vec<(String, i64)> = Vec::new();
    let mut ranges: Vec<AnnotationView> = Vec::new();
    let mut push = |name: String, start_us: i64, end_us: i64| {
        if let Some(last) = ranges
            .iter_mut()
            .rev()
            .find(|r| r.name == name)
            .filter(|r| start_us - r.end_us < merge_us)
        {
            last.end_us = last.end_us.max(end_us);
            last.count += 1;
        } else {
            ranges.push(AnnotationView {
                name,
                start_us,
                end_us,
                count: 1,
            });
        }
    };
    for (name, start, time_us) in marks {
        if start {
            open.push((name, time_us));
        } else if let Some(i) = open.iter().rposition(|(n, _)| *n == name) {
            let (name, from) = open.remove(i);
            push(name, from.max(t0), time_us.min(t1));
        } else {
            push(name, t0, time_us.min(t1)); // began before the window
        }
    }
    for (name, from) in open {
        push(name, from.max(t0), t1); // still open at the window's end
    }
    ranges
}

#[derive(Debug, Serialize)]
struct TimelineResponse {
    device: i32,
    axis: Axis,
    timeline: analysis::Timeline,
    allocations: Vec<analysis::timeline::AllocationView>,
    /// Frames of every stack the allocations refer to, by stack id.
    stacks: BTreeMap<u32, Vec<FrameView>>,
    /// The frame each of those stacks is labelled by (first user frame, …).
    sites: BTreeMap<u32, Option<FrameView>>,
    annotations: Vec<AnnotationView>,
    ooms: Vec<Marker>,
    first_time_us: i64,
    last_time_us: i64,
}

async fn timeline(
    State(s): State<AppState>,
    Path(id): Path<String>,
    Query(q): Query<TimelineQuery>,
) -> ApiResult<Response> {
    let r = query(&s, &id, move |m| {
        let d = device_of(m, q.device)?;
        let device = d.device;
        let t = &m.snap.trace;
        let has_time = d.len > 0 && t.time_us[d.row(0)] != 0;
        let axis = q
            .axis
            .unwrap_or(if has_time { Axis::Time } else { Axis::Event });
        let (first, last) = match (q.from, q.to) {
            (Some(a), Some(b)) => analysis::timeline::window_positions(&m.snap, d, axis, a, b),
            _ => (0, d.len),
        };
        let tl = analysis::timeline(
            &m.snap,
            &m.index,
            device,
            first,
            last,
            q.buckets.unwrap_or(1000).min(10_000),
        )
        .ok_or_else(|| ApiError::BadRequest("empty trace".into()))?;
        let allocations = analysis::allocations_in_window(
            &m.snap,
            &m.index,
            device,
            first,
            last,
            q.allocations.unwrap_or(2000).min(20_000),
        );
        let (mut stacks, mut sites) = (BTreeMap::new(), BTreeMap::new());
        for a in &allocations {
            stacks
                .entry(a.stack.0)
                .or_insert_with(|| m.index.frames.display(&m.snap, a.stack));
            sites.entry(a.stack.0).or_insert_with(|| {
                m.index
                    .frames
                    .label(&m.snap, a.stack)
                    .map(|f| snapshot::frames::view(&m.snap, f))
            });
        }
        let time = |p: u32| analysis::timeline::time_at(&m.snap, d, p);
        let (t0, t1) = (time(first), time(last));
        let buckets = q.buckets.unwrap_or(1000).clamp(1, 10_000) as i64;
        let annotations = if has_time {
            annotation_ranges(
                m.snap
                    .annotations
                    .iter()
                    .filter(|a| a.device == device && a.time_us >= t0 && a.time_us <= t1)
                    .map(|a| (m.snap.str(a.name).to_string(), a.start, a.time_us)),
                t0,
                t1,
                ((t1 - t0) / buckets).max(1),
            )
        } else {
            Vec::new() // annotations carry times only: nothing to place on the event axis
        };
        let ooms = (first..last.min(d.len))
            .filter(|&e| t.action[d.row(e)] == Action::Oom)
            .map(|e| Marker {
                position: e,
                time_us: t.time_us[d.row(e)],
                bytes: t.size[d.row(e)],
            })
            .collect();
        Ok(TimelineResponse {
            device,
            axis,
            timeline: tl,
            allocations,
            stacks,
            sites,
            annotations,
            ooms,
            first_time_us: time(0),
            last_time_us: time(d.len),
        })
    })
    .await?;
    Ok(Json(r).into_response())
}

#[derive(Debug, Deserialize)]
struct PositionQuery {
    device: Option<i32>,
    /// Position in the device's trace (after that many events); default: the end (state) or
    /// the peak (stacks).
    position: Option<u32>,
    /// Stacks only: `python` builds the flame tree from Python frames only.
    frames: Option<String>,
}

async fn state_at(
    State(s): State<AppState>,
    Path(id): Path<String>,
    Query(q): Query<PositionQuery>,
) -> ApiResult<Response> {
    let r = query(&s, &id, move |m| {
        let device = match device_of(m, q.device) {
            Ok(d) => d.device,
            // Segments-only snapshots still have a state: the snapshot's own.
            Err(_) => m.snap.segments.first().map_or(0, |s| s.device),
        };
        let len = m.index.device(device).map_or(0, |d| d.len);
        Ok(analysis::state_at(
            &m.snap,
            &m.index,
            device,
            q.position.unwrap_or(len).min(len),
        ))
    })
    .await?;
    Ok(Json(r).into_response())
}

async fn stacks(
    State(s): State<AppState>,
    Path(id): Path<String>,
    Query(q): Query<PositionQuery>,
) -> ApiResult<Response> {
    let r = query(&s, &id, move |m| {
        let device = device_of(m, q.device)?.device;
        let frames = match q.frames.as_deref() {
            None | Some("all") => analysis::FlameFrames::All,
            Some("python") => analysis::FlameFrames::PythonOnly,
            Some(other) => {
                return Err(ApiError::BadRequest(format!(
                    "frames={other}: use all or python"
                )));
            }
        };
        analysis::stacks_at_with(&m.snap, &m.index, device, q.position, 200, frames)
            .ok_or_else(|| ApiError::BadRequest("no trace".into()))
    })
    .await?;
    Ok(Json(r).into_response())
}

fn diff_side(m: &Loaded, device: Option<i32>) -> ApiResult<analysis::Side<'_>> {
    Ok(analysis::Side {
        snap: &m.snap,
        index: &m.index,
        device: device_of(m, device)?.device,
    })
}

#[derive(Debug, Deserialize)]
struct DiffQuery {
    device_a: Option<i32>,
    device_b: Option<i32>,
}

/// Snapshot `b` against snapshot `a`: headline figures, memory by call site at each peak and leak
/// suspects, matched by call site (`snapshot::analysis::diff`).
async fn diff(
    State(s): State<AppState>,
    Path((a, b)): Path<(String, String)>,
    Query(q): Query<DiffQuery>,
) -> ApiResult<Response> {
    let mut sides = Vec::new();
    for id in [&a, &b] {
        let info = s
            .library
            .get(id)
            .await?
            .ok_or_else(|| ApiError::NotFound(id.to_string()))?;
        sides.push((info, s.models.get(&s.library, id).await?));
    }
    let (info_b, model_b) = sides.pop().expect("two sides");
    let (info_a, model_a) = sides.pop().expect("two sides");
    let r = tokio::task::spawn_blocking(move || -> ApiResult<serde_json::Value> {
        let d = analysis::compare(
            diff_side(&model_a, q.device_a)?,
            diff_side(&model_b, q.device_b)?,
            200,
        );
        let mut v = serde_json::to_value(d).map_err(|e| ApiError::Internal(e.into()))?;
        v["a"] = serde_json::json!({ "id": info_a.id, "name": info_a.name });
        v["b"] = serde_json::json!({ "id": info_b.id, "name": info_b.name });
        Ok(v)
    })
    .await
    .map_err(|e| ApiError::Internal(e.into()))??;
    Ok(Json(r).into_response())
}

#[derive(Debug, Deserialize)]
struct DeviceQuery {
    device: Option<i32>,
}

/// Every segment's lifetime on a device (cudaMalloc → cudaFree, in event positions), for the
/// cached-segment timeline.
async fn segment_spans(
    State(s): State<AppState>,
    Path(id): Path<String>,
    Query(q): Query<DeviceQuery>,
) -> ApiResult<Response> {
    let r = query(&s, &id, move |m| {
        let d = device_of(m, q.device)?;
        Ok(serde_json::json!({ "device": d.device, "events": d.len, "segments": d.segments }))
    })
    .await?;
    Ok(Json(r).into_response())
}

async fn frames(
    State(s): State<AppState>,
    Path((id, stack)): Path<(String, u32)>,
) -> ApiResult<Response> {
    let r = query(&s, &id, move |m| {
        if stack as usize >= m.snap.stacks.len() {
            return Err(ApiError::BadRequest(format!("no stack {stack}")));
        }
        Ok(m.index.frames.display(&m.snap, StackId(stack)))
    })
    .await?;
    Ok(Json(r).into_response())
}

#[cfg(test)]
mod annotation_tests {
    use super::*;

    fn marks(v: &[(&str, bool, i64)]) -> impl Iterator<Item = (String, bool, i64)> {
        v.iter()
            .map(|(n, s, t)| (n.to_string(), *s, *t))
            .collect::<Vec<_>>()
            .into_iter()
    }

    #[test]
    fn pairs_nest_merge_below_a_bucket_and_cut_at_the_window() {
        let m = marks(&[
            ("step", true, 10),
            ("fwd", true, 11),
            ("fwd", false, 20),
            ("step", false, 30),
            ("step", true, 32),
            ("step", false, 40), // 2 µs after the last: merged
            ("step", true, 100),
            ("step", false, 110), // far: its own range
            ("bwd", false, 5),
            ("opt", true, 150), // began before / still open
        ]);
        let r = annotation_ranges(m, 0, 200, 5);
        let got: Vec<(&str, i64, i64, u32)> = r
            .iter()
            .map(|a| (a.name.as_str(), a.start_us, a.end_us, a.count))
            .collect();
        assert_eq!(
            got,
            vec![
                ("fwd", 11, 20, 1),
                ("step", 10, 40, 2),
                ("step", 100, 110, 1),
                ("bwd", 0, 5, 1),
                ("opt", 150, 200, 1)
            ]
        );
    }
}
