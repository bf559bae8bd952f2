//! The page's own reading of a large file while its upload is slow (issue 41). The page holds
//! the file already; when its upload, at its pace so far, would take well longer than reading it
//! (a server across a network), a worker parses it with the same engine, and the snapshot's
//! page opens on a `local-…` id: its questions are answered by the worker (`worker.rs`, through
//! the server's own handlers' bodies, `api::engine`), the What if view (replays, the server's)
//! says it opens when the upload lands, and the page moves to the stored
//! snapshot (same view, same window) as soon as it does. The worker is ended then, and its
//! memory with it. A fast upload (loopback) is left alone: reading competes with it for the
//! client's cores ([`reading_pays`]).
//!
//! One owner: the readings (their workers, the questions in flight) live in this module's
//! thread-local; where each one's upload stands is a signal the pages share ([`Landings`]).

pub mod worker;

use std::cell::RefCell;
use std::collections::HashMap;

use leptos::prelude::*;
use serde::{Deserialize, Serialize};
use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;

/// The ids of readings: `local-{n}`, never a server id (those are hex digits).
pub const PREFIX: &str = "local-";

/// Smaller files upload in about the time a worker takes to start: their page is the stored
/// snapshot's, as before.
pub const MIN_BYTES: f64 = 16.0 * 1024.0 * 1024.0;

/// Larger files are only uploaded: the worker holds the file and its tables (~2.5× the file
/// in wasm memory, which 32-bit wasm caps at 4 GiB).
pub const MAX_BYTES: f64 = 1024.0 * 1024.0 * 1024.0;

/// What a view that needs the stored snapshot says on a reading's page.
pub const WAITS: &str = "This view opens when the upload lands: the page read the file itself to show it sooner, and replays run on the server.";

thread_local! {
    /// The number of the next reading: ids are never reused while the app runs (each library
    /// page's uploads count from 0, and a reading may outlive its page).
    static NEXT: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// A reading id no other reading of this app has had.
pub fn new_id() -> String {
    let n = NEXT.with(|c| {
        let n = c.get();
        c.set(n + 1);
        n
    });
    format!("{PREFIX}{n}")
}

pub fn is_local(id: &str) -> bool {
    id.starts_with(PREFIX)
}

/// Whether a file chosen alone may be read in the page as well as uploaded ([`reading_pays`]
/// decides once its upload is under way).
pub fn worth_reading(file: &web_sys::File) -> bool {
    (MIN_BYTES..=MAX_BYTES).contains(&file.size())
}

/// How fast the page reads a file (read, parsed, indexed and reported in the worker), in bytes
/// a second: 164 MB took 1.1–1.2 s in headless Chromium on the 2-core bench machine with no
/// upload running (bench/README.md, issue 41, twelfth part). A faster machine reads faster,
/// which only makes reading pay sooner than this predicts.
const READ_BYTES_PER_S: f64 = 140e6;

/// How long the upload must have run before its pace is trusted.
const PACE_AFTER_S: f64 = 0.3;

/// Whether reading a file of `total_bytes` in the page pays, `elapsed_s` into its upload with
/// `sent` (0..1) of it sent: when the upload, at its pace so far, still needs more than twice
/// the time the reading takes. Reading competes with the upload for the client's cores: on the
/// 2-core bench machine, reading a 164 MB file while it uploads over loopback (~1 s) made both
/// later (choose → page 1.25–1.45 s against 1.15), so a fast upload is left alone; over a slow
/// link, the page opens on the file's timeline in about the reading's time.
pub fn reading_pays(total_bytes: f64, elapsed_s: f64, sent: f64) -> bool {
    if elapsed_s < PACE_AFTER_S || sent <= 0.0 || sent >= 1.0 {
        return false;
    }
    let remaining_s = elapsed_s * (1.0 - sent) / sent;
    remaining_s > 2.0 * total_bytes / READ_BYTES_PER_S
}

/// A question to a reading's worker: the server's answers it can give (all but the what-if's
/// replays, which stay the server's).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Question {
    Report,
    Info,
    Timeline(api::TimelineQuery),
    State(api::PositionQuery),
    Stacks(api::StacksQuery),
    Segments(api::DeviceQuery),
    Events(api::EventsQuery),
    Allocation(u32, api::DeviceQuery),
    Frames(u32),
}

/// Where a reading's upload stands.
#[derive(Debug, Clone, PartialEq)]
pub enum Landing {
    /// 0..1 of the file sent.
    Sending(f64),
    /// Stored, under this id.
    Landed(String),
    Failed(String),
}

/// Every reading's upload, by reading id: written by the library page's uploads, read by the
/// reading's page (which moves to the stored snapshot once it has landed). Provided by the app.
#[derive(Clone, Copy)]
pub struct Landings(pub RwSignal<HashMap<String, Landing>>);

impl Landings {
    pub fn new() -> Landings {
        Landings(RwSignal::new(HashMap::new()))
    }

    pub fn set(self, id: &str, landing: Landing) {
        self.0.update(|m| {
            m.insert(id.to_string(), landing);
        });
    }

    pub fn get(self, id: &str) -> Option<Landing> {
        self.0.with(|m| m.get(id).cloned())
    }

    /// Whether reading `id`'s upload is still being sent (not landed, not failed).
    pub fn sending(self, id: &str) -> bool {
        self.0
            .with_untracked(|m| matches!(m.get(id), Some(Landing::Sending(_))))
    }
}

/// The questions sent to a worker and not answered yet: each one's promise's resolve and reject.
type Pending = std::rc::Rc<RefCell<HashMap<u32, (js_sys::Function, js_sys::Function)>>>;

/// One reading: its worker, its questions in flight, and the handler that settles them.
struct Reading {
    worker: web_sys::Worker,
    pending: Pending,
    next: u32,
    _on_message: Closure<dyn FnMut(web_sys::MessageEvent)>,
}

thread_local! {
    static READINGS: RefCell<HashMap<String, Reading>> = RefCell::new(HashMap::new());
}

fn start_worker(id: &str) -> Result<(), String> {
    let options = web_sys::WorkerOptions::new();
    options.set_type(web_sys::WorkerType::Module);
    let worker = web_sys::Worker::new_with_options(api::routes::WORKER_JS, &options)
        .map_err(|e| format!("{e:?}"))?;
    let pending = Pending::default();
    let settle = pending.clone();
    let on_message =
        Closure::<dyn FnMut(web_sys::MessageEvent)>::new(move |ev: web_sys::MessageEvent| {
            let data = ev.data();
            let field = |k: &str| js_sys::Reflect::get(&data, &JsValue::from_str(k)).ok();
            let Some(n) = field("id").and_then(|v| v.as_f64()) else {
                return;
            };
            let Some((resolve, reject)) = settle.borrow_mut().remove(&(n as u32)) else {
                return;
            };
            match field("err").filter(|e| !e.is_undefined()) {
                Some(e) => drop(reject.call1(&JsValue::NULL, &e)),
                None => drop(resolve.call1(&JsValue::NULL, &field("ok").unwrap_or_default())),
            }
        });
    worker.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
    READINGS.with(|r| {
        r.borrow_mut().insert(
            id.to_string(),
            Reading {
                worker,
                pending,
                next: 0,
                _on_message: on_message,
            },
        )
    });
    Ok(())
}

/// Sends reading `id`'s worker a message with `key` set to `value`; its answer.
async fn ask(id: &str, key: &str, value: &JsValue) -> Result<String, String> {
    let gone = || {
        format!(
            "{id} was this browser's own reading of a file, which ended with the page that made it: open the snapshot from the library."
        )
    };
    let mut sent = Err(gone());
    let promise = js_sys::Promise::new(&mut |resolve, reject| {
        sent = READINGS.with(|r| {
            let mut r = r.borrow_mut();
            let reading = r.get_mut(id).ok_or_else(gone)?;
            let n = reading.next;
            reading.next += 1;
            let message = js_sys::Object::new();
            let set =
                |k: &str, v: &JsValue| js_sys::Reflect::set(&message, &JsValue::from_str(k), v);
            set("id", &JsValue::from(n))
                .and_then(|_| set(key, value))
                .and_then(|_| reading.worker.post_message(&message))
                .map_err(|e| format!("{e:?}"))?;
            // Kept only once sent (a question that could not be sent is not waited for); the
            // answer comes in a later task, so it cannot arrive before this.
            reading.pending.borrow_mut().insert(n, (resolve, reject));
            Ok(())
        });
    });
    sent?;
    let answer = JsFuture::from(promise)
        .await
        .map_err(|e| e.as_string().unwrap_or_else(|| format!("{e:?}")))?;
    Ok(answer.as_string().unwrap_or_default())
}

/// Starts reading `file` as `id` in a worker; its report once it is read (the page to open
/// depends on it).
pub async fn open(id: &str, file: &web_sys::File) -> Result<api::Report, String> {
    start_worker(id)?;
    ask(id, "file", file).await?;
    answer(id, &Question::Report).await
}

/// Reading `id`'s answer to `question`, decoded as the server's would be.
pub async fn answer<T: serde::de::DeserializeOwned>(
    id: &str,
    question: &Question,
) -> Result<T, String> {
    let q = serde_json::to_string(question).map_err(|e| e.to_string())?;
    let text = ask(id, "question", &JsValue::from_str(&q)).await?;
    serde_json::from_str(&text)
        .map_err(|e| format!("unexpected answer from the page's reading: {e}"))
}

/// Ends reading `id`: its worker and its memory (the stored snapshot answers from now on).
pub fn close(id: &str) {
    if let Some(r) = READINGS.with(|r| r.borrow_mut().remove(id)) {
        r.worker.terminate();
        // Questions still out get an answer: the stored snapshot's page asks again.
        for (_, (_, reject)) in r.pending.borrow_mut().drain() {
            let _ = reject.call1(&JsValue::NULL, &JsValue::from_str(WAITS));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{is_local, new_id, reading_pays};

    #[test]
    fn reading_ids_are_never_reused_and_never_a_servers() {
        let (a, b) = (new_id(), new_id());
        assert_ne!(a, b);
        assert!(is_local(&a) && is_local(&b));
        // A server id is 16 hex digits.
        assert!(!is_local("9443f3ccfe3d7a8c"));
    }

    const MB: f64 = 1e6;

    #[test]
    fn a_loopback_upload_is_left_alone() {
        // 164 MB, 30 % sent after 0.3 s (the bench machine over loopback): ~0.7 s to go
        // against ~1.2 s of reading.
        assert!(!reading_pays(164.0 * MB, 0.3, 0.3));
    }

    #[test]
    fn a_slow_link_is_read_in_the_page() {
        // 164 MB at 20 MB/s: 6 MB after 0.3 s, ~7.9 s to go.
        assert!(reading_pays(164.0 * MB, 0.3, 6.0 / 164.0));
    }

    #[test]
    fn the_pace_is_not_trusted_before_it_is_measured() {
        assert!(!reading_pays(164.0 * MB, 0.1, 0.001));
        assert!(!reading_pays(164.0 * MB, 1.0, 0.0));
        assert!(!reading_pays(164.0 * MB, 1.0, 1.0));
    }

    #[test]
    fn a_larger_file_needs_a_slower_upload() {
        // The same pace (1 % a second, 100 s to go) pays for 1 GB but not for 8 GB.
        assert!(reading_pays(1000.0 * MB, 1.0, 0.01));
        assert!(!reading_pays(8000.0 * MB, 1.0, 0.01));
    }
}
