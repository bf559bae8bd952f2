//! Issue 36's proof without a GPU: each workload recorded at three small sizes on
//! an H200 (`collectors/harness/memscope_harness/predict.py`), run for real at larger ones, with
//! and without a per-process memory fraction. The request sequence learnt from the recordings is
//! replayed at every size and compared with what really happened: peak reserved bytes, and
//! whether the run raised. The linear baseline (a line through the recordings' own peaks) is
//! printed beside it (`cargo test --release -p snapshot --test it -- predict:: --nocapture`).

use snapshot::analysis::Index;
use snapshot::analysis::whatif::allocator::{Limit, LimitKind};
use snapshot::analysis::whatif::conf::AllocConf;
use snapshot::analysis::whatif::predict::{Recording, learn, learn_near, predict};

const MIB: f64 = 1048576.0;

fn truth(name: &str) -> Option<serde_json::Value> {
    let p = crate::support::fixtures().join(format!("predict/{name}.json"));
    std::fs::read_to_string(p)
        .ok()
        .map(|s| serde_json::from_str(&s).unwrap())
}

/// Recordings at `sizes`, each with its index (the device with the most memory).
fn recordings<'a>(
    snaps: &'a [snapshot::Snapshot],
    indexes: &'a [Index],
    sizes: &[f64],
) -> Vec<Recording<'a>> {
    snaps
        .iter()
        .zip(indexes)
        .zip(sizes)
        .map(|((snap, index), &size)| Recording {
            snap,
            index,
            device: index.default_device().unwrap().device,
            size,
        })
        .collect()
}

/// (workload, recorded sizes, sizes run for real): as the harness's `SIZES`.
const SWEEP: [(&str, [u32; 3], &[u32]); 5] = [
    (
        "transformer_batch",
        [2, 4, 6],
        &[8, 12, 16, 24, 32, 40, 48, 64],
    ),
    (
        "transformer_seq",
        [128, 256, 384],
        &[512, 640, 768, 1024, 1280, 1536, 2048],
    ),
    (
        "convnet_batch",
        [8, 16, 24],
        &[32, 48, 64, 96, 128, 160, 192, 256],
    ),
    (
        "mlp_checkpoint_batch",
        [256, 512, 768],
        &[1024, 1280, 1536, 1792, 2048, 2560, 3072, 4096, 6144, 8192],
    ),
    ("lstm_batch", [4, 8, 12], &[16, 24, 32, 48, 64, 96, 128]),
];

#[test]
fn peaks_and_ooms_at_sizes_never_recorded() {
    let limits: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(crate::support::fixtures().join("predict/limits.json")).unwrap(),
    )
    .unwrap();
    let mut worst = 0.0f64;
    let mut ooms_wrong = Vec::new();
    for (w, recorded, larger) in SWEEP {
        let snaps: Vec<_> = recorded
            .iter()
            .map(|s| crate::support::read(&format!("predict/{w}.{s}.rec.pickle.xz")))
            .collect();
        let indexes: Vec<Index> = snaps.iter().map(Index::new).collect();
        let sizes: Vec<f64> = recorded.iter().map(|&s| s as f64).collect();
        let recs = recordings(&snaps, &indexes, &sizes);
        let model = learn(&recs).unwrap();
        let limit = limits[w].as_u64().map(|bytes| Limit {
            bytes,
            kind: LimitKind::Fraction,
        });
        println!(
            "{w}: {} requests, {} unmatched, {} fit no line; limit {:.0} MiB",
            model.rules.len(),
            model.unmatched(),
            model.without_rule(),
            limit.map_or(0.0, |l| l.bytes as f64 / MIB)
        );
        println!(
            "  {:>6} {:>10} {:>10} {:>7} {:>10} {:>7} | {:>9} {:>9} | {:>9} {:>9}",
            "size",
            "real MiB",
            "predicted",
            "error",
            "linear",
            "error",
            "OOM real",
            "predicted",
            "survived",
            "predicted"
        );
        for &size in recorded.iter().chain(larger) {
            let Some(real) = truth(&format!("{w}.{size}")) else {
                continue;
            };
            let near = learn_near(&recs, size as f64).unwrap();
            let p = predict(&near, size as f64, &AllocConf::default(), None);
            let r = real["peak_reserved_bytes"].as_u64().unwrap() as f64;
            let err = p.peak_reserved_bytes as f64 / r - 1.0;
            let lin = model.linear_peak_reserved(size as f64) as f64;
            let (oom_real, oom_pred, survived_real, survived_pred) =
                match truth(&format!("{w}.{size}.limit")) {
                    Some(l) => {
                        let p = predict(&near, size as f64, &AllocConf::default(), limit);
                        let raised = l["oom"].as_bool().unwrap();
                        // `num_ooms` counts the fatal one too.
                        let survived = l["num_ooms"].as_u64().unwrap() - u64::from(raised);
                        (raised, p.oom, survived, p.survivable_ooms)
                    }
                    None => (false, false, 0, 0),
                };
            if oom_real != oom_pred {
                ooms_wrong.push(format!("{w} {size}"));
            }
            worst = worst.max(err.abs());
            println!(
                "  {size:>6} {:>10.0} {:>10.0} {:>+6.1}% {:>10.0} {:>+6.1}% | {:>9} {:>9} | {:>9} {:>9}",
                r / MIB,
                p.peak_reserved_bytes as f64 / MIB,
                100.0 * err,
                lin / MIB,
                100.0 * (lin / r - 1.0),
                oom_real,
                oom_pred,
                survived_real,
                survived_pred
            );
        }
    }
    println!(
        "worst peak reserved error {:.1}%; OOM calls wrong: {ooms_wrong:?}",
        100.0 * worst
    );
    let (right, calls) = probes();
    // Every OOM call right (the conv net's 192 survives 24 failed cuDNN workspaces under the
    // limit, as predicted). Peaks: 45 of 52 within 5%; held here so they only get better. Misses:
    // cuDNN choosing an algorithm with less workspace at some batches (the conv net's 64, 96,
    // 192: +11%), the LSTM's 16 (a reduction's staging buffer not needed there, +13%), the
    // MLP's 1536 and 8192 (-7.6%, -5.9%), the transformer's 2048 tokens (+5.8%).
    assert!(worst <= 0.14, "worst error {:.1}%", 100.0 * worst);
    assert!(ooms_wrong.is_empty(), "{ooms_wrong:?}");
    // The probes: 8 of 14 right, the non-monotonic case among them (1024 raises, 2048 fits,
    // 2560 raises: predicted and real). Wrong: 1280-1792 under both limits, which really raise.
    // At those batches a reduction (the biases' gradients) needs a staging buffer (48 of 24 MiB
    // at 1536, in a recording made there) that no recording at 256-768 shows.
    assert!(right >= 8, "{right} of {calls}");
}

/// The checkpointed MLP under further limits (the harness's PROBES), chosen where the replay
/// predicts a size that runs out below one that fits: OOM predicted against real, per size.
fn probes() -> (usize, usize) {
    let w = "mlp_checkpoint_batch";
    let snaps: Vec<_> = [256, 512, 768]
        .iter()
        .map(|s| crate::support::read(&format!("predict/{w}.{s}.rec.pickle.xz")))
        .collect();
    let indexes: Vec<Index> = snaps.iter().map(Index::new).collect();
    let recs = recordings(&snaps, &indexes, &[256.0, 512.0, 768.0]);
    let (mut right, mut calls) = (0, 0);
    for mib in [1052u64, 1064] {
        let limit = Some(Limit {
            bytes: mib << 20,
            kind: LimitKind::Fraction,
        });
        let mut line = format!("{w} under {mib} MiB (size: real/predicted):");
        for size in [1024u32, 1280, 1536, 1792, 2048, 2560, 3072] {
            let real = truth(&format!("{w}.{size}.limit{mib}")).unwrap();
            let model = learn_near(&recs, size as f64).unwrap();
            let p = predict(&model, size as f64, &AllocConf::default(), limit);
            let raised = real["oom"].as_bool().unwrap();
            calls += 1;
            right += usize::from(raised == p.oom);
            let word = |oom: bool| if oom { "OOM" } else { "fits" };
            line += &format!(" {size}: {}/{}", word(raised), word(p.oom));
        }
        println!("{line}");
    }
    println!("probes: {right} of {calls} OOM calls right");
    (right, calls)
}

/// Someone else's model (`tests/fixtures/wild/cs336_*`: a 2.7B TransformerLM, batch 4, on their
/// GPU): context 512 predicted from their recordings at 128 and 256, against their own
/// recording at 512. Not independent ground truth (their script ran the three lengths in one
/// process, so each trace starts with the cache the last one left), but a test of what the
/// sweep above cannot show: history turned on after the model was built (the parameters are
/// live before the trace), the script edited between recordings (its line numbers moved), and
/// attention scores that grow as the square of the context.
#[test]
fn a_context_sweep_of_someone_elses_model() {
    for mode in ["fwd", "fwd_mixed", "fullstep"] {
        let snaps: Vec<_> = [128, 256, 512]
            .iter()
            .map(|c| crate::support::read(&format!("wild/cs336_ctx{c}_{mode}.pickle.xz")))
            .collect();
        let indexes: Vec<Index> = snaps.iter().map(Index::new).collect();
        let recs = recordings(&snaps[..2], &indexes, &[128.0, 256.0]);
        let model = learn(&recs).unwrap();
        let p = predict(&model, 512.0, &AllocConf::default(), None);
        let real = indexes[2].default_device().unwrap();
        let (allocated, reserved) = (real.peak_live_bytes as f64, real.peak_reserved() as f64);
        let err_a = p.peak_allocated_bytes as f64 / allocated - 1.0;
        let err_r = p.peak_reserved_bytes as f64 / reserved - 1.0;
        println!(
            "{mode} at 512: allocated {:.2} GiB ({:+.2}%), reserved {:.2} GiB ({:+.2}%), linear {:+.1}%",
            p.peak_allocated_bytes as f64 / (1u64 << 30) as f64,
            100.0 * err_a,
            p.peak_reserved_bytes as f64 / (1u64 << 30) as f64,
            100.0 * err_r,
            100.0 * (model.linear_peak_reserved(512.0) as f64 / reserved - 1.0)
        );
        assert!(
            err_a.abs() < 0.01,
            "{mode}: allocated {:+.2}%",
            100.0 * err_a
        );
        assert!(
            err_r.abs() < 0.01,
            "{mode}: reserved {:+.2}%",
            100.0 * err_r
        );
    }
}
