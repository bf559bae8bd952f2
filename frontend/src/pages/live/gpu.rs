//! A GPU's page (`/live/gpu/UUID`): NVML used over time, and per process PyTorch allocated,
//! cached and the memory outside PyTorch as stacked bands; a table of its processes now.

use leptos::prelude::*;
use leptos_router::hooks::{use_params_map, use_query_map};

use super::chart::{
    Chart, Series, fixed_window, live_frame, live_ticks, minutes_param, series, span_picker,
    values, window_query,
};
use super::links::process_href;
use crate::canvas::{Ink, Paint};
use crate::{api, fmt};

const PALETTE: [(&str, &str, &str); 4] = [
    ("#2e86de", "#8fc1f0", "#e67e22"),
    ("#16a085", "#8fd6c6", "#d35400"),
    ("#8e44ad", "#c9a6dc", "#c0392b"),
    ("#2c3e50", "#95a5a6", "#f39c12"),
];

#[component]
pub fn GpuPage() -> impl IntoView {
    api::page_scope();
    let params = use_params_map();
    let query = use_query_map();
    let uuid = Memo::new(move |_| params.get().get("uuid").unwrap_or_default());
    let minutes = minutes_param(query);
    let fixed = fixed_window(query);
    let tick = live_ticks();
    let data = LocalResource::new(move || {
        tick.get();
        let (u, q) = (uuid.get(), window_query(minutes.get(), fixed.get()));
        async move { api::gpu(&u, &q).await }
    });
    live_frame(data, move |p| {
        gpu_view(
            p,
            minutes,
            ::api::routes::page::live_gpu(&uuid.get_untracked()),
        )
        .into_any()
    })
}

/// The latest value of a series.
pub fn last_some(v: &[Option<i64>]) -> Option<i64> {
    v.iter().rev().find_map(|x| *x)
}

fn gpu_view(p: ::api::GpuPage, minutes: Memo<f64>, base: String) -> impl IntoView {
    let gpu = &p.gpu;
    let times: Vec<f64> = p.times_ms.iter().map(|&t| t as f64).collect();
    let mut all = Vec::new();
    // Per process: allocated, cached (reserved − allocated), outside PyTorch; NVML used alone
    // for processes without an agent.
    let mut sum_nvml = vec![0.0f64; times.len()];
    for (k, pr) in p.processes.iter().enumerate() {
        let (c_alloc, c_cache, c_out) = PALETTE[k % PALETTE.len()];
        let label = format!("{} {}", pr.name.as_deref().unwrap_or("pid"), pr.pid);
        for (s, v) in sum_nvml.iter_mut().zip(&pr.nvml_used_bytes) {
            *s += v.unwrap_or(0) as f64;
        }
        if pr.has_agent {
            let cached: Vec<Option<f64>> = pr
                .allocated_bytes
                .iter()
                .zip(&pr.reserved_bytes)
                .map(|(a, r)| Some((r.as_ref()? - a.as_ref()?) as f64))
                .collect();
            all.push(series(
                format!("{label} allocated"),
                c_alloc,
                &pr.allocated_bytes,
                true,
            ));
            all.push(Series {
                label: format!("{label} cached"),
                colour: c_cache.into(),
                values: cached,
                band: true,
            });
            all.push(series(
                format!("{label} outside PyTorch"),
                c_out,
                &pr.outside_pytorch_bytes,
                true,
            ));
        } else {
            all.push(series(
                format!("{label} (no agent)"),
                "#bdc3c7",
                &pr.nvml_used_bytes,
                true,
            ));
        }
    }
    // What NVML counts beyond every process (other contexts, driver): the gap to the used line.
    let other: Vec<Option<f64>> = values(&p.used_bytes)
        .iter()
        .zip(&sum_nvml)
        .map(|(u, s)| u.map(|u| (u - s).max(0.0)))
        .collect();
    all.push(Series {
        label: "other (not in any process)".into(),
        colour: "#ecf0f1".into(),
        values: other,
        band: true,
    });
    all.push(series(
        "NVML used",
        Paint::Ink(Ink::Strong),
        &p.used_bytes,
        false,
    ));
    let markers: Vec<(f64, String)> = p
        .events
        .iter()
        .filter(|e| e.kind == ::api::EventKind::Oom)
        .map(|e| (e.time_ms as f64, "OOM".to_string()))
        .collect();
    let title = format!(
        "{} · GPU #{} {}",
        gpu.host,
        gpu.idx,
        gpu.name.as_deref().unwrap_or("")
    );
    let used_now = last_some(&p.used_bytes);
    let used_peak = p.used_bytes.iter().flatten().copied().max();
    let total = gpu.total_bytes.unwrap_or(0);
    let host = gpu.host.clone();
    view! {
        <h1>{title}</h1>
        <p class="muted">{gpu.uuid.clone()}</p>
        <div class="figures">
            <div><b>{used_now.map(fmt::bytes)}</b><span>{format!("used now, of {}", fmt::bytes(total))}</span></div>
            <div><b>{used_peak.map(fmt::bytes)}</b><span>"peak in this window"</span></div>
        </div>
        {span_picker(minutes, base)}
        <Chart id="gpu-chart" times=times all=all markers=markers/>
        <table class="procs">
            <thead><tr><th>"process"</th><th>"NVML used"</th><th>"PyTorch reserved"</th><th>"allocated"</th><th>"outside PyTorch"</th></tr></thead>
            <tbody>
            {p.processes.into_iter().map(|pr| {
                let href = process_href(&host, pr.pid, pr.start_time_ms);
                view! {
                    <tr>
                        <td><a href=href>{format!("{} {}", pr.name.as_deref().unwrap_or("pid"), pr.pid)}</a></td>
                        <td>{last_some(&pr.nvml_used_bytes).map(fmt::bytes)}</td>
                        <td>{if pr.has_agent { last_some(&pr.reserved_bytes).map(fmt::bytes) } else { Some("no agent".into()) }}</td>
                        <td>{last_some(&pr.allocated_bytes).map(fmt::bytes)}</td>
                        <td class="outside">{last_some(&pr.outside_pytorch_bytes).map(fmt::bytes)}</td>
                    </tr>
                }
            }).collect_view()}
            </tbody>
        </table>
    }
}
