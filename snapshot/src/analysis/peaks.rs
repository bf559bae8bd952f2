//! The three peaks PyTorch reports, computed from a snapshot: `torch.cuda.memory_stats()`'s
//! `requested_bytes.all.peak` (what callers asked for), `allocated_bytes.all.peak` (the blocks
//! they were given: `max_memory_allocated()`) and `reserved_bytes.all.peak` (the segments:
//! `max_memory_reserved()`), each with the position where it was reached.
//!
//! Requested and reserved bytes are in the trace (the live series and the segment events).
//! Allocated bytes are not: a trace `alloc` carries the requested size, and the block PyTorch
//! hands out can be larger than the request rounded, when the allocator took a cached block
//! whole instead of splitting it (`should_split`). So the blocks are worked out here from the
//! addresses the trace gives: an allocation at address `a` took the free block starting at `a`,
//! which runs to the next live block of its segment (free neighbours are always merged), and kept
//! all of it unless the remainder was worth splitting off. Blocks alive at the snapshot have their
//! exact size in the segments, which is used for them (and checks the rule on every fixture).
//!
//! Counted as PyTorch counts: allocated bytes fall when the program frees a block
//! (`free_requested`), requested bytes when the block goes back to the pool (`free_completed`).

use std::collections::BTreeMap;
use std::ops::Bound;

use rustc_hash::FxHashMap;
use serde::Serialize;

use super::index::{DeviceIndex, NONE};
use crate::analysis::whatif::conf::AllocConf;
use crate::model::{BlockState, Snapshot};

/// Requests up to this size come from the small pool (`kSmallSize`); a large-pool remainder must
/// exceed it to be split off.
const SMALL_SIZE: u64 = 1 << 20;

// (Defined beside the index, which keeps each device's allocated peak once computed.)
pub use super::index::Peak;

/// What the peaks cover.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PeakScope {
    /// The trace starts on an empty allocator: the peaks are the process's own (unless memory
    /// was used and wholly given back before recording began).
    WholeProcess,
    /// The trace starts mid-run (memory made or reserved before it): the peaks are over the
    /// trace's window only; higher ones before it are not seen.
    TraceWindow,
    /// No trace, or one that records no allocation: the figures are the snapshot's final state.
    FinalState,
}

/// A device's three peaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Peaks {
    pub requested: Peak,
    pub allocated: Peak,
    pub reserved: Peak,
    pub scope: PeakScope,
}

/// The allocator settings a snapshot records (defaults when it records none or PyTorch would
/// refuse them).
pub fn recorded_conf(snap: &Snapshot) -> AllocConf {
    snap.allocator_settings
        .as_ref()
        .and_then(|s| AllocConf::from_snapshot(s).ok())
        .map_or_else(AllocConf::default, |(c, _)| c)
}

/// The three peaks of device `d` (see the module's doc).
pub fn peaks(snap: &Snapshot, d: &DeviceIndex) -> Peaks {
    if d.len == 0 || d.history_off() {
        return final_state_peaks(snap, d.device);
    }
    let requested = Peak {
        bytes: d.peak_live_bytes,
        position: d.peak_position,
    };
    let allocated = d.allocated_peak(|| {
        let (peak, sizes) = walk(snap, d);
        let _ = d.lazy.block_sizes.set(sizes);
        peak
    });
    let reserved = reserved_peak(d);
    let scope = if d.live_at_start == 0 && d.reserved_at_start == 0 && d.predating_freed == 0 {
        PeakScope::WholeProcess
    } else {
        PeakScope::TraceWindow
    };
    Peaks {
        requested,
        allocated,
        reserved,
        scope,
    }
}

/// The highest reserved bytes and the first position they were reached.
pub fn reserved_peak(d: &DeviceIndex) -> Peak {
    let mut best = Peak {
        bytes: d.reserved_at_start,
        position: 0,
    };
    for &(p, r) in &d.reserved_changes {
        if r > best.bytes {
            best = Peak {
                bytes: r,
                position: p,
            };
        }
    }
    best
}

/// A device with no trace: what its segments hold at the snapshot.
fn final_state_peaks(snap: &Snapshot, device: i32) -> Peaks {
    let (mut requested, mut allocated, mut reserved) = (0, 0, 0);
    for seg in snap.segments.iter().filter(|s| s.device == device) {
        reserved += seg.total_size;
        for b in snap.blocks_of(seg) {
            match b.state {
                BlockState::ActiveAllocated => {
                    allocated += b.size;
                    requested += b.requested_size;
                }
                BlockState::ActivePendingFree => requested += b.requested_size,
                _ => {}
            }
        }
    }
    let at = |bytes| Peak { bytes, position: 0 };
    Peaks {
        requested: at(requested),
        allocated: at(allocated),
        reserved: at(reserved),
        scope: PeakScope::FinalState,
    }
}

/// The highest sum of allocated block bytes on device `d` (see the module's doc).
pub fn allocated_peak(snap: &Snapshot, d: &DeviceIndex) -> Peak {
    walk(snap, d).0
}

/// The allocations of `d` whose block is not their request rounded to 512 bytes, `(id, block
/// bytes)` by id: larger where the allocator kept a cached block whole, or rounded otherwise
/// (`roundup_power2_divisions`). Worked out once per device, with the allocated peak.
pub fn block_sizes<'a>(snap: &Snapshot, d: &'a DeviceIndex) -> &'a [(u32, u64)] {
    d.lazy.block_sizes.get_or_init(|| {
        let (peak, sizes) = walk(snap, d);
        let _ = d.lazy.allocated_peak.set(peak);
        sizes
    })
}

/// The block sizes of one device's allocations, worked out as the module's doc says: the
/// highest sum of those allocated, and the blocks that are not their request rounded.
fn walk(snap: &Snapshot, d: &DeviceIndex) -> (Peak, Vec<(u32, u64)>) {
    let t = &snap.trace;
    let conf = recorded_conf(snap);
    let final_sizes: FxHashMap<u64, u64> = snap
        .segments
        .iter()
        .filter(|s| s.device == d.device)
        .flat_map(|s| snap.blocks_of(s))
        .filter(|b| b.state.is_active())
        .map(|b| (b.address, b.size))
        .collect();
    // Segment events are few: their (event, span) lists sorted, passed with a cursor each.
    let mut seg_starts: Vec<(u32, usize)> = Vec::new();
    let mut seg_ends: Vec<(u32, usize)> = Vec::new();
    let mut segs = OpenSegments::new(d.segments.len());
    for (i, s) in d
        .segments
        .iter()
        .enumerate()
        .filter(|(_, s)| !s.is_expandable)
    {
        if s.start == NONE {
            segs.open(s.address, s.size, i);
        } else {
            seg_starts.push((s.start, i));
        }
        if s.end != NONE {
            seg_ends.push((s.end, i));
        }
    }
    seg_starts.sort_unstable();
    seg_ends.sort_unstable();
    let (mut next_start, mut next_end) = (0, 0);
    let mut block_of = BlockSizes::new(d.allocations.len());
    // The span of each live large block's segment, found once at its allocation.
    // Only large blocks have one: a map, not a slot for every allocation.
    let mut span_of: FxHashMap<u32, u32> = FxHashMap::default();
    // The blocks that are not their request rounded as the allocator state draws a block when
    // it knows no better (512-byte rounding), noted as each block's size is worked out: a
    // second pass looking up every allocation's request was a fifth of this walk's time on a
    // 12M-event trace (bench/README.md, issue 41).
    let defaults = AllocConf::default();
    let mut unusual: Vec<(u32, u64)> = Vec::new();
    let mut note_unusual = |id: u32, size: u64, asked: u64| {
        if size != 0 && size != defaults.round_size(asked) {
            unusual.push((id, size));
        }
    };
    let mut current: u64 = 0;
    for (id, a) in d.allocations.iter().enumerate() {
        if a.start != NONE {
            continue;
        }
        let addr = d.addr_of(t, id as u32);
        let request = d.size_of(t, id as u32);
        let size = final_sizes
            .get(&addr)
            .copied()
            .unwrap_or_else(|| conf.round_size(request));
        block_of.set(id as u32, size);
        note_unusual(id as u32, size, request);
        if size > SMALL_SIZE {
            let span = segs.add_block(addr);
            if span != u32::MAX {
                span_of.insert(id as u32, span);
            }
        }
        // A block pending its free at the snapshot whose free predates the trace was no longer
        // counted as allocated when the trace began.
        if a.free_requested == NONE || a.free_requested != 0 || a.end != NONE {
            current += size;
        }
    }
    let mut best = Peak {
        bytes: current,
        position: 0,
    };
    let mut events = d.event_allocation.reader();
    for e in 0..d.len {
        while let Some(&(_, i)) = seg_starts.get(next_start).filter(|(at, _)| *at <= e) {
            let s = &d.segments[i];
            segs.open(s.address, s.size, i);
            next_start += 1;
        }
        let id = events.get(e);
        if id != NONE {
            // Addresses are read only for large blocks and blocks alive at the end: most of a
            // trace can be small-pool traffic.
            let a = &d.allocations[id as usize];
            if a.start == e {
                let request = d.size_of(t, id);
                let asked = conf.round_size(request);
                let size = if asked > SMALL_SIZE || a.end == NONE {
                    let addr = d.addr_of(t, id);
                    let seg = (asked > SMALL_SIZE).then(|| segs.of(addr)).flatten();
                    // Only a block alive at the end has a final size: the lookup (a cache
                    // miss in a table of every live block) is made for those alone.
                    let last = if a.end == NONE {
                        final_sizes.get(&addr).copied()
                    } else {
                        None
                    };
                    let size = last.unwrap_or_else(|| block_size(&conf, asked, addr, seg, &segs));
                    if let Some((_, span)) = seg {
                        segs.blocks[span].push(addr);
                        span_of.insert(id, span as u32);
                    }
                    size
                } else {
                    asked
                };
                block_of.set(id, size);
                note_unusual(id, size, request);
                current += size;
            }
            if a.free_requested == e || (a.end == e && a.free_requested == NONE) {
                current = current.saturating_sub(block_of.get(id));
            }
            // Only large blocks have a span (their size is over `SMALL_SIZE`): most frees
            // need no lookup.
            if a.end == e
                && block_of.get(id) > SMALL_SIZE
                && let Some(span) = span_of.remove(&id)
            {
                segs.remove_block(span as usize, d.addr_of(t, id));
            }
        }
        while let Some(&(_, i)) = seg_ends.get(next_end).filter(|(at, _)| *at <= e) {
            segs.close(d.segments[i].address);
            next_end += 1;
        }
        if current > best.bytes {
            best = Peak {
                bytes: current,
                position: e + 1,
            };
        }
    }
    // Blocks are made in allocation order but for those made before the trace.
    if !unusual.is_sorted_by_key(|u| u.0) {
        unusual.sort_unstable_by_key(|u| u.0);
    }
    (best, unusual)
}

/// Each allocation's block size (0: not known yet), in 512-byte units: every block the allocator
/// makes is a multiple of 512 bytes, so 4 bytes an allocation instead of 8 (26 MB less at the
/// report's memory peak on a 13M-event trace, bench/README.md issue 41). A size that is not
/// (a hand-made trace) is kept apart, exactly.
struct BlockSizes {
    units: Vec<u32>,
    odd: FxHashMap<u32, u64>,
}

impl BlockSizes {
    const UNIT: u64 = 512;
    /// Marks a size kept in `odd`.
    const ODD: u32 = u32::MAX;

    fn new(n: usize) -> BlockSizes {
        BlockSizes {
            units: vec![0; n],
            odd: FxHashMap::default(),
        }
    }

    fn set(&mut self, id: u32, size: u64) {
        let units = size / Self::UNIT;
        self.units[id as usize] = if size.is_multiple_of(Self::UNIT) && units < Self::ODD as u64 {
            units as u32
        } else {
            self.odd.insert(id, size);
            Self::ODD
        };
    }

    fn get(&self, id: u32) -> u64 {
        match self.units[id as usize] {
            Self::ODD => self.odd[&id],
            u => u as u64 * Self::UNIT,
        }
    }
}

/// The ordinary segments alive as a trace is walked, sorted by address, each with the addresses
/// of its live large-pool blocks (a handful per segment, so a scan beats a tree: a B-tree of all
/// live blocks was most of this walk's time).
struct OpenSegments {
    /// (start, newest first among equal starts) → (end, span). A map, not a sorted vector: a
    /// long trace can hold 200,000 segments open, and inserting into the middle of a vector that
    /// long copied 0.6 s of memory on a tiled 6M-event trace (bench/README.md, issue 41).
    open: BTreeMap<(u64, u64), (u64, usize)>,
    opened: u64,
    /// Live large blocks' addresses, by span.
    blocks: Vec<Vec<u64>>,
    /// The last lookups' answers, each with the addresses that get the same one: a trace's
    /// large blocks mostly lie in the few segments its last ones did, and a search of a map of
    /// thousands of open segments for each was a third of the walk on a 13M-event trace
    /// (bench/README.md, issue 41).
    last: [Lookup; LOOKUPS],
    /// Where the next lookup is remembered (the oldest goes).
    next_slot: usize,
}

/// Lookups remembered: on the 1 GB trace of issue 41, one remembered answered 46 % of them and
/// eight answered 90 % (91 % on gpt_fresh; 46 % on held_training × 9500, whose every copy opens
/// segments of its own, where the walk took as long as with the map alone).
const LOOKUPS: usize = 8;
/// A remembered lookup that holds no address.
const NO_LOOKUP: Lookup = Lookup {
    lo: 1,
    hi: 0,
    seg: None,
};

/// What [`OpenSegments::of`] found, and for which addresses: every address in `lo..hi` has the
/// same open segment starting at or below it (the newest start there is `lo`, the next one `hi`).
#[derive(Clone, Copy)]
struct Lookup {
    lo: u64,
    hi: u64,
    /// The segment starting at `lo` (its end, its span); `None`: no segment starts at or below.
    seg: Option<(u64, usize)>,
}

impl OpenSegments {
    fn new(spans: usize) -> OpenSegments {
        OpenSegments {
            open: BTreeMap::new(),
            opened: 0,
            blocks: vec![Vec::new(); spans],
            last: [NO_LOOKUP; LOOKUPS],
            next_slot: 0,
        }
    }

    fn open(&mut self, address: u64, size: u64, span: usize) {
        self.opened += 1;
        // Only the remembered lookup whose addresses hold the new start can change.
        self.forget(|l| l.lo <= address && address < l.hi);
        self.open.insert(
            (address, u64::MAX - self.opened),
            (address.saturating_add(size), span),
        );
        self.blocks[span].clear();
    }

    /// Closes the newest segment opened at `address`.
    fn close(&mut self, address: u64) {
        // Only a lookup that found a segment starting here can change (one that stops here
        // stays right, if shorter than it could be).
        self.forget(|l| l.lo == address);
        let newest = self
            .open
            .range((address, 0)..=(address, u64::MAX))
            .next()
            .map(|(&k, _)| k);
        if let Some(k) = newest
            && let Some((_, span)) = self.open.remove(&k)
        {
            self.blocks[span].clear();
        }
    }

    /// The segment holding `addr`: (its end, its span); of segments opened at one address, the
    /// oldest.
    fn of(&mut self, addr: u64) -> Option<(u64, usize)> {
        let found = match self.last.iter().find(|l| l.lo <= addr && addr < l.hi) {
            Some(l) => l.seg,
            None => self.look_up(addr),
        };
        let (end, span) = found?;
        (addr < end).then_some((end, span))
    }

    /// Forgets the remembered lookups `stale` picks.
    fn forget(&mut self, stale: impl Fn(&Lookup) -> bool) {
        for l in &mut self.last {
            if stale(l) {
                *l = NO_LOOKUP;
            }
        }
    }

    /// [`OpenSegments::of`] from the map: the segment starting nearest at or below `addr` (the
    /// oldest of those starting there), remembered with the addresses that share it.
    fn look_up(&mut self, addr: u64) -> Option<(u64, usize)> {
        let below = self.open.range(..=(addr, u64::MAX)).next_back();
        let above = self
            .open
            .range((Bound::Excluded((addr, u64::MAX)), Bound::Unbounded))
            .next();
        let seg = below.map(|(_, &(end, span))| (end, span));
        self.last[self.next_slot] = Lookup {
            lo: below.map_or(0, |(&(start, _), _)| start),
            hi: above.map_or(u64::MAX, |(&(start, _), _)| start),
            seg,
        };
        self.next_slot = (self.next_slot + 1) % LOOKUPS;
        seg
    }

    /// Adds a live block; its segment's span, or `u32::MAX` outside every segment.
    fn add_block(&mut self, addr: u64) -> u32 {
        match self.of(addr) {
            Some((_, span)) => {
                self.blocks[span].push(addr);
                span as u32
            }
            None => u32::MAX,
        }
    }

    fn remove_block(&mut self, span: usize, addr: u64) {
        let v = &mut self.blocks[span];
        if let Some(k) = v.iter().position(|&b| b == addr) {
            v.swap_remove(k);
        }
    }
}

/// The block an allocation of `asked` bytes (rounded) at `addr` got: the free block at `addr`
/// runs to the next live large block or the end of its segment; a large-pool block keeps all of
/// it unless the remainder is over 1 MiB and the request under `max_split_size`.
/// `seg`: the segment holding `addr` ([`OpenSegments::of`]).
fn block_size(
    conf: &AllocConf,
    asked: u64,
    addr: u64,
    seg: Option<(u64, usize)>,
    segs: &OpenSegments,
) -> u64 {
    if asked <= SMALL_SIZE || conf.expandable_segments {
        return asked;
    }
    let Some((seg_end, span)) = seg else {
        return asked;
    };
    let next = segs.blocks[span]
        .iter()
        .copied()
        .filter(|&b| b > addr)
        .min()
        .unwrap_or(seg_end);
    let free = next - addr;
    if free < asked {
        return asked;
    }
    let split = asked < conf.max_split_size_bytes && free - asked > SMALL_SIZE;
    if split { asked } else { free }
}

#[cfg(test)]
mod tests {
    use super::{BlockSizes, OpenSegments};

    #[test]
    fn block_sizes_are_exact_whatever_the_size() {
        let mut b = BlockSizes::new(5);
        b.set(0, 512);
        b.set(1, 20 << 30);
        b.set(2, 1000);
        b.set(3, (u32::MAX as u64) * 512);
        assert_eq!(
            (0..5).map(|i| b.get(i)).collect::<Vec<_>>(),
            [512, 20 << 30, 1000, (u32::MAX as u64) * 512, 0]
        );
        assert_eq!(
            b.odd.len(),
            2,
            "only the sizes 4 bytes cannot hold are kept apart"
        );
    }

    #[test]
    fn open_segments_find_the_segment_holding_an_address() {
        let mut segs = OpenSegments::new(4);
        segs.open(1000, 100, 0);
        segs.open(500, 100, 1);
        segs.open(2000, 50, 2);
        assert_eq!(segs.of(1050), Some((1100, 0)));
        assert_eq!(segs.of(500), Some((600, 1)));
        assert_eq!(segs.of(600), None, "an end is outside its segment");
        assert_eq!(segs.of(499), None);
        assert_eq!(segs.of(2049), Some((2050, 2)));
        segs.close(1000);
        assert_eq!(segs.of(1050), None);
        // A trace that opens two segments at one address without closing the first (as the
        // sorted list this replaced did): lookups find the oldest, a close takes the newest.
        segs.open(3000, 10, 0);
        segs.open(3000, 20, 3);
        assert_eq!(segs.of(3005), Some((3010, 0)));
        segs.close(3000);
        assert_eq!(segs.of(3005), Some((3010, 0)));
        segs.close(3000);
        assert_eq!(segs.of(3005), None);
    }

    /// The lookups remembered answer as a search of the map does, whatever opens and closes
    /// come between them: segments side by side, nested in address (as no real trace has),
    /// opened twice at one address, and addresses in gaps, at ends and past every segment.
    #[test]
    fn remembered_lookups_answer_as_the_map_does() {
        let mut rand = crate::test_rand::xorshift(0x9e37_79b9_7f4a_7c15);
        let searched = |segs: &OpenSegments, addr: u64| {
            let (_, &(end, span)) = segs.open.range(..=(addr, u64::MAX)).next_back()?;
            (addr < end).then_some((end, span))
        };
        for round in 0..20 {
            let mut segs = OpenSegments::new(64);
            for step in 0..5000 {
                match rand(40) {
                    0 => segs.open(rand(64) * 100, 1 + rand(300), rand(64) as usize),
                    1 => segs.close(rand(64) * 100),
                    _ => {
                        // Near the last addresses mostly, as a trace's blocks are.
                        let addr = match rand(4) {
                            0 => rand(7000),
                            _ => 3000 + rand(400),
                        };
                        let want = searched(&segs, addr);
                        assert_eq!(segs.of(addr), want, "round {round}, step {step}, {addr}");
                    }
                }
            }
        }
        let mut segs = OpenSegments::new(1);
        segs.open(u64::MAX - 10, 10, 0);
        assert_eq!(segs.of(u64::MAX), None);
        assert_eq!(segs.of(u64::MAX - 1), Some((u64::MAX, 0)));
        assert_eq!(segs.of(u64::MAX), None);
    }
}
