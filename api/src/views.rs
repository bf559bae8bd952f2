//! A snapshot's views: the timeline window, the allocator's state at a position, memory by call
//! stack, segment lifetimes, and their query parameters.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{Axis, BlockState, Frame, PoolId, SegmentType, StackId};

/// `GET /api/snapshots/{id}/timeline` query.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TimelineQuery {
    /// The device (default: the first with a trace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<i32>,
    /// The axis `from`/`to` are given on (default: time when recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub axis: Option<Axis>,
    /// The window, on `axis` (both or neither; default: the whole trace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<f64>,
    /// Buckets to reduce the window to (about the canvas width in pixels; default 1000, at most
    /// 10,000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buckets: Option<usize>,
    /// How many of the largest allocations overlapping the window to include (default 2000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocations: Option<usize>,
    /// Also the bytes per category in each bucket ([`TimelineAnswer::categories`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub categories: Option<bool>,
}

impl TimelineQuery {
    /// `buckets`, or its default.
    pub fn buckets_or_default(&self) -> usize {
        self.buckets.unwrap_or(1000)
    }

    /// `allocations`, or its default, held to the most the server returns (20,000).
    pub fn allocations_or_default(&self) -> usize {
        self.allocations.unwrap_or(2000).min(20_000)
    }
}

/// Live and reserved bytes over a run of events (min and max within it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Bucket {
    /// First and last position covered (position `p`: after `p` events).
    pub first: u32,
    pub last: u32,
    pub time_us: i64,
    #[serde(rename = "live_min")]
    pub live_min_bytes: u64,
    #[serde(rename = "live_max")]
    pub live_max_bytes: u64,
    #[serde(rename = "reserved_min")]
    pub reserved_min_bytes: u64,
    #[serde(rename = "reserved_max")]
    pub reserved_max_bytes: u64,
    /// Allocations made in the bucket and their requested bytes: every one, however
    /// short-lived (what the density view draws).
    #[serde(default)]
    pub allocs: u32,
    #[serde(default)]
    pub alloc_bytes: u64,
}

/// A window of a device's trace reduced to buckets.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Timeline {
    pub device: i32,
    /// Events in the device's whole trace.
    pub events: u32,
    pub first_position: u32,
    pub last_position: u32,
    /// The window's ends on the answer's axis (µs on the time axis, positions on the event
    /// axis): what the x axis spans, so a pixel is the same moment for the page and the server.
    pub x_from: f64,
    pub x_to: f64,
    /// Equal in the axis's unit: equal durations on the time axis, equal event counts on the
    /// event axis. A bucket holds the state at its start and after each event in it.
    pub buckets: Vec<Bucket>,
    pub peak_position: u32,
    pub peak_live_bytes: u64,
}

/// An allocation overlapping a timeline window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AllocationView {
    /// Its index among the device's allocations.
    pub id: u32,
    pub addr: u64,
    #[serde(rename = "size")]
    pub size_bytes: u64,
    pub stream: u64,
    /// Event index of the alloc, or none if made before the trace started.
    pub start: Option<u32>,
    /// Event index of `free_completed`, or none if alive at the snapshot.
    pub end: Option<u32>,
    pub start_time_us: Option<i64>,
    pub end_time_us: Option<i64>,
    /// Its stack; the answer carries each stack's frames once.
    pub stack: StackId,
}

impl AllocationView {
    /// Alive after `p` events (made before `p`, freed at or after it).
    pub fn alive_at(&self, p: u32) -> bool {
        self.start.is_none_or(|s| s < p) && self.end.is_none_or(|e| e >= p)
    }
}

/// A named range of the trace (`record_function` / `external_annotations` START..END pairs),
/// ranges of one name closer than one bucket merged (`count` says how many).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnnotationRange {
    pub name: String,
    pub start_us: i64,
    pub end_us: i64,
    pub count: u32,
}

/// An `oom` entry's place on the timeline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OomMarker {
    pub position: u32,
    pub time_us: i64,
    /// The size the failed request asked for.
    #[serde(rename = "bytes")]
    pub requested_bytes: u64,
}

/// `GET /api/snapshots/{id}/timeline`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimelineAnswer {
    pub device: i32,
    pub axis: Axis,
    pub timeline: Timeline,
    /// The largest allocations overlapping the window, largest first.
    pub allocations: Vec<AllocationView>,
    /// Frames of every stack the allocations refer to (user frames first, noise left out).
    pub stacks: BTreeMap<StackId, Vec<Frame>>,
    /// The frame each of those stacks is labelled by (first user frame, …).
    pub sites: BTreeMap<StackId, Option<Frame>>,
    pub annotations: Vec<AnnotationRange>,
    pub ooms: Vec<OomMarker>,
    /// The device's first and last event times (the time axis's origin and end).
    pub first_time_us: i64,
    pub last_time_us: i64,
    /// Set when no window was asked for and the first view was fitted to the activity (long idle
    /// stretches left out); ask for `first_time_us..last_time_us` to see everything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fitted: Option<FittedWindow>,
    /// With `categories=true`: for each bucket, what was alive by category where its live bytes
    /// are highest (so the stacked categories reach the bucket's `live_max`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub categories: Option<Vec<crate::categories::CategoryBytes>>,
}

/// What the first view left out to show where memory changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FittedWindow {
    pub from_us: i64,
    pub to_us: i64,
    pub events_before: u32,
    pub events_after: u32,
    /// Idle time (no event at all) left out before and after the window.
    pub idle_before_us: i64,
    pub idle_after_us: i64,
}

impl TimelineAnswer {
    /// The x of a bucket's start on this answer's axis.
    pub fn bucket_x(&self, b: &Bucket) -> f64 {
        match self.axis {
            Axis::Time => b.time_us as f64,
            Axis::Event => b.first as f64,
        }
    }

    /// The bucket holding moment `x` on the answer's axis (the last one starting at or before
    /// it; the first before them all); none without buckets.
    pub fn bucket_at(&self, x: f64) -> Option<usize> {
        let b = &self.timeline.buckets;
        (!b.is_empty()).then(|| {
            b.partition_point(|k| self.bucket_x(k) <= x)
                .saturating_sub(1)
                .min(b.len() - 1)
        })
    }

    /// Whether `stack`'s frames mention `needle` (lower-case; empty matches everything).
    pub fn stack_mentions(&self, stack: StackId, needle: &str) -> bool {
        needle.is_empty()
            || self.stacks.get(&stack).is_some_and(|frames| {
                frames
                    .iter()
                    .any(|f| f.short().to_lowercase().contains(needle))
            })
    }
}

/// `GET /api/snapshots/{id}/state` query, and the position of `/stacks`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PositionQuery {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<i32>,
    /// After this many events (default: the end for state, the peak for stacks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position: Option<u32>,
}

/// Which frames the flame tree is built from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FlameFrames {
    /// Every frame (Python and C++).
    #[default]
    All,
    /// Python frames only; allocations without one under `(no Python frames)`.
    Python,
}

impl<'de> Deserialize<'de> for FlameFrames {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        match s.as_str() {
            "all" => Ok(FlameFrames::All),
            "python" => Ok(FlameFrames::Python),
            other => Err(serde::de::Error::custom(format!(
                "frames={other}: use all or python"
            ))),
        }
    }
}

/// What the stacks tab weighs memory by.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FlameWeight {
    /// The bytes alive at one moment (`position`, default the peak).
    #[default]
    Live,
    /// Each allocation's bytes × the time it was held (alloc to free completed), summed over the
    /// whole trace: what held memory longest.
    Held,
}

impl FlameWeight {
    pub fn as_str(self) -> &'static str {
        match self {
            FlameWeight::Live => "live",
            FlameWeight::Held => "held",
        }
    }
    /// The figure sites and flame nodes are ordered and drawn by: bytes at a moment, or byte ×
    /// µs held.
    pub fn of(self, bytes: u64, held: f64) -> f64 {
        match self {
            FlameWeight::Live => bytes as f64,
            FlameWeight::Held => held,
        }
    }
}

impl<'de> Deserialize<'de> for FlameWeight {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        match s.as_str() {
            "live" => Ok(FlameWeight::Live),
            "held" => Ok(FlameWeight::Held),
            other => Err(serde::de::Error::custom(format!(
                "weight={other}: use live (bytes at a moment) or held (bytes × time held)"
            ))),
        }
    }
}

/// `GET /api/snapshots/{id}/stacks` query.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StacksQuery {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frames: Option<FlameFrames>,
    /// Only allocations of this category ([`crate::categories`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub category: Option<crate::categories::Category>,
    /// Bytes at a moment (default), or bytes × time held over the whole trace (`position` is
    /// then not read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<FlameWeight>,
}

/// `?device=N` (default: the first device with a trace).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DeviceQuery {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<i32>,
}

/// Where memory goes in a segment, a pool or a device.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fragmentation {
    pub segments: u32,
    pub reserved_bytes: u64,
    pub allocated_bytes: u64,
    pub requested_bytes: u64,
    /// Rounding waste inside allocated blocks (allocated − requested).
    pub internal_bytes: u64,
    /// Cached free memory (reserved − allocated).
    pub external_bytes: u64,
    pub inactive_blocks: u32,
    pub largest_free_bytes: u64,
}

/// A block of a segment at a position.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BlockView {
    pub address: u64,
    #[serde(rename = "size")]
    pub size_bytes: u64,
    #[serde(rename = "requested_size")]
    pub requested_bytes: u64,
    pub state: BlockState,
    /// Index of the allocation among the device's allocations, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocation: Option<u32>,
    /// What the allocation is ([`crate::categories`]), when the trace knows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub category: Option<crate::categories::Category>,
    /// Its stack (resolve with `/frames/{stack}`; 0: none).
    pub stack: StackId,
    /// Its call site: an index into [`AllocatorState::sites`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub site: Option<u32>,
}

/// A segment at a position, its blocks in address order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SegmentView {
    pub address: u64,
    #[serde(rename = "total_size")]
    pub total_bytes: u64,
    pub stream: u64,
    pub segment_type: SegmentType,
    pub pool_id: PoolId,
    pub is_expandable: bool,
    /// For an expandable segment: how its mapped range grew up to this position.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mapped: Option<MappedGrowth>,
    pub blocks: Vec<BlockView>,
    pub fragmentation: Fragmentation,
}

/// How an expandable segment's mapped range came to be, as of a position: pages mapped before
/// the trace and by `segment_map` events (ranges still mapped there).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MappedGrowth {
    pub before_trace_bytes: u64,
    pub mapped_in_trace_bytes: u64,
    /// `segment_map` ranges of the trace still mapped.
    pub maps: u32,
    /// The newest of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<MapEvent>,
}

/// One `segment_map` range: mapped by event `event` (0-based; present after position `event + 1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MapEvent {
    pub event: u32,
    pub address: u64,
    pub bytes: u64,
}

/// One pool's figures (size class, stream, pool id).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolFragmentation {
    pub pool_id: PoolId,
    pub segment_type: SegmentType,
    pub stream: u64,
    #[serde(flatten)]
    pub figures: Fragmentation,
}

/// `GET /api/snapshots/{id}/state`: the allocator's segments and blocks after `position` events.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AllocatorState {
    pub device: i32,
    pub position: u32,
    /// True at the snapshot's own moment (as recorded), false when rebuilt from the trace.
    pub exact: bool,
    pub segments: Vec<SegmentView>,
    pub total: Fragmentation,
    pub pools: Vec<PoolFragmentation>,
    /// The call sites of the blocks (first user frame of each block's stack), each once.
    #[serde(default)]
    pub sites: Vec<Frame>,
}

/// Memory one call site holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallSite {
    /// The frame the site is known by (first user frame, …); none: no frames.
    pub site: Option<Frame>,
    /// Alive at the moment; weighed by [`FlameWeight::Held`], every byte allocated here.
    pub bytes: u64,
    pub count: u32,
    /// Byte × µs held over the trace ([`FlameWeight::Held`]; absent at a moment).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub held: f64,
    /// The largest stack of the site, user frames first.
    pub frames: Vec<Frame>,
    /// How many distinct stacks share the site.
    pub stacks: u32,
}

/// A node of the flame (icicle) tree: one frame, the bytes allocated under it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlameNode {
    pub name: String,
    pub filename: String,
    pub line: u32,
    pub bytes: u64,
    pub count: u32,
    /// Byte × µs held over the trace ([`FlameWeight::Held`]; absent at a moment).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub held: f64,
    pub children: Vec<FlameNode>,
}

fn is_zero(v: &f64) -> bool {
    *v == 0.0
}

/// `GET /api/snapshots/{id}/stacks`: memory by call site and a flame tree at a position.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StackReport {
    pub device: i32,
    pub position: u32,
    pub total_bytes: u64,
    pub count: u32,
    pub sites: Vec<CallSite>,
    /// The frames `flame` is built from: as asked, else Python when the snapshot has Python
    /// frames (what a Python user reads), else all.
    #[serde(default)]
    pub frames: FlameFrames,
    /// What `sites` and `flame` are weighed by.
    #[serde(default)]
    pub weight: FlameWeight,
    /// Weighed by [`FlameWeight::Held`]: the clock it ran on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held: Option<HeldClock>,
    pub flame: FlameNode,
}

/// The clock memory held over a trace was measured on ([`FlameWeight::Held`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct HeldClock {
    /// The trace's span, µs; events where it has no clock (`by_events`).
    pub span_us: f64,
    pub by_events: bool,
    /// Allocations made before the trace began, counted from its first event (held at least
    /// that long).
    pub before_trace: u32,
    /// Allocations still alive at the snapshot, counted to its last event.
    pub at_snapshot: u32,
}

impl HeldClock {
    /// The average bytes held over the trace, given byte × µs held.
    pub fn average_bytes(&self, held: f64) -> f64 {
        held / self.span_us.max(1.0)
    }
}

/// A segment's lifetime in events (cudaMalloc → cudaFree); for an expandable segment
/// (`is_expandable`), one mapped range's (`segment_map` → `segment_unmap`). `start`/`end` are
/// [`NO_EVENT`] when it predates the trace or still exists at the snapshot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SegmentSpan {
    pub address: u64,
    #[serde(rename = "size")]
    pub size_bytes: u64,
    pub stream: u64,
    pub segment_type: SegmentType,
    pub pool_id: PoolId,
    pub is_expandable: bool,
    pub start: u32,
    pub end: u32,
}

/// "No such event" in [`SegmentSpan`]: before the trace or after it.
pub const NO_EVENT: u32 = u32::MAX;

impl SegmentSpan {
    /// The `segment_alloc` event, if the trace has it.
    pub fn start_event(&self) -> Option<u32> {
        (self.start != NO_EVENT).then_some(self.start)
    }
    /// The `segment_free` event, if the segment was freed within the trace.
    pub fn end_event(&self) -> Option<u32> {
        (self.end != NO_EVENT).then_some(self.end)
    }
}

/// `GET /api/snapshots/{id}/segments`: every segment's lifetime on a device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SegmentSpans {
    pub device: i32,
    /// Events in the device's trace.
    pub events: u32,
    pub segments: Vec<SegmentSpan>,
    /// The frees that waited for another stream over the whole trace.
    #[serde(default)]
    pub pending: PendingFrees,
}

/// `GET /api/snapshots/{id}/allocations/{n}`: one allocation of a device's trace, by its index
/// (`BlockView::allocation`): what a selection in the segment map follows, whatever else later
/// sits at its address.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AllocationInfo {
    pub device: i32,
    pub allocation: u32,
    pub address: u64,
    #[serde(rename = "size")]
    pub size_bytes: u64,
    pub stream: u64,
    pub stack: StackId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub site: Option<Frame>,
    /// Its `alloc` event (none: made before the trace), `free_requested` and `free_completed`
    /// (none: alive when the snapshot was taken).
    pub alloc_event: Option<u32>,
    pub free_requested_event: Option<u32>,
    pub free_event: Option<u32>,
    pub alloc_us: Option<i64>,
    pub free_us: Option<i64>,
    /// The segment it sat in: an index into [`SegmentSpans::segments`].
    pub segment: Option<u32>,
}

/// Frees stuck pending on a device: `free_requested` long before `free_completed`, because the
/// block was used on another stream (`record_stream`). Counted over every allocation.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PendingFrees {
    /// Listed when they waited at least this long (1 ms).
    pub min_wait_us: i64,
    /// False when the trace has no times: every free that waited an event or more is listed.
    pub timed: bool,
    /// Frees requested in the trace, and how many waited at all.
    pub requested: u64,
    pub waited: u64,
    /// Those listed (over `min_wait_us`, or still pending at the snapshot however recent): how
    /// many, their bytes, the longest completed wait, how many still pending.
    pub count: u64,
    #[serde(rename = "bytes")]
    pub size_bytes: u64,
    pub longest_us: i64,
    pub still_pending: u64,
    /// The device's other streams: what the blocks may have waited for (the trace does not
    /// say which).
    pub streams: Vec<u64>,
    /// Still pending first, then the longest wait first; at most 2,000 (the totals count all).
    pub frees: Vec<PendingFree>,
    /// The call sites of the frees, each once (`PendingFree::site` indexes it).
    pub sites: Vec<Frame>,
}

/// One free that waited.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingFree {
    /// The allocation's index on the device (`BlockView::allocation`).
    pub allocation: u32,
    pub address: u64,
    #[serde(rename = "size")]
    pub size_bytes: u64,
    /// The stream the block was allocated on.
    pub stream: u64,
    pub stack: StackId,
    /// An index into [`PendingFrees::sites`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub site: Option<u32>,
    /// None: made before the trace and pending at the snapshot (the request is not recorded).
    pub requested_event: Option<u32>,
    /// None: still pending when the snapshot was taken.
    pub completed_event: Option<u32>,
    pub requested_us: i64,
    pub waited_us: i64,
    pub waited_events: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_fields_keep_their_json_keys() {
        let b: Bucket = serde_json::from_str(
            r#"{"first":0,"last":2,"time_us":5,"live_min":1,"live_max":2,"reserved_min":3,"reserved_max":4}"#,
        )
        .unwrap();
        assert_eq!((b.live_max_bytes, b.reserved_max_bytes), (2, 4));
        assert!(
            serde_json::to_string(&b)
                .unwrap()
                .contains("\"live_min\":1")
        );
    }

    #[test]
    fn a_missing_field_is_an_error_not_a_zero() {
        let e = serde_json::from_str::<Bucket>(r#"{"first":0,"last":2,"time_us":5}"#);
        assert!(e.unwrap_err().to_string().contains("live_min"));
    }

    #[test]
    fn flame_frames_name_the_choices_in_their_error() {
        let e = serde_json::from_str::<FlameFrames>("\"cpp\"").unwrap_err();
        assert!(e.to_string().contains("frames=cpp: use all or python"));
    }
}

/// `GET /api/snapshots/{id}/events?device=D&position=P&before=B&after=A`: the trace entries
/// around a position (the segments view's event list).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EventsQuery {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<i32>,
    /// Default: the last event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position: Option<u32>,
    /// Entries up to and including `position` (default 8, at most 200).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<u32>,
    /// Entries past it (default 8, at most 200).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<u32>,
}

/// One trace entry as people read it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceEvent {
    /// 1-based: the state "after event `position`" includes it.
    pub position: u32,
    pub action: crate::TraceAction,
    pub address: u64,
    #[serde(rename = "size")]
    pub size_bytes: u64,
    pub stream: u64,
    pub time_us: i64,
    /// The first user frame of its stack.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub site: Option<Frame>,
}

/// The answer to [`EventsQuery`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventsAround {
    pub device: i32,
    pub position: u32,
    /// Events on the device.
    pub events: u32,
    pub around: Vec<TraceEvent>,
}

/// What `GET /api/snapshots/{id}/report` writes: one self-contained HTML file, or Markdown.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReportFormat {
    #[default]
    Html,
    Md,
}

impl ReportFormat {
    pub const ALL: [ReportFormat; 2] = [ReportFormat::Html, ReportFormat::Md];
    pub fn as_str(self) -> &'static str {
        match self {
            ReportFormat::Html => "html",
            ReportFormat::Md => "md",
        }
    }
    pub fn parse(s: &str) -> Option<ReportFormat> {
        Self::ALL.into_iter().find(|f| f.as_str() == s)
    }
    pub fn content_type(self) -> &'static str {
        match self {
            ReportFormat::Html => "text/html; charset=utf-8",
            ReportFormat::Md => "text/markdown; charset=utf-8",
        }
    }
    /// The file a report of snapshot `name` is saved as: `run.pickle` → `run.memscope.html`.
    pub fn file_name(self, name: &str) -> String {
        let stem = crate::strip_snapshot_suffix(name);
        format!("{stem}.memscope.{}", self.as_str())
    }
}

/// `GET /api/snapshots/{id}/report` query.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReportQuery {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<ReportFormat>,
}
