//! Benchmark (issue 16; figures, not a timed test): the live pages' queries on PostgreSQL over a
//! fleet's history. 1,000 hosts × 8 GPUs (env `MEMSCOPE_BENCH_HOSTS`), each GPU running one
//! training process with the in-process agent for the whole history; `MEMSCOPE_BENCH_DAYS`
//! (default 2) days of one-minute roll-ups in all three roll-up tables (GPU, process NVML,
//! allocator), written straight into the day partitions in the order the roll-up writes them
//! (minute after minute, every series); day partitions made for the whole 30-day retention;
//! and the last 10 minutes as raw 1 Hz samples, stored through `Library::ingest_batch` (which
//! also fills hosts, GPUs, processes and the latest-value tables as live ingest does).
//!
//! Then, through the router: the fleet page, and GPU and process pages (random GPU / process
//! each time) over the last 10 minutes, hour, day and the whole history; p50 / p95 / max of
//! `MEMSCOPE_BENCH_QUERIES` (default 200) answers each, plus the plans' partition counts.
//!
//! ```sh
//! cargo test --release -p server --test pg_history_bench -- --ignored --nocapture
//! ```
//! Uses `MEMSCOPE_BENCH_DATABASE_URL` if set, else a throwaway cluster with PostgreSQL's
//! durable defaults (`scripts/pg-cluster`, fsync on) in the temporary folder. A full day of the
//! whole fleet is ~11.5M rows per roll-up table; see bench/README.md for sizes.

#[path = "common/pg.rs"]
mod pg;
#[path = "common/stats.rs"]
mod stats;

use std::time::Instant;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use server::config::ServeArgs;
use server::state::AppState;
use tower::ServiceExt;

const MINUTE_MS: i64 = 60_000;
const DAY_MS: i64 = 86_400_000;
/// Raw samples kept before the roll-up folds them (the store as it stands after a roll-up with
/// `--raw-retention-hours` of 10 minutes: at 8,000 GPUs and 1 Hz the default 48 h would be 1.4
/// billion raw GPU rows).
const RAW_MS: i64 = 10 * MINUTE_MS;
const GPUS_PER_HOST: i64 = 8;

fn env(k: &str, d: i64) -> i64 {
    std::env::var(k)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(d)
}

fn host_name(h: i64) -> String {
    format!("host-{h:04}")
}

/// Milliseconds to answer `uri` (status 200 asserted) and the answer's size.
async fn answer(s: &AppState, uri: &str) -> (f64, usize) {
    let t = Instant::now();
    let res = server::http::app(s.clone())
        .oneshot(Request::builder().uri(uri).body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = res.status();
    let body = res.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(
        status,
        StatusCode::OK,
        "{uri}: {}",
        String::from_utf8_lossy(&body)
    );
    (t.elapsed().as_secs_f64() * 1000.0, body.len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: run with --ignored --nocapture (needs PostgreSQL and ~14 GB of disk a day)"]
async fn live_pages_over_a_fleet_history() {
    let hosts = env("MEMSCOPE_BENCH_HOSTS", 1000);
    let days = env("MEMSCOPE_BENCH_DAYS", 2);
    let queries = env("MEMSCOPE_BENCH_QUERIES", 200) as usize;
    let gpus = hosts * GPUS_PER_HOST;
    let given = std::env::var("MEMSCOPE_BENCH_DATABASE_URL").ok();
    let cluster = given
        .is_none()
        .then(|| pg::Cluster::start_durable("history-bench"));
    let url = given.unwrap_or_else(|| cluster.as_ref().unwrap().url.clone());
    let dir = std::env::temp_dir().join(format!("memscope-history-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let s = AppState::open(ServeArgs {
        database_url: Some(url.clone()),
        ..ServeArgs::for_data_dir(dir.clone())
    })
    .await
    .unwrap();
    let server::db::Db::Postgres(pool) = &s.library.db else {
        panic!("a PostgreSQL benchmark")
    };

    let now = server::now_ms();
    let raw_from = (now - RAW_MS) / MINUTE_MS * MINUTE_MS;
    let history_from = raw_from - days * DAY_MS;
    let started_ms = history_from - MINUTE_MS;
    println!(
        "fleet: {hosts} hosts x {GPUS_PER_HOST} GPUs = {gpus} GPUs, one process with the agent on each; \
         {days} day(s) of one-minute roll-ups, then {} min of raw 1 Hz samples",
        RAW_MS / MINUTE_MS
    );

    // Day partitions for the whole retention (30 days back) and the coming days.
    let made = Instant::now();
    sqlx::query("SELECT memscope_day_partitions($1, $2)")
        .bind(now - 30 * DAY_MS)
        .bind(now + 2 * DAY_MS)
        .execute(pool)
        .await
        .unwrap();
    // The fleet's series, named as the raw batches below name them.
    sqlx::query(
        "CREATE UNLOGGED TABLE bench_gpu AS SELECT g, \
         'GPU-' || md5('gpu-' || g)::uuid::text AS uuid, \
         'host-' || lpad((g / 8)::text, 4, '0') AS host, g % 8 AS idx \
         FROM generate_series(0, $1 - 1) g",
    )
    .bind(gpus)
    .execute(pool)
    .await
    .unwrap();
    let uuids: Vec<String> = sqlx::query_scalar("SELECT uuid FROM bench_gpu ORDER BY g")
        .fetch_all(pool)
        .await
        .unwrap();

    // The history, a day partition at a time, minute-major as the roll-up inserts.
    let tables = [
        (
            "gpu_samples_1m",
            "INSERT INTO gpu_samples_1m (gpu_uuid, minute_ms, n, used_min_bytes, used_max_bytes, used_mean_bytes, \
             reserved_bytes, gpu_util_mean, temperature_max_c, power_mean_mw) \
             SELECT x.uuid, m, 60, u - 400000000, u, u - 200000000, 500000000, 90 + (m / 60000 + x.g) % 10, \
             60 + (m / 60000 + x.g) % 15, 600000 + (m / 60000 * 7 + x.g) % 100000 \
             FROM generate_series($1::bigint, $2::bigint - 1, 60000) m \
             CROSS JOIN LATERAL (SELECT g, uuid, 60000000000 + ((m / 60000) * 7919 + g * 104729) % 20000000000 AS u \
                                 FROM bench_gpu WHERE m >= 0) x",
        ),
        (
            "process_samples_1m",
            "INSERT INTO process_samples_1m (host, gpu_uuid, pid, start_time_ms, minute_ms, name, n, used_min_bytes, \
             used_max_bytes, used_mean_bytes) \
             SELECT x.host, x.uuid, 4000 + x.idx, $3, m, 'python3', 60, u - 300000000, u, u - 150000000 \
             FROM generate_series($1::bigint, $2::bigint - 1, 60000) m \
             CROSS JOIN LATERAL (SELECT g, uuid, host, idx, 50000000000 + ((m / 60000) * 7919 + g * 104729) % 20000000000 AS u \
                                 FROM bench_gpu WHERE m >= 0) x",
        ),
        (
            "allocator_samples_1m",
            "INSERT INTO allocator_samples_1m (host, pid, start_time_ms, device, gpu_uuid, minute_ms, n, last_step, \
             allocated_min_bytes, allocated_max_bytes, allocated_mean_bytes, reserved_max_bytes, reserved_mean_bytes, \
             inactive_split_max_bytes, alloc_retries, ooms) \
             SELECT x.host, 4000 + x.idx, $3, x.idx, x.uuid, m, 60, (m - $3) / 1000, u - 8000000000, u, u - 4000000000, \
             u + 2000000000, u + 1500000000, 300000000, 0, 0 \
             FROM generate_series($1::bigint, $2::bigint - 1, 60000) m \
             CROSS JOIN LATERAL (SELECT g, uuid, host, idx, 40000000000 + ((m / 60000) * 7919 + g * 104729) % 20000000000 AS u \
                                 FROM bench_gpu WHERE m >= 0) x",
        ),
    ];
    let mut rows_total = 0u64;
    for (table, sql) in tables {
        let t = Instant::now();
        let mut rows = 0u64;
        let mut day = history_from.div_euclid(DAY_MS) * DAY_MS;
        while day < raw_from {
            let (from, to) = (day.max(history_from), (day + DAY_MS).min(raw_from));
            rows += sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(from)
                .bind(to)
                .bind(started_ms)
                .execute(pool)
                .await
                .unwrap()
                .rows_affected();
            day += DAY_MS;
        }
        rows_total += rows;
        println!(
            "  {table}: {rows} rows in {:.0} s",
            t.elapsed().as_secs_f64()
        );
    }

    // The last 10 minutes raw, through ingest: one batch per host per 100 s (8 GPUs, 8
    // processes, 8 allocator devices at 1 Hz).
    let t = Instant::now();
    let mut raw = 0u64;
    let mut seq = 0u64;
    let mut chunk = raw_from;
    while chunk < now {
        seq += 1;
        for h in 0..hosts {
            let host = host_name(h);
            let mut b = wire::Batch::new(&host, seq, &host);
            for second in 0..100 {
                let time_ms = chunk + second * 1000;
                if time_ms >= now {
                    break;
                }
                for i in 0..GPUS_PER_HOST {
                    let uuid = &uuids[(h * GPUS_PER_HOST + i) as usize];
                    let wave = ((time_ms / 1000 + i * 37) % 600) as u64 * 10_000_000;
                    b.gpus.push(wire::GpuSample {
                        time_ms,
                        uuid: uuid.clone(),
                        index: i as u32,
                        name: Some("NVIDIA H200".into()),
                        memory_used_bytes: Some(60_000_000_000 + wave),
                        memory_free_bytes: Some(80_000_000_000 - wave),
                        memory_total_bytes: Some(150_000_000_000),
                        memory_reserved_bytes: Some(500_000_000),
                        gpu_util_percent: Some(95),
                        mem_util_percent: Some(40),
                        temperature_c: Some(63),
                        power_mw: Some(650_000),
                    });
                    b.processes.push(wire::ProcessSample {
                        time_ms,
                        gpu_uuid: uuid.clone(),
                        pid: 4000 + i as u32,
                        start_time_ms: Some(started_ms),
                        name: Some("python3".into()),
                        cgroup: Some(format!("/jobs/train-{h}")),
                        used_bytes: 50_000_000_000 + wave,
                    });
                    b.allocator.push(wire::AllocatorSample {
                        time_ms,
                        pid: 4000 + i as u32,
                        start_time_ms: Some(started_ms),
                        device: i as i32,
                        gpu_uuid: Some(uuid.clone()),
                        step: Some(((time_ms - started_ms) / 1000) as u64),
                        allocated_bytes: 40_000_000_000 + wave,
                        reserved_bytes: 42_000_000_000 + wave,
                        active_bytes: None,
                        inactive_split_bytes: Some(300_000_000),
                        requested_bytes: None,
                        alloc_retries: Some(0),
                        ooms: Some(0),
                        segments: Some(400),
                        largest_free_block_bytes: None,
                    });
                }
            }
            raw += s.library.ingest_batch(&b, &host).await.unwrap().stored;
        }
        chunk += 100_000;
    }
    rows_total += raw;
    println!(
        "  raw samples (last {} min, through ingest): {raw} in {:.0} s",
        RAW_MS / MINUTE_MS,
        t.elapsed().as_secs_f64()
    );
    sqlx::query("ANALYZE").execute(pool).await.unwrap();
    let bytes: i64 = sqlx::query_scalar("SELECT pg_database_size(current_database())")
        .fetch_one(pool)
        .await
        .unwrap();
    let roll_up_bytes: i64 = sqlx::query_scalar(
        "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint FROM pg_inherits i \
         JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_class p ON p.oid = i.inhparent \
         WHERE p.relname IN ('gpu_samples_1m', 'process_samples_1m', 'allocator_samples_1m')",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    let per_day = roll_up_bytes as f64 / days.max(1) as f64;
    println!(
        "store: {rows_total} rows, {:.1} GB ({:.1} GB of roll-ups: {:.0} B per roll-up row incl. indexes, \
         {:.1} GB per fleet-day, {:.0} GB for 30 days); made in {:.0} s",
        bytes as f64 / 1e9,
        roll_up_bytes as f64 / 1e9,
        roll_up_bytes as f64 / (rows_total - raw).max(1) as f64,
        per_day / 1e9,
        per_day * 30.0 / 1e9,
        made.elapsed().as_secs_f64()
    );

    // The plans: a GPU's hour reads the partitions of its window only.
    for (what, sql) in [
        (
            "GPU, last hour",
            format!(
                "EXPLAIN SELECT minute_ms, used_max_bytes FROM gpu_samples_1m WHERE gpu_uuid = '{}' \
                 AND minute_ms BETWEEN {} AND {}",
                uuids[0],
                now - 3_600_000,
                now
            ),
        ),
        (
            "process, whole history",
            format!(
                "EXPLAIN SELECT minute_ms, allocated_max_bytes FROM allocator_samples_1m WHERE host = 'host-0000' \
                 AND pid = 4000 AND start_time_ms = {started_ms} AND minute_ms BETWEEN {history_from} AND {now}"
            ),
        ),
    ] {
        let plan: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
            .fetch_all(pool)
            .await
            .unwrap();
        // A table's scan line names it after " on " (a bitmap's index half does not count).
        let reads: Vec<&str> = plan
            .iter()
            .map(|l| l.trim().trim_start_matches("->").trim())
            .filter(|l| l.contains("Scan") && l.contains(" on ") && !l.starts_with("Bitmap Index"))
            .collect();
        let scans = reads.len();
        let how: Vec<&str> = plan
            .iter()
            .map(|l| l.trim().trim_start_matches("->").trim())
            .filter(|l| l.contains("Scan"))
            .take(2)
            .collect();
        println!("plan, {what}: {scans} partition scan(s), e.g. {how:?}");
    }

    // The pages: `queries` answers each, a random GPU or process each time.
    let mut rng = stats::Rng(0x9e37_79b9_7f4a_7c15);
    let mut pick = |n: i64| (rng.next() % n as u64) as i64;
    let windows = [
        ("10 min", 10.0),
        ("1 hour", 60.0),
        ("1 day", 1440.0),
        ("whole history", (now - history_from) as f64 / 60_000.0),
    ];
    let mut lines = Vec::new();
    let mut fleet = Vec::new();
    let mut fleet_bytes = 0;
    for _ in 0..queries.min(50) {
        let (ms, n) = answer(&s, &api::routes::live_fleet()).await;
        fleet.push(ms);
        fleet_bytes = n;
    }
    lines.push(("fleet page".to_string(), fleet, fleet_bytes));
    for (label, minutes) in windows {
        let q = api::WindowQuery {
            minutes: Some(minutes),
            ..Default::default()
        };
        let (mut gpu, mut process) = (Vec::new(), Vec::new());
        let (mut gpu_bytes, mut process_bytes) = (0, 0);
        for _ in 0..queries {
            let g = pick(gpus);
            let (ms, n) = answer(&s, &api::routes::live_gpu(&uuids[g as usize], &q)).await;
            gpu.push(ms);
            gpu_bytes = n;
            let g = pick(gpus);
            let uri = api::routes::live_process(
                &host_name(g / GPUS_PER_HOST),
                4000 + g % GPUS_PER_HOST,
                &api::WindowQuery {
                    start_time_ms: Some(started_ms),
                    ..q.clone()
                },
            );
            let (ms, n) = answer(&s, &uri).await;
            process.push(ms);
            process_bytes = n;
        }
        lines.push((format!("GPU page, {label}"), gpu, gpu_bytes));
        lines.push((format!("process page, {label}"), process, process_bytes));
    }
    println!(
        "{:<32} {:>5} {:>9} {:>9} {:>9} {:>9}",
        "query", "n", "p50 ms", "p95 ms", "max ms", "answer"
    );
    for (what, mut v, n) in lines {
        let count = v.len();
        let (p50, p95, max) = (
            stats::percentile(&mut v, 0.5),
            stats::percentile(&mut v, 0.95),
            stats::percentile(&mut v, 1.0),
        );
        println!(
            "{what:<32} {count:>5} {p50:>9.1} {p95:>9.1} {max:>9.1} {:>8.0}K",
            n as f64 / 1e3
        );
    }
    drop(s);
    let _ = std::fs::remove_dir_all(&dir);
}
