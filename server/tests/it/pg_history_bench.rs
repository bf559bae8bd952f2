//! Benchmark (issue 16; figures, not a timed test): the live pages' queries on PostgreSQL over a
//! fleet's history. 1,000 hosts × 8 GPUs (env `MEMSCOPE_BENCH_HOSTS`), each GPU running one
//! training process with the in-process agent for the whole history, jobs of 3–12 hours at their
//! own memory level (`level`). `MEMSCOPE_BENCH_DAYS` (default 30) whole days of one-minute
//! roll-ups in all three tables (GPU, process NVML, allocator): the days before yesterday
//! written packed (`server::live::days`, the code the roll-up packs with), yesterday and today
//! as one-minute rows, minute after minute as the roll-up writes them; the last 10 minutes as
//! raw 1 Hz samples through `Library::ingest_batch` (which also fills hosts, GPUs, processes and
//! the latest-value tables as live ingest does). Then the roll-up packs yesterday, timed.
//!
//! Then, through the router: the fleet page, and GPU and process pages (random GPU / process
//! each time) over the last 10 minutes, hour, day and the whole history; p50 / p95 / max of
//! `MEMSCOPE_BENCH_QUERIES` (default 200) answers each, plus the plans' partition counts.
//!
//! ```sh
//! cargo test --release -p server --test it -- pg_history_bench:: --ignored --nocapture
//! ```
//! Uses `MEMSCOPE_BENCH_DATABASE_URL` if set, else a throwaway cluster with PostgreSQL's
//! durable defaults (`scripts/pg-cluster`, fsync on) in the temporary folder. 30 days take ~40
//! GB of disk at their peak (yesterday's one-minute rows before they are packed) and ~25 minutes
//! on a 2-core machine; `MEMSCOPE_BENCH_DAYS=0` measures the fleet page alone.

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

const MIB: i64 = 1 << 20;
const GIB: i64 = 1 << 30;

/// A hash of a few numbers (splitmix64): the history's "randomness", the same on every run.
fn h(parts: &[i64]) -> i64 {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for &p in parts {
        x = (x ^ p as u64).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x ^= x >> 31;
        x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
        x ^= x >> 29;
    }
    (x >> 1) as i64
}

/// What GPU `g` holds in minute `m` (minutes since the epoch): jobs of 3 to 12 hours, each at
/// its own level (16 to 76 GiB, in 2 MiB steps), one in five an idle stretch at 600 MiB; within
/// a job NVML's reading moves by a few 2 MiB steps.
fn level(g: i64, m: i64) -> (i64, bool) {
    let len = 180 + h(&[g, 1]) % 540;
    let job = (m + h(&[g, 2]) % len) / len;
    if h(&[g, job, 3]) % 5 == 0 {
        return (600 * MIB, false);
    }
    (16 * GIB + (h(&[g, job, 4]) % 30_720) * 2 * MIB, true)
}

/// One minute's values of each one-minute table, in `server::live::days` field order.
fn gpu_minute(g: i64, m: i64) -> Vec<Option<i64>> {
    let (l, busy) = level(g, m);
    let max = l + (h(&[g, m, 5]) % 4) * 2 * MIB;
    let min = max - (h(&[g, m, 6]) % 3) * 2 * MIB;
    let util = if busy { 85 + h(&[g, m, 7]) % 15 } else { 0 };
    [
        60,
        min,
        max,
        (min + max) / 2,
        500 * MIB,
        util,
        45 + util / 4 + h(&[g, m, 8]) % 3,
        100_000 + util * 6_000 + h(&[g, m, 9]) % 5_000,
    ]
    .map(Some)
    .to_vec()
}

fn process_minute(g: i64, m: i64) -> Vec<Option<i64>> {
    let (l, _) = level(g, m);
    let max = l - 300 * MIB + (h(&[g, m, 5]) % 4) * 2 * MIB;
    let min = max - (h(&[g, m, 6]) % 3) * 2 * MIB;
    [60, min, max, (min + max) / 2].map(Some).to_vec()
}

fn allocator_minute(g: i64, m: i64, started_ms: i64) -> Vec<Option<i64>> {
    let (l, _) = level(g, m);
    let reserved = l - GIB;
    let max = reserved - (h(&[g, m, 10]) % 64) * MIB;
    let min = max - (1 + h(&[g, m, 11]) % 8) * GIB;
    [
        60,
        (m * MINUTE_MS - started_ms) / 1000 + 59,
        min,
        max,
        (min + max) / 2,
        reserved,
        reserved - (h(&[g, m, 12]) % 2) * 20 * MIB,
        (h(&[g, m, 13]) % 300) * MIB,
        0,
        0,
    ]
    .map(Some)
    .to_vec()
}

/// One minute of the whole fleet written into the three one-minute tables (one multi-row insert
/// each, from arrays); returns the rows written.
async fn write_minute(
    pool: &sqlx::PgPool,
    uuids: &[String],
    minute_ms: i64,
    started_ms: i64,
) -> u64 {
    let m = minute_ms / MINUTE_MS;
    let n = uuids.len() as i64;
    let hosts: Vec<String> = (0..n).map(|g| host_name(g / GPUS_PER_HOST)).collect();
    let idx: Vec<i64> = (0..n).map(|g| g % GPUS_PER_HOST).collect();
    let pids: Vec<i64> = idx.iter().map(|i| 4000 + i).collect();
    let column = |rows: &[Vec<Option<i64>>], f: usize| -> Vec<Option<i64>> {
        rows.iter().map(|r| r[f]).collect()
    };
    let mut written = 0;
    let gpu: Vec<_> = (0..n).map(|g| gpu_minute(g, m)).collect();
    let mut q = sqlx::query(
        "INSERT INTO gpu_samples_1m (gpu_uuid, minute_ms, n, used_min_bytes, used_max_bytes, used_mean_bytes, \
         reserved_bytes, gpu_util_mean, temperature_max_c, power_mean_mw) \
         SELECT u, $2, n, a, b, c, d, e, f, g FROM UNNEST($1::text[], $3::bigint[], $4::bigint[], $5::bigint[], \
         $6::bigint[], $7::bigint[], $8::bigint[], $9::bigint[], $10::bigint[]) AS x(u, n, a, b, c, d, e, f, g)",
    )
    .bind(uuids)
    .bind(minute_ms);
    for f in 0..8 {
        q = q.bind(column(&gpu, f));
    }
    written += q.execute(pool).await.unwrap().rows_affected();
    let process: Vec<_> = (0..n).map(|g| process_minute(g, m)).collect();
    let mut q = sqlx::query(
        "INSERT INTO process_samples_1m (host, gpu_uuid, pid, start_time_ms, minute_ms, name, n, used_min_bytes, \
         used_max_bytes, used_mean_bytes) \
         SELECT h, u, p, $4, $5, 'python3', n, a, b, c FROM UNNEST($1::text[], $2::text[], $3::bigint[], \
         $6::bigint[], $7::bigint[], $8::bigint[], $9::bigint[]) AS x(h, u, p, n, a, b, c)",
    )
    .bind(&hosts)
    .bind(uuids)
    .bind(&pids)
    .bind(started_ms)
    .bind(minute_ms);
    for f in 0..4 {
        q = q.bind(column(&process, f));
    }
    written += q.execute(pool).await.unwrap().rows_affected();
    let alloc: Vec<_> = (0..n).map(|g| allocator_minute(g, m, started_ms)).collect();
    let mut q = sqlx::query(
        "INSERT INTO allocator_samples_1m (host, pid, start_time_ms, device, gpu_uuid, minute_ms, n, last_step, \
         allocated_min_bytes, allocated_max_bytes, allocated_mean_bytes, reserved_max_bytes, reserved_mean_bytes, \
         inactive_split_max_bytes, alloc_retries, ooms) \
         SELECT h, p, $3, d, u, $6, n, s, a, b, c, r, rm, i, rt, o FROM UNNEST($1::text[], $2::bigint[], \
         $4::bigint[], $5::text[], $7::bigint[], $8::bigint[], $9::bigint[], $10::bigint[], $11::bigint[], \
         $12::bigint[], $13::bigint[], $14::bigint[], $15::bigint[], $16::bigint[]) \
         AS x(h, p, d, u, n, s, a, b, c, r, rm, i, rt, o)",
    )
    .bind(&hosts)
    .bind(&pids)
    .bind(started_ms)
    .bind(&idx)
    .bind(uuids)
    .bind(minute_ms);
    for f in 0..10 {
        q = q.bind(column(&alloc, f));
    }
    written += q.execute(pool).await.unwrap().rows_affected();
    written
}

/// One whole day of one table, every series, written packed (`server::live::days`' own
/// packing of the values `write_minute` would have written); returns the series-days written.
async fn write_packed_day(
    pool: &sqlx::PgPool,
    table: &server::live::days::Table,
    uuids: &[String],
    day_ms: i64,
    started_ms: i64,
) -> u64 {
    use server::live::days::{KeyValue, SeriesDay};
    let minutes: Vec<i64> = (0..DAY_MS / MINUTE_MS).collect();
    let first = day_ms / MINUTE_MS;
    let mut written = 0;
    for chunk in (0..uuids.len() as i64).collect::<Vec<_>>().chunks(500) {
        let mut keys: Vec<Vec<KeyValue>> = Vec::new();
        let mut packed: Vec<(Vec<u8>, Vec<Vec<u8>>)> = Vec::new();
        for &g in chunk {
            let uuid = KeyValue::Text(Some(uuids[g as usize].clone()));
            let host = KeyValue::Text(Some(host_name(g / GPUS_PER_HOST)));
            let (pid, idx) = (
                KeyValue::Int(Some(4000 + g % GPUS_PER_HOST)),
                KeyValue::Int(Some(g % GPUS_PER_HOST)),
            );
            let start = KeyValue::Int(Some(started_ms));
            let (key, values): (Vec<KeyValue>, Vec<Vec<Option<i64>>>) = match table.rolled {
                "gpu_samples_1m" => (
                    vec![uuid],
                    minutes.iter().map(|m| gpu_minute(g, first + m)).collect(),
                ),
                "process_samples_1m" => (
                    vec![host, uuid, pid, start],
                    minutes
                        .iter()
                        .map(|m| process_minute(g, first + m))
                        .collect(),
                ),
                _ => (
                    vec![host, pid, start, idx, uuid],
                    minutes
                        .iter()
                        .map(|m| allocator_minute(g, first + m, started_ms))
                        .collect(),
                ),
            };
            let day = SeriesDay {
                key: key.clone(),
                day_ms,
                attr: table.attr.map(|_| "python3".to_string()),
                minutes: minutes.clone(),
                columns: (0..table.fields.len())
                    .map(|f| values.iter().map(|v| v[f]).collect())
                    .collect(),
            };
            keys.push(key);
            packed.push(day.pack());
        }
        // Key columns as text or bigint arrays, then day, minutes and the fields as bytea arrays.
        let mut casts = Vec::new();
        let mut q_keys: Vec<Vec<KeyValue>> = vec![Vec::new(); table.key.len()];
        for k in &keys {
            for (i, v) in k.iter().enumerate() {
                q_keys[i].push(v.clone());
            }
        }
        let attr: Vec<&str> = table.attr.into_iter().collect();
        let mut columns: Vec<&str> = table.key.iter().map(|k| k.0).collect();
        columns.extend(&attr);
        columns.extend(["day_ms", "minutes"]);
        columns.extend(table.fields.iter().map(|f| f.0));
        let mut i = 0;
        for (_, ty, _) in table.key {
            i += 1;
            casts.push(format!(
                "${i}::{}[]",
                if *ty == server::live::days::KeyType::Text {
                    "text"
                } else {
                    "bigint"
                }
            ));
        }
        let attr_sql = if table.attr.is_some() {
            "'python3', "
        } else {
            ""
        };
        let n_blobs = 1 + table.fields.len();
        for _ in 0..n_blobs {
            i += 1;
            casts.push(format!("${i}::bytea[]"));
        }
        let names: Vec<String> = (0..casts.len()).map(|c| format!("c{c}")).collect();
        let nk = table.key.len();
        let sql = format!(
            "INSERT INTO {} ({}) SELECT {}, {attr_sql}{day_ms}, {} FROM UNNEST({}) AS x({})",
            table.packed,
            columns.join(", "),
            names[..nk].join(", "),
            names[nk..].join(", "),
            casts.join(", "),
            names.join(", ")
        );
        let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
        for (i, (_, ty, _)) in table.key.iter().enumerate() {
            q = match ty {
                server::live::days::KeyType::Text => q.bind(
                    q_keys[i]
                        .iter()
                        .map(|v| match v {
                            KeyValue::Text(t) => t.clone(),
                            KeyValue::Int(_) => unreachable!(),
                        })
                        .collect::<Vec<Option<String>>>(),
                ),
                server::live::days::KeyType::Int => q.bind(
                    q_keys[i]
                        .iter()
                        .map(|v| match v {
                            KeyValue::Int(t) => *t,
                            KeyValue::Text(_) => unreachable!(),
                        })
                        .collect::<Vec<Option<i64>>>(),
                ),
            };
        }
        q = q.bind(packed.iter().map(|p| p.0.clone()).collect::<Vec<Vec<u8>>>());
        for f in 0..table.fields.len() {
            q = q.bind(
                packed
                    .iter()
                    .map(|p| p.1[f].clone())
                    .collect::<Vec<Vec<u8>>>(),
            );
        }
        written += q.execute(pool).await.unwrap().rows_affected();
    }
    written
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
#[ignore = "a benchmark: run with --ignored --nocapture (needs PostgreSQL and ~40 GB of disk)"]
async fn live_pages_over_a_fleet_history() {
    let hosts = env("MEMSCOPE_BENCH_HOSTS", 1000);
    let days = env("MEMSCOPE_BENCH_DAYS", 30);
    let queries = env("MEMSCOPE_BENCH_QUERIES", 200) as usize;
    let gpus = hosts * GPUS_PER_HOST;
    let given = std::env::var("MEMSCOPE_BENCH_DATABASE_URL").ok();
    let cluster = given
        .is_none()
        .then(|| crate::support::pg::Cluster::start_durable("history-bench"));
    let url = given.unwrap_or_else(|| cluster.as_ref().unwrap().url.clone());
    let dir = std::env::temp_dir().join(format!("memscope-history-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let s = AppState::open(ServeArgs {
        database_url: Some(url.clone()),
        ..ServeArgs::for_data_dir(dir.clone())
    })
    .await
    .unwrap();
    let Some(pool) = s.library.db.as_postgres() else {
        panic!("a PostgreSQL benchmark")
    };

    let now = server::now_ms();
    let raw_from = (now - RAW_MS) / MINUTE_MS * MINUTE_MS;
    let today = raw_from / DAY_MS * DAY_MS;
    let history_from = today - days * DAY_MS;
    let started_ms = history_from - MINUTE_MS;
    println!(
        "fleet: {hosts} hosts x {GPUS_PER_HOST} GPUs = {gpus} GPUs, one process with the agent on each; \
         {days} whole day(s) of one-minute roll-ups and today's {:.1} h, then {} min of raw 1 Hz samples",
        (raw_from - today) as f64 / 3.6e6,
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

    // The history. Days before yesterday are written packed, as the roll-up leaves a day once
    // it is over (`server::live::days`, the same code packs them); yesterday and today (to the
    // raw samples) as one-minute rows, minute after minute as the roll-up writes them. The
    // roll-up below then packs yesterday, timed.
    let t = Instant::now();
    let mut packed_series_days = 0u64;
    for d in 1..days {
        let day_ms = today - (days - d + 1) * DAY_MS;
        for table in server::live::days::TABLES {
            packed_series_days += write_packed_day(pool, table, &uuids, day_ms, started_ms).await;
        }
    }
    println!(
        "  {} day(s) written packed: {packed_series_days} series-days in {:.0} s",
        days - 1,
        t.elapsed().as_secs_f64()
    );
    let mut rows_total = 0u64;
    // MEMSCOPE_BENCH_DAYS=0: no history at all (the fleet page, which must not depend on it).
    let minutes = if days == 0 {
        vec![]
    } else {
        vec![
            ("yesterday", today - DAY_MS, today),
            ("today", today, raw_from),
        ]
    };
    for (what, from, to) in minutes {
        let t = Instant::now();
        let mut rows = 0u64;
        let mut minute = from;
        while minute < to {
            rows += write_minute(pool, &uuids, minute, started_ms).await;
            minute += MINUTE_MS;
        }
        rows_total += rows;
        println!(
            "  {what}: {rows} one-minute rows (3 tables) in {:.0} s",
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
            raw += s.live.ingest_batch(&b, &host).await.unwrap().stored;
        }
        chunk += 100_000;
    }
    rows_total += raw;
    println!(
        "  raw samples (last {} min, through ingest): {raw} in {:.0} s",
        RAW_MS / MINUTE_MS,
        t.elapsed().as_secs_f64()
    );
    let sizes = |tables: &'static str| async move {
        let b: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint FROM pg_class c \
             WHERE c.oid IN (SELECT inhrelid FROM pg_inherits i JOIN pg_class p ON p.oid = i.inhparent \
             WHERE p.relname IN ({tables})) OR c.relname IN ({tables})"
        )))
        .fetch_one(pool)
        .await
        .unwrap();
        b as f64
    };
    const ONE_MINUTE: &str = "'gpu_samples_1m', 'process_samples_1m', 'allocator_samples_1m'";
    const PACKED: &str =
        "'gpu_samples_1m_packed', 'process_samples_1m_packed', 'allocator_samples_1m_packed'";
    let minute_bytes = sizes(ONE_MINUTE).await;
    println!(
        "  one-minute rows: {:.1} GB for yesterday and today, {:.0} B a row incl. indexes",
        minute_bytes / 1e9,
        minute_bytes / rows_total.max(1) as f64
    );
    rows_total += raw;

    // Yesterday is over: the roll-up packs it (nothing is past the 30-day retention).
    let t = Instant::now();
    let r = s.live.roll_up(raw_from, history_from).await.unwrap();
    println!(
        "roll-up packing yesterday: {} one-minute rows into {} series-days in {:.1} s ({r:?})",
        r.packed_rows,
        r.packed_series_days,
        t.elapsed().as_secs_f64()
    );
    // Autovacuum keeps the open day's visibility map for index-only scans; do its work now
    // rather than have it run during the queries.
    sqlx::query("VACUUM (ANALYZE) gpu_samples_1m, process_samples_1m, allocator_samples_1m")
        .execute(pool)
        .await
        .unwrap();
    sqlx::query("ANALYZE").execute(pool).await.unwrap();
    let bytes: i64 = sqlx::query_scalar("SELECT pg_database_size(current_database())")
        .fetch_one(pool)
        .await
        .unwrap();
    let packed_bytes = sizes(PACKED).await;
    let series_days: i64 = sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM gpu_samples_1m_packed) + (SELECT count(*) FROM process_samples_1m_packed) \
         + (SELECT count(*) FROM allocator_samples_1m_packed)",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    let yesterday_bytes: i64 = sqlx::query_scalar(
        "SELECT (SELECT sum(pg_column_size(t.*)) FROM gpu_samples_1m_packed t WHERE day_ms = $1) \
         + (SELECT sum(pg_column_size(t.*)) FROM process_samples_1m_packed t WHERE day_ms = $1) \
         + (SELECT sum(pg_column_size(t.*)) FROM allocator_samples_1m_packed t WHERE day_ms = $1)",
    )
    .bind(today - DAY_MS)
    .fetch_one(pool)
    .await
    .unwrap();
    let per_day = packed_bytes / days.max(1) as f64;
    println!(
        "store: {:.1} GB in all; packed: {:.2} GB for {days} days = {:.0} MB a fleet-day, {:.0} B a series-day \
         (yesterday's, packed by the roll-up: {:.0} B a series-day, rows as stored); 30 days packed plus a day of \
         one-minute rows: {:.1} GB (one-minute rows only: {:.0} GB); made in {:.0} s",
        bytes as f64 / 1e9,
        packed_bytes / 1e9,
        per_day / 1e6,
        packed_bytes / series_days.max(1) as f64,
        yesterday_bytes as f64 / (3 * gpus) as f64,
        (per_day * 30.0 + minute_bytes / ((DAY_MS + raw_from - today) as f64 / DAY_MS as f64))
            / 1e9,
        minute_bytes / ((DAY_MS + raw_from - today) as f64 / DAY_MS as f64) * 30.0 / 1e9,
        made.elapsed().as_secs_f64()
    );
    println!("  ({rows_total} rows written as rows: one-minute and raw)");

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
    let mut rng = crate::support::stats::Rng(0x9e37_79b9_7f4a_7c15);
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
        // Windows end where the samples end: making the store takes many minutes, and a window
        // of the last minutes by the clock would by now hold none of them.
        let q = api::WindowQuery {
            from_ms: Some(now - (minutes * 60_000.0) as i64),
            to_ms: Some(now),
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
            crate::support::stats::percentile(&mut v, 0.5),
            crate::support::stats::percentile(&mut v, 0.95),
            crate::support::stats::percentile(&mut v, 1.0),
        );
        println!(
            "{what:<32} {count:>5} {p50:>9.1} {p95:>9.1} {max:>9.1} {:>8.0}K",
            n as f64 / 1e3
        );
    }
    drop(s);
    let _ = std::fs::remove_dir_all(&dir);
}
