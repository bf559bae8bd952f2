//! Engine benchmark: parse + every analysis on one file, streamed from disk. Prints one JSON line
//! with timings, MB/s, the model's bytes per trace entry and this process's peak RSS, and the
//! memory-by-category labelling on its own (`categories_s`, one thread, and its share of the
//! report it is part of).
//! Driven by `bench/engine.py`, which runs Python's `pickle.load` on the same file for the ratio.
//!
//!     cargo run --release -p snapshot --example bench -- FILE [REPEATS]

use std::time::Instant;

fn peak_rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .map(|l| l.to_string())
        })
        .and_then(|l| {
            l.split_whitespace()
                .nth(1)
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let path = args.next().expect("usage: bench FILE [REPEATS]");
    let repeats: usize = args.next().map_or(1, |r| r.parse().unwrap());
    let file_bytes = std::fs::metadata(&path).unwrap().len();
    let mut best = (f64::MAX, 0.0, 0.0, 0.0, 0.0);
    let mut last = None;
    for _ in 0..repeats {
        drop(last.take());
        let t0 = Instant::now();
        let open = || std::fs::File::open(&path).unwrap();
        let mut followed = None;
        let snap = if std::env::var_os("MEMSCOPE_FOLLOW").is_some() {
            // Indexed while parsing (as uploads are): the index step below only reconciles.
            let (snap, index) = snapshot::read_file_indexed(open(), file_bytes).unwrap();
            followed = Some(index);
            snap
        } else if std::env::var_os("MEMSCOPE_ONE_THREAD").is_some() {
            snapshot::read_sized(open(), file_bytes).unwrap()
        } else {
            snapshot::read_file(open(), file_bytes).unwrap()
        };
        let parse_s = t0.elapsed().as_secs_f64();
        let t1 = Instant::now();
        let index = followed.unwrap_or_else(|| snapshot::analysis::Index::new(&snap));
        let index_s = t1.elapsed().as_secs_f64();
        let t2 = Instant::now();
        let report = snapshot::analysis::report(&snap, &index, &Default::default());
        let report_s = t2.elapsed().as_secs_f64();
        for d in &index.devices {
            let _ = snapshot::analysis::stacks_at(&snap, &index, d.device, None, 50);
            let _ = snapshot::analysis::state_at(&snap, &index, d.device, d.len / 2);
            let _ = snapshot::analysis::timeline(&snap, &index, d.device, 0, d.len, 1000);
            let _ = snapshot::analysis::allocations_in_window(
                &snap, &index, d.device, 0, d.len, 15_000,
            );
        }
        let total_s = t0.elapsed().as_secs_f64();
        if total_s < best.0 {
            best = (total_s, parse_s, total_s - parse_s, index_s, report_s);
        }
        last = Some((snap, index, report));
    }
    let (snap, index, report) = last.unwrap();
    // The report alone, again and again on the same snapshot, each time on a fresh index (its
    // lazily worked-out tables not yet filled): `MEMSCOPE_REPORT_RUNS=N`, the times sorted. The
    // report's tail is a few tenths of a second, too little against a noisy parse to compare
    // two builds by their totals.
    let report_runs: usize =
        std::env::var("MEMSCOPE_REPORT_RUNS").map_or(0, |n| n.parse().unwrap());
    let mut report_runs_s: Vec<f64> = (0..report_runs)
        .map(|_| {
            let fresh = snapshot::analysis::Index::new(&snap);
            let t = Instant::now();
            std::hint::black_box(snapshot::analysis::report(
                &snap,
                &fresh,
                &Default::default(),
            ));
            t.elapsed().as_secs_f64()
        })
        .collect();
    report_runs_s.sort_by(f64::total_cmp);
    // The allocated peak on its own (issue 33): block sizes worked out from the trace, one pass.
    let t = Instant::now();
    for d in &index.devices {
        std::hint::black_box(snapshot::analysis::peaks::allocated_peak(&snap, d));
    }
    let allocated_peak_s = t.elapsed().as_secs_f64();
    // Memory by category (issue 35) on its own, on one thread: every allocation labelled and the
    // bytes per category at the peak, on an index that has not labelled them yet (the report
    // above already did, on its own index).
    let fresh = snapshot::analysis::Index::new(&snap);
    let t = Instant::now();
    for d in &fresh.devices {
        let labels = snapshot::analysis::categories::categories(&snap, &fresh, d);
        std::hint::black_box(labels.labels.len());
        std::hint::black_box(snapshot::analysis::categories::totals_at(
            &snap,
            &fresh,
            d,
            d.peak_position,
        ));
    }
    let categories_s = t.elapsed().as_secs_f64();
    // The timeline stacked by category: 1,200 buckets over the whole trace, each read where its
    // live bytes are highest.
    let t = Instant::now();
    for d in &fresh.devices {
        let n = d.len.max(1);
        let buckets: Vec<(u32, u32)> = (0..1200u64)
            .map(|k| {
                (
                    (n as u64 * k / 1200) as u32,
                    (n as u64 * (k + 1) / 1200) as u32,
                )
            })
            .collect();
        std::hint::black_box(snapshot::analysis::categories::at_bucket_peaks(
            &snap, &fresh, d, &buckets,
        ));
    }
    let timeline_categories_s = t.elapsed().as_secs_f64();
    drop(fresh);
    let entries = snap.trace.len().max(1);
    let model = snap.heap_bytes() + index.heap_bytes();
    let out = serde_json::json!({
        "file": path,
        "file_bytes": file_bytes,
        "decoded_bytes": snap.format.decoded_bytes,
        "entries": snap.trace.len(),
        "total_s": best.0,
        "parse_s": best.1,
        "report_runs_s": report_runs_s,
        "analyses_s": best.2,
        "index_s": best.3,
        "report_s": best.4,
        "allocated_peak_s": allocated_peak_s,
        "categories_s": categories_s,
        "categories_over_report": categories_s / best.4,
        "timeline_categories_s": timeline_categories_s,
        "decoded_mb_per_s": snap.format.decoded_bytes as f64 / 1e6 / best.0,
        "tables_bytes_per_entry": snap.heap_bytes() as f64 / entries as f64,
        "model_bytes_per_entry": model as f64 / entries as f64,
        "model_bytes": model,
        "peak_rss_bytes": peak_rss_bytes(),
        "leak_suspects": report.leak_suspects.len(),
        "ooms": report.ooms.len(),
    });
    println!("{out}");
}
