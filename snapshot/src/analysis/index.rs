//! The derived tables every analysis shares, built once per snapshot in one pass per device:
//! live and reserved bytes after every event, allocation intervals (alloc → free), segment
//! intervals, and checkpoints of the live-allocation set so the allocator state at any position
//! is answered without replaying the trace from its start.
//!
//! Positions: position `p` of a device means "after its first `p` events"; `p = n` (the trace's
//! length) is the moment the snapshot was taken, where the segments and blocks are exact.

use rustc_hash::FxHashMap;
use serde::Serialize;

use crate::frames::FrameClass;
use crate::model::{Action, BlockState, SegmentType, Snapshot, StackId, TraceTable};

/// Marks an allocation made before the first recorded event, or never freed.
pub const NONE: u32 = u32::MAX;

/// Events between two checkpoints of the live-allocation set, at least: a checkpoint copies the
/// whole set, so the next one waits as many events as the set holds ids when that is more. Their
/// cost stays in proportion to the events (a 13M-event trace that ends with 187,000 allocations
/// alive spent 80 % of its indexing copying and sorting them every 8,192 events, and held 834 MB
/// of them), and
/// a position's set is rebuilt from at most that many events, no more than the set it returns.
pub const CHECKPOINT_EVERY: u32 = 8192;

/// Events per block of the live series' block extremes.
pub const SERIES_BLOCK: usize = 256;

/// One allocation's lifetime in a device trace.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Allocation {
    // Address, size, stream and stack are its alloc row's (or, made before the trace, in
    // `DeviceIndex::pre_trace`): [`DeviceIndex::addr_of`], [`DeviceIndex::size_of`],
    // [`DeviceIndex::stream_of`], [`DeviceIndex::stack_of`]. Not stored: 28 of 40 bytes, 4M
    // times in a 12M-event trace.
    /// Event index of the `alloc`, or [`NONE`] if it was made before the trace starts.
    pub start: u32,
    /// Event index of `free_requested`, or [`NONE`].
    pub free_requested: u32,
    /// Event index of `free_completed`, or [`NONE`] if still alive when the snapshot was taken.
    pub end: u32,
}

impl Allocation {
    /// Alive at position `p` (after the first `p` events)?
    pub fn alive_at(&self, p: u32) -> bool {
        (self.start == NONE || self.start < p) && (self.end == NONE || p <= self.end)
    }
    pub fn pending_free_at(&self, p: u32) -> bool {
        self.free_requested != NONE && self.free_requested < p && self.alive_at(p)
    }
}

/// One segment's lifetime (cudaMalloc to cudaFree) in a device trace; for an expandable segment,
/// one mapped range's lifetime (`segment_map` to the `segment_unmap` that took it back). An
/// expandable segment at a position is the union of its ranges alive there, as PyTorch reports
/// it: one segment per contiguous mapped range.
#[derive(Clone, Debug, Serialize)]
pub struct SegmentSpan {
    pub address: u64,
    pub size: u64,
    pub stream: u64,
    pub segment_type: SegmentType,
    pub pool_id: (i64, i64),
    pub is_expandable: bool,
    /// Event index of `segment_alloc`, or [`NONE`] if it predates the trace.
    pub start: u32,
    /// Event index of `segment_free`, or [`NONE`] if it still exists at the snapshot.
    pub end: u32,
}

impl SegmentSpan {
    pub fn alive_at(&self, p: u32) -> bool {
        (self.start == NONE || self.start < p) && (self.end == NONE || p <= self.end)
    }
}

/// The allocations made in the trace that are alive at one position (see
/// [`DeviceIndex::alive_at`] for all of them).
#[derive(Clone, Debug)]
pub struct Checkpoint {
    pub position: u32,
    pub alive: Ids,
}

/// Ascending ids, each stored as its difference from the one before in LEB128 (1–2 bytes for
/// the dense ids of a live set instead of 4): checkpoints hold about one id per event of a trace
/// whose live set grows (13M in the 1 GB benchmark file, 50 MB as `u32`s).
#[derive(Clone, Default)]
pub struct Ids {
    bytes: Vec<u8>,
    len: u32,
}

impl Ids {
    /// From ascending ids (each greater than the one before).
    pub fn from_ascending(ids: impl IntoIterator<Item = u32>) -> Ids {
        let mut out = Ids::default();
        let mut last = 0u32;
        for id in ids {
            debug_assert!(out.len == 0 || id > last, "ids ascending");
            let mut d = id - if out.len == 0 { 0 } else { last };
            last = id;
            out.len += 1;
            while d >= 0x80 {
                out.bytes.push(d as u8 | 0x80);
                d >>= 7;
            }
            out.bytes.push(d as u8);
        }
        out.bytes.shrink_to_fit();
        out
    }

    pub fn len(&self) -> usize {
        self.len as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        let mut at = 0;
        let mut last = 0u32;
        (0..self.len).map(move |k| {
            // Written by `from_ascending` or checked by `from_bytes`: always there.
            let d = Self::difference(&self.bytes, &mut at).expect("checked ids") as u32;
            last = if k == 0 { d } else { last + d };
            last
        })
    }

    /// The LEB128 number at `at` (moved past it), or `None` where the bytes end first or it
    /// runs past 5 bytes (no id difference takes more).
    fn difference(bytes: &[u8], at: &mut usize) -> Option<u64> {
        let (mut d, mut shift) = (0u64, 0);
        loop {
            let b = *bytes.get(*at)?;
            *at += 1;
            d |= ((b & 0x7f) as u64) << shift;
            if b & 0x80 == 0 {
                return Some(d);
            }
            shift += 7;
            if shift > 28 {
                return None;
            }
        }
    }

    pub fn heap_bytes(&self) -> usize {
        self.bytes.capacity()
    }

    /// The encoded bytes, for the model file.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// From the model file's bytes: `len` ascending ids, every one below `below`, or `None`.
    pub(crate) fn from_bytes(bytes: Vec<u8>, len: u32, below: u32) -> Option<Ids> {
        let (mut at, mut last) = (0usize, 0u64);
        for k in 0..len {
            let d = Self::difference(&bytes, &mut at)?;
            if k > 0 && d == 0 {
                return None;
            }
            last += d;
            if last >= below as u64 {
                return None;
            }
        }
        (at == bytes.len()).then_some(Ids { bytes, len })
    }
}

impl std::fmt::Debug for Ids {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// For each event of a device trace, the allocation it belongs to, or [`NONE`]: 4 bytes an event
/// as a plain `u32` column, about half that packed. An event's allocation is near its
/// neighbours' (a block of 256 events allocates and frees within a few thousand allocations), so
/// the ids are [`Packed`](crate::packed::Packed), with [`NONE`] kept apart in a bitmap (a
/// segment event among them would otherwise widen its block to 32 bits) and the event stored
/// as the id before it.
#[derive(Clone, Default)]
pub struct EventAllocations {
    pub(crate) ids: crate::packed::Packed<u64>,
    /// Bit `e` set: event `e` belongs to no allocation.
    pub(crate) none: Vec<u64>,
    last: u64,
}

/// Bit `i` of a bitmap kept as 64-bit words (`EventAllocations::none`, `DeviceBuilder::not_open`).
#[inline]
fn bit(words: &[u64], i: usize) -> bool {
    words[i / 64] >> (i % 64) & 1 != 0
}

/// Sets bit `i` of a bitmap kept as 64-bit words.
#[inline]
fn set_bit(words: &mut [u64], i: usize) {
    words[i / 64] |= 1 << (i % 64);
}

/// [`EventAllocations::reader`]: the block of events from `start` decoded.
pub struct EventReader<'a> {
    ea: &'a EventAllocations,
    start: u32,
    buf: [i64; crate::packed::BLOCK],
}

impl EventReader<'_> {
    /// The allocation event `e` belongs to, or [`NONE`].
    #[inline]
    pub fn get(&mut self, e: u32) -> u32 {
        const BLOCK: u32 = crate::packed::BLOCK as u32;
        if e.wrapping_sub(self.start) >= BLOCK {
            self.start = e / BLOCK * BLOCK;
            self.ea.ids.block_into((e / BLOCK) as usize, &mut self.buf);
        }
        if bit(&self.ea.none, e as usize) {
            return NONE;
        }
        self.buf[(e - self.start) as usize] as u32
    }
}

/// The ids, event by event (how they are stored is not part of the value).
impl std::fmt::Debug for EventAllocations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries((0..self.len() as u32).map(|e| self.get(e)))
            .finish()
    }
}

impl EventAllocations {
    /// The allocation event `e` belongs to, or [`NONE`].
    #[inline]
    pub fn get(&self, e: u32) -> u32 {
        if bit(&self.none, e as usize) {
            return NONE;
        }
        self.ids.get(e as usize) as u32
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// A reader for events read in order (a block of 256 decoded at a time; any order works,
    /// at a block's decoding per jump).
    pub fn reader(&self) -> EventReader<'_> {
        EventReader {
            ea: self,
            start: u32::MAX / 2,
            buf: [0; crate::packed::BLOCK],
        }
    }

    pub fn push(&mut self, id: u32) {
        let e = self.ids.len();
        if e.is_multiple_of(64) {
            self.none.push(0);
        }
        if id == NONE {
            set_bit(&mut self.none, e);
            self.ids.push(self.last);
        } else {
            self.last = id as u64;
            self.ids.push(self.last);
        }
    }

    fn reserve(&mut self, n: usize) {
        self.ids.reserve(n);
        self.none.reserve(n / 64 + 1);
    }

    pub fn heap_bytes(&self) -> usize {
        self.ids.heap_bytes() + self.none.capacity() * 8
    }

    /// From the parts the model file keeps, or why they do not make a column of `len` events.
    pub(crate) fn from_parts(
        ids: crate::packed::Packed<u64>,
        none: Vec<u64>,
        len: usize,
    ) -> Result<EventAllocations, &'static str> {
        if ids.len() != len || none.len() != len.div_ceil(64) {
            return Err("index: event allocations of the wrong length");
        }
        Ok(EventAllocations { ids, none, last: 0 })
    }
}

/// What the trace does not say about an allocation made before it: from its free row or, alive
/// at the end, its block.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PreTrace {
    pub(crate) id: u32,
    pub(crate) addr: u64,
    pub(crate) size: u64,
    pub(crate) stream: u64,
    /// The block's stack for one alive at the end ([`StackId::EMPTY`] for one first seen at a
    /// free: the trace never saw it made).
    pub(crate) stack: StackId,
}

/// Where allocation `id`'s address, size and stream are: `Ok(row)`, its alloc row in a trace
/// starting at row `first`, or `Err` with its [`PreTrace`] if it was made before the trace.
#[inline]
fn origin<'a>(
    first: usize,
    allocations: &[Allocation],
    pre: &'a [PreTrace],
    id: u32,
) -> Result<usize, Option<&'a PreTrace>> {
    let a = &allocations[id as usize];
    if a.start != NONE {
        return Ok(first + a.start as usize);
    }
    Err(pre
        .binary_search_by_key(&id, |p| p.id)
        .ok()
        .map(|k| &pre[k]))
}

/// The bytes allocation `id` asked for (see [`origin`]).
#[inline]
fn size_of(
    t: &TraceTable,
    first: usize,
    allocations: &[Allocation],
    pre: &[PreTrace],
    id: u32,
) -> u64 {
    match origin(first, allocations, pre, id) {
        Ok(r) => t.size.get(r),
        Err(p) => p.map_or(0, |p| p.size),
    }
}

/// The timeline's first view fitted to where memory changes (`timeline::active_span`): what lies
/// outside it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Fitted {
    pub from_us: i64,
    pub to_us: i64,
    /// Events before and after the window (made before or after the idle stretch).
    pub events_before: u32,
    pub events_after: u32,
    /// The idle stretches left out (no event at all), before and after.
    pub idle_before_us: i64,
    pub idle_after_us: i64,
}

/// One peak: its bytes and the position (events of the device's trace before it) where it was
/// first reached. Position 0 is the trace's start (the memory made before it). See `peaks.rs`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Peak {
    pub bytes: u64,
    pub position: u32,
}

/// Where a device's steps come from ([`super::steps`]; here so the index can keep them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StepSource {
    /// Step annotations (`ProfilerStep#N`, `record_function`).
    Annotations,
    /// One allocation the program makes once per step.
    Repeats,
}

/// One device's steps, in order.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Steps {
    pub source: StepSource,
    /// The annotation family ("ProfilerStep"), or the line that repeats.
    pub name: String,
    /// Each step's number (from its annotation, else counted from 1).
    pub numbers: Vec<u32>,
    /// Each step's first event (position, 0-based), ascending.
    pub starts: Vec<u32>,
    /// When each step's first event happened (`time_us` of that event).
    pub start_times_us: Vec<i64>,
}

impl Steps {
    /// The number of the step event `position` lies in; `None` before the first step.
    pub fn number_at(&self, position: u32) -> Option<u32> {
        let k = self.starts.partition_point(|&s| s <= position);
        (k > 0).then(|| self.numbers[k - 1])
    }

    pub fn len(&self) -> usize {
        self.starts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.starts.is_empty()
    }
}

/// How many of the largest allocations [`DeviceIndex::top_by_size`] keeps in order.
pub const TOP_BY_SIZE: usize = 1 << 16;

/// What the timeline derives from a device index once and then reuses on every query (each
/// was a pass over the whole trace per query: 60 ms apiece on a 12M-event trace).
#[derive(Clone, Debug, Default)]
pub(crate) struct LazyViews {
    /// The [`TOP_BY_SIZE`] largest allocations' ids, largest first (ties by id).
    pub(crate) top_by_size: std::sync::OnceLock<Vec<u32>>,
    /// The timeline's active span (`timeline::active_span`).
    pub(crate) active_span: std::sync::OnceLock<Option<Fitted>>,
    /// The peak of allocated (block) bytes (`peaks::allocated_peak`).
    pub(crate) allocated_peak: std::sync::OnceLock<Peak>,
    /// The allocations whose block is not their request rounded to 512 bytes, `(id, block
    /// bytes)` by id (`peaks::block_sizes`): what the allocator state at a moment draws.
    pub(crate) block_sizes: std::sync::OnceLock<Vec<(u32, u64)>>,
    /// Where each step starts (`steps::steps`).
    pub(crate) steps: StepsCache,
    /// What each allocation is (`categories::categories`).
    pub(crate) categories: CategoriesCache,
    /// Allocations made before each block of [`SERIES_BLOCK`] events: `(count, bytes)`, one
    /// entry per block boundary (`allocated_between`).
    pub(crate) made_before_block: std::sync::OnceLock<Vec<(u32, u64)>>,
    /// The frees that waited ([`super::pending::default_pending_frees`]).
    pub(crate) pending_frees: std::sync::OnceLock<super::pending_list::PendingFrees>,
}

/// The device's allocation labels once found; like [`StepsCache`], derived again after a reopen.
#[derive(Clone, Default)]
pub(crate) struct CategoriesCache(pub(crate) std::sync::OnceLock<super::labels::Categories>);

impl std::fmt::Debug for CategoriesCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CategoriesCache")
    }
}

/// The device's steps once found: a cache of what the index and the snapshot already say, not
/// stored in the model file (found again after a reopen), so not part of what a stored index
/// must equal (its `Debug` shows nothing).
#[derive(Clone, Default)]
pub(crate) struct StepsCache(pub(crate) std::sync::OnceLock<Option<Steps>>);

impl std::fmt::Debug for StepsCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StepsCache")
    }
}

/// What the summary replays of a device trace (alloc / free_completed from its first event,
/// allocations made before it not counted, as the fixtures' reference figures are computed),
/// counted while the index is built so the report does not walk the trace again.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TracedCounts {
    /// Events of each action, by `Action as usize`.
    pub actions: [u64; 11],
    /// Allocations made in the trace and open at its end, and their bytes.
    pub alive_at_end: u64,
    pub alive_at_end_bytes: u64,
    /// The highest of those bytes at any position.
    pub peak_bytes: u64,
}

/// Derived tables of one device trace.
#[derive(Clone, Debug)]
pub struct DeviceIndex {
    pub device: i32,
    /// First row of this device in [`TraceTable`].
    pub first_row: u32,
    pub len: u32,
    /// Live (allocated, as requested) bytes after event `i`, counting allocations made before the trace.
    pub live_bytes: crate::packed::Packed<u64>,
    /// The lowest and highest of `live_bytes` in each block of [`SERIES_BLOCK`] events, so the
    /// extremes over any range cost O(range / block + block) ([`DeviceIndex::extremes`]).
    pub(crate) live_blocks: Vec<(u64, u64)>,
    /// Reserved (segment) bytes from each position where they change on: `(p, bytes at p and
    /// after)`, positions ascending, all ≥ 1. Reserved memory moves only at segment events (72
    /// times in the tiled 12M-event benchmark), so a value per event cost 8 B for nothing.
    pub reserved_changes: Vec<(u32, u64)>,
    pub live_at_start: u64,
    pub reserved_at_start: u64,
    pub allocations: Vec<Allocation>,
    /// For each event, the allocation it belongs to (alloc/free events), or [`NONE`].
    pub event_allocation: EventAllocations,
    pub segments: Vec<SegmentSpan>,
    pub checkpoints: Vec<Checkpoint>,
    /// Address, size and stream of the allocations made before the trace (`start` = [`NONE`]),
    /// by id ascending; the others' are their alloc row's.
    pub(crate) pre_trace: Vec<PreTrace>,
    /// Views derived on first use by the dashboard's timeline (never by `memscope analyze`), or
    /// ahead of it (`timeline::derive_views`) when the index is stored.
    pub(crate) lazy: LazyViews,
    /// Position and bytes of the highest live bytes.
    pub peak_position: u32,
    pub peak_live_bytes: u64,
    /// Allocations alive at the end that were made before the trace started (trace truncated).
    pub predating_alive: u32,
    /// Frees whose allocation predates the trace.
    pub predating_freed: u32,
    pub traced: TracedCounts,
}

impl DeviceIndex {
    pub fn row(&self, event: u32) -> usize {
        (self.first_row + event) as usize
    }

    /// The event of allocation `id`'s `free_requested`, where the trace has it. A block made
    /// before the trace and pending at the snapshot is marked requested at event 0 (so it is
    /// pending from the start); that is its request only if event 0 is one at its address.
    pub fn free_requested_event(&self, t: &TraceTable, id: u32) -> Option<u32> {
        let a = self.allocations.get(id as usize)?;
        match a.free_requested {
            NONE => None,
            0 if a.start == NONE => (self.len > 0
                && t.action[self.row(0)] == Action::FreeRequested
                && t.addr.get(self.row(0)) == self.addr_of(t, id))
            .then_some(0),
            e => Some(e),
        }
    }

    /// The segment span allocation `id` sat in: the one alive when it was made (or, made before
    /// the trace, at the trace's start) whose range holds its address.
    pub fn segment_of(&self, t: &TraceTable, id: u32) -> Option<usize> {
        let a = self.allocations.get(id as usize)?;
        let p = if a.start == NONE { 0 } else { a.start + 1 };
        let addr = self.addr_of(t, id);
        self.segments
            .iter()
            .position(|s| s.alive_at(p) && s.address <= addr && addr < s.address + s.size)
    }

    /// The CUDA stream of allocation `id`.
    /// The stack that made allocation `id`.
    #[inline]
    pub fn stack_of(&self, t: &TraceTable, id: u32) -> StackId {
        match self.origin(id) {
            Ok(r) => t.stack.get(r),
            Err(p) => p.map_or(StackId::EMPTY, |p| p.stack),
        }
    }

    pub fn stream_of(&self, t: &TraceTable, id: u32) -> u64 {
        match self.origin(id) {
            Ok(r) => t.stream(r),
            Err(p) => p.map_or(0, |p| p.stream),
        }
    }

    /// The address of allocation `id`.
    #[inline]
    pub fn addr_of(&self, t: &TraceTable, id: u32) -> u64 {
        match self.origin(id) {
            Ok(r) => t.addr.get(r),
            Err(p) => p.map_or(0, |p| p.addr),
        }
    }

    /// The bytes allocation `id` asked for (its trace `size`).
    #[inline]
    pub fn size_of(&self, t: &TraceTable, id: u32) -> u64 {
        size_of(
            t,
            self.first_row as usize,
            &self.allocations,
            &self.pre_trace,
            id,
        )
    }

    #[inline]
    fn origin(&self, id: u32) -> Result<usize, Option<&PreTrace>> {
        origin(
            self.first_row as usize,
            &self.allocations,
            &self.pre_trace,
            id,
        )
    }

    /// This device's rows of the trace table.
    pub fn rows(&self) -> std::ops::Range<usize> {
        self.first_row as usize..(self.first_row + self.len) as usize
    }

    /// Live bytes at position `p`.
    pub fn live_at(&self, p: u32) -> u64 {
        if p == 0 {
            self.live_at_start
        } else {
            self.live_bytes.get((p - 1) as usize)
        }
    }

    pub fn reserved_at(&self, p: u32) -> u64 {
        match self.reserved_changes.partition_point(|&(q, _)| q <= p) {
            0 => self.reserved_at_start,
            i => self.reserved_changes[i - 1].1,
        }
    }

    /// Whether the device held any memory in the trace or at the snapshot (a file recorded on
    /// device 1 can have a device-0 trace with one `snapshot` marker and nothing else).
    pub fn holds_memory(&self) -> bool {
        self.device >= 0 && (self.peak_reserved() > 0 || !self.allocations.is_empty())
    }

    /// A trace that records no allocation (one `snapshot` marker, a stray free): history was not
    /// being recorded while this device's memory was allocated, so only the final state is known.
    pub fn history_off(&self) -> bool {
        self.len > 0 && self.traced.actions[Action::Alloc as usize] == 0
    }

    /// The highest reserved bytes at any position.
    pub fn peak_reserved(&self) -> u64 {
        self.reserved_changes
            .iter()
            .map(|&(_, r)| r)
            .fold(self.reserved_at_start, u64::max)
    }

    /// `(live min, live max, reserved min, reserved max)` over positions `lo..=hi` (clamped to
    /// the trace), in O((hi - lo) / block + block + changes in range).
    pub fn extremes(&self, lo: u32, hi: u32) -> (u64, u64, u64, u64) {
        let hi = hi.min(self.len);
        let lo = lo.min(hi);
        let (mut lmin, mut lmax) = (u64::MAX, 0u64);
        if lo == 0 {
            (lmin, lmax) = (self.live_at_start, self.live_at_start);
        }
        // Positions max(lo, 1)..=hi are values[max(lo, 1) - 1..hi].
        if hi >= 1 {
            let (mut a, b) = (lo.max(1) as usize - 1, hi as usize);
            while a < b {
                let block = a / SERIES_BLOCK;
                let block_end = ((block + 1) * SERIES_BLOCK).min(self.live_bytes.len());
                if a == block * SERIES_BLOCK && block_end <= b {
                    let (mn, mx) = self.live_blocks[block];
                    lmin = lmin.min(mn);
                    lmax = lmax.max(mx);
                    a = block_end;
                } else {
                    let end = block_end.min(b);
                    for v in self.live_bytes.iter_range(a..end) {
                        lmin = lmin.min(v);
                        lmax = lmax.max(v);
                    }
                    a = end;
                }
            }
        }
        let first = self.reserved_at(lo);
        let (mut rmin, mut rmax) = (first, first);
        let from = self.reserved_changes.partition_point(|&(q, _)| q <= lo);
        for &(q, r) in &self.reserved_changes[from..] {
            if q > hi {
                break;
            }
            rmin = rmin.min(r);
            rmax = rmax.max(r);
        }
        (lmin, lmax, rmin, rmax)
    }

    /// Ids of allocations alive at position `p`, from the nearest checkpoint at or before it.
    pub fn alive_at(&self, p: u32) -> Vec<u32> {
        let p = p.min(self.len);
        let ci = self
            .checkpoints
            .partition_point(|c| c.position <= p)
            .saturating_sub(1);
        let cp = &self.checkpoints[ci];
        let mut alive: rustc_hash::FxHashSet<u32> = cp.alive.iter().collect();
        let mut events = self.event_allocation.reader();
        for e in cp.position..p {
            let a = events.get(e);
            if a == NONE {
                continue;
            }
            let alloc = &self.allocations[a as usize];
            if alloc.start == e {
                alive.insert(a);
            } else if alloc.end == e {
                alive.remove(&a);
            }
        }
        // An allocation closed by a reuse of its address (no free recorded) stays in the set
        // above, since its closing event is the new allocation's. Checkpoints hold allocations
        // made in the trace; those made before it are added here.
        let mut v: Vec<u32> = alive
            .into_iter()
            .chain(self.pre_trace.iter().map(|pre| pre.id))
            .filter(|&a| self.allocations[a as usize].alive_at(p))
            .collect();
        v.sort_unstable();
        v
    }

    /// The ids of the [`TOP_BY_SIZE`] largest allocations (all of them if fewer), largest first,
    /// ties by id; found on first use, the first timeline's main cost after a restart. One pass
    /// counts sizes by power of two, a second keeps only the allocations in the classes that
    /// hold the largest [`TOP_BY_SIZE`] (with their sizes, so the selection and sort that follow
    /// compare plain keys). Selecting among all 4M allocations of a 12M-event trace with the
    /// size looked up at every comparison took 0.26 s; sorting them all, most of a second.
    pub fn top_by_size(&self, t: &TraceTable) -> &[u32] {
        self.lazy.top_by_size.get_or_init(|| {
            largest_ids(self.allocations.len() as u32, TOP_BY_SIZE, |i| {
                self.size_of(t, i)
            })
        })
    }

    /// Whether what [`super::warm`] works out (the labels by category, the frees that waited)
    /// is ready, so that a view reading it answers without the pass.
    pub fn warmed(&self) -> bool {
        self.lazy.categories.0.get().is_some() && self.lazy.pending_frees.get().is_some()
    }

    /// How many allocations were made by events `lo..hi` (alloc events: `(count, requested
    /// bytes)`), every one counted: from running totals at block boundaries (made on the first
    /// call, one pass) and at most two partial blocks read from the trace.
    pub fn allocated_between(&self, t: &TraceTable, lo: u32, hi: u32) -> (u32, u64) {
        let block = SERIES_BLOCK as u32;
        // Running totals at each full block's start, and at the last full block's end.
        let totals = self.lazy.made_before_block.get_or_init(|| {
            let mut acc = (0u32, 0u64);
            let mut out = vec![acc];
            for k in 0..self.len / block {
                let (n, bytes) = self.allocs_in(t, k * block, (k + 1) * block);
                acc = (acc.0 + n, acc.1 + bytes);
                out.push(acc);
            }
            out
        });
        let hi = hi.min(self.len);
        let lo = lo.min(hi);
        let (first_full, last_full) = (lo.div_ceil(block), hi / block);
        if first_full >= last_full {
            return self.allocs_in(t, lo, hi);
        }
        let head = self.allocs_in(t, lo, first_full * block);
        let tail = self.allocs_in(t, last_full * block, hi);
        let (a, b) = (totals[first_full as usize], totals[last_full as usize]);
        (head.0 + (b.0 - a.0) + tail.0, head.1 + (b.1 - a.1) + tail.1)
    }

    /// Alloc rows among events `lo..hi`, read from the trace: `(count, requested bytes)`.
    fn allocs_in(&self, t: &TraceTable, lo: u32, hi: u32) -> (u32, u64) {
        (lo..hi).fold((0, 0), |(n, bytes), e| {
            let r = self.row(e);
            if t.action[r] == Action::Alloc {
                (n + 1, bytes + t.size.get(r))
            } else {
                (n, bytes)
            }
        })
    }

    /// The peak of allocated (block) bytes (`peaks::allocated_peak`), computed once.
    pub(crate) fn allocated_peak(&self, compute: impl FnOnce() -> Peak) -> Peak {
        *self.lazy.allocated_peak.get_or_init(compute)
    }

    /// The active span of the time axis (`timeline::active_span`), computed once.
    pub(crate) fn active_span_with(
        &self,
        compute: impl FnOnce() -> Option<Fitted>,
    ) -> Option<Fitted> {
        *self.lazy.active_span.get_or_init(compute)
    }

    pub fn heap_bytes(&self) -> usize {
        self.live_bytes.heap_bytes()
            + self.live_blocks.capacity() * 16
            + self.reserved_changes.capacity() * 16
            + self.allocations.capacity() * std::mem::size_of::<Allocation>()
            + self.event_allocation.heap_bytes()
            + self.segments.capacity() * std::mem::size_of::<SegmentSpan>()
            + self
                .checkpoints
                .iter()
                .map(|c| c.alive.heap_bytes() + 40)
                .sum::<usize>()
            + self.lazy.top_by_size.get().map_or(0, |v| v.capacity() * 4)
            + self.pre_trace.capacity() * std::mem::size_of::<PreTrace>()
    }
}

/// Derived tables for every device trace, plus frame classes.
#[derive(Clone, Debug)]
pub struct Index {
    pub devices: Vec<DeviceIndex>,
    pub frames: FrameClass,
    /// How many device traces were indexed while the snapshot was parsed (the rest after).
    pub built_while_parsing: usize,
}

impl Index {
    pub fn new(snap: &Snapshot) -> Index {
        Index::with_built(snap, Vec::new())
    }

    /// The index, taking each device trace's tables from `built` where a builder followed
    /// exactly its rows while the snapshot was parsed (`follow.rs`: keyed by the first row and
    /// length its list's rows have in the table), and building the others.
    pub fn with_built(snap: &Snapshot, built: Vec<((u32, u32), DeviceBuilder)>) -> Index {
        let mut built: Vec<Option<((u32, u32), DeviceBuilder)>> =
            built.into_iter().map(Some).collect();
        let mut built_while_parsing = 0;
        let mut devices: Vec<DeviceIndex> = snap
            .devices
            .iter()
            .map(|d| {
                let followed = built.iter_mut().find(|b| {
                    b.as_ref().is_some_and(|((first, len), b)| {
                        *first == d.rows.start && *len as usize == d.rows.len() && b.len() == *len
                    })
                });
                match followed.and_then(Option::take) {
                    Some((_, b)) if !d.rows.is_empty() => {
                        built_while_parsing += 1;
                        b.finish(snap, d.device, d.rows.start)
                    }
                    _ => build_device(snap, d.device, d.rows.clone()),
                }
            })
            .collect();
        // A device with segments but no trace list at all (PyTorch 1.13 wrote none): an empty
        // trace, so its segments can still be shown as they were at the snapshot.
        let mut untraced: Vec<i32> = snap
            .segments
            .iter()
            .map(|s| s.device)
            .filter(|&d| d >= 0 && !devices.iter().any(|x| x.device == d))
            .collect();
        untraced.sort_unstable();
        untraced.dedup();
        for d in untraced {
            devices.push(build_device(snap, d, 0..0));
        }
        Index {
            devices,
            frames: FrameClass::new(snap),
            built_while_parsing,
        }
    }

    pub fn device(&self, device: i32) -> Option<&DeviceIndex> {
        self.devices.iter().find(|d| d.device == device)
    }

    /// The devices with a trace, in order.
    pub fn traced(&self) -> impl Iterator<Item = &DeviceIndex> {
        self.devices.iter().filter(|d| d.len > 0)
    }

    /// The device views show when none is chosen: the one that held the most memory (its highest
    /// reserved bytes), then the longest trace, then the lowest ordinal. A file recorded on
    /// device 1 can have a device-0 trace holding one `snapshot` marker and no memory.
    pub fn default_device(&self) -> Option<&DeviceIndex> {
        self.devices
            .iter()
            .filter(|d| d.device >= 0)
            .max_by_key(|d| (d.peak_reserved(), d.len, std::cmp::Reverse(d.device)))
            .filter(|d| d.holds_memory())
            .or_else(|| self.traced().next())
    }

    pub fn heap_bytes(&self) -> usize {
        self.devices.iter().map(DeviceIndex::heap_bytes).sum()
    }
}

/// The mapped ranges of expandable segments while a trace is read: a `segment_map` opens a range,
/// a `segment_unmap` closes every open range it overlaps (what it leaves of them opens again as
/// new ranges) and stands for ranges mapped before the trace where nothing open covers it.
#[derive(Default)]
struct MappedRanges {
    pieces: Vec<SegmentSpan>,
    /// Open ranges by start address.
    open: std::collections::BTreeMap<u64, u32>,
}

/// Pages of a large-pool expandable segment (`kLargeBuffer`); small-pool pages are 2 MiB.
const LARGE_PAGE_BYTES: u64 = 20 << 20;

impl MappedRanges {
    fn piece(address: u64, size: u64, stream: u64, start: u32, end: u32) -> SegmentSpan {
        SegmentSpan {
            address,
            size,
            stream,
            segment_type: if size.is_multiple_of(LARGE_PAGE_BYTES) {
                SegmentType::Large
            } else {
                SegmentType::Small
            },
            pool_id: (0, 0),
            is_expandable: true,
            start,
            end,
        }
    }

    fn map(&mut self, address: u64, size: u64, stream: u64, e: u32) {
        self.open.insert(address, self.pieces.len() as u32);
        self.pieces
            .push(Self::piece(address, size, stream, e, NONE));
    }

    /// The open ranges overlapping `[lo, hi)`, lowest first.
    fn overlapping(&self, lo: u64, hi: u64) -> Vec<u32> {
        let mut ids: Vec<u32> = self
            .open
            .range(..hi)
            .rev()
            .map(|(_, &id)| id)
            .take_while(|&id| {
                let p = &self.pieces[id as usize];
                p.address + p.size > lo
            })
            .collect();
        ids.reverse();
        ids
    }

    fn unmap(&mut self, lo: u64, size: u64, stream: u64, e: u32) {
        let hi = lo + size;
        let mut cursor = lo;
        for id in self.overlapping(lo, hi) {
            let p = self.pieces[id as usize].clone();
            self.open.remove(&p.address);
            self.pieces[id as usize].end = e;
            if p.address > cursor {
                // Mapped before the trace, unmapped here.
                self.pieces
                    .push(Self::piece(cursor, p.address - cursor, stream, NONE, e));
            }
            let p_hi = p.address + p.size;
            if p.address < lo {
                self.map(p.address, lo - p.address, p.stream, e);
            }
            if p_hi > hi {
                self.map(hi, p_hi - hi, p.stream, e);
            }
            cursor = cursor.max(p_hi);
        }
        if cursor < hi {
            self.pieces
                .push(Self::piece(cursor, hi - cursor, stream, NONE, e));
        }
    }

    /// Takes the snapshot's own view of an expandable segment (one contiguous mapped range, exact
    /// at the end): open ranges inside it get its type, pool and stream; what no open range covers
    /// was mapped before the trace.
    fn reconcile(&mut self, seg: &crate::model::Segment) {
        let (lo, hi) = (seg.address, seg.address + seg.total_size);
        let mut cursor = lo;
        for id in self.overlapping(lo, hi) {
            let p = &mut self.pieces[id as usize];
            p.segment_type = seg.segment_type;
            p.pool_id = seg.pool_id;
            p.stream = seg.stream;
            let (address, size) = (p.address, p.size);
            if address > cursor {
                self.pieces.push(SegmentSpan {
                    segment_type: seg.segment_type,
                    pool_id: seg.pool_id,
                    ..Self::piece(cursor, address - cursor, seg.stream, NONE, NONE)
                });
            }
            cursor = cursor.max(address + size);
        }
        if cursor < hi {
            self.pieces.push(SegmentSpan {
                segment_type: seg.segment_type,
                pool_id: seg.pool_id,
                ..Self::piece(cursor, hi - cursor, seg.stream, NONE, NONE)
            });
        }
    }
}

/// Ids `0..n` of the `top` largest by `size_of`, largest first, ties by id (see
/// [`DeviceIndex::top_by_size`]: sizes counted by power of two, then only the classes that hold
/// the largest `top` are kept, selected and sorted with their sizes).
fn largest_ids(n: u32, top: usize, size_of: impl Fn(u32) -> u64) -> Vec<u32> {
    let class = |size: u64| 64 - size.leading_zeros() as usize;
    let mut count = [0usize; 65];
    for i in 0..n {
        count[class(size_of(i))] += 1;
    }
    // The smallest class such that it and the classes above hold at least `top`.
    let (mut from, mut above) = (0, 0);
    for c in (0..65).rev() {
        above += count[c];
        if above >= top {
            from = c;
            break;
        }
    }
    let mut keyed: Vec<(std::cmp::Reverse<u64>, u32)> = Vec::with_capacity(above);
    for i in 0..n {
        let size = size_of(i);
        if class(size) >= from {
            keyed.push((std::cmp::Reverse(size), i));
        }
    }
    if keyed.len() > top {
        keyed.select_nth_unstable(top);
        keyed.truncate(top);
    }
    keyed.sort_unstable();
    keyed.into_iter().map(|(_, i)| i).collect()
}

/// What the index reads of one trace row: the fields that open and close allocations and
/// segments. Rows come from the [`TraceTable`] ([`Index::new`]) or, while a pickle is parsed,
/// straight from the parser (`follow.rs`), so a trace is indexed as its bytes arrive.
#[derive(Clone, Copy, Debug)]
pub struct Row {
    pub action: Action,
    pub addr: u64,
    pub size: u64,
    pub stream: u64,
    pub stack: StackId,
}

impl Row {
    pub fn of(t: &TraceTable, r: usize) -> Row {
        Row {
            action: t.action[r],
            addr: t.addr.get(r),
            size: t.size.get(r),
            stream: t.stream(r),
            stack: t.stack.get(r),
        }
    }
}

/// One device trace's index, built row by row in trace order ([`DeviceBuilder::push`]) and
/// completed against the snapshot's segments at the end ([`DeviceBuilder::finish`]), which costs
/// O(segments + blocks), not O(trace): every per-event table is final when the last row is in.
/// The live series is kept relative to the trace's start (what allocations made before the trace
/// hold is known only at the end, from their frees and the final blocks) and shifted in
/// O(events / block) by [`Packed::add_to_all`](crate::packed::Packed::add_to_all); reserved bytes likewise; checkpoints hold the
/// allocations made in the trace, and [`DeviceIndex::alive_at`] adds those made before it.
pub struct DeviceBuilder {
    allocations: Vec<Allocation>,
    /// A bit per allocation, set when it is not open in the trace (made before it, or ended):
    /// what a checkpoint asks of each id, read from 1 bit an allocation instead of its 12-byte
    /// row in a table far larger than the cache.
    not_open: Vec<u64>,
    event_allocation: EventAllocations,
    /// Open allocations by address, with the bytes their free gives back.
    open: FxHashMap<u64, (u32, u64)>,
    segs: Vec<SegmentSpan>,
    open_segs: FxHashMap<u64, u32>,
    mapped: MappedRanges,
    predating_freed: u32,
    pre_trace: Vec<PreTrace>,
    /// Live bytes after each event minus the live bytes at the start.
    live_rel: i128,
    live_bytes: crate::packed::Packed<u64>,
    live_blocks: Vec<(u64, u64)>,
    block: (i64, i64),
    /// Reserved bytes minus those at the start, and where that changes (`(p, delta)`).
    reserved_delta: i128,
    reserved_deltas: Vec<(u32, i128)>,
    peak_position: u32,
    peak_rel: i128,
    checkpoints: Vec<Checkpoint>,
    /// The position of the next checkpoint ([`CHECKPOINT_EVERY`]).
    next_checkpoint: u32,
    /// How many allocations there were at the last checkpoint.
    checkpoint_allocations: u32,
    traced: TracedCounts,
}

impl Default for DeviceBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl DeviceBuilder {
    pub fn new() -> DeviceBuilder {
        DeviceBuilder {
            allocations: Vec::new(),
            not_open: Vec::new(),
            event_allocation: EventAllocations::default(),
            open: FxHashMap::default(),
            segs: Vec::new(),
            open_segs: FxHashMap::default(),
            mapped: MappedRanges::default(),
            predating_freed: 0,
            pre_trace: Vec::new(),
            live_rel: 0,
            live_bytes: crate::packed::Packed::new(),
            live_blocks: Vec::new(),
            block: (i64::MAX, i64::MIN),
            reserved_delta: 0,
            reserved_deltas: Vec::new(),
            peak_position: 0,
            peak_rel: 0,
            checkpoints: Vec::new(),
            next_checkpoint: 0,
            checkpoint_allocations: 0,
            traced: TracedCounts::default(),
        }
    }

    /// Events pushed so far.
    pub fn len(&self) -> u32 {
        self.event_allocation.len() as u32
    }

    pub fn is_empty(&self) -> bool {
        self.event_allocation.is_empty()
    }

    /// Room for `n` more events.
    pub fn reserve(&mut self, n: usize) {
        self.event_allocation.reserve(n);
        self.live_bytes.reserve(n);
        self.live_blocks.reserve(n / SERIES_BLOCK + 1);
    }

    fn new_allocation(&mut self, start: u32) -> u32 {
        let id = self.allocations.len() as u32;
        self.allocations.push(Allocation {
            start,
            free_requested: NONE,
            end: NONE,
        });
        if id.is_multiple_of(64) {
            self.not_open.push(0);
        }
        if start == NONE {
            set_bit(&mut self.not_open, id as usize);
        }
        id
    }

    /// Ends allocation `id` at event `e`.
    fn end(&mut self, id: u32, e: u32) {
        self.allocations[id as usize].end = e;
        set_bit(&mut self.not_open, id as usize);
    }

    /// An allocation made before the trace, first seen at a free: its address, size and stream
    /// are the free row's.
    fn predating(&mut self, row: &Row) -> u32 {
        let id = self.new_allocation(NONE);
        self.pre_trace.push(PreTrace {
            id,
            addr: row.addr,
            size: row.size,
            stream: row.stream,
            stack: StackId::EMPTY,
        });
        id
    }

    fn segment(row: &Row, start: u32, end: u32) -> SegmentSpan {
        SegmentSpan {
            address: row.addr,
            size: row.size,
            stream: row.stream,
            segment_type: SegmentType::Unknown,
            pool_id: (0, 0),
            is_expandable: false,
            start,
            end,
        }
    }

    /// The next event of the trace.
    pub fn push(&mut self, row: Row) {
        let e = self.event_allocation.len() as u32;
        if e == self.next_checkpoint {
            self.checkpoint(e);
        }
        let mut id = NONE;
        self.traced.actions[row.action as usize] += 1;
        match row.action {
            Action::Alloc => {
                id = self.new_allocation(e);
                self.traced.alive_at_end += 1;
                if let Some((prev, prev_size)) = self.open.insert(row.addr, (id, row.size)) {
                    // Reused without a recorded free: closed here (the event is the new
                    // allocation's; `alive_at` filters the old one by its interval).
                    self.end(prev, e);
                    if self.allocations[prev as usize].start != NONE {
                        self.traced.alive_at_end -= 1;
                        self.traced.alive_at_end_bytes -= prev_size;
                    }
                }
                self.traced.alive_at_end_bytes += row.size;
                self.traced.peak_bytes = self.traced.peak_bytes.max(self.traced.alive_at_end_bytes);
                self.live_rel += row.size as i128;
            }
            Action::FreeRequested => {
                id = match self.open.get(&row.addr) {
                    Some(&(id, _)) => id,
                    None => {
                        let id = self.predating(&row);
                        self.open.insert(row.addr, (id, row.size));
                        id
                    }
                };
                self.allocations[id as usize].free_requested = e;
            }
            Action::FreeCompleted => {
                let size;
                (id, size) = match self.open.remove(&row.addr) {
                    Some(open) => {
                        if self.allocations[open.0 as usize].start != NONE {
                            self.traced.alive_at_end -= 1;
                            self.traced.alive_at_end_bytes -= open.1;
                        }
                        open
                    }
                    None => {
                        self.predating_freed += 1;
                        (self.predating(&row), row.size)
                    }
                };
                self.end(id, e);
                self.live_rel -= size as i128;
            }
            Action::SegmentAlloc => {
                self.reserved_delta += row.size as i128;
                let sid = self.segs.len() as u32;
                self.segs.push(Self::segment(&row, e, NONE));
                self.open_segs.insert(row.addr, sid);
            }
            Action::SegmentFree => {
                self.reserved_delta -= row.size as i128;
                match self.open_segs.remove(&row.addr) {
                    Some(sid) => self.segs[sid as usize].end = e,
                    None => self.segs.push(Self::segment(&row, NONE, e)),
                }
            }
            Action::SegmentMap => {
                self.reserved_delta += row.size as i128;
                self.mapped.map(row.addr, row.size, row.stream, e);
            }
            Action::SegmentUnmap => {
                self.reserved_delta -= row.size as i128;
                self.mapped.unmap(row.addr, row.size, row.stream, e);
            }
            _ => {}
        }
        self.event_allocation.push(id);
        let l = self.live_rel as i64;
        self.live_bytes.push(l as u64);
        self.block = (self.block.0.min(l), self.block.1.max(l));
        if (e as usize + 1).is_multiple_of(SERIES_BLOCK) {
            self.live_blocks
                .push((self.block.0 as u64, self.block.1 as u64));
            self.block = (i64::MAX, i64::MIN);
        }
        let last = self.reserved_deltas.last().map_or(0, |&(_, d)| d);
        if self.reserved_delta != last {
            self.reserved_deltas.push((e + 1, self.reserved_delta));
        }
        if self.live_rel > self.peak_rel {
            self.peak_rel = self.live_rel;
            self.peak_position = e + 1;
        }
    }

    /// The allocations made in the trace and open now, ascending (allocations made before the
    /// trace are added by `alive_at`; one closed by the reuse of its address is closed here).
    /// Ids grow with time, so they are the last checkpoint's still open followed by those made
    /// since that are: two sequential passes, already in order. Gathering them from `open` (a
    /// hash table) and sorting cost 0.3 s on a 13M-event trace (bench/README.md).
    fn checkpoint(&mut self, position: u32) {
        let not_open = &self.not_open;
        let open = |&id: &u32| !bit(not_open, id as usize);
        let before = self.checkpoints.last().map(|c| &c.alive);
        let made_since = self.checkpoint_allocations..self.allocations.len() as u32;
        // The last checkpoint's ids are all below those made since: ascending as they come.
        let alive = Ids::from_ascending(
            before
                .into_iter()
                .flat_map(Ids::iter)
                .chain(made_since)
                .filter(open),
        );
        self.checkpoint_allocations = self.allocations.len() as u32;
        self.next_checkpoint = position + CHECKPOINT_EVERY.max(alive.len() as u32);
        self.checkpoints.push(Checkpoint { position, alive });
    }

    /// The index of device `device`, whose trace is rows `first_row..` of the snapshot's table:
    /// the trace's tables reconciled with the device's segments and blocks (exact at the end of
    /// the trace).
    pub fn finish(mut self, snap: &Snapshot, device: i32, first_row: u32) -> DeviceIndex {
        let n = self.len();
        if n == self.next_checkpoint {
            self.checkpoint(n);
        }
        if self.block.0 <= self.block.1 {
            self.live_blocks
                .push((self.block.0 as u64, self.block.1 as u64));
        }
        let DeviceBuilder {
            mut allocations,
            event_allocation,
            open,
            mut segs,
            open_segs,
            mut mapped,
            predating_freed,
            mut pre_trace,
            mut live_bytes,
            mut live_blocks,
            reserved_delta,
            reserved_deltas,
            peak_position,
            peak_rel,
            checkpoints,
            traced,
            ..
        } = self;
        let mut predating_alive = 0;
        let mut reserved_end: u64 = 0;
        for seg in snap.segments.iter().filter(|s| s.device == device) {
            reserved_end += seg.total_size;
            if seg.is_expandable {
                mapped.reconcile(seg);
                // Its blocks are matched to allocations below like any segment's.
            }
            match open_segs.get(&seg.address).filter(|_| !seg.is_expandable) {
                Some(&id) => {
                    let s = &mut segs[id as usize];
                    s.size = seg.total_size;
                    s.segment_type = seg.segment_type;
                    s.pool_id = seg.pool_id;
                    s.is_expandable = seg.is_expandable;
                    s.stream = seg.stream;
                }
                None if seg.is_expandable => {}
                None => segs.push(SegmentSpan {
                    address: seg.address,
                    size: seg.total_size,
                    stream: seg.stream,
                    segment_type: seg.segment_type,
                    pool_id: seg.pool_id,
                    is_expandable: seg.is_expandable,
                    start: NONE,
                    end: NONE,
                }),
            }
            for b in snap.blocks_of(seg) {
                if !b.state.is_active() {
                    continue;
                }
                if let Some(&(id, _)) = open.get(&b.address)
                    && allocations[id as usize].end == NONE
                {
                    continue;
                }
                predating_alive += 1;
                pre_trace.push(PreTrace {
                    id: allocations.len() as u32,
                    addr: b.address,
                    size: b.requested_size,
                    stream: seg.stream,
                    stack: b.stack,
                });
                allocations.push(Allocation {
                    start: NONE,
                    free_requested: if b.state == BlockState::ActivePendingFree {
                        0
                    } else {
                        NONE
                    },
                    end: NONE,
                });
            }
        }
        segs.extend(mapped.pieces);
        segs.sort_by_key(|s| (s.address, s.start.wrapping_add(1)));

        // Every allocation made before the trace was alive at its start: the series move up by
        // what they held. Reserved bytes at the start are what the final segments hold less
        // what the trace added.
        let live_at_start: u64 = pre_trace.iter().map(|p| p.size).sum();
        live_bytes.add_to_all(live_at_start as i64);
        for b in &mut live_blocks {
            b.0 = b.0.wrapping_add(live_at_start);
            b.1 = b.1.wrapping_add(live_at_start);
        }
        let reserved_at_start = (reserved_end as i128 - reserved_delta).max(0) as u64;
        let mut reserved_changes: Vec<(u32, u64)> = Vec::with_capacity(reserved_deltas.len());
        let mut last = reserved_at_start;
        for (p, d) in reserved_deltas {
            let r = (reserved_at_start as i128 + d).max(0) as u64;
            if r != last {
                reserved_changes.push((p, r));
                last = r;
            }
        }
        allocations.shrink_to_fit();
        let mut event_allocation = event_allocation;
        event_allocation.ids.shrink_to_fit();
        event_allocation.none.shrink_to_fit();
        live_bytes.shrink_to_fit();
        live_blocks.shrink_to_fit();
        DeviceIndex {
            device,
            first_row,
            len: n,
            live_bytes,
            live_blocks,
            reserved_changes,
            live_at_start,
            reserved_at_start,
            allocations,
            event_allocation,
            segments: segs,
            checkpoints,
            pre_trace,
            lazy: LazyViews::default(),
            peak_position,
            peak_live_bytes: (live_at_start as i128 + peak_rel) as u64,
            predating_alive,
            predating_freed,
            traced,
        }
    }
}

fn build_device(snap: &Snapshot, device: i32, rows: std::ops::Range<u32>) -> DeviceIndex {
    let t: &TraceTable = &snap.trace;
    let mut b = DeviceBuilder::new();
    b.reserve(rows.len());
    // The packed columns read a block at a time.
    let span = rows.start as usize..rows.end as usize;
    let columns = t
        .addr
        .iter_range(span.clone())
        .zip(t.size.iter_range(span.clone()))
        .zip(t.stack.iter_range(span.clone()));
    for (r, ((addr, size), stack)) in span.zip(columns) {
        b.push(Row {
            action: t.action[r],
            addr,
            size,
            stream: t.stream(r),
            stack,
        });
    }
    b.finish(snap, device, rows.start)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each event's allocation reads back as pushed, through `get` and through a reader walking
    /// forwards, backwards and jumping, with the events of none among them.
    #[test]
    fn event_allocations_read_back_through_get_and_readers() {
        let want: Vec<u32> = (0..3000u32)
            .map(|e| match e % 11 {
                0 => NONE,
                1 => e / 3,
                _ => e * 2 + (e % 5),
            })
            .collect();
        let mut ea = EventAllocations::default();
        for &id in &want {
            ea.push(id);
        }
        assert_eq!(ea.len(), want.len());
        let mut r = ea.reader();
        for (e, &id) in want.iter().enumerate() {
            assert_eq!(ea.get(e as u32), id, "event {e}");
            assert_eq!(r.get(e as u32), id, "event {e}");
        }
        let mut r = ea.reader();
        for e in (0..want.len()).rev().chain([5, 2999, 700, 256, 255]) {
            assert_eq!(r.get(e as u32), want[e], "event {e}");
        }
    }

    /// Checkpoint ids read back as written, in 1–2 bytes each when dense, and the model file's
    /// bytes for them are refused when they are out of order, out of range or cut short.
    #[test]
    fn checkpoint_ids_round_trip_and_bad_bytes_are_refused() {
        for ids in [
            vec![],
            vec![0],
            vec![5, 6, 7, 1000, 1 << 20, u32::MAX - 1],
            (0..10_000).map(|i| i * 7 + (i % 5)).collect::<Vec<u32>>(),
        ] {
            let packed = Ids::from_ascending(ids.iter().copied());
            assert_eq!(packed.iter().collect::<Vec<_>>(), ids);
            assert_eq!(packed.len(), ids.len());
            let back = Ids::from_bytes(packed.bytes().to_vec(), ids.len() as u32, u32::MAX);
            assert_eq!(
                back.map(|b| b.iter().collect::<Vec<_>>()),
                Some(ids.clone())
            );
        }
        let dense = Ids::from_ascending(0..10_000);
        assert!(dense.bytes().len() < 10_000 + 10);
        let bytes = dense.bytes().to_vec();
        assert!(
            Ids::from_bytes(bytes.clone(), 10_000, 9_999).is_none(),
            "out of range"
        );
        assert!(
            Ids::from_bytes(bytes.clone(), 10_001, u32::MAX).is_none(),
            "cut short"
        );
        assert!(Ids::from_bytes(bytes[..bytes.len() - 1].to_vec(), 10_000, u32::MAX).is_none());
        assert!(
            Ids::from_bytes(vec![3, 0], 2, u32::MAX).is_none(),
            "not ascending"
        );
        assert!(
            Ids::from_bytes(vec![0xff; 6], 1, u32::MAX).is_none(),
            "too long a number"
        );
    }

    /// A trace that leaves far more allocations alive than a checkpoint's spacing (50,000
    /// allocations, two of three kept): every position's live set is still the one the rows
    /// give, and the checkpoints hold no more ids than the trace has events.
    #[test]
    fn live_sets_stay_exact_when_more_are_alive_than_a_checkpoint_spacing() {
        let mut snap = Snapshot::default();
        let stack = snap.stacks.intern(&[]);
        let t = &mut snap.trace;
        t.streams = vec![0];
        let mut push = |action: Action, addr: u64| {
            t.action.push(action);
            t.addr.push(addr);
            t.size.push(512);
            t.stream_id.push(0);
            t.time_us.push(t.action.len() as i64);
            t.stack.push(stack);
        };
        for i in 0..50_000u64 {
            push(Action::Alloc, 0x10_0000 + i * 512);
            if i % 3 == 2 {
                let addr = 0x10_0000 + (i - 1) * 512;
                push(Action::FreeRequested, addr);
                push(Action::FreeCompleted, addr);
            }
        }
        let n = snap.trace.action.len() as u32;
        snap.devices = vec![crate::model::DeviceTrace {
            device: 0,
            rows: 0..n,
        }];
        let index = Index::new(&snap);
        let d = index.device(0).unwrap();
        assert_eq!(d.len, n);
        // The live set after each position, from the rows.
        let t = &snap.trace;
        let mut alive = std::collections::BTreeSet::new();
        let mut sizes = Vec::new();
        for p in 0..=n {
            if p % 997 == 0 || p == n {
                let want: Vec<u64> = alive.iter().copied().collect();
                let got: Vec<u64> = d.alive_at(p).iter().map(|&a| d.addr_of(t, a)).collect();
                assert_eq!(got, want, "after {p} events");
                sizes.push(want.len());
            }
            if p < n {
                let r = p as usize;
                match t.action[r] {
                    Action::Alloc => {
                        alive.insert(t.addr.get(r));
                    }
                    Action::FreeCompleted => {
                        alive.remove(&t.addr.get(r));
                    }
                    _ => {}
                }
            }
        }
        assert!(*sizes.iter().max().unwrap() > 4 * CHECKPOINT_EVERY as usize);
        let held: usize = d.checkpoints.iter().map(|c| c.alive.len()).sum();
        assert!(
            held <= n as usize,
            "{held} ids in checkpoints for {n} events"
        );
        assert!(
            d.checkpoints
                .windows(2)
                .all(|w| w[1].position - w[0].position >= CHECKPOINT_EVERY)
        );
    }

    /// The largest ids match a full sort, with ties, zeros, one class holding most sizes, and
    /// fewer ids than asked for.
    #[test]
    fn largest_ids_match_a_full_sort() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for (n, top) in [
            (0u32, 5),
            (7, 100),
            (10_000, 100),
            (10_000, 9_999),
            (50_000, 4_096),
        ] {
            let sizes: Vec<u64> = (0..n)
                .map(|i| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    match i % 4 {
                        0 => 0,
                        1 => 512 << 10,
                        2 => x % (1 << 30),
                        _ => (x % 64) * 1024,
                    }
                })
                .collect();
            let mut want: Vec<u32> = (0..n).collect();
            want.sort_by_key(|&i| (std::cmp::Reverse(sizes[i as usize]), i));
            want.truncate(top);
            assert_eq!(
                largest_ids(n, top, |i| sizes[i as usize]),
                want,
                "n {n} top {top}"
            );
        }
    }
}
