//! Every frame the adapter sends, judged by the contract (DESIGN "Every frame judged").
//!
//! A [`FrameJudge`] rides on each runner connection. It sees every line the runner sends (to
//! learn the binding from the `bind`, and which invokes and aborts are outstanding) and every
//! line the adapter sends, which goes through [`judge_adapter_frame`] with
//! [`Direction::ToDaemon`] against the live binding — the `bind` this connection sent, or the
//! descriptor's when none was sent or it could not be read — and then through the exchange
//! rules a daemon applies (PC-4.3) and the adapter obligations of PC-4.5 and PC-5.3.errors:
//! `bound` first and once, each `result` answering one outstanding invoke with its
//! `idempotencyKey` and `operation`, no result after `aborted:true`, each `aborted` answering
//! an abort, and the closed error-code set with each code's `retryable` flag. A violation is
//! recorded with its clause; the case fails on it whatever it was testing.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::rc::Rc;

use serde_json::Value;

use crate::contract::adapter_error::{check_adapter_error_code, AdapterCode};
use crate::contract::frame::{judge_adapter_frame, parse_bind_request, Binding, Direction, FrameKind};
use crate::contract::types::tool_adapter::ToolOperation;
use crate::contract::{Code, ContractError};
use crate::wire::decode_strict;

/// The judge of one connection.
pub struct FrameJudge {
    fallback: Binding,
    bind: Option<Binding>,
    bind_sent: bool,
    bound_seen: bool,
    /// Invokes sent and not answered: `(requestId, idempotencyKey, operation)`.
    pending: Vec<(String, String, String)>,
    /// Aborts sent and not answered: `(requestId, targetRequestId)`.
    aborts: Vec<(String, String)>,
    /// Targets answered `aborted:true`.
    aborted: BTreeSet<String>,
    violations: Rc<RefCell<Vec<String>>>,
}

/// The clause a contract refusal of an adapter frame breaks.
fn clause_of(e: &ContractError, kind: Option<&str>) -> &'static str {
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
        }
    }

    fn violation(&self, text: String) {
        let mut v = self.violations.borrow_mut();
        if !v.contains(&text) {
            v.push(text);
        }
    }

    fn binding(&self) -> &Binding {
        self.bind.as_ref().unwrap_or(&self.fallback)
    }

    /// One line the runner sent (LF excluded).
    pub fn sent(&mut self, line: &[u8]) {
        let Ok(v) = decode_strict(line) else { return };
        let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
        match v.get("kind").and_then(Value::as_str) {
            Some("bind") if !self.bind_sent => {
                self.bind_sent = true;
                self.bind = parse_bind_request(line, usize::MAX).ok();
            }
            Some("invoke") => self.pending.push((s("requestId"), s("idempotencyKey"), s("operation"))),
            Some("abort") => self.aborts.push((s("requestId"), s("targetRequestId"))),
            _ => {}
        }
    }

    /// One line the adapter sent (LF excluded): the strictly decoded frame, if it decodes at
    /// all (a refused frame is still handed to the case, which may be testing something else).
    pub fn received(&mut self, line: &[u8]) -> Option<Value> {
        let binding = self.binding().clone();
        let judged = match judge_adapter_frame(line, &binding, Direction::ToDaemon) {
            Err(e) if e.error.field() == "operation" => self.ungranted_result(line, &binding).ok_or(e),
            r => r,
        };
        match judged {
            Err(e) => {
                let value = decode_strict(line).ok();
                let kind = value.as_ref().and_then(|v| v.get("kind")).and_then(Value::as_str);
                let clause =
                    if e.error.field() == "line" && line.len() as u64 + 1 > binding.line_limit(Direction::ToDaemon) {
                        "PC-4.5"
                    } else {
                        clause_of(&e.error, kind)
                    };
                self.violation(format!(
                    "{clause}: the adapter sent a {} frame the contract refuses: {} at `{}` ({})",
                    kind.unwrap_or("malformed"),
                    e.error.code.as_str(),
                    e.error.field(),
                    e.error.message
                ));
                value
            }
            Ok(j) => {
                self.exchange(j.kind, &j.value);
                Some(j.value)
            }
        }
    }

    /// A `result ok:false operation_not_granted` for an operation of the six the bind did not
    /// grant is the answer PC-4.5 requires (a daemon never sends such an invoke, so the
    /// contract refuses it on `operation`): judged with that operation granted, every other rule
    /// applies; any other result for it is a violation.
    fn ungranted_result(&self, line: &[u8], binding: &Binding) -> Option<crate::contract::frame::JudgedFrame> {
        let v = decode_strict(line).ok()?;
        if v.get("kind")? != "result" {
            return None;
        }
        let op: ToolOperation = v.get("operation")?.as_str()?.parse().ok()?;
        if binding.operations().contains(&op) {
            return None;
        }
        let mut b = binding.clone();
        b.operations_mut().push(op);
        let j = judge_adapter_frame(line, &b, Direction::ToDaemon).ok()?;
        if v["ok"] != false || v["error"]["code"] != AdapterCode::OperationNotGranted.as_str() {
            self.violation(format!(
                "PC-4.5: a result for {op}, which the bind did not grant, must be ok:false operation_not_granted"
            ));
        }
        Some(j)
    }

    fn exchange(&mut self, kind: FrameKind, v: &Value) {
        let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
        if kind == FrameKind::Bound {
            if self.bound_seen {
                self.violation("PC-4.3: a second bound on the connection".into());
            }
            self.bound_seen = true;
            return;
        }
        if !self.bound_seen {
            self.violation("PC-4.3: a frame before bound".into());
        }
        match kind {
            FrameKind::Result { ok, .. } => {
                let id = s("requestId");
                match self.pending.iter().position(|(r, _, _)| *r == id) {
                    Some(i) => {
                        let (_, key, op) = self.pending.remove(i);
                        if key != s("idempotencyKey") || op != s("operation") {
                            self.violation(format!(
                                "PC-4.3: the result for `{id}` does not echo its invoke's idempotencyKey and operation"
                            ));
                        }
                    }
                    None if self.aborted.contains(&id) => self.violation(format!(
                        "PC-4.5: a result for `{id}` after it was answered aborted:true (MUST NOT send its result)"
                    )),
                    None => self.violation(format!(
                        "PC-4.3: a result for `{id}`, which is no outstanding invoke (unknown request or a duplicate result)"
                    )),
                }
                if !ok {
                    self.error_code(v);
                }
            }
            FrameKind::Aborted(flag) => {
                let (id, target) = (s("requestId"), s("targetRequestId"));
                match self.aborts.iter().position(|(r, t)| *r == id && *t == target) {
                    Some(i) => {
                        self.aborts.remove(i);
                    }
                    None => self.violation(format!(
                        "PC-4.3: aborted `{id}` for `{target}` answers no abort sent (requestId and targetRequestId)"
                    )),
                }
                if flag {
                    match self.pending.iter().position(|(r, _, _)| *r == target) {
                        Some(i) => {
                            self.pending.remove(i);
                            self.aborted.insert(target);
                        }
                        None => self.violation(format!(
                            "PC-4.5: aborted:true for `{target}`, whose result was already sent or which was never invoked (aborted:false)"
                        )),
                    }
                } else if v.get("error").is_some() {
                    self.error_code(v);
                }
            }
            _ => {}
        }
    }

    fn error_code(&self, v: &Value) {
        if let Err(e) = check_adapter_error_code(&v["error"], "error") {
            self.violation(format!("PC-5.3.errors: {} at `{}`", e.message, e.field()));
        }
    }
}
