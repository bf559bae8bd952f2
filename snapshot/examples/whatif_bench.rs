//! The what-if replay benchmark (issue 12): a trace of about a million events replayed under
//! the recorded settings (the check) and every built-in candidate, timed apart from parsing and
//! indexing. `cargo run --release -p snapshot --example whatif_bench -- FILE [TILES]`: the
//! file's first traced device is tiled TILES times in time and address space (default: enough
//! tiles for 1,000,000 events), so a fixture stands in for a long run.

use std::time::Instant;

use snapshot::analysis::Index;
use snapshot::analysis::whatif::{CANDIDATES, Options, whatif};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let path = args.get(1).expect("usage: whatif_bench FILE [TILES]");
    let t0 = Instant::now();
    let mut snap = snapshot::read(std::fs::File::open(path).unwrap()).unwrap();
    let parse_s = t0.elapsed().as_secs_f64();
    let d = snap
        .devices
        .iter()
        .position(|d| !d.rows.is_empty())
        .expect("a traced device");
    let rows = snap.devices[d].rows.clone();
    let n = rows.len();
    let tiles: usize = args
        .get(2)
        .map(|t| t.parse().unwrap())
        .unwrap_or(1_000_000usize.div_ceil(n));
    // Tile the device's rows: each copy shifted past the previous one in time and addresses,
    // appended after the table (the device's rows become one range again).
    let t = &mut snap.trace;
    let span_us = t.time_us.get(rows.end as usize - 1) - t.time_us.get(rows.start as usize) + 1;
    let mut copied = 0;
    for k in 1..tiles {
        for r in rows.clone() {
            let r = r as usize;
            t.action.push(t.action[r]);
            t.addr
                .push(t.addr.get(r).wrapping_add(k as u64 * (1 << 40)));
            t.size.push(t.size.get(r));
            t.stream_id.push(t.stream_id.get(r));
            t.time_us.push(t.time_us.get(r) + k as i64 * span_us);
            t.stack.push(t.stack.get(r));
            copied += 1;
        }
    }
    // The device's rows: its own, then the copies (rows of other devices are left out).
    let first = rows.start;
    if copied > 0 {
        assert_eq!(
            rows.end as usize,
            t.action.len() - copied,
            "the device's rows must be last"
        );
    }
    snap.devices[d].rows = first..t.action.len() as u32;
    let events = snap.devices[d].rows.len();
    let t1 = Instant::now();
    let index = Index::new(&snap);
    let index_s = t1.elapsed().as_secs_f64();
    let mut best = f64::MAX;
    let mut last = None;
    for _ in 0..3 {
        let t2 = Instant::now();
        let w = whatif(&snap, &index, &Options::default()).unwrap();
        best = best.min(t2.elapsed().as_secs_f64());
        last = Some(w);
    }
    let w = last.unwrap();
    let replays = w.runs.len();
    println!(
        "{{\"file\": {:?}, \"events\": {events}, \"tiles\": {tiles}, \"settings\": {replays}, \"candidates\": {}, \"parse_s\": {parse_s:.3}, \"index_s\": {index_s:.3}, \"whatif_s\": {best:.3}, \"ns_per_event_per_setting\": {:.1}, \"replay_exact\": {}}}",
        path,
        CANDIDATES.len(),
        best * 1e9 / (events as f64 * replays as f64),
        w.replay_check.exact
    );
}
