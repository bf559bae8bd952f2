//! The one module that talks to the server: one typed function per endpoint, each answer decoded
//! into its `api` type (a shape mismatch is an error the page shows, never a silent default).
//! GETs, PATCH and DELETE go through `fetch`, tied to the current page's `AbortController`
//! (`page_scope`: aborted when the page is left, so a page left behind stops its requests); uploads
//! go through XMLHttpRequest, the only browser API that reports upload progress. A reading's id
//! (`local/`: a large file the page reads itself while it uploads) is answered by its worker,
//! but for the what-if's replays, which are refused with a line to show.

use std::cell::RefCell;

use api::routes;

use crate::local;
use serde::de::DeserializeOwned;
use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;

thread_local! {
    /// The controller of the page being shown: requests take its signal when they start.
    static PAGE: RefCell<Option<web_sys::AbortController>> = const { RefCell::new(None) };
    /// GETs begun before the view that asks for them exists ([`prefetch`]), by URL: the first
    /// request for the same URL takes its answer instead of asking again. A new page drops
    /// those left (a view that asked for another URL).
    static PREFETCHED: RefCell<std::collections::HashMap<String, js_sys::Promise>> =
        RefCell::new(std::collections::HashMap::new());
}

/// Called first by every page: its requests get a controller of their own, aborted when the page
/// is left (the route changes), so a page left behind stops its requests.
pub fn page_scope() {
    let Ok(c) = web_sys::AbortController::new() else {
        return;
    };
    PAGE.with(|p| *p.borrow_mut() = Some(c.clone()));
    PREFETCHED.with(|p| p.borrow_mut().clear());
    let c = send_wrapper::SendWrapper::new(c);
    leptos::prelude::on_cleanup(move || c.abort());
}

fn page_signal() -> Option<web_sys::AbortSignal> {
    PAGE.with(|p| p.borrow().as_ref().map(|c| c.signal()))
}

/// A request's settings with `method`, tied to the current page (its signal).
fn page_request(method: &str) -> web_sys::RequestInit {
    let init = web_sys::RequestInit::new();
    init.set_method(method);
    if let Some(signal) = page_signal() {
        init.set_signal(Some(&signal));
    }
    init
}

/// Begins a GET of `url` for a view that will ask for it once what it is built from has come
/// (the snapshot's timeline waits for the report): the two requests then overlap instead of
/// following each other. Tied to the current page like any request; taken by the first
/// [`request`] of the same URL.
pub fn prefetch(url: String) {
    let Some(window) = web_sys::window() else {
        return;
    };
    let answer = window.fetch_with_str_and_init(&url, &page_request("GET"));
    PREFETCHED.with(|p| p.borrow_mut().insert(url, answer));
}

/// The server's message from an error answer (`{"error": "…"}`), if the body is one.
fn error_message(body: &str) -> Option<String> {
    serde_json::from_str::<api::ErrorBody>(body)
        .ok()
        .map(|e| e.error)
}

thread_local! {
    /// Tokens this page has handed the server (`POST /api/session`) so far: a request that got
    /// 401 sends again without asking when another request's prompt set one since it was sent.
    static SESSIONS: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
    /// Whether a request is asking for a token now (its prompt, then its session request).
    static ASKING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn sessions() -> u32 {
    SESSIONS.with(|s| s.get())
}

/// Resolves after `ms` milliseconds.
pub async fn sleep_ms(ms: i32) {
    let p = js_sys::Promise::new(&mut |resolve, _| {
        if let Some(w) = web_sys::window() {
            let _ = w.set_timeout_with_callback_and_timeout_and_arguments_0(&resolve, ms);
        }
    });
    let _ = JsFuture::from(p).await;
}

/// After a 401: whether to send again. Requests in flight together ask once: one asks, the
/// others wait for it and send again if it set a token since they were sent.
async fn token_renewed(sent_at: u32, message: &str) -> bool {
    while ASKING.with(|a| a.get()) {
        sleep_ms(50).await;
    }
    if sessions() != sent_at {
        return true;
    }
    ASKING.with(|a| a.set(true));
    let renewed = ask_for_token(message).await;
    ASKING.with(|a| a.set(false));
    renewed
}

/// After a 401 (the server was started with API tokens): asks for the token and hands it to the
/// server (`POST /api/session`), which keeps it in an HttpOnly cookie for this port that every
/// later request carries (fetches, uploads, the live event stream, downloads); no script can
/// read it. False if the person gave none or the server refused it.
async fn ask_for_token(message: &str) -> bool {
    let Some(window) = web_sys::window() else {
        return false;
    };
    let answer = window
        .prompt_with_message(&format!(
            "{message}\n\nEnter an access token for this memscope server (kept in this browser):"
        ))
        .ok()
        .flatten();
    let Some(token) = answer
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty() && t.chars().all(|c| c.is_ascii_graphic() && c != ';'))
    else {
        return false;
    };
    let init = web_sys::RequestInit::new();
    init.set_method("POST");
    let Ok(headers) = web_sys::Headers::new() else {
        return false;
    };
    if headers
        .set("authorization", &format!("Bearer {token}"))
        .is_err()
    {
        return false;
    }
    init.set_headers(&headers);
    let Ok(resp) = JsFuture::from(window.fetch_with_str_and_init(routes::SESSION, &init)).await
    else {
        return false;
    };
    let ok = resp.dyn_into::<web_sys::Response>().is_ok_and(|r| r.ok());
    if ok {
        SESSIONS.with(|s| s.set(s.get() + 1));
    } else {
        let _ = window.alert_with_message("The server did not accept that token.");
    }
    ok
}

async fn request(method: &str, url: &str, body: Option<String>) -> Result<Vec<u8>, String> {
    // A reading's id (`local/`): the server has no such snapshot yet.
    if url.strip_prefix(routes::SNAPSHOTS).is_some_and(|rest| {
        rest.trim_start_matches('/')
            .starts_with(crate::local::PREFIX)
    }) {
        return Err(crate::local::WAITS.to_string());
    }
    let sent_at = sessions();
    match request_once(method, url, body.clone()).await {
        Err((401, message)) if token_renewed(sent_at, &message).await => {
            request_once(method, url, body).await.map_err(|(_, m)| m)
        }
        other => other.map_err(|(_, m)| m),
    }
}

/// One request: the body, or the status and the server's message. The body comes as bytes,
/// copied once into the page's memory and decoded there: read as text, a 1 MB answer was
/// decoded into a JavaScript string and encoded back into UTF-8 for the decoder
/// (`passStringToWasm0`, 5–8 ms of the timeline's first answers in a CPU profile,
/// bench/README.md issue 41).
async fn request_once(
    method: &str,
    url: &str,
    body: Option<String>,
) -> Result<Vec<u8>, (u16, String)> {
    let fail = |m: String| (0u16, m);
    let init = page_request(method);
    if let Some(b) = body {
        init.set_body(&JsValue::from_str(&b));
        let headers = web_sys::Headers::new().map_err(|e| fail(format!("{e:?}")))?;
        headers
            .set("content-type", "application/json")
            .map_err(|e| fail(format!("{e:?}")))?;
        init.set_headers(&headers);
    }
    let window = web_sys::window().ok_or_else(|| fail("no window".into()))?;
    let prefetched = match method {
        "GET" => PREFETCHED.with(|p| p.borrow_mut().remove(url)),
        _ => None,
    };
    let answer = prefetched.unwrap_or_else(|| window.fetch_with_str_and_init(url, &init));
    let resp = JsFuture::from(answer)
        .await
        .map_err(|e| fail(format!("network error: {e:?}")))?;
    let resp: web_sys::Response = resp.dyn_into().map_err(|_| fail("bad response".into()))?;
    let bytes = JsFuture::from(resp.array_buffer().map_err(|e| fail(format!("{e:?}")))?)
        .await
        .map_err(|e| fail(format!("{e:?}")))?;
    let bytes = js_sys::Uint8Array::new(&bytes).to_vec();
    if resp.ok() {
        Ok(bytes)
    } else {
        Err((
            resp.status(),
            error_message(&String::from_utf8_lossy(&bytes))
                .unwrap_or_else(|| format!("{} {}", resp.status(), resp.status_text())),
        ))
    }
}

/// Decodes an answer into its type; a mismatch names the URL and the field.
fn decode<T: DeserializeOwned>(url: &str, body: &[u8]) -> Result<T, String> {
    serde_json::from_slice(body).map_err(|e| format!("unexpected answer from {url}: {e}"))
}

async fn get<T: DeserializeOwned>(url: String) -> Result<T, String> {
    let body = request("GET", &url, None).await?;
    decode(&url, &body)
}

/// A snapshot's `GET` at `url`, or, for a reading's id (`local/`), `question` to its worker,
/// which answers it as the server would.
async fn snapshot_get<T: DeserializeOwned>(
    id: &str,
    question: impl FnOnce() -> local::Question,
    url: String,
) -> Result<T, String> {
    if local::is_local(id) {
        return local::answer(id, &question()).await;
    }
    get(url).await
}

pub async fn snapshots(q: &api::ListQuery) -> Result<Vec<api::SnapshotInfo>, String> {
    get(routes::snapshots(q)).await
}

pub async fn report(id: &str) -> Result<api::Report, String> {
    snapshot_get(id, || local::Question::Report, routes::snapshot(id)).await
}

pub async fn info(id: &str) -> Result<api::SnapshotInfo, String> {
    snapshot_get(id, || local::Question::Info, routes::info(id)).await
}

pub async fn timeline(id: &str, q: &api::TimelineQuery) -> Result<api::TimelineAnswer, String> {
    snapshot_get(
        id,
        || local::Question::Timeline(q.clone()),
        routes::timeline(id, q),
    )
    .await
}

pub async fn state(id: &str, q: &api::PositionQuery) -> Result<api::AllocatorState, String> {
    snapshot_get(
        id,
        || local::Question::State(q.clone()),
        routes::state(id, q),
    )
    .await
}

pub async fn events(id: &str, q: &api::EventsQuery) -> Result<api::EventsAround, String> {
    snapshot_get(
        id,
        || local::Question::Events(q.clone()),
        routes::events(id, q),
    )
    .await
}

pub async fn stacks(id: &str, q: &api::StacksQuery) -> Result<api::StackReport, String> {
    snapshot_get(
        id,
        || local::Question::Stacks(q.clone()),
        routes::stacks(id, q),
    )
    .await
}

pub async fn segments(id: &str, q: &api::DeviceQuery) -> Result<api::SegmentSpans, String> {
    snapshot_get(
        id,
        || local::Question::Segments(q.clone()),
        routes::segments(id, q),
    )
    .await
}

pub async fn whatif(id: &str, q: &api::WhatIfQuery) -> Result<api::WhatIf, String> {
    get(routes::whatif(id, q)).await
}

pub async fn whatif_progress(
    id: &str,
    q: &api::WhatIfQuery,
) -> Result<api::WhatIfProgress, String> {
    get(routes::whatif_progress(id, q)).await
}

pub async fn allocation(
    id: &str,
    n: u32,
    q: &api::DeviceQuery,
) -> Result<api::AllocationInfo, String> {
    snapshot_get(
        id,
        || local::Question::Allocation(n, q.clone()),
        routes::allocation(id, n, q),
    )
    .await
}

pub async fn frames(id: &str, stack: api::StackId) -> Result<Vec<api::Frame>, String> {
    snapshot_get(
        id,
        || local::Question::Frames(stack.0),
        routes::frames(id, stack),
    )
    .await
}

pub async fn diff(a: &str, b: &str, q: &api::DiffQuery) -> Result<api::DiffAnswer, String> {
    get(routes::diff(a, b, q)).await
}

/// Will it fit: predicted peaks at the sizes asked.
pub async fn predict(q: &api::PredictQuery) -> Result<api::PredictAnswer, String> {
    get(routes::predict(q)).await
}

/// The library's runs (jobs with two ranks or more).
pub async fn runs() -> Result<Vec<api::RunInfo>, String> {
    get(routes::runs()).await
}

pub async fn run(id: &str) -> Result<api::RunReport, String> {
    get(routes::run(id)).await
}

pub async fn run_series(id: &str, q: &api::RunSeriesQuery) -> Result<api::RunSeries, String> {
    get(routes::run_series(id, q)).await
}

pub async fn upload_progress(token: &str) -> Result<api::UploadProgress, String> {
    get(routes::upload_progress(token)).await
}

pub async fn fleet() -> Result<api::Fleet, String> {
    get(routes::live_fleet()).await
}

pub async fn gpu(uuid: &str, q: &api::WindowQuery) -> Result<api::GpuPage, String> {
    get(routes::live_gpu(uuid, q)).await
}

pub async fn process(
    host: &str,
    pid: i64,
    q: &api::WindowQuery,
) -> Result<api::ProcessPage, String> {
    get(routes::live_process(host, pid, q)).await
}

/// Renames and/or retags a snapshot; the answer is its entry as it now stands.
pub async fn update(id: &str, u: &api::UpdateSnapshot) -> Result<api::SnapshotInfo, String> {
    let url = routes::snapshot(id);
    let body = serde_json::to_string(u).map_err(|e| e.to_string())?;
    let answer = request("PATCH", &url, Some(body)).await?;
    decode(&url, &answer)
}

pub async fn delete(id: &str) -> Result<(), String> {
    request("DELETE", &routes::snapshot(id), None)
        .await
        .map(|_| ())
}

/// Uploads `file`, calling `progress(sent, total)` as bytes go out; resolves to the server's
/// answer (after it has indexed the file) or its error message.
/// Uploads `file` with `tags` (`job=…,rank=…`, when it is one of several uploaded together).
pub async fn upload(
    file: web_sys::File,
    token: &str,
    tags: Option<String>,
    progress: impl Fn(f64, f64) + Clone + 'static,
) -> Result<api::Uploaded, String> {
    let sent_at = sessions();
    match upload_once(file.clone(), token, tags.clone(), progress.clone()).await {
        Err((401, message)) if token_renewed(sent_at, &message).await => {
            upload_once(file, token, tags, progress)
                .await
                .map_err(|(_, m)| m)
        }
        other => other.map_err(|(_, m)| m),
    }
}

async fn upload_once(
    file: web_sys::File,
    token: &str,
    tags: Option<String>,
    progress: impl Fn(f64, f64) + 'static,
) -> Result<api::Uploaded, (u16, String)> {
    let fail = |m: String| (0u16, m);
    let xhr = web_sys::XmlHttpRequest::new().map_err(|e| fail(format!("{e:?}")))?;
    let url = routes::upload(&api::UploadQuery {
        name: Some(file.name()),
        token: Some(token.to_string()),
        tags,
        ..Default::default()
    });
    xhr.open("POST", &url).map_err(|e| fail(format!("{e:?}")))?;
    let on_progress =
        Closure::<dyn Fn(web_sys::ProgressEvent)>::new(move |e: web_sys::ProgressEvent| {
            progress(e.loaded(), e.total())
        });
    if let Ok(up) = xhr.upload() {
        up.set_onprogress(Some(on_progress.as_ref().unchecked_ref()));
    }
    let done = js_sys::Promise::new(&mut |resolve, _reject| {
        let r1 = resolve.clone();
        let onload = Closure::once_into_js(move || {
            let _ = r1.call0(&JsValue::NULL);
        });
        xhr.set_onload(Some(onload.unchecked_ref()));
        let onerror = Closure::once_into_js(move || {
            let _ = resolve.call0(&JsValue::NULL);
        });
        xhr.set_onerror(Some(onerror.unchecked_ref()));
    });
    xhr.send_with_opt_blob(Some(&file))
        .map_err(|e| fail(format!("{e:?}")))?;
    JsFuture::from(done)
        .await
        .map_err(|e| fail(format!("{e:?}")))?;
    drop(on_progress);
    let status = xhr.status().unwrap_or(0);
    let text = xhr.response_text().ok().flatten().unwrap_or_default();
    if status == 0 {
        return Err(fail("the upload was interrupted (network error)".into()));
    }
    if (200..300).contains(&status) {
        decode(&url, text.as_bytes()).map_err(fail)
    } else {
        Err((
            status,
            error_message(&text).unwrap_or_else(|| format!("upload failed with status {status}")),
        ))
    }
}
