//! Comparing two snapshots: call sites matched across runs by their label frame, leak suspects
//! new or gone, headline figures. Checked on the harness's planted runs (same `scenarios.py`,
//! one with a planted leak) and on a snapshot against itself.

use snapshot::analysis::diff::Figure;
use snapshot::analysis::{Index, Side, compare};

fn load(name: &str) -> (snapshot::Snapshot, Index) {
    let snap = crate::support::read(name);
    let index = Index::new(&snap);
    (snap, index)
}

fn first_device(index: &Index) -> i32 {
    index.traced().next().unwrap().device
}

fn side<'a>(x: &'a (snapshot::Snapshot, Index)) -> Side<'a> {
    Side {
        snap: &x.0,
        index: &x.1,
        device: first_device(&x.1),
    }
}

#[test]
fn a_snapshot_against_itself_changes_nothing() {
    let a = load("leak_detached_cache.pickle");
    let d = compare(side(&a), side(&a), 100);
    assert!(
        d.figures.iter().all(|f| f.delta == 0 && f.a == f.b),
        "{:?}",
        d.figures
    );
    assert!(d.sites_at_peak.is_empty());
    assert!(d.unchanged_sites > 0);
    assert!(!d.leaks.is_empty());
    assert!(
        d.leaks
            .iter()
            .all(|l| l.a_bytes.is_some() && l.a_bytes == l.b_bytes)
    );
}

#[test]
fn the_planted_leak_is_new_in_the_leaking_run() {
    let truth: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(crate::support::fixture("harness/leak_list.truth.json")).unwrap(),
    )
    .unwrap();
    let (file, line) = (
        truth["file"].as_str().unwrap(),
        truth["expect"]["line"].as_u64().unwrap(),
    );
    let planted = truth["expect"]["bytes"].as_u64().unwrap();
    let steady = load("harness/steady.pickle");
    let leaking = load("harness/leak_list.pickle");
    let d = compare(side(&steady), side(&leaking), 20);
    let is_planted = |f: &Option<snapshot::frames::FrameView>| {
        f.as_ref()
            .is_some_and(|f| f.filename.ends_with(file) && u64::from(f.line) == line)
    };

    // The leak: a suspect in B only, at the planted line, with the planted bytes (±5%).
    let first = &d.leaks[0];
    assert!(is_planted(&first.site), "{:?}", first.site);
    assert_eq!(first.a_bytes, None);
    let b = first.b_bytes.unwrap();
    assert!(b.abs_diff(planted) * 20 <= planted, "{b} vs {planted}");
    assert!(d.leaks.iter().skip(1).all(|l| !is_planted(&l.site)));

    // At the peak, the planted line is the largest change, and it is new in B.
    let top = &d.sites_at_peak[0];
    assert!(is_planted(&top.site), "{:?}", top.site);
    assert_eq!((top.a_bytes, top.a_count), (0, 0));
    assert!(top.delta_bytes > 0 && top.b_count > 0);
    assert!(!top.frames.is_empty());
    // Everything else the two runs share holds the same memory.
    assert!(d.unchanged_sites > 0);

    let fig = |which: Figure| {
        d.figures
            .iter()
            .find(|f| f.figure == which)
            .unwrap()
            .clone()
    };
    assert_eq!(
        (fig(Figure::LeakSuspects).a, fig(Figure::LeakSuspects).b),
        (0, 1)
    );
    let peak = fig(Figure::PeakRequested);
    assert_eq!(peak.delta, peak.b as i64 - peak.a as i64);
    assert!(
        peak.delta
            .unsigned_abs()
            .abs_diff(top.delta_bytes.unsigned_abs())
            < 8 << 20
    );
}
