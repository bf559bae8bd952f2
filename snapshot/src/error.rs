//! The engine's one error type: what went wrong reading a snapshot, and where.
//!
//! Every message is meant for the person who uploaded the file: it names the problem, the byte
//! offset in the (decompressed) pickle where it was found, and a likely fix when there is one.

use std::fmt;

/// Why a file could not be read as a memory snapshot.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The pickle asked for something that would run code, or is otherwise not plain data.
    #[error("not a memory snapshot: pickle opcode {opcode} at offset {offset} {why}")]
    ForbiddenOpcode {
        opcode: &'static str,
        offset: u64,
        why: &'static str,
    },

    /// A byte that is no pickle opcode at all.
    #[error(
        "not a memory snapshot: unknown pickle opcode 0x{byte:02x} at offset {offset}; is this a pickle file?"
    )]
    UnknownOpcode { byte: u8, offset: u64 },

    /// The file ended before the pickle's STOP opcode.
    #[error(
        "truncated snapshot: the file ends at offset {offset} inside {context}; was the upload or the dump interrupted?"
    )]
    Truncated { offset: u64, context: &'static str },

    /// The pickle is well formed opcode by opcode but makes no sense as data.
    #[error("malformed pickle at offset {offset}: {message}")]
    Malformed { offset: u64, message: String },

    /// A limit that keeps hostile input from taking unbounded memory or time was reached.
    #[error("snapshot rejected at offset {offset}: {what} exceeds the limit of {limit}")]
    LimitExceeded {
        offset: u64,
        what: &'static str,
        limit: u64,
    },

    /// The data is a valid pickle (or JSON document) but not shaped like a memory snapshot.
    #[error("not a memory snapshot: {0}")]
    NotASnapshot(String),

    /// The JSON form could not be parsed.
    #[error("invalid JSON snapshot: {0}")]
    Json(String),

    /// A compressed input could not be decompressed.
    #[error("could not decompress {format} input: {message}")]
    Decompress {
        format: &'static str,
        message: String,
    },

    /// A compressed input decompressed past the limits on its size (a decompression bomb, or a
    /// snapshot larger than the reader was allowed to take).
    #[error(
        "the compressed input expands past the limit of {limit_bytes} decompressed bytes \
         ({compressed_bytes} compressed bytes read so far): a decompression bomb, or a snapshot larger \
         than this reader accepts (on a server: --max-decoded-bytes, --max-expansion)"
    )]
    TooExpanded {
        compressed_bytes: u64,
        limit_bytes: u64,
    },

    /// The memory that parses share (a server's `--max-parse-memory-bytes`) is held by other
    /// parses: this one may succeed when they are done.
    #[error(
        "the memory for parsing snapshots ({} MiB) is in use by other uploads ({} MiB free); \
         try again shortly",
        total_bytes >> 20,
        free_bytes >> 20
    )]
    Busy { total_bytes: u64, free_bytes: u64 },

    /// Reading the underlying stream failed.
    #[error("reading the snapshot failed at offset {offset}: {source}")]
    Io { offset: u64, source: std::io::Error },
}

impl Error {
    pub(crate) fn malformed(offset: u64, message: impl fmt::Display) -> Self {
        Error::Malformed {
            offset,
            message: message.to_string(),
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
