//! The engine's parse (and index) of a file handed over in wasm memory, for `run.mjs` to time:
//! how long a parse in the dashboard's page would take, before any of it is built
//! (bench/README.md, issue 41, eleventh part).
#![allow(unsafe_code)]

/// The file's bytes, written by the host into the buffer [`buffer`] returns.
static mut FILE: Vec<u8> = Vec::new();

/// A buffer of `len` bytes for the host to copy the file into.
#[unsafe(no_mangle)]
pub extern "C" fn buffer(len: usize) -> *mut u8 {
    // SAFETY: wasm32 runs one thread here, and the host calls `buffer` and `parse` in turn.
    let file = unsafe { &mut *std::ptr::addr_of_mut!(FILE) };
    *file = vec![0u8; len];
    file.as_mut_ptr()
}

/// Parses the buffer (`what` 1); parses and indexes it (2); or parses, indexes, reports it and
/// builds the timeline's two first windows of its default device (3). The trace's length.
#[unsafe(no_mangle)]
pub extern "C" fn parse(what: u32) -> u32 {
    // SAFETY: as in `buffer`.
    let bytes = unsafe { &*std::ptr::addr_of!(FILE) };
    let snap = snapshot::read_sized(&bytes[..], bytes.len() as u64).expect("a snapshot");
    if what >= 2 {
        let index = snapshot::analysis::Index::new(&snap);
        if what == 3 {
            let options = snapshot::analysis::Options::default();
            std::hint::black_box(snapshot::analysis::report(&snap, &index, &options));
            let d = index.default_device().expect("a device");
            for (buckets, limit) in [(1100, 3000), (600, 0)] {
                std::hint::black_box(snapshot::analysis::timeline::window(
                    &snap, &index, d, None, None, buckets, limit,
                ));
            }
        }
        std::hint::black_box(index);
    }
    snap.trace.len() as u32
}
