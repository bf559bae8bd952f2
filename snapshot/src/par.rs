//! Two pieces of work at once where the platform has threads: the analyses run independent
//! passes side by side on a native build (a 2-core laptop halves their wall time), one after the
//! other on `wasm32`, which has none. Results are the same either way; only the clock differs.

/// Runs `a` and `b`, in parallel on native targets, and returns both results.
pub fn join<A: Send, B: Send>(
    a: impl FnOnce() -> A + Send,
    b: impl FnOnce() -> B + Send,
) -> (A, B) {
    #[cfg(not(target_arch = "wasm32"))]
    {
        std::thread::scope(|s| {
            let hb = s.spawn(b);
            let ra = a();
            let rb = match hb.join() {
                Ok(rb) => rb,
                Err(panic) => std::panic::resume_unwind(panic),
            };
            (ra, rb)
        })
    }
    #[cfg(target_arch = "wasm32")]
    {
        (a(), b())
    }
}
