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

use crate::support::app::error_message;
use crate::support::app::{get_as, respond_json as call};
use crate::support::scenario::{GIB, MIB, alloc, batch, scenario};

async fn state(tag: &str) -> AppState {
    crate::support::app::app_state(&format!("live-{tag}"), &["gpu7=s3cret-0123456789abcdef"]).await
}

async fn get(s: &AppState, uri: &str) -> serde_json::Value {
    let (st, v) = call(s, Request::get(uri).body(Body::empty()).unwrap()).await;
    assert_eq!(st, StatusCode::OK, "{uri}: {v}");
    v
}

async fn ingest(s: &AppState, b: &wire::Batch) -> StatusCode {
    let req = Request::post("/api/ingest")
        .header("authorization", "Bearer s3cret-0123456789abcdef")
        .body(Body::from(serde_json::to_vec(b).unwrap()))
        .unwrap();
    call(s, req).await.0
}

#[tokio::test]
async fn fleet_gpu_and_process_pages_show_the_planted_figures() {
    let s = state("pages").await;
    let t0 = crate::support::scenario::start_ms(now_ms());
    let (nvml, agent) = scenario(t0);
    assert_eq!(ingest(&s, &nvml).await, StatusCode::OK);
    // The agent sends under a sub-name of the collector's token; another name is refused.
    assert_eq!(ingest(&s, &agent).await, StatusCode::OK);
    assert_eq!(
        ingest(&s, &batch("gpu7x/agent", 1)).await,
        StatusCode::UNAUTHORIZED
    );

    let fleet: api::Fleet = get_as(&s, "/api/live/fleet").await;
    let host = &fleet.hosts[0];
    assert_eq!(host.host, "gpu7");
    let g = &host.gpus[0];
    let last_reserved = (2 * GIB + 11 * 20 * MIB) as i64;
    assert_eq!(
        g.gpu.used_bytes,
        Some(last_reserved + (512 * MIB + 300 * MIB) as i64)
    );
    assert_eq!(g.processes, 2);
    assert_eq!(g.top_process.as_ref().map(|p| p.pid), Some(100));
    assert!(g.stale, "the last reading is ten minutes old");
    // Ten minutes without an agent sample: what the process held then is not counted as held now.
    assert_eq!(g.pytorch_reserved_bytes, 0);
    assert_eq!(fleet.alerts[0].kind, api::EventKind::Oom);
    assert_eq!(fleet.alerts[0].snapshot_id.as_deref(), Some("abc123"));
    let p100 = fleet.processes.iter().find(|p| p.pid == 100).unwrap();
    assert_eq!((p100.has_agent, p100.step), (true, Some(119)));
    assert_eq!(p100.reserved_bytes, Some(last_reserved));
    assert!(p100.stale);
    assert!(fleet.processes.iter().any(|p| p.pid == 200 && !p.has_agent));

    // One row per host and per process, kept by every batch.
    assert_eq!(
        host.collector.as_deref(),
        Some("gpu7/gpu7:100:42"),
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
    let page: api::GpuPage = get_as(
        &s,
        &format!(
            "/api/live/gpus/GPU-aaa?from_ms={t0}&to_ms={}&points=120",
            t0 + 119_999
        ),
    )
    .await;
    assert_eq!(page.window.bucket_ms, 1000);
    assert_eq!(page.used_bytes.len(), 120);
    let p = page.processes.iter().find(|p| p.pid == 100).unwrap();
    assert!(p.has_agent);
    for (i, v) in p.outside_pytorch_bytes.iter().enumerate() {
        assert_eq!(*v, Some((512 * MIB) as i64), "bucket {i}");
    }
    assert_eq!(p.allocated_bytes[5], Some((GIB + 5 * MIB) as i64));
    let other = page.processes.iter().find(|p| p.pid == 200).unwrap();
    assert!(!other.has_agent);
    assert!(other.reserved_bytes.iter().all(Option::is_none));
    assert_eq!(other.nvml_used_bytes[0], Some((300 * MIB) as i64));
    assert_eq!(page.events[0].kind, api::EventKind::Oom);

    // Process page: 120 steps, the leak signal says 1 MiB per step, the OOM links its snapshot.
    let proc_page: api::ProcessPage = get_as(
        &s,
        &format!(
            "/api/live/processes/gpu7/100?from_ms={t0}&to_ms={}&points=120",
            t0 + 119_999
        ),
    )
    .await;
    let d = &proc_page.devices[0];
    assert_eq!(d.gpu_uuid.as_deref(), Some("GPU-aaa"));
    assert_eq!(d.steps.len(), 120);
    assert!(d.leak.rising);
    let slope = d.leak.bytes_per_step;
    assert!((slope - MIB as f64).abs() < 1.0, "{slope}");
    assert_eq!(d.outside_pytorch_bytes[0], Some((512 * MIB) as i64));
    assert_eq!(proc_page.events[0].snapshot_id.as_deref(), Some("abc123"));
    assert_eq!(proc_page.name.as_deref(), Some("python"));

    // Unknown GPU / process: 404 with a message that names it.
    let (st, err) = call(
        &s,
        Request::get("/api/live/gpus/GPU-nope")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(st, StatusCode::NOT_FOUND);
    assert!(error_message(&err).contains("GPU-nope"), "{err}");
}

#[tokio::test]
async fn roll_ups_keep_min_max_mean_and_the_pages_still_draw_from_them() {
    let s = state("rollup").await;
    let t0 = crate::support::scenario::start_ms(now_ms());
    let (nvml, agent) = scenario(t0);
    ingest(&s, &nvml).await;
    ingest(&s, &agent).await;
    let before = s.live.live_counts().await.unwrap();

    // Roll up the first minute (60 readings): 60 GPU rows, 120 process rows, 60 allocator rows.
    let r = s.live.roll_up(t0 + 60_000, 0).await.unwrap();
    assert_eq!(r.rolled_rows, 60 + 120 + 60);
    let after = s.live.live_counts().await.unwrap();
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
    s.live.roll_up(t0 + 60_000, 0).await.unwrap();
    let (n, min): (i64, i64) = server::with_db!(&s.library.db, |p| sqlx::query_as(
        "SELECT n, allocated_min_bytes FROM allocator_samples_1m"
    )
    .fetch_one(p)
    .await)
    .unwrap();
    assert_eq!((n, min as u64), (61, GIB - MIB));

    // The GPU page over the whole window still has the first minute (from the roll-up).
    let page: api::GpuPage = get_as(
        &s,
        &format!(
            "/api/live/gpus/GPU-aaa?from_ms={t0}&to_ms={}&points=120",
            t0 + 119_999
        ),
    )
    .await;
    assert!(page.used_bytes[0].is_some());
    let p = page.processes.iter().find(|p| p.pid == 100).unwrap();
    assert_eq!(
        p.reserved_bytes[0],
        Some((2 * GIB + 5 * 20 * MIB) as i64),
        "minute max"
    );

    // Past the roll-up retention everything goes.
    let r = s.live.roll_up(now_ms(), now_ms()).await.unwrap();
    assert!(r.expired_rows > 0);
    assert_eq!(s.live.live_counts().await.unwrap(), [0, 0, 0, 0, 0]);
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

const DAY_MS: i64 = 86_400_000;

/// Two hours of one GPU (every 15 s, a sawtooth with gaps and NULLs) ending before midnight of
/// `day`: NVML for processes 100 and 200, the agent for process 100; `seq` numbers the batches.
fn two_hours(day: i64, seq: u64, from_ms: i64, to_ms: i64) -> (wire::Batch, wire::Batch) {
    let (mut nvml, mut agent) = (batch("gpu7", seq), batch("gpu7/gpu7:100:42", seq));
    let mut t = day + from_ms;
    while t < day + to_ms {
        let i = (t / 15_000) as u64;
        // A late batch's readings differ from the first's at the same times.
        let used = GIB + (i % 37) * 7 * MIB + (t as u64 % 1000) + (seq - 1) * 5 * MIB;
        nvml.gpus.push(wire::GpuSample {
            time_ms: t,
            uuid: "GPU-aaa".into(),
            index: 0,
            name: Some("NVIDIA H200".into()),
            memory_used_bytes: (i % 11 != 3).then_some(used),
            memory_free_bytes: Some(80 * GIB - used),
            memory_total_bytes: Some(80 * GIB),
            memory_reserved_bytes: Some(0),
            gpu_util_percent: (!i.is_multiple_of(5)).then_some((i % 100) as u32),
            mem_util_percent: Some(40),
            temperature_c: Some(40 + (i % 30) as i32),
            power_mw: Some(400_000 + (i % 100_000) as u32),
        });
        for (pid, u) in [(100, used - 300 * MIB), (200, 300 * MIB + i % 13)] {
            nvml.processes.push(wire::ProcessSample {
                time_ms: t,
                gpu_uuid: "GPU-aaa".into(),
                pid,
                start_time_ms: Some(42),
                name: Some(if pid == 100 { "python" } else { "other" }.into()),
                cgroup: None,
                used_bytes: u,
            });
        }
        let mut a = alloc(
            t,
            i,
            GIB / 2 + (i % 29) * MIB + (seq - 1) * MIB,
            GIB + (i % 7) * 20 * MIB + (seq - 1) * 20 * MIB,
        );
        a.inactive_split_bytes = (!i.is_multiple_of(3)).then_some((i % 17) * MIB);
        a.alloc_retries = Some(i / 200);
        agent.allocator.push(a);
        // A gap of a few minutes now and then.
        t += if i.is_multiple_of(97) {
            240_000
        } else {
            15_000
        };
    }
    (nvml, agent)
}

/// The live pages of GPU-aaa and process 100 over windows around `day`'s last hours, at bucket
/// widths finer and coarser than a minute and not aligned to one.
async fn pages_of_the_day(s: &AppState, day: i64) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    for (from, to, points) in [
        (day + 20 * 3_600_000, day + DAY_MS, 97),
        (day + 21 * 3_600_000 + 7_000, day + 22 * 3_600_000, 4000),
        (day - DAY_MS, day + 2 * DAY_MS, 300),
    ] {
        out.push(
            get(
                s,
                &format!("/api/live/gpus/GPU-aaa?from_ms={from}&to_ms={to}&points={points}"),
            )
            .await,
        );
        out.push(
            get(
                s,
                &format!(
                    "/api/live/processes/gpu7/100?start_time_ms=42&from_ms={from}&to_ms={to}&points={points}"
                ),
            )
            .await,
        );
    }
    out
}

/// Every stored minute of the GPU's series, (minute, [n, used min, used max, temperature max]),
/// from one-minute rows and packed days alike (unpacked), for comparing stores.
async fn gpu_minutes(s: &AppState) -> Vec<(i64, Vec<Option<i64>>)> {
    use server::live::days;
    type Minute = (i64, i64, Option<i64>, Option<i64>, Option<i64>);
    type Day = (i64, Vec<u8>, Vec<u8>, Vec<u8>, Vec<u8>, Vec<u8>);
    let one_minute: Vec<Minute> =
        server::with_db!(&s.library.db, |p| sqlx::query_as(
            "SELECT minute_ms, n, used_min_bytes, used_max_bytes, temperature_max_c FROM gpu_samples_1m ORDER BY minute_ms",
        )
        .fetch_all(p)
        .await)
        .unwrap();
    let packed: Vec<Day> = server::with_db!(&s.library.db, |p| sqlx::query_as(
        "SELECT day_ms, minutes, n, used_min_bytes, used_max_bytes, temperature_max_c \
             FROM gpu_samples_1m_packed ORDER BY day_ms",
    )
    .fetch_all(p)
    .await)
    .unwrap();
    let mut out: Vec<(i64, Vec<Option<i64>>)> = one_minute
        .into_iter()
        .map(|(m, n, lo, hi, t)| (m, vec![Some(n), lo, hi, t]))
        .collect();
    for (day, minutes, n, lo, hi, temp) in packed {
        let minutes = days::unpack_minutes(&minutes).unwrap();
        let cols: Vec<Vec<Option<i64>>> = [n, lo, hi, temp]
            .iter()
            .map(|c| days::unpack_values(c, minutes.len()).unwrap())
            .collect();
        for (i, m) in minutes.iter().enumerate() {
            out.push((day + m * 60_000, cols.iter().map(|c| c[i]).collect()));
        }
    }
    out.sort_by_key(|r| r.0);
    out
}

async fn count(s: &AppState, q: &str) -> i64 {
    server::with_db!(&s.library.db, |p| sqlx::query_scalar(sqlx::AssertSqlSafe(
        q.to_string()
    ))
    .fetch_one(p)
    .await)
    .unwrap()
}

/// A day over is packed into one row per series, and every page answers from it exactly as from
/// its one-minute rows; a late sample for a packed day is merged in; retention drops whole days.
#[tokio::test]
async fn packed_days_answer_as_their_one_minute_rows_did() {
    let s = state("packed").await;
    let day = (now_ms() / DAY_MS - 1) * DAY_MS; // yesterday (PostgreSQL: it has a partition)
    let (nvml, agent) = two_hours(day, 1, 21 * 3_600_000, 23 * 3_600_000);
    assert_eq!(ingest(&s, &nvml).await, StatusCode::OK);
    assert_eq!(ingest(&s, &agent).await, StatusCode::OK);

    // Rolled up to one-minute rows; the day is not over for the roll-up (its cut is 23:30).
    let r = s
        .live
        .roll_up(day + 23 * 3_600_000 + 1_800_000, 0)
        .await
        .unwrap();
    assert!(r.rolled_rows > 1000 && r.packed_rows == 0, "{r:?}");
    let from_minutes = pages_of_the_day(&s, day).await;
    let minutes_before = gpu_minutes(&s).await;

    // The day is over: packed, one row per series (GPU; processes 100 and 200; the agent).
    let r = s.live.roll_up(day + DAY_MS + 3_600_000, 0).await.unwrap();
    assert_eq!(r.rolled_rows, 0);
    assert!(r.packed_rows > 300, "{r:?}");
    assert_eq!(r.packed_series_days, 4, "{r:?}");
    assert_eq!(count(&s, "SELECT count(*) FROM gpu_samples_1m").await, 0);
    assert_eq!(
        count(&s, "SELECT count(*) FROM allocator_samples_1m").await,
        0
    );
    assert_eq!(
        count(&s, "SELECT count(*) FROM process_samples_1m_packed").await,
        2
    );
    assert_eq!(gpu_minutes(&s).await, minutes_before, "exact values");
    let from_packed = pages_of_the_day(&s, day).await;
    assert!(
        from_packed[0]["used"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v.is_u64()),
        "the page has data: {}",
        from_packed[0]
    );
    for (a, b) in from_minutes.iter().zip(&from_packed) {
        assert_eq!(a, b, "a page answers from a packed day as from its minutes");
    }

    // Late samples for the packed day (a collector back after a day offline): minutes already
    // there and new ones. They are rolled up and merged into the packed rows; the pages show
    // what they would have shown had the samples come in time (a second server that got them
    // all before any roll-up). Their times are not the first batch's (an agent's sample is
    // stored once per time: a second one at the same time would be dropped on arrival).
    let (late_nvml, late_agent) =
        two_hours(day, 2, 20 * 3_600_000 + 30_007, 21 * 3_600_000 + 900_000);
    assert_eq!(ingest(&s, &late_nvml).await, StatusCode::OK);
    assert_eq!(ingest(&s, &late_agent).await, StatusCode::OK);
    let r = s.live.roll_up(day + DAY_MS + 3_600_000, 0).await.unwrap();
    assert!(r.rolled_rows > 0 && r.packed_rows > 0, "{r:?}");
    assert_eq!(r.packed_series_days, 4, "merged into the same rows: {r:?}");
    assert_eq!(
        count(&s, "SELECT count(*) FROM gpu_samples_1m_packed").await,
        1
    );

    let other = state("packed-in-time").await;
    for b in [&nvml, &agent, &late_nvml, &late_agent] {
        assert_eq!(ingest(&other, b).await, StatusCode::OK);
    }
    other
        .live
        .roll_up(day + 23 * 3_600_000 + 1_800_000, 0)
        .await
        .unwrap();
    let in_time = pages_of_the_day(&other, day).await;
    let merged = pages_of_the_day(&s, day).await;
    for (a, b) in in_time.iter().zip(&merged) {
        assert_eq!(a, b, "late samples merged into a packed day");
    }
    // Counts, minima and maxima of every minute as the roll-up makes them in one go.
    assert_eq!(gpu_minutes(&s).await, gpu_minutes(&other).await);

    // Retention drops a packed day once all of it is past.
    let r = s
        .live
        .roll_up(day + DAY_MS + 3_600_000, day + DAY_MS - 1)
        .await
        .unwrap();
    assert_eq!(
        count(&s, "SELECT count(*) FROM gpu_samples_1m_packed").await,
        1,
        "{r:?}"
    );
    s.live
        .roll_up(day + DAY_MS + 3_600_000, day + DAY_MS)
        .await
        .unwrap();
    for t in ["gpu", "process", "allocator"] {
        let n = count(&s, &format!("SELECT count(*) FROM {t}_samples_1m_packed")).await;
        assert_eq!(n, 0, "{t}");
    }
}
