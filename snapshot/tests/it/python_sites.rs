//! Python mode is Python (issue 40): in a snapshot that recorded Python frames, no call site is a
//! C++ function. A stack with no Python frame (autograd's backward thread, a C++ operator) is
//! named by a note in Python's words, and sites that read the same are one site.

use snapshot::analysis::{FlameFrames, Index, stacks_at, stacks_at_with};
use snapshot::frames::{FrameView, python_note};
use snapshot::model::StackId;

/// A site as a Python user may see it: a Python frame, or a note standing for C++ code.
fn reads_in_python(f: &FrameView) -> bool {
    let note = f.filename.is_empty() && f.line == 0 && f.name.starts_with('(');
    note || !snapshot::frames::is_cpp(&f.filename)
}

fn is_note(f: &FrameView) -> bool {
    f.filename.is_empty() && f.name.starts_with('(')
}

#[test]
fn notes_say_what_the_cpp_frame_did() {
    for (cpp, note) in [
        (
            "torch::autograd::generated::AddmmBackward0::apply(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)",
            "(backward of addmm, no Python frame)",
        ),
        (
            "torch::autograd::generated::NativeLayerNormBackward0::apply(std::vector<at::Tensor>&&)",
            "(backward of native_layer_norm, no Python frame)",
        ),
        (
            "torch::autograd::AccumulateGrad::accumulateGrad<…>(at::Tensor const&, …)",
            "(gradient accumulation, no Python frame)",
        ),
        (
            "at::_ops::sum_dim_IntList::call(at::Tensor const&, …)",
            "(sum_dim_IntList called from C++, no Python frame)",
        ),
        (
            "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(…)",
            "(C++ code, no Python frame)",
        ),
    ] {
        assert_eq!(python_note(cpp), note);
    }
}

#[test]
fn no_site_of_a_python_snapshot_is_a_cpp_frame() {
    let dir = crate::support::fixtures().join("categories");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".all.pickle.xz"))
        .collect();
    files.sort();
    assert!(files.len() >= 5, "{files:?}");
    let mut notes = 0;
    for name in files {
        let snap = crate::support::read(&format!("categories/{name}"));
        let index = Index::new(&snap);
        assert!(index.frames.has_python(), "{name} recorded Python frames");
        // Every stack's site (what the timeline, segments, OOM, leaks and categories show).
        for s in 0..snap.stacks.len() {
            if let Some(site) = index.frames.site(&snap, StackId(s as u32)) {
                assert!(reads_in_python(&site), "{name}: stack {s}: {site:?}");
                notes += usize::from(is_note(&site));
            }
        }
        // The stacks table, read in Python by default: each site once, none C++, no byte lost
        // against the table with C++ frames.
        for d in index.traced() {
            let py = stacks_at(&snap, &index, d.device, None, usize::MAX).unwrap();
            assert_eq!(py.frames, FlameFrames::PythonOnly);
            let all = stacks_at_with(&snap, &index, d.device, None, usize::MAX, FlameFrames::All)
                .unwrap();
            let sum = |r: &snapshot::analysis::stacks::StackReport| {
                r.sites.iter().map(|s| s.bytes).sum::<u64>()
            };
            assert_eq!(sum(&py), sum(&all), "{name}");
            let mut shown: Vec<_> = py
                .sites
                .iter()
                .map(|s| {
                    let site = s.site.as_ref();
                    assert!(site.is_none_or(reads_in_python), "{name}: {site:?}");
                    site.map(|f| (f.filename.clone(), f.line, f.name.clone()))
                })
                .collect();
            let n = shown.len();
            shown.sort();
            shown.dedup();
            assert_eq!(shown.len(), n, "{name}: a site twice in the table");
        }
    }
    // Backward passes allocate on autograd's thread, with C++ frames only: the fixtures have them.
    assert!(notes > 0, "no stack without a Python frame in the fixtures");
}
