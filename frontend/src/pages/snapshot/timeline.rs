//! The timeline tab: live (allocated) and reserved memory over real time (or event index), drawn on a
//! canvas from the server's reduced buckets; external annotations (e.g. `Optimizer.step`) as
//! bands and OOMs as markers. Wheel zooms around the cursor, drag pans, the minimap's brush
//! shows and sets the window, hover shows the figures and the largest live allocation with its
//! stack, click pins it. The window is kept in the URL. "By category" (`by=category`) stacks
//! each bucket's live bytes by what they are (parameters, gradients, optimizer state,
//! activations, …) at the bucket's highest, like the profiler's memory timeline; the legend hides
//! categories (`hide=`).

use ::api::{AllocationView as Alloc, Axis, Bucket, Category, TimelineAnswer as Resp};
use leptos::html::Canvas;
use leptos::prelude::*;
use snapshot::analysis::run::{IDLE_MIN_US, IDLE_SHARE};

use super::bands::{Layout, layout};
use crate::canvas::{Ink, Scale, byte_axis_max, byte_grid, ink, logical_size, pointer, sharp};
use crate::url::UrlState;
use crate::{api, fmt};

const W: f64 = 1200.0;
/// The hover tooltip's width in CSS pixels (`.tooltip` in style.css) and how many frames it lists.
const TOOLTIP_W: f64 = 340.0;
const TOOLTIP_FRAMES: usize = 8;

/// Where the tooltip starts for a pointer at `x` on a canvas shown `width` CSS pixels wide: to the
/// right of the pointer where it fits, else to its left.
fn tooltip_left(x: f64, width: f64) -> f64 {
    if x + 16.0 + TOOLTIP_W <= width {
        x + 16.0
    } else {
        (x - 16.0 - TOOLTIP_W).max(0.0)
    }
}
const H: f64 = 360.0;
const MINI_H: f64 = 60.0;
const LEFT: f64 = 70.0;
/// The narrowest window wheel zoom goes to, by axis (`Axis as usize`): 2 events, 100 µs.
const MIN_SPAN: [f64; 2] = [2.0, 100.0];

/// A stable colour per stack.
fn colour(stack: ::api::StackId) -> String {
    format!("hsl({}, 60%, 62%)", stack_hue(stack))
}

/// Hues kept for the chart's own marks: the reserved line (orange, ~22°) and the OOM marker
/// (red, 0°). An allocation's hue is never within them, so no band reads as either.
const MARK_HUES: std::ops::Range<u32> = 345..408; // 345° round to 48°

/// A stack's hue in [48°, 345°): stable for the stack, away from [`MARK_HUES`].
fn stack_hue(stack: ::api::StackId) -> u32 {
    let span = 360 - (MARK_HUES.end - MARK_HUES.start);
    (MARK_HUES.end + (stack.0.wrapping_mul(2_654_435_761) >> 8) % span) % 360
}

/// The plot's scales on a canvas of width `w` and height `h` (with or without axes).
fn scales(r: &Resp, w: f64, h: f64, with_axes: bool) -> Option<(Scale, Scale)> {
    let b = &r.timeline.buckets;
    b.first()?;
    let left = if with_axes { LEFT } else { 0.0 };
    let top = if with_axes { 20.0 } else { 2.0 };
    let bottom = h - if with_axes { 24.0 } else { 2.0 };
    let ymax = byte_axis_max(
        b.iter()
            .map(|x| x.reserved_max_bytes.max(x.live_max_bytes) as f64)
            .fold(1.0, f64::max),
        1.05,
    );
    Some((
        // The window the server bucketed, so a pixel is the same moment for both.
        Scale::new(r.timeline.x_from, r.timeline.x_to, left, w - 10.0),
        Scale::new(0.0, ymax, bottom, top),
    ))
}

/// What to draw beyond the memory curves.
struct Overlay<'a> {
    bands: Option<&'a Layout>,
    with_axes: bool,
    brush: Option<(f64, f64)>,
    highlight: Option<&'a Alloc>,
    filter: &'a str,
    /// Reserved bytes under a what-if setting, simulated: the highest in each bucket (none past
    /// where that run runs out of memory).
    simulated: Option<&'a [Option<u64>]>,
    /// The device's steps, drawn as the axis (`steps=1`): a line where each starts, ticks named
    /// by step.
    steps: Option<&'a ::api::Steps>,
    /// Positions of the OOMs the run survived (caught, workspace fallbacks), sorted: marked in
    /// amber, the one that ended the run in red.
    survived: &'a [u32],
    /// Live bytes by category per bucket, stacked in place of the allocations; hidden ones left
    /// out.
    categories: Option<(&'a [::api::CategoryBytes], &'a [Category])>,
}

/// The idle stretches of an answer, as (x from, x to, µs idle) on its axis: no event for at
/// least [`IDLE_SHARE`] of the window and [`IDLE_MIN_US`], the rule the run page follows too. On the time axis, a
/// run of buckets with no event (drawn flat, marked with its length); on the event axis, where
/// time is already folded away, the boundary between two buckets whose times jump (a mark where
/// the idle time went).
pub fn idle_stretches(r: &Resp) -> Vec<(f64, f64, i64)> {
    let b = &r.timeline.buckets;
    let span_us = (r.last_time_us - r.first_time_us).max(1);
    let mut out = Vec::new();
    match r.axis {
        Axis::Time => {
            let window = (r.timeline.x_to - r.timeline.x_from).max(1.0);
            let min = (window * IDLE_SHARE).max(IDLE_MIN_US as f64);
            let mut i = 0;
            while i < b.len() {
                if b[i].first != b[i].last {
                    i += 1;
                    continue;
                }
                let j = (i..b.len())
                    .find(|&j| b[j].first != b[j].last)
                    .unwrap_or(b.len());
                let (from, to) = (
                    b[i].time_us as f64,
                    b.get(j).map_or(r.timeline.x_to, |k| k.time_us as f64),
                );
                // Only inside the trace (not the stretch after its last event).
                let inside = j < b.len() && b[i].first > 0;
                if inside && to - from >= min {
                    out.push((from, to, (to - from) as i64));
                }
                i = j;
            }
        }
        Axis::Event => {
            let min = ((span_us as f64 * IDLE_SHARE) as i64).max(IDLE_MIN_US);
            for w in b.windows(2) {
                // The time between the two buckets' starts, less what a bucket's own events
                // take, is at least this gap: marked where the next bucket starts.
                let gap = w[1].time_us - w[0].time_us;
                if gap >= min {
                    out.push((w[1].first as f64, w[1].first as f64, gap));
                }
            }
        }
    }
    out
}

/// Idle stretches marked: hatched and named by their length on the time axis; a break with the
/// time it folds on the event axis.
fn draw_idle(
    g: &web_sys::CanvasRenderingContext2d,
    r: &Resp,
    xs: &Scale,
    (top, plot_h): (f64, f64),
) {
    // A label that would run into the one before it is left out (its stretch stays marked).
    let mut taken = f64::MIN;
    for (from, to, us) in idle_stretches(r) {
        let (x0, x1) = (xs.at(from), xs.at(to));
        let label = format!("idle {}", fmt::seconds(us as f64));
        if r.axis == Axis::Time {
            g.set_fill_style_str("rgba(134, 142, 150, 0.16)");
            g.fill_rect(x0, top, (x1 - x0).max(1.0), plot_h);
        } else {
            // A break: two slanted strokes across the plot where the idle time was folded.
            g.set_stroke_style_str(&ink(Ink::Muted));
            g.set_line_width(1.0);
            for dx in [-2.0, 2.0] {
                g.begin_path();
                g.move_to(x0 + dx - 3.0, top + plot_h);
                g.line_to(x0 + dx + 3.0, top);
                g.stroke();
            }
        }
        g.set_fill_style_str(&ink(Ink::Muted));
        let tw = g.measure_text(&label).map_or(60.0, |m| m.width());
        let mid = if r.axis == Axis::Time {
            (x0 + x1) / 2.0
        } else {
            x0
        };
        let lx = mid - tw / 2.0;
        if lx < taken + 4.0 {
            continue;
        }
        taken = lx + tw;
        let _ = g.fill_text(&label, lx, top + 24.0);
    }
}

/// Most step boundaries drawn; more are thinned to every k-th.
const MAX_STEP_LINES: usize = 200;

/// Where each step starts on the axis shown, within the window: (x on the axis, number).
fn steps_in_view(s: &::api::Steps, axis: Axis, x0: f64, x1: f64) -> Vec<(f64, u32)> {
    let at: Vec<(f64, u32)> = s
        .starts
        .iter()
        .zip(&s.start_times_us)
        .zip(&s.numbers)
        .map(|((&p, &t), &n)| {
            (
                match axis {
                    Axis::Time => t as f64,
                    Axis::Event => p as f64,
                },
                n,
            )
        })
        .filter(|&(x, _)| x >= x0 && x <= x1)
        .collect();
    let every = at.len().div_ceil(MAX_STEP_LINES).max(1);
    at.into_iter().step_by(every).collect()
}

fn draw(c: &web_sys::HtmlCanvasElement, r: &Resp, height: f64, o: Overlay) {
    // Drawn in CSS pixels on a backing store of as many device pixels: sharp at any ratio.
    let w = logical_size(c).0;
    let g = sharp(c, w, height);
    let h = height;
    g.set_fill_style_str(&ink(Ink::Paper));
    g.fill_rect(0.0, 0.0, w, h);
    let b = &r.timeline.buckets;
    let Some((xs, ys)) = scales(r, w, h, o.with_axes) else {
        return;
    };
    let (top, plot_h) = (ys.p1, ys.p0 - ys.p1);
    let (left, right) = (xs.p0, xs.p1);
    let x_of = |k: &Bucket| xs.at(r.bucket_x(k));

    // Annotation bands (the server pairs START/END marks and merges what one bucket cannot tell apart).
    if r.axis == Axis::Time {
        g.set_fill_style_str("rgba(120, 140, 255, 0.12)");
        for a in &r.annotations {
            let (x0, x1) = (xs.at(a.start_us as f64), xs.at(a.end_us as f64));
            g.fill_rect(x0, top, (x1 - x0).max(1.0), plot_h);
        }
    }
    if let Some((cats, hidden)) = o.categories {
        draw_categories(&g, b, cats, hidden, |k| x_of(k), right, &ys);
    } else {
        draw_live(&g, r, b, &xs, &ys, &o);
    }
    draw_rest(&g, r, b, &xs, &ys, &o, (top, plot_h, left, right, w, h));
}

/// Each bucket's live bytes stacked by category, from the bottom in [`Category::ALL`]'s order
/// (what lives longest lowest), as steps.
fn draw_categories(
    g: &web_sys::CanvasRenderingContext2d,
    b: &[Bucket],
    cats: &[::api::CategoryBytes],
    hidden: &[Category],
    x_of: impl Fn(&Bucket) -> f64,
    right: f64,
    ys: &Scale,
) {
    let mut below = vec![0u64; b.len()];
    for c in Category::ALL {
        if hidden.contains(&c) {
            continue;
        }
        let above: Vec<u64> = below
            .iter()
            .zip(cats)
            .map(|(lo, k)| lo + k.get(c))
            .collect();
        if above == below {
            continue;
        }
        g.begin_path();
        g.move_to(x_of(&b[0]), ys.at(below[0] as f64));
        for (i, k) in b.iter().enumerate() {
            let xn = b.get(i + 1).map_or(right, &x_of);
            g.line_to(x_of(k), ys.at(above[i] as f64));
            g.line_to(xn, ys.at(above[i] as f64));
        }
        for (i, k) in b.iter().enumerate().rev() {
            let xn = b.get(i + 1).map_or(right, &x_of);
            g.line_to(xn, ys.at(below[i] as f64));
            g.line_to(x_of(k), ys.at(below[i] as f64));
        }
        g.close_path();
        g.set_fill_style_str(crate::categories::colour(c));
        g.fill();
        below = above;
    }
}

/// Live memory as an envelope, the largest allocations as bands on it.
fn draw_live(
    g: &web_sys::CanvasRenderingContext2d,
    r: &Resp,
    b: &[Bucket],
    xs: &Scale,
    ys: &Scale,
    o: &Overlay,
) {
    let right = xs.p1;
    let x_of = |k: &Bucket| xs.at(r.bucket_x(k));
    // Live memory: min/max envelope per bucket, one path.
    g.begin_path();
    g.move_to(x_of(&b[0]), ys.at(0.0));
    for (i, k) in b.iter().enumerate() {
        let xn = b.get(i + 1).map_or(right, x_of);
        g.line_to(x_of(k), ys.at(k.live_max_bytes as f64));
        g.line_to(xn, ys.at(k.live_max_bytes as f64));
    }
    g.line_to(right, ys.at(0.0));
    g.close_path();
    g.set_fill_style_str(&if o.with_axes {
        ink(Ink::Envelope)
    } else {
        "#4c6ef5".to_string()
    });
    g.fill();
    // Allocations as stacked bands on top of the envelope.
    if let Some(lay) = o.bands {
        let xe = |j: usize| b.get(j).map_or(right, x_of);
        for band in lay.0.iter() {
            let a = &r.allocations[band.alloc];
            let size = a.size_bytes as f64;
            g.set_fill_style_str(&if r.stack_mentions(a.stack, o.filter) {
                colour(a.stack)
            } else {
                ink(Ink::Grid)
            });
            // Up the left edge, along the top, back along the bottom: a vertex pair per step.
            let steps = band.steps();
            g.begin_path();
            g.move_to(xe(band.first), ys.at(band.lower[0] as f64));
            for &(j0, j1, lo) in &steps {
                g.line_to(xe(j0), ys.at(lo as f64 + size));
                g.line_to(xe(j1), ys.at(lo as f64 + size));
            }
            for &(j0, j1, lo) in steps.iter().rev() {
                g.line_to(xe(j1), ys.at(lo as f64));
                g.line_to(xe(j0), ys.at(lo as f64));
            }
            g.close_path();
            g.fill();
        }
    }
}

/// Reserved bytes, what-if curves, OOM markers, the highlight, axes and steps.
fn draw_rest(
    g: &web_sys::CanvasRenderingContext2d,
    r: &Resp,
    b: &[Bucket],
    xs: &Scale,
    ys: &Scale,
    o: &Overlay,
    (top, plot_h, left, right, w, h): (f64, f64, f64, f64, f64, f64),
) {
    let x_of = |k: &Bucket| xs.at(r.bucket_x(k));
    // Reserved: steps (a value holds until the next event), at each bucket's highest.
    g.begin_path();
    for (i, k) in b.iter().enumerate() {
        let (x, y) = (x_of(k), ys.at(k.reserved_max_bytes as f64));
        if i == 0 {
            g.move_to(x, y);
        } else {
            g.line_to(x, y);
        }
        g.line_to(b.get(i + 1).map_or(right, x_of), y);
    }
    g.set_stroke_style_str(&ink(Ink::Reserved));
    g.set_line_width(1.5);
    g.stroke();
    // A what-if setting's reserved memory, simulated: dashed steps over the same buckets.
    if let Some(sim) = o.simulated {
        g.begin_path();
        let mut open = false;
        for (i, k) in b.iter().enumerate() {
            match sim.get(i).copied().flatten() {
                Some(v) => {
                    let (x, y) = (x_of(k), ys.at(v as f64));
                    if open {
                        g.line_to(x, y);
                    } else {
                        g.move_to(x, y);
                        open = true;
                    }
                    g.line_to(b.get(i + 1).map_or(right, x_of), y);
                }
                None => open = false,
            }
        }
        g.set_stroke_style_str("#1971c2");
        let _ = g.set_line_dash(&js_sys::Array::of2(&6.0.into(), &3.0.into()));
        g.stroke();
        let _ = g.set_line_dash(&js_sys::Array::new());
    }
    // OOM markers: survived ones in amber, the one that ended the run in red.
    for m in &r.ooms {
        let x = xs.at(match r.axis {
            Axis::Time => m.time_us as f64,
            Axis::Event => m.position as f64,
        });
        let survived = o.survived.binary_search(&m.position).is_ok();
        g.set_fill_style_str(&if survived {
            "#f59f00".to_string()
        } else {
            ink(Ink::Danger)
        });
        g.fill_rect(x - 1.0, top, if survived { 1.5 } else { 3.0 }, plot_h);
        if o.with_axes && !survived {
            // Right of the marker, or left of it where the plot ends first (never clipped).
            let tw = g.measure_text("OOM").map_or(26.0, |m| m.width());
            let lx = if x + 3.0 + tw <= w - 2.0 {
                x + 3.0
            } else {
                x - 3.0 - tw
            };
            let _ = g.fill_text("OOM", lx, top + 10.0);
        }
    }
    if let Some(a) = o.highlight {
        let (s, e) = match r.axis {
            Axis::Time => (
                a.start_time_us.map_or(xs.d0, |t| t as f64),
                a.end_time_us.map_or(xs.d1, |t| t as f64),
            ),
            Axis::Event => (
                a.start.map_or(xs.d0, |v| v as f64),
                a.end.map_or(xs.d1, |v| v as f64),
            ),
        };
        // Cut at the window: an allocation made before it or freed after it ends at the edge.
        let (s, e) = (s.max(xs.d0), e.min(xs.d1));
        let size = a.size_bytes as f64;
        g.set_fill_style_str("rgba(250, 176, 5, 0.45)");
        g.fill_rect(
            xs.at(s),
            ys.at(size),
            (xs.at(e) - xs.at(s)).max(2.0),
            ys.at(0.0) - ys.at(size),
        );
    }
    if o.with_axes {
        // Band names (record_function scopes), on the band where they fit, at the plot's top.
        if r.axis == Axis::Time {
            g.set_font("11px sans-serif");
            g.set_fill_style_str(&ink(Ink::Label));
            let mut taken = f64::MIN;
            for a in &r.annotations {
                let (x0, x1) = (
                    xs.at(a.start_us as f64).max(left),
                    xs.at(a.end_us as f64).min(right),
                );
                let name = if a.count > 1 {
                    format!("{} ×{}", a.name, a.count)
                } else {
                    a.name.clone()
                };
                let tw = g.measure_text(&name).map(|m| m.width()).unwrap_or(f64::MAX);
                if x1 - x0 >= tw + 4.0 && x0 >= taken {
                    let _ = g.fill_text(&name, x0 + 2.0, top + 11.0);
                    taken = x0 + tw + 6.0;
                }
            }
        }
        g.set_fill_style_str(&ink(Ink::Text));
        g.set_font("12px sans-serif");
        byte_grid(g, ys, left, right, 4);
        if let Some(s) = o.steps {
            // Step boundaries, faint, under the curves' labels.
            g.set_fill_style_str("rgba(47, 158, 68, 0.6)");
            for (x, _) in steps_in_view(s, r.axis, xs.d0, xs.d1) {
                g.fill_rect(xs.at(x), top, 1.0, plot_h);
            }
            g.set_fill_style_str(&ink(Ink::Text));
        }
        // Ticks: seven even ones, or with steps as the axis the step starts in view (at most
        // seven of them, evenly picked), each named by its step.
        let ticks: Vec<(f64, String)> = match o.steps {
            Some(s) => {
                let marks = steps_in_view(s, r.axis, xs.d0, xs.d1);
                let every = marks.len().div_ceil(7).max(1);
                marks
                    .into_iter()
                    .step_by(every)
                    .map(|(x, n)| (x, format!("step {n}")))
                    .collect()
            }
            None => (0..=6)
                .map(|i| {
                    let x = xs.d0 + (xs.d1 - xs.d0) * i as f64 / 6.0;
                    let label = match r.axis {
                        Axis::Time => fmt::seconds(x - r.first_time_us as f64),
                        Axis::Event => format!("event {}", x as u64),
                    };
                    (x, label)
                })
                .collect(),
        };
        let mut taken = f64::MIN;
        for (x, label) in ticks {
            // Centred under its tick, kept inside the canvas at both ends (never clipped); a
            // label that would run into the one before it is left out (steps close together).
            let tw = g.measure_text(&label).map(|m| m.width()).unwrap_or(40.0);
            let lx = (xs.at(x) - tw / 2.0).clamp(2.0, w - tw - 2.0);
            if lx < taken + 6.0 {
                continue;
            }
            taken = lx + tw;
            let _ = g.fill_text(&label, lx, h - 6.0);
        }
        g.set_fill_style_str("#4c6ef5");
        g.fill_rect(left, 4.0, 10.0, 10.0);
        g.set_fill_style_str(&ink(Ink::Text));
        let _ = g.fill_text(
            if o.categories.is_some() {
                "live: stacked by category at each bucket's highest (legend above)"
            } else {
                "live: allocations stacked by age (the largest in view), the rest shaded"
            },
            left + 14.0,
            13.0,
        );
        g.set_fill_style_str(&ink(Ink::Reserved));
        g.fill_rect(left + 440.0, 4.0, 10.0, 10.0);
        g.set_fill_style_str(&ink(Ink::Text));
        let _ = g.fill_text("reserved", left + 454.0, 13.0);
        if o.simulated.is_some() {
            g.set_fill_style_str("#1971c2");
            g.fill_rect(left + 520.0, 4.0, 10.0, 10.0);
            g.set_fill_style_str(&ink(Ink::Text));
            let _ = g.fill_text(
                "reserved under the what-if setting (simulated)",
                left + 534.0,
                13.0,
            );
        }
    }
    if o.with_axes {
        draw_idle(g, r, xs, (top, plot_h));
    }
    if let Some((a, bx)) = o.brush {
        g.set_fill_style_str(&ink(Ink::Brush));
        g.fill_rect(xs.at(a), 0.0, (xs.at(bx) - xs.at(a)).max(2.0), h);
    }
}

/// The window's query for a chart `width` CSS pixels wide: a bucket a pixel of its plot.
fn window_query(url: UrlState, width: f64) -> ::api::TimelineQuery {
    let window = url.window();
    ::api::TimelineQuery {
        device: url.device(),
        axis: url.axis(),
        from: window.map(|w| w.0),
        to: window.map(|w| w.1),
        buckets: Some((width - LEFT) as usize),
        allocations: Some(3000),
        categories: (url.get("by").as_deref() == Some("category")).then_some(true),
    }
}

/// The whole trace's query, for the minimap: it changes with the device and the axis only.
fn whole_query(url: UrlState) -> ::api::TimelineQuery {
    ::api::TimelineQuery {
        device: url.device(),
        axis: url.axis(),
        buckets: Some(600),
        allocations: Some(0),
        ..Default::default()
    }
}

/// Begins the chart's two first requests as the snapshot's page opens on its timeline: the
/// view is made once the page's report has come, and its requests then followed the report's
/// instead of overlapping it (after an upload, ~30 ms between the report's answer and the
/// timeline's requests, bench/README.md issue 41). The chart's own requests take the answers
/// (same URLs: the width is the content column's, the same before and after).
pub fn prefetch(url: UrlState) {
    let id = url.id.get_untracked();
    if crate::local::is_local(&id) {
        return;
    }
    let width = crate::canvas::content_width(600.0, W);
    let queries = untrack(|| [window_query(url, width), whole_query(url)]);
    for q in queries {
        api::prefetch(::api::routes::timeline(&id, &q));
    }
}

/// The hovered point: its css x, the moment under it on the axis, its bucket, the allocation.
type Hover = (f64, f64, Bucket, Option<Alloc>);

/// What the timeline's parts share: the URL, the server's answers and what the pointer has done
/// (every field a copyable reactive handle, so each part takes the whole by value).
#[derive(Clone, Copy)]
struct Chart {
    url: UrlState,
    steps: StoredValue<Option<::api::Steps>>,
    survived: StoredValue<Vec<u32>>,
    has_steps: bool,
    canvas: NodeRef<Canvas>,
    mini: NodeRef<Canvas>,
    hidden: Memo<Vec<Category>>,
    /// The window shown, and the whole trace for the minimap.
    data: LocalResource<Result<Resp, String>>,
    overview: LocalResource<Result<Resp, String>>,
    /// A what-if setting (`conf`, from the What if tab): its simulated reserved memory, per bucket.
    whatif: LocalResource<Option<(String, ::api::WhatIf)>>,
    simulated: Memo<Option<Vec<Option<u64>>>>,
    hover: RwSignal<Option<Hover>>,
    pinned: RwSignal<Option<Alloc>>,
    drag: StoredValue<Option<f64>>,
    filter: RwSignal<String>,
    mini_drag: RwSignal<Option<f64>>,
    bands: Memo<Option<Layout>>,
    /// The chart's width in CSS pixels: the content column's when the view mounts.
    width: f64,
}

impl Chart {
    fn new(steps: Option<::api::Steps>, mut survived: Vec<u32>) -> Chart {
        survived.sort_unstable();
        let url: UrlState = expect_context();
        let has_steps = steps.is_some();
        let width = crate::canvas::content_width(600.0, W);
        let window = Memo::new(move |_| window_query(url, width));
        let data = LocalResource::new(move || {
            let (id, q) = (url.id.get(), window.get());
            async move { api::timeline(&id, &q).await }
        });
        // The whole trace changes with the device and the axis only: a Memo, so that a zoom or a
        // pan (the address's other keys) does not fetch it again.
        let whole = Memo::new(move |_| whole_query(url));
        let overview = LocalResource::new(move || {
            let (id, q) = (url.id.get(), whole.get());
            async move { api::timeline(&id, &q).await }
        });
        let whatif = LocalResource::new(move || {
            let id = url.id.get();
            let conf = url.get("conf");
            let q = super::whatif::query(url, conf.clone(), true);
            async move {
                let conf = conf?;
                snapshot::analysis::whatif::conf::AllocConf::parse(&conf).ok()?;
                api::whatif(&id, &q).await.ok().map(|w| (conf, w))
            }
        });
        let simulated = Memo::new(move |_| {
            let d = data.get()?.ok()?;
            let (conf, w) = whatif.get().flatten()?;
            let run = w.runs.iter().find(|r| r.alloc_conf == conf)?;
            Some(
                d.timeline
                    .buckets
                    .iter()
                    .map(|k| super::whatif::simulated_in(run, k.first, k.last))
                    .collect::<Vec<_>>(),
            )
        });
        Chart {
            url,
            steps: StoredValue::new(steps),
            survived: StoredValue::new(survived),
            has_steps,
            canvas: NodeRef::new(),
            mini: NodeRef::new(),
            hidden: Memo::new(move |_| crate::categories::parse_hidden(url.get("hide"))),
            data,
            overview,
            whatif,
            simulated,
            hover: RwSignal::new(None),
            pinned: RwSignal::new(None),
            drag: StoredValue::new(None),
            filter: RwSignal::new(url.get("filter").unwrap_or_default()),
            mini_drag: RwSignal::new(None),
            bands: Memo::new(move |_| data.get().and_then(|d| d.ok()).map(|d| layout(&d))),
            width,
        }
    }

    /// Steps as the axis: asked for in the URL, and only where the trace has steps.
    fn step_axis(self) -> bool {
        self.has_steps && self.url.get("steps").as_deref() == Some("1")
    }

    fn by_category(self) -> bool {
        self.url.get("by").as_deref() == Some("category")
    }

    /// The window's answer, when it has come.
    fn answer(self) -> Option<Resp> {
        self.data.get().and_then(|d| d.ok())
    }

    /// Draws the chart whenever data, hover or pin change, and the minimap with its brush.
    fn draw_on_change(self) {
        // The tooltip names what was under the pointer in the answer drawn. A new answer (a zoom,
        // a pan) moves what is there, so the tooltip goes until the pointer moves again.
        Effect::watch(
            move || self.data.track(),
            move |_, _, _| self.hover.set(None),
            false,
        );
        Effect::new(move |_| {
            let (Some(Ok(r)), Some(c)) = (self.data.get(), self.canvas.get()) else {
                return;
            };
            let hl = self
                .pinned
                .get()
                .or_else(|| self.hover.get().and_then(|h| h.3));
            let hidden_now = self.hidden.get();
            let needle = self.filter.get().to_lowercase();
            let sim = self.simulated.get();
            draw(
                &c,
                &r,
                H,
                Overlay {
                    bands: self.bands.get().as_ref(),
                    with_axes: true,
                    brush: None,
                    highlight: hl.as_ref(),
                    filter: &needle,
                    simulated: sim.as_deref(),
                    steps: self
                        .step_axis()
                        .then(|| self.steps.get_value())
                        .flatten()
                        .as_ref(),
                    survived: &self.survived.get_value(),
                    categories: r.categories.as_deref().map(|c| (c, &hidden_now[..])),
                },
            );
        });
        Effect::new(move |_| {
            let (Some(Ok(o)), Some(c)) = (self.overview.get(), self.mini.get()) else {
                return;
            };
            let brush = self.answer().map(|d| {
                let (a, z) = (d.timeline.x_from, d.timeline.x_to);
                // While the brush is dragged, draw it where the pointer is.
                match self.mini_drag.get() {
                    Some(f) => {
                        let (o0, o1) = (o.timeline.x_from, o.timeline.x_to);
                        let at = o0 + (o1 - o0) * f;
                        (at - (z - a) / 2.0, at + (z - a) / 2.0)
                    }
                    None => (a, z),
                }
            });
            draw(
                &c,
                &o,
                MINI_H,
                Overlay {
                    bands: None,
                    with_axes: false,
                    brush,
                    highlight: None,
                    filter: "",
                    simulated: None,
                    steps: None,
                    survived: &self.survived.get_value(),
                    categories: None,
                },
            );
        });
    }

    /// Canvas x (css px) → fraction of the plot.
    fn frac(self, ev: &web_sys::MouseEvent) -> Option<f64> {
        let c = self.canvas.get()?;
        let (x, _) = pointer(&c, ev);
        Some(((x - LEFT) / (logical_size(&c).0 - LEFT - 10.0)).clamp(0.0, 1.0))
    }

    /// The window last asked for, on its axis: the URL's, which the last key, wheel turn or drag
    /// set and which may not be drawn yet, else the whole trace. Keys pressed faster than the
    /// server answers build on each other: read from the window drawn, a second `+` before the
    /// first one's answer zoomed the same window again and was lost.
    fn span(self) -> Option<(f64, f64, Axis)> {
        let (w0, w1, axis) = self.whole_on_axis()?;
        let (a, b) = self.url.window_now().unwrap_or((w0, w1));
        Some((a, b, axis))
    }

    fn set_window(self, a: f64, b: f64, axis: Axis) {
        self.url.set(&[
            ("from", Some(format!("{a:.0}"))),
            ("to", Some(format!("{b:.0}"))),
            ("axis", Some(axis.as_str().to_string())),
        ]);
    }

    /// The whole trace, on the window's axis.
    fn whole(self) -> Option<(f64, f64)> {
        self.whole_on_axis().map(|(w0, w1, _)| (w0, w1))
    }

    /// The whole trace and its axis: the URL's axis, else the server's choice. `None` while
    /// the whole trace on a newly chosen axis is on its way (the one at hand is on the other).
    fn whole_on_axis(self) -> Option<(f64, f64, Axis)> {
        let o = self.overview.get_untracked()?.ok()?;
        let asked = self.url.axis_now();
        (asked.is_none_or(|a| a == o.axis)).then_some((o.timeline.x_from, o.timeline.x_to, o.axis))
    }

    /// A window of the same width moved by `by` of it, kept inside the trace.
    fn pan(self, by: f64) {
        let (Some((x0, x1, axis)), Some((w0, w1))) = (self.span(), self.whole()) else {
            return;
        };
        let width = x1 - x0;
        let a = (x0 + width * by).clamp(w0, (w1 - width).max(w0));
        self.set_window(a, a + width, axis);
    }

    /// Zoom around the window's middle by `scale` (< 1 in), never past the whole trace.
    fn zoom(self, scale: f64) {
        let (Some((x0, x1, axis)), Some((w0, w1))) = (self.span(), self.whole()) else {
            return;
        };
        let (mid, half) = ((x0 + x1) / 2.0, (x1 - x0) * scale / 2.0);
        if 2.0 * half < MIN_SPAN[axis as usize] {
            return;
        }
        if 2.0 * half >= w1 - w0 {
            self.url.set(&[("from", None), ("to", None)]);
            return;
        }
        let a = (mid - half).clamp(w0, w1 - 2.0 * half);
        self.set_window(a, a + 2.0 * half, axis);
    }

    /// The window centred on the next (`forward`) or previous mark, as wide as now but at most a
    /// quarter of the trace.
    fn to_mark(self, marks: &[Mark], forward: bool) {
        let (Some((x0, x1, axis)), Some((w0, w1))) = (self.span(), self.whole()) else {
            return;
        };
        let at = |m: &Mark| match axis {
            Axis::Time => m.time_us as f64,
            Axis::Event => m.position as f64,
        };
        let mid = (x0 + x1) / 2.0;
        // Within a hundredth of the window counts as "here": the next press moves on.
        let near = (x1 - x0) / 100.0;
        let mut xs: Vec<f64> = marks.iter().map(at).collect();
        xs.sort_by(f64::total_cmp);
        let target = if forward {
            xs.into_iter().find(|&x| x > mid + near)
        } else {
            xs.into_iter().rev().find(|&x| x < mid - near)
        };
        let Some(x) = target else { return };
        let width = (x1 - x0).min((w1 - w0) / 4.0).max(MIN_SPAN[axis as usize]);
        self.set_window(x - width / 2.0, x + width / 2.0, axis);
    }

    /// The timeline's keys (the help overlay lists them); true when the key was one of them.
    fn on_key(self, ev: &web_sys::KeyboardEvent, marks: &[Mark]) -> bool {
        match ev.key().as_str() {
            "ArrowLeft" => self.pan(if ev.shift_key() { -1.0 } else { -0.25 }),
            "ArrowRight" => self.pan(if ev.shift_key() { 1.0 } else { 0.25 }),
            "+" | "=" => self.zoom(0.5),
            "-" | "_" => self.zoom(2.0),
            "0" => self.url.set(&[("from", None), ("to", None)]),
            "n" => self.to_mark(marks, true),
            "p" => self.to_mark(marks, false),
            "Escape" => self.pinned.set(None),
            _ => return false,
        }
        true
    }

    /// The wheel zooms: the moment under the pointer stays under it, both sides scale around it.
    fn on_wheel(self, ev: web_sys::WheelEvent) {
        ev.prevent_default();
        let (Some(f), Some((x0, x1, axis))) = (self.frac(&ev), self.span()) else {
            return;
        };
        let scale = if ev.delta_y() < 0.0 { 0.7 } else { 1.0 / 0.7 };
        let at = x0 + (x1 - x0) * f;
        let (a, b) = (at - (at - x0) * scale, at + (x1 - at) * scale);
        if b - a >= MIN_SPAN[axis as usize] {
            self.set_window(a, b, axis);
        }
    }

    /// The pointer moves: the moment under it, its bucket, and the allocation shown.
    fn on_move(self, ev: web_sys::MouseEvent) {
        let (Some(f), Some(Ok(d))) = (self.frac(&ev), self.data.get_untracked()) else {
            return;
        };
        // The moment under the pointer on the axis shown, and the bucket that holds it.
        let at = d.timeline.x_from + (d.timeline.x_to - d.timeline.x_from) * f;
        let Some(i) = d.bucket_at(at) else {
            return;
        };
        let bucket = d.timeline.buckets[i].clone();
        let p = bucket.last;
        // The band under the cursor, else the largest allocation alive there.
        let value = self.canvas.get_untracked().and_then(|c| {
            let (_, y) = pointer(&c, &ev);
            let (_, ys) = scales(&d, logical_size(&c).0, H, true)?;
            Some(ys.inv(y))
        });
        let under = value
            .zip(self.bands.get_untracked())
            .and_then(|(v, lay)| lay.under(&d, i, v))
            .map(|k| d.allocations[k].clone());
        let top = under.or_else(|| {
            d.allocations
                .iter()
                .filter(|a| a.alive_at(p))
                .max_by_key(|a| a.size_bytes)
                .cloned()
        });
        let x = ev.offset_x() as f64;
        self.hover.set(Some((x, at, bucket, top)));
    }

    /// A release after a press: a click pins (or unpins) the allocation under the cursor, a drag
    /// pans.
    fn on_up(self, ev: web_sys::MouseEvent) {
        let (Some(start), Some(end), Some((x0, x1, axis))) =
            (self.drag.get_value(), self.frac(&ev), self.span())
        else {
            return;
        };
        self.drag.set_value(None);
        if (end - start).abs() < 0.005 {
            self.pinned.set(if self.pinned.get_untracked().is_some() {
                None
            } else {
                self.hover.get_untracked().and_then(|h| h.3)
            });
            return;
        }
        let shift = (start - end) * (x1 - x0);
        self.set_window(x0 + shift, x1 + shift, axis);
    }

    fn mini_frac(self, ev: &web_sys::MouseEvent) -> Option<f64> {
        let rect = self.mini.get()?.get_bounding_client_rect();
        Some(((ev.client_x() as f64 - rect.left()) / rect.width()).clamp(0.0, 1.0))
    }

    /// The minimap's brush released (a click moves it too): the window follows.
    fn on_mini_up(self, ev: web_sys::MouseEvent) {
        self.mini_drag.set(None);
        let (Some(f), Some(Ok(o)), Some((x0, x1, axis))) = (
            self.mini_frac(&ev),
            self.overview.get_untracked(),
            self.span(),
        ) else {
            return;
        };
        let (o0, o1) = (o.timeline.x_from, o.timeline.x_to);
        let at = o0 + (o1 - o0) * f;
        let half = (x1 - x0) / 2.0;
        self.set_window(at - half, at + half, axis);
    }

    /// The allocation's stack as sent (user frames first, noise already left out).
    fn stack_text(self, a: &Alloc) -> Vec<String> {
        self.data
            .get_untracked()
            .and_then(|d| d.ok())
            .and_then(|d| d.stacks.get(&a.stack).cloned())
            .map(|fr| fr.iter().map(::api::Frame::short).collect())
            .unwrap_or_default()
    }

    fn shown_width(self) -> f64 {
        self.canvas
            .get_untracked()
            .map_or(self.width, |c| c.get_bounding_client_rect().width())
    }
}

/// A moment `n` and `p` move to: an OOM, or a leak suspect's last allocation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Mark {
    pub position: u32,
    pub time_us: i64,
}

#[component]
pub fn TimelineView(
    steps: Option<::api::Steps>,
    survived: Vec<u32>,
    /// Where `n` and `p` go.
    marks: Vec<Mark>,
) -> impl IntoView {
    let c = Chart::new(steps, survived);
    c.draw_on_change();
    crate::pages::help::on_shortcut(move |ev| c.on_key(ev, &marks));
    view! {
        <section class="timeline">
            {toolbar(c)}
            {category_legend(c)}
            {fitted_note(c)}
            {idle_note(c)}
            {whatif_note(c)}
            <div class="chart">
                <canvas
                    id="timeline-canvas"
                    node_ref=c.canvas
                    width=c.width as u32
                    height=H as u32
                    on:wheel=move |ev| c.on_wheel(ev)
                    on:mousemove=move |ev| c.on_move(ev)
                    on:mousedown=move |ev| c.drag.set_value(c.frac(&ev))
                    on:mouseup=move |ev| c.on_up(ev)
                    on:mouseleave=move |_| c.hover.set(None)
                ></canvas>
                {move || c.hover.get().map(|h| tooltip(c, h))}
            </div>
            // Under the chart, on its axis: where memory is made in the window shown.
            {density_strip(c)}
            // Press, drag and release the brush: the window follows on release.
            <canvas
                id="minimap"
                class="minimap"
                node_ref=c.mini
                width=c.width as u32
                height=MINI_H as u32
                on:mousedown=move |ev| c.mini_drag.set(c.mini_frac(&ev))
                on:mousemove=move |ev| {
                    if c.mini_drag.get_untracked().is_some() {
                        c.mini_drag.set(c.mini_frac(&ev));
                    }
                }
                on:mouseup=move |ev| c.on_mini_up(ev)
                on:mouseleave=move |_| c.mini_drag.set(None)
            ></canvas>
            {move || c.pinned.get().map(|a| pinned(c, a))}
            <h3>"Largest allocations in this window"</h3>
            {move || largest_allocations(c)}
        </section>
    }
}

/// Zoom reset, the axis, by category, the step axis, the filter and what is shown.
fn toolbar(c: Chart) -> impl IntoView {
    let url = c.url;
    view! {
        <div class="toolbar">
            <button on:click=move |_| url.set(&[("from", None), ("to", None)])>"reset zoom"</button>
            <button on:click=move |_| {
                let axis = if url.axis() == Some(Axis::Event) { "time" } else { "event" };
                url.set(&[("axis", Some(axis.into())), ("from", None), ("to", None)]);
            }>
                {move || if url.axis() == Some(Axis::Event) { "use time axis" } else { "use event axis" }}
            </button>
            <button
                class="by-category"
                on:click=move |_| url.set(&[("by", (!c.by_category()).then(|| "category".to_string()))])
            >
                {move || if c.by_category() { "by allocation" } else { "by category" }}
            </button>
            {c.has_steps.then(|| view! {
                <button
                    class="step-axis"
                    on:click=move |_| url.set(&[("steps", (!c.step_axis()).then(|| "1".to_string()))])
                >
                    {move || if c.step_axis() { "hide steps" } else { "use step axis" }}
                </button>
            })}
            <input
                class="filter"
                type="search"
                placeholder="filter allocations by frame or file text"
                prop:value=move || c.filter.get()
                on:input=move |ev| c.filter.set(event_target_value(&ev))
            />
            <span class="summary">{move || c.answer().map(|d| shown_summary(c, &d))}</span>
        </div>
    }
}

/// "events A–B of N", with the steps they span on the step axis.
fn shown_summary(c: Chart, d: &Resp) -> String {
    let steps = c
        .steps
        .with_value(|s| match s.as_ref().filter(|_| c.step_axis()) {
            Some(s) => match (
                s.number_at(d.timeline.first_position),
                s.number_at(d.timeline.last_position.saturating_sub(1)),
            ) {
                (Some(a), Some(b)) => {
                    format!(" · steps {a}–{b} of {} ({})", s.numbers.len(), s.name)
                }
                _ => format!(" · {} steps ({})", s.numbers.len(), s.name),
            },
            None => String::new(),
        });
    format!(
        "events {}–{} of {}{steps}",
        d.timeline.first_position, d.timeline.last_position, d.timeline.events,
    )
}

/// By category: a chip per category with its bytes at the cursor (else at the highest bucket in
/// view); a click hides or shows it.
fn category_legend(c: Chart) -> impl IntoView {
    move || {
        if !c.by_category() {
            return None;
        }
        let d = c.answer()?;
        let cats = d.categories.clone()?;
        let hovered = c
            .hover
            .get()
            .and_then(|h| d.timeline.buckets.iter().position(|b| b.first == h.2.first));
        let highest = d
            .timeline
            .buckets
            .iter()
            .enumerate()
            .max_by_key(|(_, b)| b.live_max_bytes)
            .map(|(i, _)| i)?;
        let shown = cats
            .get(hovered.unwrap_or(highest))
            .copied()
            .unwrap_or_default();
        let hidden_now = c.hidden.get();
        let chips = Category::ALL
            .into_iter()
            .filter(|&k| cats.iter().any(|b| b.get(k) > 0))
            .map(|k| {
                let off = hidden_now.contains(&k);
                let next = crate::categories::toggled(&hidden_now, k);
                view! {
                    <button
                        class=if off { "chip off" } else { "chip" }
                        data-category=k.as_str()
                        title=if off { "show" } else { "hide" }
                        on:click=move |_| c.url.set(&[("hide", next.clone())])
                    >
                        <span class="swatch" style=format!("background:{}", crate::categories::colour(k))></span>
                        {format!("{} {}", k.words(), fmt::bytes(shown.get(k)))}
                    </button>
                }
            })
            .collect_view();
        Some(view! {
            <div class="category-legend">
                <span class="at">{if hovered.is_some() { "at the cursor:" } else { "at the highest in view:" }}</span>
                {chips}
            </div>
        })
    }
}

/// When the server fitted the view to where memory changes: what it left out, and a way back.
/// Idle stretches inside the window: how many and how long, shaded on the time axis; "fold" shows
/// the same window by event, where idle time takes no room and each stretch is a marked break.
fn idle_note(c: Chart) -> impl IntoView {
    move || {
        let d = c.answer()?;
        let idle = idle_stretches(&d);
        if idle.is_empty() {
            return None;
        }
        let total: i64 = idle.iter().map(|s| s.2).sum();
        let n = idle.len();
        let (first, last) = (d.timeline.first_position, d.timeline.last_position);
        let time = d.axis == Axis::Time;
        Some(view! {
            <p class="idle-note">
                {if time {
                    format!(
                        "{n} idle {} in view ({} with no event, shaded). ",
                        if n == 1 { "stretch" } else { "stretches" },
                        fmt::seconds(total as f64)
                    )
                } else {
                    format!(
                        "Idle time folded: {n} {} ({} with no event) marked where {} were. ",
                        if n == 1 { "break" } else { "breaks" },
                        fmt::seconds(total as f64),
                        if n == 1 { "it" } else { "they" }
                    )
                }}
                {time.then(|| view! {
                    <button
                        class="fold-idle"
                        on:click=move |_| {
                            // The same events, by event index: idle time takes no room.
                            c.url.set(&[
                                ("axis", Some("event".into())),
                                ("from", Some(first.to_string())),
                                ("to", Some(last.to_string())),
                            ]);
                        }
                    >
                        "fold idle time"
                    </button>
                })}
            </p>
        })
    }
}

fn fitted_note(c: Chart) -> impl IntoView {
    move || {
        let d = c.answer()?;
        let f = d.fitted?;
        let (first, last) = (d.first_time_us, d.last_time_us);
        let left_out = |events: u32, idle_us: i64, side: &str| {
            (idle_us > 0).then(|| {
                format!(
                    "{} events {side} a {} gap with no event",
                    fmt::count(events as u64),
                    fmt::seconds(idle_us as f64)
                )
            })
        };
        let parts: Vec<String> = [
            left_out(f.events_before, f.idle_before_us, "before"),
            left_out(f.events_after, f.idle_after_us, "after"),
        ]
        .into_iter()
        .flatten()
        .collect();
        Some(view! {
            <p class="fitted">
                {format!(
                    "Fitted to where memory changes, every peak in view: the {} left out. ",
                    parts.join(" and ")
                )}
                <button
                    class="whole-trace"
                    on:click=move |_| c.url.set(&[
                        ("axis", Some("time".into())),
                        ("from", Some(first.to_string())),
                        ("to", Some(last.to_string())),
                    ])
                >
                    "show the whole trace"
                </button>
            </p>
        })
    }
}

/// The what-if setting drawn dashed, what it is, and the way to its tab.
fn whatif_note(c: Chart) -> impl IntoView {
    move || {
        c.whatif.get().flatten().map(|(conf, w)| {
            let exact = if w.replay_check.exact {
                "the replay check is exact"
            } else {
                "the replay check is not exact: an estimate"
            };
            let back = c.url.href(&[
                ("view", "whatif".to_string()),
                ("device", w.device.to_string()),
                ("conf", conf.clone()),
            ]);
            view! {
                <p class="whatif-overlay">
                    {format!(
                        "Dashed: reserved memory under {}, simulated (the trace replayed through memscope's model of PyTorch's allocator; {exact}). ",
                        super::whatif::conf_name(&conf)
                    )}
                    <a href=back>"the What if tab"</a>
                    " · "
                    <button class="hide-whatif" on:click=move |_| c.url.set(&[("conf", None)])>"hide"</button>
                </p>
            }
        })
    }
}

/// The figures at the hovered moment, beside the pointer on the side with room (so it never
/// hides what is hovered): the moment, live and reserved bytes, by category, the what-if's
/// figure, the scopes it falls in, and the allocation under the cursor with its first frames.
fn tooltip(c: Chart, (x, at, b, top): Hover) -> impl IntoView {
    let d = c.data.get_untracked().and_then(|d| d.ok());
    let t0 = d.as_ref().map_or(0, |d| d.first_time_us);
    let axis = d.as_ref().map_or(Axis::Time, |d| d.axis);
    let categories = d.as_ref().and_then(|d| {
        let k = d.timeline.buckets.iter().position(|x| x.first == b.first)?;
        d.categories.as_ref()?.get(k).copied()
    });
    let simulated = c.whatif.get_untracked().flatten().map(|(conf, w)| {
        let run = w.runs.iter().find(|r| r.alloc_conf == conf);
        let v = run.map(|r| {
            super::whatif::simulated_in(r, b.first, b.last)
                .map_or("out of memory".to_string(), fmt::bytes)
        });
        format!(
            "{}: {} (simulated)",
            super::whatif::conf_name(&conf),
            v.unwrap_or_default()
        )
    });
    // The record_function scopes the moment falls in, innermost last.
    let scopes: Vec<String> = d
        .as_ref()
        .filter(|d| d.axis == Axis::Time)
        .map(|d| {
            d.annotations
                .iter()
                .filter(|a| (a.start_us as f64) <= at && at <= a.end_us as f64)
                .map(|a| a.name.clone())
                .collect()
        })
        .unwrap_or_default();
    view! {
        <div class="tooltip" style=format!("left:{}px", tooltip_left(x, c.shown_width()))>
            <div>{match axis {
                Axis::Time => format!("t = {}  (events {}–{})", fmt::seconds(at - t0 as f64), b.first, b.last),
                Axis::Event => format!("after event {:.0}  (events {}–{})", at, b.first, b.last),
            }}</div>
            <div>{format!("live {} – {}", fmt::bytes(b.live_min_bytes), fmt::bytes(b.live_max_bytes))}</div>
            <div>{format!("reserved {}", fmt::bytes(b.reserved_max_bytes))}</div>
            {categories.map(|k| view! { <div class="categories">{crate::categories::words(&k)}</div> })}
            {simulated.map(|s| view! { <div class="simulated">{s}</div> })}
            {(!scopes.is_empty()).then(|| view! {
                <div class="scopes">{format!("in {}", scopes.join(" › "))}</div>
            })}
            {top.map(|a| view! {
                <div class="alloc">
                    <b>{format!(
                        "allocation #{}: {}, {} → {}",
                        a.id,
                        fmt::bytes(a.size_bytes),
                        a.start.map_or("before the trace".into(), |s| format!("event {s}")),
                        a.end.map_or("alive at the end".into(), |e| format!("freed at event {e}")),
                    )}</b>
                    {hover_frames(c, &a)}
                </div>
            })}
        </div>
    }
}

/// Hovering shows the first frames, one line each; clicking pins the whole stack below.
fn hover_frames(c: Chart, a: &Alloc) -> impl IntoView + use<> {
    let frames = c.stack_text(a);
    let more = frames.len().saturating_sub(TOOLTIP_FRAMES);
    view! {
        <ol class="frames">
            {frames.into_iter().take(TOOLTIP_FRAMES).map(|f| { let title = f.clone(); view! { <li title=title>{f}</li> } }).collect_view()}
        </ol>
        {(more > 0).then(|| view! { <div class="more">{format!("+{more} more frames: click to pin")}</div> })}
    }
}

/// Height of the density strip under the chart, in CSS pixels.
const DENSITY_H: f64 = 22.0;

/// Where memory is made, every allocation counted (the buckets' `allocs`/`alloc_bytes`): a strip
/// under the chart, darker where more bytes were allocated in a pixel. It is what shows a trace
/// whose allocations each live shorter than a pixel (the bands then cover little of the live
/// memory, and a note says so); hover names a pixel's count and bytes.
fn density_strip(c: Chart) -> impl IntoView {
    let canvas = NodeRef::<Canvas>::new();
    let hover = RwSignal::new(None::<String>);
    Effect::new(move |_| {
        let (Some(r), Some(cv)) = (c.answer(), canvas.get()) else {
            return;
        };
        let w = logical_size(&cv).0;
        let g = sharp(&cv, w, DENSITY_H);
        g.set_fill_style_str(&ink(Ink::Paper));
        g.fill_rect(0.0, 0.0, w, DENSITY_H);
        let b = &r.timeline.buckets;
        let Some((xs, _)) = scales(&r, w, DENSITY_H, true) else {
            return;
        };
        let most = b.iter().map(|k| k.alloc_bytes).max().unwrap_or(0).max(1) as f64;
        for (i, k) in b.iter().enumerate() {
            if k.allocs == 0 {
                continue;
            }
            let (x0, x1) = (
                xs.at(r.bucket_x(k)),
                b.get(i + 1).map_or(xs.p1, |n| xs.at(r.bucket_x(n))),
            );
            // Log scale: a bucket with a thousandth of the most still shows.
            let shade = ((1.0 + k.alloc_bytes as f64).ln() / (1.0 + most).ln()).clamp(0.08, 1.0);
            g.set_fill_style_str(&format!("rgba(76, 110, 245, {shade:.3})"));
            g.fill_rect(x0, 2.0, (x1 - x0).max(1.0), DENSITY_H - 4.0);
        }
        g.set_fill_style_str(&ink(Ink::Muted));
        let _ = g.fill_text("made", 6.0, 15.0);
    });
    let on_move = move |ev: web_sys::MouseEvent| {
        let (Some(r), Some(cv)) = (c.answer(), canvas.get_untracked()) else {
            return;
        };
        // The chart's x scale: a pixel is the same moment in both.
        let (x, _) = pointer(&cv, &ev);
        let at = scales(&r, logical_size(&cv).0, DENSITY_H, true).map(|(xs, _)| xs.inv(x));
        let b = &r.timeline.buckets;
        hover.set(at.and_then(|at| r.bucket_at(at)).map(|i| {
            let k = &b[i];
            format!(
                "Here: {} {} made, {} requested.",
                fmt::count(k.allocs as u64),
                if k.allocs == 1 {
                    "allocation"
                } else {
                    "allocations"
                },
                fmt::bytes(k.alloc_bytes)
            )
        }));
    };
    view! {
        <canvas
            id="density"
            class="density"
            node_ref=canvas
            width=c.width as u32
            height=DENSITY_H as u32
            on:mousemove=on_move
            on:mouseleave=move |_| hover.set(None)
        ></canvas>
        <p class="density-note">
            {move || hover.get().unwrap_or_else(|| {
                let shown = c.answer().zip(c.bands.get()).map(|(r, lay)| lay.shown_at_peak(&r));
                if let Some(s) = shown.filter(|&s| s < 0.5) {
                    format!(
                        "At the highest point in view the bands show {:.0}% of live memory: the rest is in allocations too short-lived to draw one by one (narrower than a pixel). The strip shows where memory is made, every allocation counted (darker: more bytes per pixel); zoom in (wheel, +) to see them as bands.",
                        s * 100.0
                    )
                } else {
                    "The strip shows where memory is made: every allocation counted, darker where more bytes were allocated per pixel. Hover it for the figures.".to_string()
                }
            })}
        </p>
    }
}

/// The pinned allocation: its whole stack, and the allocator's state at that moment.
fn pinned(c: Chart, a: Alloc) -> impl IntoView {
    let frames = c.stack_text(&a);
    view! {
        <div class="pinned">
            <b>{format!("pinned allocation #{}: {}", a.id, fmt::bytes(a.size_bytes))}</b>
            " "
            <button
                class="to-segments"
                on:click=move |_| {
                    let pos = c.hover.get_untracked().map(|h| h.2.last).or(a.start.map(|s| s + 1)).unwrap_or(0);
                    // Selected there too: its block outlined, followed by identity.
                    c.url.set(&[
                        ("view", Some("segments".into())),
                        ("pos", Some(pos.to_string())),
                        ("sel", Some(a.id.to_string())),
                    ]);
                }
            >
                "allocator state at this moment"
            </button>
            <ol class="frames">{frames.into_iter().map(|f| view! { <li>{f}</li> }).collect_view()}</ol>
        </div>
    }
}

/// The 50 largest allocations in the window that the filter lets through.
fn largest_allocations(c: Chart) -> AnyView {
    match c.data.get() {
        None => view! { <p>"loading…"</p> }.into_any(),
        Some(Err(e)) => crate::pages::widgets::error_line(e).into_any(),
        Some(Ok(d)) => {
            let needle = c.filter.get().to_lowercase();
            let rows = d
                .allocations
                .iter()
                .filter(|a| d.stack_mentions(a.stack, &needle))
                .take(50)
                .map(|a| {
                    let site = ::api::site_text(d.sites.get(&a.stack).and_then(Option::as_ref));
                    view! {
                        <tr>
                            <td class="num">{fmt::bytes(a.size_bytes)}</td>
                            <td class="num">{a.start.map_or("before trace".into(), |s| s.to_string())}</td>
                            <td class="num">{a.end.map_or("alive".into(), |s| s.to_string())}</td>
                            <td>{site}</td>
                        </tr>
                    }
                })
                .collect_view();
            view! {
                <table class="allocs">
                    <tr>
                        <th>"size"</th>
                        <th>"alloc event"</th>
                        <th>"free event"</th>
                        <th>"call site"</th>
                    </tr>
                    {rows}
                </table>
            }
            .into_any()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_allocation_takes_the_reserved_lines_or_the_oom_markers_hue() {
        // The reserved line is ~22° (#e8590c), the OOM marker 0° (#c92a2a).
        for id in 0..100_000u32 {
            let h = stack_hue(::api::StackId(id));
            assert!((48..345).contains(&h), "stack {id}: hue {h}");
        }
        let hues: std::collections::HashSet<u32> = (0..2_000u32)
            .map(|id| stack_hue(::api::StackId(id)))
            .collect();
        assert!(
            hues.len() > 250,
            "stacks still spread over the wheel: {}",
            hues.len()
        );
    }
}
