//! Leak suspects: the lines of user code whose allocations are still alive at the end of the
//! trace and were made again and again across it.
//!
//! A leak grows: a tensor appended to a list every step leaves one survivor per step, spread over
//! the whole trace. A one-time burst (model weights, optimizer state made at the first step, the
//! last step's activations) leaves its survivors in one short stretch. So a call site is a suspect
//! when its survivors were made in at least [`MIN_SPREAD_TENTHS`] of the ten equal slices of the
//! trace, at least [`MIN_COUNT`] times; suspects are ranked by surviving bytes × spread.
//!
//! One pass of a program is not a leak: a forward pass keeps every layer's activations for
//! backward, a backward leaves every parameter's gradient, and a trace of one pass dumped while
//! they are alive has them made "throughout" it, by the same lines again and again (one per
//! layer). So survivors made inside a module's `forward` (`nn.Module._call_impl` on the stack) or
//! on the autograd engine's thread count towards a suspect only when they were made in at least
//! [`MIN_WAVES`] waves of the device's memory (it rose and fell back by a quarter of its range
//! between them: the program's steps); plain code that keeps what it makes (a list appended to
//! in a loop) is a suspect in one pass too.
//!
//! Allocations are grouped by call site, the first user frame of their stack: one planted line
//! is one suspect, however many C++ operators (`addmm`, `gelu`, …) allocated below it; a suspect
//! line reached through another suspect line joins the outer one (the line that keeps a graph
//! alive, not the `forward` that allocated its activations). Each
//! suspect says in words what grows and how fast: per step when the trace has step annotations
//! (`ProfilerStep#N` and the like), per event and per second otherwise.

use rustc_hash::FxHashMap;
use serde::Serialize;

use super::index::{DeviceIndex, Index, NONE};
use crate::frames::{FrameView, view};
use crate::model::{FrameId, Snapshot, StackId, TraceTable};
use crate::units::human_bytes;

pub const MIN_COUNT: u32 = 3;
pub const MIN_SPREAD_TENTHS: u32 = 4;
/// Points in each suspect's evidence series.
pub const SERIES_POINTS: usize = 64;
/// Step annotations of one name family needed before rates are given per step.
const MIN_STEPS: usize = 3;
/// Waves of memory a module's or backward's survivors must span to be a suspect.
pub const MIN_WAVES: u32 = 3;
/// A wave rises and falls back by this share of the device's live range.
const WAVE_SHARE: f64 = 0.25;

#[derive(Clone, Debug, Serialize)]
pub struct SeriesPoint {
    pub position: u32,
    pub time_us: i64,
    pub live_bytes: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct LeakSuspect {
    pub device: i32,
    /// Bytes (as requested) still alive at the end, made at this call site during the trace.
    pub bytes: u64,
    /// Allocations still alive at the end.
    pub count: u32,
    /// Allocations made at this call site during the whole trace (alive or freed).
    pub total_allocations: u32,
    /// Fraction of the trace's tenths in which survivors were made (0.1–1.0).
    pub spread: f64,
    pub score: f64,
    pub first_position: u32,
    pub last_position: u32,
    /// When the first and the last survivor were made.
    pub first_time_us: i64,
    pub last_time_us: i64,
    /// The first user frame: where to look, and what the suspect groups by.
    pub site: Option<FrameView>,
    /// Distinct stacks merged under this site (C++ operators below the same line).
    pub stacks: u32,
    /// The stack that kept the most bytes, user frames first, noise removed.
    pub frames: Vec<FrameView>,
    /// Bytes kept per step, when the trace has step annotations.
    pub per_step_bytes: Option<u64>,
    /// What grows and how fast, in words.
    pub growth: String,
    /// Live bytes of this site over the trace.
    pub series: Vec<SeriesPoint>,
}

/// Whether the search for leaks could run, and if not, why.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LeakCheck {
    /// The traces were searched (the suspects may be none).
    Ran,
    /// No device has a trace: the snapshot holds segments only.
    NoTrace,
    /// The traces record no allocation (one `snapshot` marker, a stray free): history was off
    /// while the memory was allocated.
    HistoryOff,
}

impl LeakCheck {
    pub fn of(index: &Index) -> LeakCheck {
        if index.traced().next().is_none() {
            LeakCheck::NoTrace
        } else if index.traced().all(DeviceIndex::history_off) {
            LeakCheck::HistoryOff
        } else {
            LeakCheck::Ran
        }
    }
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

/// What one call site's allocations add up to.
struct Acc {
    bytes: u64,
    count: u32,
    total: u32,
    tenths: u16,
    first: u32,
    last: u32,
    /// Surviving bytes per stack: the largest is shown.
    by_stack: FxHashMap<StackId, u64>,
    /// Where survivors were made (event positions), for the rate.
    starts: Vec<u32>,
    sizes: (u64, u64),
    /// Distinct waves survivors were made in, and the last one seen.
    waves: u32,
    last_wave: u32,
    /// Every survivor was made in a module's forward or by backward (one pass's working set).
    working_set: bool,
}

impl Acc {
    fn is_suspect(&self) -> bool {
        self.count >= MIN_COUNT
            && self.tenths.count_ones() >= MIN_SPREAD_TENTHS
            && (!self.working_set || self.waves >= MIN_WAVES)
    }
}

/// Where the device's memory completed a wave: the positions where live bytes, having risen by
/// [`WAVE_SHARE`] of their range over the lowest point since the last wave, fell back by as much
/// from the highest. A training loop makes one per step (backward frees the activations); one
/// forward pass makes none.
pub fn wave_ends(d: &DeviceIndex) -> Vec<u32> {
    let (lo, hi, _, _) = d.extremes(0, d.len);
    let h = ((hi - lo) as f64 * WAVE_SHARE).max(1.0) as u64;
    let mut ends = Vec::new();
    let (mut low, mut high, mut rose) = (d.live_at(0), 0u64, false);
    for (i, v) in d.live_bytes.iter_range(0..d.len as usize).enumerate() {
        if !rose {
            low = low.min(v);
            if v >= low.saturating_add(h) {
                (rose, high) = (true, v);
            }
        } else {
            high = high.max(v);
            if v.saturating_add(h) <= high {
                ends.push(i as u32 + 1);
                (rose, low) = (false, v);
            }
        }
    }
    ends
}

/// Stacks whose allocations belong to one pass's working set: made inside a module's forward, or
/// on the autograd engine's thread (backward: saved-tensor gradients, `AccumulateGrad`).
fn working_set_stacks(snap: &Snapshot, d: &DeviceIndex) -> Vec<bool> {
    let mut of_frame: FxHashMap<FrameId, bool> = FxHashMap::default();
    let mut out = vec![false; snap.stacks.len()];
    let mut seen = vec![false; snap.stacks.len()];
    for a in &d.allocations {
        let s = a.stack.0 as usize;
        if std::mem::replace(&mut seen[s], true) {
            continue;
        }
        out[s] = snap.stack(a.stack).iter().any(|&f| {
            *of_frame.entry(f).or_insert_with(|| {
                let fr = snap.frame(f);
                let (file, name) = (snap.str(fr.filename), snap.str(fr.name));
                (file.ends_with("torch/nn/modules/module.py")
                    && (name == "_call_impl" || name == "_wrapped_call_impl"))
                    || name.contains("torch::autograd::Engine::thread_main")
                    || name.contains("torch::autograd::Engine::evaluate_function")
            })
        });
    }
    out
}

type Site = Option<FrameId>;

/// Each stack's site, by stack id (`None` where no allocation of the device has that stack):
/// a dense table, since every allocation looks its stack up, twice (a hash map of stacks was
/// most of this analysis on a 12M-event trace).
struct SiteOf(Vec<Option<Site>>);

impl SiteOf {
    fn get(&self, stack: StackId) -> Option<Site> {
        self.0.get(stack.0 as usize).copied().flatten()
    }
}

/// Allocations grouped by the site `site_of` gives their stack; `waves`: [`wave_ends`],
/// `working_set`: [`working_set_stacks`].
fn accumulate(
    t: &TraceTable,
    d: &DeviceIndex,
    site_of: &SiteOf,
    waves: &[u32],
    working_set: &[bool],
) -> FxHashMap<Site, Acc> {
    // Stack → index into `accs`, filled as stacks are met.
    let mut acc_of = vec![u32::MAX; site_of.0.len()];
    let mut accs: Vec<(Site, Acc)> = Vec::new();
    let mut slot_of_site: FxHashMap<Site, u32> = FxHashMap::default();
    for a in &d.allocations {
        if a.start == NONE || a.stack == StackId::EMPTY {
            continue;
        }
        let mut k = acc_of[a.stack.0 as usize];
        if k == u32::MAX {
            let site = site_of.get(a.stack).flatten();
            k = *slot_of_site.entry(site).or_insert_with(|| {
                accs.push((
                    site,
                    Acc {
                        bytes: 0,
                        count: 0,
                        total: 0,
                        tenths: 0,
                        first: u32::MAX,
                        last: 0,
                        by_stack: FxHashMap::default(),
                        starts: Vec::new(),
                        sizes: (u64::MAX, 0),
                        waves: 0,
                        last_wave: u32::MAX,
                        working_set: true,
                    },
                ));
                (accs.len() - 1) as u32
            });
            acc_of[a.stack.0 as usize] = k;
        }
        let acc = &mut accs[k as usize].1;
        acc.total += 1;
        if a.end == NONE {
            let size = t.size.get(d.row(a.start));
            acc.bytes += size;
            acc.count += 1;
            acc.tenths |= 1 << ((a.start as u64 * 10 / d.len as u64).min(9));
            acc.first = acc.first.min(a.start);
            acc.last = acc.last.max(a.start);
            *acc.by_stack.entry(a.stack).or_default() += size;
            acc.starts.push(a.start);
            acc.sizes = (acc.sizes.0.min(size), acc.sizes.1.max(size));
            // Allocations come in the order they were made: a new wave shows as a new index.
            let wave = waves.partition_point(|&w| w <= a.start) as u32;
            if wave != acc.last_wave {
                acc.waves += 1;
                acc.last_wave = wave;
            }
            acc.working_set &= working_set[a.stack.0 as usize];
        }
    }
    accs.into_iter().collect()
}

fn device_suspects(snap: &Snapshot, index: &Index, d: &DeviceIndex) -> Vec<LeakSuspect> {
    if d.len == 0 {
        return Vec::new();
    }
    let fc = &index.frames;
    // First by the innermost user frame: one line however many operators allocated below it.
    let mut site_of = SiteOf(vec![None; snap.stacks.len()]);
    for a in &d.allocations {
        let slot = &mut site_of.0[a.stack.0 as usize];
        if slot.is_none() {
            *slot = Some(fc.label(snap, a.stack));
        }
    }
    let waves = wave_ends(d);
    let working_set = working_set_stacks(snap, d);
    let first = accumulate(&snap.trace, d, &site_of, &waves, &working_set);
    let suspect_sites: rustc_hash::FxHashSet<FrameId> = first
        .iter()
        .filter(|(_, acc)| acc.is_suspect())
        .filter_map(|(site, _)| *site)
        .collect();
    if suspect_sites.is_empty() {
        return Vec::new();
    }
    // Then a suspect line called from another suspect line joins the outer one: a graph kept
    // alive at `total = total + model(x)` keeps the activations `forward` made, and the cause is
    // the outer line.
    for (stack, site) in site_of.0.iter_mut().enumerate() {
        let Some(site) = site else { continue };
        if let Some(outer) = snap
            .stack(StackId(stack as u32))
            .iter()
            .rev()
            .find(|f| suspect_sites.contains(f))
        {
            *site = Some(*outer);
        }
    }
    let by = accumulate(&snap.trace, d, &site_of, &waves, &working_set);
    let steps = step_starts(snap, d.device);
    let mut out = Vec::new();
    // The suspects' sites, each with its slot in `out`: their series are drawn in one pass
    // over the allocations below (one pass per suspect was most of this analysis).
    let mut suspects: Vec<Site> = Vec::new();
    for (site, mut acc) in by {
        if !acc.is_suspect() {
            continue;
        }
        suspects.push(site);
        let spread = acc.tenths.count_ones() as f64 / 10.0;
        let shown = acc
            .by_stack
            .iter()
            .max_by_key(|&(s, b)| (*b, std::cmp::Reverse(*s)))
            .map(|(s, _)| *s)
            .unwrap_or(StackId::EMPTY);
        acc.starts.sort_unstable();
        let times: Vec<i64> = acc
            .starts
            .iter()
            .map(|&e| snap.trace.time_us.get(d.row(e)))
            .collect();
        let (per_step_bytes, growth) = growth_words(
            acc.bytes,
            acc.count,
            acc.sizes,
            &acc.starts,
            &times,
            steps.as_ref(),
        );
        out.push(LeakSuspect {
            device: d.device,
            bytes: acc.bytes,
            count: acc.count,
            total_allocations: acc.total,
            spread,
            score: acc.bytes as f64 * spread,
            first_position: acc.first + 1,
            last_position: acc.last + 1,
            first_time_us: times[0],
            last_time_us: times[times.len() - 1],
            site: site.map(|f| view(snap, f)),
            stacks: acc.by_stack.len() as u32,
            frames: fc.display(snap, shown),
            per_step_bytes,
            growth,
            series: Vec::new(),
        });
    }
    // Each stack's suspect, by stack id.
    let suspect_of: Vec<u32> = site_of
        .0
        .iter()
        .map(|site| {
            site.and_then(|site| suspects.iter().position(|&s| s == site))
                .map_or(NONE, |k| k as u32)
        })
        .collect();
    let series = series_by(
        snap,
        d,
        |s| suspect_of.get(s.0 as usize).copied().unwrap_or(NONE),
        suspects.len(),
        SERIES_POINTS,
    );
    for (suspect, series) in out.iter_mut().zip(series) {
        suspect.series = series;
    }
    out
}

/// Step marks of one device: the start times of the most frequent family of step annotations
/// (`ProfilerStep#12` → `ProfilerStep`; any name with "step" in it, digits stripped), sorted.
fn step_starts(snap: &Snapshot, device: i32) -> Option<(String, Vec<i64>)> {
    let mut families: FxHashMap<String, Vec<i64>> = FxHashMap::default();
    for a in &snap.annotations {
        if !a.start || (a.device != device && a.device >= 0) {
            continue;
        }
        let name = snap.str(a.name);
        if !name.to_ascii_lowercase().contains("step") {
            continue;
        }
        let family = name
            .trim_end_matches(|c: char| c.is_ascii_digit() || c == '#' || c == '_' || c == ' ')
            .to_string();
        families.entry(family).or_default().push(a.time_us);
    }
    let (name, mut times) = families
        .into_iter()
        .max_by(|a, b| a.1.len().cmp(&b.1.len()).then_with(|| b.0.cmp(&a.0)))?;
    if times.len() < MIN_STEPS {
        return None;
    }
    times.sort_unstable();
    Some((name, times))
}

/// "16.0 MiB kept per step (over 12 steps, marked by ProfilerStep)" or "one 4.0 MiB allocation kept about
/// every 38 events (every 61 ms), 60 still alive (240 MiB)". `starts`/`times`: where and when
/// each survivor was made, sorted.
fn growth_words(
    bytes: u64,
    count: u32,
    (smallest, largest): (u64, u64),
    starts: &[u32],
    times: &[i64],
    steps: Option<&(String, Vec<i64>)>,
) -> (Option<u64>, String) {
    let what = if smallest == largest {
        format!("one {} allocation", human_bytes(largest))
    } else {
        format!(
            "{} on average ({}–{})",
            human_bytes(bytes / count.max(1) as u64),
            human_bytes(smallest),
            human_bytes(largest)
        )
    };
    let alive = format!("{count} still alive ({})", human_bytes(bytes));
    if let Some((name, marks)) = steps {
        // The step each survivor was made in: the last mark at or before it.
        let step_of = |t: i64| marks.partition_point(|&m| m <= t);
        let (first, last) = (step_of(times[0]), step_of(times[times.len() - 1]));
        let spanned = (last - first + 1) as u64;
        if spanned >= 2 {
            let per_step = bytes / spanned;
            return (
                Some(per_step),
                format!(
                    "{} kept per step (over {spanned} steps, marked by {name}): {alive}",
                    human_bytes(per_step)
                ),
            );
        }
    }
    let gaps = (count.max(2) - 1) as u64;
    let events = (starts[starts.len() - 1] - starts[0]) as u64 / gaps;
    let us = (times[times.len() - 1] - times[0]).max(0) as u64 / gaps;
    let when = if us > 0 {
        format!(" ({} apart)", duration_words(us))
    } else {
        String::new()
    };
    let rate = if smallest == largest {
        format!("{what} kept about every {events} events{when}")
    } else {
        format!("one allocation of {what} kept about every {events} events{when}")
    };
    (None, format!("{rate}: {alive}"))
}

fn duration_words(us: u64) -> String {
    if us < 1_000 {
        format!("{us} µs")
    } else if us < 1_000_000 {
        format!("{:.0} ms", us as f64 / 1e3)
    } else {
        format!("{:.1} s", us as f64 / 1e6)
    }
}

/// The first of `points` evenly spaced samples over `n` events (sample k at position
/// n·k/(points−1)) that lies after position `e`, or `points` if none: e·(points−1)/n is within a
/// step of it (a linear search per allocation was most of the leak analysis on big traces).
fn first_sample_after(e: u32, n: u32, points: usize) -> usize {
    let pos = |k: usize| (n as u64 * k as u64 / (points - 1) as u64) as u32;
    let mut k = ((e as u64 * (points - 1) as u64 / n as u64) as usize).min(points);
    while k > 0 && pos(k - 1) > e {
        k -= 1;
    }
    while k < points && pos(k) <= e {
        k += 1;
    }
    k
}

/// Live bytes of `groups` sets of allocations at `points` evenly spaced positions, in one pass:
/// `group_of` gives a stack's group, or [`NONE`] for none.
pub fn series_by(
    snap: &Snapshot,
    d: &DeviceIndex,
    group_of: impl Fn(StackId) -> u32,
    groups: usize,
    points: usize,
) -> Vec<Vec<SeriesPoint>> {
    if groups == 0 {
        return Vec::new();
    }
    let n = d.len.max(1);
    let points = points.max(2);
    let pos = |k: usize| (n as u64 * k as u64 / (points - 1) as u64) as u32;
    let first_after = |e: u32| first_sample_after(e, n, points);
    let mut delta = vec![0i128; groups * (points + 1)];
    for (id, a) in d.allocations.iter().enumerate() {
        let g = group_of(a.stack);
        if g == NONE {
            continue;
        }
        // Alive at position p iff start < p <= end: first sample k with pos(k) > start.
        let from = if a.start == NONE {
            0
        } else {
            first_after(a.start)
        };
        let to = if a.end == NONE {
            points
        } else {
            first_after(a.end)
        };
        if from < to {
            let size = d.size_of(&snap.trace, id as u32) as i128;
            let row = &mut delta[g as usize * (points + 1)..][..points + 1];
            row[from] += size;
            row[to] -= size;
        }
    }
    let times: Vec<i64> = (0..points)
        .map(|k| super::timeline::time_at(snap, d, pos(k)))
        .collect();
    delta
        .chunks(points + 1)
        .map(|row| {
            let mut live = 0i128;
            (0..points)
                .map(|k| {
                    live += row[k];
                    SeriesPoint {
                        position: pos(k),
                        time_us: times[k],
                        live_bytes: live.max(0) as u64,
                    }
                })
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::first_sample_after;

    #[test]
    fn the_first_sample_after_a_position_equals_a_linear_search() {
        for n in [1u32, 2, 3, 7, 199, 200, 201, 1000, 12_345, 12_000_000] {
            for points in [2usize, 3, 10, 200] {
                let pos = |k: usize| (n as u64 * k as u64 / (points - 1) as u64) as u32;
                let step = (n / 500).max(1);
                for e in (0..=n + 1)
                    .step_by(step as usize)
                    .chain([n.saturating_sub(1), n])
                {
                    let linear = (0..points).find(|&k| pos(k) > e).unwrap_or(points);
                    assert_eq!(
                        first_sample_after(e, n, points),
                        linear,
                        "n {n} points {points} e {e}"
                    );
                }
            }
        }
    }
}
