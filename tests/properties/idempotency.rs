//! The adapter's idempotency cache (SPEC §4.5, PC-4.5) against a map model.
//!
//! The model, from the spec and the cache's documented contract:
//!
//! - a key is remembered with its fingerprint while its first request is in flight, and for
//!   `idempotencyTtlMs` after its outcome (gone once `now - finished_at >= ttl`);
//! - same key + other fingerprint → `Conflict`; same fingerprint → `Wait(primary)` while in
//!   flight, `Replay(outcome)` once finished with its outcome kept, `Rerun` once finished
//!   without (a read-only operation: its key and fingerprint stay, it simply runs again); an
//!   unknown or expired key → `New`, recorded;
//! - at most `maxIdempotencyKeys` keys: a new key at capacity evicts one finished key, the
//!   one that finished earliest (the DECISION of conformance/SPEC.md PC-4.5), or, when
//!   every key is in flight, is refused with `Full` and recorded nowhere;
//! - only the primary (the request that recorded the key) finishes or forgets it: `finish`
//!   drops the key on a retryable error (`busy`, `io_error`: "only when nothing was
//!   changed", so a retry must run again) and otherwise keeps key and fingerprint, with the
//!   outcome when told to keep it; `forget` drops the key. Both answer whether the caller
//!   was the primary; any other request changes nothing.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use pi_conform::adapter::idempotency::{fingerprint, IdempotencyCache, Lookup};
use pi_conform::contract::types::tool_adapter::ToolOperation;
use pi_conform::contract::{AdapterCode, AdapterError};
use proptest::prelude::*;
use serde_json::{json, Value};

use crate::common::config;

#[derive(Clone, Debug)]
enum Outcome {
    Data(u8),
    Fail(AdapterCode),
}

impl Outcome {
    fn result(&self) -> Result<Value, AdapterError> {
        match self {
            Outcome::Data(n) => Ok(json!({ "n": n })),
            Outcome::Fail(code) => Err(AdapterError::new(*code, "failed")),
        }
    }
    /// SPEC §5.3: `busy` and `io_error` are the retryable codes.
    fn retryable(&self) -> bool {
        matches!(self, Outcome::Fail(AdapterCode::Busy | AdapterCode::IoError))
    }
}

/// How far the clock moves, relative to the TTL so that its edges come up.
#[derive(Clone, Copy, Debug)]
enum Step {
    Zero,
    One,
    TtlMinusOne,
    Ttl,
    TtlPlusOne,
    Half,
    Random(u32),
}

#[derive(Clone, Debug)]
enum Op {
    Begin {
        key: u8,
        fp: u8,
    },
    /// `by_primary`: the key's primary finishes (else another request claims to).
    Finish {
        key: u8,
        outcome: Outcome,
        keep: bool,
        by_primary: bool,
    },
    Forget {
        key: u8,
        by_primary: bool,
    },
    Advance(Step),
}

fn op() -> impl Strategy<Value = Op> {
    let code = prop::sample::select(vec![
        AdapterCode::NotFound,
        AdapterCode::EditAmbiguous,
        AdapterCode::DigestMismatch,
        AdapterCode::Busy,
        AdapterCode::IoError,
    ]);
    let outcome = prop_oneof![3 => (0u8..4).prop_map(Outcome::Data), 2 => code.prop_map(Outcome::Fail)];
    let step = prop_oneof![
        Just(Step::Zero),
        Just(Step::One),
        Just(Step::TtlMinusOne),
        Just(Step::Ttl),
        Just(Step::TtlPlusOne),
        Just(Step::Half),
        (0u32..5000).prop_map(Step::Random),
    ];
    // Mostly one fingerprint per key, so that waits and replays are common.
    let fp = prop_oneof![3 => Just(0u8), 1 => 1u8..3];
    let finish = (0u8..5, outcome, prop::bool::weighted(0.6), prop::bool::weighted(0.85));
    prop_oneof![
        6 => (0u8..5, fp).prop_map(|(key, fp)| Op::Begin { key, fp }),
        6 => finish.prop_map(|(key, outcome, keep, by_primary)| Op::Finish { key, outcome, keep, by_primary }),
        1 => (0u8..5, prop::bool::weighted(0.7)).prop_map(|(key, by_primary)| Op::Forget { key, by_primary }),
        2 => step.prop_map(Op::Advance),
    ]
}

#[derive(Clone, Debug)]
enum State {
    InFlight(String),
    Done(Option<Result<Value, AdapterError>>, u64),
}

#[derive(Clone, Debug)]
struct Entry {
    fp: u8,
    state: State,
    /// Order of the `finish` that completed it (0 while in flight).
    finished: u64,
}

/// The model: keys → entries, time in ms.
struct Model {
    capacity: usize,
    ttl: u64,
    entries: HashMap<u8, Entry>,
    finishes: u64,
}

/// Whether the entry is still remembered at `now`: in flight, or finished less than `ttl` ago.
fn alive(e: &Entry, now: u64, ttl: u64) -> bool {
    match e.state {
        State::InFlight(_) => true,
        State::Done(_, at) => now - at < ttl,
    }
}

impl Model {
    fn begin(&mut self, now: u64, key: u8, fp: u8, request: &str) -> Lookup {
        let ttl = self.ttl;
        self.entries.retain(|_, e| alive(e, now, ttl));
        if let Some(e) = self.entries.get(&key) {
            return match &e.state {
                _ if e.fp != fp => Lookup::Conflict,
                State::InFlight(primary) => Lookup::Wait(primary.clone()),
                State::Done(Some(outcome), _) => Lookup::Replay(outcome.clone()),
                State::Done(None, _) => Lookup::Rerun,
            };
        }
        if self.entries.len() >= self.capacity {
            let victim = self
                .entries
                .iter()
                .filter(|(_, e)| matches!(e.state, State::Done(..)))
                .min_by_key(|(_, e)| e.finished)
                .map(|(k, _)| *k);
            match victim {
                Some(k) => self.entries.remove(&k),
                None => return Lookup::Full,
            };
        }
        self.entries.insert(key, Entry { fp, state: State::InFlight(request.to_string()), finished: 0 });
        Lookup::New
    }

    fn primary(&self, key: u8) -> Option<String> {
        match self.entries.get(&key) {
            Some(Entry { state: State::InFlight(p), .. }) => Some(p.clone()),
            _ => None,
        }
    }

    fn finish(&mut self, now: u64, key: u8, request: &str, outcome: &Outcome, keep: bool) -> bool {
        if self.primary(key).as_deref() != Some(request) {
            return false;
        }
        if outcome.retryable() {
            self.entries.remove(&key);
        } else if let Some(e) = self.entries.get_mut(&key) {
            self.finishes += 1;
            e.state = State::Done(keep.then(|| outcome.result()), now);
            e.finished = self.finishes;
        }
        true
    }

    fn forget(&mut self, key: u8, request: &str) -> bool {
        let primary = self.primary(key).as_deref() == Some(request);
        if primary {
            self.entries.remove(&key);
        }
        primary
    }
}

fn key_name(k: u8) -> String {
    format!("turn-{k}-edit")
}

fn fp_of(fp: u8) -> [u8; 32] {
    // Opaque to the cache: distinct payloads of one operation.
    fingerprint(ToolOperation::FsEdit, &json!({ "path": "f.txt", "edits": [{ "oldText": "a", "newText": fp }] }))
}

proptest! {
    #![proptest_config(config(1024))]

    /// Every lookup of a random sequence of begin/finish/forget/clock steps is the model's.
    #[test]
    fn cache_matches_the_model(
        capacity in 1usize..=4, ttl in 1000u64..=5000, ops in prop::collection::vec(op(), 1..80),
    ) {
        let t0 = Instant::now();
        let mut cache = IdempotencyCache::new(capacity, Duration::from_millis(ttl));
        let mut model = Model { capacity, ttl, entries: HashMap::new(), finishes: 0 };
        let mut now = 0u64;
        for (i, op) in ops.iter().enumerate() {
            let at = t0 + Duration::from_millis(now);
            match op {
                Op::Begin { key, fp } => {
                    let request = format!("r{i}");
                    let want = model.begin(now, *key, *fp, &request);
                    // One session, every key mutating: the eviction order is the finish order (the model's).
                    let got = cache.begin(at, &key_name(*key), fp_of(*fp), &request, 1, true);
                    prop_assert_eq!(got, want, "step {} ({:?}) at {} ms", i, op, now);
                }
                Op::Finish { key, outcome, keep, by_primary } => {
                    let request = if *by_primary { model.primary(*key).unwrap_or_default() } else { format!("x{i}") };
                    let want = model.finish(now, *key, &request, outcome, *keep);
                    let got = cache.finish(at, &key_name(*key), &request, &outcome.result(), *keep);
                    prop_assert_eq!(got, want, "step {} ({:?}) at {} ms", i, op, now);
                }
                Op::Forget { key, by_primary } => {
                    let request = if *by_primary { model.primary(*key).unwrap_or_default() } else { format!("x{i}") };
                    let want = model.forget(*key, &request);
                    prop_assert_eq!(cache.forget(&key_name(*key), &request), want, "step {} ({:?})", i, op);
                }
                Op::Advance(step) => {
                    now += match step {
                        Step::Zero => 0,
                        Step::One => 1,
                        Step::TtlMinusOne => ttl - 1,
                        Step::Ttl => ttl,
                        Step::TtlPlusOne => ttl + 1,
                        Step::Half => ttl / 2,
                        Step::Random(ms) => u64::from(*ms),
                    };
                }
            }
            let live = model.entries.values().filter(|e| alive(e, now, ttl)).count();
            prop_assert!(cache.len() <= capacity, "{} keys retained, capacity {}", cache.len(), capacity);
            prop_assert!(cache.len() >= live, "cache holds {} keys, {} are live", cache.len(), live);
        }
    }

    /// The fingerprint ignores object key order and nothing else: equal payloads (JSON object
    /// equality) fingerprint equally, different ones or another operation differently.
    #[test]
    fn fingerprint_is_canonical(
        a in payload(), b in payload(), op_a in 0usize..6, op_b in 0usize..6,
    ) {
        let ops = [
            ToolOperation::FsList,
            ToolOperation::FsStat,
            ToolOperation::FsRead,
            ToolOperation::FsSearch,
            ToolOperation::FsWrite,
            ToolOperation::FsEdit,
        ];
        prop_assert_eq!(fingerprint(ops[op_a], &a), fingerprint(ops[op_a], &reversed(&a)));
        let same = a == b && op_a == op_b;
        prop_assert_eq!(fingerprint(ops[op_a], &a) == fingerprint(ops[op_b], &b), same, "{} vs {}", a, b);
    }
}

/// Small payload-like objects with colliding keys and values, so equal pairs come up.
fn payload() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        (0i64..3).prop_map(Value::from),
        Just(Value::from(1.5)),
        prop::sample::select(vec!["", "a", "a\"", "é"]).prop_map(Value::from),
    ];
    let key = prop::sample::select(vec!["path", "content", "edits", "a", "b"]);
    leaf.prop_recursive(3, 16, 3, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
            prop::collection::vec((key.clone(), inner), 0..4)
                .prop_map(|kv| Value::Object(kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect())),
        ]
    })
}

/// The same value with every object's keys in reverse order.
fn reversed(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(m.iter().rev().map(|(k, v)| (k.clone(), reversed(v))).collect()),
        Value::Array(a) => Value::Array(a.iter().map(reversed).collect()),
        other => other.clone(),
    }
}
