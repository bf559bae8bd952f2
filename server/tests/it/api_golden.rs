//! Golden answers of the HTTP API: one file per endpoint and fixture under `tests/golden/api/`,
//! compared exactly (after sorting keys and masking the few values that depend on the clock).
//! Perfetto's diff tests in spirit: fixture, query, expected answer. `UPDATE_GOLDEN=1` rewrites
//! them; a change in any answer that was not meant shows up as a failed test and a diff in review.
//!
//! The answers were first recorded before the `api` crate existed, so they also prove that moving
//! every answer onto a typed `api` struct changed no byte a client sees.

use std::path::{Path, PathBuf};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::Value;
use server::state::AppState;
use tower::ServiceExt;

use crate::support::scenario::scenario;

/// Snapshot fixtures and the queries asked of each (besides the report, info and segments).
const FIXTURES: &[&str] = &[
    "fragmentation.pickle",
    "leak_detached_cache.pickle",
    "multistream.pickle",
    "oom_fraction.pickle",
    "segments_only.pickle",
    "steady_train.pickle",
    "variants/two_devices.pickle",
    "harness/expandable_segments.pickle",
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

async fn call(state: &AppState, req: Request<Body>) -> (StatusCode, Vec<u8>) {
    let res = server::http::app(state.clone()).oneshot(req).await.unwrap();
    let status = res.status();
    (
        status,
        res.into_body().collect().await.unwrap().to_bytes().to_vec(),
    )
}

async fn get(state: &AppState, uri: &str) -> (StatusCode, Value) {
    let (st, body) = call(state, Request::get(uri).body(Body::empty()).unwrap()).await;
    (st, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

/// Replaces the values that depend on when the test runs: upload times and durations (`mask`)
/// and live times, given as offsets from the scenario's start `t0`.
fn normalise(v: &mut Value, t0: Option<i64>) {
    const MASK: &[&str] = &["uploaded_at_ms", "index_ms", "now_ms"];
    match v {
        Value::Object(m) => {
            for (k, x) in m.iter_mut() {
                if MASK.contains(&k.as_str()) && !x.is_null() {
                    *x = Value::String("<varies>".into());
                } else {
                    normalise(x, t0);
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|x| normalise(x, t0)),
        Value::Number(n) => {
            if let (Some(t0), Some(i)) = (t0, n.as_i64()) {
                // Only live answers pass t0. Times of receipt are within two minutes of now;
                // the scenario's own times are 8–10 minutes old; nothing else is near either.
                if (i - server::now_ms()).abs() < 120_000 {
                    *v = Value::String("<now>".into());
                } else if (i - t0).abs() < 86_400_000 {
                    *v = Value::String(format!("t0{:+}", i - t0));
                }
            }
        }
        _ => {}
    }
}

/// A metrics line whose value is a time of receipt (a host's last report, in seconds) within two
/// minutes of now, with that value as `<now>`.
fn received_now(line: &str) -> String {
    match line.rsplit_once(' ') {
        Some((series, v))
            if series.starts_with("memscope_collector_last_seen_timestamp_seconds") =>
        {
            match v.parse::<f64>() {
                Ok(t) if ((t * 1000.0) as i64 - server::now_ms()).abs() < 120_000 => {
                    format!("{series} <now>")
                }
                _ => line.to_string(),
            }
        }
        _ => line.to_string(),
    }
}

/// Compares (or with `UPDATE_GOLDEN=1` writes) one answer; returns a mismatch description.
fn check(
    dir: &Path,
    name: &str,
    status: StatusCode,
    mut answer: Value,
    t0: Option<i64>,
) -> Option<String> {
    normalise(&mut answer, t0);
    let text = format!(
        "{}\n{}\n",
        status.as_u16(),
        serde_json::to_string_pretty(&answer).unwrap()
    );
    let path = dir.join(format!("{name}.json"));
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(&path, &text).unwrap();
        return None;
    }
    match std::fs::read_to_string(&path) {
        Ok(want) if want == text => None,
        Ok(want) => {
            let line = want
                .lines()
                .zip(text.lines())
                .position(|(a, b)| a != b)
                .unwrap_or(want.lines().count().min(text.lines().count()));
            Some(format!(
                "{}: differs from line {}: expected {:?}, got {:?}",
                path.display(),
                line + 1,
                want.lines().nth(line).unwrap_or("<end>"),
                text.lines().nth(line).unwrap_or("<end>")
            ))
        }
        Err(_) => Some(format!(
            "{}: missing; run with UPDATE_GOLDEN=1 to record it",
            path.display()
        )),
    }
}

fn golden_dir() -> PathBuf {
    root().join("tests/golden/api")
}

/// `variants/two_devices.pickle` → `two_devices`.
fn stem(fixture: &str) -> String {
    fixture
        .rsplit('/')
        .next()
        .unwrap()
        .trim_end_matches(".pickle")
        .to_string()
}

async fn open(tag: &str) -> AppState {
    let dir = std::env::temp_dir().join(format!("memscope-golden-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut args = server::testing::serve_args(dir);
    args.collector_tokens = vec!["gpu7=s3cret-0123456789abcdef".into()];
    AppState::open(args).await.unwrap()
}

#[tokio::test]
async fn snapshot_endpoints_answer_as_recorded() {
    let state = open("snapshots").await;
    let mut failures = Vec::new();
    let mut ids = Vec::new();
    for fixture in FIXTURES {
        let bytes = std::fs::read(root().join("tests/fixtures").join(fixture)).unwrap();
        let (st, body) = call(
            &state,
            Request::post(format!(
                "/api/snapshots?name={}&tags=job=golden,rank=0",
                stem(fixture)
            ))
            .body(Body::from(bytes))
            .unwrap(),
        )
        .await;
        let upload: Value = serde_json::from_slice(&body).unwrap();
        let id = upload["id"].as_str().expect("uploaded").to_string();
        let dir = golden_dir().join(stem(fixture));
        failures.extend(check(&dir, "upload", st, upload, None));
        ids.push(id.clone());

        let report: Value = get(&state, &format!("/api/snapshots/{id}")).await.1;
        // A middle event and a stack that exists, so the position and frames queries ask something.
        let events = report["devices"]
            .as_object()
            .and_then(|d| d.values().map(|v| v["entries"].as_u64().unwrap_or(0)).max())
            .unwrap_or(0);
        let mid = events / 2;
        let mut queries: Vec<(&str, String)> = vec![
            ("report", String::new()),
            ("info", "/info".into()),
            ("segments", "/segments".into()),
            ("timeline", "/timeline?buckets=24&allocations=8".into()),
            (
                "timeline_event_axis",
                "/timeline?axis=event&buckets=16&allocations=4".into(),
            ),
            (
                "timeline_window",
                format!(
                    "/timeline?axis=event&from={}&to={}&buckets=12&allocations=4",
                    mid / 2,
                    mid
                ),
            ),
            ("state", "/state".into()),
            ("state_mid", format!("/state?position={mid}")),
            ("stacks", "/stacks".into()),
            ("stacks_python", "/stacks?frames=python".into()),
            ("stacks_mid", format!("/stacks?position={mid}")),
            ("frames_1", "/frames/1".into()),
            ("categories", "/categories?limit=12".into()),
            (
                "timeline_categories",
                "/timeline?axis=event&buckets=8&allocations=0&categories=true".into(),
            ),
            ("stacks_activations", "/stacks?category=activation".into()),
            ("stacks_held", "/stacks?weight=held".into()),
            ("bad_weight", "/stacks?weight=longest".into()),
            (
                "categories_mid",
                format!("/categories?position={mid}&limit=6"),
            ),
            (
                "categories_activations",
                "/categories?category=activation&limit=4".into(),
            ),
            ("bad_category", "/categories?category=weights".into()),
            ("device_9", "/timeline?device=9".into()),
            ("bad_frames", "/stacks?frames=cpp".into()),
        ];
        if fixture.contains("two_devices") {
            queries.push((
                "timeline_cuda1",
                "/timeline?device=1&buckets=10&allocations=4".into(),
            ));
            queries.push(("stacks_cuda1", "/stacks?device=1".into()));
        }
        for (name, q) in queries {
            let (st, v) = get(&state, &format!("/api/snapshots/{id}{q}")).await;
            failures.extend(check(&dir, name, st, v, None));
        }
    }
    // The library, a search, and one diff per pair of neighbours.
    let dir = golden_dir().join("library");
    let (st, v) = get(&state, "/api/snapshots").await;
    failures.extend(check(&dir, "list", st, v, None));
    let (st, v) = get(&state, "/api/snapshots?q=steady").await;
    failures.extend(check(&dir, "search", st, v, None));
    let (st, v) = get(&state, "/api/snapshots/0000000000000000").await;
    failures.extend(check(&dir, "unknown_id", st, v, None));
    for pair in ids.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        let (st, v) = get(&state, &format!("/api/diff/{a}/{b}")).await;
        let name = format!(
            "diff_{}_{}",
            stem(FIXTURES[ids.iter().position(|i| i == a).unwrap()]),
            stem(FIXTURES[ids.iter().position(|i| i == b).unwrap()])
        );
        failures.extend(check(&dir, &name, st, v, None));
    }
    // A rename and retag answers the new entry.
    let (st, body) = call(
        &state,
        Request::patch(format!("/api/snapshots/{}", ids[0]))
            .header("content-type", "application/json")
            .body(Body::from(
                r#"{"name":"renamed","tags":[{"key":"job","value":"x"},{"key":"run","value":"free"}]}"#,
            ))
            .unwrap(),
    )
    .await;
    failures.extend(check(
        &dir,
        "patch",
        st,
        serde_json::from_slice(&body).unwrap(),
        None,
    ));
    let (st, v) = get(&state, "/api/health").await;
    failures.extend(check(&dir, "health", st, v, None));
    // An upload that is not running has no progress; a deleted snapshot is gone.
    let (st, v) = get(&state, "/api/uploads/no-such-token").await;
    failures.extend(check(&dir, "upload_progress_unknown", st, v, None));
    let last = ids.last().unwrap();
    let (st, body) = call(
        &state,
        Request::delete(format!("/api/snapshots/{last}"))
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    let v = serde_json::from_slice(&body).unwrap_or(Value::Null);
    failures.extend(check(&dir, "delete", st, v, None));
    let (st, v) = get(&state, &format!("/api/snapshots/{last}/info")).await;
    failures.extend(check(&dir, "deleted_info", st, v, None));
    assert!(
        failures.is_empty(),
        "{} answers changed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[tokio::test]
async fn live_endpoints_answer_as_recorded() {
    let state = open("live").await;
    let t0 = crate::support::scenario::start_ms(server::now_ms());
    let (nvml, agent) = scenario(t0);
    let dir = golden_dir().join("live");
    let mut failures = Vec::new();
    for (name, b) in [
        ("ingest_nvml", &nvml),
        ("ingest_agent", &agent),
        ("ingest_again", &agent),
    ] {
        let (st, body) = call(
            &state,
            Request::post("/api/ingest")
                .header("authorization", "Bearer s3cret-0123456789abcdef")
                .body(Body::from(serde_json::to_vec(b).unwrap()))
                .unwrap(),
        )
        .await;
        failures.extend(check(
            &dir,
            name,
            st,
            serde_json::from_slice(&body).unwrap(),
            Some(t0),
        ));
    }
    let to = t0 + 119_999;
    for (name, uri) in [
        ("fleet", "/api/live/fleet".to_string()),
        (
            "gpu",
            format!("/api/live/gpus/GPU-aaa?from_ms={t0}&to_ms={to}&points=12"),
        ),
        (
            "process",
            format!("/api/live/processes/gpu7/100?from_ms={t0}&to_ms={to}&points=12"),
        ),
        (
            "process_200",
            format!("/api/live/processes/gpu7/200?from_ms={t0}&to_ms={to}&points=12"),
        ),
        ("gpu_unknown", "/api/live/gpus/GPU-nope".to_string()),
    ] {
        let (st, v) = get(&state, &uri).await;
        failures.extend(check(&dir, name, st, v, Some(t0)));
    }
    let (st, body) = call(
        &state,
        Request::get("/metrics").body(Body::empty()).unwrap(),
    )
    .await;
    failures.extend(check(
        &dir,
        "metrics",
        st,
        Value::Array(
            String::from_utf8(body)
                .unwrap()
                .lines()
                .map(|l| Value::String(received_now(l)))
                .collect(),
        ),
        Some(t0),
    ));
    assert!(
        failures.is_empty(),
        "{} answers changed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
