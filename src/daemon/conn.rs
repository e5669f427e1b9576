//! The envelope rules of one daemon connection as a sans-I/O state machine (SPEC §1.1, §2.1,
//! §2.2): what a line the decoder produced becomes — a fatal reply and the end of the
//! connection (`line_too_large`, `invalid_utf8`, `invalid_json`), a refusal of
//! `contract::parse_command` with the version it echoes, a `duplicate_request_id` or
//! `connection_busy` refusal, or a command to dispatch — and the response a dispatched command
//! gets (the exact version echo, `outbound_record_too_large` past `maxResponseBytes`).
//!
//! The shape is quinn-proto's: the shell feeds it with `handle_*` and takes what it must do
//! with `poll_*`. It does no I/O, reads no clock and draws its `invalid-<uuid>` ids from the
//! [`Rng`] its caller gives it; `daemon::server` is its tokio shell.

use std::collections::{HashSet, VecDeque};
use std::path::PathBuf;

use serde_json::Value;

use super::faults::{self, DaemonFault, DaemonFaults};
use super::host::{DErr, MAX_IN_FLIGHT, MAX_RESPONSE_BYTES};
use super::ids::{uuid_v4, Rng};
use super::record::response_line;
use crate::contract::{parse_command, Code, Command, DaemonCode, HostContext};
use crate::wire::{decode_strict, LineError};

/// Where the response of a dispatched command goes: the version it echoes, its `requestId`
/// and `sessionId`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplyTo {
    /// The accepted `protocolVersion`, echoed exactly.
    pub version: String,
    /// The command's `requestId` (in flight until the response is handled).
    pub request_id: String,
    /// The command's `sessionId`, when it had one.
    pub session_id: Option<String>,
}

/// A command that passed the envelope rules: the shell hands it to the host and gives the
/// outcome back with [`Connection::handle_response`].
#[derive(Debug)]
pub struct Dispatch {
    /// The accepted command.
    pub command: Command,
    /// Where its response goes.
    pub reply: ReplyTo,
}

/// One line for the connection's writer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transmit {
    /// The line, LF included.
    pub line: Vec<u8>,
    /// Close the connection after writing it.
    pub close: bool,
}

/// One connection's envelope state: the `requestId`s in flight and what the shell must do.
pub struct Connection {
    host_id: String,
    faults: DaemonFaults,
    rng: Box<dyn Rng>,
    in_flight: HashSet<String>,
    transmits: VecDeque<Transmit>,
    dispatches: VecDeque<Dispatch>,
    probes: VecDeque<PathBuf>,
    closed: bool,
}

/// The line written instead of a record that would have carried a capability handle: an
/// `internal_error` response under a fresh `invalid-<uuid>` id, in the record's version.
pub fn withheld_line(record: &[u8], host_id: &str, rng: &mut dyn Rng) -> Vec<u8> {
    let v: Value = serde_json::from_slice(record).unwrap_or(Value::Null);
    let e = DErr::of(DaemonCode::InternalError, "a record would have contained a capability handle; withheld");
    let version = v["protocolVersion"].as_str().unwrap_or("1.0");
    response_line(version, &format!("invalid-{}", uuid_v4(rng)), host_id, None, Err(e))
}

impl Connection {
    /// A new connection of host `host_id`.
    pub fn new(host_id: impl Into<String>, faults: DaemonFaults, rng: Box<dyn Rng>) -> Self {
        Connection {
            host_id: host_id.into(),
            faults,
            rng,
            in_flight: HashSet::new(),
            transmits: VecDeque::new(),
            dispatches: VecDeque::new(),
            probes: VecDeque::new(),
            closed: false,
        }
    }

    fn invalid_id(&mut self) -> String {
        format!("invalid-{}", uuid_v4(self.rng.as_mut()))
    }

    fn send(&mut self, line: Vec<u8>, close: bool) {
        self.transmits.push_back(Transmit { line, close });
        if close {
            self.closed = true;
        }
    }

    fn fatal(&mut self, code: Code, message: &str, close: bool) {
        let rid = self.invalid_id();
        let line = response_line("1.0", &rid, &self.host_id, None, Err(DErr::new(code.as_str(), message)));
        self.send(line, close);
    }

    /// One line from the decoder (or its error). Ignored once the connection is closed.
    pub fn handle_line(&mut self, line: Result<Vec<u8>, LineError>) {
        if self.closed {
            return;
        }
        let line = match line {
            Ok(l) => l,
            Err(LineError::TooLarge { .. }) => {
                return self.fatal(Code::LineTooLarge, "the line exceeds maxLineBytes", true)
            }
            Err(_) => {
                self.closed = true;
                return;
            }
        };
        let value = match decode_strict(&line) {
            Ok(v) => v,
            Err(LineError::InvalidUtf8) => return self.fatal(Code::InvalidUtf8, "the line is not UTF-8", true),
            Err(_) => {
                let keep_open = self.faults.has(DaemonFault::KeepOpenOnInvalidJson);
                return self.fatal(Code::InvalidJson, "the line is not one strict JSON object", !keep_open);
            }
        };
        let value = if self.faults.is_empty() {
            value
        } else {
            let mut v = value;
            if self.faults.has(DaemonFault::KeysCaseInsensitive) {
                faults::fold_letter_case(&mut v);
            }
            faults::lenient_value(&mut v, self.faults);
            v
        };
        let parsed = match parse_command(&value, &HostContext { host_instance_id: &self.host_id }) {
            Err(e) if !self.faults.is_empty() => {
                match faults::lenient_command(&value, &e, &self.host_id, self.faults) {
                    Some(c) => Ok(c),
                    None => {
                        if let Some(p) = faults::premature_endpoint(&value, &e, self.faults) {
                            self.probes.push_back(p);
                        }
                        Err(e)
                    }
                }
            }
            r => r,
        };
        let command = match parsed {
            Ok(c) => c,
            Err(e) => {
                let code = faults::binding_first(&value, &e, &self.host_id, self.faults).unwrap_or(e.error.code);
                let mut body = DErr::new(faults::refusal_code(code.as_str(), self.faults), &e.error.message);
                body.details = faults::refusal_details(e.error.code, e.error.details.clone(), self.faults);
                if self.faults.has(DaemonFault::RefusalEchoesHandle)
                    && matches!(
                        e.error.code,
                        Code::ToolAdapterBindingMismatch
                            | Code::UnsupportedToolOperation
                            | Code::InvalidToolAdapterLimit
                    )
                {
                    let d = &value["payload"]["resources"]["tools"]["descriptor"];
                    if let Some(h) = d["binding"]["capabilityHandle"].as_str() {
                        body.message = format!("{} (capability {h})", body.message);
                    }
                }
                let rid = match e.request_id.clone() {
                    Some(r) => r,
                    None => self.invalid_id(),
                };
                let echo = faults::echo_version(&e.echo_version, self.faults);
                let line = response_line(&echo, &rid, &self.host_id, None, Err(body));
                return self.send(line, e.close);
            }
        };
        let version = faults::echo_version(&command.version.text, self.faults);
        let rid = command.request_id().to_string();
        let sid = command.session_id().map(str::to_string);
        let refusal = if self.in_flight.contains(&rid) {
            Some(DErr::of(DaemonCode::DuplicateRequestId, "this requestId is already in flight on this connection"))
        } else if self.in_flight.len() >= self.in_flight_limit() {
            Some(DErr::of(DaemonCode::ConnectionBusy, "too many requests in flight on this connection"))
        } else {
            None
        };
        if let Some(e) = refusal {
            // DECISION: the exact accepted version is echoed (protocol text).
            let version = if self.faults.has(DaemonFault::Echo10OnDuplicate)
                && e.code == DaemonCode::DuplicateRequestId.as_str()
            {
                "1.0".to_string()
            } else {
                version
            };
            let close = self.faults.has(DaemonFault::BusyCloses) && e.code == DaemonCode::ConnectionBusy.as_str();
            let line = response_line(&version, &rid, &self.host_id, sid.as_deref(), Err(e));
            return self.send(line, close);
        }
        self.in_flight.insert(rid.clone());
        self.dispatches.push_back(Dispatch { command, reply: ReplyTo { version, request_id: rid, session_id: sid } });
    }

    /// How many requests may be in flight on this connection (SPEC §1.1: 64).
    fn in_flight_limit(&self) -> usize {
        if self.faults.has(DaemonFault::InFlightOneShort) {
            MAX_IN_FLIGHT - 1
        } else if self.faults.has(DaemonFault::NoInFlightLimit) {
            usize::MAX
        } else {
            MAX_IN_FLIGHT
        }
    }

    /// The outcome of a dispatched command: its response, replaced by
    /// `outbound_record_too_large` past `maxResponseBytes`; its `requestId` is free again.
    pub fn handle_response(&mut self, reply: ReplyTo, result: Result<Value, DErr>) {
        let ReplyTo { version, request_id, session_id } = reply;
        let mut line = response_line(&version, &request_id, &self.host_id, session_id.as_deref(), result);
        if line.len() > MAX_RESPONSE_BYTES && !self.faults.has(DaemonFault::NoResponseCap) {
            let e = DErr::of(DaemonCode::OutboundRecordTooLarge, "the response exceeded maxResponseBytes");
            line = response_line(&version, &request_id, &self.host_id, session_id.as_deref(), Err(e));
        }
        self.in_flight.remove(&request_id);
        self.transmits.push_back(Transmit { line, close: false });
    }

    /// A dispatch the shell did not start (the connection was reclaimed meanwhile): its
    /// `requestId` is no longer in flight.
    pub fn forget(&mut self, request_id: &str) {
        self.in_flight.remove(request_id);
    }

    /// The next line to write.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.transmits.pop_front()
    }

    /// The next command to dispatch.
    pub fn poll_dispatch(&mut self) -> Option<Dispatch> {
        self.dispatches.pop_front()
    }

    /// Fault switch [`DaemonFault::ConnectBeforeAdmission`] only: an endpoint the shell connects
    /// to before it writes the pending refusal (take these before [`Connection::poll_transmit`]).
    pub fn poll_probe(&mut self) -> Option<PathBuf> {
        self.probes.pop_front()
    }

    /// Whether the connection is closing: a fatal line was queued (or the decoder failed), and
    /// nothing more is read.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// How many dispatched commands await their response.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::util::prng::SplitMix64;

    const HOST: &str = "host-test";

    fn conn() -> Connection {
        Connection::new(HOST, DaemonFaults::NONE, Box::new(SplitMix64::new(1)))
    }

    fn line(v: &Value) -> Result<Vec<u8>, LineError> {
        Ok(serde_json::to_vec(v).unwrap())
    }

    fn status(version: &str, rid: &str) -> Value {
        json!({"protocolVersion": version, "kind": "command", "requestId": rid, "operation": "status", "payload": {}})
    }

    fn take(c: &mut Connection) -> (Value, bool) {
        let t = c.poll_transmit().expect("a line");
        assert_eq!(t.line.last(), Some(&b'\n'));
        (serde_json::from_slice(&t.line).unwrap(), t.close)
    }

    #[test]
    fn an_accepted_command_is_dispatched_and_its_response_echoes_the_exact_version() {
        let mut c = conn();
        c.handle_line(line(&status("2.7", "r1")));
        assert!(c.poll_transmit().is_none());
        let d = c.poll_dispatch().expect("dispatched");
        assert!(matches!(d.command.body, crate::contract::types::protocol_v2::Command::StatusCommand(_)));
        assert_eq!(d.reply, ReplyTo { version: "2.7".into(), request_id: "r1".into(), session_id: None });
        assert_eq!(c.in_flight(), 1);
        c.handle_response(d.reply, Ok(json!({"x": 1})));
        let (v, close) = take(&mut c);
        assert!(!close);
        assert_eq!(v["protocolVersion"], "2.7");
        assert_eq!(v["requestId"], "r1");
        assert_eq!(v["hostInstanceId"], HOST);
        assert_eq!(v["ok"], true);
        assert_eq!(v["data"], json!({"x": 1}));
        assert_eq!(c.in_flight(), 0);
    }

    #[test]
    fn a_duplicate_request_id_in_flight_is_refused_and_free_again_after_its_response() {
        let mut c = conn();
        c.handle_line(line(&status("2.0", "r1")));
        let d = c.poll_dispatch().unwrap();
        c.handle_line(line(&status("2.3", "r1")));
        assert!(c.poll_dispatch().is_none());
        let (v, close) = take(&mut c);
        assert!(!close, "a duplicate does not close the connection");
        assert_eq!(v["error"]["code"], "duplicate_request_id");
        assert_eq!(v["error"]["retryable"], false);
        assert_eq!(v["requestId"], "r1");
        assert_eq!(v["protocolVersion"], "2.3", "the duplicate's own version is echoed");
        c.handle_response(d.reply, Ok(json!({})));
        let _ = take(&mut c);
        c.handle_line(line(&status("2.0", "r1")));
        assert!(c.poll_dispatch().is_some(), "the id is reusable once answered");
    }

    #[test]
    fn the_in_flight_cap_refuses_with_retryable_connection_busy() {
        let mut c = conn();
        for i in 0..MAX_IN_FLIGHT {
            c.handle_line(line(&status("1.0", &format!("r{i}"))));
        }
        let mut held = Vec::new();
        while let Some(d) = c.poll_dispatch() {
            held.push(d);
        }
        assert_eq!(held.len(), MAX_IN_FLIGHT);
        c.handle_line(line(&json!({"protocolVersion": "1.0", "kind": "command", "requestId": "over",
            "operation": "status", "sessionId": "s1", "generation": 1, "payload": {}})));
        assert!(c.poll_dispatch().is_none());
        let (v, close) = take(&mut c);
        assert!(!close);
        assert_eq!(v["error"]["code"], "connection_busy");
        assert_eq!(v["error"]["retryable"], true);
        assert_eq!(v["requestId"], "over");
        assert_eq!(v["sessionId"], "s1");
        let first = held.remove(0);
        c.handle_response(first.reply, Ok(json!({})));
        let _ = take(&mut c);
        c.handle_line(line(&status("1.0", "over")));
        assert!(c.poll_dispatch().is_some(), "one answered request makes room");
    }

    #[test]
    fn a_line_too_large_invalid_utf8_or_invalid_json_is_answered_then_closes() {
        for (input, code) in [
            (Err(LineError::TooLarge { limit: 10 }), "line_too_large"),
            (Ok(vec![b'{', 0xff, b'}']), "invalid_utf8"),
            (Ok(br#"{"a":1,"a":2}"#.to_vec()), "invalid_json"),
        ] {
            let mut c = conn();
            c.handle_line(input);
            let (v, close) = take(&mut c);
            assert!(close, "{code} closes");
            assert!(c.is_closed());
            assert_eq!(v["error"]["code"], code);
            assert_eq!(v["protocolVersion"], "1.0");
            assert!(v["requestId"].as_str().unwrap().starts_with("invalid-"));
            assert!(c.poll_transmit().is_none());
            c.handle_line(line(&status("1.0", "later")));
            assert!(c.poll_dispatch().is_none() && c.poll_transmit().is_none(), "nothing after the close");
        }
    }

    #[test]
    fn a_refused_command_echoes_its_version_and_request_id_and_only_incompatible_closes() {
        let mut c = conn();
        c.handle_line(line(&json!({"protocolVersion": "2.1", "kind": "command", "requestId": "r9",
            "operation": "fly", "payload": {}})));
        let (v, close) = take(&mut c);
        assert!(!close);
        assert_eq!(v["error"]["code"], "unknown_operation");
        assert_eq!(v["protocolVersion"], "2.1");
        assert_eq!(v["requestId"], "r9");
        assert_eq!(c.in_flight(), 0);
        c.handle_line(line(&status("3.0", "r10")));
        let (v, close) = take(&mut c);
        assert_eq!(v["error"]["code"], "incompatible_protocol");
        assert!(close);
        assert!(c.is_closed());
    }

    #[test]
    fn invalid_ids_come_from_the_given_rng() {
        let run = |seed| {
            let mut c = Connection::new(HOST, DaemonFaults::NONE, Box::new(SplitMix64::new(seed)));
            c.handle_line(Ok(b"nope".to_vec()));
            take(&mut c).0["requestId"].as_str().unwrap().to_string()
        };
        assert_eq!(run(5), run(5));
        assert_ne!(run(5), run(6));
    }

    #[test]
    fn a_response_over_the_limit_becomes_outbound_record_too_large() {
        let mut c = conn();
        c.handle_line(line(&status("2.0", "big")));
        let d = c.poll_dispatch().unwrap();
        c.handle_response(d.reply, Ok(json!({"blob": "x".repeat(MAX_RESPONSE_BYTES)})));
        let (v, close) = take(&mut c);
        assert!(!close);
        assert_eq!(v["error"]["code"], "outbound_record_too_large");
        assert_eq!(v["requestId"], "big");
        assert_eq!(v["protocolVersion"], "2.0");
        assert_eq!(c.in_flight(), 0);
    }

    #[test]
    fn a_forgotten_dispatch_frees_its_request_id() {
        let mut c = conn();
        c.handle_line(line(&status("1.0", "r1")));
        let d = c.poll_dispatch().unwrap();
        c.forget(&d.reply.request_id);
        assert_eq!(c.in_flight(), 0);
    }

    #[test]
    fn fault_switches_keep_their_meaning_in_the_core() {
        let faults = DaemonFaults::from_iter([DaemonFault::KeepOpenOnInvalidJson, DaemonFault::Echo10OnDuplicate]);
        let mut c = Connection::new(HOST, faults, Box::new(SplitMix64::new(1)));
        c.handle_line(Ok(b"{".to_vec()));
        let (v, close) = take(&mut c);
        assert_eq!(v["error"]["code"], "invalid_json");
        assert!(!close && !c.is_closed(), "keep-open-on-invalid-json keeps it open");
        c.handle_line(line(&status("2.4", "r1")));
        c.handle_line(line(&status("2.4", "r1")));
        let (v, _) = take(&mut c);
        assert_eq!(v["error"]["code"], "duplicate_request_id");
        assert_eq!(v["protocolVersion"], "1.0", "echo-1.0-on-duplicate breaks the echo");
    }
}
