//! Reading a file on a thread of its own: the parser's thread then spends its time parsing, not
//! in the kernel copying the page cache into its buffer (about a fifth of its time on a 1 GB
//! file, bench/README.md, issue 41). The reader stays a few MiB ahead and hands over whole
//! buffers ([`pickle::Chunks`](crate::pickle::Chunks)), which the parser reads where they lie
//! and gives back to be filled again.
//!
//! [`ReadAhead::spawn_decoding`] also decompresses on that thread: a compressed file's decoding
//! then runs beside its parse instead of before each buffer of it. The content hash is taken on
//! the parser's side, of each buffer as the parser takes it: the reader's thread shares its core
//! with the kernel's copy and the index's building, which bound the parse of a big file, while
//! the parser's thread waited 10–30 % of the time (bench/README.md, issue 41).

use std::io::Read;
use std::sync::mpsc::{Receiver, Sender, SyncSender, channel, sync_channel};

use crate::decompress::{Compression, Tripped, open_bounded};
use crate::error::Result;
use crate::pickle::{CHUNK_HEAD_BYTES, Chunks};

/// Bytes the reader thread reads at a time (after each buffer's free room at its front).
const CHUNK_BYTES: usize = 2 << 20;
/// The first chunk's bytes, doubled chunk by chunk up to [`CHUNK_BYTES`]. The parser waits for
/// the first chunk: a whole one (its fresh pages faulted in, then filled) kept it waiting
/// 0.4–2.1 ms on a 164 MB file, a quarter of one 0–0.6 ms (bench/README.md, issue 41).
const FIRST_CHUNK_BYTES: usize = 256 << 10;
/// Chunks read and not yet taken: how far ahead the reader may get.
const AHEAD_CHUNKS: usize = 2;

/// Where the reader thread sends its chunks (or the error that ended it).
type ChunkSender = SyncSender<std::io::Result<Vec<u8>>>;

/// The parser's end: the chunks the reader thread sends, each with its bytes after
/// [`CHUNK_HEAD_BYTES`] of free room.
pub(crate) struct ReadAhead {
    rx: Receiver<std::io::Result<Vec<u8>>>,
    back: Sender<Vec<u8>>,
    /// XXH3-128 of the bytes of the chunks taken so far, when the hash was asked for.
    hasher: Option<xxhash_rust::xxh3::Xxh3>,
    /// Where the hash goes when the parser is done with the reader (the reader thread waits
    /// for it and returns it in [`Decoded`]).
    digest: Option<Sender<u128>>,
    /// The chunk the plain reading of the tests reads, and where.
    #[cfg(test)]
    cur: Vec<u8>,
    #[cfg(test)]
    pos: usize,
}

impl ReadAhead {
    /// Starts reading `r` on a thread of `scope`; the thread ends at the end of `r`, at an
    /// error (passed on to the parser), or when the returned reader is dropped. (The parser
    /// uses [`ReadAhead::spawn_decoding`]; this is its plain reading, tested alone.)
    #[cfg(test)]
    pub fn spawn<'scope, R: Read + Send + 'scope>(
        scope: &'scope std::thread::Scope<'scope, '_>,
        r: R,
    ) -> ReadAhead {
        let (reader, tx, returned) = ReadAhead::ends();
        scope.spawn(move || fill(r, tx, returned));
        reader
    }

    /// The parser's end, and the reader thread's: where it sends chunks, where they come back.
    fn ends() -> (ReadAhead, ChunkSender, Receiver<Vec<u8>>) {
        let (tx, rx) = sync_channel(AHEAD_CHUNKS);
        let (back, returned) = channel();
        let reader = ReadAhead {
            rx,
            back,
            hasher: None,
            digest: None,
            #[cfg(test)]
            cur: Vec::new(),
            #[cfg(test)]
            pos: 0,
        };
        (reader, tx, returned)
    }
}

/// What the reader thread of [`ReadAhead::spawn_decoding`] found besides the bytes.
pub(crate) struct Decoded {
    pub compression: Compression,
    /// XXH3-128 of every decoded byte the parser took (the whole stream when the parse used it
    /// all); 0 when not asked for.
    pub content_hash: u128,
    /// The limit a decoder passed and the compressed bytes read then, if one stopped it.
    pub tripped: Option<(u64, u64)>,
}

impl ReadAhead {
    /// Like [`ReadAhead::spawn`], with `r` decompressed (held to `max_bytes` and
    /// `max_expansion`, as `decompress::open_bounded` does) on the thread. The thread's result
    /// says what it found, with the hash of what the parser took: it is ready once the returned
    /// reader is dropped. An error there is one opening the decoder, and the reader then ends
    /// at once. The hash is taken only when `hash` asks for it: on the parser's thread, it was
    /// 4.5 % of that thread's instructions, which the parse waits for.
    pub fn spawn_decoding<'scope, R: Read + Send + 'scope>(
        scope: &'scope std::thread::Scope<'scope, '_>,
        r: R,
        max_bytes: u64,
        max_expansion: u64,
        hash: bool,
    ) -> (
        ReadAhead,
        std::thread::ScopedJoinHandle<'scope, Result<Decoded>>,
    ) {
        let (mut reader, tx, returned) = ReadAhead::ends();
        let (digest_tx, digest) = channel();
        reader.digest = Some(digest_tx);
        reader.hasher = hash.then(xxhash_rust::xxh3::Xxh3::new);
        let decoding = scope.spawn(move || {
            let tripped = Tripped::default();
            let (decoded, compression) = open_bounded(r, max_bytes, max_expansion, &tripped)?;
            fill(decoded, tx, returned);
            // Sent when the parser drops its end, whether it read to the end or stopped.
            let content_hash = digest.recv().unwrap_or_default();
            Ok(Decoded {
                compression,
                content_hash,
                tripped: tripped.get(),
            })
        });
        (reader, decoding)
    }
}

fn fill<R: Read>(mut r: R, tx: ChunkSender, returned: Receiver<Vec<u8>>) {
    let mut chunk_bytes = FIRST_CHUNK_BYTES;
    loop {
        let mut buf = returned.try_recv().unwrap_or_default();
        buf.resize(CHUNK_HEAD_BYTES + chunk_bytes, 0);
        chunk_bytes = (chunk_bytes * 2).min(CHUNK_BYTES);
        let mut n = CHUNK_HEAD_BYTES;
        while n < buf.len() {
            match r.read(&mut buf[n..]) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // The bytes read before the error first, as a plain reader gives them.
                    buf.truncate(n);
                    if n > CHUNK_HEAD_BYTES && tx.send(Ok(buf)).is_err() {
                        return;
                    }
                    let _ = tx.send(Err(e));
                    return;
                }
            }
        }
        buf.truncate(n);
        if n == CHUNK_HEAD_BYTES || tx.send(Ok(buf)).is_err() {
            return;
        }
    }
}

impl Chunks for ReadAhead {
    fn next_chunk(&mut self) -> std::io::Result<Option<Vec<u8>>> {
        match self.rx.recv() {
            Ok(Ok(next)) => {
                if let Some(hasher) = &mut self.hasher {
                    hasher.update(&next[CHUNK_HEAD_BYTES..]);
                }
                Ok(Some(next))
            }
            Ok(Err(e)) => Err(e),
            // The reader thread ended: the end of the file.
            Err(_) => Ok(None),
        }
    }

    fn recycle(&mut self, buf: Vec<u8>) {
        let _ = self.back.send(buf);
    }
}

impl Drop for ReadAhead {
    fn drop(&mut self) {
        if let Some(digest) = self.digest.take() {
            let _ = digest.send(self.hasher.as_ref().map_or(0, |h| h.digest128()));
        }
    }
}

/// Plain reading over the chunks, for the tests of the thread alone.
#[cfg(test)]
impl Read for ReadAhead {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if self.pos == self.cur.len() {
            match self.next_chunk()? {
                Some(next) => {
                    let done = std::mem::replace(&mut self.cur, next);
                    self.recycle(done);
                    self.pos = CHUNK_HEAD_BYTES;
                }
                None => return Ok(0),
            }
        }
        let n = out.len().min(self.cur.len() - self.pos);
        out[..n].copy_from_slice(&self.cur[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes that differ from chunk to chunk, so a chunk out of order or twice would show.
    fn bytes(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 31 + i / 4093) as u8).collect()
    }

    #[test]
    fn gives_the_bytes_in_order_whatever_the_reads_ask_for() {
        let data = bytes(2 * CHUNK_BYTES + 12_345);
        let mut got = Vec::new();
        std::thread::scope(|s| {
            let mut r = ReadAhead::spawn(s, &data[..]);
            let mut want = 1;
            loop {
                let mut buf = vec![0u8; want];
                let n = r.read(&mut buf).unwrap();
                if n == 0 {
                    break;
                }
                got.extend_from_slice(&buf[..n]);
                want = want * 7 % 1_000_003 + 1;
            }
        });
        assert!(
            got == data,
            "read {} of {} bytes, or in another order",
            got.len(),
            data.len()
        );
    }

    /// A reader that fails after some bytes.
    struct Failing(usize);
    impl Read for Failing {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            if self.0 == 0 {
                return Err(std::io::Error::other("disk gone"));
            }
            let n = out.len().min(self.0);
            out[..n].fill(7);
            self.0 -= n;
            Ok(n)
        }
    }

    #[test]
    fn passes_an_error_on_after_the_bytes_before_it() {
        std::thread::scope(|s| {
            let mut r = ReadAhead::spawn(s, Failing(CHUNK_BYTES + 10));
            let mut all = Vec::new();
            let err = r.read_to_end(&mut all).unwrap_err();
            assert_eq!(err.to_string(), "disk gone");
            // Every byte read before the error came through, as from the reader itself.
            assert_eq!(all.len(), CHUNK_BYTES + 10);
        });
    }

    #[test]
    fn a_reader_dropped_half_way_stops_its_thread() {
        let data = bytes(20 * CHUNK_BYTES);
        // The scope returns only once the reader thread has ended.
        std::thread::scope(|s| {
            let mut r = ReadAhead::spawn(s, &data[..]);
            let mut buf = [0u8; 100];
            r.read_exact(&mut buf).unwrap();
            assert_eq!(buf[..], data[..100]);
        });
    }

    #[test]
    #[cfg(feature = "compression")]
    fn decodes_on_its_thread_and_the_parsers_end_hashes() {
        use std::io::Write;
        let data = bytes(3 * CHUNK_BYTES + 777);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&data).unwrap();
        let gz = gz.finish().unwrap();
        let inputs = [(&data, Compression::None), (&gz, Compression::Gzip)];
        for ((input, kind), hash) in inputs.into_iter().flat_map(|i| [(i, true), (i, false)]) {
            let (got, decoded) = std::thread::scope(|s| {
                let (mut r, decoding) = ReadAhead::spawn_decoding(s, &input[..], u64::MAX, 0, hash);
                let mut got = Vec::new();
                r.read_to_end(&mut got).unwrap();
                drop(r);
                (got, decoding.join().unwrap().unwrap())
            });
            assert!(got == data, "{kind:?}: the bytes differ");
            assert_eq!(decoded.compression, kind);
            let want = if hash {
                xxhash_rust::xxh3::xxh3_128(&data)
            } else {
                0
            };
            assert_eq!(decoded.content_hash, want, "{kind:?}, hash asked: {hash}");
            assert_eq!(decoded.tripped, None);
        }
    }

    #[test]
    #[cfg(feature = "compression")]
    fn a_decoder_past_its_limit_is_stopped_and_says_so() {
        use std::io::Write;
        let zeros = vec![0u8; 64 << 20];
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        gz.write_all(&zeros).unwrap();
        let gz = gz.finish().unwrap();
        let (err, decoded) = std::thread::scope(|s| {
            let (mut r, decoding) = ReadAhead::spawn_decoding(s, &gz[..], 8 << 20, 0, true);
            let err = r.read_to_end(&mut Vec::new()).unwrap_err();
            drop(r);
            (err, decoding.join().unwrap().unwrap())
        });
        assert!(err.to_string().contains("limit"), "{err}");
        assert_eq!(decoded.tripped.map(|t| t.0), Some(8 << 20));
    }

    #[test]
    #[cfg(feature = "compression")]
    fn a_decoder_that_cannot_start_is_the_threads_error() {
        // A zstd magic number followed by a frame header no decoder takes.
        let bad = [0x28, 0xb5, 0x2f, 0xfd, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff];
        let (got, result) = std::thread::scope(|s| {
            let (mut r, decoding) = ReadAhead::spawn_decoding(s, &bad[..], u64::MAX, 0, true);
            let mut got = Vec::new();
            let _ = r.read_to_end(&mut got);
            drop(r);
            (got, decoding.join().unwrap())
        });
        assert!(got.is_empty());
        let err = result.err().expect("an error opening the decoder");
        assert!(err.to_string().contains("zstd"), "{err}");
    }
}
