//! Summary figures (the ones `figures.json` of every fixture holds, computed the same way) and the
//! warnings a person should know before trusting the other analyses.

use std::collections::BTreeMap;

use serde::Serialize;

use super::index::Index;
use super::peaks::{PeakScope, peaks};
use crate::model::{Action, BlockState, Snapshot, StackId};

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct DeviceSummary {
    pub entries: u64,
    pub actions: BTreeMap<String, u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_time_us: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_time_us: Option<i64>,
    /// Allocations made in the trace and not freed by its end (alloc / free_completed replay).
    pub alive_at_end_from_trace: u64,
    pub alive_at_end_bytes_from_trace: u64,
    /// The highest live bytes of that replay (allocations made before the trace not counted).
    pub peak_traced_live_bytes: u64,
    /// `torch.cuda.memory_stats()`'s three peaks (`requested_bytes`, `allocated_bytes`,
    /// `reserved_bytes` `.all.peak`) and the position (events before it) where each was first
    /// reached; see [`peaks`](mod@super::peaks).
    pub peak_requested_bytes: u64,
    pub peak_requested_position: u32,
    pub peak_allocated_bytes: u64,
    pub peak_allocated_position: u32,
    pub peak_reserved_bytes: u64,
    pub peak_reserved_position: u32,
    /// What the peaks cover: the whole process, the trace's window, or the final state only.
    pub peaks_over: PeakScope,
    /// Where each step starts ([`super::steps`]), when the trace shows a loop.
    pub steps: Option<super::steps::Steps>,
    /// Memory by category ([`super::categories`]) at the peak of requested bytes.
    pub categories: Option<super::categories::Summary>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    pub segments: u64,
    pub blocks: u64,
    pub reserved_bytes: u64,
    pub allocated_bytes: u64,
    pub requested_bytes: u64,
    pub block_states: BTreeMap<String, u64>,
    /// Blocks freed by the caller but still in use on another stream (`record_stream`).
    pub pending_free_blocks: u64,
    pub pending_free_bytes: u64,
    pub devices: BTreeMap<i32, DeviceSummary>,
    /// The device views show when none is chosen ([`Index::default_device`]).
    pub default_device: Option<i32>,
    pub host_segments: u64,
    pub host_reserved_bytes: u64,
    pub frames: u64,
    pub stacks: u64,
    pub annotations: u64,
}

pub fn summary(snap: &Snapshot, index: &Index) -> Summary {
    let mut s = Summary {
        segments: 0,
        blocks: 0,
        reserved_bytes: 0,
        allocated_bytes: 0,
        requested_bytes: 0,
        block_states: BTreeMap::new(),
        pending_free_blocks: 0,
        pending_free_bytes: 0,
        devices: BTreeMap::new(),
        default_device: index.default_device().map(|d| d.device),
        host_segments: 0,
        host_reserved_bytes: 0,
        frames: snap.frames.len() as u64,
        stacks: snap.stacks.len().saturating_sub(1) as u64,
        annotations: snap.annotations.len() as u64,
    };
    for seg in &snap.segments {
        if seg.device < 0 {
            s.host_segments += 1;
            s.host_reserved_bytes += seg.total_size;
            continue;
        }
        s.segments += 1;
        s.reserved_bytes += seg.total_size;
        for b in snap.blocks_of(seg) {
            s.blocks += 1;
            *s.block_states
                .entry(b.state.as_str().to_string())
                .or_default() += 1;
            match b.state {
                BlockState::ActiveAllocated => {
                    s.allocated_bytes += b.size;
                    s.requested_bytes += b.requested_size;
                }
                BlockState::ActivePendingFree => {
                    s.pending_free_blocks += 1;
                    s.pending_free_bytes += b.size;
                }
                _ => {}
            }
        }
    }
    for di in index.devices.iter().filter(|d| d.holds_memory()) {
        let t = &snap.trace;
        let rows = di.rows();
        // Counted while the index was built (one pass over the trace, not one more here).
        let mut actions: BTreeMap<String, u64> = BTreeMap::new();
        for (i, &c) in di.traced.actions.iter().enumerate() {
            if c > 0 && i != Action::Other as usize {
                actions.insert(Action::KNOWN[i].as_str().to_string(), c);
            }
        }
        for &(r, name) in &t.other_action {
            if rows.contains(&(r as usize)) {
                *actions.entry(snap.str(name).to_string()).or_default() += 1;
            }
        }
        let has_time = !rows.is_empty() && t.time_us.iter_range(rows.clone()).any(|x| x != 0);
        let p = peaks(snap, di);
        s.devices.insert(
            di.device,
            DeviceSummary {
                entries: rows.len() as u64,
                actions,
                first_time_us: has_time.then(|| t.time_us.get(rows.start)),
                last_time_us: has_time.then(|| t.time_us.get(rows.end - 1)),
                alive_at_end_from_trace: di.traced.alive_at_end,
                alive_at_end_bytes_from_trace: di.traced.alive_at_end_bytes,
                peak_traced_live_bytes: di.traced.peak_bytes,
                peak_requested_bytes: p.requested.bytes,
                peak_requested_position: p.requested.position,
                peak_allocated_bytes: p.allocated.bytes,
                peak_allocated_position: p.allocated.position,
                peak_reserved_bytes: p.reserved.bytes,
                peak_reserved_position: p.reserved.position,
                peaks_over: p.scope,
                steps: super::steps::steps(snap, index, di),
                categories: super::categories::summary(snap, index, di, p.requested.position),
            },
        );
    }
    s
}

#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Warning {
    pub code: WarningCode,
    pub message: String,
}

/// What a warning is about (a closed set; its name is stable and machine-readable).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WarningCode {
    /// No trace entries: `_record_memory_history` was not enabled.
    HistoryNotEnabled,
    /// Trace entries without stack frames.
    NoFrames,
    /// A device's trace records no allocation: history was off while its memory was allocated.
    HistoryOff,
    /// The ring buffer was full (or recording started late): the trace starts mid-run.
    TraceTruncated,
    /// Blocks in the segments carry no frames.
    BlocksWithoutFrames,
}

impl WarningCode {
    pub fn as_str(self) -> &'static str {
        match self {
            WarningCode::HistoryNotEnabled => "history_not_enabled",
            WarningCode::NoFrames => "no_frames",
            WarningCode::HistoryOff => "history_off",
            WarningCode::TraceTruncated => "trace_truncated",
            WarningCode::BlocksWithoutFrames => "blocks_without_frames",
        }
    }
}

pub fn warnings(snap: &Snapshot, index: &Index) -> Vec<Warning> {
    let mut w = Vec::new();
    let entries: usize = snap.devices.iter().map(|d| d.rows.len()).sum();
    if entries == 0 {
        w.push(Warning {
            code: WarningCode::HistoryNotEnabled,
            message:
                "snapshot has no trace entries, so there is no timeline, leak or OOM analysis; was \
                      `torch.cuda.memory._record_memory_history()` enabled before the run?"
                    .into(),
        });
    } else if snap.trace.stack.iter().all(|s| s == StackId::EMPTY)
        && snap.blocks.iter().all(|b| b.stack == StackId::EMPTY)
    {
        w.push(Warning {
            code: WarningCode::NoFrames,
            message: "no stack frames were recorded, so memory cannot be attributed to code; record with \
                      `_record_memory_history(stacks=\"python\")` (or \"all\")."
                .into(),
        });
    }
    for d in &index.devices {
        if d.len == 0 || !d.holds_memory() {
            continue;
        }
        if d.history_off() {
            w.push(Warning {
                code: WarningCode::HistoryOff,
                message: format!(
                    "device {}: the trace holds {} and no allocation: memory history was not being recorded while \
                     this memory was allocated, so only the allocator's final state is known. The timeline's growth, \
                     leak suspects and the what-if replay need history recorded from before the work \
                     (torch.cuda.memory._record_memory_history()).",
                    d.device,
                    if d.len == 1 { "1 entry".to_string() } else { format!("{} entries", d.len) }
                ),
            });
            continue;
        }
        if d.predating_alive > 0 || d.predating_freed > 0 {
            w.push(Warning {
                code: WarningCode::TraceTruncated,
                message: format!(
                    "device {}: the trace starts mid-run: {} allocations alive at the end and {} freed during the trace \
                     were made before its first event (the ring buffer of `max_entries` was full, or recording \
                     started late); their stacks are unknown and growth before the trace is not seen.",
                    d.device, d.predating_alive, d.predating_freed
                ),
            });
        }
    }
    let frameless_blocks = snap
        .blocks
        .iter()
        .filter(|b| b.state.is_active() && b.stack == StackId::EMPTY)
        .count();
    if entries > 0
        && frameless_blocks > 0
        && frameless_blocks == snap.blocks.iter().filter(|b| b.state.is_active()).count()
    {
        w.push(Warning {
            code: WarningCode::BlocksWithoutFrames,
            message: format!("none of the {frameless_blocks} live blocks has a stack; block attribution uses the trace only."),
        });
    }
    w
}
