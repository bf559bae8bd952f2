//! The timeline's density (issue 40): each bucket counts the allocations made in it and their
//! bytes, every one however short-lived, so a trace whose allocations are each narrower than a
//! pixel still shows where memory is made. Checked against the trace's own alloc rows, on both
//! axes, over whole traces and windows, on fixtures with short-lived churn.

use snapshot::analysis::Index;
use snapshot::analysis::timeline::{timeline, timeline_by_time};
use snapshot::model::Action;

/// Alloc rows of events `lo..hi` of the device's trace: (count, bytes).
fn from_rows(snap: &snapshot::Snapshot, device: i32, lo: u32, hi: u32) -> (u64, u64) {
    let d = snap.device_trace(device).unwrap();
    let t = &snap.trace;
    (d.rows.start + lo..d.rows.start + hi.min(d.rows.end - d.rows.start))
        .map(|r| r as usize)
        .filter(|&r| t.action[r] == Action::Alloc)
        .fold((0, 0), |(n, b), r| (n + 1, b + t.size.get(r)))
}

#[test]
fn buckets_count_every_allocation_once() {
    for name in [
        "steady_train.pickle",
        "fragmentation.pickle",
        "harness/steady.pickle",
        "pending/pending_training.pickle",
        "multistream.pickle",
    ] {
        let snap = crate::support::read(name);
        let index = Index::new(&snap);
        for d in index.traced() {
            let all = from_rows(&snap, d.device, 0, d.len);
            assert!(all.0 > 50, "{name}: {all:?}");
            let sum = |tl: &snapshot::analysis::Timeline| {
                tl.buckets.iter().fold((0u64, 0u64), |(n, b), k| {
                    (n + k.allocs as u64, b + k.alloc_bytes)
                })
            };
            // The whole trace on the event axis, at several widths (block edges fall anywhere).
            for buckets in [1, 7, 300, 1200, 100_000] {
                let tl = timeline(&snap, &index, d.device, 0, d.len, buckets).unwrap();
                assert_eq!(sum(&tl), all, "{name}: {buckets} event buckets");
                // Each bucket against the rows it covers.
                for (i, k) in tl.buckets.iter().enumerate().step_by(97) {
                    let hi = tl.buckets.get(i + 1).map_or(d.len, |n| n.first);
                    let rows = from_rows(&snap, d.device, k.first, hi);
                    assert_eq!((k.allocs as u64, k.alloc_bytes), rows, "{name} bucket {i}");
                }
            }
            // The whole trace on the time axis: the events at its last microsecond included.
            let t = &snap.trace;
            let (t0, t1) = (
                t.time_us.get(d.rows().start),
                t.time_us.get(d.rows().end - 1),
            );
            for buckets in [1, 640, 1200] {
                let tl = timeline_by_time(&snap, &index, d.device, t0, t1, buckets).unwrap();
                assert_eq!(sum(&tl), all, "{name}: {buckets} time buckets");
            }
            // A window: the events inside it.
            let (lo, hi) = (d.len / 3, d.len / 3 * 2);
            let tl = timeline(&snap, &index, d.device, lo, hi, 500).unwrap();
            assert_eq!(
                sum(&tl),
                from_rows(&snap, d.device, lo, hi + 1),
                "{name} window"
            );
        }
    }
}
