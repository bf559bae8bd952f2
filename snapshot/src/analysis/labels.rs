//! The labels memory-by-category gives a device's allocations ([`super::categories`] finds
//! them): the closed sets (category, rule, confidence, where the phases came from) and the
//! per-device table. Apart from the classifier so the index can keep the table with its derived
//! views without importing the classifier that reads the index.

use serde::Serialize;

/// What an allocation is in the model's terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
#[repr(u8)]
pub enum Category {
    Parameter,
    Gradient,
    OptimizerState,
    Activation,
    Input,
    Temporary,
    AutogradDetail,
    CudaGraph,
    Unknown,
}

impl Category {
    pub const ALL: [Category; 9] = [
        Category::Parameter,
        Category::Gradient,
        Category::OptimizerState,
        Category::Activation,
        Category::Input,
        Category::Temporary,
        Category::AutogradDetail,
        Category::CudaGraph,
        Category::Unknown,
    ];

    /// The JSON name (`optimizer_state`).
    pub fn as_str(self) -> &'static str {
        match self {
            Category::Parameter => "parameter",
            Category::Gradient => "gradient",
            Category::OptimizerState => "optimizer_state",
            Category::Activation => "activation",
            Category::Input => "input",
            Category::Temporary => "temporary",
            Category::AutogradDetail => "autograd_detail",
            Category::CudaGraph => "cuda_graph",
            Category::Unknown => "unknown",
        }
    }

    pub fn parse(s: &str) -> Option<Category> {
        Category::ALL.into_iter().find(|c| c.as_str() == s)
    }
}

/// The rule that labelled an allocation (a closed set: each says its evidence).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[repr(u8)]
pub enum Rule {
    /// Its segment belongs to a private pool (CUDA graph capture or a `MemPool`).
    PrivatePool,
    /// Made before the first forward pass (or before the trace) and alive throughout.
    KeptFromBeforeTraining,
    /// Made before the trace, alive throughout: one of more same-size blocks than there are
    /// gradients of that size, so parameters and optimizer state split by address.
    SplitByGradientCount,
    /// Made in an optimizer step and kept after it.
    KeptFromOptimizerStep,
    /// Made after a backward pass and before the next forward pass, kept throughout, outside any
    /// annotated optimizer step.
    KeptFromAfterBackward,
    /// Made between steps, outside the optimizer steps the trace shows, and kept through two or
    /// more steps (a list the program appends to).
    KeptBetweenSteps,
    /// Made in a backward pass, kept into the optimizer step, the size of a parameter.
    KeptFromBackward,
    /// Made by DistributedDataParallel's reducer for its gradient buckets, and kept.
    GradientBucket,
    /// Made in a forward pass, freed in the backward pass after it.
    SavedForBackward,
    /// Made in a backward pass by the forward's code: activation checkpointing's recompute.
    Recomputed,
    /// Made in a forward pass, alive past the backward pass (an output the program held).
    HeldPastBackward,
    /// Made in a forward pass with no backward pass after it in the trace, alive at its end.
    AliveAfterForward,
    /// Made before the forward pass and used through the backward pass.
    LoadedBeforeForward,
    /// Made and freed within one phase.
    FreedInPhase,
    /// Made and freed within a backward pass (gradients of activations, scratch).
    BackwardScratch,
    /// Made in a backward pass and kept, but no parameter has its size (a library workspace).
    KeptFromBackwardNoParameter,
    /// Made in a backward pass before the last and kept for good while gradients are freed
    /// every step (the autograd thread's cuBLAS workspace).
    KeptFromBackwardForGood,
    /// Made during a forward pass and kept throughout (a library workspace, a lazy buffer).
    KeptFromForward,
    /// Made before the trace and freed in it: what it was is lost with its start.
    BeforeTrace,
    /// The trace shows no training phases (no steps, no backward pass) to read it against.
    NoPhases,
}

/// How sure a label is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[repr(u8)]
pub enum Confidence {
    Low,
    Medium,
    High,
}

/// One allocation's label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Label {
    pub category: Category,
    pub rule: Rule,
    pub confidence: Confidence,
}

impl Label {
    pub(crate) fn new(category: Category, rule: Rule, confidence: Confidence) -> Label {
        Label {
            category,
            rule,
            confidence,
        }
    }
}

/// Where the phases came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PhaseSource {
    /// Backward passes from the autograd thread's stacks.
    Threads,
    /// Backward passes inferred from lifetimes between annotated optimizer steps (no frames).
    Lifetimes,
    /// No backward pass found: forward-only, inference, or no evidence.
    None,
}

/// The phases of a device's trace, as event ranges `[start, end)`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Phases {
    pub backward: Vec<(u32, u32)>,
    pub optimizer: Vec<(u32, u32)>,
    /// Where each main-thread stretch's forward pass starts (one per stretch: before the first
    /// backward pass, between two, after the last), or `u32::MAX` where it has none.
    pub forward_starts: Vec<u32>,
}

/// Every allocation of a device labelled.
#[derive(Clone, Debug)]
pub struct Categories {
    /// By allocation id.
    pub labels: Vec<Label>,
    pub phases: Phases,
    pub source: PhaseSource,
}

impl Categories {
    pub fn label(&self, id: u32) -> Label {
        self.labels[id as usize]
    }
}
