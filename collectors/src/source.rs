//! Where GPU readings come from: NVML on a GPU host, or a recording of NVML readings (the
//! fixtures' `*.nvml.json`), which goes through exactly the same batching, spooling and shipping.

use std::path::Path;

/// One reading of every GPU and their processes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reading {
    pub gpus: Vec<wire::GpuSample>,
    pub processes: Vec<wire::ProcessSample>,
}

impl Reading {
    pub fn samples(&self) -> usize {
        self.gpus.len() + self.processes.len()
    }
}

/// A source of readings.
pub trait Source: Send {
    /// Reads every GPU now (`now_ms`: Unix epoch milliseconds). Never panics; a reading an NVML
    /// call could not give is left out (`None`).
    fn read(&mut self, now_ms: i64) -> Reading;
    /// One line saying what this source is.
    fn describe(&self) -> String;
}

/// Replays recorded NVML readings (`[{t, used, free, total, gpu_util, mem_util, power_mw,
/// temp_c, procs: [{pid, used}], uuid?}]`), one per `read`, cycling at the end; times are the
/// live clock. The GPU's UUID is the reading's `uuid`, else `GPU-recorded-<file name>`.
#[derive(Debug)]
pub struct Recorded {
    readings: Vec<serde_json::Value>,
    next: usize,
    uuid: String,
    name: String,
}

impl Recorded {
    pub fn open(path: &Path) -> anyhow::Result<Recorded> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
        let readings: Vec<serde_json::Value> = serde_json::from_str(&text).map_err(|e| {
            anyhow::anyhow!(
                "{} is not a recording of NVML readings: {e}",
                path.display()
            )
        })?;
        if readings.is_empty() {
            anyhow::bail!("{} holds no readings", path.display());
        }
        let stem = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("recorded")
            .to_string();
        Ok(Recorded {
            readings,
            next: 0,
            uuid: format!("GPU-recorded-{stem}"),
            name: "recorded".into(),
        })
    }
}

impl Source for Recorded {
    fn read(&mut self, now_ms: i64) -> Reading {
        let r = &self.readings[self.next % self.readings.len()];
        self.next += 1;
        if let Some(u) = r.get("uuid").and_then(|u| u.as_str()) {
            self.uuid = u.to_string();
        }
        let u = |k: &str| r.get(k).and_then(|v| v.as_u64());
        Reading {
            gpus: vec![wire::GpuSample {
                time_ms: now_ms,
                uuid: self.uuid.clone(),
                index: 0,
                name: Some(self.name.clone()),
                memory_used_bytes: u("used"),
                memory_free_bytes: u("free"),
                memory_total_bytes: u("total"),
                memory_reserved_bytes: None,
                gpu_util_percent: u("gpu_util").map(|v| v as u32),
                mem_util_percent: u("mem_util").map(|v| v as u32),
                temperature_c: r.get("temp_c").and_then(|v| v.as_i64()).map(|v| v as i32),
                power_mw: u("power_mw").map(|v| v as u32),
            }],
            processes: r
                .get("procs")
                .and_then(|p| p.as_array())
                .into_iter()
                .flatten()
                .filter_map(|p| {
                    Some(wire::ProcessSample {
                        time_ms: now_ms,
                        gpu_uuid: self.uuid.clone(),
                        pid: p.get("pid")?.as_u64()? as u32,
                        start_time_ms: None,
                        name: None,
                        cgroup: None,
                        used_bytes: p.get("used")?.as_u64()?,
                    })
                })
                .collect(),
        }
    }

    fn describe(&self) -> String {
        format!(
            "replaying {} recorded NVML readings ({})",
            self.readings.len(),
            self.uuid
        )
    }
}

/// NVML through `nvml-wrapper`: initialised once; every metric optional.
pub struct Nvml {
    nvml: nvml_wrapper::Nvml,
    count: u32,
}

impl std::fmt::Debug for Nvml {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Nvml({} GPUs)", self.count)
    }
}

impl Nvml {
    /// Opens NVML, or says in one line why there is none here.
    pub fn open() -> Result<Nvml, String> {
        // MEMSCOPE_NVML_NO_ATTACH=1: initialise without attaching GPUs up front (an experiment
        // on NVML's own memory use; see bench/README.md).
        let init = if std::env::var_os("MEMSCOPE_NVML_NO_ATTACH").is_some() {
            nvml_wrapper::Nvml::init_with_flags(nvml_wrapper::bitmasks::InitFlags::NO_ATTACH)
        } else {
            nvml_wrapper::Nvml::init()
        };
        let nvml = init.map_err(|e| match e {
            nvml_wrapper::error::NvmlError::LibloadingError(_) => {
                "no NVML on this machine (libnvidia-ml.so.1 not found): no NVIDIA driver, so no GPU readings".to_string()
            }
            nvml_wrapper::error::NvmlError::DriverNotLoaded => {
                "NVML is installed but the NVIDIA driver is not loaded: no GPU readings".to_string()
            }
            other => format!("NVML could not start: {other}"),
        })?;
        let count = nvml
            .device_count()
            .map_err(|e| format!("NVML could not count GPUs: {e}"))?;
        Ok(Nvml { nvml, count })
    }
}

impl Source for Nvml {
    fn read(&mut self, now_ms: i64) -> Reading {
        let mut out = Reading::default();
        for i in 0..self.count {
            let Ok(d) = self.nvml.device_by_index(i) else {
                continue;
            };
            let Ok(uuid) = d.uuid() else { continue };
            let mem = d.memory_info().ok();
            let util = d.utilization_rates().ok();
            out.gpus.push(wire::GpuSample {
                time_ms: now_ms,
                uuid: uuid.clone(),
                index: i,
                name: d.name().ok(),
                memory_used_bytes: mem.as_ref().map(|m| m.used),
                memory_free_bytes: mem.as_ref().map(|m| m.free),
                memory_total_bytes: mem.as_ref().map(|m| m.total),
                memory_reserved_bytes: mem.as_ref().map(|m| m.reserved),
                gpu_util_percent: util.as_ref().map(|u| u.gpu),
                mem_util_percent: util.as_ref().map(|u| u.memory),
                temperature_c: d
                    .temperature(nvml_wrapper::enum_wrappers::device::TemperatureSensor::Gpu)
                    .ok()
                    .map(|t| t as i32),
                power_mw: d.power_usage().ok(),
            });
            if let Ok(procs) = d.running_compute_processes() {
                for p in procs {
                    let used = match p.used_gpu_memory {
                        nvml_wrapper::enums::device::UsedGpuMemory::Used(b) => b,
                        nvml_wrapper::enums::device::UsedGpuMemory::Unavailable => continue,
                    };
                    out.processes.push(wire::ProcessSample {
                        time_ms: now_ms,
                        gpu_uuid: uuid.clone(),
                        pid: p.pid,
                        start_time_ms: crate::relay::process_start_ms_in(
                            std::path::Path::new("/proc"),
                            p.pid,
                        ),
                        name: std::fs::read_to_string(format!("/proc/{}/comm", p.pid))
                            .ok()
                            .map(|s| s.trim().to_string()),
                        cgroup: std::fs::read_to_string(format!("/proc/{}/cgroup", p.pid))
                            .ok()
                            .and_then(|s| {
                                s.lines()
                                    .last()
                                    .map(|l| l.rsplit(':').next().unwrap_or("").to_string())
                            }),
                        used_bytes: used,
                    });
                }
            }
        }
        out
    }

    fn describe(&self) -> String {
        format!("NVML, {} GPUs", self.count)
    }
}

/// No GPU readings at all: a host without NVML still relays its agents' data.
#[derive(Debug)]
pub struct NoGpu;

impl Source for NoGpu {
    fn read(&mut self, _now_ms: i64) -> Reading {
        Reading::default()
    }

    fn describe(&self) -> String {
        "no GPU readings (relaying agent data only)".into()
    }
}
