//! The OOM tab: each `oom` event explained (what was asked, what the driver and PyTorch held,
//! the verdict) with links to the allocator's state and memory by stack at that moment.

use std::sync::Arc;

use leptos::prelude::*;

use crate::fmt;
use crate::pages::widgets::kv;
use crate::url::UrlState;

#[component]
pub fn Ooms(report: Arc<::api::Report>) -> impl IntoView {
    let url: UrlState = expect_context();
    if report.ooms.is_empty() {
        return view! { <p class="ok">"No out-of-memory events in this trace."</p> }.into_any();
    }
    view! {
        <section class="ooms">
            {report.ooms
                .iter()
                .map(|o| {
                    let at_oom = |view: &str| {
                        url.href(&[
                            ("view", view.to_string()),
                            ("device", o.device.to_string()),
                            ("pos", o.position.to_string()),
                        ])
                    };
                    view! {
                        <article class="oom">
                            <h3>
                                {format!("device {} at event {}: ", o.device, o.position)}
                                <span class="verdict">{o.verdict.as_str().replace('_', " ")}</span>
                            </h3>
                            <p>{o.explanation.clone()}</p>
                            <div class="figures">
                                {kv("requested", fmt::bytes(o.requested_bytes))}
                                {kv("driver free", o.device_free_bytes.map_or("unknown".into(), fmt::bytes))}
                                {kv("reserved", fmt::bytes(o.reserved_bytes))}
                                {kv("allocated", fmt::bytes(o.allocated_bytes))}
                                {kv("cached free", fmt::bytes(o.cached_free_bytes))}
                                {kv("largest free block", fmt::bytes(o.largest_free_block_bytes))}
                            </div>
                            <p class="oom-links">
                                "At this moment: "
                                <a class="oom-segments" href=at_oom("segments")>
                                    "the allocator's segments"
                                </a>
                                " · "
                                <a class="oom-stacks" href=at_oom("stacks")>
                                    "memory by stack"
                                </a>
                            </p>
                            <h4>"Largest call sites at the OOM"</h4>
                            <ul>
                                {o.largest_sites
                                    .iter()
                                    .map(|s| view! { <li>{format!("{}  {}", fmt::bytes(s.bytes), ::api::site_text(s.site.as_ref()))}</li> })
                                    .collect_view()}
                            </ul>
                        </article>
                    }
                })
                .collect_view()}
        </section>
    }
        .into_any()
}
