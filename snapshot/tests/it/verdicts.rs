//! The verdicts against what really happened on the GPU (`tests/fixtures/verdicts`, recorded by
//! `collectors/harness/device-verdicts.sh` on an H200 with PyTorch 2.11): nine training programs
//! that meet OOMs (cuDNN workspace fallbacks, a batch-size search, a search then a fatal OOM, a
//! leak that ends in an OOM, a periodic leak, a fragmentation OOM, and three held out: a transformer
//! keeping every 3rd loss, an LSTM batch search, a KV cache grown until the limit) under five settings,
//! each in a fresh process with its ground truth written by the same process: the allocator's own
//! OOM count (`num_ooms`), how many Python caught, whether the last one ended the program and in
//! which step, the planted lines.
//!
//! For every run: every OOM is in the report, exactly the survived ones are `recovered`, those
//! PyTorch caught inside operators are workspace fallbacks, the fatal one names its cause, line
//! and step, the planted leak is found with its pattern in words and nothing else is a suspect.
//! And from each workload's trace under PyTorch's defaults, the what-if replay must say, for every
//! other setting, whether the run dies: as it really did.

use snapshot::analysis::recovery::Recovery;
use snapshot::analysis::whatif::{Options, whatif};
use snapshot::analysis::{Index, Options as AnalyzeOptions, Verdict, report};

/// The real runs: (file stem, what the run wrote).
fn runs() -> Vec<(String, serde_json::Value)> {
    crate::support::real_runs("verdicts")
}

fn load(stem: &str) -> snapshot::Snapshot {
    crate::support::read(&format!("verdicts/{stem}.pickle.xz"))
}

fn line_of(f: &Option<snapshot::frames::FrameView>) -> Option<u64> {
    f.as_ref().map(|f| f.line as u64)
}

/// What is off in one run's report against its truth.
fn check(stem: &str, truth: &serde_json::Value) -> Vec<String> {
    let snap = load(stem);
    let index = Index::new(&snap);
    let r = report(&snap, &index, &AnalyzeOptions::default());
    let mut off = Vec::new();
    let n = truth["num_ooms"].as_u64().unwrap() as usize;
    let caught = truth["caught"].as_u64().unwrap() as usize;
    let fatal = usize::from(!truth["raised"].is_null());
    let expect = &truth["expect"];
    if r.ooms.len() != n {
        off.push(format!(
            "{} OOMs reported, the allocator logged {n}",
            r.ooms.len()
        ));
    }
    let recovered = r.ooms.iter().filter(|o| o.recovered).count();
    if recovered != n - fatal {
        off.push(format!(
            "{recovered} marked recovered, {} survived",
            n - fatal
        ));
    }
    let fallbacks = r
        .ooms
        .iter()
        .filter(|o| o.recovery == Recovery::WorkspaceFallback)
        .count();
    if fallbacks != n - caught - fatal {
        off.push(format!(
            "{fallbacks} workspace fallbacks, PyTorch caught {} inside operators",
            n - caught - fatal
        ));
    }
    // The fatal OOM leads the list, and is the last in the trace.
    if fatal == 1 {
        let last = r.ooms.iter().max_by_key(|o| o.position).unwrap();
        let first = &r.ooms[0];
        if first.recovered || first.position != last.position {
            off.push("the fatal OOM is not first, or not the last in the trace".into());
        }
        let want_step = truth["raised"]["step"].as_u64().map(|s| s as u32);
        if first.step != want_step {
            off.push(format!(
                "fatal OOM at step {:?}, it died in {want_step:?}",
                first.step
            ));
        }
        match expect["verdict"].as_str() {
            Some("growth") => {
                if first.verdict != Verdict::Growth {
                    off.push(format!("verdict {:?}, want growth", first.verdict));
                }
                let named = first.growth.as_ref().and_then(|g| line_of(&g.site));
                if named != expect["leak_line"].as_u64() {
                    off.push(format!("growth names line {named:?}"));
                }
                if !first
                    .explanation
                    .contains("No allocator setting fixes growth")
                {
                    off.push("growth explanation does not say no setting fixes it".into());
                }
            }
            Some("fragmentation") => {
                if first.verdict != Verdict::Fragmentation {
                    off.push(format!("verdict {:?}, want fragmentation", first.verdict));
                }
                if line_of(&first.site) != expect["line"].as_u64() {
                    off.push(format!("fatal OOM at line {:?}", line_of(&first.site)));
                }
            }
            _ => {}
        }
    } else if !r.ooms.is_empty()
        && !r
            .oom_outcome
            .as_deref()
            .is_some_and(|t| t.starts_with("Survived"))
    {
        off.push(format!(
            "outcome {:?} for a run that survived",
            r.oom_outcome
        ));
    }
    // Incidents: fewer cards than OOMs when OOMs repeat, and they add up.
    let counted: u32 = r.oom_incidents.iter().map(|i| i.count).sum();
    if counted as usize != n {
        off.push(format!("incidents count {counted} OOMs of {n}"));
    }
    let leak_line = expect["leak_line"].as_u64();
    for s in &r.leak_suspects {
        if line_of(&s.site) != leak_line {
            off.push(format!(
                "false leak suspect at line {:?}: {}",
                line_of(&s.site),
                s.growth
            ));
        }
    }
    if let Some(line) = leak_line {
        match r
            .leak_suspects
            .iter()
            .find(|s| line_of(&s.site) == Some(line))
        {
            None => off.push(format!("no leak suspect at line {line}")),
            Some(s) => {
                if let Some(pattern) = expect["pattern"].as_str()
                    && !s.growth.contains(pattern)
                {
                    off.push(format!("pattern {:?}, want {pattern:?}", s.growth));
                }
            }
        }
    }
    off
}

#[test]
fn every_oom_fate_verdict_and_leak_matches_what_the_gpu_did() {
    let mut checked = 0;
    let mut failures = Vec::new();
    for (stem, truth) in runs() {
        for o in check(&stem, &truth) {
            failures.push(format!("{stem}: {o}"));
        }
        checked += 1;
    }
    assert_eq!(checked, 56, "runs");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_survived_run_says_so_first_and_groups_its_ooms() {
    let snap = load("conv_workspace.default");
    let index = Index::new(&snap);
    let r = report(&snap, &index, &AnalyzeOptions::default());
    assert_eq!(r.ooms.len(), 39);
    assert!(
        r.oom_outcome
            .as_deref()
            .unwrap()
            .starts_with("Survived 39 OOMs; none ended the run"),
        "{:?}",
        r.oom_outcome
    );
    assert!(
        r.oom_incidents.len() < 10,
        "{} incidents",
        r.oom_incidents.len()
    );
    assert!(
        r.ooms.iter().all(|o| o.whatif.is_none()),
        "no what-if for survived OOMs"
    );
}

/// From the trace under PyTorch's defaults and the limit, whether each setting's run dies: as the
/// real runs did (30 predictions, 6 workloads × 5 settings).
#[test]
fn the_replay_past_survivable_ooms_predicts_which_runs_die() {
    let all = runs();
    let mut checked = 0;
    let mut failures = Vec::new();
    for (stem, real) in &all {
        let workload = real["workload"].as_str().unwrap();
        if stem.contains(".sweep")
            || stem.contains(".free")
            || stem.contains(".dies")
            || stem.contains(".rank")
        {
            continue;
        }
        let base = all
            .iter()
            .find(|(s, _)| *s == format!("{workload}.default"))
            .map(|(_, v)| v)
            .unwrap();
        let conf = real["alloc_conf"].as_str().unwrap();
        let snap = load(&format!("{workload}.default"));
        let index = Index::new(&snap);
        let opts = Options {
            alloc_confs: vec![conf.to_string()],
            limit_bytes: base["allowed_bytes"].as_u64(),
            limit_is_fraction: true,
            ..Default::default()
        };
        let w = whatif(&snap, &index, &opts).unwrap();
        let run = w.runs.iter().find(|r| r.alloc_conf == conf).unwrap();
        let died = !real["raised"].is_null();
        // Growth ended the trace: getting past that OOM only moves where the run fails.
        let predicted = run.oom || w.growth_ends_trace;
        if predicted != died {
            failures.push(format!(
                "{stem}: predicted {} (survivable {}), really {}",
                if predicted { "dies" } else { "survives" },
                run.survivable_ooms,
                if died { "died" } else { "survived" }
            ));
        }
        checked += 1;
    }
    assert_eq!(checked, 45);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
