//! Links the live pages share: a process's page, an OOM's snapshot.

use leptos::prelude::*;

/// A process's page (`start_time_ms` tells a reused pid apart).
pub fn process_href(host: &str, pid: i64, start_time_ms: Option<i64>) -> String {
    ::api::routes::page::live_process(host, pid, start_time_ms)
}

/// "open snapshot" for an event whose snapshot the agent uploaded (its OOM report).
pub fn snapshot_link(e: &::api::LiveEvent) -> impl IntoView + use<> {
    e.snapshot_id.as_ref().map(|id| {
        let href = ::api::routes::page::snapshot(id, &[("view", "oom")]);
        view! { <a class="snap-link" href=href>"open snapshot"</a> }
    })
}
