//! The records the reference daemon writes, built from the generated types of
//! `protocol-v2.schema.json` (SPEC §2.2–§2.4): responses (`ResponseSuccess`,
//! `ResponseFailure`), error bodies (`ErrorBody`), events (`Event`), handshake data
//! (`DaemonHandshakeData`) and the host snapshot (`DaemonHostSnapshot`, `DaemonHostRecovery`,
//! `QuarantinedSession`).
//!
//! The schema leaves a response's and an event's `data` and an error's `details` open, so the
//! shapes this daemon sends there are `$defs` of their own that no validating schema refers
//! to (`OpenData`, `WakeResultData`, `SessionResource`, `TurnResult`, the event data, the
//! details, `DaemonHostSnapshot`, …; `tests/agreement.rs` proves they are on no validation
//! path and open): every `data` is one of them serialized ([`data`]), every `details` too
//! ([`DErr::with_details`]). An event's `data` is always written, also when empty (the
//! generated `Event` leaves an empty one out), by [`Open`], which flattens a generated record
//! with the members added to it. Pure functions: no I/O, no clock.

use std::collections::BTreeMap;
use std::num::NonZeroU64;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::contract::command::{OPERATIONS, SUPPORTED_VERSIONS};
use crate::contract::types::protocol_v2 as v2;
use crate::contract::{Code, DaemonCode};

/// A dispatch error: the protocol's error body.
#[derive(Clone, Debug, PartialEq)]
pub struct DErr {
    /// Code.
    pub code: String,
    /// Message (content-free).
    pub message: String,
    /// Retryable.
    pub retryable: bool,
    /// Details.
    pub details: Map<String, Value>,
}

impl DErr {
    /// An error with a code that is not known here (an adapter's own error code, a journaled
    /// body): not retryable unless set.
    pub fn new(code: &str, message: &str) -> Self {
        DErr { code: code.into(), message: message.into(), retryable: false, details: Map::new() }
    }

    /// An error of the daemon catalogue, with its default `retryable`.
    pub fn of(code: DaemonCode, message: &str) -> Self {
        DErr { retryable: code.default_retryable(), ..Self::new(code.as_str(), message) }
    }

    /// An error with a validation code of the contract (never retryable).
    pub fn contract(code: Code, message: &str) -> Self {
        Self::new(code.as_str(), message)
    }
    /// Add the members of typed details (one of the generated `*Details` types).
    pub fn with_details<T: Serialize>(mut self, details: &T) -> Self {
        self.details.extend(to_map(details));
        self
    }
    /// The body: the generated `ErrorBody`, as a value (journal records keep it so).
    pub fn body(&self) -> Value {
        serde_json::to_value(error_body(self)).unwrap_or(Value::Null)
    }
}

/// The `data` of an answer or an event: a generated data type serialized into its object.
pub fn data<T: Serialize>(t: &T) -> Value {
    Value::Object(to_map(t))
}

/// A generated record and the members the schema leaves open that this daemon adds to it.
#[derive(Serialize)]
pub struct Open<T, X> {
    /// The generated record.
    #[serde(flatten)]
    pub base: T,
    /// What this daemon adds (a struct or map with other member names).
    #[serde(flatten)]
    pub extra: X,
}

/// A typed string of the generated types, from a string the contract already judged (ids of
/// 1–128 units, a non-empty host id, a `MAJOR.MINOR` version); `fallback` keeps the record
/// schema-valid should a caller ever pass one that is not.
fn typed<T: for<'a> TryFrom<&'a str>>(s: &str, fallback: &'static str) -> T {
    match T::try_from(s) {
        Ok(t) => t,
        Err(_) => match T::try_from(fallback) {
            Ok(t) => t,
            Err(_) => unreachable!("the fallback {fallback:?} is valid"),
        },
    }
}

/// One compact JSON line (LF included) of a record.
pub fn line<T: Serialize + ?Sized>(record: &T) -> Vec<u8> {
    let mut out = serde_json::to_vec(record).unwrap_or_else(|_| b"null".to_vec());
    out.push(b'\n');
    out
}

/// The protocol's error body of `e`.
pub fn error_body(e: &DErr) -> v2::ErrorBody {
    let (code, message) = match v2::ErrorBodyCode::try_from(e.code.as_str()) {
        Ok(c) => (c, e.message.clone()),
        // A code outside `^[a-z][a-z0-9_]*$` (never one of ours; an adapter's is judged first).
        Err(_) => (
            typed(DaemonCode::InternalError.as_str(), DaemonCode::InternalError.as_str()),
            "an error had an invalid code".into(),
        ),
    };
    v2::ErrorBody { code, details: e.details.clone(), message, retryable: e.retryable }
}

/// A response line (SPEC §2.2): `data` when ok, the error body otherwise. A success whose
/// data is not an object (never one of ours) is answered `internal_error`.
pub fn response_line(
    version: &str,
    request_id: &str,
    host_id: &str,
    session_id: Option<&str>,
    r: Result<Value, DErr>,
) -> Vec<u8> {
    let protocol_version: v2::AnyVersion = typed(version, "1.0");
    let r = match r {
        Ok(Value::Object(data)) => Ok(data),
        Ok(_) => Err(DErr::of(DaemonCode::InternalError, "the response data is not an object")),
        Err(e) => Err(e),
    };
    match r {
        Ok(data) => line(&v2::ResponseSuccess {
            data,
            host_instance_id: typed(host_id, "host"),
            kind: v2::KindResponse::Response,
            ok: v2::True(true),
            protocol_version,
            request_id: typed(request_id, "invalid"),
            sequence: None,
            session_id: session_id.and_then(|s| v2::ResponseSuccessSessionId::try_from(s).ok()),
        }),
        Err(e) => line(&v2::ResponseFailure {
            error: error_body(&e),
            host_instance_id: typed(host_id, "host"),
            kind: v2::KindResponse::Response,
            ok: v2::False(false),
            protocol_version,
            request_id: typed(request_id, "invalid"),
            sequence: None,
            session_id: session_id.and_then(|s| v2::ResponseFailureSessionId::try_from(s).ok()),
        }),
    }
}

/// An event's `data`, always written (the generated `Event` leaves an empty one out).
#[derive(Serialize)]
struct EventData {
    data: Map<String, Value>,
}

/// What an event line is about: the session generation, its open version and this host.
pub struct EventOf<'a> {
    /// The session's open version.
    pub version: &'a str,
    /// This host's id.
    pub host_id: &'a str,
    /// The session id.
    pub session_id: &'a str,
    /// The generation.
    pub generation: u64,
    /// The event's sequence (from 1).
    pub sequence: NonZeroU64,
}

/// An event line (SPEC §2.3). `data` that is not an object is sent as `{}` (never one of ours).
pub fn event_line(of: &EventOf<'_>, event: &str, request_id: Option<&str>, data: Value) -> Vec<u8> {
    let data = match data {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    let base = v2::Event {
        data: Map::new(),
        event: typed(event, "event"),
        generation: v2::EnvGeneration(i64::try_from(of.generation).unwrap_or(i64::MAX)),
        host_instance_id: typed(of.host_id, "host"),
        kind: v2::KindEvent::Event,
        protocol_version: typed(of.version, "1.0"),
        request_id: request_id.and_then(|r| v2::EventRequestId::try_from(r).ok()),
        sequence: of.sequence,
        session_id: typed(of.session_id, "session"),
    };
    line(&Open { base, extra: EventData { data } })
}

/// The inputs of a host snapshot (SPEC §2.4).
pub struct Snapshot<'a> {
    /// This host's id.
    pub host_id: &'a str,
    /// Draining.
    pub draining: bool,
    /// Turns running.
    pub active_turns: u64,
    /// The start time, RFC 3339 UTC.
    pub started_at: &'a str,
    /// Milliseconds since the start.
    pub uptime_ms: u64,
    /// Wakes that failed at recovery.
    pub failed_wakes: u64,
    /// Wakes whose outcome is unknown.
    pub indeterminate_wakes: u64,
    /// Wakes queued behind a running turn.
    pub queued_turns: u64,
    /// The quarantined generations (session id, generation).
    pub quarantined: Vec<(&'a str, u64)>,
    /// Active and dormant sessions.
    pub sessions: v2::HostSessionCounts,
    /// The host's counters.
    pub counters: &'a BTreeMap<&'static str, u64>,
}

fn int(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl Snapshot<'_> {
    /// The snapshot as sent: the generated `DaemonHostSnapshot` (the schema's `HostSnapshot`,
    /// its `recovery` with `failedWakes`, `indeterminateWakes` and an always-present
    /// `failureCodes`, and the host's `sessions` and `counters`).
    pub fn typed(&self) -> v2::DaemonHostSnapshot {
        let quarantined_sessions = self
            .quarantined
            .iter()
            .map(|(sid, generation)| v2::QuarantinedSession {
                code: v2::QuarantinedSessionCode::ToolAdapterReprovisionRequired,
                generation: v2::EnvGeneration(int(*generation)),
                retryable: v2::True(DaemonCode::ToolAdapterReprovisionRequired.default_retryable()),
                session_id: typed(sid, "session"),
                state: v2::QuarantinedSessionState::ReprovisionRequired,
            })
            .collect();
        let degraded = self.indeterminate_wakes > 0;
        // `failureCodes`: an error code to a count (`request_indeterminate`, when any).
        let mut failure_codes = BTreeMap::new();
        if degraded {
            failure_codes.insert(DaemonCode::RequestIndeterminate.as_str().to_string(), self.indeterminate_wakes);
        }
        v2::DaemonHostSnapshot {
            active_turns: self.active_turns,
            counters: self.counters.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            draining: self.draining,
            durable: true,
            host_instance_id: self.host_id.to_string(),
            queued_turns: self.queued_turns,
            // Ready only when recovery settled with no indeterminate work.
            ready: !degraded,
            recovery: v2::DaemonHostRecovery {
                failed_wakes: self.failed_wakes,
                failure_codes,
                indeterminate_wakes: self.indeterminate_wakes,
                phase: if degraded {
                    v2::DaemonHostRecoveryPhase::Degraded
                } else {
                    v2::DaemonHostRecoveryPhase::Ready
                },
                quarantined_sessions,
            },
            sessions: self.sessions.clone(),
            started_at: self.started_at.to_string(),
            uptime_ms: self.uptime_ms,
        }
    }

    /// The snapshot as sent, as a value (host status's `data`).
    pub fn to_value(&self) -> Value {
        data(&self.typed())
    }
}

/// A record's members (a struct or map serializes to an object).
fn to_map<T: Serialize + ?Sized>(t: &T) -> Map<String, Value> {
    match serde_json::to_value(t) {
        Ok(Value::Object(m)) => m,
        _ => Map::new(),
    }
}

/// The handshake data (SPEC §2.4): the generated `DaemonHandshakeData` with the host snapshot
/// as [`Snapshot::typed`] gives it. `v2_request` adds the host-adapter capabilities;
/// `protocol_text_versions` sends `supportedVersions` beside Pi Daemon 0.3.3's
/// `supportedProtocolVersions`.
pub fn handshake(
    v2_request: bool,
    limits: v2::DaemonLimits,
    host: &Snapshot<'_>,
    protocol_text_versions: bool,
) -> Value {
    let versions = || SUPPORTED_VERSIONS.iter().map(|v| v.to_string()).collect::<Vec<_>>();
    let capabilities = v2::DaemonCapabilities {
        configured_open: v2_request.then_some(true),
        durable: true,
        host_tool_adapter: v2_request.then_some(true),
        host_tool_adapter_queue_telemetry: v2_request.then_some(true),
        host_tool_adapter_recommended_queue_limits: v2_request
            .then_some(v2::QueueLimits { max_concurrent_requests: 4, max_queued_requests: 16 }),
        host_tool_operation_count: v2_request.then_some(crate::contract::operation::OPERATIONS.len() as u64),
        operations: OPERATIONS.iter().map(|o| o.to_string()).collect(),
        session_dir: v2_request.then_some(true),
        transport: "unix-ndjson".into(),
    };
    data(&v2::DaemonHandshakeData {
        capabilities,
        host: host.typed(),
        limits,
        // The handshake response's own data always says 1.0 (SPEC §2.4).
        protocol_version: "1.0".into(),
        supported_protocol_versions: versions(),
        supported_versions: if protocol_text_versions { versions() } else { Vec::new() },
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::contract::{validate_event, validate_handshake_data, validate_response};

    fn parse(line: &[u8]) -> Value {
        assert_eq!(line.last(), Some(&b'\n'));
        crate::wire::decode_strict(&line[..line.len() - 1]).expect("strict JSON, no duplicate member")
    }

    #[test]
    fn responses_are_the_generated_records_and_pass_the_schema() {
        let ok = parse(&response_line("2.7", "r1", "host-a", Some("s"), Ok(json!({"x": 1}))));
        validate_response(&ok).unwrap();
        assert!(serde_json::from_value::<v2::ResponseSuccess>(ok.clone()).is_ok());
        assert_eq!(
            ok,
            json!({"data": {"x": 1}, "hostInstanceId": "host-a", "kind": "response", "ok": true,
                "protocolVersion": "2.7", "requestId": "r1", "sessionId": "s"})
        );
        let e = DErr::of(DaemonCode::StaleGeneration, "newer")
            .with_details(&v2::GenerationDetails { current_generation: 3, received_generation: 1 });
        let bad = parse(&response_line("1.0", "r2", "host-a", None, Err(e)));
        validate_response(&bad).unwrap();
        assert!(serde_json::from_value::<v2::ResponseFailure>(bad.clone()).is_ok());
        assert_eq!(
            bad["error"],
            json!({"code": "stale_generation", "details": {"currentGeneration": 3, "receivedGeneration": 1}, "message": "newer", "retryable": false})
        );
        assert!(bad.get("sessionId").is_none() && bad.get("data").is_none());
        // Data that is not an object never goes out as a success.
        let odd = parse(&response_line("2.0", "r3", "host-a", None, Ok(json!([1]))));
        assert_eq!(odd["error"]["code"], "internal_error");
        // An error code outside the pattern is not passed on.
        let weird = parse(&response_line("2.0", "r4", "host-a", None, Err(DErr::new("Bad-Code", "m"))));
        validate_response(&weird).unwrap();
        assert_eq!(weird["error"]["code"], "internal_error");
    }

    #[test]
    fn events_always_carry_data_and_pass_the_schema() {
        let of = EventOf { version: "2.3", host_id: "h", session_id: "s", generation: 4, sequence: NonZeroU64::MIN };
        let e = parse(&event_line(&of, "sessionIdle", None, json!({})));
        validate_event(&e).unwrap();
        assert!(serde_json::from_value::<v2::Event>(e.clone()).is_ok());
        assert_eq!(e["data"], json!({}), "an empty data object is still written");
        assert!(e.get("requestId").is_none());
        let e = parse(&event_line(&of, "opened", Some("o1"), json!({"created": true})));
        assert_eq!((e["requestId"].clone(), e["data"].clone()), (json!("o1"), json!({"created": true})));
        assert_eq!(
            (e["sequence"].clone(), e["generation"].clone(), e["protocolVersion"].clone()),
            (json!(1), json!(4), json!("2.3"))
        );
    }

    fn snap<'a>(counters: &'a BTreeMap<&'static str, u64>, indeterminate: u64) -> Snapshot<'a> {
        Snapshot {
            host_id: "host-a",
            draining: false,
            active_turns: 1,
            started_at: "2026-12-03T00:00:00Z",
            uptime_ms: 5,
            failed_wakes: 2,
            indeterminate_wakes: indeterminate,
            queued_turns: 0,
            quarantined: vec![("q", 3)],
            sessions: v2::HostSessionCounts { resident: 1, dormant: 2 },
            counters,
        }
    }

    #[test]
    fn the_snapshot_is_the_generated_one_plus_what_the_schema_leaves_open() {
        let counters = BTreeMap::from([("commands", 7)]);
        let v = snap(&counters, 0).to_value();
        assert!(serde_json::from_value::<v2::HostSnapshot>(v.clone()).is_ok());
        assert!(serde_json::from_value::<v2::DaemonHostSnapshot>(v.clone()).is_ok());
        assert_eq!(v["ready"], true);
        assert_eq!(v["recovery"]["failureCodes"], json!({}), "written when empty, as Pi Daemon 0.3.3");
        assert_eq!(v["recovery"]["phase"], "ready");
        assert_eq!(
            (v["recovery"]["failedWakes"].clone(), v["recovery"]["indeterminateWakes"].clone()),
            (json!(2), json!(0))
        );
        assert_eq!(
            v["recovery"]["quarantinedSessions"],
            json!([{"code": "tool_adapter_reprovision_required", "generation": 3, "retryable": true, "sessionId": "q", "state": "reprovision_required"}])
        );
        assert_eq!(v["sessions"], json!({"resident": 1, "dormant": 2}));
        assert_eq!(v["counters"], json!({"commands": 7}));
        let v = snap(&counters, 2).to_value();
        assert_eq!((v["ready"].clone(), v["recovery"]["phase"].clone()), (json!(false), json!("degraded")));
        assert_eq!(v["recovery"]["failureCodes"], json!({"request_indeterminate": 2}));
        let text = serde_json::to_string(&v).unwrap();
        assert_eq!(text.matches("failureCodes").count(), 1, "{text}");
    }

    #[test]
    fn handshake_data_passes_the_schema_in_both_versions() {
        let counters = BTreeMap::new();
        let limits = || v2::DaemonLimits {
            max_connections: 1,
            max_in_flight_requests_per_connection: 2,
            max_line_bytes: 3,
            max_event_bytes: 4,
            max_response_bytes: 5,
            max_outbound_bytes_per_connection: 6,
            multiplexer: "requestId".into(),
        };
        let v1 = handshake(false, limits(), &snap(&counters, 0), true);
        validate_handshake_data(&v1).unwrap();
        assert!(serde_json::from_value::<v2::HandshakeData>(v1.clone()).is_ok());
        assert!(serde_json::from_value::<v2::DaemonHandshakeData>(v1.clone()).is_ok());
        assert_eq!(v1["protocolVersion"], "1.0");
        assert_eq!(v1["supportedVersions"], json!(["1.0", "2.0"]));
        assert_eq!(v1["supportedProtocolVersions"], json!(["1.0", "2.0"]));
        assert_eq!(v1["capabilities"], json!({"operations": OPERATIONS, "transport": "unix-ndjson", "durable": true}));
        assert_eq!(v1["limits"]["maxOutboundBytesPerConnection"], 6);
        assert_eq!(v1["host"]["counters"], json!({}), "the host is the extended snapshot");
        let v2d = handshake(true, limits(), &snap(&counters, 0), false);
        validate_handshake_data(&v2d).unwrap();
        assert!(v2d.get("supportedVersions").is_none());
        assert_eq!(
            v2d["capabilities"]["hostToolAdapterRecommendedQueueLimits"],
            json!({"maxConcurrentRequests": 4, "maxQueuedRequests": 16})
        );
        assert_eq!(v2d["capabilities"]["hostToolOperationCount"], 6);
        for k in ["hostToolAdapter", "hostToolAdapterQueueTelemetry", "configuredOpen", "sessionDir"] {
            assert_eq!(v2d["capabilities"][k], true, "{k}");
        }
    }
}
