//! `memscope report` and `GET /api/snapshots/{id}/report`: the report to share, in HTML and in
//! Markdown. The API's file is the CLI's, byte for byte; its figures are the analyses' (checked
//! against `memscope analyze --json`); it renders every fixture the engine reads, the wild ones
//! included; the HTML opens from a file in Chromium with nothing fetched, no console error, and
//! the figures under the cursor are the chart's data.

use std::path::{Path, PathBuf};
use std::process::Command;

use axum::body::Body;
use axum::http::Request;
use http_body_util::BodyExt;
use snapshot::analysis::human_bytes as hb;
use tower::ServiceExt;

use crate::support::app::{fixture_bytes, fixture_path};
use crate::support::*;

/// The binary under test: `MEMSCOPE_BIN` (./scripts/test's installed wheel), else this build's.
fn memscope() -> Command {
    Command::new(
        std::env::var_os("MEMSCOPE_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_memscope"))),
    )
}

fn report_of(file: &Path, format: &str) -> String {
    let out = memscope()
        .args(["report", "--format", format])
        .arg(file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn analyze_json(file: &Path) -> serde_json::Value {
    let out = memscope()
        .args(["analyze", "--json"])
        .arg(file)
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn the_markdown_carries_the_analyses_figures_and_verdicts() {
    let oom = fixture_path("oom_fraction.pickle");
    let md = report_of(&oom, "md");
    let r = analyze_json(&oom);
    let d = &r["devices"]["0"];
    for key in [
        "peak_requested_bytes",
        "peak_allocated_bytes",
        "peak_reserved_bytes",
    ] {
        let want = hb(d[key].as_u64().unwrap());
        assert!(
            md.contains(&format!("| {want} |")),
            "{key} {want} missing:\n{md}"
        );
    }
    assert!(md.contains(r["oom_outcome"].as_str().unwrap()), "{md}");
    assert!(md.contains("- **growth** (fatal)"), "{md}");
    // The recorded line that kept growing is the leak suspect (truth: gen_snapshots.py:181).
    assert!(
        md.contains("gen_snapshots.py:181 in run` | 5.2 GiB |"),
        "{md}"
    );
    assert!(
        md.contains("| (defaults) (recorded) | 5.6 GiB | out of memory at event 1,327 |"),
        "{md}"
    );
    assert!(
        md.contains("the model reproduced the recorded run exactly"),
        "{md}"
    );

    let steady = report_of(&fixture_path("steady_train.pickle"), "md");
    assert!(
        steady.contains("> No out-of-memory error; memory peaked at"),
        "{steady}"
    );
    assert!(steady.contains("> No leak suspect:"), "{steady}");
    assert!(steady.contains("**What it was** at the peak: parameter 64.0 MiB, gradient 64.0 MiB, optimizer state 128.1 MiB"), "{steady}");

    // Without a trace: what is known, and the leak search said not to have run.
    let seg = report_of(&fixture_path("segments_only.pickle"), "md");
    assert!(
        seg.contains("> No leak search: the snapshot has no trace"),
        "{seg}"
    );
}

/// Every fixture the engine reads, in both formats: no failure, and each HTML file whole.
#[test]
fn every_fixture_renders_in_both_formats() {
    let dirs = [
        "tests/fixtures",
        "tests/fixtures/wild",
        "tests/fixtures/harness",
    ];
    let mut n = 0;
    for dir in dirs {
        for e in std::fs::read_dir(root().join(dir)).unwrap().flatten() {
            let p = e.path();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            if !api::is_snapshot_file_name(&name) || name.ends_with(".json") {
                continue;
            }
            let html = report_of(&p, "html");
            assert!(
                html.starts_with("<!DOCTYPE html>") && html.trim_end().ends_with("</html>"),
                "{name}"
            );
            assert!(
                !html.contains("http://") && !html.contains("https://"),
                "{name} links out"
            );
            let md = report_of(&p, "md");
            assert!(md.starts_with("### memscope report:"), "{name}");
            n += 1;
        }
    }
    assert!(n >= 30, "{n} fixtures");
}

#[tokio::test]
async fn the_apis_report_is_the_clis_file() {
    let dir = std::env::temp_dir().join(format!("memscope-report-api-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let state = server::state::AppState::open(server::testing::serve_args(dir.clone()))
        .await
        .unwrap();
    let send = |req: Request<Body>| {
        let app = server::http::app(state.clone());
        async move {
            let res = app.oneshot(req).await.unwrap();
            let headers = res.headers().clone();
            let status = res.status();
            (
                status,
                headers,
                res.into_body().collect().await.unwrap().to_bytes(),
            )
        }
    };
    let (_, _, up) = send(
        Request::post("/api/snapshots?name=leak_detached_cache.pickle")
            .body(Body::from(fixture_bytes("leak_detached_cache.pickle")))
            .unwrap(),
    )
    .await;
    let up: api::Uploaded = serde_json::from_slice(&up).unwrap();
    for format in api::ReportFormat::ALL {
        let uri = api::routes::report(
            &up.id,
            &api::ReportQuery {
                format: Some(format),
            },
        );
        let (status, headers, body) = send(Request::get(uri).body(Body::empty()).unwrap()).await;
        assert_eq!(status, 200);
        assert_eq!(headers["content-type"], format.content_type());
        let disposition = headers["content-disposition"].to_str().unwrap();
        assert!(
            disposition.contains(&format!("leak_detached_cache.memscope.{}", format.as_str())),
            "{disposition}"
        );
        let cli = report_of(&fixture_path("leak_detached_cache.pickle"), format.as_str());
        assert_eq!(String::from_utf8(body.to_vec()).unwrap(), cli, "{format:?}");
    }
    let (status, _, _) = send(
        Request::get("/api/snapshots/nope/report")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(status, 404);
}

/// The HTML report from a file, in Chromium: nothing fetched, no console error, and the
/// figures shown under the cursor are the chart's data (the peak bucket's, exactly).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_html_report_opens_offline_in_chromium() {
    let dir = std::env::temp_dir().join(format!("memscope-report-html-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let file: PathBuf = dir.join("oom_fraction.memscope.html");
    let out = memscope()
        .args(["report", "-o"])
        .arg(&file)
        .arg(fixture_path("oom_fraction.pickle"))
        .output()
        .unwrap();
    assert!(out.status.success());
    let (_driver, port) = start_chromedriver();
    let c = browser(port, &dir.join("profile")).await;
    c.goto(&format!("file://{}", file.display())).await.unwrap();
    wait_js(
        &c,
        "document.querySelector('.memscope-report .chart svg')",
        "the chart",
    )
    .await;
    screenshot(&c, "report_html_offline").await;
    let fetched = c
        .execute(
            "return performance.getEntriesByType('resource').length",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(fetched, 0, "the report fetched something");
    // The bucket with the highest live bytes: hover its middle.
    let (text, want) = {
        let v = c
            .execute(
                "const c = document.querySelector('.memscope-report .chart');
                 const d = JSON.parse(c.getAttribute('data-buckets'));
                 let k = 0; d.forEach((b, i) => { if (b[3] > d[k][3]) k = i; });
                 const svg = c.querySelector('svg'), r = svg.getBoundingClientRect();
                 const x0 = +c.dataset.x0, x1 = +c.dataset.x1, w = +c.dataset.w;
                 const x = r.left + (x0 + (k + 0.5) * (x1 - x0) / d.length) * r.width / w;
                 svg.dispatchEvent(new MouseEvent('mousemove', {clientX: x, clientY: r.top + 40, bubbles: true}));
                 return [c.querySelector('.tip').textContent, d[k]];",
                vec![],
            )
            .await
            .unwrap();
        (v[0].as_str().unwrap().to_string(), v[1].clone())
    };
    let r = analyze_json(&fixture_path("oom_fraction.pickle"));
    // The highest bucket holds the peak of live (requested) bytes.
    assert_eq!(want[3], r["devices"]["0"]["peak_requested_bytes"], "{want}");
    let live_max = hb(want[3].as_u64().unwrap());
    assert!(
        text.contains(&live_max) && text.contains("live"),
        "tooltip {text:?} lacks {live_max}"
    );
    assert_eq!(console_errors(&c).await, Vec::<String>::new());
    c.close().await.unwrap();
}

/// The snapshot page's take-aways in Chromium: tabs are links (a new tab opens the same view),
/// "Export report" and "Markdown" download the CLI's files, "Download original" the uploaded
/// bytes, "Copy link" puts the page's address on the clipboard (or shows it to copy), and the
/// Stacks tab's CSV holds the rows its table lists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_snapshot_page_exports_reports_the_original_a_link_and_csv() {
    let dir = std::env::temp_dir().join(format!("memscope-report-page-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let base = start_server(&dir.join("data")).await;
    let (status, body) = post(
        &base,
        "/api/snapshots?name=steady_train.pickle",
        fixture_bytes("steady_train.pickle"),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let up: api::Uploaded = serde_json::from_str(&body).unwrap();
    let (_driver, port) = start_chromedriver();
    let c = browser(port, &dir.join("profile")).await;
    c.goto(&format!("{base}/s/{}?view=stacks", up.id))
        .await
        .unwrap();
    wait_js(
        &c,
        "document.querySelector('table.sites tr td')",
        "the call sites",
    )
    .await;

    // Tabs are links to their view, keeping the page's other keys.
    let href = wait_js(
        &c,
        "document.querySelector(\"a.tab[data-tab='leaks']\").getAttribute('href')",
        "the leaks tab",
    )
    .await;
    assert_eq!(href, format!("/s/{}?view=leaks", up.id));
    // A plain click switches in place.
    click(&c, "a.tab[data-tab='timeline']").await;
    wait_js(
        &c,
        "location.search == '?view=timeline'",
        "the timeline view",
    )
    .await;
    c.goto(&format!("{base}/s/{}?view=stacks", up.id))
        .await
        .unwrap();
    wait_js(
        &c,
        "document.querySelector('table.sites tr td')",
        "the call sites again",
    )
    .await;

    // The downloads: what each link points at, fetched as the browser would.
    let fetch = |sel: &str| {
        format!(
            "const a = document.querySelector('{sel}');
             if (!a.hasAttribute('download')) return 'no download attribute';
             return fetch(a.href).then(r => r.status + ' ' + r.headers.get('content-disposition') + '\\n' + (r.headers.get('content-type').startsWith('text') ? 'TEXT' : 'BIN') ).catch(e => String(e));"
        )
    };
    for (sel, want) in [
        (".export-report", "steady_train.memscope.html"),
        (".export-markdown", "steady_train.memscope.md"),
        (".download-original", "steady_train.pickle"),
    ] {
        let v = c.execute(&fetch(sel), vec![]).await.unwrap();
        let v = v.as_str().unwrap();
        assert!(
            v.starts_with("200 attachment;") && v.contains(want),
            "{sel}: {v}"
        );
    }
    let md_href = wait_js(
        &c,
        "document.querySelector('.export-markdown').getAttribute('href')",
        "md link",
    )
    .await;
    let (_, md) = get(&base, md_href.as_str().unwrap()).await;
    assert_eq!(md, report_of(&fixture_path("steady_train.pickle"), "md"));
    let original = ureq::get(&format!("{base}{}", api::routes::original(&up.id)))
        .call()
        .unwrap()
        .body_mut()
        .with_config()
        .limit(64 << 20)
        .read_to_vec()
        .unwrap();
    assert_eq!(original, fixture_bytes("steady_train.pickle"));

    // The CSV: a header and one row per call site in the table, the largest first.
    let csv = wait_js(
        &c,
        "decodeURIComponent(document.querySelector('a.sites-csv').getAttribute('href').split(',').slice(1).join(','))",
        "the CSV link",
    )
    .await;
    let csv = csv.as_str().unwrap();
    let rows = c
        .execute(
            "return document.querySelectorAll('table.sites tr').length - 1",
            vec![],
        )
        .await
        .unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(
        lines[0],
        "bytes,share_percent,allocations,stacks,filename,line,function,stack"
    );
    assert_eq!(lines.len() as u64 - 1, rows.as_u64().unwrap(), "{csv}");
    let (_, stacks) = get(&base, &api::routes::stacks(&up.id, &Default::default())).await;
    let stacks: api::StackReport = serde_json::from_str(&stacks).unwrap();
    let largest = stacks.sites.iter().map(|s| s.bytes).max().unwrap();
    assert!(lines[1].starts_with(&format!("{largest},")), "{}", lines[1]);

    // Copy link: on the clipboard, or shown to copy by hand; either way this page's address.
    click(&c, ".copy-link").await;
    let said = wait_js(
        &c,
        "(document.querySelector('.snapshot-actions .copied') && 'copied') || (document.querySelector('.copy-fallback') && document.querySelector('.copy-fallback').value)",
        "the link copied or shown",
    )
    .await;
    let here = c.current_url().await.unwrap().to_string();
    assert!(
        said == "copied" || said == here.as_str(),
        "{said} vs {here}"
    );
    screenshot(&c, "snapshot_actions").await;
    assert_eq!(console_errors(&c).await, Vec::<String>::new());
    c.close().await.unwrap();
}
