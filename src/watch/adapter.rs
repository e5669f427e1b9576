//! The judge of one daemon ↔ adapter connection (`watch adapter`).
//!
//! The first line to the adapter is read as the bind ([`parse_bind_request`]); once one is
//! accepted, the connection's [`FrameJudge`] — the adapter runner's own judge — takes over:
//! every line to the adapter is fed to it (it learns the outstanding invokes and aborts) and
//! judged with [`judge_adapter_frame`] towards the adapter, with the daemon-side exchange rules
//! of PC-4.2 (a second bind, a `requestId` still in flight); every line to the daemon goes
//! through [`FrameJudge::received`]: the contract towards the daemon, then the exchange rules
//! (`bound` first and once, one result per outstanding invoke, none after `aborted:true`, an
//! `aborted` only for an abort sent) and the closed error-code set.

use std::cell::RefCell;
use std::rc::Rc;

use serde_json::Value;

use super::proxy::{ConnJudge, Way};
use super::record::{AdapterRecording, Recorder};
use super::report::{Redactor, Reporter, Violation};
use crate::conform::adapter::judge::{clause_of, Finding, FrameJudge};
use crate::contract::frame::{judge_adapter_frame, parse_bind_request, Binding, Direction};
use crate::contract::{Code, ContractError};
use crate::wire::decode_strict;

/// The largest line either way before a bind gives the limits: the protocol's largest
/// `maxRequestBytes` / `maxResponseBytes` (4 MiB, PC-3.2.10).
pub const PRE_BIND_CAP: usize = 4 * 1024 * 1024;

const TO_ADAPTER: &str = "to-adapter";
const TO_DAEMON: &str = "to-daemon";

/// The clause a contract refusal of a frame sent to the adapter breaks (the daemon's side).
fn clause_to_adapter(e: &ContractError, kind: Option<&str>) -> &'static str {
    let field = e.field();
    if e.code == Code::AdapterSecretReflected {
        return "PC-7.1";
    }
    if field.starts_with("payload") {
        return if e.code == Code::InvalidPath { "PC-5.1" } else { "PC-5.2" };
    }
    clause_of(e, kind)
}

/// The judge of one connection.
pub struct AdapterWatch {
    id: u64,
    report: Reporter,
    redact: Redactor,
    binding: Option<Binding>,
    tried_bind: bool,
    judge: Option<FrameJudge>,
    texts: Rc<RefCell<Vec<String>>>,
    findings: Rc<RefCell<Vec<Finding>>>,
    recording: Option<(Rc<RefCell<AdapterRecording>>, Recorder)>,
}

impl AdapterWatch {
    /// The judge of connection `id`, recording into `recorder` when given.
    pub fn new(id: u64, report: Reporter, recorder: Option<Recorder>) -> Self {
        AdapterWatch {
            id,
            report,
            redact: Redactor::default(),
            binding: None,
            tried_bind: false,
            judge: None,
            texts: Rc::default(),
            findings: Rc::default(),
            recording: recorder.map(|r| {
                let rec = Rc::new(RefCell::new(AdapterRecording::new(id)));
                r.track(id, rec.clone());
                (rec, r)
            }),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn violation(&self, way: Way, clause: &str, code: &str, field: &str, rid: Option<&str>, msg: &str, line: &[u8]) {
        self.report.violation(Violation {
            direction: if way == Way::Up { TO_ADAPTER } else { TO_DAEMON },
            clause: clause.to_string(),
            code: code.to_string(),
            field: self.redact.text(field),
            connection: self.id,
            request_id: rid.map(|r| self.redact.text(r)),
            message: self.redact.text(msg),
            excerpt: self.redact.excerpt(line),
            known_conflict: false,
        });
    }

    fn refused(&self, way: Way, e: &ContractError, value: Option<&Value>, line: &[u8], clause: &str) {
        let rid = value.and_then(|v| v.get("requestId")).and_then(Value::as_str);
        let kind = value.and_then(|v| v.get("kind")).and_then(Value::as_str).unwrap_or("malformed");
        let msg = format!("a frame of kind `{kind}` the contract refuses: {}", e.message);
        self.violation(way, clause, e.code.as_str(), e.field(), rid, &msg, line);
    }

    fn sent_to_adapter(&mut self, line: &[u8]) -> String {
        let value = decode_strict(line).ok();
        if let Some(v) = &value {
            self.redact.learn_from(v);
        }
        let kind = value.as_ref().and_then(|v| v.get("kind")).and_then(Value::as_str);
        let Some(binding) = self.binding.clone() else {
            // No bind accepted yet: this line must be the bind.
            let first = !self.tried_bind;
            self.tried_bind = true;
            return match parse_bind_request(line, PRE_BIND_CAP) {
                Ok(b) => {
                    self.redact.learn(b.handle().clone());
                    let mut j = FrameJudge::new(b.clone(), self.texts.clone()).with_findings(self.findings.clone());
                    j.sent(line);
                    self.judge = Some(j);
                    self.binding = Some(b);
                    "valid".into()
                }
                Err(e) => {
                    let mut clause = clause_to_adapter(&e.error, kind);
                    if e.error.field() == "kind" {
                        clause = "PC-4.2";
                    }
                    let e2 = if first {
                        e.error.clone()
                    } else {
                        ContractError::new(
                            e.error.code,
                            e.error.field(),
                            format!("{} (no bind accepted yet)", e.error.message),
                        )
                    };
                    self.refused(Way::Up, &e2, value.as_ref(), line, clause);
                    e.error.code.as_str().into()
                }
            };
        };
        let verdict = match judge_adapter_frame(line, &binding, Direction::ToAdapter) {
            Err(e) => {
                let clause = if e.error.field() == "line"
                    && line.len() + 1 > binding.line_limit(Direction::ToAdapter) as usize
                {
                    "PC-1"
                } else {
                    clause_to_adapter(&e.error, kind)
                };
                self.refused(Way::Up, &e.error, value.as_ref(), line, clause);
                e.error.code.as_str().to_string()
            }
            Ok(j) => {
                let rid = j.str_field("requestId").to_string();
                match kind {
                    Some("bind") => self.violation(
                        Way::Up,
                        "PC-4.2",
                        Code::AdapterProtocolInvalid.as_str(),
                        "kind",
                        None,
                        "a second bind on a bound connection",
                        line,
                    ),
                    Some("invoke") if self.judge.as_ref().is_some_and(|fj| fj.is_pending(&rid)) => self.violation(
                        Way::Up,
                        "PC-4.2",
                        Code::AdapterProtocolInvalid.as_str(),
                        "requestId",
                        Some(&rid),
                        "an invoke whose requestId is still in flight",
                        line,
                    ),
                    _ => {}
                }
                "valid".into()
            }
        };
        if let Some(fj) = &mut self.judge {
            fj.sent(line);
        }
        verdict
    }

    fn sent_to_daemon(&mut self, line: &[u8]) {
        let Some(fj) = &mut self.judge else {
            let msg = if self.tried_bind {
                "the adapter sent a frame on a connection whose bind the contract refuses (an adapter refuses a bind by closing)"
            } else {
                "the adapter sent a frame before any bind"
            };
            let rid =
                decode_strict(line).ok().and_then(|v| v.get("requestId").and_then(Value::as_str).map(String::from));
            self.violation(
                Way::Down,
                "PC-4.5",
                Code::AdapterProtocolInvalid.as_str(),
                "kind",
                rid.as_deref(),
                msg,
                line,
            );
            return;
        };
        fj.received(line);
        self.texts.borrow_mut().clear();
        let found: Vec<Finding> = std::mem::take(&mut *self.findings.borrow_mut());
        for f in found {
            let msg = if f.clause == "harness" { format!("harness: {}", f.message) } else { f.message.clone() };
            self.violation(Way::Down, f.clause, f.code, &f.field, f.request_id.as_deref(), &msg, line);
        }
    }
}

impl ConnJudge for AdapterWatch {
    fn limit(&self, way: Way) -> usize {
        match (&self.binding, way) {
            (None, _) => PRE_BIND_CAP,
            (Some(b), Way::Up) => b.line_limit(Direction::ToAdapter) as usize,
            (Some(b), Way::Down) => b.line_limit(Direction::ToDaemon) as usize,
        }
    }

    fn line(&mut self, way: Way, line: &[u8]) {
        match way {
            Way::Up => {
                self.report.frame(TO_ADAPTER);
                let verdict = self.sent_to_adapter(line);
                if let Some((rec, _)) = &self.recording {
                    let mut rec = rec.borrow_mut();
                    rec.sent(line, &verdict, self.binding.as_ref(), &self.redact);
                }
            }
            Way::Down => {
                self.report.frame(TO_DAEMON);
                self.sent_to_daemon(line);
                if let Some((rec, _)) = &self.recording {
                    let mut rec = rec.borrow_mut();
                    rec.received(line);
                }
            }
        }
    }

    fn oversize(&mut self, way: Way, len: usize) {
        let limit = self.limit(way);
        let (clause, what) = match way {
            Way::Up => ("PC-1", "maxRequestBytes"),
            Way::Down => ("PC-4.5", "maxResponseBytes"),
        };
        let what = if self.binding.is_some() { what } else { "the protocol's largest limit (no bind yet)" };
        let msg =
            format!("a line of more than {len} bytes, over {what} ({limit} bytes, LF included); skipped to its LF");
        self.violation(way, clause, Code::AdapterProtocolInvalid.as_str(), "line", None, &msg, b"");
        if let Some((rec, _)) = &self.recording {
            let mut rec = rec.borrow_mut();
            rec.oversize(way);
        }
    }

    fn closed(&mut self, way: Way) {
        if let Some((rec, _)) = &self.recording {
            let mut rec = rec.borrow_mut();
            rec.closed(way);
        }
    }

    fn finish(&mut self) {
        if let Some((_, recorder)) = self.recording.take() {
            recorder.finish(self.id);
        }
    }
}
