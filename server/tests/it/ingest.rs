//! Live ingest (`POST /api/ingest`): authenticated by collector token, idempotent by
//! (collector, seq), gzip accepted, malformed batches refused; fed with the recorded NVML readings
//! of a real fixture.

use std::io::Write;
use std::path::PathBuf;

use crate::support::app::error_message;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use server::state::AppState;
use tower::ServiceExt;

async fn state(tag: &str) -> AppState {
    crate::support::app::app_state(
        &format!("ingest-{tag}"),
        &[
            "gpu7=s3cret-0123456789abcdef",
            "gpu8=other-0123456789abcdef",
        ],
    )
    .await
}

/// A batch from the recorded NVML readings of `leak_detached_cache` (same fields as live NVML).
fn recorded_batch(seq: u64) -> wire::Batch {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/leak_detached_cache.nvml.json");
    let readings: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut b = wire::Batch::new("gpu7", seq, "gpu7");
    for r in &readings {
        let time_ms = (r["t"].as_f64().unwrap() * 1000.0) as i64;
        b.gpus.push(wire::GpuSample {
            time_ms,
            uuid: "GPU-recorded-0".into(),
            index: 0,
            name: Some("NVIDIA H200".into()),
            memory_used_bytes: r["used"].as_u64(),
            memory_free_bytes: r["free"].as_u64(),
            memory_total_bytes: r["total"].as_u64(),
            memory_reserved_bytes: None,
            gpu_util_percent: r["gpu_util"].as_u64().map(|v| v as u32),
            mem_util_percent: r["mem_util"].as_u64().map(|v| v as u32),
            temperature_c: r["temp_c"].as_i64().map(|v| v as i32),
            power_mw: r["power_mw"].as_u64().map(|v| v as u32),
        });
        for p in r["procs"].as_array().unwrap() {
            b.processes.push(wire::ProcessSample {
                time_ms,
                gpu_uuid: "GPU-recorded-0".into(),
                pid: p["pid"].as_u64().unwrap() as u32,
                start_time_ms: None,
                name: None,
                cgroup: None,
                used_bytes: p["used"].as_u64().unwrap(),
            });
        }
    }
    b
}

async fn post(
    state: &AppState,
    token: Option<&str>,
    body: Vec<u8>,
    gzip: bool,
) -> (StatusCode, serde_json::Value) {
    let mut req = Request::builder()
        .method("POST")
        .uri("/api/ingest")
        .header("content-type", "application/json");
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    if gzip {
        req = req.header("content-encoding", "gzip");
    }
    let res = server::http::app(state.clone())
        .oneshot(req.body(Body::from(body)).unwrap())
        .await
        .unwrap();
    let status = res.status();
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null),
    )
}

fn gz(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

#[tokio::test]
async fn batches_are_stored_once_and_only_with_the_right_token() {
    let s = state("auth").await;
    let batch = recorded_batch(1);
    let json = serde_json::to_vec(&batch).unwrap();
    let rows = (batch.gpus.len() + batch.processes.len()) as u64;
    assert!(batch.gpus.len() == 84 && !batch.processes.is_empty());

    // No token, an unknown token, another collector's token: 401 and nothing stored.
    for token in [None, Some("wrong"), Some("other-0123456789abcdef")] {
        let (st, err) = post(&s, token, json.clone(), false).await;
        assert_eq!(st, StatusCode::UNAUTHORIZED, "{token:?}: {err}");
        assert!(error_message(&err).len() > 10);
    }
    assert_eq!(s.live.live_counts().await.unwrap(), [0, 0, 0, 0, 0]);

    // The right token, gzip-compressed: stored.
    let (st, ack) = post(&s, Some("s3cret-0123456789abcdef"), gz(&json), true).await;
    assert_eq!(st, StatusCode::OK, "{ack}");
    assert_eq!(
        ack,
        serde_json::json!({"seq": 1, "duplicate": false, "stored": rows})
    );
    let counts = s.live.live_counts().await.unwrap();
    assert_eq!(counts, [84, batch.processes.len() as i64, 0, 0, 1]);

    // The same batch again (a resend after a lost acknowledgement): acknowledged, not stored twice.
    let (st, ack) = post(&s, Some("s3cret-0123456789abcdef"), json.clone(), false).await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(
        ack,
        serde_json::json!({"seq": 1, "duplicate": true, "stored": 0})
    );
    assert_eq!(s.live.live_counts().await.unwrap(), counts);

    // The next batch is stored.
    let (st, ack) = post(
        &s,
        Some("s3cret-0123456789abcdef"),
        serde_json::to_vec(&recorded_batch(2)).unwrap(),
        false,
    )
    .await;
    let ack: wire::Ack = serde_json::from_value(ack).unwrap();
    assert_eq!((st, ack.duplicate), (StatusCode::OK, false));
    assert_eq!(s.live.live_counts().await.unwrap()[0], 168);
}

#[tokio::test]
async fn malformed_batches_are_refused() {
    let s = state("bad").await;
    let (st, err) = post(
        &s,
        Some("s3cret-0123456789abcdef"),
        b"{not json".to_vec(),
        false,
    )
    .await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
    assert!(error_message(&err).starts_with("malformed batch"), "{err}");
    let (st, err) = post(
        &s,
        Some("s3cret-0123456789abcdef"),
        b"\x1f\x8bnot really gzip".to_vec(),
        true,
    )
    .await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
    assert!(error_message(&err).contains("gzip"), "{err}");
    let mut future = recorded_batch(1);
    future.version = wire::VERSION + 1;
    let (st, err) = post(
        &s,
        Some("s3cret-0123456789abcdef"),
        serde_json::to_vec(&future).unwrap(),
        false,
    )
    .await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
    assert!(error_message(&err).contains("newer"), "{err}");
    let (st, _) = post(
        &s,
        Some("s3cret-0123456789abcdef"),
        br#"{"version":1,"collector":"gpu7","seq":"x","host":"h"}"#.to_vec(),
        false,
    )
    .await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
    assert_eq!(s.live.live_counts().await.unwrap(), [0, 0, 0, 0, 0]);
}

#[tokio::test]
async fn prometheus_metrics_follow_the_conventions() {
    let s = state("metrics").await;
    let mut batch = recorded_batch(1);
    let last = batch.gpus.iter().max_by_key(|g| g.time_ms).unwrap().clone();
    // Two processes on device 0; the second sample of process 1 replaces its first.
    let alloc = |pid, time_ms, allocated_bytes, reserved_bytes| wire::AllocatorSample {
        time_ms,
        pid,
        start_time_ms: Some(1),
        device: 0,
        gpu_uuid: None,
        step: None,
        allocated_bytes,
        reserved_bytes,
        active_bytes: None,
        inactive_split_bytes: None,
        requested_bytes: None,
        alloc_retries: Some(2),
        ooms: Some(0),
        segments: None,
        largest_free_block_bytes: None,
    };
    batch.allocator = vec![
        alloc(1, 10, 100, 200),
        alloc(1, 20, 300, 400),
        alloc(2, 15, 1000, 2000),
    ];
    batch.events = vec![wire::Event {
        time_ms: 5,
        kind: "oom".into(),
        pid: Some(1),
        device: Some(0),
        message: "x".into(),
        snapshot_id: None,
    }];
    let (st, _) = post(
        &s,
        Some("s3cret-0123456789abcdef"),
        serde_json::to_vec(&batch).unwrap(),
        false,
    )
    .await;
    assert_eq!(st, StatusCode::OK);

    let res = server::http::app(s.clone())
        .oneshot(
            Request::builder()
                .uri("/metrics")
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert!(
        res.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain")
    );
    let text =
        String::from_utf8(res.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap();
    let line = |prefix: &str| {
        text.lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix} in\n{text}"))
            .to_string()
    };
    assert_eq!(
        line("memscope_gpu_memory_used_bytes{"),
        format!(
            "memscope_gpu_memory_used_bytes{{host=\"gpu7\",gpu=\"GPU-recorded-0\",index=\"0\"}} {}",
            last.memory_used_bytes.unwrap()
        )
    );
    assert!(
        line("memscope_gpu_memory_total_bytes{")
            .ends_with(&format!(" {}", last.memory_total_bytes.unwrap()))
    );
    assert_eq!(
        line("memscope_pytorch_allocated_bytes{"),
        "memscope_pytorch_allocated_bytes{host=\"gpu7\",device=\"0\"} 1300"
    );
    assert_eq!(
        line("memscope_pytorch_reserved_bytes{"),
        "memscope_pytorch_reserved_bytes{host=\"gpu7\",device=\"0\"} 2400"
    );
    assert_eq!(
        line("memscope_pytorch_alloc_retries_total{"),
        "memscope_pytorch_alloc_retries_total{host=\"gpu7\",device=\"0\"} 4"
    );
    assert_eq!(
        line("memscope_ingest_batches_total"),
        "memscope_ingest_batches_total 1"
    );
    assert_eq!(
        line("memscope_events_total{"),
        "memscope_events_total{kind=\"oom\"} 1"
    );
    assert!(!text.contains("pid"), "no per-process labels");
    for l in text.lines().filter(|l| !l.starts_with('#')) {
        assert!(l.starts_with("memscope_"), "{l}");
    }
    for l in text
        .lines()
        .filter(|l| l.starts_with("# TYPE") && l.ends_with("counter"))
    {
        assert!(
            l.split_whitespace().nth(2).unwrap().ends_with("_total"),
            "{l}"
        );
    }

    // A late batch does not move a series back: process 1's sample at 15 is older than its 20;
    // process 2 moves on to 30.
    let mut late = recorded_batch(2);
    late.gpus.clear();
    late.allocator = vec![alloc(1, 15, 7, 7), alloc(2, 30, 5000, 6000)];
    let (st, _) = post(
        &s,
        Some("s3cret-0123456789abcdef"),
        serde_json::to_vec(&late).unwrap(),
        false,
    )
    .await;
    assert_eq!(st, StatusCode::OK);
    let scrape = || async {
        let res = server::http::app(s.clone())
            .oneshot(
                Request::builder()
                    .uri("/metrics")
                    .body(Body::empty())
                    .unwrap(),
            )
            .await
            .unwrap();
        String::from_utf8(res.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap()
    };
    let text = scrape().await;
    assert!(
        text.contains("memscope_pytorch_allocated_bytes{host=\"gpu7\",device=\"0\"} 5300"),
        "{text}"
    );
    // Counters only grow: pruning the batch log (retention) leaves the totals as they were; the
    // latest readings go with the raw samples they stand for.
    s.live.roll_up(i64::MAX / 2, i64::MAX / 2).await.unwrap();
    let text = scrape().await;
    assert!(text.contains("memscope_ingest_batches_total 2"), "{text}");
    assert!(
        !text.contains("memscope_pytorch_allocated_bytes{"),
        "no process has a sample left: {text}"
    );
}

/// A snapshot tagged with a host (and pid) the collectors report on takes the device's total
/// memory from their NVML readings, and its OOM verdict with it.
#[tokio::test]
async fn an_oom_snapshot_from_a_reported_host_takes_its_gpu_size_from_nvml() {
    let state = state("nvml-total").await;
    let batch = recorded_batch(1);
    let total = batch.gpus[0].memory_total_bytes.unwrap();
    let (status, _) = post(
        &state,
        Some("s3cret-0123456789abcdef"),
        serde_json::to_vec(&batch).unwrap(),
        false,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let pickle = std::fs::read(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/harness/outside_pytorch.oom.pickle"),
    )
    .unwrap();
    let req = Request::builder()
        .method("POST")
        .uri("/api/snapshots?tags=kind=oom,host=gpu7,pid=999")
        .body(Body::from(pickle))
        .unwrap();
    let (status, body) = crate::support::app::respond(&state, req).await;
    assert_eq!(status, StatusCode::CREATED);
    let up: api::Uploaded = serde_json::from_slice(&body).unwrap();
    let t = up
        .snapshot
        .device_total
        .as_ref()
        .expect("the collector's total");
    assert_eq!(t.source, api::DeviceTotalSource::Collector, "{up:?}");
    assert_eq!(t.total_bytes, total);
    assert_eq!(t.detail.as_deref(), Some("NVIDIA H200 on gpu7"));
    let report: api::Report =
        crate::support::app::get_as(&state, &format!("/api/snapshots/{}", up.id)).await;
    assert_eq!(report.ooms[0].verdict, api::Verdict::OutsidePytorch);
}
