//! The worker's side of the page's own reading (`local/mod.rs`): the engine's model of one file,
//! parsed in a dedicated worker (`frontend/worker.js`) so the page never freezes, and the answers
//! to the page's questions about it, built by the server's own handlers' bodies (`api::engine`)
//! so they are the server's answers to the byte. Nothing here runs on the page's thread.

use std::cell::RefCell;

use snapshot::analysis::{self, Index};
use wasm_bindgen::prelude::*;

use super::Question;

/// One file's model and its report, computed once as the server computes them at upload.
struct Model {
    snap: snapshot::model::Snapshot,
    index: Index,
    report: api::Report,
    info: api::SnapshotInfo,
}

thread_local! {
    /// The file this worker read: a worker reads one file and is ended with it.
    static MODEL: RefCell<Option<Model>> = const { RefCell::new(None) };
}

/// Parses `bytes` (the file named `name`), indexes it and computes its report; an error the
/// person can read when the file is not a snapshot this build reads (the page then waits for the
/// upload, whose own answer says more: compressed files, for one, are read only by the server).
#[wasm_bindgen]
pub fn local_open(bytes: &[u8], name: String) -> Result<(), String> {
    let snap = snapshot::read_sized(bytes, bytes.len() as u64).map_err(|e| e.to_string())?;
    let index = Index::new(&snap);
    // No device total: the page has none to give (the server may find one in its collectors'
    // readings; the stored report then replaces this one when the upload lands).
    let report = api::engine::report(analysis::report(
        &snap,
        &index,
        &analysis::Options::default(),
    ));
    let info = api::SnapshotInfo {
        name,
        ..api::SnapshotInfo::from_report(&report, snap.trace.len() as u64, bytes.len() as u64)
    };
    MODEL.with(|m| {
        *m.borrow_mut() = Some(Model {
            snap,
            index,
            report,
            info,
        })
    });
    Ok(())
}

/// The answer to one question (a [`Question`] in JSON), as JSON: what the server would answer.
#[wasm_bindgen]
pub fn local_answer(question: &str) -> Result<String, String> {
    let question: Question = serde_json::from_str(question)
        .map_err(|e| format!("a question the worker cannot read: {e}"))?;
    MODEL.with(|m| {
        let m = m.borrow();
        let m = m.as_ref().ok_or("this worker has read no file")?;
        let json = match question {
            Question::Report => serde_json::to_string(&m.report),
            Question::Info => serde_json::to_string(&m.info),
            Question::Timeline(q) => {
                let d = api::engine::device_index(&m.index, q.device)?;
                let answer =
                    api::engine::timeline_answer(&m.snap, &m.index, d, &q).ok_or("empty trace")?;
                serde_json::to_string(&answer)
            }
            Question::State(q) => {
                serde_json::to_string(&api::engine::state_answer(&m.snap, &m.index, &q))
            }
            Question::Stacks(q) => {
                serde_json::to_string(&api::engine::stacks_report(&m.snap, &m.index, &q)?)
            }
            Question::Segments(q) => {
                serde_json::to_string(&api::engine::segments_answer(&m.snap, &m.index, &q)?)
            }
            Question::Events(q) => {
                serde_json::to_string(&api::engine::events_answer(&m.snap, &m.index, &q)?)
            }
            Question::Allocation(n, q) => {
                serde_json::to_string(&api::engine::allocation_answer(&m.snap, &m.index, n, &q)?)
            }
            Question::Frames(stack) => {
                serde_json::to_string(&api::engine::frames_answer(&m.snap, &m.index, stack)?)
            }
        };
        json.map_err(|e| e.to_string())
    })
}
