//! What each allocation is in the model's terms: a parameter, a gradient, optimizer state, an
//! activation saved for backward, an input, a temporary, another backward buffer, a CUDA graph's
//! private pool, or unknown, with the rule that decided and how sure it is.
//!
//! Stacks alone cannot say it: backward runs on the autograd engine's own thread, whose
//! allocations carry no Python frames (with `stacks="python"` none at all, with C++ frames only
//! `Engine::evaluate_function` and the node), parameters are often made before the history
//! started (no frames, no alloc event), and a compiled model's frames are generated files. So the
//! classifier reads **lifetimes against phases** first and stacks second:
//!
//! 1. Phases. A backward pass is a run of events on the autograd thread (its stacks name the
//!    engine, or, where the trace has Python frames, have none or none that reach the program's
//!    `<module>`). Without frames, a backward pass is inferred between optimizer steps: it starts
//!    where the first gradient-like allocation (kept into the optimizer step, the size of a
//!    parameter) is made. The optimizer's steps and `zero_grad`s come from their
//!    `record_function` annotations (`Optimizer.step#…`, which every `torch.optim` optimizer,
//!    custom ones included, writes) or their frames (`torch/optim/`). Between two backward passes
//!    the program's own thread runs the optimizer, loads the next batch and runs the next forward
//!    pass, which starts at the first allocation made inside a module's call (or, without frames,
//!    the first one that dies in the backward pass after it).
//! 2. Lifetimes. Made before training and alive throughout: a parameter (or buffer). Made in a
//!    backward pass and kept past it, the size of a parameter: a gradient (with accumulation,
//!    later passes add into it in place). Made in an optimizer step and kept: optimizer state.
//!    Made in a forward pass and freed in the backward pass after it: an activation (autocast's
//!    weight copies included, as autograd saves them). Made before the forward pass and used
//!    through backward: an input. Made and freed within one phase: a temporary; within a backward
//!    pass: an autograd buffer (gradients of activations), except what activation checkpointing
//!    recomputes (Python frames of `torch/utils/checkpoint.py` or a module's forward on the
//!    autograd thread), which are activations again.
//! 3. A run resumed mid-training has its parameters and optimizer state both made before the
//!    trace, both alive throughout. The gradients tell them apart by count: for each size, as many
//!    parameters as gradients, the rest optimizer state, the lowest addresses taken as the
//!    parameters (made first, in the first segments). Said with low confidence.
//!
//! Computed once per device ([`categories`]), 3 bytes per allocation, kept with the index's
//! derived views.

use std::cell::Cell;

use rustc_hash::{FxHashMap, FxHashSet};
use serde::Serialize;

use super::index::{Allocation, DeviceIndex, Index, NONE};
use crate::frames::is_cpp;
use crate::model::{Action, Snapshot, StackId};

pub use super::labels::{Categories, Category, Confidence, Label, PhaseSource, Phases, Rule};

/// Bytes per category, in [`Category::ALL`]'s order (JSON: an object keyed by category).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals(pub [u64; 9]);

impl Serialize for Totals {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(9))?;
        for c in Category::ALL {
            m.serialize_entry(c.as_str(), &self.get(c))?;
        }
        m.end()
    }
}

impl Totals {
    pub fn add(&mut self, c: Category, bytes: u64) {
        self.0[c as usize] += bytes;
    }
    pub fn get(&self, c: Category) -> u64 {
        self.0[c as usize]
    }
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }
}

/// The labels of device `d`, found once and kept with its derived views.
pub fn categories<'a>(snap: &Snapshot, index: &Index, d: &'a DeviceIndex) -> &'a Categories {
    d.lazy.categories.0.get_or_init(|| classify(snap, index, d))
}

/// One live allocation, labelled.
#[derive(Clone, Debug, Serialize)]
pub struct Labelled {
    /// Its id in the device index.
    pub id: u32,
    pub address: u64,
    pub size: u64,
    pub stream: u64,
    /// Event index of its `alloc`, or none when made before the trace.
    pub start: Option<u32>,
    pub stack: StackId,
    #[serde(flatten)]
    pub label: Label,
}

/// Every allocation alive at a position, labelled, and the bytes per category.
#[derive(Clone, Debug, Serialize)]
pub struct CategoriesAt {
    pub device: i32,
    pub position: u32,
    pub source: PhaseSource,
    /// Backward passes found in the trace.
    pub backward_passes: u32,
    /// Largest first.
    pub allocations: Vec<Labelled>,
    pub totals: Totals,
}

/// The allocations alive at position `p` of device `d`, labelled.
pub fn at(snap: &Snapshot, index: &Index, d: &DeviceIndex, p: u32) -> CategoriesAt {
    let c = categories(snap, index, d);
    let t = &snap.trace;
    let p = p.min(d.len);
    let mut totals = Totals::default();
    let mut allocations: Vec<Labelled> = d
        .alive_at(p)
        .into_iter()
        .map(|id| {
            let a = &d.allocations[id as usize];
            let l = Labelled {
                id,
                address: d.addr_of(t, id),
                size: d.size_of(t, id),
                stream: d.stream_of(t, id),
                start: (a.start != NONE).then_some(a.start),
                stack: d.stack_of(t, id),
                label: c.label(id),
            };
            totals.add(l.label.category, l.size);
            l
        })
        .collect();
    allocations.sort_by(|a, b| b.size.cmp(&a.size).then(a.address.cmp(&b.address)));
    CategoriesAt {
        device: d.device,
        position: p,
        source: c.source,
        backward_passes: c.phases.backward.len() as u32,
        allocations,
        totals,
    }
}

/// What a device's report says of its categories.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Summary {
    pub source: PhaseSource,
    pub backward_passes: u32,
    /// Where live (requested) bytes peak, and the bytes per category there.
    pub peak_position: u32,
    pub at_peak: Totals,
}

/// Device `d`'s categories for its report, or `None` without a trace.
pub fn summary(snap: &Snapshot, index: &Index, d: &DeviceIndex, peak: u32) -> Option<Summary> {
    if d.len == 0 {
        return None;
    }
    let c = categories(snap, index, d);
    Some(Summary {
        source: c.source,
        backward_passes: c.phases.backward.len() as u32,
        peak_position: peak,
        at_peak: totals_at(snap, index, d, peak),
    })
}

/// For each allocation of device `d`: made to stay (a parameter, or optimizer state made in the
/// first optimizer step or before the trace), so never a leak.
pub fn settled(snap: &Snapshot, index: &Index, d: &DeviceIndex) -> Vec<bool> {
    let c = categories(snap, index, d);
    // The first step's optimizer state is made by the end of the first optimizer step after
    // the first backward pass.
    let first_backward = c.phases.backward.first().map_or(0, |b| b.1);
    let first_step_end = c
        .phases
        .optimizer
        .iter()
        .find(|o| o.1 > first_backward && o.1 > o.0)
        .map_or(NONE, |o| o.1);
    let first_stretch_end = c.phases.backward.get(1).map_or(NONE, |b| b.0);
    d.allocations
        .iter()
        .zip(&c.labels)
        .map(|(a, l)| match l.category {
            Category::Parameter => true,
            Category::OptimizerState => {
                a.start == NONE || a.start < first_step_end.min(first_stretch_end)
            }
            _ => false,
        })
        .collect()
}

/// Bytes per category alive at position `p`.
pub fn totals_at(snap: &Snapshot, index: &Index, d: &DeviceIndex, p: u32) -> Totals {
    let c = categories(snap, index, d);
    let mut t = Totals::default();
    for id in d.alive_at(p) {
        t.add(c.label(id).category, d.size_of(&snap.trace, id));
    }
    t
}

/// For each bucket `(first, last)` of positions (ascending), the bytes per category where its
/// live bytes are highest: what a stacked chart draws up to the bucket's highest live bytes.
pub fn at_bucket_peaks(
    snap: &Snapshot,
    index: &Index,
    d: &DeviceIndex,
    buckets: &[(u32, u32)],
) -> Vec<Totals> {
    let positions: Vec<u32> = buckets
        .iter()
        .map(|&(first, last)| {
            let last = last.min(d.len);
            let (mut best, mut at) = (0, first.min(last));
            for p in first..=last {
                let live = d.live_at(p);
                if live > best {
                    (best, at) = (live, p);
                }
            }
            at
        })
        .collect();
    totals_along(snap, index, d, &positions)
}

/// Bytes per category after each of `positions` (ascending), in one pass over the events.
pub fn totals_along(
    snap: &Snapshot,
    index: &Index,
    d: &DeviceIndex,
    positions: &[u32],
) -> Vec<Totals> {
    let c = categories(snap, index, d);
    let mut out = Vec::with_capacity(positions.len());
    let mut t = Totals::default();
    for pre in &d.pre_trace {
        t.add(c.label(pre.id).category, pre.size);
    }
    let mut events = d.event_allocation.reader();
    let mut p = 0u32;
    for &want in positions {
        let want = want.min(d.len);
        while p < want {
            let a = events.get(p);
            if a != NONE {
                let al = &d.allocations[a as usize];
                let size = d.size_of(&snap.trace, a);
                let cat = c.label(a).category;
                if al.start == p {
                    t.add(cat, size);
                } else if al.end == p {
                    t.0[cat as usize] = t.0[cat as usize].saturating_sub(size);
                }
            }
            p += 1;
        }
        out.push(t);
    }
    out
}

// ---- evidence from stacks ----------------------------------------------------------------------

const HAS_FRAMES: u16 = 1;
const PYTHON: u16 = 2;
/// Reaches the program's `<module>` (or the interpreter's own frames in a C++ stack).
const MAIN: u16 = 4;
/// The autograd engine's thread: its C++ frames, or Python frames from torch's autograd code
/// that never reach `<module>`.
const ENGINE: u16 = 8;
/// Inside a module's call or a compiled region.
const FORWARD: u16 = 16;
/// In `torch/optim/` or a `zero_grad`.
const OPTIM: u16 = 32;
/// Activation checkpointing's code.
const CHECKPOINT: u16 = 64;
/// Torch's autograd Python code (a frame's fact; the stack's is [`ENGINE`]).
const AUTOGRAD_PY: u16 = 128;
/// DistributedDataParallel's reducer making its gradient buckets: its C++ frames, or (a frame's
/// fact, kept for the stack only when it is the innermost Python frame) `_ddp_init_helper` or
/// `_pre_forward` (which rebuilds the buckets after the first step).
const BUCKET: u16 = 256;
const UNSET: u16 = u16::MAX;

/// Every stack's facts, worked out once when the labels start: a trace has tens to thousands
/// of stacks for millions of events, and the passes below ask for an event's facts millions of
/// times (classified lazily, the lookup was a call with a branch per event: 2 % of a 12M-event
/// trace's samples; bench/README.md, issue 41).
struct StackFacts {
    stacks: Vec<u16>,
}

impl StackFacts {
    fn new(snap: &Snapshot) -> StackFacts {
        let mut frames = FrameFacts {
            snap,
            frames: vec![UNSET; snap.frames.len()],
        };
        let stacks = (0..snap.stacks.len())
            .map(|k| frames.stack(crate::model::StackId(k as u32)))
            .collect();
        StackFacts { stacks }
    }

    /// A stack's facts (none for a stack the table does not have).
    #[inline]
    fn of(&self, s: StackId) -> u16 {
        self.stacks.get(s.0 as usize).copied().unwrap_or(0)
    }
}

/// Each frame's facts, worked out when a stack first has it.
struct FrameFacts<'a> {
    snap: &'a Snapshot,
    frames: Vec<u16>,
}

impl FrameFacts<'_> {
    fn stack(&mut self, s: StackId) -> u16 {
        let mut f = 0u16;
        let mut innermost_python = true;
        for &fr in self.snap.stack(s) {
            let mut ff = self.frame(fr.0 as usize);
            if ff & PYTHON != 0 {
                if !innermost_python {
                    ff &= !BUCKET;
                }
                innermost_python = false;
            }
            f |= ff;
        }
        if !self.snap.stack(s).is_empty() {
            f |= HAS_FRAMES;
        }
        // Python frames that never reach `<module>` run on another thread: the autograd
        // engine's when they are torch's autograd or checkpointing code.
        if f & PYTHON != 0 && f & MAIN == 0 && f & (AUTOGRAD_PY | CHECKPOINT) != 0 {
            f |= ENGINE;
        }
        f
    }

    /// A frame's facts.
    fn frame(&mut self, k: usize) -> u16 {
        if self.frames[k] != UNSET {
            return self.frames[k];
        }
        let fr = self.snap.frames.get(crate::model::FrameId(k as u32));
        let file = self.snap.str(fr.filename);
        let name = self.snap.str(fr.name);
        let mut f = 0u16;
        if is_cpp(file) {
            if name.contains("Engine::evaluate_function") || name.contains("Engine::thread_main") {
                f |= ENGINE;
            }
            if name.contains("PyEval_EvalFrame") {
                f |= MAIN;
            }
            if name.contains("Reducer::initialize_buckets") {
                f |= BUCKET;
            }
        } else {
            f |= PYTHON;
            if name == "<module>" {
                f |= MAIN;
            }
            // A module's call, not its construction or `.to()`/`.cuda()` (same file).
            if (file.ends_with("torch/nn/modules/module.py")
                && (name == "_call_impl" || name == "_wrapped_call_impl"))
                || name == "forward"
                || file.contains("_dynamo/eval_frame.py")
            {
                f |= FORWARD;
            }
            if file.contains("torch/optim/") || name == "zero_grad" {
                f |= OPTIM;
            }
            if file.ends_with("torch/utils/checkpoint.py") {
                f |= CHECKPOINT;
            }
            if file.contains("torch/autograd/") || file.contains("torch/_functorch/") {
                f |= AUTOGRAD_PY;
            }
            if file.ends_with("torch/nn/parallel/distributed.py")
                && (name == "_ddp_init_helper" || name == "_pre_forward")
            {
                f |= BUCKET;
            }
        }
        self.frames[k] = f;
        f
    }
}

// ---- phases ------------------------------------------------------------------------------------

/// The thread an event ran on, as far as its stack says.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Thread {
    Main,
    Autograd,
    Unknown,
}

fn thread_of(flags: u16, python_trace: bool) -> Thread {
    if flags & ENGINE != 0 {
        Thread::Autograd
    } else if flags & MAIN != 0 || flags & PYTHON != 0 {
        Thread::Main
    } else if flags & HAS_FRAMES == 0 && python_trace {
        // With Python frames recorded, only the autograd engine's thread has none.
        Thread::Autograd
    } else {
        Thread::Unknown
    }
}

/// Event ranges of the backward passes: runs of autograd-thread events with at least one
/// allocation, unbroken by the program's own thread.
fn backward_from_threads(
    snap: &Snapshot,
    d: &DeviceIndex,
    facts: &StackFacts,
    python_trace: bool,
) -> Vec<(u32, u32)> {
    let t = &snap.trace;
    let mut out = Vec::new();
    let mut open: Option<(u32, u32, bool)> = None; // start, end, has an alloc
    // The stacks read a block at a time, not looked up event by event (56 → 50 ms on a
    // 12M-event trace).
    let rows = d.rows();
    let events = (0u32..)
        .zip(&t.action[rows.clone()])
        .zip(t.stack.iter_range(rows));
    for ((p, &action), stack) in events {
        if !matches!(
            action,
            Action::Alloc
                | Action::FreeRequested
                | Action::FreeCompleted
                | Action::SegmentAlloc
                | Action::SegmentFree
                | Action::SegmentMap
                | Action::SegmentUnmap
        ) {
            continue;
        }
        match thread_of(facts.of(stack), python_trace) {
            Thread::Autograd => {
                let o = open.get_or_insert((p, p + 1, false));
                o.1 = p + 1;
                o.2 |= action == Action::Alloc;
            }
            Thread::Main => {
                if let Some((s, e, true)) = open.take() {
                    out.push((s, e));
                }
            }
            Thread::Unknown => {}
        }
    }
    if let Some((s, e, true)) = open {
        out.push((s, e));
    }
    out
}

/// Optimizer steps and `zero_grad`s from their annotations, as event ranges.
fn optimizer_spans(snap: &Snapshot, d: &DeviceIndex) -> Vec<(u32, u32)> {
    let (times, rows) = (&snap.trace.time_us, d.rows());
    let mut starts: FxHashMap<u32, Vec<i64>> = FxHashMap::default();
    let mut spans = Vec::new();
    for a in &snap.annotations {
        if a.device != d.device && a.device >= 0 {
            continue;
        }
        let name = snap.str(a.name);
        if !(name.starts_with("Optimizer.step") || name.starts_with("Optimizer.zero_grad")) {
            continue;
        }
        if a.start {
            starts.entry(a.name.0).or_default().push(a.time_us);
        } else if let Some(t0) = starts.get_mut(&a.name.0).and_then(|v| v.pop()) {
            let s = times.partition_point(rows.clone(), |x| x < t0) as u32;
            let e = times.partition_point(rows.clone(), |x| x <= a.time_us) as u32;
            // Kept when empty too: a step that made nothing still ends a stretch.
            spans.push((s, e.max(s)));
        }
    }
    spans.sort_unstable();
    spans
}

fn inside(spans: &[(u32, u32)], p: u32) -> Option<usize> {
    holding(spans, spans.partition_point(|s| s.0 <= p), p)
}

/// The span holding `p`, given `k`, the number of spans (sorted by start) that start at or
/// before it: the last of those, if `p` is before its end.
fn holding(spans: &[(u32, u32)], k: usize, p: u32) -> Option<usize> {
    (k > 0 && p < spans[k - 1].1).then(|| k - 1)
}

/// Without frames: between two optimizer steps, the backward pass starts where the first
/// allocation kept into the next optimizer step and the size of a parameter is made, after at
/// least one made in the stretch died in it (the forward pass ran).
fn backward_from_lifetimes(
    snap: &Snapshot,
    d: &DeviceIndex,
    optimizer: &[(u32, u32)],
    parameter_sizes: &FxHashSet<u64>,
) -> Vec<(u32, u32)> {
    let t = &snap.trace;
    let ends = optimizer.iter().map(|o| o.0).chain(std::iter::once(d.len));
    let starts = std::iter::once(0).chain(optimizer.iter().map(|o| o.1));
    let mut out = Vec::new();
    let mut events = d.event_allocation.reader();
    for (from, to) in starts.zip(ends).filter(|(a, b)| a < b) {
        let mut died_inside = false;
        for p in from..to {
            let a = events.get(p);
            if a == NONE {
                continue;
            }
            let al = &d.allocations[a as usize];
            if al.start != p {
                continue;
            }
            let kept = al.end == NONE || al.end >= to;
            // A gradient lives until an optimizer's `zero_grad` frees it (kept for good, it
            // could as well be a library's workspace made by the first forward pass).
            // The last step's gradients may be alive when the trace ends.
            let like_gradient =
                kept && (if al.end == NONE {
                    from > 0
                } else {
                    inside(optimizer, al.end).is_some()
                }) && parameter_sizes.contains(&d.size_of(t, a));
            if like_gradient && died_inside {
                out.push((backward_start(snap, d, from, p), to));
                break;
            }
            died_inside |= !kept;
        }
    }
    out
}

/// Where a backward pass whose first gradient is made at `g` starts, without frames: at the
/// forward pass's height (the loss's gradient comes before the first parameter's), counting
/// only allocations that live at least [`DURABLE_EVENTS`] events: a convolution's workspace,
/// freed at once, makes a height of its own mid-forward.
fn backward_start(snap: &Snapshot, d: &DeviceIndex, from: u32, g: u32) -> u32 {
    let lives = |a: u32| {
        let al = &d.allocations[a as usize];
        al.end == NONE || al.start == NONE || al.end - al.start >= DURABLE_EVENTS
    };
    let (mut live, mut top, mut height) = (0i64, 0i64, g);
    let mut events = d.event_allocation.reader();
    for q in from..g {
        let a = events.get(q);
        if a == NONE || !lives(a) {
            continue;
        }
        let al = &d.allocations[a as usize];
        let size = d.size_of(&snap.trace, a) as i64;
        if al.start == q {
            live += size;
            if live > top {
                (top, height) = (live, q + 1);
            }
        } else if al.end == q {
            live -= size;
        }
    }
    height
}

/// Allocations freed sooner than this many events after they are made do not count towards
/// a forward pass's height.
const DURABLE_EVENTS: u32 = 16;

/// Alive to the end of the run: never freed, or freed only as a fatal OOM at `end_of_run`
/// unwound the program.
fn lasts(a: &Allocation, end_of_run: u32) -> bool {
    a.end == NONE || a.end >= end_of_run
}

// ---- the classifier ----------------------------------------------------------------------------

struct Context<'a> {
    snap: &'a Snapshot,
    d: &'a DeviceIndex,
    phases: Phases,
    /// Address ranges of private pools' segments.
    private: Vec<(u64, u64)>,
    python_trace: bool,
    parameter_sizes: FxHashSet<u64>,
    /// The fatal OOM's position, or [`NONE`].
    end_of_run: u32,
    /// Some event's stack is in `torch/optim/` or a `zero_grad`.
    optimizer_frames: bool,
    /// The last allocation made inside a module's call, or [`NONE`] (no Python frames).
    last_forward: u32,
    /// Where the last label's start fell among the backward passes and the optimizer steps
    /// ([`point_from`]): labels are made in allocation order, which is event order.
    backward_at: Cell<usize>,
    optimizer_at: Cell<usize>,
}

/// `spans.partition_point(|s| s.0 <= p)` for spans sorted by start, walked on from the last
/// answer (`from`) while `p` grows, as it does from one allocation's start to the next: two
/// binary searches over thousands of passes and steps were most of the labelling's time on a
/// 13M-event trace (bench/README.md, issue 41). A `p` below the last answer's span searches.
fn point_from(spans: &[(u32, u32)], from: &Cell<usize>, p: u32) -> usize {
    let mut k = from.get().min(spans.len());
    if k > 0 && spans[k - 1].0 > p {
        k = spans.partition_point(|s| s.0 <= p);
    } else {
        while k < spans.len() && spans[k].0 <= p {
            k += 1;
        }
    }
    from.set(k);
    k
}

fn classify(snap: &Snapshot, index: &Index, d: &DeviceIndex) -> Categories {
    let t = &snap.trace;
    // A program that dies of an OOM frees what it held as the exception unwinds, before its
    // snapshot: what was alive at that OOM lasted as long as the run did.
    let end_of_run = super::recovery::fates(snap, index, d)
        .iter()
        .filter(|f| f.recovery == super::recovery::Recovery::Fatal)
        .map(|f| f.position)
        .min()
        .unwrap_or(NONE);
    let facts = StackFacts::new(snap);
    let allocs_with_python = d
        .rows()
        .filter(|&r| t.action[r] == Action::Alloc)
        .take(1 << 16)
        .filter(|&r| facts.of(t.stack.get(r)) & PYTHON != 0)
        .count();
    let python_trace = allocs_with_python > 0;
    let has_frames = d
        .rows()
        .filter(|&r| t.action[r] == Action::Alloc)
        .take(1 << 16)
        .any(|r| facts.of(t.stack.get(r)) & HAS_FRAMES != 0);

    // The stacks read a block at a time. On a 12M-event trace whose first optimizer allocation
    // comes late this check takes 17–19 ms: decoding the stack column up to it (the facts'
    // lookups took 22 ms before every stack was classified up front; bench/README.md, issue 41).
    let optimizer_frames = python_trace
        && t.action[d.rows()]
            .iter()
            .zip(t.stack.iter_range(d.rows()))
            .any(|(&a, s)| a == Action::Alloc && facts.of(s) & OPTIM != 0);
    let mut optimizer = optimizer_spans(snap, d);
    // Frames say it too where annotations are missing: an event in torch/optim/.
    if optimizer.is_empty() && python_trace {
        optimizer = runs_where(d, |p| facts.of(t.stack.get(d.row(p))) & OPTIM != 0);
    }
    // Parameters before phases: what was made before the trace or before anything was freed and
    // is alive throughout. Their sizes tell gradients from other backward buffers.
    let parameter_sizes = early_persistent_sizes(snap, d, end_of_run);

    let (backward, source) = if has_frames {
        let b = backward_from_threads(snap, d, &facts, python_trace);
        let s = if b.is_empty() {
            PhaseSource::None
        } else {
            PhaseSource::Threads
        };
        (b, s)
    } else {
        let b = backward_from_lifetimes(snap, d, &optimizer, &parameter_sizes);
        let s = if b.is_empty() {
            PhaseSource::None
        } else {
            PhaseSource::Lifetimes
        };
        (b, s)
    };
    let forward_starts = forward_starts(snap, d, &facts, &backward, &optimizer, python_trace);
    // Now that the first forward pass is known: what was made before it and kept (the model
    // may free as it is built: a cuDNN RNN flattens its weights into one block).
    let parameter_sizes = if forward_starts[0] == NONE {
        parameter_sizes
    } else {
        persistent_sizes_before(snap, d, forward_starts[0], end_of_run)
    };
    let private = private_pools(snap, d);
    // Where the last forward pass made its last allocation: after the last backward pass, what
    // was alive then lasted through the forward passes (a model freed when its function returns
    // is still its parameters).
    let last_forward = if python_trace {
        (0..d.len)
            .rev()
            .find(|&p| {
                let a = d.event_allocation.get(p);
                a != NONE
                    && d.allocations[a as usize].start == p
                    && facts.of(t.stack.get(d.row(p))) & FORWARD != 0
            })
            .unwrap_or(NONE)
    } else {
        NONE
    };
    let cx = Context {
        snap,
        d,
        phases: Phases {
            backward,
            optimizer,
            forward_starts,
        },
        private,
        python_trace,
        parameter_sizes,
        end_of_run,
        optimizer_frames,
        last_forward,
        backward_at: Cell::new(0),
        optimizer_at: Cell::new(0),
    };
    let mut labels: Vec<Label> = (0..d.allocations.len() as u32)
        .map(|id| cx.label(id, &facts, source))
        .collect();
    workspaces_are_not_gradients(d, &cx.phases.backward, end_of_run, &mut labels);
    split_resumed(snap, d, &mut labels);
    Categories {
        labels,
        phases: cx.phases,
        source,
    }
}

/// Maximal runs of events where `f` holds, allowing events without a stack between.
fn runs_where(d: &DeviceIndex, mut f: impl FnMut(u32) -> bool) -> Vec<(u32, u32)> {
    let mut out: Vec<(u32, u32)> = Vec::new();
    let mut events = d.event_allocation.reader();
    for p in 0..d.len {
        if events.get(p) == NONE || !f(p) {
            continue;
        }
        match out.last_mut() {
            Some(last) if last.1 == p => last.1 = p + 1,
            _ => out.push((p, p + 1)),
        }
    }
    out
}

/// Sizes of allocations alive throughout that were made before the trace or before its first
/// free of something made in it (model construction precedes any training).
fn early_persistent_sizes(snap: &Snapshot, d: &DeviceIndex, end_of_run: u32) -> FxHashSet<u64> {
    let first_free = (0..d.len)
        .find(|&p| {
            let a = d.event_allocation.get(p);
            a != NONE && {
                let al = &d.allocations[a as usize];
                al.start != NONE && al.end == p
            }
        })
        .unwrap_or(d.len);
    persistent_sizes_before(snap, d, first_free, end_of_run)
}

/// Sizes of allocations alive to the end of the run made before the trace or before position
/// `p`.
fn persistent_sizes_before(
    snap: &Snapshot,
    d: &DeviceIndex,
    p: u32,
    end_of_run: u32,
) -> FxHashSet<u64> {
    d.allocations
        .iter()
        .enumerate()
        .filter(|(_, a)| lasts(a, end_of_run) && (a.start == NONE || a.start < p))
        .map(|(id, _)| d.size_of(&snap.trace, id as u32))
        .collect()
}

/// Each main-thread stretch's forward start: after its last optimizer event, the first
/// allocation made in a module's call (with Python frames), else the first that dies in the
/// backward pass after the stretch.
fn forward_starts(
    snap: &Snapshot,
    d: &DeviceIndex,
    facts: &StackFacts,
    backward: &[(u32, u32)],
    optimizer: &[(u32, u32)],
    python_trace: bool,
) -> Vec<u32> {
    let t = &snap.trace;
    // The optimizer's stretches by start, with the latest end of those up to each: the latest
    // end of a stretch that starts before `to` is then one binary search. (Scanning every
    // stretch for every backward pass took 2.9 s of 4.8 on a run of 57,000 steps.)
    let mut by_start = optimizer.to_vec();
    by_start.sort_unstable();
    let latest_end: Vec<u32> = by_start
        .iter()
        .scan(0, |m, o| {
            *m = (*m).max(o.1);
            Some(*m)
        })
        .collect();
    let mut out = Vec::with_capacity(backward.len() + 1);
    for k in 0..=backward.len() {
        let from = if k == 0 { 0 } else { backward[k - 1].1 };
        let to = backward.get(k).map_or(d.len, |b| b.0);
        // The latest end among stretches starting before `to`, where it is after `from` (an
        // earlier one ends before this stretch of work).
        let after_optimizer = match by_start.partition_point(|o| o.0 < to) {
            0 => from,
            i => latest_end[i - 1].max(from),
        }
        .clamp(from, to);
        let made = |p: u32| {
            let a = d.event_allocation.get(p);
            (a != NONE && d.allocations[a as usize].start == p).then_some(a)
        };
        let by_frames = python_trace
            .then(|| {
                (after_optimizer..to).find(|&p| {
                    made(p).is_some()
                        && facts.of(t.stack.get(d.row(p))) & (FORWARD | OPTIM) == FORWARD
                })
            })
            .flatten();
        let by_lifetime = || {
            let b = backward.get(k)?;
            (after_optimizer..to).find(|&p| {
                made(p).is_some_and(|a| {
                    let e = d.allocations[a as usize].end;
                    e != NONE && e >= b.0 && e < b.1
                })
            })
        };
        out.push(by_frames.or_else(by_lifetime).unwrap_or(NONE));
    }
    out
}

/// Address ranges of segments in private pools (CUDA graphs, `MemPool`s).
fn private_pools(snap: &Snapshot, d: &DeviceIndex) -> Vec<(u64, u64)> {
    let mut v: Vec<(u64, u64)> = d
        .segments
        .iter()
        .filter(|s| s.pool_id != (0, 0))
        .map(|s| (s.address, s.address + s.size))
        .chain(
            snap.segments
                .iter()
                .filter(|s| s.device == d.device && s.pool_id != (0, 0))
                .map(|s| (s.address, s.address + s.total_size)),
        )
        .collect();
    v.sort_unstable();
    v
}

impl Context<'_> {
    fn in_private_pool(&self, addr: u64) -> bool {
        let k = self.private.partition_point(|r| r.0 <= addr);
        k > 0 && addr < self.private[k - 1].1
    }

    /// Whether an allocation made at `p` (labels' order) with stack `flags` was made in an
    /// optimizer step.
    fn in_optimizer(&self, p: u32, flags: u16) -> bool {
        let spans = &self.phases.optimizer;
        holding(spans, point_from(spans, &self.optimizer_at, p), p).is_some() || flags & OPTIM != 0
    }

    /// Allocation `id`'s label: its pool, then when it was made (before the trace, in a
    /// backward pass, in an optimizer step, before or in a forward pass) and how long it lived.
    fn label(&self, id: u32, facts: &StackFacts, source: PhaseSource) -> Label {
        let (d, t) = (self.d, &self.snap.trace);
        let a = d.allocations[id as usize];
        if !self.private.is_empty() && self.in_private_pool(d.addr_of(t, id)) {
            return Label::new(Category::CudaGraph, Rule::PrivatePool, Confidence::High);
        }
        let persistent = lasts(&a, self.end_of_run);
        if a.start == NONE {
            return self.before_trace(&a, persistent, source);
        }
        let flags = facts.of(t.stack.get(d.row(a.start)));
        let backward = &self.phases.backward;
        // DDP's reducer's buckets hold the gradients for the all-reduce (and are the gradients
        // themselves with `gradient_as_bucket_view=True`).
        if flags & BUCKET != 0 && (persistent || a.end > backward.first().map_or(NONE, |b| b.1)) {
            return Label::new(Category::Gradient, Rule::GradientBucket, Confidence::High);
        }
        let sure = if source == PhaseSource::Threads {
            Confidence::High
        } else {
            Confidence::Medium
        };
        // The backward passes begun by then: the one it was made in is the last, if it was.
        let k = point_from(backward, &self.backward_at, a.start);
        if let Some(b) = holding(backward, k, a.start) {
            return self.in_backward(id, &a, backward[b], flags, persistent, sure);
        }
        // Made on the program's own thread, in stretch k (between backward passes k-1 and k).
        let next = backward.get(k).copied();
        let forward = self.phases.forward_starts[k];
        if self.in_optimizer(a.start, flags) {
            let kept = persistent || next.is_some_and(|b| a.end >= b.0) || a.end >= forward;
            return if kept {
                Label::new(
                    Category::OptimizerState,
                    Rule::KeptFromOptimizerStep,
                    Confidence::High,
                )
            } else {
                Label::new(Category::Temporary, Rule::FreedInPhase, Confidence::High)
            };
        }
        if source == PhaseSource::None && forward == NONE {
            return Label::new(Category::Unknown, Rule::NoPhases, Confidence::Low);
        }
        if forward == NONE || a.start < forward {
            return self.before_forward(&a, k, next, persistent, sure);
        }
        in_forward(&a, next, persistent || self.outlives_forward(&a), sure)
    }

    /// Alive after the last forward pass's last allocation (no backward pass after it).
    fn outlives_forward(&self, a: &Allocation) -> bool {
        self.last_forward != NONE
            && a.start <= self.last_forward
            && a.end > self.last_forward
            && self.phases.backward.last().is_none_or(|b| b.1 <= a.start)
    }

    /// Made before the trace: a parameter where the trace shows the model at work (a forward
    /// pass) and it lives throughout; with nothing to read it against, unknown (an inference
    /// server's KV cache is as old as its weights); freed in a backward pass, an activation.
    fn before_trace(&self, a: &Allocation, persistent: bool, source: PhaseSource) -> Label {
        use Confidence::*;
        if persistent && source == PhaseSource::None && self.phases.forward_starts[0] == NONE {
            return Label::new(Category::Unknown, Rule::NoPhases, Low);
        }
        if persistent {
            return Label::new(Category::Parameter, Rule::KeptFromBeforeTraining, Medium);
        }
        match inside(&self.phases.backward, a.end) {
            Some(_) => Label::new(Category::Activation, Rule::SavedForBackward, Low),
            None => Label::new(Category::Unknown, Rule::BeforeTrace, Low),
        }
    }

    /// Made in backward pass `b`: recomputed by checkpointing, scratch, a gradient (kept, a
    /// parameter's size) or another kept buffer.
    fn in_backward(
        &self,
        id: u32,
        a: &Allocation,
        b: (u32, u32),
        flags: u16,
        persistent: bool,
        sure: Confidence,
    ) -> Label {
        if self.python_trace && flags & CHECKPOINT != 0 {
            return Label::new(Category::Activation, Rule::Recomputed, sure);
        }
        if !persistent && a.end < b.1 {
            return Label::new(Category::AutogradDetail, Rule::BackwardScratch, sure);
        }
        let size = self.d.size_of(&self.snap.trace, id);
        if self.parameter_sizes.is_empty() {
            Label::new(
                Category::Gradient,
                Rule::KeptFromBackward,
                Confidence::Medium,
            )
        } else if self.parameter_sizes.contains(&size) {
            Label::new(Category::Gradient, Rule::KeptFromBackward, sure)
        } else {
            Label::new(
                Category::AutogradDetail,
                Rule::KeptFromBackwardNoParameter,
                Confidence::Medium,
            )
        }
    }

    /// Made in stretch `k` before its forward pass. Kept through every later backward pass, two
    /// or more (or, before the first, to the end): made to stay, though a training function's
    /// model may be freed when it returns, before the snapshot. A batch stays for one (the last
    /// step's batch may be alive when the trace ends).
    fn before_forward(
        &self,
        a: &Allocation,
        k: usize,
        next: Option<(u32, u32)>,
        persistent: bool,
        sure: Confidence,
    ) -> Label {
        use Confidence::*;
        let later = &self.phases.backward[k..];
        let crossed = later
            .iter()
            .take_while(|b| persistent || a.end >= b.1)
            .count();
        let stays = persistent
            || (crossed >= 2 && crossed == later.len())
            || (later.is_empty() && self.outlives_forward(a));
        if stays && k == 0 {
            return Label::new(Category::Parameter, Rule::KeptFromBeforeTraining, sure);
        }
        if stays && crossed >= 2 {
            // Optimizer state is made in the first step; where the trace shows where its
            // optimizer steps are, what is kept from outside them is something else (a list
            // the program appends to).
            return if self.phases.optimizer.is_empty() && !self.optimizer_frames && k == 1 {
                Label::new(
                    Category::OptimizerState,
                    Rule::KeptFromAfterBackward,
                    Medium,
                )
            } else {
                Label::new(Category::Unknown, Rule::KeptBetweenSteps, Low)
            };
        }
        match next {
            Some(b) if persistent || a.end >= b.0 => {
                Label::new(Category::Input, Rule::LoadedBeforeForward, sure)
            }
            // The last forward pass's batch, alive when the trace (or the run) ends.
            None if persistent || self.outlives_forward(a) => {
                Label::new(Category::Input, Rule::LoadedBeforeForward, Low)
            }
            _ => Label::new(Category::Temporary, Rule::FreedInPhase, Medium),
        }
    }
}

/// Made in a forward pass: freed in it (a temporary), in the backward pass after it (an
/// activation), later (an output the program held), or never (a workspace or lazy buffer).
fn in_forward(
    a: &Allocation,
    next: Option<(u32, u32)>,
    persistent: bool,
    sure: Confidence,
) -> Label {
    use Confidence::*;
    match next {
        Some(b) if !persistent && a.end < b.0 => {
            Label::new(Category::Temporary, Rule::FreedInPhase, sure)
        }
        Some(b) if !persistent && a.end < b.1 => {
            Label::new(Category::Activation, Rule::SavedForBackward, sure)
        }
        Some(_) if persistent => Label::new(Category::Unknown, Rule::KeptFromForward, Low),
        Some(_) => Label::new(Category::Activation, Rule::HeldPastBackward, Low),
        None if persistent => Label::new(Category::Activation, Rule::AliveAfterForward, Low),
        None => Label::new(Category::Temporary, Rule::FreedInPhase, Medium),
    }
}

/// Where gradients are freed every step (`zero_grad(set_to_none=True)`), a block a backward
/// pass keeps for good, made before the last backward pass, is no gradient: it is the autograd
/// thread's own cuBLAS workspace (which may well have a parameter's size).
fn workspaces_are_not_gradients(
    d: &DeviceIndex,
    backward: &[(u32, u32)],
    end_of_run: u32,
    labels: &mut [Label],
) {
    let Some(last) = backward.last() else {
        return;
    };
    let freed = labels
        .iter()
        .zip(&d.allocations)
        .any(|(l, a)| l.rule == Rule::KeptFromBackward && !lasts(a, end_of_run));
    if !freed {
        return;
    }
    for (l, a) in labels.iter_mut().zip(&d.allocations) {
        if l.rule == Rule::KeptFromBackward && lasts(a, end_of_run) && a.start < last.0 {
            *l = Label::new(
                Category::AutogradDetail,
                Rule::KeptFromBackwardForGood,
                Confidence::Medium,
            );
        }
    }
}

/// A resumed run: parameters and optimizer state both made before the trace. For each size,
/// as many parameters as the most gradients of that size made in one backward pass; the rest of
/// the same-size blocks alive throughout from before the trace are optimizer state, the lowest
/// addresses taken as the parameters.
fn split_resumed(snap: &Snapshot, d: &DeviceIndex, labels: &mut [Label]) {
    let t = &snap.trace;
    // Optimizer state made in the trace: the run was not resumed (same-size blocks beyond the
    // gradients' count are buffers, or frozen parameters).
    if labels.iter().any(|l| l.rule == Rule::KeptFromOptimizerStep) {
        return;
    }
    // The gradients by size, and their starts and ends, in one pass.
    let mut gradients: FxHashMap<u64, u32> = FxHashMap::default();
    let (mut starts, mut ends) = (Vec::new(), Vec::new());
    for (id, (a, l)) in d.allocations.iter().zip(labels.iter()).enumerate() {
        if l.rule != Rule::KeptFromBackward {
            continue;
        }
        *gradients.entry(d.size_of(t, id as u32)).or_default() += 1;
        if a.start != NONE {
            starts.push(a.start);
        }
        if a.end != NONE {
            ends.push(a.end);
        }
    }
    if gradients.is_empty() {
        return;
    }
    let passes = passes_with_gradients(&mut starts, &mut ends).max(1);
    let mut by_size: FxHashMap<u64, Vec<(u64, u32)>> = FxHashMap::default();
    let mut in_trace: FxHashMap<u64, u32> = FxHashMap::default();
    for (id, l) in labels.iter().enumerate() {
        if l.category != Category::Parameter {
            continue;
        }
        let size = d.size_of(t, id as u32);
        if d.allocations[id].start == NONE {
            by_size
                .entry(size)
                .or_default()
                .push((d.addr_of(t, id as u32), id as u32));
        } else {
            *in_trace.entry(size).or_default() += 1;
        }
    }
    for (size, mut blocks) in by_size {
        let Some(&g) = gradients.get(&size) else {
            continue;
        };
        let params = (g / passes).saturating_sub(in_trace.get(&size).copied().unwrap_or(0));
        if blocks.len() as u32 <= params {
            continue;
        }
        blocks.sort_unstable();
        for (k, &(_, id)) in blocks.iter().enumerate() {
            let c = if (k as u32) < params {
                Category::Parameter
            } else {
                Category::OptimizerState
            };
            labels[id as usize] = Label::new(c, Rule::SplitByGradientCount, Confidence::Low);
        }
    }
}

/// How many backward passes made gradients (with `set_to_none`, each step makes them anew),
/// from the gradients' starts and ends (those the trace has).
fn passes_with_gradients(starts: &mut [u32], ends: &mut [u32]) -> u32 {
    // Gradients made in one pass are freed together before the next pass makes them again, so
    // the count of passes is the number of times the first gradient's stack… counted simply:
    // the most gradients alive at once divides the total. Counted from the gradients' own starts
    // and ends, not in a pass over every event (41 → 23 ms on a 12M-event trace,
    // bench/README.md, issue 41).
    let most = most_alive(starts, ends);
    starts
        .len()
        .checked_div(most)
        .map_or(1, |p| p.max(1) as u32)
}

/// The most of some allocations alive at once, from their start and end events (no two at one
/// event): just after the k-th start (counting from 1) at `s`, k were made and those that ended
/// before `s` are gone.
fn most_alive(starts: &mut [u32], ends: &mut [u32]) -> usize {
    // Allocations are numbered as they are made: their starts are in order already.
    if !starts.is_sorted() {
        starts.sort_unstable();
    }
    radix_sort(ends);
    let mut gone = 0;
    let mut most = 0;
    for (k, &s) in starts.iter().enumerate() {
        while gone < ends.len() && ends[gone] < s {
            gone += 1;
        }
        most = most.max((k + 1).saturating_sub(gone));
    }
    most
}

/// Sorts `v` in two passes of 16 bits (a gradient's end events, a million of them on a
/// 12M-event trace: 12 ms with `sort_unstable`).
fn radix_sort(v: &mut [u32]) {
    if v.len() < 1 << 12 {
        v.sort_unstable();
        return;
    }
    let mut spare = vec![0u32; v.len()];
    for shift in [0, 16] {
        let mut at = vec![0usize; 1 << 16];
        for &x in v.iter() {
            at[(x >> shift) as usize & 0xffff] += 1;
        }
        let mut sum = 0;
        for a in at.iter_mut() {
            (*a, sum) = (sum, sum + *a);
        }
        for &x in v.iter() {
            let d = (x >> shift) as usize & 0xffff;
            spare[at[d]] = x;
            at[d] += 1;
        }
        v.copy_from_slice(&spare);
    }
}

#[cfg(test)]
mod tests {
    use super::{most_alive, point_from, radix_sort};
    use std::cell::Cell;

    #[test]
    fn the_radix_sort_sorts() {
        let mut next = crate::test_rand::xorshift(0x51ed_2701_9a3c_88b5);
        for n in [0usize, 1, 2, 1000, 70_000] {
            let mut v: Vec<u32> = (0..n)
                .map(|k| match k % 3 {
                    0 => next(1 << 32) as u32,
                    1 => next(1 << 16) as u32,
                    _ => u32::MAX - next(3) as u32,
                })
                .collect();
            let mut want = v.clone();
            want.sort_unstable();
            radix_sort(&mut v);
            assert_eq!(v, want, "{n} values");
        }
    }

    /// Counted from the starts and ends alone, the most alive at once is the event walk's, with
    /// allocations made before the trace (an end, no start) and alive at its end (no end).
    #[test]
    fn the_most_alive_is_the_event_walks() {
        let mut next = crate::test_rand::xorshift(0x9e37_79b9_7f4a_7c15);
        let mut rand = move |below: u32| next(below as u64) as u32;
        for n in [0, 1, 2, 7, 300] {
            // Distinct event positions paired at random, the allocations in order of start.
            let mut positions: Vec<u32> = (0..2 * n).map(|k| k * 3 + rand(3)).collect();
            for i in (1..positions.len()).rev() {
                positions.swap(i, rand(i as u32 + 1) as usize);
            }
            let mut allocations: Vec<(u32, u32)> = positions
                .chunks(2)
                .map(|c| (c[0].min(c[1]), c[0].max(c[1])))
                .collect();
            allocations.sort_unstable();
            let mut walk = vec![0i8; (6 * n + 3) as usize];
            let (mut starts, mut ends) = (Vec::new(), Vec::new());
            for (a, b) in allocations {
                let (start, end) = match rand(4) {
                    0 => (None, Some(a)),
                    1 => (Some(a), None),
                    _ => (Some(a), Some(b)),
                };
                if let Some(s) = start {
                    starts.push(s);
                    walk[s as usize] = 1;
                }
                if let Some(e) = end {
                    ends.push(e);
                    walk[e as usize] = -1;
                }
            }
            let (mut alive, mut most) = (0i64, 0i64);
            for &step in &walk {
                alive += step as i64;
                if step == 1 {
                    most = most.max(alive);
                }
            }
            assert_eq!(
                most_alive(&mut starts, &mut ends) as i64,
                most,
                "{n} allocations"
            );
        }
    }

    /// Walked on from its last answer, forward or back, the point is the binary search's.
    #[test]
    fn the_point_walked_on_is_the_point_searched() {
        let mut next = crate::test_rand::xorshift(0x2545_f491_4f6c_dd1d);
        let mut rand = move |below: u32| next(below as u64) as u32;
        for n in [0, 1, 2, 50] {
            // Sorted by start, with equal starts and overlaps as real spans never have.
            let mut spans: Vec<(u32, u32)> = (0..n).map(|_| (rand(1000), rand(1000))).collect();
            spans.sort_unstable();
            let from = Cell::new(0);
            let mut p = 0;
            for step in 0..2000 {
                // Mostly forward, as labels go; sometimes back, or past every span.
                p = match rand(10) {
                    0 => rand(1100),
                    _ => p + rand(20),
                };
                let want = spans.partition_point(|s| s.0 <= p);
                assert_eq!(
                    point_from(&spans, &from, p),
                    want,
                    "{n} spans, step {step}, p {p}"
                );
            }
        }
    }
}
