//! Small pieces of markup several pages use: a labelled figure, a list of frames.

use leptos::prelude::*;

/// A figure with its label (`.kv`).
pub fn kv(label: &'static str, value: String) -> impl IntoView {
    view! {
        <div class="kv">
            <span class="k">{label}</span>
            <span class="v">{value}</span>
        </div>
    }
}

/// The first `max` frames of a stack, one per line (`file.py:12 function`).
pub fn frames_list(frames: &[::api::Frame], max: usize) -> impl IntoView + use<> {
    let items: Vec<String> = frames.iter().take(max).map(::api::Frame::short).collect();
    view! { <ol class="frames">{items.into_iter().map(|f| view! { <li>{f}</li> }).collect_view()}</ol> }
}
