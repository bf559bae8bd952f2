//! The three peaks against PyTorch's own `torch.cuda.memory_stats()`, recorded in the same
//! process as the snapshot, with history from the first allocation:
//! - `tests/fixtures/whatif`: every workload of the what-if harness under every setting, with
//!   and without a per-process limit (H100, `collectors/harness/device-whatif.sh`);
//! - `tests/fixtures/peaks`: models the what-if workloads do not cover (a GPT-style decoder under
//!   bf16 autocast with AdamW and gradient accumulation; a residual conv net with activation
//!   checkpointing, channels-last and gradients kept between steps; generation with a growing
//!   cache, a side stream and `empty_cache`), by default and with expandable segments
//!   (`python -m memscope_harness.peaks`);
//! - `tests/fixtures/*.stats.json`: the team's H200 scenarios, `memory_stats()` sampled once per
//!   iteration: the last sample's peaks are a floor for the snapshot's (taken after it), and equal
//!   them where nothing grew after the last sample.

use snapshot::analysis::{Index, PeakScope, peaks};

/// The recordings of `folder` that have a snapshot: (path stem, what PyTorch reported).
fn gpu_runs(folder: &str) -> Vec<(String, serde_json::Value)> {
    let dir = crate::support::fixtures().join(folder);
    let mut out: Vec<(String, serde_json::Value)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.extension().is_some_and(|e| e == "json")
                && dir
                    .join(format!(
                        "{}.pickle.xz",
                        p.file_stem().unwrap().to_string_lossy()
                    ))
                    .exists()
        })
        .map(|p| {
            let stem = format!("{folder}/{}", p.file_stem().unwrap().to_string_lossy());
            let v = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
            (stem, v)
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

#[test]
fn peaks_equal_pytorchs_own_on_every_gpu_run() {
    let mut runs = gpu_runs("whatif");
    runs.extend(gpu_runs("peaks"));
    assert!(runs.len() >= 78, "{} runs", runs.len());
    let mut failures = Vec::new();
    for (stem, real) in &runs {
        let snap = crate::support::read(&format!("{stem}.pickle.xz"));
        let index = Index::new(&snap);
        let d = index.traced().next().expect("a trace");
        let p = peaks(&snap, d);
        assert_eq!(
            p.scope,
            PeakScope::WholeProcess,
            "{stem}: recorded from the first allocation"
        );
        let mut check = |what: &str, ours: u64, key: &str| {
            if let Some(want) = real[key].as_u64()
                && ours != want
            {
                failures.push(format!(
                    "{stem}: {what} {ours} != PyTorch's {want} ({:+})",
                    ours as i64 - want as i64
                ));
            }
        };
        check("allocated", p.allocated.bytes, "peak_allocated_bytes");
        // The allocator's state drawn at that moment holds the same blocks.
        let state = snapshot::analysis::state_at(&snap, &index, d.device, p.allocated.position);
        let drawn: u64 = state
            .segments
            .iter()
            .flat_map(|s| &s.blocks)
            .filter(|b| b.state == snapshot::BlockState::ActiveAllocated)
            .map(|b| b.size)
            .sum();
        check(
            "allocated in the state at its peak",
            drawn,
            "peak_allocated_bytes",
        );
        check("reserved", p.reserved.bytes, "peak_reserved_bytes");
        check("requested", p.requested.bytes, "peak_requested_bytes");
        assert!(
            real["peak_requested_bytes"].is_u64(),
            "{stem}: the recording has every peak"
        );
    }
    assert!(
        failures.is_empty(),
        "{} of {} runs off:\n{}",
        failures.len(),
        runs.len(),
        failures.join("\n")
    );
    eprintln!("{} runs: the three peaks exact", runs.len());
}

#[test]
fn peaks_match_the_last_memory_stats_sample_of_each_scenario() {
    for name in [
        "leak_detached_cache",
        "steady_train",
        "fragmentation",
        "multistream",
    ] {
        let snap = crate::support::read(&format!("{name}.pickle"));
        let stats: Vec<serde_json::Value> = serde_json::from_str(
            &std::fs::read_to_string(crate::support::fixture(&format!("{name}.stats.json")))
                .unwrap(),
        )
        .unwrap();
        let last = stats.last().unwrap();
        let index = Index::new(&snap);
        let d = index.traced().next().unwrap();
        let p = peaks(&snap, d);
        for (what, ours, key) in [
            ("requested", p.requested.bytes, "requested_bytes.all.peak"),
            ("allocated", p.allocated.bytes, "allocated_bytes.all.peak"),
            ("reserved", p.reserved.bytes, "reserved_bytes.all.peak"),
        ] {
            let floor = last[key].as_u64().unwrap();
            assert!(
                ours >= floor,
                "{name}: {what} {ours} below PyTorch's {floor} at the last sample"
            );
            eprintln!(
                "{name}: {what} {ours} vs last sample {floor} ({:+})",
                ours as i64 - floor as i64
            );
        }
    }
}

/// At an OOM the allocator's state counts blocks as PyTorch does: the report's allocated bytes
/// are the figure PyTorch's own message gave ("5.30 GiB is allocated by PyTorch, and 290.00 MiB
/// is reserved by PyTorch but unallocated"), `allocated_bytes.all.current` of the last sample.
#[test]
fn an_oom_counts_allocated_bytes_as_pytorchs_message_does() {
    let (_, _, report) = crate::support::analyze("oom_fraction.pickle");
    let stats: Vec<serde_json::Value> = serde_json::from_str(
        &std::fs::read_to_string(crate::support::fixture("oom_fraction.stats.json")).unwrap(),
    )
    .unwrap();
    let allocated = stats.last().unwrap()["allocated_bytes.all.current"]
        .as_u64()
        .unwrap();
    let oom = &report.ooms[0];
    assert_eq!(oom.allocated_bytes, allocated);
    assert_eq!(oom.reserved_bytes - oom.allocated_bytes, 290 << 20);
}
