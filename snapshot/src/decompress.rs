//! Recognises compressed input by its magic bytes and wraps it in a streaming decoder, so a
//! `.pickle.gz`, `.zst` or `.xz` upload is read without ever holding the whole file; and
//! `Hashing`, the reader that hashes what passes through it (a snapshot's content hash, a
//! model file's checksum).

use std::io::{BufRead, BufReader, Read};

use crate::error::{Error, Result};

/// The encodings [`open`] recognises (defined with the snapshot's `Format`, which names one).
pub use crate::model::Compression;

impl Compression {
    /// Which compression `head` (the first bytes of a file) starts with.
    pub fn sniff(head: &[u8]) -> Compression {
        if head.starts_with(&[0x1f, 0x8b]) {
            Compression::Gzip
        } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
            Compression::Zstd
        } else if head.starts_with(&[0xfd, b'7', b'z', b'X', b'Z', 0]) {
            Compression::Xz
        } else {
            Compression::None
        }
    }
}

/// A reader that maps decoder errors to a message naming the format.
#[cfg(feature = "compression")]
struct Named<R> {
    inner: R,
    format: &'static str,
}

#[cfg(feature = "compression")]
impl<R: Read> Read for Named<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.inner.read(buf).map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("{} data is corrupt or truncated: {e}", self.format),
            )
        })
    }
}

/// Wraps `reader` in the decoder its magic bytes call for.
pub fn open<'a, R: Read + 'a>(reader: R) -> Result<(Box<dyn Read + 'a>, Compression)> {
    open_bounded(reader, u64::MAX, 0, &Default::default())
}

/// Like [`open`], with a compressed input's decoder held to `max_bytes` decoded bytes and to
/// `max_expansion` (see `Limits`); `tripped` is set when it stops one.
pub(crate) fn open_bounded<'a, R: Read + 'a>(
    reader: R,
    max_bytes: u64,
    max_expansion: u64,
    tripped: &Tripped,
) -> Result<(Box<dyn Read + 'a>, Compression)> {
    let compressed = std::rc::Rc::new(std::cell::Cell::new(0));
    let reader = Counted {
        inner: reader,
        count: compressed.clone(),
    };
    let mut buffered = BufReader::with_capacity(64 << 10, reader);
    let head = buffered.fill_buf().map_err(|e| Error::Io {
        offset: 0,
        source: e,
    })?;
    let kind = Compression::sniff(head);
    let boxed: Box<dyn Read + 'a> = match kind {
        Compression::None => Box::new(buffered),
        #[cfg(feature = "compression")]
        Compression::Gzip => Box::new(Named {
            inner: flate2::bufread::MultiGzDecoder::new(buffered),
            format: "gzip",
        }),
        #[cfg(feature = "compression")]
        Compression::Zstd => {
            let decoder = ruzstd::decoding::StreamingDecoder::new(buffered).map_err(|e| {
                Error::Decompress {
                    format: "zstd",
                    message: e.to_string(),
                }
            })?;
            Box::new(Named {
                inner: decoder,
                format: "zstd",
            })
        }
        #[cfg(feature = "compression")]
        Compression::Xz => Box::new(Named {
            inner: lzma_rust2::XzReader::new(buffered, true),
            format: "xz",
        }),
        #[cfg(not(feature = "compression"))]
        other => {
            return Err(Error::Decompress {
                format: other.as_str(),
                message: "this build has no decompressors; decompress the file first".into(),
            });
        }
    };
    if kind == Compression::None {
        return Ok((boxed, kind));
    }
    let bounded = Bounded {
        inner: boxed,
        compressed,
        decoded: 0,
        max_bytes,
        max_expansion,
        tripped: tripped.clone(),
    };
    Ok((Box::new(bounded), kind))
}

/// Counts the bytes read through it into a shared cell (the compressed input's size so far).
struct Counted<R> {
    inner: R,
    count: std::rc::Rc<std::cell::Cell<u64>>,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count.set(self.count.get() + n as u64);
        Ok(n)
    }
}

/// Stops a decoder whose output outgrows its limits: at most `max_bytes` decoded, and past
/// `EXPANSION_FLOOR_BYTES` at most `max_expansion` decoded bytes per compressed byte read.
/// Tripping sets `tripped` to the limit that was passed (the caller turns it into an error).
/// Where [`Bounded`] says it stopped a decoder: the limit passed and the compressed bytes read.
pub(crate) type Tripped = std::rc::Rc<std::cell::Cell<Option<(u64, u64)>>>;

pub(crate) struct Bounded<R> {
    pub inner: R,
    pub compressed: std::rc::Rc<std::cell::Cell<u64>>,
    pub decoded: u64,
    pub max_bytes: u64,
    pub max_expansion: u64,
    pub tripped: Tripped,
}

impl<R: Read> Read for Bounded<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.decoded += n as u64;
        let by_ratio = match self.max_expansion {
            0 => u64::MAX,
            r => self
                .compressed
                .get()
                .saturating_mul(r)
                .max(crate::values::EXPANSION_FLOOR_BYTES),
        };
        let limit = self.max_bytes.min(by_ratio);
        if self.decoded > limit {
            self.tripped.set(Some((limit, self.compressed.get())));
            return Err(std::io::Error::other("decompressed size limit reached"));
        }
        Ok(n)
    }
}

/// Decompresses `reader` as [`open_bounded`] does and hands the decoded stream, hashed as it is
/// read, to `consume`: what `consume` returned, the compression, and the XXH3-128 of what it
/// read, keyed with `secret` (the snapshot's content hash): a stream's parse and a small file's,
/// on the parser's own thread (a big file is decoded on a reader thread, `readahead.rs`).
pub(crate) fn decode_with<R: Read, T>(
    reader: R,
    max_bytes: u64,
    max_expansion: u64,
    tripped: &Tripped,
    secret: Option<crate::ContentSecret>,
    consume: impl FnOnce(&mut dyn Read) -> T,
) -> Result<(T, Compression, u128)> {
    let (decoded, compression) = open_bounded(reader, max_bytes, max_expansion, tripped)?;
    let mut hasher = crate::ContentSecret::hasher(secret.as_ref());
    let out = consume(&mut Hashing {
        inner: decoded,
        hasher: &mut hasher,
    });
    Ok((out, compression, hasher.digest128()))
}

/// Hashes (XXH3-128) what is read through it.
pub(crate) struct Hashing<'h, R> {
    pub inner: R,
    pub hasher: &'h mut xxhash_rust::xxh3::Xxh3,
}

impl<R: Read> Read for Hashing<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }
}
