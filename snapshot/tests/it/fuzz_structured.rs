//! A structure-aware fuzzer for the whole read path, runnable without cargo-fuzz (which needs
//! `libfuzzer-sys`, not available offline here): real snapshots as seeds, mutated byte-wise and
//! with a dictionary of the pickle opcodes and snapshot keys the reader acts on (field names,
//! actions, huge and negative integers, containers, memo references), each input read under
//! small limits and, if it reads, analysed. A panic, or an input slower than 5 s, is a finding,
//! saved under `target/fuzz-findings/`.
//!
//! `MEMSCOPE_FUZZ_SECS=1800 cargo test --release -p snapshot --test it -- fuzz_structured:: --ignored --nocapture`
//! (issue 13 asks for ≥ 30 minutes); it prints executions, rate, the slowest input and findings.

use crate::support::Rng;

use std::time::{Duration, Instant};

/// Pickle fragments the reader acts on: keys as SHORT_BINUNICODE, integers at the edges,
/// containers and memo operations.
fn dictionary() -> Vec<Vec<u8>> {
    let keys = [
        "segments",
        "device_traces",
        "blocks",
        "history",
        "frames",
        "filename",
        "line",
        "name",
        "action",
        "addr",
        "size",
        "stream",
        "time_us",
        "device",
        "address",
        "total_size",
        "allocated_size",
        "active_size",
        "requested_size",
        "segment_type",
        "state",
        "is_expandable",
        "alloc",
        "free_requested",
        "free_completed",
        "segment_alloc",
        "segment_free",
        "segment_map",
        "segment_unmap",
        "oom",
        "snapshot",
        "device_free",
        "active_allocated",
        "active_pending_free",
        "inactive",
        "large",
        "small",
        "allocator_settings",
        "external_annotations",
        "stage",
        "user_metadata",
        "compile_context",
        "real_size",
        "PYTORCH_CUDA_ALLOC_CONF",
        "expandable_segments",
        "max_split_size",
        "garbage_collection_threshold",
        "pool_id",
    ];
    let mut d: Vec<Vec<u8>> = keys
        .iter()
        .map(|k| [&[0x8c, k.len() as u8][..], k.as_bytes()].concat())
        .collect();
    for v in [
        0i32,
        1,
        -1,
        255,
        256,
        65_535,
        i32::MAX,
        i32::MIN,
        512,
        2 << 20,
    ] {
        d.push([&b"J"[..], &v.to_le_bytes()].concat());
    }
    for v in [u64::MAX, 1 << 63, (1 << 63) - 1, 1 << 40, 0] {
        d.push([&[0x8a, 8][..], &v.to_le_bytes()].concat()); // LONG1
    }
    d.push([&[0x8a, 9][..], &[0xff; 9]].concat()); // a 9-byte long
    for op in [
        &b"("[..],
        b")",
        b"]",
        b"}",
        b"e",
        b"u",
        b"s",
        b"a",
        b"t",
        b"\x85",
        b"\x86",
        b"\x87",
        b"0",
        b"1",
        b"2",
        b"N",
        b"\x88",
        b"\x89",
        b"\x94",
        b"h\x00",
        b"h\x01",
        b"j\xff\xff\xff\x7f",
        b"q\x00",
        b"r\x00\x00\x00\x00",
        b"K\x00",
        b"K\xff",
        b"M\xff\xff",
        b"G\x7f\xf0\0\0\0\0\0\0",
        b"G\xff\xf8\0\0\0\0\0\0",
        b"C\x00",
        b"\x95\x00\x00\x00\x00\x00\x00\x00\x00",
        b".",
    ] {
        d.push(op.to_vec());
    }
    d
}

fn mutate(rng: &mut Rng, seed: &[u8], dict: &[Vec<u8>], seeds: &[Vec<u8>]) -> Vec<u8> {
    let mut b = seed.to_vec();
    for _ in 0..1 + rng.below(6) {
        if b.is_empty() {
            b.push(0x80);
        }
        let i = rng.below(b.len());
        match rng.below(9) {
            0 => b[i] = rng.next() as u8,
            1 => {
                b.remove(i);
            }
            2 => b.insert(i, rng.next() as u8),
            3 | 4 => {
                let word = &dict[rng.below(dict.len())];
                b.splice(i..i, word.iter().copied());
            }
            5 => {
                // Overwrite with a dictionary word (keeps the length).
                let word = &dict[rng.below(dict.len())];
                let end = (i + word.len()).min(b.len());
                b[i..end].copy_from_slice(&word[..end - i]);
            }
            6 => {
                // Duplicate a stretch elsewhere (repeats a structure).
                let len = 1 + rng.below(256.min(b.len() - i));
                let chunk = b[i..i + len].to_vec();
                let at = rng.below(b.len());
                b.splice(at..at, chunk);
            }
            7 => {
                // Splice in a stretch of another seed.
                let other = &seeds[rng.below(seeds.len())];
                if !other.is_empty() {
                    let j = rng.below(other.len());
                    let len = 1 + rng.below(512.min(other.len() - j));
                    b.splice(i..i, other[j..j + len].iter().copied());
                }
            }
            _ => b.truncate(i.max(1)),
        }
    }
    b
}

/// Reads (and analyses) one input; whether it read as a snapshot.
fn run_one(bytes: &[u8]) -> bool {
    let limits = snapshot::Limits {
        max_string_bytes: 1 << 20,
        max_stack: 1 << 16,
        max_memo: 1 << 16,
        max_live_containers: 1 << 16,
        max_container_items: 1 << 20,
        max_string_pool_bytes: 1 << 22,
        max_depth: 64,
        max_decoded_bytes: 64 << 20,
        max_expansion: 100,
        size_hint_bytes: 0,
        max_held_percent_of_input: 150,
        held_allowance_bytes: 16 << 20,
        budget: None,
        content_secret: None,
    };
    let indexed = snapshot::read_indexed_with_limits(bytes, limits.clone());
    if let Ok(snap) = snapshot::read_with_limits(bytes, limits) {
        let (index, _report) = snapshot::analysis::analyze(&snap, &Default::default());
        // Indexing while parsing gives the same index, whatever shape the input has.
        let (_, during) = indexed.expect("read while indexing");
        assert_eq!(
            format!("{:?}", during.devices),
            format!("{:?}", index.devices)
        );
        for d in &index.devices {
            let _ = snapshot::analysis::state_at(&snap, &index, d.device, d.len / 2);
            let _ = snapshot::analysis::timeline(&snap, &index, d.device, 0, d.len, 16);
        }
        return true;
    }
    assert!(indexed.is_err(), "read only while indexing");
    false
}

#[test]
#[ignore = "runs for MEMSCOPE_FUZZ_SECS (default 60); see the module docs"]
fn structure_aware_fuzz() {
    let secs: u64 = std::env::var("MEMSCOPE_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let mut seeds: Vec<Vec<u8>> = Vec::new();
    for dir in [
        crate::support::fixtures(),
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds"),
    ] {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            let small = p.metadata().is_ok_and(|m| m.len() < 1 << 20);
            let name = p.to_string_lossy().to_string();
            if small
                && (name.ends_with(".pickle") || name.ends_with(".gz") || name.ends_with(".json"))
            {
                seeds.push(std::fs::read(&p).unwrap());
            }
        }
    }
    assert!(seeds.len() >= 5, "seeds found: {}", seeds.len());
    let dict = dictionary();
    let out = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/fuzz-findings");
    let _ = std::fs::create_dir_all(&out);
    std::panic::set_hook(Box::new(|_| {})); // findings are reported below, not as panics
    let started = Instant::now();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ started.elapsed().as_nanos() as u64);
    let (mut execs, mut parsed, mut findings) = (0u64, 0u64, 0u64);
    let mut slowest = (Duration::ZERO, 0usize);
    let mut next_report = Duration::from_secs(60);
    while started.elapsed() < Duration::from_secs(secs) {
        let seed = &seeds[rng.below(seeds.len())];
        let input = mutate(&mut rng, seed, &dict, &seeds);
        let t = Instant::now();
        let result = std::panic::catch_unwind(|| run_one(&input));
        parsed += u64::from(matches!(result, Ok(true)));
        let took = t.elapsed();
        execs += 1;
        if took > slowest.0 {
            slowest = (took, input.len());
        }
        let slow = took > Duration::from_secs(5);
        if result.is_err() || slow {
            findings += 1;
            let kind = if slow { "slow" } else { "panic" };
            let path = out.join(format!("{kind}-{execs}.bin"));
            std::fs::write(&path, &input).unwrap();
            eprintln!(
                "finding: {kind} ({took:?}), input saved to {}",
                path.display()
            );
        }
        if started.elapsed() > next_report {
            eprintln!(
                "fuzz: {:.0} s, {execs} executions ({:.0}/s), {parsed} read as snapshots, {findings} findings",
                started.elapsed().as_secs_f64(),
                execs as f64 / started.elapsed().as_secs_f64()
            );
            next_report += Duration::from_secs(60);
        }
    }
    let _ = std::panic::take_hook();
    println!(
        "structure-aware fuzz: {:.0} s, {execs} executions ({:.0}/s) over {} seeds with {} dictionary words; \
         {parsed} inputs read as snapshots; slowest input {:?} ({} bytes); {findings} findings",
        started.elapsed().as_secs_f64(),
        execs as f64 / started.elapsed().as_secs_f64(),
        seeds.len(),
        dict.len(),
        slowest.0,
        slowest.1
    );
    assert_eq!(findings, 0, "see target/fuzz-findings/");
}
