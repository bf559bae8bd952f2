//! Every encoding and layout a snapshot comes in reads to the same tables: other pickle protocols,
//! the JSON form, gzip/zstd/xz, PyTorch ≤1.13 and 2.0 layouts, and integers ≥ 2^63.

use snapshot::analysis;

fn figures(name: &str) -> serde_json::Value {
    let (_, _, report) = crate::support::analyze(name);
    let reference = crate::support::reference_figures("multistream");
    crate::support::our_figures(&report, &reference)
}

#[test]
fn other_protocols_and_compressions_read_the_same() {
    let want = crate::support::reference_figures("multistream");
    for name in [
        "variants/multistream.proto0.pickle",
        "variants/multistream.proto1.pickle",
        "variants/multistream.proto2.pickle",
        "variants/multistream.proto5.pickle",
        "variants/multistream.pickle.gz",
        "variants/multistream.pickle.zst",
        "variants/multistream.pickle.xz",
        "variants/multistream.json",
    ] {
        assert_eq!(figures(name), want, "{name}");
    }
    assert_eq!(
        crate::support::read("variants/multistream.proto2.pickle")
            .format
            .protocol,
        2
    );
    assert_eq!(
        crate::support::read("variants/multistream.proto5.pickle")
            .format
            .protocol,
        5
    );
    assert_eq!(
        crate::support::read("variants/multistream.pickle.zst")
            .format
            .compression
            .as_str(),
        "zstd"
    );
    assert_eq!(
        crate::support::read("variants/multistream.json")
            .format
            .encoding
            .as_str(),
        "json"
    );
}

#[test]
fn stacks_survive_every_encoding() {
    let base = crate::support::read("multistream.pickle");
    for name in [
        "variants/multistream.proto0.pickle",
        "variants/multistream.proto2.pickle",
        "variants/multistream.json",
    ] {
        let other = crate::support::read(name);
        assert_eq!(other.trace.len(), base.trace.len());
        for r in [0usize, 17, 100, base.trace.len() - 1] {
            let a: Vec<_> = snapshot::frames::full_stack(&base, base.trace.stack.get(r));
            let b: Vec<_> = snapshot::frames::full_stack(&other, other.trace.stack.get(r));
            assert_eq!(a, b, "{name} row {r}");
        }
    }
}

#[test]
fn pytorch_2_0_layout_with_block_history() {
    let (snap, _, report) = crate::support::analyze("variants/legacy_2_0.pickle");
    assert_eq!(snap.format.layout.as_str(), "block_history");
    assert_eq!(report.summary.segments, 3);
    assert_eq!(report.summary.reserved_bytes, 54_525_952);
    assert_eq!(report.summary.devices[&0].entries, 272);
    // Block addresses are computed from the segment base; the pending block's stack comes from history.
    let base = crate::support::read("multistream.pickle");
    let addrs = |s: &snapshot::Snapshot| s.blocks.iter().map(|b| b.address).collect::<Vec<_>>();
    assert_eq!(addrs(&snap), addrs(&base));
    let pending = snap
        .blocks
        .iter()
        .find(|b| b.state == snapshot::BlockState::ActivePendingFree)
        .unwrap();
    assert!(!snap.stack(pending.stack).is_empty());
    assert!(report.summary.devices[&0].first_time_us.is_none());
}

#[test]
fn pytorch_1_13_bare_segment_list() {
    let (snap, _, report) = crate::support::analyze("variants/legacy_1_13.pickle");
    assert_eq!(snap.format.layout.as_str(), "legacy_segment_list");
    assert_eq!(report.summary.segments, 3);
    assert_eq!(report.summary.blocks, 3);
    assert!(snap.devices.is_empty());
    assert_eq!(report.warnings[0].code.as_str(), "history_not_enabled");
}

#[test]
fn integers_of_nine_bytes() {
    let snap = crate::support::read("variants/big_ints.pickle");
    let big_stream = (1u64 << 63) + 7;
    assert!(snap.segments.iter().all(|s| s.stream == big_stream));
    assert_eq!(snap.trace.addr.get(0), u64::MAX - 4095);
    assert!((0..snap.trace.len()).all(|r| snap.trace.stream(r) == big_stream));
    let (_, report) = analysis::analyze(&snap, &Default::default());
    assert_eq!(report.summary.segments, 3);
}

#[test]
fn unknown_keys_and_missing_keys_are_tolerated() {
    let doc = serde_json::json!({
        "segments": [{"device": 0, "address": 4096, "total_size": 2097152, "blocks": [
            {"size": 1024, "state": "active_allocated", "shiny_new_key": [1, 2, 3]},
            {"size": 2096128, "state": "inactive"}
        ], "future_field": {"a": 1}}],
        "device_traces": [[{"action": "alloc", "addr": 4096, "size": 1000, "brand_new": true},
                           {"action": "some_future_action", "addr": 0, "size": 0}]],
        "another_top_level_key": 5
    });
    let snap = snapshot::from_bytes(doc.to_string().as_bytes()).unwrap();
    assert_eq!(snap.blocks[0].address, 4096);
    assert_eq!(snap.blocks[1].address, 4096 + 1024);
    assert_eq!(snap.blocks[0].requested_size, 1024);
    let (_, report) = analysis::analyze(&snap, &Default::default());
    assert_eq!(report.summary.devices[&0].actions["some_future_action"], 1);
    assert_eq!(report.summary.allocated_bytes, 1024);
}

/// The trace-entry fast path (`fast.rs`) and the general pickle machine give identical tables.
#[test]
fn fast_path_equals_general_machine() {
    for name in crate::support::REAL_AND_VARIANTS {
        let path = crate::support::fixture(name);
        let fast = snapshot::read_sized(
            std::fs::File::open(&path).unwrap(),
            std::fs::metadata(&path).unwrap().len(),
        )
        .unwrap();
        let general = snapshot::read_general(std::fs::File::open(&path).unwrap()).unwrap();
        assert_same_tables(name, &fast, &general);
    }
}

/// The fast path may differ from the general machine only by leaving an entry to it: on inputs
/// changed in their trace (a byte replaced by an opcode the fast path acts on, or by anything),
/// both read the same devices' rows or both refuse. Runs of entries read in one step
/// (`fast::apply_run`) end at the changed entry, in the middle of a run as at its start.
#[test]
fn fast_path_equals_general_machine_on_changed_traces() {
    const OPS: &[u8] = b"}(uehjqr]NKMJ\x8a\x8c\x94\x95\x88G.s";
    let mut rng = crate::support::Rng(0x41_f00d);
    let (mut same_ok, mut same_err) = (0, 0);
    for name in [
        "steady_train.pickle",
        "multistream.pickle",
        "variants/multistream.proto2.pickle",
        "harness/outside_pytorch.oom.pickle",
    ] {
        let bytes = crate::support::decompressed(&crate::support::fixture(name));
        // The trace is the file's last part: change bytes past its first third.
        let from = bytes.len() / 3;
        for _ in 0..200 {
            let mut b = bytes.clone();
            for _ in 0..1 + rng.below(3) {
                let at = from + rng.below(bytes.len() - from);
                b[at] = if rng.below(2) == 0 {
                    OPS[rng.below(OPS.len())]
                } else {
                    rng.next() as u8
                };
            }
            match (snapshot::from_bytes(&b), snapshot::read_general(&b[..])) {
                (Ok(fast), Ok(general)) => {
                    assert_same_device_rows(name, &fast, &general);
                    same_ok += 1;
                }
                (Err(_), Err(_)) => same_err += 1,
                // The fast path makes a row of an entry dict at its `SETITEMS`, the general
                // machine where the dict is placed: a `SETITEM` into the dict in between (which
                // CPython never writes) is refused by the one, read by the other, or refused
                // at another offset (the arm above).
                (Err(e), Ok(_)) if e.to_string().contains("adds to a trace entry") => same_err += 1,
                (fast, general) => panic!(
                    "{name}: the fast path gave {:?}, the general machine {:?}",
                    fast.map(|s| s.trace.len()),
                    general.map(|s| s.trace.len())
                ),
            }
        }
    }
    // Both outcomes were exercised.
    assert!(
        same_ok > 50 && same_err > 50,
        "{same_ok} read, {same_err} refused"
    );
}

/// `read_file` (its bytes read on a second thread when the file is big) gives the tables of
/// one thread reading in memory, without the content hash (which only an upload's stream read
/// takes), whatever the file's size.
#[test]
fn read_file_gives_the_tables_of_one_thread() {
    for name in crate::support::REAL_AND_VARIANTS {
        let bytes = crate::support::decompressed(&crate::support::fixture(name));
        let one = snapshot::from_bytes(&bytes).unwrap();
        let two = snapshot::read_file(&bytes[..], bytes.len() as u64).unwrap();
        assert_same_tables(name, &two, &one);
        assert_eq!(
            one.content_hash,
            xxhash_rust::xxh3::xxh3_128(&bytes),
            "{name}"
        );
        assert_eq!(two.content_hash, 0, "{name}");
    }
}

/// The rows of each device, in its order, the same in both: what the analyses read. (Rows in
/// no device's trace, from lists under a key that is not `device_traces`, may be in another
/// order: the fast path makes a row as it reads the entry, the general machine as it places it.)
fn assert_same_device_rows(name: &str, a: &snapshot::Snapshot, b: &snapshot::Snapshot) {
    assert_eq!(
        format!("{:?}", a.devices),
        format!("{:?}", b.devices),
        "{name}"
    );
    let row = |s: &snapshot::Snapshot, r: u32| {
        let t = &s.trace;
        fn sparse<T: Copy>(v: &[(u32, T)], r: u32) -> Option<T> {
            v.iter().find(|(at, _)| *at == r).map(|(_, x)| *x)
        }
        let text = |v: &[(u32, snapshot::intern::StrId)]| {
            sparse(v, r).map(|x| s.strings.get(x).to_string())
        };
        (
            t.action[r as usize],
            t.addr.get(r as usize),
            t.size.get(r as usize),
            t.stream(r as usize),
            t.time_us.get(r as usize),
            snapshot::frames::full_stack(s, t.stack.get(r as usize)),
            sparse(&t.device_free, r),
            text(&t.compile_context),
            text(&t.user_metadata),
            text(&t.other_action),
        )
    };
    for d in &a.devices {
        for r in d.rows.clone() {
            assert_eq!(row(a, r), row(b, r), "{name}: device {} row {r}", d.device);
        }
    }
    assert_eq!(a.blocks.len(), b.blocks.len(), "{name}");
}

fn assert_same_tables(name: &str, fast: &snapshot::Snapshot, general: &snapshot::Snapshot) {
    let (a, b) = (&fast.trace, &general.trace);
    assert_eq!(a.action, b.action, "{name}");
    assert_eq!(
        (&a.addr, &a.size, &a.stream_id, &a.streams, &a.time_us),
        (&b.addr, &b.size, &b.stream_id, &b.streams, &b.time_us),
        "{name}"
    );
    assert_eq!(
        (&a.device_free, &a.compile_context, &a.user_metadata),
        (&b.device_free, &b.compile_context, &b.user_metadata),
        "{name}"
    );
    for r in 0..a.len() {
        let fa = snapshot::frames::full_stack(fast, a.stack.get(r));
        let fb = snapshot::frames::full_stack(general, b.stack.get(r));
        assert_eq!(fa, fb, "{name} row {r}");
    }
    assert_eq!(
        format!("{:?}", fast.devices),
        format!("{:?}", general.devices),
        "{name}"
    );
    assert_eq!(fast.blocks.len(), general.blocks.len(), "{name}");
}

/// `SHORT_BINUNICODE` of `text`.
fn short_str(b: &mut Vec<u8>, text: &str) {
    b.extend([0x8c, text.len() as u8]);
    b.extend(text.as_bytes());
}

/// A frame dict named `name` (line 7 of model.py).
fn frame_dict(b: &mut Vec<u8>, name: &str) {
    b.extend(b"}(");
    short_str(b, "filename");
    short_str(b, "model.py");
    short_str(b, "line");
    b.extend([b'K', 7]);
    short_str(b, "name");
    short_str(b, name);
    b.push(b'u');
}

/// A pickle of protocol `proto` up to its first trace entry's frames list, just opened (its
/// `MARK`): frames pushed there come first in the memo, read by the general machine.
fn first_frames(proto: u8) -> Vec<u8> {
    let mut b = vec![0x80, proto, b'}', b'('];
    short_str(&mut b, "segments");
    b.push(b']');
    short_str(&mut b, "device_traces");
    b.extend(b"](](}(");
    short_str(&mut b, "action");
    short_str(&mut b, "alloc");
    short_str(&mut b, "frames");
    b.extend(b"](");
    b
}

/// A pickle read by the fast path, by the general machine, and as a file (the reader thread).
fn three_reads(b: &[u8]) -> [(&'static str, snapshot::model::Snapshot); 3] {
    [
        ("fast", snapshot::from_bytes(b).unwrap()),
        ("general", snapshot::read_general(b).unwrap()),
        ("read_file", snapshot::read_file(b, b.len() as u64).unwrap()),
    ]
}

/// Each trace row's frame names, joined with commas.
fn stack_names(snap: &snapshot::model::Snapshot) -> Vec<String> {
    (0..snap.trace.len())
        .map(|r| {
            let stack = snap.stack(snap.trace.stack.get(r));
            stack
                .iter()
                .map(|&f| snap.strings.get(snap.frame(f).name).to_string())
                .collect::<Vec<_>>()
                .join(",")
        })
        .collect()
}

/// The fast path caches stacks by the bytes of their frame list, and remembers the last list's
/// (`fast.rs`); a `PUT` that replaces a memoized frame changes what the same bytes mean, and
/// both must notice (entry 2 repeats entry 1's bytes after the `PUT`).
#[test]
fn a_frame_replaced_in_the_memo_is_not_served_from_the_stack_cache() {
    // An entry whose frames are `MARK BINGET 0 APPENDS`, with an optional field first.
    fn entry(b: &mut Vec<u8>, addr: u8, extra: impl Fn(&mut Vec<u8>)) {
        b.extend(b"}(");
        short_str(b, "action");
        short_str(b, "alloc");
        short_str(b, "addr");
        b.extend([b'J', 0, addr, 0, 0]);
        short_str(b, "size");
        b.extend([b'K', 64]);
        extra(b);
        short_str(b, "frames");
        b.extend(b"](h\x00e");
        b.push(b'u');
    }
    // Memo slot 0: frame `f`, inside an entry the general machine reads.
    let mut b = first_frames(2);
    frame_dict(&mut b, "f");
    b.extend(b"q\x00eu");
    entry(&mut b, 1, |_| {}); // fast path: caches `h\x00` as [f]
    // Slot 0 replaced by frame `g` (BINPUT of an existing index) before this entry's frames.
    entry(&mut b, 2, |b| {
        short_str(b, "extra");
        frame_dict(b, "g");
        b.extend(b"q\x00");
    });
    entry(&mut b, 3, |_| {}); // fast path: the same bytes now mean [g]
    b.extend(b"eeu.");

    for (how, snap) in three_reads(&b) {
        let names = stack_names(&snap);
        assert_eq!(names, ["f", "f", "g", "g"], "{how}");
    }
}

/// The fast path finds a frames list's end as the first `APPENDS` byte (`e`) after its `MARK`
/// and takes the stack only when the bytes before it are a list met before (`fast.rs`,
/// `State::known_list`). A memo index can hold that byte: frame 101 is `BINGET 0x65`, so the
/// first `e` of `[101, 7]`, `[7, 101]` and `[101]` is inside an index, and each must still be
/// read whole, the first time and when it repeats, beside `[7]` (a prefix of `[7, 101]`).
#[test]
fn an_appends_byte_inside_a_frame_index_does_not_end_the_list() {
    // Memo slots 0 to 109: frames `f0` to `f109`, in an entry the general machine reads.
    let mut b = first_frames(4);
    for i in 0..110 {
        frame_dict(&mut b, &format!("f{i}"));
        b.push(0x94);
    }
    b.extend(b"eu");
    // Slots 110 to 114: the keys and the action, memoized by an entry of frame 7.
    b.extend(b"}(");
    for (key, then) in [
        ("action", None),
        ("alloc", None),
        ("addr", Some(&b"J\x00\x01\x00\x00"[..])),
    ] {
        short_str(&mut b, key);
        b.push(0x94);
        if let Some(v) = then {
            b.extend(v);
        }
    }
    short_str(&mut b, "size");
    b.push(0x94);
    b.extend([b'K', 64]);
    short_str(&mut b, "frames");
    b.push(0x94);
    b.extend(b"](h\x07eu");
    // Entries naming those slots (a run), with their frames lists.
    let lists: [&[u8]; 6] = [&[101, 7], &[101, 7], &[7], &[7, 101], &[7], &[101]];
    for (k, list) in lists.iter().enumerate() {
        b.extend([b'}', b'(', b'h', 110, b'h', 111, b'h', 112]);
        b.extend([b'J', 0, 2 + k as u8, 0, 0]);
        b.extend([b'h', 113, b'K', 64, b'h', 114, b']', b'(']);
        for &f in *list {
            b.extend([b'h', f]);
        }
        b.extend(b"eu");
    }
    b.extend(b"eeu.");

    for (how, snap) in three_reads(&b) {
        let names = stack_names(&snap);
        // The first entry's stack is its 110 frames.
        assert_eq!(names.len(), 8, "{how}");
        assert_eq!(
            names[1..],
            ["f7", "f101,f7", "f101,f7", "f7", "f7,f101", "f7", "f101"],
            "{how}"
        );
    }
}

/// The content hash is of the decoded bytes: one snapshot compressed three ways hashes alike
/// (the library keeps it once); another encoding of it is other bytes and hashes differently.
#[test]
fn the_content_hash_ignores_compression() {
    let plain = crate::support::read("multistream.pickle").content_hash;
    assert_ne!(plain, 0);
    for name in [
        "variants/multistream.pickle.gz",
        "variants/multistream.pickle.zst",
        "variants/multistream.pickle.xz",
    ] {
        assert_eq!(crate::support::read(name).content_hash, plain, "{name}");
    }
    assert_ne!(
        crate::support::read("variants/multistream.proto2.pickle").content_hash,
        plain
    );
}

/// Under a secret (a library's, `Limits::content_secret`) the hash still ignores compression,
/// but it is another hash: under another secret, or none, the same bytes hash differently, so
/// no one who does not hold the secret can make a file that hashes as a given snapshot does.
#[test]
fn a_secret_keys_the_content_hash() {
    let keyed = |name: &str, secret: Option<&snapshot::ContentSecret>| {
        let path = crate::support::fixture(name);
        let f = std::fs::File::open(&path).unwrap();
        let limits = snapshot::Limits {
            content_secret: secret.cloned(),
            ..snapshot::Limits::default()
        };
        snapshot::read_with_limits(f, limits).unwrap().content_hash
    };
    let one = snapshot::ContentSecret::new(std::array::from_fn(|i| (i * 7 + 1) as u8));
    let two = snapshot::ContentSecret::new(std::array::from_fn(|i| (i * 11 + 3) as u8));
    let under_one = keyed("multistream.pickle", Some(&one));
    assert_ne!(under_one, 0);
    for name in [
        "variants/multistream.pickle.gz",
        "variants/multistream.pickle.zst",
        "variants/multistream.pickle.xz",
    ] {
        assert_eq!(keyed(name, Some(&one)), under_one, "{name}");
    }
    let under_two = keyed("multistream.pickle", Some(&two));
    let unkeyed = keyed("multistream.pickle", None);
    assert_ne!(under_one, under_two);
    assert_ne!(under_one, unkeyed);
    assert_eq!(
        unkeyed,
        crate::support::read("multistream.pickle").content_hash
    );
    // The secret never shows in a debug print of the limits.
    let shown = format!(
        "{:?}",
        snapshot::Limits {
            content_secret: Some(one),
            ..snapshot::Limits::default()
        }
    );
    assert!(shown.contains("ContentSecret(..)"), "{shown}");
    assert!(!shown.contains("[1, 8, 15"), "{shown}");
}
