//! Golden vectors replayed against a live daemon: every `command` and `descriptor` vector
//! becomes a case `vector:<vector id>` (DESIGN "Data first"). A descriptor vector is sent as
//! the descriptor of a v2 host-adapter open.
//!
//! A vector is judged against the worked example's host (`host-019f`); on a live socket the
//! document is rewritten to the daemon's `hostInstanceId`, and a vector expected valid gets a
//! session id of the same length unique to the run (a valid command may create state). The
//! rewritten document is judged again by the contract. A vector whose point is a binding
//! member the live daemon can never have (a 129-unit host id, a session id holding NUL) loses
//! it in the rewrite, so the host and the session are then kept as the vector has them, one and
//! then both: the descriptor's shape checks come before the binding comparison, so the
//! vector's refusal still wins on the live daemon. When no variant keeps the vector's verdict
//! (a longer host id can break the fit check), the case is skipped with the reason, so a
//! replayed case always means what its vector says.
//!
//! What a case checks: the code of a refusal (the field only as far as SPEC §3.2 fixes it:
//! not at all — spellings differ between daemons); for an accepted document, that it was not
//! refused by a validation code; the version echo of a refusal that has an accepted version;
//! and whether the connection closes (`incompatible_protocol` and decoder errors close, every
//! other refusal keeps it open). Vectors that pin a decision of this project where the
//! protocol text is silent and Pi Daemon 0.3.3 differs (`conformance/pi-daemon-0.3.3-
//! differences.json`) are SHOULD cases: another daemon may conform and differ there.

use std::time::Duration;

use serde_json::{json, Value};

use super::frames;
use super::DCtx;
use crate::conform::adapter::conn::Recv;
use crate::conform::case::{CaseMeta, Level, Outcome};
use crate::contract::command::{parse_command, HostContext};
use crate::contract::Code;
use crate::judge::Kind;
use crate::vectors::{Vector, VectorSet};

/// The prefix of a replayed vector's case id.
pub use super::PREFIX;

/// The differences of the contract from Pi Daemon 0.3.3 that are this project's decisions.
const DIFFERENCES: &str = include_str!("../../../conformance/pi-daemon-0.3.3-differences.json");

/// Operations never replayed on a live daemon, with why.
fn unsafe_to_replay(doc: &Value) -> Option<&'static str> {
    (doc.get("operation").and_then(Value::as_str) == Some("drain"))
        .then_some("a drain vector is not replayed: it would drain the daemon under test")
}

/// Whether `id` matches a `vector:<glob>` pattern of the differences file (`*` any run).
pub(crate) fn is_decision(id: &str) -> bool {
    let Ok(v) = serde_json::from_str::<Value>(DIFFERENCES) else { return false };
    let patterns =
        v["differences"].as_array().into_iter().flatten().flat_map(|d| d["match"].as_array().into_iter().flatten());
    patterns.filter_map(Value::as_str).filter_map(|p| p.strip_prefix("vector:")).any(|p| glob(p, id))
}

fn glob(p: &str, s: &str) -> bool {
    match p.split_once('*') {
        None => p == s,
        Some((head, rest)) => {
            s.starts_with(head)
                && (0..=s.len() - head.len())
                    .any(|i| s.is_char_boundary(head.len() + i) && glob(rest, &s[head.len() + i..]))
        }
    }
}

/// Whether a vector can be replayed on a daemon socket at all.
fn replayable(v: &Vector) -> bool {
    matches!(v.kind, Kind::Command | Kind::Descriptor) || is_daemon_frame(v)
}

/// Whether `v` is a frame an adapter sends the daemon (`context.direction == "to-daemon"`).
pub(super) fn is_daemon_frame(v: &Vector) -> bool {
    v.kind == Kind::Frame && v.context.get("direction").and_then(Value::as_str) == Some("to-daemon")
}

/// The catalogue entries of the replayable vectors of `set`.
pub fn catalogue(set: &VectorSet) -> Vec<CaseMeta> {
    set.vectors
        .iter()
        .filter(|v| replayable(v))
        .map(|v| {
            let decision = is_decision(&v.id);
            if is_daemon_frame(v) {
                return frames::meta(v, decision);
            }
            let want = match (v.expect.verdict.as_str(), &v.expect.code) {
                ("invalid", Some(code)) => format!("error:{code}"),
                _ => "accepted".to_string(),
            };
            CaseMeta {
                id: format!("{PREFIX}{}", v.id),
                clause: v.clause.clone(),
                level: if decision { Level::Should } else { Level::Must },
                tags: vec!["vector".into(), format!("{:?}", v.kind).to_lowercase()],
                requirement: format!(
                    "The golden vector {} ({}) is judged on the live daemon as the contract judges it{}.",
                    v.id,
                    if want == "accepted" { "accepted".to_string() } else { format!("refused {}", &want[6..]) },
                    if decision { "; a decision of this project where the protocol text is silent" } else { "" }
                ),
                techniques: crate::conform::coverage::vector_techniques(&v.id, want == "accepted"),
                level_with_grant: None,
                accepted: vec![want],
            }
        })
        .collect()
}

/// The vectors' capability handles and endpoints are public (the worked example's), so the
/// engine's scans could not tell them from text a daemon had anyway. A descriptor's handle of
/// the valid shape (32–512 base64url characters) is re-minted: replaced everywhere in the
/// document by a fresh random one of the same length and alphabet, starting with a letter or
/// digit (so the contract's verdict and the fit check are unchanged), and registered in
/// `c.handles` (every client line of the case is scanned for it, and the at-rest scan looks
/// for it). An absolute endpoint path of at least 8 bytes is registered in `c.endpoints`
/// (PC-6: it never reaches a client either). Shorter or malformed ones are left alone: they
/// could appear in a daemon's answer by chance; so is a handle the document also holds
/// elsewhere (`desc.capability-handle.reused-as-adapter-id`, `.inside-session-id`).
fn register_secrets(c: &mut DCtx<'_>, doc: &mut Value) {
    use base64::Engine;
    let d = &doc["payload"]["resources"]["tools"]["descriptor"];
    let handle = d["binding"]["capabilityHandle"].as_str().map(str::to_string);
    let endpoint = d["endpoint"]["path"].as_str().map(str::to_string);
    let shaped = |h: &String| {
        (32..=512).contains(&h.len()) && h.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    // A handle the document also holds elsewhere (as another member, inside a session id) is
    // left alone: that member is no secret, a daemon may keep or echo it, and re-minting only
    // the handle would change the vector's point.
    let text = serde_json::to_string(&*doc).unwrap_or_default();
    let elsewhere = |h: &String| text.matches(h.as_str()).count() > 1;
    if let Some(h) = handle.filter(|h| shaped(h) && !elsewhere(h)) {
        let mut b = vec![0u8; h.len()];
        let _ = getrandom::fill(&mut b);
        let mut fresh: String =
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&b).chars().take(h.len()).collect();
        if !fresh.starts_with(|ch: char| ch.is_ascii_alphanumeric()) {
            fresh.replace_range(..1, "h");
        }
        rewrite(doc, &h, &fresh);
        c.probe.remember_minted(&fresh);
        c.handles.push(fresh);
    }
    if let Some(e) = endpoint.filter(|e| e.starts_with('/') && e.len() >= 8) {
        c.endpoints.push(e);
    }
}

/// Replace every string equal to `from` inside `v` by `to`.
fn rewrite(v: &mut Value, from: &str, to: &str) {
    match v {
        Value::String(s) if s == from => *s = to.to_string(),
        Value::Array(a) => a.iter_mut().for_each(|x| rewrite(x, from, to)),
        Value::Object(m) => m.values_mut().for_each(|x| rewrite(x, from, to)),
        _ => {}
    }
}

/// The line a vector is sent as on the live daemon, and the token the contract expects for
/// it there; `Err` is a skip reason.
fn materialize(c: &mut DCtx<'_>, set: &VectorSet, v: &Vector) -> Result<(Vec<u8>, String), String> {
    let ctx = set.context(v)?;
    let raw = v.raw.is_some() || v.raw_hex.is_some();
    if raw && v.kind != Kind::Descriptor {
        let line = set.line(v)?;
        if memchr::memmem::find(&line, ctx.host_instance_id.as_bytes()).is_some() {
            return Err("a raw vector that names the vector host cannot be rewritten to the live host".into());
        }
        return Ok((line, expected_token(v)));
    }
    let mut doc = if raw {
        // A raw descriptor is embedded in an open, so it must be one JSON value.
        crate::wire::decode_strict(&set.line(v)?)
            .map_err(|_| "a raw descriptor that is not one strict JSON value cannot be embedded in an open")?
    } else {
        set.document(v)?
    };
    if v.kind == Kind::Descriptor {
        let mut open = json!({"protocolVersion": "2.0", "requestId": c.rid(), "operation": "open",
            "sessionId": ctx.session_id, "generation": ctx.generation,
            "payload": {"cwd": c.target.cwd, "session": {"mode": "new"},
                "resources": crate::contract::resources_with_tools(json!({"mode": "host-adapter", "descriptor": doc}))}});
        if let Some(m) = &c.target.model {
            open["payload"]["model"] = m.clone();
        }
        doc = open;
    }
    if let Some(why) = unsafe_to_replay(&doc) {
        return Err(why.into());
    }
    register_secrets(c, &mut doc);
    // Rewritten to the live host and a fresh session first. A vector whose point is an
    // invalid binding member (a host or session id the daemon can never have) keeps it: the
    // shape checks of the descriptor come before the binding is compared with the live one
    // (SPEC PC-3.2, checks 6 and 7 before 8), so the vector's refusal still wins there.
    let want = expected_token(v);
    let mut first = None;
    for (host, session) in [(true, true), (false, true), (true, false), (false, false)] {
        let (line, live) = live_document(c, &doc, &ctx.host_instance_id, host, session)?;
        if live == want {
            return Ok((line, want));
        }
        first.get_or_insert(live);
    }
    Err(format!(
        "rewritten to the live host and session, the document is {} by the contract, not the vector's {want}",
        first.unwrap_or_default()
    ))
}

/// `doc` with the vector host rewritten to the live one (`host`) and its session id to a
/// fresh one of the same length (`session`): the line to send and the contract's verdict on
/// it (as a daemon reads it: an integral float such as `2.0` is the integer 2).
fn live_document(
    c: &DCtx<'_>,
    doc: &Value,
    vector_host: &str,
    host: bool,
    session: bool,
) -> Result<(Vec<u8>, String), String> {
    let mut doc = doc.clone();
    if host {
        rewrite(&mut doc, vector_host, &c.host);
    }
    if session {
        // A command may create state: a session id of the same length, unique to this case.
        if let Some(sid) = doc.get("sessionId").and_then(Value::as_str).map(str::to_string) {
            // ASCII only: the same length in bytes and in units, so the fit check is unchanged.
            let n = sid.len();
            if n >= 4 && sid.is_ascii() {
                let fresh: String =
                    format!("{}{}", c.session.replace('-', ""), "x".repeat(n)).chars().take(n).collect();
                rewrite(&mut doc, &sid, &fresh);
            }
        }
    }
    let line = serde_json::to_vec(&doc).map_err(|e| e.to_string())?;
    let judged = crate::wire::decode_strict(&line)
        .map_err(|_| "the rewritten document does not decode as strict JSON".to_string())?;
    let live = match parse_command(&judged, &HostContext { host_instance_id: &c.host }) {
        Ok(_) => "accepted".to_string(),
        Err(e) => format!("error:{}", e.error.code.as_str()),
    };
    Ok((line, live))
}

fn expected_token(v: &Vector) -> String {
    match (v.expect.verdict.as_str(), &v.expect.code) {
        ("invalid", Some(code)) => format!("error:{code}"),
        _ => "accepted".into(),
    }
}

/// The codes of command validation and of the line decoder (a refusal with one of them is not
/// a dispatch outcome).
fn is_validation_code(code: &str) -> bool {
    crate::contract::command::VALIDATION_CODES
        .iter()
        .chain(&[Code::InvalidJson, Code::InvalidUtf8, Code::LineTooLarge])
        .any(|c| c.as_str() == code)
}

/// Replay the vector `id` (without the prefix).
pub fn run(c: &mut DCtx<'_>, set: &VectorSet, id: &str) -> Outcome {
    let Some(v) = set.vectors.iter().find(|v| v.id == id) else {
        return Outcome::Error(format!("no vector {id} in {}", set.dir.display()));
    };
    if is_daemon_frame(v) {
        return frames::run(c, set, v);
    }
    let (line, want) = match materialize(c, set, v) {
        Ok(x) => x,
        Err(why) => return Outcome::Skip(why),
    };
    let mut conn = match c.connect() {
        Ok(conn) => conn,
        Err(o) => return o,
    };
    let mut bytes = line.clone();
    bytes.push(b'\n');
    conn.send_raw(&bytes);
    let r = conn.recv_within(c.target.step * 3);
    let Some(f) = r.frame().cloned() else { return Outcome::token(r.describe()) };
    let code = f["error"]["code"].as_str().unwrap_or("").to_string();
    let token = match f["ok"].as_bool() {
        Some(true) => "accepted".to_string(),
        Some(false) if want == "accepted" && !is_validation_code(&code) => "accepted".to_string(),
        Some(false) => format!("error:{code}"),
        None => "frame".to_string(),
    };
    let mut problems = Vec::new();
    if f["ok"] == false && token == want {
        // The version echo: a refusal of a request whose version was accepted carries it (a
        // line the decoder refuses has no version).
        let wire = Code::from_wire(&code);
        let decoded = !matches!(wire, Some(Code::InvalidJson | Code::InvalidUtf8 | Code::LineTooLarge));
        let sent: Option<Value> = crate::wire::decode_strict(&line).ok().filter(|_| decoded);
        let version = sent.as_ref().and_then(|s| s["protocolVersion"].as_str()).map(str::to_string);
        let accepted_version = version
            .as_deref()
            .filter(|s| crate::contract::command::route_version(Some(&Value::String((*s).to_string()))).is_ok());
        if let Some(ver) = accepted_version {
            if f["protocolVersion"] != ver {
                problems.push(format!(
                    "the refusal is answered as {} instead of the request's {ver}",
                    f["protocolVersion"]
                ));
            }
        }
        // Whether the connection closes.
        let must_close = matches!(
            wire,
            Some(Code::IncompatibleProtocol | Code::InvalidJson | Code::InvalidUtf8 | Code::LineTooLarge)
        );
        // PC-2.2: retryable is false for every validation error.
        if is_validation_code(&code) && f["error"]["retryable"] != false {
            problems.push(format!(
                "the validation error {code} is answered with retryable {}; it must be false",
                f["error"]["retryable"]
            ));
        }
        let closed = closes_within(&mut conn, c.target.step, must_close);
        if must_close && !closed {
            problems.push(format!("the connection stays open after {code}; it must close"));
        }
        if !must_close && closed {
            problems.push(format!("the connection closed after {code}; a validation error keeps it open"));
        }
    }
    Outcome::with(token, problems)
}

/// Whether the connection closes: when a close is expected, wait for it; otherwise prove it
/// open with a handshake answered on it.
fn closes_within(conn: &mut crate::conform::adapter::conn::Conn, step: Duration, expect_close: bool) -> bool {
    if expect_close {
        loop {
            match conn.recv_within(step) {
                Recv::Closed => return true,
                Recv::Timeout => return false,
                _ => continue,
            }
        }
    }
    conn.send(
        &json!({"protocolVersion": "2.0", "requestId": "pc-vector-alive", "operation": "handshake", "payload": {}}),
    );
    loop {
        match conn.recv_within(step) {
            Recv::Frame(f, _) if f["requestId"] == "pc-vector-alive" => return false,
            Recv::Frame(..) | Recv::Garbage(_) => continue,
            Recv::Closed => return true,
            Recv::Timeout => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_as_the_differences_file_means() {
        assert!(glob("framing.duplicate-key.*", "framing.duplicate-key.nested"));
        assert!(glob("a*c", "abbbc") && glob("a*", "a") && !glob("a*c", "ab"));
        assert!(is_decision("framing.bom.leading"));
        assert!(!is_decision("cmd.open-v2.generation-2pow53"));
    }

    #[test]
    fn every_replayable_vector_becomes_one_case_with_its_expectation() {
        let set = VectorSet::load(&crate::vectors::default_dir()).unwrap();
        let cat = catalogue(&set);
        let n = set.vectors.iter().filter(|v| replayable(v)).count();
        assert_eq!(cat.len(), n);
        assert!(n > 500, "{n}");
        let open = cat.iter().find(|m| m.id == "vector:cmd.open-v2.resources.tools.missing").unwrap();
        assert_eq!(
            (open.level, open.accepted.as_slice()),
            (Level::Must, ["error:invalid_field".to_string()].as_slice())
        );
    }
}
