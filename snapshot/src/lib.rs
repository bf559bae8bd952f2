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
pub mod store;
pub mod units;
mod values;

use std::io::Read;

pub use budget::MemoryBudget;
pub use cancel::{Cancel, Cancelled};
pub use error::{Error, Result};
pub use intern::{StrId, StringPool};
pub use model::*;
pub use values::{EXPANSION_FLOOR_BYTES, Limits};

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

/// Reads a snapshot file with the trace's later entries decoded ahead on a second thread
/// (`fast.rs`): `open_at(offset)` opens the same file at a byte offset, and `size_bytes` is its
/// length. The result is the same as [`read_sized`]'s; compressed and small files are read on one
/// thread. The file must not change while it is read.
#[cfg(not(target_arch = "wasm32"))]
pub fn read_file<R, F>(open_at: F, size_bytes: u64) -> Result<Snapshot>
where
    R: Read + Send,
    F: Fn(u64) -> std::io::Result<R> + Sync,
{
    let start = predecode_start(size_bytes);
    read_file_from(open_at, size_bytes, start)
}

/// [`read_file`] with the pre-decoder starting at `start` (none: one thread), whatever the size;
/// for tests.
#[doc(hidden)]
#[cfg(not(target_arch = "wasm32"))]
pub fn read_file_from<R, F>(open_at: F, size_bytes: u64, start: Option<u64>) -> Result<Snapshot>
where
    R: Read + Send,
    F: Fn(u64) -> std::io::Result<R> + Sync,
{
    read_file_with(open_at, size_bytes, start, false).map(|p| p.snap)
}

#[cfg(not(target_arch = "wasm32"))]
fn read_file_with<R, F>(
    open_at: F,
    size_bytes: u64,
    start: Option<u64>,
    follow: bool,
) -> Result<Parsed>
where
    R: Read + Send,
    F: Fn(u64) -> std::io::Result<R> + Sync,
{
    let reader = open_at(0).map_err(|source| Error::Io { offset: 0, source })?;
    let open = |offset: u64| -> Option<Box<dyn Read + Send + '_>> {
        open_at(offset)
            .ok()
            .map(|r| Box::new(r) as Box<dyn Read + Send>)
    };
    let limits = Limits {
        size_hint_bytes: size_bytes,
        ..Limits::default()
    };
    read_impl_with(
        reader,
        limits,
        true,
        start.map(|s| (&open as Reopen, s)),
        follow,
    )
}

/// Opens the input again at an offset, for a pre-decoder thread.
type Reopen<'a> = &'a (dyn Fn(u64) -> Option<Box<dyn Read + Send + 'a>> + Sync);

/// Plain pickles from this size on are read with a pre-decoder thread when they can be reopened.
#[cfg(not(target_arch = "wasm32"))]
const PREDECODE_MIN_BYTES: u64 = 32 << 20;

/// Where the pre-decoder starts on a file of `size_bytes`, if it runs. From the first byte: the
/// parser then only applies what it decoded, and the two threads take about the same time
/// (bench/README.md, issue 41: starting at 30%, as before, left the parser 0.2 s more to do on a
/// 1 GB file while the pre-decoder waited).
#[cfg(not(target_arch = "wasm32"))]
fn predecode_start(size_bytes: u64) -> Option<u64> {
    (size_bytes >= PREDECODE_MIN_BYTES).then_some(0)
}

fn read_impl<R: Read>(reader: R, limits: Limits, fast_path: bool) -> Result<Snapshot> {
    read_impl_with(reader, limits, fast_path, None, false).map(|p| p.snap)
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
    read_impl_with(
        reader,
        limits,
        true,
        None,
        cfg!(not(target_arch = "wasm32")),
    )
    .map(Parsed::indexed)
}

/// [`read_file`], indexing while it parses like [`read_indexed_with_limits`].
#[cfg(not(target_arch = "wasm32"))]
pub fn read_file_indexed<R, F>(open_at: F, size_bytes: u64) -> Result<(Snapshot, analysis::Index)>
where
    R: Read + Send,
    F: Fn(u64) -> std::io::Result<R> + Sync,
{
    let start = predecode_start(size_bytes);
    read_file_with(open_at, size_bytes, start, true).map(Parsed::indexed)
}

fn read_impl_with<R: Read>(
    reader: R,
    limits: Limits,
    fast_path: bool,
    reopen: Option<(Reopen, u64)>,
    follow: bool,
) -> Result<Parsed> {
    let tripped = std::rc::Rc::new(std::cell::Cell::new(None));
    let read = read_decoded(reader, limits, fast_path, &tripped, reopen, follow);
    match tripped.get() {
        // Whatever the reader made of the cut-off stream, the limit is why it stopped.
        Some((limit_bytes, compressed_bytes)) => Err(Error::TooExpanded {
            compressed_bytes,
            limit_bytes,
        }),
        None => read,
    }
}

fn read_decoded<R: Read>(
    reader: R,
    limits: Limits,
    fast_path: bool,
    tripped: &decompress::Tripped,
    reopen: Option<(Reopen, u64)>,
    follow: bool,
) -> Result<Parsed> {
    let (decoded, compression) = decompress::open_bounded(
        reader,
        limits.max_decoded_bytes,
        limits.max_expansion,
        tripped,
    )?;
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    let mut input = pickle::Input::new(decompress::Hashing {
        inner: decoded,
        hasher: &mut hasher,
    });
    let mut heap = values::Heap::new(limits);
    heap.fast_path = fast_path;
    #[cfg(not(target_arch = "wasm32"))]
    if follow {
        heap.follow = Some(follow::Follower::start(
            (heap.limits.size_hint_bytes / 40).min(1 << 28) as usize,
        ));
        heap.compact_memo();
    }
    #[cfg(target_arch = "wasm32")]
    let _ = follow;
    if heap.limits.size_hint_bytes > 0 {
        // The smallest trace entries take about 40 bytes of pickle.
        heap.trace
            .reserve((heap.limits.size_hint_bytes / 40).min(1 << 28) as usize);
    }
    let first = input.peek_byte()?;
    let input_head = input.head(16);
    let mut format = Format {
        compression,
        ..Format::default()
    };
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
            let parsed = match reopen {
                #[cfg(not(target_arch = "wasm32"))]
                Some((reopen, start))
                    if fast_path && matches!(compression, decompress::Compression::None) =>
                {
                    parse_with_predecoder(&mut input, &mut heap, reopen, start)
                }
                _ => pickle::run(&mut input, &mut heap, &mut fast::Tape::default()),
            };
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
    let built = heap.follow.take().and_then(follow::Follower::finish);
    #[cfg(target_arch = "wasm32")]
    let built = None;
    let mut snap = lower::build(heap, root, format)?;
    snap.content_hash = hasher.digest128();
    Ok(Parsed { snap, built })
}

/// Parses with a pre-decoder thread reading from `start` on (`fast.rs`).
#[cfg(not(target_arch = "wasm32"))]
fn parse_with_predecoder<R: Read>(
    input: &mut pickle::Input<R>,
    heap: &mut values::Heap,
    reopen: Reopen,
    start: u64,
) -> Result<(values::Value, pickle::PickleInfo)> {
    let max_str = heap.limits.max_string_bytes;
    std::thread::scope(|s| {
        let mut tape = match reopen(start) {
            Some(r) => {
                let (tx, rx) = std::sync::mpsc::sync_channel(4);
                let (back_tx, back) = std::sync::mpsc::channel();
                s.spawn(move || fast::predecode(r, start, max_str, tx, back));
                fast::Tape::with_predecoder(rx, back_tx, start)
            }
            None => fast::Tape::default(),
        };
        // The tape (and with it the channel) is dropped before the scope ends, so a pre-decoder
        // still reading stops at its next batch.
        pickle::run(input, heap, &mut tape)
    })
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
