//! memscope's engine: reads PyTorch CUDA memory snapshots safely and analyses them.
//!
//! The pipeline is `bytes → decompress → pickle/JSON reader → tables → analyses`:
//! - [`read`] takes any `Read` (plain, gzip, zstd or xz pickle, or the JSON form) and returns a
//!   [`Snapshot`]: interned strings, frames and stacks, segments and blocks, and one columnar trace
//!   table. The reader executes nothing and never holds the whole file.
//! - [`analysis`] holds the analyses, each a function over those tables, and [`analysis::Index`],
//!   the derived per-device series and allocation intervals they share.
//!
//! This crate does no IO of its own, no async and no HTTP or SQL, and builds for `wasm32`.

pub mod analysis;
pub mod budget;
pub mod cancel;
pub mod decompress;
pub mod error;
mod fast;
#[cfg(not(target_arch = "wasm32"))]
mod follow;
pub mod frames;
pub mod gpus;
pub mod intern;
mod json;
mod lower;
pub mod model;
pub mod packed;
pub mod par;
mod pickle;
#[cfg(not(target_arch = "wasm32"))]
mod readahead;
pub mod store;
#[cfg(test)]
mod test_rand;
pub mod units;
mod values;

use std::io::Read;

pub use budget::MemoryBudget;
pub use cancel::{Cancel, Cancelled};
pub use error::{Error, Result};
pub use intern::{StrId, StringPool};
pub use model::*;
pub use values::{CONTENT_SECRET_BYTES, ContentSecret, EXPANSION_FLOOR_BYTES, Limits};

/// Reads a snapshot with the default [`Limits`].
pub fn read<R: Read>(reader: R) -> Result<Snapshot> {
    read_with_limits(reader, Limits::default())
}

/// Reads a snapshot from plain or compressed pickle or JSON.
///
/// Byte offsets in errors count bytes of the decompressed stream.
pub fn read_with_limits<R: Read>(reader: R, limits: Limits) -> Result<Snapshot> {
    read_impl(reader, limits, true)
}

/// Like [`read`], with the input's size when it is known (a file's length): the trace columns are
/// reserved up front so they never grow by copying (a growing column briefly holds its old and
/// new buffers). Reserved but untouched capacity costs address space, not memory.
pub fn read_sized<R: Read>(reader: R, size_hint_bytes: u64) -> Result<Snapshot> {
    read_impl(
        reader,
        Limits {
            size_hint_bytes,
            ..Limits::default()
        },
        true,
    )
}

/// Reads without the trace-entry fast path (`fast.rs`): the reference the fast path is tested
/// against. Not for normal use.
#[doc(hidden)]
pub fn read_general<R: Read>(reader: R) -> Result<Snapshot> {
    read_impl(reader, Limits::default(), false)
}

/// Reads a snapshot file (`size_bytes` long), its bytes read on a second thread a few MiB ahead
/// of the parser when it is big (`readahead.rs`). The result is the same as [`read_sized`]'s
/// but for the content hash, which is not taken (0): a file read is the CLI's and the server's
/// rebuild of a stored upload's model, and neither looks it up (an upload is read as a stream,
/// [`read_indexed_with_limits`], which takes it).
#[cfg(not(target_arch = "wasm32"))]
pub fn read_file<R: Read + Send>(file: R, size_bytes: u64) -> Result<Snapshot> {
    read_file_with(file, size_bytes, false).map(|p| p.snap)
}

#[cfg(not(target_arch = "wasm32"))]
fn read_file_with<R: Read + Send>(file: R, size_bytes: u64, follow: bool) -> Result<Parsed> {
    let limits = Limits {
        size_hint_bytes: size_bytes,
        ..Limits::default()
    };
    if size_bytes < READ_AHEAD_MIN_BYTES {
        // Hashed on the way (a stream read's path), but a file read never carries the hash:
        // the same answer whatever the file's size.
        return read_impl_with(file, limits, true, follow).map(|mut parsed| {
            parsed.snap.content_hash = 0;
            parsed
        });
    }
    std::thread::scope(|scope| {
        let (reader, decoding) = readahead::ReadAhead::spawn_decoding(
            scope,
            file,
            limits.max_decoded_bytes,
            limits.max_expansion,
            false,
        );
        let parsed = parse_decoded(pickle::Input::chunked(reader), limits, true, follow);
        // The reader thread ends once the parser's end of it is dropped (by now), or at the end
        // of the file.
        let decoded = decoding
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))?;
        settle(
            parsed,
            decoded.tripped,
            decoded.compression,
            decoded.content_hash,
        )
    })
}

/// Files from this size on are read on a second thread (two of its chunks or more).
#[cfg(not(target_arch = "wasm32"))]
const READ_AHEAD_MIN_BYTES: u64 = 4 << 20;

fn read_impl<R: Read>(reader: R, limits: Limits, fast_path: bool) -> Result<Snapshot> {
    read_impl_with(reader, limits, fast_path, false).map(|p| p.snap)
}

/// A parsed snapshot, with the device traces indexed during the parse if that was asked for.
struct Parsed {
    snap: Snapshot,
    built: Option<Vec<((u32, u32), analysis::index::DeviceBuilder)>>,
}

impl Parsed {
    fn indexed(self) -> (Snapshot, analysis::Index) {
        let index = analysis::Index::with_built(&self.snap, self.built.unwrap_or_default());
        (self.snap, index)
    }
}

/// Reads a snapshot like [`read_with_limits`] and indexes its device traces while it is parsed
/// (`follow.rs`, on a second thread): when the input ends, only a reconciliation with the final
/// segments is left, so the index is ready a small constant after the last byte for any trace
/// length. The same [`analysis::Index`] as [`analysis::Index::new`] builds after a plain read.
pub fn read_indexed_with_limits<R: Read>(
    reader: R,
    limits: Limits,
) -> Result<(Snapshot, analysis::Index)> {
    read_impl_with(reader, limits, true, cfg!(not(target_arch = "wasm32"))).map(Parsed::indexed)
}

/// [`read_file`], indexing while it parses like [`read_indexed_with_limits`].
#[cfg(not(target_arch = "wasm32"))]
pub fn read_file_indexed<R: Read + Send>(
    file: R,
    size_bytes: u64,
) -> Result<(Snapshot, analysis::Index)> {
    read_file_with(file, size_bytes, true).map(Parsed::indexed)
}

fn read_impl_with<R: Read>(
    reader: R,
    limits: Limits,
    fast_path: bool,
    follow: bool,
) -> Result<Parsed> {
    let tripped = decompress::Tripped::default();
    let (max_bytes, max_expansion) = (limits.max_decoded_bytes, limits.max_expansion);
    let (parsed, compression, content_hash) = decompress::decode_with(
        reader,
        max_bytes,
        max_expansion,
        &tripped,
        limits.content_secret.clone(),
        |decoded| parse_decoded(pickle::Input::new(decoded), limits, fast_path, follow),
    )?;
    settle(parsed, tripped.get(), compression, content_hash)
}

/// A parse's result with what its decoding found: a decoder stopped at its expansion limit is
/// the error (whatever the parser made of the cut-off stream, the limit is why it stopped);
/// else the snapshot gets its compression and content hash.
fn settle(
    parsed: Result<Parsed>,
    tripped: Option<(u64, u64)>,
    compression: Compression,
    content_hash: u128,
) -> Result<Parsed> {
    if let Some((limit_bytes, compressed_bytes)) = tripped {
        return Err(Error::TooExpanded {
            compressed_bytes,
            limit_bytes,
        });
    }
    let mut parsed = parsed?;
    parsed.snap.format.compression = compression;
    parsed.snap.content_hash = content_hash;
    Ok(parsed)
}

/// Parses a decoded stream; the caller sets the snapshot's compression and content hash.
fn parse_decoded<R: Read>(
    mut input: pickle::Input<R>,
    limits: Limits,
    fast_path: bool,
    follow: bool,
) -> Result<Parsed> {
    let mut heap = values::Heap::new(limits);
    heap.fast_path = fast_path;
    // The smallest trace entries take about 40 bytes of pickle.
    let rows_hint = (heap.limits.size_hint_bytes / 40).min(1 << 28) as usize;
    #[cfg(not(target_arch = "wasm32"))]
    if follow {
        heap.follow = follow::Follower::start(rows_hint);
        heap.compact_memo();
    }
    #[cfg(target_arch = "wasm32")]
    let _ = follow;
    if rows_hint > 0 {
        heap.reserve_rows(rows_hint);
    }
    let first = input.peek_byte()?;
    let input_head = input.head(16);
    let mut format = Format::default();
    let root = match first {
        None => {
            return Err(Error::Truncated {
                offset: 0,
                context: "an empty file",
            });
        }
        Some(b'{' | b'[' | b' ' | b'\n' | b'\r' | b'\t') => {
            format.encoding = model::Encoding::Json;
            let (root, decoded_bytes) = json::read(&mut input, &mut heap)?;
            format.decoded_bytes = decoded_bytes;
            root
        }
        // A file of a known other kind (a torch.save checkpoint is a zip archive) is named as
        // such, before its first byte is read as a pickle opcode ('P', PERSID, for a zip).
        Some(_) if known_format(&input_head).is_some() => {
            return Err(Error::NotASnapshot(format!(
                "the file is {}, not a memory snapshot (write one with torch.cuda.memory._dump_snapshot)",
                known_format(&input_head).unwrap_or_default()
            )));
        }
        Some(first) => {
            format.encoding = model::Encoding::Pickle;
            let parsed = pickle::run(&mut input, &mut heap, &mut fast::Tape::default());
            let (root, info) = match parsed {
                Ok(r) => r,
                // Protocol 2+ pickles start with PROTO (0x80); anything else that fails to parse
                // is most likely not a pickle at all, so say that rather than how parsing failed.
                Err(e) if first != 0x80 && !matches!(e, Error::ForbiddenOpcode { .. }) => {
                    return Err(Error::NotASnapshot(format!(
                        "the file is neither a pickle (those start with byte 0x80) nor JSON; it starts with {} ({e})",
                        describe_head(&input_head)
                    )));
                }
                Err(e) => return Err(e),
            };
            // One pickle is the snapshot; anything appended (a second pickle, with whatever it
            // would run) is neither read nor kept: the file is refused.
            if input.peek_byte()?.is_some() {
                return Err(Error::Malformed {
                    offset: input.offset(),
                    message: "bytes follow the pickle's STOP opcode: a memory snapshot is one pickle, and what is appended to it is neither read nor kept".into(),
                });
            }
            format.protocol = info.protocol;
            format.decoded_bytes = info.bytes;
            root
        }
    };
    drop(input);
    #[cfg(not(target_arch = "wasm32"))]
    let built = heap.follow.take().and_then(|f| {
        let (table, built) = f.finish();
        heap.install_trace(table);
        built
    });
    #[cfg(target_arch = "wasm32")]
    let built = None;
    let snap = lower::build(heap, root, format)?;
    Ok(Parsed { snap, built })
}

/// Reads a snapshot held in memory.
pub fn from_bytes(bytes: &[u8]) -> Result<Snapshot> {
    read(bytes)
}

/// The first bytes of a file that is not a snapshot, for people: text in quotes, anything else as
/// hex bytes, naming common formats a snapshot gets mistaken for.
fn describe_head(head: &[u8]) -> String {
    let head = &head[..head.len().min(16)];
    if let Some(what) = known_format(head) {
        return format!("the bytes of {what}");
    }
    let text = head
        .iter()
        .all(|&b| b.is_ascii_graphic() || b == b' ' || b == b'\n' || b == b'\t' || b == b'\r');
    if text && !head.is_empty() {
        let t: String = String::from_utf8_lossy(head)
            .chars()
            .map(|c| if c.is_whitespace() { ' ' } else { c })
            .collect();
        format!("the text “{}”", t.trim_end())
    } else {
        let hex: Vec<String> = head.iter().take(8).map(|b| format!("{b:02x}")).collect();
        format!("the bytes {}", hex.join(" "))
    }
}

/// The kind of file `head` begins, when it is one a snapshot is often mistaken for.
fn known_format(head: &[u8]) -> Option<&'static str> {
    let known = [
        (&b"\x7fELF"[..], "an ELF executable"),
        (
            &b"PK\x03\x04"[..],
            "a zip archive (torch.save writes checkpoints so)",
        ),
        (&b"\x89PNG"[..], "a PNG image"),
        (&b"%PDF"[..], "a PDF"),
        (
            &b"BZh"[..],
            "bzip2 data (not supported: use gzip, zstd or xz)",
        ),
    ];
    known
        .iter()
        .find(|(magic, _)| head.starts_with(magic))
        .map(|(_, what)| *what)
}

#[cfg(test)]
mod head_tests {
    use super::describe_head;

    #[test]
    fn a_wrong_file_is_described_without_escapes() {
        assert_eq!(
            describe_head(b"this is not a pickle"),
            "the text “this is not a pi”"
        );
        assert_eq!(
            describe_head(b"\x7fELF\x02\x01"),
            "the bytes of an ELF executable"
        );
        assert_eq!(describe_head(b"\x01\x02\xff"), "the bytes 01 02 ff");
    }

    #[test]
    fn a_zip_archive_is_named_not_read_as_opcodes() {
        let err = crate::from_bytes(b"PK\x03\x04\x14\x00\x00\x00archive/data.pkl").unwrap_err();
        let message = err.to_string();
        assert!(message.contains("a zip archive"), "{message}");
        assert!(!message.contains("opcode"), "{message}");
    }
}
