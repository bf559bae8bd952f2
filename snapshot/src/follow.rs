//! Indexing while parsing: the parser hands every trace row, once it is known to be the next
//! entry of a device's trace list, to a second thread that feeds
//! [`DeviceBuilder`](crate::analysis::index::DeviceBuilder)s. When the pickle's last byte is read
//! the per-event tables are built, and [`Index::with_built`](crate::analysis::Index::with_built)
//! only reconciles them with the final segments: an upload's indexing ends a small constant after
//! its last byte whatever the trace's length (issue 14), instead of a pass over the whole trace.
//!
//! Rows are kept as the parser creates them ([`Follower::pushed`]) and handed on in the order
//! lists receive them ([`Follower::appended`]): list order, which is the order the finished table
//! has (the parser creates some rows out of order where its fast path and its general machine
//! take turns, and puts them back in list order at the end). A row created when no older one
//! waits goes straight to the next chunk, held back until a list takes it: a trace read in order
//! (nearly every row) is then never staged and moved again (0.1 s of the parser's thread on a
//! 13M-event trace, bench/README.md, issue 41). Only lists of entries filled one
//! after another are followed (what `_dump_snapshot` writes); anything else (a row in two lists,
//! entries inside another container, lists filled in turns) stops the follower, and the index is
//! built from the finished tables as before. The result is the same either way (tests compare
//! both on every fixture).

use std::sync::mpsc::{Receiver, SyncSender, sync_channel};

use crate::analysis::index::{DeviceBuilder, Row};

/// Rows per message to the builder thread.
const CHUNK_ROWS: usize = 1 << 14;

/// Emptied row buffers kept for reuse: as many as chunks can wait in the channel, and two.
const SPARE_BUFFERS: usize = 10;

/// The next rows in list order, and where among them new lists start (positions counted from
/// the first row ever sent).
struct Chunk {
    first: u64,
    rows: Vec<Row>,
    run_starts: Vec<u64>,
}

/// The parser's side (see the module docs).
#[derive(Debug)]
pub(crate) struct Follower {
    /// Rows created from `staged_base` on that no list has taken yet (`None`: taken).
    staged: std::collections::VecDeque<Option<Row>>,
    staged_base: u32,
    /// Rows taken, in list order, not sent yet; then the last `pending` rows, created and not
    /// taken yet (rows `staged_base..staged_base + pending`, with nothing staged).
    out: Vec<Row>,
    pending: u32,
    sent: u64,
    run_starts: Vec<u64>,
    /// Each list's lowest row and length: where its rows are once the parse puts them in order.
    runs: Vec<(u32, u32)>,
    /// The list being filled.
    list: u64,
    tx: Option<SyncSender<Chunk>>,
    /// Row buffers the builder has emptied, for the next chunks: a fresh 640 KB buffer for
    /// every chunk cost the parser's thread 0.17 s of page faults on a 13M-event trace (and
    /// the builder's thread the unmapping; bench/README.md, issue 41).
    spare: Receiver<Vec<Row>>,
    builder: Option<std::thread::JoinHandle<Vec<DeviceBuilder>>>,
}

impl Follower {
    /// A follower with its builder thread started; `rows_hint` is about how many rows the
    /// parse will create (0 if unknown), reserved up front so the tables never grow by copying.
    pub fn start(rows_hint: usize) -> Follower {
        let (tx, rx) = sync_channel::<Chunk>(8);
        let (spare_tx, spare) = sync_channel::<Vec<Row>>(SPARE_BUFFERS);
        let builder = std::thread::Builder::new()
            .name("memscope-index".into())
            .spawn(move || build(rx, spare_tx, rows_hint))
            .ok();
        Follower {
            staged: std::collections::VecDeque::with_capacity(4096),
            staged_base: 0,
            out: Vec::with_capacity(CHUNK_ROWS),
            pending: 0,
            sent: 0,
            run_starts: Vec::new(),
            runs: Vec::new(),
            list: u64::MAX,
            tx: builder.is_some().then_some(tx),
            spare,
            builder,
        }
    }

    fn following(&self) -> bool {
        self.tx.is_some()
    }

    /// Stops following; the index is built after parsing instead.
    fn stop(&mut self) {
        self.tx = None;
        self.staged = Default::default();
        self.out = Vec::new();
        self.pending = 0;
    }

    /// The parser created trace row `row`.
    #[inline]
    pub fn pushed(&mut self, row: u32, r: Row) {
        if !self.following() {
            return;
        }
        if self.staged.is_empty() && row == self.staged_base + self.pending {
            self.out.push(r);
            self.pending += 1;
            return;
        }
        self.unpend();
        if self.staged_base as usize + self.staged.len() != row as usize {
            return self.stop();
        }
        self.staged.push_back(Some(r));
    }

    /// Moves the pending rows back to the stage, where rows taken out of order are found.
    fn unpend(&mut self) {
        if self.pending > 0 {
            let from = self.out.len() - self.pending as usize;
            self.staged.extend(self.out.drain(from..).map(Some));
            self.pending = 0;
        }
    }

    /// Whether rows `first..first + n` appended to `list` are the oldest pending ones, and the
    /// list the open one or a new one: taken where they are.
    fn takes_pending(&self, list: u64, first: u32, n: u32, new_list: bool) -> bool {
        n > 0 && self.pending >= n && first == self.staged_base && self.continues(list, new_list)
    }

    /// Whether rows appended to `list` go on the open list, or start a new one.
    fn continues(&self, list: u64, new_list: bool) -> bool {
        new_list || (list == self.list && !self.runs.is_empty())
    }

    /// Takes the `n` oldest pending rows into the open list (or a new one, `list`).
    fn take_pending(&mut self, list: u64, first: u32, n: u32, new_list: bool) {
        if new_list {
            self.open_list(list, first);
        }
        self.pending -= n;
        self.staged_base += n;
        self.count_rows(first, n);
    }

    /// Rows `first..first + n` were appended to list `list` in one `APPENDS`, continuing it
    /// (or starting it: `new_list`). When they are the oldest rows waiting, as in a trace read
    /// in order, they move to the index's next chunk in one step; otherwise one by one.
    pub fn appended_run(&mut self, list: u64, first: u32, n: u32, new_list: bool) {
        if self.takes_pending(list, first, n, new_list) {
            return self.take_pending(list, first, n, new_list);
        }
        self.unpend();
        let in_order = self.following()
            && n > 0
            && first == self.staged_base
            && self.staged.len() >= n as usize
            && self.continues(list, new_list);
        if !in_order {
            for k in 0..n {
                self.appended(list, first + k, new_list && k == 0);
            }
            return;
        }
        if new_list {
            self.open_list(list, first);
        }
        let mut moved = 0;
        for r in self.staged.drain(..n as usize) {
            match r {
                Some(r) => self.out.push(r),
                // Appended twice: not a list read in order.
                None => break,
            }
            moved += 1;
        }
        if moved != n {
            return self.stop();
        }
        self.staged_base += n;
        self.drop_taken_front();
        self.count_rows(first, n);
    }

    /// Row `row` was appended to list `list` (an id of the container); `new_list` if it is the
    /// list's first.
    #[inline]
    pub fn appended(&mut self, list: u64, row: u32, new_list: bool) {
        if !self.following() {
            return;
        }
        if self.takes_pending(list, row, 1, new_list) {
            return self.take_pending(list, row, 1, new_list);
        }
        self.unpend();
        if !new_list && list != self.list {
            // Lists filled in turns.
            return self.stop();
        }
        let taken = row
            .checked_sub(self.staged_base)
            .and_then(|k| self.staged.get_mut(k as usize))
            .and_then(Option::take);
        let Some(r) = taken else {
            // A row appended twice, or one the follower never saw.
            return self.stop();
        };
        self.drop_taken_front();
        if new_list {
            self.open_list(list, row);
        }
        self.out.push(r);
        if !self.count_rows(row, 1) {
            self.stop();
        }
    }

    /// Starts list `list`, whose first row is `first`: a device trace of its own.
    fn open_list(&mut self, list: u64, first: u32) {
        self.list = list;
        let taken = self.out.len() - self.pending as usize;
        self.run_starts.push(self.sent + taken as u64);
        self.runs.push((first, 0));
    }

    /// Drops the rows at the front of the stage that were already appended.
    fn drop_taken_front(&mut self) {
        while let Some(None) = self.staged.front() {
            self.staged.pop_front();
            self.staged_base += 1;
        }
    }

    /// Counts rows `first..first + n`, just moved to the next chunk, in the open list (sending
    /// the chunk when it is full); false when no list is open.
    fn count_rows(&mut self, first: u32, n: u32) -> bool {
        let Some(run) = self.runs.last_mut() else {
            return false;
        };
        run.0 = run.0.min(first);
        run.1 += n;
        if self.out.len() - self.pending as usize >= CHUNK_ROWS {
            self.flush();
        }
        true
    }

    /// A row went somewhere the follower does not follow.
    pub fn lost(&mut self) {
        self.stop();
    }

    /// Sends the rows taken (the pending ones stay).
    fn flush(&mut self) {
        let taken = self.out.len() - self.pending as usize;
        if taken == 0 {
            return;
        }
        let mut next = self
            .spare
            .try_recv()
            .unwrap_or_else(|_| Vec::with_capacity(CHUNK_ROWS));
        next.extend(self.out.drain(taken..));
        let rows = std::mem::replace(&mut self.out, next);
        let chunk = Chunk {
            first: self.sent,
            run_starts: std::mem::take(&mut self.run_starts),
            rows,
        };
        self.sent += chunk.rows.len() as u64;
        let sent = self.tx.as_ref().is_some_and(|tx| tx.send(chunk).is_ok());
        if !sent {
            self.stop();
        }
    }

    /// The parse is over: each list's builder with the list's lowest row and length, or `None`
    /// if the follower stopped (the index is then built from the tables).
    pub fn finish(mut self) -> Option<Vec<((u32, u32), DeviceBuilder)>> {
        if self.following() {
            self.flush();
        }
        let followed = self.following();
        self.tx = None;
        let built = self.builder.take()?.join().ok()?;
        (followed && built.len() == self.runs.len())
            .then(|| self.runs.iter().copied().zip(built).collect())
    }
}

/// The builder thread: one [`DeviceBuilder`] per list, fed in list order. Each chunk's emptied
/// buffer goes back to the parser (dropped when it holds enough).
fn build(rx: Receiver<Chunk>, spare: SyncSender<Vec<Row>>, rows_hint: usize) -> Vec<DeviceBuilder> {
    let mut builders: Vec<DeviceBuilder> = Vec::new();
    for mut chunk in rx {
        let mut starts = chunk.run_starts.iter().copied().peekable();
        for (k, row) in chunk.rows.drain(..).enumerate() {
            if starts.next_if_eq(&(chunk.first + k as u64)).is_some() {
                let mut b = DeviceBuilder::new();
                if builders.is_empty() {
                    // Most snapshots trace one device; reserved but untouched room costs address
                    // space only.
                    b.reserve(rows_hint);
                }
                builders.push(b);
            }
            match builders.last_mut() {
                Some(b) => b.push(row),
                // Rows always begin with a list's first; anything else is not followed.
                None => return Vec::new(),
            }
        }
        let _ = spare.try_send(chunk.rows);
    }
    builders
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Action, StackId};

    /// A row known by its address (its number in the parse).
    fn row(k: u32) -> Row {
        Row {
            action: Action::Alloc,
            addr: k as u64,
            size: 512,
            stream: 0,
            stack: StackId::EMPTY,
        }
    }

    fn taken(f: &Follower) -> Vec<u64> {
        let n = f.out.len() - f.pending as usize;
        f.out[..n].iter().map(|r| r.addr).collect()
    }

    /// Rows created in order wait where they will be sent; taken out of order they go back to
    /// the stage and are taken from there, as before the rows went straight to the chunk.
    #[test]
    fn pending_rows_are_taken_where_they_lie_or_staged_when_out_of_order() {
        let mut f = Follower::start(0);
        for k in 0..5 {
            f.pushed(k, row(k));
        }
        assert_eq!((f.pending, f.staged.len()), (5, 0));
        f.appended_run(7, 0, 3, true);
        assert_eq!(taken(&f), [0, 1, 2]);
        assert_eq!((f.pending, f.staged_base), (2, 3));
        // Row 4 before row 3: the stage takes over.
        f.appended(7, 4, false);
        assert_eq!((f.pending, f.staged.len()), (0, 2));
        assert_eq!(taken(&f), [0, 1, 2, 4]);
        f.appended(7, 3, false);
        assert_eq!(taken(&f), [0, 1, 2, 4, 3]);
        assert_eq!((f.staged.len(), f.staged_base), (0, 5));
        // In order again: straight to the chunk, one row at a time too.
        f.pushed(5, row(5));
        f.appended(7, 5, false);
        assert_eq!(taken(&f), [0, 1, 2, 4, 3, 5]);
        assert_eq!(f.runs, [(0, 6)]);
        let built = f.finish().expect("followed");
        assert_eq!(built.len(), 1);
        assert_eq!((built[0].0, built[0].1.len()), ((0, 6), 6));
    }

    /// A full chunk is sent without the rows still pending, which follow in the next; a second
    /// list starts where its first row is taken.
    #[test]
    fn a_chunk_is_sent_without_the_rows_still_pending() {
        let mut f = Follower::start(0);
        let n = CHUNK_ROWS as u32 + 10;
        for k in 0..n {
            f.pushed(k, row(k));
        }
        f.appended_run(1, 0, CHUNK_ROWS as u32, true);
        assert_eq!((f.sent, f.pending), (CHUNK_ROWS as u64, 10));
        assert_eq!(
            f.out.iter().map(|r| r.addr).collect::<Vec<_>>(),
            (CHUNK_ROWS as u64..n as u64).collect::<Vec<_>>()
        );
        f.appended_run(1, CHUNK_ROWS as u32, 4, false);
        // The rest starts a second list (another device's trace).
        f.appended_run(2, CHUNK_ROWS as u32 + 4, 6, true);
        assert_eq!(f.run_starts, [CHUNK_ROWS as u64 + 4]);
        let built = f.finish().expect("followed");
        let lens: Vec<_> = built.iter().map(|(run, b)| (*run, b.len())).collect();
        assert_eq!(
            lens,
            [
                ((0, CHUNK_ROWS as u32 + 4), CHUNK_ROWS as u32 + 4),
                ((CHUNK_ROWS as u32 + 4, 6), 6)
            ]
        );
    }

    /// A row that skips one (a gap in creation order) stops following, pending rows or not.
    #[test]
    fn a_gap_stops_following() {
        let mut f = Follower::start(0);
        f.pushed(0, row(0));
        f.pushed(2, row(2));
        assert!(!f.following());
        assert!(f.finish().is_none());
    }
}
