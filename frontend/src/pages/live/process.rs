//! A process's page (`/live/process/HOST/PID`): per device, the allocator's series, NVML's
//! reading and the memory outside PyTorch, per-step figures and the live leak signal; its events
//! (OOMs linking to their snapshots).

use leptos::prelude::*;
use leptos_router::hooks::{use_params_map, use_query_map};

use super::chart::{
    Chart, Series, fixed_window, live_frame, live_ticks, minutes_param, series, span_picker,
    window_query,
};
use super::gpu::last_some;
use super::links::snapshot_link;
use crate::canvas::{Ink, Paint};
use crate::{api, fmt};

#[component]
pub fn ProcessPage() -> impl IntoView {
    api::page_scope();
    let params = use_params_map();
    let query = use_query_map();
    let key = Memo::new(move |_| {
        let p = params.get();
        (
            p.get("host").unwrap_or_default(),
            p.get("pid")
                .and_then(|v| v.parse::<i64>().ok())
                .unwrap_or(0),
        )
    });
    let minutes = minutes_param(query);
    // `?start=`: the process's start time, telling a reused pid apart.
    let start = Memo::new(move |_| query.get().get("start").and_then(|s| s.parse::<i64>().ok()));
    let fixed = fixed_window(query);
    let tick = live_ticks();
    let data = LocalResource::new(move || {
        tick.get();
        let ((host, pid), st) = (key.get(), start.get());
        let q = ::api::WindowQuery {
            start_time_ms: st,
            ..window_query(minutes.get(), fixed.get())
        };
        async move { api::process(&host, pid, &q).await }
    });
    live_frame(data, move |p| {
        let (h, pid) = key.get_untracked();
        let base = ::api::routes::page::live_process(&h, pid, start.get_untracked());
        process_view(p, minutes, base).into_any()
    })
}

fn device_view(
    d: ::api::DeviceSeries,
    times: &[f64],
    markers: &[(f64, String)],
) -> impl IntoView + use<> {
    let leak = &d.leak;
    let signal = if leak.rising {
        format!(
            "Leak signal: memory held between steps keeps rising, {} per step over the last {} steps ({} in all).",
            fmt::bytes(leak.bytes_per_step),
            leak.steps,
            fmt::bytes(leak.growth_bytes)
        )
    } else if d.steps.len() >= 8 {
        format!(
            "No leak signal: memory held between steps is steady over the last {} steps.",
            leak.steps
        )
    } else {
        "Mark training steps with memscope_agent.step(n) for a per-step leak signal.".into()
    };
    let all = vec![
        series("allocated", "#2e86de", &d.allocated_bytes, false),
        series("reserved", "#16a085", &d.reserved_bytes, false),
        series("inactive split", "#f39c12", &d.inactive_split_bytes, false),
        series(
            "NVML used",
            Paint::Ink(Ink::Strong),
            &d.nvml_used_bytes,
            false,
        ),
        series(
            "outside PyTorch",
            "#e67e22",
            &d.outside_pytorch_bytes,
            false,
        ),
    ];
    let step_times: Vec<f64> = d.steps.iter().map(|s| s.time_ms as f64).collect();
    let step_series = vec![
        Series {
            label: "allocated at step low".into(),
            colour: "#c0392b".into(),
            values: d
                .steps
                .iter()
                .map(|s| Some(s.allocated_min_bytes as f64))
                .collect(),
            band: false,
        },
        Series {
            label: "allocated at step peak".into(),
            colour: "#2e86de".into(),
            values: d
                .steps
                .iter()
                .map(|s| Some(s.allocated_max_bytes as f64))
                .collect(),
            band: false,
        },
    ];
    let retries = last_some(&d.alloc_retries).unwrap_or(0);
    let rising = leak.rising;
    view! {
        <h2>{format!("device {} {}", d.device, d.gpu_uuid.as_deref().unwrap_or(""))}</h2>
        <p class=if rising { "leak-signal rising" } else { "leak-signal" }>{signal}</p>
        {(retries > 0).then(|| view! { <p class="alert">{format!("{retries} allocation {}: cudaMalloc failed and PyTorch flushed its cache to retry. An OOM is near.", if retries == 1 { "retry" } else { "retries" })}</p> })}
        <Chart id=format!("proc-chart-{}", d.device) times=times.to_vec() all=all markers=markers.to_vec()/>
        {(step_times.len() >= 2).then(|| view! {
            <h3>"Per step"</h3>
            <Chart id=format!("step-chart-{}", d.device) times=step_times all=step_series markers=vec![]/>
        })}
    }
}

fn process_view(p: ::api::ProcessPage, minutes: Memo<f64>, base: String) -> impl IntoView {
    let times: Vec<f64> = p.times_ms.iter().map(|&t| t as f64).collect();
    let markers: Vec<(f64, String)> = p
        .events
        .iter()
        .filter(|e| e.kind == ::api::EventKind::Oom)
        .map(|e| (e.time_ms as f64, "OOM".into()))
        .collect();
    let title = format!(
        "{} · {} pid {}",
        p.host,
        p.name.as_deref().unwrap_or("process"),
        p.pid
    );
    let no_agent = p.devices.is_empty();
    view! {
        <h1>{title}</h1>
        {span_picker(minutes, base)}
        {no_agent.then(|| view! {
            <p class="muted">"No PyTorch agent in this process: only NVML's reading is known. Add "
            <code>"import memscope_agent; memscope_agent.start()"</code>" to the training script."</p>
        })}
        {p.devices.into_iter().map(|d| device_view(d, &times, &markers)).collect_view()}
        <h2>"Events"</h2>
        {p.events.is_empty().then(|| view! { <p class="muted">"None."</p> })}
        <ul class="alerts">
            {p.events.into_iter().map(|e| view! {
                <li class=format!("alert-{}", e.kind.as_str())>
                    <span class="when">{fmt::date(e.time_ms)}</span>
                    <b>{e.kind.as_str().to_string()}</b>
                    <span>{e.message.clone()}</span>
                    {snapshot_link(&e)}
                </li>
            }).collect_view()}
        </ul>
    }
}
