//! Pickle values and the arena they live in, with the lowering that keeps big snapshots small.
//!
//! A generic tree of a million trace-entry dicts would take several times the file's size. Instead,
//! the moment a finished container is placed inside another one (APPEND, SETITEM, …) it is
//! *lowered* by its shape: a `{filename, line, name}` dict becomes an interned [`Frame`], a list of
//! frames an interned stack, a dict with an `action` key a row of the columnar [`TraceTable`], and
//! an empty list a plain marker. The container's slot is then recycled, and the memo slot that
//! pointed at it is rewritten to the lowered value, so a later `BINGET` of the same frame list (how
//! pickle shares identical stacks) costs nothing: stacks are interned by memo identity.
//! Everything else (segments, blocks, settings) stays a generic container for `lower.rs` to read.

use rustc_hash::FxHashMap;

use crate::budget::{Held, MemoryBudget, Shortfall};
use crate::intern::{StrId, StringPool};
pub(crate) use crate::model::EntryFields;
use crate::model::{Action, BlockState, Frame, FrameId, Frames, StackId, Stacks, TraceTable};

/// Limits that keep hostile input from taking unbounded memory. Time is linear in the input.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Longest single string or bytes object.
    pub max_string_bytes: u64,
    /// Most values on the pickle machine's stack at once.
    pub max_stack: usize,
    /// Most memo entries.
    pub max_memo: usize,
    /// Most containers (lists, dicts, tuples) alive at once; lowered ones do not count.
    pub max_live_containers: usize,
    /// Most values held in containers that are alive at once (trace and block rows kept as
    /// runs of row numbers are not values).
    pub max_container_items: u64,
    /// Most bytes of interned strings.
    pub max_string_pool_bytes: u64,
    /// Deepest nesting when converting generic values (JSON input, allocator settings).
    pub max_depth: usize,
    /// Most bytes a compressed input may decompress to.
    pub max_decoded_bytes: u64,
    /// Most a compressed input may expand (decompressed bytes per compressed byte) once past
    /// `EXPANSION_FLOOR_BYTES`; 0 for no ratio limit. Real snapshots expand 10–30×; a
    /// decompression bomb, 1000×.
    pub max_expansion: u64,
    /// Not a limit: the input's size if known (0 if not), used to reserve the trace columns.
    pub size_hint_bytes: u64,
    /// Most memory the parse may hold, in percent of the (decompressed) input read so far,
    /// past `held_allowance_bytes`: a memory snapshot is mostly trace rows and frames, which
    /// its tables hold in less than their pickle's bytes (real files peak at 0.3-0.5x); a
    /// list of distinct short strings or of empty containers is not one and would hold 4-16x.
    pub max_held_percent_of_input: u64,
    /// Memory any parse may hold whatever it has read (small files, the first bytes).
    pub held_allowance_bytes: u64,
    /// Memory shared with the other parses of this process (a server's index workers), if any.
    pub budget: Option<MemoryBudget>,
    /// Not a limit: the secret a stream read's content hash ([`crate::Snapshot::content_hash`])
    /// is keyed with; `None`: XXH3's published default secret.
    pub content_secret: Option<ContentSecret>,
}

/// Bytes of a [`ContentSecret`] (XXH3's secret size).
pub const CONTENT_SECRET_BYTES: usize = 192;

/// A secret that keys the content hash. XXH3 is fast, not collision-resistant: under its
/// published default secret, someone who can guess another user's snapshot could make a
/// different file with the same hash and upload it first, and a library that deduplicates by
/// the hash would then answer that user's upload with the other file. Under a secret only the
/// library knows, the hash cannot be aimed at. Random bytes, never shown (`Debug` hides them).
#[derive(Clone)]
pub struct ContentSecret(std::sync::Arc<[u8; CONTENT_SECRET_BYTES]>);

impl ContentSecret {
    pub fn new(bytes: [u8; CONTENT_SECRET_BYTES]) -> ContentSecret {
        ContentSecret(std::sync::Arc::new(bytes))
    }

    /// A hasher keyed with `secret`, or with XXH3's default secret.
    pub(crate) fn hasher(secret: Option<&ContentSecret>) -> xxhash_rust::xxh3::Xxh3 {
        match secret {
            Some(s) => xxhash_rust::xxh3::Xxh3::with_secret(*s.0),
            None => xxhash_rust::xxh3::Xxh3::new(),
        }
    }
}

impl std::fmt::Debug for ContentSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ContentSecret(..)")
    }
}

/// Decompressed bytes below which the expansion ratio is not checked (a small file may compress
/// very well without being a bomb).
pub const EXPANSION_FLOOR_BYTES: u64 = 64 << 20;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_string_bytes: 64 << 20,
            max_stack: 16 << 20,
            max_memo: 256 << 20,
            max_live_containers: 8 << 20,
            max_container_items: 128 << 20,
            max_string_pool_bytes: 1 << 30,
            max_depth: 128,
            max_decoded_bytes: u64::MAX,
            max_expansion: 0,
            size_hint_bytes: 0,
            max_held_percent_of_input: 150,
            held_allowance_bytes: 128 << 20,
            budget: None,
            content_secret: None,
        }
    }
}

/// The pickle memo: append-mostly, millions of entries in a big snapshot. Fixed-size chunks, so
/// growing it never copies (a doubling `Vec` briefly holds old and new buffers: +50% peak RSS),
/// of 4-byte slots: the values a memo holds by the million (strings, frames, stacks, trace rows,
/// placeholders) are a 4-bit tag and a 28-bit id; anything wider (integers, floats, containers,
/// ids past 2^28) goes to a side table and the slot holds its index. A quarter of the 16 bytes a
/// [`Value`] takes; about two slots an event, so ~100 MB less than 8-byte slots while a
/// 12M-event file is read (computed), and the 1M-event benchmark's peak 54 → 43 MB (measured,
/// bench/README.md).
///
/// While a parse is indexed as it goes (uploads: `follow.rs`), the index grows beside the memo,
/// so the memo is made smaller: a chunk two behind the newest is stored compact ([`Compact`]),
/// and expanded for good the first time a slot of it is read or written. Most of a trace's slots
/// are its entry dicts and their frame lists, which no later opcode reads; the chunks that do get
/// read (key strings, frames) are expanded once and stay so.
#[derive(Debug, Default)]
struct Memo {
    /// Slots by chunk; a compact chunk's is empty (its slots are in `compact`).
    chunks: Vec<Box<[u32]>>,
    /// Per chunk: its compact form, whether it was ever expanded.
    compact: Vec<Compact>,
    /// Store chunks compact (see above).
    compacting: bool,
    len: usize,
    wide: Vec<Value>,
    /// Places in `wide` whose slot now holds a narrow value (a container lowered to a row, a
    /// frame, a stack): reused, so the side table holds the wide values alive, not every
    /// container the pickle ever memoized.
    wide_free: Vec<u32>,
    /// The last chunk made compact, reused for the next new chunk, and the buffer compact forms
    /// are written in: fresh ones for every chunk cost the parser's thread 0.09 s of page faults
    /// on a 13M-event trace (bench/README.md, issue 41).
    spare: Option<Box<[u32]>>,
    encoded: Vec<u8>,
}

const MEMO_CHUNK: usize = 1 << 16;

/// A memo chunk's compact form.
#[derive(Debug, Default)]
enum Compact {
    /// Never compacted (yet).
    #[default]
    No,
    /// Slots as the difference of each slot's id from the last id of its tag, zigzag-encoded:
    /// the tag and 3 bits in the first byte, then 7 bits a byte. A trace's slots alternate an
    /// entry (the last entry's id plus one: 1 byte) and a frames list (a stack id near the
    /// last: 1–3 bytes).
    Bytes(Box<[u8]>),
    /// Expanded after being read or written: not compacted again.
    Hot,
}

impl Compact {
    /// `slots` encoded; `out` is the working buffer.
    fn encode(slots: &[u32], out: &mut Vec<u8>) -> Box<[u8]> {
        // Written by index into room for the longest (a slot takes at most 5 bytes: 3 bits of
        // its zigzagged 29 in the first, 7 in each next): pushing each byte onto the `Vec` was a
        // third of the encoding, on the parser's thread (bench/README.md, issue 41).
        out.clear();
        out.resize(slots.len() * 5, 0);
        let mut at = 0;
        let mut last = [0u32; 16];
        for &w in slots {
            let (tag, id) = ((w >> slot::ID_BITS) as usize, w & slot::ID_MASK);
            // The difference as a signed 28-bit number, zigzagged: small either way, few bits.
            let d = (((id.wrapping_sub(last[tag]) << 4) as i32) >> 4) as u32;
            last[tag] = id;
            let mut z = (d << 1) ^ ((d as i32) >> 31) as u32;
            let mut b = (tag as u8) | (((z & 7) as u8) << 4);
            z >>= 3;
            while z != 0 {
                out[at] = b | 0x80;
                at += 1;
                b = (z & 0x7f) as u8;
                z >>= 7;
            }
            out[at] = b;
            at += 1;
        }
        out[..at].into()
    }

    fn decode(bytes: &[u8], out: &mut [u32]) {
        let mut last = [0u32; 16];
        let mut at = 0;
        for w in out.iter_mut() {
            let first = bytes[at];
            at += 1;
            let tag = (first & 0x0f) as usize;
            let mut z = ((first >> 4) & 7) as u32;
            let (mut more, mut shift) = (first & 0x80 != 0, 3);
            while more {
                let b = bytes[at];
                at += 1;
                z |= ((b & 0x7f) as u32) << shift;
                shift += 7;
                more = b & 0x80 != 0;
            }
            let d = (z >> 1) ^ (z & 1).wrapping_neg();
            let id = last[tag].wrapping_add(d) & slot::ID_MASK;
            last[tag] = id;
            *w = (tag as u32) << slot::ID_BITS | id;
        }
    }
}

mod slot {
    pub const NONE: u32 = 0;
    pub const FALSE: u32 = 1;
    pub const TRUE: u32 = 2;
    pub const BYTES: u32 = 3;
    pub const EMPTY_LIST: u32 = 4;
    pub const STR: u32 = 5;
    pub const FRAME: u32 = 6;
    pub const STACK: u32 = 7;
    pub const ENTRY: u32 = 8;
    pub const WIDE: u32 = 9;
    pub const BLOCK: u32 = 10;
    /// Bits of a slot that hold the id; the tag is above them.
    pub const ID_BITS: u32 = 28;
    pub const ID_MASK: u32 = (1 << ID_BITS) - 1;
}

impl Memo {
    #[inline]
    fn len(&self) -> usize {
        self.len
    }

    /// A slot for `v`, or `None` when the side table is full (2^28 wide values: a pickle
    /// that `PUT`s wide and narrow values in turn over millions of slots).
    #[inline(always)]
    fn pack(&mut self, v: Value) -> Option<u32> {
        match self.pack_narrow(v) {
            Some(w) => Some(w),
            None => self.pack_wide(v),
        }
    }

    /// A slot in the side table for a value [`Memo::pack_narrow`] refused.
    #[inline(never)]
    fn pack_wide(&mut self, v: Value) -> Option<u32> {
        if let Some(i) = self.wide_free.pop() {
            self.wide[i as usize] = v;
            return Some(slot::WIDE << slot::ID_BITS | i);
        }
        if self.wide.len() > slot::ID_MASK as usize {
            return None;
        }
        self.wide.push(v);
        Some(slot::WIDE << slot::ID_BITS | (self.wide.len() - 1) as u32)
    }

    /// The slot of a value that fits one, or `None` for a wide value.
    #[inline(always)]
    fn pack_narrow(&self, v: Value) -> Option<u32> {
        let (tag, id) = match v {
            Value::None => (slot::NONE, 0),
            Value::Bool(false) => (slot::FALSE, 0),
            Value::Bool(true) => (slot::TRUE, 0),
            Value::Bytes => (slot::BYTES, 0),
            Value::EmptyList => (slot::EMPTY_LIST, 0),
            Value::Str(s) => (slot::STR, s.0),
            Value::Frame(f) => (slot::FRAME, f.0),
            Value::Stack(s) => (slot::STACK, s.0),
            Value::Entry(r) => (slot::ENTRY, r),
            Value::Block(b) => (slot::BLOCK, b),
            _ => return None,
        };
        (id <= slot::ID_MASK).then_some(tag << slot::ID_BITS | id)
    }

    /// Inlined where slots are read by the million: as a call it was 0.15 s of the 13M-event
    /// parse.
    #[inline(always)]
    fn unpack(&self, w: u32) -> Value {
        let id = w & slot::ID_MASK;
        match w >> slot::ID_BITS {
            slot::NONE => Value::None,
            slot::FALSE => Value::Bool(false),
            slot::TRUE => Value::Bool(true),
            slot::BYTES => Value::Bytes,
            slot::EMPTY_LIST => Value::EmptyList,
            slot::STR => Value::Str(StrId(id)),
            slot::FRAME => Value::Frame(FrameId(id)),
            slot::STACK => Value::Stack(StackId(id)),
            slot::ENTRY => Value::Entry(id),
            slot::BLOCK => Value::Block(id),
            _ => self.wide[id as usize],
        }
    }

    /// Read by the million (every memo reference of a trace): inlined, with the expansion of
    /// a compact chunk out of line (not inlined, this cost the parse 0.2 s on the 1 GB file).
    #[inline(always)]
    fn get(&mut self, i: usize) -> Option<Value> {
        if i >= self.len {
            return None;
        }
        let (c, k) = (i / MEMO_CHUNK, i % MEMO_CHUNK);
        let w = match self.chunks[c].get(k) {
            Some(&w) => w,
            None => self.expand(c)[k],
        };
        Some(self.unpack(w))
    }

    /// Chunk `c`'s slots, expanded for good if it was compact.
    #[cold]
    #[inline(never)]
    fn expand(&mut self, c: usize) -> &mut [u32] {
        if let Compact::Bytes(bytes) = std::mem::replace(&mut self.compact[c], Compact::Hot) {
            let mut slots = vec![0u32; MEMO_CHUNK].into_boxed_slice();
            Compact::decode(&bytes, &mut slots);
            self.chunks[c] = slots;
        }
        &mut self.chunks[c]
    }

    /// Stores the chunk two behind the newest compact, if it never was.
    fn compact_old(&mut self) {
        let Some(c) = self.chunks.len().checked_sub(3) else {
            return;
        };
        if matches!(self.compact[c], Compact::No) {
            self.compact[c] = Compact::Bytes(Compact::encode(&self.chunks[c], &mut self.encoded));
            self.spare = Some(std::mem::take(&mut self.chunks[c]));
        }
    }

    /// Replaces slot `i` (which must exist). A wide value replacing a wide value reuses its
    /// place in the side table, so repeated `PUT`s of one index cannot grow it. `None`: the
    /// side table is full.
    #[inline]
    fn set(&mut self, i: usize, v: Value) -> Option<()> {
        assert!(i < self.len, "memo index in range");
        if self.chunks[i / MEMO_CHUNK].is_empty() {
            self.expand(i / MEMO_CHUNK);
        }
        let old = self.chunks[i / MEMO_CHUNK][i % MEMO_CHUNK];
        let w = match self.pack_narrow(v) {
            Some(w) if old >> slot::ID_BITS == slot::WIDE => {
                self.wide_free.push(old & slot::ID_MASK);
                w
            }
            Some(w) => w,
            None if old >> slot::ID_BITS == slot::WIDE => {
                self.wide[(old & slot::ID_MASK) as usize] = v;
                return Some(());
            }
            None => self.pack(v)?,
        };
        self.chunks[i / MEMO_CHUNK][i % MEMO_CHUNK] = w;
        Some(())
    }

    /// Appends a slot [`Memo::pack_narrow`] made; the fast path's entry templates pack theirs
    /// once (`fast/template.rs`).
    #[inline(always)]
    fn push_narrow(&mut self, w: u32) {
        if self.len.is_multiple_of(MEMO_CHUNK) && self.len / MEMO_CHUNK == self.chunks.len() {
            self.new_chunk();
        }
        let i = self.len;
        self.chunks[i / MEMO_CHUNK][i % MEMO_CHUNK] = w;
        self.len += 1;
    }

    /// Appends a slot; `None`: the side table is full. Inlined, with the rare parts (a new
    /// chunk, a wide value) out of line: the fast path pushes two or three slots an entry, and
    /// as a call behind two wrappers this was ~80 instructions a slot (callgrind; bench/README.md,
    /// issue 41).
    #[inline(always)]
    fn push(&mut self, v: Value) -> Option<()> {
        if self.len.is_multiple_of(MEMO_CHUNK) && self.len / MEMO_CHUNK == self.chunks.len() {
            self.new_chunk();
        }
        let i = self.len;
        let w = self.pack(v)?;
        self.chunks[i / MEMO_CHUNK][i % MEMO_CHUNK] = w;
        self.len += 1;
        Some(())
    }

    /// Room for the next slot: a chunk (the spare one if any), and the one two behind it
    /// compacted.
    #[cold]
    #[inline(never)]
    fn new_chunk(&mut self) {
        let chunk = match self.spare.take() {
            Some(mut c) => {
                c.fill(0);
                c
            }
            None => vec![0; MEMO_CHUNK].into_boxed_slice(),
        };
        self.chunks.push(chunk);
        self.compact.push(Compact::No);
        if self.compacting {
            self.compact_old();
        }
    }

    fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
        // Slots past the end are written again by `push`: their chunk must be expanded.
        if let Some(c) = self.chunks.get(self.len / MEMO_CHUNK)
            && c.is_empty()
        {
            self.expand(self.len / MEMO_CHUNK);
        }
    }
}

/// Why the heap refused an operation.
#[derive(Debug)]
pub(crate) enum HeapErr {
    Limit {
        what: &'static str,
        limit: u64,
    },
    /// The memory budget shared with other parses is held by them (`budget.rs`).
    Busy {
        total_bytes: u64,
        free_bytes: u64,
    },
    Bad(String),
}

impl HeapErr {
    /// The engine error for this refusal, at `offset` of the input.
    pub fn at(self, offset: u64) -> crate::error::Error {
        use crate::error::Error;
        match self {
            HeapErr::Limit { what, limit } => Error::LimitExceeded {
                offset,
                what,
                limit,
            },
            HeapErr::Busy {
                total_bytes,
                free_bytes,
            } => Error::Busy {
                total_bytes,
                free_bytes,
            },
            HeapErr::Bad(m) => Error::malformed(offset, m),
        }
    }
}

impl From<String> for HeapErr {
    fn from(s: String) -> Self {
        HeapErr::Bad(s)
    }
}

impl From<&str> for HeapErr {
    fn from(s: &str) -> Self {
        HeapErr::Bad(s.to_string())
    }
}

/// Handle of a container in the arena; `generation` catches use after the slot was recycled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Cid {
    idx: u32,
    generation: u32,
}

/// A value on the pickle machine's stack, in the memo, or inside a container. 16 bytes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Value {
    None,
    Bool(bool),
    Int(i64),
    /// An integer outside i64, stored in [`Heap::bigs`].
    Big(u32),
    Float(f64),
    Str(StrId),
    /// A bytes/bytearray object; its content is never needed and not kept.
    Bytes,
    Obj(Cid),
    EmptyList,
    Frame(FrameId),
    Stack(StackId),
    /// A row of [`Heap::trace`].
    Entry(u32),
    /// A row of [`Heap::blocks`]: a segment's block, lowered from its dict.
    Block(u32),
    /// A row of [`Heap::segments`]: a segment, lowered from its dict.
    Segment(u32),
    /// A list of consecutive block rows `start..start+len` (a segment's blocks), lowered once
    /// placed in its segment.
    BlockList {
        start: u32,
        len: u32,
    },
    /// A tuple of two integers that fit 32 bits (a segment's `segment_pool_id`), lowered once
    /// placed.
    SmallPair(i32, i32),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    List,
    Dict,
    Tuple,
    Set,
}

#[derive(Debug)]
pub(crate) enum Items {
    /// Values; for dicts, keys and values alternate.
    Vals(Vec<Value>),
    /// A list holding consecutive trace rows `start..start+len` (the common case, kept compact).
    Entries { start: u32, len: u32 },
    /// A list of trace rows not in table order (the fast path and the general machine create rows
    /// at different moments, so a batch that mixes them is permuted), as runs of consecutive rows
    /// `(first, len)`: a 12M-entry trace has ~100 breaks, so ~1 KB instead of 48 MB.
    Rows(Vec<(u32, u32)>),
    /// A list holding consecutive block rows `start..start+len` (a segment's blocks).
    Blocks { start: u32, len: u32 },
}

#[derive(Debug)]
struct Container {
    generation: u32,
    kind: Kind,
    live: bool,
    /// References outside the memo (stack copies, places in other containers). A lowered
    /// container stays as a forwarding tombstone until the last one is consumed.
    refs: u32,
    lowered: Option<Value>,
    memo: u64,
    items: Items,
}

const NO_MEMO: u64 = u64::MAX;

/// Ids of the strings the lowering looks for: interned first, in this order, by [`Heap::new`], so
/// the lowering can `match` on them.
pub(crate) mod key {
    pub const NAMES: [&str; 24] = [
        "action",
        "addr",
        "size",
        "stream",
        "time_us",
        "frames",
        "compile_context",
        "user_metadata",
        "device_free",
        "filename",
        "line",
        "name",
        "N/A",
        "address",
        "requested_size",
        "state",
        "device",
        "total_size",
        "allocated_size",
        "active_size",
        "segment_type",
        "segment_pool_id",
        "is_expandable",
        "blocks",
    ];
    pub const ACTION: u32 = 1;
    pub const ADDR: u32 = 2;
    pub const SIZE: u32 = 3;
    pub const STREAM: u32 = 4;
    pub const TIME_US: u32 = 5;
    pub const FRAMES: u32 = 6;
    pub const COMPILE_CONTEXT: u32 = 7;
    pub const USER_METADATA: u32 = 8;
    pub const DEVICE_FREE: u32 = 9;
    pub const FILENAME: u32 = 10;
    pub const LINE: u32 = 11;
    pub const NAME: u32 = 12;
    pub const NOT_AVAILABLE: u32 = 13;
    pub const ADDRESS: u32 = 14;
    pub const REQUESTED_SIZE: u32 = 15;
    pub const STATE: u32 = 16;
    pub const DEVICE: u32 = 17;
    pub const TOTAL_SIZE: u32 = 18;
    pub const ALLOCATED_SIZE: u32 = 19;
    pub const ACTIVE_SIZE: u32 = 20;
    pub const SEGMENT_TYPE: u32 = 21;
    pub const SEGMENT_POOL_ID: u32 = 22;
    pub const IS_EXPANDABLE: u32 = 23;
    pub const BLOCKS: u32 = 24;
}

/// Items as plain values (compact entry lists expanded).
fn entry_values(items: &Items) -> Vec<Value> {
    match items {
        Items::Vals(v) => v.clone(),
        Items::Entries { start, len } => (*start..start + len).map(Value::Entry).collect(),
        Items::Rows(runs) => runs
            .iter()
            .flat_map(|&(first, len)| (first..first + len).map(Value::Entry))
            .collect(),
        Items::Blocks { start, len } => (*start..start + len).map(Value::Block).collect(),
    }
}

/// A segment's block, lowered from its dict (`{address, size, requested_size, state, frames}`)
/// as it is placed in the segment's block list: 32 bytes instead of a container and its ten
/// items (~230 bytes, 6x the block's ~40 bytes of pickle), which is what a snapshot of a
/// million live blocks is made of.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BlockRow {
    pub address: u64,
    pub size: u64,
    pub requested_size: u64,
    pub stack: StackId,
    pub state: BlockState,
    /// Which of `address` and `requested_size` the dict had (`HAS_ADDRESS`, `HAS_REQUESTED`).
    pub has: u8,
}

impl BlockRow {
    pub const HAS_ADDRESS: u8 = 1;
    pub const HAS_REQUESTED: u8 = 2;

    pub fn address(&self) -> Option<u64> {
        (self.has & Self::HAS_ADDRESS != 0).then_some(self.address)
    }

    pub fn requested_size(&self) -> Option<u64> {
        (self.has & Self::HAS_REQUESTED != 0).then_some(self.requested_size)
    }
}

/// A segment, lowered from its dict as it is placed in the segments list: 152 bytes instead of a
/// container and its 24 items (~500 bytes). A snapshot of 200,000 segments held those dicts until
/// `lower.rs` read them at the end of the parse, which for an upload is beside the index built
/// while parsing (100 MB more than the CLI's peak, bench/README.md, issue 41). The row keeps
/// exactly what the dict held: [`Heap::dict_pairs`] gives the same pairs back, so `lower.rs`
/// reads a row and a dict alike.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SegmentRow {
    /// The integer values, in [`SegmentRow::KEYS`] order.
    ints: [i64; SegmentRow::INTS],
    /// The other values, in [`SegmentRow::KEYS`] order after the integers.
    others: [Value; SegmentRow::KEYS.len() - SegmentRow::INTS],
    /// Which keys the dict had, in the order it had them: `KEYS` indices, 4 bits each.
    order: u64,
    len: u8,
}

const _: () = assert!(std::mem::size_of::<SegmentRow>() == 152);

impl SegmentRow {
    /// The keys of a segment dict as PyTorch writes it; the first `INTS` take integers.
    const KEYS: [u32; 12] = [
        key::DEVICE,
        key::ADDRESS,
        key::TOTAL_SIZE,
        key::ALLOCATED_SIZE,
        key::ACTIVE_SIZE,
        key::REQUESTED_SIZE,
        key::STREAM,
        key::SEGMENT_TYPE,
        key::SEGMENT_POOL_ID,
        key::IS_EXPANDABLE,
        key::FRAMES,
        key::BLOCKS,
    ];
    const INTS: usize = 7;
    /// The keys a dict must have to be a segment row, as bits of their `KEYS` indices.
    const NEEDED: u16 =
        Self::bit(key::ADDRESS) | Self::bit(key::TOTAL_SIZE) | Self::bit(key::BLOCKS);

    /// Key `k`'s bit, by its index in `KEYS`.
    const fn bit(k: u32) -> u16 {
        let mut i = 0;
        while i < Self::KEYS.len() {
            if Self::KEYS[i] == k {
                return 1 << i;
            }
            i += 1;
        }
        panic!("not a segment key")
    }

    /// The row of a dict's keys and values (alternating) when every key is a segment key, once,
    /// with an integer where one is expected, and it has an address, a total size and blocks.
    fn of(vals: &[Value]) -> Option<SegmentRow> {
        let mut row = SegmentRow {
            ints: [0; Self::INTS],
            others: [Value::None; Self::KEYS.len() - Self::INTS],
            order: 0,
            len: 0,
        };
        let mut seen = 0u16;
        for pair in vals.chunks_exact(2) {
            let Value::Str(StrId(k)) = pair[0] else {
                return None;
            };
            let i = Self::KEYS.iter().position(|&key| key == k)?;
            if seen & 1 << i != 0 {
                return None;
            }
            seen |= 1 << i;
            match (i < Self::INTS, pair[1]) {
                (true, Value::Int(v)) => row.ints[i] = v,
                (true, _) => return None,
                (false, v) => row.others[i - Self::INTS] = v,
            }
            row.order |= (i as u64) << (4 * row.len);
            row.len += 1;
        }
        (seen & Self::NEEDED == Self::NEEDED).then_some(row)
    }

    /// The dict's keys (as `key` ids) and values, in its order.
    fn pairs(&self) -> impl Iterator<Item = (u32, Value)> + '_ {
        (0..self.len).map(|n| {
            let i = (self.order >> (4 * n) & 0xf) as usize;
            let v = match self.ints.get(i) {
                Some(&v) => Value::Int(v),
                None => self.others[i - Self::INTS],
            };
            (Self::KEYS[i], v)
        })
    }
}

/// Everything values refer to: strings, frames, stacks, trace rows, big integers, containers, memo.
#[derive(Debug)]
pub(crate) struct Heap {
    pub strings: StringPool,
    pub frames: Frames,
    pub stacks: Stacks,
    pub trace: TraceTable,
    pub blocks: Vec<BlockRow>,
    pub segments: Vec<SegmentRow>,
    pub bigs: Vec<i128>,
    pub limits: Limits,
    /// Whether `pickle::run` may use the entry fast path (`fast.rs`); tests turn it off to
    /// compare both paths.
    pub fast_path: bool,
    containers: Vec<Container>,
    free: Vec<u32>,
    live_containers: usize,
    container_items: u64,
    /// Values built so far (containers, their items, strings), never decreasing: what a
    /// pickle's opcodes are weighed against (`built`).
    built: u64,
    /// Dicts made so far: a snapshot is dicts from its first bytes (`has_structure`).
    dicts: u64,
    memo: Memo,
    memo_sparse: FxHashMap<u64, Value>,
    /// How many times a `PUT` replaced an existing memo slot (see `fast::State`).
    memo_overwrites: u64,
    scratch: Vec<FrameId>,
    /// Item vectors of lowered containers, reused for new ones (saves a malloc per entry).
    spare: Vec<Vec<Value>>,
    /// Trace rows made so far: the table's, or those sent to `follow`.
    rows: u32,
    /// The thread that builds the trace table and indexes it while the pickle is parsed
    /// (`follow.rs`), when asked for: the table here then holds the stream handles only.
    #[cfg(not(target_arch = "wasm32"))]
    pub follow: Option<crate::follow::Follower>,
    /// What this parse holds of the shared budget, given back when the heap is dropped.
    held: Option<Held>,
}

impl Heap {
    pub fn new(limits: Limits) -> Heap {
        let limits_budget = limits.budget.clone();
        let mut strings = StringPool::default();
        for (i, name) in key::NAMES.iter().enumerate() {
            let id = strings.intern(name);
            debug_assert_eq!(id.0 as usize, i + 1);
        }
        for (i, a) in Action::KNOWN.iter().enumerate() {
            let id = strings.intern(a.as_str());
            debug_assert_eq!(id.0 as usize, key::NAMES.len() + 1 + i);
        }
        Heap {
            strings,
            frames: Frames::default(),
            stacks: Stacks::default(),
            trace: TraceTable::default(),
            blocks: Vec::new(),
            segments: Vec::new(),
            bigs: Vec::new(),
            limits,
            fast_path: true,
            containers: Vec::new(),
            free: Vec::new(),
            live_containers: 0,
            container_items: 0,
            built: 0,
            dicts: 0,
            memo: Memo::default(),
            memo_sparse: FxHashMap::default(),
            memo_overwrites: 0,
            scratch: Vec::new(),
            spare: Vec::new(),
            rows: 0,
            #[cfg(not(target_arch = "wasm32"))]
            follow: None,
            held: limits_budget.map(Held::new),
        }
    }

    /// Memory the parse holds now, estimated from its tables and arena: what is weighed
    /// against the input read so far and against the shared budget ([`Heap::weigh`]).
    /// Column reservations made from the size hint are not counted (address space, not
    /// memory), so rows are weighed by how many there are.
    pub fn held_bytes(&self) -> u64 {
        const ROW_BYTES: usize = 40;
        let memo = self.memo.chunks.len() * MEMO_CHUNK * 4
            + self.memo.wide.capacity() * 16
            + self.memo.wide_free.capacity() * 4
            + self.memo_sparse.capacity() * 32;
        let arena = self.containers.capacity() * std::mem::size_of::<Container>()
            + self.container_items as usize * std::mem::size_of::<Value>()
            + self.free.capacity() * 4;
        (self.strings.heap_bytes()
            + self.frames.heap_bytes()
            + self.stacks.heap_bytes()
            + self.rows as usize * ROW_BYTES
            + self.blocks.len() * std::mem::size_of::<BlockRow>()
            + self.segments.len() * std::mem::size_of::<SegmentRow>()
            + self.bigs.capacity() * 16
            + memo
            + arena) as u64
    }

    /// Refuses to go on when the parse holds more than its input allows (`Limits`'s
    /// `max_held_percent_of_input` past `held_allowance_bytes`) or than the shared budget has
    /// left. `consumed_bytes`: the decompressed input read so far; `stack_values`: values
    /// the reader holds outside the heap (the pickle machine's stack).
    pub fn weigh(&mut self, consumed_bytes: u64, stack_values: usize) -> Result<(), HeapErr> {
        let held = self.held_bytes() + stack_values as u64 * std::mem::size_of::<Value>() as u64;
        let allowed = (consumed_bytes as u128 * self.limits.max_held_percent_of_input as u128 / 100)
            as u64
            + self.limits.held_allowance_bytes;
        if held > allowed {
            return Err(HeapErr::Limit {
                what: "the bytes held for the input read so far (a memory snapshot's tables \
                       take less than its own bytes; this input builds far more)",
                limit: allowed,
            });
        }
        let Some(share) = &mut self.held else {
            return Ok(());
        };
        share.cover(held).map_err(|short| match short {
            Shortfall::TooLarge { total_bytes } => HeapErr::Limit {
                what: "the bytes one parse holds (the budget all parses share)",
                limit: total_bytes,
            },
            Shortfall::Busy {
                total_bytes,
                free_bytes,
            } => HeapErr::Busy {
                total_bytes,
                free_bytes,
            },
        })
    }

    /// Whether anything shaped like a snapshot has been made: a dict (a snapshot, a segment,
    /// a block, a frame) or a trace row.
    pub fn has_structure(&self) -> bool {
        self.dicts > 0 || self.rows > 0
    }

    /// Values built so far and trace rows made: the content a pickle has produced, whatever
    /// it is later lowered into.
    pub fn built(&self) -> u64 {
        self.built + self.rows as u64
    }

    pub fn intern(&mut self, s: &str) -> Result<StrId, HeapErr> {
        self.built += 1;
        let id = self.strings.intern(s);
        if self.strings.heap_bytes() as u64 > self.limits.max_string_pool_bytes {
            return Err(HeapErr::Limit {
                what: "interned string bytes",
                limit: self.limits.max_string_pool_bytes,
            });
        }
        Ok(id)
    }

    pub fn new_container(&mut self, kind: Kind, mut items: Vec<Value>) -> Result<Value, HeapErr> {
        if items.is_empty()
            && let Some(spare) = self.spare.pop()
        {
            items = spare;
        }
        if self.live_containers >= self.limits.max_live_containers {
            return Err(HeapErr::Limit {
                what: "live containers",
                limit: self.limits.max_live_containers as u64,
            });
        }
        self.add_items(items.len() as u64)?;
        self.live_containers += 1;
        self.built += 1;
        self.dicts += u64::from(kind == Kind::Dict);
        let c = Container {
            generation: 0,
            kind,
            live: true,
            refs: 1,
            lowered: None,
            memo: NO_MEMO,
            items: Items::Vals(items),
        };
        let idx = match self.free.pop() {
            Some(idx) => {
                let slot = &mut self.containers[idx as usize];
                let generation = slot.generation;
                *slot = Container { generation, ..c };
                idx
            }
            None => {
                self.containers.push(c);
                (self.containers.len() - 1) as u32
            }
        };
        Ok(Value::Obj(Cid {
            idx,
            generation: self.containers[idx as usize].generation,
        }))
    }

    fn add_items(&mut self, n: u64) -> Result<(), HeapErr> {
        self.container_items += n;
        self.built += n;
        if self.container_items > self.limits.max_container_items {
            return Err(HeapErr::Limit {
                what: "values held in containers",
                limit: self.limits.max_container_items,
            });
        }
        Ok(())
    }

    fn slot(&self, cid: Cid) -> Result<&Container, HeapErr> {
        match self.containers.get(cid.idx as usize) {
            Some(c) if c.live && c.generation == cid.generation && c.lowered.is_none() => Ok(c),
            _ => Err(HeapErr::Bad("a container is used after it was consumed (shared mutable objects are not snapshot data)".into())),
        }
    }

    fn slot_mut(&mut self, cid: Cid) -> Result<&mut Container, HeapErr> {
        match self.containers.get_mut(cid.idx as usize) {
            Some(c) if c.live && c.generation == cid.generation && c.lowered.is_none() => Ok(c),
            _ => Err(HeapErr::Bad("a container is used after it was consumed (shared mutable objects are not snapshot data)".into())),
        }
    }

    pub fn kind(&self, cid: Cid) -> Result<Kind, HeapErr> {
        Ok(self.slot(cid)?.kind)
    }

    pub fn items(&self, cid: Cid) -> Result<&Items, HeapErr> {
        Ok(&self.slot(cid)?.items)
    }

    /// Takes a list of trace rows out of its container (left empty) if nothing else refers to
    /// it: the rows of a device trace, without copying them.
    pub fn take_rows(&mut self, cid: Cid) -> Option<Vec<(u32, u32)>> {
        let c = self.slot_mut(cid).ok()?;
        if c.refs != 1 {
            return None;
        }
        match &mut c.items {
            Items::Rows(rows) => Some(std::mem::take(rows)),
            _ => None,
        }
    }

    /// Appends `values` to `items` in one step when they are consecutive trace rows and `items`
    /// is empty or holds rows: whether the list was empty, or `None` to append them one by one.
    #[inline]
    fn extend_run(items: &mut Items, values: &[Value]) -> Option<bool> {
        let (Some(Value::Entry(first)), Some(Value::Entry(last))) = (values.first(), values.last())
        else {
            return None;
        };
        let (first, n) = (*first, u32::try_from(values.len()).ok()?);
        let consecutive = first.checked_add(n - 1) == Some(*last)
            && values
                .iter()
                .zip(first..)
                .all(|(v, e)| *v == Value::Entry(e));
        if !consecutive {
            return None;
        }
        match items {
            Items::Vals(vals) if vals.is_empty() => {
                *items = Items::Entries {
                    start: first,
                    len: n,
                };
                Some(true)
            }
            Items::Entries { start, len } if start.checked_add(*len) == Some(first) => {
                *len = len.checked_add(n)?;
                Some(false)
            }
            Items::Entries { start, len } => {
                *items = Items::Rows(vec![(*start, *len), (first, n)]);
                Some(false)
            }
            Items::Rows(runs) => {
                crate::model::TraceTable::push_rows(runs, first, n);
                Some(false)
            }
            _ => None,
        }
    }

    /// The list's values, with compact entry lists expanded.
    pub fn list_values(&self, cid: Cid) -> Result<Vec<Value>, HeapErr> {
        Ok(entry_values(self.items(cid)?))
    }

    /// Appends consumed values to a list, tuple or set.
    pub fn extend(&mut self, target: Value, values: &[Value]) -> Result<(), HeapErr> {
        let Value::Obj(cid) = target else {
            return Err("APPEND to something that is not a list".into());
        };
        let c = self.slot_mut(cid)?;
        if c.kind == Kind::Dict {
            return Err("APPEND to something that is not a list".into());
        }
        if let Items::Vals(vals) = &mut c.items
            && !values
                .iter()
                .any(|v| matches!(v, Value::Obj(_) | Value::Entry(_)))
        {
            // Plain values (frames of a stack, numbers): nothing to consume.
            vals.extend_from_slice(values);
            return self.add_items(values.len() as u64);
        }
        if let Some(was_empty) = Self::extend_run(&mut c.items, values) {
            // A batch of a trace's entries, in order: nearly all of a big snapshot's APPENDS.
            #[cfg(not(target_arch = "wasm32"))]
            if let Some(f) = &mut self.follow {
                let list = (cid.idx as u64) << 32 | cid.generation as u64;
                if let Some(Value::Entry(first)) = values.first() {
                    let len = values.len() as u32;
                    f.appended_run(list, *first, len, was_empty);
                }
            }
            #[cfg(target_arch = "wasm32")]
            let _ = was_empty;
            self.built += values.len() as u64;
            return Ok(());
        }
        // Taken out while appending (consuming may lower other containers); put back below.
        let mut items = std::mem::replace(&mut c.items, Items::Vals(Vec::new()));
        let mut in_vals: u64 = 0;
        for &v in values {
            let v = if matches!(v, Value::Obj(_)) {
                self.consume(v)?
            } else {
                v
            };
            #[cfg(not(target_arch = "wasm32"))]
            if let (Some(f), Value::Entry(e)) = (&mut self.follow, v) {
                let list = (cid.idx as u64) << 32 | cid.generation as u64;
                match &items {
                    Items::Vals(vals) if vals.is_empty() => f.appended(list, e, true),
                    Items::Entries { .. } | Items::Rows(_) => f.appended(list, e, false),
                    // Entries among other values: indexed after parsing.
                    Items::Vals(_) | Items::Blocks { .. } => f.lost(),
                }
            }
            // Rows kept as runs are not values held (`container_items`): only what lands in
            // a value vector is.
            match (&mut items, v) {
                (Items::Vals(vals), Value::Entry(e)) if vals.is_empty() => {
                    items = Items::Entries { start: e, len: 1 }
                }
                (Items::Entries { start, len }, Value::Entry(e)) if e == *start + *len => *len += 1,
                (Items::Entries { start, len }, Value::Entry(e)) => {
                    items = Items::Rows(vec![(*start, *len), (e, 1)]);
                }
                (Items::Rows(runs), Value::Entry(e)) => crate::model::TraceTable::push_run(runs, e),
                (Items::Vals(vals), Value::Block(b)) if vals.is_empty() => {
                    items = Items::Blocks { start: b, len: 1 }
                }
                (Items::Blocks { start, len }, Value::Block(b)) if b == *start + *len => *len += 1,
                (Items::Entries { .. } | Items::Rows(_) | Items::Blocks { .. }, v) => {
                    let mut vals = entry_values(&items);
                    vals.push(v);
                    in_vals += vals.len() as u64;
                    items = Items::Vals(vals);
                }
                (Items::Vals(vals), v) => {
                    vals.push(v);
                    in_vals += 1;
                }
            }
        }
        self.slot_mut(cid)?.items = items;
        self.built += values.len() as u64 - in_vals.min(values.len() as u64);
        self.add_items(in_vals)
    }

    /// Sets consumed key/value pairs in a dict.
    pub fn set_items(&mut self, target: Value, pairs: &[Value]) -> Result<(), HeapErr> {
        let cid = match target {
            Value::Obj(cid) => cid,
            // Read into a row when its SETITEMS ended it (`fast.rs`) or when it was placed.
            Value::Entry(_) => {
                return Err(
                    "SETITEM adds to a trace entry after it was complete (CPython's \
                            pickler never writes that): the file was changed by hand or damaged"
                        .into(),
                );
            }
            _ => return Err("SETITEM on something that is not a dict".into()),
        };
        let c = self.slot_mut(cid)?;
        if c.kind != Kind::Dict {
            return Err("SETITEM on something that is not a dict".into());
        }
        if !pairs.len().is_multiple_of(2) {
            return Err("SETITEMS with an odd number of items".into());
        }
        let mut items = std::mem::replace(&mut c.items, Items::Vals(Vec::new()));
        let Items::Vals(vals) = &mut items else {
            unreachable!("dicts never hold entry runs")
        };
        let start = vals.len();
        vals.extend_from_slice(pairs);
        // Only containers need consuming (usually just the `frames` list of an entry).
        for v in &mut vals[start..] {
            if matches!(*v, Value::Obj(_)) {
                *v = self.consume(*v)?;
            }
        }
        self.slot_mut(cid)?.items = items;
        self.add_items(pairs.len() as u64)
    }

    pub fn memo_put(&mut self, key: u64, v: Value) -> Result<(), HeapErr> {
        if let Value::Obj(cid) = v {
            self.slot_mut(cid)?.memo = key;
        }
        let len = self.memo.len() as u64;
        let side_table_full = || HeapErr::Limit {
            what: "wide memo values",
            limit: slot::ID_MASK as u64 + 1,
        };
        if key < len {
            self.memo_overwrites += 1;
            self.memo.set(key as usize, v).ok_or_else(side_table_full)?;
        } else if key == len && self.memo.len() < self.limits.max_memo {
            self.memo.push(v).ok_or_else(side_table_full)?;
        } else {
            if self.memo_sparse.len() >= self.limits.max_memo {
                return Err(HeapErr::Limit {
                    what: "memo entries",
                    limit: self.limits.max_memo as u64,
                });
            }
            self.memo_sparse.insert(key, v);
        }
        Ok(())
    }

    pub fn memo_len(&self) -> u64 {
        (self.memo.len() + self.memo_sparse.len()) as u64
    }

    #[inline(always)]
    pub fn memo_get(&mut self, key: u64) -> Result<Value, HeapErr> {
        if let Some(v) = self.memo.get(key as usize) {
            if let Value::Obj(_) = v {
                self.add_ref(v);
            }
            return Ok(v);
        }
        self.memo_get_sparse(key)
    }

    #[cold]
    fn memo_get_sparse(&mut self, key: u64) -> Result<Value, HeapErr> {
        let v = self
            .memo_sparse
            .get(&key)
            .copied()
            .ok_or_else(|| HeapErr::Bad(format!("memo key {key} was never stored")))?;
        self.add_ref(v);
        Ok(v)
    }

    /// Keeps the memo smaller while the parse is indexed as it goes ([`Memo`]).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn compact_memo(&mut self) {
        self.memo.compacting = true;
    }

    /// Drops the machine's working state once parsing is done; the tables stay.
    pub fn release_memo(&mut self) {
        self.memo = Memo::default();
        self.memo_sparse = FxHashMap::default();
    }

    pub fn int(&self, v: Value) -> Option<i128> {
        match v {
            Value::Int(i) => Some(i as i128),
            Value::Big(b) => Some(self.bigs[b as usize]),
            Value::Bool(b) => Some(b as i128),
            Value::Float(f) if f.fract() == 0.0 && f.abs() < 1e38 => Some(f as i128),
            _ => None,
        }
    }

    /// An unsigned 64-bit field (addresses, sizes, stream handles): negatives and values
    /// ≥ 2^64 wrap, as a C `uintptr_t` would.
    pub fn u64(&self, v: Value) -> Option<u64> {
        self.int(v).map(|i| i as u64)
    }

    pub fn str_of(&self, v: Value) -> Option<&str> {
        match v {
            Value::Str(s) => Some(self.strings.get(s)),
            _ => None,
        }
    }

    /// Lowers a finished value by its shape as it is placed into a container (module docs).
    pub fn consume(&mut self, v: Value) -> Result<Value, HeapErr> {
        let Value::Obj(cid) = v else { return Ok(v) };
        if let Some(c) = self.containers.get(cid.idx as usize)
            && c.live
            && c.generation == cid.generation
            && let Some(l) = c.lowered
        {
            self.release(cid);
            return Ok(l);
        }
        let c = self.slot_mut(cid)?;
        let kind = c.kind;
        // Taken out while lowering, so the lowering may use the rest of the heap.
        let items = std::mem::replace(&mut c.items, Items::Vals(Vec::new()));
        let lowered = match (kind, &items) {
            (Kind::List, Items::Vals(vals)) if vals.is_empty() => Some(Value::EmptyList),
            (Kind::List, Items::Vals(vals)) if matches!(vals[0], Value::Frame(_)) => {
                self.scratch.clear();
                let all_frames = vals.iter().all(|x| match x {
                    Value::Frame(f) => {
                        self.scratch.push(*f);
                        true
                    }
                    _ => false,
                });
                all_frames.then(|| Value::Stack(self.stacks.intern(&self.scratch)))
            }
            (Kind::Dict, Items::Vals(vals)) => self.lower_dict(vals)?,
            (Kind::List, Items::Blocks { start, len }) => Some(Value::BlockList {
                start: *start,
                len: *len,
            }),
            (Kind::Tuple, Items::Vals(vals)) => match vals[..] {
                [Value::Int(a), Value::Int(b)] => i32::try_from(a)
                    .ok()
                    .zip(i32::try_from(b).ok())
                    .map(|(a, b)| Value::SmallPair(a, b)),
                _ => None,
            },
            _ => None,
        };
        let n = match &items {
            Items::Vals(v) => v.len() as u64,
            Items::Entries { .. } | Items::Rows(_) | Items::Blocks { .. } => 0,
        };
        match lowered {
            Some(l) => {
                self.container_items -= n.min(self.container_items);
                if let Items::Vals(mut v) = items
                    && v.capacity() <= 4096
                    && self.spare.len() < 4096
                {
                    v.clear();
                    self.spare.push(v);
                }
                let c = &mut self.containers[cid.idx as usize];
                c.lowered = Some(l);
                let memo = c.memo;
                // Later BINGETs of this object get the lowered value directly.
                if memo != NO_MEMO {
                    if (memo as usize) < self.memo.len() {
                        if self.memo.get(memo as usize) == Some(Value::Obj(cid)) {
                            // An object's slot is wide: `l` reuses its side-table place.
                            self.memo.set(memo as usize, l);
                        }
                    } else if let Some(slot) = self.memo_sparse.get_mut(&memo)
                        && *slot == Value::Obj(cid)
                    {
                        *slot = l;
                    }
                }
                self.release(cid);
                Ok(l)
            }
            None => {
                self.containers[cid.idx as usize].items = items;
                Ok(v)
            }
        }
    }

    /// Records one more reference to a container (BINGET, DUP).
    #[inline]
    pub fn add_ref(&mut self, v: Value) {
        if let Value::Obj(cid) = v
            && let Some(c) = self.containers.get_mut(cid.idx as usize)
            && c.generation == cid.generation
        {
            c.refs = c.refs.saturating_add(1);
        }
    }

    /// Drops one reference to a lowered container; the last one recycles its slot.
    fn release(&mut self, cid: Cid) {
        let c = &mut self.containers[cid.idx as usize];
        c.refs = c.refs.saturating_sub(1);
        if c.refs == 0 {
            c.live = false;
            c.lowered = None;
            c.generation = c.generation.wrapping_add(1);
            self.free.push(cid.idx);
            self.live_containers -= 1;
        }
    }

    fn lower_dict(&mut self, vals: &[Value]) -> Result<Option<Value>, HeapErr> {
        let mut has_action = false;
        let mut frame_keys = 0;
        let mut other_keys = false;
        for pair in vals.chunks_exact(2) {
            match pair[0] {
                Value::Str(StrId(key::ACTION)) => has_action = true,
                Value::Str(StrId(key::FILENAME | key::NAME | key::LINE)) => frame_keys += 1,
                _ => other_keys = true,
            }
        }
        if has_action {
            return self.lower_entry(vals).map(Some);
        }
        if other_keys && let Some(block) = self.lower_block(vals) {
            return Ok(Some(block));
        }
        if other_keys && let Some(row) = SegmentRow::of(vals) {
            let Ok(id) = u32::try_from(self.segments.len()) else {
                return Ok(None);
            };
            self.segments.push(row);
            return Ok(Some(Value::Segment(id)));
        }
        if !other_keys && frame_keys >= 2 {
            let mut f = Frame {
                filename: StrId::EMPTY,
                name: StrId::EMPTY,
                line: 0,
            };
            for pair in vals.chunks_exact(2) {
                match (pair[0], pair[1]) {
                    (Value::Str(StrId(key::LINE)), v) => {
                        f.line = self.int(v).unwrap_or(0).clamp(0, u32::MAX as i128) as u32
                    }
                    (Value::Str(StrId(key::FILENAME)), Value::Str(s)) => f.filename = s,
                    (Value::Str(StrId(key::NAME)), Value::Str(s)) => f.name = s,
                    _ => {}
                }
            }
            return Ok(Some(Value::Frame(self.frames.intern(f))));
        }
        Ok(None)
    }

    /// A block row for a dict of a block's keys alone, with values of the types PyTorch writes
    /// (a whole byte count, a state string, an already lowered stack); `None` for any other
    /// dict, which stays generic for `lower.rs` to read (and to explain, if it is broken).
    fn lower_block(&mut self, vals: &[Value]) -> Option<Value> {
        let mut row = BlockRow {
            address: 0,
            size: u64::MAX,
            requested_size: 0,
            stack: StackId::EMPTY,
            state: BlockState::Unknown,
            has: 0,
        };
        let mut has_state = false;
        for pair in vals.chunks_exact(2) {
            let Value::Str(StrId(k)) = pair[0] else {
                return None;
            };
            match (k, pair[1]) {
                (key::ADDRESS, v @ (Value::Int(_) | Value::Big(_))) => {
                    row.address = self.u64(v)?;
                    row.has |= BlockRow::HAS_ADDRESS;
                }
                (key::SIZE, Value::Int(i)) if (0..1 << 56).contains(&i) => row.size = i as u64,
                (key::REQUESTED_SIZE, v @ (Value::Int(_) | Value::Big(_))) => {
                    row.requested_size = self.u64(v)?;
                    row.has |= BlockRow::HAS_REQUESTED;
                }
                (key::STATE, Value::Str(s)) => {
                    row.state = BlockState::parse(self.strings.get(s));
                    has_state = true;
                }
                (key::FRAMES, Value::Stack(s)) => row.stack = s,
                (key::FRAMES, Value::EmptyList) => row.stack = StackId::EMPTY,
                _ => return None,
            }
        }
        if row.size == u64::MAX || !has_state {
            return None;
        }
        let id = u32::try_from(self.blocks.len()).ok()?;
        self.blocks.push(row);
        Some(Value::Block(id))
    }

    /// Converts a frames value (already lowered, or a list of frame-shaped dicts) to a stack id.
    pub fn stack_of(&mut self, v: Value) -> StackId {
        match v {
            Value::Stack(s) => s,
            Value::Obj(cid) => {
                let Ok(Items::Vals(vals)) = self.items(cid) else {
                    return StackId::EMPTY;
                };
                let vals = vals.clone();
                let mut frames = Vec::with_capacity(vals.len());
                for v in vals {
                    match self.consume(v) {
                        Ok(Value::Frame(f)) => frames.push(f),
                        _ => continue,
                    }
                }
                self.stacks.intern(&frames)
            }
            _ => StackId::EMPTY,
        }
    }

    fn lower_entry(&mut self, vals: &[Value]) -> Result<Value, HeapErr> {
        let mut fields = EntryFields::default();
        for pair in vals.chunks_exact(2) {
            if let Value::Str(StrId(k)) = pair[0] {
                self.set_field(&mut fields, k, pair[1])?;
            }
        }
        Ok(Value::Entry(self.push_entry(&fields)))
    }

    /// Records one key/value of a trace entry (unknown keys are ignored). A `size` that is not a
    /// byte count (negative, past 2^56, not an integer) is an error, never a wrapped number.
    #[inline(always)]
    pub fn set_field(&mut self, f: &mut EntryFields, k: u32, v: Value) -> Result<(), String> {
        match k {
            key::ACTION => {
                if let Value::Str(s) = v {
                    let first = key::NAMES.len() as u32 + 1;
                    match Action::KNOWN.get(s.0.wrapping_sub(first) as usize) {
                        Some(a) => f.action = *a,
                        None => f.other = Some(s),
                    }
                }
            }
            key::ADDR => f.addr = self.u64(v).unwrap_or(0),
            key::SIZE => {
                f.size = match self.int(v) {
                    Some(i) if (0..1 << 56).contains(&i) => i as u64,
                    Some(i) => {
                        return Err(format!(
                            "a trace entry's `size` is {i}, which is no byte count"
                        ));
                    }
                    None => {
                        return Err(
                            "a trace entry's `size` is not an integer (a byte count)".into()
                        );
                    }
                }
            }
            key::STREAM => {
                let handle = self.u64(v).unwrap_or(0);
                f.stream = self.trace.stream_id_of(handle).ok_or_else(|| {
                    "the trace uses more than 65,536 distinct CUDA streams".to_string()
                })?;
            }
            key::TIME_US => f.time_us = self.int(v).unwrap_or(0) as i64,
            key::FRAMES => f.stack = self.stack_of(v),
            key::DEVICE_FREE => f.device_free = self.u64(v),
            key::COMPILE_CONTEXT => {
                if let Value::Str(s) = v
                    && s != StrId(key::NOT_AVAILABLE)
                    && s != StrId::EMPTY
                {
                    f.compile_context = Some(s);
                }
            }
            key::USER_METADATA => {
                if let Value::Str(s) = v
                    && s != StrId::EMPTY
                {
                    f.user_metadata = Some(s);
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Appends a trace row; returns its index. While a second thread builds the table
    /// (`follow.rs`) the row goes there.
    #[inline]
    pub fn push_entry(&mut self, f: &EntryFields) -> u32 {
        let row = self.rows;
        self.rows += 1;
        let t = &mut self.trace;
        if t.streams.is_empty() {
            t.streams.push(0);
        }
        #[cfg(not(target_arch = "wasm32"))]
        if let Some(follow) = &mut self.follow {
            follow.push(row, f, &t.streams);
            return row;
        }
        t.push_sparse(row, f);
        t.push_dense(f.action, f.addr, f.size, f.stream, f.time_us, f.stack);
        row
    }

    /// Room for about `rows` trace rows, in the table the parser keeps (the thread that builds
    /// it instead reserves its own).
    pub fn reserve_rows(&mut self, rows: usize) {
        #[cfg(not(target_arch = "wasm32"))]
        if self.follow.is_some() {
            return;
        }
        self.trace.reserve(rows);
    }

    /// Trace rows made so far (in the table, or sent to the thread building it).
    #[inline]
    pub fn rows(&self) -> u32 {
        self.rows
    }

    /// The table the thread built (`follow.rs`), in place of the parser's own, which then
    /// holds the stream handles only.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn install_trace(&mut self, mut table: TraceTable) {
        debug_assert!(self.trace.is_empty());
        table.streams = std::mem::take(&mut self.trace.streams);
        self.trace = table;
    }

    // The fast path (`fast.rs`) needs these few memo primitives.

    /// Length of the dense memo, to roll back to.
    pub fn memo_mark(&self) -> Option<usize> {
        self.memo_sparse.is_empty().then_some(self.memo.len())
    }

    pub fn memo_truncate(&mut self, len: usize) {
        self.memo.truncate(len);
    }

    /// Appends to the dense memo (the fast path only memoizes at the end).
    #[inline(always)]
    pub fn memo_push(&mut self, v: Value) -> Option<usize> {
        if self.memo.len() >= self.limits.max_memo {
            return None;
        }
        self.memo.push(v)?;
        Some(self.memo.len() - 1)
    }

    /// `v` as a memo slot, if it fits one without the side table: for
    /// [`Heap::memo_push_narrow`].
    #[inline(always)]
    pub fn memo_narrow(&self, v: Value) -> Option<u32> {
        self.memo.pack_narrow(v)
    }

    /// [`Heap::memo_push`] of a value [`Heap::memo_narrow`] packed.
    #[inline(always)]
    pub fn memo_push_narrow(&mut self, w: u32) -> Option<()> {
        if self.memo.len() >= self.limits.max_memo {
            return None;
        }
        self.memo.push_narrow(w);
        Some(())
    }

    pub fn memo_overwrites(&self) -> u64 {
        self.memo_overwrites
    }

    /// Replaces a slot the fast path pushed; `None` if the memo's side table is full.
    pub fn memo_set(&mut self, slot: usize, v: Value) -> Option<()> {
        self.memo.set(slot, v)
    }

    /// A memo value without counting a reference (the fast path never takes containers).
    #[inline]
    pub fn memo_peek(&mut self, key: usize) -> Option<Value> {
        self.memo.get(key)
    }

    pub fn intern_stack(&mut self, frames: &[FrameId]) -> StackId {
        self.stacks.intern(frames)
    }

    /// Dict pairs of a generic container, with keys as strings (non-string keys skipped).
    pub fn dict_pairs(&self, v: Value) -> Vec<(&str, Value)> {
        if let Value::Segment(id) = v {
            return self.segments[id as usize]
                .pairs()
                .map(|(k, v)| (self.strings.get(StrId(k)), v))
                .collect();
        }
        let Value::Obj(cid) = v else {
            return Vec::new();
        };
        match (self.slot(cid).map(|c| (c.kind, &c.items)), ()) {
            (Ok((Kind::Dict, Items::Vals(vals))), ()) => vals
                .chunks_exact(2)
                .filter_map(|p| self.str_of(p[0]).map(|k| (k, p[1])))
                .collect(),
            _ => Vec::new(),
        }
    }

    /// Generic JSON view of a small value (allocator settings and other free-form fields).
    pub fn to_json(&self, v: Value, depth: usize) -> Result<serde_json::Value, HeapErr> {
        use serde_json::Value as J;
        if depth > self.limits.max_depth {
            return Err(HeapErr::Limit {
                what: "nesting depth",
                limit: self.limits.max_depth as u64,
            });
        }
        Ok(match v {
            Value::None => J::Null,
            Value::Bool(b) => J::Bool(b),
            Value::Int(i) => J::from(i),
            Value::Big(b) => {
                let i = self.bigs[b as usize];
                match u64::try_from(i) {
                    Ok(u) => J::from(u),
                    Err(_) => J::String(i.to_string()),
                }
            }
            Value::Float(f) => serde_json::Number::from_f64(f)
                .map(J::Number)
                .unwrap_or(J::Null),
            Value::Str(s) => J::String(self.strings.get(s).to_string()),
            Value::Bytes => J::Null,
            Value::EmptyList
            | Value::Stack(_)
            | Value::Entry(_)
            | Value::Frame(_)
            | Value::Block(_)
            | Value::BlockList { .. } => J::Array(Vec::new()),
            Value::SmallPair(a, b) => J::Array(vec![J::from(a), J::from(b)]),
            Value::Segment(_) => {
                let mut m = serde_json::Map::new();
                for (k, x) in self.dict_pairs(v) {
                    m.insert(k.to_string(), self.to_json(x, depth + 1)?);
                }
                J::Object(m)
            }
            Value::Obj(cid) => match (self.kind(cid)?, self.items(cid)?) {
                (Kind::Dict, Items::Vals(vals)) => {
                    let mut m = serde_json::Map::new();
                    for p in vals.chunks_exact(2) {
                        let key = match p[0] {
                            Value::Str(s) => self.strings.get(s).to_string(),
                            other => self.to_json(other, depth + 1)?.to_string(),
                        };
                        m.insert(key, self.to_json(p[1], depth + 1)?);
                    }
                    J::Object(m)
                }
                (_, Items::Vals(vals)) => J::Array(
                    vals.iter()
                        .map(|x| self.to_json(*x, depth + 1))
                        .collect::<Result<_, _>>()?,
                ),
                (_, Items::Entries { .. } | Items::Rows(_) | Items::Blocks { .. }) => {
                    J::Array(Vec::new())
                }
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memo_slots_round_trip_narrow_wide_and_ids_past_28_bits() {
        let mut memo = Memo::default();
        let values = [
            Value::None,
            Value::Bool(true),
            Value::Str(StrId(slot::ID_MASK)),
            Value::Stack(StackId(slot::ID_MASK + 1)),
            Value::Entry(u32::MAX),
            Value::Int(-5),
            Value::Frame(FrameId(7)),
        ];
        for v in values {
            memo.push(v).unwrap();
        }
        for (i, v) in values.iter().enumerate() {
            assert_eq!(memo.get(i), Some(*v), "slot {i}");
        }
        // Ids past 28 bits and the integer went to the side table.
        assert_eq!(memo.wide.len(), 3);
        // Replacing a wide slot with a wide value reuses its place; narrow over wide is a slot.
        memo.set(5, Value::Int(9)).unwrap();
        memo.set(3, Value::Stack(StackId(1))).unwrap();
        assert_eq!(memo.wide.len(), 3);
        assert_eq!(memo.get(5), Some(Value::Int(9)));
        assert_eq!(memo.get(3), Some(Value::Stack(StackId(1))));
        assert_eq!(memo.get(values.len()), None);
    }

    /// A segment dict is lowered to a row once placed, with its blocks list and pool id tuple,
    /// and gives back the same pairs in the same order; a dict with a key a segment lacks, or a
    /// size that is not an integer, stays a dict for `lower.rs` to read (or explain).
    #[test]
    fn segment_dicts_lower_to_rows_that_give_their_pairs_back() {
        let mut heap = Heap::new(Limits::default());
        let s = |heap: &mut Heap, text: &str| Value::Str(heap.intern(text).unwrap());
        let blocks = heap.new_container(Kind::List, Vec::new()).unwrap();
        let block = heap.new_container(Kind::Dict, Vec::new()).unwrap();
        let block_pairs = [
            s(&mut heap, "size"),
            Value::Int(512),
            s(&mut heap, "state"),
            s(&mut heap, "active_allocated"),
        ];
        heap.set_items(block, &block_pairs).unwrap();
        heap.extend(blocks, &[block]).unwrap();
        let pool = heap
            .new_container(Kind::Tuple, vec![Value::Int(1), Value::Int(-2)])
            .unwrap();
        let pairs = |heap: &mut Heap, total: Value| {
            vec![
                s(heap, "total_size"),
                total,
                s(heap, "address"),
                Value::Int(1 << 40),
                s(heap, "is_expandable"),
                Value::Bool(true),
                s(heap, "segment_pool_id"),
                pool,
                s(heap, "blocks"),
                blocks,
                s(heap, "stream"),
                Value::Int(7),
            ]
        };
        let given = pairs(&mut heap, Value::Int(2 << 20));
        let seg = heap.new_container(Kind::Dict, Vec::new()).unwrap();
        heap.set_items(seg, &given).unwrap();
        let list = heap.new_container(Kind::List, Vec::new()).unwrap();
        heap.extend(list, &[seg]).unwrap();
        let Ok(Items::Vals(placed)) = heap.items(match list {
            Value::Obj(cid) => cid,
            _ => unreachable!(),
        }) else {
            panic!("a list of values")
        };
        let placed = placed[0];
        assert!(matches!(placed, Value::Segment(0)), "{placed:?}");
        let back: Vec<(String, Value)> = heap
            .dict_pairs(placed)
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        let keys = [
            "total_size",
            "address",
            "is_expandable",
            "segment_pool_id",
            "blocks",
            "stream",
        ];
        assert_eq!(
            back.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(),
            keys
        );
        assert_eq!(back[1].1, Value::Int(1 << 40));
        assert_eq!(back[3].1, Value::SmallPair(1, -2));
        assert_eq!(back[4].1, Value::BlockList { start: 0, len: 1 });
        assert_eq!(heap.blocks[0].size, 512);
        // Only the list is left of the five containers.
        assert_eq!(heap.live_containers, 1);

        for odd in [
            vec![
                s(&mut heap, "total_size"),
                Value::Float(1.0),
                s(&mut heap, "address"),
                Value::Int(0),
                s(&mut heap, "blocks"),
                Value::EmptyList,
            ],
            vec![
                s(&mut heap, "total_size"),
                Value::Int(1),
                s(&mut heap, "address"),
                Value::Int(0),
                s(&mut heap, "blocks"),
                Value::EmptyList,
                s(&mut heap, "owner"),
                Value::None,
            ],
            vec![
                s(&mut heap, "total_size"),
                Value::Int(1),
                s(&mut heap, "stream"),
                Value::Int(0),
            ],
        ] {
            let d = heap.new_container(Kind::Dict, Vec::new()).unwrap();
            heap.set_items(d, &odd).unwrap();
            assert!(matches!(heap.consume(d).unwrap(), Value::Obj(_)), "{odd:?}");
        }
    }

    /// A compacting memo reads back what a plain one holds, through chunks compacted, read,
    /// written and truncated into, and most chunks of a trace-like memo stay compact.
    #[test]
    fn compact_chunks_read_back_and_expand_when_touched() {
        let n = 7 * MEMO_CHUNK + 123;
        // Entries and their frame lists in turn, with strings and a wide value now and then.
        let value = |i: usize| match i % 2 {
            _ if i % 1000 == 999 => Value::Int(i as i64),
            _ if i.is_multiple_of(777) => Value::Str(StrId((i / 777) as u32)),
            0 => Value::Entry((i / 2) as u32),
            _ => Value::Stack(StackId((i * 7919 % 5000) as u32)),
        };
        let (mut plain, mut compact) = (Memo::default(), Memo::default());
        compact.compacting = true;
        for i in 0..n {
            plain.push(value(i)).unwrap();
            compact.push(value(i)).unwrap();
        }
        let stored = compact.chunks.iter().filter(|c| c.is_empty()).count();
        assert_eq!(stored, 6, "all but the newest two chunks compact");
        // Reads from a compact chunk, a write into another, a truncation into a third.
        assert_eq!(compact.get(3), plain.get(3));
        compact.set(MEMO_CHUNK + 5, Value::None).unwrap();
        plain.set(MEMO_CHUNK + 5, Value::None).unwrap();
        for i in (0..n).step_by(97) {
            assert_eq!(compact.get(i), plain.get(i), "slot {i}");
        }
        assert!(
            compact.chunks.iter().all(|c| !c.is_empty()),
            "every chunk read was expanded"
        );
        let mut again = Memo {
            compacting: true,
            ..Memo::default()
        };
        for i in 0..4 * MEMO_CHUNK {
            again.push(value(i)).unwrap();
        }
        again.truncate(MEMO_CHUNK + 10);
        again.push(Value::Bool(true)).unwrap();
        assert_eq!(again.get(MEMO_CHUNK + 10), Some(Value::Bool(true)));
        assert_eq!(again.get(MEMO_CHUNK + 9), Some(value(MEMO_CHUNK + 9)));
        assert_eq!(again.get(2), Some(value(2)));
        // Compact, the trace-like slots take about two bytes each.
        let slots: Vec<u32> = (0..MEMO_CHUNK).map(|i| plain.chunks[2][i]).collect();
        let bytes = Compact::encode(&slots, &mut Vec::new());
        assert!(bytes.len() < 2 * MEMO_CHUNK, "{} bytes", bytes.len());
        let mut back = vec![0u32; MEMO_CHUNK];
        Compact::decode(&bytes, &mut back);
        assert_eq!(back, slots);
        // The widest slots: ids jumping across all 28 bits, each taking 5 bytes.
        let wide: Vec<u32> = (0..MEMO_CHUNK as u32)
            .map(|i| (i % 11) << slot::ID_BITS | if i % 2 == 0 { slot::ID_MASK / 2 + 1 } else { 0 })
            .collect();
        let bytes = Compact::encode(&wide, &mut Vec::new());
        assert!(bytes.len() > 4 * MEMO_CHUNK, "{} bytes", bytes.len());
        Compact::decode(&bytes, &mut back);
        assert_eq!(back, wide);
    }
}
