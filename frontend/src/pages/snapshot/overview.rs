//! The overview tab: the answer in words first (the OOM and why, the leak and how fast it grows,
//! else the peak), each sentence linking to the view that shows it; then headline figures,
//! warnings, devices, allocator settings, and "compare with" another snapshot of the library.

use std::sync::Arc;

use leptos::prelude::*;

use crate::pages::help::Term;
use crate::pages::widgets::{kv, kv_term};
use crate::url::UrlState;
use crate::{api, fmt};

#[component]
pub fn Overview(report: Arc<::api::Report>) -> impl IntoView {
    let r = &*report;
    let f = &r.format;
    let settings = r.allocator_settings.as_ref().map(settings_rows);
    let url: UrlState = expect_context();
    let sentences = headline(r);
    view! {
        <section class="overview">
            <p class="headline">
                {sentences
                    .into_iter()
                    .map(|h| {
                        let href = url.href(&h.link);
                        view! {
                            <span class=format!("said s-{}", h.kind)>
                                <span class="sentence">{h.text}</span>
                                " "
                                <a class="more" href=href>{h.link_text}</a>
                            </span>
                        }
                    })
                    .collect_view()}
            </p>
            <div class="figures">
                {kv_term("segment", "segments", fmt::count(r.segments))}
                {kv("blocks", fmt::count(r.blocks))}
                {kv_term("reserved", "reserved at the snapshot", fmt::bytes(r.reserved_bytes))}
                {kv_term("allocated", "allocated at the snapshot", fmt::bytes(r.allocated_bytes))}
                {kv_term("requested", "requested at the snapshot", fmt::bytes(r.requested_bytes))}
                {kv_term("pending-free", "pending free", fmt::bytes(r.pending_free_bytes))}
                {kv("leak suspects", match r.leak_check {
                    ::api::LeakCheck::Ran => r.leak_suspects.len().to_string(),
                    _ => "not available".to_string(),
                })}
                {kv("OOMs", r.ooms.len().to_string())}
            </div>
            <p class="format-line">{format!("File: {}, {} decoded.", f.describe(), fmt::bytes(f.decoded_bytes))}</p>
            <CompareWith/>
            <h3>"Warnings"</h3>
            {if r.warnings.is_empty() {
                view! { <p class="ok">"none"</p> }.into_any()
            } else {
                view! {
                    <ul class="warnings">
                        {r.warnings
                            .iter()
                            .map(|w| view! { <li>{w.message.clone()}</li> })
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
                    <th><Term key="requested">"peak requested"</Term></th>
                    <th><Term key="allocated">"peak allocated"</Term></th>
                    <th><Term key="reserved">"peak reserved"</Term></th>
                    <th>"over"</th>
                    <th>"actions"</th>
                </tr>
                {r.devices
                    .iter()
                    .map(|(d, v)| {
                        let actions = v
                            .actions
                            .iter()
                            .map(|(k, n)| format!("{} {n}", k.name()))
                            .collect::<Vec<_>>()
                            .join(", ");
                        view! {
                            <tr>
                                <td>{*d}</td>
                                <td class="num">{fmt::count(v.entries)}</td>
                                <td class="num">{fmt::bytes(v.peak_requested_bytes)}</td>
                                <td class="num">{fmt::bytes(v.peak_allocated_bytes)}</td>
                                <td class="num">{fmt::bytes(v.peak_reserved_bytes)}</td>
                                <td class="over">{peaks_over_short(v.peaks_over)}</td>
                                <td>{actions}</td>
                            </tr>
                        }
                    })
                    .collect_view()}
            </table>
            <h3>"Allocator settings"</h3>
            {match settings {
                None => view! { <p class="empty">"not recorded (PyTorch records them from 2.3 on)"</p> }.into_any(),
                Some(rows) => view! {
                    <table class="settings">
                        {rows
                            .into_iter()
                            .map(|(k, v)| view! { <tr><th>{k}</th><td>{v}</td></tr> })
                            .collect_view()}
                    </table>
                }
                .into_any(),
            }}
        </section>
    }
}

/// PyTorch's `allocator_settings` as rows a person reads: one per setting, nested values on one
/// line (`1: 0, 1024: 0`), an empty `PYTORCH_CUDA_ALLOC_CONF` said as "not set", `-1` sizes as
/// "no limit".
pub fn settings_rows(settings: &serde_json::Value) -> Vec<(String, String)> {
    use serde_json::Value;
    fn flat(v: &Value) -> String {
        match v {
            Value::String(s) => s.clone(),
            Value::Object(m) if m.is_empty() => "none".into(),
            Value::Object(m) => {
                // Numbered keys (roundup_power2_divisions' sizes) in numeric order.
                let mut pairs: Vec<(&String, &Value)> = m.iter().collect();
                pairs.sort_by_key(|(k, _)| (k.parse::<u64>().unwrap_or(u64::MAX), k.to_string()));
                pairs
                    .into_iter()
                    .map(|(k, v)| format!("{k}: {}", flat(v)))
                    .collect::<Vec<_>>()
                    .join(", ")
            }
            Value::Array(a) => a.iter().map(flat).collect::<Vec<_>>().join(", "),
            other => other.to_string(),
        }
    }
    let Value::Object(map) = settings else {
        return vec![("settings".into(), flat(settings))];
    };
    map.iter()
        .map(|(k, v)| {
            let said = match (k.as_str(), v) {
                ("PYTORCH_CUDA_ALLOC_CONF", Value::String(s)) if s.is_empty() => {
                    "not set (PyTorch's defaults)".to_string()
                }
                (key, Value::Number(n)) if key.contains("size") && n.as_i64() == Some(-1) => {
                    "no limit (-1)".to_string()
                }
                _ => flat(v),
            };
            (k.clone(), said)
        })
        .collect()
}

/// One sentence of the headline and the view that shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct Sentence {
    /// `oom`, `survived` (OOMs, none fatal), `whatif`, `leak` or `peak` (class `s-KIND`, and what
    /// tests look for).
    pub kind: &'static str,
    pub text: String,
    pub link_text: &'static str,
    pub link: Vec<(&'static str, String)>,
}

fn site_words(f: Option<&::api::Frame>) -> String {
    f.map(|f| format!(" at {}", f.short())).unwrap_or_default()
}

/// The report in words: what a person would say first about this snapshot.
pub fn headline(r: &::api::Report) -> Vec<Sentence> {
    use ::api::Verdict;
    let mut out = Vec::new();
    let survived = !r.ooms.is_empty() && r.ooms.iter().all(|o| o.recovered);
    if survived {
        // No OOM ended the run: say so first, calmly, not as "out of memory".
        out.push(Sentence {
            kind: "survived",
            text: r
                .oom_outcome
                .clone()
                .unwrap_or_else(|| format!("Survived {} OOMs; none ended the run.", r.ooms.len())),
            link_text: "the OOM incidents",
            link: vec![("view", "oom".into())],
        });
    }
    if let Some(o) = r.ooms.first().filter(|_| !survived) {
        let why = match o.verdict {
            Verdict::Growth => match &o.growth {
                Some(g) => format!(
                    "growth: {} kept growing ({}; {} of it alive here), and no allocator setting fixes growth",
                    g.site.as_ref().map_or("one line".into(), |f| f.short()),
                    g.pattern,
                    fmt::bytes(g.bytes_at_oom)
                ),
                None => "growth: one line kept memory step over step".into(),
            },
            Verdict::Fragmentation => format!(
                "fragmentation: {} was cached but no free block was large enough",
                fmt::bytes(o.cached_free_bytes)
            ),
            Verdict::ProcessLimit => {
                "a per-process memory limit stopped PyTorch while the driver still had memory"
                    .into()
            }
            Verdict::Exhaustion => "the device was full of PyTorch's own memory".into(),
            Verdict::OutsidePytorch => format!(
                "{} of the device was held outside PyTorch",
                o.outside_pytorch_bytes.map_or("most".into(), fmt::bytes)
            ),
            Verdict::Undetermined => format!(
                "PyTorch held only {} and the driver had {} left, so unless the GPU is that small the rest was held outside PyTorch; the GPU's size settles it",
                fmt::bytes(o.reserved_bytes),
                o.device_free_bytes.map_or("little".into(), fmt::bytes)
            ),
        };
        let earlier = match r.ooms.len() {
            1 => String::new(),
            2 => " (after surviving one earlier OOM)".into(),
            n => format!(" (after surviving {} earlier OOMs)", n - 1),
        };
        let step = o.step.map(|s| format!(" (step {s})")).unwrap_or_default();
        out.push(Sentence {
            kind: "oom",
            text: format!(
                "Out of memory at event {}{step} on cuda:{}{earlier}, trying to allocate {}{}: {why}.",
                fmt::count(o.position as u64),
                o.device,
                snapshot::units::pytorch_size(o.requested_bytes),
                site_words(o.site.as_ref()),
            ),
            link_text: "the OOM report",
            link: vec![("view", "oom".into()), ("device", o.device.to_string())],
        });
        // What the simulator says would have saved it, beside the why (not for growth: a setting
        // only moves where it fails).
        if let Some(w) = o.whatif.as_ref().filter(|_| o.verdict != Verdict::Growth) {
            let estimate = if w.replay_exact {
                "simulated"
            } else {
                "an estimate"
            };
            let (text, conf) = match (&w.alloc_conf, w.peak_reserved_bytes) {
                (Some(c), Some(peak)) if w.oom_ends_trace => (
                    format!(
                        "With {} it would have got past this OOM: peak reserved {} up to it ({estimate}); the trace stops there, so the rest of the run is not known.",
                        super::whatif::conf_name(c),
                        fmt::bytes(peak)
                    ),
                    Some(c.clone()),
                ),
                (Some(c), Some(peak)) => (
                    format!(
                        "With {} it would not have run out of memory: peak reserved {} ({estimate}).",
                        super::whatif::conf_name(c),
                        fmt::bytes(peak)
                    ),
                    Some(c.clone()),
                ),
                _ => (
                    format!(
                        "No allocator setting would have avoided it: all {} tried run out of memory too ({estimate}).",
                        w.settings_tried
                    ),
                    None,
                ),
            };
            let mut link = vec![("view", "whatif".into()), ("device", o.device.to_string())];
            if let Some(c) = conf {
                link.push(("conf", c));
            }
            out.push(Sentence {
                kind: "whatif",
                text,
                link_text: "the What if tab",
                link,
            });
        }
    }
    if let Some(l) = r.leak_suspects.first() {
        let more = match r.leak_suspects.len() {
            1 => String::new(),
            2 => " One more suspect.".into(),
            n => format!(" {} more suspects.", n - 1),
        };
        out.push(Sentence {
            kind: "leak",
            text: format!("A leak{}: {}.{more}", site_words(l.site.as_ref()), l.growth),
            link_text: "the leak suspects",
            link: vec![("view", "leaks".into()), ("device", l.device.to_string())],
        });
    }
    let shown = r.shown_device();
    let shown_summary = shown.and_then(|d| r.devices.get_key_value(&d));
    if let Some((device, d)) =
        shown_summary.filter(|(_, d)| d.peaks_over == ::api::PeakScope::FinalState && d.entries > 0)
    {
        // A trace that records no allocation: the figures are the state at the snapshot.
        out.push(Sentence {
            kind: "peak",
            text: format!(
                "On cuda:{device}, history was off while memory was allocated: at the snapshot {} allocated and {} reserved ({} requested), in {} segments; no peak over time is known.",
                fmt::bytes(d.peak_allocated_bytes),
                fmt::bytes(d.peak_reserved_bytes),
                fmt::bytes(d.peak_requested_bytes),
                fmt::count(r.segments)
            ),
            link_text: "the segments",
            link: vec![("view", "segments".into()), ("device", device.to_string())],
        });
    } else if let Some((device, d)) = shown_summary.filter(|(_, d)| d.entries > 0) {
        let at = |p: u32| {
            if p == 0 {
                " at the trace's start".to_string()
            } else {
                format!(" after event {}", fmt::count(p as u64))
            }
        };
        out.push(Sentence {
            kind: "peak",
            text: format!(
                "On cuda:{device}, allocated memory peaked at {}{} (max_memory_allocated) and reserved at {}{} (max_memory_reserved); {} requested at most. Peaks {}.",
                fmt::bytes(d.peak_allocated_bytes),
                at(d.peak_allocated_position),
                fmt::bytes(d.peak_reserved_bytes),
                at(d.peak_reserved_position),
                fmt::bytes(d.peak_requested_bytes),
                d.peaks_over.words()
            ),
            link_text: "the timeline",
            link: vec![("view", "timeline".into()), ("device", device.to_string())],
        });
        // What the peak is made of, in the model's terms, where the trace shows training
        // phases to read it against (all unknown says nothing).
        if let Some(c) = d
            .categories
            .as_ref()
            .filter(|c| c.at_peak.total() > c.at_peak.unknown)
        {
            out.push(Sentence {
                kind: "categories",
                text: format!(
                    "At the peak of live memory (event {}): {}.",
                    fmt::count(c.peak_position as u64),
                    crate::categories::words(&c.at_peak)
                ),
                link_text: "by category on the timeline",
                link: vec![
                    ("view", "timeline".into()),
                    ("device", device.to_string()),
                    ("by", "category".into()),
                ],
            });
        }
    } else {
        out.push(Sentence {
            kind: "peak",
            text: format!(
                "No trace, only the allocator's state at the snapshot: {} reserved, {} allocated in {} segments.",
                fmt::bytes(r.reserved_bytes),
                fmt::bytes(r.allocated_bytes),
                fmt::count(r.segments)
            ),
            link_text: "the segments",
            link: vec![("view", "segments".into())],
        });
    }
    out
}

/// What a device's peaks cover, in a table cell.
fn peaks_over_short(s: ::api::PeakScope) -> &'static str {
    match s {
        ::api::PeakScope::WholeProcess => "whole process",
        ::api::PeakScope::TraceWindow => "trace window",
        ::api::PeakScope::FinalState => "snapshot only",
    }
}

/// "Compare with …": another snapshot of the library as A, this one as B (`/diff/A/B`).
#[component]
fn CompareWith() -> impl IntoView {
    let url: UrlState = expect_context();
    let others = LocalResource::new(move || {
        let id = url.id.get();
        async move {
            api::snapshots(&Default::default())
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
                                let q = ::api::DiffQuery { device_a: None, device_b: url.device() };
                                ::api::routes::page::diff(&chosen.get(), &url.id.get(), &q)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocator_settings_read_as_rows_not_json() {
        let v: serde_json::Value = serde_json::json!({
            "PYTORCH_CUDA_ALLOC_CONF": "",
            "expandable_segments": false,
            "max_split_size": -1,
            "roundup_power2_divisions": {"1024": 8, "1": 0, "128": 0},
        });
        let rows = settings_rows(&v);
        let get = |k: &str| rows.iter().find(|r| r.0 == k).unwrap().1.clone();
        assert_eq!(
            get("PYTORCH_CUDA_ALLOC_CONF"),
            "not set (PyTorch's defaults)"
        );
        assert_eq!(get("expandable_segments"), "false");
        assert_eq!(get("max_split_size"), "no limit (-1)");
        assert_eq!(get("roundup_power2_divisions"), "1: 0, 128: 0, 1024: 8");
        assert!(rows.iter().all(|(_, v)| !v.contains('{')));
    }

    #[allow(
        clippy::disallowed_methods,
        reason = "a host test reading a golden answer, never built for the browser"
    )]
    fn report(name: &str) -> ::api::Report {
        let path = format!(
            "{}/../tests/golden/api/{name}/report.json",
            env!("CARGO_MANIFEST_DIR")
        );
        // A golden answer: the status on the first line, then the body.
        let text = std::fs::read_to_string(path).unwrap();
        let body = text.split_once('\n').unwrap().1;
        serde_json::from_str(body).unwrap()
    }

    #[test]
    fn an_oom_is_said_first_with_its_line_and_why() {
        let h = headline(&report("oom_fraction"));
        assert_eq!(h[0].kind, "oom");
        assert!(
            h[0].text.starts_with(
                "Out of memory at event 1,327 on cuda:0, trying to allocate 24.00 MiB at gen_snapshots.py:181 run: growth: gen_snapshots.py:181 run kept growing ("
            ),
            "{}",
            h[0].text
        );
        assert!(
            h[0].text
                .ends_with("and no allocator setting fixes growth."),
            "{}",
            h[0].text
        );
        assert_eq!(h[0].link[0], ("view", "oom".to_string()));
        // Growth: no setting is offered as the fix (one only moves where it fails).
        assert!(h.iter().all(|s| s.kind != "whatif"), "{h:?}");
    }

    #[test]
    fn a_leak_is_said_with_its_rate() {
        let h = headline(&report("leak_detached_cache"));
        assert_eq!(h[0].kind, "leak");
        assert!(
            h[0].text
                .starts_with("A leak at gen_snapshots.py:126 run: 2.0 MiB every step since step 1"),
            "{}",
            h[0].text
        );
        let kinds: Vec<&str> = h.iter().map(|s| s.kind).collect();
        assert_eq!(kinds[kinds.len() - 2..], ["peak", "categories"], "{h:?}");
    }

    #[test]
    fn a_training_run_says_what_its_peak_is_made_of() {
        let h = headline(&report("steady_train"));
        let c = h
            .iter()
            .find(|s| s.kind == "categories")
            .expect("categories");
        assert!(
            c.text.starts_with("At the peak of live memory (event 137): optimizer state 128.1 MiB, parameters 64.0 MiB, gradients 64.0 MiB"),
            "{}",
            c.text
        );
        assert!(c.link.contains(&("by", "category".to_string())));
        // A trace with no training phases says nothing of categories.
        assert!(
            headline(&report("oom_fraction"))
                .iter()
                .all(|s| s.kind != "categories")
        );
    }

    #[test]
    fn a_snapshot_without_trace_says_so() {
        let h = headline(&report("segments_only"));
        assert_eq!(h.len(), 1);
        assert!(h[0].text.starts_with("No trace"), "{}", h[0].text);
    }
}
