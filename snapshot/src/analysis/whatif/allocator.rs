//! A model of PyTorch's CUDA caching allocator (`DeviceCachingAllocator` in
//! `c10/cuda/CUDACachingAllocator.cpp`), rule by rule, without memory: blocks are address ranges
//! in an arena, pools are ordered sets like PyTorch's, and "cudaMalloc" picks an address the way
//! the CUDA driver tends to (or, when replaying a trace under the settings it was recorded with,
//! takes the address the trace says): ties between equal free blocks break by address.
//!
//! Each function names the PyTorch function it follows. What it keeps of PyTorch's behaviour:
//! - `malloc`: round (`round_size`), pick the pool (`get_pool`: ≤ 1 MiB small, private pools
//!   apart), best fit (`get_free_block`), then on a miss: garbage collection (under a memory
//!   fraction with `garbage_collection_threshold`), a new segment (`alloc_block`), release of
//!   oversize cached blocks and retry (`release_available_cached_blocks`), release of every
//!   unsplit cached block and retry (`release_cached_blocks`), else out of memory.
//! - Free sets ordered by (stream, size, address) (`BlockComparatorSize`); `get_free_block`
//!   takes the first block of the stream at least as large, refusing oversize blocks for small
//!   requests and blocks more than `max_non_split_rounding` too large for oversize ones.
//! - Splitting (`should_split`), merging free neighbours of the same mapped state
//!   (`try_merge_blocks`), frees that wait for other streams (`free` → `free_block` later).
//! - Expandable segments: one reservation per stream and pool, pages of 2 MiB (small) or
//!   20 MiB (large) mapped at the lowest address that fits (`find_expandable_block`,
//!   `map_block`), free whole pages unmapped on release (`unmap_block`), best fit by the size a
//!   block can grow to.
//! - A limit: a per-process fraction (checked before every new segment against its allocation
//!   size, as `alloc_block` does) or the device's capacity (a cudaMalloc or a page map fails
//!   when it does not fit).

use std::collections::BTreeMap;

use super::conf::AllocConf;

pub const NIL: u32 = u32::MAX;
const MIN_BLOCK: u64 = 512;
const SMALL_SIZE: u64 = 1 << 20;
const SMALL_PAGE: u64 = 2 << 20;
const LARGE_PAGE: u64 = 20 << 20;
/// Where invented segment addresses start, growing down (far from real CUDA addresses).
const SYNTHETIC_BASE: u64 = 1 << 46;
/// Address space of one expandable segment (PyTorch reserves 1⅛ of the device's memory; real
/// reservations sit ~90 GiB apart on an 80 GiB device, so a trace's own bases fit).
const EXPANDABLE_SPACE: u64 = 1 << 36;

/// What stops a new segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LimitKind {
    /// `torch.cuda.set_per_process_memory_fraction`: `alloc_block` refuses when reserved plus
    /// the new segment's allocation size would pass the allowed maximum.
    Fraction,
    /// The device's free memory: a cudaMalloc or a page map that does not fit fails.
    Device,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limit {
    pub bytes: u64,
    pub kind: LimitKind,
}

/// Which pool a request goes to: the default pools or a private one (CUDA graph, `MemPool`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PoolKey {
    pub private: (i64, i64),
    pub small: bool,
}

/// A segment event the model emits, to compare with the trace's own.
/// A segment event, named as the trace names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum SegAction {
    #[serde(rename = "segment_alloc")]
    Alloc,
    #[serde(rename = "segment_free")]
    Free,
    #[serde(rename = "segment_map")]
    Map,
    #[serde(rename = "segment_unmap")]
    Unmap,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegEvent {
    pub action: SegAction,
    pub addr: u64,
    pub size: u64,
}

#[derive(Clone, Debug)]
struct Block {
    addr: u64,
    size: u64,
    stream: u64,
    pool: u32,
    prev: u32,
    next: u32,
    allocated: bool,
    /// Freed by the program but still in use by another stream (`event_count > 0`).
    pending: bool,
    mapped: bool,
    /// Index of its expandable segment, or [`NIL`].
    expandable: u32,
    gc_count_base: u64,
}

struct Pool {
    key: PoolKey,
    /// Free mapped blocks by (stream, size, address) (`BlockPool::blocks`).
    blocks: BTreeMap<(u64, u64, u64), u32>,
    /// Unmapped ranges of expandable segments by (stream, address) (`BlockPool::unmapped`).
    unmapped: BTreeMap<(u64, u64), u32>,
    /// `get_free_blocks_call_count`, the clock of garbage collection.
    free_calls: u64,
}

struct Expandable {
    base: u64,
    page: u64,
    live: bool,
}

/// Counters PyTorch keeps in `DeviceStats` that a replay reports.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub reserved_bytes: u64,
    pub peak_reserved_bytes: u64,
    pub allocated_bytes: u64,
    pub peak_allocated_bytes: u64,
    /// Allocated bytes when reserved memory peaked (first time).
    pub allocated_at_peak_reserved_bytes: u64,
    /// cudaMalloc'd segments now (`segment.all.current`, which leaves expandable ones out).
    pub segments: u64,
    pub peak_segments: u64,
    /// cudaMalloc calls plus page maps (`num_device_alloc`).
    pub device_allocs: u64,
    /// cudaFree calls plus page unmaps (`num_device_free`).
    pub device_frees: u64,
    /// Allocations that had to release every cached block first (`num_alloc_retries`).
    pub alloc_retries: u64,
}

/// The allocator on one device.
pub struct Allocator {
    conf: AllocConf,
    limit: Option<Limit>,
    blocks: Vec<Block>,
    free_slots: Vec<u32>,
    pools: Vec<Pool>,
    pool_index: rustc_hash::FxHashMap<PoolKey, u32>,
    expandables: Vec<Expandable>,
    /// Blocks freed by the program that wait for another stream, in the order they were freed.
    pending: Vec<u32>,
    /// Address ranges of live segments and reservations, so an address taken from the trace
    /// never lands on one the model still holds, and the driver's regions they are placed in.
    space: AddressSpace,
    pub stats: Stats,
    /// Segment events emitted so far (kept when `record_events`).
    pub events: Vec<SegEvent>,
    pub record_events: bool,
    emitted: usize,
    /// The trace's own segment events: where the model emits the same event at the same index,
    /// it takes the trace's address, so ties between equal blocks break as they did.
    seed: Vec<SegEvent>,
    /// Take the seed's addresses in order whatever their sizes (a synthesized run at another
    /// size: its segments come in the recording's order, not at its sizes).
    pub seed_in_order: bool,
}

impl Allocator {
    pub fn new(conf: AllocConf, limit: Option<Limit>) -> Allocator {
        Allocator {
            conf,
            limit,
            blocks: Vec::new(),
            free_slots: Vec::new(),
            pools: Vec::new(),
            pool_index: Default::default(),
            expandables: Vec::new(),
            pending: Vec::new(),
            space: AddressSpace::default(),
            stats: Stats::default(),
            events: Vec::new(),
            record_events: false,
            emitted: 0,
            seed: Vec::new(),
            seed_in_order: false,
        }
    }

    /// Addresses to take from the trace (see the `seed` field).
    pub fn seed_with(&mut self, events: Vec<SegEvent>) {
        self.seed = events;
    }

    pub fn block_addr(&self, b: u32) -> u64 {
        self.blocks[b as usize].addr
    }

    pub fn block_size(&self, b: u32) -> u64 {
        self.blocks[b as usize].size
    }

    fn pool(&mut self, key: PoolKey) -> u32 {
        if let Some(&p) = self.pool_index.get(&key) {
            return p;
        }
        let p = self.pools.len() as u32;
        self.pools.push(Pool {
            key,
            blocks: BTreeMap::new(),
            unmapped: BTreeMap::new(),
            free_calls: 0,
        });
        self.pool_index.insert(key, p);
        p
    }

    fn new_block(&mut self, b: Block) -> u32 {
        match self.free_slots.pop() {
            Some(i) => {
                self.blocks[i as usize] = b;
                i
            }
            None => {
                self.blocks.push(b);
                (self.blocks.len() - 1) as u32
            }
        }
    }

    /// Adds `b` to the arena and links its neighbours (`prev`, `next`) to it (`Block::splice`).
    fn splice(&mut self, b: Block) -> u32 {
        let (prev, next) = (b.prev, b.next);
        let id = self.new_block(b);
        if prev != NIL {
            self.blocks[prev as usize].next = id;
        }
        if next != NIL {
            self.blocks[next as usize].prev = id;
        }
        id
    }

    fn delete_block(&mut self, b: u32) {
        self.free_slots.push(b);
    }

    fn emit(&mut self, action: SegAction, addr: u64, size: u64) {
        self.emitted += 1;
        if self.record_events {
            self.events.push(SegEvent { action, addr, size });
        }
    }

    /// The address for a new segment (or reservation) of `span` bytes whose first event is
    /// `action` of `size` bytes: the trace's when its next segment event is that one and the
    /// range is free in the model, else an invented one. Recorded as live. A trace's address
    /// whose range would run past the top of the address space (a hand-made or corrupt file:
    /// `variants/big_ints`) is not free, so it is not taken.
    fn segment_addr(&mut self, action: SegAction, size: u64, span: u64) -> u64 {
        let seeded = self
            .seed
            .get(self.emitted)
            .filter(|e| {
                e.action == action
                    && (action == SegAction::Map || e.size == size || self.seed_in_order)
            })
            .map(|e| e.addr)
            .filter(|&a| self.range_free(a, span));
        let a = seeded.unwrap_or_else(|| self.space.driver_addr(span));
        self.space.insert(a, a + span);
        a
    }

    fn range_free(&self, start: u64, span: u64) -> bool {
        self.space.range_free(start, span)
    }

    fn reserve(&mut self, bytes: u64) {
        let s = &mut self.stats;
        s.reserved_bytes += bytes;
        if s.reserved_bytes > s.peak_reserved_bytes {
            s.peak_reserved_bytes = s.reserved_bytes;
            s.allocated_at_peak_reserved_bytes = s.allocated_bytes;
        }
    }

    fn is_small(&self, b: u32) -> bool {
        self.pools[self.blocks[b as usize].pool as usize].key.small
    }

    fn insert_free(&mut self, b: u32) {
        let blk = &self.blocks[b as usize];
        let pool = &mut self.pools[blk.pool as usize];
        let key = (blk.stream, blk.size, blk.addr);
        let base = pool.free_calls;
        pool.blocks.insert(key, b);
        self.blocks[b as usize].gc_count_base = base;
    }

    fn remove_free(&mut self, b: u32) {
        let blk = &self.blocks[b as usize];
        self.pools[blk.pool as usize]
            .blocks
            .remove(&(blk.stream, blk.size, blk.addr));
    }

    fn insert_unmapped(&mut self, b: u32) {
        let blk = &self.blocks[b as usize];
        self.pools[blk.pool as usize]
            .unmapped
            .insert((blk.stream, blk.addr), b);
    }

    fn remove_unmapped(&mut self, b: u32) {
        let blk = &self.blocks[b as usize];
        self.pools[blk.pool as usize]
            .unmapped
            .remove(&(blk.stream, blk.addr));
    }

    fn set_fraction(&self) -> Option<u64> {
        self.limit
            .filter(|l| l.kind == LimitKind::Fraction)
            .map(|l| l.bytes)
    }

    /// Would a request of `size` bytes get a new segment now (the limit allowing)?
    pub fn new_segment_fits(&self, size: u64) -> bool {
        let alloc_size = self.conf.allocation_size(self.conf.round_size(size));
        self.limit
            .is_none_or(|l| self.stats.reserved_bytes + alloc_size <= l.bytes)
    }

    /// Would a miss now start garbage collection (`garbage_collect_cached_blocks`)?
    pub fn would_collect(&self) -> bool {
        self.set_fraction().is_some_and(|max| {
            let t = self.conf.garbage_collection_threshold;
            t > 0.0 && self.stats.reserved_bytes > (t * max as f64) as u64
        })
    }

    /// Would the device refuse `bytes` more (cudaMalloc or page creation)?
    fn device_refuses(&self, bytes: u64) -> bool {
        self.limit.is_some_and(|l| {
            l.kind == LimitKind::Device && self.stats.reserved_bytes + bytes > l.bytes
        })
    }

    // ---- malloc ------------------------------------------------------------------------------

    /// `DeviceCachingAllocator::malloc`: a block for `orig_size` bytes on `stream`, or `None`
    /// when PyTorch would raise out of memory.
    pub fn malloc(&mut self, orig_size: u64, stream: u64, private: (i64, i64)) -> Option<u32> {
        let size = self.conf.round_size(orig_size);
        let pool = self.pool(PoolKey {
            private,
            small: size <= SMALL_SIZE,
        });
        let alloc_size = self.conf.allocation_size(size);
        let mut block = self.get_free_block(pool, size, stream);
        if block.is_none() {
            if self.set_fraction().is_some() && self.conf.garbage_collection_threshold > 0.0 {
                self.garbage_collect();
            }
            block = self.alloc_block(pool, size, alloc_size, stream, false);
            if block.is_none() && self.release_available_cached_blocks(pool, size, stream) {
                block = self.alloc_block(pool, size, alloc_size, stream, false);
            }
            // No release and retry while a CUDA graph captures (requests for a private pool):
            // `captures_underway` must be empty.
            if block.is_none() && private == (0, 0) {
                self.release_cached_blocks();
                block = self.alloc_block(pool, size, alloc_size, stream, true);
            }
        }
        let b = block?;
        let split = self.should_split(b, size);
        Some(self.alloc_found_block(b, size, split))
    }

    /// `get_free_block`.
    fn get_free_block(&mut self, pool: u32, size: u64, stream: u64) -> Option<u32> {
        let gc = self.set_fraction().is_some() && self.conf.garbage_collection_threshold > 0.0;
        let max_split = self.conf.max_split_size_bytes;
        let expandable_on = self.conf.expandable_segments;
        let p = &mut self.pools[pool as usize];
        if gc {
            p.free_calls += 1;
        }
        let mut it = p.blocks.range((stream, size, 0)..);
        let (&(s, mut bsize, mut baddr), &first) = it.next()?;
        if s != stream {
            return None;
        }
        let mut found = first;
        if self.blocks[found as usize].expandable != NIL {
            if expandable_on {
                // Best fit by the size a block can grow to (itself plus unmapped space after it).
                let grow = |b: u32| {
                    let blk = &self.blocks[b as usize];
                    blk.size
                        + if blk.next != NIL && !self.blocks[blk.next as usize].mapped {
                            self.blocks[blk.next as usize].size
                        } else {
                            0
                        }
                };
                for (&(s2, size2, addr2), &next) in it {
                    if self.blocks[found as usize].expandable == NIL
                        || s2 != stream
                        || grow(next) >= grow(found)
                    {
                        break;
                    }
                    (found, bsize, baddr) = (next, size2, addr2);
                }
            } else {
                // Expandable segments turned off: only ordinary blocks.
                let mut hit = None;
                for (&(s2, size2, addr2), &next) in it {
                    if s2 != stream {
                        break;
                    }
                    if self.blocks[next as usize].expandable == NIL {
                        hit = Some((next, size2, addr2));
                        break;
                    }
                }
                (found, bsize, baddr) = hit?;
            }
        }
        if size < max_split && bsize >= max_split {
            return None;
        }
        if size >= max_split && bsize >= size.saturating_add(self.conf.max_non_split_rounding_bytes)
        {
            return None;
        }
        self.pools[pool as usize]
            .blocks
            .remove(&(stream, bsize, baddr));
        Some(found)
    }

    /// `should_split`.
    fn should_split(&self, b: u32, size: u64) -> bool {
        let remaining = self.blocks[b as usize].size - size;
        if self.is_small(b) || self.conf.expandable_segments {
            remaining >= MIN_BLOCK
        } else {
            size < self.conf.max_split_size_bytes && remaining > SMALL_SIZE
        }
    }

    /// `alloc_found_block`: the block (taken out of its free set) becomes allocated; with
    /// `split`, its first `size` bytes do and the rest goes back to the free set.
    fn alloc_found_block(&mut self, b: u32, size: u64, split: bool) -> u32 {
        let block = if split {
            let rem = b;
            let r = self.blocks[rem as usize].clone();
            let nb = self.splice(Block {
                addr: r.addr,
                size,
                prev: r.prev,
                next: rem,
                gc_count_base: 0,
                ..r
            });
            let rb = &mut self.blocks[rem as usize];
            rb.addr += size;
            rb.size -= size;
            self.insert_free(rem);
            nb
        } else {
            b
        };
        self.blocks[block as usize].allocated = true;
        let s = &mut self.stats;
        s.allocated_bytes += self.blocks[block as usize].size;
        s.peak_allocated_bytes = s.peak_allocated_bytes.max(s.allocated_bytes);
        block
    }

    /// `alloc_block`: a new segment (or mapped pages) for the request.
    fn alloc_block(
        &mut self,
        pool: u32,
        size: u64,
        alloc_size: u64,
        stream: u64,
        retry: bool,
    ) -> Option<u32> {
        if retry {
            self.stats.alloc_retries += 1;
        }
        if let Some(max) = self.set_fraction()
            && self.stats.reserved_bytes + alloc_size > max
        {
            return None;
        }
        if self.conf.expandable_segments {
            return self.try_allocate_expandable_block(pool, size, stream);
        }
        if self.device_refuses(alloc_size) {
            return None;
        }
        let addr = self.segment_addr(SegAction::Alloc, alloc_size, alloc_size);
        let b = self.new_block(Block {
            addr,
            size: alloc_size,
            stream,
            pool,
            prev: NIL,
            next: NIL,
            allocated: false,
            pending: false,
            mapped: true,
            expandable: NIL,
            gc_count_base: 0,
        });
        self.reserve(alloc_size);
        self.stats.segments += 1;
        self.stats.peak_segments = self.stats.peak_segments.max(self.stats.segments);
        self.stats.device_allocs += 1;
        self.emit(SegAction::Alloc, addr, alloc_size);
        Some(b)
    }

    /// `release_available_cached_blocks`: with `max_split_size`, free oversize cached blocks of
    /// the stream (one large enough, else the largest until enough) before retrying.
    fn release_available_cached_blocks(&mut self, pool: u32, size: u64, stream: u64) -> bool {
        let max_split = self.conf.max_split_size_bytes;
        if max_split == u64::MAX {
            return false;
        }
        let key_size = size.max(max_split);
        let p = &self.pools[pool as usize];
        let hit = p
            .blocks
            .range((stream, key_size, 0)..)
            .next()
            .filter(|(k, b)| k.0 == stream && self.blocks[**b as usize].expandable == NIL)
            .map(|(_, &b)| b);
        if let Some(b) = hit {
            self.release_block(b);
            return true;
        }
        // No single block is large enough: release oversize blocks from the largest down.
        let candidates: Vec<u32> = p
            .blocks
            .range(..(stream, key_size, 0))
            .rev()
            .take_while(|(k, _)| k.1 >= max_split && k.0 == stream)
            .map(|(_, &b)| b)
            .collect();
        let mut released = 0;
        for b in candidates {
            if released >= key_size {
                break;
            }
            if self.blocks[b as usize].expandable == NIL {
                released += self.blocks[b as usize].size;
                self.release_block(b);
            }
        }
        released >= key_size
    }

    /// `release_cached_blocks`: wait for every other stream (pending frees complete), then free
    /// every unsplit cached block, large pool first, and unmap free pages of expandable segments.
    /// Private pools keep theirs (their graphs may replay).
    pub fn release_cached_blocks(&mut self) {
        for b in std::mem::take(&mut self.pending) {
            if self.blocks[b as usize].pending {
                self.free_block(b);
            }
        }
        for small in [false, true] {
            if let Some(&p) = self.pool_index.get(&PoolKey {
                private: (0, 0),
                small,
            }) {
                self.release_blocks(p);
            }
        }
    }

    /// `release_blocks`.
    fn release_blocks(&mut self, pool: u32) {
        let all: Vec<u32> = self.pools[pool as usize].blocks.values().copied().collect();
        let mut to_unmap = Vec::new();
        for b in all {
            let blk = &self.blocks[b as usize];
            if blk.expandable != NIL {
                to_unmap.push(b);
            } else if blk.prev == NIL && blk.next == NIL {
                self.release_block(b);
            }
        }
        for b in to_unmap {
            self.unmap_block(b);
            let blk = &self.blocks[b as usize];
            if !blk.mapped && blk.prev == NIL && blk.next == NIL {
                // `release_expandable_segment`: the whole reservation is unmapped.
                let e = blk.expandable;
                self.expandables[e as usize].live = false;
                let base = self.expandables[e as usize].base;
                self.space.remove(base);
                self.remove_unmapped(b);
                self.delete_block(b);
            }
        }
    }

    /// `release_block`: cudaFree of an unsplit cached segment.
    fn release_block(&mut self, b: u32) {
        self.remove_free(b);
        let (addr, size) = (self.blocks[b as usize].addr, self.blocks[b as usize].size);
        self.space.remove(addr);
        self.stats.reserved_bytes -= size;
        self.stats.segments -= 1;
        self.stats.device_frees += 1;
        self.emit(SegAction::Free, addr, size);
        self.delete_block(b);
    }

    /// `garbage_collect_cached_blocks`: under a memory fraction, free unsplit large cached blocks
    /// that waited longest until reserved memory is under the threshold.
    fn garbage_collect(&mut self) {
        let Some(max) = self.set_fraction() else {
            return;
        };
        let threshold = (self.conf.garbage_collection_threshold * max as f64) as u64;
        if self.stats.reserved_bytes <= threshold {
            return;
        }
        let Some(&pool) = self.pool_index.get(&PoolKey {
            private: (0, 0),
            small: false,
        }) else {
            return;
        };
        let target = self.stats.reserved_bytes - threshold;
        let clock = self.pools[pool as usize].free_calls;
        let age = |a: &Allocator, b: u32| clock - a.blocks[b as usize].gc_count_base;
        let freeable = |a: &Allocator, b: u32| {
            let blk = &a.blocks[b as usize];
            blk.prev == NIL && blk.next == NIL && blk.expandable == NIL
        };
        let mut total_age: u64 = 0;
        let mut count: u64 = 0;
        for &b in self.pools[pool as usize].blocks.values() {
            if freeable(self, b) {
                total_age += age(self, b);
                count += 1;
            }
        }
        let mut reclaimed = 0;
        let mut freed_one = true;
        while reclaimed < target && freed_one && count > 0 {
            let threshold_age = total_age as f64 / count as f64;
            freed_one = false;
            let all: Vec<u32> = self.pools[pool as usize].blocks.values().copied().collect();
            for b in all {
                if freeable(self, b) && age(self, b) as f64 >= threshold_age {
                    freed_one = true;
                    reclaimed += self.blocks[b as usize].size;
                    total_age -= age(self, b);
                    count -= 1;
                    self.release_block(b);
                }
            }
        }
    }

    // ---- free ----------------------------------------------------------------------------------

    /// `free`: the program let go of the block. With `waits` (it was used on another stream),
    /// it returns to the pool only at [`Allocator::complete_free`].
    pub fn free(&mut self, b: u32, waits: bool) {
        let blk = &mut self.blocks[b as usize];
        blk.allocated = false;
        self.stats.allocated_bytes -= blk.size;
        if waits {
            blk.pending = true;
            self.pending.push(b);
        } else {
            self.free_block(b);
        }
    }

    /// The other streams are done with a block freed earlier (`free_completed`).
    pub fn complete_free(&mut self, b: u32) {
        if self.blocks[b as usize].pending {
            self.pending.retain(|&x| x != b);
            self.free_block(b);
        }
    }

    /// Has the block gone back to the pool already (e.g. a release waited for its stream)?
    pub fn is_pending(&self, b: u32) -> bool {
        self.blocks[b as usize].pending
    }

    /// `free_block`: back to the free set, merged with free neighbours.
    fn free_block(&mut self, b: u32) {
        self.blocks[b as usize].pending = false;
        let (prev, next) = (self.blocks[b as usize].prev, self.blocks[b as usize].next);
        self.try_merge(b, prev);
        self.try_merge(b, next);
        self.insert_free(b);
    }

    /// `try_merge_blocks`: absorb a free neighbour of the same mapped state.
    fn try_merge(&mut self, dst: u32, src: u32) -> u64 {
        if src == NIL {
            return 0;
        }
        let s = &self.blocks[src as usize];
        if s.allocated || s.pending || s.mapped != self.blocks[dst as usize].mapped {
            return 0;
        }
        if s.mapped {
            self.remove_free(src);
        } else {
            self.remove_unmapped(src);
        }
        let s = self.blocks[src as usize].clone();
        if self.blocks[dst as usize].prev == src {
            let d = &mut self.blocks[dst as usize];
            d.addr = s.addr;
            d.prev = s.prev;
            if s.prev != NIL {
                self.blocks[s.prev as usize].next = dst;
            }
        } else {
            let d = &mut self.blocks[dst as usize];
            d.next = s.next;
            if s.next != NIL {
                self.blocks[s.next as usize].prev = dst;
            }
        }
        self.blocks[dst as usize].size += s.size;
        self.delete_block(src);
        s.size
    }

    // ---- expandable segments ---------------------------------------------------------------------

    /// `find_expandable_block`: the lowest place in this stream's reservations where `size` bytes
    /// of free and unmapped space follow each other; a new reservation when none has room.
    fn find_expandable_block(&mut self, pool: u32, size: u64, stream: u64) -> u32 {
        let allocatable = |a: &Allocator, b: u32| {
            b != NIL && {
                let blk = &a.blocks[b as usize];
                !blk.allocated && !blk.pending
            }
        };
        let room = |a: &Allocator, mut b: u32| {
            let mut bytes = 0;
            while bytes < size && allocatable(a, b) {
                bytes += a.blocks[b as usize].size;
                b = a.blocks[b as usize].next;
            }
            bytes >= size
        };
        let candidates: Vec<u32> = self.pools[pool as usize]
            .unmapped
            .range((stream, 0)..)
            .take_while(|(k, _)| k.0 == stream)
            .map(|(_, &b)| b)
            .collect();
        for mut c in candidates {
            let prev = self.blocks[c as usize].prev;
            if allocatable(self, prev) {
                c = prev;
            }
            if room(self, c) {
                return c;
            }
        }
        let small = self.pools[pool as usize].key.small;
        let page = if small { SMALL_PAGE } else { LARGE_PAGE };
        let space = EXPANDABLE_SPACE / page * page;
        // A new reservation's first map is at its base: take the trace's address for it.
        let base = self.segment_addr(SegAction::Map, 0, space);
        let e = self.expandables.len() as u32;
        self.expandables.push(Expandable {
            base,
            page,
            live: true,
        });
        let b = self.new_block(Block {
            addr: base,
            size: space,
            stream,
            pool,
            prev: NIL,
            next: NIL,
            allocated: false,
            pending: false,
            mapped: false,
            expandable: e,
            gc_count_base: 0,
        });
        self.insert_unmapped(b);
        b
    }

    /// `map_block`: map the pages covering the first `size` bytes of an unmapped block.
    fn map_block(&mut self, b: u32, size: u64) -> bool {
        let blk = self.blocks[b as usize].clone();
        let page = self.expandables[blk.expandable as usize].page;
        let bytes = size.div_ceil(page) * page;
        if self.device_refuses(bytes) {
            return false;
        }
        self.remove_unmapped(b);
        self.blocks[b as usize].mapped = true;
        if bytes < blk.size {
            let rest = self.splice(Block {
                addr: blk.addr + bytes,
                size: blk.size - bytes,
                prev: b,
                next: blk.next,
                mapped: false,
                ..blk.clone()
            });
            self.blocks[b as usize].size = bytes;
            self.insert_unmapped(rest);
        }
        let (prev, next) = (self.blocks[b as usize].prev, self.blocks[b as usize].next);
        self.try_merge(b, prev);
        self.try_merge(b, next);
        self.insert_free(b);
        self.reserve(bytes);
        self.stats.device_allocs += 1;
        self.emit(SegAction::Map, blk.addr, bytes);
        true
    }

    /// `try_allocate_expandable_block`.
    fn try_allocate_expandable_block(&mut self, pool: u32, size: u64, stream: u64) -> Option<u32> {
        let mut c = self.find_expandable_block(pool, size, stream);
        if !self.blocks[c as usize].mapped {
            let s = self.blocks[c as usize].size.min(size);
            if !self.map_block(c, s) {
                return None;
            }
        }
        while self.blocks[c as usize].size < size {
            let remaining = size - self.blocks[c as usize].size;
            let next = self.blocks[c as usize].next;
            if next == NIL {
                // A request larger than a whole reservation (a fresh one is not checked for
                // room): nothing maps it, the allocation fails. PyTorch reserves the device's
                // memory per segment, so there too such a request can only run out of memory.
                return None;
            }
            let s = remaining.min(self.blocks[next as usize].size);
            if !self.map_block(next, s) {
                return None;
            }
            // `c` (free and mapped) merged into `next`, which lives on.
            c = next;
        }
        self.remove_free(c);
        Some(c)
    }

    /// `unmap_block`: unmap the whole pages inside a free block of an expandable segment.
    fn unmap_block(&mut self, b: u32) {
        let blk = self.blocks[b as usize].clone();
        let ex = &self.expandables[blk.expandable as usize];
        let (base, page) = (ex.base, ex.page);
        let first = (blk.addr - base).div_ceil(page);
        let end = (blk.addr + blk.size - base) / page;
        if first >= end {
            return;
        }
        let (ptr, bytes) = (base + first * page, (end - first) * page);
        self.remove_free(b);
        let before = ptr - blk.addr;
        if before > 0 {
            let nb = self.splice(Block {
                addr: blk.addr,
                size: before,
                prev: blk.prev,
                next: b,
                ..blk.clone()
            });
            self.insert_free(nb);
        }
        let after = blk.size - before - bytes;
        if after > 0 {
            let next = self.blocks[b as usize].next;
            let nb = self.splice(Block {
                addr: ptr + bytes,
                size: after,
                prev: b,
                next,
                ..blk.clone()
            });
            self.insert_free(nb);
        }
        {
            let x = &mut self.blocks[b as usize];
            x.addr = ptr;
            x.size = bytes;
            x.mapped = false;
        }
        let (prev, next) = (self.blocks[b as usize].prev, self.blocks[b as usize].next);
        self.try_merge(b, prev);
        self.try_merge(b, next);
        self.insert_unmapped(b);
        self.stats.reserved_bytes -= bytes;
        self.stats.device_frees += 1;
        self.emit(SegAction::Unmap, ptr, bytes);
    }

    // ---- a trace that starts mid-run -----------------------------------------------------------

    /// Adds a segment that existed before the trace began, with its blocks (address order;
    /// `allocated` ones are returned in order, for the trace's frees to find).
    pub fn add_existing_segment(
        &mut self,
        address: u64,
        stream: u64,
        private: (i64, i64),
        small: bool,
        expandable: bool,
        blocks: &[(u64, u64, bool)],
    ) -> Vec<u32> {
        let pool = self.pool(PoolKey { private, small });
        let span: u64 = blocks.iter().map(|b| b.1).sum();
        self.space.insert(
            address,
            address + if expandable { EXPANDABLE_SPACE } else { span },
        );
        let exp = if expandable {
            let page = if small { SMALL_PAGE } else { LARGE_PAGE };
            self.expandables.push(Expandable {
                base: address,
                page,
                live: true,
            });
            (self.expandables.len() - 1) as u32
        } else {
            NIL
        };
        let mut out = Vec::new();
        let mut prev = NIL;
        let mut total = 0;
        for &(addr, size, allocated) in blocks {
            let b = self.splice(Block {
                addr,
                size,
                stream,
                pool,
                prev,
                next: NIL,
                allocated,
                pending: false,
                mapped: true,
                expandable: exp,
                gc_count_base: 0,
            });
            prev = b;
            total += size;
            if allocated {
                self.stats.allocated_bytes += size;
                out.push(b);
            } else {
                self.insert_free(b);
            }
        }
        if expandable {
            // The unmapped rest of the reservation.
            let end = address + total;
            let b = self.splice(Block {
                addr: end,
                size: EXPANDABLE_SPACE,
                stream,
                pool,
                prev,
                next: NIL,
                allocated: false,
                pending: false,
                mapped: false,
                expandable: exp,
                gc_count_base: 0,
            });
            self.insert_unmapped(b);
        } else {
            self.stats.segments += 1;
            self.stats.peak_segments = self.stats.peak_segments.max(self.stats.segments);
        }
        self.reserve(total);
        self.stats.peak_allocated_bytes = self
            .stats
            .peak_allocated_bytes
            .max(self.stats.allocated_bytes);
        out
    }

    /// Live expandable reservations.
    pub fn expandable_segments(&self) -> usize {
        self.expandables.iter().filter(|e| e.live).count()
    }
}

/// One test per rule of the caching allocator, each a few calls in the order a program makes them.
/// The device's address space as the model holds it: the ranges of live segments and
/// reservations (start → end), and the regions the driver placed new ones in.
///
/// Each region keeps how many of its bytes the ranges starting in it cover, so a new segment's
/// search passes a full region by without reading its ranges. Reading them was a quarter of a
/// 13M-event replay's time on a trace that holds thousands of segments (bench/README.md,
/// issue 41, seventh part).
#[derive(Debug)]
struct AddressSpace {
    ranges: BTreeMap<u64, u64>,
    /// Oldest first: each new region lies just below the one before.
    regions: Vec<Region>,
    /// The lowest region start so far.
    low: u64,
}

#[derive(Clone, Copy, Debug)]
struct Region {
    start: u64,
    end: u64,
    /// Bytes of `[start, end)` covered by ranges that start inside it.
    covered: u64,
}

impl Default for AddressSpace {
    fn default() -> AddressSpace {
        AddressSpace {
            ranges: BTreeMap::new(),
            regions: Vec::new(),
            low: SYNTHETIC_BASE,
        }
    }
}

impl AddressSpace {
    fn insert(&mut self, start: u64, end: u64) {
        if let Some(old) = self.ranges.insert(start, end) {
            self.cover(start, old, false);
        }
        self.cover(start, end, true);
    }

    fn remove(&mut self, start: u64) {
        if let Some(end) = self.ranges.remove(&start) {
            self.cover(start, end, false);
        }
    }

    /// Counts `[start, end)` in (or out of) the region `start` lies in, if any.
    fn cover(&mut self, start: u64, end: u64, add: bool) {
        // Regions are in descending order of start: the first that starts at or below `start`.
        let i = self.regions.partition_point(|r| r.start > start);
        if let Some(r) = self.regions.get_mut(i)
            && start < r.end
        {
            let bytes = end.min(r.end) - start;
            // Saturating: ranges of a corrupt file may overlap; the count only skips regions.
            r.covered = if add {
                r.covered.saturating_add(bytes)
            } else {
                r.covered.saturating_sub(bytes)
            };
        }
    }

    /// Whether `[start, start + span)` overlaps no live range; a range running past the top of
    /// the address space is never free (no range the model holds wraps around).
    fn range_free(&self, start: u64, span: u64) -> bool {
        let Some(end) = start.checked_add(span) else {
            return false;
        };
        self.ranges
            .range(..end)
            .next_back()
            .is_none_or(|(_, &e)| e <= start)
    }

    /// An address for `span` new bytes the way the CUDA driver tends to hand them out (seen in
    /// real traces): regions rounded up to 32 MiB, each new one just below the last, and a new
    /// segment placed first in the slack of the newest region with room.
    fn driver_addr(&mut self, span: u64) -> u64 {
        const REGION: u64 = 32 << 20;
        let span = span.div_ceil(SMALL_PAGE) * SMALL_PAGE;
        for r in self.regions.iter().rev() {
            // Fewer bytes uncovered than asked for: no gap can hold them.
            if (r.end - r.start).saturating_sub(r.covered) < span {
                continue;
            }
            // First fit inside the region, lowest address first, among ranges the model holds.
            let mut at = r.start;
            for (&s, &e) in self.ranges.range(r.start..r.end) {
                if s >= at + span {
                    break;
                }
                at = at.max(e);
            }
            if at + span <= r.end {
                return at;
            }
        }
        let size = span.div_ceil(REGION) * REGION;
        let start = self.low - size;
        self.low = start;
        // Ranges taken from the trace may already lie in it.
        let covered = self
            .ranges
            .range(start..start + size)
            .map(|(&s, &e)| e.min(start + size) - s)
            .sum();
        self.regions.push(Region {
            start,
            end: start + size,
            covered,
        });
        start
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn alloc(conf: &str, limit: Option<Limit>) -> Allocator {
        Allocator::new(AllocConf::parse(conf).unwrap(), limit)
    }

    /// The first fit over every region, reading each one's ranges: what `driver_addr` did before
    /// regions counted their covered bytes (None: a new region is needed).
    fn first_fit_reading_every_region(space: &AddressSpace, span: u64) -> Option<u64> {
        let span = span.div_ceil(SMALL_PAGE) * SMALL_PAGE;
        space.regions.iter().rev().find_map(|r| {
            let mut at = r.start;
            for (&s, &e) in space.ranges.range(r.start..r.end) {
                if s >= at + span {
                    break;
                }
                at = at.max(e);
            }
            (at + span <= r.end).then_some(at)
        })
    }

    #[test]
    fn a_full_region_is_passed_by_and_the_address_is_the_same() {
        // Segments of 1-40 MiB placed and freed at random, with ranges from the trace among them:
        // every address equals the exhaustive search's.
        let mut space = AddressSpace::default();
        let mut live: Vec<u64> = Vec::new();
        let mut x = 7u64;
        let mut next = || {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            x >> 33
        };
        for step in 0..4000 {
            let r = next();
            if r % 3 == 0 && !live.is_empty() {
                let i = (next() as usize) % live.len();
                space.remove(live.swap_remove(i));
                continue;
            }
            let span = (1 + next() % 40) * MIB;
            if step % 50 == 0 {
                // A trace's address, where free: real ones lie far above the model's own.
                let a = SYNTHETIC_BASE + (next() % 64) * 64 * MIB;
                if space.range_free(a, span) {
                    space.insert(a, a + span);
                    live.push(a);
                }
                continue;
            }
            let want = first_fit_reading_every_region(&space, span);
            let got = space.driver_addr(span);
            if let Some(w) = want {
                assert_eq!(got, w, "step {step} span {span}");
            }
            space.insert(got, got + span);
            live.push(got);
        }
        assert!(space.regions.len() > 10);
    }

    fn device(bytes: u64) -> Option<Limit> {
        Some(Limit {
            bytes,
            kind: LimitKind::Device,
        })
    }

    fn fraction(bytes: u64) -> Option<Limit> {
        Some(Limit {
            bytes,
            kind: LimitKind::Fraction,
        })
    }

    const DEFAULT: (i64, i64) = (0, 0);

    /// A trace's segment whose range would run past the top of the address space (a hand-made
    /// file's nine-byte integers) is placed at an invented address instead; a fitting one is
    /// still taken from the trace.
    #[test]
    fn a_traced_address_whose_range_wraps_is_not_taken() {
        let near_top = u64::MAX - MIB;
        let mut a = alloc("", None);
        a.seed_with(vec![
            SegEvent {
                action: SegAction::Alloc,
                addr: near_top,
                size: 20 * MIB,
            },
            SegEvent {
                action: SegAction::Alloc,
                addr: 1 << 40,
                size: 20 * MIB,
            },
        ]);
        let x = a.malloc(5 * MIB, 0, DEFAULT).unwrap();
        assert!(a.block_addr(x).checked_add(20 * MIB).is_some());
        assert_ne!(a.block_addr(x), near_top);
        let y = a.malloc(6 * MIB, 0, DEFAULT).unwrap();
        assert_eq!(
            a.block_addr(y),
            a.block_addr(x) + 5 * MIB,
            "in the first segment"
        );
        a.malloc(6 * MIB, 0, DEFAULT).unwrap();
        // 17 MiB of the first 20 MiB segment taken: the next 6 MiB opens the second.
        let z = a.malloc(6 * MIB, 0, DEFAULT).unwrap();
        assert_eq!(
            a.block_addr(z),
            1 << 40,
            "the second segment event's address"
        );
    }

    #[test]
    fn small_requests_share_a_2_mib_segment() {
        let mut a = alloc("", None);
        let x = a.malloc(1000, 0, DEFAULT).unwrap();
        let y = a.malloc(1000, 0, DEFAULT).unwrap();
        assert_eq!(a.stats.reserved_bytes, 2 * MIB);
        assert_eq!(
            a.block_addr(y),
            a.block_addr(x) + 1024,
            "rounded to 512 B, split"
        );
        assert_eq!(a.stats.device_allocs, 1);
    }

    #[test]
    fn requests_under_10_mib_get_a_20_mib_segment_and_share_it() {
        let mut a = alloc("", None);
        a.malloc(5 * MIB, 0, DEFAULT).unwrap();
        a.malloc(5 * MIB, 0, DEFAULT).unwrap();
        assert_eq!((a.stats.reserved_bytes, a.stats.segments), (20 * MIB, 1));
    }

    #[test]
    fn requests_of_10_mib_and_more_are_rounded_to_2_mib() {
        let mut a = alloc("", None);
        a.malloc(11 * MIB + 1, 0, DEFAULT).unwrap();
        assert_eq!(a.stats.reserved_bytes, 12 * MIB);
    }

    #[test]
    fn best_fit_takes_the_smallest_free_block_that_fits() {
        let mut a = alloc("", None);
        let big = a.malloc(30 * MIB, 0, DEFAULT).unwrap();
        let small = a.malloc(24 * MIB, 0, DEFAULT).unwrap();
        let small_addr = a.block_addr(small);
        a.free(big, false);
        a.free(small, false);
        let b = a.malloc(22 * MIB, 0, DEFAULT).unwrap();
        assert_eq!(a.block_addr(b), small_addr);
        assert_eq!(a.stats.device_allocs, 2, "no new segment");
    }

    #[test]
    fn free_blocks_of_another_stream_are_not_reused() {
        let mut a = alloc("", None);
        let x = a.malloc(30 * MIB, 1, DEFAULT).unwrap();
        a.free(x, false);
        a.malloc(30 * MIB, 2, DEFAULT).unwrap();
        assert_eq!(a.stats.segments, 2);
    }

    #[test]
    fn large_blocks_split_only_when_more_than_1_mib_remains() {
        let mut a = alloc("", None);
        let x = a.malloc(12 * MIB, 0, DEFAULT).unwrap();
        a.free(x, false);
        let y = a.malloc(11 * MIB + 512 * 1024, 0, DEFAULT).unwrap();
        assert_eq!(a.block_size(y), 12 * MIB, "0.5 MiB left: not split");
        a.free(y, false);
        let z = a.malloc(10 * MIB, 0, DEFAULT).unwrap();
        assert_eq!(a.block_size(z), 10 * MIB, "2 MiB left: split");
    }

    #[test]
    fn max_split_size_keeps_oversize_blocks_whole_and_from_small_requests() {
        let mut a = alloc("max_split_size_mb:128", None);
        let x = a.malloc(200 * MIB, 0, DEFAULT).unwrap();
        a.free(x, false);
        a.malloc(50 * MIB, 0, DEFAULT).unwrap();
        assert_eq!(
            a.stats.segments, 2,
            "an oversize block is not split for a small request"
        );
        let y = a.malloc(190 * MIB, 0, DEFAULT).unwrap();
        assert_eq!(
            a.block_size(y),
            200 * MIB,
            "taken whole: within 20 MiB of the request"
        );
        a.free(y, false);
        a.malloc(170 * MIB, 0, DEFAULT).unwrap();
        assert_eq!(
            a.stats.segments, 3,
            "30 MiB too large: max_non_split_rounding"
        );
    }

    #[test]
    fn freed_neighbours_merge() {
        let mut a = alloc("", None);
        let x = a.malloc(5 * MIB, 0, DEFAULT).unwrap();
        let y = a.malloc(5 * MIB, 0, DEFAULT).unwrap();
        a.free(x, false);
        a.free(y, false);
        let z = a.malloc(20 * MIB, 0, DEFAULT).unwrap();
        assert_eq!(
            a.stats.device_allocs, 1,
            "the whole segment is one free block again"
        );
        assert_eq!(a.block_size(z), 20 * MIB);
    }

    #[test]
    fn a_cross_stream_free_waits_for_free_completed() {
        let mut a = alloc("", None);
        let x = a.malloc(30 * MIB, 0, DEFAULT).unwrap();
        a.free(x, true);
        let y = a.malloc(30 * MIB, 0, DEFAULT).unwrap();
        assert_eq!(a.stats.segments, 2, "still in use by the other stream");
        a.complete_free(x);
        a.free(y, false);
        a.malloc(30 * MIB, 0, DEFAULT).unwrap();
        assert_eq!(a.stats.segments, 2, "back in the pool");
    }

    #[test]
    fn a_miss_under_the_limit_releases_cached_blocks_and_retries() {
        let mut a = alloc("", device(40 * MIB));
        let x = a.malloc(30 * MIB, 0, DEFAULT).unwrap();
        a.free(x, false);
        a.malloc(36 * MIB, 0, DEFAULT).unwrap();
        assert_eq!(a.stats.alloc_retries, 1);
        assert_eq!(
            (a.stats.device_frees, a.stats.reserved_bytes),
            (1, 36 * MIB)
        );
    }

    #[test]
    fn out_of_memory_when_nothing_can_be_released() {
        let mut a = alloc("", device(40 * MIB));
        a.malloc(30 * MIB, 0, DEFAULT).unwrap();
        assert!(a.malloc(12 * MIB, 0, DEFAULT).is_none());
        assert_eq!(a.stats.alloc_retries, 1);
    }

    #[test]
    fn a_memory_fraction_checks_the_new_segments_allocation_size() {
        let mut a = alloc("", fraction(30 * MIB));
        a.malloc(5 * MIB, 0, DEFAULT).unwrap();
        a.malloc(8 * MIB, 0, DEFAULT).unwrap();
        a.malloc(4 * MIB, 0, DEFAULT).unwrap();
        // 3 MiB left in the segment; 8 MiB more would be 28 MiB reserved, under 30, but its new
        // segment is 20 MiB and 40 MiB is not.
        assert!(a.malloc(8 * MIB, 0, DEFAULT).is_none());
        assert!(
            a.malloc(1, 0, DEFAULT).is_some(),
            "a 2 MiB small-pool segment fits"
        );
    }

    #[test]
    fn release_available_cached_blocks_frees_one_oversize_block_first() {
        let mut a = alloc("max_split_size_mb:128", device(400 * MIB));
        let x = a.malloc(300 * MIB, 0, DEFAULT).unwrap();
        a.free(x, false);
        a.malloc(200 * MIB, 0, DEFAULT).unwrap();
        assert_eq!(a.stats.device_frees, 1);
        assert_eq!(
            a.stats.alloc_retries, 0,
            "not the release of every cached block"
        );
    }

    #[test]
    fn garbage_collection_frees_cached_blocks_over_the_threshold() {
        let mut a = alloc("garbage_collection_threshold:0.5", fraction(100 * MIB));
        let x = a.malloc(30 * MIB, 0, DEFAULT).unwrap();
        a.malloc(30 * MIB, 0, DEFAULT).unwrap();
        a.free(x, false);
        // A miss with 60 MiB reserved, over half of 100 MiB: the cached 30 MiB block goes first.
        a.malloc(40 * MIB, 0, DEFAULT).unwrap();
        assert_eq!(a.stats.device_frees, 1);
        assert_eq!(a.stats.reserved_bytes, 70 * MIB);
        // Without a memory fraction there is no collection.
        let mut b = alloc("garbage_collection_threshold:0.5", None);
        let x = b.malloc(30 * MIB, 0, DEFAULT).unwrap();
        b.malloc(30 * MIB, 0, DEFAULT).unwrap();
        b.free(x, false);
        b.malloc(40 * MIB, 0, DEFAULT).unwrap();
        assert_eq!(b.stats.device_frees, 0);
    }

    #[test]
    fn expandable_segments_map_pages_at_the_lowest_address() {
        let mut a = alloc("expandable_segments:True", None);
        let x = a.malloc(5 * MIB, 0, DEFAULT).unwrap();
        assert_eq!(a.stats.reserved_bytes, 20 * MIB, "one 20 MiB page");
        let y = a.malloc(30 * MIB, 0, DEFAULT).unwrap();
        assert_eq!(a.block_addr(y), a.block_addr(x) + 5 * MIB, "grows in place");
        assert_eq!(
            (a.stats.reserved_bytes, a.stats.device_allocs),
            (40 * MIB, 2)
        );
        assert_eq!(a.stats.segments, 0, "not counted as cudaMalloc segments");
    }

    #[test]
    fn releasing_an_expandable_segment_unmaps_whole_free_pages() {
        let mut a = alloc("expandable_segments:True", None);
        let x = a.malloc(5 * MIB, 0, DEFAULT).unwrap();
        let y = a.malloc(30 * MIB, 0, DEFAULT).unwrap();
        a.free(y, false);
        a.release_cached_blocks();
        assert_eq!(a.stats.reserved_bytes, 20 * MIB, "the page holding x stays");
        a.free(x, false);
        a.release_cached_blocks();
        assert_eq!(a.stats.reserved_bytes, 0);
        assert_eq!(a.expandable_segments(), 0);
    }

    #[test]
    fn private_pools_are_kept_apart() {
        let mut a = alloc("", None);
        let x = a.malloc(30 * MIB, 0, (1, 0)).unwrap();
        a.free(x, false);
        a.malloc(30 * MIB, 0, DEFAULT).unwrap();
        assert_eq!(a.stats.segments, 2);
        a.release_cached_blocks();
        assert_eq!(
            a.stats.segments, 2,
            "a private pool's blocks wait for its graph"
        );
    }
}
