//! Helpers for the browser tests and the dashboard benchmark: an in-process server, chromedriver,
//! headless Chromium sessions, polling for page conditions, screenshots.
#![allow(dead_code)]

pub mod app;
pub mod hostile;
pub mod official_viewer;
pub mod pg;
pub mod stats;

pub mod scenario;
pub mod socket;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use server::config::ServeArgs;
use server::state::AppState;

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub struct Driver(pub Child);

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Chromedriver on a free port, answering `/status` as ready. The port is picked by binding
/// and releasing it, so another process (a parallel test's Chromium) can take it first: a
/// driver that exits, or a port that answers but not as a ready chromedriver, is retried on
/// a new port.
pub fn start_chromedriver() -> (Driver, u16) {
    for _attempt in 0..4 {
        let port = free_port();
        // In its guard at once, so it is killed even if it never starts listening.
        let mut driver = Driver(Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver not found: install Debian's chromium and chromium-driver (./scripts/test does)"));
        for _ in 0..100 {
            if driver.0.try_wait().ok().flatten().is_some() {
                break; // exited: most likely the port was taken
            }
            if driver_ready(port) {
                return (driver, port);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    panic!("chromedriver did not start (4 ports tried)");
}

/// Whether `port` answers `GET /status` as a ready chromedriver.
fn driver_ready(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let req =
        format!("GET /status HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
    if s.write_all(req.as_bytes()).is_err() {
        return false;
    }
    let mut bytes = Vec::new();
    let _ = s.read_to_end(&mut bytes); // what came before a timeout is kept
    let answer = String::from_utf8_lossy(&bytes);
    answer.starts_with("HTTP/1.1 200") && answer.contains("\"ready\":true")
}

pub async fn browser(driver_port: u16, profile: &Path) -> Client {
    browser_with(driver_port, profile, (1300, 1000), 1.0).await
}

/// A browser with a window of `size` CSS pixels on a screen of `scale` device pixels per CSS
/// pixel (2: a high-DPI laptop screen).
pub async fn browser_with(
    driver_port: u16,
    profile: &Path,
    size: (u32, u32),
    scale: f64,
) -> Client {
    browser_themed(driver_port, profile, size, scale, Theme::Light).await
}

/// The colour scheme a browser's pages are told the system prefers (`prefers-color-scheme`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Theme {
    Light,
    Dark,
}

/// [`browser_with`] on a system that prefers `theme`.
pub async fn browser_themed(
    driver_port: u16,
    profile: &Path,
    size: (u32, u32),
    scale: f64,
    theme: Theme,
) -> Client {
    let mut args = vec![
        "--headless".to_string(),
        "--no-sandbox".into(),
        "--disable-gpu".into(),
        "--disable-quic".into(),
        "--no-first-run".into(),
        "--disable-background-networking".into(),
        "--disable-component-update".into(),
        "--disable-sync".into(),
        "--disable-dev-shm-usage".into(),
        format!("--window-size={},{}", size.0, size.1),
        format!("--force-device-scale-factor={scale}"),
        format!("--user-data-dir={}", profile.display()),
    ];
    if theme == Theme::Dark {
        // What a dark system theme tells pages (0: dark).
        args.push("--force-dark-mode".into());
        args.push("--blink-settings=preferredColorScheme=0".into());
    }
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        serde_json::json!({ "binary": "/usr/bin/chromium", "args": args }),
    );
    // A prompt (the dashboard asking for an access token) waits for the test to answer it.
    caps.insert(
        "unhandledPromptBehavior".into(),
        serde_json::json!("ignore"),
    );
    // The console log, read back by `console_errors`.
    caps.insert(
        "goog:loggingPrefs".into(),
        serde_json::json!({ "browser": "ALL" }),
    );
    // A session that fails to start on a loaded machine (two cores, several Chromiums) is
    // asked for again before the test gives up.
    let mut last_error = None;
    for _attempt in 0..3 {
        match ClientBuilder::new(hyper_util_connector())
            .capabilities(caps.clone())
            .connect(&format!("http://127.0.0.1:{driver_port}"))
            .await
        {
            Ok(client) => return client,
            Err(e) => last_error = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    panic!("connect to chromedriver: {:?}", last_error.unwrap())
}

pub fn hyper_util_connector() -> hyper_util::client::legacy::connect::HttpConnector {
    hyper_util::client::legacy::connect::HttpConnector::new()
}

/// Polls a JS expression until it is truthy; returns its value.
pub async fn wait_js(c: &Client, expr: &str, what: &str) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let v = c
            .execute(&format!("return ({expr});"), vec![])
            .await
            .unwrap();
        let truthy = match &v {
            serde_json::Value::Null | serde_json::Value::Bool(false) => false,
            serde_json::Value::Number(n) => n.as_f64() != Some(0.0),
            serde_json::Value::String(s) => !s.is_empty(),
            _ => true,
        };
        if truthy {
            return v;
        }
        if Instant::now() > deadline {
            let text = c
                .execute("return document.body.innerText", vec![])
                .await
                .unwrap_or_default();
            panic!("timed out waiting for {what}; page text: {text}");
        }
        // Short, so timings measured with it (the dashboard benchmark) are not quantised much.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub async fn screenshot(c: &Client, name: &str) {
    let dir = root().join("target").join("e2e-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    let png = c.screenshot().await.unwrap();
    let path = dir.join(format!("{name}.png"));
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, png).unwrap();
}

/// The token of collector `gpu7` (the live scenario's) on servers from [`start_server`].
/// Held by the tests that flood the process with sockets or count its open files
/// (`starvation`, `slow_clients`), so that they take turns: one's sockets would be counted as
/// the other's.
pub static SOCKET_FLOODS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

pub const COLLECTOR_TOKEN: &str = "e2e-collector-token-0123";

/// Posts a collector batch to a running server; returns the status.
pub async fn post_batch(base: &str, batch: &wire::Batch) -> u16 {
    post(base, "/api/ingest", serde_json::to_vec(batch).unwrap())
        .await
        .0
}

/// POSTs `body` to `path` of a running server (plain HTTP/1.1 over a socket, with the
/// collector token); returns the status and the answer's body.
pub async fn post(base: &str, path: &str, body: Vec<u8>) -> (u16, String) {
    request(base, "POST", path, body).await
}

/// GETs `path` of a running server; returns the status and the answer's body.
pub async fn get(base: &str, path: &str) -> (u16, String) {
    request(base, "GET", path, Vec::new()).await
}

/// PATCHes `path` of a running server with `body` (JSON); returns the status and the answer.
pub async fn patch(base: &str, path: &str, body: serde_json::Value) -> (u16, String) {
    request(base, "PATCH", path, serde_json::to_vec(&body).unwrap()).await
}

async fn request(base: &str, method: &'static str, path: &str, body: Vec<u8>) -> (u16, String) {
    use std::io::{Read, Write};
    let addr = base.trim_start_matches("http://").to_string();
    let path = path.to_string();
    tokio::task::spawn_blocking(move || {
        let mut s = std::net::TcpStream::connect(&addr).unwrap();
        write!(
            s,
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {COLLECTOR_TOKEN}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        )
        .unwrap();
        s.write_all(&body).unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).unwrap();
        let status = answer[9..12].parse().unwrap();
        let body = answer
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default();
        (status, body)
    })
    .await
    .unwrap()
}

/// A chromedriver command fantoccini has no call for: `POST /session/{id}/{tail}` with `body`.
/// `se/log` (type `browser`) is what the page wrote to its console and the browser's own errors
/// (failed requests, uncaught exceptions), each read draining the log; `goog/cdp/execute` runs a
/// DevTools command.
#[derive(Debug)]
struct DriverPost {
    tail: &'static str,
    body: serde_json::Value,
}

impl fantoccini::wd::WebDriverCompatibleCommand for DriverPost {
    fn endpoint(
        &self,
        base_url: &url::Url,
        session_id: Option<&str>,
    ) -> Result<url::Url, url::ParseError> {
        base_url.join(&format!(
            "session/{}/{}",
            session_id.unwrap_or_default(),
            self.tail
        ))
    }
    fn method_and_body(&self, _: &url::Url) -> (axum::http::Method, Option<String>) {
        (axum::http::Method::POST, Some(self.body.to_string()))
    }
}

/// Runs DevTools command `cmd` with `params` in the page.
async fn cdp(c: &Client, cmd: &str, params: serde_json::Value) {
    c.issue_cmd(DriverPost {
        tail: "goog/cdp/execute",
        body: serde_json::json!({"cmd": cmd, "params": params}),
    })
    .await
    .unwrap();
}

/// Slows what the page sends to `bytes_per_s` (Chromium's network emulation): an upload over a
/// slow link, on loopback.
pub async fn throttle_upload(c: &Client, bytes_per_s: f64) {
    cdp(c, "Network.enable", serde_json::json!({})).await;
    let conditions = serde_json::json!({
        "offline": false,
        "latency": 0,
        "downloadThroughput": -1,
        "uploadThroughput": bytes_per_s,
    });
    cdp(c, "Network.emulateNetworkConditions", conditions).await;
}

/// The console's errors since the last read (level SEVERE), one line each.
pub async fn console_errors(c: &Client) -> Vec<String> {
    console_lines(c)
        .await
        .expect("the browser log")
        .into_iter()
        .filter_map(|(level, message)| (level == "SEVERE").then_some(message))
        .collect()
}

/// Every console line since the last read, as (level, message); `None` when the browser cannot
/// answer (its page crashed).
pub async fn console_lines(c: &Client) -> Option<Vec<(String, String)>> {
    let log = c
        .issue_cmd(DriverPost {
            tail: "se/log",
            body: serde_json::json!({"type": "browser"}),
        })
        .await
        .ok()?;
    Some(
        log.as_array()
            .into_iter()
            .flatten()
            .map(|e| {
                let text = |k: &str| e[k].as_str().unwrap_or_default().to_string();
                (text("level"), text("message"))
            })
            .collect(),
    )
}

/// Non-background pixels of the canvas with this id.
pub fn canvas_pixels(id: &str) -> String {
    CANVAS_PIXELS.replace("'timeline-canvas'", &format!("'{id}'"))
}

/// Starts the server in-process on a free port with a library in `dir`; returns its base URL.
pub async fn start_server(dir: &Path) -> String {
    start_server_with(dir, |_| {}).await
}

/// The server on `dir` through its own connection loop, with settings changed by `change`.
pub async fn start_server_with(dir: &Path, change: impl FnOnce(&mut ServeArgs)) -> String {
    let mut args = ServeArgs::for_data_dir(dir.to_path_buf());
    args.collector_tokens = vec![format!("gpu7={COLLECTOR_TOKEN}")];
    change(&mut args);
    let state = AppState::open(args).await.unwrap();
    let limits = state.config.conn_limits();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(server::listen::serve(
        listener,
        server::http::app(state),
        limits,
        std::future::pending(),
    ));
    base
}

pub async fn upload(c: &Client, path: &Path) {
    wait_js(c, "document.querySelector('#file-input')", "the file input").await;
    let input = c.find(Locator::Css("#file-input")).await.unwrap();
    input
        .send_keys(&path.canonicalize().unwrap().display().to_string())
        .await
        .unwrap();
}

/// Clicks the first element matching `css` from inside the page (as a person's click would
/// reach its handler), without waiting for anything.
pub async fn click(c: &Client, css: &str) {
    c.execute(
        "document.querySelector(arguments[0]).click();",
        vec![serde_json::Value::from(css)],
    )
    .await
    .unwrap();
}

/// Presses `keys` together (a chord: `[Key::Shift.into(), Key::Left.into()]`), as a person's
/// keyboard would, to whatever has the focus.
pub async fn press(c: &Client, keys: &[char]) {
    use fantoccini::actions::{InputSource, KeyAction, KeyActions};
    let mut a = KeyActions::new("keyboard".into());
    for &k in keys {
        a = a.then(KeyAction::Down { value: k });
    }
    for &k in keys.iter().rev() {
        a = a.then(KeyAction::Up { value: k });
    }
    c.perform_actions(a).await.unwrap();
}

pub async fn open_tab(c: &Client, tab: &str) {
    c.find(Locator::Css(&format!(".tab[data-tab='{tab}']")))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_js(c, &format!("location.search.includes('view={tab}')"), tab).await;
}

/// How many canvas pixels are not (near) white: > 0 once the timeline is drawn.
pub const CANVAS_PIXELS: &str = "(() => { const c = document.getElementById('timeline-canvas'); if (!c) return 0; \
    const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data; let n = 0; \
    for (let i = 0; i < d.length; i += 4) { if (d[i+3] > 0 && (d[i] < 200 || d[i+1] < 200 || d[i+2] < 200)) n++; } return n; })()";

/// Navigation start → `cond` true and a frame painted after it, in milliseconds, from the page's
/// own clock (`performance.now()` counts from navigation start), together with the page's first
/// contentful paint. Polls once per animation frame inside the page, so the figure does not
/// include WebDriver round trips or the browser's start.
pub async fn nav_to_drawn_ms(c: &Client, cond: &str) -> (f64, Option<f64>) {
    let script = format!(
        "const done = arguments[arguments.length - 1];
         const check = () => {{
           if ({cond}) {{
             requestAnimationFrame(() => setTimeout(() => {{
               const fcp = performance.getEntriesByName('first-contentful-paint')[0];
               done([performance.now(), fcp ? fcp.startTime : null]);
             }}, 0));
           }} else {{
             requestAnimationFrame(check);
           }}
         }};
         check();"
    );
    let v = c.execute_async(&script, vec![]).await.unwrap();
    (v[0].as_f64().unwrap(), v[1].as_f64())
}
