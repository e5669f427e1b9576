//! Golden `to-daemon` frame vectors replayed against a live daemon (a part of the vector replay,
//! `replay.rs`, which calls this module; this module never imports it):
//! the probe adapter sends the vector's frame as its answer — to the next `bind` for a vector
//! whose base is `bound`, to the next `invoke` otherwise — and the case checks that the
//! daemon treats it as the vector says.
//!
//! - An invalid frame fails the adapter closed: a `bound` fails the open and no later tool
//!   call reaches the adapter (`open-refused`, as `daemon.bind.bound-*`); any other frame is
//!   never a successful tool result and no later tool call reaches the adapter through that
//!   connection (`failed-closed`, as `daemon.tools.*-fails-closed`).
//! - A valid frame is accepted: the open succeeds (`opened`), or the tool call completes with
//!   that result and the connection stays usable (`completed`).
//!
//! The live session is opened with a descriptor that keeps the vector descriptor's
//! `protocolVersion`, `adapterId`, `adapterVersion`, generation, operations and limits; the
//! daemon's host, a session id unique to the case and a fresh handle replace the vector's.
//! The frame's identity, the vector's handle (also inside strings and keys) and the
//! `requestId`/`idempotencyKey`/`operation` of the vector's base result are rewritten to the
//! live binding and invoke ([`rewrite_doc`], [`rewrite_raw`]); the rewritten line is judged
//! again by the contract against the live binding, and when that changes the vector's verdict
//! (a line limit of the vector's descriptor, a longer id) the case is skipped with the reason.
//!
//! `aborted` and `revoked` frames answer an abort or a revoke, which a daemon sends on its own
//! schedule; the runner provokes them:
//! - an `aborted` frame answers the `abort` a daemon sends for a call that times out on the
//!   wire (shared SPEC §4.4; the probe holds the invoke past a `requestTimeoutMs` of 1 s):
//!   the frame's `requestId` and `targetRequestId` are rewritten to the live abort's. A valid
//!   acknowledgement leaves the connection usable (`acknowledged`); an invalid one fails it
//!   closed (`failed-closed`: no later tool call reaches the adapter). A daemon that sends no
//!   abort is judged by `daemon.tools.timeout-sends-abort`; here the case is skipped.
//! - a `revoked` frame is sent unsolicited, ahead of the result of an invoke: a revoke the
//!   daemon sends at close or replacement ends the connection anyway, so how it treats the
//!   frame could not be seen. An invalid one fails the connection closed (the protocol text:
//!   every acknowledgement is rejected unless its identity matches, unexpected fields fail
//!   closed); a valid one is ignored (shared SPEC §4.3: `revoked` is ignored) — the call
//!   completes and the connection stays usable (`ignored`), a SHOULD case: the protocol text
//!   does not say what an unsolicited `revoked` does.

use serde_json::{json, Map, Value};

use super::cases::{abort_then_call, call_then_call, open_then_call, open_with, release};
use super::probe::ScriptAt;
use super::DCtx;
use crate::conform::case::{CaseMeta, Level, Outcome};
use crate::contract::{admit_descriptor, Binding, Direction};
use crate::judge::Context;
use crate::vectors::{meets, Vector, VectorSet};

/// The `kind` of the frame of `v`, as far as it can be told without the bases: a patch of
/// `/kind`, the kind of a raw line or an input, else the base's (its name).
fn frame_kind(v: &Vector) -> Option<String> {
    if let Some(p) = v.patch.iter().rev().find(|p| p.path == "/kind") {
        return (p.op == "set").then(|| p.value.as_str().map(str::to_string)).flatten();
    }
    if let Some(raw) = &v.raw {
        let loose: Option<Value> = serde_json::from_str(raw.trim_end_matches('\r')).ok();
        return loose.and_then(|d| d["kind"].as_str().map(str::to_string));
    }
    if let Some(d) = &v.input {
        return d["kind"].as_str().map(str::to_string);
    }
    v.base.clone()
}

/// Where the frame of `v` is sent.
fn stage(v: &Vector) -> ScriptAt {
    // A raw or inline `bound` (its kind decoded, whatever its spelling) answers the bind too.
    if v.base.as_deref() == Some("bound") || (v.base.is_none() && frame_kind(v).as_deref() == Some("bound")) {
        return ScriptAt::Bound;
    }
    match frame_kind(v).as_deref() {
        Some("aborted") => ScriptAt::Abort,
        Some("revoked") => ScriptAt::BeforeResult,
        _ => ScriptAt::Invoke,
    }
}

fn valid(v: &Vector) -> bool {
    v.expect.verdict == "valid"
}

/// The outcome token a conforming daemon shows for `v`.
fn want(v: &Vector) -> &'static str {
    match (stage(v), valid(v)) {
        (ScriptAt::Bound, true) => "opened",
        (ScriptAt::Bound, false) => "open-refused",
        (ScriptAt::Invoke, true) => "completed",
        (ScriptAt::Abort, true) => "acknowledged",
        (ScriptAt::BeforeResult, true) => "ignored",
        (ScriptAt::Invoke | ScriptAt::Abort | ScriptAt::BeforeResult, false) => "failed-closed",
    }
}

/// The catalogue entry of a `to-daemon` frame vector.
pub fn meta(v: &Vector, decision: bool) -> CaseMeta {
    let what = match (stage(v), valid(v)) {
        (ScriptAt::Bound, true) => "as the answer to bind, the open succeeds".to_string(),
        (ScriptAt::Bound, false) => {
            "as the answer to bind, the open fails and no tool call reaches the adapter".to_string()
        }
        (ScriptAt::Invoke, true) => {
            "as the answer to an invoke, the tool call completes with it and the connection stays usable".to_string()
        }
        (ScriptAt::Invoke, false) => format!(
            "as the answer to an invoke ({}), it is never a successful tool result and the daemon fails the adapter \
             connection",
            v.expect.code.as_deref().unwrap_or("invalid")
        ),
        (ScriptAt::Abort, true) => {
            "as the answer to the abort of a timed-out call, it is accepted and the connection stays usable".to_string()
        }
        (ScriptAt::Abort, false) => format!(
            "as the answer to the abort of a timed-out call ({}), the daemon fails the adapter connection",
            v.expect.code.as_deref().unwrap_or("invalid")
        ),
        (ScriptAt::BeforeResult, true) => "sent unsolicited ahead of a result, it is ignored: the call completes and \
             the connection stays usable (shared SPEC §4.3; the protocol text is silent)"
            .to_string(),
        (ScriptAt::BeforeResult, false) => format!(
            "sent unsolicited ahead of a result ({}), it fails the adapter connection: the result is never a \
             successful tool result",
            v.expect.code.as_deref().unwrap_or("invalid")
        ),
    };
    // What a conforming daemon does with a valid unsolicited `revoked` is not fixed by the
    // protocol text: at most a SHOULD.
    let decision = decision || (stage(v) == ScriptAt::BeforeResult && valid(v));
    CaseMeta {
        id: format!("{}{}", super::PREFIX, v.id),
        clause: v.clause.clone(),
        level: if decision { Level::Should } else { Level::Must },
        tags: vec!["vector".into(), "frame".into()],
        requirement: format!(
            "The golden frame vector {} sent by the adapter: {what}{}.",
            v.id,
            if decision { "; a decision of this project where the protocol text is silent" } else { "" }
        ),
        accepted: vec![want(v).to_string()],
        techniques: crate::conform::coverage::vector_techniques(&v.id, valid(v)),
        level_with_grant: None,
    }
}

/// The vector's descriptor document (`context.descriptor`: a base name, inline, or the
/// `descriptor` base).
fn vector_descriptor(set: &VectorSet, v: &Vector) -> Result<Value, String> {
    match v.context.get("descriptor") {
        None => set.base("descriptor"),
        Some(Value::String(name)) => set.base(name),
        Some(inline) => Ok(inline.clone()),
    }
}

/// What the frame of a vector is rewritten between: the vector's binding and base call, and
/// the live ones.
pub struct Rewrite<'a> {
    /// The binding the vector is judged against.
    pub vector: &'a Binding,
    /// The live binding (what the probe saw in `bind`).
    pub live: &'a Binding,
    /// `requestId`, `idempotencyKey`, `operation` of the vector's base result.
    pub vector_call: [&'a str; 3],
    /// The same three of the live invoke (none for a `bound` or an `aborted`).
    pub live_call: Option<[&'a str; 3]>,
    /// For an `aborted`: (vector, live) `requestId` of the abort and its `targetRequestId`.
    pub abort: Option<[(&'a str, &'a str); 2]>,
}

const CALL_KEYS: [&str; 3] = ["requestId", "idempotencyKey", "operation"];

impl Rewrite<'_> {
    /// (vector, live) string pairs: identity, then the call.
    fn pairs(&self) -> Vec<(String, String)> {
        let (a, b) = (self.vector.identity(), self.live.identity());
        let mut p = vec![
            (a.protocol_version.to_string(), b.protocol_version.to_string()),
            (a.adapter_id.to_string(), b.adapter_id.to_string()),
            (a.adapter_version.to_string(), b.adapter_version.to_string()),
            (a.host_instance_id.to_string(), b.host_instance_id.to_string()),
            (a.session_id.to_string(), b.session_id.to_string()),
        ];
        if let Some(live) = self.live_call {
            p.extend(self.vector_call.iter().zip(live).map(|(x, y)| (x.to_string(), y.to_string())));
        }
        p.extend(self.abort.iter().flatten().map(|(x, y)| (x.to_string(), y.to_string())));
        p
    }

    fn handle(&self) -> (&str, &str) {
        (self.vector.handle().expose(), self.live.handle().expose())
    }
}

/// Rewrite a frame document to the live binding: the identity members equal to the vector's
/// (top level), the base call's `requestId`/`idempotencyKey`/`operation` to the live invoke's,
/// and the vector's handle wherever it occurs in a string or a key.
pub fn rewrite_doc(doc: &mut Value, rw: &Rewrite<'_>) {
    let (a, b) = (rw.vector.identity(), rw.live.identity());
    if let Value::Object(m) = doc {
        let ids = [
            ("protocolVersion", json!(a.protocol_version), json!(b.protocol_version)),
            ("adapterId", json!(a.adapter_id), json!(b.adapter_id)),
            ("adapterVersion", json!(a.adapter_version), json!(b.adapter_version)),
            ("hostInstanceId", json!(a.host_instance_id), json!(b.host_instance_id)),
            ("sessionId", json!(a.session_id), json!(b.session_id)),
            ("generation", json!(a.generation), json!(b.generation)),
        ];
        for (k, from, to) in ids {
            replace_member(m, k, &from, to);
        }
        if let Some(live) = rw.live_call {
            for ((k, from), to) in CALL_KEYS.iter().zip(rw.vector_call).zip(live) {
                replace_member(m, k, &json!(from), json!(to));
            }
        }
        for (k, (from, to)) in ["requestId", "targetRequestId"].iter().zip(rw.abort.iter().flatten()) {
            replace_member(m, k, &json!(from), json!(to));
        }
    }
    let (from, to) = rw.handle();
    replace_handle(doc, from, to);
}

/// Give each member named `key` — in any letter case, so that a vector spelling a key
/// `RequestId` still answers the live call and is refused only for its spelling — whose value
/// is `from` the value `to`.
fn replace_member(m: &mut Map<String, Value>, key: &str, from: &Value, to: Value) {
    for (k, v) in m.iter_mut() {
        if k.eq_ignore_ascii_case(key) && v == from {
            *v = to.clone();
        }
    }
}

fn replace_handle(v: &mut Value, from: &str, to: &str) {
    match v {
        Value::String(s) if s.contains(from) => *s = s.replace(from, to),
        Value::Array(a) => a.iter_mut().for_each(|x| replace_handle(x, from, to)),
        Value::Object(m) => {
            let old = std::mem::take(m);
            *m = old
                .into_iter()
                .map(|(k, mut x)| {
                    replace_handle(&mut x, from, to);
                    (if k.contains(from) { k.replace(from, to) } else { k }, x)
                })
                .collect::<Map<String, Value>>();
        }
        _ => {}
    }
}

/// Rewrite a raw line textually: every JSON string token equal to a vector identity or call
/// value becomes the live one, and the handle is replaced wherever its bytes occur, as written
/// or with its first character `\u`-escaped (a handle escaped otherwise is not found: the
/// re-judgement then skips the case).
pub fn rewrite_raw(line: &[u8], rw: &Rewrite<'_>) -> Vec<u8> {
    let mut out = line.to_vec();
    let (hf, ht) = rw.handle();
    // The handle as written, and with its first character as a JSON `\u` escape.
    let escaped = |h: &str| {
        let mut c = h.chars();
        c.next().map(|f| format!("\\u{:04x}{}", f as u32, c.as_str())).unwrap_or_default().into_bytes()
    };
    let mut pairs: Vec<(Vec<u8>, Vec<u8>)> =
        vec![(hf.as_bytes().to_vec(), ht.as_bytes().to_vec()), (escaped(hf), escaped(ht))];
    for (from, to) in rw.pairs() {
        if from != to {
            pairs.push((json!(from).to_string().into_bytes(), json!(to).to_string().into_bytes()));
        }
    }
    for (from, to) in pairs {
        out = replace_bytes(&out, &from, &to);
    }
    out
}

fn replace_bytes(hay: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    if from.is_empty() {
        return hay.to_vec();
    }
    let mut out = Vec::with_capacity(hay.len());
    let mut rest = hay;
    while let Some(i) = memchr::memmem::find(rest, from) {
        out.extend_from_slice(&rest[..i]);
        out.extend_from_slice(to);
        rest = &rest[i + from.len()..];
    }
    out.extend_from_slice(rest);
    out
}

/// Judge `line` as a `to-daemon` frame on `binding` by the rules a daemon applies (not the
/// adapter's own obligations: the probe replays what a daemon must accept or refuse); `Err`
/// when the verdict is not the vector's expectation (the reason to skip).
pub fn rejudge(line: &[u8], binding: &Binding, v: &Vector) -> Result<(), String> {
    let ctx = Context { binding: Some(binding.clone()), direction: Direction::ToDaemon, ..Context::default() };
    let verdict = crate::judge::judge_frame_by_daemon_rules(line, &ctx);
    if meets(&verdict, &v.expect) {
        return Ok(());
    }
    let got = match &verdict {
        crate::judge::Verdict::Valid => "valid".to_string(),
        crate::judge::Verdict::Invalid { code, field, .. } => format!("invalid ({code} at `{field}`)"),
    };
    let exp = match (&v.expect.code, &v.expect.field) {
        (Some(c), Some(f)) => format!("invalid ({c} at `{f}`)"),
        (Some(c), None) => format!("invalid ({c})"),
        _ => v.expect.verdict.clone(),
    };
    Err(format!(
        "rewritten to the live binding and call, the frame is {got} by the contract, not the vector's {exp}; not \
         replayed"
    ))
}

/// The file an `fs.read` call names (created in the session root first).
const READ_FILE: &str = "pc-vector.txt";

fn reads_a_file(tool: &str) -> bool {
    tool == "fs_read"
}

/// The wake tool and arguments that make the daemon invoke `op`.
fn tool_for(op: &str) -> (String, Value) {
    let args = match op {
        "fs.read" => json!({"path": READ_FILE}),
        "fs.search" => json!({"path": ".", "query": "pi-conform"}),
        "fs.write" => json!({"path": "pc-vector.txt", "content": "x"}),
        "fs.edit" => json!({"path": "pc-vector.txt", "edits": [{"oldText": "x", "newText": "y"}]}),
        _ => json!({"path": "."}),
    };
    (op.replace('.', "_"), args)
}

/// Replay the `to-daemon` frame vector `v`.
pub fn run(c: &mut DCtx<'_>, set: &VectorSet, v: &Vector) -> Outcome {
    match prepare(c, set, v) {
        Ok(Ok(p)) => replay(c, v, p),
        Ok(Err(why)) => Outcome::Skip(why),
        Err(o) => o,
    }
}

/// Everything a replay needs, known before the live binding.
struct Prepared {
    descriptor: Value,
    generation: u64,
    vector_binding: Binding,
    vector_call: [String; 3],
    vector_abort: String,
    doc: Option<Value>,
    raw: Option<Vec<u8>>,
    op: String,
}

/// `Ok(Err(why))`: the vector cannot be replayed (a skip); `Err`: the runner could not build
/// the live descriptor.
fn prepare(c: &mut DCtx<'_>, set: &VectorSet, v: &Vector) -> Result<Result<Prepared, String>, Outcome> {
    let vd = match vector_descriptor(set, v) {
        Ok(vd) => vd,
        Err(why) => return Ok(Err(why)),
    };
    let generation = vd["binding"]["generation"].as_u64().unwrap_or(0);
    let live = c.descriptor(generation, Some(vd["limits"].clone()))?;
    Ok(prepare_with(set, v, vd, live))
}

/// [`prepare`] once the live descriptor `d` (the daemon's host, the case session, a fresh
/// handle) is minted.
fn prepare_with(set: &VectorSet, v: &Vector, vd: Value, mut d: Value) -> Result<Prepared, String> {
    let vector_binding =
        Binding::from(&admit_descriptor(&vd, None).map_err(|e| format!("the vector's descriptor is refused: {e}"))?);
    let raw = v.raw.is_some() || v.raw_hex.is_some();
    let doc = if raw { None } else { Some(set.document(v)?) };
    // The frame as a document (a raw line decoded loosely, for its kind and operation).
    let loose = match &doc {
        Some(d) => Some(d.clone()),
        None => {
            let line = set.line(v)?;
            serde_json::from_slice::<Value>(line.strip_suffix(b"\r").unwrap_or(&line)).ok()
        }
    };
    let base = set.base("result")?;
    let vector_call = CALL_KEYS.map(|k| base[k].as_str().unwrap_or_default().to_string());
    let vector_abort = set.base("aborted")?["requestId"].as_str().unwrap_or_default().to_string();
    let generation = vector_binding.identity().generation;
    // The live descriptor: the vector's, with the daemon's host, the case session and a fresh
    // handle, at the probe's endpoint.
    for k in ["protocolVersion", "adapterId", "adapterVersion", "operations"] {
        d[k] = vd[k].clone();
    }
    if stage(v) == ScriptAt::Abort {
        // The call must time out on the wire for the daemon to send its abort.
        d["limits"]["requestTimeoutMs"] = json!(ABORT_TIMEOUT_MS);
    }
    let ops: Vec<String> = vector_binding.operations().iter().map(|o| o.to_string()).collect();
    // The operation the live invoke must have for the frame to answer it.
    let named = loose.as_ref().and_then(|d| d["operation"].as_str().map(str::to_string));
    // (Named in any letter case: a vector spelling `FS.read` answers a live `fs.read` call,
    // so that only its spelling can be refused.)
    let op = named
        .and_then(|o| ops.iter().find(|x| x.eq_ignore_ascii_case(&o)).cloned())
        .or_else(|| ops.iter().find(|o| *o == "fs.stat").cloned())
        .or_else(|| ops.first().cloned())
        .ok_or("the vector's descriptor grants no operation")?;
    Ok(Prepared {
        descriptor: d,
        generation,
        vector_binding,
        vector_call,
        vector_abort,
        raw: if raw { Some(set.line(v)?) } else { None },
        doc,
        op,
    })
}

/// [`replay_at`], then the case's session is closed: the replay only looks at it, and a
/// daemon keeps a bounded number of resident sessions (128 in Pi Daemon 0.3.3).
fn replay(c: &mut DCtx<'_>, v: &Vector, p: Prepared) -> Outcome {
    let generation = p.generation;
    let outcome = replay_at(c, v, p);
    release(c, generation);
    outcome
}

fn replay_at(c: &mut DCtx<'_>, v: &Vector, p: Prepared) -> Outcome {
    let at = stage(v);
    let (tool, args) = tool_for(&p.op);
    let vec_owned = v.clone();
    let Prepared { descriptor, generation, vector_binding, vector_call, vector_abort, doc, raw, .. } = p;
    let build = move |live: &Binding, answered: Option<&Value>| -> Result<Vec<u8>, String> {
        let is_abort = answered.is_some_and(|f| f["kind"] == "abort");
        let live_call = answered.filter(|_| !is_abort).map(|f| CALL_KEYS.map(|k| f[k].as_str().unwrap_or_default()));
        let abort = answered.filter(|_| is_abort).map(|f| {
            [
                (vector_abort.as_str(), f["requestId"].as_str().unwrap_or_default()),
                (vector_call[0].as_str(), f["targetRequestId"].as_str().unwrap_or_default()),
            ]
        });
        let rw = Rewrite {
            vector: &vector_binding,
            live,
            vector_call: [&vector_call[0], &vector_call[1], &vector_call[2]],
            live_call,
            abort,
        };
        let line = match (doc, raw) {
            (Some(mut d), _) => {
                rewrite_doc(&mut d, &rw);
                serde_json::to_vec(&d).map_err(|e| e.to_string())?
            }
            (None, Some(r)) => rewrite_raw(&r, &rw),
            (None, None) => return Err("the vector has no document".into()),
        };
        rejudge(&line, live, &vec_owned)?;
        Ok(line)
    };
    match at {
        ScriptAt::Bound => {
            c.probe.script(at, Box::new(build));
            let seen = open_then_call(c, &descriptor, generation, &tool, &args);
            let sent = c.probe.take_script_outcome();
            let seen = match seen {
                Ok(s) => s,
                Err(o) => return o,
            };
            if let Some(o) = script_skip(sent) {
                return o;
            }
            if valid(v) {
                if seen.open == "ok" {
                    Outcome::token("opened")
                } else {
                    Outcome::with(
                        format!("open-{}", seen.open),
                        vec![format!("a valid bound failed the open ({})", seen.open)],
                    )
                }
            } else if let Some(o) = seen.inconclusive() {
                o
            } else {
                seen.outcome()
            }
        }
        ScriptAt::Abort => {
            if let Err(o) = open_with(c, &descriptor, generation) {
                return o;
            }
            abort_then_call(c, valid(v), generation, &tool, &args, Box::new(build))
        }
        ScriptAt::Invoke | ScriptAt::BeforeResult => {
            if let Err(o) = open_with(c, &descriptor, generation) {
                return o;
            }
            if reads_a_file(&tool) {
                // A daemon may look the path up before it invokes (Pi Daemon 0.3.3 does): the
                // file read exists in the session root.
                let _ = std::fs::create_dir_all(&c.target.cwd);
                let _ = std::fs::write(c.target.cwd.join(READ_FILE), "pi-conform\n");
            }
            c.probe.script(at, Box::new(build));
            let seen = call_then_call(c, generation, &tool, &args);
            let sent = c.probe.take_script_outcome();
            let seen = match seen {
                Ok(s) => s,
                Err(o) => return o,
            };
            if let Some(o) = seen.inconclusive() {
                return o;
            }
            if let Some(o) = script_skip(sent) {
                return o;
            }
            if !valid(v) {
                return with_code_check(seen.fail_closed(), &seen.first, v);
            }
            let mut problems = Vec::new();
            if at == ScriptAt::BeforeResult {
                if seen.first_call_ok() == Some(false) {
                    problems.push("the tool call failed after a valid unsolicited revoked ahead of its result".into());
                }
                if !seen.reached {
                    problems.push(
                        "the daemon failed the adapter connection after a valid revoked: a later tool call did not \
                         reach the adapter"
                            .into(),
                    );
                }
                return Outcome::with("ignored", problems);
            }
            let want_ok = frame_ok(v);
            if let Some(ok) = seen.first_call_ok() {
                if want_ok.is_some_and(|w| w != ok) {
                    problems.push(format!(
                        "the tool call did not complete with the adapter's valid result (reported ok:{ok}, the frame \
                         says ok:{})",
                        !ok
                    ));
                }
            }
            if !seen.reached {
                problems.push(
                    "the daemon failed the adapter connection after a valid frame: a later tool call did not reach \
                     the adapter"
                        .into(),
                );
            }
            Outcome::with("completed", problems)
        }
    }
}

/// Where the daemon reports the failed call's code (the reference daemon's per-call form
/// `data.result.toolCalls[0].error.code`; a daemon that reports calls otherwise is not checked
/// here): an `adapter_*` code other than the vector's is a problem — the connection failed,
/// but for another reason than the frame.
fn with_code_check(o: Outcome, first: &crate::conform::adapter::conn::Recv, v: &Vector) -> Outcome {
    let (Outcome::Observed { token, mut problems }, Some(want)) = (o.clone(), v.expect.code.as_deref()) else {
        return o;
    };
    let got = first.frame().and_then(|f| f["data"]["result"]["toolCalls"][0]["error"]["code"].as_str());
    if let Some(got) = got.filter(|c| c.starts_with("adapter_") && *c != want) {
        problems.push(format!("the failed call reports {got}, not the vector's {want}"));
    }
    Outcome::with(token, problems)
}

/// `requestTimeoutMs` of the live descriptor of an `aborted` vector: the probe holds the invoke
/// past it, so the daemon sends its abort. A daemon may also time the bind with it (the
/// reference daemon does), so it leaves a loaded machine room to bind.
const ABORT_TIMEOUT_MS: u64 = 1000;

/// The `ok` a valid result frame carries (`None` for other frames).
fn frame_ok(v: &Vector) -> Option<bool> {
    match v.base.as_deref() {
        Some("result") => v.patch.iter().find(|p| p.path == "/ok").and_then(|p| p.value.as_bool()).or(Some(true)),
        Some("result-error") => {
            v.patch.iter().find(|p| p.path == "/ok").and_then(|p| p.value.as_bool()).or(Some(false))
        }
        _ => None,
    }
}

/// The case verdict when the scripted frame was not sent.
fn script_skip(sent: Option<Result<(), String>>) -> Option<Outcome> {
    match sent {
        Some(Ok(())) => None,
        Some(Err(why)) => Some(Outcome::Skip(why)),
        None => Some(Outcome::Error(
            "inconclusive: the daemon never asked the probe for the answer the vector's frame replaces".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIVE_HANDLE: &str = "LiveHandleLiveHandleLiveHandleLiveHandle_-0";

    fn set() -> VectorSet {
        VectorSet::load(&crate::vectors::default_dir()).unwrap()
    }

    fn binding_of(d: &Value) -> Binding {
        Binding::from(&admit_descriptor(d, None).unwrap())
    }

    /// The vector's binding and a live one: another host, session and handle.
    fn bindings(set: &VectorSet, v: &Vector) -> (Binding, Binding) {
        let vd = vector_descriptor(set, v).unwrap();
        let mut live = vd.clone();
        live["binding"]["hostInstanceId"] = json!("host-live-0123456789");
        live["binding"]["sessionId"] = json!("pc-7-live");
        live["binding"]["capabilityHandle"] = json!(LIVE_HANDLE);
        (binding_of(&vd), binding_of(&live))
    }

    /// The line the probe would send for vector `id` answering a live invoke.
    fn rewritten(id: &str) -> (Vector, Binding, Vec<u8>) {
        let set = set();
        let v = set.vectors.iter().find(|v| v.id == id).unwrap().clone();
        let (vb, lb) = bindings(&set, &v);
        let rw = Rewrite {
            vector: &vb,
            live: &lb,
            vector_call: ["tool-1", "turn-1-read-1", "fs.read"],
            live_call: Some(["live-req-9", "tool-live-key", "fs.read"]),
            abort: None,
        };
        let line = match set.document(&v) {
            Ok(mut d) => {
                rewrite_doc(&mut d, &rw);
                serde_json::to_vec(&d).unwrap()
            }
            Err(_) => rewrite_raw(&set.line(&v).unwrap(), &rw),
        };
        (v, lb, line)
    }

    #[test]
    fn a_result_is_rewritten_to_the_live_binding_and_call_and_keeps_its_verdict() {
        let (v, live, line) = rewritten("frame.result.ok.valid");
        let d: Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(
            (&d["hostInstanceId"], &d["sessionId"], &d["requestId"], &d["idempotencyKey"], &d["operation"]),
            (
                &json!("host-live-0123456789"),
                &json!("pc-7-live"),
                &json!("live-req-9"),
                &json!("tool-live-key"),
                &json!("fs.read")
            )
        );
        assert_eq!(rejudge(&line, &live, &v), Ok(()));
        // Judged against the vector's own binding instead, the rewritten frame is refused for
        // its identity: the rewriting is what makes it valid on the live binding.
        let (_, vb) = (0, bindings(&set(), &v).0);
        let err = rejudge(&line, &vb, &v).unwrap_err();
        assert!(err.contains("adapter_protocol_invalid at `hostInstanceId`"), "{err}");
    }

    #[test]
    fn an_aborted_frame_is_rewritten_to_the_live_abort_and_keeps_its_verdict() {
        let set = set();
        for (id, verdict_kept) in [
            ("frame.aborted.true.valid", true),
            ("frame.aborted.false-with-error.valid", true),
            ("frame.aborted.request-id-missing", true),
        ] {
            let v = set.vectors.iter().find(|v| v.id == id).unwrap().clone();
            let (vb, lb) = bindings(&set, &v);
            let rw = Rewrite {
                vector: &vb,
                live: &lb,
                vector_call: ["tool-1", "turn-1-read-1", "fs.read"],
                live_call: None,
                abort: Some([("abort-1", "pc-abort-7"), ("tool-1", "pc-call-7")]),
            };
            let mut d = set.document(&v).unwrap();
            rewrite_doc(&mut d, &rw);
            assert_eq!(d["targetRequestId"], "pc-call-7", "{id}");
            if d.get("requestId").is_some() {
                assert_eq!(d["requestId"], "pc-abort-7", "{id}");
            }
            assert_eq!(rejudge(&serde_json::to_vec(&d).unwrap(), &lb, &v).is_ok(), verdict_kept, "{id}");
        }
        let v = set.vectors.iter().find(|v| v.id == "frame.aborted.true.valid").unwrap();
        assert_eq!((stage(v), want(v)), (ScriptAt::Abort, "acknowledged"));
    }

    #[test]
    fn the_handle_is_replaced_inside_strings_and_keys() {
        for id in ["frame.result.secret.in-content", "frame.result.secret.as-object-key", "frame.bound.with-handle"] {
            let (v, live, line) = rewritten(id);
            let text = String::from_utf8(line.clone()).unwrap();
            assert!(!text.contains("aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789_-AB"), "{id}");
            assert!(text.contains(LIVE_HANDLE), "{id}");
            assert_eq!(rejudge(&line, &live, &v), Ok(()), "{id}");
        }
    }

    #[test]
    fn raw_lines_are_rewritten_textually() {
        let (v, live, line) = rewritten("frame.line.trailing-cr.valid");
        assert!(line.ends_with(b"\r"));
        assert!(memchr::memmem::find(&line, b"\"host-live-0123456789\"").is_some());
        assert_eq!(rejudge(&line, &live, &v), Ok(()));
        // A handle whose first character is written as a JSON escape is rewritten too.
        let (v, live, line) = rewritten("frame.result.secret.json-escaped");
        let text = String::from_utf8(line.clone()).unwrap();
        assert!(text.contains(&format!("token=\\u{:04x}{}", 'L' as u32, &LIVE_HANDLE[1..])), "{text}");
        assert_eq!(rejudge(&line, &live, &v), Ok(()));
        // Escaped otherwise, it is not found: the live frame no longer carries a handle, so the
        // vector's verdict changes and the case is skipped with that reason.
        let set = set();
        let vb = bindings(&set, &v).0;
        let raw = v.raw.clone().unwrap().replace("\\u0061B", "a\\u0042");
        let rw = Rewrite {
            vector: &vb,
            live: &live,
            vector_call: ["tool-1", "turn-1-read-1", "fs.read"],
            live_call: None,
            abort: None,
        };
        let moved = rewrite_raw(raw.as_bytes(), &rw);
        let why = rejudge(&moved, &live, &v).unwrap_err();
        assert!(why.contains("not the vector's invalid (adapter_secret_reflected"), "{why}");
    }

    #[test]
    fn a_rewriting_that_changes_the_verdict_is_a_stated_skip() {
        // 1024 bytes exactly on the vector's host; the live host is longer.
        let (v, live, line) = rewritten("frame.line.response.1024-bytes.valid");
        let why = rejudge(&line, &live, &v).unwrap_err();
        assert!(why.contains("is invalid (adapter_protocol_invalid at `line`)"), "{why}");
        assert!(why.contains("not the vector's valid"), "{why}");
    }

    #[test]
    fn every_to_daemon_frame_vector_is_a_case_with_the_outcome_it_means() {
        let set = set();
        let frames: Vec<&Vector> = set.vectors.iter().filter(|v| super::super::replay::is_daemon_frame(v)).collect();
        assert!(frames.len() > 100, "{}", frames.len());
        let cat = super::super::replay::catalogue(&set);
        for v in frames {
            let m = cat.iter().find(|m| m.id == format!("vector:{}", v.id)).unwrap();
            assert_eq!(
                (m.clause.as_str(), m.tags.as_slice()),
                (v.clause.as_str(), ["vector".to_string(), "frame".into()].as_slice())
            );
            assert_eq!(m.accepted, [want(v).to_string()]);
        }
        let by = |id: &str| cat.iter().find(|m| m.id == id).unwrap().accepted[0].clone();
        assert_eq!(by("vector:frame.bound.limits.changed"), "open-refused");
        assert_eq!(by("vector:frame.bound.valid"), "opened");
        assert_eq!(by("vector:frame.result.fs-list.entry-name-dot"), "failed-closed");
        assert_eq!(by("vector:frame.result.error.valid"), "completed");
        // aborted frames answer a provoked abort, revoked ones go unsolicited ahead of a result.
        assert_eq!(by("vector:frame.aborted.true.valid"), "acknowledged");
        assert_eq!(by("vector:frame.aborted.aborted-missing"), "failed-closed");
        assert_eq!(by("vector:frame.revoked.extra-key"), "failed-closed");
        assert_eq!(by("vector:frame.revoked.valid"), "ignored");
        assert_eq!(by("vector:frame.line.trailing-cr.valid"), "ignored");
        // A changed kind is an answer to an invoke like any other bad frame.
        assert_eq!(by("vector:frame.kind.unknown.to-daemon"), "failed-closed");
        let level = |id: &str| cat.iter().find(|m| m.id == id).unwrap().level;
        assert_eq!(level("vector:frame.revoked.valid"), Level::Should, "the protocol text is silent");
        assert_eq!(level("vector:frame.revoked.extra-key"), Level::Must);
        assert_eq!(level("vector:frame.aborted.false-with-error.valid"), Level::Must);
        // The duplicate-key decision of this project is a SHOULD case.
        let dup = cat.iter().find(|m| m.id == "vector:frame.line.duplicate-key.to-daemon").unwrap();
        assert_eq!(dup.level, Level::Should);
    }
}
