//! A flag a caller raises to stop a long analysis early.
//!
//! Why this exists: the server runs the engine on blocking threads for HTTP clients, and a
//! what-if replays a trace once per setting (seconds on a GB-scale trace). When the client goes
//! away, its request is dropped but a blocking thread cannot be; the analysis checks this flag
//! now and then instead and gives up. The CLI never cancels ([`Cancel::default`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// A cancellation flag shared between whoever may cancel and the analysis that checks it.
/// The default never fires.
#[derive(Clone, Debug, Default)]
pub struct Cancel(Option<Arc<AtomicBool>>);

/// An analysis stopped because its [`Cancel`] fired.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cancelled;

impl std::fmt::Display for Cancelled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the analysis was cancelled")
    }
}

impl std::error::Error for Cancelled {}

impl Cancel {
    /// A flag that fires when [`Cancel::cancel`] is called on it or on any clone of it.
    pub fn new() -> Cancel {
        Cancel(Some(Arc::new(AtomicBool::new(false))))
    }

    pub fn cancel(&self) {
        if let Some(f) = &self.0 {
            f.store(true, Ordering::Relaxed);
        }
    }

    pub fn is_cancelled(&self) -> bool {
        self.0.as_ref().is_some_and(|f| f.load(Ordering::Relaxed))
    }

    /// `Err(Cancelled)` once the flag has fired.
    pub fn check(&self) -> Result<(), Cancelled> {
        if self.is_cancelled() {
            Err(Cancelled)
        } else {
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clone_sees_the_cancel_and_the_default_never_fires() {
        let c = Cancel::new();
        let seen = c.clone();
        assert_eq!(seen.check(), Ok(()));
        c.cancel();
        assert_eq!(seen.check(), Err(Cancelled));
        let never = Cancel::default();
        never.cancel();
        assert!(!never.is_cancelled());
    }
}
