//! GPU models and their total memory, for when a snapshot does not say how big its device was.
//!
//! A snapshot records what PyTorch reserved and, at an OOM, what the driver had free, but not the
//! device's total memory; without it an OOM caused by memory held outside PyTorch looks like
//! PyTorch's own exhaustion. The OOM analysis uses this table to tell whether what it saw could
//! be a whole GPU, and the dashboard offers it as a picker. Totals are in MiB, each with where it
//! comes from ([`SizeSource`]): read from a real device of the model in this project's GPU runs
//! (`nvidia-smi`/NVML; `snapshot/tests/it/gpus.rs` checks them against those files), else the
//! board's listed size.

const MIB: u64 = 1 << 20;

/// A GPU model people train on, with its total memory as the driver reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GpuModel {
    pub name: &'static str,
    pub total_bytes: u64,
    /// Where the size comes from (the picker says it).
    pub source: SizeSource,
}

/// Where a model's size comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SizeSource {
    /// Read from a real device of that model in this project's GPU runs (the file that holds it).
    Measured(&'static str),
    /// The board's memory as listed, not read from a device here: a real one may report a few
    /// hundred MiB less.
    Listed,
}

impl SizeSource {
    pub fn words(self) -> String {
        match self {
            SizeSource::Measured(file) => format!("measured on a real device ({file})"),
            SizeSource::Listed => {
                "the board's listed memory, not measured here (a real one may report a few hundred MiB less)".into()
            }
        }
    }
}

const fn gpu(name: &'static str, total_mib: u64) -> GpuModel {
    GpuModel {
        name,
        total_bytes: total_mib * MIB,
        source: SizeSource::Listed,
    }
}

const fn measured(name: &'static str, total_mib: u64, file: &'static str) -> GpuModel {
    GpuModel {
        name,
        total_bytes: total_mib * MIB,
        source: SizeSource::Measured(file),
    }
}

/// Smallest first.
pub const KNOWN: &[GpuModel] = &[
    gpu("GeForce RTX 4060 (8 GB)", 8188),
    gpu("GeForce RTX 3080 (10 GB)", 10240),
    gpu("GeForce RTX 3060 (12 GB)", 12288),
    gpu("Tesla T4 (16 GB)", 15360),
    gpu("GeForce RTX 4080 (16 GB)", 16376),
    gpu("Tesla V100 (16 GB)", 16384),
    gpu("A10 / A10G (24 GB)", 23028),
    gpu("L4 (24 GB)", 23034),
    gpu("GeForce RTX 3090 / 4090 (24 GB)", 24576),
    gpu("GeForce RTX 5090 (32 GB)", 32607),
    gpu("Tesla V100 (32 GB)", 32768),
    gpu("A100 (40 GB)", 40960),
    gpu("L40S (48 GB)", 46068),
    gpu("RTX A6000 / RTX 6000 Ada (48 GB)", 49140),
    // nvidia-smi's memory.total on the H100 80GB HBM3 of the live run.
    measured(
        "H100 (80 GB)",
        81559,
        "bench/results-live-h100/nvidia-smi-gpu.csv",
    ),
    gpu("A100 (80 GB)", 81920),
    gpu("H100 NVL (94 GB)", 95830),
    gpu("GH200 (96 GB)", 97871),
    // NVML's total in the H200 recordings (150,754,820,096 bytes).
    measured("H200 (141 GB)", 143771, "tests/fixtures/*.nvml.json"),
    gpu("B200 (180 GB)", 183359),
    gpu("Instinct MI300X (192 GB)", 196592),
];

/// What is left after the CUDA context, cuBLAS/cuDNN workspaces and the like on a full device:
/// a device where PyTorch's reservation plus the driver's free memory comes within this fraction
/// of a model's total could be that model, exhausted by PyTorch.
pub const PLAUSIBLE_FRACTION: f64 = 0.9;

/// The smallest known GPU whose total `seen_bytes` (reserved + driver free) could be most of:
/// `None` when no model fits, i.e. more than a tenth of any GPU that large is unaccounted for.
pub fn plausible_model(seen_bytes: u64) -> Option<GpuModel> {
    KNOWN
        .iter()
        .filter(|g| g.total_bytes >= seen_bytes)
        .min_by_key(|g| g.total_bytes)
        .filter(|g| seen_bytes as f64 >= g.total_bytes as f64 * PLAUSIBLE_FRACTION)
        .copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_80_gb_device_is_plausibly_an_h100() {
        let g = plausible_model(78 << 30).unwrap();
        assert_eq!(g.name, "H100 (80 GB)");
    }

    #[test]
    fn three_gib_seen_is_no_real_gpu() {
        // The case of issue 11: 2.8 GiB reserved and 0.25 GiB free on a 141 GB H200.
        assert_eq!(
            plausible_model((2.8 * (1u64 << 30) as f64) as u64 + (256 << 20)),
            None
        );
        assert_eq!(
            plausible_model(1 << 40),
            None,
            "larger than any GPU we know"
        );
    }

    #[test]
    fn the_table_is_sorted_and_names_are_unique() {
        for w in KNOWN.windows(2) {
            assert!(
                w[0].total_bytes <= w[1].total_bytes,
                "{} before {}",
                w[0].name,
                w[1].name
            );
        }
        let mut names: Vec<_> = KNOWN.iter().map(|g| g.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), KNOWN.len());
    }
}
