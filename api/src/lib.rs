//! The server ↔ dashboard boundary: every type that crosses HTTP between `memscope serve` and the
//! dashboard (answers, request bodies, query parameters) and one URL builder per route.
//!
//! Why a crate of its own: the dashboard is compiled separately (wasm32) and used to decode the
//! server's answers into untyped JSON or into structs it declared again by hand, which drifted
//! (byte counts read as floats, the axis as a string, a renamed field read as 0). With both sides
//! on these types, a change to an answer is a change here, seen by the compiler on both sides and
//! by the golden API tests (`server/tests/it/api_golden.rs`).
//!
//! Rules, as for `wire/` (the collector ↔ server boundary):
//! - Units are in names (`_bytes`, `_us`, `_ms`); byte counts are integers. Where an older JSON
//!   key has no unit (`size`, `live_max`), the Rust field has it and `#[serde(rename)]` keeps the
//!   JSON key, so clients of the JSON (the CLI's `--json`, scripts) see no change.
//! - Closed sets are enums (`Axis`, `Verdict`, `WarningCode`, `Encoding`, `EventKind`, …); sets
//!   that grow with PyTorch or collectors keep unknown names in an `Other` variant.
//! - The engine's types stay the engine's: the server converts them into these at the boundary
//!   (`engine`, behind the feature of that name), so an engine refactor cannot change an answer silently.
//! - No IO, no async, no HTTP client: this crate only describes.

pub mod categories;
pub mod diff;
#[cfg(feature = "engine")]
pub mod engine;
pub mod format;
pub mod library;
pub mod live;
pub mod predict;
pub mod report;
pub mod routes;
pub mod runs;
pub mod views;
pub mod whatif;

use serde::{Deserialize, Serialize};

pub use categories::*;
pub use diff::*;
pub use format::*;
pub use library::*;
pub use live::*;
pub use predict::*;
pub use report::*;
pub use runs::*;
pub use views::*;
pub use whatif::*;

/// Every error answer: `{"error": "message"}` with a fitting HTTP status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: String,
}

/// `GET /api/health`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Health {
    pub ok: bool,
    /// The server's version (`CARGO_PKG_VERSION`).
    pub version: String,
}

/// A stack frame as shown to people: file, line and function.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Frame {
    pub filename: String,
    pub line: u32,
    pub name: String,
}

impl Frame {
    /// `file.py:12 function`, the file without its folders.
    pub fn short(&self) -> String {
        if is_cpp_frame(&self.filename, self.line) {
            return cpp_name(&self.name);
        }
        format!(
            "{}:{} {}",
            self.filename.rsplit('/').next().unwrap_or(""),
            self.line,
            self.name
        )
    }
}

/// A frame of C++ code (no line, not a Python file): named by its function ([`cpp_name`]).
pub fn is_cpp_frame(filename: &str, line: u32) -> bool {
    line == 0 && !filename.ends_with(".py")
}

/// A C++ frame's function as people name it: `BmmBackward0` for
/// `torch::autograd::generated::BmmBackward0::apply(std::vector<…>&&)`, `bmm (op)` for
/// `at::_ops::bmm::call(…)`, else its last two `::` parts without the argument list. A note
/// the engine gives a site without a Python frame (it starts with `(`) is kept whole.
pub fn cpp_name(full: &str) -> String {
    // A note in place of a frame (`(backward of addmm, no Python frame)`), written as it is.
    if full.starts_with('(') {
        return full.to_string();
    }
    // The qualified name's `::` parts outside template brackets, up to the argument list; a
    // return type before it (`void …`) is dropped.
    let (mut parts, mut start, mut depth) = (Vec::new(), 0, 0i32);
    let bytes = full.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'<' => depth += 1,
            b'>' => depth -= 1,
            b'(' if depth == 0 => break,
            b' ' if depth == 0 => start = i + 1,
            b':' if depth == 0 && bytes.get(i + 1) == Some(&b':') => {
                parts.push(&full[start..i]);
                start = i + 2;
                i += 1;
            }
            _ => {}
        }
        i += 1;
    }
    parts.push(&full[start..i.min(full.len())]);
    match parts.as_slice() {
        [.., "_ops", op, _] => format!("{op} (op)"),
        [.., node, "apply"] => node.to_string(),
        [.., a, b] => format!("{a}::{b}"),
        [one] => one.to_string(),
        [] => full.to_string(),
    }
}

/// What a call site with an empty stack is called: its allocations were made before the trace
/// (their stacks are unknown) or recorded without frames.
pub const NO_STACK: &str = "(no stack: made before the trace, or recorded without frames)";

/// A call site's frame written for people, or [`NO_STACK`] where the stack had none.
pub fn site_text(site: Option<&Frame>) -> String {
    site.map_or_else(|| NO_STACK.to_string(), Frame::short)
}

/// A stack id of a snapshot (resolve with [`routes::frames`]); 0 is the empty stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct StackId(pub u32);

/// Which x axis a timeline window is given in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Axis {
    /// Event index (position in the device's trace).
    Event,
    /// Microseconds since the epoch, as recorded.
    Time,
}

impl Axis {
    pub fn as_str(self) -> &'static str {
        match self {
            Axis::Event => "event",
            Axis::Time => "time",
        }
    }
}

/// Size class of a segment's pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SegmentType {
    Small,
    Large,
    Unknown,
}

/// State of a block inside a segment (PyTorch's names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BlockState {
    ActiveAllocated,
    ActivePendingFree,
    Inactive,
    Unknown,
}

impl BlockState {
    /// The state named as PyTorch names it; `unknown` for any other name.
    pub fn from_name(name: &str) -> BlockState {
        serde_json::from_value(serde_json::Value::String(name.to_string()))
            .unwrap_or(BlockState::Unknown)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            BlockState::ActiveAllocated => "active_allocated",
            BlockState::ActivePendingFree => "active_pending_free",
            BlockState::Inactive => "inactive",
            BlockState::Unknown => "unknown",
        }
    }
}

/// A memory pool: `(id, sub-id)` as PyTorch writes `segment_pool_id`; `(0, 0)` is the default.
pub type PoolId = (i64, i64);

/// Text made safe inside an HTML element or a quoted attribute (file and function names come
/// from the user's snapshot): what the dashboard and the shared HTML report write.
pub fn html_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closed_sets_read_their_json_names() {
        let a: Axis = serde_json::from_str("\"time\"").unwrap();
        assert_eq!(a, Axis::Time);
        assert!(serde_json::from_str::<Axis>("\"wall\"").is_err());
        let s: BlockState = serde_json::from_str("\"active_pending_free\"").unwrap();
        assert_eq!(s.as_str(), "active_pending_free");
    }

    #[test]
    fn a_frame_is_written_without_its_folders() {
        let f = Frame {
            filename: "/home/me/train.py".into(),
            line: 88,
            name: "step".into(),
        };
        assert_eq!(f.short(), "train.py:88 step");
        assert_eq!(site_text(None), NO_STACK);
        // A note the engine gives a site without a Python frame is written as it is.
        let note = Frame {
            filename: String::new(),
            line: 0,
            name: "(backward of addmm, no Python frame)".into(),
        };
        assert_eq!(note.short(), note.name);
    }

    #[test]
    fn a_cpp_frame_is_named_by_its_node_or_operator() {
        let node = "torch::autograd::generated::BmmBackward0::apply(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)";
        assert_eq!(cpp_name(node), "BmmBackward0");
        assert_eq!(
            cpp_name("at::_ops::bmm::call(at::Tensor const&, at::Tensor const&)"),
            "bmm (op)"
        );
        assert_eq!(
            cpp_name("void at::meta::check<at::meta::structured_bmm>(at::Tensor const&)"),
            "meta::check<at::meta::structured_bmm>"
        );
        let f = Frame {
            filename: "??".into(),
            line: 0,
            name: node.into(),
        };
        assert_eq!(f.short(), "BmmBackward0");
    }
}
