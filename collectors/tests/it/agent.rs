//! The Python agent end to end, on a machine without a GPU: `memscope_agent` (against the
//! stand-in torch in collectors/python/tests/fake_torch) in a real `python3` process, the
//! collector relaying its files (NVML readings recorded, naming that process), and a real server.
//! Checks that agent samples are joined with NVML's reading of the same process, that the leak
//! the script plants shows up as the live leak signal, that an OOM uploads a snapshot the server
//! can open, that the agent can also send straight to the server, and that a collector without
//! NVML says so and still relays.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::support::{scratch, start_server};
use collectors::collector::{self, Config};
use collectors::relay::Relay;
use collectors::source::Recorded;
use collectors::{sender::Sender, spool::Spool};

const FAKE_UUID: &str = "GPU-0a1b2c3d-0000-1111-2222-333344440000";

fn python_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("python")
}

/// A training loop (on the stand-in torch) that keeps 1 MiB more every step, then hits an OOM.
const SCRIPT: &str = r#"
import sys, time
import torch, memscope_agent
memscope_agent.start(interval_s=0.05, segments_interval_s=0.2)
for i in range(40):
    memscope_agent.step(i)
    torch.cuda.fake.allocated[0] += 1 << 20
    time.sleep(0.05)
torch.cuda.fake.fire_oom(requested=24 << 20)
torch.cuda.fake.fire_oom(requested=24 << 20)
memscope_agent.stop()
print("done", flush=True)
"#;

fn spawn_agent(envs: &[(&str, String)]) -> Child {
    let py = python_dir();
    let mut cmd = Command::new("python3");
    cmd.arg("-c")
        .arg(SCRIPT)
        .env(
            "PYTHONPATH",
            format!("{}:{}", py.join("tests/fake_torch").display(), py.display()),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd.spawn().expect("python3 runs")
}

fn wait_ok(child: Child) -> String {
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success() && text.contains("done"), "{text}");
    text
}

fn api(port: u16, path: &str) -> serde_json::Value {
    let mut resp = ureq::get(&format!("http://127.0.0.1:{port}{path}"))
        .call()
        .unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&resp.body_mut().read_to_string().unwrap()).unwrap()
}

/// NVML readings that name `pid` on the stand-in's GPU: 1.5 GiB, i.e. 512 MiB beyond the 1 GiB
/// the stand-in allocator reserves.
fn recording(dir: &Path, pid: u32) -> PathBuf {
    let r = serde_json::json!([{
        "t": 0, "uuid": FAKE_UUID, "used": 2u64 << 30, "free": 78u64 << 30, "total": 80u64 << 30,
        "gpu_util": 50, "mem_util": 10, "power_mw": 300000, "temp_c": 40,
        "procs": [{"pid": pid, "used": 1536u64 << 20}]
    }]);
    let path = dir.join("nvml.json");
    std::fs::write(&path, r.to_string()).unwrap();
    path
}

#[test]
fn relayed_agent_data_is_joined_with_nvml_and_its_leak_and_oom_are_found() {
    let (base, port) = scratch("agent-relay");
    let server = start_server(&base.join("lib"), port);
    let url = format!("http://127.0.0.1:{port}");
    let agent_dir = base.join("agents");
    let child = spawn_agent(&[
        ("MEMSCOPE_AGENT_DIR", agent_dir.display().to_string()),
        ("MEMSCOPE_SERVER", url.clone()),
        ("MEMSCOPE_JOB", "llama".into()),
        ("MEMSCOPE_SNAPSHOT_DIR", base.display().to_string()),
    ]);
    let pid = child.id();
    std::fs::create_dir_all(&base).unwrap();
    let src = Recorded::open(&recording(&base, pid)).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let collecting = {
        let (stop, spool_dir, agent_dir, url) = (
            stop.clone(),
            base.join("spool"),
            agent_dir.clone(),
            url.clone(),
        );
        std::thread::spawn(move || {
            collector::run(
                Config {
                    name: "c1".into(),
                    host: "c1".into(),
                    interval: Duration::from_millis(50),
                    readings_per_batch: 4,
                    relay: Some(Relay::new(&agent_dir)),
                },
                Box::new(src),
                Spool::open(&spool_dir, 64 << 20),
                Sender::new(&url, "t1-0123456789abcdef"),
                None,
                stop,
            )
        })
    };
    wait_ok(child);
    std::thread::sleep(Duration::from_millis(300)); // one more flush picks up the last files
    stop.store(true, Ordering::Relaxed);
    collecting.join().unwrap().unwrap();
    assert_eq!(
        std::fs::read_dir(&agent_dir).unwrap().count(),
        0,
        "every agent file relayed and deleted"
    );

    let page = api(
        port,
        &format!("/api/live/processes/c1/{pid}?minutes=5&points=300"),
    );
    let d = &page["devices"][0];
    assert_eq!(d["gpu_uuid"], FAKE_UUID);
    let steps = d["steps"].as_array().unwrap();
    assert!(steps.len() >= 20, "{} steps", steps.len());
    assert_eq!(d["leak"]["rising"], true, "{}", d["leak"]);
    let slope = d["leak"]["bytes_per_step"].as_f64().unwrap();
    assert!(
        (slope - (1u64 << 20) as f64).abs() < 0.2 * (1u64 << 20) as f64,
        "{slope}"
    );
    // Joined with NVML's reading of the same pid: 1.5 GiB used, 1 GiB reserved → 512 MiB outside.
    let outside: Vec<u64> = d["outside_pytorch"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v.as_u64())
        .collect();
    assert!(
        !outside.is_empty() && outside.iter().all(|&v| v == 512 << 20),
        "{outside:?}"
    );
    // One OOM incident (the observer fired twice), its snapshot uploaded and tagged.
    let ooms: Vec<_> = page["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "oom")
        .collect();
    assert_eq!(ooms.len(), 1, "{}", page["events"]);
    let id = ooms[0]["snapshot_id"].as_str().unwrap();
    let snap = api(port, &format!("/api/snapshots/{id}/info"));
    let tags = snap["tags"].to_string();
    assert!(tags.contains("llama") && tags.contains("oom"), "{tags}");
    // The fleet page lists the GPU with this process on top.
    let fleet = api(port, "/api/live/fleet");
    assert_eq!(fleet["hosts"][0]["gpus"][0]["top_process"]["pid"], pid);
    assert_eq!(fleet["alerts"][0]["kind"], "oom");
    server.stop();
}

#[test]
fn the_agent_can_send_straight_to_the_server_under_its_collectors_token() {
    let (base, port) = scratch("agent-direct");
    let server = start_server(&base.join("lib"), port);
    let child = spawn_agent(&[
        ("MEMSCOPE_SERVER", format!("http://127.0.0.1:{port}")),
        ("MEMSCOPE_TOKEN", "t1-0123456789abcdef".into()),
        ("MEMSCOPE_NAME", "c1".into()),
        ("MEMSCOPE_SNAPSHOT_DIR", base.display().to_string()),
    ]);
    let pid = child.id();
    wait_ok(child);
    let fleet = api(port, "/api/live/fleet");
    let p = fleet["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pid"] == pid)
        .unwrap_or_else(|| panic!("{fleet}"))
        .clone();
    assert_eq!(p["has_agent"], true);
    assert_eq!(p["step"], 39);
    let host = p["host"].as_str().unwrap();
    let page = api(port, &format!("/api/live/processes/{host}/{pid}?minutes=5"));
    assert_eq!(page["devices"][0]["leak"]["rising"], true);
    server.stop();
}

#[test]
fn a_collector_without_nvml_says_so_and_still_relays() {
    let (base, port) = scratch("agent-nonvml");
    let server = start_server(&base.join("lib"), port);
    let agent_dir = base.join("agents");
    std::fs::create_dir_all(&agent_dir).unwrap();
    let file = serde_json::json!({
        "version": 1, "pid": 4242, "start_time_ms": 7,
        "allocator": [{"time_ms": collectors::collector::now_ms(), "pid": 4242, "start_time_ms": 7, "device": 0,
                       "allocated_bytes": 1024, "reserved_bytes": 2048}],
        "events": []
    });
    std::fs::write(agent_dir.join("4242-7-000000001.json"), file.to_string()).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_memscope-collector"))
        .args([
            "--server",
            &format!("http://127.0.0.1:{port}"),
            "--token",
            "t1-0123456789abcdef",
        ])
        .args(["--name", "c1", "--readings", "2", "--interval-ms", "20"])
        .arg("--agent-dir")
        .arg(&agent_dir)
        .arg("--spool-dir")
        .arg(base.join("spool"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let has_nvml = !stderr.contains("NVML");
    if !has_nvml {
        // This machine has no NVIDIA driver: one clear line, then relaying only.
        let line = stderr.lines().next().unwrap();
        assert!(
            line.contains("no NVML on this machine") && line.contains("relaying agent data"),
            "{stderr}"
        );
    }
    let counts = server.rt.block_on(async {
        let lib = server::testing::open_live(&base.join("lib")).await.unwrap();
        lib.live_counts().await.unwrap()
    });
    assert_eq!(counts[2], 1, "the agent sample was relayed: {counts:?}");
    assert_eq!(std::fs::read_dir(&agent_dir).unwrap().count(), 0);
    // The host is on the fleet page even without GPU readings, and so is the agent's process.
    let fleet = api(port, "/api/live/fleet");
    let hosts = fleet["hosts"].as_array().unwrap();
    assert_eq!(hosts.len(), 1, "{fleet}");
    assert_eq!(hosts[0]["collector"], "c1");
    if !has_nvml {
        assert_eq!(hosts[0]["gpus"].as_array().unwrap().len(), 0);
    }
    let p = fleet["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pid"] == 4242)
        .cloned()
        .unwrap_or_else(|| panic!("{fleet}"));
    assert_eq!(p["has_agent"], true);
    server.stop();
}
