//! The leaks tab: each suspect (a stack whose allocations stay alive and were made throughout
//! the trace) with its figures, a sparkline of its live bytes, and a link to its allocations on
//! the timeline.

use std::sync::Arc;

use leptos::prelude::*;

use crate::fmt;
use crate::pages::widgets::frames_list;
use crate::url::UrlState;

/// A tiny line chart (SVG) of a series of numbers.
fn sparkline(values: &[f64]) -> impl IntoView + use<> {
    let max = values.iter().cloned().fold(1.0, f64::max);
    let n = values.len().max(2) as f64 - 1.0;
    let points: Vec<String> = values
        .iter()
        .enumerate()
        .map(|(i, v)| format!("{:.1},{:.1}", i as f64 / n * 200.0, 40.0 - v / max * 38.0))
        .collect();
    view! {
        <svg class="spark" viewBox="0 0 200 40" width="200" height="40">
            <polyline points=points.join(" ") fill="none" stroke="#d9480f" stroke-width="1.5"></polyline>
        </svg>
    }
}

#[component]
pub fn Leaks(report: Arc<::api::Report>) -> impl IntoView {
    let url: UrlState = expect_context();
    let several_devices = report.traced_devices().len() > 1;
    if report.leak_suspects.is_empty() {
        return view! {
            <p class="ok">"No leak suspects: no call stack keeps allocations alive that were made throughout the trace."</p>
        }
            .into_any();
    }
    view! {
        <section class="leaks">
            {report.leak_suspects
                .iter()
                .enumerate()
                .map(|(i, l)| {
                    let series: Vec<f64> = l.series.iter().map(|p| p.live_bytes as f64).collect();
                    let site = ::api::site_text(l.site.as_ref());
                    // The timeline greys every allocation whose stack does not contain this text.
                    let on_timeline = l.site.as_ref().map(|s| {
                        let needle = format!(
                            "{}:{}",
                            s.filename.rsplit('/').next().unwrap_or(""),
                            s.line
                        );
                        url.href(&[
                            ("view", "timeline".to_string()),
                            ("device", l.device.to_string()),
                            ("filter", needle),
                        ])
                    });
                    view! {
                        <article class="suspect">
                            <h3>
                                <span class="rank">{format!("#{}", i + 1)}</span>
                                {several_devices.then(|| view! { <span class="device">{format!("cuda:{} ", l.device)}</span> })}
                                <span class="site">{site}</span>
                            </h3>
                            <p>
                                {format!(
                                    "{} alive at the end in {} allocations, made across {:.0}% of the trace ({} allocations from this stack in all)",
                                    fmt::bytes(l.bytes),
                                    l.count,
                                    l.spread * 100.0,
                                    l.total_allocations,
                                )}
                            </p>
                            {sparkline(&series)}
                            <p class="leak-links">
                                {format!("made between events {} and {}. ", l.first_position, l.last_position)}
                                {on_timeline.map(|href| view! {
                                    <a class="on-timeline" href=href>"show its allocations on the timeline"</a>
                                })}
                            </p>
                            <details>
                                <summary>"stack"</summary>
                                {frames_list(&l.frames, 60)}
                            </details>
                        </article>
                    }
                })
                .collect_view()}
        </section>
    }
        .into_any()
}
