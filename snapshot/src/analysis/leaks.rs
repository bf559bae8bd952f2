//! Leak suspects: call stacks whose allocations are still alive at the end of the trace and were
//! made again and again across it.
//!
//! A leak grows: a tensor appended to a list every step leaves one survivor per step, spread over
//! the whole trace. A one-time burst (model weights, optimizer state made at the first step, the
//! last step's activations) leaves its survivors in one short stretch. So a stack is a suspect
//! when its survivors were made in at least [`MIN_SPREAD_TENTHS`] of the ten equal slices of the
//! trace, at least [`MIN_COUNT`] times; suspects are ranked by surviving bytes × spread.

use rustc_hash::FxHashMap;
use serde::Serialize;

use super::index::{DeviceIndex, Index, NONE};
use crate::frames::{FrameView, full_stack, view};
use crate::model::{Snapshot, StackId};

pub const MIN_COUNT: u32 = 3;
pub const MIN_SPREAD_TENTHS: u32 = 4;
/// Points in each suspect's evidence series.
pub const SERIES_POINTS: usize = 64;

#[derive(Clone, Debug, Serialize)]
pub struct SeriesPoint {
    pub position: u32,
    pub time_us: i64,
    pub live_bytes: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct LeakSuspect {
    pub device: i32,
    /// Bytes (as requested) still alive at the end, made by this stack during the trace.
    pub bytes: u64,
    /// Allocations still alive at the end.
    pub count: u32,
    /// Allocations made by this stack during the whole trace (alive or freed).
    pub total_allocations: u32,
    /// Fraction of the trace's tenths in which survivors were made (0.1–1.0).
    pub spread: f64,
    pub score: f64,
    pub first_position: u32,
    pub last_position: u32,
    /// The first user frame: where to look.
    pub site: Option<FrameView>,
    /// The stack innermost first, noise removed (C++ frames kept).
    pub frames: Vec<FrameView>,
    /// Live bytes of this stack over the trace.
    pub series: Vec<SeriesPoint>,
}

pub fn leak_suspects(snap: &Snapshot, index: &Index, max: usize) -> Vec<LeakSuspect> {
    let mut out: Vec<LeakSuspect> = Vec::new();
    for d in &index.devices {
        out.extend(device_suspects(snap, index, d));
    }
    out.sort_by(|a, b| b.score.total_cmp(&a.score).then(b.bytes.cmp(&a.bytes)));
    out.truncate(max);
    out
}

fn device_suspects(snap: &Snapshot, index: &Index, d: &DeviceIndex) -> Vec<LeakSuspect> {
    if d.len == 0 {
        return Vec::new();
    }
    struct Acc {
        bytes: u64,
        count: u32,
        total: u32,
        tenths: u16,
        first: u32,
        last: u32,
    }
    let mut by: FxHashMap<StackId, Acc> = FxHashMap::default();
    for a in &d.allocations {
        if a.start == NONE || a.stack == StackId::EMPTY {
            continue;
        }
        let acc = by.entry(a.stack).or_insert(Acc {
            bytes: 0,
            count: 0,
            total: 0,
            tenths: 0,
            first: u32::MAX,
            last: 0,
        });
        acc.total += 1;
        if a.end == NONE {
            acc.bytes += a.size;
            acc.count += 1;
            acc.tenths |= 1 << ((a.start as u64 * 10 / d.len as u64).min(9));
            acc.first = acc.first.min(a.start);
            acc.last = acc.last.max(a.start);
        }
    }
    let mut out = Vec::new();
    for (stack, acc) in by {
        let tenths = acc.tenths.count_ones();
        if acc.count < MIN_COUNT || tenths < MIN_SPREAD_TENTHS {
            continue;
        }
        let spread = tenths as f64 / 10.0;
        let fc = &index.frames;
        out.push(LeakSuspect {
            device: d.device,
            bytes: acc.bytes,
            count: acc.count,
            total_allocations: acc.total,
            spread,
            score: acc.bytes as f64 * spread,
            first_position: acc.first + 1,
            last_position: acc.last + 1,
            site: fc.label(snap, stack).map(|f| view(snap, f)),
            frames: full_stack(snap, stack)
                .into_iter()
                .filter(|f| !crate::frames::is_noise(&f.filename, &f.name))
                .collect(),
            series: stack_series(snap, d, stack, SERIES_POINTS),
        });
    }
    out
}

/// Live bytes of one stack's allocations at `points` evenly spaced positions.
pub fn stack_series(
    snap: &Snapshot,
    d: &DeviceIndex,
    stack: StackId,
    points: usize,
) -> Vec<SeriesPoint> {
    let n = d.len.max(1);
    let points = points.max(2);
    let pos = |k: usize| (n as u64 * k as u64 / (points - 1) as u64) as u32;
    let mut delta = vec![0i128; points + 1];
    for a in d.allocations.iter().filter(|a| a.stack == stack) {
        // Alive at position p iff start < p <= end: first sample k with pos(k) > start.
        let from = if a.start == NONE {
            0
        } else {
            (0..points).find(|&k| pos(k) > a.start).unwrap_or(points)
        };
        let to = if a.end == NONE {
            points
        } else {
            (0..points).find(|&k| pos(k) > a.end).unwrap_or(points)
        };
        if from < to {
            delta[from] += a.size as i128;
            delta[to] -= a.size as i128;
        }
    }
    let mut live = 0i128;
    (0..points)
        .map(|k| {
            live += delta[k];
            let p = pos(k);
            SeriesPoint {
                position: p,
                time_us: super::timeline::time_at(snap, d, p),
                live_bytes: live.max(0) as u64,
            }
        })
        .collect()
}
