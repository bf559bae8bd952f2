//! Memory by call stack, grouped by call site (the first user frame) and as a flame tree from the
//! outermost frame inwards, weighed two ways: the bytes alive at one moment (by default the peak),
//! or the bytes × the time each allocation was held over the whole trace ([`FlameWeight::Held`]:
//! what held memory longest, which a moment's view misses when a large tensor lives briefly and a
//! smaller one lives through the run).

use rustc_hash::FxHashMap;
use serde::Serialize;

use super::index::{Index, NONE};
use crate::frames::FrameView;
use crate::model::{FrameId, Snapshot, StackId};

#[derive(Clone, Debug, Serialize)]
pub struct CallSite {
    /// The first user frame (or first non-noise frame) of the stacks grouped here.
    pub site: Option<FrameView>,
    /// Alive at the moment; by [`FlameWeight::Held`], every byte allocated here in the trace.
    pub bytes: u64,
    pub count: u32,
    /// Byte × µs held ([`FlameWeight::Held`]; 0 at a moment).
    pub held: f64,
    /// The largest stack of this site, user frames first, noise hidden.
    pub frames: Vec<FrameView>,
    pub stacks: u32,
}

#[derive(Clone, Debug, Serialize)]
pub struct FlameNode {
    pub name: String,
    pub filename: String,
    pub line: u32,
    pub bytes: u64,
    pub count: u32,
    /// Byte × µs held ([`FlameWeight::Held`]; 0 at a moment).
    pub held: f64,
    pub children: Vec<FlameNode>,
}

#[derive(Clone, Debug, Serialize)]
pub struct StackReport {
    pub device: i32,
    pub position: u32,
    pub total_bytes: u64,
    pub count: u32,
    pub sites: Vec<CallSite>,
    /// The frames `flame` was built from.
    pub frames: FlameFrames,
    pub weight: FlameWeight,
    /// How [`FlameWeight::Held`] was measured; `None` at a moment.
    pub held: Option<HeldClock>,
    pub flame: FlameNode,
}

/// What the tree and the sites are weighed by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FlameWeight {
    /// The bytes alive at one moment.
    Live,
    /// Each allocation's bytes × the time it was held (alloc to `free_completed`), over the whole
    /// trace, summed: byte × µs.
    Held,
}

/// The clock [`FlameWeight::Held`] ran on, and what it could not see.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct HeldClock {
    /// The trace's span held against, in µs; where the trace has no clock (before PyTorch 2.2, or
    /// every `time_us` equal), events stand in for µs and `by_events` says so.
    pub span_us: f64,
    pub by_events: bool,
    /// Made before the trace began: counted from its first event (held at least that long).
    pub before_trace: u32,
    /// Still alive at the snapshot: counted to its last event (held at least that long).
    pub at_snapshot: u32,
}

/// One stack's weight.
#[derive(Clone, Copy, Debug)]
struct StackWeight {
    stack: StackId,
    bytes: u64,
    count: u32,
    held: f64,
}

/// Live bytes and counts per stack at position `p`.
pub fn live_by_stack(
    t: &crate::model::TraceTable,
    index: &Index,
    device: i32,
    p: u32,
) -> Vec<(StackId, u64, u32)> {
    live_by_stack_of(t, index, device, p, |_| true)
}

/// [`live_by_stack`] of the allocations `keep` accepts (by id).
fn live_by_stack_of(
    t: &crate::model::TraceTable,
    index: &Index,
    device: i32,
    p: u32,
    keep: impl Fn(u32) -> bool,
) -> Vec<(StackId, u64, u32)> {
    let Some(d) = index.device(device) else {
        return Vec::new();
    };
    let mut by: FxHashMap<StackId, (u64, u32)> = FxHashMap::default();
    for a in d.alive_at(p).into_iter().filter(|&a| keep(a)) {
        let e = by.entry(d.stack_of(t, a)).or_default();
        e.0 += d.size_of(t, a);
        e.1 += 1;
    }
    let mut v: Vec<_> = by.into_iter().map(|(s, (b, c))| (s, b, c)).collect();
    v.sort_by_key(|&(s, b, _)| (std::cmp::Reverse(b), s));
    v
}

/// Memory by call site at position `p` (`None`: the device's peak).
pub fn stacks_at(
    snap: &Snapshot,
    index: &Index,
    device: i32,
    p: Option<u32>,
    max_sites: usize,
) -> Option<StackReport> {
    stacks_at_with(
        snap,
        index,
        device,
        p,
        max_sites,
        FlameFrames::default_for(index),
    )
}

/// Which frames the flame tree is built from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FlameFrames {
    /// Every frame but noise (C++ included, when the snapshot recorded it).
    All,
    /// Python frames only: the tree a Python user reads. Allocations with no Python frame at all
    /// (a library's workspace, say) sit under one node, `(no Python frames)`.
    PythonOnly,
}

impl FlameFrames {
    /// Python where the snapshot recorded Python frames (what its users read), else every frame.
    pub fn default_for(index: &Index) -> FlameFrames {
        if index.frames.has_python() {
            FlameFrames::PythonOnly
        } else {
            FlameFrames::All
        }
    }
}

/// [`stacks_at`], choosing the flame tree's frames.
pub fn stacks_at_with(
    snap: &Snapshot,
    index: &Index,
    device: i32,
    p: Option<u32>,
    max_sites: usize,
    frames: FlameFrames,
) -> Option<StackReport> {
    stacks_of_category(snap, index, device, p, max_sites, frames, None)
}

/// [`stacks_at_with`] of the allocations of one category ([`super::categories`]), or all.
pub fn stacks_of_category(
    snap: &Snapshot,
    index: &Index,
    device: i32,
    p: Option<u32>,
    max_sites: usize,
    frames: FlameFrames,
    only: Option<super::categories::Category>,
) -> Option<StackReport> {
    let d = index.device(device)?;
    let p = p.unwrap_or(d.peak_position).min(d.len);
    let per_stack = match only {
        None => live_by_stack(&snap.trace, index, device, p),
        Some(c) => {
            let labels = super::categories::categories(snap, index, d);
            live_by_stack_of(&snap.trace, index, device, p, |a| {
                labels.label(a).category == c
            })
        }
    };
    let weights: Vec<StackWeight> = per_stack
        .into_iter()
        .map(|(stack, bytes, count)| StackWeight {
            stack,
            bytes,
            count,
            held: 0.0,
        })
        .collect();
    let mut r = weighed(snap, index, &weights, frames, FlameWeight::Live, max_sites);
    r.device = device;
    r.position = p;
    Some(r)
}

/// Memory by call site weighed by bytes × the time held ([`FlameWeight::Held`]), over every
/// allocation of the device's trace (of one category, or all): what held memory longest.
pub fn held_by_stack(
    snap: &Snapshot,
    index: &Index,
    device: i32,
    max_sites: usize,
    frames: FlameFrames,
    only: Option<super::categories::Category>,
) -> Option<StackReport> {
    let d = index.device(device)?;
    let labels = only.map(|_| super::categories::categories(snap, index, d));
    let t = &snap.trace;
    let time = |e: u32| t.time_us.get(d.row(e));
    let (t0, t1) = match d.len {
        0 => (0, 0),
        n => (time(0), time(n - 1)),
    };
    let by_events = t1 <= t0;
    let span_us = if by_events {
        d.len.saturating_sub(1) as f64
    } else {
        (t1 - t0) as f64
    };
    let at = |e: u32| {
        if by_events {
            e as f64
        } else {
            (time(e) - t0).max(0) as f64
        }
    };
    let mut clock = HeldClock {
        span_us,
        by_events,
        before_trace: 0,
        at_snapshot: 0,
    };
    let mut by: FxHashMap<StackId, StackWeight> = FxHashMap::default();
    for (id, a) in d.allocations.iter().enumerate() {
        let id = id as u32;
        if let (Some(c), Some(labels)) = (only, labels)
            && labels.label(id).category != c
        {
            continue;
        }
        let start = if a.start == NONE {
            clock.before_trace += 1;
            0.0
        } else {
            at(a.start)
        };
        let end = if a.end == NONE {
            clock.at_snapshot += 1;
            span_us
        } else {
            at(a.end)
        };
        let bytes = d.size_of(t, id);
        let stack = d.stack_of(t, id);
        let w = by.entry(stack).or_insert(StackWeight {
            stack,
            bytes: 0,
            count: 0,
            held: 0.0,
        });
        w.bytes += bytes;
        w.count += 1;
        w.held += bytes as f64 * (end - start).max(0.0);
    }
    let mut weights: Vec<StackWeight> = by.into_values().collect();
    weights.sort_by(|a, b| b.held.total_cmp(&a.held).then(a.stack.cmp(&b.stack)));
    let mut r = weighed(snap, index, &weights, frames, FlameWeight::Held, max_sites);
    r.device = device;
    r.position = d.len;
    r.held = Some(clock);
    Some(r)
}

/// Sites and the flame tree of per-stack weights, ordered by `weight`.
fn weighed(
    snap: &Snapshot,
    index: &Index,
    per_stack: &[StackWeight],
    frames: FlameFrames,
    weight: FlameWeight,
    max_sites: usize,
) -> StackReport {
    let fc = &index.frames;
    let key = |bytes: u64, held: f64| match weight {
        FlameWeight::Live => bytes as f64,
        FlameWeight::Held => held,
    };
    let mut sites: FxHashMap<Option<FrameId>, CallSite> = FxHashMap::default();
    let mut largest: FxHashMap<Option<FrameId>, f64> = FxHashMap::default();
    let mut root = FlameNode {
        name: "all".into(),
        filename: String::new(),
        line: 0,
        bytes: 0,
        count: 0,
        held: 0.0,
        children: Vec::new(),
    };
    // Read in Python: a site is a Python line or a note saying there was none.
    let python = frames == FlameFrames::PythonOnly;
    for w in per_stack {
        let label = fc.label_in(snap, w.stack, python);
        let site = sites.entry(label).or_insert_with(|| CallSite {
            site: label.map(|f| fc.site_view_in(snap, f, python)),
            bytes: 0,
            count: 0,
            held: 0.0,
            frames: Vec::new(),
            stacks: 0,
        });
        site.bytes += w.bytes;
        site.count += w.count;
        site.held += w.held;
        site.stacks += 1;
        let best = largest.entry(label).or_insert(-1.0);
        if key(w.bytes, w.held) > *best {
            *best = key(w.bytes, w.held);
            site.frames = fc.display(snap, w.stack);
        }
        // Flame: outermost first, noise hidden.
        let mut node = &mut root;
        node.bytes += w.bytes;
        node.count += w.count;
        node.held += w.held;
        let mut path = fc
            .filtered(snap, w.stack)
            .into_iter()
            .rev()
            .filter(|&f| frames == FlameFrames::All || !fc.is_cpp(f))
            .map(|f| {
                let fv = snap.frame(f);
                (snap.str(fv.name), snap.str(fv.filename), fv.line)
            })
            .peekable();
        let no_python = (frames == FlameFrames::PythonOnly && path.peek().is_none()).then_some((
            "(no Python frames)",
            "",
            0,
        ));
        for (name, file, line) in path.chain(no_python) {
            let i = match node
                .children
                .iter()
                .position(|c| c.name == name && c.filename == file && c.line == line)
            {
                Some(i) => i,
                None => {
                    node.children.push(FlameNode {
                        name: name.to_string(),
                        filename: file.to_string(),
                        line,
                        bytes: 0,
                        count: 0,
                        held: 0.0,
                        children: Vec::new(),
                    });
                    node.children.len() - 1
                }
            };
            node = &mut node.children[i];
            node.bytes += w.bytes;
            node.count += w.count;
            node.held += w.held;
        }
    }
    sort_flame(&mut root, key);
    let mut sites: Vec<CallSite> = sites.into_values().collect();
    sites.sort_by(|a, b| {
        key(b.bytes, b.held)
            .total_cmp(&key(a.bytes, a.held))
            .then_with(|| {
                a.site
                    .as_ref()
                    .map(|s| (&s.filename, s.line))
                    .cmp(&b.site.as_ref().map(|s| (&s.filename, s.line)))
            })
    });
    sites.truncate(max_sites);
    StackReport {
        device: 0,
        position: 0,
        total_bytes: root.bytes,
        count: root.count,
        sites,
        frames,
        weight,
        held: None,
        flame: root,
    }
}

fn sort_flame(node: &mut FlameNode, key: impl Fn(u64, f64) -> f64) {
    let mut stack = vec![node];
    while let Some(n) = stack.pop() {
        n.children
            .sort_by(|a, b| key(b.bytes, b.held).total_cmp(&key(a.bytes, a.held)));
        stack.extend(n.children.iter_mut());
    }
}
