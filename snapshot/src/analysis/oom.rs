//! OOM reports: for each `oom` trace entry, what was asked for, what the driver had free, what
//! PyTorch held, the largest free block in the pool the request needed, and a verdict.

use serde::Serialize;

use super::index::Index;
use super::stacks::{CallSite, stacks_at};
use super::state::state_at;
use crate::frames::{FrameView, view};
use crate::model::{Action, Snapshot, TraceTable};
use crate::whatif::{OomWhatIf, oom_whatif};

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
    /// The device was full, but what PyTorch reserved plus what the driver had free is far below
    /// any real GPU's size: memory was probably held outside PyTorch, which only the device's
    /// total memory settles.
    Undetermined,
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
    /// The device's total memory, when known (agent, NVML, the user).
    pub device_total_bytes: Option<u64>,
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
    /// What to do about it, most useful first.
    pub advice: Vec<String>,
    /// The line that asked for the memory: the first user frame of the `oom` entry's stack.
    pub site: Option<FrameView>,
    /// The `oom` entry's stack, user frames first, noise hidden.
    pub frames: Vec<FrameView>,
    /// The largest call sites alive at the OOM.
    pub largest_sites: Vec<CallSite>,
    /// For the OOM that raised: the trace replayed under other allocator settings and the limit
    /// it implies ([`crate::whatif`]); its sentence leads the advice when a setting avoids it.
    pub whatif: Option<OomWhatIf>,
}

fn gib(b: u64) -> String {
    crate::units::human_bytes(b)
}

/// What the figures at one OOM say, and what to do about it.
struct Finding {
    verdict: Verdict,
    explanation: String,
    advice: Vec<String>,
}

/// The figures a verdict is drawn from.
struct Figures {
    block: u64,
    requested: u64,
    device_free: Option<u64>,
    device_total: Option<u64>,
    reserved: u64,
    allocated: u64,
    cached_free: u64,
    largest_free: u64,
}

impl Figures {
    /// Held outside PyTorch: what the device had, less what the driver had free and what PyTorch
    /// reserved (known only with the device's total and the driver's free memory).
    fn outside(&self) -> Option<u64> {
        Some(
            self.device_total?
                .saturating_sub(self.device_free?)
                .saturating_sub(self.reserved),
        )
    }
}

/// The fragmentation verdict's hint where the trace cannot be replayed (no simulated figures).
const EXPANDABLE_HINT: &str = "Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: segments grow in place instead of leaving gaps between fixed-size segments.";

/// The advice when one request is larger than the device could ever give.
const SMALLER_TENSOR: &str = "Make that one tensor smaller: a smaller batch or sequence at this line, chunk the computation, or shard it across devices.";

fn judge(f: &Figures) -> Finding {
    const SHRINK: &str = "Shrink what is alive at this point (the largest call sites are listed): a smaller batch or sequence, activation checkpointing (torch.utils.checkpoint), lower precision, or dropping references the job no longer needs.";
    let settle = "Give memscope this GPU's total memory (pick the GPU on the OOM page, upload through memscope_agent, which records it, or `memscope analyze --device-total-bytes`) to settle it.";
    if f.cached_free >= f.block && f.largest_free < f.block {
        return Finding {
            verdict: Verdict::Fragmentation,
            explanation: format!(
                "PyTorch had {} cached but unallocated, more than the {} block needed, yet its largest free block in that pool was {}: the cache is fragmented.",
                gib(f.cached_free),
                gib(f.block),
                gib(f.largest_free)
            ),
            advice: vec![
                EXPANDABLE_HINT.into(),
                "If sizes vary from step to step (variable sequence lengths, resolutions), pad or bucket them so freed blocks fit the next request.".into(),
                SHRINK.into(),
            ],
        };
    }
    if let Some(free) = f.device_free.filter(|&free| free >= f.requested) {
        let limit = match f.device_total {
            Some(total) if total > 0 => format!(
                " PyTorch had reserved {} of this {} device ({:.0}%), so the limit is about that fraction.",
                gib(f.reserved),
                gib(total),
                f.reserved as f64 * 100.0 / total as f64
            ),
            _ => String::new(),
        };
        return Finding {
            verdict: Verdict::ProcessLimit,
            explanation: format!(
                "the driver still had {} free, enough for the {} PyTorch asked for, but PyTorch did not take it: a per-process limit (torch.cuda.set_per_process_memory_fraction) was reached with {} reserved.{limit}",
                gib(free),
                gib(f.requested),
                gib(f.reserved)
            ),
            advice: vec![
                "Raise or remove the limit: find the torch.cuda.set_per_process_memory_fraction call (or a framework option that sets it) and give this process more of the device.".into(),
                "If the limit is there to share the GPU, shrink what is alive instead (the largest call sites are listed).".into(),
            ],
        };
    }
    let Some(free) = f.device_free else {
        return Finding {
            verdict: Verdict::Undetermined,
            explanation: format!(
                "PyTorch held {} ({} allocated), but this trace does not record what the driver had free, so whether the device was full and who filled it is unknown.",
                gib(f.reserved),
                gib(f.allocated)
            ),
            advice: vec![
                "Record with PyTorch ≥ 2.1, whose OOM entries carry the driver's free memory."
                    .into(),
                SHRINK.into(),
            ],
        };
    };
    let outside_advice = |outside: u64| {
        vec![
            format!(
                "Find what holds the other {}: another process on this GPU (nvidia-smi, or memscope's live view of the host), NCCL buffers, cuBLAS/cuDNN workspaces, or a library that calls cudaMalloc itself (CuPy, custom CUDA extensions, TensorRT).",
                gib(outside)
            ),
            "If it is another process, give each job its own GPU (CUDA_VISIBLE_DEVICES) or limit both.".into(),
        ]
    };
    match f.device_total {
        Some(total) if f.requested > total.saturating_sub(f.allocated) => Finding {
            verdict: Verdict::Exhaustion,
            explanation: format!(
                "PyTorch asked for {} at once: more than this {} device could give with {} already allocated, whatever else was freed.",
                gib(f.requested),
                gib(total),
                gib(f.allocated)
            ),
            advice: vec![SMALLER_TENSOR.into()],
        },
        Some(total) => {
            let outside = f.outside().unwrap_or_default();
            if outside > f.reserved {
                Finding {
                    verdict: Verdict::OutsidePytorch,
                    explanation: format!(
                        "the {} device was full and {} of it was held outside PyTorch's allocator; PyTorch reserved only {} ({} allocated) and the driver had {} left.",
                        gib(total),
                        gib(outside),
                        gib(f.reserved),
                        gib(f.allocated),
                        gib(free)
                    ),
                    advice: outside_advice(outside),
                }
            } else {
                Finding {
                    verdict: Verdict::Exhaustion,
                    explanation: format!(
                        "the {} device was full: PyTorch had {} allocated of {} reserved; {} was held outside PyTorch (CUDA context, libraries) and the driver had {} left.",
                        gib(total),
                        gib(f.allocated),
                        gib(f.reserved),
                        gib(outside),
                        gib(free)
                    ),
                    advice: vec![SHRINK.into()],
                }
            }
        }
        None => {
            let seen = free + f.reserved;
            match crate::gpus::plausible_model(seen) {
                Some(model) if f.requested > seen => Finding {
                    verdict: Verdict::Exhaustion,
                    explanation: format!(
                        "PyTorch asked for {} at once: more than the driver had free ({}) and all PyTorch held ({}) together. The device's total is not recorded, but {} is most of a GPU like the {}, so nothing PyTorch could release would have made room.",
                        gib(f.requested),
                        gib(free),
                        gib(f.reserved),
                        gib(seen),
                        model.name
                    ),
                    advice: vec![SMALLER_TENSOR.into(), settle.into()],
                },
                Some(model) => Finding {
                    verdict: Verdict::Exhaustion,
                    explanation: format!(
                        "the device was full: PyTorch had {} allocated of {} reserved and the driver had {} left. The device's total is not recorded; {} is most of a GPU like the {}, so this reads as PyTorch's own memory filling it. On a larger GPU, the rest was held outside PyTorch.",
                        gib(f.allocated),
                        gib(f.reserved),
                        gib(free),
                        gib(seen),
                        model.name
                    ),
                    advice: vec![SHRINK.into(), settle.into()],
                },
                None => Finding {
                    verdict: Verdict::Undetermined,
                    explanation: format!(
                        "PyTorch held {} and the driver had {} left: unless this GPU has only about {}, the rest was held outside PyTorch. How much memory does this GPU have?",
                        gib(f.reserved),
                        gib(free),
                        gib(seen)
                    ),
                    advice: vec![settle.into()],
                },
            }
        }
    }
}

/// One report per `oom` entry, the last first (the one that raised; earlier ones were caught).
/// `device_total_bytes` (from the agent, NVML or the user) lets the report tell memory held
/// outside PyTorch apart from PyTorch's own exhaustion.
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
            let block = snap.trace.size.get(r);
            let requested = super::state::segment_request_size(block);
            let stream = snap.trace.stream(r);
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
            let figures = Figures {
                block,
                requested,
                device_free,
                device_total: device_total_bytes,
                reserved,
                allocated,
                cached_free,
                largest_free,
            };
            let finding = judge(&figures);
            let largest_sites = stacks_at(snap, index, d.device, Some(p), 5)
                .map(|s| s.sites)
                .unwrap_or_default();
            let stack = snap.trace.stack[r];
            out.push(OomReport {
                device: d.device,
                position: p,
                time_us: snap.trace.time_us.get(r),
                requested_bytes: requested,
                block_bytes: block,
                stream,
                device_free_bytes: device_free,
                device_total_bytes,
                reserved_bytes: reserved,
                allocated_bytes: allocated,
                cached_free_bytes: cached_free,
                largest_free_block_bytes: largest_free,
                outside_pytorch_bytes: figures.outside(),
                verdict: finding.verdict,
                explanation: finding.explanation,
                advice: finding.advice,
                site: index.frames.label(snap, stack).map(|f| view(snap, f)),
                frames: index.frames.display(snap, stack),
                largest_sites,
                whatif: None,
            });
        }
    }
    out.sort_by_key(|o| std::cmp::Reverse((o.time_us, o.position)));
    // The OOM that raised on each device (its newest): what other allocator settings would have
    // done, simulated. The generic hint gives way to the figures.
    let mut seen = Vec::new();
    for o in &mut out {
        if seen.contains(&o.device) {
            continue;
        }
        seen.push(o.device);
        let Some(w) = oom_whatif(snap, index, o.device) else {
            continue;
        };
        if o.verdict == Verdict::Fragmentation {
            o.advice.retain(|a| a != EXPANDABLE_HINT);
        }
        if w.alloc_conf.is_some() || o.verdict == Verdict::Fragmentation {
            o.advice.insert(0, w.advice.clone());
        } else {
            o.advice.push(w.advice.clone());
        }
        o.whatif = Some(w);
    }
    out
}
