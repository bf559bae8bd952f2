//! A fast path for the one shape that makes up nearly all of a big snapshot: a trace-entry dict.
//!
//! Two ways in, both giving a trace row (and the memo slots the bytes would push) or refusing
//! having changed nothing that matters (the memo is truncated back; strings and stacks interned
//! are harmless), and then the general machine reads the same bytes:
//! - [`apply_run`], where nearly every entry is read: once an entry has been read, the entries
//!   after it that name the same memoized keys in the same order are read straight from the
//!   machine's buffer into their rows, a run at a time (the key references compared as they are
//!   read, the numbers put in their fields as they are decoded). It ends at the first entry of
//!   another shape, at the end of the buffer, or at anything else.
//!   Within a run, an entry's keys up to its frames list are read through a template (a
//!   layout learned from an entry before, compared in one masked pass: [`template`]) when one
//!   matches, op by op when none does.
//! - Two steps, for an entry that starts a run: [`decode`] reads the entry dict into tokens
//!   (numbers, new strings, memo references, the `BINGET`s of a frames list) when it has exactly
//!   the shape CPython's pickler writes for a trace entry, needing nothing but the bytes, and
//!   [`apply`] turns them into a row, resolving its keys. [`Tape`] decodes a batch ahead from the
//!   machine's own buffer.
//!
//! The result is identical to the general machine's (`tests/it/formats.rs` compares both paths on
//! every fixture and on thousands of changed files; the golden tests read through both). A
//! refusal is always safe, so the fast path may disagree with the general machine only by
//! refusing, with one exception no CPython pickle has: the fast path makes a row of an entry at
//! its `SETITEMS`, the general machine when it is placed in its list, so a `SETITEM` into the
//! dict in between is refused (the file was edited or damaged).
//!
//! Until issue 41's fifth part a pre-decoder thread decoded entries into tokens ahead of the
//! parser, which applied them; reading the entries in runs on one thread costs less than the
//! apply step alone did, and the second core goes to reading the file and building the index.
//! Measured on the 1M- and 12M-event benchmarks: see bench/README.md.

use std::ops::Range;

use crate::intern::StrId;
use crate::model::{FrameId, StackId};
use crate::values::{EntryFields, Heap, Value, key};
use ops::{Cursor, FRAME, Field, INT_LONG1, INT_OPS, INT_SIGNED, INT_WIDTH, NUMBER_FIELDS};
use rustc_hash::FxHashMap;
use template::{Found, TEMPLATE_BYTES, Template, Templates};

mod ops;
mod template;

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
    /// The last list's body and its stack: over half of a trace's entries have the stack of the
    /// entry before (57 % of the GPT recording's), and comparing with the last bytes saves
    /// hashing them and probing the cache: the lookups fell from 9.4 % to 7.7 % of the samples
    /// on a 5.6M-event trace (bench/README.md, issue 41). Cleared with the cache.
    last_body: Vec<u8>,
    last_stack: Option<StackId>,
    overwrites_seen: u64,
    keys: Keys,
    /// The keys `keys` replaced: a trace whose entries come in two shapes (an entry of another
    /// shape every so often) runs in both without reading an entry through the tape each time.
    other_keys: Keys,
    /// [`apply_run`]'s arena for the strings and frame lists of the entry it reads.
    scratch: Entries,
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
    /// The layouts of entries read with these keys ([`template`]).
    templates: Templates,
}

impl Keys {
    /// Whether every key was a memo reference and was read: keys a run can name.
    fn complete(&self) -> bool {
        !self.refs.is_empty() && self.ids.len() == self.refs.len()
    }

    #[inline]
    fn matches(&self, keys: &[u32], overwrites: u64) -> bool {
        // An entry refused half way leaves fewer ids than references: no match.
        self.ids.len() == keys.len() && overwrites == self.overwrites_seen && self.refs == keys
    }
}

/// The longest frames list body [`State::known_list`] looks for in the cache (a hundred frames).
const MAX_KNOWN_BODY: usize = 512;

/// Keys stop being added past this many bytes of cached list bodies (lists still parse, uncached).
const STACK_CACHE_MAX_BYTES: usize = 64 << 20;

impl<'a> Cursor<'a> {
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

    /// An optional memo op after a new object. Inlined, with the `PUT`s of older protocols
    /// out of line: as a call it was 21 instructions, two or three times an entry (callgrind,
    /// bench/README.md, issue 41).
    #[inline(always)]
    fn memo_op(&mut self) -> Option<MemoOp> {
        match self.peek_op() {
            Some(0x94) => {
                self.pos += 1;
                Some(MemoOp::NEXT)
            }
            Some(b'q' | b'r') => self.memo_put(),
            _ => Some(MemoOp::NO),
        }
    }

    /// A `BINPUT` or `LONG_BINPUT` (the cursor at it).
    #[inline(never)]
    fn memo_put(&mut self) -> Option<MemoOp> {
        let i = if self.op()? == b'q' {
            self.byte()? as u32
        } else {
            self.u32()?
        };
        MemoOp::at(i)
    }

    /// An integer opcode's value (`BININT1`, `BININT2`, `BININT`, `LONG1` of 1 to 8 bytes),
    /// or `None` with the cursor where it was for anything else (or fewer than 9 bytes after
    /// the opcode). Decoded from a table and one 8-byte load, without a branch on the opcode.
    #[inline(always)]
    fn int(&mut self) -> Option<i64> {
        let op = self.peek_op()?;
        let d = INT_OPS[op as usize];
        if d == 0 {
            return None;
        }
        let at = self.pos + 1;
        let after = self.buf.get(at..at + 9)?;
        let long1 = (d & INT_LONG1) != 0;
        let n = if long1 {
            after[0] as u32
        } else {
            (d & INT_WIDTH) as u32
        };
        if n == 0 || n > 8 {
            return None;
        }
        let start = long1 as usize;
        let raw = u64::from_le_bytes(after[start..start + 8].try_into().ok()?);
        let shift = 64 - 8 * n;
        let v = if d & INT_SIGNED != 0 {
            ((raw << shift) as i64) >> shift
        } else {
            ((raw << shift) >> shift) as i64
        };
        self.pos = at + start + n as usize;
        Some(v)
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

    /// At a frames list of the usual form, `]` [memo] `MARK (BINGET frame)* APPENDS` with no
    /// `FRAME` marker inside: its memo op and the `BINGET`s' bytes, in place. `None` (the cursor
    /// where it was): another form, which [`Cursor::frames_list`] reads.
    #[inline(always)]
    fn frames_in_place(&mut self) -> Option<(MemoOp, &'a [u8])> {
        self.attempt(Self::frames_body)
    }

    /// `read` from the cursor, which stays where it was when `read` refuses.
    #[inline(always)]
    fn attempt<T>(&mut self, read: impl FnOnce(&mut Self) -> Option<T>) -> Option<T> {
        let save = self.pos;
        let found = read(self);
        if found.is_none() {
            self.pos = save;
        }
        found
    }

    #[inline(always)]
    fn frames_body(&mut self) -> Option<(MemoOp, &'a [u8])> {
        let memo = self.list_mark()?;
        let (buf, start) = (self.buf, self.pos);
        loop {
            match *buf.get(self.pos)? {
                b'h' => self.pos += 2,
                b'j' => self.pos += 5,
                b'e' => break,
                _ => return None,
            }
        }
        let body = buf.get(start..self.pos)?;
        self.pos += 1;
        self.list_finished().then_some((memo, body))
    }

    /// At an empty list, `]` [memo] and then the dict's next key (a memo reference not followed
    /// by `APPEND`) or its end: the list's memo op, the cursor past it. `None` (the cursor where
    /// it was) for a list with items.
    #[inline(always)]
    fn empty_list(&mut self) -> Option<MemoOp> {
        // Not through `attempt`: a function item there was called, not inlined (49
        // instructions an entry, callgrind).
        let save = self.pos;
        let found = self.empty_list_at();
        if found.is_none() {
            self.pos = save;
        }
        found
    }

    #[inline(always)]
    fn empty_list_at(&mut self) -> Option<MemoOp> {
        if self.op()? != b']' {
            return None;
        }
        let memo = self.memo_op()?;
        let next = self.peek_op()?;
        let item = match next {
            b'h' => 2,
            b'j' => 5,
            // Items follow (`MARK`), or something this path does not read.
            b'(' | b'a' | b'e' => return None,
            _ => return Some(memo),
        };
        // A memo reference: the next key, unless an `APPEND` makes it the list's one item.
        let after = self.pos + item;
        let follows = *self.buf.get(after)?;
        (follows != b'a' && follows != FRAME).then_some(memo)
    }

    /// At a list's `EMPTY_LIST` [memo] `MARK`: its memo op, the cursor past the `MARK`.
    #[inline(always)]
    fn list_mark(&mut self) -> Option<MemoOp> {
        if self.op()? != b']' {
            return None;
        }
        let memo = self.memo_op()?;
        if self.peek_op()? != b'(' {
            return None;
        }
        self.pos += 1;
        Some(memo)
    }

    /// After a list: whether it is finished (no further `APPEND(S)` into it).
    #[inline(always)]
    fn list_finished(&mut self) -> bool {
        !matches!(self.peek_op(), Some(b'(' | b'a' | b'e'))
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
        if !self.list_finished() {
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
        // The keys they replace stay as the other shape runs may take ([`apply_run`]).
        if state.keys.complete() {
            std::mem::swap(&mut state.keys, &mut state.other_keys);
        }
        state.keys.refs.clear();
        state.keys.ids.clear();
        state.keys.templates.clear();
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

/// Entries read and applied in one step, straight from `window` (which starts at an
/// `EMPTY_DICT`), for as long as each names the same memoized keys in the same order as the last
/// entry [`apply`] read (or as the shape before it, `State::other_keys`): the key references
/// are compared as they are read, and each value goes
/// from the bytes to its field without a token tape in between. Each entry is pushed onto
/// `stack` (at most `room` of them); returns the bytes used, 0 when the first entry is not of
/// that shape (then [`Tape`] and [`apply`] read it, or the general machine). An entry refused
/// half way changes nothing that matters, as in [`apply`], and ends the run there.
pub(crate) fn apply_run(
    window: &[u8],
    max_str: u64,
    heap: &mut Heap,
    state: &mut State,
    stack: &mut Vec<Value>,
    room: usize,
) -> usize {
    let used = run_of(window, max_str, heap, state, stack, room);
    if used > 0 || !state.other_keys.complete() {
        return used;
    }
    // An entry of the other shape: its keys become the run's.
    std::mem::swap(&mut state.keys, &mut state.other_keys);
    let used = run_of(window, max_str, heap, state, stack, room);
    if used == 0 {
        std::mem::swap(&mut state.keys, &mut state.other_keys);
    }
    used
}

/// [`apply_run`] with the keys of `state.keys`.
fn run_of(
    window: &[u8],
    max_str: u64,
    heap: &mut Heap,
    state: &mut State,
    stack: &mut Vec<Value>,
    room: usize,
) -> usize {
    let n = state.keys.refs.len();
    if n == 0
        || n > MAX_FIELDS
        || state.keys.ids.len() != n
        || state.keys.overwrites_seen != heap.memo_overwrites()
    {
        return 0;
    }
    let mut plan = Plan {
        refs: [0; MAX_FIELDS],
        fields: [(0, Field::Other); MAX_FIELDS],
        n,
        stream: None,
        last_str: (u8::MAX, StrId::EMPTY),
        last_str_bytes: [0; 32],
        seen: [(u32::MAX, Value::None); REF_CACHE],
    };
    for (k, (&r, &id)) in state.keys.refs.iter().zip(&state.keys.ids).enumerate() {
        // A key named twice (no dict CPython writes): the general machine reads it.
        if plan.refs[..k].contains(&r) {
            return 0;
        }
        plan.refs[k] = r;
        plan.fields[k] = (id, Field::of(id));
    }
    let mut scratch = std::mem::take(&mut state.scratch);
    let mut templates = std::mem::take(&mut state.keys.templates);
    let mut c = Cursor {
        buf: window,
        pos: 0,
    };
    let mut done = 0;
    while done < room {
        let (start, Some(mark)) = (c.pos, heap.memo_mark()) else {
            break;
        };
        scratch.arena.clear();
        match plan.entry(&mut c, max_str, &mut scratch, heap, state, &mut templates) {
            Some(v) => {
                stack.push(v);
                done += 1;
            }
            None => {
                heap.memo_truncate(mark);
                c.pos = start;
                break;
            }
        }
        if c.peek_op() != Some(b'}') {
            break;
        }
    }
    state.scratch = scratch;
    state.keys.templates = templates;
    c.pos
}

/// The keys a run of entries names ([`apply_run`]): memo indices and the key each one means,
/// and the last stream's id.
struct Plan {
    refs: [u32; MAX_FIELDS],
    fields: [(u32, Field); MAX_FIELDS],
    n: usize,
    /// The last stream handle and its id.
    stream: Option<(u64, u16)>,
    /// The last short new string ([`Plan::string`]): its length and id, and its bytes.
    last_str: (u8, StrId),
    last_str_bytes: [u8; 32],
    /// Memo references read in this run, by the index's low bits: entry after entry, a
    /// field names the same few values (an action's string, an empty `user_metadata`, a
    /// frames list shared with the entry before). The run's own memo ops only add slots, so
    /// a slot read once holds the same value for the rest of the run.
    seen: [(u32, Value); REF_CACHE],
}

/// Memo references [`Plan`] remembers.
const REF_CACHE: usize = 32;

impl Plan {
    /// One entry at the cursor (which must be at its `EMPTY_DICT`, past any `FRAME` marker).
    #[inline(always)]
    fn entry(
        &mut self,
        c: &mut Cursor,
        max_str: u64,
        scratch: &mut Entries,
        heap: &mut Heap,
        state: &mut State,
        templates: &mut Templates,
    ) -> Option<Value> {
        let (start, row) = (c.pos, heap.rows());
        let mut fields = EntryFields::default();
        let (mut nums, mut read) = ([0i64; NUMBER_FIELDS], 0u8);
        let found = templates.find(c.buf, start);
        let first_key = match found {
            Found::Hit(i) => {
                let t = templates.get(i);
                let at = c.buf.get(start..start + TEMPLATE_BYTES)?.try_into().ok()?;
                t.apply(at, row, heap, &mut fields, &mut nums, |i, heap| {
                    self.memo_ref(i, heap)
                })?;
                read = t.read();
                c.pos += t.len;
                t.keys
            }
            Found::Miss | Found::Skipped => {
                if c.op()? != b'}' {
                    return None;
                }
                let dict_memo = c.memo_op()?;
                if c.op()? != b'(' {
                    return None;
                }
                // The dict's slot takes the row it will be (no field can name it: a reference
                // to an entry is refused below), so the slot is written once.
                memo(heap, dict_memo, Value::Entry(row))?;
                0
            }
        };
        for k in first_key..self.n {
            let got = match c.op()? {
                b'h' => c.byte()? as u32,
                b'j' => c.u32()?,
                _ => return None,
            };
            if got != self.refs[k] {
                return None;
            }
            let (id, field) = self.fields[k];
            // A number field's integer goes to its slot, decoded without a branch on its opcode
            // or on the field (one shared dispatch on each mispredicted most of the time: a
            // tenth of the parse, bench/README.md); set once the entry is read, below.
            if (field as usize) < NUMBER_FIELDS
                && let Some(i) = c.int()
            {
                nums[field as usize] = i;
                read |= 1 << field as u8;
                continue;
            }
            // The two values that are new objects in every entry PyTorch writes, read in place.
            match c.peek_op() {
                Some(b']') if field == Field::Frames => {
                    // Most entries PyTorch writes have no frames (every `free_completed`,
                    // everything the autograd thread allocates): the empty list first.
                    if let Some(m) = c.empty_list() {
                        memo(heap, m, Value::EmptyList)?;
                        fields.stack = StackId::EMPTY;
                        continue;
                    }
                    if let Some((m, v)) = state.known_list(c, heap) {
                        memo(heap, m, v)?;
                        fields.stack = stack_id(v);
                        continue;
                    }
                    if let Some((m, body)) = c.frames_in_place() {
                        // The list's slot takes its stack at once: its body names frames
                        // only, never the list itself, and finding the stack pushes no slot.
                        let v = if body.is_empty() {
                            Value::EmptyList
                        } else {
                            state.stack(body, heap)?
                        };
                        memo(heap, m, v)?;
                        fields.stack = stack_id(v);
                        continue;
                    }
                }
                Some(0x8c) => {
                    c.pos += 1;
                    let n = c.byte()? as usize;
                    let v = Value::Str(self.string(c.take(n)?, max_str, heap)?);
                    memo(heap, c.memo_op()?, v)?;
                    heap.set_field(&mut fields, id, v).ok()?;
                    continue;
                }
                _ => {}
            }
            if let Some(op @ (b'h' | b'j')) = c.peek_op() {
                c.pos += 1;
                let Tok::Ref(i) = c.memo_ref(op)? else {
                    return None;
                };
                let v = self.memo_ref(i, heap)?;
                heap.set_field(&mut fields, id, v).ok()?;
                continue;
            }
            match c.value(max_str, &mut scratch.arena)? {
                // An integer `Cursor::int` left (too near the window's end): its slot as well.
                Tok::Int(i) if (field as usize) < NUMBER_FIELDS => {
                    nums[field as usize] = i;
                    read |= 1 << field as u8;
                }
                t => {
                    let v = resolve(scratch, t, heap, state)?;
                    heap.set_field(&mut fields, id, v).ok()?;
                }
            }
        }
        // The dict must end here and be finished: a MARK or SETITEM after it would add to it.
        if c.op()? != b'u' || matches!(c.peek_op(), None | Some(b'(' | b's' | b'u')) {
            return None;
        }
        // As `Heap::set_field` reads them, without the detour through a `Value` (each key is
        // named once: `run_of` takes no plan with a key twice).
        if read & 1 << Field::Addr as u8 != 0 {
            fields.addr = nums[Field::Addr as usize] as u64;
        }
        if read & 1 << Field::Size as u8 != 0 {
            let size = nums[Field::Size as usize];
            // Beyond what `Heap::set_field` takes: the general machine says why.
            if !(0..1 << 56).contains(&size) {
                return None;
            }
            fields.size = size as u64;
        }
        if read & 1 << Field::Stream as u8 != 0 {
            fields.stream = self.stream_id(nums[Field::Stream as usize] as u64, heap)?;
        }
        if read & 1 << Field::TimeUs as u8 != 0 {
            fields.time_us = nums[Field::TimeUs as usize];
        }
        if let Found::Miss = found
            && let Some(t) = Template::learn(
                &c.buf[start..c.pos],
                &self.refs[..self.n],
                &self.fields[..self.n],
                heap,
                max_str,
            )
        {
            templates.keep(t);
        }
        debug_assert_eq!(heap.rows(), row);
        Some(Value::Entry(heap.push_entry(&fields)))
    }

    /// A new string's id, as [`resolve`] gives it; the last short one is kept, since PyTorch
    /// writes the same `"N/A"` as a new string in every entry.
    #[inline(always)]
    fn string(&mut self, raw: &[u8], max_str: u64, heap: &mut Heap) -> Option<StrId> {
        if raw.len() as u64 > max_str {
            return None;
        }
        let (len, id) = self.last_str;
        if raw.len() == len as usize && self.last_str_bytes.get(..raw.len()) == Some(raw) {
            return Some(id);
        }
        let id = heap.intern(std::str::from_utf8(raw).ok()?).ok()?;
        if raw.len() <= self.last_str_bytes.len() {
            self.last_str_bytes[..raw.len()].copy_from_slice(raw);
            self.last_str = (raw.len() as u8, id);
        }
        Some(id)
    }

    /// [`referenced`], remembered for the rest of the run.
    #[inline(always)]
    fn memo_ref(&mut self, i: u32, heap: &mut Heap) -> Option<Value> {
        let seen = &mut self.seen[i as usize % REF_CACHE];
        if seen.0 == i {
            return Some(seen.1);
        }
        let v = referenced(heap, i)?;
        *seen = (i, v);
        Some(v)
    }

    /// The id of a stream handle, as `Heap::set_field` gives it.
    #[inline(always)]
    fn stream_id(&mut self, handle: u64, heap: &mut Heap) -> Option<u16> {
        match self.stream {
            Some((h, id)) if h == handle => Some(id),
            _ => {
                let id = heap.trace.stream_id_of(handle)?;
                self.stream = Some((handle, id));
                Some(id)
            }
        }
    }
}

/// The stack a frames list the fast path read stands for (`Heap::set_field` of `frames` gives
/// the same for these values).
#[inline(always)]
fn stack_id(v: Value) -> StackId {
    match v {
        Value::Stack(s) => s,
        _ => StackId::EMPTY,
    }
}

/// Applies a memo op to a new value: the slot it took, if any.
#[inline(always)]
fn memo(heap: &mut Heap, op: MemoOp, v: Value) -> Option<Option<usize>> {
    match op {
        MemoOp::NO => Some(None),
        MemoOp::NEXT => Some(Some(heap.memo_push(v)?)),
        MemoOp(i) if i as usize == heap.memo_mark()? => Some(Some(heap.memo_push(v)?)),
        MemoOp(_) => None,
    }
}

/// The value memo slot `i` holds, as a field may name it: `None` for an entry or another
/// container.
#[inline(always)]
fn referenced(heap: &mut Heap, i: u32) -> Option<Value> {
    match heap.memo_peek(i as usize)? {
        Value::Obj(_) | Value::Entry(_) => None,
        v => Some(v),
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
        Tok::Ref(i) => referenced(heap, i)?,
        Tok::List { memo: m, at, len } => {
            // The list's slot takes its stack at once (as in `Plan::entry`).
            let v = if len == 0 {
                Value::EmptyList
            } else {
                state.stack(&e.arena[at as usize..(at + len) as usize], heap)?
            };
            memo(heap, m, v)?;
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
            self.last_stack = None;
            self.overwrites_seen = heap.memo_overwrites();
        }
        if let Some(id) = self.known_stack(body) {
            return Some(Value::Stack(id));
        }
        let id = self.stack_of(body, heap)?;
        self.remember_last(body, id);
        Some(Value::Stack(id))
    }

    /// The stack of a body met before: the last list's, or one in the cache (which becomes
    /// the last).
    #[inline(always)]
    fn known_stack(&mut self, body: &[u8]) -> Option<StackId> {
        if let Some(id) = self.last_stack
            && body == self.last_body.as_slice()
        {
            return Some(id);
        }
        let id = *self.stacks.get(body)?;
        self.remember_last(body, id);
        Some(id)
    }

    fn remember_last(&mut self, body: &[u8], id: StackId) {
        self.last_body.clear();
        self.last_body.extend_from_slice(body);
        self.last_stack = Some(id);
    }

    /// At a frames list of the usual form whose body is the last list's or one in the cache:
    /// its memo op and value, the cursor past it; `None` (the cursor where it was) otherwise.
    ///
    /// The body's end is taken to be the first `APPENDS` byte (`e`) after the list's `MARK`,
    /// found many bytes at a time (`memchr`), instead of reading the `BINGET`s one by one (a
    /// quarter of a run's time on PyTorch's shape; 8–15 % of the parse, bench/README.md, issue
    /// 41). That byte can be part of an index (`BINGET 101` is `h e`) and not the list's end;
    /// but a body in the cache is whole `BINGET`s, read op by op when it was put there, so when
    /// the bytes before the first `e` are such a body, that `e` is an op, and the list's
    /// `APPENDS`. Any other bytes are left to [`Cursor::frames_in_place`].
    #[inline(always)]
    fn known_list(&mut self, c: &mut Cursor, heap: &Heap) -> Option<(MemoOp, Value)> {
        if heap.memo_overwrites() != self.overwrites_seen {
            return None;
        }
        let save = c.pos;
        let found = self.known_list_at(c);
        if found.is_none() {
            c.pos = save;
        }
        found
    }

    #[inline(always)]
    fn known_list_at(&mut self, c: &mut Cursor) -> Option<(MemoOp, Value)> {
        let memo = c.list_mark()?;
        let start = c.pos;
        // The last list's body again (more than half of the lists): whole `BINGET`s, so the
        // `e` after them is the `APPENDS`, whatever bytes the body holds.
        if let Some(id) = self.last_stack
            && !self.last_body.is_empty()
            && let Some(rest) = c.buf.get(start..)
            && rest.starts_with(&self.last_body)
            && rest.get(self.last_body.len()) == Some(&b'e')
        {
            c.pos = start + self.last_body.len() + 1;
            return c.list_finished().then_some((memo, Value::Stack(id)));
        }
        let rest = c
            .buf
            .get(start..(start + MAX_KNOWN_BODY).min(c.buf.len()))?;
        let end = memchr::memchr(b'e', rest)?;
        let body = &rest[..end];
        let v = if body.is_empty() {
            Value::EmptyList
        } else {
            Value::Stack(self.known_stack(body)?)
        };
        c.pos = start + end + 1;
        c.list_finished().then_some((memo, v))
    }

    /// [`State::stack`] past the bodies met before: resolved and cached.
    fn stack_of(&mut self, body: &[u8], heap: &mut Heap) -> Option<StackId> {
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
        Some(id)
    }
}

/// Entries decoded ahead from the parser's own window: few, since [`apply_run`] takes over after
/// one entry (512 ahead, as before runs, decoded 511 entries for nothing each time a run ended
/// at an entry of another shape: +40 % on a file with one every 20 entries, bench/README.md).
const INLINE_ENTRIES: usize = 4;

/// Decoded entries by stream offset, for the parser: decoded ahead in batches from its own
/// window where [`apply_run`] has no run to read (the first entry of a trace, entries that
/// change their keys).
#[derive(Default)]
pub(crate) struct Tape {
    inline: Entries,
    inline_next: usize,
}

impl Tape {
    /// The decoded entry that starts at `offset`, where the parser met an `EMPTY_DICT`;
    /// `window` is the parser's view of the bytes from there. `None`: the bytes there are not a
    /// fast-path entry. The parser never goes back, so entries before `offset` are dropped.
    pub fn at(&mut self, offset: u64, window: &[u8], max_str: u64) -> Option<(&Entries, usize)> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::values::Limits;

    /// A new short string and its `MEMOIZE`, as CPython's protocol-4 pickler writes one.
    pub(super) fn memoized_str(b: &mut Vec<u8>, text: &str) {
        b.extend([0x8c, text.len() as u8]);
        b.extend(text.as_bytes());
        b.push(0x94);
    }

    /// One entry as CPython's protocol-4 pickler writes it, with a `FRAME` marker between two
    /// fields where a 64 KiB frame boundary can fall.
    fn entry_bytes(frame_inside: bool) -> Vec<u8> {
        let mut b = vec![b'}', 0x94, b'('];
        let s = memoized_str;
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

    /// An entry naming the memoized keys of [`entry_bytes`] (memo slots 1, 3, 4: `action`,
    /// `addr`, `size`; slot 2 is `alloc`), with its size and an optional extra field.
    fn entry_of_refs(size: u8, extra: Option<&[u8]>) -> Vec<u8> {
        let mut b = vec![
            b'}', 0x94, b'(', b'h', 1, b'h', 2, b'h', 3, b'J', 0, 0, 0, 2,
        ];
        b.extend([b'h', 4, b'K', size]);
        if let Some(field) = extra {
            b.extend(field);
        }
        b.push(b'u');
        b
    }

    /// A heap and state after two entries read through the tape: the first interns its keys,
    /// the second, all references (rows 0 and 1, [`entry_of_refs`]), gives a run its keys.
    fn ready_for_a_run() -> (Heap, State) {
        let mut heap = Heap::new(Limits::default());
        let mut state = State::default();
        let first = entry_bytes(false);
        assert!(try_entry(&first, &mut heap, &mut state).is_some());
        let mut second = entry_of_refs(1, None);
        second.push(b'.');
        assert!(try_entry(&second, &mut heap, &mut state).is_some());
        (heap, state)
    }

    #[test]
    fn a_run_reads_each_memo_reference_for_its_own_slot() {
        use crate::model::Action;
        let (mut heap, mut state) = ready_for_a_run();
        // Slot 2 is `alloc`; the slots after it, up to and past one that shares its low bits
        // with slot 2 in the run's remembered references, another action each.
        let names = ["free_requested", "free_completed", "segment_alloc"];
        let mut slot_of = std::collections::HashMap::new();
        while heap.memo_mark().unwrap() <= 2 + 2 * REF_CACHE {
            let name = names[heap.memo_mark().unwrap() % names.len()];
            let id = heap.intern(name).unwrap();
            slot_of.insert(heap.memo_push(Value::Str(id)).unwrap(), name);
        }
        let far = 2 + REF_CACHE;
        let (far_name, farther_name) = (slot_of[&far], slot_of[&(far + REF_CACHE)]);
        assert_ne!(far_name, farther_name);
        let entry = |action: usize| {
            let mut b = entry_of_refs(9, None);
            b.splice(5..7, [b'h', action as u8]);
            b
        };
        let order = [2, far, 2, far, far + REF_CACHE, far, 2];
        let mut window: Vec<u8> = order.iter().flat_map(|&a| entry(a)).collect();
        window.push(b'e');
        let mut stack = Vec::new();
        apply_run(&window, 1 << 20, &mut heap, &mut state, &mut stack, 100);
        assert_eq!(stack.len(), order.len(), "every entry read in the run");
        let action = |name: &str| match name {
            "free_requested" => Action::FreeRequested,
            "free_completed" => Action::FreeCompleted,
            _ => Action::SegmentAlloc,
        };
        let (a, f, ff) = (Action::Alloc, action(far_name), action(farther_name));
        assert_eq!(heap.trace.action[2..], [a, f, a, f, ff, f, a]);
    }

    /// A run reads each form of frames list PyTorch's pickler writes: empty (`]` and its memo
    /// op, then the next key or the dict's end), one frame (`BINGET frame APPEND`, which starts
    /// like an empty list followed by a key) and several (`MARK … APPENDS`).
    #[test]
    fn a_run_reads_empty_single_and_longer_frames_lists() {
        let mut heap = Heap::new(Limits::default());
        let mut state = State::default();
        // Keys `action`, `frames`, `addr`, `size` (slots 1, 3, 5, 6; `alloc` is 2, the first
        // frames list 4), then a frame in slot 7.
        let mut first = vec![b'}', 0x94, b'('];
        for (key, value) in [
            ("action", &b"\x8c\x05alloc\x94"[..]),
            ("frames", b"]\x94"),
            ("addr", b"J\x00\x00\x00\x01"),
            ("size", b"K@"),
        ] {
            memoized_str(&mut first, key);
            first.extend(value);
        }
        first.extend(b"u.");
        assert!(try_entry(&first, &mut heap, &mut state).is_some());
        assert_eq!(heap.memo_push(Value::Frame(FrameId(0))), Some(7));
        let entry = |frames: &[u8], size: u8| {
            let mut b = vec![b'}', 0x94, b'(', b'h', 1, b'h', 2, b'h', 3];
            b.extend(frames);
            b.extend([b'h', 5, b'J', 0, 0, 0, 2, b'h', 6, b'K', size, b'u']);
            b
        };
        let mut second = entry(b"]\x94", 1);
        second.push(b'.');
        assert!(try_entry(&second, &mut heap, &mut state).is_some());
        let lists: [&[u8]; 4] = [b"]\x94", b"]\x94h\x07a", b"]\x94(h\x07h\x07e", b"]\x94"];
        let mut window: Vec<u8> = (0..4).flat_map(|k| entry(lists[k], k as u8)).collect();
        window.push(b'e');
        let mut stack = Vec::new();
        let used = apply_run(&window, 1 << 20, &mut heap, &mut state, &mut stack, 100);
        assert_eq!(
            (used, stack.len()),
            (window.len() - 1, 4),
            "every entry in the run"
        );
        let stacks: Vec<StackId> = heap.trace.stack.iter().skip(2).collect();
        assert_eq!(stacks[0], StackId::EMPTY);
        assert_eq!(heap.stacks.get(stacks[1]), [FrameId(0)]);
        assert_eq!(heap.stacks.get(stacks[2]), [FrameId(0), FrameId(0)]);
        assert_eq!(stacks[3], StackId::EMPTY);
        // Each entry took two slots, its dict's and its list's, holding its stack.
        assert_eq!(heap.memo_mark(), Some(10 + 2 * 4));
        assert_eq!(heap.memo_peek(13), Some(Value::Stack(stacks[1])));
    }

    #[test]
    fn a_run_reads_entries_of_one_shape_and_stops_at_the_first_of_another() {
        let (mut heap, mut state) = ready_for_a_run();
        let memo_before = heap.memo_mark().unwrap();

        // Three entries of the run's shape (a FRAME marker between two), then one with an extra
        // field (the string `alloc` as a key, which the run does not name there).
        let mut window = entry_of_refs(2, None);
        window.push(FRAME);
        window.extend(9u64.to_le_bytes());
        window.extend(entry_of_refs(3, None));
        window.extend(entry_of_refs(4, None));
        let run_bytes = window.len();
        window.extend(entry_of_refs(5, Some(&[b'h', 2, b'h', 1])));
        window.push(b'e');
        let mut stack = Vec::new();
        let used = apply_run(&window, 1 << 20, &mut heap, &mut state, &mut stack, 100);
        assert_eq!(
            used, run_bytes,
            "the run ends where the entry of another shape starts"
        );
        assert_eq!(stack, [Value::Entry(2), Value::Entry(3), Value::Entry(4)]);
        assert_eq!(heap.trace.size, [64, 1, 2, 3, 4]);
        assert_eq!(
            heap.memo_mark().unwrap(),
            memo_before + 3,
            "one slot per entry dict"
        );
        assert_eq!(heap.memo_peek(memo_before), Some(Value::Entry(2)));

        // `room` bounds the run; a refused first entry reads nothing.
        let mut stack = Vec::new();
        let more = entry_of_refs(6, None).repeat(3);
        assert_eq!(
            apply_run(&more, 1 << 20, &mut heap, &mut state, &mut stack, 2),
            2 * more.len() / 3
        );
        let odd = entry_of_refs(7, Some(&[b'h', 2, b'h', 1]));
        assert_eq!(
            apply_run(&odd, 1 << 20, &mut heap, &mut state, &mut stack, 9),
            0
        );
        assert_eq!(heap.trace.size.len(), 7);

        // Read through the tape, the odd entry's keys become a run's; the usual ones are kept
        // beside them, so runs of either shape follow without the tape.
        let mut odd_alone = odd.clone();
        odd_alone.push(b'.');
        assert!(try_entry(&odd_alone, &mut heap, &mut state).is_some());
        // (A window that ends right after an entry cannot show it is finished: an `APPENDS`.)
        let (usual, odd_then) = (entry_of_refs(8, None), [&odd[..], b"e"].concat());
        let usual_then = [&usual[..], b"e"].concat();
        assert_eq!(
            apply_run(&usual_then, 1 << 20, &mut heap, &mut state, &mut stack, 9),
            usual.len()
        );
        assert_eq!(
            apply_run(&odd_then, 1 << 20, &mut heap, &mut state, &mut stack, 9),
            odd.len()
        );
        assert_eq!(heap.trace.size, [64, 1, 2, 3, 4, 6, 6, 7, 8, 7]);

        // An entry naming one key twice (no dict CPython writes) never makes a run's keys: the
        // tape reads it each time, as the general machine would.
        let twice = entry_of_refs(9, Some(&[b'h', 1, b'h', 2]));
        let mut twice_alone = twice.clone();
        twice_alone.push(b'.');
        assert!(try_entry(&twice_alone, &mut heap, &mut state).is_some());
        let twice_then = [&twice[..], b"e"].concat();
        assert_eq!(
            apply_run(&twice_then, 1 << 20, &mut heap, &mut state, &mut stack, 9),
            0
        );
    }
}
