//! What `watch` prints: one line per violation (human) or one JSON object per event, and the
//! summary at the end. Every string that came off the wire passes through a [`Redactor`]
//! first: the handles of the connection's binds, and any `capabilityHandle` value, never
//! reach the output.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::io::Write;
use std::rc::Rc;

use serde_json::{json, Value};

use crate::contract::frame::value_contains_handle;
use crate::contract::secret::CapabilityHandle;
use crate::wire::decode_strict;

/// The output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum WatchFormat {
    /// One line per violation, a summary at the end.
    Human,
    /// One JSON object per line (`event`: `violation`, `connection`, `note`, `summary`).
    Json,
}

/// One violation, ready to print (already redacted).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// `to-adapter`, `to-daemon` or `to-client`.
    pub direction: &'static str,
    /// The clause (`PC-4.3`; a PC-9 known conflict names its clause and says so in `note`).
    pub clause: String,
    /// The wire code the receiving side fails with.
    pub code: String,
    /// The field (`line`, `operations`, …), empty for an exchange rule.
    pub field: String,
    /// The connection's number (1, 2, … in accept order).
    pub connection: u64,
    /// The frame's `requestId`, when it has one.
    pub request_id: Option<String>,
    /// What happened.
    pub message: String,
    /// The start of the line (redacted).
    pub excerpt: String,
    /// `known-conflict` for a PC-9 row: reported, and not counted as a violation.
    pub known_conflict: bool,
}

/// The bound of an excerpt, in bytes.
pub const EXCERPT: usize = 600;

const REDACTED: &str = "<redacted>";

/// Removes every handle this connection has seen from text taken off the wire.
#[derive(Default, Clone)]
pub struct Redactor {
    handles: Vec<CapabilityHandle>,
}

impl Redactor {
    /// Learn a handle (from a bind or a descriptor, valid or not).
    pub fn learn(&mut self, h: CapabilityHandle) {
        if !h.expose().is_empty() && !self.handles.contains(&h) {
            self.handles.push(h);
        }
    }

    /// Learn every `capabilityHandle` string inside `v`.
    pub fn learn_from(&mut self, v: &Value) {
        match v {
            Value::Object(m) => {
                for (k, x) in m {
                    match (k.as_str(), x) {
                        ("capabilityHandle", Value::String(s)) => self.learn(CapabilityHandle::new(s.clone())),
                        _ => self.learn_from(x),
                    }
                }
            }
            Value::Array(a) => a.iter().for_each(|x| self.learn_from(x)),
            _ => {}
        }
    }

    /// The handles learned.
    pub fn handles(&self) -> &[CapabilityHandle] {
        &self.handles
    }

    /// `text` with every known handle replaced.
    pub fn text(&self, text: &str) -> String {
        let mut out = text.to_string();
        for h in &self.handles {
            out = out.replace(h.expose(), REDACTED);
        }
        out
    }

    /// A bounded, redacted excerpt of a line. A line that holds a handle in a spelling the
    /// plain replacement cannot see (JSON escapes) is withheld.
    pub fn excerpt(&self, line: &[u8]) -> String {
        let text = String::from_utf8_lossy(line);
        let mut r = self.clone();
        let decoded = decode_strict(line).ok();
        if let Some(v) = &decoded {
            r.learn_from(v);
        }
        let mut out = redact_members(&r.text(&text));
        if let Some(v) = &decoded {
            let leaks = |x: &Value| r.handles.iter().any(|h| value_contains_handle(x, h));
            if leaks(v) && decode_strict(out.as_bytes()).map_or(true, |o| leaks(&o)) {
                return "<excerpt withheld: the line holds a capability handle>".into();
            }
        }
        if out.len() > EXCERPT {
            let mut cut = EXCERPT;
            while !out.is_char_boundary(cut) {
                cut -= 1;
            }
            out = format!("{}… ({} bytes)", &out[..cut], line.len());
        }
        out
    }
}

/// Replace the value of every `"capabilityHandle":"…"` member in raw text (whatever the handle).
pub fn redact_members(text: &str) -> String {
    const KEY: &str = "\"capabilityHandle\"";
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find(KEY) {
        out.push_str(&rest[..i + KEY.len()]);
        rest = &rest[i + KEY.len()..];
        let trimmed = rest.trim_start_matches([' ', ':', '\t']);
        let skipped = rest.len() - trimmed.len();
        out.push_str(&rest[..skipped]);
        rest = trimmed;
        if let Some(body) = rest.strip_prefix('"') {
            // The string ends at the first unescaped quote (or the end of the text).
            let mut end = body.len();
            let mut esc = false;
            for (j, c) in body.char_indices() {
                match c {
                    '\\' if !esc => esc = true,
                    '"' if !esc => {
                        end = j + 1;
                        break;
                    }
                    _ => esc = false,
                }
            }
            out.push('"');
            out.push_str(REDACTED);
            out.push('"');
            rest = &body[end.min(body.len())..];
        }
    }
    out.push_str(rest);
    out
}

#[derive(Default)]
struct State {
    connections: u64,
    open: u64,
    frames: BTreeMap<&'static str, u64>,
    violations: BTreeMap<&'static str, u64>,
    known: u64,
    by_clause: BTreeMap<String, u64>,
}

/// The shared output of one `watch` run.
#[derive(Clone)]
pub struct Reporter {
    format: WatchFormat,
    state: Rc<RefCell<State>>,
    out: Rc<RefCell<Box<dyn Write>>>,
}

impl Reporter {
    /// A reporter writing to `out`.
    pub fn new(format: WatchFormat, out: Box<dyn Write>) -> Self {
        Reporter { format, state: Rc::default(), out: Rc::new(RefCell::new(out)) }
    }

    fn emit(&self, human: Option<String>, json: Value) {
        let mut out = self.out.borrow_mut();
        let _ = match self.format {
            WatchFormat::Json => writeln!(out, "{json}"),
            WatchFormat::Human => match human {
                Some(h) => writeln!(out, "{h}"),
                None => Ok(()),
            },
        };
        let _ = out.flush();
    }

    /// A frame was judged.
    pub fn frame(&self, direction: &'static str) {
        *self.state.borrow_mut().frames.entry(direction).or_default() += 1;
    }

    /// Report one violation.
    pub fn violation(&self, v: Violation) {
        {
            let mut s = self.state.borrow_mut();
            if v.known_conflict {
                s.known += 1;
            } else {
                *s.violations.entry(v.direction).or_default() += 1;
                *s.by_clause.entry(v.clause.clone()).or_default() += 1;
            }
        }
        let rid = v.request_id.as_deref().map(|r| format!(" requestId={r}")).unwrap_or_default();
        let field = if v.field.is_empty() { String::new() } else { format!(" at `{}`", v.field) };
        let tag = if v.known_conflict { "known conflict (PC-9)" } else { "violation" };
        let human = format!(
            "conn {} {} {tag} {} {}{field}{rid}: {}\n    {}",
            v.connection, v.direction, v.clause, v.code, v.message, v.excerpt
        );
        let mut j = json!({
            "event": "violation",
            "direction": v.direction,
            "clause": v.clause,
            "code": v.code,
            "field": v.field,
            "connection": v.connection,
            "requestId": v.request_id,
            "message": v.message,
            "excerpt": v.excerpt,
        });
        if v.known_conflict {
            j["event"] = json!("known-conflict");
        }
        self.emit(Some(human), j);
    }

    /// A connection was accepted and its upstream connected.
    pub fn opened(&self, id: u64) {
        {
            let mut s = self.state.borrow_mut();
            s.connections += 1;
            s.open += 1;
        }
        self.emit(None, json!({"event": "connection", "connection": id, "state": "open"}));
    }

    /// A connection ended.
    pub fn closed(&self, id: u64) {
        self.state.borrow_mut().open -= 1;
        self.emit(None, json!({"event": "connection", "connection": id, "state": "closed"}));
    }

    /// Something about the proxy itself (not a peer's violation).
    pub fn note(&self, id: Option<u64>, text: &str) {
        let human = match id {
            Some(id) => format!("conn {id} note: {text}"),
            None => format!("note: {text}"),
        };
        self.emit(Some(human), json!({"event": "note", "connection": id, "message": text}));
    }

    /// Violations seen so far (known conflicts excluded).
    pub fn violations(&self) -> u64 {
        self.state.borrow().violations.values().sum()
    }

    /// Print the summary.
    pub fn summary(&self) {
        let s = self.state.borrow();
        let total: u64 = s.violations.values().sum();
        let human = format!(
            "summary: {} connection(s), frames {:?}, {total} violation(s) {:?}, {} known conflict(s), by clause {:?}",
            s.connections, s.frames, s.violations, s.known, s.by_clause
        );
        let j = json!({
            "event": "summary",
            "connections": s.connections,
            "frames": s.frames,
            "violations": total,
            "byDirection": s.violations,
            "byClause": s.by_clause,
            "knownConflicts": s.known,
        });
        drop(s);
        self.emit(Some(human), j);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: &str = "aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789_-AB";

    #[test]
    fn excerpts_never_hold_a_handle() {
        let mut r = Redactor::default();
        // A handle inside a capabilityHandle member is redacted even before it is learned.
        let bind = format!(r#"{{"kind":"bind","capabilityHandle":"{H}","x":1}}"#);
        let e = r.excerpt(bind.as_bytes());
        assert!(!e.contains(H) && e.contains("<redacted>"), "{e}");
        r.learn(CapabilityHandle::new(H));
        // A learned handle is redacted anywhere, and in messages.
        let reflected = format!(r#"{{"kind":"result","error":{{"message":"got {H}"}}}}"#);
        assert!(!r.excerpt(reflected.as_bytes()).contains(H));
        assert_eq!(r.text(&format!("id {H}")), "id <redacted>");
        // An escaped spelling is withheld whole.
        let escaped = format!(r#"{{"kind":"result","m":"\u0061{}"}}"#, &H[1..]);
        assert_eq!(r.excerpt(escaped.as_bytes()), "<excerpt withheld: the line holds a capability handle>");
        // Long lines are cut after redaction, so no prefix of a handle survives the cut.
        let long = format!("{}{H}", "x".repeat(EXCERPT - 5));
        let e = r.excerpt(long.as_bytes());
        assert!(!e.contains(&H[..5]), "{e}");
    }
}
