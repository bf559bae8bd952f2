//! The official viewer (pytorch.org/memory_viz: `torch/utils/viz/MemoryViz.js` with d3), measured
//! in the same headless Chromium, on the same machine and in the same run as memscope, so the
//! dashboard benchmark's ratios compare like with like instead of against figures from elsewhere.
//!
//! Its files are not part of this repository: `bench/official_viewer.sh DIR` assembles them
//! (MemoryViz.js and process_alloc_data.js from PyTorch, the d3 7 bundle from npm, the CDN imports
//! pointed at that bundle). Set `MEMSCOPE_OFFICIAL_VIEWER=DIR` to include it in the benchmark.
//!
//! Two pages are measured, both served from loopback:
//! - `memory_viz.html`, the page at pytorch.org/memory_viz: a file chosen in its file input is read,
//!   parsed and drawn in the browser, the action that matches choosing a file in memscope;
//!   Then its view is switched to Allocator State History. These reproduce the figures the issue
//!   gives for the viewer (big_python: 1.9 s and 0.57 GB there, 1.9 s and 0.56 GB here).
//! - `trace_plot.html`, what `torch.cuda._memory_viz.trace_plot` writes (the template of PyTorch
//!   2.11's `_memory_viz.py`): the snapshot embedded as base64 and parsed on load, timed from
//!   navigation start to the timeline drawn.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use axum::response::IntoResponse;
use fantoccini::{Client, Locator, wd::TimeoutConfiguration};

use crate::support::browser;

/// The timeline is drawn once its polygons (allocations and the minimap) exist.
const TIMELINE_DRAWN: &str = "document.querySelectorAll('svg polygon').length > 1";
/// The allocator state is drawn once its segment rectangles exist.
const STATE_DRAWN: &str = "document.querySelectorAll('svg g rect').length > 0";

/// Standard base64 with padding, as Python's `base64.b64encode`.
fn base64(bytes: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for k in 0..4 {
            if k <= chunk.len() {
                out.push(ABC[(n >> (18 - 6 * k) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The page `torch.cuda._memory_viz` writes for `viz_kind`, with the snapshot's bytes embedded
/// the way `_format_viz` embeds them (NUL-padded to a multiple of 3, base64), and d3 loaded from
/// the local bundle instead of the CDN.
fn embedded_page(snapshot: &[u8], viz_kind: &str) -> String {
    let mut buffer = snapshot.to_vec();
    buffer.resize(buffer.len() + (3 - buffer.len() % 3), 0);
    let files = format!(
        "[{{\"name\": \"snapshot.pickle\", \"base64\": \"{}\"}}]",
        base64(&buffer)
    );
    format!(
        "\n<!DOCTYPE html>\n<html>\n<head>\n</head>\n<body>\n<script src=\"d3.min.js\"></script>\n\
         <script type=\"module\">\nimport {{add_local_files}} from \"./MemoryViz.js\"\n\
         const local_files = {files}\nadd_local_files(local_files, '{viz_kind}')\n</script>\n</body>\n"
    )
}

/// Writes the viewer's pages for `snapshot` into `work` and serves that folder on loopback;
/// returns the base URL.
pub async fn serve(viewer_dir: &Path, snapshot: &Path, work: &Path) -> String {
    std::fs::create_dir_all(work).unwrap();
    for f in ["MemoryViz.js", "process_alloc_data.js", "d3.min.js"] {
        std::fs::copy(viewer_dir.join(f), work.join(f)).unwrap_or_else(|e| {
            panic!(
                "{}: {e} (assemble the viewer with bench/official_viewer.sh)",
                viewer_dir.join(f).display()
            )
        });
    }
    std::fs::write(
        work.join("memory_viz.html"),
        "<!DOCTYPE html>\n<html>\n<head><title>MemoryViz</title></head>\n<body>\n\
         <script src=\"d3.min.js\"></script>\n<script type=\"module\" src=\"MemoryViz.js\"></script>\n</body>\n</html>\n",
    )
    .unwrap();
    let bytes = std::fs::read(snapshot).unwrap();
    std::fs::write(
        work.join("trace_plot.html"),
        embedded_page(&bytes, "Active Memory Timeline"),
    )
    .unwrap();
    drop(bytes);

    let root: PathBuf = work.to_path_buf();
    let app = axum::Router::new().route(
        "/{file}",
        axum::routing::get(
            move |axum::extract::Path(file): axum::extract::Path<String>| {
                let root = root.clone();
                async move {
                    let kind = match file.rsplit('.').next() {
                        Some("html") => "text/html; charset=utf-8",
                        Some("js") => "text/javascript",
                        _ => "application/octet-stream",
                    };
                    match tokio::fs::read(root.join(file.replace('/', ""))).await {
                        Ok(body) => {
                            ([(axum::http::header::CONTENT_TYPE, kind)], body).into_response()
                        }
                        Err(_) => axum::http::StatusCode::NOT_FOUND.into_response(),
                    }
                }
            },
        ),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

/// Generous limits: the viewer parses for tens of seconds on the larger files.
pub async fn long_timeouts(c: &Client) {
    c.update_timeouts(TimeoutConfiguration::new(
        Some(Duration::from_secs(300)),
        Some(Duration::from_secs(300)),
        None,
    ))
    .await
    .unwrap();
}

/// How long a page of the viewer gets to draw before it is reported as failed
/// (`MEMSCOPE_OFFICIAL_LIMIT_S`, 300 s by default: 50 times its slowest figure on the 167 MB
/// file).
fn draw_limit() -> Duration {
    Duration::from_secs(
        std::env::var("MEMSCOPE_OFFICIAL_LIMIT_S")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(300),
    )
}

/// Ends every process of the browser started with `profile` (one whose page does not answer
/// cannot be closed through WebDriver, and it would go on using the cores and memory).
fn kill_browser(profile: &Path) {
    let _ = std::process::Command::new("pkill")
        .args(["-9", "-f", &format!("user-data-dir={}", profile.display())])
        .status();
}

/// Closes the session, then ends whatever of the browser is left (a page that does not answer
/// keeps it from closing).
async fn close(c: Client, profile: &Path) {
    let _ = tokio::time::timeout(Duration::from_secs(20), c.close()).await;
    kill_browser(profile);
}

/// The last console lines, for a failure's description.
fn last_lines(console: &[String]) -> String {
    match console.len() {
        0 => "the console is empty".to_string(),
        n => format!("console: {}", console[n.saturating_sub(3)..].join(" | ")),
    }
}

/// What became of one page of the viewer: seconds from its action to drawn, or how it failed (a
/// crashed page, an uncaught error, nothing drawn within [`draw_limit`]), with the console lines
/// that say why.
/// The renderer's peak RSS is sampled on the side meanwhile, so it is known after a crash too.
struct Outcome {
    drawn: Result<f64, String>,
    renderer_peak_rss: u64,
}

/// Does `action` (choosing the file, switching the view, navigating) and watches the page until
/// `cond` holds. WebDriver itself waits for a busy page's main thread before it answers, so every
/// wait is bounded here.
async fn watch(
    c: &Client,
    cond: &str,
    profile: &Path,
    action: impl std::future::Future<Output = Result<(), fantoccini::error::CmdError>>,
) -> Outcome {
    let t0 = Instant::now();
    let peak = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let sampler = {
        let (peak, profile) = (peak.clone(), profile.to_path_buf());
        tokio::spawn(async move {
            loop {
                peak.fetch_max(
                    crate::dashboard_bench::renderer_peak_rss(&profile),
                    std::sync::atomic::Ordering::Relaxed,
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let limit = draw_limit();
    let mut console: Vec<String> = Vec::new();
    let stuck = |console: &[String]| {
        format!(
            "nothing drawn in {:.0} s: the page did not answer, its main thread busy \
             (renderer peak RSS {:.1} GB, {:.0} CPU s); {}",
            t0.elapsed().as_secs_f64(),
            peak.load(std::sync::atomic::Ordering::Relaxed) as f64 / 1e9,
            crate::dashboard_bench::renderer_cpu_s(profile),
            last_lines(console)
        )
    };
    let left = || limit.saturating_sub(t0.elapsed()) + Duration::from_secs(1);
    // Waits in the page for at most a second, so a busy page answers when its task ends and a
    // failed one is noticed between waits; drawn means the condition held and a frame followed.
    let script = format!(
        "const done = arguments[arguments.length - 1];
         const until = performance.now() + 1000;
         const check = () => {{
           if ({cond}) {{
             requestAnimationFrame(() => setTimeout(() => done(true), 0));
           }} else if (performance.now() > until) {{
             done(false);
           }} else {{
             requestAnimationFrame(check);
           }}
         }};
         check();"
    );
    let drawn = match tokio::time::timeout(left(), action).await {
        Err(_) => Err(stuck(&console)),
        Ok(Err(e)) => Err(format!(
            "the page failed {:.1} s in ({})",
            t0.elapsed().as_secs_f64(),
            e.to_string().replace('\n', " ")
        )),
        Ok(Ok(())) => loop {
            let Ok(answer) = tokio::time::timeout(left(), c.execute_async(&script, vec![])).await
            else {
                break Err(stuck(&console));
            };
            let elapsed = t0.elapsed().as_secs_f64();
            for (level, message) in crate::support::console_lines(c).await.unwrap_or_default() {
                console.push(format!(
                    "{level}: {}",
                    message.chars().take(240).collect::<String>()
                ));
            }
            match answer {
                Ok(serde_json::Value::Bool(true)) => break Ok(elapsed),
                Ok(_) => {}
                // Still parsing: the page did not answer within the script timeout.
                Err(e) if e.to_string().contains("timeout") => {}
                Err(e) => {
                    let e = e.to_string().replace('\n', " ");
                    break Err(format!(
                        "the page crashed {elapsed:.1} s in ({e}); {}",
                        last_lines(&console)
                    ));
                }
            }
            // (The page has no icon: its 404 is not the viewer's error.)
            if console
                .iter()
                .any(|l| l.starts_with("SEVERE") && !l.contains("favicon.ico"))
            {
                break Err(format!(
                    "an error {elapsed:.1} s in; {}",
                    last_lines(&console)
                ));
            }
            if t0.elapsed() > limit {
                break Err(format!(
                    "nothing drawn {elapsed:.0} s in; {}",
                    last_lines(&console)
                ));
            }
        },
    };
    sampler.abort();
    let renderer_peak_rss = peak
        .load(std::sync::atomic::Ordering::Relaxed)
        .max(crate::dashboard_bench::renderer_peak_rss(profile));
    Outcome {
        drawn,
        renderer_peak_rss,
    }
}

/// `figure_s` and `figure_failure` of an outcome (one of them null), as the summary reads them.
fn outcome_json(
    figure: &str,
    drawn: &Result<f64, String>,
) -> serde_json::Map<String, serde_json::Value> {
    let mut m = serde_json::Map::new();
    m.insert(format!("{figure}_s"), drawn.as_ref().ok().copied().into());
    m.insert(
        format!("{figure}_failure"),
        drawn.as_ref().err().cloned().into(),
    );
    m
}

/// The official viewer's figures for one snapshot; fresh browser profiles go under `work`.
/// A page that fails (the viewer is expected to on GB-scale files) is reported with how and when
/// it failed instead of a time.
pub async fn measure(
    driver_port: u16,
    site: &str,
    snapshot: &Path,
    work: &Path,
    blank_rss: u64,
) -> serde_json::Value {
    let mut out = serde_json::Map::new();
    // 1. memory_viz: choose the file in the page → timeline drawn (wall clock, as for memscope),
    //    then switch the view to Allocator State History → drawn. The viewer keeps nothing, so
    //    opening the snapshot again costs the same as choosing it.
    let profile = work.join("o1");
    let c = browser(driver_port, &profile).await;
    long_timeouts(&c).await;
    c.goto(&format!("{site}/memory_viz.html")).await.unwrap();
    crate::support::wait_js(
        &c,
        "document.querySelector('input[type=file]')",
        "official viewer page",
    )
    .await;
    let input = c.find(Locator::Css("input[type=file]")).await.unwrap();
    let path = snapshot.canonicalize().unwrap().display().to_string();
    let timeline = watch(&c, TIMELINE_DRAWN, &profile, input.send_keys(&path)).await;
    out.extend(outcome_json("choose_to_drawn_timeline", &timeline.drawn));
    out.insert(
        "timeline_renderer_peak_rss_mb".into(),
        (timeline.renderer_peak_rss as f64 / 1e6).into(),
    );
    out.insert(
        "timeline_above_blank_mb".into(),
        ((timeline.renderer_peak_rss as f64 - blank_rss as f64) / 1e6).into(),
    );
    let state = if timeline.drawn.is_ok() {
        let switch = c.execute(
            "const v = document.querySelectorAll('select')[1]; v.value = 'Allocator State History'; \
             v.dispatchEvent(new Event('change'));",
            vec![],
        );
        let state = watch(&c, STATE_DRAWN, &profile, async { switch.await.map(drop) }).await;
        out.insert(
            "state_renderer_peak_rss_mb".into(),
            (state.renderer_peak_rss as f64 / 1e6).into(),
        );
        state.drawn
    } else {
        Err("not tried: the timeline was not drawn".to_string())
    };
    out.extend(outcome_json("switch_to_drawn_state_history", &state));
    close(c, &profile).await;

    // 2. The page `trace_plot` writes: navigation start → timeline drawn. The whole parse and
    //    draw runs in one task before the load event, so the first contentful paint is the drawn
    //    view; the in-page observation waits for WebDriver's load wait and comes later. The
    //    smaller of the two is the viewer's figure (the one in its favour).
    let profile = work.join("o2");
    let c = browser(driver_port, &profile).await;
    long_timeouts(&c).await;
    let url = format!("{site}/trace_plot.html");
    let trace_plot = watch(&c, TIMELINE_DRAWN, &profile, c.goto(&url)).await;
    let trace_plot_s = match trace_plot.drawn {
        Ok(seen_s) => {
            let fcp_ms = c
                .execute(
                    "const p = performance.getEntriesByName('first-contentful-paint')[0]; \
                     return p ? p.startTime : null;",
                    vec![],
                )
                .await
                .ok()
                .and_then(|v| v.as_f64());
            Ok(fcp_ms.map_or(seen_s, |f| (f / 1e3).min(seen_s)))
        }
        Err(e) => Err(e),
    };
    out.extend(outcome_json("trace_plot_nav_to_drawn", &trace_plot_s));
    out.insert(
        "trace_plot_renderer_peak_rss_mb".into(),
        (trace_plot.renderer_peak_rss as f64 / 1e6).into(),
    );
    close(c, &profile).await;
    serde_json::Value::Object(out)
}

#[test]
fn base64_matches_python() {
    assert_eq!(base64(b""), "");
    assert_eq!(base64(b"f"), "Zg==");
    assert_eq!(base64(b"fo"), "Zm8=");
    assert_eq!(base64(b"foo"), "Zm9v");
    assert_eq!(base64(b"\x80\x04\x95\x00"), "gASVAA==");
}
