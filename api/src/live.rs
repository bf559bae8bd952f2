//! The live pages' answers: the fleet, one GPU over a window, one process over a window, and the
//! event stream's notices. Byte figures are `i64` here: they come from SQLite as they were sent.

use serde::{Deserialize, Serialize};

/// `?from_ms=&to_ms=` (default: the last `minutes`, 10), `points` buckets (default 600), and
/// for a process page the `start_time_ms` that tells a reused pid apart.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WindowQuery {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minutes: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub points: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time_ms: Option<i64>,
}

/// A time window cut into buckets of `bucket_ms`; every series of an answer has one value per
/// bucket (the bucket's maximum, so peaks stay visible), aligned with the answer's `times`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Window {
    pub from_ms: i64,
    pub to_ms: i64,
    pub bucket_ms: i64,
}

/// What kind of thing happened. Collectors may send kinds a server does not know yet; those are
/// kept by name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// PyTorch ran out of memory (the agent's OOM observer).
    Oom,
    /// `num_alloc_retries` grew: cudaMalloc failed and the cache was flushed.
    AllocRetry,
    /// A collector's own message.
    Collector,
    #[serde(untagged)]
    Other(String),
}

impl EventKind {
    pub fn as_str(&self) -> &str {
        match self {
            EventKind::Oom => "oom",
            EventKind::AllocRetry => "alloc_retry",
            EventKind::Collector => "collector",
            EventKind::Other(s) => s,
        }
    }
}

/// An event a collector or agent reported.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LiveEvent {
    pub host: String,
    pub time_ms: i64,
    pub kind: EventKind,
    pub pid: Option<i64>,
    pub device: Option<i64>,
    pub message: String,
    /// The snapshot the agent uploaded for an OOM.
    pub snapshot_id: Option<String>,
}

/// A GPU and its latest NVML reading.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuReading {
    pub host: String,
    pub uuid: String,
    /// NVML's index on its host.
    pub idx: i64,
    pub name: Option<String>,
    pub total_bytes: Option<i64>,
    pub last_seen_ms: i64,
    pub used_bytes: Option<i64>,
    /// Reserved by the firmware (NVML v2).
    pub reserved_bytes: Option<i64>,
    pub gpu_util: Option<i64>,
    pub temperature_c: Option<i64>,
    pub power_mw: Option<i64>,
}

/// A process in a GPU's latest NVML reading.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuProcess {
    pub gpu_uuid: String,
    pub pid: i64,
    pub start_time_ms: Option<i64>,
    pub name: Option<String>,
    pub used_bytes: i64,
}

/// A GPU on the fleet page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FleetGpu {
    pub gpu: GpuReading,
    /// Not heard from for a minute.
    pub stale: bool,
    /// Processes in its latest reading.
    pub processes: usize,
    /// The one using the most memory.
    pub top_process: Option<GpuProcess>,
    /// PyTorch's figures summed over agents heard from in the last minute.
    pub pytorch_reserved_bytes: i64,
    pub pytorch_allocated_bytes: i64,
    pub alloc_retries: i64,
    pub ooms: i64,
}

/// A host on the fleet page (also hosts without GPU readings: agents relayed without NVML).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FleetHost {
    pub host: String,
    pub gpus: Vec<FleetGpu>,
    /// The collector that last reported for it.
    pub collector: Option<String>,
    pub last_seen_ms: Option<i64>,
}

/// A process on the fleet page: what NVML, its agent and the processes table say of it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FleetProcess {
    pub host: String,
    pub pid: i64,
    pub name: Option<String>,
    pub cgroup: Option<String>,
    pub start_time_ms: Option<i64>,
    pub first_seen_ms: Option<i64>,
    pub last_seen_ms: Option<i64>,
    /// Whether an agent reports from inside it (the key is left out when false).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub has_agent: bool,
    /// NVML's reading, summed over the GPUs it is on.
    pub nvml_used_bytes: i64,
    /// The agent's latest figures, summed over the process's devices.
    pub step: Option<i64>,
    pub reserved_bytes: Option<i64>,
    pub allocated_bytes: Option<i64>,
    pub alloc_retries: Option<i64>,
    pub ooms: Option<i64>,
    /// Not heard from for a minute.
    pub stale: bool,
}

/// `GET /api/live/fleet`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fleet {
    pub now_ms: i64,
    pub hosts: Vec<FleetHost>,
    /// Processes seen in the last hour.
    pub processes: Vec<FleetProcess>,
    /// OOMs and allocation retries of the last 24 hours, newest first.
    pub alerts: Vec<LiveEvent>,
    /// The collector names this server has a token for (`--collector-token NAME=TOKEN`; the
    /// tokens themselves are never sent), so an empty fleet page can say what to run.
    pub collectors: Vec<String>,
}

/// One process on a GPU page, each series aligned with the page's `times`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuPageProcess {
    pub pid: i64,
    pub start_time_ms: Option<i64>,
    pub name: Option<String>,
    pub has_agent: bool,
    /// NVML used − PyTorch reserved: the CUDA context, NCCL, other libraries.
    #[serde(rename = "outside_pytorch")]
    pub outside_pytorch_bytes: Vec<Option<i64>>,
    #[serde(rename = "nvml_used")]
    pub nvml_used_bytes: Vec<Option<i64>>,
    #[serde(rename = "reserved")]
    pub reserved_bytes: Vec<Option<i64>>,
    #[serde(rename = "allocated")]
    pub allocated_bytes: Vec<Option<i64>>,
}

/// `GET /api/live/gpus/{uuid}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuPage {
    pub gpu: GpuReading,
    pub window: Window,
    /// Each bucket's start.
    #[serde(rename = "times")]
    pub times_ms: Vec<i64>,
    /// NVML used.
    #[serde(rename = "used")]
    pub used_bytes: Vec<Option<i64>>,
    pub processes: Vec<GpuPageProcess>,
    pub events: Vec<LiveEvent>,
}

/// One step's figures (the agent's `step()` marks).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepFigures {
    pub step: i64,
    pub time_ms: i64,
    pub allocated_min_bytes: i64,
    pub allocated_max_bytes: i64,
    pub reserved_max_bytes: i64,
}

/// Whether memory held between steps keeps rising: the live leak signal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LeakSignal {
    pub rising: bool,
    /// Least-squares slope of the step low points.
    pub bytes_per_step: f64,
    /// Steps looked at (the latest 200 at most).
    pub steps: usize,
    /// How far the floor rose (last quarter's lowest point − the first quarter's).
    pub growth_bytes: i64,
    /// Share of step-to-step changes that were increases.
    pub rising_share: f64,
}

/// One device of a process page: allocator series aligned with the page's `times`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceSeries {
    pub device: i64,
    pub gpu_uuid: Option<String>,
    #[serde(rename = "allocated")]
    pub allocated_bytes: Vec<Option<i64>>,
    #[serde(rename = "reserved")]
    pub reserved_bytes: Vec<Option<i64>>,
    #[serde(rename = "active")]
    pub active_bytes: Vec<Option<i64>>,
    #[serde(rename = "inactive_split")]
    pub inactive_split_bytes: Vec<Option<i64>>,
    #[serde(rename = "requested")]
    pub requested_bytes: Vec<Option<i64>>,
    pub alloc_retries: Vec<Option<i64>>,
    #[serde(rename = "nvml_used")]
    pub nvml_used_bytes: Vec<Option<i64>>,
    #[serde(rename = "outside_pytorch")]
    pub outside_pytorch_bytes: Vec<Option<i64>>,
    pub steps: Vec<StepFigures>,
    pub leak: LeakSignal,
}

/// `GET /api/live/processes/{host}/{pid}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessPage {
    pub host: String,
    pub pid: i64,
    pub start_time_ms: Option<i64>,
    pub name: Option<String>,
    pub window: Window,
    /// Each bucket's start.
    #[serde(rename = "times")]
    pub times_ms: Vec<i64>,
    pub devices: Vec<DeviceSeries>,
    /// Its events, newest first.
    pub events: Vec<LiveEvent>,
}

/// `GET /api/live/stream`: an `ingest` event per stored batch (pages refetch what they show).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveNotice {
    pub host: String,
    pub time_ms: i64,
    /// Samples stored.
    pub rows: u64,
    pub events: usize,
}
