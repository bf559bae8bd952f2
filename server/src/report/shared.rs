//! What a shared report shows, gathered once from the engine's tables ([`gather`]), and the
//! sentences both formats say the same way (findings, call sites, what-if outcomes).

use snapshot::Snapshot;
use snapshot::analysis::{self, Index};
use snapshot::units::thousands;

/// Call sites listed at the peak.
const TOP_SITES: usize = 12;
/// Points of the memory chart.
const CHART_BUCKETS: usize = 480;

/// Everything a shared report shows.
#[derive(Debug)]
pub struct Shareable {
    /// The snapshot's name (its file name).
    pub name: String,
    pub report: api::Report,
    /// The device the charts and tables are about (the one that held the most memory), when
    /// the snapshot has a trace.
    pub device: Option<DeviceViews>,
    /// The what-if replay of that device, or why there is none.
    pub whatif: Option<Result<api::WhatIf, String>>,
}

/// One device's views.
#[derive(Debug)]
pub struct DeviceViews {
    pub device: i32,
    pub events: u32,
    /// Live (requested) and reserved bytes over the trace, each bucket's lowest and highest.
    pub buckets: Vec<analysis::timeline::Bucket>,
    /// Memory by call site at the peak of live bytes.
    pub sites: Option<api::StackReport>,
}

/// Runs the views a report shows beside `report` (the snapshot's report, as the API answers
/// it); `whatif`: with the what-if replay (the slowest part on long traces).
pub fn gather(
    name: &str,
    snap: &Snapshot,
    index: &Index,
    report: api::Report,
    whatif: bool,
) -> Shareable {
    let traced = index.default_device().filter(|d| d.len > 0);
    let device = traced.map(|d| {
        let buckets = analysis::timeline::timeline(snap, index, d.device, 0, d.len, CHART_BUCKETS)
            .map(|t| t.buckets)
            .unwrap_or_default();
        let frames = crate::convert::flame_frames_in(crate::convert::default_frames(index));
        let sites = analysis::stacks::stacks_of_category(
            snap, index, d.device, None, TOP_SITES, frames, None,
        )
        .map(|s| {
            let mut s = crate::convert::stack_report(s);
            s.flame.children.clear();
            s
        });
        DeviceViews {
            device: d.device,
            events: d.len,
            buckets,
            sites,
        }
    });
    let whatif = match (&device, whatif) {
        (Some(d), true) => Some(
            analysis::whatif::whatif(
                snap,
                index,
                &analysis::whatif::Options {
                    device: Some(d.device),
                    alloc_confs: Vec::new(),
                    limit_bytes: None,
                    limit_is_fraction: false,
                    curves: false,
                    cancel: Default::default(),
                    threads: 0,
                    progress: None,
                },
            )
            .map(crate::convert::whatif)
            .map_err(|e| e.to_string()),
        ),
        _ => None,
    };
    Shareable {
        name: name.to_string(),
        report,
        device,
        whatif,
    }
}

/// The call site as a reader knows it: `file.py:12 in function`, a C++ operator by its name.
pub(crate) fn site_words(f: &Option<api::Frame>) -> String {
    match f {
        Some(f) if api::is_cpp_frame(&f.filename, f.line) => api::cpp_name(&f.name),
        Some(f) => format!("{}:{} in {}", f.filename, f.line, f.name),
        None => api::NO_STACK.into(),
    }
}

/// The sentences that lead a report: how the run ended, the leading leak, what is not known.
pub(crate) fn findings(r: &api::Report) -> Vec<String> {
    let mut out = Vec::new();
    match &r.oom_outcome {
        Some(o) => out.push(o.clone()),
        None => {
            let (allocated, reserved) = r.peaks();
            out.push(format!(
                "No out-of-memory error; memory peaked at {} allocated, {} reserved.",
                analysis::human_bytes(allocated),
                analysis::human_bytes(reserved)
            ));
        }
    }
    match r.leak_suspects.first() {
        Some(l) => out.push(format!(
            "Leak suspect: {} kept {} ({} allocations alive){}.",
            site_words(&l.site),
            analysis::human_bytes(l.bytes),
            l.count,
            if l.growth.is_empty() {
                String::new()
            } else {
                format!(": {}", l.growth)
            }
        )),
        None => {
            let words = r.leak_check.no_suspects_words();
            out.push(match words.split_once(": ") {
                Some(("none", why)) => format!("No leak suspect: {why}."),
                Some((_, why)) => format!("No leak search: {why}."),
                None => format!("{words}."),
            })
        }
    }
    out
}

/// The category bytes in the order the model thinks of them, without the empty ones.
pub(crate) fn categories(c: &api::CategoryBytes) -> Vec<(api::Category, u64)> {
    api::Category::ALL
        .iter()
        .map(|&k| (k, c.get(k)))
        .filter(|(_, b)| *b > 0)
        .collect()
}

/// What a replayed run did: ran out of memory where, or got through (past the recorded OOM,
/// when the trace ends at it: the run is known to fit only that far).
pub(crate) fn whatif_outcome(w: &api::WhatIf, run: &api::WhatIfRun) -> String {
    match (run.oom, run.oom_position) {
        (true, Some(p)) => format!("out of memory at event {}", thousands(p as u64)),
        (true, None) => "out of memory".into(),
        (false, _) if w.oom_ends_trace => {
            "gets past the recorded OOM (the trace ends there)".into()
        }
        (false, _) if run.survivable_ooms > 0 => format!(
            "runs through ({} OOM{} survived)",
            run.survivable_ooms,
            if run.survivable_ooms == 1 { "" } else { "s" }
        ),
        (false, _) => "runs through".into(),
    }
}

/// What the what-if table cannot say by itself.
pub(crate) fn whatif_caveat(w: &api::WhatIf) -> Option<&'static str> {
    if w.growth_ends_trace {
        Some(
            "The OOM came from growth: past it the same line keeps growing, so a setting only moves where the run fails.",
        )
    } else if w.peak_before_trace {
        Some(
            "The peak was reserved before the trace's first event: no setting changes the peak this trace shows.",
        )
    } else {
        None
    }
}

/// How well the model reproduced the recorded run: what makes its other rows worth believing.
pub(crate) fn replay_words(c: &api::ReplayCheck) -> String {
    if c.exact {
        format!(
            "the model reproduced the recorded run exactly: {} of {} segment events, peak reserved {}",
            thousands(c.matched_segment_events as u64),
            thousands(c.recorded_segment_events as u64),
            analysis::human_bytes(c.recorded_peak_reserved_bytes)
        )
    } else {
        format!(
            "the model matched {} of {} recorded segment events; replayed peak reserved {} where the run reserved {}",
            thousands(c.matched_segment_events as u64),
            thousands(c.recorded_segment_events as u64),
            analysis::human_bytes(c.replayed_peak_reserved_bytes),
            analysis::human_bytes(c.recorded_peak_reserved_bytes)
        )
    }
}
