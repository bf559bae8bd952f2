//! The stacks view's icicle on a canvas: outermost frames on top, each box as wide as the bytes
//! alive beneath it (or, weighed by time held, the byte × seconds held beneath it over the whole
//! trace), labelled `file:line function` and coloured by file (C++ in greys). A DOM
//! icicle of a 1M-entry snapshot's tree took seconds to lay out; a canvas draws it in one pass.
//! Hover names a box; a click zooms into it.

use leptos::html::Canvas;
use leptos::prelude::*;

use crate::canvas::{name_hash, pointer, sharp};
use crate::fmt;

/// Row height in CSS pixels.
const ROW: f64 = 18.0;
/// Boxes narrower than this share of the root are not drawn (nor laid out).
const MIN_SHARE: f64 = 0.0005;
const MAX_DEPTH: usize = 80;

/// One box of the tree, laid out over the root's width (`x0`..`x1` in 0..1).
#[derive(Debug, Clone, PartialEq)]
pub struct Cell {
    pub depth: usize,
    pub x0: f64,
    pub x1: f64,
    pub name: String,
    pub filename: String,
    pub line: u32,
    pub bytes: u64,
    pub count: u32,
    /// Byte × µs held (weighed by time held).
    pub held: f64,
}

impl Cell {
    /// `file.py:12 function`, the file without its folders; C++ frames by name only.
    pub fn label(&self) -> String {
        let file = self.filename.rsplit('/').next().unwrap_or("");
        if self.line == 0 || snapshot::frames::is_cpp(&self.filename) {
            self.name.clone()
        } else {
            format!("{file}:{} {}", self.line, self.name)
        }
    }
}

/// The tree below the root, flattened in pre-order, each box as wide as its `weight`.
pub fn layout(root: &::api::FlameNode, weight: ::api::FlameWeight) -> Vec<Cell> {
    let of = |n: &::api::FlameNode| weight.of(n.bytes, n.held);
    let total = of(root).max(1.0);
    let mut out = Vec::new();
    let mut stack: Vec<(&::api::FlameNode, usize, f64)> = Vec::new();
    // Children in reverse so the largest (first) comes out first.
    let mut x = 0.0;
    let mut firsts = Vec::new();
    for c in &root.children {
        firsts.push((c, 0usize, x));
        x += of(c) / total;
    }
    stack.extend(firsts.into_iter().rev());
    while let Some((n, depth, x0)) = stack.pop() {
        let w = of(n) / total;
        if w < MIN_SHARE || depth >= MAX_DEPTH {
            continue;
        }
        out.push(Cell {
            depth,
            x0,
            x1: x0 + w,
            name: n.name.clone(),
            filename: n.filename.clone(),
            line: n.line,
            bytes: n.bytes,
            count: n.count,
            held: n.held,
        });
        let mut kids = Vec::with_capacity(n.children.len());
        let mut cx = x0;
        for c in &n.children {
            kids.push((c, depth + 1, cx));
            cx += of(c) / total;
        }
        stack.extend(kids.into_iter().rev());
    }
    out
}

/// A colour per file: Python files by a hue from the file's name, C++ in blue-greys.
pub fn colour(cell: &Cell) -> String {
    let h = name_hash(cell.filename.rsplit('/').next().unwrap_or(""));
    if cell.filename.is_empty() {
        "#dee2e6".into()
    } else if snapshot::frames::is_cpp(&cell.filename) {
        format!("hsl(210, 14%, {}%)", 78 + h % 10)
    } else {
        format!("hsl({}, 65%, 76%)", h % 360)
    }
}

/// The cells shown when zoomed into `focus` (its subtree, re-laid over the full width).
fn visible(cells: &[Cell], focus: Option<usize>) -> Vec<(usize, f64, f64, usize)> {
    let (fx0, fx1, fd) = match focus.and_then(|i| cells.get(i)) {
        Some(f) => (f.x0, f.x1, f.depth),
        None => (0.0, 1.0, 0),
    };
    let span = (fx1 - fx0).max(1e-12);
    cells
        .iter()
        .enumerate()
        .filter(|(_, c)| c.depth >= fd && c.x0 >= fx0 - 1e-12 && c.x1 <= fx1 + 1e-12)
        .map(|(i, c)| (i, (c.x0 - fx0) / span, (c.x1 - fx0) / span, c.depth - fd))
        .collect()
}

/// What a box holds, in the tree's weight: `1.2 GiB`, or `avg 1.2 GiB` held over the trace.
fn amount(cell: &Cell, clock: Option<&::api::HeldClock>) -> String {
    match clock {
        None => fmt::bytes(cell.bytes),
        Some(c) => format!("avg {}", fmt::bytes(c.average_bytes(cell.held))),
    }
}

/// The hover's figures: the bytes and share of what is alive, or of all memory held.
fn tip(cell: &Cell, root: &::api::FlameNode, clock: Option<&::api::HeldClock>) -> String {
    let count = fmt::count(cell.count as u64);
    match clock {
        None => format!(
            "{} ({:.1}% of what is alive) in {count} allocations",
            fmt::bytes(cell.bytes),
            cell.bytes as f64 * 100.0 / (root.bytes as f64).max(1.0),
        ),
        Some(c) => format!(
            "held {} ({:.1}% of all memory held): on average {} over the trace, by {count} allocations of {} in all",
            fmt::held(cell.held, c.by_events),
            cell.held * 100.0 / root.held.max(1.0),
            fmt::bytes(c.average_bytes(cell.held)),
            fmt::bytes(cell.bytes),
        ),
    }
}

#[component]
pub fn Icicle(
    flame: ::api::FlameNode,
    weight: ::api::FlameWeight,
    /// The clock of a tree weighed by time held.
    clock: Option<::api::HeldClock>,
) -> impl IntoView {
    let cells = StoredValue::new(layout(&flame, weight));
    let root = StoredValue::new(::api::FlameNode {
        children: Vec::new(),
        ..flame
    });
    let focus = RwSignal::new(None::<usize>);
    let hover = RwSignal::new(None::<(usize, f64, f64)>);
    let canvas = NodeRef::<Canvas>::new();
    let width = RwSignal::new(0.0f64);
    // Draw once the canvas is in the page, and again on zoom.
    Effect::new(move |_| {
        let f = focus.get();
        let Some(c) = canvas.get() else { return };
        let w = c
            .parent_element()
            .map(|p| p.client_width() as f64)
            .filter(|w| *w > 0.0)
            .unwrap_or(1200.0);
        width.set(w);
        cells.with_value(|cells| {
            let shown = visible(cells, f);
            let rows = shown.iter().map(|s| s.3 + 1).max().unwrap_or(1);
            let g = sharp(&c, w, rows as f64 * ROW);
            // What is drawn, in words, for tests and assistive reading.
            let _ = c.set_attribute("data-rows", &rows.to_string());
            let top = shown
                .first()
                .map(|s| cells[s.0].label())
                .unwrap_or_default();
            let _ = c.set_attribute("data-top", &top);
            let _ = c.set_attribute(
                "aria-label",
                &format!("memory by stack, {rows} frames deep; widest: {top}"),
            );
            g.set_font("11px system-ui, sans-serif");
            for &(i, x0, x1, depth) in &shown {
                let cell = &cells[i];
                let (px, pw) = (x0 * w, (x1 - x0) * w);
                if pw < 0.5 {
                    continue;
                }
                let y = depth as f64 * ROW;
                g.set_fill_style_str(&colour(cell));
                g.fill_rect(px, y, (pw - 1.0).max(0.5), ROW - 1.0);
                if pw > 24.0 {
                    let mut label = format!("{} ({})", cell.label(), amount(cell, clock.as_ref()));
                    let fits =
                        |t: &str| g.measure_text(t).map(|m| m.width()).unwrap_or(0.0) <= pw - 6.0;
                    while !label.is_empty() && !fits(&label) {
                        let keep = label.chars().count().saturating_sub(2);
                        label = label.chars().take(keep).collect::<String>();
                        label.push('…');
                        if keep <= 1 {
                            label.clear();
                        }
                    }
                    if !label.is_empty() {
                        g.set_fill_style_str("#212529");
                        let _ = g.fill_text(&label, px + 3.0, y + ROW - 5.0);
                    }
                }
            }
        });
    });
    let at = move |ev: &web_sys::MouseEvent| -> Option<(usize, f64, f64)> {
        let c = canvas.get_untracked()?;
        let (x, y) = pointer(&c, ev);
        let w = width.get_untracked().max(1.0);
        let depth = (y / ROW) as usize;
        cells.with_value(|cells| {
            visible(cells, focus.get_untracked())
                .into_iter()
                .find(|&(_, x0, x1, d)| d == depth && x >= x0 * w && x < x1 * w)
                .map(|(i, ..)| (i, x, y))
        })
    };
    view! {
        <div class="icicle-wrap">
            {move || focus.get().map(|_| view! {
                <button class="icicle-reset" on:click=move |_| focus.set(None)>"whole tree"</button>
            })}
            <canvas
                class="icicle"
                id="icicle-canvas"
                node_ref=canvas
                on:mousemove=move |ev| hover.set(at(&ev))
                on:mouseleave=move |_| hover.set(None)
                on:click=move |ev| {
                    if let Some((i, ..)) = at(&ev) {
                        focus.set(Some(i));
                        hover.set(None);
                    }
                }
            ></canvas>
            {move || hover.get().map(|(i, x, y)| cells.with_value(|cells| {
                let c = &cells[i];
                let left = (x + 12.0).min(width.get_untracked() - 340.0).max(0.0);
                view! {
                    <div class="tooltip icicle-tip" style=format!("left:{left:.0}px; top:{:.0}px", y + 14.0)>
                        <div class="tip-frame"><b>{c.name.clone()}</b></div>
                        <div class="tip-file">{if c.line > 0 { format!("{}:{}", c.filename, c.line) } else { c.filename.clone() }}</div>
                        <div>{root.with_value(|r| tip(c, r, clock.as_ref()))}</div>
                    </div>
                }
            }))}
        </div>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(
        name: &str,
        file: &str,
        line: u32,
        bytes: u64,
        children: Vec<::api::FlameNode>,
    ) -> ::api::FlameNode {
        ::api::FlameNode {
            name: name.into(),
            filename: file.into(),
            line,
            bytes,
            count: 1,
            held: bytes as f64 * 2.0,
            children,
        }
    }

    #[test]
    fn boxes_are_as_wide_as_their_bytes_and_nest_under_their_callers() {
        let root = node(
            "all",
            "",
            0,
            100,
            vec![
                node(
                    "train",
                    "/x/train.py",
                    88,
                    75,
                    vec![node("forward", "/x/model.py", 12, 50, vec![])],
                ),
                node("load", "/x/data.py", 5, 25, vec![]),
            ],
        );
        let cells = layout(&root, ::api::FlameWeight::Live);
        assert_eq!(cells.len(), 3);
        assert_eq!((cells[0].depth, cells[0].x0, cells[0].x1), (0, 0.0, 0.75));
        assert_eq!((cells[1].depth, cells[1].x0, cells[1].x1), (1, 0.0, 0.5));
        assert_eq!((cells[2].depth, cells[2].x0, cells[2].x1), (0, 0.75, 1.0));
        assert_eq!(cells[1].label(), "model.py:12 forward");
        // Zoomed into `train`: it spans the width, `forward` two thirds, `load` is gone.
        let z = visible(&cells, Some(0));
        assert_eq!(z.len(), 2);
        assert!((z[1].2 - 2.0 / 3.0).abs() < 1e-9 && z[1].3 == 1);
        // One file, one colour; C++ frames grey.
        assert_eq!(
            colour(&cells[0]),
            colour(&Cell {
                name: "other".into(),
                ..cells[0].clone()
            })
        );
        assert!(
            colour(&Cell {
                filename: "Linear.cpp".into(),
                ..cells[0].clone()
            })
            .starts_with("hsl(210, 14%")
        );
    }

    #[test]
    fn weighed_by_time_held_a_small_long_lived_box_is_the_wide_one() {
        // `load` holds 25 B for the whole trace, `train` 75 B briefly.
        let mut train = node("train", "/x/train.py", 88, 75, vec![]);
        train.held = 700.0;
        let mut load = node("load", "/x/data.py", 5, 25, vec![]);
        load.held = 2100.0;
        let mut root = node("all", "", 0, 100, vec![train, load]);
        root.held = 2800.0;
        let live = layout(&root, ::api::FlameWeight::Live);
        assert_eq!((live[0].x0, live[0].x1), (0.0, 0.75));
        let held = layout(&root, ::api::FlameWeight::Held);
        assert_eq!((held[0].x0, held[0].x1), (0.0, 0.25));
        assert_eq!((held[1].x0, held[1].x1), (0.25, 1.0));
        let clock = ::api::HeldClock {
            span_us: 100.0,
            by_events: false,
            before_trace: 0,
            at_snapshot: 0,
        };
        assert_eq!(amount(&held[1], Some(&clock)), "avg 21 B");
        assert_eq!(amount(&held[1], None), "25 B");
        assert!(tip(&held[1], &root, Some(&clock)).contains("(75.0% of all memory held)"));
    }
}
