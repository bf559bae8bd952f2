//! `/metrics` and the fleet page against stored history (issue 13, finding 2): the time to answer
//! with 300k and 3M allocator samples (and as many NVML readings) in the store, and, in the same
//! run, the query `/metrics` used before (the latest sample searched per row) on a 40k-row
//! store, the size the probe found taking 55 s. A benchmark that prints figures, not a timed
//! test: `cargo test --release -p server --test it -- metrics_bench:: --ignored --nocapture`.

use std::time::Instant;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use server::config::ServeArgs;
use server::state::AppState;
use tower::ServiceExt;

/// The query `/metrics` ran before the latest-value tables (migration 0007).
const OLD_LATEST_ALLOCATOR: &str = "SELECT a.host, a.device, sum(a.allocated_bytes), sum(a.reserved_bytes), \
     coalesce(sum(a.alloc_retries), 0), coalesce(sum(a.ooms), 0) FROM allocator_samples a \
     WHERE a.time_ms = (SELECT max(time_ms) FROM allocator_samples b WHERE b.host = a.host AND b.pid = a.pid \
     AND b.device = a.device AND b.start_time_ms IS a.start_time_ms) \
     GROUP BY a.host, a.device ORDER BY a.host, a.device";

/// A store with `rows` allocator samples from 64 processes on 8 hosts (4 devices each) and as
/// many NVML readings of 32 GPUs, written straight into the tables, with the latest-value tables
/// filled as ingest fills them.
async fn store(rows: i64) -> (AppState, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("memscope-metrics-{rows}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let s = AppState::open(ServeArgs::for_data_dir(dir.clone()))
        .await
        .unwrap();
    let db = s.library.db.as_sqlite().expect("a SQLite benchmark");
    for sql in [
        "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ?1) \
         INSERT INTO allocator_samples (host, pid, start_time_ms, device, time_ms, allocated_bytes, reserved_bytes, alloc_retries, ooms) \
         SELECT 'host' || (i % 8), 1000 + i % 64, 1, (i / 64) % 4, 1000000 + i, i % 1000000, 2 * (i % 1000000), 0, 0 FROM n",
        "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ?1) \
         INSERT INTO gpu_samples (gpu_uuid, time_ms, used_bytes, reserved_bytes) \
         SELECT 'GPU-' || (i % 32), 1000000 + i, i % 1000000, 0 FROM n",
        "INSERT OR IGNORE INTO gpus (uuid, host, idx, last_seen_ms) \
         SELECT gpu_uuid, 'host' || (CAST(substr(gpu_uuid, 5) AS INTEGER) % 8), CAST(substr(gpu_uuid, 5) AS INTEGER) / 8, max(time_ms) \
         FROM gpu_samples GROUP BY gpu_uuid",
        "INSERT OR REPLACE INTO allocator_latest (host, pid, start_key, start_time_ms, device, gpu_uuid, time_ms, step, \
         allocated_bytes, reserved_bytes, alloc_retries, ooms) \
         SELECT host, pid, ifnull(start_time_ms, -1), start_time_ms, device, gpu_uuid, max(time_ms), step, \
         allocated_bytes, reserved_bytes, alloc_retries, ooms FROM allocator_samples GROUP BY host, pid, start_time_ms, device",
        "INSERT OR REPLACE INTO gpu_latest (gpu_uuid, time_ms, used_bytes, reserved_bytes) \
         SELECT gpu_uuid, max(time_ms), used_bytes, reserved_bytes FROM gpu_samples GROUP BY gpu_uuid",
    ] {
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(rows)
            .execute(db)
            .await
            .unwrap();
    }
    (s, dir)
}

/// Milliseconds to answer `uri`, best of 5 (and the answer's status).
async fn answer_ms(s: &AppState, uri: &str) -> f64 {
    let mut best = f64::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        let res = server::http::app(s.clone())
            .oneshot(Request::builder().uri(uri).body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::OK, "{uri}");
        let _ = res.into_body().collect().await.unwrap();
        best = best.min(t.elapsed().as_secs_f64() * 1000.0);
    }
    best
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: run with --ignored --nocapture"]
async fn metrics_and_fleet_answer_in_time_independent_of_history() {
    for rows in [300_000i64, 3_000_000] {
        let t = Instant::now();
        let (s, dir) = store(rows).await;
        let fill_s = t.elapsed().as_secs_f64();
        let metrics = answer_ms(&s, "/metrics").await;
        let fleet = answer_ms(&s, &api::routes::live_fleet()).await;
        println!(
            "{rows:>9} allocator samples + {rows} NVML readings (filled in {fill_s:.1} s): /metrics {metrics:.1} ms, fleet {fleet:.1} ms"
        );
        drop(s);
        let _ = std::fs::remove_dir_all(&dir);
    }
    // The query before, on the store size the probe timed (40k rows): the baseline.
    let (s, dir) = store(40_000).await;
    let t = Instant::now();
    let rows: Vec<(String, i64, i64, i64, i64, i64)> = sqlx::query_as(OLD_LATEST_ALLOCATOR)
        .fetch_all(s.library.db.as_sqlite().unwrap())
        .await
        .unwrap();
    let old_ms = t.elapsed().as_secs_f64() * 1000.0;
    let metrics = answer_ms(&s, "/metrics").await;
    println!(
        "   40,000 allocator samples: the old per-row latest query {old_ms:.0} ms ({} series), /metrics now {metrics:.1} ms, {:.0}x",
        rows.len(),
        old_ms / metrics
    );
    drop(s);
    let _ = std::fs::remove_dir_all(&dir);
}
