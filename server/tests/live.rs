//! The live pages' API over a planted scenario with exact figures: a GPU with a PyTorch process
//! that holds 512 MiB outside its allocator and leaks 1 MiB per step, and a process without an
//! agent. Checks the fleet, the GPU page's outside-PyTorch band, the process page's per-step
//! leak signal and OOM link, sub-collector tokens for agents, the event stream, and roll-ups.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use server::now_ms;
use server::state::AppState;
use tower::ServiceExt;

mod common;
use common::scenario::{GIB, MIB, alloc, batch, scenario};

async fn state(tag: &str) -> AppState {
    let dir = std::env::temp_dir().join(format!("memscope-live-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut args = server::testing::serve_args(dir);
    args.collector_tokens = vec!["gpu7=s3cret".into()];
    AppState::open(args).await.unwrap()
}

async fn call(s: &AppState, req: Request<Body>) -> (StatusCode, serde_json::Value) {
    let res = server::http::app(s.clone()).oneshot(req).await.unwrap();
    let status = res.status();
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null),
    )
}

async fn get(s: &AppState, uri: &str) -> serde_json::Value {
    let (st, v) = call(s, Request::get(uri).body(Body::empty()).unwrap()).await;
    assert_eq!(st, StatusCode::OK, "{uri}: {v}");
    v
}

async fn ingest(s: &AppState, b: &wire::Batch) -> StatusCode {
    let req = Request::post("/api/ingest")
        .header("authorization", "Bearer s3cret")
        .body(Body::from(serde_json::to_vec(b).unwrap()))
        .unwrap();
    call(s, req).await.0
}

#[tokio::test]
async fn fleet_gpu_and_process_pages_show_the_planted_figures() {
    let s = state("pages").await;
    let t0 = (now_ms() - 600_000) / 60_000 * 60_000;
    let (nvml, agent) = scenario(t0);
    assert_eq!(ingest(&s, &nvml).await, StatusCode::OK);
    // The agent sends under a sub-name of the collector's token; another name is refused.
    assert_eq!(ingest(&s, &agent).await, StatusCode::OK);
    assert_eq!(
        ingest(&s, &batch("gpu7x/agent", 1)).await,
        StatusCode::UNAUTHORIZED
    );

    let fleet = get(&s, "/api/live/fleet").await;
    let host = &fleet["hosts"][0];
    assert_eq!(host["host"], "gpu7");
    let g = &host["gpus"][0];
    let last_reserved = 2 * GIB + 11 * 20 * MIB;
    assert_eq!(
        g["gpu"]["used_bytes"],
        last_reserved + 512 * MIB + 300 * MIB
    );
    assert_eq!(g["processes"], 2);
    assert_eq!(g["top_process"]["pid"], 100);
    assert_eq!(g["stale"], true, "the last reading is ten minutes old");
    // Ten minutes without an agent sample: what the process held then is not counted as held now.
    assert_eq!(g["pytorch_reserved_bytes"], 0);
    assert_eq!(fleet["alerts"][0]["kind"], "oom");
    assert_eq!(fleet["alerts"][0]["snapshot_id"], "abc123");
    let procs = fleet["processes"].as_array().unwrap();
    let p100 = procs.iter().find(|p| p["pid"] == 100).unwrap();
    assert_eq!(
        (p100["has_agent"].clone(), p100["step"].clone()),
        (true.into(), 119.into())
    );
    assert_eq!(p100["reserved_bytes"], last_reserved);
    assert_eq!(p100["stale"], true);
    assert!(
        procs
            .iter()
            .any(|p| p["pid"] == 200 && p["has_agent"].is_null())
    );

    // One row per host and per process, kept by every batch.
    assert_eq!(
        host["collector"], "gpu7/gpu7:100:42",
        "the last batch was the agent's"
    );
    let p100: Vec<(bool, Option<String>)> = server::with_db!(&s.library.db, |p| sqlx::query_as(
        "SELECT has_agent, name FROM processes WHERE host = 'gpu7' AND pid = 100",
    )
    .fetch_all(p)
    .await)
    .unwrap();
    assert_eq!(p100, [(true, Some("python".to_string()))]);
    let p200: (bool, i64, i64) = server::with_db!(&s.library.db, |p| sqlx::query_as(
        "SELECT has_agent, first_seen_ms, last_seen_ms FROM processes WHERE pid = 200",
    )
    .fetch_one(p)
    .await)
    .unwrap();
    assert_eq!(p200, (false, t0, t0 + 119_000));

    // GPU page, one bucket per second: the outside-PyTorch band is exactly the 512 MiB.
    let page = get(
        &s,
        &format!(
            "/api/live/gpus/GPU-aaa?from_ms={t0}&to_ms={}&points=120",
            t0 + 119_999
        ),
    )
    .await;
    assert_eq!(page["window"]["bucket_ms"], 1000);
    assert_eq!(page["used"].as_array().unwrap().len(), 120);
    let ps = page["processes"].as_array().unwrap();
    let p = ps.iter().find(|p| p["pid"] == 100).unwrap();
    assert_eq!(p["has_agent"], true);
    for (i, v) in p["outside_pytorch"].as_array().unwrap().iter().enumerate() {
        assert_eq!(v.as_u64(), Some(512 * MIB), "bucket {i}");
    }
    assert_eq!(p["allocated"][5].as_u64(), Some(GIB + 5 * MIB));
    let other = ps.iter().find(|p| p["pid"] == 200).unwrap();
    assert_eq!(other["has_agent"], false);
    assert!(
        other["reserved"]
            .as_array()
            .unwrap()
            .iter()
            .all(|v| v.is_null())
    );
    assert_eq!(other["nvml_used"][0].as_u64(), Some(300 * MIB));
    assert_eq!(page["events"][0]["kind"], "oom");

    // Process page: 120 steps, the leak signal says 1 MiB per step, the OOM links its snapshot.
    let proc_page = get(
        &s,
        &format!(
            "/api/live/processes/gpu7/100?from_ms={t0}&to_ms={}&points=120",
            t0 + 119_999
        ),
    )
    .await;
    let d = &proc_page["devices"][0];
    assert_eq!(d["gpu_uuid"], "GPU-aaa");
    assert_eq!(d["steps"].as_array().unwrap().len(), 120);
    assert_eq!(d["leak"]["rising"], true);
    let slope = d["leak"]["bytes_per_step"].as_f64().unwrap();
    assert!((slope - MIB as f64).abs() < 1.0, "{slope}");
    assert_eq!(d["outside_pytorch"][0].as_u64(), Some(512 * MIB));
    assert_eq!(proc_page["events"][0]["snapshot_id"], "abc123");
    assert_eq!(proc_page["name"], "python");

    // Unknown GPU / process: 404 with a message that names it.
    let (st, err) = call(
        &s,
        Request::get("/api/live/gpus/GPU-nope")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(st, StatusCode::NOT_FOUND);
    assert!(err["error"].as_str().unwrap().contains("GPU-nope"), "{err}");
}

#[tokio::test]
async fn roll_ups_keep_min_max_mean_and_the_pages_still_draw_from_them() {
    let s = state("rollup").await;
    let t0 = (now_ms() - 600_000) / 60_000 * 60_000;
    let (nvml, agent) = scenario(t0);
    ingest(&s, &nvml).await;
    ingest(&s, &agent).await;
    let before = s.library.live_counts().await.unwrap();

    // Roll up the first minute (60 readings): 60 GPU rows, 120 process rows, 60 allocator rows.
    let r = s.library.roll_up(t0 + 60_000, 0).await.unwrap();
    assert_eq!(r.rolled_rows, 60 + 120 + 60);
    let after = s.library.live_counts().await.unwrap();
    assert_eq!(after[0], before[0] - 60);
    let (n, min, max, mean): (i64, i64, i64, i64) = server::with_db!(&s.library.db, |p| sqlx::query_as(
        "SELECT n, allocated_min_bytes, allocated_max_bytes, allocated_mean_bytes FROM allocator_samples_1m",
    )
    .fetch_one(p)
    .await)
    .unwrap();
    assert_eq!((n, min as u64, max as u64), (60, GIB, GIB + 59 * MIB));
    assert_eq!(mean as u64, GIB + 59 * MIB / 2);

    // A late sample for the rolled-up minute is merged into its row, not lost.
    let mut late = batch("gpu7/gpu7:100:42", 2);
    late.allocator
        .push(alloc(t0 + 30_500, 30, GIB - MIB, 2 * GIB));
    ingest(&s, &late).await;
    s.library.roll_up(t0 + 60_000, 0).await.unwrap();
    let (n, min): (i64, i64) = server::with_db!(&s.library.db, |p| sqlx::query_as(
        "SELECT n, allocated_min_bytes FROM allocator_samples_1m"
    )
    .fetch_one(p)
    .await)
    .unwrap();
    assert_eq!((n, min as u64), (61, GIB - MIB));

    // The GPU page over the whole window still has the first minute (from the roll-up).
    let page = get(
        &s,
        &format!(
            "/api/live/gpus/GPU-aaa?from_ms={t0}&to_ms={}&points=120",
            t0 + 119_999
        ),
    )
    .await;
    assert!(page["used"][0].as_u64().is_some());
    let p = page["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pid"] == 100)
        .unwrap()
        .clone();
    assert_eq!(
        p["reserved"][0].as_u64(),
        Some(2 * GIB + 5 * 20 * MIB),
        "minute max"
    );

    // Past the roll-up retention everything goes.
    let r = s.library.roll_up(now_ms(), now_ms()).await.unwrap();
    assert!(r.expired_rows > 0);
    assert_eq!(s.library.live_counts().await.unwrap(), [0, 0, 0, 0, 0]);
}

#[tokio::test]
async fn the_event_stream_announces_each_stored_batch() {
    let s = state("sse").await;
    let res = server::http::app(s.clone())
        .oneshot(
            Request::get("/api/live/stream")
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(res.headers()["content-type"], "text/event-stream");
    let mut body = res.into_body();
    let (nvml, _) = scenario(now_ms() - 200_000);
    assert_eq!(ingest(&s, &nvml).await, StatusCode::OK);
    let text = loop {
        let frame = tokio::time::timeout(std::time::Duration::from_secs(5), body.frame())
            .await
            .expect("an event within 5 s")
            .unwrap()
            .unwrap();
        if let Ok(data) = frame.into_data() {
            let t = String::from_utf8_lossy(&data).to_string();
            if t.contains("ingest") {
                break t;
            }
        }
    };
    assert!(text.contains("event: ingest"), "{text}");
    assert!(text.contains("\"host\":\"gpu7\""), "{text}");
    assert!(text.contains("\"rows\":360"), "{text}");
    // Shutdown ends the stream.
    let _ = s.shutdown.send(true);
    let end = tokio::time::timeout(std::time::Duration::from_secs(5), async {
        while let Some(f) = body.frame().await {
            if f.is_err() {
                break;
            }
        }
    })
    .await;
    assert!(end.is_ok(), "the stream ends at shutdown");
}
