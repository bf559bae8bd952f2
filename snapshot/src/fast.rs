//! A fast path for the one shape that makes up nearly all of a big snapshot: a trace-entry dict.
//!
//! `pickle::run` calls [`try_entry`] at every `EMPTY_DICT`. It decodes the dict straight from the
//! input buffer when it has exactly the shape CPython's pickler writes for a trace entry (first key
//! `action`; scalar values, strings, and a `frames` list of already-memoized frames), interning the
//! stack and appending the trace row without building any container. On anything else it returns
//! `None` having changed nothing that matters (the memo is truncated back; strings, frames and
//! stacks it interned are harmless), and the general machine reads the same bytes. The result is
//! identical either way; `tests/formats.rs` and the golden tests compare both paths.
//!
//! Measured on the 1M-entry benchmark: see bench/README.md.

use crate::intern::StrId;
use crate::model::{FrameId, StackId};
use crate::values::{EntryFields, Heap, Value, key};
use rustc_hash::FxHashMap;

/// Reads one entry dict from `buf` (which starts at its `EMPTY_DICT`). Returns the bytes used and
/// the value to push, or `None` to let the general machine read it.
pub(crate) fn try_entry(buf: &[u8], heap: &mut Heap, state: &mut State) -> Option<(usize, Value)> {
    let mark = heap.memo_mark()?;
    let mut c = Cursor { buf, pos: 1 };
    match entry(&mut c, heap, state) {
        Some(v) => Some((c.pos, v)),
        None => {
            heap.memo_truncate(mark);
            None
        }
    }
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

    /// An optional memo op after a new object: MEMOIZE, or BINPUT/LONG_BINPUT of the next index.
    #[inline]
    fn memo_op(&mut self, heap: &mut Heap, v: Value) -> Option<Option<usize>> {
        let next = heap.memo_mark()? as u64;
        let key = match self.peek_op() {
            Some(0x94) => {
                self.pos += 1;
                next
            }
            Some(b'q') => {
                self.pos += 1;
                self.byte()? as u64
            }
            Some(b'r') => {
                self.pos += 1;
                self.u32()? as u64
            }
            _ => return Some(None),
        };
        if key != next {
            return None;
        }
        Some(Some(heap.memo_push(v)?))
    }

    #[inline]
    fn memo_get(&mut self, heap: &Heap, op: u8) -> Option<Value> {
        let key = if op == b'h' {
            self.byte()? as usize
        } else {
            self.u32()? as usize
        };
        match heap.memo_peek(key)? {
            Value::Obj(_) => None,
            v => Some(v),
        }
    }

    fn string(&mut self, heap: &mut Heap, n: usize) -> Option<Value> {
        if n as u64 > heap.limits.max_string_bytes {
            return None;
        }
        let raw = self.take(n)?;
        let s = std::str::from_utf8(raw).ok()?;
        let v = Value::Str(heap.intern(s).ok()?);
        self.memo_op(heap, v)?;
        Some(v)
    }

    fn key(&mut self, heap: &mut Heap) -> Option<StrId> {
        let v = match self.op()? {
            op @ (b'h' | b'j') => self.memo_get(heap, op)?,
            0x8c => {
                let n = self.byte()? as usize;
                self.string(heap, n)?
            }
            _ => return None,
        };
        match v {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    fn value(&mut self, heap: &mut Heap, state: &mut State) -> Option<Value> {
        Some(match self.op()? {
            b'K' => Value::Int(self.byte()? as i64),
            b'M' => Value::Int(u16::from_le_bytes(self.take(2)?.try_into().ok()?) as i64),
            b'J' => Value::Int(i32::from_le_bytes(self.take(4)?.try_into().ok()?) as i64),
            0x8a => {
                let n = self.byte()? as usize;
                if n > 8 {
                    return None;
                }
                let bytes = self.take(n)?;
                let mut buf = [if bytes.last().is_some_and(|b| b & 0x80 != 0) {
                    0xff
                } else {
                    0
                }; 8];
                buf[..n].copy_from_slice(bytes);
                Value::Int(i64::from_le_bytes(buf))
            }
            b'G' => Value::Float(f64::from_be_bytes(self.take(8)?.try_into().ok()?)),
            b'N' => Value::None,
            0x88 => Value::Bool(true),
            0x89 => Value::Bool(false),
            0x8c => {
                let n = self.byte()? as usize;
                self.string(heap, n)?
            }
            b'X' => {
                let n = self.u32()? as usize;
                self.string(heap, n)?
            }
            op @ (b'h' | b'j') => self.memo_get(heap, op)?,
            b']' => self.frames_list(heap, state)?,
            _ => return None,
        })
    }

    /// `]` [memo] then nothing (empty), `MARK (BINGET frame)* APPENDS`, or `BINGET frame APPEND`.
    fn frames_list(&mut self, heap: &mut Heap, state: &mut State) -> Option<Value> {
        let slot = self.memo_op(heap, Value::EmptyList)?;
        let v = match self.cached_stack(heap, state) {
            Some(id) => Value::Stack(id),
            None => self.decode_frames(heap, state)?,
        };
        // The list must be finished: no further APPEND(S) into it.
        if matches!(self.peek_op(), Some(b'(' | b'a' | b'e')) {
            return None;
        }
        if let Some(slot) = slot {
            heap.memo_set(slot, v)?;
        }
        Some(v)
    }

    /// A `MARK (BINGET)* APPENDS` list whose body was seen before: its stack, with the cursor
    /// past `APPENDS`. Otherwise `None`, the cursor unmoved.
    fn cached_stack(&mut self, heap: &Heap, state: &mut State) -> Option<StackId> {
        if heap.memo_overwrites() != state.overwrites_seen {
            state.stacks.clear();
            state.stack_key_bytes = 0;
            state.overwrites_seen = heap.memo_overwrites();
        }
        if self.buf.get(self.pos) != Some(&b'(') {
            return None;
        }
        let end = body_end(self.buf, self.pos + 1)?;
        let &id = state.stacks.get(&self.buf[self.pos + 1..end])?;
        self.pos = end + 1;
        Some(id)
    }

    /// The frames of a list after its memo op, interned; a `MARK … APPENDS` body of plain
    /// `BINGET`s is remembered for [`Cursor::cached_stack`].
    fn decode_frames(&mut self, heap: &mut Heap, state: &mut State) -> Option<Value> {
        let frames = &mut state.frames;
        frames.clear();
        let frame = |c: &mut Self, op: u8, frames: &mut Vec<FrameId>| -> Option<()> {
            match c.memo_get(heap, op)? {
                Value::Frame(f) => {
                    frames.push(f);
                    Some(())
                }
                _ => None,
            }
        };
        let mut body = None;
        match self.peek_op() {
            Some(b'(') => {
                self.pos += 1;
                let start = self.pos;
                body = body_end(self.buf, start).map(|end| start..end);
                loop {
                    match self.op()? {
                        op @ (b'h' | b'j') => frame(self, op, frames)?,
                        b'e' => break,
                        _ => return None,
                    }
                }
            }
            Some(op @ (b'h' | b'j')) => {
                // One frame and APPEND, or (an empty list) the next key of the dict.
                let save = self.pos;
                self.pos += 1;
                match (self.memo_get(heap, op), self.peek_op()) {
                    (Some(Value::Frame(f)), Some(b'a')) => {
                        self.pos += 1;
                        frames.push(f);
                    }
                    _ => self.pos = save,
                }
            }
            _ => {}
        }
        if frames.is_empty() {
            return Some(Value::EmptyList);
        }
        let id = heap.intern_stack(frames);
        if let Some(body) = body {
            state.remember(&self.buf[body], id);
        }
        Some(Value::Stack(id))
    }
}

/// Where the `APPENDS` of a list body starting at `start` is, if the body is only `BINGET` and
/// `LONG_BINGET` ops.
#[inline]
fn body_end(buf: &[u8], start: usize) -> Option<usize> {
    let mut p = start;
    loop {
        match *buf.get(p)? {
            b'h' => p += 2,
            b'j' => p += 5,
            b'e' => return Some(p),
            _ => return None,
        }
    }
}

impl State {
    fn remember(&mut self, body: &[u8], id: StackId) {
        if self.stack_key_bytes + body.len() <= STACK_CACHE_MAX_BYTES {
            self.stack_key_bytes += body.len();
            self.stacks.insert(body.into(), id);
        }
    }
}

fn entry(c: &mut Cursor, heap: &mut Heap, state: &mut State) -> Option<Value> {
    let slot = c.memo_op(heap, Value::None)?;
    if c.op()? != b'(' {
        return None;
    }
    let mut fields = EntryFields::default();
    let mut first = true;
    loop {
        if c.peek_op()? == b'u' {
            c.pos += 1;
            break;
        }
        let k = c.key(heap)?;
        if first && k.0 != key::ACTION {
            return None;
        }
        first = false;
        let v = c.value(heap, state)?;
        // A field the machine would refuse: it refuses it, naming the offset.
        heap.set_field(&mut fields, k.0, v).ok()?;
    }
    // The dict must be finished: a MARK or SETITEM here would add to it.
    if first || matches!(c.peek_op(), None | Some(b'(' | b's' | b'u')) {
        return None;
    }
    let v = Value::Entry(heap.push_entry(&fields));
    if let Some(slot) = slot {
        heap.memo_set(slot, v)?;
    }
    Some(v)
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
