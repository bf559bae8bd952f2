//! Entry templates for [`super::run_of`]: the first keys of an entry laid out byte for byte as in
//! an entry read before, compared in one masked pass instead of opcode by opcode.
//!
//! A trace's entries name the same keys in the same order, and most of their values are the
//! same opcodes with other payloads: `addr` is always `LONG1` of 6 bytes, `stream` a `BININT1`,
//! `compile_context` the same new string `"N/A"`; only `size` changes its opcode with its
//! magnitude. So the bytes of an entry up to its `frames` key come in three or four layouts in a
//! whole file. A template keeps one layout: the bytes every entry of it has (opcodes, the
//! lengths they carry, key references, constant strings) under a mask, and where each payload
//! (a number, a memo reference) lies. An entry matches when its bytes under the mask are the
//! template's, and then every payload is read at its known place, without the chain of
//! dependent loads that reading op by op is (each opcode's length decides where the next one
//! is).
//!
//! Why a match is exact: every opcode byte and every length byte of the covered prefix is under
//! the mask, so reading the entry op by op from its first byte meets the same opcodes at the
//! same places as in the entry the template was taken from; a `FRAME` marker or any other op
//! in between breaks the match at its first byte. Payloads are read as [`super::Plan::entry`]
//! reads them (numbers sign-extended as `Cursor::int` does; memo references through the run's
//! cache), and the memo slots are pushed in the same order.

use super::ops::{Cursor, FRAME, Field, INT_LONG1, INT_OPS, INT_SIGNED, INT_WIDTH, NUMBER_FIELDS};
use crate::values::{EntryFields, Heap, Value};

/// Bytes a template compares; they must all be in the window at the entry.
pub(super) const TEMPLATE_BYTES: usize = 128;
const WORDS: usize = TEMPLATE_BYTES / 8;
/// The most bytes a template covers: a number's 8-byte load at its payload stays inside the
/// compared bytes.
const MAX_LEN: usize = TEMPLATE_BYTES - 8;
/// Templates kept for one shape of keys (PyTorch's entries take three or four layouts).
const KEPT: usize = 4;
/// Entries in a row that match no template before templates rest: a file whose entries never
/// repeat a layout (a `BINPUT` of a new index in each) pays for a few compares and lessons only.
const MISSES_BEFORE_REST: u32 = 64;
/// Entries that skip templates while they rest.
const REST: u32 = 4096;

/// A number field's integer: its payload at `at`, `64 - 8 × width` as `shift`.
#[derive(Clone, Copy, Debug)]
struct Int {
    at: u8,
    shift: u8,
    signed: bool,
    slot: u8,
}

/// A memo reference (`BINGET`'s 1 byte or `LONG_BINGET`'s 4) at `at`, for key `key`.
#[derive(Clone, Copy, Debug)]
struct Ref {
    at: u8,
    wide: bool,
    key: u32,
    /// Slots the entry pushes before it (the dict's, new strings'): the reference must name
    /// an older one, as when read in order (a template pushes all its slots first).
    before: u8,
}

/// One layout of an entry's first keys (module docs).
#[derive(Clone, Debug)]
pub(super) struct Template {
    bytes: [u64; WORDS],
    mask: [u64; WORDS],
    /// Bytes covered, from the `EMPTY_DICT`.
    pub len: usize,
    /// Keys covered; [`Plan::entry`] reads the rest.
    pub keys: usize,
    /// The memo slots the covered bytes push after the dict's own (new strings), packed.
    slots: Vec<u32>,
    /// Whether a `MEMOIZE` follows the `EMPTY_DICT` (the dict's slot is pushed first).
    dict_memo: bool,
    ints: Vec<Int>,
    /// Bit `slot` of each of `ints`.
    read: u8,
    refs: Vec<Ref>,
    /// The fields the values every entry of the layout has set (new strings, bools, `None`),
    /// as `Heap::set_field` sets them: each key sets its own field only.
    fields: EntryFields,
}

impl Template {
    /// Bit `slot` of each number field the template reads.
    #[inline(always)]
    pub fn read(&self) -> u8 {
        self.read
    }

    /// All [`TEMPLATE_BYTES`] compared (the mask is 0 past the covered bytes): a fixed count
    /// the compiler unrolls into 16-byte vector operations.
    #[inline(always)]
    fn matches(&self, at: &[u8; TEMPLATE_BYTES]) -> bool {
        let mut diff = [0u64; WORDS];
        for (w, d) in diff.iter_mut().enumerate() {
            let mut word = [0u8; 8];
            word.copy_from_slice(&at[w * 8..w * 8 + 8]);
            *d = (u64::from_le_bytes(word) & self.mask[w]) ^ self.bytes[w];
        }
        diff.iter().fold(0, |a, &d| a | d) == 0
    }

    /// The layout of the entry `bytes` (from its `EMPTY_DICT`) that a run has just read op by
    /// op, naming the keys `refs` (memo references) that mean `fields`, over as many keys as
    /// it can cover; `None` when it covers none.
    pub fn learn(
        bytes: &[u8],
        refs: &[u32],
        fields: &[(u32, Field)],
        heap: &mut Heap,
        max_str: u64,
    ) -> Option<Template> {
        let mut t = Template {
            bytes: [0; WORDS],
            mask: [0; WORDS],
            len: 0,
            keys: 0,
            slots: Vec::new(),
            dict_memo: false,
            ints: Vec::new(),
            read: 0,
            refs: Vec::new(),
            fields: EntryFields::default(),
        };
        let mut c = Cursor { buf: bytes, pos: 0 };
        if c.byte()? != b'}' {
            return None;
        }
        t.dict_memo = c.buf.get(c.pos) == Some(&0x94);
        c.pos += t.dict_memo as usize;
        if c.byte()? != b'(' {
            return None;
        }
        t.constants(0, c.pos, bytes);
        let mut same = Vec::new();
        for (k, (&key_ref, &field)) in refs.iter().zip(fields).enumerate() {
            let key_at = c.pos;
            let sizes = (t.ints.len(), t.refs.len(), same.len());
            let covered = t.key(&mut c, key_ref, field, heap, max_str, &mut same);
            if covered.is_none() || c.pos > MAX_LEN {
                // An entry with a `FRAME` marker between its keys teaches nothing: the
                // entries after it have their keys where the marker is.
                let key_len = match bytes.get(key_at) {
                    Some(b'h') => 2,
                    Some(b'j') => 5,
                    _ => 0,
                };
                if [key_at, key_at + key_len]
                    .iter()
                    .any(|&i| bytes.get(i) == Some(&FRAME))
                {
                    return None;
                }
                t.ints.truncate(sizes.0);
                t.refs.truncate(sizes.1);
                same.truncate(sizes.2);
                t.forget_from(key_at);
                break;
            }
            t.keys = k + 1;
            t.len = c.pos;
        }
        if t.keys == 0 {
            return None;
        }
        t.read = t.ints.iter().fold(0, |r, i| r | 1 << i.slot);
        for (key, value, memo) in same {
            heap.set_field(&mut t.fields, key, value).ok()?;
            if memo {
                t.slots.push(heap.memo_narrow(value)?);
            }
        }
        Some(t)
    }

    /// Covers the key at the cursor, which must be the memo reference `key_ref` to the key
    /// `(id, field)`, and its value; `None` for a value templates leave to the op-by-op read
    /// (frames lists, anything rare). A value every entry of the layout has goes to `same`,
    /// with whether it is memoized.
    fn key(
        &mut self,
        c: &mut Cursor,
        key_ref: u32,
        (id, field): (u32, Field),
        heap: &mut Heap,
        max_str: u64,
        same: &mut Vec<(u32, Value, bool)>,
    ) -> Option<()> {
        let at = c.pos;
        let got = match c.byte()? {
            b'h' => c.byte()? as u32,
            b'j' => c.u32()?,
            _ => return None,
        };
        if got != key_ref {
            return None;
        }
        self.constants(at, c.pos, c.buf);
        if field == Field::Frames {
            return None;
        }
        let op_at = c.pos;
        let op = c.byte()?;
        let d = INT_OPS[op as usize];
        if d != 0 && (field as usize) < NUMBER_FIELDS {
            let width = if d & INT_LONG1 != 0 {
                c.byte()?
            } else {
                d & INT_WIDTH
            };
            if width == 0 || width > 8 {
                return None;
            }
            self.constants(op_at, c.pos, c.buf);
            self.ints.push(Int {
                at: c.pos as u8,
                shift: 64 - 8 * width,
                signed: d & INT_SIGNED != 0,
                slot: field as u8,
            });
            c.take(width as usize)?;
            return Some(());
        }
        match op {
            b'h' | b'j' => {
                self.constant(op_at, op);
                let before = self.dict_memo as usize + same.iter().filter(|s| s.2).count();
                self.refs.push(Ref {
                    at: c.pos as u8,
                    wide: op == b'j',
                    key: id,
                    before: before as u8,
                });
                c.take(if op == b'j' { 4 } else { 1 })?;
            }
            0x8c => {
                let n = c.byte()? as usize;
                let raw = c.take(n)?;
                if n as u64 > max_str {
                    return None;
                }
                let s = heap.intern(std::str::from_utf8(raw).ok()?).ok()?;
                // Older protocols' `BINPUT`s name a new index in each entry: not a layout.
                if matches!(c.buf.get(c.pos), Some(b'q' | b'r')) {
                    return None;
                }
                let memo = c.buf.get(c.pos) == Some(&0x94);
                c.pos += memo as usize;
                self.constants(op_at, c.pos, c.buf);
                same.push((id, Value::Str(s), memo));
            }
            0x88 | 0x89 | b'N' => {
                self.constant(op_at, op);
                let value = match op {
                    0x88 => Value::Bool(true),
                    0x89 => Value::Bool(false),
                    _ => Value::None,
                };
                same.push((id, value, false));
            }
            _ => return None,
        }
        Some(())
    }

    fn constant(&mut self, at: usize, b: u8) {
        let (w, shift) = (at / 8, at % 8 * 8);
        self.bytes[w] |= (b as u64) << shift;
        self.mask[w] |= 0xff << shift;
    }

    fn constants(&mut self, from: usize, to: usize, buf: &[u8]) {
        for (at, &b) in buf.iter().enumerate().take(to).skip(from) {
            self.constant(at, b);
        }
    }

    /// Drops the constants from byte `from` on (a key the template stops before).
    fn forget_from(&mut self, from: usize) {
        for at in from..TEMPLATE_BYTES {
            let (w, shift) = (at / 8, at % 8 * 8);
            self.bytes[w] &= !(0xff << shift);
            self.mask[w] &= !(0xff << shift);
        }
    }

    /// Reads the covered keys of an entry that matched (`at`: its bytes) into `fields` and (its
    /// numbers, the bits of [`Template::read`]) `nums`, and pushes its memo slots (the dict's
    /// as row `row`); `referenced` gives a memo reference's value, as the op-by-op read does.
    #[inline(always)]
    pub fn apply(
        &self,
        at: &[u8; TEMPLATE_BYTES],
        row: u32,
        heap: &mut Heap,
        fields: &mut EntryFields,
        nums: &mut [i64; NUMBER_FIELDS],
        mut referenced: impl FnMut(u32, &mut Heap) -> Option<Value>,
    ) -> Option<()> {
        let mark = heap.memo_mark()?;
        if self.dict_memo {
            heap.memo_push_narrow(heap.memo_narrow(Value::Entry(row))?)?;
        }
        for &w in &self.slots {
            heap.memo_push_narrow(w)?;
        }
        *fields = self.fields;
        for i in &self.ints {
            let o = (i.at as usize).min(TEMPLATE_BYTES - 8);
            let mut word = [0u8; 8];
            word.copy_from_slice(&at[o..o + 8]);
            let raw = u64::from_le_bytes(word);
            nums[i.slot as usize % NUMBER_FIELDS] = if i.signed {
                ((raw << i.shift) as i64) >> i.shift
            } else {
                ((raw << i.shift) >> i.shift) as i64
            };
        }
        for r in &self.refs {
            let o = (r.at as usize).min(TEMPLATE_BYTES - 4);
            let i = if r.wide {
                let mut word = [0u8; 4];
                word.copy_from_slice(&at[o..o + 4]);
                u32::from_le_bytes(word)
            } else {
                at[o] as u32
            };
            if i as usize >= mark + r.before as usize {
                return None;
            }
            let v = referenced(i, heap)?;
            heap.set_field(fields, r.key, v).ok()?;
        }
        Some(())
    }
}

/// The templates of one shape of keys (kept with the keys, [`super::Keys`]).
#[derive(Default)]
pub(super) struct Templates {
    kept: Vec<Template>,
    /// The one that matched last, compared first.
    last: usize,
    /// The one the next lesson replaces once [`KEPT`] are kept.
    evict: usize,
    misses: u32,
    rest: u32,
    /// Entries read through a template (for the tests).
    #[cfg(test)]
    pub hits: usize,
}

/// What [`Templates::find`] found.
pub(super) enum Found {
    /// Template `i` matches.
    Hit(usize),
    /// None matches: the entry read op by op may teach one.
    Miss,
    /// Not compared (too near the window's end, or resting).
    Skipped,
}

impl Templates {
    pub fn clear(&mut self) {
        *self = Templates::default();
    }

    pub fn get(&self, i: usize) -> &Template {
        &self.kept[i]
    }

    /// The template the entry at `window[pos..]` matches.
    #[inline(always)]
    pub fn find(&mut self, window: &[u8], pos: usize) -> Found {
        if self.rest > 0 {
            self.rest -= 1;
            return Found::Skipped;
        }
        let Some(at) = window
            .get(pos..pos + TEMPLATE_BYTES)
            .and_then(|s| <&[u8; TEMPLATE_BYTES]>::try_from(s).ok())
        else {
            return Found::Skipped;
        };
        let hit = match self.kept.get(self.last) {
            Some(t) if t.matches(at) => Some(self.last),
            _ => (0..self.kept.len()).find(|&i| i != self.last && self.kept[i].matches(at)),
        };
        match hit {
            Some(i) => {
                self.last = i;
                self.misses = 0;
                #[cfg(test)]
                {
                    self.hits += 1;
                }
                Found::Hit(i)
            }
            None => {
                self.misses += 1;
                if self.misses >= MISSES_BEFORE_REST {
                    self.misses = 0;
                    self.rest = REST;
                }
                Found::Miss
            }
        }
    }

    /// Keeps `t`, in place of the oldest lesson once [`KEPT`] are kept.
    pub fn keep(&mut self, t: Template) {
        if self.kept.len() < KEPT {
            self.kept.push(t);
            self.last = self.kept.len() - 1;
        } else {
            self.kept[self.evict] = t;
            self.last = self.evict;
            self.evict = (self.evict + 1) % KEPT;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::memoized_str;
    use super::super::{FRAME, State, apply_run, try_entry};
    use crate::model::FrameId;
    use crate::values::{Heap, Limits, Value};

    /// A heap and state whose run keys are those of PyTorch's entries, memoized as CPython's
    /// pickler writes them (slots: `action` 1, `alloc` 2, `addr` 3, `size` 4, `stream` 5,
    /// `time_us` 6, `compile_context` 7, `N/A` 8, `user_metadata` 9, `""` 10, `frames` 11),
    /// then slots 12–15 of its own: two actions, a frame and an empty list.
    fn pytorch_keys() -> (Heap, State) {
        let mut heap = Heap::new(Limits::default());
        let mut state = State::default();
        let mut first = vec![b'}', 0x94, b'('];
        let s = memoized_str;
        s(&mut first, "action");
        s(&mut first, "alloc");
        for (key, value) in [
            ("addr", &b"\x8a\x06\x00\x00\x00\x00\x10\x7f"[..]),
            ("size", b"J\x00\x02\x00\x00"),
            ("stream", b"K\x00"),
            ("time_us", b"\x8a\x07\x01\x02\x03\x04\x05\x06\x00"),
        ] {
            s(&mut first, key);
            first.extend(value);
        }
        s(&mut first, "compile_context");
        s(&mut first, "N/A");
        s(&mut first, "user_metadata");
        s(&mut first, "");
        s(&mut first, "frames");
        first.extend(b"]u.");
        assert!(try_entry(&first, &mut heap, &mut state).is_some());
        for v in [
            Value::Str(heap.intern("free_requested").unwrap()),
            Value::Str(heap.intern("free_completed").unwrap()),
            Value::Frame(FrameId(0)),
            Value::EmptyList,
        ] {
            heap.memo_push(v).unwrap();
        }
        let mut second = entry(&Fields::default());
        second.push(b'.');
        assert!(try_entry(&second, &mut heap, &mut state).is_some());
        (heap, state)
    }

    /// What [`entry`] writes.
    #[derive(Default)]
    struct Fields {
        action_slot: u8,
        /// An `action` of `LONG_BINGET` of this slot instead.
        action_wide: Option<u32>,
        addr: u64,
        /// The opcode and payload of `size`.
        size: Vec<u8>,
        time_us: i64,
        frames: Vec<u8>,
        /// The op (of the entry's ops, in order) a `FRAME` marker comes before.
        frame_marker: Option<usize>,
        /// `user_metadata`'s value.
        metadata: Vec<u8>,
    }

    /// An entry of [`pytorch_keys`]'s keys.
    fn entry(f: &Fields) -> Vec<u8> {
        let (action, metadata) = (
            if f.action_slot == 0 { 2 } else { f.action_slot },
            if f.metadata.is_empty() {
                vec![b'h', 10]
            } else {
                f.metadata.clone()
            },
        );
        let mut addr = vec![0x8a, 6];
        addr.extend(&f.addr.to_le_bytes()[..6]);
        let mut time = vec![0x8a, 7];
        time.extend(&f.time_us.to_le_bytes()[..7]);
        let size = if f.size.is_empty() {
            vec![b'K', 1]
        } else {
            f.size.clone()
        };
        let frames = if f.frames.is_empty() {
            b"]\x94".to_vec()
        } else {
            f.frames.clone()
        };
        let action = match f.action_wide {
            Some(slot) => [&[b'j'][..], &slot.to_le_bytes()].concat(),
            None => vec![b'h', action],
        };
        let ops: Vec<&[u8]> = vec![
            b"}\x94(",
            b"h\x01",
            &action,
            b"h\x03",
            &addr,
            b"h\x04",
            &size,
            b"h\x05",
            b"K\x00",
            b"h\x06",
            &time,
            b"h\x07",
            b"\x8c\x03N/A\x94",
            b"h\x09",
            &metadata,
            b"h\x0b",
            &frames,
            b"u",
        ];
        let mut b = Vec::new();
        for (i, op) in ops.iter().enumerate() {
            if f.frame_marker == Some(i) {
                b.push(FRAME);
                b.extend(70_000u64.to_le_bytes());
            }
            b.extend(*op);
        }
        b
    }

    /// Rows and memo slots as a run with templates reads them, and as the tape reads each
    /// entry alone.
    fn both_ways(entries: &[Vec<u8>]) -> (Heap, Heap, usize) {
        let (mut run, mut run_state) = pytorch_keys();
        let mut window = entries.concat();
        window.push(b'e');
        let (mut stack, mut at) = (Vec::new(), 0);
        while at < window.len() - 1 {
            let used = apply_run(
                &window[at..],
                1 << 20,
                &mut run,
                &mut run_state,
                &mut stack,
                1 << 20,
            );
            assert!(used > 0, "the run reads the entry at byte {at}");
            at += used;
        }
        let hits = run_state.keys.templates.hits;
        let (mut alone, mut alone_state) = pytorch_keys();
        for e in entries {
            let bytes = [&e[..], b"."].concat();
            assert!(try_entry(&bytes, &mut alone, &mut alone_state).is_some());
        }
        (run, alone, hits)
    }

    fn assert_same(run: &mut Heap, alone: &mut Heap) {
        let (a, b) = (&run.trace, &alone.trace);
        assert_eq!(a.action, b.action);
        assert_eq!(a.addr, b.addr);
        assert_eq!(a.size, b.size);
        assert_eq!(a.time_us, b.time_us);
        assert_eq!(a.stack, b.stack);
        assert_eq!(
            a.stream_id.iter().collect::<Vec<_>>(),
            b.stream_id.iter().collect::<Vec<_>>()
        );
        assert_eq!(a.compile_context, b.compile_context);
        assert_eq!(a.user_metadata, b.user_metadata);
        assert_eq!(run.memo_mark(), alone.memo_mark());
        for slot in 0..run.memo_mark().unwrap() {
            assert_eq!(
                run.memo_peek(slot),
                alone.memo_peek(slot),
                "memo slot {slot}"
            );
        }
    }

    /// Entries of every layout PyTorch writes, in random order (sizes of each integer opcode,
    /// the three actions, empty and longer frames lists, `FRAME` markers between ops): a run
    /// reads most through templates, and what it reads is what the tape reads entry by entry.
    #[test]
    fn templates_read_what_the_op_by_op_read_does() {
        let mut rand = crate::test_rand::xorshift(0x7e3a_91c4_55d2_0b1f);
        let entries: Vec<Vec<u8>> = (0..600)
            .map(|_| {
                let size = match rand(5) {
                    0 => vec![b'K', rand(256) as u8],
                    1 => [&[b'M'][..], &(rand(65536) as u16).to_le_bytes()].concat(),
                    2 => [&[b'J'][..], &(rand(1 << 31) as i32).to_le_bytes()].concat(),
                    3 => [&[0x8a, 5][..], &rand(1 << 39).to_le_bytes()[..5]].concat(),
                    _ => vec![0x8a, 0],
                };
                entry(&Fields {
                    action_slot: [2, 12, 13][rand(3) as usize],
                    action_wide: None,
                    addr: (1 << 40) + rand(1 << 30) * 512,
                    size,
                    time_us: 1_700_000_000_000_000 + rand(1 << 20) as i64,
                    frames: match rand(4) {
                        0 => b"]\x94(h\x0eh\x0ee".to_vec(),
                        1 => b"]\x94(h\x0ee".to_vec(),
                        2 => b"h\x0f".to_vec(),
                        _ => Vec::new(),
                    },
                    frame_marker: (rand(20) == 0).then(|| rand(18) as usize),
                    metadata: if rand(10) == 0 {
                        b"\x8c\x02ab\x94".to_vec()
                    } else {
                        Vec::new()
                    },
                })
            })
            .collect();
        let (mut run, mut alone, hits) = both_ways(&entries);
        assert_same(&mut run, &mut alone);
        assert!(hits > 400, "most entries through a template: {hits} of 600");
    }

    /// A layout's constant values (a new string in `user_metadata`) and its numbers with the
    /// sign bit set (an `addr` of 6 bytes, a `time_us` below zero) read through a template as
    /// op by op.
    #[test]
    fn a_template_sets_its_constant_fields_and_signed_numbers() {
        let entries: Vec<Vec<u8>> = (0..50u64)
            .map(|k| {
                entry(&Fields {
                    addr: 0x8000_0000_0000 + k * 512,
                    size: [&[b'J'][..], &(k as i32 * 4096).to_le_bytes()].concat(),
                    time_us: -(k as i64) - 1,
                    metadata: b"\x8c\x02ab\x94".to_vec(),
                    ..Fields::default()
                })
            })
            .collect();
        let (mut run, mut alone, hits) = both_ways(&entries);
        assert_same(&mut run, &mut alone);
        assert!(hits >= 45, "{hits} of 50 through a template");
        assert_eq!(run.trace.user_metadata.len(), 50);
        assert_eq!(run.trace.time_us.get(51), -50);
        // `LONG1` is signed: 6 bytes with the top bit set are below zero.
        assert_eq!(run.trace.addr.get(51), 0xffff_8000_0000_6200);
    }

    /// A template pushes its entry's memo slots before it reads the references: one naming a
    /// slot the entry itself pushes only later (no file CPython writes) is refused, as it is
    /// read op by op, instead of finding that slot filled.
    #[test]
    fn a_reference_to_a_slot_its_entry_pushes_later_is_refused() {
        let (mut heap, mut state) = pytorch_keys();
        let action = |slot: u32| Fields {
            action_wide: Some(slot),
            ..Fields::default()
        };
        let mut stack = Vec::new();
        let good = entry(&action(2)).repeat(8);
        let _ = apply_run(&good, 1 << 20, &mut heap, &mut state, &mut stack, 1 << 20);
        let read = stack.len();
        assert!(read >= 7, "the entries naming `alloc` are read: {read}");
        assert!(state.keys.templates.hits > 0);
        // The dict takes the next slot and `N/A` the one after, which `action` comes before.
        let next = heap.memo_mark().unwrap() as u32;
        let mut window = entry(&action(next + 1));
        window.extend(entry(&action(2)).repeat(4));
        window.push(b'e');
        let memo_before = heap.memo_mark();
        let hits_before = state.keys.templates.hits;
        assert_eq!(
            apply_run(&window, 1 << 20, &mut heap, &mut state, &mut stack, 1 << 20),
            0
        );
        assert_eq!(
            state.keys.templates.hits,
            hits_before + 1,
            "it matched a template"
        );
        assert_eq!(heap.memo_mark(), memo_before, "nothing pushed");
        assert_eq!(stack.len(), read);
        // Naming `N/A`'s slot of the entry before is reading back.
        let mut window = entry(&action(next - 1));
        window.push(b'e');
        assert_eq!(
            apply_run(&window, 1 << 20, &mut heap, &mut state, &mut stack, 1 << 20),
            window.len() - 1
        );
    }
}
