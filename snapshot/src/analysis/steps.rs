//! Steps: the unit users count their training in. "OOM at step 26", "256 MiB every step since
//! step 5" and a timeline read in steps all need to know where each step of a device's trace
//! starts.
//!
//! Two sources, the first that gives at least [`MIN_STEPS`] wins:
//! - **Annotations**: the most frequent family of trace annotations whose name holds "step"
//!   (`ProfilerStep#12` → family `ProfilerStep`, number 12; `Optimizer.step#AdamW.step`, counted),
//!   as the profiler's schedule and `record_function` write them. A step starts at the first
//!   event at or after its mark.
//! - **A repeating allocation**: a training loop makes the same allocations in the same order
//!   every step, so some stack (the batch's `torch.randn`, the loss) allocates once per step at
//!   near-equal distances in events. A step also frees what it made: memory rises and falls back
//!   once per step ([`wave_ends`]). Where memory makes waves, the stack that repeats that
//!   regularly about as many times as the waves marks the steps (an optimizer's loop over
//!   parameters repeats far more often); where it makes too few to count (a leak's trend can
//!   hide them), the regular stack that repeats the most. They are numbered from 1. A loop whose
//!   only allocation is that line (a list appended to) is one phase: it has no steps.
//!
//! Only `Optimizer.step` annotations: a training step ends with its optimizer step, so the next
//! one starts where that ends; steps are counted from 1 (what a loop does after `opt.step()` in
//! its first iteration falls in step 2).
//!
//! A trace with neither has no steps: analyses then speak in events and time.

use rustc_hash::FxHashMap;

use super::index::{DeviceIndex, Index, NONE, SERIES_BLOCK};
pub use super::index::{StepSource, Steps};
use crate::model::{Snapshot, StackId};

/// Fewest steps worth calling a loop.
pub const MIN_STEPS: usize = 3;
/// A wave rises and falls back by this share of the device's live range.
const WAVE_SHARE: f64 = 0.25;

/// The steps of device `d`, or `None` when its trace shows no loop.
/// Found once per device and kept with its derived views: the summary, the leak search, the OOM
/// reports and the what-if replay all ask.
pub fn steps(snap: &Snapshot, index: &Index, d: &DeviceIndex) -> Option<Steps> {
    d.lazy
        .steps
        .0
        .get_or_init(|| find_steps(snap, index, d))
        .clone()
}

fn find_steps(snap: &Snapshot, index: &Index, d: &DeviceIndex) -> Option<Steps> {
    if d.len == 0 {
        return None;
    }
    let mut s = from_annotations(snap, d).or_else(|| from_repeats(snap, index, d))?;
    s.start_times_us = s
        .starts
        .iter()
        .map(|&p| snap.trace.time_us.get(d.row(p)))
        .collect();
    Some(s)
}

/// "ProfilerStep#12" → ("ProfilerStep", Some(12)).
fn family(name: &str) -> (&str, Option<u32>) {
    let stem = name.trim_end_matches(|c: char| c.is_ascii_digit());
    let number = name[stem.len()..].parse().ok();
    (stem.trim_end_matches(['#', '_', ' ']), number)
}

/// Where the device's memory completed a wave: the positions where live bytes, having risen by
/// `WAVE_SHARE` of their range over the lowest point since the last wave, fell back by as much
/// from the highest. A training loop makes one per step (backward frees the activations); one
/// forward pass makes none.
///
/// A block of events whose lowest and highest live bytes (kept by the index) can neither start
/// nor end a wave is passed whole: most are, and the walk reads only the blocks where a wave
/// turns (stepping through every event was 35 instructions an event, on the report's critical
/// path after the labels; bench/README.md, issue 41, twenty-first part).
pub fn wave_ends(d: &DeviceIndex) -> Vec<u32> {
    let mut waves = Waves::new(wave_height(d), d.live_at(0));
    let mut values = [0i64; crate::packed::BLOCK];
    let n = d.len as usize;
    for (b, start) in (0..n).step_by(SERIES_BLOCK).enumerate() {
        if d.live_blocks
            .get(b)
            .is_some_and(|&bounds| waves.pass(bounds))
        {
            continue;
        }
        let k = d.live_bytes.block_into(b, &mut values).min(n - start);
        for (i, &v) in values[..k].iter().enumerate() {
            waves.step(start + i, v as u64);
        }
    }
    waves.ends
}

/// The rise and fall that make a wave on device `d`: `WAVE_SHARE` of its live bytes' range.
fn wave_height(d: &DeviceIndex) -> u64 {
    let (lo, hi, _, _) = d.extremes(0, d.len);
    ((hi - lo) as f64 * WAVE_SHARE).max(1.0) as u64
}

// A series block is a block of the live-bytes column: `wave_ends` decodes one for the other.
const _: () = assert!(SERIES_BLOCK == crate::packed::BLOCK);

/// The walk of [`wave_ends`] over live bytes: `h` is the rise and fall that make a wave.
struct Waves {
    h: u64,
    low: u64,
    high: u64,
    rose: bool,
    ends: Vec<u32>,
}

impl Waves {
    fn new(h: u64, start: u64) -> Waves {
        Waves {
            h,
            low: start,
            high: 0,
            rose: false,
            ends: Vec::new(),
        }
    }

    /// The live bytes after event `i` are `v`.
    #[inline]
    fn step(&mut self, i: usize, v: u64) {
        if !self.rose {
            self.low = self.low.min(v);
            if v >= self.low.saturating_add(self.h) {
                (self.rose, self.high) = (true, v);
            }
        } else {
            self.high = self.high.max(v);
            if v.saturating_add(self.h) <= self.high {
                self.ends.push(i as u32 + 1);
                (self.rose, self.low) = (false, v);
            }
        }
    }

    /// Passes a block whose values all lie in `lo..=hi` if no value in it can start a wave
    /// (none reaches the lowest so far plus `h`, the block's own lowest counted) or end one
    /// (none falls `h` below the highest so far, the block's own highest counted), leaving the
    /// walk as stepping through it would; false if the block must be stepped through.
    fn pass(&mut self, (lo, hi): (u64, u64)) -> bool {
        // Bounds out of order: a block of values that wrapped, stepped through.
        if lo > hi {
            return false;
        }
        if !self.rose {
            let low = self.low.min(lo);
            if hi < low.saturating_add(self.h) {
                self.low = low;
                return true;
            }
        } else {
            let high = self.high.max(hi);
            if lo.saturating_add(self.h) > high {
                self.high = high;
                return true;
            }
        }
        false
    }
}

/// One family of step annotations: its starts (time, number) and ends (time).
#[derive(Default)]
struct Family {
    starts: Vec<(i64, Option<u32>)>,
    ends: Vec<i64>,
}

impl Family {
    fn numbered(&self) -> bool {
        self.starts.iter().all(|m| m.1.is_some())
    }
}

fn from_annotations(snap: &Snapshot, d: &DeviceIndex) -> Option<Steps> {
    let mut families: FxHashMap<&str, Family> = FxHashMap::default();
    for a in &snap.annotations {
        if a.device != d.device && a.device >= 0 {
            continue;
        }
        let name = snap.str(a.name);
        if !name.to_ascii_lowercase().contains("step") {
            continue;
        }
        let (fam, number) = family(name);
        let f = families.entry(fam).or_default();
        if a.start {
            f.starts.push((a.time_us, number));
        } else {
            f.ends.push(a.time_us);
        }
    }
    // Numbered families first (`ProfilerStep#N` beats `Optimizer.step#SGD.step`), then the most
    // marks, then the name.
    let (name, mut fam) = families.into_iter().max_by(|a, b| {
        (a.1.numbered(), a.1.starts.len())
            .cmp(&(b.1.numbered(), b.1.starts.len()))
            .then_with(|| b.0.cmp(a.0))
    })?;
    if fam.starts.len() < MIN_STEPS {
        return None;
    }
    fam.starts.sort_unstable();
    fam.ends.sort_unstable();
    // An optimizer's step ends a training step: the next one starts where it ends.
    let marks: Vec<(i64, Option<u32>)> = if !fam.numbered()
        && name.to_ascii_lowercase().contains("optimizer")
        && !fam.ends.is_empty()
    {
        std::iter::once((i64::MIN, None))
            .chain(fam.ends.iter().map(|&t| (t, None)))
            .collect()
    } else {
        fam.starts
    };
    let (times, rows) = (&snap.trace.time_us, d.rows());
    let numbered = marks.iter().all(|m| m.1.is_some());
    let mut starts: Vec<u32> = Vec::with_capacity(marks.len());
    let mut numbers = Vec::with_capacity(marks.len());
    for (t, number) in marks {
        let p = times.partition_point(rows.clone(), |x| x < t) as u32;
        if p >= d.len || starts.last().is_some_and(|&s| s == p) {
            continue;
        }
        starts.push(p);
        numbers.push(if numbered {
            number.unwrap_or_default()
        } else {
            numbers.len() as u32 + 1
        });
    }
    (starts.len() >= MIN_STEPS).then(|| Steps {
        source: StepSource::Annotations,
        name: name.to_string(),
        numbers,
        starts,
        start_times_us: Vec::new(),
    })
}

/// Whether gaps between repeats are regular: most within a quarter of their median, none over
/// three times it (a line called once per layer repeats at short gaps within a step and a long
/// one between steps).
fn regular(gaps: &mut [u32]) -> bool {
    gaps.sort_unstable();
    let median = gaps[gaps.len() / 2] as u64;
    let near = gaps
        .iter()
        .filter(|&&g| (g as u64 * 4).abs_diff(median * 4) <= median)
        .count();
    let longest = gaps.last().copied().unwrap_or_default() as u64;
    median > 0 && near * 5 >= gaps.len() * 4 && longest <= median * 3
}

fn from_repeats(snap: &Snapshot, index: &Index, d: &DeviceIndex) -> Option<Steps> {
    let mut at: FxHashMap<StackId, Vec<u32>> = FxHashMap::default();
    for a in &d.allocations {
        if a.start == NONE {
            continue;
        }
        let stack = snap.trace.stack.get(d.row(a.start));
        if stack != StackId::EMPTY {
            at.entry(stack).or_default().push(a.start);
        }
    }
    // Steps free what they make: where memory makes waves, the stack that repeats about once
    // per wave marks them (not an optimizer's loop over parameters, which repeats far more
    // often). Where it makes too few to count (a leak's trend can hide them), the stack that
    // repeats regularly the most times.
    let waves = wave_ends(d).len();
    let wave_led = waves + 1 >= MIN_STEPS;
    let key_of = |n: usize, first: u32| {
        let fit = if wave_led {
            usize::MAX - n.abs_diff(waves + 1)
        } else {
            n
        };
        (fit, std::cmp::Reverse(first))
    };
    let mut best: Option<(usize, u32, StackId)> = None;
    for (&stack, starts) in &at {
        if starts.len() < MIN_STEPS
            || (wave_led && (starts.len() * 2 < waves || starts.len() > waves * 2 + 2))
        {
            continue;
        }
        // Once per step: the stack's allocations are spread over the trace at regular gaps.
        let mut gaps: Vec<u32> = starts.windows(2).map(|w| w[1] - w[0]).collect();
        if !regular(&mut gaps) {
            continue;
        }
        if best.is_none_or(|(n, first, _)| key_of(starts.len(), starts[0]) > key_of(n, first)) {
            best = Some((starts.len(), starts[0], stack));
        }
    }
    let (_, _, stack) = best?;
    let starts = at.remove(&stack)?;
    // A step does more than the line that marks it: a loop whose only allocation is that line (a
    // list appended to) is one long phase, not steps.
    let (first, last) = (starts[0], starts[starts.len() - 1]);
    let within = d
        .allocations
        .iter()
        .filter(|a| a.start != NONE && a.start >= first && a.start < last)
        .count();
    if within < 2 * (starts.len() - 1) {
        return None;
    }
    let name = index
        .frames
        .label(snap, stack)
        .map(|f| {
            let fr = snap.frame(f);
            format!("{}:{}", snap.str(fr.filename), fr.line)
        })
        .unwrap_or_default();
    Some(Steps {
        source: StepSource::Repeats,
        name,
        numbers: (1..=starts.len() as u32).collect(),
        starts,
        start_times_us: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `wave_ends`'s walk stepped through every value.
    fn stepped(values: &[u64], h: u64, start: u64) -> Vec<u32> {
        let mut w = Waves::new(h, start);
        for (i, &v) in values.iter().enumerate() {
            w.step(i, v);
        }
        w.ends
    }

    /// Blocks passed by their bounds leave the walk where stepping through them does: series
    /// of waves, steps, spikes, noise and wrapped values, and every harness recording.
    #[test]
    fn passing_blocks_by_their_bounds_finds_the_waves_stepping_finds() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut rand = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let shapes: [&dyn Fn(usize, u64) -> u64; 5] = [
            &|i, _| ((i % 3000) as u64).min(3000 - (i % 3000) as u64) * 1000,
            &|i, r| (i as u64 / 700 % 4) * 1_000_000 + r % 1000,
            &|i, r| if i % 997 == 0 { 1 << 40 } else { r % 4096 },
            &|_, r| r % 100,
            &|i, r| {
                if i % 5 == 0 {
                    u64::MAX - r % 10
                } else {
                    r % 10
                }
            },
        ];
        let passed = |values: &[u64], h: u64| {
            let mut w = Waves::new(h, values[0]);
            for (b, block) in values.chunks(SERIES_BLOCK).enumerate() {
                let bounds = (
                    block.iter().copied().min().unwrap(),
                    block.iter().copied().max().unwrap(),
                );
                if w.pass(bounds) {
                    continue;
                }
                for (i, &v) in block.iter().enumerate() {
                    w.step(b * SERIES_BLOCK + i, v);
                }
            }
            w.ends
        };
        let same = |got: Vec<u32>, want: Vec<u32>, what: &str| {
            let first = got.iter().zip(&want).position(|(a, b)| a != b);
            assert!(
                got == want,
                "{what}: {} waves, want {}; first differing {first:?}",
                got.len(),
                want.len()
            );
        };
        for (k, shape) in shapes.iter().enumerate() {
            let values: Vec<u64> = (0..20_000).map(|i| shape(i, rand())).collect();
            for h in [1, 50, 700_000, 1 << 39, u64::MAX / 2] {
                let want = stepped(&values, h, values[0]);
                same(passed(&values, h), want, &format!("shape {k}, h {h}"));
            }
        }
        // Blocks whose bounds land exactly on a wave's threshold (h = 100): the rise to 100
        // from 0 starts one, the fall back to 0 from 100 ends it.
        let mut edges = vec![0u64; SERIES_BLOCK];
        edges.extend((0..SERIES_BLOCK).map(|i| if i == 9 { 100 } else { 40 }));
        edges.extend((0..SERIES_BLOCK).map(|i| if i == 9 { 0 } else { 100 }));
        edges.extend((0..SERIES_BLOCK).map(|i| if i == 9 { 100 } else { 0 }));
        let want = stepped(&edges, 100, 0);
        assert_eq!(want, [522, 769, 779]);
        same(passed(&edges, 100), want, "edges");
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/harness");
        let mut checked = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|e| e != "pickle") {
                continue;
            }
            let snap = crate::read(std::fs::File::open(&path).unwrap()).unwrap();
            let (index, _) = crate::analysis::analyze(&snap, &Default::default());
            for d in index.devices.iter().filter(|d| d.len > 0) {
                let values: Vec<u64> = d.live_bytes.iter_range(0..d.len as usize).collect();
                let want = stepped(&values, wave_height(d), d.live_at(0));
                assert_eq!(wave_ends(d), want, "{path:?}");
                checked += 1;
            }
        }
        assert!(checked >= 10, "{checked} devices");
    }

    #[test]
    fn a_family_is_the_name_without_its_number() {
        assert_eq!(family("ProfilerStep#12"), ("ProfilerStep", Some(12)));
        assert_eq!(
            family("Optimizer.step#AdamW.step"),
            ("Optimizer.step#AdamW.step", None)
        );
        assert_eq!(family("train_step_3"), ("train_step", Some(3)));
    }

    #[test]
    fn gaps_are_regular_when_most_are_near_their_median() {
        assert!(regular(&mut [100, 101, 99, 100, 140]));
        assert!(!regular(&mut [1, 1, 1, 500, 1, 1, 700, 1]));
        // Eight layers a step: seven short gaps, one long.
        assert!(!regular(&mut [
            2, 2, 2, 2, 2, 2, 2, 90, 2, 2, 2, 2, 2, 2, 2, 90
        ]));
        assert!(!regular(&mut [0, 0, 0]));
    }
}
