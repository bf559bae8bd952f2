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
mod whatif;

use std::sync::Arc;

use leptos::prelude::*;
use leptos_router::hooks::{use_params_map, use_query_map};

use crate::url::UrlState;
use crate::{api, fmt};
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
            <SnapshotActions id=id/>
        </div>
        {move || match report.get() {
            None => view! { <p>"loading…"</p> }.into_any(),
            Some(Err(e)) => crate::pages::widgets::error_line(e).into_any(),
            Some(Ok(r)) => {
                // A new device mounts the view afresh (its event count, its positions).
                let _ = device.get();
                match view_name.get().as_str() {
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
                        view! { <timeline::TimelineView steps=steps survived=survived/> }.into_any()
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
                }
            }
        }}
    }
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
