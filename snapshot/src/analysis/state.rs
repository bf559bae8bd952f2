//! The allocator's state (segments and their blocks) at any position of a trace, and the
//! fragmentation figures read off it.
//!
//! At the end of the trace the snapshot's own segments and blocks are exact and are used as they
//! are. Earlier, the state is rebuilt from the nearest checkpoint of live allocations and the
//! segment intervals: live allocations become blocks of the size the caching allocator gave them
//! (their request rounded to 512 bytes, or the whole cached block it did not split:
//! `peaks::block_sizes`), and the gaps between them inside a segment are inactive (cached free)
//! space.

use serde::Serialize;

use super::index::{DeviceIndex, Index, NONE, SegmentSpan};
use crate::model::{BlockState, SegmentType, Snapshot, StackId};

/// The caching allocator's minimum block size and rounding (`kMinBlockSize`).
pub const ROUND_BYTES: u64 = 512;
/// Requests up to this size come from the small pool (`kSmallSize`).
pub const SMALL_REQUEST_BYTES: u64 = 1 << 20;

/// What the caching allocator asks `cudaMalloc` for when no cached block fits a block of `size`
/// (`get_allocation_size`): small requests get a 2 MiB segment, requests under 10 MiB a 20 MiB
/// one, larger ones their size rounded up to 2 MiB. This is the figure PyTorch's OOM message
/// reports as "Tried to allocate".
pub fn segment_request_size(size: u64) -> u64 {
    const SMALL_BUFFER: u64 = 2 << 20;
    const MIN_LARGE_ALLOC: u64 = 10 << 20;
    const LARGE_BUFFER: u64 = 20 << 20;
    const ROUND_LARGE: u64 = 2 << 20;
    if size <= SMALL_REQUEST_BYTES {
        SMALL_BUFFER
    } else if size < MIN_LARGE_ALLOC {
        LARGE_BUFFER
    } else {
        size.div_ceil(ROUND_LARGE) * ROUND_LARGE
    }
}

pub fn round_size(size: u64) -> u64 {
    size.max(1).div_ceil(ROUND_BYTES) * ROUND_BYTES
}

#[derive(Clone, Debug, Serialize)]
pub struct BlockView {
    pub address: u64,
    pub size: u64,
    pub requested_size: u64,
    pub state: BlockState,
    /// Index of the allocation in the device index (for its stack and times), if known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allocation: Option<u32>,
    /// The allocation's stack (resolve with `/frames/{stack}`).
    pub stack: StackId,
}

#[derive(Clone, Debug, Serialize)]
pub struct SegmentView {
    pub address: u64,
    pub total_size: u64,
    pub stream: u64,
    pub segment_type: SegmentType,
    pub pool_id: (i64, i64),
    pub is_expandable: bool,
    /// For an expandable segment: how its mapped range grew up to this position.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mapped: Option<MappedGrowth>,
    pub blocks: Vec<BlockView>,
    pub fragmentation: Fragmentation,
}

/// How an expandable segment's mapped range came to be: pages mapped before the trace and by its
/// `segment_map` events (each range still mapped at the position; an unmap's leftover counts as
/// mapped where the unmap happened).
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct MappedGrowth {
    pub before_trace_bytes: u64,
    pub mapped_in_trace_bytes: u64,
    /// Ranges mapped in the trace and still mapped.
    pub maps: u32,
    /// The newest of them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last: Option<MapEvent>,
}

/// One `segment_map` (or what an unmap left of a mapped range).
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
pub struct MapEvent {
    /// Event index (0-based): the range exists after position `event + 1`.
    pub event: u32,
    pub address: u64,
    pub bytes: u64,
}

/// Fragmentation figures of a segment, pool or stream.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct Fragmentation {
    pub segments: u32,
    pub reserved_bytes: u64,
    pub allocated_bytes: u64,
    pub requested_bytes: u64,
    /// Σ (size − requested_size) of active blocks: rounding waste.
    pub internal_bytes: u64,
    /// Σ size of inactive blocks: cached but unusable for larger requests when split up.
    pub external_bytes: u64,
    pub inactive_blocks: u32,
    pub largest_free_bytes: u64,
}

impl Fragmentation {
    fn add(&mut self, o: &Fragmentation) {
        self.segments += o.segments;
        self.reserved_bytes += o.reserved_bytes;
        self.allocated_bytes += o.allocated_bytes;
        self.requested_bytes += o.requested_bytes;
        self.internal_bytes += o.internal_bytes;
        self.external_bytes += o.external_bytes;
        self.inactive_blocks += o.inactive_blocks;
        self.largest_free_bytes = self.largest_free_bytes.max(o.largest_free_bytes);
    }

    fn of_blocks(total: u64, blocks: &[BlockView]) -> Fragmentation {
        let mut f = Fragmentation {
            segments: 1,
            reserved_bytes: total,
            ..Default::default()
        };
        for b in blocks {
            if b.state.is_active() {
                f.allocated_bytes += b.size;
                f.requested_bytes += b.requested_size;
                f.internal_bytes += b.size.saturating_sub(b.requested_size);
            } else {
                f.external_bytes += b.size;
                f.inactive_blocks += 1;
                f.largest_free_bytes = f.largest_free_bytes.max(b.size);
            }
        }
        f
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct PoolFragmentation {
    pub pool_id: (i64, i64),
    pub segment_type: SegmentType,
    pub stream: u64,
    #[serde(flatten)]
    pub figures: Fragmentation,
}

/// The allocator's state on one device at one position.
#[derive(Clone, Debug, Serialize)]
pub struct AllocatorState {
    pub device: i32,
    pub position: u32,
    /// True when taken from the snapshot's own blocks (exact), false when rebuilt from the trace.
    pub exact: bool,
    pub segments: Vec<SegmentView>,
    pub total: Fragmentation,
    pub pools: Vec<PoolFragmentation>,
}

/// State at the end of the trace: the snapshot's segments and blocks as recorded.
pub fn final_state(snap: &Snapshot, device: i32, position: u32) -> AllocatorState {
    let mut segments: Vec<SegmentView> = snap
        .segments
        .iter()
        .filter(|s| s.device == device)
        .map(|s| {
            let blocks: Vec<BlockView> = snap
                .blocks_of(s)
                .iter()
                .map(|b| BlockView {
                    address: b.address,
                    size: b.size,
                    requested_size: b.requested_size,
                    state: b.state,
                    allocation: None,
                    stack: b.stack,
                })
                .collect();
            SegmentView {
                address: s.address,
                total_size: s.total_size,
                stream: s.stream,
                segment_type: s.segment_type,
                pool_id: s.pool_id,
                is_expandable: s.is_expandable,
                mapped: None,
                fragmentation: Fragmentation::of_blocks(s.total_size, &blocks),
                blocks,
            }
        })
        .collect();
    segments.sort_by_key(|s| s.address);
    finish(device, position, true, segments)
}

/// State at position `p` of a device trace.
pub fn state_at(snap: &Snapshot, index: &Index, device: i32, p: u32) -> AllocatorState {
    let Some(d) = index.device(device) else {
        return final_state(snap, device, 0);
    };
    if p >= d.len {
        let mut s = final_state(snap, device, d.len);
        attach_allocations(&snap.trace, d, &mut s);
        for seg in s.segments.iter_mut().filter(|s| s.is_expandable) {
            seg.mapped = Some(mapped_growth(
                d,
                seg.address,
                seg.address + seg.total_size,
                d.len,
            ));
        }
        return s;
    }
    let blocks = super::peaks::block_sizes(snap, d);
    rebuilt_state(&snap.trace, d, blocks, device, p)
}

/// The state at `p` from the allocations alive there; `block_sizes`: those whose block is not
/// their request rounded ([`super::peaks::block_sizes`]).
fn rebuilt_state(
    t: &crate::model::TraceTable,
    d: &DeviceIndex,
    block_sizes: &[(u32, u64)],
    device: i32,
    p: u32,
) -> AllocatorState {
    // (address, requested size, id) of the allocations alive, by address.
    let mut alive: Vec<(u64, u64, u32)> = d
        .alive_at(p)
        .into_iter()
        .map(|a| (d.addr_of(t, a), d.size_of(t, a), a))
        .collect();
    alive.sort_by_key(|&(addr, _, _)| addr);
    let mut segments = Vec::new();
    for s in segments_at(d, p) {
        let (lo, hi) = (s.address, s.address.saturating_add(s.size));
        let first = alive.partition_point(|&(addr, _, _)| addr < lo);
        let mut blocks = Vec::new();
        let mut cursor = lo;
        for &(addr, requested, a) in &alive[first..] {
            let al = &d.allocations[a as usize];
            if addr >= hi {
                break;
            }
            if addr > cursor {
                blocks.push(inactive(cursor, addr - cursor));
            }
            let block = match block_sizes.binary_search_by_key(&a, |&(id, _)| id) {
                Ok(k) => block_sizes[k].1,
                Err(_) => round_size(requested),
            };
            let size = block.min(hi - addr);
            blocks.push(BlockView {
                address: addr,
                size,
                requested_size: requested,
                state: if al.pending_free_at(p) {
                    BlockState::ActivePendingFree
                } else {
                    BlockState::ActiveAllocated
                },
                allocation: Some(a),
                stack: d.stack_of(t, a),
            });
            cursor = cursor.max(addr + size);
        }
        if cursor < hi {
            blocks.push(inactive(cursor, hi - cursor));
        }
        segments.push(SegmentView {
            address: s.address,
            total_size: s.size,
            stream: s.stream,
            segment_type: if s.segment_type == SegmentType::Unknown {
                if s.size <= 2 << 20 {
                    SegmentType::Small
                } else {
                    SegmentType::Large
                }
            } else {
                s.segment_type
            },
            pool_id: s.pool_id,
            is_expandable: s.is_expandable,
            mapped: s.is_expandable.then(|| mapped_growth(d, lo, hi, p)),
            fragmentation: Fragmentation::of_blocks(s.size, &blocks),
            blocks,
        });
    }
    finish(device, p, false, segments)
}

/// The segments alive at `p`: cudaMalloc'd ones as they are, expandable ones as PyTorch reports
/// them, one per contiguous mapped range (the union of the mapped ranges alive there).
fn segments_at(d: &DeviceIndex, p: u32) -> Vec<SegmentSpan> {
    let mut out: Vec<SegmentSpan> = Vec::new();
    for s in d.segments.iter().filter(|s| s.alive_at(p)) {
        if s.is_expandable
            && let Some(last) = out.last_mut()
            && last.is_expandable
            && last.address + last.size == s.address
            && (last.stream, last.pool_id, last.segment_type)
                == (s.stream, s.pool_id, s.segment_type)
        {
            last.size += s.size;
            continue;
        }
        out.push(s.clone());
    }
    out
}

/// How the expandable segment `[lo, hi)` came to be mapped, as of position `p`.
fn mapped_growth(d: &DeviceIndex, lo: u64, hi: u64, p: u32) -> MappedGrowth {
    let mut g = MappedGrowth::default();
    for s in d
        .segments
        .iter()
        .filter(|s| s.is_expandable && s.alive_at(p) && s.address >= lo && s.address < hi)
    {
        if s.start == NONE {
            g.before_trace_bytes += s.size;
            continue;
        }
        g.maps += 1;
        g.mapped_in_trace_bytes += s.size;
        if g.last.is_none_or(|l| s.start >= l.event) {
            g.last = Some(MapEvent {
                event: s.start,
                address: s.address,
                bytes: s.size,
            });
        }
    }
    g
}

fn inactive(address: u64, size: u64) -> BlockView {
    BlockView {
        address,
        size,
        requested_size: 0,
        state: BlockState::Inactive,
        allocation: None,
        stack: StackId::EMPTY,
    }
}

/// Links the exact final blocks to their allocations, for stacks and times.
fn attach_allocations(t: &crate::model::TraceTable, d: &DeviceIndex, state: &mut AllocatorState) {
    let by_addr: rustc_hash::FxHashMap<u64, u32> = d
        .allocations
        .iter()
        .enumerate()
        .filter(|(_, a)| a.end == NONE)
        .map(|(i, _)| (d.addr_of(t, i as u32), i as u32))
        .collect();
    for s in &mut state.segments {
        for b in &mut s.blocks {
            if b.state.is_active() {
                b.allocation = by_addr.get(&b.address).copied();
            }
        }
    }
}

fn finish(device: i32, position: u32, exact: bool, segments: Vec<SegmentView>) -> AllocatorState {
    let mut total = Fragmentation::default();
    let mut pools: Vec<PoolFragmentation> = Vec::new();
    for s in &segments {
        total.add(&s.fragmentation);
        match pools.iter_mut().find(|p| {
            p.pool_id == s.pool_id && p.segment_type == s.segment_type && p.stream == s.stream
        }) {
            Some(p) => p.figures.add(&s.fragmentation),
            None => pools.push(PoolFragmentation {
                pool_id: s.pool_id,
                segment_type: s.segment_type,
                stream: s.stream,
                figures: s.fragmentation.clone(),
            }),
        }
    }
    pools.sort_by_key(|p| std::cmp::Reverse(p.figures.reserved_bytes));
    AllocatorState {
        device,
        position,
        exact,
        segments,
        total,
        pools,
    }
}

impl AllocatorState {
    /// The largest inactive block that a request of `size` on `stream` could use.
    pub fn largest_free_for(&self, size: u64, stream: u64) -> u64 {
        let want = if size <= SMALL_REQUEST_BYTES {
            SegmentType::Small
        } else {
            SegmentType::Large
        };
        self.segments
            .iter()
            .filter(|s| {
                s.stream == stream
                    && (s.segment_type == want || s.segment_type == SegmentType::Unknown)
            })
            .filter(|s| s.pool_id == (0, 0))
            .map(|s| s.fragmentation.largest_free_bytes)
            .max()
            .unwrap_or(0)
    }
}
