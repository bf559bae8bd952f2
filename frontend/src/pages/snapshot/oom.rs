//! The OOM tab: what the OOMs did to the run first ("Survived 39 OOMs; none ended the run"),
//! then one card per incident (OOMs with the same line, cause and fate), the fatal one first: its
//! latest OOM explained (survived or fatal and the evidence, what was asked in PyTorch's words,
//! the line that asked, what the driver and PyTorch held, the verdict and what to do), with links
//! to the allocator's state and memory by stack at that moment, and the device's total memory:
//! shown with where it came from, or asked for (a GPU picker) when the verdict needs it.

use std::sync::Arc;

use leptos::prelude::*;

use super::context::{InfoResource, Revision};
use crate::pages::widgets::{kv, stack_frames};
use crate::url::UrlState;
use crate::{api, fmt};

#[component]
pub fn Ooms(report: Arc<::api::Report>) -> impl IntoView {
    if report.ooms.is_empty() {
        return view! { <p class="ok">"No out-of-memory events in this trace."</p> }.into_any();
    }
    // One card per incident, its latest OOM shown; a report without incidents shows every OOM.
    let cards: Vec<(String, &::api::OomReport)> = if report.oom_incidents.is_empty() {
        report.ooms.iter().map(|o| (String::new(), o)).collect()
    } else {
        report
            .oom_incidents
            .iter()
            .filter_map(|inc| {
                let o = report
                    .ooms
                    .iter()
                    .find(|o| o.device == inc.device && o.position == inc.shown_position)?;
                Some((inc.summary.clone(), o))
            })
            .collect()
    };
    let survived = report.ooms.iter().all(|o| o.recovered);
    let incidents = cards.len();
    let driver_had_room = report.driver_had_room();
    view! {
        <section class="ooms">
            {report.oom_outcome.clone().map(|t| view! {
                <p class="oom-outcome" class:survived=survived class:fatal=!survived>{t}</p>
            })}
            {(incidents > 1).then(|| view! {
                <p class="muted incidents-note">
                    {format!(
                        "{} OOMs in {incidents} incidents (the same line, cause and fate){}; each shows its latest OOM.",
                        report.ooms.len(),
                        if survived { ", newest first" } else { ", the fatal one first" }
                    )}
                </p>
            })}
            {match driver_had_room {
                Some(free) => view! {
                    <p class="process-limit">
                        {format!(
                            "The driver still had {} free when the allocation failed, so a limit on this process (torch.cuda.set_per_process_memory_fraction, or a container's), not the GPU's size, stopped it: the verdicts below do not need the GPU's size.",
                            fmt::bytes(free)
                        )}
                    </p>
                }
                .into_any(),
                None => view! { <DeviceTotal/> }.into_any(),
            }}
            {cards
                .into_iter()
                .enumerate()
                .map(|(i, (summary, o))| oom_card(&report, o, summary, i == 0))
                .collect_view()}
        </section>
    }
    .into_any()
}

/// One incident's card: its latest OOM explained.
fn oom_card(
    report: &::api::Report,
    o: &::api::OomReport,
    summary: String,
    first: bool,
) -> impl IntoView + use<> {
    let url: UrlState = expect_context();
    let at_oom = |view: &str| {
        url.href(&[
            ("view", view.to_string()),
            ("device", o.device.to_string()),
            ("pos", o.position.to_string()),
        ])
    };
    // The timeline zoomed to the OOM: the last eighth of the run before it (at most a second,
    // at least 2 ms), the OOM near the right edge.
    let timeline_href = {
        let start = report
            .devices
            .get(&o.device)
            .and_then(|d| d.first_time_us)
            .unwrap_or(o.time_us);
        let span = ((o.time_us - start) / 8).clamp(2_000, 1_000_000);
        let (from, to) = super::leaks::around(o.time_us - span, o.time_us);
        url.href(&[
            ("view", "timeline".to_string()),
            ("device", o.device.to_string()),
            ("axis", "time".to_string()),
            ("from", from.to_string()),
            ("to", to.to_string()),
            ("pos", o.position.to_string()),
        ])
    };
    let asked = format!(
        "Tried to allocate {}",
        snapshot::units::pytorch_size(o.requested_bytes)
    );
    let block = if o.block_bytes == o.requested_bytes {
        String::new()
    } else {
        format!(" for a {} block", fmt::bytes(o.block_bytes))
    };
    let (fate, fate_class) = match o.recovery {
        ::api::Recovery::Fatal => ("fatal", "fatal"),
        ::api::Recovery::Caught => ("survived: caught", "survived"),
        ::api::Recovery::WorkspaceFallback => ("survived: workspace fallback", "survived"),
    };
    let step = o.step.map(|s| format!(", step {s}")).unwrap_or_default();
    view! {
        <article class="oom" class:first=first data-recovery=o.recovery.as_str()>
            {(!summary.is_empty()).then(|| view! { <p class="which incident">{summary}</p> })}
            <h3>
                <span class="fate" data-fate=fate_class>{fate}</span>
                {format!(" · device {} at event {}{step}: ", o.device, fmt::count(o.position as u64))}
                <span class="verdict" data-verdict=o.verdict.as_str()>
                    {o.verdict.as_str().replace('_', " ")}
                </span>
            </h3>
            <p class="recovery muted">{o.recovery_evidence.clone()}</p>
            <p class="asked">
                <code>{asked}</code>
                {block}
                {o.site.as_ref().map(|s| view! {
                    " at "
                    <code class="failing-line">{s.short()}</code>
                })}
            </p>
            <p class="pytorch-message" title="PyTorch's OOM message, rebuilt from the trace's figures">
                <code>{o.pytorch_message.clone()}</code>
            </p>
            <p class="explanation">{o.explanation.clone()}</p>
            {(o.categories.total() > 0).then(|| crate::categories::category_bar(&o.categories, "at the OOM: "))}
            {(!o.advice.is_empty()).then(|| view! {
                <h4>"What to do"</h4>
                <ul class="advice">
                    {o.advice.iter().map(|a| view! { <li>{a.clone()}</li> }).collect_view()}
                </ul>
            })}
            {o.whatif.as_ref().map(|w| {
                let mut q = vec![
                    ("view", "whatif".to_string()),
                    ("device", o.device.to_string()),
                ];
                if let Some(c) = &w.alloc_conf {
                    q.push(("conf", c.clone()));
                }
                let words = format!(
                    "The trace was replayed under {} allocator settings for this OOM: ",
                    w.settings_tried
                );
                view! {
                    <p class="oom-whatif">
                        {words}
                        <a href=url.href(&q)>"compare them in the What if tab"</a>
                    </p>
                }
            })}
            <div class="figures">
                {kv("driver free", o.device_free_bytes.map_or("not recorded".into(), fmt::bytes))}
                {kv("device total", o.device_total_bytes.map_or("unknown".into(), fmt::bytes))}
                {kv("reserved", fmt::bytes(o.reserved_bytes))}
                {kv("allocated", fmt::bytes(o.allocated_bytes))}
                {kv("cached free", fmt::bytes(o.cached_free_bytes))}
                {kv("largest free block", fmt::bytes(o.largest_free_block_bytes))}
                {o.outside_pytorch_bytes.map(|b| kv("outside PyTorch", fmt::bytes(b)))}
            </div>
            {(!o.frames.is_empty()).then(|| view! {
                <h4>"Where it was asked for"</h4>
                {stack_frames(&o.frames)}
            })}
            <p class="oom-links">
                "At this moment: "
                <a class="oom-segments" href=at_oom("segments")>
                    "the allocator's segments"
                </a>
                " · "
                <a class="oom-stacks" href=at_oom("stacks")>
                    "memory by stack"
                </a>
                " · "
                <a class="oom-timeline" href=timeline_href>
                    "the timeline around it"
                </a>
            </p>
            <h4>"Largest call sites at the OOM"</h4>
            <ul>
                {o.largest_sites
                    .iter()
                    .map(|s| view! { <li>{format!("{}  {}", fmt::bytes(s.bytes), ::api::site_text(s.site.as_ref()))}</li> })
                    .collect_view()}
            </ul>
        </article>
    }
}

/// The device's total memory: where it came from, and a GPU picker (or a number) to set it; the
/// server judges the OOMs again with it.
#[component]
fn DeviceTotal() -> impl IntoView {
    let info: InfoResource = expect_context();
    let revision: Revision = expect_context();
    let url: UrlState = expect_context();
    let choice = RwSignal::new(String::new());
    let gib = RwSignal::new(String::new());
    let message = RwSignal::new(None::<Result<String, String>>);
    let set = move |total_bytes: u64| {
        let id = url.id.get_untracked();
        leptos::task::spawn_local(async move {
            let u = ::api::UpdateSnapshot {
                device_total_bytes: Some(total_bytes),
                ..Default::default()
            };
            match api::update(&id, &u).await {
                Ok(_) => {
                    message.set(Some(Ok(format!(
                        "Judged again with {} of device memory.",
                        fmt::bytes(total_bytes)
                    ))));
                    revision.0.update(|r| *r += 1);
                }
                Err(e) => message.set(Some(Err(e))),
            }
        });
    };
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let typed = gib.get_untracked();
        let picked = choice.get_untracked();
        let total = if !typed.trim().is_empty() {
            match typed.trim().parse::<f64>() {
                Ok(g) if g > 0.0 => Some((g * (1u64 << 30) as f64) as u64),
                _ => {
                    message.set(Some(Err(format!("“{typed}” is not a size in GiB"))));
                    None
                }
            }
        } else {
            snapshot::gpus::KNOWN
                .iter()
                .find(|g| g.name == picked)
                .map(|g| g.total_bytes)
        };
        if let Some(t) = total {
            set(t);
        }
    };
    let known = move || info.get().and_then(|r| r.ok()).and_then(|i| i.device_total);
    view! {
        <form class="device-total" on:submit=submit>
            {move || match known() {
                Some(t) => view! {
                    <span class="known">
                        {format!(
                            "Device memory: {} ({}{}).",
                            fmt::bytes(t.total_bytes),
                            t.source.words(),
                            t.detail.map(|d| format!(": {d}")).unwrap_or_default()
                        )}
                    </span>
                    " Not right? "
                }
                    .into_any(),
                None => view! {
                    <span class="unknown">
                        "This snapshot does not say how much memory its GPU has; the verdicts need it to tell memory held outside PyTorch from PyTorch's own. Which GPU was it? "
                    </span>
                }
                    .into_any(),
            }}
            <select class="gpu-model" on:change=move |ev| choice.set(event_target_value(&ev))>
                <option value="">"choose a GPU…"</option>
                {snapshot::gpus::KNOWN
                    .iter()
                    .map(|g| crate::pages::widgets::gpu_option(g, false))
                    .collect_view()}
            </select>
            " or "
            <input
                class="gpu-gib"
                type="text"
                inputmode="decimal"
                placeholder="GiB"
                size="6"
                on:input=move |ev| gib.set(event_target_value(&ev))
            />
            " "
            <button type="submit">"Set"</button>
            {move || message.get().map(|m| match m {
                Ok(t) => view! { <span class="saved">{t}</span> }.into_any(),
                Err(e) => view! { <span class="error">{e}</span> }.into_any(),
            })}
        </form>
    }
}
