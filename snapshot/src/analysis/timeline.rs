//! Memory over time: live and reserved bytes reduced to N buckets for any window, on the event
//! axis or the `time_us` axis, and the individual allocations that overlap a window.
//!
//! A million-event trace is never sent whole: each bucket carries the min and max of both series
//! in its range, so a line drawn through them shows every spike a pixel can show.

use serde::Serialize;

use super::index::{DeviceIndex, Index, NONE};
use crate::frames::FrameView;
use crate::model::{Snapshot, StackId, TraceTable};

/// Which x axis a window is given in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Axis {
    Event,
    Time,
}

#[derive(Clone, Debug, Serialize)]
pub struct Bucket {
    /// First and last position covered (positions: after `p` events).
    pub first: u32,
    pub last: u32,
    pub time_us: i64,
    pub live_min: u64,
    pub live_max: u64,
    pub reserved_min: u64,
    pub reserved_max: u64,
    /// Allocations made in the bucket (alloc events between its first and last position), and
    /// their requested bytes: every one, however short-lived (the density view draws them where
    /// bands are narrower than a pixel).
    pub allocs: u32,
    pub alloc_bytes: u64,
}

impl Bucket {
    /// The lowest and highest live and reserved bytes at positions `lo..=hi`, starting at
    /// `time_us`: what both the event-axis and the time-axis buckets hold.
    /// `made_by`: the events whose allocations the bucket counts (buckets side by side split
    /// the trace's events between them, each counted once).
    fn over(
        t: &TraceTable,
        d: &DeviceIndex,
        (lo, hi): (u32, u32),
        made_by: (u32, u32),
        time_us: i64,
    ) -> Bucket {
        let (lmin, lmax, rmin, rmax) = d.extremes(lo, hi);
        let (allocs, alloc_bytes) = d.allocated_between(t, made_by.0, made_by.1);
        Bucket {
            first: lo,
            last: hi,
            time_us,
            live_min: lmin,
            live_max: lmax,
            reserved_min: rmin,
            reserved_max: rmax,
            allocs,
            alloc_bytes,
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Timeline {
    pub device: i32,
    pub events: u32,
    pub first_position: u32,
    pub last_position: u32,
    /// The window's ends on its axis (µs on the time axis, positions on the event axis): what
    /// the x axis spans, so a pixel maps to the same moment for the page and the server.
    pub x_from: f64,
    pub x_to: f64,
    pub buckets: Vec<Bucket>,
    pub peak_position: u32,
    pub peak_live_bytes: u64,
}

/// Position range `[first, last]` for a window given on `axis` (inclusive, clamped).
pub fn window_positions(
    snap: &Snapshot,
    d: &DeviceIndex,
    axis: Axis,
    from: f64,
    to: f64,
) -> (u32, u32) {
    let (lo, hi) = (from.min(to), from.max(to));
    match axis {
        Axis::Event => {
            let clamp = |x: f64| x.round().clamp(0.0, d.len as f64) as u32;
            (clamp(lo), clamp(hi))
        }
        Axis::Time => {
            let (times, rows) = (&snap.trace.time_us, d.rows());
            let first = times.partition_point(rows.clone(), |t| (t as f64) < lo) as u32;
            let last = times.partition_point(rows, |t| (t as f64) <= hi) as u32;
            (first, last.max(first))
        }
    }
}

/// Time of position `p` (the time of its last event; the first event's time at 0).
pub fn time_at(snap: &Snapshot, d: &DeviceIndex, p: u32) -> i64 {
    if d.len == 0 {
        return 0;
    }
    let e = p.saturating_sub(1).min(d.len - 1);
    snap.trace.time_us.get(d.row(e))
}

/// Live and reserved bytes over positions `first..=last`, reduced to at most `buckets` buckets.
pub fn timeline(
    snap: &Snapshot,
    index: &Index,
    device: i32,
    first: u32,
    last: u32,
    buckets: usize,
) -> Option<Timeline> {
    let d = index.device(device)?;
    let last = last.min(d.len);
    let first = first.min(last);
    let span = (last - first + 1) as usize;
    let n = buckets.clamp(1, 100_000).min(span);
    let mut out = Vec::with_capacity(n);
    for b in 0..n {
        let lo = first + (span * b / n) as u32;
        let hi = first + (span * (b + 1) / n) as u32 - 1;
        // Positions lo..=hi; the next bucket starts at hi + 1, so its events are lo..=hi.
        out.push(Bucket::over(
            &snap.trace,
            d,
            (lo, hi),
            (lo, hi + 1),
            time_at(snap, d, lo),
        ));
    }
    Some(Timeline {
        device,
        events: d.len,
        first_position: first,
        last_position: last,
        x_from: first as f64,
        x_to: last as f64,
        buckets: out,
        peak_position: d.peak_position,
        peak_live_bytes: d.peak_live_bytes,
    })
}

#[derive(Clone, Debug, Serialize)]
pub struct AllocationView {
    pub id: u32,
    pub addr: u64,
    pub size: u64,
    pub stream: u64,
    /// Event index of the alloc, or null if made before the trace started.
    pub start: Option<u32>,
    /// Event index of `free_completed`, or null if alive at the snapshot.
    pub end: Option<u32>,
    pub start_time_us: Option<i64>,
    pub end_time_us: Option<i64>,
    /// The allocation's stack; resolve unique ids with [`stack_frames`] (thousands of allocations
    /// share a few hundred stacks, so frames are sent once per stack, not per allocation).
    pub stack: StackId,
}

/// Live and reserved bytes over the time window `[t0_us, t1_us]`, in `buckets` buckets of equal
/// duration. A bucket holds the state at its start and after every event inside it, so a value
/// holds until the next event: an idle stretch is flat, not a ramp between two distant events,
/// and a bucket with no event carries the value before it. Bucket `k` starts at
/// `t0 + (t1 - t0) * k / buckets`; its positions run from the events before its start to the
/// events before its end (neighbours share the position at their boundary).
pub fn timeline_by_time(
    snap: &Snapshot,
    index: &Index,
    device: i32,
    t0_us: i64,
    t1_us: i64,
    buckets: usize,
) -> Option<Timeline> {
    let d = index.device(device)?;
    let t1_us = t1_us.max(t0_us + 1);
    let (times, rows) = (&snap.trace.time_us, d.rows());
    // Events before `t` (the last bucket also takes the events at exactly its end).
    let before = |t: i64| times.partition_point(rows.clone(), |x| x < t) as u32;
    let n = buckets.clamp(1, 100_000);
    let span = (t1_us - t0_us) as i128;
    let edge = |k: usize| t0_us + (span * k as i128 / n as i128) as i64;
    let mut out = Vec::with_capacity(n);
    let mut lo = before(t0_us);
    let first = lo;
    for k in 0..n {
        let hi = if k + 1 == n {
            times.partition_point(rows.clone(), |x| x <= t1_us) as u32
        } else {
            before(edge(k + 1))
        };
        // Events lo..hi are those timed inside the bucket.
        out.push(Bucket::over(&snap.trace, d, (lo, hi), (lo, hi), edge(k)));
        lo = hi;
    }
    Some(Timeline {
        device,
        events: d.len,
        first_position: first,
        last_position: lo,
        x_from: t0_us as f64,
        x_to: t1_us as f64,
        buckets: out,
        peak_position: d.peak_position,
        peak_live_bytes: d.peak_live_bytes,
    })
}

/// A stack for display: user frames first, noise hidden.
pub fn stack_frames(snap: &Snapshot, index: &Index, stack: StackId) -> Vec<FrameView> {
    index.frames.display(snap, stack)
}

/// Allocations alive at some position in `first..=last`, largest first, at most `limit`.
pub fn allocations_in_window(
    snap: &Snapshot,
    index: &Index,
    device: i32,
    first: u32,
    last: u32,
    limit: usize,
) -> Vec<AllocationView> {
    let Some(d) = index.device(device) else {
        return Vec::new();
    };
    largest_overlapping(&snap.trace, d, first, last, limit)
        .into_iter()
        .map(|i| allocation_view(snap, d, i))
        .collect()
}

/// Ids of the `limit` largest allocations alive at some position in `first..=last`, largest
/// first (ties by id). A wide window walks the largest allocations in order and stops at `limit`
/// (every allocation outside that list is smaller than all in it); a narrow one (under an eighth
/// of the trace) takes those alive at `first` (from a checkpoint) and those made inside it.
/// Only a wide window that overlaps too few of the largest scans every allocation, which cost
/// 60 ms a query at 12M events.
pub fn largest_overlapping(
    t: &TraceTable,
    d: &DeviceIndex,
    first: u32,
    last: u32,
    limit: usize,
) -> Vec<u32> {
    largest_overlapping_given(t, d, d.top_by_size(t), first, last, limit)
}

/// [`largest_overlapping`] with the largest allocations' ids given (`top`, a prefix of all ids
/// by size): tests pass a short one to reach the fallback scan.
#[doc(hidden)]
pub fn largest_overlapping_given(
    t: &TraceTable,
    d: &DeviceIndex,
    top: &[u32],
    first: u32,
    last: u32,
    limit: usize,
) -> Vec<u32> {
    let overlaps = |a: &crate::analysis::index::Allocation| {
        let starts_before_end = a.start == NONE || a.start < last;
        let ends_after_start = a.end == NONE || a.end >= first;
        starts_before_end && ends_after_start
    };
    let mut hits: Vec<u32> = if (last.saturating_sub(first) as u64) * 8 >= d.len as u64 {
        let hits: Vec<u32> = top
            .iter()
            .copied()
            .filter(|&i| overlaps(&d.allocations[i as usize]))
            .take(limit)
            .collect();
        if hits.len() == limit || top.len() == d.allocations.len() {
            return hits;
        }
        (0..d.allocations.len() as u32)
            .filter(|&i| overlaps(&d.allocations[i as usize]))
            .collect()
    } else {
        let mut hits = d.alive_at(first);
        let mut events = d.event_allocation.reader();
        for e in first..last.min(d.len) {
            let a = events.get(e);
            if a != NONE && d.allocations[a as usize].start == e {
                hits.push(a);
            }
        }
        hits.retain(|&i| overlaps(&d.allocations[i as usize]));
        hits
    };
    let key = |i: &u32| (std::cmp::Reverse(d.size_of(t, *i)), *i);
    if hits.len() > limit {
        hits.select_nth_unstable_by_key(limit, key);
        hits.truncate(limit);
    }
    hits.sort_unstable_by_key(key);
    hits
}

pub fn allocation_view(snap: &Snapshot, d: &DeviceIndex, id: u32) -> AllocationView {
    let a = &d.allocations[id as usize];
    let opt = |e: u32| (e != NONE).then_some(e);
    AllocationView {
        id,
        addr: d.addr_of(&snap.trace, id),
        size: d.size_of(&snap.trace, id),
        stream: d.stream_of(&snap.trace, id),
        start: opt(a.start),
        end: opt(a.end),
        start_time_us: opt(a.start).map(|e| snap.trace.time_us.get(d.row(e))),
        end_time_us: opt(a.end).map(|e| snap.trace.time_us.get(d.row(e))),
        stack: d.stack_of(&snap.trace, id),
    }
}

/// An annotated range (`external_annotations` START/END pairs of one name). Ranges of the same
/// name closer than one bucket are merged (`count` says how many), so a window never carries more
/// ranges per name than it has buckets: a 1M-entry trace has thousands of `Optimizer.step`s.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnnotationRange {
    pub name: String,
    pub start_us: i64,
    pub end_us: i64,
    pub count: u32,
}

/// Pairs START/END marks by name (innermost first) within `[t0, t1]` and merges ranges of one
/// name whose gap is below `merge_us`. A range open at either edge is cut at the window.
pub fn annotation_ranges(
    marks: impl Iterator<Item = (String, bool, i64)>,
    t0: i64,
    t1: i64,
    merge_us: i64,
) -> Vec<AnnotationRange> {
    let mut open: Vec<(String, i64)> = Vec::new();
    let mut ranges: Vec<AnnotationRange> = Vec::new();
    let mut push = |name: String, start_us: i64, end_us: i64| {
        if let Some(last) = ranges
            .iter_mut()
            .rev()
            .find(|r| r.name == name)
            .filter(|r| start_us - r.end_us < merge_us)
        {
            last.end_us = last.end_us.max(end_us);
            last.count += 1;
        } else {
            ranges.push(AnnotationRange {
                name,
                start_us,
                end_us,
                count: 1,
            });
        }
    };
    for (name, start, time_us) in marks {
        if start {
            open.push((name, time_us));
        } else if let Some(i) = open.iter().rposition(|(n, _)| *n == name) {
            let (name, from) = open.remove(i);
            push(name, from.max(t0), time_us.min(t1));
        } else {
            push(name, t0, time_us.min(t1)); // began before the window
        }
    }
    for (name, from) in open {
        push(name, from.max(t0), t1); // still open at the window's end
    }
    ranges
}

/// An `oom` entry's place on the timeline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OomMarker {
    pub position: u32,
    pub time_us: i64,
    pub requested_bytes: u64,
}

/// What the timeline view shows of one window of a device's trace.
#[derive(Clone, Debug)]
pub struct TimelineWindow {
    pub device: i32,
    pub axis: Axis,
    pub timeline: Timeline,
    pub allocations: Vec<AllocationView>,
    /// Frames of every stack the allocations refer to (user frames first, noise hidden).
    pub stacks: std::collections::BTreeMap<StackId, Vec<FrameView>>,
    /// The frame each of those stacks is labelled by (first user frame, …).
    pub sites: std::collections::BTreeMap<StackId, Option<FrameView>>,
    pub annotations: Vec<AnnotationRange>,
    pub ooms: Vec<OomMarker>,
    pub first_time_us: i64,
    pub last_time_us: i64,
    /// When no window was asked for and a long idle stretch would squeeze the activity into a
    /// sliver of the chart: the window chosen instead, and what it leaves out.
    pub fitted: Option<Fitted>,
}

// (Defined beside the index, which keeps each device's once computed.)
pub use super::index::Fitted;

/// An idle stretch longer than this share of what is shown gets folded out of the first view.
const IDLE_SHARE: f64 = 0.5;
/// Shorter traces are shown whole: a handful of events is read at any scale.
const MIN_EVENTS_TO_FIT: u32 = 50;
/// Gaps shorter than this are not idleness a person would want folded.
const MIN_IDLE_US: i64 = 100_000;

/// Derives now what the dashboard's first timeline of each device would (the largest
/// allocations, the active span), so that a stored index carries them and a server that reopens
/// the snapshot draws its first timeline without a pass over the trace.
pub fn derive_views(snap: &Snapshot, index: &Index) {
    for d in &index.devices {
        d.top_by_size(&snap.trace);
        d.active_span_with(|| active_span(snap, d));
        // The allocated peak and the block sizes the state views draw (one walk), stored too.
        super::peaks::block_sizes(snap, d);
    }
}

/// Where memory changes on `d`'s time axis: the trace without its long idle stretches (model
/// build, data loading, a final wait before the snapshot), cutting at most three times at a gap
/// with no event that is longer than half of what remains and keeping the side that holds the
/// device's peaks (requested, allocated, reserved), else the busier side; never a cut with peaks
/// on both sides. `None` when nothing needs cutting.
pub fn active_span(snap: &Snapshot, d: &DeviceIndex) -> Option<Fitted> {
    if d.len < MIN_EVENTS_TO_FIT {
        return None;
    }
    // The events at which each peak was reached (position p is after event p - 1).
    let p = super::peaks::peaks(snap, d);
    let peak_events: Vec<usize> = [p.requested, p.allocated, p.reserved]
        .iter()
        .map(|k| k.position.saturating_sub(1) as usize)
        .collect();
    let (n, first) = (d.len as usize, d.first_row as usize);
    let time = |e: usize| snap.trace.time_us.get(first + e);
    if time(0) == 0 {
        return None;
    }
    let (mut lo, mut hi) = (0usize, n); // events kept: lo..hi
    let (mut idle_before, mut idle_after) = (0i64, 0i64);
    for _ in 0..3 {
        let span = time(hi - 1) - time(lo);
        if span <= 0 || hi - lo < 2 {
            break;
        }
        let (gap, at) = (lo + 1..hi)
            .map(|i| (time(i) - time(i - 1), i))
            .max_by_key(|&(g, i)| (g, std::cmp::Reverse(i)))?;
        if (gap as f64) <= span as f64 * IDLE_SHARE || gap < MIN_IDLE_US {
            break;
        }
        let peaks_before = peak_events.iter().any(|&e| e < at);
        let peaks_after = peak_events.iter().any(|&e| e >= at);
        let keep_after = match (peaks_before, peaks_after) {
            (true, true) => break,
            (false, true) => true,
            (true, false) => false,
            (false, false) => hi - at >= at - lo,
        };
        if keep_after {
            lo = at;
            idle_before += gap;
        } else {
            hi = at;
            idle_after += gap;
        }
    }
    if lo == 0 && hi == n {
        return None;
    }
    let (a, b) = (time(lo), time(hi - 1));
    let pad = ((b - a) / 30).max(1_000);
    Some(Fitted {
        from_us: (a - pad).max(time(0)),
        to_us: (b + pad).min(time(n - 1)),
        events_before: lo as u32,
        events_after: (n - hi) as u32,
        idle_before_us: idle_before,
        idle_after_us: idle_after,
    })
}

/// A window of `d`'s trace for the timeline: `from..to` on `axis` (default: time when the trace
/// has times; `None`: the whole trace, or on the time axis its active span when long idle
/// stretches would squeeze the activity, see [`active_span`]), reduced to `buckets`, with the `limit` largest allocations
/// overlapping it, their stacks once each, annotation ranges (time axis only: annotations carry
/// times) and OOM markers.
pub fn window(
    snap: &Snapshot,
    index: &Index,
    d: &DeviceIndex,
    axis: Option<Axis>,
    range: Option<(f64, f64)>,
    buckets: usize,
    limit: usize,
) -> Option<TimelineWindow> {
    let device = d.device;
    let t = &snap.trace;
    let has_time = d.len > 0 && t.time_us.get(d.row(0)) != 0;
    let axis = axis.unwrap_or(if has_time { Axis::Time } else { Axis::Event });
    // The first view (no window asked for) shows where memory changes, saying what it folded.
    if range.is_none()
        && axis == Axis::Time
        && let Some(f) = d.active_span_with(|| active_span(snap, d))
    {
        let range = Some((f.from_us as f64, f.to_us as f64));
        return window(snap, index, d, Some(axis), range, buckets, limit).map(|w| TimelineWindow {
            fitted: Some(f),
            ..w
        });
    }
    let (first, last) = match range {
        Some((a, b)) => window_positions(snap, d, axis, a, b),
        None => (0, d.len),
    };
    let buckets = buckets.clamp(1, 10_000);
    let tl = if axis == Axis::Time && has_time {
        let (t0, t1) = match range {
            Some((a, b)) => (a.min(b).floor() as i64, a.max(b).ceil() as i64),
            None => (time_at(snap, d, 0), time_at(snap, d, d.len)),
        };
        timeline_by_time(snap, index, device, t0, t1, buckets)?
    } else {
        timeline(snap, index, device, first, last, buckets)?
    };
    let allocations = allocations_in_window(snap, index, device, first, last, limit);
    let (mut stacks, mut sites) = (
        std::collections::BTreeMap::new(),
        std::collections::BTreeMap::new(),
    );
    for a in &allocations {
        stacks
            .entry(a.stack)
            .or_insert_with(|| index.frames.display(snap, a.stack));
        sites
            .entry(a.stack)
            .or_insert_with(|| index.frames.site(snap, a.stack));
    }
    let time = |p: u32| time_at(snap, d, p);
    // Annotations are cut at the window as drawn: the requested times on the time axis.
    let (t0, t1) = if axis == Axis::Time && has_time {
        (tl.x_from as i64, tl.x_to as i64)
    } else {
        (time(first), time(last))
    };
    let annotations = if has_time {
        annotation_ranges(
            snap.annotations
                .iter()
                .filter(|a| a.device == device && a.time_us >= t0 && a.time_us <= t1)
                .map(|a| (snap.str(a.name).to_string(), a.start, a.time_us)),
            t0,
            t1,
            ((t1 - t0) / buckets as i64).max(1),
        )
    } else {
        Vec::new()
    };
    let ooms = (first..last.min(d.len))
        .filter(|&e| t.action[d.row(e)] == crate::model::Action::Oom)
        .map(|e| OomMarker {
            position: e,
            time_us: t.time_us.get(d.row(e)),
            requested_bytes: t.size.get(d.row(e)),
        })
        .collect();
    Some(TimelineWindow {
        device,
        axis,
        timeline: tl,
        allocations,
        stacks,
        sites,
        annotations,
        ooms,
        fitted: None,
        first_time_us: time(0),
        last_time_us: time(d.len),
    })
}

#[cfg(test)]
mod annotation_tests {
    use super::*;

    fn marks(v: &[(&str, bool, i64)]) -> impl Iterator<Item = (String, bool, i64)> {
        v.iter()
            .map(|(n, s, t)| (n.to_string(), *s, *t))
            .collect::<Vec<_>>()
            .into_iter()
    }

    #[test]
    fn pairs_nest_merge_below_a_bucket_and_cut_at_the_window() {
        let m = marks(&[
            ("step", true, 10),
            ("fwd", true, 11),
            ("fwd", false, 20),
            ("step", false, 30),
            ("step", true, 32),
            ("step", false, 40), // 2 µs after the last: merged
            ("step", true, 100),
            ("step", false, 110), // far: its own range
            ("bwd", false, 5),
            ("opt", true, 150), // began before / still open
        ]);
        let r = annotation_ranges(m, 0, 200, 5);
        let got: Vec<(&str, i64, i64, u32)> = r
            .iter()
            .map(|a| (a.name.as_str(), a.start_us, a.end_us, a.count))
            .collect();
        assert_eq!(
            got,
            vec![
                ("fwd", 11, 20, 1),
                ("step", 10, 40, 2),
                ("step", 100, 110, 1),
                ("bwd", 0, 5, 1),
                ("opt", 150, 200, 1)
            ]
        );
    }
}

/// One trace entry as people read it: what happened, to which address and size, on which stream,
/// from which line.
#[derive(Clone, Debug, Serialize)]
pub struct TraceEvent {
    /// 1-based: the allocator's state "after event `position`" includes this entry.
    pub position: u32,
    pub action: crate::model::Action,
    /// The name PyTorch gave an action memscope does not know (`Action::Other`).
    pub other_action: Option<String>,
    pub address: u64,
    pub size_bytes: u64,
    pub stream: u64,
    pub time_us: i64,
    /// The first user frame of its stack (or the best other frame).
    pub site: Option<FrameView>,
}

/// The entries around `position` on `device`: `before` up to and including it, `after` past it.
pub fn events_around(
    snap: &Snapshot,
    index: &Index,
    device: i32,
    position: u32,
    before: u32,
    after: u32,
) -> Vec<TraceEvent> {
    let Some(d) = index.device(device) else {
        return Vec::new();
    };
    let p = position.min(d.len);
    let first = p.saturating_sub(before).max(1);
    let last = p.saturating_add(after).min(d.len);
    (first..=last)
        .filter(|_| d.len > 0)
        .map(|pos| {
            let r = d.row(pos - 1);
            let t = &snap.trace;
            let action = t.action[r];
            TraceEvent {
                position: pos,
                action,
                other_action: (action == crate::model::Action::Other)
                    .then(|| TraceTable::sparse(&t.other_action, r as u32))
                    .flatten()
                    .map(|s| snap.str(s).to_string()),
                address: t.addr.get(r),
                size_bytes: t.size.get(r),
                stream: t.stream(r),
                time_us: t.time_us.get(r),
                site: index.frames.site(snap, t.stack.get(r)),
            }
        })
        .collect()
}
