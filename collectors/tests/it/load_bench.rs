//! The load benchmark of issue 13 (bounded, loopback only): the real `memscope serve` process on a
//! store of 30M rows (15M allocator samples, 15M NVML readings) while 4 collectors sample 8 GPUs
//! and 16 processes each every 100 ms, the dashboard's live queries run back to back (fleet, a
//! GPU page over the last hour, a process page), and `/metrics` is scraped every second, for 10
//! minutes. Prints the ingest rate, query and scrape p50/p95/max, the server's RSS over time, and
//! checks that every sample the collectors spooled was stored exactly once.
//!
//! ```text
//! cargo build --release -p server
//! cargo test --release -p collectors --test it -- load_bench:: --ignored --nocapture
//! ```
//! `MEMSCOPE_LOAD_ROWS` (default 30,000,000) and `MEMSCOPE_LOAD_SECS` (default 600) scale it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use collectors::collector::{self, Config};
use collectors::sender::Sender;
use collectors::source::{Reading, Source};
use collectors::spool::Spool;

/// 8 GPUs and 16 processes of host `host`, with memory that moves.
pub(crate) struct Synthetic {
    pub host: String,
    pub n: u64,
}

impl Source for Synthetic {
    fn read(&mut self, now_ms: i64) -> Reading {
        self.n += 1;
        let gpus = (0..8)
            .map(|i| wire::GpuSample {
                time_ms: now_ms,
                uuid: format!("GPU-{}-{i}", self.host),
                index: i,
                name: Some("NVIDIA H200".into()),
                memory_used_bytes: Some((40 << 30) + (self.n % 1000) * (1 << 20)),
                memory_free_bytes: Some(100 << 30),
                memory_total_bytes: Some(140 << 30),
                memory_reserved_bytes: Some(500 << 20),
                gpu_util_percent: Some(97),
                mem_util_percent: Some(40),
                temperature_c: Some(61),
                power_mw: Some(650_000),
            })
            .collect();
        let processes = (0..16)
            .map(|i| wire::ProcessSample {
                time_ms: now_ms,
                gpu_uuid: format!("GPU-{}-{}", self.host, i % 8),
                pid: 1000 + i,
                start_time_ms: Some(1),
                name: Some("python3".into()),
                cgroup: Some("/job/123".into()),
                used_bytes: (20 << 30) + (self.n % 500) * (1 << 20),
            })
            .collect();
        Reading { gpus, processes }
    }
    fn describe(&self) -> String {
        "synthetic".into()
    }
}

/// A server process, killed however the benchmark ends.
pub(crate) struct Killed(pub std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The tokens of the collectors `four_collectors` starts, for the server's `--collector-token`.
pub(crate) const FOUR_TOKENS: &str = "load0=t0-0123456789abcdef,load1=t1-0123456789abcdef,load2=t2-0123456789abcdef,load3=t3-0123456789abcdef";

/// 4 collectors (hosts `load0`…`load3`, spools under `base`) sampling `Synthetic` every
/// 100 ms, a batch a second, into the server at `url` until `stop`; each thread returns the
/// samples it spooled and what was shipped.
pub(crate) fn four_collectors(
    url: &str,
    stop: &Arc<AtomicBool>,
    base: &std::path::Path,
) -> Vec<std::thread::JoinHandle<(u64, collector::Shipped)>> {
    (0..4)
        .map(|c| {
            let (url, stop, base) = (url.to_string(), stop.clone(), base.to_path_buf());
            std::thread::spawn(move || {
                let host = format!("load{c}");
                collector::run(
                    Config {
                        name: host.clone(),
                        host: host.clone(),
                        interval: Duration::from_millis(100),
                        readings_per_batch: 10,
                        relay: None,
                    },
                    Box::new(Synthetic { host, n: 0 }),
                    Spool::open(&base.join(format!("spool{c}")), 256 << 20),
                    Sender::new(&url, &format!("t{c}-0123456789abcdef")),
                    None,
                    stop,
                )
                .unwrap()
            })
        })
        .collect()
}

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.replace(['_', ','], "").parse().ok())
        .unwrap_or(default)
}

pub(crate) fn rss_mib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

pub(crate) fn percentiles(mut ms: Vec<f64>) -> String {
    if ms.is_empty() {
        return "none".into();
    }
    ms.sort_by(f64::total_cmp);
    let at = |q: f64| ms[((ms.len() - 1) as f64 * q) as usize];
    format!(
        "n={} p50 {:.1} ms, p95 {:.1} ms, max {:.1} ms",
        ms.len(),
        at(0.5),
        at(0.95),
        ms[ms.len() - 1]
    )
}

/// Fills the store with `rows` rows (half allocator samples of 64 processes on 8 hosts, half NVML
/// readings of 32 GPUs), as `metrics_bench` does, and the latest-value tables as ingest would.
fn seed(dir: &std::path::Path, rows: i64) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let lib = server::library::Library::open(dir, None).await.unwrap();
        let db = lib.db.as_sqlite().expect("a SQLite benchmark");
        let half = rows / 2;
        let t0 = collector::now_ms() - 24 * 3_600_000; // the last day: inside raw retention
        for sql in [
            "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ?1) \
             INSERT INTO allocator_samples (host, pid, start_time_ms, device, time_ms, allocated_bytes, reserved_bytes, alloc_retries, ooms) \
             SELECT 'old' || (i % 8), 1000 + i % 64, 1, (i / 64) % 4, ?2 + i / 200, i % 1000000, 2 * (i % 1000000), 0, 0 FROM n",
            "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ?1) \
             INSERT INTO gpu_samples (gpu_uuid, time_ms, used_bytes, reserved_bytes) \
             SELECT 'GPU-old-' || (i % 32), ?2 + i / 200, i % 1000000, 0 FROM n",
            "INSERT OR IGNORE INTO gpus (uuid, host, idx, last_seen_ms) \
             SELECT gpu_uuid, 'old' || (CAST(substr(gpu_uuid, 9) AS INTEGER) % 8), CAST(substr(gpu_uuid, 9) AS INTEGER) / 8, max(time_ms) \
             FROM gpu_samples GROUP BY gpu_uuid",
            "INSERT OR REPLACE INTO allocator_latest (host, pid, start_key, start_time_ms, device, gpu_uuid, time_ms, step, \
             allocated_bytes, reserved_bytes, alloc_retries, ooms) \
             SELECT host, pid, ifnull(start_time_ms, -1), start_time_ms, device, gpu_uuid, max(time_ms), step, \
             allocated_bytes, reserved_bytes, alloc_retries, ooms FROM allocator_samples GROUP BY host, pid, start_time_ms, device",
            "INSERT OR REPLACE INTO gpu_latest (gpu_uuid, time_ms, used_bytes, reserved_bytes) \
             SELECT gpu_uuid, max(time_ms), used_bytes, reserved_bytes FROM gpu_samples GROUP BY gpu_uuid",
        ] {
            sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(half)
                .bind(t0)
                .execute(db)
                .await
                .unwrap();
        }
        lib.db.close().await;
    });
}

/// Milliseconds to answer `path` (which must answer 200).
fn timed(agent: &ureq::Agent, url: &str, path: &str) -> f64 {
    let t = Instant::now();
    let resp = agent.get(format!("{url}{path}")).call().unwrap();
    assert_eq!(resp.status().as_u16(), 200, "{path}");
    let _ = resp.into_body().read_to_vec();
    t.elapsed().as_secs_f64() * 1000.0
}

fn count_new(dir: &std::path::Path) -> (i64, i64) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let lib = server::library::Library::open(dir, None).await.unwrap();
        let db = lib.db.as_sqlite().expect("a SQLite benchmark");
        let gpus: i64 =
            sqlx::query_scalar("SELECT count(*) FROM gpu_samples WHERE gpu_uuid LIKE 'GPU-load%'")
                .fetch_one(db)
                .await
                .unwrap();
        let procs: i64 =
            sqlx::query_scalar("SELECT count(*) FROM process_samples WHERE host LIKE 'load%'")
                .fetch_one(db)
                .await
                .unwrap();
        (gpus, procs)
    })
}

#[test]
#[ignore = "a benchmark: run with --ignored --nocapture (see the module docs)"]
fn four_collectors_queries_and_scrapes_on_a_30m_row_store() {
    let rows = env_or("MEMSCOPE_LOAD_ROWS", 30_000_000) as i64;
    let secs = env_or("MEMSCOPE_LOAD_SECS", 600);
    let bin =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/release/memscope");
    assert!(
        bin.exists(),
        "build the server first: cargo build --release -p server"
    );
    let (base, port) = crate::support::scratch("load");
    let lib = base.join("lib");
    let t = Instant::now();
    seed(&lib, rows);
    println!("seeded {rows} rows in {:.0} s", t.elapsed().as_secs_f64());

    let server = std::process::Command::new(&bin)
        .args([
            "serve",
            "--addr",
            &format!("127.0.0.1:{port}"),
            "--data-dir",
        ])
        .arg(&lib)
        .args(["--collector-token", FOUR_TOKENS])
        .env("MEMSCOPE_LOG", "warn")
        .spawn()
        .unwrap();
    let server = Killed(server);
    let url = format!("http://127.0.0.1:{port}");
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(30)))
        .http_status_as_error(false)
        .build()
        .into();
    for _ in 0..600 {
        if agent.get(format!("{url}/api/health")).call().is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let pid = server.0.id();
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();

    // 4 collectors at 100 ms, a batch a second.
    let collectors = four_collectors(&url, &stop, &base);

    // The dashboard's live queries, back to back, and /metrics every second.
    let queries = Arc::new(Mutex::new(Vec::<f64>::new()));
    let dashboard = {
        let (stop, queries, agent) = (stop.clone(), queries.clone(), agent.clone());
        let hour = api::WindowQuery {
            minutes: Some(60.0),
            ..Default::default()
        };
        let paths = [
            api::routes::live_fleet(),
            api::routes::live_gpu("GPU-load0-3", &hour),
            api::routes::live_gpu("GPU-old-5", &hour),
            api::routes::live_process("load1", 1003, &hour),
        ];
        let url = url.clone();
        std::thread::spawn(move || {
            // The collectors' first batches come first (the server rolls up the seeded day when
            // it starts, which delays them): wait until their GPU has a page.
            let ready = format!("{url}{}", paths[1]);
            while agent
                .get(&ready)
                .call()
                .map_or(true, |r| r.status().as_u16() != 200)
            {
                std::thread::sleep(Duration::from_millis(200));
            }
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                let ms = timed(&agent, &url, &paths[i % paths.len()]);
                queries.lock().unwrap().push(ms);
                i += 1;
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    let mut scrapes = Vec::new();
    let mut rss = Vec::new();
    while started.elapsed() < Duration::from_secs(secs) {
        let tick = Instant::now();
        scrapes.push(timed(&agent, &url, &api::routes::metrics()));
        if scrapes.len() % 30 == 1 {
            rss.push((started.elapsed().as_secs(), rss_mib(pid)));
        }
        std::thread::sleep(Duration::from_secs(1).saturating_sub(tick.elapsed()));
    }
    rss.push((started.elapsed().as_secs(), rss_mib(pid)));
    stop.store(true, Ordering::Relaxed);
    dashboard.join().unwrap();
    let mut spooled = 0;
    let mut acked = 0;
    for c in collectors {
        let (s, a) = c.join().unwrap();
        spooled += s;
        acked += a.acked;
    }
    let run_s = started.elapsed().as_secs_f64();
    drop(server);
    let (gpus, procs) = count_new(&lib);
    let stored = (gpus + procs) as u64;
    println!(
        "{run_s:.0} s with {rows} stored rows: 4 collectors spooled {spooled} samples in {acked} batches, \
         stored {stored} ({:.0} samples/s); lost {}, stored twice {}",
        stored as f64 / run_s,
        spooled.saturating_sub(stored),
        stored.saturating_sub(spooled)
    );
    println!(
        "dashboard queries: {}",
        percentiles(queries.lock().unwrap().clone())
    );
    println!("/metrics scrapes:  {}", percentiles(scrapes));
    println!(
        "server RSS (s, MiB): {}",
        rss.iter()
            .map(|(s, m)| format!("{s}:{m:.0}"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    assert_eq!(stored, spooled, "every spooled sample stored exactly once");
    let _ = std::fs::remove_dir_all(&base);
}
