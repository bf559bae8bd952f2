//! The fleet page (`/live`): every host's GPUs now (memory used, PyTorch's share, the top
//! process, alerts), the alerts of the last day, and every process seen in the last hour.

use leptos::prelude::*;

use super::chart::live_ticks;
use super::links::{process_href, snapshot_link};
use crate::{api, fmt};

#[component]
pub fn FleetPage() -> impl IntoView {
    api::page_scope();
    let tick = live_ticks();
    let data = LocalResource::new(move || {
        tick.get();
        async move { api::fleet().await }
    });
    view! {
        <section class="live">
            <h1>"Live: fleet"</h1>
            <Suspense fallback=|| view! { <p class="muted">"Loading…"</p> }>
                {move || data.get().map(|r| match r {
                    Err(e) => crate::pages::widgets::error_line(e).into_any(),
                    Ok(f) => fleet_view(f).into_any(),
                })}
            </Suspense>
        </section>
    }
}

fn gpu_row(host: &str, now: i64, g: ::api::FleetGpu) -> impl IntoView + use<> {
    let gpu = &g.gpu;
    let used = gpu.used_bytes.unwrap_or(0);
    let total = gpu.total_bytes.unwrap_or(0).max(1);
    let pct = 100.0 * used as f64 / total as f64;
    let href = ::api::routes::page::live_gpu(&gpu.uuid);
    let top_view = g.top_process.as_ref().map(|top| {
        let href = process_href(host, top.pid, top.start_time_ms);
        let label = format!(
            "{} {} · {}",
            top.name.as_deref().unwrap_or("pid"),
            top.pid,
            fmt::bytes(top.used_bytes)
        );
        view! { <a href=href>{label}</a> }
    });
    let alert = match (g.ooms > 0, g.alloc_retries > 0) {
        (true, _) => format!("{} OOM", g.ooms),
        (false, true) => format!("{} alloc retries", g.alloc_retries),
        _ => String::new(),
    };
    view! {
        <tr class:stale=g.stale>
            <td><a href=href>{format!("#{} {}", gpu.idx, gpu.name.as_deref().unwrap_or(""))}</a></td>
            <td class="usecell">
                <div class="usebar"><div style=format!("width:{pct:.1}%")></div></div>
                {format!("{} / {} ({pct:.0}%)", fmt::bytes(used), fmt::bytes(total))}
            </td>
            <td>{fmt::bytes(g.pytorch_reserved_bytes)}</td>
            <td>{top_view}</td>
            <td>{gpu.gpu_util.map(|v| format!("{v}%"))}</td>
            <td>{gpu.temperature_c.map(|v| format!("{v} °C"))}</td>
            <td>{gpu.power_mw.map(|v| format!("{:.0} W", v as f64 / 1000.0))}</td>
            <td class="alert">{alert}</td>
            <td class="muted">{fmt::ago(now, gpu.last_seen_ms)}</td>
        </tr>
    }
}

/// What to run when nothing has reported yet: the exact commands for this server (its address,
/// the collector names it has tokens for), and the agent's lines for PyTorch's own figures.
fn onboarding(collectors: &[String]) -> impl IntoView + use<> {
    let origin = web_sys::window()
        .and_then(|w| w.location().origin().ok())
        .unwrap_or_else(|| "http://HOST:8080".into());
    let name = collectors.first().cloned().unwrap_or_else(|| "gpu1".into());
    let token = format!("TOKEN_OF_{name}");
    let serve = (collectors.is_empty()).then(|| {
        view! {
            <li>
                "This server accepts no collector yet: restart it with a token for each one "
                "(or set " <code>"MEMSCOPE_COLLECTOR_TOKENS"</code> "):"
                <pre class="cmd">{format!("memscope serve --collector-token {name}=CHOOSE_A_SECRET")}</pre>
            </li>
        }
    });
    let accepted = (!collectors.is_empty())
        .then(|| format!("This server has tokens for: {}.", collectors.join(", ")));
    view! {
        <section class="onboarding">
            <h2>"No collector has reported yet"</h2>
            <p class="muted">{accepted}</p>
            <ol>
                {serve}
                <li>
                    "On each GPU host, the collector (NVML: every GPU and process):"
                    <pre class="cmd">{format!("memscope-collector --server {origin} --name {name} --token {token}")}</pre>
                </li>
                <li>
                    "PyTorch's own figures (allocated, cached, steps, OOM snapshots) come from the agent, "
                    "inside the training process: " <code>"pip install ./collectors/python"</code> ", then"
                    <pre class="cmd">"import memscope_agent\nmemscope_agent.start()"</pre>
                    "It hands its samples to the host's collector; without one, set "
                    <code>{format!("MEMSCOPE_SERVER={origin} MEMSCOPE_NAME={name} MEMSCOPE_TOKEN={token}")}</code>
                    "."
                </li>
            </ol>
        </section>
    }
}

fn fleet_view(f: ::api::Fleet) -> impl IntoView {
    let now = f.now_ms;
    let empty = f.hosts.is_empty() && f.processes.is_empty();
    view! {
        {empty.then(|| onboarding(&f.collectors))}
        <div class="fleet">
            {f.hosts.into_iter().map(|h| {
                let host = h.host.clone();
                view! {
                    <div class="host">
                        <h2>{host.clone()}</h2>
                        <table class="gpus">
                            <thead><tr><th>"GPU"</th><th>"memory used"</th><th>"PyTorch reserved"</th>
                            <th>"top process"</th><th>"util"</th><th>"temp"</th><th>"power"</th><th>"alerts"</th><th>"seen"</th></tr></thead>
                            <tbody>
                            {h.gpus.into_iter().map(|g| gpu_row(&host, now, g)).collect_view()}
                            </tbody>
                        </table>
                    </div>
                }
            }).collect_view()}
        </div>
        {(!f.alerts.is_empty()).then(|| view! {
            <h2>"Alerts (24 h)"</h2>
            <ul class="alerts">
                {f.alerts.into_iter().map(|e| {
                    let href = process_href(&e.host, e.pid.unwrap_or(0), None);
                    view! {
                        <li class=format!("alert-{}", e.kind.as_str())>
                            <span class="when">{fmt::date(e.time_ms)}</span>
                            <a href=href>{format!("{} pid {}", e.host, e.pid.map_or("?".into(), |p| p.to_string()))}</a>
                            <span>{e.message.clone()}</span>
                            {snapshot_link(&e)}
                        </li>
                    }
                }).collect_view()}
            </ul>
        })}
        {(!f.processes.is_empty()).then(|| view! {
            <h2>"Processes"</h2>
            <table class="procs">
                <thead><tr><th>"host"</th><th>"pid"</th><th>"name"</th><th>"container"</th><th>"NVML used"</th><th>"PyTorch reserved"</th>
                <th>"allocated"</th><th>"step"</th><th>"retries"</th><th>"OOMs"</th><th>"seen"</th></tr></thead>
                <tbody>
                {f.processes.into_iter().map(|p| {
                    let href = process_href(&p.host, p.pid, p.start_time_ms);
                    let seen = p.last_seen_ms.map(|t| fmt::ago(now, t));
                    view! {
                        <tr class:stale=p.stale>
                            <td>{p.host.clone()}</td>
                            <td><a href=href>{p.pid.to_string()}</a></td>
                            <td>{p.name.clone()}</td>
                            <td class="muted">{p.cgroup.clone()}</td>
                            <td>{fmt::bytes(p.nvml_used_bytes)}</td>
                            <td>{if p.has_agent { fmt::bytes(p.reserved_bytes.unwrap_or(0)) } else { "no agent".into() }}</td>
                            <td>{p.has_agent.then(|| fmt::bytes(p.allocated_bytes.unwrap_or(0)))}</td>
                            <td>{p.step}</td>
                            <td>{p.alloc_retries}</td>
                            <td>{p.ooms}</td>
                            <td class="muted">{seen}</td>
                        </tr>
                    }
                }).collect_view()}
                </tbody>
            </table>
        })}
    }
}
