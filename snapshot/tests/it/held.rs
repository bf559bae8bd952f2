//! Issue 38, item 1: what a parse holds is bounded by what it has read (hostile inputs are
//! refused when they build far more than their bytes) and by a budget shared with other
//! parses, while real snapshots (a million live blocks, the fixtures) hold less than their
//! bytes and are never refused.

use std::collections::HashMap;
use std::io::Read;

use snapshot::{Error, Limits, MemoryBudget};

use crate::support::hostile::{dict_then_strings, empty_segments};

/// Writes pickles the way Python's pickler does (protocol 4: every dict and list memoized, a
/// repeated string written once and fetched from the memo after).
#[derive(Default)]
struct Pickler {
    out: Vec<u8>,
    memo: u32,
    strings: HashMap<String, u32>,
}

impl Pickler {
    fn new() -> Pickler {
        Pickler {
            out: b"\x80\x04".to_vec(),
            ..Pickler::default()
        }
    }

    fn memoize(&mut self) -> u32 {
        self.out.push(0x94);
        self.memo += 1;
        self.memo - 1
    }

    fn str(&mut self, s: &str) {
        if let Some(&i) = self.strings.get(s) {
            if i < 256 {
                self.out.extend([b'h', i as u8]);
            } else {
                self.out.push(b'j');
                self.out.extend(i.to_le_bytes());
            }
            return;
        }
        self.out.push(0x8c);
        self.out.push(s.len() as u8);
        self.out.extend(s.as_bytes());
        let i = self.memoize();
        self.strings.insert(s.to_string(), i);
    }

    fn int(&mut self, v: u64) {
        match v {
            0..256 => self.out.extend([b'K', v as u8]),
            256..65536 => {
                self.out.push(b'M');
                self.out.extend((v as u16).to_le_bytes());
            }
            65536..0x8000_0000 => {
                self.out.push(b'J');
                self.out.extend((v as u32).to_le_bytes());
            }
            _ => {
                let bytes = v.to_le_bytes();
                let mut n = 8 - v.leading_zeros() as usize / 8;
                if bytes[n - 1] & 0x80 != 0 {
                    n += 1;
                }
                self.out.extend([0x8a, n as u8]);
                self.out.extend(&bytes[..n.min(8)]);
                if n == 9 {
                    self.out.push(0);
                }
            }
        }
    }

    fn dict(&mut self, pairs: impl FnOnce(&mut Pickler)) {
        self.out.push(b'}');
        self.memoize();
        self.out.push(b'(');
        pairs(self);
        self.out.push(b'u');
    }

    fn list(&mut self, items: impl FnOnce(&mut Pickler)) {
        self.out.push(b']');
        self.memoize();
        self.out.push(b'(');
        items(self);
        self.out.push(b'e');
    }

    fn finish(mut self) -> Vec<u8> {
        self.out.push(b'.');
        self.out
    }
}

/// A segments-only snapshot (no history recorded) of `segments` segments of `blocks` live
/// blocks each, as `torch.cuda.memory._dump_snapshot` writes it.
fn many_blocks(segments: u64, blocks: u64) -> Vec<u8> {
    const BLOCK_BYTES: u64 = 512;
    let mut p = Pickler::new();
    p.dict(|p| {
        p.str("segments");
        p.list(|p| {
            for s in 0..segments {
                let address = 0x7f00_0000_0000 + s * blocks * BLOCK_BYTES;
                p.dict(|p| {
                    for (k, v) in [
                        ("device", 0),
                        ("address", address),
                        ("total_size", blocks * BLOCK_BYTES),
                        ("allocated_size", blocks * BLOCK_BYTES),
                        ("active_size", blocks * BLOCK_BYTES),
                        ("requested_size", blocks * 500),
                        ("stream", 0),
                    ] {
                        p.str(k);
                        p.int(v);
                    }
                    p.str("segment_type");
                    p.str("small");
                    p.str("blocks");
                    p.list(|p| {
                        for b in 0..blocks {
                            p.dict(|p| {
                                p.str("address");
                                p.int(address + b * BLOCK_BYTES);
                                p.str("size");
                                p.int(BLOCK_BYTES);
                                p.str("requested_size");
                                p.int(500);
                                p.str("state");
                                p.str("active_allocated");
                                p.str("frames");
                                p.list(|_| {});
                            });
                        }
                    });
                });
            }
        });
        p.str("device_traces");
        p.list(|_| {});
    });
    p.finish()
}

/// A segments-only snapshot of `segments` segments of two live blocks each, with the keys
/// PyTorch 2.1+ writes (a pool id tuple, `is_expandable`, an empty `frames` list).
fn many_segments(segments: u64) -> Vec<u8> {
    let mut p = Pickler::new();
    p.dict(|p| {
        p.str("segments");
        // Appended in batches of 1000, as Python's pickler does: a batch's segments are
        // placed in the list (and lowered) at its APPENDS.
        p.out.push(b']');
        p.memoize();
        for s in 0..segments {
            if s.is_multiple_of(1000) {
                p.out.push(b'(');
            }
            {
                let address = 0x7f00_0000_0000 + s * (4 << 20);
                p.dict(|p| {
                    for (k, v) in [
                        ("device", 0),
                        ("address", address),
                        ("total_size", 2 << 20),
                        ("allocated_size", 2 << 20),
                        ("active_size", 2 << 20),
                        ("requested_size", 2 << 20),
                        ("stream", s % 3),
                    ] {
                        p.str(k);
                        p.int(v);
                    }
                    p.str("segment_type");
                    p.str("large");
                    p.str("segment_pool_id");
                    p.int(s % 2);
                    p.int(s % 5);
                    p.out.push(0x86); // TUPLE2
                    p.memoize();
                    p.str("is_expandable");
                    p.out.push(if s.is_multiple_of(7) { 0x88 } else { 0x89 });
                    p.str("frames");
                    p.list(|_| {});
                    p.str("blocks");
                    p.list(|p| {
                        for b in 0..2 {
                            p.dict(|p| {
                                p.str("address");
                                p.int(address + b * (1 << 20));
                                p.str("size");
                                p.int(1 << 20);
                                p.str("requested_size");
                                p.int(1 << 20);
                                p.str("state");
                                p.str("active_allocated");
                                p.str("frames");
                                p.list(|_| {});
                            });
                        }
                    });
                });
            }
            if s % 1000 == 999 || s + 1 == segments {
                p.out.push(b'e');
            }
        }
        p.str("device_traces");
        p.list(|_| {});
    });
    p.finish()
}

/// Limits with a small allowance, so that what is weighed is the ratio to the input.
fn tight() -> Limits {
    Limits {
        held_allowance_bytes: 16 << 20,
        ..Limits::default()
    }
}

/// The error of a read that must fail (a snapshot's `Debug` is too long to print).
fn refused(read: snapshot::Result<snapshot::Snapshot>, what: &str) -> Error {
    match read {
        Ok(snap) => panic!("{what}: read ({} blocks)", snap.blocks.len()),
        Err(e) => e,
    }
}

/// The offset an error names (0 where it names none).
fn offset_of(err: &Error) -> u64 {
    match err {
        Error::LimitExceeded { offset, .. } => *offset,
        _ => 0,
    }
}

#[test]
fn a_million_live_blocks_hold_less_than_their_pickle() {
    let bytes = many_blocks(10_000, 100);
    let snap = snapshot::read_with_limits(&bytes[..], tight()).unwrap();
    assert_eq!(snap.blocks.len(), 1_000_000);
    assert_eq!(snap.segments.len(), 10_000);
    let b = &snap.blocks[123_456];
    assert_eq!((b.size, b.requested_size), (512, 500));
    assert_eq!(b.address, 0x7f00_0000_0000 + 123_456 * 512);
    assert!(b.state.is_active());
}

/// Segments are lowered to rows as they are placed in their list (with their blocks list and
/// pool id tuple), as blocks are: 150,000 of them read within the held limit, which their dicts
/// exceeded (they held ~3.5x their pickle), and read back as written.
#[test]
fn many_segments_hold_less_than_their_pickle() {
    let bytes = many_segments(150_000);
    let snap = snapshot::read_with_limits(&bytes[..], tight()).unwrap();
    assert_eq!(snap.segments.len(), 150_000);
    assert_eq!(snap.blocks.len(), 300_000);
    for i in [0usize, 1, 7, 123_456, 149_999] {
        let s = &snap.segments[i];
        let n = i as u64;
        assert_eq!(s.address, 0x7f00_0000_0000 + n * (4 << 20), "segment {i}");
        assert_eq!((s.total_size, s.requested_size), (2 << 20, 2 << 20));
        assert_eq!(s.stream, n % 3);
        assert_eq!(s.pool_id, ((n % 2) as i64, (n % 5) as i64));
        assert_eq!(s.is_expandable, n.is_multiple_of(7));
        assert_eq!(s.segment_type, snapshot::SegmentType::Large);
        assert_eq!(s.blocks.len(), 2);
        let b = &snap.blocks[s.blocks.start as usize + 1];
        assert_eq!((b.address, b.size), (s.address + (1 << 20), 1 << 20));
    }
    assert_eq!(snap.format.layout, snapshot::Layout::Modern);
}

#[test]
fn every_real_snapshot_reads_within_the_held_limit() {
    let mut read = 0;
    for name in crate::follow::all_files() {
        let bytes = std::fs::read(crate::support::fixture(&name)).unwrap();
        let Ok(plain) = snapshot::read(&bytes[..]) else {
            continue;
        };
        let limits = Limits {
            held_allowance_bytes: 4 << 20,
            ..Limits::default()
        };
        let held = snapshot::read_with_limits(&bytes[..], limits)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(held.trace.len(), plain.trace.len(), "{name}");
        read += 1;
    }
    assert!(read > 50, "{read} snapshots read");
}

#[test]
fn inputs_that_build_far_more_than_their_bytes_are_refused_early() {
    let total = 64 << 20;
    let mut json_zeros = b"{\"segments\":[],\"x\":[0".to_vec();
    while json_zeros.len() + 4 < total {
        json_zeros.extend(b",0");
    }
    json_zeros.extend(b"]}");
    let mut pickle_dicts = b"\x80\x04}(\x8c\x08segments](".to_vec();
    pickle_dicts.resize(total - 3, b'}');
    pickle_dicts.extend(b"eu.");
    for (name, bytes) in [
        ("distinct strings after a dict", dict_then_strings(total)),
        ("JSON zeros", json_zeros),
        ("JSON empty segments", empty_segments(total)),
        ("pickle empty dicts", pickle_dicts),
    ] {
        let err = refused(snapshot::read_with_limits(&bytes[..], tight()), name);
        assert!(
            matches!(&err, Error::LimitExceeded { what, .. } if what.contains("bytes held")),
            "{name}: {err}"
        );
        let at = offset_of(&err);
        assert!(
            at > 0 && at < 24 << 20,
            "{name}: refused at {at}, not near its end ({total})"
        );
    }
}

/// Feeds `bytes` up to `pause` at once, then the rest when told: a parse that holds its share
/// of the budget while it waits for its upload's next bytes.
struct Paused {
    bytes: Vec<u8>,
    at: usize,
    pause: usize,
    go: std::sync::mpsc::Receiver<()>,
}

impl Read for Paused {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.at == self.pause {
            let _ = self.go.recv();
            self.pause = usize::MAX;
        }
        let end = self.bytes.len().min(self.pause).min(self.at + buf.len());
        let n = end - self.at;
        buf[..n].copy_from_slice(&self.bytes[self.at..end]);
        self.at = end;
        Ok(n)
    }
}

#[test]
fn parses_share_one_memory_budget() {
    let bytes = many_blocks(20_000, 100);
    let budget = MemoryBudget::new(160 << 20);
    let with = |budget: &MemoryBudget| Limits {
        budget: Some(budget.clone()),
        ..Limits::default()
    };
    // Alone, a parse fits; it gives everything back when done.
    snapshot::read_with_limits(&bytes[..], with(&budget)).unwrap();
    assert_eq!(budget.free_bytes(), 160 << 20);
    // One parse that needs more than the whole budget is too large, not busy.
    let small = MemoryBudget::new(32 << 20);
    let err = refused(
        snapshot::read_with_limits(&bytes[..], with(&small)),
        "over the budget",
    );
    assert!(
        matches!(&err, Error::LimitExceeded { what, limit, .. }
            if what.contains("budget") && *limit == 32 << 20),
        "{err}"
    );
    // A parse that finds the budget held by another one is busy, and goes through after it.
    let (go, wait) = std::sync::mpsc::channel();
    let first = Paused {
        bytes: bytes.clone(),
        at: 0,
        pause: bytes.len() * 7 / 8,
        go: wait,
    };
    let limits = with(&budget);
    let held = std::thread::spawn(move || snapshot::read_with_limits(first, limits));
    // Paused at 7/8 the first holds ~70 MB and a 16 MiB step; the second needs ~93 MB.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while budget.free_bytes() > 90 << 20 {
        assert!(
            std::time::Instant::now() < deadline,
            "the first parse took {} MiB",
            ((160 << 20) - budget.free_bytes()) >> 20
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let err = refused(
        snapshot::read_with_limits(&bytes[..], with(&budget)),
        "beside a parse holding the budget",
    );
    assert!(matches!(err, Error::Busy { .. }), "{err}");
    assert!(err.to_string().contains("try again"), "{err}");
    go.send(()).unwrap();
    held.join().unwrap().unwrap();
    snapshot::read_with_limits(&bytes[..], with(&budget)).unwrap();
    assert_eq!(budget.free_bytes(), 160 << 20, "all given back");
}
