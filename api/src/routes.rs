//! Every route: its pattern (what the server's router matches, axum's `{param}` syntax) and one
//! function that builds its URL (what the dashboard and the tests request). Patterns and builders
//! sit side by side so they cannot drift; `server/tests/it/api.rs` requests every builder's URL.

use serde::Serialize;

use crate::diff::DiffQuery;
use crate::library::{ListQuery, UploadQuery};
use crate::live::WindowQuery;
use crate::runs::RunSeriesQuery;
use crate::views::{DeviceQuery, EventsQuery, PositionQuery, StacksQuery, TimelineQuery};
use crate::whatif::WhatIfQuery;

pub const HEALTH: &str = "/api/health";
/// `POST` with `Authorization: Bearer TOKEN`: the server sets the dashboard's token cookie
/// (HttpOnly, for this port); `DELETE` clears it.
pub const SESSION: &str = "/api/session";
pub const SNAPSHOTS: &str = "/api/snapshots";
/// The dashboard's worker script: the page's own reading of a large file while it uploads.
pub const WORKER_JS: &str = "/pkg/worker.js";
pub const SNAPSHOT: &str = "/api/snapshots/{id}";
pub const INFO: &str = "/api/snapshots/{id}/info";
pub const ORIGINAL: &str = "/api/snapshots/{id}/original";
pub const TIMELINE: &str = "/api/snapshots/{id}/timeline";
pub const STATE: &str = "/api/snapshots/{id}/state";
pub const STACKS: &str = "/api/snapshots/{id}/stacks";
pub const SEGMENTS: &str = "/api/snapshots/{id}/segments";
pub const FRAMES: &str = "/api/snapshots/{id}/frames/{stack}";
pub const ALLOCATION: &str = "/api/snapshots/{id}/allocations/{n}";
pub const EVENTS: &str = "/api/snapshots/{id}/events";
pub const WHATIF: &str = "/api/snapshots/{id}/whatif";
/// The what-if as far as its replays have got; asking starts them.
pub const WHATIF_PROGRESS: &str = "/api/snapshots/{id}/whatif/progress";
pub const CATEGORIES: &str = "/api/snapshots/{id}/categories";
/// A report to share (`?format=html|md`): the file `memscope report` writes.
pub const REPORT: &str = "/api/snapshots/{id}/report";
pub const UPLOAD_PROGRESS: &str = "/api/uploads/{token}";
pub const DIFF: &str = "/api/diff/{a}/{b}";
pub const RUNS: &str = "/api/runs";
pub const RUN: &str = "/api/runs/{id}";
pub const RUN_SERIES: &str = "/api/runs/{id}/series";
pub const PREDICT: &str = "/api/predict";
pub const INGEST: &str = "/api/ingest";
pub const METRICS: &str = "/metrics";
pub const LIVE_FLEET: &str = "/api/live/fleet";
pub const LIVE_GPU: &str = "/api/live/gpus/{uuid}";
pub const LIVE_PROCESS: &str = "/api/live/processes/{host}/{pid}";
pub const LIVE_STREAM: &str = "/api/live/stream";

/// The dashboard's own pages (served by the server, routed in the browser).
pub const PAGE_LIBRARY: &str = "/";
pub const PAGE_SNAPSHOT: &str = "/s/{id}";
pub const PAGE_DIFF: &str = "/diff/{a}/{b}";
pub const PAGE_RUN: &str = "/runs/{id}";
pub const PAGE_FIT: &str = "/fit";
/// Several snapshots at once (`?ids=A,B,C`): a sweep, say of batch sizes.
pub const PAGE_COMPARE: &str = "/compare";
pub const PAGE_LIVE: &str = "/live";
pub const PAGE_LIVE_GPU: &str = "/live/gpu/{uuid}";
pub const PAGE_LIVE_PROCESS: &str = "/live/process/{host}/{pid}";

/// A path segment or query value percent-encoded (RFC 3986 unreserved characters kept).
pub fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `path?query` with the query's set fields, or `path` when none is set.
fn with_query(path: String, q: &impl Serialize) -> String {
    let qs = serde_urlencoded::to_string(q).expect("query types serialise to a query string");
    if qs.is_empty() {
        path
    } else {
        format!("{path}?{qs}")
    }
}

fn snapshot_path(id: &str, tail: &str) -> String {
    format!("/api/snapshots/{}{tail}", encode(id))
}

pub fn health() -> String {
    HEALTH.to_string()
}
/// The library, or the entries `q` matches.
pub fn snapshots(q: &ListQuery) -> String {
    with_query(SNAPSHOTS.to_string(), q)
}
/// Where to POST an upload.
pub fn upload(q: &UploadQuery) -> String {
    with_query(SNAPSHOTS.to_string(), q)
}
pub fn upload_progress(token: &str) -> String {
    format!("/api/uploads/{}", encode(token))
}
/// The report (GET), a rename (PATCH), removal (DELETE).
pub fn snapshot(id: &str) -> String {
    snapshot_path(id, "")
}
pub fn info(id: &str) -> String {
    snapshot_path(id, "/info")
}
pub fn original(id: &str) -> String {
    snapshot_path(id, "/original")
}
pub fn timeline(id: &str, q: &TimelineQuery) -> String {
    with_query(snapshot_path(id, "/timeline"), q)
}
pub fn state(id: &str, q: &PositionQuery) -> String {
    with_query(snapshot_path(id, "/state"), q)
}
pub fn stacks(id: &str, q: &StacksQuery) -> String {
    with_query(snapshot_path(id, "/stacks"), q)
}
pub fn segments(id: &str, q: &DeviceQuery) -> String {
    with_query(snapshot_path(id, "/segments"), q)
}
pub fn events(id: &str, q: &EventsQuery) -> String {
    with_query(snapshot_path(id, "/events"), q)
}
pub fn whatif(id: &str, q: &WhatIfQuery) -> String {
    with_query(snapshot_path(id, "/whatif"), q)
}
pub fn whatif_progress(id: &str, q: &WhatIfQuery) -> String {
    with_query(snapshot_path(id, "/whatif/progress"), q)
}
pub fn categories(id: &str, q: &crate::categories::CategoriesQuery) -> String {
    with_query(snapshot_path(id, "/categories"), q)
}
pub fn report(id: &str, q: &crate::ReportQuery) -> String {
    with_query(snapshot_path(id, "/report"), q)
}
pub fn frames(id: &str, stack: crate::StackId) -> String {
    snapshot_path(id, &format!("/frames/{}", stack.0))
}
pub fn allocation(id: &str, n: u32, q: &DeviceQuery) -> String {
    with_query(snapshot_path(id, &format!("/allocations/{n}")), q)
}
pub fn diff(a: &str, b: &str, q: &DiffQuery) -> String {
    with_query(format!("/api/diff/{}/{}", encode(a), encode(b)), q)
}
/// The runs in the library (jobs whose snapshots carry ranks).
pub fn runs() -> String {
    RUNS.to_string()
}
/// A run's report; `id` is its job.
pub fn run(id: &str) -> String {
    format!("/api/runs/{}", encode(id))
}
pub fn run_series(id: &str, q: &RunSeriesQuery) -> String {
    with_query(format!("/api/runs/{}/series", encode(id)), q)
}
pub fn predict(q: &crate::predict::PredictQuery) -> String {
    with_query(PREDICT.to_string(), q)
}
pub fn ingest() -> String {
    INGEST.to_string()
}
pub fn metrics() -> String {
    METRICS.to_string()
}
pub fn live_fleet() -> String {
    LIVE_FLEET.to_string()
}
pub fn live_gpu(uuid: &str, q: &WindowQuery) -> String {
    with_query(format!("/api/live/gpus/{}", encode(uuid)), q)
}
pub fn live_process(host: &str, pid: i64, q: &WindowQuery) -> String {
    with_query(format!("/api/live/processes/{}/{pid}", encode(host)), q)
}
pub fn live_stream() -> String {
    LIVE_STREAM.to_string()
}

/// The dashboard's pages.
pub mod page {
    use super::encode;

    pub fn library() -> String {
        super::PAGE_LIBRARY.to_string()
    }
    /// A snapshot's page as it opens (the overview).
    pub fn snapshot_home(id: &str) -> String {
        format!("/s/{}", encode(id))
    }
    /// A snapshot's page with these query pairs (view, device, window, …), in order.
    pub fn snapshot<K: AsRef<str>, V: AsRef<str>>(id: &str, pairs: &[(K, V)]) -> String {
        let qs: Vec<String> = pairs
            .iter()
            .map(|(k, v)| format!("{}={}", k.as_ref(), encode(v.as_ref())))
            .collect();
        if qs.is_empty() {
            format!("/s/{}", encode(id))
        } else {
            format!("/s/{}?{}", encode(id), qs.join("&"))
        }
    }
    /// `b` against `a`; `?device_a=&device_b=` when chosen.
    pub fn diff(a: &str, b: &str, q: &crate::diff::DiffQuery) -> String {
        super::with_query(format!("/diff/{}/{}", encode(a), encode(b)), q)
    }
    /// Several snapshots compared at once, in the order given (the page orders them by what
    /// was swept).
    pub fn compare<S: AsRef<str>>(ids: &[S]) -> String {
        let ids: Vec<String> = ids.iter().map(|i| encode(i.as_ref())).collect();
        format!("{}?ids={}", super::PAGE_COMPARE, ids.join(","))
    }
    /// Will it fit: the recordings (`id:size`), the GPU or limit and the setting, as the API's
    /// query.
    pub fn fit(q: &crate::predict::PredictQuery) -> String {
        super::with_query(super::PAGE_FIT.to_string(), q)
    }
    /// A run's page (its ranks side by side).
    pub fn run(id: &str) -> String {
        format!("/runs/{}", encode(id))
    }
    pub fn live() -> String {
        super::PAGE_LIVE.to_string()
    }
    pub fn live_gpu(uuid: &str) -> String {
        format!("/live/gpu/{}", encode(uuid))
    }
    /// A process's page; `?start=` (its start time, ms) tells a reused pid apart.
    pub fn live_process(host: &str, pid: i64, start_time_ms: Option<i64>) -> String {
        match start_time_ms {
            Some(s) => format!("/live/process/{}/{pid}?start={s}", encode(host)),
            None => format!("/live/process/{}/{pid}", encode(host)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Axis, FlameFrames};

    #[test]
    fn builders_fill_their_patterns_and_leave_unset_parameters_out() {
        assert_eq!(
            timeline(
                "ab12",
                &TimelineQuery {
                    axis: Some(Axis::Event),
                    from: Some(10.0),
                    to: Some(20.5),
                    buckets: Some(100),
                    ..Default::default()
                }
            ),
            "/api/snapshots/ab12/timeline?axis=event&from=10.0&to=20.5&buckets=100"
        );
        assert_eq!(
            stacks(
                "x",
                &StacksQuery {
                    frames: Some(FlameFrames::Python),
                    ..Default::default()
                }
            ),
            "/api/snapshots/x/stacks?frames=python"
        );
        assert_eq!(
            segments("x", &DeviceQuery::default()),
            "/api/snapshots/x/segments"
        );
        assert_eq!(
            snapshots(&ListQuery {
                q: Some("job=a b".into())
            }),
            "/api/snapshots?q=job%3Da+b"
        );
        assert_eq!(
            live_process("gpu 7", 12, &WindowQuery::default()),
            "/api/live/processes/gpu%207/12"
        );
        assert_eq!(page::compare(&["a b", "c"]), "/compare?ids=a%20b,c");
        assert_eq!(
            page::snapshot("x", &[("view", "timeline"), ("filter", "a.py:3")]),
            "/s/x?view=timeline&filter=a.py%3A3"
        );
    }

    /// Each builder's path has the same segments as its pattern.
    #[test]
    fn builders_match_their_patterns() {
        let pairs = [
            (SNAPSHOT, snapshot("i")),
            (INFO, info("i")),
            (ORIGINAL, original("i")),
            (TIMELINE, timeline("i", &Default::default())),
            (STATE, state("i", &Default::default())),
            (STACKS, stacks("i", &Default::default())),
            (SEGMENTS, segments("i", &Default::default())),
            (FRAMES, frames("i", crate::StackId(3))),
            (UPLOAD_PROGRESS, upload_progress("t")),
            (DIFF, diff("a", "b", &Default::default())),
            (RUN, run("j")),
            (RUN_SERIES, run_series("j", &Default::default())),
            (LIVE_GPU, live_gpu("u", &Default::default())),
            (LIVE_PROCESS, live_process("h", 1, &Default::default())),
            (PAGE_DIFF, page::diff("a", "b", &Default::default())),
            (PAGE_COMPARE, page::compare(&["a", "b", "c"])),
        ];
        for (pattern, url) in pairs {
            let p: Vec<&str> = pattern.split('/').collect();
            let u: Vec<&str> = url.split('?').next().unwrap().split('/').collect();
            assert_eq!(p.len(), u.len(), "{pattern} vs {url}");
            for (a, b) in p.iter().zip(&u) {
                assert!(a.starts_with('{') || a == b, "{pattern} vs {url}");
            }
        }
    }
}
