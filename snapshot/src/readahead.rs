//! Reading a file on a thread of its own: the parser's thread then spends its time parsing, not
//! in the kernel copying the page cache into its buffer (about a fifth of its time on a 1 GB
//! file, bench/README.md, issue 41). The reader stays a few MiB ahead and hands over whole
//! buffers, which come back to be filled again.

use std::io::Read;
use std::sync::mpsc::{Receiver, Sender, SyncSender, channel, sync_channel};

/// Bytes the reader thread reads at a time.
const CHUNK_BYTES: usize = 2 << 20;
/// Chunks read and not yet taken: how far ahead the reader may get.
const AHEAD_CHUNKS: usize = 2;

/// The parser's end: a `Read` over the chunks the reader thread sends.
pub(crate) struct ReadAhead {
    rx: Receiver<std::io::Result<Vec<u8>>>,
    back: Sender<Vec<u8>>,
    cur: Vec<u8>,
    pos: usize,
}

impl ReadAhead {
    /// Starts reading `r` on a thread of `scope`; the thread ends at the end of `r`, at an
    /// error (passed on to the parser), or when the returned reader is dropped.
    pub fn spawn<'scope, R: Read + Send + 'scope>(
        scope: &'scope std::thread::Scope<'scope, '_>,
        r: R,
    ) -> ReadAhead {
        let (tx, rx) = sync_channel(AHEAD_CHUNKS);
        let (back, returned) = channel();
        scope.spawn(move || fill(r, tx, returned));
        ReadAhead {
            rx,
            back,
            cur: Vec::new(),
            pos: 0,
        }
    }
}

fn fill<R: Read>(mut r: R, tx: SyncSender<std::io::Result<Vec<u8>>>, returned: Receiver<Vec<u8>>) {
    loop {
        let mut buf = returned.try_recv().unwrap_or_default();
        buf.resize(CHUNK_BYTES, 0);
        let mut n = 0;
        while n < buf.len() {
            match r.read(&mut buf[n..]) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // The bytes read before the error first, as a plain reader gives them.
                    buf.truncate(n);
                    if n > 0 && tx.send(Ok(buf)).is_err() {
                        return;
                    }
                    let _ = tx.send(Err(e));
                    return;
                }
            }
        }
        buf.truncate(n);
        if n == 0 || tx.send(Ok(buf)).is_err() {
            return;
        }
    }
}

impl Read for ReadAhead {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if self.pos == self.cur.len() {
            match self.rx.recv() {
                Ok(Ok(next)) => {
                    let _ = self.back.send(std::mem::replace(&mut self.cur, next));
                    self.pos = 0;
                }
                Ok(Err(e)) => return Err(e),
                // The reader thread ended: the end of the file.
                Err(_) => return Ok(0),
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
}
