//! The engine's types into this crate's, at the HTTP boundary (feature `engine`). The engine
//! keeps its own types (they change with the engine); what crosses HTTP is an `api` type, so a
//! refactor of the engine that would change an answer fails to compile here instead of changing
//! it silently. It lives here, not in the server, because the dashboard answers its own first
//! questions about a file from the same engine before the file's upload lands (the page's
//! reading, `frontend/src/local/`), and those answers must be the server's to the byte.

use snapshot::analysis::timeline as tl;
use snapshot::analysis::{self, categories, diff, index, leaks, oom, stacks, state, summary};
use snapshot::frames::FrameView;
use snapshot::model;

pub fn frame(f: FrameView) -> crate::Frame {
    crate::Frame {
        filename: f.filename,
        line: f.line,
        name: f.name,
    }
}

pub fn frames(v: Vec<FrameView>) -> Vec<crate::Frame> {
    v.into_iter().map(frame).collect()
}

pub fn stack_id(s: model::StackId) -> crate::StackId {
    crate::StackId(s.0)
}

pub fn axis(a: tl::Axis) -> crate::Axis {
    match a {
        tl::Axis::Event => crate::Axis::Event,
        tl::Axis::Time => crate::Axis::Time,
    }
}

pub fn axis_in(a: crate::Axis) -> tl::Axis {
    match a {
        crate::Axis::Event => tl::Axis::Event,
        crate::Axis::Time => tl::Axis::Time,
    }
}

/// The frames memory by stack is read from when none are asked for: Python's where the
/// snapshot has them (what a Python user reads), else all.
pub fn default_frames(index: &analysis::Index) -> crate::FlameFrames {
    if index.frames.has_python() {
        crate::FlameFrames::Python
    } else {
        crate::FlameFrames::All
    }
}

pub fn flame_frames_in(f: crate::FlameFrames) -> analysis::FlameFrames {
    match f {
        crate::FlameFrames::All => analysis::FlameFrames::All,
        crate::FlameFrames::Python => analysis::FlameFrames::PythonOnly,
    }
}

fn segment_type(t: model::SegmentType) -> crate::SegmentType {
    match t {
        model::SegmentType::Small => crate::SegmentType::Small,
        model::SegmentType::Large => crate::SegmentType::Large,
        model::SegmentType::Unknown => crate::SegmentType::Unknown,
    }
}

fn block_state(s: model::BlockState) -> crate::BlockState {
    match s {
        model::BlockState::ActiveAllocated => crate::BlockState::ActiveAllocated,
        model::BlockState::ActivePendingFree => crate::BlockState::ActivePendingFree,
        model::BlockState::Inactive => crate::BlockState::Inactive,
        model::BlockState::Unknown => crate::BlockState::Unknown,
    }
}

fn verdict(v: oom::Verdict) -> crate::Verdict {
    match v {
        oom::Verdict::Growth => crate::Verdict::Growth,
        oom::Verdict::Fragmentation => crate::Verdict::Fragmentation,
        oom::Verdict::ProcessLimit => crate::Verdict::ProcessLimit,
        oom::Verdict::Exhaustion => crate::Verdict::Exhaustion,
        oom::Verdict::OutsidePytorch => crate::Verdict::OutsidePytorch,
        oom::Verdict::Undetermined => crate::Verdict::Undetermined,
    }
}

fn recovery(r: snapshot::analysis::recovery::Recovery) -> crate::Recovery {
    use snapshot::analysis::recovery::Recovery as R;
    match r {
        R::WorkspaceFallback => crate::Recovery::WorkspaceFallback,
        R::Caught => crate::Recovery::Caught,
        R::Fatal => crate::Recovery::Fatal,
    }
}

fn oom_incident(i: oom::OomIncident) -> crate::OomIncident {
    crate::OomIncident {
        device: i.device,
        verdict: verdict(i.verdict),
        recovery: recovery(i.recovery),
        recovered: i.recovered,
        count: i.count,
        first_position: i.first_position,
        last_position: i.last_position,
        first_step: i.first_step,
        last_step: i.last_step,
        smallest_requested_bytes: i.smallest_requested_bytes,
        largest_requested_bytes: i.largest_requested_bytes,
        shown_position: i.shown_position,
        summary: i.summary,
    }
}

pub fn encoding(e: model::Encoding) -> crate::Encoding {
    match e {
        model::Encoding::Pickle => crate::Encoding::Pickle,
        model::Encoding::Json => crate::Encoding::Json,
    }
}

pub fn compression(c: snapshot::decompress::Compression) -> crate::Compression {
    use snapshot::decompress::Compression as C;
    match c {
        C::None => crate::Compression::None,
        C::Gzip => crate::Compression::Gzip,
        C::Zstd => crate::Compression::Zstd,
        C::Xz => crate::Compression::Xz,
    }
}

fn layout(l: model::Layout) -> crate::Layout {
    match l {
        model::Layout::Modern => crate::Layout::Modern,
        model::Layout::BlockHistory => crate::Layout::BlockHistory,
        model::Layout::LegacySegmentList => crate::Layout::LegacySegmentList,
        model::Layout::SegmentList => crate::Layout::SegmentList,
    }
}

fn format(f: model::Format) -> crate::Format {
    crate::Format {
        encoding: encoding(f.encoding),
        protocol: f.protocol,
        compression: compression(f.compression),
        layout: layout(f.layout),
        decoded_bytes: f.decoded_bytes,
    }
}

pub fn device_summary(d: summary::DeviceSummary) -> crate::DeviceSummary {
    crate::DeviceSummary {
        entries: d.entries,
        actions: d
            .actions
            .into_iter()
            .map(|(k, n)| (crate::TraceAction::from_name(&k), n))
            .collect(),
        first_time_us: d.first_time_us,
        last_time_us: d.last_time_us,
        alive_at_end_from_trace: d.alive_at_end_from_trace,
        alive_at_end_bytes_from_trace: d.alive_at_end_bytes_from_trace,
        peak_traced_live_bytes: d.peak_traced_live_bytes,
        peak_requested_bytes: d.peak_requested_bytes,
        peak_requested_position: d.peak_requested_position,
        peak_allocated_bytes: d.peak_allocated_bytes,
        peak_allocated_position: d.peak_allocated_position,
        peak_reserved_bytes: d.peak_reserved_bytes,
        peak_reserved_position: d.peak_reserved_position,
        peaks_over: peak_scope(d.peaks_over),
        steps: d.steps.map(|s| crate::Steps {
            source: match s.source {
                snapshot::analysis::steps::StepSource::Annotations => {
                    crate::StepsSource::Annotations
                }
                snapshot::analysis::steps::StepSource::Repeats => crate::StepsSource::Repeats,
            },
            name: s.name,
            numbers: s.numbers,
            starts: s.starts,
            start_times_us: s.start_times_us,
        }),
        categories: d.categories.map(|c| crate::DeviceCategories {
            source: phase_source(c.source),
            backward_passes: c.backward_passes,
            peak_position: c.peak_position,
            at_peak: category_bytes(c.at_peak),
        }),
    }
}

pub fn category(c: categories::Category) -> crate::Category {
    use categories::Category as C;
    match c {
        C::Parameter => crate::Category::Parameter,
        C::Gradient => crate::Category::Gradient,
        C::OptimizerState => crate::Category::OptimizerState,
        C::Activation => crate::Category::Activation,
        C::Input => crate::Category::Input,
        C::Temporary => crate::Category::Temporary,
        C::AutogradDetail => crate::Category::AutogradDetail,
        C::CudaGraph => crate::Category::CudaGraph,
        C::Unknown => crate::Category::Unknown,
    }
}

pub fn category_from_api(c: crate::Category) -> categories::Category {
    categories::Category::parse(c.as_str()).unwrap_or(categories::Category::Unknown)
}

fn category_rule(r: categories::Rule) -> crate::CategoryRule {
    use crate::CategoryRule as A;
    use categories::Rule as R;
    match r {
        R::PrivatePool => A::PrivatePool,
        R::KeptFromBeforeTraining => A::KeptFromBeforeTraining,
        R::SplitByGradientCount => A::SplitByGradientCount,
        R::KeptFromOptimizerStep => A::KeptFromOptimizerStep,
        R::KeptFromAfterBackward => A::KeptFromAfterBackward,
        R::KeptBetweenSteps => A::KeptBetweenSteps,
        R::KeptFromBackward => A::KeptFromBackward,
        R::GradientBucket => A::GradientBucket,
        R::SavedForBackward => A::SavedForBackward,
        R::Recomputed => A::Recomputed,
        R::HeldPastBackward => A::HeldPastBackward,
        R::AliveAfterForward => A::AliveAfterForward,
        R::LoadedBeforeForward => A::LoadedBeforeForward,
        R::FreedInPhase => A::FreedInPhase,
        R::BackwardScratch => A::BackwardScratch,
        R::KeptFromBackwardNoParameter => A::KeptFromBackwardNoParameter,
        R::KeptFromBackwardForGood => A::KeptFromBackwardForGood,
        R::KeptFromForward => A::KeptFromForward,
        R::BeforeTrace => A::BeforeTrace,
        R::NoPhases => A::NoPhases,
    }
}

fn confidence(c: categories::Confidence) -> crate::Confidence {
    match c {
        categories::Confidence::Low => crate::Confidence::Low,
        categories::Confidence::Medium => crate::Confidence::Medium,
        categories::Confidence::High => crate::Confidence::High,
    }
}

fn phase_source(s: categories::PhaseSource) -> crate::PhaseSource {
    match s {
        categories::PhaseSource::Threads => crate::PhaseSource::Threads,
        categories::PhaseSource::Lifetimes => crate::PhaseSource::Lifetimes,
        categories::PhaseSource::None => crate::PhaseSource::None,
    }
}

pub fn category_bytes(t: categories::Totals) -> crate::CategoryBytes {
    let mut b = crate::CategoryBytes::default();
    for c in categories::Category::ALL {
        *b.get_mut(category(c)) = t.get(c);
    }
    b
}

/// The allocations alive at a position, labelled: those of `only` (all without), the largest
/// `limit` listed (all without).
pub fn categories_at(
    c: categories::CategoriesAt,
    snap: &snapshot::model::Snapshot,
    index: &snapshot::analysis::Index,
    only: Option<crate::Category>,
    limit: Option<usize>,
) -> crate::CategoriesAt {
    let count = c.allocations.len() as u64;
    let allocations = c
        .allocations
        .into_iter()
        .filter(|a| only.is_none_or(|o| category(a.label.category) == o))
        .take(limit.unwrap_or(usize::MAX))
        .map(|a| crate::CategorizedAllocation {
            address: a.address,
            size_bytes: a.size,
            category: category(a.label.category),
            rule: category_rule(a.label.rule),
            confidence: confidence(a.label.confidence),
            stream: a.stream,
            alloc_event: a.start,
            stack: crate::StackId(a.stack.0),
            site: index.frames.site(snap, a.stack).map(frame),
        })
        .collect();
    crate::CategoriesAt {
        device: c.device,
        position: c.position,
        source: phase_source(c.source),
        backward_passes: c.backward_passes,
        allocations,
        count,
        totals: category_bytes(c.totals),
    }
}

pub fn leak_check(c: snapshot::analysis::LeakCheck) -> crate::LeakCheck {
    match c {
        snapshot::analysis::LeakCheck::Ran => crate::LeakCheck::Ran,
        snapshot::analysis::LeakCheck::NoTrace => crate::LeakCheck::NoTrace,
        snapshot::analysis::LeakCheck::HistoryOff => crate::LeakCheck::HistoryOff,
    }
}

pub fn peak_scope(s: snapshot::analysis::PeakScope) -> crate::PeakScope {
    match s {
        snapshot::analysis::PeakScope::WholeProcess => crate::PeakScope::WholeProcess,
        snapshot::analysis::PeakScope::TraceWindow => crate::PeakScope::TraceWindow,
        snapshot::analysis::PeakScope::FinalState => crate::PeakScope::FinalState,
    }
}

pub fn warning(w: summary::Warning) -> crate::Warning {
    use summary::WarningCode;
    crate::Warning {
        code: match w.code {
            WarningCode::HistoryNotEnabled => crate::WarningCode::HistoryNotEnabled,
            WarningCode::NoFrames => crate::WarningCode::NoFrames,
            WarningCode::HistoryOff => crate::WarningCode::HistoryOff,
            WarningCode::TraceTruncated => crate::WarningCode::TraceTruncated,
            WarningCode::BlocksWithoutFrames => crate::WarningCode::BlocksWithoutFrames,
        },
        message: w.message,
    }
}

pub fn fragmentation(f: state::Fragmentation) -> crate::Fragmentation {
    crate::Fragmentation {
        segments: f.segments,
        reserved_bytes: f.reserved_bytes,
        allocated_bytes: f.allocated_bytes,
        requested_bytes: f.requested_bytes,
        internal_bytes: f.internal_bytes,
        external_bytes: f.external_bytes,
        inactive_blocks: f.inactive_blocks,
        largest_free_bytes: f.largest_free_bytes,
    }
}

fn pool(p: state::PoolFragmentation) -> crate::PoolFragmentation {
    crate::PoolFragmentation {
        pool_id: p.pool_id,
        segment_type: segment_type(p.segment_type),
        stream: p.stream,
        figures: fragmentation(p.figures),
    }
}

fn call_site(c: stacks::CallSite) -> crate::CallSite {
    crate::CallSite {
        site: c.site.map(frame),
        bytes: c.bytes,
        count: c.count,
        held: c.held,
        frames: frames(c.frames),
        stacks: c.stacks,
    }
}

fn leak_suspect(l: leaks::LeakSuspect) -> crate::LeakSuspect {
    crate::LeakSuspect {
        device: l.device,
        bytes: l.bytes,
        count: l.count,
        total_allocations: l.total_allocations,
        spread: l.spread,
        score: l.score,
        first_position: l.first_position,
        last_position: l.last_position,
        first_time_us: l.first_time_us,
        last_time_us: l.last_time_us,
        site: l.site.map(frame),
        stacks: l.stacks,
        frames: frames(l.frames),
        per_step_bytes: l.per_step_bytes,
        since_step: l.since_step,
        growth_steps: l.growth_steps,
        every_steps: l.every_steps,
        growth: l.growth,
        series: l
            .series
            .into_iter()
            .map(|p| crate::SeriesPoint {
                position: p.position,
                time_us: p.time_us,
                live_bytes: p.live_bytes,
            })
            .collect(),
    }
}

pub fn oom_report(o: oom::OomReport) -> crate::OomReport {
    crate::OomReport {
        device: o.device,
        position: o.position,
        time_us: o.time_us,
        requested_bytes: o.requested_bytes,
        block_bytes: o.block_bytes,
        stream: o.stream,
        device_free_bytes: o.device_free_bytes,
        device_total_bytes: o.device_total_bytes,
        reserved_bytes: o.reserved_bytes,
        allocated_bytes: o.allocated_bytes,
        cached_free_bytes: o.cached_free_bytes,
        largest_free_block_bytes: o.largest_free_block_bytes,
        outside_pytorch_bytes: o.outside_pytorch_bytes,
        verdict: verdict(o.verdict),
        explanation: o.explanation,
        advice: o.advice,
        recovered: o.recovered,
        recovery: recovery(o.recovery),
        recovery_evidence: o.recovery_evidence,
        pytorch_message: o.pytorch_message,
        step: o.step,
        growth: o.growth.map(|g| crate::GrowthCause {
            site: g.site.map(frame),
            bytes_at_oom: g.bytes_at_oom,
            per_step_bytes: g.per_step_bytes,
            since_step: g.since_step,
            pattern: g.pattern,
        }),
        site: o.site.map(frame),
        frames: frames(o.frames),
        largest_sites: o.largest_sites.into_iter().map(call_site).collect(),
        categories: category_bytes(o.categories),
        whatif: o.whatif.map(|w| crate::OomWhatIf {
            alloc_conf: w.alloc_conf,
            peak_reserved_bytes: w.peak_reserved_bytes,
            recorded_peak_reserved_bytes: w.recorded_peak_reserved_bytes,
            limit_bytes: w.limit_bytes,
            settings_tried: w.settings_tried,
            settings_avoiding: w.settings_avoiding,
            replay_exact: w.replay_exact,
            oom_ends_trace: w.oom_ends_trace,
            advice: w.advice,
        }),
    }
}

/// The whole report (`GET /api/snapshots/{id}` and `memscope analyze --json`).
pub fn report(r: analysis::Report) -> crate::Report {
    let s = r.summary;
    crate::Report {
        segments: s.segments,
        blocks: s.blocks,
        reserved_bytes: s.reserved_bytes,
        allocated_bytes: s.allocated_bytes,
        requested_bytes: s.requested_bytes,
        block_states: s
            .block_states
            .into_iter()
            .map(|(k, n)| (crate::BlockState::from_name(&k), n))
            .collect(),
        pending_free_blocks: s.pending_free_blocks,
        pending_free_bytes: s.pending_free_bytes,
        devices: s
            .devices
            .into_iter()
            .map(|(k, d)| (k, device_summary(d)))
            .collect(),
        default_device: s.default_device,
        host_segments: s.host_segments,
        host_reserved_bytes: s.host_reserved_bytes,
        frames: s.frames,
        stacks: s.stacks,
        annotations: s.annotations,
        leak_suspects: r.leak_suspects.into_iter().map(leak_suspect).collect(),
        leak_check: leak_check(r.leak_check),
        report_version: crate::REPORT_VERSION,
        ooms: r.ooms.into_iter().map(oom_report).collect(),
        oom_incidents: r.oom_incidents.into_iter().map(oom_incident).collect(),
        oom_outcome: r.oom_outcome,
        warnings: r.warnings.into_iter().map(warning).collect(),
        fragmentation: r
            .fragmentation
            .into_iter()
            .map(|d| crate::DeviceFragmentation {
                device: d.device,
                total: fragmentation(d.total),
                pools: d.pools.into_iter().map(pool).collect(),
            })
            .collect(),
        allocator_settings: r.allocator_settings,
        format: format(r.format),
    }
}

pub fn timeline(t: tl::Timeline) -> crate::Timeline {
    crate::Timeline {
        device: t.device,
        events: t.events,
        first_position: t.first_position,
        last_position: t.last_position,
        x_from: t.x_from,
        x_to: t.x_to,
        buckets: t
            .buckets
            .into_iter()
            .map(|b| crate::Bucket {
                first: b.first,
                last: b.last,
                time_us: b.time_us,
                live_min_bytes: b.live_min,
                live_max_bytes: b.live_max,
                reserved_min_bytes: b.reserved_min,
                reserved_max_bytes: b.reserved_max,
                allocs: b.allocs,
                alloc_bytes: b.alloc_bytes,
            })
            .collect(),
        peak_position: t.peak_position,
        peak_live_bytes: t.peak_live_bytes,
    }
}

pub fn allocation(a: tl::AllocationView) -> crate::AllocationView {
    crate::AllocationView {
        id: a.id,
        addr: a.addr,
        size_bytes: a.size,
        stream: a.stream,
        start: a.start,
        end: a.end,
        start_time_us: a.start_time_us,
        end_time_us: a.end_time_us,
        stack: stack_id(a.stack),
    }
}

pub fn annotation(a: tl::AnnotationRange) -> crate::AnnotationRange {
    crate::AnnotationRange {
        name: a.name,
        start_us: a.start_us,
        end_us: a.end_us,
        count: a.count,
    }
}

pub fn oom_marker(m: tl::OomMarker) -> crate::OomMarker {
    crate::OomMarker {
        position: m.position,
        time_us: m.time_us,
        requested_bytes: m.requested_bytes,
    }
}

/// A trace entry's action; one memscope does not know keeps the name PyTorch gave it.
fn trace_action(a: snapshot::model::Action, other: Option<String>) -> crate::TraceAction {
    use snapshot::model::Action;
    match a {
        Action::Alloc => crate::TraceAction::Alloc,
        Action::FreeRequested => crate::TraceAction::FreeRequested,
        Action::FreeCompleted => crate::TraceAction::FreeCompleted,
        Action::SegmentAlloc => crate::TraceAction::SegmentAlloc,
        Action::SegmentFree => crate::TraceAction::SegmentFree,
        Action::SegmentMap => crate::TraceAction::SegmentMap,
        Action::SegmentUnmap => crate::TraceAction::SegmentUnmap,
        Action::Snapshot => crate::TraceAction::Snapshot,
        Action::Oom => crate::TraceAction::Oom,
        Action::Annotate => crate::TraceAction::Annotate,
        Action::Other => crate::TraceAction::from_name(other.as_deref().unwrap_or("other")),
    }
}

pub fn trace_event(e: analysis::timeline::TraceEvent) -> crate::TraceEvent {
    crate::TraceEvent {
        position: e.position,
        action: trace_action(e.action, e.other_action),
        address: e.address,
        size_bytes: e.size_bytes,
        stream: e.stream,
        time_us: e.time_us,
        site: e.site.map(frame),
    }
}

/// Call sites sent once per answer: each stack's site an index into `sites`.
struct SiteTable<'a> {
    snap: &'a snapshot::Snapshot,
    index: &'a index::Index,
    ids: std::collections::HashMap<model::FrameId, u32>,
    sites: Vec<crate::Frame>,
}

impl<'a> SiteTable<'a> {
    fn new(snap: &'a snapshot::Snapshot, index: &'a index::Index) -> Self {
        SiteTable {
            snap,
            index,
            ids: Default::default(),
            sites: Vec::new(),
        }
    }

    /// The index of `stack`'s site (none for the empty stack or one without a site).
    fn id(&mut self, stack: model::StackId) -> Option<u32> {
        if stack == model::StackId::EMPTY {
            return None;
        }
        let f = self.index.frames.label(self.snap, stack)?;
        let (snap, index, sites) = (self.snap, self.index, &mut self.sites);
        Some(*self.ids.entry(f).or_insert_with(|| {
            sites.push(frame(index.frames.site_view(snap, f)));
            (sites.len() - 1) as u32
        }))
    }
}

/// The allocator's state for the dashboard: each block with its call site (one table of sites,
/// so the view colours blocks by the line that made them).
pub fn allocator_state(
    s: state::AllocatorState,
    snap: &snapshot::Snapshot,
    index: &index::Index,
) -> crate::AllocatorState {
    let mut sites = SiteTable::new(snap, index);
    // Each block's category, where the device has a trace to read it from.
    let labels = index
        .device(s.device)
        .filter(|d| d.len > 0)
        .map(|d| categories::categories(snap, index, d));
    let category_of = |a: Option<u32>| {
        let (labels, a) = (labels?, a?);
        Some(category(labels.labels.get(a as usize)?.category))
    };
    let segments = s
        .segments
        .into_iter()
        .map(|g| crate::SegmentView {
            address: g.address,
            total_bytes: g.total_size,
            stream: g.stream,
            segment_type: segment_type(g.segment_type),
            pool_id: g.pool_id,
            is_expandable: g.is_expandable,
            mapped: g.mapped.map(|m| crate::MappedGrowth {
                before_trace_bytes: m.before_trace_bytes,
                mapped_in_trace_bytes: m.mapped_in_trace_bytes,
                maps: m.maps,
                last: m.last.map(|l| crate::MapEvent {
                    event: l.event,
                    address: l.address,
                    bytes: l.bytes,
                }),
            }),
            blocks: g
                .blocks
                .into_iter()
                .map(|b| crate::BlockView {
                    address: b.address,
                    size_bytes: b.size,
                    requested_bytes: b.requested_size,
                    state: block_state(b.state),
                    allocation: b.allocation,
                    category: category_of(b.allocation),
                    stack: stack_id(b.stack),
                    site: sites.id(b.stack),
                })
                .collect(),
            fragmentation: fragmentation(g.fragmentation),
        })
        .collect();
    crate::AllocatorState {
        device: s.device,
        position: s.position,
        exact: s.exact,
        segments,
        total: fragmentation(s.total),
        pools: s.pools.into_iter().map(pool).collect(),
        sites: sites.sites,
    }
}

fn flame(n: stacks::FlameNode) -> crate::FlameNode {
    crate::FlameNode {
        name: n.name,
        filename: n.filename,
        line: n.line,
        bytes: n.bytes,
        count: n.count,
        held: n.held,
        children: n.children.into_iter().map(flame).collect(),
    }
}

/// Memory by stack as `q` asks: at a moment (`position`, default the peak) or held over the
/// whole trace, of one category or all, the largest `max_sites` sites. `None`: no trace.
pub fn stacks_answer(
    snap: &model::Snapshot,
    index: &analysis::Index,
    device: i32,
    q: &crate::StacksQuery,
    max_sites: usize,
) -> Option<crate::StackReport> {
    let frames = flame_frames_in(q.frames.unwrap_or_else(|| default_frames(index)));
    let only = q.category.map(category_from_api);
    match q.weight.unwrap_or_default() {
        crate::FlameWeight::Live => {
            stacks::stacks_of_category(snap, index, device, q.position, max_sites, frames, only)
        }
        crate::FlameWeight::Held => {
            stacks::held_by_stack(snap, index, device, max_sites, frames, only)
        }
    }
    .map(stack_report)
}

pub fn stack_report(s: stacks::StackReport) -> crate::StackReport {
    crate::StackReport {
        device: s.device,
        position: s.position,
        total_bytes: s.total_bytes,
        count: s.count,
        sites: s.sites.into_iter().map(call_site).collect(),
        frames: match s.frames {
            analysis::FlameFrames::All => crate::FlameFrames::All,
            analysis::FlameFrames::PythonOnly => crate::FlameFrames::Python,
        },
        weight: match s.weight {
            analysis::FlameWeight::Live => crate::FlameWeight::Live,
            analysis::FlameWeight::Held => crate::FlameWeight::Held,
        },
        held: s.held.map(|h| crate::HeldClock {
            span_us: h.span_us,
            by_events: h.by_events,
            before_trace: h.before_trace,
            at_snapshot: h.at_snapshot,
        }),
        flame: flame(s.flame),
    }
}

pub fn segment_span(s: &index::SegmentSpan) -> crate::SegmentSpan {
    crate::SegmentSpan {
        address: s.address,
        size_bytes: s.size,
        stream: s.stream,
        segment_type: segment_type(s.segment_type),
        pool_id: s.pool_id,
        is_expandable: s.is_expandable,
        start: s.start,
        end: s.end,
    }
}

/// One allocation, followed by its index.
pub fn allocation_info(
    snap: &snapshot::Snapshot,
    index: &snapshot::analysis::Index,
    d: &snapshot::analysis::index::DeviceIndex,
    n: u32,
) -> crate::AllocationInfo {
    // What the timeline says of it (address, size, stream, lifetime), and what a selection adds.
    let a = tl::allocation_view(snap, d, n);
    crate::AllocationInfo {
        device: d.device,
        allocation: n,
        address: a.addr,
        size_bytes: a.size,
        stream: a.stream,
        stack: crate::StackId(a.stack.0),
        site: index.frames.site(snap, a.stack).map(frame),
        alloc_event: a.start,
        free_requested_event: d.free_requested_event(&snap.trace, n),
        free_event: a.end,
        alloc_us: a.start_time_us,
        free_us: a.end_time_us,
        segment: d.segment_of(&snap.trace, n).map(|s| s as u32),
    }
}

/// A device's stuck frees, their call sites sent once.
pub fn pending_frees(
    snap: &snapshot::Snapshot,
    index: &snapshot::analysis::Index,
    p: &snapshot::analysis::pending::PendingFrees,
) -> crate::PendingFrees {
    let mut sites = SiteTable::new(snap, index);
    let frees = p
        .frees
        .iter()
        .map(|f| crate::PendingFree {
            allocation: f.allocation,
            address: f.address,
            size_bytes: f.size_bytes,
            stream: f.stream,
            stack: crate::StackId(f.stack.0),
            site: sites.id(f.stack),
            requested_event: f.requested_event,
            completed_event: f.completed_event,
            requested_us: f.requested_us,
            waited_us: f.waited_us,
            waited_events: f.waited_events,
        })
        .collect();
    crate::PendingFrees {
        min_wait_us: p.min_wait_us,
        timed: p.timed,
        requested: p.requested,
        waited: p.waited,
        count: p.count,
        size_bytes: p.bytes,
        longest_us: p.longest_us,
        still_pending: p.still_pending,
        streams: p.streams.clone(),
        frees,
        sites: sites.sites,
    }
}

/// How a run's ranks were put on one axis.
pub fn alignment(a: &snapshot::analysis::run::Alignment) -> crate::Alignment {
    use snapshot::analysis::run::Alignment;
    match a {
        Alignment::Clock => crate::Alignment::Clock,
        Alignment::Mark { name } => crate::Alignment::Mark { name: name.clone() },
        Alignment::Start => crate::Alignment::Start,
        Alignment::Events => crate::Alignment::Events,
    }
}

pub fn diff(d: diff::Diff) -> crate::Diff {
    crate::Diff {
        device_a: d.device_a,
        device_b: d.device_b,
        figures: d
            .figures
            .into_iter()
            .map(|f| crate::FigureDelta {
                name: f.figure.name().to_string(),
                a: f.a,
                b: f.b,
                delta: f.delta,
                bytes: f.figure.is_bytes(),
                change: if f.figure.more_is_worse() {
                    crate::ChangeMeaning::Cost
                } else {
                    crate::ChangeMeaning::Neutral
                },
            })
            .collect(),
        categories_at_peak: d.categories_at_peak.map(|(a, b)| crate::CategoriesDelta {
            a: category_bytes(a),
            b: category_bytes(b),
        }),
        sites_at_peak: d
            .sites_at_peak
            .into_iter()
            .map(|s| crate::SiteDelta {
                site: s.site.map(frame),
                a_bytes: s.a_bytes,
                b_bytes: s.b_bytes,
                delta_bytes: s.delta_bytes,
                a_count: s.a_count,
                b_count: s.b_count,
                frames: frames(s.frames),
            })
            .collect(),
        unchanged_sites: d.unchanged_sites,
        leaks: d
            .leaks
            .into_iter()
            .map(|l| crate::LeakDelta {
                site: l.site.map(frame),
                a_bytes: l.a_bytes,
                b_bytes: l.b_bytes,
                frames: frames(l.frames),
            })
            .collect(),
    }
}

/// What a limit is, engine → API (and back, [`engine_limit_kind`]).
pub fn limit_kind(k: snapshot::analysis::whatif::allocator::LimitKind) -> crate::LimitKind {
    match k {
        snapshot::analysis::whatif::allocator::LimitKind::Device => crate::LimitKind::Device,
        snapshot::analysis::whatif::allocator::LimitKind::Fraction => crate::LimitKind::Fraction,
    }
}

pub fn engine_limit_kind(k: crate::LimitKind) -> snapshot::analysis::whatif::allocator::LimitKind {
    match k {
        crate::LimitKind::Device => snapshot::analysis::whatif::allocator::LimitKind::Device,
        crate::LimitKind::Fraction => snapshot::analysis::whatif::allocator::LimitKind::Fraction,
    }
}

/// The what-if answer, engine → API.
pub fn whatif_outline(o: snapshot::analysis::whatif::Outline) -> crate::WhatIfOutline {
    crate::WhatIfOutline {
        device: o.device,
        events: o.events,
        settings: o.settings,
        recorded_peak_reserved_bytes: o.recorded_peak_reserved_bytes,
        live_peak_bytes: o.live_peak_bytes,
    }
}

pub fn whatif(w: snapshot::analysis::whatif::WhatIf) -> crate::WhatIf {
    use snapshot::analysis::whatif::allocator::SegAction;
    let event = |e: snapshot::analysis::whatif::SegEventView| crate::SegmentEvent {
        action: match e.action {
            SegAction::Alloc => crate::SegmentAction::SegmentAlloc,
            SegAction::Free => crate::SegmentAction::SegmentFree,
            SegAction::Map => crate::SegmentAction::SegmentMap,
            SegAction::Unmap => crate::SegmentAction::SegmentUnmap,
        },
        address: e.address,
        size_bytes: e.size_bytes,
    };
    let c = w.replay_check;
    crate::WhatIf {
        device: w.device,
        events: w.events,
        recorded_alloc_conf: w.recorded_alloc_conf,
        settings_recorded: w.settings_recorded,
        peak_before_trace: w.peak_before_trace,
        starts_mid_run: w.starts_mid_run,
        oom_ends_trace: w.oom_ends_trace,
        growth_ends_trace: w.growth_ends_trace,
        limit: w.limit.map(|l| crate::WhatIfLimit {
            bytes: l.bytes,
            kind: limit_kind(l.kind),
            source: match l.source {
                snapshot::analysis::whatif::LimitSource::Oom => crate::LimitSource::Oom,
                snapshot::analysis::whatif::LimitSource::Given => crate::LimitSource::Given,
            },
            detail: l.detail,
        }),
        replay_check: crate::ReplayCheck {
            recorded_segment_events: c.recorded_segment_events,
            matched_segment_events: c.matched_segment_events,
            first_divergence: c.first_divergence.map(|d| crate::Divergence {
                segment_event: d.segment_event,
                position: d.position,
                recorded: d.recorded.map(event),
                replayed: d.replayed.map(event),
                why: d.why,
            }),
            recorded_peak_reserved_bytes: c.recorded_peak_reserved_bytes,
            replayed_peak_reserved_bytes: c.replayed_peak_reserved_bytes,
            allocs: c.allocs,
            allocs_at_recorded_address: c.allocs_at_recorded_address,
            exact: c.exact,
        },
        runs: w
            .runs
            .into_iter()
            .map(|r| crate::WhatIfRun {
                alloc_conf: r.alloc_conf,
                recorded: r.recorded,
                limit_bytes: r.limit_bytes,
                peak_reserved_bytes: r.peak_reserved_bytes,
                peak_allocated_bytes: r.peak_allocated_bytes,
                segments_at_end: r.segments_at_end,
                cuda_mallocs: r.cuda_mallocs,
                cuda_frees: r.cuda_frees,
                alloc_retries: r.alloc_retries,
                oom: r.oom,
                oom_position: r.oom_position,
                survivable_ooms: r.survivable_ooms,
                fatal_ooms: r.fatal_ooms,
                first_oom_position: r.first_oom_position,
                not_simulated: r.not_simulated,
                fragmentation_at_peak: r.fragmentation_at_peak,
                saving_bytes: r.saving_bytes,
                reserved_curve: r.reserved_curve,
            })
            .collect(),
        curves: w.curves.map(|c| crate::RecordedCurves {
            bucket_events: c.bucket_events,
            reserved: c.reserved,
            live: c.live,
        }),
    }
}

/// `memscope predict`'s answer (sizes are whole numbers: batches, sequence lengths); call sites
/// are named from `largest`, the recording the answer's unmodelled stacks are in.
pub fn predict(
    a: snapshot::analysis::whatif::predict::Answer,
    largest: Option<(&snapshot::Snapshot, &snapshot::analysis::Index)>,
    alloc_conf: &str,
    limit_bytes: Option<u64>,
) -> crate::PredictAnswer {
    use snapshot::analysis::whatif::predict::Unmodelled;
    let unmodelled = a
        .unmodelled
        .iter()
        .take(10)
        .map(|u| crate::UnmodelledSite {
            site: largest.and_then(|(snap, index)| index.frames.site(snap, u.stack).map(frame)),
            stack: stack_id(u.stack),
            why: match u.why {
                Unmodelled::NoRule => crate::UnmodelledWhy::NoRule,
                Unmodelled::OnlyHere => crate::UnmodelledWhy::OnlyHere,
            },
            requests: u.requests as u64,
            bytes: u.bytes,
        })
        .collect();
    crate::PredictAnswer {
        sizes: a
            .sizes
            .into_iter()
            .map(|s| crate::PredictedSize {
                size: s.prediction.size as u64,
                peak_allocated_bytes: s.prediction.peak_allocated_bytes,
                peak_reserved_bytes: s.prediction.peak_reserved_bytes,
                oom: s.prediction.oom,
                survivable_ooms: s.prediction.survivable_ooms,
                first_oom_step: s.prediction.oom_step,
                headroom_bytes: s.headroom_bytes,
                error_bytes: s.error_bytes,
                linear_peak_reserved_bytes: s.linear_peak_reserved_bytes,
            })
            .collect(),
        largest_fitting_size: a.largest_fitting_size.map(|s| s as u64),
        method: "replay".into(),
        alloc_conf: alloc_conf.to_string(),
        limit_bytes,
        recorded: a
            .recorded
            .into_iter()
            .map(|(size, peak)| crate::RecordedSize {
                size: size as u64,
                peak_reserved_bytes: peak,
            })
            .collect(),
        requests: a.requests as u64,
        unmatched_requests: a.unmatched as u64,
        requests_without_rule: a.without_rule as u64,
        expected_error: a.expected_error,
        unmodelled,
        growth: a
            .growth
            .into_iter()
            .map(|g| crate::CategoryGrowth {
                category: category(g.category),
                bytes_per_unit: g.bytes_per_unit,
                at_largest_bytes: g.at_largest_bytes,
            })
            .collect(),
    }
}

/// The device a query names, or the one the views show when it names none
/// ([`index::Index::default_device`]); the message a person reads when there is none.
pub fn device_index(
    index: &index::Index,
    device: Option<i32>,
) -> Result<&index::DeviceIndex, String> {
    match device {
        Some(d) => index
            .device(d)
            .ok_or_else(|| format!("snapshot has no trace for device {d}")),
        None => index
            .default_device()
            .ok_or_else(|| "snapshot has no device traces (history was not recorded)".to_string()),
    }
}

/// `GET …/timeline`: a window of device `d`'s trace as the timeline draws it (the query's
/// window, buckets and largest allocations, and live bytes by category when asked); `None` when
/// the trace is empty.
pub fn timeline_answer(
    snap: &snapshot::model::Snapshot,
    index: &index::Index,
    d: &index::DeviceIndex,
    q: &crate::TimelineQuery,
) -> Option<crate::TimelineAnswer> {
    let w = tl::window(
        snap,
        index,
        d,
        q.axis.map(axis_in),
        q.from.zip(q.to),
        q.buckets_or_default(),
        q.allocations_or_default(),
    )?;
    let categories = (q.categories == Some(true)).then(|| {
        let spans: Vec<(u32, u32)> = w
            .timeline
            .buckets
            .iter()
            .map(|b| (b.first, b.last))
            .collect();
        categories::at_bucket_peaks(snap, index, d, &spans)
            .into_iter()
            .map(category_bytes)
            .collect()
    });
    Some(crate::TimelineAnswer {
        categories,
        device: w.device,
        axis: axis(w.axis),
        timeline: timeline(w.timeline),
        allocations: w.allocations.into_iter().map(allocation).collect(),
        stacks: w
            .stacks
            .into_iter()
            .map(|(k, v)| (stack_id(k), frames(v)))
            .collect(),
        sites: w
            .sites
            .into_iter()
            .map(|(k, v)| (stack_id(k), v.map(frame)))
            .collect(),
        annotations: w.annotations.into_iter().map(annotation).collect(),
        ooms: w.ooms.into_iter().map(oom_marker).collect(),
        first_time_us: w.first_time_us,
        last_time_us: w.last_time_us,
        fitted: w.fitted.map(|f| crate::FittedWindow {
            from_us: f.from_us,
            to_us: f.to_us,
            events_before: f.events_before,
            events_after: f.events_after,
            idle_before_us: f.idle_before_us,
            idle_after_us: f.idle_after_us,
        }),
    })
}

/// How many call sites `GET …/stacks` lists.
pub const STACK_SITES: usize = 200;

/// `GET …/state`: the allocator's state on the query's device (or the default one; a
/// segments-only snapshot's own state) at its position (default: the end).
pub fn state_answer(
    snap: &snapshot::model::Snapshot,
    index: &index::Index,
    q: &crate::PositionQuery,
) -> crate::AllocatorState {
    let device = match device_index(index, q.device) {
        Ok(d) => d.device,
        // Segments-only snapshots still have a state: the snapshot's own.
        Err(_) => snap.segments.first().map_or(0, |s| s.device),
    };
    let len = index.device(device).map_or(0, |d| d.len);
    allocator_state(
        analysis::state_at(snap, index, device, q.position.unwrap_or(len).min(len)),
        snap,
        index,
    )
}

/// `GET …/stacks`: memory by stack at the query's moment, or over the whole trace.
pub fn stacks_report(
    snap: &snapshot::model::Snapshot,
    index: &index::Index,
    q: &crate::StacksQuery,
) -> Result<crate::StackReport, String> {
    let device = device_index(index, q.device)?.device;
    stacks_answer(snap, index, device, q, STACK_SITES).ok_or_else(|| "no trace".to_string())
}

/// `GET …/segments`: each segment's life over the trace, and the frees still pending at its end.
pub fn segments_answer(
    snap: &snapshot::model::Snapshot,
    index: &index::Index,
    q: &crate::DeviceQuery,
) -> Result<crate::SegmentSpans, String> {
    let d = device_index(index, q.device)?;
    Ok(crate::SegmentSpans {
        device: d.device,
        events: d.len,
        segments: d.segments.iter().map(segment_span).collect(),
        pending: pending_frees(
            snap,
            index,
            analysis::pending::default_pending_frees(snap, d),
        ),
    })
}

/// `GET …/events`: the trace's events around a position.
pub fn events_answer(
    snap: &snapshot::model::Snapshot,
    index: &index::Index,
    q: &crate::EventsQuery,
) -> Result<crate::EventsAround, String> {
    let d = device_index(index, q.device)?;
    let position = q.position.unwrap_or(d.len).min(d.len);
    let around = tl::events_around(
        snap,
        index,
        d.device,
        position,
        q.before.unwrap_or(8).min(200),
        q.after.unwrap_or(8).min(200),
    );
    Ok(crate::EventsAround {
        device: d.device,
        position,
        events: d.len,
        around: around.into_iter().map(trace_event).collect(),
    })
}

/// `GET …/allocations/{n}`: allocation `n` of the query's device.
pub fn allocation_answer(
    snap: &snapshot::model::Snapshot,
    index: &index::Index,
    n: u32,
    q: &crate::DeviceQuery,
) -> Result<crate::AllocationInfo, String> {
    let d = device_index(index, q.device)?;
    if n as usize >= d.allocations.len() {
        return Err(format!(
            "no allocation {n} on device {}: it has {}",
            d.device,
            d.allocations.len()
        ));
    }
    Ok(allocation_info(snap, index, d, n))
}

/// `GET …/frames/{stack}`: a stack's frames as the views show them.
pub fn frames_answer(
    snap: &snapshot::model::Snapshot,
    index: &index::Index,
    stack: u32,
) -> Result<Vec<crate::Frame>, String> {
    if stack as usize >= snap.stacks.len() {
        return Err(format!("no stack {stack}"));
    }
    Ok(frames(index.frames.display(snap, model::StackId(stack))))
}
