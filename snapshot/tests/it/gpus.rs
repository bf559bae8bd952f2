//! The GPU sizes said to be measured are the sizes the recorded files hold: the H100's from the
//! live run's `nvidia-smi` CSV, the H200's from the fixtures' NVML readings.

use snapshot::gpus::{KNOWN, SizeSource};

fn root() -> std::path::PathBuf {
    crate::support::fixtures().join("../..")
}

const MIB: u64 = 1 << 20;

fn model(name: &str) -> &'static snapshot::gpus::GpuModel {
    KNOWN.iter().find(|g| g.name == name).unwrap()
}

#[test]
fn measured_sizes_are_the_recorded_devices() {
    // H100: `memory.total [MiB]` in the live run's nvidia-smi CSV.
    let csv =
        std::fs::read_to_string(root().join("bench/results-live-h100/nvidia-smi-gpu.csv")).unwrap();
    let row = csv.lines().nth(1).unwrap();
    assert!(row.contains("H100"), "{row}");
    let total_mib: u64 = row
        .split(',')
        .nth(3)
        .unwrap()
        .trim()
        .trim_end_matches(" MiB")
        .parse()
        .unwrap();
    let h100 = model("H100 (80 GB)");
    assert_eq!(h100.total_bytes, total_mib * MIB);
    assert!(matches!(h100.source, SizeSource::Measured(f) if f.contains("nvidia-smi-gpu.csv")));

    // H200: NVML's `total` in every fixture's readings.
    let h200 = model("H200 (141 GB)");
    let mut seen = 0;
    for entry in std::fs::read_dir(root().join("tests/fixtures")).unwrap() {
        let path = entry.unwrap().path();
        if !path.to_string_lossy().ends_with(".nvml.json") {
            continue;
        }
        let readings: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        for r in readings.as_array().unwrap() {
            assert_eq!(
                r["total"].as_u64(),
                Some(h200.total_bytes),
                "{}",
                path.display()
            );
            seen += 1;
        }
    }
    assert!(seen > 100, "{seen} readings");
    // Every other model says its size is listed, not measured.
    let measured = KNOWN
        .iter()
        .filter(|g| matches!(g.source, SizeSource::Measured(_)))
        .count();
    assert_eq!(measured, 2);
}
