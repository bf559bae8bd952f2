//! A fast path for the one shape that makes up nearly all of a big snapshot: a trace-entry dict.
//!
//! It works in two steps so that the first can run on another thread:
//! - [`decode`] reads one entry dict straight from the bytes into tokens (numbers, new strings,
//!   memo references, the `BINGET`s of a frames list) when it has exactly the shape CPython's
//!   pickler writes for a trace entry. It needs nothing but the bytes: no memo, no tables.
//! - [`apply`] turns those tokens into a trace row, resolving memo references, interning strings
//!   and stacks and pushing memo slots in the order the bytes would, or refuses having changed
//!   nothing that matters (the memo is truncated back; strings and stacks it interned are
//!   harmless).
//!
//! `pickle::run` calls [`try_entry`] (both steps) at every `EMPTY_DICT`; on a refusal the general
//! machine reads the same bytes, and the result is identical either way (`tests/it/formats.rs` and
//! the golden tests compare both paths). A refusal is always safe, so the two steps may disagree
//! with the general machine only by refusing.
//!
//! For a big plain file, [`predecode`] runs [`decode`] on a second thread over the file (`lib.rs`
//! opens it a second time), and the parsing thread, on reaching an `EMPTY_DICT` at an offset the
//! pre-decoder read an entry from, only applies its tokens ([`Tape`]). Tokens cross from one core
//! to the other by the million, so they are kept small (16 bytes, keys as 4-byte memo indices)
//! and their batches are recycled; and since nearly every entry names the same memoized keys in
//! the same order, [`apply`] resolves them once per run of entries (`Keys`). An entry decoded
//! from the same bytes is the same entry whatever led the pre-decoder there, so it needs no other
//! agreement with the parser than the offset; memo references are resolved by the parser, in
//! order, so nothing of the memo is shared. The parser never waits for the pre-decoder: where it
//! has not got yet, the parser decodes the entry itself.
//!
//! Measured on the 1M- and 12M-event benchmarks: see bench/README.md.

use std::ops::Range;

use crate::model::{FrameId, StackId};
use crate::values::{EntryFields, Heap, Value, key};
use rustc_hash::FxHashMap;

/// The memo op that may follow a new object, in 4 bytes (tokens are written and read back by
/// the million, so their size is memory traffic): [`MemoOp::NO`], [`MemoOp::NEXT`]
/// (`MEMOIZE`), or the index a `BINPUT`/`LONG_BINPUT` names (only accepted when it is the
/// next one).
#[derive(Clone, Copy, Debug, PartialEq)]
struct MemoOp(u32);

impl MemoOp {
    const NO: MemoOp = MemoOp(u32::MAX);
    const NEXT: MemoOp = MemoOp(u32::MAX - 1);

    /// A `PUT` of index `i`; `None` for the two indices the encoding keeps (no memo is that big).
    fn at(i: u32) -> Option<MemoOp> {
        (i < MemoOp::NEXT.0).then_some(MemoOp(i))
    }
}

/// One key or value of an entry. 16 bytes.
#[derive(Clone, Copy, Debug)]
enum Tok {
    Int(i64),
    Float(f64),
    None,
    Bool(bool),
    /// A new string: `len` bytes of valid UTF-8 at `at` in the arena.
    Str {
        at: u32,
        len: u32,
        memo: MemoOp,
    },
    /// `BINGET`/`LONG_BINGET` of a memo index.
    Ref(u32),
    /// A frames list: the `BINGET` ops of its frames (`len` bytes at `at`; none: empty).
    List {
        memo: MemoOp,
        at: u32,
        len: u32,
    },
}

const _: () = assert!(std::mem::size_of::<Tok>() == 16);

#[derive(Clone, Debug)]
struct Head {
    /// Stream offset of the entry's `EMPTY_DICT` (0 on the serial path, where it is not needed).
    offset: u64,
    /// Bytes from `EMPTY_DICT` to the dict's `SETITEMS`, inclusive.
    len: u32,
    memo: MemoOp,
    /// The entry's keys and values in [`Entries::keys`] and [`Entries::vals`].
    fields: Range<u32>,
}

/// Most fields of an entry the fast path takes (a trace entry has at most ten); the general
/// machine reads a bigger dict.
const MAX_FIELDS: usize = 16;

/// A key is nearly always a memo reference to a key string met before: it is kept as the index
/// (below `KEY_STR`), or as `KEY_STR` + the place of a new string in [`Entries::new_keys`].
const KEY_STR: u32 = 1 << 31;

/// Decoded entries: what [`decode`] writes and [`apply`] reads.
#[derive(Default, Debug)]
pub(crate) struct Entries {
    heads: Vec<Head>,
    keys: Vec<u32>,
    vals: Vec<Tok>,
    new_keys: Vec<Tok>,
    arena: Vec<u8>,
}

impl Entries {
    fn clear(&mut self) {
        self.heads.clear();
        self.keys.clear();
        self.vals.clear();
        self.new_keys.clear();
        self.arena.clear();
    }

    /// Key `k` of [`Entries::keys`] as a token.
    #[inline]
    fn key(&self, k: u32) -> Tok {
        match k.checked_sub(KEY_STR) {
            Some(i) => self.new_keys[i as usize],
            None => Tok::Ref(k),
        }
    }

    /// Bytes entry `i` spans.
    pub fn len_bytes(&self, i: usize) -> usize {
        self.heads[i].len as usize
    }
}

/// Reads one entry dict from `buf` (which starts at its `EMPTY_DICT`). Returns the bytes used and
/// the value to push, or `None` to let the general machine read it.
#[cfg(test)]
pub(crate) fn try_entry(buf: &[u8], heap: &mut Heap, state: &mut State) -> Option<(usize, Value)> {
    let mut one = Entries::default();
    if !decode(buf, heap.limits.max_string_bytes, 0, &mut one) {
        return None;
    }
    apply(&one, 0, heap, state).map(|v| (one.len_bytes(0), v))
}

/// The fast path's working memory, kept across entries.
#[derive(Default)]
pub(crate) struct State {
    frames: Vec<FrameId>,
    /// Stacks by the exact bytes of their frame list's body (`BINGET`s of memoized frames).
    /// A big trace repeats a few thousand lists millions of times, and each frame lookup is a
    /// cache miss in a memo of millions of slots spread over the file: one hash of ~60 bytes
    /// replaces a dozen of those and the stack's own hashing (measured in bench/README.md).
    /// The bytes mean the same stack as long as no memo slot they name is overwritten, which
    /// only an explicit `PUT` of an existing index does; [`Heap::memo_overwrites`] counts those
    /// and a change clears the cache.
    stacks: FxHashMap<Box<[u8]>, StackId>,
    stack_key_bytes: usize,
    overwrites_seen: u64,
    keys: Keys,
}

/// The last entry's keys when every one was a memo reference, and the key each named: a trace's
/// entries nearly all name the same memoized key strings in the same order, so the next entry
/// compares its references instead of looking each one up in the memo. As with the stack cache,
/// a reference means the same string as long as no memo slot is overwritten.
#[derive(Default)]
struct Keys {
    refs: Vec<u32>,
    ids: Vec<u32>,
    overwrites_seen: u64,
}

impl Keys {
    #[inline]
    fn matches(&self, keys: &[u32], overwrites: u64) -> bool {
        // An entry refused half way leaves fewer ids than references: no match.
        self.ids.len() == keys.len() && overwrites == self.overwrites_seen && self.refs == keys
    }
}

/// Keys stop being added past this many bytes of cached list bodies (lists still parse, uncached).
const STACK_CACHE_MAX_BYTES: usize = 64 << 20;

/// Protocol 4's framing opcode, followed by the frame's 8-byte length.
const FRAME: u8 = 0x95;

struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl Cursor<'_> {
    #[inline]
    fn byte(&mut self) -> Option<u8> {
        let b = *self.buf.get(self.pos)?;
        self.pos += 1;
        Some(b)
    }
    /// The next opcode, past any protocol-4 `FRAME` markers: CPython's pickler ends a 64 KiB
    /// frame after whatever object crosses the boundary, so one lands inside an entry every
    /// ~700 entries, and a frame carries no meaning for the reader (the general machine skips
    /// it the same way).
    #[inline]
    fn op(&mut self) -> Option<u8> {
        let b = self.peek_op()?;
        self.pos += 1;
        Some(b)
    }
    #[inline]
    fn peek_op(&mut self) -> Option<u8> {
        loop {
            let b = *self.buf.get(self.pos)?;
            if b != FRAME {
                return Some(b);
            }
            self.take(9)?;
        }
    }
    #[inline]
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let s = self.buf.get(self.pos..self.pos + n)?;
        self.pos += n;
        Some(s)
    }
    #[inline]
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }

    /// An optional memo op after a new object.
    #[inline]
    fn memo_op(&mut self) -> Option<MemoOp> {
        Some(match self.peek_op() {
            Some(0x94) => {
                self.pos += 1;
                MemoOp::NEXT
            }
            Some(b'q') => {
                self.pos += 1;
                MemoOp::at(self.byte()? as u32)?
            }
            Some(b'r') => {
                self.pos += 1;
                MemoOp::at(self.u32()?)?
            }
            _ => MemoOp::NO,
        })
    }

    #[inline(always)]
    fn memo_ref(&mut self, op: u8) -> Option<Tok> {
        Some(Tok::Ref(if op == b'h' {
            self.byte()? as u32
        } else {
            self.u32()?
        }))
    }

    #[inline(always)]
    fn string(&mut self, n: usize, max_str: u64, arena: &mut Vec<u8>) -> Option<Tok> {
        if n as u64 > max_str {
            return None;
        }
        let raw = self.take(n)?;
        std::str::from_utf8(raw).ok()?;
        let at = u32::try_from(arena.len()).ok()?;
        arena.extend_from_slice(raw);
        let memo = self.memo_op()?;
        Some(Tok::Str {
            at,
            len: n as u32,
            memo,
        })
    }

    /// A key as [`Entries::keys`] keeps it.
    #[inline(always)]
    fn key(&mut self, max_str: u64, out: &mut Entries) -> Option<u32> {
        match self.op()? {
            b'h' => Some(self.byte()? as u32),
            b'j' => self.u32().filter(|&i| i < KEY_STR),
            0x8c => {
                let n = self.byte()? as usize;
                let k = KEY_STR.checked_add(u32::try_from(out.new_keys.len()).ok()?)?;
                let s = self.string(n, max_str, &mut out.arena)?;
                out.new_keys.push(s);
                Some(k)
            }
            _ => None,
        }
    }

    #[inline(always)]
    fn value(&mut self, max_str: u64, arena: &mut Vec<u8>) -> Option<Tok> {
        Some(match self.op()? {
            b'K' => Tok::Int(self.byte()? as i64),
            b'M' => Tok::Int(u16::from_le_bytes(self.take(2)?.try_into().ok()?) as i64),
            b'J' => Tok::Int(i32::from_le_bytes(self.take(4)?.try_into().ok()?) as i64),
            0x8a => {
                let n = self.byte()? as usize;
                if n > 8 {
                    return None;
                }
                // Eight bytes in view (nearly always): one load and a sign-extending shift
                // instead of a variable-length copy.
                if n > 0
                    && let Some(word) = self.buf.get(self.pos..self.pos + 8)
                {
                    self.pos += n;
                    let raw = u64::from_le_bytes(word.try_into().ok()?);
                    let shift = 64 - 8 * n as u32;
                    return Some(Tok::Int(((raw << shift) as i64) >> shift));
                }
                let bytes = self.take(n)?;
                let mut buf = [if bytes.last().is_some_and(|b| b & 0x80 != 0) {
                    0xff
                } else {
                    0
                }; 8];
                buf[..n].copy_from_slice(bytes);
                Tok::Int(i64::from_le_bytes(buf))
            }
            b'G' => Tok::Float(f64::from_be_bytes(self.take(8)?.try_into().ok()?)),
            b'N' => Tok::None,
            0x88 => Tok::Bool(true),
            0x89 => Tok::Bool(false),
            0x8c => {
                let n = self.byte()? as usize;
                self.string(n, max_str, arena)?
            }
            b'X' => {
                let n = self.u32()? as usize;
                self.string(n, max_str, arena)?
            }
            op @ (b'h' | b'j') => self.memo_ref(op)?,
            b']' => self.frames_list(arena)?,
            _ => return None,
        })
    }

    /// `]` [memo] then nothing (empty), `MARK (BINGET frame)* APPENDS`, or `BINGET frame APPEND`.
    /// The `BINGET` ops are copied to the arena as they are (past any `FRAME` marker).
    fn frames_list(&mut self, arena: &mut Vec<u8>) -> Option<Tok> {
        let memo = self.memo_op()?;
        let at = u32::try_from(arena.len()).ok()?;
        match self.peek_op() {
            Some(b'(') => {
                self.pos += 1;
                loop {
                    match self.op()? {
                        b'h' => {
                            let i = self.byte()?;
                            arena.extend_from_slice(&[b'h', i]);
                        }
                        b'j' => {
                            let i = self.take(4)?;
                            arena.push(b'j');
                            arena.extend_from_slice(i);
                        }
                        b'e' => break,
                        _ => return None,
                    }
                }
            }
            Some(op @ (b'h' | b'j')) => {
                // One frame and APPEND, or (an empty list) the next key of the dict.
                let (buf, save) = (self.buf, self.pos);
                let n = if op == b'h' { 2 } else { 5 };
                let one = buf.get(save..save + n)?;
                self.pos += n;
                if self.peek_op() == Some(b'a') {
                    self.pos += 1;
                    arena.extend_from_slice(one);
                } else {
                    self.pos = save;
                }
            }
            _ => {}
        }
        // The list must be finished: no further APPEND(S) into it.
        if matches!(self.peek_op(), Some(b'(' | b'a' | b'e')) {
            return None;
        }
        let len = arena.len() as u32 - at;
        Some(Tok::List { memo, at, len })
    }
}

/// Decodes the entry dict at the start of `buf` (its `EMPTY_DICT`) into `out`; false (and `out`
/// as it was) when the bytes are not a trace entry of the fast path's shape. `offset` is the
/// stream offset of `buf[0]`, kept with the entry.
pub(crate) fn decode(buf: &[u8], max_str: u64, offset: u64, out: &mut Entries) -> bool {
    let (fields, new_keys, arena) = (out.keys.len(), out.new_keys.len(), out.arena.len());
    match decode_fields(buf, max_str, out) {
        Some((len, memo)) if u32::try_from(len).is_ok() => {
            out.heads.push(Head {
                offset,
                len: len as u32,
                memo,
                fields: fields as u32..out.keys.len() as u32,
            });
            true
        }
        _ => {
            out.keys.truncate(fields);
            out.vals.truncate(fields);
            out.new_keys.truncate(new_keys);
            out.arena.truncate(arena);
            false
        }
    }
}

fn decode_fields(buf: &[u8], max_str: u64, out: &mut Entries) -> Option<(usize, MemoOp)> {
    if buf.first() != Some(&b'}') || u32::try_from(out.keys.len() + 64).is_err() {
        return None;
    }
    let mut c = Cursor { buf, pos: 1 };
    let memo = c.memo_op()?;
    if c.op()? != b'(' {
        return None;
    }
    // Fields are gathered on the stack and copied out once: pushing each to `out` made every
    // push store the vectors' lengths back to memory (measured in bench/README.md).
    let mut keys = [0u32; MAX_FIELDS];
    let mut vals = [Tok::None; MAX_FIELDS];
    let mut n = 0;
    loop {
        if c.peek_op()? == b'u' {
            c.pos += 1;
            break;
        }
        if n == MAX_FIELDS {
            return None;
        }
        keys[n] = c.key(max_str, out)?;
        vals[n] = c.value(max_str, &mut out.arena)?;
        n += 1;
    }
    // The dict must be finished: a MARK or SETITEM here would add to it.
    if n == 0 || matches!(c.peek_op(), None | Some(b'(' | b's' | b'u')) {
        return None;
    }
    out.keys.extend_from_slice(&keys[..n]);
    out.vals.extend_from_slice(&vals[..n]);
    Some((c.pos, memo))
}

/// Turns decoded entry `i` into a trace row (module docs); `None`: the general machine must read
/// it, and nothing that matters was changed.
pub(crate) fn apply(e: &Entries, i: usize, heap: &mut Heap, state: &mut State) -> Option<Value> {
    let mark = heap.memo_mark()?;
    let v = apply_entry(e, &e.heads[i], heap, state);
    if v.is_none() {
        heap.memo_truncate(mark);
    }
    v
}

fn apply_entry(e: &Entries, head: &Head, heap: &mut Heap, state: &mut State) -> Option<Value> {
    let slot = memo(heap, head.memo, Value::None)?;
    let mut fields = EntryFields::default();
    let span = head.fields.start as usize..head.fields.end as usize;
    let (keys, vals) = (&e.keys[span.clone()], &e.vals[span]);
    if state.keys.matches(keys, heap.memo_overwrites()) {
        for (n, &v) in vals.iter().enumerate() {
            let k = state.keys.ids[n];
            let v = resolve(e, v, heap, state)?;
            heap.set_field(&mut fields, k, v).ok()?;
        }
    } else {
        state.keys.refs.clear();
        state.keys.ids.clear();
        for (n, (&k, &v)) in keys.iter().zip(vals).enumerate() {
            state.keys.refs.push(k);
            let Value::Str(k) = resolve(e, e.key(k), heap, state)? else {
                return None;
            };
            if n == 0 && k.0 != key::ACTION {
                return None;
            }
            state.keys.ids.push(k.0);
            let v = resolve(e, v, heap, state)?;
            // A field the machine would refuse: it refuses it, naming the offset.
            heap.set_field(&mut fields, k.0, v).ok()?;
        }
        state.keys.overwrites_seen = heap.memo_overwrites();
        if keys.iter().any(|&k| k >= KEY_STR) {
            state.keys.ids.clear();
        }
    }
    let v = Value::Entry(heap.push_entry(&fields));
    if let Some(slot) = slot {
        heap.memo_set(slot, v)?;
    }
    Some(v)
}

/// Applies a memo op to a new value: the slot it took, if any.
#[inline]
fn memo(heap: &mut Heap, op: MemoOp, v: Value) -> Option<Option<usize>> {
    match op {
        MemoOp::NO => Some(None),
        MemoOp::NEXT => Some(Some(heap.memo_push(v)?)),
        MemoOp(i) if i as usize == heap.memo_mark()? => Some(Some(heap.memo_push(v)?)),
        MemoOp(_) => None,
    }
}

#[inline(always)]
fn resolve(e: &Entries, t: Tok, heap: &mut Heap, state: &mut State) -> Option<Value> {
    Some(match t {
        Tok::Int(i) => Value::Int(i),
        Tok::Float(f) => Value::Float(f),
        Tok::None => Value::None,
        Tok::Bool(b) => Value::Bool(b),
        Tok::Str { at, len, memo: m } => {
            let raw = &e.arena[at as usize..(at + len) as usize];
            let v = Value::Str(heap.intern(std::str::from_utf8(raw).ok()?).ok()?);
            memo(heap, m, v)?;
            v
        }
        Tok::Ref(i) => match heap.memo_peek(i as usize)? {
            Value::Obj(_) => return None,
            v => v,
        },
        Tok::List { memo: m, at, len } => {
            let slot = memo(heap, m, Value::EmptyList)?;
            let v = if len == 0 {
                Value::EmptyList
            } else {
                state.stack(&e.arena[at as usize..(at + len) as usize], heap)?
            };
            if let Some(slot) = slot {
                heap.memo_set(slot, v)?;
            }
            v
        }
    })
}

impl State {
    /// The stack of a frames list's `BINGET` ops, which must all name memoized frames.
    fn stack(&mut self, body: &[u8], heap: &mut Heap) -> Option<Value> {
        if heap.memo_overwrites() != self.overwrites_seen {
            self.stacks.clear();
            self.stack_key_bytes = 0;
            self.overwrites_seen = heap.memo_overwrites();
        }
        if let Some(&id) = self.stacks.get(body) {
            return Some(Value::Stack(id));
        }
        self.frames.clear();
        let mut c = Cursor { buf: body, pos: 0 };
        while let Some(op) = c.byte() {
            let Tok::Ref(i) = c.memo_ref(op)? else {
                return None;
            };
            match heap.memo_peek(i as usize)? {
                Value::Frame(f) => self.frames.push(f),
                _ => return None,
            }
        }
        let id = heap.intern_stack(&self.frames);
        if self.stack_key_bytes + body.len() <= STACK_CACHE_MAX_BYTES {
            self.stack_key_bytes += body.len();
            self.stacks.insert(body.into(), id);
        }
        Some(Value::Stack(id))
    }
}

/// Entries a pre-decoder sends at a time.
#[cfg(not(target_arch = "wasm32"))]
const BATCH_ENTRIES: usize = 4096;

/// Entries decoded ahead from the parser's own window: few enough that their tokens are still
/// in cache when applied, enough that applying never reads tokens just written (a store still
/// in flight makes the load that reads it wait).
const INLINE_ENTRIES: usize = 512;

/// Decoded entries by stream offset, for the parser: decoded ahead in batches from its own
/// window, and past `start` by a pre-decoder thread when there is one.
#[derive(Default)]
pub(crate) struct Tape {
    inline: Entries,
    inline_next: usize,
    #[cfg(not(target_arch = "wasm32"))]
    remote: Option<Remote>,
}

#[cfg(not(target_arch = "wasm32"))]
struct Remote {
    rx: std::sync::mpsc::Receiver<Entries>,
    /// Batches applied, handed back to the pre-decoder to fill again.
    back: std::sync::mpsc::Sender<Entries>,
    cur: Entries,
    next: usize,
    /// The pre-decoder's first offset: entries before it are never on its tape.
    start: u64,
    done: bool,
}

impl Tape {
    /// A tape fed by a pre-decoder ([`predecode`]) from offset `start` on.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn with_predecoder(
        rx: std::sync::mpsc::Receiver<Entries>,
        back: std::sync::mpsc::Sender<Entries>,
        start: u64,
    ) -> Tape {
        Tape {
            remote: Some(Remote {
                rx,
                back,
                cur: Entries::default(),
                next: 0,
                start,
                done: false,
            }),
            ..Tape::default()
        }
    }

    /// The decoded entry that starts at `offset`, where the parser met an `EMPTY_DICT`;
    /// `window` is the parser's view of the bytes from there. `None`: the bytes there are not a
    /// fast-path entry. The parser never goes back, so entries before `offset` are dropped.
    pub fn at(&mut self, offset: u64, window: &[u8], max_str: u64) -> Option<(&Entries, usize)> {
        #[cfg(not(target_arch = "wasm32"))]
        if let Some(r) = self.remote.as_mut()
            && offset >= r.start
            && !r.done
        {
            match r.at(offset) {
                Ahead::Found(i) => return self.remote.as_ref().map(|r| (&r.cur, i)),
                // The pre-decoder passed this offset without an entry: one entry from here.
                Ahead::Passed => return self.decode_here(offset, window, max_str, 1),
                // Decoded here, a batch at a time, until the pre-decoder is ahead again.
                Ahead::Behind => {}
            }
        }
        while let Some(h) = self.inline.heads.get(self.inline_next) {
            if h.offset > offset {
                break;
            }
            self.inline_next += 1;
            if h.offset == offset {
                return Some((&self.inline, self.inline_next - 1));
            }
        }
        self.decode_here(offset, window, max_str, INLINE_ENTRIES)
    }

    /// Decodes up to `limit` consecutive entries of a list from `window` (at `offset`).
    fn decode_here(
        &mut self,
        offset: u64,
        window: &[u8],
        max_str: u64,
        limit: usize,
    ) -> Option<(&Entries, usize)> {
        let e = &mut self.inline;
        e.clear();
        let mut p = 0;
        while e.heads.len() < limit && decode(&window[p..], max_str, offset + p as u64, e) {
            p += e.heads[e.heads.len() - 1].len as usize;
            // What separates entries in a list: APPENDS and MARK between batches, FRAME markers.
            loop {
                match window.get(p) {
                    Some(b'e' | b'(') => p += 1,
                    Some(&FRAME) => p += 9,
                    _ => break,
                }
            }
            if window.get(p) != Some(&b'}') {
                break;
            }
        }
        self.inline_next = 0;
        if e.heads.first()?.offset == offset {
            self.inline_next = 1;
            return Some((&self.inline, 0));
        }
        None
    }
}

#[cfg(not(target_arch = "wasm32"))]
/// Where the pre-decoder is, seen from an offset the parser reached.
#[cfg(not(target_arch = "wasm32"))]
enum Ahead {
    /// Its entry there: the index in `cur`.
    Found(usize),
    /// It went past the offset without an entry there.
    Passed,
    /// It has not got there yet (or has ended: then `done`).
    Behind,
}

#[cfg(not(target_arch = "wasm32"))]
impl Remote {
    /// The pre-decoder's entry at `offset`, never waiting for it: a pre-decoder that has not got
    /// that far (at the start, or when the machine gave its core to something else) leaves the
    /// parser to decode the entry itself, and, doing less an entry, soon runs ahead again.
    /// Waiting for it instead cost 0.15 s on a 1 GB file (bench/README.md, issue 41).
    fn at(&mut self, offset: u64) -> Ahead {
        use std::sync::mpsc::TryRecvError;
        loop {
            if let Some(h) = self.cur.heads.get(self.next) {
                if h.offset > offset {
                    return Ahead::Passed;
                }
                self.next += 1;
                if h.offset == offset {
                    return Ahead::Found(self.next - 1);
                }
                continue;
            }
            match self.rx.try_recv() {
                Ok(batch) => {
                    let _ = self.back.send(std::mem::replace(&mut self.cur, batch));
                    self.next = 0;
                }
                Err(TryRecvError::Empty) => return Ahead::Behind,
                Err(TryRecvError::Disconnected) => {
                    self.done = true;
                    return Ahead::Behind;
                }
            }
        }
    }
}

/// The pre-decoder: reads `r` (the stream from offset `start`), decodes every entry dict it finds
/// and sends them in batches until the stream ends or the parser hangs up. Bytes that are not an
/// entry are stepped over to the next `EMPTY_DICT`; what it reads from a false start is never used
/// (the parser asks only for offsets where it meets an `EMPTY_DICT` itself). Batches come back
/// on `back` once applied and are filled again: a fresh batch grew by copying, page by new page.
#[cfg(not(target_arch = "wasm32"))]
pub(crate) fn predecode<R: std::io::Read>(
    mut r: R,
    start: u64,
    max_str: u64,
    tx: std::sync::mpsc::SyncSender<Entries>,
    back: std::sync::mpsc::Receiver<Entries>,
) {
    let next_batch = || {
        let mut b = back.try_recv().unwrap_or_default();
        b.clear();
        b
    };
    /// Bytes in view before an entry is decoded, as the parser's window (`pickle::FAST_WINDOW`).
    const WINDOW: usize = 64 << 10;
    /// Bytes in view a refill waits for (a file's read gives the whole buffer at once; a reader
    /// that gives less is read again until this much is there).
    const REFILL_BYTES: usize = 8 * WINDOW;
    let mut buf = vec![0u8; 4 << 20];
    let (mut lo, mut hi, mut base, mut eof) = (0usize, 0usize, start, false);
    let mut batch = Entries::default();
    loop {
        if hi - lo < WINDOW && !eof {
            buf.copy_within(lo..hi, 0);
            base += lo as u64;
            hi -= lo;
            lo = 0;
            while hi - lo < REFILL_BYTES && hi < buf.len() && !eof {
                match r.read(&mut buf[hi..]) {
                    Ok(0) | Err(_) => eof = true,
                    Ok(n) => hi += n,
                }
            }
            continue;
        }
        let Some(p) = buf[lo..hi].iter().position(|&b| b == b'}') else {
            if eof {
                break;
            }
            lo = hi;
            continue;
        };
        let at = lo + p;
        if hi - at < WINDOW && !eof {
            lo = at;
            continue;
        }
        if decode(&buf[at..hi], max_str, base + at as u64, &mut batch) {
            lo = at + batch.heads.last().map_or(1, |h| h.len as usize);
            if batch.heads.len() >= BATCH_ENTRIES
                && tx
                    .send(std::mem::replace(&mut batch, next_batch()))
                    .is_err()
            {
                return;
            }
        } else {
            lo = at + 1;
        }
    }
    let _ = tx.send(batch);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::values::Limits;

    /// One entry as CPython's protocol-4 pickler writes it, with a `FRAME` marker between two
    /// fields where a 64 KiB frame boundary can fall.
    fn entry_bytes(frame_inside: bool) -> Vec<u8> {
        let mut b = vec![b'}', 0x94, b'('];
        let s = |b: &mut Vec<u8>, text: &str| {
            b.extend([0x8c, text.len() as u8]);
            b.extend(text.as_bytes());
            b.push(0x94);
        };
        s(&mut b, "action");
        s(&mut b, "alloc");
        if frame_inside {
            b.push(FRAME);
            b.extend(70_000u64.to_le_bytes());
        }
        s(&mut b, "addr");
        b.extend([b'J', 0, 0, 0, 1]);
        s(&mut b, "size");
        b.extend([b'K', 64]);
        b.push(b'u');
        b.push(b'.');
        b
    }

    #[test]
    fn a_frame_marker_inside_an_entry_stays_on_the_fast_path() {
        for frame_inside in [false, true] {
            let bytes = entry_bytes(frame_inside);
            let mut heap = Heap::new(Limits::default());
            let (used, v) =
                try_entry(&bytes, &mut heap, &mut State::default()).unwrap_or_else(|| {
                    panic!("fast path refused the entry (frame inside: {frame_inside})")
                });
            assert_eq!(used, bytes.len() - 1, "everything up to STOP was read");
            assert!(matches!(v, Value::Entry(0)));
            assert_eq!(heap.trace.addr, [1 << 24]);
            assert_eq!(heap.trace.size, [64]);
        }
    }
}
