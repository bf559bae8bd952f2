//! The model file round-trips every fixture exactly, and a damaged one is refused, not misread.

mod common;

#[test]
fn model_file_round_trips_every_fixture() {
    for name in common::REAL_AND_VARIANTS {
        let snap = common::read(name);
        let mut bytes = Vec::new();
        snapshot::store::write(&snap, &mut bytes).unwrap();
        let back = snapshot::store::read(bytes.as_slice()).unwrap();
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

/// Streams interleaved row by row are kept as plain ids, not runs; that form round-trips too.
#[test]
fn interleaved_streams_round_trip() {
    let mut snap = common::read("multistream.pickle");
    let n = snap.trace.len();
    let k = snap.trace.streams.len() as u16;
    assert!(k >= 2 && n > 0, "multistream has streams");
    snap.trace.stream_id = snapshot::packed::Runs::Dense((0..n).map(|i| i as u16 % k).collect());
    let mut bytes = Vec::new();
    snapshot::store::write(&snap, &mut bytes).unwrap();
    let back = snapshot::store::read(bytes.as_slice()).unwrap();
    assert!(matches!(
        back.trace.stream_id,
        snapshot::packed::Runs::Dense(_)
    ));
    assert!((0..n).all(|r| snap.trace.stream(r) == back.trace.stream(r)));
}

#[test]
fn damaged_model_files_are_refused() {
    let snap = common::read("multistream.pickle");
    let mut bytes = Vec::new();
    snapshot::store::write(&snap, &mut bytes).unwrap();
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
