//! 64-bit columns in a few bytes a value: addresses, times, sizes and live-byte series of big
//! traces.
//!
//! A 12M-event trace spends 8 bytes on each event's address, time, size and live bytes, but
//! neighbouring values are close: within 256 events times span milliseconds, and addresses and
//! sizes span what one program's segments do. [`Packed`] stores each block of [`BLOCK`] values
//! as its lowest value plus, per value, its offset from it in as many bits as the block's
//! widest offset needs (frame-of-reference bit packing). Reads are exact whatever the values (a
//! block spanning all of `u64` takes 64 bits a value), and any value is read in O(1): a block's
//! offsets all have one width. The model shrinks from 8 bytes per value and column to what the
//! data needs (issue 41: measured in bench/README.md).

/// Values per block.
pub const BLOCK: usize = 256;

/// A 64-bit value a [`Packed`] column holds (any bit pattern round-trips).
pub trait Word: Copy {
    fn to_i64(self) -> i64;
    fn from_i64(v: i64) -> Self;
}

impl Word for i64 {
    #[inline]
    fn to_i64(self) -> i64 {
        self
    }
    #[inline]
    fn from_i64(v: i64) -> Self {
        v
    }
}

impl Word for u64 {
    #[inline]
    fn to_i64(self) -> i64 {
        self as i64
    }
    #[inline]
    fn from_i64(v: i64) -> Self {
        v as u64
    }
}

/// Bits of [`Packed::at`] that hold the block's width; its bit position is a multiple of 256
/// above them.
const WIDTH_MASK: u64 = 0xff;

/// A column of 64-bit values stored as per-block bases and bit-packed offsets (module docs).
#[derive(Clone)]
pub struct Packed<T> {
    /// Per full block: its lowest value.
    base: Vec<i64>,
    /// Per full block: the bit position of its first offset in `bits` (a multiple of 256) or'd
    /// with the offsets' width in bits (0 to 64).
    at: Vec<u64>,
    /// The blocks' offsets, `width` bits each, low bits first; one spare word at the end so
    /// that every read may load two words.
    bits: Vec<u64>,
    /// Bits of `bits` in use, blocks rewritten elsewhere by [`Packed::set_range`] included.
    bit_len: u64,
    /// Bits left behind by rewritten blocks (reclaimed when they pass half of `bit_len`).
    stale_bits: u64,
    /// Values after the last full block.
    tail: Vec<i64>,
    /// The lowest and highest of `tail`, kept as values are pushed (a block's bounds are then
    /// known when it fills).
    tail_lo: i64,
    tail_hi: i64,
    _t: std::marker::PhantomData<T>,
}

impl<T: Word> Default for Packed<T> {
    fn default() -> Self {
        Packed::new()
    }
}

#[inline]
fn width_mask(w: u64) -> u64 {
    if w >= 64 { u64::MAX } else { (1u64 << w) - 1 }
}

/// Writes the low `w` bits of `v` at bit `pos` of `bits` (which has a word past `pos + w`).
#[inline]
fn put_bits(bits: &mut [u64], pos: u64, w: u64, v: u64) {
    let (word, sh) = ((pos / 64) as usize, pos % 64);
    let mask = width_mask(w);
    let v = v & mask;
    bits[word] = (bits[word] & !(mask << sh)) | (v << sh);
    if sh + w > 64 {
        let high = width_mask(sh + w - 64);
        bits[word + 1] = (bits[word + 1] & !high) | (v >> (64 - sh));
    }
}

/// Writes each value's offset from `lo` in `w` bits (1 to 64) into `out`, which has exactly the
/// `4 w` words 256 values of `w` bits take. The words are built in a register and each stored
/// once (or'ing offsets into memory made every value wait for the store before it; packing on a
/// zeroed stack array cost a 2 KiB `memset` a block), into a slice already sized (pushing each
/// word onto the `Vec` was a third of the encoding's instructions: bench/README.md, issue 41,
/// twenty-first part).
#[inline]
fn pack_fresh(out: &mut [u64], w: u64, lo: i64, values: &[i64]) {
    let mut words = out.iter_mut();
    let (mut acc, mut n) = (0u64, 0u64);
    for &v in values {
        let d = v.wrapping_sub(lo) as u64;
        acc |= d << n;
        n += w;
        if n >= 64 {
            if let Some(word) = words.next() {
                *word = acc;
            }
            n -= 64;
            // The bits of `d` that did not fit (none when it ended on the word).
            acc = if n == 0 { 0 } else { d >> (w - n) };
        }
    }
}

/// The `w` bits at bit `pos` of `bits` (which has a word past them).
#[inline(always)]
fn get_bits(bits: &[u64], pos: u64, w: u64) -> u64 {
    let (word, sh) = ((pos / 64) as usize, pos % 64);
    let two = &bits[word..word + 2];
    // `two[1] << (64 - sh)`, which is 0 for `sh` = 0.
    ((two[0] >> sh) | ((two[1] << 1) << (63 - sh))) & width_mask(w)
}

impl<T: Word> Packed<T> {
    pub fn new() -> Self {
        Packed {
            base: Vec::new(),
            at: Vec::new(),
            bits: vec![0],
            bit_len: 0,
            stale_bits: 0,
            tail: Vec::with_capacity(BLOCK),
            tail_lo: i64::MAX,
            tail_hi: i64::MIN,
            _t: std::marker::PhantomData,
        }
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.base.len() * BLOCK + self.tail.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Room for `n` more values without growing, at 32 bits a value (address space only until
    /// written).
    pub fn reserve(&mut self, n: usize) {
        self.bits.reserve(n / 2 + 1);
        self.base.reserve(n / BLOCK + 1);
        self.at.reserve(n / BLOCK + 1);
    }

    pub fn shrink_to_fit(&mut self) {
        self.bits.shrink_to_fit();
        self.base.shrink_to_fit();
        self.at.shrink_to_fit();
    }

    pub fn heap_bytes(&self) -> usize {
        self.base.capacity() * 8
            + self.at.capacity() * 8
            + self.bits.capacity() * 8
            + self.tail.capacity() * 8
    }

    #[inline(always)]
    pub fn push(&mut self, v: T) {
        if self.tail.capacity() == 0 {
            self.tail.reserve_exact(BLOCK);
        }
        let v = v.to_i64();
        self.tail.push(v);
        self.tail_lo = self.tail_lo.min(v);
        self.tail_hi = self.tail_hi.max(v);
        if self.tail.len() == BLOCK {
            let block = std::mem::take(&mut self.tail);
            let (base, at) = self.encode(&block, (self.tail_lo, self.tail_hi));
            (self.tail_lo, self.tail_hi) = (i64::MAX, i64::MIN);
            self.base.push(base);
            self.at.push(at);
            self.tail = block;
            self.tail.clear();
        }
    }

    /// Appends `f` of each of `rows`: the tail is filled first, then whole blocks are gathered
    /// on the stack with their bounds and encoded without passing through the tail. The column
    /// is the one [`Packed::push`] of each value makes; a table built from batches of rows
    /// (`follow.rs`) spends about a third of the instructions pushing one value at a time did.
    pub fn extend_from<R>(&mut self, rows: &[R], f: impl Fn(&R) -> T) {
        let mut rows = rows;
        while !self.tail.is_empty() {
            let Some((r, rest)) = rows.split_first() else {
                return;
            };
            self.push(f(r));
            rows = rest;
        }
        let mut blocks = rows.chunks_exact(BLOCK);
        let mut values = [0i64; BLOCK];
        for block in &mut blocks {
            let (mut lo, mut hi) = (i64::MAX, i64::MIN);
            for (v, r) in values.iter_mut().zip(block) {
                *v = f(r).to_i64();
                lo = lo.min(*v);
                hi = hi.max(*v);
            }
            let (base, at) = self.encode(&values, (lo, hi));
            self.base.push(base);
            self.at.push(at);
        }
        for r in blocks.remainder() {
            self.push(f(r));
        }
    }

    /// Writes one full block's offsets at the end of `bits`: its base and `at`. Once in 256
    /// pushes, so kept out of line: [`Packed::push`] stays small enough to inline.
    #[inline(never)]
    fn encode(&mut self, values: &[i64], (lo, hi): (i64, i64)) -> (i64, u64) {
        debug_assert_eq!(values.len(), BLOCK);
        debug_assert_eq!((lo, hi), min_max(values));
        let w = 64 - (hi.wrapping_sub(lo) as u64).leading_zeros() as u64;
        let pos = self.bit_len.next_multiple_of(256);
        self.bit_len = pos + w * BLOCK as u64;
        // The block's words replace the spare word at the end, which follows them again.
        let first = (pos / 64) as usize;
        self.bits
            .reserve((first + 4 * w as usize + 1).saturating_sub(self.bits.len()));
        self.bits.resize(first + 4 * w as usize, 0);
        if w > 0 {
            pack_fresh(&mut self.bits[first..], w, lo, values);
        }
        // The spare word every read may touch.
        self.bits.push(0);
        (lo, pos | w)
    }

    /// Value `i`. Panics past the end, like slice indexing.
    #[inline]
    pub fn get(&self, i: usize) -> T {
        let b = i / BLOCK;
        if b >= self.base.len() {
            return T::from_i64(self.tail[i - self.base.len() * BLOCK]);
        }
        let (base, at) = (self.base[b], self.at[b]);
        let w = at & WIDTH_MASK;
        if w == 0 {
            return T::from_i64(base);
        }
        let pos = (at & !WIDTH_MASK) + (i % BLOCK) as u64 * w;
        T::from_i64(base.wrapping_add(get_bits(&self.bits, pos, w) as i64))
    }

    /// Full block `b`'s values.
    fn block(&self, b: usize) -> Vec<i64> {
        (b * BLOCK..(b + 1) * BLOCK)
            .map(|k| self.get(k).to_i64())
            .collect()
    }

    /// Adds `delta` to every value (wrapping), in O(blocks): a block's offsets are relative to
    /// its base, so only bases move. A series built relative to an origin learnt at the end
    /// (the live bytes of allocations made before a trace) is shifted this way.
    pub fn add_to_all(&mut self, delta: i64) {
        for v in self.base.iter_mut().chain(self.tail.iter_mut()) {
            *v = v.wrapping_add(delta);
        }
        // Wrapping may reorder the tail's values.
        (self.tail_lo, self.tail_hi) = min_max(&self.tail);
    }

    /// Values `range` in order, read a block at a time (no per-value lookup of its block).
    pub fn iter_range(&self, range: std::ops::Range<usize>) -> Iter<'_, T> {
        assert!(
            range.end <= self.len() || range.is_empty(),
            "range past the end"
        );
        Iter {
            p: self,
            i: range.start,
            end: range.end.max(range.start),
            // No block decoded yet: every row is outside it.
            buf_start: usize::MAX / 2,
            buf: Box::new([0; BLOCK]),
        }
    }

    pub fn iter(&self) -> Iter<'_, T> {
        self.iter_range(0..self.len())
    }

    /// Like `slice[range].partition_point(pred)`: the first index (from `range.start`, counted
    /// from it) whose value fails `pred`, for values partitioned by it.
    pub fn partition_point(
        &self,
        range: std::ops::Range<usize>,
        pred: impl Fn(T) -> bool,
    ) -> usize {
        let (mut lo, mut hi) = (range.start, range.end);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if pred(self.get(mid)) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo - range.start
    }

    /// Writes `values` at positions `at..at + values.len()` (each block touched is re-encoded).
    pub fn set_range(&mut self, at: usize, values: &[T]) {
        let end = at + values.len();
        assert!(end <= self.len(), "set_range past the end");
        let full = self.base.len() * BLOCK;
        let mut i = at;
        while i < end {
            if i >= full {
                self.tail[i - full] = values[i - at].to_i64();
                i += 1;
                continue;
            }
            let b = i / BLOCK;
            let start = b * BLOCK;
            let mut block = self.block(b);
            let stop = end.min(start + BLOCK);
            for k in i..stop {
                block[k - start] = values[k - at].to_i64();
            }
            self.rewrite_block(b, &block);
            i = stop;
        }
        (self.tail_lo, self.tail_hi) = min_max(&self.tail);
        if self.stale_bits > self.bit_len / 2 {
            self.reencode();
        }
    }

    /// Re-encodes full block `b` with `values`: in place when its offsets still fit the
    /// block's width, else at the end of `bits` (its old bits become stale).
    fn rewrite_block(&mut self, b: usize, values: &[i64]) {
        let (lo, hi) = min_max(values);
        let need = 64 - (hi.wrapping_sub(lo) as u64).leading_zeros() as u64;
        let (pos, w) = (self.at[b] & !WIDTH_MASK, self.at[b] & WIDTH_MASK);
        if need <= w {
            self.base[b] = lo;
            for (k, &v) in values.iter().enumerate() {
                put_bits(
                    &mut self.bits,
                    pos + k as u64 * w,
                    w,
                    v.wrapping_sub(lo) as u64,
                );
            }
        } else {
            self.stale_bits += w * BLOCK as u64;
            (self.base[b], self.at[b]) = self.encode(values, (lo, hi));
        }
    }

    /// Encodes every block again, leaving out stale bits.
    fn reencode(&mut self) {
        let mut fresh = Packed::<T>::new();
        fresh.bits.reserve(self.bits.len());
        for b in 0..self.base.len() {
            let values = self.block(b);
            let (base, at) = fresh.encode(&values, min_max(&values));
            fresh.base.push(base);
            fresh.at.push(at);
        }
        fresh.tail = std::mem::take(&mut self.tail);
        (fresh.tail_lo, fresh.tail_hi) = (self.tail_lo, self.tail_hi);
        *self = fresh;
    }
}

/// [`Packed::iter_range`]: values are decoded a block at a time into `buf`.
pub struct Iter<'a, T> {
    p: &'a Packed<T>,
    i: usize,
    end: usize,
    /// `buf` holds the values of rows `buf_start..buf_start + BLOCK`.
    buf_start: usize,
    buf: Box<[i64; BLOCK]>,
}

impl<T: Word> Iter<'_, T> {
    /// Decodes the block holding row `i` (or the tail) into `buf`.
    fn fill(&mut self, i: usize) {
        self.buf_start = i / BLOCK * BLOCK;
        self.p.block_into(i / BLOCK, &mut self.buf);
    }
}

impl<T: Word> Packed<T> {
    /// Decodes block `b` (the tail past the full blocks) into `out`; returns its values'
    /// count. For readers that walk a column in order ([`Iter`], the index's event readers).
    pub fn block_into(&self, b: usize, out: &mut [i64; BLOCK]) -> usize {
        if b >= self.base.len() {
            out[..self.tail.len()].copy_from_slice(&self.tail);
            return self.tail.len();
        }
        let (base, at) = (self.base[b], self.at[b]);
        let w = at & WIDTH_MASK;
        let pos = at & !WIDTH_MASK;
        if w == 0 {
            out.fill(base);
            return BLOCK;
        }
        for (k, v) in out.iter_mut().enumerate() {
            *v = base.wrapping_add(get_bits(&self.bits, pos + k as u64 * w, w) as i64);
        }
        BLOCK
    }
}

impl<T: Word> Iterator for Iter<'_, T> {
    type Item = T;

    #[inline]
    fn next(&mut self) -> Option<T> {
        if self.i >= self.end {
            return None;
        }
        let i = self.i;
        self.i += 1;
        if i.wrapping_sub(self.buf_start) >= BLOCK {
            self.fill(i);
        }
        Some(T::from_i64(self.buf[i - self.buf_start]))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.end - self.i;
        (n, Some(n))
    }
}

impl<T: Word> ExactSizeIterator for Iter<'_, T> {}

/// A [`Packed`] column as the model file stores it (`store.rs`): its parts as they are in
/// memory, so a reopened model is the column itself, not a re-encoding of every value.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct PackedParts {
    pub base: Vec<i64>,
    pub at: Vec<u64>,
    pub bits: Vec<u64>,
    pub tail: Vec<i64>,
}

impl<T: Word> Packed<T> {
    /// The column's parts, for the model file: bases, bit positions and widths, bits, tail.
    pub fn parts(&self) -> (&[i64], &[u64], &[u64], &[i64]) {
        (&self.base, &self.at, &self.bits, &self.tail)
    }

    /// The column from its parts, or why they do not make one (every read is then in bounds).
    pub fn from_parts(p: PackedParts) -> Result<Self, &'static str> {
        if p.base.len() != p.at.len() {
            return Err("packed column: bases and bit positions differ in number");
        }
        if p.tail.len() >= BLOCK {
            return Err("packed column: tail of a full block");
        }
        // Bits a read may touch: the words in use, and the spare one after them.
        let usable = (p.bits.len() as u64).saturating_sub(1) * 64;
        let mut bit_len = 0;
        for &at in &p.at {
            let w = at & WIDTH_MASK;
            if w > 64 {
                return Err("packed column: a block wider than 64 bits");
            }
            let end = (at & !WIDTH_MASK)
                .checked_add(w * BLOCK as u64)
                .filter(|&e| e <= usable)
                .ok_or("packed column: a block past its bits")?;
            bit_len = bit_len.max(end);
        }
        if p.bits.is_empty() {
            return Err("packed column: no spare word");
        }
        let mut tail = p.tail;
        tail.reserve_exact(BLOCK - tail.len());
        let (tail_lo, tail_hi) = min_max(&tail);
        Ok(Packed {
            base: p.base,
            at: p.at,
            bits: p.bits,
            bit_len,
            stale_bits: 0,
            tail,
            tail_lo,
            tail_hi,
            _t: std::marker::PhantomData,
        })
    }
}

fn min_max(values: &[i64]) -> (i64, i64) {
    // Two reductions, each vectorized.
    let lo = values.iter().copied().fold(i64::MAX, i64::min);
    let hi = values.iter().copied().fold(i64::MIN, i64::max);
    (lo, hi)
}

impl<T: Word> Extend<T> for Packed<T> {
    fn extend<I: IntoIterator<Item = T>>(&mut self, iter: I) {
        for v in iter {
            self.push(v);
        }
    }
}

impl<T: Word> FromIterator<T> for Packed<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        let mut p = Packed::new();
        for v in iter {
            p.push(v);
        }
        p
    }
}

impl<T: Word + PartialEq> PartialEq for Packed<T> {
    /// Equal values, however they are stored.
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().zip(other.iter()).all(|(a, b)| a == b)
    }
}

impl<T: Word + std::fmt::Debug> std::fmt::Debug for Packed<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<T: Word + PartialEq, const N: usize> PartialEq<[T; N]> for Packed<T> {
    fn eq(&self, other: &[T; N]) -> bool {
        self.len() == N && self.iter().zip(other.iter()).all(|(a, &b)| a == b)
    }
}

/// A column of small ids that seldom change from one row to the next (a trace's CUDA stream):
/// stored as runs, 6 bytes a run instead of 2 a row (one run for a single-stream program),
/// falling back to 2 bytes a row when runs are short (streams interleaved event by event).
#[derive(Clone)]
pub enum Runs {
    Runs {
        /// First row of each run, ascending.
        starts: Vec<u32>,
        values: Vec<u16>,
        len: usize,
    },
    Dense(Vec<u16>),
}

impl Default for Runs {
    fn default() -> Self {
        Runs::Runs {
            starts: Vec::new(),
            values: Vec::new(),
            len: 0,
        }
    }
}

impl Runs {
    pub fn len(&self) -> usize {
        match self {
            Runs::Runs { len, .. } => *len,
            Runs::Dense(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    #[inline]
    pub fn push(&mut self, v: u16) {
        match self {
            Runs::Runs {
                starts,
                values,
                len,
            } => {
                if values.last() != Some(&v) {
                    // More runs than a third of the rows: plain ids are smaller.
                    if values.len() > 1024 && values.len() * 3 > *len {
                        let mut dense: Vec<u16> = (0..*len).map(|i| self.get(i)).collect();
                        dense.push(v);
                        *self = Runs::Dense(dense);
                        return;
                    }
                    starts.push(*len as u32);
                    values.push(v);
                }
                *len += 1;
            }
            Runs::Dense(d) => d.push(v),
        }
    }

    /// Appends `f` of each of `rows`, as [`Runs::push`] of each does: the stretches that repeat
    /// the last value (nearly every row: a program uses a stream or two) only add to the length.
    pub fn extend_from<R>(&mut self, rows: &[R], f: impl Fn(&R) -> u16) {
        let mut rows = rows;
        while let Some((r, rest)) = rows.split_first() {
            let v = f(r);
            self.push(v);
            rows = rest;
            if let Runs::Runs { len, .. } = self {
                let same = rows.iter().take_while(|r| f(r) == v).count();
                *len += same;
                rows = &rows[same..];
            }
        }
    }

    /// Value `i`. Panics past the end.
    #[inline]
    pub fn get(&self, i: usize) -> u16 {
        match self {
            Runs::Runs {
                starts,
                values,
                len,
            } => {
                assert!(i < *len, "row {i} past the end ({len})");
                values[starts.partition_point(|&s| s as usize <= i) - 1]
            }
            Runs::Dense(d) => d[i],
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = u16> + '_ {
        (0..self.len()).map(|i| self.get(i))
    }

    /// Writes `vals` at rows `at..` (rows put back in order use it).
    pub fn set_range(&mut self, at: usize, vals: &[u16]) {
        let end = at + vals.len();
        assert!(end <= self.len(), "set_range past the end");
        if vals.is_empty() {
            return;
        }
        let (starts, values, len) = match self {
            Runs::Dense(d) => {
                d[at..end].copy_from_slice(vals);
                return;
            }
            Runs::Runs {
                starts,
                values,
                len,
            } => (starts, values, *len),
        };
        // Only the runs over `at..end` are replaced (rebuilding the column cost 68 ms on a
        // 12M-row trace for a 2,000-row window): the head of the run holding `at`, `vals` as
        // runs, and the rest of the run holding `end - 1` where it goes on past `end`.
        let first = starts.partition_point(|&s| s as usize <= at) - 1;
        let last = starts.partition_point(|&s| (s as usize) < end) - 1;
        let mut new: Vec<(u32, u16)> = Vec::new();
        let mut put = |row: usize, v: u16| {
            if new.last().is_none_or(|&(_, w)| w != v) {
                new.push((row as u32, v));
            }
        };
        if (starts[first] as usize) < at {
            put(starts[first] as usize, values[first]);
        }
        for (k, &v) in vals.iter().enumerate() {
            put(at + k, v);
        }
        let kept = last + 1;
        if end < len && starts.get(kept).is_none_or(|&s| s as usize > end) {
            put(end, values[last]);
        }
        // Runs stay maximal: equal neighbours across the edges are one run.
        let prev = first.checked_sub(1).map(|p| values[p]);
        if prev.is_some() && new.first().map(|&(_, v)| v) == prev {
            new.remove(0);
        }
        let (from, mut to) = (first, kept);
        let tail = new.last().map(|&(_, v)| v).or(prev);
        if tail.is_some() && values.get(to).copied() == tail {
            to += 1;
        }
        starts.splice(from..to, new.iter().map(|&(s, _)| s));
        values.splice(from..to, new.iter().map(|&(_, v)| v));
    }

    pub fn shrink_to_fit(&mut self) {
        match self {
            Runs::Runs { starts, values, .. } => {
                starts.shrink_to_fit();
                values.shrink_to_fit();
            }
            Runs::Dense(d) => d.shrink_to_fit(),
        }
    }

    pub fn heap_bytes(&self) -> usize {
        match self {
            Runs::Runs { starts, values, .. } => starts.capacity() * 4 + values.capacity() * 2,
            Runs::Dense(d) => d.capacity() * 2,
        }
    }
}

impl Runs {
    /// The column from runs (first row of each, ascending from 0, and its value) over `len`
    /// rows, or why they do not make one.
    pub fn from_runs(starts: Vec<u32>, values: Vec<u16>, len: usize) -> Result<Self, &'static str> {
        let ok = starts.len() == values.len()
            && starts.first().is_none_or(|&s| s == 0)
            && starts.windows(2).all(|w| w[0] < w[1])
            && starts.last().is_none_or(|&s| (s as usize) < len)
            && (len == 0) == starts.is_empty();
        if !ok {
            return Err("stream runs out of order or out of range");
        }
        Ok(Runs::Runs {
            starts,
            values,
            len,
        })
    }

    /// The largest id in the column, if any row.
    pub fn max_value(&self) -> Option<u16> {
        match self {
            Runs::Runs { values, .. } => values.iter().copied().max(),
            Runs::Dense(d) => d.iter().copied().max(),
        }
    }
}

impl FromIterator<u16> for Runs {
    fn from_iter<I: IntoIterator<Item = u16>>(iter: I) -> Self {
        let mut r = Runs::default();
        for v in iter {
            r.push(v);
        }
        r
    }
}

impl Extend<u16> for Runs {
    fn extend<I: IntoIterator<Item = u16>>(&mut self, iter: I) {
        for v in iter {
            self.push(v);
        }
    }
}

impl PartialEq for Runs {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().zip(other.iter()).all(|(a, b)| a == b)
    }
}

impl std::fmt::Debug for Runs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// A column whose values can be read and written back by row: what putting a trace's rows back
/// in order (`TraceTable::reorder_within`) needs of every column, plain or compact.
pub trait Column {
    type Item: Copy;
    fn value(&self, i: usize) -> Self::Item;
    /// Writes `values` at rows `at..at + values.len()`.
    fn put(&mut self, at: usize, values: &[Self::Item]);
}

impl<T: Copy> Column for Vec<T> {
    type Item = T;
    fn value(&self, i: usize) -> T {
        self[i]
    }
    fn put(&mut self, at: usize, values: &[T]) {
        self[at..at + values.len()].copy_from_slice(values);
    }
}

impl<T: Word> Column for Packed<T> {
    type Item = T;
    fn value(&self, i: usize) -> T {
        self.get(i)
    }
    fn put(&mut self, at: usize, values: &[T]) {
        self.set_range(at, values);
    }
}

impl Column for Runs {
    type Item = u16;
    fn value(&self, i: usize) -> u16 {
        self.get(i)
    }
    fn put(&mut self, at: usize, values: &[u16]) {
        self.set_range(at, values);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Shifting every value moves only bases and reads back exact, wrapping at the ends.
    #[test]
    fn add_to_all_shifts_every_value() {
        for (seed, delta) in [(1u64, 12_345i64), (2, -7), (3, i64::MIN + 5), (4, 0)] {
            let vals = values(3 * BLOCK + 17, seed);
            let mut p: Packed<i64> = Packed::new();
            for &v in &vals {
                p.push(v);
            }
            p.add_to_all(delta);
            let want: Vec<i64> = vals.iter().map(|v| v.wrapping_add(delta)).collect();
            assert_eq!(p.iter().collect::<Vec<_>>(), want, "seed {seed}");
        }
        // A block whose base becomes i64::MIN.
        let mut p: Packed<i64> = Packed::new();
        for i in 0..BLOCK as i64 + 3 {
            p.push(10 + i);
        }
        p.add_to_all(i64::MIN.wrapping_sub(10));
        assert_eq!(p.get(0), i64::MIN);
        assert_eq!(p.get(BLOCK + 2), i64::MIN + BLOCK as i64 + 2);
    }

    /// Deterministic values with narrow and wide blocks, negative and extreme values.
    fn values(n: usize, seed: u64) -> Vec<i64> {
        let mut x = seed;
        (0..n)
            .map(|i| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                match (i / BLOCK) % 5 {
                    0 => 1_700_000_000_000_000 + (i as i64) * 10 + (x % 7) as i64,
                    1 => (x % 4096) as i64 * 512,
                    2 if i % 97 == 0 => 20 << 30,
                    2 => (x % 1000) as i64,
                    3 => -((x % 100_000) as i64),
                    _ => [i64::MIN, i64::MAX, 0, -1][i % 4],
                }
            })
            .collect()
    }

    /// Batches of every length, starting anywhere in a block: the same column, part for part,
    /// as pushing each value (the table's builder takes rows in batches, `follow.rs`).
    #[test]
    fn a_column_extended_in_batches_is_the_one_pushed() {
        let mut want = values(23 * BLOCK + 101, 11);
        // Blocks spanning exactly a power of two, whose top value needs the widest offset.
        want.extend((0..4 * BLOCK).map(|i| {
            if i % BLOCK == 5 {
                1i64 << (i / BLOCK * 8)
            } else {
                0
            }
        }));
        let pushed: Packed<i64> = want.iter().copied().collect();
        let runs_want: Vec<u16> = want.iter().map(|&v| (v.rem_euclid(3) / 2) as u16).collect();
        let runs_pushed: Runs = runs_want.iter().copied().collect();
        for cuts in [
            vec![1, BLOCK, 3 * BLOCK + 5, 17],
            vec![BLOCK - 1, 2, 4 * BLOCK],
            vec![7 * BLOCK + 3],
            vec![0, 5, 0, 600],
        ] {
            let (mut p, mut r) = (Packed::<i64>::new(), Runs::default());
            let mut at = 0;
            for n in cuts.iter().copied().cycle() {
                let end = (at + n).min(want.len());
                p.extend_from(&want[at..end], |&v| v);
                r.extend_from(&runs_want[at..end], |&v| v);
                at = end;
                if at == want.len() {
                    break;
                }
            }
            assert_eq!(p.parts(), pushed.parts(), "cuts {cuts:?}");
            assert_eq!((p.tail_lo, p.tail_hi), (pushed.tail_lo, pushed.tail_hi));
            assert_eq!(r, runs_pushed, "cuts {cuts:?}");
            assert_eq!(r.iter().collect::<Vec<_>>(), runs_want);
        }
    }

    #[test]
    fn values_read_back_exactly_as_pushed() {
        for n in [
            0,
            1,
            BLOCK - 1,
            BLOCK,
            BLOCK + 1,
            5 * BLOCK + 17,
            40 * BLOCK,
        ] {
            let want = values(n, 7 + n as u64);
            let p: Packed<i64> = want.iter().copied().collect();
            assert_eq!(p.len(), n);
            let got: Vec<i64> = p.iter().collect();
            assert_eq!(got, want, "n {n}");
            let u: Packed<u64> = want.iter().map(|&v| v as u64).collect();
            assert!(u.iter().zip(&want).all(|(a, &b)| a == b as u64));
            // Ranges starting and ending inside blocks and in the tail read block by block.
            for (a, b) in [
                (0, n),
                (n / 3, n / 2),
                (n.saturating_sub(5), n),
                (n / 2, n / 2),
            ] {
                let got: Vec<i64> = p.iter_range(a..b).collect();
                assert_eq!(got, want[a..b], "n {n}, range {a}..{b}");
                assert!(got.iter().enumerate().all(|(k, &v)| v == p.get(a + k)));
            }
        }
    }

    #[test]
    fn a_column_rebuilt_from_its_parts_is_the_same_and_bad_parts_are_refused() {
        for n in [0, 1, BLOCK, 5 * BLOCK + 17, 40 * BLOCK + 3] {
            let p: Packed<i64> = values(n, 11 + n as u64).into_iter().collect();
            let (base, at, bits, tail) = p.parts();
            let parts = PackedParts {
                base: base.to_vec(),
                at: at.to_vec(),
                bits: bits.to_vec(),
                tail: tail.to_vec(),
            };
            let mut q = Packed::<i64>::from_parts(parts.clone()).unwrap();
            assert_eq!(q, p, "n {n}");
            // It stays a working column: pushing past a block boundary.
            q.extend((0..BLOCK as i64).map(|i| i * 3));
            assert_eq!(q.len(), n + BLOCK);
            assert_eq!(q.get(n + BLOCK - 1), (BLOCK as i64 - 1) * 3);
            assert_eq!(
                q.iter().take(n).collect::<Vec<_>>(),
                p.iter().collect::<Vec<_>>()
            );
            if n >= 5 * BLOCK {
                let mut bad = parts.clone();
                bad.at.pop();
                assert!(Packed::<i64>::from_parts(bad).is_err());
                let mut bad = parts.clone();
                bad.tail = vec![0; BLOCK];
                assert!(Packed::<i64>::from_parts(bad).is_err());
                let mut bad = parts.clone();
                bad.bits.truncate(bad.bits.len() - 2);
                assert!(
                    Packed::<i64>::from_parts(bad).is_err(),
                    "a block past its bits"
                );
                let mut bad = parts.clone();
                bad.at[0] = (bad.at[0] & !WIDTH_MASK) | 65;
                assert!(
                    Packed::<i64>::from_parts(bad).is_err(),
                    "wider than 64 bits"
                );
            }
        }
        assert!(Runs::from_runs(vec![0, 5], vec![1, 2], 9).is_ok());
        for (starts, values, len) in [
            (vec![1, 5], vec![1, 2], 9),
            (vec![0, 5], vec![1], 9),
            (vec![0, 9], vec![1, 2], 9),
            (vec![0, 5, 5], vec![1, 2, 3], 9),
            (vec![], vec![], 3),
        ] {
            assert!(Runs::from_runs(starts, values, len).is_err());
        }
    }

    /// A block takes the bits its widest offset needs: 10 bits a value for times 1 ms apart
    /// over 256 ms, 0 for a constant block, 64 for a block spanning all of `i64`.
    #[test]
    fn blocks_take_the_bits_their_offsets_need() {
        let mut p: Packed<i64> = (0..100 * BLOCK as i64)
            .map(|i| 1_700_000_000_000_000 + (i % BLOCK as i64) * 1000)
            .collect();
        p.shrink_to_fit();
        assert!(
            p.at.iter().all(|&a| a & WIDTH_MASK == 18),
            "255 000 needs 18 bits"
        );
        assert!(p.heap_bytes() < 100 * BLOCK * 18 / 8 + 100 * 16 + BLOCK * 8 + 64);
        let c: Packed<u64> = std::iter::repeat_n(7u64, 3 * BLOCK).collect();
        assert!(c.at.iter().all(|&a| a & WIDTH_MASK == 0));
        assert_eq!(c.get(2 * BLOCK + 5), 7);
        let wide: Packed<i64> = (0..BLOCK).map(|i| [i64::MIN, i64::MAX][i % 2]).collect();
        assert_eq!(wide.at[0] & WIDTH_MASK, 64);
        assert_eq!((wide.get(0), wide.get(1)), (i64::MIN, i64::MAX));
    }

    /// Writing a range of a run column equals writing the plain ids, and leaves the runs
    /// maximal (no two neighbours with one value), for ranges at either end, inside one run,
    /// across many, and merging with both neighbours.
    #[test]
    fn runs_set_range_matches_plain_ids() {
        let mut x = 7u64;
        let mut next = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for round in 0..2000 {
            let n = 1 + next(60) as usize;
            let mut want: Vec<u16> = Vec::with_capacity(n);
            for _ in 0..n {
                let v = match want.last() {
                    Some(&v) if next(4) != 0 => v,
                    _ => next(3) as u16,
                };
                want.push(v);
            }
            let mut r: Runs = want.iter().copied().collect();
            let at = next(n as u64) as usize;
            let len = next((n - at) as u64 + 1) as usize;
            let patch: Vec<u16> = (0..len).map(|_| next(3) as u16).collect();
            want[at..at + len].copy_from_slice(&patch);
            r.set_range(at, &patch);
            assert_eq!(r.iter().collect::<Vec<_>>(), want, "round {round}");
            if let Runs::Runs {
                starts,
                values,
                len,
            } = &r
            {
                assert_eq!(*len, n);
                assert_eq!(starts.first(), Some(&0), "round {round}");
                assert!(starts.windows(2).all(|w| w[0] < w[1]), "round {round}");
                assert!(
                    values.windows(2).all(|w| w[0] != w[1]),
                    "round {round}: {values:?}"
                );
            }
        }
    }

    #[test]
    fn set_range_rewrites_blocks_narrow_or_wide() {
        let n = 12 * BLOCK + 30;
        let mut want = values(n, 3);
        let mut p: Packed<i64> = want.iter().copied().collect();
        let mut x = 99u64;
        for round in 0..60 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let at = (x >> 33) as usize % n;
            let len = ((x >> 13) as usize % (3 * BLOCK)).min(n - at);
            let patch = values(len, x | 1);
            want[at..at + len].copy_from_slice(&patch);
            p.set_range(at, &patch);
            let got: Vec<i64> = p.iter().collect();
            assert_eq!(got, want, "round {round}");
            assert!(
                p.stale_bits <= p.bit_len / 2,
                "round {round}: stale bits reclaimed"
            );
        }
    }

    /// A block whose new offsets need more bits moves to the end of the bits; the bits it left
    /// are reclaimed once they are half of them, and every read stays exact.
    #[test]
    fn widened_blocks_move_and_their_old_bits_are_reclaimed() {
        let mut want: Vec<i64> = (0..4 * BLOCK as i64).map(|i| i % 200).collect();
        let mut p: Packed<i64> = want.iter().copied().collect();
        assert!(p.at.iter().all(|&a| a & WIDTH_MASK == 8));
        for round in 0..12usize {
            let b = round % 4;
            let patch: Vec<i64> = (0..BLOCK as i64).map(|k| k << (20 + round * 3)).collect();
            want[b * BLOCK..(b + 1) * BLOCK].copy_from_slice(&patch);
            p.set_range(b * BLOCK, &patch);
            assert_eq!(p.iter().collect::<Vec<_>>(), want, "round {round}");
            assert!(p.stale_bits <= p.bit_len / 2, "round {round}");
        }
        assert!(p.bit_len <= 4 * BLOCK as u64 * 64 * 2);
    }

    #[test]
    fn runs_read_back_exactly_and_fall_back_to_dense() {
        let patterns: [&dyn Fn(usize) -> u16; 3] =
            [&|_| 0, &|i| (i / 1000 % 3) as u16, &|i| (i % 2) as u16];
        for (k, f) in patterns.iter().enumerate() {
            let want: Vec<u16> = (0..20_000).map(f).collect();
            let mut r: Runs = want.iter().copied().collect();
            assert_eq!(r.iter().collect::<Vec<_>>(), want, "pattern {k}");
            assert_eq!(matches!(r, Runs::Dense(_)), k == 2, "pattern {k}");
            r.set_range(5, &[7, 7, 7]);
            let mut patched = want.clone();
            patched[5..8].copy_from_slice(&[7, 7, 7]);
            assert_eq!(r.iter().collect::<Vec<_>>(), patched, "pattern {k}");
        }
    }

    #[test]
    fn partition_point_matches_the_slice() {
        let want: Vec<i64> = (0..3000).map(|i| i * 3 - 100).collect();
        let p: Packed<i64> = want.iter().copied().collect();
        for (a, b) in [(0, 3000), (10, 2000), (500, 501), (7, 7)] {
            for t in [-200, -100, 0, 1, 2999, 5000, 9000] {
                assert_eq!(
                    p.partition_point(a..b, |v| v < t),
                    want[a..b].partition_point(|&v| v < t)
                );
            }
        }
    }
}
