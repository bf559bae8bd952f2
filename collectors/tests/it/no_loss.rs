//! The collector loses nothing: it keeps sampling while the server is down (batches wait in the
//! spool), and once the server is back every sample is stored exactly once. Readings come from a
//! fixture's recorded NVML data through the same path as live NVML readings.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use collectors::collector::{self, Config};
use collectors::source::{Recorded, Source};
use collectors::{sender::Sender, spool::Spool};

use crate::support::{fixture, scratch, start_server};

#[test]
fn server_outage_loses_nothing_and_stores_nothing_twice() {
    let (base, port) = scratch("noloss");
    const READINGS: u64 = 240;

    // What the source will produce.
    let mut check = Recorded::open(&fixture()).unwrap();
    let (mut want_gpus, mut want_procs) = (0i64, 0i64);
    for _ in 0..READINGS {
        let r = check.read(0);
        want_gpus += r.gpus.len() as i64;
        want_procs += r.processes.len() as i64;
    }

    let server = start_server(&base.join("lib"), port);
    let cfg = Config {
        name: "c1".into(),
        host: "c1".into(),
        interval: Duration::from_millis(5),
        readings_per_batch: 4,
        relay: None,
    };
    let spool = Spool::open(&base.join("spool"), 64 << 20);
    let sender = Sender::new(&format!("http://127.0.0.1:{port}"), "t1-0123456789abcdef");
    let src = Box::new(Recorded::open(&fixture()).unwrap());
    let collecting = std::thread::spawn(move || {
        collector::run(
            cfg,
            src,
            spool,
            sender,
            Some(READINGS),
            Arc::new(AtomicBool::new(false)),
        )
    });

    // Let some batches through, then take the server away while sampling goes on.
    std::thread::sleep(Duration::from_millis(300));
    server.stop();
    std::thread::sleep(Duration::from_millis(700));
    let spooled_while_down = std::fs::read_dir(base.join("spool"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .to_string_lossy()
                .ends_with(".json.gz")
        })
        .count();
    assert!(
        spooled_while_down > 0,
        "batches wait in the spool while the server is down"
    );
    let server = start_server(&base.join("lib"), port);

    let (spooled, shipped) = collecting.join().unwrap().unwrap();
    assert_eq!(spooled as i64, want_gpus + want_procs);
    assert_eq!(shipped.acked, READINGS / 4);
    assert!(shipped.delivered_all(), "{shipped:?}");

    // Every sample exactly once.
    let counts = server.rt.block_on(async {
        let lib = server::testing::open_live(&base.join("lib")).await.unwrap();
        lib.live_counts().await.unwrap()
    });
    assert_eq!(counts, [want_gpus, want_procs, 0, 0, (READINGS / 4) as i64]);
    assert_eq!(
        std::fs::read_dir(base.join("spool"))
            .unwrap()
            .filter(|e| e
                .as_ref()
                .unwrap()
                .path()
                .to_string_lossy()
                .ends_with(".json.gz"))
            .count(),
        0
    );
    server.stop();
}

#[test]
fn a_wrong_token_keeps_batches_in_the_spool() {
    let (base, port) = scratch("badtoken");
    let server = start_server(&base.join("lib"), port);
    let mut spool = Spool::open(&base.join("spool"), 64 << 20);
    let mut src = Recorded::open(&fixture()).unwrap();
    let r = src.read(1);
    let batch = wire::Batch {
        gpus: r.gpus,
        processes: r.processes,
        ..spool.batch("c1", "c1")
    };
    spool.push(&batch).unwrap();
    let seq = spool.pending().unwrap()[0];
    let body = spool.body(seq).unwrap();
    let err = Sender::new(&format!("http://127.0.0.1:{port}"), "nope")
        .send(&body)
        .unwrap_err();
    assert!(
        matches!(
            err,
            collectors::sender::SendError::Refused { status: 401, .. }
        ),
        "{err}"
    );
    assert_eq!(
        spool.pending().unwrap().len(),
        1,
        "refused batches are kept"
    );
    let ack = Sender::new(&format!("http://127.0.0.1:{port}"), "t1-0123456789abcdef")
        .send(&body)
        .unwrap();
    assert_eq!((ack.seq, ack.duplicate), (seq, false));
    assert!(ack.acknowledges(Some(spool.id()), seq));
    server.stop();
}

#[test]
fn spool_survives_restarts_and_bounds_itself() {
    let dir = std::env::temp_dir().join(format!("memscope-spool-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut src = Recorded::open(&fixture()).unwrap();
    let mut batch = |spool: &mut Spool| {
        let r = src.read(1);
        wire::Batch {
            gpus: r.gpus,
            processes: r.processes,
            ..spool.batch("c", "h")
        }
    };
    {
        let mut s = Spool::open(&dir, 1 << 20);
        for _ in 0..3 {
            let b = batch(&mut s);
            s.push(&b).unwrap();
        }
    }
    // A half-written file from a crash is removed; numbering continues after a restart.
    collectors::spool::write_raw(&dir.join("00000000000000000099.part"), b"half").unwrap();
    let mut s = Spool::open(&dir, 1 << 20);
    assert!(!dir.join("00000000000000000099.part").exists());
    let seqs: Vec<u64> = s.pending().unwrap();
    assert_eq!(seqs, vec![3, 2, 1], "newest first");
    assert_eq!(batch(&mut s).seq, 4);
    // Over the cap, the oldest go and are counted.
    let id = s.id().to_string();
    assert_eq!(id.len(), 32, "128 random bits");
    let mut tiny = Spool::open(&dir, 1);
    assert_eq!(tiny.id(), id, "the id is the spool's, kept across restarts");
    let b = batch(&mut tiny);
    tiny.push(&b).unwrap();
    assert_eq!(tiny.pending().unwrap().len(), 1);
    assert!(tiny.dropped_samples >= 3);
}
