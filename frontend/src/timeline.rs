//! The timeline: live (allocated) and reserved memory over real time (or event index), drawn on a
//! canvas from the server's reduced buckets; external annotations (e.g. `Optimizer.step`) as
//! bands and OOMs as markers. Wheel zooms around the cursor, drag pans, the minimap's brush
//! shows and sets the window, hover shows the figures and the largest live allocation with its
//! stack, click pins it. The window is kept in the URL.

use leptos::html::Canvas;
use leptos::prelude::*;
use serde::Deserialize;
use serde_json::Value;
use wasm_bindgen::JsCast;

use crate::snapshot::UrlState;
use crate::{api, fmt};

#[derive(Debug, Clone, Deserialize, PartialEq)]
struct Bucket {
    first: u32,
    last: u32,
    time_us: f64,
    live_min: f64,
    live_max: f64,
    reserved_min: f64,
    reserved_max: f64,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
struct Tl {
    events: u32,
    first_position: u32,
    last_position: u32,
    buckets: Vec<Bucket>,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
struct Alloc {
    id: u32,
    size: f64,
    start: Option<u32>,
    end: Option<u32>,
    start_time_us: Option<f64>,
    end_time_us: Option<f64>,
    stack: u32,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
struct Annotation {
    name: String,
    start_us: f64,
    end_us: f64,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
struct Marker {
    position: u32,
    time_us: f64,
    bytes: f64,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
struct Resp {
    axis: String,
    timeline: Tl,
    allocations: Vec<Alloc>,
    stacks: std::collections::BTreeMap<String, Vec<Value>>,
    sites: std::collections::BTreeMap<String, Value>,
    annotations: Vec<Annotation>,
    ooms: Vec<Marker>,
    first_time_us: f64,
    last_time_us: f64,
}

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

/// Every allocation in the response (the largest in the window, up to the server's limit) is
/// drawn as a band; bands stack in allocation order, oldest at the bottom, like PyTorch's Active
/// Memory Timeline. An allocation is alive over one contiguous run of buckets, so each band keeps
/// its lower edges for that run only.
struct Band {
    alloc: usize,
    first: usize,
    lower: Vec<f32>,
}

/// Bands of one response; compared by identity so a Memo recomputes only on new data.
#[derive(Clone)]
struct Layout(std::sync::Arc<Vec<Band>>);

impl PartialEq for Layout {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

fn layout(r: &Resp) -> Layout {
    let buckets = &r.timeline.buckets;
    let mut order: Vec<usize> = (0..r.allocations.len()).collect();
    order.sort_by_key(|&i| {
        (
            r.allocations[i].start.map_or(0, |s| s as i64 + 1),
            r.allocations[i].id,
        )
    });
    let mut acc = vec![0f64; buckets.len()];
    let mut bands = Vec::with_capacity(order.len());
    for i in order {
        let a = &r.allocations[i];
        // Alive in bucket b when start < b.last <= end.
        let first = a
            .start
            .map_or(0, |s| buckets.partition_point(|b| b.last <= s));
        let end = a
            .end
            .map_or(buckets.len(), |e| buckets.partition_point(|b| b.last <= e));
        if first >= end {
            continue;
        }
        let lower = acc[first..end].iter().map(|&x| x as f32).collect();
        for x in &mut acc[first..end] {
            *x += a.size;
        }
        bands.push(Band {
            alloc: i,
            first,
            lower,
        });
    }
    Layout(std::sync::Arc::new(bands))
}

/// A stable colour per stack.
fn colour(stack: u32) -> String {
    let h = (stack.wrapping_mul(2_654_435_761) >> 8) % 360;
    format!("hsl({h}, 60%, 62%)")
}

/// A canvas's 2D context (every canvas here has one).
pub(crate) fn ctx(c: &web_sys::HtmlCanvasElement) -> web_sys::CanvasRenderingContext2d {
    c.get_context("2d")
        .ok()
        .flatten()
        .expect("2d context")
        .unchecked_into()
}

/// x of a bucket's start on the chosen axis.
fn bucket_x(r: &Resp, b: &Bucket) -> f64 {
    if r.axis == "time" {
        b.time_us
    } else {
        b.first as f64
    }
}

#[allow(clippy::too_many_arguments)]
fn draw(
    c: &web_sys::HtmlCanvasElement,
    r: &Resp,
    bands: Option<&Layout>,
    height: f64,
    with_axes: bool,
    brush: Option<(f64, f64)>,
    highlight: Option<&Alloc>,
    filter: &str,
) {
    let g = ctx(c);
    let (w, h) = (c.width() as f64, height);
    g.set_fill_style_str("#ffffff");
    g.fill_rect(0.0, 0.0, w, h);
    let b = &r.timeline.buckets;
    if b.is_empty() {
        return;
    }
    let left = if with_axes { LEFT } else { 0.0 };
    let plot_w = w - left - 10.0;
    let top = if with_axes { 20.0 } else { 2.0 };
    let plot_h = h - top - if with_axes { 24.0 } else { 2.0 };
    let ymax = b
        .iter()
        .map(|x| x.reserved_max.max(x.live_max))
        .fold(1.0, f64::max)
        * 1.05;
    let (x0, x1) = (
        bucket_x(r, &b[0]),
        bucket_x(r, &b[b.len() - 1]).max(bucket_x(r, &b[0]) + 1.0),
    );
    let xs = |x: f64| left + (x - x0) / (x1 - x0) * plot_w;
    let ys = |y: f64| top + plot_h - y / ymax * plot_h;

    // Annotation bands (the server pairs START/END marks and merges what one bucket cannot tell apart).
    if r.axis == "time" {
        g.set_fill_style_str("rgba(120, 140, 255, 0.12)");
        for a in &r.annotations {
            g.fill_rect(
                xs(a.start_us),
                top,
                (xs(a.end_us) - xs(a.start_us)).max(1.0),
                plot_h,
            );
        }
    }
    // Live memory: min/max envelope per bucket, one path.
    g.begin_path();
    g.move_to(xs(bucket_x(r, &b[0])), ys(0.0));
    for (i, k) in b.iter().enumerate() {
        let x = xs(bucket_x(r, k));
        let xn = if i + 1 < b.len() {
            xs(bucket_x(r, &b[i + 1]))
        } else {
            left + plot_w
        };
        g.line_to(x, ys(k.live_max));
        g.line_to(xn, ys(k.live_max));
    }
    g.line_to(left + plot_w, ys(0.0));
    g.close_path();
    g.set_fill_style_str(if with_axes { "#d0d7f7" } else { "#4c6ef5" });
    g.fill();
    // Allocations as stacked bands on top of the envelope.
    if let Some(lay) = bands {
        let xe = |j: usize| {
            if j < b.len() {
                xs(bucket_x(r, &b[j]))
            } else {
                left + plot_w
            }
        };
        for band in lay.0.iter() {
            let a = &r.allocations[band.alloc];
            let matches = filter.is_empty()
                || r.stacks.get(&a.stack.to_string()).is_some_and(|fr| {
                    fr.iter()
                        .any(|f| fmt::frame(f).to_lowercase().contains(filter))
                });
            g.set_fill_style_str(&if matches {
                colour(a.stack)
            } else {
                "#e9ecef".to_string()
            });
            let last = band.first + band.lower.len();
            g.begin_path();
            g.move_to(xe(band.first), ys(band.lower[0] as f64));
            for j in band.first..last {
                let lo = band.lower[j - band.first] as f64;
                g.line_to(xe(j), ys(lo + a.size));
                g.line_to(xe(j + 1), ys(lo + a.size));
            }
            for j in (band.first..last).rev() {
                let lo = band.lower[j - band.first] as f64;
                g.line_to(xe(j + 1), ys(lo));
                g.line_to(xe(j), ys(lo));
            }
            g.close_path();
            g.fill();
        }
    }
    // Reserved: a line.
    g.begin_path();
    for (i, k) in b.iter().enumerate() {
        let x = xs(bucket_x(r, k));
        if i == 0 {
            g.move_to(x, ys(k.reserved_max));
        } else {
            g.line_to(x, ys(k.reserved_max));
        }
    }
    g.set_stroke_style_str("#e8590c");
    g.set_line_width(1.5);
    g.stroke();
    // OOM markers.
    for m in &r.ooms {
        let x = xs(if r.axis == "time" {
            m.time_us
        } else {
            m.position as f64
        });
        g.set_fill_style_str("#c92a2a");
        g.fill_rect(x - 1.0, top, 3.0, plot_h);
        if with_axes {
            let _ = g.fill_text("OOM", x + 3.0, top + 10.0);
        }
    }
    if let Some(a) = highlight {
        let (s, e) = if r.axis == "time" {
            (a.start_time_us.unwrap_or(x0), a.end_time_us.unwrap_or(x1))
        } else {
            (
                a.start.map_or(x0, |v| v as f64),
                a.end.map_or(x1, |v| v as f64),
            )
        };
        g.set_fill_style_str("rgba(250, 176, 5, 0.45)");
        g.fill_rect(
            xs(s),
            ys(a.size),
            (xs(e) - xs(s)).max(2.0),
            ys(0.0) - ys(a.size),
        );
    }
    if with_axes {
        g.set_fill_style_str("#333");
        g.set_font("12px sans-serif");
        for i in 0..=4 {
            let y = ymax * i as f64 / 4.0;
            let _ = g.fill_text(&fmt::bytes(y), 4.0, ys(y) + 4.0);
            g.set_fill_style_str("#eee");
            g.fill_rect(left, ys(y), plot_w, 1.0);
            g.set_fill_style_str("#333");
        }
        for i in 0..=6 {
            let x = x0 + (x1 - x0) * i as f64 / 6.0;
            let label = if r.axis == "time" {
                fmt::seconds(x - r.first_time_us)
            } else {
                format!("event {}", x as u64)
            };
            let _ = g.fill_text(&label, xs(x) - 20.0, h - 6.0);
        }
        g.set_fill_style_str("#4c6ef5");
        g.fill_rect(left, 4.0, 10.0, 10.0);
        g.set_fill_style_str("#333");
        let _ = g.fill_text(
            "live: allocations stacked by age (the largest in view), the rest shaded",
            left + 14.0,
            13.0,
        );
        g.set_fill_style_str("#e8590c");
        g.fill_rect(left + 440.0, 4.0, 10.0, 10.0);
        g.set_fill_style_str("#333");
        let _ = g.fill_text("reserved", left + 454.0, 13.0);
    }
    if let Some((a, bx)) = brush {
        g.set_fill_style_str("rgba(0,0,0,0.15)");
        g.fill_rect(xs(a), 0.0, (xs(bx) - xs(a)).max(2.0), h);
    }
}

#[component]
pub fn TimelineView(report: Value) -> impl IntoView {
    let _ = report;
    let url: UrlState = expect_context();
    let canvas = NodeRef::<Canvas>::new();
    let mini = NodeRef::<Canvas>::new();
    let window = Memo::new(move |_| (url.get_f64("from"), url.get_f64("to"), url.get("axis")));
    let data = LocalResource::new(move || {
        let (id, (from, to, axis), dq) = (url.id.get(), window.get(), url.device_query());
        async move {
            let mut q = format!("buckets={}&allocations=3000", (W - LEFT) as u32);
            if let (Some(a), Some(b)) = (from, to) {
                q += &format!("&from={a}&to={b}");
            }
            if let Some(ax) = axis {
                q += &format!("&axis={ax}");
            }
            q += &dq;
            api::get::<Resp>(&format!("/api/snapshots/{id}/timeline?{q}")).await
        }
    });
    let overview = LocalResource::new(move || {
        let (id, axis, dq) = (url.id.get(), url.get("axis"), url.device_query());
        async move {
            let q = axis.map(|a| format!("&axis={a}")).unwrap_or_default() + &dq;
            api::get::<Resp>(&format!(
                "/api/snapshots/{id}/timeline?buckets=600&allocations=0{q}"
            ))
            .await
        }
    });
    let hover = RwSignal::new(None::<(f64, Bucket, Option<Alloc>)>);
    let pinned = RwSignal::new(None::<Alloc>);
    let drag = StoredValue::new(None::<f64>);
    let filter = RwSignal::new(url.get("filter").unwrap_or_default());

    let mini_drag = RwSignal::new(None::<f64>);
    let bands = Memo::new(move |_| data.get().and_then(|d| d.ok()).map(|d| layout(&d)));
    // Draw whenever data, hover or pin change.
    Effect::new(move |_| {
        let (Some(Ok(r)), Some(c)) = (data.get(), canvas.get()) else {
            return;
        };
        let hl = pinned.get().or_else(|| hover.get().and_then(|h| h.2));
        let needle = filter.get().to_lowercase();
        draw(
            &c,
            &r,
            bands.get().as_ref(),
            H,
            true,
            None,
            hl.as_ref(),
            &needle,
        );
    });
    Effect::new(move |_| {
        let (Some(Ok(o)), Some(c)) = (overview.get(), mini.get()) else {
            return;
        };
        let brush = data.get().and_then(|d| d.ok()).map(|d| {
            let b = &d.timeline.buckets;
            let (a, z) = match (b.first(), b.last()) {
                (Some(f), Some(l)) => (bucket_x(&d, f), bucket_x(&d, l)),
                _ => (0.0, 0.0),
            };
            // While the brush is dragged, draw it where the pointer is.
            match (
                mini_drag.get(),
                o.timeline.buckets.first(),
                o.timeline.buckets.last(),
            ) {
                (Some(f), Some(first), Some(last)) => {
                    let (o0, o1) = (bucket_x(&o, first), bucket_x(&o, last));
                    let at = o0 + (o1 - o0) * f;
                    (at - (z - a) / 2.0, at + (z - a) / 2.0)
                }
                _ => (a, z),
            }
        });
        draw(&c, &o, None, MINI_H, false, brush, None, "");
    });

    // Canvas x (css px) → fraction of the plot.
    let frac = move |ev: &web_sys::MouseEvent| -> Option<f64> {
        let c = canvas.get()?;
        let rect = c.get_bounding_client_rect();
        let x = (ev.client_x() as f64 - rect.left()) * (c.width() as f64 / rect.width());
        Some(((x - LEFT) / (c.width() as f64 - LEFT - 10.0)).clamp(0.0, 1.0))
    };
    let span = move || -> Option<(f64, f64, String)> {
        let d = data.get_untracked()?.ok()?;
        let b = &d.timeline.buckets;
        Some((
            bucket_x(&d, b.first()?),
            bucket_x(&d, b.last()?),
            d.axis.clone(),
        ))
    };
    let set_window = move |a: f64, b: f64, axis: String| {
        url.set(&[
            ("from", Some(format!("{a:.0}"))),
            ("to", Some(format!("{b:.0}"))),
            ("axis", Some(axis)),
        ]);
    };
    let on_wheel = move |ev: web_sys::WheelEvent| {
        ev.prevent_default();
        let (Some(f), Some((x0, x1, axis))) = (frac(&ev), span()) else {
            return;
        };
        let scale = if ev.delta_y() < 0.0 { 0.7 } else { 1.0 / 0.7 };
        let at = x0 + (x1 - x0) * f;
        let (a, b) = (at - (at - x0) * scale, at + (x1 - at) * scale);
        set_window(a, b.max(a + 2.0), axis);
    };
    let on_move = move |ev: web_sys::MouseEvent| {
        let (Some(f), Some(Ok(d))) = (frac(&ev), data.get_untracked()) else {
            return;
        };
        let b = &d.timeline.buckets;
        if b.is_empty() {
            return;
        }
        let i = ((f * b.len() as f64) as usize).min(b.len() - 1);
        let bucket = b[i].clone();
        let p = bucket.last;
        // The band under the cursor, else the largest allocation alive there.
        let value = canvas.get_untracked().map(|c| {
            let rect = c.get_bounding_client_rect();
            let y = (ev.client_y() as f64 - rect.top()) * (c.height() as f64 / rect.height());
            let ymax = b
                .iter()
                .map(|x| x.reserved_max.max(x.live_max))
                .fold(1.0, f64::max)
                * 1.05;
            let (top, plot_h) = (20.0, H - 44.0);
            (top + plot_h - y) / plot_h * ymax
        });
        let under = value.zip(bands.get_untracked()).and_then(|(v, lay)| {
            lay.0.iter().find_map(|band| {
                let lo = *band.lower.get(i.checked_sub(band.first)?)? as f64;
                let a = &d.allocations[band.alloc];
                (v >= lo && v < lo + a.size).then(|| a.clone())
            })
        });
        let top = under.or_else(|| {
            d.allocations
                .iter()
                .filter(|a| a.start.is_none_or(|s| s < p) && a.end.is_none_or(|e| e >= p))
                .max_by(|x, y| x.size.total_cmp(&y.size))
                .cloned()
        });
        let x = ev.offset_x() as f64;
        hover.set(Some((x, bucket, top)));
    };
    let on_down = move |ev: web_sys::MouseEvent| drag.set_value(frac(&ev));
    let on_up = move |ev: web_sys::MouseEvent| {
        let (Some(start), Some(end), Some((x0, x1, axis))) = (drag.get_value(), frac(&ev), span())
        else {
            return;
        };
        drag.set_value(None);
        if (end - start).abs() < 0.005 {
            // A click: pin (or unpin) the allocation under the cursor.
            pinned.set(if pinned.get_untracked().is_some() {
                None
            } else {
                hover.get_untracked().and_then(|h| h.2)
            });
            return;
        }
        let shift = (start - end) * (x1 - x0);
        set_window(x0 + shift, x1 + shift, axis);
    };
    let mini_frac = move |ev: &web_sys::MouseEvent| -> Option<f64> {
        let rect = mini.get()?.get_bounding_client_rect();
        Some(((ev.client_x() as f64 - rect.left()) / rect.width()).clamp(0.0, 1.0))
    };
    // Press, drag and release the brush (a click moves it too): the window follows on release.
    let on_mini_down = move |ev: web_sys::MouseEvent| mini_drag.set(mini_frac(&ev));
    let on_mini_move = move |ev: web_sys::MouseEvent| {
        if mini_drag.get_untracked().is_some() {
            mini_drag.set(mini_frac(&ev));
        }
    };
    let on_mini = move |ev: web_sys::MouseEvent| {
        mini_drag.set(None);
        let (Some(f), Some(Ok(o)), Some((x0, x1, axis))) =
            (mini_frac(&ev), overview.get_untracked(), span())
        else {
            return;
        };
        let b = &o.timeline.buckets;
        let (Some(first), Some(last)) = (b.first(), b.last()) else {
            return;
        };
        let (o0, o1) = (bucket_x(&o, first), bucket_x(&o, last));
        let at = o0 + (o1 - o0) * f;
        let half = (x1 - x0) / 2.0;
        set_window(at - half, at + half, axis);
    };

    // The allocation's stack as sent (user frames first, noise already left out).
    let stack_text = move |a: &Alloc| -> Vec<String> {
        data.get_untracked()
            .and_then(|d| d.ok())
            .and_then(|d| d.stacks.get(&a.stack.to_string()).cloned())
            .map(|fr| fr.iter().map(fmt::frame).collect())
            .unwrap_or_default()
    };
    let shown_width = move || {
        canvas
            .get_untracked()
            .map_or(W, |c| c.get_bounding_client_rect().width())
    };
    // Hovering shows the first frames, one line each; clicking pins the whole stack below.
    let hover_frames = move |a: &Alloc| {
        let frames = stack_text(a);
        let more = frames.len().saturating_sub(TOOLTIP_FRAMES);
        view! {
            <ol class="frames">
                {frames.into_iter().take(TOOLTIP_FRAMES).map(|f| { let title = f.clone(); view! { <li title=title>{f}</li> } }).collect_view()}
            </ol>
            {(more > 0).then(|| view! { <div class="more">{format!("+{more} more frames: click to pin")}</div> })}
        }
    };

    view! {
        <section class="timeline">
            <div class="toolbar">
                <button on:click=move |_| url.set(&[("from", None), ("to", None)])>"reset zoom"</button>
                <button on:click=move |_| {
                    let axis = if url.get("axis").as_deref() == Some("event") { "time" } else { "event" };
                    url.set(&[("axis", Some(axis.into())), ("from", None), ("to", None)]);
                }>
                    {move || if url.get("axis").as_deref() == Some("event") { "use time axis" } else { "use event axis" }}
                </button>
                <input
                    class="filter"
                    type="search"
                    placeholder="filter allocations by frame or file text"
                    prop:value=move || filter.get()
                    on:input=move |ev| filter.set(event_target_value(&ev))
                />
                <span class="summary">
                    {move || data.get().and_then(|d| d.ok()).map(|d| format!(
                        "events {}–{} of {}",
                        d.timeline.first_position,
                        d.timeline.last_position,
                        d.timeline.events
                    ))}
                </span>
            </div>
            <div class="chart">
                <canvas
                    id="timeline-canvas"
                    node_ref=canvas
                    width=W as u32
                    height=H as u32
                    on:wheel=on_wheel
                    on:mousemove=on_move
                    on:mousedown=on_down
                    on:mouseup=on_up
                    on:mouseleave=move |_| hover.set(None)
                ></canvas>
                {move || hover.get().map(|(x, b, top)| {
                    let d = data.get_untracked().and_then(|d| d.ok());
                    let t0 = d.as_ref().map_or(0.0, |d| d.first_time_us);
                    view! {
                        // Beside the pointer, on the side with room, so it never hides what is hovered.
                        <div class="tooltip" style=format!("left:{}px", tooltip_left(x, shown_width()))>
                            <div>{format!("t = {}  (events {}–{})", fmt::seconds(b.time_us - t0), b.first, b.last)}</div>
                            <div>{format!("live {} – {}", fmt::bytes(b.live_min), fmt::bytes(b.live_max))}</div>
                            <div>{format!("reserved {}", fmt::bytes(b.reserved_max))}</div>
                            {top.map(|a| view! {
                                <div class="alloc">
                                    <b>{format!(
                                        "allocation #{}: {}, {} → {}",
                                        a.id,
                                        fmt::bytes(a.size),
                                        a.start.map_or("before the trace".into(), |s| format!("event {s}")),
                                        a.end.map_or("alive at the end".into(), |e| format!("freed at event {e}")),
                                    )}</b>
                                    {hover_frames(&a)}
                                </div>
                            })}
                        </div>
                    }
                })}
            </div>
            <canvas id="minimap" class="minimap" node_ref=mini width=W as u32 height=MINI_H as u32 on:mousedown=on_mini_down on:mousemove=on_mini_move on:mouseup=on_mini on:mouseleave=move |_| mini_drag.set(None)></canvas>
            {move || pinned.get().map(|a| view! {
                <div class="pinned">
                    <b>{format!("pinned allocation #{}: {}", a.id, fmt::bytes(a.size))}</b>
                    " "
                    <button
                        class="to-segments"
                        on:click=move |_| {
                            let pos = hover.get_untracked().map(|h| h.1.last).or(a.start.map(|s| s + 1)).unwrap_or(0);
                            url.set(&[("view", Some("segments".into())), ("pos", Some(pos.to_string()))]);
                        }
                    >
                        "allocator state at this moment"
                    </button>
                    <ol class="frames">{stack_text(&a).into_iter().map(|f| view! { <li>{f}</li> }).collect_view()}</ol>
                </div>
            })}
            <h3>"Largest allocations in this window"</h3>
            {move || match data.get() {
                None => view! { <p>"loading…"</p> }.into_any(),
                Some(Err(e)) => view! { <p class="error">{e}</p> }.into_any(),
                Some(Ok(d)) => {
                    let needle = filter.get().to_lowercase();
                    let rows = d
                        .allocations
                        .iter()
                        .filter(|a| {
                            needle.is_empty()
                                || d.stacks.get(&a.stack.to_string()).is_some_and(|fr| fr.iter().any(|f| fmt::frame(f).to_lowercase().contains(&needle)))
                        })
                        .take(50)
                        .map(|a| {
                            let site = fmt::site(d.sites.get(&a.stack.to_string()).unwrap_or(&Value::Null));
                            view! {
                                <tr>
                                    <td class="num">{fmt::bytes(a.size)}</td>
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
            }}
        </section>
    }
}
