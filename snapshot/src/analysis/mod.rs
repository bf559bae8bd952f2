//! Analyses over the snapshot tables. Each is a function of `(&Snapshot, &Index)`; [`Index`] holds
//! what they share (per-device series, allocation intervals, checkpoints) and is built once.
//! [`analyze`] runs the whole set and returns the report `memscope analyze --json` prints and
//! `GET /api/snapshots/{id}` serves.

pub mod categories;
pub mod diff;
pub mod index;
pub mod labels;
pub mod leaks;
pub mod oom;
pub mod peaks;
pub mod pending;
pub mod pending_list;
pub mod recovery;
pub mod run;
pub mod stacks;
pub mod state;
pub mod steps;
pub mod summary;
pub mod timeline;
pub mod whatif;

use serde::Serialize;

pub use crate::units::human_bytes;
pub use diff::{Diff, Side, compare};
pub use index::Index;
pub use leaks::{LeakCheck, LeakSuspect, leak_suspects};
pub use oom::{OomReport, Verdict, oom_reports};
pub use peaks::{Peak, PeakScope, Peaks, peaks};
pub use stacks::{FlameFrames, FlameWeight, StackReport, held_by_stack, stacks_at, stacks_at_with};
pub use state::{AllocatorState, Fragmentation, PoolFragmentation, final_state, state_at};
pub use summary::{DeviceSummary, Summary, Warning, WarningCode, summary, warnings};
pub use timeline::{Axis, Timeline, allocations_in_window, timeline};

use crate::model::{Format, Snapshot};

/// Most leak suspects a report lists.
pub const MAX_LEAK_SUSPECTS: usize = 20;

/// Fragmentation at the moment of the snapshot, per device.
#[derive(Clone, Debug, Serialize)]
pub struct DeviceFragmentation {
    pub device: i32,
    pub total: Fragmentation,
    pub pools: Vec<PoolFragmentation>,
}

/// Everything `memscope analyze --json` prints.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    #[serde(flatten)]
    pub summary: Summary,
    pub leak_suspects: Vec<LeakSuspect>,
    /// Whether the leak search ran (no suspects means none only when it did).
    pub leak_check: LeakCheck,
    pub ooms: Vec<OomReport>,
    /// The OOMs grouped: the same line, cause and fate are one incident; the fatal one first.
    pub oom_incidents: Vec<oom::OomIncident>,
    /// What the OOMs did to the run, in a sentence ("Survived 39 OOMs; none ended the run …").
    pub oom_outcome: Option<String>,
    pub warnings: Vec<Warning>,
    pub fragmentation: Vec<DeviceFragmentation>,
    pub allocator_settings: Option<serde_json::Value>,
    pub format: Format,
}

/// Options for [`analyze`].
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Total memory of the device (from NVML), for the "held outside PyTorch" OOM verdict.
    pub device_total_bytes: Option<u64>,
}

/// Works out what the views read of each traced device and the model file does not keep: the
/// labels by category (the allocator state colours its blocks by them) and the frees that
/// waited (the segment view's list). Each is kept with its device index, so a view asking
/// later finds it ready; a server runs this after a load, off the requests' path. A reopened
/// 12M-event model's first state took 0.17–0.23 s for the labels alone (bench/README.md,
/// issue 41, twenty-fourth part).
pub fn warm(snap: &Snapshot, index: &Index) {
    for d in index.traced() {
        categories::categories(snap, index, d);
        pending::default_pending_frees(snap, d);
    }
}

/// Builds the index and runs every analysis.
pub fn analyze(snap: &Snapshot, options: &Options) -> (Index, Report) {
    let index = Index::new(snap);
    let report = report(snap, &index, options);
    (index, report)
}

pub fn report(snap: &Snapshot, index: &Index, options: &Options) -> Report {
    let mut devices: Vec<i32> = snap
        .segments
        .iter()
        .map(|s| s.device)
        .filter(|&d| d >= 0)
        .collect();
    devices.sort_unstable();
    devices.dedup();
    let fragmentation = devices
        .into_iter()
        .map(|device| {
            let st = final_state(snap, device, 0);
            DeviceFragmentation {
                device,
                total: st.total,
                pools: st.pools,
            }
        })
        .collect();
    // Two threads for three passes over the trace: the peaks' walk on one, the category labels
    // on the other, and the leaks (which wait for the labels midway) on whichever is free first.
    // Which of the walk and the labels is longer depends on the trace (the labels on a real
    // ResNet's, the walk, three times as long, on the tiled references file), so no fixed
    // order fits both (bench/README.md, issue 41).
    let labelled = || {
        index
            .devices
            .iter()
            .filter(|d| d.len > 0 && d.holds_memory())
    };
    let leaks_taken = std::sync::atomic::AtomicBool::new(false);
    let leaks = || {
        let first = !leaks_taken.swap(true, std::sync::atomic::Ordering::AcqRel);
        first.then(|| leak_suspects(snap, index, MAX_LEAK_SUSPECTS))
    };
    let ((summary, leaks_here), leaks_there) = crate::par::join(
        || {
            for d in labelled() {
                peaks(snap, d);
                steps::steps(snap, index, d);
            }
            let l = leaks();
            (summary(snap, index), l)
        },
        || {
            for d in labelled() {
                categories::categories(snap, index, d);
            }
            leaks()
        },
    );
    // One of the two took them.
    let leak_suspects = leaks_here
        .or(leaks_there)
        .unwrap_or_else(|| leak_suspects(snap, index, MAX_LEAK_SUSPECTS));
    let ooms = oom_reports(snap, index, options.device_total_bytes);
    Report {
        summary,
        leak_suspects,
        leak_check: LeakCheck::of(index),
        oom_incidents: oom::incidents(&ooms),
        oom_outcome: oom::outcome(&ooms),
        ooms,
        warnings: warnings(snap, index),
        fragmentation,
        allocator_settings: snap.allocator_settings.clone(),
        format: snap.format.clone(),
    }
}
