//! Issue 38's soak (bounded, loopback only): the real `memscope serve` process for 10 minutes
//! under the attacks of items 1–3 at once, beside 4 collectors (8 GPUs and 16 processes each,
//! every 100 ms) and a legitimate upload every 5 seconds. The attacks, each from its own
//! address: hostile uploads built to take memory (a dict then distinct strings, a JSON list of
//! empty objects: 64 MiB each, back to back), 520 downloads nobody reads, 515 held live
//! streams, 1,100 half-sent requests reconnecting every 10 s, and two endless uploads just
//! above the minimum rate from two more addresses. Prints the health check's latency, what
//! each attack got, and checks that nothing acknowledged was lost: every sample the collectors
//! were told was stored is in the database once, every upload answered 2xx is in the library.
//!
//! ```text
//! cargo build --release -p server
//! cargo test --release -p collectors --test it -- soak_bench:: --ignored --nocapture
//! ```
//! On SQLite by default; with `MEMSCOPE_TEST_DATABASE_URL` (a PostgreSQL cluster, see
//! `scripts/pg-cluster`) on a database of its own there. `MEMSCOPE_SOAK_SECS` (default 600)
//! sets the length.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::support::hostile::{dict_then_strings, empty_segments};

/// Answers each attack got, by status line (or what happened instead).
type Tally = Arc<Mutex<BTreeMap<String, BTreeMap<String, u64>>>>;

fn count(tally: &Tally, attack: &str, outcome: &str) {
    *tally
        .lock()
        .unwrap()
        .entry(attack.to_string())
        .or_default()
        .entry(outcome.to_string())
        .or_default() += 1;
}

/// A connection from 127.0.0.`last`.
async fn from(last: u8, addr: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::from(([127, 0, 0, last], 0)))?;
    socket.connect(addr).await
}

/// The status code of an answer's first line ("none" if there was none).
fn status_of(answer: &[u8]) -> String {
    String::from_utf8_lossy(answer)
        .lines()
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .unwrap_or("none")
        .to_string()
}

/// Sends a whole upload from 127.0.0.`last`; the answer's status.
async fn upload_from(last: u8, addr: SocketAddr, body: &[u8]) -> String {
    let Ok(mut s) = from(last, addr).await else {
        return "no connection".into();
    };
    let head = format!(
        "POST /api/snapshots?name=hostile HTTP/1.1\r\nhost: localhost\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let _ = s.write_all(head.as_bytes()).await;
    let _ = s.write_all(body).await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(120), s.read_to_end(&mut answer)).await;
    status_of(&answer)
}

/// Item 1: uploads built to take memory, back to back.
async fn memory_attack(addr: SocketAddr, stop: Arc<AtomicBool>, tally: Tally) {
    let bodies = [dict_then_strings(64 << 20), empty_segments(64 << 20)];
    let mut i = 0;
    while !stop.load(Ordering::Relaxed) {
        let status = upload_from(2, addr, &bodies[i % 2]).await;
        count(&tally, "1 hostile uploads (64 MiB)", &status);
        i += 1;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Item 2: rounds of `n` connections from 127.0.0.`last` that each send `head` and then never
/// read, a new round every `every_s` seconds (the previous one dropped then).
struct Flood {
    attack: &'static str,
    last: u8,
    n: usize,
    head: String,
    every_s: u64,
}

async fn held_sockets(addr: SocketAddr, flood: Flood, stop: Arc<AtomicBool>, tally: Tally) {
    let Flood {
        attack,
        last,
        n,
        head,
        every_s,
    } = flood;
    let every = Duration::from_secs(every_s);
    while !stop.load(Ordering::Relaxed) {
        let mut round = Vec::with_capacity(n);
        for _ in 0..n {
            match from(last, addr).await {
                Ok(mut s) => {
                    let _ = s.write_all(head.as_bytes()).await;
                    round.push(s);
                }
                Err(_) => count(&tally, attack, "connect failed"),
            }
        }
        count(&tally, attack, "rounds");
        let until = Instant::now() + every;
        while Instant::now() < until && !stop.load(Ordering::Relaxed) {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        // What the server did with the round's sockets at its end: answered them (a 503 from
        // a cap, the download's 200), closed them, or holds them still.
        for s in &mut round {
            let mut head = [0u8; 16];
            let fate = match tokio::time::timeout(Duration::from_millis(1), s.peek(&mut head)).await
            {
                Ok(Ok(0)) => "closed".to_string(),
                Ok(Ok(n)) => format!("answered {}", status_of(&head[..n])),
                Ok(Err(_)) => "reset".to_string(),
                Err(_) => "held, nothing sent".to_string(),
            };
            count(&tally, attack, &format!("sockets {fate}"));
        }
    }
}

/// Item 3: an endless valid pickle (`NONE`, `POP` forever) at `bytes_per_s`, declared 8 GiB,
/// from 127.0.0.`last`, started again whenever the server ends it.
async fn floor_attack(addr: SocketAddr, last: u8, stop: Arc<AtomicBool>, tally: Tally) {
    const BYTES_PER_S: usize = 17 << 10;
    while !stop.load(Ordering::Relaxed) {
        let Ok(s) = from(last, addr).await else {
            count(&tally, "3 endless uploads at 17 KiB/s", "no connection");
            tokio::time::sleep(Duration::from_secs(1)).await;
            continue;
        };
        let (mut rd, mut wr) = s.into_split();
        let head = "POST /api/snapshots?name=endless HTTP/1.1\r\nhost: localhost\r\ncontent-length: 8589934592\r\n\r\n";
        let sender = tokio::spawn(async move {
            let _ = wr.write_all(head.as_bytes()).await;
            let _ = wr.write_all(b"\x80\x02").await;
            let piece = b"N0".repeat(BYTES_PER_S / 8);
            loop {
                if wr.write_all(&piece).await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(125)).await;
            }
        });
        let mut answer = Vec::new();
        loop {
            let read = tokio::time::timeout(Duration::from_secs(1), rd.read_to_end(&mut answer));
            if read.await.is_ok() || stop.load(Ordering::Relaxed) {
                break;
            }
        }
        sender.abort();
        if !stop.load(Ordering::Relaxed) {
            count(
                &tally,
                "3 endless uploads at 17 KiB/s",
                &format!("ended {}", status_of(&answer)),
            );
        }
    }
}

/// The health check every 250 ms on a fresh connection: its latency in ms, `None` when it
/// was not answered 200 within 5 s.
async fn health_checks(addr: SocketAddr, stop: Arc<AtomicBool>) -> Vec<Option<f64>> {
    let mut out = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let started = Instant::now();
        let answered = tokio::time::timeout(Duration::from_secs(5), async {
            let mut s = TcpStream::connect(addr).await.ok()?;
            s.write_all(
                b"GET /api/health HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n",
            )
            .await
            .ok()?;
            let mut answer = Vec::new();
            s.read_to_end(&mut answer).await.ok()?;
            (status_of(&answer) == "200").then_some(())
        })
        .await;
        out.push(matches!(answered, Ok(Some(()))).then(|| started.elapsed().as_secs_f64() * 1e3));
        tokio::time::sleep(Duration::from_millis(250).saturating_sub(started.elapsed())).await;
    }
    out
}

/// A legitimate upload every 5 s (fixtures in turn); the ids of those answered 2xx, and how
/// many were answered 503 (and sent again).
fn steady_uploads(url: String, stop: Arc<AtomicBool>) -> (Vec<String>, u64, Vec<String>) {
    let files = [
        "big_python.pickle",
        "steady_train.pickle",
        "leak_detached_cache.pickle",
        "fragmentation.pickle",
        "oom_fraction.pickle",
        "multistream.pickle",
        "segments_only.pickle",
        "lstm_leak_oom.pickle.gz",
    ];
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(120)))
        .http_status_as_error(false)
        .build()
        .into();
    let fixtures = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures");
    let (mut acked, mut busy, mut failed) = (Vec::new(), 0, Vec::new());
    let mut i = 0;
    while !stop.load(Ordering::Relaxed) {
        let started = Instant::now();
        let name = files[i % files.len()];
        let bytes = std::fs::read(fixtures.join(name)).unwrap();
        let answer = agent
            .post(format!("{url}/api/snapshots?name=steady-{i}"))
            .send(&bytes[..]);
        match answer {
            Ok(r) if r.status().is_success() => {
                let text = r.into_body().read_to_string().unwrap();
                let up: api::Uploaded = serde_json::from_str(&text).unwrap();
                acked.push(up.snapshot.id);
                i += 1;
            }
            Ok(r) if r.status().as_u16() == 503 => busy += 1,
            Ok(r) => {
                failed.push(format!("{name}: {}", r.status()));
                i += 1;
            }
            Err(e) => {
                failed.push(format!("{name}: {e}"));
                i += 1;
            }
        }
        std::thread::sleep(Duration::from_secs(5).saturating_sub(started.elapsed()));
    }
    (acked, busy, failed)
}

fn percentiles(latencies: &[Option<f64>]) -> String {
    let answered: Vec<f64> = latencies.iter().flatten().copied().collect();
    format!(
        "{} of {} answered: {}",
        answered.len(),
        latencies.len(),
        crate::load_bench::percentiles(answered)
    )
}

/// The server's peak resident set (`VmHWM`), in MiB.
fn peak_rss_mib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

/// Samples stored for the soak's hosts.
fn stored_samples(dir: &std::path::Path, url: Option<&str>) -> u64 {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let lib = server::library::Library::open(dir, url).await.unwrap();
        let gpus = "SELECT count(*) FROM gpu_samples WHERE gpu_uuid LIKE 'GPU-load%'";
        let procs = "SELECT count(*) FROM process_samples WHERE host LIKE 'load%'";
        let mut total = 0i64;
        for q in [gpus, procs] {
            total += match (lib.db.as_sqlite(), lib.db.as_postgres()) {
                (Some(db), _) => sqlx::query_scalar::<_, i64>(q).fetch_one(db).await.unwrap(),
                (_, Some(db)) => sqlx::query_scalar::<_, i64>(q).fetch_one(db).await.unwrap(),
                _ => unreachable!("one backend"),
            };
        }
        total as u64
    })
}

#[test]
#[ignore = "a benchmark: run with --ignored --nocapture (see the module docs)"]
fn ten_minutes_of_attacks_beside_collectors_and_uploads() {
    let secs: u64 = std::env::var("MEMSCOPE_SOAK_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(600);
    let bin =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/release/memscope");
    assert!(
        bin.exists(),
        "build the server first: cargo build --release -p server"
    );
    let (base, port) = crate::support::scratch("soak");
    let lib = base.join("lib");
    std::fs::create_dir_all(&lib).unwrap();
    let database_url = server::testing::database_for(&lib);

    let mut command = std::process::Command::new(&bin);
    command
        .args([
            "serve",
            "--addr",
            &format!("127.0.0.1:{port}"),
            "--data-dir",
        ])
        .arg(&lib)
        .args(["--collector-token", crate::load_bench::FOUR_TOKENS])
        .env("MEMSCOPE_LOG", "warn");
    if let Some(url) = &database_url {
        command.args(["--database-url", url]);
    }
    let server = crate::load_bench::Killed(command.spawn().unwrap());
    let url = format!("http://127.0.0.1:{port}");
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    for _ in 0..600 {
        if std::net::TcpStream::connect(addr).is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let tally: Tally = Default::default();
    let started = Instant::now();

    // The work that must go on: 4 collectors and steady uploads (the first is a 21 MB
    // snapshot, the original the slow readers ask for).
    let collectors = crate::load_bench::four_collectors(&url, &stop, &base);
    let uploads = {
        let (url, stop) = (url.clone(), stop.clone());
        std::thread::spawn(move || steady_uploads(url, stop))
    };

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let pid = server.0.id();
    let (health, rss) = rt.block_on(async {
        // The first upload (the 21 MB original) is in the library before the readers start.
        let original = loop {
            let (status, body) = get(addr, "/api/snapshots").await;
            let listed: Vec<api::SnapshotInfo> = serde_json::from_str(&body).unwrap_or_default();
            if status == "200"
                && let Some(first) = listed.first()
            {
                break api::routes::original(&first.id);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        let mut attacks = vec![tokio::spawn(memory_attack(
            addr,
            stop.clone(),
            tally.clone(),
        ))];
        let floods = [
            Flood {
                attack: "2 downloads nobody reads (520 a round)",
                last: 3,
                n: 520,
                head: format!("GET {original} HTTP/1.1\r\nhost: localhost\r\n\r\n"),
                every_s: 40,
            },
            Flood {
                attack: "2 held live streams (515 a round)",
                last: 4,
                n: 515,
                head: "GET /api/live/stream HTTP/1.1\r\nhost: localhost\r\n\r\n".into(),
                every_s: 60,
            },
            Flood {
                attack: "2 half-sent requests (1,100 a round)",
                last: 5,
                n: 1100,
                head: "GET /api/snapshots HTTP/1.1\r\nhost: local".into(),
                every_s: 10,
            },
        ];
        for flood in floods {
            attacks.push(tokio::spawn(held_sockets(
                addr,
                flood,
                stop.clone(),
                tally.clone(),
            )));
        }
        for last in [6, 7] {
            attacks.push(tokio::spawn(floor_attack(
                addr,
                last,
                stop.clone(),
                tally.clone(),
            )));
        }
        let health = tokio::spawn(health_checks(addr, stop.clone()));
        let rss = tokio::spawn({
            let stop = stop.clone();
            async move {
                let mut out = Vec::new();
                let t0 = Instant::now();
                while !stop.load(Ordering::Relaxed) {
                    out.push((t0.elapsed().as_secs(), crate::load_bench::rss_mib(pid)));
                    tokio::time::sleep(Duration::from_secs(10)).await;
                }
                out
            }
        });
        tokio::time::sleep(Duration::from_secs(secs)).await;
        stop.store(true, Ordering::Relaxed);
        for a in attacks {
            let _ = a.await;
        }
        (health.await.unwrap(), rss.await.unwrap())
    });
    let run_s = started.elapsed().as_secs_f64();
    let (acked_uploads, busy, failed_uploads) = uploads.join().unwrap();
    let (mut spooled, mut acked_batches, mut set_aside) = (0, 0, 0);
    for c in collectors {
        let (s, shipped) = c.join().unwrap();
        spooled += s;
        acked_batches += shipped.acked;
        set_aside += shipped.set_aside;
    }
    let listed: Vec<api::SnapshotInfo> = rt.block_on(async {
        let (_, body) = get(addr, "/api/snapshots").await;
        serde_json::from_str(&body).unwrap()
    });
    let peak_mib = peak_rss_mib(server.0.id());
    drop(server);
    let stored = stored_samples(&lib, database_url.as_deref());
    let missing: Vec<&String> = acked_uploads
        .iter()
        .filter(|id| !listed.iter().any(|s| &&s.id == id))
        .collect();
    println!(
        "soak on {} for {run_s:.0} s; server peak RSS {peak_mib:.0} MiB",
        if database_url.is_some() {
            "PostgreSQL"
        } else {
            "SQLite"
        }
    );
    println!("health check: {}", percentiles(&health));
    println!(
        "server RSS every 10 s (MiB): {}",
        rss.iter()
            .map(|(_, m)| format!("{m:.0}"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!(
        "collectors: {spooled} samples in {acked_batches} acknowledged batches ({set_aside} set aside); stored {stored}; lost {}, stored twice {}",
        spooled.saturating_sub(stored),
        stored.saturating_sub(spooled)
    );
    println!(
        "uploads: {} acknowledged ({} missing from the library), {busy} answered 503 and sent again, failed: {failed_uploads:?}",
        acked_uploads.len(),
        missing.len()
    );
    for (attack, outcomes) in tally.lock().unwrap().iter() {
        println!("{attack}: {outcomes:?}");
    }
    assert_eq!(stored, spooled, "every acknowledged sample stored once");
    assert_eq!(set_aside, 0, "no batch refused");
    assert!(
        missing.is_empty(),
        "acknowledged uploads missing: {missing:?}"
    );
    assert!(failed_uploads.is_empty(), "{failed_uploads:?}");
    assert!(acked_uploads.len() as u64 >= secs / 10, "uploads went on");
    let answered: Vec<f64> = health.iter().flatten().copied().collect();
    assert_eq!(answered.len(), health.len(), "every health check answered");
    let mut sorted = answered.clone();
    sorted.sort_by(f64::total_cmp);
    assert!(
        sorted[(sorted.len() - 1) * 95 / 100] < 1000.0,
        "health p95 under a second"
    );
    let _ = std::fs::remove_dir_all(&base);
}

/// A GET on a fresh connection: (status, body).
async fn get(addr: SocketAddr, path: &str) -> (String, String) {
    let Ok(mut s) = TcpStream::connect(addr).await else {
        return ("none".into(), String::new());
    };
    // HTTP/1.0: the body is sent whole, not in chunks.
    let head = format!("GET {path} HTTP/1.0\r\nhost: localhost\r\n\r\n");
    let _ = s.write_all(head.as_bytes()).await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut answer)).await;
    let text = String::from_utf8_lossy(&answer).to_string();
    let body = text
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    (status_of(&answer), body)
}
