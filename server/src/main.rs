//! The `memscope` binary: parses flags and calls the library. Everything else lives in `server`'s
//! library so it can be tested without spawning processes.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fix_mmap_threshold();
    let cli = server::cli::Cli::parse();
    match server::cli::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("memscope: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// glibc serves a block from `mmap` above a threshold, and raises that threshold to the size of
/// each such block freed (up to 32 MiB); blocks under it then come from the heap, whose memory
/// stays with the process once they are freed. A server frees big buffers all the time (request
/// bodies, the parser's windows, tables growing as an upload arrives), so its peak RSS took the
/// holes: uploading the 1 GB benchmark file peaked at 424–433 MB with the moving threshold and
/// 380–383 MB with it fixed at glibc's default, below `memscope analyze` on the same file
/// (390 MB; bench/README.md, issue 41).
///
/// The one `unsafe` in the workspace (its lints deny it): an FFI call with no pointers.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn fix_mmap_threshold() {
    // SAFETY: `mallopt` sets an allocator tunable; it is called first thing, before any other
    // thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 << 10);
    }
}
