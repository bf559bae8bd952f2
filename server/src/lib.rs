//! memscope's server crate: the command line (`memscope analyze`, `memscope serve`), the HTTP API
//! and the snapshot library (SQLite + data folder). The snapshot engine itself is the `snapshot`
//! crate; this crate does the IO around it. What crosses HTTP is the `api` crate's types
//! (`convert` turns the engine's into them); what collectors send is `wire`'s.

pub mod access;
pub mod assets;
pub mod background;
pub mod cli;
pub mod config;
pub use api::engine as convert;
pub mod db;
pub mod http;
pub mod library;
pub mod listen;
pub mod live;
pub mod local;
pub mod mcp;
pub mod notify;
pub mod open;
pub mod predict;
pub mod report;
pub mod runs;
pub mod serve;
pub mod state;
pub mod testing;
pub mod text;

/// Bytes as lowercase hex (an entry's SHA-256 name, the library's content secret, an asset's
/// tag).
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Now, in Unix epoch milliseconds (the unit every stored time uses).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// glibc serves a block from `mmap` above a threshold, and raises that threshold to the size of
/// each such block freed (up to 32 MiB); blocks under it then come from the heap, whose memory
/// stays with the process once they are freed. A server frees big buffers all the time (request
/// bodies, the parser's windows, tables growing as an upload arrives), so its peak RSS took the
/// holes: uploading the 1 GB benchmark file peaked at 424–433 MB with the moving threshold and
/// 380–383 MB with it fixed at glibc's default, below `memscope analyze` on the same file
/// (390 MB; bench/README.md, issue 41).
///
/// Fixed at 512 KiB rather than glibc's 128 KiB default: an upload's body arrives in buffers of
/// up to ~400 KiB, which at 128 KiB were each a fresh `mmap`, faulted in page by page and
/// unmapped again; at 512 KiB they come from the heap and its freed memory is reused. That
/// halved the server's page faults over an upload (47,000 → 22,000–27,000 on the 164 MB file,
/// 345,000 → 154,000–180,000 on the 1 GB one) and took 0.05–0.1 CPU-s off the 164 MB upload,
/// CPU that Chromium's own sending needs on a 2-core machine; peak RSS rose by about 2 MiB
/// (bench/README.md, issue 41, eleventh part). The tables themselves are far larger than this
/// threshold and are still mapped.
///
/// Called first thing by the binary, and by the dashboard's benchmark, whose server runs in
/// the test's process. Does nothing but on Linux with glibc.
///
/// One of three `unsafe` blocks in the workspace (its lints deny them), all FFI calls with no
/// pointers; the others give free heap pages back ([`release_free_heap`]) and lower a thread's
/// priority (`background`).
#[allow(unsafe_code)]
pub fn fix_mmap_threshold() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `mallopt` only sets an allocator tunable, and glibc documents it as safe to call
    // from any thread.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 512 << 10);
    }
}

/// Gives the free pages inside the allocator's heaps back to the system (`malloc_trim(0)`).
///
/// An upload's body arrives in buffers below the mmap threshold (`fix_mmap_threshold`), on the
/// async workers' heaps; once the parser has read the last of them they are free, but glibc
/// returns a heap's memory only from its top, so their pages stayed resident through the end
/// of the indexing and the report, where an upload's RSS peaks. Called when the parser reaches
/// the body's end: the 1 GB upload's peak went from 342–350 to 339–345 MiB (builds
/// alternated; bench/README.md, issue 41, fourteenth part). The call took 0.1–0.7 ms on 164 MB
/// uploads; it is made once an upload. Does nothing but on Linux with glibc.
#[allow(unsafe_code)]
pub fn release_free_heap() {
    #[cfg(test)]
    HEAP_RELEASES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `malloc_trim` takes no pointers; glibc documents it as safe to call from any
    // thread (it locks each arena it trims).
    unsafe {
        libc::malloc_trim(0);
    }
}

/// How many times [`release_free_heap`] ran: the upload's test checks that it runs once an
/// upload (no other unit test uploads).
#[cfg(test)]
pub static HEAP_RELEASES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
