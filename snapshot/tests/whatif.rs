//! The what-if simulator against real GPU runs (`tests/fixtures/whatif`, recorded by
//! `collectors/harness/device-whatif.sh` on an H100): each workload ran under every setting, with
//! and without a per-process limit, in fresh processes. From the trace of the run under PyTorch's
//! defaults alone, the simulator must predict every other run's peak reserved bytes exactly and
//! whether it ran out of memory; replayed under its own settings, every recorded trace must give
//! back its own segment events.

mod common;

use snapshot::analysis::Index;
use snapshot::whatif::{Options, whatif};

fn dir() -> std::path::PathBuf {
    common::fixtures().join("whatif")
}

/// The real runs: (file stem, figures PyTorch reported).
fn runs() -> Vec<(String, serde_json::Value)> {
    let mut out: Vec<(String, serde_json::Value)> = std::fs::read_dir(dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.extension().is_some_and(|e| e == "json")
                && !p
                    .file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with("limits")
        })
        .map(|p| {
            let stem = p.file_stem().unwrap().to_string_lossy().to_string();
            let v = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
            (stem, v)
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn load(stem: &str) -> snapshot::Snapshot {
    common::read(&format!("whatif/{stem}.pickle.xz"))
}

fn options(conf: &str, real: &serde_json::Value) -> Options {
    Options {
        alloc_confs: vec![conf.to_string()],
        limit_bytes: real["allowed_bytes"].as_u64(),
        limit_is_fraction: true,
        ..Default::default()
    }
}

#[test]
fn predictions_from_the_default_trace_match_every_real_run() {
    let all = runs();
    let mut checked = 0;
    let mut failures = Vec::new();
    for (stem, real) in &all {
        let workload = real["workload"].as_str().unwrap();
        let conf = real["alloc_conf"].as_str().unwrap();
        let snap = load(&format!("{workload}.default"));
        let index = Index::new(&snap);
        let w = whatif(&snap, &index, &options(conf, real)).unwrap();
        let run = w.runs.iter().find(|r| r.alloc_conf == conf).unwrap();
        let real_peak = real["peak_reserved_bytes"].as_u64().unwrap();
        let real_oom = !real["oom"].is_null();
        if run.peak_reserved_bytes != real_peak || run.oom != real_oom {
            failures.push(format!(
                "{stem}: predicted peak {} oom {}, real {real_peak} oom {real_oom}",
                run.peak_reserved_bytes, run.oom
            ));
        }
        checked += 1;
    }
    assert!(checked >= 50, "{checked} runs");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_recorded_trace_replays_exactly_under_its_own_settings() {
    let mut failures = Vec::new();
    for (stem, real) in runs() {
        let snap = load(&stem);
        let index = Index::new(&snap);
        let conf = real["alloc_conf"].as_str().unwrap();
        let w = whatif(&snap, &index, &options(conf, &real)).unwrap();
        let c = &w.replay_check;
        assert_eq!(w.recorded_alloc_conf, conf, "{stem}");
        if !c.exact || c.allocs != c.allocs_at_recorded_address {
            failures.push(format!(
                "{stem}: {}/{} segment events, {}/{} allocations at their address, peak {} vs {}: {:?}",
                c.matched_segment_events,
                c.recorded_segment_events,
                c.allocs_at_recorded_address,
                c.allocs,
                c.replayed_peak_reserved_bytes,
                c.recorded_peak_reserved_bytes,
                c.first_divergence.as_ref().map(|d| &d.why)
            ));
        }
        // The run under its own settings is the recorded one, and says what PyTorch said.
        let own = w.runs.iter().find(|r| r.recorded).unwrap();
        assert_eq!(
            own.peak_reserved_bytes,
            real["peak_reserved_bytes"].as_u64().unwrap(),
            "{stem}"
        );
        assert_eq!(own.oom, !real["oom"].is_null(), "{stem}");
        assert_eq!(
            own.alloc_retries,
            real["alloc_retries"].as_u64().unwrap(),
            "{stem}: retries"
        );
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn an_oom_snapshot_implies_its_limit_and_expandable_segments_avoid_it() {
    // The harness's oom_fragmentation: 6 MiB blocks under a 2 GiB fraction, two of three freed,
    // then 24 MiB asked for. Recorded: out of memory. Expandable segments: no OOM.
    let (snap, index, _) = common::analyze("harness/oom_fragmentation.oom.pickle");
    let w = whatif(&snap, &index, &Options::default()).unwrap();
    let limit = w.limit.as_ref().unwrap();
    assert_eq!((limit.kind, limit.source), ("fraction", "oom"));
    assert!(w.replay_check.exact);
    let recorded = w.runs.iter().find(|r| r.recorded).unwrap();
    assert!(recorded.oom);
    let best = &w.runs[0];
    assert_eq!(best.alloc_conf, "expandable_segments:True");
    assert!(!best.oom && best.saving_bytes > 0);
}
