//! What if: one device's trace replayed through a model of PyTorch's caching allocator under
//! other `PYTORCH_CUDA_ALLOC_CONF` settings, to answer "which setting would have saved me, and
//! how much?" with figures, not hints.
//!
//! - [`conf`]: the settings, parsed as PyTorch parses them.
//! - [`allocator`]: the allocator model, rule by rule with the PyTorch function each follows.
//! - [`replay`]: the trace driven through it.
//!
//! Every answer carries a **replay check**: replayed under the settings it was recorded with, the
//! model must make the trace's own segment events (cudaMalloc, cudaFree, page maps and unmaps:
//! same kind, same size, same order) and reach the same peak reserved bytes. Where it does not,
//! the report names the first event where they part and why, so a user knows how far to trust
//! the other runs.
//!
//! The model follows PyTorch 2.x's `c10/cuda/CUDACachingAllocator.cpp` (free sets ordered by
//! stream, size, address; `max_non_split_rounding_mb` and `large_segment_size_mb` where newer
//! releases have them, with their defaults equal to the older constants). What it cannot know
//! from a snapshot: memory held outside PyTorch (a limit comes from the OOM entry or the user),
//! and, for a trace that starts mid-run, the history before it (the replay starts from the
//! segments and live blocks reconstructed for the trace's first event, and says so).

pub mod allocator;
pub mod conf;
pub mod predict;
pub mod replay;

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use serde::Serialize;

use crate::analysis::index::{DeviceIndex, Index};
use crate::cancel::{Cancel, Cancelled};
use crate::model::Snapshot;
use crate::units::human_bytes;
pub use allocator::{Limit, LimitKind, SegAction, SegEvent};
use conf::AllocConf;
use replay::{Releases, Trace};

/// The settings tried when the user names none: PyTorch's defaults, expandable segments, the
/// `max_split_size_mb` and `roundup_power2_divisions` values people are told to try, garbage
/// collection (it acts only under a per-process memory fraction) and combinations.
pub const CANDIDATES: &[&str] = &[
    "",
    "expandable_segments:True",
    "max_split_size_mb:128",
    "max_split_size_mb:256",
    "max_split_size_mb:512",
    "roundup_power2_divisions:4",
    "roundup_power2_divisions:[256:1,512:2,1024:4,>:8]",
    "max_split_size_mb:128,roundup_power2_divisions:4",
    "garbage_collection_threshold:0.8,max_split_size_mb:128",
    "expandable_segments:True,roundup_power2_divisions:4",
];

/// Larger than any device's memory (1 PiB).
const MAX_PLAUSIBLE_BYTES: u64 = 1 << 50;

/// What to replay.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// The device (default: the first with a trace).
    pub device: Option<i32>,
    /// Settings to try; empty: the recorded ones and [`CANDIDATES`].
    pub alloc_confs: Vec<String>,
    /// A memory limit in bytes; default: what the trace's last OOM implies, else none.
    pub limit_bytes: Option<u64>,
    /// What `limit_bytes` is: a per-process memory fraction's allowed bytes
    /// (`fraction × device total`), or (default) what the device could give the process.
    pub limit_is_fraction: bool,
    /// Keep each run's reserved-bytes curve.
    pub curves: bool,
    /// Stops the replays early (the server's client went away).
    pub cancel: Cancel,
    /// Most settings replayed at once, one a thread (0: one per core). Work nobody waits for
    /// yet (the server's background replay) takes one, leaving the others to the user.
    pub threads: usize,
    /// Where the replays report how far they are; its thread count, which
    /// [`Progress::hurry`] raises, replaces `threads`.
    pub progress: Option<std::sync::Arc<Progress>>,
}

#[derive(Clone, Debug, Serialize)]
pub struct WhatIf {
    pub device: i32,
    pub events: u32,
    /// The `PYTORCH_CUDA_ALLOC_CONF` the snapshot was recorded under ("" = PyTorch's defaults).
    pub recorded_alloc_conf: String,
    /// Whether the snapshot records its allocator settings (PyTorch 2.3+); if not, PyTorch's
    /// defaults are assumed for the recorded run.
    pub settings_recorded: bool,
    /// The trace's peak reserved bytes were already reserved at its first event: every run
    /// starts from that state, so no setting can change the peak this trace shows.
    pub peak_before_trace: bool,
    /// The trace starts after the program did (its ring buffer was full): every run starts from
    /// the segments and live blocks reconstructed for its first event.
    pub starts_mid_run: bool,
    /// The trace records no request after its last OOM (the program stopped there): a run that
    /// gets past it is known to fit only as far as the trace goes.
    pub oom_ends_trace: bool,
    /// The OOM the trace ends at was caused by growth (a line whose live bytes grew step over
    /// step holds at least half of what was live): a setting that gets past it only moves the
    /// point where the run fails.
    pub growth_ends_trace: bool,
    pub limit: Option<LimitInfo>,
    pub replay_check: ReplayCheck,
    /// Ranked: runs that fit first, then by peak reserved bytes.
    pub runs: Vec<Run>,
    /// The trace's own figures over time, when curves were asked for.
    pub curves: Option<RecordedCurves>,
}

/// Most points a curve carries: about two per pixel of a wide chart, so a million-event trace
/// answers in kilobytes.
pub const CURVE_POINTS: u32 = 4096;

/// The trace's own reserved and live bytes over its events, for drawing the runs against.
#[derive(Clone, Debug, Serialize)]
pub struct RecordedCurves {
    /// Events per bucket of every curve in the answer (the runs' too): 1, every change where it
    /// happened; more, each point is the highest value within its bucket of that many positions.
    pub bucket_events: u32,
    /// (position, bytes) where the value changed: the value after that many events.
    pub reserved: Vec<(u32, u64)>,
    pub live: Vec<(u32, u64)>,
}

/// Bucket width that keeps a trace of `events` within [`CURVE_POINTS`].
fn bucket_events(events: u32) -> u32 {
    (events + 1).div_ceil(CURVE_POINTS).max(1)
}

/// A step curve ((position, value) where it changed) reduced to buckets of `w` positions, each
/// holding the highest value in effect anywhere in it; equal neighbours merged.
pub fn bucket_max(curve: &[(u32, u64)], w: u32) -> Vec<(u32, u64)> {
    let mut out: Vec<(u32, u64)> = Vec::new();
    let mut push = |p: u32, v: u64| {
        if out.last().is_none_or(|&(_, last)| last != v) {
            out.push((p, v));
        }
    };
    if w <= 1 {
        for &(p, v) in curve {
            push(p, v);
        }
        return out;
    }
    let mut carried: Option<u64> = None;
    let mut i = 0;
    while i < curve.len() {
        let b = curve[i].0 / w;
        // The value from before this bucket holds at its start unless a change lands there.
        let mut m = match carried {
            Some(c) if curve[i].0 != b * w => c,
            _ => 0,
        };
        while i < curve.len() && curve[i].0 / w == b {
            m = m.max(curve[i].1);
            carried = Some(curve[i].1);
            i += 1;
        }
        push(b * w, m);
        // The next bucket holds the last value unless it has changes of its own.
        let next_has_changes = i < curve.len() && curve[i].0 / w == b + 1;
        if let Some(c) = carried
            && !next_has_changes
            && c != m
        {
            push((b + 1) * w, c);
        }
    }
    out
}

/// A series given per position (`at(p)`, p in 0..=events) as its change points.
fn changes(events: u32, at: impl Fn(u32) -> u64) -> Vec<(u32, u64)> {
    let mut out: Vec<(u32, u64)> = Vec::new();
    for p in 0..=events {
        let v = at(p);
        if out.last().is_none_or(|&(_, last)| last != v) {
            out.push((p, v));
        }
    }
    out
}

#[derive(Clone, Debug, Serialize)]
pub struct LimitInfo {
    pub bytes: u64,
    /// A per-process memory fraction stopped the run, or the device had no room (PyTorch's
    /// reservation plus the driver's free memory).
    pub kind: LimitKind,
    pub source: LimitSource,
    pub detail: String,
}

/// Where a what-if's limit comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LimitSource {
    /// Implied by the trace's OOM.
    Oom,
    /// Asked for.
    Given,
}

#[derive(Clone, Debug, Serialize)]
pub struct ReplayCheck {
    pub recorded_segment_events: u32,
    pub matched_segment_events: u32,
    pub first_divergence: Option<Divergence>,
    pub recorded_peak_reserved_bytes: u64,
    pub replayed_peak_reserved_bytes: u64,
    /// `alloc`s replayed, and how many landed at the address the trace says.
    pub allocs: u32,
    pub allocs_at_recorded_address: u32,
    /// Segment events and peak reserved reproduced exactly.
    pub exact: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct Divergence {
    /// Index among the trace's segment events.
    pub segment_event: u32,
    /// Position in the device's trace (0-based event) of the recorded event, if any.
    pub position: Option<u32>,
    pub recorded: Option<SegEventView>,
    pub replayed: Option<SegEventView>,
    pub why: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct SegEventView {
    pub action: SegAction,
    pub address: u64,
    pub size_bytes: u64,
}

impl SegEventView {
    fn of(e: &SegEvent) -> SegEventView {
        SegEventView {
            action: e.action,
            address: e.addr,
            size_bytes: e.size,
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Run {
    pub alloc_conf: String,
    /// The settings the trace was recorded with (exactly one run).
    pub recorded: bool,
    pub limit_bytes: Option<u64>,
    pub peak_reserved_bytes: u64,
    pub peak_allocated_bytes: u64,
    /// cudaMalloc'd segments at the end (`segment.all.current`; expandable segments not counted,
    /// as PyTorch does not).
    pub segments_at_end: u64,
    /// cudaMalloc calls and page maps (`num_device_alloc`).
    pub cuda_mallocs: u64,
    /// cudaFree calls and page unmaps (`num_device_free`).
    pub cuda_frees: u64,
    pub alloc_retries: u64,
    /// Met a fatal OOM under the limit: at a recorded OOM that ended the run and that these
    /// settings do not avoid, or at a request from code where the recorded run never survived
    /// one. "Would have saved this run" means this is false.
    pub oom: bool,
    /// The first fatal OOM.
    pub oom_position: Option<u32>,
    /// OOMs the run would have survived (caught by the program, or workspace fallbacks).
    pub survivable_ooms: u32,
    pub fatal_ooms: u32,
    /// The first OOM of either kind.
    pub first_oom_position: Option<u32>,
    /// Keys of the setting string PyTorch accepts that the model does not simulate (pinned host
    /// memory, `backend:cudaMallocAsync`, …), each with why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub not_simulated: Vec<String>,
    /// Reserved but unallocated bytes when reserved memory peaked.
    pub fragmentation_at_peak: u64,
    /// Peak reserved bytes saved against the recorded run (negative: more).
    pub saving_bytes: i64,
    /// Reserved bytes after each position where they changed, when curves were asked for.
    /// A cudaMalloc or release the model makes inside a request lands on that request's event
    /// (the trace logs its own segment events just before the request), so after every request
    /// the recorded settings' curve equals the trace's own (`curves.reserved`). Bucketed like it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub reserved_curve: Vec<(u32, u64)>,
}

/// How far a what-if has got, for a caller that shows it while it runs.
///
/// The built-in table replays a trace once per setting, about 8 s for a 13M-event trace on two
/// cores, and a person who opens the What if tab should not look at a spinner meanwhile. The
/// replays report here as they go: the events replayed (for a bar), the answer so far (the check
/// and every setting replayed, ranked as the whole answer will be), and whoever waits can ask for
/// more threads ([`Progress::hurry`]) than the background work took.
#[derive(Debug, Default)]
pub struct Progress {
    /// Events replayed so far, over every replay.
    events_replayed: AtomicU64,
    /// Events the whole answer replays (the check, then each other setting's run); 0 until known.
    events_total: AtomicU64,
    /// Threads the replays may use (0: every core); raised by [`Progress::hurry`].
    threads: AtomicUsize,
    /// The answer so far: set when the check is done (no runs yet), each run added as it ends,
    /// and how many runs it will have.
    so_far: Mutex<(Option<WhatIf>, u32)>,
}

/// A look at a [`Progress`].
#[derive(Clone, Debug)]
pub struct Seen {
    pub events_replayed: u64,
    /// 0 until the replays are laid out.
    pub events_total: u64,
    pub settings_replayed: u32,
    /// 0 until the check is done.
    pub settings: u32,
    /// The check and the settings replayed so far, ranked; none before the check is done.
    pub so_far: Option<WhatIf>,
}

impl Progress {
    /// Progress of a what-if that starts on `threads` threads (0: every core).
    pub fn new(threads: usize) -> Progress {
        Progress {
            threads: AtomicUsize::new(threads),
            ..Default::default()
        }
    }

    /// Someone waits for the answer: the replays left run on every core.
    pub fn hurry(&self) {
        self.threads.store(0, Ordering::Relaxed);
    }

    pub(crate) fn threads(&self) -> &AtomicUsize {
        &self.threads
    }

    pub fn seen(&self) -> Seen {
        let (so_far, settings) = self.so_far.lock().expect("progress lock").clone();
        Seen {
            events_replayed: self.events_replayed.load(Ordering::Relaxed),
            events_total: self.events_total.load(Ordering::Relaxed),
            settings_replayed: so_far.as_ref().map_or(0, |w| w.runs.len() as u32),
            settings,
            so_far,
        }
    }

    /// The count the replays add their events to.
    pub(crate) fn events(&self) -> &AtomicU64 {
        &self.events_replayed
    }

    pub(crate) fn plan(&self, events_total: u64) {
        self.events_total.store(events_total, Ordering::Relaxed);
    }

    /// The check is done: the answer so far is `head` (no runs yet), of `settings` runs.
    pub(crate) fn checked(&self, head: WhatIf, settings: u32) {
        *self.so_far.lock().expect("progress lock") = (Some(head), settings);
    }

    /// One more setting replayed.
    pub(crate) fn ran(&self, run: &Run) {
        if let (Some(w), _) = &mut *self.so_far.lock().expect("progress lock") {
            w.runs.push(run.clone());
            rank(&mut w.runs);
        }
    }
}

/// Why a what-if cannot be answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WhatIfError {
    NoTrace(String),
    BadConf(String),
    /// The trace holds figures no device has (a corrupt or hand-edited file).
    Implausible(String),
    /// [`Options::cancel`] fired.
    Cancelled,
}

impl From<Cancelled> for WhatIfError {
    fn from(_: Cancelled) -> WhatIfError {
        WhatIfError::Cancelled
    }
}

impl std::fmt::Display for WhatIfError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WhatIfError::NoTrace(m) | WhatIfError::BadConf(m) | WhatIfError::Implausible(m) => {
                f.write_str(m)
            }
            WhatIfError::Cancelled => Cancelled.fmt(f),
        }
    }
}

impl std::error::Error for WhatIfError {}

/// The device a what-if replays: the one asked for, else the first with a trace.
fn traced_device<'a>(index: &'a Index, opts: &Options) -> Result<&'a DeviceIndex, WhatIfError> {
    let d = match opts.device {
        Some(dev) => index.device(dev).filter(|d| d.len > 0).ok_or_else(|| {
            WhatIfError::NoTrace(format!(
                "device {dev} has no trace to replay (record the snapshot with torch.cuda.memory._record_memory_history())"
            ))
        })?,
        None => index.default_device().filter(|d| d.len > 0).ok_or_else(|| {
            WhatIfError::NoTrace(
                "this snapshot has no trace to replay: record it with torch.cuda.memory._record_memory_history() before the run".into(),
            )
        })?,
    };
    if d.history_off() {
        return Err(WhatIfError::NoTrace(format!(
            "device {}'s trace records no allocation (history was off while its memory was allocated): there is nothing to replay; record the next run with torch.cuda.memory._record_memory_history() before the work starts",
            d.device
        )));
    }
    Ok(d)
}

/// The settings a snapshot was recorded with, parsed, and as the snapshot writes them.
fn recorded_settings(snap: &Snapshot) -> Result<(AllocConf, String), WhatIfError> {
    match &snap.allocator_settings {
        Some(s) => AllocConf::from_snapshot(s).map_err(|e| WhatIfError::BadConf(e.0)),
        None => Ok((AllocConf::default(), String::new())),
    }
}

/// The settings every run replays: the ones asked for (or the candidates), with the recorded
/// ones among them exactly once.
struct Settings {
    confs: Vec<String>,
    parsed: Vec<AllocConf>,
    /// Per setting, the keys the model does not simulate.
    notes: Vec<Vec<String>>,
    /// Which one is the recorded settings.
    recorded: usize,
}

impl Settings {
    fn of(
        opts: &Options,
        recorded_conf: &AllocConf,
        recorded_raw: &str,
    ) -> Result<Settings, WhatIfError> {
        let mut confs: Vec<String> = if opts.alloc_confs.is_empty() {
            CANDIDATES.iter().map(|s| s.to_string()).collect()
        } else {
            opts.alloc_confs.clone()
        };
        let mut parsed = Vec::new();
        let mut notes = Vec::new();
        for c in &confs {
            let p = AllocConf::parse_noting(c).map_err(|e| WhatIfError::BadConf(e.0))?;
            parsed.push(p.conf);
            notes.push(p.not_simulated);
        }
        let recorded = match parsed.iter().position(|c| c == recorded_conf) {
            Some(i) => i,
            None => {
                confs.insert(0, recorded_raw.to_string());
                parsed.insert(0, recorded_conf.clone());
                notes.insert(0, Vec::new());
                0
            }
        };
        Ok(Settings {
            confs,
            parsed,
            notes,
            recorded,
        })
    }
}

/// What a what-if replays and the figures known before any replay: what a person sees at once
/// while the replays run (seconds on a GB-scale trace).
#[derive(Clone, Debug, Serialize)]
pub struct Outline {
    pub device: i32,
    pub events: u32,
    /// Runs the answer will have (the recorded settings among them).
    pub settings: u32,
    pub recorded_peak_reserved_bytes: u64,
    /// The most bytes the trace's live allocations asked for at once. A setting changes only
    /// what is cached around them and how each is rounded up, so no run that makes the trace's
    /// allocations reserves less at its peak: the recorded peak minus this is the most any
    /// setting could save.
    pub live_peak_bytes: u64,
}

/// The [`Outline`] of [`whatif`] with these options, without replaying anything.
pub fn outline(snap: &Snapshot, index: &Index, opts: &Options) -> Result<Outline, WhatIfError> {
    let d = traced_device(index, opts)?;
    let (recorded_conf, recorded_raw) = recorded_settings(snap)?;
    let settings = Settings::of(opts, &recorded_conf, &recorded_raw)?;
    Ok(Outline {
        device: d.device,
        events: d.len,
        settings: settings.confs.len() as u32,
        recorded_peak_reserved_bytes: d.peak_reserved(),
        live_peak_bytes: d.peak_live_bytes,
    })
}

/// Replays the device's trace under the recorded settings (the check) and under each setting
/// asked for (or the candidates), ranked.
pub fn whatif(snap: &Snapshot, index: &Index, opts: &Options) -> Result<WhatIf, WhatIfError> {
    let d = traced_device(index, opts)?;
    let (recorded_conf, recorded_raw) = recorded_settings(snap)?;
    // No device has a petabyte: a size beyond that is a corrupt trace, and the model's address
    // arithmetic is not meant for it.
    let rows = d.first_row as usize..(d.first_row + d.len) as usize;
    if let Some(size) = snap
        .trace
        .size
        .iter_range(rows)
        .find(|&s| s > MAX_PLAUSIBLE_BYTES)
    {
        return Err(WhatIfError::Implausible(format!(
            "the trace asks for {} at once, more than any device has: it cannot be replayed",
            human_bytes(size)
        )));
    }
    let trace = Trace::new(snap, index, d);
    let last_oom = LastOom::of(&trace, &recorded_conf);
    let implied = last_oom
        .as_ref()
        .map(|o| implied_limit(&trace, &recorded_conf, o));
    let limit = match opts.limit_bytes {
        Some(bytes) => Some(LimitInfo {
            bytes,
            kind: if opts.limit_is_fraction {
                LimitKind::Fraction
            } else {
                LimitKind::Device
            },
            source: LimitSource::Given,
            detail: if opts.limit_is_fraction {
                format!(
                    "a per-process memory fraction allowing {} (given)",
                    human_bytes(bytes)
                )
            } else {
                format!(
                    "{} the device could give the process (given)",
                    human_bytes(bytes)
                )
            },
        }),
        None => implied.clone(),
    };
    let as_model = |l: &LimitInfo| Limit {
        bytes: l.bytes,
        kind: l.kind,
    };
    let model_limit = limit.as_ref().map(as_model);
    // The replay check runs under the conditions the trace was recorded in: the given limit if
    // the trace could have run under it (it fitted, and its OOM, if any, would happen under it),
    // else the limit its OOM implies, else none. A limit the trace contradicts is a what-if for
    // every run, not the record.
    let recorded_under = |l: &Limit| {
        l.bytes >= trace.peak_reserved_bytes
            && last_oom.as_ref().is_none_or(|o| l.bytes < o.ceiling())
    };
    let check_limit = match model_limit.filter(recorded_under) {
        Some(l) => Some(l),
        None => implied.as_ref().map(as_model),
    };
    let cancel = &opts.cancel;
    let settings = Settings::of(opts, &recorded_conf, &recorded_raw)?;
    // Nobody watching: only the counters are kept (the answer so far is for a watcher).
    let watched = opts.progress.is_some();
    let progress = match &opts.progress {
        Some(p) => p.clone(),
        None => std::sync::Arc::new(Progress::new(opts.threads)),
    };
    // The check, the recorded settings again when the limit differs, and each other setting.
    let replays = settings.confs.len() as u64 + u64::from(check_limit != model_limit);
    progress.plan(replays * u64::from(d.len));
    let checked = trace.replay(
        recorded_conf.clone(),
        check_limit,
        Releases::Discover,
        cancel,
        progress.events(),
    )?;
    let check = replay_check(&trace, &checked);
    // Where the program emptied the cache itself: every other run does it there too.
    let releases = checked.external_releases.clone();
    // The recorded settings under the limit asked for (the check itself when it is the same).
    let recorded = if check_limit == model_limit {
        checked
    } else {
        trace.replay(
            recorded_conf.clone(),
            model_limit,
            Releases::At(&releases),
            cancel,
            progress.events(),
        )?
    };
    let recorded_peak = recorded.stats.peak_reserved_bytes;
    let w = bucket_events(d.len);
    let head = WhatIf {
        device: d.device,
        events: d.len,
        recorded_alloc_conf: recorded_raw,
        settings_recorded: snap.allocator_settings.is_some(),
        peak_before_trace: d.reserved_at_start > 0
            && crate::analysis::peaks::reserved_peak(d).position == 0,
        starts_mid_run: trace.starts_mid_run(),
        oom_ends_trace: trace.oom_ends_trace(),
        growth_ends_trace: trace.oom_ends_trace() && growth_at_last_oom(snap, index, d),
        limit,
        replay_check: check,
        runs: Vec::new(),
        curves: opts.curves.then(|| RecordedCurves {
            bucket_events: w,
            reserved: bucket_max(
                &std::iter::once((0, d.reserved_at_start))
                    .chain(d.reserved_changes.iter().copied())
                    .collect::<Vec<_>>(),
                w,
            ),
            live: bucket_max(&changes(d.len, |p| d.live_at(p)), w),
        }),
    };
    if watched {
        progress.checked(head.clone(), settings.confs.len() as u32);
    }
    // The settings replay side by side (the candidates are independent): 11 replays of a 13M-event
    // trace took 22.7 s one after the other (bench/README.md, issue 41). Each replay is turned
    // into its row at once, so only as many replays' curves are held as there are threads.
    let order: Vec<usize> = (0..settings.confs.len()).collect();
    let most = if watched { 0 } else { opts.threads };
    let runs = crate::par::map_growing(progress.threads(), most, &order, |&i| {
        let replayed;
        let o = if i == settings.recorded {
            &recorded
        } else {
            let conf = settings.parsed[i].clone();
            replayed = trace.replay(
                conf,
                model_limit,
                Releases::At(&releases),
                cancel,
                progress.events(),
            )?;
            &replayed
        };
        let run = Run {
            alloc_conf: settings.confs[i].clone(),
            recorded: i == settings.recorded,
            limit_bytes: head.limit.as_ref().map(|l| l.bytes),
            peak_reserved_bytes: o.stats.peak_reserved_bytes,
            peak_allocated_bytes: o.stats.peak_allocated_bytes,
            segments_at_end: o.stats.segments,
            cuda_mallocs: o.stats.device_allocs,
            cuda_frees: o.stats.device_frees,
            alloc_retries: o.stats.alloc_retries,
            oom: o.oom_position.is_some(),
            oom_position: o.oom_position,
            survivable_ooms: o.survivable_ooms(),
            fatal_ooms: o.fatal_ooms(),
            first_oom_position: o.ooms.first().map(|o| o.0),
            not_simulated: settings.notes[i].clone(),
            fragmentation_at_peak: o.stats.peak_reserved_bytes
                - o.stats.allocated_at_peak_reserved_bytes,
            saving_bytes: recorded_peak as i64 - o.stats.peak_reserved_bytes as i64,
            reserved_curve: if opts.curves {
                bucket_max(&o.reserved, w)
            } else {
                Vec::new()
            },
        };
        if watched {
            progress.ran(&run);
        }
        Ok(run)
    });
    let mut runs = runs
        .into_iter()
        .collect::<Result<Vec<Run>, WhatIfError>>()?;
    rank(&mut runs);
    Ok(WhatIf { runs, ..head })
}

/// The order of an answer's runs: those that fit first, then by peak reserved bytes, the
/// recorded settings first among equals.
fn rank(runs: &mut [Run]) {
    runs.sort_by_key(|r| (r.oom, r.peak_reserved_bytes, !r.recorded));
}

/// What the simulator says about the OOM that raised on a device: the setting that would have
/// saved the run, with its figures, or that none of the candidates would have.
#[derive(Clone, Debug, Serialize)]
pub struct OomWhatIf {
    /// Among the settings that avoid the OOM, the one with the lowest peak reserved; none: every
    /// candidate runs out of memory too.
    pub alloc_conf: Option<String>,
    pub peak_reserved_bytes: Option<u64>,
    /// What the recorded run reserved at its peak.
    pub recorded_peak_reserved_bytes: u64,
    /// The limit the OOM implies, which every run was held to.
    pub limit_bytes: u64,
    pub settings_tried: u32,
    pub settings_avoiding: u32,
    /// The replay under the recorded settings reproduced the trace: the figures are predictions,
    /// not estimates.
    pub replay_exact: bool,
    /// The trace stops at the OOM: a setting that gets past it is known to fit only that far.
    pub oom_ends_trace: bool,
    /// The advice in words, quoting the simulated figures.
    pub advice: String,
}

/// Replays `device`'s trace under the candidates and the limit its last OOM implies; `None` when
/// the trace has no OOM or cannot be replayed.
pub fn oom_whatif(snap: &Snapshot, index: &Index, device: i32) -> Option<OomWhatIf> {
    let opts = Options {
        device: Some(device),
        ..Default::default()
    };
    let w = whatif(snap, index, &opts).ok()?;
    let limit = w.limit.as_ref()?;
    let tried = w.runs.iter().filter(|r| !r.recorded).count() as u32;
    let avoiding: Vec<&Run> = w.runs.iter().filter(|r| !r.recorded && !r.oom).collect();
    let check = &w.replay_check;
    let trust = if check.exact {
        "simulated: replayed under the recorded settings, the model reproduced this run exactly"
            .to_string()
    } else {
        format!(
            "an estimate: replayed under the recorded settings, the model departs from the trace{}",
            check
                .first_divergence
                .as_ref()
                .and_then(|d| d.position)
                .map(|p| format!(" at event {p}"))
                .unwrap_or_default()
        )
    };
    let within = if limit.kind == LimitKind::Fraction {
        format!("under the {} per-process limit", human_bytes(limit.bytes))
    } else {
        format!("in the {} the device could give", human_bytes(limit.bytes))
    };
    let best = avoiding.first();
    let advice = match best {
        Some(b) => {
            let (name, set) = if b.alloc_conf.is_empty() {
                (
                    "PyTorch's default settings".to_string(),
                    "Unset PYTORCH_CUDA_ALLOC_CONF.".to_string(),
                )
            } else {
                (
                    b.alloc_conf.clone(),
                    format!("Set PYTORCH_CUDA_ALLOC_CONF={}.", b.alloc_conf),
                )
            };
            let n = avoiding.len();
            if w.growth_ends_trace {
                format!(
                    "{name} would have got past this OOM {within} ({trust}), but memory was growing step over step: past it the same line keeps growing, so a setting only moves where the run fails. Fix the growth."
                )
            } else if w.oom_ends_trace {
                format!(
                    "{name}: would have got past this OOM {within}, peak reserved {} up to it ({trust}; {n} of {tried} settings tried {} past it, compared in the What if tab). The trace stops at the OOM, so whether the rest of the run fits is not known: run it again with this setting to see. {set}",
                    human_bytes(b.peak_reserved_bytes),
                    if n == 1 { "gets" } else { "get" },
                )
            } else {
                format!(
                    "{name}: peak reserved {}, would not have run out of memory {within} ({trust}; {n} of {tried} settings tried {} it, compared in the What if tab). {set}",
                    human_bytes(b.peak_reserved_bytes),
                    if n == 1 { "avoids" } else { "avoid" },
                )
            }
        }
        None => format!(
            "No allocator setting would have saved this run: replayed under {tried} settings (expandable segments, max_split_size_mb, roundup_power2_divisions, garbage collection), every one runs out of memory {within} ({trust})."
        ),
    };
    Some(OomWhatIf {
        alloc_conf: best.map(|b| b.alloc_conf.clone()),
        peak_reserved_bytes: best.map(|b| b.peak_reserved_bytes),
        recorded_peak_reserved_bytes: check.recorded_peak_reserved_bytes,
        limit_bytes: limit.bytes,
        settings_tried: tried,
        settings_avoiding: avoiding.len() as u32,
        replay_exact: check.exact,
        oom_ends_trace: w.oom_ends_trace,
        advice,
    })
}

/// Whether the device's last OOM came from growth: a line whose live bytes grew up to it holds at
/// least half of what was live there.
fn growth_at_last_oom(
    snap: &Snapshot,
    index: &Index,
    d: &crate::analysis::index::DeviceIndex,
) -> bool {
    let Some(p) = (0..d.len)
        .rev()
        .find(|&e| snap.trace.action[d.row(e)] == crate::model::Action::Oom)
    else {
        return false;
    };
    let live = d.live_at(p);
    crate::analysis::leaks::suspects_until(snap, index, d, p)
        .iter()
        .any(|l| l.bytes * 2 >= live && live > 0)
}

/// The trace's last OOM: where, what the driver had free, what PyTorch had reserved, and the
/// segment the failing request needed (under the recorded settings).
struct LastOom {
    position: u32,
    driver_free: u64,
    reserved: u64,
    alloc_size: u64,
}

impl LastOom {
    fn of(trace: &Trace<'_>, conf: &AllocConf) -> Option<LastOom> {
        let &(position, size, _, driver_free) = trace.ooms().last()?;
        Some(LastOom {
            position,
            driver_free,
            reserved: trace.reserved_at(position),
            alloc_size: conf.allocation_size(size),
        })
    }

    /// The smallest limit under which it would not have happened.
    fn ceiling(&self) -> u64 {
        self.reserved + self.alloc_size
    }
}

/// The limit the trace's last OOM implies. The driver had room for the new segment: a
/// per-process memory fraction stopped it, somewhere between the most the run ever reserved and
/// what the failing request would have made it (the lower end is used: every run that fits under
/// it would have fit). Otherwise the device was full: PyTorch's reservation then plus what the
/// driver had left.
fn implied_limit(trace: &Trace<'_>, conf: &AllocConf, o: &LastOom) -> LimitInfo {
    let (p, driver_free, reserved, alloc_size) =
        (o.position, o.driver_free, o.reserved, o.alloc_size);
    if driver_free >= alloc_size {
        // Every request that got memory before passed the limit's check; the failing one did not.
        let peak = (0..=p)
            .map(|q| trace.reserved_at(q))
            .max()
            .unwrap_or(reserved);
        let upper = o.ceiling() - 1;
        let lower = peak.max(trace.granted_before(p, conf)).min(upper);
        LimitInfo {
            bytes: lower,
            kind: LimitKind::Fraction,
            source: LimitSource::Oom,
            detail: format!(
                "the OOM at event {p} came with {} free on the device, so a per-process memory fraction stopped it: the allowed maximum lies between {} (what the run's requests were granted) and {} ({} reserved plus the {} segment it asked for); the lower end is used",
                human_bytes(driver_free),
                human_bytes(lower),
                human_bytes(upper),
                human_bytes(reserved),
                human_bytes(alloc_size),
            ),
        }
    } else {
        LimitInfo {
            bytes: reserved + driver_free,
            kind: LimitKind::Device,
            source: LimitSource::Oom,
            detail: format!(
                "the OOM at event {p}: PyTorch had {} reserved and the driver {} free, so the device could give this process {}",
                human_bytes(reserved),
                human_bytes(driver_free),
                human_bytes(reserved + driver_free),
            ),
        }
    }
}

fn replay_check(trace: &Trace<'_>, o: &replay::Outcome) -> ReplayCheck {
    let rec = &trace.recorded;
    let got = &o.segment_events;
    let same = |a: &SegEvent, b: &SegEvent| a.action == b.action && a.size == b.size;
    let matched = rec.iter().zip(got).take_while(|(a, b)| same(a, b)).count();
    let first_divergence = (matched < rec.len().max(got.len())).then(|| {
        let (r, g) = (rec.get(matched), got.get(matched));
        let position = trace.position_of(matched);
        let words = |e: &SegEvent| {
            format!(
                "{} of {}",
                match e.action {
                    SegAction::Alloc => "a cudaMalloc",
                    SegAction::Free => "a cudaFree",
                    SegAction::Map => "a page map",
                    SegAction::Unmap => "a page unmap",
                },
                human_bytes(e.size)
            )
        };
        let why = match (r, g) {
            (Some(r), Some(g)) => format!(
                "the trace has {} at event {}; the model made {}",
                words(r),
                position.unwrap_or(0),
                words(g)
            ),
            (Some(r), None) => format!(
                "the trace has {} at event {}; the model made no more segment events{}",
                words(r),
                position.unwrap_or(0),
                o.oom_position
                    .map(|p| format!(" (it ran out of memory at event {p})"))
                    .unwrap_or_default()
            ),
            (None, Some(g)) => format!(
                "the model made {} after the trace's last segment event",
                words(g)
            ),
            (None, None) => String::new(),
        };
        Divergence {
            segment_event: matched as u32,
            position,
            recorded: r.map(SegEventView::of),
            replayed: g.map(SegEventView::of),
            why,
        }
    });
    ReplayCheck {
        recorded_segment_events: rec.len() as u32,
        matched_segment_events: matched as u32,
        exact: first_divergence.is_none()
            && o.stats.peak_reserved_bytes == trace.peak_reserved_bytes,
        first_divergence,
        recorded_peak_reserved_bytes: trace.peak_reserved_bytes,
        replayed_peak_reserved_bytes: o.stats.peak_reserved_bytes,
        allocs: o.allocs,
        allocs_at_recorded_address: o.allocs_at_recorded_address,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value of a step curve after `p` events.
    fn at(curve: &[(u32, u64)], p: u32) -> u64 {
        curve.iter().take_while(|&&(q, _)| q <= p).last().unwrap().1
    }

    #[test]
    fn bucket_max_keeps_the_highest_value_of_each_bucket() {
        let curve = [(0, 5), (3, 9), (4, 2), (25, 7)];
        assert_eq!(bucket_max(&curve, 1), curve.to_vec());
        assert_eq!(bucket_max(&curve, 10), vec![(0, 9), (10, 2), (20, 7)]);
        // Every bucket of a pseudo-random curve: its value is the highest the exact curve takes
        // anywhere in it.
        let mut x = 12345u64;
        let mut exact = vec![(0u32, 0u64)];
        let mut p = 0;
        for _ in 0..500 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            p += 1 + (x >> 60) as u32;
            exact.push((p, (x >> 40) % 1000));
        }
        let events = p + 5;
        for w in [2, 3, 7, 64] {
            let b = bucket_max(&exact, w);
            for start in (0..=events).step_by(w as usize) {
                let end = (start + w - 1).min(events);
                let want = (start..=end).map(|q| at(&exact, q)).max().unwrap();
                assert_eq!(at(&b, start), want, "w {w}, bucket at {start}");
                assert_eq!(at(&b, end), want, "w {w}, bucket end {end}");
            }
        }
    }

    #[test]
    fn a_million_events_fit_in_the_curve_budget() {
        let w = bucket_events(1_000_000);
        assert!((1_000_000 + 1) / w < CURVE_POINTS);
        assert_eq!(bucket_events(100), 1);
    }
}
