//! Issue 38, item 1: what a hostile upload costs the server in memory. A fresh `memscope serve`
//! (the release binary) per case takes one upload, streamed from here; its peak resident size
//! (`VmHWM`) is read after the answer and printed against the upload's decoded size. The
//! cases are the probe's: a pickle of distinct 8-character strings in one list, and a JSON
//! document of empty segment objects. A benchmark that prints figures, not a timed test:
//! `cargo test --release -p server --test it -- upload_memory_bench:: --ignored --nocapture`
//! (`MEMSCOPE_BENCH_MB` sets the upload size, default 200).

use std::io::{Read, Write};
use std::time::Instant;

/// The server's peak resident set (`VmHWM`), in bytes.
fn peak_rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kib| kib << 10)
}

/// `total` bytes of a pickle list of distinct 8-character strings (`X` + length + text +
/// `APPEND`), ending with `STOP`.
fn distinct_strings(total: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(total + 16);
    out.extend(b"\x80\x02]");
    let mut i = 0u64;
    while out.len() + 15 < total {
        out.push(b'X');
        out.extend(8u32.to_le_bytes());
        out.extend(format!("{:08x}", i & 0xffff_ffff).as_bytes());
        out.push(b'a');
        i += 1;
    }
    out.push(b'.');
    out
}

/// `total` bytes of `{"segments":[{},{},…]}`.
fn empty_segments(total: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(total + 16);
    out.extend(b"{\"segments\":[{}");
    while out.len() + 5 < total {
        out.extend(b",{}");
    }
    out.extend(b"]}");
    out
}

/// Uploads `body` to a fresh server: (status line, seconds, the server's peak RSS).
fn upload_to_fresh_server(tag: &str, body: &[u8]) -> (String, f64, u64) {
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
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let head = format!(
        "POST /api/snapshots?name={tag} HTTP/1.1\r\nhost: localhost\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    let _ = s.write_all(body);
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    let secs = started.elapsed().as_secs_f64();
    let peak = peak_rss_bytes(server.id());
    let _ = server.kill();
    let _ = server.wait();
    let _ = std::fs::remove_dir_all(&dir);
    let status = answer.lines().next().unwrap_or("(no answer)").to_string();
    (status, secs, peak)
}

#[test]
#[ignore = "a benchmark: run with --ignored --nocapture"]
fn a_hostile_uploads_peak_memory_against_its_size() {
    let mb: usize = std::env::var("MEMSCOPE_BENCH_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    println!(
        "upload                          MB    answer                        s      peak RSS MB  RSS/size"
    );
    for (name, body) in [
        ("distinct-strings.pickle", distinct_strings(mb << 20)),
        ("empty-segments.json", empty_segments(mb << 20)),
    ] {
        let (status, secs, peak) = upload_to_fresh_server(name, &body);
        println!(
            "{name:<30} {:>5.0}  {status:<28} {secs:>6.1}  {:>11.0}  {:>8.2}",
            body.len() as f64 / 1048576.0,
            peak as f64 / 1048576.0,
            peak as f64 / body.len() as f64
        );
    }
}
