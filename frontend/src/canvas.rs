//! What the two chart implementations share (the snapshot timeline and the live charts): the 2D
//! context, linear scales between data and canvas pixels, a pointer's position in canvas pixels,
//! and the byte axis with its grid. Large data goes to canvases; this keeps them drawn alike.

use wasm_bindgen::JsCast;

use crate::fmt;

/// A canvas's 2D context (every canvas here has one).
pub fn ctx(c: &web_sys::HtmlCanvasElement) -> web_sys::CanvasRenderingContext2d {
    c.get_context("2d")
        .ok()
        .flatten()
        .expect("2d context")
        .unchecked_into()
}

/// The screen's device pixels per CSS pixel (2 on most laptops' displays).
pub fn device_pixel_ratio() -> f64 {
    web_sys::window()
        .map(|w| w.device_pixel_ratio())
        .filter(|r| *r > 0.0)
        .unwrap_or(1.0)
}

/// Sizes a canvas to `css_w` × `css_h` CSS pixels backed by as many device pixels, and returns
/// its context scaled so drawing code works in CSS pixels: sharp at any devicePixelRatio.
pub fn sharp(
    c: &web_sys::HtmlCanvasElement,
    css_w: f64,
    css_h: f64,
) -> web_sys::CanvasRenderingContext2d {
    let dpr = device_pixel_ratio();
    let _ = c.set_attribute("data-dpr", &dpr.to_string());
    c.set_width((css_w * dpr).round() as u32);
    c.set_height((css_h * dpr).round() as u32);
    let _ = c.style().set_property("width", &format!("{css_w}px"));
    let _ = c.style().set_property("height", &format!("{css_h}px"));
    let g = ctx(c);
    let _ = g.set_transform(dpr, 0.0, 0.0, dpr, 0.0, 0.0);
    g
}

/// The page's colours a chart draws its paper, labels and grid with: read from style.css's
/// `--chart-*` properties, so the charts follow the page's light or dark theme.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ink {
    /// The chart's background.
    Paper,
    /// Labels and axis text.
    Text,
    /// Grid lines.
    Grid,
    /// Lines and marks drawn in the text's colour at full strength (a recorded point, NVML).
    Strong,
    /// Secondary labels and baselines.
    Muted,
    /// The reserved-memory line.
    Reserved,
    /// The live-memory envelope behind the allocation bands.
    Envelope,
    /// A brush being dragged over a chart.
    Brush,
    /// Names written on the plot (record_function scopes).
    Label,
    /// An OOM: its marker and its label.
    Danger,
    /// A selected allocation (the segment map's outline).
    Select,
}

impl Ink {
    fn property(self) -> (&'static str, &'static str) {
        match self {
            Ink::Paper => ("--chart-paper", "#ffffff"),
            Ink::Text => ("--chart-text", "#333333"),
            Ink::Grid => ("--chart-grid", "#eeeeee"),
            Ink::Strong => ("--chart-strong", "#111111"),
            Ink::Muted => ("--chart-muted", "#888888"),
            Ink::Reserved => ("--chart-reserved", "#e8590c"),
            Ink::Envelope => ("--chart-envelope", "#d0d7f7"),
            Ink::Brush => ("--chart-brush", "rgba(0,0,0,0.15)"),
            Ink::Label => ("--chart-label", "#364fc7"),
            Ink::Danger => ("--chart-danger", "#c92a2a"),
            Ink::Select => ("--select", "#ae3ec9"),
        }
    }
}

/// The colour of `which` in the page's current theme (its light value where no stylesheet
/// says).
pub fn ink(which: Ink) -> String {
    let (property, light) = which.property();
    web_sys::window()
        .and_then(|w| {
            let root = w.document()?.document_element()?;
            w.get_computed_style(&root).ok().flatten()
        })
        .and_then(|style| style.get_property_value(property).ok())
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| light.to_string())
}

/// A series' colour: one of the theme's inks (it follows light and dark: a line drawn in the
/// text's colour), or a hue readable on both.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Paint {
    Ink(Ink),
    Hue(&'static str),
}

impl Paint {
    /// The CSS colour in the page's current theme.
    pub fn css(self) -> String {
        match self {
            Paint::Ink(which) => ink(which),
            Paint::Hue(hue) => hue.to_string(),
        }
    }
}

impl From<&'static str> for Paint {
    fn from(hue: &'static str) -> Paint {
        Paint::Hue(hue)
    }
}

/// The widest a classic (non-overlay) scrollbar takes.
const SCROLLBAR_PX: f64 = 17.0;

/// The width, in CSS pixels, a chart has inside the page's content column (`main` less its
/// padding), at least `min`; `fallback` where there is no page yet. Charts take it when they
/// mount, so a 1920-pixel screen gets a 1880-pixel chart rather than a fixed 1200.
pub fn content_width(min: f64, fallback: f64) -> f64 {
    let Some(w) = web_sys::window() else {
        return fallback;
    };
    let Some(main) = w
        .document()
        .and_then(|d| d.query_selector("main").ok().flatten())
    else {
        return fallback;
    };
    let padding = w
        .get_computed_style(&main)
        .ok()
        .flatten()
        .map(|s| {
            let px = |p: &str| {
                s.get_property_value(p)
                    .ok()
                    .and_then(|v| v.trim_end_matches("px").parse::<f64>().ok())
                    .unwrap_or(0.0)
            };
            px("padding-left") + px("padding-right")
        })
        .unwrap_or(0.0);
    // A page that does not scroll yet may once the view is drawn: leave room for the
    // scrollbar that would then appear, or the chart would be squeezed by it (blurred).
    let no_scrollbar_yet = match (
        w.inner_width().ok().and_then(|v| v.as_f64()),
        w.document().and_then(|d| d.document_element()),
    ) {
        (Some(outer), Some(doc)) => outer - doc.client_width() as f64 <= 0.0,
        _ => false,
    };
    let scrollbar = if no_scrollbar_yet { SCROLLBAR_PX } else { 0.0 };
    let inner = main.client_width() as f64 - padding - scrollbar;
    if inner > 0.0 {
        inner.floor().max(min)
    } else {
        fallback
    }
}

/// A stable number for a name (FNV-1a): what gives a file or a line the same colour on every
/// chart and at every moment.
pub fn name_hash(name: &str) -> u32 {
    name.bytes()
        .fold(2166136261u32, |h, b| (h ^ b as u32).wrapping_mul(16777619))
}

/// A linear map from data `[d0, d1]` to pixels `[p0, p1]` (and back).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scale {
    pub d0: f64,
    pub d1: f64,
    pub p0: f64,
    pub p1: f64,
}

impl Scale {
    /// A scale over `[d0, d1]`; an empty domain is widened to one unit so nothing divides by 0.
    pub fn new(d0: f64, d1: f64, p0: f64, p1: f64) -> Scale {
        Scale {
            d0,
            d1: if d1 > d0 { d1 } else { d0 + 1.0 },
            p0,
            p1,
        }
    }
    pub fn at(&self, d: f64) -> f64 {
        self.p0 + (d - self.d0) / (self.d1 - self.d0) * (self.p1 - self.p0)
    }
    pub fn inv(&self, p: f64) -> f64 {
        self.d0 + (p - self.p0) / (self.p1 - self.p0) * (self.d1 - self.d0)
    }
}

/// The device pixels per drawing unit of a canvas sized by [`sharp`] (1 for any other).
fn canvas_dpr(c: &web_sys::HtmlCanvasElement) -> f64 {
    c.get_attribute("data-dpr")
        .and_then(|v| v.parse().ok())
        .filter(|r: &f64| *r > 0.0)
        .unwrap_or(1.0)
}

/// A canvas's size in drawing units (CSS pixels for a [`sharp`] canvas, whatever its backing
/// store), the units every chart's scales and pointer positions are in.
pub fn logical_size(c: &web_sys::HtmlCanvasElement) -> (f64, f64) {
    let r = canvas_dpr(c);
    (c.width() as f64 / r, c.height() as f64 / r)
}

/// The pointer's position in the canvas's drawing units (the canvas may be shown scaled).
pub fn pointer(c: &web_sys::HtmlCanvasElement, ev: &web_sys::MouseEvent) -> (f64, f64) {
    let r = c.get_bounding_client_rect();
    let (w, h) = logical_size(c);
    (
        (ev.client_x() as f64 - r.left()) * w / r.width().max(1.0),
        (ev.client_y() as f64 - r.top()) * h / r.height().max(1.0),
    )
}

/// The top of a byte axis: the largest value with some headroom (never 0).
pub fn byte_axis_max(largest: f64, headroom: f64) -> f64 {
    (largest * headroom).max(1.0)
}

/// A byte axis: `steps + 1` grid lines from 0 to the scale's top, labelled at the left edge.
pub fn byte_grid(
    g: &web_sys::CanvasRenderingContext2d,
    y: &Scale,
    x_from: f64,
    x_to: f64,
    steps: u32,
) {
    byte_grid_with(g, y, (x_from, x_to), steps, fmt::bytes);
}

/// [`byte_grid`] with the labels written by `label`.
pub fn byte_grid_with(
    g: &web_sys::CanvasRenderingContext2d,
    y: &Scale,
    (x_from, x_to): (f64, f64),
    steps: u32,
    label: impl Fn(f64) -> String,
) {
    let (grid, text) = (ink(Ink::Grid), ink(Ink::Text));
    for i in 0..=steps {
        let v = y.d0 + (y.d1 - y.d0) * i as f64 / steps as f64;
        let py = y.at(v);
        g.set_fill_style_str(&grid);
        g.fill_rect(x_from, py, x_to - x_from, 1.0);
        g.set_fill_style_str(&text);
        let _ = g.fill_text(&label(v), 4.0, py + 4.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scale_maps_both_ways_and_survives_an_empty_domain() {
        let s = Scale::new(100.0, 200.0, 70.0, 1190.0);
        assert_eq!(s.at(100.0), 70.0);
        assert_eq!(s.at(200.0), 1190.0);
        assert!((s.inv(s.at(137.5)) - 137.5).abs() < 1e-9);
        let flat = Scale::new(5.0, 5.0, 0.0, 10.0);
        assert!(flat.at(5.0).is_finite());
        // A byte axis upside down (0 at the bottom).
        let y = Scale::new(0.0, byte_axis_max(0.0, 1.05), 336.0, 20.0);
        assert_eq!(y.at(0.0), 336.0);
    }
}
