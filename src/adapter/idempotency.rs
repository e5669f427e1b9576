//! The adapter's idempotency cache (SPEC §4.5): at most `maxIdempotencyKeys` keys, each kept
//! `idempotencyTtlMs` after its outcome, with a fingerprint of (operation, canonical payload).
//! Pure state; time is passed in.
//!
//! One cache serves every connection of one grant and binding identity in a process (issue
//! 25, N7): a replacing bind inherits the outcomes of the mutations before it. A key in flight
//! is tagged with the session (its *owner*) that runs it, so a duplicate on another
//! connection never waits for a request it cannot see finish. When full, a new key evicts the
//! oldest finished read-only key first; a read-only request never evicts a mutating key
//! within its TTL (it runs unrecorded instead).

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::contract::AdapterError;

/// SHA-256 of the operation and the payload with object keys sorted (so key order, which is
/// not significant in JSON, does not change the fingerprint): the contract's
/// [`invoke_fingerprint`](crate::contract::fingerprint::invoke_fingerprint), its one home.
pub use crate::contract::fingerprint::invoke_fingerprint as fingerprint;

/// What a key is doing.
#[derive(Clone, Debug, PartialEq)]
pub enum KeyState {
    /// The first request with this key is queued or running.
    InFlight {
        /// Its request id.
        primary: String,
        /// The session that runs it.
        owner: u64,
    },
    /// Finished: the fingerprint stays for `idempotencyTtlMs` (a reuse with another payload is
    /// a conflict), and for a mutating operation the outcome too, for replay.
    Done {
        /// The data or the error (`None` for a read-only operation, which simply runs again).
        outcome: Option<Result<Value, AdapterError>>,
        /// When it finished.
        at: Instant,
    },
}

#[derive(Clone, Debug)]
struct Entry {
    fingerprint: [u8; 32],
    /// Recorded by a mutating operation (its outcome is kept; never evicted for a read-only
    /// key).
    mutating: bool,
    state: KeyState,
}

/// What to do with an incoming request's key.
#[derive(Clone, Debug, PartialEq)]
pub enum Lookup {
    /// Unknown (or expired) key: now recorded as in flight under this request.
    New,
    /// Same key, another fingerprint.
    Conflict,
    /// Same key and fingerprint, still running in this session: wait for this primary.
    Wait(String),
    /// Same key and fingerprint, still running in another session (a connection this one
    /// replaced): its outcome is not known yet.
    InFlightElsewhere,
    /// Same key and fingerprint, finished: replay this outcome.
    Replay(Result<Value, AdapterError>),
    /// Same key and fingerprint, finished with no outcome kept (read-only): run it again.
    Rerun,
    /// No room: every retained key is in flight.
    Full,
    /// A read-only request that finds no room but by evicting a mutating key within its TTL:
    /// it runs, and its key is not recorded.
    Untracked,
}

/// A cache shared by the sessions of one grant and binding identity (issue 25, N7).
pub type SharedCache = std::sync::Arc<std::sync::Mutex<IdempotencyCache>>;

/// Lock a shared cache (its state stays consistent if a holder panicked: every method
/// finishes its edits before returning).
pub fn lock(cache: &SharedCache) -> std::sync::MutexGuard<'_, IdempotencyCache> {
    cache.lock().unwrap_or_else(|p| p.into_inner())
}

/// The cache.
#[derive(Debug)]
pub struct IdempotencyCache {
    capacity: usize,
    ttl: Duration,
    entries: HashMap<String, Entry>,
    /// The finished read-only keys, in the order they finished (so also in expiry order, the
    /// TTL being one for all): expiry and eviction both take from the front, in O(1) per key.
    /// Every finished read-only entry is here exactly once and nothing else is (a finished
    /// key leaves the map only by expiry or eviction).
    finished_ro: VecDeque<(Instant, String)>,
    /// The same for the finished mutating keys.
    finished_mut: VecDeque<(Instant, String)>,
}

impl IdempotencyCache {
    /// A cache for `capacity` keys kept `ttl` after completion.
    pub fn new(capacity: usize, ttl: Duration) -> Self {
        let (finished_ro, finished_mut) = (VecDeque::new(), VecDeque::new());
        Self { capacity: capacity.max(1), ttl, entries: HashMap::new(), finished_ro, finished_mut }
    }

    /// Take the limits of a new binding of the same grant: a smaller capacity evicts the
    /// oldest finished keys (read-only ones first) until the retained ones fit.
    pub fn reconfigure(&mut self, capacity: usize, ttl: Duration) {
        self.capacity = capacity.max(1);
        self.ttl = ttl;
        while self.entries.len() > self.capacity {
            let Some((_, k)) = self.finished_ro.pop_front().or_else(|| self.finished_mut.pop_front()) else {
                break;
            };
            self.entries.remove(&k);
        }
    }

    /// Number of retained keys.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no key is retained.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Drop the finished keys whose TTL ran out by `now` (callers pass a monotonic clock).
    fn expire(&mut self, now: Instant) {
        for queue in [&mut self.finished_ro, &mut self.finished_mut] {
            while let Some((at, _)) = queue.front() {
                if now.saturating_duration_since(*at) < self.ttl {
                    break;
                }
                if let Some((_, key)) = queue.pop_front() {
                    self.entries.remove(&key);
                }
            }
        }
    }

    /// Look a key up for request `request_id` of session `owner` (`mutating`: the request's
    /// operation is), recording it when new.
    pub fn begin(
        &mut self,
        now: Instant,
        key: &str,
        fp: [u8; 32],
        request_id: &str,
        owner: u64,
        mutating: bool,
    ) -> Lookup {
        self.expire(now);
        if let Some(e) = self.entries.get(key) {
            if e.fingerprint != fp {
                return Lookup::Conflict;
            }
            return match &e.state {
                KeyState::InFlight { primary, owner: o } if *o == owner => Lookup::Wait(primary.clone()),
                KeyState::InFlight { .. } => Lookup::InFlightElsewhere,
                KeyState::Done { outcome: Some(outcome), .. } => Lookup::Replay(outcome.clone()),
                KeyState::Done { outcome: None, .. } => Lookup::Rerun,
            };
        }
        if self.entries.len() >= self.capacity {
            // Full: forget the read-only key that finished earliest; a mutating key only for
            // another mutating one (see SPEC DECISION).
            let victim = match self.finished_ro.pop_front() {
                Some(v) => Some(v),
                None if mutating => self.finished_mut.pop_front(),
                None if !self.finished_mut.is_empty() => return Lookup::Untracked,
                None => None,
            };
            match victim {
                Some((_, oldest)) => {
                    self.entries.remove(&oldest);
                }
                None => return Lookup::Full,
            }
        }
        let state = KeyState::InFlight { primary: request_id.to_string(), owner };
        self.entries.insert(key.to_string(), Entry { fingerprint: fp, mutating, state });
        Lookup::New
    }

    /// Record the outcome of `request_id` if it is the primary of `key` (returns whether it
    /// was). A retryable error is forgotten (a retry must run again); otherwise the key and
    /// its fingerprint stay for the TTL, with the outcome when `keep` (mutating operations).
    pub fn finish(
        &mut self,
        now: Instant,
        key: &str,
        request_id: &str,
        outcome: &Result<Value, AdapterError>,
        keep: bool,
    ) -> bool {
        if !self.is_primary(key, request_id) {
            return false;
        }
        if outcome.as_ref().err().is_some_and(|e| e.code.retryable()) {
            self.entries.remove(key);
        } else {
            self.settle(now, key, outcome, keep);
        }
        true
    }

    /// Record `outcome` as `key`'s, whatever it is (kept when `keep`). [`Self::finish`] calls
    /// it for every outcome but a retryable error; `Fault::BusyRemembered` for a busy refusal.
    pub(crate) fn settle(&mut self, now: Instant, key: &str, outcome: &Result<Value, AdapterError>, keep: bool) {
        if let Some(e) = self.entries.get_mut(key) {
            e.state = KeyState::Done { outcome: keep.then(|| outcome.clone()), at: now };
            let queue = if e.mutating { &mut self.finished_mut } else { &mut self.finished_ro };
            queue.push_back((now, key.to_string()));
        }
    }

    /// Forget `key` if `request_id` is its primary, still in flight (it was aborted or refused
    /// before producing a result). Returns whether it was.
    pub fn forget(&mut self, key: &str, request_id: &str) -> bool {
        let primary = self.is_primary(key, request_id);
        if primary {
            self.entries.remove(key);
        }
        primary
    }

    fn is_primary(&self, key: &str, request_id: &str) -> bool {
        matches!(self.entries.get(key), Some(Entry { state: KeyState::InFlight { primary, .. }, .. }) if primary == request_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::types::tool_adapter::ToolOperation;
    use serde_json::json;

    #[test]
    fn conflict_wait_replay_expire_and_capacity() {
        let t0 = Instant::now();
        let mut c = IdempotencyCache::new(2, Duration::from_secs(10));
        let fa = fingerprint(ToolOperation::FsWrite, &json!({"path": "a", "content": "x"}));
        let fa2 = fingerprint(ToolOperation::FsWrite, &json!({"content": "x", "path": "a"}));
        assert_eq!(fa, fa2, "key order does not matter");
        let fb = fingerprint(ToolOperation::FsWrite, &json!({"path": "a", "content": "y"}));
        assert_eq!(c.begin(t0, "k1", fa, "r1", 1, true), Lookup::New);
        assert_eq!(c.begin(t0, "k1", fb, "r2", 1, true), Lookup::Conflict);
        assert_eq!(c.begin(t0, "k1", fa, "r2", 1, true), Lookup::Wait("r1".into()));
        assert!(!c.finish(t0, "k1", "r2", &Ok(json!({"ok": 2})), true), "a waiter is not the primary");
        assert!(c.finish(t0, "k1", "r1", &Ok(json!({"ok": 1})), true));
        assert_eq!(c.begin(t0, "k1", fa, "r3", 1, true), Lookup::Replay(Ok(json!({"ok": 1}))));
        assert_eq!(c.begin(t0, "k2", fa, "r4", 1, true), Lookup::New);
        // full of one done + one in flight: the done one is evicted for a third key
        assert_eq!(c.begin(t0, "k3", fa, "r5", 1, true), Lookup::New);
        assert_eq!(c.begin(t0, "k1", fb, "r6", 1, true), Lookup::Full, "k2, k3 in flight: no room");
        c.finish(t0, "k2", "r4", &Ok(json!({})), true);
        let later = t0 + Duration::from_secs(11);
        assert_eq!(c.begin(later, "k2", fb, "r7", 1, true), Lookup::New, "expired after the TTL");
    }

    #[test]
    fn retryable_errors_are_not_kept() {
        let t0 = Instant::now();
        let mut c = IdempotencyCache::new(4, Duration::from_secs(10));
        let f = fingerprint(ToolOperation::FsEdit, &json!({}));
        c.begin(t0, "k", f, "r1", 1, true);
        c.finish(t0, "k", "r1", &Err(AdapterError::new(crate::contract::AdapterCode::IoError, "io")), true);
        assert_eq!(c.begin(t0, "k", f, "r2", 1, true), Lookup::New);
    }

    /// SPEC §4.5: every key is remembered with its fingerprint, read-only ones too; only the
    /// outcome of a read-only operation is not kept (it simply runs again).
    #[test]
    fn read_only_keys_keep_their_fingerprint_but_not_their_outcome() {
        let t0 = Instant::now();
        let mut c = IdempotencyCache::new(4, Duration::from_secs(10));
        let fa = fingerprint(ToolOperation::FsRead, &json!({"path": "a.txt"}));
        let fb = fingerprint(ToolOperation::FsStat, &json!({"path": "b.txt"}));
        assert_eq!(c.begin(t0, "k", fa, "r1", 1, false), Lookup::New);
        assert!(c.finish(t0, "k", "r1", &Ok(json!({"content": "x"})), false));
        assert_eq!(c.begin(t0, "k", fb, "r2", 1, false), Lookup::Conflict, "another payload under a used key");
        assert_eq!(c.begin(t0, "k", fa, "r3", 1, false), Lookup::Rerun, "the same read runs again");
    }

    /// Only the primary of a key can finish or forget it: a duplicate that runs again (or is
    /// aborted) leaves the primary's entry alone.
    #[test]
    fn only_the_primary_finishes_or_forgets_its_key() {
        let t0 = Instant::now();
        let mut c = IdempotencyCache::new(4, Duration::from_secs(10));
        let fa = fingerprint(ToolOperation::FsRead, &json!({"path": "a.txt"}));
        let fb = fingerprint(ToolOperation::FsRead, &json!({"path": "b.txt"}));
        assert_eq!(c.begin(t0, "k", fa, "r1", 1, false), Lookup::New);
        assert_eq!(c.begin(t0, "k", fa, "r2", 1, false), Lookup::Wait("r1".into()));
        assert!(!c.forget("k", "r2"), "r2 is not the primary");
        assert!(!c.finish(t0, "k", "r2", &Ok(json!({})), false));
        assert_eq!(c.begin(t0, "k", fb, "r3", 1, false), Lookup::Conflict, "r1's entry is still there");
        assert!(c.forget("k", "r1"));
        assert_eq!(c.begin(t0, "k", fb, "r4", 1, false), Lookup::New);
    }

    /// Issue 25, N7: a full cache evicts finished read-only keys first; a read-only request
    /// never evicts a mutating key within its TTL (it runs unrecorded), a mutating one may.
    #[test]
    fn read_only_keys_never_evict_a_mutating_key() {
        let t0 = Instant::now();
        let mut c = IdempotencyCache::new(3, Duration::from_secs(10));
        let w = fingerprint(ToolOperation::FsWrite, &json!({"path": "a", "content": "x"}));
        let r = fingerprint(ToolOperation::FsRead, &json!({"path": "a"}));
        assert_eq!(c.begin(t0, "w1", w, "r1", 1, true), Lookup::New);
        assert!(c.finish(t0, "w1", "r1", &Ok(json!({"n": 1})), true));
        for i in 0..10 {
            let (k, id) = (format!("read{i}"), format!("q{i}"));
            assert_eq!(c.begin(t0, &k, r, &id, 1, false), Lookup::New, "read {i}");
            assert!(c.finish(t0, &k, &id, &Ok(json!({})), false));
        }
        assert_eq!(c.begin(t0, "w1", w, "r2", 1, true), Lookup::Replay(Ok(json!({"n": 1}))), "the write survived");
        // Only mutating keys left: a read runs unrecorded, a write evicts the oldest write.
        let mut c = IdempotencyCache::new(2, Duration::from_secs(10));
        for k in ["w1", "w2"] {
            assert_eq!(c.begin(t0, k, w, k, 1, true), Lookup::New);
            assert!(c.finish(t0, k, k, &Ok(json!({})), true));
        }
        assert_eq!(c.begin(t0, "read", r, "q", 1, false), Lookup::Untracked);
        assert_eq!(c.len(), 2);
        assert_eq!(c.begin(t0, "w3", w, "w3", 1, true), Lookup::New);
        assert_eq!(c.begin(t0, "w1", w, "x", 1, true), Lookup::New, "w1, the oldest write, was evicted");
    }

    /// A key in flight in another session is not waited for: the caller learns it is in
    /// flight elsewhere, and once it finishes its outcome replays everywhere.
    #[test]
    fn a_key_in_flight_in_another_session_is_not_waited_for() {
        let t0 = Instant::now();
        let mut c = IdempotencyCache::new(4, Duration::from_secs(10));
        let w = fingerprint(ToolOperation::FsWrite, &json!({"path": "a", "content": "x"}));
        assert_eq!(c.begin(t0, "k", w, "r1", 1, true), Lookup::New);
        assert_eq!(c.begin(t0, "k", w, "r2", 2, true), Lookup::InFlightElsewhere);
        assert!(c.finish(t0, "k", "r1", &Ok(json!({"n": 1})), true));
        assert_eq!(c.begin(t0, "k", w, "r3", 2, true), Lookup::Replay(Ok(json!({"n": 1}))));
        c.reconfigure(1, Duration::from_secs(10));
        assert_eq!(c.len(), 1);
    }
}
