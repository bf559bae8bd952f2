//! The webhook notifier (`--webhook-url`): a receiver that fails at first gets each live OOM and
//! each growing process once it answers 2xx, as Slack-compatible JSON; and across `kill -9`
//! restarts of a real `memscope serve` nothing acknowledged is lost: an OOM whose sends failed
//! before the kill, and one stored just before a kill, are both delivered after the restart,
//! each taken once.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::*;

/// What the receiver got: (status it answered, idempotency key, JSON body).
type Received = Arc<Mutex<Vec<(u16, String, serde_json::Value)>>>;

/// A receiver on a port of its own that answers 500 to its first `fail_first` requests and 200
/// after, or refuses connections while `down` is set (its listener closed).
struct Receiver {
    port: u16,
    got: Received,
}

impl Receiver {
    fn start(fail_first: usize) -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let got: Received = Default::default();
        let seen = Arc::new(AtomicUsize::new(0));
        let g = got.clone();
        std::thread::spawn(move || {
            for s in listener.incoming().flatten() {
                let mut r = BufReader::new(s.try_clone().unwrap());
                let (mut len, mut key) = (0usize, String::new());
                loop {
                    let mut line = String::new();
                    if r.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                    let lower = line.to_ascii_lowercase();
                    if let Some(v) = lower.strip_prefix("content-length:") {
                        len = v.trim().parse().unwrap_or(0);
                    }
                    if lower.starts_with("idempotency-key:") {
                        key = line.split_once(':').unwrap().1.trim().to_string();
                    }
                }
                let mut body = vec![0u8; len];
                let _ = r.read_exact(&mut body);
                let status = if seen.fetch_add(1, Ordering::SeqCst) < fail_first {
                    500
                } else {
                    200
                };
                let json = serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null);
                g.lock().unwrap().push((status, key, json));
                let mut s = s;
                let _ = write!(
                    s,
                    "HTTP/1.1 {status} X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                );
            }
        });
        Receiver { port, got }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/hook", self.port)
    }

    /// The messages taken (answered 200), as (key, body).
    fn taken(&self) -> Vec<(String, serde_json::Value)> {
        self.got
            .lock()
            .unwrap()
            .iter()
            .filter(|(s, _, _)| *s == 200)
            .map(|(_, k, b)| (k.clone(), b.clone()))
            .collect()
    }

    fn wait_taken(&self, n: usize, what: &str) -> Vec<(String, serde_json::Value)> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let t = self.taken();
            if t.len() >= n {
                return t;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: {:?}",
                self.got.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

fn oom_event(time_ms: i64, pid: u32) -> wire::Event {
    wire::Event {
        time_ms,
        kind: "oom".into(),
        pid: Some(pid),
        device: Some(0),
        message: "CUDA out of memory. Tried to allocate 24.00 MiB".into(),
        snapshot_id: Some("abc123".into()),
    }
}

#[test]
fn a_receiver_that_fails_at_first_gets_every_oom_and_growing_process() {
    let receiver = Receiver::start(2);
    let dir = std::env::temp_dir().join(format!("memscope-webhook-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let port = free_port();
    let _serve = Serve::start_with(
        &dir,
        port,
        &receiver.url(),
        &["--public-url", "https://memscope.example.com"],
    );
    // The leaking loop's recorded steps (2 MiB kept a step) and an OOM its observer reported.
    let leak: Vec<serde_json::Value> = serde_json::from_str(
        &std::fs::read_to_string(root().join("tests/fixtures/leak_detached_cache.stats.json"))
            .unwrap(),
    )
    .unwrap();
    let now = server::now_ms();
    let mut b = wire::Batch::new("gpu7", 1, "gpu7");
    for (i, s) in leak.iter().enumerate() {
        let mut a = crate::support::scenario::alloc(now - 60 + i as i64, i as u64, 0, 0);
        a.allocated_bytes = s["allocated_bytes.all.current"].as_u64().unwrap();
        a.reserved_bytes = s["reserved_bytes.all.current"].as_u64().unwrap();
        b.allocator.push(a);
    }
    b.events.push(oom_event(now, 100));
    send(port, &b);

    let taken = receiver.wait_taken(2, "an OOM and a growing process, after two failures");
    // Nothing more comes: each message was taken once.
    std::thread::sleep(Duration::from_millis(2500));
    let all = receiver.got.lock().unwrap().len();
    assert_eq!(
        receiver.taken().len(),
        2,
        "each message taken once: {taken:?}"
    );
    assert!(all >= 4, "the two failures were retried: {all} requests");
    let oom = taken
        .iter()
        .find(|(k, _)| k.starts_with("oom:"))
        .expect("the OOM");
    let text = oom.1["text"].as_str().unwrap();
    assert!(
        text.contains(
            "*Out of memory* on gpu7 cuda:0 (pid 100): CUDA out of memory. Tried to allocate 24.00 MiB."
        ),
        "{text}"
    );
    assert!(
        text.contains("<https://memscope.example.com/s/abc123?view=oom|its snapshot's verdict>"),
        "{text}"
    );
    assert_eq!(oom.1["memscope"]["kind"], "oom");
    let growth = taken
        .iter()
        .find(|(k, _)| k.starts_with("growth:"))
        .expect("the growth");
    let text = growth.1["text"].as_str().unwrap();
    assert!(
        text.contains("*Memory growing* on gpu7 cuda:0 (pid 100)")
            && text.contains("about 2.0 MiB a step"),
        "{text}"
    );
    let per_step = growth.1["memscope"]["bytes_per_step"].as_f64().unwrap();
    assert!(
        (per_step - 2.0 * 1048576.0).abs() < 0.05 * 1048576.0,
        "{per_step}"
    );
    assert_eq!(metric(port, "memscope_webhook_pending"), 0.0);
    assert_eq!(metric(port, "memscope_webhook_delivered_total"), 2.0);
}

/// `memscope serve` as a process of its own, killed with SIGKILL when dropped.
struct Serve(Child);

impl Serve {
    fn start(dir: &std::path::Path, port: u16, webhook: &str) -> Serve {
        Serve::start_with(dir, port, webhook, &[])
    }

    fn start_with(dir: &std::path::Path, port: u16, webhook: &str, more: &[&str]) -> Serve {
        let child = Command::new(env!("CARGO_BIN_EXE_memscope"))
            .args(["serve", "--addr", &format!("127.0.0.1:{port}")])
            .arg("--data-dir")
            .arg(dir)
            .args(["--collector-token", &format!("gpu7={COLLECTOR_TOKEN}")])
            .args(["--webhook-url", webhook])
            .args(more)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while ureq::get(&format!("http://127.0.0.1:{port}/api/health"))
            .call()
            .is_err()
        {
            assert!(Instant::now() < deadline, "memscope serve did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        Serve(child)
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn ingest(port: u16, seq: u64, event: wire::Event) {
    let mut b = wire::Batch::new("gpu7", seq, "gpu7");
    b.events.push(event);
    send(port, &b);
}

/// Posts a batch as collector gpu7; asserts it is acknowledged.
fn send(port: u16, b: &wire::Batch) {
    let status = ureq::post(&format!("http://127.0.0.1:{port}/api/ingest"))
        .header("authorization", &format!("Bearer {COLLECTOR_TOKEN}"))
        .header("content-type", "application/json")
        .send(&serde_json::to_vec(b).unwrap()[..])
        .unwrap()
        .status();
    assert_eq!(status, 200, "acknowledged");
}

fn metric(port: u16, name: &str) -> f64 {
    let text = ureq::get(&format!("http://127.0.0.1:{port}/metrics"))
        .call()
        .unwrap()
        .body_mut()
        .read_to_string()
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.parse().ok())
        .unwrap_or(-1.0)
}

#[test]
fn no_acknowledged_oom_is_lost_across_kill_9_restarts() {
    let dir = std::env::temp_dir().join(format!("memscope-webhook-kill-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // A receiver address nothing listens on yet: sends fail (connection refused).
    let down = TcpListener::bind("127.0.0.1:0").unwrap();
    let down_url = format!(
        "http://127.0.0.1:{}/hook",
        down.local_addr().unwrap().port()
    );
    drop(down);
    let port = free_port();
    let now = server::now_ms();

    // 1. An OOM acknowledged while the receiver is down: queued, its sends fail; then kill -9.
    let serve = Serve::start(&dir, port, &down_url);
    ingest(port, 1, oom_event(now - 2000, 101));
    let deadline = Instant::now() + Duration::from_secs(30);
    while metric(port, "memscope_webhook_failed_attempts_total") < 1.0 {
        assert!(Instant::now() < deadline, "the first send never failed");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(metric(port, "memscope_webhook_pending"), 1.0);
    drop(serve);

    // 2. The receiver is up now. A second OOM is acknowledged and the server killed at once,
    // before its next scan (every 2 s) can queue it.
    let receiver = Receiver::start(0);
    let serve = Serve::start(&dir, port, &receiver.url());
    ingest(port, 2, oom_event(now - 1000, 102));
    drop(serve);
    let before = receiver.taken().len();

    // 3. Restarted: both are delivered, each once.
    let _serve = Serve::start(&dir, port, &receiver.url());
    let taken = receiver.wait_taken(2, "both OOMs after the restart");
    std::thread::sleep(Duration::from_millis(2500));
    let taken_after = receiver.taken();
    let keys: Vec<&str> = taken_after.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        taken_after.len(),
        2,
        "each once: {keys:?} (taken {before} before the last restart, {} at first wait)",
        taken.len()
    );
    assert!(
        keys.iter().any(|k| k.contains(":101:")) && keys.iter().any(|k| k.contains(":102:")),
        "{keys:?}"
    );
    assert_eq!(metric(port, "memscope_webhook_pending"), 0.0);
}
