//! Frees stuck pending (issue 40): every free whose `free_completed` came after other events,
//! over every allocation, checked against the trace's own rows paired by address (not through
//! the index the analysis uses), on the fixture recorded with `record_stream` on a side stream
//! and on fixtures without one.

use snapshot::analysis::Index;
use snapshot::analysis::pending::{DEFAULT_MIN_WAIT_US, default_pending_frees, pending_frees};
use snapshot::model::Action;

/// (waited at all, waited ≥ min_wait_us, their bytes, still pending) from the raw rows of a
/// device's trace: each `free_requested` paired with the next `free_completed` at its address.
fn from_rows(snap: &snapshot::Snapshot, device: i32, min_wait_us: i64) -> (u64, u64, u64, u64) {
    let d = snap.device_trace(device).unwrap();
    let t = &snap.trace;
    let rows: Vec<usize> = (d.rows.start as usize..d.rows.end as usize).collect();
    let mut open: std::collections::HashMap<u64, (usize, usize)> = Default::default();
    let (mut waited, mut over, mut bytes, mut still) = (0, 0, 0, 0);
    for (i, &r) in rows.iter().enumerate() {
        match t.action[r] {
            Action::FreeRequested => {
                open.insert(t.addr.get(r), (i, r));
            }
            Action::FreeCompleted => {
                if let Some((j, q)) = open.remove(&t.addr.get(r)) {
                    let long = t.time_us.get(r) - t.time_us.get(q) >= min_wait_us;
                    waited += u64::from(i - j > 1 || long);
                    if long {
                        over += 1;
                        bytes += t.size.get(q);
                    }
                }
            }
            _ => {}
        }
    }
    // Requested and never completed: still pending when the snapshot was taken, listed however
    // recent.
    for (_, (_, q)) in open {
        waited += 1;
        over += 1;
        bytes += t.size.get(q);
        still += 1;
    }
    (waited, over, bytes, still)
}

#[test]
fn stuck_frees_match_the_trace_rows() {
    for name in [
        "multistream.pickle",
        "steady_train.pickle",
        "fragmentation.pickle",
        "leak_detached_cache.pickle",
        "oom_fraction.pickle",
    ] {
        let snap = crate::support::read(name);
        let index = Index::new(&snap);
        for d in index.traced() {
            for min in [0, DEFAULT_MIN_WAIT_US] {
                let p = pending_frees(&snap, d, min);
                let (waited, over, bytes, still) = from_rows(&snap, d.device, min);
                assert_eq!(p.waited, waited, "{name} waited");
                assert_eq!(
                    (p.count, p.bytes, p.still_pending),
                    (over, bytes, still),
                    "{name} ≥ {min} µs"
                );
                assert!(p.timed);
                // Still pending first, then the longest wait first.
                assert!(p.frees.windows(2).all(|w| {
                    let key = |f: &snapshot::analysis::pending::PendingFree| {
                        (f.completed_event.is_some(), std::cmp::Reverse(f.waited_us))
                    };
                    key(&w[0]) <= key(&w[1])
                }));
                assert_eq!(p.frees.len() as u64, p.count.min(2_000));
                for f in &p.frees {
                    assert!(
                        f.waited_us >= min || f.completed_event.is_none(),
                        "{name}: {f:?}"
                    );
                }
            }
        }
        if name == "multistream.pickle" {
            // The fixture's side stream kept some frees waiting: they are listed, with the
            // streams they may have waited on.
            let d = index.traced().next().unwrap();
            let p = pending_frees(&snap, d, 0);
            assert!(p.count > 0, "multistream has record_stream frees");
        }
    }
}

/// The harness planted a 64 MiB tensor used on a side stream kept busy for about a second
/// (`record_stream`), freed it and took the snapshot before the side stream finished: one free
/// still pending, its bytes what the GPU run recorded (truth.json), made at the planted line.
#[test]
fn the_planted_record_stream_free_is_listed_still_pending() {
    let truth: serde_json::Value = serde_json::from_slice(
        &std::fs::read(crate::support::fixture("harness/side_stream.truth.json")).unwrap(),
    )
    .unwrap();
    let expect_bytes = truth["expect"]["pending_free_bytes"].as_u64().unwrap();
    let line = truth["expect"]["line"].as_u64().unwrap() as u32;
    let snap = crate::support::read("harness/side_stream.pickle");
    let index = Index::new(&snap);
    let d = index.traced().next().unwrap();
    let p = pending_frees(&snap, d, DEFAULT_MIN_WAIT_US);
    let still: Vec<_> = p
        .frees
        .iter()
        .filter(|f| f.completed_event.is_none())
        .collect();
    assert_eq!(p.still_pending, 1, "{p:?}");
    assert_eq!(still.len(), 1);
    assert_eq!(still[0].size_bytes, expect_bytes);
    assert_eq!(p.bytes, expect_bytes, "nothing else waited over 1 ms");
    let site = index.frames.site(&snap, still[0].stack).unwrap();
    assert_eq!(
        (site.filename.ends_with("scenarios.py"), site.line),
        (true, line)
    );
    // The block's own stream is the default one. The side stream that held it allocated
    // nothing, so the trace never names it: no other stream to offer.
    assert_eq!(still[0].stream, 0);
    assert_eq!(p.streams, Vec::<u64>::new());
}

/// Recorded on an H200 by `memscope_harness.pending` (tests/fixtures/pending/README.md): tensors
/// kept by another stream (`record_stream` after `torch.cuda._sleep` there), timed with CUDA
/// events in the same process. Over 1 ms, only planted frees are listed (by address and size;
/// none of the workloads' other frees), every one whose stream was still busy right after the
/// free is listed, waiting at least what its stream was kept busy; still pending where the dump
/// came first; a training run without `record_stream` lists none.
#[test]
fn the_planted_frees_are_the_stuck_ones_on_the_gpu_runs() {
    for w in [
        "one_side",
        "two_sides",
        "alloc_on_side",
        "still_pending",
        "training",
    ] {
        let truth: serde_json::Value = serde_json::from_slice(
            &std::fs::read(crate::support::fixture(&format!(
                "pending/pending_{w}.truth.json"
            )))
            .unwrap(),
        )
        .unwrap();
        let snap = crate::support::read(&format!("pending/pending_{w}.pickle"));
        let index = Index::new(&snap);
        let d = index.traced().next().unwrap();
        let p = pending_frees(&snap, d, DEFAULT_MIN_WAIT_US);
        let planted = truth["planted"].as_array().unwrap();
        let key =
            |t: &serde_json::Value| (t["address"].as_u64().unwrap(), t["size"].as_u64().unwrap());
        for f in &p.frees {
            assert!(
                planted.iter().any(|t| key(t) == (f.address, f.size_bytes)),
                "{w}: {f:?} is not a planted free"
            );
        }
        // Every other free of the workload completed at once.
        assert!(
            p.requested
                >= truth["not_planted_frees_at_least"].as_u64().unwrap() + planted.len() as u64,
            "{w}: {} frees requested",
            p.requested
        );
        let mut must = 0;
        for t in planted.iter().filter(|t| t["busy_at_free"] == true) {
            must += 1;
            let f = p
                .frees
                .iter()
                .find(|f| (f.address, f.size_bytes) == key(t))
                .unwrap_or_else(|| panic!("{w}: {t} waited for a busy stream and is not listed"));
            let busy_us = (t["busy_ms"].as_f64().unwrap() * 1e3) as i64;
            // Freed just after its stream's work was queued, it waits about all of it, longer
            // where the allocator only noticed at its next call; still pending, at least until
            // the trace's last event.
            assert_eq!(
                f.completed_event.is_none(),
                t["still_pending"].as_bool().unwrap(),
                "{w}"
            );
            if f.completed_event.is_some() {
                assert!(
                    f.waited_us >= busy_us - 1_000,
                    "{w}: waited {} µs, the stream was busy {} µs",
                    f.waited_us,
                    busy_us
                );
            }
        }
        // (A free that found its stream already done, the host having been slower than a short
        // sleep, may complete at once: it is then not required.)
        assert!(
            must > 0 || w == "training",
            "{w}: no planted free found its stream busy"
        );
        assert_eq!(
            p.still_pending,
            planted
                .iter()
                .filter(|t| t["still_pending"] == true)
                .count() as u64
        );
    }
}

/// Every fixture (traces, segments-only files, old formats, the harness's and the categories'
/// recordings): the list is made without a panic on every device, a device without events lists
/// only blocks pending at the snapshot (their request not in any trace), and every listed free
/// is one the device's state would show waiting.
#[test]
fn every_fixture_lists_its_stuck_frees_without_a_panic() {
    let files = crate::support::all_fixtures();
    assert!(files.len() > 40, "{}", files.len());
    let mut unknown_requests = 0usize;
    for name in &files {
        let snap = crate::support::read(name);
        let index = Index::new(&snap);
        for d in &index.devices {
            let p = pending_frees(&snap, d, DEFAULT_MIN_WAIT_US);
            for f in &p.frees {
                let a = &d.allocations[f.allocation as usize];
                if f.requested_event.is_none() {
                    unknown_requests += 1;
                    assert!(a.start == snapshot::analysis::index::NONE, "{name}: {f:?}");
                    assert!(f.completed_event.is_none(), "{name}: {f:?}");
                }
                if d.len == 0 {
                    assert!(f.requested_event.is_none(), "{name}: {f:?}");
                }
            }
        }
    }
    // The format variants (history cut or left out) hold such blocks.
    assert!(unknown_requests > 0, "no block pending from before a trace");
}

/// The segment view's frees (at the default wait) are found once per device index and kept:
/// the same answer as computed afresh, and the same value at the next ask.
#[test]
fn the_default_pending_frees_are_kept_with_the_index() {
    let snap = crate::support::read("harness/side_stream.pickle");
    let index = Index::new(&snap);
    let d = index.traced().next().unwrap();
    let kept = default_pending_frees(&snap, d);
    assert_eq!(*kept, pending_frees(&snap, d, DEFAULT_MIN_WAIT_US));
    assert!(kept.count > 0, "the planted free is listed");
    assert!(std::ptr::eq(kept, default_pending_frees(&snap, d)));
}
