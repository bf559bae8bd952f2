//! Will it fit (`/fit?recordings=ID:SIZE,…`): two or three snapshots of one program recorded at
//! small sizes (batch, sequence length), a GPU or a limit, and the settings to compare. The
//! server learns how each request grows and replays the synthesized run through its model of
//! PyTorch's allocator at every size asked (`GET /api/predict`); this page asks once to find where
//! the default setting runs out, then draws predicted peak reserved and allocated against the size
//! for each setting, with the recorded points, the limit, the linear baseline and what grows.

use ::api::PredictQuery;
use leptos::html::Canvas;
use leptos::prelude::*;
use leptos_router::hooks::{use_navigate, use_query_map};

use crate::canvas::{Ink, Paint, Scale, byte_axis_max, byte_grid_with, ink, pointer, sharp};
use crate::pages::widgets::error_line;
use crate::{api, fmt};

/// The settings every prediction is made under: PyTorch's default and expandable segments (the
/// one setting that most often turns an OOM into a fit); the page's `alloc_conf` adds a third.
const SETTINGS: [(&str, &str, &str); 2] = [
    ("", "default", "#1f6fb2"),
    ("expandable_segments:True", "expandable segments", "#2e9d5b"),
];
const OWN_COLOUR: &str = "#8e44ad";
/// Sizes drawn along the curve (besides the recorded ones and the largest that fits).
const GRID: u64 = 24;
const W: f64 = 960.0;
const H: f64 = 380.0;
/// Left margin (byte labels) and bottom margin (size labels).
const L: f64 = 70.0;
const B: f64 = 26.0;

/// A peak to the MiB (the allocator's segments come in 2 MiB steps, and the question is often
/// decided by a few of them), in GiB with two decimals from 100 GiB.
pub fn peak(bytes: u64) -> String {
    let mib = bytes as f64 / (1u64 << 20) as f64;
    if mib < 100.0 * 1024.0 {
        format!("{} MiB", fmt::count(mib.round() as u64))
    } else {
        format!("{:.2} GiB", mib / 1024.0)
    }
}

/// Where a byte axis starts: 0, unless every value is in the top third of the range (a peak that
/// hardly grows), then a round step below the smallest so the differences show.
pub fn axis_floor(smallest: u64, top: f64) -> f64 {
    let s = smallest as f64;
    if s < top * 2.0 / 3.0 {
        return 0.0;
    }
    let step = (64u64 << 20) as f64;
    ((s * 0.95) / step).floor() * step
}

/// A recording as the URL names it: snapshot id and the size it was made at (None: not given).
#[derive(Debug, Clone, PartialEq)]
pub struct Pick {
    pub id: String,
    pub size: Option<u64>,
}

/// `id:size,id:size`, a size left out as `id:` or `id`.
pub fn parse_recordings(v: &str) -> Vec<Pick> {
    v.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| match p.rsplit_once(':') {
            Some((id, size)) => Pick {
                id: id.trim().to_string(),
                size: size.trim().parse().ok().filter(|s| *s > 0),
            },
            None => Pick {
                id: p.trim().to_string(),
                size: None,
            },
        })
        .collect()
}

pub fn recordings_param(picks: &[Pick]) -> String {
    picks
        .iter()
        .map(|p| {
            format!(
                "{}:{}",
                p.id,
                p.size.map(|s| s.to_string()).unwrap_or_default()
            )
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// The sizes a curve is drawn through: the recorded ones and `GRID` steps up to `top`.
pub fn grid(recorded: &[u64], top: u64) -> Vec<u64> {
    let mut out: Vec<u64> = (1..=GRID)
        .map(|i| (i as f64 * top as f64 / GRID as f64).round() as u64)
        .collect();
    out.extend_from_slice(recorded);
    out.push(top);
    out.sort_unstable();
    out.dedup();
    out.retain(|&s| s > 0);
    out
}

/// How far the chart reaches: past the largest size that fits (by a quarter) and at least four
/// times the largest recording.
pub fn reach(largest_recorded: u64, largest_fitting: Option<u64>) -> u64 {
    let base = largest_recorded.max(1) * 4;
    match largest_fitting {
        Some(f) => base.max(f + f / 4 + 1),
        None => base,
    }
}

/// The settings asked: the two standard ones and the page's own, if another.
fn settings(own: &str) -> Vec<(String, String, &'static str)> {
    let mut out: Vec<(String, String, &'static str)> = SETTINGS
        .iter()
        .map(|(c, n, col)| (c.to_string(), n.to_string(), *col))
        .collect();
    let own = own.trim();
    if !own.is_empty() && SETTINGS.iter().all(|(c, _, _)| *c != own) {
        out.push((own.to_string(), own.to_string(), OWN_COLOUR));
    }
    out
}

/// One setting's answers, as drawn: under the limit (whether each size raises, where it stops
/// fitting) and without it (what each size needs: where the curve crosses the limit).
#[derive(Clone)]
struct Curve {
    name: String,
    colour: &'static str,
    answer: ::api::PredictAnswer,
    need: ::api::PredictAnswer,
}

/// Asks for the largest size that fits by default, then every setting's curve up to past it.
async fn predict_all(q: PredictQuery, picks: Vec<Pick>) -> Result<Vec<Curve>, String> {
    let largest_recorded = picks.iter().filter_map(|p| p.size).max().unwrap_or(1);
    let first = api::predict(&q).await?;
    let top = reach(largest_recorded, first.largest_fitting_size);
    let mut recorded: Vec<u64> = picks.iter().filter_map(|p| p.size).collect();
    // Where the default stops fitting is a row of its own (and the first size past it).
    if let Some(f) = first.largest_fitting_size {
        recorded.extend([f, f + 1]);
    }
    let sizes = grid(&recorded, top)
        .iter()
        .map(|s| s.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let mut out = Vec::new();
    for (conf, name, colour) in settings(q.alloc_conf.as_deref().unwrap_or("")) {
        let ask = PredictQuery {
            sizes: Some(sizes.clone()),
            search: Some(true),
            alloc_conf: Some(conf),
            ..q.clone()
        };
        let unlimited = PredictQuery {
            limit_bytes: None,
            limit_kind: None,
            gpu: None,
            search: None,
            ..ask.clone()
        };
        out.push(Curve {
            name,
            colour,
            answer: api::predict(&ask).await?,
            need: api::predict(&unlimited).await?,
        });
    }
    Ok(out)
}

#[component]
pub fn FitPage() -> impl IntoView {
    api::page_scope();
    let query = use_query_map();
    let picks =
        Memo::new(move |_| parse_recordings(&query.get().get("recordings").unwrap_or_default()));
    let ask = Memo::new(move |_| {
        let q = query.get();
        let limit_bytes = q.get("limit_bytes").and_then(|v| v.parse().ok());
        PredictQuery {
            recordings: recordings_param(&picks.get()),
            sizes: None,
            limit_bytes,
            limit_kind: q
                .get("limit_kind")
                .and_then(|k| ::api::LimitKind::parse(&k))
                .filter(|k| *k == ::api::LimitKind::Fraction),
            gpu: match limit_bytes {
                Some(_) => None,
                None => Some(q.get("gpu").unwrap_or_else(|| "H100 (80 GB)".into())),
            },
            alloc_conf: q.get("alloc_conf"),
            search: None,
        }
    });
    let names = LocalResource::new(move || {
        let ids: Vec<String> = picks.get().into_iter().map(|p| p.id).collect();
        async move {
            let mut out = Vec::new();
            for id in ids {
                out.push(api::info(&id).await.map(|i| i.name).unwrap_or(id));
            }
            out
        }
    });
    let data = LocalResource::new(move || {
        let (q, p) = (ask.get(), picks.get());
        async move {
            if p.len() < 2 || p.iter().any(|p| p.size.is_none()) {
                return None;
            }
            Some(predict_all(q, p).await)
        }
    });
    view! {
        <section class="fit">
            <h1>"Will it fit?"</h1>
            <p class="hint">
                "Two or three snapshots of one program at small sizes (batch, sequence length): memscope matches their requests, learns how each grows, and replays the run at every size through its model of PyTorch's caching allocator, so rounding, splitting and caching shape the peak as they would on the GPU."
            </p>
            {move || form(picks.get(), names.get().unwrap_or_default(), ask.get())}
            {move || match data.get() {
                None => view! { <p class="muted">"replaying…"</p> }.into_any(),
                Some(None) => view! {
                    <p class="hint">"Give each snapshot the size it was recorded at, then Predict."</p>
                }
                .into_any(),
                Some(Some(Err(e))) => error_line(e).into_any(),
                Some(Some(Ok(curves))) => results(curves, ask.get_untracked()).into_any(),
            }}
        </section>
    }
}

/// The recordings with their sizes, the GPU or limit, a setting of one's own.
fn form(picks: Vec<Pick>, names: Vec<String>, ask: PredictQuery) -> impl IntoView {
    let navigate = StoredValue::new_local(use_navigate());
    let guessed = snapshot::analysis::whatif::predict::guess_sizes(
        &names.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    let sizes: Vec<RwSignal<String>> = picks
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let s = p.size.or(guessed.get(i).copied().flatten());
            RwSignal::new(s.map(|s| s.to_string()).unwrap_or_default())
        })
        .collect();
    let gpu = RwSignal::new(ask.gpu.clone().unwrap_or_default());
    let gib = RwSignal::new(
        ask.limit_bytes
            .map(|b| format!("{:.2}", b as f64 / (1u64 << 30) as f64))
            .unwrap_or_default(),
    );
    let fraction = RwSignal::new(ask.limit_kind.is_some());
    let own = RwSignal::new(ask.alloc_conf.clone().unwrap_or_default());
    let rows = picks
        .iter()
        .zip(&sizes)
        .enumerate()
        .map(|(i, (p, s))| {
            let s = *s;
            let name = names.get(i).cloned().unwrap_or_else(|| p.id.clone());
            view! {
                <tr>
                    <td><a href=::api::routes::page::snapshot_home(&p.id)>{name}</a></td>
                    <td>
                        <input class="rec-size" type="text" inputmode="numeric" size="7" placeholder="size"
                            prop:value=move || s.get() on:input=move |ev| s.set(event_target_value(&ev))/>
                    </td>
                </tr>
            }
        })
        .collect_view();
    let ids: Vec<String> = picks.iter().map(|p| p.id.clone()).collect();
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let picks: Vec<Pick> = ids
            .iter()
            .zip(&sizes)
            .map(|(id, s)| Pick {
                id: id.clone(),
                size: s.get_untracked().trim().parse().ok().filter(|s| *s > 0),
            })
            .collect();
        let limit_bytes = gib
            .get_untracked()
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|g| *g > 0.0)
            .map(|g| (g * (1u64 << 30) as f64) as u64);
        let q = PredictQuery {
            recordings: recordings_param(&picks),
            limit_bytes,
            limit_kind: fraction
                .get_untracked()
                .then_some(::api::LimitKind::Fraction),
            gpu: limit_bytes
                .is_none()
                .then(|| gpu.get_untracked())
                .filter(|g| !g.is_empty()),
            alloc_conf: Some(own.get_untracked()).filter(|c| !c.trim().is_empty()),
            ..Default::default()
        };
        navigate.with_value(|n| n(&::api::routes::page::fit(&q), Default::default()));
    };
    view! {
        <form class="fit-form" on:submit=submit>
            <table class="recordings">
                <thead><tr><th>"recording"</th><th>"recorded at size"</th></tr></thead>
                <tbody>{rows}</tbody>
            </table>
            <p>
                "GPU "
                <select class="gpu-model" on:change=move |ev| gpu.set(event_target_value(&ev))>
                    <option value="" selected=ask.gpu.is_none()>"(the limit given)"</option>
                    {snapshot::gpus::KNOWN
                        .iter()
                        .map(|g| crate::pages::widgets::gpu_option(g, ask.gpu.as_deref() == Some(g.name)))
                        .collect_view()}
                </select>
                " or a limit of "
                <input class="limit-gib" type="text" inputmode="decimal" size="7" placeholder="GiB"
                    prop:value=move || gib.get() on:input=move |ev| gib.set(event_target_value(&ev))/>
                " GiB "
                <label>
                    <input type="checkbox" class="fraction" prop:checked=move || fraction.get()
                        on:change=move |ev| fraction.set(event_target_checked(&ev))/>
                    " set by "<code>"set_per_process_memory_fraction"</code>
                </label>
            </p>
            <p>
                "Also try "<code>"PYTORCH_CUDA_ALLOC_CONF="</code>
                <input class="own-conf" type="text" size="36" placeholder="e.g. max_split_size_mb:128"
                    prop:value=move || own.get() on:input=move |ev| own.set(event_target_value(&ev))/>
                " "
                <button type="submit">"Predict"</button>
            </p>
        </form>
    }
}

/// The figures, the chart, what grows and the table of every size.
fn results(curves: Vec<Curve>, ask: PredictQuery) -> impl IntoView {
    let Some(first) = curves.first().map(|c| c.answer.clone()) else {
        return view! { <p class="muted">"nothing to show"</p> }.into_any();
    };
    let limit = first.limit_bytes;
    let where_ = match (&ask.gpu, limit) {
        (Some(g), Some(l)) => format!("on {g} ({})", peak(l)),
        (None, Some(l)) if ask.limit_kind.is_some() => {
            format!("under a memory fraction of {}", peak(l))
        }
        (_, Some(l)) => format!("under {}", peak(l)),
        _ => "without a limit".into(),
    };
    let verdicts = curves
        .iter()
        .map(|c| {
            let text = match c.answer.largest_fitting_size {
                Some(s) => {
                    let at = c
                        .answer
                        .sizes
                        .iter()
                        .find(|p| p.size == s)
                        .map(|p| p.peak_reserved_bytes);
                    format!(
                        "{s}{}",
                        at.map(|p| format!(" (peak reserved {})", peak(p)))
                            .unwrap_or_default()
                    )
                }
                None if limit.is_some() => "none (no size tried fits)".into(),
                None => "—".into(),
            };
            let below = raises_below(&c.answer);
            view! {
                <div class="fit-verdict" data-setting=c.answer.alloc_conf.clone()>
                    <span class="swatch" style=format!("background:{}", c.colour)></span>
                    <span class="label">{c.name.clone()}</span>
                    <span class="value">{text}</span>
                    {(!below.is_empty()).then(|| view! {
                        <span class="not-monotonic">{format!(
                            " but not at {} (the peak is not monotonic in the size: rounding, splitting and reuse change with the requests)",
                            below.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")
                        )}</span>
                    })}
                </div>
            }
        })
        .collect_view();
    let hover = RwSignal::new(None::<u64>);
    let readout = {
        let curves = curves.clone();
        move || {
            let s = hover.get()?;
            let parts: Vec<String> = curves
                .iter()
                .filter_map(|c| {
                    let p = c.need.sizes.iter().find(|p| p.size == s)?;
                    let raises = c.answer.sizes.iter().any(|q| q.size == s && q.oom);
                    Some(format!(
                        "{}: needs {} reserved, {} allocated{}",
                        c.name,
                        peak(p.peak_reserved_bytes),
                        peak(p.peak_allocated_bytes),
                        if raises {
                            " (raises OutOfMemoryError under the limit)"
                        } else {
                            ""
                        }
                    ))
                })
                .collect();
            let lin = curves
                .first()
                .and_then(|c| c.need.sizes.iter().find(|p| p.size == s))
                .map(|p| p.linear_peak_reserved_bytes);
            Some(format!(
                "size {s} · {} · linear baseline {}",
                parts.join(" · "),
                lin.map(peak).unwrap_or_default()
            ))
        }
    };
    view! {
        <h3>{format!("Largest size that fits {where_}")}</h3>
        <div class="fit-verdicts">{verdicts}</div>
        {accuracy(&first)}
        {chart(curves.clone(), hover)}
        <p class="readout">{move || readout().unwrap_or_else(|| "Point at the chart to read a size's figures.".into())}</p>
        {growth(&first)}
        {table(&curves)}
    }
    .into_any()
}

/// Sizes asked below the largest that fits that raise all the same.
pub fn raises_below(a: &::api::PredictAnswer) -> Vec<u64> {
    let Some(top) = a.largest_fitting_size else {
        return Vec::new();
    };
    a.sizes
        .iter()
        .filter(|p| p.oom && p.size < top)
        .map(|p| p.size)
        .collect()
}

/// What the prediction rests on and how far it can be trusted.
fn accuracy(a: &::api::PredictAnswer) -> impl IntoView + use<> {
    let recorded: Vec<String> = a
        .recorded
        .iter()
        .map(|r| format!("{} ({})", r.size, peak(r.peak_reserved_bytes)))
        .collect();
    let error = match a.expected_error {
        Some(e) => format!(
            "Each recording predicted from the others came within {:.1}% of its real peak.",
            100.0 * e
        ),
        None => {
            "With two recordings the error cannot be estimated; a third tells a line from a curve."
                .into()
        }
    };
    let error = format!(
        "{error} Past the largest recording it can be wrong by more: a kernel that needs scratch only from some size on (a reduction's staging buffer, cuDNN choosing another algorithm) shows in no smaller recording. To be sure, record one size near the one you ask about."
    );
    let caveats = {
        let mut c = Vec::new();
        if a.unmatched_requests > 0 {
            c.push(format!(
                "{} not made in every recording are kept at their size in the nearest one",
                fmt::count(a.unmatched_requests)
            ));
        }
        if a.requests_without_rule > 0 {
            c.push(format!(
                "{} follow no straight line (cuDNN's workspaces, chosen per shape) and grow as between the two largest recordings",
                fmt::count(a.requests_without_rule)
            ));
        }
        if c.is_empty() {
            String::new()
        } else {
            format!(" Of them, {}.", c.join("; "))
        }
    };
    let sites = a
        .unmodelled
        .iter()
        .map(|u| {
            view! {
                <li>
                    {format!("{} × {} at ", fmt::count(u.requests), peak(u.bytes))}
                    <span class="site">{::api::site_text(u.site.as_ref())}</span>
                    {format!(": {}", u.why.words())}
                </li>
            }
        })
        .collect_view();
    view! {
        <p class="fit-method">
            {format!(
                "Learnt from recordings at {}: {} requests.{caveats} {error}",
                recorded.join(", "),
                fmt::count(a.requests)
            )}
        </p>
        {(!a.unmodelled.is_empty()).then(|| view! {
            <details class="unmodelled">
                <summary>"Where the requests not modelled are made"</summary>
                <ul>{sites}</ul>
            </details>
        })}
    }
}

/// What grows with the size, by category, at each recording's peak.
fn growth(a: &::api::PredictAnswer) -> impl IntoView + use<> {
    let total: f64 = a.growth.iter().map(|g| g.bytes_per_unit).sum();
    if a.growth.is_empty() || total <= 0.0 {
        return view! { <p class="hint">"Nothing grows with the size between the recordings."</p> }
            .into_any();
    }
    let bars = a
        .growth
        .iter()
        .map(|g| {
            let share = 100.0 * g.bytes_per_unit / total;
            view! {
                <span title=format!("{} {:.0}%", g.category.words(), share) data-category=g.category.as_str()
                    style=format!("width:{share:.2}%;background:{}", crate::categories::colour(g.category))></span>
            }
        })
        .collect_view();
    let rows = a
        .growth
        .iter()
        .map(|g| {
            view! {
                <tr data-category=g.category.as_str()>
                    <td>
                        <span class="swatch" style=format!("background:{}", crate::categories::colour(g.category))></span>
                        " "{g.category.words()}
                    </td>
                    <td class="num">{format!("+{}", fmt::bytes(g.bytes_per_unit.round() as u64))}</td>
                    <td class="num">{format!("{:.0}%", 100.0 * g.bytes_per_unit / total)}</td>
                    <td class="num">{fmt::bytes(g.at_largest_bytes)}</td>
                </tr>
            }
        })
        .collect_view();
    view! {
        <h3>"What grows with the size"</h3>
        <div class="by-category growth"><div class="categories">{bars}</div></div>
        <table class="fit-growth">
            <thead><tr><th></th><th class="num">"per unit of size"</th><th class="num">"share"</th><th class="num">"at the largest recording's peak"</th></tr></thead>
            <tbody>{rows}</tbody>
        </table>
    }
    .into_any()
}

/// Every size asked, per setting: peak reserved, whether it raises, the baseline.
fn table(curves: &[Curve]) -> impl IntoView + use<> {
    let Some(first) = curves.first() else {
        return ().into_any();
    };
    let head = curves
        .iter()
        .map(|c| view! { <th class="num">{c.name.clone()}</th> })
        .collect_view();
    let recorded: Vec<u64> = first.need.recorded.iter().map(|r| r.size).collect();
    let rows = first
        .need
        .sizes
        .iter()
        .map(|p| {
            let cells = curves
                .iter()
                .map(|c| {
                    let need = c.need.sizes.iter().find(|q| q.size == p.size);
                    let fate = c.answer.sizes.iter().find(|q| q.size == p.size);
                    let mut text = need
                        .map(|q| peak(q.peak_reserved_bytes))
                        .unwrap_or_default();
                    match fate {
                        Some(q) if q.oom => text.push_str(" · OOM"),
                        Some(q) if q.survivable_ooms > 0 => text
                            .push_str(&format!(" · fits, {} failed workspaces", q.survivable_ooms)),
                        Some(q)
                            if c.answer.limit_bytes.is_some_and(|l| {
                                need.is_some_and(|n| n.peak_reserved_bytes > l)
                            }) && !q.oom =>
                        {
                            text.push_str(" · fits by emptying the cache")
                        }
                        _ => {}
                    }
                    let oom = fate.is_some_and(|q| q.oom);
                    view! { <td class="num" class:raises=oom>{text}</td> }
                })
                .collect_view();
            let rec = recorded.contains(&p.size);
            view! {
                <tr class:recorded=rec>
                    <td class="num">{p.size}{rec.then_some(" (recorded)")}</td>
                    {cells}
                    <td class="num">{peak(p.peak_allocated_bytes)}</td>
                    <td class="num">{peak(p.linear_peak_reserved_bytes)}</td>
                </tr>
            }
        })
        .collect_view();
    view! {
        <h3>"Predicted peak reserved by size (what each size needs; its fate under the limit)"</h3>
        <table class="fit-table">
            <thead><tr><th class="num">"size"</th>{head}<th class="num">"allocated (default)"</th><th class="num">"linear baseline"</th></tr></thead>
            <tbody>{rows}</tbody>
        </table>
    }
    .into_any()
}

/// Peak reserved per setting against the size, the default's peak allocated, the baseline, the
/// recorded points, the limit and where each setting stops fitting.
fn chart(curves: Vec<Curve>, hover: RwSignal<Option<u64>>) -> impl IntoView {
    let canvas = NodeRef::<Canvas>::new();
    let sizes: Vec<u64> = curves
        .first()
        .map(|c| c.need.sizes.iter().map(|p| p.size).collect())
        .unwrap_or_default();
    let x_top = sizes.iter().copied().max().unwrap_or(1) as f64;
    let limit = curves.first().and_then(|c| c.answer.limit_bytes);
    let y_top = byte_axis_max(
        curves
            .iter()
            .flat_map(|c| c.need.sizes.iter().map(|p| p.peak_reserved_bytes))
            .chain(limit)
            .max()
            .unwrap_or(1) as f64,
        1.08,
    );
    let x = Scale::new(0.0, x_top, L, W - 10.0);
    let smallest = curves
        .iter()
        .flat_map(|c| {
            c.need
                .sizes
                .iter()
                .map(|p| p.peak_allocated_bytes.min(p.linear_peak_reserved_bytes))
        })
        .chain(limit)
        .min()
        .unwrap_or(0);
    let y = Scale::new(axis_floor(smallest, y_top), y_top, H - B, 10.0);
    let drawn = curves.clone();
    Effect::new(move |_| {
        let Some(c) = canvas.get() else { return };
        let at = hover.get();
        let g = sharp(&c, W, H);
        g.clear_rect(0.0, 0.0, W, H);
        g.set_font("11px sans-serif");
        byte_grid_with(&g, &y, (L, W - 10.0), 5, |v| peak(v as u64));
        size_axis(&g, &x);
        let line = |pts: &[(f64, f64)], colour: Paint, width: f64, dash: &[f64]| {
            let arr = js_sys::Array::new();
            for d in dash {
                arr.push(&(*d).into());
            }
            let _ = g.set_line_dash(&arr);
            g.set_stroke_style_str(&colour.css());
            g.set_line_width(width);
            g.begin_path();
            for (i, (px, py)) in pts.iter().enumerate() {
                if i == 0 {
                    g.move_to(*px, *py);
                } else {
                    g.line_to(*px, *py);
                }
            }
            g.stroke();
            let _ = g.set_line_dash(&js_sys::Array::new());
        };
        let Some(first) = drawn.first() else { return };
        let pts = |f: &dyn Fn(&::api::PredictedSize) -> u64,
                   a: &::api::PredictAnswer|
         -> Vec<(f64, f64)> {
            a.sizes
                .iter()
                .map(|p| (x.at(p.size as f64), y.at(f(p) as f64)))
                .collect()
        };
        line(
            &pts(&|p| p.linear_peak_reserved_bytes, &first.need),
            Paint::Ink(Ink::Muted),
            1.0,
            &[2.0, 3.0],
        );
        line(
            &pts(&|p| p.peak_allocated_bytes, &first.need),
            Paint::Hue("#7fa7cf"),
            1.0,
            &[5.0, 3.0],
        );
        for c in &drawn {
            line(
                &pts(&|p| p.peak_reserved_bytes, &c.need),
                c.colour.into(),
                2.0,
                &[],
            );
            // Sizes that raise under the limit, marked on what they would need.
            for p in c
                .need
                .sizes
                .iter()
                .filter(|p| c.answer.sizes.iter().any(|q| q.size == p.size && q.oom))
            {
                let (px, py) = (x.at(p.size as f64), y.at(p.peak_reserved_bytes as f64));
                g.set_stroke_style_str("#c0392b");
                g.set_line_width(1.5);
                g.begin_path();
                g.move_to(px - 3.0, py - 3.0);
                g.line_to(px + 3.0, py + 3.0);
                g.move_to(px + 3.0, py - 3.0);
                g.line_to(px - 3.0, py + 3.0);
                g.stroke();
            }
            if let Some(s) = c.answer.largest_fitting_size {
                let px = x.at(s as f64);
                line(
                    &[(px, y.at(0.0)), (px, 10.0)],
                    c.colour.into(),
                    1.0,
                    &[4.0, 4.0],
                );
                g.set_fill_style_str(c.colour);
                let label = format!("{}: fits up to {s}", c.name);
                let w = g.measure_text(&label).map(|m| m.width()).unwrap_or(120.0);
                let lx = if px + 4.0 + w > W - 10.0 {
                    px - 4.0 - w
                } else {
                    px + 4.0
                };
                let _ = g.fill_text(&label, lx, 24.0 + 14.0 * index_of(&drawn, c) as f64);
            }
        }
        if let Some(l) = limit {
            let py = y.at(l as f64);
            line(
                &[(L, py), (W - 10.0, py)],
                Paint::Hue("#c0392b"),
                1.5,
                &[6.0, 3.0],
            );
            g.set_fill_style_str("#c0392b");
            let _ = g.fill_text(&format!("limit {}", peak(l)), L + 6.0, py - 5.0);
        }
        for r in &first.answer.recorded {
            let (px, py) = (x.at(r.size as f64), y.at(r.peak_reserved_bytes as f64));
            g.set_fill_style_str(&ink(Ink::Strong));
            g.begin_path();
            let _ = g.arc(px, py, 4.0, 0.0, std::f64::consts::TAU);
            g.fill();
        }
        if let Some(s) = at {
            let px = x.at(s as f64);
            g.set_fill_style_str(&ink(Ink::Brush));
            g.fill_rect(px - 0.5, 10.0, 1.0, H - B - 10.0);
        }
        legend(&g, &drawn);
    });
    let on_move = move |ev: web_sys::MouseEvent| {
        let Some(c) = canvas.get_untracked() else {
            return;
        };
        let (px, _) = pointer(&c, &ev);
        let want = x.inv(px);
        hover.set(sizes.iter().copied().min_by(|a, b| {
            (*a as f64 - want)
                .abs()
                .total_cmp(&(*b as f64 - want).abs())
        }));
    };
    view! {
        <canvas class="fit-chart" node_ref=canvas width=W as u32 height=H as u32
            on:mousemove=on_move on:mouseleave=move |_| hover.set(None)></canvas>
    }
}

fn index_of(curves: &[Curve], c: &Curve) -> usize {
    curves.iter().position(|d| d.name == c.name).unwrap_or(0)
}

/// Size labels along the bottom.
fn size_axis(g: &web_sys::CanvasRenderingContext2d, x: &Scale) {
    g.set_fill_style_str(&ink(Ink::Text));
    for i in 0..=8 {
        let v = x.d0 + (x.d1 - x.d0) * i as f64 / 8.0;
        let text = format!("{}", v.round() as u64);
        let w = g.measure_text(&text).map(|m| m.width()).unwrap_or(20.0);
        let _ = g.fill_text(&text, (x.at(v) - w / 2.0).min(W - 2.0 - w), H - 8.0);
    }
}

fn legend(g: &web_sys::CanvasRenderingContext2d, curves: &[Curve]) {
    let mut items: Vec<(String, Paint)> = curves
        .iter()
        .map(|c| (format!("peak reserved, {}", c.name), c.colour.into()))
        .collect();
    items.push(("peak allocated".into(), Paint::Hue("#7fa7cf")));
    items.push(("linear baseline".into(), Paint::Ink(Ink::Muted)));
    items.push(("recorded".into(), Paint::Ink(Ink::Strong)));
    let mut px = L + 10.0;
    let py = H - B - 10.0;
    for (text, colour) in items {
        g.set_fill_style_str(&colour.css());
        g.fill_rect(px, py - 8.0, 10.0, 10.0);
        g.set_fill_style_str(&ink(Ink::Text));
        let _ = g.fill_text(&text, px + 14.0, py + 1.0);
        px += 24.0 + g.measure_text(&text).map(|m| m.width()).unwrap_or(80.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recordings_read_and_write_with_sizes_left_out() {
        let p = parse_recordings("abc:8,def:,ghi");
        assert_eq!(
            p[0],
            Pick {
                id: "abc".into(),
                size: Some(8)
            }
        );
        assert_eq!(p[1].size, None);
        assert_eq!(
            p[2],
            Pick {
                id: "ghi".into(),
                size: None
            }
        );
        assert_eq!(recordings_param(&p), "abc:8,def:,ghi:");
    }

    #[test]
    fn peaks_read_to_the_mib_and_a_flat_curve_gets_a_raised_floor() {
        assert_eq!(peak(1052 << 20), "1,052 MiB");
        assert_eq!(peak(150 << 30), "150.00 GiB");
        assert_eq!(axis_floor(100 << 20, (1200u64 << 20) as f64), 0.0);
        let f = axis_floor(1000 << 20, (1300u64 << 20) as f64);
        assert!(f > 0.0 && f < (1000u64 << 20) as f64, "{f}");
    }

    #[test]
    fn the_curve_reaches_past_where_it_stops_fitting() {
        assert_eq!(reach(6, None), 24);
        assert_eq!(reach(6, Some(40)), 51);
        let g = grid(&[2, 4, 6], 48);
        assert!(g.starts_with(&[2, 4, 6, 8]));
        assert_eq!(*g.last().unwrap(), 48);
        assert!(g.windows(2).all(|w| w[0] < w[1]));
        let g = grid(&[2, 4, 6], 36);
        assert_eq!(&g[..6], &[2, 3, 4, 5, 6, 8], "{g:?}");
    }
}
