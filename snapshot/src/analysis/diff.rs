//! Two snapshots side by side: what changed from one run to the next (a fix, a larger batch, a
//! new PyTorch). Call sites are matched by their label frame (file, line, function): that survives
//! across runs of the same code, where addresses, stack ids and event positions do not.

use rustc_hash::FxHashMap;
use serde::Serialize;

use super::index::Index;
use super::leaks::leak_suspects;
use super::oom::oom_reports;
use super::stacks::stacks_at;
use super::summary::{DeviceSummary, Summary, summary};
use crate::frames::FrameView;
use crate::model::Snapshot;

/// One snapshot of the pair: its tables, its index and the device to compare.
#[derive(Clone, Copy)]
pub struct Side<'a> {
    pub snap: &'a Snapshot,
    pub index: &'a Index,
    pub device: i32,
}

/// The headline figures a diff compares (a closed set).
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Figure {
    PeakRequested,
    PeakAllocated,
    PeakReserved,
    ReservedAtSnapshot,
    AllocatedAtSnapshot,
    Segments,
    TraceEvents,
    LeakSuspects,
    Ooms,
}

impl Figure {
    /// What it is, for people.
    pub fn name(self) -> &'static str {
        match self {
            Figure::PeakRequested => "peak requested bytes",
            Figure::PeakAllocated => "peak allocated bytes",
            Figure::PeakReserved => "peak reserved bytes",
            Figure::ReservedAtSnapshot => "reserved at the snapshot",
            Figure::AllocatedAtSnapshot => "allocated at the snapshot",
            Figure::Segments => "segments",
            Figure::TraceEvents => "trace events",
            Figure::LeakSuspects => "leak suspects",
            Figure::Ooms => "OOMs",
        }
    }

    /// Whether more of it is worse: memory, leaks and OOMs cost; a longer trace or more
    /// segments are not a regression by themselves.
    pub fn more_is_worse(self) -> bool {
        match self {
            Figure::PeakRequested
            | Figure::PeakAllocated
            | Figure::PeakReserved
            | Figure::ReservedAtSnapshot
            | Figure::AllocatedAtSnapshot
            | Figure::LeakSuspects
            | Figure::Ooms => true,
            Figure::Segments | Figure::TraceEvents => false,
        }
    }

    /// Bytes (true) or a count.
    pub fn is_bytes(self) -> bool {
        match self {
            Figure::PeakRequested
            | Figure::PeakAllocated
            | Figure::PeakReserved
            | Figure::ReservedAtSnapshot
            | Figure::AllocatedAtSnapshot => true,
            Figure::Segments | Figure::TraceEvents | Figure::LeakSuspects | Figure::Ooms => false,
        }
    }
}

/// A headline figure in both snapshots.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct FigureDelta {
    pub figure: Figure,
    pub a: u64,
    pub b: u64,
    /// `b - a`.
    pub delta: i64,
}

/// Memory one call site holds at each snapshot's peak.
#[derive(Clone, Debug, Serialize)]
pub struct SiteDelta {
    pub site: Option<FrameView>,
    pub a_bytes: u64,
    pub b_bytes: u64,
    /// `b_bytes - a_bytes`.
    pub delta_bytes: i64,
    pub a_count: u32,
    pub b_count: u32,
    /// The largest stack of the site, from the side that holds more.
    pub frames: Vec<FrameView>,
}

/// A leak suspect's call site and what each snapshot says of it.
#[derive(Clone, Debug, Serialize)]
pub struct LeakDelta {
    pub site: Option<FrameView>,
    /// Bytes still alive at the end from this site, where it is a suspect in that snapshot.
    pub a_bytes: Option<u64>,
    pub b_bytes: Option<u64>,
    pub frames: Vec<FrameView>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Diff {
    pub device_a: i32,
    pub device_b: i32,
    pub figures: Vec<FigureDelta>,
    /// Call sites at each side's peak, the largest change first; sites equal in both left out.
    pub sites_at_peak: Vec<SiteDelta>,
    /// Sites that hold the same bytes in both (not listed in `sites_at_peak`).
    pub unchanged_sites: usize,
    /// Leak suspects of either side: new in B, gone in B, or in both.
    pub leaks: Vec<LeakDelta>,
    /// What was alive by category at each side's peak of live bytes (both need a trace).
    pub categories_at_peak: Option<(super::categories::Totals, super::categories::Totals)>,
}

type SiteKey = Option<(String, u32, String)>;

/// Which of a device's peaks a figure reads.
type PeakOf = fn(&DeviceSummary) -> u64;

fn key(site: &Option<FrameView>) -> SiteKey {
    site.as_ref()
        .map(|f| (f.filename.clone(), f.line, f.name.clone()))
}

fn figure(figure: Figure, a: u64, b: u64) -> FigureDelta {
    FigureDelta {
        figure,
        a,
        b,
        delta: b as i64 - a as i64,
    }
}

/// Compares `b` against `a`; at most `max_sites` call sites are listed.
pub fn compare(a: Side, b: Side, max_sites: usize) -> Diff {
    let (sa, sb) = (summary(a.snap, a.index), summary(b.snap, b.index));
    let peak = |s: &Summary, d: i32, which: PeakOf| s.devices.get(&d).map_or(0, which);
    let entries = |side: Side| side.index.device(side.device).map_or(0, |d| d.len as u64);
    let (la, lb) = (
        leak_suspects(a.snap, a.index, usize::MAX),
        leak_suspects(b.snap, b.index, usize::MAX),
    );
    let (oa, ob) = (
        oom_reports(a.snap, a.index, None),
        oom_reports(b.snap, b.index, None),
    );
    // PyTorch's three peaks of each side's device, then the state at each snapshot.
    let peaks: [(Figure, PeakOf); 3] = [
        (Figure::PeakRequested, |d| d.peak_requested_bytes),
        (Figure::PeakAllocated, |d| d.peak_allocated_bytes),
        (Figure::PeakReserved, |d| d.peak_reserved_bytes),
    ];
    let mut figures: Vec<FigureDelta> = peaks
        .iter()
        .map(|&(f, of)| figure(f, peak(&sa, a.device, of), peak(&sb, b.device, of)))
        .collect();
    figures.extend([
        figure(
            Figure::ReservedAtSnapshot,
            sa.reserved_bytes,
            sb.reserved_bytes,
        ),
        figure(
            Figure::AllocatedAtSnapshot,
            sa.allocated_bytes,
            sb.allocated_bytes,
        ),
        figure(Figure::Segments, sa.segments, sb.segments),
        figure(Figure::TraceEvents, entries(a), entries(b)),
        figure(
            Figure::LeakSuspects,
            la.iter().filter(|l| l.device == a.device).count() as u64,
            lb.iter().filter(|l| l.device == b.device).count() as u64,
        ),
        figure(Figure::Ooms, oa.len() as u64, ob.len() as u64),
    ]);

    let categories_at_peak = {
        let at_peak = |side: Side| {
            let d = side.index.device(side.device).filter(|d| d.len > 0)?;
            Some(super::categories::totals_at(
                side.snap,
                side.index,
                d,
                d.peak_position,
            ))
        };
        at_peak(a).zip(at_peak(b))
    };
    // Call sites at each side's peak, joined by label frame.
    let sites_of = |side: Side| {
        stacks_at(side.snap, side.index, side.device, None, usize::MAX)
            .map(|r| r.sites)
            .unwrap_or_default()
    };
    // One row per site in first-seen order (the sort below keeps ties that way).
    let mut sites: Vec<SiteDelta> = Vec::new();
    let mut site_at: FxHashMap<SiteKey, usize> = FxHashMap::default();
    for (is_b, list) in [(false, sites_of(a)), (true, sites_of(b))] {
        for s in list {
            let i = *site_at.entry(key(&s.site)).or_insert_with(|| {
                sites.push(SiteDelta {
                    site: s.site.clone(),
                    a_bytes: 0,
                    b_bytes: 0,
                    delta_bytes: 0,
                    a_count: 0,
                    b_count: 0,
                    frames: Vec::new(),
                });
                sites.len() - 1
            });
            let d = &mut sites[i];
            let larger = if is_b {
                d.b_bytes += s.bytes;
                d.b_count += s.count;
                d.b_bytes > d.a_bytes
            } else {
                d.a_bytes += s.bytes;
                d.a_count += s.count;
                true
            };
            if larger {
                d.frames = s.frames;
            }
        }
    }
    for d in &mut sites {
        d.delta_bytes = d.b_bytes as i64 - d.a_bytes as i64;
    }
    let total = sites.len();
    sites.retain(|d| d.delta_bytes != 0 || d.a_count != d.b_count);
    let unchanged_sites = total - sites.len();
    sites.sort_by(|x, y| {
        y.delta_bytes
            .unsigned_abs()
            .cmp(&x.delta_bytes.unsigned_abs())
            .then(y.b_bytes.max(y.a_bytes).cmp(&x.b_bytes.max(x.a_bytes)))
    });
    sites.truncate(max_sites);

    // Leak suspects of either side, by site.
    let mut leaks: Vec<LeakDelta> = Vec::new();
    let mut leak_at: FxHashMap<SiteKey, usize> = FxHashMap::default();
    for (is_b, list, device) in [(false, &la, a.device), (true, &lb, b.device)] {
        for l in list.iter().filter(|l| l.device == device) {
            let i = *leak_at.entry(key(&l.site)).or_insert_with(|| {
                leaks.push(LeakDelta {
                    site: l.site.clone(),
                    a_bytes: None,
                    b_bytes: None,
                    frames: l.frames.clone(),
                });
                leaks.len() - 1
            });
            let slot = if is_b {
                &mut leaks[i].b_bytes
            } else {
                &mut leaks[i].a_bytes
            };
            *slot = Some(slot.unwrap_or(0) + l.bytes);
        }
    }
    // New in B first, then the largest.
    leaks.sort_by_key(|l| {
        (
            l.a_bytes.is_some(),
            std::cmp::Reverse(l.b_bytes.unwrap_or(0).max(l.a_bytes.unwrap_or(0))),
        )
    });

    Diff {
        device_a: a.device,
        device_b: b.device,
        figures,
        sites_at_peak: sites,
        unchanged_sites,
        leaks,
        categories_at_peak,
    }
}
