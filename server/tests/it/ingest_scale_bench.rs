//! Issue 38, item 10: what one batch costs to store by the number of series it carries. Before,
//! the newest reading of each series was found by a linear search per sample and each GPU's
//! owner by a query per GPU, so the cost per series grew with the batch (60,000 GPUs in one
//! batch: 12 s). It is linear now: the cost per series stays flat from 250 to 4,000 series. A
//! benchmark that prints figures, not a timed test:
//! `cargo test --release -p server --test it -- ingest_scale_bench:: --ignored --nocapture`.

use std::time::Instant;

use axum::body::Body;
use axum::http::{Request, StatusCode};

use crate::support::app::respond;
use crate::support::scenario::gpu;

const TOKEN: &str = "scale-0123456789abcdef";

/// A batch of `series` process series on 8 GPUs (two readings each, the second the newest).
fn batch(seq: u64, series: usize) -> wire::Batch {
    let mut b = wire::Batch::new("scale", seq, "scale");
    let now = server::now_ms();
    for i in 0..8 {
        let mut g = gpu(&format!("GPU-scale-{i}"), now, 1 << 30);
        g.index = i;
        b.gpus.push(g);
    }
    for reading in 0..2 {
        for p in 0..series - 8 {
            b.processes.push(wire::ProcessSample {
                time_ms: now - 1000 + reading * 500,
                gpu_uuid: format!("GPU-scale-{}", p % 8),
                pid: 10_000 + p as u32,
                start_time_ms: Some(seq as i64),
                name: Some("python".into()),
                cgroup: None,
                used_bytes: 1 << 20,
            });
        }
    }
    b
}

#[tokio::test]
#[ignore = "a benchmark: run with --ignored --nocapture"]
async fn a_batchs_cost_is_linear_in_its_series() {
    let s = crate::support::app::app_state("ingest-scale", &[&format!("scale={TOKEN}")]).await;
    println!("series  ms/batch  µs/series  (median of 5 batches, SQLite, this machine)");
    let mut per_series = Vec::new();
    let mut seq = 1;
    for series in [250usize, 500, 1000, 2000, 4000] {
        let mut times = Vec::new();
        for _ in 0..5 {
            let body = serde_json::to_vec(&batch(seq, series)).unwrap();
            seq += 1;
            let req = Request::post(api::routes::INGEST)
                .header("authorization", format!("Bearer {TOKEN}"))
                .body(Body::from(body))
                .unwrap();
            let started = Instant::now();
            let (st, text) = respond(&s, req).await;
            times.push(started.elapsed().as_secs_f64() * 1e3);
            assert_eq!(st, StatusCode::OK, "{}", String::from_utf8_lossy(&text));
        }
        times.sort_by(f64::total_cmp);
        let ms = times[2];
        per_series.push(ms * 1e3 / series as f64);
        println!(
            "{series:>6}  {ms:>8.1}  {:>9.1}",
            per_series.last().unwrap()
        );
    }
    println!(
        "cost per series at 4,000 over at 250: {:.2}× (linear: about 1; quadratic: 16)",
        per_series[4] / per_series[0]
    );
}
