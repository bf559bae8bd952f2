//! A snapshot's page: tabs for each view (one file each); the view, device, window and position
//! live in the URL query (`url.rs`), so a shared link opens the same view.

mod bands;
mod context;
mod devices;
mod icicle;
mod leaks;
mod oom;
mod overview;
mod segments;
mod stacks;
mod timeline;
pub(crate) mod whatif;

use std::sync::Arc;

use leptos::prelude::*;
use leptos_router::hooks::{use_params_map, use_query_map};

use crate::url::UrlState;
use crate::{api, fmt, local};
use context::Revision;

pub const TABS: [(&str, &str); 7] = [
    ("overview", "Overview"),
    ("timeline", "Timeline"),
    ("segments", "Segments"),
    ("stacks", "Stacks"),
    ("leaks", "Leaks"),
    ("oom", "OOM"),
    ("whatif", "What if"),
];

/// What each tab shows, in a line, for someone who has not read the README (shown under the
/// tabs).
pub const TAB_ABOUT: [(&str, &str); 7] = [
    (
        "overview",
        "The answer first (what ended the run, what grows), then this snapshot's figures. Dotted labels explain themselves; press ? for keys and words.",
    ),
    (
        "timeline",
        "Memory over the recorded trace: each band one allocation, stacked by age; the orange line is reserved memory, what PyTorch holds from the GPU. Drag or ← → to pan, wheel or + − to zoom, n p for the next OOM or leak.",
    ),
    (
        "segments",
        "The allocator's state at one moment: each row a segment PyTorch got from the driver, each block a tensor or a free piece. ← → step through events; hover a block for the line that made it.",
    ),
    (
        "stacks",
        "Which lines of code hold memory at one moment (the peak unless you pick another), or, weighed by bytes × time held, which held it longest over the whole trace: the tree, then every call site. / searches them.",
    ),
    (
        "leaks",
        "Allocations that pile up step after step and are never freed, with the line that makes them and how fast they grow.",
    ),
    (
        "oom",
        "Each out-of-memory error: what was asked, what was free, and why it did not fit (growth, fragmentation, or memory held outside PyTorch).",
    ),
    (
        "whatif",
        "The trace replayed through a model of PyTorch's caching allocator under other settings: which would have avoided the OOM or lowered the peak, checked against what was recorded.",
    ),
];

/// Moves the `.focused` mark to the next (`forward`) or previous of the cards `selector` finds
/// (the OOM or Leaks tab's incidents) and scrolls it into view.
fn step_cards(selector: &str, forward: bool) {
    let Some(doc) = web_sys::window().and_then(|w| w.document()) else {
        return;
    };
    let Ok(list) = doc.query_selector_all(selector) else {
        return;
    };
    let cards: Vec<web_sys::Element> = (0..list.length())
        .filter_map(|i| list.item(i))
        .filter_map(|n| wasm_bindgen::JsCast::dyn_into(n).ok())
        .collect();
    if cards.is_empty() {
        return;
    }
    let now = cards
        .iter()
        .position(|c| c.class_list().contains("focused"));
    let next = match (now, forward) {
        (None, true) => 0,
        (None, false) => cards.len() - 1,
        (Some(i), true) => (i + 1).min(cards.len() - 1),
        (Some(i), false) => i.saturating_sub(1),
    };
    for c in &cards {
        let _ = c.class_list().remove_1("focused");
    }
    let _ = cards[next].class_list().add_1("focused");
    cards[next].scroll_into_view();
}

/// Focuses the first element `selector` finds once it is there (a view that is mounting).
fn focus_when_there(selector: &'static str, tries: u32) {
    let found = web_sys::window()
        .and_then(|w| w.document())
        .and_then(|d| d.query_selector(selector).ok().flatten())
        .and_then(|e| wasm_bindgen::JsCast::dyn_into::<web_sys::HtmlElement>(e).ok());
    match found {
        Some(el) => {
            let _ = el.focus();
        }
        None if tries > 0 => set_timeout(
            move || focus_when_there(selector, tries - 1),
            std::time::Duration::from_millis(50),
        ),
        None => {}
    }
}

/// The snapshot page's keys: 1–7 pick a tab, / searches call sites, n p step through the OOM
/// or Leaks tab's incidents (the timeline has its own n p, and its pan and zoom, and its 0);
/// true when the key was one of them.
fn on_key(ev: &web_sys::KeyboardEvent, url: UrlState, view: &str) -> bool {
    let key = ev.key();
    // "0" parses but names no tab.
    if let Some(tab) = key
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_sub(1))
        .and_then(|i| TABS.get(i))
    {
        url.set(&[("view", Some(tab.0.to_string()))]);
        return true;
    }
    match (key.as_str(), view) {
        ("/", "timeline") => focus_when_there("input.filter", 0),
        ("/", _) => {
            if view != "stacks" {
                url.set(&[("view", Some("stacks".to_string()))]);
            }
            focus_when_there("input.site-search", 60);
        }
        ("n" | "p", "oom") => step_cards(".oom", key == "n"),
        ("n" | "p", "leaks") => step_cards(".suspect", key == "n"),
        _ => return false,
    }
    true
}

#[component]
pub fn SnapshotPage() -> impl IntoView {
    api::page_scope();
    let params = use_params_map();
    let query = use_query_map();
    let id = Memo::new(move |_| params.get().get("id").unwrap_or_default());
    let url = UrlState {
        id,
        query: Memo::new(move |_| query.get()),
    };
    let view_name = Memo::new(move |_| url.get("view").unwrap_or_else(|| "overview".into()));
    match view_name.get_untracked().as_str() {
        "timeline" => timeline::prefetch(url),
        "segments" => segments::prefetch(url),
        _ => {}
    }
    let device = Memo::new(move |_| url.device());
    let revision = Revision(RwSignal::new(0));
    let report = LocalResource::new(move || {
        let id = id.get();
        revision.0.track();
        async move { api::report(&id).await.map(Arc::new) }
    });
    let info = LocalResource::new(move || {
        let id = id.get();
        revision.0.track();
        async move { api::info(&id).await }
    });
    provide_context(url);
    provide_context(revision);
    provide_context(info);
    follow_landing(id);
    crate::pages::help::on_shortcut(move |ev| on_key(ev, url, &view_name.get_untracked()));

    view! {
        <div class="snapshot-head">
            <h1>{move || info.get().and_then(|r| r.ok()).map(|i| i.name)}</h1>
            <nav class="tabs">
                {TABS
                    .iter()
                    .map(|(key, label)| {
                        let key = *key;
                        // A link (open in a new tab, copy its address); a plain click
                        // switches in place, as before, without a history entry per tab.
                        view! {
                            <a
                                class="tab"
                                data-tab=key
                                href=move || url.href_with(&[("view", Some(key.to_string()))])
                                class:active=move || view_name.get() == key
                                on:click=move |ev: web_sys::MouseEvent| {
                                    if ev.button() == 0 && !(ev.ctrl_key() || ev.meta_key() || ev.shift_key() || ev.alt_key()) {
                                        ev.prevent_default();
                                        url.set(&[("view", Some(key.to_string()))]);
                                    }
                                }
                            >
                                {*label}
                            </a>
                        }
                    })
                    .collect_view()}
            </nav>
            {move || report.get().and_then(|r| r.ok()).map(|r| device_picker(&r, url))}
            {move || (!local::is_local(&id.get())).then(|| view! { <SnapshotActions id=id/> })}
        </div>
        {move || reading_line(&id.get())}
        <p class="tab-about">
            {move || {
                let v = view_name.get();
                TAB_ABOUT.iter().find(|(k, _)| *k == v).map(|(_, about)| *about)
            }}
        </p>
        {move || match report.get() {
            None => view! { <p>"loading…"</p> }.into_any(),
            Some(Err(e)) => crate::pages::widgets::error_line(e).into_any(),
            Some(Ok(r)) => {
                // A new device mounts the view afresh (its event count, its positions); nothing
                // else in the address does. The views follow their own keys, and a remount on a
                // zoom or a step would fetch the whole trace again and drop keys pressed before
                // it came back, so what is read below is read untracked.
                let _ = device.get();
                let name = view_name.get();
                untrack(move || match name.as_str() {
                    // Nothing to draw over time without a trace: say so instead of an empty chart.
                    "timeline" if devices::shown_events(&r, url) == 0 => view! {
                        <p class="empty no-trace">
                            "This snapshot has no trace (history was not recorded), so there is no timeline: only the allocator's state when it was taken. "
                            <a href="?view=segments">"See its segments"</a>
                            ", and record the next run with torch.cuda.memory._record_memory_history() before the work starts."
                        </p>
                    }
                    .into_any(),
                    "timeline" => {
                        let steps = devices::shown_steps(&r, url);
                        let shown = devices::shown_device(&r, url);
                        // The OOMs the run survived: marked apart from the one that ended it.
                        let survived: Vec<u32> = r
                            .ooms
                            .iter()
                            .filter(|o| o.recovered && Some(o.device) == shown)
                            .map(|o| o.position)
                            .collect();
                        let marks = timeline_marks(&r, shown);
                        view! { <timeline::TimelineView steps=steps survived=survived marks=marks/> }.into_any()
                    }
                    "whatif" if devices::shown_events(&r, url) == 0 => view! {
                        <p class="empty no-trace">
                            "This snapshot has no trace (history was not recorded), so there is nothing to replay under other allocator settings. Record the next run with torch.cuda.memory._record_memory_history() before the work starts."
                        </p>
                    }
                    .into_any(),
                    "whatif" => view! { <whatif::WhatIfView/> }.into_any(),
                    "segments" => view! { <segments::Segments report=r/> }.into_any(),
                    "stacks" => view! { <stacks::Stacks report=r/> }.into_any(),
                    "leaks" => view! { <leaks::Leaks report=r/> }.into_any(),
                    "oom" => view! { <oom::Ooms report=r/> }.into_any(),
                    _ => view! { <overview::Overview report=r/> }.into_any(),
                })
            }
        }}
    }
}

/// On a reading's page (`local/`): once its upload lands, the stored snapshot's page in its
/// place, on the same view, device and window. A reading whose upload failed is ended when its
/// page is left: nothing else will open it, and its worker holds the file.
fn follow_landing(id: Memo<String>) {
    let landings: local::Landings = expect_context();
    let navigate = leptos_router::hooks::use_navigate();
    on_cleanup(move || {
        let Some(id) = id.try_get_untracked() else {
            return;
        };
        let failed = landings
            .0
            .try_with_untracked(|m| matches!(m.get(&id), Some(local::Landing::Failed(_))));
        if failed == Some(true) {
            local::close(&id);
        }
    });
    Effect::new(move |_| {
        let id = id.get();
        if !local::is_local(&id) {
            return;
        }
        if let Some(local::Landing::Landed(stored)) = landings.get(&id) {
            let search = web_sys::window()
                .and_then(|w| w.location().search().ok())
                .unwrap_or_default();
            let to = ::api::routes::page::snapshot::<&str, &str>(&stored, &[]);
            navigate(
                &format!("{to}{search}"),
                leptos_router::NavigateOptions {
                    replace: true,
                    ..Default::default()
                },
            );
        }
    });
}

/// What a reading's page says it is: the browser's own reading of the file, how far its upload
/// has got, or that the upload failed.
fn reading_line(id: &str) -> Option<impl IntoView + use<>> {
    if !local::is_local(id) {
        return None;
    }
    let landings: local::Landings = expect_context();
    let id = id.to_string();
    let line = move || match landings.get(&id) {
        Some(local::Landing::Failed(e)) => format!(
            "The upload failed: {e}. This page is your browser's own reading of the file; it is not stored."
        ),
        Some(local::Landing::Sending(sent)) => format!(
            "Read in your browser while the file uploads ({:.0} % sent): every view but What if shows this file's own figures, computed as the server computes them; What if opens when the upload lands, and this page then moves to the stored snapshot.",
            sent * 100.0
        ),
        _ => {
            "Read in your browser: the upload has landed, opening the stored snapshot…".to_string()
        }
    };
    Some(view! { <p class="reading">{line}</p> })
}

/// What to take away from a snapshot's page: the report to share (HTML, Markdown), the
/// original file, and this page's address.
#[component]
fn SnapshotActions(id: Memo<String>) -> impl IntoView {
    let copied = RwSignal::new(None::<Result<(), String>>);
    let report = move |format: ::api::ReportFormat| {
        ::api::routes::report(
            &id.get(),
            &::api::ReportQuery {
                format: Some(format),
            },
        )
    };
    let copy = move |_| {
        let href = web_sys::window()
            .and_then(|w| w.location().href().ok())
            .unwrap_or_default();
        leptos::task::spawn_local(async move {
            copied.set(Some(
                crate::export::copy_text(&href).await.map_err(|_| href),
            ));
        });
    };
    view! {
        <div class="snapshot-actions">
            <a class="export-report" href=move || report(::api::ReportFormat::Html) download
                title="One self-contained HTML file: verdicts, the memory chart, call sites, leaks, OOMs and what-if; opens offline">
                "Export report"
            </a>
            <a class="export-markdown" href=move || report(::api::ReportFormat::Md) download
                title="A Markdown summary to paste into a GitHub issue">
                "Markdown"
            </a>
            <a class="download-original" href=move || ::api::routes::original(&id.get()) download
                title="The snapshot file as it was uploaded">
                "Download original"
            </a>
            <button class="copy-link" on:click=copy title="Copy this page's address: the same view, device and moment">
                "Copy link"
            </button>
            {move || match copied.get() {
                None => ().into_any(),
                Some(Ok(())) => view! { <span class="copied">"link copied"</span> }.into_any(),
                // No clipboard (a page not in focus, a browser that refuses): the address,
                // selected, to copy by hand.
                Some(Err(href)) => view! {
                    <input class="copy-fallback" readonly value=href
                        on:focus=|ev| { event_target::<web_sys::HtmlInputElement>(&ev).select(); }
                    />
                }
                .into_any(),
            }}
        </div>
    }
}

/// Where the timeline's `n` and `p` go on `device`: its OOMs and its leak suspects' last
/// allocations.
fn timeline_marks(r: &::api::Report, device: Option<i32>) -> Vec<timeline::Mark> {
    let ooms = r
        .ooms
        .iter()
        .filter(|o| Some(o.device) == device)
        .map(|o| timeline::Mark {
            position: o.position,
            time_us: o.time_us,
        });
    let leaks = r
        .leak_suspects
        .iter()
        .filter(|l| Some(l.device) == device)
        .map(|l| timeline::Mark {
            position: l.last_position,
            time_us: l.last_time_us,
        });
    ooms.chain(leaks).collect()
}

/// A choice of device when the snapshot traced more than one; the views follow it.
fn device_picker(report: &::api::Report, url: UrlState) -> impl IntoView + use<> {
    let devices = report.all_devices();
    let shown = devices::shown_device(report, url);
    (devices.len() > 1).then(|| {
        view! {
            <label class="device-picker">
                "device "
                <select on:change=move |ev| {
                    url.set(&[
                        ("device", Some(event_target_value(&ev))),
                        ("from", None),
                        ("to", None),
                        ("pos", None),
                        // An allocation's index is per device.
                        ("sel", None),
                    ])
                }>
                    {devices
                        .into_iter()
                        .map(|(d, n)| {
                            view! {
                                <option value=d.to_string() selected=Some(d) == shown>
                                    {if n == 0 {
                                        format!("cuda:{d} (segments only)")
                                    } else {
                                        format!("cuda:{d} ({} events)", fmt::count(n))
                                    }}
                                </option>
                            }
                        })
                        .collect_view()}
                </select>
            </label>
        }
    })
}
