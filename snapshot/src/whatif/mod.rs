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
pub mod replay;

use serde::Serialize;

use crate::analysis::Index;
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
}

#[derive(Clone, Debug, Serialize)]
pub struct WhatIf {
    pub device: i32,
    pub events: u32,
    /// The `PYTORCH_CUDA_ALLOC_CONF` the snapshot was recorded under ("" = PyTorch's defaults).
    pub recorded_alloc_conf: String,
    /// The trace starts after the program did (its ring buffer was full): every run starts from
    /// the segments and live blocks reconstructed for its first event.
    pub starts_mid_run: bool,
    pub limit: Option<LimitInfo>,
    pub replay_check: ReplayCheck,
    /// Ranked: runs that fit first, then by peak reserved bytes.
    pub runs: Vec<Run>,
}

#[derive(Clone, Debug, Serialize)]
pub struct LimitInfo {
    pub bytes: u64,
    /// "fraction" (a per-process memory fraction stopped the run) or "device" (the device had no
    /// room: PyTorch's reservation plus the driver's free memory).
    pub kind: &'static str,
    /// "oom" (implied by the trace's OOM) or "given".
    pub source: &'static str,
    pub detail: String,
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
    pub action: &'static str,
    pub address: u64,
    pub size_bytes: u64,
}

impl SegEventView {
    fn of(e: &SegEvent) -> SegEventView {
        SegEventView {
            action: action_name(e.action),
            address: e.addr,
            size_bytes: e.size,
        }
    }
}

fn action_name(a: SegAction) -> &'static str {
    match a {
        SegAction::Alloc => "segment_alloc",
        SegAction::Free => "segment_free",
        SegAction::Map => "segment_map",
        SegAction::Unmap => "segment_unmap",
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
    /// Ran out of memory under the limit (at a request the recorded run satisfied, or at a
    /// recorded OOM that these settings do not avoid).
    pub oom: bool,
    pub oom_position: Option<u32>,
    /// Reserved but unallocated bytes when reserved memory peaked.
    pub fragmentation_at_peak: u64,
    /// Peak reserved bytes saved against the recorded run (negative: more).
    pub saving_bytes: i64,
    /// Reserved bytes after each position where they changed, when curves were asked for.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub reserved_curve: Vec<(u32, u64)>,
}

/// Why a what-if cannot be answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WhatIfError {
    NoTrace(String),
    BadConf(String),
}

impl std::fmt::Display for WhatIfError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WhatIfError::NoTrace(m) | WhatIfError::BadConf(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for WhatIfError {}

/// Replays the device's trace under the recorded settings (the check) and under each setting
/// asked for (or the candidates), ranked.
pub fn whatif(snap: &Snapshot, index: &Index, opts: &Options) -> Result<WhatIf, WhatIfError> {
    let d = match opts.device {
        Some(dev) => index.device(dev).filter(|d| d.len > 0).ok_or_else(|| {
            WhatIfError::NoTrace(format!(
                "device {dev} has no trace to replay (record the snapshot with torch.cuda.memory._record_memory_history())"
            ))
        })?,
        None => index.traced().next().ok_or_else(|| {
            WhatIfError::NoTrace(
                "this snapshot has no trace to replay: record it with torch.cuda.memory._record_memory_history() before the run".into(),
            )
        })?,
    };
    let (recorded_conf, recorded_raw) = match &snap.allocator_settings {
        Some(s) => AllocConf::from_snapshot(s).map_err(|e| WhatIfError::BadConf(e.0))?,
        None => (AllocConf::default(), String::new()),
    };
    let trace = Trace::new(snap, index, d);
    let limit = match opts.limit_bytes {
        Some(bytes) => Some(LimitInfo {
            bytes,
            kind: if opts.limit_is_fraction {
                "fraction"
            } else {
                "device"
            },
            source: "given",
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
        None => implied_limit(&trace, &recorded_conf),
    };
    let model_limit = limit.as_ref().map(|l| Limit {
        bytes: l.bytes,
        kind: if l.kind == "fraction" {
            LimitKind::Fraction
        } else {
            LimitKind::Device
        },
    });

    // The replay check, under the recorded settings.
    let recorded = trace.replay(recorded_conf.clone(), model_limit, Releases::Discover);
    let check = replay_check(&trace, &recorded);

    let mut confs: Vec<String> = if opts.alloc_confs.is_empty() {
        CANDIDATES.iter().map(|s| s.to_string()).collect()
    } else {
        opts.alloc_confs.clone()
    };
    let mut parsed = Vec::new();
    for c in &confs {
        parsed.push(AllocConf::parse(c).map_err(|e| WhatIfError::BadConf(e.0))?);
    }
    // The recorded settings are one of the runs (exactly once).
    let recorded_index = match parsed.iter().position(|c| *c == recorded_conf) {
        Some(i) => i,
        None => {
            confs.insert(0, recorded_raw.clone());
            parsed.insert(0, recorded_conf.clone());
            0
        }
    };
    let recorded_peak = recorded.stats.peak_reserved_bytes;
    let mut runs: Vec<Run> = confs
        .iter()
        .zip(parsed)
        .enumerate()
        .map(|(i, (name, conf))| {
            let o = if i == recorded_index {
                recorded.clone()
            } else {
                trace.replay(conf, model_limit, Releases::At(&recorded.external_releases))
            };
            Run {
                alloc_conf: name.clone(),
                recorded: i == recorded_index,
                limit_bytes: limit.as_ref().map(|l| l.bytes),
                peak_reserved_bytes: o.stats.peak_reserved_bytes,
                peak_allocated_bytes: o.stats.peak_allocated_bytes,
                segments_at_end: o.stats.segments,
                cuda_mallocs: o.stats.device_allocs,
                cuda_frees: o.stats.device_frees,
                alloc_retries: o.stats.alloc_retries,
                oom: o.oom_position.is_some(),
                oom_position: o.oom_position,
                fragmentation_at_peak: o.stats.peak_reserved_bytes
                    - o.stats.allocated_at_peak_reserved_bytes,
                saving_bytes: recorded_peak as i64 - o.stats.peak_reserved_bytes as i64,
                reserved_curve: if opts.curves { o.reserved } else { Vec::new() },
            }
        })
        .collect();
    runs.sort_by_key(|r| (r.oom, r.peak_reserved_bytes, !r.recorded));
    Ok(WhatIf {
        device: d.device,
        events: d.len,
        recorded_alloc_conf: recorded_raw,
        starts_mid_run: trace.starts_mid_run(),
        limit,
        replay_check: check,
        runs,
    })
}

/// The limit the trace's last OOM implies. The driver had room for the new segment: a
/// per-process memory fraction stopped it, somewhere between the most the run ever reserved and
/// what the failing request would have made it (the lower end is used: every run that fits under
/// it would have fit). Otherwise the device was full: PyTorch's reservation then plus what the
/// driver had left.
fn implied_limit(trace: &Trace<'_>, conf: &AllocConf) -> Option<LimitInfo> {
    let &(p, size, _, driver_free) = trace.ooms().last()?;
    let reserved = trace.reserved_at(p);
    let alloc_size = conf.allocation_size(size);
    if driver_free >= alloc_size {
        let peak = (0..=p)
            .map(|q| trace.reserved_at(q))
            .max()
            .unwrap_or(reserved);
        let upper = reserved + alloc_size - 1;
        Some(LimitInfo {
            bytes: peak,
            kind: "fraction",
            source: "oom",
            detail: format!(
                "the OOM at event {p} came with {} free on the device, so a per-process memory fraction stopped it: the allowed maximum lies between {} (the most this run reserved) and {} ({} reserved plus the {} segment it asked for); the lower end is used",
                human_bytes(driver_free),
                human_bytes(peak),
                human_bytes(upper),
                human_bytes(reserved),
                human_bytes(alloc_size),
            ),
        })
    } else {
        Some(LimitInfo {
            bytes: reserved + driver_free,
            kind: "device",
            source: "oom",
            detail: format!(
                "the OOM at event {p}: PyTorch had {} reserved and the driver {} free, so the device could give this process {}",
                human_bytes(reserved),
                human_bytes(driver_free),
                human_bytes(reserved + driver_free),
            ),
        })
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
