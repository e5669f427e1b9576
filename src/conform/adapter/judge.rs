//! Every frame the adapter sends, judged by the contract (DESIGN "Every frame judged").
//!
//! A [`FrameJudge`] rides on each runner connection. It sees every line the runner sends (to
//! learn the binding from the `bind`, and which invokes and aborts are outstanding) and every
//! line the adapter sends, which goes through [`judge_adapter_output`] (a daemon's rules and
//! the adapter's single-frame obligations: the closed error-code set with each code's
//! `retryable` flag, `operation_not_granted` for an ungranted operation) against the live
//! binding — the `bind` this connection sent, or the descriptor's when none was sent or it
//! could not be read — and then through the exchange rules (PC-4.3, PC-4.5): `bound` first and
//! once, each `result` answering one outstanding invoke with its `idempotencyKey` and
//! `operation` and keeping what its data must say about that invoke ([`answer_obligation`]:
//! `maxBytes`, `maxEntries`, `maxResults`, the searched path, a write's content and flags, an
//! edit's count), no result after `aborted:true`, each `aborted` answering an abort. A violation is
//! recorded with its clause; the case fails on it whatever it was testing.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::rc::Rc;

use serde_json::Value;

use crate::contract::adapter_output::{judge_adapter_output, Rule};
use crate::contract::answer::answer_obligation;
use crate::contract::frame::{parse_adapter_frame, parse_bind_request, Binding, Direction};
use crate::contract::types::tool_adapter::AdapterFrame;
use crate::contract::{parse_host_record, Code, ContractError, HostRecord};
use crate::wire::decode_strict;

/// What a line the peer sent is, as its generated type, when the contract accepts it.
#[derive(Clone, Debug)]
pub enum Typed {
    /// An adapter frame (judged by [`FrameJudge`]).
    Adapter(Box<AdapterFrame>),
    /// A daemon's response or event ([`parse_host_record`]).
    Host(Box<HostRecord>),
}

/// A line the peer sent that decoded as JSON: the strictly decoded value and, when the
/// contract accepted it, its generated type ([`Typed`]). Readers ask the typed view
/// ([`Peer::kind`], [`Peer::request_id`], …); a line the contract refused has no generated
/// type, and only then are its members read from the value (legitimately raw: the judge has
/// recorded the refusal, and the case may be testing something else). The value stays
/// reachable (`Deref`) for the cases that compare or search whole `data` objects.
#[derive(Clone, Debug)]
pub struct Peer {
    value: Value,
    typed: Option<Typed>,
}

impl PartialEq for Peer {
    fn eq(&self, other: &Self) -> bool {
        self.value == other.value
    }
}

impl std::ops::Deref for Peer {
    type Target = Value;
    fn deref(&self) -> &Value {
        &self.value
    }
}

impl Peer {
    /// An adapter frame the contract accepted, with its generated type.
    pub fn accepted(value: Value, typed: AdapterFrame) -> Peer {
        Peer { value, typed: Some(Typed::Adapter(Box::new(typed))) }
    }

    /// A decoded line without a generated type: the contract refused it.
    pub fn raw(value: Value) -> Peer {
        Peer { value, typed: None }
    }

    /// A line no frame judge saw (a daemon's connection): typed as a host record when the
    /// contract accepts it as a response or an event, raw otherwise.
    pub fn read(value: Value) -> Peer {
        let typed = match value.get("kind").and_then(Value::as_str) {
            Some("response" | "event") => parse_host_record(&value).ok().map(|r| Typed::Host(Box::new(r))),
            _ => None,
        };
        Peer { value, typed }
    }

    /// The adapter frame, when the contract accepted it as one.
    pub fn adapter(&self) -> Option<&AdapterFrame> {
        match self.typed.as_ref() {
            Some(Typed::Adapter(f)) => Some(f.as_ref()),
            _ => None,
        }
    }

    /// The host record, when the contract accepted it as one.
    pub fn host(&self) -> Option<&HostRecord> {
        match self.typed.as_ref() {
            Some(Typed::Host(r)) => Some(r.as_ref()),
            _ => None,
        }
    }

    /// The strictly decoded value.
    pub fn value(&self) -> &Value {
        &self.value
    }

    fn raw_str(&self, key: &str) -> Option<&str> {
        self.value.get(key).and_then(Value::as_str)
    }

    fn raw_error(&self, key: &str) -> Option<&Value> {
        self.value.get("error").and_then(|e| e.get(key))
    }

    /// `kind`.
    pub fn kind(&self) -> Option<&str> {
        match self.typed.as_ref() {
            Some(Typed::Adapter(f)) => Some(f.kind()),
            Some(Typed::Host(r)) => Some(r.kind()),
            None => self.raw_str("kind"),
        }
    }

    /// `requestId`.
    pub fn request_id(&self) -> Option<&str> {
        match self.typed.as_ref() {
            Some(Typed::Adapter(f)) => f.request_id(),
            Some(Typed::Host(r)) => r.request_id(),
            None => self.raw_str("requestId"),
        }
    }

    /// `ok` of a result or a response.
    pub fn ok(&self) -> Option<bool> {
        match self.typed.as_ref() {
            Some(Typed::Adapter(f)) => f.ok(),
            Some(Typed::Host(r)) => r.ok(),
            None => self.value.get("ok").and_then(Value::as_bool),
        }
    }

    /// `aborted` of an aborted.
    pub fn aborted(&self) -> Option<bool> {
        match self.typed.as_ref() {
            Some(Typed::Adapter(f)) => f.aborted(),
            Some(Typed::Host(_)) => None,
            None => self.value.get("aborted").and_then(Value::as_bool),
        }
    }

    /// `error.code`.
    pub fn error_code(&self) -> Option<&str> {
        match self.typed.as_ref() {
            Some(Typed::Adapter(f)) => f.error_code(),
            Some(Typed::Host(r)) => r.error().map(|e| e.code.as_str()),
            None => self.raw_error("code").and_then(Value::as_str),
        }
    }

    /// `error.message`.
    pub fn error_message(&self) -> Option<&str> {
        match self.typed.as_ref() {
            Some(Typed::Adapter(f)) => f.error().map(|e| e.message.as_str()),
            Some(Typed::Host(r)) => r.error().map(|e| e.message.as_str()),
            None => self.raw_error("message").and_then(Value::as_str),
        }
    }

    /// `error.details` of a daemon's failed response (adapter errors carry none).
    pub fn error_details(&self) -> Option<&serde_json::Map<String, Value>> {
        match self.typed.as_ref() {
            Some(Typed::Adapter(_)) => None,
            Some(Typed::Host(r)) => r.error().map(|e| &e.details),
            None => self.raw_error("details").and_then(Value::as_object),
        }
    }

    /// `error.details.field` of a daemon's failed response.
    pub fn error_field(&self) -> Option<&str> {
        self.error_details().and_then(|d| d.get("field")).and_then(Value::as_str)
    }

    /// Whether the frame carries an `error` member.
    pub fn has_error(&self) -> bool {
        match self.typed.as_ref() {
            Some(Typed::Adapter(f)) => f.error().is_some(),
            Some(Typed::Host(r)) => r.error().is_some(),
            None => self.value.get("error").is_some(),
        }
    }

    /// `data` of a successful response (an open object: the schema leaves it open, so it
    /// stays JSON); `Null` when there is none.
    pub fn data(&self) -> Value {
        match self.host() {
            Some(HostRecord::Success(r)) => Value::Object(r.data.clone()),
            _ => self.value.get("data").cloned().unwrap_or(Value::Null),
        }
    }
}

/// The prefix of a note the judge records about itself, not about the adapter: a case that
/// carries one is inconclusive (`error`), never a failure of the peer.
pub const HARNESS: &str = "harness: ";

/// The judge of one connection.
pub struct FrameJudge {
    fallback: Binding,
    bind: Option<Binding>,
    bind_sent: bool,
    bound_seen: bool,
    /// Invokes sent and not answered.
    pending: Vec<Pending>,
    /// Aborts sent and not answered: `(requestId, targetRequestId)`.
    aborts: Vec<(String, String)>,
    /// Targets answered `aborted:true`.
    aborted: BTreeSet<String>,
    violations: Rc<RefCell<Vec<String>>>,
    findings: Option<Rc<RefCell<Vec<Finding>>>>,
}

/// An invoke sent and not answered: its `requestId`, `idempotencyKey` and `operation` as sent,
/// and its generated type when the contract accepts it (a daemon could have sent it), for the
/// rules a result must keep about its invoke ([`answer_obligation`]).
struct Pending {
    id: String,
    key: String,
    op: String,
    invoke: Option<Box<AdapterFrame>>,
}

/// One violation, structured (what `pi-conform watch` reports; the runner reads the text).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// The clause broken (`PC-4.3`), or `harness` for a note of the judge about itself.
    pub clause: &'static str,
    /// The wire code a daemon fails the connection with (`adapter_response_mismatch`).
    pub code: &'static str,
    /// The field (`line`, `operations`, `error.code`), empty when the rule is about the
    /// exchange rather than one member.
    pub field: String,
    /// The frame's `requestId` (or an `aborted`'s target) when it has one.
    pub request_id: Option<String>,
    /// What happened, without the clause (never the handle: the contract's messages and the
    /// ids it read only).
    pub message: String,
}

/// The clause a contract refusal of an adapter frame breaks.
pub fn clause_of(e: &ContractError, kind: Option<&str>) -> &'static str {
    let field = e.field();
    if e.code == Code::AdapterSecretReflected {
        return "PC-4.5";
    }
    match field {
        "line" => "PC-1",
        "protocolVersion" | "adapterId" | "adapterVersion" | "hostInstanceId" | "sessionId" | "generation" => "PC-4.1",
        "operations" if kind == Some("bound") => "PC-4.5",
        f if f.starts_with("limits.") && kind == Some("bound") => "PC-4.5",
        f if f.starts_with("data") => "PC-5.2",
        _ => "PC-4.2",
    }
}

impl FrameJudge {
    /// A judge that records into `violations`; `fallback` is the descriptor's binding.
    pub fn new(fallback: Binding, violations: Rc<RefCell<Vec<String>>>) -> Self {
        FrameJudge {
            fallback,
            bind: None,
            bind_sent: false,
            bound_seen: false,
            pending: Vec::new(),
            aborts: Vec::new(),
            aborted: BTreeSet::new(),
            violations,
            findings: None,
        }
    }

    /// Also record every violation, structured, into `sink`.
    pub fn with_findings(mut self, sink: Rc<RefCell<Vec<Finding>>>) -> Self {
        self.findings = Some(sink);
        self
    }

    fn violation(&self, text: String) {
        let mut v = self.violations.borrow_mut();
        if !v.contains(&text) {
            v.push(text);
        }
    }

    /// Record a violation of `clause` with `code` at `field`.
    fn found(&self, clause: &'static str, code: Code, field: &str, request_id: Option<&str>, message: String) {
        self.violation(if clause == "harness" {
            format!("{HARNESS}{message}")
        } else {
            format!("{clause}: {message}")
        });
        if let Some(sink) = &self.findings {
            sink.borrow_mut().push(Finding {
                clause,
                code: code.as_str(),
                field: field.to_string(),
                request_id: request_id.map(str::to_string),
                message,
            });
        }
    }

    /// Whether an invoke with this `requestId` was sent and is not answered yet.
    pub fn is_pending(&self, request_id: &str) -> bool {
        self.pending.iter().any(|p| p.id == request_id)
    }

    fn binding(&self) -> &Binding {
        self.bind.as_ref().unwrap_or(&self.fallback)
    }

    /// One line the runner sent (LF excluded). Read raw: the runner sends broken lines on
    /// purpose, and an invoke whose payload it broke still awaits its answer.
    pub fn sent(&mut self, line: &[u8]) {
        let Ok(v) = decode_strict(line) else { return };
        let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
        match v.get("kind").and_then(Value::as_str) {
            Some("bind") if !self.bind_sent => {
                self.bind_sent = true;
                self.bind = parse_bind_request(line, usize::MAX).ok();
            }
            Some("invoke") => {
                let invoke = parse_adapter_frame(line, self.binding(), Direction::ToAdapter).ok().map(Box::new);
                self.pending.push(Pending { id: s("requestId"), key: s("idempotencyKey"), op: s("operation"), invoke })
            }
            Some("abort") => self.aborts.push((s("requestId"), s("targetRequestId"))),
            _ => {}
        }
    }

    /// One line the adapter sent (LF excluded): the strictly decoded frame, if it decodes at
    /// all, typed when the contract accepted it (a refused frame is still handed to the case,
    /// raw, since the case may be testing something else). Judged by the one judge of adapter
    /// output, [`judge_adapter_output`] (also `validate --direction to-daemon`'s).
    pub fn received(&mut self, line: &[u8]) -> Option<Peer> {
        let binding = self.binding().clone();
        let judged = judge_adapter_output(line, &binding);
        #[cfg(feature = "faults")]
        tap::record(line, &binding, judged.is_ok());
        let e = match judged {
            Ok((j, f)) => {
                self.exchange(&f);
                return Some(Peer::accepted(j.value, f));
            }
            Err(e) => e,
        };
        match (e.rule, e.frame) {
            // A daemon accepts the frame: the breach is recorded, and the frame takes part in
            // the exchange.
            (Rule::Obligation(clause), Some(frame)) => {
                let (j, f) = *frame;
                let err = &e.error.error;
                self.found(
                    clause,
                    err.code,
                    err.field(),
                    f.request_id(),
                    format!("{} at `{}`", err.message, err.field()),
                );
                self.exchange(&f);
                Some(Peer::accepted(j.value, f))
            }
            // The schema and the generated types agree on every vector (tests/agreement.rs):
            // this is a harness bug, reported as one.
            (Rule::Typed, _) => {
                self.found(
                    "harness",
                    e.error.error.code,
                    e.error.error.field(),
                    None,
                    format!(
                        "a frame the contract accepts does not decode into the generated type ({} at `{}`)",
                        e.error.error.message,
                        e.error.error.field()
                    ),
                );
                e.value.map(Peer::raw)
            }
            _ => {
                let err = &e.error.error;
                // A refused frame has no generated type: its kind is read raw for the report.
                let kind = e.value.as_ref().and_then(|v| v.get("kind")).and_then(Value::as_str);
                let clause = if err.field() == "line" && line.len() as u64 + 1 > binding.line_limit(Direction::ToDaemon)
                {
                    "PC-4.5"
                } else {
                    clause_of(err, kind)
                };
                let rid = e.value.as_ref().and_then(|v| v.get("requestId")).and_then(Value::as_str);
                self.found(
                    clause,
                    err.code,
                    err.field(),
                    rid,
                    format!(
                        "the adapter sent a {} frame the contract refuses: {} at `{}` ({})",
                        kind.unwrap_or("malformed"),
                        err.code.as_str(),
                        err.field(),
                        err.message
                    ),
                );
                e.value.map(Peer::raw)
            }
        }
    }

    fn exchange(&mut self, f: &AdapterFrame) {
        let kind = f.kind();
        if kind == "bound" {
            if self.bound_seen {
                self.found(
                    "PC-4.3",
                    Code::AdapterProtocolInvalid,
                    "kind",
                    None,
                    "a second bound on the connection".into(),
                );
            }
            self.bound_seen = true;
            return;
        }
        if !self.bound_seen {
            self.found("PC-4.3", Code::AdapterProtocolInvalid, "kind", f.request_id(), "a frame before bound".into());
        }
        let s = |o: Option<&str>| o.unwrap_or_default().to_string();
        match kind {
            "result" => {
                let id = s(f.request_id());
                match self.pending.iter().position(|p| p.id == id) {
                    Some(i) => {
                        let Pending { key, op, invoke, .. } = self.pending.remove(i);
                        if let Some((clause, field, message)) = invoke.and_then(|i| answer_obligation(&i, f)) {
                            self.found(
                                clause,
                                Code::AdapterProtocolInvalid,
                                &field,
                                Some(&id),
                                format!("the result for `{id}` does not answer its invoke: {message} at `{field}`"),
                            );
                        }
                        let echoed = f.operation().map(|o| o.to_string()).unwrap_or_default();
                        if key != s(f.idempotency_key()) || op != echoed {
                            self.found(
                                "PC-4.3",
                                Code::AdapterResponseMismatch,
                                if key != s(f.idempotency_key()) { "idempotencyKey" } else { "operation" },
                                Some(&id),
                                format!("the result for `{id}` does not echo its invoke's idempotencyKey and operation"),
                            );
                        }
                    }
                    None if self.aborted.contains(&id) => self.found(
                        "PC-4.5",
                        Code::AdapterResponseMismatch,
                        "requestId",
                        Some(&id),
                        format!("a result for `{id}` after it was answered aborted:true (MUST NOT send its result)"),
                    ),
                    None => self.found(
                        "PC-4.3",
                        Code::AdapterResponseMismatch,
                        "requestId",
                        Some(&id),
                        format!(
                            "a result for `{id}`, which is no outstanding invoke (unknown request or a duplicate result)"
                        ),
                    ),
                }
            }
            "aborted" => {
                let (id, target) = (s(f.request_id()), s(f.target_request_id()));
                match self.aborts.iter().position(|(r, t)| *r == id && *t == target) {
                    Some(i) => {
                        self.aborts.remove(i);
                    }
                    None => self.found(
                        "PC-4.3",
                        Code::AdapterResponseMismatch,
                        "requestId",
                        Some(&id),
                        format!("aborted `{id}` for `{target}` answers no abort sent (requestId and targetRequestId)"),
                    ),
                }
                if f.aborted() == Some(true) {
                    match self.pending.iter().position(|p| p.id == target) {
                        Some(i) => {
                            self.pending.remove(i);
                            self.aborted.insert(target);
                        }
                        None => self.found(
                            "PC-4.5",
                            Code::AdapterResponseMismatch,
                            "aborted",
                            Some(&id),
                            format!(
                                "aborted:true for `{target}`, whose result was already sent or which was never invoked (aborted:false)"
                            ),
                        ),
                    }
                }
            }
            _ => {}
        }
    }
}

/// Test aid (cargo feature `faults`): what the judges of this thread saw, so that a test can
/// give every frame of a real run to `validate`'s judge and compare the verdicts. Off until
/// [`tap::start`]; held in memory only.
#[cfg(feature = "faults")]
pub mod tap {
    use std::cell::RefCell;

    use crate::contract::frame::Binding;

    /// One frame the adapter sent: the line, the binding it was judged on, whether it passed.
    pub type Seen = (Vec<u8>, Binding, bool);

    thread_local! {
        static TAP: RefCell<Option<Vec<Seen>>> = const { RefCell::new(None) };
    }

    /// Record every frame judged on this thread from now on.
    pub fn start() {
        TAP.with(|t| *t.borrow_mut() = Some(Vec::new()));
    }

    /// What was recorded since [`start`]; recording stops.
    pub fn take() -> Vec<Seen> {
        TAP.with(|t| t.borrow_mut().take()).unwrap_or_default()
    }

    pub(super) fn record(line: &[u8], binding: &Binding, passed: bool) {
        TAP.with(|t| {
            if let Some(v) = t.borrow_mut().as_mut() {
                v.push((line.to_vec(), binding.clone(), passed));
            }
        });
    }
}
