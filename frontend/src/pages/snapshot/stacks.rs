//! The stacks tab: memory by call stack at a moment (the peak by default, or any event), or held
//! over the whole trace (`weigh=held`: bytes × time held, what held memory longest), as an icicle
//! on a canvas (`icicle.rs`: outermost frames on top, width by the weight; Python frames by
//! default when the snapshot has them) and a sortable table of call sites; of every allocation, or
//! of one category (`category=activation`: what holds the activations).

use std::sync::Arc;

use leptos::prelude::*;

use super::devices::shown_events;
use crate::pages::widgets::frames_list;
use crate::url::UrlState;
use crate::{api, fmt};

#[component]
pub fn Stacks(report: Arc<::api::Report>) -> impl IntoView {
    let url: UrlState = expect_context();
    let events = shown_events(&report, url);
    // The table's order outlives a reload (another moment, other frames): a user who sorted by
    // call site keeps that order while stepping through events.
    let sort = RwSignal::new(("bytes", true));
    // The call-site search (`/`), kept across moments too.
    let search = RwSignal::new(String::new());
    // Absent: the server's choice (Python when the snapshot has Python frames).
    let frames = Memo::new(move |_| match url.get("frames").as_deref() {
        Some("python") => Some(::api::FlameFrames::Python),
        Some("all") => Some(::api::FlameFrames::All),
        _ => None,
    });
    // A closure, not a Memo: a second Memo of the URL beside `frames` left the resource below
    // deaf to the slider after the frames were toggled (Leptos 0.8; a browser test shows it).
    let held = move || url.get("weigh").as_deref() == Some("held");
    let data = LocalResource::new(move || {
        let id = url.id.get();
        let held = held();
        let q = ::api::StacksQuery {
            device: url.device(),
            position: if held { None } else { url.position() },
            frames: frames.get(),
            category: url.get("category").and_then(|c| ::api::Category::parse(&c)),
            weight: held.then_some(::api::FlameWeight::Held),
        };
        async move { api::stacks(&id, &q).await }
    });
    view! {
        // The moment: any event (the slider), or back to the peak.
        <div class="toolbar">
            <select
                class="stacks-weight"
                title="what the tree and the table are weighed by"
                prop:value=move || if held() { "held" } else { "live" }
                on:change=move |ev| {
                    let v = event_target_value(&ev);
                    url.set(&[("weigh", (v == "held").then_some(v))]);
                }
            >
                <option value="live">"bytes alive at one moment"</option>
                <option value="held">"bytes × time held, whole trace"</option>
            </select>
            <input
                type="range"
                class="stacks-pos"
                hidden=held
                min="0"
                max=events.to_string()
                prop:value=move || {
                    data.get()
                        .and_then(|d| d.ok())
                        .map(|d| d.position.to_string())
                        .unwrap_or_default()
                }
                on:change=move |ev| url.set(&[("pos", Some(event_target_value(&ev)))])
            />
            <button class="at-peak" hidden=held on:click=move |_| url.set(&[("pos", None)])>"at the peak"</button>
            <select
                class="stacks-category"
                title="only the allocations of one category"
                prop:value=move || url.get("category").unwrap_or_default()
                on:change=move |ev| {
                    let v = event_target_value(&ev);
                    url.set(&[("category", (!v.is_empty()).then_some(v))]);
                }
            >
                <option value="">"every category"</option>
                {::api::Category::ALL
                    .map(|c| view! { <option value=c.as_str()>{format!("only {}", c.words())}</option> })
                    .collect_view()}
            </select>
        </div>
        <label class="python-only">
            <input
                type="checkbox"
                prop:checked=move || {
                    data.get()
                        .and_then(|d| d.ok())
                        .is_some_and(|d| d.frames == ::api::FlameFrames::Python)
                }
                on:change=move |ev| {
                    let on = event_target_checked(&ev);
                    url.set(&[("frames", Some(if on { "python" } else { "all" }.to_string()))]);
                }
            />
            " Python frames only (hide C++ frames in the tree)"
        </label>
        {move || match data.get() {
            None => view! { <p>"loading…"</p> }.into_any(),
            Some(Err(e)) => crate::pages::widgets::error_line(e).into_any(),
            Some(Ok(s)) => {
                let total = s.weight.of(s.total_bytes, s.flame.held).max(1.0);
                let csv = crate::export::data_url("text/csv", &crate::export::call_sites_csv(&s));
                let csv_name = match s.held {
                    Some(_) => "call-sites-held-over-the-trace.csv".to_string(),
                    None => format!("call-sites-at-event-{}.csv", s.position),
                };
                view! {
                    <section class="stacks">
                        <p class="stacks-headline">{headline(&report, &s, events)}</p>
                        <super::icicle::Icicle flame=s.flame weight=s.weight clock=s.held/>
                        <p class="sites-export">
                            <a class="sites-csv" href=csv download=csv_name>
                                "CSV of these call sites"
                            </a>
                        </p>
                        <input
                            class="site-search"
                            type="search"
                            placeholder="search call sites: file, function or line (/)"
                            prop:value=move || search.get()
                            on:input=move |ev| search.set(event_target_value(&ev))
                            on:keydown=move |ev: web_sys::KeyboardEvent| {
                                if ev.key() == "Escape" {
                                    search.set(String::new());
                                    let _ = event_target::<web_sys::HtmlElement>(&ev).blur();
                                }
                            }
                        />
                        <SitesTable sites=s.sites total=total weight=s.weight clock=s.held sort=sort search=search/>
                    </section>
                }
                    .into_any()
            }
        }}
    }
}

/// What the tree and the table show, in words: the bytes alive at an event, or what was held
/// over the whole trace (and the allocations whose hold is known only in part).
fn headline(report: &::api::Report, s: &::api::StackReport, events: u64) -> String {
    let Some(c) = &s.held else {
        return format!(
            "{} live in {} allocations after event {} of {events}{}",
            fmt::bytes(s.total_bytes),
            s.count,
            s.position,
            // From the answer, not the URL: while the next moment loads, the shown one keeps
            // its own label.
            if is_peak(report, s) {
                " (the peak)"
            } else {
                ""
            },
        );
    };
    let span = if c.by_events {
        format!(
            "{} events (the trace has no clock)",
            fmt::count(c.span_us as u64)
        )
    } else {
        fmt::seconds(c.span_us)
    };
    let mut out = format!(
        "What held memory longest: {} held over the whole trace ({span}), on average {} live, by {} allocations of {} in all. Each box is as wide as its bytes × the time they were held (allocation to free completed).",
        fmt::held(s.flame.held, c.by_events),
        fmt::bytes(c.average_bytes(s.flame.held)),
        fmt::count(s.count as u64),
        fmt::bytes(s.total_bytes),
    );
    let some = |n: u32| match n {
        1 => "1 allocation".to_string(),
        n => format!("{} allocations", fmt::count(n as u64)),
    };
    if c.before_trace > 0 {
        out.push_str(&format!(
            " {} made before the trace: counted from its first event.",
            some(c.before_trace)
        ));
    }
    if c.at_snapshot > 0 {
        out.push_str(&format!(
            " {} still alive at the snapshot: counted to its last event.",
            some(c.at_snapshot)
        ));
    }
    out
}

/// Whether an answer is at its device's peak (the server's default moment, or the same event
/// picked on the slider).
fn is_peak(report: &::api::Report, s: &::api::StackReport) -> bool {
    report
        .devices
        .get(&s.device)
        .is_some_and(|d| d.peak_requested_position == s.position)
}

/// Call sites, sortable by bytes, count or name (click a column header).
#[component]
fn SitesTable(
    sites: Vec<::api::CallSite>,
    /// The sum of the weight (bytes, or byte × µs held).
    total: f64,
    weight: ::api::FlameWeight,
    clock: Option<::api::HeldClock>,
    /// (column, descending), owned by the tab so that it survives a reload.
    sort: RwSignal<(&'static str, bool)>,
    /// Only the sites whose frames mention this text (any case).
    search: RwSignal<String>,
) -> impl IntoView {
    let all = sites.len();
    let sites: Vec<(::api::CallSite, String)> = sites
        .into_iter()
        .map(|c| {
            let text = c
                .frames
                .iter()
                .map(::api::Frame::short)
                .collect::<Vec<_>>()
                .join("\n")
                .to_lowercase();
            (c, text)
        })
        .collect();
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
    let site_name = |c: &::api::CallSite| ::api::site_text(c.site.as_ref());
    let shown = move || {
        let needle = search.get().trim().to_lowercase();
        sites
            .iter()
            .filter(|(_, text)| needle.is_empty() || text.contains(&needle))
            .map(|(c, _)| c.clone())
            .collect::<Vec<_>>()
    };
    let shown = Memo::new(move |_| shown());
    view! {
        <p class="sites-count">
            {move || {
                let n = shown.with(Vec::len);
                if n == all {
                    format!("{all} call site{}", if all == 1 { "" } else { "s" })
                } else {
                    format!("{n} of {all} call sites match")
                }
            }}
        </p>
        <table class="sites">
            <tr>
                {header("bytes", if clock.is_some() { "held" } else { "bytes" })}
                <th>"%"</th>
                {clock.map(|_| view! { <th title="the bytes held × time, over the trace's span">"average"</th> })}
                {header("count", "allocations")}
                {clock.map(|_| header("allocated", "allocated in all"))}
                {header("site", "call site")}
            </tr>
            {move || {
                let (key, desc) = sort.get();
                let mut rows = shown.get();
                rows.sort_by(|a, b| {
                    let o = match key {
                        "count" => a.count.cmp(&b.count),
                        "site" => site_name(a).cmp(&site_name(b)),
                        "allocated" => a.bytes.cmp(&b.bytes),
                        _ => weight.of(a.bytes, a.held).total_cmp(&weight.of(b.bytes, b.held)),
                    };
                    if desc { o.reverse() } else { o }
                });
                rows.iter()
                    .map(|c| {
                        view! {
                            <tr>
                                <td class="num">{match clock {
                                    Some(k) => fmt::held(c.held, k.by_events),
                                    None => fmt::bytes(c.bytes),
                                }}</td>
                                <td class="num">{format!("{:.1}", weight.of(c.bytes, c.held) / total * 100.0)}</td>
                                {clock.map(|k| view! { <td class="num">{fmt::bytes(k.average_bytes(c.held))}</td> })}
                                <td class="num">{c.count.to_string()}</td>
                                {clock.map(|_| view! { <td class="num">{fmt::bytes(c.bytes)}</td> })}
                                <td>
                                    <details>
                                        <summary>{site_name(c)}</summary>
                                        {frames_list(&c.frames, 40)}
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
