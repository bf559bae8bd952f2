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

use crate::common::{browser, nav_to_drawn_ms};

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
    std::fs::write(
        work.join("state_history.html"),
        embedded_page(&bytes, "Allocator State History"),
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

/// The official viewer's figures for one snapshot; fresh browser profiles go under `work`.
pub async fn measure(
    driver_port: u16,
    site: &str,
    snapshot: &Path,
    work: &Path,
    blank_rss: u64,
) -> serde_json::Value {
    // 1. memory_viz: choose the file in the page → timeline drawn (wall clock, as for memscope),
    //    then switch the view to Allocator State History → drawn. The viewer keeps nothing, so
    //    opening the snapshot again costs the same as choosing it.
    let profile = work.join("o1");
    let c = browser(driver_port, &profile).await;
    long_timeouts(&c).await;
    c.goto(&format!("{site}/memory_viz.html")).await.unwrap();
    crate::common::wait_js(
        &c,
        "document.querySelector('input[type=file]')",
        "official viewer page",
    )
    .await;
    let input = c.find(Locator::Css("input[type=file]")).await.unwrap();
    let t0 = Instant::now();
    input
        .send_keys(&snapshot.canonicalize().unwrap().display().to_string())
        .await
        .unwrap();
    nav_to_drawn_ms(&c, TIMELINE_DRAWN).await;
    let choose_s = t0.elapsed().as_secs_f64();
    let timeline_rss = crate::renderer_peak_rss(&profile);
    let t0 = Instant::now();
    c.execute(
        "const v = document.querySelectorAll('select')[1]; v.value = 'Allocator State History'; \
         v.dispatchEvent(new Event('change'));",
        vec![],
    )
    .await
    .unwrap();
    nav_to_drawn_ms(&c, STATE_DRAWN).await;
    let state_s = t0.elapsed().as_secs_f64();
    let state_rss = crate::renderer_peak_rss(&profile);
    c.close().await.unwrap();

    // 2. The page `trace_plot` writes: navigation start → timeline drawn.
    let profile = work.join("o2");
    let c = browser(driver_port, &profile).await;
    long_timeouts(&c).await;
    c.goto(&format!("{site}/trace_plot.html")).await.unwrap();
    let (seen_ms, fcp_ms) = nav_to_drawn_ms(&c, TIMELINE_DRAWN).await;
    let trace_plot_rss = crate::renderer_peak_rss(&profile);
    c.close().await.unwrap();

    // The whole parse and draw runs in one task before the load event, so the first contentful
    // paint is the drawn view; the in-page observation waits for WebDriver's load wait and comes
    // later. The smaller of the two is the viewer's figure (the one in its favour).
    serde_json::json!({
        "choose_to_drawn_timeline_s": choose_s,
        "timeline_renderer_peak_rss_mb": timeline_rss as f64 / 1e6,
        "timeline_above_blank_mb": (timeline_rss as f64 - blank_rss as f64) / 1e6,
        "switch_to_drawn_state_history_s": state_s,
        "state_renderer_peak_rss_mb": state_rss as f64 / 1e6,
        "trace_plot_nav_to_drawn_s": fcp_ms.map_or(seen_ms, |f| f.min(seen_ms)) / 1e3,
        "trace_plot_renderer_peak_rss_mb": trace_plot_rss as f64 / 1e6,
    })
}

#[test]
fn base64_matches_python() {
    assert_eq!(base64(b""), "");
    assert_eq!(base64(b"f"), "Zg==");
    assert_eq!(base64(b"fo"), "Zm8=");
    assert_eq!(base64(b"foo"), "Zm9v");
    assert_eq!(base64(b"\x80\x04\x95\x00"), "gASVAA==");
}
