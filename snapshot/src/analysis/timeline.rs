//! Memory over time: live and reserved bytes reduced to N buckets for any window, on the event
//! axis or the `time_us` axis, and the individual allocations that overlap a window.
//!
//! A million-event trace is never sent whole: each bucket carries the min and max of both series
//! in its range, so a line drawn through them shows every spike a pixel can show.

use serde::Serialize;

use super::index::{DeviceIndex, Index, NONE};
use crate::frames::FrameView;
use crate::model::{Snapshot, StackId};

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
}

#[derive(Clone, Debug, Serialize)]
pub struct Timeline {
    pub device: i32,
    pub events: u32,
    pub first_position: u32,
    pub last_position: u32,
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
            let times = &snap.trace.time_us[d.first_row as usize..(d.first_row + d.len) as usize];
            let first = times.partition_point(|&t| (t as f64) < lo) as u32;
            let last = times.partition_point(|&t| (t as f64) <= hi) as u32;
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
    snap.trace.time_us[d.row(e)]
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
        let (mut lmin, mut lmax, mut rmin, mut rmax) = (u64::MAX, 0, u64::MAX, 0);
        for p in lo..=hi {
            let (l, r) = (d.live_at(p), d.reserved_at(p));
            lmin = lmin.min(l);
            lmax = lmax.max(l);
            rmin = rmin.min(r);
            rmax = rmax.max(r);
        }
        out.push(Bucket {
            first: lo,
            last: hi,
            time_us: time_at(snap, d, lo),
            live_min: lmin,
            live_max: lmax,
            reserved_min: rmin,
            reserved_max: rmax,
        });
    }
    Some(Timeline {
        device,
        events: d.len,
        first_position: first,
        last_position: last,
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
    let mut hits: Vec<u32> = d
        .allocations
        .iter()
        .enumerate()
        .filter(|(_, a)| {
            let starts_before_end = a.start == NONE || a.start < last;
            let ends_after_start = a.end == NONE || a.end >= first;
            starts_before_end && ends_after_start
        })
        .map(|(i, _)| i as u32)
        .collect();
    let key = |i: &u32| std::cmp::Reverse(d.allocations[*i as usize].size);
    if hits.len() > limit {
        hits.select_nth_unstable_by_key(limit, key);
        hits.truncate(limit);
    }
    hits.sort_by_key(key);
    hits.into_iter()
        .map(|i| allocation_view(snap, d, i))
        .collect()
}

pub fn allocation_view(snap: &Snapshot, d: &DeviceIndex, id: u32) -> AllocationView {
    let a = &d.allocations[id as usize];
    let opt = |e: u32| (e != NONE).then_some(e);
    AllocationView {
        id,
        addr: a.addr,
        size: a.size,
        stream: a.stream,
        start: opt(a.start),
        end: opt(a.end),
        start_time_us: opt(a.start).map(|e| snap.trace.time_us[d.row(e)]),
        end_time_us: opt(a.end).map(|e| snap.trace.time_us[d.row(e)]),
        stack: a.stack,
    }
}
