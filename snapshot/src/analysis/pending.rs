//! Frees stuck pending: a tensor Python let go of (`free_requested`) whose block the caching
//! allocator could not reuse until the streams that used it caught up (`free_completed`). A block
//! used on another stream (`Tensor.record_stream`, NCCL, a side stream's copy) waits for that
//! stream's work; while it waits its bytes are neither allocated nor reusable, which is memory a
//! user cannot see in `memory_allocated()` and may not expect.
//!
//! Every allocation of the trace is looked at, not a sample: one pass over the device's
//! allocation table. Where the trace has no times (an old format), waits are counted in events.

use serde::Serialize;

use super::index::{DeviceIndex, NONE};
use crate::model::{Snapshot, StackId};

/// How long a free must wait to be listed, unless asked otherwise: 1 ms (a free completes in
/// microseconds when nothing holds it).
pub const DEFAULT_MIN_WAIT_US: i64 = 1_000;

/// The most frees a list carries; the totals count all of them.
pub const MAX_LISTED: usize = 2_000;

/// One free that waited.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PendingFree {
    /// The allocation's index on its device (the segment map's `allocation`).
    pub allocation: u32,
    pub address: u64,
    pub size_bytes: u64,
    /// The stream the block belongs to (it was allocated there).
    pub stream: u64,
    pub stack: StackId,
    /// Event index of `free_requested`; none for a block made before the trace and pending at
    /// the snapshot, whose request the trace does not have.
    pub requested_event: Option<u32>,
    /// Event index of `free_completed`; none: still pending when the snapshot was taken.
    pub completed_event: Option<u32>,
    pub requested_us: i64,
    /// From the request to the completion (or, still pending, to the trace's last event: at
    /// least this long).
    pub waited_us: i64,
    /// Events recorded meanwhile.
    pub waited_events: u32,
}

/// The frees of a device that waited at least `min_wait_us`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PendingFrees {
    pub device: i32,
    pub min_wait_us: i64,
    /// False for a trace without times: waits are then only in events, and every free that
    /// waited at all is counted.
    pub timed: bool,
    /// Frees requested in the trace, and how many of them did not complete at once (another
    /// event came between request and completion, or at least `min_wait_us` passed, or the
    /// snapshot came first).
    pub requested: u64,
    pub waited: u64,
    /// Those listed: waited at least `min_wait_us`, or still pending at the snapshot (how long
    /// before it was taken is not recorded: their wait is at least the time to the trace's last
    /// event). How many, their bytes, the longest completed wait.
    pub count: u64,
    pub bytes: u64,
    pub longest_us: i64,
    /// Still pending at the snapshot.
    pub still_pending: u64,
    /// The streams of the device's trace other than the blocks' own: what they may have waited
    /// for (the trace does not say which stream held a block).
    pub streams: Vec<u64>,
    /// The frees, those still pending first, then the longest wait first; at most
    /// [`MAX_LISTED`].
    pub frees: Vec<PendingFree>,
}

/// Frees on device `d` that waited at least `min_wait_us` between `free_requested` and
/// `free_completed`.
pub fn pending_frees(snap: &Snapshot, d: &DeviceIndex, min_wait_us: i64) -> PendingFrees {
    let t = &snap.trace;
    let timed = d.len > 0 && t.time_us.get(d.row(0)) != 0;
    // (No times, or no events: every time is 0.)
    let time = |e: u32| {
        if timed {
            t.time_us.get(d.row(e.min(d.len - 1)))
        } else {
            0
        }
    };
    let last = d.len.saturating_sub(1);
    let mut out = PendingFrees {
        device: d.device,
        min_wait_us,
        timed,
        requested: 0,
        waited: 0,
        count: 0,
        bytes: 0,
        longest_us: 0,
        still_pending: 0,
        streams: Vec::new(),
        frees: Vec::new(),
    };
    let mut own_streams = Vec::new();
    for (id, a) in d.allocations.iter().enumerate() {
        let id = id as u32;
        if a.free_requested == NONE {
            continue;
        }
        out.requested += 1;
        let end = (a.end != NONE).then_some(a.end);
        let until = end.unwrap_or(last);
        let requested = d.free_requested_event(t, id);
        // (Requested before the trace: it waited at least the whole trace.)
        let from = requested.unwrap_or(0);
        let waited_events = until.saturating_sub(from);
        let waited_us = time(until) - time(from);
        // Completed by the very next event, and (with times) soon: it did not wait. Still
        // pending at the snapshot: it is stuck, however recent the request.
        let long = timed && waited_us >= min_wait_us;
        if end.is_some() && waited_events <= 1 && !long {
            continue;
        }
        out.waited += 1;
        if end.is_some() && timed && !long {
            continue;
        }
        let size_bytes = d.size_of(t, id);
        let stream = d.stream_of(t, id);
        if !own_streams.contains(&stream) {
            own_streams.push(stream);
        }
        out.count += 1;
        out.bytes += size_bytes;
        if end.is_some() {
            out.longest_us = out.longest_us.max(waited_us);
        }
        out.still_pending += u64::from(end.is_none());
        out.frees.push(PendingFree {
            allocation: id,
            address: d.addr_of(t, id),
            size_bytes,
            stream,
            stack: d.stack_of(t, id),
            requested_event: requested,
            completed_event: end,
            requested_us: time(from),
            waited_us,
            waited_events,
        });
    }
    out.frees.sort_by_key(|f| {
        (
            f.completed_event.is_some(),
            std::cmp::Reverse((f.waited_us, f.waited_events)),
            f.requested_event,
        )
    });
    out.frees.truncate(MAX_LISTED);
    if out.count > 0 {
        out.streams = device_streams(snap, d)
            .into_iter()
            .filter(|s| !own_streams.contains(s))
            .collect();
    }
    out
}

/// The distinct streams of a device's trace, in order of first use.
fn device_streams(snap: &Snapshot, d: &DeviceIndex) -> Vec<u64> {
    let t = &snap.trace;
    let mut seen = Vec::new();
    for e in 0..d.len {
        let s = t.stream(d.row(e));
        if !seen.contains(&s) {
            seen.push(s);
        }
    }
    seen
}
