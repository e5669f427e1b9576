//! The wake journal's rules as a sans-I/O core: the fingerprint a wake's key is bound to, what
//! a wake becomes given its key's record (start, join the running one, replay the settled
//! outcome, or conflict), and the states a record goes through (`queued` → `accepted` →
//! `completed` | `failed`; SPEC §6 for what a restart makes of them).
//!
//! `daemon::store` reads and writes the records and `daemon::host` waits for them to be
//! durable; this module only decides. It does no I/O, reads no clock and draws no randomness.

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::core::DErr;
use super::record::data;
use super::store::WakeRecord;
use crate::contract::fingerprint::fingerprint_hex;
use crate::contract::types::protocol_v2 as v2;
use crate::contract::{AdapterCode, DaemonCode};

/// What a wake under a key becomes (see [`admit_wake`]).
#[derive(Debug)]
pub enum WakeStep {
    /// The key was used with another payload: `idempotency_conflict`.
    Conflict(DErr),
    /// The key's turn is running: wait for it (or answer a ticket).
    Join,
    /// The key's turn is settled: its journaled outcome, never run again.
    Replay(Result<v2::TurnResult, DErr>),
    /// A new key: start a turn, journaling it first.
    Start,
}

/// What a wake with fingerprint `fp` becomes, given its key's record (if any) and whether a
/// turn of that key is running now. The payload is compared first: a running or settled key
/// used with another payload is a conflict.
pub fn admit_wake(fp: &WakeFingerprint, record: Option<&WakeRecord>, running: bool) -> WakeStep {
    if record.is_some_and(|r| !fp.matches(&r.fingerprint)) {
        return WakeStep::Conflict(DErr::new(
            AdapterCode::IdempotencyConflict.as_str(),
            "this idempotency key was used with another payload",
        ));
    }
    match record {
        _ if running => WakeStep::Join,
        Some(r) => WakeStep::Replay(settled(r)),
        None => WakeStep::Start,
    }
}

/// The outcome a record replays: the result of a completed wake, the error body of a failed
/// one, and `request_indeterminate` for any other state (its outcome is unknown). The stored
/// result and error body are decoded into the generated `TurnResult` and `ErrorBody`; one that
/// does not decode is replayed as `internal_error` (never passed on unread).
fn settled(r: &WakeRecord) -> Result<v2::TurnResult, DErr> {
    match r.state.as_str() {
        "completed" => decode(r.result.as_ref()).ok_or_else(|| unreadable("result")),
        "failed" => Err(decode::<v2::ErrorBody>(r.error.as_ref()).map_or_else(|| unreadable("error"), error_of)),
        _ => Err(DErr::of(DaemonCode::RequestIndeterminate, "this wake's outcome is unknown; it is never replayed")),
    }
}

/// A journaled value as the generated type it was written from.
fn decode<T: serde::de::DeserializeOwned>(v: Option<&Value>) -> Option<T> {
    v.and_then(|v| serde_json::from_value(v.clone()).ok())
}

/// A journaled outcome that does not decode: `internal_error`, not retryable.
fn unreadable(what: &str) -> DErr {
    let mut e = DErr::of(DaemonCode::InternalError, &format!("the journaled {what} of this wake is unreadable"));
    e.retryable = false;
    e
}

/// A journaled error body back as an error.
fn error_of(b: v2::ErrorBody) -> DErr {
    let mut e = DErr::new(&b.code, &b.message);
    e.retryable = b.retryable;
    e.details = b.details;
    e
}

/// The first record of a new wake: `queued`, bound to its payload's fingerprint.
pub fn queued(session_id: &str, generation: u64, key: &str, fp: &WakeFingerprint) -> WakeRecord {
    WakeRecord {
        session_id: session_id.to_string(),
        generation,
        idempotency_key: key.to_string(),
        fingerprint: fp.hex().to_string(),
        state: "queued".into(),
        result: None,
        error: None,
    }
}

/// The turn was admitted (the session counts the key): `accepted`.
pub fn accept(r: &mut WakeRecord) {
    r.state = "accepted".into();
}

/// The turn ended: `completed` with its result, or `failed` with its error body.
pub fn settle(r: &mut WakeRecord, outcome: &Result<v2::TurnResult, DErr>) {
    match outcome {
        Ok(v) => {
            r.state = "completed".into();
            r.result = Some(data(v));
        }
        Err(e) => {
            r.state = "failed".into();
            r.error = Some(e.body());
        }
    }
}

/// The answer to a wake that does not wait for its terminal result.
pub fn ticket(session_id: &str, generation: u64, key: &str) -> Value {
    data(&v2::WakeTicketData {
        ticket: v2::WakeTicket {
            generation,
            idempotency_key: key.into(),
            session_id: session_id.into(),
            state: v2::WakeTicketState::Accepted,
        },
    })
}

/// The fingerprint of a wake's payload, as a journal record stores it and compares it.
///
/// The current form is `contract::fingerprint::fingerprint_hex` of `{"prompt", "source"}`
/// (`source` is `null` when absent): the canonical JSON every fingerprint of this project uses.
/// Records written before the switch hold the legacy form, whose canonical bytes put a comma
/// after every member (`{"prompt":…,"source":…,}`); a stored fingerprint matches when it is
/// either form (DECISION in SPEC PC-6, "wake fingerprints"), so a journal written by an older
/// daemon keeps its idempotency across the upgrade. New records always get the current form.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WakeFingerprint {
    current: String,
    legacy: String,
}

impl WakeFingerprint {
    /// The fingerprint of a wake with `prompt` and, when given, `source`.
    pub fn of(prompt: &str, source: Option<&str>) -> Self {
        let value = serde_json::to_value(FingerprintInput { prompt, source }).unwrap_or(Value::Null);
        WakeFingerprint { current: fingerprint_hex(&value), legacy: legacy_hex(prompt, source) }
    }

    /// What a new record stores: the current form (64 lowercase hex digits).
    pub fn hex(&self) -> &str {
        &self.current
    }

    /// Whether a stored fingerprint names this payload, in the current or the legacy form.
    pub fn matches(&self, stored: &str) -> bool {
        stored == self.current || stored == self.legacy
    }
}

/// What a wake's fingerprint covers: `{prompt, source}` (`source` is `null` when absent).
#[derive(serde::Serialize)]
struct FingerprintInput<'a> {
    prompt: &'a str,
    source: Option<&'a str>,
}

/// The legacy form of a wake fingerprint (daemons before the switch to
/// `contract::fingerprint`): SHA-256 of `{"prompt":P,"source":S,}`, the members in key order,
/// each followed by a comma, the values as `serde_json` writes them. Only the wake payload's
/// two scalar members ever went through it, so this fixed shape is all of it that is left.
fn legacy_hex(prompt: &str, source: Option<&str>) -> String {
    let mut b = Vec::with_capacity(prompt.len() + 32);
    b.extend_from_slice(b"{\"prompt\":");
    // Writing a string into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut b, prompt);
    b.extend_from_slice(b",\"source\":");
    let _ = serde_json::to_writer(&mut b, &source);
    b.extend_from_slice(b",}");
    hex::encode(Sha256::digest(&b))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_wake_starts_joins_replays_or_conflicts() {
        let fp = WakeFingerprint::of("p", None);
        let mut r = queued("s", 2, "k", &fp);
        assert_eq!((r.state.as_str(), r.fingerprint.as_str()), ("queued", fp.hex()));
        assert!(matches!(admit_wake(&fp, None, false), WakeStep::Start));
        assert!(matches!(admit_wake(&fp, None, true), WakeStep::Join));
        assert!(matches!(admit_wake(&fp, Some(&r), true), WakeStep::Join));
        let other = WakeFingerprint::of("q", None);
        for running in [false, true] {
            let WakeStep::Conflict(e) = admit_wake(&other, Some(&r), running) else { panic!("conflict") };
            assert_eq!((e.code.as_str(), e.retryable), ("idempotency_conflict", false));
        }
        // Queued or accepted but not running (a restart settles them; until then): unknown.
        let WakeStep::Replay(Err(e)) = admit_wake(&fp, Some(&r), false) else { panic!("replay") };
        assert_eq!(e.code, "request_indeterminate");
        accept(&mut r);
        assert_eq!(r.state, "accepted");
        let result = v2::TurnResult { text: "t".into(), tool_calls: vec![] };
        settle(&mut r, &Ok(result));
        assert_eq!((r.state.as_str(), r.result.clone()), ("completed", Some(json!({"text": "t", "toolCalls": []}))));
        let WakeStep::Replay(Ok(replayed)) = admit_wake(&fp, Some(&r), false) else { panic!("replay") };
        assert_eq!(data(&replayed), json!({"text": "t", "toolCalls": []}));
        // A stored result that is not a turn result is never passed on unread.
        r.result = Some(json!({"text": 1}));
        let WakeStep::Replay(Err(e)) = admit_wake(&fp, Some(&r), false) else { panic!("replay") };
        assert_eq!((e.code.as_str(), e.retryable), ("internal_error", false));
        let mut f = queued("s", 2, "k2", &fp);
        let err = DErr::of(DaemonCode::Aborted, "the turn was aborted")
            .with_details(&v2::FieldDetails { field: "why".into() });
        settle(&mut f, &Err(err.clone()));
        assert_eq!(f.state, "failed");
        let WakeStep::Replay(Err(back)) = admit_wake(&fp, Some(&f), false) else { panic!("replay") };
        assert_eq!(back, err, "the same error body comes back");
        f.error = Some(json!("garbled"));
        let WakeStep::Replay(Err(e)) = admit_wake(&fp, Some(&f), false) else { panic!("replay") };
        assert_eq!((e.code.as_str(), e.retryable), ("internal_error", false));
        assert_eq!(
            ticket("s", 2, "k"),
            json!({"ticket": {"sessionId": "s", "generation": 2, "idempotencyKey": "k", "state": "accepted"}})
        );
    }

    fn sha(bytes: &[u8]) -> String {
        hex::encode(Sha256::digest(bytes))
    }

    #[test]
    fn the_current_form_is_the_contracts_canonical_json() {
        let f = WakeFingerprint::of("hello", None);
        assert_eq!(f.hex(), sha(br#"{"prompt":"hello","source":null}"#));
        let f = WakeFingerprint::of("a \"q\"\n", Some("cron"));
        assert_eq!(f.hex(), sha(b"{\"prompt\":\"a \\\"q\\\"\\n\",\"source\":\"cron\"}"));
    }

    #[test]
    fn a_legacy_record_still_matches_and_another_payload_never_does() {
        let f = WakeFingerprint::of("hello", None);
        // The bytes the old canonicalizer hashed, written out by hand.
        let legacy = sha(br#"{"prompt":"hello","source":null,}"#);
        assert_ne!(legacy, f.hex(), "the two forms differ");
        assert!(f.matches(f.hex()));
        assert!(f.matches(&legacy));
        let other = WakeFingerprint::of("hello", Some("x"));
        assert!(!other.matches(&legacy));
        assert!(!other.matches(f.hex()));
        assert!(!WakeFingerprint::of("hello!", None).matches(&legacy));
        assert!(!f.matches(""));
        assert_eq!(
            WakeFingerprint::of("p", Some("s")).legacy,
            sha(br#"{"prompt":"p","source":"s",}"#),
            "source is a string member when given"
        );
    }
}
