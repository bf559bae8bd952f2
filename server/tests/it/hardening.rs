//! The outside probe's findings (issue 13), each reproduced as a test: what it did to the server
//! and what the server must do instead. Small limits and lazy bodies keep each one to seconds.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::body::{Body, Bytes};
use axum::http::{Request, StatusCode, header};
use server::state::AppState;

use crate::support::app::{fixture_bytes as fixture, respond as call};

async fn state(tag: &str) -> AppState {
    crate::support::app::app_state(
        &format!("hardening-{tag}"),
        &["gpu7=s3cret-0123456789abcdef"],
    )
    .await
}

/// A body of `total` zero bytes made lazily in 64 KiB chunks, counting what the server pulls.
fn counted_body(total: u64) -> (Body, Arc<AtomicU64>) {
    const CHUNK: u64 = 64 << 10;
    let pulled = Arc::new(AtomicU64::new(0));
    let p = pulled.clone();
    let stream = futures_util::stream::unfold(0u64, move |sent| {
        let p = p.clone();
        async move {
            (sent < total).then(|| {
                let n = CHUNK.min(total - sent);
                p.fetch_add(n, Ordering::Relaxed);
                (
                    Ok::<_, std::io::Error>(Bytes::from(vec![0u8; n as usize])),
                    sent + n,
                )
            })
        }
    });
    (Body::from_stream(stream), pulled)
}

/// Sends the request; the status, the body as text and how many body bytes the server pulled.
async fn send(
    s: &AppState,
    method: &str,
    uri: &str,
    headers: &[(&str, String)],
    total: u64,
) -> (StatusCode, String, u64) {
    let (body, pulled) = counted_body(total);
    let mut req = Request::builder().method(method).uri(uri);
    for (k, v) in headers {
        req = req.header(*k, v);
    }
    let (status, text) = call(s, req.body(body).unwrap()).await;
    (
        status,
        String::from_utf8_lossy(&text).to_string(),
        pulled.load(Ordering::Relaxed),
    )
}

const MIB: u64 = 1 << 20;

/// A fixture's bytes.
/// One NVML reading of GPU `uuid` (1 byte used).
fn gpu_sample(uuid: &str) -> wire::GpuSample {
    crate::support::scenario::gpu(uuid, 1_700_000_000_000, 1)
}

/// One request through the router: the status and the body.
/// Uploads `bytes`; the new snapshot's id.
async fn upload(s: &AppState, bytes: Vec<u8>) -> String {
    let req = Request::post(api::routes::upload(&Default::default()))
        .body(Body::from(bytes))
        .unwrap();
    let (st, body) = call(s, req).await;
    assert!(st.is_success(), "{st}");
    let up: api::Uploaded = serde_json::from_slice(&body).unwrap();
    up.id
}

/// Finding 3: an unauthenticated 1 GiB POST to /api/ingest took the server to 2 GB before its
/// 401, and PATCH the same; a declared Content-Length reserved address space before any check.
#[tokio::test]
async fn no_body_is_read_before_its_request_is_allowed_and_never_past_its_limit() {
    let s = state("body-caps").await;
    // No token: refused without reading the body.
    let (st, text, pulled) = send(&s, "POST", "/api/ingest", &[], 256 * MIB).await;
    assert_eq!(st, StatusCode::UNAUTHORIZED, "{text}");
    assert!(
        pulled <= MIB,
        "read {pulled} bytes of an unauthenticated body"
    );
    // A token, but a declared size over the batch limit: refused before reading.
    let auth = (
        "authorization",
        "Bearer s3cret-0123456789abcdef".to_string(),
    );
    let (st, text, pulled) = send(
        &s,
        "POST",
        "/api/ingest",
        &[auth.clone(), ("content-length", (256 * MIB).to_string())],
        256 * MIB,
    )
    .await;
    assert_eq!(st, StatusCode::PAYLOAD_TOO_LARGE, "{text}");
    assert!(text.contains("batch is larger than"), "{text}");
    assert!(pulled <= MIB, "read {pulled} bytes of an oversized batch");
    // A token and no declared size: read up to the limit, then refused.
    let (st, _, pulled) = send(&s, "POST", "/api/ingest", &[auth], 256 * MIB).await;
    assert_eq!(st, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(
        pulled <= 65 * MIB,
        "read {pulled} bytes past the 64 MiB limit"
    );
    // A rename is a few hundred bytes: a large PATCH is refused early.
    let (st, _, pulled) = send(
        &s,
        "PATCH",
        &api::routes::snapshot("0123456789abcdef"),
        &[(header::CONTENT_TYPE.as_str(), "application/json".into())],
        256 * MIB,
    )
    .await;
    assert_eq!(st, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(pulled <= MIB, "read {pulled} bytes of a PATCH");
    // An upload declaring more than --max-upload-bytes: refused before reading.
    let (st, text, pulled) = send(
        &s,
        "POST",
        &api::routes::upload(&Default::default()),
        &[(
            "content-length",
            (s.config.max_upload_bytes + 1).to_string(),
        )],
        256 * MIB,
    )
    .await;
    assert_eq!(st, StatusCode::PAYLOAD_TOO_LARGE, "{text}");
    assert!(pulled <= MIB, "read {pulled} bytes of an oversized upload");
}

/// Finding 9 (part): extreme window parameters panicked the live handlers (overflowing time
/// arithmetic, a bucket count from wrapped spans). Every window is clamped to one the store can
/// answer: times from the epoch to the year 10,000, spans of at most a year.
#[tokio::test]
async fn any_window_a_client_asks_for_is_answered() {
    let s = state("windows").await;
    let mut b = wire::Batch::new("gpu7", 1, "gpu7");
    b.gpus.push(gpu_sample("GPU-w"));
    b.allocator.push(wire::AllocatorSample {
        time_ms: 1_700_000_000_000,
        pid: 42,
        start_time_ms: Some(1),
        device: 0,
        gpu_uuid: Some("GPU-w".into()),
        step: None,
        allocated_bytes: 1,
        reserved_bytes: 2,
        active_bytes: None,
        inactive_split_bytes: None,
        requested_bytes: None,
        alloc_retries: None,
        ooms: None,
        segments: None,
        largest_free_block_bytes: None,
    });
    let req = Request::post("/api/ingest")
        .header("authorization", "Bearer s3cret-0123456789abcdef")
        .body(Body::from(serde_json::to_vec(&b).unwrap()))
        .unwrap();
    let (st, text) = call(&s, req).await;
    assert_eq!(st, StatusCode::OK, "{text:?}");
    let (min, max) = (i64::MIN, i64::MAX);
    let queries = [
        format!("from_ms={min}&to_ms={max}"),
        format!("from_ms={max}&to_ms={min}"),
        format!("from_ms={max}"),
        format!("to_ms={min}"),
        format!("to_ms={max}&minutes=1e308"),
        "minutes=NaN&points=-9".to_string(),
        format!("from_ms={min}&points={max}"),
        "from_ms=0&to_ms=1&points=4000".to_string(),
    ];
    for q in &queries {
        for path in [
            "/api/live/gpus/GPU-w".to_string(),
            "/api/live/processes/gpu7/42".to_string(),
        ] {
            let uri = format!("{path}?{q}");
            let (st, body) = call(&s, Request::get(&uri).body(Body::empty()).unwrap()).await;
            // An answer, never a panic: the page (the GPU's always: it has reported), or for the
            // process nothing there in that window.
            assert!(
                st == StatusCode::OK || st == StatusCode::NOT_FOUND && path.contains("processes"),
                "{uri}: {st}"
            );
            if st == StatusCode::OK {
                // Either page: both carry the window they were drawn over.
                #[derive(serde::Deserialize)]
                struct Page {
                    window: api::Window,
                }
                let w = serde_json::from_slice::<Page>(&body).unwrap().window;
                let (from, to, bucket) = (w.from_ms, w.to_ms, w.bucket_ms);
                assert!(0 <= from && from < to && bucket > 0, "{uri}: {w:?}");
                assert!(to - from <= 366 * 86_400_000, "{uri}: {w:?}");
            }
        }
    }
}

/// Finding 9 (part): bytes after a pickle's STOP were stored and served back (a second,
/// code-executing pickle passed through). Now the upload is refused and nothing is kept.
#[tokio::test]
async fn an_upload_with_bytes_after_its_pickle_is_refused_and_not_kept() {
    let s = state("trailing").await;
    let mut bytes = fixture("leak_detached_cache.pickle");
    bytes.extend_from_slice(b"\x80\x04\x8c\x02os\x8c\x06system\x93.");
    let req = Request::post(api::routes::upload(&Default::default()))
        .body(Body::from(bytes))
        .unwrap();
    let (st, body) = call(&s, req).await;
    let text = String::from_utf8_lossy(&body).to_string();
    assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "{text}");
    assert!(
        text.contains("bytes follow the pickle's STOP opcode"),
        "{text}"
    );
    let req = Request::get(api::routes::snapshots(&Default::default()))
        .body(Body::empty())
        .unwrap();
    let (_, list) = call(&s, req).await;
    assert_eq!(&list[..], b"[]", "nothing half-appears in the library");
    let originals = std::fs::read_dir(s.config.data_dir.join("originals"))
        .unwrap()
        .count();
    assert_eq!(originals, 0, "no original kept");
}

/// Finding 9 (part): model files had no checksum, so flipped bytes were served as wrong answers.
/// A damaged model file is now refused and rebuilt from the original upload.
#[tokio::test]
async fn a_damaged_model_file_is_rebuilt_not_served() {
    let s = state("model-checksum").await;
    let dir = s.config.data_dir.clone();
    let get = |s: AppState, uri: String| async move {
        let (st, body) = call(&s, Request::get(&uri).body(Body::empty()).unwrap()).await;
        assert_eq!(st, StatusCode::OK, "{uri}");
        body
    };
    let id = upload(&s, fixture("leak_detached_cache.pickle")).await;
    // A window: the whole trace's answer is stored apart from the model (`server::library::views`).
    let q = api::TimelineQuery {
        axis: Some(api::Axis::Event),
        buckets: Some(200),
        from: Some(0.0),
        to: Some(1e12),
        ..Default::default()
    };
    let before = get(s.clone(), api::routes::timeline(&id, &q)).await;
    s.library.model_writes_done().await;
    drop(s);
    // One flipped bit in the middle of the model file, then a fresh server (nothing cached).
    let model = std::fs::read_dir(dir.join("models"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "msmodel"))
        .unwrap();
    let mut m = std::fs::read(&model).unwrap();
    let mid = m.len() / 2;
    m[mid] ^= 1;
    std::fs::write(&model, &m).unwrap();
    let s = AppState::open(server::testing::serve_args(dir.clone()))
        .await
        .unwrap();
    let after = get(s.clone(), api::routes::timeline(&id, &q)).await;
    assert_eq!(before, after, "the same answer, from a rebuilt model");
    let rebuilt = std::fs::read(&model).unwrap();
    let (_, index) = snapshot::store::read(rebuilt.as_slice()).unwrap();
    assert!(index.is_some(), "the rebuilt model file stores the index");
}

/// Finding 9 (part): concurrent requests for a snapshot not in memory each loaded it (each load
/// a whole index). Now one loads and the others wait for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_first_requests_load_a_snapshot_once() {
    let s = state("one-load").await;
    let dir = s.config.data_dir.clone();
    let id = upload(&s, fixture("leak_detached_cache.pickle")).await;
    drop(s);
    // A fresh server: nothing in memory. Eight views of the snapshot asked for at once.
    let s = AppState::open(server::testing::serve_args(dir))
        .await
        .unwrap();
    let mut asks = Vec::new();
    for k in 0..8u32 {
        let (s, id) = (s.clone(), id.clone());
        asks.push(tokio::spawn(async move {
            let q = api::TimelineQuery {
                buckets: Some(100 + k as usize),
                ..Default::default()
            };
            let req = Request::get(api::routes::timeline(&id, &q))
                .body(Body::empty())
                .unwrap();
            call(&s, req).await.0
        }));
    }
    for a in asks {
        assert_eq!(a.await.unwrap(), StatusCode::OK);
    }
    assert_eq!(s.models.loads(), 1, "eight requests, one load");
}

/// Issue 14: the whole-trace timeline (what a snapshot page asks for first) is stored once
/// computed and, after a restart, answered from the store with the same bytes, before the model
/// is loaded; the model then loads in the background for the next question. A windowed query is
/// never stored, a broken stored answer is computed again, and deleting the snapshot removes its
/// stored answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_trace_timeline_is_answered_from_the_store_after_a_restart() {
    async fn get(s: &AppState, id: &str, q: &api::TimelineQuery) -> Bytes {
        let req = Request::get(api::routes::timeline(id, q))
            .body(Body::empty())
            .unwrap();
        let (status, body) = call(s, req).await;
        assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
        body
    }
    let s = state("first-views").await;
    let dir = s.config.data_dir.clone();
    let id = upload(&s, fixture("leak_detached_cache.pickle")).await;
    let whole = api::TimelineQuery {
        buckets: Some(300),
        allocations: Some(50),
        ..Default::default()
    };
    let window = api::TimelineQuery {
        from: Some(0.0),
        to: Some(1e12),
        ..whole.clone()
    };
    let first = get(&s, &id, &whole).await;
    let first_window = get(&s, &id, &window).await;
    let sha = s.library.get(&id).await.unwrap().unwrap().sha256;
    let views = s.library.views_dir(&sha);
    let key = server::library::views::timeline_key(&whole).unwrap();
    let stored = views.join(format!("{key}.json"));
    // Stored off the request's path: wait for it.
    for _ in 0..200 {
        if stored.exists() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(std::fs::read(&stored).unwrap(), first);
    let names = || -> Vec<String> {
        std::fs::read_dir(&views)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().to_string())
            .collect()
    };
    assert_eq!(
        names(),
        vec![format!("{key}.json")],
        "the window is not stored"
    );
    drop(s);

    // A fresh server: nothing in memory. The same bytes, answered before any model load.
    let s = AppState::open(server::testing::serve_args(dir.clone()))
        .await
        .unwrap();
    let loads_before = s.models.loads();
    let again = get(&s, &id, &whole).await;
    assert_eq!(again, first);
    assert_eq!(loads_before, 0);
    // The model is loaded ahead, for the next question.
    for _ in 0..500 {
        if s.models.cached(&id).is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(s.models.cached(&id).is_some(), "loaded in the background");
    assert_eq!(s.models.loads(), 1);
    assert_eq!(get(&s, &id, &window).await, first_window);
    drop(s);

    // A stored answer that does not read is computed again (and the answer is right).
    std::fs::write(&stored, &first[..first.len() / 2]).unwrap();
    let s = AppState::open(server::testing::serve_args(dir))
        .await
        .unwrap();
    assert_eq!(get(&s, &id, &whole).await, first);
    assert_eq!(s.models.loads(), 1, "computed from the model");

    // Deleting the snapshot removes its stored answers.
    let req = Request::delete(api::routes::snapshot(&id))
        .body(Body::empty())
        .unwrap();
    let (status, _) = call(&s, req).await;
    assert!(status.is_success(), "{status}");
    assert!(!views.exists(), "{}", views.display());
}

/// Issue 41: the model file keeps neither the labels by category nor the frees that waited, so
/// the segment view's first state after a restart found the labels itself (0.17–0.23 s on a
/// 12M-event trace). A load now works both out in the background: after a question that needs
/// neither (the events around a position), they become ready without another request, and the
/// state's answer is the one the first server gave.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loaded_model_is_warmed_in_the_background() {
    let s = state("warm").await;
    let dir = s.config.data_dir.clone();
    let id = upload(&s, fixture("harness/side_stream.pickle")).await;
    let at = api::PositionQuery {
        device: None,
        position: Some(5),
    };
    let get = |s: AppState, uri: String| async move {
        let (status, body) = call(&s, Request::get(uri).body(Body::empty()).unwrap()).await;
        assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
        body
    };
    let first_state = get(s.clone(), api::routes::state(&id, &at)).await;
    let warmed = |s: &AppState| {
        s.models
            .cached(&id)
            .is_some_and(|m| m.index.traced().all(|d| d.warmed()))
    };
    drop(s);

    let s = AppState::open(server::testing::serve_args(dir))
        .await
        .unwrap();
    let around = api::EventsQuery {
        position: Some(5),
        ..Default::default()
    };
    get(s.clone(), api::routes::events(&id, &around)).await;
    assert_eq!(s.models.loads(), 1);
    for _ in 0..1000 {
        if warmed(&s) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(warmed(&s), "the labels and the frees that waited are ready");
    assert_eq!(
        get(s.clone(), api::routes::state(&id, &at)).await,
        first_state
    );
    assert_eq!(s.models.loads(), 1);
}

/// Finding 1: a batch was keyed by `(collector, seq)` alone, so a collector that started again
/// with a fresh spool had its batches answered `duplicate: true, stored: 0` (and deleted them),
/// and a used seq with a different body was dropped silently. Now the spool id is in the key,
/// other content under a used key is a 409, and version-1 batches (no spool id) still work.
#[tokio::test]
async fn a_fresh_spool_is_stored_and_a_changed_batch_is_a_conflict() {
    let s = state("spools").await;
    let post = |b: &wire::Batch| {
        Request::post("/api/ingest")
            .header("authorization", "Bearer s3cret-0123456789abcdef")
            .body(Body::from(serde_json::to_vec(b).unwrap()))
            .unwrap()
    };
    let event = |msg: &str| wire::Event {
        time_ms: 1_700_000_000_000,
        kind: "collector".into(),
        pid: None,
        device: None,
        message: msg.into(),
        snapshot_id: None,
    };
    let batch = |spool: Option<&str>, msg: &str| {
        let mut b = wire::Batch::new("gpu7", 1, "gpu7");
        b.spool_id = spool.map(str::to_string);
        b.events.push(event(msg));
        b
    };
    let ack = |text: &[u8]| serde_json::from_slice::<wire::Ack>(text).unwrap();

    // A version-1 collector, as before: stored, then a duplicate.
    let mut old = batch(None, "v1");
    old.version = 1;
    let (st, text) = call(&s, post(&old)).await;
    assert_eq!(
        (st, ack(&text).stored, ack(&text).spool_id),
        (StatusCode::OK, 1, None)
    );
    let (_, text) = call(&s, post(&old)).await;
    assert!(ack(&text).duplicate);

    // Two lives of one collector, each numbering from 1 in its own spool: both stored.
    for (spool, msg) in [("aaaa", "first life"), ("bbbb", "second life")] {
        let (st, text) = call(&s, post(&batch(Some(spool), msg))).await;
        let a = ack(&text);
        assert_eq!(st, StatusCode::OK);
        assert_eq!((a.duplicate, a.stored), (false, 1), "{msg}");
        assert!(a.acknowledges(Some(spool), 1));
    }
    // The same batch again: a duplicate; a different one under the same key: 409, not dropped.
    let (_, text) = call(&s, post(&batch(Some("bbbb"), "second life"))).await;
    assert!(ack(&text).duplicate);
    let (st, text) = call(&s, post(&batch(Some("bbbb"), "something else"))).await;
    assert_eq!(st, StatusCode::CONFLICT);
    assert!(String::from_utf8_lossy(&text).contains("different content"));
    let mut changed_v1 = batch(None, "changed");
    changed_v1.version = 1;
    let (st, _) = call(&s, post(&changed_v1)).await;
    assert_eq!(st, StatusCode::CONFLICT);
    let counts = s.live.live_counts().await.unwrap();
    assert_eq!(
        (counts[3], counts[4]),
        (3, 3),
        "three events in three batches"
    );
}

/// Finding 6: a delete racing a re-upload of the same file left committed rows with neither
/// file (2 and 6 runs in 400): the upload renamed its files into place, the delete removed
/// them, then the upload's row went in. Commits and deletes now take turns, so after any
/// interleaving every row has its original and its model file.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_delete_racing_a_reupload_never_leaves_a_row_without_files() {
    let s = state("delete-race").await;
    let bytes = fixture("multistream.pickle");
    for round in 0..400 {
        let id = upload(&s, bytes.clone()).await;
        let (a, b) = (s.clone(), s.clone());
        let again = bytes.clone();
        let del = tokio::spawn(async move {
            let req = Request::delete(format!("/api/snapshots/{id}"))
                .body(Body::empty())
                .unwrap();
            call(&a, req).await.0
        });
        let up = tokio::spawn(async move {
            let req = Request::post(api::routes::upload(&Default::default()))
                .body(Body::from(again))
                .unwrap();
            call(&b, req).await.0
        });
        let (d, u) = (del.await.unwrap(), up.await.unwrap());
        assert!(d.is_success() && u.is_success(), "round {round}: {d} {u}");
        // Model files are written after the answer; once written, each row has both files and
        // no model file outlives its row.
        s.library.model_writes_done().await;
        let listed = s.library.list(None).await.unwrap();
        let models = std::fs::read_dir(s.config.data_dir.join("models"))
            .unwrap()
            .count();
        assert_eq!(
            models,
            listed.len(),
            "round {round}: a model file without its row"
        );
        for info in listed {
            assert!(
                s.library.original_path(&info.sha256).exists()
                    && s.library.model_path(&info.sha256).exists(),
                "round {round}: snapshot {} is listed without its files",
                info.id
            );
        }
    }
}

/// Finding 7: a token did not bind identity: collector A could send B's host name and GPUs,
/// forge B's OOM alerts and take over B's GPU rows. A token now speaks for the host it first
/// reported, and a GPU for the host that first reported it.
#[tokio::test]
async fn a_collector_cannot_speak_for_another_host_or_its_gpus() {
    let dir = std::env::temp_dir().join(format!(
        "memscope-hardening-identity-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let mut args = server::testing::serve_args(dir);
    args.collector_tokens = vec![
        "gpu7=s3cret-0123456789abcdef".into(),
        "gpu8=other-0123456789abcdef".into(),
    ];
    let s = AppState::open(args).await.unwrap();
    let post = |token: &str, b: &wire::Batch| {
        Request::post("/api/ingest")
            .header("authorization", format!("Bearer {token}"))
            .body(Body::from(serde_json::to_vec(b).unwrap()))
            .unwrap()
    };
    let batch = |collector: &str, seq: u64, host: &str, uuid: &str| {
        let mut b = wire::Batch::new(collector, seq, host);
        b.gpus.push(gpu_sample(uuid));
        b
    };
    // Each collector reports its own host and GPU.
    let (st, _) = call(
        &s,
        post(
            "s3cret-0123456789abcdef",
            &batch("gpu7", 1, "gpu7", "GPU-seven"),
        ),
    )
    .await;
    assert_eq!(st, StatusCode::OK);
    let (st, _) = call(
        &s,
        post(
            "other-0123456789abcdef",
            &batch("gpu8", 1, "gpu8", "GPU-eight"),
        ),
    )
    .await;
    assert_eq!(st, StatusCode::OK);
    // gpu8 sending as host gpu7, with gpu7's GPU: refused.
    let (st, text) = call(
        &s,
        post(
            "other-0123456789abcdef",
            &batch("gpu8", 2, "gpu7", "GPU-seven"),
        ),
    )
    .await;
    assert_eq!(st, StatusCode::FORBIDDEN);
    let error = |t: &[u8]| serde_json::from_slice::<api::ErrorBody>(t).unwrap().error;
    assert!(
        error(&text).contains("speaks for host \"gpu8\""),
        "{}",
        error(&text)
    );
    // gpu8 as itself, claiming gpu7's GPU: refused.
    let (st, text) = call(
        &s,
        post(
            "other-0123456789abcdef",
            &batch("gpu8", 3, "gpu8", "GPU-seven"),
        ),
    )
    .await;
    assert_eq!(st, StatusCode::FORBIDDEN);
    assert!(
        error(&text).contains("belongs to host \"gpu7\""),
        "{}",
        error(&text)
    );
    // gpu8 forging an OOM alert for host gpu7: refused.
    let mut forged = wire::Batch::new("gpu8", 4, "gpu7");
    forged.events.push(wire::Event {
        time_ms: 1_700_000_000_000,
        kind: "oom".into(),
        pid: Some(1),
        device: Some(0),
        message: "forged".into(),
        snapshot_id: None,
    });
    let (st, _) = call(&s, post("other-0123456789abcdef", &forged)).await;
    assert_eq!(st, StatusCode::FORBIDDEN);
    // Nothing of it stored; gpu7's GPU still gpu7's.
    let counts = s.live.live_counts().await.unwrap();
    assert_eq!((counts[0], counts[3], counts[4]), (2, 0, 2));
    let owner: String = server::with_db!(&s.library.db, |p| sqlx::query_scalar(
        "SELECT host FROM gpus WHERE uuid = 'GPU-seven'"
    )
    .fetch_one(p)
    .await)
    .unwrap();
    assert_eq!(owner, "gpu7");
}

/// Finding 8: anyone who reached the port could delete or rename snapshots, any Host was
/// answered (DNS rebinding), and uploads were accepted cross-site.
#[tokio::test]
async fn writes_need_a_token_hosts_are_checked_and_other_sites_cannot_write() {
    const WRITE: &str = "w-0123456789abcdef";
    const READ: &str = "r-0123456789abcdef";
    let req_to = |host: &str, method: &str, uri: &str, headers: &[(&str, &str)]| {
        let mut r = Request::builder()
            .method(method)
            .uri(uri)
            .header("host", host);
        for (k, v) in headers {
            r = r.header(*k, *v);
        }
        r.body(Body::empty()).unwrap()
    };
    let req = |method: &str, uri: &str, headers: &[(&str, &str)]| {
        req_to("memscope.internal:8080", method, uri, headers)
    };
    // Default (loopback): no token needed, but a write from another site's page is refused.
    let s = state("access-open").await;
    let id = upload(&s, fixture("multistream.pickle")).await;
    let path = format!("/api/snapshots/{id}");
    let evil = [("origin", "http://evil.example")];
    let (st, _) = call(&s, req_to("localhost:8080", "DELETE", &path, &evil)).await;
    assert_eq!(st, StatusCode::FORBIDDEN, "cross-site delete");
    let (st, _) = call(
        &s,
        req_to("localhost:8080", "POST", "/api/snapshots", &evil),
    )
    .await;
    assert_eq!(st, StatusCode::FORBIDDEN, "cross-site upload");
    let own = [("origin", "http://localhost:8080")];
    let (st, _) = call(&s, req_to("localhost:8080", "DELETE", &path, &own)).await;
    assert_eq!(st, StatusCode::NO_CONTENT, "the dashboard's own delete");

    // Tokens: a write token to change the library, a read token to read it.
    let dir =
        std::env::temp_dir().join(format!("memscope-hardening-access-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut args = server::testing::serve_args(dir);
    args.api_tokens = vec![WRITE.into(), format!("read:{READ}")];
    args.allowed_hosts = vec!["memscope.internal".into()];
    let s = AppState::open(args).await.unwrap();
    let bearer = |t: &str| format!("Bearer {t}");
    let up = Request::post(api::routes::upload(&Default::default()))
        .header("host", "memscope.internal")
        .header("authorization", bearer(WRITE))
        .body(Body::from(fixture("multistream.pickle")))
        .unwrap();
    let (st, body) = call(&s, up).await;
    assert_eq!(st, StatusCode::CREATED);
    let id = serde_json::from_slice::<api::Uploaded>(&body).unwrap().id;
    let path = format!("/api/snapshots/{id}");
    let (st, text) = call(&s, req("GET", "/api/snapshots", &[])).await;
    assert_eq!(st, StatusCode::UNAUTHORIZED);
    assert!(String::from_utf8_lossy(&text).contains("needs an access token"));
    let (st, _) = call(&s, req("GET", "/api/health", &[])).await;
    assert_eq!(st, StatusCode::OK, "the health check stays open");
    let (st, _) = call(&s, req("GET", "/", &[])).await;
    assert_eq!(
        st,
        StatusCode::OK,
        "the dashboard loads, to ask for the token"
    );
    let read = bearer(READ);
    let (st, _) = call(&s, req("GET", &path, &[("authorization", &read)])).await;
    assert_eq!(st, StatusCode::OK);
    let (st, _) = call(&s, req("DELETE", &path, &[("authorization", &read)])).await;
    assert_eq!(st, StatusCode::FORBIDDEN, "a read token cannot delete");
    let (st, _) = call(&s, req("DELETE", &path, &[])).await;
    assert_eq!(st, StatusCode::UNAUTHORIZED);
    let cookie = format!("theme=dark; memscope_token_8080={WRITE}");
    let (st, _) = call(&s, req("DELETE", &path, &[("cookie", &cookie)])).await;
    assert_eq!(st, StatusCode::NO_CONTENT, "the dashboard's cookie");
    // Another Host (a rebound DNS name) is refused even with a token.
    let rebound = Request::get("/api/snapshots")
        .header("host", "attacker.example")
        .header("authorization", bearer(WRITE))
        .body(Body::empty())
        .unwrap();
    let (st, _) = call(&s, rebound).await;
    assert_eq!(st, StatusCode::FORBIDDEN);
}

/// Finding 2 (the pool): abandoned `/metrics` scrapes kept running and filled the one
/// 4-connection pool, so the library hung and ingest timed out. Live reads now have
/// connections of their own: with every one of them held by slow queries, ingest and the
/// library still answer at once (and live pages wait, as they should).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_live_queries_cannot_starve_ingest_or_the_library() {
    use std::time::Duration;
    let s = state("pools").await;
    let mut held = Vec::new();
    for _ in 0..server::db::LIVE_READ_CONNECTIONS {
        held.push(s.library.db.live_read().await.unwrap());
    }
    let fleet = Request::get(api::routes::live_fleet())
        .body(Body::empty())
        .unwrap();
    assert!(
        tokio::time::timeout(Duration::from_millis(300), call(&s, fleet))
            .await
            .is_err(),
        "the live pages wait for their own connections"
    );
    let mut b = wire::Batch::new("gpu7", 1, "gpu7");
    b.events.push(wire::Event {
        time_ms: 1_700_000_000_000,
        kind: "collector".into(),
        pid: None,
        device: None,
        message: "hello".into(),
        snapshot_id: None,
    });
    let ingest = Request::post("/api/ingest")
        .header("authorization", "Bearer s3cret-0123456789abcdef")
        .body(Body::from(serde_json::to_vec(&b).unwrap()))
        .unwrap();
    let (st, _) = tokio::time::timeout(Duration::from_secs(2), call(&s, ingest))
        .await
        .expect("ingest answers while live reads are busy");
    assert_eq!(st, StatusCode::OK);
    let list = Request::get("/api/snapshots").body(Body::empty()).unwrap();
    let (st, _) = tokio::time::timeout(Duration::from_secs(2), call(&s, list))
        .await
        .expect("the library answers while live reads are busy");
    assert_eq!(st, StatusCode::OK);
    drop(held);
}

/// "Queries cancelled when their client goes away", for the live store: a request dropped
/// mid-query (its client disconnected) interrupts the statement it was running instead of
/// leaving it to scan for nobody (on PostgreSQL: it no longer runs in the server), and the pool
/// serves the next request. The statement here would count to a billion (minutes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_query_whose_request_went_away_is_interrupted() {
    use std::time::{Duration, Instant};
    const FOREVER: &str = "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r \
                           WHERE x < 1000000000) SELECT count(*) FROM r";
    let s = state("interrupt").await;
    let rounds = server::db::LIVE_READ_CONNECTIONS as u64 + 1;
    for round in 1..=rounds {
        let lib = s.library.clone();
        let request = async move {
            let mut c = lib.db.live_read().await?;
            server::with_live!(c, |conn| sqlx::query_scalar::<_, i64>(FOREVER)
                .fetch_one(&mut *conn)
                .await)
        };
        assert!(
            tokio::time::timeout(Duration::from_millis(100), request)
                .await
                .is_err(),
            "the statement cannot end in 100 ms"
        );
        // The request is gone; its statement stops at the next progress check.
        let deadline = Instant::now() + Duration::from_secs(5);
        while s.live.reads_interrupted() < round {
            assert!(
                Instant::now() < deadline,
                "round {round}: never interrupted"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    // On PostgreSQL the statements ran in the server: none of them may still be running there.
    if let Some(pool) = s.library.db.as_postgres() {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let running: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
                 AND state = 'active' AND query LIKE 'WITH RECURSIVE r(x)%x < 1000000000%'",
            )
            .fetch_one(pool)
            .await
            .unwrap();
            if running == 0 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{running} abandoned statements still run in PostgreSQL"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    // Every connection has been interrupted once; each serves a normal query again (no stale
    // handler from the request that went away).
    let started = Instant::now();
    let mut held = Vec::new();
    for _ in 0..server::db::LIVE_READ_CONNECTIONS {
        let mut c = s.library.db.live_read().await.unwrap();
        let n: i64 = server::with_live!(c, |conn| sqlx::query_scalar(
            "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r WHERE x < 100000) \
             SELECT count(*) FROM r",
        )
        .fetch_one(&mut *conn)
        .await)
        .unwrap();
        assert_eq!(n, 100_000);
        held.push(c);
    }
    assert!(started.elapsed() < Duration::from_secs(5));
    drop(held);
    let fleet = Request::get(api::routes::live_fleet())
        .body(Body::empty())
        .unwrap();
    let (st, _) = call(&s, fleet).await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(s.live.reads_interrupted(), rounds);
}
