//! What the fast path's two readers share (`fast.rs` op by op, `fast/template.rs` by layout):
//! the opcodes they read without the general machine, a cursor over the bytes, and what an
//! entry's fields are to them.

use crate::values::key;

/// A position in a buffer of pickle bytes; `fast.rs` adds the opcode-level reads.
pub(super) struct Cursor<'a> {
    pub buf: &'a [u8],
    pub pos: usize,
}

impl Cursor<'_> {
    #[inline]
    pub fn byte(&mut self) -> Option<u8> {
        let b = *self.buf.get(self.pos)?;
        self.pos += 1;
        Some(b)
    }

    #[inline]
    pub fn take(&mut self, n: usize) -> Option<&[u8]> {
        let s = self.buf.get(self.pos..self.pos + n)?;
        self.pos += n;
        Some(s)
    }

    #[inline]
    pub fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
}

/// Protocol 4's framing opcode, followed by the frame's 8-byte length.
pub(super) const FRAME: u8 = 0x95;

/// The integer opcodes' table (`Cursor::int` in `fast.rs`, templates): by opcode, its width in
/// bytes (`INT_WIDTH`; `LONG1`'s is its next byte), whether it is `LONG1` and whether it is
/// signed; 0 for an opcode that is no integer.
pub(super) const INT_OPS: [u8; 256] = {
    let mut t = [0u8; 256];
    t[b'K' as usize] = 1;
    t[b'M' as usize] = 2;
    t[b'J' as usize] = 4 | INT_SIGNED;
    t[0x8a] = INT_LONG1 | INT_SIGNED;
    t
};
pub(super) const INT_WIDTH: u8 = 0x0f;
pub(super) const INT_SIGNED: u8 = 0x10;
pub(super) const INT_LONG1: u8 = 0x20;

/// What a field of an entry is, for a run (`Plan` in `fast.rs`) and its templates: the numbers
/// nearly every entry has are read straight from the bytes into their field.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Field {
    // The number fields first: their discriminant is their slot in an entry's numbers.
    Addr = 0,
    Size = 1,
    Stream = 2,
    TimeUs = 3,
    Frames = 4,
    Other = 5,
}

/// Number fields ([`Field::Addr`] to [`Field::TimeUs`]).
pub(super) const NUMBER_FIELDS: usize = 4;

impl Field {
    pub fn of(key_id: u32) -> Field {
        match key_id {
            key::ADDR => Field::Addr,
            key::SIZE => Field::Size,
            key::STREAM => Field::Stream,
            key::TIME_US => Field::TimeUs,
            key::FRAMES => Field::Frames,
            _ => Field::Other,
        }
    }
}
