//! The harness's fixtures (snapshots planted on a real GPU, with their truth) checked on a machine
//! without a GPU: a real server, the snapshots uploaded with their scenario's tags, and the
//! harness's own verifier (`python3 -m memscope_harness --fixtures`) asking the server whether it
//! finds what was planted. Live checks are skipped there; every snapshot check must pass.

use std::path::PathBuf;
use std::process::Command;

use crate::support::{scratch, start_server};

#[test]
fn the_analyses_find_what_the_harness_planted() {
    let (base, port) = scratch("harness-fixtures");
    let server = start_server(&base.join("lib"), port);
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = Command::new("python3")
        .args(["-m", "memscope_harness", "--server"])
        .arg(format!("http://127.0.0.1:{port}"))
        .arg("--fixtures")
        .arg(root.join("tests/fixtures/harness"))
        .current_dir(root.join("collectors/harness"))
        .output()
        .expect("python3 runs");
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    println!("{text}");
    assert!(out.status.success(), "{text}");
    // Every scenario was checked, and every snapshot check passed.
    for scenario in [
        "steady",
        "leak_list",
        "leak_graph",
        "fragmentation",
        "oom_fragmentation",
        "expandable_segments",
        "side_stream",
        "outside_pytorch",
        "cuda_graph",
        "ranks.rank0",
        "ranks.rank1",
        "ranks.run",
    ] {
        assert!(
            text.lines()
                .any(|l| l.starts_with(&format!("| {scenario} ")) && l.contains("| pass ")),
            "no passing check for {scenario}:\n{text}"
        );
    }
    assert!(!text.contains("| FAIL"), "{text}");
    let summary = text.lines().find(|l| l.contains(" checks: ")).unwrap();
    assert!(summary.contains(" 0 failed"), "{summary}");
    server.stop();
}

#[test]
fn the_verifier_fails_when_the_truth_is_not_found() {
    // The same fixtures with two planted facts moved: the verifier must say FAIL and exit 1.
    let (base, port) = scratch("harness-wrong-truth");
    let server = start_server(&base.join("lib"), port);
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let dir = base.join("fixtures");
    std::fs::create_dir_all(&dir).unwrap();
    for name in ["leak_list", "side_stream"] {
        for ext in ["pickle", "truth.json"] {
            std::fs::copy(
                root.join(format!("tests/fixtures/harness/{name}.{ext}")),
                dir.join(format!("{name}.{ext}")),
            )
            .unwrap();
        }
    }
    let edit = |name: &str, from: &str, to: &str| {
        let p = dir.join(format!("{name}.truth.json"));
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(text.contains(from), "{text}");
        std::fs::write(&p, text.replacen(from, to, 1)).unwrap();
    };
    edit("leak_list", "\"line\": ", "\"line\": 1");
    edit(
        "side_stream",
        "\"pending_free_bytes\": 67108864",
        "\"pending_free_bytes\": 1",
    );
    let out = Command::new("python3")
        .args(["-m", "memscope_harness", "--server"])
        .arg(format!("http://127.0.0.1:{port}"))
        .arg("--fixtures")
        .arg(&dir)
        .current_dir(root.join("collectors/harness"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(out.status.code(), Some(1), "{text}");
    let fails: Vec<&str> = text.lines().filter(|l| l.contains("| FAIL")).collect();
    assert_eq!(fails.len(), 2, "{text}");
    assert!(
        fails[0].contains("top leak suspect") && fails[1].contains("pending-free"),
        "{text}"
    );
    server.stop();
}
