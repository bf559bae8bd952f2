//! Will-it-fit benchmark (issue 36): predicting 10 sizes from two recordings, against one plain
//! replay of one recording (the what-if's replay under the recorded settings) in the same run,
//! and the search for the largest size that fits under a limit. Prints one JSON line.
//!
//!     cargo run --release -p snapshot --example predict_bench -- A.pickle=SIZE_A B.pickle=SIZE_B [REPEATS]

use std::time::Instant;

use snapshot::analysis::whatif::conf::AllocConf;
use snapshot::analysis::whatif::predict::{Recording, answer};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (recs, rest): (Vec<&String>, Vec<&String>) = args.iter().partition(|a| a.contains('='));
    let repeats: usize = rest.first().map_or(3, |r| r.parse().unwrap());
    let loaded: Vec<(snapshot::Snapshot, f64)> = recs
        .iter()
        .map(|r| {
            let (file, size) = r.rsplit_once('=').unwrap();
            let bytes = std::fs::read(file).unwrap();
            (snapshot::read(&bytes[..]).unwrap(), size.parse().unwrap())
        })
        .collect();
    let indexes: Vec<snapshot::analysis::Index> = loaded
        .iter()
        .map(|(s, _)| snapshot::analysis::Index::new(s))
        .collect();
    let recordings: Vec<Recording> = loaded
        .iter()
        .zip(&indexes)
        .map(|((snap, size), index)| Recording {
            snap,
            index,
            device: index.default_device().unwrap().device,
            size: *size,
        })
        .collect();
    let largest = recordings.iter().map(|r| r.size).fold(0.0, f64::max);
    let sizes: Vec<f64> = (1..=10).map(|k| largest * (1.0 + k as f64)).collect();
    let conf = AllocConf::default();
    let (mut predict_s, mut replay_s) = (f64::MAX, f64::MAX);
    let mut peaks = Vec::new();
    for _ in 0..repeats {
        let t = Instant::now();
        let a = answer(&recordings, &sizes, false, &conf, None).unwrap();
        predict_s = predict_s.min(t.elapsed().as_secs_f64());
        peaks = a
            .sizes
            .iter()
            .map(|s| s.prediction.peak_reserved_bytes)
            .collect();
        let r = &recordings[recordings.len() - 1];
        let d = r.index.device(r.device).unwrap();
        let t = Instant::now();
        let trace = snapshot::analysis::whatif::replay::Trace::new(r.snap, r.index, d);
        let out = trace
            .replay(
                conf.clone(),
                None,
                snapshot::analysis::whatif::replay::Releases::Discover,
                &Default::default(),
                &Default::default(),
            )
            .unwrap();
        std::hint::black_box(out.stats.peak_reserved_bytes);
        replay_s = replay_s.min(t.elapsed().as_secs_f64());
    }
    // The search for the largest size that fits, under a limit at the middle size's peak.
    let mut sorted = peaks.clone();
    sorted.sort_unstable();
    let limit = snapshot::analysis::whatif::allocator::Limit {
        bytes: sorted[sorted.len() / 2],
        kind: snapshot::analysis::whatif::allocator::LimitKind::Device,
    };
    let t = Instant::now();
    let searched = answer(&recordings, &[], true, &conf, Some(limit)).unwrap();
    let search_s = t.elapsed().as_secs_f64();
    let events: u32 = recordings
        .iter()
        .map(|r| r.index.device(r.device).unwrap().len)
        .sum();
    println!(
        "{}",
        serde_json::json!({
            "recordings": recordings.len(),
            "events": events,
            "sizes": sizes.len(),
            "predict_s": predict_s,
            "one_replay_s": replay_s,
            "ratio": predict_s / replay_s,
            "search_s": search_s,
            "largest_fitting_size": searched.largest_fitting_size,
            "peak_reserved_bytes": peaks,
        })
    );
}
