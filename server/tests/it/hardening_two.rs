//! Issue 38, the second outside probe's findings, each reproduced as a test that failed on the
//! main of 2026-11-26 (its output is in the issue's closing note) and what the server must do
//! instead, on either backend. The memory and starvation items (1–3) are benchmarks and
//! loopback load tests of their own.

use std::io::{Read, Write};

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use server::state::AppState;

use crate::support::app::{error_of, fixture_bytes, respond};
use crate::support::scenario::gpu;

const GPU7: &str = "gpu7-0123456789abcdef";
const SPARE: &str = "spare-0123456789abcdef";
const WRITE: &str = "w-0123456789abcdef";
const READ: &str = "r-0123456789abcdef";

/// A fresh app on the run's backend with `edit` applied to its settings.
async fn app_with(tag: &str, edit: impl FnOnce(&mut server::config::ServeArgs)) -> AppState {
    let dir = std::env::temp_dir().join(format!("memscope-h2-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut args = server::testing::serve_args(dir);
    args.collector_tokens = vec![format!("gpu7={GPU7}"), format!("spare={SPARE}")];
    edit(&mut args);
    AppState::open(args).await.unwrap()
}

fn now_ms() -> i64 {
    server::now_ms()
}

fn oom_event(time_ms: i64, message: &str) -> wire::Event {
    wire::Event {
        time_ms,
        kind: "oom".into(),
        pid: Some(7),
        device: Some(0),
        message: message.into(),
        snapshot_id: None,
    }
}

/// `POST /api/ingest` of `b` with `authorization` as given.
fn ingest_as(authorization: &str, b: &wire::Batch) -> Request<Body> {
    Request::post(api::routes::INGEST)
        .header(header::AUTHORIZATION, authorization)
        .body(Body::from(serde_json::to_vec(b).unwrap()))
        .unwrap()
}

fn ingest(token: &str, b: &wire::Batch) -> Request<Body> {
    ingest_as(&format!("Bearer {token}"), b)
}

/// `GET uri` sent to `host`, with `headers`.
fn get_at(host: &str, uri: &str, headers: &[(&str, &str)]) -> Request<Body> {
    let mut r = Request::get(uri).header(header::HOST, host);
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    r.body(Body::empty()).unwrap()
}

async fn upload_named(s: &AppState, name: &str, fixture: &str) -> (StatusCode, String) {
    let req = Request::post(format!("/api/snapshots?name={name}"))
        .body(Body::from(fixture_bytes(fixture)))
        .unwrap();
    let (st, body) = respond(s, req).await;
    (st, String::from_utf8_lossy(&body).to_string())
}

pub(crate) async fn metrics(s: &AppState) -> String {
    let (st, body) = respond(s, get_at("localhost", "/metrics", &[])).await;
    assert_eq!(st, StatusCode::OK);
    String::from_utf8_lossy(&body).to_string()
}

/// The value of the metric line that starts with `prefix`.
pub(crate) fn metric(text: &str, prefix: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// Item 4: a token no host used yet could claim a host another token reports, and overwrite its
/// readings and alerts. A token's NAME is the one host it speaks for.
#[tokio::test]
async fn a_spare_token_cannot_speak_for_a_host_another_token_reports() {
    let s = app_with("claim", |_| {}).await;
    let mut own = wire::Batch::new("gpu7", 1, "gpu7");
    own.gpus.push(gpu("GPU-seven", now_ms(), 1 << 20));
    let (st, _) = respond(&s, ingest(GPU7, &own)).await;
    assert_eq!(st, StatusCode::OK);
    // The spare token, never used, sends as host gpu7: an OOM alert and a process on its GPU.
    let mut forged = wire::Batch::new("spare", 1, "gpu7");
    forged.events.push(oom_event(now_ms(), "forged"));
    let (st, message) = error_of(&s, ingest(SPARE, &forged)).await;
    assert_eq!(st, StatusCode::FORBIDDEN, "{message}");
    assert!(message.contains("speaks for host \"spare\""), "{message}");
    let counts = s.live.live_counts().await.unwrap();
    assert_eq!((counts[3], counts[4]), (0, 1), "no alert, one batch stored");
}

/// Item 6: with only a read token configured, uploads, renames and deletes were open to anyone.
#[tokio::test]
async fn a_read_token_alone_still_closes_writes() {
    let s = app_with("readonly", |a| a.api_tokens = vec![format!("read:{READ}")]).await;
    let (st, _) = upload_named(&s, "x", "multistream.pickle").await;
    assert_eq!(st, StatusCode::UNAUTHORIZED, "an upload without a token");
    let with_read = Request::post("/api/snapshots?name=x")
        .header(header::AUTHORIZATION, format!("Bearer {READ}"))
        .body(Body::from(fixture_bytes("multistream.pickle")))
        .unwrap();
    let (st, _) = respond(&s, with_read).await;
    assert_eq!(st, StatusCode::FORBIDDEN, "a read token cannot upload");
    let auth = format!("Bearer {READ}");
    let (st, _) = respond(
        &s,
        get_at("localhost", "/api/snapshots", &[("authorization", &auth)]),
    )
    .await;
    assert_eq!(st, StatusCode::OK, "and may read");
}

/// Item 7: a server on loopback answered any Host, so a page could rebind its DNS name to
/// 127.0.0.1 and list, download and delete every snapshot.
#[tokio::test]
async fn a_loopback_server_answers_loopback_names_only() {
    let s = app_with("rebind", |_| {}).await;
    let (st, message) = error_of(&s, get_at("rebound.example:8080", "/api/snapshots", &[])).await;
    assert_eq!(st, StatusCode::FORBIDDEN, "{message}");
    assert!(message.contains("localhost"), "{message}");
    for host in [
        "localhost:8080",
        "127.0.0.1:8080",
        "[::1]:8080",
        "LOCALHOST",
    ] {
        let (st, _) = respond(&s, get_at(host, "/api/snapshots", &[])).await;
        assert_eq!(st, StatusCode::OK, "{host}");
    }
    // On another address (a deliberate deployment) without --allowed-host, any name.
    let public = app_with("rebind-public", |a| {
        a.addr = "0.0.0.0:8080".parse().unwrap();
    })
    .await;
    let (st, _) = respond(
        &public,
        get_at("memscope.example:8080", "/api/snapshots", &[]),
    )
    .await;
    assert_eq!(st, StatusCode::OK);
}

/// Item 8: a rename beside uploads and ingest failed with 500 "database is locked" (a deferred
/// transaction upgraded to a write). Every rename now succeeds while both write.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn renames_beside_uploads_and_ingest_succeed() {
    let s = app_with("locked", |_| {}).await;
    let (st, body) = upload_named(&s, "first", "multistream.pickle").await;
    assert!(st.is_success(), "{body}");
    let id = serde_json::from_str::<api::Uploaded>(&body).unwrap().id;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = |k: u64| {
        let (s, stop) = (s.clone(), stop.clone());
        tokio::spawn(async move {
            let mut seq = 1;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let mut b = wire::Batch::new(&format!("gpu7/w{k}"), seq, "gpu7");
                for i in 0..50 {
                    b.gpus.push(gpu(&format!("GPU-{k}-{i}"), now_ms(), seq));
                }
                let (st, _) = respond(&s, ingest(GPU7, &b)).await;
                assert_eq!(st, StatusCode::OK);
                seq += 1;
            }
        })
    };
    let writers: Vec<_> = (0..3).map(writer).collect();
    let uploader = {
        let (s, stop) = (s.clone(), stop.clone());
        tokio::spawn(async move {
            let fixtures = [
                "oom_fraction.pickle",
                "steady_train.pickle",
                "multistream.pickle",
            ];
            let mut n = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let (st, _) = upload_named(&s, &format!("u{n}"), fixtures[n % 3]).await;
                assert!(st.is_success());
                n += 1;
            }
        })
    };
    let mut statuses = std::collections::BTreeMap::<u16, u32>::new();
    for i in 0..300 {
        let patch = Request::patch(format!("/api/snapshots/{id}"))
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(format!(
                r#"{{"name":"renamed {i}","tags":[{{"key":"n","value":"{i}"}}]}}"#
            )))
            .unwrap();
        let (st, _) = respond(&s, patch).await;
        *statuses.entry(st.as_u16()).or_default() += 1;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for w in writers {
        w.await.unwrap();
    }
    uploader.await.unwrap();
    println!("300 renames beside 3 ingest writers and an uploader: {statuses:?}");
    assert_eq!(statuses.get(&200), Some(&300), "{statuses:?}");
}

/// Item 9: one sample stamped in the future (a VM with a wrong clock) froze the latest values
/// in `/metrics` and the fleet until wall time passed it. It is refused and counted.
#[tokio::test]
async fn a_sample_stamped_ahead_of_the_clock_is_refused_and_counted() {
    let s = app_with("future", |_| {}).await;
    let mut ahead = wire::Batch::new("gpu7", 1, "gpu7");
    ahead
        .gpus
        .push(gpu("GPU-seven", now_ms() + 86_400_000, 999 << 20));
    let (st, _) = respond(&s, ingest(GPU7, &ahead)).await;
    assert_eq!(
        st,
        StatusCode::OK,
        "the batch is acknowledged (its sender moves on)"
    );
    let mut now = wire::Batch::new("gpu7", 2, "gpu7");
    now.gpus.push(gpu("GPU-seven", now_ms(), 5 << 20));
    let (st, _) = respond(&s, ingest(GPU7, &now)).await;
    assert_eq!(st, StatusCode::OK);
    let text = metrics(&s).await;
    assert_eq!(
        metric(&text, "memscope_gpu_memory_used_bytes{"),
        Some((5u64 << 20) as f64),
        "the latest reading is the present one:\n{text}"
    );
    assert_eq!(
        metric(&text, "memscope_ingest_future_samples_total"),
        Some(1.0),
        "{text}"
    );
}

/// Item 10: ingest cost was quadratic in the series of one batch (60k GPUs in one batch: 12 s,
/// every other collector waiting). A batch holds at most `wire::MAX_SERIES_PER_BATCH` series and
/// a host at most `MAX_GPUS_PER_HOST` GPUs; the cost within them is linear
/// (`ingest_scale_bench`).
#[tokio::test]
async fn a_batch_of_too_many_series_is_refused_at_once() {
    let s = app_with("series", |_| {}).await;
    let mut huge = wire::Batch::new("gpu7", 1, "gpu7");
    for i in 0..60_000 {
        huge.gpus.push(gpu(&format!("GPU-{i}"), now_ms(), 1));
    }
    let started = std::time::Instant::now();
    let (st, message) = error_of(&s, ingest(GPU7, &huge)).await;
    println!(
        "a batch of 60,000 GPUs answered {st} in {:.0} ms",
        started.elapsed().as_secs_f64() * 1e3
    );
    assert_eq!(st, StatusCode::BAD_REQUEST, "{message}");
    assert!(message.contains("series"), "{message}");
    let mut many = wire::Batch::new("gpu7", 2, "gpu7");
    for i in 0..server::live::MAX_GPUS_PER_HOST + 1 {
        many.gpus.push(gpu(&format!("GPU-{i}"), now_ms(), 1));
    }
    let (st, message) = error_of(&s, ingest(GPU7, &many)).await;
    assert_eq!(st, StatusCode::FORBIDDEN, "{message}");
    assert!(message.contains("at most 1024"), "{message}");
    assert_eq!(s.live.live_counts().await.unwrap()[4], 0, "nothing stored");
}

/// Item 13: a valid model file copied from another snapshot was served as this one.
#[tokio::test]
async fn a_model_file_copied_from_another_snapshot_is_not_served() {
    let s = app_with("copied-model", |_| {}).await;
    let (_, a) = upload_named(&s, "a", "oom_fraction.pickle").await;
    let (_, b) = upload_named(&s, "b", "steady_train.pickle").await;
    let a: api::Uploaded = serde_json::from_str(&a).unwrap();
    let b: api::Uploaded = serde_json::from_str(&b).unwrap();
    s.library.model_writes_done().await;
    let timeline = |id: &str| get_at("localhost", &format!("/api/snapshots/{id}/timeline"), &[]);
    let (st, own) = respond(&s, timeline(&a.id)).await;
    assert_eq!(st, StatusCode::OK);
    let model = |u: &api::Uploaded| s.library.model_path(&u.snapshot.sha256);
    std::fs::copy(model(&b), model(&a)).unwrap();
    s.models.remove(&a.id);
    let (st, served) = respond(&s, timeline(&a.id)).await;
    assert_eq!(st, StatusCode::OK);
    let (own, served): (api::TimelineAnswer, api::TimelineAnswer) = (
        serde_json::from_slice(&own).unwrap(),
        serde_json::from_slice(&served).unwrap(),
    );
    assert_eq!(
        served, own,
        "a's timeline, rebuilt from a's original, not b's"
    );
}

/// Item 14: with --allowed-host, a write's Origin was compared by host name only (any port of
/// the host passed), and the token cookie was set by script (readable, not HttpOnly, sent to
/// every port). Origins are compared whole; the server sets an HttpOnly cookie named for its
/// port.
#[tokio::test]
async fn origins_are_compared_whole_and_the_token_cookie_is_the_servers() {
    let s = app_with("origin-port", |a| {
        a.api_tokens = vec![WRITE.into(), format!("read:{READ}")];
        a.allowed_hosts = vec!["memscope.internal".into()];
    })
    .await;
    let auth = format!("Bearer {WRITE}");
    let delete_from = |origin: &str| {
        Request::delete("/api/snapshots/0000000000000000")
            .header(header::HOST, "memscope.internal:8080")
            .header(header::ORIGIN, origin)
            .header(header::AUTHORIZATION, &auth)
            .body(Body::empty())
            .unwrap()
    };
    let (st, _) = respond(&s, delete_from("http://memscope.internal:9999")).await;
    assert_eq!(st, StatusCode::FORBIDDEN, "a page on another port");
    let (st, _) = respond(&s, delete_from("http://memscope.internal:8080")).await;
    assert_eq!(
        st,
        StatusCode::NOT_FOUND,
        "the dashboard's own origin passes"
    );

    let session = Request::post("/api/session")
        .header(header::HOST, "memscope.internal:8080")
        .header(header::AUTHORIZATION, &auth)
        .body(Body::empty())
        .unwrap();
    let res = {
        use tower::ServiceExt;
        server::http::app(s.clone()).oneshot(session).await.unwrap()
    };
    assert_eq!(res.status(), StatusCode::NO_CONTENT);
    let cookie = res
        .headers()
        .get(header::SET_COOKIE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    assert!(
        cookie.starts_with(&format!("memscope_token_8080={WRITE};"))
            && cookie.contains("HttpOnly")
            && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let with_cookie = |host: &str| {
        get_at(
            host,
            "/api/snapshots",
            &[("cookie", &format!("memscope_token_8080={WRITE}"))],
        )
    };
    let (st, _) = respond(&s, with_cookie("memscope.internal:8080")).await;
    assert_eq!(st, StatusCode::OK, "this port's cookie");
    let (st, _) = respond(&s, with_cookie("memscope.internal:9090")).await;
    assert_eq!(
        st,
        StatusCode::UNAUTHORIZED,
        "another port's cookie is not this server's"
    );
    let wrong = Request::post("/api/session")
        .header(header::HOST, "memscope.internal:8080")
        .header(header::AUTHORIZATION, "Bearer not-a-token-of-this-server")
        .body(Body::empty())
        .unwrap();
    let (st, _) = respond(&s, wrong).await;
    assert_eq!(st, StatusCode::UNAUTHORIZED);
}

/// Item 15: NUL in a name, a tag, a process name or an event message gave 500 on PostgreSQL
/// (and was stored on SQLite), and a collector resent that batch forever. Refused at the
/// boundary as malformed, the same on both backends.
#[tokio::test]
async fn nul_and_control_characters_are_refused_at_the_boundary() {
    let s = app_with("nul", |_| {}).await;
    let (st, body) = upload_named(&s, "bad%00name", "multistream.pickle").await;
    assert_eq!(st, StatusCode::BAD_REQUEST, "{body}");
    let (st, body) = upload_named(&s, "ok", "multistream.pickle").await;
    assert!(st.is_success(), "{body}");
    let id = serde_json::from_str::<api::Uploaded>(&body).unwrap().id;
    for update in [
        r#"{"name":"a\u0000b"}"#,
        r#"{"tags":[{"key":"job","value":"x\u0000"}]}"#,
        r#"{"name":"two\r\nlines"}"#,
    ] {
        let patch = Request::patch(format!("/api/snapshots/{id}"))
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(update))
            .unwrap();
        let (st, message) = error_of(&s, patch).await;
        assert_eq!(st, StatusCode::BAD_REQUEST, "{update}: {message}");
        assert!(message.contains("control character"), "{message}");
    }
    let mut poison = wire::Batch::new("gpu7", 1, "gpu7");
    poison.events.push(oom_event(now_ms(), "bad\0byte"));
    let (st, message) = error_of(&s, ingest(GPU7, &poison)).await;
    assert_eq!(st, StatusCode::BAD_REQUEST, "{message}");
    let mut named = wire::Batch::new("gpu7", 2, "gpu7");
    named.processes.push(wire::ProcessSample {
        time_ms: now_ms(),
        gpu_uuid: "GPU-seven".into(),
        pid: 7,
        start_time_ms: None,
        name: Some("py\0thon".into()),
        cgroup: None,
        used_bytes: 1,
    });
    let (st, message) = error_of(&s, ingest(GPU7, &named)).await;
    assert_eq!(st, StatusCode::BAD_REQUEST, "{message}");
    assert_eq!(s.live.live_counts().await.unwrap()[4], 0, "nothing stored");
}

/// Item 16: collector tokens could be one character, and one NAME could be given twice.
#[tokio::test]
async fn collector_tokens_are_long_and_one_per_host() {
    for tokens in [
        vec!["gpu7=x".to_string()],
        vec![format!("gpu7={GPU7}"), format!("gpu7={SPARE}")],
    ] {
        let dir = std::env::temp_dir().join(format!("memscope-h2-short-{}", std::process::id()));
        let mut args = server::testing::serve_args(dir);
        args.collector_tokens = tokens.clone();
        let err = AppState::open(args).await.unwrap_err().to_string();
        assert!(
            err.contains("too short") || err.contains("twice"),
            "{tokens:?}: {err}"
        );
    }
}

/// Item 17: a name with CR/LF or NUL made `/original` answer 500. Such names are refused, and
/// a name stored before (from an older server) is still served, in a valid header.
#[tokio::test]
async fn a_download_is_named_in_a_valid_header_whatever_its_name() {
    let s = app_with("disposition", |_| {}).await;
    let (st, _) = upload_named(&s, "two%0D%0Alines", "multistream.pickle").await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
    let (_, body) = upload_named(&s, "x", "multistream.pickle").await;
    let id = serde_json::from_str::<api::Uploaded>(&body).unwrap().id;
    server::with_db!(&s.library.db, |p| sqlx::query(
        "UPDATE snapshots SET name = $1 WHERE id = $2"
    )
    .bind("older\r\nname \"é\".pickle")
    .bind(&id)
    .execute(p)
    .await
    .map(|done| done.rows_affected()))
    .unwrap();
    let res = {
        use tower::ServiceExt;
        server::http::app(s.clone())
            .oneshot(get_at(
                "localhost",
                &format!("/api/snapshots/{id}/original"),
                &[],
            ))
            .await
            .unwrap()
    };
    assert_eq!(res.status(), StatusCode::OK);
    let disposition = res.headers()[header::CONTENT_DISPOSITION].to_str().unwrap();
    assert!(
        disposition.contains("filename*=UTF-8''older__name%20%22%C3%A9%22.pickle"),
        "{disposition}"
    );
}

/// Item 18 and the smaller ones: an inline `#` comment in the tokens file became part of the
/// token; `bearer` in lower case was refused; version-0 batches were accepted; a zip
/// (`torch.save`) was reported as a pickle opcode; `?q=` took `%` and `_` as wildcards.
#[tokio::test]
async fn tokens_files_comments_bearer_case_versions_zips_and_searches() {
    let dir = std::env::temp_dir().join(format!("memscope-h2-tokens-file-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("tokens");
    std::fs::write(&file, format!("# ops\nwrite {WRITE}   # the CI's token\n")).unwrap();
    let s = app_with("tokfile", |a| a.api_tokens_file = Some(file.clone())).await;
    let up = |authorization: &str| {
        Request::post("/api/snapshots?name=50%25_done")
            .header(header::AUTHORIZATION, authorization)
            .body(Body::from(fixture_bytes("multistream.pickle")))
            .unwrap()
    };
    let (st, _) = respond(&s, up(&format!("bearer {WRITE}"))).await;
    assert_eq!(
        st,
        StatusCode::CREATED,
        "the token before the comment, `bearer` in lower case"
    );
    let plain = Request::post("/api/snapshots?name=plain")
        .header(header::AUTHORIZATION, format!("Bearer {WRITE}"))
        .body(Body::from(fixture_bytes("oom_fraction.pickle")))
        .unwrap();
    assert_eq!(respond(&s, plain).await.0, StatusCode::CREATED);
    let mut v0 = wire::Batch::new("gpu7", 1, "gpu7");
    v0.version = 0;
    let (st, _) = respond(&s, ingest_as(&format!("BEARER {GPU7}"), &v0)).await;
    assert_eq!(st, StatusCode::BAD_REQUEST, "version 0");

    let zip = Request::post("/api/snapshots?name=ckpt")
        .header(header::AUTHORIZATION, format!("Bearer {WRITE}"))
        .body(Body::from(
            b"PK\x03\x04\x14\x00\x00\x00\x08\x00archive/data.pkl".to_vec(),
        ))
        .unwrap();
    let (st, message) = error_of(&s, zip).await;
    assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        message.contains("zip archive") && !message.contains("opcode"),
        "{message}"
    );

    let auth = format!("Bearer {WRITE}");
    let list = |q: &str| {
        get_at(
            "localhost",
            &format!("/api/snapshots?q={q}"),
            &[("authorization", &auth)],
        )
    };
    for (q, hits) in [("%25", 1), ("_", 1), ("0%25", 1), ("x_y", 0), ("%25%25", 0)] {
        let (st, body) = respond(&s, list(q)).await;
        assert_eq!(st, StatusCode::OK);
        let found: Vec<api::SnapshotInfo> = serde_json::from_slice(&body).unwrap();
        assert_eq!(found.len(), hits, "q={q}");
    }
}

/// Item 12: a declared `Content-Length` near the cap made the engine reserve its tables for that
/// size before a byte arrived (~4 GB of address space), so a server under `ulimit -v` aborted.
/// The reservation is bounded and the tables grow with what arrives: the server under a 3 GiB
/// limit (idle, it takes about 0.5) takes such a request and goes on answering.
#[test]
fn a_declared_length_near_the_cap_reserves_nothing_up_front() {
    let dir = std::env::temp_dir().join(format!("memscope-ulimit-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let port = crate::support::free_port();
    let limit_kib: u64 = 3 << 20; // 3 GiB: the idle server takes about 0.5
    let mut server = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!(
            "ulimit -v {limit_kib} && exec {} serve --addr 127.0.0.1:{port} --data-dir {}",
            env!("CARGO_BIN_EXE_memscope"),
            dir.display()
        ))
        .env("MEMSCOPE_LOG", "warn")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let health = || {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
        s.write_all(b"GET /api/health HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n")
            .ok()?;
        let mut answer = String::new();
        s.read_to_string(&mut answer).ok()?;
        answer.starts_with("HTTP/1.1 200").then_some(())
    };
    let up = (0..200).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(50));
        health().is_some()
    });
    assert!(
        up,
        "the server starts under a {limit_kib} KiB address-space limit"
    );
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(
        format!(
            "POST /api/snapshots?name=claim HTTP/1.1\r\nhost: localhost\r\ncontent-length: {}\r\n\r\n",
            (8u64 << 30) - 1
        )
        .as_bytes(),
    )
    .unwrap();
    s.write_all(b"\x80\x04\x95\x00\x00\x00\x00\x00\x00\x00\x00}\x94(")
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    drop(s);
    std::thread::sleep(std::time::Duration::from_millis(500));
    let exited = server.try_wait().unwrap();
    let answered = health().is_some();
    let _ = server.kill();
    let mut stderr = String::new();
    let _ = server.stderr.take().unwrap().read_to_string(&mut stderr);
    assert!(
        exited.is_none() && answered,
        "the server died or stopped answering ({exited:?}): {stderr}"
    );
}

/// Issue 38, item 1: the uploads being parsed share one memory budget
/// (`--max-parse-memory-bytes`): one that finds it held by another parse is answered 503 with
/// `Retry-After` (not 422: nothing is wrong with it), and goes through once the other is done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uploads_share_one_parse_memory_budget() {
    use tower::ServiceExt;
    let s = app_with("budget", |a| a.max_parse_memory_bytes = Some(24 << 20)).await;
    let big = fixture_bytes("big_python.pickle");
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Vec<u8>, std::io::Error>>(4);
    let chunks =
        futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|c| (c, rx)) });
    let first = Request::post("/api/snapshots?name=first")
        .body(Body::from_stream(chunks))
        .unwrap();
    let first = tokio::spawn({
        let s = s.clone();
        async move { respond(&s, first).await }
    });
    let cut = big.len() * 3 / 4;
    for chunk in big[..cut].chunks(1 << 20) {
        tx.send(Ok(chunk.to_vec())).await.unwrap();
    }
    let second = || {
        Request::post("/api/snapshots?name=second")
            .body(Body::from(fixture_bytes("big_python.pickle.xz")))
            .unwrap()
    };
    // The first parse holds most of the budget (what it needs and a 16 MiB step) once it has
    // read a few MiB (/metrics shows it); the second (the same snapshot, compressed) needs
    // about 17 MiB.
    let free = || async {
        metric(&metrics(&s).await, "memscope_parse_memory_free_bytes ").unwrap_or(f64::MAX)
    };
    for _ in 0..200 {
        if free().await < (8 << 20) as f64 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(
        free().await < (8 << 20) as f64,
        "the first upload holds the budget"
    );
    let busy = server::http::app(s.clone())
        .oneshot(second())
        .await
        .unwrap();
    assert_eq!(busy.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(busy.headers()[header::RETRY_AFTER], "1");
    let body = http_body_util::BodyExt::collect(busy.into_body())
        .await
        .unwrap()
        .to_bytes();
    let message = String::from_utf8_lossy(&body);
    assert!(
        message.contains("in use by other uploads") && message.contains("try again"),
        "{message}"
    );
    tx.send(Ok(big[cut..].to_vec())).await.unwrap();
    drop(tx);
    let (status, body) = first.await.unwrap();
    assert_eq!(
        status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&body)
    );
    // The same content as the first: stored once, answered as the existing entry.
    let (status, _) = respond(&s, second()).await;
    assert!(
        status.is_success(),
        "after the first, the second fits: {status}"
    );
    assert_eq!(free().await, (24u64 << 20) as f64, "all given back");
}
