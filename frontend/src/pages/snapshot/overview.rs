//! The overview tab: headline figures, warnings, devices, allocator settings, and "compare with"
//! another snapshot of the library.

use std::sync::Arc;

use leptos::prelude::*;

use crate::pages::widgets::kv;
use crate::url::UrlState;
use crate::{api, fmt};

#[component]
pub fn Overview(report: Arc<::api::Report>) -> impl IntoView {
    let r = &*report;
    let f = &r.format;
    let settings = r
        .allocator_settings
        .as_ref()
        .map(|s| serde_json::to_string_pretty(s).unwrap_or_default());
    view! {
        <section class="overview">
            <div class="figures">
                {kv("segments", fmt::count(r.segments))}
                {kv("blocks", fmt::count(r.blocks))}
                {kv("reserved", fmt::bytes(r.reserved_bytes))}
                {kv("allocated", fmt::bytes(r.allocated_bytes))}
                {kv("requested", fmt::bytes(r.requested_bytes))}
                {kv("pending free", fmt::bytes(r.pending_free_bytes))}
                {kv("leak suspects", r.leak_suspects.len().to_string())}
                {kv("OOMs", r.ooms.len().to_string())}
                {kv("format", format!("{} {} ({})", f.encoding.as_str(), f.layout.as_str(), f.compression.as_str()))}
            </div>
            <CompareWith/>
            <h3>"Warnings"</h3>
            {if r.warnings.is_empty() {
                view! { <p class="ok">"none"</p> }.into_any()
            } else {
                view! {
                    <ul class="warnings">
                        {r.warnings
                            .iter()
                            .map(|w| view! { <li>{w.message.clone()}</li> })
                            .collect_view()}
                    </ul>
                }
                    .into_any()
            }}
            <h3>"Devices"</h3>
            <table class="devices">
                <tr>
                    <th>"device"</th>
                    <th>"events"</th>
                    <th>"peak live"</th>
                    <th>"actions"</th>
                </tr>
                {r.devices
                    .iter()
                    .map(|(d, v)| {
                        let actions = v
                            .actions
                            .iter()
                            .map(|(k, n)| format!("{} {n}", k.name()))
                            .collect::<Vec<_>>()
                            .join(", ");
                        view! {
                            <tr>
                                <td>{d.clone()}</td>
                                <td class="num">{fmt::count(v.entries)}</td>
                                <td class="num">{fmt::bytes(v.peak_live_bytes)}</td>
                                <td>{actions}</td>
                            </tr>
                        }
                    })
                    .collect_view()}
            </table>
            <h3>"Allocator settings"</h3>
            <pre class="settings">
                {settings.unwrap_or_else(|| "not recorded (before PyTorch 2.3)".to_string())}
            </pre>
        </section>
    }
}

/// "Compare with …": another snapshot of the library as A, this one as B (`/diff/A/B`).
#[component]
fn CompareWith() -> impl IntoView {
    let url: UrlState = expect_context();
    let others = LocalResource::new(move || {
        let id = url.id.get();
        async move {
            api::snapshots(&Default::default())
                .await
                .map(|l| l.into_iter().filter(|s| s.id != id).collect::<Vec<_>>())
        }
    });
    let chosen = RwSignal::new(String::new());
    view! {
        {move || match others.get() {
            Some(Ok(list)) if !list.is_empty() => {
                if chosen.get_untracked().is_empty() {
                    chosen.set(list[0].id.clone());
                }
                view! {
                    <p class="compare-with">
                        "Compare with "
                        <select on:change=move |ev| chosen.set(event_target_value(&ev))>
                            {list.into_iter().map(|s| view! {
                                <option value=s.id.clone()>{format!("{} ({})", s.name, fmt::date(s.uploaded_at_ms))}</option>
                            }).collect_view()}
                        </select>
                        " "
                        <a
                            class="compare"
                            href=move || {
                                let q = ::api::DiffQuery { device_a: None, device_b: url.device() };
                                ::api::routes::page::diff(&chosen.get(), &url.id.get(), &q)
                            }
                        >
                            "compare (that one as A, this one as B)"
                        </a>
                    </p>
                }
                .into_any()
            }
            _ => ().into_any(),
        }}
    }
}
