//! `memscope analyze` end to end: the real binary on real fixtures, JSON keys the issue promises,
//! the human report, and errors on stderr with a non-zero exit code.

use std::process::{Command, Output};

use crate::support::app::fixture_path as fixture;

fn memscope(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_memscope"))
        .args(args)
        .output()
        .unwrap()
}

fn analyze_json(name: &str) -> serde_json::Value {
    let out = memscope(&["analyze", "--json", fixture(name).to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn json_has_the_promised_keys_and_values() {
    let v = analyze_json("leak_detached_cache.pickle");
    for key in [
        "segments",
        "blocks",
        "reserved_bytes",
        "allocated_bytes",
        "requested_bytes",
        "block_states",
        "devices",
        "leak_suspects",
        "ooms",
    ] {
        assert!(v.get(key).is_some(), "missing {key}");
    }
    // The same object the API answers.
    let r: api::Report = serde_json::from_value(v).unwrap();
    assert_eq!(r.segments, 11);
    assert_eq!(r.reserved_bytes, 236_978_176);
    assert_eq!(r.devices[&0].entries, 4936);
    assert_eq!(r.devices[&0].actions[&api::TraceAction::Alloc], 1689);
    let top = &r.leak_suspects[0];
    assert!(top.bytes > 0 && top.count == 60);
    assert!(
        top.frames
            .iter()
            .any(|f| f.filename.ends_with("gen_snapshots.py") && f.line == 126)
    );
}

#[test]
fn json_oom_report() {
    let r: api::Report = serde_json::from_value(analyze_json("oom_fraction.pickle")).unwrap();
    let ooms = &r.ooms;
    assert_eq!(ooms.len(), 1);
    assert_eq!(ooms[0].device, 0);
    assert_eq!(ooms[0].requested_bytes, 25_165_824);
    assert_eq!(ooms[0].device_free_bytes, Some(143_561_719_808));
    // A list grows until the limit: growth, fatal, named by its line.
    assert_eq!(ooms[0].verdict, api::Verdict::Growth);
    assert!(!ooms[0].recovered);
    assert_eq!(ooms[0].recovery, api::Recovery::Fatal);
    let growth = ooms[0].growth.as_ref().expect("the growing line");
    assert_eq!(growth.site.as_ref().map(|f| f.line), Some(181));
    assert_eq!(r.oom_incidents.len(), 1);
    assert!(
        r.oom_outcome
            .as_deref()
            .is_some_and(|o| o.starts_with("Died of an OOM"))
    );
}

/// Two ranks of one job on an H200 (tests/fixtures/verdicts/rank_growth.rank{0,1}): rank 1 keeps
/// 256 MiB every step from step 3 until its 4 GiB limit; rank 0 trains to the end. The run names
/// rank 1, the verdict growth, the line that grew and how, as the rank's own truth file says.
#[test]
fn a_run_names_the_rank_that_died_and_the_line_that_grew() {
    let (a, b) = (
        fixture("verdicts/rank_growth.rank0.pickle.xz"),
        fixture("verdicts/rank_growth.rank1.pickle.xz"),
    );
    let truth: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixture("verdicts/rank_growth.rank1.json")).unwrap(),
    )
    .unwrap();
    let out = memscope(&[
        "analyze",
        "--json",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let failed = &run["failed"];
    assert_eq!(failed["rank"], 1);
    assert_eq!(failed["oom"]["verdict"], "growth");
    assert_eq!(
        failed["oom"]["growth"]["site"]["line"],
        truth["expect"]["leak_line"]
    );
    assert_eq!(failed["oom"]["step"], truth["raised"]["step"]);
    assert!(
        failed["oom"]["growth"]["pattern"]
            .as_str()
            .unwrap()
            .starts_with(truth["expect"]["pattern"].as_str().unwrap()),
        "{}",
        failed["oom"]["growth"]
    );
    let text = memscope(&["analyze", a.to_str().unwrap(), b.to_str().unwrap()]);
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(
        text.contains("OUT OF MEMORY: rank 1 ran out first")
            && text.contains("(growth)")
            && text.contains("verdicts.py:277"),
        "{text}"
    );
}

#[test]
fn human_report_reads_well() {
    let out = memscope(&["analyze", fixture("oom_fraction.pickle").to_str().unwrap()]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("reserved      5.6 GiB"), "{text}");
    assert!(
        text.contains("Leak suspects") && text.contains("gen_snapshots.py:181"),
        "{text}"
    );
    assert!(
        text.contains("requested 24.0 MiB")
            && text.contains("[FATAL] growth")
            && text.contains("verdict: growth"),
        "{text}"
    );
}

#[test]
fn compressed_input_and_stdin() {
    let r: api::Report = serde_json::from_value(analyze_json("big_python.pickle.xz")).unwrap();
    assert_eq!(r.devices[&0].entries, 250_021);
    let out = Command::new(env!("CARGO_BIN_EXE_memscope"))
        .args(["analyze", "--json", "-"])
        .stdin(std::fs::File::open(fixture("multistream.pickle")).unwrap())
        .output()
        .unwrap();
    assert!(out.status.success());
    let r: api::Report = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r.block_states[&api::BlockState::ActivePendingFree], 1);
}

#[test]
fn errors_go_to_stderr_with_nonzero_exit() {
    let dir = std::env::temp_dir().join(format!("memscope-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let evil = dir.join("evil.pickle");
    std::fs::write(
        &evil,
        b"\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00\x8c\x02os\x8c\x06system\x93.",
    )
    .unwrap();
    let out = memscope(&["analyze", evil.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(out.stdout.is_empty());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("not a memory snapshot: pickle opcode STACK_GLOBAL at offset 23"),
        "{err}"
    );
    let out = memscope(&["analyze", dir.join("missing.pickle").to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8(out.stderr)
            .unwrap()
            .contains("cannot open")
    );
}

#[test]
fn diff_of_two_runs_names_the_new_leak() {
    let (a, b) = (
        fixture("harness/steady.pickle"),
        fixture("harness/leak_list.pickle"),
    );
    let out = memscope(&["diff", a.to_str().unwrap(), b.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let leak_line = text
        .lines()
        .find(|l| l.contains("new in B"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(leak_line.contains("scenarios.py:103"), "{text}");
    assert!(
        text.contains("leak suspects") && text.contains("+236.0 MiB"),
        "{text}"
    );

    let out = memscope(&["diff", "--json", b.to_str().unwrap(), a.to_str().unwrap()]);
    assert!(out.status.success());
    let d: api::Diff = serde_json::from_slice(&out.stdout).unwrap();
    let gone = &d.leaks[0];
    assert_eq!(gone.site.as_ref().map(|f| f.line), Some(103));
    assert!(gone.b_bytes.is_none(), "gone in B: {gone:?}");

    // A snapshot without a trace is compared by its state at the snapshot, and says so.
    let out = memscope(&[
        "diff",
        a.to_str().unwrap(),
        fixture("segments_only.pickle").to_str().unwrap(),
    ]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("B has no trace: compared by its state at the snapshot"),
        "{text}"
    );
    assert!(
        text.contains("peak reserved bytes") && text.contains("214.0 MiB"),
        "{text}"
    );

    // Devices chosen: cuda:1 of the two-device variant is leak_detached_cache itself.
    let two = fixture("variants/two_devices.pickle");
    let leak = fixture("leak_detached_cache.pickle");
    let out = memscope(&[
        "diff",
        "--json",
        "--device-b",
        "1",
        leak.to_str().unwrap(),
        two.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let d: api::Diff = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(d.device_b, 1);
    assert!(d.sites_at_peak.is_empty(), "{d:?}");
    let out = memscope(&[
        "diff",
        "--device-a",
        "3",
        two.to_str().unwrap(),
        leak.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("nothing on device 3 (devices with a trace or segments: 0, 1)"),
        "{err}"
    );
}

/// A folder of per-rank snapshots (torchtitan's `iteration_N/rank{r}_memory_snapshot.pickle`
/// layout) is one run: ranks from the names, the failing rank first, the imbalance's line.
#[test]
fn a_folder_of_ranks_is_analysed_as_one_run() {
    let dir = std::env::temp_dir()
        .join(format!("memscope-cli-run-{}", std::process::id()))
        .join("iteration_4");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for (from, to) in [
        ("harness/ranks.rank0.pickle", "rank0_memory_snapshot.pickle"),
        (
            "harness/ranks.rank1.oom.pickle",
            "rank1_memory_snapshot.pickle",
        ),
    ] {
        std::fs::copy(fixture(from), dir.join(to)).unwrap();
    }
    std::fs::write(dir.join("notes.txt"), "not a snapshot").unwrap();

    let out = memscope(&["analyze", "--json", dir.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run: api::RunReport = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(run.id, "iteration_4");
    assert_eq!(run.ranks.iter().map(|r| r.rank).collect::<Vec<_>>(), [1, 0]);
    let failed = run.failed.as_ref().unwrap();
    assert_eq!(failed.rank, 1);
    let imb = run.imbalance.as_ref().unwrap();
    assert_eq!(imb.sites[0].delta_bytes, 2 << 30);

    let out = memscope(&["analyze", dir.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("rank 1 ran out first"), "{text}");
    assert!(text.contains("ranks from the file names"), "{text}");
    assert!(text.contains("scenarios.py:301"), "{text}");

    // Several files are the run of the folder they share.
    let out = memscope(&[
        "analyze",
        "--json",
        fixture("harness/ranks.rank0.pickle").to_str().unwrap(),
        fixture("harness/ranks.rank1.oom.pickle").to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run: api::RunReport = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(run.failed.unwrap().rank, 1);

    let empty = dir.parent().unwrap().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let out = memscope(&["analyze", empty.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("has no snapshot files"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(dir.parent().unwrap());
}

/// Issue 35: `memscope categories FILE --at EVENT --json` lists every live allocation with its
/// category, rule and confidence, and the totals; the human form gives the bytes per category
/// and why the largest allocations are what they are; `analyze` gives the bytes per category at
/// the peak. Read on a real recording whose truth says what was alive after the last forward.
#[test]
fn categories_at_an_event_list_every_live_allocation_and_the_totals() {
    let file = fixture("categories/gpt_bf16_adamw.python.pickle.xz");
    let truth: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixture("categories/gpt_bf16_adamw.python.json")).unwrap(),
    )
    .unwrap();
    let moment = &truth["moments"][3];
    assert_eq!(moment["name"], "step3.after_forward");
    let at = moment["position"].as_u64().unwrap().to_string();
    let out = memscope(&["categories", file.to_str().unwrap(), "--at", &at, "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["position"].as_u64().unwrap().to_string(), at);
    let all = v["allocations"].as_array().unwrap();
    assert_eq!(all.len() as u64, v["count"].as_u64().unwrap());
    let sum: u64 = all.iter().map(|a| a["size"].as_u64().unwrap()).sum();
    let totals = v["totals"].as_object().unwrap();
    assert_eq!(totals.len(), 9);
    assert_eq!(
        sum,
        totals.values().map(|b| b.as_u64().unwrap()).sum::<u64>()
    );
    // Every parameter the process named at that moment is labelled one, with its rule.
    let by_address: std::collections::HashMap<u64, &serde_json::Value> = all
        .iter()
        .map(|a| (a["address"].as_u64().unwrap(), a))
        .collect();
    for (category, want) in [("parameter", "parameter"), ("activation", "activation")] {
        for st in moment["truth"][category].as_array().unwrap() {
            let a = by_address[&st[0].as_u64().unwrap()];
            assert_eq!(a["category"], want, "{a}");
            assert!(a["rule"].is_string() && a["confidence"].is_string(), "{a}");
        }
    }
    let text = memscope(&[
        "categories",
        file.to_str().unwrap(),
        "--at",
        &at,
        "--top",
        "3",
    ]);
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(
        text.contains("activations") && text.contains("optimizer state"),
        "{text}"
    );
    assert!(text.contains("why: made in a forward pass"), "{text}");
    let bad = memscope(&[
        "categories",
        file.to_str().unwrap(),
        "--category",
        "weights",
    ]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("one of parameter, gradient"));
    let past = memscope(&["categories", file.to_str().unwrap(), "--at", "99999999"]);
    assert!(String::from_utf8_lossy(&past.stderr).contains("past the trace's end"));
    let report = analyze_json("categories/gpt_bf16_adamw.python.pickle.xz");
    let c = &report["devices"]["0"]["categories"];
    assert_eq!(c["source"], "threads");
    assert_eq!(c["backward_passes"], 4);
    assert!(
        c["at_peak"]["optimizer_state"].as_u64().unwrap() > 200 << 20,
        "{c}"
    );
}

/// `memscope predict` from the sweep's recordings of `workload` at `recorded` sizes, at `sizes`
/// under a per-process fraction of `limit` bytes: the JSON answer (`--json`) or the text.
fn predict_under_fraction(
    workload: &str,
    recorded: &[u32],
    sizes: &[u32],
    limit: u64,
    json: bool,
) -> Output {
    let dir = fixture("predict");
    let mut args: Vec<String> = vec!["predict".into()];
    for s in recorded {
        let file = dir.join(format!("{workload}.{s}.rec.pickle.xz"));
        args.push(format!("{}={s}", file.display()));
    }
    for s in sizes {
        args.extend(["--size".into(), s.to_string()]);
    }
    args.extend(["--limit-bytes".into(), limit.to_string()]);
    args.extend(["--limit-kind".into(), "fraction".into()]);
    if json {
        args.push("--json".into());
    }
    let out = memscope(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Issue 36: survivable OOMs are counted and gone past, as the real run did.
#[test]
fn predict_counts_the_cudnn_workspaces_a_run_survives() {
    // The conv net at batch 192 under its fraction really survived 24 failed requests (cuDNN
    // tried other plans) and finished; a replay that raised on the first would call it an OOM.
    let real: serde_json::Value = serde_json::from_slice(
        &std::fs::read(fixture("predict/convnet_batch.192.limit.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(real["oom"], false);
    let limit = real["limit_bytes"].as_u64().unwrap();
    let out = predict_under_fraction("convnet_batch", &[8, 16, 24], &[192], limit, true);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let s = &v["sizes"][0];
    assert_eq!(s["oom"], false, "{v}");
    assert!(s["survivable_ooms"].as_u64().unwrap() >= 1, "{v}");
    // Said where: cuDNN's workspaces whose sizes follow no line, at a convolution's backward
    // (no Python frame there: named in Python's words, not by the C++ node).
    let u = &v["unmodelled"][0];
    assert_eq!(u["why"], "no_rule", "{v}");
    assert!(u["requests"].as_u64().unwrap() >= 1);
    assert_eq!(
        u["site"]["name"], "(backward of convolution, no Python frame)",
        "{u}"
    );
    let text = predict_under_fraction("convnet_batch", &[8, 16, 24], &[192], limit, false);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("survived"), "{text}");
    assert!(text.contains("What grows"), "{text}");
}

/// Issue 36 : `memscope predict A=SIZE B=SIZE C=SIZE --size N --json` answers with
/// the fields the issue names, from the will-it-fit sweep's recordings; each size's peak against
/// what the run really reserved at that size on the H200, and whether it raised under the sweep's
/// memory fraction.
#[test]
fn predict_answers_each_size_with_the_promised_fields() {
    let dir = fixture("predict");
    let limits: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("limits.json")).unwrap()).unwrap();
    let limit = limits["mlp_checkpoint_batch"].as_u64().unwrap();
    let out = predict_under_fraction(
        "mlp_checkpoint_batch",
        &[256, 512, 768],
        &[2048, 8192],
        limit,
        true,
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for key in ["sizes", "largest_fitting_size", "method"] {
        assert!(v.get(key).is_some(), "missing {key}: {v}");
    }
    let sizes = v["sizes"].as_array().unwrap();
    assert_eq!(sizes.len(), 2);
    for s in sizes {
        for key in [
            "size",
            "peak_allocated_bytes",
            "peak_reserved_bytes",
            "oom",
            "survivable_ooms",
            "first_oom_step",
            "headroom_bytes",
            "error_bytes",
        ] {
            assert!(s.get(key).is_some(), "missing {key}: {s}");
        }
        let size = s["size"].as_u64().unwrap();
        let real: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(dir.join(format!("mlp_checkpoint_batch.{size}.json")))
                .unwrap(),
        )
        .unwrap();
        let limited: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(dir.join(format!("mlp_checkpoint_batch.{size}.limit.json")))
                .unwrap(),
        )
        .unwrap();
        assert_eq!(s["oom"], limited["oom"], "{size}: {s}");
        if s["oom"] == true {
            // Its peak is the peak up to the request that failed: not the unlimited run's.
            continue;
        }
        let (p, r) = (
            s["peak_reserved_bytes"].as_f64().unwrap(),
            real["peak_reserved_bytes"].as_f64().unwrap(),
        );
        assert!(
            (p / r - 1.0).abs() < 0.07,
            "{size}: predicted {p}, real {r}"
        );
    }
    assert_eq!(v["largest_fitting_size"], 2048);
    let bad = memscope(&["predict", "a.pickle", "b.pickle=2"]);
    assert!(String::from_utf8_lossy(&bad.stderr).contains("FILE=SIZE"));
}

/// Issue 36: a folder of one program's recordings, the sizes read from the names; a folder of
/// several programs is refused with what to do instead.
#[test]
fn predict_takes_a_folder_whose_names_say_the_sizes() {
    let dir = std::env::temp_dir().join(format!("memscope-predict-dir-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for s in [256, 512, 768] {
        let name = format!("mlp_checkpoint_batch.{s}.rec.pickle.xz");
        std::fs::copy(fixture(&format!("predict/{name}")), dir.join(&name)).unwrap();
    }
    let out = memscope(&["predict", dir.to_str().unwrap(), "--size", "2048", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let sizes: Vec<u64> = v["recorded"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["size"].as_u64().unwrap())
        .collect();
    assert_eq!(sizes, vec![256, 512, 768]);
    std::fs::copy(
        fixture("predict/lstm_batch.4.rec.pickle.xz"),
        dir.join("lstm_batch.4.rec.pickle.xz"),
    )
    .unwrap();
    let out = memscope(&["predict", dir.to_str().unwrap(), "--size", "2048"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("FILE=SIZE"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
