//! Memory that the parses of one process may hold at once, shared by all of them.
//!
//! A server parses several uploads at a time (its index workers). Each parse is bounded on its
//! own (`Limits`: what it may hold per byte of input), but N hostile uploads at once would still
//! hold N times that. A [`MemoryBudget`] is the one figure they share: a parse takes bytes from
//! it as its heap grows, in steps, and gives them all back when its heap is gone. A parse that
//! needs more than the whole budget is refused as too large; one that finds the rest held by
//! other parses is refused as busy, so that the caller can ask its client to retry (a server
//! answers 503 with `Retry-After`) rather than wait while holding a parse slot.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes shared by concurrent parses; clones share the same pool.
#[derive(Clone, Debug)]
pub struct MemoryBudget {
    free_bytes: Arc<AtomicU64>,
    total_bytes: u64,
}

/// Why a parse could not take more of its budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Shortfall {
    /// The parse alone needs more than the whole budget.
    TooLarge { total_bytes: u64 },
    /// Other parses hold what this one needs; it may succeed later.
    Busy { total_bytes: u64, free_bytes: u64 },
}

impl MemoryBudget {
    pub fn new(total_bytes: u64) -> MemoryBudget {
        MemoryBudget {
            free_bytes: Arc::new(AtomicU64::new(total_bytes)),
            total_bytes,
        }
    }

    pub fn total_bytes(&self) -> u64 {
        self.total_bytes
    }

    /// Bytes no parse holds now.
    pub fn free_bytes(&self) -> u64 {
        self.free_bytes.load(Ordering::Acquire)
    }

    /// Takes `bytes` if that many are free.
    fn take(&self, bytes: u64) -> bool {
        self.free_bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |free| {
                free.checked_sub(bytes)
            })
            .is_ok()
    }

    fn give(&self, bytes: u64) {
        self.free_bytes.fetch_add(bytes, Ordering::AcqRel);
    }
}

/// What one parse holds of a budget; all of it is given back when this is dropped.
#[derive(Debug)]
pub(crate) struct Held {
    budget: MemoryBudget,
    bytes: u64,
}

/// Bytes taken at a time beyond what is needed, so that a growing heap asks the shared counter
/// once per step rather than at every check.
const STEP_BYTES: u64 = 16 << 20;

impl Held {
    pub fn new(budget: MemoryBudget) -> Held {
        Held { budget, bytes: 0 }
    }

    /// Holds at least `needed_bytes` (a step more when it has to take), or says why not.
    pub fn cover(&mut self, needed_bytes: u64) -> Result<(), Shortfall> {
        if needed_bytes <= self.bytes {
            return Ok(());
        }
        let total_bytes = self.budget.total_bytes;
        if needed_bytes > total_bytes {
            return Err(Shortfall::TooLarge { total_bytes });
        }
        let wanted = (needed_bytes + STEP_BYTES).min(total_bytes) - self.bytes;
        let least = needed_bytes - self.bytes;
        for more in [wanted, least] {
            if self.budget.take(more) {
                self.bytes += more;
                return Ok(());
            }
        }
        Err(Shortfall::Busy {
            total_bytes,
            free_bytes: self.budget.free_bytes(),
        })
    }

    #[cfg(test)]
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.budget.give(self.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_share_the_budget_and_give_it_back() {
        let budget = MemoryBudget::new(100 << 20);
        let mut a = Held::new(budget.clone());
        a.cover(50 << 20).unwrap();
        assert_eq!(a.bytes(), 66 << 20, "a step beyond what was needed");
        let mut b = Held::new(budget.clone());
        b.cover(30 << 20).unwrap();
        assert_eq!(b.bytes(), 30 << 20, "no step when only the need is left");
        assert_eq!(budget.free_bytes(), 4 << 20);
        assert_eq!(
            b.cover(40 << 20),
            Err(Shortfall::Busy {
                total_bytes: 100 << 20,
                free_bytes: 4 << 20
            })
        );
        assert_eq!(
            b.cover(101 << 20),
            Err(Shortfall::TooLarge {
                total_bytes: 100 << 20
            })
        );
        drop(a);
        assert_eq!(budget.free_bytes(), 70 << 20);
        b.cover(40 << 20).unwrap();
        drop(b);
        assert_eq!(budget.free_bytes(), 100 << 20, "everything given back");
    }
}
