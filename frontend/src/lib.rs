//! memscope's dashboard: the library page (upload, search, tags) and a page per snapshot with its
//! views (overview, timeline, segments, stacks, leaks, OOM), and the live pages (fleet, GPU,
//! process). Everything large is computed by the server; the browser gets reduced windows and
//! draws them on canvases.

mod api;
mod diff;
mod fmt;
mod library;
mod live;
mod snapshot;
mod timeline;

use leptos::prelude::*;
use leptos_router::components::{A, Route, Router, Routes};
use leptos_router::path;
use wasm_bindgen::prelude::*;

#[wasm_bindgen(start)]
pub fn start() {
    mount_to_body(App);
}

#[component]
fn App() -> impl IntoView {
    view! {
        <Router>
            <header class="top">
                <A href="/"><span class="logo">"memscope"</span></A>
                <span class="tagline">"GPU memory observatory for PyTorch"</span>
                <nav><A href="/">"Snapshots"</A><A href="/live">"Live"</A></nav>
            </header>
            <main>
                <Routes fallback=|| view! { <p class="error">"No such page."</p> }>
                    <Route path=path!("/") view=library::Library/>
                    <Route path=path!("/s/:id") view=snapshot::SnapshotPage/>
                    <Route path=path!("/diff/:a/:b") view=diff::DiffPage/>
                    <Route path=path!("/live") view=live::FleetPage/>
                    <Route path=path!("/live/gpu/:uuid") view=live::GpuPage/>
                    <Route path=path!("/live/process/:host/:pid") view=live::ProcessPage/>
                </Routes>
            </main>
        </Router>
    }
}
