//! A planted live scenario with exact figures, shared by the live API tests and the browser test:
//! 120 one-second readings of GPU `GPU-aaa` on host `gpu7`. Process 100 (python, with the agent)
//! holds 512 MiB beyond its allocator's reserved memory and keeps 1 MiB more every step; process
//! 200 (no agent) holds 300 MiB; the agent reports one OOM with snapshot `abc123` at the end.

pub const MIB: u64 = 1 << 20;
pub const GIB: u64 = 1 << 30;

/// One NVML reading of GPU `uuid` at `time_ms`: `used_bytes` in use, 1 GiB free of 2 GiB.
pub fn gpu(uuid: &str, time_ms: i64, used_bytes: u64) -> wire::GpuSample {
    wire::GpuSample {
        time_ms,
        uuid: uuid.into(),
        index: 0,
        name: None,
        memory_used_bytes: Some(used_bytes),
        memory_free_bytes: Some(GIB),
        memory_total_bytes: Some(2 * GIB),
        memory_reserved_bytes: None,
        gpu_util_percent: None,
        mem_util_percent: None,
        temperature_c: None,
        power_mw: None,
    }
}

pub fn batch(collector: &str, seq: u64) -> wire::Batch {
    wire::Batch::new(collector, seq, "gpu7")
}

pub fn alloc(time_ms: i64, step: u64, allocated: u64, reserved: u64) -> wire::AllocatorSample {
    wire::AllocatorSample {
        time_ms,
        pid: 100,
        start_time_ms: Some(42),
        device: 0,
        gpu_uuid: Some("GPU-aaa".into()),
        step: Some(step),
        allocated_bytes: allocated,
        reserved_bytes: reserved,
        active_bytes: Some(allocated),
        inactive_split_bytes: Some(0),
        requested_bytes: Some(allocated),
        alloc_retries: Some(0),
        ooms: Some(0),
        segments: Some(3),
        largest_free_block_bytes: Some(64 * MIB),
    }
}

/// Where a test's scenario starts: ten minutes before `now_ms`, on a minute, and moved ten
/// minutes earlier where its three minutes would cross a UTC midnight. A roll-up packs the days
/// before its cut's day, so a scenario that straddled midnight would find its first minute packed
/// away (a CI run at 00:09 UTC failed that way).
pub fn start_ms(now_ms: i64) -> i64 {
    const DAY_MS: i64 = 86_400_000;
    let t0 = (now_ms - 600_000).div_euclid(60_000) * 60_000;
    if t0.div_euclid(DAY_MS) == (t0 + 180_000).div_euclid(DAY_MS) {
        t0
    } else {
        t0 - 600_000
    }
}

/// 120 one-second readings from `t0`: the collector's NVML batch and the agent's batch.
pub fn scenario(t0: i64) -> (wire::Batch, wire::Batch) {
    let mut nvml = batch("gpu7", 1);
    let mut agent = batch("gpu7/gpu7:100:42", 1);
    for i in 0..120u64 {
        let t = t0 + i as i64 * 1000;
        let reserved = 2 * GIB + (i / 10) * 20 * MIB;
        let allocated = GIB + i * MIB; // 1 MiB more survives every step
        let p100 = reserved + 512 * MIB; // CUDA context etc.
        let p200 = 300 * MIB;
        nvml.gpus.push(wire::GpuSample {
            time_ms: t,
            uuid: "GPU-aaa".into(),
            index: 0,
            name: Some("NVIDIA H200".into()),
            memory_used_bytes: Some(p100 + p200),
            memory_free_bytes: Some(80 * GIB - p100 - p200),
            memory_total_bytes: Some(80 * GIB),
            memory_reserved_bytes: Some(0),
            gpu_util_percent: Some(90),
            mem_util_percent: Some(40),
            temperature_c: Some(50),
            power_mw: Some(500_000),
        });
        for (pid, used) in [(100, p100), (200, p200)] {
            nvml.processes.push(wire::ProcessSample {
                time_ms: t,
                gpu_uuid: "GPU-aaa".into(),
                pid,
                start_time_ms: Some(42),
                name: Some(if pid == 100 { "python" } else { "other" }.into()),
                cgroup: None,
                used_bytes: used,
            });
        }
        agent.allocator.push(alloc(t, i, allocated, reserved));
    }
    agent.events.push(wire::Event {
        time_ms: t0 + 119_000,
        kind: "oom".into(),
        pid: Some(100),
        device: Some(0),
        message: "out of memory on device 0: requested 25165824 bytes".into(),
        snapshot_id: Some("abc123".into()),
    });
    (nvml, agent)
}
