//! A run (`/runs/{job}`): a job's ranks side by side. The rank that ran out of memory first with
//! its OOM explained, the imbalance between the heaviest and the lightest rank with the call sites
//! that make it, every rank's memory on one aligned axis (small multiples on one byte scale), and
//! a table of every rank's figures; a rank opens its own snapshot page. The server aligns and
//! reduces (`GET /api/runs/{id}` and `/series`); this page lays it out.

use ::api::routes::page;
use leptos::html::Canvas;
use leptos::prelude::*;
use leptos_router::hooks::use_params_map;

use crate::canvas::{Ink, Scale, ink, pointer, sharp};
use crate::pages::widgets::error_line;
use crate::{api, fmt};

/// Buckets asked of the series: about one per pixel of a chart.
const BUCKETS: u32 = 600;

#[component]
pub fn RunPage() -> impl IntoView {
    api::page_scope();
    let params = use_params_map();
    let id = Memo::new(move |_| params.get().get("id").unwrap_or_default());
    // Both asked at once: the server computes them together and answers the second from memory.
    let report = LocalResource::new(move || {
        let id = id.get();
        async move { api::run(&id).await }
    });
    let series = LocalResource::new(move || {
        let id = id.get();
        async move {
            api::run_series(
                &id,
                &::api::RunSeriesQuery {
                    buckets: Some(BUCKETS),
                },
            )
            .await
        }
    });
    view! {
        <section class="run">
            {move || match report.get() {
                None => view! { <p class="muted">"lining the ranks up…"</p> }.into_any(),
                Some(Err(e)) => error_line(e).into_any(),
                Some(Ok(r)) => run_view(r, series).into_any(),
            }}
        </section>
    }
}

/// A time on the run's axis (µs from its origin), or an event position.
fn at(alignment: &::api::Alignment, t: i64) -> String {
    if alignment.is_time() {
        fmt::seconds(t as f64)
    } else {
        format!("event {t}")
    }
}

fn run_view(
    r: ::api::RunReport,
    series: LocalResource<Result<::api::RunSeries, String>>,
) -> impl IntoView {
    let n = r.ranks.len();
    let alignment = r.alignment.clone();
    let failed = r.failed.clone().map(|f| failed_view(f, &alignment));
    let imbalance = r.imbalance.clone().map(imbalance_view);
    let rows = r.ranks.clone();
    let table_alignment = alignment.clone();
    view! {
        <h1>{format!("Run {}", r.id)}<span class="muted">{format!(" · {n} ranks")}</span></h1>
        <p class="hint alignment">{r.alignment_note.clone()}</p>
        {failed.unwrap_or_else(|| view! {
            <div class="card ok no-oom"><p>"No rank ran out of memory."</p></div>
        }.into_any())}
        {imbalance}
        <h3>"Memory of every rank on one axis"</h3>
        <p class="hint">"Live (filled) and reserved (line) bytes, the highest in each bucket, one row per rank on the same byte scale. A red line marks a rank's first OOM. Hover for the figures; click a rank to open its snapshot."</p>
        {move || match series.get() {
            None => view! { <p class="muted">"drawing…"</p> }.into_any(),
            Some(Err(e)) => error_line(e).into_any(),
            Some(Ok(s)) => multiples(s, rows.clone()).into_any(),
        }}
        <h3>"Ranks"</h3>
        {rank_table(r.ranks, table_alignment)}
    }
}

fn failed_view(f: ::api::FailedRank, alignment: &::api::Alignment) -> AnyView {
    let oom = f.oom;
    let first = if f.order_known {
        "ran out of memory first"
    } else {
        "ran out of memory (the ranks' times are not comparable: which was first is not known)"
    };
    let site = oom.site.as_ref().map(::api::Frame::short);
    let then = (!f.then.is_empty()).then(|| {
        let ranks: Vec<String> = f.then.iter().map(|r| format!("rank {r}")).collect();
        view! { <p class="then">{format!("Then: {}.", ranks.join(", "))}</p> }
    });
    let href = page::snapshot(&f.snapshot_id, &[("view", "oom")]);
    view! {
        <div class="card failed">
            <h2>
                <a href=href.clone()>{format!("Rank {}", f.rank)}</a>
                {format!(" {first} at {}, asking for {}", at(alignment, f.at), fmt::bytes(oom.requested_bytes))}
            </h2>
            <p class="verdict">{oom.explanation.clone()}</p>
            {site.map(|s| view! { <p class="site-line">"at "<code>{s}</code></p> })}
            {then}
            <p><a href=href>"its OOM report →"</a></p>
        </div>
    }
    .into_any()
}

fn imbalance_view(i: ::api::Imbalance) -> AnyView {
    view! {
        <div class="card imbalance">
            <h2>{match i.ratio {
                Some(r) => format!("Imbalance {r:.2}×: rank {} against rank {}", i.heaviest_rank, i.lightest_rank),
                None => format!("Imbalance: rank {} against rank {}", i.heaviest_rank, i.lightest_rank),
            }}</h2>
            <p>{i.summary.clone()}</p>
            {(!i.sites.is_empty()).then(|| view! {
                <table class="imbalance-sites">
                    <thead><tr>
                        <th>"call site"</th>
                        <th class="num">{format!("rank {} at its peak", i.lightest_rank)}</th>
                        <th class="num">{format!("rank {} at its peak", i.heaviest_rank)}</th>
                        <th class="num">"more on the heaviest"</th>
                    </tr></thead>
                    <tbody>
                        {i.sites.iter().map(|s| view! {
                            <tr class="site-row">
                                <td><span class="site">{::api::site_text(s.site.as_ref())}</span></td>
                                <td class="num">{fmt::bytes(s.a_bytes)}</td>
                                <td class="num">{fmt::bytes(s.b_bytes)}</td>
                                <td class="num up">{fmt::signed(s.delta_bytes, true)}</td>
                            </tr>
                        }).collect_view()}
                    </tbody>
                </table>
            })}
        </div>
    }
    .into_any()
}

fn rank_table(rows: Vec<::api::RankRow>, alignment: ::api::Alignment) -> impl IntoView {
    view! {
        <table class="ranks">
            <thead><tr>
                <th>"rank"</th><th>"snapshot"</th><th class="num">"events"</th>
                <th class="num">"peak requested"</th><th class="num">"peak reserved"</th>
                <th class="num">"reserved at the end"</th><th class="num">"cached free (fragmentation)"</th>
                <th class="num">"leak suspects"</th><th class="num">"OOMs"</th>
            </tr></thead>
            <tbody>
                {rows.into_iter().map(|k| {
                    let href = page::snapshot_home(&k.snapshot_id);
                    let oom = k.first_oom_at.map(|t| format!("{} (first at {})", k.ooms, at(&alignment, t)));
                    let failed = k.ooms > 0;
                    let older = (k.earlier_snapshots > 0).then(|| view! {
                        <span class="muted">{format!(" (+{} older)", k.earlier_snapshots)}</span>
                    });
                    view! {
                        <tr class="rank-row" class:failed=failed data-rank=k.rank.to_string()>
                            <td><a href=href.clone()>{format!("rank {}", k.rank)}</a></td>
                            <td><a href=href>{k.name}</a>{older}<span class="muted">{format!(" cuda:{}", k.device)}</span></td>
                            <td class="num">{fmt::count(k.events as u64)}</td>
                            <td class="num">{fmt::bytes(k.peak_live_bytes)}</td>
                            <td class="num">{fmt::bytes(k.peak_reserved_bytes)}</td>
                            <td class="num">{fmt::bytes(k.reserved_bytes)}</td>
                            <td class="num">{fmt::bytes(k.cached_free_bytes)}</td>
                            <td class="num">{if k.leak_suspects > 0 {
                                format!("{} ({})", k.leak_suspects, fmt::bytes(k.leak_bytes))
                            } else { "0".to_string() }}</td>
                            <td class="num">{oom.unwrap_or_else(|| "0".to_string())}</td>
                        </tr>
                    }
                }).collect_view()}
            </tbody>
        </table>
    }
}

const W: f64 = 1100.0;
const H: f64 = 46.0;
/// Left margin for the rank's label.
const L: f64 = 96.0;

/// One chart per rank, on one x axis and one byte scale.
fn multiples(s: ::api::RunSeries, rows: Vec<::api::RankRow>) -> impl IntoView {
    let top = s
        .ranks
        .iter()
        .flat_map(|r| r.reserved_bytes.iter().chain(&r.live_bytes).flatten())
        .copied()
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let hover = RwSignal::new(None::<String>);
    let axis = (s.from, s.to, s.bucket, s.alignment.clone());
    let charts = s
        .ranks
        .into_iter()
        .map(|rs| {
            let row = rows.iter().find(|r| r.rank == rs.rank).cloned();
            rank_chart(rs, row, top, axis.clone(), hover)
        })
        .collect_view();
    let (from, to, alignment) = (s.from, s.to, s.alignment);
    view! {
        <div class="multiples">
            <div class="readout run-readout">{move || hover.get().unwrap_or_else(|| "\u{a0}".to_string())}</div>
            {charts}
            <div class="axis-labels">
                <span>{at(&alignment, from)}</span>
                <span class="scale">{format!("byte scale 0 – {} on every row", fmt::bytes(top))}</span>
                <span>{at(&alignment, to)}</span>
            </div>
        </div>
    }
}

fn rank_chart(
    rs: ::api::RankSeries,
    row: Option<::api::RankRow>,
    top: f64,
    axis: (i64, i64, i64, ::api::Alignment),
    hover: RwSignal<Option<String>>,
) -> impl IntoView {
    let canvas = NodeRef::<Canvas>::new();
    let (from, _to, bucket, alignment) = axis;
    let n = rs.live_bytes.len();
    let oom_at = row.as_ref().and_then(|r| r.first_oom_at);
    let (live, reserved) = (rs.live_bytes.clone(), rs.reserved_bytes.clone());
    let rank = rs.rank;
    Effect::new(move |_| {
        let Some(c) = canvas.get() else { return };
        let g = sharp(&c, W, H);
        g.clear_rect(0.0, 0.0, W, H);
        g.set_fill_style_str(&ink(Ink::Paper));
        g.fill_rect(L, 0.0, W - L, H);
        let x = Scale::new(0.0, n as f64, L, W);
        let y = Scale::new(0.0, top, H - 1.0, 2.0);
        // A hair wider than a bucket, so neighbouring bars leave no seams.
        let bw = (x.at(1.0) - x.at(0.0)).max(1.0) + 0.5;
        g.set_fill_style_str("#4a90d9");
        for (i, v) in live.iter().enumerate() {
            if let Some(v) = v {
                let (px, py) = (x.at(i as f64), y.at(*v as f64));
                g.fill_rect(px, py, bw, H - 1.0 - py);
            }
        }
        g.set_stroke_style_str("#e67e22");
        g.set_line_width(1.5);
        g.begin_path();
        let mut open = false;
        for (i, v) in reserved.iter().enumerate() {
            match v {
                Some(v) => {
                    let (px, py) = (x.at(i as f64), y.at(*v as f64));
                    if open {
                        g.line_to(px, py);
                    } else {
                        g.move_to(px, py);
                        open = true;
                    }
                    g.line_to(px + bw, py);
                }
                None => open = false,
            }
        }
        g.stroke();
        if let Some(t) = oom_at {
            let px = x.at(((t - from) as f64 / bucket as f64).min(n as f64));
            g.set_fill_style_str(&ink(Ink::Danger));
            g.fill_rect(px - 1.0, 0.0, 2.0, H);
        }
        g.set_fill_style_str(&ink(Ink::Strong));
        g.set_font("bold 12px sans-serif");
        let _ = g.fill_text(&format!("rank {rank}"), 6.0, 18.0);
        g.set_font("11px sans-serif");
        g.set_fill_style_str(&ink(Ink::Muted));
        if let Some(peak) = live.iter().flatten().max() {
            let _ = g.fill_text(&format!("peak {}", fmt::bytes(*peak)), 6.0, 34.0);
        }
    });
    let (live, reserved) = (rs.live_bytes, rs.reserved_bytes);
    let on_move = move |ev: web_sys::MouseEvent| {
        let Some(c) = canvas.get_untracked() else {
            return;
        };
        let (px, _) = pointer(&c, &ev);
        if px < L || n == 0 {
            hover.set(None);
            return;
        }
        let i = (Scale::new(0.0, n as f64, L, W).inv(px).floor() as usize).min(n - 1);
        let (t0, t1) = (from + i as i64 * bucket, from + (i as i64 + 1) * bucket);
        let when = format!("{} – {}", at(&alignment, t0), at(&alignment, t1));
        hover.set(Some(match (live[i], reserved[i]) {
            (Some(l), Some(r)) => format!(
                "rank {rank} · {when}: live {}, reserved {} (the highest in this bucket)",
                fmt::bytes(l),
                fmt::bytes(r)
            ),
            _ => {
                format!("rank {rank} · {when}: no trace (before its first event or after its last)")
            }
        }));
    };
    let href = row
        .map(|r| page::snapshot_home(&r.snapshot_id))
        .unwrap_or_default();
    view! {
        <a class="rank-chart" href=href data-rank=rank.to_string()>
            <canvas node_ref=canvas width=W as u32 height=H as u32 on:mousemove=on_move
                on:mouseleave=move |_| hover.set(None)></canvas>
        </a>
    }
}
