//! Golden vectors replayed against a live adapter (DESIGN "Data first"): every `frame` vector
//! travelling to the adapter and every `path` vector becomes a case `vector:<vector id>`.
//!
//! A frame vector is judged against its context descriptor (the worked example's binding);
//! on a live socket its identity, handle, operations and limits are rewritten to the live
//! binding, its idempotency key made unique to the run, and the rewritten line judged again
//! by the contract. When that changes the verdict (the vector depended on a limit or an
//! operation set the live binding does not have), the case is skipped with the reason, so a
//! replayed case always means what its vector says. A `bind` is sent as the first line of a
//! fresh connection; every other frame after a valid bind on a fresh connection.
//!
//! What a case checks: a `close` vector closes the connection without an answer; a `reply`
//! vector is answered `result ok:false` with its code and the connection stays open; a valid
//! frame is answered as its kind is (`bound`, a result that is not a validation refusal,
//! `aborted`, `revoked`). The engine adds the side-effect oracle (nothing changes but the path
//! a valid write names), the secret scan and the contract judgement of every frame the
//! adapter sends.
//!
//! Two allowances follow the protocol rather than the vector. SPEC §4.5: an invoke whose ids
//! and operation are valid but which carries an unknown top-level key may be closed **or**
//! answered `invalid_request`; both are accepted. And an adapter judges a `bind` against its
//! grant, not against a descriptor: a bind that differs from the descriptor only in its
//! operations or limits may lie inside the grant, so such vectors are skipped.
//!
//! A path vector is sent as the path of an `fs.stat`; what the adapter must do is the
//! contract's adapter-side verdict on the string (SPEC §5.1: an adapter also takes `./` and a
//! single trailing `/`, which a daemon never sends): `invalid_path`, or any answer that is not a
//! validation refusal. Vectors that pin a decision of this project where the protocol text is
//! silent (`conformance/pi-daemon-0.3.3-differences.json`) are SHOULD cases.

use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{json, Value};

use super::conn::Recv;
use super::Ctx;
use crate::conform::case::{CaseMeta, Level, Outcome};
use crate::conform::daemon::replay::{is_decision, PREFIX};
use crate::contract::frame::{extra_keys_only, Binding, Direction};
use crate::contract::path::{validate_relative_path, PathSide};
use crate::contract::{Code, LimitValues};
use crate::judge::{judge_line, Context, Kind, Verdict};
use crate::vectors::{Vector, VectorSet};

/// Whether a vector is replayed against an adapter.
fn replayable(set: &VectorSet, v: &Vector) -> bool {
    match v.kind {
        Kind::Path => true,
        Kind::Frame => set.context(v).is_ok_and(|c| c.direction == Direction::ToAdapter),
        _ => false,
    }
}

/// The codes an adapter answers a valid-looking request it refuses to judge with: a result
/// with one of them is a refusal of the request, not an answer to it.
const VALIDATION_CODES: [Code; 3] = [Code::InvalidRequest, Code::InvalidPath, Code::OperationNotGranted];

fn is_validation_code(code: &str) -> bool {
    VALIDATION_CODES.iter().any(|c| c.as_str() == code)
}

/// `(code, disposition)` of a verdict (`None` when valid).
fn verdict_key(v: &Verdict) -> Option<(String, Option<String>)> {
    match v {
        Verdict::Valid => None,
        Verdict::Invalid { code, disposition, .. } => Some((code.clone(), disposition.clone())),
    }
}

/// The `kind` of a frame line, when it decodes.
fn kind_of(line: &[u8]) -> Option<String> {
    crate::wire::decode_strict(line).ok()?.get("kind")?.as_str().map(str::to_string)
}

/// Whether the frame may also be answered `invalid_request` (SPEC §4.5: an attributable
/// invoke refused only for unknown top-level keys).
fn extra_key_reply(doc: &Value, ctx: &Context) -> bool {
    ctx.binding.as_ref().is_some_and(|b| extra_keys_only(doc, b).is_some())
}

/// The outcomes that pass for a frame whose contract verdict is `verdict`.
fn accepted_for_frame(verdict: &Verdict, kind: Option<&str>, extra_key_reply: bool) -> Vec<String> {
    match verdict {
        Verdict::Valid => vec![match kind {
            Some("bind") => "bound".into(),
            Some("abort") => "aborted".into(),
            Some("revoke") => "revoked".into(),
            _ => "answered".into(),
        }],
        Verdict::Invalid { code, disposition, .. } if disposition.as_deref() == Some("reply") => {
            vec![format!("error:{code}")]
        }
        Verdict::Invalid { .. } => {
            let mut a = vec!["closed".to_string()];
            if extra_key_reply {
                a.push(format!("error:{}", Code::InvalidRequest.as_str()));
            }
            a
        }
    }
}

/// The contract's adapter-side verdict on a path vector's document.
fn path_accepted(doc: &Value) -> Vec<String> {
    let refused = match doc.as_str() {
        Some(s) => validate_relative_path(s, PathSide::Adapter, "payload.path").err().map(|e| e.code),
        None => Some(Code::InvalidRequest),
    };
    vec![match refused {
        Some(code) => format!("error:{}", code.as_str()),
        None => "answered".into(),
    }]
}

/// The catalogue entries of the vectors of `set` replayed against an adapter.
pub fn catalogue(set: &VectorSet) -> Vec<CaseMeta> {
    set.vectors
        .iter()
        .filter(|v| replayable(set, v))
        .filter_map(|v| {
            let accepted = match v.kind {
                Kind::Path => path_accepted(&set.document(v).or_else(|_| decoded(set, v)).ok()?),
                _ => {
                    let verdict = set.judge(v).ok()?;
                    let line = set.line(v).ok()?;
                    let ctx = set.context(v).ok()?;
                    let extra = v.raw.is_none()
                        && v.raw_hex.is_none()
                        && set.document(v).is_ok_and(|d| extra_key_reply(&d, &ctx));
                    accepted_for_frame(&verdict, kind_of(&line).as_deref(), extra)
                }
            };
            let decision = is_decision(&v.id);
            let what = match v.kind {
                Kind::Path => "sent as the path of an fs.stat, is judged by the adapter as the contract judges it \
                               on the adapter side"
                    .to_string(),
                _ => format!("sent to the adapter on the live binding, is {} with no side effect", describe(&accepted)),
            };
            Some(CaseMeta {
                id: format!("{PREFIX}{}", v.id),
                clause: v.clause.clone(),
                level: if decision { Level::Should } else { Level::Must },
                tags: vec!["vector".into(), format!("{:?}", v.kind).to_lowercase()],
                requirement: format!(
                    "The golden vector {}, {what}{}.",
                    v.id,
                    if decision { "; a decision of this project where the protocol text is silent" } else { "" }
                ),
                techniques: crate::conform::coverage::vector_techniques(&v.id, valid_vector(&accepted)),
                level_with_grant: None,
                accepted,
            })
        })
        .collect()
}

/// Whether the replayed vector is one a conforming adapter accepts (answers, binds,
/// acknowledges) rather than refuses.
fn valid_vector(accepted: &[String]) -> bool {
    accepted.iter().all(|a| !(a == "closed" || a.starts_with("error:")))
}

fn describe(accepted: &[String]) -> String {
    accepted
        .iter()
        .map(|a| match a.as_str() {
            "closed" => "closed without an answer".to_string(),
            "answered" => "answered (not refused)".to_string(),
            "bound" | "aborted" | "revoked" => format!("answered {a}"),
            e => format!("answered {}", e.replace("error:", "ok:false ")),
        })
        .collect::<Vec<_>>()
        .join(" or ")
}

fn decoded(set: &VectorSet, v: &Vector) -> Result<Value, String> {
    crate::wire::decode_strict(&set.line(v)?).map_err(|_| format!("{}: not one JSON value", v.id))
}

/// A counter making idempotency keys unique within this process.
static NONCE: AtomicU64 = AtomicU64::new(0);

/// The substitutions from a vector's binding to the live one.
struct Rewrite<'a> {
    from: &'a Binding,
    to: &'a Binding,
    /// The vector's idempotency key and its unique replacement (same length).
    key: Option<(String, String)>,
}

impl Rewrite<'_> {
    fn strings(&self) -> Vec<(String, String)> {
        let (f, t) = (self.from.identity(), self.to.identity());
        let mut out = vec![
            (f.adapter_id.to_string(), t.adapter_id.to_string()),
            (f.adapter_version.to_string(), t.adapter_version.to_string()),
            (f.host_instance_id.to_string(), t.host_instance_id.to_string()),
            (f.session_id.to_string(), t.session_id.to_string()),
        ];
        out.extend(self.key.clone());
        out
    }

    /// A string of the vector: an identity value becomes the live one; the vector's handle,
    /// anywhere inside, the live handle; a string that is the vector's handle with one or two
    /// characters changed, the live handle with the same positions changed.
    fn string(&self, s: &str) -> String {
        if let Some((_, to)) = self.strings().into_iter().find(|(from, _)| from == s) {
            return to;
        }
        let (vh, lh) = (self.from.handle().expose(), self.to.handle().expose());
        if s.contains(vh) {
            return s.replace(vh, lh);
        }
        if s.len() == vh.len() && s.is_ascii() {
            let diff: Vec<usize> =
                s.bytes().zip(vh.bytes()).enumerate().filter(|(_, (a, b))| a != b).map(|(i, _)| i).collect();
            if (1..=2).contains(&diff.len()) {
                let mut live: Vec<u8> = lh.as_bytes().to_vec();
                let n = live.len();
                for i in diff {
                    // The same distance from the end as in the vector.
                    let j = n - (vh.len() - i);
                    live[j] = if live[j] == b'A' { b'B' } else { b'A' };
                }
                return String::from_utf8(live).unwrap_or_else(|_| s.to_string());
            }
        }
        s.to_string()
    }

    fn value(&self, v: &mut Value, top: bool) {
        match v {
            Value::String(s) => *s = self.string(s),
            Value::Array(a) => a.iter_mut().for_each(|x| self.value(x, false)),
            Value::Object(m) => {
                let old = std::mem::take(m);
                for (k, mut x) in old {
                    if top {
                        match k.as_str() {
                            "generation" => x = self.generation(&x),
                            "operations" if x == self.from.operations_json() => x = self.to.operations_json(),
                            "limits" if x == limits_json(self.from) => x = limits_json(self.to),
                            _ => self.value(&mut x, false),
                        }
                    } else {
                        self.value(&mut x, false);
                    }
                    m.insert(self.string(&k), x);
                }
            }
            _ => {}
        }
    }

    /// The vector's generation becomes the live one; another generation keeps its distance
    /// from it (one below stays one below), so a wrong generation stays wrong.
    fn generation(&self, x: &Value) -> Value {
        let (from, to) = (self.from.identity().generation as i64, self.to.identity().generation as i64);
        match x.as_i64() {
            Some(g) if g == from => json!(to),
            Some(g) => {
                let shifted = to + (g - from);
                json!(if shifted >= 0 { shifted } else { to + 1 })
            }
            None => x.clone(),
        }
    }

    /// A raw line: identity strings as JSON strings, the handle anywhere.
    fn raw(&self, line: &[u8]) -> Vec<u8> {
        let mut out = line.to_vec();
        let mut pairs: Vec<(Vec<u8>, Vec<u8>)> = self
            .strings()
            .into_iter()
            .map(|(f, t)| (format!("\"{f}\"").into_bytes(), format!("\"{t}\"").into_bytes()))
            .collect();
        pairs.push((self.from.handle().expose().as_bytes().to_vec(), self.to.handle().expose().as_bytes().to_vec()));
        for sep in [b',', b'}'] {
            let mut f = format!("\"generation\":{}", self.from.identity().generation).into_bytes();
            let mut t = format!("\"generation\":{}", self.to.identity().generation).into_bytes();
            f.push(sep);
            t.push(sep);
            pairs.push((f, t));
        }
        for (f, t) in pairs {
            out = replace_bytes(&out, &f, &t);
        }
        out
    }
}

fn limits_json(b: &Binding) -> Value {
    b.limits().to_json()
}

fn replace_bytes(hay: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    if from.is_empty() {
        return hay.to_vec();
    }
    let mut out = Vec::with_capacity(hay.len());
    let mut i = 0;
    while let Some(p) = memchr::memmem::find(&hay[i..], from) {
        out.extend_from_slice(&hay[i..i + p]);
        out.extend_from_slice(to);
        i += p + from.len();
    }
    out.extend_from_slice(&hay[i..]);
    out
}

/// A key of the same length unique to this run, when the vector's key is a valid one.
fn unique_key(key: &str) -> Option<String> {
    let n = key.len();
    if n < 8 || !key.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._:".contains(&b)) {
        return None;
    }
    let nonce = NONCE.fetch_add(1, Ordering::Relaxed);
    let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    let tail = format!("{:x}{:x}", (stamp as u64) ^ u64::from(std::process::id()), nonce);
    let keep = n.saturating_sub(tail.len()).max(1);
    Some(format!("{}{}", &key[..keep], &tail[tail.len().saturating_sub(n - keep)..]))
}

/// A frame vector materialized on the live binding.
struct Live {
    line: Vec<u8>,
    kind: Option<String>,
    accepted: Vec<String>,
    /// Paths (relative to the root) a valid mutating invoke may change.
    allowed: Vec<String>,
    /// The bind that opens the connection for a frame other than `bind`.
    bind: Value,
}

fn materialize(c: &Ctx<'_>, set: &VectorSet, v: &Vector) -> Result<Live, String> {
    let ctx = set.context(v)?;
    let from = ctx.binding.clone().ok_or("the vector has no binding")?;
    let mut to = narrowed(&Binding::from(&c.target.admitted), &from);
    let raw = v.raw.is_some() || v.raw_hex.is_some();
    let doc = if raw { None } else { Some(set.document(v)?) };
    let key = doc
        .as_ref()
        .and_then(|d| d.get("idempotencyKey"))
        .and_then(Value::as_str)
        .and_then(|k| unique_key(k).map(|u| (k.to_string(), u)));
    let rw = Rewrite { from: &from, to: &to, key };
    let (line, live_doc) = match doc {
        None => (rw.raw(&set.line(v)?), None),
        Some(mut d) => {
            rw.value(&mut d, true);
            (serde_json::to_vec(&d).map_err(|e| e.to_string())?, Some(d))
        }
    };
    // A raw line replayed on a binding narrowed to the vector's limits keeps its distance from
    // the line limit: the limit grows by what the rewriting added (a line exactly at the limit
    // stays exactly at it).
    let grown = line.len().saturating_sub(set.line(v)?.len()) as u64;
    if raw && grown > 0 && to.limits() == from.limits() && to.limits() != c.target.admitted.limits() {
        to.limits_mut().max_request_bytes += grown as i64;
    }
    let kind = kind_of(&line);
    if kind.as_deref() == Some("bind") && !raw {
        let d = set.document(v)?;
        if d.get("operations") != Some(&from.operations_json()) || d.get("limits") != Some(&limits_json(&from)) {
            return Err("the vector's bind differs from its descriptor in operations or limits; an adapter judges a \
                        bind against its grant, which may allow it"
                .into());
        }
    }
    let want = set.judge(v)?;
    let live_ctx = Context { binding: Some(to.clone()), direction: Direction::ToAdapter, ..Context::default() };
    let live = judge_line(&line, Some(Kind::Frame), &live_ctx).1;
    if verdict_key(&live) != verdict_key(&want) {
        let show = |v: &Verdict| match verdict_key(v) {
            None => "valid".to_string(),
            Some((code, d)) => format!("{code} ({})", d.unwrap_or_default()),
        };
        return Err(format!(
            "rewritten to the live binding, the frame is {} by the contract, not the vector's {}: the vector depends on \
             its own descriptor",
            show(&live),
            show(&want)
        ));
    }
    let extra = live_doc.as_ref().is_some_and(|d| extra_key_reply(d, &live_ctx));
    let accepted = accepted_for_frame(&live, kind.as_deref(), extra);
    let mut allowed = Vec::new();
    if let (Verdict::Valid, Some(d)) = (&live, &live_doc) {
        let mutating = d["operation"].as_str().is_some_and(crate::contract::operation::is_mutating_name);
        if let (true, Some(p)) = (mutating, d["payload"]["path"].as_str()) {
            let p = p.trim_start_matches("./").trim_end_matches('/');
            let parts: Vec<&str> = p.split('/').collect();
            for i in 1..=parts.len() {
                allowed.push(parts[..i].join("/"));
            }
        }
    }
    let bind = to.bind_frame();
    Ok(Live { line, kind, accepted, allowed, bind })
}

/// The live binding a vector is replayed on: the descriptor's, narrowed to the vector's
/// operations (in its order) when they are a proper subset, and to the vector's limits when
/// every one is at or below the live one. PC-4.5 requires an adapter to bind such a narrower
/// bind (`adapter.bind.narrower-echo`), so a vector about an operation the bind did not grant
/// or about a small line limit can still be replayed.
fn narrowed(live: &Binding, vector: &Binding) -> Binding {
    let mut b = live.clone();
    if vector.operations() != live.operations() && vector.operations().iter().all(|o| live.operations().contains(o)) {
        *b.operations_mut() = vector.operations().to_vec();
    }
    let (l, v) = (live.limits().to_json(), vector.limits().to_json());
    let below = v
        .as_object()
        .is_some_and(|m| m.iter().all(|(k, x)| matches!((x.as_u64(), l[k].as_u64()), (Some(a), Some(b)) if a <= b)));
    if below && v != l {
        *b.limits_mut() = *vector.limits();
    }
    b
}

/// Replay the vector `id` (without the prefix).
pub fn run(c: &mut Ctx<'_>, set: &VectorSet, id: &str) -> Outcome {
    let Some(v) = set.vectors.iter().find(|v| v.id == id) else {
        return Outcome::Error(format!("no vector {id} in {}", set.dir.display()));
    };
    match v.kind {
        Kind::Path => run_path(c, set, v),
        _ => run_frame(c, set, v),
    }
}

/// The token of an answer to a request: `answered` unless it is a validation refusal.
fn answer_token(r: &Recv) -> String {
    match r.frame() {
        Some(f) if f.kind() == Some("result") => match f.ok() {
            Some(false) => {
                let code = f.error_code().unwrap_or("?");
                if is_validation_code(code) {
                    format!("error:{code}")
                } else {
                    "answered".into()
                }
            }
            _ => "answered".into(),
        },
        _ => r.describe(),
    }
}

fn run_path(c: &mut Ctx<'_>, set: &VectorSet, v: &Vector) -> Outcome {
    let doc = match set.document(v).or_else(|_| decoded(set, v)) {
        Ok(d) => d,
        Err(why) => return Outcome::Skip(why),
    };
    if !c.target.admitted.operations().iter().any(|o| o.to_string() == "fs.stat") {
        return Outcome::Skip("the binding does not grant fs.stat".into());
    }
    c.settle = std::time::Duration::from_millis(2);
    let mut conn = match c.bound() {
        Ok(conn) => conn,
        Err(o) => return Outcome::Error(format!("inconclusive: the valid bind was not bound ({o:?})")),
    };
    let r = c.call(&mut conn, super::req::raw("fs.stat", json!({ "path": doc })));
    let token = answer_token(&r);
    Outcome::with(token, alive_after_reply(c, &mut conn, &r))
}

/// After a `result ok:false` refusal the connection stays open: a follow-up `fs.stat` of the
/// root is answered.
fn alive_after_reply(c: &mut Ctx<'_>, conn: &mut super::conn::Conn, r: &Recv) -> Vec<String> {
    let refused = r.frame().is_some_and(|f| f.kind() == Some("result") && f.ok() == Some(false));
    if !refused || !c.target.admitted.operations().iter().any(|o| o.to_string() == "fs.stat") {
        return Vec::new();
    }
    let follow = c.call(conn, super::req::stat("."));
    match follow.frame() {
        Some(f) if f.kind() == Some("result") => Vec::new(),
        _ => vec![format!(
            "PC-4.5: after answering a refusal the connection must stay open, but a follow-up fs.stat got `{}`",
            follow.describe()
        )],
    }
}

fn run_frame(c: &mut Ctx<'_>, set: &VectorSet, v: &Vector) -> Outcome {
    let live = match materialize(c, set, v) {
        Ok(l) => l,
        Err(why) => return Outcome::Skip(why),
    };
    c.allowed.extend(live.allowed.iter().cloned());
    // Only a mutating invoke can leave a late side effect worth waiting for.
    let mutating = memchr::memmem::find(&live.line, b"fs.write").is_some()
        || memchr::memmem::find(&live.line, b"fs.edit").is_some();
    if !mutating {
        c.settle = std::time::Duration::from_millis(2);
    }
    let mut bytes = live.line.clone();
    bytes.push(b'\n');
    let first = live.kind.as_deref() == Some("bind");
    let mut conn = if first {
        match c.connect() {
            Ok(conn) => conn,
            Err(o) => return o,
        }
    } else {
        match c.bind_with(&live.bind) {
            Ok(conn) => conn,
            Err(o) => return Outcome::Error(format!("inconclusive: the valid bind was not bound ({o:?})")),
        }
    };
    conn.send_raw(&bytes);
    let closing = live.accepted.iter().any(|a| a == "closed");
    let r = match (closing, live.kind.as_deref()) {
        (true, _) => conn.expect_close(c.step()),
        (false, Some("invoke")) => {
            let id = crate::wire::decode_strict(&live.line)
                .ok()
                .and_then(|d| d.get("requestId").and_then(Value::as_str).map(str::to_string))
                .unwrap_or_default();
            conn.recv_for(&id)
        }
        _ => conn.recv(),
    };
    let token = match live.kind.as_deref() {
        Some("invoke") => answer_token(&r),
        _ => r.describe(),
    };
    let mut problems = Vec::new();
    if live.accepted.contains(&token) && !first && token != "closed" && token != "revoked" {
        problems.extend(alive_after_reply(c, &mut conn, &r));
    }
    Outcome::with(token, problems)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set() -> VectorSet {
        VectorSet::load(&crate::vectors::default_dir()).unwrap()
    }

    #[test]
    fn every_to_adapter_frame_and_path_vector_becomes_one_case() {
        let set = set();
        let cat = catalogue(&set);
        let want = set
            .vectors
            .iter()
            .filter(|v| {
                v.kind == Kind::Path
                    || (v.kind == Kind::Frame
                        && v.context.get("direction").and_then(Value::as_str) == Some("to-adapter"))
            })
            .count();
        assert_eq!(cat.len(), want);
        assert!(want > 150, "{want}");
    }

    #[test]
    fn expectations_follow_the_disposition_and_the_extra_key_allowance() {
        let cat = catalogue(&set());
        let acc = |id: &str| cat.iter().find(|m| m.id == format!("vector:{id}")).unwrap().accepted.clone();
        assert_eq!(acc("frame.invoke.payload.extra-key"), ["error:invalid_request"]);
        assert_eq!(acc("frame.invoke.path.dot-dot"), ["error:invalid_path"]);
        assert_eq!(acc("frame.invoke.request-id.129"), ["closed"]);
        // SPEC 4.5: an attributable invoke with an unknown top-level key may be answered.
        assert_eq!(acc("frame.invoke.extra-key"), ["closed", "error:invalid_request"]);
        // An abort with an extra key is not an invoke: close only.
        assert_eq!(acc("frame.abort.extra-key"), ["closed"]);
        assert_eq!(acc("frame.bind.valid"), ["bound"]);
        assert_eq!(acc("frame.invoke.valid"), ["answered"]);
        assert_eq!(acc("frame.revoke.valid"), ["revoked"]);
    }

    #[test]
    fn daemon_side_path_vectors_expect_the_adapter_side_verdict() {
        let set = set();
        let cat = catalogue(&set);
        // A trailing slash: refused by a daemon, taken by an adapter.
        let daemon_refused: Vec<&Vector> = set
            .vectors
            .iter()
            .filter(|v| v.kind == Kind::Path && v.expect.verdict == "invalid")
            .filter(|v| v.context.get("side").and_then(Value::as_str) != Some("adapter"))
            .collect();
        let taken = daemon_refused
            .iter()
            .filter(|v| {
                cat.iter().find(|m| m.id == format!("vector:{}", v.id)).unwrap().accepted == ["answered".to_string()]
            })
            .count();
        assert!(taken > 0 && taken < daemon_refused.len(), "{taken} of {}", daemon_refused.len());
    }

    #[test]
    fn rewriting_keeps_the_meaning_of_a_near_handle() {
        let set = set();
        let v = set.vectors.iter().find(|v| v.id == "frame.bind.handle-differs-last-char").unwrap();
        let from = set.context(v).unwrap().binding.unwrap();
        let mut to = from.clone();
        to.set_handle(crate::contract::CapabilityHandle::new("Q".repeat(43)));
        let rw = Rewrite { from: &from, to: &to, key: None };
        let near = rw.string(v.patch[0].value.as_str().unwrap());
        assert_eq!(near.len(), 43);
        assert_eq!(&near[..42], &"Q".repeat(42));
        assert_ne!(near, "Q".repeat(43));
        assert_eq!(rw.string(from.handle().expose()), "Q".repeat(43));
        assert_eq!(rw.string(&format!("x{}y", from.handle().expose())), format!("x{}y", "Q".repeat(43)));
    }

    #[test]
    fn unique_keys_keep_length_and_alphabet() {
        let a = unique_key("turn-1-read-1").unwrap();
        let b = unique_key("turn-1-read-1").unwrap();
        assert_eq!((a.len(), b.len()), (13, 13));
        assert_ne!(a, b);
        assert!(a.bytes().all(|c| c.is_ascii_alphanumeric() || b"-._:".contains(&c)));
        assert_eq!(unique_key("turn 1"), None);
    }
}
