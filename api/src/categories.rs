//! Memory by category: what each live allocation is in the model's terms (a parameter, a
//! gradient, optimizer state, an activation, an input, a temporary, an autograd buffer, a CUDA
//! graph pool, or unknown), the rule that decided and how sure it is
//! (`GET /api/snapshots/{id}/categories`, `memscope categories --json`), and the bytes per
//! category the report gives at the peak and at each OOM.

use serde::{Deserialize, Serialize};

use crate::{Frame, StackId};

/// What an allocation is in the model's terms (JSON names exactly these).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
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
    /// Every category, in the order stacked charts draw them (bottom first: what lives longest).
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

    /// For people, plural: "optimizer state", "activations".
    pub fn words(self) -> &'static str {
        match self {
            Category::Parameter => "parameters",
            Category::Gradient => "gradients",
            Category::OptimizerState => "optimizer state",
            Category::Activation => "activations",
            Category::Input => "inputs",
            Category::Temporary => "temporaries",
            Category::AutogradDetail => "autograd buffers",
            Category::CudaGraph => "CUDA graph pools",
            Category::Unknown => "unknown",
        }
    }
}

/// The rule that labelled an allocation; each names its evidence ([`CategoryRule::words`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CategoryRule {
    PrivatePool,
    KeptFromBeforeTraining,
    SplitByGradientCount,
    KeptFromOptimizerStep,
    KeptFromAfterBackward,
    KeptBetweenSteps,
    KeptFromBackward,
    GradientBucket,
    SavedForBackward,
    Recomputed,
    HeldPastBackward,
    AliveAfterForward,
    LoadedBeforeForward,
    FreedInPhase,
    BackwardScratch,
    KeptFromBackwardNoParameter,
    KeptFromBackwardForGood,
    KeptFromForward,
    BeforeTrace,
    NoPhases,
}

impl CategoryRule {
    /// The rule in words, for a person reading one allocation.
    pub fn words(self) -> &'static str {
        use CategoryRule as R;
        match self {
            R::PrivatePool => "its segment belongs to a private pool (CUDA graph or MemPool)",
            R::KeptFromBeforeTraining => "made before the first forward pass, alive throughout",
            R::SplitByGradientCount => {
                "made before the trace, alive throughout: parameters and optimizer state split by the count of gradients of its size (which same-size block is which is not in the trace)"
            }
            R::KeptFromOptimizerStep => "made in an optimizer step and kept after it",
            R::KeptFromAfterBackward => {
                "made after a backward pass, before the next forward pass, and kept"
            }
            R::KeptBetweenSteps => {
                "made between steps, outside the optimizer's steps, and kept through later steps"
            }
            R::KeptFromBackward => {
                "made in a backward pass and kept into the optimizer step, a parameter's size"
            }
            R::GradientBucket => {
                "made by DistributedDataParallel's reducer for its gradient buckets, and kept"
            }
            R::SavedForBackward => "made in a forward pass and freed in the backward pass",
            R::Recomputed => "recomputed in a backward pass (activation checkpointing)",
            R::HeldPastBackward => "made in a forward pass and held past the backward pass",
            R::AliveAfterForward => "made in a forward pass, alive at the end of the trace",
            R::LoadedBeforeForward => "made before the forward pass and used through backward",
            R::FreedInPhase => "made and freed within one phase",
            R::BackwardScratch => "made and freed within a backward pass",
            R::KeptFromBackwardNoParameter => {
                "made in a backward pass and kept, but no parameter has its size"
            }
            R::KeptFromBackwardForGood => {
                "made in a backward pass and kept for good while gradients are freed every step (a library workspace)"
            }
            R::KeptFromForward => "made during a forward pass and kept throughout",
            R::BeforeTrace => "made before the trace and freed in it",
            R::NoPhases => "the trace shows no forward, backward or optimizer phases",
        }
    }
}

/// How sure a label is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Confidence {
    Low,
    Medium,
    High,
}

/// Where the phases the labels are read against came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PhaseSource {
    /// Backward passes from the autograd thread's stacks.
    Threads,
    /// Backward passes inferred from lifetimes between annotated optimizer steps (no frames).
    Lifetimes,
    /// No backward pass: a forward-only or inference trace, or no evidence.
    None,
}

impl PhaseSource {
    /// What the labels rest on, for a sentence.
    pub fn words(self) -> &'static str {
        match self {
            PhaseSource::Threads => "backward passes read from the autograd thread's stacks",
            PhaseSource::Lifetimes => {
                "backward passes inferred from lifetimes between optimizer steps (no stacks recorded)"
            }
            PhaseSource::None => "no backward pass in the trace (forward-only or inference)",
        }
    }
}

/// Bytes per category (each field is bytes; the JSON keys are the categories' names).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CategoryBytes {
    pub parameter: u64,
    pub gradient: u64,
    pub optimizer_state: u64,
    pub activation: u64,
    pub input: u64,
    pub temporary: u64,
    pub autograd_detail: u64,
    pub cuda_graph: u64,
    pub unknown: u64,
}

impl CategoryBytes {
    pub fn get(&self, c: Category) -> u64 {
        match c {
            Category::Parameter => self.parameter,
            Category::Gradient => self.gradient,
            Category::OptimizerState => self.optimizer_state,
            Category::Activation => self.activation,
            Category::Input => self.input,
            Category::Temporary => self.temporary,
            Category::AutogradDetail => self.autograd_detail,
            Category::CudaGraph => self.cuda_graph,
            Category::Unknown => self.unknown,
        }
    }

    pub fn get_mut(&mut self, c: Category) -> &mut u64 {
        match c {
            Category::Parameter => &mut self.parameter,
            Category::Gradient => &mut self.gradient,
            Category::OptimizerState => &mut self.optimizer_state,
            Category::Activation => &mut self.activation,
            Category::Input => &mut self.input,
            Category::Temporary => &mut self.temporary,
            Category::AutogradDetail => &mut self.autograd_detail,
            Category::CudaGraph => &mut self.cuda_graph,
            Category::Unknown => &mut self.unknown,
        }
    }

    pub fn total(&self) -> u64 {
        Category::ALL.iter().map(|&c| self.get(c)).sum()
    }

    /// The non-empty categories, largest first.
    pub fn largest_first(&self) -> Vec<(Category, u64)> {
        let mut v: Vec<(Category, u64)> = Category::ALL
            .into_iter()
            .map(|c| (c, self.get(c)))
            .filter(|x| x.1 > 0)
            .collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        v
    }
}

/// One live allocation, labelled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CategorizedAllocation {
    pub address: u64,
    #[serde(rename = "size")]
    pub size_bytes: u64,
    pub category: Category,
    pub rule: CategoryRule,
    pub confidence: Confidence,
    pub stream: u64,
    /// Event index of its `alloc`; none when it was made before the trace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alloc_event: Option<u32>,
    /// Its stack (resolve with `/frames/{stack}`; 0: none).
    pub stack: StackId,
    /// Its call site (first user frame), when it has frames.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub site: Option<Frame>,
}

/// `GET /api/snapshots/{id}/categories`: every allocation alive at a position, labelled, and the
/// bytes per category.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CategoriesAt {
    pub device: i32,
    pub position: u32,
    pub source: PhaseSource,
    /// Backward passes found in the trace.
    pub backward_passes: u32,
    /// Largest first; at most the query's `limit`.
    pub allocations: Vec<CategorizedAllocation>,
    /// Live allocations at the position (listed or not).
    pub count: u64,
    pub totals: CategoryBytes,
}

/// `GET /api/snapshots/{id}/categories` query.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CategoriesQuery {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<i32>,
    /// After this many events (default: the peak of live bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position: Option<u32>,
    /// Only allocations of this category.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub category: Option<Category>,
    /// Most allocations listed, largest first (default 500).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

/// A device's memory by category, in its report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceCategories {
    pub source: PhaseSource,
    pub backward_passes: u32,
    /// Where live (requested) bytes peak.
    pub peak_position: u32,
    /// What was alive there, by category.
    pub at_peak: CategoryBytes,
}

/// "parameters 1.0 GiB, gradients 1.0 GiB, …": the non-empty categories, largest first, with
/// `bytes` to write each amount.
pub fn category_words(c: &CategoryBytes, bytes: impl Fn(u64) -> String) -> String {
    c.largest_first()
        .into_iter()
        .map(|(c, b)| format!("{} {}", c.words(), bytes(b)))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn category_names_are_the_documented_json_names() {
        for c in Category::ALL {
            let json = serde_json::to_string(&c).unwrap();
            assert_eq!(json, format!("\"{}\"", c.as_str()));
            assert_eq!(Category::parse(c.as_str()), Some(c));
        }
        let mut b = CategoryBytes::default();
        *b.get_mut(Category::OptimizerState) = 3;
        *b.get_mut(Category::Parameter) = 5;
        let v: serde_json::Value = serde_json::to_value(b).unwrap();
        assert_eq!(v["optimizer_state"], 3);
        assert_eq!(b.total(), 8);
        assert_eq!(
            category_words(&b, |n| format!("{n} B")),
            "parameters 5 B, optimizer state 3 B"
        );
    }
}
