//! Cooperative cancellation with an atomic commit point (SPEC §4.5 `abort`).

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

const RUNNING: u8 = 0;
const CANCELLED: u8 = 1;
const COMMITTED: u8 = 2;

/// The cancellation state of one operation, shared between the operation (on its blocking
/// thread) and the abort handler.
///
/// It moves once, from *running* to either *cancelled* or *committed*, and never back:
///
/// - the abort handler calls [`Cancel::cancel`]; `true` means the operation had not passed
///   its commit point, so it will leave no side effect and its result must never be sent;
/// - a mutating operation calls [`Cancel::try_commit`] right before its single
///   irreversible step (the rename); `false` means it was cancelled first and must undo its
///   preparations (the temp file) and return;
/// - the server should also call [`Cancel::try_commit`] before sending any result, read-only
///   operations included, so that an abort arriving after that answers `aborted:false`.
#[derive(Clone, Debug, Default)]
pub struct Cancel(Arc<AtomicU8>);

impl Cancel {
    /// A fresh, running state.
    pub fn new() -> Self {
        Self::default()
    }

    /// Cancel the operation: `true` if it was cancelled before its commit point (now or by
    /// an earlier call), `false` if it had already committed.
    pub fn cancel(&self) -> bool {
        match self.0.compare_exchange(RUNNING, CANCELLED, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => true,
            Err(state) => state == CANCELLED,
        }
    }

    /// Whether the operation has been cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Acquire) == CANCELLED
    }

    /// Pass the commit point: `true` if the operation may now make its irreversible step (or
    /// had already committed), `false` if it was cancelled first.
    pub fn try_commit(&self) -> bool {
        match self.0.compare_exchange(RUNNING, COMMITTED, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => true,
            Err(state) => state == COMMITTED,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cancel_before_commit_wins() {
        let c = Cancel::new();
        assert!(!c.is_cancelled());
        assert!(c.clone().cancel());
        assert!(c.is_cancelled());
        assert!(c.cancel(), "cancelling twice stays cancelled");
        assert!(!c.try_commit());
    }

    #[test]
    fn commit_before_cancel_wins() {
        let c = Cancel::new();
        assert!(c.try_commit());
        assert!(c.try_commit(), "committing twice stays committed");
        assert!(!c.cancel());
        assert!(!c.is_cancelled());
    }

    #[test]
    fn exactly_one_side_wins_a_race() {
        for _ in 0..200 {
            let c = Cancel::new();
            let c2 = c.clone();
            let t = std::thread::spawn(move || c2.cancel());
            let committed = c.try_commit();
            let cancelled = t.join().unwrap();
            assert_ne!(committed, cancelled);
        }
    }
}
