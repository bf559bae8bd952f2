//! The JSON API through `app(state)` with `oneshot`, on a temporary data folder; and once on a
//! real port across a restart.

use std::path::PathBuf;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use server::state::AppState;
use tower::ServiceExt;

use crate::support::app::fixture_bytes as fixture;
use crate::support::app::{error_message, get_as};

fn temp_dir(tag: &str) -> PathBuf {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let d = std::env::temp_dir().join(format!("memscope-api-{tag}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

async fn call(
    state: &AppState,
    method: &str,
    uri: &str,
    body: Vec<u8>,
) -> (StatusCode, serde_json::Value) {
    let req = Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", "application/json")
        .body(Body::from(body))
        .unwrap();
    let res = server::http::app(state.clone()).oneshot(req).await.unwrap();
    let status = res.status();
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    let json = if bytes.is_empty() {
        serde_json::Value::Null
    } else {
        serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null)
    };
    (status, json)
}

/// A tag that is not `key=value` is refused with a message that says how to write it, on upload
/// (nothing stored) and on a retag (the tags unchanged); the server's 404s: an unknown API path
/// is "no such endpoint", an unknown page is the dashboard (its own not-found page), and the
/// favicon is served.
#[tokio::test]
async fn bare_tags_are_refused_and_unknown_paths_answer_404() {
    let (dir, state) = open_state("bare-tags").await;
    let (st, body) = call(
        &state,
        "POST",
        "/api/snapshots?name=leak.pickle&tags=job=bert,nightly",
        fixture("leak_detached_cache.pickle"),
    )
    .await;
    assert_eq!(st, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("\"nightly\" is not key=value"),
        "{body}"
    );
    let (_, list) = call(&state, "GET", "/api/snapshots", vec![]).await;
    assert_eq!(list, serde_json::json!([]), "nothing stored");

    let (st, up) = call(
        &state,
        "POST",
        "/api/snapshots?name=leak.pickle&tags=job=bert",
        fixture("leak_detached_cache.pickle"),
    )
    .await;
    assert_eq!(st, StatusCode::CREATED, "{up}");
    let id = up["id"].as_str().unwrap().to_string();
    let (st, body) = call(
        &state,
        "PATCH",
        &format!("/api/snapshots/{id}"),
        br#"{"tags":[{"key":"","value":"nightly"}]}"#.to_vec(),
    )
    .await;
    assert_eq!(st, StatusCode::BAD_REQUEST, "{body}");
    let (_, info) = call(&state, "GET", &format!("/api/snapshots/{id}/info"), vec![]).await;
    assert_eq!(
        info["tags"],
        serde_json::json!([{"key": "job", "value": "bert"}])
    );

    for (path, status, starts) in [
        ("/api/no/such/thing", StatusCode::NOT_FOUND, "{"),
        ("/no/such/page", StatusCode::NOT_FOUND, "<!doctype html>"),
        ("/favicon.svg", StatusCode::OK, "<svg"),
        ("/favicon.ico", StatusCode::OK, "<svg"),
    ] {
        let req = Request::builder().uri(path).body(Body::empty()).unwrap();
        let res = server::http::app(state.clone()).oneshot(req).await.unwrap();
        assert_eq!(res.status(), status, "{path}");
        let body = res.into_body().collect().await.unwrap().to_bytes();
        assert!(body.starts_with(starts.as_bytes()), "{path}: {body:?}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// A fresh library in a temporary folder.
async fn open_state(tag: &str) -> (PathBuf, AppState) {
    let dir = temp_dir(tag);
    let state = AppState::open(server::testing::serve_args(dir.clone()))
        .await
        .unwrap();
    (dir, state)
}

/// Uploads a fixture; returns the server's answer.
async fn upload_fixture(state: &AppState, name: &str) -> api::Uploaded {
    decode(call(state, "POST", "/api/snapshots", fixture(name)).await.1)
}

/// An answer read as the `api` type the dashboard reads it as.
fn decode<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
    serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{e}: {v}"))
}

/// Files in the data folder: originals, models and temporary files (each server's `tmp/` folder
/// holds its `.lock`, not counted).
fn files_in(dir: &std::path::Path) -> usize {
    let count = |d: std::path::PathBuf| std::fs::read_dir(d).map_or(0, |d| d.count());
    let tmp: usize = std::fs::read_dir(dir.join("tmp"))
        .map(|d| d.flatten().map(|e| count(e.path()).saturating_sub(1)).sum())
        .unwrap_or(0);
    count(dir.join("originals")) + count(dir.join("models")) + tmp
}

#[tokio::test]
async fn upload_list_get_update_delete() {
    let (dir, state) = open_state("crud").await;

    let (st, up) = call(
        &state,
        "POST",
        "/api/snapshots?name=leak.pickle&tags=job=bert,rank=0,run=nightly",
        fixture("leak_detached_cache.pickle"),
    )
    .await;
    assert_eq!(st, StatusCode::CREATED, "{up}");
    let up: api::Uploaded = decode(up);
    let id = up.id.clone();
    assert_eq!(id.len(), 16);
    assert!(up.created);
    assert_eq!(up.summary.segments, 11);
    assert_eq!(up.summary.leak_suspects, 1);
    assert_eq!(up.snapshot.tags.len(), 3);

    // Same bytes again: deduplicated.
    let (st, again) = call(
        &state,
        "POST",
        "/api/snapshots?name=other",
        fixture("leak_detached_cache.pickle"),
    )
    .await;
    assert_eq!(st, StatusCode::OK);
    let again: api::Uploaded = decode(again);
    assert_eq!((again.id.as_str(), again.created), (id.as_str(), false));

    // A compressed upload of another snapshot.
    let (st, xz) = call(
        &state,
        "POST",
        "/api/snapshots?name=big.xz",
        fixture("big_python.pickle.xz"),
    )
    .await;
    assert_eq!(st, StatusCode::CREATED);
    let xz: api::Uploaded = decode(xz);
    assert_eq!(xz.snapshot.compression, api::Compression::Xz);
    assert_eq!(xz.snapshot.entries, 250_021);

    let list: Vec<api::SnapshotInfo> =
        decode(call(&state, "GET", "/api/snapshots", vec![]).await.1);
    assert_eq!(list.len(), 2);
    let found: Vec<api::SnapshotInfo> =
        decode(call(&state, "GET", "/api/snapshots?q=bert", vec![]).await.1);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].id, id);
    let found: Vec<api::SnapshotInfo> = decode(
        call(&state, "GET", "/api/snapshots?q=rank%3D0", vec![])
            .await
            .1,
    );
    assert_eq!(found.len(), 1);

    // GET one = the same object as `memscope analyze --json`.
    let (st, report) = call(&state, "GET", &format!("/api/snapshots/{id}"), vec![]).await;
    assert_eq!(st, StatusCode::OK);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_memscope"))
        .args(["analyze", "--json"])
        .arg(
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../tests/fixtures/leak_detached_cache.pickle"),
        )
        .output()
        .unwrap();
    let cli: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report, cli);

    // Rename and retag.
    let (st, upd) = call(
        &state,
        "PATCH",
        &format!("/api/snapshots/{id}"),
        br#"{"name":"renamed","tags":[{"key":"host","value":"gpu7"}]}"#.to_vec(),
    )
    .await;
    assert_eq!(st, StatusCode::OK);
    let upd: api::SnapshotInfo = decode(upd);
    assert_eq!(upd.name, "renamed");
    assert_eq!(
        upd.tags,
        [api::Tag {
            key: "host".into(),
            value: "gpu7".into()
        }]
    );

    // Delete removes the row and the files (the model file's, written after the answer, too).
    state.library.model_writes_done().await;
    let before = files_in(&dir);
    let (st, _) = call(&state, "DELETE", &format!("/api/snapshots/{id}"), vec![]).await;
    assert_eq!(st, StatusCode::NO_CONTENT);
    assert_eq!(files_in(&dir), before - 2);
    let (st, err) = call(&state, "GET", &format!("/api/snapshots/{id}"), vec![]).await;
    assert_eq!(st, StatusCode::NOT_FOUND);
    assert!(error_message(&err).contains(&id));
}

#[tokio::test]
async fn bad_uploads_are_rejected_and_leave_nothing() {
    let dir = temp_dir("bad");
    let mut args = server::testing::serve_args(dir.clone());
    args.max_upload_bytes = 100_000;
    let state = AppState::open(args).await.unwrap();

    let (st, err) = call(
        &state,
        "POST",
        "/api/snapshots",
        b"this is not a snapshot at all".to_vec(),
    )
    .await;
    assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        error_message(&err).starts_with("not a memory snapshot"),
        "{err}"
    );

    let mut evil = b"\x80\x04\x8c\x02os\x8c\x06system\x93.".to_vec();
    let (st, err) = call(&state, "POST", "/api/snapshots", std::mem::take(&mut evil)).await;
    assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        error_message(&err).contains("pickle opcode STACK_GLOBAL at offset"),
        "{err}"
    );

    let truncated = fixture("multistream.pickle")[..20_000].to_vec();
    let (st, err) = call(&state, "POST", "/api/snapshots", truncated).await;
    assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        error_message(&err).starts_with("truncated snapshot"),
        "{err}"
    );

    let (st, err) = call(
        &state,
        "POST",
        "/api/snapshots",
        fixture("leak_detached_cache.pickle"),
    )
    .await;
    assert_eq!(st, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(error_message(&err).contains("--max-upload-bytes"));

    let (st, _) = call(&state, "POST", "/api/snapshots", vec![]).await;
    assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY);

    let (_, list) = call(&state, "GET", "/api/snapshots", vec![]).await;
    assert_eq!(list, serde_json::json!([]));
    assert_eq!(files_in(&dir), 0, "no files left behind");
}

#[tokio::test]
async fn queries_answer_from_the_model() {
    let (dir, state) = open_state("query").await;
    let up = upload_fixture(&state, "oom_fraction.pickle").await;
    let id = up.id.clone();

    // A fresh state (as after a restart): queries load the model file, not the pickle.
    std::fs::remove_file(dir.join("originals").join(&up.snapshot.sha256)).unwrap();
    let state = AppState::open(server::testing::serve_args(dir.clone()))
        .await
        .unwrap();
    let (st, tl) = call(
        &state,
        "GET",
        &format!("/api/snapshots/{id}/timeline?buckets=100&allocations=10"),
        vec![],
    )
    .await;
    assert_eq!(st, StatusCode::OK, "{tl}");
    let tl: api::TimelineAnswer = decode(tl);
    assert_eq!(tl.axis, api::Axis::Time);
    assert_eq!(tl.timeline.buckets.len(), 100);
    assert_eq!(tl.allocations.len(), 10);
    let stack = tl.allocations[0].stack;
    assert!(tl.stacks.contains_key(&stack));
    assert_eq!(tl.ooms.len(), 1);

    // A window on the event axis.
    let (_, w) = call(
        &state,
        "GET",
        &format!("/api/snapshots/{id}/timeline?axis=event&from=100&to=200&buckets=10"),
        vec![],
    )
    .await;
    let w: api::TimelineAnswer = decode(w);
    assert_eq!(
        (w.timeline.first_position, w.timeline.last_position),
        (100, 200)
    );

    let (st, s) = call(
        &state,
        "GET",
        &format!("/api/snapshots/{id}/state?position=600"),
        vec![],
    )
    .await;
    assert_eq!(st, StatusCode::OK);
    let s: api::AllocatorState = decode(s);
    assert_eq!(s.position, 600);
    assert!(!s.segments.is_empty());

    let (st, spans) = call(
        &state,
        "GET",
        &format!("/api/snapshots/{id}/segments"),
        vec![],
    )
    .await;
    assert_eq!(st, StatusCode::OK);
    let spans: api::SegmentSpans = decode(spans);
    assert_eq!(spans.segments.len(), 266);
    assert_eq!(spans.events, 1328);

    let (_, k) = call(
        &state,
        "GET",
        &format!("/api/snapshots/{id}/stacks"),
        vec![],
    )
    .await;
    let typed: api::StackReport = decode(k.clone());
    assert_eq!(typed.sites[0].site.as_ref().map(|f| f.line), Some(181));
    // Python frames by default (the snapshot has them), the choice said in the answer; all
    // frames on request, with the same total.
    assert_eq!(typed.frames, api::FlameFrames::Python);
    let (st, py) = call(
        &state,
        "GET",
        &format!("/api/snapshots/{id}/stacks?frames=python"),
        vec![],
    )
    .await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(py, k, "the default is Python frames");
    let (_, k) = call(
        &state,
        "GET",
        &format!("/api/snapshots/{id}/stacks?frames=all"),
        vec![],
    )
    .await;
    let (all, python): (api::StackReport, api::StackReport) =
        (decode(k.clone()), decode(py.clone()));
    assert_eq!(all.frames, api::FlameFrames::All);
    assert_eq!(python.flame.bytes, all.flame.bytes);
    assert!(
        serde_json::to_string(&all.flame)
            .unwrap()
            .contains(".cpp\"")
    );
    let text = serde_json::to_string(&python.flame).unwrap();
    assert!(
        !text.contains(".cpp\"") && text.contains("gen_snapshots.py"),
        "{text}"
    );
    let (st, _) = call(
        &state,
        "GET",
        &format!("/api/snapshots/{id}/stacks?frames=rust"),
        vec![],
    )
    .await;
    assert_eq!(st, StatusCode::BAD_REQUEST);

    let (_, f) = call(
        &state,
        "GET",
        &format!("/api/snapshots/{id}/frames/{}", stack.0),
        vec![],
    )
    .await;
    let _: Vec<api::Frame> = decode(f);

    let (st, e) = call(
        &state,
        "GET",
        &format!("/api/snapshots/{id}/timeline?device=5"),
        vec![],
    )
    .await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
    assert!(error_message(&e).contains("device 5"));
    let (st, _) = call(
        &state,
        "GET",
        "/api/snapshots/0000000000000000/state",
        vec![],
    )
    .await;
    assert_eq!(st, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn diff_finds_what_changed_between_two_runs() {
    let (dir, state) = open_state("diff").await;
    let a = upload_fixture(&state, "harness/steady.pickle").await.id;
    let up: api::Uploaded = decode(
        call(
            &state,
            "POST",
            "/api/snapshots?name=leak_list.pickle",
            fixture("harness/leak_list.pickle"),
        )
        .await
        .1,
    );
    let b = up.id;
    let (st, d) = call(&state, "GET", &format!("/api/diff/{a}/{b}"), vec![]).await;
    assert_eq!(st, StatusCode::OK, "{d}");
    let d: api::DiffAnswer = decode(d);
    assert_eq!(d.a.id, a);
    assert_eq!(d.b.name, "leak_list.pickle");
    // The planted leak (scenarios.py:103) is a suspect only in b, and the largest change at peak.
    let line = |f: &Option<api::Frame>| f.as_ref().map(|f| f.line);
    let leak = &d.diff.leaks[0];
    assert_eq!(line(&leak.site), Some(103));
    assert!(leak.a_bytes.is_none());
    assert!(leak.b_bytes.unwrap() > 200 << 20);
    let top = &d.diff.sites_at_peak[0];
    assert_eq!(line(&top.site), Some(103));
    assert!(top.delta_bytes > 200 << 20);
    let suspects = d
        .diff
        .figures
        .iter()
        .find(|f| f.name == "leak suspects")
        .unwrap();
    assert_eq!((suspects.a, suspects.b), (0, 1));
    // The other way round, the leak is gone.
    let back: api::DiffAnswer = decode(
        call(&state, "GET", &format!("/api/diff/{b}/{a}"), vec![])
            .await
            .1,
    );
    assert!(back.diff.leaks[0].b_bytes.is_none());
    assert!(back.diff.sites_at_peak[0].delta_bytes < 0);
    // Unknown snapshots and devices are clear errors.
    let (st, e) = call(
        &state,
        "GET",
        &format!("/api/diff/{a}/0000000000000000"),
        vec![],
    )
    .await;
    assert_eq!(st, StatusCode::NOT_FOUND, "{e}");
    let (st, e) = call(
        &state,
        "GET",
        &format!("/api/diff/{a}/{b}?device_b=7"),
        vec![],
    )
    .await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
    assert!(error_message(&e).contains("device 7"), "{e}");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn each_device_of_a_snapshot_is_queried_on_its_own() {
    // steady_train on device 0, leak_detached_cache on device 1 (tests/fixtures/make_variants.py).
    let (dir, state) = open_state("devices").await;
    let id = upload_fixture(&state, "variants/two_devices.pickle")
        .await
        .id;
    let t0: api::TimelineAnswer =
        get_as(&state, &format!("/api/snapshots/{id}/timeline?buckets=10")).await;
    let t1: api::TimelineAnswer = get_as(
        &state,
        &format!("/api/snapshots/{id}/timeline?buckets=10&device=1"),
    )
    .await;
    assert_eq!((t0.timeline.events, t1.timeline.events), (5356, 4936));
    let r: api::Report = get_as(&state, &format!("/api/snapshots/{id}")).await;
    let k1: api::StackReport =
        get_as(&state, &format!("/api/snapshots/{id}/stacks?device=1")).await;
    assert_eq!(k1.device, 1);
    assert_eq!(k1.total_bytes, r.devices[&1].peak_requested_bytes);
    assert_ne!(k1.total_bytes, r.devices[&0].peak_requested_bytes);
    let s1: api::AllocatorState =
        get_as(&state, &format!("/api/snapshots/{id}/state?device=1")).await;
    assert_eq!(s1.segments.len(), 11);
    let spans: api::SegmentSpans =
        get_as(&state, &format!("/api/snapshots/{id}/segments?device=1")).await;
    assert_eq!(spans.events, 4936);
    // The planted leak lives on device 1.
    assert_eq!(r.leak_suspects[0].device, 1);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn every_page_route_serves_the_dashboard() {
    // A shared link is loaded straight from the server: each page the app routes must answer
    // with the app, not with the API's "no such endpoint".
    let (dir, state) = open_state("pages").await;
    for path in [
        "/",
        "/s/0123456789abcdef?view=timeline",
        "/diff/0123456789abcdef/fedcba9876543210?device_b=1",
        "/runs/job%201",
        "/live",
        "/live/gpu/GPU-aaa",
        "/live/process/host/42",
    ] {
        let req = Request::builder().uri(path).body(Body::empty()).unwrap();
        let res = server::http::app(state.clone()).oneshot(req).await.unwrap();
        assert_eq!(res.status(), StatusCode::OK, "{path}");
        let body = res.into_body().collect().await.unwrap().to_bytes();
        assert!(body.starts_with(b"<!doctype html>"), "{path}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// The app's files carry a validator: every load asks again (`no-cache`: a new build is never
/// mixed with a cached old one) and is answered `304 Not Modified` with no body while the file
/// is the same, so a browser keeps the 3.9 MB wasm app, and its compiled code, across pages;
/// and a browser that accepts gzip gets them gzipped (the wasm 3.9 → 1.2 MB over a network).
#[tokio::test]
async fn the_apps_files_are_revalidated_not_fetched_again() {
    let (dir, state) = open_state("assets").await;
    let get = |path: &str, tag: Option<&str>| {
        let mut req = Request::builder().uri(path);
        if let Some(tag) = tag {
            req = req.header("if-none-match", tag);
        }
        server::http::app(state.clone()).oneshot(req.body(Body::empty()).unwrap())
    };
    let mut tags = Vec::new();
    for (path, content_type) in [
        ("/pkg/frontend_bg.wasm", "application/wasm"),
        ("/pkg/frontend.js", "text/javascript"),
        ("/style.css", "text/css"),
        (api::routes::WORKER_JS, "text/javascript"),
    ] {
        let res = get(path, None).await.unwrap();
        assert_eq!(res.status(), StatusCode::OK, "{path}");
        let header = |k: &str| res.headers()[k].to_str().unwrap().to_string();
        assert_eq!(header("content-type"), content_type, "{path}");
        assert_eq!(header("cache-control"), "no-cache", "{path}");
        let etag = header("etag");
        assert!(etag.starts_with('"') && etag.len() == 26, "{path}: {etag}");
        let body = res.into_body().collect().await.unwrap().to_bytes();
        assert!(body.len() > 100, "{path}");
        // The same tag (as sent, weak, or in a list) is answered with no body.
        for sent in [
            etag.clone(),
            format!("W/{etag}"),
            format!("\"other\", {etag}"),
        ] {
            let res = get(path, Some(&sent)).await.unwrap();
            assert_eq!(res.status(), StatusCode::NOT_MODIFIED, "{path}: {sent}");
            assert_eq!(res.headers()["etag"].to_str().unwrap(), etag, "{path}");
            assert!(
                res.into_body()
                    .collect()
                    .await
                    .unwrap()
                    .to_bytes()
                    .is_empty()
            );
        }
        // Another tag (an older build's) gets the file.
        let res = get(path, Some("\"0123456789abcdef01234567\""))
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::OK, "{path}");
        assert_eq!(res.into_body().collect().await.unwrap().to_bytes(), body);
        // A browser that accepts gzip gets the file gzipped once that copy is made (in the
        // background, started with the router): the same bytes, its own tag, and either tag
        // is answered 304. One that refuses it gets the plain file.
        let gzip = |tag: Option<&str>, accept: &str| {
            let mut req = Request::builder()
                .uri(path)
                .header("accept-encoding", accept);
            if let Some(tag) = tag {
                req = req.header("if-none-match", tag);
            }
            server::http::app(state.clone()).oneshot(req.body(Body::empty()).unwrap())
        };
        let mut zipped = None;
        for _ in 0..1000 {
            let res = gzip(None, "gzip, deflate, br").await.unwrap();
            assert_eq!(res.status(), StatusCode::OK, "{path}");
            assert_eq!(res.headers()["vary"], "accept-encoding", "{path}");
            if res.headers().get("content-encoding").is_some() {
                zipped = Some(res);
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        let zipped = zipped.expect("the gzipped copy is made");
        assert_eq!(zipped.headers()["content-encoding"], "gzip", "{path}");
        let gz_tag = zipped.headers()["etag"].to_str().unwrap().to_string();
        assert_eq!(
            gz_tag,
            format!("{}-gz\"", etag.trim_end_matches('"')),
            "{path}"
        );
        let packed = zipped.into_body().collect().await.unwrap().to_bytes();
        assert!(packed.len() < body.len(), "{path}");
        let mut unpacked = Vec::new();
        std::io::Read::read_to_end(
            &mut flate2::read::GzDecoder::new(&packed[..]),
            &mut unpacked,
        )
        .unwrap();
        assert_eq!(unpacked, body, "{path}");
        for sent in [&gz_tag, &etag] {
            let res = gzip(Some(sent), "gzip").await.unwrap();
            assert_eq!(res.status(), StatusCode::NOT_MODIFIED, "{path}: {sent}");
            assert_eq!(res.headers()["etag"].to_str().unwrap(), sent, "{path}");
        }
        let res = gzip(None, "gzip;q=0, identity").await.unwrap();
        assert!(res.headers().get("content-encoding").is_none(), "{path}");
        assert_eq!(res.into_body().collect().await.unwrap().to_bytes(), body);
        tags.push(etag);
    }
    tags.sort();
    tags.dedup();
    assert_eq!(tags.len(), 4, "each file its own tag");
    let _ = std::fs::remove_dir_all(dir);
}

/// Every URL the `api` crate builds reaches a handler of its own (not the fallback's "no such
/// endpoint"), so the dashboard's URLs and the server's router cannot drift apart.
#[tokio::test]
async fn every_api_route_builder_reaches_its_handler() {
    use api::routes;
    let (dir, state) = open_state("routes").await;
    let id = upload_fixture(&state, "multistream.pickle").await.id;
    let q = api::TimelineQuery {
        axis: Some(api::Axis::Event),
        from: Some(0.0),
        to: Some(10.0),
        buckets: Some(5),
        ..Default::default()
    };
    let window = api::WindowQuery {
        minutes: Some(5.0),
        ..Default::default()
    };
    for (method, url) in [
        ("GET", routes::health()),
        (
            "GET",
            routes::snapshots(&api::ListQuery {
                q: Some("multi".into()),
            }),
        ),
        ("GET", routes::snapshot(&id)),
        ("GET", routes::info(&id)),
        ("GET", routes::original(&id)),
        ("GET", routes::timeline(&id, &q)),
        (
            "GET",
            routes::state(
                &id,
                &api::PositionQuery {
                    device: None,
                    position: Some(3),
                },
            ),
        ),
        (
            "GET",
            routes::stacks(
                &id,
                &api::StacksQuery {
                    frames: Some(api::FlameFrames::Python),
                    ..Default::default()
                },
            ),
        ),
        ("GET", routes::segments(&id, &Default::default())),
        ("GET", routes::frames(&id, api::StackId(1))),
        (
            "GET",
            routes::events(
                &id,
                &api::EventsQuery {
                    position: Some(5),
                    ..Default::default()
                },
            ),
        ),
        ("GET", routes::whatif(&id, &Default::default())),
        ("GET", routes::whatif_progress(&id, &Default::default())),
        ("GET", routes::categories(&id, &Default::default())),
        ("GET", routes::predict(&Default::default())),
        ("GET", routes::diff(&id, &id, &Default::default())),
        ("GET", routes::runs()),
        ("GET", routes::run("no-such-job")),
        (
            "GET",
            routes::run_series("no-such-job", &Default::default()),
        ),
        ("GET", routes::upload_progress("t")),
        ("POST", routes::ingest()),
        ("GET", routes::metrics()),
        ("GET", routes::live_fleet()),
        ("GET", routes::live_gpu("GPU-aaa", &window)),
        ("GET", routes::live_process("host", 42, &window)),
        ("GET", routes::page::library()),
        ("GET", routes::page::snapshot(&id, &[("view", "timeline")])),
        ("GET", routes::page::diff(&id, &id, &Default::default())),
        ("GET", routes::page::run("job 1")),
        ("GET", routes::page::live()),
        ("GET", routes::page::live_gpu("GPU-aaa")),
        ("GET", routes::page::live_process("host", 42, Some(7))),
    ] {
        let (status, body) = call(&state, method, &url, vec![]).await;
        let fallback = serde_json::from_value::<api::ErrorBody>(body)
            .is_ok_and(|e| e.error.starts_with("no such endpoint"));
        assert!(!fallback, "{method} {url} reached no handler ({status})");
        assert_ne!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {url}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_damaged_model_is_rebuilt_from_the_original() {
    let (dir, state) = open_state("rebuild").await;
    let up = upload_fixture(&state, "multistream.pickle").await;
    let (id, sha) = (up.id.clone(), up.snapshot.sha256.clone());
    let model = dir.join("models").join(format!("{sha}.msmodel"));
    state.library.model_writes_done().await;
    assert!(
        model.exists(),
        "the model file is written after the upload's answer"
    );
    std::fs::write(&model, b"MSMODEL\0garbage").unwrap();
    let state = AppState::open(server::testing::serve_args(dir.clone()))
        .await
        .unwrap();
    let (st, s) = call(&state, "GET", &format!("/api/snapshots/{id}/state"), vec![]).await;
    assert_eq!(st, StatusCode::OK, "{s}");
    assert!(
        std::fs::metadata(&model).unwrap().len() > 1000,
        "model rewritten"
    );
}

#[test]
fn serve_on_a_real_port_survives_a_restart() {
    let dir = temp_dir("port");
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let start = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_memscope"))
            .args([
                "serve",
                "--addr",
                &format!("127.0.0.1:{port}"),
                "--data-dir",
            ])
            .arg(&dir)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap()
    };
    let http = |req: &[u8]| -> String {
        use std::io::{Read, Write};
        for _ in 0..100 {
            if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
                s.write_all(req).unwrap();
                let mut out = String::new();
                s.read_to_string(&mut out).unwrap();
                return out;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        panic!("server did not start");
    };
    let mut child = start();
    let body = fixture("multistream.pickle");
    let mut req = format!("POST /api/snapshots?name=ms HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\ncontent-length: {}\r\n\r\n", body.len()).into_bytes();
    req.extend_from_slice(&body);
    let res = http(&req);
    assert!(res.starts_with("HTTP/1.1 201"), "{res}");
    // Stop it (SIGKILL: acknowledged data must survive even that) and start again.
    child.kill().unwrap();
    child.wait().unwrap();
    let mut child = start();
    let res = http(b"GET /api/snapshots HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n");
    assert!(
        res.starts_with("HTTP/1.1 200") && res.contains("\"name\":\"ms\""),
        "{res}"
    );
    child.kill().unwrap();
    child.wait().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upload_progress_is_reported_while_the_body_arrives() {
    let (_dir, state) = open_state("progress").await;
    let bytes = fixture("leak_detached_cache.pickle");
    let half = bytes.len() / 2;
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Vec<u8>, std::io::Error>>(4);
    let body = Body::from_stream(futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|x| (x, rx))
    }));
    let req = Request::builder()
        .method("POST")
        .uri("/api/snapshots?name=slow&token=t123")
        .header("content-length", bytes.len())
        .body(body)
        .unwrap();
    let app = server::http::app(state.clone());
    let upload = tokio::spawn(async move { app.oneshot(req).await.unwrap().status() });
    tx.send(Ok(bytes[..half].to_vec())).await.unwrap();
    // Wait until the first half has been received and (partly) parsed.
    let mut seen = api::UploadProgress::default();
    for _ in 0..200 {
        let p: api::UploadProgress = get_as(&state, "/api/uploads/t123").await;
        if p.received_bytes == half as u64 && p.parsed_bytes > 0 {
            seen = p;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(
        seen.total_bytes,
        bytes.len() as u64,
        "progress while uploading: {seen:?}"
    );
    assert!(seen.parsed_bytes <= half as u64);
    tx.send(Ok(bytes[half..].to_vec())).await.unwrap();
    drop(tx);
    assert_eq!(upload.await.unwrap(), StatusCode::CREATED);
    let p: api::UploadProgress = get_as(&state, "/api/uploads/t123").await;
    assert!(
        p.finished,
        "an ended upload says so (a poller racing its answer gets no 404): {p:?}"
    );
    let p: api::UploadProgress = get_as(&state, "/api/uploads/never").await;
    assert_eq!(
        (p.received_bytes, p.finished),
        (0, false),
        "a token not seen yet: nothing received (a poller may start before its upload arrives)"
    );
}

/// Log lines written while a test runs (a `tracing` writer into a shared buffer).
#[derive(Clone, Default)]
struct LogBuffer(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for LogBuffer {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// An internal error is logged once, with the request that met it (method and path), and the
/// client gets a generic message.
#[tokio::test]
async fn an_internal_error_is_logged_once_inside_its_request() {
    // tracing caches each call site's interest process-wide, asked of the thread that first
    // meets it: a sibling test with no subscriber would cache the request span as "never" and
    // this test's line would lose its method and path (it did, once, in CI). A global
    // subscriber that writes nowhere keeps every INFO call site live on every thread.
    let sink = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_writer(std::io::sink)
        .finish();
    let _ = tracing::subscriber::set_global_default(sink);
    let (dir, state) = open_state("logged-once").await;
    let id = upload_fixture(&state, "multistream.pickle").await.id;
    // Lose both files behind the snapshot and forget it in memory: opening it must fail.
    let info = state.library.get(&id).await.unwrap().unwrap();
    state.library.model_writes_done().await;
    std::fs::remove_file(state.library.model_path(&info.sha256)).unwrap();
    std::fs::remove_file(state.library.original_path(&info.sha256)).unwrap();
    state.models.remove(&id);

    let logs = LogBuffer::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    tracing::callsite::rebuild_interest_cache();
    let uri = format!("/api/snapshots/{id}/stacks");
    let (status, body) = call(&state, "GET", &uri, vec![]).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(error_message(&body), "internal error; see the server log");

    let text = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    let errors: Vec<&str> = text.lines().filter(|l| l.contains("ERROR")).collect();
    assert_eq!(
        errors.len(),
        1,
        "one ERROR line per failed request:\n{text}"
    );
    assert!(
        errors[0].contains("method=GET") && errors[0].contains(&uri),
        "the line names its request: {}\nall that was logged:\n{text}",
        errors[0]
    );
    assert!(
        errors[0].contains("is missing"),
        "and the cause: {}",
        errors[0]
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// The OOM of the harness's `outside_pytorch` run (an H100, 76 GiB taken by `cuMemAlloc`, PyTorch
/// holding 2.8 GiB): without the device's size the verdict says what is known and asks; with it
/// (given at upload, as the agent does, or set afterwards) the memory outside PyTorch is named.
#[tokio::test]
async fn oom_verdicts_follow_what_is_known_of_the_device() {
    const H100_BYTES: u64 = 85_017_493_504;
    let pickle = fixture("harness/outside_pytorch.oom.pickle");
    let (_dir, state) = open_state("oom-total").await;
    let (status, up) = call(&state, "POST", "/api/snapshots", pickle.clone()).await;
    assert_eq!(status, StatusCode::CREATED);
    let up: api::Uploaded = decode(up);
    let id = up.id.clone();
    assert!(up.snapshot.device_total.is_none());
    let report: api::Report = decode(
        call(&state, "GET", &format!("/api/snapshots/{id}"), vec![])
            .await
            .1,
    );
    let ooms = &report.ooms;
    assert_eq!(ooms.len(), 2);
    assert!(
        ooms[0].time_us > ooms[1].time_us,
        "the OOM that raised comes first"
    );
    let last = &ooms[0];
    assert_eq!(last.verdict, api::Verdict::Undetermined, "{last:?}");
    let text = &last.explanation;
    assert!(
        text.contains("PyTorch held 2.8 GiB and the driver had 254.2 MiB left")
            && text.contains("unless this GPU has only about 3.0 GiB")
            && !text.contains("exhaustion"),
        "{text}"
    );
    let site = last.site.as_ref().expect("the failing line");
    assert_eq!(site.line, 247, "the failing line: {site:?}");
    assert!(site.filename.ends_with("scenarios.py"));
    assert_eq!(last.requested_bytes, 256 << 20);
    assert!(!last.advice.is_empty());

    // A size of 0 is refused; the GPU picker's answer judges again.
    let (status, err) = call(
        &state,
        "PATCH",
        &format!("/api/snapshots/{id}"),
        br#"{"device_total_bytes": 0}"#.to_vec(),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{err}");
    let (status, info) = call(
        &state,
        "PATCH",
        &format!("/api/snapshots/{id}"),
        format!(r#"{{"device_total_bytes": {H100_BYTES}}}"#).into_bytes(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{info}");
    let info: api::SnapshotInfo = decode(info);
    let total = info.device_total.expect("the total set");
    assert_eq!(
        (total.total_bytes, total.source),
        (H100_BYTES, api::DeviceTotalSource::Set)
    );
    let report: api::Report = decode(
        call(&state, "GET", &format!("/api/snapshots/{id}"), vec![])
            .await
            .1,
    );
    let last = &report.ooms[0];
    assert_eq!(last.verdict, api::Verdict::OutsidePytorch, "{last:?}");
    assert_eq!(last.device_total_bytes, Some(H100_BYTES));
    let outside = last.outside_pytorch_bytes.unwrap();
    assert!(outside > 76 << 30 && outside < 77 << 30, "{outside}");
    assert_eq!(
        report.ooms[1].verdict,
        api::Verdict::Exhaustion,
        "the probe asked for more than the device"
    );

    // Given with the upload, as memscope_agent does.
    let (_dir2, state2) = open_state("oom-total-upload").await;
    let (status, up) = call(
        &state2,
        "POST",
        &format!("/api/snapshots?device_total_bytes={H100_BYTES}&tags=kind=oom"),
        pickle,
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{up}");
    let up: api::Uploaded = decode(up);
    assert_eq!(
        up.snapshot.device_total.map(|t| t.source),
        Some(api::DeviceTotalSource::Upload)
    );
    let report: api::Report = decode(
        call(&state2, "GET", &format!("/api/snapshots/{}", up.id), vec![])
            .await
            .1,
    );
    assert_eq!(report.ooms[0].verdict, api::Verdict::OutsidePytorch);
}

/// The events around a position: numbered as the state is ("after event p" includes event p),
/// clipped at the ends, each with its action, size and call site; the state's blocks carry their
/// call sites.
#[tokio::test]
async fn events_around_a_position_and_block_sites() {
    let (_dir, state) = open_state("events").await;
    let id = upload_fixture(&state, "leak_detached_cache.pickle")
        .await
        .id;
    let (st, a) = call(
        &state,
        "GET",
        &format!("/api/snapshots/{id}/events?position=100&before=3&after=2"),
        vec![],
    )
    .await;
    assert_eq!(st, StatusCode::OK, "{a}");
    let a: api::EventsAround = decode(a);
    let pos: Vec<u32> = a.around.iter().map(|e| e.position).collect();
    assert_eq!(pos, [97, 98, 99, 100, 101, 102]);
    assert_eq!(a.events, 4936);
    let (_, a) = call(
        &state,
        "GET",
        &format!("/api/snapshots/{id}/events?position=1&before=5&after=0"),
        vec![],
    )
    .await;
    // Each event with its action, size and stream (the decode checks the keys).
    let a: api::EventsAround = decode(a);
    assert_eq!(a.around.len(), 1, "clipped at the first event: {a:?}");
    // The planted leak's line colours its blocks: the state names it among its sites.
    let st: api::AllocatorState = get_as(&state, &format!("/api/snapshots/{id}/state")).await;
    let planted = st
        .sites
        .iter()
        .position(|f| f.line == 126 && f.filename.ends_with("gen_snapshots.py"))
        .expect("the leak's line among the sites");
    let blocks = st
        .segments
        .iter()
        .flat_map(|s| &s.blocks)
        .filter(|b| b.site == Some(planted as u32))
        .count();
    assert_eq!(blocks, 60, "one block per leaked step");
}

/// The same snapshot compressed is the same entry: the library deduplicates by the decoded bytes.
#[tokio::test]
async fn the_same_snapshot_compressed_is_already_in_the_library() {
    let (_dir, state) = open_state("dedup").await;
    let (st, plain) = call(
        &state,
        "POST",
        "/api/snapshots",
        fixture("multistream.pickle"),
    )
    .await;
    assert_eq!(st, StatusCode::CREATED);
    for name in [
        "variants/multistream.pickle.gz",
        "variants/multistream.pickle.zst",
        "variants/multistream.pickle.xz",
    ] {
        let (st, again) = call(&state, "POST", "/api/snapshots", fixture(name)).await;
        assert_eq!(st, StatusCode::OK, "{name}: {again}");
        let again: api::Uploaded = decode(again);
        let plain: api::Uploaded = decode(plain.clone());
        assert_eq!((again.created, &again.id), (false, &plain.id), "{name}");
    }
    let (_, list) = call(&state, "GET", "/api/snapshots", vec![]).await;
    assert_eq!(list.as_array().unwrap().len(), 1);
}

/// An entry's stored content hash.
async fn stored_content_hash(state: &AppState, id: &str) -> String {
    server::with_db!(&state.library.db, |p| sqlx::query_scalar::<_, String>(
        "SELECT content_hash FROM snapshots WHERE id = $1"
    )
    .bind(id)
    .fetch_one(p)
    .await)
    .unwrap()
}

/// The content hash is keyed with the library's own secret: not XXH3's published one (which
/// anyone could aim a colliding file at), another in another library, and the same after a
/// restart, so an upload still finds the entry it duplicates.
#[tokio::test]
async fn the_content_hash_is_keyed_with_the_librarys_secret() {
    let (dir, state) = open_state("keyed").await;
    let plain = upload_fixture(&state, "multistream.pickle").await;
    assert!(plain.created);
    let keyed = stored_content_hash(&state, &plain.id).await;
    let published = format!(
        "{:032x}",
        snapshot::from_bytes(&fixture("multistream.pickle"))
            .unwrap()
            .content_hash
    );
    assert_eq!(keyed.len(), 32);
    assert_ne!(keyed, published);
    drop(state);
    // Restarted on the same folder: the secret is read back, and the compressed file is the
    // entry already there.
    let state = AppState::open(server::testing::serve_args(dir.clone()))
        .await
        .unwrap();
    let (st, again) = call(
        &state,
        "POST",
        "/api/snapshots",
        fixture("variants/multistream.pickle.gz"),
    )
    .await;
    assert_eq!(st, StatusCode::OK, "{again}");
    let again: api::Uploaded = decode(again);
    assert_eq!((again.created, &again.id), (false, &plain.id));
    // Another library keys it with a secret of its own.
    let (other_dir, other) = open_state("keyed-other").await;
    let there = upload_fixture(&other, "multistream.pickle").await;
    let hashed_there = stored_content_hash(&other, &there.id).await;
    assert_ne!(hashed_there, keyed);
    assert_ne!(hashed_there, published);
    drop((state, other));
    let _ = std::fs::remove_dir_all(dir);
    let _ = std::fs::remove_dir_all(other_dir);
}

/// The What if tab's table (every candidate replayed, with each run's curve) is computed in the
/// background as soon as an upload is answered and kept with the model: it appears without being
/// asked for and equals what the engine computes for that query. It then answers, without a
/// replay, the table without curves and each candidate's chart beside the recorded run, each
/// equal to what the engine computes for that query alone. Other queries are kept once asked.
#[tokio::test]
async fn the_whatif_table_is_replayed_after_an_upload_and_kept() {
    use server::library::models::Answers;
    let (_dir, state) = open_state("whatif-kept").await;
    let id = upload_fixture(&state, "harness/oom_fragmentation.oom.pickle")
        .await
        .id;
    let m = state
        .models
        .get(&state.library, &id)
        .await
        .unwrap()
        .unwrap();
    let table = Answers::table_query(&api::WhatIfQuery::default());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let kept = loop {
        if let Some(kept) = m.answers.whatif(&table) {
            break kept;
        }
        assert!(std::time::Instant::now() < deadline, "no background replay");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    };
    let computed = |q: &api::WhatIfQuery| {
        serde_json::to_value(m.whatif(q, &snapshot::Cancel::new(), None).unwrap()).unwrap()
    };
    assert_eq!(serde_json::to_value(&*kept).unwrap(), computed(&table));
    assert!(
        kept.runs.len() >= 10,
        "every candidate: {}",
        kept.runs.len()
    );
    let plain = api::WhatIfQuery::default();
    let (st, first) = call(&state, "GET", &api::routes::whatif(&id, &plain), vec![]).await;
    assert_eq!(st, StatusCode::OK, "{first}");
    assert_eq!(first, computed(&plain));
    assert!(decode::<api::WhatIf>(first).curves.is_none());

    // Each candidate alone, with and without its curve: narrowed from the table, as computed.
    for run in &kept.runs {
        for curves in [Some(true), None] {
            let one = api::WhatIfQuery {
                alloc_conf: Some(run.alloc_conf.clone()),
                curves,
                ..Default::default()
            };
            let narrowed = m.answers.whatif(&one).expect("answered from the table");
            assert_eq!(
                serde_json::to_value(&*narrowed).unwrap(),
                computed(&one),
                "{one:?}"
            );
        }
    }

    // A setting the table did not replay is computed once asked, then kept.
    let typed = api::WhatIfQuery {
        alloc_conf: Some("max_split_size_mb:64".into()),
        curves: Some(true),
        ..Default::default()
    };
    assert!(
        m.answers.whatif(&typed).is_none(),
        "asked for by nobody yet"
    );
    let uri = api::routes::whatif(&id, &typed);
    let (_, first) = call(&state, "GET", &uri, vec![]).await;
    assert!(m.answers.whatif(&typed).is_some());
    let (_, again) = call(&state, "GET", &uri, vec![]).await;
    assert_eq!(first, again);
    assert_eq!(decode::<api::WhatIf>(again).runs.len(), 2);
}

/// The What if tab asks how far the table's replays have got instead of waiting for them: the
/// first answer carries what is known before any replay (the runs to come, the recorded peak and
/// the live allocations' peak), every answer counts the events replayed, and the last one is the
/// whole table, equal to what `GET /whatif` answers. A setting PyTorch does not accept is a 400
/// at once, and a snapshot without a trace says why. `/metrics` counts the replay while it runs
/// (watched) and once it is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whatif_progress_answers_at_once_and_ends_as_the_table() {
    use crate::hardening_two::{metric, metrics};
    const ANSWERED: &str = "memscope_whatif_replays_total{outcome=\"answered\"}";
    const WATCHED: &str = "memscope_whatif_replays_running{kind=\"watched\"}";
    let (_dir, state) = open_state("whatif-progress").await;
    // The counts are this server's own.
    let answered_before = metric(&metrics(&state).await, ANSWERED).expect("the answered count");
    assert_eq!(answered_before, 0.0);
    let id = upload_fixture(&state, "big_python.pickle.xz").await.id;
    let q = api::WhatIfQuery::default();
    let uri = api::routes::whatif_progress(&id, &q);
    let mut polls = Vec::new();
    let mut watched_seen = 0.0f64;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let last = loop {
        let (st, v) = call(&state, "GET", &uri, vec![]).await;
        assert_eq!(st, StatusCode::OK, "{v}");
        let p: api::WhatIfProgress = decode(v);
        assert!(p.events_replayed <= p.events_total || p.events_total == 0);
        if p.done {
            break p;
        }
        polls.push(p);
        let running = metric(&metrics(&state).await, WATCHED).expect("the watched gauge");
        watched_seen = watched_seen.max(running);
        assert!(
            std::time::Instant::now() < deadline,
            "the replays never ended"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert!(
        watched_seen >= 1.0,
        "the replay was never counted as running"
    );
    let answered = metric(&metrics(&state).await, ANSWERED).expect("the answered count");
    assert!(
        answered > answered_before,
        "{answered_before} answered before, {answered} after"
    );
    let o = &polls.first().unwrap_or(&last).outline.clone();
    assert_eq!((o.device, o.events), (0, 250_021), "{o:?}");
    assert!(o.live_peak_bytes > 0 && o.live_peak_bytes <= o.recorded_peak_reserved_bytes);
    let answer = last.answer.clone().expect("the whole table once done");
    assert_eq!(answer.runs.len() as u32, o.settings);
    for r in answer
        .runs
        .iter()
        .filter(|r| r.first_oom_position.is_none())
    {
        assert!(r.peak_reserved_bytes >= o.live_peak_bytes, "{r:?}");
    }
    // Polled while running (the background replay waits 2 s; asking started it at once).
    assert!(
        !polls.is_empty(),
        "a 250k-event table answered before the first look"
    );
    // A partial answer holds the runs replayed so far: fewer than the whole, or all of them when
    // the poll fell between the last replay's end and the answer being kept (1 poll in ~20
    // runs of this test saw that window).
    for p in &polls {
        if let Some(so_far) = &p.answer {
            assert!(so_far.runs.len() <= answer.runs.len());
        }
    }
    assert!(
        polls.iter().any(|p| p
            .answer
            .as_ref()
            .is_none_or(|a| a.runs.len() < answer.runs.len())),
        "no poll saw the table unfinished"
    );
    let (_, whole) = call(&state, "GET", &api::routes::whatif(&id, &q), vec![]).await;
    assert_eq!(serde_json::to_value(&answer).unwrap(), whole);

    let bad = api::WhatIfQuery {
        alloc_conf: Some("max_split_size_mb:lots".into()),
        ..Default::default()
    };
    let (st, e) = call(
        &state,
        "GET",
        &api::routes::whatif_progress(&id, &bad),
        vec![],
    )
    .await;
    assert_eq!(st, StatusCode::BAD_REQUEST, "{e}");
    let none = upload_fixture(&state, "segments_only.pickle").await.id;
    let (st, e) = call(
        &state,
        "GET",
        &api::routes::whatif_progress(&none, &q),
        vec![],
    )
    .await;
    assert_eq!(st, StatusCode::BAD_REQUEST, "{e}");
    assert!(e.to_string().contains("no trace"), "{e}");
}

/// What if: the OOM fixture replayed under the candidates. The replay check is exact, the limit
/// comes from its OOM (a per-process fraction), the recorded defaults run out of memory and
/// expandable segments, ranked first, do not. One setting can be asked for; a bad one is a 400
/// that says what to fix. `memscope whatif --json` prints the same object.
#[tokio::test]
async fn whatif_ranks_the_settings_that_avoid_the_oom() {
    let (_dir, state) = open_state("whatif").await;
    let id = upload_fixture(&state, "harness/oom_fragmentation.oom.pickle")
        .await
        .id;
    let (st, w) = call(
        &state,
        "GET",
        &api::routes::whatif(&id, &Default::default()),
        vec![],
    )
    .await;
    assert_eq!(st, StatusCode::OK, "{w}");
    let w: api::WhatIf = serde_json::from_value(w).unwrap();
    assert!(w.replay_check.exact, "{:?}", w.replay_check);
    assert_eq!(w.replay_check.matched_segment_events, 102);
    let limit = w.limit.as_ref().unwrap();
    assert_eq!(
        (limit.kind, limit.source),
        (api::LimitKind::Fraction, api::LimitSource::Oom)
    );
    assert_eq!(w.runs.iter().filter(|r| r.recorded).count(), 1);
    let recorded = w.runs.iter().find(|r| r.recorded).unwrap();
    assert!(recorded.oom && recorded.alloc_conf.is_empty());
    assert_eq!(w.runs[0].alloc_conf, "expandable_segments:True");
    assert!(!w.runs[0].oom && w.runs[0].saving_bytes > 0);
    assert!(w.runs.iter().all(|r| r.reserved_curve.is_empty()));

    let q = api::WhatIfQuery {
        alloc_conf: Some("max_split_size_mb:128".into()),
        curves: Some(true),
        ..Default::default()
    };
    let (st, w) = call(&state, "GET", &api::routes::whatif(&id, &q), vec![]).await;
    assert_eq!(st, StatusCode::OK, "{w}");
    let w: api::WhatIf = serde_json::from_value(w).unwrap();
    assert_eq!(
        w.runs.len(),
        2,
        "the setting asked for and the recorded one"
    );
    assert!(w.runs.iter().all(|r| !r.reserved_curve.is_empty()));
    // The trace's own curves to draw them against (811 events need no buckets); the engine's
    // tests check the replay's curve against them event by event.
    let c = w.curves.as_ref().expect("curves");
    assert_eq!(c.bucket_events, 1);
    assert!(c.reserved.last().unwrap().0 <= w.events);
    assert_eq!(
        api::RecordedCurves::at(&c.reserved, w.events),
        Some(w.replay_check.recorded_peak_reserved_bytes),
        "the run ends at its peak (nothing released)"
    );
    assert_eq!(
        c.reserved.iter().map(|p| p.1).max(),
        Some(w.replay_check.recorded_peak_reserved_bytes)
    );
    assert!(c.live.iter().all(|&(_, live)| live <= 2 << 30));

    // The OOM report quotes the simulation instead of a generic hint.
    let (_, report) = call(&state, "GET", &api::routes::snapshot(&id), vec![]).await;
    let report: api::Report = serde_json::from_value(report).unwrap();
    let oom = &report.ooms[0];
    let sim = oom.whatif.as_ref().expect("the raising OOM is simulated");
    assert_eq!(sim.alloc_conf.as_deref(), Some("expandable_segments:True"));
    assert!(sim.replay_exact && sim.settings_avoiding == 2 && sim.settings_tried == 9);
    assert!(sim.oom_ends_trace, "no request after the OOM");
    assert!(
        oom.advice[0].starts_with("expandable_segments:True: would have got past this OOM under the 2.0 GiB per-process limit, peak reserved 1.8 GiB up to it (simulated"),
        "{}",
        oom.advice[0]
    );
    assert!(
        !oom.advice
            .iter()
            .any(|a| a.contains("segments grow in place")),
        "the generic hint gave way: {:?}",
        oom.advice
    );

    let q = api::WhatIfQuery {
        alloc_conf: Some("max_split_size_mb:10".into()),
        ..Default::default()
    };
    let (st, e) = call(&state, "GET", &api::routes::whatif(&id, &q), vec![]).await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
    assert!(e.to_string().contains("too small, must be >= 20"), "{e}");
    // A key PyTorch does not know is refused as PyTorch refuses it, not replayed as the defaults.
    let q = api::WhatIfQuery {
        alloc_conf: Some("foo".into()),
        ..Default::default()
    };
    let (st, e) = call(&state, "GET", &api::routes::whatif(&id, &q), vec![]).await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
    assert!(
        e.to_string()
            .contains("Unrecognized key 'foo' in Accelerator allocator config."),
        "{e}"
    );

    // The CLI prints the same object.
    let cli = std::process::Command::new(env!("CARGO_BIN_EXE_memscope"))
        .args(["whatif", "--json"])
        .arg(
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../tests/fixtures/harness/oom_fragmentation.oom.pickle"),
        )
        .output()
        .unwrap();
    assert!(cli.status.success());
    let from_cli: api::WhatIf = serde_json::from_slice(&cli.stdout).unwrap();
    assert_eq!(
        from_cli.runs.len(),
        snapshot::analysis::whatif::CANDIDATES.len()
    );
    assert_eq!(from_cli.runs[0].alloc_conf, "expandable_segments:True");
}

/// Two ranks of one job (the harness's GPU run: rank 1 holds 2 GiB more at one line and runs out
/// of memory under its 4 GiB share), uploaded with `job` and `rank` tags, plus a snapshot of the
/// same job without a rank and a rank of another job: the run has exactly the two ranks, the
/// failing rank first, the imbalance with the planted line, and series on one axis.
#[tokio::test]
async fn a_jobs_ranks_make_a_run_with_the_imbalance_and_the_failing_rank_first() {
    let (dir, state) = open_state("runs").await;
    let up = |name: &'static str, tags: &'static str| {
        let state = state.clone();
        async move {
            let (st, v) = call(
                &state,
                "POST",
                &format!(
                    "/api/snapshots?name={name}&tags={}",
                    api::routes::encode(tags)
                ),
                fixture(&format!("harness/{name}")),
            )
            .await;
            assert_eq!(st, StatusCode::CREATED, "{v}");
            decode::<api::Uploaded>(v).id
        }
    };
    let r0 = up("ranks.rank0.pickle", "job=train 7,rank=0").await;
    // Rank from the file name (`rank1`), no rank tag.
    let r1 = up("ranks.rank1.oom.pickle", "job=train 7").await;
    up("steady.pickle", "job=train 7").await; // no rank: not a member
    up("leak_list.pickle", "job=other,rank=0").await; // one rank: not listed as a run

    let (st, runs) = call(&state, "GET", &api::routes::runs(), vec![]).await;
    assert_eq!(st, StatusCode::OK, "{runs}");
    let runs: Vec<api::RunInfo> = serde_json::from_value(runs).unwrap();
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0].id, "train 7");
    let members: Vec<(u32, &str)> = runs[0]
        .ranks
        .iter()
        .map(|m| (m.rank, m.snapshot_id.as_str()))
        .collect();
    assert_eq!(members, [(0, r0.as_str()), (1, r1.as_str())]);

    let (st, v) = call(&state, "GET", &api::routes::run("train 7"), vec![]).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let run: api::RunReport = serde_json::from_value(v).unwrap();
    assert_eq!(run.alignment, api::Alignment::Clock);
    assert_eq!(
        run.ranks.iter().map(|r| r.rank).collect::<Vec<_>>(),
        [1, 0],
        "the failing rank first"
    );
    let failed = run.failed.as_ref().expect("rank 1 ran out of memory");
    assert_eq!((failed.rank, failed.snapshot_id.as_str()), (1, r1.as_str()));
    assert!(failed.order_known);
    assert_eq!(failed.oom.requested_bytes, 2 << 30);
    assert_eq!(failed.oom.site.as_ref().map(|f| f.line), Some(309));
    assert_eq!(Some(failed.at), run.ranks[0].first_oom_at);
    let imb = run.imbalance.as_ref().expect("two ranks differ");
    assert_eq!((imb.heaviest_rank, imb.lightest_rank), (1, 0));
    assert_eq!(imb.max_peak_bytes - imb.min_peak_bytes, 2 << 30);
    assert_eq!(imb.sites[0].delta_bytes, 2 << 30);
    assert_eq!(imb.sites[0].site.as_ref().map(|f| f.line), Some(301));
    assert!(imb.summary.contains("scenarios.py:301"), "{}", imb.summary);
    // The same figures as each rank's own report.
    let rep1: api::Report = get_as(&state, &api::routes::snapshot(&r1)).await;
    assert_eq!(
        rep1.devices[&0].peak_requested_bytes,
        run.ranks[0].peak_live_bytes
    );

    let (st, v) = call(
        &state,
        "GET",
        &api::routes::run_series("train 7", &api::RunSeriesQuery { buckets: Some(40) }),
        vec![],
    )
    .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let series: api::RunSeries = serde_json::from_value(v).unwrap();
    assert_eq!(series.ranks.len(), 2);
    assert_eq!(series.ranks[0].rank, 1);
    for (r, row) in series.ranks.iter().zip(&run.ranks) {
        assert_eq!(r.live_bytes.len(), 40);
        assert_eq!(
            r.live_bytes.iter().flatten().max(),
            Some(&row.peak_live_bytes)
        );
    }
    // Rank 0's trace starts later than rank 1's on the shared clock: its first buckets are empty.
    assert!(series.ranks[1].live_bytes[0].is_none());

    let (st, v) = call(&state, "GET", &api::routes::run("nobody"), vec![]).await;
    assert_eq!(st, StatusCode::NOT_FOUND, "{v}");
    let (st, _) = call(
        &state,
        "GET",
        &api::routes::run_series("train 7", &api::RunSeriesQuery { buckets: Some(0) }),
        vec![],
    )
    .await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
    let _ = std::fs::remove_dir_all(dir);
}

/// A report stored by an older version (before the three peaks, or one that no longer reads) is
/// computed again from the snapshot when asked for, stored, and re-uploads answer with it.
#[tokio::test]
async fn a_report_stored_by_an_older_version_is_computed_again() {
    let (dir, state) = open_state("stale-report").await;
    let id = upload_fixture(&state, "leak_detached_cache.pickle")
        .await
        .id;
    let (_, fresh) = call(&state, "GET", &format!("/api/snapshots/{id}"), vec![]).await;
    let fresh_report: api::Report = decode(fresh.clone());
    assert_eq!(fresh_report.report_version, api::REPORT_VERSION);
    // What an older server stored: no version, a field since renamed.
    let mut old = fresh_report.clone();
    old.report_version = 0;
    old.devices.get_mut(&0).unwrap().peak_allocated_bytes = 1;
    assert!(state.library.set_report(&id, &old).await.unwrap());
    let listed = |state: AppState| async move {
        let list: Vec<api::SnapshotInfo> = get_as(&state, "/api/snapshots").await;
        (list[0].peak_bytes, list[0].peak_reserved_bytes)
    };
    assert_eq!(
        listed(state.clone()).await.0,
        1,
        "the library lists the stored report's peak"
    );
    state.models.remove(&id);
    let (st, again) = call(&state, "GET", &format!("/api/snapshots/{id}"), vec![]).await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(again, fresh, "computed again, the same as at upload");
    assert_eq!(
        listed(state.clone()).await,
        (
            fresh_report.devices[&0].peak_allocated_bytes,
            fresh_report.devices[&0].peak_reserved_bytes
        ),
        "and the library's figures with it"
    );
    // Stored in its place: an unreadable row is computed again too.
    match state.library.report(&id).await.unwrap() {
        Some(server::library::Stored::Current(r)) => {
            assert_eq!(r.report_version, api::REPORT_VERSION)
        }
        other => panic!("{other:?}"),
    }
    assert!(state.library.set_report(&id, &old).await.unwrap());
    let (st, re) = call(
        &state,
        "POST",
        "/api/snapshots",
        fixture("leak_detached_cache.pickle"),
    )
    .await;
    let re: api::Uploaded = decode(re);
    assert_eq!((st, re.created), (StatusCode::OK, false));
    assert_eq!(
        re.summary.devices[&0].peak_allocated_bytes,
        fresh_report.devices[&0].peak_allocated_bytes
    );
    let (_, stored) = call(&state, "GET", &format!("/api/snapshots/{id}"), vec![]).await;
    assert_eq!(stored, fresh);
    let _ = std::fs::remove_dir_all(dir);
}

/// Issue 36 (first part): `GET /api/predict` answers from library snapshots as `memscope
/// predict --json` does: the sweep's three recordings of the checkpointed MLP, two sizes under
/// its memory fraction (one fits, one raises, as they really did); a bad pair is a 400 that says
/// how to write it.
#[tokio::test]
async fn predict_answers_from_library_snapshots() {
    let (_dir, state) = open_state("predict").await;
    let mut pairs = Vec::new();
    for s in [256, 512, 768] {
        let up = upload_fixture(
            &state,
            &format!("predict/mlp_checkpoint_batch.{s}.rec.pickle.xz"),
        )
        .await;
        pairs.push(format!("{}:{s}", up.id));
    }
    let limits: serde_json::Value =
        serde_json::from_slice(&fixture("predict/limits.json")).unwrap();
    let q = api::PredictQuery {
        recordings: pairs.join(","),
        sizes: Some("2048,8192".into()),
        limit_bytes: limits["mlp_checkpoint_batch"].as_u64(),
        limit_kind: Some(api::LimitKind::Fraction),
        ..Default::default()
    };
    let (st, v) = call(&state, "GET", &api::routes::predict(&q), vec![]).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let p: api::PredictAnswer = serde_json::from_value(v).unwrap();
    assert_eq!(p.method, "replay");
    assert_eq!(p.recorded.len(), 3);
    let oom: Vec<(u64, bool)> = p.sizes.iter().map(|s| (s.size, s.oom)).collect();
    assert_eq!(oom, vec![(2048, false), (8192, true)]);
    assert_eq!(p.largest_fitting_size, Some(2048));
    assert!(!p.growth.is_empty());
    assert!(
        p.growth
            .windows(2)
            .all(|w| w[0].bytes_per_unit >= w[1].bytes_per_unit),
        "the fastest growing first"
    );
    // Asked to search as well (the Will it fit page): the largest size that fits under the
    // fraction, found by replay. Really, 4096 fit and 6144 raised.
    let searched = api::PredictQuery {
        search: Some(true),
        ..q.clone()
    };
    let (st, v) = call(&state, "GET", &api::routes::predict(&searched), vec![]).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let p: api::PredictAnswer = serde_json::from_value(v).unwrap();
    let found = p.largest_fitting_size.unwrap();
    assert!((4096..6144).contains(&found), "{found}");
    assert!(p.sizes.iter().any(|s| s.size == found && !s.oom));
    assert!(p.sizes.iter().any(|s| s.size == found + 1 && s.oom));
    // A limit kind is one of two words; another is refused, saying which.
    let (st, v) = call(
        &state,
        "GET",
        &format!(
            "{}&limit_kind=bogus",
            api::routes::predict(&api::PredictQuery {
                limit_kind: None,
                ..q.clone()
            })
        ),
        vec![],
    )
    .await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
    assert!(error_message(&v).contains("fraction"), "{v}");
    let bad = api::PredictQuery {
        recordings: "nocolon".into(),
        ..Default::default()
    };
    let (st, v) = call(&state, "GET", &api::routes::predict(&bad), vec![]).await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
    assert!(error_message(&v).contains("ID:SIZE"), "{v}");
}
