//! OOM reports: for each `oom` trace entry, what was asked for, what the driver had free, what
//! PyTorch held, the largest free block in the pool the request needed, and a verdict.

use serde::Serialize;

use super::index::Index;
use super::stacks::{CallSite, stacks_at};
use super::state::state_at;
use crate::model::{Action, Snapshot, TraceTable};

/// Why an allocation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// PyTorch had enough cached free memory, but no free block large enough: the cache is split up.
    Fragmentation,
    /// The driver still had the memory, but PyTorch refused to take it: a per-process limit
    /// (`set_per_process_memory_fraction`) was reached.
    ProcessLimit,
    /// The device was full and PyTorch's own memory is most of what is used.
    Exhaustion,
    /// The device was full, and more is held outside PyTorch's allocator (CUDA context, NCCL,
    /// other libraries or processes) than PyTorch reserved. Needs the device's total memory.
    OutsidePytorch,
}

#[derive(Clone, Debug, Serialize)]
pub struct OomReport {
    pub device: i32,
    pub position: u32,
    pub time_us: i64,
    /// What PyTorch tried to `cudaMalloc` ("Tried to allocate … " in its OOM message).
    pub requested_bytes: u64,
    /// The block the caller needed (the trace entry's `size`, rounded to 512 bytes).
    pub block_bytes: u64,
    pub stream: u64,
    /// What the driver reported free (`device_free`).
    pub device_free_bytes: Option<u64>,
    pub reserved_bytes: u64,
    pub allocated_bytes: u64,
    /// Reserved but not allocated: PyTorch's cached free memory.
    pub cached_free_bytes: u64,
    /// The largest inactive block in the pool (size class, stream, default pool) the request needed.
    pub largest_free_block_bytes: u64,
    /// Held outside PyTorch, if the device's total memory is known.
    pub outside_pytorch_bytes: Option<u64>,
    pub verdict: Verdict,
    pub explanation: String,
    /// The largest call sites alive at the OOM.
    pub largest_sites: Vec<CallSite>,
}

fn gib(b: u64) -> String {
    crate::units::human_bytes(b)
}

/// One report per `oom` entry. `device_total_bytes` (from NVML, when known) lets the report tell
/// memory held outside PyTorch apart from PyTorch's own exhaustion.
pub fn oom_reports(
    snap: &Snapshot,
    index: &Index,
    device_total_bytes: Option<u64>,
) -> Vec<OomReport> {
    let mut out = Vec::new();
    for d in &index.devices {
        for e in 0..d.len {
            let r = d.row(e);
            if snap.trace.action[r] != Action::Oom {
                continue;
            }
            let p = e; // the state just before the failed request
            let block = snap.trace.size[r];
            let requested = super::state::segment_request_size(block);
            let stream = snap.trace.stream[r];
            let device_free = TraceTable::sparse(&snap.trace.device_free, r as u32);
            let state = state_at(snap, index, d.device, p);
            // Block sizes as the allocator rounds them, so reserved − allocated is the real cache.
            let (reserved, allocated) = if state.segments.is_empty() {
                (d.reserved_at(p), d.live_at(p))
            } else {
                (state.total.reserved_bytes, state.total.allocated_bytes)
            };
            let largest_free = state.largest_free_for(block, stream);
            let cached_free = reserved.saturating_sub(allocated);
            let outside = match (device_total_bytes, device_free) {
                (Some(total), Some(free)) => {
                    Some(total.saturating_sub(free).saturating_sub(reserved))
                }
                _ => None,
            };
            let (verdict, explanation) = if cached_free >= block && largest_free < block {
                (
                    Verdict::Fragmentation,
                    format!(
                        "PyTorch had {} cached but unallocated, more than the {} block needed, yet its largest free block in that pool was {}: the cache is fragmented. Try PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True.",
                        gib(cached_free),
                        gib(block),
                        gib(largest_free)
                    ),
                )
            } else if device_free.is_some_and(|f| f >= requested) {
                (
                    Verdict::ProcessLimit,
                    format!(
                        "the driver still had {} free, but PyTorch did not take it: a per-process limit (set_per_process_memory_fraction) was reached with {} reserved.",
                        gib(device_free.unwrap_or(0)),
                        gib(reserved)
                    ),
                )
            } else if outside.is_some_and(|o| o > reserved) {
                (
                    Verdict::OutsidePytorch,
                    format!(
                        "the device was full and {} of it was held outside PyTorch's allocator (PyTorch reserved {}).",
                        gib(outside.unwrap_or(0)),
                        gib(reserved)
                    ),
                )
            } else {
                (
                    Verdict::Exhaustion,
                    format!(
                        "the device was full: PyTorch had {} allocated of {} reserved; reduce what is alive (see the largest sites).",
                        gib(allocated),
                        gib(reserved)
                    ),
                )
            };
            let largest_sites = stacks_at(snap, index, d.device, Some(p), 5)
                .map(|s| s.sites)
                .unwrap_or_default();
            out.push(OomReport {
                device: d.device,
                position: p,
                time_us: snap.trace.time_us[r],
                requested_bytes: requested,
                block_bytes: block,
                stream,
                device_free_bytes: device_free,
                reserved_bytes: reserved,
                allocated_bytes: allocated,
                cached_free_bytes: cached_free,
                largest_free_block_bytes: largest_free,
                outside_pytorch_bytes: outside,
                verdict,
                explanation,
                largest_sites,
            });
        }
    }
    out
}
