//! The `memscope` command as a user gets it: `MEMSCOPE_BIN` names the binary (./scripts/test
//! points it at the one `pip install` put in a new virtualenv from the built wheel; without it,
//! this build's). `analyze` and `serve` run from it, and `memscope open` starts a server,
//! uploads and opens the browser, whose page is then shown in headless Chromium.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::*;

fn memscope() -> PathBuf {
    std::env::var_os("MEMSCOPE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_memscope")))
}

/// A child process killed when the test ends, pass or fail.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_for(what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ready() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn health(port: u16) -> bool {
    ureq::get(&format!("http://127.0.0.1:{port}/api/health"))
        .call()
        .is_ok_and(|mut r| {
            r.body_mut()
                .read_to_string()
                .is_ok_and(|b| b.contains("\"ok\":true"))
        })
}

#[test]
fn the_installed_command_analyzes_and_serves() {
    let bin = memscope();
    let out = Command::new(&bin)
        .args(["analyze", "--json"])
        .arg(fixture("oom_fraction.pickle"))
        .output()
        .expect("memscope runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["ooms"].as_array().unwrap().len(), 1);

    let data = scratch("serve");
    let port = free_port();
    let _server = Killed(
        Command::new(&bin)
            .args(["serve", "--addr", &format!("127.0.0.1:{port}")])
            .arg("--data-dir")
            .arg(&data)
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for("memscope serve", || health(port));
    let page = ureq::get(&format!("http://127.0.0.1:{port}/"))
        .call()
        .unwrap()
        .body_mut()
        .read_to_string()
        .unwrap();
    assert!(page.contains("<html"), "the dashboard is served: {page}");
}

/// An empty folder of this test's.
fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("memscope-wheel-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn fixture(name: &str) -> PathBuf {
    root().join("tests/fixtures").join(name)
}

/// A `$BROWSER` that writes the address it is given to `file`, as a browser would open it.
fn recording_browser(dir: &Path) -> (PathBuf, PathBuf) {
    let script = dir.join("browser.sh");
    let file = dir.join("opened.txt");
    std::fs::write(
        &script,
        format!("#!/bin/sh\necho \"$1\" >> '{}'\n", file.display()),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    (script, file)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memscope_open_starts_a_server_and_shows_the_snapshot() {
    let dir = scratch("open");
    let (browser_script, opened) = recording_browser(&dir);
    let port = free_port();
    let mut child = Command::new(memscope())
        .args(["open", "--addr", &format!("127.0.0.1:{port}")])
        .arg(fixture("oom_fraction.pickle"))
        .env("BROWSER", &browser_script)
        .env("XDG_DATA_HOME", dir.join("data"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let _open = Killed(child);
    wait_for("the browser to be asked to open a page", || opened.exists());
    let url = std::fs::read_to_string(&opened).unwrap().trim().to_string();
    assert!(
        // On the view that answers its question (the OOM), as the dashboard's upload opens it.
        url.starts_with(&format!("http://127.0.0.1:{port}/s/")) && url.ends_with("?view=oom"),
        "{url}"
    );
    // What it printed: the analyses' headline and the address.
    let mut said = String::new();
    {
        use std::io::BufRead;
        let mut lines = std::io::BufReader::new(stdout).lines();
        for _ in 0..2 {
            said.push_str(&lines.next().unwrap().unwrap());
            said.push('\n');
        }
    }
    assert!(
        said.contains(
            "oom_fraction.pickle: peak 5.3 GiB allocated, 5.6 GiB reserved; 1 OOM; 1 leak suspect"
        ),
        "{said}"
    );
    assert!(said.contains(&format!("opened {url}")), "{said}");

    // The page the browser was sent to, in a real browser.
    let (_driver, driver_port) = start_chromedriver();
    let c = browser(driver_port, &dir.join("profile")).await;
    c.goto(&url).await.unwrap();
    wait_js(
        &c,
        "document.querySelector('.verdict') && document.querySelector('.oom-outcome')",
        "the OOM verdict of the opened snapshot",
    )
    .await;
    screenshot(&c, "wheel_memscope_open").await;
    assert_eq!(console_errors(&c).await, Vec::<String>::new());

    // A second `open` reuses the server: the run of two ranks, then it exits.
    std::fs::remove_file(&opened).unwrap();
    let second = Command::new(memscope())
        .args([
            "open",
            "--addr",
            &format!("127.0.0.1:{port}"),
            "--job",
            "ranks",
        ])
        .arg(root().join("tests/fixtures/harness/ranks.rank0.pickle"))
        .arg(root().join("tests/fixtures/harness/ranks.rank1.oom.pickle"))
        .env("BROWSER", &browser_script)
        .output()
        .unwrap();
    assert!(
        second.status.success(),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    assert!(String::from_utf8_lossy(&second.stderr).contains("using the memscope"));
    let url = std::fs::read_to_string(&opened).unwrap().trim().to_string();
    assert_eq!(url, format!("http://127.0.0.1:{port}/runs/ranks"));
    c.goto(&url).await.unwrap();
    wait_js(
        &c,
        "document.body.innerText.includes('rank 1')",
        "the run page of the two ranks",
    )
    .await;
    assert_eq!(console_errors(&c).await, Vec::<String>::new());
    c.close().await.unwrap();
}

#[test]
fn memscope_open_without_a_browser_prints_the_address_and_refuses_a_foreign_port() {
    // Something that is not memscope on the port: a clear refusal, nothing uploaded.
    let foreign = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = foreign.local_addr().unwrap().port();
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        for s in foreign.incoming().flatten().take(4) {
            let mut s = s;
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf);
            let _ = s.write_all(
                b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\nconnection: close\r\n\r\nhello",
            );
        }
    });
    let out = Command::new(memscope())
        .args([
            "open",
            "--no-browser",
            "--addr",
            &format!("127.0.0.1:{port}"),
        ])
        .arg(fixture("oom_fraction.pickle"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("not memscope") && err.contains("--addr"),
        "{err}"
    );
}
