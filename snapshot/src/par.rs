//! Work on several threads where the platform has them: the analyses run independent
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

/// Runs `f` on every item and returns the results in the items' order: on as many threads as
/// the machine has on a native build (each takes the next item left, so uneven items balance),
/// one item after the other on `wasm32`.
pub fn map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    map_on(0, items, f)
}

/// [`map`] on at most `threads` threads (0: as many as the machine has).
pub fn map_on<T: Sync, R: Send>(threads: usize, items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    // One thread on wasm32, whatever was asked.
    #[cfg(target_arch = "wasm32")]
    let _ = threads;
    #[cfg(not(target_arch = "wasm32"))]
    {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let threads = match threads {
            0 => cores,
            t => t.min(cores),
        }
        .min(items.len());
        if threads > 1 {
            let next = AtomicUsize::new(0);
            let work = || {
                let mut done = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(item) = items.get(i) else {
                        return done;
                    };
                    done.push((i, f(item)));
                }
            };
            let mut all: Vec<(usize, R)> = std::thread::scope(|s| {
                let others: Vec<_> = (1..threads).map(|_| s.spawn(work)).collect();
                let mut all = work();
                for h in others {
                    match h.join() {
                        Ok(done) => all.extend(done),
                        Err(panic) => std::panic::resume_unwind(panic),
                    }
                }
                all
            });
            all.sort_unstable_by_key(|&(i, _)| i);
            return all.into_iter().map(|(_, r)| r).collect();
        }
    }
    items.iter().map(f).collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn map_keeps_the_items_order() {
        let items: Vec<u64> = (0..1000).collect();
        let out = super::map(&items, |&i| i * i);
        assert_eq!(out, items.iter().map(|i| i * i).collect::<Vec<_>>());
        assert!(super::map(&[] as &[u8], |_| 0).is_empty());
        assert_eq!(super::map_on(1, &items, |&i| i + 1)[999], 1000);
    }
}
