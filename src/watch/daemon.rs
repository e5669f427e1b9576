//! The judge of one client ↔ daemon connection (`watch daemon`).
//!
//! Each line to the daemon is a command: the line rules ([`decode_line`]), then
//! [`judge_command`] with the daemon's `hostInstanceId` (from its handshake, or the descriptor's
//! own binding until one is seen, so that the binding match is not judged blind), which runs
//! the envelope, version routing, payload and v2 open descriptor admission; a `requestId`
//! still in flight on the connection is the client's violation (PC-1.1). Each line to the
//! client is a response or an event: [`validate_response`] / [`validate_event`], the version
//! echo of PC-2.2 (the accepted request version, or the refusal's echo), a handshake's data
//! ([`parse_handshake_data`]), and a daemon that accepts a command the contract refuses.
//! What Pi Daemon 0.3.3 does against the protocol text (PC-9) is reported as a known
//! conflict, with its clause, and not counted as a violation.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use serde_json::Value;

use super::proxy::{ConnJudge, Way};
use super::record::{DaemonRecording, Recorder};
use super::report::{Redactor, Reporter, Violation};
use crate::contract::command::{judge_command, HostContext};
use crate::contract::record::{parse_handshake_data, validate_event, validate_response};
use crate::contract::{Code, ContractError, DaemonCode};
use crate::wire::{decode_line, LineError};

const TO_DAEMON: &str = "to-daemon";
const TO_CLIENT: &str = "to-client";

/// The line limit before a handshake tells the daemon's: `maxLineBytes` of PC-1.1 (1 MiB, LF
/// excluded) plus its LF.
pub const DEFAULT_LINE: usize = (1 << 20) + 1;

/// What the watch learned about the daemon, shared by its connections.
#[derive(Default)]
pub struct DaemonFacts {
    /// The daemon's `hostInstanceId`, from a handshake.
    pub host: Option<String>,
    /// `maxLineBytes` + 1.
    pub line: Option<usize>,
    /// The largest response or event + 1.
    pub record: Option<usize>,
}

/// What a command expects of its response.
struct Pending {
    operation: String,
    /// The version the response echoes.
    version: String,
    /// The contract's refusal, if it refused the command.
    refused: Option<Code>,
}

/// The judge of one connection.
pub struct DaemonWatch {
    id: u64,
    report: Reporter,
    facts: Rc<RefCell<DaemonFacts>>,
    redact: Redactor,
    pending: BTreeMap<String, Pending>,
    recording: Option<(Rc<RefCell<DaemonRecording>>, Recorder)>,
}

fn line_code(e: LineError) -> Code {
    match e {
        LineError::TooLarge { .. } => Code::LineTooLarge,
        LineError::InvalidUtf8 => Code::InvalidUtf8,
        LineError::InvalidJson => Code::InvalidJson,
    }
}

/// The clause a command refusal breaks.
fn command_clause(e: &ContractError) -> &'static str {
    let c = e.code.as_str();
    if c.contains("tool_adapter") || e.code == Code::UnsupportedToolOperation {
        "PC-3.2"
    } else if e.code == Code::UnsupportedResourcePolicy {
        "PC-3.1"
    } else {
        "PC-2.1"
    }
}

impl DaemonWatch {
    /// The judge of connection `id`.
    pub fn new(id: u64, report: Reporter, facts: Rc<RefCell<DaemonFacts>>, recorder: Option<Recorder>) -> Self {
        let rec = recorder.map(|r| {
            let rec = Rc::new(RefCell::new(DaemonRecording::new(id)));
            r.track(id, rec.clone());
            (rec, r)
        });
        if let (Some((d, _)), Some(h)) = (rec.as_ref(), facts.borrow().host.as_deref()) {
            d.borrow_mut().host(h);
        }
        DaemonWatch { id, report, facts, redact: Redactor::default(), pending: BTreeMap::new(), recording: rec }
    }

    #[allow(clippy::too_many_arguments)]
    fn emit(
        &self,
        way: Way,
        clause: &str,
        code: &str,
        field: &str,
        rid: Option<&str>,
        msg: &str,
        line: &[u8],
        known: bool,
    ) {
        self.report.violation(Violation {
            direction: if way == Way::Up { TO_DAEMON } else { TO_CLIENT },
            clause: clause.to_string(),
            code: code.to_string(),
            field: self.redact.text(field),
            connection: self.id,
            request_id: rid.map(|r| self.redact.text(r)),
            message: self.redact.text(msg),
            excerpt: self.redact.excerpt(line),
            known_conflict: known,
        });
    }

    fn command(&mut self, line: &[u8]) -> String {
        let v = match decode_line(line) {
            Ok(v) => v,
            Err(e) => {
                let code = line_code(e);
                self.emit(Way::Up, "PC-1", code.as_str(), "line", None, &e.to_string(), line, false);
                return code.as_str().into();
            }
        };
        self.redact.learn_from(&v);
        let own = v
            .pointer("/payload/resources/tools/descriptor/binding/hostInstanceId")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let host = self.facts.borrow().host.clone().unwrap_or(own);
        let rid = v.get("requestId").and_then(Value::as_str).map(str::to_string);
        let op = v.get("operation").and_then(Value::as_str).unwrap_or_default().to_string();
        let (verdict, pending) = match judge_command(&v, &HostContext { host_instance_id: &host }) {
            Ok(()) => {
                let version = v.get("protocolVersion").and_then(Value::as_str).unwrap_or("1.0").to_string();
                ("valid".to_string(), Pending { operation: op, version, refused: None })
            }
            Err(ce) => {
                let e = &ce.error;
                let msg = format!("a command the contract refuses: {}", e.message);
                self.emit(Way::Up, command_clause(e), e.code.as_str(), e.field(), rid.as_deref(), &msg, line, false);
                (
                    e.code.as_str().to_string(),
                    Pending { operation: op, version: ce.echo_version, refused: Some(e.code) },
                )
            }
        };
        if let Some(rid) = rid {
            if self.pending.contains_key(&rid) {
                self.emit(
                    Way::Up,
                    "PC-1.1",
                    DaemonCode::DuplicateRequestId.as_str(),
                    "requestId",
                    Some(&rid),
                    "a requestId already in flight on this connection",
                    line,
                    false,
                );
            } else if self.pending.len() < 4096 {
                self.pending.insert(rid, pending);
            }
        }
        verdict
    }

    fn record(&mut self, line: &[u8]) {
        let v = match decode_line(line) {
            Ok(v) => v,
            Err(e) => {
                let code = line_code(e);
                self.emit(Way::Down, "PC-1", code.as_str(), "line", None, &e.to_string(), line, false);
                return;
            }
        };
        let rid = v.get("requestId").and_then(Value::as_str).map(str::to_string);
        match v.get("kind").and_then(Value::as_str) {
            Some("event") => {
                if let Err(e) = validate_event(&v) {
                    self.emit(Way::Down, "PC-2.3", e.code.as_str(), e.field(), None, &e.message, line, false);
                }
            }
            Some("response") => {
                if let Err(e) = validate_response(&v) {
                    self.emit(Way::Down, "PC-2.2", e.code.as_str(), e.field(), rid.as_deref(), &e.message, line, false);
                    if let Some(r) = &rid {
                        self.pending.remove(r);
                    }
                    return;
                }
                let Some(p) = rid.as_ref().and_then(|r| self.pending.remove(r)) else { return };
                self.response(&v, &p, rid.as_deref(), line);
            }
            _ => self.emit(
                Way::Down,
                "PC-2.2",
                Code::InvalidResponse.as_str(),
                "kind",
                rid.as_deref(),
                "a record that is neither a response nor an event",
                line,
                false,
            ),
        }
    }

    fn response(&mut self, v: &Value, p: &Pending, rid: Option<&str>, line: &[u8]) {
        let ok = v.get("ok").and_then(Value::as_bool) == Some(true);
        let code = v.pointer("/error/code").and_then(Value::as_str).unwrap_or_default();
        let version = v.get("protocolVersion").and_then(Value::as_str).unwrap_or_default();
        if version != p.version {
            // PC-9 row 2: 0.3.3 answers these two as 1.0 to a 2.x request.
            let known = p.version.starts_with("2.")
                && version == "1.0"
                && (code == DaemonCode::DuplicateRequestId.as_str() || code == DaemonCode::ConnectionBusy.as_str());
            let msg = format!("the response is {version}, the request was accepted as {}", p.version);
            self.emit(Way::Down, "PC-2.2", code, "protocolVersion", rid, &msg, line, known);
        }
        if ok {
            if let Some(c) = p.refused {
                let msg = format!("the daemon accepted a command the contract refuses with {}", c.as_str());
                self.emit(Way::Down, "PC-2.1", c.as_str(), "", rid, &msg, line, false);
            }
        }
        if ok && p.operation == "handshake" {
            let data = v.get("data").cloned().unwrap_or(Value::Null);
            match parse_handshake_data(&data) {
                Err(e) => self.emit(Way::Down, "PC-2.4", e.code.as_str(), e.field(), rid, &e.message, line, false),
                Ok(hd) => {
                    if hd.supported_versions.is_empty() {
                        // PC-9 row 1: 0.3.3 sends supportedProtocolVersions instead, and only to
                        // 2.x requests.
                        let renamed = !hd.supported_protocol_versions.is_empty();
                        let known = renamed || !p.version.starts_with("2.");
                        let msg = if renamed {
                            "the handshake advertises supportedProtocolVersions, not the protocol text's supportedVersions"
                        } else {
                            "the handshake advertises no supportedVersions"
                        };
                        self.emit(
                            Way::Down,
                            "PC-2.4",
                            Code::InvalidResponse.as_str(),
                            "data.supportedVersions",
                            rid,
                            msg,
                            line,
                            known,
                        );
                    }
                    let mut f = self.facts.borrow_mut();
                    if let Some(h) = data.pointer("/host/hostInstanceId").and_then(Value::as_str) {
                        f.host = Some(h.to_string());
                        if let Some((r, _)) = &self.recording {
                            let mut r = r.borrow_mut();
                            r.host(h);
                        }
                    }
                    let lim = |k: &str| hd.limits.get(k).and_then(Value::as_u64).and_then(|n| usize::try_from(n).ok());
                    if let Some(n) = lim("maxLineBytes") {
                        f.line = Some(n.saturating_add(1).min(64 << 20));
                    }
                    let rec = lim("maxResponseBytes").max(lim("maxEventBytes"));
                    if let Some(n) = rec {
                        f.record = Some(n.saturating_add(1).min(64 << 20));
                    }
                }
            }
        }
        // PC-9 row 4: 0.3.3 answers a failed bind with open_failed and a generic cause.
        if !ok
            && p.operation == "open"
            && code == DaemonCode::OpenFailed.as_str()
            && v.pointer("/error/details/cause/name").and_then(Value::as_str) == Some("HostToolAdapterError")
            && v.pointer("/error/details/cause/code").is_none()
        {
            self.emit(
                Way::Down,
                "PC-3.4",
                code,
                "error.details.cause",
                rid,
                "open_failed with a generic cause, not the adapter's typed failure",
                line,
                true,
            );
        }
    }
}

impl ConnJudge for DaemonWatch {
    fn limit(&self, way: Way) -> usize {
        let f = self.facts.borrow();
        match way {
            Way::Up => f.line.unwrap_or(DEFAULT_LINE),
            // A daemon replaces an oversized record; allow the larger of its two bounds.
            Way::Down => f.record.unwrap_or(DEFAULT_LINE).max(f.line.unwrap_or(DEFAULT_LINE)),
        }
    }

    fn line(&mut self, way: Way, line: &[u8]) {
        match way {
            Way::Up => {
                self.report.frame(TO_DAEMON);
                let verdict = self.command(line);
                if let Some((r, _)) = &self.recording {
                    let mut r = r.borrow_mut();
                    r.sent(line, &verdict, &self.redact);
                }
            }
            Way::Down => {
                self.report.frame(TO_CLIENT);
                self.record(line);
                if let Some((r, _)) = &self.recording {
                    let mut r = r.borrow_mut();
                    r.received(line);
                }
            }
        }
    }

    fn oversize(&mut self, way: Way, len: usize) {
        let limit = self.limit(way);
        let code = match way {
            Way::Up => Code::LineTooLarge.as_str(),
            Way::Down => DaemonCode::OutboundRecordTooLarge.as_str(),
        };
        let msg =
            format!("a line of more than {len} bytes, over the limit ({limit} bytes, LF included); skipped to its LF");
        self.emit(way, "PC-1.1", code, "line", None, &msg, b"", false);
    }

    fn closed(&mut self, way: Way) {
        if let Some((r, _)) = &self.recording {
            let mut r = r.borrow_mut();
            r.closed(way);
        }
    }

    fn finish(&mut self) {
        if let Some((_, recorder)) = self.recording.take() {
            recorder.finish(self.id);
        }
    }
}
