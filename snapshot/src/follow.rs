//! The thread beside the parser's that builds the trace table from the rows the parser makes
//! and indexes them as it goes (uploads and the CLI, issue 14; a big file is also read on a
//! thread of its own, `readahead.rs`). The parser's thread then only
//! decodes: putting a row into the table's packed columns and following the lists were a sixth
//! of its work on PyTorch's shape, on the critical path, while this core had time to spare
//! (bench/README.md, issue 41, seventeenth part). When the pickle's last byte is read the table
//! is whole and the per-event tables built, and
//! [`Index::with_built`](crate::analysis::Index::with_built) only reconciles them with the
//! final segments: an upload's indexing ends a small constant after its last byte whatever the
//! trace's length, instead of a pass over the whole trace.
//!
//! The parser sends each row as it makes it ([`Follower::push`], 32 bytes, the rare fields
//! apart) and what the lists did with rows ([`Follower::appended_run`], [`Follower::appended`],
//! [`Follower::lost`]), in batches, each event placed among the rows made before it. The thread
//! appends every row to the table in the order it was made (the order a parse without this
//! thread gives) and replays the events in the same order through [`Lists`]: rows are handed to
//! the index's [`DeviceBuilder`]s in the order lists receive them, which is the order the
//! finished table has (the parser creates some rows out of order where its fast path and its
//! general machine take turns, and puts them back in list order at the end). Only lists of
//! entries filled one after another are indexed (what `_dump_snapshot` writes); anything else (a
//! row in two lists, entries inside another container, lists filled in turns) stops the
//! indexing, not the table, and the index is built from the finished table as before. The
//! result is the same either way (tests compare both on every fixture).

use std::sync::mpsc::{Receiver, SyncSender, sync_channel};

use crate::analysis::index::{DeviceBuilder, Row};
use crate::model::{DenseRow, EntryFields, TraceTable};

/// Rows per batch sent to the thread, and per chunk of rows handed to the index builders.
const CHUNK_ROWS: usize = 1 << 14;

/// Batches sent and not yet taken: how far the parser may get ahead of the thread.
const QUEUED_BATCHES: usize = 4;

/// What a list did with rows (the calls of [`Lists`]).
#[derive(Clone, Copy, Debug)]
enum ListEvent {
    Run {
        list: u64,
        first: u32,
        n: u32,
        new_list: bool,
    },
    One {
        list: u64,
        row: u32,
        new_list: bool,
    },
    Lost,
}

/// Rows and events in the order the parser made them: each event with how many of the batch's
/// rows came before it.
#[derive(Debug, Default)]
struct Batch {
    rows: Vec<DenseRow>,
    /// The rows with a sparse field (few), whole.
    rare: Vec<(u32, EntryFields)>,
    events: Vec<(u32, ListEvent)>,
    /// Stream handles first used since the last batch, in order of their ids.
    streams: Vec<u64>,
}

impl Batch {
    fn new() -> Batch {
        Batch {
            rows: Vec::with_capacity(CHUNK_ROWS),
            ..Batch::default()
        }
    }

    fn clear(&mut self) {
        self.rows.clear();
        self.rare.clear();
        self.events.clear();
        self.streams.clear();
    }
}

/// What the thread made: the table, and each list's lowest row and length with its index
/// builder, if the lists were followed.
type Made = (TraceTable, Option<Vec<((u32, u32), DeviceBuilder)>>);

/// The parser's end (see the module docs).
#[derive(Debug)]
pub(crate) struct Follower {
    batch: Batch,
    /// Stream handles already sent.
    streams_sent: usize,
    tx: Option<SyncSender<Batch>>,
    /// Batches the thread has emptied, for the next ones: a fresh 512 KiB of rows for every
    /// batch would be page faults on the parser's thread.
    spare: Receiver<Batch>,
    thread: Option<std::thread::JoinHandle<Made>>,
}

impl Follower {
    /// The thread started (`None` if it could not be: the parser then keeps the table
    /// itself); `rows_hint` is about how many rows the parse will create (0 if unknown),
    /// reserved up front so the tables never grow by copying.
    pub fn start(rows_hint: usize) -> Option<Follower> {
        let (tx, rx) = sync_channel::<Batch>(QUEUED_BATCHES);
        let (spare_tx, spare) = sync_channel::<Batch>(QUEUED_BATCHES + 2);
        let thread = std::thread::Builder::new()
            .name("memscope-rows".into())
            .spawn(move || build(rx, spare_tx, rows_hint))
            .ok()?;
        Some(Follower {
            batch: Batch::new(),
            streams_sent: 0,
            tx: Some(tx),
            spare,
            thread: Some(thread),
        })
    }

    /// The parser made trace row `row` (rows are numbered in the order they are made);
    /// `streams` is the table's stream handles by id so far.
    #[inline]
    pub fn push(&mut self, row: u32, f: &EntryFields, streams: &[u64]) {
        if streams.len() > self.streams_sent {
            self.batch
                .streams
                .extend_from_slice(&streams[self.streams_sent..]);
            self.streams_sent = streams.len();
        }
        self.batch.rows.push(DenseRow {
            addr: f.addr,
            size: f.size,
            time_us: f.time_us,
            stack: f.stack,
            stream: f.stream,
            action: f.action,
        });
        if f.device_free.is_some()
            || f.compile_context.is_some()
            || f.user_metadata.is_some()
            || f.other.is_some()
        {
            self.batch.rare.push((row, *f));
        }
        if self.batch.rows.len() >= CHUNK_ROWS {
            self.send();
        }
    }

    /// Rows `first..first + n` were appended to list `list` in one `APPENDS`, continuing it
    /// (or starting it: `new_list`).
    pub fn appended_run(&mut self, list: u64, first: u32, n: u32, new_list: bool) {
        self.event(ListEvent::Run {
            list,
            first,
            n,
            new_list,
        });
    }

    /// Row `row` was appended to list `list` (an id of the container); `new_list` if it is the
    /// list's first.
    pub fn appended(&mut self, list: u64, row: u32, new_list: bool) {
        self.event(ListEvent::One {
            list,
            row,
            new_list,
        });
    }

    /// A row went somewhere the lists are not followed.
    pub fn lost(&mut self) {
        self.event(ListEvent::Lost);
    }

    fn event(&mut self, e: ListEvent) {
        let at = self.batch.rows.len() as u32;
        self.batch.events.push((at, e));
    }

    fn send(&mut self) {
        let next = self.spare.try_recv().unwrap_or_else(|_| Batch::new());
        let batch = std::mem::replace(&mut self.batch, next);
        // A thread gone has panicked: `finish` passes that on.
        if let Some(tx) = &self.tx
            && tx.send(batch).is_err()
        {
            self.tx = None;
        }
    }

    /// The parse is over: the table, and each list's builder with the list's lowest row and
    /// length, or `None` if the lists were not followed (the index is then built from the
    /// table).
    pub fn finish(mut self) -> Made {
        self.send();
        self.tx = None;
        let thread = self.thread.take().expect("finished once");
        thread
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    }
}

impl Drop for Follower {
    /// A parse given up: the thread ends with the channel, and is waited for, so that what it
    /// holds is freed before the parse's error is returned.
    fn drop(&mut self) {
        self.tx = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The thread: each batch's rows into the table in the order they were made, its events
/// replayed among them, and the emptied batch sent back (dropped when enough wait).
fn build(rx: Receiver<Batch>, spare: SyncSender<Batch>, rows_hint: usize) -> Made {
    let mut table = TraceTable::default();
    table.reserve(rows_hint);
    let mut lists = Lists::new(rows_hint);
    let mut streams: Vec<u64> = Vec::new();
    let mut row = 0u32;
    for mut batch in rx {
        streams.extend_from_slice(&batch.streams);
        table.extend_dense(&batch.rows);
        let mut done = 0;
        for &(at, e) in &batch.events {
            for r in &batch.rows[done..at as usize] {
                lists.pushed(row, index_row(r, &streams));
                row += 1;
            }
            done = at as usize;
            lists.apply(e);
        }
        for r in &batch.rows[done..] {
            lists.pushed(row, index_row(r, &streams));
            row += 1;
        }
        for (r, f) in &batch.rare {
            table.push_sparse(*r, f);
        }
        batch.clear();
        let _ = spare.try_send(batch);
    }
    (table, lists.finish())
}

/// A row as the index's builders take it, with its stream's handle.
#[inline]
fn index_row(r: &DenseRow, streams: &[u64]) -> Row {
    Row {
        action: r.action,
        addr: r.addr,
        size: r.size,
        stream: streams.get(r.stream as usize).copied().unwrap_or(0),
        stack: r.stack,
    }
}

/// The next rows in list order, handed to the index builders: rows are kept as they are made
/// ([`Lists::pushed`]) and handed on in the order lists receive them ([`Lists::appended`]). A
/// row made when no older one waits goes straight to the next chunk, held back until a list
/// takes it: a trace read in order (nearly every row) is then never staged and moved again.
struct Lists {
    /// Rows created from `staged_base` on that no list has taken yet (`None`: taken).
    staged: std::collections::VecDeque<Option<Row>>,
    staged_base: u32,
    /// Rows taken, in list order, not handed on yet; then the last `pending` rows, created and
    /// not taken yet (rows `staged_base..staged_base + pending`, with nothing staged).
    out: Vec<Row>,
    pending: u32,
    /// Rows handed on so far.
    sent: u64,
    /// Where new lists start among the rows taken (positions counted from the first row ever
    /// handed on).
    run_starts: Vec<u64>,
    /// Each list's lowest row and length: where its rows are once the parse puts them in order.
    runs: Vec<(u32, u32)>,
    /// The list being filled.
    list: u64,
    following: bool,
    /// One per list, fed in list order.
    builders: Vec<DeviceBuilder>,
    rows_hint: usize,
}

impl Lists {
    fn new(rows_hint: usize) -> Lists {
        Lists {
            staged: std::collections::VecDeque::with_capacity(4096),
            staged_base: 0,
            out: Vec::with_capacity(CHUNK_ROWS),
            pending: 0,
            sent: 0,
            run_starts: Vec::new(),
            runs: Vec::new(),
            list: u64::MAX,
            following: true,
            builders: Vec::new(),
            rows_hint,
        }
    }

    fn apply(&mut self, e: ListEvent) {
        match e {
            ListEvent::Run {
                list,
                first,
                n,
                new_list,
            } => self.appended_run(list, first, n, new_list),
            ListEvent::One {
                list,
                row,
                new_list,
            } => self.appended(list, row, new_list),
            ListEvent::Lost => self.stop(),
        }
    }

    fn following(&self) -> bool {
        self.following
    }

    /// Stops following; the index is built after parsing instead.
    fn stop(&mut self) {
        self.following = false;
        self.staged = Default::default();
        self.out = Vec::new();
        self.pending = 0;
        self.builders = Vec::new();
    }

    /// Trace row `row` was made.
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

    /// Hands the rows taken to the builders (the pending ones stay): a list's first row starts
    /// its builder.
    fn flush(&mut self) {
        let taken = self.out.len() - self.pending as usize;
        if taken == 0 {
            return;
        }
        let (builders, rows_hint) = (&mut self.builders, self.rows_hint);
        let mut starts = self.run_starts.iter().copied().peekable();
        let mut in_a_list = true;
        for (k, &row) in self.out[..taken].iter().enumerate() {
            if starts.next_if_eq(&(self.sent + k as u64)).is_some() {
                let mut b = DeviceBuilder::new();
                if builders.is_empty() {
                    // Most snapshots trace one device; reserved but untouched room costs
                    // address space only.
                    b.reserve(rows_hint);
                }
                builders.push(b);
            }
            match builders.last_mut() {
                Some(b) => b.push(row),
                None => {
                    in_a_list = false;
                    break;
                }
            }
        }
        if !in_a_list {
            // Rows always begin with a list's first; anything else is not followed.
            return self.stop();
        }
        self.run_starts.clear();
        self.out.drain(..taken);
        self.sent += taken as u64;
    }

    /// Each list's builder with the list's lowest row and length, or `None` if the lists were
    /// not followed.
    fn finish(mut self) -> Option<Vec<((u32, u32), DeviceBuilder)>> {
        if self.following() {
            self.flush();
        }
        (self.following() && self.builders.len() == self.runs.len())
            .then(|| self.runs.iter().copied().zip(self.builders).collect())
    }
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

    fn taken(f: &Lists) -> Vec<u64> {
        let n = f.out.len() - f.pending as usize;
        f.out[..n].iter().map(|r| r.addr).collect()
    }

    /// Rows created in order wait where they will be sent; taken out of order they go back to
    /// the stage and are taken from there, as before the rows went straight to the chunk.
    #[test]
    fn pending_rows_are_taken_where_they_lie_or_staged_when_out_of_order() {
        let mut f = Lists::new(0);
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
        let mut f = Lists::new(0);
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

    /// The thread's table is the one the parser builds itself, row for row: across batches,
    /// with streams first used in a later batch, the rare fields, and lists taking the rows as
    /// they come; and the list it was told of is indexed.
    #[test]
    fn the_thread_builds_the_table_the_parser_would() {
        use crate::intern::StrId;
        use crate::model::{Action, StackId};
        use crate::values::Heap;
        let mut own = Heap::new(Default::default());
        let mut sent = Heap::new(Default::default());
        sent.follow = Follower::start(0);
        let n = 2 * CHUNK_ROWS as u32 + 100;
        let actions = [Action::Alloc, Action::FreeRequested, Action::FreeCompleted];
        for h in [&mut own, &mut sent] {
            for i in 0..n {
                // A stream first met in each batch after the first.
                let handle = [0u64, 7, 9][(i as usize / CHUNK_ROWS).min(2)] + (i % 2) as u64;
                let f = EntryFields {
                    action: if i % 1001 == 0 {
                        Action::Other
                    } else {
                        actions[i as usize % 3]
                    },
                    other: (i % 1001 == 0).then_some(StrId(3)),
                    addr: (1 << 30) + u64::from(i % 640) * 512,
                    size: 512 << (i % 5),
                    stream: h.trace.stream_id_of(handle).unwrap(),
                    time_us: 1_700_000_000_000_000 + i64::from(i) * 3,
                    stack: StackId(i % 7),
                    device_free: (i % 997 == 0).then_some(u64::from(i) << 20),
                    compile_context: (i % 777 == 0).then_some(StrId(4)),
                    user_metadata: (i % 555 == 0).then_some(StrId(5)),
                };
                assert_eq!(h.push_entry(&f), i);
                if let Some(follow) = &mut h.follow
                    && (i + 1) % 1000 == 0
                {
                    follow.appended_run(1, i - 999, 1000, i == 999);
                }
            }
        }
        let follow = sent.follow.as_mut().unwrap();
        follow.appended_run(1, n / 1000 * 1000, n % 1000, false);
        let (table, built) = sent.follow.take().unwrap().finish();
        sent.install_trace(table);
        assert_eq!(sent.trace.len(), n as usize);
        assert_eq!(format!("{:?}", sent.trace), format!("{:?}", own.trace));
        assert!(!own.trace.other_action.is_empty() && !own.trace.device_free.is_empty());
        let built = built.expect("followed");
        assert_eq!(built.len(), 1);
        assert_eq!((built[0].0, built[0].1.len()), ((0, n), n));
    }

    /// A row that skips one (a gap in creation order) stops following, pending rows or not.
    #[test]
    fn a_gap_stops_following() {
        let mut f = Lists::new(0);
        f.pushed(0, row(0));
        f.pushed(2, row(2));
        assert!(!f.following());
        assert!(f.finish().is_none());
    }
}
