//! Drives the allocator model through one device's trace: every `alloc` becomes a `malloc` of
//! the size and stream the program asked for, every free a `free` at the moment the trace says the
//! block went back (`free_completed`), every `oom` a request that must fail under the limit. The
//! replay goes past survivable OOMs: a request the model cannot satisfy is dropped, as PyTorch
//! drops it, and the trace goes on; a fatal one ends the replay, as it ended the program. Each OOM is survivable or fatal: a recorded OOM keeps the fate the trace
//! shows ([`crate::analysis::recovery`]); a new one is survivable where the recorded run survived
//! an OOM from the same user code, else fatal: for a caught OOM, a request made under the same
//! callers (its user frames less the innermost, the line that asked, end the request's: the
//! `try` that caught it encloses them); for a workspace fallback, the same stack. Past an OOM the recorded run survived, every run follows the path the
//! recorded run took (a request that fails there under the recorded settings but fits under
//! others is granted and given back at once). The
//! allocator's own segment events in the trace are not replayed: the model makes its own, and
//! under the recorded settings they must come out the same (the replay check).
//!
//! What the trace cannot say is replayed as recorded in every run: a burst of `segment_free`s
//! the model did not cause is `torch.cuda.empty_cache()` (or a release under memory pressure the
//! model was given no limit for), so every run empties its cache at that point.

use rustc_hash::FxHashMap;

use super::allocator::{Allocator, Limit, SegAction, SegEvent, Stats};
use super::conf::AllocConf;
use crate::analysis::index::{DeviceIndex, Index, NONE};
use crate::analysis::recovery::{Recovery, fates};
use crate::analysis::state::{AllocatorState, state_at};
use crate::cancel::{Cancel, Cancelled};
use crate::model::{Action, Snapshot};
use crate::model::{FrameId, StackId};

/// The trace of one device, prepared once and replayed under any number of settings.
pub struct Trace<'a> {
    snap: &'a Snapshot,
    d: &'a DeviceIndex,
    /// The trace's segment events in order, with their positions.
    pub recorded: Vec<SegEvent>,
    recorded_at: Vec<u32>,
    /// For each recorded release event that a retry inside the next request could explain (a
    /// release, then a new segment and its `alloc`, or an `oom`): that request's size.
    retry_burst: Vec<Option<u64>>,
    /// Private pools by address range (start, end, first position, pool).
    private: Vec<(u64, u64, u32, (i64, i64))>,
    /// Segments and blocks when the trace starts.
    start: AllocatorState,
    pub peak_reserved_bytes: u64,
    /// Each recorded OOM's position and whether the run survived it.
    recorded_ooms: FxHashMap<u32, bool>,
    /// Where the recorded run survived OOMs: the callers of caught ones (their user frames less
    /// the innermost; all of them when there is only one), the stacks of workspace fallbacks,
    /// and the last such position (an OOM with no user frames is survivable only up to there).
    caught_users: Vec<Vec<FrameId>>,
    fallback_stacks: Vec<StackId>,
    last_survived: Option<u32>,
    user_frames: Box<dyn Fn(StackId) -> Vec<FrameId> + Sync + 'a>,
}

/// How far back a request with no user frames looks for the user code around it.
const CONTEXT_EVENTS: u32 = 4096;

/// How often (in events) a replay looks at its [`Cancel`]: ~1 ms of replay.
pub const CANCEL_CHECK_EVENTS: usize = 16_384;

/// One replay's outcome.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub stats: Stats,
    /// Position (events before it) of the first fatal OOM.
    pub oom_position: Option<u32>,
    /// Every request the model could not satisfy: (position, survivable).
    pub ooms: Vec<(u32, bool)>,
    /// Reserved bytes after each position where they changed: (position, bytes).
    pub reserved: Vec<(u32, u64)>,
    /// `alloc`s whose block sits where the trace says (meaningful under the recorded settings).
    pub allocs: u32,
    pub allocs_at_recorded_address: u32,
    pub segment_events: Vec<SegEvent>,
    /// Positions where the program released cached memory itself (found under the recorded
    /// settings, replayed under the others).
    pub external_releases: Vec<u32>,
}

/// Where a replay empties the cache as the program did.
#[derive(Clone, Copy, Debug)]
pub enum Releases<'r> {
    /// Under the recorded settings: wherever the trace releases memory the model did not.
    Discover,
    /// At these positions (found by a [`Releases::Discover`] replay).
    At(&'r [u32]),
}

impl Outcome {
    fn oom(&mut self, position: u32, survivable: bool) {
        self.ooms.push((position, survivable));
        if !survivable {
            self.oom_position.get_or_insert(position);
        }
    }

    pub fn survivable_ooms(&self) -> u32 {
        self.ooms.iter().filter(|o| o.1).count() as u32
    }

    pub fn fatal_ooms(&self) -> u32 {
        self.ooms.iter().filter(|o| !o.1).count() as u32
    }
}

impl<'a> Trace<'a> {
    pub fn new(snap: &'a Snapshot, index: &'a Index, d: &'a DeviceIndex) -> Trace<'a> {
        let t = &snap.trace;
        let first = d.first_row as usize;
        let n = d.len as usize;
        let mut recorded = Vec::new();
        let mut recorded_at = Vec::new();
        let mut retry_burst = Vec::new();
        for i in 0..n {
            let r = first + i;
            let action = match t.action[r] {
                Action::SegmentAlloc => SegAction::Alloc,
                Action::SegmentFree => SegAction::Free,
                Action::SegmentMap => SegAction::Map,
                Action::SegmentUnmap => SegAction::Unmap,
                _ => continue,
            };
            recorded.push(SegEvent {
                action,
                addr: t.addr.get(r),
                size: t.size.get(r),
            });
            recorded_at.push(i as u32);
            if matches!(action, SegAction::Free | SegAction::Unmap) {
                // Past the rest of the burst (and frees completed by its synchronisation).
                let mut j = i + 1;
                while j < n
                    && matches!(
                        t.action[first + j],
                        Action::SegmentFree | Action::SegmentUnmap | Action::FreeCompleted
                    )
                {
                    j += 1;
                }
                // The request that follows a release, then a new segment and its `alloc` (or an
                // `oom`): the allocator's retry if that request could not have had its segment.
                let retry = (j < n)
                    .then(|| match t.action[first + j] {
                        Action::Oom => Some(t.size.get(first + j)),
                        Action::SegmentAlloc | Action::SegmentMap => {
                            let mut k = j + 1;
                            while k < n && t.action[first + k] == Action::SegmentMap {
                                k += 1;
                            }
                            (k < n && t.action[first + k] == Action::Alloc)
                                .then(|| t.size.get(first + k))
                        }
                        _ => None,
                    })
                    .flatten();
                retry_burst.push(retry);
            } else {
                retry_burst.push(None);
            }
        }
        // Private-pool segments (their pool is known from the snapshot's segments, so only for
        // those alive at the end), each from its segment_alloc on.
        let private = d
            .segments
            .iter()
            .filter(|s| s.pool_id != (0, 0))
            .map(|s| {
                let from = if s.start == NONE { 0 } else { s.start };
                (s.address, s.address + s.size, from, s.pool_id)
            })
            .collect();
        let start = state_at(snap, index, d.device, 0);
        let peak = d.peak_reserved();
        let user_frames = move |stack: StackId| -> Vec<FrameId> {
            snap.stack(stack)
                .iter()
                .copied()
                .filter(|&f| index.frames.is_user(f))
                .collect()
        };
        let mut recorded_ooms = FxHashMap::default();
        let (mut caught_users, mut fallback_stacks, mut last_survived) =
            (Vec::new(), Vec::new(), None);
        for f in fates(snap, index, d) {
            recorded_ooms.insert(f.position, f.recovery.recovered());
            let stack = t.stack.get(d.row(f.position));
            match f.recovery {
                Recovery::Fatal => continue,
                Recovery::WorkspaceFallback => fallback_stacks.push(stack),
                Recovery::Caught => {
                    let users = user_frames(stack);
                    caught_users.push(if users.len() >= 2 {
                        users[1..].to_vec()
                    } else {
                        users
                    });
                }
            }
            last_survived = Some(f.position);
        }
        caught_users.sort_unstable();
        caught_users.dedup();
        fallback_stacks.sort_unstable();
        fallback_stacks.dedup();
        Trace {
            snap,
            d,
            recorded,
            recorded_at,
            retry_burst,
            private,
            start,
            peak_reserved_bytes: peak,
            recorded_ooms,
            caught_users,
            fallback_stacks,
            last_survived,
            user_frames: Box::new(user_frames),
        }
    }

    /// Whether a request the recorded run satisfied, failing at position `i` of a replay, would
    /// have been survived: the recorded run survived OOMs from the same user code.
    fn survivable_at(&self, stack: StackId, i: u32) -> bool {
        if self.fallback_stacks.binary_search(&stack).is_ok() {
            return true;
        }
        let mut users = (self.user_frames)(stack);
        if users.is_empty() {
            // No user frames (backward runs on the autograd engine's thread, C++ code): the user
            // code around it is the last request before it that has some (`loss.backward()` was
            // called from there).
            let t = &self.snap.trace;
            users = (i.saturating_sub(CONTEXT_EVENTS)..i)
                .rev()
                .map(|q| (self.user_frames)(t.stack.get(self.d.row(q))))
                .find(|u| !u.is_empty())
                .unwrap_or_default();
            if users.is_empty() {
                return self.caught_users.iter().any(Vec::is_empty)
                    && self.last_survived.is_some_and(|p| i <= p);
            }
        }
        self.caught_users
            .iter()
            .any(|callers| !callers.is_empty() && users.ends_with(callers))
    }

    pub fn device(&self) -> i32 {
        self.d.device
    }

    pub fn events(&self) -> u32 {
        self.d.len
    }

    /// Whether the trace begins mid-run (allocations or segments predate it).
    pub fn starts_mid_run(&self) -> bool {
        !self.start.segments.is_empty()
    }

    /// Whether the trace has an OOM and no request after its last one.
    pub fn oom_ends_trace(&self) -> bool {
        let t = &self.snap.trace;
        let first = self.d.first_row as usize;
        let rows = first..first + self.d.len as usize;
        match rows.clone().rev().find(|&r| t.action[r] == Action::Oom) {
            Some(last) => !(last + 1..rows.end).any(|r| t.action[r] == Action::Alloc),
            None => false,
        }
    }

    /// Position of recorded segment event `k`.
    pub fn position_of(&self, k: usize) -> Option<u32> {
        self.recorded_at.get(k).copied()
    }

    /// The pool of an `alloc` at position `i` of address `addr`.
    fn private_pool(&self, addr: u64, i: u32) -> (i64, i64) {
        self.private
            .iter()
            .find(|(lo, hi, from, _)| addr >= *lo && addr < *hi && i >= *from)
            .map_or((0, 0), |p| p.3)
    }

    /// Positions and details of the trace's `oom` entries: (position, rounded request, stream,
    /// driver free bytes).
    pub fn ooms(&self) -> Vec<(u32, u64, u64, u64)> {
        let t = &self.snap.trace;
        let first = self.d.first_row as usize;
        let free: FxHashMap<u32, u64> = t.device_free.iter().copied().collect();
        (0..self.d.len)
            .filter(|&i| t.action[first + i as usize] == Action::Oom)
            .map(|i| {
                let r = first + i as usize;
                let driver_free = free.get(&(r as u32)).copied().unwrap_or(t.addr.get(r));
                (i, t.size.get(r), t.stream(r), driver_free)
            })
            .collect()
    }

    /// The least a per-process limit must have allowed for every request before position `p`
    /// that got new memory: what was reserved before its segment events plus the allocation size
    /// PyTorch checks against the limit (`alloc_block`; more than is mapped for an expandable
    /// segment).
    pub fn granted_before(&self, p: u32, conf: &AllocConf) -> u64 {
        let t = &self.snap.trace;
        let first = self.d.first_row as usize;
        let mut most = 0;
        for i in 1..(p.min(self.d.len) as usize) {
            if t.action[first + i] != Action::Alloc {
                continue;
            }
            let mut j = i;
            while j > 0
                && matches!(
                    t.action[first + j - 1],
                    Action::SegmentAlloc | Action::SegmentMap
                )
            {
                j -= 1;
            }
            if j < i {
                let asked =
                    self.reserved_at(j as u32) + conf.allocation_size(t.size.get(first + i));
                most = most.max(asked);
            }
        }
        most
    }

    /// Reserved bytes after `p` events, as recorded.
    pub fn reserved_at(&self, p: u32) -> u64 {
        self.d.reserved_at(p)
    }

    /// Replays the trace under `conf` (and `limit`). [`Releases::Discover`] is the replay under
    /// the recorded settings: it takes segment addresses from the trace where the model agrees
    /// with it and finds the releases the program made itself; other settings replay those.
    ///
    /// Gives up with [`Cancelled`] within [`CANCEL_CHECK_EVENTS`] events of `cancel` firing. Adds
    /// the events it replays to `replayed` as it goes (a what-if's progress).
    pub fn replay(
        &self,
        conf: AllocConf,
        limit: Option<Limit>,
        releases: Releases<'_>,
        cancel: &Cancel,
        replayed: &std::sync::atomic::AtomicU64,
    ) -> Result<Outcome, Cancelled> {
        let seeded = matches!(releases, Releases::Discover);
        let mut external = match releases {
            Releases::At(p) => p.iter().peekable(),
            Releases::Discover => [].iter().peekable(),
        };
        let mut a = Allocator::new(conf, limit);
        a.record_events = seeded;
        if seeded {
            a.seed_with(self.recorded.clone());
        }
        // Where the trace starts mid-run: its segments and live blocks as they were then.
        let mut live: FxHashMap<u64, u32> = FxHashMap::default();
        for s in &self.start.segments {
            let blocks: Vec<(u64, u64, bool)> = s
                .blocks
                .iter()
                .map(|b| (b.address, b.size, b.state.is_active()))
                .collect();
            let small = s.segment_type == crate::model::SegmentType::Small;
            let ids = a.add_existing_segment(
                s.address,
                s.stream,
                s.pool_id,
                small,
                s.is_expandable,
                &blocks,
            );
            for (b, id) in s.blocks.iter().filter(|b| b.state.is_active()).zip(ids) {
                live.insert(b.address, id);
            }
        }
        let t = &self.snap.trace;
        let first = self.d.first_row as usize;
        let n = self.d.len as usize;
        let mut out = Outcome {
            stats: Stats::default(),
            oom_position: None,
            ooms: Vec::new(),
            reserved: vec![(0, a.stats.reserved_bytes)],
            allocs: 0,
            allocs_at_recorded_address: 0,
            segment_events: Vec::new(),
            external_releases: Vec::new(),
        };
        // The pool each stream's last request went to: a stream capturing a CUDA graph
        // allocates from the graph's private pool.
        let mut capturing: FxHashMap<u64, (i64, i64)> = FxHashMap::default();
        let mut k = 0usize; // recorded segment events passed
        let mut i = 0usize;
        let mut last_reserved = a.stats.reserved_bytes;
        let mut counted = 0usize; // events added to `replayed`
        while i < n {
            if i.is_multiple_of(CANCEL_CHECK_EVENTS) {
                cancel.check()?;
                replayed.fetch_add((i - counted) as u64, std::sync::atomic::Ordering::Relaxed);
                counted = i;
            }
            let r = first + i;
            match t.action[r] {
                Action::Alloc => {
                    let addr = t.addr.get(r);
                    let private = self.private_pool(addr, i as u32);
                    capturing.insert(t.stream(r), private);
                    match a.malloc(t.size.get(r), t.stream(r), private) {
                        Some(b) => {
                            out.allocs += 1;
                            if a.block_addr(b) == addr {
                                out.allocs_at_recorded_address += 1;
                            }
                            live.insert(addr, b);
                        }
                        None => {
                            // Dropped, as PyTorch drops it; its frees find nothing to free.
                            live.remove(&addr);
                            let survivable = self.survivable_at(t.stack.get(r), i as u32);
                            out.oom(i as u32, survivable);
                            if !survivable {
                                break; // the run ends here
                            }
                        }
                    }
                }
                Action::Oom => {
                    // The recorded run failed here; with other settings it may not. Its pool is
                    // the one the stream's last request went to (a capture's private pool).
                    let private = capturing.get(&t.stream(r)).copied().unwrap_or((0, 0));
                    match a.malloc(t.size.get(r), t.stream(r), private) {
                        None => {
                            let survivable = self
                                .recorded_ooms
                                .get(&(i as u32))
                                .copied()
                                .unwrap_or(false);
                            out.oom(i as u32, survivable);
                            if !survivable {
                                break;
                            }
                        }
                        // Granted: the run follows the recorded path from here, which did
                        // without it.
                        Some(b) => a.free(b, false),
                    }
                }
                Action::FreeRequested => {
                    let addr = t.addr.get(r);
                    if let Some(&b) = live.get(&addr) {
                        let completes_now = i + 1 < n
                            && t.action[r + 1] == Action::FreeCompleted
                            && t.addr.get(r + 1) == addr;
                        a.free(b, !completes_now);
                        if completes_now {
                            live.remove(&addr);
                            i += 1;
                        }
                    }
                }
                Action::FreeCompleted => {
                    if let Some(b) = live.remove(&t.addr.get(r))
                        && a.is_pending(b)
                    {
                        a.complete_free(b);
                    }
                }
                Action::SegmentAlloc | Action::SegmentMap => k += 1,
                Action::SegmentFree | Action::SegmentUnmap => {
                    if seeded {
                        // A release the model did not make itself (yet): the program emptied
                        // the cache, or memory pressure the model has no limit for. With a
                        // limit, a retry burst is left to the model's own retry at the next
                        // request.
                        let explained = self.retry_burst[k].is_some_and(|size| {
                            limit.is_some() && (!a.new_segment_fits(size) || a.would_collect())
                        });
                        if !explained && a.events.len() <= k {
                            a.release_cached_blocks();
                            out.external_releases.push(i as u32);
                        }
                    } else if external.next_if(|&&p| p == i as u32).is_some() {
                        a.release_cached_blocks();
                    }
                    k += 1;
                }
                _ => {}
            }
            if a.stats.reserved_bytes != last_reserved {
                last_reserved = a.stats.reserved_bytes;
                out.reserved.push((i as u32 + 1, last_reserved));
            }
            i += 1;
        }
        // A run stopped by an OOM has nothing left to replay: its whole share is done.
        replayed.fetch_add((n - counted) as u64, std::sync::atomic::Ordering::Relaxed);
        out.stats = a.stats.clone();
        out.segment_events = std::mem::take(&mut a.events);
        Ok(out)
    }
}
