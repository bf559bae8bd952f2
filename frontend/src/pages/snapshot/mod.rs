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
                        view! {
                            <button
                                class="tab"
                                data-tab=key
                                class:active=move || view_name.get() == key
                                on:click=move |_| url.set(&[("view", Some(key.to_string()))])
                            >
                                {*label}
                            </button>
                        }
                    })
                    .collect_view()}
            </nav>
            {move || report.get().and_then(|r| r.ok()).map(|r| device_picker(&r, url))}
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
