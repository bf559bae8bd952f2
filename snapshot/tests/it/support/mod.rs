//! Helpers shared by the engine's integration tests: where fixtures live and how to load them.
#![allow(dead_code)]

use std::path::PathBuf;

#[path = "../../../../server/tests/it/support/hostile.rs"]
pub mod hostile;

/// Every real fixture and the derived variants that tests round-trip or compare.
pub const REAL_AND_VARIANTS: [&str; 13] = [
    "leak_detached_cache.pickle",
    "steady_train.pickle",
    "fragmentation.pickle",
    "oom_fraction.pickle",
    "multistream.pickle",
    "segments_only.pickle",
    "big_python.pickle.xz",
    "variants/multistream.proto0.pickle",
    "variants/multistream.proto2.pickle",
    "variants/multistream.proto5.pickle",
    "variants/legacy_2_0.pickle",
    "variants/big_ints.pickle",
    // OOM entries (with `device_free`) read by the general machine among fast-path rows: their
    // sparse fields must follow the rows when the table is put back in list order.
    "harness/outside_pytorch.oom.pickle",
];

/// A small xorshift generator: the mutation tests' inputs are reproducible from the seed.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

pub fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures")
}

/// Every snapshot of the fixture folders (GPU runs, harness, format variants, the wild files),
/// by name under `tests/fixtures`, sorted.
pub fn all_fixtures() -> Vec<String> {
    let mut files = Vec::new();
    for dir in [
        "",
        "harness",
        "variants",
        "categories",
        "pending",
        "peaks",
        "verdicts",
        "whatif",
        "wild",
    ] {
        let Ok(entries) = std::fs::read_dir(fixtures().join(dir)) else {
            continue;
        };
        for e in entries {
            let name = e.unwrap().file_name().into_string().unwrap();
            if name.contains(".pickle") {
                files.push(if dir.is_empty() {
                    name
                } else {
                    format!("{dir}/{name}")
                });
            }
        }
    }
    files.sort();
    files
}

/// Every node of a flame tree, the root first (breadth first).
pub fn flame_nodes(
    n: &snapshot::analysis::stacks::FlameNode,
) -> Vec<&snapshot::analysis::stacks::FlameNode> {
    let mut out = vec![n];
    let mut i = 0;
    while i < out.len() {
        let n = out[i];
        out.extend(n.children.iter());
        i += 1;
    }
    out
}

pub fn fixture(name: &str) -> PathBuf {
    fixtures().join(name)
}

pub fn read(name: &str) -> snapshot::Snapshot {
    let path = fixture(name);
    let f = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    snapshot::read(f).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

pub fn analyze(
    name: &str,
) -> (
    snapshot::Snapshot,
    snapshot::analysis::Index,
    snapshot::analysis::Report,
) {
    let snap = read(name);
    let (index, report) = snapshot::analysis::analyze(&snap, &Default::default());
    (snap, index, report)
}

/// The figures `figures.json` holds (Python's own unpickler), in the shape our report has them.
pub fn reference_figures(scenario: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(fixture(&format!("{scenario}.figures.json"))).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v.as_object_mut().unwrap().remove("python_pickle_load_s");
    v
}

/// Our report's figures, restricted to the keys the reference has.
pub fn our_figures(
    report: &snapshot::analysis::Report,
    reference: &serde_json::Value,
) -> serde_json::Value {
    let ours = serde_json::to_value(report).unwrap();
    restrict(&ours, reference)
}

fn restrict(ours: &serde_json::Value, reference: &serde_json::Value) -> serde_json::Value {
    match (ours, reference) {
        (serde_json::Value::Object(o), serde_json::Value::Object(r)) => {
            let mut out = serde_json::Map::new();
            for (k, rv) in r {
                let ov = o.get(k).cloned().unwrap_or(serde_json::Value::Null);
                out.insert(
                    k.clone(),
                    if rv.is_object() {
                        restrict(&ov, rv)
                    } else {
                        ov
                    },
                );
            }
            serde_json::Value::Object(out)
        }
        (o, _) => o.clone(),
    }
}

/// A fixture's bytes as a plain pickle (`x.pickle.xz` is read from its plain twin `x.pickle`).
#[allow(dead_code)]
pub fn decompressed(path: &std::path::Path) -> Vec<u8> {
    let plain = match path.to_str().and_then(|p| p.strip_suffix(".xz")) {
        Some(p) => PathBuf::from(p),
        None => path.to_path_buf(),
    };
    std::fs::read(&plain).unwrap_or_else(|e| panic!("{}: {e}", plain.display()))
}

/// The real GPU runs of a fixture folder (`whatif`, `verdicts`): (file stem, the figures and truth
/// the run wrote), by name; `limits*.json` left out.
pub fn real_runs(folder: &str) -> Vec<(String, serde_json::Value)> {
    let mut out: Vec<(String, serde_json::Value)> = std::fs::read_dir(fixtures().join(folder))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.extension().is_some_and(|e| e == "json")
                && !p
                    .file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with("limits")
        })
        .map(|p| {
            let stem = p.file_stem().unwrap().to_string_lossy().to_string();
            let v = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
            (stem, v)
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}
