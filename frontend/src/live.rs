//! The live pages: the fleet (every host's GPUs now, processes, alerts), one GPU over time (NVML
//! used, and per process PyTorch allocated / cached / memory outside PyTorch as stacked bands),
//! and one process (allocator series, per-step figures, the live leak signal, OOMs linking to
//! their snapshots). They refetch when the server's event stream (`/api/live/stream`) says new
//! data was stored (at most once a second), so they update without a reload.

use leptos::html::Canvas;
use leptos::prelude::*;
use leptos_router::hooks::{use_params_map, use_query_map};
use serde_json::Value;
use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;

use crate::timeline::ctx;
use crate::{api, fmt};

/// A counter that goes up (at most once a second) whenever the server stores live data.
fn live_ticks() -> ReadSignal<u32> {
    let (tick, set_tick) = signal(0u32);
    let Ok(es) = web_sys::EventSource::new("/api/live/stream") else {
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

fn num(v: &Value) -> f64 {
    v.as_f64().unwrap_or(0.0)
}

fn ago(now_ms: f64, t_ms: f64) -> String {
    let s = ((now_ms - t_ms) / 1000.0).max(0.0);
    if s < 90.0 {
        format!("{s:.0} s ago")
    } else if s < 5400.0 {
        format!("{:.0} min ago", s / 60.0)
    } else {
        fmt::date(t_ms)
    }
}

fn process_href(host: &str, pid: &Value, start: &Value) -> String {
    let mut h = format!(
        "/live/process/{}/{}",
        js_sys::encode_uri_component(host),
        pid
    );
    if let Some(s) = start.as_i64() {
        h += &format!("?start={s}");
    }
    h
}

fn snapshot_link(e: &Value) -> impl IntoView + use<> {
    e["snapshot_id"].as_str().map(|id| {
        let href = format!("/s/{id}?view=oom");
        view! { <a class="snap-link" href=href>"open snapshot"</a> }
    })
}

#[component]
pub fn FleetPage() -> impl IntoView {
    let tick = live_ticks();
    let data = LocalResource::new(move || {
        tick.get();
        async move { api::get::<Value>("/api/live/fleet").await }
    });
    view! {
        <section class="live">
            <h1>"Live: fleet"</h1>
            <Suspense fallback=|| view! { <p class="muted">"Loading…"</p> }>
                {move || data.get().map(|r| match r {
                    Err(e) => view! { <p class="error">{e}</p> }.into_any(),
                    Ok(f) => fleet_view(&f).into_any(),
                })}
            </Suspense>
        </section>
    }
}

fn fleet_view(f: &Value) -> impl IntoView + use<> {
    let now = num(&f["now_ms"]);
    let hosts = f["hosts"].as_array().cloned().unwrap_or_default();
    let alerts = f["alerts"].as_array().cloned().unwrap_or_default();
    let procs = f["processes"].as_array().cloned().unwrap_or_default();
    let empty = hosts.is_empty() && procs.is_empty();
    view! {
        {empty.then(|| view! {
            <p class="muted">"No collector has reported yet. Start "<code>"memscope-collector --server URL --token TOKEN"</code>
            " on a GPU host (see the README's live collection section)."</p>
        })}
        <div class="fleet">
            {hosts.into_iter().map(|h| {
                let host = h["host"].as_str().unwrap_or("").to_string();
                let gpus = h["gpus"].as_array().cloned().unwrap_or_default();
                view! {
                    <div class="host">
                        <h2>{host.clone()}</h2>
                        <table class="gpus">
                            <thead><tr><th>"GPU"</th><th>"memory used"</th><th>"PyTorch reserved"</th>
                            <th>"top process"</th><th>"util"</th><th>"temp"</th><th>"power"</th><th>"alerts"</th><th>"seen"</th></tr></thead>
                            <tbody>
                            {gpus.into_iter().map(|g| {
                                let gpu = &g["gpu"];
                                let used = num(&gpu["used_bytes"]);
                                let total = num(&gpu["total_bytes"]).max(1.0);
                                let pct = 100.0 * used / total;
                                let href = format!("/live/gpu/{}", js_sys::encode_uri_component(gpu["uuid"].as_str().unwrap_or("")));
                                let top = &g["top_process"];
                                let top_view = (!top.is_null()).then(|| {
                                    let href = process_href(&host, &top["pid"], &top["start_time_ms"]);
                                    let label = format!("{} {} · {}", top["name"].as_str().unwrap_or("pid"), top["pid"], fmt::bytes_of(&top["used_bytes"]));
                                    view! { <a href=href>{label}</a> }
                                });
                                let retries = num(&g["alloc_retries"]);
                                let ooms = num(&g["ooms"]);
                                let alert = match (ooms > 0.0, retries > 0.0) {
                                    (true, _) => format!("{ooms:.0} OOM"),
                                    (false, true) => format!("{retries:.0} alloc retries"),
                                    _ => String::new(),
                                };
                                view! {
                                    <tr class:stale=g["stale"].as_bool().unwrap_or(false)>
                                        <td><a href=href>{format!("#{} {}", gpu["idx"], gpu["name"].as_str().unwrap_or(""))}</a></td>
                                        <td class="usecell">
                                            <div class="usebar"><div style=format!("width:{pct:.1}%")></div></div>
                                            {format!("{} / {} ({pct:.0}%)", fmt::bytes(used), fmt::bytes(total))}
                                        </td>
                                        <td>{fmt::bytes_of(&g["pytorch_reserved_bytes"])}</td>
                                        <td>{top_view}</td>
                                        <td>{gpu["gpu_util"].as_i64().map(|v| format!("{v}%"))}</td>
                                        <td>{gpu["temperature_c"].as_i64().map(|v| format!("{v} °C"))}</td>
                                        <td>{gpu["power_mw"].as_f64().map(|v| format!("{:.0} W", v / 1000.0))}</td>
                                        <td class="alert">{alert}</td>
                                        <td class="muted">{ago(now, num(&gpu["last_seen_ms"]))}</td>
                                    </tr>
                                }
                            }).collect_view()}
                            </tbody>
                        </table>
                    </div>
                }
            }).collect_view()}
        </div>
        {(!alerts.is_empty()).then(|| view! {
            <h2>"Alerts (24 h)"</h2>
            <ul class="alerts">
                {alerts.into_iter().map(|e| {
                    let href = process_href(e["host"].as_str().unwrap_or(""), &e["pid"], &Value::Null);
                    view! {
                        <li class=format!("alert-{}", e["kind"].as_str().unwrap_or(""))>
                            <span class="when">{fmt::date(num(&e["time_ms"]))}</span>
                            <a href=href>{format!("{} pid {}", e["host"].as_str().unwrap_or(""), e["pid"])}</a>
                            <span>{e["message"].as_str().unwrap_or("").to_string()}</span>
                            {snapshot_link(&e)}
                        </li>
                    }
                }).collect_view()}
            </ul>
        })}
        {(!procs.is_empty()).then(|| view! {
            <h2>"Processes"</h2>
            <table class="procs">
                <thead><tr><th>"host"</th><th>"pid"</th><th>"name"</th><th>"container"</th><th>"NVML used"</th><th>"PyTorch reserved"</th>
                <th>"allocated"</th><th>"step"</th><th>"retries"</th><th>"OOMs"</th><th>"seen"</th></tr></thead>
                <tbody>
                {procs.into_iter().map(|p| {
                    let host = p["host"].as_str().unwrap_or("").to_string();
                    let href = process_href(&host, &p["pid"], &p["start_time_ms"]);
                    let agent = p["has_agent"].as_bool().unwrap_or(false);
                    let seen = p["last_seen_ms"].as_f64().map(|t| ago(now, t));
                    view! {
                        <tr class:stale=p["stale"].as_bool().unwrap_or(false)>
                            <td>{host}</td>
                            <td><a href=href>{p["pid"].to_string()}</a></td>
                            <td>{p["name"].as_str().map(str::to_string)}</td>
                            <td class="muted">{p["cgroup"].as_str().map(str::to_string)}</td>
                            <td>{fmt::bytes_of(&p["nvml_used_bytes"])}</td>
                            <td>{if agent { fmt::bytes_of(&p["reserved_bytes"]) } else { "no agent".into() }}</td>
                            <td>{agent.then(|| fmt::bytes_of(&p["allocated_bytes"]))}</td>
                            <td>{p["step"].as_i64()}</td>
                            <td>{p["alloc_retries"].as_i64()}</td>
                            <td>{p["ooms"].as_i64()}</td>
                            <td class="muted">{seen}</td>
                        </tr>
                    }
                }).collect_view()}
                </tbody>
            </table>
        })}
    }
}

/// A series to draw: a stacked band (bands stack in order) or a line on top.
#[derive(Clone)]
struct Series {
    label: String,
    colour: &'static str,
    values: Vec<Option<f64>>,
    band: bool,
}

/// A JSON array of numbers and nulls (a series as the API sends it).
fn values(v: &Value) -> Vec<Option<f64>> {
    v.as_array()
        .map(|a| a.iter().map(Value::as_f64).collect())
        .unwrap_or_default()
}

fn series(label: impl Into<String>, colour: &'static str, v: &Value, band: bool) -> Series {
    Series {
        label: label.into(),
        colour,
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
    let g = ctx(c);
    g.clear_rect(0.0, 0.0, CW, CH);
    let n = times.len();
    if n < 2 {
        return;
    }
    let (t0, t1) = (times[0], times[n - 1]);
    let x = |i: usize| CL + (times[i] - t0) / (t1 - t0).max(1.0) * (CW - CL - 10.0);
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
    let ymax = (ymax * 1.08).max(1.0);
    let y = |v: f64| CH - 24.0 - v / ymax * (CH - 34.0);
    // Grid and axes.
    g.set_font("11px sans-serif");
    g.set_fill_style_str("#888");
    g.set_stroke_style_str("#eee");
    for k in 0..=4 {
        let v = ymax * k as f64 / 4.0;
        g.begin_path();
        g.move_to(CL, y(v));
        g.line_to(CW - 10.0, y(v));
        g.stroke();
        let _ = g.fill_text(&fmt::bytes(v), 4.0, y(v) + 4.0);
    }
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
        g.set_fill_style_str(s.colour);
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
        g.set_stroke_style_str(s.colour);
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
        let mx = CL + (t - t0) / (t1 - t0).max(1.0) * (CW - CL - 10.0);
        g.begin_path();
        g.move_to(mx, 10.0);
        g.line_to(mx, CH - 24.0);
        g.stroke();
        let lx = if mx > CW - 50.0 { mx - 34.0 } else { mx + 3.0 };
        let _ = g.fill_text(label, lx, 20.0);
    }
    if let Some(i) = hover.filter(|&i| i < n) {
        g.set_stroke_style_str("#333");
        g.begin_path();
        g.move_to(x(i), 10.0);
        g.line_to(x(i), CH - 24.0);
        g.stroke();
    }
}

/// A chart with a legend and a hover read-out of every series at the bucket under the cursor.
#[component]
fn Chart(
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
        let rect = c.get_bounding_client_rect();
        let px = (ev.client_x() as f64 - rect.left()) * CW / rect.width().max(1.0);
        if px < CL || n < 2 {
            hover.set(None);
            return;
        }
        let t = t0 + (px - CL) / (CW - CL - 10.0) * (t1 - t0);
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
                    <span class="key"><i style=format!("background:{}", s.colour)></i>{s.label}</span>
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
fn span_picker(minutes: Memo<f64>, base: String) -> impl IntoView {
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
fn minutes_param(query: Memo<leptos_router::params::ParamsMap>) -> Memo<f64> {
    Memo::new(move |_| {
        query
            .get()
            .get("minutes")
            .and_then(|m| m.parse().ok())
            .unwrap_or(10.0)
    })
}

/// A live page's frame: the way back to the fleet, then the answer (or its error) drawn by `body`.
fn live_frame(
    data: LocalResource<Result<Value, String>>,
    body: impl Fn(&Value) -> AnyView + Send + Sync + 'static,
) -> impl IntoView {
    view! {
        <section class="live">
            <p><a href="/live">"← fleet"</a></p>
            <Suspense fallback=|| view! { <p class="muted">"Loading…"</p> }>
                {move || data.get().map(|r| match r {
                    Err(e) => view! { <p class="error">{e}</p> }.into_any(),
                    Ok(p) => body(&p),
                })}
            </Suspense>
        </section>
    }
}

/// A fixed window from the URL (`?from=MS&to=MS`, a permalink to a past incident); otherwise the
/// page follows the last `minutes`.
fn fixed_window(query: Memo<leptos_router::params::ParamsMap>) -> Memo<Option<(i64, i64)>> {
    Memo::new(move |_| {
        let q = query.get();
        Some((q.get("from")?.parse().ok()?, q.get("to")?.parse().ok()?))
    })
}

fn window_query(minutes: f64, fixed: Option<(i64, i64)>) -> String {
    match fixed {
        Some((from, to)) => format!("from_ms={from}&to_ms={to}"),
        None => format!("minutes={minutes}"),
    }
}

const PALETTE: [(&str, &str, &str); 4] = [
    ("#2e86de", "#8fc1f0", "#e67e22"),
    ("#16a085", "#8fd6c6", "#d35400"),
    ("#8e44ad", "#c9a6dc", "#c0392b"),
    ("#2c3e50", "#95a5a6", "#f39c12"),
];

#[component]
pub fn GpuPage() -> impl IntoView {
    let params = use_params_map();
    let query = use_query_map();
    let uuid = Memo::new(move |_| params.get().get("uuid").unwrap_or_default());
    let minutes = minutes_param(query);
    let fixed = fixed_window(query);
    let tick = live_ticks();
    let data = LocalResource::new(move || {
        tick.get();
        let (u, m, w) = (uuid.get(), minutes.get(), fixed.get());
        async move {
            api::get::<Value>(&format!(
                "/api/live/gpus/{}?{}&points=600",
                js_sys::encode_uri_component(&u),
                window_query(m, w)
            ))
            .await
        }
    });
    live_frame(data, move |p| {
        gpu_view(p, minutes, format!("/live/gpu/{}", uuid.get_untracked())).into_any()
    })
}

fn last_some(v: &Value) -> Option<f64> {
    v.as_array()?.iter().rev().find_map(Value::as_f64)
}

fn gpu_view(p: &Value, minutes: Memo<f64>, base: String) -> impl IntoView + use<> {
    let gpu = &p["gpu"];
    let times: Vec<f64> = p["times"]
        .as_array()
        .map(|a| a.iter().map(num).collect())
        .unwrap_or_default();
    let procs = p["processes"].as_array().cloned().unwrap_or_default();
    let mut all = Vec::new();
    let mut rows = Vec::new();
    // Per process: allocated, cached (reserved − allocated), outside PyTorch; NVML used alone
    // for processes without an agent.
    let mut sum_nvml = vec![0.0f64; times.len()];
    for (k, pr) in procs.iter().enumerate() {
        let (c_alloc, c_cache, c_out) = PALETTE[k % PALETTE.len()];
        let label = format!("{} {}", pr["name"].as_str().unwrap_or("pid"), pr["pid"]);
        for (i, v) in pr["nvml_used"].as_array().into_iter().flatten().enumerate() {
            if let Some(s) = sum_nvml.get_mut(i) {
                *s += v.as_f64().unwrap_or(0.0);
            }
        }
        if pr["has_agent"].as_bool().unwrap_or(false) {
            let alloc = values(&pr["allocated"]);
            let res = values(&pr["reserved"]);
            let cached: Vec<Option<f64>> = alloc
                .iter()
                .zip(&res)
                .map(|(a, r)| Some(r.as_ref()? - a.as_ref()?))
                .collect();
            all.push(series(
                format!("{label} allocated"),
                c_alloc,
                &pr["allocated"],
                true,
            ));
            all.push(Series {
                label: format!("{label} cached"),
                colour: c_cache,
                values: cached,
                band: true,
            });
            all.push(series(
                format!("{label} outside PyTorch"),
                c_out,
                &pr["outside_pytorch"],
                true,
            ));
        } else {
            all.push(series(
                format!("{label} (no agent)"),
                "#bdc3c7",
                &pr["nvml_used"],
                true,
            ));
        }
        rows.push(pr.clone());
    }
    // What NVML counts beyond every process (other contexts, driver): the gap to the used line.
    let used = values(&p["used"]);
    let other: Vec<Option<f64>> = used
        .iter()
        .zip(&sum_nvml)
        .map(|(u, s)| u.map(|u| (u - s).max(0.0)))
        .collect();
    all.push(Series {
        label: "other (not in any process)".into(),
        colour: "#ecf0f1",
        values: other,
        band: true,
    });
    all.push(series("NVML used", "#111", &p["used"], false));
    let markers: Vec<(f64, String)> = p["events"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["kind"] == "oom")
        .map(|e| (num(&e["time_ms"]), "OOM".to_string()))
        .collect();
    let title = format!(
        "{} · GPU #{} {}",
        gpu["host"].as_str().unwrap_or(""),
        gpu["idx"],
        gpu["name"].as_str().unwrap_or("")
    );
    let uuid = gpu["uuid"].as_str().unwrap_or("").to_string();
    let host = gpu["host"].as_str().unwrap_or("").to_string();
    let used_now = last_some(&p["used"]);
    let used_peak = p["used"]
        .as_array()
        .and_then(|a| a.iter().filter_map(Value::as_f64).reduce(f64::max));
    let total = num(&gpu["total_bytes"]);
    view! {
        <h1>{title}</h1>
        <p class="muted">{uuid}</p>
        <div class="figures">
            <div><b>{used_now.map(fmt::bytes)}</b><span>{format!("used now, of {}", fmt::bytes(total))}</span></div>
            <div><b>{used_peak.map(fmt::bytes)}</b><span>"peak in this window"</span></div>
        </div>
        {span_picker(minutes, base)}
        <Chart id="gpu-chart" times=times all=all markers=markers/>
        <table class="procs">
            <thead><tr><th>"process"</th><th>"NVML used"</th><th>"PyTorch reserved"</th><th>"allocated"</th><th>"outside PyTorch"</th></tr></thead>
            <tbody>
            {rows.into_iter().map(|pr| {
                let href = process_href(&host, &pr["pid"], &pr["start_time_ms"]);
                let agent = pr["has_agent"].as_bool().unwrap_or(false);
                view! {
                    <tr>
                        <td><a href=href>{format!("{} {}", pr["name"].as_str().unwrap_or("pid"), pr["pid"])}</a></td>
                        <td>{last_some(&pr["nvml_used"]).map(fmt::bytes)}</td>
                        <td>{if agent { last_some(&pr["reserved"]).map(fmt::bytes) } else { Some("no agent".into()) }}</td>
                        <td>{last_some(&pr["allocated"]).map(fmt::bytes)}</td>
                        <td class="outside">{last_some(&pr["outside_pytorch"]).map(fmt::bytes)}</td>
                    </tr>
                }
            }).collect_view()}
            </tbody>
        </table>
    }
}

#[component]
pub fn ProcessPage() -> impl IntoView {
    let params = use_params_map();
    let query = use_query_map();
    let key = Memo::new(move |_| {
        let p = params.get();
        (
            p.get("host").unwrap_or_default(),
            p.get("pid").unwrap_or_default(),
        )
    });
    let minutes = minutes_param(query);
    let start = Memo::new(move |_| query.get().get("start"));
    let fixed = fixed_window(query);
    let tick = live_ticks();
    let data = LocalResource::new(move || {
        tick.get();
        let ((host, pid), m, st, w) = (key.get(), minutes.get(), start.get(), fixed.get());
        async move {
            let st = st
                .map(|s| format!("&start_time_ms={s}"))
                .unwrap_or_default();
            api::get::<Value>(&format!(
                "/api/live/processes/{}/{pid}?{}&points=600{st}",
                js_sys::encode_uri_component(&host),
                window_query(m, w)
            ))
            .await
        }
    });
    live_frame(data, move |p| {
        let (h, pid) = key.get_untracked();
        let base = format!(
            "/live/process/{}/{pid}{}",
            js_sys::encode_uri_component(&h),
            start
                .get_untracked()
                .map(|s| format!("?start={s}"))
                .unwrap_or_default()
        );
        process_view(p, minutes, base).into_any()
    })
}

fn process_view(p: &Value, minutes: Memo<f64>, base: String) -> impl IntoView + use<> {
    let times: Vec<f64> = p["times"]
        .as_array()
        .map(|a| a.iter().map(num).collect())
        .unwrap_or_default();
    let events = p["events"].as_array().cloned().unwrap_or_default();
    let markers: Vec<(f64, String)> = events
        .iter()
        .filter(|e| e["kind"] == "oom")
        .map(|e| (num(&e["time_ms"]), "OOM".into()))
        .collect();
    let title = format!(
        "{} · {} pid {}",
        p["host"].as_str().unwrap_or(""),
        p["name"].as_str().unwrap_or("process"),
        p["pid"]
    );
    let devices = p["devices"].as_array().cloned().unwrap_or_default();
    view! {
        <h1>{title}</h1>
        {span_picker(minutes, base)}
        {devices.is_empty().then(|| view! {
            <p class="muted">"No PyTorch agent in this process: only NVML's reading is known. Add "
            <code>"import memscope_agent; memscope_agent.start()"</code>" to the training script."</p>
        })}
        {devices.into_iter().map(|d| {
            let leak = &d["leak"];
            let rising = leak["rising"].as_bool().unwrap_or(false);
            let steps = d["steps"].as_array().cloned().unwrap_or_default();
            let signal = if rising {
                format!("Leak signal: memory held between steps keeps rising, {} per step over the last {} steps ({} in all).",
                    fmt::bytes(num(&leak["bytes_per_step"])), leak["steps"], fmt::bytes(num(&leak["growth_bytes"])))
            } else if steps.len() >= 8 {
                format!("No leak signal: memory held between steps is steady over the last {} steps.", leak["steps"])
            } else {
                "Mark training steps with memscope_agent.step(n) for a per-step leak signal.".into()
            };
            let all = vec![
                series("allocated", "#2e86de", &d["allocated"], false),
                series("reserved", "#16a085", &d["reserved"], false),
                series("inactive split", "#f39c12", &d["inactive_split"], false),
                series("NVML used", "#111", &d["nvml_used"], false),
                series("outside PyTorch", "#e67e22", &d["outside_pytorch"], false),
            ];
            let step_times: Vec<f64> = steps.iter().map(|s| num(&s["time_ms"])).collect();
            let step_series = vec![
                Series { label: "allocated at step low".into(), colour: "#c0392b",
                    values: steps.iter().map(|s| s["allocated_min_bytes"].as_f64()).collect(), band: false },
                Series { label: "allocated at step peak".into(), colour: "#2e86de",
                    values: steps.iter().map(|s| s["allocated_max_bytes"].as_f64()).collect(), band: false },
            ];
            let retries = last_some(&d["alloc_retries"]).unwrap_or(0.0);
            view! {
                <h2>{format!("device {} {}", d["device"], d["gpu_uuid"].as_str().unwrap_or(""))}</h2>
                <p class=if rising { "leak-signal rising" } else { "leak-signal" }>{signal}</p>
                {(retries > 0.0).then(|| view! { <p class="alert">{format!("{retries:.0} allocation {}: cudaMalloc failed and PyTorch flushed its cache to retry. An OOM is near.", if retries == 1.0 { "retry" } else { "retries" })}</p> })}
                <Chart id=format!("proc-chart-{}", d["device"]) times=times.clone() all=all markers=markers.clone()/>
                {(step_times.len() >= 2).then(|| view! {
                    <h3>"Per step"</h3>
                    <Chart id=format!("step-chart-{}", d["device"]) times=step_times all=step_series markers=vec![]/>
                })}
            }
        }).collect_view()}
        <h2>"Events"</h2>
        {events.is_empty().then(|| view! { <p class="muted">"None."</p> })}
        <ul class="alerts">
            {events.into_iter().map(|e| view! {
                <li class=format!("alert-{}", e["kind"].as_str().unwrap_or(""))>
                    <span class="when">{fmt::date(num(&e["time_ms"]))}</span>
                    <b>{e["kind"].as_str().unwrap_or("").to_string()}</b>
                    <span>{e["message"].as_str().unwrap_or("").to_string()}</span>
                    {snapshot_link(&e)}
                </li>
            }).collect_view()}
        </ul>
    }
}
