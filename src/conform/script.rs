//! The session-vector engine both runners share (`vectors/sessions/*.json`, format in
//! `vectors/README.md`). A session is a catalogue entry plus steps run in order; what a step's
//! frame is built from, what a placeholder stands for and how an expectation is observed
//! belong to the runner (a [`Dialect`]): the adapter runner speaks the tool-adapter frames
//! ([`super::adapter::script`]), the daemon runner the client commands
//! ([`super::daemon::script`]).
//!
//! Steps, in order, on one connection unless `connect` opens a new one:
//! - `{"connect": {}}` a fresh connection;
//! - `{"bind": {}}` the live bind, which must be answered `bound` (adapter runner only);
//! - `{"send": {"base": B, "set": {…}, "remove": […]}, "contract": V}` a frame built from the
//!   runner's base `B`, with keys set or removed (a key starting with `/` is a JSON Pointer);
//!   `V` is the contract's verdict on it, checked by the validator tests;
//! - `{"sendRaw": "text"}` one raw line (LF added);
//! - `{"expect": …}` the next line, as the runner observes it;
//! - `{"silence": ms}` nothing may arrive for that long.

use std::time::Duration;

use serde::Deserialize;
use serde_json::{Map, Value};

use super::adapter::conn::{Conn, Recv};
use super::case::{CaseMeta, Outcome};

/// One session vector.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Session {
    /// The catalogue entry.
    #[serde(flatten)]
    pub meta: CaseMeta,
    /// The steps.
    pub steps: Vec<Step>,
}

/// One step (exactly one of the fields, `contract` going with `send`).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Step {
    /// Open a fresh connection.
    pub connect: Option<Value>,
    /// Send the live bind and require `bound`.
    pub bind: Option<Value>,
    /// Send a built frame.
    pub send: Option<Send>,
    /// The contract's verdict on the built frame (`valid` or a code).
    pub contract: Option<String>,
    /// Send a raw line.
    pub send_raw: Option<String>,
    /// Expect the next line.
    pub expect: Option<Value>,
    /// Expect nothing for this many ms.
    pub silence: Option<u64>,
}

impl Step {
    /// How many of the step's actions are set (a well-formed step has exactly one).
    pub fn actions(&self) -> usize {
        [
            self.connect.is_some(),
            self.bind.is_some(),
            self.send.is_some(),
            self.send_raw.is_some(),
            self.expect.is_some(),
            self.silence.is_some(),
        ]
        .iter()
        .filter(|x| **x)
        .count()
    }
}

/// A frame to build.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Send {
    /// The runner's base frame.
    pub base: String,
    /// Keys to set (placeholders expanded); `/a/b` is a JSON Pointer.
    #[serde(default)]
    pub set: Map<String, Value>,
    /// Keys to remove; `/a/b` is a JSON Pointer.
    #[serde(default)]
    pub remove: Vec<String>,
}

/// Parse a sessions file.
pub fn parse(text: &str) -> Result<Vec<Session>, serde_json::Error> {
    serde_json::from_str(text)
}

/// Load session vectors from `paths` (`--session FILE`, e.g. recorded by `pi-conform watch
/// --record`): every id starts with `prefix` (`adapter.` / `daemon.`), is unique, and is none of
/// `taken` (the built-in case ids); every step does exactly one thing.
pub fn load(paths: &[std::path::PathBuf], prefix: &str, taken: &[String]) -> Result<Vec<Session>, String> {
    let mut out: Vec<Session> = Vec::new();
    for p in paths {
        let text = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
        let sessions = parse(&text).map_err(|e| format!("{}: not a sessions file: {e}", p.display()))?;
        for s in sessions {
            let id = &s.meta.id;
            if !id.starts_with(prefix) {
                return Err(format!("{}: session {id} does not start with `{prefix}`", p.display()));
            }
            if taken.contains(id) || out.iter().any(|o| &o.meta.id == id) {
                return Err(format!("{}: session id {id} is used twice", p.display()));
            }
            if let Some(i) = s.steps.iter().position(|x| x.actions() != 1) {
                return Err(format!("{}: session {id}: step {} does not do exactly one thing", p.display(), i + 1));
            }
            out.push(s);
        }
    }
    Ok(out)
}

/// Apply `set` (values already expanded by `expand`) and `remove` to `frame`.
pub fn patch(frame: &mut Value, send: &Send, expand: impl Fn(&Value) -> Value) -> Result<(), String> {
    for (k, v) in &send.set {
        let v = expand(v);
        match k.strip_prefix('/') {
            None => {
                frame.as_object_mut().ok_or("the base is not an object")?.insert(k.clone(), v);
            }
            Some(_) => {
                let (parent, last) = k.rsplit_once('/').unwrap_or(("", k));
                let p = frame.pointer_mut(parent).and_then(Value::as_object_mut);
                p.ok_or_else(|| format!("no object at {parent} to set {k} in"))?.insert(last.to_string(), v);
            }
        }
    }
    for k in &send.remove {
        match k.strip_prefix('/') {
            None => {
                frame.as_object_mut().map(|m| m.remove(k));
            }
            Some(_) => {
                let (parent, last) = k.rsplit_once('/').unwrap_or(("", k));
                if let Some(m) = frame.pointer_mut(parent).and_then(Value::as_object_mut) {
                    m.remove(last);
                }
            }
        }
    }
    Ok(())
}

/// Expand `<spaces:N>` in a raw line (N spaces: a line of a given size without writing it out).
pub fn expand_spaces(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find("<spaces:") {
        out.push_str(&rest[..i]);
        let tail = &rest[i + "<spaces:".len()..];
        match tail.split_once('>').and_then(|(n, after)| n.parse::<usize>().ok().map(|n| (n, after))) {
            Some((n, after)) if n <= 64 << 20 => {
                out.push_str(&" ".repeat(n));
                rest = after;
            }
            _ => {
                out.push_str("<spaces:");
                rest = tail;
            }
        }
    }
    out.push_str(rest);
    out
}

/// Whether `got` holds every member of `pattern`: objects match member by member (partially),
/// the string `<any>` matches any value, `<invalid-uuid>` a string `invalid-<uuid>`, and
/// anything else must be equal.
pub fn matches(pattern: &Value, got: &Value) -> bool {
    match (pattern, got) {
        (Value::Object(p), Value::Object(g)) => p.iter().all(|(k, v)| g.get(k).is_some_and(|x| matches(v, x))),
        (Value::String(p), _) if p == "<any>" => true,
        (Value::String(p), Value::String(g)) if p == "<invalid-uuid>" => {
            g.strip_prefix("invalid-").is_some_and(|u| uuid::Uuid::parse_str(u).is_ok())
        }
        _ => pattern == got,
    }
}

/// What an `expect` step observed.
pub struct Observed {
    /// The observation's token.
    pub token: String,
    /// Whether it is what the step expected.
    pub ok: bool,
    /// Violations found while observing it (each fails the case).
    pub problems: Vec<String>,
}

/// How a session's observed outcome is formed from its `expect` steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scoring {
    /// The last `expect` step's token; an earlier one that does not match is a problem.
    Last,
    /// Every `expect` step's token, joined by `+` (`error:unknown_operation+ok`).
    Joined,
}

/// What a runner supplies to the engine.
pub trait Dialect {
    /// How the observed outcome is formed.
    const SCORING: Scoring;
    /// A fresh connection to the target.
    fn connect(&mut self) -> Result<Conn, Outcome>;
    /// The `bind` step.
    fn bind(&mut self, _conn: &mut Conn) -> Result<(), Outcome> {
        Err(Outcome::Error("this runner has no `bind` step".into()))
    }
    /// Build the frame of a `send` step.
    fn build(&mut self, send: &Send) -> Result<Value, String>;
    /// Expand the placeholders of a raw line.
    fn expand_raw(&self, raw: &str) -> String;
    /// Observe an `expect` step; `Err` ends the case with that outcome (inconclusive).
    fn expect(&mut self, conn: &mut Conn, want: &Value) -> Result<Observed, Outcome>;
    /// One step's budget.
    fn step(&self) -> Duration;
}

/// Run `s` with the dialect `d`.
pub fn run<D: Dialect>(d: &mut D, s: &Session) -> Outcome {
    let id = &s.meta.id;
    let mut conn = match d.connect() {
        Ok(conn) => conn,
        Err(o) => return o,
    };
    let mut problems = Vec::new();
    let mut tokens = Vec::new();
    let last_expect = s.steps.iter().rposition(|x| x.expect.is_some());
    for (i, step) in s.steps.iter().enumerate() {
        if step.actions() != 1 {
            return Outcome::Error(format!("session {id}: step {} does not do exactly one thing", i + 1));
        }
        if step.connect.is_some() {
            conn = match d.connect() {
                Ok(conn) => conn,
                Err(o) => return o,
            };
        } else if step.bind.is_some() {
            if let Err(o) = d.bind(&mut conn) {
                return o;
            }
        } else if let Some(send) = &step.send {
            match d.build(send) {
                Ok(f) => conn.send(&f),
                Err(e) => return Outcome::Error(format!("session {id}: {e}")),
            }
        } else if let Some(raw) = &step.send_raw {
            let mut line = d.expand_raw(raw).into_bytes();
            line.push(b'\n');
            conn.send_raw(&line);
        } else if let Some(ms) = step.silence {
            let r = conn.recv_within(Duration::from_millis(ms));
            if r != Recv::Timeout {
                problems.push(format!("expected silence for {ms} ms, got `{}`", r.describe()));
            }
        } else if let Some(want) = &step.expect {
            let o = match d.expect(&mut conn, want) {
                Ok(o) => o,
                Err(o) => return o,
            };
            problems.extend(o.problems);
            match D::SCORING {
                Scoring::Last if Some(i) == last_expect => tokens.push(o.token),
                Scoring::Last if !o.ok => {
                    problems.push(format!("step {}: expected {want}, observed `{}`", i + 1, o.token))
                }
                Scoring::Last => {}
                Scoring::Joined => tokens.push(o.token),
            }
        }
    }
    if tokens.is_empty() {
        tokens.push("no-expectation".into());
    }
    Outcome::with(tokens.join("+"), problems)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn patterns_match_partially_with_wildcards() {
        assert!(matches(
            &json!({"ok": false, "error": {"code": "x"}}),
            &json!({"ok": false, "error": {"code": "x", "message": "m"}, "k": 1})
        ));
        assert!(!matches(&json!({"ok": false}), &json!({"ok": true})));
        assert!(matches(&json!({"a": "<any>"}), &json!({"a": [1]})));
        assert!(!matches(&json!({"a": "<any>"}), &json!({"b": 1})), "<any> still needs the member");
        let rid = json!({"requestId": "<invalid-uuid>"});
        assert!(matches(&rid, &json!({"requestId": "invalid-67e55044-10b1-426f-9247-bb680e5fe0c8"})));
        assert!(!matches(&rid, &json!({"requestId": "invalid-1"})));
        assert!(!matches(&rid, &json!({"requestId": 42})));
    }

    #[test]
    fn set_and_remove_take_top_level_keys_and_pointers() {
        let mut f = json!({"a": 1, "payload": {"b": 2, "c": {"d": 3}}});
        let send = Send {
            base: "x".into(),
            set: serde_json::from_value(json!({"e": "<x>", "/payload/c/d": 4, "/payload/n": true})).unwrap(),
            remove: vec!["a".into(), "/payload/b".into()],
        };
        patch(&mut f, &send, |v| if v == &json!("<x>") { json!(9) } else { v.clone() }).unwrap();
        assert_eq!(f, json!({"e": 9, "payload": {"c": {"d": 4}, "n": true}}));
        let bad =
            Send { base: "x".into(), set: serde_json::from_value(json!({"/no/such": 1})).unwrap(), remove: vec![] };
        assert!(patch(&mut f, &bad, Value::clone).unwrap_err().contains("/no"));
    }

    #[test]
    fn spaces_expand_to_a_line_of_that_size() {
        assert_eq!(expand_spaces("a<spaces:3>b"), "a   b");
        assert_eq!(expand_spaces("<spaces:x>"), "<spaces:x>");
        assert_eq!(expand_spaces("<spaces:1048592>").len(), 1048592);
    }
}
