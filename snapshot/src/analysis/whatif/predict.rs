//! Will it fit (issue 36): the peak memory of a run at a size never recorded (a larger batch, a
//! longer sequence), from two or three recordings of the same program at small sizes, and whether
//! it raises under a limit.
//!
//! The recordings' allocations are matched to each other by call site and order (the k-th
//! allocation made under a stack in one is the k-th made under the same frames in the other:
//! a training step makes the same requests in the same order whatever its batch); each matched
//! request's size is fitted against the size parameter (constant; the square of the size, when
//! every recording is exactly so; or affine: least squares over the recordings, with what fits
//! no line within 1% counted and said); the request sequence of
//! the recording nearest the size asked is synthesized at that size and replayed through the model of
//! PyTorch's caching allocator under the setting and limit asked ([`super::allocator`]), so
//! rounding, splitting, caching and a limit's retries shape the peak as they would for real. New
//! segments take the addresses the synthesized recording's segments had, in order: best fit
//! breaks ties by address (placed by the driver's habit instead, the recording's own size
//! replayed 0.6% off).
//! A request PyTorch recovers from when it fails (cuDNN's workspace for one convolution plan:
//! another plan is tried) is skipped and counted, as the run goes on; any other failure raises.
//! A straight line through the recordings' own peaks is the baseline the replay must beat.

use rustc_hash::FxHashMap;

use super::allocator::{Allocator, Limit};
use super::conf::AllocConf;
use crate::analysis::categories;
use crate::analysis::index::{DeviceIndex, Index, NONE};
use crate::analysis::labels::Category;
use crate::model::{Action, Snapshot, StackId};

/// One recording and the size it was made at.
#[derive(Clone, Copy)]
pub struct Recording<'a> {
    pub snap: &'a Snapshot,
    pub index: &'a Index,
    pub device: i32,
    pub size: f64,
}

/// How one request's size depends on the size parameter.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SizeRule {
    /// The same in every recording.
    Constant(u64),
    /// `bytes + slope × (size − at)`; `fits` when every recording lies within 1% of the line.
    Affine {
        at: f64,
        bytes: f64,
        slope: f64,
        fits: bool,
    },
    /// `per_unit2 × size²`: every recording exactly so (attention scores, `B·H·S²`, by sequence
    /// length), which a line through two points would take for a steep line.
    Square { per_unit2: f64 },
    /// Made in the synthesized recording alone (the program's path depends on the size): kept
    /// at its size there.
    Unmatched(u64),
}

impl SizeRule {
    /// The request's bytes at `size`.
    pub fn at(&self, size: f64) -> u64 {
        match *self {
            SizeRule::Constant(b) | SizeRule::Unmatched(b) => b,
            SizeRule::Square { per_unit2 } => (per_unit2 * size * size).round().max(1.0) as u64,
            SizeRule::Affine {
                at, bytes, slope, ..
            } => (bytes + slope * (size - at)).round().max(1.0) as u64,
        }
    }
}

/// One step of the synthesized run: a request (by index into the rules) or its free.
#[derive(Clone, Copy, Debug)]
enum Step {
    /// A request, at this position of the synthesized recording.
    Alloc {
        request: u32,
        stream: u64,
        position: u32,
        /// cuDNN's workspace for one plan: when it cannot be had, cuDNN tries another plan
        /// (`try_plans` catches `OutOfMemoryError`), the run goes on.
        survivable: bool,
    },
    Free {
        request: u32,
    },
}

/// What was learnt from the recordings.
pub struct Model {
    steps: Vec<Step>,
    /// Each request's stack in the synthesized recording.
    stacks: Vec<Option<StackId>>,
    pub rules: Vec<SizeRule>,
    /// The recordings' sizes and their own peak reserved bytes (the linear baseline's points).
    pub points: Vec<(f64, u64)>,
    /// The synthesized recording's steps.
    steps_of: Option<crate::analysis::index::Steps>,
    /// The synthesized recording's segment events: where the driver put its segments.
    placement: Vec<super::allocator::SegEvent>,
}

/// Why a request's size at another size is a guess.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unmodelled {
    /// Its sizes follow no line (nor the square): grown as between the two largest recordings.
    NoRule,
    /// Not made in enough recordings to fit (a kernel that needs scratch only from some size
    /// on): kept at its size in the recording synthesized.
    OnlyHere,
}

/// The call sites whose requests could not be modelled, by bytes in the recording synthesized.
#[derive(Clone, Debug, PartialEq)]
pub struct UnmodelledSite {
    pub stack: StackId,
    pub why: Unmodelled,
    pub requests: u32,
    pub bytes: u64,
}

impl Model {
    /// The call sites of the requests not modelled, the most bytes first.
    pub fn unmodelled(&self) -> Vec<UnmodelledSite> {
        let mut by: FxHashMap<(u32, bool), UnmodelledSite> = FxHashMap::default();
        for (rule, stack) in self.rules.iter().zip(&self.stacks) {
            let (why, bytes) = match *rule {
                SizeRule::Unmatched(b) => (Unmodelled::OnlyHere, b),
                SizeRule::Affine {
                    fits: false, bytes, ..
                } => (Unmodelled::NoRule, bytes.max(0.0) as u64),
                _ => continue,
            };
            let Some(stack) = *stack else { continue };
            let e = by
                .entry((stack.0, why == Unmodelled::NoRule))
                .or_insert(UnmodelledSite {
                    stack,
                    why,
                    requests: 0,
                    bytes: 0,
                });
            e.requests += 1;
            e.bytes += bytes;
        }
        let mut out: Vec<UnmodelledSite> = by.into_values().collect();
        out.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.stack.0.cmp(&b.stack.0)));
        out
    }

    pub fn unmatched(&self) -> usize {
        self.rules
            .iter()
            .filter(|r| matches!(r, SizeRule::Unmatched(_)))
            .count()
    }
    pub fn without_rule(&self) -> usize {
        self.rules
            .iter()
            .filter(|r| matches!(r, SizeRule::Affine { fits: false, .. }))
            .count()
    }

    /// A straight line through the recordings' peak reserved bytes, at `size` (least squares).
    pub fn linear_peak_reserved(&self, size: f64) -> u64 {
        let xs: Vec<(f64, f64)> = self.points.iter().map(|&(x, y)| (x, y as f64)).collect();
        let (slope, at, mean) = least_squares(&xs);
        (mean + slope * (size - at)).round().max(0.0) as u64
    }
}

/// The replay of the synthesized run at one size.
#[derive(Clone, Debug, PartialEq)]
pub struct Prediction {
    pub size: f64,
    pub peak_reserved_bytes: u64,
    pub peak_allocated_bytes: u64,
    /// A request the allocator could not satisfy under the limit: the run raises.
    pub oom: bool,
    /// Which request (in the synthesized run's order) failed.
    pub oom_request: Option<u32>,
    /// Requests that failed and were recovered from (cuDNN workspaces: another plan is tried).
    pub survivable_ooms: u32,
    /// The step it failed in, where the synthesized recording shows steps.
    pub oom_step: Option<u32>,
}

/// Why nothing can be learnt.
#[derive(Debug, PartialEq, Eq)]
pub enum PredictError {
    TooFewRecordings,
    SameSizes,
    NoTrace(i32),
}

impl std::fmt::Display for PredictError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PredictError::TooFewRecordings => f.write_str(
                "two recordings at different sizes are needed (three tell a line from a curve)",
            ),
            PredictError::SameSizes => {
                f.write_str("the recordings are at the same size: nothing to learn the growth from")
            }
            PredictError::NoTrace(d) => write!(
                f,
                "device {d} of a recording has no trace: record it with torch.cuda.memory._record_memory_history"
            ),
        }
    }
}

/// A stack's frames as one key that holds across snapshots (their ids do not); `lines: false`
/// leaves the line numbers out (recordings made while the script was being edited).
fn stack_keys(snap: &Snapshot, lines: bool) -> Vec<u64> {
    use std::hash::{Hash, Hasher};
    (0..snap.stacks.len() as u32)
        .map(|s| {
            let mut h = rustc_hash::FxHasher::default();
            for &f in snap.stack(StackId(s)) {
                let fr = snap.frame(f);
                snap.str(fr.filename).hash(&mut h);
                snap.str(fr.name).hash(&mut h);
                if lines {
                    fr.line.hash(&mut h);
                }
            }
            h.finish()
        })
        .collect()
}

/// Frames of allocations whose failure PyTorch catches: cuDNN's workspace for one convolution
/// plan (`run_conv_plan` under `try_plans`/`try_configs` and the benchmark cache's retry in
/// `aten/src/ATen/native/cudnn/Conv_v8.cpp`; `Workspace` in `Conv_v7.cpp`'s algorithm loop).
/// Only stacks recorded with C++ frames (`stacks="all"`) show them.
const SURVIVABLE_FRAMES: [&str; 2] = ["at::native::run_conv_plan", "Workspace::Workspace"];

/// Which stacks make requests whose failure the run survives.
fn survivable_stacks(snap: &Snapshot) -> Vec<bool> {
    (0..snap.stacks.len() as u32)
        .map(|s| {
            snap.stack(StackId(s)).iter().any(|&f| {
                let name = snap.str(snap.frame(f).name);
                SURVIVABLE_FRAMES.iter().any(|w| name.contains(w))
            })
        })
        .collect()
}

/// The stack key of allocations made before the trace (they have no stack).
const PRE_TRACE_KEY: u64 = u64::MAX;

/// A request across recordings: its stack's key and how many requests that stack made before it.
type RequestKey = (u64, u32);

/// A recording's requests in order (key and bytes), their streams, and the steps (allocs and
/// frees by request index).
struct Requests {
    keyed: Vec<(RequestKey, u64)>,
    /// Each request's stack (none for those made before the trace).
    stacks: Vec<Option<StackId>>,
    /// Requests per stack key: recordings whose counts differ for a stack are not matched on it.
    counts: FxHashMap<u64, u32>,
    /// The same by stacks without line numbers, where the exact stack finds no match.
    loose: Vec<RequestKey>,
    loose_counts: FxHashMap<u64, u32>,
    steps: Vec<Step>,
}

impl Requests {
    /// Request sizes by key, on the stacks that make as many requests here as in `base`.
    fn matchable(
        &self,
        base: &Requests,
    ) -> (FxHashMap<RequestKey, u64>, FxHashMap<RequestKey, u64>) {
        let exact = self
            .keyed
            .iter()
            .copied()
            .filter(|(k, _)| self.counts.get(&k.0) == base.counts.get(&k.0))
            .collect();
        let loose = self
            .loose
            .iter()
            .zip(&self.keyed)
            .filter(|(k, _)| self.loose_counts.get(&k.0) == base.loose_counts.get(&k.0))
            .map(|(k, (_, bytes))| (*k, *bytes))
            .collect();
        (exact, loose)
    }
}

fn requests(r: &Recording, d: &DeviceIndex) -> Requests {
    let keys = stack_keys(r.snap, true);
    let loose_keys = stack_keys(r.snap, false);
    let survivable = survivable_stacks(r.snap);
    let t = &r.snap.trace;
    let mut seen: FxHashMap<u64, u32> = FxHashMap::default();
    let mut loose_seen: FxHashMap<u64, u32> = FxHashMap::default();
    let mut request_of: FxHashMap<u32, u32> = FxHashMap::default();
    let mut out = Requests {
        keyed: Vec::new(),
        stacks: Vec::new(),
        counts: FxHashMap::default(),
        loose: Vec::new(),
        loose_counts: FxHashMap::default(),
        steps: Vec::new(),
    };
    // Allocations made before the trace (history turned on after the model was built): made
    // first, in address order, under a key of their own, so the run synthesized at another size
    // holds them too (matched across recordings by that order).
    let mut pre: Vec<&crate::analysis::index::PreTrace> = d.pre_trace.iter().collect();
    pre.sort_by_key(|p| p.addr);
    for (k, p) in pre.iter().enumerate() {
        let request = out.keyed.len() as u32;
        out.keyed.push(((PRE_TRACE_KEY, k as u32), p.size));
        out.stacks.push(None);
        out.loose.push((PRE_TRACE_KEY, k as u32));
        request_of.insert(p.id, request);
        out.steps.push(Step::Alloc {
            request,
            stream: p.stream,
            position: 0,
            survivable: false,
        });
    }
    if !pre.is_empty() {
        seen.insert(PRE_TRACE_KEY, pre.len() as u32);
        loose_seen.insert(PRE_TRACE_KEY, pre.len() as u32);
    }
    let mut events = d.event_allocation.reader();
    for p in 0..d.len {
        let a = events.get(p);
        if a == NONE {
            continue;
        }
        let al = &d.allocations[a as usize];
        let row = d.row(p);
        match t.action[row] {
            Action::Alloc if al.start == p => {
                let stack = t.stack.get(row);
                let key = keys.get(stack.0 as usize).copied().unwrap_or(0);
                let n = seen.entry(key).or_default();
                let request = out.keyed.len() as u32;
                out.keyed.push(((key, *n), t.size.get(row)));
                out.stacks.push(Some(stack));
                *n += 1;
                let loose = loose_keys.get(stack.0 as usize).copied().unwrap_or(0);
                let n = loose_seen.entry(loose).or_default();
                out.loose.push((loose, *n));
                *n += 1;
                request_of.insert(a, request);
                out.steps.push(Step::Alloc {
                    request,
                    stream: t.stream(row),
                    position: p,
                    survivable: survivable.get(stack.0 as usize) == Some(&true),
                });
            }
            Action::FreeCompleted if al.end == p => {
                if let Some(&request) = request_of.get(&a) {
                    out.steps.push(Step::Free { request });
                }
            }
            _ => {}
        }
    }
    out.counts = seen;
    out.loose_counts = loose_seen;
    out
}

/// Least squares through `(x, y)`: (slope, mean x, mean y).
fn least_squares(points: &[(f64, f64)]) -> (f64, f64, f64) {
    let n = points.len().max(1) as f64;
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let slope = if sxx > 0.0 { sxy / sxx } else { 0.0 };
    (slope, mx, my)
}

/// Learns each request's size rule from the recordings; the largest is the one synthesized.
pub fn learn(recordings: &[Recording]) -> Result<Model, PredictError> {
    learn_near(recordings, f64::INFINITY)
}

/// The recording whose size is nearest `size` (the larger of two as near): the one synthesized
/// at `size`, so that a size recorded is its own recording replayed and one between two
/// recordings changes least of what was seen.
pub fn nearest(recordings: &[Recording], size: f64) -> usize {
    (0..recordings.len())
        .min_by(|&a, &b| {
            let (da, db) = (
                (recordings[a].size - size).abs(),
                (recordings[b].size - size).abs(),
            );
            da.total_cmp(&db)
                .then(recordings[b].size.total_cmp(&recordings[a].size))
        })
        .unwrap_or(0)
}

/// Learns each request's size rule from the recordings, synthesizing the one nearest `size`.
pub fn learn_near(recordings: &[Recording], size: f64) -> Result<Model, PredictError> {
    if recordings.len() < 2 {
        return Err(PredictError::TooFewRecordings);
    }
    let mut parsed = Vec::with_capacity(recordings.len());
    let mut points = Vec::new();
    for r in recordings {
        let d = r
            .index
            .device(r.device)
            .filter(|d| d.len > 0)
            .ok_or(PredictError::NoTrace(r.device))?;
        points.push((r.size, d.peak_reserved()));
        parsed.push(requests(r, d));
    }
    let base = nearest(recordings, size);
    if recordings.iter().all(|r| r.size == recordings[base].size) {
        return Err(PredictError::SameSizes);
    }
    // Each other recording, matched on the stacks it makes as many requests under as the
    // synthesized one does (a kernel chosen by size may add or drop a few), exactly or else
    // without line numbers.
    type Sizes = FxHashMap<RequestKey, u64>;
    let others: Vec<(f64, Sizes, Sizes)> = parsed
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != base)
        .map(|(i, q)| {
            let (exact, loose) = q.matchable(&parsed[base]);
            (recordings[i].size, exact, loose)
        })
        .collect();
    let x0 = recordings[base].size;
    let rules = parsed[base]
        .keyed
        .iter()
        .zip(&parsed[base].loose)
        .map(|(&(key, bytes), loose)| {
            let matched: Vec<(f64, u64)> = others
                .iter()
                .filter_map(|(x, exact, by_loose)| {
                    Some((*x, *exact.get(&key).or_else(|| by_loose.get(loose))?))
                })
                .collect();
            // Made in only some recordings (a kernel that needs scratch only from some size
            // on, like a reduction's staging buffer, which grows and then saturates): a line
            // through two points it cannot be checked on; kept at its size here. (Extrapolated
            // instead, the transformer's 64 came out 5.8% over, the LSTM's 48 38% over.)
            if matched.len() < others.len() && matched.len() < 2 {
                return SizeRule::Unmatched(bytes);
            }
            rule(x0, bytes, matched.into_iter())
        })
        .collect();
    let r = &recordings[base];
    let steps_of = r
        .index
        .device(r.device)
        .and_then(|d| crate::analysis::steps::steps(r.snap, r.index, d));
    let placement = r
        .index
        .device(r.device)
        .map(|d| super::replay::Trace::new(r.snap, r.index, d).recorded)
        .unwrap_or_default();
    Ok(Model {
        steps: std::mem::take(&mut parsed[base].steps),
        stacks: std::mem::take(&mut parsed[base].stacks),
        rules,
        points,
        steps_of,
        placement,
    })
}

/// A request's rule from its bytes in the synthesized recording (at `x0`) and the others it was
/// matched in. Sizes that follow no line (cuDNN choosing another algorithm, and workspace, at
/// another batch) grow as they did between the two largest recordings.
fn rule(x0: f64, bytes: u64, others: impl Iterator<Item = (f64, u64)>) -> SizeRule {
    let mut pts = vec![(x0, bytes as f64)];
    pts.extend(others.map(|(x, b)| (x, b as f64)));
    if pts.len() < 2 {
        return SizeRule::Unmatched(bytes);
    }
    if pts.iter().all(|p| p.1 == bytes as f64) {
        return SizeRule::Constant(bytes);
    }
    let close = |want: f64, got: f64| (want - got).abs() <= 0.01 * got.max(512.0);
    // Exactly proportional to the size squared (and not to the size): two points are enough.
    let k = bytes as f64 / (x0 * x0);
    if x0 > 0.0
        && pts.iter().all(|p| close(k * p.0 * p.0, p.1))
        && !pts.iter().all(|p| close(bytes as f64 / x0 * p.0, p.1))
    {
        return SizeRule::Square { per_unit2: k };
    }
    let (slope, mx, my) = least_squares(&pts);
    let fits = pts.iter().all(|p| close(my + slope * (p.0 - mx), p.1));
    if !fits {
        // The growth between the two largest recordings, the nearest to the sizes asked.
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        let (lo, hi) = (pts[pts.len() - 2], pts[pts.len() - 1]);
        return SizeRule::Affine {
            at: hi.0,
            bytes: hi.1,
            slope: (hi.1 - lo.1) / (hi.0 - lo.0),
            fits,
        };
    }
    SizeRule::Affine {
        at: mx,
        bytes: my,
        slope,
        fits,
    }
}

/// The synthesized run at `size`, replayed under `conf` and `limit`. A request the allocator
/// cannot satisfy ends the run (the program would raise `OutOfMemoryError`).
pub fn predict(model: &Model, size: f64, conf: &AllocConf, limit: Option<Limit>) -> Prediction {
    let mut a = Allocator::new(conf.clone(), limit);
    a.seed_with(model.placement.clone());
    a.seed_in_order = true;
    let mut live: Vec<u32> = vec![NONE; model.rules.len()];
    let mut oom_request = None;
    let mut survivable_ooms = 0;
    for step in &model.steps {
        match *step {
            Step::Alloc {
                request,
                stream,
                position,
                survivable,
            } => {
                let bytes = model.rules[request as usize].at(size);
                match a.malloc(bytes, stream, (0, 0)) {
                    Some(b) => live[request as usize] = b,
                    None if survivable => survivable_ooms += 1,
                    None => {
                        oom_request = Some((request, position));
                        break;
                    }
                }
            }
            Step::Free { request } => {
                let b = std::mem::replace(&mut live[request as usize], NONE);
                if b != NONE {
                    a.free(b, false);
                }
            }
        }
    }
    Prediction {
        size,
        peak_reserved_bytes: a.stats.peak_reserved_bytes,
        peak_allocated_bytes: a.stats.peak_allocated_bytes,
        oom: oom_request.is_some(),
        oom_request: oom_request.map(|r| r.0),
        survivable_ooms,
        oom_step: oom_request.and_then(|r| model.steps_of.as_ref()?.number_at(r.1)),
    }
}

/// One size's answer.
#[derive(Clone, Debug, PartialEq)]
pub struct SizeAnswer {
    pub prediction: Prediction,
    /// The limit less the peak reserved bytes (negative: it does not fit), with a limit.
    pub headroom_bytes: Option<i64>,
    /// The error expected at this size: the worst relative error of predicting each recording
    /// from the others (three or more recordings), times the predicted peak.
    pub error_bytes: Option<u64>,
    /// A line through the recordings' own peaks, at this size (the baseline).
    pub linear_peak_reserved_bytes: u64,
}

/// `memscope predict`'s answer.
#[derive(Clone, Debug, PartialEq)]
pub struct Answer {
    pub sizes: Vec<SizeAnswer>,
    /// The largest size that fits under the limit (searched when no size was asked; among the
    /// sizes asked otherwise).
    pub largest_fitting_size: Option<f64>,
    pub requests: usize,
    pub unmatched: usize,
    pub without_rule: usize,
    /// The worst relative error of predicting each recording from the others.
    pub expected_error: Option<f64>,
    pub recorded: Vec<(f64, u64)>,
    /// What grows with the size: each category's bytes at the recordings' peaks, fitted.
    pub growth: Vec<Growth>,
    /// The call sites whose requests could not be modelled, in the largest recording
    /// (`recordings[largest]`), the most bytes first.
    pub unmodelled: Vec<UnmodelledSite>,
    pub largest: usize,
}

/// One category's share of the growth: bytes alive at each recording's peak (highest live
/// bytes), a line through them.
#[derive(Clone, Debug, PartialEq)]
pub struct Growth {
    pub category: Category,
    /// Bytes more per unit of size (least squares over the recordings).
    pub bytes_per_unit: f64,
    /// Bytes of the category at the largest recording's peak.
    pub at_largest_bytes: u64,
}

/// Each category's growth across the recordings, the fastest first (those that do not grow
/// left out).
pub fn growth(recordings: &[Recording]) -> Vec<Growth> {
    let totals: Vec<(f64, categories::Totals)> = recordings
        .iter()
        .filter_map(|r| {
            let d = r.index.device(r.device)?;
            Some((
                r.size,
                categories::totals_at(r.snap, r.index, d, d.peak_position),
            ))
        })
        .collect();
    let largest = nearest(recordings, f64::INFINITY);
    let mut out: Vec<Growth> = Category::ALL
        .into_iter()
        .map(|c| {
            let pts: Vec<(f64, f64)> = totals.iter().map(|(x, t)| (*x, t.get(c) as f64)).collect();
            Growth {
                category: c,
                bytes_per_unit: least_squares(&pts).0,
                at_largest_bytes: totals.get(largest).map_or(0, |t| t.1.get(c)),
            }
        })
        .filter(|g| g.bytes_per_unit > 0.0)
        .collect();
    out.sort_by(|a, b| b.bytes_per_unit.total_cmp(&a.bytes_per_unit));
    out
}

/// Predicts every size of `sizes` from the recordings; with a limit and `search` (or no sizes),
/// also searches for the largest size that fits.
pub fn answer(
    recordings: &[Recording],
    sizes: &[f64],
    search_too: bool,
    conf: &AllocConf,
    limit: Option<Limit>,
) -> Result<Answer, PredictError> {
    // One model per recording synthesized (the nearest to each size), learnt when first asked.
    let mut models: Vec<Option<Model>> = (0..recordings.len()).map(|_| None).collect();
    let model = learn(recordings)?;
    let largest = nearest(recordings, f64::INFINITY);
    let expected_error = leave_one_out(recordings, conf);
    let mut one = |size: f64| {
        let base = nearest(recordings, size);
        let m = if base == largest {
            &model
        } else {
            models[base].get_or_insert_with(|| {
                learn_near(recordings, size).expect("learnt once from the same recordings")
            })
        };
        let p = predict(m, size, conf, limit);
        SizeAnswer {
            headroom_bytes: limit.map(|l| l.bytes as i64 - p.peak_reserved_bytes as i64),
            error_bytes: expected_error.map(|e| (e * p.peak_reserved_bytes as f64).round() as u64),
            linear_peak_reserved_bytes: model.linear_peak_reserved(size),
            prediction: p,
        }
    };
    let mut out: Vec<SizeAnswer> = sizes.iter().map(|&s| one(s)).collect();
    let largest_fitting_size = if (search_too || sizes.is_empty()) && limit.is_some() {
        let largest = recordings.iter().map(|r| r.size).fold(1.0, f64::max);
        let bytes = limit.map_or(u64::MAX, |l| l.bytes);
        let found = search(
            |s| !predict(&model, s, conf, limit).oom,
            |s| predict(&model, s, conf, None).peak_allocated_bytes > bytes,
            largest,
        );
        if let Some(s) = found {
            for s in [s, s + 1.0] {
                if !sizes.contains(&s) {
                    out.push(one(s));
                }
            }
            out.sort_by(|a, b| a.prediction.size.total_cmp(&b.prediction.size));
        }
        found
    } else {
        out.iter()
            .filter(|a| !a.prediction.oom)
            .map(|a| a.prediction.size)
            .max_by(f64::total_cmp)
    };
    Ok(Answer {
        sizes: out,
        largest_fitting_size,
        requests: model.rules.len(),
        unmatched: model.unmatched(),
        without_rule: model.without_rule(),
        expected_error,
        recorded: model.points.clone(),
        growth: growth(recordings),
        unmodelled: model.unmodelled(),
        largest,
    })
}

/// The size each name says it was recorded at, when the names differ in exactly one number
/// (`gpt.b8.pickle`, `gpt.b16.pickle` → 8, 16): how a folder of recordings, or the dashboard's
/// first guess, gets its sizes.
pub fn guess_sizes(names: &[&str]) -> Vec<Option<u64>> {
    let numbers: Vec<Vec<u64>> = names
        .iter()
        .map(|n| {
            n.split(|c: char| !c.is_ascii_digit())
                .filter_map(|d| d.parse().ok())
                .collect()
        })
        .collect();
    // The same name around the numbers (one program's recordings, not a folder of several).
    let words = |n: &str| -> Vec<String> {
        n.split(|c: char| c.is_ascii_digit())
            .filter(|w| !w.is_empty())
            .map(str::to_string)
            .collect()
    };
    let same_shape = numbers.windows(2).all(|w| w[0].len() == w[1].len())
        && names.windows(2).all(|w| words(w[0]) == words(w[1]));
    let differing: Vec<usize> = match numbers.first() {
        Some(first) if same_shape && names.len() >= 2 => (0..first.len())
            .filter(|&i| numbers.iter().any(|n| n[i] != first[i]))
            .collect(),
        _ => Vec::new(),
    };
    match differing.as_slice() {
        [i] => numbers
            .iter()
            .map(|n| Some(n[*i]).filter(|s| *s > 0))
            .collect(),
        _ => vec![None; names.len()],
    }
}

/// Sizes tried between 1 and the bound when searching (then the gap above the largest that fits
/// is halved).
const SCAN: u32 = 32;

/// The largest whole size that fits. The peak is not monotonic in the size (a size can raise
/// below one that fits: rounding, splitting and reuse change with the requests), so sizes are
/// scanned rather than bisected from the start: up to where the live bytes alone, which only grow
/// with the size, exceed the limit (`over`, doubling from `from`), in [`SCAN`] steps; then the gap
/// above the largest that fits is halved (a size that fits within it above one that does not is
/// not looked for).
fn search(fits: impl Fn(f64) -> bool, over: impl Fn(f64) -> bool, from: f64) -> Option<f64> {
    let mut bound = from.floor().max(1.0);
    while !over(bound) {
        bound *= 2.0;
        if bound > 1e9 {
            break;
        }
    }
    let step = |i: u32| (bound * i as f64 / SCAN as f64).round().max(1.0);
    let (mut lo, mut hi) = (None, bound + 1.0);
    for i in (1..=SCAN).rev() {
        let s = step(i);
        if fits(s) {
            lo = Some(s);
            break;
        }
        hi = s;
    }
    let mut lo = lo?;
    while hi - lo > 1.0 {
        let mid = ((lo + hi) / 2.0).floor();
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Some(lo)
}

/// With three recordings or more: each one's peak reserved predicted from the others, the worst
/// relative error.
fn leave_one_out(recordings: &[Recording], conf: &AllocConf) -> Option<f64> {
    if recordings.len() < 3 {
        return None;
    }
    let mut worst = 0.0f64;
    for i in 0..recordings.len() {
        let others: Vec<Recording> = recordings
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, r)| *r)
            .collect();
        let model = learn(&others).ok()?;
        let r = &recordings[i];
        let actual = r.index.device(r.device)?.peak_reserved() as f64;
        let p = predict(&model, r.size, conf, None).peak_reserved_bytes as f64;
        worst = worst.max((p / actual.max(1.0) - 1.0).abs());
    }
    Some(worst)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_size_is_guessed_only_where_the_names_differ_in_one_number() {
        assert_eq!(
            guess_sizes(&["gpt2.b8.v3.pickle", "gpt2.b16.v3.pickle"]),
            vec![Some(8), Some(16)]
        );
        assert_eq!(
            guess_sizes(&["run-a.pickle", "run-b.pickle"]),
            vec![None, None]
        );
        assert_eq!(guess_sizes(&["b8.s128", "b16.s256"]), vec![None, None]);
        assert_eq!(guess_sizes(&["only.8"]), vec![None]);
        assert_eq!(
            guess_sizes(&["convnet.128.pickle", "lstm.16.pickle"]),
            vec![None, None]
        );
    }

    #[test]
    fn sizes_follow_a_constant_a_line_or_the_square() {
        let r = rule(256.0, 4 << 20, [(128.0, 1 << 20)].into_iter());
        assert_eq!(r, SizeRule::Square { per_unit2: 64.0 });
        assert_eq!(r.at(512.0), 16 << 20);
        // Proportional to the size: a line (through the origin), not the square.
        let r = rule(256.0, 2 << 20, [(128.0, 1 << 20)].into_iter());
        assert!(matches!(r, SizeRule::Affine { fits: true, .. }), "{r:?}");
        assert_eq!(r.at(512.0), 4 << 20);
        assert_eq!(
            rule(8.0, 4096, [(4.0, 4096)].into_iter()),
            SizeRule::Constant(4096)
        );
        // A line that does not pass through the origin.
        let r = rule(6.0, 700, [(2.0, 300), (4.0, 500)].into_iter());
        assert_eq!(r.at(10.0), 1100);
    }

    #[test]
    fn the_search_finds_a_size_that_fits_above_sizes_that_do_not() {
        // Raises from 900 to 1900 and from 2100 on; fits at 2000-2099; the live bytes pass the
        // limit at 5000.
        let fits = |s: f64| !((900.0..1900.0).contains(&s) || s >= 2100.0);
        let over = |s: f64| s >= 5000.0;
        assert_eq!(search(fits, over, 768.0), Some(2099.0));
        // Monotonic: the last that fits.
        assert_eq!(search(|s| s <= 1234.0, |s| s > 1500.0, 100.0), Some(1234.0));
        // Nothing fits.
        assert_eq!(search(|_| false, |s| s > 10.0, 4.0), None);
    }
}
