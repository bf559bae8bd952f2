//! Two servers, one PostgreSQL, one data folder (issue 16): what one stores the other shows, and
//! killing one mid-ingest loses nothing acknowledged and stores nothing twice.
//!
//! Real processes (`memscope serve`, killed with SIGKILL) on a throwaway cluster
//! (`scripts/pg-cluster`). A sender stands in for a collector: it numbers its batches, sends
//! them to either server, resends some to the other one, and resends whatever got no answer to
//! the server still standing, as a collector resends its spool.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::support::pg::{Cluster, root};

const TOKEN: &str = "replica-collector-token-0123456789";
/// Batches the sender sends, and GPU samples in each.
const BATCHES: u64 = 160;
const SAMPLES_PER_BATCH: usize = 250;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A `memscope serve` process, killed when dropped.
struct Replica {
    child: Child,
    url: String,
}

impl Replica {
    fn start(data: &Path, database_url: &str) -> Replica {
        let port = free_port();
        let log = std::fs::File::create(data.with_extension(format!("{port}.log"))).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_memscope"))
            .args([
                "serve",
                "--addr",
                &format!("127.0.0.1:{port}"),
                "--data-dir",
            ])
            .arg(data)
            .args(["--database-url", database_url])
            .args(["--collector-token", &format!("replica-host={TOKEN}")])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let url = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(30);
        while ureq::get(format!("{url}/api/health")).call().is_err() {
            assert!(Instant::now() < deadline, "{url} did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        Replica { child, url }
    }

    fn json(&self, path: &str) -> serde_json::Value {
        let body = ureq::get(format!("{}{path}", self.url))
            .call()
            .unwrap_or_else(|e| panic!("GET {path}: {e}"))
            .into_body()
            .read_to_string()
            .unwrap();
        serde_json::from_str(&body).unwrap()
    }

    fn upload(&self, fixture: &str) -> String {
        let bytes = std::fs::read(root().join("tests/fixtures").join(fixture)).unwrap();
        let body = ureq::post(format!("{}/api/snapshots?name={fixture}", self.url))
            .send(&bytes[..])
            .unwrap()
            .into_body()
            .read_to_string()
            .unwrap();
        let up: api::Uploaded =
            serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
        up.id
    }

    fn listed(&self) -> Vec<String> {
        let list = self.json("/api/snapshots");
        let items: Vec<api::SnapshotInfo> =
            serde_json::from_value(list.clone()).unwrap_or_else(|e| panic!("{e}: {list}"));
        items.into_iter().map(|s| s.id).collect()
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Batch `seq`: SAMPLES_PER_BATCH readings of two GPUs of host `replica-host`.
fn batch(seq: u64) -> Vec<u8> {
    let mut b = wire::Batch::new("replica-host", seq, "replica-host");
    b.spool_id = Some("spool-replicas".into());
    for i in 0..SAMPLES_PER_BATCH {
        b.gpus.push(wire::GpuSample {
            time_ms: 1_700_000_000_000 + (seq * 1000 + i as u64) as i64,
            uuid: format!("GPU-replica-{}", i % 2),
            index: (i % 2) as u32,
            name: Some("H200".into()),
            memory_used_bytes: Some(seq << 20),
            memory_free_bytes: None,
            memory_total_bytes: Some(140 << 30),
            memory_reserved_bytes: None,
            gpu_util_percent: Some(50),
            mem_util_percent: None,
            temperature_c: Some(40),
            power_mw: None,
        });
    }
    serde_json::to_vec(&b).unwrap()
}

/// Posts a batch; `Some(duplicate)` when acknowledged, `None` when the server gave no answer.
fn post(url: &str, body: &[u8]) -> Option<bool> {
    let resp = ureq::post(format!("{url}/api/ingest"))
        .header("authorization", &format!("Bearer {TOKEN}"))
        .header("content-type", "application/json")
        .send(body)
        .ok()?;
    let ack: wire::Ack = serde_json::from_str(&resp.into_body().read_to_string().ok()?).ok()?;
    Some(ack.duplicate)
}

fn data_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("memscope-replicas-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("data")
}

#[test]
fn two_servers_share_one_truth_and_one_can_die_mid_ingest() {
    let pg = Cluster::start("replicas");
    let data = data_dir("share");
    let a = Replica::start(&data, &pg.url);
    let b = Replica::start(&data, &pg.url);

    // Uploads through either are listed and open through the other (one shared data folder).
    let from_a = a.upload("leak_detached_cache.pickle");
    let from_b = b.upload("fragmentation.pickle");
    for (server, id) in [(&b, &from_a), (&a, &from_b)] {
        assert!(
            server.listed().contains(id),
            "{id} not listed by {}",
            server.url
        );
        let timeline = server.json(&format!("/api/snapshots/{id}/timeline"));
        assert!(timeline.is_object(), "{timeline}");
    }

    // B's live stream carries a batch that A stored.
    let stream = {
        let url = b.url.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let resp = ureq::get(format!("{url}/api/live/stream")).call().unwrap();
            tx.send(String::new()).unwrap(); // subscribed
            let mut lines = BufReader::new(resp.into_body().into_reader()).lines();
            while let Some(Ok(line)) = lines.next() {
                if line.starts_with("data:") {
                    let _ = tx.send(line);
                    return;
                }
            }
        });
        rx.recv_timeout(Duration::from_secs(10)).unwrap();
        rx
    };
    assert_eq!(post(&a.url, &batch(1)), Some(false));
    let notice = stream
        .recv_timeout(Duration::from_secs(10))
        .expect("B heard of A's batch");
    assert!(notice.contains("replica-host"), "{notice}");

    // The sender: batches 2.. alternate between the servers; every fifth is sent to the other
    // one too (a resend after a lost answer); what gets no answer goes to the survivor.
    let acked = Arc::new(AtomicU64::new(1));
    let sender = {
        let (a_url, b_url) = (a.url.clone(), b.url.clone());
        let acked = acked.clone();
        std::thread::spawn(move || {
            // Like a collector, the sender learns of A's death by getting no answer.
            let (mut duplicates, mut unanswered, mut a_alive) = (0u64, 0u64, true);
            for seq in 2..=BATCHES {
                let body = batch(seq);
                let first = if seq % 2 == 0 && a_alive {
                    &a_url
                } else {
                    &b_url
                };
                let dup = match post(first, &body) {
                    Some(d) => d,
                    None => {
                        unanswered += 1;
                        a_alive = false;
                        post(&b_url, &body).expect("the survivor answers")
                    }
                };
                duplicates += dup as u64;
                if seq % 5 == 0 {
                    let other = if first == &a_url { &b_url } else { &a_url };
                    if let Some(d) = post(other, &body) {
                        assert!(d, "batch {seq} stored a second time through {other}");
                        duplicates += 1;
                    }
                }
                acked.fetch_add(1, Ordering::SeqCst);
            }
            (duplicates, unanswered)
        })
    };
    // A dies (SIGKILL) half-way, with batches on their way to it.
    let deadline = Instant::now() + Duration::from_secs(60);
    while acked.load(Ordering::SeqCst) < BATCHES / 2 {
        assert!(Instant::now() < deadline, "ingest stalled");
        std::thread::sleep(Duration::from_millis(2));
    }
    let mut a = a;
    a.child.kill().unwrap();
    a.child.wait().unwrap();
    let (duplicates, unanswered) = sender.join().unwrap();
    assert!(unanswered >= 1, "no batch was sent to A after it died");
    assert_eq!(acked.load(Ordering::SeqCst), BATCHES);
    // Before A died, every fifth batch went to both servers: each resend was a duplicate.
    assert!(
        duplicates >= 10,
        "{duplicates} resends answered as duplicates"
    );

    // Every acknowledged sample exactly once, counted the same by the database and by B.
    let want = BATCHES * SAMPLES_PER_BATCH as u64;
    let counts = pg.sql(
        "SELECT (SELECT count(*) FROM gpu_samples), (SELECT count(*) FROM ingested_batches), \
         (SELECT count(DISTINCT (gpu_uuid, time_ms)) FROM gpu_samples), \
         (SELECT rows FROM ingest_totals)",
    );
    assert_eq!(counts, [format!("{want}|{BATCHES}|{want}|{want}")]);
    let metrics = ureq::get(format!("{}/metrics", b.url))
        .call()
        .unwrap()
        .into_body()
        .read_to_string()
        .unwrap();
    assert!(
        metrics.contains(&format!("memscope_ingest_batches_total {BATCHES}")),
        "{metrics}"
    );

    // A comes back on the same folder and database: both uploads, the same counts.
    let a = Replica::start(&data, &pg.url);
    for server in [&a, &b] {
        let listed = server.listed();
        assert!(
            listed.contains(&from_a) && listed.contains(&from_b),
            "{listed:?}"
        );
    }
    let fleet: api::Fleet = serde_json::from_value(a.json("/api/live/fleet")).unwrap();
    assert_eq!(fleet.hosts.len(), 1, "{fleet:?}");
    drop((a, b));
    let _ = std::fs::remove_dir_all(data.parent().unwrap());
}

/// One server at a time rolls up (an advisory lock): two passes at once, one runs and one skips,
/// and the raw rows are folded exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roll_up_runs_on_one_server_at_a_time() {
    let pg = Cluster::start("rollup-lock");
    let data = data_dir("rollup");
    let (_stop, stopped) = tokio::sync::watch::channel(false);
    let live = |db| server::live::Live::open(db, stopped.clone());
    let db = || server::db::Db::open(&data, Some(&pg.url));
    let one = live(db().await.unwrap()).await.unwrap();
    let two = live(db().await.unwrap()).await.unwrap();
    // Opening made today's day partitions, so the first batch does not land in a DEFAULT one.
    assert_eq!(
        pg.sql(
            "SELECT count(*) FROM pg_class WHERE relname = \
             'gpu_samples_d' || to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD')"
        ),
        ["1"]
    );
    pg.sql(
        "INSERT INTO gpu_samples (gpu_uuid, time_ms, used_bytes) \
         SELECT 'GPU-r', 1700000000000 + i * 100, i FROM generate_series(0, 199999) i",
    );
    let (r1, r2) = tokio::join!(
        one.roll_up(1_800_000_000_000, 0),
        two.roll_up(1_800_000_000_000, 0)
    );
    let (r1, r2) = (r1.unwrap(), r2.unwrap());
    assert_eq!(r1.rolled_rows + r2.rolled_rows, 200_000, "{r1:?} {r2:?}");
    // Its days are over (2023-11-14/15): packed, one row per day, every sample counted once.
    assert_eq!(r1.packed_rows + r2.packed_rows, 334, "{r1:?} {r2:?}");
    assert_eq!(pg.sql("SELECT count(*) FROM gpu_samples_1m"), ["0"]);
    let mut samples = 0;
    for line in pg
        .sql("SELECT encode(minutes, 'hex') || '|' || encode(n, 'hex') FROM gpu_samples_1m_packed")
    {
        let (minutes, n) = line.split_once('|').unwrap();
        let hex = |s: &str| -> Vec<u8> {
            (0..s.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
                .collect()
        };
        let count = server::live::days::unpack_minutes(&hex(minutes))
            .unwrap()
            .len();
        let n = server::live::days::unpack_values(&hex(n), count).unwrap();
        samples += n.into_iter().map(Option::unwrap).sum::<i64>();
    }
    assert_eq!(samples, 200_000);
    assert_eq!(pg.sql("SELECT count(*) FROM gpu_samples_1m_packed"), ["2"]);
    // Day partitions were made for the days to come, and whole days past retention drop.
    let days = pg.sql("SELECT count(*) FROM pg_class WHERE relname LIKE 'gpu_samples_d%'");
    assert!(days[0].parse::<i64>().unwrap() >= 3, "{days:?}");
    let _ = std::fs::remove_dir_all(data.parent().unwrap());
}
