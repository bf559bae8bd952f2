//! The model file: a parsed [`Snapshot`]'s tables in a compact binary form, so a snapshot is
//! parsed from its pickle once and reopened from this file afterwards (tens of milliseconds for a
//! million entries, against parsing the pickle again).
//!
//! Layout: the magic `MSMODEL\0`, a version, then each table in a fixed order; integers are
//! little-endian, columns are written as raw arrays, strings as length + UTF-8. Lookup indexes
//! (string → id, frame → id, stack → id) are not stored: they are rebuilt while reading, which
//! also re-checks every id. The file ends with the magic again, so a file cut short by a crash is
//! detected, then the XXH3-128 checksum of everything before it, so flipped bytes are detected
//! instead of served as wrong answers. It is a cache: the server keeps the original upload and
//! rebuilds the model from it when either check fails.

use crate::packed::{Packed, PackedParts, Runs, Word};
use std::io::{self, Read, Write};

use crate::decompress::Hashing;
use crate::error::{Error, Result};
use crate::intern::StrId;
use crate::model::*;

const MAGIC: &[u8; 8] = b"MSMODEL\0";
/// Bump when the layout changes; older files are then rebuilt from the originals.
/// 2: the checksum at the end. 3: sizes and times as their packed parts, streams as runs of ids
/// (the file as compact as the tables: 37 → ~21 bytes a trace entry).
pub const VERSION: u32 = 3;

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
        let (base, off, wide_blocks, wide_values, tail) = p.parts();
        self.array(base, i64::to_le_bytes)?;
        self.array(off, u32::to_le_bytes)?;
        self.array(wide_blocks, u32::to_le_bytes)?;
        self.array(wide_values, i64::to_le_bytes)?;
        self.array(tail, i64::to_le_bytes)
    }
    fn len(&mut self, n: usize) -> io::Result<()> {
        self.u32(u32::try_from(n).map_err(|_| io::Error::other("table too large"))?)
    }
}

/// Writes `snap` as a model file.
pub fn write<T: Write>(snap: &Snapshot, out: &mut T) -> io::Result<()> {
    let mut w = W {
        w: out,
        buf: Vec::with_capacity(1 << 17),
        hasher: xxhash_rust::xxh3::Xxh3::new(),
    };
    w.buf.extend_from_slice(MAGIC);
    w.u32(VERSION)?;
    let f = &snap.format;
    for s in [f.encoding, f.compression, f.layout] {
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
        w.u8(match s.segment_type {
            SegmentType::Small => 0,
            SegmentType::Large => 1,
            SegmentType::Unknown => 2,
        })?;
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
    for &v in &t.addr {
        w.u64(v)?;
    }
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
    for &v in &t.stack {
        w.u32(v.0)?;
    }
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
            off: self.array(u32::from_le_bytes)?,
            wide_blocks: self.array(u32::from_le_bytes)?,
            wide_values: self.array(i64::from_le_bytes)?,
            tail: self.array(i64::from_le_bytes)?,
        };
        let p = Packed::from_parts(parts).map_err(|e| self.bad(e))?;
        if p.len() != n {
            return Err(self.bad("packed column of the wrong length"));
        }
        Ok(p)
    }
}

fn static_str(s: &str, known: &[&'static str]) -> &'static str {
    known.iter().copied().find(|k| *k == s).unwrap_or("unknown")
}

/// Reads a model file written by [`write`].
pub fn read<T: Read>(input: T) -> Result<Snapshot> {
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
    let mut snap = Snapshot::default();
    snap.format.encoding = static_str(&r.string()?, &["pickle", "json"]);
    snap.format.compression = static_str(&r.string()?, &["none", "gzip", "zstd", "xz"]);
    snap.format.layout = static_str(
        &r.string()?,
        &["modern", "block_history", "legacy_segment_list"],
    );
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
        let segment_type = match r.u8()? {
            0 => SegmentType::Small,
            1 => SegmentType::Large,
            _ => SegmentType::Unknown,
        };
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
    t.addr = r.column::<8, _>(n, u64::from_le_bytes)?;
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
    t.stack = r.column::<4, _>(n, |b| StackId(u32::from_le_bytes(b)))?;
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
    Ok(snap)
}
