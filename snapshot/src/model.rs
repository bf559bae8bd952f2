//! The snapshot model: interned, id-linked, columnar tables that every analysis reads.
//!
//! A snapshot is parsed exactly once into these tables (see `pickle` and `lower`); nothing
//! downstream ever sees pickle values or JSON again. Trace entries are stored column by column so a
//! million of them cost tens of bytes each, and stacks are interned so identical call paths share
//! one id.

use std::ops::Range;

use rustc_hash::FxHashMap;

use crate::packed::{Column, Packed, Runs};
use serde::Serialize;

use crate::intern::{StrId, StringPool};

/// Index of a [`Frame`] in [`Frames`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct FrameId(pub u32);

/// Index of an interned call stack in [`Stacks`]; `StackId::EMPTY` is the stack with no frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct StackId(pub u32);

impl StackId {
    pub const EMPTY: StackId = StackId(0);
}

/// A trace's stack column is [`Packed`]: the ids of 256 neighbouring rows span a few thousand
/// stacks, so they take 10–14 bits a row instead of 32.
impl crate::packed::Word for StackId {
    #[inline]
    fn to_i64(self) -> i64 {
        self.0 as i64
    }
    #[inline]
    fn from_i64(v: i64) -> Self {
        StackId(v as u32)
    }
}

/// One frame of a call stack, as PyTorch records it: Python frames have a file and line, C++ frames
/// have `filename` `"??"` or a bare `.cpp` name and line 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Frame {
    pub filename: StrId,
    pub name: StrId,
    pub line: u32,
}

/// Deduplicated frames.
#[derive(Debug, Default, Clone)]
pub struct Frames {
    frames: Vec<Frame>,
    index: FxHashMap<Frame, FrameId>,
}

impl Frames {
    pub fn intern(&mut self, frame: Frame) -> FrameId {
        let next = FrameId(self.frames.len() as u32);
        *self.index.entry(frame).or_insert_with(|| {
            self.frames.push(frame);
            next
        })
    }
    pub fn get(&self, id: FrameId) -> Frame {
        self.frames[id.0 as usize]
    }
    pub fn len(&self) -> usize {
        self.frames.len()
    }
    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }
    pub fn heap_bytes(&self) -> usize {
        self.frames.capacity() * 12 + self.index.capacity() * 20
    }
}

/// Deduplicated call stacks, innermost frame first, stored as one flat array plus offsets.
#[derive(Debug, Clone)]
pub struct Stacks {
    offsets: Vec<u32>,
    items: Vec<FrameId>,
    index: FxHashMap<Box<[FrameId]>, StackId>,
}

impl Default for Stacks {
    fn default() -> Self {
        let mut s = Stacks {
            offsets: vec![0],
            items: Vec::new(),
            index: FxHashMap::default(),
        };
        s.intern(&[]);
        s
    }
}

impl Stacks {
    pub fn intern(&mut self, frames: &[FrameId]) -> StackId {
        if let Some(&id) = self.index.get(frames) {
            return id;
        }
        let id = StackId((self.offsets.len() - 1) as u32);
        self.items.extend_from_slice(frames);
        self.offsets.push(self.items.len() as u32);
        self.index.insert(frames.into(), id);
        id
    }
    pub fn get(&self, id: StackId) -> &[FrameId] {
        let i = id.0 as usize;
        &self.items[self.offsets[i] as usize..self.offsets[i + 1] as usize]
    }
    pub fn len(&self) -> usize {
        self.offsets.len() - 1
    }
    pub fn is_empty(&self) -> bool {
        self.len() <= 1
    }
    pub fn heap_bytes(&self) -> usize {
        self.offsets.capacity() * 4 + self.items.capacity() * 8 + self.index.capacity() * 24
    }
}

/// What a trace entry records (PyTorch's `TraceEntry::Action`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Action {
    Alloc,
    FreeRequested,
    FreeCompleted,
    SegmentAlloc,
    SegmentFree,
    SegmentMap,
    SegmentUnmap,
    Snapshot,
    Oom,
    Annotate,
    /// An action this version of memscope does not know; its name is kept in
    /// [`TraceTable::other_action`].
    Other,
}

/// By its PyTorch name (`alloc`, `free_requested`, …; `other` for one memscope does not know).
impl serde::Serialize for Action {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl Action {
    pub const KNOWN: [Action; 10] = [
        Action::Alloc,
        Action::FreeRequested,
        Action::FreeCompleted,
        Action::SegmentAlloc,
        Action::SegmentFree,
        Action::SegmentMap,
        Action::SegmentUnmap,
        Action::Snapshot,
        Action::Oom,
        Action::Annotate,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Action::Alloc => "alloc",
            Action::FreeRequested => "free_requested",
            Action::FreeCompleted => "free_completed",
            Action::SegmentAlloc => "segment_alloc",
            Action::SegmentFree => "segment_free",
            Action::SegmentMap => "segment_map",
            Action::SegmentUnmap => "segment_unmap",
            Action::Snapshot => "snapshot",
            Action::Oom => "oom",
            Action::Annotate => "annotate",
            Action::Other => "other",
        }
    }

    pub fn parse(s: &str) -> Action {
        Action::KNOWN
            .into_iter()
            .find(|a| a.as_str() == s)
            .unwrap_or(Action::Other)
    }
}

/// The fields of one trace entry while the parser reads it: what a row of [`TraceTable`] is
/// made of (`TraceTable::push_dense` takes the dense ones, `TraceTable::push_sparse` the rest).
#[derive(Debug, Clone, Copy)]
pub(crate) struct EntryFields {
    pub action: Action,
    pub other: Option<StrId>,
    pub addr: u64,
    pub size: u64,
    /// An id of `TraceTable::streams`.
    pub stream: u16,
    pub time_us: i64,
    pub stack: StackId,
    pub device_free: Option<u64>,
    pub compile_context: Option<StrId>,
    pub user_metadata: Option<StrId>,
}

impl Default for EntryFields {
    fn default() -> Self {
        EntryFields {
            action: Action::Other,
            other: None,
            addr: 0,
            size: 0,
            stream: 0,
            time_us: 0,
            stack: StackId::EMPTY,
            device_free: None,
            compile_context: None,
            user_metadata: None,
        }
    }
}

/// A trace row's dense columns in 32 bytes, as the parser hands them to the thread that builds
/// the table (`follow.rs`); `stream` is an id of the table's `streams`.
#[cfg(not(target_arch = "wasm32"))]
#[derive(Clone, Copy, Debug)]
pub(crate) struct DenseRow {
    pub addr: u64,
    pub size: u64,
    pub time_us: i64,
    pub stack: StackId,
    pub stream: u16,
    pub action: Action,
}

/// Every trace entry of every device, column by column. Rows of one device are contiguous
/// (see [`DeviceTrace::rows`]). Rare fields are sparse `(row, value)` lists sorted by row.
#[derive(Debug, Default, Clone)]
pub struct TraceTable {
    pub action: Vec<Action>,
    /// Addresses, in the bits a block of rows spans ([`Packed`]: 3–5 bytes a row).
    pub addr: Packed<u64>,
    /// Bytes, in the bits a block of rows spans ([`Packed`]).
    pub size: Packed<u64>,
    /// Each row's CUDA stream as an index into `streams` ([`TraceTable::stream`] reads it): a
    /// program uses a handful of streams, so 2 bytes a row instead of 8.
    pub stream_id: Runs,
    /// The distinct stream handles, in order of first use; `streams[0]` is 0 (the default
    /// stream) once any row exists.
    pub streams: Vec<u64>,
    /// Microseconds since the Unix epoch; 0 where the file has no `time_us` (before PyTorch 2.2).
    pub time_us: Packed<i64>,
    pub stack: Packed<StackId>,
    /// `device_free` of `oom` entries: bytes the driver reported free.
    pub device_free: Vec<(u32, u64)>,
    /// `compile_context` where it is not `"N/A"`.
    pub compile_context: Vec<(u32, StrId)>,
    /// `user_metadata` where it is not empty.
    pub user_metadata: Vec<(u32, StrId)>,
    /// Names of [`Action::Other`] entries.
    pub other_action: Vec<(u32, StrId)>,
}

impl TraceTable {
    pub fn len(&self) -> usize {
        self.action.len()
    }
    pub fn is_empty(&self) -> bool {
        self.action.is_empty()
    }

    /// Row `r`'s CUDA stream handle.
    #[inline]
    pub fn stream(&self, r: usize) -> u64 {
        self.streams[self.stream_id.get(r) as usize]
    }

    /// The id of stream handle `stream`, added if new; `None` past 65,536 distinct streams.
    pub fn stream_id_of(&mut self, stream: u64) -> Option<u16> {
        if self.streams.is_empty() {
            self.streams.push(0);
        }
        match self.streams.iter().position(|&s| s == stream) {
            Some(i) => Some(i as u16),
            None => {
                let id = u16::try_from(self.streams.len()).ok()?;
                self.streams.push(stream);
                Some(id)
            }
        }
    }
    /// Row `row`'s sparse fields, those `f` has: call in row order.
    pub(crate) fn push_sparse(&mut self, row: u32, f: &EntryFields) {
        if let Some(x) = f.device_free {
            self.device_free.push((row, x));
        }
        if let Some(x) = f.compile_context {
            self.compile_context.push((row, x));
        }
        if let Some(x) = f.user_metadata {
            self.user_metadata.push((row, x));
        }
        if let Some(x) = f.other {
            self.other_action.push((row, x));
        }
    }

    /// Appends rows' dense columns a column at a time, the table [`TraceTable::push_dense`] of
    /// each row makes: the thread that builds the table from the parser's batches of rows
    /// (`follow.rs`) encodes whole blocks of each column at once.
    #[cfg(not(target_arch = "wasm32"))]
    pub(crate) fn extend_dense(&mut self, rows: &[DenseRow]) {
        self.action.extend(rows.iter().map(|r| r.action));
        self.addr.extend_from(rows, |r| r.addr);
        self.size.extend_from(rows, |r| r.size);
        self.stream_id.extend_from(rows, |r| r.stream);
        self.time_us.extend_from(rows, |r| r.time_us);
        self.stack.extend_from(rows, |r| r.stack);
    }

    /// Appends a row's dense columns (its sparse ones: [`TraceTable::push_sparse`]).
    #[inline(always)]
    pub(crate) fn push_dense(
        &mut self,
        action: Action,
        addr: u64,
        size: u64,
        stream: u16,
        time_us: i64,
        stack: StackId,
    ) {
        self.action.push(action);
        self.addr.push(addr);
        self.size.push(size);
        self.stream_id.push(stream);
        self.time_us.push(time_us);
        self.stack.push(stack);
    }

    pub fn heap_bytes(&self) -> usize {
        self.action.capacity()
            + self.streams.capacity() * 8
            + self.addr.heap_bytes()
            + self.size.heap_bytes()
            + self.time_us.heap_bytes()
            + self.stream_id.heap_bytes()
            + self.stack.heap_bytes()
            + (self.device_free.capacity() + self.compile_context.capacity()) * 16
            + (self.user_metadata.capacity() + self.other_action.capacity()) * 8
    }
    /// Reserves room for `rows` more rows in every dense column.
    pub fn reserve(&mut self, rows: usize) {
        self.action.reserve(rows);
        self.addr.reserve(rows);
        self.size.reserve(rows);
        self.time_us.reserve(rows);
        self.stack.reserve(rows);
    }

    /// Gives back reserved capacity that was not used.
    pub fn shrink_to_fit(&mut self) {
        self.action.shrink_to_fit();
        self.addr.shrink_to_fit();
        self.size.shrink_to_fit();
        self.stream_id.shrink_to_fit();
        self.time_us.shrink_to_fit();
        self.stack.shrink_to_fit();
    }

    /// Looks up a sparse column value for `row`.
    pub fn sparse<T: Copy>(col: &[(u32, T)], row: u32) -> Option<T> {
        col.binary_search_by_key(&row, |&(r, _)| r)
            .ok()
            .map(|i| col[i].1)
    }

    /// Appends row `row` to `runs`, runs of consecutive rows `(first, len)`: the last run grows
    /// when `row` follows it.
    pub(crate) fn push_run(runs: &mut Vec<(u32, u32)>, row: u32) {
        Self::push_rows(runs, row, 1);
    }

    /// [`TraceTable::push_run`] for rows `first..first + n`.
    pub(crate) fn push_rows(runs: &mut Vec<(u32, u32)>, first: u32, n: u32) {
        match runs.last_mut() {
            Some((start, len)) if *start + *len == first => *len += n,
            _ => runs.push((first, n)),
        }
    }

    /// Puts the rows of `runs` (runs of consecutive rows `(first, len)`, in list order) at
    /// positions `base..`, where they are a permutation of `base..base + their count`. The order
    /// is cut into the shortest stretches that are permutations of themselves (rows move within
    /// an `APPENDS` batch of the pickle), and only those out of place are copied: the memory this
    /// takes is a stretch's, not the trace's. A run already in place outside any stretch is
    /// skipped whole, so the cost is that of the rows that move (the first ~2,000 rows of a
    /// 12M-row trace; walking every row cost 90 ms after an upload's last byte).
    pub(crate) fn reorder_within(&mut self, base: u32, runs: &[(u32, u32)]) {
        // List positions, relative to `base`: the stretch is `start..k`; `reach` is one past the
        // highest row offset in it (the stretch is self-contained when `reach == k`).
        let (mut start, mut k, mut reach) = (0usize, 0usize, 0usize);
        let mut stretch: Vec<u32> = Vec::new();
        for &(first, len) in runs {
            let (at, len) = ((first - base) as usize, len as usize);
            if len == 0 {
                continue;
            }
            if stretch.is_empty() && at == k {
                // In place, no stretch open: nothing to move.
                k += len;
                start = k;
                reach = k;
                continue;
            }
            // A run never straddles a stretch's end: the stretch holds row `reach - 1`, and a run
            // reaching past it from inside would hold that row twice.
            stretch.extend(first..first + len as u32);
            reach = reach.max(at + len);
            k += len;
            if reach == k {
                // A stretch opens only at a run out of place, so it always has rows to move.
                self.reorder_window(base as usize + start, &stretch);
                stretch.clear();
                start = k;
                reach = k;
            }
        }
    }

    /// Puts row `window[k]` at position `lo + k`, where `window` is a permutation of
    /// `lo..lo + window.len()`.
    fn reorder_window(&mut self, lo: usize, window: &[u32]) {
        let hi = lo + window.len() - 1;
        fn apply<C: Column>(col: &mut C, window: &[u32], lo: usize) {
            let moved: Vec<C::Item> = window.iter().map(|&r| col.value(r as usize)).collect();
            col.put(lo, &moved);
        }
        apply(&mut self.action, window, lo);
        apply(&mut self.addr, window, lo);
        apply(&mut self.size, window, lo);
        apply(&mut self.stream_id, window, lo);
        apply(&mut self.time_us, window, lo);
        apply(&mut self.stack, window, lo);
        // The window holds exactly rows lo..=hi: their new positions fit a dense array (a hash
        // map over a 12M-row window was a quarter of the parse of a tiled 1 GB file).
        let mut new_pos = vec![0u32; window.len()];
        for (k, &r) in window.iter().enumerate() {
            new_pos[r as usize - lo] = (lo + k) as u32;
        }
        // Sparse columns are sorted by row, and rows of the window stay in it: only the slice
        // inside the window changes.
        fn remap<T: Copy>(col: &mut [(u32, T)], new_pos: &[u32], lo: usize, hi: usize) {
            let from = col.partition_point(|&(r, _)| (r as usize) < lo);
            let to = col.partition_point(|&(r, _)| (r as usize) <= hi);
            let inside = &mut col[from..to];
            for (r, _) in inside.iter_mut() {
                *r = new_pos[*r as usize - lo];
            }
            inside.sort_by_key(|&(r, _)| r);
        }
        remap(&mut self.device_free, &new_pos, lo, hi);
        remap(&mut self.compile_context, &new_pos, lo, hi);
        remap(&mut self.user_metadata, &new_pos, lo, hi);
        remap(&mut self.other_action, &new_pos, lo, hi);
    }

    /// Reorders rows (used only when a file's device lists are not in table order).
    pub(crate) fn gather(&self, rows: &[u32]) -> TraceTable {
        let mut pos = FxHashMap::default();
        for (new, &old) in rows.iter().enumerate() {
            pos.insert(old, new as u32);
        }
        fn remap<T: Copy>(pos: &FxHashMap<u32, u32>, col: &[(u32, T)]) -> Vec<(u32, T)> {
            let mut v: Vec<_> = col
                .iter()
                .filter_map(|&(r, x)| pos.get(&r).map(|&n| (n, x)))
                .collect();
            v.sort_by_key(|&(r, _)| r);
            v
        }
        TraceTable {
            action: rows.iter().map(|&r| self.action[r as usize]).collect(),
            addr: rows.iter().map(|&r| self.addr.get(r as usize)).collect(),
            size: rows.iter().map(|&r| self.size.get(r as usize)).collect(),
            stream_id: rows
                .iter()
                .map(|&r| self.stream_id.get(r as usize))
                .collect(),
            streams: self.streams.clone(),
            time_us: rows.iter().map(|&r| self.time_us.get(r as usize)).collect(),
            stack: rows.iter().map(|&r| self.stack.get(r as usize)).collect(),
            device_free: remap(&pos, &self.device_free),
            compile_context: remap(&pos, &self.compile_context),
            user_metadata: remap(&pos, &self.user_metadata),
            other_action: remap(&pos, &self.other_action),
        }
    }
}

/// The trace of one device: a contiguous run of [`TraceTable`] rows.
#[derive(Debug, Clone, Serialize)]
pub struct DeviceTrace {
    /// CUDA device ordinal; -1 for pinned host memory (`host_traces`).
    pub device: i32,
    pub rows: Range<u32>,
}

/// Size class of a segment's pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SegmentType {
    Small,
    Large,
    Unknown,
}

/// One `cudaMalloc` (or one expandable segment) owned by the caching allocator.
#[derive(Clone, Debug)]
pub struct Segment {
    /// CUDA device ordinal; -1 for pinned host memory (`host_segments`).
    pub device: i32,
    pub address: u64,
    pub total_size: u64,
    pub allocated_size: u64,
    pub active_size: u64,
    pub requested_size: u64,
    pub stream: u64,
    pub segment_type: SegmentType,
    pub pool_id: (i64, i64),
    pub is_expandable: bool,
    pub stack: StackId,
    /// This segment's blocks in [`Snapshot::blocks`], in address order.
    pub blocks: Range<u32>,
}

/// State of a block inside a segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BlockState {
    ActiveAllocated,
    ActivePendingFree,
    Inactive,
    Unknown,
}

impl BlockState {
    pub fn as_str(self) -> &'static str {
        match self {
            BlockState::ActiveAllocated => "active_allocated",
            BlockState::ActivePendingFree => "active_pending_free",
            BlockState::Inactive => "inactive",
            BlockState::Unknown => "unknown",
        }
    }
    pub fn parse(s: &str) -> BlockState {
        match s {
            "active_allocated" => BlockState::ActiveAllocated,
            "active_pending_free" => BlockState::ActivePendingFree,
            "inactive" => BlockState::Inactive,
            _ => BlockState::Unknown,
        }
    }
    pub fn is_active(self) -> bool {
        matches!(
            self,
            BlockState::ActiveAllocated | BlockState::ActivePendingFree
        )
    }
}

/// A block of a segment at the time of the snapshot.
#[derive(Clone, Debug)]
pub struct Block {
    pub segment: u32,
    pub address: u64,
    pub size: u64,
    pub requested_size: u64,
    pub state: BlockState,
    pub stack: StackId,
}

/// Start or end of a `record_function` scope (`external_annotations`).
#[derive(Clone, Debug, Serialize)]
pub struct Annotation {
    pub name: StrId,
    pub start: bool,
    pub device: i32,
    pub time_us: i64,
}

/// How the input was encoded, for the overview and for warnings.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Format {
    pub encoding: Encoding,
    /// Pickle protocol from the PROTO opcode (0 when absent).
    pub protocol: u8,
    pub compression: Compression,
    pub layout: Layout,
    /// Bytes of pickle or JSON after decompression.
    pub decoded_bytes: u64,
}

/// How a snapshot file is compressed (recognised by `decompress::open`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    #[default]
    None,
    Gzip,
    Zstd,
    Xz,
}

impl Compression {
    pub const ALL: [Compression; 4] = [
        Compression::None,
        Compression::Gzip,
        Compression::Zstd,
        Compression::Xz,
    ];
    pub fn as_str(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Zstd => "zstd",
            Compression::Xz => "xz",
        }
    }
}

/// What a snapshot file holds under its compression.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Encoding {
    #[default]
    Pickle,
    Json,
}

/// How a snapshot's memory state is laid out, by the PyTorch that wrote it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Layout {
    /// 2.1 and later: `segments` and `device_traces`.
    #[default]
    Modern,
    /// 2.0: blocks with their own `history`.
    BlockHistory,
    /// 1.13 and earlier: a bare list of segments with `blocks`.
    LegacySegmentList,
    /// A bare list of 2.1+ segments (`torch.cuda.memory_snapshot()` pickled).
    SegmentList,
}

impl Encoding {
    pub const ALL: [Encoding; 2] = [Encoding::Pickle, Encoding::Json];
    pub fn as_str(self) -> &'static str {
        match self {
            Encoding::Pickle => "pickle",
            Encoding::Json => "json",
        }
    }
}

impl Layout {
    pub const ALL: [Layout; 4] = [
        Layout::Modern,
        Layout::BlockHistory,
        Layout::LegacySegmentList,
        Layout::SegmentList,
    ];
    pub fn as_str(self) -> &'static str {
        match self {
            Layout::Modern => "modern",
            Layout::BlockHistory => "block_history",
            Layout::LegacySegmentList => "legacy_segment_list",
            Layout::SegmentList => "segment_list",
        }
    }
}

/// A parsed memory snapshot: the tables every analysis reads.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub strings: StringPool,
    pub frames: Frames,
    pub stacks: Stacks,
    /// Device segments, then host segments (device -1).
    pub segments: Vec<Segment>,
    pub blocks: Vec<Block>,
    pub trace: TraceTable,
    /// One per device list in `device_traces` (even empty ones), then host traces.
    pub devices: Vec<DeviceTrace>,
    pub annotations: Vec<Annotation>,
    pub allocator_settings: Option<serde_json::Value>,
    pub format: Format,
    /// xxh3-128 of the decoded bytes the reader consumed, keyed with the read's
    /// [`crate::Limits::content_secret`]: the same snapshot whatever its compression has the
    /// same hash (the library deduplicates an upload by it, under its own secret). 0 when loaded
    /// from a model file or read from a file (`read_file*`: the CLI, a model's rebuild), which
    /// never look it up.
    pub content_hash: u128,
}

impl Snapshot {
    pub fn str(&self, id: StrId) -> &str {
        self.strings.get(id)
    }
    pub fn frame(&self, id: FrameId) -> Frame {
        self.frames.get(id)
    }
    pub fn stack(&self, id: StackId) -> &[FrameId] {
        self.stacks.get(id)
    }
    /// The trace of `device`, if the file has one.
    pub fn device_trace(&self, device: i32) -> Option<&DeviceTrace> {
        self.devices.iter().find(|d| d.device == device)
    }
    /// Device segments only (host segments excluded).
    pub fn device_segments(&self) -> impl Iterator<Item = &Segment> {
        self.segments.iter().filter(|s| s.device >= 0)
    }
    pub fn blocks_of(&self, seg: &Segment) -> &[Block] {
        &self.blocks[seg.blocks.start as usize..seg.blocks.end as usize]
    }
    /// Approximate heap bytes held by the tables.
    pub fn heap_bytes(&self) -> usize {
        self.strings.heap_bytes()
            + self.frames.heap_bytes()
            + self.stacks.heap_bytes()
            + self.segments.capacity() * std::mem::size_of::<Segment>()
            + self.blocks.capacity() * std::mem::size_of::<Block>()
            + self.trace.heap_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reordering by runs puts every row, and every sparse column's row, where a row-by-row
    /// permutation would: blocks swapped near the start (as the parser leaves them), anywhere,
    /// nested, and none at all.
    #[test]
    fn reordering_by_runs_matches_the_permutation() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: usize| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % n as u64) as usize
        };
        for case in 0..300 {
            let (base, n) = (next(5) as u32, 1 + next(300));
            // List order: positions 0..n with a few blocks rotated in place.
            let mut order: Vec<u32> = (0..n as u32).collect();
            for _ in 0..next(4) {
                let lo = next(n);
                let hi = (lo + 1 + next(n - lo)).min(n);
                let by = next(hi - lo);
                order[lo..hi].rotate_left(by);
            }
            let mut t = TraceTable::default();
            for r in 0..base + n as u32 {
                t.action.push(Action::Alloc);
                t.addr.push(r as u64);
                t.size.push(r as u64 * 3);
                t.stream_id.push((r % 3) as u16);
                t.time_us.push(r as i64 * 7);
                t.stack.push(StackId(r));
                if r % 5 == 0 {
                    t.device_free.push((r, r as u64));
                }
            }
            let rows: Vec<u32> = order.iter().map(|&o| base + o).collect();
            let mut runs: Vec<(u32, u32)> = Vec::new();
            for &r in &rows {
                TraceTable::push_run(&mut runs, r);
            }
            t.reorder_within(base, &runs);
            for (k, &r) in rows.iter().enumerate() {
                let at = base as usize + k;
                assert_eq!(t.addr.get(at), r as u64, "case {case}");
                assert_eq!(t.size.get(at), r as u64 * 3, "case {case}");
                assert_eq!(t.stream_id.get(at), (r % 3) as u16, "case {case}");
                assert_eq!(t.time_us.get(at), r as i64 * 7, "case {case}");
                assert_eq!(t.stack.get(at), StackId(r), "case {case}");
            }
            let mut want: Vec<(u32, u64)> = (0..base)
                .chain(rows.iter().copied())
                .enumerate()
                .filter(|&(_, r)| r % 5 == 0)
                .map(|(at, r)| (at as u32, r as u64))
                .collect();
            want.sort_unstable();
            assert_eq!(t.device_free, want, "case {case}");
        }
    }
}
