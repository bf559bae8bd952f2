//! Which frames a person wants to see: PyTorch's own plumbing is noise, and the first frame in the
//! user's own code (not `torch/`, not `site-packages`, not C++) is what a stack is labelled by.
//!
//! The rules follow what PyTorch's MemoryViz hides (see SNAPSHOT_FORMAT.md); they are computed
//! once per distinct frame, not per trace entry.

use serde::Serialize;

use crate::model::{Frame, FrameId, Snapshot, StackId};

const NOISE_NAMES: [&str; 8] = [
    "unwind::unwind",
    "CapturedTraceback::gather",
    "gather_with_cpp",
    "_start",
    "__libc_start_main",
    "PyEval_",
    "PyObject_",
    "PyFunction_",
];

const NOISE_FILES: [&str; 10] = [
    "core/boxing",
    "/Register",
    "/Redispatch",
    "pythonrun.c",
    "Modules/main.c",
    "Objects/call.c",
    "Objects/methodobject.c",
    "pycore_ceval.h",
    "ceval.c",
    "cpython/abstract.h",
];

/// True for frames viewers hide (unwinder, interpreter and dispatcher plumbing). Beyond the names
/// MemoryViz hides, the CPython interpreter's own C frames (`Py_RunMain`, `_PyRun_…`,
/// `PyMethod_New`…), libc start-up and thread start (`execute_native_thread_routine` in
/// libstdc++'s `thread48.o`, `start_thread`, `clone3`, and the libc symbols the unwinder names
/// beside them) are noise too: they sit at the bottom of every stack, and no one fixes code there.
pub fn is_noise(filename: &str, name: &str) -> bool {
    NOISE_NAMES.iter().any(|n| name.contains(n))
        || NOISE_FILES.iter().any(|f| filename.contains(f))
        || (is_cpp(filename)
            && (name.starts_with("Py")
                || name.starts_with("_Py")
                || name.starts_with("__")
                || name.starts_with("pthread_")
                || [
                    "main",
                    "clone",
                    "clone3",
                    "start_thread",
                    "execute_native_thread_routine",
                ]
                .contains(&name)))
}

/// True for C++ frames: `??` or a C/C++/CUDA source, an object file or shared library
/// (`thread48.o`, `libtorch_cuda.so`), or no Python file at all.
pub fn is_cpp(filename: &str) -> bool {
    filename == "??"
        || [
            ".cpp", ".cc", ".cxx", ".c", ".h", ".hpp", ".cu", ".cuh", ".o", ".so",
        ]
        .iter()
        .any(|e| filename.ends_with(e))
        || filename.contains(".so.")
        || filename.is_empty()
}

/// How well a C++ frame names what allocated, for a stack with no Python frame (the autograd
/// engine's thread, or `stacks="cpp"`): the autograd node (`BmmBackward0::apply`) or gradient
/// accumulation first, then the operator (`at::_ops::bmm::call`), else nothing better than the
/// innermost frame.
fn cpp_rank(name: &str) -> u8 {
    if name.contains("::apply(") && (name.contains("Backward") || name.contains("AccumulateGrad"))
        || name.contains("AccumulateGrad::accumulateGrad")
    {
        2
    } else if name.contains("at::_ops::") && name.contains("::call(") {
        1
    } else {
        0
    }
}

/// True for a frame in the user's own Python code.
pub fn is_user(filename: &str) -> bool {
    !is_cpp(filename)
        && !filename.contains("/torch/")
        && !filename.starts_with("torch/")
        && !filename.contains("site-packages")
        && !filename.contains("dist-packages")
        && !filename.contains("/lib/python3")
        && !filename.starts_with("<frozen")
}

/// A frame as shown to people and written in JSON.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FrameView {
    pub filename: String,
    pub line: u32,
    pub name: String,
}

/// What a call site with no Python frame is called where people read stacks in Python, from
/// the C++ frame that labels it ([`FrameClass::label`]), in a Python user's words:
/// `(backward of addmm, no Python frame)` for `…::AddmmBackward0::apply(…)`, `(gradient
/// accumulation, no Python frame)`, `(bmm called from C++, no Python frame)` for
/// `at::_ops::bmm::call(…)`, else `(C++ code, no Python frame)`. The parenthesis marks it as a
/// note, not a frame (`api::cpp_name` passes it through).
pub fn python_note(cpp_name: &str) -> String {
    let what = if cpp_rank(cpp_name) == 0 {
        "C++ code".to_string()
    } else if cpp_name.contains("AccumulateGrad") {
        "gradient accumulation".to_string()
    } else if let Some(node) = cpp_name
        .split_once("::apply(")
        .map(|(q, _)| q.rsplit("::").next().unwrap_or(q))
        .and_then(|n| n.split_once("Backward").map(|(op, _)| op))
        .filter(|op| !op.is_empty())
    {
        format!("backward of {}", snake(node))
    } else if let Some(op) = cpp_name
        .split_once("at::_ops::")
        .and_then(|(_, rest)| rest.split_once("::"))
        .map(|(op, _)| op)
        .filter(|op| !op.is_empty())
    {
        format!("{op} called from C++")
    } else {
        "C++ code".to_string()
    };
    format!("({what}, no Python frame)")
}

/// `NativeLayerNorm` as PyTorch names the operator: `native_layer_norm`.
fn snake(camel: &str) -> String {
    let mut out = String::with_capacity(camel.len() + 4);
    for (i, c) in camel.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

/// Per-frame classification, computed once for a snapshot.
#[derive(Debug, Clone)]
pub struct FrameClass {
    noise: Vec<bool>,
    user: Vec<bool>,
    cpp: Vec<bool>,
    /// The snapshot recorded Python frames: its call sites are read in Python.
    python: bool,
    /// Per frame, the first frame with the same [`python_note`] (C++ frames) or itself: C++
    /// sites that read the same in Python are one site there.
    python_site: Vec<FrameId>,
}

impl FrameClass {
    pub fn new(snap: &Snapshot) -> FrameClass {
        let n = snap.frames.len();
        let mut noise = Vec::with_capacity(n);
        let mut user = Vec::with_capacity(n);
        let mut cpp = Vec::with_capacity(n);
        let mut python_site = Vec::with_capacity(n);
        let mut first_with_note = rustc_hash::FxHashMap::<String, FrameId>::default();
        let mut plain_cpp = None;
        for i in 0..n {
            let id = FrameId(i as u32);
            let f = snap.frame(id);
            let (file, name) = (snap.str(f.filename), snap.str(f.name));
            noise.push(is_noise(file, name));
            user.push(is_user(file));
            cpp.push(is_cpp(file));
            // (Most C++ frames rank 0 and read as plain C++ code: no note made for them.)
            python_site.push(match (is_cpp(file), cpp_rank(name)) {
                (false, _) => id,
                (true, 0) => *plain_cpp.get_or_insert(id),
                (true, _) => *first_with_note.entry(python_note(name)).or_insert(id),
            });
        }
        let python = cpp.iter().zip(&noise).any(|(&c, &n)| !c && !n);
        FrameClass {
            noise,
            user,
            cpp,
            python,
            python_site,
        }
    }

    pub fn is_noise(&self, f: FrameId) -> bool {
        self.noise[f.0 as usize]
    }

    pub fn is_user(&self, f: FrameId) -> bool {
        self.user[f.0 as usize]
    }

    pub fn is_cpp(&self, f: FrameId) -> bool {
        self.cpp[f.0 as usize]
    }

    /// True when the snapshot recorded Python frames (not only C++): then people read its
    /// stacks in Python.
    pub fn has_python(&self) -> bool {
        self.python
    }

    /// The call site of a stack as people read it ([`Self::label`], shown by
    /// [`Self::site_view`]).
    pub fn site(&self, snap: &Snapshot, stack: StackId) -> Option<FrameView> {
        self.label(snap, stack).map(|f| self.site_view(snap, f))
    }

    /// A site's frame as shown: in a snapshot read in Python, a C++ frame is its
    /// [`python_note`], never the C++ function.
    pub fn site_view(&self, snap: &Snapshot, f: FrameId) -> FrameView {
        self.site_view_in(snap, f, self.python)
    }

    /// [`Self::site_view`], read in Python or not.
    pub fn site_view_in(&self, snap: &Snapshot, f: FrameId, python: bool) -> FrameView {
        if python && self.is_cpp(f) {
            FrameView {
                filename: String::new(),
                line: 0,
                name: python_note(snap.str(snap.frame(f).name)),
            }
        } else {
            view(snap, f)
        }
    }

    /// The innermost user frame of a stack.
    pub fn first_user_frame(&self, snap: &Snapshot, stack: StackId) -> Option<FrameId> {
        snap.stack(stack).iter().copied().find(|&f| self.is_user(f))
    }

    /// The stack without noise, innermost first.
    pub fn filtered(&self, snap: &Snapshot, stack: StackId) -> Vec<FrameId> {
        snap.stack(stack)
            .iter()
            .copied()
            .filter(|&f| !self.is_noise(f))
            .collect()
    }

    /// The frame a stack is labelled by: the first user frame, else the first Python frame (inside
    /// torch, e.g. `backward`), else the autograd node or operator that allocated (a backward
    /// allocation on the engine's thread has only C++ frames: `BmmBackward0::apply`,
    /// `at::_ops::bmm::call`), else the first C++ frame outside the caching allocator itself.
    ///
    /// In a snapshot read in Python, C++ labels that read the same there ([`python_note`]) are
    /// one label: the grouping matches what is shown.
    pub fn label(&self, snap: &Snapshot, stack: StackId) -> Option<FrameId> {
        self.label_in(snap, stack, self.python)
    }

    /// [`Self::label`], read in Python or not.
    pub fn label_in(&self, snap: &Snapshot, stack: StackId, python: bool) -> Option<FrameId> {
        let f = self.cpp_label(snap, stack)?;
        Some(if python {
            self.python_site[f.0 as usize]
        } else {
            f
        })
    }

    fn cpp_label(&self, snap: &Snapshot, stack: StackId) -> Option<FrameId> {
        let frames = snap.stack(stack);
        self.first_user_frame(snap, stack)
            .or_else(|| {
                frames
                    .iter()
                    .copied()
                    .find(|&f| !self.is_noise(f) && !self.is_cpp(f))
            })
            .or_else(|| {
                // The innermost frame of the best rank (a node over an operator).
                frames
                    .iter()
                    .copied()
                    .map(|f| (cpp_rank(snap.str(snap.frame(f).name)), f))
                    .filter(|&(rank, _)| rank > 0)
                    .fold(None, |best: Option<(u8, FrameId)>, (rank, f)| match best {
                        Some((b, _)) if b >= rank => best,
                        _ => Some((rank, f)),
                    })
                    .map(|(_, f)| f)
            })
            .or_else(|| {
                frames.iter().copied().find(|&f| {
                    let fr = snap.frame(f);
                    !self.is_noise(f)
                        && !snap.str(fr.filename).contains("CachingAllocator")
                        && !snap.str(fr.name).contains("CachingAllocator")
                })
            })
            .or_else(|| frames.iter().copied().find(|&f| !self.is_noise(f)))
    }

    /// The stack for display: user frames first, then the rest without noise.
    pub fn display(&self, snap: &Snapshot, stack: StackId) -> Vec<FrameView> {
        let filtered = self.filtered(snap, stack);
        let (user, other): (Vec<FrameId>, Vec<FrameId>) =
            filtered.into_iter().partition(|&f| self.is_user(f));
        user.into_iter()
            .chain(other)
            .map(|f| view(snap, f))
            .collect()
    }
}

pub fn view(snap: &Snapshot, f: FrameId) -> FrameView {
    let Frame {
        filename,
        name,
        line,
    } = snap.frame(f);
    FrameView {
        filename: snap.str(filename).to_string(),
        line,
        name: snap.str(name).to_string(),
    }
}

/// The full stack, innermost first, noise included (what `--json` reports as `frames`).
pub fn full_stack(snap: &Snapshot, stack: StackId) -> Vec<FrameView> {
    snap.stack(stack).iter().map(|&f| view(snap, f)).collect()
}
