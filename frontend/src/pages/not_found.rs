//! The page for an address the dashboard has no page at (a mistyped link, a page from another
//! version): says so, shows the address, and offers the ways in, instead of a bare error. The
//! server answers such paths with this app and status 404.

use leptos::prelude::*;

#[component]
pub fn NotFound() -> impl IntoView {
    let path = web_sys::window()
        .and_then(|w| w.location().pathname().ok())
        .unwrap_or_default();
    view! {
        <section class="not-found">
            <h1>"No page here"</h1>
            <p>"memscope has no page at " <code>{path}</code> "."</p>
            <ul>
                <li><a href="/">"The library"</a>" — your snapshots, and where to drop new ones"</li>
                <li><a href="/live">"Live"</a>" — the GPUs and processes collectors report"</li>
                <li><a href="/fit">"Will it fit"</a>" — a larger batch, predicted from small recordings"</li>
            </ul>
            <p class="hint">"A link to a snapshot looks like /s/0123456789abcdef; press ? for the keys and what the words mean."</p>
        </section>
    }
}
