//! The model file: a parsed [`Snapshot`]'s tables in a compact binary form, so a snapshot is
//! parsed from its pickle once and reopened from this file afterwards (tens of milliseconds for a
//! million entries, against parsing the pickle again).
//!
//! Layout: the magic `MSMODEL\0`, a version, then each table in a fixed order; integers are
//! little-endian, columns are written as raw arrays, strings as length + UTF-8. Lookup indexes
//! (string → id, frame → id, stack → id) are not stored: they are rebuilt while reading, which
//! also re-checks every id. The analyses' index ([`Index`]) follows when it was given: rebuilding
//! it costs a pass over the trace (0.27 s on 12M events) where reading it costs less than half,
//! so a server reopening a large snapshot does not re-derive it. Its ids and positions are
//! checked against the tables as they are read, so no later query can index out of bounds. The file ends with the magic again, so a file cut short by a crash is
//! detected, then the XXH3-128 checksum of everything before it, so flipped bytes are detected
//! instead of served as wrong answers. It is a cache: the server keeps the original upload and
//! rebuilds the model from it when either check fails.

use crate::packed::{Packed, PackedParts, Runs, Word};
use std::io::{self, Read, Write};

use crate::analysis::index::{
    Allocation, Checkpoint, DeviceIndex, EventAllocations, Fitted, Ids, Index, LazyViews, NONE,
    PreTrace, SERIES_BLOCK, SegmentSpan, TracedCounts,
};
use crate::decompress::Hashing;
use crate::error::{Error, Result};
use crate::intern::StrId;
use crate::model::*;

const MAGIC: &[u8; 8] = b"MSMODEL\0";
/// Bump when the layout changes; older files are then rebuilt from the originals.
/// 2: the checksum at the end. 3: sizes and times as their packed parts, streams as runs of ids
/// (the file as compact as the tables: 37 → ~21 bytes a trace entry). 4: the index may follow.
/// 5: the first timeline view keeps every peak in view (its stored active span is refitted); the
/// allocated peak and the blocks that are not their request rounded may follow the derived views.
/// 6: the original's name (the server's sha256 of the upload) after the version, so a model file
/// copied over another snapshot's is refused, not served as that one. 7: packed columns as
/// bit-packed offsets (`packed.rs`), addresses and stacks packed too; an allocation's stack is its
/// alloc row's (made before the trace: kept with its address, size and stream); each event's
/// allocation packed, with the events of none in a bitmap. 8: checkpoints' ids as LEB128 deltas.
pub const VERSION: u32 = 8;

struct W<'a, T: Write> {
    w: &'a mut T,
    buf: Vec<u8>,
    hasher: xxhash_rust::xxh3::Xxh3,
}

impl<T: Write> W<'_, T> {
    fn flush_if_big(&mut self) -> io::Result<()> {
        if self.buf.len() >= 1 << 16 {
            self.flush()?;
        }
        Ok(())
    }
    fn flush(&mut self) -> io::Result<()> {
        self.hasher.update(&self.buf);
        self.w.write_all(&self.buf)?;
        self.buf.clear();
        Ok(())
    }
    fn u8(&mut self, v: u8) -> io::Result<()> {
        self.buf.push(v);
        self.flush_if_big()
    }
    fn u32(&mut self, v: u32) -> io::Result<()> {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self.flush_if_big()
    }
    fn u64(&mut self, v: u64) -> io::Result<()> {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self.flush_if_big()
    }
    fn i64(&mut self, v: i64) -> io::Result<()> {
        self.u64(v as u64)
    }
    fn bytes(&mut self, b: &[u8]) -> io::Result<()> {
        self.u32(b.len() as u32)?;
        self.buf.extend_from_slice(b);
        self.flush_if_big()
    }
    /// A length-prefixed array of fixed-size values, in bulk.
    fn array<const N: usize, V: Copy>(
        &mut self,
        values: &[V],
        bytes: impl Fn(V) -> [u8; N],
    ) -> io::Result<()> {
        self.len(values.len())?;
        for chunk in values.chunks(1 << 14) {
            for &v in chunk {
                self.buf.extend_from_slice(&bytes(v));
            }
            self.flush_if_big()?;
        }
        Ok(())
    }
    fn packed<V: Word>(&mut self, p: &Packed<V>) -> io::Result<()> {
        let (base, at, bits, tail) = p.parts();
        self.array(base, i64::to_le_bytes)?;
        self.array(at, u64::to_le_bytes)?;
        self.array(bits, u64::to_le_bytes)?;
        self.array(tail, i64::to_le_bytes)
    }
    fn len(&mut self, n: usize) -> io::Result<()> {
        self.u32(u32::try_from(n).map_err(|_| io::Error::other("table too large"))?)
    }
}

/// Writes `snap` as a model file, with `index` (built from `snap`) when given, for no original in
/// particular (tools, tests).
pub fn write<T: Write>(snap: &Snapshot, index: Option<&Index>, out: &mut T) -> io::Result<()> {
    write_for(snap, index, "", out)
}

/// Writes `snap` as the model file of the original named `origin` (the server: the upload's
/// sha256), which [`read_for`] checks.
pub fn write_for<T: Write>(
    snap: &Snapshot,
    index: Option<&Index>,
    origin: &str,
    out: &mut T,
) -> io::Result<()> {
    let mut w = W {
        w: out,
        buf: Vec::with_capacity(1 << 17),
        hasher: xxhash_rust::xxh3::Xxh3::new(),
    };
    w.buf.extend_from_slice(MAGIC);
    w.u32(VERSION)?;
    w.bytes(origin.as_bytes())?;
    let f = &snap.format;
    for s in [
        f.encoding.as_str(),
        f.compression.as_str(),
        f.layout.as_str(),
    ] {
        w.bytes(s.as_bytes())?;
    }
    w.u8(f.protocol)?;
    w.u64(f.decoded_bytes)?;

    w.len(snap.strings.len())?;
    for i in 0..snap.strings.len() {
        w.bytes(snap.strings.get(StrId(i as u32)).as_bytes())?;
    }
    w.len(snap.frames.len())?;
    for i in 0..snap.frames.len() {
        let fr = snap.frames.get(FrameId(i as u32));
        w.u32(fr.filename.0)?;
        w.u32(fr.name.0)?;
        w.u32(fr.line)?;
    }
    w.len(snap.stacks.len())?;
    for i in 0..snap.stacks.len() {
        let st = snap.stacks.get(StackId(i as u32));
        w.len(st.len())?;
        for fid in st {
            w.u32(fid.0)?;
        }
    }
    w.len(snap.segments.len())?;
    for s in &snap.segments {
        w.i64(s.device as i64)?;
        for v in [
            s.address,
            s.total_size,
            s.allocated_size,
            s.active_size,
            s.requested_size,
            s.stream,
        ] {
            w.u64(v)?;
        }
        w.u8(segment_type_code(s.segment_type))?;
        w.i64(s.pool_id.0)?;
        w.i64(s.pool_id.1)?;
        w.u8(s.is_expandable as u8)?;
        w.u32(s.stack.0)?;
        w.u32(s.blocks.start)?;
        w.u32(s.blocks.end)?;
    }
    w.len(snap.blocks.len())?;
    for b in &snap.blocks {
        w.u32(b.segment)?;
        w.u64(b.address)?;
        w.u64(b.size)?;
        w.u64(b.requested_size)?;
        w.u8(b.state as u8)?;
        w.u32(b.stack.0)?;
    }
    let t = &snap.trace;
    w.len(t.len())?;
    for &a in &t.action {
        w.u8(a as u8)?;
    }
    w.packed(&t.addr)?;
    w.packed(&t.size)?;
    w.array(&t.streams, u64::to_le_bytes)?;
    match &t.stream_id {
        Runs::Runs {
            starts,
            values,
            len,
        } => {
            w.u8(0)?;
            w.array(starts, u32::to_le_bytes)?;
            w.array(values, u16::to_le_bytes)?;
            w.len(*len)?;
        }
        Runs::Dense(ids) => {
            w.u8(1)?;
            w.array(ids, u16::to_le_bytes)?;
        }
    }
    w.packed(&t.time_us)?;
    w.packed(&t.stack)?;
    w.len(t.device_free.len())?;
    for &(r, v) in &t.device_free {
        w.u32(r)?;
        w.u64(v)?;
    }
    for col in [&t.compile_context, &t.user_metadata, &t.other_action] {
        w.len(col.len())?;
        for &(r, v) in col {
            w.u32(r)?;
            w.u32(v.0)?;
        }
    }
    w.len(snap.devices.len())?;
    for d in &snap.devices {
        w.i64(d.device as i64)?;
        w.u32(d.rows.start)?;
        w.u32(d.rows.end)?;
    }
    w.len(snap.annotations.len())?;
    for a in &snap.annotations {
        w.u32(a.name.0)?;
        w.u8(a.start as u8)?;
        w.i64(a.device as i64)?;
        w.i64(a.time_us)?;
    }
    let settings = snap
        .allocator_settings
        .as_ref()
        .map(|v| v.to_string())
        .unwrap_or_default();
    w.bytes(settings.as_bytes())?;
    match index {
        Some(index) => {
            w.u8(1)?;
            write_index(&mut w, index)?;
        }
        None => w.u8(0)?,
    }
    w.buf.extend_from_slice(MAGIC);
    w.flush()?;
    let sum = w.hasher.digest128().to_le_bytes();
    w.w.write_all(&sum)?;
    w.w.flush()
}

struct R<'h, T: Read> {
    r: Hashing<'h, T>,
    offset: u64,
}

impl<T: Read> R<'_, T> {
    fn bad(&self, what: &str) -> Error {
        Error::Malformed {
            offset: self.offset,
            message: format!("model file: {what}; it will be rebuilt from the original"),
        }
    }
    fn exact<const N: usize>(&mut self) -> Result<[u8; N]> {
        let mut b = [0; N];
        self.r
            .read_exact(&mut b)
            .map_err(|_| self.bad("ends early"))?;
        self.offset += N as u64;
        Ok(b)
    }
    fn u8(&mut self) -> Result<u8> {
        Ok(self.exact::<1>()?[0])
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.exact()?))
    }
    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.exact()?))
    }
    fn i64(&mut self) -> Result<i64> {
        Ok(self.u64()? as i64)
    }
    fn string(&mut self) -> Result<String> {
        let n = self.u32()? as u64;
        let mut s = Vec::new();
        (&mut self.r)
            .take(n)
            .read_to_end(&mut s)
            .map_err(|_| self.bad("ends early"))?;
        if s.len() as u64 != n {
            return Err(self.bad("ends early"));
        }
        self.offset += n;
        String::from_utf8(s).map_err(|_| self.bad("string is not UTF-8"))
    }
    /// `n` little-endian values of `N` bytes each, read in blocks. The room reserved up front is
    /// capped: a damaged length runs into the file's end (an error) before it takes memory.
    fn column<const N: usize, V>(
        &mut self,
        n: usize,
        mut conv: impl FnMut([u8; N]) -> V,
    ) -> Result<Vec<V>> {
        let mut out = Vec::with_capacity(n.min(64 << 20));
        let mut buf = vec![0u8; (1 << 16) * N];
        let mut left = n;
        while left > 0 {
            let k = left.min(1 << 16);
            self.r
                .read_exact(&mut buf[..k * N])
                .map_err(|_| self.bad("ends early"))?;
            self.offset += (k * N) as u64;
            out.extend(
                buf[..k * N]
                    .chunks_exact(N)
                    .map(|c| conv(c.try_into().expect("chunk of N"))),
            );
            left -= k;
        }
        Ok(out)
    }
    /// A length-prefixed array, as [`W::array`] wrote it.
    fn array<const N: usize, V>(&mut self, conv: impl FnMut([u8; N]) -> V) -> Result<Vec<V>> {
        let n = self.u32()? as usize;
        self.column(n, conv)
    }
    /// A packed column of `n` values, as [`W::packed`] wrote it.
    fn packed<V: Word>(&mut self, n: usize) -> Result<Packed<V>> {
        let parts = PackedParts {
            base: self.array(i64::from_le_bytes)?,
            at: self.array(u64::from_le_bytes)?,
            bits: self.array(u64::from_le_bytes)?,
            tail: self.array(i64::from_le_bytes)?,
        };
        let p = Packed::from_parts(parts).map_err(|e| self.bad(e))?;
        if p.len() != n {
            return Err(self.bad("packed column of the wrong length"));
        }
        Ok(p)
    }
}

/// Reads a model file written by [`write`](fn@write) or [`write_for`], whatever its original: the
/// snapshot, and its index if one was stored.
pub fn read<T: Read>(input: T) -> Result<(Snapshot, Option<Index>)> {
    read_checked(input, None)
}

/// Reads the model file of the original named `origin`; a file written for another original
/// (copied over this one's) is refused.
pub fn read_for<T: Read>(input: T, origin: &str) -> Result<(Snapshot, Option<Index>)> {
    read_checked(input, Some(origin))
}

fn read_checked<T: Read>(input: T, origin: Option<&str>) -> Result<(Snapshot, Option<Index>)> {
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    let mut r = R {
        r: Hashing {
            inner: input,
            hasher: &mut hasher,
        },
        offset: 0,
    };
    if &r.exact::<8>()? != MAGIC {
        return Err(r.bad("wrong magic"));
    }
    if r.u32()? != VERSION {
        return Err(r.bad("older version"));
    }
    let written_for = r.string()?;
    if origin.is_some_and(|o| o != written_for) {
        return Err(r.bad("written for another original (a model file copied over this one's)"));
    }
    let mut snap = Snapshot::default();
    let name = r.string()?;
    snap.format.encoding = crate::model::Encoding::ALL
        .into_iter()
        .find(|e| e.as_str() == name)
        .ok_or_else(|| r.bad("unknown encoding"))?;
    let name = r.string()?;
    snap.format.compression = crate::model::Compression::ALL
        .into_iter()
        .find(|c| c.as_str() == name)
        .ok_or_else(|| r.bad("unknown compression"))?;
    let name = r.string()?;
    snap.format.layout = crate::model::Layout::ALL
        .into_iter()
        .find(|l| l.as_str() == name)
        .ok_or_else(|| r.bad("unknown layout"))?;
    snap.format.protocol = r.u8()?;
    snap.format.decoded_bytes = r.u64()?;

    let n = r.u32()? as usize;
    for i in 0..n {
        let s = r.string()?;
        if snap.strings.intern(&s).0 as usize != i {
            return Err(r.bad("duplicate string"));
        }
    }
    let n_strings = n as u32;
    let str_id = |r: &R<T>, v: u32| {
        if v < n_strings {
            Ok(StrId(v))
        } else {
            Err(r.bad("string id out of range"))
        }
    };
    let n = r.u32()? as usize;
    for i in 0..n {
        let (filename, name, line) = (r.u32()?, r.u32()?, r.u32()?);
        let f = Frame {
            filename: str_id(&r, filename)?,
            name: str_id(&r, name)?,
            line,
        };
        if snap.frames.intern(f).0 as usize != i {
            return Err(r.bad("duplicate frame"));
        }
    }
    let n_frames = n as u32;
    let n = r.u32()? as usize;
    let mut frames = Vec::new();
    for i in 0..n {
        let len = r.u32()? as usize;
        frames.clear();
        for _ in 0..len {
            let f = r.u32()?;
            if f >= n_frames {
                return Err(r.bad("frame id out of range"));
            }
            frames.push(FrameId(f));
        }
        if snap.stacks.intern(&frames).0 as usize != i {
            return Err(r.bad("duplicate stack"));
        }
    }
    let n_stacks = n as u32;
    let stack_id = |r: &R<T>, v: u32| {
        if v < n_stacks.max(1) {
            Ok(StackId(v))
        } else {
            Err(r.bad("stack id out of range"))
        }
    };
    let n = r.u32()? as usize;
    for _ in 0..n {
        let device = r.i64()? as i32;
        let mut v = [0u64; 6];
        for x in &mut v {
            *x = r.u64()?;
        }
        let segment_type = segment_type_of(r.u8()?);
        let pool_id = (r.i64()?, r.i64()?);
        let is_expandable = r.u8()? != 0;
        let stack = {
            let v = r.u32()?;
            stack_id(&r, v)?
        };
        let blocks = r.u32()?..r.u32()?;
        snap.segments.push(Segment {
            device,
            address: v[0],
            total_size: v[1],
            allocated_size: v[2],
            active_size: v[3],
            requested_size: v[4],
            stream: v[5],
            segment_type,
            pool_id,
            is_expandable,
            stack,
            blocks,
        });
    }
    let n = r.u32()? as usize;
    for _ in 0..n {
        let segment = r.u32()?;
        let (address, size, requested_size) = (r.u64()?, r.u64()?, r.u64()?);
        let state = match r.u8()? {
            0 => BlockState::ActiveAllocated,
            1 => BlockState::ActivePendingFree,
            2 => BlockState::Inactive,
            _ => BlockState::Unknown,
        };
        let stack = {
            let v = r.u32()?;
            stack_id(&r, v)?
        };
        snap.blocks.push(Block {
            segment,
            address,
            size,
            requested_size,
            state,
            stack,
        });
    }
    let n_blocks = snap.blocks.len() as u32;
    if snap
        .segments
        .iter()
        .any(|s| s.blocks.start > s.blocks.end || s.blocks.end > n_blocks)
    {
        return Err(r.bad("block range out of range"));
    }
    let n = r.u32()? as usize;
    let t = &mut snap.trace;
    let mut bad_action = false;
    t.action = r.column::<1, _>(n, |[b]| {
        let a = Action::KNOWN.get(b as usize).copied();
        bad_action |= a.is_none() && b != Action::Other as u8;
        a.unwrap_or(Action::Other)
    })?;
    if bad_action {
        return Err(r.bad("unknown action code"));
    }
    t.addr = r.packed(n)?;
    t.size = r.packed(n)?;
    t.streams = r.array(u64::from_le_bytes)?;
    t.stream_id = match r.u8()? {
        0 => {
            let starts = r.array(u32::from_le_bytes)?;
            let values = r.array(u16::from_le_bytes)?;
            let len = r.u32()? as usize;
            Runs::from_runs(starts, values, len).map_err(|e| r.bad(e))?
        }
        1 => Runs::Dense(r.array(u16::from_le_bytes)?),
        _ => return Err(r.bad("unknown stream column kind")),
    };
    if t.stream_id.len() != n
        || t.stream_id
            .max_value()
            .is_some_and(|v| v as usize >= t.streams.len())
        || (n > 0 && t.streams.first() != Some(&0))
    {
        return Err(r.bad("stream ids out of range"));
    }
    t.time_us = r.packed(n)?;
    t.stack = r.packed(n)?;
    if t.stack.iter().any(|s| s.0 >= n_stacks.max(1)) {
        return Err(r.bad("stack id out of range"));
    }
    let k = r.u32()? as usize;
    for _ in 0..k {
        let (row, v) = (r.u32()?, r.u64()?);
        snap.trace.device_free.push((row, v));
    }
    for which in 0..3 {
        let k = r.u32()? as usize;
        let mut col = Vec::with_capacity(k.min(1 << 20));
        for _ in 0..k {
            let row = r.u32()?;
            col.push((row, {
                let v = r.u32()?;
                str_id(&r, v)?
            }));
        }
        match which {
            0 => snap.trace.compile_context = col,
            1 => snap.trace.user_metadata = col,
            _ => snap.trace.other_action = col,
        }
    }
    let rows = snap.trace.len() as u32;
    let n = r.u32()? as usize;
    for _ in 0..n {
        let device = r.i64()? as i32;
        let range = r.u32()?..r.u32()?;
        if range.start > range.end || range.end > rows {
            return Err(r.bad("device rows out of range"));
        }
        snap.devices.push(DeviceTrace {
            device,
            rows: range,
        });
    }
    let n = r.u32()? as usize;
    for _ in 0..n {
        let name = {
            let v = r.u32()?;
            str_id(&r, v)?
        };
        let start = r.u8()? != 0;
        let device = r.i64()? as i32;
        let time_us = r.i64()?;
        snap.annotations.push(Annotation {
            name,
            start,
            device,
            time_us,
        });
    }
    let settings = r.string()?;
    if !settings.is_empty() {
        snap.allocator_settings =
            Some(serde_json::from_str(&settings).map_err(|_| r.bad("settings are not JSON"))?);
    }
    let index = match r.u8()? {
        0 => None,
        1 => Some(read_index(&mut r, &snap, n_stacks.max(1))?),
        _ => return Err(r.bad("unknown index marker")),
    };
    if &r.exact::<8>()? != MAGIC {
        return Err(r.bad("no end marker"));
    }
    let want = r.r.hasher.digest128().to_le_bytes();
    let mut got = [0u8; 16];
    r.r.inner
        .read_exact(&mut got)
        .map_err(|_| r.bad("no checksum"))?;
    if got != want {
        return Err(r.bad("checksum mismatch (the file changed after it was written)"));
    }
    Ok((snap, index))
}

fn segment_type_code(t: SegmentType) -> u8 {
    match t {
        SegmentType::Small => 0,
        SegmentType::Large => 1,
        SegmentType::Unknown => 2,
    }
}

fn segment_type_of(code: u8) -> SegmentType {
    match code {
        0 => SegmentType::Small,
        1 => SegmentType::Large,
        _ => SegmentType::Unknown,
    }
}

fn write_index<T: Write>(w: &mut W<T>, index: &Index) -> io::Result<()> {
    w.len(index.devices.len())?;
    for d in &index.devices {
        w.i64(d.device as i64)?;
        w.u32(d.first_row)?;
        w.u32(d.len)?;
        w.packed(&d.live_bytes)?;
        w.len(d.live_blocks.len())?;
        for &(lo, hi) in &d.live_blocks {
            w.u64(lo)?;
            w.u64(hi)?;
        }
        w.len(d.reserved_changes.len())?;
        for &(p, bytes) in &d.reserved_changes {
            w.u32(p)?;
            w.u64(bytes)?;
        }
        w.u64(d.live_at_start)?;
        w.u64(d.reserved_at_start)?;
        w.array(&d.allocations, |a: Allocation| {
            let mut b = [0u8; 12];
            for (k, v) in [a.start, a.free_requested, a.end].into_iter().enumerate() {
                b[k * 4..k * 4 + 4].copy_from_slice(&v.to_le_bytes());
            }
            b
        })?;
        w.packed(&d.event_allocation.ids)?;
        w.array(&d.event_allocation.none, u64::to_le_bytes)?;
        w.len(d.segments.len())?;
        for sp in &d.segments {
            w.u64(sp.address)?;
            w.u64(sp.size)?;
            w.u64(sp.stream)?;
            w.u8(segment_type_code(sp.segment_type))?;
            w.i64(sp.pool_id.0)?;
            w.i64(sp.pool_id.1)?;
            w.u8(sp.is_expandable as u8)?;
            w.u32(sp.start)?;
            w.u32(sp.end)?;
        }
        w.len(d.checkpoints.len())?;
        for c in &d.checkpoints {
            w.u32(c.position)?;
            w.len(c.alive.len())?;
            w.array(c.alive.bytes(), u8::to_le_bytes)?;
        }
        w.len(d.pre_trace.len())?;
        for p in &d.pre_trace {
            w.u32(p.id)?;
            w.u64(p.addr)?;
            w.u64(p.size)?;
            w.u64(p.stream)?;
            w.u32(p.stack.0)?;
        }
        w.u32(d.peak_position)?;
        w.u64(d.peak_live_bytes)?;
        w.u32(d.predating_alive)?;
        w.u32(d.predating_freed)?;
        for c in d.traced.actions {
            w.u64(c)?;
        }
        w.u64(d.traced.alive_at_end)?;
        w.u64(d.traced.alive_at_end_bytes)?;
        w.u64(d.traced.peak_bytes)?;
        match d.lazy.top_by_size.get() {
            Some(top) => {
                w.u8(1)?;
                w.array(top, u32::to_le_bytes)?;
            }
            None => w.u8(0)?,
        }
        match d.lazy.active_span.get() {
            None => w.u8(0)?,
            Some(None) => w.u8(1)?,
            Some(Some(f)) => {
                w.u8(2)?;
                w.i64(f.from_us)?;
                w.i64(f.to_us)?;
                w.u32(f.events_before)?;
                w.u32(f.events_after)?;
                w.i64(f.idle_before_us)?;
                w.i64(f.idle_after_us)?;
            }
        }
        match d.lazy.allocated_peak.get() {
            None => w.u8(0)?,
            Some(p) => {
                w.u8(1)?;
                w.u64(p.bytes)?;
                w.u32(p.position)?;
            }
        }
        // Worked out with the allocated peak: the blocks that are not their request rounded.
        match d.lazy.block_sizes.get() {
            None => w.u8(0)?,
            Some(sizes) => {
                w.u8(1)?;
                let ids: Vec<u32> = sizes.iter().map(|&(id, _)| id).collect();
                let bytes: Vec<u64> = sizes.iter().map(|&(_, b)| b).collect();
                w.array(&ids, u32::to_le_bytes)?;
                w.array(&bytes, u64::to_le_bytes)?;
            }
        }
    }
    Ok(())
}

/// Reads what [`write_index`] wrote, checking it against `snap`: the devices are the ones
/// `Index::new` makes (each device trace in order, then the untraced devices), and every
/// allocation id, event position and stack id is in range.
fn read_index<T: Read>(r: &mut R<T>, snap: &Snapshot, n_stacks: u32) -> Result<Index> {
    let n = r.u32()? as usize;
    if n < snap.devices.len() || n > snap.devices.len() + snap.segments.len() {
        return Err(r.bad("index: wrong number of devices"));
    }
    let mut devices = Vec::with_capacity(n);
    for k in 0..n {
        let device = r.i64()? as i32;
        let (first_row, len) = (r.u32()?, r.u32()?);
        let fits = match snap.devices.get(k) {
            Some(t) => {
                t.device == device && t.rows.start == first_row && t.rows.len() == len as usize
            }
            None => len == 0,
        };
        if !fits {
            return Err(r.bad("index: devices do not match the trace"));
        }
        let live_bytes = r.packed(len as usize)?;
        let blocks = r.u32()? as usize;
        if blocks != (len as usize).div_ceil(SERIES_BLOCK) {
            return Err(r.bad("index: wrong number of series blocks"));
        }
        let mut live_blocks = Vec::with_capacity(blocks);
        for _ in 0..blocks {
            live_blocks.push((r.u64()?, r.u64()?));
        }
        let changes = r.u32()? as usize;
        let mut reserved_changes = Vec::with_capacity(changes.min(1 << 20));
        for _ in 0..changes {
            reserved_changes.push((r.u32()?, r.u64()?));
        }
        if !reserved_changes.windows(2).all(|w| w[0].0 < w[1].0) {
            return Err(r.bad("index: reserved changes out of order"));
        }
        let live_at_start = r.u64()?;
        let reserved_at_start = r.u64()?;
        let allocations: Vec<Allocation> = r.array::<12, _>(|b| {
            let v = |k: usize| u32::from_le_bytes(b[k * 4..k * 4 + 4].try_into().expect("4 bytes"));
            Allocation {
                start: v(0),
                free_requested: v(1),
                end: v(2),
            }
        })?;
        let n_alloc = allocations.len() as u32;
        let event = |e: u32| e == NONE || e < len;
        if allocations
            .iter()
            .any(|a| !event(a.start) || !event(a.free_requested) || !event(a.end))
        {
            return Err(r.bad("index: allocation out of range"));
        }
        let ids = r.packed(len as usize)?;
        let none = r.array(u64::from_le_bytes)?;
        let event_allocation =
            EventAllocations::from_parts(ids, none, len as usize).map_err(|e| r.bad(e))?;
        let mut events = event_allocation.reader();
        if (0..len).any(|e| {
            let a = events.get(e);
            a != NONE && a >= n_alloc
        }) {
            return Err(r.bad("index: event allocations out of range"));
        }
        let k = r.u32()? as usize;
        let mut segments = Vec::with_capacity(k.min(1 << 20));
        for _ in 0..k {
            let (address, size, stream) = (r.u64()?, r.u64()?, r.u64()?);
            let segment_type = segment_type_of(r.u8()?);
            let pool_id = (r.i64()?, r.i64()?);
            let is_expandable = r.u8()? != 0;
            segments.push(SegmentSpan {
                address,
                size,
                stream,
                segment_type,
                pool_id,
                is_expandable,
                start: r.u32()?,
                end: r.u32()?,
            });
        }
        let k = r.u32()? as usize;
        let mut checkpoints = Vec::with_capacity(k.min(1 << 20));
        for _ in 0..k {
            let position = r.u32()?;
            let n = r.u32()?;
            let bytes = r.array(u8::from_le_bytes)?;
            let alive = Ids::from_bytes(bytes, n, n_alloc)
                .ok_or_else(|| r.bad("index: checkpoint ids out of order or range"))?;
            checkpoints.push(Checkpoint { position, alive });
        }
        if checkpoints.first().is_none_or(|c| c.position != 0)
            || !checkpoints
                .windows(2)
                .all(|w| w[0].position < w[1].position)
            || checkpoints.iter().any(|c| c.position > len)
        {
            return Err(r.bad("index: checkpoints out of range"));
        }
        let k = r.u32()? as usize;
        let mut pre_trace = Vec::with_capacity(k.min(1 << 20));
        for _ in 0..k {
            pre_trace.push(PreTrace {
                id: r.u32()?,
                addr: r.u64()?,
                size: r.u64()?,
                stream: r.u64()?,
                stack: StackId(r.u32()?),
            });
        }
        if !pre_trace.windows(2).all(|w| w[0].id < w[1].id)
            || pre_trace.last().is_some_and(|p| p.id >= n_alloc)
            || pre_trace.iter().any(|p| p.stack.0 >= n_stacks)
        {
            return Err(r.bad("index: allocations before the trace out of range"));
        }
        let peak_position = r.u32()?;
        let peak_live_bytes = r.u64()?;
        let predating_alive = r.u32()?;
        let predating_freed = r.u32()?;
        let mut traced = TracedCounts::default();
        for c in &mut traced.actions {
            *c = r.u64()?;
        }
        traced.alive_at_end = r.u64()?;
        traced.alive_at_end_bytes = r.u64()?;
        traced.peak_bytes = r.u64()?;
        let lazy = LazyViews::default();
        match r.u8()? {
            0 => {}
            1 => {
                let top = r.array(u32::from_le_bytes)?;
                if top.iter().any(|&a| a >= n_alloc) {
                    return Err(r.bad("index: largest allocations out of range"));
                }
                let _ = lazy.top_by_size.set(top);
            }
            _ => return Err(r.bad("index: unknown marker")),
        }
        match r.u8()? {
            0 => {}
            1 => {
                let _ = lazy.active_span.set(None);
            }
            2 => {
                let f = Fitted {
                    from_us: r.i64()?,
                    to_us: r.i64()?,
                    events_before: r.u32()?,
                    events_after: r.u32()?,
                    idle_before_us: r.i64()?,
                    idle_after_us: r.i64()?,
                };
                if f.events_before as u64 + f.events_after as u64 > len as u64 {
                    return Err(r.bad("index: active span out of range"));
                }
                let _ = lazy.active_span.set(Some(f));
            }
            _ => return Err(r.bad("index: unknown marker")),
        }
        match r.u8()? {
            0 => {}
            1 => {
                let p = crate::analysis::index::Peak {
                    bytes: r.u64()?,
                    position: r.u32()?,
                };
                if p.position > len {
                    return Err(r.bad("index: allocated peak out of range"));
                }
                let _ = lazy.allocated_peak.set(p);
            }
            _ => return Err(r.bad("index: unknown marker")),
        }
        match r.u8()? {
            0 => {}
            1 => {
                let ids = r.array(u32::from_le_bytes)?;
                let bytes = r.array(u64::from_le_bytes)?;
                if ids.len() != bytes.len()
                    || ids.windows(2).any(|w| w[0] >= w[1])
                    || ids.last().is_some_and(|&id| id >= n_alloc)
                {
                    return Err(r.bad("index: block sizes out of range"));
                }
                let _ = lazy.block_sizes.set(ids.into_iter().zip(bytes).collect());
            }
            _ => return Err(r.bad("index: unknown marker")),
        }
        if peak_position > len {
            return Err(r.bad("index: peak out of range"));
        }
        devices.push(DeviceIndex {
            device,
            first_row,
            len,
            live_bytes,
            live_blocks,
            reserved_changes,
            live_at_start,
            reserved_at_start,
            allocations,
            event_allocation,
            segments,
            checkpoints,
            pre_trace,
            lazy,
            peak_position,
            peak_live_bytes,
            predating_alive,
            predating_freed,
            traced,
        });
    }
    Ok(Index {
        devices,
        frames: crate::frames::FrameClass::new(snap),
        built_while_parsing: 0,
    })
}
