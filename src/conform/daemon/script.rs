//! Session vectors of the daemon runner (`vectors/sessions/daemon.json`): daemon cases that
//! are a pure send/expect sequence on a client connection, written as data and run by the
//! shared engine ([`crate::conform::script`]). Cases that need concurrency, timing, a
//! restart or the probe adapter stay in Rust ([`super::cases`]).
//!
//! Bases of a `send` step (each with a fresh `requestId`): `handshake` (a 2.0 handshake with
//! an empty payload), `open` (a 2.0 open of the case session, generation 1, tools `"none"`,
//! the `--model` when given) and `wake` (a 2.0 wake of the case session, generation 1, with an
//! idempotency key). Placeholders in `set` values and raw lines: `<sessionId>`,
//! `<hostInstanceId>`, `<cwd>`, `<requestId>` (the last sent), and in raw lines `<spaces:N>`.
//!
//! Expectations (the next response; events are skipped):
//! - `"close"`: the connection closes (token `closed`, else `open`);
//! - `{"response": P}`: token `ok` or `error:<code>`; a response that does not match the
//!   partial pattern `P` is a problem of the case;
//! - `{"refusal": {"code": C, "member": M}}`: judged as every provoked refusal is
//!   ([`super::cases::refusal`]): `error:C@M` when the refusal names `M` (`error:C` without a
//!   member), `accepted`, and inconclusive when the daemon refused for another reason;
//!   `"match": P` adds a pattern the refusal must match.
//!
//! `"as": T` replaces the token of an expectation that was met by `T`, with
//! `<protocolVersion>` standing for the response's version. The session's observed outcome is
//! every expectation's token joined by `+` (`error:unknown_operation+ok`).

use std::time::Duration;

use serde_json::{json, Value};

use super::cases::refusal;
use super::{rtoken, DCtx};
use crate::conform::adapter::conn::{Conn, Recv};
use crate::conform::case::{CaseMeta, Outcome};
use crate::conform::script::{expand_spaces, matches, patch, Dialect, Observed, Scoring, Send, Session};

/// The built-in daemon session vectors.
pub const SESSIONS: &str = include_str!("../../../vectors/sessions/daemon.json");

/// Parse the built-in sessions.
pub fn sessions() -> Vec<Session> {
    crate::conform::script::parse(SESSIONS).expect("the built-in daemon session vectors are valid")
}

/// Their catalogue entries.
pub fn catalogue() -> Vec<CaseMeta> {
    sessions().into_iter().map(|s| s.meta).collect()
}

/// What the placeholders stand for.
#[derive(Clone, Debug)]
pub struct Values {
    /// The case session.
    pub session: String,
    /// The daemon's hostInstanceId.
    pub host: String,
    /// The sessions' cwd.
    pub cwd: String,
    /// `payload.model` of an open, when the daemon needs one.
    pub model: Option<Value>,
    /// The last sent requestId.
    pub request_id: String,
}

impl Values {
    fn expand(&self, v: &Value) -> Value {
        match v {
            Value::String(s) => json!(s
                .replace("<sessionId>", &self.session)
                .replace("<hostInstanceId>", &self.host)
                .replace("<cwd>", &self.cwd)
                .replace("<requestId>", &self.request_id)),
            Value::Array(a) => Value::Array(a.iter().map(|x| self.expand(x)).collect()),
            Value::Object(m) => Value::Object(m.iter().map(|(k, x)| (k.clone(), self.expand(x))).collect()),
            x => x.clone(),
        }
    }

    /// Build a command from its base with the request id `rid`.
    pub fn build(&mut self, s: &Send, rid: String) -> Result<Value, String> {
        let mut f = match s.base.as_str() {
            "handshake" => json!({"protocolVersion": "2.0", "requestId": rid, "operation": "handshake", "payload": {}}),
            "open" => {
                let mut v = json!({"protocolVersion": "2.0", "requestId": rid, "operation": "open",
                    "sessionId": self.session, "generation": 1,
                    "payload": {"cwd": self.cwd, "session": {"mode": "new"},
                        "resources": crate::contract::resources_with_tools(json!("none"))}});
                if let Some(m) = &self.model {
                    v["payload"]["model"] = m.clone();
                }
                v
            }
            "wake" => json!({"protocolVersion": "2.0", "requestId": rid, "operation": "wake",
                "sessionId": self.session, "generation": 1, "idempotencyKey": format!("{rid}-wake"),
                "payload": {"prompt": "x"}}),
            other => return Err(format!("unknown base {other}")),
        };
        patch(&mut f, s, |v| self.expand(v))?;
        self.request_id = f["requestId"].as_str().unwrap_or_default().to_string();
        Ok(f)
    }
}

/// The daemon runner's dialect: client commands on the daemon's socket.
struct Daemon<'c, 'a> {
    c: &'c mut DCtx<'a>,
    values: Values,
}

/// The next response on `conn` (events skipped).
fn next_response(conn: &mut Conn, wait: Duration) -> Recv {
    loop {
        let r = conn.recv_within(wait);
        match r.frame() {
            Some(f) if f["kind"] == "event" => continue,
            _ => return r,
        }
    }
}

/// `as` with `<protocolVersion>` expanded from the response.
fn relabel(r: &Recv, label: &str) -> String {
    let version = r.frame().and_then(|f| f["protocolVersion"].as_str()).unwrap_or("none");
    label.replace("<protocolVersion>", version)
}

impl Dialect for Daemon<'_, '_> {
    const SCORING: Scoring = Scoring::Joined;

    fn connect(&mut self) -> Result<Conn, Outcome> {
        self.c.connect()
    }

    fn build(&mut self, send: &Send) -> Result<Value, String> {
        let rid = self.c.rid();
        self.values.build(send, rid)
    }

    fn expand_raw(&self, raw: &str) -> String {
        expand_spaces(self.values.expand(&json!(raw)).as_str().unwrap_or_default())
    }

    fn expect(&mut self, conn: &mut Conn, want: &Value) -> Result<Observed, Outcome> {
        let step = self.c.target.step;
        let label = want.get("as").and_then(Value::as_str);
        let mut problems = Vec::new();
        if want == "close" {
            let closed = loop {
                match conn.recv_within(step) {
                    Recv::Closed => break true,
                    Recv::Frame(..) | Recv::Garbage(_) => continue,
                    Recv::Timeout => break false,
                }
            };
            return Ok(Observed { token: if closed { "closed" } else { "open" }.into(), ok: closed, problems });
        }
        if let Some(p) = want.get("response") {
            let r = next_response(conn, step * 3);
            let pattern = self.values.expand(p);
            let ok = r.frame().is_some_and(|f| f["kind"] == "response" && matches(&pattern, f));
            let token = match label {
                Some(l) if ok => relabel(&r, l),
                _ => rtoken(&r),
            };
            if !ok {
                problems.push(format!("expected a response matching {pattern}, observed {}", brief(&r)));
            }
            return Ok(Observed { token, ok, problems });
        }
        if let Some(spec) = want.get("refusal") {
            let code = spec["code"].as_str().ok_or_else(|| Outcome::Error("a refusal without a code".into()))?;
            let member = spec.get("member").and_then(Value::as_str);
            let r = next_response(conn, step * 3);
            let token = match refusal(&r, code, member) {
                Outcome::Observed { token, .. } => token,
                other => return Err(other),
            };
            let provoked = match member {
                Some(m) => format!("error:{code}@{m}"),
                None => format!("error:{code}"),
            };
            let ok = token == provoked;
            if let (true, Some(p)) = (ok, want.get("match")) {
                let pattern = self.values.expand(p);
                if !r.frame().is_some_and(|f| matches(&pattern, f)) {
                    problems.push(format!("expected the refusal to match {pattern}, observed {}", brief(&r)));
                }
            }
            let token = match label {
                Some(l) if ok => relabel(&r, l),
                _ => token,
            };
            return Ok(Observed { token, ok, problems });
        }
        Err(Outcome::Error(format!("bad expectation {want}")))
    }

    fn step(&self) -> Duration {
        self.c.target.step
    }
}

/// A received line, shortened for a finding.
fn brief(r: &Recv) -> String {
    match r.frame() {
        Some(f) => {
            let s = f.to_string();
            if s.chars().count() > 300 {
                format!("{}…", s.chars().take(300).collect::<String>())
            } else {
                s
            }
        }
        None => r.describe(),
    }
}

/// Run the session `id`.
pub fn run(c: &mut DCtx<'_>, id: &str) -> Outcome {
    let found = sessions().into_iter().chain(c.target.sessions.iter().cloned()).find(|s| s.meta.id == id);
    let Some(s) = found else {
        return Outcome::Error(format!("no daemon session vector {id}"));
    };
    let values = Values {
        session: c.session.clone(),
        host: c.host.clone(),
        cwd: c.target.cwd.display().to_string(),
        model: c.target.model.clone(),
        request_id: String::new(),
    };
    crate::conform::script::run(&mut Daemon { c, values }, &s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judge::{judge_line, Context, Kind, Verdict};

    fn verdict(line: &[u8]) -> String {
        match judge_line(line, Some(Kind::Command), &Context::default()).1 {
            Verdict::Valid => "valid".into(),
            Verdict::Invalid { code, .. } => code,
        }
    }

    /// Every frame of every daemon session — built frames and raw lines — instantiated on the
    /// worked example's host, gets the verdict its step declares: the validator checks the
    /// session vectors' frames.
    #[test]
    fn every_sent_line_has_the_contract_verdict_its_step_declares() {
        let mut checked = 0;
        for s in sessions() {
            let mut v = Values {
                session: "agent-a".into(),
                host: Context::default().host_instance_id,
                cwd: "/tmp/work".into(),
                model: None,
                request_id: String::new(),
            };
            for (i, step) in s.steps.iter().enumerate() {
                let line = match (&step.send, &step.send_raw) {
                    (Some(send), _) => serde_json::to_vec(&v.build(send, format!("req-{i}")).unwrap()).unwrap(),
                    (_, Some(raw)) => expand_spaces(v.expand(&json!(raw)).as_str().unwrap()).into_bytes(),
                    _ => continue,
                };
                let want =
                    step.contract.as_deref().unwrap_or_else(|| panic!("{}: step {i} declares no verdict", s.meta.id));
                assert_eq!(verdict(&line), want, "{} step {}", s.meta.id, i + 1);
                checked += 1;
            }
        }
        assert!(checked >= 10, "{checked}");
    }

    #[test]
    fn sessions_are_well_formed_and_do_not_clash_with_built_in_cases() {
        let built_in: Vec<CaseMeta> = serde_json::from_str(super::super::CATALOGUE).unwrap();
        let reg = super::super::cases::registry();
        let all = sessions();
        for s in &all {
            assert!(s.meta.id.starts_with("daemon."), "{}", s.meta.id);
            assert!(!built_in.iter().any(|m| m.id == s.meta.id), "{} is also in daemon-cases.json", s.meta.id);
            assert!(!reg.iter().any(|(id, _)| *id == s.meta.id), "{} is also implemented in Rust", s.meta.id);
            assert!(s.steps.iter().any(|x| x.expect.is_some()), "{}", s.meta.id);
            assert_eq!(all.iter().filter(|x| x.meta.id == s.meta.id).count(), 1, "{}", s.meta.id);
            for st in &s.steps {
                assert_eq!(st.actions(), 1, "{}: a step does exactly one thing", s.meta.id);
                assert_eq!(st.bind, None, "{}: the daemon runner has no bind step", s.meta.id);
            }
        }
    }

    #[test]
    fn bases_are_commands_of_the_case_session() {
        let mut v = Values {
            session: "s-1".into(),
            host: "h".into(),
            cwd: "/w".into(),
            model: Some(json!({"provider": "p", "id": "m"})),
            request_id: String::new(),
        };
        let send = |base: &str| Send { base: base.into(), set: Default::default(), remove: vec![] };
        let open = v.build(&send("open"), "r-1".into()).unwrap();
        assert_eq!((open["sessionId"].as_str(), open["payload"]["model"]["id"].as_str()), (Some("s-1"), Some("m")));
        assert_eq!(v.request_id, "r-1");
        let wake = v.build(&send("wake"), "r-2".into()).unwrap();
        assert_eq!(wake["idempotencyKey"], "r-2-wake");
        assert!(v.build(&send("drain"), "r-3".into()).unwrap_err().contains("drain"));
        assert_eq!(v.expand(&json!("<sessionId>@<hostInstanceId>:<requestId>")), json!("s-1@h:r-2"));
    }
}
