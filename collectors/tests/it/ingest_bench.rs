//! Benchmark (not a timed test; run it and read the figures): server ingest over HTTP the way
//! collectors send it (gzip JSON batches, `POST /api/ingest`, bearer token), against a real
//! server on a loopback port, into SQLite and into PostgreSQL in the same run (issue 16).
//!
//! `cargo test --release -p collectors --test it -- ingest_bench:: --ignored --nocapture`
//! Env: MEMSCOPE_BENCH_SECONDS (default 20), MEMSCOPE_BENCH_SENDERS (default 4),
//! MEMSCOPE_BENCH_BATCH (samples per batch, default 2000), MEMSCOPE_BENCH_DATABASE_URL (a
//! PostgreSQL database to use; without it a throwaway cluster with PostgreSQL's durable defaults,
//! fsync on, via `scripts/pg-cluster`; `none` skips PostgreSQL).
//!
//! Prints, per backend: sustained samples/s with several senders (full batches: a backlog being
//! drained), and the latency of a collector's normal batch (one second of one 8-GPU host: 8 GPU
//! readings and 16 process readings) on an idle server and while the sustained load runs; then
//! PostgreSQL's rate as a ratio of SQLite's.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::support::{scratch, start_server_on};

/// GPU `i` of `host` (a GPU belongs to one host: the server refuses another's).
fn gpu(host: &str, time_ms: i64, i: u32) -> wire::GpuSample {
    wire::GpuSample {
        time_ms,
        uuid: format!("GPU-{host}-{i}"),
        index: i,
        name: Some("NVIDIA H200".into()),
        memory_used_bytes: Some(40 << 30),
        memory_free_bytes: Some(100 << 30),
        memory_total_bytes: Some(140 << 30),
        memory_reserved_bytes: Some(500 << 20),
        gpu_util_percent: Some(97),
        mem_util_percent: Some(40),
        temperature_c: Some(61),
        power_mw: Some(650_000),
    }
}

fn proc_sample(host: &str, time_ms: i64, i: u32) -> wire::ProcessSample {
    wire::ProcessSample {
        time_ms,
        gpu_uuid: format!("GPU-{host}-{}", i % 8),
        pid: 1000 + i,
        start_time_ms: Some(1),
        name: Some("python3".into()),
        cgroup: Some("/job/123".into()),
        used_bytes: 30 << 30,
    }
}

/// A gzip JSON batch of `n` samples (GPU and process readings, half each).
/// (A token speaks for one host: the latency probes are collector c1's agents on host `c1`, each
/// load sender a host of its own with its own token.)
fn body(collector: &str, host: &str, seq: u64, n: usize, t0: i64) -> Vec<u8> {
    let mut b = wire::Batch::new(collector, seq, host);
    for k in 0..n {
        let t = t0 + (k / 16) as i64 * 1000;
        if k % 2 == 0 {
            b.gpus.push(gpu(host, t, (k % 8) as u32));
        } else {
            b.processes.push(proc_sample(host, t, (k % 16) as u32));
        }
    }
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut e, &serde_json::to_vec(&b).unwrap()).unwrap();
    e.finish().unwrap()
}

/// Where a load sender's batch `seq` starts: a backlog of the last day being drained, batch
/// after batch (16 samples a second), so the rows land in the current days' partitions on
/// PostgreSQL, as a real backlog's would.
fn backlog_ms(seq: u64, per_batch: usize) -> i64 {
    server::now_ms() - 23 * 3_600_000 + seq as i64 * (per_batch as i64 / 16) * 1000
}

/// Batches each sender has encoded before the clock starts.
const PREPARED: u64 = 400;

fn post(agent: &ureq::Agent, url: &str, token: &str, body: &[u8]) {
    let mut r = agent
        .post(url)
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .header("content-encoding", "gzip")
        .send(body)
        .unwrap();
    assert_eq!(
        r.status().as_u16(),
        200,
        "{}",
        r.body_mut().read_to_string().unwrap()
    );
    let _ = r.body_mut().read_to_string();
}

fn percentiles(mut v: Vec<f64>) -> String {
    v.sort_by(f64::total_cmp);
    let p = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    format!(
        "p50 {:.2} ms, p95 {:.2} ms, p99 {:.2} ms, max {:.2} ms (n={})",
        p(0.5),
        p(0.95),
        p(0.99),
        p(1.0),
        v.len()
    )
}

/// Latency of one normal batch (24 samples) every 50 ms for `secs`.
fn latency(url: &str, collector: &str, secs: f64) -> Vec<f64> {
    let agent: ureq::Agent = ureq::Agent::config_builder().build().into();
    let mut out = Vec::new();
    let start = Instant::now();
    let mut seq = 1;
    while start.elapsed().as_secs_f64() < secs {
        let b = body(
            collector,
            "c1",
            seq,
            24,
            server::now_ms() - 3_600_000 + seq as i64 * 1000,
        );
        let t = Instant::now();
        post(&agent, url, "t1-0123456789abcdef", &b);
        out.push(t.elapsed().as_secs_f64() * 1e3);
        seq += 1;
        std::thread::sleep(Duration::from_millis(50));
    }
    out
}

#[test]
#[ignore]
fn ingest_rate_and_latency_over_http() {
    let env = |k: &str, d: u64| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let secs = env("MEMSCOPE_BENCH_SECONDS", 20) as f64;
    let senders = env("MEMSCOPE_BENCH_SENDERS", 4) as usize;
    let per_batch = env("MEMSCOPE_BENCH_BATCH", 2000) as usize;

    let (sqlite, _) = measure("SQLite", None, secs, senders, per_batch);
    let given = std::env::var("MEMSCOPE_BENCH_DATABASE_URL").ok();
    if given.as_deref() == Some("none") {
        return;
    }
    let cluster = given
        .is_none()
        .then(|| crate::support::pg::Cluster::start_durable("ingest-bench"));
    let url = given.unwrap_or_else(|| cluster.as_ref().unwrap().url.clone());
    if let Some(c) = &cluster {
        let settings = c.sql(
            "SELECT current_setting('fsync'), current_setting('synchronous_commit'), version()",
        );
        println!(
            "PostgreSQL: fsync|synchronous_commit|version = {}",
            settings.join(" ")
        );
    }
    let (postgres, n) = measure("PostgreSQL", Some(url), secs, senders, per_batch);
    if let Some(c) = &cluster {
        let bytes: f64 = c.sql("SELECT pg_database_size(current_database())")[0]
            .parse()
            .unwrap();
        println!(
            "database: {:.1} MB for {n} samples ({:.0} B/sample incl. indexes)",
            bytes / 1e6,
            bytes / n as f64
        );
    }
    println!(
        "PostgreSQL / SQLite: {:.2}x the samples/s (same run, same machine)",
        postgres / sqlite
    );
}

/// One backend's figures (printed); returns the sustained samples/s and the samples stored.
fn measure(
    label: &str,
    database_url: Option<String>,
    secs: f64,
    senders: usize,
    per_batch: usize,
) -> (f64, u64) {
    println!("--- {label} ---");
    let (base, port) = scratch(&format!("ingest-bench-{}", label.to_lowercase()));
    let on_postgres = database_url.is_some();
    // Tokens: c1=t1-… (the latency probes) and load-W=t-load-W-… for each sender.
    let tokens: Vec<String> = std::iter::once("c1=t1-0123456789abcdef".to_string())
        .chain((0..senders).map(|w| format!("load-{w}=t-load-{w}-0123456789abcdef")))
        .collect();
    let server = start_server_on(&base.join("lib"), port, database_url, &tokens);
    let url = format!("http://127.0.0.1:{port}/api/ingest");

    let idle = latency(&url, "c1/latency-idle", 3.0);

    // Bodies made ahead (distinct seqs), so the figure is the server's, not the encoder's.
    let prepared: Vec<Vec<Vec<u8>>> = (0..senders)
        .map(|w| {
            (1..=PREPARED)
                .map(|seq| {
                    body(
                        &format!("load-{w}"),
                        &format!("load-{w}"),
                        seq,
                        per_batch,
                        backlog_ms(seq, per_batch),
                    )
                })
                .collect()
        })
        .collect();
    let stored = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let workers: Vec<_> = prepared
        .into_iter()
        .enumerate()
        .map(|(w, bodies)| {
            let (url, stored, stop) = (url.clone(), stored.clone(), stop.clone());
            std::thread::spawn(move || {
                let agent: ureq::Agent = ureq::Agent::config_builder().build().into();
                let mut seq = 1u64;
                while !stop.load(Ordering::Relaxed) {
                    let fresh;
                    let b = match bodies.get(seq as usize - 1) {
                        Some(b) => b,
                        None => {
                            fresh = body(
                                &format!("load-{w}"),
                                &format!("load-{w}"),
                                seq,
                                per_batch,
                                backlog_ms(seq, per_batch),
                            );
                            &fresh
                        }
                    };
                    post(&agent, &url, &format!("t-load-{w}-0123456789abcdef"), b);
                    stored.fetch_add(per_batch as u64, Ordering::Relaxed);
                    seq += 1;
                }
            })
        })
        .collect();
    let loaded = latency(&url, "c1/latency-loaded", secs);
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    let elapsed = start.elapsed().as_secs_f64();
    let n = stored.load(Ordering::Relaxed);
    // Every acknowledged sample is in the store (the totals row is written in each batch's
    // transaction), so the figure counts stored samples, not requests.
    let acknowledged = n + 24 * (idle.len() + loaded.len()) as u64;
    let metrics = ureq::get(&format!("http://127.0.0.1:{port}/metrics"))
        .call()
        .unwrap()
        .body_mut()
        .read_to_string()
        .unwrap();
    let stored_total: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("memscope_ingest_samples_total "))
        .and_then(|v| v.trim().parse().ok())
        .expect("memscope_ingest_samples_total in /metrics");
    assert_eq!(stored_total, acknowledged, "samples stored vs acknowledged");
    println!(
        "ingest over HTTP: {n} samples in {elapsed:.1} s = {:.0} samples/s sustained \
         ({senders} senders on the same machine, {per_batch} samples per gzip batch)",
        n as f64 / elapsed
    );
    println!(
        "latency of a 24-sample batch, idle server:   {}",
        percentiles(idle)
    );
    println!(
        "latency of a 24-sample batch, under load:    {}",
        percentiles(loaded)
    );
    if !on_postgres {
        let db = base.join("lib").join("memscope.db");
        let bytes = std::fs::metadata(&db).map(|m| m.len()).unwrap_or(0) as f64;
        println!(
            "database: {:.1} MB for {} samples ({:.0} B/sample incl. indexes)",
            bytes / 1e6,
            n,
            bytes / n.max(1) as f64
        );
    }
    server.stop();
    let _ = std::fs::remove_dir_all(&base);
    (n as f64 / elapsed, acknowledged)
}
