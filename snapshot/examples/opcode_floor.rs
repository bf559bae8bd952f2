//! The floor under any one-thread parse of a pickle (issue 41): every opcode of the file walked
//! and its argument stepped over, nothing decoded, nothing stored. A real parse does this and
//! more (values, the memo, the tables), so its time on one thread cannot go below this one's; the
//! gap between the two is what the engine's own work costs. The file is read whole first and timed
//! apart (the kernel's copy, which `readahead.rs` does on a second thread).
//!
//!     cargo run --release -p snapshot --example opcode_floor -- FILE [REPEATS]
//!
//! Prints one JSON line: the walk's best time, GB/s, and the opcodes, `MEMOIZE`s and
//! `EMPTY_DICT`s seen (about one dict per trace entry).

use std::time::Instant;

/// What the walk saw.
#[derive(Default)]
struct Counts {
    opcodes: u64,
    memoize: u64,
    dicts: u64,
}

/// Walks protocol 2–5 opcodes from the start to `STOP`; an opcode outside what snapshots use
/// ends the walk with an error naming it. `b` is the file padded with 16 zero bytes past `len`,
/// so a length prefix is read without a check of its own. A `match` on the opcode, not a table
/// of argument widths: the table put a load between each opcode and the next (0.66 s against
/// 0.43 s on the 1 GB file), where the branches let the processor run ahead.
fn walk(b: &[u8], len: usize) -> Result<Counts, String> {
    let mut c = Counts::default();
    let mut i = 0usize;
    let prefix = |i: usize, w: usize| {
        let raw = u64::from_le_bytes(b[i..i + 8].try_into().expect("padded"));
        w + if w == 8 {
            raw
        } else {
            raw & ((1 << (8 * w)) - 1)
        } as usize
    };
    while i < len {
        let op = b[i];
        c.opcodes += 1;
        i += 1;
        i += match op {
            b'.' => return Ok(c),
            0x94 => {
                c.memoize += 1;
                0
            }
            b'}' => {
                c.dicts += 1;
                0
            }
            b']'
            | b')'
            | b'('
            | b'u'
            | b'e'
            | b'a'
            | b's'
            | b't'
            | b'N'
            | b'0'
            | b'l'
            | b'd'
            | 0x85..=0x89 => 0,
            0x80 | b'h' | b'q' | b'K' => 1,
            b'M' => 2,
            b'j' | b'r' | b'J' => 4,
            b'G' | 0x95 => 8,
            0x8a | 0x8c | b'C' => prefix(i, 1),
            b'X' | b'B' => prefix(i, 4),
            0x8d | 0x8e => prefix(i, 8),
            _ => return Err(format!("opcode {op:#04x} at byte {}", i - 1)),
        };
    }
    Err("no STOP".into())
}

fn main() {
    let mut args = std::env::args().skip(1);
    let path = args.next().expect("usage: opcode_floor FILE [REPEATS]");
    let repeats: usize = args.next().map_or(3, |r| r.parse().expect("REPEATS"));
    let t0 = Instant::now();
    let mut bytes = std::fs::read(&path).expect("read the file");
    let read_s = t0.elapsed().as_secs_f64();
    let len = bytes.len();
    bytes.resize(len + 16, 0);
    let mut best = f64::MAX;
    let mut counts = Counts::default();
    for _ in 0..repeats.max(1) {
        let t = Instant::now();
        counts = walk(&bytes, len).unwrap_or_else(|e| panic!("{path}: {e}"));
        best = best.min(t.elapsed().as_secs_f64());
    }
    println!(
        "{{\"file\":{path:?},\"file_bytes\":{},\"read_s\":{read_s:.3},\"walk_s\":{best:.3},\"walk_gb_per_s\":{:.2},\"opcodes\":{},\"memoize\":{},\"dicts\":{}}}",
        len,
        len as f64 / best / 1e9,
        counts.opcodes,
        counts.memoize,
        counts.dicts
    );
}
