//! The leaks tab: each suspect (a call site whose live memory grows step over step) with how it
//! grows in words, a sparkline of its live bytes, its stack (user frames first, plumbing folded),
//! and a link to its allocations on the timeline, in a window around them. With none, what is
//! alive at the end is said to be just that, with a link to it by stack.

use std::sync::Arc;

use leptos::prelude::*;

use crate::fmt;
use crate::pages::widgets::stack_frames;
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

/// A time window around `[a, b]` (µs) with a margin on each side, so what happened there sits
/// inside the chart, not on its edges.
pub fn around(a_us: i64, b_us: i64) -> (i64, i64) {
    let span = (b_us - a_us).max(2_000);
    let pad = span / 20 + 1_000;
    (a_us - pad, b_us + pad)
}

#[component]
pub fn Leaks(report: Arc<::api::Report>) -> impl IntoView {
    let url: UrlState = expect_context();
    let several_devices = report.traced_devices().len() > 1;
    if report.leak_suspects.is_empty() {
        let (class, words) = match report.leak_check {
            ::api::LeakCheck::Ran => (
                "ok",
                "No leak suspects: no call site's live memory grows step over step.",
            ),
            other => ("empty no-trace", other.no_suspects_words()),
        };
        // What is alive at the end is alive at the end: shown by stack, not called a leak.
        let device = super::devices::shown_device(&report, url);
        let events = super::devices::shown_events(&report, url);
        let alive = (report.leak_check == ::api::LeakCheck::Ran && events > 0).then(|| {
            let href = url.href(&[
                ("view", "stacks".to_string()),
                ("device", device.unwrap_or_default().to_string()),
                ("pos", events.to_string()),
            ]);
            view! {
                <p class="alive-at-end">
                    "What is alive at the end (weights, optimizer state, a cache, the last step's activations) is alive at the end, not a leak: "
                    <a href=href>"memory by stack at the end"</a>
                    "."
                </p>
            }
        });
        return view! {
            <p class=class>{format!("Leak suspects: {words}")}</p>
            {alive}
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
                    // (A site without a line, C++ or a note, has nothing to search for.)
                    let on_timeline = l.site.as_ref().filter(|s| s.line > 0).map(|s| {
                        let needle = format!(
                            "{}:{}",
                            s.filename.rsplit('/').next().unwrap_or(""),
                            s.line
                        );
                        let (from, to) = around(l.first_time_us, l.last_time_us);
                        url.href(&[
                            ("view", "timeline".to_string()),
                            ("device", l.device.to_string()),
                            ("axis", "time".to_string()),
                            ("from", from.to_string()),
                            ("to", to.to_string()),
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
                            <p class="growth">{l.growth.clone()}</p>
                            <p class="figures-line">
                                {format!(
                                    "{} alive at the end in {} allocations, made across {:.0}% of the trace ({} allocations from this line in all{})",
                                    fmt::bytes(l.bytes),
                                    l.count,
                                    l.spread * 100.0,
                                    l.total_allocations,
                                    if l.stacks > 1 { format!(", through {} call paths", l.stacks) } else { String::new() },
                                )}
                            </p>
                            {sparkline(&series)}
                            <p class="leak-links">
                                {format!("made between events {} and {}. ", l.first_position, l.last_position)}
                                {on_timeline.map(|href| view! {
                                    <a class="on-timeline" href=href>"show its allocations on the timeline"</a>
                                })}
                            </p>
                            {stack_frames(&l.frames)}
                        </article>
                    }
                })
                .collect_view()}
        </section>
    }
        .into_any()
}
