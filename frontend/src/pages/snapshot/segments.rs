//! The segments tab: the allocator's segments and blocks at any event (exact at the snapshot,
//! rebuilt from the trace before it), stepped with the keyboard or chosen on the cached-segment
//! timeline above (each segment a row from its cudaMalloc to its cudaFree). Allocated blocks are
//! coloured by the line that made them; the event at the position is named, with the events
//! around it listed (click one to go there), like the official viewer's state history.

use crate::pages::help::Term;
use std::sync::Arc;

use leptos::prelude::*;

use super::devices::shown_events;
use crate::canvas::{Ink, Scale, ink, logical_size, pointer, sharp};
use crate::url::UrlState;
use crate::{api, fmt};

/// The allocator state's query at `position`.
fn state_query(device: Option<i32>, position: u32) -> ::api::PositionQuery {
    ::api::PositionQuery {
        device,
        position: Some(position),
    }
}

/// The events listed around `position`: six each side.
fn events_query(device: Option<i32>, position: u32) -> ::api::EventsQuery {
    ::api::EventsQuery {
        device,
        position: Some(position),
        before: Some(6),
        after: Some(6),
    }
}

/// Begins the view's first requests as the snapshot's page opens on it, as the timeline's
/// (`timeline::prefetch`): the view is made once the page's report has come (it reads the
/// trace's length there), and its requests then followed the report's. The segments' lives,
/// and with a position in the URL the state there and the events around it (a position past
/// the trace's end is clamped by the view, which then asks for another URL: one wasted
/// request). The view's own requests take the answers (the same URLs).
pub fn prefetch(url: UrlState) {
    let id = url.id.get_untracked();
    if crate::local::is_local(&id) {
        return;
    }
    let (device, position) = untrack(|| (url.device(), url.position()));
    api::prefetch(::api::routes::segments(&id, &::api::DeviceQuery { device }));
    if let Some(p) = position {
        api::prefetch(::api::routes::state(&id, &state_query(device, p)));
        api::prefetch(::api::routes::events(&id, &events_query(device, p)));
    }
}

#[component]
pub fn Segments(report: Arc<::api::Report>) -> impl IntoView {
    let url: UrlState = expect_context();
    let events = shown_events(&report, url);
    let pos = Memo::new(move |_| url.position().map_or(events, |p| p as u64).min(events));
    let data = LocalResource::new(move || {
        let id = url.id.get();
        let q = state_query(url.device(), pos.get() as u32);
        async move { api::state(&id, &q).await }
    });
    let step = move |d: i64| {
        let p = (pos.get_untracked() as i64 + d).clamp(0, events as i64);
        url.set(&[("pos", Some(p.to_string()))]);
    };
    let hovered = RwSignal::new(String::new());
    // What the pointer is over is another block at another moment: its line goes with a step.
    Effect::watch(
        move || data.track(),
        move |_, _, _| hovered.set(String::new()),
        false,
    );
    // Every segment's lifetime and the stuck frees, over the whole trace: only the device
    // (a step changes the URL's position, and these stay the same).
    let device = Memo::new(move |_| url.device());
    let spans = LocalResource::new(move || {
        let id = url.id.get();
        let q = ::api::DeviceQuery {
            device: device.get(),
        };
        async move { api::segments(&id, &q).await }
    });
    // The selected allocation (`sel`, its index on the device): followed by identity, so a
    // later tensor at the same address is not it.
    let sel = Memo::new(move |_| url.get("sel").and_then(|v| v.parse::<u32>().ok()));
    let selected = LocalResource::new(move || {
        let (id, device, n) = (url.id.get(), device.get(), sel.get());
        async move {
            match n {
                Some(n) => Some(api::allocation(&id, n, &::api::DeviceQuery { device }).await),
                None => None,
            }
        }
    });
    // The trace's non-default streams (and the state's), numbered once for their names (side
    // stream 1, 2, …), the same at every position.
    let sides = Memo::new(move |_| {
        let traced = spans
            .get()
            .and_then(|d| d.ok())
            .map(|d| d.segments.iter().map(|s| s.stream).collect::<Vec<_>>());
        let here = data
            .get()
            .and_then(|d| d.ok())
            .map(|st| st.segments.iter().map(|s| s.stream).collect::<Vec<_>>());
        fmt::side_streams(
            traced
                .into_iter()
                .flatten()
                .chain(here.into_iter().flatten()),
        )
    });
    view! {
        <section
            class="segments"
            tabindex="0"
            on:keydown=move |ev: web_sys::KeyboardEvent| match ev.key().as_str() {
                "ArrowLeft" => step(if ev.shift_key() { -100 } else { -1 }),
                "ArrowRight" => step(if ev.shift_key() { 100 } else { 1 }),
                _ => {}
            }
        >
            <div class="toolbar">
                <button on:click=move |_| step(-1)>"◀"</button>
                <input
                    type="range"
                    min="0"
                    max=events.to_string()
                    prop:value=move || pos.get().to_string()
                    on:change=move |ev| url.set(&[("pos", Some(event_target_value(&ev)))])
                />
                <button on:click=move |_| step(1)>"▶"</button>
                <span>{move || format!("after event {} of {} (←/→ steps, shift: ×100)", pos.get(), events)}</span>
                <button
                    class="by-category"
                    on:click=move |_| {
                        let on = url.get("by").as_deref() == Some("category");
                        url.set(&[("by", (!on).then(|| "category".to_string()))]);
                    }
                >
                    {move || if url.get("by").as_deref() == Some("category") { "colour by call site" } else { "colour by category" }}
                </button>
            </div>
            <SegmentTimeline pos=pos events=events spans=spans selected=selected/>
            <EventList pos=pos sides=sides/>
            <PendingFrees spans=spans sides=sides/>
            <Selection pos=pos selected=selected sides=sides/>
            <p class="hover">{move || hovered.get()}</p>
            {move || match data.get() {
                None => view! { <p>"loading…"</p> }.into_any(),
                Some(Err(e)) => crate::pages::widgets::error_line(e).into_any(),
                Some(Ok(st)) => segment_map(st, url, hovered, events > 0, sides, sel.get()).into_any(),
            }}
        </section>
    }
}

/// The segments as rows (width by size, the largest full width), their blocks inside.
fn segment_map(
    st: ::api::AllocatorState,
    url: UrlState,
    hovered: RwSignal<String>,
    replayable: bool,
    // The trace's side streams, numbered (`fmt::stream`).
    sides: Memo<Vec<u64>>,
    // The selected allocation, outlined where it is alive.
    sel: Option<u32>,
) -> impl IntoView {
    let rows = st.segments.len();
    let largest = st
        .segments
        .iter()
        .map(|s| s.total_bytes as f64)
        .fold(1.0, f64::max);
    // Allocated blocks by what they are (parameters, activations, …) or by the line that made them.
    let by_category = url.get("by").as_deref() == Some("category");
    // The rows shown first: from the top, or around the selected block.
    let sel_row = sel.and_then(|n| {
        st.segments
            .iter()
            .position(|s| s.blocks.iter().any(|b| b.allocation == Some(n)))
    });
    let start = sel_row.map_or(0, |r| {
        r.saturating_sub(WINDOW_ROWS / 4) / STEP_ROWS * STEP_ROWS
    });
    let first_rows = rows_html(
        &st,
        largest,
        start..rows.min(start + WINDOW_ROWS),
        by_category,
        sel,
    );
    // The hover and scroll handlers read the state; the header reads it first.
    let st = std::rc::Rc::new(st);
    let (st_hover, st_scroll, st_click) = (st.clone(), st.clone(), st.clone());
    let window = NodeRef::<leptos::html::Div>::new();
    let list = NodeRef::<leptos::html::Div>::new();
    let shown_from = std::cell::Cell::new(start);
    // The selected block's row scrolled into the list's view (its rows are already made).
    if let Some(r) = sel_row {
        Effect::new(move |_| {
            if let Some(l) = list.get() {
                l.set_scroll_top(((r as f64 - 3.0).max(0.0) * ROW_PX) as i32);
            }
        });
    }
    // Past the rows in view (and a margin), the rows are made as the list scrolls.
    let on_scroll = move |ev: web_sys::Event| {
        use wasm_bindgen::JsCast;
        let (Some(list), Some(win)) = (
            ev.target()
                .and_then(|t| t.dyn_into::<web_sys::Element>().ok()),
            window.get_untracked(),
        ) else {
            return;
        };
        let top_row = (list.scroll_top() as f64 / ROW_PX) as usize;
        let from = top_row.saturating_sub(WINDOW_ROWS / 4) / STEP_ROWS * STEP_ROWS;
        if from == shown_from.get() {
            return;
        }
        shown_from.set(from);
        let to = (from + WINDOW_ROWS).min(rows);
        web_sys::HtmlElement::style(&win)
            .set_property("top", &format!("{}px", from as f64 * ROW_PX))
            .ok();
        win.set_inner_html(&rows_html(&st_scroll, largest, from..to, by_category, sel));
    };
    let t = &st.total;
    view! {
        <p>{format!(
            "{} {}, reserved {}, allocated {}, rounding waste {}, cached free {} in {} blocks (largest {}){}",
            st.segments.len(),
            if st.segments.len() == 1 { "segment" } else { "segments" },
            fmt::bytes(t.reserved_bytes),
            fmt::bytes(t.allocated_bytes),
            fmt::bytes(t.internal_bytes),
            fmt::bytes(t.external_bytes),
            t.inactive_blocks,
            fmt::bytes(t.largest_free_bytes),
            if st.exact { ", as recorded at the snapshot" } else { ", rebuilt from the trace" }
        )}
        {replayable.then(|| view! {
            " "
            <a class="frag-whatif" href=url.href(&[("view", "whatif".to_string()), ("device", st.device.to_string())])>
                "What would other allocator settings reserve? (simulated)"
            </a>
        })}
        </p>
        <p class="seg-legend">
            <span class="key"><i class="block active_allocated"></i><Term key="allocated">"allocated"</Term></span>
            <span class="key"><i class="block active_allocated waste-key"></i><Term key="rounding-waste">"rounding waste (size − requested, darker tail)"</Term></span>
            <span class="key"><i class="block active_pending_free"></i><Term key="pending-free">"freed, waiting for its stream (pending free)"</Term></span>
            <span class="key"><i class="block inactive"></i><Term key="inactive-split">"cached free"</Term></span>
            <span class="muted">"Each row is a "<Term key="segment">"segment"</Term>" (a cudaMalloc, or an "<Term key="expandable-segments">"expandable segment"</Term>"), width by size; hover a block for its stack."</span>
        </p>
        {if by_category { category_legend(&st).into_any() } else { site_legend(&st).into_any() }}
        {mapped_note(&st)}
        {sides.with_untracked(|sides| pending_note(&st, sides))}
        <div
            class="segmap"
            node_ref=list
            on:mouseover=move |ev: web_sys::MouseEvent| hover(&ev, &st_hover, url, hovered, sides)
            on:click=move |ev: web_sys::MouseEvent| select(&ev, &st_click, url)
            on:scroll=on_scroll
        >
            <div class="segmap-space" style=format!("height:{}px", rows as f64 * ROW_PX)>
                <div inner_html=site_rules(&st)></div>
                <div
                    class="segmap-window"
                    node_ref=window
                    style=format!("top:{}px", start as f64 * ROW_PX)
                    inner_html=first_rows
                ></div>
            </div>
        </div>
    }
}

/// A segment row's height in CSS pixels (`.segrow` in style.css: 14 px of bar, 1 px above and below).
const ROW_PX: f64 = 16.0;
/// Rows in the document at once. A 1 GB snapshot tiled in address space has ~800 segments and
/// ~4,300 blocks at an event: as elements, all of them took Chromium 1.4–1.9 s to build and lay
/// out, and still 100–160 ms as one string of HTML (bench/README.md). The list shows ~45 rows
/// (70vh); the ones around them are made as it scrolls, so the cost is the same for any size.
const WINDOW_ROWS: usize = 120;
/// The window moves in steps of this many rows (not at every scrolled pixel).
const STEP_ROWS: usize = 10;

/// Each call site's colour for allocated blocks, as one rule per site (not a style per block).
fn site_rules(st: &::api::AllocatorState) -> String {
    use std::fmt::Write;
    let mut h = String::from("<style>");
    for (i, f) in st.sites.iter().enumerate() {
        let _ = write!(
            h,
            ".segmap .block.active_allocated.s{i}{{background-color:{}}}",
            site_colour(f)
        );
    }
    for c in ::api::Category::ALL {
        let _ = write!(
            h,
            ".segmap .block.active_allocated.c-{}{{background-color:{}}}",
            c.as_str(),
            crate::categories::colour(c)
        );
    }
    h.push_str("</style>");
    h
}

/// The categories of the allocated blocks at this moment, with their colours and bytes.
fn category_legend(st: &::api::AllocatorState) -> impl IntoView + use<> {
    let mut bytes = ::api::CategoryBytes::default();
    for b in st.segments.iter().flat_map(|s| &s.blocks) {
        if let (::api::BlockState::ActiveAllocated, Some(c)) = (b.state, b.category) {
            *bytes.get_mut(c) += b.size_bytes;
        }
    }
    view! {
        <p class="seg-legend seg-categories">
            {bytes
                .largest_first()
                .into_iter()
                .map(|(c, b)| view! {
                    <span class="key" data-category=c.as_str()>
                        <i class="block" style=format!("background-color:{}", crate::categories::colour(c))></i>
                        {format!("{} {}", c.words(), fmt::bytes(b))}
                    </span>
                })
                .collect_view()}
            {(bytes.total() == 0).then(|| view! { <span class="muted">"no categories: the snapshot has no trace to read them from"</span> })}
        </p>
    }
}

/// Segment rows `range` as HTML: a block carries only its width, its waste and classes; what it
/// is and which line made it are said on hover ([`hover`]) from the state the view holds.
fn rows_html(
    st: &::api::AllocatorState,
    largest: f64,
    range: std::ops::Range<usize>,
    by_category: bool,
    sel: Option<u32>,
) -> String {
    use std::fmt::Write;
    let mut h = String::with_capacity(range.len() * 400);
    for (si, s) in st
        .segments
        .iter()
        .enumerate()
        .skip(range.start)
        .take(range.len())
    {
        let total = (s.total_bytes as f64).max(1.0);
        let width = (total / largest * 100.0).max(0.5);
        let label = format!(
            "{:#x} · {}{}",
            s.address,
            fmt::bytes(s.total_bytes),
            if s.is_expandable { " ⇢" } else { "" }
        );
        let _ = write!(
            h,
            r#"<div class="segrow{}" data-s="{si}"><span class="seg-label">{}</span><div class="seg" style="width:calc((100% - 17em) * {:.4})">"#,
            if s.is_expandable { " expandable" } else { "" },
            ::api::html_escape(&label),
            width / 100.0
        );
        for (bi, b) in s.blocks.iter().enumerate() {
            let w = b.size_bytes as f64 / total * 100.0;
            let waste = b.size_bytes.saturating_sub(b.requested_bytes);
            let _ = write!(h, r#"<div class="block {}"#, b.state.as_str());
            // Allocated blocks take their call site's (or category's) colour; the others keep
            // their state's.
            match (b.state, b.site, b.category) {
                (::api::BlockState::ActiveAllocated, _, Some(c)) if by_category => {
                    let _ = write!(h, " c-{}", c.as_str());
                }
                (::api::BlockState::ActiveAllocated, Some(site), _) if !by_category => {
                    let _ = write!(h, " s{site}");
                }
                _ => {}
            }
            if sel.is_some() && b.allocation == sel {
                h.push_str(" selected");
            }
            let _ = write!(h, r#"" data-b="{bi}" style="width:{w:.3}%"#);
            if waste > 0 {
                let _ = write!(
                    h,
                    ";--waste:{:.2}%",
                    (waste as f64 / (b.size_bytes as f64).max(1.0) * 100.0).min(100.0)
                );
            }
            h.push_str(r#""></div>"#);
        }
        // The range the current event mapped, outlined where it sits.
        if let Some(l) = s
            .mapped
            .as_ref()
            .and_then(|m| m.last)
            .filter(|l| l.event + 1 == st.position && l.address >= s.address)
        {
            let left = (l.address - s.address) as f64 / total * 100.0;
            let w = l.bytes as f64 / total * 100.0;
            let _ = write!(
                h,
                r#"<div class="just-mapped" style="left:{left:.3}%;width:{w:.3}%" title="{}"></div>"#,
                ::api::html_escape(&format!("mapped by this event: {}", fmt::bytes(l.bytes)))
            );
        }
        h.push_str("</div></div>");
    }
    h
}

/// Where blocks wait as pending frees: how many, and why (`record_stream`), with what to do.
fn pending_note(st: &::api::AllocatorState, sides: &[u64]) -> impl IntoView + use<> {
    let (blocks, bytes, streams) = st
        .segments
        .iter()
        .flat_map(|s| s.blocks.iter().map(move |b| (s.stream, b)))
        .filter(|(_, b)| b.state == ::api::BlockState::ActivePendingFree)
        .fold(
            (0u32, 0u64, Vec::new()),
            |(n, total, mut streams), (stream, b)| {
                streams.push(stream);
                (n + 1, total + b.size_bytes, streams)
            },
        );
    let mut of_streams: Vec<String> = streams.iter().map(|&s| fmt::stream(s, sides)).collect();
    of_streams.sort();
    of_streams.dedup();
    (blocks > 0).then(|| view! {
        <p class="pending-note">
            {format!(
                "{blocks} {} ({}, yellow) freed in Python but still pending, allocated on the {}: another stream used {} (tensor.record_stream), so the allocator reuses {} only once that stream's queued work has finished. Many or long-lived pending frees hold memory: free such tensors after synchronising the other stream, or allocate them on the stream that uses them.",
                if blocks == 1 { "block" } else { "blocks" },
                fmt::bytes(bytes),
                of_streams.join(", "),
                if blocks == 1 { "it" } else { "them" },
                if blocks == 1 { "it" } else { "them" },
            )}
        </p>
    })
}

/// A segment in words: where, how big, which pool and stream, how full.
fn segment_words(s: &::api::SegmentView, sides: &[u64]) -> String {
    let fr = &s.fragmentation;
    format!(
        "segment {:#x}: {} {} pool, {}{}: allocated {}, rounding waste {}, cached free {} in {} blocks (largest {})",
        s.address,
        fmt::bytes(s.total_bytes),
        match s.segment_type {
            ::api::SegmentType::Small => "small",
            ::api::SegmentType::Large => "large",
            ::api::SegmentType::Unknown => "unknown",
        },
        fmt::stream(s.stream, sides),
        s.mapped
            .as_ref()
            .map(|m| format!(", expandable: {}", mapped_words(s.total_bytes, m)))
            .unwrap_or_default(),
        fmt::bytes(fr.allocated_bytes),
        fmt::bytes(fr.internal_bytes),
        fmt::bytes(fr.external_bytes),
        fr.inactive_blocks,
        fmt::bytes(fr.largest_free_bytes),
    )
}

/// A block in words: state, size, what was asked for, and the line that made it.
fn block_words(b: &::api::BlockView, sites: &[::api::Frame]) -> String {
    let site = b.site.and_then(|i| sites.get(i as usize));
    if b.state == ::api::BlockState::Inactive {
        // A cached free block was asked for by no one: no request, no waste.
        return format!("inactive block {} (cached free)", fmt::bytes(b.size_bytes));
    }
    format!(
        "{} block {} (requested {}, rounding waste {}){}",
        b.state.as_str(),
        fmt::bytes(b.size_bytes),
        fmt::bytes(b.requested_bytes),
        fmt::bytes(b.size_bytes.saturating_sub(b.requested_bytes)),
        site.map(|f| format!(" from {}", f.short()))
            .unwrap_or_default()
    ) + &b
        .category
        .map(|c| format!(" · {}", c.as_str().replace('_', " ")))
        .unwrap_or_default()
}

/// Hovering a row or a block: its description becomes the element's tooltip and the line under
/// the toolbar; for a block, the top of its stack follows once fetched.
fn hover(
    ev: &web_sys::MouseEvent,
    st: &::api::AllocatorState,
    url: UrlState,
    hovered: RwSignal<String>,
    sides: Memo<Vec<u64>>,
) {
    let Some(((row, seg), block)) = under(ev, st) else {
        return;
    };
    if row.get_attribute("title").is_none() {
        let words = sides.with_untracked(|sides| segment_words(seg, sides));
        row.set_attribute("title", &words).ok();
    }
    let Some((block, b)) = block else {
        return;
    };
    let info = block_words(b, &st.sites);
    if block.get_attribute("title").is_none() {
        block.set_attribute("title", &info).ok();
    }
    if hovered.get_untracked().starts_with(&info) {
        return;
    }
    hovered.set(info.clone());
    if b.stack.0 > 0 {
        let (id, stack) = (url.id.get_untracked(), b.stack);
        leptos::task::spawn_local(async move {
            if let Ok(frames) = api::frames(&id, stack).await {
                let f: Vec<String> = frames.iter().take(4).map(::api::Frame::short).collect();
                // Only if the pointer is still on that block.
                if hovered.get_untracked() == info {
                    hovered.set(format!("{info}: {}", f.join(" ← ")));
                }
            }
        });
    }
}

/// The block under a click, selected (or, selected already, let go): followed by its allocation.
fn select(ev: &web_sys::MouseEvent, st: &::api::AllocatorState, url: UrlState) {
    let Some(n) = under(ev, st).and_then(|(_, block)| block?.1.allocation) else {
        return;
    };
    let again = url.get("sel").and_then(|v| v.parse::<u32>().ok()) == Some(n);
    url.set(&[("sel", (!again).then(|| n.to_string()))]);
}

/// The segment row under the pointer (its element and segment) and, over a block, the block's
/// element and block: what the map's hover and click both read (`data-s`, `data-b`).
type Under<'a> = (
    (web_sys::Element, &'a ::api::SegmentView),
    Option<(web_sys::Element, &'a ::api::BlockView)>,
);

fn under<'a>(ev: &web_sys::MouseEvent, st: &'a ::api::AllocatorState) -> Option<Under<'a>> {
    use wasm_bindgen::JsCast;
    let index = |e: &web_sys::Element, attr: &str| {
        e.get_attribute(attr).and_then(|v| v.parse::<usize>().ok())
    };
    let el = ev.target()?.dyn_into::<web_sys::Element>().ok()?;
    let row = el.closest(".segrow").ok().flatten()?;
    let seg = st.segments.get(index(&row, "data-s")?)?;
    let block = el
        .closest(".block")
        .ok()
        .flatten()
        .and_then(|e| Some((seg.blocks.get(index(&e, "data-b")?)?, e)))
        .map(|(b, e)| (e, b));
    Some(((row, seg), block))
}

/// The selected allocation: what it is, where it is at this event (its block outlined in the
/// map, its segment's row and its lifetime outlined on the timeline above), and links to the
/// events that made and freed it.
#[component]
fn Selection(
    pos: Memo<u64>,
    selected: LocalResource<Option<Result<::api::AllocationInfo, String>>>,
    sides: Memo<Vec<u64>>,
) -> impl IntoView {
    let url: UrlState = expect_context();
    let go = move |p: u32| url.set(&[("pos", Some(p.to_string()))]);
    move || {
        let a = match selected.get().flatten() {
            None => return ().into_any(),
            Some(Err(e)) => return crate::pages::widgets::error_line(e).into_any(),
            Some(Ok(a)) => a,
        };
        let p = pos.get() as u32;
        let made = a.alloc_event.is_none_or(|e| e < p);
        let gone = a.free_event.is_some_and(|e| e < p);
        let pending = a.free_requested_event.is_some_and(|e| e < p) && !gone;
        let here = match (made, gone, pending) {
            (false, _, _) => "not made yet at this event".to_string(),
            (_, true, _) => format!(
                "freed before this event; its address {:#x} may hold another tensor now, which is not it",
                a.address
            ),
            (_, _, true) => "freed in Python, still pending here (outlined in the map)".to_string(),
            _ => "alive at this event (outlined in the map)".to_string(),
        };
        view! {
            <div class="selection">
                <b>{format!("Selected: allocation #{} · {} at {:#x}, {}", a.allocation, fmt::bytes(a.size_bytes), a.address, sides.with(|s| fmt::stream(a.stream, s)))}</b>
                " · "
                <span class="sel-site">{::api::site_text(a.site.as_ref())}</span>
                <p class="sel-where">{here}</p>
                <p class="sel-links">
                    {match a.alloc_event {
                        Some(e) => view! { <button class="sel-alloc" on:click=move |_| go(e + 1)>{format!("made at event {}", fmt::count(e as u64 + 1))}</button> }.into_any(),
                        None => view! { <span>"made before the trace"</span> }.into_any(),
                    }}
                    " "
                    {a.free_requested_event.filter(|&r| Some(r + 1) != a.free_event).map(|e| view! {
                        <button class="sel-requested" on:click=move |_| go(e + 1)>{format!("freed in Python at event {}", fmt::count(e as u64 + 1))}</button>
                        " "
                    })}
                    {match a.free_event {
                        Some(e) => view! { <button class="sel-free" on:click=move |_| go(e + 1)>{format!("free completed at event {}", fmt::count(e as u64 + 1))}</button> }.into_any(),
                        None => view! { <span>"alive when the snapshot was taken"</span> }.into_any(),
                    }}
                    " "
                    <button class="sel-clear" on:click=move |_| url.set(&[("sel", None)])>"clear selection"</button>
                </p>
            </div>
        }
        .into_any()
    }
}

/// Frees stuck pending over the whole trace (`free_requested` long before `free_completed`):
/// how many and how much, then each, longest wait first; a click shows its block, selected,
/// while it waits.
#[component]
fn PendingFrees(
    spans: LocalResource<Result<::api::SegmentSpans, String>>,
    sides: Memo<Vec<u64>>,
) -> impl IntoView {
    let url: UrlState = expect_context();
    let all = RwSignal::new(false);
    move || {
        let Some(Ok(d)) = spans.get() else {
            return ().into_any();
        };
        let events = d.events;
        let p = d.pending;
        let over = if p.timed {
            format!("over {}", fmt::seconds(p.min_wait_us as f64))
        } else {
            "an event or more (this trace has no times)".to_string()
        };
        // No free in the trace (no trace, or history without frees): nothing to say.
        if p.requested == 0 && p.count == 0 {
            return ().into_any();
        }
        if p.count == 0 {
            return view! {
                <p class="pending-frees none">{format!(
                    "No free waited {over} for another stream (of {} frees requested in the trace).",
                    fmt::count(p.requested)
                )}</p>
            }
            .into_any();
        }
        let name = |s: u64| sides.with(|sd| fmt::stream(s, sd));
        let others = if p.streams.is_empty() {
            String::new()
        } else {
            format!(
                " Other streams in the trace, what they may have waited for (the trace does not say which): {}.",
                p.streams
                    .iter()
                    .map(|&s| name(s))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        let shown = if all.get() {
            p.frees.len()
        } else {
            p.frees.len().min(PENDING_ROWS)
        };
        // Still pending: how long before the snapshot is not recorded, only since the request
        // to the trace's last event.
        let waited = |f: &::api::PendingFree| match (p.timed, f.completed_event) {
            (true, Some(_)) => fmt::seconds(f.waited_us as f64),
            (true, None) if f.waited_us > 0 => format!("≥ {}", fmt::seconds(f.waited_us as f64)),
            (true, None) => "(the last event)".to_string(),
            (false, _) => format!("{} events", fmt::count(f.waited_events as u64)),
        };
        let done = p.count - p.still_pending;
        let rows = p.frees[..shown]
            .iter()
            .map(|f| {
                // (Requested before the trace: shown where the snapshot was taken.)
                let (n, at) = (f.allocation, f.requested_event.map_or(events, |e| e + 1));
                let site = ::api::site_text(f.site.and_then(|i| p.sites.get(i as usize)));
                view! {
                    <tr
                        class="pending-row"
                        data-allocation=n.to_string()
                        on:click=move |_| url.set(&[("pos", Some(at.to_string())), ("sel", Some(n.to_string()))])
                    >
                        <td class="num">{fmt::bytes(f.size_bytes)}</td>
                        <td class="num">{waited(f)}</td>
                        <td>{name(f.stream)}</td>
                        // Events named as the event list names them (the position after each).
                        <td class="num">{f.requested_event.map_or("before the trace".to_string(), |e| fmt::count(e as u64 + 1))}</td>
                        <td class="num">{f.completed_event.map_or("still pending".to_string(), |e| fmt::count(e as u64 + 1))}</td>
                        <td>{site}</td>
                    </tr>
                }
            })
            .collect_view();
        let more = p.frees.len() - shown;
        view! {
            <section class="pending-frees">
                <h3><Term key="pending-free">"Frees stuck pending"</Term></h3>
                <p>{format!(
                    "{}{}{} ({} in all). Of {} frees requested in the trace, {} did not complete at once.{others} Click a row to see its block while it waits.",
                    if done > 0 {
                        format!(
                            "{} {} waited {over} for another stream between free_requested and free_completed, the longest {}",
                            fmt::count(done),
                            if done == 1 { "free" } else { "frees" },
                            if p.timed { fmt::seconds(p.longest_us as f64) } else { "—".into() },
                        )
                    } else {
                        String::new()
                    },
                    if done > 0 && p.still_pending > 0 { "; " } else { "" },
                    if p.still_pending > 0 {
                        format!(
                            "{} {} still pending when the snapshot was taken (freed in Python, waiting for another stream)",
                            fmt::count(p.still_pending),
                            if p.still_pending == 1 { "free was" } else { "frees were" },
                        )
                    } else {
                        String::new()
                    },
                    fmt::bytes(p.size_bytes),
                    fmt::count(p.requested),
                    fmt::count(p.waited),
                )}</p>
                <table class="pending-list">
                    <tr>
                        <th class="num">"size"</th>
                        <th class="num">"waited"</th>
                        <th>"allocated on"</th>
                        <th class="num">"freed at event"</th>
                        <th class="num">"completed at event"</th>
                        <th>"line"</th>
                    </tr>
                    {rows}
                </table>
                {(more > 0).then(|| view! {
                    <button class="pending-all" on:click=move |_| all.set(true)>{format!("show all {} listed", fmt::count(p.frees.len() as u64))}</button>
                })}
                {(p.count as usize > p.frees.len()).then(|| view! {
                    <p class="muted">{format!("The {} longest are listed; the figures above count all {}.", fmt::count(p.frees.len() as u64), fmt::count(p.count))}</p>
                })}
            </section>
        }
        .into_any()
    }
}

/// Stuck frees listed before "show all".
const PENDING_ROWS: usize = 20;

/// An expandable segment's mapped bytes in words: how much, and how it got there.
fn mapped_words(total_bytes: u64, m: &::api::MappedGrowth) -> String {
    let mut parts = Vec::new();
    if m.maps > 0 {
        parts.push(format!(
            "{} by {} {} in the trace",
            fmt::bytes(m.mapped_in_trace_bytes),
            fmt::count(m.maps as u64),
            if m.maps == 1 { "map" } else { "maps" }
        ));
    }
    if m.before_trace_bytes > 0 {
        parts.push(format!("{} before it", fmt::bytes(m.before_trace_bytes)));
    }
    let newest = m
        .last
        // Counted from 1, as the event list counts them.
        .map(|l| {
            format!(
                "; the newest +{} at event {}",
                fmt::bytes(l.bytes),
                fmt::count(l.event as u64 + 1)
            )
        })
        .unwrap_or_default();
    format!(
        "{} mapped ({}){newest}",
        fmt::bytes(total_bytes),
        parts.join(", ")
    )
}

/// What the expandable segments (rows marked ⇢) mapped: they grow by pages instead of new
/// cudaMallocs, so their growth is said here and drawn in the cached-segment timeline.
fn mapped_note(st: &::api::AllocatorState) -> impl IntoView + use<> {
    let rows: Vec<String> = st
        .segments
        .iter()
        .filter_map(|s| {
            Some(format!(
                "{:#x}: {}",
                s.address,
                mapped_words(s.total_bytes, s.mapped.as_ref()?)
            ))
        })
        .collect();
    (!rows.is_empty()).then(|| {
        let more = rows.len().saturating_sub(3);
        view! {
            <div class="mapped-note">
                <p>
                    "Expandable segments (⇢) grow by mapping pages at their end instead of new cudaMallocs; "
                    "an outline marks the pages the current event mapped. "
                    {rows.into_iter().take(3).map(|r| view! { <span class="mapped-row">{r}". "</span> }).collect_view()}
                    {(more > 0).then(|| format!("And {more} more mapped ranges."))}
                </p>
            </div>
        }
    })
}

/// A call site's colour: a hue from its `file:line`, so a line keeps its colour at every event.
pub fn site_colour(f: &::api::Frame) -> String {
    let h = crate::canvas::name_hash(&format!("{}:{}", f.filename, f.line));
    format!("hsl({}, 55%, 58%)", h % 360)
}

/// The call sites holding the most allocated bytes at this moment, with their colours.
fn site_legend(st: &::api::AllocatorState) -> impl IntoView + use<> {
    let mut bytes = vec![0u64; st.sites.len()];
    for b in st.segments.iter().flat_map(|s| &s.blocks) {
        if let (::api::BlockState::ActiveAllocated, Some(i)) = (b.state, b.site) {
            bytes[i as usize] += b.size_bytes;
        }
    }
    let mut order: Vec<usize> = (0..st.sites.len()).filter(|&i| bytes[i] > 0).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(bytes[i]));
    let more = order.len().saturating_sub(8);
    let keys: Vec<_> = order
        .into_iter()
        .take(8)
        .map(|i| {
            let f = &st.sites[i];
            view! {
                <span class="key site-key">
                    <i class="block" style=format!("background-color:{}", site_colour(f))></i>
                    {format!("{} {}", f.short(), fmt::bytes(bytes[i]))}
                </span>
            }
        })
        .collect();
    (!keys.is_empty()).then(|| view! {
        <p class="seg-legend sites-legend">
            <span class="muted">"Allocated blocks by the line that made them: "</span>
            {keys}
            {(more > 0).then(|| view! { <span class="muted">{format!("and {more} more lines")}</span> })}
        </p>
    })
}

/// The event at the position (what it did, how big, on which stream, from which line) and the
/// events around it; a click on one goes there.
#[component]
fn EventList(
    pos: Memo<u64>,
    /// The state's side streams (named by [`fmt::stream`]).
    sides: Memo<Vec<u64>>,
) -> impl IntoView {
    let url: UrlState = expect_context();
    let data = LocalResource::new(move || {
        let id = url.id.get();
        let q = events_query(url.device(), pos.get() as u32);
        async move { api::events(&id, &q).await }
    });
    let line = move |e: &::api::TraceEvent| {
        format!(
            "{} {} at {:#x}, {}{}",
            e.action.name(),
            fmt::bytes(e.size_bytes),
            e.address,
            sides.with(|s| fmt::stream(e.stream, s)),
            e.site
                .as_ref()
                .map(|f| format!(" · {}", f.short()))
                .unwrap_or_default()
        )
    };
    view! {
        {move || match data.get() {
            Some(Ok(a)) if !a.around.is_empty() => {
                let current = a.around.iter().find(|e| e.position == a.position).cloned();
                view! {
                    <div class="events-around">
                        <p class="current-event">
                            {match &current {
                                Some(e) => format!("Event {}: {}", fmt::count(e.position as u64), line(e)),
                                None => "Before the first event: the state the trace started from.".to_string(),
                            }}
                        </p>
                        <ol class="event-list">
                            {a.around
                                .iter()
                                .map(|e| {
                                    let p = e.position;
                                    view! {
                                        <li
                                            class:current=p == a.position
                                            data-pos=p.to_string()
                                            on:click=move |_| url.set(&[("pos", Some(p.to_string()))])
                                        >
                                            <span class="num">{fmt::count(p as u64)}</span>
                                            " "
                                            {line(e)}
                                        </li>
                                    }
                                })
                                .collect_view()}
                        </ol>
                    </div>
                }
                    .into_any()
            }
            _ => ().into_any(),
        }}
    }
}

/// The cached-segment timeline: each segment a row (by address), a bar from its cudaMalloc to its
/// cudaFree; the chosen position as a line, the selected allocation's segment outlined with its
/// lifetime inside. Click to choose a position.
#[component]
fn SegmentTimeline(
    pos: Memo<u64>,
    events: u64,
    spans: LocalResource<Result<::api::SegmentSpans, String>>,
    selected: LocalResource<Option<Result<::api::AllocationInfo, String>>>,
) -> impl IntoView {
    let url: UrlState = expect_context();
    let canvas = NodeRef::<leptos::html::Canvas>::new();
    Effect::new(move |_| {
        let (Some(Ok(d)), Some(c)) = (spans.get(), canvas.get()) else {
            return;
        };
        let (w, h) = logical_size(&c);
        let g = sharp(&c, w, h);
        g.set_fill_style_str(&ink(Ink::Paper));
        g.fill_rect(0.0, 0.0, w, h);
        let ev = events.max(1) as f64;
        let x = Scale::new(0.0, ev, 0.0, w);
        // Every segment inside the canvas (under a pixel a row past 120 of them), so a selected
        // allocation's row is always drawn.
        let row = (h / d.segments.len().max(1) as f64).min(10.0);
        for (i, s) in d.segments.iter().enumerate() {
            let start = s.start_event().unwrap_or(0) as f64;
            let end = s.end_event().map_or(ev, |e| e as f64);
            g.set_fill_style_str(match (s.is_expandable, s.segment_type) {
                (true, _) => "#12b886",
                (false, ::api::SegmentType::Small) => "#74c0fc",
                _ => "#4c6ef5",
            });
            g.fill_rect(
                x.at(start),
                i as f64 * row,
                (x.at(end) - x.at(start)).max(1.0),
                (row - 1.0).max(1.0),
            );
        }
        // The selection: its segment's row outlined, its own lifetime drawn inside it.
        if let Some(Some(Ok(a))) = selected.get()
            && let Some(i) = a.segment
        {
            let y = i as f64 * row;
            let (from, to) = (
                a.alloc_event.map_or(0.0, |e| e as f64),
                a.free_event.map_or(ev, |e| e as f64),
            );
            g.set_stroke_style_str(&ink(Ink::Text));
            g.set_line_width(1.0);
            g.stroke_rect(0.5, y - 1.5, w - 1.0, row + 2.0);
            g.set_fill_style_str(&ink(Ink::Select));
            g.fill_rect(
                x.at(from),
                y,
                (x.at(to) - x.at(from)).max(2.0),
                (row - 1.0).max(1.0),
            );
        }
        g.set_fill_style_str(&ink(Ink::Danger));
        g.fill_rect(x.at(pos.get() as f64) - 1.0, 0.0, 2.0, h);
    });
    let on_click = move |e: web_sys::MouseEvent| {
        let Some(c) = canvas.get() else { return };
        let (px, _) = pointer(&c, &e);
        let x = Scale::new(0.0, events as f64, 0.0, logical_size(&c).0);
        let p = x.inv(px).round().clamp(0.0, events as f64) as u64;
        url.set(&[("pos", Some(p.to_string()))]);
    };
    view! {
        <h3>"Cached segments over the trace (click to choose a moment)"</h3>
        <canvas id="segment-timeline" node_ref=canvas width=crate::canvas::content_width(600.0, 1200.0) as u32 height="120" on:click=on_click></canvas>
        <p class="seg-legend span-legend">
            <span class="key"><i style="background:#4c6ef5"></i>"large-pool segment"</span>
            <span class="key"><i style="background:#74c0fc"></i>"small-pool segment"</span>
            <span class="key"><i style="background:#12b886"></i>"expandable segment's mapped pages"</span>
            <span class="muted">"a bar from cudaMalloc (or segment_map) to cudaFree (or segment_unmap)"</span>
        </p>
    }
}
