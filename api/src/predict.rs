//! Will it fit (`memscope predict --json`): a run's peak memory at sizes never recorded (a larger
//! batch, a longer sequence), predicted from two or three recordings at small sizes by replaying
//! the synthesized requests through the allocator model, with the linear baseline beside it.

use serde::{Deserialize, Serialize};

/// One size's prediction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PredictedSize {
    pub size: u64,
    pub peak_allocated_bytes: u64,
    pub peak_reserved_bytes: u64,
    /// The run would raise `OutOfMemoryError` under the limit.
    pub oom: bool,
    /// Requests that would fail and be recovered from: cuDNN's workspace for a convolution plan
    /// (another plan is tried). Seen only in recordings with C++ frames; PyTorch's own
    /// `num_ooms` also counts each plan cuDNN tries after the first failure.
    pub survivable_ooms: u32,
    /// The step the run would die in, where the recordings show steps.
    pub first_oom_step: Option<u32>,
    /// The limit less the peak reserved bytes (negative: over it); none without a limit.
    pub headroom_bytes: Option<i64>,
    /// The error expected: the worst relative error of predicting each recording from the
    /// others, times this peak (none with two recordings).
    pub error_bytes: Option<u64>,
    /// A straight line through the recordings' own peak reserved bytes: the baseline.
    pub linear_peak_reserved_bytes: u64,
}

/// A recording the prediction learnt from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedSize {
    pub size: u64,
    pub peak_reserved_bytes: u64,
}

/// `GET /api/predict` query: the recordings as `ID:SIZE` pairs, comma-separated, and what to ask.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PredictQuery {
    /// `id:size,id:size[,id:size]`: library snapshots of one program and the size (batch,
    /// sequence length) each was recorded at.
    pub recordings: String,
    /// Sizes to predict, comma-separated (none: search the largest that fits the limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sizes: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_bytes: Option<u64>,
    /// What `limit_bytes` is (default: `device`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_kind: Option<crate::LimitKind>,
    /// A GPU whose total memory is the limit ("H100").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alloc_conf: Option<String>,
    /// With sizes and a limit: also search for the largest size that fits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub search: Option<bool>,
}

/// Why a request's size at another size is a guess.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UnmodelledWhy {
    /// Its sizes follow no line: grown as between the two largest recordings.
    NoRule,
    /// Not made in every recording (a kernel that needs scratch only from some size on): kept at
    /// its size in the largest.
    OnlyHere,
}

impl UnmodelledWhy {
    pub fn words(self) -> &'static str {
        match self {
            UnmodelledWhy::NoRule => {
                "sizes follow no line (grown as between the two largest recordings)"
            }
            UnmodelledWhy::OnlyHere => {
                "not made in every recording (kept at its size in the largest)"
            }
        }
    }
}

/// A call site whose requests could not be modelled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UnmodelledSite {
    pub site: Option<crate::Frame>,
    pub stack: crate::StackId,
    pub why: UnmodelledWhy,
    pub requests: u64,
    /// Their bytes in the largest recording.
    pub bytes: u64,
}

/// How one category grows with the size: its bytes at each recording's peak, fitted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CategoryGrowth {
    pub category: crate::Category,
    /// Bytes more per unit of size (a line through the recordings).
    pub bytes_per_unit: f64,
    /// The category's bytes at the largest recording's peak.
    pub at_largest_bytes: u64,
}

/// `memscope predict --json`, `GET /api/predict`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PredictAnswer {
    pub sizes: Vec<PredictedSize>,
    /// The largest size that fits (searched when no size was asked).
    pub largest_fitting_size: Option<u64>,
    /// How: "replay" (the synthesized requests through the allocator model).
    pub method: String,
    pub alloc_conf: String,
    pub limit_bytes: Option<u64>,
    pub recorded: Vec<RecordedSize>,
    /// Requests in the synthesized run, those not matched in every recording (kept at the
    /// largest recording's size) and those whose size follows no line.
    pub requests: u64,
    pub unmatched_requests: u64,
    pub requests_without_rule: u64,
    /// The worst relative error of predicting each recording from the others.
    pub expected_error: Option<f64>,
    /// What grows with the size, the fastest first (categories that do not grow left out).
    pub growth: Vec<CategoryGrowth>,
    /// The call sites whose requests could not be modelled (at most 10, the most bytes first).
    pub unmodelled: Vec<UnmodelledSite>,
}
