//! Survived or fatal: what became of each OOM, read from what the trace did after it.
//!
//! PyTorch logs an `oom` entry every time a request fails, and raises. Many are caught: cuDNN's
//! plan search asks for a large workspace and, on OOM, falls back to an algorithm that needs less
//! (`generate_and_filter_plans`, `try_plans` in `aten/src/ATen/native/cudnn/Conv_v8.cpp`); a
//! batch-size search (`accelerate.find_executable_batch_size`) catches the error and tries a
//! smaller batch. A run that survived 58 OOMs did not die of any of them, so each OOM carries the
//! evidence of what followed it:
//!
//! - **workspace fallback**: the same operator asked again before anything was freed (the same
//!   stack), or its C++ frames name cuDNN's workspace search. It costs speed, not the run.
//! - **caught**: the program went on allocating on the same stream afterwards.
//! - **fatal**: nothing was allocated on its stream after it: the trace ends at it (the snapshot was
//!   dumped by the handler or an OOM observer as the program died).

use serde::Serialize;

use super::index::{DeviceIndex, Index};
use crate::model::{Action, Snapshot};

/// What became of an OOM.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Recovery {
    /// cuDNN/cuBLAS fell back to an algorithm with a smaller workspace.
    WorkspaceFallback,
    /// The program caught the error and went on.
    Caught,
    /// Nothing was allocated on its stream after it: the OOM ended the run.
    Fatal,
}

impl Recovery {
    /// The JSON name (`workspace_fallback`, `caught`, `fatal`).
    pub fn as_str(self) -> &'static str {
        match self {
            Recovery::WorkspaceFallback => "workspace_fallback",
            Recovery::Caught => "caught",
            Recovery::Fatal => "fatal",
        }
    }

    pub fn recovered(self) -> bool {
        self != Recovery::Fatal
    }
}

/// One OOM's fate and the evidence for it, in words.
#[derive(Clone, Debug)]
pub struct Fate {
    /// The OOM's position in the device's trace (0-based event).
    pub position: u32,
    pub recovery: Recovery,
    pub evidence: String,
}

/// Events after an OOM searched for the same operator's retry.
const RETRY_WINDOW: u32 = 64;

/// C++ frame names of the workspace searches that catch their own OOMs (lower case).
const WORKSPACE_FRAMES: &[&str] = &[
    "generate_and_filter_plans",
    "run_conv_plan",
    "try_plans",
    "try_configs",
    "workspace",
];

/// The fate of every `oom` entry of device `d`, in trace order.
///
/// Runs in every report (leaks and OOM verdicts both ask), so it reads only what it needs: the
/// action column for the OOMs (nothing at all when the index counted none), then the trace
/// backwards only until each of their streams' last `alloc` is found. Two passes over every
/// event took 0.3 CPU-seconds of a 13M-event report (bench/README.md, issue 41).
pub fn fates(snap: &Snapshot, index: &Index, d: &DeviceIndex) -> Vec<Fate> {
    let t = &snap.trace;
    if d.traced.actions[Action::Oom as usize] == 0 {
        return Vec::new();
    }
    let ooms: Vec<u32> = (0..d.len)
        .filter(|&e| t.action[d.row(e)] == Action::Oom)
        .collect();
    // The last `alloc` of each OOM's stream: an OOM before it on its stream was caught.
    let mut last_alloc: Vec<(u64, Option<u32>)> = Vec::new();
    for &e in &ooms {
        let s = t.stream(d.row(e));
        if !last_alloc.iter().any(|&(x, _)| x == s) {
            last_alloc.push((s, None));
        }
    }
    let mut missing = last_alloc.len();
    for e in (0..d.len).rev() {
        if missing == 0 {
            break;
        }
        let r = d.row(e);
        if t.action[r] != Action::Alloc {
            continue;
        }
        let s = t.stream(r);
        if let Some(slot) = last_alloc
            .iter_mut()
            .find(|(x, at)| *x == s && at.is_none())
        {
            slot.1 = Some(e);
            missing -= 1;
        }
    }
    let mut out = Vec::with_capacity(ooms.len());
    for e in ooms {
        let r = d.row(e);
        let stream = t.stream(r);
        let later = last_alloc
            .iter()
            .any(|&(s, at)| s == stream && at.is_some_and(|at| at > e));
        let (recovery, evidence) = if !later {
            (
                Recovery::Fatal,
                if e + 1 == d.len {
                    "the trace ends at it: the program stopped here".to_string()
                } else {
                    "nothing was allocated on its stream after it: the program stopped here"
                        .to_string()
                },
            )
        } else if let Some(words) = workspace_evidence(snap, index, d, e) {
            (Recovery::WorkspaceFallback, words)
        } else {
            (
                Recovery::Caught,
                "the program went on allocating on the same stream after it: the error was caught"
                    .to_string(),
            )
        };
        out.push(Fate {
            position: e,
            recovery,
            evidence,
        });
    }
    out
}

/// Why the OOM at `e` reads as a workspace fallback, if it does: its next request on the same
/// stream, before any free, comes from the same stack (cuDNN halves the workspace it asks for,
/// or rounds it up by a few bytes for the next plan); or its C++ frames name a workspace search.
fn workspace_evidence(snap: &Snapshot, index: &Index, d: &DeviceIndex, e: u32) -> Option<String> {
    let t = &snap.trace;
    let r = d.row(e);
    let (stack, stream) = (t.stack.get(r), t.stream(r));
    let named = snap.stack(stack).iter().find_map(|&f| {
        let name = snap.str(snap.frame(f).name);
        let lower = name.to_ascii_lowercase();
        // C++ names (a Python function may be called `workspace` too).
        ((index.frames.is_cpp(f) || name.contains("::"))
            && WORKSPACE_FRAMES.iter().any(|w| lower.contains(w)))
        .then(|| name.split('(').next().unwrap_or(name).to_string())
    });
    if let Some(frame) = named {
        return Some(format!(
            "asked for by {frame}: cuDNN/cuBLAS tried an algorithm whose workspace did not fit and fell back to one that needs less (it costs speed, not the run)"
        ));
    }
    for q in e + 1..(e + 1 + RETRY_WINDOW).min(d.len) {
        let rq = d.row(q);
        if t.stream(rq) != stream {
            continue;
        }
        match t.action[rq] {
            Action::FreeRequested | Action::FreeCompleted => return None,
            Action::Alloc | Action::Oom => {
                return (t.stack.get(rq) == stack).then(|| {
                    "the same operator asked again for less right after, freeing nothing: a cuDNN/cuBLAS workspace fallback (it costs speed, not the run)".to_string()
                });
            }
            _ => {}
        }
    }
    None
}
