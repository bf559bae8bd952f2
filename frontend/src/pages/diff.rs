//! Two snapshots compared (`/diff/A/B`): their memory curves overlaid (by time from each one's
//! start, by event, or by step), what ended each run and what a setting would have done side by
//! side, headline figures (coloured by what a change means), memory by call site at each peak
//! and leak suspects, matched by call site so that two runs of the same code line up. The server
//! does the matching (`GET /api/diff/A/B`); this page lays it out.

use ::api::routes::page;
use leptos::prelude::*;
use leptos_router::hooks::{use_params_map, use_query_map};

use crate::pages::widgets::frames_list;
use crate::{api, fmt};

#[component]
pub fn DiffPage() -> impl IntoView {
    api::page_scope();
    let params = use_params_map();
    let ids = Memo::new(move |_| {
        let p = params.get();
        (
            p.get("a").unwrap_or_default(),
            p.get("b").unwrap_or_default(),
        )
    });
    // `?device_a=&device_b=` pass through to the API (default: each one's first traced device).
    let query = use_query_map();
    let devices = Memo::new(move |_| {
        let q = query.get();
        ::api::DiffQuery {
            device_a: q.get("device_a").and_then(|v| v.parse().ok()),
            device_b: q.get("device_b").and_then(|v| v.parse().ok()),
        }
    });
    let data = LocalResource::new(move || {
        let ((a, b), dq) = (ids.get(), devices.get());
        async move { api::diff(&a, &b, &dq).await }
    });
    view! {
        <section class="diff">
            {move || match data.get() {
                None => view! { <p>"comparing…"</p> }.into_any(),
                Some(Err(e)) => crate::pages::widgets::error_line(e).into_any(),
                Some(Ok(d)) => diff_view(d).into_any(),
            }}
        </section>
    }
}

/// A change coloured by what it means: up red and down green where more is worse (memory,
/// leaks, OOMs), no colour where it is neither (more trace events is a longer recording).
fn delta_cell(delta: i64, bytes: bool, change: ::api::ChangeMeaning) -> impl IntoView {
    let cost = change == ::api::ChangeMeaning::Cost;
    let (up, down) = (cost && delta > 0, cost && delta < 0);
    let title = (!cost && delta != 0).then_some("neither better nor worse by itself");
    view! { <td class="num" class:up=up class:down=down class:neutral=!cost title=title>{fmt::signed(delta, bytes)}</td> }
}

fn stack(frames: &[::api::Frame]) -> impl IntoView + use<> {
    view! {
        <details>
            <summary>"stack"</summary>
            {frames_list(frames, usize::MAX)}
        </details>
    }
}

/// What was alive by category at each side's peak: a bar each and the change per category.
fn category_table(c: &::api::CategoriesDelta) -> impl IntoView + use<> {
    let rows = ::api::Category::ALL
        .into_iter()
        .filter(|&k| c.a.get(k) + c.b.get(k) > 0)
        .map(|k| {
            let (a, b) = (c.a.get(k), c.b.get(k));
            view! {
                <tr data-category=k.as_str()>
                    <td>
                        <span class="swatch" style=format!("background:{}", crate::categories::colour(k))></span>
                        " "{k.words()}
                    </td>
                    <td class="num">{fmt::bytes(a)}</td>
                    <td class="num">{fmt::bytes(b)}</td>
                    {delta_cell(b as i64 - a as i64, true, ::api::ChangeMeaning::Cost)}
                </tr>
            }
        })
        .collect_view();
    view! {
        <h3>"Memory by category at each snapshot's peak"</h3>
        <div class="diff">
            {crate::categories::category_bar(&c.a, "A: ")}
            {crate::categories::category_bar(&c.b, "B: ")}
        </div>
        <table class="diff-categories">
            <thead><tr><th></th><th class="num">"A"</th><th class="num">"B"</th><th class="num">"B − A"</th></tr></thead>
            <tbody>{rows}</tbody>
        </table>
    }
}

/// Which x axis the overlaid curves share.
#[derive(Clone, Copy, PartialEq)]
enum Along {
    /// Microseconds from the start of each one's shown span.
    Time,
    Event,
    /// Step number (a fraction inside a step), where both have steps.
    Step,
}

/// One side's curve: (x on the chosen axis, live bytes, reserved bytes) per bucket.
fn curve(
    t: &::api::TimelineAnswer,
    along: Along,
    steps: Option<&::api::Steps>,
) -> Vec<(f64, u64, u64)> {
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

/// A's and B's memory curves on one chart: live solid, reserved dashed; A blue, B orange.
#[component]
fn Overlaid(
    a: ::api::SnapshotRef,
    b: ::api::SnapshotRef,
    device_a: i32,
    device_b: i32,
) -> impl IntoView {
    let along = RwSignal::new(Along::Time);
    let fetch = move |id: String, device: i32, axis: ::api::Axis| async move {
        let q = ::api::TimelineQuery {
            device: Some(device),
            axis: Some(axis),
            buckets: Some(600),
            allocations: Some(0),
            ..Default::default()
        };
        api::timeline(&id, &q).await
    };
    let (ida, idb) = (a.id.clone(), b.id.clone());
    let curves = LocalResource::new(move || {
        let (ida, idb, axis) = (ida.clone(), idb.clone(), along.get());
        let axis = if axis == Along::Time {
            ::api::Axis::Time
        } else {
            ::api::Axis::Event
        };
        async move {
            let (ta, tb) = (
                fetch(ida, device_a, axis).await?,
                fetch(idb, device_b, axis).await?,
            );
            Ok::<_, String>((ta, tb))
        }
    });
    let (ida, idb) = (a.id.clone(), b.id.clone());
    let steps = LocalResource::new(move || {
        let (ida, idb) = (ida.clone(), idb.clone());
        async move {
            let of = |r: Result<::api::Report, String>, d: i32| {
                r.ok()
                    .and_then(|r| r.devices.get(&d).and_then(|s| s.steps.clone()))
            };
            (
                of(api::report(&ida).await, device_a),
                of(api::report(&idb).await, device_b),
            )
        }
    });
    let has_steps = move || {
        steps
            .get()
            .is_some_and(|(sa, sb)| sa.is_some() && sb.is_some())
    };
    let canvas = NodeRef::<leptos::html::Canvas>::new();
    Effect::new(move |_| {
        let (Some(Ok((ta, tb))), Some(c)) = (curves.get(), canvas.get()) else {
            return;
        };
        let (sa, sb) = steps.get().unwrap_or((None, None));
        let mode = along.get();
        let (ca, cb) = (curve(&ta, mode, sa.as_ref()), curve(&tb, mode, sb.as_ref()));
        draw_overlay(&c, &ca, &cb, mode);
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
            {move || has_steps().then(|| button(Along::Step, "by step", "by-step"))}
            <span class="key"><i style="background:#4c6ef5"></i>{format!("A: {}", a.name)}</span>
            <span class="key"><i style="background:#f76707"></i>{format!("B: {}", b.name)}</span>
            <span class="muted">"live solid, reserved dashed"</span>
        </p>
        {move || match curves.get() {
            Some(Err(e)) => crate::pages::widgets::error_line(e).into_any(),
            _ => ().into_any(),
        }}
        <canvas id="overlay" class="overlay" node_ref=canvas width=crate::canvas::content_width(600.0, 1200.0) as u32 height="240"></canvas>
    }
}

fn draw_overlay(
    c: &web_sys::HtmlCanvasElement,
    a: &[(f64, u64, u64)],
    b: &[(f64, u64, u64)],
    along: Along,
) {
    use crate::canvas::{Ink, Scale, byte_axis_max, byte_grid, ink, logical_size, sharp};
    let (w, h) = logical_size(c);
    let g = sharp(c, w, h);
    g.set_fill_style_str(&ink(Ink::Paper));
    g.fill_rect(0.0, 0.0, w, h);
    let x1 = a.iter().chain(b).map(|p| p.0).fold(1.0, f64::max);
    let x0 = a.iter().chain(b).map(|p| p.0).fold(x1, f64::min).min(0.0);
    let ymax = byte_axis_max(
        a.iter()
            .chain(b)
            .map(|p| p.1.max(p.2) as f64)
            .fold(1.0, f64::max),
        1.05,
    );
    let (xs, ys) = (
        Scale::new(x0, x1, 70.0, w - 10.0),
        Scale::new(0.0, ymax, h - 22.0, 8.0),
    );
    byte_grid(&g, &ys, 70.0, w - 10.0, 4);
    for (pts, colour) in [(a, "#4c6ef5"), (b, "#f76707")] {
        for (dashed, value) in [(false, 1usize), (true, 2usize)] {
            g.begin_path();
            for (i, p) in pts.iter().enumerate() {
                let y = ys.at(if value == 1 { p.1 } else { p.2 } as f64);
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

/// What ended each run and what a setting would have done, side by side.
#[component]
fn Verdicts(a: ::api::SnapshotRef, b: ::api::SnapshotRef) -> impl IntoView {
    let (ida, idb) = (a.id.clone(), b.id.clone());
    let reports = LocalResource::new(move || {
        let (ida, idb) = (ida.clone(), idb.clone());
        async move { (api::report(&ida).await, api::report(&idb).await) }
    });
    let ended = |r: &::api::Report| {
        r.oom_outcome
            .clone()
            .unwrap_or_else(|| "No OOM in the trace.".to_string())
    };
    let fatal = |r: &::api::Report| -> String {
        match r.ooms.iter().find(|o| !o.recovered) {
            Some(o) => format!(
                "{}: {}",
                o.verdict.as_str(),
                ::api::site_text(o.site.as_ref())
            ),
            None => "—".to_string(),
        }
    };
    let whatif = |r: &::api::Report| -> String {
        match r
            .ooms
            .iter()
            .find(|o| !o.recovered)
            .and_then(|o| o.whatif.as_ref())
        {
            Some(w) => w.advice.clone(),
            None if r.ooms.iter().any(|o| !o.recovered) => "not simulated for this OOM".to_string(),
            None => "—".to_string(),
        }
    };
    let leaks = |r: &::api::Report| -> String {
        match r.leak_suspects.first() {
            Some(l) => format!(
                "{} ({} suspects)",
                ::api::site_text(l.site.as_ref()),
                r.leak_suspects.len()
            ),
            None => "none".to_string(),
        }
    };
    move || {
        let Some((Ok(ra), Ok(rb))) = reports.get() else {
            return ().into_any();
        };
        let row =
            |what: &'static str, class: &'static str, f: &dyn Fn(&::api::Report) -> String| {
                let (x, y) = (f(&ra), f(&rb));
                let same = x == y;
                view! {
                    <tr class=class>
                        <th>{what}</th>
                        <td>{x}</td>
                        <td class:changed=!same>{y}</td>
                    </tr>
                }
            };
        view! {
            <h3>"Verdicts side by side"</h3>
            <table class="verdicts-side">
                <thead><tr><th></th><th>"A"</th><th>"B"</th></tr></thead>
                <tbody>
                    {row("what ended the run", "v-outcome", &ended)}
                    {row("the OOM that raised: cause and line", "v-fatal", &fatal)}
                    {row("what a setting would have done (simulated)", "v-whatif", &whatif)}
                    {row("leak suspects", "v-leaks", &leaks)}
                </tbody>
            </table>
        }
        .into_any()
    }
}

fn diff_view(d: ::api::DiffAnswer) -> impl IntoView {
    let ::api::DiffAnswer { diff, a, b } = d;
    let amount = |n: u64, bytes: bool| {
        if bytes { fmt::bytes(n) } else { fmt::count(n) }
    };
    let unchanged = diff.unchanged_sites;
    view! {
        <h1>
            <a href=page::snapshot_home(&a.id)>{a.name.clone()}</a>
            <span class="arrow">"→"</span>
            <a href=page::snapshot_home(&b.id)>{b.name.clone()}</a>
        </h1>
        <p class="hint">
            {format!("A = {} (cuda:{}), B = {} (cuda:{}). ", a.id, diff.device_a, b.id, diff.device_b)}
            <a class="swap" href=page::diff(&b.id, &a.id, &Default::default())>"swap A and B"</a>
        </p>
        <Overlaid a=a.clone() b=b.clone() device_a=diff.device_a device_b=diff.device_b/>
        <Verdicts a=a.clone() b=b.clone()/>
        <table class="diff-figures">
            <thead><tr><th></th><th class="num">"A"</th><th class="num">"B"</th><th class="num">"B − A"</th></tr></thead>
            <tbody>
                {diff.figures.into_iter().map(|f| {
                    view! {
                        <tr>
                            <td>{f.name}</td>
                            <td class="num">{amount(f.a, f.bytes)}</td>
                            <td class="num">{amount(f.b, f.bytes)}</td>
                            {delta_cell(f.delta, f.bytes, f.change)}
                        </tr>
                    }
                }).collect_view()}
            </tbody>
        </table>

        {diff.categories_at_peak.map(|c| category_table(&c))}

        <h3>"Leak suspects"</h3>
        {if diff.leaks.is_empty() {
            view! { <p class="ok">"Neither snapshot has leak suspects."</p> }.into_any()
        } else {
            view! {
                <table class="leak-diff">
                    <thead><tr><th>"call site"</th><th></th><th class="num">"alive at the end in A"</th><th class="num">"in B"</th></tr></thead>
                    <tbody>
                        {diff.leaks.into_iter().map(|l| {
                            let (class, label) = match (l.a_bytes, l.b_bytes) {
                                (None, Some(_)) => ("status new", "new in B"),
                                (Some(_), None) => ("status gone", "gone in B"),
                                _ => ("status", "in both"),
                            };
                            view! {
                                <tr class="leak-row">
                                    <td><span class="site">{::api::site_text(l.site.as_ref())}</span>{stack(&l.frames)}</td>
                                    <td><span class=class>{label}</span></td>
                                    <td class="num">{l.a_bytes.map_or("–".into(), fmt::bytes)}</td>
                                    <td class="num">{l.b_bytes.map_or("–".into(), fmt::bytes)}</td>
                                </tr>
                            }
                        }).collect_view()}
                    </tbody>
                </table>
            }.into_any()
        }}

        <h3>"Memory by call site at each snapshot's peak"</h3>
        <p class="hint">{format!("The largest changes first; {unchanged} call sites hold the same memory in both and are not listed.")}</p>
        {if diff.sites_at_peak.is_empty() {
            view! { <p class="ok">"No call site holds different memory at the peak."</p> }.into_any()
        } else {
            view! {
                <table class="site-diff">
                    <thead><tr><th>"call site"</th><th class="num">"A"</th><th class="num">"B"</th><th class="num">"B − A"</th><th class="num">"allocations A → B"</th></tr></thead>
                    <tbody>
                        {diff.sites_at_peak.into_iter().map(|s| view! {
                            <tr class="site-row">
                                <td><span class="site">{::api::site_text(s.site.as_ref())}</span>{stack(&s.frames)}</td>
                                <td class="num">{fmt::bytes(s.a_bytes)}</td>
                                <td class="num">{fmt::bytes(s.b_bytes)}</td>
                                {delta_cell(s.delta_bytes, true, ::api::ChangeMeaning::Cost)}
                                <td class="num">{format!("{} → {}", s.a_count, s.b_count)}</td>
                            </tr>
                        }).collect_view()}
                    </tbody>
                </table>
            }.into_any()
        }}
    }
}
