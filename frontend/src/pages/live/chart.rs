//! What the live pages share: the refetch signal from the server's event stream, the chart
//! (stacked bands and lines over time with a legend and a hover read-out), the window picker
//! and the page frame.

use leptos::html::Canvas;
use leptos::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;

use crate::canvas::{Ink, Paint, Scale, byte_axis_max, byte_grid, ink, pointer, sharp};
use crate::fmt;

/// A counter that goes up (at most once a second) whenever the server stores live data.
pub fn live_ticks() -> ReadSignal<u32> {
    let (tick, set_tick) = signal(0u32);
    let Ok(es) = web_sys::EventSource::new(&::api::routes::live_stream()) else {
        return tick;
    };
    let last = StoredValue::new(0.0f64);
    let pending = StoredValue::new(false);
    let on_ingest =
        Closure::<dyn FnMut(web_sys::MessageEvent)>::new(move |_: web_sys::MessageEvent| {
            let now = js_sys::Date::now();
            if now - last.get_value() >= 1000.0 {
                last.set_value(now);
                set_tick.update(|t| *t += 1);
            } else if !pending.get_value() {
                // Coalesce a burst into one refetch at the end of the second.
                pending.set_value(true);
                let wait = (1000.0 - (now - last.get_value())) as i32;
                let cb = Closure::once_into_js(move || {
                    pending.set_value(false);
                    last.set_value(js_sys::Date::now());
                    set_tick.update(|t| *t += 1);
                });
                if let Some(w) = web_sys::window() {
                    let _ = w.set_timeout_with_callback_and_timeout_and_arguments_0(
                        cb.unchecked_ref(),
                        wait,
                    );
                }
            }
        });
    let _ = es.add_event_listener_with_callback("ingest", on_ingest.as_ref().unchecked_ref());
    on_ingest.forget();
    let es = StoredValue::new_local(es);
    on_cleanup(move || es.with_value(|e| e.close()));
    tick
}

/// A series to draw: a stacked band (bands stack in order) or a line on top.
#[derive(Clone)]
pub struct Series {
    pub label: String,
    pub colour: Paint,
    pub values: Vec<Option<f64>>,
    pub band: bool,
}

/// A series as the API sends it (bytes per bucket, none where nothing was reported).
pub fn values(v: &[Option<i64>]) -> Vec<Option<f64>> {
    v.iter().map(|x| x.map(|x| x as f64)).collect()
}

pub fn series(
    label: impl Into<String>,
    colour: impl Into<Paint>,
    v: &[Option<i64>],
    band: bool,
) -> Series {
    Series {
        label: label.into(),
        colour: colour.into(),
        values: values(v),
        band,
    }
}

const CW: f64 = 1200.0;
const CH: f64 = 320.0;
const CL: f64 = 80.0;

/// Draws stacked bands and lines over `times` (ms), a byte y axis and event markers.
fn draw_chart(
    c: &web_sys::HtmlCanvasElement,
    times: &[f64],
    all: &[Series],
    markers: &[(f64, String)],
    hover: Option<usize>,
) {
    let g = sharp(c, CW, CH);
    g.clear_rect(0.0, 0.0, CW, CH);
    let n = times.len();
    if n < 2 {
        return;
    }
    let (t0, t1) = (times[0], times[n - 1]);
    let xs = Scale::new(t0, t1, CL, CW - 10.0);
    let x = |i: usize| xs.at(times[i]);
    // Stack bands.
    let mut tops = vec![0.0f64; n];
    let mut stacked: Vec<(usize, Vec<f64>, Vec<f64>)> = Vec::new();
    for (k, s) in all.iter().enumerate().filter(|(_, s)| s.band) {
        let lo = tops.clone();
        for (i, top) in tops.iter_mut().enumerate() {
            *top += s.values.get(i).copied().flatten().unwrap_or(0.0);
        }
        stacked.push((k, lo, tops.clone()));
    }
    let mut ymax = tops.iter().cloned().fold(0.0, f64::max);
    for s in all.iter().filter(|s| !s.band) {
        for v in s.values.iter().flatten() {
            ymax = ymax.max(*v);
        }
    }
    let ys = Scale::new(0.0, byte_axis_max(ymax, 1.08), CH - 24.0, 10.0);
    let y = |v: f64| ys.at(v);
    // Grid and axes.
    g.set_font("11px sans-serif");
    byte_grid(&g, &ys, CL, CW - 10.0, 4);
    g.set_fill_style_str(&ink(Ink::Muted));
    for k in 0..=5 {
        let i = (n - 1) * k / 5;
        let d = js_sys::Date::new(&JsValue::from_f64(times[i]));
        let label = d
            .to_locale_time_string("en-GB")
            .as_string()
            .unwrap_or_default();
        // Centred under its time, kept inside the canvas at both ends.
        let w = g.measure_text(&label).map_or(48.0, |m| m.width());
        let at = (x(i) - w / 2.0).clamp(CL, CW - w - 2.0);
        let _ = g.fill_text(&label, at, CH - 6.0);
    }
    for (k, lo, hi) in &stacked {
        let s = &all[*k];
        g.set_fill_style_str(&s.colour.css());
        g.begin_path();
        g.move_to(x(0), y(hi[0]));
        for (i, v) in hi.iter().enumerate().take(n).skip(1) {
            g.line_to(x(i), y(*v));
        }
        for i in (0..n).rev() {
            g.line_to(x(i), y(lo[i]));
        }
        g.close_path();
        g.fill();
    }
    for s in all.iter().filter(|s| !s.band) {
        g.set_stroke_style_str(&s.colour.css());
        g.set_line_width(2.0);
        g.begin_path();
        let mut open = false;
        for i in 0..n {
            match s.values.get(i).copied().flatten() {
                Some(v) if open => g.line_to(x(i), y(v)),
                Some(v) => {
                    g.move_to(x(i), y(v));
                    open = true;
                }
                None => open = false,
            }
        }
        g.stroke();
        g.set_line_width(1.0);
    }
    g.set_fill_style_str("#c0392b");
    g.set_stroke_style_str("#c0392b");
    for (t, label) in markers {
        if *t < t0 || *t > t1 {
            continue;
        }
        let mx = xs.at(*t);
        g.begin_path();
        g.move_to(mx, 10.0);
        g.line_to(mx, CH - 24.0);
        g.stroke();
        let lx = if mx > CW - 50.0 { mx - 34.0 } else { mx + 3.0 };
        let _ = g.fill_text(label, lx, 20.0);
    }
    if let Some(i) = hover.filter(|&i| i < n) {
        g.set_stroke_style_str(&ink(Ink::Text));
        g.begin_path();
        g.move_to(x(i), 10.0);
        g.line_to(x(i), CH - 24.0);
        g.stroke();
    }
}

/// A chart with a legend and a hover read-out of every series at the bucket under the cursor.
#[component]
pub fn Chart(
    times: Vec<f64>,
    all: Vec<Series>,
    markers: Vec<(f64, String)>,
    #[prop(into)] id: String,
) -> impl IntoView {
    let canvas = NodeRef::<Canvas>::new();
    let hover = RwSignal::new(None::<usize>);
    let (t, a, m) = (times.clone(), all.clone(), markers.clone());
    Effect::new(move |_| {
        if let Some(c) = canvas.get() {
            draw_chart(&c, &t, &a, &m, hover.get());
        }
    });
    let n = times.len();
    let t0 = times.first().copied().unwrap_or(0.0);
    let t1 = times.last().copied().unwrap_or(1.0);
    let tt = times.clone();
    let on_move = move |ev: web_sys::MouseEvent| {
        let Some(c) = canvas.get_untracked() else {
            return;
        };
        let (px, _) = pointer(&c, &ev);
        if px < CL || n < 2 {
            hover.set(None);
            return;
        }
        let t = Scale::new(t0, t1, CL, CW - 10.0).inv(px);
        let i = tt.partition_point(|&x| x < t).min(n - 1);
        hover.set(Some(i));
    };
    let legend = all.clone();
    let readout_series = all.clone();
    let rt = times.clone();
    view! {
        <div class="chart">
            <canvas id=id width=CW as u32 height=CH as u32 node_ref=canvas on:mousemove=on_move
                on:mouseleave=move |_| hover.set(None)></canvas>
            <div class="legend">
                {legend.into_iter().map(|s| view! {
                    <span class="key"><i style=format!("background:{}", s.colour.css())></i>{s.label}</span>
                }).collect_view()}
            </div>
            <div class="readout">
                {move || hover.get().map(|i| {
                    let when = fmt::date(rt.get(i).copied().unwrap_or(0.0));
                    let parts: Vec<String> = readout_series.iter().filter_map(|s| {
                        s.values.get(i).copied().flatten().map(|v| format!("{} {}", s.label, fmt::bytes(v)))
                    }).collect();
                    format!("{when} · {}", parts.join(" · "))
                })}
            </div>
        </div>
    }
}

const SPANS: [(&str, f64); 6] = [
    ("5 min", 5.0),
    ("30 min", 30.0),
    ("3 h", 180.0),
    ("24 h", 1440.0),
    ("7 d", 10080.0),
    ("30 d", 43200.0),
];

/// The window picker; the span (minutes) is in the URL (`?minutes=`).
pub fn span_picker(minutes: Memo<f64>, base: String) -> impl IntoView {
    view! {
        <div class="spans">
            {SPANS.iter().map(|(label, m)| {
                let href = format!("{base}{}minutes={m}", if base.contains('?') { "&" } else { "?" });
                let m = *m;
                view! { <a href=href class:active=move || (minutes.get() - m).abs() < 1e-9>{*label}</a> }
            }).collect_view()}
        </div>
    }
}

/// The window's span in minutes (`?minutes=`, default 10).
pub fn minutes_param(query: Memo<leptos_router::params::ParamsMap>) -> Memo<f64> {
    Memo::new(move |_| {
        query
            .get()
            .get("minutes")
            .and_then(|m| m.parse().ok())
            .unwrap_or(10.0)
    })
}

/// A live page's frame: the way back to the fleet, then the answer (or its error) drawn by `body`.
pub fn live_frame<T: Clone + 'static>(
    data: LocalResource<Result<T, String>>,
    body: impl Fn(T) -> AnyView + Send + Sync + 'static,
) -> impl IntoView {
    view! {
        <section class="live">
            <p><a href=::api::routes::page::live()>"← fleet"</a></p>
            <Suspense fallback=|| view! { <p class="muted">"Loading…"</p> }>
                {move || data.get().map(|r| match r {
                    Err(e) => crate::pages::widgets::error_line(e).into_any(),
                    Ok(p) => body(p),
                })}
            </Suspense>
        </section>
    }
}

/// A fixed window from the URL (`?from=MS&to=MS`, a permalink to a past incident); otherwise the
/// page follows the last `minutes`.
pub fn fixed_window(query: Memo<leptos_router::params::ParamsMap>) -> Memo<Option<(i64, i64)>> {
    Memo::new(move |_| {
        let q = query.get();
        Some((q.get("from")?.parse().ok()?, q.get("to")?.parse().ok()?))
    })
}

/// The API's window: the fixed one, else the last `minutes`, at 600 points.
pub fn window_query(minutes: f64, fixed: Option<(i64, i64)>) -> ::api::WindowQuery {
    let mut q = ::api::WindowQuery {
        points: Some(600),
        ..Default::default()
    };
    match fixed {
        Some((from, to)) => (q.from_ms, q.to_ms) = (Some(from), Some(to)),
        None => q.minutes = Some(minutes),
    }
    q
}
