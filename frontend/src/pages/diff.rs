//! Two snapshots compared (`/diff/A/B`): their memory curves overlaid (by time from each one's
//! start, by event, or by step) and what ended each run and what a setting would have done side by
//! side (`compare.rs`, shared with the sweep of several), headline figures (coloured by what a change means), memory by call site at each peak
//! and leak suspects, matched by call site so that two runs of the same code line up. The server
//! does the matching (`GET /api/diff/A/B`); this page lays it out.

use ::api::routes::page;
use leptos::prelude::*;
use leptos_router::hooks::{use_params_map, use_query_map};

use crate::pages::compare::{Run, RunsCompared, colour};
use crate::pages::widgets::frames_list;
use crate::{api, fmt};

#[component]
pub fn DiffPage() -> impl IntoView {
    api::page_scope();
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
        ::api::DiffQuery {
            device_a: q.get("device_a").and_then(|v| v.parse().ok()),
            device_b: q.get("device_b").and_then(|v| v.parse().ok()),
        }
    });
    let data = LocalResource::new(move || {
        let ((a, b), dq) = (ids.get(), devices.get());
        async move { api::diff(&a, &b, &dq).await }
    });
    view! {
        <section class="diff">
            {move || match data.get() {
                None => view! { <p>"comparing…"</p> }.into_any(),
                Some(Err(e)) => crate::pages::widgets::error_line(e).into_any(),
                Some(Ok(d)) => diff_view(d).into_any(),
            }}
        </section>
    }
}

/// A change coloured by what it means: up red and down green where more is worse (memory,
/// leaks, OOMs), no colour where it is neither (more trace events is a longer recording).
fn delta_cell(delta: i64, bytes: bool, change: ::api::ChangeMeaning) -> impl IntoView {
    let cost = change == ::api::ChangeMeaning::Cost;
    let (up, down) = (cost && delta > 0, cost && delta < 0);
    let title = (!cost && delta != 0).then_some("neither better nor worse by itself");
    view! { <td class="num" class:up=up class:down=down class:neutral=!cost title=title>{fmt::signed(delta, bytes)}</td> }
}

fn stack(frames: &[::api::Frame]) -> impl IntoView + use<> {
    view! {
        <details>
            <summary>"stack"</summary>
            {frames_list(frames, usize::MAX)}
        </details>
    }
}

/// What was alive by category at each side's peak: a bar each and the change per category.
fn category_table(c: &::api::CategoriesDelta) -> impl IntoView + use<> {
    let rows = ::api::Category::ALL
        .into_iter()
        .filter(|&k| c.a.get(k) + c.b.get(k) > 0)
        .map(|k| {
            let (a, b) = (c.a.get(k), c.b.get(k));
            view! {
                <tr data-category=k.as_str()>
                    <td>
                        <span class="swatch" style=format!("background:{}", crate::categories::colour(k))></span>
                        " "{k.words()}
                    </td>
                    <td class="num">{fmt::bytes(a)}</td>
                    <td class="num">{fmt::bytes(b)}</td>
                    {delta_cell(b as i64 - a as i64, true, ::api::ChangeMeaning::Cost)}
                </tr>
            }
        })
        .collect_view();
    view! {
        <h3>"Memory by category at each snapshot's peak"</h3>
        <div class="diff">
            {crate::categories::category_bar(&c.a, "A: ")}
            {crate::categories::category_bar(&c.b, "B: ")}
        </div>
        <table class="diff-categories">
            <thead><tr><th></th><th class="num">"A"</th><th class="num">"B"</th><th class="num">"B − A"</th></tr></thead>
            <tbody>{rows}</tbody>
        </table>
    }
}

fn diff_view(d: ::api::DiffAnswer) -> impl IntoView {
    let ::api::DiffAnswer { diff, a, b } = d;
    let amount = |n: u64, bytes: bool| {
        if bytes { fmt::bytes(n) } else { fmt::count(n) }
    };
    let unchanged = diff.unchanged_sites;
    view! {
        <h1>
            <a href=page::snapshot_home(&a.id)>{a.name.clone()}</a>
            <span class="arrow">"→"</span>
            <a href=page::snapshot_home(&b.id)>{b.name.clone()}</a>
        </h1>
        <p class="hint">
            {format!("A = {} (cuda:{}), B = {} (cuda:{}). ", a.id, diff.device_a, b.id, diff.device_b)}
            <a class="swap" href=page::diff(&b.id, &a.id, &Default::default())>"swap A and B"</a>
        </p>
        <RunsCompared runs=vec![
            Run { id: a.id.clone(), name: a.name.clone(), device: Some(diff.device_a), label: format!("A: {}", a.name), colour: colour(0) },
            Run { id: b.id.clone(), name: b.name.clone(), device: Some(diff.device_b), label: format!("B: {}", b.name), colour: colour(1) },
        ]/>
        <table class="diff-figures">
            <thead><tr><th></th><th class="num">"A"</th><th class="num">"B"</th><th class="num">"B − A"</th></tr></thead>
            <tbody>
                {diff.figures.into_iter().map(|f| {
                    view! {
                        <tr>
                            <td>{f.name}</td>
                            <td class="num">{amount(f.a, f.bytes)}</td>
                            <td class="num">{amount(f.b, f.bytes)}</td>
                            {delta_cell(f.delta, f.bytes, f.change)}
                        </tr>
                    }
                }).collect_view()}
            </tbody>
        </table>

        {diff.categories_at_peak.map(|c| category_table(&c))}

        <h3>"Leak suspects"</h3>
        {if diff.leaks.is_empty() {
            view! { <p class="ok">"Neither snapshot has leak suspects."</p> }.into_any()
        } else {
            view! {
                <table class="leak-diff">
                    <thead><tr><th>"call site"</th><th></th><th class="num">"alive at the end in A"</th><th class="num">"in B"</th></tr></thead>
                    <tbody>
                        {diff.leaks.into_iter().map(|l| {
                            let (class, label) = match (l.a_bytes, l.b_bytes) {
                                (None, Some(_)) => ("status new", "new in B"),
                                (Some(_), None) => ("status gone", "gone in B"),
                                _ => ("status", "in both"),
                            };
                            view! {
                                <tr class="leak-row">
                                    <td><span class="site">{::api::site_text(l.site.as_ref())}</span>{stack(&l.frames)}</td>
                                    <td><span class=class>{label}</span></td>
                                    <td class="num">{l.a_bytes.map_or("–".into(), fmt::bytes)}</td>
                                    <td class="num">{l.b_bytes.map_or("–".into(), fmt::bytes)}</td>
                                </tr>
                            }
                        }).collect_view()}
                    </tbody>
                </table>
            }.into_any()
        }}

        <h3>"Memory by call site at each snapshot's peak"</h3>
        <p class="hint">{format!("The largest changes first; {unchanged} call sites hold the same memory in both and are not listed.")}</p>
        {if diff.sites_at_peak.is_empty() {
            view! { <p class="ok">"No call site holds different memory at the peak."</p> }.into_any()
        } else {
            view! {
                <table class="site-diff">
                    <thead><tr><th>"call site"</th><th class="num">"A"</th><th class="num">"B"</th><th class="num">"B − A"</th><th class="num">"allocations A → B"</th></tr></thead>
                    <tbody>
                        {diff.sites_at_peak.into_iter().map(|s| view! {
                            <tr class="site-row">
                                <td><span class="site">{::api::site_text(s.site.as_ref())}</span>{stack(&s.frames)}</td>
                                <td class="num">{fmt::bytes(s.a_bytes)}</td>
                                <td class="num">{fmt::bytes(s.b_bytes)}</td>
                                {delta_cell(s.delta_bytes, true, ::api::ChangeMeaning::Cost)}
                                <td class="num">{format!("{} → {}", s.a_count, s.b_count)}</td>
                            </tr>
                        }).collect_view()}
                    </tbody>
                </table>
            }.into_any()
        }}
    }
}
