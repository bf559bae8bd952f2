//! How far a what-if has got, for a caller that shows it while it runs.
//!
//! Why this exists: the built-in table replays a trace once per setting, about 12 s for a
//! 13M-event trace on two cores, and a person who opens the What if tab should not look at a
//! spinner meanwhile. The replays report here as they go: the events replayed (for a bar), the
//! answer so far (the check and every setting replayed, ranked as the whole answer will be), and
//! whoever waits can ask for more threads ([`Progress::hurry`]) than the background work took.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use super::{Run, WhatIf};

/// Shared between a [`whatif`](super::whatif) running and whoever watches it.
#[derive(Debug, Default)]
pub struct Progress {
    /// Events replayed so far, over every replay.
    events_replayed: AtomicU64,
    /// Events the whole answer replays (the check, then each other setting's run); 0 until known.
    events_total: AtomicU64,
    /// Threads the replays may use (0: every core); raised by [`Progress::hurry`].
    threads: AtomicUsize,
    /// The answer so far: set when the check is done (no runs yet), each run added as it ends,
    /// and how many runs it will have.
    so_far: Mutex<(Option<WhatIf>, u32)>,
}

/// A look at a [`Progress`].
#[derive(Clone, Debug)]
pub struct Seen {
    pub events_replayed: u64,
    /// 0 until the replays are laid out.
    pub events_total: u64,
    pub settings_replayed: u32,
    /// 0 until the check is done.
    pub settings: u32,
    /// The check and the settings replayed so far, ranked; none before the check is done.
    pub so_far: Option<WhatIf>,
}

impl Progress {
    /// Progress of a what-if that starts on `threads` threads (0: every core).
    pub fn new(threads: usize) -> Progress {
        Progress {
            threads: AtomicUsize::new(threads),
            ..Default::default()
        }
    }

    /// Someone waits for the answer: the replays left run on every core.
    pub fn hurry(&self) {
        self.threads.store(0, Ordering::Relaxed);
    }

    pub(super) fn threads(&self) -> &AtomicUsize {
        &self.threads
    }

    pub fn seen(&self) -> Seen {
        let (so_far, settings) = self.so_far.lock().expect("progress lock").clone();
        Seen {
            events_replayed: self.events_replayed.load(Ordering::Relaxed),
            events_total: self.events_total.load(Ordering::Relaxed),
            settings_replayed: so_far.as_ref().map_or(0, |w| w.runs.len() as u32),
            settings,
            so_far,
        }
    }

    pub(super) fn replayed(&self, events: u64) {
        self.events_replayed.fetch_add(events, Ordering::Relaxed);
    }

    pub(super) fn plan(&self, events_total: u64) {
        self.events_total.store(events_total, Ordering::Relaxed);
    }

    /// The check is done: the answer so far is `head` (no runs yet), of `settings` runs.
    pub(super) fn checked(&self, head: WhatIf, settings: u32) {
        *self.so_far.lock().expect("progress lock") = (Some(head), settings);
    }

    /// One more setting replayed.
    pub(super) fn ran(&self, run: &Run) {
        if let (Some(w), _) = &mut *self.so_far.lock().expect("progress lock") {
            w.runs.push(run.clone());
            super::rank(&mut w.runs);
        }
    }
}
