//! A run (`/runs/{job}`): a job's ranks side by side. The rank that ran out of memory first with
//! its OOM explained, the imbalance between the heaviest and the lightest rank with the call sites
//! that make it, every rank's memory on one aligned axis (small multiples on one byte scale), and
//! a table of every rank's figures; a rank opens its own snapshot page. Where no rank had an event
//! for a while (the ranks waited), the stretch is shaded and named on every row, and "fold idle
//! time" shrinks each to a marked break so the work fills the width. The server aligns, reduces
//! and finds the idle stretches (`GET /api/runs/{id}` and `/series`); this page lays it out.

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

/// Width (a share of the plot) an idle stretch keeps when folded.
const FOLDED_SHARE: f64 = 0.012;

/// The run's axis on the plot: `from..to` over the width, or with its idle stretches folded to
/// [`FOLDED_SHARE`] each and the rest sharing the width in proportion. Pure, tested on the host.
#[derive(Clone, Debug, PartialEq)]
pub struct Fold {
    from: f64,
    to: f64,
    /// The idle stretches (sorted, inside `from..to`) when folded; none otherwise.
    idle: Vec<(f64, f64)>,
}

impl Fold {
    pub fn new(from: i64, to: i64, idle: &[(i64, i64)], folded: bool) -> Fold {
        let (from, to) = (from as f64, (to as f64).max(from as f64 + 1.0));
        let idle = if folded {
            idle.iter()
                .map(|&(a, b)| ((a as f64).max(from), (b as f64).min(to)))
                .filter(|(a, b)| b > a)
                .collect()
        } else {
            Vec::new()
        };
        Fold { from, to, idle }
    }

    /// Width per µs outside idle stretches.
    fn rate(&self) -> f64 {
        let idle: f64 = self.idle.iter().map(|(a, b)| b - a).sum();
        let busy = (self.to - self.from - idle).max(1.0);
        (1.0 - FOLDED_SHARE * self.idle.len() as f64).max(0.1) / busy
    }

    /// Where `t` is drawn, 0..1 of the plot.
    pub fn x(&self, t: f64) -> f64 {
        let (rate, mut x, mut at) = (self.rate(), 0.0, self.from);
        for &(a, b) in &self.idle {
            if t <= a {
                break;
            }
            x += (a - at) * rate;
            if t < b {
                return x + (t - a) / (b - a) * FOLDED_SHARE;
            }
            x += FOLDED_SHARE;
            at = b;
        }
        (x + (t.min(self.to) - at).max(0.0) * rate).clamp(0.0, 1.0)
    }

    /// The time drawn at `x` (0..1 of the plot): `x`'s inverse.
    pub fn t(&self, x: f64) -> f64 {
        let (rate, mut x0, mut at) = (self.rate(), 0.0, self.from);
        for &(a, b) in &self.idle {
            let x_a = x0 + (a - at) * rate;
            if x <= x_a {
                break;
            }
            if x < x_a + FOLDED_SHARE {
                return a + (x - x_a) / FOLDED_SHARE * (b - a);
            }
            x0 = x_a + FOLDED_SHARE;
            at = b;
        }
        (at + (x - x0) / rate).clamp(self.from, self.to)
    }
}

/// "2 idle stretches (no rank had an event): 3.1 s in all, the longest 2.0 s."
fn idle_note(idle: &[(i64, i64)]) -> String {
    let total: i64 = idle.iter().map(|(a, b)| b - a).sum();
    let longest = idle.iter().map(|(a, b)| b - a).max().unwrap_or(0);
    let n = idle.len();
    format!(
        "{n} idle stretch{} where no rank had an event: {} in all{}, shaded on every row.",
        if n == 1 { "" } else { "es" },
        fmt::seconds(total as f64),
        if n > 1 {
            format!(", the longest {}", fmt::seconds(longest as f64))
        } else {
            String::new()
        }
    )
}

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
    let folded = RwSignal::new(false);
    let (from, to, idle) = (s.from, s.to, s.idle.clone());
    let fold = Memo::new(move |_| Fold::new(from, to, &idle, folded.get()));
    let axis = Axis {
        from: s.from,
        bucket: s.bucket,
        alignment: s.alignment.clone(),
        idle: s.idle.clone(),
        fold,
    };
    let charts = s
        .ranks
        .into_iter()
        .map(|rs| {
            let row = rows.iter().find(|r| r.rank == rs.rank).cloned();
            rank_chart(rs, row, top, axis.clone(), hover)
        })
        .collect_view();
    let alignment = s.alignment;
    let note = (!s.idle.is_empty()).then(|| {
        view! {
            <p class="hint idle-note">
                {idle_note(&s.idle)}" "
                <label class="fold-idle">
                    <input type="checkbox" prop:checked=move || folded.get()
                        on:change=move |ev| folded.set(event_target_checked(&ev))/>
                    " fold idle time (each stretch a marked break)"
                </label>
            </p>
        }
    });
    view! {
        <div class="multiples">
            {note}
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

/// What every rank's chart shares: the run's axis, its idle stretches and how they are drawn.
#[derive(Clone)]
struct Axis {
    from: i64,
    bucket: i64,
    alignment: ::api::Alignment,
    idle: Vec<(i64, i64)>,
    fold: Memo<Fold>,
}

fn rank_chart(
    rs: ::api::RankSeries,
    row: Option<::api::RankRow>,
    top: f64,
    axis: Axis,
    hover: RwSignal<Option<String>>,
) -> impl IntoView {
    let canvas = NodeRef::<Canvas>::new();
    let Axis {
        from,
        bucket,
        alignment,
        idle,
        fold,
    } = axis;
    let n = rs.live_bytes.len();
    let oom_at = row.as_ref().and_then(|r| r.first_oom_at);
    let (live, reserved) = (rs.live_bytes.clone(), rs.reserved_bytes.clone());
    let rank = rs.rank;
    Effect::new(move |_| {
        let Some(c) = canvas.get() else { return };
        let fold = fold.get();
        let g = sharp(&c, W, H);
        g.clear_rect(0.0, 0.0, W, H);
        g.set_fill_style_str(&ink(Ink::Paper));
        g.fill_rect(L, 0.0, W - L, H);
        // Bucket edges through the fold: a bucket inside a folded stretch is drawn narrow.
        let px = |t: f64| L + fold.x(t) * (W - L);
        let edge = |i: f64| px((from as f64) + i * bucket as f64);
        let y = Scale::new(0.0, top, H - 1.0, 2.0);
        // What is drawn, in words, for tests: the pixels the idle stretches take.
        let idle_px: f64 = idle.iter().map(|&(a, b)| px(b as f64) - px(a as f64)).sum();
        let _ = c.set_attribute("data-idle-px", &format!("{idle_px:.0}"));
        for &(a, b) in &idle {
            let (xa, xb) = (px(a as f64), px(b as f64));
            g.set_fill_style_str(&ink(Ink::Grid));
            g.fill_rect(xa, 0.0, (xb - xa).max(1.0), H);
            g.set_fill_style_str(&ink(Ink::Muted));
            g.fill_rect(xa, 0.0, 1.0, H);
            g.fill_rect(xb - 1.0, 0.0, 1.0, H);
        }
        g.set_fill_style_str("#4a90d9");
        for (i, v) in live.iter().enumerate() {
            if let Some(v) = v {
                // A hair wider than a bucket, so neighbouring bars leave no seams.
                let (x0, py) = (edge(i as f64), y.at(*v as f64));
                let bw = (edge(i as f64 + 1.0) - x0).max(0.5) + 0.5;
                g.fill_rect(x0, py, bw, H - 1.0 - py);
            }
        }
        g.set_stroke_style_str("#e67e22");
        g.set_line_width(1.5);
        g.begin_path();
        let mut open = false;
        for (i, v) in reserved.iter().enumerate() {
            match v {
                Some(v) => {
                    let (x0, py) = (edge(i as f64), y.at(*v as f64));
                    if open {
                        g.line_to(x0, py);
                    } else {
                        g.move_to(x0, py);
                        open = true;
                    }
                    g.line_to(edge(i as f64 + 1.0), py);
                }
                None => open = false,
            }
        }
        g.stroke();
        // Each stretch named where it is wide enough, over the bars.
        g.set_font("10px sans-serif");
        for &(a, b) in &idle {
            let (xa, xb) = (px(a as f64), px(b as f64));
            let label = format!("idle {}", fmt::seconds((b - a) as f64));
            if g.measure_text(&label).map_or(f64::MAX, |m| m.width()) < xb - xa - 6.0 {
                g.set_fill_style_str(&ink(Ink::Paper));
                g.fill_rect(xa + 2.0, H - 17.0, xb - xa - 4.0, 13.0);
                g.set_fill_style_str(&ink(Ink::Muted));
                let _ = g.fill_text(&label, xa + 4.0, H - 6.0);
            }
        }
        if let Some(t) = oom_at {
            g.set_fill_style_str(&ink(Ink::Danger));
            g.fill_rect(px(t as f64) - 1.0, 0.0, 2.0, H);
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
        let t = fold.get_untracked().t((px - L) / (W - L));
        let i = (((t - from as f64) / bucket as f64).floor().max(0.0) as usize).min(n - 1);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folding_shrinks_each_idle_stretch_to_a_break_and_inverts() {
        // 0..1000 with 300..700 idle: unfolded, the plain scale.
        let flat = Fold::new(0, 1000, &[(300, 700)], false);
        assert!((flat.x(500.0) - 0.5).abs() < 1e-12);
        let f = Fold::new(0, 1000, &[(300, 700)], true);
        // The 600 µs of work share 1 − 0.012 of the width; the stretch takes 0.012.
        let rate = (1.0 - FOLDED_SHARE) / 600.0;
        assert!((f.x(300.0) - 300.0 * rate).abs() < 1e-12);
        assert!((f.x(700.0) - (300.0 * rate + FOLDED_SHARE)).abs() < 1e-12);
        assert!((f.x(1000.0) - 1.0).abs() < 1e-12);
        assert!((f.x(500.0) - (300.0 * rate + FOLDED_SHARE / 2.0)).abs() < 1e-12);
        for t in [0.0, 150.0, 299.0, 300.0, 450.0, 699.0, 700.0, 850.0, 1000.0] {
            assert!((f.t(f.x(t)) - t).abs() < 1e-6, "{t}");
        }
        // Ends clamp.
        assert_eq!(f.x(-5.0), 0.0);
        assert_eq!(f.t(2.0), 1000.0);
        assert_eq!(
            idle_note(&[(0, 2_000_000), (5_000_000, 6_000_000)]),
            "2 idle stretches where no rank had an event: 3.00 s in all, the longest 2.00 s, shaded on every row."
        );
    }
}
