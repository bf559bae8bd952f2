//! memscope's dashboard: the library page (upload, search, tags), a page per snapshot with its
//! views (overview, timeline, segments, stacks, leaks, OOM), two snapshots compared, a job's ranks
//! side by side (a run), will it fit at a larger size (predicted from small recordings), and the live
//! pages (fleet, GPU, process). Everything large is computed by the server; the browser gets
//! reduced windows (`api` types, decoded in `api.rs`) and draws them on canvases. The one
//! exception: a large file chosen alone is also read in a worker while it uploads (`local/`),
//! so its page opens on its timeline before the upload lands.
//!
//! Module map: `pages/` one file per page or tab; `api.rs` the one module that talks to the
//! server; `local/` the page's own reading of a file; `url.rs` a snapshot page's URL state; `canvas.rs` what the charts share; `categories.rs`
//! each category's colour; `fmt.rs` formatting. Pages import these, never each other's parents.

mod api;
mod canvas;
mod categories;
mod export;
mod fmt;
mod local;
mod pages;
mod url;

use leptos::prelude::*;
use leptos_router::components::{A, Route, Router, Routes};
use leptos_router::path;
use wasm_bindgen::prelude::*;

#[wasm_bindgen(start)]
pub fn start() {
    // The same module runs in the page's reading worker (`local/`), which has no page.
    if web_sys::window().is_none() {
        return;
    }
    mount_to_body(App);
}

#[component]
fn App() -> impl IntoView {
    use pages::{diff, fit, help, library, live, run, snapshot};
    provide_context(help::HelpOpen(RwSignal::new(None)));
    provide_context(local::Landings::new());
    view! {
        <Router>
            <header class="top">
                <A href="/"><span class="logo">"memscope"</span></A>
                <span class="tagline">"GPU memory observatory for PyTorch"</span>
                <nav><A href="/">"Snapshots"</A><A href="/live">"Live"</A></nav>
                <help::HelpOverlay/>
            </header>
            <main>
                <Routes fallback=pages::not_found::NotFound>
                    <Route path=path!("/") view=library::Library/>
                    <Route path=path!("/s/:id") view=snapshot::SnapshotPage/>
                    <Route path=path!("/diff/:a/:b") view=diff::DiffPage/>
                    <Route path=path!("/runs/:id") view=run::RunPage/>
                    <Route path=path!("/fit") view=fit::FitPage/>
                    <Route path=path!("/compare") view=pages::sweep::SweepPage/>
                    <Route path=path!("/live") view=live::fleet::FleetPage/>
                    <Route path=path!("/live/gpu/:uuid") view=live::gpu::GpuPage/>
                    <Route path=path!("/live/process/:host/:pid") view=live::process::ProcessPage/>
                </Routes>
            </main>
        </Router>
    }
}
