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
    let wanted = std::sync::atomic::AtomicUsize::new(threads);
    map_growing(&wanted, threads, items, f)
}

/// [`map_on`] whose threads may grow while it runs: up to `most` threads (0: as many as the
/// machine has) are started, and one takes items only while fewer than `wanted` (read before
/// each item; 0: all of them) are at work. Work nobody waits for yet runs on one thread, and
/// when a person starts waiting, raising `wanted` puts the others to work on the items left.
pub fn map_growing<T: Sync, R: Send>(
    wanted: &std::sync::atomic::AtomicUsize,
    most: usize,
    items: &[T],
    f: impl Fn(&T) -> R + Sync,
) -> Vec<R> {
    // One thread on wasm32, whatever was asked.
    #[cfg(target_arch = "wasm32")]
    let _ = (wanted, most);
    #[cfg(not(target_arch = "wasm32"))]
    {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let allowed = |t: usize| match t {
            0 => cores,
            t => t.min(cores),
        };
        let threads = allowed(most).min(items.len());
        if threads > 1 {
            let next = AtomicUsize::new(0);
            // Thread `k` (the caller is 0) waits until it is wanted or no item is left.
            let work = |k: usize| {
                let mut done = Vec::new();
                loop {
                    if k >= allowed(wanted.load(Ordering::Relaxed)) {
                        if next.load(Ordering::Relaxed) >= items.len() {
                            return done;
                        }
                        std::thread::sleep(GROWTH_POLL);
                        continue;
                    }
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(item) = items.get(i) else {
                        return done;
                    };
                    done.push((i, f(item)));
                }
            };
            let mut all: Vec<(usize, R)> = std::thread::scope(|s| {
                let others: Vec<_> = (1..threads).map(|k| s.spawn(move || work(k))).collect();
                let mut all = work(0);
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

/// How often a thread [`map_growing`] does not want yet looks again: short beside the
/// seconds-long items it exists for.
#[cfg(not(target_arch = "wasm32"))]
const GROWTH_POLL: std::time::Duration = std::time::Duration::from_millis(20);

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

    #[test]
    fn threads_not_wanted_yet_join_when_wanted() {
        use std::sync::Mutex;
        use std::sync::atomic::{AtomicUsize, Ordering};
        let items: Vec<u64> = (0..40).collect();
        let wanted = AtomicUsize::new(1);
        let seen = Mutex::new(std::collections::HashSet::new());
        let out = super::map_growing(&wanted, 2, &items, |&i| {
            seen.lock().unwrap().insert(std::thread::current().id());
            if i == 3 {
                wanted.store(2, Ordering::Relaxed);
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
            i * 2
        });
        assert_eq!(out, items.iter().map(|i| i * 2).collect::<Vec<_>>());
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        if cores > 1 {
            // One thread until item 3, then the second one joined.
            assert_eq!(seen.lock().unwrap().len(), 2);
        }
        // Never wanted: the second thread only waits, and returns once the items are taken.
        let seen = Mutex::new(std::collections::HashSet::new());
        let out = super::map_growing(&AtomicUsize::new(1), 2, &items, |&i| {
            seen.lock().unwrap().insert(std::thread::current().id());
            i
        });
        assert_eq!(out, items);
        assert_eq!(seen.lock().unwrap().len(), 1);
    }
}
