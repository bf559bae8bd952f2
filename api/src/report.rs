//! A snapshot's report (`GET /api/snapshots/{id}`, the same object `memscope analyze --json`
//! prints): summary figures, leak suspects, OOM reports, warnings, fragmentation, settings.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::format::Format;
use crate::views::{CallSite, Fragmentation, PoolFragmentation};
use crate::{BlockState, Frame};

/// What a trace entry records (PyTorch's `TraceEntry` action names); names a later PyTorch adds
/// are kept as they are.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TraceAction {
    Alloc,
    FreeRequested,
    FreeCompleted,
    SegmentAlloc,
    SegmentFree,
    SegmentMap,
    SegmentUnmap,
    Snapshot,
    Oom,
    Annotate,
    #[serde(untagged)]
    Other(String),
}

impl TraceAction {
    /// The action written by its PyTorch name (`alloc`, `free_requested`, …).
    pub fn from_name(name: &str) -> TraceAction {
        serde_json::from_value(serde_json::Value::String(name.to_string()))
            .unwrap_or_else(|_| TraceAction::Other(name.to_string()))
    }

    /// Its PyTorch name.
    pub fn name(&self) -> &str {
        match self {
            TraceAction::Alloc => "alloc",
            TraceAction::FreeRequested => "free_requested",
            TraceAction::FreeCompleted => "free_completed",
            TraceAction::SegmentAlloc => "segment_alloc",
            TraceAction::SegmentFree => "segment_free",
            TraceAction::SegmentMap => "segment_map",
            TraceAction::SegmentUnmap => "segment_unmap",
            TraceAction::Snapshot => "snapshot",
            TraceAction::Oom => "oom",
            TraceAction::Annotate => "annotate",
            TraceAction::Other(s) => s,
        }
    }
}

/// The version of the report's schema and of the rules behind its figures: a stored report of
/// another version is computed again from the snapshot (2: PyTorch's three peaks per device,
/// the default device, the leak check, the first view fitted around the peaks; 3: each OOM's
/// fate and step, OOM incidents, the growth verdict, leaks as growth step over step).
pub const REPORT_VERSION: u32 = 4;

/// One device's trace in figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceSummary {
    pub entries: u64,
    /// How many entries of each action.
    pub actions: BTreeMap<TraceAction, u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_time_us: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_time_us: Option<i64>,
    /// Allocations the trace made and never freed (count, bytes).
    pub alive_at_end_from_trace: u64,
    pub alive_at_end_bytes_from_trace: u64,
    /// Peak of what the trace itself allocated (without what predates it).
    pub peak_traced_live_bytes: u64,
    /// PyTorch's three peaks (`torch.cuda.memory_stats()`'s `requested_bytes.all.peak`,
    /// `allocated_bytes.all.peak` = `max_memory_allocated()`, `reserved_bytes.all.peak` =
    /// `max_memory_reserved()`), each with the position (events of the trace before it) where it
    /// was first reached. They equal PyTorch's own when [`peaks_over`](Self::peaks_over) is
    /// `whole_process`.
    pub peak_requested_bytes: u64,
    pub peak_requested_position: u32,
    pub peak_allocated_bytes: u64,
    pub peak_allocated_position: u32,
    pub peak_reserved_bytes: u64,
    pub peak_reserved_position: u32,
    pub peaks_over: PeakScope,
    /// Where each step starts, when the trace shows a loop (step annotations, or an allocation
    /// made once per step).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps: Option<Steps>,
    /// Memory by category at the peak of requested bytes, when the device has a trace.
    #[serde(default)]
    pub categories: Option<crate::categories::DeviceCategories>,
}

/// How a device's steps were found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StepsSource {
    /// Annotations (`ProfilerStep#N`, `Optimizer.step`).
    Annotations,
    /// One allocation made once per step.
    Repeats,
}

/// A device's steps: the unit "OOM at step 26" and the timeline's step axis count in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Steps {
    pub source: StepsSource,
    /// The annotation family, or the line that repeats.
    pub name: String,
    /// Each step's number.
    pub numbers: Vec<u32>,
    /// Each step's first event (position), ascending.
    pub starts: Vec<u32>,
    pub start_times_us: Vec<i64>,
}

impl Steps {
    /// The number of the step position `p` lies in (`None` before the first).
    pub fn number_at(&self, p: u32) -> Option<u32> {
        let k = self.starts.partition_point(|&s| s <= p);
        (k > 0).then(|| self.numbers[k - 1])
    }

    /// The number of the step under time `t_us`.
    pub fn number_at_time(&self, t_us: i64) -> Option<u32> {
        let k = self.start_times_us.partition_point(|&s| s <= t_us);
        (k > 0).then(|| self.numbers[k - 1])
    }
}

/// What a device's peaks cover.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PeakScope {
    /// The trace starts on an empty allocator: the process's own peaks.
    WholeProcess,
    /// The trace starts mid-run: peaks over the trace's window only.
    TraceWindow,
    /// No trace, or one that records no allocation: the snapshot's final state.
    FinalState,
}

impl PeakScope {
    /// Said after the figures, for people.
    pub fn words(self) -> &'static str {
        match self {
            PeakScope::WholeProcess => {
                "over the whole process (the trace starts on an empty allocator)"
            }
            PeakScope::TraceWindow => {
                "over the trace window only (it starts mid-run: higher peaks before it are not seen)"
            }
            PeakScope::FinalState => "at the snapshot only (no allocation was recorded)",
        }
    }
}

/// Whether the leak search could run, and if not, why.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LeakCheck {
    /// The traces were searched (the suspects may be none).
    #[default]
    Ran,
    /// No trace: segments only.
    NoTrace,
    /// The traces record no allocation: history was off while the memory was allocated.
    HistoryOff,
}

impl LeakCheck {
    /// What to say when there are no suspects.
    pub fn no_suspects_words(self) -> &'static str {
        match self {
            LeakCheck::Ran => {
                "none: no call site keeps allocations alive that were made again and again across the trace"
            }
            LeakCheck::NoTrace => {
                "not available: the snapshot has no trace (record history with torch.cuda.memory._record_memory_history() before the work)"
            }
            LeakCheck::HistoryOff => {
                "not available: the trace records no allocation (history was off while the memory was allocated)"
            }
        }
    }
}

/// A warning's stable, machine-readable code.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WarningCode {
    /// No trace entries: `_record_memory_history` was not enabled.
    HistoryNotEnabled,
    /// Trace entries without stack frames.
    NoFrames,
    /// The ring buffer was full: the trace starts mid-run.
    TraceTruncated,
    /// Blocks in the segments carry no frames.
    BlocksWithoutFrames,
    /// A device's trace records no allocation: history was off while its memory was allocated.
    HistoryOff,
    /// A code a newer server writes.
    #[serde(untagged)]
    Other(String),
}

impl WarningCode {
    pub fn from_name(name: &str) -> WarningCode {
        serde_json::from_value(serde_json::Value::String(name.to_string()))
            .unwrap_or_else(|_| WarningCode::Other(name.to_string()))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Warning {
    pub code: WarningCode,
    pub message: String,
}

/// One point of a leak suspect's series: its live bytes after an event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeriesPoint {
    pub position: u32,
    pub time_us: i64,
    pub live_bytes: u64,
}

/// A call stack whose allocations stay alive and were made throughout the trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LeakSuspect {
    pub device: i32,
    /// Bytes still alive at the end from this call site.
    pub bytes: u64,
    /// Allocations still alive at the end from this call site.
    pub count: u32,
    /// Allocations the stack made over the trace.
    pub total_allocations: u32,
    /// How evenly the survivors were made over the trace (0..1).
    pub spread: f64,
    pub score: f64,
    pub first_position: u32,
    pub last_position: u32,
    /// When the first and the last survivor were made.
    #[serde(default)]
    pub first_time_us: i64,
    #[serde(default)]
    pub last_time_us: i64,
    /// The call site the suspect groups by (first user frame, …).
    pub site: Option<Frame>,
    /// Distinct stacks merged under this site (C++ operators below one line).
    #[serde(default)]
    pub stacks: u32,
    /// The stack that kept the most bytes, user frames first.
    pub frames: Vec<Frame>,
    /// Bytes kept in each step it grew in (the median), when the trace has steps.
    #[serde(default)]
    pub per_step_bytes: Option<u64>,
    /// The step it first grew in, when the trace has steps.
    #[serde(default)]
    pub since_step: Option<u32>,
    /// Steps it grew in.
    #[serde(default)]
    pub growth_steps: Option<u32>,
    /// It grew every this many steps, when regularly (1: every step).
    #[serde(default)]
    pub every_steps: Option<u32>,
    /// What grows and how fast, in words.
    #[serde(default)]
    pub growth: String,
    pub series: Vec<SeriesPoint>,
}

/// Why an allocation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// A line whose live memory grew step over step holds most of what was allocated.
    Growth,
    /// Enough cached free memory, but no free block large enough.
    Fragmentation,
    /// The driver still had the memory; a per-process limit stopped PyTorch.
    ProcessLimit,
    /// The device was full, mostly with PyTorch's own memory.
    Exhaustion,
    /// The device was full with memory held outside PyTorch's allocator.
    OutsidePytorch,
    /// Reserved plus driver-free is far below any real GPU: probably memory held outside
    /// PyTorch, which only the device's total memory settles.
    Undetermined,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Growth => "growth",
            Verdict::Fragmentation => "fragmentation",
            Verdict::ProcessLimit => "process_limit",
            Verdict::Exhaustion => "exhaustion",
            Verdict::OutsidePytorch => "outside_pytorch",
            Verdict::Undetermined => "undetermined",
        }
    }
}

/// What became of an OOM.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Recovery {
    /// cuDNN/cuBLAS fell back to an algorithm with a smaller workspace: costs speed, not the run.
    WorkspaceFallback,
    /// The program caught the error and went on allocating.
    Caught,
    /// Nothing was allocated on its stream after it: the OOM ended the run.
    #[default]
    Fatal,
}

impl Recovery {
    pub fn as_str(self) -> &'static str {
        match self {
            Recovery::WorkspaceFallback => "workspace_fallback",
            Recovery::Caught => "caught",
            Recovery::Fatal => "fatal",
        }
    }
}

/// The line whose growth caused an OOM.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GrowthCause {
    pub site: Option<Frame>,
    /// Bytes alive at the OOM made at that line.
    pub bytes_at_oom: u64,
    pub per_step_bytes: Option<u64>,
    pub since_step: Option<u32>,
    /// How it grew, in words.
    pub pattern: String,
}

/// OOMs with the same device, line, cause and fate, as one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OomIncident {
    pub device: i32,
    pub verdict: Verdict,
    pub recovery: Recovery,
    pub recovered: bool,
    pub count: u32,
    pub first_position: u32,
    pub last_position: u32,
    pub first_step: Option<u32>,
    pub last_step: Option<u32>,
    pub smallest_requested_bytes: u64,
    pub largest_requested_bytes: u64,
    /// The OOM shown for it (its latest): an `OomReport.position`.
    pub shown_position: u32,
    /// "39 OOMs between events 70 and 2,100 (steps 0–11), all workspace fallbacks".
    pub summary: String,
}

/// One `oom` trace entry explained.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OomReport {
    pub device: i32,
    pub position: u32,
    pub time_us: i64,
    /// What PyTorch tried to `cudaMalloc` ("Tried to allocate …").
    pub requested_bytes: u64,
    /// The block the caller needed (rounded).
    pub block_bytes: u64,
    pub stream: u64,
    /// What the driver reported free.
    pub device_free_bytes: Option<u64>,
    /// The device's total memory, when known (agent, collector NVML, the user, the CLI).
    #[serde(default)]
    pub device_total_bytes: Option<u64>,
    pub reserved_bytes: u64,
    pub allocated_bytes: u64,
    pub cached_free_bytes: u64,
    pub largest_free_block_bytes: u64,
    /// Held outside PyTorch, when the device's total memory is known.
    pub outside_pytorch_bytes: Option<u64>,
    pub verdict: Verdict,
    pub explanation: String,
    /// What to do about it, most useful first.
    #[serde(default)]
    pub advice: Vec<String>,
    /// The run went on after it (caught, or a workspace fallback).
    #[serde(default)]
    pub recovered: bool,
    #[serde(default)]
    pub recovery: Recovery,
    /// What the trace did after it that says so.
    #[serde(default)]
    pub recovery_evidence: String,
    /// The step it happened in, when the trace has steps.
    #[serde(default)]
    pub step: Option<u32>,
    /// The growing line behind a `growth` verdict.
    #[serde(default)]
    pub growth: Option<GrowthCause>,
    /// PyTorch's own OOM message, rebuilt from the trace's figures.
    #[serde(default)]
    pub pytorch_message: String,
    /// The line that asked for the memory (the `oom` entry's first user frame).
    #[serde(default)]
    pub site: Option<Frame>,
    /// The `oom` entry's stack, user frames first.
    #[serde(default)]
    pub frames: Vec<Frame>,
    pub largest_sites: Vec<CallSite>,
    /// What was alive at the OOM, by category.
    #[serde(default)]
    pub categories: crate::categories::CategoryBytes,
    /// For the OOM that raised: what other allocator settings would have done, simulated.
    #[serde(default)]
    pub whatif: Option<crate::whatif::OomWhatIf>,
}

/// Fragmentation at the moment of the snapshot, per device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceFragmentation {
    pub device: i32,
    pub total: Fragmentation,
    pub pools: Vec<PoolFragmentation>,
}

/// Everything `memscope analyze --json` prints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub segments: u64,
    pub blocks: u64,
    pub reserved_bytes: u64,
    pub allocated_bytes: u64,
    pub requested_bytes: u64,
    pub block_states: BTreeMap<BlockState, u64>,
    pub pending_free_blocks: u64,
    pub pending_free_bytes: u64,
    /// Per device (`"0"`, `"1"`, …): every device with a trace or segments.
    pub devices: BTreeMap<i32, DeviceSummary>,
    /// The device views show when none is chosen: the one that held the most memory.
    #[serde(default)]
    pub default_device: Option<i32>,
    pub host_segments: u64,
    pub host_reserved_bytes: u64,
    pub frames: u64,
    pub stacks: u64,
    pub annotations: u64,
    pub leak_suspects: Vec<LeakSuspect>,
    /// [`REPORT_VERSION`] of the server that computed it (0: before versions were written).
    #[serde(default)]
    pub report_version: u32,
    /// Whether the leak search ran: no suspects means "none" only when it did.
    #[serde(default)]
    pub leak_check: LeakCheck,
    pub ooms: Vec<OomReport>,
    /// The OOMs grouped: the same line, cause and fate are one incident; the fatal one first.
    #[serde(default)]
    pub oom_incidents: Vec<OomIncident>,
    /// What the OOMs did to the run, in a sentence.
    #[serde(default)]
    pub oom_outcome: Option<String>,
    pub warnings: Vec<Warning>,
    pub fragmentation: Vec<DeviceFragmentation>,
    /// PyTorch's `allocator_settings` dict as recorded (its keys vary by version; PyTorch ≥ 2.3).
    pub allocator_settings: Option<serde_json::Value>,
    pub format: Format,
}

impl Report {
    /// Whether the driver still had room for every request that ran out of memory (the least it
    /// had free, then): a limit on the process, not the GPU's size, stopped them, so no verdict
    /// needs the GPU's size. The premise of the engine's `process_limit` verdict, over every OOM
    /// (a fragmentation verdict can come first for one: the driver's room still stands).
    pub fn driver_had_room(&self) -> Option<u64> {
        self.ooms
            .iter()
            .map(|o| o.device_free_bytes.filter(|&f| f >= o.requested_bytes))
            .collect::<Option<Vec<u64>>>()
            .and_then(|free| free.into_iter().min())
    }

    /// The view this snapshot opens on ([`crate::landing_view`]).
    pub fn landing_view(&self) -> &'static str {
        crate::landing_view(self.ooms.len() as u64, self.leak_suspects.len() as u64)
    }

    /// The highest allocated and the highest reserved bytes of any device (what the library
    /// lists).
    pub fn peaks(&self) -> (u64, u64) {
        let most = |f: fn(&DeviceSummary) -> u64| self.devices.values().map(f).max();
        (
            most(|d| d.peak_allocated_bytes).unwrap_or(self.allocated_bytes),
            most(|d| d.peak_reserved_bytes).unwrap_or(self.reserved_bytes),
        )
    }

    /// Each OOM incident with the OOM shown for it (its latest), in the incidents' order (the
    /// fatal one first).
    pub fn incidents(&self) -> impl Iterator<Item = (&OomIncident, &OomReport)> {
        self.oom_incidents.iter().filter_map(|inc| {
            self.ooms
                .iter()
                .find(|m| m.device == inc.device && m.position == inc.shown_position)
                .map(|m| (inc, m))
        })
    }

    /// The device views show when none is chosen (the report's, else the first traced one).
    pub fn shown_device(&self) -> Option<i32> {
        self.default_device
            .or_else(|| self.traced_devices().first().map(|d| d.0))
    }

    /// Every device the report covers (a trace or segments) and its trace's events, in order.
    pub fn all_devices(&self) -> Vec<(i32, u64)> {
        self.devices.iter().map(|(&k, d)| (k, d.entries)).collect()
    }

    /// Devices with a trace and how many events each has, in order.
    pub fn traced_devices(&self) -> Vec<(i32, u64)> {
        let mut v = self.all_devices();
        v.retain(|&(_, n)| n > 0);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_action_or_warning_a_later_pytorch_adds_is_kept_by_name() {
        let a: BTreeMap<TraceAction, u64> =
            serde_json::from_str(r#"{"alloc": 3, "segment_map": 1, "defrag": 2}"#).unwrap();
        assert_eq!(a[&TraceAction::Alloc], 3);
        assert_eq!(a[&TraceAction::Other("defrag".into())], 2);
        assert_eq!(
            serde_json::to_string(&TraceAction::Other("defrag".into())).unwrap(),
            "\"defrag\""
        );
        for a in [
            "alloc",
            "free_requested",
            "segment_unmap",
            "oom",
            "annotate",
            "defrag",
        ] {
            assert_eq!(TraceAction::from_name(a).name(), a);
        }
        let w: WarningCode = serde_json::from_str("\"trace_truncated\"").unwrap();
        assert_eq!(w, WarningCode::TraceTruncated);
    }
}
