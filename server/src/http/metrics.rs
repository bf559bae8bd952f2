//! `GET /metrics`: Prometheus text exposition of the live store's latest figures and counters.
//! One `memscope_` prefix, bytes and `_total` counters, no per-process labels (unbounded
//! cardinality).

use std::sync::atomic::Ordering;

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::error::ApiResult;
use crate::state::AppState;
use api::routes;

pub fn router() -> Router<AppState> {
    Router::new().route(routes::METRICS, get(metrics))
}

/// Prometheus text exposition: one `memscope_` prefix, bytes and `_total` counters, no pid labels.
async fn metrics(State(s): State<AppState>) -> ApiResult<Response> {
    use std::fmt::Write;
    fn esc(v: &str) -> String {
        v.replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\n', "\\n")
    }
    let live = &s.live;
    let mut o = String::new();
    let gpus = live.latest_gpu_readings().await?;
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
    let alloc = live.latest_allocator_by_device().await?;
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
    hosts_and_growth(&s, &mut o).await?;
    if s.config.webhook_url.is_some() {
        let c = live.outbox_counts().await?;
        let _ = writeln!(
            o,
            "# HELP memscope_webhook_pending Webhook messages (live OOMs, growing processes) not yet taken by the receiver.\n# TYPE memscope_webhook_pending gauge\nmemscope_webhook_pending {}\n# HELP memscope_webhook_delivered_total Webhook messages the receiver took.\n# TYPE memscope_webhook_delivered_total counter\nmemscope_webhook_delivered_total {}\n# HELP memscope_webhook_failed_attempts_total Webhook sends that failed (each retried).\n# TYPE memscope_webhook_failed_attempts_total counter\nmemscope_webhook_failed_attempts_total {}",
            c.pending, c.delivered, c.failed_attempts
        );
    }
    let crate::live::Counters {
        batches,
        rows,
        dropped,
        future,
        snapshots,
        events,
    } = live.counters().await?;
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
        "# HELP memscope_ingest_future_samples_total Samples and events refused for being stamped more than 5 minutes ahead of this server's clock (check the host's clock).\n# TYPE memscope_ingest_future_samples_total counter\nmemscope_ingest_future_samples_total {future}"
    );
    let _ = writeln!(
        o,
        "# HELP memscope_snapshots Snapshots in the library.\n# TYPE memscope_snapshots gauge\nmemscope_snapshots {snapshots}"
    );
    let _ = writeln!(
        o,
        "# HELP memscope_events_total Events received, by kind.\n# TYPE memscope_events_total counter"
    );
    // OOMs are exposed from zero, so the first one is an increase a rule can see (a counter
    // that appears at 1 shows none).
    let mut events = events;
    if !events.iter().any(|(k, _)| k == "oom") {
        events.push(("oom".to_string(), 0));
        events.sort();
    }
    for (kind, n) in events {
        let _ = writeln!(o, "memscope_events_total{{kind=\"{}\"}} {n}", esc(&kind));
    }
    let running = s.engine.running.load(Ordering::Relaxed);
    let cancelled = s.engine.cancelled_total.load(Ordering::Relaxed);
    let interrupted = live.reads_interrupted();
    let _ = writeln!(
        o,
        "# HELP memscope_engine_queries_running Snapshot analyses running for requests now.\n# TYPE memscope_engine_queries_running gauge\nmemscope_engine_queries_running {running}"
    );
    let _ = writeln!(
        o,
        "# HELP memscope_engine_queries_cancelled_total Snapshot analyses stopped early because their client went away.\n# TYPE memscope_engine_queries_cancelled_total counter\nmemscope_engine_queries_cancelled_total {cancelled}"
    );
    whatif_replays(&mut o, &s.models.replays);
    let (parse_total, parse_free) = s.uploads.parse_memory_bytes();
    let _ = writeln!(
        o,
        "# HELP memscope_parse_memory_bytes Memory the uploads being parsed may hold together (--max-parse-memory-bytes).\n# TYPE memscope_parse_memory_bytes gauge\nmemscope_parse_memory_bytes {parse_total}\n# HELP memscope_parse_memory_free_bytes Of that, what no parse holds now (uploads that find too little are answered 503).\n# TYPE memscope_parse_memory_free_bytes gauge\nmemscope_parse_memory_free_bytes {parse_free}"
    );
    let _ = writeln!(
        o,
        "# HELP memscope_live_queries_interrupted_total Live-data queries interrupted because their client went away.\n# TYPE memscope_live_queries_interrupted_total counter\nmemscope_live_queries_interrupted_total {interrupted}"
    );
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], o).into_response())
}

/// How long ago an agent process must have reported to be watched for growth.
const GROWTH_WATCH_MS: i64 = 5 * 60_000;

/// When each collector last reported, and per (host, device) the agent processes whose memory
/// held between steps keeps rising (the live leak signal) and the fastest of them.
async fn hosts_and_growth(s: &AppState, o: &mut String) -> ApiResult<()> {
    use std::fmt::Write;
    let esc = |v: &str| {
        v.replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\n', "\\n")
    };
    let _ = writeln!(
        o,
        "# HELP memscope_collector_last_seen_timestamp_seconds When the host's collector or agents last reported (Unix time).\n# TYPE memscope_collector_last_seen_timestamp_seconds gauge"
    );
    for h in s.live.hosts().await? {
        let _ = writeln!(
            o,
            "memscope_collector_last_seen_timestamp_seconds{{host=\"{}\"}} {:.3}",
            esc(&h.host),
            h.last_seen_ms as f64 / 1000.0
        );
    }
    let since = crate::now_ms() - GROWTH_WATCH_MS;
    let (watched, growing) = crate::live::growing_since(&s.live, since).await?;
    let _ = writeln!(
        o,
        "# HELP memscope_processes_growing Agent processes (reporting in the last 5 minutes) whose memory held between steps keeps rising.\n# TYPE memscope_processes_growing gauge"
    );
    let of = |host: &str, device: i64| -> Vec<&crate::live::Growing> {
        growing
            .iter()
            .filter(|g| g.host == host && g.device == device)
            .collect()
    };
    for (host, device) in &watched {
        let _ = writeln!(
            o,
            "memscope_processes_growing{{host=\"{}\",device=\"{device}\"}} {}",
            esc(host),
            of(host, *device).len()
        );
    }
    let _ = writeln!(
        o,
        "# HELP memscope_growth_bytes_per_step The fastest of those: bytes its step low point rises per step (0: none growing).\n# TYPE memscope_growth_bytes_per_step gauge"
    );
    for (host, device) in &watched {
        let fastest = of(host, *device)
            .iter()
            .map(|g| g.signal.bytes_per_step)
            .fold(0.0f64, f64::max);
        let _ = writeln!(
            o,
            "memscope_growth_bytes_per_step{{host=\"{}\",device=\"{device}\"}} {fastest:.0}",
            esc(host)
        );
    }
    Ok(())
}

/// The what-if tables replaying now and ended (`library::replays`): each replays a trace once per
/// setting, seconds of one core (in the background) or of every core (watched) per snapshot.
fn whatif_replays(o: &mut String, c: &crate::library::models::ReplayCounts) {
    use std::fmt::Write;
    let n = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    let _ = writeln!(
        o,
        "# HELP memscope_whatif_replays_running What-if tables replaying now: in the background after an upload (one core), or watched (someone asked; every core).\n# TYPE memscope_whatif_replays_running gauge\nmemscope_whatif_replays_running{{kind=\"background\"}} {}\nmemscope_whatif_replays_running{{kind=\"watched\"}} {}",
        n(&c.background_running),
        n(&c.watched_running)
    );
    let _ = writeln!(
        o,
        "# HELP memscope_whatif_replays_total What-if tables ended: answered (kept), no_answer (a trace the model cannot replay; the reason is shown), failed (the replay crashed).\n# TYPE memscope_whatif_replays_total counter\nmemscope_whatif_replays_total{{outcome=\"answered\"}} {}\nmemscope_whatif_replays_total{{outcome=\"no_answer\"}} {}\nmemscope_whatif_replays_total{{outcome=\"failed\"}} {}",
        n(&c.answered_total),
        n(&c.no_answer_total),
        n(&c.failed_total)
    );
}
