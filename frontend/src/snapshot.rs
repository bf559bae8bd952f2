//! A snapshot's page: tabs for each view; the view, device, window and position live in the URL
//! query, so a shared link opens the same view.

use leptos::prelude::*;
use leptos_router::NavigateOptions;
use leptos_router::hooks::{use_navigate, use_params_map, use_query_map};
use serde_json::Value;

use crate::{api, fmt};

pub const TABS: [(&str, &str); 6] = [
    ("overview", "Overview"),
    ("timeline", "Timeline"),
    ("segments", "Segments"),
    ("stacks", "Stacks"),
    ("leaks", "Leaks"),
    ("oom", "OOM"),
];

/// Reads and writes the page's URL query.
#[derive(Clone, Copy)]
pub struct UrlState {
    pub id: Memo<String>,
    query: Memo<leptos_router::params::ParamsMap>,
}

impl UrlState {
    pub fn get(&self, key: &str) -> Option<String> {
        self.query.get().get(key)
    }
    pub fn get_f64(&self, key: &str) -> Option<f64> {
        self.get(key).and_then(|v| v.parse().ok())
    }
    /// The device chosen in the URL (none: the server's default, the first with a trace).
    pub fn device(&self) -> Option<i32> {
        self.get("device").and_then(|v| v.parse().ok())
    }
    /// `&device=N` for API queries when a device is chosen, else nothing.
    pub fn device_query(&self) -> String {
        self.device()
            .map(|d| format!("&device={d}"))
            .unwrap_or_default()
    }
    /// This snapshot's page with exactly these query keys (a link to another view or moment).
    pub fn href<K: AsRef<str>>(&self, pairs: &[(K, String)]) -> String {
        let qs: Vec<String> = pairs
            .iter()
            .map(|(k, v)| format!("{}={}", k.as_ref(), js_sys::encode_uri_component(v)))
            .collect();
        format!("/s/{}?{}", self.id.get_untracked(), qs.join("&"))
    }
    /// Replaces some query keys (None removes) and navigates, keeping the others.
    pub fn set(&self, changes: &[(&str, Option<String>)]) {
        let mut pairs: Vec<(String, String)> = Vec::new();
        let q = self.query.get_untracked();
        for key in [
            "view", "device", "from", "to", "axis", "pos", "filter", "frames",
        ] {
            let v = match changes.iter().find(|(k, _)| *k == key) {
                Some((_, v)) => v.clone(),
                None => q.get(key),
            };
            if let Some(v) = v {
                pairs.push((key.to_string(), v));
            }
        }
        let url = self.href(&pairs);
        use_navigate()(
            &url,
            NavigateOptions {
                replace: true,
                scroll: false,
                ..Default::default()
            },
        );
    }
}

#[component]
pub fn SnapshotPage() -> impl IntoView {
    let params = use_params_map();
    let query = use_query_map();
    let id = Memo::new(move |_| params.get().get("id").unwrap_or_default());
    let url = UrlState {
        id,
        query: Memo::new(move |_| query.get()),
    };
    let view_name = Memo::new(move |_| url.get("view").unwrap_or_else(|| "overview".into()));
    let device = Memo::new(move |_| url.device());
    let report = LocalResource::new(move || {
        let id = id.get();
        async move { api::get::<Value>(&format!("/api/snapshots/{id}")).await }
    });
    let info = LocalResource::new(move || {
        let id = id.get();
        async move { api::get::<Value>(&format!("/api/snapshots/{id}/info")).await }
    });
    provide_context(url);

    view! {
        <div class="snapshot-head">
            <h1>{move || info.get().and_then(|r| r.ok()).map(|i| i["name"].as_str().unwrap_or("").to_string())}</h1>
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
            Some(Err(e)) => view! { <p class="error">{e}</p> }.into_any(),
            Some(Ok(r)) => {
                // A new device mounts the view afresh (its event count, its positions).
                let _ = device.get();
                match view_name.get().as_str() {
                    "timeline" => view! { <crate::timeline::TimelineView report=r/> }.into_any(),
                    "segments" => view! { <Segments report=r/> }.into_any(),
                    "stacks" => view! { <Stacks report=r/> }.into_any(),
                    "leaks" => view! { <Leaks report=r/> }.into_any(),
                    "oom" => view! { <Ooms report=r/> }.into_any(),
                    _ => view! { <Overview report=r/> }.into_any(),
                }
            }
        }}
    }
}

/// Devices with a trace, in order.
pub fn traced_devices(report: &Value) -> Vec<(i32, u64)> {
    let mut v: Vec<(i32, u64)> = report["devices"]
        .as_object()
        .map(|d| {
            d.iter()
                .filter_map(|(k, v)| Some((k.parse().ok()?, v["entries"].as_u64().unwrap_or(0))))
                .filter(|&(_, n)| n > 0)
                .collect()
        })
        .unwrap_or_default();
    v.sort_unstable();
    v
}

/// The device whose views are shown: the URL's, else the first with a trace.
pub fn shown_device(report: &Value, url: UrlState) -> Option<i32> {
    url.device()
        .or_else(|| traced_devices(report).first().map(|d| d.0))
}

/// How many events the shown device's trace has.
fn shown_events(report: &Value, url: UrlState) -> u64 {
    let device = shown_device(report, url);
    traced_devices(report)
        .into_iter()
        .find(|d| Some(d.0) == device)
        .map_or(0, |d| d.1)
}

/// A choice of device when the snapshot traced more than one; the views follow it.
fn device_picker(report: &Value, url: UrlState) -> impl IntoView + use<> {
    let devices = traced_devices(report);
    let shown = shown_device(report, url);
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
                                    {format!("cuda:{d} ({} events)", fmt::count(n))}
                                </option>
                            }
                        })
                        .collect_view()}
                </select>
            </label>
        }
    })
}

fn kv(label: &'static str, value: String) -> impl IntoView {
    view! {
        <div class="kv">
            <span class="k">{label}</span>
            <span class="v">{value}</span>
        </div>
    }
}

#[component]
fn Overview(report: Value) -> impl IntoView {
    let r = &report;
    let devices = r["devices"].as_object().cloned().unwrap_or_default();
    let warnings = r["warnings"].as_array().cloned().unwrap_or_default();
    let settings = r["allocator_settings"].clone();
    view! {
        <section class="overview">
            <div class="figures">
                {kv("segments", fmt::count(r["segments"].as_u64().unwrap_or(0)))}
                {kv("blocks", fmt::count(r["blocks"].as_u64().unwrap_or(0)))}
                {kv("reserved", fmt::bytes_of(&r["reserved_bytes"]))}
                {kv("allocated", fmt::bytes_of(&r["allocated_bytes"]))}
                {kv("requested", fmt::bytes_of(&r["requested_bytes"]))}
                {kv("pending free", fmt::bytes_of(&r["pending_free_bytes"]))}
                {kv("leak suspects", r["leak_suspects"].as_array().map_or(0, |a| a.len()).to_string())}
                {kv("OOMs", r["ooms"].as_array().map_or(0, |a| a.len()).to_string())}
                {kv("format", format!("{} {} ({})", r["format"]["encoding"].as_str().unwrap_or(""), r["format"]["layout"].as_str().unwrap_or(""), r["format"]["compression"].as_str().unwrap_or("")))}
            </div>
            <CompareWith/>
            <h3>"Warnings"</h3>
            {if warnings.is_empty() {
                view! { <p class="ok">"none"</p> }.into_any()
            } else {
                view! {
                    <ul class="warnings">
                        {warnings
                            .iter()
                            .map(|w| view! { <li>{w["message"].as_str().unwrap_or("").to_string()}</li> })
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
                {devices
                    .iter()
                    .map(|(d, v)| {
                        let actions = v["actions"]
                            .as_object()
                            .map(|a| a.iter().map(|(k, n)| format!("{k} {n}")).collect::<Vec<_>>().join(", "))
                            .unwrap_or_default();
                        view! {
                            <tr>
                                <td>{d.clone()}</td>
                                <td class="num">{fmt::count(v["entries"].as_u64().unwrap_or(0))}</td>
                                <td class="num">{fmt::bytes_of(&v["peak_live_bytes"])}</td>
                                <td>{actions}</td>
                            </tr>
                        }
                    })
                    .collect_view()}
            </table>
            <h3>"Allocator settings"</h3>
            <pre class="settings">
                {if settings.is_null() { "not recorded (before PyTorch 2.3)".to_string() } else { serde_json::to_string_pretty(&settings).unwrap_or_default() }}
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
            api::get::<Vec<crate::library::Info>>("/api/snapshots")
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
                                let device = url
                                    .device()
                                    .map(|d| format!("?device_b={d}"))
                                    .unwrap_or_default();
                                format!("/diff/{}/{}{device}", chosen.get(), url.id.get())
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

pub(crate) fn frames_list(frames: &Value, max: usize) -> impl IntoView + use<> {
    let items: Vec<String> = frames
        .as_array()
        .map(|a| a.iter().take(max).map(fmt::frame).collect())
        .unwrap_or_default();
    view! { <ol class="frames">{items.into_iter().map(|f| view! { <li>{f}</li> }).collect_view()}</ol> }
}

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
fn Leaks(report: Value) -> impl IntoView {
    let url: UrlState = expect_context();
    let several_devices = traced_devices(&report).len() > 1;
    let suspects = report["leak_suspects"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if suspects.is_empty() {
        return view! {
            <p class="ok">"No leak suspects: no call stack keeps allocations alive that were made throughout the trace."</p>
        }
            .into_any();
    }
    view! {
        <section class="leaks">
            {suspects
                .iter()
                .enumerate()
                .map(|(i, l)| {
                    let series: Vec<f64> = l["series"].as_array().map(|a| a.iter().map(|p| p["live_bytes"].as_f64().unwrap_or(0.0)).collect()).unwrap_or_default();
                    let site = fmt::site(&l["site"]);
                    // The timeline greys every allocation whose stack does not contain this text.
                    let needle = format!(
                        "{}:{}",
                        l["site"]["filename"].as_str().unwrap_or("").rsplit('/').next().unwrap_or(""),
                        l["site"]["line"]
                    );
                    let on_timeline = url.href(&[
                        ("view", "timeline".into()),
                        ("device", l["device"].to_string()),
                        ("filter", needle),
                    ]);
                    view! {
                        <article class="suspect">
                            <h3>
                                <span class="rank">{format!("#{}", i + 1)}</span>
                                {several_devices.then(|| view! { <span class="device">{format!("cuda:{} ", l["device"])}</span> })}
                                <span class="site">{site}</span>
                            </h3>
                            <p>
                                {format!(
                                    "{} alive at the end in {} allocations, made across {:.0}% of the trace ({} allocations from this stack in all)",
                                    fmt::bytes_of(&l["bytes"]),
                                    l["count"],
                                    l["spread"].as_f64().unwrap_or(0.0) * 100.0,
                                    l["total_allocations"],
                                )}
                            </p>
                            {sparkline(&series)}
                            <p class="leak-links">
                                {format!("made between events {} and {}. ", l["first_position"], l["last_position"])}
                                {(!l["site"].is_null()).then(|| view! {
                                    <a class="on-timeline" href=on_timeline>"show its allocations on the timeline"</a>
                                })}
                            </p>
                            <details>
                                <summary>"stack"</summary>
                                {frames_list(&l["frames"], 60)}
                            </details>
                        </article>
                    }
                })
                .collect_view()}
        </section>
    }
        .into_any()
}

#[component]
fn Ooms(report: Value) -> impl IntoView {
    let url: UrlState = expect_context();
    let ooms = report["ooms"].as_array().cloned().unwrap_or_default();
    if ooms.is_empty() {
        return view! { <p class="ok">"No out-of-memory events in this trace."</p> }.into_any();
    }
    view! {
        <section class="ooms">
            {ooms
                .iter()
                .map(|o| {
                    let at_oom = |view: &str| {
                        url.href(&[
                            ("view", view.to_string()),
                            ("device", o["device"].to_string()),
                            ("pos", o["position"].to_string()),
                        ])
                    };
                    view! {
                        <article class="oom">
                            <h3>
                                {format!("device {} at event {}: ", o["device"], o["position"])}
                                <span class="verdict">{o["verdict"].as_str().unwrap_or("").replace('_', " ")}</span>
                            </h3>
                            <p>{o["explanation"].as_str().unwrap_or("").to_string()}</p>
                            <div class="figures">
                                {kv("requested", fmt::bytes_of(&o["requested_bytes"]))}
                                {kv("driver free", if o["device_free_bytes"].is_null() { "unknown".into() } else { fmt::bytes_of(&o["device_free_bytes"]) })}
                                {kv("reserved", fmt::bytes_of(&o["reserved_bytes"]))}
                                {kv("allocated", fmt::bytes_of(&o["allocated_bytes"]))}
                                {kv("cached free", fmt::bytes_of(&o["cached_free_bytes"]))}
                                {kv("largest free block", fmt::bytes_of(&o["largest_free_block_bytes"]))}
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
                                {o["largest_sites"]
                                    .as_array()
                                    .cloned()
                                    .unwrap_or_default()
                                    .iter()
                                    .map(|s| view! { <li>{format!("{}  {}", fmt::bytes_of(&s["bytes"]), fmt::site(&s["site"]))}</li> })
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

#[component]
fn Stacks(report: Value) -> impl IntoView {
    let url: UrlState = expect_context();
    let events = shown_events(&report, url);
    let python_only = Memo::new(move |_| url.get("frames").as_deref() == Some("python"));
    let data = LocalResource::new(move || {
        let (id, pos, py, dq) = (
            url.id.get(),
            url.get("pos"),
            python_only.get(),
            url.device_query(),
        );
        async move {
            let mut q = vec![];
            if let Some(p) = pos {
                q.push(format!("position={p}"));
            }
            if py {
                q.push("frames=python".to_string());
            }
            api::get::<Value>(&format!("/api/snapshots/{id}/stacks?{}{dq}", q.join("&"))).await
        }
    });
    view! {
        // The moment: any event (the slider), or back to the peak.
        <div class="toolbar">
            <input
                type="range"
                class="stacks-pos"
                min="0"
                max=events.to_string()
                prop:value=move || {
                    data.get()
                        .and_then(|d| d.ok())
                        .map(|d| d["position"].to_string())
                        .unwrap_or_default()
                }
                on:change=move |ev| url.set(&[("pos", Some(event_target_value(&ev)))])
            />
            <button class="at-peak" on:click=move |_| url.set(&[("pos", None)])>"at the peak"</button>
        </div>
        <label class="python-only">
            <input
                type="checkbox"
                prop:checked=move || python_only.get()
                on:change=move |ev| {
                    let on = event_target_checked(&ev);
                    url.set(&[("frames", on.then(|| "python".to_string()))]);
                }
            />
            " Python frames only (hide C++ frames in the tree)"
        </label>
        {move || match data.get() {
            None => view! { <p>"loading…"</p> }.into_any(),
            Some(Err(e)) => view! { <p class="error">{e}</p> }.into_any(),
            Some(Ok(s)) => {
                let total = s["total_bytes"].as_f64().unwrap_or(1.0).max(1.0);
                view! {
                    <section class="stacks">
                        <p>
                            {format!(
                                "{} live in {} allocations after event {} of {events}{}",
                                fmt::bytes_of(&s["total_bytes"]),
                                s["count"],
                                s["position"],
                                if url.get("pos").is_none() { " (the peak)" } else { "" },
                            )}
                        </p>
                        <div class="icicle">{icicle(&s["flame"], total, 0)}</div>
                        <SitesTable sites=s["sites"].as_array().cloned().unwrap_or_default() total=total/>
                    </section>
                }
                    .into_any()
            }
        }}
    }
}

/// The cached-segment timeline: each segment a row (by address), a bar from its cudaMalloc to its
/// cudaFree; the chosen position as a line. Click to choose a position.
#[component]
fn SegmentTimeline(pos: Memo<u64>, events: u64) -> impl IntoView {
    let url: UrlState = expect_context();
    let canvas = NodeRef::<leptos::html::Canvas>::new();
    let spans = LocalResource::new(move || {
        let id = url.id.get();
        let dq = url.device_query();
        async move { api::get::<Value>(&format!("/api/snapshots/{id}/segments?{dq}")).await }
    });
    Effect::new(move |_| {
        let (Some(Ok(d)), Some(c)) = (spans.get(), canvas.get()) else {
            return;
        };
        use wasm_bindgen::JsCast;
        let g: web_sys::CanvasRenderingContext2d = c
            .get_context("2d")
            .ok()
            .flatten()
            .expect("2d")
            .unchecked_into();
        let (w, h) = (c.width() as f64, c.height() as f64);
        g.set_fill_style_str("#fff");
        g.fill_rect(0.0, 0.0, w, h);
        let segs = d["segments"].as_array().cloned().unwrap_or_default();
        let n = segs.len().max(1) as f64;
        let ev = (events.max(1)) as f64;
        let row = (h / n).clamp(1.0, 10.0);
        for (i, s) in segs.iter().enumerate() {
            let start = s["start"]
                .as_u64()
                .filter(|&x| x != u32::MAX as u64)
                .unwrap_or(0) as f64;
            let end = s["end"]
                .as_u64()
                .filter(|&x| x != u32::MAX as u64)
                .map_or(ev, |e| e as f64);
            g.set_fill_style_str(if s["segment_type"].as_str() == Some("small") {
                "#74c0fc"
            } else {
                "#4c6ef5"
            });
            g.fill_rect(
                start / ev * w,
                i as f64 * row,
                ((end - start) / ev * w).max(1.0),
                (row - 1.0).max(1.0),
            );
        }
        g.set_fill_style_str("#c92a2a");
        g.fill_rect(pos.get() as f64 / ev * w - 1.0, 0.0, 2.0, h);
    });
    let on_click = move |e: web_sys::MouseEvent| {
        let Some(c) = canvas.get() else { return };
        let rect = c.get_bounding_client_rect();
        let f = ((e.client_x() as f64 - rect.left()) / rect.width()).clamp(0.0, 1.0);
        url.set(&[(
            "pos",
            Some(((f * events as f64).round() as u64).to_string()),
        )]);
    };
    view! {
        <h3>"Cached segments over the trace (click to choose a moment)"</h3>
        <canvas id="segment-timeline" node_ref=canvas width="1200" height="120" on:click=on_click></canvas>
    }
}

/// Call sites, sortable by bytes, count or name (click a column header).
#[component]
fn SitesTable(sites: Vec<Value>, total: f64) -> impl IntoView {
    let sort = RwSignal::new(("bytes", true));
    let header = move |key: &'static str, label: &'static str| {
        view! {
            <th class="sortable" on:click=move |_| sort.update(|s| *s = (key, if s.0 == key { !s.1 } else { true }))>
                {move || {
                    let (k, desc) = sort.get();
                    format!("{label}{}", if k == key { if desc { " ▼" } else { " ▲" } } else { "" })
                }}
            </th>
        }
    };
    let site_name = |c: &Value| fmt::site(&c["site"]);
    view! {
        <table class="sites">
            <tr>
                {header("bytes", "bytes")}
                <th>"%"</th>
                {header("count", "allocations")}
                {header("site", "call site")}
            </tr>
            {move || {
                let (key, desc) = sort.get();
                let mut rows = sites.clone();
                rows.sort_by(|a, b| {
                    let o = match key {
                        "count" => a["count"].as_u64().cmp(&b["count"].as_u64()),
                        "site" => site_name(a).cmp(&site_name(b)),
                        _ => a["bytes"].as_u64().cmp(&b["bytes"].as_u64()),
                    };
                    if desc { o.reverse() } else { o }
                });
                rows.iter()
                    .map(|c| {
                        view! {
                            <tr>
                                <td class="num">{fmt::bytes_of(&c["bytes"])}</td>
                                <td class="num">{format!("{:.1}", c["bytes"].as_f64().unwrap_or(0.0) / total * 100.0)}</td>
                                <td class="num">{c["count"].to_string()}</td>
                                <td>
                                    <details>
                                        <summary>{site_name(c)}</summary>
                                        {frames_list(&c["frames"], 40)}
                                    </details>
                                </td>
                            </tr>
                        }
                    })
                    .collect_view()
            }}
        </table>
    }
}

/// An icicle chart: the outermost frames on top, width proportional to bytes.
fn icicle(node: &Value, total: f64, depth: usize) -> AnyView {
    let children = node["children"].as_array().cloned().unwrap_or_default();
    if depth > 24 {
        return ().into_any();
    }
    let kids = children
        .iter()
        .filter(|c| c["bytes"].as_f64().unwrap_or(0.0) / total > 0.002)
        .map(|c| {
            let w = c["bytes"].as_f64().unwrap_or(0.0) / total * 100.0;
            let label = format!("{} ({})", c["name"].as_str().unwrap_or(""), fmt::bytes_of(&c["bytes"]));
            let title = format!("{}:{} {}", c["filename"].as_str().unwrap_or(""), c["line"], label);
            view! {
                <div class="ice" style=format!("width:{w:.3}%") title=title>
                    <div class="ice-label">{label}</div>
                    <div class="ice-kids">{icicle(c, c["bytes"].as_f64().unwrap_or(1.0).max(1.0), depth + 1)}</div>
                </div>
            }
        })
        .collect_view();
    kids.into_any()
}

#[component]
fn Segments(report: Value) -> impl IntoView {
    let url: UrlState = expect_context();
    let events = shown_events(&report, url);
    let pos = Memo::new(move |_| {
        url.get("pos")
            .and_then(|p| p.parse::<u64>().ok())
            .unwrap_or(events)
            .min(events)
    });
    let data = LocalResource::new(move || {
        let (id, p) = (url.id.get(), pos.get());
        let dq = url.device_query();
        async move { api::get::<Value>(&format!("/api/snapshots/{id}/state?position={p}{dq}")).await }
    });
    let step = move |d: i64| {
        let p = (pos.get_untracked() as i64 + d).clamp(0, events as i64);
        url.set(&[("pos", Some(p.to_string()))]);
    };
    let hovered = RwSignal::new(String::new());
    view! {
        <section
            class="segments"
            tabindex="0"
            on:keydown=move |ev: web_sys::KeyboardEvent| match ev.key().as_str() {
                "ArrowLeft" => step(if ev.shift_key() { -100 } else { -1 }),
                "ArrowRight" => step(if ev.shift_key() { 100 } else { 1 }),
                _ => {}
            }
        >
            <div class="toolbar">
                <button on:click=move |_| step(-1)>"◀"</button>
                <input
                    type="range"
                    min="0"
                    max=events.to_string()
                    prop:value=move || pos.get().to_string()
                    on:change=move |ev| url.set(&[("pos", Some(event_target_value(&ev)))])
                />
                <button on:click=move |_| step(1)>"▶"</button>
                <span>{move || format!("after event {} of {} (←/→ steps, shift: ×100)", pos.get(), events)}</span>
            </div>
            <SegmentTimeline pos=pos events=events/>
            <p class="hover">{move || hovered.get()}</p>
            {move || match data.get() {
                None => view! { <p>"loading…"</p> }.into_any(),
                Some(Err(e)) => view! { <p class="error">{e}</p> }.into_any(),
                Some(Ok(st)) => {
                    let segs = st["segments"].as_array().cloned().unwrap_or_default();
                    let largest = segs.iter().map(|s| s["total_size"].as_f64().unwrap_or(0.0)).fold(1.0, f64::max);
                    view! {
                        <p>{format!(
                            "{} segments, reserved {}, allocated {}, rounding waste {}, cached free {} in {} blocks (largest {}){}",
                            segs.len(),
                            fmt::bytes_of(&st["total"]["reserved_bytes"]),
                            fmt::bytes_of(&st["total"]["allocated_bytes"]),
                            fmt::bytes_of(&st["total"]["internal_bytes"]),
                            fmt::bytes_of(&st["total"]["external_bytes"]),
                            st["total"]["inactive_blocks"],
                            fmt::bytes_of(&st["total"]["largest_free_bytes"]),
                            if st["exact"].as_bool().unwrap_or(false) { ", as recorded at the snapshot" } else { ", rebuilt from the trace" }
                        )}</p>
                        <div class="segmap">
                            {segs
                                .iter()
                                .map(|s| {
                                    let total = s["total_size"].as_f64().unwrap_or(1.0).max(1.0);
                                    let width = (total / largest * 100.0).max(0.5);
                                    let blocks = s["blocks"].as_array().cloned().unwrap_or_default();
                                    let fr = &s["fragmentation"];
                                    let title = format!(
                                        "segment {:#x}: {} {} pool, stream {}{}: allocated {}, rounding waste {}, cached free {} in {} blocks (largest {})",
                                        s["address"].as_u64().unwrap_or(0),
                                        fmt::bytes(total),
                                        s["segment_type"].as_str().unwrap_or(""),
                                        s["stream"],
                                        if s["is_expandable"].as_bool().unwrap_or(false) { ", expandable" } else { "" },
                                        fmt::bytes_of(&fr["allocated_bytes"]),
                                        fmt::bytes_of(&fr["internal_bytes"]),
                                        fmt::bytes_of(&fr["external_bytes"]),
                                        fr["inactive_blocks"],
                                        fmt::bytes_of(&fr["largest_free_bytes"]),
                                    );
                                    view! {
                                        <div class="segrow" title=title>
                                            <div class="seg" style=format!("width:{width:.2}%")>
                                                {blocks
                                                    .iter()
                                                    .map(|b| {
                                                        let w = b["size"].as_f64().unwrap_or(0.0) / total * 100.0;
                                                        let waste = b["size"].as_f64().unwrap_or(0.0) - b["requested_size"].as_f64().unwrap_or(0.0);
                                                        let info = format!(
                                                            "{} block {} (requested {}, rounding waste {})",
                                                            b["state"].as_str().unwrap_or(""),
                                                            fmt::bytes_of(&b["size"]),
                                                            fmt::bytes_of(&b["requested_size"]),
                                                            fmt::bytes(waste.max(0.0))
                                                        );
                                                        let (id, stack) = (url.id.get_untracked(), b["stack"].as_u64().unwrap_or(0));
                                                        let info2 = info.clone();
                                                        view! {
                                                            <div
                                                                class=format!("block {}", b["state"].as_str().unwrap_or(""))
                                                                style=format!(
                                                                    "width:{w:.3}%;--waste:{:.2}%",
                                                                    (waste.max(0.0) / b["size"].as_f64().unwrap_or(1.0).max(1.0) * 100.0).min(100.0)
                                                                )
                                                                title=info
                                                                on:mouseenter=move |_| {
                                                                    let (id, info) = (id.clone(), info2.clone());
                                                                    hovered.set(info.clone());
                                                                    if stack > 0 {
                                                                        leptos::task::spawn_local(async move {
                                                                            if let Ok(frames) = api::get::<Value>(&format!("/api/snapshots/{id}/frames/{stack}")).await {
                                                                                let f: Vec<String> = frames.as_array().map(|a| a.iter().take(4).map(fmt::frame).collect()).unwrap_or_default();
                                                                                hovered.set(format!("{info}: {}", f.join(" ← ")));
                                                                            }
                                                                        });
                                                                    }
                                                                }
                                                            ></div>
                                                        }
                                                    })
                                                    .collect_view()}
                                            </div>
                                        </div>
                                    }
                                })
                                .collect_view()}
                        </div>
                    }
                        .into_any()
                }
            }}
        </section>
    }
}
