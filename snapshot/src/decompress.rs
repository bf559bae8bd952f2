//! Recognises compressed input by its magic bytes and wraps it in a streaming decoder, so a
//! `.pickle.gz`, `.zst` or `.xz` upload is read without ever holding the whole file; and
//! [`Hashing`], the reader that hashes what passes through it (a snapshot's content hash, a
//! model file's checksum).

use std::io::{BufRead, BufReader, Read};

use crate::error::{Error, Result};

/// The encodings [`open`] recognises.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Zstd,
    Xz,
}

impl Compression {
    pub fn as_str(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Zstd => "zstd",
            Compression::Xz => "xz",
        }
    }

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
    Ok((boxed, kind))
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
