//! OOM reports: for each `oom` trace entry, what was asked for, what the driver had free, what
//! PyTorch held, the largest free block in the pool the request needed, whether the run survived
//! it ([`super::recovery`]), the step it happened in, and a verdict that names the cause first: a
//! line whose memory grows step over step ([`super::leaks`]) is the cause even where the cache is
//! also fragmented, since no allocator setting fixes growth. OOMs with the same line, cause and
//! fate are one incident ([`incidents`]); the run's outcome leads ([`outcome`]).

use serde::Serialize;

use super::index::{Index, NONE};
use super::leaks::{LeakSuspect, device_suspects, live_at, suspects_until};
use super::recovery::{Recovery, fates};
use super::stacks::{CallSite, stacks_at};
use super::state::state_at;
use super::steps::steps;
use crate::analysis::whatif::{OomWhatIf, oom_whatif};
use crate::frames::FrameView;
use crate::model::{Snapshot, TraceTable};

/// Why an allocation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// A line whose live memory grew step over step holds most of what was allocated: a leak
    /// used up all the memory the process could have (the device's, or a per-process limit), and no
    /// allocator setting fixes it.
    Growth,
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

impl Verdict {
    /// The JSON name (`growth`, `process_limit`, …).
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
    /// The run went on after it (caught, or a workspace fallback).
    pub recovered: bool,
    pub recovery: Recovery,
    /// What the trace did after it that says so.
    pub recovery_evidence: String,
    /// The step it happened in, when the trace has steps.
    pub step: Option<u32>,
    /// The growing line behind a [`Verdict::Growth`].
    pub growth: Option<GrowthCause>,
    /// PyTorch's own OOM message, rebuilt from the trace's figures (`CUDACachingAllocator.cpp`'s
    /// wording and sizes): what it can say without the process's NVML reading and the fraction's
    /// allowance, which the trace does not carry.
    pub pytorch_message: String,
    /// The line that asked for the memory: the first user frame of the `oom` entry's stack.
    pub site: Option<FrameView>,
    /// The `oom` entry's stack, user frames first, noise hidden.
    pub frames: Vec<FrameView>,
    /// The largest call sites alive at the OOM.
    pub largest_sites: Vec<CallSite>,
    /// What was alive at the OOM, by category ([`super::categories`]).
    pub categories: super::categories::Totals,
    /// For the OOM that raised: the trace replayed under other allocator settings and the limit
    /// it implies ([`crate::analysis::whatif`]); its sentence leads the advice when a setting avoids it.
    pub whatif: Option<OomWhatIf>,
}

/// A line whose live memory grew step over step, and how much of it was alive at the OOM.
#[derive(Clone, Debug, Serialize)]
pub struct GrowthCause {
    pub site: Option<FrameView>,
    /// Bytes alive at the OOM that were made at that line.
    pub bytes_at_oom: u64,
    pub per_step_bytes: Option<u64>,
    pub since_step: Option<u32>,
    /// How it grew, in words (the leak suspect's).
    pub pattern: String,
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

/// The growth finding for an OOM: the leak suspect holding the most at it, when that is at least
/// half of what was allocated.
fn growth_finding(g: &GrowthCause, allocated: u64, fragmented: bool) -> Finding {
    let line = g
        .site
        .as_ref()
        .map(|f| format!("{}:{} ({})", f.filename, f.line, f.name))
        .unwrap_or_else(|| "one call site".into());
    let also = if fragmented {
        " The cache was also fragmented at this point, but even a perfectly packed cache only delays an OOM that growth causes."
    } else {
        ""
    };
    Finding {
        verdict: Verdict::Growth,
        explanation: format!(
            "{line} kept growing ({}), and {} of the {} allocated here was made there: growth used up all the memory the process could have. No allocator setting fixes growth; one only moves the point where it fails.{also}",
            g.pattern,
            gib(g.bytes_at_oom),
            gib(allocated)
        ),
        advice: vec![
            format!(
                "Stop {line} from keeping what it makes: a list or dict that holds tensors across steps (log loss.item() or .detach().cpu(), not the tensor), a running total that keeps every step's graph (add .detach()), a cache without a bound."
            ),
            "The Leaks tab shows its live bytes step by step.".into(),
        ],
    }
}

/// One report per `oom` entry, the fatal one first, then the newest. `device_total_bytes` (from
/// the agent, NVML or the user) lets the report tell memory held outside PyTorch apart from
/// PyTorch's own exhaustion.
pub fn oom_reports(
    snap: &Snapshot,
    index: &Index,
    device_total_bytes: Option<u64>,
) -> Vec<OomReport> {
    let mut out = Vec::new();
    for d in &index.devices {
        let fates = fates(snap, index, d);
        if fates.is_empty() {
            continue;
        }
        let steps = steps(snap, index, d);
        let suspects = device_suspects(snap, index, d);
        let positions: Vec<u32> = fates.iter().map(|f| f.position).collect();
        let suspect_live = growth_at(snap, d, &suspects, &positions);
        for (k, fate) in fates.into_iter().enumerate() {
            let e = fate.position;
            let r = d.row(e);
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
            // The suspect holding the most at this OOM, if it holds at least half. For the OOM
            // that ended the run, what grew up to it (the program may have freed it unwinding
            // before the snapshot); for the others, what grew to the end, alive at them.
            let cause = |l: &LeakSuspect, live: u64| GrowthCause {
                site: l.site.clone(),
                bytes_at_oom: live,
                per_step_bytes: l.per_step_bytes,
                since_step: l.since_step,
                pattern: l.growth.split(": ").next().unwrap_or(&l.growth).to_string(),
            };
            let growth = if fate.recovery.recovered() {
                suspect_live
                    .iter()
                    .enumerate()
                    .map(|(s, live)| (live[k], s))
                    .max()
                    .filter(|&(live, _)| live > 0 && live * 2 >= allocated)
                    .map(|(live, s)| cause(&suspects[s], live))
            } else {
                suspects_until(snap, index, d, p)
                    .iter()
                    .max_by_key(|l| l.bytes)
                    .filter(|l| l.bytes * 2 >= allocated)
                    .map(|l| cause(l, l.bytes))
            };
            // Growth leads, unless the device was filled from outside PyTorch (or may have been:
            // its size is needed to tell).
            let judged = judge(&figures);
            let outside = matches!(
                judged.verdict,
                Verdict::OutsidePytorch | Verdict::Undetermined
            );
            let finding = match &growth {
                Some(g) if !outside => {
                    growth_finding(g, allocated, cached_free >= block && largest_free < block)
                }
                _ => judged,
            };
            let mut finding = finding;
            if fate.recovery == Recovery::WorkspaceFallback {
                finding.advice.insert(0, "Nothing to fix for the run's sake: cuDNN picked an algorithm that needs less workspace and went on. If speed matters, leave it more headroom (a smaller batch, or what the advice below frees) so the fastest algorithm fits.".into());
            }
            let largest_sites = stacks_at(snap, index, d.device, Some(p), 5)
                .map(|s| s.sites)
                .unwrap_or_default();
            let stack = snap.trace.stack.get(r);
            let pytorch_message = pytorch_message(d.device, &figures);
            out.push(OomReport {
                pytorch_message,
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
                recovered: fate.recovery.recovered(),
                recovery: fate.recovery,
                recovery_evidence: fate.evidence,
                step: steps.as_ref().and_then(|s| s.number_at(p)),
                growth,
                site: index.frames.site(snap, stack),
                frames: index.frames.display(snap, stack),
                largest_sites,
                categories: super::categories::totals_at(snap, index, d, p),
                whatif: None,
            });
        }
    }
    out.sort_by_key(|o| (o.recovered, std::cmp::Reverse((o.time_us, o.position))));
    // The OOM that ended the run on each device: what other allocator settings would have done,
    // simulated. The generic hint gives way to the figures; growth keeps its lead (no setting
    // fixes it).
    for o in &mut out {
        if o.recovered {
            continue;
        }
        let Some(w) = oom_whatif(snap, index, o.device) else {
            continue;
        };
        if o.verdict == Verdict::Fragmentation {
            o.advice.retain(|a| a != EXPANDABLE_HINT);
        }
        if o.verdict != Verdict::Growth
            && (w.alloc_conf.is_some() || o.verdict == Verdict::Fragmentation)
        {
            o.advice.insert(0, w.advice.clone());
        } else {
            o.advice.push(w.advice.clone());
        }
        o.whatif = Some(w);
    }
    out
}

/// "CUDA out of memory. Tried to allocate 24.00 MiB. GPU 0 has a total capacity of 139.80 GiB of
/// which 133.70 GiB is free. Of the allocated memory 5.30 GiB is allocated by PyTorch, and 290.00
/// MiB is reserved by PyTorch but unallocated.": PyTorch's message (`malloc`'s OOM branch) with
/// the figures the trace has.
fn pytorch_message(device: i32, f: &Figures) -> String {
    use crate::units::pytorch_size as size;
    let gpu = match (f.device_total, f.device_free) {
        (Some(total), Some(free)) => format!(
            " GPU {device} has a total capacity of {} of which {} is free.",
            size(total),
            size(free)
        ),
        (None, Some(free)) => format!(" GPU {device} had {} free.", size(free)),
        (Some(total), None) => format!(" GPU {device} has a total capacity of {}.", size(total)),
        (None, None) => String::new(),
    };
    format!(
        "CUDA out of memory. Tried to allocate {}.{gpu} Of the allocated memory {} is allocated by PyTorch, and {} is reserved by PyTorch but unallocated.",
        size(f.requested),
        size(f.allocated),
        size(f.reserved.saturating_sub(f.allocated))
    )
}

/// Live bytes of each suspect at each of `positions` (ascending).
fn growth_at(
    snap: &Snapshot,
    d: &super::index::DeviceIndex,
    suspects: &[LeakSuspect],
    positions: &[u32],
) -> Vec<Vec<u64>> {
    if suspects.is_empty() {
        return Vec::new();
    }
    let mut of = vec![NONE; snap.stacks.len()];
    for (k, s) in suspects.iter().enumerate() {
        for st in &s.member_stacks {
            of[st.0 as usize] = k as u32;
        }
    }
    live_at(
        snap,
        d,
        |_, s| of.get(s.0 as usize).copied().unwrap_or(NONE),
        suspects.len(),
        positions,
    )
}

/// OOMs with the same device, line, cause and fate, as one.
#[derive(Clone, Debug, Serialize)]
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
    /// The OOM shown for the incident (its latest): its `position` in [`OomReport`]s.
    pub shown_position: u32,
    /// "39 OOMs between events 70 and 2,100 (steps 0–11), all workspace fallbacks".
    pub summary: String,
}

fn site_key(o: &OomReport) -> Option<(String, u32, String)> {
    o.site
        .as_ref()
        .map(|f| (f.filename.clone(), f.line, f.name.clone()))
}

/// Groups `ooms` (as [`oom_reports`] orders them: the fatal first) into incidents, in that order.
pub fn incidents(ooms: &[OomReport]) -> Vec<OomIncident> {
    let mut out: Vec<OomIncident> = Vec::new();
    let mut keys = Vec::new();
    for o in ooms {
        let key = (o.device, site_key(o), o.verdict, o.recovery);
        let at = keys.iter().position(|k| *k == key);
        let Some(i) = at else {
            keys.push(key);
            out.push(OomIncident {
                device: o.device,
                verdict: o.verdict,
                recovery: o.recovery,
                recovered: o.recovered,
                count: 1,
                first_position: o.position,
                last_position: o.position,
                first_step: o.step,
                last_step: o.step,
                smallest_requested_bytes: o.requested_bytes,
                largest_requested_bytes: o.requested_bytes,
                shown_position: o.position,
                summary: String::new(),
            });
            continue;
        };
        let inc = &mut out[i];
        inc.count += 1;
        inc.first_position = inc.first_position.min(o.position);
        inc.last_position = inc.last_position.max(o.position);
        inc.first_step = inc.first_step.min(o.step).or(o.step);
        inc.last_step = inc.last_step.max(o.step);
        inc.smallest_requested_bytes = inc.smallest_requested_bytes.min(o.requested_bytes);
        inc.largest_requested_bytes = inc.largest_requested_bytes.max(o.requested_bytes);
    }
    for inc in &mut out {
        inc.summary = incident_words(inc);
    }
    out
}

fn thousands(n: u32) -> String {
    crate::units::thousands(n as u64)
}

fn incident_words(inc: &OomIncident) -> String {
    let fate = match (inc.recovery, inc.count) {
        (Recovery::WorkspaceFallback, 1) => "a workspace fallback",
        (Recovery::WorkspaceFallback, _) => "all workspace fallbacks",
        (Recovery::Caught, 1) => "caught",
        (Recovery::Caught, _) => "all caught",
        (Recovery::Fatal, _) => "it ended the run",
    };
    let steps = match (inc.first_step, inc.last_step) {
        (Some(a), Some(b)) if a != b => format!(" (steps {a}–{b})"),
        (Some(a), _) => format!(" (step {a})"),
        _ => String::new(),
    };
    if inc.count == 1 {
        format!(
            "one OOM at event {}{steps}, {fate}",
            thousands(inc.first_position)
        )
    } else {
        format!(
            "{} OOMs between events {} and {}{steps}, {fate}",
            inc.count,
            thousands(inc.first_position),
            thousands(inc.last_position)
        )
    }
}

/// What the OOMs did to the run, in a sentence: "Survived 39 OOMs; none ended the run (39
/// cuDNN/cuBLAS workspace fallbacks)." or "Died of an OOM at step 6 (event 1,842) after surviving 7
/// earlier ones." `None` without OOMs.
pub fn outcome(ooms: &[OomReport]) -> Option<String> {
    if ooms.is_empty() {
        return None;
    }
    let survived = ooms.iter().filter(|o| o.recovered).count();
    let fallbacks = ooms
        .iter()
        .filter(|o| o.recovery == Recovery::WorkspaceFallback)
        .count();
    let caught = survived - fallbacks;
    let how = match (fallbacks, caught) {
        (0, c) => format!("{c} caught by the program"),
        (f, 0) => format!("{f} cuDNN/cuBLAS workspace fallbacks, which cost speed, not the run"),
        (f, c) => format!("{f} cuDNN/cuBLAS workspace fallbacks, {c} caught by the program"),
    };
    let devices = {
        let mut d: Vec<i32> = ooms.iter().map(|o| o.device).collect();
        d.sort_unstable();
        d.dedup();
        d.len()
    };
    let fatal: Vec<&OomReport> = ooms.iter().filter(|o| !o.recovered).collect();
    Some(match fatal.first() {
        None => format!(
            "Survived {survived} OOM{}; none ended the run ({how}).",
            if survived == 1 { "" } else { "s" }
        ),
        Some(f) => {
            let on = if devices > 1 {
                format!(" on device {}", f.device)
            } else {
                String::new()
            };
            let when = match f.step {
                Some(s) => format!("step {s} (event {})", thousands(f.position)),
                None => format!("event {}", thousands(f.position)),
            };
            let before = if survived > 0 {
                format!(
                    " after surviving {survived} earlier one{} ({how})",
                    if survived == 1 { "" } else { "s" }
                )
            } else {
                String::new()
            };
            format!("Died of an OOM{on} at {when}{before}.")
        }
    })
}
