//! Leak suspects: the lines of user code whose live memory keeps growing, step over step.
//!
//! What is alive at the end of a trace is not a leak by itself: the weights, the optimizer's
//! state, the last step's activations and a cache filled once are all alive at the end and all
//! made again and again by the same lines. A leak *grows*: a tensor appended to a list every step
//! leaves one more survivor per step. So a call site is a suspect when its live bytes, read at the
//! start of every step ([`super::steps`]) and at the end, rose in at least [`MIN_RISES`] steps and
//! never fell back (the end holds at least nine tenths of the most it held at a step's start).
//! Without steps the same is read at the ten tenths of the trace up to the OOM that ended the run,
//! and the site must have grown in [`MIN_SPREAD_TENTHS`] of them: a list appended to until the
//! device ran out. Without steps and without such an OOM, nothing is a leak: one long phase
//! (a fill, a cache built once) grows by design, and what it leaves alive is "alive at the end".
//!
//! Candidates come first from survivors: made at least [`MIN_COUNT`] times, in at least
//! [`MIN_SPREAD_TENTHS`] tenths of the trace. One pass of a program is not a leak: a forward pass
//! keeps every layer's activations for backward, made by the same lines again and again (one per
//! layer). So survivors made inside a module's `forward` (`nn.Module._call_impl` on the stack) or
//! on the autograd engine's thread count only when they were made in at least [`MIN_WAVES`] waves
//! of the device's memory (it rose and fell back by a quarter of its range between them).
//!
//! Allocations are grouped by call site, the first user frame of their stack: one planted line
//! is one suspect, however many C++ operators (`addmm`, `gelu`, …) allocated below it; a suspect
//! line reached through another suspect line joins the outer one (the line that keeps a graph
//! alive, not the `forward` that allocated its activations). Each suspect says in words how it
//! grows: "256.0 MiB every step since step 5", "32.0 MiB every 5th step (10 times)", or per event
//! and per second where the trace has no steps.

use rustc_hash::FxHashMap;
use serde::Serialize;

use super::index::{DeviceIndex, Index, NONE};
use super::steps::{Steps, steps, wave_ends};
use crate::frames::FrameView;
use crate::model::{FrameId, Snapshot, StackId, TraceTable};
use crate::units::human_bytes;

pub const MIN_COUNT: u32 = 3;
pub const MIN_SPREAD_TENTHS: u32 = 4;
/// Points in each suspect's evidence series.
pub const SERIES_POINTS: usize = 64;
/// Steps (or tenths, without steps) a suspect's live bytes must have risen in.
pub const MIN_RISES: usize = 3;
/// Waves of memory a module's or backward's survivors must span to be a suspect.
pub const MIN_WAVES: u32 = 3;

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
    /// Bytes kept in each step the site grew in (the median), when the trace has steps.
    pub per_step_bytes: Option<u64>,
    /// The step it first grew in, when the trace has steps.
    pub since_step: Option<u32>,
    /// Steps it grew in.
    pub growth_steps: Option<u32>,
    /// It grew every this many steps, when regularly (1: every step).
    pub every_steps: Option<u32>,
    /// What grows and how fast, in words.
    pub growth: String,
    /// Live bytes of this site over the trace.
    pub series: Vec<SeriesPoint>,
    /// The stacks grouped under this site (what its live bytes at any moment are made of).
    #[serde(skip)]
    pub member_stacks: Vec<StackId>,
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
        // A device that died of an OOM is read where it died: what it kept may have been freed
        // as the exception unwound, before the snapshot was dumped.
        let until = super::recovery::fates(snap, index, d)
            .into_iter()
            .find(|f| !f.recovery.recovered())
            .map_or(d.len, |f| f.position);
        out.extend(suspects_until(snap, index, d, until));
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

/// Stacks whose allocations belong to one pass's working set: made inside a module's forward, or
/// on the autograd engine's thread (backward: saved-tensor gradients, `AccumulateGrad`).
fn working_set_stacks(snap: &Snapshot, d: &DeviceIndex) -> Vec<bool> {
    let mut of_frame: FxHashMap<FrameId, bool> = FxHashMap::default();
    let mut out = vec![false; snap.stacks.len()];
    let mut seen = vec![false; snap.stacks.len()];
    for id in 0..d.allocations.len() as u32 {
        let stack = d.stack_of(&snap.trace, id);
        let s = stack.0 as usize;
        if std::mem::replace(&mut seen[s], true) {
            continue;
        }
        out[s] = snap.stack(stack).iter().any(|&f| {
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
    settled: &[bool],
    until: u32,
) -> FxHashMap<Site, Acc> {
    // Stack → index into `accs`, filled as stacks are met.
    let mut acc_of = vec![u32::MAX; site_of.0.len()];
    let mut accs: Vec<(Site, Acc)> = Vec::new();
    let mut slot_of_site: FxHashMap<Site, u32> = FxHashMap::default();
    for (id, a) in d.allocations.iter().enumerate() {
        if a.start == NONE || a.start >= until || settled[id] {
            continue;
        }
        let stack = t.stack.get(d.row(a.start));
        if stack == StackId::EMPTY {
            continue;
        }
        let mut k = acc_of[stack.0 as usize];
        if k == u32::MAX {
            let site = site_of.get(stack).flatten();
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
            acc_of[stack.0 as usize] = k;
        }
        let acc = &mut accs[k as usize].1;
        acc.total += 1;
        // Alive after `until` events (start < until <= end; never freed when `until` is the end).
        if a.end == NONE || a.end >= until {
            let size = t.size.get(d.row(a.start));
            acc.bytes += size;
            acc.count += 1;
            acc.tenths |= 1 << ((a.start as u64 * 10 / until as u64).min(9));
            acc.first = acc.first.min(a.start);
            acc.last = acc.last.max(a.start);
            *acc.by_stack.entry(stack).or_default() += size;
            acc.starts.push(a.start);
            acc.sizes = (acc.sizes.0.min(size), acc.sizes.1.max(size));
            // Allocations come in the order they were made: a new wave shows as a new index.
            let wave = waves.partition_point(|&w| w <= a.start) as u32;
            if wave != acc.last_wave {
                acc.waves += 1;
                acc.last_wave = wave;
            }
            acc.working_set &= working_set[stack.0 as usize];
        }
    }
    accs.into_iter().collect()
}

pub fn device_suspects(snap: &Snapshot, index: &Index, d: &DeviceIndex) -> Vec<LeakSuspect> {
    suspects_until(snap, index, d, d.len)
}

/// The lines whose live bytes grew up to position `until` (the end of the trace, or an OOM: a
/// program that dies of growth frees what it kept as the exception unwinds, before the snapshot
/// is dumped, so what grew is read where it failed). Survivors are the allocations alive after
/// `until` events; `bytes` and `count` are theirs.
pub fn suspects_until(
    snap: &Snapshot,
    index: &Index,
    d: &DeviceIndex,
    until: u32,
) -> Vec<LeakSuspect> {
    let until = until.min(d.len);
    if until == 0 {
        return Vec::new();
    }
    let fc = &index.frames;
    // First by the innermost user frame: one line however many operators allocated below it.
    let mut site_of = SiteOf(vec![None; snap.stacks.len()]);
    for id in 0..d.allocations.len() as u32 {
        let stack = d.stack_of(&snap.trace, id);
        let slot = &mut site_of.0[stack.0 as usize];
        if slot.is_none() {
            *slot = Some(fc.label(snap, stack));
        }
    }
    let waves = wave_ends(d);
    let working_set = working_set_stacks(snap, d);
    // Parameters and the first step's optimizer state are made to stay: never leaks, even
    // where they are made step by step (a model built layer by layer as training goes).
    let settled = super::categories::settled(snap, index, d);
    let first = accumulate(
        &snap.trace,
        d,
        &site_of,
        &waves,
        &working_set,
        &settled,
        until,
    );
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
    let by = accumulate(
        &snap.trace,
        d,
        &site_of,
        &waves,
        &working_set,
        &settled,
        until,
    );
    // The steps begun before `until`.
    let steps = steps(snap, index, d)
        .map(|mut s| {
            let k = s.starts.partition_point(|&p| p < until);
            s.starts.truncate(k);
            s.numbers.truncate(k);
            s
        })
        .filter(|s| s.len() >= super::steps::MIN_STEPS);
    // Where growth is read: each step's start and `until`; without steps, the tenths.
    let marks: Vec<u32> = match &steps {
        Some(s) => s.starts.iter().copied().chain([until]).collect(),
        None => (0..=10).map(|k| (until as u64 * k / 10) as u32).collect(),
    };
    let candidates: Vec<(Site, Acc)> = by.into_iter().filter(|(_, a)| a.is_suspect()).collect();
    // Each stack's candidate, by stack id.
    let group_of = |site_of: &SiteOf, sites: &[Site]| -> Vec<u32> {
        site_of
            .0
            .iter()
            .map(|site| {
                site.and_then(|site| sites.iter().position(|&s| s == site))
                    .map_or(NONE, |k| k as u32)
            })
            .collect()
    };
    let sites: Vec<Site> = candidates.iter().map(|(s, _)| *s).collect();
    let of = group_of(&site_of, &sites);
    let at_marks = live_at(
        snap,
        d,
        |id, s| {
            if settled[id as usize] {
                NONE
            } else {
                of.get(s.0 as usize).copied().unwrap_or(NONE)
            }
        },
        sites.len(),
        &marks,
    );
    let mut out = Vec::new();
    let mut suspects: Vec<Site> = Vec::new();
    for ((site, mut acc), values) in candidates.into_iter().zip(at_marks) {
        let Some(growth) = Growth::of(&values, steps.as_ref(), until < d.len) else {
            continue;
        };
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
        let alive = if until < d.len {
            format!(
                "{} alive at the OOM ({})",
                acc.count,
                human_bytes(acc.bytes)
            )
        } else {
            format!("{} still alive ({})", acc.count, human_bytes(acc.bytes))
        };
        let words = match &growth {
            Growth::Steps { .. } => format!("{}: {alive}", growth.words()),
            Growth::Tenths => {
                format!(
                    "{}: {alive}",
                    time_words(acc.count, acc.sizes, &acc.starts, &times)
                )
            }
        };
        let (per_step_bytes, since_step, growth_steps, every_steps) = match growth {
            Growth::Steps {
                bytes,
                since,
                times,
                every,
            } => (Some(bytes), Some(since), Some(times), every),
            Growth::Tenths => (None, None, None, None),
        };
        let mut member_stacks: Vec<StackId> = (0..site_of.0.len())
            .filter(|&s| site_of.0[s] == Some(site))
            .map(|s| StackId(s as u32))
            .collect();
        member_stacks.shrink_to_fit();
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
            site: site.map(|f| index.frames.site_view(snap, f)),
            stacks: acc.by_stack.len() as u32,
            frames: fc.display(snap, shown),
            per_step_bytes,
            since_step,
            growth_steps,
            every_steps,
            growth: words,
            series: Vec::new(),
            member_stacks,
        });
    }
    let suspect_of = group_of(&site_of, &suspects);
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

/// How a site's live bytes grew, read at each step's start and the end (or the tenths).
#[derive(Clone, Debug, PartialEq)]
enum Growth {
    /// Grew in `times` steps, by `bytes` each (the median), first in step `since`; `every`: the
    /// steps between growths when they are all equal.
    Steps {
        bytes: u64,
        since: u32,
        times: u32,
        every: Option<u32>,
    },
    /// Grew through the trace's tenths (no steps).
    Tenths,
}

impl Growth {
    /// `values`: live bytes at each mark (each step's start, then the end; or the eleven edges of
    /// the tenths). `None` when they do not keep growing. Without steps, growth through the
    /// tenths counts only `to_oom` (up to the OOM that ended the run: a list that grew until the
    /// device ran out); what one long phase leaves alive at the end is not a leak.
    fn of(values: &[u64], steps: Option<&Steps>, to_oom: bool) -> Option<Growth> {
        let most = values.iter().copied().max().unwrap_or_default();
        let last = values.last().copied().unwrap_or_default();
        // Fell back: what grew was given back (a cache emptied, a burst of one phase).
        if most == 0 || last * 10 < most * 9 {
            return None;
        }
        let rises: Vec<(usize, u64)> = values
            .windows(2)
            .enumerate()
            .filter(|(_, w)| w[1] > w[0])
            .map(|(k, w)| (k, w[1] - w[0]))
            .collect();
        let Some(steps) = steps else {
            return (to_oom && rises.len() >= MIN_SPREAD_TENTHS as usize).then_some(Growth::Tenths);
        };
        if rises.len() < MIN_RISES {
            return None;
        }
        let mut sizes: Vec<u64> = rises.iter().map(|r| r.1).collect();
        sizes.sort_unstable();
        let gaps: Vec<usize> = rises.windows(2).map(|w| w[1].0 - w[0].0).collect();
        let every = gaps.iter().all(|&g| g == gaps[0]).then(|| gaps[0] as u32);
        Some(Growth::Steps {
            bytes: sizes[sizes.len() / 2],
            since: steps.numbers[rises[0].0],
            times: rises.len() as u32,
            every,
        })
    }

    /// "256.0 MiB every step since step 5", "32.0 MiB every 5th step (10 times), since step 4",
    /// "about 12.0 MiB in 7 of 20 steps, since step 3".
    fn words(&self) -> String {
        let Growth::Steps {
            bytes,
            since,
            times,
            every,
        } = *self
        else {
            return String::new();
        };
        let b = human_bytes(bytes);
        match every {
            Some(1) => format!("{b} every step since step {since}"),
            Some(k) => format!(
                "{b} every {} step ({times} times), since step {since}",
                ordinal(k)
            ),
            None => format!("about {b} in {times} steps, since step {since}"),
        }
    }
}

/// 2 → "2nd", 11 → "11th", 23 → "23rd".
fn ordinal(n: u32) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

/// "one 4.0 MiB allocation kept about every 38 events (61 ms apart)": the rate where the trace
/// has no steps. `starts`/`times`: where and when each survivor was made, sorted.
fn time_words(
    count: u32,
    (smallest, largest): (u64, u64),
    starts: &[u32],
    times: &[i64],
) -> String {
    let gaps = (count.max(2) - 1) as u64;
    let events = (starts[starts.len() - 1] - starts[0]) as u64 / gaps;
    let us = (times[times.len() - 1] - times[0]).max(0) as u64 / gaps;
    let when = if us > 0 {
        format!(" ({} apart)", duration_words(us))
    } else {
        String::new()
    };
    if smallest == largest {
        format!(
            "one {} allocation kept about every {events} events{when}",
            human_bytes(largest)
        )
    } else {
        format!(
            "one allocation of {}–{} kept about every {events} events{when}",
            human_bytes(smallest),
            human_bytes(largest)
        )
    }
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

/// Live bytes of `groups` sets of allocations after each of `marks` events (ascending), in one
/// pass: `group_of` gives a stack's group, or [`NONE`] for none.
pub fn live_at(
    snap: &Snapshot,
    d: &DeviceIndex,
    group_of: impl Fn(u32, StackId) -> u32,
    groups: usize,
    marks: &[u32],
) -> Vec<Vec<u64>> {
    let points = marks.len();
    let mut delta = vec![0i128; groups * (points + 1)];
    // Alive after p events iff start < p <= end: the first mark past its start on.
    let first_after = |e: u32| marks.partition_point(|&p| p <= e);
    for (id, a) in d.allocations.iter().enumerate() {
        let g = group_of(id as u32, d.stack_of(&snap.trace, id as u32));
        if g == NONE || g as usize >= groups {
            continue;
        }
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
    delta
        .chunks(points + 1)
        .map(|row| {
            let mut live = 0i128;
            row[..points]
                .iter()
                .map(|d| {
                    live += d;
                    live.max(0) as u64
                })
                .collect()
        })
        .collect()
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
    let marks: Vec<u32> = (0..points)
        .map(|k| (n as u64 * k as u64 / (points - 1) as u64) as u32)
        .collect();
    let times: Vec<i64> = marks
        .iter()
        .map(|&p| super::timeline::time_at(snap, d, p))
        .collect();
    live_at(snap, d, |_, s| group_of(s), groups, &marks)
        .into_iter()
        .map(|row| {
            row.into_iter()
                .zip(marks.iter().zip(&times))
                .map(|(live_bytes, (&position, &time_us))| SeriesPoint {
                    position,
                    time_us,
                    live_bytes,
                })
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn steps(n: u32) -> Steps {
        Steps {
            source: super::super::steps::StepSource::Annotations,
            name: "ProfilerStep".into(),
            numbers: (0..n).collect(),
            starts: (0..n).map(|k| k * 100).collect(),
            start_times_us: Vec::new(),
        }
    }

    const MIB: u64 = 1 << 20;

    #[test]
    fn growth_every_step_names_the_step_it_started_in() {
        // Steps 0..20; 256 MiB kept in steps 5..=19.
        let values: Vec<u64> = (0..=20u64)
            .map(|k| 64 * MIB + k.saturating_sub(5) * 256 * MIB)
            .collect();
        let g = Growth::of(&values, Some(&steps(20)), false).unwrap();
        assert_eq!(g.words(), "256.0 MiB every step since step 5");
    }

    #[test]
    fn growth_every_kth_step_counts_its_stairs() {
        // 50 steps, 32 MiB kept in steps 4, 9, …, 49.
        let mut values = vec![100 * MIB];
        for k in 0..50u64 {
            values.push(values[k as usize] + if k % 5 == 4 { 32 * MIB } else { 0 });
        }
        let g = Growth::of(&values, Some(&steps(50)), false).unwrap();
        assert_eq!(
            g.words(),
            "32.0 MiB every 5th step (10 times), since step 4"
        );
    }

    #[test]
    fn what_fell_back_or_never_grew_is_not_a_leak() {
        let flat = vec![512 * MIB; 21];
        assert_eq!(Growth::of(&flat, Some(&steps(20)), false), None);
        // A fill then a release (a cache, a fragmentation workload's punch).
        let fill: Vec<u64> = (0..=10)
            .map(|k| if k < 8 { k * 200 * MIB } else { 500 * MIB })
            .collect();
        assert_eq!(Growth::of(&fill, None, true), None);
        // One long phase that grew to the end: alive at the end, not a leak; up to an OOM it
        // ended in, growth.
        let grew: Vec<u64> = (0..=10u64).map(|k| k * 100 * MIB).collect();
        assert_eq!(Growth::of(&grew, None, false), None);
        assert_eq!(Growth::of(&grew, None, true), Some(Growth::Tenths));
        // Two rises are not a pattern.
        let two = [0, 0, MIB, 2 * MIB, 2 * MIB];
        assert_eq!(Growth::of(&two, Some(&steps(4)), false), None);
    }

    #[test]
    fn ordinals() {
        let words: Vec<String> = [1, 2, 3, 4, 11, 12, 13, 21, 22, 101].map(ordinal).to_vec();
        assert_eq!(
            words,
            [
                "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "101st"
            ]
        );
    }
}
