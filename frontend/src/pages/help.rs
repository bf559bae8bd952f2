//! Help inside the app, for someone who has not read the README: the "?" overlay (keyboard
//! shortcuts and a glossary of the allocator's words), the glossary terms a figure's label links
//! to ([`Term`]), and the keys every page shares ("?" opens the overlay, Esc closes it). Each
//! page adds its own keys (a snapshot's tabs, the timeline's pan and zoom) in its own module.

use leptos::prelude::*;

/// One word of the allocator a figure is labelled with, and what it means.
pub struct Entry {
    /// The anchor: `glossary-{key}` in the overlay, `data-term` on a label.
    pub key: &'static str,
    pub term: &'static str,
    pub meaning: &'static str,
}

/// What the dashboard's labels say, in the order a newcomer meets them.
pub const GLOSSARY: [Entry; 11] = [
    Entry {
        key: "reserved",
        term: "reserved",
        meaning: "Memory PyTorch's caching allocator holds from the GPU driver (cudaMalloc'd segments), used or not. torch.cuda.memory_reserved(). What nvidia-smi shows, less the CUDA context.",
    },
    Entry {
        key: "allocated",
        term: "allocated",
        meaning: "Memory in blocks handed to tensors right now, after the allocator rounded each request up (to 512 bytes, or 2 MiB for large ones). torch.cuda.memory_allocated().",
    },
    Entry {
        key: "requested",
        term: "requested",
        meaning: "The bytes the tensors asked for, before rounding. The peak memscope reports is the peak of this: what the program itself needed.",
    },
    Entry {
        key: "active",
        term: "active",
        meaning: "A block in use: allocated to a tensor, or freed by Python but still waiting for a stream to finish with it (pending free).",
    },
    Entry {
        key: "inactive-split",
        term: "inactive split",
        meaning: "Free pieces of a segment that also holds allocated blocks. The allocator can reuse them only for requests that fit; the segment cannot be returned to the driver while any part is allocated.",
    },
    Entry {
        key: "pending-free",
        term: "pending free",
        meaning: "Blocks freed in Python but not yet reusable: another stream used them (tensor.record_stream) and the allocator waits for that stream's work to finish (free_requested, then free_completed).",
    },
    Entry {
        key: "rounding-waste",
        term: "rounding waste",
        meaning: "allocated − requested: what the allocator's rounding adds to each block (the dark tail of a block in the segment map).",
    },
    Entry {
        key: "fragmentation",
        term: "fragmentation",
        meaning: "Reserved memory that is free but split into pieces too small, or in the wrong segments, for the next request: an OOM with much free memory. The What if tab replays the trace under settings that reduce it.",
    },
    Entry {
        key: "expandable-segments",
        term: "expandable segments",
        meaning: "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: segments that grow by mapping more pages at their end instead of new cudaMalloc calls, so freed space is reused without splits. Often removes fragmentation OOMs.",
    },
    Entry {
        key: "segment",
        term: "segment",
        meaning: "One allocation from the driver (cudaMalloc, or one expandable mapping), carved into blocks. Small requests (≤ 1 MiB) share 2 MiB segments; large ones get their own.",
    },
    Entry {
        key: "stream",
        term: "stream",
        meaning: "A CUDA queue of work. Each block belongs to the stream it was allocated on; 'default' is the stream PyTorch uses unless told otherwise, 'side stream N' any other.",
    },
];

/// The keys, as the overlay lists them.
pub const SHORTCUTS: [(&str, &str); 9] = [
    ("?", "this help"),
    ("Esc", "close this help or a pinned allocation"),
    (
        "1 … 7",
        "a snapshot's tabs: Overview, Timeline, Segments, Stacks, Leaks, OOM, What if",
    ),
    ("← →", "timeline: pan (Shift: a whole window)"),
    ("+ −", "timeline: zoom in and out around the middle"),
    ("0", "timeline: the whole trace"),
    (
        "n  p",
        "next and previous OOM or leak suspect (timeline, OOM and Leaks tabs)",
    ),
    (
        "/",
        "search call sites (the Stacks tab; on the timeline, its allocation filter)",
    ),
    (
        "Shift + ← →",
        "segments: a hundred events at a time (← → one)",
    ),
];

/// The entry for `key`.
pub fn entry(key: &str) -> Option<&'static Entry> {
    GLOSSARY.iter().find(|e| e.key == key)
}

/// Whether the overlay is open, and at which term (`Some("")`: at the top).
#[derive(Clone, Copy)]
pub struct HelpOpen(pub RwSignal<Option<&'static str>>);

/// A figure's label that explains itself: dotted underline, the meaning on hover, and a click
/// opens the glossary at it.
#[component]
pub fn Term(key: &'static str, children: Children) -> impl IntoView {
    let help: HelpOpen = expect_context();
    let meaning = entry(key).map_or("", |e| e.meaning);
    view! {
        <span
            class="term"
            data-term=key
            title=meaning
            tabindex="0"
            role="button"
            on:click=move |ev| {
                ev.stop_propagation();
                help.0.set(Some(key));
            }
        >
            {children()}
        </span>
    }
}

/// Whether a key press belongs to a field being typed in (shortcuts leave those alone).
pub fn typing(ev: &web_sys::KeyboardEvent) -> bool {
    use wasm_bindgen::JsCast;
    ev.target()
        .and_then(|t| t.dyn_into::<web_sys::Element>().ok())
        .is_some_and(|el| matches!(el.tag_name().as_str(), "INPUT" | "TEXTAREA" | "SELECT"))
        || ev.ctrl_key()
        || ev.meta_key()
        || ev.alt_key()
}

/// Listens for a view's keyboard shortcuts while it is mounted: `handle` gets each key press not
/// typed into a field while the help overlay is closed, and runs inside the view's owner (a
/// window listener runs outside it, and navigating needs the router's context); when it returns
/// true the key was a shortcut and the browser's own action for it is prevented.
pub fn on_shortcut(handle: impl Fn(&web_sys::KeyboardEvent) -> bool + 'static) {
    let help: Option<HelpOpen> = use_context();
    let owner = Owner::current();
    let keys = window_event_listener(leptos::ev::keydown, move |ev| {
        if help.is_some_and(|h| h.0.get_untracked().is_some()) || typing(&ev) {
            return;
        }
        let handled = match &owner {
            Some(o) => o.with(|| handle(&ev)),
            None => handle(&ev),
        };
        if handled {
            ev.prevent_default();
        }
    });
    on_cleanup(move || keys.remove());
}

/// The overlay, and the keys that open and close it; mounted once, by the app (which provides
/// [`HelpOpen`] to every page).
#[component]
pub fn HelpOverlay() -> impl IntoView {
    let help: HelpOpen = expect_context();
    let keys = window_event_listener(leptos::ev::keydown, move |ev| {
        let open = help.0.get_untracked().is_some();
        match ev.key().as_str() {
            "Escape" if open => help.0.set(None),
            "?" if !typing(&ev) => help.0.set(if open { None } else { Some("") }),
            _ => {}
        }
    });
    on_cleanup(move || keys.remove());
    // Opened at a term: that term in view, marked.
    Effect::new(move |_| {
        if let Some(key) = help.0.get().filter(|k| !k.is_empty()) {
            let el = web_sys::window()
                .and_then(|w| w.document())
                .and_then(|d| d.get_element_by_id(&format!("glossary-{key}")));
            if let Some(el) = el {
                el.scroll_into_view();
            }
        }
    });
    view! {
        <button class="help-button" title="Help: shortcuts and what the words mean (?)"
            on:click=move |_| help.0.update(|h| *h = if h.is_some() { None } else { Some("") })>
            "?"
        </button>
        {move || help.0.get().map(|at| view! {
            <div class="help-backdrop" on:click=move |_| help.0.set(None)>
                <div class="help-overlay" role="dialog" aria-label="memscope help"
                    on:click=|ev| ev.stop_propagation()>
                    <button class="help-close" title="Close (Esc)" on:click=move |_| help.0.set(None)>"×"</button>
                    <h2>"Keyboard"</h2>
                    <table class="shortcuts">
                        {SHORTCUTS
                            .iter()
                            .map(|(k, what)| view! { <tr><td><kbd>{*k}</kbd></td><td>{*what}</td></tr> })
                            .collect_view()}
                    </table>
                    <h2>"What the words mean"</h2>
                    <dl class="glossary">
                        {GLOSSARY
                            .iter()
                            .map(|e| view! {
                                <div id=format!("glossary-{}", e.key) class="glossary-entry" class:marked=at == e.key>
                                    <dt>{e.term}</dt>
                                    <dd>{e.meaning}</dd>
                                </div>
                            })
                            .collect_view()}
                    </dl>
                </div>
            </div>
        })}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_term_has_a_unique_anchor_and_a_meaning() {
        let keys: std::collections::HashSet<_> = GLOSSARY.iter().map(|e| e.key).collect();
        assert_eq!(keys.len(), GLOSSARY.len());
        for e in &GLOSSARY {
            assert!(
                e.key.chars().all(|c| c.is_ascii_lowercase() || c == '-'),
                "{}",
                e.key
            );
            assert!(e.meaning.len() > 40, "{}", e.key);
        }
        // The list, each present.
        for key in [
            "reserved",
            "allocated",
            "active",
            "inactive-split",
            "pending-free",
            "rounding-waste",
            "fragmentation",
            "expandable-segments",
        ] {
            assert!(entry(key).is_some(), "{key}");
        }
    }
}
