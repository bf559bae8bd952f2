//! The frees that waited, as [`super::pending`] lists them: types only, so that the device
//! index can keep a device's list (`index::LazyViews`) without the index and the analysis that
//! reads it importing each other.

use serde::Serialize;

use crate::model::StackId;

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
    /// [`super::pending::MAX_LISTED`].
    pub frees: Vec<PendingFree>,
}
