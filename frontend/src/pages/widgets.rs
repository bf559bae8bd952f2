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

/// A figure whose label is a glossary term (`help::GLOSSARY`'s `term`): the label explains
/// itself on hover and opens the glossary on a click.
pub fn kv_term(term: &'static str, label: &'static str, value: String) -> impl IntoView {
    use crate::pages::help::Term;
    view! {
        <div class="kv">
            <span class="k"><Term key=term>{label}</Term></span>
            <span class="v">{value}</span>
        </div>
    }
}

/// A GPU model as a picker's option: its name and size, said to be measured or listed, with
/// where the size comes from on hover.
pub fn gpu_option(g: &snapshot::gpus::GpuModel, selected: bool) -> impl IntoView + use<> {
    let how = match g.source {
        snapshot::gpus::SizeSource::Measured(_) => "measured",
        snapshot::gpus::SizeSource::Listed => "listed",
    };
    view! {
        <option value=g.name selected=selected title=g.source.words() data-source=how>
            {format!("{} · {} ({how})", g.name, crate::fmt::bytes(g.total_bytes))}
        </option>
    }
}

/// The first `max` frames of a stack, one per line (`file.py:12 function`).
pub fn frames_list(frames: &[::api::Frame], max: usize) -> impl IntoView + use<> {
    let items: Vec<String> = frames.iter().take(max).map(::api::Frame::short).collect();
    view! { <ol class="frames">{items.into_iter().map(|f| view! { <li>{f}</li> }).collect_view()}</ol> }
}

/// A stack as a person reads it: the user's own frames, then PyTorch's and C++ plumbing folded
/// behind a toggle (`details.plumbing`). `frames` come user frames first (the server's order).
pub fn stack_frames(frames: &[::api::Frame]) -> impl IntoView + use<> {
    let (user, other): (Vec<&::api::Frame>, Vec<&::api::Frame>) = frames
        .iter()
        .partition(|f| snapshot::frames::is_user(&f.filename));
    let line = |f: &::api::Frame| view! { <li>{f.short()}</li> };
    let user: Vec<_> = user.into_iter().map(line).collect();
    let n_other = other.len();
    let other: Vec<_> = other.into_iter().map(line).collect();
    view! {
        <div class="stack">
            {(!user.is_empty()).then(|| view! { <ol class="frames user">{user}</ol> })}
            {(n_other > 0).then(|| view! {
                <details class="plumbing">
                    <summary>{format!("{n_other} more frames (PyTorch, C++)")}</summary>
                    <ol class="frames">{other}</ol>
                </details>
            })}
        </div>
    }
}

/// An error as a person reads it: one line, the particulars (offsets, opcodes, server detail in
/// the final parenthesis) behind a "details" toggle.
pub fn error_line(message: String) -> impl IntoView {
    let (say, more) = crate::fmt::error_parts(&message);
    view! { <p class="error">{say}{error_details(more)}</p> }
}

/// An error's particulars behind a "details" toggle (nothing when there are none).
pub fn error_details(more: Option<String>) -> impl IntoView {
    more.map(|m| {
        view! {
            <details class="error-details">
                <summary>"details"</summary>
                <code>{m}</code>
            </details>
        }
    })
}
