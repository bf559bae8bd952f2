//! Frees stuck pending: a tensor Python let go of (`free_requested`) whose block the caching
//! allocator could not reuse until the streams that used it caught up (`free_completed`). A block
//! used on another stream (`Tensor.record_stream`, NCCL, a side stream's copy) waits for that
//! stream's work; while it waits its bytes are neither allocated nor reusable, which is memory a
//! user cannot see in `memory_allocated()` and may not expect.
//!
//! Every allocation of the trace is looked at, not a sample: one pass over the device's
//! allocation table. Where the trace has no times (an old format), waits are counted in events.

use super::index::{DeviceIndex, NONE};
pub use super::pending_list::{PendingFree, PendingFrees};
use crate::model::Snapshot;

/// How long a free must wait to be listed, unless asked otherwise: 1 ms (a free completes in
/// microseconds when nothing holds it).
pub const DEFAULT_MIN_WAIT_US: i64 = 1_000;

/// The most frees a list carries; the totals count all of them.
pub const MAX_LISTED: usize = 2_000;

/// [`pending_frees`] at [`DEFAULT_MIN_WAIT_US`], computed once per device index and kept: the
/// segment view asks for it at every load, and it is a pass over every allocation with two
/// random reads of the time column each (64 ms on a 12M-event trace, 0.2–0.4 s while the page
/// builds itself on the same cores; bench/README.md, issue 41).
pub fn default_pending_frees<'d>(snap: &Snapshot, d: &'d DeviceIndex) -> &'d PendingFrees {
    d.lazy
        .pending_frees
        .get_or_init(|| pending_frees(snap, d, DEFAULT_MIN_WAIT_US))
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
