//! `GET /api/snapshots/{id}/whatif`: the trace replayed through a model of PyTorch's caching
//! allocator under other settings, with the replay check that says how far to trust it.

use serde::{Deserialize, Serialize};

/// What a memory limit is: what the device could give the process (a new segment fails when it
/// does not fit), or the allowed bytes of `torch.cuda.set_per_process_memory_fraction` (checked
/// against each new segment's allocation size).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LimitKind {
    #[default]
    Device,
    Fraction,
}

impl LimitKind {
    pub fn as_str(self) -> &'static str {
        match self {
            LimitKind::Device => "device",
            LimitKind::Fraction => "fraction",
        }
    }
    pub fn parse(s: &str) -> Option<LimitKind> {
        [LimitKind::Device, LimitKind::Fraction]
            .into_iter()
            .find(|k| k.as_str() == s)
    }
}

/// Where a what-if's limit comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LimitSource {
    /// Implied by the trace's OOM.
    Oom,
    /// Asked for.
    Given,
}

/// A segment event, as the trace names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SegmentAction {
    SegmentAlloc,
    SegmentFree,
    SegmentMap,
    SegmentUnmap,
}

impl SegmentAction {
    pub fn as_str(self) -> &'static str {
        match self {
            SegmentAction::SegmentAlloc => "segment_alloc",
            SegmentAction::SegmentFree => "segment_free",
            SegmentAction::SegmentMap => "segment_map",
            SegmentAction::SegmentUnmap => "segment_unmap",
        }
    }
}

/// Query of `GET /api/snapshots/{id}/whatif`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WhatIfQuery {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<i32>,
    /// One setting to try as `PYTORCH_CUDA_ALLOC_CONF` takes it (beside the recorded one);
    /// absent: the built-in candidates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alloc_conf: Option<String>,
    /// A memory limit in bytes; absent: what the trace's OOM implies, else none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_bytes: Option<u64>,
    /// What `limit_bytes` is (default: `device`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_kind: Option<LimitKind>,
    /// Include each run's reserved-bytes curve.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub curves: Option<bool>,
}

/// Ranks runs as the engine does (`snapshot::analysis::whatif`): those that fit first, then by
/// peak reserved bytes, the recorded settings first among equals.
pub fn rank_runs(runs: &mut [WhatIfRun]) {
    runs.sort_by_key(|r| (r.oom, r.peak_reserved_bytes, !r.recorded));
}

fn yes() -> bool {
    true
}

/// What a what-if replays and the figures known before any replay (`snapshot::analysis::whatif::Outline`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WhatIfOutline {
    pub device: i32,
    pub events: u32,
    /// Runs the answer will have (the recorded settings among them).
    pub settings: u32,
    pub recorded_peak_reserved_bytes: u64,
    /// The most bytes the trace's live allocations asked for at once: no run that makes the
    /// trace's allocations reserves less at its peak.
    pub live_peak_bytes: u64,
}

/// Answer of `GET /api/snapshots/{id}/whatif/progress`: the what-if `WhatIfQuery` asks for as
/// far as its replays have got. Asking starts them (on every core) if they are not under way.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WhatIfProgress {
    pub outline: WhatIfOutline,
    /// Every setting is replayed: `answer` is the whole answer.
    pub done: bool,
    /// Events replayed so far over every run, and in all (0 until the replays are laid out).
    pub events_replayed: u64,
    pub events_total: u64,
    /// Since the replays started (0 while they wait for another what-if of this snapshot).
    pub elapsed_ms: u64,
    /// The whole answer when `done`; before, the replay check and the runs replayed so far,
    /// ranked (none before the check is done).
    pub answer: Option<WhatIf>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WhatIf {
    pub device: i32,
    pub events: u32,
    pub recorded_alloc_conf: String,
    /// Whether the snapshot records its allocator settings (PyTorch 2.3+); if not, the recorded
    /// run is taken to have used PyTorch's defaults.
    #[serde(default = "yes")]
    pub settings_recorded: bool,
    /// The peak reserved bytes were reserved before the trace's first event: no setting can
    /// change the peak this trace shows.
    #[serde(default)]
    pub peak_before_trace: bool,
    pub starts_mid_run: bool,
    /// The trace records no request after its last OOM: a run that gets past it is known to fit
    /// only that far.
    #[serde(default)]
    pub oom_ends_trace: bool,
    /// The OOM the trace ends at came from growth: getting past it only moves where the run fails.
    #[serde(default)]
    pub growth_ends_trace: bool,
    pub limit: Option<WhatIfLimit>,
    pub replay_check: ReplayCheck,
    /// Ranked: runs that fit first, then by peak reserved bytes.
    pub runs: Vec<WhatIfRun>,
    /// The trace's own reserved and live bytes over its events, when curves were asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub curves: Option<RecordedCurves>,
}

/// The trace's own figures over its events, to draw the runs against.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedCurves {
    /// Events per bucket of every curve in the answer (the runs' too): 1, each change where it
    /// happened; more, each point is the highest value within that many positions.
    pub bucket_events: u32,
    /// (position, bytes) where the value changed: the value after that many events.
    pub reserved: Vec<(u32, u64)>,
    pub live: Vec<(u32, u64)>,
}

impl RecordedCurves {
    /// The value of a step curve at position `p` (the last change at or before it).
    pub fn at(curve: &[(u32, u64)], p: u32) -> Option<u64> {
        let i = curve.partition_point(|&(q, _)| q <= p);
        i.checked_sub(1).map(|i| curve[i].1)
    }

    /// The highest value of a step curve at any position in `lo..=hi`.
    pub fn max_in(curve: &[(u32, u64)], lo: u32, hi: u32) -> Option<u64> {
        let start = Self::at(curve, lo);
        let from = curve.partition_point(|&(q, _)| q <= lo);
        let to = curve.partition_point(|&(q, _)| q <= hi);
        curve[from..to.max(from)]
            .iter()
            .map(|p| p.1)
            .chain(start)
            .max()
    }
}

#[cfg(test)]
mod tests {
    use super::RecordedCurves;

    #[test]
    fn a_step_curve_is_read_at_a_position_and_over_a_range() {
        let c = [(0, 5), (3, 9), (4, 2), (25, 7)];
        assert_eq!(RecordedCurves::at(&c, 2), Some(5));
        assert_eq!(RecordedCurves::at(&c, 3), Some(9));
        assert_eq!(RecordedCurves::at(&c, 24), Some(2));
        assert_eq!(RecordedCurves::max_in(&c, 5, 24), Some(2));
        assert_eq!(RecordedCurves::max_in(&c, 2, 3), Some(9));
        assert_eq!(RecordedCurves::max_in(&c, 4, 30), Some(7));
        assert_eq!(RecordedCurves::max_in(&[(3, 1)], 0, 2), None);
    }
}

/// What the simulator says about the OOM that raised on a device (`OomReport.whatif`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OomWhatIf {
    /// Among the settings that avoid the OOM, the one with the lowest peak reserved; none:
    /// every candidate runs out of memory too.
    pub alloc_conf: Option<String>,
    pub peak_reserved_bytes: Option<u64>,
    pub recorded_peak_reserved_bytes: u64,
    /// The limit the OOM implies, which every run was held to.
    pub limit_bytes: u64,
    pub settings_tried: u32,
    pub settings_avoiding: u32,
    /// The replay under the recorded settings reproduced the trace.
    pub replay_exact: bool,
    /// The trace stops at the OOM: a setting that gets past it is known to fit only that far.
    #[serde(default)]
    pub oom_ends_trace: bool,
    /// The advice in words, quoting the simulated figures.
    pub advice: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WhatIfLimit {
    pub bytes: u64,
    pub kind: LimitKind,
    pub source: LimitSource,
    pub detail: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplayCheck {
    pub recorded_segment_events: u32,
    pub matched_segment_events: u32,
    pub first_divergence: Option<Divergence>,
    pub recorded_peak_reserved_bytes: u64,
    pub replayed_peak_reserved_bytes: u64,
    pub allocs: u32,
    pub allocs_at_recorded_address: u32,
    pub exact: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Divergence {
    pub segment_event: u32,
    pub position: Option<u32>,
    pub recorded: Option<SegmentEvent>,
    pub replayed: Option<SegmentEvent>,
    pub why: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SegmentEvent {
    pub action: SegmentAction,
    pub address: u64,
    pub size_bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WhatIfRun {
    pub alloc_conf: String,
    pub recorded: bool,
    pub limit_bytes: Option<u64>,
    pub peak_reserved_bytes: u64,
    pub peak_allocated_bytes: u64,
    pub segments_at_end: u64,
    pub cuda_mallocs: u64,
    pub cuda_frees: u64,
    pub alloc_retries: u64,
    /// Met a fatal OOM ("would have saved this run" is its negation).
    pub oom: bool,
    /// The first fatal OOM.
    pub oom_position: Option<u32>,
    /// OOMs the run would have survived (caught, or workspace fallbacks).
    #[serde(default)]
    pub survivable_ooms: u32,
    #[serde(default)]
    pub fatal_ooms: u32,
    /// The first OOM of either kind.
    #[serde(default)]
    pub first_oom_position: Option<u32>,
    /// Keys of the setting string PyTorch accepts that the model does not simulate, each with why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_simulated: Vec<String>,
    pub fragmentation_at_peak: u64,
    pub saving_bytes: i64,
    /// (position, reserved bytes) where they changed, when asked for.
    /// A cudaMalloc or release the model makes inside a request lands on that request's event
    /// (the trace logs its own segment events just before the request), so after every request
    /// the recorded settings' curve equals the trace's own (`curves.reserved`). Bucketed like it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reserved_curve: Vec<(u32, u64)>,
}
