//! 64-bit columns in about 4 bytes a value: times, sizes and live-byte series of big traces.
//!
//! A 12M-event trace spends 8 bytes on each event's time, size and live bytes, but neighbouring
//! values are close: within 256 events times span milliseconds and sizes rarely differ by 4 GiB.
//! [`Packed`] stores each block of [`BLOCK`] values as its lowest value plus a `u32` offset per
//! value; a block whose values span more than `u32` (a 20 GiB segment among small tensors) keeps
//! its values whole. Reads are exact either way; the model shrinks by ~4 bytes per value and
//! column (issue 14: the 1 GB snapshot within half its size in memory).

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

/// Marks a block stored whole in `base` (the block's values are found through `wide`).
const WIDE: i64 = i64::MIN;

/// A column of 64-bit values stored as per-block bases and 4-byte offsets (module docs).
#[derive(Clone, Default)]
pub struct Packed<T> {
    /// Per full block: its lowest value, or [`WIDE`].
    base: Vec<i64>,
    /// One per value of the full blocks: the offset from its block's base (0 in wide blocks).
    off: Vec<u32>,
    /// Wide blocks in order, and their values (`BLOCK` each, same order).
    wide_blocks: Vec<u32>,
    wide_values: Vec<i64>,
    /// Values after the last full block.
    tail: Vec<i64>,
    _t: std::marker::PhantomData<T>,
}

impl<T: Word> Packed<T> {
    pub fn new() -> Self {
        Packed {
            base: Vec::new(),
            off: Vec::new(),
            wide_blocks: Vec::new(),
            wide_values: Vec::new(),
            tail: Vec::with_capacity(BLOCK),
            _t: std::marker::PhantomData,
        }
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.off.len() + self.tail.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Room for `n` more values without growing (address space only until written).
    pub fn reserve(&mut self, n: usize) {
        self.off.reserve(n);
        self.base.reserve(n / BLOCK + 1);
    }

    pub fn shrink_to_fit(&mut self) {
        self.off.shrink_to_fit();
        self.base.shrink_to_fit();
        self.wide_blocks.shrink_to_fit();
        self.wide_values.shrink_to_fit();
    }

    pub fn heap_bytes(&self) -> usize {
        self.base.capacity() * 8
            + self.off.capacity() * 4
            + self.wide_blocks.capacity() * 4
            + self.wide_values.capacity() * 8
            + self.tail.capacity() * 8
    }

    #[inline]
    pub fn push(&mut self, v: T) {
        if self.tail.capacity() == 0 {
            self.tail.reserve_exact(BLOCK);
        }
        self.tail.push(v.to_i64());
        if self.tail.len() == BLOCK {
            let block = std::mem::take(&mut self.tail);
            self.append_block(&block);
            self.tail = block;
            self.tail.clear();
        }
    }

    /// Encodes one full block at the end.
    fn append_block(&mut self, values: &[i64]) {
        debug_assert_eq!(values.len(), BLOCK);
        let (lo, hi) = min_max(values);
        if (hi as i128 - lo as i128) <= u32::MAX as i128 && lo != WIDE {
            self.base.push(lo);
            self.off
                .extend(values.iter().map(|&v| (v as i128 - lo as i128) as u32));
        } else {
            self.wide_blocks.push(self.base.len() as u32);
            self.base.push(WIDE);
            self.off.extend(std::iter::repeat_n(0, BLOCK));
            self.wide_values.extend_from_slice(values);
        }
    }

    /// Where block `b`'s values are in `wide_values`, if it is wide.
    #[inline]
    fn wide_at(&self, b: usize) -> Option<usize> {
        if self.base[b] != WIDE {
            return None;
        }
        let k = self.wide_blocks.binary_search(&(b as u32)).ok()?;
        Some(k * BLOCK)
    }

    /// Value `i`. Panics past the end, like slice indexing.
    #[inline]
    pub fn get(&self, i: usize) -> T {
        let full = self.off.len();
        if i >= full {
            return T::from_i64(self.tail[i - full]);
        }
        let b = i / BLOCK;
        let base = self.base[b];
        if base != WIDE {
            return T::from_i64(base.wrapping_add(self.off[i] as i64));
        }
        match self.wide_at(b) {
            Some(at) => T::from_i64(self.wide_values[at + i % BLOCK]),
            None => T::from_i64(base.wrapping_add(self.off[i] as i64)),
        }
    }

    /// Adds `delta` to every value (wrapping), in O(blocks + wide values): a block's offsets
    /// are relative to its base, so only bases move. A series built relative to an origin
    /// learnt at the end (the live bytes of allocations made before a trace) is shifted this way.
    pub fn add_to_all(&mut self, delta: i64) {
        if delta == 0 {
            return;
        }
        if self
            .base
            .iter()
            .any(|&b| b != WIDE && b.wrapping_add(delta) == WIDE)
        {
            // A base would land on the wide marker: encode the values again (never for byte
            // series, whose values are far from i64::MIN).
            let values: Vec<i64> = self.iter().map(|v| v.to_i64()).collect();
            *self = Packed::new();
            for v in values {
                self.push(T::from_i64(v.wrapping_add(delta)));
            }
            return;
        }
        for b in &mut self.base {
            if *b != WIDE {
                *b = b.wrapping_add(delta);
            }
        }
        for v in self.wide_values.iter_mut().chain(self.tail.iter_mut()) {
            *v = v.wrapping_add(delta);
        }
    }

    /// Values `range` in order.
    pub fn iter_range(&self, range: std::ops::Range<usize>) -> impl Iterator<Item = T> + '_ {
        range.map(move |i| self.get(i))
    }

    pub fn iter(&self) -> impl Iterator<Item = T> + '_ {
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
        let full = self.off.len();
        let mut i = at;
        while i < end {
            if i >= full {
                self.tail[i - full] = values[i - at].to_i64();
                i += 1;
                continue;
            }
            let b = i / BLOCK;
            let start = b * BLOCK;
            let mut block: Vec<i64> = (start..start + BLOCK)
                .map(|k| self.get(k).to_i64())
                .collect();
            let stop = end.min(start + BLOCK);
            for k in i..stop {
                block[k - start] = values[k - at].to_i64();
            }
            self.rewrite_block(b, &block);
            i = stop;
        }
    }

    /// Re-encodes full block `b` with `values`.
    fn rewrite_block(&mut self, b: usize, values: &[i64]) {
        let start = b * BLOCK;
        let (lo, hi) = min_max(values);
        let narrow = (hi as i128 - lo as i128) <= u32::MAX as i128 && lo != WIDE;
        let was = self.wide_at(b);
        match (narrow, was) {
            (true, None) => {
                self.base[b] = lo;
                for (k, &v) in values.iter().enumerate() {
                    self.off[start + k] = (v as i128 - lo as i128) as u32;
                }
            }
            (true, Some(at)) => {
                let k = at / BLOCK;
                self.wide_blocks.remove(k);
                self.wide_values.drain(at..at + BLOCK);
                self.base[b] = lo;
                for (k, &v) in values.iter().enumerate() {
                    self.off[start + k] = (v as i128 - lo as i128) as u32;
                }
            }
            (false, Some(at)) => self.wide_values[at..at + BLOCK].copy_from_slice(values),
            (false, None) => {
                let k = self.wide_blocks.partition_point(|&w| (w as usize) < b);
                self.wide_blocks.insert(k, b as u32);
                let at = k * BLOCK;
                self.wide_values.splice(at..at, values.iter().copied());
                self.base[b] = WIDE;
                self.off[start..start + BLOCK].fill(0);
            }
        }
    }
}

/// A [`Packed`] column as the model file stores it (`store.rs`): its parts as they are in
/// memory, so a reopened model is the column itself, not a re-encoding of every value.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct PackedParts {
    pub base: Vec<i64>,
    pub off: Vec<u32>,
    pub wide_blocks: Vec<u32>,
    pub wide_values: Vec<i64>,
    pub tail: Vec<i64>,
}

impl<T: Word> Packed<T> {
    /// The column's parts, for the model file: bases, offsets, wide blocks, their values, tail.
    #[allow(clippy::type_complexity)]
    pub fn parts(&self) -> (&[i64], &[u32], &[u32], &[i64], &[i64]) {
        (
            &self.base,
            &self.off,
            &self.wide_blocks,
            &self.wide_values,
            &self.tail,
        )
    }

    /// The column from its parts, or why they do not make one (every read is then in bounds
    /// and every wide block found).
    pub fn from_parts(p: PackedParts) -> Result<Self, &'static str> {
        if p.off.len() != p.base.len() * BLOCK {
            return Err("packed column: offsets do not fill its blocks");
        }
        if p.tail.len() >= BLOCK {
            return Err("packed column: tail of a full block");
        }
        if p.wide_values.len() != p.wide_blocks.len() * BLOCK {
            return Err("packed column: wide values do not fill its wide blocks");
        }
        if !p.wide_blocks.windows(2).all(|w| w[0] < w[1])
            || p.wide_blocks
                .iter()
                .any(|&b| p.base.get(b as usize) != Some(&WIDE))
            || p.base.iter().filter(|&&b| b == WIDE).count() != p.wide_blocks.len()
        {
            return Err("packed column: wide blocks do not match its bases");
        }
        let mut tail = p.tail;
        tail.reserve_exact(BLOCK - tail.len());
        Ok(Packed {
            base: p.base,
            off: p.off,
            wide_blocks: p.wide_blocks,
            wide_values: p.wide_values,
            tail,
            _t: std::marker::PhantomData,
        })
    }
}

fn min_max(values: &[i64]) -> (i64, i64) {
    values
        .iter()
        .fold((i64::MAX, i64::MIN), |(lo, hi), &v| (lo.min(v), hi.max(v)))
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

    /// Shifting every value moves only bases, reads back exact, and survives a base that would
    /// land on the wide marker.
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
        // A narrow block whose base becomes i64::MIN.
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
        }
    }

    #[test]
    fn a_column_rebuilt_from_its_parts_is_the_same_and_bad_parts_are_refused() {
        for n in [0, 1, BLOCK, 5 * BLOCK + 17, 40 * BLOCK + 3] {
            let p: Packed<i64> = values(n, 11 + n as u64).into_iter().collect();
            let (base, off, wide_blocks, wide_values, tail) = p.parts();
            let parts = PackedParts {
                base: base.to_vec(),
                off: off.to_vec(),
                wide_blocks: wide_blocks.to_vec(),
                wide_values: wide_values.to_vec(),
                tail: tail.to_vec(),
            };
            let mut q = Packed::<i64>::from_parts(parts.clone()).unwrap();
            assert_eq!(q, p, "n {n}");
            // It stays a working column: pushing past a block boundary.
            q.extend((0..BLOCK as i64).map(|i| i * 3));
            assert_eq!(q.len(), n + BLOCK);
            assert_eq!(q.get(n + BLOCK - 1), (BLOCK as i64 - 1) * 3);
            if n >= 5 * BLOCK {
                let mut bad = parts.clone();
                bad.off.pop();
                assert!(Packed::<i64>::from_parts(bad).is_err());
                let mut bad = parts.clone();
                bad.tail = vec![0; BLOCK];
                assert!(Packed::<i64>::from_parts(bad).is_err());
                let mut bad = parts.clone();
                assert!(
                    !bad.wide_blocks.is_empty(),
                    "the test values have wide blocks"
                );
                bad.wide_blocks[0] += 1;
                assert!(Packed::<i64>::from_parts(bad).is_err());
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

    #[test]
    fn narrow_blocks_take_four_bytes_a_value() {
        let mut p: Packed<i64> = (0..100 * BLOCK as i64)
            .map(|i| 1_700_000_000_000_000 + i * 1000)
            .collect();
        p.shrink_to_fit();
        assert!(p.wide_blocks.is_empty());
        assert!(p.heap_bytes() < 100 * BLOCK * 4 + 100 * 8 + BLOCK * 8 + 64);
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
        }
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
