//! Builds the [`Snapshot`] tables from the values the pickle (or JSON) reader left behind.
//!
//! By the time this runs, trace entries, frames and stacks are already tables (see `values`);
//! what is left is walking the small top-level structure: segments and their blocks, the device
//! trace lists, annotations and allocator settings. Every PyTorch version's layout is accepted:
//! ≤1.13 bare segment lists, 2.0 blocks with `history`, and 2.1+ blocks with `frames`; missing keys
//! are tolerated and unknown keys ignored.

use crate::error::{Error, Result};
use crate::model::Layout;
use crate::model::{
    Annotation, Block, BlockState, DeviceTrace, Format, Segment, SegmentType, Snapshot, StackId,
};
use crate::values::{Heap, Items, Kind, Value};

fn list(heap: &Heap, v: Value) -> Vec<Value> {
    match v {
        Value::Obj(cid) => match heap.kind(cid) {
            Ok(Kind::List | Kind::Tuple | Kind::Set) => heap.list_values(cid).unwrap_or_default(),
            _ => Vec::new(),
        },
        Value::BlockList { start, len } => (start..start + len).map(Value::Block).collect(),
        Value::SmallPair(a, b) => vec![Value::Int(a.into()), Value::Int(b.into())],
        _ => Vec::new(),
    }
}

fn describe(heap: &Heap, v: Value) -> &'static str {
    match v {
        Value::None => "None",
        Value::Bool(_) => "a bool",
        Value::Int(_) | Value::Big(_) => "an integer",
        Value::Float(_) => "a float",
        Value::Str(_) => "a string",
        Value::Bytes => "bytes",
        Value::EmptyList | Value::Stack(_) | Value::BlockList { .. } => "a list",
        Value::SmallPair(..) => "a tuple",
        Value::Frame(_) | Value::Entry(_) | Value::Block(_) | Value::Segment(_) => "a dict",
        Value::Obj(cid) => match heap.kind(cid) {
            Ok(Kind::Dict) => "a dict",
            Ok(Kind::Tuple) => "a tuple",
            Ok(Kind::Set) => "a set",
            _ => "a list",
        },
    }
}

pub(crate) fn build(mut heap: Heap, root: Value, mut format: Format) -> Result<Snapshot> {
    heap.release_memo();
    let mut snap = Snapshot::default();
    let (segments, traces, host_segments, host_traces, settings, annotations);
    match root {
        Value::Obj(cid) if heap.kind(cid).ok() == Some(Kind::Dict) => {
            let pairs = heap.dict_pairs(root);
            let get = |k: &str| pairs.iter().find(|(key, _)| *key == k).map(|(_, v)| *v);
            let Some(segs) = get("segments") else {
                let keys: Vec<&str> = pairs.iter().map(|(k, _)| *k).take(8).collect();
                return Err(Error::NotASnapshot(format!(
                    "the pickle holds a dict without a 'segments' key (keys: {}); was it written by torch.cuda.memory._dump_snapshot?",
                    keys.join(", ")
                )));
            };
            if describe(&heap, segs) != "a list" {
                return Err(Error::NotASnapshot(format!(
                    "its 'segments' is {} instead of a list of segments",
                    describe(&heap, segs)
                )));
            }
            segments = list(&heap, segs);
            traces = get("device_traces")
                .map(|v| list(&heap, v))
                .unwrap_or_default();
            host_segments = get("host_segments")
                .map(|v| list(&heap, v))
                .unwrap_or_default();
            host_traces = get("host_traces");
            settings = get("allocator_settings");
            annotations = get("external_annotations")
                .map(|v| list(&heap, v))
                .unwrap_or_default();
            format.layout = Layout::Modern;
        }
        Value::Obj(_) | Value::EmptyList => {
            if matches!(describe(&heap, root), "a list") {
                segments = list(&heap, root);
                traces = Vec::new();
                host_segments = Vec::new();
                host_traces = None;
                settings = None;
                annotations = Vec::new();
                format.layout = Layout::LegacySegmentList;
            } else {
                return Err(Error::NotASnapshot(format!(
                    "the file holds {}, not a dict with 'segments'",
                    describe(&heap, root)
                )));
            }
        }
        other => {
            return Err(Error::NotASnapshot(format!(
                "the file holds {}, not a dict with 'segments'",
                describe(&heap, other)
            )));
        }
    }

    for v in segments {
        add_segment(&mut heap, &mut snap, v, None, &mut format)?;
    }
    for v in host_segments {
        add_segment(&mut heap, &mut snap, v, Some(-1), &mut format)?;
    }

    // Trace lists: rows of each device.
    let mut per_device: Vec<(i32, Rows)> = Vec::new();
    for (device, v) in traces.into_iter().enumerate() {
        per_device.push((device as i32, entry_rows(&mut heap, v)));
    }
    if let Some(h) = host_traces {
        // A flat list of entries, or a list of per-device lists.
        let rows = entry_rows(&mut heap, h);
        if rows.is_empty() {
            for v in list(&heap, h) {
                per_device.push((-1, entry_rows(&mut heap, v)));
            }
        } else {
            per_device.push((-1, rows));
        }
    }
    // Each device's rows are normally one contiguous run, possibly permuted in places where the
    // fast path and the general machine interleaved; put those back in list order in place. Any
    // other shape (rows shared or spread out) is gathered into a new table.
    let mut runs: Vec<(u32, u32)> = Vec::new();
    let mut in_place = true;
    for (_, rows) in &per_device {
        match rows.permutation_base() {
            Some(base) if !rows.is_empty() => runs.push((base, base + rows.len() as u32)),
            Some(_) => {}
            None => in_place = false,
        }
    }
    runs.sort_unstable();
    in_place &= runs.windows(2).all(|w| w[0].1 <= w[1].0);
    if in_place {
        snap.trace = std::mem::take(&mut heap.trace);
        snap.trace.shrink_to_fit();
        for (device, rows) in &per_device {
            let r = match rows.permutation_base() {
                Some(base) if !rows.is_empty() => {
                    snap.trace.reorder_within(base, &rows.0);
                    base..base + rows.len() as u32
                }
                _ => 0..0,
            };
            snap.devices.push(DeviceTrace {
                device: *device,
                rows: r,
            });
        }
    } else {
        let all: Vec<u32> = per_device.iter().flat_map(|(_, r)| r.iter()).collect();
        snap.trace = heap.trace.gather(&all);
        let mut start = 0u32;
        for (device, rows) in &per_device {
            let end = start + rows.len() as u32;
            snap.devices.push(DeviceTrace {
                device: *device,
                rows: start..end,
            });
            start = end;
        }
    }

    if let Some(s) = settings {
        snap.allocator_settings = Some(
            heap.to_json(s, 0)
                .map_err(|e| Error::NotASnapshot(format!("allocator_settings: {e:?}")))?,
        );
    }
    for a in annotations {
        let pairs = heap.dict_pairs(a);
        let get = |k: &str| pairs.iter().find(|(key, _)| *key == k).map(|(_, v)| *v);
        let name = match get("name") {
            Some(Value::Str(s)) => s,
            _ => continue,
        };
        let stage = get("stage").and_then(|v| heap.str_of(v)).unwrap_or("START");
        snap.annotations.push(Annotation {
            name,
            start: !stage.eq_ignore_ascii_case("END"),
            device: get("device").and_then(|v| heap.int(v)).unwrap_or(0) as i32,
            time_us: get("time_us").and_then(|v| heap.int(v)).unwrap_or(0) as i64,
        });
    }
    snap.strings = std::mem::take(&mut heap.strings);
    snap.frames = std::mem::take(&mut heap.frames);
    snap.stacks = std::mem::take(&mut heap.stacks);
    snap.format = format;
    Ok(snap)
}

/// The rows of one trace list, in list order, as runs of consecutive rows `(first, len)`: one run
/// in the common case, ~100 for a 12M-event trace the parser created partly out of order (never
/// one number per row: 48 MB for such a trace).
struct Rows(Vec<(u32, u32)>);

impl Rows {
    fn of(rows: impl Iterator<Item = u32>) -> Rows {
        let mut runs: Vec<(u32, u32)> = Vec::new();
        for r in rows {
            crate::model::TraceTable::push_run(&mut runs, r);
        }
        Rows(runs)
    }

    fn len(&self) -> usize {
        self.0.iter().map(|&(_, len)| len as usize).sum()
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.0.iter().flat_map(|&(first, len)| first..first + len)
    }

    /// If the rows are a permutation of `base..base + len`, its `base`.
    fn permutation_base(&self) -> Option<u32> {
        let mut runs = self.0.clone();
        runs.retain(|&(_, len)| len > 0);
        runs.sort_unstable();
        let Some(&(lo, _)) = runs.first() else {
            return Some(0);
        };
        let mut next = lo as u64;
        for &(first, len) in &runs {
            if first as u64 != next {
                return None;
            }
            next += len as u64;
        }
        Some(lo)
    }
}

/// Rows of a trace list (compact entry run or a plain list of lowered entries); a list of runs
/// is taken out of the heap, not copied.
fn entry_rows(heap: &mut Heap, v: Value) -> Rows {
    let Value::Obj(cid) = v else {
        return Rows(Vec::new());
    };
    if let Some(runs) = heap.take_rows(cid) {
        return Rows(runs);
    }
    match heap.items(cid) {
        Ok(Items::Entries { start, len }) => Rows(vec![(*start, *len)]),
        Ok(Items::Rows(runs)) => Rows(runs.clone()),
        Ok(Items::Blocks { .. }) => Rows(Vec::new()),
        Ok(Items::Vals(vals)) => Rows::of(vals.iter().filter_map(|v| match v {
            Value::Entry(e) => Some(*e),
            _ => None,
        })),
        Err(_) => Rows(Vec::new()),
    }
}

/// A size field: a whole number of bytes no device could exceed (addresses and stream handles
/// wrap like C's `uintptr_t`; a negative or absurd size is a broken file, not a wrapped value).
fn size_of(heap: &Heap, v: Value, what: &str) -> Result<u64> {
    match heap.int(v) {
        Some(i) if (0..1 << 56).contains(&i) => Ok(i as u64),
        Some(i) => Err(Error::NotASnapshot(format!(
            "{what} is {i} bytes, which no device has"
        ))),
        None => Err(Error::NotASnapshot(format!(
            "{what} is {} instead of a number of bytes",
            describe(heap, v)
        ))),
    }
}

fn add_segment(
    heap: &mut Heap,
    snap: &mut Snapshot,
    v: Value,
    device: Option<i32>,
    format: &mut Format,
) -> Result<()> {
    let pairs: Vec<(String, Value)> = heap
        .dict_pairs(v)
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    if pairs.is_empty() {
        return Err(Error::NotASnapshot(format!(
            "a segment is {} instead of a dict; was the file written by torch.cuda.memory._dump_snapshot?",
            describe(heap, v)
        )));
    }
    let get = |k: &str| pairs.iter().find(|(key, _)| key == k).map(|(_, v)| *v);
    let num = |heap: &Heap, k: &str| get(k).and_then(|v| heap.u64(v)).unwrap_or(0);
    // A bare list of segments is `torch.cuda.memory_snapshot()` pickled directly: PyTorch ≤ 1.13
    // wrote only that, a 2.1+ one carries segment keys ≤ 1.13 lacked.
    if format.layout == Layout::LegacySegmentList
        && (get("segment_pool_id").is_some() || get("is_expandable").is_some())
    {
        format.layout = Layout::SegmentList;
    }
    let address = num(heap, "address");
    let total_size = get("total_size")
        .map(|v| size_of(heap, v, "a segment's total_size"))
        .transpose()?
        .unwrap_or(0);
    let segment_type = match get("segment_type").and_then(|v| heap.str_of(v)) {
        Some("small") => SegmentType::Small,
        Some("large") => SegmentType::Large,
        _ => SegmentType::Unknown,
    };
    let pool = get("segment_pool_id")
        .map(|v| list(heap, v))
        .unwrap_or_default();
    let pool_id = (
        pool.first().and_then(|v| heap.int(*v)).unwrap_or(0) as i64,
        pool.get(1).and_then(|v| heap.int(*v)).unwrap_or(0) as i64,
    );
    let stack = get("frames")
        .map(|v| heap.stack_of(v))
        .unwrap_or(StackId::EMPTY);
    let seg_index = snap.segments.len() as u32;
    let first_block = snap.blocks.len() as u32;
    let mut next_addr = address;
    let (mut sum_alloc, mut sum_active, mut sum_req) = (0, 0, 0);
    for b in get("blocks").map(|v| list(heap, v)).unwrap_or_default() {
        let BlockFields {
            address,
            size,
            requested,
            state,
            stack,
        } = block_fields(heap, b, format)?;
        let addr = address.unwrap_or(next_addr);
        next_addr = addr.wrapping_add(size);
        let requested_size = requested.unwrap_or(if state.is_active() { size } else { 0 });
        if state == BlockState::ActiveAllocated {
            sum_alloc += size;
        }
        if state.is_active() {
            sum_active += size;
            sum_req += requested_size;
        }
        snap.blocks.push(Block {
            segment: seg_index,
            address: addr,
            size,
            requested_size,
            state,
            stack,
        });
    }
    let last_block = snap.blocks.len() as u32;
    snap.segments.push(Segment {
        device: device
            .unwrap_or_else(|| get("device").and_then(|v| heap.int(v)).unwrap_or(0) as i32),
        address,
        total_size,
        allocated_size: get("allocated_size")
            .and_then(|v| heap.u64(v))
            .unwrap_or(sum_alloc),
        active_size: get("active_size")
            .and_then(|v| heap.u64(v))
            .unwrap_or(sum_active),
        requested_size: get("requested_size")
            .and_then(|v| heap.u64(v))
            .unwrap_or(sum_req),
        stream: num(heap, "stream"),
        segment_type,
        pool_id,
        is_expandable: matches!(get("is_expandable"), Some(Value::Bool(true))),
        stack,
        blocks: first_block..last_block,
    });
    Ok(())
}

/// One block's fields as PyTorch wrote them (its address may be left out: blocks follow each
/// other from the segment's start).
struct BlockFields {
    address: Option<u64>,
    size: u64,
    requested: Option<u64>,
    state: BlockState,
    stack: StackId,
}

/// A block's fields, from its row (the common shape, lowered while parsing) or from its dict
/// (PyTorch 2.0's `history`, unusual value types).
fn block_fields(heap: &mut Heap, b: Value, format: &mut Format) -> Result<BlockFields> {
    if let Value::Block(id) = b {
        let row = heap.blocks[id as usize];
        return Ok(BlockFields {
            address: row.address(),
            size: row.size,
            requested: row.requested_size(),
            state: row.state,
            stack: row.stack,
        });
    }
    let bp: Vec<(String, Value)> = heap
        .dict_pairs(b)
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    let bget = |k: &str| bp.iter().find(|(key, _)| key == k).map(|(_, v)| *v);
    let size = bget("size")
        .map(|v| size_of(heap, v, "a block's size"))
        .transpose()?
        .unwrap_or(0);
    let state = BlockState::parse(bget("state").and_then(|v| heap.str_of(v)).unwrap_or(""));
    let address = bget("address").and_then(|v| heap.u64(v));
    let mut requested = bget("requested_size").and_then(|v| heap.u64(v));
    let mut stack = bget("frames")
        .map(|v| heap.stack_of(v))
        .unwrap_or(StackId::EMPTY);
    if let Some(history) = bget("history") {
        // PyTorch 2.0: the allocation that made the block is the last history item.
        if format.layout == Layout::Modern {
            format.layout = Layout::BlockHistory;
        }
        if let Some(&last) = list(heap, history).last() {
            let hp: Vec<(String, Value)> = heap
                .dict_pairs(last)
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect();
            let hget = |k: &str| hp.iter().find(|(key, _)| key == k).map(|(_, v)| *v);
            if requested.is_none() {
                requested = hget("real_size").and_then(|v| heap.u64(v));
            }
            if stack == StackId::EMPTY {
                stack = hget("frames")
                    .map(|v| heap.stack_of(v))
                    .unwrap_or(StackId::EMPTY);
            }
            if stack == StackId::EMPTY {
                stack = hget("cpp_frames")
                    .map(|v| heap.stack_of(v))
                    .unwrap_or(StackId::EMPTY);
            }
        }
    }
    Ok(BlockFields {
        address,
        size,
        requested,
        state,
        stack,
    })
}
