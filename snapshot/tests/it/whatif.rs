//! The what-if simulator against real GPU runs (`tests/fixtures/whatif`, recorded by
//! `collectors/harness/device-whatif.sh` on an H100): each workload ran under every setting, with
//! and without a per-process limit, in fresh processes. From the trace of the run under PyTorch's
//! defaults alone, the simulator must predict every other run's peak reserved bytes exactly and
//! whether it ran out of memory; replayed under its own settings, every recorded trace must give
//! back its own segment events.

use snapshot::analysis::Index;
use snapshot::analysis::whatif::{Options, whatif};
use snapshot::model::Action;

fn dir() -> std::path::PathBuf {
    crate::support::fixtures().join("whatif")
}

/// The real runs: (file stem, what the run wrote).
fn runs() -> Vec<(String, serde_json::Value)> {
    crate::support::real_runs("whatif")
}

fn load(stem: &str) -> snapshot::Snapshot {
    crate::support::read(&format!("whatif/{stem}.pickle.xz"))
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
        let w = whatif(
            &snap,
            &index,
            &Options {
                curves: true,
                ..options(conf, &real)
            },
        )
        .unwrap();
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
        // The curve drawn for it is the trace's own after every request (its cudaMallocs land on
        // the request that made them; the trace's segment events come just before), up to an OOM.
        let curves = w.curves.as_ref().unwrap();
        let d = index.traced().next().unwrap();
        let at = |c: &[(u32, u64)], p: u32| c.iter().take_while(|q| q.0 <= p).last().unwrap().1;
        let segment_event = |p: u32| {
            p < w.events
                && matches!(
                    snap.trace.action[d.row(p)],
                    Action::SegmentAlloc
                        | Action::SegmentFree
                        | Action::SegmentMap
                        | Action::SegmentUnmap
                )
        };
        let b = curves.bucket_events;
        let end = own.oom_position.unwrap_or(w.events);
        if b == 1 {
            for p in (1..=end).filter(|&p| !segment_event(p - 1)) {
                assert_eq!(
                    at(&own.reserved_curve, p),
                    at(&curves.reserved, p),
                    "{stem}: reserved after event {p}"
                );
            }
        } else {
            // Buckets (the highest value in each) agree unless a request and the segment events
            // the trace logged before it straddle a bucket's edge.
            for s in (0..end.saturating_sub(b)).step_by(b as usize) {
                let near_edge = |edge: u32| (edge.saturating_sub(8)..edge + 2).any(segment_event);
                if !near_edge(s) && !near_edge(s + b) {
                    assert_eq!(
                        at(&own.reserved_curve, s),
                        at(&curves.reserved, s),
                        "{stem}: reserved in the bucket at {s} (of {b} events)"
                    );
                }
            }
        }
        assert_eq!(
            own.reserved_curve.iter().map(|p| p.1).max(),
            curves.reserved.iter().map(|p| p.1).max(),
            "{stem}: peak"
        );
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn an_oom_snapshot_implies_its_limit_and_expandable_segments_avoid_it() {
    // The harness's oom_fragmentation: 6 MiB blocks under a 2 GiB fraction, two of three freed,
    // then 24 MiB asked for. Recorded: out of memory. Expandable segments: no OOM.
    let (snap, index, _) = crate::support::analyze("harness/oom_fragmentation.oom.pickle");
    let w = whatif(&snap, &index, &Options::default()).unwrap();
    let limit = w.limit.as_ref().unwrap();
    assert_eq!(
        (limit.kind, limit.source),
        (
            snapshot::analysis::whatif::LimitKind::Fraction,
            snapshot::analysis::whatif::LimitSource::Oom
        )
    );
    assert!(w.replay_check.exact);
    let recorded = w.runs.iter().find(|r| r.recorded).unwrap();
    assert!(recorded.oom);
    let best = &w.runs[0];
    assert_eq!(best.alloc_conf, "expandable_segments:True");
    assert!(!best.oom && best.saving_bytes > 0);
}

#[test]
fn a_limit_asked_for_is_a_what_if_and_the_replay_check_stays_on_the_record() {
    // The OOM trace under a roomier limit: the recorded settings would have fitted, and the check
    // still replays the trace under the limit its OOM implies (exact).
    let (snap, index, _) = crate::support::analyze("harness/oom_fragmentation.oom.pickle");
    let roomy = Options {
        limit_bytes: Some(3 << 30),
        limit_is_fraction: true,
        ..Default::default()
    };
    let w = whatif(&snap, &index, &roomy).unwrap();
    assert!(w.replay_check.exact, "{:?}", w.replay_check);
    assert_eq!(
        w.limit.as_ref().unwrap().source,
        snapshot::analysis::whatif::LimitSource::Given
    );
    assert!(w.runs.iter().all(|r| !r.oom), "everything fits in 3 GiB");
    // A trace without an OOM under a limit below its peak: the recorded settings run out, the
    // check (under no limit: it cannot have run under that one) is exact.
    let (snap, index, _) = crate::support::analyze("harness/fragmentation.pickle");
    let tight = Options {
        limit_bytes: Some(64 << 20),
        ..Default::default()
    };
    let w = whatif(&snap, &index, &tight).unwrap();
    assert!(w.replay_check.exact, "{:?}", w.replay_check);
    let recorded = w.runs.iter().find(|r| r.recorded).unwrap();
    assert!(recorded.oom && recorded.oom_position.is_some());
}

#[test]
fn past_an_oom_that_ends_the_trace_a_setting_is_not_said_to_fit() {
    // `punched` under its 2 GiB limit: the defaults run out at the first 24 MiB block and the
    // trace stops there. Replayed, expandable segments get past that request; on the GPU the
    // expandable run then ran out at the tenth block, which the trace never showed. So the advice
    // may say it gets past the OOM, never that the run would have fitted.
    let snap = load("punched.default.limit");
    let index = Index::new(&snap);
    let w = whatif(&snap, &index, &Options::default()).unwrap();
    assert!(w.oom_ends_trace && w.replay_check.exact);
    let expandable = w
        .runs
        .iter()
        .find(|r| r.alloc_conf == "expandable_segments:True")
        .unwrap();
    assert!(!expandable.oom, "it gets past the recorded OOM");
    let real: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir().join("punched.expandable_segments_True.limit.json"))
            .unwrap(),
    )
    .unwrap();
    // Step 10: nine of the 24 MiB blocks were made (steps count from 2), the tenth failed.
    assert_eq!(
        real["oom"]["step"], 10,
        "the real run failed later, at the tenth block"
    );
    let sim = snapshot::analysis::whatif::oom_whatif(&snap, &index, 0).unwrap();
    assert_eq!(sim.alloc_conf.as_deref(), Some("expandable_segments:True"));
    assert!(sim.oom_ends_trace);
    assert!(
        sim.advice.contains("would have got past this OOM")
            && sim
                .advice
                .contains("whether the rest of the run fits is not known")
            && !sim.advice.contains("would not have run out of memory"),
        "{}",
        sim.advice
    );
    // And from the trace recorded without a limit, the same setting is predicted to run out,
    // as it did.
    let free = load("punched.default");
    let free_index = Index::new(&free);
    let w = whatif(
        &free,
        &free_index,
        &Options {
            alloc_confs: vec!["expandable_segments:True".into()],
            limit_bytes: real["allowed_bytes"].as_u64(),
            limit_is_fraction: true,
            ..Default::default()
        },
    )
    .unwrap();
    let predicted = w.runs.iter().find(|r| !r.recorded).unwrap();
    assert!(predicted.oom);
}

/// A what-if whose cancel has fired stops with `Cancelled` (the server fires it when the client
/// goes away); the same question uncancelled is answered.
#[test]
fn a_cancelled_whatif_stops() {
    let snap = crate::support::read("big_python.pickle.xz");
    let index = Index::new(&snap);
    let cancel = snapshot::Cancel::new();
    let opts = Options {
        cancel: cancel.clone(),
        ..Default::default()
    };
    assert!(whatif(&snap, &index, &opts).is_ok());
    cancel.cancel();
    assert_eq!(
        whatif(&snap, &index, &opts).err(),
        Some(snapshot::analysis::whatif::WhatIfError::Cancelled)
    );
}

/// What the What if tab shows before any replay: the runs it will have, and the live
/// allocations' peak, below which no run that makes the trace's allocations reserves. Checked
/// against the replays themselves on every fixture with a trace (the GPU runs, the harness's,
/// the wild files). Only reserved bytes are bound: a block freed on one stream while another
/// still uses it counts as live until its free completes, and stays reserved, but PyTorch's
/// allocated bytes (and the model's) drop when the free is asked for (the `pending` fixtures).
#[test]
fn no_replay_reserves_less_than_the_outline_says() {
    use snapshot::analysis::whatif::outline;
    let mut checked = 0;
    let mut failures = Vec::new();
    for name in crate::support::all_fixtures() {
        // The GPU runs' other settings are the same workloads: their default traces stand for them.
        if name.starts_with("whatif/") && !name.contains(".default.") {
            continue;
        }
        let snap = crate::support::read(&name);
        let index = Index::new(&snap);
        let opts = Options::default();
        let (Ok(o), Ok(w)) = (outline(&snap, &index, &opts), whatif(&snap, &index, &opts)) else {
            assert_eq!(
                outline(&snap, &index, &opts).err(),
                whatif(&snap, &index, &opts).err().filter(|e| !matches!(
                    e,
                    snapshot::analysis::whatif::WhatIfError::Implausible(_)
                )),
                "{name}: the outline and the answer disagree on whether there is one"
            );
            continue;
        };
        assert_eq!(
            (o.device, o.events, o.settings as usize),
            (w.device, w.events, w.runs.len()),
            "{name}"
        );
        for r in w.runs.iter().filter(|r| r.first_oom_position.is_none()) {
            if r.peak_reserved_bytes < o.live_peak_bytes {
                failures.push(format!(
                    "{name} {:?}: reserved {} below the live peak {}",
                    r.alloc_conf, r.peak_reserved_bytes, o.live_peak_bytes
                ));
            }
        }
        checked += 1;
    }
    assert!(checked >= 40, "{checked} files");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A what-if watched while it runs: every event of every replay is counted, and the answer so
/// far ends as the whole answer, ranked the same.
#[test]
fn progress_counts_every_replay_and_ends_as_the_answer() {
    use snapshot::analysis::whatif::Progress;
    let snap = crate::support::read("big_python.pickle.xz");
    let index = Index::new(&snap);
    for limit_bytes in [None, Some(40 << 30), Some(1 << 30)] {
        let progress = std::sync::Arc::new(Progress::new(1));
        let w = whatif(
            &snap,
            &index,
            &Options {
                limit_bytes,
                progress: Some(progress.clone()),
                ..Default::default()
            },
        )
        .unwrap();
        let seen = progress.seen();
        // The check, then the recorded settings again where the limit differs from the check's
        // (1 GiB: the trace reserved more, so the check runs without it), then every other one.
        let again = u64::from(limit_bytes == Some(1 << 30));
        assert_eq!(
            seen.events_total,
            (w.runs.len() as u64 + again) * u64::from(w.events)
        );
        assert_eq!(seen.events_replayed, seen.events_total);
        assert_eq!(seen.settings as usize, w.runs.len());
        assert_eq!(seen.settings_replayed as usize, w.runs.len());
        let so_far = seen.so_far.unwrap();
        let key = |w: &snapshot::analysis::whatif::WhatIf| {
            w.runs
                .iter()
                .map(|r| (r.alloc_conf.clone(), r.peak_reserved_bytes, r.oom))
                .collect::<Vec<_>>()
        };
        assert_eq!(key(&so_far), key(&w));
        assert_eq!(so_far.replay_check.exact, w.replay_check.exact);
    }
}

/// The bound the What if tab shows before any replay, against the GPU: from the trace of each
/// workload's run under PyTorch's defaults, the live allocations' peak is the run's own
/// `requested_bytes.all.peak` (`torch.cuda.memory_stats`, recorded in the same process), and no
/// real run of that workload under any setting, with or without a limit, reserved less at its
/// peak unless it ran out of memory.
#[test]
fn the_bound_before_any_replay_holds_on_every_real_run() {
    use snapshot::analysis::whatif::outline;
    let all = runs();
    let mut checked = 0;
    let mut failures = Vec::new();
    // The bound depends on the workload's default trace alone: worked out once per workload.
    let mut bounds: std::collections::BTreeMap<String, u64> = Default::default();
    for (stem, real) in &all {
        let workload = real["workload"].as_str().unwrap();
        let bound = *bounds.entry(workload.to_string()).or_insert_with(|| {
            let snap = load(&format!("{workload}.default"));
            let index = Index::new(&snap);
            outline(&snap, &index, &Options::default())
                .unwrap()
                .live_peak_bytes
        });
        if stem == &format!("{workload}.default") {
            let requested = real["peak_requested_bytes"].as_u64().unwrap();
            if bound != requested {
                failures.push(format!(
                    "{stem}: live peak {bound} against requested_bytes.all.peak {requested}"
                ));
            }
        }
        let reserved = real["peak_reserved_bytes"].as_u64().unwrap();
        if real["oom"].is_null() && reserved < bound {
            failures.push(format!(
                "{stem}: reserved {reserved} below the bound {bound}"
            ));
        }
        checked += 1;
    }
    assert!(checked >= 50, "{checked} runs");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
