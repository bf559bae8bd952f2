//! The parse alone, on one thread, from bytes already in memory: the steadiest figure for a
//! change to the parser on a noisy machine (issue 41, bench/README.md).
//!
//!     cargo run --release -p snapshot --example parse_only -- FILE [REPEATS]
//!
//! Reads FILE whole first (not timed), then parses it REPEATS times (5 by default) and prints
//! the times in seconds, fastest first. The whole CLI's wall time on a 164 MB file spread over
//! ±15–40 % on a shared 2-core machine; the fastest of five parses, alternated between two
//! builds six times, spread over ±3 %. The input is still copied and hashed on the parser's
//! thread here (the CLI does that on its reader thread): compare builds with each other, not
//! with the CLI.

use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let path = args.next().expect("usage: parse_only FILE [REPEATS]");
    let repeats: usize = args
        .next()
        .map_or(5, |r| r.parse().expect("REPEATS: a count"));
    let bytes = std::fs::read(&path).expect("FILE: readable");
    let mut times_s: Vec<f64> = (0..repeats)
        .map(|_| {
            let t = Instant::now();
            let snap = snapshot::read_sized(&bytes[..], bytes.len() as u64).expect("a snapshot");
            let took = t.elapsed().as_secs_f64();
            std::hint::black_box(snap.trace.len());
            took
        })
        .collect();
    times_s.sort_by(f64::total_cmp);
    let shown: Vec<String> = times_s.iter().map(|t| format!("{t:.3}")).collect();
    println!("{}", shown.join(" "));
}
