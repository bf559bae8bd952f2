//! A pickle reader that executes nothing: opcodes become plain values, never Python calls.
//!
//! Snapshots are plain data (dicts, lists, strings, numbers), so every opcode that would import or
//! call something (`GLOBAL`, `STACK_GLOBAL`, `REDUCE`, `BUILD`, `INST`, `OBJ`, `NEWOBJ`, …) is an
//! error naming the opcode and its byte offset. The machine is iterative (nesting depth costs no
//! native stack), reads from any `Read` through its own buffer (a multi-GB file is never held in
//! memory), and hands finished containers to [`Heap::consume`], which lowers them into tables.

use std::io::Read;

use crate::error::{Error, Result};
use crate::values::{Heap, HeapErr, Kind, Value};

const BUF_BYTES: usize = 256 << 10;
/// Bytes the entry fast path wants in view (entries are well under this).
const FAST_WINDOW: usize = 64 << 10;
/// Room kept free at the front of each buffer a [`Chunks`] source hands over: the bytes not yet
/// read from the last buffer (at most a window, or a `bytes` read of up to half a buffer) are
/// copied there, so the new buffer is read where it lies instead of copied whole.
pub(crate) const CHUNK_HEAD_BYTES: usize = BUF_BYTES / 2 + 1;

/// A source that hands over whole buffers (the reader thread's, `readahead.rs`): copying each
/// into the parser's own buffer was 3–5 % of the parser's thread on a 1 GB file (bench/README.md,
/// issue 41).
pub(crate) trait Chunks: Send {
    /// The next buffer, its bytes from [`CHUNK_HEAD_BYTES`] on (the first ones are free room);
    /// `None` at the end.
    fn next_chunk(&mut self) -> std::io::Result<Option<Vec<u8>>>;
    /// A buffer the parser is done with, to be filled again.
    fn recycle(&mut self, buf: Vec<u8>);
}

/// Buffered input that knows its byte offset.
pub(crate) struct Input<R> {
    inner: R,
    /// Where the bytes come from instead of `inner`, a buffer at a time.
    chunks: Option<Box<dyn Chunks>>,
    buf: Vec<u8>,
    pos: usize,
    end: usize,
    /// Offset of `buf[0]` in the stream (modulo 2^64: with `chunks`, the first buffer's free
    /// room lies before the stream's start).
    base: u64,
    scratch: Vec<u8>,
    /// The source said it has no more: it is not asked again. The fast path wants a window in
    /// view before each entry, so near the end it asks for more at every entry of the last
    /// 64 KiB (1,561 times on a 164 MB upload, bench/README.md, issue 41).
    ended: bool,
}

#[cfg(any(test, not(target_arch = "wasm32")))]
impl Input<std::io::Empty> {
    /// Input from a source of whole buffers.
    pub fn chunked(chunks: impl Chunks + 'static) -> Self {
        Input {
            inner: std::io::empty(),
            chunks: Some(Box::new(chunks)),
            buf: Vec::new(),
            pos: 0,
            end: 0,
            base: 0,
            scratch: Vec::new(),
            ended: false,
        }
    }
}

impl<R: Read> Input<R> {
    pub fn new(inner: R) -> Self {
        Input {
            inner,
            chunks: None,
            buf: vec![0; BUF_BYTES],
            pos: 0,
            end: 0,
            base: 0,
            scratch: Vec::new(),
            ended: false,
        }
    }

    #[inline]
    pub fn offset(&self) -> u64 {
        self.base.wrapping_add(self.pos as u64)
    }

    fn io_error(&self, source: std::io::Error) -> Error {
        Error::Io {
            offset: self.base.wrapping_add(self.end as u64),
            source,
        }
    }

    /// Moves unread bytes to the front and reads more; returns false at end of stream.
    fn fill(&mut self) -> Result<bool> {
        if self.ended {
            return Ok(false);
        }
        if self.chunks.is_some() {
            return self.next_chunk(self.pos);
        }
        if self.pos > 0 {
            self.buf.copy_within(self.pos..self.end, 0);
            self.base += self.pos as u64;
            self.end -= self.pos;
            self.pos = 0;
        }
        loop {
            match self.inner.read(&mut self.buf[self.end..]) {
                Ok(0) => {
                    self.ended = true;
                    return Ok(false);
                }
                Ok(n) => {
                    self.end += n;
                    return Ok(true);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(self.io_error(e)),
            }
        }
    }

    /// With `chunks`: the next buffer becomes the input, the bytes from `keep` on copied in front
    /// of it (into its free room, or, longer than that, with it into a buffer of their own).
    /// False at the end of the stream, the input unchanged.
    #[cold]
    fn next_chunk(&mut self, keep: usize) -> Result<bool> {
        let Some(chunks) = self.chunks.as_mut().filter(|_| !self.ended) else {
            return Ok(false);
        };
        let next = match chunks.next_chunk() {
            Ok(Some(next)) => next,
            Ok(None) => {
                self.ended = true;
                return Ok(false);
            }
            Err(e) => return Err(self.io_error(e)),
        };
        let left = self.end - keep;
        let start = CHUNK_HEAD_BYTES.saturating_sub(left);
        let old = if left <= CHUNK_HEAD_BYTES {
            let old = std::mem::replace(&mut self.buf, next);
            self.buf[start..CHUNK_HEAD_BYTES].copy_from_slice(&old[keep..self.end]);
            old
        } else {
            let mut joined = Vec::with_capacity(left + next.len() - CHUNK_HEAD_BYTES);
            joined.extend_from_slice(&self.buf[keep..self.end]);
            joined.extend_from_slice(&next[CHUNK_HEAD_BYTES..]);
            chunks.recycle(next);
            std::mem::replace(&mut self.buf, joined)
        };
        if old.capacity() > 0 {
            chunks.recycle(old);
        }
        // `buf[start]` is the byte that was `buf[keep]`.
        self.base = self
            .base
            .wrapping_add(keep as u64)
            .wrapping_sub(start as u64);
        self.pos = self.pos - keep + start;
        self.end = self.buf.len();
        Ok(true)
    }

    #[inline]
    pub fn byte(&mut self, context: &'static str) -> Result<u8> {
        if self.pos < self.end {
            let b = self.buf[self.pos];
            self.pos += 1;
            return Ok(b);
        }
        self.byte_slow(context)
    }

    #[cold]
    fn byte_slow(&mut self, context: &'static str) -> Result<u8> {
        if !self.fill()? {
            return Err(Error::Truncated {
                offset: self.offset(),
                context,
            });
        }
        self.byte(context)
    }

    /// The buffer from the byte before the read position (the opcode just read) to its end,
    /// refilled first so that at least `min` bytes are in view unless the stream ends.
    pub fn window_from_previous(&mut self, min: usize) -> Result<&[u8]> {
        if self.end - self.pos < min && self.pos > 0 && !self.ended {
            if self.chunks.is_some() {
                while self.end - self.pos < min && self.next_chunk(self.pos - 1)? {}
                return Ok(&self.buf[self.pos - 1..self.end]);
            }
            let keep = self.pos - 1;
            self.buf.copy_within(keep..self.end, 0);
            self.base += keep as u64;
            self.end -= keep;
            self.pos = 1;
            while self.end - self.pos < min {
                match self.inner.read(&mut self.buf[self.end..]) {
                    Ok(0) => {
                        self.ended = true;
                        break;
                    }
                    Ok(n) => self.end += n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(self.io_error(e)),
                }
            }
        }
        Ok(&self.buf[self.pos - 1..self.end])
    }

    /// Steps over `n` bytes, reading on where they go past the buffer.
    pub fn advance(&mut self, mut n: usize) -> Result<()> {
        loop {
            let here = self.end - self.pos;
            if n <= here {
                self.pos += n;
                return Ok(());
            }
            n -= here;
            self.pos = self.end;
            if !self.fill()? {
                return Err(Error::Truncated {
                    offset: self.offset(),
                    context: "a trace entry",
                });
            }
        }
    }

    /// Tries to read up to `n` bytes of lookahead into the buffer; true if at least `n` are there.
    pub fn peek_available(&mut self, n: usize) -> Result<bool> {
        while self.end - self.pos < n {
            if !self.fill()? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    #[inline]
    pub fn array<const N: usize>(&mut self, context: &'static str) -> Result<[u8; N]> {
        if self.end - self.pos >= N {
            let mut a = [0; N];
            a.copy_from_slice(&self.buf[self.pos..self.pos + N]);
            self.pos += N;
            return Ok(a);
        }
        let mut a = [0; N];
        a.copy_from_slice(self.bytes(N as u64, context)?);
        Ok(a)
    }

    /// The next `n` bytes. Long ones are read into a scratch buffer that grows with the data
    /// actually present, so a huge declared length in a short file costs nothing.
    pub fn bytes(&mut self, n: u64, context: &'static str) -> Result<&[u8]> {
        if n <= (self.end - self.pos) as u64 {
            let s = &self.buf[self.pos..self.pos + n as usize];
            self.pos += n as usize;
            return Ok(s);
        }
        if n <= (BUF_BYTES / 2) as u64 {
            if !self.peek_available(n as usize)? {
                self.pos = self.end;
                return Err(Error::Truncated {
                    offset: self.offset(),
                    context,
                });
            }
            let s = &self.buf[self.pos..self.pos + n as usize];
            self.pos += n as usize;
            return Ok(s);
        }
        self.scratch.clear();
        let mut left = n;
        while left > 0 {
            if self.pos == self.end && !self.fill()? {
                return Err(Error::Truncated {
                    offset: self.offset(),
                    context,
                });
            }
            let take = left.min((self.end - self.pos) as u64) as usize;
            self.scratch
                .extend_from_slice(&self.buf[self.pos..self.pos + take]);
            self.pos += take;
            left -= take as u64;
        }
        Ok(&self.scratch)
    }

    /// A protocol-0 text argument, up to the newline (at most 64 KiB).
    fn line(&mut self, context: &'static str) -> Result<&[u8]> {
        let mut n = 0;
        loop {
            if self.pos + n == self.end {
                if self.end - self.pos >= 64 << 10 {
                    return Err(Error::LimitExceeded {
                        offset: self.offset(),
                        what: "a text opcode argument",
                        limit: 64 << 10,
                    });
                }
                if !self.fill()? {
                    self.pos = self.end;
                    return Err(Error::Truncated {
                        offset: self.offset(),
                        context,
                    });
                }
            }
            if self.buf[self.pos + n] == b'\n' {
                let s = &self.buf[self.pos..self.pos + n];
                self.pos += n + 1;
                return Ok(s);
            }
            n += 1;
        }
    }
}

/// What the machine saw, for the overview.
#[derive(Debug, Default)]
pub(crate) struct PickleInfo {
    pub protocol: u8,
    pub bytes: u64,
}

fn forbidden(op: u8) -> Option<(&'static str, &'static str)> {
    const CODE: &str = "(it would import or call Python code; memory snapshots never contain it)";
    Some(match op {
        b'c' => ("GLOBAL", CODE),
        0x93 => ("STACK_GLOBAL", CODE),
        b'R' => ("REDUCE", CODE),
        b'b' => ("BUILD", CODE),
        b'i' => ("INST", CODE),
        b'o' => ("OBJ", CODE),
        0x81 => ("NEWOBJ", CODE),
        0x92 => ("NEWOBJ_EX", CODE),
        b'P' => (
            "PERSID",
            "(persistent ids need the writer's own loader; memory snapshots never contain them)",
        ),
        b'Q' => (
            "BINPERSID",
            "(persistent ids need the writer's own loader; memory snapshots never contain them)",
        ),
        0x82 => (
            "EXT1",
            "(extension registry objects would be imported; memory snapshots never contain them)",
        ),
        0x83 => (
            "EXT2",
            "(extension registry objects would be imported; memory snapshots never contain them)",
        ),
        0x84 => (
            "EXT4",
            "(extension registry objects would be imported; memory snapshots never contain them)",
        ),
        0x97 => (
            "NEXT_BUFFER",
            "(out-of-band buffers are not part of the file)",
        ),
        0x98 => (
            "READONLY_BUFFER",
            "(out-of-band buffers are not part of the file)",
        ),
        _ => return None,
    })
}

/// Decodes a little-endian two's-complement integer of any length that fits in 128 bits.
fn decode_long(bytes: &[u8]) -> Option<i128> {
    if bytes.is_empty() {
        return Some(0);
    }
    let (low, high) = bytes.split_at(bytes.len().min(16));
    let negative = low[low.len() - 1] & 0x80 != 0;
    let fill = if negative { 0xff } else { 0 };
    if high.iter().any(|&b| b != fill) {
        return None;
    }
    if !high.is_empty() && (high[high.len() - 1] & 0x80 != 0) != negative {
        return None;
    }
    let mut buf = [fill; 16];
    buf[..low.len()].copy_from_slice(low);
    Some(i128::from_le_bytes(buf))
}

/// Input a pickle may use before a dict appears: a memory snapshot is a dict (or a list of
/// segment dicts) from its first bytes; a list of a million strings is not one.
const MAX_BYTES_WITHOUT_STRUCTURE: u64 = 16 << 20;

/// Refuses, early, a pickle that is not becoming a snapshot: its opcodes build nothing, or no
/// dict has appeared in its first [`MAX_BYTES_WITHOUT_STRUCTURE`].
fn refuse_what_is_no_snapshot(heap: &Heap, opcodes: u64, off: u64) -> Result<()> {
    if opcodes > OPCODES_PER_VALUE * (heap.built() + (1 << 16)) {
        return Err(Error::NotASnapshot(format!(
            "{opcodes} pickle opcodes by offset {off} have built {} values: a memory snapshot's \
             opcodes build its values, and these build nothing",
            heap.built()
        )));
    }
    if off > MAX_BYTES_WITHOUT_STRUCTURE && !heap.has_structure() {
        return Err(Error::NotASnapshot(format!(
            "no dict in the first {} MiB (by offset {off}): a memory snapshot is a dict, or a list of \
             segment dicts, from its first bytes",
            MAX_BYTES_WITHOUT_STRUCTURE >> 20
        )));
    }
    Ok(())
}

/// Most opcodes a pickle may run per value they build (past the first 65,536): a snapshot's
/// opcodes each build or place a value (a few per value at most); a stream of `NONE`, `POP`
/// builds nothing, however long, and would hold a parse slot for as long as it is sent.
const OPCODES_PER_VALUE: u64 = 64;

/// How often the machine weighs what the parse holds against its input and the shared budget
/// (`Heap::weigh`): every so many opcodes, or bytes for opcodes that read long arguments. An
/// opcode builds at most a few dozen bytes beyond its own length, so a check this often lets
/// a hostile stream overshoot by a few MiB at most.
const WEIGH_EVERY_OPCODES: u64 = 1 << 12;
const WEIGH_EVERY_BYTES: u64 = 1 << 20;

/// Runs the machine over `input` until STOP; returns the top-level value. Trace entries are read
/// by the fast path (`fast.rs`): in runs straight from the machine's buffer, or through `tape`.
pub(crate) fn run<R: Read>(
    input: &mut Input<R>,
    heap: &mut Heap,
    tape: &mut crate::fast::Tape,
) -> Result<(Value, PickleInfo)> {
    let mut stack: Vec<Value> = Vec::with_capacity(1024);
    let mut marks: Vec<usize> = Vec::with_capacity(64);
    let mut info = PickleInfo::default();
    let max_stack = heap.limits.max_stack;
    let max_str = heap.limits.max_string_bytes;
    let (mut last_str, mut last_id) = (Vec::<u8>::new(), crate::intern::StrId::EMPTY);
    let fast = heap.fast_path;
    let mut fast_state = crate::fast::State::default();

    macro_rules! bad {
        ($off:expr, $($t:tt)*) => { return Err(Error::malformed($off, format!($($t)*))) };
    }
    macro_rules! heap_err {
        ($off:expr, $e:expr) => {
            match $e {
                Ok(v) => v,
                Err(e) => return Err(HeapErr::at(e, $off)),
            }
        };
    }
    macro_rules! pop {
        ($off:expr, $what:expr) => {
            match stack.pop() {
                Some(v) if marks.last().is_none_or(|&m| stack.len() >= m) => v,
                _ => bad!($off, "{} with an empty stack", $what),
            }
        };
    }
    macro_rules! push {
        ($off:expr, $v:expr) => {{
            if stack.len() >= max_stack {
                return Err(Error::LimitExceeded {
                    offset: $off,
                    what: "the pickle stack",
                    limit: max_stack as u64,
                });
            }
            stack.push($v);
        }};
    }
    macro_rules! top {
        ($off:expr, $what:expr) => {
            match stack.last() {
                Some(v) if marks.last().is_none_or(|&m| stack.len() > m) => *v,
                _ => bad!($off, "{} with an empty stack", $what),
            }
        };
    }
    macro_rules! pop_mark {
        ($off:expr, $what:expr) => {
            match marks.pop() {
                Some(m) => m,
                None => bad!($off, "{} without a MARK", $what),
            }
        };
    }
    macro_rules! string {
        ($off:expr, $len:expr, $ctx:expr) => {{
            let len: u64 = $len;
            if len > max_str {
                return Err(Error::LimitExceeded {
                    offset: $off,
                    what: "a string's declared length",
                    limit: max_str,
                });
            }
            let raw = input.bytes(len, $ctx)?;
            if raw == last_str.as_slice() {
                // PyTorch writes some equal strings (e.g. "N/A") as separate objects per entry.
                Value::Str(last_id)
            } else {
                match std::str::from_utf8(raw) {
                    Ok(s) => {
                        last_id = heap_err!($off, heap.intern(s));
                        last_str.clear();
                        last_str.extend_from_slice(raw);
                        Value::Str(last_id)
                    }
                    Err(_) => bad!($off, "string is not valid UTF-8"),
                }
            }
        }};
    }
    macro_rules! skip_bytes {
        ($off:expr, $len:expr, $ctx:expr) => {{
            let len: u64 = $len;
            if len > max_str {
                return Err(Error::LimitExceeded {
                    offset: $off,
                    what: "a bytes object's declared length",
                    limit: max_str,
                });
            }
            input.bytes(len, $ctx)?;
            Value::Bytes
        }};
    }

    let mut opcodes: u64 = 0;
    let mut weigh_at: u64 = WEIGH_EVERY_BYTES;
    loop {
        let off = input.offset();
        let op = input.byte("the pickle (no STOP opcode)")?;
        opcodes += 1;
        if opcodes.is_multiple_of(WEIGH_EVERY_OPCODES) || off >= weigh_at {
            weigh_at = off + WEIGH_EVERY_BYTES;
            heap_err!(off, heap.weigh(off, stack.len()));
            if opcodes.is_multiple_of(1 << 16) {
                refuse_what_is_no_snapshot(heap, opcodes, off)?;
            }
        }
        match op {
            // Containers.
            b'}' => {
                if fast {
                    // A run of entries shaped like the last one, read straight into the trace;
                    // else one entry through the tape (which also starts a run's shape).
                    let room = max_stack.saturating_sub(stack.len());
                    let window = input.window_from_previous(FAST_WINDOW)?;
                    let run = crate::fast::apply_run(
                        window,
                        max_str,
                        heap,
                        &mut fast_state,
                        &mut stack,
                        room,
                    );
                    if run > 0 {
                        input.advance(run - 1)?;
                        continue;
                    }
                    let applied = tape.at(off, window, max_str).and_then(|(entries, i)| {
                        crate::fast::apply(entries, i, heap, &mut fast_state)
                            .map(|v| (entries.len_bytes(i), v))
                    });
                    if let Some((used, v)) = applied {
                        input.advance(used - 1)?;
                        push!(off, v);
                        continue;
                    }
                }
                push!(
                    off,
                    heap_err!(off, heap.new_container(Kind::Dict, Vec::new()))
                )
            }
            b']' => push!(
                off,
                heap_err!(off, heap.new_container(Kind::List, Vec::new()))
            ),
            b')' => push!(
                off,
                heap_err!(off, heap.new_container(Kind::Tuple, Vec::new()))
            ),
            0x8f => push!(
                off,
                heap_err!(off, heap.new_container(Kind::Set, Vec::new()))
            ),
            b'(' => {
                if marks.len() >= max_stack {
                    return Err(Error::LimitExceeded {
                        offset: off,
                        what: "nested MARKs",
                        limit: max_stack as u64,
                    });
                }
                marks.push(stack.len())
            }
            b'a' => {
                let v = pop!(off, "APPEND");
                let list = top!(off, "APPEND");
                heap_err!(off, heap.extend(list, &[v]));
            }
            b'e' | 0x90 => {
                let m = pop_mark!(off, "APPENDS");
                if m == 0 {
                    bad!(off, "APPENDS with no list below its MARK");
                }
                let list = stack[m - 1];
                heap_err!(off, heap.extend(list, &stack[m..]));
                stack.truncate(m);
            }
            b's' => {
                let v = pop!(off, "SETITEM");
                let k = pop!(off, "SETITEM");
                let dict = top!(off, "SETITEM");
                heap_err!(off, heap.set_items(dict, &[k, v]));
            }
            b'u' => {
                let m = pop_mark!(off, "SETITEMS");
                if m == 0 {
                    bad!(off, "SETITEMS with no dict below its MARK");
                }
                let dict = stack[m - 1];
                heap_err!(off, heap.set_items(dict, &stack[m..]));
                stack.truncate(m);
            }
            b'd' | b'l' | b't' | 0x91 => {
                let m = pop_mark!(off, "DICT/LIST/TUPLE");
                let kind = match op {
                    b'd' => Kind::Dict,
                    b'l' => Kind::List,
                    b't' => Kind::Tuple,
                    _ => Kind::Set,
                };
                let items: Vec<Value> = stack.drain(m..).collect();
                let c = heap_err!(off, heap.new_container(kind, Vec::new()));
                if kind == Kind::Dict {
                    heap_err!(off, heap.set_items(c, &items));
                } else {
                    heap_err!(off, heap.extend(c, &items));
                }
                push!(off, c);
            }
            0x85..=0x87 => {
                let n = (op - 0x84) as usize;
                if stack.len() < n || marks.last().is_some_and(|&m| stack.len() - n < m) {
                    bad!(off, "TUPLE{n} with fewer than {n} values on the stack");
                }
                let items: Vec<Value> = stack.drain(stack.len() - n..).collect();
                let c = heap_err!(off, heap.new_container(Kind::Tuple, Vec::new()));
                heap_err!(off, heap.extend(c, &items));
                push!(off, c);
            }
            // Memo.
            0x94 => {
                let v = top!(off, "MEMOIZE");
                let key = heap.memo_len();
                heap_err!(off, heap.memo_put(key, v));
            }
            b'q' => {
                let key = input.byte("BINPUT")? as u64;
                let v = top!(off, "BINPUT");
                heap_err!(off, heap.memo_put(key, v));
            }
            b'r' => {
                let key = u32::from_le_bytes(input.array("LONG_BINPUT")?) as u64;
                let v = top!(off, "LONG_BINPUT");
                heap_err!(off, heap.memo_put(key, v));
            }
            b'h' => {
                let key = input.byte("BINGET")? as u64;
                push!(off, heap_err!(off, heap.memo_get(key)));
            }
            b'j' => {
                let key = u32::from_le_bytes(input.array("LONG_BINGET")?) as u64;
                push!(off, heap_err!(off, heap.memo_get(key)));
            }
            // Scalars.
            b'K' => push!(off, Value::Int(input.byte("BININT1")? as i64)),
            b'M' => push!(
                off,
                Value::Int(u16::from_le_bytes(input.array("BININT2")?) as i64)
            ),
            b'J' => push!(
                off,
                Value::Int(i32::from_le_bytes(input.array("BININT")?) as i64)
            ),
            0x8a | 0x8b => {
                let n = if op == 0x8a {
                    input.byte("LONG1")? as u64
                } else {
                    let n = i32::from_le_bytes(input.array("LONG4")?);
                    if n < 0 {
                        bad!(off, "LONG4 with a negative length");
                    }
                    n as u64
                };
                if n > max_str {
                    return Err(Error::LimitExceeded {
                        offset: off,
                        what: "an integer's declared length",
                        limit: max_str,
                    });
                }
                let bytes = input.bytes(n, "LONG1")?;
                let v = if n <= 8 {
                    let mut buf = [if bytes.last().is_some_and(|b| b & 0x80 != 0) {
                        0xff
                    } else {
                        0
                    }; 8];
                    buf[..bytes.len()].copy_from_slice(bytes);
                    Value::Int(i64::from_le_bytes(buf))
                } else {
                    match decode_long(bytes) {
                        Some(i) => match i64::try_from(i) {
                            Ok(i) => Value::Int(i),
                            Err(_) => {
                                heap.bigs.push(i);
                                Value::Big((heap.bigs.len() - 1) as u32)
                            }
                        },
                        None => bad!(off, "integer of {n} bytes does not fit in 128 bits"),
                    }
                };
                push!(off, v);
            }
            b'G' => push!(
                off,
                Value::Float(f64::from_be_bytes(input.array("BINFLOAT")?))
            ),
            0x88 => push!(off, Value::Bool(true)),
            0x89 => push!(off, Value::Bool(false)),
            b'N' => push!(off, Value::None),
            0x8c => {
                let n = input.byte("SHORT_BINUNICODE")? as u64;
                push!(off, string!(off, n, "SHORT_BINUNICODE"));
            }
            b'X' => {
                let n = u32::from_le_bytes(input.array("BINUNICODE")?) as u64;
                push!(off, string!(off, n, "BINUNICODE"));
            }
            0x8d => {
                let n = u64::from_le_bytes(input.array("BINUNICODE8")?);
                push!(off, string!(off, n, "BINUNICODE8"));
            }
            b'U' | b'T' => {
                // Python 2 byte strings: read as Latin-1.
                let n = if op == b'U' {
                    input.byte("SHORT_BINSTRING")? as u64
                } else {
                    u32::from_le_bytes(input.array("BINSTRING")?) as u64
                };
                if n > max_str {
                    return Err(Error::LimitExceeded {
                        offset: off,
                        what: "a string's declared length",
                        limit: max_str,
                    });
                }
                let s: String = input
                    .bytes(n, "BINSTRING")?
                    .iter()
                    .map(|&b| b as char)
                    .collect();
                push!(off, Value::Str(heap_err!(off, heap.intern(&s))));
            }
            b'C' => {
                let n = input.byte("SHORT_BINBYTES")? as u64;
                push!(off, skip_bytes!(off, n, "SHORT_BINBYTES"));
            }
            b'B' => {
                let n = u32::from_le_bytes(input.array("BINBYTES")?) as u64;
                push!(off, skip_bytes!(off, n, "BINBYTES"));
            }
            0x8e | 0x96 => {
                let n = u64::from_le_bytes(input.array("BINBYTES8")?);
                push!(off, skip_bytes!(off, n, "BINBYTES8"));
            }
            // Stack manipulation.
            b'0' => {
                if marks.last() == Some(&stack.len()) {
                    marks.pop();
                } else {
                    pop!(off, "POP");
                }
            }
            b'1' => {
                let m = pop_mark!(off, "POP_MARK");
                stack.truncate(m);
            }
            b'2' => {
                let v = top!(off, "DUP");
                heap.add_ref(v);
                push!(off, v);
            }
            // Framing.
            0x80 => {
                let p = input.byte("PROTO")?;
                if p > 5 {
                    bad!(
                        off,
                        "pickle protocol {p} is newer than any Python writes (0-5)"
                    );
                }
                info.protocol = p;
            }
            0x95 => {
                input.array::<8>("FRAME")?;
            }
            b'.' => break,
            // Protocol 0 text opcodes.
            b'I' | b'L' => {
                let line = input.line("INT")?;
                let text = std::str::from_utf8(line)
                    .unwrap_or("")
                    .trim_end_matches('L');
                let v = match text {
                    "01" => Value::Bool(true),
                    "00" => Value::Bool(false),
                    t => match t.parse::<i128>() {
                        Ok(i) => match i64::try_from(i) {
                            Ok(i) => Value::Int(i),
                            Err(_) => {
                                heap.bigs.push(i);
                                Value::Big((heap.bigs.len() - 1) as u32)
                            }
                        },
                        Err(_) => bad!(
                            off,
                            "INT/LONG argument {t:?} is not an integer that fits in 128 bits"
                        ),
                    },
                };
                push!(off, v);
            }
            b'F' => {
                let line = input.line("FLOAT")?;
                match std::str::from_utf8(line)
                    .ok()
                    .and_then(|t| t.parse::<f64>().ok())
                {
                    Some(f) => push!(off, Value::Float(f)),
                    None => bad!(off, "FLOAT argument is not a number"),
                }
            }
            b'g' | b'p' => {
                let line = input.line("GET/PUT")?;
                let Some(key) = std::str::from_utf8(line)
                    .ok()
                    .and_then(|t| t.parse::<u64>().ok())
                else {
                    bad!(off, "GET/PUT argument is not a memo index");
                };
                if op == b'g' {
                    push!(off, heap_err!(off, heap.memo_get(key)));
                } else {
                    let v = top!(off, "PUT");
                    heap_err!(off, heap.memo_put(key, v));
                }
            }
            b'V' => {
                let line = input.line("UNICODE")?;
                let s = match raw_unicode_escape(line) {
                    Some(s) => s,
                    None => bad!(off, "UNICODE argument has an invalid escape"),
                };
                push!(off, Value::Str(heap_err!(off, heap.intern(&s))));
            }
            b'S' => {
                let line = input.line("STRING")?;
                let s = match python_string_literal(line) {
                    Some(s) => s,
                    None => bad!(off, "STRING argument is not a quoted string"),
                };
                push!(off, Value::Str(heap_err!(off, heap.intern(&s))));
            }
            op => {
                if let Some((name, why)) = forbidden(op) {
                    return Err(Error::ForbiddenOpcode {
                        opcode: name,
                        offset: off,
                        why,
                    });
                }
                return Err(Error::UnknownOpcode {
                    byte: op,
                    offset: off,
                });
            }
        }
    }
    info.bytes = input.offset();
    if stack.len() != 1 || !marks.is_empty() {
        return Err(Error::malformed(
            info.bytes - 1,
            format!(
                "STOP with {} values and {} marks on the stack (expected one value)",
                stack.len(),
                marks.len()
            ),
        ));
    }
    let root = stack[0];
    Ok((root, info))
}

/// Decodes Python's raw-unicode-escape (protocol 0 `UNICODE`): only `\uXXXX` and `\UXXXXXXXX`.
fn raw_unicode_escape(line: &[u8]) -> Option<String> {
    let mut out = String::with_capacity(line.len());
    let mut i = 0;
    while i < line.len() {
        let b = line[i];
        if b == b'\\' && i + 1 < line.len() && (line[i + 1] == b'u' || line[i + 1] == b'U') {
            let n = if line[i + 1] == b'u' { 4 } else { 8 };
            let hex = std::str::from_utf8(line.get(i + 2..i + 2 + n)?).ok()?;
            out.push(char::from_u32(u32::from_str_radix(hex, 16).ok()?)?);
            i += 2 + n;
        } else {
            out.push(b as char);
            i += 1;
        }
    }
    Some(out)
}

/// Decodes a protocol-0 `STRING` argument: a quoted Python literal with simple escapes.
fn python_string_literal(line: &[u8]) -> Option<String> {
    let q = *line.first()?;
    if line.len() < 2 || (q != b'\'' && q != b'"') || line[line.len() - 1] != q {
        return None;
    }
    let body = &line[1..line.len() - 1];
    let mut out = String::with_capacity(body.len());
    let mut i = 0;
    while i < body.len() {
        if body[i] == b'\\' && i + 1 < body.len() {
            let c = body[i + 1];
            i += 2;
            out.push(match c {
                b'n' => '\n',
                b't' => '\t',
                b'r' => '\r',
                b'\\' => '\\',
                b'\'' => '\'',
                b'"' => '"',
                b'x' => {
                    let hex = std::str::from_utf8(body.get(i..i + 2)?).ok()?;
                    i += 2;
                    u8::from_str_radix(hex, 16).ok()? as char
                }
                _ => return None,
            });
        } else {
            out.push(body[i] as char);
            i += 1;
        }
    }
    Some(out)
}

impl<R: Read> Input<R> {
    /// Up to `n` bytes from the read position, copied, for messages.
    pub fn head(&mut self, n: usize) -> Vec<u8> {
        let _ = self.peek_available(n);
        self.buf[self.pos..self.end.min(self.pos + n)].to_vec()
    }

    /// The next byte without consuming it; `None` at end of stream.
    pub fn peek_byte(&mut self) -> Result<Option<u8>> {
        Ok(if self.peek_available(1)? {
            Some(self.buf[self.pos])
        } else {
            None
        })
    }
}

/// Lets the JSON reader consume what the sniffing already buffered.
impl<R: Read> Read for Input<R> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if self.pos == self.end {
            match self.fill() {
                Ok(true) => {}
                Ok(false) => return Ok(0),
                Err(Error::Io { source, .. }) => return Err(source),
                Err(e) => return Err(std::io::Error::other(e.to_string())),
            }
        }
        let n = out.len().min(self.end - self.pos);
        out[..n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::decode_long;

    #[test]
    fn long_decoding() {
        assert_eq!(decode_long(&[]), Some(0));
        assert_eq!(decode_long(&[0xff]), Some(-1));
        assert_eq!(decode_long(&[0x00, 0x80]), Some(-32768));
        // 2^63 takes 9 bytes in CPython's minimal encoding.
        assert_eq!(
            decode_long(&[0, 0, 0, 0, 0, 0, 0, 0x80, 0]),
            Some(1i128 << 63)
        );
        assert_eq!(decode_long(&[0xff; 9]), Some(-1));
        // Non-minimal encodings of small numbers are fine; real 129-bit numbers are not.
        let mut twenty = vec![5u8];
        twenty.resize(20, 0);
        assert_eq!(decode_long(&twenty), Some(5));
        let mut wide = vec![0u8; 17];
        wide[16] = 1;
        assert_eq!(decode_long(&wide), None);
    }

    use super::{BUF_BYTES, CHUNK_HEAD_BYTES, Chunks, Error, FAST_WINDOW, Input};

    /// Chunks of the given sizes (repeated), each behind its free room, then `fail` or the end.
    struct Sized {
        data: Vec<u8>,
        at: usize,
        sizes: Vec<usize>,
        next: usize,
        fail: bool,
        recycled: usize,
    }

    impl Chunks for Sized {
        fn next_chunk(&mut self) -> std::io::Result<Option<Vec<u8>>> {
            if self.at == self.data.len() {
                return match self.fail {
                    true => Err(std::io::Error::other("disk gone")),
                    false => Ok(None),
                };
            }
            let n = self.sizes[self.next % self.sizes.len()].min(self.data.len() - self.at);
            self.next += 1;
            let mut c = vec![0xee; CHUNK_HEAD_BYTES];
            c.extend_from_slice(&self.data[self.at..self.at + n]);
            self.at += n;
            Ok(Some(c))
        }

        fn recycle(&mut self, _: Vec<u8>) {
            self.recycled += 1;
        }
    }

    /// What an input gives for one step of a script: the bytes and offsets seen.
    fn step<R: std::io::Read>(input: &mut Input<R>, op: u64, n: usize) -> Vec<u8> {
        let mut seen = input.offset().to_le_bytes().to_vec();
        match op {
            0 => seen.push(input.byte("a byte").unwrap_or(0xff)),
            1 => match input.bytes(n as u64, "bytes") {
                Ok(b) => seen.extend_from_slice(b),
                Err(e) => seen.extend_from_slice(e.to_string().as_bytes()),
            },
            2 => {
                if input.byte("an opcode").is_ok() {
                    let w = input.window_from_previous(FAST_WINDOW).unwrap();
                    seen.extend_from_slice(&w[..w.len().min(FAST_WINDOW + 1)]);
                    seen.extend_from_slice(&(w.len().min(FAST_WINDOW + 1) as u64).to_le_bytes());
                }
            }
            3 => seen.push(input.advance(n).is_ok() as u8),
            _ => {
                seen.push(input.peek_available(n).unwrap() as u8);
                seen.extend_from_slice(&input.head(16));
            }
        }
        seen.extend_from_slice(&input.offset().to_le_bytes());
        seen
    }

    /// An input over handed-over buffers reads as one over a plain reader, whatever the buffers'
    /// sizes (shorter than what is kept of the last, longer than a whole window) and whatever is
    /// asked of it: bytes, windows, steps and peeks, with the same offsets.
    #[test]
    fn handed_over_buffers_read_as_a_plain_reader() {
        let data: Vec<u8> = (0..3_000_000u32)
            .map(|i| (i * 31 + i / 4093) as u8)
            .collect();
        let mut rand = crate::test_rand::xorshift(0x9e37_79b9_7f4a_7c15);
        for sizes in [
            vec![2 << 20],
            vec![1, 7, 4096],
            vec![CHUNK_HEAD_BYTES - 1, CHUNK_HEAD_BYTES + 1, 3],
            vec![BUF_BYTES * 3, 100],
        ] {
            let mut plain = Input::new(&data[..]);
            let mut chunked = Input::chunked(Sized {
                data: data.clone(),
                at: 0,
                sizes: sizes.clone(),
                next: 0,
                fail: false,
                recycled: 0,
            });
            let mut steps = 0;
            while plain.peek_available(1).unwrap() {
                let op = rand(5);
                let n = match rand(4) {
                    0 => rand(16),
                    1 => rand(70_000),
                    2 => rand(BUF_BYTES as u64 / 2 + 2),
                    _ => rand(400_000),
                } as usize;
                // A peek past what the free room holds joins the bytes left and the next
                // buffer into one of their own.
                let n = if op == 4 { n.min(BUF_BYTES) } else { n };
                let (a, b) = (step(&mut plain, op, n), step(&mut chunked, op, n));
                assert!(
                    a == b,
                    "chunks {sizes:?}, step {steps} ({op}, {n}): the inputs differ"
                );
                steps += 1;
            }
            assert!(
                !chunked.peek_available(1).unwrap(),
                "chunks {sizes:?}: bytes left"
            );
            assert!(steps > 20, "{steps} steps");
        }
    }

    /// Once its source has said it has no more, an input does not ask it again, however often
    /// it is asked for a window, a peek or a byte at the end (the fast path asks before every
    /// entry of the last 64 KiB).
    #[test]
    fn the_source_is_asked_once_past_its_end() {
        struct Counted<'a> {
            data: &'a [u8],
            asked_at_end: std::rc::Rc<std::cell::Cell<u32>>,
        }
        impl std::io::Read for Counted<'_> {
            fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
                let n = self.data.read(out)?;
                if n == 0 {
                    self.asked_at_end.set(self.asked_at_end.get() + 1);
                }
                Ok(n)
            }
        }
        struct CountedChunks {
            chunk: Option<Vec<u8>>,
            asked_at_end: std::sync::Arc<std::sync::atomic::AtomicU32>,
        }
        impl Chunks for CountedChunks {
            fn next_chunk(&mut self) -> std::io::Result<Option<Vec<u8>>> {
                let c = self.chunk.take();
                if c.is_none() {
                    self.asked_at_end
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                Ok(c)
            }
            fn recycle(&mut self, _: Vec<u8>) {}
        }
        let data: Vec<u8> = (0..200_000u32).map(|i| i as u8).collect();
        let plain_asks = std::rc::Rc::new(std::cell::Cell::new(0));
        let chunk_asks = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
        let mut plain = Input::new(Counted {
            data: &data,
            asked_at_end: plain_asks.clone(),
        });
        let mut head = vec![0xee; CHUNK_HEAD_BYTES];
        head.extend_from_slice(&data);
        let mut chunked = Input::chunked(CountedChunks {
            chunk: Some(head),
            asked_at_end: chunk_asks.clone(),
        });
        for input in [&mut plain as &mut dyn Ends, &mut chunked] {
            input.read_to_the_end();
        }
        assert_eq!(plain_asks.get(), 1, "a plain reader");
        assert_eq!(
            chunk_asks.load(std::sync::atomic::Ordering::Relaxed),
            1,
            "handed-over buffers"
        );
    }

    /// What [`the_source_is_asked_once_past_its_end`] does with either kind of input.
    trait Ends {
        fn read_to_the_end(&mut self);
    }

    impl<R: std::io::Read> Ends for Input<R> {
        fn read_to_the_end(&mut self) {
            // Entry by entry to the end, a window asked for before each, as the fast path does.
            while self.byte("an opcode").is_ok() {
                let w = self.window_from_previous(FAST_WINDOW).unwrap().len();
                self.advance(w.min(101) - 1).unwrap();
            }
            for _ in 0..10 {
                assert!(!self.peek_available(1).unwrap());
                assert!(self.byte("a byte").is_err());
            }
        }
    }

    /// An error from the source is an error at the offset of the bytes read before it.
    #[test]
    fn a_source_error_is_an_io_error_after_the_bytes_before_it() {
        let mut input = Input::chunked(Sized {
            data: vec![7; 1000],
            at: 0,
            sizes: vec![300],
            next: 0,
            fail: true,
            recycled: 0,
        });
        assert_eq!(input.bytes(999, "bytes").unwrap(), &[7; 999][..]);
        match input.bytes(2, "bytes") {
            Err(Error::Io { offset, source }) => {
                assert_eq!(offset, 1000);
                assert_eq!(source.to_string(), "disk gone");
            }
            other => panic!("{:?}", other.map(|b| b.len())),
        }
    }
}
