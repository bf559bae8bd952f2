//! The live pages' answers (`api::Fleet`, `api::GpuPage`, `api::ProcessPage`) shaped from the
//! queries' rows: series aligned to the window, the memory held outside PyTorch, the leak signal,
//! and on the fleet page each process merged from what NVML, its agent and the processes table say.

use std::collections::{BTreeMap, HashMap};

use super::queries::{AgentLatest, GpuProcess, GpuRow};
use super::series::{FILL_MS, Window, align, leak_signal, outside};
use super::store::Live;

/// Processes and GPUs not heard from for this long are not on the fleet page.
const FLEET_RECENT_MS: i64 = 3_600_000;
/// Not heard from for this long: shown as stale, and not counted in what a GPU holds now.
const STALE_MS: i64 = 60_000;
/// Alerts cover this long.
const ALERTS_MS: i64 = 24 * 3_600_000;

/// The page's entry for (host, pid), made on first mention.
fn fleet_process<'a>(
    all: &'a mut BTreeMap<(String, i64), api::FleetProcess>,
    host: &str,
    pid: i64,
) -> &'a mut api::FleetProcess {
    all.entry((host.to_string(), pid))
        .or_insert_with(|| api::FleetProcess {
            host: host.to_string(),
            pid,
            ..Default::default()
        })
}

fn seen(p: &mut api::FleetProcess, time_ms: i64) {
    p.last_seen_ms = Some(p.last_seen_ms.map_or(time_ms, |t| t.max(time_ms)));
}

/// The fleet at `now_ms`: hosts × GPUs (latest reading, top process, PyTorch totals of
/// agents heard from lately), alerts, every process seen in the last hour, and the collector
/// names the server accepts.
pub async fn fleet_page(
    live: &Live,
    now_ms: i64,
    collectors: Vec<String>,
) -> sqlx::Result<api::Fleet> {
    // Six reads, each on a connection of its own, at once: on PostgreSQL they run in
    // parallel (the fleet's answer waits for the slowest, not for their sum).
    let (gpus, procs, agents, events, known, host_rows) = tokio::try_join!(
        live.fleet_gpus(),
        live.current_gpu_processes(),
        live.agents_since(now_ms - FLEET_RECENT_MS),
        live.events_since(now_ms - ALERTS_MS, 100),
        live.processes_since(now_ms - FLEET_RECENT_MS),
        live.hosts(),
    )?;

    // Each GPU's processes and recent agents, and each GPU by uuid, looked up by hash: a
    // fleet of 1,000 hosts has 8,000 GPUs and as many processes (issue 16's benchmark).
    let mut procs_on: HashMap<&str, Vec<&GpuProcess>> = HashMap::new();
    for p in &procs {
        procs_on.entry(p.gpu_uuid.as_str()).or_default().push(p);
    }
    let mut agents_on: HashMap<&str, Vec<&AgentLatest>> = HashMap::new();
    for a in &agents {
        // Only agents heard from lately count towards the GPU's figures: a finished job's
        // last sample is history, not memory held now.
        if let Some(uuid) = a
            .gpu_uuid
            .as_deref()
            .filter(|_| now_ms - a.time_ms <= STALE_MS)
        {
            agents_on.entry(uuid).or_default().push(a);
        }
    }
    let gpu_by_uuid: HashMap<&str, &GpuRow> = gpus.iter().map(|g| (g.uuid.as_str(), g)).collect();
    let mut hosts: BTreeMap<String, Vec<api::FleetGpu>> = BTreeMap::new();
    for g in &gpus {
        let on_gpu = procs_on.get(g.uuid.as_str()).map_or(&[][..], Vec::as_slice);
        let mine = agents_on
            .get(g.uuid.as_str())
            .map_or(&[][..], Vec::as_slice);
        hosts
            .entry(g.host.clone())
            .or_default()
            .push(api::FleetGpu {
                gpu: g.clone().into_api(),
                stale: now_ms - g.last_seen_ms > STALE_MS,
                processes: on_gpu.len(),
                top_process: on_gpu.first().map(|p| (*p).clone().into_api()),
                pytorch_reserved_bytes: mine.iter().map(|a| a.reserved_bytes).sum(),
                pytorch_allocated_bytes: mine.iter().map(|a| a.allocated_bytes).sum(),
                alloc_retries: mine.iter().filter_map(|a| a.alloc_retries).sum(),
                ooms: mine.iter().filter_map(|a| a.ooms).sum(),
            });
    }
    // Hosts without GPU readings (no NVML there; agents relayed) are on the page too.
    for h in &host_rows {
        hosts.entry(h.host.clone()).or_default();
    }
    // Every process we know of: NVML's current ones, the agents heard from recently, and the
    // processes table's names, containers and sightings.
    let mut processes: BTreeMap<(String, i64), api::FleetProcess> = BTreeMap::new();
    for p in &procs {
        let host = gpu_by_uuid
            .get(p.gpu_uuid.as_str())
            .map_or("", |g| g.host.as_str());
        let e = fleet_process(&mut processes, host, p.pid);
        e.name = p.name.clone();
        e.start_time_ms = p.start_time_ms;
        e.nvml_used_bytes += p.used_bytes;
    }
    for a in &agents {
        let e = fleet_process(&mut processes, &a.host, a.pid);
        e.start_time_ms = a.start_time_ms;
        e.has_agent = true;
        seen(e, a.time_ms);
        e.step = a.step;
        for (sum, v) in [
            (&mut e.reserved_bytes, a.reserved_bytes),
            (&mut e.allocated_bytes, a.allocated_bytes),
            (&mut e.alloc_retries, a.alloc_retries.unwrap_or(0)),
            (&mut e.ooms, a.ooms.unwrap_or(0)),
        ] {
            *sum.get_or_insert(0) += v;
        }
    }
    for p in &known {
        let e = fleet_process(&mut processes, &p.host, p.pid);
        e.name = e.name.take().or_else(|| p.name.clone());
        e.cgroup = p.cgroup.clone();
        e.first_seen_ms = Some(p.first_seen_ms);
        seen(e, p.last_seen_ms);
        e.start_time_ms = e.start_time_ms.or(p.start_time_ms);
        e.has_agent |= p.has_agent;
    }
    for p in processes.values_mut() {
        p.stale = now_ms - p.last_seen_ms.unwrap_or(0) > STALE_MS;
    }
    let host_by_name: HashMap<&str, _> = host_rows.iter().map(|r| (r.host.as_str(), r)).collect();
    let host_info = |h: &str| host_by_name.get(h).copied();
    Ok(api::Fleet {
        now_ms,
        hosts: hosts
            .into_iter()
            .map(|(host, gpus)| {
                let info = host_info(&host);
                api::FleetHost {
                    collector: info.map(|i| i.collector.clone()),
                    last_seen_ms: info.map(|i| i.last_seen_ms),
                    host,
                    gpus,
                }
            })
            .collect(),
        processes: processes.into_values().collect(),
        // Alerts: OOMs and allocation retries the agents reported, newest first.
        alerts: events
            .into_iter()
            .filter(|e| matches!(e.kind.as_str(), "oom" | "alloc_retry"))
            .map(|e| e.into_api())
            .collect(),
        collectors,
    })
}

/// The GPU page: NVML used, and per process NVML used, PyTorch reserved and allocated, and
/// the memory it holds outside PyTorch, all aligned to the window's buckets.
pub async fn gpu_page(live: &Live, uuid: &str, w: &Window) -> sqlx::Result<Option<api::GpuPage>> {
    let Some(gpu) = live.gpu(uuid).await? else {
        return Ok(None);
    };
    let used = live.gpu_used_series(uuid, w).await?;
    #[derive(Default)]
    struct P {
        start: Option<i64>,
        name: Option<String>,
        nvml: Vec<(i64, i64)>,
        reserved: Vec<(i64, i64)>,
        allocated: Vec<(i64, i64)>,
    }
    let mut procs: BTreeMap<i64, P> = Default::default();
    for (pid, b, v, st, name) in live.gpu_process_rows(uuid, w).await? {
        let p = procs.entry(pid).or_default();
        if let Some(v) = v {
            p.nvml.push((b, v));
        }
        p.start = p.start.or(st);
        p.name = p.name.take().or(name);
    }
    for (pid, b, r, a, st) in live.gpu_allocator_rows(uuid, w).await? {
        let p = procs.entry(pid).or_default();
        p.reserved.push((b, r));
        p.allocated.push((b, a));
        p.start = p.start.or(st);
    }
    let processes = procs
        .into_iter()
        .map(|(pid, p)| {
            let nvml = align(w, &p.nvml, FILL_MS);
            let reserved = align(w, &p.reserved, FILL_MS);
            api::GpuPageProcess {
                pid,
                start_time_ms: p.start,
                name: p.name,
                has_agent: !p.reserved.is_empty(),
                outside_pytorch_bytes: outside(&nvml, &reserved),
                nvml_used_bytes: nvml,
                reserved_bytes: reserved,
                allocated_bytes: align(w, &p.allocated, FILL_MS),
            }
        })
        .collect();
    let events = live
        .host_events_between(&gpu.host, w.from_ms, w.to_ms)
        .await?;
    Ok(Some(api::GpuPage {
        gpu: gpu.into_api(),
        window: w.to_api(),
        times_ms: w.times(),
        used_bytes: used,
        processes,
        events: events.into_iter().map(|e| e.into_api()).collect(),
    }))
}

/// The process page: per device, allocator series, per-step figures and the leak signal,
/// NVML's reading of the process on that GPU, and the process's events.
pub async fn process_page(
    live: &Live,
    host: &str,
    pid: i64,
    start: Option<i64>,
    w: &Window,
) -> sqlx::Result<Option<api::ProcessPage>> {
    let start = match start {
        Some(s) => Some(s),
        None => live.latest_process_start(host, pid).await?,
    };
    let rows = live.process_allocator_rows(host, pid, start, w).await?;
    let name = live.process_name(host, pid).await?;
    // Per device: its GPU's UUID and one (bucket, value) series per allocator column.
    type UuidAndColumns = (Option<String>, Vec<Vec<(i64, i64)>>);
    let mut devices: BTreeMap<i64, UuidAndColumns> = Default::default();
    for (device, uuid, b, a, r, ac, isp, rq, rt) in rows {
        let d = devices
            .entry(device)
            .or_insert_with(|| (None, vec![Vec::new(); 6]));
        d.0 = d.0.take().or(uuid);
        for (i, v) in [Some(a), Some(r), ac, isp, rq, rt].into_iter().enumerate() {
            if let Some(v) = v {
                d.1[i].push((b, v));
            }
        }
    }
    let mut out = Vec::new();
    for (device, (uuid, cols)) in devices {
        let nvml = match &uuid {
            Some(u) => align(w, &live.process_nvml_rows(u, host, pid, w).await?, FILL_MS),
            None => vec![None; w.buckets()],
        };
        let steps = live.process_steps(host, pid, start, device).await?;
        let lows: Vec<(i64, i64)> = steps
            .iter()
            .map(|s| (s.step, s.allocated_min_bytes))
            .collect();
        let [
            allocated,
            reserved,
            active,
            inactive_split,
            requested,
            alloc_retries,
        ] = <[Vec<(i64, i64)>; 6]>::try_from(cols).expect("six columns");
        let reserved = align(w, &reserved, FILL_MS);
        out.push(api::DeviceSeries {
            device,
            gpu_uuid: uuid,
            allocated_bytes: align(w, &allocated, FILL_MS),
            outside_pytorch_bytes: outside(&nvml, &reserved),
            reserved_bytes: reserved,
            active_bytes: align(w, &active, FILL_MS),
            inactive_split_bytes: align(w, &inactive_split, FILL_MS),
            requested_bytes: align(w, &requested, FILL_MS),
            alloc_retries: align(w, &alloc_retries, FILL_MS),
            nvml_used_bytes: nvml,
            leak: leak_signal(&lows),
            steps: steps.into_iter().map(|s| s.into_api()).collect(),
        });
    }
    let events = live.process_events(host, pid).await?;
    if out.is_empty()
        && events.is_empty()
        && name.is_none()
        && !live.process_seen(host, pid).await?
    {
        return Ok(None);
    }
    Ok(Some(api::ProcessPage {
        host: host.to_string(),
        pid,
        start_time_ms: start,
        name,
        window: w.to_api(),
        times_ms: w.times(),
        devices: out,
        events: events.into_iter().map(|e| e.into_api()).collect(),
    }))
}

/// A process whose memory held between steps keeps rising on a device: the live leak signal
/// (`leak_signal` over its step low points) says so.
#[derive(Debug, Clone)]
pub struct Growing {
    pub host: String,
    pub pid: i64,
    pub start_time_ms: Option<i64>,
    pub device: i64,
    pub signal: api::LeakSignal,
}

/// The agent processes heard from since `since_ms` (at most `MAX_WATCHED`, the latest first) and,
/// per (host, device), how many of them and which are growing step over step.
pub async fn growing_since(
    live: &Live,
    since_ms: i64,
) -> sqlx::Result<(Vec<(String, i64)>, Vec<Growing>)> {
    /// Processes looked at per call: each costs one query of its steps.
    const MAX_WATCHED: usize = 256;
    let mut agents = live.agents_since(since_ms).await?;
    agents.sort_by_key(|a| std::cmp::Reverse(a.time_ms));
    agents.truncate(MAX_WATCHED);
    let mut watched: Vec<(String, i64)> =
        agents.iter().map(|a| (a.host.clone(), a.device)).collect();
    watched.sort();
    watched.dedup();
    let mut growing = Vec::new();
    for a in agents {
        let steps = live
            .process_steps(&a.host, a.pid, a.start_time_ms, a.device)
            .await?;
        let lows: Vec<(i64, i64)> = steps
            .iter()
            .map(|s| (s.step, s.allocated_min_bytes))
            .collect();
        let signal = leak_signal(&lows);
        if signal.rising {
            growing.push(Growing {
                host: a.host,
                pid: a.pid,
                start_time_ms: a.start_time_ms,
                device: a.device,
                signal,
            });
        }
    }
    Ok((watched, growing))
}
