//! A job's ranks side by side: one snapshot per rank, put on one time axis, with the imbalance
//! between the heaviest and the lightest rank and the order in which ranks ran out of memory.
//!
//! Distributed jobs write one snapshot per rank, and the ranks differ (a pipeline stage holds
//! more layers, the rank that fails is not rank 0). This module lines them up: by their clocks
//! when their traces overlap in time (PyTorch's `time_us` is wall-clock), else by the first step
//! mark every rank has (`ProfilerStep#N`, or any `record_function` scope they share), else at
//! their first events, saying that times across ranks are then not comparable.

use serde::Serialize;

use super::diff::{Diff, Side, compare};
use super::index::{DeviceIndex, Index};
use crate::model::Snapshot;

/// One rank: its snapshot, index and the device its trace is on.
#[derive(Clone, Copy)]
pub struct RankInput<'a> {
    pub rank: u32,
    pub snap: &'a Snapshot,
    pub index: &'a Index,
    pub device: i32,
}

impl<'a> RankInput<'a> {
    fn dev(&self) -> Option<&'a DeviceIndex> {
        self.index.device(self.device)
    }
    fn side(&self) -> Side<'a> {
        Side {
            snap: self.snap,
            index: self.index,
            device: self.device,
        }
    }
}

/// How the ranks were put on one axis.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum Alignment {
    /// Their own clocks: every trace overlaps every other in time.
    Clock,
    /// The start of a step mark every rank has (`name`), at the same instant.
    Mark { name: String },
    /// Their first events, at the same instant: clocks disagree and no mark is shared, so times
    /// across ranks are not comparable.
    Start,
    /// No rank has timed events (PyTorch before 2.1 recorded no `time_us`): event positions.
    Events,
}

/// What one rank's trace shows, on the run's axis.
#[derive(Clone, Debug, Serialize)]
pub struct RankFigures {
    pub rank: u32,
    pub device: i32,
    pub events: u32,
    /// The rank's first and last event on the run's axis (µs; event positions for
    /// [`Alignment::Events`]). `None`: no events.
    pub start: Option<i64>,
    pub end: Option<i64>,
    /// What was subtracted from the rank's own `time_us` to put it on the axis.
    pub offset_us: i64,
    pub peak_live_bytes: u64,
    pub peak_position: u32,
    /// When the peak was, on the run's axis.
    pub peak_at: Option<i64>,
    pub peak_reserved_bytes: u64,
    /// The `oom` events that ended the rank's run (not the survived ones): position and when,
    /// on the run's axis, in trace order.
    pub ooms: Vec<(u32, i64)>,
}

/// The run: its ranks on one axis, which is heaviest and lightest, who ran out of memory first.
#[derive(Clone, Debug, Serialize)]
pub struct RunAnalysis {
    pub alignment: Alignment,
    /// The alignment in words, with what it means for comparing times.
    pub alignment_note: String,
    /// In the order given.
    pub ranks: Vec<RankFigures>,
    /// Indexes into `ranks` of the highest and the lowest peak (first of equals).
    pub heaviest: Option<usize>,
    pub lightest: Option<usize>,
    /// Ranks that ran out of memory, by their first OOM on the axis: `(index into ranks,
    /// position of that OOM)`.
    pub oom_order: Vec<(usize, u32)>,
    /// Whether `oom_order` is an order in time (false when ranks are aligned only at their
    /// starts or by positions and more than one rank ran out of memory).
    pub oom_order_known: bool,
}

fn time_of(r: &RankInput, d: &DeviceIndex, event: u32) -> i64 {
    r.snap.trace.time_us.get(d.row(event))
}

/// The first and last `time_us` of a rank's trace (`None` when it has no events or no times).
fn span_us(r: &RankInput) -> Option<(i64, i64)> {
    let d = r.dev()?;
    if d.len == 0 {
        return None;
    }
    let (a, b) = (time_of(r, d, 0), time_of(r, d, d.len - 1));
    (a != 0 || b != 0).then_some((a, b))
}

/// Start times of scopes named `name` on the rank's device, in order.
fn mark_starts<'s>(r: &'s RankInput) -> impl Iterator<Item = (&'s str, i64)> + 's {
    r.snap
        .annotations
        .iter()
        .filter(move |a| a.start && (a.device == r.device || a.device < 0))
        .map(move |a| (r.snap.str(a.name), a.time_us))
}

/// The mark to align by: the lowest `ProfilerStep#N` every rank has, else the scope name every
/// rank has that starts first on the first rank. With each rank's first start of it.
fn shared_mark(ranks: &[RankInput]) -> Option<(String, Vec<i64>)> {
    let first = ranks.first()?;
    let mut candidates: Vec<(&str, i64)> = Vec::new();
    for (name, t) in mark_starts(first) {
        if !candidates.iter().any(|&(n, _)| n == name) {
            candidates.push((name, t));
        }
    }
    let step = |name: &str| {
        name.strip_prefix("ProfilerStep#")
            .and_then(|n| n.parse::<u64>().ok())
    };
    // Steps by number first, then every other scope by its start on the first rank.
    candidates.sort_by_key(|&(name, t)| (step(name).is_none(), step(name).unwrap_or(0), t));
    candidates.into_iter().find_map(|(name, _)| {
        let starts: Option<Vec<i64>> = ranks
            .iter()
            .map(|r| mark_starts(r).find(|&(n, _)| n == name).map(|(_, t)| t))
            .collect();
        starts.map(|s| (name.to_string(), s))
    })
}

/// Puts the ranks on one axis and reads their figures.
pub fn analyze_run(ranks: &[RankInput]) -> RunAnalysis {
    let spans: Vec<Option<(i64, i64)>> = ranks.iter().map(span_us).collect();
    let timed: Vec<(i64, i64)> = spans.iter().flatten().copied().collect();
    let overlap =
        !timed.is_empty() && timed.iter().map(|s| s.0).max() <= timed.iter().map(|s| s.1).min();
    let (alignment, offsets, note) = if timed.is_empty() {
        (
            Alignment::Events,
            vec![0; ranks.len()],
            "No rank's trace has times (PyTorch before 2.1): ranks are shown by event \
             position, aligned at their first events."
                .to_string(),
        )
    } else if ranks.len() == 1 || overlap {
        (
            Alignment::Clock,
            vec![0; ranks.len()],
            "By the ranks' own clocks: every trace overlaps the others in time.".to_string(),
        )
    } else if let Some((name, starts)) = shared_mark(ranks) {
        let offsets = starts.iter().map(|t| t - starts[0]).collect();
        let note = format!(
            "The ranks' clocks disagree (their traces do not overlap in time), so each is \
             shifted to start `{name}` together, on rank {}'s clock.",
            ranks[0].rank
        );
        (Alignment::Mark { name }, offsets, note)
    } else {
        let base = spans.iter().flatten().next().map_or(0, |s| s.0);
        let offsets = spans.iter().map(|s| s.map_or(0, |s| s.0 - base)).collect();
        (
            Alignment::Start,
            offsets,
            "The ranks' clocks disagree and no step mark is shared: each rank starts at its \
             first event, so times across ranks are not comparable."
                .to_string(),
        )
    };
    let events_axis = alignment == Alignment::Events;
    let figures: Vec<RankFigures> = ranks
        .iter()
        .zip(&offsets)
        .map(|(r, &offset)| {
            let d = r.dev();
            let at = |event: u32| -> i64 {
                match d {
                    Some(d) if !events_axis => time_of(r, d, event) - offset,
                    _ => event as i64,
                }
            };
            let len = d.map_or(0, |d| d.len);
            // The OOMs that ended the rank's run: a survived one (a cuDNN fallback, a caught
            // search) is not where a rank "ran out of memory".
            let ooms = d
                .map(|d| {
                    super::recovery::fates(r.snap, r.index, d)
                        .into_iter()
                        .filter(|f| !f.recovery.recovered())
                        .map(|f| (f.position, at(f.position)))
                        .collect()
                })
                .unwrap_or_default();
            let peak_position = d.map_or(0, |d| d.peak_position);
            RankFigures {
                rank: r.rank,
                device: r.device,
                events: len,
                start: (len > 0).then(|| at(0)),
                end: (len > 0).then(|| at(len - 1)),
                offset_us: offset,
                peak_live_bytes: d.map_or(0, |d| d.peak_live_bytes),
                peak_position,
                // Position p is after event p - 1.
                peak_at: (len > 0).then(|| at(peak_position.saturating_sub(1).min(len - 1))),
                peak_reserved_bytes: d.map_or(0, |d| d.peak_reserved()),
                ooms,
            }
        })
        .collect();
    let by_peak = |i: &usize| figures[*i].peak_live_bytes;
    let heaviest = (0..figures.len()).rev().max_by_key(by_peak);
    let lightest = (0..figures.len()).min_by_key(by_peak);
    let mut oom_order: Vec<(usize, u32, i64)> = figures
        .iter()
        .enumerate()
        .filter_map(|(i, f)| f.ooms.first().map(|&(p, t)| (i, p, t)))
        .collect();
    oom_order.sort_by_key(|&(i, _, t)| (t, i));
    let comparable = matches!(alignment, Alignment::Clock | Alignment::Mark { .. });
    RunAnalysis {
        oom_order_known: comparable || oom_order.len() <= 1,
        oom_order: oom_order.into_iter().map(|(i, p, _)| (i, p)).collect(),
        alignment,
        alignment_note: note,
        ranks: figures,
        heaviest,
        lightest,
    }
}

/// The heaviest rank against the lightest: call sites at each one's peak, by file, line and
/// function (the same code on every rank lines up). `None` with fewer than two ranks or when
/// one rank is both.
pub fn imbalance(ranks: &[RankInput], run: &RunAnalysis, max_sites: usize) -> Option<Diff> {
    let (h, l) = (run.heaviest?, run.lightest?);
    (h != l).then(|| compare(ranks[l].side(), ranks[h].side(), max_sites))
}

/// Every rank's live and reserved bytes on the run's axis, in equal buckets.
#[derive(Clone, Debug, Serialize)]
pub struct RunSeries {
    /// The axis from the first event of any rank to the last, in µs (event positions for
    /// [`Alignment::Events`]).
    pub from: i64,
    pub to: i64,
    pub bucket: i64,
    /// Per rank, in the order given: per bucket the highest live and reserved bytes, `None`
    /// where the rank has no trace (before its first event, after its last).
    pub ranks: Vec<Vec<Option<(u64, u64)>>>,
    /// Stretches of the axis where no rank has an event, each at least [`IDLE_SHARE`] of the
    /// axis and [`IDLE_MIN_US`] long (none on the events axis): where the ranks waited, folded
    /// by the dashboard.
    pub idle: Vec<(i64, i64)>,
}

/// An idle stretch is at least this share of the run's axis (or of a snapshot timeline's window:
/// the dashboard marks both by this rule)…
pub const IDLE_SHARE: f64 = 0.05;
/// …and at least this long.
pub const IDLE_MIN_US: i64 = 1000;

/// `buckets` equal buckets over the whole run (at least 1).
pub fn series(ranks: &[RankInput], run: &RunAnalysis, buckets: usize) -> RunSeries {
    let from = run.ranks.iter().filter_map(|f| f.start).min().unwrap_or(0);
    let to = run.ranks.iter().filter_map(|f| f.end).max().unwrap_or(0);
    let n = buckets.max(1) as i64;
    let bucket = ((to - from) / n + 1).max(1);
    let events_axis = run.alignment == Alignment::Events;
    let per_rank = ranks
        .iter()
        .zip(&run.ranks)
        .map(|(r, f)| {
            let Some(d) = r.dev().filter(|d| d.len > 0) else {
                return vec![None; n as usize];
            };
            let at = |e: u32| -> i64 {
                if events_axis {
                    e as i64
                } else {
                    time_of(r, d, e) - f.offset_us
                }
            };
            // Events with an axis value below `t` (traces are in time order; a few equal or
            // out-of-order stamps only move an event to a neighbouring bucket).
            let before = |t: i64| -> u32 {
                let (mut lo, mut hi) = (0u32, d.len);
                while lo < hi {
                    let mid = lo + (hi - lo) / 2;
                    if at(mid) < t {
                        lo = mid + 1;
                    } else {
                        hi = mid;
                    }
                }
                lo
            };
            let (start, end) = (f.start.unwrap_or(0), f.end.unwrap_or(0));
            (0..n)
                .map(|b| {
                    let (t0, t1) = (from + b * bucket, from + (b + 1) * bucket);
                    if t1 <= start || t0 > end {
                        return None;
                    }
                    let (lo, hi) = (before(t0), before(t1));
                    // Events lo..hi fall in the bucket; position p is after event p - 1, so the
                    // values in it are positions lo+1..=hi, or, with no event, position lo.
                    let (_, live, _, reserved) = if hi > lo {
                        d.extremes(lo + 1, hi)
                    } else {
                        d.extremes(lo, lo)
                    };
                    Some((live, reserved))
                })
                .collect()
        })
        .collect();
    let min = ((to - from) as f64 * IDLE_SHARE).ceil() as i64;
    RunSeries {
        from,
        to,
        bucket,
        ranks: per_rank,
        idle: if events_axis {
            Vec::new()
        } else {
            idle_stretches(ranks, run, min.max(IDLE_MIN_US))
        },
    }
}

/// Where no rank has an event for at least `min` on the run's axis (µs): each rank's own quiet
/// stretches (before its first event and after its last included), intersected across ranks,
/// inside the run's span. One pass over every rank's events.
pub fn idle_stretches(ranks: &[RankInput], run: &RunAnalysis, min: i64) -> Vec<(i64, i64)> {
    let from = run.ranks.iter().filter_map(|f| f.start).min().unwrap_or(0);
    let to = run.ranks.iter().filter_map(|f| f.end).max().unwrap_or(0);
    let mut common = vec![(from, to)];
    for (r, f) in ranks.iter().zip(&run.ranks) {
        let quiet = match r.dev().filter(|d| d.len > 0) {
            None => continue,
            Some(d) => {
                let mut quiet = vec![(i64::MIN, f.start.unwrap_or(from))];
                let mut last = i64::MIN;
                for e in 0..d.len {
                    let t = time_of(r, d, e) - f.offset_us;
                    if last != i64::MIN && t - last >= min {
                        quiet.push((last, t));
                    }
                    last = last.max(t);
                }
                quiet.push((f.end.unwrap_or(to), i64::MAX));
                quiet
            }
        };
        common = intersect(&common, &quiet);
    }
    common.retain(|&(a, b)| b - a >= min);
    common
}

/// The overlaps of two sorted lists of disjoint intervals.
fn intersect(a: &[(i64, i64)], b: &[(i64, i64)]) -> Vec<(i64, i64)> {
    let (mut i, mut j, mut out) = (0, 0, Vec::new());
    while i < a.len() && j < b.len() {
        let (lo, hi) = (a[i].0.max(b[j].0), a[i].1.min(b[j].1));
        if lo < hi {
            out.push((lo, hi));
        }
        if a[i].1 < b[j].1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::analyze;

    fn load(name: &str) -> Snapshot {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/harness")
            .join(name);
        crate::read(std::fs::File::open(path).unwrap()).unwrap()
    }

    /// Ranks 0 and 1, both on device 0 (the harness ran them on one GPU).
    fn two_ranks<'a>(r: [(&'a Snapshot, &'a Index); 2]) -> [RankInput<'a>; 2] {
        [0, 1].map(|k| RankInput {
            rank: k as u32,
            snap: r[k].0,
            index: r[k].1,
            device: 0,
        })
    }

    #[test]
    fn two_ranks_on_one_clock_with_the_failing_rank_first() {
        let (s0, s1) = (load("ranks.rank0.pickle"), load("ranks.rank1.oom.pickle"));
        let (i0, _) = analyze(&s0, &Default::default());
        let (i1, _) = analyze(&s1, &Default::default());
        let ranks = two_ranks([(&s0, &i0), (&s1, &i1)]);
        let run = analyze_run(&ranks);
        assert_eq!(run.alignment, Alignment::Clock);
        assert_eq!((run.heaviest, run.lightest), (Some(1), Some(0)));
        // Planted: rank 1 holds 2 GiB more (512 MiB weights + 4 × 64 MiB activations on both).
        assert_eq!(run.ranks[0].peak_live_bytes, 768 << 20);
        assert_eq!(run.ranks[1].peak_live_bytes, (768 << 20) + (2 << 30));
        assert_eq!(run.oom_order.len(), 1);
        assert_eq!(run.oom_order[0].0, 1);
        assert!(run.oom_order_known);
        let diff = imbalance(&ranks, &run, 5).unwrap();
        let top = &diff.sites_at_peak[0];
        assert_eq!(top.delta_bytes, 2 << 30);
        assert!(
            top.site
                .as_ref()
                .is_some_and(|f| f.filename.ends_with("scenarios.py") && f.line == 301),
            "{:?}",
            top.site
        );

        let s = series(&ranks, &run, 50);
        assert_eq!(s.ranks.len(), 2);
        let max_live = |v: &Vec<Option<(u64, u64)>>| v.iter().flatten().map(|p| p.0).max();
        assert_eq!(max_live(&s.ranks[0]), Some(768 << 20));
        assert_eq!(max_live(&s.ranks[1]), Some((768 << 20) + (2 << 30)));
    }

    /// Idle stretches against every rank's event times on the run's axis, merged and sorted
    /// here: every gap of at least `min` between consecutive events of the run is one, and no
    /// other.
    fn check_idle(ranks: &[RankInput], run: &RunAnalysis, min: i64) -> Vec<(i64, i64)> {
        let mut times: Vec<i64> = Vec::new();
        for (r, f) in ranks.iter().zip(&run.ranks) {
            let d = r.dev().unwrap();
            times.extend((0..d.len).map(|e| time_of(r, d, e) - f.offset_us));
        }
        times.sort_unstable();
        let gaps: Vec<(i64, i64)> = times
            .windows(2)
            .filter(|w| w[1] - w[0] >= min)
            .map(|w| (w[0], w[1]))
            .collect();
        assert_eq!(idle_stretches(ranks, run, min), gaps);
        gaps
    }

    #[test]
    fn idle_stretches_are_where_no_rank_has_an_event() {
        let pending = |name: &str| {
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../tests/fixtures/pending")
                .join(name);
            crate::read(std::fs::File::open(path).unwrap()).unwrap()
        };
        let (s0, s1) = (load("ranks.rank0.pickle"), load("ranks.rank1.oom.pickle"));
        let (p0, p1) = (
            pending("pending_one_side.pickle"),
            pending("pending_two_sides.pickle"),
        );
        let idx = |s: &Snapshot| analyze(s, &Default::default()).0;
        let (i0, i1, j0, j1) = (idx(&s0), idx(&s1), idx(&p0), idx(&p1));
        let mut found = 0;
        for pair in [
            [(&s0, &i0), (&s1, &i1)],
            [(&p0, &j0), (&p1, &j1)],
            [(&p0, &j0), (&p0, &j0)],
        ] {
            let ranks = two_ranks(pair);
            let run = analyze_run(&ranks);
            for min in [1_000, 10_000, 50_000] {
                found += check_idle(&ranks, &run, min).len();
            }
            let s = series(&ranks, &run, 100);
            let min = (((s.to - s.from) as f64 * IDLE_SHARE).ceil() as i64).max(IDLE_MIN_US);
            assert_eq!(s.idle, check_idle(&ranks, &run, min));
        }
        // The side stream kept busy 30–90 ms between allocations leaves stretches.
        assert!(found > 5, "{found}");
        // The same rank twice is idle exactly where it alone is.
        let one = two_ranks([(&p0, &j0), (&p0, &j0)]);
        let run = analyze_run(&one);
        let alone = idle_stretches(&one[..1], &run, 10_000);
        assert!(!alone.is_empty());
        assert_eq!(
            idle_stretches(&one, &run, 10_000),
            alone,
            "the same rank twice"
        );
    }

    #[test]
    fn clocks_that_disagree_align_on_the_first_shared_step_mark() {
        let s0 = load("ranks.rank0.pickle");
        let mut s1 = load("ranks.rank1.oom.pickle");
        // Rank 1's clock an hour ahead: the traces no longer overlap.
        let hour = 3_600_000_000i64;
        let shifted: crate::packed::Packed<i64> = s1
            .trace
            .time_us
            .iter_range(0..s1.trace.len())
            .map(|t| t + hour)
            .collect();
        s1.trace.time_us = shifted;
        for a in &mut s1.annotations {
            a.time_us += hour;
        }
        let (i0, _) = analyze(&s0, &Default::default());
        let (i1, _) = analyze(&s1, &Default::default());
        let ranks = two_ranks([(&s0, &i0), (&s1, &i1)]);
        let run = analyze_run(&ranks);
        assert_eq!(
            run.alignment,
            Alignment::Mark {
                name: "ProfilerStep#0".into()
            }
        );
        // Both started their step 0 within a second of each other on the real clock.
        assert!(
            (run.ranks[1].offset_us - hour).abs() < 1_000_000,
            "{}",
            run.ranks[1].offset_us
        );
        assert!(run.oom_order_known);
    }
}
