//! The wire format between collectors (and the in-process agent) and the server.
//!
//! A collector sends [`Batch`]es as JSON (optionally gzip-compressed, `Content-Encoding: gzip`) to
//! `POST /api/ingest` with `Authorization: Bearer <token>`. Batches are numbered per collector
//! (`seq`, increasing); the server stores each `(collector, seq)` once and acknowledges it, so a
//! collector may resend until it sees the acknowledgement and then delete it from its spool.
//!
//! Units are in the names: `_bytes`, `_ms` (Unix epoch milliseconds), `_percent`, `_mw`, `_c`.
//! Every reading an NVML call might not provide is optional. Version changes are additive; a
//! server refuses a `version` newer than it knows.

use serde::{Deserialize, Serialize};

/// The version this crate writes and reads. 2 added `spool_id` (batches and acknowledgements);
/// version-1 batches, without it, are still accepted and keyed by `(collector, seq)` as before.
pub const VERSION: u32 = 2;

/// One upload from a collector.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Batch {
    pub version: u32,
    /// The collector's name (what its token was issued for; usually the host name).
    pub collector: String,
    /// The spool this batch was written to (random, created with the spool); `None` from
    /// version-1 senders.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spool_id: Option<String>,
    /// Increasing per spool; the idempotency key with `collector` and `spool_id`.
    pub seq: u64,
    pub host: String,
    #[serde(default)]
    pub gpus: Vec<GpuSample>,
    #[serde(default)]
    pub processes: Vec<ProcessSample>,
    #[serde(default)]
    pub allocator: Vec<AllocatorSample>,
    #[serde(default)]
    pub events: Vec<Event>,
    /// Samples the collector dropped since its previous batch (spool full), so loss is visible.
    #[serde(default)]
    pub dropped_samples: u64,
}

impl Ack {
    /// Whether this acknowledges `batch`: the same sequence number in the same spool. A
    /// collector deletes a batch only on such an acknowledgement.
    pub fn acknowledges(&self, batch_spool_id: Option<&str>, seq: u64) -> bool {
        self.seq == seq && self.spool_id.as_deref() == batch_spool_id
    }
}

impl Batch {
    /// A batch with nothing in it yet, at this crate's version.
    pub fn new(collector: &str, seq: u64, host: &str) -> Batch {
        Batch {
            version: VERSION,
            collector: collector.to_string(),
            spool_id: None,
            seq,
            host: host.to_string(),
            gpus: Vec::new(),
            processes: Vec::new(),
            allocator: Vec::new(),
            events: Vec::new(),
            dropped_samples: 0,
        }
    }
}

/// Most distinct series one batch may carry (GPUs, process readings by (GPU, pid, start),
/// allocator readings by (pid, start, device)): a collector's batch of ten readings of a
/// 16-GPU host with 100 processes holds about 1,700.
pub const MAX_SERIES_PER_BATCH: usize = 4096;

/// Longest name a batch may carry (host, collector, spool id, GPU UUID and name, process name
/// and cgroup, event kind), in bytes.
pub const MAX_NAME_BYTES: usize = 1024;

/// Longest event message a batch may carry, in bytes.
pub const MAX_MESSAGE_BYTES: usize = 16 << 10;

impl Batch {
    /// Why a server refuses this batch as malformed, if it does: a version it never wrote, a
    /// string no database keeps the same way on every backend (NUL; control characters in a
    /// name), a name or message too long, or more series than [`MAX_SERIES_PER_BATCH`]. A
    /// batch refused so is refused for good: resending it cannot help.
    pub fn problem(&self) -> Option<String> {
        if self.version == 0 {
            return Some(format!(
                "batch version 0 does not exist (collectors send 1 to {VERSION})"
            ));
        }
        let mut names: Vec<(&str, &str)> =
            vec![("host", &self.host), ("collector", &self.collector)];
        names.extend(self.spool_id.as_deref().map(|s| ("spool_id", s)));
        for g in &self.gpus {
            names.push(("GPU uuid", &g.uuid));
            names.extend(g.name.as_deref().map(|n| ("GPU name", n)));
        }
        for p in &self.processes {
            names.push(("process GPU uuid", &p.gpu_uuid));
            names.extend(p.name.as_deref().map(|n| ("process name", n)));
            names.extend(p.cgroup.as_deref().map(|c| ("process cgroup", c)));
        }
        names.extend(
            self.allocator
                .iter()
                .filter_map(|a| a.gpu_uuid.as_deref().map(|u| ("allocator GPU uuid", u))),
        );
        for e in &self.events {
            names.push(("event kind", &e.kind));
            names.extend(e.snapshot_id.as_deref().map(|id| ("event snapshot_id", id)));
        }
        if let Some(why) = names.iter().find_map(|(what, s)| name_problem(what, s)) {
            return Some(why);
        }
        if let Some(e) = self
            .events
            .iter()
            .find(|e| e.message.contains('\0') || e.message.len() > MAX_MESSAGE_BYTES)
        {
            return Some(format!(
                "an event message ({} bytes) is longer than {MAX_MESSAGE_BYTES} bytes or holds a NUL character",
                e.message.len()
            ));
        }
        let series = self.series();
        (series > MAX_SERIES_PER_BATCH).then(|| {
            format!(
                "the batch holds {series} series (GPUs, processes, allocator devices); at most {MAX_SERIES_PER_BATCH} \
                 in one batch: send fewer readings per batch"
            )
        })
    }

    /// Distinct series in the batch: GPUs, process readings by (GPU, pid, start), allocator
    /// readings by (pid, start, device).
    pub fn series(&self) -> usize {
        use std::collections::HashSet;
        let gpus: HashSet<&str> = self.gpus.iter().map(|g| g.uuid.as_str()).collect();
        let procs: HashSet<(&str, u32, Option<i64>)> = self
            .processes
            .iter()
            .map(|p| (p.gpu_uuid.as_str(), p.pid, p.start_time_ms))
            .collect();
        let alloc: HashSet<(u32, Option<i64>, i32)> = self
            .allocator
            .iter()
            .map(|a| (a.pid, a.start_time_ms, a.device))
            .collect();
        gpus.len() + procs.len() + alloc.len()
    }
}

/// Why `s` cannot be a name in a batch, if it cannot.
fn name_problem(what: &str, s: &str) -> Option<String> {
    if s.len() > MAX_NAME_BYTES {
        return Some(format!(
            "the {what} is {} bytes long; at most {MAX_NAME_BYTES}",
            s.len()
        ));
    }
    s.chars().any(char::is_control).then(|| {
        format!(
            "the {what} {:?} holds a control character (NUL, a line break, …)",
            s.escape_debug().to_string()
        )
    })
}

/// One NVML reading of one GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuSample {
    pub time_ms: i64,
    /// NVML UUID (`GPU-…` or `MIG-…`): GPUs are keyed by it, not by index.
    pub uuid: String,
    pub index: u32,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub memory_used_bytes: Option<u64>,
    #[serde(default)]
    pub memory_free_bytes: Option<u64>,
    #[serde(default)]
    pub memory_total_bytes: Option<u64>,
    /// Firmware-reserved memory (NVML memory_info v2), recorded apart from `used`.
    #[serde(default)]
    pub memory_reserved_bytes: Option<u64>,
    #[serde(default)]
    pub gpu_util_percent: Option<u32>,
    #[serde(default)]
    pub mem_util_percent: Option<u32>,
    #[serde(default)]
    pub temperature_c: Option<i32>,
    #[serde(default)]
    pub power_mw: Option<u32>,
}

/// GPU memory one process holds, as NVML reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessSample {
    pub time_ms: i64,
    pub gpu_uuid: String,
    /// In the host's PID namespace.
    pub pid: u32,
    /// Process start time: PIDs are reused, (host, pid, start) is the key.
    #[serde(default)]
    pub start_time_ms: Option<i64>,
    #[serde(default)]
    pub name: Option<String>,
    /// Container or job, from `/proc/<pid>/cgroup`, where visible.
    #[serde(default)]
    pub cgroup: Option<String>,
    pub used_bytes: u64,
}

/// `torch.cuda.memory_stats()` of one device in one process (from the in-process agent).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AllocatorSample {
    pub time_ms: i64,
    pub pid: u32,
    #[serde(default)]
    pub start_time_ms: Option<i64>,
    pub device: i32,
    /// The device's UUID as NVML spells it (`GPU-…`), so the server can join it with NVML's
    /// per-process readings; CUDA's device index differs from NVML's.
    #[serde(default)]
    pub gpu_uuid: Option<String>,
    /// Training step (`memscope_agent.step(n)`), if the job marks them.
    #[serde(default)]
    pub step: Option<u64>,
    pub allocated_bytes: u64,
    pub reserved_bytes: u64,
    #[serde(default)]
    pub active_bytes: Option<u64>,
    #[serde(default)]
    pub inactive_split_bytes: Option<u64>,
    #[serde(default)]
    pub requested_bytes: Option<u64>,
    #[serde(default)]
    pub alloc_retries: Option<u64>,
    #[serde(default)]
    pub ooms: Option<u64>,
    /// Segments the allocator holds (from the last segment-only snapshot).
    #[serde(default)]
    pub segments: Option<u64>,
    /// The largest free block inside the allocator's segments (last segment-only snapshot): the
    /// largest request that can be served without asking CUDA for more.
    #[serde(default)]
    pub largest_free_block_bytes: Option<u64>,
}

/// What an in-process agent leaves for the host collector to relay: one JSON file per flush in
/// the collector's agent folder (`--agent-dir`), written to `NAME.tmp` and renamed to
/// `NAME.json`. The collector folds it into its next batch (joining the pid with NVML's) and
/// deletes the file once that batch is in its spool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentFile {
    pub version: u32,
    /// The agent's pid as it sees it (inside a container this is not the host's pid).
    pub pid: u32,
    #[serde(default)]
    pub start_time_ms: Option<i64>,
    #[serde(default)]
    pub allocator: Vec<AllocatorSample>,
    #[serde(default)]
    pub events: Vec<Event>,
    /// Samples the agent dropped (its queue was full).
    #[serde(default)]
    pub dropped_samples: u64,
}

/// Something that happened: an OOM, allocation retries, a collector message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub time_ms: i64,
    /// `oom`, `alloc_retry`, `collector`, …
    pub kind: String,
    #[serde(default)]
    pub pid: Option<u32>,
    #[serde(default)]
    pub device: Option<i32>,
    #[serde(default)]
    pub message: String,
    /// The uploaded snapshot for an OOM, once the agent has uploaded it.
    #[serde(default)]
    pub snapshot_id: Option<String>,
}

/// The server's answer to a batch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ack {
    pub seq: u64,
    /// The batch's `spool_id`, echoed (absent from version-1 servers and for version-1 batches).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spool_id: Option<String>,
    /// True when this key had been stored before with the same content (nothing stored again).
    pub duplicate: bool,
    /// Rows stored from this batch.
    pub stored: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_minimal_batch_parses_and_optional_readings_stay_none() {
        let b: Batch = serde_json::from_str(
            r#"{"version":1,"collector":"c","seq":7,"host":"h",
                "gpus":[{"time_ms":1,"uuid":"GPU-x","index":0}]}"#,
        )
        .unwrap();
        assert_eq!((b.seq, b.gpus.len(), b.processes.len()), (7, 1, 0));
        assert_eq!(b.gpus[0].memory_used_bytes, None);
        assert_eq!(b.dropped_samples, 0);
        assert_eq!(b.spool_id, None, "a version-1 batch has no spool id");
    }

    #[test]
    fn a_batch_with_nul_a_long_name_version_0_or_too_many_series_is_malformed() {
        let ok = Batch::new("gpu7", 1, "gpu7");
        assert_eq!(ok.problem(), None);
        let v0 = Batch {
            version: 0,
            ..ok.clone()
        };
        assert!(v0.problem().unwrap().contains("version 0"));
        let mut nul = ok.clone();
        nul.events.push(Event {
            time_ms: 1,
            kind: "oom".into(),
            pid: None,
            device: None,
            message: "bad\0byte".into(),
            snapshot_id: None,
        });
        assert!(nul.problem().unwrap().contains("NUL"));
        let crlf = Batch::new("gpu7", 1, "gpu7\r\nx");
        assert!(crlf.problem().unwrap().contains("control character"));
        let mut many = ok.clone();
        for i in 0..=MAX_SERIES_PER_BATCH {
            many.allocator.push(AllocatorSample {
                time_ms: 1,
                pid: i as u32,
                start_time_ms: None,
                device: 0,
                gpu_uuid: None,
                step: None,
                allocated_bytes: 0,
                reserved_bytes: 0,
                active_bytes: None,
                inactive_split_bytes: None,
                requested_bytes: None,
                alloc_retries: None,
                ooms: None,
                segments: None,
                largest_free_block_bytes: None,
            });
        }
        assert!(many.problem().unwrap().contains("series"));
    }

    #[test]
    fn round_trips() {
        let b = Batch {
            version: VERSION,
            collector: "gpu7".into(),
            spool_id: Some("3f2a".into()),
            seq: 3,
            host: "gpu7".into(),
            gpus: vec![],
            processes: vec![ProcessSample {
                time_ms: 5,
                gpu_uuid: "GPU-a".into(),
                pid: 42,
                start_time_ms: Some(1),
                name: Some("python".into()),
                cgroup: None,
                used_bytes: 1 << 30,
            }],
            allocator: vec![],
            events: vec![],
            dropped_samples: 2,
        };
        let back: Batch = serde_json::from_str(&serde_json::to_string(&b).unwrap()).unwrap();
        assert_eq!(back, b);
    }
}
