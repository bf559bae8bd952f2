//! Issue 13, findings 1, 7 (drop accounting) and 9 (spool disk): a collector that starts again
//! with a fresh spool loses nothing, a batch key resent with other content is refused and kept,
//! a spool folder the collector cannot write does not stop it, and every sample is either stored
//! or reported dropped — exactly.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use collectors::collector::{self, Config, Shipped};
use collectors::sender::{SendError, Sender};
use collectors::source::{Recorded, Source};
use collectors::spool::Spool;

use crate::support::{Server, fixture, scratch, start_server};

fn config() -> Config {
    Config {
        name: "c1".into(),
        host: "c1".into(),
        interval: Duration::from_millis(1),
        readings_per_batch: 2,
        relay: None,
    }
}

/// GPU and process samples `readings` readings of the fixture produce, starting at reading `from`.
fn produced(from: u64, readings: u64) -> i64 {
    let mut src = Recorded::open(&fixture()).unwrap();
    let mut n = 0;
    for i in 0..from + readings {
        let r = src.read(0);
        if i >= from {
            n += (r.gpus.len() + r.processes.len()) as i64;
        }
    }
    n
}

/// Samples stored (GPU + process rows) and samples reported dropped, as the server counts them.
fn stored_and_dropped(server: &Server, lib: &std::path::Path) -> (i64, i64) {
    server.rt.block_on(async {
        let lib = server::testing::open_live(lib).await.unwrap();
        let c = lib.live_counts().await.unwrap();
        (c[0] + c[1], lib.counters().await.unwrap().dropped)
    })
}

fn run(spool: Spool, port: u16, readings: u64, skip: u64) -> (u64, u64) {
    let (spooled, shipped) = run_shipped(spool, port, readings, skip);
    (spooled, shipped.acked)
}

/// `readings` readings of the fixture from reading `skip` on, through `spool` to the server:
/// the samples spooled and what the shipper did.
fn run_shipped(spool: Spool, port: u16, readings: u64, skip: u64) -> (u64, Shipped) {
    let mut src = Recorded::open(&fixture()).unwrap();
    for _ in 0..skip {
        src.read(0);
    }
    collector::run(
        config(),
        Box::new(src),
        spool,
        Sender::new(&format!("http://127.0.0.1:{port}"), "t1-0123456789abcdef"),
        Some(readings),
        Arc::new(AtomicBool::new(false)),
    )
    .unwrap()
}

/// Runs `f` on a thread; its result, or None if it has not finished within `secs`.
fn within<T: Send + 'static>(secs: u64, f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(secs)).ok()
}

/// Issue 38, item 11: a collector restarted while its spool could not save `next_seq` (a full
/// disk) numbered its batches from the last saved number under the same spool id: every batch
/// a conflict, set aside uncounted, and it exited 0 with "0 batches acknowledged". Numbers that
/// could not be saved are taken under a fresh id, so no restart reuses a key.
#[test]
fn a_spool_that_cannot_save_its_numbers_never_reuses_a_key() {
    let (base, port) = scratch("unsaved-seq");
    let server = start_server(&base.join("lib"), port);
    let dir = base.join("spool");
    let (_, first) = run_shipped(Spool::open(&dir, 64 << 20), port, 20, 0);
    assert_eq!(first.acked, 10);
    // From now on `next_seq` can be neither read nor written (a folder in its place), as a
    // disk that fails would leave it; batches themselves still reach the disk. Each start
    // numbers from 1 again.
    std::fs::remove_file(dir.join("next_seq")).unwrap();
    std::fs::create_dir_all(dir.join("next_seq")).unwrap();
    for life in 1..=2u64 {
        let (_, shipped) = run_shipped(Spool::open(&dir, 64 << 20), port, 20, 20 * life);
        assert_eq!(
            (shipped.acked, shipped.set_aside),
            (10, 0),
            "life {life}: {shipped:?}"
        );
        assert!(shipped.delivered_all());
    }
    assert_eq!(
        stored_and_dropped(&server, &base.join("lib")),
        (produced(0, 60), 0),
        "every life's samples stored"
    );
    server.stop();
}

/// Issue 38, item 15 (the collector's side): a batch the server refuses as malformed (400) was
/// resent forever, holding up every batch after it. It is set aside, counted, and the rest
/// flow.
#[test]
fn a_malformed_batch_is_set_aside_and_the_rest_flow() {
    let (base, port) = scratch("poison");
    let server = start_server(&base.join("lib"), port);
    let mut spool = Spool::open(&base.join("spool"), 64 << 20);
    let mut poison = spool.batch("c1", "c1");
    poison.events.push(wire::Event {
        time_ms: collector::now_ms(),
        kind: "oom".into(),
        pid: None,
        device: None,
        message: "bad\0byte".into(),
        snapshot_id: None,
    });
    spool.push(&poison).unwrap();
    let mut src = Recorded::open(&fixture()).unwrap();
    let good = wire::Batch {
        gpus: src.read(0).gpus,
        ..spool.batch("c1", "c1")
    };
    spool.push(&good).unwrap();
    let url = format!("http://127.0.0.1:{port}");
    let shipped = within(20, move || {
        let spool = Mutex::new(spool);
        let sender = Sender::new(&url, "t1-0123456789abcdef");
        collector::ship(&spool, &sender, &AtomicBool::new(true), &|m| {
            eprintln!("{m}")
        })
    })
    .expect("the shipper finishes instead of resending the malformed batch forever");
    assert_eq!((shipped.acked, shipped.set_aside), (1, 1), "{shipped:?}");
    assert!(!shipped.delivered_all());
    let kept: Vec<_> = std::fs::read_dir(base.join("spool/refused"))
        .unwrap()
        .collect();
    assert_eq!(kept.len(), 1, "the refused batch is kept for an operator");
    server.stop();
}

/// Issue 38, item 5: a collector whose token or host the server refuses (a renamed host, a
/// restarted container) looped silently while its spool filled. It says so loudly and exits
/// non-zero, its batches kept.
#[test]
fn a_collector_the_server_refuses_gives_up_loudly() {
    let (base, port) = scratch("refused");
    let server = start_server(&base.join("lib"), port);
    for (token, host, says) in [
        ("not-this-servers-token", "c1", "401"),
        ("t1-0123456789abcdef", "renamed-host", "403"),
    ] {
        let spool = base.join(format!("spool-{host}"));
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_memscope-collector"))
            .args(["--server", &format!("http://127.0.0.1:{port}")])
            .args(["--token", token, "--name", "c1", "--host", host])
            .args(["--readings", "100000", "--interval-ms", "10"])
            .arg("--replay")
            .arg(fixture())
            .arg("--spool-dir")
            .arg(&spool)
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let started = std::time::Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break Some(status);
            }
            if started.elapsed() > Duration::from_secs(30) {
                let _ = child.kill();
                break None;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let mut stderr = String::new();
        use std::io::Read;
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        let status = status.unwrap_or_else(|| panic!("still running after 30 s:\n{stderr}"));
        assert!(!status.success(), "{stderr}");
        assert!(
            stderr.contains("gave up") && stderr.contains(says),
            "{stderr}"
        );
        let kept = std::fs::read_dir(&spool)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .path()
                    .to_string_lossy()
                    .ends_with(".json.gz")
            })
            .count();
        assert!(kept > 0, "its batches stay in the spool");
    }
    server.stop();
}

#[test]
fn a_collector_restarted_with_a_fresh_spool_loses_nothing() {
    let (base, port) = scratch("fresh-spool");
    let server = start_server(&base.join("lib"), port);
    // First life: every batch acknowledged and deleted, seq 1…20 used.
    let first = Spool::open(&base.join("spool-a"), 64 << 20);
    run(first, port, 40, 0);
    // Second life on a new disk (new container, wiped /tmp): its numbering starts at 1 again.
    let second = Spool::open(&base.join("spool-b"), 64 << 20);
    let (spooled, acked) = run(second, port, 40, 40);
    assert_eq!((spooled as i64, acked), (produced(40, 40), 20));
    assert_eq!(
        stored_and_dropped(&server, &base.join("lib")),
        (produced(0, 80), 0),
        "the second life's samples are stored, not answered as duplicates of the first's"
    );
    server.stop();
}

#[test]
fn a_resent_batch_with_other_content_is_refused_and_kept() {
    let (base, port) = scratch("conflict");
    let server = start_server(&base.join("lib"), port);
    let sender = Sender::new(&format!("http://127.0.0.1:{port}"), "t1-0123456789abcdef");
    let mut src = Recorded::open(&fixture()).unwrap();
    // A spool copied to a second machine: both number their next batch the same.
    let mut a = Spool::open(&base.join("spool"), 64 << 20);
    let _ = std::fs::create_dir_all(base.join("copy"));
    std::fs::copy(base.join("spool/spool_id"), base.join("copy/spool_id")).unwrap();
    let mut b = Spool::open(&base.join("copy"), 64 << 20);
    assert_eq!(a.id(), b.id());
    let r = src.read(0);
    let one = wire::Batch {
        gpus: r.gpus,
        ..a.batch("c1", "c1")
    };
    let r = src.read(0);
    let other = wire::Batch {
        gpus: r.gpus,
        ..b.batch("c1", "c1")
    };
    assert_eq!(one.seq, other.seq);
    a.push(&one).unwrap();
    b.push(&other).unwrap();

    let ack = sender.send(&a.body(one.seq).unwrap()).unwrap();
    assert!(ack.acknowledges(Some(a.id()), one.seq) && !ack.duplicate);
    let again = sender.send(&a.body(one.seq).unwrap()).unwrap();
    assert!(again.duplicate, "the same batch again is a duplicate");
    let err = sender.send(&b.body(other.seq).unwrap()).unwrap_err();
    assert!(
        matches!(&err, SendError::Conflict(m) if m.contains("different content")),
        "{err}"
    );

    // The shipper sets the refused batch aside (kept, not deleted) and logs it loudly.
    let logged = Mutex::new(Vec::<String>::new());
    let b = Mutex::new(b);
    let stop = AtomicBool::new(true);
    collector::ship(&b, &sender, &stop, &|m| {
        logged.lock().unwrap().push(m.to_string())
    });
    let logged = logged.into_inner().unwrap();
    assert!(
        logged.iter().any(|m| m.starts_with("CONFLICT")),
        "{logged:?}"
    );
    let kept: Vec<_> = std::fs::read_dir(base.join("copy/conflicts"))
        .unwrap()
        .collect();
    assert_eq!(kept.len(), 1, "the refused batch is kept for an operator");
    assert!(b.lock().unwrap().pending().unwrap().is_empty());
    server.stop();
}

#[test]
fn an_unwritable_spool_folder_does_not_stop_the_collector() {
    let (base, port) = scratch("unwritable");
    let server = start_server(&base.join("lib"), port);
    std::fs::create_dir_all(&base).unwrap();
    std::fs::write(base.join("a-file"), b"not a folder").unwrap();
    // The folder cannot be created (a file is in the way): as with a read-only or full disk.
    let spool = Spool::open(&base.join("a-file/spool"), 64 << 20);
    assert!(spool.disk_error.is_some());
    let (spooled, acked) = run(spool, port, 30, 0);
    assert_eq!((spooled as i64, acked), (produced(0, 30), 15));
    assert_eq!(
        stored_and_dropped(&server, &base.join("lib")),
        (produced(0, 30), 0)
    );
    server.stop();
}

/// While the server is away, the spool's cap drops the oldest batches; once it is back, every
/// sample produced is either stored or in the server's count of dropped samples, for a spool on
/// disk and for one held in memory (the disk refused).
#[test]
fn every_sample_is_stored_or_reported_dropped() {
    for on_disk in [true, false] {
        let (base, port) = scratch(if on_disk { "drops-disk" } else { "drops-mem" });
        std::fs::create_dir_all(&base).unwrap();
        std::fs::write(base.join("a-file"), b"").unwrap();
        let dir = if on_disk {
            base.join("spool")
        } else {
            base.join("a-file/spool")
        };
        // Server down: sample 200 readings into a spool of 4 KiB.
        let spool = Mutex::new(Spool::open(&dir, 4 << 10));
        let mut src = Recorded::open(&fixture()).unwrap();
        collector::sample(
            &config(),
            &mut src,
            &spool,
            Some(200),
            &AtomicBool::new(false),
        )
        .unwrap();
        let spool = spool.into_inner().unwrap();
        // The cap dropped batches, and what the spool holds reports them (the last batch
        // sampled carries the drops its own push caused).
        let reported: u64 = spool
            .pending()
            .unwrap()
            .into_iter()
            .map(|seq| {
                let body = spool.body(seq).unwrap();
                let b: wire::Batch =
                    serde_json::from_reader(flate2::read::GzDecoder::new(&body[..])).unwrap();
                b.dropped_samples
            })
            .sum();
        assert!(
            reported + spool.dropped_samples > 0,
            "the cap dropped batches"
        );
        // The same spool after a restart (on disk) or the same process (in memory): server up.
        let spool = if on_disk {
            drop(spool);
            Spool::open(&dir, 4 << 10)
        } else {
            spool
        };
        let server = start_server(&base.join("lib"), port);
        run(spool, port, 10, 200);
        let (stored, dropped) = stored_and_dropped(&server, &base.join("lib"));
        assert!(dropped > 0 && stored > 0);
        assert_eq!(
            stored + dropped,
            produced(0, 210),
            "on disk: {on_disk}: stored {stored} + reported dropped {dropped}"
        );
        server.stop();
    }
}
