//! Uploaded pickles are untrusted. Every code-executing opcode, truncation, garbage, deep nesting
//! and absurd declared length must end in an error that names the problem: never a panic, never
//! unbounded memory or time.

use snapshot::{Error, Limits};

fn read(bytes: &[u8]) -> Result<snapshot::Snapshot, Error> {
    snapshot::from_bytes(bytes)
}

#[test]
fn code_executing_opcodes_are_rejected_with_name_and_offset() {
    let cases: &[(&[u8], &str)] = &[
        (b"c__builtin__\neval\n", "GLOBAL"),
        (b"\x8c\x08builtins\x8c\x04eval\x93", "STACK_GLOBAL"),
        (b"N)R", "REDUCE"),
        (b"}}b", "BUILD"),
        (b"(i__main__\nX\n", "INST"),
        (b"(N)o", "OBJ"),
        (b"N)\x81", "NEWOBJ"),
        (b"N))}\x92", "NEWOBJ_EX"),
        (b"P1\n", "PERSID"),
        (b"NQ", "BINPERSID"),
        (b"\x82\x01", "EXT1"),
        (b"\x83\x01\x00", "EXT2"),
        (b"\x84\x01\x00\x00\x00", "EXT4"),
        (b"\x97", "NEXT_BUFFER"),
        (b"N\x98", "READONLY_BUFFER"),
    ];
    for (body, name) in cases {
        let mut bytes = b"\x80\x04".to_vec();
        bytes.extend_from_slice(body);
        bytes.push(b'.');
        let err = read(&bytes).expect_err(name);
        let msg = err.to_string();
        assert!(
            msg.starts_with(&format!(
                "not a memory snapshot: pickle opcode {name} at offset "
            )),
            "{name}: {msg}"
        );
        match err {
            Error::ForbiddenOpcode { opcode, offset, .. } => {
                assert_eq!(opcode, *name);
                assert_eq!(
                    bytes[offset as usize],
                    body[body.len() - 1 - trailing_args(name)],
                    "{name} offset {offset}"
                );
            }
            other => panic!("{name}: {other:?}"),
        }
    }
}

/// Bytes after the opcode that belong to it (its argument), for the offset check above.
fn trailing_args(name: &str) -> usize {
    match name {
        "GLOBAL" => "__builtin__\neval\n".len(),
        "INST" => "__main__\nX\n".len(),
        "PERSID" => 2,
        "EXT1" => 1,
        "EXT2" => 2,
        "EXT4" => 4,
        _ => 0,
    }
}

#[test]
fn forbidden_opcode_inside_a_real_snapshot_names_its_offset() {
    let mut bytes = std::fs::read(crate::support::fixture("multistream.pickle")).unwrap();
    // Replace an opcode well inside the file (a MEMOIZE, per pickletools) by GLOBAL.
    let at = 1839;
    assert_eq!(bytes[at], 0x94);
    bytes[at] = b'c';
    let msg = read(&bytes).unwrap_err().to_string();
    assert!(
        msg.contains("not a memory snapshot: pickle opcode GLOBAL at offset 1839"),
        "{msg}"
    );
}

#[test]
fn bytes_after_the_pickle_are_refused_not_kept() {
    // Issue 13, finding 9: a second pickle appended after STOP (one that would run code if a
    // viewer unpickled the whole file) passed through and was stored and served back.
    let bytes = std::fs::read(crate::support::fixture("leak_detached_cache.pickle")).unwrap();
    let mut appended = bytes.clone();
    appended.extend_from_slice(
        b"\x80\x04\x95\x15\x00\x00\x00\x00\x00\x00\x00\x8c\x02os\x8c\x06system\x93.",
    );
    let msg = read(&appended).unwrap_err().to_string();
    assert!(
        msg.contains(&format!("at offset {}", bytes.len()))
            && msg.contains("bytes follow the pickle's STOP opcode"),
        "{msg}"
    );
    // One byte is enough; the pickle alone still reads.
    let mut one = bytes.clone();
    one.push(0);
    assert!(read(&one).is_err());
    assert!(read(&bytes).is_ok());
}

#[test]
fn wrong_shapes_and_impossible_sizes_are_errors_not_zeros() {
    // Issue 13, finding 9: `segments` given as a dict read as "0 segments", and a negative
    // total_size wrapped to "16384 PiB reserved".
    let cases = [
        (
            r#"{"segments": {"0": {}}, "device_traces": []}"#,
            "its 'segments' is a dict instead of a list of segments",
        ),
        (
            r#"{"segments": [{"device": 0, "address": 4096, "total_size": -5, "stream": 0, "segment_type": "large", "blocks": []}], "device_traces": []}"#,
            "a segment's total_size is -5 bytes, which no device has",
        ),
        (
            r#"{"segments": [{"device": 0, "address": 4096, "total_size": 2097152, "stream": 0, "segment_type": "large", "blocks": [{"size": -1, "state": "active_allocated"}]}], "device_traces": []}"#,
            "a block's size is -1 bytes",
        ),
        (
            r#"{"segments": [{"device": 0, "address": 4096, "total_size": "big", "stream": 0, "blocks": []}], "device_traces": []}"#,
            "a segment's total_size is a string instead of a number of bytes",
        ),
    ];
    for (json, want) in cases {
        let msg = read(json.as_bytes()).unwrap_err().to_string();
        assert!(msg.contains(want), "{json}\n  gave: {msg}");
    }
    // A trace entry's size wrapped to 16 EiB, or read as 0 when it was not a number.
    for (size, want) in [
        ("-512", "`size` is -512"),
        ("\"big\"", "`size` is not an integer"),
    ] {
        let json = format!(
            r#"{{"segments": [], "device_traces": [[{{"action": "alloc", "addr": 4096, "size": {size}, "stream": 0, "frames": []}}]]}}"#
        );
        let msg = read(json.as_bytes()).unwrap_err().to_string();
        assert!(msg.contains(want), "{json}\n  gave: {msg}");
    }
    // In a pickle (the fast path hands it to the machine), with the byte offset.
    let pickle = b"\x80\x04\x95u\x00\x00\x00\x00\x00\x00\x00}\x94(\x8c\x08segments\x94]\x94\x8c\rdevice_traces\x94]\x94]\x94}\x94(\x8c\x06action\x94\x8c\x05alloc\x94\x8c\x04addr\x94M\x00\x10\x8c\x04size\x94J\x00\xfe\xff\xff\x8c\x06stream\x94K\x00\x8c\x07time_us\x94K\x01\x8c\x06frames\x94]\x94uaau.";
    match read(pickle) {
        Err(Error::Malformed { offset, message }) => {
            assert!(message.contains("`size` is -512"), "{message}");
            assert!(
                offset > 60 && offset < pickle.len() as u64,
                "offset {offset}"
            );
        }
        other => panic!("{:?}", other.map(|_| ())),
    }
    // The well-formed one reads.
    let ok = r#"{"segments": [{"device": 0, "address": 4096, "total_size": 2097152, "stream": 0, "segment_type": "large", "blocks": [{"size": 2097152, "state": "inactive"}]}], "device_traces": []}"#;
    assert_eq!(read(ok.as_bytes()).unwrap().segments.len(), 1);
}

#[test]
fn truncation_at_any_offset_is_an_error() {
    let bytes = std::fs::read(crate::support::fixture("leak_detached_cache.pickle")).unwrap();
    let mut offsets: Vec<usize> = (0..bytes.len()).step_by(311).collect();
    offsets.extend([0, 1, 2, 3, 10, 11, 12, bytes.len() - 2, bytes.len() - 1]);
    for cut in offsets {
        match read(&bytes[..cut]) {
            Err(Error::Truncated { offset, .. }) => assert!(offset <= cut as u64),
            Err(e) => panic!("cut at {cut}: expected a truncation error, got {e}"),
            Ok(_) => panic!("cut at {cut}: parsed a truncated file"),
        }
    }
    // Compressed input truncated mid-stream also fails cleanly.
    let xz = std::fs::read(crate::support::fixture("variants/multistream.pickle.xz")).unwrap();
    // (A cut inside the container's footer, after all data, still yields the whole pickle.)
    for cut in [10, xz.len() / 3, xz.len() / 2, xz.len() * 2 / 3] {
        assert!(read(&xz[..cut]).is_err(), "xz cut at {cut}");
    }
    let gz = std::fs::read(crate::support::fixture("variants/multistream.pickle.gz")).unwrap();
    assert!(read(&gz[..gz.len() / 2]).is_err());
}

#[test]
fn deep_nesting_needs_no_native_stack() {
    // 2 million nested lists: [[[[...]]]]
    let depth = 2_000_000;
    let mut bytes = b"\x80\x04".to_vec();
    bytes.extend(std::iter::repeat_n(b']', depth));
    bytes.extend(std::iter::repeat_n(b'a', depth - 1));
    bytes.push(b'.');
    let err = read(&bytes).unwrap_err();
    assert!(
        matches!(err, Error::NotASnapshot(_) | Error::LimitExceeded { .. }),
        "{err}"
    );
    // Deeply nested dicts inside allocator_settings hit the depth limit, not the stack.
    let mut bytes = b"\x80\x04}\x8c\x08segments]\x8c\x12allocator_settings".to_vec();
    bytes.extend(std::iter::repeat_n(b']', 10_000));
    bytes.extend(std::iter::repeat_n(b'a', 9_999));
    bytes.extend(b"(\x8c\x08segments]u");
    let _ = read(&bytes); // must not overflow the stack; error or not
    // Unbalanced MARKs.
    let mut marks = b"\x80\x04".to_vec();
    marks.extend(std::iter::repeat_n(b'(', 1_000_000));
    marks.push(b'.');
    assert!(read(&marks).is_err());
}

#[test]
fn huge_declared_lengths_are_refused_without_allocating() {
    let cases: &[&[u8]] = &[
        b"\x80\x04\x8d\xff\xff\xff\xff\xff\xff\xff\x7f", // BINUNICODE8 of 2^63 bytes
        b"\x80\x04X\xff\xff\xff\x7f",                    // BINUNICODE of 2 GiB
        b"\x80\x04\x8e\x00\x00\x00\x00\x00\x01\x00\x00", // BINBYTES8 of 2^40
        b"\x80\x04\x8b\xff\xff\xff\x7f",                 // LONG4 of 2 GiB
        b"\x80\x04\x96\x00\x00\x00\x00\x10\x00\x00\x00", // BYTEARRAY8
    ];
    for bytes in cases {
        match read(bytes) {
            Err(Error::LimitExceeded { offset: 2, .. }) => {}
            other => panic!("{bytes:?}: {other:?}"),
        }
    }
    // Within the limit but longer than the file: truncated, not allocated up front.
    match read(b"\x80\x04X\x00\x00\x00\x03abc") {
        Err(Error::Truncated { .. }) => {}
        other => panic!("{other:?}"),
    }
    // A memo index far beyond anything stored is an error, not a giant allocation.
    assert!(read(b"\x80\x04N\x72\xff\xff\xff\xff\x6a\x00\x00\x00\x10.").is_err());
}

/// Issue 13, finding 4: a 1 MB gzip drove the server to 6.1 GB. A compressed input is held to a
/// decompressed size, absolute and relative to what was read: a bomb stops at the limit with an
/// error that says so, while real snapshots (10–30×) pass untouched.
#[test]
fn a_decompression_bomb_stops_at_the_limit() {
    use std::io::Write;
    // A pickle that keeps the reader busy: a list of 1 MiB strings, 200 of them (200 MiB).
    let mut pickle = b"\x80\x04](".to_vec();
    let string = [&b"X"[..], &(1u32 << 20).to_le_bytes(), &vec![b'a'; 1 << 20]].concat();
    for _ in 0..200 {
        pickle.extend_from_slice(&string);
    }
    pickle.extend_from_slice(b"e.");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(&pickle).unwrap();
    let bomb = gz.finish().unwrap();
    assert!(bomb.len() < 1 << 20, "{} bytes expand 1000×", bomb.len());

    let limits = Limits {
        max_expansion: 100,
        ..Limits::default()
    };
    match snapshot::read_with_limits(bomb.as_slice(), limits) {
        Err(e @ Error::TooExpanded { limit_bytes, .. }) => {
            assert_eq!(limit_bytes, snapshot::EXPANSION_FLOOR_BYTES);
            assert!(e.to_string().contains("decompression bomb"), "{e}");
        }
        other => panic!("{:?}", other.map(|_| ())),
    }
    let absolute = Limits {
        max_decoded_bytes: 8 << 20,
        ..Limits::default()
    };
    assert!(matches!(
        snapshot::read_with_limits(bomb.as_slice(), absolute),
        Err(Error::TooExpanded { limit_bytes, .. }) if limit_bytes == 8 << 20
    ));
    // Without limits it is read to the end (and is no snapshot).
    assert!(matches!(
        snapshot::read_with_limits(bomb.as_slice(), Limits::default()),
        Err(Error::NotASnapshot(_))
    ));
    // A real compressed snapshot passes under the server's defaults.
    let real = std::fs::read(crate::support::fixture("big_python.pickle.xz")).unwrap();
    let server_defaults = Limits {
        max_expansion: 100,
        max_decoded_bytes: 16 << 30,
        ..Limits::default()
    };
    snapshot::read_with_limits(real.as_slice(), server_defaults).unwrap();
}

#[test]
fn limits_bound_memory() {
    let limits = Limits {
        max_stack: 1000,
        max_live_containers: 100,
        ..Limits::default()
    };
    let many_nones = [b"\x80\x04".as_slice(), &[b'N'; 5000], b"."].concat();
    assert!(matches!(
        snapshot::read_with_limits(many_nones.as_slice(), limits.clone()),
        Err(Error::LimitExceeded { .. })
    ));
    let many_lists = [b"\x80\x04".as_slice(), &[b']'; 500], b"."].concat();
    assert!(matches!(
        snapshot::read_with_limits(many_lists.as_slice(), limits),
        Err(Error::LimitExceeded { .. })
    ));
}

/// Issue 38, item 3: a pickle of `NONE`, `POP` forever builds nothing and would hold a parse
/// slot for as long as it is sent; it is refused once its opcodes outnumber what they built.
#[test]
fn opcodes_that_build_nothing_are_refused() {
    let nothing = [b"\x80\x02".as_slice(), &b"N0".repeat(4 << 20), b"N."].concat();
    let err = snapshot::from_bytes(&nothing).unwrap_err();
    assert!(
        matches!(&err, Error::NotASnapshot(m) if m.contains("build nothing")),
        "{err}"
    );
    if let Error::NotASnapshot(m) = &err {
        let opcodes: u64 = m.split(' ').next().unwrap().parse().unwrap();
        assert!(opcodes < 8 << 20, "refused early: {m}");
    }
}

/// Issue 38, item 1: a list of distinct strings (the probe's 600 MB of them took the server to
/// 5.4 GB) is refused once 16 MiB have gone by without a dict, not at the end.
#[test]
fn a_pickle_without_a_dict_is_refused_early() {
    let strings = crate::support::hostile::distinct_strings(24 << 20);
    let err = snapshot::from_bytes(&strings).unwrap_err();
    let Error::NotASnapshot(message) = &err else {
        panic!("{err}");
    };
    assert!(message.contains("no dict in the first 16 MiB"), "{message}");
    let offset: u64 = message
        .split("by offset ")
        .nth(1)
        .and_then(|r| r.split(')').next())
        .and_then(|n| n.parse().ok())
        .unwrap();
    assert!(offset < 18 << 20, "refused soon after 16 MiB: {offset}");
}

/// Issue 38: a JSON snapshot's strings are held to the same limit as a pickle's (values and keys).
#[test]
fn json_strings_are_held_to_the_string_limit() {
    let limits = Limits {
        max_string_bytes: 1000,
        ..Limits::default()
    };
    let long = "x".repeat(1001);
    for doc in [
        format!(r#"{{"segments": [], "note": "{long}"}}"#),
        format!(r#"{{"segments": [], "{long}": 1}}"#),
    ] {
        let err = snapshot::read_with_limits(doc.as_bytes(), limits.clone()).unwrap_err();
        assert!(
            matches!(err, Error::LimitExceeded { limit: 1000, .. }),
            "{err}"
        );
    }
    let fits = format!(r#"{{"segments": [], "note": "{}"}}"#, "x".repeat(1000));
    assert!(snapshot::read_with_limits(fits.as_bytes(), limits).is_ok());
}

#[test]
fn garbage_and_wrong_shapes_get_clear_errors() {
    let e = read(b"hello world, this is not a pickle")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("not a memory snapshot") || e.contains("malformed") || e.contains("JSON"),
        "{e}"
    );
    assert!(read(b"").unwrap_err().to_string().contains("empty"));
    let e = read(b"\x80\x04K\x05.").unwrap_err().to_string();
    assert!(e.contains("holds an integer"), "{e}");
    let e = read(b"\x80\x04}\x8c\x01a\x8c\x01bs.")
        .unwrap_err()
        .to_string();
    assert!(e.contains("without a 'segments' key"), "{e}");
    let e = read(b"\x80\x09N.").unwrap_err().to_string();
    assert!(e.contains("protocol 9"), "{e}");
    let e = read(b"{\"segments\": [1, 2").unwrap_err().to_string();
    assert!(e.starts_with("invalid JSON snapshot"), "{e}");
    let e = read(b"\x80\x04N\x01.").unwrap_err().to_string();
    assert!(e.contains("unknown pickle opcode 0x01 at offset 3"), "{e}");
}

/// Deterministic xorshift so failures reproduce.
#[test]
fn random_mutations_never_panic() {
    let base = std::fs::read(crate::support::fixture("multistream.pickle")).unwrap();
    let mut rng = crate::support::Rng(0x5eed_1234_abcd_9876);
    for _ in 0..3000 {
        let mut bytes = base.clone();
        for _ in 0..1 + rng.next() % 8 {
            let i = (rng.next() % bytes.len() as u64) as usize;
            match rng.next() % 3 {
                0 => bytes[i] = rng.next() as u8,
                1 => {
                    bytes.remove(i);
                }
                _ => bytes.insert(i, rng.next() as u8),
            }
        }
        if let Ok(snap) = read(&bytes) {
            // Whatever parses must also analyse without panicking.
            let _ = snapshot::analysis::analyze(&snap, &Default::default());
        }
    }
    for _ in 0..2000 {
        let n = (rng.next() % 300) as usize;
        let mut bytes = b"\x80\x04".to_vec();
        bytes.extend((0..n).map(|_| rng.next() as u8));
        let _ = read(&bytes);
    }
}
