//! Memory by call stack at one moment (by default the peak): which code holds the bytes, grouped
//! by call site (the first user frame) and as a flame tree from the outermost frame inwards.

use rustc_hash::FxHashMap;
use serde::Serialize;

use super::index::Index;
use crate::frames::FrameView;
use crate::model::{FrameId, Snapshot, StackId};

#[derive(Clone, Debug, Serialize)]
pub struct CallSite {
    /// The first user frame (or first non-noise frame) of the stacks grouped here.
    pub site: Option<FrameView>,
    pub bytes: u64,
    pub count: u32,
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
    pub flame: FlameNode,
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
        let al = &d.allocations[a as usize];
        let e = by.entry(al.stack).or_default();
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
    let fc = &index.frames;

    let mut sites: FxHashMap<Option<FrameId>, CallSite> = FxHashMap::default();
    let mut largest: FxHashMap<Option<FrameId>, u64> = FxHashMap::default();
    let mut root = FlameNode {
        name: "all".into(),
        filename: String::new(),
        line: 0,
        bytes: 0,
        count: 0,
        children: Vec::new(),
    };
    // Read in Python: a site is a Python line or a note saying there was none.
    let python = frames == FlameFrames::PythonOnly;
    for &(stack, bytes, count) in &per_stack {
        let label = fc.label_in(snap, stack, python);
        let site = sites.entry(label).or_insert_with(|| CallSite {
            site: label.map(|f| fc.site_view_in(snap, f, python)),
            bytes: 0,
            count: 0,
            frames: Vec::new(),
            stacks: 0,
        });
        site.bytes += bytes;
        site.count += count;
        site.stacks += 1;
        let best = largest.entry(label).or_insert(0);
        if bytes > *best {
            *best = bytes;
            site.frames = fc.display(snap, stack);
        }
        // Flame: outermost first, noise hidden.
        let mut node = &mut root;
        node.bytes += bytes;
        node.count += count;
        let mut path = fc
            .filtered(snap, stack)
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
                        children: Vec::new(),
                    });
                    node.children.len() - 1
                }
            };
            node = &mut node.children[i];
            node.bytes += bytes;
            node.count += count;
        }
    }
    sort_flame(&mut root);
    let mut sites: Vec<CallSite> = sites.into_values().collect();
    sites.sort_by(|a, b| {
        b.bytes.cmp(&a.bytes).then_with(|| {
            a.site
                .as_ref()
                .map(|s| (&s.filename, s.line))
                .cmp(&b.site.as_ref().map(|s| (&s.filename, s.line)))
        })
    });
    sites.truncate(max_sites);
    Some(StackReport {
        device,
        position: p,
        total_bytes: root.bytes,
        count: root.count,
        sites,
        frames,
        flame: root,
    })
}

fn sort_flame(node: &mut FlameNode) {
    let mut stack = vec![node];
    while let Some(n) = stack.pop() {
        n.children.sort_by_key(|c| std::cmp::Reverse(c.bytes));
        stack.extend(n.children.iter_mut());
    }
}
