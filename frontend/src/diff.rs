//! Two snapshots compared (`/diff/A/B`): headline figures, memory by call site at each peak and
//! leak suspects, matched by call site so that two runs of the same code line up. The server
//! does the matching (`GET /api/diff/A/B`); this page lays it out.

use leptos::prelude::*;
use leptos_router::hooks::{use_params_map, use_query_map};
use serde_json::Value;

use crate::{api, fmt};

#[component]
pub fn DiffPage() -> impl IntoView {
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
        ["device_a", "device_b"]
            .into_iter()
            .filter_map(|k| {
                q.get(k)
                    .map(|v| format!("{k}={}", js_sys::encode_uri_component(&v)))
            })
            .collect::<Vec<_>>()
            .join("&")
    });
    let data = LocalResource::new(move || {
        let ((a, b), dq) = (ids.get(), devices.get());
        async move { api::get::<Value>(&format!("/api/diff/{a}/{b}?{dq}")).await }
    });
    view! {
        <section class="diff">
            {move || match data.get() {
                None => view! { <p>"comparing…"</p> }.into_any(),
                Some(Err(e)) => view! { <p class="error">{e}</p> }.into_any(),
                Some(Ok(d)) => diff_view(&d).into_any(),
            }}
        </section>
    }
}

/// `+1.5 GiB` / `−24.0 MiB` / `+3` / `0`.
fn signed(delta: i64, bytes: bool) -> String {
    let mag = if bytes {
        fmt::bytes(delta.unsigned_abs() as f64)
    } else {
        fmt::count(delta.unsigned_abs())
    };
    match delta.signum() {
        1 => format!("+{mag}"),
        -1 => format!("−{mag}"),
        _ => "0".into(),
    }
}

fn delta_cell(delta: i64, bytes: bool) -> impl IntoView {
    let (up, down) = (delta > 0, delta < 0);
    view! { <td class="num" class:up=up class:down=down>{signed(delta, bytes)}</td> }
}

fn stack(frames: &Value) -> impl IntoView + use<> {
    view! {
        <details>
            <summary>"stack"</summary>
            {crate::snapshot::frames_list(frames, usize::MAX)}
        </details>
    }
}

fn diff_view(d: &Value) -> impl IntoView {
    let (a, b) = (&d["a"], &d["b"]);
    let (a_id, b_id) = (
        a["id"].as_str().unwrap_or("").to_string(),
        b["id"].as_str().unwrap_or("").to_string(),
    );
    let figures = d["figures"].as_array().cloned().unwrap_or_default();
    let sites = d["sites_at_peak"].as_array().cloned().unwrap_or_default();
    let leaks = d["leaks"].as_array().cloned().unwrap_or_default();
    let unchanged = d["unchanged_sites"].as_u64().unwrap_or(0);
    let by_bytes = |v: &Value, bytes: bool| {
        let n = v.as_u64().unwrap_or(0);
        if bytes {
            fmt::bytes(n as f64)
        } else {
            fmt::count(n)
        }
    };
    view! {
        <h1>
            <a href=format!("/s/{a_id}")>{a["name"].as_str().unwrap_or("A").to_string()}</a>
            <span class="arrow">"→"</span>
            <a href=format!("/s/{b_id}")>{b["name"].as_str().unwrap_or("B").to_string()}</a>
        </h1>
        <p class="hint">
            {format!("A = {a_id} (cuda:{}), B = {b_id} (cuda:{}). ", d["device_a"], d["device_b"])}
            <a class="swap" href=format!("/diff/{b_id}/{a_id}")>"swap A and B"</a>
        </p>
        <table class="diff-figures">
            <thead><tr><th></th><th class="num">"A"</th><th class="num">"B"</th><th class="num">"B − A"</th></tr></thead>
            <tbody>
                {figures.into_iter().map(|f| {
                    let bytes = f["bytes"].as_bool().unwrap_or(false);
                    view! {
                        <tr>
                            <td>{f["name"].as_str().unwrap_or("").to_string()}</td>
                            <td class="num">{by_bytes(&f["a"], bytes)}</td>
                            <td class="num">{by_bytes(&f["b"], bytes)}</td>
                            {delta_cell(f["delta"].as_i64().unwrap_or(0), bytes)}
                        </tr>
                    }
                }).collect_view()}
            </tbody>
        </table>

        <h3>"Leak suspects"</h3>
        {if leaks.is_empty() {
            view! { <p class="ok">"Neither snapshot has leak suspects."</p> }.into_any()
        } else {
            view! {
                <table class="leak-diff">
                    <thead><tr><th>"call site"</th><th></th><th class="num">"alive at the end in A"</th><th class="num">"in B"</th></tr></thead>
                    <tbody>
                        {leaks.into_iter().map(|l| {
                            let (la, lb) = (l["a_bytes"].as_u64(), l["b_bytes"].as_u64());
                            let (class, label) = match (la, lb) {
                                (None, Some(_)) => ("status new", "new in B"),
                                (Some(_), None) => ("status gone", "gone in B"),
                                _ => ("status", "in both"),
                            };
                            view! {
                                <tr class="leak-row">
                                    <td><span class="site">{fmt::site(&l["site"])}</span>{stack(&l["frames"])}</td>
                                    <td><span class=class>{label}</span></td>
                                    <td class="num">{la.map_or("–".into(), |v| fmt::bytes(v as f64))}</td>
                                    <td class="num">{lb.map_or("–".into(), |v| fmt::bytes(v as f64))}</td>
                                </tr>
                            }
                        }).collect_view()}
                    </tbody>
                </table>
            }.into_any()
        }}

        <h3>"Memory by call site at each snapshot's peak"</h3>
        <p class="hint">{format!("The largest changes first; {unchanged} call sites hold the same memory in both and are not listed.")}</p>
        {if sites.is_empty() {
            view! { <p class="ok">"No call site holds different memory at the peak."</p> }.into_any()
        } else {
            view! {
                <table class="site-diff">
                    <thead><tr><th>"call site"</th><th class="num">"A"</th><th class="num">"B"</th><th class="num">"B − A"</th><th class="num">"allocations A → B"</th></tr></thead>
                    <tbody>
                        {sites.into_iter().map(|s| view! {
                            <tr class="site-row">
                                <td><span class="site">{fmt::site(&s["site"])}</span>{stack(&s["frames"])}</td>
                                <td class="num">{fmt::bytes(s["a_bytes"].as_f64().unwrap_or(0.0))}</td>
                                <td class="num">{fmt::bytes(s["b_bytes"].as_f64().unwrap_or(0.0))}</td>
                                {delta_cell(s["delta_bytes"].as_i64().unwrap_or(0), true)}
                                <td class="num">{format!("{} → {}", s["a_count"], s["b_count"])}</td>
                            </tr>
                        }).collect_view()}
                    </tbody>
                </table>
            }.into_any()
        }}
    }
}
