//! The model file round-trips every fixture exactly, with and without its index, and a damaged
//! one is refused, not misread.

#[test]
fn model_file_round_trips_every_fixture() {
    for name in crate::support::REAL_AND_VARIANTS {
        let snap = crate::support::read(name);
        let mut bytes = Vec::new();
        snapshot::store::write(&snap, None, &mut bytes).unwrap();
        let (back, none) = snapshot::store::read(bytes.as_slice()).unwrap();
        assert!(none.is_none(), "{name}");
        let (_, a) = snapshot::analysis::analyze(&snap, &Default::default());
        let (_, b) = snapshot::analysis::analyze(&back, &Default::default());
        assert_eq!(
            serde_json::to_value(&a).unwrap(),
            serde_json::to_value(&b).unwrap(),
            "{name}"
        );
        assert_eq!(snap.trace.stack, back.trace.stack, "{name}");
        assert_eq!(snap.trace.time_us, back.trace.time_us, "{name}");
        assert_eq!(snap.trace.size, back.trace.size, "{name}");
        assert_eq!(snap.trace.addr, back.trace.addr, "{name}");
        assert!(
            (0..snap.trace.len()).all(|r| snap.trace.stream(r) == back.trace.stream(r)),
            "{name}"
        );
    }
}

/// The stored index is the index built from the tables, field for field, with the views a
/// first timeline derives; and its report is the same.
#[test]
fn the_index_round_trips_every_fixture() {
    for name in crate::support::REAL_AND_VARIANTS {
        let snap = crate::support::read(name);
        let index = snapshot::analysis::Index::new(&snap);
        for derived in [false, true] {
            if derived {
                snapshot::analysis::timeline::derive_views(&snap, &index);
            }
            let mut bytes = Vec::new();
            snapshot::store::write(&snap, Some(&index), &mut bytes).unwrap();
            let (back, stored) = snapshot::store::read(bytes.as_slice()).unwrap();
            let stored = stored.expect("index stored");
            assert_eq!(format!("{index:?}"), format!("{stored:?}"), "{name}");
            let report = |s, i| {
                serde_json::to_value(snapshot::analysis::report(s, i, &Default::default())).unwrap()
            };
            assert_eq!(report(&snap, &index), report(&back, &stored), "{name}");
        }
    }
}

/// Streams interleaved row by row are kept as plain ids, not runs; that form round-trips too.
#[test]
fn interleaved_streams_round_trip() {
    let mut snap = crate::support::read("multistream.pickle");
    let n = snap.trace.len();
    let k = snap.trace.streams.len() as u16;
    assert!(k >= 2 && n > 0, "multistream has streams");
    snap.trace.stream_id = snapshot::packed::Runs::Dense((0..n).map(|i| i as u16 % k).collect());
    let mut bytes = Vec::new();
    snapshot::store::write(&snap, None, &mut bytes).unwrap();
    let (back, _) = snapshot::store::read(bytes.as_slice()).unwrap();
    assert!(matches!(
        back.trace.stream_id,
        snapshot::packed::Runs::Dense(_)
    ));
    assert!((0..n).all(|r| snap.trace.stream(r) == back.trace.stream(r)));
}

#[test]
fn damaged_model_files_are_refused() {
    // With the index, which the flips below reach too.
    let snap = crate::support::read("multistream.pickle");
    let index = snapshot::analysis::Index::new(&snap);
    snapshot::analysis::timeline::derive_views(&snap, &index);
    let mut bytes = Vec::new();
    snapshot::store::write(&snap, Some(&index), &mut bytes).unwrap();
    for cut in (0..bytes.len()).step_by(97).chain([bytes.len() - 1]) {
        assert!(
            snapshot::store::read(&bytes[..cut]).is_err(),
            "cut at {cut}"
        );
    }
    let mut wrong = bytes.clone();
    wrong[8] = 99; // version
    assert!(
        snapshot::store::read(wrong.as_slice())
            .unwrap_err()
            .to_string()
            .contains("older version")
    );
    // Any flipped byte is refused (issue 13, finding 9: flipped bytes in a column were served as
    // wrong answers), never read as different figures, and never panics.
    let mut x = 0x1234_5678_9abc_def0u64;
    for _ in 0..500 {
        let mut b = bytes.clone();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let i = (x % b.len() as u64) as usize;
        b[i] ^= (x >> 32) as u8 | 1;
        assert!(
            snapshot::store::read(b.as_slice()).is_err(),
            "byte {i} flipped and read"
        );
    }
    // Flips in the columns' values (times, sizes, addresses) pass every structural check: only
    // the checksum tells them; before it they were read as other figures.
    let only_the_checksum = (bytes.len() / 4..bytes.len() * 3 / 4)
        .step_by(31)
        .filter(|&i| {
            let mut b = bytes.clone();
            b[i] ^= 1;
            snapshot::store::read(b.as_slice())
                .unwrap_err()
                .to_string()
                .contains("checksum mismatch")
        })
        .count();
    assert!(only_the_checksum > 10, "{only_the_checksum}");
}

/// The model file keeps neither the labels by category nor the frees that waited, so a reopened
/// index lacks them until `analysis::warm` works them out (a server does after each load, off
/// the requests' path): then they are ready, and the same as the first index's.
#[test]
fn a_reopened_index_is_warmed_to_the_same_labels_and_waits() {
    use snapshot::analysis::{categories, pending};
    for name in ["harness/side_stream.pickle", "leak_detached_cache.pickle"] {
        let snap = crate::support::read(name);
        let index = snapshot::analysis::Index::new(&snap);
        snapshot::analysis::report(&snap, &index, &Default::default());
        let mut bytes = Vec::new();
        snapshot::store::write(&snap, Some(&index), &mut bytes).unwrap();
        let (back, stored) = snapshot::store::read(bytes.as_slice()).unwrap();
        let stored = stored.expect("index stored");
        assert!(stored.traced().count() > 0, "{name}");
        assert!(stored.traced().all(|d| !d.warmed()), "{name}: not kept");
        snapshot::analysis::warm(&back, &stored);
        for (d, e) in index.traced().zip(stored.traced()) {
            assert!(e.warmed(), "{name}");
            let (a, b) = (
                categories::categories(&snap, &index, d),
                categories::categories(&back, &stored, e),
            );
            assert_eq!(a.labels, b.labels, "{name}");
            assert_eq!(
                format!("{:?}", a.phases),
                format!("{:?}", b.phases),
                "{name}"
            );
            assert_eq!(
                pending::default_pending_frees(&snap, d),
                pending::default_pending_frees(&back, e),
                "{name}"
            );
        }
    }
}
