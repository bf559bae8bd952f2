//! The Prometheus alerting rules (deploy/prometheus/memscope.rules.yml) against memscope's own
//! /metrics: a live server is fed recorded GPU runs (the agent's `memory_stats` of a leaking
//! training loop, step by step, and the OOM the oom_fraction run died of, with the NVML readings
//! of those runs), plus a GPU planted at 97% and a host that stops reporting; /metrics is
//! scraped after each stretch, and the scrapes, one a minute, are what `promtool test rules`
//! replays: each rule must fire where the data says it should, with its annotations rendered,
//! and not before. Needs Debian's `prometheus` package (./scripts/test installs it).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use crate::support::scenario::{GIB, MIB};
use crate::support::*;

const TOKEN_B: &str = "e2e-collector-token-gpu8-456";

/// POSTs a batch with a collector token; asserts it is stored.
async fn send(base: &str, token: &str, batch: &wire::Batch) {
    let url = format!("{base}/api/ingest");
    let body = serde_json::to_vec(batch).unwrap();
    let token = token.to_string();
    let status = tokio::task::spawn_blocking(move || {
        ureq::post(&url)
            .header("authorization", &format!("Bearer {token}"))
            .header("content-type", "application/json")
            .send(&body[..])
            .map(|r| r.status().as_u16())
            .unwrap_or_else(|e| panic!("ingest: {e}"))
    })
    .await
    .unwrap();
    assert_eq!(status, 200);
}

/// One scrape: `name{labels}` → value, the `memscope_` series only.
fn parse_exposition(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| l.starts_with("memscope_"))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series.to_string(), value.parse().ok()?))
        })
        .collect()
}

/// The recorded `torch.cuda.memory_stats()` of a run, one per iteration.
fn stats(name: &str) -> Vec<serde_json::Value> {
    serde_json::from_str(
        &std::fs::read_to_string(root().join("tests/fixtures").join(name)).unwrap(),
    )
    .unwrap()
}

fn agent_sample(pid: u32, time_ms: i64, step: u64, s: &serde_json::Value) -> wire::AllocatorSample {
    let n = |k: &str| s[k].as_u64().unwrap_or(0);
    wire::AllocatorSample {
        time_ms,
        pid,
        start_time_ms: Some(1),
        device: 0,
        gpu_uuid: Some("GPU-rec".into()),
        step: Some(step),
        allocated_bytes: n("allocated_bytes.all.current"),
        reserved_bytes: n("reserved_bytes.all.current"),
        active_bytes: Some(n("active_bytes.all.current")),
        inactive_split_bytes: Some(n("inactive_split_bytes.all.current")),
        requested_bytes: Some(n("requested_bytes.all.current")),
        alloc_retries: Some(n("num_alloc_retries")),
        ooms: Some(n("num_ooms")),
        segments: None,
        largest_free_block_bytes: None,
    }
}

fn gpu(uuid: &str, index: u32, time_ms: i64, used: u64, total: u64) -> wire::GpuSample {
    let mut g = crate::support::scenario::gpu(uuid, time_ms, used);
    g.index = index;
    g.memory_total_bytes = Some(total);
    g.memory_free_bytes = Some(total.saturating_sub(used));
    g
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_alert_rules_fire_on_replayed_gpu_runs() {
    let dir = std::env::temp_dir().join(format!("memscope-alerts-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let base = start_server_with(&dir.join("data"), |a| {
        a.collector_tokens.push(format!("gpu8={TOKEN_B}"));
    })
    .await;
    let leak = stats("leak_detached_cache.stats.json"); // 60 iterations, 2 MiB kept each
    let oom = stats("oom_fraction.stats.json");
    let nvml: Vec<serde_json::Value> = serde_json::from_str(
        &std::fs::read_to_string(root().join("tests/fixtures/leak_detached_cache.nvml.json"))
            .unwrap(),
    )
    .unwrap();
    let truth: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("tests/fixtures/oom_fraction.truth.json")).unwrap(),
    )
    .unwrap();

    const SCRAPES: usize = 20;
    let mut seq = 0;
    let mut scrapes = Vec::new();
    for k in 0..SCRAPES {
        let now = server::now_ms();
        seq += 1;
        let mut b = wire::Batch::new("gpu7", seq, "gpu7");
        // Three recorded iterations of the leaking loop per stretch, as the agent sends them.
        for (j, s) in leak.iter().enumerate().skip(3 * k).take(3) {
            b.allocator
                .push(agent_sample(100, now - 3 + (j - 3 * k) as i64, j as u64, s));
        }
        // The run that died of an OOM: its iterations over the first stretches, then its OOM
        // as its observer reported it (the recording's own figures).
        let per = oom.len().div_ceil(6);
        for (j, s) in oom.iter().enumerate().skip(per * k).take(per) {
            b.allocator.push(agent_sample(200, now - 2, j as u64, s));
        }
        // A process that survives two OOMs at minute 10 (planted: the allocator's own count,
        // as `memory_stats()["num_ooms"]` gives it after a caught OOM).
        let mut survivor = agent_sample(300, now - 2, k as u64, &leak[0]);
        survivor.device = 1;
        survivor.gpu_uuid = Some("GPU-full".into());
        survivor.ooms = Some(if k >= 10 { 2 } else { 0 });
        b.allocator.push(survivor);
        if k == 6 {
            let o = &truth["oom_observer"];
            b.events.push(wire::Event {
                time_ms: now - 1,
                kind: "oom".into(),
                pid: Some(200),
                device: Some(0),
                message: format!(
                    "out of memory: tried to allocate {} with {} free",
                    o["alloc"], o["device_free"]
                ),
                snapshot_id: None,
            });
        }
        // The recorded NVML reading of the leaking run's GPU, and a GPU planted at 97% from the
        // third stretch (2 GiB until then).
        let r = &nvml[(k * 4).min(nvml.len() - 1)];
        b.gpus.push(gpu(
            "GPU-rec",
            0,
            now - 1,
            r["used"].as_u64().unwrap(),
            r["total"].as_u64().unwrap(),
        ));
        let full_used = if k >= 2 {
            97 * 800 * MIB / 100
        } else {
            2 * GIB
        };
        b.gpus
            .push(gpu("GPU-full", 1, now - 1, full_used, 800 * MIB));
        send(&base, COLLECTOR_TOKEN, &b).await;
        // A second host reports for the first three stretches, then falls silent.
        if k < 3 {
            let mut b = wire::Batch::new("gpu8", k as u64 + 1, "gpu8");
            b.gpus.push(gpu("GPU-b", 0, now - 1, 10 * GIB, 80 * GIB));
            send(&base, TOKEN_B, &b).await;
        }
        let (status, text) = get(&base, "/metrics").await;
        assert_eq!(status, 200);
        scrapes.push(parse_exposition(&text));
        // Reports land on distinct milliseconds.
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let last = scrapes.last().unwrap();
    assert_eq!(
        last["memscope_processes_growing{host=\"gpu7\",device=\"0\"}"], 1.0,
        "the leaking loop is seen growing: {last:?}"
    );
    let per_step = last["memscope_growth_bytes_per_step{host=\"gpu7\",device=\"0\"}"];
    assert!(
        (per_step - 2.0 * MIB as f64).abs() < 0.05 * MIB as f64,
        "2 MiB kept a step (the recording's truth): {per_step}"
    );

    // The scrapes as promtool's input series, one a minute. Every series gets a value at every
    // minute it was exposed ('_' where not).
    let mut names: Vec<&String> = scrapes.iter().flat_map(|s| s.keys()).collect();
    names.sort();
    names.dedup();
    let mut series = String::new();
    for name in names {
        let values: Vec<String> = scrapes
            .iter()
            .map(|s| s.get(name).map_or("_".to_string(), |v| format!("{v}")))
            .collect();
        series.push_str(&format!(
            "      - series: '{name}'\n        values: '{}'\n",
            values.join(" ")
        ));
    }
    let rules = root().join("deploy/prometheus/memscope.rules.yml");
    let gpu_full = "{host: gpu7, gpu: GPU-full, index: \"1\", severity: warning}";
    let test = format!(
        "rule_files: ['{}']\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:\n{series}\
         \x20   alert_rule_test:\n{}",
        rules.display(),
        [
            // Nothing has fired at the start.
            ("2m", "GpuMemoryNearLimit", String::new()),
            ("1m", "ProcessMemoryGrowing", String::new()),
            ("5m", "OutOfMemoryReported", String::new()),
            ("6m", "CollectorSilent", String::new()),
            // The planted GPU: over 95% from minute 2, for 5 minutes.
            ("8m", "GpuMemoryNearLimit", format!(
                "          - exp_labels: {gpu_full}\n            exp_annotations:\n              summary: \"GPU 1 on gpu7 is 97% full\"\n              description: \"GPU GPU-full on gpu7 has had more than 95% of its memory in use for 5 minutes: the next allocation spike may run out of memory. Its page in the memscope dashboard (Live) shows which processes hold it.\"\n"
            )),
            // The recorded OOM, reported at minute 6.
            ("7m", "OutOfMemoryReported", "          - exp_labels: {kind: oom, severity: critical}\n            exp_annotations:\n              summary: \"An out-of-memory error was reported to memscope\"\n              description: \"1 OOM events reached memscope in the last 10 minutes. The Live page lists them with their snapshots.\"\n".to_string()),
            ("9m", "PyTorchOutOfMemory", String::new()),
            ("11m", "PyTorchOutOfMemory", "          - exp_labels: {host: gpu7, device: \"1\", severity: critical}\n            exp_annotations:\n              summary: \"Out of memory on gpu7 cuda:1\"\n              description: \"PyTorch's allocator raised 2 out-of-memory errors in the last 10 minutes on gpu7, device 1. The agent uploads a snapshot on OOM: its verdict (growth, fragmentation, exhaustion, a limit) is in the memscope library.\"\n".to_string()),
            // The leaking loop: growing from its 8th step (minute 3), for 10 minutes.
            ("19m", "ProcessMemoryGrowing", "          - exp_labels: {host: gpu7, device: \"0\", severity: warning}\n            exp_annotations:\n              summary: \"A process on gpu7 cuda:0 keeps more memory every step\"\n              description: \"1 process(es) on gpu7, device 0, have held more memory between steps step over step for 10 minutes (a leak: tensors kept across steps). The fastest grows by 2MiB a step.\"\n".to_string()),
            // gpu8 reported until minute 2: its last report unchanged for 5 minutes, then 1 more.
            ("9m", "CollectorSilent", "          - exp_labels: {host: gpu8, severity: warning}\n            exp_annotations:\n              summary: \"No reading from gpu8 for 5 minutes\"\n              description: \"memscope has heard nothing from host gpu8 for over 5 minutes: its collector stopped, cannot reach the server, or the host is down. Its spool keeps what it read meanwhile.\"\n".to_string()),
        ]
        .iter()
        .map(|(t, name, alerts)| {
            let exp = if alerts.is_empty() { "        exp_alerts: []\n".to_string() } else { format!("        exp_alerts:\n{alerts}") };
            format!("      - eval_time: {t}\n        alertname: {name}\n{exp}")
        })
        .collect::<String>()
    );
    let file = dir.join("memscope.test.yml");
    std::fs::write(&file, &test).unwrap();
    promtool(&["check", "rules"], &rules);
    promtool(&["test", "rules"], &file);
}

/// Runs `promtool ARGS FILE`; panics with its output unless it succeeds.
pub fn promtool(args: &[&str], file: &Path) {
    let out = Command::new("promtool")
        .args(args)
        .arg(file)
        .output()
        .expect("promtool not found: install Debian's prometheus package (./scripts/test does)");
    assert!(
        out.status.success(),
        "promtool {args:?} {}:\n{}{}",
        file.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The Grafana dashboard (deploy/grafana/memscope.json) against a real Prometheus scraping a
/// live `memscope serve`: every panel's query, with the dashboard's variables given (`$host`
/// all hosts, `$__rate_interval` 1m), answers without error and with series; the alerting rules,
/// loaded into the same Prometheus, evaluate healthily.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_dashboard_query_answers_from_a_real_prometheus() {
    let dir = std::env::temp_dir().join(format!("memscope-grafana-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let base = start_server(&dir.join("data")).await;
    let leak = stats("leak_detached_cache.stats.json");
    // Two stretches of readings, so counters have two points to take a rate from.
    for k in 0..2u64 {
        let now = server::now_ms();
        let mut b = wire::Batch::new("gpu7", k + 1, "gpu7");
        for i in 0..30 {
            let step = k * 30 + i;
            b.allocator.push(agent_sample(
                100,
                now - 30 + i as i64,
                step,
                &leak[step as usize],
            ));
        }
        b.gpus.push(gpu("GPU-rec", 0, now - 1, 40 * GIB, 80 * GIB));
        if k == 1 {
            b.events.push(wire::Event {
                time_ms: now,
                kind: "oom".into(),
                pid: Some(100),
                device: Some(0),
                message: "out of memory".into(),
                snapshot_id: None,
            });
        }
        send(&base, COLLECTOR_TOKEN, &b).await;
        tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    }

    let port = free_port();
    let target = base.trim_start_matches("http://");
    let rules = root().join("deploy/prometheus/memscope.rules.yml");
    std::fs::write(
        dir.join("prometheus.yml"),
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files: ['{}']\nscrape_configs:\n  - job_name: memscope\n    static_configs:\n      - targets: ['{target}']\n",
            rules.display()
        ),
    )
    .unwrap();
    let _prometheus = Driver(
        Command::new("prometheus")
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("tsdb").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect(
                "prometheus not found: install Debian's prometheus package (./scripts/test does)",
            ),
    );
    let prom = format!("http://127.0.0.1:{port}");
    let query = |expr: String| {
        let prom = prom.clone();
        async move {
            tokio::task::spawn_blocking(move || {
                let mut r = ureq::get(&format!("{prom}/api/v1/query"))
                    .query("query", &expr)
                    .call()
                    .ok()?;
                serde_json::from_str::<serde_json::Value>(&r.body_mut().read_to_string().ok()?).ok()
            })
            .await
            .unwrap()
        }
    };
    // Until Prometheus has scraped memscope a few times.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let up = query("count_over_time(up{job=\"memscope\"}[1m])".into()).await;
        let scrapes = up
            .as_ref()
            .and_then(|v| {
                v["data"]["result"][0]["value"][1]
                    .as_str()
                    .map(String::from)
            })
            .and_then(|s| s.parse::<f64>().ok())
            .unwrap_or(0.0);
        if scrapes >= 4.0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "prometheus did not scrape memscope: {up:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }

    let dashboard: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("deploy/grafana/memscope.json")).unwrap(),
    )
    .unwrap();
    let panels = dashboard["panels"].as_array().unwrap();
    let mut ids: Vec<i64> = panels.iter().map(|p| p["id"].as_i64().unwrap()).collect();
    ids.dedup();
    assert_eq!(ids.len(), panels.len(), "panel ids are unique");
    let mut checked = 0;
    for p in panels {
        assert_eq!(p["datasource"]["uid"], "${datasource}", "{}", p["title"]);
        for t in p["targets"].as_array().unwrap() {
            let expr = t["expr"]
                .as_str()
                .unwrap()
                .replace("$host", ".*")
                .replace("$__rate_interval", "1m");
            let answer = query(expr.clone()).await.expect("prometheus answers");
            assert_eq!(answer["status"], "success", "{expr}: {answer}");
            let n = answer["data"]["result"].as_array().map_or(0, Vec::len);
            assert!(n > 0, "{} / {expr}: no series", p["title"]);
            checked += 1;
        }
    }
    assert!(checked >= 15, "{checked} queries");
    // The host variable's own query lists the host.
    let hosts = query("group by (host) (memscope_collector_last_seen_timestamp_seconds)".into())
        .await
        .unwrap();
    assert_eq!(hosts["data"]["result"][0]["metric"]["host"], "gpu7");
    // Every alerting rule evaluated against the real exposition without error.
    let rules_state = tokio::task::spawn_blocking({
        let prom = prom.clone();
        move || {
            let mut r = ureq::get(&format!("{prom}/api/v1/rules")).call().unwrap();
            serde_json::from_str::<serde_json::Value>(&r.body_mut().read_to_string().unwrap())
                .unwrap()
        }
    })
    .await
    .unwrap();
    let rules: Vec<&serde_json::Value> = rules_state["data"]["groups"][0]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .collect();
    assert_eq!(rules.len(), 5);
    for r in rules {
        assert_eq!(r["health"], "ok", "{r}");
    }
}
