//! The MCP server's tools: what each takes (a JSON Schema, checked by deserializing into a struct
//! that refuses unknown fields) and answers (the `api` type the HTTP API answers for the same
//! question, with long lists cut to what was asked for and the cut counted). Snapshots are read
//! from paths on this machine through the engine, which executes nothing, and kept open for the
//! next call while their file is unchanged.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use anyhow::Context;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::local::{self, Opened};

/// What the `initialize` answer tells the agent about the tools.
pub const INSTRUCTIONS: &str = "memscope reads PyTorch CUDA memory snapshots \
(torch.cuda.memory._dump_snapshot pickles, plain or .gz/.zst/.xz, or their JSON form) from paths \
on this machine and never executes them. Start with `report` (or `oom_verdicts` when a run died of \
out-of-memory, `leak_suspects` when memory grew); `peak_memory` and `memory_by_stack` say which \
lines held the memory, `categories` what it was (parameters, gradients, optimizer state, \
activations...); `whatif` replays the trace under other PYTORCH_CUDA_ALLOC_CONF settings; \
`predict` says whether a larger batch fits; `diff` compares two snapshots and `run` the ranks of \
one job. Positions are events of a device's trace (0 = before the first). Byte counts are bytes.";

/// The largest answer a tool gives, in bytes of JSON; lists are cut to `top` before this.
pub const MAX_ANSWER_BYTES: usize = 256 * 1024;

/// Snapshots kept open between calls.
const KEPT_OPEN: usize = 8;

/// The snapshots a session has opened, by file (its path, size and modification time).
#[derive(Default)]
pub struct Files {
    open: Vec<(FileKey, Arc<Opened>)>,
}

#[derive(Clone, PartialEq, Eq)]
struct FileKey {
    path: PathBuf,
    len: u64,
    modified: Option<SystemTime>,
}

impl Files {
    /// Runs tool `name` (None: no such tool): its result object, or one with `isError` and the
    /// reason, which the agent can act on.
    pub fn call(&mut self, name: &str, arguments: Value) -> Option<Value> {
        let tool = TOOLS.iter().find(|t| t.name == name)?;
        let answer = (tool.run)(self, arguments).and_then(|v| {
            let text = serde_json::to_string(&v)?;
            anyhow::ensure!(
                text.len() <= MAX_ANSWER_BYTES,
                "the answer is {} KiB, over the {} KiB a tool answers: ask for fewer (top, limit) or one device",
                text.len() / 1024,
                MAX_ANSWER_BYTES / 1024
            );
            Ok((v, text))
        });
        Some(match answer {
            Ok((v, text)) => json!({
                "content": [{"type": "text", "text": text}],
                "structuredContent": v,
                "isError": false,
            }),
            Err(e) => json!({
                "content": [{"type": "text", "text": format!("{e:#}")}],
                "isError": true,
            }),
        })
    }

    /// The snapshot at `path`, read once while the file is unchanged.
    fn open(&mut self, path: &Path) -> anyhow::Result<Arc<Opened>> {
        let meta =
            std::fs::metadata(path).with_context(|| format!("cannot open {}", path.display()))?;
        anyhow::ensure!(
            meta.is_file(),
            "{} is not a file (a folder of per-rank snapshots is `run`'s)",
            path.display()
        );
        let key = FileKey {
            path: path.canonicalize().unwrap_or_else(|_| path.to_path_buf()),
            len: meta.len(),
            modified: meta.modified().ok(),
        };
        if let Some(i) = self.open.iter().position(|(k, _)| *k == key) {
            let entry = self.open.remove(i);
            let o = entry.1.clone();
            self.open.push(entry);
            return Ok(o);
        }
        let o = Arc::new(Opened::read(path)?);
        if self.open.len() == KEPT_OPEN {
            self.open.remove(0);
        }
        self.open.retain(|(k, _)| k.path != key.path);
        self.open.push((key, o.clone()));
        Ok(o)
    }
}

/// One tool: its name, what it is for, its input schema and how it runs.
struct Tool {
    name: &'static str,
    title: &'static str,
    description: &'static str,
    schema: fn() -> Value,
    run: fn(&mut Files, Value) -> anyhow::Result<Value>,
}

/// The tools as `tools/list` answers them.
pub fn list() -> Vec<Value> {
    TOOLS
        .iter()
        .map(|t| {
            json!({
                "name": t.name,
                "title": t.title,
                "description": t.description,
                "inputSchema": (t.schema)(),
                "annotations": {"readOnlyHint": true, "openWorldHint": false},
            })
        })
        .collect()
}

const TOOLS: &[Tool] = &[
    Tool {
        name: "report",
        title: "Snapshot report",
        description: "Every analysis of one snapshot, as the dashboard's overview shows it: per device the trace's figures and PyTorch's three peaks (requested, allocated, reserved) with where each was reached, steps, memory by category at the peak; OOM verdicts and incidents with advice; leak suspects; fragmentation; warnings; the allocator settings recorded.",
        schema: || object(&[FILE, DEVICE_TOTAL, top(10, 100)], &["file"]),
        run: report,
    },
    Tool {
        name: "oom_verdicts",
        title: "Out-of-memory verdicts",
        description: "Each out-of-memory error in the snapshot's trace explained: why it happened (growth of a leaking line, fragmentation, the device exhausted, a process limit, memory held outside PyTorch, or unknown, saying what is missing), whether the run survived it, PyTorch's own message rebuilt, the largest call sites alive at it, memory by category, and what to change; grouped into incidents, with the run's outcome in one sentence.",
        schema: || object(&[FILE, DEVICE_TOTAL, top(10, 50)], &["file"]),
        run: oom_verdicts,
    },
    Tool {
        name: "leak_suspects",
        title: "Leak suspects",
        description: "Call sites whose live bytes grew step over step (or through the trace) and never fell back: the bytes and allocations they kept, the pattern in words (\"32.0 MiB every 5th step\"), and their stack, user frames first. `leak_check` says whether the search could run (no trace, history off).",
        schema: || object(&[FILE, top(10, 100)], &["file"]),
        run: leak_suspects,
    },
    Tool {
        name: "peak_memory",
        title: "Peak memory analysis",
        description: "Where and how high memory peaked: per device PyTorch's three peaks (requested = what tensors asked for, allocated = max_memory_allocated, reserved = max_memory_reserved) and the event each was first reached at, then the call sites holding memory at the device's peak of live bytes, largest first.",
        schema: || object(&[FILE, DEVICE, top(20, 200)], &["file"]),
        run: peak_memory,
    },
    Tool {
        name: "memory_by_stack",
        title: "Memory by call stack at an event",
        description: "Live memory by call site at one moment of a device's trace (after `position` events; default the peak of live bytes): bytes, allocations and the largest stack of each site; or, with weight=held, what held memory longest over the whole trace (bytes × time held). Optionally only one category, and the flame tree (frames Python-only or all).",
        schema: || {
            object(
                &[
                    FILE,
                    DEVICE,
                    POSITION,
                    CATEGORY,
                    FRAMES,
                    top(20, 200),
                    FLAME,
                    WEIGHT,
                ],
                &["file"],
            )
        },
        run: memory_by_stack,
    },
    Tool {
        name: "categories",
        title: "Memory by category",
        description: "What the memory alive at one moment is in the model's terms (parameter, gradient, optimizer_state, activation, input, temporary, autograd_detail, cuda_graph, unknown): bytes per category, and the largest allocations each with its category, the rule that decided and a confidence. Default moment: the peak of live bytes.",
        schema: || {
            object(
                &[FILE, DEVICE, POSITION, CATEGORY, limit(20, 500)],
                &["file"],
            )
        },
        run: categories,
    },
    Tool {
        name: "whatif",
        title: "What if: allocator settings replayed",
        description: "The trace replayed through a model of PyTorch's caching allocator under other PYTORCH_CUDA_ALLOC_CONF settings (the recorded one first, as a check of the model), ranked by peak reserved bytes and whether each would have run out of memory under the limit (default: what the trace's OOM implies).",
        schema: || {
            object(
                &[
                    FILE,
                    DEVICE,
                    (
                        "alloc_confs",
                        r#"{"type":"array","items":{"type":"string"},"description":"Settings to try, as PYTORCH_CUDA_ALLOC_CONF takes them (\"\" is PyTorch's defaults). Default: a built-in set of candidates."}"#,
                    ),
                    LIMIT_BYTES,
                    LIMIT_KIND,
                ],
                &["file"],
            )
        },
        run: whatif,
    },
    Tool {
        name: "predict",
        title: "Will it fit: predict a larger size",
        description: "Peak memory and OOM at sizes never recorded (a larger batch, a longer sequence), from two or three recordings of the same program at small sizes: their requests matched and fitted against the size, then replayed through the allocator model at each size asked, or, with a limit and no size, the largest size that fits. States the expected error (each recording predicted from the others).",
        schema: || {
            object(
                &[
                    (
                        "recordings",
                        r#"{"type":"array","minItems":2,"items":{"type":"object","properties":{"file":{"type":"string"},"size":{"type":"integer","minimum":1}},"required":["file","size"],"additionalProperties":false},"description":"Snapshots of one program, each with the batch size or sequence length it was recorded at."}"#,
                    ),
                    (
                        "sizes",
                        r#"{"type":"array","items":{"type":"integer","minimum":1},"description":"Sizes to predict (none: search the largest that fits the limit)."}"#,
                    ),
                    LIMIT_BYTES,
                    LIMIT_KIND,
                    (
                        "gpu",
                        r#"{"type":"string","description":"A GPU whose total memory is the limit, e.g. \"H100\"."}"#,
                    ),
                    (
                        "alloc_conf",
                        r#"{"type":"string","description":"The allocator setting to replay under, as PYTORCH_CUDA_ALLOC_CONF takes it."}"#,
                    ),
                    DEVICE,
                ],
                &["recordings"],
            )
        },
        run: predict,
    },
    Tool {
        name: "diff",
        title: "Compare two snapshots",
        description: "Snapshot b against snapshot a: the headline figures (peaks, events, allocations) and their change, memory by call site at each side's peak (largest change first; sites matched by file, line and function), leak suspects new or gone, and memory by category at each peak.",
        schema: || {
            object(
                &[
                    (
                        "a",
                        r#"{"type":"string","description":"The baseline snapshot's path."}"#,
                    ),
                    (
                        "b",
                        r#"{"type":"string","description":"The path of the snapshot compared with it."}"#,
                    ),
                    (
                        "device_a",
                        r#"{"type":"integer","description":"A's device (default: the one that held the most memory)."}"#,
                    ),
                    (
                        "device_b",
                        r#"{"type":"integer","description":"B's device (default: the one that held the most memory)."}"#,
                    ),
                    top(10, 200),
                ],
                &["a", "b"],
            )
        },
        run: diff,
    },
    Tool {
        name: "run",
        title: "A run's ranks side by side",
        description: "The snapshots of one distributed job (one per rank: a folder of them, or the files) side by side: each rank's peaks and OOMs, the straggler or odd rank out, which rank died first and why.",
        schema: || {
            object(
                &[
                    (
                        "files",
                        r#"{"type":"array","minItems":1,"items":{"type":"string"},"description":"One folder of per-rank snapshots, or the files (ranks from rank{N} in the names, else their order)."}"#,
                    ),
                    DEVICE_TOTAL,
                ],
                &["files"],
            )
        },
        run: run_ranks,
    },
];

type Property = (&'static str, &'static str);

const FILE: Property = (
    "file",
    r#"{"type":"string","description":"Path of a snapshot file on this machine (pickle, .gz/.zst/.xz, or JSON)."}"#,
);
const DEVICE: Property = (
    "device",
    r#"{"type":"integer","description":"The CUDA device (default: the one that held the most memory)."}"#,
);
const DEVICE_TOTAL: Property = (
    "device_total_bytes",
    r#"{"type":"integer","minimum":1,"description":"The GPU's total memory in bytes (e.g. from nvidia-smi), so memory held outside PyTorch can be told apart."}"#,
);
const POSITION: Property = (
    "position",
    r#"{"type":"integer","minimum":0,"description":"The moment: after this many events of the device's trace (default: the peak of live bytes)."}"#,
);
const CATEGORY: Property = (
    "category",
    r#"{"type":"string","enum":["parameter","gradient","optimizer_state","activation","input","temporary","autograd_detail","cuda_graph","unknown"],"description":"Only allocations of this category."}"#,
);
const FRAMES: Property = (
    "frames",
    r#"{"type":"string","enum":["python","all"],"description":"Frames call sites are read from (default: python when the snapshot has Python frames)."}"#,
);
const WEIGHT: Property = (
    "weight",
    r#"{"type":"string","enum":["live","held"],"description":"live (default): bytes alive at the moment. held: each allocation's bytes × the time it was held, over the whole trace (what held memory longest; `position` is not read); sites and the tree carry `held` in byte × µs, and `held` says the clock."}"#,
);
const FLAME: Property = (
    "flame",
    r#"{"type":"boolean","description":"Include the flame tree (frame by frame, bytes under each; large). Default false."}"#,
);
const LIMIT_BYTES: Property = (
    "limit_bytes",
    r#"{"type":"integer","minimum":1,"description":"Memory the process may use, in bytes."}"#,
);
const LIMIT_KIND: Property = (
    "limit_kind",
    r#"{"type":"string","enum":["device","fraction"],"description":"device: what the GPU can give the process; fraction: torch.cuda.set_per_process_memory_fraction's allowance."}"#,
);

fn top(default: usize, max: usize) -> Property {
    count_property("top", default, max, "Most entries listed, largest first")
}

fn limit(default: usize, max: usize) -> Property {
    count_property(
        "limit",
        default,
        max,
        "Most allocations listed, largest first",
    )
}

fn count_property(name: &'static str, default: usize, max: usize, what: &str) -> Property {
    let schema = format!(
        r#"{{"type":"integer","minimum":1,"maximum":{max},"default":{default},"description":"{what} (default {default}, at most {max})."}}"#
    );
    (name, Box::leak(schema.into_boxed_str()))
}

/// An object schema of these properties, refusing others.
fn object(properties: &[Property], required: &[&str]) -> Value {
    let properties: serde_json::Map<String, Value> = properties
        .iter()
        .map(|(name, schema)| {
            let schema: Value = serde_json::from_str(schema).expect("a tool's schema is JSON");
            (name.to_string(), schema)
        })
        .collect();
    json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    })
}

/// The arguments as `T`, with a message the agent can act on when they do not fit.
fn args<T: DeserializeOwned>(arguments: Value) -> anyhow::Result<T> {
    serde_json::from_value(arguments).map_err(|e| anyhow::anyhow!("bad arguments: {e}"))
}

/// `top` within 1..=max, default `default`.
fn clamp(top: Option<usize>, default: usize, max: usize) -> usize {
    top.unwrap_or(default).clamp(1, max)
}

/// Keeps the first `n` of a list; how many were cut.
fn cut<T>(list: &mut Vec<T>, n: usize) -> usize {
    let over = list.len().saturating_sub(n);
    list.truncate(n);
    over
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileArgs {
    file: PathBuf,
    #[serde(default)]
    device_total_bytes: Option<u64>,
    #[serde(default)]
    top: Option<usize>,
}

fn report(files: &mut Files, arguments: Value) -> anyhow::Result<Value> {
    let a: FileArgs = args(arguments)?;
    let top = clamp(a.top, 10, 100);
    let mut report = files.open(&a.file)?.report(a.device_total_bytes);
    let omitted = json!({
        "leak_suspects": cut(&mut report.leak_suspects, top),
        "ooms": cut(&mut report.ooms, top),
        "oom_incidents": cut(&mut report.oom_incidents, top),
        "warnings": cut(&mut report.warnings, top),
        "step_starts": cut_steps(&mut report, 200),
    });
    Ok(json!({"file": a.file, "report": report, "omitted": omitted}))
}

/// Each device's step lists kept to their first `n` steps; how many steps were cut.
fn cut_steps(report: &mut api::Report, n: usize) -> usize {
    let mut over = 0;
    for d in report.devices.values_mut() {
        if let Some(s) = d.steps.as_mut() {
            over += cut(&mut s.starts, n);
            cut(&mut s.numbers, n);
            cut(&mut s.start_times_us, n);
        }
    }
    over
}

fn oom_verdicts(files: &mut Files, arguments: Value) -> anyhow::Result<Value> {
    let a: FileArgs = args(arguments)?;
    let top = clamp(a.top, 10, 50);
    let mut report = files.open(&a.file)?.report(a.device_total_bytes);
    let total = report.ooms.len();
    // The OOM each incident shows first, then the rest in order.
    let shown: Vec<(i32, u32)> = report
        .oom_incidents
        .iter()
        .map(|i| (i.device, i.shown_position))
        .collect();
    report.ooms.sort_by_key(|o| {
        (
            !shown.contains(&(o.device, o.position)),
            o.device,
            o.position,
        )
    });
    let omitted_ooms = cut(&mut report.ooms, top);
    for o in &mut report.ooms {
        trim_frames(&mut o.largest_sites, MAX_FRAMES);
    }
    let omitted_incidents = cut(&mut report.oom_incidents, top);
    Ok(json!({
        "file": a.file,
        "oom_outcome": report.oom_outcome,
        "oom_count": total,
        "oom_incidents": report.oom_incidents,
        "ooms": report.ooms,
        "omitted": {"ooms": omitted_ooms, "oom_incidents": omitted_incidents},
    }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TopArgs {
    file: PathBuf,
    #[serde(default)]
    top: Option<usize>,
}

fn leak_suspects(files: &mut Files, arguments: Value) -> anyhow::Result<Value> {
    let a: TopArgs = args(arguments)?;
    let mut report = files.open(&a.file)?.report(None);
    let omitted = cut(&mut report.leak_suspects, clamp(a.top, 10, 100));
    Ok(json!({
        "file": a.file,
        "leak_check": report.leak_check,
        "leak_suspects": report.leak_suspects,
        "omitted": omitted,
    }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PeakArgs {
    file: PathBuf,
    #[serde(default)]
    device: Option<i32>,
    #[serde(default)]
    top: Option<usize>,
}

fn peak_memory(files: &mut Files, arguments: Value) -> anyhow::Result<Value> {
    let a: PeakArgs = args(arguments)?;
    let o = files.open(&a.file)?;
    let report = o.report(None);
    let peaks: serde_json::Map<String, Value> = report
        .devices
        .iter()
        .map(|(device, d)| {
            (
                device.to_string(),
                json!({
                    "peak_requested_bytes": d.peak_requested_bytes,
                    "peak_requested_position": d.peak_requested_position,
                    "peak_allocated_bytes": d.peak_allocated_bytes,
                    "peak_allocated_position": d.peak_allocated_position,
                    "peak_reserved_bytes": d.peak_reserved_bytes,
                    "peak_reserved_position": d.peak_reserved_position,
                    "peaks_over": d.peaks_over,
                    "events": d.entries,
                    "categories_at_peak": d.categories.as_ref().map(|c| &c.at_peak),
                }),
            )
        })
        .collect();
    // A snapshot without a trace still has its peaks (from its segments): said, not an error.
    let q = api::StacksQuery {
        device: a.device,
        ..Default::default()
    };
    let (at_peak, why_not) = match o.stacks(&q, clamp(a.top, 20, 200)) {
        Ok(mut r) => {
            r.flame.children.clear();
            trim_frames(&mut r.sites, MAX_FRAMES);
            (Some(r), None)
        }
        Err(e) => (None, Some(format!("{e:#}"))),
    };
    Ok(
        json!({"file": a.file, "devices": peaks, "at_peak": at_peak, "at_peak_unavailable": why_not}),
    )
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StackArgs {
    file: PathBuf,
    #[serde(default)]
    device: Option<i32>,
    #[serde(default)]
    position: Option<u32>,
    #[serde(default)]
    category: Option<api::Category>,
    #[serde(default)]
    frames: Option<api::FlameFrames>,
    #[serde(default)]
    top: Option<usize>,
    #[serde(default)]
    flame: bool,
    #[serde(default)]
    weight: Option<api::FlameWeight>,
}

fn memory_by_stack(files: &mut Files, arguments: Value) -> anyhow::Result<Value> {
    let a: StackArgs = args(arguments)?;
    let o = files.open(&a.file)?;
    let q = api::StacksQuery {
        device: a.device,
        position: a.position,
        frames: a.frames,
        category: a.category,
        weight: a.weight,
    };
    let mut r = o.stacks(&q, clamp(a.top, 20, 200))?;
    if a.flame {
        let min = r.weight.of(r.total_bytes, r.flame.held) / 200.0;
        prune(&mut r, min);
    } else {
        r.flame.children.clear();
    }
    trim_frames(&mut r.sites, MAX_FRAMES);
    Ok(serde_json::to_value(r)?)
}

/// Frames kept of each call site's stack (user frames come first): deep compiled and C++ stacks
/// would otherwise fill an agent's context with frames below the line that matters.
const MAX_FRAMES: usize = 12;

fn trim_frames(sites: &mut [api::CallSite], n: usize) {
    for s in sites {
        s.frames.truncate(n);
    }
}

/// The flame tree without nodes weighing under `min` (bytes, or byte × µs held) or deeper than
/// 24 frames.
fn prune(r: &mut api::StackReport, min: f64) {
    let w = r.weight;
    prune_node(&mut r.flame, &|n| w.of(n.bytes, n.held) >= min.max(1.0), 0);
}

fn prune_node(node: &mut api::FlameNode, keep: &dyn Fn(&api::FlameNode) -> bool, depth: usize) {
    if depth >= 24 {
        node.children.clear();
        return;
    }
    node.children.retain(|c| keep(c));
    for c in &mut node.children {
        prune_node(c, keep, depth + 1);
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CategoryArgs {
    file: PathBuf,
    #[serde(default)]
    device: Option<i32>,
    #[serde(default)]
    position: Option<u32>,
    #[serde(default)]
    category: Option<api::Category>,
    #[serde(default)]
    limit: Option<usize>,
}

fn categories(files: &mut Files, arguments: Value) -> anyhow::Result<Value> {
    let a: CategoryArgs = args(arguments)?;
    let o = files.open(&a.file)?;
    let limit = clamp(a.limit, 20, 500);
    Ok(serde_json::to_value(o.categories(
        a.device,
        a.position,
        a.category,
        Some(limit),
    )?)?)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WhatifArgs {
    file: PathBuf,
    #[serde(default)]
    device: Option<i32>,
    #[serde(default)]
    alloc_confs: Vec<String>,
    #[serde(default)]
    limit_bytes: Option<u64>,
    #[serde(default)]
    limit_kind: api::LimitKind,
}

fn whatif(files: &mut Files, arguments: Value) -> anyhow::Result<Value> {
    let a: WhatifArgs = args(arguments)?;
    anyhow::ensure!(
        a.alloc_confs.len() <= 16,
        "at most 16 settings a call ({} asked)",
        a.alloc_confs.len()
    );
    let o = files.open(&a.file)?;
    let w = o.whatif(&snapshot::analysis::whatif::Options {
        device: a.device,
        alloc_confs: a.alloc_confs,
        limit_bytes: a.limit_bytes,
        limit_is_fraction: a.limit_kind == api::LimitKind::Fraction,
        curves: false,
        cancel: Default::default(),
        threads: 0,
        progress: None,
    })?;
    Ok(serde_json::to_value(crate::convert::whatif(w))?)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Recording {
    file: PathBuf,
    size: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PredictArgs {
    recordings: Vec<Recording>,
    #[serde(default)]
    sizes: Vec<u64>,
    #[serde(default)]
    limit_bytes: Option<u64>,
    #[serde(default)]
    limit_kind: api::LimitKind,
    #[serde(default)]
    gpu: Option<String>,
    #[serde(default)]
    alloc_conf: String,
    #[serde(default)]
    device: Option<i32>,
}

fn predict(files: &mut Files, arguments: Value) -> anyhow::Result<Value> {
    let a: PredictArgs = args(arguments)?;
    anyhow::ensure!(
        (2..=8).contains(&a.recordings.len()),
        "give 2 to 8 recordings ({} given)",
        a.recordings.len()
    );
    anyhow::ensure!(a.sizes.len() <= 32, "at most 32 sizes a call");
    let mut opened = Vec::new();
    for r in &a.recordings {
        opened.push((files.open(&r.file)?, r.size));
    }
    let recordings: Vec<(&Opened, u64)> = opened.iter().map(|(o, s)| (o.as_ref(), *s)).collect();
    let ask = crate::predict::Ask {
        search: a.sizes.is_empty(),
        sizes: a.sizes,
        limit_bytes: a.limit_bytes,
        kind: a.limit_kind,
        gpu: a.gpu,
        alloc_conf: a.alloc_conf,
    };
    Ok(serde_json::to_value(local::predict(
        &recordings,
        a.device,
        &ask,
    )?)?)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DiffArgs {
    a: PathBuf,
    b: PathBuf,
    #[serde(default)]
    device_a: Option<i32>,
    #[serde(default)]
    device_b: Option<i32>,
    #[serde(default)]
    top: Option<usize>,
}

fn diff(files: &mut Files, arguments: Value) -> anyhow::Result<Value> {
    let d: DiffArgs = args(arguments)?;
    let (a, b) = (files.open(&d.a)?, files.open(&d.b)?);
    let top = clamp(d.top, 10, 200);
    let mut diff = crate::convert::diff(local::diff(&a, &b, (d.device_a, d.device_b), top)?);
    let omitted = cut(&mut diff.leaks, top);
    Ok(json!({"a": d.a, "b": d.b, "diff": diff, "omitted": {"leaks": omitted}}))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RunArgs {
    files: Vec<PathBuf>,
    #[serde(default)]
    device_total_bytes: Option<u64>,
}

fn run_ranks(files: &mut Files, arguments: Value) -> anyhow::Result<Value> {
    let a: RunArgs = args(arguments)?;
    anyhow::ensure!(!a.files.is_empty(), "give a folder or the files of the run");
    let (id, paths) = local::run_files(&a.files)?;
    anyhow::ensure!(
        paths.len() <= 64,
        "at most 64 ranks a call ({} files)",
        paths.len()
    );
    let mut open = |p: &Path| files.open(p);
    let (report, ranks_from_names) =
        local::run_report(&id, &paths, a.device_total_bytes, &mut open)?;
    Ok(json!({"run": report, "ranks_from_names": ranks_from_names}))
}
