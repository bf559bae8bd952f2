//! Runs set side by side, for the two-snapshot diff (`diff.rs`) and the sweep of several
//! (`sweep.rs`): their memory curves overlaid on one chart (by time from each start, by event, or
//! by step where every run has steps), a colour each; and what ended each run, the OOM that
//! raised, what a setting would have done and the leak suspects, a column each. Each run's report
//! is fetched once and read by both.

use leptos::prelude::*;

use crate::{api, fmt};

/// One run compared: its snapshot, the device shown (none: the report's default), the label on
/// the chart's key and its colour.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    pub id: String,
    pub name: String,
    pub device: Option<i32>,
    pub label: String,
    pub colour: &'static str,
}

/// Run colours in order: distinct hues, none the timeline's reserved orange-red.
const PALETTE: [&str; 10] = [
    "#4c6ef5", "#f76707", "#2f9e44", "#ae3ec9", "#1098ad", "#e64980", "#f59f00", "#5c940d",
    "#845ef7", "#495057",
];

/// The `k`th run's colour.
pub fn colour(k: usize) -> &'static str {
    PALETTE[k % PALETTE.len()]
}

/// Which x axis the overlaid curves share.
#[derive(Clone, Copy, PartialEq)]
enum Along {
    /// Microseconds from the start of each one's shown span.
    Time,
    /// Event index.
    Event,
    /// Step number (a fraction inside a step), where every run has steps.
    Step,
}

/// One run's curve: (x on the chosen axis, live bytes, reserved bytes) per bucket.
type Curve = Vec<(f64, u64, u64)>;

/// One run's curve on the chosen axis.
fn curve(t: &::api::TimelineAnswer, along: Along, steps: Option<&::api::Steps>) -> Curve {
    let b = &t.timeline.buckets;
    let t0 = b.first().map_or(0, |k| k.time_us);
    b.iter()
        .filter_map(|k| {
            let x = match along {
                Along::Time => (k.time_us - t0) as f64,
                Along::Event => k.first as f64,
                Along::Step => {
                    let s = steps?;
                    let i = s.starts.partition_point(|&p| p <= k.first).checked_sub(1)?;
                    let (from, to) = (
                        s.starts[i],
                        s.starts.get(i + 1).copied().unwrap_or(t.timeline.events),
                    );
                    s.numbers[i] as f64 + (k.first - from) as f64 / (to - from).max(1) as f64
                }
            };
            Some((x, k.live_max_bytes, k.reserved_max_bytes))
        })
        .collect()
}

/// The runs' curves and verdicts, from their reports (fetched once here).
#[component]
pub fn RunsCompared(runs: Vec<Run>) -> impl IntoView {
    let ids: Vec<String> = runs.iter().map(|r| r.id.clone()).collect();
    let reports = LocalResource::new(move || {
        let ids = ids.clone();
        async move {
            let mut out = Vec::new();
            for id in ids {
                out.push(api::report(&id).await?);
            }
            Ok::<_, String>(out)
        }
    });
    move || match reports.get() {
        None => view! { <p>"reading the reports…"</p> }.into_any(),
        Some(Err(e)) => crate::pages::widgets::error_line(e).into_any(),
        Some(Ok(reports)) => {
            let runs: Vec<Run> = runs
                .iter()
                .zip(&reports)
                .map(|(r, rep)| Run {
                    device: r.device.or(rep.default_device),
                    ..r.clone()
                })
                .collect();
            let steps: Vec<Option<::api::Steps>> = runs
                .iter()
                .zip(&reports)
                .map(|(r, rep)| {
                    r.device
                        .and_then(|d| rep.devices.get(&d))
                        .and_then(|s| s.steps.clone())
                })
                .collect();
            view! {
                <Overlaid runs=runs.clone() steps=steps/>
                <Verdicts runs=runs reports=reports/>
            }
            .into_any()
        }
    }
}

/// The runs' memory curves on one chart: live solid, reserved dashed, a colour each.
#[component]
fn Overlaid(runs: Vec<Run>, steps: Vec<Option<::api::Steps>>) -> impl IntoView {
    let along = RwSignal::new(Along::Time);
    let asked: Vec<(String, Option<i32>)> = runs.iter().map(|r| (r.id.clone(), r.device)).collect();
    let curves = LocalResource::new(move || {
        let asked = asked.clone();
        let axis = if along.get() == Along::Time {
            ::api::Axis::Time
        } else {
            ::api::Axis::Event
        };
        async move {
            let mut out = Vec::new();
            for (id, device) in asked {
                let q = ::api::TimelineQuery {
                    device,
                    axis: Some(axis),
                    buckets: Some(600),
                    allocations: Some(0),
                    ..Default::default()
                };
                out.push(api::timeline(&id, &q).await?);
            }
            Ok::<_, String>(out)
        }
    });
    let has_steps = steps.iter().all(Option::is_some);
    let steps = StoredValue::new(steps);
    let colours: Vec<&'static str> = runs.iter().map(|r| r.colour).collect();
    let canvas = NodeRef::<leptos::html::Canvas>::new();
    Effect::new(move |_| {
        let (Some(Ok(answers)), Some(c)) = (curves.get(), canvas.get()) else {
            return;
        };
        let mode = along.get();
        let lines: Vec<(Curve, &'static str)> = steps.with_value(|steps| {
            answers
                .iter()
                .zip(steps)
                .zip(&colours)
                .map(|((t, s), colour)| (curve(t, mode, s.as_ref()), *colour))
                .collect()
        });
        draw_overlay(&c, &lines, mode);
        let _ = c.set_attribute("data-runs", &lines.len().to_string());
    });
    let button = move |mode: Along, label: &'static str, class: &'static str| {
        view! {
            <button class=class class:active=move || along.get() == mode on:click=move |_| along.set(mode)>{label}</button>
        }
    };
    view! {
        <h3>"Memory over each run, overlaid"</h3>
        <p class="toolbar overlay-axes">
            {button(Along::Time, "by time from each start", "by-time")}
            {button(Along::Event, "by event", "by-event")}
            {has_steps.then(|| button(Along::Step, "by step", "by-step"))}
            {runs.iter().map(|r| view! {
                <span class="key"><i style=format!("background:{}", r.colour)></i>{r.label.clone()}</span>
            }).collect_view()}
            <span class="muted">"live solid, reserved dashed"</span>
        </p>
        {move || match curves.get() {
            Some(Err(e)) => crate::pages::widgets::error_line(e).into_any(),
            _ => ().into_any(),
        }}
        <canvas id="overlay" class="overlay" node_ref=canvas width=crate::canvas::content_width(600.0, 1200.0) as u32 height="240"></canvas>
    }
}

fn draw_overlay(c: &web_sys::HtmlCanvasElement, lines: &[(Curve, &'static str)], along: Along) {
    use crate::canvas::{Ink, Scale, byte_axis_max, byte_grid, ink, logical_size, sharp};
    let (w, h) = logical_size(c);
    let g = sharp(c, w, h);
    g.set_fill_style_str(&ink(Ink::Paper));
    g.fill_rect(0.0, 0.0, w, h);
    let points = || lines.iter().flat_map(|(pts, _)| pts.iter());
    let x1 = points().map(|p| p.0).fold(1.0, f64::max);
    let x0 = points().map(|p| p.0).fold(x1, f64::min).min(0.0);
    let ymax = byte_axis_max(
        points().map(|p| p.1.max(p.2) as f64).fold(1.0, f64::max),
        1.05,
    );
    let (xs, ys) = (
        Scale::new(x0, x1, 70.0, w - 10.0),
        Scale::new(0.0, ymax, h - 22.0, 8.0),
    );
    byte_grid(&g, &ys, 70.0, w - 10.0, 4);
    for (pts, colour) in lines {
        for dashed in [false, true] {
            g.begin_path();
            for (i, p) in pts.iter().enumerate() {
                let y = ys.at(if dashed { p.2 } else { p.1 } as f64);
                if i == 0 {
                    g.move_to(xs.at(p.0), y);
                } else {
                    g.line_to(xs.at(p.0), y);
                }
            }
            g.set_stroke_style_str(colour);
            g.set_line_width(if dashed { 1.0 } else { 1.8 });
            let dash = if dashed {
                js_sys::Array::of2(&5.0.into(), &3.0.into())
            } else {
                js_sys::Array::new()
            };
            let _ = g.set_line_dash(&dash);
            g.stroke();
        }
    }
    let _ = g.set_line_dash(&js_sys::Array::new());
    g.set_fill_style_str(&ink(Ink::Text));
    let label = |x: f64| match along {
        Along::Time => fmt::seconds(x),
        Along::Event => format!("event {}", fmt::count(x as u64)),
        Along::Step => format!("step {x:.0}"),
    };
    for k in 0..=4 {
        let x = x0 + (x1 - x0) * k as f64 / 4.0;
        let text = label(x);
        let tw = g.measure_text(&text).map_or(40.0, |m| m.width());
        let _ = g.fill_text(
            &text,
            (xs.at(x) - tw / 2.0).clamp(2.0, w - tw - 2.0),
            h - 6.0,
        );
    }
}

/// What ended a run, in a sentence.
fn ended(r: &::api::Report) -> String {
    r.oom_outcome
        .clone()
        .unwrap_or_else(|| "No OOM in the trace.".to_string())
}

/// The OOM that raised: its verdict and line.
fn fatal(r: &::api::Report) -> String {
    match r.ooms.iter().find(|o| !o.recovered) {
        Some(o) => format!(
            "{}: {}",
            o.verdict.as_str(),
            ::api::site_text(o.site.as_ref())
        ),
        None => "—".to_string(),
    }
}

fn leaks(r: &::api::Report) -> String {
    match r.leak_suspects.first() {
        Some(l) => format!(
            "{} ({} suspects)",
            ::api::site_text(l.site.as_ref()),
            r.leak_suspects.len()
        ),
        None => "none".to_string(),
    }
}

/// What each run's trace, replayed through the allocator model under the built-in settings (and
/// the limit its OOM implies), says a setting would have done: the what-if tab's answer, in
/// words. Replayed one run after another, after the rest of the page.
#[component]
fn WhatIfRow(runs: Vec<Run>) -> impl IntoView {
    let n = runs.len();
    let asked: Vec<(String, Option<i32>)> = runs.iter().map(|r| (r.id.clone(), r.device)).collect();
    let answers = LocalResource::new(move || {
        let asked = asked.clone();
        async move {
            let mut out = Vec::new();
            for (id, device) in asked {
                let q = ::api::WhatIfQuery {
                    device,
                    ..Default::default()
                };
                out.push(match api::whatif(&id, &q).await {
                    Ok(w) => crate::pages::snapshot::whatif::answer_words(&w),
                    Err(e) => format!("not replayed: {e}"),
                });
            }
            out
        }
    });
    view! {
        <tr class="v-whatif">
            <th>"what a setting would have done (simulated)"</th>
            {move || match answers.get() {
                None => (0..n)
                    .map(|_| view! { <td class="muted">"replaying…"</td> })
                    .collect_view()
                    .into_any(),
                Some(cells) => cells
                    .into_iter()
                    .map(|text| view! { <td>{text}</td> })
                    .collect_view()
                    .into_any(),
            }}
        </tr>
    }
}

/// What ended each run and what a setting would have done, a column each; a cell that differs
/// from the first run's is marked.
#[component]
fn Verdicts(runs: Vec<Run>, reports: Vec<::api::Report>) -> impl IntoView {
    let row = |what: &'static str, class: &'static str, f: fn(&::api::Report) -> String| {
        let cells: Vec<String> = reports.iter().map(f).collect();
        let first = cells.first().cloned();
        view! {
            <tr class=class>
                <th>{what}</th>
                {cells.into_iter().enumerate().map(|(k, text)| {
                    let changed = k > 0 && Some(&text) != first.as_ref();
                    view! { <td class:changed=changed>{text}</td> }
                }).collect_view()}
            </tr>
        }
    };
    view! {
        <h3>"Verdicts side by side"</h3>
        <table class="verdicts-side">
            <thead>
                <tr>
                    <th></th>
                    {runs.iter().map(|r| view! {
                        <th><span class="swatch" style=format!("background:{}", r.colour)></span>{format!(" {}", r.label)}</th>
                    }).collect_view()}
                </tr>
            </thead>
            <tbody>
                {row("what ended the run", "v-outcome", ended)}
                {row("the OOM that raised: cause and line", "v-fatal", fatal)}
                <WhatIfRow runs=runs.clone()/>
                {row("leak suspects", "v-leaks", leaks)}
            </tbody>
        </table>
    }
}
