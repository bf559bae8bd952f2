//! Issue 38, item 1: what a hostile upload costs the server in memory. A fresh `memscope serve`
//! (the release binary) per case takes one upload, streamed from here; its peak resident size
//! (`VmHWM`) is read after the answer and printed against the upload's decoded size. The
//! cases are the probe's: a pickle of distinct 8-character strings in one list, and a JSON
//! document of empty segment objects. A benchmark that prints figures, not a timed test:
//! `cargo test --release -p server --test it -- upload_memory_bench:: --ignored --nocapture`
//! (`MEMSCOPE_BENCH_MB` sets the upload size, default 200; `MEMSCOPE_BENCH_REAL=FILE` adds a
//! real snapshot's upload for comparison).

use std::io::{Read, Write};
use std::time::Instant;

use crate::support::hostile::{dict_then_strings, distinct_strings, empty_segments};

/// The server's peak resident set (`VmHWM`), in bytes.
fn peak_rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kib| kib << 10)
}

/// Uploads `body` to a fresh server: (status line, seconds, the server's peak RSS).
fn upload_to_fresh_server(tag: &str, body: &[u8]) -> (String, f64, u64) {
    let (mut answers, secs, peak) = uploads_to_fresh_server(tag, &[body]);
    (answers.remove(0), secs, peak)
}

/// Uploads each of `bodies` at once to a fresh server: (status lines, seconds, peak RSS).
fn uploads_to_fresh_server(tag: &str, bodies: &[&[u8]]) -> (Vec<String>, f64, u64) {
    let dir = std::env::temp_dir().join(format!("memscope-membench-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let port = crate::support::free_port();
    let mut server = std::process::Command::new(env!("CARGO_BIN_EXE_memscope"))
        .args([
            "serve",
            "--addr",
            &format!("127.0.0.1:{port}"),
            "--data-dir",
        ])
        .arg(&dir)
        .env("MEMSCOPE_LOG", "warn")
        .spawn()
        .unwrap();
    assert!(
        crate::support::socket::wait_for_port(port),
        "the server starts"
    );
    let started = Instant::now();
    let answers: Vec<String> = std::thread::scope(|scope| {
        let sent: Vec<_> = bodies
            .iter()
            .enumerate()
            .map(|(i, body)| scope.spawn(move || send(port, i, &format!("{tag}-{i}"), body)))
            .collect();
        sent.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let secs = started.elapsed().as_secs_f64();
    let peak = peak_rss_bytes(server.id());
    let _ = server.kill();
    let _ = server.wait();
    let _ = std::fs::remove_dir_all(&dir);
    (answers, secs, peak)
}

/// Sends one upload from client address 127.0.0.(1+`client`) (a client's share of the parse
/// slots is half of them) and reads its answer's status line.
fn send(port: u16, client: usize, name: &str, body: &[u8]) -> String {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let s = rt.block_on(async {
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.bind(std::net::SocketAddr::from((
            [127, 0, 0, 1 + client as u8],
            0,
        )))?;
        socket
            .connect(std::net::SocketAddr::from(([127, 0, 0, 1], port)))
            .await
    });
    let mut s = s.unwrap().into_std().unwrap();
    s.set_nonblocking(false).unwrap();
    let head = format!(
        "POST /api/snapshots?name={name} HTTP/1.1\r\nhost: localhost\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    let _ = s.write_all(body);
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    answer.lines().next().unwrap_or("(no answer)").to_string()
}

#[test]
#[ignore = "a benchmark: run with --ignored --nocapture"]
fn a_hostile_uploads_peak_memory_against_its_size() {
    let mb: usize = std::env::var("MEMSCOPE_BENCH_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    println!(
        "upload                              MB    answer                        s      peak RSS MB  RSS/size"
    );
    // Bounds memory, not time (a machine's memory is not noisy the way its clock is): each
    // hostile upload is refused, at most twice its size plus a fixed allowance.
    let held_to = |size: usize, status: &str, peak: u64| {
        assert!(status.contains(" 422 "), "refused: {status}");
        assert!(
            peak <= 2 * size as u64 + (512 << 20),
            "peak RSS {peak} bytes for a {size}-byte upload"
        );
    };
    let row = |name: &str, size: usize, status: &str, secs: f64, peak: u64| {
        println!(
            "{name:<34} {:>5.0}  {status:<28} {secs:>6.1}  {:>11.0}  {:>8.2}",
            size as f64 / 1048576.0,
            peak as f64 / 1048576.0,
            peak as f64 / size as f64
        );
    };
    for (name, body) in [
        ("distinct-strings.pickle", distinct_strings(mb << 20)),
        ("dict-then-strings.pickle", dict_then_strings(mb << 20)),
        ("empty-segments.json", empty_segments(mb << 20)),
    ] {
        let (status, secs, peak) = upload_to_fresh_server(name, &body);
        row(name, body.len(), &status, secs, peak);
        held_to(body.len(), &status, peak);
    }
    // A real snapshot beside them, if one is named: it must go through, at its usual cost.
    if let Ok(path) = std::env::var("MEMSCOPE_BENCH_REAL") {
        let body = std::fs::read(&path).unwrap();
        let (status, secs, peak) = upload_to_fresh_server("real", &body);
        row(&path, body.len(), &status, secs, peak);
    }
    // Two at once from two clients (the default two index workers, one each).
    let body = dict_then_strings(mb << 20);
    let (answers, secs, peak) = uploads_to_fresh_server("two", &[&body, &body]);
    row(
        "2x dict-then-strings.pickle",
        body.len() * 2,
        &answers.join(" / "),
        secs,
        peak,
    );
    for status in &answers {
        held_to(body.len() * 2, status, peak);
    }
}
