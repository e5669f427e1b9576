//! Session vectors (`vectors/sessions/adapter.json`): adapter cases that are a pure
//! send/expect sequence, written as data instead of Rust (DESIGN "Data first"). Each session
//! is a catalogue entry (id, clause, level, tags, requirement, accepted outcomes) plus its
//! steps; the engine runs it like any case (fixture, side-effect oracle, secret scan, every
//! frame judged). The format is documented in `vectors/README.md`.
//!
//! Steps, in order, on one connection unless `connect` opens a new one:
//! - `{"connect": {}}` a fresh connection;
//! - `{"bind": {}}` the live bind, which must be answered `bound` (a precondition: anything
//!   else makes the case inconclusive);
//! - `{"send": {"base": B, "set": {…}, "remove": […]}, "contract": V}` a frame built from
//!   `B` — `bind` (the live bind), `invoke`/`abort`/`revoke` (the live identity with that
//!   kind, and for an invoke a fresh `requestId` and `idempotencyKey`) — with top-level keys
//!   set or removed; `V` is the contract's verdict on it (`valid` or a code), checked by the
//!   validator tests on the worked example;
//! - `{"sendRaw": "text"}` one raw line (LF added);
//! - `{"expect": "close" | "bound" | "revoked" | {"result": pattern}}` the next line; a
//!   `result` is read for the last invoke's `requestId` and must match the partial pattern;
//! - `{"silence": ms}` nothing may arrive for that long.
//!
//! Placeholders inside `set` strings: `<handle>`, `<other-handle>` (a well-formed handle that
//! is not the live one), `<adapterId>`, `<adapterVersion>`, `<hostInstanceId>`, `<sessionId>`,
//! `<requestId>` (the last invoke's), and the numbers `<generation>`, `<generation+1>`. The
//! case's outcome is the observation of the last `expect` step; an earlier `expect` that does
//! not match is a problem of the case.

use serde_json::{json, Map, Value};

use super::conn::Conn;
use super::{token, Ctx};
use crate::conform::case::{CaseMeta, Outcome};
pub use crate::conform::script::{matches, Send, Session, Step};
use crate::conform::script::{Dialect, Observed, Scoring};

/// The built-in session vectors.
pub const SESSIONS: &str = include_str!("../../../vectors/sessions/adapter.json");

/// Parse the built-in sessions.
pub fn sessions() -> Vec<Session> {
    crate::conform::script::parse(SESSIONS).expect("the built-in session vectors are valid")
}

/// Their catalogue entries.
pub fn catalogue() -> Vec<CaseMeta> {
    sessions().into_iter().map(|s| s.meta).collect()
}

/// What placeholders stand for.
pub struct Values {
    /// The bind frame (identity, handle, operations, limits).
    pub bind: Value,
    /// The last invoke's requestId.
    pub request_id: String,
}

impl Values {
    fn identity(&self) -> Map<String, Value> {
        let mut m = Map::new();
        for k in ["protocolVersion", "adapterId", "adapterVersion", "hostInstanceId", "sessionId", "generation"] {
            m.insert(k.into(), self.bind[k].clone());
        }
        m
    }

    fn expand(&self, v: &Value) -> Value {
        let handle = self.bind["capabilityHandle"].as_str().unwrap_or_default();
        let generation = self.bind["generation"].as_u64().unwrap_or(0);
        match v {
            Value::String(s) => match s.as_str() {
                "<generation>" => json!(generation),
                "<generation+1>" => json!(generation + 1),
                _ => {
                    let other: String = handle.chars().rev().collect();
                    let other = if other == handle { "Z".repeat(handle.len()) } else { other };
                    let mut out = s.replace("<handle>", handle).replace("<other-handle>", &other);
                    for k in ["adapterId", "adapterVersion", "hostInstanceId", "sessionId"] {
                        out = out.replace(&format!("<{k}>"), self.bind[k].as_str().unwrap_or_default());
                    }
                    json!(out.replace("<requestId>", &self.request_id))
                }
            },
            Value::Array(a) => Value::Array(a.iter().map(|x| self.expand(x)).collect()),
            Value::Object(m) => Value::Object(m.iter().map(|(k, x)| (k.clone(), self.expand(x))).collect()),
            x => x.clone(),
        }
    }

    /// Build a frame; `fresh` gives an invoke's new `(requestId, idempotencyKey)`.
    pub fn build(&mut self, s: &Send, fresh: (String, String)) -> Result<Value, String> {
        let f = match s.base.as_str() {
            "bind" => self.bind.as_object().cloned().unwrap_or_default(),
            kind @ ("invoke" | "abort" | "revoke") => {
                let mut m = Map::new();
                m.insert("protocolVersion".into(), json!("1.0"));
                m.insert("kind".into(), json!(kind));
                m.extend(self.identity());
                if kind == "invoke" {
                    self.request_id = fresh.0;
                    m.insert("requestId".into(), json!(self.request_id));
                    m.insert("idempotencyKey".into(), json!(fresh.1));
                }
                m
            }
            other => return Err(format!("unknown base {other}")),
        };
        let mut f = Value::Object(f);
        crate::conform::script::patch(&mut f, s, |v| self.expand(v))?;
        if let Some(id) = s.set.get("requestId") {
            self.request_id = self.expand(id).as_str().unwrap_or_default().to_string();
        }
        Ok(f)
    }
}

/// The adapter runner's dialect: tool-adapter frames on the adapter's socket.
struct Adapter<'c, 'a> {
    c: &'c mut Ctx<'a>,
    values: Values,
}

impl Dialect for Adapter<'_, '_> {
    const SCORING: Scoring = Scoring::Last;

    fn connect(&mut self) -> Result<Conn, Outcome> {
        self.c.connect()
    }

    fn bind(&mut self, conn: &mut Conn) -> Result<(), Outcome> {
        conn.send(&self.values.bind);
        let r = conn.recv();
        if r.frame().is_none_or(|f| f.kind() != Some("bound")) {
            return Err(Outcome::Error(format!(
                "inconclusive: the valid bind was answered `{}`, not bound",
                token(&r)
            )));
        }
        Ok(())
    }

    fn build(&mut self, send: &Send) -> Result<Value, String> {
        let (id, key) = self.c.ids();
        let fresh = (id, self.c.unique_key(&key));
        self.values.build(send, fresh)
    }

    fn expand_raw(&self, raw: &str) -> String {
        self.values.expand(&json!(raw)).as_str().unwrap_or_default().to_string()
    }

    fn expect(&mut self, conn: &mut Conn, want: &Value) -> Result<Observed, Outcome> {
        let (token, ok) = match want {
            Value::String(w) if w == "close" => {
                let t = token(&conn.expect_close(self.c.step()));
                let ok = t == "closed";
                (t, ok)
            }
            Value::String(kind) => {
                let t = token(&conn.recv());
                let ok = &t == kind;
                (t, ok)
            }
            Value::Object(m) if m.contains_key("result") => {
                // A pattern naming its requestId (a recorded session with invokes in flight
                // together) reads that request's result; else the last invoke's.
                let id = m["result"].get("requestId").and_then(Value::as_str).map(|r| self.values.expand(&json!(r)));
                let id = id.as_ref().and_then(Value::as_str).unwrap_or(&self.values.request_id).to_string();
                let r = conn.recv_for(&id);
                let pattern = self.values.expand(&m["result"]);
                let ok = r.frame().is_some_and(|f| f.kind() == Some("result") && matches(&pattern, f));
                (token(&r), ok)
            }
            other => return Err(Outcome::Error(format!("bad expectation {other}"))),
        };
        Ok(Observed { token, ok, problems: Vec::new() })
    }

    fn step(&self) -> std::time::Duration {
        self.c.step()
    }
}

/// Run the session `id`.
pub fn run(c: &mut Ctx<'_>, id: &str) -> Outcome {
    let found = sessions().into_iter().chain(c.target.sessions.iter().cloned()).find(|s| s.meta.id == id);
    let Some(s) = found else {
        return Outcome::Error(format!("no session vector {id}"));
    };
    // A session may change the paths its mutating invokes name (a recorded write).
    for step in &s.steps {
        let Some(send) = step.send.as_ref().filter(|x| x.base == "invoke") else { continue };
        let op = send.set.get("operation").and_then(Value::as_str).and_then(|o| o.parse().ok());
        if op.is_some_and(crate::contract::operation::is_mutating) {
            if let Some(p) = send.set.get("payload").and_then(|p| p.get("path")).and_then(Value::as_str) {
                c.allow(&[p]);
            }
        }
    }
    let values = Values { bind: c.bind_frame(), request_id: String::new() };
    crate::conform::script::run(&mut Adapter { c, values }, &s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::frame::{judge_adapter_frame, Binding, Direction};

    /// The worked example's bind (the frame vectors' base).
    fn worked_bind() -> Value {
        let p = format!("{}/vectors/bases/bind.json", env!("CARGO_MANIFEST_DIR"));
        serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
    }

    fn worked_binding() -> Binding {
        let p = format!("{}/vectors/bases/descriptor.json", env!("CARGO_MANIFEST_DIR"));
        let d: Value = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
        Binding::from(&crate::contract::descriptor::admit_descriptor(&d, None).unwrap())
    }

    /// Every built frame of every session, instantiated on the worked example, gets the
    /// verdict its step declares: the validator checks the session vectors' frames.
    #[test]
    fn every_sent_frame_has_the_contract_verdict_its_step_declares() {
        let b = worked_binding();
        let mut checked = 0;
        for s in sessions() {
            let mut v = Values { bind: worked_bind(), request_id: String::new() };
            for (i, step) in s.steps.iter().enumerate() {
                let Some(send) = &step.send else { continue };
                let f = v.build(send, (format!("req-{i}"), format!("key-{i}"))).unwrap();
                let line = serde_json::to_vec(&f).unwrap();
                let got = match judge_adapter_frame(&line, &b, Direction::ToAdapter) {
                    Ok(_) => "valid".to_string(),
                    Err(e) => e.error.code.as_str().to_string(),
                };
                let want =
                    step.contract.as_deref().unwrap_or_else(|| panic!("{}: step {i} declares no verdict", s.meta.id));
                assert_eq!(got, want, "{} step {}", s.meta.id, i + 1);
                checked += 1;
            }
        }
        assert!(checked >= 10, "{checked}");
    }

    #[test]
    fn sessions_are_well_formed_and_do_not_clash_with_built_in_cases() {
        let built_in: Vec<CaseMeta> = serde_json::from_str(super::super::CATALOGUE).unwrap();
        let reg = super::super::registry();
        for s in sessions() {
            assert!(s.meta.id.starts_with("adapter."), "{}", s.meta.id);
            assert!(!built_in.iter().any(|m| m.id == s.meta.id), "{} is also in adapter-cases.json", s.meta.id);
            assert!(!reg.iter().any(|(id, _)| *id == s.meta.id), "{} is also implemented in Rust", s.meta.id);
            assert!(!s.steps.is_empty() && s.steps.iter().any(|x| x.expect.is_some()), "{}", s.meta.id);
            for st in &s.steps {
                let set = [
                    st.connect.is_some(),
                    st.bind.is_some(),
                    st.send.is_some(),
                    st.send_raw.is_some(),
                    st.expect.is_some(),
                    st.silence.is_some(),
                ];
                assert_eq!(set.iter().filter(|x| **x).count(), 1, "{}: a step does exactly one thing", s.meta.id);
            }
        }
    }

    #[test]
    fn patterns_match_partially_and_placeholders_expand() {
        assert!(matches(
            &json!({"ok": false, "error": {"code": "x"}}),
            &json!({"ok": false, "error": {"code": "x", "message": "m"}, "k": 1})
        ));
        assert!(!matches(&json!({"ok": false}), &json!({"ok": true})));
        let mut v = Values { bind: worked_bind(), request_id: "r-9".into() };
        assert_eq!(v.expand(&json!("<generation+1>")), json!(3));
        let h = worked_bind()["capabilityHandle"].as_str().unwrap().to_string();
        let other = v.expand(&json!("<other-handle>"));
        assert!(other != json!(h) && other.as_str().unwrap().len() == h.len());
        let f = v
            .build(&Send { base: "invoke".into(), set: Map::new(), remove: vec![] }, ("r-1".into(), "k-1".into()))
            .unwrap();
        assert_eq!((f["requestId"].as_str(), v.request_id.as_str()), (Some("r-1"), "r-1"));
    }
}
