//! The adapter cases. Each returns the observed outcome token (compared with the catalogue's
//! accepted outcomes) and any further problems it found; the engine adds the side-effect
//! oracle and the secret scan to every case.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::conn::{Peer, Recv};
use super::fixture::{BIG_SIZE, MIXED_LISTED};
use super::provoke::{blocker, gather, keep_reading, ms, provoke, Gathered, Try, READ_AS_THEY_ARRIVE, SERIAL_AFTER};
use super::req::Call;
use super::{data, req, token, Ctx};
use crate::conform::case::Outcome;
use crate::contract::adapter_error::AdapterCode;
use crate::contract::frame::MAX_CONTENT_BYTES as MAX_CONTENT;
use crate::contract::types::tool_adapter::{AdapterFrame, ToolOperation};

/// A case implementation.
pub type CaseFn = fn(&mut Ctx<'_>) -> Outcome;

macro_rules! tryo {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(o) => return o,
        }
    };
}

fn tok(r: Result<Recv, Outcome>) -> Outcome {
    match r {
        Ok(r) => Outcome::token(token(&r)),
        Err(o) => o,
    }
}

fn sha(b: &[u8]) -> String {
    crate::contract::answer::content_digest(b)
}

fn read_root(c: &Ctx<'_>, p: &str) -> Vec<u8> {
    std::fs::read(c.target.root.join(p)).unwrap_or_default()
}

/// Check one successful result's data against expected fields; returns the outcome.
pub(super) fn ok_with(r: &Recv, checks: &[(&str, Value)]) -> Outcome {
    let Some(d) = data(r) else { return Outcome::token(token(r)) };
    let problems = checks
        .iter()
        .filter(|(k, v)| d.pointer(k) != Some(v))
        .map(|(k, v)| {
            format!("data{k} should be {v}, got {}", d.pointer(k).map(|x| x.to_string()).unwrap_or("nothing".into()))
        })
        .collect();
    Outcome::with("result:ok", problems)
}

// ---------------------------------------------------------------- bind

/// The echo itself (identity, operation order, every limit, no handle, no extra key) is
/// judged by the connection's contract judge against the bind sent.
fn bind_echo_exact(c: &mut Ctx<'_>) -> Outcome {
    let mut conn = tryo!(c.connect());
    conn.send(&c.bind_frame());
    let r = conn.recv();
    Outcome::token(if r.frame().is_some_and(|v| v.kind() == Some("bound")) { "bound".into() } else { token(&r) })
}

fn bind_bound_without_handle(c: &mut Ctx<'_>) -> Outcome {
    // A handle in bound is refused by the judge (closed keys, then the secret scan).
    bind_echo_exact(c)
}

fn bind_narrower(c: &mut Ctx<'_>) -> Outcome {
    let mut b = c.bind_frame();
    let ops: Vec<Value> = b["operations"].as_array().cloned().unwrap_or_default().into_iter().rev().collect();
    b["operations"] = Value::Array(ops);
    let l = &mut b["limits"];
    if let Some(n) = l["maxConcurrentRequests"].as_u64().filter(|n| *n > 1) {
        l["maxConcurrentRequests"] = json!(n - 1);
    }
    if let Some(n) = l["requestTimeoutMs"].as_u64().filter(|n| *n > 100) {
        l["requestTimeoutMs"] = json!(n - 1);
    }
    match c.bind_with(&b) {
        Ok(_) => Outcome::token("bound"),
        Err(o) => o,
    }
}

fn refused_bind(c: &mut Ctx<'_>, mutate: impl FnOnce(&mut Value)) -> Outcome {
    let mut b = c.bind_frame();
    mutate(&mut b);
    let mut conn = tryo!(c.connect());
    conn.send(&b);
    let r = conn.expect_close(c.step());
    Outcome::token(token(&r))
}

fn bind_limit_above_grant(c: &mut Ctx<'_>) -> Outcome {
    let cur = c.target.admitted.limits().max_concurrent_requests.get();
    if cur >= 64 {
        return Outcome::Skip("maxConcurrentRequests is already at its maximum".into());
    }
    refused_bind(c, |b| b["limits"]["maxConcurrentRequests"] = json!(cur + 1))
}
fn bind_operation_outside_grant(c: &mut Ctx<'_>) -> Outcome {
    // The runner minted a narrower second grant (`--command`, selftest): ask it for the
    // operation it lacks. Otherwise the descriptor is taken to be the grant.
    let grant = c.target.narrow.clone().unwrap_or_else(|| c.target.admitted.clone());
    let all = crate::contract::descriptor::OPERATIONS;
    let Some(missing) = all.iter().find(|o| !grant.operations().iter().any(|g| g.to_string() == **o)).copied() else {
        return Outcome::Skip("the descriptor grants all six operations".into());
    };
    let mut b = grant.bind_frame();
    if let Some(a) = b["operations"].as_array_mut() {
        a.push(json!(missing))
    }
    let mut conn = tryo!(c.connect_as(&grant));
    conn.send(&b);
    Outcome::token(token(&conn.expect_close(c.step())))
}
fn bind_duplicate_key(c: &mut Ctx<'_>) -> Outcome {
    // The bind with its sessionId repeated, with the same valid value: a decoder that takes
    // either copy sees a correct bind, so only one that refuses duplicates closes.
    let b = c.bind_frame();
    let text = serde_json::to_string(&b).unwrap_or_default();
    let Some(body) = text.strip_suffix('}') else { return Outcome::Error("bind is not an object".into()) };
    let dup = format!("{body},\"sessionId\":{}}}\n", b["sessionId"]);
    let mut conn = tryo!(c.connect());
    conn.send_raw(dup.as_bytes());
    Outcome::token(token(&conn.expect_close(c.step())))
}

/// Each item of PC-4.5's list, one connection each: a bind whose identity differs from the
/// grant in exactly one field is closed without `bound`.
fn bind_each_identity_field_wrong(c: &mut Ctx<'_>) -> Outcome {
    let mut bound = Vec::new();
    for field in ["adapterId", "adapterVersion", "hostInstanceId", "sessionId", "generation"] {
        let mut b = c.bind_frame();
        // The last character changed within its class (a digit for a digit), so the value keeps
        // its format and only differs from the grant's.
        b[field] = changed(&b[field]);
        let mut conn = tryo!(c.connect());
        conn.note(&format!("the bind with {field} changed"));
        conn.send(&b);
        if conn.expect_close(c.step()).frame().is_some_and(|v| v.kind() == Some("bound")) {
            bound.push(field);
        }
    }
    if bound.is_empty() {
        Outcome::token("closed")
    } else {
        Outcome::with("bound", vec![format!("a bind differing from the grant only in {} was bound", bound.join(", "))])
    }
}

/// An identity value changed within its format: a number one higher, a string's last
/// character changed within its class (a digit for a digit).
pub(super) fn changed(v: &Value) -> Value {
    match v {
        Value::Number(n) => json!(n.as_u64().unwrap_or(0) + 1),
        Value::String(s) => {
            let mut chars: Vec<char> = s.chars().collect();
            if let Some(last) = chars.last_mut() {
                *last = match *last {
                    d @ '0'..='9' => char::from(b'0' + (d as u8 - b'0' + 1) % 10),
                    'x' => 'y',
                    _ => 'x',
                };
            }
            json!(chars.into_iter().collect::<String>())
        }
        v => v.clone(),
    }
}

/// Each of the seven limits asked one above the grant's ceiling (taken to be the
/// descriptor's), one connection each: closed without `bound`.
fn bind_each_limit_above_grant(c: &mut Ctx<'_>) -> Outcome {
    let mut bound = Vec::new();
    let mut tried = 0;
    for (name, _, max) in crate::contract::descriptor::LIMITS {
        let mut b = c.bind_frame();
        let Some(cur) = b["limits"][name].as_u64().filter(|v| *v < max) else { continue };
        b["limits"][name] = json!(cur + 1);
        tried += 1;
        let mut conn = tryo!(c.connect());
        conn.note(&format!("the bind asks {name} {} (the ceiling is {cur})", cur + 1));
        conn.send(&b);
        if conn.expect_close(c.step()).frame().is_some_and(|v| v.kind() == Some("bound")) {
            bound.push(name);
        }
    }
    if tried == 0 {
        return Outcome::Skip("every limit of the descriptor is already at its maximum".into());
    }
    if bound.is_empty() {
        Outcome::token("closed")
    } else {
        Outcome::with(
            "bound",
            vec![format!("a bind asking more than the grant's ceiling was bound for {}", bound.join(", "))],
        )
    }
}

/// One connection per variant: a `bind` whose `field` is set to the variant's value (and
/// otherwise the descriptor's) is closed without `bound`, within a step.
fn each_bind_closed(c: &mut Ctx<'_>, field: &str, variants: Vec<(String, Value)>) -> Outcome {
    let cells = variants
        .into_iter()
        .map(|(what, v)| {
            let mut b = c.bind_frame();
            b[field] = v;
            (format!("{field} {what}"), b)
        })
        .collect();
    binds_closed(c, cells, ", ", |bound| {
        format!("a bind with {bound} was bound: it is not the binding's, so the bind must be closed without bound")
    })
}

/// Send each `(what, bind)` of `cells` on a connection of its own: each must be closed without
/// `bound` within a step. Token `closed`, or `bound` with `why` of the binds (joined by `sep`)
/// that were bound; another answer ends the case with its token.
fn binds_closed(c: &mut Ctx<'_>, cells: Vec<(String, Value)>, sep: &str, why: impl Fn(&str) -> String) -> Outcome {
    let mut bound = Vec::new();
    for (what, b) in cells {
        let mut conn = tryo!(c.connect());
        conn.note(&format!("the bind with {what}"));
        conn.send(&b);
        match conn.expect_close(c.step()) {
            Recv::Closed => {}
            r if r.frame().is_some_and(|v| v.kind() == Some("bound")) => bound.push(what),
            r => {
                return Outcome::with(
                    token(&r),
                    vec![format!("the bind with {what} was answered `{}` instead of a close", token(&r))],
                )
            }
        }
    }
    if bound.is_empty() {
        Outcome::token("closed")
    } else {
        Outcome::with("bound", vec![why(&bound.join(sep))])
    }
}

/// PC-4.1, PC-4.5: the frame protocol is exactly `"1.0"`. A `bind` naming the next minor, the
/// daemon envelope's `2.0`, another spelling of 1.0 (`1.00`, `1`) or the number 1.0 is closed
/// without `bound`, one connection each.
fn bind_wrong_protocol_version(c: &mut Ctx<'_>) -> Outcome {
    let variants = vec![
        ("\"1.1\" (the next minor)".to_string(), json!("1.1")),
        ("\"2.0\" (the daemon envelope's version)".to_string(), json!("2.0")),
        ("\"1.00\"".to_string(), json!("1.00")),
        ("\"1\"".to_string(), json!("1")),
        ("the number 1.0".to_string(), json!(1.0)),
    ];
    each_bind_closed(c, "protocolVersion", variants)
}

/// Other adapterVersion strings than `v` (a SemVer `MAJOR.MINOR.PATCH[-pre][+build]`): the next
/// patch, the next major, `v`'s core with a pre-release, and with build metadata (equal to `v`
/// in SemVer precedence, yet another string). Each is valid SemVer, at most 64 characters and
/// differs from `v`.
fn other_versions(v: &str) -> Vec<(String, Value)> {
    let core: &str = v.split(['-', '+']).next().unwrap_or(v);
    let nums: Vec<u64> = core.split('.').filter_map(|n| n.parse().ok()).collect();
    let (major, minor, patch) = match nums[..] {
        [a, b, c] => (a, b, c),
        _ => (0, 0, 0),
    };
    let candidates = [
        (format!("{major}.{minor}.{}", patch.saturating_add(1)), "the next patch"),
        (format!("{}.0.0", major.saturating_add(1)), "the next major"),
        (format!("{core}-pi-conform.1"), "with a pre-release"),
        (format!("{core}+pi-conform.1"), "with build metadata (equal in SemVer precedence, another string)"),
    ];
    candidates
        .into_iter()
        .filter(|(s, _)| s != v && s.len() <= 64 && crate::contract::text::is_semver(s))
        .map(|(s, why)| (format!("\"{s}\" ({why})"), json!(s)))
        .collect()
}

/// PC-4.5: a `bind` with the adapter's adapterId but another adapterVersion (the next patch or
/// major, a pre-release or build metadata of the same core) is closed without `bound`.
fn bind_wrong_adapter_version(c: &mut Ctx<'_>) -> Outcome {
    let v = c.target.admitted.identity().adapter_version.to_string();
    let variants = other_versions(&v);
    if variants.is_empty() {
        return Outcome::Error(format!("no other adapterVersion could be made from {v:?}"));
    }
    each_bind_closed(c, "adapterVersion", variants)
}

/// The encoded length (LF included) of the normalized `bound` of `grant` when its bind asks
/// `maxResponseBytes` `m` (PC-3.3).
fn bound_len(grant: &crate::contract::Descriptor, m: u64) -> u64 {
    let mut b = grant.bound_frame();
    b["limits"]["maxResponseBytes"] = json!(m);
    crate::wire::encode_line(&b).len() as u64
}

/// PC-3.3, PC-4.5: the fit check of a received `bind`. With the third grant the runner mints
/// (`€` identities, so its normalized `bound` is longer than the smallest `maxResponseBytes`),
/// a bind asking `maxResponseBytes` exactly the length of its `bound` (LF included) fits and is
/// bound; one byte less fails the fit check (not the range check) and is closed without
/// `bound`.
fn bind_fit_check(c: &mut Ctx<'_>) -> Outcome {
    let grant = c.target.fit.clone().unwrap_or_else(|| c.target.admitted.clone());
    // The bound's length depends on the digits of maxResponseBytes only: find the fixed point.
    let mut len = bound_len(&grant, 1024);
    for _ in 0..4 {
        len = bound_len(&grant, len);
    }
    if bound_len(&grant, len) != len || bound_len(&grant, len - 1) != len {
        return Outcome::Skip(format!(
            "the normalized bound is {len} bytes, but its length changes with the digits of maxResponseBytes \
             right there: no bind is exactly at the fit limit"
        ));
    }
    if len <= 1024 {
        return Outcome::Skip(format!(
            "the grant's normalized bound is {len} bytes, within the smallest maxResponseBytes (1024): no bind with \
             limits in range can fail the fit check (the runner mints a grant with non-ASCII identities for this \
             case when it provisions the adapter itself: selftest, --command)"
        ));
    }
    let ceiling = grant.limits().max_response_bytes as u64;
    if len > ceiling {
        return Outcome::Skip(format!(
            "the grant's maxResponseBytes ceiling {ceiling} is below its own {len}-byte bound: the descriptor \
             itself fails the fit check"
        ));
    }
    let mut problems = Vec::new();
    for (m, fits) in [(len, true), (len - 1, false)] {
        let mut b = grant.bind_frame();
        b["limits"]["maxResponseBytes"] = json!(m);
        let mut conn = tryo!(c.connect_as(&grant));
        conn.note(&format!(
            "the bind asks maxResponseBytes {m}; its normalized bound is {len} bytes, LF included ({})",
            if fits { "it fits exactly" } else { "one byte too long: the fit check fails" }
        ));
        conn.send(&b);
        let r = conn.expect_close(c.step());
        let was_bound = r.frame().is_some_and(|v| v.kind() == Some("bound"));
        if fits {
            if !was_bound {
                problems.push(format!(
                    "a bind asking maxResponseBytes {m}, exactly the length of its {len}-byte normalized bound, was \
                     answered `{}`: equality passes the fit check (PC-3.3), so it must be bound",
                    token(&r)
                ));
            }
            continue;
        }
        if was_bound {
            problems.push(format!(
                "a bind asking maxResponseBytes {m}, one byte below the length of its {len}-byte normalized \
                 bound, was bound: it fails the fit check (PC-3.3) and must be closed without bound"
            ));
            return Outcome::with("bound", problems);
        }
        return Outcome::with(token(&r), problems);
    }
    Outcome::Error("the one-past bind was never sent".into())
}

/// Lifecycle: a refused bind leaves the adapter whole — a connection bound before it keeps
/// working, and a good bind on a new connection is bound and works.
fn bind_after_refused_bind(c: &mut Ctx<'_>) -> Outcome {
    let mut first = tryo!(c.bound());
    let r = c.call(&mut first, req::stat("hello.txt"));
    if data(&r).is_none() {
        return Outcome::token(format!("before-{}", token(&r)));
    }
    let mut bad = c.bind_frame();
    // Another handle of the same length, sharing no character with it: no piece of the real
    // one reaches the transcript.
    let h = bad["capabilityHandle"].as_str().unwrap_or("").to_string();
    let fill = ['A', 'B', 'C'].into_iter().find(|ch| !h.contains(*ch)).unwrap_or('-');
    bad["capabilityHandle"] = json!(fill.to_string().repeat(h.len().max(1)));
    let mut refused = tryo!(c.connect());
    refused.note("a bind with a wrong handle");
    refused.send(&bad);
    let rr = refused.expect_close(c.step());
    if rr != Recv::Closed {
        return Outcome::token(format!("refused-bind-{}", token(&rr)));
    }
    let mut p = Vec::new();
    let r = c.call(&mut first, req::stat("hello.txt"));
    if data(&r).is_none() {
        p.push(format!("the connection bound before the refused bind answered {} afterwards", token(&r)));
    }
    drop(first);
    // A new bind of the same generation replaces the first connection (PC-4.5): it comes last.
    match c.bound() {
        Ok(mut again) => {
            let r = c.call(&mut again, req::stat("hello.txt"));
            if data(&r).is_none() {
                p.push(format!("a good bind after the refused one was bound but its stat answered {}", token(&r)));
            }
        }
        Err(_) => p.push("a good bind on a new connection after the refused one was not bound".into()),
    }
    Outcome::with("closed", p)
}

/// PC-1.2 [both]: one connection per session generation, carrying one bound capability. A
/// second `bind` of the same grant and generation arrives while a first connection is bound
/// and has answered an invoke: the adapter refuses it (closed without `bound`), or binds it
/// and ends the first (`revoked` and a close, or a close, within a step; the reference's
/// DECISION, PC-4.5). Both conform. It fails only when both connections keep working: the
/// second bound, and the first still open a step later and answering an invoke. A second
/// connection that was bound must work.
fn bind_one_connection_per_generation(c: &mut Ctx<'_>) -> Outcome {
    if !granted(c, "fs.stat") {
        return Outcome::Skip("the descriptor does not grant fs.stat, the invoke that shows a connection works".into());
    }
    let mut first = tryo!(c.bound());
    let r = c.call(&mut first, req::stat("hello.txt"));
    if data(&r).is_none() {
        return Outcome::token(format!("before-{}", token(&r)));
    }
    let mut second = tryo!(c.connect());
    second.note("a second bind of the same grant and generation, while the first connection is bound");
    let b = c.bind_frame();
    second.send(&b);
    let r = second.recv();
    match &r {
        Recv::Closed => return Outcome::token("second-refused"),
        Recv::Frame(v, _) if v.kind() == Some("bound") => {}
        other => {
            return Outcome::with(
                token(other),
                vec![format!("the second bind was answered `{}`: neither bound nor refused by a close", token(other))],
            )
        }
    }
    first.note("the second connection was bound: this one must be revoked or closed");
    let mut ended = false;
    // `revoked`, then the close (a few frames at most: nothing else was in flight).
    for _ in 0..8 {
        match first.recv() {
            Recv::Closed => {
                ended = true;
                break;
            }
            Recv::Timeout => break,
            _ => continue,
        }
    }
    let mut p = Vec::new();
    if !ended {
        let r = c.call(&mut first, req::stat("hello.txt"));
        if data(&r).is_some() {
            p.push(
                "a second bind of the same generation was bound while the first connection stayed open and kept \
                 answering (an fs.stat a step later): one connection per session generation carries the bound \
                 capability, so the adapter refuses the second bind or ends the first"
                    .into(),
            );
        }
    }
    let r = c.call(&mut second, req::stat("hello.txt"));
    if data(&r).is_none() {
        p.push(format!("the second connection was bound, yet its fs.stat answered {}", token(&r)));
    }
    Outcome::with(if p.is_empty() { "first-ended" } else { "both-working" }, p)
}

/// PC-4.5 (pre-bind discipline): a daemon opening two sessions together connects twice before
/// either bind arrives. The runner connects, connects again, waits for the adapter to accept
/// the second connection, and only then sends the first connection's bind: it must be bound.
/// An adapter may cap the connections that wait unbound, but one that sheds a waiting
/// connection because a single other one arrived fails such opens (SHOULD: the cap is the
/// adapter's to choose; the reference's default is 64).
fn bind_two_waiting_connections(c: &mut Ctx<'_>) -> Outcome {
    let mut first = tryo!(c.connect());
    let second = tryo!(c.connect());
    first.note("a second connection is open and waits for its bind; this one binds now");
    std::thread::sleep(std::time::Duration::from_millis(200));
    let b = c.bind_frame();
    first.send(&b);
    let r = first.recv();
    drop(second);
    match r.frame() {
        Some(v) if v.kind() == Some("bound") => Outcome::token("bound"),
        _ => Outcome::with(
            token(&r),
            vec![format!(
                "a valid bind sent while a second connection waited for its own was answered `{}`, not bound: the \
                 adapter let only one connection wait for its bind",
                token(&r)
            )],
        ),
    }
}

// ---------------------------------------------------------------- invoke hygiene

fn closes_after(c: &mut Ctx<'_>, f: Value) -> Outcome {
    let mut conn = tryo!(c.bound());
    conn.send(&f);
    Outcome::token(token(&conn.expect_close(c.step())))
}

/// PC-1.2 at the boundary: an invoke line of exactly `maxRequestBytes` (LF included) is read
/// and executed; one byte more closes the connection (`adapter.invoke.oversize-line` sends one
/// far over). The lines are `fs.write` invokes whose content pads them to the exact size.
fn invoke_line_at_max_request_bytes(c: &mut Ctx<'_>) -> Outcome {
    c.allow(&["x.txt"]);
    let max = c.target.admitted.limits().max_request_bytes as usize;
    let line_of = |c: &Ctx<'_>, id: &str, n: usize| -> (Value, usize) {
        let f = c.invoke(id, id, req::write("x.txt", &"y".repeat(n)));
        let len = serde_json::to_vec(&f).map(|v| v.len() + 1).unwrap_or(0);
        (f, len)
    };
    let (_, base) = line_of(c, "r-a1", 0);
    if base >= max {
        return Outcome::Skip(format!("an empty fs.write invoke is already {base} bytes, over maxRequestBytes {max}"));
    }
    let (at, at_len) = line_of(c, "r-a1", max - base);
    let (past, past_len) = line_of(c, "r-a2", max - base + 1);
    if at_len != max || past_len != max + 1 {
        return Outcome::Error(format!(
            "harness: the padded invokes are {at_len} and {past_len} bytes, not {max} and {}",
            max + 1
        ));
    }
    let mut conn = tryo!(c.bound());
    conn.send(&at);
    let r = conn.recv_for("r-a1");
    let t = token(&r);
    if t != "result:ok" {
        return Outcome::with(
            format!("at-limit:{t}"),
            vec![format!(
                "an invoke of exactly maxRequestBytes ({max} bytes, LF included) is valid and must be executed, \
                 got {t}"
            )],
        );
    }
    let mut conn = tryo!(c.bound());
    conn.send(&past);
    let t = token(&conn.expect_close(c.step()));
    if t != "closed" {
        return Outcome::with(
            format!("one-past:{t}"),
            vec![format!(
                "an invoke of maxRequestBytes + 1 bytes ({}, LF included) must close the connection, got {t}",
                max + 1
            )],
        );
    }
    Outcome::token("ok+closed")
}
/// SPEC 4.5: an attributable invoke with an extra frame key may be closed **or** answered
/// `invalid_request`; both conform. Either way nothing is written (the oracle).
fn invoke_unknown_frame_key(c: &mut Ctx<'_>) -> Outcome {
    let mut f = c.invoke("r-1", "k-1", req::write("x.txt", "x"));
    f["token"] = json!("smuggled");
    let mut conn = tryo!(c.bound());
    conn.send(&f);
    Outcome::token(token(&conn.recv_within(c.step())))
}
/// The spellings of the handle the runner sends outside `bind`: as is, every character as a
/// `\u` escape, and only the first one escaped. A JSON value is its decoded text: an adapter
/// that looks for the handle in the raw bytes only is caught by the escaped ones. (The handle's
/// alphabet `[A-Za-z0-9_-]` has no `/`, so `\/` cannot spell part of it.)
pub fn handle_spellings(h: &str) -> Vec<(&'static str, String)> {
    let esc = |c: char| format!("\\u{:04x}", c as u32);
    let mut first: String = h.chars().take(1).map(esc).collect();
    first.extend(h.chars().skip(1));
    vec![
        ("as is", h.to_string()),
        ("with every character escaped", h.chars().map(esc).collect()),
        ("with its first character escaped", first),
    ]
}

fn invoke_handle_in_payload(c: &mut Ctx<'_>) -> Outcome {
    let h = c.target.handle().to_string();
    let f = c.invoke("r-1", "k-1", req::search(".", &h));
    let text = serde_json::to_string(&f).unwrap_or_default();
    for (how, spelled) in handle_spellings(&h) {
        let mut line = text.replace(&h, &spelled).into_bytes();
        line.push(b'\n');
        let mut conn = tryo!(c.bound());
        conn.send_raw(&line);
        let t = token(&conn.expect_close(c.step()));
        if t != "closed" {
            return Outcome::with(
                t,
                vec![format!(
                    "the handle {how} in an invoke payload was not refused by a close: the rule is about the decoded \
                 value, whatever JSON escapes spell it"
                )],
            );
        }
    }
    Outcome::token("closed")
}
fn invoke_unknown_payload_key(c: &mut Ctx<'_>) -> Outcome {
    tok(c.one(req::raw("fs.write", json!({"path": "x.txt", "content": "x", "mode": 511}))))
}
fn invoke_payload_wrong_type(c: &mut Ctx<'_>) -> Outcome {
    tok(c.one(req::raw("fs.read", json!({"path": "hello.txt", "maxBytes": "10"}))))
}
fn invoke_ungranted_operation(c: &mut Ctx<'_>) -> Outcome {
    let mut b = c.bind_frame();
    let ops: Vec<Value> =
        c.target.admitted.operations().iter().map(|o| json!(o.to_string())).filter(|o| o != "fs.write").collect();
    if ops.is_empty() {
        return Outcome::Skip("the descriptor grants only fs.write".into());
    }
    b["operations"] = Value::Array(ops);
    let mut conn = tryo!(c.bind_with(&b));
    let r = c.call(&mut conn, req::write("x.txt", "x"));
    Outcome::token(token(&r))
}
fn invoke_oversize_line(c: &mut Ctx<'_>) -> Outcome {
    let max = c.target.admitted.limits().max_request_bytes as usize;
    let f = c.invoke("r-1", "k-1", req::write("x.txt", &"y".repeat(max)));
    closes_after(c, f)
}

/// PC-1 [both] (audit gap 7): "A partial line that already exceeds the limit fails at once,
/// without waiting for the LF", and PC-1.2: the adapter then closes. Bound with
/// `maxRequestBytes` 2048: (a) the first 2049 bytes of an `fs.write` invoke, with no LF, must
/// be closed within one step, with nothing written; (b) at the boundary, the first 2047 bytes
/// of an invoke of exactly 2048 bytes with its LF — the whole line but its LF — must leave the
/// connection open for a step, and the LF then gets it executed (`result:ok`): an adapter
/// that closes too early fails too.
fn invoke_partial_line_over_limit(c: &mut Ctx<'_>) -> Outcome {
    const MAX: usize = 2048;
    let mut b = c.bind_frame();
    if b["limits"]["maxRequestBytes"].as_u64().is_some_and(|m| m < MAX as u64) {
        return Outcome::Skip("maxRequestBytes is below 2048".into());
    }
    b["limits"]["maxRequestBytes"] = json!(MAX);
    c.allow(&["partial-b.txt"]);
    let line_of = |c: &Ctx<'_>, id: &str, file: &str, n: usize| -> Vec<u8> {
        let mut v = serde_json::to_vec(&c.invoke(id, id, req::write(file, &"y".repeat(n)))).unwrap_or_default();
        v.push(b'\n');
        v
    };
    let base = line_of(c, "r-b1", "partial-b.txt", 0).len();
    if base >= MAX {
        return Outcome::Skip(format!("an empty fs.write invoke is already {base} bytes, over 2048"));
    }
    let at = line_of(c, "r-b1", "partial-b.txt", MAX - base);
    let over = line_of(c, "r-a1", "partial-a.txt", MAX);
    if at.len() != MAX || over.len() <= MAX + 1 {
        return Outcome::Error(format!("harness: the padded invokes are {} and {} bytes", at.len(), over.len()));
    }
    let mut p = Vec::new();
    // (b) first: the boundary, whole but its LF.
    let mut conn = match c.bind_with(&b) {
        Ok(x) => x,
        Err(o) => return o,
    };
    conn.note("the 2047 bytes of a 2048-byte invoke, without its LF");
    conn.send_raw(&at[..MAX - 1]);
    let early = conn.recv_within(c.step());
    let mut boundary = "open";
    if early != Recv::Timeout {
        boundary = "early";
        p.push(format!(
            "after the first 2047 bytes of an invoke of exactly maxRequestBytes (2048, LF included) the adapter \
             answered `{}` instead of waiting for the LF: the line is within the limit",
            token(&early)
        ));
    } else {
        conn.send_raw(b"\n");
        let t = token(&conn.recv_for("r-b1"));
        if t != "result:ok" {
            boundary = "lf-refused";
            p.push(format!("the invoke of exactly 2048 bytes, completed by its LF, answered {t} instead of ok"));
        }
    }
    // (a) one byte over, no LF.
    let mut conn = match c.bind_with(&b) {
        Ok(x) => x,
        Err(o) => return o,
    };
    conn.note("the first 2049 bytes of an invoke, without its LF");
    conn.send_raw(&over[..MAX + 1]);
    let t = token(&conn.expect_close(c.step()));
    if t != "closed" {
        p.push(format!(
            "2049 bytes of a line without its LF, over maxRequestBytes 2048, must close the connection at once \
             (a partial line that already exceeds the limit fails without waiting for the LF), got {t}"
        ));
    }
    Outcome::with(format!("{boundary}+{t}"), p)
}

/// PC-1 [both] (audit gap 9): a line is valid only if it is UTF-8 and exactly one strict JSON
/// text; a line that is not cannot be attributed, so the adapter closes (PC-4.5), with no side
/// effect. And the other way round: one CR before the LF is stripped, a further CR is JSON
/// whitespace, empty lines are skipped (before the bind too), whitespace around the value is
/// allowed. One connection per cell; every broken line is an `fs.write` of `strict-x.txt` (or
/// two), so an adapter that runs it anyway also fails the side-effect oracle.
fn invoke_strict_lines(c: &mut Ctx<'_>) -> Outcome {
    const FILE: &str = "strict-x.txt";
    const MARK: &str = "strict-lines-content";
    if !c.target.admitted.operations().contains(&ToolOperation::FsStat) {
        return Outcome::Skip("the descriptor does not grant fs.stat, which the lines that must be read use".into());
    }
    let text = |c: &mut Ctx<'_>, call: Call| -> Vec<u8> {
        let (id, key) = c.ids();
        serde_json::to_vec(&c.invoke(&id, &key, call)).unwrap_or_default()
    };
    let replace = |line: &[u8], from: &str, to: &[u8]| -> Vec<u8> {
        let from = from.as_bytes();
        match line.windows(from.len()).position(|w| w == from) {
            Some(i) => [&line[..i], to, &line[i + from.len()..]].concat(),
            None => line.to_vec(),
        }
    };
    // Fresh ids for every cell: an adapter that runs the lines anyway must not see one key
    // reused with another payload.
    let cells = |c: &mut Ctx<'_>| -> Vec<(&'static str, Vec<u8>)> {
        let write = text(c, req::write(FILE, MARK));
        let write2 = text(c, req::write("strict-y.txt", MARK));
        let list = text(c, req::list("."));
        let quoted = format!("\"{MARK}\"");
        vec![
            ("the byte FF inside the content", replace(&write, MARK, b"a\xffb")),
            ("the overlong encoding C0 AF (`/`) inside the content", replace(&write, MARK, b"a\xc0\xafb")),
            ("an encoded surrogate ED A0 80 inside the content", replace(&write, MARK, b"a\xed\xa0\x80b")),
            ("a raw U+0001 inside the content string", replace(&write, MARK, b"a\x01b")),
            ("a raw TAB inside the content string", replace(&write, MARK, b"a\tb")),
            ("the content in single quotes", replace(&write, &quoted, format!("'{MARK}'").as_bytes())),
            ("a trailing comma inside the payload", replace(&write, &quoted, format!("{quoted},").as_bytes())),
            (
                "\"maxEntries\":NaN in an fs.list payload",
                replace(&list, "\"path\":\".\"", b"\"path\":\".\",\"maxEntries\":NaN"),
            ),
            ("the invoke followed by {} on the same line", [&write[..], b"{}"].concat()),
            ("two fs.write invokes on one line", [&write[..], &write2[..]].concat()),
            ("the invoke followed by ` x`", [&write[..], b" x"].concat()),
            ("the invoke cut before its last `}`", write[..write.len() - 1].to_vec()),
        ]
    };
    let count = cells(c).len();
    let mut p = Vec::new();
    let mut close_token = "closed".to_string();
    for n in 0..count {
        let (what, mut line) = cells(c).swap_remove(n);
        let mut conn = tryo!(c.bound());
        conn.note(&format!("{what}: not a UTF-8 line of one strict JSON text, so the connection must be closed"));
        line.push(b'\n');
        conn.send_raw(&line);
        let t = token(&conn.expect_close(c.step()));
        if t != "closed" {
            p.push(format!(
                "a line with {what} was answered `{t}` instead of a close: it is not a UTF-8 line of exactly one strict \
                 JSON text (PC-1), so it cannot be attributed and the adapter must close the connection (PC-4.5)"
            ));
            if close_token == "closed" {
                close_token = t;
            }
        }
    }
    // Lines that must be read: empty lines and CRs around valid frames.
    let mut refused = false;
    let stat = |c: &mut Ctx<'_>| -> (String, Vec<u8>) {
        let (id, key) = c.ids();
        let line = serde_json::to_vec(&c.invoke(&id, &key, req::stat("hello.txt"))).unwrap_or_default();
        (id, line)
    };
    let executed: Vec<(&str, &[u8], &[u8])> = vec![
        ("an empty line, a line of one CR, then the invoke ending in CR LF", b"\n\r\n", b"\r\n"),
        ("the invoke ending in CR CR LF (one CR stripped, the other JSON whitespace)", b"", b"\r\r\n"),
        ("the invoke with a space and a TAB before and after it", b" \t", b" \t\n"),
    ];
    for (what, before, after) in executed {
        let mut conn = tryo!(c.bound());
        let (id, line) = stat(c);
        conn.note(&format!("{what}: must be executed"));
        conn.send_raw(&[before, &line[..], after].concat());
        let t = token(&conn.recv_for(&id));
        if t != "result:ok" {
            refused = true;
            p.push(format!(
                "{what} was answered `{t}` instead of executed (an fs.stat of hello.txt, ok): a receiver strips one CR \
                 before the LF, skips empty lines and allows whitespace around the value (PC-1)"
            ));
        }
    }
    // Before the bind: empty lines are skipped there too.
    let mut conn = tryo!(c.connect());
    conn.note("an empty line and a line of one CR before the bind: skipped, then the bind is bound");
    let mut bind = serde_json::to_vec(&c.bind_frame()).unwrap_or_default();
    bind.push(b'\n');
    conn.send_raw(&[&b"\n\r\n"[..], &bind[..]].concat());
    let r = conn.recv();
    if r.frame().is_none_or(|v| v.kind() != Some("bound")) {
        refused = true;
        p.push(format!(
            "a bind after an empty line and a line of one CR was answered `{}` instead of bound: empty lines are skipped \
             (PC-1), before the bind too",
            token(&r)
        ));
    }
    Outcome::with(format!("{close_token}+{}", if refused { "refused" } else { "executed" }), p)
}

/// `s` with its first character upper-cased: the same key or name in another letter case.
fn capitalized(s: &str) -> String {
    let mut cs = s.chars();
    cs.next().map(|f| f.to_uppercase().chain(cs).collect()).unwrap_or_default()
}

/// The object `v` with its member `key` renamed `to` (nested: `key` inside every object of
/// the array member `inside`).
fn renamed(mut v: Value, inside: Option<&str>, key: &str, to: &str) -> Value {
    let rename = |o: &mut Value| {
        if let Some(m) = o.as_object_mut() {
            if let Some(x) = m.remove(key) {
                m.insert(to.into(), x);
            }
        }
    };
    match inside {
        Some(arr) => v.get_mut(arr).and_then(Value::as_array_mut).into_iter().flatten().for_each(rename),
        None => rename(&mut v),
    }
    v
}

/// An operation's wire name in other letter cases: its prefix upper-cased (`FS.read`), and
/// each dotted part capitalized (`Fs.Read`).
fn operation_case_variants(op: &str) -> [String; 2] {
    let (prefix, rest) = op.split_once('.').unwrap_or((op, ""));
    [format!("{}.{rest}", prefix.to_uppercase()), op.split('.').map(capitalized).collect::<Vec<_>>().join(".")]
}

/// PC-4.2, PC-5.2, PC-4.1, PC-4.5: keys, kinds and operation names are case-sensitive (JSON
/// object keys and enum strings are exact). A payload key in another letter case is an
/// unknown key (and leaves a required one missing): `invalid_request`, with nothing done —
/// `Path`, `MaxEntries`, `MaxBytes`, `Query`, `Overwrite` (on an existing file: a write run
/// anyway changes it), `Edits` and a nested `OldText`, each for a granted operation. A frame
/// whose kind is `Invoke`, whose operation is `FS.read`/`Fs.Read`/`FS.stat`/`Fs.Stat` (outside
/// the six) or whose `requestId` is `RequestId` cannot be attributed: closed. `Payload` for
/// `payload` leaves an attributable invoke with an extra frame key and no payload: closed or
/// `invalid_request`, both allowed. A bind keyed `Kind`, or of kind `Bind`, is no bind: closed
/// without `bound`.
fn invoke_case_variants(c: &mut Ctx<'_>) -> Outcome {
    let mut p = Vec::new();
    let kept = ["hello.txt", "edit.txt"];
    let before: Vec<Vec<u8>> = kept.iter().map(|f| read_root(c, f)).collect();
    let calls = [
        (req::stat("hello.txt"), None, "path"),
        (req::list(".").max_entries(1), None, "maxEntries"),
        (req::read("hello.txt").max_bytes(1), None, "maxBytes"),
        (req::search("hello.txt", "hello"), None, "query"),
        (req::write("hello.txt", "changed by a key in another case\n").overwrite(false), None, "overwrite"),
        (req::edit("edit.txt", &[("unique line", "changed line")]), None, "edits"),
        (req::edit("edit.txt", &[("unique line", "changed line")]), Some("edits"), "oldText"),
    ];
    let cells: Vec<(String, Value)> = calls
        .into_iter()
        .map(|(call, inside, key)| (call.op().to_string(), renamed(call.payload(), inside, key, &capitalized(key))))
        .collect();
    let cells: Vec<(&str, Value)> = cells.iter().map(|(op, v)| (op.as_str(), v.clone())).collect();
    let invalid = format!("error:{}", AdapterCode::InvalidRequest.as_str());
    let wrong = tryo!(cells_not(c, &cells, &invalid));
    if !wrong.is_empty() {
        p.push(format!(
            "{} payloads with a key in another letter case were not refused invalid_request (keys are \
             case-sensitive: such a key is unknown, and a required one is then missing; PC-5.2): {}",
            wrong.len(),
            wrong.join("; ")
        ));
    }
    for (f, was) in kept.iter().zip(&before) {
        if read_root(c, f) != *was {
            p.push(format!("{f} was changed by a payload whose keys were in another letter case"));
        }
    }
    // Frames: each on a bound connection of its own.
    let written = "case-variant.txt";
    let mut frames: Vec<(String, Value, Vec<String>)> = Vec::new();
    let closed = vec!["closed".to_string()];
    // The kind, RequestId and Payload cells carry a granted operation, a write when it may be
    // (one run anyway leaves a file): an ungranted one may be refused operation_not_granted
    // before its payload is looked at.
    let call = [
        (ToolOperation::FsWrite, req::write(written, "x")),
        (ToolOperation::FsStat, req::stat("hello.txt")),
        (ToolOperation::FsRead, req::read("hello.txt")),
    ]
    .into_iter()
    .find_map(|(op, call)| c.target.admitted.grants(op).then_some(call));
    if let Some(call) = call {
        let mut f = c.invoke("case-1", "case-1", call.clone());
        f["kind"] = json!(capitalized(f["kind"].as_str().unwrap_or_default()));
        frames.push((format!("kind {}", f["kind"]), f, closed.clone()));
        let f = c.invoke("case-2", "case-2", call.clone());
        frames.push(("requestId keyed RequestId".into(), renamed(f, None, "requestId", "RequestId"), closed.clone()));
        let f = c.invoke("case-3", "case-3", call);
        let either = vec!["closed".to_string(), invalid.clone()];
        frames.push(("payload keyed Payload".into(), renamed(f, None, "payload", "Payload"), either));
    }
    for (i, call) in [req::read("hello.txt"), req::stat("hello.txt")].into_iter().enumerate() {
        for (j, op) in operation_case_variants(call.op()).into_iter().enumerate() {
            let id = format!("case-op-{i}-{j}");
            let mut f = c.invoke(&id, &id, call.clone());
            f["operation"] = json!(op);
            frames.push((format!("operation {op:?}"), f, closed.clone()));
        }
    }
    for (what, f, accepted) in frames {
        let mut conn = tryo!(c.bound());
        conn.note(&format!("an invoke with {what}"));
        conn.send(&f);
        let t = token(&conn.recv_within(c.step()));
        if !accepted.contains(&t) {
            p.push(format!(
                "the invoke with {what} was answered `{t}`: keys, kinds and operation names are case-sensitive, so it \
                 must be {}",
                if accepted.len() > 1 {
                    "closed or refused invalid_request"
                } else {
                    "closed (it cannot be attributed)"
                }
            ));
        }
    }
    if c.target.root.join(written).exists() {
        p.push(format!("{written} was written by an invoke whose kind, ids or payload key were in another case"));
    }
    // Binds.
    let b = c.bind_frame();
    let mut of_kind = b.clone();
    of_kind["kind"] = json!(capitalized(b["kind"].as_str().unwrap_or_default()));
    let binds = vec![
        ("kind keyed Kind".to_string(), renamed(b, None, "kind", "Kind")),
        (format!("kind {}", of_kind["kind"]), of_kind),
    ];
    match binds_closed(c, binds, " and ", |bound| {
        format!("the bind with {bound} was bound: kinds and keys are case-sensitive, so it is no bind and is closed")
    }) {
        Outcome::Observed { token: t, problems } => {
            if t != "closed" {
                p.extend(problems);
            }
        }
        o => return o,
    }
    Outcome::with(if p.is_empty() { "refused" } else { "case-folded" }, p)
}

/// When the first `result` for `id` whose `operation` is `op` arrived.
fn result_at(g: &Gathered, id: &str, op: &str) -> Option<Duration> {
    g.frames
        .iter()
        .find(|(_, v)| v.kind() == Some("result") && v.request_id() == Some(id) && v["operation"] == op)
        .map(|(t, _)| *t)
}

/// PC-4.5: an `invoke` reusing the `requestId` of an invoke still in flight cannot be
/// attributed: close. A slow search holds the requestId in flight; an `fs.stat` under the same
/// requestId (another key) follows it in the same write, then an abort probe. Confirmed when
/// the connection closes before the search's result (or the probe, read after the duplicate,
/// is answered before it); a stat result under the search's requestId before the search's own
/// result, or a connection left open with the duplicate unanswered, fails.
fn invoke_request_id_in_flight(c: &mut Ctx<'_>) -> Outcome {
    provoke(c, "a requestId reused while its invoke is in flight", |c, i| {
        let mut conn = match c.bound() {
            Ok(x) => x,
            Err(o) => return Try::Done(o),
        };
        // Keys no other case uses: a connection of the grant the adapter has not seen end yet
        // may hand its keys on to this one (PC-4.5), and a key reused with another payload is
        // an idempotency_conflict, answered at once.
        let (xid, _) = c.ids();
        let (xkey, dkey) = (format!("reuse-{}-search", i + 1), format!("reuse-{}-stat", i + 1));
        let probe = format!("probe-{}", i + 1);
        let frames = [
            c.invoke(&xid, &xkey, blocker()),
            c.invoke(&xid, &dkey, req::stat("hello.txt")),
            c.abort(&probe, "never-sent-probe"),
        ];
        conn.note(&format!(
            "{xid} is a slow search; the fs.stat behind it reuses {xid} (key {dkey}); abort {probe} is the probe"
        ));
        let t0 = Instant::now();
        conn.send_all(&frames);
        let mut g = gather(&mut conn, t0, c.step() * 20, |g| {
            result_at(g, &xid, "fs.search").is_some() || result_at(g, &xid, "fs.stat").is_some()
        });
        if !g.closed() && result_at(&g, &xid, "fs.stat").is_none() {
            // The search finished first: read on for the duplicate's answer or the close.
            keep_reading(&mut conn, t0, c.step(), &mut g, |g| result_at(g, &xid, "fs.stat").is_some());
        }
        let (search_at, stat_at, probe_at) =
            (result_at(&g, &xid, "fs.search"), result_at(&g, &xid, "fs.stat"), g.at(&probe));
        if let Some(s) = stat_at.filter(|s| search_at.is_none_or(|x| *s < x)) {
            return Try::Done(Outcome::with(
                "duplicate-answered",
                vec![format!(
                    "the fs.stat reusing requestId {xid} was answered (at {} ms) while {xid}, a slow search, was still \
                     in flight ({}): a requestId still in flight cannot be attributed, so the connection must be \
                     closed",
                    ms(s),
                    search_at.map(|x| format!("its result came at {} ms", ms(x))).unwrap_or("its result never came".into())
                )],
            ));
        }
        // The duplicate was read while the search was in flight: no result of it before the
        // duplicate's effect (the close), or the probe behind the duplicate answered first.
        let read_in_flight = search_at.is_none_or(|x| probe_at.is_some_and(|p| p < x));
        if g.closed() {
            if read_in_flight && stat_at.is_none() {
                return Try::Done(Outcome::token("closed"));
            }
            return Try::NotReached(format!(
                "the search finished (after {} ms) before the reuse of its requestId was read",
                search_at.map(ms).unwrap_or(0)
            ));
        }
        if stat_at.is_some() {
            // Answered after the search's result: the requestId was free again.
            return Try::NotReached(format!(
                "the search finished (after {} ms) before the reuse of its requestId was read, so the fs.stat ran \
                 as a new request",
                search_at.map(ms).unwrap_or(0)
            ));
        }
        Try::Done(Outcome::with(
            "open",
            vec![format!(
                "the fs.stat reusing requestId {xid} was neither answered nor refused by a close ({}, {}): an invoke \
                 reusing a requestId in flight must close the connection",
                search_at
                    .map(|x| format!("the search's result came at {} ms", ms(x)))
                    .unwrap_or("the search never answered".into()),
                g.end_token()
            )],
        ))
    })
}

// ---------------------------------------------------------------- every JSON spelling

/// `s` as a JSON string literal with its first character written as a `\u` escape (a
/// surrogate pair outside the BMP): the same decoded value, another spelling.
fn escaped_first(s: &str) -> String {
    let mut chars = s.chars();
    let Some(first) = chars.next() else { return "\"\"".into() };
    let mut units = [0u16; 2];
    let esc: String = first.encode_utf16(&mut units).iter().map(|u| format!("\\u{u:04x}")).collect();
    let rest = serde_json::to_string(chars.as_str()).unwrap_or_default();
    format!("\"{esc}{}", &rest[1..])
}

/// The compact text of `frame` with every identity string, the `kind` key and `kind` value,
/// and each of `more` (members whose string values are escaped too) spelled with escapes.
fn escaped_text(frame: &Value, more: &[&str]) -> String {
    let mut text = serde_json::to_string(frame).unwrap_or_default();
    for k in ["adapterId", "adapterVersion", "hostInstanceId", "sessionId", "protocolVersion"].iter().chain(more) {
        if let Some(v) = frame[*k].as_str() {
            let plain = format!("\"{k}\":{}", serde_json::to_string(v).unwrap_or_default());
            text = text.replacen(&plain, &format!("\"{k}\":{}", escaped_first(v)), 1);
        }
    }
    if let Some(kind) = frame["kind"].as_str() {
        let plain = format!("\"kind\":\"{kind}\"");
        text = text.replacen(&plain, &format!("\"\\u006bind\":{}", escaped_first(kind)), 1);
    }
    text
}

/// A `bind` whose identity strings, `kind` key and value use `\u` escapes is the same bind
/// (the rules are about decoded values): bound, echoing the decoded values.
fn bind_escaped_spelling(c: &mut Ctx<'_>) -> Outcome {
    let text = escaped_text(&c.bind_frame(), &[]);
    let mut conn = tryo!(c.connect());
    conn.send_raw(format!("{text}\n").as_bytes());
    let r = conn.recv();
    Outcome::token(if r.frame().is_some_and(|v| v.kind() == Some("bound")) { "bound".into() } else { token(&r) })
}

/// PC-1, every spelling: an integral JSON number is an integer whatever its spelling, in a
/// `bind` as in an invoke (`adapter.invoke.number-spellings`). The descriptor's own bind is
/// sent twice, on its own connection each time, with its `generation` and all seven limits
/// re-spelled: once with a fraction (`1.0`, `1048576.0`), once with an exponent (`1e0`,
/// `1.048576E6`, `0e0` for a zero). Each is the same bind: `bound`, echoing the values (the
/// judge compares the echo with the bind's values).
fn bind_number_spellings(c: &mut Ctx<'_>) -> Outcome {
    let base = c.bind_frame();
    let text = serde_json::to_string(&base).unwrap_or_default();
    let fraction = |n: u64| format!("{n}.0");
    let exponent = |n: u64| {
        let d = n.to_string();
        match d.len() {
            1 => format!("{d}e0"),
            l => format!("{}.{}E{}", &d[..1], &d[1..], l - 1),
        }
    };
    let mut problems = Vec::new();
    let mut last = String::from("bound");
    for (how, spell) in [("with a fraction", &fraction as &dyn Fn(u64) -> String), ("with an exponent", &exponent)] {
        let mut line = text.clone();
        let mut members = vec![("generation".to_string(), base["generation"].as_u64())];
        if let Some(l) = base["limits"].as_object() {
            members.extend(l.iter().map(|(k, v)| (k.clone(), v.as_u64())));
        }
        for (k, v) in members {
            let Some(v) = v else { return Outcome::Error(format!("harness: the bind's {k} is not an integer")) };
            let plain = format!("\"{k}\":{v}");
            let respelled = line.replacen(&plain, &format!("\"{k}\":{}", spell(v)), 1);
            if respelled == line {
                return Outcome::Error(format!("harness: the bind's {k} was not found to re-spell"));
            }
            line = respelled;
        }
        let mut conn = tryo!(c.connect());
        conn.note(&format!("the bind's generation and limits spelled {how}"));
        conn.send_raw(format!("{line}\n").as_bytes());
        let r = conn.recv();
        if r.frame().is_none_or(|v| v.kind() != Some("bound")) {
            last = token(&r);
            problems.push(format!(
                "the descriptor's bind with its generation and limits spelled {how} was answered `{last}`: an integral \
                 number is an integer whatever its spelling, so it is the same bind and must be bound"
            ));
        }
    }
    Outcome::with(last, problems)
}

/// An `invoke` spelled with escapes (identity, `kind`, `operation`, the payload's key and
/// path) is the same invoke: executed.
fn invoke_escaped_spelling(c: &mut Ctx<'_>) -> Outcome {
    let mut conn = tryo!(c.bound());
    let (id, key) = c.ids();
    let f = c.invoke(&id, &key, req::stat("hello.txt"));
    let text = escaped_text(&f, &["operation", "requestId"]).replacen(
        "\"path\":\"hello.txt\"",
        "\"p\\u0061th\":\"h\\u0065llo.txt\"",
        1,
    );
    conn.send_raw(format!("{text}\n").as_bytes());
    let r = conn.recv_for(&id);
    ok_with(&r, &[("/type", json!("file")), ("/size", json!(12))])
}

/// An unknown `bind` key spelled with an escape is still unknown: close.
fn bind_escaped_unknown_key(c: &mut Ctx<'_>) -> Outcome {
    let text = serde_json::to_string(&c.bind_frame()).unwrap_or_default();
    let Some(body) = text.strip_suffix('}') else { return Outcome::Error("bind is not an object".into()) };
    let mut conn = tryo!(c.connect());
    conn.send_raw(format!("{body},\"\\u0074oken\":\"x\"}}\n").as_bytes());
    Outcome::token(token(&conn.expect_close(c.step())))
}

/// PC-4.2, PC-3.2.9, PC-3.2.10: the nested `operations` and `limits` of a `bind` have the
/// descriptor's structure whatever the grant: 1–6 unique operation names of the six, exactly
/// the seven limits, each an integer within its range. Every bind below breaks that in one
/// place and is otherwise the descriptor's; each is outside any grant, so closing it without
/// `bound` is a MUST (the above-ceiling cases are SHOULD because a wider grant may take them).
fn bind_malformed_operations_and_limits(c: &mut Ctx<'_>) -> Outcome {
    let base = c.bind_frame();
    let with = |f: &dyn Fn(&mut Value)| {
        let mut b = base.clone();
        f(&mut b);
        b
    };
    let mut cells: Vec<(String, Value)> = Vec::new();
    for (name, min, max) in crate::contract::descriptor::LIMITS {
        let below = min as i64 - 1;
        cells.push((
            format!("limits.{name} {below} (one below its minimum {min})"),
            with(&|b| b["limits"][name] = json!(below)),
        ));
        cells.push((
            format!("limits.{name} {} (one above its maximum {max})", max + 1),
            with(&|b| b["limits"][name] = json!(max + 1)),
        ));
        cells.push((
            format!("limits.{name} missing"),
            with(&|b| {
                if let Some(l) = b["limits"].as_object_mut() {
                    l.remove(name);
                }
            }),
        ));
    }
    let cur = base["limits"]["maxConcurrentRequests"].clone();
    let as_string = cur.as_u64().unwrap_or(1).to_string();
    for (what, v) in [
        ("1.5 (not an integer)".to_string(), json!(1.5)),
        (format!("{as_string:?} (a string)"), json!(as_string)),
        ("true".to_string(), json!(true)),
        ("null".to_string(), Value::Null),
    ] {
        cells.push((
            format!("limits.maxConcurrentRequests {what}"),
            with(&|b| b["limits"]["maxConcurrentRequests"] = v.clone()),
        ));
    }
    cells.push((
        "an eighth key limits.maxBytesPerSecond 1".into(),
        with(&|b| b["limits"]["maxBytesPerSecond"] = json!(1)),
    ));
    cells.push(("limits null".into(), with(&|b| b["limits"] = Value::Null)));
    cells.push(("limits an empty array".into(), with(&|b| b["limits"] = json!([]))));
    let first = base["operations"][0].as_str().unwrap_or("fs.stat").to_string();
    for (what, v) in [
        ("[] (empty)".to_string(), json!([])),
        (format!("[{first:?}, {first:?}] (a duplicate)"), json!([first, first])),
        (format!("[{:?}] (wrongly cased)", first.to_ascii_uppercase()), json!([first.to_ascii_uppercase()])),
        ("[null]".to_string(), json!([null])),
        (format!("{first:?} (a string, not an array)"), json!(first)),
        ("null".to_string(), Value::Null),
    ] {
        cells.push((format!("operations {what}"), with(&|b| b["operations"] = v.clone())));
    }
    binds_closed(c, cells, "; ", |bound| {
        format!(
            "a bind with {bound} was bound: operations must be 1-6 unique names of the six and limits exactly the \
             seven keys, each an integer within its range (PC-3.2.9, PC-3.2.10), whatever the grant, so the bind \
             must be closed without bound"
        )
    })
}

/// A payload key repeated under another spelling (`path` and `p\u0061th`) is a duplicate key:
/// the line is not strict JSON, so the invoke cannot be attributed: close, nothing run.
fn invoke_escaped_duplicate_key(c: &mut Ctx<'_>) -> Outcome {
    let mut conn = tryo!(c.bound());
    let (id, key) = c.ids();
    let f = c.invoke(&id, &key, req::stat("hello.txt"));
    let text = serde_json::to_string(&f).unwrap_or_default().replacen(
        "\"path\":\"hello.txt\"",
        "\"path\":\"hello.txt\",\"p\\u0061th\":\"notes.md\"",
        1,
    );
    conn.send_raw(format!("{text}\n").as_bytes());
    Outcome::token(token(&conn.expect_close(c.step())))
}

// ---------------------------------------------------------------- paths

fn bad_path(c: &mut Ctx<'_>, path: &str) -> Outcome {
    c.allow(&[]);
    tok(c.one(req::write(path, "escape")))
}
fn path_empty(c: &mut Ctx<'_>) -> Outcome {
    bad_path(c, "")
}
fn path_absolute(c: &mut Ctx<'_>) -> Outcome {
    let p = c.fixture.sentinel.join("written.txt").to_string_lossy().into_owned();
    bad_path(c, &p)
}
fn path_backslash(c: &mut Ctx<'_>) -> Outcome {
    bad_path(c, "dir\\x.txt")
}
fn path_control(c: &mut Ctx<'_>) -> Outcome {
    bad_path(c, "dir/x\u{1}.txt")
}
fn path_dotdot(c: &mut Ctx<'_>) -> Outcome {
    let name = c.fixture.sentinel.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    bad_path(c, &format!("../{name}/written.txt"))
}
fn path_dotdot_inner(c: &mut Ctx<'_>) -> Outcome {
    bad_path(c, "dir/../x.txt")
}
fn path_double_slash(c: &mut Ctx<'_>) -> Outcome {
    bad_path(c, "dir//x.txt")
}
fn path_dot_prefix(c: &mut Ctx<'_>) -> Outcome {
    bad_path(c, "./x.txt")
}
fn path_dot_segment(c: &mut Ctx<'_>) -> Outcome {
    bad_path(c, "dir/./x.txt")
}
fn path_dot_suffix(c: &mut Ctx<'_>) -> Outcome {
    tok(c.one(req::list("dir/.")))
}
fn path_long_component(c: &mut Ctx<'_>) -> Outcome {
    bad_path(c, &"n".repeat(256))
}
fn path_dot_slash_root(c: &mut Ctx<'_>) -> Outcome {
    tok(c.one(req::list("./")))
}
fn path_trailing_slash_dir(c: &mut Ctx<'_>) -> Outcome {
    let r = tryo!(c.one(req::list("dir/")));
    let names: Vec<&str> = data(&r)
        .and_then(|d| d["entries"].as_array())
        .map(|a| a.iter().filter_map(|e| e["name"].as_str()).collect())
        .unwrap_or_default();
    let problems = if data(&r).is_some() && names != ["a.txt", "b.txt", "sub"] {
        vec![format!("dir/ lists {names:?}")]
    } else {
        vec![]
    };
    Outcome::with(token(&r), problems)
}
fn path_trailing_slash_file(c: &mut Ctx<'_>) -> Outcome {
    tok(c.one(req::stat("hello.txt/")))
}

/// PC-5.1 [adapter] (audit gap 3): the adapter-side forms `./` and `dir/` name the root and
/// `dir` for fs.search too, whose match paths must then be exactly those of `.` and `dir`
/// (never `.//x` or `dir//a.txt`), and a trailing `/` on a file is `not_a_directory` for every
/// operation — fs.read, fs.write and fs.edit included, which must not strip it and act on the
/// file (nothing is allowed to change: the oracle catches a write or edit that went through).
/// The plain forms' answers are the baseline: one refused retryably leaves nothing compared
/// (inconclusive); any other failure of them fails the case.
fn path_adapter_forms_every_operation(c: &mut Ctx<'_>) -> Outcome {
    c.allow(&[]);
    let mut conn = tryo!(c.bound());
    let mut problems = Vec::new();
    if granted(c, "fs.search") {
        let pairs = [
            (req::search("dir", "needle"), req::search("dir/", "needle"), "dir", "dir/"),
            (req::search(".", "needle").max_results(1000), req::search("./", "needle").max_results(1000), ".", "./"),
        ];
        for (plain, form, p, f) in pairs {
            let base = c.call(&mut conn, plain);
            let Some(want) = data(&base).cloned() else {
                let t = token(&base);
                // A retryable refusal (busy, io_error) is no fault: nothing was compared.
                let code = base.frame().and_then(|v| v.error_code()).and_then(AdapterCode::from_wire);
                if code.is_some_and(|c| c.retryable()) {
                    return Outcome::Error(format!(
                        "inconclusive: fs.search of {p:?} answered `{t}` (retryable), so there is nothing to \
                         compare {f:?} with"
                    ));
                }
                return Outcome::with(format!("plain:{t}"), vec![format!("fs.search of {p:?} answered {t}, not ok")]);
            };
            if want["matches"].as_array().is_none_or(|m| m.is_empty()) {
                return Outcome::with(
                    "plain:no-match",
                    vec![format!("fs.search of {p:?} found no `needle`, which the fixture holds")],
                );
            }
            let got = c.call(&mut conn, form);
            match data(&got) {
                Some(d) if *d == want => {}
                Some(d) => {
                    let paths = |v: &Value| -> Vec<String> {
                        v["matches"]
                            .as_array()
                            .map(|a| a.iter().filter_map(|m| m["path"].as_str().map(str::to_string)).collect())
                            .unwrap_or_default()
                    };
                    problems.push(format!(
                        "fs.search of {f:?} differs from {p:?}: match paths {:?}, want {:?} (a search of the \
                         adapter-side form names the same directory and returns canonical root-relative paths)",
                        paths(d),
                        paths(&want)
                    ));
                }
                None => problems.push(format!("fs.search of {f:?} → {} (it names {p:?}: PC-5.1)", token(&got))),
            }
            if matches!(got, Recv::Closed | Recv::Timeout) {
                conn = tryo!(c.bound());
            }
        }
    }
    let cells = [
        ("fs.read", req::read("hello.txt/")),
        ("fs.write", req::write("hello.txt/", "x")),
        ("fs.edit", req::edit("hello.txt/", &[("hello", "x")])),
        ("fs.search", req::search("hello.txt/", "hello")),
        ("fs.list", req::list("hello.txt/")),
        ("fs.stat", req::stat("hello.txt/")),
    ];
    let want = format!("error:{}", AdapterCode::NotADirectory.as_str());
    for (op, call) in cells {
        if !granted(c, op) {
            continue;
        }
        let r = c.call(&mut conn, call);
        let t = token(&r);
        if t != want {
            problems.push(format!("{op} of \"hello.txt/\" → {t}, want {want} (a trailing / on a file: PC-5.1)"));
        }
        if matches!(r, Recv::Closed | Recv::Timeout) {
            conn = tryo!(c.bound());
        }
    }
    Outcome::with(if problems.is_empty() { "forms-held" } else { "forms-broken" }, problems)
}

/// Whether the target's descriptor grants `op` (cells of an ungranted one are skipped).
pub(super) fn granted(c: &Ctx<'_>, op: &str) -> bool {
    c.target.admitted.operations().iter().any(|o| o.to_string() == op)
}

/// Send each `(operation, payload)` cell on one bound connection (a new one after a close);
/// the cells whose token is not `want`, as `operation payload → token`.
fn cells_not(c: &mut Ctx<'_>, cells: &[(&str, Value)], want: &str) -> Result<Vec<String>, Outcome> {
    let mut conn = c.bound()?;
    let mut wrong = Vec::new();
    for (op, payload) in cells {
        if !granted(c, op) {
            continue;
        }
        let r = c.call(&mut conn, req::raw(op, payload.clone()));
        let t = token(&r);
        if t != want {
            let shown: String = payload.to_string().chars().take(120).collect();
            wrong.push(format!("{op} {shown} → {t}"));
            if matches!(r, Recv::Closed | Recv::Timeout) {
                conn = c.bound()?;
            }
        }
    }
    Ok(wrong)
}

/// `want` for every cell ([`cells_not`]), else `failed` with the cells that differ after `why`.
fn cells_outcome(c: &mut Ctx<'_>, cells: &[(&str, Value)], want: &str, failed: &str, why: &str) -> Outcome {
    let wrong = tryo!(cells_not(c, cells, want));
    if wrong.is_empty() {
        return Outcome::token(want);
    }
    Outcome::with(failed, vec![format!("{} {why}: {}", wrong.len(), wrong.join("; "))])
}

/// PC-5.1 for every operation: the path rules hold for fs.list, fs.read, fs.search and fs.edit
/// as for fs.write (the `adapter.path.*` cases) and fs.stat (the path vectors). Each malformed
/// form — empty, absolute (into the sentinel), `..` out of the root and inside it, `./`, `//`,
/// `/./`, a backslash, a control character, a 256-byte component — is `invalid_path` for
/// each of the four, and nothing outside the root is read (the sentinel scan) or changed.
fn path_every_operation(c: &mut Ctx<'_>) -> Outcome {
    c.allow(&[]);
    let sentinel = c.fixture.sentinel.clone();
    let name = sentinel.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let forms = [
        String::new(),
        sentinel.join("secret.txt").to_string_lossy().into_owned(),
        format!("../{name}/secret.txt"),
        "dir/../hello.txt".to_string(),
        "./hello.txt".to_string(),
        "dir//a.txt".to_string(),
        "dir/./a.txt".to_string(),
        "dir\\a.txt".to_string(),
        "dir/a\u{1}.txt".to_string(),
        "n".repeat(256),
    ];
    let mut cells = Vec::new();
    for p in &forms {
        cells.push(("fs.list", json!({"path": p})));
        cells.push(("fs.read", json!({"path": p})));
        cells.push(("fs.search", json!({"path": p, "query": "hello"})));
        cells.push(("fs.edit", json!({"path": p, "edits": [{"oldText": "hello", "newText": "escape"}]})));
    }
    cells_outcome(
        c,
        &cells,
        "error:invalid_path",
        "accepted-malformed",
        "malformed path(s) were not refused invalid_path (the path rules of PC-5.1 hold for every operation, \
         before any filesystem access)",
    )
}

/// PC-5.2 and the conventions of PC-1: payloads are closed objects, one per operation, and a
/// JSON `null` is a present value of the wrong type, never "absent". Each cell — `null` for
/// every optional field and for required ones, a key of another operation, a value of the
/// wrong type — is `invalid_request`, and nothing is written.
fn invoke_payload_closed_per_operation(c: &mut Ctx<'_>) -> Outcome {
    c.allow(&[]);
    let edit = json!([{"oldText": "hello", "newText": "x"}]);
    let cells = [
        ("fs.list", json!({"path": "dir", "maxEntries": null})),
        ("fs.read", json!({"path": "hello.txt", "offset": null})),
        ("fs.read", json!({"path": "hello.txt", "maxBytes": null})),
        ("fs.search", json!({"path": ".", "query": "hello", "maxResults": null})),
        ("fs.write", json!({"path": "x.txt", "content": "x", "create": null})),
        ("fs.write", json!({"path": "x.txt", "content": "x", "overwrite": null})),
        ("fs.write", json!({"path": "x.txt", "content": "x", "expectedDigest": null})),
        ("fs.edit", json!({"path": "hello.txt", "edits": edit, "expectedDigest": null})),
        ("fs.stat", json!({"path": null})),
        ("fs.search", json!({"path": ".", "query": null})),
        ("fs.write", json!({"path": "x.txt", "content": null})),
        ("fs.edit", json!({"path": "hello.txt", "edits": [{"oldText": "hello", "newText": null}]})),
        ("fs.edit", json!({"path": "hello.txt", "edits": null})),
        ("fs.list", json!({"path": "dir", "offset": 0})),
        ("fs.search", json!({"path": ".", "query": "hello", "maxEntries": 5})),
        ("fs.search", json!({"path": ".", "query": "hello", "regex": true})),
        ("fs.edit", json!({"path": "hello.txt", "edits": edit, "content": "x"})),
        ("fs.read", json!({"path": "hello.txt", "query": "hello"})),
        ("fs.stat", json!({"path": "hello.txt", "maxBytes": 1})),
        ("fs.write", json!({"path": "x.txt", "content": "x", "overwrite": "false"})),
        ("fs.search", json!({"path": ".", "query": "hello", "maxResults": "5"})),
        ("fs.edit", json!({"path": "hello.txt", "edits": {}})),
        ("fs.stat", json!({"path": 1})),
    ];
    cells_outcome(
        c,
        &cells,
        "error:invalid_request",
        "accepted-invalid-payload",
        "payload(s) outside the operation's closed shape were not refused invalid_request (a null is a present \
         value of the wrong type, a key of another operation is unknown)",
    )
}

/// PC-1 (Numbers, a DECISION binding both sides): an integral JSON number is an integer in every
/// layer, whatever its spelling (`2.0`, `2e0`, `20E-1`), ranges apply to the value, and a
/// fractional or out-of-range value is refused. Each line is the case's invoke with one number
/// re-spelled in the text (serde would print `2.0` for any float and never an exponent).
fn invoke_number_spellings(c: &mut Ctx<'_>) -> Outcome {
    /// What a spelled invoke must give.
    enum Want {
        /// `ok`, with these members of `data`.
        Ok(&'static [(&'static str, Value)]),
        /// This refusal.
        Refused(&'static str),
    }
    let two: &[(&str, Value)] = &[("/truncated", Value::Bool(true))];
    // (what is spelled, the call with a placeholder number, the placeholder, the spelling, want)
    let cells: Vec<(&str, Call, &str, &str, Want)> = vec![
        ("maxEntries 2.0", req::list("sorted").max_entries(7777), "7777", "2.0", Want::Ok(two)),
        ("maxEntries 2e0", req::list("sorted").max_entries(7777), "7777", "2e0", Want::Ok(two)),
        ("maxEntries 20E-1", req::list("sorted").max_entries(7777), "7777", "20E-1", Want::Ok(two)),
        ("maxEntries 0.2e+1", req::list("sorted").max_entries(7777), "7777", "0.2e+1", Want::Ok(two)),
        ("maxEntries 1e4", req::list("sorted").max_entries(7777), "7777", "1e4", Want::Ok(&[])),
        (
            "maxEntries 2.5",
            req::list("sorted").max_entries(7777),
            "7777",
            "2.5",
            Want::Refused("error:invalid_request"),
        ),
        (
            "maxEntries 1.0001e4",
            req::list("sorted").max_entries(7777),
            "7777",
            "1.0001e4",
            Want::Refused("error:invalid_request"),
        ),
        (
            "maxEntries 10001.0",
            req::list("sorted").max_entries(7777),
            "7777",
            "10001.0",
            Want::Refused("error:invalid_request"),
        ),
        (
            "maxEntries 0e0",
            req::list("sorted").max_entries(7777),
            "7777",
            "0e0",
            Want::Refused("error:invalid_request"),
        ),
        (
            "offset 6.0, maxBytes 5e0",
            req::read("hello.txt").offset(777_777).max_bytes(7777),
            "777777",
            "6.0",
            Want::Ok(&[]),
        ),
        (
            "offset 2^53-1 as 9.007199254740991e15",
            req::read("hello.txt").offset(777_777),
            "777777",
            "9.007199254740991e15",
            Want::Ok(&[]),
        ),
        (
            "offset 2^53",
            req::read("hello.txt").offset(777_777),
            "777777",
            "9007199254740992",
            Want::Refused("error:invalid_request"),
        ),
        (
            "offset 2^53 as 9.007199254740992e15",
            req::read("hello.txt").offset(777_777),
            "777777",
            "9.007199254740992e15",
            Want::Refused("error:invalid_request"),
        ),
    ];
    let mut conn = tryo!(c.bound());
    let mut problems = Vec::new();
    let generation = c.target.admitted.identity().generation;
    for (what, call, placeholder, spelled, want) in cells {
        let (id, key) = c.ids();
        let text = serde_json::to_string(&c.invoke(&id, &key, call)).unwrap_or_default();
        let member = |n: &str| [format!(":{n},"), format!(":{n}}}")];
        let [a, b] = member(placeholder);
        let mut line = text.replacen(&a, &format!(":{spelled},"), 1).replacen(&b, &format!(":{spelled}}}"), 1);
        if what.starts_with("offset 6.0") {
            // maxBytes 5 spelled 5E0 as well: "world" of "hello world\n".
            line = line.replacen(":7777}", ":5E0}", 1).replacen(":7777,", ":5E0,", 1);
        }
        if what == "maxEntries 2.0" {
            // The frame's own generation spelled as a float too: the same binding.
            line =
                line.replacen(&format!("\"generation\":{generation},"), &format!("\"generation\":{generation}.0,"), 1);
        }
        if line == text {
            return Outcome::Error(format!("harness: the placeholder of {what} was not in the invoke"));
        }
        conn.send_raw(format!("{line}\n").as_bytes());
        let r = conn.recv_for(&id);
        let got = token(&r);
        match want {
            Want::Refused(code) if got != code => problems.push(format!("{what}: {got}, want {code}")),
            Want::Refused(_) => {}
            Want::Ok(checks) => {
                let Some(d) = data(&r) else {
                    problems.push(format!("{what}: {got}, want result:ok (an integral number is an integer)"));
                    continue;
                };
                for (k, v) in checks {
                    if d.pointer(k) != Some(v) {
                        problems.push(format!("{what}: data{k} is {}, want {v}", d.pointer(k).unwrap_or(&Value::Null)));
                    }
                }
                let n = |k: &str| d[k].as_array().map(Vec::len);
                let ok = match what {
                    w if w.starts_with("maxEntries 1e4") => n("entries").is_some_and(|n| n > 2),
                    w if w.starts_with("maxEntries") => n("entries") == Some(2),
                    w if w.starts_with("offset 6.0") => d["content"] == "world" && d["eof"] == false,
                    _ => d["content"] == "" && d["eof"] == true,
                };
                if !ok {
                    problems.push(format!("{what}: answered as if the number were another value: {d}"));
                }
            }
        }
    }
    Outcome::with("result:ok", problems)
}

/// PC-4.3 / PC-4.5: the handle scan is an exact substring match over the frame, so the handle
/// inside a longer value, inside a key or as an id closes the connection like a whole value
/// (`adapter.invoke.handle-in-payload` tries whole values only), and nothing is written.
fn secret_handle_inside_values(c: &mut Ctx<'_>) -> Outcome {
    c.allow(&[]);
    let h = c.target.handle().to_string();
    let mut frames = vec![
        ("inside content", c.invoke("r-1", "k-1", req::write("x.txt", &format!("pre-{h}-post")))),
        ("inside a path", c.invoke("r-1", "k-1", req::write(&format!("d-{h}.txt"), "x"))),
        ("inside a payload key", {
            let mut f = c.invoke("r-1", "k-1", req::write("x.txt", "x"));
            f["payload"][format!("a{h}")] = json!(1);
            f
        }),
        ("inside the idempotencyKey", c.invoke("r-1", &format!("k-{h}"), req::write("x.txt", "x"))),
    ];
    if h.len() <= 126 {
        frames.push(("inside the requestId", c.invoke(&format!("r-{h}"), "k-1", req::write("x.txt", "x"))));
    }
    let mut wrong = Vec::new();
    for (how, f) in frames {
        let mut conn = tryo!(c.bound());
        conn.send(&f);
        let t = token(&conn.expect_close(c.step()));
        if t != "closed" {
            wrong.push(format!("the handle {how} → {t}"));
        }
    }
    if wrong.is_empty() {
        return Outcome::token("closed");
    }
    Outcome::with(
        "not-closed",
        vec![format!(
            "the bound handle anywhere in a frame other than bind closes the connection (an exact substring match), \
             but: {}",
            wrong.join("; ")
        )],
    )
}

/// PC-5.3.errors for the mutating operations and search: a FIFO, a socket or a device named by
/// the path is `unsupported_file_type` for fs.search, and for fs.write and fs.edit
/// `unsupported_file_type` or `not_a_file` (an existing target that is not a regular file;
/// an edit rewrites its target like a write), answered within one step (a
/// FIFO must not block); a symlink named by the path is `symlink_refused` for fs.edit and
/// fs.search. Nothing is replaced.
fn special_files_every_operation(c: &mut Ctx<'_>) -> Outcome {
    c.allow(&[]);
    let mut special = Vec::new();
    if c.fixture.fifo {
        special.push("special/fifo");
    }
    if c.fixture.device {
        special.push("special/null");
    }
    if c.fixture.socket {
        special.push("mixed/sock");
    }
    if special.is_empty() {
        return Outcome::Skip("no FIFO, device or socket could be made in the fixture".into());
    }
    let mut wrong = Vec::new();
    let mut check = |c: &mut Ctx<'_>, op: &str, payload: Value, ok: &[&str]| -> Result<(), Outcome> {
        if !granted(c, op) {
            return Ok(());
        }
        let mut conn = c.bound()?;
        let r = c.call(&mut conn, req::raw(op, payload.clone()));
        let t = token(&r);
        if !ok.contains(&t.as_str()) {
            wrong.push(format!("{op} {} → {t} (want {})", payload["path"], ok.join(" or ")));
        }
        Ok(())
    };
    for p in &special {
        let edits = json!([{"oldText": "a", "newText": "b"}]);
        // An edit rewrites its target like a write, so `not_a_file` (an existing target that is
        // not a regular file) is allowed beside `unsupported_file_type` for it too.
        tryo!(check(
            c,
            "fs.edit",
            json!({"path": p, "edits": edits}),
            &["error:unsupported_file_type", "error:not_a_file"]
        ));
        tryo!(check(c, "fs.search", json!({"path": p, "query": "a"}), &["error:unsupported_file_type"]));
        tryo!(check(
            c,
            "fs.write",
            json!({"path": p, "content": "x"}),
            &["error:unsupported_file_type", "error:not_a_file"]
        ));
    }
    let edits = json!([{"oldText": "hello", "newText": "x"}]);
    tryo!(check(c, "fs.edit", json!({"path": "links/in.txt", "edits": edits}), &["error:symlink_refused"]));
    tryo!(check(c, "fs.search", json!({"path": "links/in.txt", "query": "hello"}), &["error:symlink_refused"]));
    if wrong.is_empty() {
        return Outcome::token("refused");
    }
    Outcome::with(
        "not-refused",
        vec![format!(
            "special files and symlinks named by the path must be refused for every operation (PC-5.3.errors): {}",
            wrong.join("; ")
        )],
    )
}

// ---------------------------------------------------------------- fs.list

fn list_entries(r: &Recv) -> Vec<Value> {
    data(r).and_then(|d| d["entries"].as_array().cloned()).unwrap_or_default()
}
fn list_sorted_bytewise(c: &mut Ctx<'_>) -> Outcome {
    let r = tryo!(c.one(req::list("sorted")));
    let names: Vec<String> = list_entries(&r).iter().filter_map(|e| e["name"].as_str().map(String::from)).collect();
    let want = ["B", "Z", "_", "a", "m", "\u{e9}"];
    let problems =
        if data(&r).is_some() && names != want { vec![format!("order {names:?}, want {want:?}")] } else { vec![] };
    Outcome::with(token(&r), problems)
}
fn list_types_and_sizes(c: &mut Ctx<'_>) -> Outcome {
    let r = tryo!(c.one(req::list("dir")));
    let e = list_entries(&r);
    let mut problems = Vec::new();
    if data(&r).is_some() {
        let get = |n: &str| e.iter().find(|x| x["name"] == n).cloned().unwrap_or(Value::Null);
        if get("a.txt")["type"] != "file" || get("a.txt")["size"] != 9 {
            problems.push("a.txt should be a file of size 9".into());
        }
        if get("sub")["type"] != "directory" {
            problems.push("sub should be a directory".into());
        }
        if data(&r).is_some_and(|d| d["truncated"] != false) {
            problems.push("truncated should be false".into());
        }
    }
    Outcome::with(token(&r), problems)
}
fn list_omits_symlinks(c: &mut Ctx<'_>) -> Outcome {
    let r = tryo!(c.one(req::list("links")));
    let n = list_entries(&r).len();
    Outcome::with(
        token(&r),
        if data(&r).is_some() && n != 0 { vec![format!("{n} symlink entries listed")] } else { vec![] },
    )
}
fn list_omits_special(c: &mut Ctx<'_>) -> Outcome {
    if !c.fixture.fifo {
        return Outcome::Skip("no FIFO could be made in the root".into());
    }
    let r = tryo!(c.one(req::list("special")));
    let n = list_entries(&r).len();
    Outcome::with(
        token(&r),
        if data(&r).is_some() && n != 0 { vec![format!("{n} FIFO/device entries listed")] } else { vec![] },
    )
}
fn list_max_entries(c: &mut Ctx<'_>) -> Outcome {
    let r = tryo!(c.one(req::list("sorted").max_entries(2)));
    ok_with(&r, &[("/truncated", json!(true)), ("/entries/0/name", json!("B")), ("/entries/1/name", json!("Z"))])
        .and_len(&r, "/entries", 2)
}
fn list_not_a_directory(c: &mut Ctx<'_>) -> Outcome {
    tok(c.one(req::list("hello.txt")))
}
fn list_not_found(c: &mut Ctx<'_>) -> Outcome {
    tok(c.one(req::list("missing")))
}

trait AndLen {
    fn and_len(self, r: &Recv, ptr: &str, n: usize) -> Outcome;
}
impl AndLen for Outcome {
    fn and_len(self, r: &Recv, ptr: &str, n: usize) -> Outcome {
        match self {
            Outcome::Observed { token, mut problems } => {
                if let Some(a) = data(r).and_then(|d| d.pointer(ptr)).and_then(Value::as_array) {
                    if a.len() != n {
                        problems.push(format!("data{ptr} has {} items, want {n}", a.len()));
                    }
                }
                Outcome::Observed { token, problems }
            }
            o => o,
        }
    }
}

// ---------------------------------------------------------------- fs.stat

fn stat_file(c: &mut Ctx<'_>) -> Outcome {
    let r = tryo!(c.one(req::stat("hello.txt")));
    ok_with(&r, &[("/type", json!("file")), ("/size", json!(12))])
}
fn stat_directory(c: &mut Ctx<'_>) -> Outcome {
    let r = tryo!(c.one(req::stat("dir")));
    ok_with(&r, &[("/type", json!("directory")), ("/size", json!(0))])
}
fn stat_root(c: &mut Ctx<'_>) -> Outcome {
    let r = tryo!(c.one(req::stat(".")));
    ok_with(&r, &[("/type", json!("directory"))])
}
fn stat_symlink(c: &mut Ctx<'_>) -> Outcome {
    tok(c.one(req::stat("links/in.txt")))
}
fn stat_fifo(c: &mut Ctx<'_>) -> Outcome {
    if !c.fixture.fifo {
        return Outcome::Skip("no FIFO could be made in the root".into());
    }
    tok(c.one(req::stat("special/fifo")))
}
fn stat_device(c: &mut Ctx<'_>) -> Outcome {
    if !c.fixture.device {
        return Outcome::Skip("no character device could be made (needs CAP_MKNOD)".into());
    }
    tok(c.one(req::stat("special/null")))
}
fn stat_not_found(c: &mut Ctx<'_>) -> Outcome {
    tok(c.one(req::stat("dir/missing.txt")))
}

/// The file's modification time the case sets: 2021-01-31T23:59:58.5Z. January (a month
/// counted from zero is `00`), the last day of a month, seconds before midnight UTC (a local
/// time labelled `Z` is another day), and half a second (either truncated or rounded passes).
const MTIME: (i64, u32) = (1_612_137_598, 500_000_000);

/// PC-5.3.stat / PC-5.3.list: `modifiedAt` is optional, but when an adapter sends it, it is the
/// file's modification time. The case sets a file's time to [`MTIME`] and reads it back through
/// `fs.stat` and through `fs.list` of its directory: each `modifiedAt` sent must be within a
/// second of it (any precision, truncated or rounded). Sending none passes.
fn stat_modified_at(c: &mut Ctx<'_>) -> Outcome {
    const DIR: &str = "mtime";
    const FILE: &str = "mtime/january.txt";
    c.allow(&[DIR, FILE]);
    let at = std::time::UNIX_EPOCH + Duration::new(MTIME.0 as u64, MTIME.1);
    let laid = std::fs::create_dir_all(c.target.root.join(DIR))
        .and_then(|()| std::fs::write(c.target.root.join(FILE), "m\n"))
        .and_then(|()| std::fs::File::options().write(true).open(c.target.root.join(FILE)))
        .and_then(|f| f.set_times(std::fs::FileTimes::new().set_modified(at).set_accessed(at)));
    if let Err(e) = laid {
        return Outcome::Error(format!("cannot lay {FILE} with its modification time: {e}"));
    }
    let want = MTIME.0 as f64 + f64::from(MTIME.1) / 1e9;
    let mut problems = Vec::new();
    let mut check = |what: &str, t: Option<&Value>| match t {
        None => {}
        Some(t) => match t.as_str().and_then(crate::contract::text::utc_instant) {
            Some((s, ns)) if (s as f64 + f64::from(ns) / 1e9 - want).abs() <= 1.0 => {}
            _ => problems.push(format!("{what} modifiedAt {t}: the file was modified at 2021-01-31T23:59:58.5Z")),
        },
    };
    let r = tryo!(c.one(req::stat(FILE)));
    let Some(d) = data(&r) else { return Outcome::token(token(&r)) };
    check("fs.stat", d.get("modifiedAt"));
    let r = tryo!(c.one(req::list(DIR)));
    let Some(d) = data(&r) else { return Outcome::token(token(&r)) };
    let entry = d["entries"].as_array().and_then(|a| a.iter().find(|e| e["name"] == "january.txt"));
    let Some(entry) = entry else {
        return Outcome::with("result:ok", vec![format!("fs.list of {DIR} does not list january.txt")]);
    };
    check("fs.list entry", entry.get("modifiedAt"));
    Outcome::with("result:ok", problems)
}

// ---------------------------------------------------------------- fs.read

fn read_whole(c: &mut Ctx<'_>) -> Outcome {
    let r = tryo!(c.one(req::read("hello.txt")));
    ok_with(&r, &[("/content", json!("hello world\n")), ("/bytesRead", json!(12)), ("/eof", json!(true))])
}
/// What `adapter.read.ends-in-long-word` lays: a digest of 64 hex digits ends the file, with
/// no newline after it.
const LONG_WORD_FILE: &str = "checksum:\nsha256 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

/// PC-5.3.read: a small file whose last 64 bytes are letters and digits, with no newline
/// after them (a digest or a key ending a text file), reads whole. A content scan keeps a
/// state for runs of such bytes (another grant's handle is one) and must still come to the
/// file's end: under the mutant `fs/guard.rs:534:25` the reference's scan never returned on
/// a chunk ending in such a run and the read was never answered. The file is removed after
/// the case.
fn read_ends_in_long_word(c: &mut Ctx<'_>) -> Outcome {
    let name = "long-word.txt";
    if std::fs::write(c.target.root.join(name), LONG_WORD_FILE).is_err() {
        return Outcome::Error("cannot lay the file of the case".into());
    }
    let r = c.one(req::read(name));
    let _ = std::fs::remove_file(c.target.root.join(name));
    let r = tryo!(r);
    ok_with(
        &r,
        &[("/content", json!(LONG_WORD_FILE)), ("/bytesRead", json!(LONG_WORD_FILE.len())), ("/eof", json!(true))],
    )
}
fn read_window(c: &mut Ctx<'_>) -> Outcome {
    let r = tryo!(c.one(req::read("hello.txt").offset(6).max_bytes(5)));
    ok_with(&r, &[("/content", json!("world")), ("/bytesRead", json!(5)), ("/eof", json!(false))])
}
fn read_past_end(c: &mut Ctx<'_>) -> Outcome {
    let r = tryo!(c.one(req::read("hello.txt").offset(100)));
    ok_with(&r, &[("/content", json!("")), ("/bytesRead", json!(0)), ("/eof", json!(true))])
}
/// PC-5.3.read at the boundary: `offset` exactly the file's size is the end, not past it:
/// empty content, `bytesRead` 0, `eof:true` (`hello.txt` is 12 bytes).
fn read_offset_at_end(c: &mut Ctx<'_>) -> Outcome {
    let size = read_root(c, "hello.txt").len() as u64;
    let r = tryo!(c.one(req::read("hello.txt").offset(size)));
    ok_with(&r, &[("/content", json!("")), ("/bytesRead", json!(0)), ("/eof", json!(true))])
}
fn read_mid_char_offset(c: &mut Ctx<'_>) -> Outcome {
    tok(c.one(req::read("utf8.txt").offset(2)))
}
fn read_window_ends_mid_char(c: &mut Ctx<'_>) -> Outcome {
    let r = tryo!(c.one(req::read("utf8.txt").offset(0).max_bytes(5)));
    ok_with(&r, &[("/content", json!("a\u{e9}")), ("/bytesRead", json!(3)), ("/eof", json!(false))])
}
/// Every window short of the 4-byte character at offset 6, down to one byte: an adapter that
/// looks fewer than 4 bytes past a 1-byte window sees a broken character there.
fn read_tiny_window(c: &mut Ctx<'_>) -> Outcome {
    let mut conn = tryo!(c.bound());
    let mut problems = Vec::new();
    for max in [3, 2, 1] {
        let r = c.call(&mut conn, req::read("utf8.txt").offset(6).max_bytes(max));
        match ok_with(&r, &[("/content", json!("")), ("/bytesRead", json!(0)), ("/eof", json!(false))]) {
            Outcome::Observed { token, problems: p } if token == "result:ok" => {
                problems.extend(p.into_iter().map(|p| format!("maxBytes {max}: {p}")));
            }
            Outcome::Observed { token, mut problems } => {
                problems.push(format!("that answer was to maxBytes {max}"));
                return Outcome::with(token, problems);
            }
            other => return other,
        }
    }
    Outcome::with("result:ok", problems)
}
fn read_not_utf8(c: &mut Ctx<'_>) -> Outcome {
    tok(c.one(req::read("latin1.txt")))
}

/// PC-5.3.read, PC-4.5: a read whose offset lies on a continuation byte of a character cut
/// short by the end of the file (`a` and the first three bytes of a 4-byte character), at each
/// of its two continuation bytes, is answered with a refusal: `not_utf8` (the bytes there are
/// not UTF-8) or `invalid_offset` (the offset is inside a multi-byte sequence). SPEC names both
/// rules and not this meeting of them, so either is accepted; what is checked is that each
/// read is answered, and refused for one of those reasons. The file is removed after the case.
fn read_offset_inside_cut_character(c: &mut Ctx<'_>) -> Outcome {
    let name = "cut-character.txt";
    if std::fs::write(c.target.root.join(name), b"a\xf0\x9f\x98").is_err() {
        return Outcome::Error("cannot lay the file of the case".into());
    }
    let out = (|| {
        let mut conn = tryo!(c.bound());
        let mut last = String::new();
        for offset in [2, 3] {
            let r = c.call(&mut conn, req::read(name).offset(offset));
            last = token(&r);
            if !matches!(last.as_str(), "error:not_utf8" | "error:invalid_offset") {
                return Outcome::with(last, vec![format!("that answer was to offset {offset}")]);
            }
        }
        Outcome::token(last)
    })();
    let _ = std::fs::remove_file(c.target.root.join(name));
    out
}
fn read_large_file(c: &mut Ctx<'_>) -> Outcome {
    let r = tryo!(c.one(req::read("big.txt")));
    let Some(d) = data(&r) else { return Outcome::token(token(&r)) };
    let content = d["content"].as_str().unwrap_or("");
    let n = d["bytesRead"].as_u64().unwrap_or(0) as usize;
    let big = read_root(c, "big.txt");
    let mut problems = Vec::new();
    if n == 0 || n != content.len() || big.get(..n) != Some(content.as_bytes()) {
        problems.push("content is not the file's first bytesRead bytes".into());
    }
    if (n == BIG_SIZE) != (d["eof"] == true) {
        problems.push("eof must be offset + bytesRead == size".into());
    }
    Outcome::with("result:ok", problems)
}
fn read_continues(c: &mut Ctx<'_>) -> Outcome {
    let mut conn = tryo!(c.bound());
    let mut offset = 0u64;
    let mut got = Vec::new();
    for _ in 0..64 {
        let r = c.call(&mut conn, req::read("utf8.txt").offset(offset).max_bytes(4));
        let Some(d) = data(&r) else { return Outcome::token(token(&r)) };
        got.extend_from_slice(d["content"].as_str().unwrap_or("").as_bytes());
        offset += d["bytesRead"].as_u64().unwrap_or(0);
        if d["eof"] == true {
            break;
        }
    }
    let problems = if got != read_root(c, "utf8.txt") {
        vec!["offset + bytesRead does not continue the file".into()]
    } else {
        vec![]
    };
    Outcome::with("result:ok", problems)
}
fn read_directory(c: &mut Ctx<'_>) -> Outcome {
    tok(c.one(req::read("dir")))
}
fn read_fifo(c: &mut Ctx<'_>) -> Outcome {
    if !c.fixture.fifo {
        return Outcome::Skip("no FIFO could be made in the root".into());
    }
    tok(c.one(req::read("special/fifo")))
}
fn read_symlink(c: &mut Ctx<'_>) -> Outcome {
    tok(c.one(req::read("links/out.txt")))
}

// ---------------------------------------------------------------- fs.search

fn matches(r: &Recv) -> Vec<Value> {
    data(r).and_then(|d| d["matches"].as_array().cloned()).unwrap_or_default()
}
fn search_literal_order(c: &mut Ctx<'_>) -> Outcome {
    let r = tryo!(c.one(req::search("dir", "needle")));
    let got: Vec<(String, u64, u64)> = matches(&r)
        .iter()
        .map(|m| {
            (
                m["path"].as_str().unwrap_or("").into(),
                m["line"].as_u64().unwrap_or(0),
                m["column"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    let want = vec![("dir/a.txt".to_string(), 1, 3), ("dir/sub/c.txt".to_string(), 1, 1)];
    let mut problems =
        if data(&r).is_some() && got != want { vec![format!("matches {got:?}, want {want:?}")] } else { vec![] };
    // Two matches of the default 1000, in a tree whose every file is searchable: nothing was
    // cut or left out, so `truncated` must say so (PC-5.3.search: truncated when cut).
    if let Some(t) = data(&r).map(|d| d["truncated"].clone()).filter(|t| *t != json!(false)) {
        problems.push(format!(
            "truncated is {t} for a search that returned every match of a tree with nothing left out (2 of the \
             default 1000): truncated says the answer was cut"
        ));
    }
    Outcome::with(token(&r), problems)
}
fn search_columns_unicode(c: &mut Ctx<'_>) -> Outcome {
    let r = tryo!(c.one(req::search("uni.txt", "needle")));
    ok_with(
        &r,
        &[("/matches/0/column", json!(4)), ("/matches/0/line", json!(1)), ("/matches/0/path", json!("uni.txt"))],
    )
}
fn search_non_overlapping(c: &mut Ctx<'_>) -> Outcome {
    let r = tryo!(c.one(req::search("overlap.txt", "aa")));
    ok_with(&r, &[("/matches/0/column", json!(1)), ("/matches/1/column", json!(3))]).and_len(&r, "/matches", 2)
}
fn search_crlf(c: &mut Ctx<'_>) -> Outcome {
    let r = tryo!(c.one(req::search("crlf.txt", "needle")));
    ok_with(&r, &[("/matches/0/line", json!(2)), ("/matches/0/text", json!("two needle"))])
}
fn search_long_line_window(c: &mut Ctx<'_>) -> Outcome {
    let r = tryo!(c.one(req::search("long.txt", "needle")));
    let Some(m) = matches(&r).first().cloned() else { return Outcome::with(token(&r), vec!["no match".into()]) };
    let text = m["text"].as_str().unwrap_or("");
    let mut problems = Vec::new();
    // The fixture line is ASCII: its window is 4096 units = 4096 characters.
    let units = crate::contract::text::utf16_len(text);
    if units != 4096 {
        problems.push(format!("text has {units} UTF-16 units, want the 4096-unit window"));
    }
    if text.find("needle") != Some(1024) {
        problems.push("the window must start 1024 units before the match".into());
    }
    if m["column"] != 6001 {
        problems.push(format!("column {} want 6001", m["column"]));
    }
    if let Err(o) = search_long_line_far_in(c, &mut problems) {
        return o;
    }
    if let Err(o) = search_long_line_three_byte(c, &mut problems) {
        return o;
    }
    Outcome::with(token(&r), problems)
}

/// Part of `adapter.search.long-line-window`: a match on the first character of a line that
/// goes on in three-byte characters, `世` then 6000 `€` (each one UTF-16 unit). Nothing
/// precedes the match, so the window is filled forward from it: 4096 characters, 12,288 bytes.
/// An adapter that reads a fixed number of bytes past the match must read at least that many;
/// one that reads 3 × 4096 − 3 (the three-byte characters' worst case, one character short)
/// answers 4095 characters, where the rule says always 4096.
fn search_long_line_three_byte(c: &mut Ctx<'_>, problems: &mut Vec<String>) -> Result<(), Outcome> {
    let name = "three-byte.txt";
    let line = format!("\u{4e16}{}", "\u{20ac}".repeat(6000));
    c.allow(&[name]);
    if std::fs::write(c.target.root.join(name), format!("{line}\n")).is_err() {
        return Err(Outcome::Error("cannot lay the file of the case".into()));
    }
    let r = c.one(req::search(name, "\u{4e16}"));
    let _ = std::fs::remove_file(c.target.root.join(name));
    let r = r?;
    if data(&r).is_none() {
        return Err(Outcome::token(token(&r)));
    }
    let want: String = line.chars().take(4096).collect();
    let found = matches(&r);
    match found.as_slice() {
        [m] if m["column"] == 1 && m["text"].as_str() == Some(want.as_str()) => {}
        [m] => problems.push(format!(
            "{name} (one \u{4e16}, then 6000 three-byte \u{20ac}, searched for \u{4e16}): column {}, text of {} \
             characters; want column 1, the line's first 4096 characters (a window of a line over 4096 characters is \
             always 4096)",
            m["column"],
            m["text"].as_str().map_or(0, |t| t.chars().count()),
        )),
        _ => problems.push(format!("{name} (one line, the query once at its start): {} matches, want 1", found.len())),
    }
    Ok(())
}

/// Part of `adapter.search.long-line-window`: a match far into a long line of two-byte
/// characters, 10000 `é` then `needle` (the match 20000 bytes in). The window is 4096
/// characters, so an adapter reads at most some bytes before the match; reading a fixed
/// number of bytes back (the reference reads 12291) lands inside an `é`, whose cut first byte
/// must be skipped, not taken for a broken file: the match must come back, at column 10001,
/// with the window the rule gives (starting 1024 characters before it, shifted to stay inside
/// the line).
fn search_long_line_far_in(c: &mut Ctx<'_>, problems: &mut Vec<String>) -> Result<(), Outcome> {
    let name = "far-in.txt";
    let line = format!("{}needle", "\u{e9}".repeat(10_000));
    c.allow(&[name]);
    if std::fs::write(c.target.root.join(name), format!("{line}\n")).is_err() {
        return Err(Outcome::Error("cannot lay the file of the case".into()));
    }
    let r = c.one(req::search(name, "needle"));
    let _ = std::fs::remove_file(c.target.root.join(name));
    let r = r?;
    if data(&r).is_none() {
        return Err(Outcome::token(token(&r)));
    }
    let chars: Vec<char> = line.chars().collect();
    let (len, at) = (chars.len(), 10_000usize);
    let from = at.saturating_sub(1024).min(len - 4096);
    let want: String = chars[from..from + 4096].iter().collect();
    let found = matches(&r);
    match found.as_slice() {
        [m] if m["column"] == at + 1 && m["text"].as_str() == Some(want.as_str()) => {}
        [m] => problems.push(format!(
            "{name} (10000 two-byte characters, then needle): column {}, text of {} characters; want column {}, \
             the 4096 characters {from}..{} of the line",
            m["column"],
            m["text"].as_str().map_or(0, |t| t.chars().count()),
            at + 1,
            from + 4096
        )),
        _ => problems.push(format!(
            "{name} (10000 two-byte characters, then needle, 20000 bytes into its one line): {} matches, want 1",
            found.len()
        )),
    }
    Ok(())
}
/// PC-5.3.search: the window of a line over 4096 characters is always 4096 characters,
/// shifted to stay inside the line: a match `at` characters into a line of `len` gets the
/// window that starts at `at - 1024` moved into `0..=len - 4096`.
fn search_window_edge(c: &mut Ctx<'_>, path: &str, len: usize, at: usize) -> Outcome {
    let r = tryo!(c.one(req::search(path, "needle")));
    let Some(m) = matches(&r).first().cloned() else { return Outcome::with(token(&r), vec!["no match".into()]) };
    let line = super::fixture::window_line(len, at);
    let from = at.saturating_sub(1024).min(len - 4096);
    let want = &line[from..from + 4096];
    let mut problems = Vec::new();
    if m["column"] != at + 1 {
        problems.push(format!("column {} want {}", m["column"], at + 1));
    }
    let text = m["text"].as_str().unwrap_or("");
    if text != want {
        problems.push(format!(
            "text is {} characters with the match at {:?}; want the 4096 characters {from}..{} of the {len}-character \
             line (the window starts 1024 before the match, shifted to stay inside the line), the match at {}",
            text.chars().count(),
            text.find("needle"),
            from + 4096,
            at - from
        ));
    }
    Outcome::with(token(&r), problems)
}
fn search_window_start(c: &mut Ctx<'_>) -> Outcome {
    let near = search_window_edge(c, "window/start.txt", 6000, super::fixture::WINDOW_START_AT);
    if !matches!(&near, Outcome::Observed { token, .. } if token == "result:ok") {
        return near;
    }
    // And a match on the file's very first byte: nothing before it, the window is the line's
    // first 4096 characters. The file is laid for this check and removed after it.
    let first = "window/first.txt";
    if std::fs::write(c.target.root.join(first), super::fixture::window_line(6000, 0)).is_err() {
        return Outcome::Error("cannot lay the file of the case".into());
    }
    let at_zero = search_window_edge(c, first, 6000, 0);
    let _ = std::fs::remove_file(c.target.root.join(first));
    match (near, at_zero) {
        (Outcome::Observed { token, mut problems }, Outcome::Observed { token: t, problems: more }) if t == token => {
            problems.extend(more.into_iter().map(|p| format!("{first}: {p}")));
            Outcome::Observed { token, problems }
        }
        (_, other) => other,
    }
}
fn search_window_end(c: &mut Ctx<'_>) -> Outcome {
    search_window_edge(c, "window/end.txt", 5000, super::fixture::WINDOW_END_AT)
}
fn search_skips_binary(c: &mut Ctx<'_>) -> Outcome {
    let r = tryo!(c.one(req::search(".", "needle").max_results(1000)));
    let bad: Vec<String> = matches(&r)
        .iter()
        .filter_map(|m| m["path"].as_str())
        .filter(|p| *p == "latin1.txt" || *p == "nul.txt")
        .map(String::from)
        .collect();
    Outcome::with(
        token(&r),
        if bad.is_empty() { vec![] } else { vec![format!("matches in non-UTF-8/NUL files: {bad:?}")] },
    )
}
fn search_direct_binary(c: &mut Ctx<'_>) -> Outcome {
    let r = tryo!(c.one(req::search("latin1.txt", "needle")));
    ok_with(&r, &[("/matches", json!([]))])
}

/// The files of `adapter.search.strict-utf8-files`: each holds, on its first line, bytes that
/// are not UTF-8 and the query on its second: a sequence of a character's shape that UTF-8
/// forbids (RFC 3629 §3: overlong forms, surrogates, code points past U+10FFFF), two
/// Latin-1 letters, or two stray continuation bytes. Each first line is over 32 bytes and holds an even number of bytes over
/// 0x7F where it can, so a check that skips ASCII a block at a time must still look inside.
const NOT_QUITE_UTF8: [(&str, &[u8]); 6] = [
    ("overlong-3.txt", b"x \xE0\x80\xAF x, an overlong slash, past one block\nneedle here\n"),
    ("surrogate.txt", b"x \xED\xA0\x80 x, a lone surrogate, past one block\nneedle here\n"),
    ("overlong-4.txt", b"x \xF0\x80\x80\xAF x, an overlong slash, past one block\nneedle here\n"),
    ("past-10ffff.txt", b"x \xF4\x90\x80\x80 x, past U+10FFFF, past one block\nneedle here\n"),
    ("latin1-pair.txt", b"caf\xE9 cr\xE8me, two Latin-1 letters in one block\nneedle here\n"),
    ("stray-80.txt", b"x \x80\x80 x, two stray continuation bytes, past one block\nneedle here\n"),
];

/// PC-5.3.search: a file whose only flaw is a sequence UTF-8 forbids although its bytes have
/// the shape of a character (an overlong `E0 80 AF`, a surrogate `ED A0 80`, an overlong
/// four-byte form, a code point past U+10FFFF), two Latin-1 letters, or two stray
/// continuation bytes `80 80` (no lead byte before them), is not UTF-8:
/// searched by name it yields no match, and a search of its directory skips it. A UTF-8 file beside them must still match.
/// Whether skipping such files sets `truncated` is not judged (SPEC leaves that to the
/// adapter). The files are laid for the case and removed after it.
fn search_strict_utf8_files(c: &mut Ctx<'_>) -> Outcome {
    let dir = "utf8-forms";
    let laid = std::fs::create_dir_all(c.target.root.join(dir)).is_ok()
        && std::fs::write(c.target.root.join(dir).join("ok.txt"), "needle ok\n").is_ok()
        && NOT_QUITE_UTF8.iter().all(|(name, bytes)| std::fs::write(c.target.root.join(dir).join(name), bytes).is_ok());
    let out =
        if laid { strict_utf8_searches(c, dir) } else { Outcome::Error("cannot lay the files of the case".into()) };
    let _ = std::fs::remove_dir_all(c.target.root.join(dir));
    out
}
fn strict_utf8_searches(c: &mut Ctx<'_>, dir: &str) -> Outcome {
    let mut conn = tryo!(c.bound());
    let mut problems = Vec::new();
    let r = c.call(&mut conn, req::search(dir, "needle"));
    if data(&r).is_none() {
        return Outcome::token(token(&r));
    }
    let paths: Vec<String> = matches(&r).iter().filter_map(|m| m["path"].as_str().map(String::from)).collect();
    for (name, _) in NOT_QUITE_UTF8 {
        let p = format!("{dir}/{name}");
        if paths.contains(&p) {
            problems.push(format!("a search of {dir} returned matches in {p}, which is not UTF-8: skip it"));
        }
    }
    if !paths.contains(&format!("{dir}/ok.txt")) {
        problems.push(format!("a search of {dir} for needle did not match {dir}/ok.txt, the UTF-8 file beside them"));
    }
    for (name, _) in NOT_QUITE_UTF8 {
        let p = format!("{dir}/{name}");
        let r = c.call(&mut conn, req::search(&p, "needle"));
        if data(&r).is_none() {
            return Outcome::with(token(&r), problems);
        }
        let n = matches(&r).len();
        if n > 0 {
            problems.push(format!("a search of {p}, which is not UTF-8, returned {n} match(es) instead of none"));
        }
    }
    Outcome::with("result:ok", problems)
}
/// The matches of `query` in the file `path` whose text is `text`, as PC-5.3.search gives
/// them for BMP text: the whole line up to 4096 characters, else the 4096-character window
/// starting 1024 before the match, shifted back to stay inside the line.
fn windowed_matches(path: &str, text: &str, query: &str) -> Vec<Value> {
    let mut out = Vec::new();
    for (i, line) in text.split('\n').enumerate() {
        let line = line.strip_suffix('\r').unwrap_or(line);
        // The characters of a non-ASCII line, taken only when a match needs them.
        let mut chars: Option<Vec<char>> = None;
        let mut seen = (0, 0); // (byte, char) of a position already counted
        for (at, _) in line.match_indices(query) {
            let column = seen.1 + line[seen.0..at].chars().count();
            seen = (at, column);
            let text: String = if line.is_ascii() {
                let from = column.saturating_sub(1024).min(line.len().saturating_sub(4096));
                line[from..line.len().min(from + 4096)].to_string()
            } else {
                let chars = chars.get_or_insert_with(|| line.chars().collect());
                let from = column.saturating_sub(1024).min(chars.len().saturating_sub(4096));
                chars[from..chars.len().min(from + 4096)].iter().collect()
            };
            out.push(json!({"path": path, "line": i + 1, "column": column + 1, "text": text}));
        }
    }
    out
}

/// The text of `big/needles.txt` of `adapter.search.big-file-across-chunks`: one line of
/// spaces over 1 MiB with `needle` across each multiple of 64 KiB (its first three bytes
/// before it). Spaces, not letters: an adapter's content scan looks for handles in runs of
/// base64url letters, which a megabyte of letters would make slow for nothing.
fn needles_across_chunks() -> String {
    let mut t = String::with_capacity(17 * 64 * 1024);
    for k in 1..=16usize {
        let at = k * 64 * 1024 - 3;
        t.push_str(&" ".repeat(at - t.len()));
        t.push_str("needle");
    }
    t.push_str("    \n");
    t
}

/// PC-5.3.search on a file larger than any chunk an adapter is likely to read it in (the
/// runner cannot know the chunk size, so every multiple of 64 KiB up to 1 MiB is a boundary):
/// `big/needles.txt`, one line of over 1 MiB with `needle` across each multiple of 64 KiB,
/// must give all of them, in order, with their columns and 4096-character windows, and with
/// `maxResults: 2` the first two and `truncated: true` (the second's line goes on past every
/// boundary); `big/euro.txt`, 600,000 bytes of `€` (three bytes each, so each power-of-two
/// offset cuts one) then `needle` on a line of its own, is UTF-8 and must give that match. Both
/// files are laid for the case and removed after it. Skipped when `maxResponseBytes` is
/// under 128 KiB (the sixteen windows would not fit; a budget cut is judged elsewhere).
fn search_big_file_across_chunks(c: &mut Ctx<'_>) -> Outcome {
    if c.target.admitted.limits().max_response_bytes < 128 * 1024 {
        return Outcome::Skip("maxResponseBytes is under 128 KiB: the sixteen match windows would not fit".into());
    }
    let needles = needles_across_chunks();
    let euro = format!("{}\nneedle\n", "€".repeat(200_000));
    let root = c.target.root.join("big");
    let laid = std::fs::create_dir_all(&root).is_ok()
        && std::fs::write(root.join("needles.txt"), &needles).is_ok()
        && std::fs::write(root.join("euro.txt"), &euro).is_ok();
    let out = if laid {
        big_file_searches(c, &needles, &euro)
    } else {
        Outcome::Error("cannot lay the files of the case".into())
    };
    let _ = std::fs::remove_dir_all(&root);
    out
}
fn big_file_searches(c: &mut Ctx<'_>, needles: &str, euro: &str) -> Outcome {
    let mut conn = tryo!(c.bound());
    let mut problems = Vec::new();
    let where_ = |v: &[Value]| -> String {
        let cols: Vec<String> = v.iter().take(20).map(|m| format!("{}:{}", m["line"], m["column"])).collect();
        format!("[{}] ({} in all)", cols.join(" "), v.len())
    };
    let all = windowed_matches("big/needles.txt", needles, "needle");
    for (max, want, truncated) in [(1000, &all[..], false), (2, &all[..2], true)] {
        let r = c.call(&mut conn, req::search("big/needles.txt", "needle").max_results(max));
        let Some(d) = data(&r) else { return Outcome::with(token(&r), problems) };
        let got = matches(&r);
        if got != want {
            let wrong_text = got.iter().zip(want).filter(|(g, w)| g["text"] != w["text"]).count();
            problems.push(format!(
                "fs.search of big/needles.txt (maxResults {max}): matches at line:column {}, want {}{}",
                where_(&got),
                where_(want),
                if wrong_text > 0 { format!("; {wrong_text} with a wrong text window") } else { String::new() }
            ));
        }
        if d["truncated"] != truncated {
            problems.push(format!(
                "fs.search of big/needles.txt (maxResults {max}): truncated is {}, want {truncated}",
                d["truncated"]
            ));
        }
    }
    let r = c.call(&mut conn, req::search("big/euro.txt", "needle"));
    if data(&r).is_none() {
        return Outcome::with(token(&r), problems);
    }
    let want = windowed_matches("big/euro.txt", euro, "needle");
    if matches(&r) != want {
        problems.push(format!(
            "fs.search of big/euro.txt, UTF-8 whose three-byte characters any chunk boundary cuts: matches at \
             line:column {}, want {}",
            where_(&matches(&r)),
            where_(&want)
        ));
    }
    // Another query length moves the bytes kept across each chunk boundary (the ones an
    // occurrence crossing it may start in) by one: an adapter that resumed its UTF-8 check at
    // the second kept byte would resume inside a character at the 256 KiB boundary with
    // `eedle`, on a character's first byte with `needle`.
    let r = c.call(&mut conn, req::search("big/euro.txt", "eedle"));
    if data(&r).is_none() {
        return Outcome::with(token(&r), problems);
    }
    let want = windowed_matches("big/euro.txt", euro, "eedle");
    if matches(&r) != want {
        problems.push(format!(
            "fs.search of big/euro.txt for eedle: matches at line:column {}, want {}",
            where_(&matches(&r)),
            where_(&want)
        ));
    }
    Outcome::with("result:ok", problems)
}

fn search_query_newline(c: &mut Ctx<'_>) -> Outcome {
    tok(c.one(req::search(".", "needle\nx")))
}
fn search_max_results(c: &mut Ctx<'_>) -> Outcome {
    let r = tryo!(c.one(req::search("notes.md", "needle").max_results(2)));
    ok_with(&r, &[("/truncated", json!(true)), ("/matches/0/line", json!(1)), ("/matches/1/line", json!(3))])
        .and_len(&r, "/matches", 2)
}
fn search_case_sensitive(c: &mut Ctx<'_>) -> Outcome {
    let r = tryo!(c.one(req::search("notes.md", "NEEDLE")));
    ok_with(&r, &[("/matches", json!([]))])
}
fn search_no_symlink_follow(c: &mut Ctx<'_>) -> Outcome {
    let r = tryo!(c.one(req::search(".", "SENTINEL")));
    ok_with(&r, &[("/matches", json!([]))])
}

/// The matches a literal, case-sensitive, non-overlapping search of `query` must find in the
/// file `path` whose text is `text` (PC-5.3.search): the expected value, computed here.
fn literal_matches(path: &str, text: &str, query: &str) -> Vec<Value> {
    let mut out = Vec::new();
    for (i, line) in text.split('\n').enumerate() {
        let line = line.strip_suffix('\r').unwrap_or(line);
        for (at, _) in line.match_indices(query) {
            let column = line[..at].chars().count() + 1;
            out.push(json!({"path": path, "line": i + 1, "column": column, "text": line}));
        }
    }
    out
}

/// Search `path` for each query on one connection and compare every match list with the
/// literal one.
fn search_each_literally(c: &mut Ctx<'_>, path: &str, queries: &[&str]) -> Outcome {
    let text = String::from_utf8(read_root(c, path)).unwrap_or_default();
    let mut conn = tryo!(c.bound());
    let mut problems = Vec::new();
    for q in queries {
        let r = c.call(&mut conn, req::search(path, q).max_results(1000));
        let Some(d) = data(&r) else { return Outcome::with(token(&r), problems) };
        let want = literal_matches(path, &text, q);
        if d["matches"] != Value::Array(want.clone()) || d["truncated"] != false {
            let got: Vec<(u64, u64)> = matches(&r)
                .iter()
                .map(|m| (m["line"].as_u64().unwrap_or(0), m["column"].as_u64().unwrap_or(0)))
                .collect();
            let want: Vec<(u64, u64)> =
                want.iter().map(|m| (m["line"].as_u64().unwrap_or(0), m["column"].as_u64().unwrap_or(0))).collect();
            let show = |v: &[(u64, u64)]| {
                let head: Vec<String> = v.iter().take(6).map(|(l, c)| format!("{l}:{c}")).collect();
                format!("[{}{}] ({} in all)", head.join(" "), if v.len() > 6 { " …" } else { "" }, v.len())
            };
            problems.push(format!("query {q:?}: matches at line:column {}, literally {}", show(&got), show(&want)));
        }
    }
    Outcome::with("result:ok", problems)
}

/// Every regex and glob metacharacter, alone and in the patterns they usually make, is
/// matched literally (a regex or glob engine finds other lines and columns in `meta.txt`).
fn search_literal_metacharacters(c: &mut Ctx<'_>) -> Outcome {
    const QUERIES: &[&str] = &[
        ".", "*", "+", "?", "(", ")", "[", "]", "{", "}", "|", "\\", "^", "$", "a.c", "a*c", "a+c", "a?c", "(x)",
        "[ab]", "{2}", "a|b", "\\d", "^start", "end$", "x?y", ".*", "*.txt", "?.md", "[!a]", "{a,b}", "**", "f.md",
        "^", "$", "\\.",
    ];
    search_each_literally(c, "meta.txt", QUERIES)
}

/// Case-sensitive matching of multi-byte text on CRLF lines: columns in scalar values, the CR
/// never part of `text`, a query ending where the CR begins still found.
fn search_literal_text(c: &mut Ctx<'_>) -> Outcome {
    const QUERIES: &[&str] = &[
        "start",
        "Start",
        "START",
        "sTaRt",
        "\u{e9}.\u{e9}",
        "\u{1f600}.\u{1f600}",
        "\u{fc}n\u{ef}c\u{f6}d\u{e9}",
        "\u{2713}",
        "x\u{1f600}",
        "the end",
        "end",
        "$ .* ^ $",
        "d\u{e9} \u{2713}",
    ];
    search_each_literally(c, "meta.txt", QUERIES)
}

// ---------------------------------------------------------------- fixture edges (mixed/)

/// `mixed/` holds every kind of entry: only its regular files and directories are listed, in
/// bytewise order (not locale order), files with their sizes (an empty one 0).
fn list_mixed(c: &mut Ctx<'_>) -> Outcome {
    let r = tryo!(c.one(req::list("mixed")));
    let Some(d) = data(&r) else { return Outcome::token(token(&r)) };
    let got: Vec<(String, Value, Value)> = d["entries"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|e| (e["name"].as_str().unwrap_or("").to_string(), e["type"].clone(), e["size"].clone()))
                .collect()
        })
        .unwrap_or_default();
    let want: Vec<(String, Value, Value)> = MIXED_LISTED
        .iter()
        .map(|(n, s)| match s {
            Some(s) => (n.to_string(), json!("file"), json!(s)),
            None => (
                n.to_string(),
                json!("directory"),
                got.iter().find(|g| g.0 == *n).map(|g| g.2.clone()).unwrap_or(Value::Null),
            ),
        })
        .collect();
    let mut p = Vec::new();
    if got != want {
        let show = |v: &[(String, Value, Value)]| {
            v.iter().map(|(n, t, s)| format!("{n} {t} {s}")).collect::<Vec<_>>().join(", ")
        };
        p.push(format!(
            "mixed/ lists [{}], want [{}] (symlinks, FIFOs and sockets omitted, bytewise order)",
            show(&got),
            show(&want)
        ));
    }
    if d["truncated"] != false {
        p.push("truncated should be false".into());
    }
    Outcome::with("result:ok", p)
}

/// The directory of [`list_unrepresentable_names`] and the names it lays, as raw bytes: one
/// representable name, then names with a tab, an LF, a C0 control, DEL, a byte that is not
/// UTF-8, and a directory whose name holds ESC.
const ODD_DIR: &str = "odd";
const ODD_FILES: [&[u8]; 6] =
    [b"ok.txt", b"tab\there.txt", b"nl\nhere.txt", b"ctl\x01.txt", b"del\x7f.txt", b"bad\xff.txt"];
const ODD_SUBDIR: &[u8] = b"dir\x1b";

/// PC-5.3.list and PC-5.2 (audit gap 1): names that cannot be represented (not UTF-8, control
/// characters) are omitted by fs.list and fs.search, never passed through raw or lossily.
/// `odd/` holds one representable file and six that are not (five files, and a directory
/// holding `in.txt`); all hold `needle`. The listing must be exactly `ok.txt` and the search
/// exactly `odd/ok.txt` (the judge refuses a control character in a name or path; a lossy
/// name, such as U+FFFD for `\xff`, names no file). `truncated` is not judged: how a skipped
/// name shows there is a reference-only DECISION. The runner removes `odd/` at the end.
fn list_unrepresentable_names(c: &mut Ctx<'_>) -> Outcome {
    use std::os::unix::ffi::OsStrExt;
    let dir = c.target.root.join(ODD_DIR);
    let laid = (|| -> std::io::Result<()> {
        std::fs::create_dir_all(&dir)?;
        for n in ODD_FILES {
            std::fs::write(dir.join(std::ffi::OsStr::from_bytes(n)), "needle\n")?;
        }
        let sub = dir.join(std::ffi::OsStr::from_bytes(ODD_SUBDIR));
        std::fs::create_dir_all(&sub)?;
        std::fs::write(sub.join("in.txt"), "needle\n")
    })();
    let out = match laid {
        Ok(()) => unrepresentable_names_checked(c),
        Err(e) => {
            Outcome::Skip(format!("the filesystem refuses names with control characters or non-UTF-8 bytes: {e}"))
        }
    };
    let _ = std::fs::remove_dir_all(&dir);
    out
}
fn unrepresentable_names_checked(c: &mut Ctx<'_>) -> Outcome {
    let mut conn = tryo!(c.bound());
    let mut p = Vec::new();
    let mut tokens = Vec::new();
    // Whether `rel` (a name or path the adapter returned) names a file or directory on disk.
    let root = c.target.root.clone();
    let exists = |rel: &str| std::fs::symlink_metadata(root.join(rel)).is_ok_and(|m| m.is_file() || m.is_dir());
    if granted(c, "fs.list") {
        let r = c.call(&mut conn, req::list(ODD_DIR));
        tokens.push(token(&r));
        if data(&r).is_some() {
            let names: Vec<String> =
                list_entries(&r).iter().map(|e| e["name"].as_str().unwrap_or("?").to_string()).collect();
            if names != ["ok.txt"] {
                p.push(format!("fs.list odd lists {names:?}, want [\"ok.txt\"]: names that are not UTF-8 or hold control characters are omitted"));
            }
            for n in names.iter().filter(|n| !exists(&format!("{ODD_DIR}/{n}"))) {
                p.push(format!("fs.list odd lists {n:?}, which names no file (a lossy name?)"));
            }
        }
        if matches!(r, Recv::Closed | Recv::Timeout) {
            conn = tryo!(c.bound());
        }
    }
    if granted(c, "fs.search") {
        let r = c.call(&mut conn, req::search(ODD_DIR, "needle"));
        tokens.push(token(&r));
        if data(&r).is_some() {
            let paths: Vec<String> =
                matches(&r).iter().map(|m| m["path"].as_str().unwrap_or("?").to_string()).collect();
            if paths != ["odd/ok.txt"] {
                p.push(format!("fs.search odd matches in {paths:?}, want [\"odd/ok.txt\"]: files whose path cannot be represented are not searched"));
            }
            for m in paths.iter().filter(|m| !exists(m)) {
                p.push(format!("fs.search odd returns the path {m:?}, which names no file (a lossy name?)"));
            }
        }
    }
    if tokens.is_empty() {
        return Outcome::Skip("neither fs.list nor fs.search is granted".into());
    }
    let t = tokens.iter().find(|t| *t != "result:ok").cloned().unwrap_or_else(|| "result:ok".into());
    Outcome::with(t, p)
}

/// A search of `mixed/` recurses into `mixed/sub/`: matches only in its UTF-8 files without
/// NUL, in bytewise path order, never through a symlink, never blocked by a FIFO or a socket.
fn search_mixed(c: &mut Ctx<'_>) -> Outcome {
    let r = tryo!(c.one(req::search("mixed", "needle").max_results(1000)));
    let Some(d) = data(&r) else { return Outcome::token(token(&r)) };
    let mut want = Vec::new();
    for p in ["mixed/plain.txt", "mixed/sub/deep.txt", "mixed/\u{e9}t\u{e9}.txt"] {
        want.extend(literal_matches(p, &String::from_utf8(read_root(c, p)).unwrap_or_default(), "needle"));
    }
    let mut p = Vec::new();
    if d["matches"] != Value::Array(want.clone()) {
        let show = |v: &[Value]| {
            v.iter()
                .map(|m| format!("{}:{}:{}", m["path"].as_str().unwrap_or("?"), m["line"], m["column"]))
                .collect::<Vec<_>>()
                .join(" ")
        };
        p.push(format!("matches [{}], want [{}]", show(&matches(&r)), show(&want)));
    }
    Outcome::with("result:ok", p)
}

/// The empty file reads as empty content with `eof:true` and stats as a file of size 0; the
/// empty directory lists no entry.
fn empty_entries(c: &mut Ctx<'_>) -> Outcome {
    let mut conn = tryo!(c.bound());
    let mut p = Vec::new();
    let checks: [(Call, &[(&str, Value)]); 3] = [
        (req::read("mixed/empty.txt"), &[("/content", json!("")), ("/bytesRead", json!(0)), ("/eof", json!(true))]),
        (req::stat("mixed/empty.txt"), &[("/type", json!("file")), ("/size", json!(0))]),
        (req::list("mixed/emptydir"), &[("/entries", json!([])), ("/truncated", json!(false))]),
    ];
    for (call, want) in checks {
        let what = format!("{} {}", call.op(), call.payload()["path"]);
        let r = c.call(&mut conn, call);
        match ok_with(&r, want) {
            Outcome::Observed { token, problems } if token == "result:ok" => {
                p.extend(problems.into_iter().map(|x| format!("{what}: {x}")))
            }
            o => return o,
        }
    }
    Outcome::with("result:ok", p)
}

/// A socket is never a file: fs.stat and fs.read of it are `unsupported_file_type`.
fn socket_unsupported(c: &mut Ctx<'_>) -> Outcome {
    if !c.fixture.socket {
        return Outcome::Skip("no socket could be made in the root".into());
    }
    let mut conn = tryo!(c.bound());
    let s = c.call(&mut conn, req::stat("mixed/sock"));
    let r = c.call(&mut conn, req::read("mixed/sock"));
    let p = if token(&r) != token(&s) { vec![format!("fs.read of the socket answered {}", token(&r))] } else { vec![] };
    Outcome::with(token(&s), p)
}

// ---------------------------------------------------------------- fs.write

fn write_create(c: &mut Ctx<'_>) -> Outcome {
    c.allow(&["new.txt"]);
    let r = tryo!(c.one(req::write("new.txt", "fresh €\n")));
    let o = ok_with(
        &r,
        &[("/created", json!(true)), ("/bytesWritten", json!(10)), ("/digest", json!(sha("fresh €\n".as_bytes())))],
    );
    on_disk(o, c, "new.txt", "fresh €\n")
}
fn on_disk(o: Outcome, c: &Ctx<'_>, p: &str, want: &str) -> Outcome {
    match o {
        Outcome::Observed { token, mut problems } if token == "result:ok" => {
            if read_root(c, p) != want.as_bytes() {
                problems.push(format!("{p} does not hold the written content"));
            }
            Outcome::Observed { token, problems }
        }
        o => o,
    }
}
fn write_overwrite(c: &mut Ctx<'_>) -> Outcome {
    c.allow(&["hello.txt"]);
    let r = tryo!(c.one(req::write("hello.txt", "replaced")));
    on_disk(ok_with(&r, &[("/created", json!(false)), ("/bytesWritten", json!(8))]), c, "hello.txt", "replaced")
}
fn write_empty_content(c: &mut Ctx<'_>) -> Outcome {
    c.allow(&["hello.txt"]);
    let r = tryo!(c.one(req::write("hello.txt", "")));
    on_disk(ok_with(&r, &[("/bytesWritten", json!(0)), ("/digest", json!(sha(b"")))]), c, "hello.txt", "")
}
fn write_create_false(c: &mut Ctx<'_>) -> Outcome {
    tok(c.one(req::write("absent.txt", "x").create(false)))
}
fn write_overwrite_false(c: &mut Ctx<'_>) -> Outcome {
    tok(c.one(req::write("hello.txt", "x").overwrite(false)))
}
/// PC-5.3.write, the other side of `create:false`: it refuses only a *missing* file; an
/// existing one is replaced (`created:false`).
fn write_create_false_existing(c: &mut Ctx<'_>) -> Outcome {
    c.allow(&["hello.txt"]);
    let r = tryo!(c.one(req::write("hello.txt", "replaced under create:false").create(false)));
    on_disk(ok_with(&r, &[("/created", json!(false))]), c, "hello.txt", "replaced under create:false")
}
/// PC-5.3.write, the other side of `overwrite:false`: it refuses only an *existing* file; a
/// missing one is created (`created:true`).
fn write_overwrite_false_new(c: &mut Ctx<'_>) -> Outcome {
    c.allow(&["fresh-no-overwrite.txt"]);
    let r = tryo!(c.one(req::write("fresh-no-overwrite.txt", "new under overwrite:false").overwrite(false)));
    on_disk(ok_with(&r, &[("/created", json!(true))]), c, "fresh-no-overwrite.txt", "new under overwrite:false")
}
fn write_missing_parent(c: &mut Ctx<'_>) -> Outcome {
    tok(c.one(req::write("nodir/x.txt", "x")))
}
fn write_onto_directory(c: &mut Ctx<'_>) -> Outcome {
    tok(c.one(req::write("dir", "x")))
}
fn write_digest_match(c: &mut Ctx<'_>) -> Outcome {
    c.allow(&["hello.txt"]);
    let d = sha(b"hello world\n");
    let r = tryo!(c.one(req::write("hello.txt", "v2").expected_digest(&d)));
    on_disk(ok_with(&r, &[("/created", json!(false))]), c, "hello.txt", "v2")
}
fn write_digest_mismatch(c: &mut Ctx<'_>) -> Outcome {
    let d = sha(b"some other version");
    tok(c.one(req::write("hello.txt", "v2").expected_digest(&d)))
}
fn write_digest_missing_file(c: &mut Ctx<'_>) -> Outcome {
    let d = sha(b"hello world\n");
    tok(c.one(req::write("absent.txt", "v2").expected_digest(&d)))
}
/// Rounds of [`write_digest_race`].
const DIGEST_RACE_ROUNDS: usize = 8;

/// PC-5.3.write: `expectedDigest` is checked atomically with the mutation. Writes pipelined
/// under the same digest race for one file: whatever order the adapter runs them in, exactly
/// one finds the digest it names and the others `digest_mismatch`, and the file holds the
/// winner's content. An adapter that compares, then writes without holding the file, lets
/// several succeed whenever they overlap; the case runs several rounds to meet that window.
fn write_digest_race(c: &mut Ctx<'_>) -> Outcome {
    let l = c.target.admitted.limits();
    let n = (l.max_concurrent_requests.get() as usize + l.max_queued_requests.max(0) as usize).min(4);
    if n < 2 {
        return Outcome::Skip("the grant admits fewer than two requests at once: nothing can race".into());
    }
    c.allow(&["race.txt"]);
    let path = c.target.root.join("race.txt");
    let mut conn = tryo!(c.bound());
    let mut problems = Vec::new();
    for round in 0..DIGEST_RACE_ROUNDS {
        let base = format!("round {round} before the race\n");
        if let Err(e) = std::fs::write(&path, &base) {
            return Outcome::Error(format!("cannot lay race.txt: {e}"));
        }
        let d = sha(base.as_bytes());
        let mut sent = Vec::new();
        let mut frames = Vec::new();
        for k in 0..n {
            let (id, key) = c.ids();
            let content = format!("round {round}, writer {k}\n");
            frames.push(c.invoke(&id, &key, req::write("race.txt", &content).expected_digest(&d)));
            sent.push((id, content));
        }
        conn.send_all(&frames);
        let mut winners = Vec::new();
        for (id, content) in &sent {
            let r = conn.recv_for(id);
            match token(&r).as_str() {
                "result:ok" => winners.push(content.clone()),
                "error:digest_mismatch" => {}
                other => return Outcome::with(other, problems),
            }
        }
        let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
        if winners.len() != 1 {
            problems.push(format!(
                "round {}: {} of {n} writes under the same expectedDigest succeeded (want exactly one; the \
                 others digest_mismatch): the digest was not checked atomically with the write",
                round + 1,
                winners.len()
            ));
            break;
        }
        if on_disk != winners[0] {
            problems.push(format!(
                "round {}: the file holds {on_disk:?}, not the content of the one write that succeeded ({:?})",
                round + 1,
                winners[0]
            ));
            break;
        }
    }
    Outcome::with("result:ok", problems)
}

fn write_keeps_mode(c: &mut Ctx<'_>) -> Outcome {
    use std::os::unix::fs::PermissionsExt;
    c.allow(&["dir/b.txt"]);
    let p = c.target.root.join("dir/b.txt");
    let _ = std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o640));
    let r = tryo!(c.one(req::write("dir/b.txt", "kept")));
    let mode = std::fs::metadata(&p).map(|m| m.permissions().mode() & 0o777).unwrap_or(0);
    match ok_with(&r, &[("/created", json!(false))]) {
        Outcome::Observed { token, mut problems } => {
            if token == "result:ok" && mode != 0o640 {
                problems.push(format!("mode changed from 640 to {mode:o}"));
            }
            Outcome::Observed { token, problems }
        }
        o => o,
    }
}
fn write_through_symlink(c: &mut Ctx<'_>) -> Outcome {
    tok(c.one(req::write("links/out.txt", "overwritten")))
}
fn write_through_symlink_dir(c: &mut Ctx<'_>) -> Outcome {
    tok(c.one(req::write("links/outdir/planted.txt", "x")))
}

/// PC-5.3.write: an overwrite is atomic. A large file is replaced while reads of the whole
/// file run beside the write on the same connection; each read returns the old or the new
/// content whole (a torn file shows as a shorter or mixed content, or an early `eof`). The
/// size is as large as the bound limits let one line carry (at most 4 MiB).
fn write_atomic_overwrite(c: &mut Ctx<'_>) -> Outcome {
    let l = *c.target.admitted.limits();
    let len = (l.max_request_bytes.min(l.max_response_bytes) as usize).min(MAX_CONTENT).saturating_sub(4096);
    if len < 64 * 1024 {
        return Outcome::Skip("maxRequestBytes/maxResponseBytes are too small for a large overwrite".into());
    }
    if l.max_concurrent_requests.get() < 2 {
        return Outcome::Skip("maxConcurrentRequests 1: no read can run beside the write".into());
    }
    let make = |tag: &str| {
        let mut b = Vec::with_capacity(len + 32);
        let mut i = 0u64;
        while b.len() < len {
            b.extend_from_slice(format!("{tag} {i:08}; ").as_bytes()); // nothing JSON escapes
            i += 1;
        }
        b.truncate(len);
        String::from_utf8(b).unwrap_or_default()
    };
    let (old, new) = (make("old line"), make("NEW LINE"));
    c.allow(&["atomic.txt"]);
    if std::fs::write(c.target.root.join("atomic.txt"), &old).is_err() {
        return Outcome::Error("cannot lay atomic.txt".into());
    }
    let mut conn = tryo!(c.bound());
    let in_flight = (l.max_concurrent_requests.get() as usize - 1).min(3);
    let read = |c: &mut Ctx<'_>, conn: &mut super::conn::Conn| {
        let (id, key) = c.ids();
        conn.send(&c.invoke(&id, &key, req::read("atomic.txt").max_bytes(MAX_CONTENT as u64)));
        id
    };
    // The write goes first: while its long line is being sent the adapter must not be busy
    // sending us read results we do not read yet (each side would wait for the other).
    let (wid, wkey) = c.ids();
    conn.send(&c.invoke(&wid, &wkey, req::write("atomic.txt", &new)));
    let mut queue: std::collections::VecDeque<String> = (0..in_flight).map(|_| read(c, &mut conn)).collect();
    let mut problems = Vec::new();
    let (mut seen_old, mut seen_new) = (0, 0);
    for i in 0..48 {
        let Some(id) = queue.pop_front() else { break };
        let r = conn.recv_for(&id);
        let Some(d) = data(&r) else { return Outcome::with(format!("read-{}", token(&r)), problems) };
        let content = d["content"].as_str().unwrap_or_default();
        let whole = d["eof"] == true && d["bytesRead"] == len;
        match content {
            x if x == old && whole => seen_old += 1,
            x if x == new && whole => seen_new += 1,
            x => {
                problems.push(format!(
                    "read {i}: {} bytes (bytesRead {}, eof {}) that are neither the old nor the new content whole: a torn file",
                    x.len(),
                    d["bytesRead"],
                    d["eof"]
                ));
                break;
            }
        }
        if i + in_flight < 48 {
            queue.push_back(read(c, &mut conn));
        }
    }
    for id in queue {
        conn.recv_for(&id);
    }
    let w = conn.recv_for(&wid);
    if data(&w).is_none() {
        return Outcome::with(format!("write-{}", token(&w)), problems);
    }
    if read_root(c, "atomic.txt") != new.as_bytes() {
        problems.push("after the write the file does not hold the new content".into());
    }
    conn.note(&format!("reads saw the old content {seen_old} times, the new {seen_new} times"));
    Outcome::with("result:ok", problems)
}

// ---------------------------------------------------------------- fs.edit

fn edit_sequential(c: &mut Ctx<'_>) -> Outcome {
    c.allow(&["edit.txt"]);
    let edits = [("unique line", "foo once"), ("foo once", "done")];
    let r = tryo!(c.one(req::edit("edit.txt", &edits)));
    let want = "foo bar foo\ndone\naaa\n";
    on_disk(ok_with(&r, &[("/replacements", json!(2)), ("/digest", json!(sha(want.as_bytes())))]), c, "edit.txt", want)
}
/// PC-5.3.edit is "atomic like fs.write", and PC-5.3.write keeps an existing file's permission
/// bits: an edit (always of an existing file) keeps them too, even when it replaces the file
/// through a temporary one.
fn edit_keeps_mode(c: &mut Ctx<'_>) -> Outcome {
    use std::os::unix::fs::PermissionsExt;
    c.allow(&["edit.txt"]);
    let p = c.target.root.join("edit.txt");
    let _ = std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o640));
    let r = tryo!(c.one(req::edit("edit.txt", &[("unique line", "kept mode")])));
    let mode = std::fs::metadata(&p).map(|m| m.permissions().mode() & 0o777).unwrap_or(0);
    match ok_with(&r, &[("/replacements", json!(1))]) {
        Outcome::Observed { token, mut problems } => {
            if token == "result:ok" && mode != 0o640 {
                problems.push(format!("the edit changed the file's mode from 640 to {mode:o}"));
            }
            Outcome::Observed { token, problems }
        }
        o => o,
    }
}
/// PC-5.3.edit: an edit applies whatever its texts' lengths. Its `newText` is over seven times
/// the whole file, so an adapter that sizes the edited text by the file (or refuses growth
/// beyond it) is caught: the result must be `ok`, with the replacement, digest and content on
/// disk of the grown text.
fn edit_grows_file(c: &mut Ctx<'_>) -> Outcome {
    c.allow(&["edit.txt"]);
    let grown = "grown ".repeat(40);
    let r = tryo!(c.one(req::edit("edit.txt", &[("aaa", grown.as_str())])));
    let want = format!("foo bar foo\nunique line\n{grown}\n");
    on_disk(ok_with(&r, &[("/replacements", json!(1)), ("/digest", json!(sha(want.as_bytes())))]), c, "edit.txt", &want)
}
/// PC-5.3.edit, SHOULD: an edit is not limited to small files. The runner lays a file of
/// 1.55 MiB (49,152 numbered lines of 33 bytes) and edits one line 1.29 MiB in, past every
/// power-of-two read size up to 1 MiB: the edit applies, with `replacements` 1, the digest of
/// the result and the result on disk. The reference edits files up to 64 MiB (a DECISION for
/// it, PC-5.3.edit); another adapter may bound the size it loads, so a refusal here (an
/// `invalid_request` "too large" or an `io_error`) is a warning, not a failure. The file is
/// removed at the end.
fn edit_large_file(c: &mut Ctx<'_>) -> Outcome {
    if !c.target.admitted.grants(ToolOperation::FsEdit) {
        return Outcome::Skip("the descriptor does not grant fs.edit".into());
    }
    let name = "large-edit.txt";
    c.allow(&[name]);
    let line = |i: usize| format!("line {i:07} of the large edit..\n");
    let body: String = (0..49_152).map(line).collect();
    if std::fs::write(c.target.root.join(name), &body).is_err() {
        return Outcome::Error("cannot lay the file of the case".into());
    }
    let (old, new) = ("line 0040960 of", "LINE 0040960 edited, of");
    let want = body.replacen(old, new, 1);
    let r = c.one(req::edit(name, &[(old, new)]));
    let out = match r {
        Ok(r) => on_disk(
            ok_with(&r, &[("/replacements", json!(1)), ("/digest", json!(sha(want.as_bytes())))]),
            c,
            name,
            &want,
        ),
        Err(o) => o,
    };
    let _ = std::fs::remove_file(c.target.root.join(name));
    out
}
/// PC-5.3.edit and SPEC 7.4 (a bound holds by a typed, immediate refusal, never a stall):
/// what an edit holds is given back when it ends. The runner lays a sparse file of 48 MiB of
/// zero bytes (valid UTF-8, a few KiB on disk) and sends three edits of it in turn, each with
/// an `oldText` found nowhere: each must be answered within a step (`edit_not_found`, nothing
/// written). Together they load 144 MiB, more than the 128 MiB the reference lets all edits
/// hold at once (PC-5.3.edit), so an adapter that never gives an edit's memory back stalls the
/// third, and every edit after it, for ever. An adapter that does not edit a file this large
/// (a first answer `invalid_request`) is not tested here (skip). The file is removed at the end.
fn edit_memory_given_back(c: &mut Ctx<'_>) -> Outcome {
    if !c.target.admitted.grants(ToolOperation::FsEdit) {
        return Outcome::Skip("the descriptor does not grant fs.edit".into());
    }
    let name = "sparse-edit.bin";
    c.allow(&[name]);
    let laid = std::fs::File::create(c.target.root.join(name)).and_then(|f| f.set_len(48 << 20));
    if laid.is_err() {
        let _ = std::fs::remove_file(c.target.root.join(name));
        return Outcome::Error("cannot lay the file of the case".into());
    }
    let out = edit_memory_cells(c, name);
    let _ = std::fs::remove_file(c.target.root.join(name));
    out
}
fn edit_memory_cells(c: &mut Ctx<'_>, name: &str) -> Outcome {
    let not_found = format!("error:{}", AdapterCode::EditNotFound.as_str());
    let mut conn = tryo!(c.bound());
    for n in 1..=3 {
        let r = c.call(&mut conn, req::edit(name, &[("pi-conform-absent-text", "x")]));
        let t = token(&r);
        if n == 1 && t == format!("error:{}", AdapterCode::InvalidRequest.as_str()) {
            return Outcome::Skip("the adapter does not edit a 48 MiB file (invalid_request)".into());
        }
        if t != not_found {
            let why = match r {
                Recv::Timeout => format!(
                    "edit {n} of three, each of a 48 MiB file and found nowhere, got no answer within a step: what the \
                     earlier edits held was never given back, so this edit and every later one waits for ever"
                ),
                _ => format!("edit {n} of three of a 48 MiB file, with an oldText found nowhere, was answered `{t}`"),
            };
            return Outcome::with(t, vec![why]);
        }
    }
    if read_root(c, name).iter().any(|b| *b != 0) || read_root(c, name).len() != 48 << 20 {
        return Outcome::with(not_found, vec![format!("{name} was changed by edits that found nothing")]);
    }
    Outcome::token(not_found)
}
fn edit_not_found(c: &mut Ctx<'_>) -> Outcome {
    tok(c.one(req::edit("edit.txt", &[("absent", "x")])))
}
fn edit_ambiguous(c: &mut Ctx<'_>) -> Outcome {
    tok(c.one(req::edit("edit.txt", &[("foo", "x")])))
}
/// PC-5.3.errors: error messages are content-free. The runner lays a file whose every line
/// holds a random marker (and, for not_utf8, a copy with a byte FF after the first line), then
/// asks an fs.edit whose oldText occurs twice (`edit_ambiguous`), one whose oldText does not
/// occur (`edit_not_found`) and an edit of the non-UTF-8 copy (`not_utf8`). No message may hold
/// any 12 characters of the marker, which no request carries: only the file does. An answer
/// other than the code provoked is that answer's token (the failure codes are PC-5.3.edit's
/// own cases; a retryable refusal stores nothing: inconclusive). The files are removed at the
/// end, so the oracle sees the tree it laid.
fn edit_content_free_messages(c: &mut Ctx<'_>) -> Outcome {
    if !c.target.admitted.grants(ToolOperation::FsEdit) {
        return Outcome::Skip("the descriptor does not grant fs.edit".into());
    }
    let (text, bin) = ("content-free.txt", "content-free-bin.txt");
    let out = edit_content_free_cells(c, text, bin);
    let _ = std::fs::remove_file(c.target.root.join(text));
    let _ = std::fs::remove_file(c.target.root.join(bin));
    out
}
fn edit_content_free_cells(c: &mut Ctx<'_>, text: &str, bin: &str) -> Outcome {
    let marker = uuid::Uuid::new_v4().simple().to_string();
    let body = format!("{marker} one\nrepeated {marker}\n{marker} two\nrepeated {marker}\n{marker} end\n");
    let mut bad = format!("{marker} one\n").into_bytes();
    bad.extend_from_slice(b"\xff ");
    bad.extend_from_slice(body.as_bytes());
    let lay = |c: &Ctx<'_>, f: &str, b: &[u8]| std::fs::write(c.target.root.join(f), b);
    if lay(c, text, body.as_bytes()).is_err() || lay(c, bin, &bad).is_err() {
        return Outcome::Error("cannot lay the files of the case".into());
    }
    let code = |a: AdapterCode| format!("error:{}", a.as_str());
    let cells = [
        (req::edit(text, &[("repeated", "x")]), code(AdapterCode::EditAmbiguous)),
        (req::edit(text, &[("zq-not-in-the-file", "x")]), code(AdapterCode::EditNotFound)),
        (req::edit(bin, &[("one", "x")]), code(AdapterCode::NotUtf8)),
    ];
    let windows: Vec<&str> = (0..=marker.len() - 12).map(|i| &marker[i..i + 12]).collect();
    let mut conn = tryo!(c.bound());
    let mut p = Vec::new();
    for (call, want) in cells {
        let what = format!("{} of {}", call.op(), call.payload()["path"].as_str().unwrap_or("?"));
        let r = c.call(&mut conn, call);
        let t = token(&r);
        let Some(v) = r.frame() else { return Outcome::with(t, vec![format!("no answer to the {what}")]) };
        if t != want {
            if v.error_code().and_then(AdapterCode::from_wire).is_some_and(|c| c.retryable()) {
                return Outcome::Error(format!(
                    "inconclusive: the {what} answered `{t}` (retryable), not the {want} it provokes, so no message \
                     about the file was seen"
                ));
            }
            return Outcome::with(t.clone(), vec![format!("the {what} answered `{t}`, not the {want} it provokes")]);
        }
        let msg = v.error_message().unwrap_or_default();
        if windows.iter().any(|w| msg.contains(w)) {
            p.push(format!(
                "the {want} message of the {what} quotes the file (it holds part of a marker only the file \
                 carries): messages are content-free, no file content"
            ));
        }
    }
    Outcome::with(if p.is_empty() { "content-free" } else { "content-in-message" }, p)
}
fn edit_overlapping(c: &mut Ctx<'_>) -> Outcome {
    tok(c.one(req::edit("edit.txt", &[("aa", "b")])))
}
fn edit_all_or_nothing(c: &mut Ctx<'_>) -> Outcome {
    let edits = [("unique line", "changed"), ("absent", "x")];
    tok(c.one(req::edit("edit.txt", &edits)))
}
fn edit_not_utf8(c: &mut Ctx<'_>) -> Outcome {
    tok(c.one(req::edit("latin1.txt", &[("needle", "x")])))
}
/// PC-5.3 (digest), the accepting side for fs.edit: `expectedDigest` equal to the current
/// file's SHA-256 lets the edit run.
fn edit_digest_match(c: &mut Ctx<'_>) -> Outcome {
    c.allow(&["edit.txt"]);
    let before = read_root(c, "edit.txt");
    let want = String::from_utf8_lossy(&before).replace("unique line", "digest matched");
    let r = tryo!(c.one(req::edit("edit.txt", &[("unique line", "digest matched")]).expected_digest(&sha(&before))));
    on_disk(ok_with(&r, &[("/replacements", json!(1)), ("/digest", json!(sha(want.as_bytes())))]), c, "edit.txt", &want)
}
fn edit_digest_mismatch(c: &mut Ctx<'_>) -> Outcome {
    let edits = [("unique line", "x")];
    tok(c.one(req::edit("edit.txt", &edits).expected_digest(&sha(b"other"))))
}

// ---------------------------------------------------------------- confinement

fn confine_symlink_first(c: &mut Ctx<'_>) -> Outcome {
    tok(c.one(req::read("links/outdir/secret.txt")))
}
fn confine_symlink_middle(c: &mut Ctx<'_>) -> Outcome {
    tok(c.one(req::read("links/indir/a.txt")))
}
fn confine_list_through_symlink(c: &mut Ctx<'_>) -> Outcome {
    tok(c.one(req::list("links/outdir")))
}
fn confine_swap_race(c: &mut Ctx<'_>) -> Outcome {
    // A directory swapped for a symlink to the sentinel while searches and reads run: nothing
    // of the sentinel may ever come back.
    let root = c.target.root.clone();
    let sentinel = c.fixture.sentinel.clone();
    let _ = std::fs::create_dir_all(root.join("swap/d"));
    let _ = std::fs::write(root.join("swap/d/secret.txt"), "inside");
    c.allow(&["swap", "swap/d", "swap/d/secret.txt", "swap/d.real", "swap/d.real/secret.txt"]);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s2 = stop.clone();
    let swapper = std::thread::spawn(move || {
        let d = root.join("swap/d");
        let real = root.join("swap/d.real");
        while !s2.load(std::sync::atomic::Ordering::Relaxed) {
            let _ = std::fs::rename(&d, &real);
            let _ = std::os::unix::fs::symlink(&sentinel, &d);
            std::thread::yield_now();
            let _ = std::fs::remove_file(&d);
            let _ = std::fs::rename(&real, &d);
        }
    });
    let mut conn = match c.bound() {
        Ok(x) => x,
        Err(o) => {
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            let _ = swapper.join();
            return o;
        }
    };
    let mut problems = Vec::new();
    let mut last = String::from("result:ok");
    // The provoked state is confirmed: at least 150 calls, and on until a read met the
    // directory while it was the symlink (`symlink_refused`), within 8 s or 5000 calls; never
    // meeting it is inconclusive, not a pass. An adapter that follows the link leaks the
    // sentinel the first time it meets it.
    let (mut swapped, mut i) = (0usize, 0usize);
    let deadline = Instant::now() + Duration::from_secs(8);
    while i < 150 || (swapped == 0 && i < 5000 && Instant::now() < deadline) {
        let call = if i % 2 == 0 { req::search("swap", "SENTINEL") } else { req::read("swap/d/secret.txt") };
        let r = c.call(&mut conn, call);
        if let Some(v) = r.frame() {
            if v.to_string().contains("SENTINEL") {
                problems.push(format!("iteration {i}: the sentinel's content came back through the swapped directory"));
                break;
            }
            if v.error_code() == Some(AdapterCode::SymlinkRefused.as_str()) {
                swapped += 1;
            }
        } else {
            last = token(&r);
            break;
        }
        i += 1;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = swapper.join();
    if problems.is_empty() && last == "result:ok" && swapped == 0 {
        return Outcome::Error(format!(
            "inconclusive: in {i} calls no read met the directory while it was swapped for a symlink \
             (no symlink_refused), so the race was never provoked"
        ));
    }
    Outcome::with(last, problems)
}

// ---------------------------------------------------------------- limits

/// The number of entries (fs.list) or matches (fs.search) in a result's data: typed, or read
/// raw from a frame the contract refused (its judge has already failed the case).
fn items(v: &Peer) -> Option<usize> {
    match v.adapter() {
        Some(AdapterFrame::ResultFsList(r)) => Some(r.data.entries.len()),
        Some(AdapterFrame::ResultFsSearch(r)) => Some(r.data.matches.len()),
        Some(_) => None,
        None => v["data"]["entries"].as_array().or_else(|| v["data"]["matches"].as_array()).map(Vec::len),
    }
}

fn limits_response_budget(c: &mut Ctx<'_>) -> Outcome {
    let calls = [req::read("big.txt"), req::list("."), req::search(".", "line")];
    // What the list and the search hold without the small budget: a result cut by the budget
    // has fewer items and must say `truncated:true`; one that fits whole need not (PC-5.3).
    let mut full = Vec::new();
    {
        let mut conn = tryo!(c.bound());
        for call in &calls {
            full.push(c.call(&mut conn, call.clone()).frame().and_then(items));
        }
    }
    let mut b = c.bind_frame();
    b["limits"]["maxResponseBytes"] = json!(1024);
    let mut conn = tryo!(c.bind_with(&b));
    let mut problems = Vec::new();
    let mut last = String::from("result:ok");
    for (call, whole) in calls.into_iter().zip(full) {
        let op = call.op().to_string();
        let r = c.call(&mut conn, call);
        match &r {
            Recv::Frame(_, raw) if raw.len() + 1 > 1024 => {
                // The judge also refuses it (PC-4.5); the token says what differed.
                last = format!("{op}:line-of-{}-bytes-over-1024", raw.len() + 1);
                break;
            }
            Recv::Frame(v, _) => {
                let cut = matches!((items(v), whole), (Some(got), Some(all)) if got < all);
                if v.ok() == Some(true) && cut && v["data"]["truncated"] != true {
                    problems.push(format!(
                        "PC-5.3: {op} returned {} of {} items within the 1024-byte budget but did not set \
                         truncated:true; a result the budget cut must say so",
                        items(v).unwrap_or(0),
                        whole.unwrap_or(0)
                    ));
                }
            }
            other => {
                last = token(other);
                break;
            }
        }
    }
    Outcome::with(last, problems)
}
fn burst(c: &mut Ctx<'_>, concurrent: u64, queued: u64, n: usize) -> Result<Vec<Recv>, Outcome> {
    let mut b = c.bind_frame();
    b["limits"]["maxConcurrentRequests"] = json!(concurrent);
    b["limits"]["maxQueuedRequests"] = json!(queued);
    let mut conn = c.bind_with(&b)?;
    let mut ids = Vec::new();
    let mut bytes = Vec::new();
    for _ in 0..n {
        let (id, key) = c.ids();
        let f = c.invoke(&id, &key, req::search("big.txt", "zzzz-not-there"));
        bytes.extend(serde_json::to_vec(&f).unwrap_or_default());
        bytes.push(b'\n');
        ids.push(id);
    }
    conn.send_raw(&bytes);
    Ok(ids.iter().map(|id| conn.recv_for(id)).collect())
}
/// PC-4.5: with `maxConcurrentRequests` c and `maxQueuedRequests` q (at most 2 each, within
/// the grant), c + q slow searches are admitted and the next invoke is refused `busy`. The
/// state is confirmed by an abort probe sent behind the extra invoke and answered before the
/// first search's result: the adapter read the extra invoke while every slot and queue place
/// was taken.
/// What the extra write of [`limits_busy`] writes.
const BUSY_RETRY_CONTENT: &str = "written by the retry of a write refused busy\n";

/// After the extra write was refused `busy` (retryable): it left no side effect, and once the
/// searches before it are all answered, the same write under the same idempotency key runs
/// (SPEC §4.4: a retry of the same semantic request keeps its key). A refusal that left the
/// key recorded as in flight makes the retry wait for a request that never runs.
fn busy_retry(c: &mut Ctx<'_>, conn: &mut super::conn::Conn, xid: &str, xkey: &str, file: &str) -> Outcome {
    let mut p = Vec::new();
    if c.target.root.join(file).exists() {
        p.push(format!("{xid} was refused busy, yet its write happened: a refused request leaves no side effect"));
    }
    let (rid, _) = c.ids();
    conn.note(&format!("every search answered: {rid} retries the refused write under its key {xkey}"));
    conn.send(&c.invoke(&rid, xkey, req::write(file, BUSY_RETRY_CONTENT)));
    let r = conn.recv_for(&rid);
    match r.frame() {
        Some(v) if v.ok() == Some(true) => {
            if read_root(c, file) != BUSY_RETRY_CONTENT.as_bytes() {
                p.push(format!("the retry {rid} answered ok but {file} does not hold what it wrote"));
            }
        }
        Some(v) if v.error_code() == Some(AdapterCode::Busy.as_str()) => p.push(format!(
            "PC-4.5: the retry {rid} of the busy-refused write was refused busy again with nothing else in flight \
             (every earlier request answered): within maxConcurrentRequests a request runs, and a busy refusal is \
             not an outcome to replay under its key"
        )),
        Some(v) => p.push(format!(
            "the retry {rid} of the busy-refused write under its key {xkey} was answered {}: a refusal must leave \
             no trace of the key, so the retry runs",
            v.error_code().unwrap_or("?")
        )),
        None => p.push(format!(
            "the retry {rid} of the busy-refused write under its key {xkey} got no answer ({}): a refusal must leave \
             no trace of the key (the retry waited for a request that never ran)",
            token(&r)
        )),
    }
    Outcome::with("busy-seen", p)
}

fn limits_busy(c: &mut Ctx<'_>) -> Outcome {
    let l = *c.target.admitted.limits();
    busy_beyond(c, l.max_concurrent_requests.get().min(2), (l.max_queued_requests as u64).min(2))
}

/// [`limits_busy`] bound with `concurrent` slots and `queued` queue places.
pub(super) fn busy_beyond(c: &mut Ctx<'_>, concurrent: u64, queued: u64) -> Outcome {
    let can_write = c.target.admitted.grants(ToolOperation::FsWrite);
    let n = (concurrent + queued) as usize;
    provoke(c, "a full queue", |c, i| {
        let mut b = c.bind_frame();
        b["limits"]["maxConcurrentRequests"] = json!(concurrent);
        b["limits"]["maxQueuedRequests"] = json!(queued);
        let mut conn = match c.bind_with(&b) {
            Ok(x) => x,
            Err(o) => return Try::Done(o),
        };
        let blockers: Vec<(String, String)> = (0..n).map(|_| c.ids()).collect();
        let (xid, xkey) = c.ids();
        let probe = format!("probe-{}", i + 1);
        let mut frames: Vec<Value> = blockers.iter().map(|(id, k)| c.invoke(id, k, blocker())).collect();
        // The extra invoke is a write when the grant allows it, so that a refusal can be
        // retried under its key (below); a stat otherwise.
        let extra_file = format!("busy-retry-{}.txt", i + 1);
        let extra = can_write.then(|| req::write(&extra_file, BUSY_RETRY_CONTENT));
        if can_write {
            c.allow(&[&extra_file]);
        }
        frames.push(c.invoke(&xid, &xkey, extra.unwrap_or_else(|| req::stat("hello.txt"))));
        frames.push(c.abort(&probe, "never-sent-probe"));
        conn.note(&format!(
            "bound with maxConcurrentRequests {concurrent}, maxQueuedRequests {queued}: {n} slow searches fill \
             every slot and queue place, invoke {xid} is one past them, abort {probe} is the probe"
        ));
        let t0 = Instant::now();
        conn.send_all(&frames);
        let mut ids: Vec<String> = blockers.iter().map(|(id, _)| id.clone()).collect();
        ids.push(xid.clone());
        ids.push(probe.clone());
        let g = gather(&mut conn, t0, c.step() * 20, |g| ids.iter().all(|id| g.get(id).is_some()));
        if let Some(id) = ids.iter().find(|id| g.get(id).is_none()) {
            return Try::Done(Outcome::with(g.end_token(), vec![format!("no answer to {id}")]));
        }
        let first = blockers.iter().filter_map(|(id, _)| g.at(id)).min().unwrap_or_default();
        let probe_at = g.at(&probe).unwrap_or_default();
        let refused: Vec<&str> = blockers
            .iter()
            .filter(|(id, _)| g.get(id).is_some_and(|(_, v)| v.error_code() == Some(AdapterCode::Busy.as_str())))
            .map(|(id, _)| id.as_str())
            .collect();
        if !refused.is_empty() {
            return Try::Done(Outcome::with(
                "busy-early",
                vec![format!(
                    "{} of the first {n} invokes ({}) were refused busy: exactly maxConcurrentRequests + \
                     maxQueuedRequests = {concurrent} + {queued} must be admitted",
                    refused.len(),
                    refused.join(", ")
                )],
            ));
        }
        if let Some((id, v)) =
            blockers.iter().filter_map(|(id, _)| g.get(id).map(|(_, v)| (id, v))).find(|(_, v)| v.ok() != Some(true))
        {
            return Try::Done(Outcome::with(
                format!("blocker-{}", v.error_code().unwrap_or("?")),
                vec![format!("the search {id} of the haystack failed")],
            ));
        }
        let Some((_, x)) = g.get(&xid) else {
            return Try::Done(Outcome::Error("no answer to the extra invoke".into()));
        };
        if x.error_code() == Some(AdapterCode::Busy.as_str()) {
            conn.note(&format!("{xid} refused busy; the first search finished after {} ms", ms(first)));
            if !can_write {
                return Try::Done(Outcome::token("busy-seen"));
            }
            return Try::Done(busy_retry(c, &mut conn, &xid, &xkey, &extra_file));
        }
        if x.ok() != Some(true) {
            return Try::Done(Outcome::token(format!("error:{}", x.error_code().unwrap_or("?"))));
        }
        if probe_at < first {
            return Try::Done(Outcome::with(
                "no-busy",
                vec![format!(
                    "{xid} was admitted although the {n} searches before it were all in flight (the abort probe \
                     sent behind it was answered after {} ms, the first search only after {} ms): beyond \
                     maxConcurrentRequests + maxQueuedRequests an invoke must be refused busy",
                    ms(probe_at),
                    ms(first)
                )],
            ));
        }
        if first >= SERIAL_AFTER {
            return Try::Done(Outcome::with(
                "no-busy",
                vec![format!(
                    "{xid} was admitted, and nothing sent behind the {n} searches was answered before the first \
                     of them finished ({} ms): {READ_AS_THEY_ARRIVE}",
                    ms(first)
                )],
            ));
        }
        Try::NotReached(format!(
            "the first search finished after {} ms, before the probe behind the extra invoke was answered",
            ms(first)
        ))
    })
}
fn limits_never_busy_under_limit(c: &mut Ctx<'_>) -> Outcome {
    let l = *c.target.admitted.limits();
    let (concurrent, queued) = (l.max_concurrent_requests.get(), l.max_queued_requests as u64);
    let n = (concurrent + queued).min(16) as usize;
    let rs = tryo!(burst(c, concurrent, queued, n));
    let tokens: Vec<String> = rs.iter().map(token).collect();
    if tokens.iter().all(|t| t == "result:ok") {
        Outcome::token("all-ok")
    } else {
        Outcome::token(tokens.into_iter().find(|t| t != "result:ok").unwrap_or_default())
    }
}

/// How much earlier than the running request's result a request sent behind it may be
/// answered before [`limits_concurrency_held`] calls it run beside it: a correct adapter
/// frees the slot when its work ends and may still be writing that result when the next
/// one, started in the slot, answers.
const OVERTAKE_TOLERANCE: Duration = Duration::from_millis(100);

/// PC-4.5: at most maxConcurrentRequests execute; the next admitted request waits. Bound with
/// one slot and one queue place, the runner sends a slow search B with an abort probe behind
/// it, and once the probe is answered and B is not (B was admitted alone, the slot free: it
/// holds the slot), an fs.stat T with a second probe. The state is confirmed when the second
/// probe is answered before B's result (T was read while B held the slot); T's result must
/// then follow B's. T answered 100 ms or more before B's result ran beside it (a failure,
/// whatever the probes show: its answer proves it was read); `busy` for T is busy-early (the
/// queue place was free). T answered less than 100 ms before B's result, or the state never
/// confirmed: inconclusive, with a larger haystack next.
fn limits_concurrency_held(c: &mut Ctx<'_>) -> Outcome {
    if c.target.admitted.limits().max_queued_requests == 0 {
        return Outcome::Skip("the grant allows no queue (maxQueuedRequests 0): no request can wait".into());
    }
    if !c.target.admitted.grants(ToolOperation::FsStat) {
        return Outcome::Skip("the descriptor does not grant fs.stat, the quick request that must wait".into());
    }
    provoke(c, "a request waiting while another holds the only slot", |c, i| {
        let mut b = c.bind_frame();
        b["limits"]["maxConcurrentRequests"] = json!(1);
        b["limits"]["maxQueuedRequests"] = json!(1);
        let mut conn = match c.bind_with(&b) {
            Ok(x) => x,
            Err(o) => return Try::Done(o),
        };
        let (bid, bkey) = c.ids();
        let (tid, tkey) = c.ids();
        let (p1, p2) = (format!("probe-{}-a", i + 1), format!("probe-{}-b", i + 1));
        conn.note(&format!(
            "bound with one slot and one queue place: the search {bid} takes the slot, abort {p1} is the probe"
        ));
        let t0 = Instant::now();
        conn.send_all(&[c.invoke(&bid, &bkey, blocker()), c.abort(&p1, "never-sent-probe")]);
        let mut g = gather(&mut conn, t0, c.step() * 20, |g| g.get(&p1).is_some() || g.get(&bid).is_some());
        if let Some(b_at) = g.at(&bid) {
            if b_at >= SERIAL_AFTER && g.get(&p1).is_none() {
                return Try::Done(Outcome::Error(format!(
                    "inconclusive: the search ran {} ms and the probe sent with it was answered only after it, so \
                     no request could be sent while it ran ({READ_AS_THEY_ARRIVE}; adapter.limits.busy-beyond-queue \
                     judges that)",
                    ms(b_at)
                )));
            }
            return Try::NotReached(format!(
                "the search finished after {} ms, before the probe sent with it was answered",
                ms(b_at)
            ));
        }
        if g.get(&p1).is_none() {
            return Try::Done(Outcome::with(g.end_token(), vec![format!("no answer to the abort probe {p1}")]));
        }
        conn.note(&format!(
            "{p1} answered while {bid} runs: {tid} (an fs.stat) must wait for the slot; abort {p2} is the probe"
        ));
        let t1 = t0.elapsed();
        conn.send_all(&[c.invoke(&tid, &tkey, req::stat("hello.txt")), c.abort(&p2, "never-sent-probe")]);
        let all = [bid.clone(), tid.clone(), p2.clone()];
        keep_reading(&mut conn, t0, c.step() * 20, &mut g, |g| all.iter().all(|id| g.get(id).is_some()));
        if let Some(id) = all.iter().find(|id| g.get(id).is_none()) {
            return Try::Done(Outcome::with(g.end_token(), vec![format!("no answer to {id}")]));
        }
        let (Some((b_at, bv)), Some((t_at, tv)), Some(p_at)) = (g.get(&bid), g.get(&tid), g.at(&p2)) else {
            return Try::Done(Outcome::Error("an answer went missing".into()));
        };
        if tv.error_code() == Some(AdapterCode::Busy.as_str()) {
            if c.target.admitted.limits().max_idempotency_keys.get() < 2 {
                // With one key remembered, and that key in flight, busy may be the full key
                // cache's refusal (PC-4.5 DECISION), not the queue's.
                return Try::Done(Outcome::Error(format!(
                    "inconclusive: {tid} was refused busy while {bid} was in flight, which maxIdempotencyKeys 1 \
                     allows (the only key is in flight), so the queue was not tested"
                )));
            }
            return Try::Done(Outcome::with(
                "busy-early",
                vec![format!(
                    "{tid} was refused busy while only {bid} was in flight: with maxQueuedRequests 1 it must wait \
                     for the slot"
                )],
            ));
        }
        if bv.ok() != Some(true) {
            return Try::Done(Outcome::with(
                format!("blocker-{}", bv.error_code().unwrap_or("?")),
                vec![format!("the search {bid} of the haystack failed")],
            ));
        }
        if tv.ok() != Some(true) {
            return Try::Done(Outcome::token(format!("error:{}", tv.error_code().unwrap_or("?"))));
        }
        if t_at + OVERTAKE_TOLERANCE <= b_at {
            return Try::Done(Outcome::with(
                "ran-beside",
                vec![format!(
                    "{tid} was answered at {} ms, {} ms before the result of {bid} (at {} ms), which held the only \
                     slot (bound with maxConcurrentRequests 1): sent at {} ms, after {bid} was admitted alone with \
                     the slot free and the probe behind it answered, it must wait in the queue until {bid} ends; at \
                     most maxConcurrentRequests requests execute",
                    ms(t_at),
                    ms(b_at - t_at),
                    ms(b_at),
                    ms(t1)
                )],
            ));
        }
        if t_at < b_at {
            return Try::NotReached(format!(
                "{tid} was answered {} ms before the search's result: too close to tell a request run beside it \
                 from one started as the search ended",
                ms(b_at - t_at)
            ));
        }
        if p_at >= b_at {
            return Try::NotReached(format!(
                "the search finished after {} ms, before the probe sent behind {tid} was answered",
                ms(b_at)
            ));
        }
        Try::Done(Outcome::token("held"))
    })
}

// ---------------------------------------------------------------- limits met exactly

/// `maxEntries` equal to the number of entries: all of them, `truncated:false`; one less:
/// that many, `truncated:true` (PC-5.3.list).
///
/// The one-less listing is also made of [`PAIRS`] directories of two files each, with
/// `maxEntries: 1`: the file whose name sorts first, `truncated:true`. An adapter that stops
/// taking entries once it holds `maxEntries` of them and the next name sorts after them never
/// sees the entry that tells the listing was cut when the directory yields its smallest names
/// first. The order is the filesystem's (creation order, its reverse, or a hash of the name),
/// so each pair has its own names and half of them are created in each order: whatever the
/// order, some pair yields its first name first (with a hashed order, all `PAIRS` miss it
/// with a chance of 2^-16).
fn list_max_entries_exact(c: &mut Ctx<'_>) -> Outcome {
    let mut conn = tryo!(c.bound());
    let all = c.call(&mut conn, req::list("sorted"));
    let Some(n) = data(&all).and_then(|d| d["entries"].as_array()).map(Vec::len) else {
        return Outcome::token(token(&all));
    };
    let mut problems = Vec::new();
    for (max, truncated) in [(n, false), (n - 1, true)] {
        let r = c.call(&mut conn, req::list("sorted").max_entries(max as u64));
        let Some(d) = data(&r) else { return Outcome::with(token(&r), problems) };
        let got = d["entries"].as_array().map(Vec::len).unwrap_or(0);
        if got != max || d["truncated"] != truncated {
            problems.push(format!(
                "maxEntries {max} of {n} entries: {got} entries, truncated {}; want {max}, truncated {truncated}",
                d["truncated"]
            ));
        }
    }
    for i in 0..PAIRS {
        let dir = format!("pairs-{i:02}");
        let names = [format!("p{i:02}-first"), format!("p{i:02}-second")];
        let files = names.clone().map(|f| format!("{dir}/{f}"));
        c.allow(&[&dir, &files[0], &files[1]]);
        let order = if i % 2 == 0 { [0, 1] } else { [1, 0] };
        let laid = std::fs::create_dir(c.target.root.join(&dir))
            .and_then(|()| order.iter().try_for_each(|&k| std::fs::write(c.target.root.join(&files[k]), b"p")));
        if let Err(e) = laid {
            let _ = std::fs::remove_dir_all(c.target.root.join(&dir));
            return Outcome::Error(format!("cannot lay {dir}/: {e}"));
        }
        let r = c.call(&mut conn, req::list(&dir).max_entries(1));
        let _ = std::fs::remove_dir_all(c.target.root.join(&dir));
        let Some(d) = data(&r) else { return Outcome::with(token(&r), problems) };
        let got: Vec<&str> =
            d["entries"].as_array().map(|a| a.iter().filter_map(|e| e["name"].as_str()).collect()).unwrap_or_default();
        if got != [names[0].as_str()] || d["truncated"] != json!(true) {
            problems.push(format!(
                "maxEntries 1 of {dir}/, which holds the files {} and {} (created in that order): entries {got:?}, \
                 truncated {}; want [{:?}], truncated true",
                names[order[0]], names[order[1]], d["truncated"], names[0]
            ));
        }
    }
    Outcome::with("result:ok", problems)
}

/// Directories of two files [`list_max_entries_exact`] lists with `maxEntries: 1`.
const PAIRS: usize = 16;

/// Entries a default-limit case lays: the default `maxEntries` (PC-5.3.list), also the default
/// `maxResults` (PC-5.3.search).
const DEFAULT_LIMIT: usize = crate::contract::answer::DEFAULT_MAX_ENTRIES as usize;
const _: () = assert!(crate::contract::answer::DEFAULT_MAX_RESULTS as usize == DEFAULT_LIMIT);

/// Whether an answer of `n` items of about `each` bytes fits the bound response budget with
/// room to spare; a budget that would cut first decides `truncated` on its own, so the default
/// cannot be observed.
fn budget_fits(c: &Ctx<'_>, n: usize, each: usize) -> Result<(), Outcome> {
    let budget = c.target.admitted.limits().max_response_bytes as u64;
    let need = (n * each) as u64 * 2;
    if budget < need {
        return Err(Outcome::Skip(format!(
            "the response budget ({budget} bytes) would cut a listing of {n} items first, so the default limit \
             cannot be observed"
        )));
    }
    Ok(())
}

/// Without `maxEntries`, the default is 1000: a directory of exactly 1000 entries is listed
/// whole with `truncated:false`; with one more, 1000 entries and `truncated:true`
/// (PC-5.3.list: default `maxEntries` 1000).
fn list_default_max_entries(c: &mut Ctx<'_>) -> Outcome {
    tryo!(budget_fits(c, DEFAULT_LIMIT + 1, 96));
    let dir = c.target.root.join("many");
    let name = |i: usize| format!("many/m{i:04}.txt");
    for i in 0..=DEFAULT_LIMIT {
        c.allow(&[&name(i)]);
    }
    c.allow(&["many"]);
    let lay = |i: usize| std::fs::write(c.target.root.join(name(i)), b"m");
    if let Err(e) = std::fs::create_dir(&dir).and_then(|()| (0..DEFAULT_LIMIT).try_for_each(lay)) {
        return Outcome::Error(format!("cannot lay many/: {e}"));
    }
    let mut conn = tryo!(c.bound());
    let mut problems = Vec::new();
    for (n, truncated) in [(DEFAULT_LIMIT, false), (DEFAULT_LIMIT + 1, true)] {
        if n > DEFAULT_LIMIT {
            if let Err(e) = lay(DEFAULT_LIMIT) {
                return Outcome::Error(format!("cannot add to many/: {e}"));
            }
        }
        let r = c.call(&mut conn, req::list("many"));
        let Some(d) = data(&r) else { return Outcome::with(token(&r), problems) };
        let got = d["entries"].as_array().map(Vec::len).unwrap_or(0);
        if got != DEFAULT_LIMIT || d["truncated"] != truncated {
            problems.push(format!(
                "fs.list without maxEntries of a directory of {n} files: {got} entries, truncated {}; want \
                 {DEFAULT_LIMIT}, truncated {truncated} (the default maxEntries is {DEFAULT_LIMIT})",
                d["truncated"]
            ));
        }
    }
    Outcome::with("result:ok", problems)
}

/// Without `maxResults`, the default is 1000: a file of exactly 1000 matching lines gives them
/// all with `truncated:false`; with one more, 1000 matches and `truncated:true`
/// (PC-5.3.search: default `maxResults` 1000).
fn search_default_max_results(c: &mut Ctx<'_>) -> Outcome {
    tryo!(budget_fits(c, DEFAULT_LIMIT + 1, 96));
    let file = c.target.root.join("many-needles.txt");
    let lay = |n: usize| std::fs::write(&file, "a needle here\n".repeat(n));
    if let Err(e) = lay(DEFAULT_LIMIT) {
        return Outcome::Error(format!("cannot lay many-needles.txt: {e}"));
    }
    c.allow(&["many-needles.txt"]);
    let mut conn = tryo!(c.bound());
    let mut problems = Vec::new();
    for (n, truncated) in [(DEFAULT_LIMIT, false), (DEFAULT_LIMIT + 1, true)] {
        if let Err(e) = lay(n) {
            return Outcome::Error(format!("cannot lay many-needles.txt: {e}"));
        }
        let r = c.call(&mut conn, req::search("many-needles.txt", "needle"));
        let Some(d) = data(&r) else { return Outcome::with(token(&r), problems) };
        let got = d["matches"].as_array().map(Vec::len).unwrap_or(0);
        if got != DEFAULT_LIMIT || d["truncated"] != truncated {
            problems.push(format!(
                "fs.search without maxResults of a file with {n} matching lines: {got} matches, truncated {}; \
                 want {DEFAULT_LIMIT}, truncated {truncated} (the default maxResults is {DEFAULT_LIMIT})",
                d["truncated"]
            ));
        }
    }
    Outcome::with("result:ok", problems)
}

/// `maxResults` equal to the number of matches: all, `truncated:false`; one less: that many,
/// `truncated:true` (PC-5.3.search).
///
/// The one-less search is also made of a tree of [`DEEP_FILES`] files whose three matches
/// are all in the last one in path order, with `maxResults: 2`. An adapter that searches a
/// tree in batches of files and lets each file of a later batch collect only the matches
/// still room for (not one more) takes the last file's first two and never learns of its
/// third: `truncated:false`. The reference hands out its first 32 files together; the tree
/// is larger than any such first batch is likely to be.
fn search_max_results_exact(c: &mut Ctx<'_>) -> Outcome {
    let mut conn = tryo!(c.bound());
    let mut problems = Vec::new();
    // notes.md holds "needle" three times.
    for (max, truncated) in [(3u64, false), (2, true)] {
        let r = c.call(&mut conn, req::search("notes.md", "needle").max_results(max));
        let Some(d) = data(&r) else { return Outcome::with(token(&r), problems) };
        let got = d["matches"].as_array().map(Vec::len).unwrap_or(0);
        if got as u64 != max || d["truncated"] != truncated {
            problems.push(format!(
                "maxResults {max} of 3 matches: {got} matches, truncated {}; want {max}, truncated {truncated}",
                d["truncated"]
            ));
        }
    }
    let dir = "deep-tree";
    let files: Vec<String> = (0..DEEP_FILES).map(|i| format!("{dir}/f{i:03}.txt")).collect();
    c.allow(&[dir]);
    for f in &files {
        c.allow(&[f]);
    }
    let last = DEEP_FILES - 1;
    let laid = std::fs::create_dir(c.target.root.join(dir)).and_then(|()| {
        files.iter().enumerate().try_for_each(|(i, f)| {
            let text = if i == last { "needle one\nneedle two\nneedle three\n" } else { "nothing to find\n" };
            std::fs::write(c.target.root.join(f), text)
        })
    });
    if let Err(e) = laid {
        let _ = std::fs::remove_dir_all(c.target.root.join(dir));
        return Outcome::Error(format!("cannot lay {dir}/: {e}"));
    }
    let r = c.call(&mut conn, req::search(dir, "needle").max_results(2));
    let _ = std::fs::remove_dir_all(c.target.root.join(dir));
    let Some(d) = data(&r) else { return Outcome::with(token(&r), problems) };
    let paths: Vec<&str> =
        d["matches"].as_array().map(|a| a.iter().filter_map(|m| m["path"].as_str()).collect()).unwrap_or_default();
    if paths != [files[last].as_str(), files[last].as_str()] || d["truncated"] != json!(true) {
        problems.push(format!(
            "maxResults 2 of {dir}/, {DEEP_FILES} files whose only matches are the three lines of {}: matches in \
             {paths:?}, truncated {}; want its first two, truncated true",
            files[last], d["truncated"]
        ));
    }
    Outcome::with("result:ok", problems)
}

/// Files of the tree [`search_max_results_exact`] searches.
const DEEP_FILES: usize = 200;

/// `maxBytes` exactly the bytes left: the whole rest, `eof:true`; one less: `eof:false`
/// (PC-5.3.read: `eof` is `offset + bytesRead == size`, whatever the window).
fn read_max_bytes_exact(c: &mut Ctx<'_>) -> Outcome {
    let mut conn = tryo!(c.bound());
    let mut problems = Vec::new();
    for (offset, max, content, eof) in [
        (0u64, 12u64, "hello world\n", true),
        (6, 6, "world\n", true),
        (0, 11, "hello world", false),
        (6, 5, "world", false),
    ] {
        let r = c.call(&mut conn, req::read("hello.txt").offset(offset).max_bytes(max));
        let Some(d) = data(&r) else { return Outcome::with(token(&r), problems) };
        if d["content"] != content || d["bytesRead"] != content.len() || d["eof"] != eof {
            problems.push(format!(
                "offset {offset}, maxBytes {max} of the 12-byte hello.txt: content {}, bytesRead {}, eof {}; want \
                 {content:?}, {}, {eof}",
                d["content"],
                d["bytesRead"],
                d["eof"],
                content.len()
            ));
        }
    }
    Outcome::with("result:ok", problems)
}

/// A result line exactly `maxResponseBytes` long (LF included) is sent whole; with a budget
/// one byte smaller the same read is shrunk (fewer bytes, `eof:false`) or refused
/// `response_too_large` — the judge fails any line over the budget (PC-4.5).
fn limits_response_budget_exact(c: &mut Ctx<'_>) -> Outcome {
    const MAX: u64 = 1500;
    let (id, key) = ("budget-exact-1", "budget-exact-key-1");
    let call = || req::read("big.txt").max_bytes(MAX);
    let line_len = {
        let mut conn = tryo!(c.bound());
        conn.send(&c.invoke(id, key, call()));
        let r = conn.recv_for(id);
        match (&r, data(&r)) {
            (Recv::Frame(_, raw), Some(d)) if d["bytesRead"] == MAX => raw.len() + 1,
            _ => return Outcome::with(token(&r), vec!["the 1500-byte window of big.txt did not read whole".into()]),
        }
    };
    if line_len > 4 * 1024 * 1024 {
        return Outcome::Skip("the result line is longer than any maxResponseBytes".into());
    }
    if (line_len as i64) < 1025 || line_len as i64 > c.target.admitted.limits().max_response_bytes {
        return Outcome::Skip(format!("a {line_len}-byte result line cannot be a budget within the grant"));
    }
    let mut problems = Vec::new();
    for budget in [line_len, line_len - 1] {
        let mut b = c.bind_frame();
        b["limits"]["maxResponseBytes"] = json!(budget);
        let mut conn = tryo!(c.bind_with(&b));
        conn.note(&format!("maxResponseBytes {budget}: the whole result line is {line_len} bytes, LF included"));
        conn.send(&c.invoke(id, key, call()));
        let r = conn.recv_for(id);
        let Some(v) = r.frame() else { return Outcome::with(token(&r), problems) };
        let whole = v.ok() == Some(true) && v["data"]["bytesRead"] == MAX;
        if budget == line_len && !whole {
            problems.push(format!(
                "with maxResponseBytes {budget}, exactly the length of the whole result line, the result was not \
                 sent whole ({}): a line at the budget fits",
                token(&r)
            ));
        }
        if budget < line_len && whole {
            problems.push(format!("with maxResponseBytes {budget}, one byte short, the whole result was still sent"));
        }
        if budget < line_len && v.ok() == Some(true) && v["data"]["eof"] != false {
            problems.push("a shrunk window of big.txt must say eof:false".into());
        }
        if v.ok() == Some(false) && v.error_code() != Some(AdapterCode::ResponseTooLarge.as_str()) {
            return Outcome::with(token(&r), problems);
        }
    }
    Outcome::with("result:ok", problems)
}

/// PC-4.5, SHOULD, exact boundary and one past: a search cut by the response budget to one
/// match that, with `truncated:true`, fills `maxResponseBytes` to the byte. The runner lays a
/// file whose first line (`needle` and 2000 dashes) and second line (`needle`) both match, and
/// measures the result line of `maxResults: 1` (one match, `truncated:true`: the limit cut it).
/// Bound with `maxResponseBytes` exactly that long, the same search with `maxResults: 2` is cut
/// by the budget to the same line: the first match must come back, `truncated:true`. Answering
/// `response_too_large` there breaks a SHOULD only (PC-4.5 allows either answer for a result
/// over the budget; PC-5.3.errors requires it only when not even one match fits). One byte
/// smaller, not even one match fits: `response_too_large`. A search, not a listing: one entry
/// (a name of at most 255 bytes) cannot make a line as long as the smallest `maxResponseBytes`
/// (1 KiB), while a match's text is its whole line.
fn limits_response_budget_exact_match(c: &mut Ctx<'_>) -> Outcome {
    if !granted(c, "fs.search") {
        return Outcome::Skip("the descriptor does not grant fs.search".into());
    }
    let name = "budget-one-match.txt";
    let file = c.target.root.join(name);
    if std::fs::write(&file, format!("needle{}\nneedle\n", "-".repeat(2000))).is_err() {
        return Outcome::Error("cannot lay the file of the case".into());
    }
    let out = exact_match(c, name);
    let _ = std::fs::remove_file(&file);
    out
}

fn exact_match(c: &mut Ctx<'_>, name: &str) -> Outcome {
    // One request id and keys of one length on every connection, so that only the budget and
    // `maxResults` differ between the result lines; a key per payload (PC-4.5 conflicts).
    let id = "budget-one-match";
    let (line_len, first) = {
        let mut conn = tryo!(c.bound());
        conn.send(&c.invoke(id, "budget-one-match-1", req::search(name, "needle").max_results(1)));
        let r = conn.recv_for(id);
        match (&r, data(&r)) {
            (Recv::Frame(_, raw), Some(d))
                if d["truncated"] == true && d["matches"].as_array().is_some_and(|m| m.len() == 1) =>
            {
                (raw.len() + 1, d["matches"][0].clone())
            }
            _ => {
                return Outcome::Error(format!(
                    "inconclusive: the search of {name} with maxResults 1 was answered `{}`, not one match with \
                     truncated:true, so the line to fit was never measured",
                    token(&r)
                ))
            }
        }
    };
    if (line_len as i64) < 1025 || line_len as i64 > c.target.admitted.limits().max_response_bytes {
        return Outcome::Skip(format!("a {line_len}-byte result line cannot be a budget within the grant"));
    }
    let mut problems = Vec::new();
    for (budget, key) in [(line_len, "budget-one-match-2"), (line_len - 1, "budget-one-match-3")] {
        let mut b = c.bind_frame();
        b["limits"]["maxResponseBytes"] = json!(budget);
        let mut conn = tryo!(c.bind_with(&b));
        conn.note(&format!(
            "maxResponseBytes {budget}: the first match alone, truncated:true, is a {line_len}-byte line, LF included"
        ));
        conn.send(&c.invoke(id, key, req::search(name, "needle").max_results(2)));
        let r = conn.recv_for(id);
        let Some(v) = r.frame() else { return Outcome::with(token(&r), problems) };
        let too_large = v.error_code() == Some(AdapterCode::ResponseTooLarge.as_str());
        if v.ok() == Some(false) && !too_large {
            // Refused for another reason than the budget: not what the case provoked.
            return Outcome::Error(format!(
                "inconclusive: with maxResponseBytes {budget} the search was answered `{}`",
                token(&r)
            ));
        }
        let got = v["data"]["matches"].as_array().map(Vec::len).unwrap_or(0);
        if budget == line_len {
            if too_large {
                problems.push(format!(
                    "with maxResponseBytes {budget}, exactly the length of the line holding the first match with \
                     truncated:true, the search was answered response_too_large: the match fits to the byte and \
                     should come back (PC-5.3.errors: response_too_large only when not even one match fits)"
                ));
            } else if got != 1 || v["data"]["matches"][0] != first || v["data"]["truncated"] != true {
                problems.push(format!(
                    "with maxResponseBytes {budget} the search returned {got} matches, truncated {}; want the first \
                     match, as with maxResults 1, and truncated:true (the budget cut the second)",
                    v["data"]["truncated"]
                ));
            }
        } else if !too_large {
            problems.push(format!(
                "with maxResponseBytes {budget}, one byte short of the line holding one match, the search returned {got} \
                 matches: not even one match fits, so the answer is response_too_large (PC-5.3.errors)"
            ));
        }
    }
    Outcome::with("result:ok", problems)
}

/// PC-5.3.read: the window is shortened to fit the response budget, counted as the JSON the
/// result carries. The runner lays two files three quarters of `maxResponseBytes` long and
/// reads each whole: one of `"` characters (each escaped to two bytes, `\"`) and one of U+0001
/// characters (each escaped to six, `\u0001`: a control character without a short escape).
/// Their raw bytes fit the budget, their escaped content does not, so each window must be
/// shortened (`ok`, fewer bytes, `eof:false`, the file's first bytes). An adapter that sizes the
/// window by raw bytes, or counts a control character shorter than its escape, sends a line
/// over the budget (the judge fails it) or falls back to `response_too_large` where hundreds of
/// characters fit (SHOULD: PC-4.5 lets an adapter answer `response_too_large` for a result over
/// the budget).
fn limits_response_budget_escapes(c: &mut Ctx<'_>) -> Outcome {
    if !granted(c, "fs.read") {
        return Outcome::Skip("the descriptor does not grant fs.read".into());
    }
    let budget = c.target.admitted.limits().max_response_bytes.max(0) as usize;
    let size = budget / 4 * 3;
    let mut problems = Vec::new();
    for (name, ch, what) in [("escapes.txt", '"', "quote characters"), ("controls.txt", '\u{1}', "U+0001 characters")] {
        let escaped = serde_json::to_string(&ch.to_string()).map_or(0, |s| s.len() - 2);
        if std::fs::write(c.target.root.join(name), ch.to_string().repeat(size)).is_err() {
            return Outcome::Error("cannot lay the file of the case".into());
        }
        let r = c.one(req::read(name).max_bytes(size as u64));
        let _ = std::fs::remove_file(c.target.root.join(name));
        let r = tryo!(r);
        let Some(d) = data(&r) else { return Outcome::token(token(&r)) };
        let read = d["bytesRead"].as_u64().unwrap_or(0) as usize;
        if read == 0 || read >= size || d["eof"] != json!(false) {
            problems.push(format!(
                "a {size}-byte window of {what} (escaped, {} bytes: over maxResponseBytes {budget}) was answered \
                 with bytesRead {read} and eof {}: it must be shortened to fit, with eof:false",
                escaped * size,
                d["eof"]
            ));
        } else if d["content"].as_str() != Some(ch.to_string().repeat(read).as_str()) {
            problems.push(format!(
                "a {size}-byte window of {what} was shortened to bytesRead {read}, yet its content is not the file's \
                 first {read} bytes"
            ));
        }
    }
    Outcome::with("result:ok", problems)
}

/// Each call on one connection, in order: `true` must be answered `result ok`, `false`
/// `invalid_request` (PC-5.2: a payload member out of its range is refused, no side effect).
/// Each call has its own key, `<prefix>-<n>`, that no other case uses: keys of a connection the
/// adapter has not seen end yet may be handed on to this one (PC-4.5), and a key reused with
/// another payload is answered `idempotency_conflict`.
fn payload_bounds(c: &mut Ctx<'_>, prefix: &str, calls: Vec<(String, Call, bool)>) -> Outcome {
    let mut conn = tryo!(c.bound());
    let mut problems = Vec::new();
    let refused = format!("error:{}", AdapterCode::InvalidRequest.as_str());
    for (n, (what, call, ok)) in calls.into_iter().enumerate() {
        let (id, _) = c.ids();
        conn.send(&c.invoke(&id, &format!("{prefix}-{}", n + 1), call));
        let r = conn.recv_for(&id);
        if r.frame().is_none() {
            problems.push(format!("{what}: answered `{}`", token(&r)));
            return Outcome::with(token(&r), problems);
        }
        let t = token(&r);
        if ok && data(&r).is_none() {
            problems.push(format!("{what} is within the bound, yet answered `{t}`: it must be accepted (result:ok)"));
        }
        if !ok && t != refused {
            problems.push(format!("{what} is one past the bound, yet answered `{t}`: it must be refused {refused}"));
        }
    }
    Outcome::with("bounds-held", problems)
}

/// PC-5.2: `maxResults` 10000 is accepted, 10001 is `invalid_request`.
fn search_max_results_limit(c: &mut Ctx<'_>) -> Outcome {
    payload_bounds(
        c,
        "max-results-limit",
        vec![
            ("maxResults 10000".into(), req::search("notes.md", "needle").max_results(10_000), true),
            ("maxResults 10001".into(), req::search("notes.md", "needle").max_results(10_001), false),
        ],
    )
}

/// PC-5.2: `query` is 1–4096 UTF-16 units. 4096 ASCII units and 2048 astral characters (4096
/// units, 8192 bytes) are accepted; 4097 ASCII units and 4095 ASCII + one astral character
/// (4097 units in 4096 characters) are `invalid_request`.
fn search_query_length_limit(c: &mut Ctx<'_>) -> Outcome {
    let astral = "\u{1f600}";
    let calls = vec![
        ("a query of 4096 ASCII units".into(), req::search("notes.md", &"q".repeat(4096)), true),
        ("a query of 4097 ASCII units".into(), req::search("notes.md", &"q".repeat(4097)), false),
        (
            "a query of 2048 astral characters (4096 units, 8192 bytes)".into(),
            req::search("notes.md", &astral.repeat(2048)),
            true,
        ),
        (
            "a query of 4095 ASCII characters and one astral character (4097 units in 4096 characters)".into(),
            req::search("notes.md", &format!("{}{astral}", "q".repeat(4095))),
            false,
        ),
    ];
    payload_bounds(c, "query-length-limit", calls)
}

/// PC-4.5: `maxIdempotencyKeys` N are remembered. Bound with N = min(4, the grant's), N writes
/// under N keys fill the cache exactly: a replay of the first, whose file someone else changed
/// meanwhile, returns the stored outcome and writes nothing. The runner's narrower second grant
/// is used when it minted one: no other case leaves keys in its cache.
fn idem_key_capacity(c: &mut Ctx<'_>) -> Outcome {
    idem_capacity(c, true)
}

/// PC-4.5, one past (SHOULD): with N + 1 keys used, the key that finished earliest (the first
/// of them) is forgotten to make room, so its replay runs anew. Which key a full cache forgets
/// is this project's DECISION (the protocol only names the limit), and remembering more keys
/// than the limit loses no update, so this is graded SHOULD.
fn idem_key_capacity_evicts(c: &mut Ctx<'_>) -> Outcome {
    idem_capacity(c, false)
}

/// `remembered`: N keys, the first must still be remembered; otherwise N + 1 keys, the first
/// must be forgotten.
fn idem_capacity(c: &mut Ctx<'_>, remembered: bool) -> Outcome {
    let grant = c.target.narrow.clone().unwrap_or_else(|| c.target.admitted.clone());
    if !grant.grants(ToolOperation::FsWrite) {
        return Outcome::Skip("the grant lacks fs.write: no mutating request can be replayed".into());
    }
    let l = *grant.limits();
    let n = l.max_idempotency_keys.get().min(4);
    let ttl = Duration::from_millis(l.idempotency_ttl_ms as u64);
    let mut b = grant.bind_frame();
    b["limits"]["maxIdempotencyKeys"] = json!(n);
    let mut conn = tryo!(c.connect_as(&grant));
    conn.note(&format!("bound with maxIdempotencyKeys {n}; every request below is an fs.write under its own key"));
    conn.send(&b);
    let r = conn.recv();
    if r.frame().is_none_or(|v| v.kind() != Some("bound")) {
        return Outcome::with(format!("bind-{}", token(&r)), vec!["no bound for a valid bind".into()]);
    }
    let identity = grant.identity();
    let mut seq = 0;
    let mut write = |c: &mut Ctx<'_>, conn: &mut super::conn::Conn, key: &str, file: &str| {
        seq += 1;
        let id = format!("cap-req-{seq}");
        let f = req::invoke_frame(&identity, &id, key, &req::write(file, &format!("written under {key}\n")));
        c.allow(&[file]);
        conn.send(&f);
        conn.recv_for(&id)
    };
    let changed = b"changed by someone else";
    let mut problems = Vec::new();
    let started = Instant::now();
    let (phase, count) = if remembered { ("a", n) } else { ("b", n + 1) };
    {
        let key = |i: u64| format!("cap-{phase}-{i}");
        let file = |i: u64| format!("cap-{phase}-{i}.txt");
        let mut first = None;
        for i in 1..=count {
            let r = write(c, &mut conn, &key(i), &file(i));
            let Some(d) = data(&r) else { return Outcome::with(format!("write-{}", token(&r)), problems) };
            if i == 1 {
                first = Some(d.clone());
            }
        }
        if std::fs::write(c.target.root.join(file(1)), changed).is_err() {
            return Outcome::Error(format!("cannot change {}", file(1)));
        }
        let r = write(c, &mut conn, &key(1), &file(1));
        let Some(d) = data(&r) else { return Outcome::with(format!("replay-{}", token(&r)), problems) };
        let ran = read_root(c, &file(1)) != changed || first.as_ref() != Some(d);
        if remembered && ran {
            if started.elapsed() >= ttl {
                return Outcome::Error(format!(
                    "inconclusive: the case ran longer than the grant's idempotencyTtlMs ({} ms), so the first key \
                     may have expired",
                    ttl.as_millis()
                ));
            }
            problems.push(format!(
                "with maxIdempotencyKeys {n} and exactly {n} keys used, the write under the first of them ({}) was \
                 executed again when replayed: the cache must hold {n} keys, so it is still remembered and its \
                 stored outcome is replayed",
                key(1)
            ));
        }
        if !remembered && !ran {
            problems.push(format!(
                "with maxIdempotencyKeys {n} and {} keys used, the write under the one that finished earliest ({}) \
                 was still replayed: at most {n} keys should be remembered, and the one that finished earliest is \
                 the one forgotten to make room (DECISION of PC-4.5), so its replay runs anew",
                n + 1,
                key(1)
            ));
        }
    }
    Outcome::with("result:ok", problems)
}

/// PC-4.5: keys are remembered for `idempotencyTtlMs` T (bound small, 1000 ms; 4000 when the
/// writes take longer than T/2). Two writes A and B under their own keys; someone else then
/// changes both files. Replayed 0.7 T after A was sent and answered before T had passed, A is
/// not executed again (its stored outcome comes back); replayed 2 T after B's result, B is
/// executed anew. A replay of A that ran again but was answered only after T is inconclusive
/// (the adapter may have read it after the TTL), and the attempt is repeated with the larger T.
fn idem_ttl(c: &mut Ctx<'_>) -> Outcome {
    let ceiling = c.target.admitted.limits().idempotency_ttl_ms as u64;
    let changed = b"changed by someone else";
    let mut why = Vec::new();
    for ttl_ms in [1000u64, 4000] {
        if ttl_ms > ceiling {
            why.push(format!("a TTL of {ttl_ms} ms is above the grant's {ceiling}"));
            continue;
        }
        let ttl = Duration::from_millis(ttl_ms);
        let mut b = c.bind_frame();
        b["limits"]["idempotencyTtlMs"] = json!(ttl_ms);
        let mut conn = tryo!(c.bind_with(&b));
        conn.note(&format!("bound with idempotencyTtlMs {ttl_ms}"));
        let (fa, fb) = (format!("ttl-a-{ttl_ms}.txt"), format!("ttl-b-{ttl_ms}.txt"));
        let (ka, kb) = (format!("ttl-a-{ttl_ms}"), format!("ttl-b-{ttl_ms}"));
        c.allow(&[&fa, &fb]);
        let (pa, pb) = (req::write(&fa, "A, written once\n"), req::write(&fb, "B, written once\n"));
        let (ida, _) = c.ids();
        let (idb, _) = c.ids();
        let t0 = Instant::now();
        conn.send_all(&[c.invoke(&ida, &ka, pa.clone()), c.invoke(&idb, &kb, pb.clone())]);
        let ra = conn.recv_for(&ida);
        let rb = conn.recv_for(&idb);
        let b_done = Instant::now();
        let (Some(da), Some(_)) = (data(&ra).cloned(), data(&rb)) else {
            let r = if data(&ra).is_none() { &ra } else { &rb };
            return Outcome::with(format!("write-{}", token(r)), vec![]);
        };
        if t0.elapsed() > ttl / 2 {
            why.push(format!("the two writes took {} ms, more than half the {ttl_ms} ms TTL", ms(t0.elapsed())));
            continue;
        }
        for f in [&fa, &fb] {
            if std::fs::write(c.target.root.join(f), changed).is_err() {
                return Outcome::Error(format!("cannot change {f}"));
            }
        }
        let mut problems = Vec::new();
        // Just before expiry: 0.7 T after A was sent.
        std::thread::sleep((t0 + ttl * 7 / 10).saturating_duration_since(Instant::now()));
        let (id, _) = c.ids();
        conn.send(&c.invoke(&id, &ka, pa));
        let r = conn.recv_for(&id);
        let answered = t0.elapsed();
        let Some(d) = data(&r) else { return Outcome::with(format!("replay-{}", token(&r)), problems) };
        if read_root(c, &fa) != changed || d != &da {
            if answered >= ttl {
                why.push(format!(
                    "the replay of A ran again, but was answered only {} ms after A was sent (TTL {ttl_ms} ms)",
                    ms(answered)
                ));
                continue;
            }
            problems.push(format!(
                "the write under key {ka}, replayed and answered {} ms after it was first sent (idempotencyTtlMs \
                 {ttl_ms}), was executed again: within its TTL a key is remembered and its stored outcome replayed",
                ms(answered)
            ));
        }
        // Well after expiry: 2 T after B's result.
        std::thread::sleep((b_done + ttl * 2).saturating_duration_since(Instant::now()));
        let (id, _) = c.ids();
        conn.send(&c.invoke(&id, &kb, pb));
        let r = conn.recv_for(&id);
        if data(&r).is_none() {
            return Outcome::with(format!("replay-{}", token(&r)), problems);
        }
        if read_root(c, &fb) == changed {
            problems.push(format!(
                "the write under key {kb}, replayed {} ms after its result (idempotencyTtlMs {ttl_ms}), was not \
                 executed again: after its TTL a key is forgotten, and the request runs anew",
                ms(b_done.elapsed())
            ));
        }
        return Outcome::with("result:ok", problems);
    }
    Outcome::Error(format!(
        "inconclusive: no TTL could be judged just before its expiry ({}). A correct adapter on an unloaded \
         machine answers in time",
        why.join("; ")
    ))
}

// ---------------------------------------------------------------- abort

fn abort_unknown(c: &mut Ctx<'_>) -> Outcome {
    let mut conn = tryo!(c.bound());
    conn.send(&c.abort("abort-1", "never-sent"));
    let r = conn.recv();
    match r.frame() {
        // The echo of requestId/targetRequestId and aborted:false for a target never invoked
        // are judged on every aborted frame.
        Some(v) if v.kind() == Some("aborted") => {
            Outcome::token(format!("aborted:{}", v.error_code().unwrap_or("none")))
        }
        _ => Outcome::token(token(&r)),
    }
}
/// PC-4.2: the ids of an `abort` (its own `requestId`, the `targetRequestId`) match the frame-id
/// pattern, at most 128 characters. An abort breaking it cannot be answered: its `aborted`
/// would echo the bad id, itself an invalid frame. So it is closed (PC-4.5), one bound
/// connection each: a target with a leading dash, a space, a non-ASCII letter, 129
/// characters, empty; and an abort whose own requestId has a leading dash.
fn abort_bad_ids(c: &mut Ctx<'_>) -> Outcome {
    let long = "t".repeat(129);
    let cells: [(&str, &str, &str); 6] = [
        ("a targetRequestId with a leading dash", "abort-1", "-target"),
        ("a targetRequestId holding a space", "abort-1", "tar get"),
        ("a non-ASCII targetRequestId", "abort-1", "tärget"),
        ("a targetRequestId of 129 characters", "abort-1", &long),
        ("an empty targetRequestId", "abort-1", ""),
        ("a requestId with a leading dash", "-abort", "target-1"),
    ];
    let mut p = Vec::new();
    for (what, id, target) in cells {
        let mut conn = tryo!(c.bound());
        conn.note(&format!("an abort with {what}"));
        let f = c.frame("abort", json!({"requestId": id, "targetRequestId": target}));
        conn.send(&f);
        let t = token(&conn.expect_close(c.step()));
        if t != "closed" {
            p.push(format!("the abort with {what} was answered `{t}` instead of a close"));
        }
    }
    if p.is_empty() {
        return Outcome::token("closed");
    }
    p.push(
        "abort ids follow the frame-id pattern (PC-4.2); a frame breaking it cannot be attributed or answered (its \
            aborted would echo the bad id), so the adapter closes the connection"
            .into(),
    );
    Outcome::with("answered", p)
}
fn abort_finished(c: &mut Ctx<'_>) -> Outcome {
    let mut conn = tryo!(c.bound());
    let (id, key) = c.ids();
    conn.send(&c.invoke(&id, &key, req::stat("hello.txt")));
    let r = conn.recv_for(&id);
    if r.frame().is_none() {
        return Outcome::token(token(&r));
    }
    conn.send(&c.abort("abort-2", &id));
    let a = conn.recv();
    match a.frame() {
        // SPEC 4.5 asks for aborted:false; an adapter that no longer remembers the finished
        // request may add unknown_request, which the protocol does not forbid.
        Some(v) if v.kind() == Some("aborted") => Outcome::token(
            if v.aborted() == Some(false)
                && (!v.has_error() || v.error_code() == Some(AdapterCode::UnknownRequest.as_str()))
            {
                "aborted:false"
            } else {
                "aborted-wrong"
            },
        ),
        _ => Outcome::token(token(&a)),
    }
}
/// Abort of a running write: `aborted:true` means no result ever and no side effect. An
/// `aborted:false` followed by the result is allowed (the write passed its commit point) but
/// tests nothing, so the attempt is repeated; never confirmed, the case is inconclusive.
fn abort_in_flight(c: &mut Ctx<'_>) -> Outcome {
    provoke(c, "an abort of a write before its commit point", |c, i| {
        let file = format!("aborted-{}.txt", i + 1);
        c.allow(&[&file]);
        let mut conn = match c.bound() {
            Ok(x) => x,
            Err(o) => return Try::Done(o),
        };
        let (id, key) = c.ids();
        let aid = format!("abort-write-{}", i + 1);
        let content = "z".repeat(200_000);
        let frames = [c.invoke(&id, &key, req::write(&file, &content)), c.abort(&aid, &id)];
        let t0 = Instant::now();
        conn.send_all(&frames);
        let mut g = gather(&mut conn, t0, c.step() * 4, |g| {
            g.get(&aid).is_some_and(|(_, a)| a.aborted() == Some(true) || g.get(&id).is_some())
        });
        let Some(a) = g.get(&aid).map(|(_, a)| a.clone()) else {
            return Try::Done(Outcome::with(
                "no-aborted",
                vec![format!("no aborted frame for {aid} ({})", g.end_token())],
            ));
        };
        if a.aborted() == Some(true) {
            // PC-4.5: after aborted:true its result must never come; keep reading for a step
            // (the judge also fails any result for it, whenever it is read).
            keep_reading(&mut conn, t0, c.step(), &mut g, |_| false);
            std::thread::sleep(Duration::from_millis(100));
            let mut p = Vec::new();
            if let Some(t) = g.at(&id) {
                p.push(format!("a result was sent after aborted:true (at {} ms)", ms(t)));
            }
            if c.target.root.join(&file).exists() {
                p.push("aborted:true but the write happened".into());
            }
            return Try::Done(Outcome::with(
                if g.at(&id).is_some() { "result-after-aborted" } else { "consistent" },
                p,
            ));
        }
        let Some((_, r)) = g.get(&id) else {
            return Try::Done(Outcome::token("aborted:false-without-result"));
        };
        if r.ok() == Some(true) && !c.target.root.join(&file).exists() {
            return Try::Done(Outcome::with(
                "consistent",
                vec!["aborted:false and ok, but nothing was written".into()],
            ));
        }
        Try::NotReached("aborted:false, then the result: the write passed its commit point before the abort".into())
    })
}

/// Abort, running target, no side effect at stake: a slow search is aborted right behind its
/// invoke. Confirmed when the adapter answers `aborted:true` (it was in flight) — then its
/// result must never come — or answers the abort before the search's result (it read the
/// abort while the search ran, so it had to cancel it).
fn abort_running(c: &mut Ctx<'_>) -> Outcome {
    provoke(c, "a running target", |c, i| {
        let mut conn = match c.bound() {
            Ok(x) => x,
            Err(o) => return Try::Done(o),
        };
        let (tid, tkey) = c.ids();
        let aid = format!("abort-running-{}", i + 1);
        let probe = format!("probe-{}", i + 1);
        let frames = [c.invoke(&tid, &tkey, blocker()), c.abort(&aid, &tid), c.abort(&probe, "never-sent-probe")];
        let t0 = Instant::now();
        conn.send_all(&frames);
        let mut g = gather(&mut conn, t0, c.step() * 20, |g| {
            g.get(&probe).is_some()
                && g.get(&aid).is_some_and(|(_, a)| a.aborted() == Some(true) || g.get(&tid).is_some())
        });
        let Some((a_at, a)) = g.get(&aid).map(|(t, a)| (t, a.clone())) else {
            return Try::Done(Outcome::with(g.end_token(), vec![format!("no aborted frame for {aid}")]));
        };
        if a.aborted() == Some(true) {
            // PC-4.5: after aborted:true its result never comes: read a whole step more.
            keep_reading(&mut conn, t0, c.step(), &mut g, |_| false);
            let p = match g.at(&tid) {
                Some(t) => vec![format!("the search's result came after aborted:true (at {} ms)", ms(t))],
                None => vec![],
            };
            return Try::Done(Outcome::with("aborted:true", p));
        }
        let Some(t_at) = g.at(&tid) else {
            return Try::Done(Outcome::with("aborted:false-without-result", vec![format!("no result for {tid}")]));
        };
        let read_at = a_at.min(g.at(&probe).unwrap_or(a_at));
        if read_at < t_at {
            return Try::Done(Outcome::with(
                "aborted:false-while-running",
                vec![format!(
                    "the abort was read while the search still ran (it, or the probe sent behind it, was answered \
                     at {} ms, the search's result came at {} ms), yet answered aborted:false: a target that has \
                     not produced its result must be cancelled and answered aborted:true",
                    ms(read_at),
                    ms(t_at)
                )],
            ));
        }
        if t_at >= SERIAL_AFTER {
            return Try::Done(Outcome::with(
                "aborted:false-unread",
                vec![format!(
                    "the search ran {} ms and its abort, sent right behind it, was answered only after its \
                     result: {READ_AS_THEY_ARRIVE}",
                    ms(t_at)
                )],
            ));
        }
        Try::NotReached(format!("the search finished after {} ms, before the abort was read", ms(t_at)))
    })
}

/// Abort, queued target: with one slot, a write waits behind a slow search and is aborted
/// right behind it. A queued target has not produced its result, so `aborted:true` and no
/// result, no write. Confirmed by `aborted:true`, or by an `aborted:false` answered while the
/// search still ran (a failure).
fn abort_queued(c: &mut Ctx<'_>) -> Outcome {
    if c.target.admitted.limits().max_queued_requests == 0 {
        return Outcome::Skip("the grant allows no queue (maxQueuedRequests 0): no request can wait".into());
    }
    provoke(c, "a queued target", |c, i| {
        let mut b = c.bind_frame();
        b["limits"]["maxConcurrentRequests"] = json!(1);
        b["limits"]["maxQueuedRequests"] = json!(1);
        let mut conn = match c.bind_with(&b) {
            Ok(x) => x,
            Err(o) => return Try::Done(o),
        };
        let file = format!("abort-queued-{}.txt", i + 1);
        c.allow(&[&file]);
        let (bid, bkey) = c.ids();
        let (tid, tkey) = c.ids();
        let aid = format!("abort-queued-{}", i + 1);
        let probe = format!("probe-{}", i + 1);
        let frames = [
            c.invoke(&bid, &bkey, blocker()),
            c.invoke(&tid, &tkey, req::write(&file, "a queued write that was aborted")),
            c.abort(&aid, &tid),
            c.abort(&probe, "never-sent-probe"),
        ];
        conn.note(&format!("bound with one slot and one queue place: {tid} waits behind the search {bid}"));
        let t0 = Instant::now();
        conn.send_all(&frames);
        let mut g = gather(&mut conn, t0, c.step() * 20, |g| {
            g.get(&bid).is_some()
                && g.get(&probe).is_some()
                && g.get(&aid).is_some_and(|(_, a)| a.aborted() == Some(true) || g.get(&tid).is_some())
        });
        let Some((a_at, a)) = g.get(&aid).map(|(t, a)| (t, a.clone())) else {
            return Try::Done(Outcome::with(g.end_token(), vec![format!("no aborted frame for {aid}")]));
        };
        let Some(b_at) = g.at(&bid) else {
            return Try::Done(Outcome::with(g.end_token(), vec![format!("no result for the search {bid}")]));
        };
        if a.aborted() == Some(true) {
            keep_reading(&mut conn, t0, c.step(), &mut g, |_| false);
            let mut p = Vec::new();
            if let Some(t) = g.at(&tid) {
                p.push(format!("the aborted write's result came after aborted:true (at {} ms)", ms(t)));
            }
            if c.target.root.join(&file).exists() {
                p.push(format!("aborted:true, yet the queued write created {file}"));
            }
            return Try::Done(Outcome::with("aborted:true", p));
        }
        let read_at = a_at.min(g.at(&probe).unwrap_or(a_at));
        if read_at < b_at {
            return Try::Done(Outcome::with(
                "aborted:false-while-queued",
                vec![format!(
                    "the abort was read while the write still waited behind the search (it, or the probe sent \
                     behind it, was answered at {} ms, the search's result came at {} ms), yet answered \
                     aborted:false: a queued target has not produced its result and must be cancelled, \
                     aborted:true",
                    ms(read_at),
                    ms(b_at)
                )],
            ));
        }
        if b_at >= SERIAL_AFTER {
            return Try::Done(Outcome::with(
                "aborted:false-unread",
                vec![format!(
                    "the search ahead of the write ran {} ms and the abort, sent with both, was answered only \
                     after it: {READ_AS_THEY_ARRIVE}",
                    ms(b_at)
                )],
            ));
        }
        Try::NotReached(format!("the search ahead finished after {} ms, before the abort was read", ms(b_at)))
    })
}

// ---------------------------------------------------------------- idempotency

fn idem_replay_write(c: &mut Ctx<'_>) -> Outcome {
    c.allow(&["idem.txt"]);
    let mut conn = tryo!(c.bound());
    let payload = req::write("idem.txt", "first");
    let f1 = c.invoke("w-1", "same-key", payload.clone());
    conn.send(&f1);
    let r1 = conn.recv_for("w-1");
    let Some(d1) = data(&r1).cloned() else { return Outcome::token(token(&r1)) };
    let _ = std::fs::write(c.target.root.join("idem.txt"), "changed by someone else");
    conn.send(&c.invoke("w-2", "same-key", payload));
    let r2 = conn.recv_for("w-2");
    let mut p = Vec::new();
    if data(&r2) != Some(&d1) {
        p.push("the replay's data differs from the first outcome".into());
    }
    if read_root(c, "idem.txt") != b"changed by someone else" {
        p.push("the replay executed the write again".into());
    }
    Outcome::with(token(&r2), p)
}
/// PC-4.5, every spelling: the fingerprint is of the canonical payload, so a replay is the same
/// payload whatever its JSON spelling. A write is replayed under its key with its members in
/// reverse order, its strings spelled with `\u` escapes and whitespace between the tokens,
/// after the runner changed the file: the stored outcome must come back and nothing be written
/// (`idempotency_conflict` or a second write both break the rule). A read-only listing under
/// another key is repeated with `maxEntries` 2 spelled `2.0` and the members reordered: it may
/// run again, but it is the same fingerprint, never `idempotency_conflict`. The file is removed
/// at the end.
fn idem_replay_any_spelling(c: &mut Ctx<'_>) -> Outcome {
    let file = "idem-spelled.txt";
    c.allow(&[file]);
    let out = idem_replay_any_spelling_cells(c, file);
    let _ = std::fs::remove_file(c.target.root.join(file));
    out
}

/// `text` with every character spelled as a `\u` escape (ASCII text only).
fn all_escaped(text: &str) -> String {
    text.chars().map(|ch| format!("\\u{:04x}", ch as u32)).collect()
}

/// `frame` as a line whose compact payload is replaced by `payload` (raw JSON text).
fn with_payload_text(frame: &Value, payload: &str) -> Option<String> {
    let text = serde_json::to_string(frame).ok()?;
    let compact = serde_json::to_string(&frame["payload"]).ok()?;
    let line = text.replacen(&format!("\"payload\":{compact}"), &format!("\"payload\" : {payload}"), 1);
    (line != text).then_some(line)
}

fn idem_replay_any_spelling_cells(c: &mut Ctx<'_>, file: &str) -> Outcome {
    let mut conn = tryo!(c.bound());
    let content = "first\n";
    let call = req::write(file, content).create(true);
    conn.send(&c.invoke("sp-1", "spelled-key", call.clone()));
    let r1 = conn.recv_for("sp-1");
    let Some(d1) = data(&r1).cloned() else { return Outcome::token(token(&r1)) };
    let changed = b"changed by someone else";
    if std::fs::write(c.target.root.join(file), changed).is_err() {
        return Outcome::Error(format!("cannot change {file} between the write and its replay"));
    }
    let spelled = format!(
        "{{ \"create\" : true , \"content\" : \"{}\" , \"path\" : \"{}\" }}",
        all_escaped("first").to_string() + "\\n",
        all_escaped(file)
    );
    let Some(line) = with_payload_text(&c.invoke("sp-2", "spelled-key", call), &spelled) else {
        return Outcome::Error("harness: the payload of the replay was not in its invoke".into());
    };
    conn.send_raw(format!("{line}\n").as_bytes());
    let r2 = conn.recv_for("sp-2");
    let mut p = Vec::new();
    let conflict = format!("error:{}", AdapterCode::IdempotencyConflict.as_str());
    if token(&r2) == conflict {
        p.push(
            "the replay of a write under its key, the same payload with its members in reverse order, its strings \
             \\u-escaped and spaces between the tokens, was answered idempotency_conflict: the fingerprint is of \
             the canonical payload, so it is the same payload and its stored outcome must be replayed"
                .into(),
        );
    } else if data(&r2) != Some(&d1) {
        p.push(format!(
            "the replay of a write in another spelling of the same payload answered `{}`, not the stored outcome",
            token(&r2)
        ));
    }
    if read_root(c, file) != changed {
        p.push(format!("{file} was written again by the replay in another spelling: the write ran twice"));
    }
    if matches!(r2, Recv::Closed | Recv::Timeout) {
        conn = tryo!(c.bound());
    }
    // Read-only: the same listing with maxEntries spelled 2.0 and its members reordered.
    let list = req::list("sorted").max_entries(2);
    conn.send(&c.invoke("sp-3", "spelled-list-key", list.clone()));
    let r3 = conn.recv_for("sp-3");
    if data(&r3).is_none() {
        return Outcome::with(token(&r3), p);
    }
    let spelled = format!("{{\"maxEntries\": 2.0, \"path\": \"{}\"}}", all_escaped("sorted"));
    let Some(line) = with_payload_text(&c.invoke("sp-4", "spelled-list-key", list), &spelled) else {
        return Outcome::Error("harness: the payload of the listing was not in its invoke".into());
    };
    conn.send_raw(format!("{line}\n").as_bytes());
    let r4 = conn.recv_for("sp-4");
    if token(&r4) == conflict {
        p.push(
            "a listing repeated under its key with maxEntries 2 spelled 2.0 and its members reordered was answered \
             idempotency_conflict: an integral number is an integer whatever its spelling, so it is the same \
             payload (a read-only request may run again, never conflict)"
                .into(),
        );
    } else if data(&r4) != data(&r3) {
        p.push(format!(
            "a listing repeated in another spelling of the same payload answered `{}`, not the same two entries",
            token(&r4)
        ));
    }
    Outcome::with(token(&r2), p)
}

/// PC-4.5 (audit gap 6): a mutating request's *failure* is its stored outcome too. Only a
/// retryable failure (nothing kept) may run again; `digest_mismatch` and `already_exists` are
/// not retryable, so the same key and payload under a new requestId replays them even after
/// the file changed so that running again would succeed. Two cells on one connection:
/// `expectedDigest` of `v1` while the file holds `v0` (the runner then writes `v1`), and
/// `overwrite:false` on an existing file (the runner then deletes it). A first answer other
/// than the failure provoked fails (it breaks PC-5.3.write), except a retryable refusal, which
/// stores nothing to replay: inconclusive. The runner's files are removed at the end, so the
/// oracle sees the tree it laid.
fn idem_replay_failure(c: &mut Ctx<'_>) -> Outcome {
    let (f1, f2) = ("idem-fail.txt", "idem-fail-2.txt");
    let out = idem_replay_failure_cells(c, f1, f2);
    let _ = std::fs::remove_file(c.target.root.join(f1));
    let _ = std::fs::remove_file(c.target.root.join(f2));
    out
}
fn idem_replay_failure_cells(c: &mut Ctx<'_>, f1: &str, f2: &str) -> Outcome {
    c.allow(&[]);
    let lay = |c: &Ctx<'_>, f: &str, b: &str| std::fs::write(c.target.root.join(f), b);
    if lay(c, f1, "v0").is_err() || lay(c, f2, "v0").is_err() {
        return Outcome::Error("cannot lay the files of the case".into());
    }
    let mut conn = tryo!(c.bound());
    let mismatch = format!("error:{}", AdapterCode::DigestMismatch.as_str());
    let exists = format!("error:{}", AdapterCode::AlreadyExists.as_str());
    let cells: [(&str, Call, &str, &str, Option<&str>); 2] = [
        (f1, req::write(f1, "new").expected_digest(&sha(b"v1")), &mismatch, "rewrote it to v1", Some("v1")),
        (f2, req::write(f2, "new").overwrite(false), &exists, "deleted it", None),
    ];
    let mut p = Vec::new();
    for (i, (file, call, want, change, after)) in cells.into_iter().enumerate() {
        let key = format!("fail-key-{}", i + 1);
        let (id1, id2) = (format!("fail-{}-a", i + 1), format!("fail-{}-b", i + 1));
        conn.send(&c.invoke(&id1, &key, call.clone()));
        let r1 = conn.recv_for(&id1);
        if token(&r1) != *want {
            // A retryable refusal (busy, io_error) may come from any correct adapter: nothing
            // was stored, nothing tested. Any other answer breaks the rule the cell provokes.
            if r1.frame().and_then(|f| f.error_code()).and_then(AdapterCode::from_wire).is_some_and(|c| c.retryable()) {
                return Outcome::Error(format!(
                    "inconclusive: {} of {file} answered `{}` (retryable), not the {want} it provokes, so no \
                     failure was stored to replay",
                    call.op(),
                    token(&r1)
                ));
            }
            return Outcome::with(
                format!("first:{}", token(&r1)),
                vec![format!("{} of {file} answered {}, not {want} (PC-5.3.write)", call.op(), token(&r1))],
            );
        }
        let changed = match after {
            Some(b) => lay(c, file, b),
            None => std::fs::remove_file(c.target.root.join(file)),
        };
        if changed.is_err() {
            return Outcome::Error(format!("cannot change {file} between the request and its retry"));
        }
        conn.send(&c.invoke(&id2, &key, call));
        let r2 = conn.recv_for(&id2);
        let t2 = token(&r2);
        if t2 != *want {
            p.push(format!(
                "the retry of a {want} under the same key and payload answered {t2} after the runner {change}: the \
                 stored failure must be replayed, not the write run again"
            ));
        }
        let now = std::fs::read(c.target.root.join(file)).ok();
        if now.as_deref() != after.map(str::as_bytes) {
            p.push(format!("{file} was changed by the retry: the write ran again instead of replaying {want}"));
        }
        if matches!(r2, Recv::Closed | Recv::Timeout) {
            conn = tryo!(c.bound());
        }
    }
    Outcome::with(if p.is_empty() { "failure-replayed" } else { "failure-not-replayed" }, p)
}
fn idem_replay_edit(c: &mut Ctx<'_>) -> Outcome {
    c.allow(&["edit.txt"]);
    let mut conn = tryo!(c.bound());
    let payload = req::edit("edit.txt", &[("unique line", "edited once")]);
    conn.send(&c.invoke("e-1", "edit-key", payload.clone()));
    let r1 = conn.recv_for("e-1");
    let Some(d1) = data(&r1).cloned() else { return Outcome::token(token(&r1)) };
    conn.send(&c.invoke("e-2", "edit-key", payload));
    let r2 = conn.recv_for("e-2");
    let p = if data(&r2) != Some(&d1) {
        vec!["a replayed edit must return the first outcome, not run again".into()]
    } else {
        vec![]
    };
    Outcome::with(token(&r2), p)
}
fn idem_conflict(c: &mut Ctx<'_>) -> Outcome {
    c.allow(&["idem.txt"]);
    let mut conn = tryo!(c.bound());
    conn.send(&c.invoke("w-1", "k-conflict", req::write("idem.txt", "one")));
    let r1 = conn.recv_for("w-1");
    if data(&r1).is_none() {
        return Outcome::token(token(&r1));
    }
    conn.send(&c.invoke("w-2", "k-conflict", req::write("idem.txt", "two")));
    let r2 = conn.recv_for("w-2");
    let p =
        if read_root(c, "idem.txt") != b"one" { vec!["the conflicting request was executed".into()] } else { vec![] };
    Outcome::with(token(&r2), p)
}
/// SPEC 4.5: every key is remembered with its fingerprint, a read-only one too; reusing it
/// with another payload is idempotency_conflict, even though the same read may run again.
fn idem_read_only_key_conflict(c: &mut Ctx<'_>) -> Outcome {
    let mut conn = tryo!(c.bound());
    conn.send(&c.invoke("ro-1", "k-read-only", req::read("hello.txt")));
    let r1 = conn.recv_for("ro-1");
    if data(&r1).is_none() {
        return Outcome::token(token(&r1));
    }
    conn.send(&c.invoke("ro-2", "k-read-only", req::stat("notes.md")));
    let r2 = conn.recv_for("ro-2");
    let p = if data(&r2).is_some() {
        vec!["a key first used by fs.read was reused by fs.stat with another payload and ran".into()]
    } else {
        vec![]
    };
    Outcome::with(token(&r2), p)
}
/// An in-flight duplicate waits for the first (PC-4.5): with one slot and two queue places, a
/// write and its duplicate (same key, same payload, `overwrite:false`) wait behind a slow
/// search, so the duplicate arrives while the first is in flight. Run again, it would answer
/// `already_exists`; replayed, it returns the first outcome. Confirmed by an abort probe sent
/// behind the duplicate and answered before the search's result.
fn idem_in_flight_duplicate(c: &mut Ctx<'_>) -> Outcome {
    if c.target.admitted.limits().max_queued_requests < 2 {
        return Outcome::Skip("the grant allows fewer than 2 queued requests: the duplicate cannot wait".into());
    }
    provoke(c, "a duplicate of a request in flight", |c, i| {
        let mut b = c.bind_frame();
        b["limits"]["maxConcurrentRequests"] = json!(1);
        b["limits"]["maxQueuedRequests"] = json!(2);
        let mut conn = match c.bind_with(&b) {
            Ok(x) => x,
            Err(o) => return Try::Done(o),
        };
        let file = format!("dup-{}.txt", i + 1);
        c.allow(&[&file]);
        let content = format!("written once, attempt {}\n", i + 1);
        let payload = req::write(&file, &content).overwrite(false);
        let (bid, bkey) = c.ids();
        let key = format!("dup-key-{}", i + 1);
        let (d1, d2) = (format!("dup-{}-a", i + 1), format!("dup-{}-b", i + 1));
        let probe = format!("probe-{}", i + 1);
        let frames = [
            c.invoke(&bid, &bkey, blocker()),
            c.invoke(&d1, &key, payload.clone()),
            c.invoke(&d2, &key, payload),
            c.abort(&probe, "never-sent-probe"),
        ];
        conn.note(&format!("bound with one slot and two queue places: {d1} and its duplicate {d2} wait behind {bid}"));
        let t0 = Instant::now();
        conn.send_all(&frames);
        let ids = [bid.as_str(), d1.as_str(), d2.as_str(), probe.as_str()];
        let g = gather(&mut conn, t0, c.step() * 20, |g| ids.iter().all(|id| g.get(id).is_some()));
        if let Some(id) = ids.iter().find(|id| g.get(id).is_none()) {
            return Try::Done(Outcome::with(g.end_token(), vec![format!("no answer to {id}")]));
        }
        let (b_at, probe_at) = (g.at(&bid).unwrap_or_default(), g.at(&probe).unwrap_or_default());
        if probe_at >= b_at {
            return Try::NotReached(format!(
                "the search ahead finished after {} ms, before the probe behind the duplicate was answered",
                ms(b_at)
            ));
        }
        let (Some((_, r1)), Some((_, r2))) = (g.get(&d1), g.get(&d2)) else {
            return Try::Done(Outcome::Error("lost an answer".into()));
        };
        if r1.ok() != Some(true) {
            return Try::Done(Outcome::token(format!("first-error:{}", r1.error_code().unwrap_or("?"))));
        }
        let mut p = Vec::new();
        if r2.ok() != Some(true) {
            p.push(format!(
                "the duplicate of a write in flight answered {} instead of the first outcome: it ran again \
                 instead of waiting for the first",
                r2.error_code().unwrap_or("?")
            ));
        } else if r1["data"] != r2["data"] || r1["data"]["created"] != true {
            p.push("the duplicate's data differs from the first outcome (it ran again)".into());
        }
        if read_root(c, &file) != content.as_bytes() {
            p.push(format!("{file} does not hold the written content"));
        }
        Try::Done(Outcome::with("result:ok", p))
    })
}

/// PC-4.5 (audit gap 4): the *waiting* duplicate is aborted, not its primary. With one slot
/// and two queue places a write W1 (`overwrite:false`) and its duplicate W2 (same key and
/// payload) wait behind a slow search; an abort of W2 and a probe follow. Confirmed when the
/// abort or the probe is answered before the search's result. Then W2 had produced nothing:
/// the abort must say `aborted:true` and W2 must never get a result (not even the primary's
/// outcome replayed to it), and W1 must still run and be answered `ok` — aborting the waiter
/// never cancels the primary.
fn idem_abort_waiting_duplicate(c: &mut Ctx<'_>) -> Outcome {
    if c.target.admitted.limits().max_queued_requests < 2 {
        return Outcome::Skip("the grant allows fewer than 2 queued requests: the duplicate cannot wait".into());
    }
    provoke(c, "an abort of a duplicate waiting on its primary", |c, i| {
        let mut b = c.bind_frame();
        b["limits"]["maxConcurrentRequests"] = json!(1);
        b["limits"]["maxQueuedRequests"] = json!(2);
        let mut conn = match c.bind_with(&b) {
            Ok(x) => x,
            Err(o) => return Try::Done(o),
        };
        let file = format!("waiter-{}.txt", i + 1);
        c.allow(&[&file]);
        let content = format!("written by the primary, attempt {}\n", i + 1);
        let payload = req::write(&file, &content).overwrite(false);
        let (bid, bkey) = c.ids();
        let key = format!("waiter-key-{}", i + 1);
        let (w1, w2) = (format!("waiter-{}-a", i + 1), format!("waiter-{}-b", i + 1));
        let (aid, probe) = (format!("abort-waiter-{}", i + 1), format!("probe-{}", i + 1));
        let frames = [
            c.invoke(&bid, &bkey, blocker()),
            c.invoke(&w1, &key, payload.clone()),
            c.invoke(&w2, &key, payload),
            c.abort(&aid, &w2),
            c.abort(&probe, "never-sent-probe"),
        ];
        conn.note(&format!(
            "bound with one slot and two queue places: {w2} waits on {w1}, both behind {bid}; {aid} aborts {w2}"
        ));
        let t0 = Instant::now();
        conn.send_all(&frames);
        let ids = [bid.as_str(), w1.as_str(), aid.as_str(), probe.as_str()];
        let mut g = gather(&mut conn, t0, c.step() * 20, |g| ids.iter().all(|id| g.get(id).is_some()));
        if let Some(id) = ids.iter().find(|id| g.get(id).is_none()) {
            let why = if *id == w1 {
                format!("no answer to {w1}, the primary: aborting the duplicate waiting on it must not cancel it")
            } else {
                format!("no answer to {id}")
            };
            return Try::Done(Outcome::with(g.end_token(), vec![why]));
        }
        let b_at = g.at(&bid).unwrap_or_default();
        let first_ack = g.at(&aid).unwrap_or_default().min(g.at(&probe).unwrap_or_default());
        if first_ack >= b_at {
            return Try::NotReached(format!(
                "the search ahead finished after {} ms, before the abort or the probe behind the duplicate was answered",
                ms(b_at)
            ));
        }
        // Anything more for the waiter comes within one step of the primary's result.
        keep_reading(&mut conn, t0, c.step(), &mut g, |g| g.get(&w2).is_some());
        let (Some((_, a)), Some((w1_at, r1))) = (g.get(&aid), g.get(&w1)) else {
            return Try::Done(Outcome::Error("lost an answer".into()));
        };
        let mut p = Vec::new();
        let token = match a.aborted() {
            Some(true) => "waiter-aborted",
            Some(false) => {
                p.push(format!(
                    "the abort of {w2}, a duplicate still waiting on {w1} (confirmed: answered before the search \
                     ahead finished), said aborted:false; it had produced no result, so it must be cancelled \
                     (aborted:true)"
                ));
                "aborted:false"
            }
            None => "aborted:?",
        };
        if let Some((w2_at, r2)) = g.get(&w2) {
            let what = match (r2.kind(), r2.ok()) {
                (Some("result"), Some(true)) => "the primary's outcome replayed to it".to_string(),
                (Some("result"), _) => format!("error {}", r2.error_code().unwrap_or("?")),
                (k, _) => k.unwrap_or("a frame").to_string(),
            };
            if a.aborted() == Some(true) {
                p.push(format!(
                    "{w2} was answered aborted:true and then got a result ({what}, {} ms after the send): no result \
                     may follow aborted:true (PC-4.5)",
                    ms(w2_at)
                ));
            } else if w2_at < w1_at {
                p.push(format!(
                    "{w2} was answered ({what}) before its primary {w1}: a duplicate in flight waits for the first"
                ));
            }
        }
        if r1.ok() != Some(true) {
            p.push(format!(
                "{w1}, the primary, answered {} instead of ok: aborting the duplicate waiting on it must leave it alone",
                r1.error_code().unwrap_or("?")
            ));
        } else if read_root(c, &file) != content.as_bytes() {
            p.push(format!("{file} does not hold the primary's content"));
        }
        Try::Done(Outcome::with(token, p))
    })
}

/// The primary of an in-flight duplicate is aborted while both wait in the queue: the primary
/// never runs, and the duplicate, which was waiting for its outcome, must still be answered
/// (run in its place, or refused with no side effect), never left without a result.
fn idem_abort_primary_of_duplicate(c: &mut Ctx<'_>) -> Outcome {
    if c.target.admitted.limits().max_queued_requests < 2 {
        return Outcome::Skip("the grant allows fewer than 2 queued requests: the duplicate cannot wait".into());
    }
    provoke(c, "an aborted primary with a duplicate waiting", |c, i| {
        let mut b = c.bind_frame();
        b["limits"]["maxConcurrentRequests"] = json!(1);
        b["limits"]["maxQueuedRequests"] = json!(2);
        let mut conn = match c.bind_with(&b) {
            Ok(x) => x,
            Err(o) => return Try::Done(o),
        };
        let file = format!("dup-aborted-{}.txt", i + 1);
        c.allow(&[&file]);
        let content = format!("written by the duplicate, attempt {}\n", i + 1);
        let payload = req::write(&file, &content).overwrite(false);
        let (bid, bkey) = c.ids();
        let key = format!("dup-aborted-key-{}", i + 1);
        let (d1, d2) = (format!("dup-aborted-{}-a", i + 1), format!("dup-aborted-{}-b", i + 1));
        let aid = format!("abort-primary-{}", i + 1);
        let frames = [
            c.invoke(&bid, &bkey, blocker()),
            c.invoke(&d1, &key, payload.clone()),
            c.invoke(&d2, &key, payload),
            c.abort(&aid, &d1),
        ];
        conn.note(&format!(
            "bound with one slot and two queue places: {d1} and its duplicate {d2} wait behind {bid}; {aid} aborts {d1}"
        ));
        let t0 = Instant::now();
        conn.send_all(&frames);
        let mut g = gather(&mut conn, t0, c.step() * 20, |g| {
            g.get(&bid).is_some() && g.get(&aid).is_some_and(|(_, a)| a.aborted() != Some(true) || g.get(&d2).is_some())
        });
        let Some((a_at, a)) = g.get(&aid).map(|(t, a)| (t, a.clone())) else {
            return Try::Done(Outcome::with(g.end_token(), vec![format!("no aborted frame for {aid}")]));
        };
        let Some(b_at) = g.at(&bid) else {
            return Try::Done(Outcome::with(g.end_token(), vec![format!("no result for the search {bid}")]));
        };
        if a_at >= b_at {
            return Try::NotReached(format!(
                "the search ahead finished after {} ms, before the abort of the primary was answered",
                ms(b_at)
            ));
        }
        if a.aborted() != Some(true) {
            // Answered while the primary still waited: judged by adapter.abort.queued-target.
            return Try::NotReached(format!("the queued primary {d1} was answered aborted:false"));
        }
        keep_reading(&mut conn, t0, c.step(), &mut g, |_| false);
        let mut p = Vec::new();
        if let Some(t) = g.at(&d1) {
            p.push(format!("the aborted primary's result came after aborted:true (at {} ms)", ms(t)));
        }
        let on_disk = read_root(c, &file);
        match g.get(&d2).map(|(_, r)| r.clone()) {
            None => p.push(format!(
                "{d2}, a duplicate waiting for {d1}, was never answered after {d1} was aborted: every invoke \
                 gets one result unless it is itself aborted (it may run in the aborted primary's place, or be \
                 refused with no side effect)"
            )),
            Some(r) if r.ok() == Some(true) => {
                if on_disk != content.as_bytes() {
                    p.push(format!("{d2} answered ok, yet {file} does not hold the written content"));
                }
            }
            Some(r) => {
                if c.target.root.join(&file).exists() {
                    p.push(format!(
                        "{d2} answered {}, yet {file} exists: the aborted primary (or the refused duplicate) \
                         left a side effect",
                        r.error_code().unwrap_or("?")
                    ));
                }
            }
        }
        Try::Done(Outcome::with("duplicate-answered", p))
    })
}

// ---------------------------------------------------------------- revoke / EOF

fn revoke_replies_and_closes(c: &mut Ctx<'_>) -> Outcome {
    let mut conn = tryo!(c.bound());
    conn.send(&c.revoke());
    let r = conn.recv();
    // The identity and closed keys of revoked are judged on every frame.
    match r.frame() {
        Some(v) if v.kind() == Some("revoked") => {
            let after = conn.expect_close(c.step());
            Outcome::token(if after == Recv::Closed { "revoked-closed" } else { "revoked-open" })
        }
        _ => Outcome::token(token(&r)),
    }
}
fn revoke_nothing_after(c: &mut Ctx<'_>) -> Outcome {
    let mut conn = tryo!(c.bound());
    let mut bytes = serde_json::to_vec(&c.revoke()).unwrap_or_default();
    bytes.push(b'\n');
    bytes.extend(serde_json::to_vec(&c.invoke("after-1", "after-k", req::write("after.txt", "x"))).unwrap_or_default());
    bytes.push(b'\n');
    conn.send_raw(&bytes);
    let mut saw_result = false;
    loop {
        let r = conn.recv();
        match r.frame() {
            Some(v) if v.kind() == Some("result") => saw_result = true,
            Some(_) => {}
            None => break,
        }
    }
    std::thread::sleep(Duration::from_millis(50));
    let written = c.target.root.join("after.txt").exists();
    Outcome::token(if saw_result || written { "executed-after-revoke" } else { "nothing-after-revoke" })
}
/// SPEC 4.5: EOF is revocation, so the adapter may answer `revoked` before it closes.
fn eof_closes(c: &mut Ctx<'_>) -> Outcome {
    let mut conn = tryo!(c.bound());
    conn.shutdown_write();
    let mut r = conn.expect_close(c.step());
    if r.frame().is_some_and(|v| v.kind() == Some("revoked")) {
        r = conn.expect_close(c.step());
    }
    Outcome::token(token(&r))
}

/// Revoke or EOF with work in flight: with one slot and one queue place, a write waits behind
/// a slow search when the binding ends. The write never runs (no file, no result), nothing
/// follows `revoked`, and the connection closes. Confirmed when the adapter answers `revoked`
/// (or, for EOF, the abort probe sent before it) before the search's result.
fn ends_with_work_queued(c: &mut Ctx<'_>, eof: bool) -> Outcome {
    if c.target.admitted.limits().max_queued_requests == 0 {
        return Outcome::Skip("the grant allows no queue (maxQueuedRequests 0): no request can wait".into());
    }
    let what = if eof { "EOF" } else { "revoke" };
    provoke(c, &format!("{what} with a write queued"), |c, i| {
        let mut b = c.bind_frame();
        b["limits"]["maxConcurrentRequests"] = json!(1);
        b["limits"]["maxQueuedRequests"] = json!(1);
        let mut conn = match c.bind_with(&b) {
            Ok(x) => x,
            Err(o) => return Try::Done(o),
        };
        let file = format!("{}-queued-{}.txt", if eof { "eof" } else { "revoke" }, i + 1);
        c.allow(&[&file]);
        let (bid, bkey) = c.ids();
        let (tid, tkey) = c.ids();
        let probe = format!("probe-{}", i + 1);
        let mut frames =
            vec![c.invoke(&bid, &bkey, blocker()), c.invoke(&tid, &tkey, req::write(&file, "must never run"))];
        frames.push(if eof { c.abort(&probe, "never-sent-probe") } else { c.revoke() });
        conn.note(&format!("bound with one slot and one queue place: {tid} waits behind the search {bid}"));
        let t0 = Instant::now();
        conn.send_all(&frames);
        let mut g = Gathered::default();
        if eof {
            // EOF only once the probe shows the write is queued: an adapter may drop what it
            // has not sent yet when it sees EOF, the probe's answer too.
            keep_reading(&mut conn, t0, c.step() * 20, &mut g, |g| {
                g.get(&probe).is_some() || g.get(&bid).is_some() || g.get(&tid).is_some()
            });
            if g.get(&tid).is_some_and(|(_, v)| v.error_code() == Some(AdapterCode::Busy.as_str())) {
                return Try::Done(Outcome::with(
                    "busy-early",
                    vec![format!("{tid} was refused busy although a queue place was free (maxQueuedRequests 1)")],
                ));
            }
            if g.get(&probe).is_none() || g.get(&bid).is_some() || g.get(&tid).is_some() {
                return Try::NotReached(format!(
                    "the search ahead finished ({}) before the probe behind the write was answered",
                    g.at(&bid).map(|t| format!("after {} ms", ms(t))).unwrap_or_else(|| g.end_token())
                ));
            }
            conn.shutdown_write();
        }
        keep_reading(&mut conn, t0, c.step() * 5, &mut g, |_| false);
        if g.end == Some(Recv::Timeout) {
            return Try::Done(Outcome::with(
                if eof { "open-after-eof" } else { "open-after-revoke" },
                vec![format!("the connection was still open 5 steps after {what}")],
            ));
        }
        // Time for work an adapter wrongly let run to reach the disk.
        std::thread::sleep(Duration::from_millis(200));
        let revoked = g.kind("revoked").map(|(t, _)| t);
        let b_at = g.at(&bid);
        // Revoke: `revoked` before the search's result. EOF: the search stopped unanswered, or
        // `revoked` before its result.
        let reached = match (revoked, b_at) {
            (Some(r), Some(b)) => r < b,
            (_, None) => true,
            (None, Some(_)) => false,
        };
        if !eof && revoked.is_none() {
            return Try::Done(Outcome::with("closed-without-revoked", vec!["revoke must be answered revoked".into()]));
        }
        if !reached {
            return Try::NotReached(format!(
                "the search ahead finished after {} ms, before the adapter answered anything sent behind it",
                b_at.map(ms).unwrap_or(0)
            ));
        }
        if let Some((_, v)) = g.get(&tid).filter(|(t, _)| revoked.is_none_or(|r| *t < r)) {
            if v.error_code() == Some(AdapterCode::Busy.as_str()) {
                return Try::Done(Outcome::with(
                    "busy-early",
                    vec![format!("{tid} was refused busy although a queue place was free (maxQueuedRequests 1)")],
                ));
            }
        }
        let mut p = Vec::new();
        if let Some(r) = revoked {
            for (t, v) in g.frames.iter().filter(|(t, _)| *t > r) {
                p.push(format!(
                    "a {} frame for {} came after revoked ({} ms)",
                    v.kind().unwrap_or("?"),
                    v.request_id().unwrap_or("-"),
                    ms(*t)
                ));
            }
        }
        if let Some(t) = g.at(&tid) {
            p.push(format!(
                "the write waiting in the queue was answered (at {} ms) after {what}: it must never run",
                ms(t)
            ));
        }
        if c.target.root.join(&file).exists() {
            p.push(format!("the write waiting in the queue ran after {what}: {file} was created"));
        }
        Try::Done(Outcome::with(if eof { "closed" } else { "revoked-closed" }, p))
    })
}
fn revoke_queued_work(c: &mut Ctx<'_>) -> Outcome {
    ends_with_work_queued(c, false)
}
fn eof_queued_work(c: &mut Ctx<'_>) -> Outcome {
    ends_with_work_queued(c, true)
}

// ---------------------------------------------------------------- secret hygiene

fn plant_secret(c: &mut Ctx<'_>) {
    let h = c.target.handle().to_string();
    let _ = std::fs::create_dir_all(c.target.root.join("secret"));
    let _ = std::fs::write(c.target.root.join("secret/grant.json"), format!("{{\"capabilityHandle\":\"{h}\"}}\n"));
}
fn secret_read(c: &mut Ctx<'_>) -> Outcome {
    plant_secret(c);
    c.allow(&["secret", "secret/grant.json"]);
    tok(c.one(req::read("secret/grant.json")))
}
fn secret_search(c: &mut Ctx<'_>) -> Outcome {
    plant_secret(c);
    c.allow(&["secret", "secret/grant.json"]);
    tok(c.one(req::search("secret", "capabilityHandle")))
}
fn secret_list_name(c: &mut Ctx<'_>) -> Outcome {
    let h = c.target.handle().to_string();
    let _ = std::fs::create_dir_all(c.target.root.join("secret"));
    let name = format!("n-{h}");
    if name.len() > 255 {
        return Outcome::Skip("the handle is too long to be a file name".into());
    }
    let _ = std::fs::write(c.target.root.join("secret").join(&name), "x");
    let rel = format!("secret/{name}");
    c.allow(&["secret", &rel]);
    tok(c.one(req::list("secret")))
}

/// SHOULD (PC-4.5, as `adapter.secret.windowed-read`): a file holding the bound handle is
/// not read out in windows each shorter than the handle, whatever the handle's length. The
/// handles a runner mints are all 43 characters, so an adapter that finds the bound handle in
/// a file only by its scan for handles of that shape passes `adapter.secret.windowed-read`; an
/// operator may write a grant of another length by hand (any 32-512 base64url characters).
/// With such a grant (selftest writes one, 86 characters), the runner binds with it, lays a
/// file holding that handle and reads it in windows of a third of its length: joined, they
/// must not give it back. (A read of the whole file proves nothing here: a result line that
/// holds the bound handle is refused by the adapter's last check before sending, whatever its
/// content scan found.) The file is removed after the case.
fn secret_long_handle_windowed_read(c: &mut Ctx<'_>) -> Outcome {
    let Some(long) = c.target.long.clone() else {
        return Outcome::Skip(
            "the runner holds no grant with a handle of another length than 43 (selftest writes one)".into(),
        );
    };
    if !long.grants(ToolOperation::FsRead) {
        return Outcome::Skip("the long-handle grant does not grant fs.read".into());
    }
    let name = "long-handle-grant.json";
    let body = format!("{{\"capabilityHandle\":\"{}\"}}\n", long.handle().expose());
    if std::fs::write(c.target.root.join(name), body).is_err() {
        return Outcome::Error("cannot lay the file of the case".into());
    }
    let out = windowed_read(c, &long, name);
    let _ = std::fs::remove_file(c.target.root.join(name));
    out
}

/// Connect and bind with `grant` (one of the target's); the failing outcome if no `bound`
/// comes back.
fn bind_as(c: &mut Ctx<'_>, grant: &crate::contract::Descriptor) -> Result<super::conn::Conn, Outcome> {
    let mut conn = c.connect_as(grant)?;
    conn.send(&grant.bind_frame());
    let r = conn.recv();
    match r.frame() {
        Some(v) if v.kind() == Some("bound") => Ok(conn),
        _ => Err(Outcome::with(format!("bind-{}", r.describe()), vec!["no bound for a valid bind".into()])),
    }
}

/// The second grant the runner minted, for the cases that lay its handle in this root; the
/// skip when there is none or the descriptor does not grant `fs.read`.
fn other_grant(c: &Ctx<'_>) -> Result<crate::contract::Descriptor, Outcome> {
    let Some(other) = c.target.narrow.clone() else {
        return Err(Outcome::Skip("the runner minted no second grant (it does with --command and in selftest)".into()));
    };
    if !granted(c, "fs.read") {
        return Err(Outcome::Skip("the descriptor does not grant fs.read".into()));
    }
    Ok(other)
}

/// PC-4.5: the handle of *another* grant the adapter serves, in a file of this root (another
/// session's descriptor lying there). The runner lays a file holding the second grant it
/// minted (selftest, `--command`) and reads it through the descriptor's binding: it must be
/// refused `capability_in_content`, or that session's capability leaves through this one.
/// SHOULD: the protocol text binds an adapter to its connection's own handle; the reference
/// looks for every grant's (a MUST of the reference, PC-4.5). The file is removed at the end.
fn secret_other_grant_handle(c: &mut Ctx<'_>) -> Outcome {
    let other = match other_grant(c) {
        Ok(g) => g,
        Err(skip) => return skip,
    };
    let name = "other-grant.json";
    let body = format!("{{\"capabilityHandle\":\"{}\"}}\n", other.handle().expose());
    if std::fs::write(c.target.root.join(name), body).is_err() {
        return Outcome::Error("cannot lay the file of the case".into());
    }
    let out = tok(c.one(req::read(name)));
    let _ = std::fs::remove_file(c.target.root.join(name));
    out
}

/// The base64url bytes `adapter.secret.other-grant-handle-inside-run` lays on each side of
/// the other grant's handle: the handle is a part of one longer run of the alphabet.
const INSIDE_RUN: (&str, &str) = ("Zm9vYmFyX2Jhei1xdXV4", "-_0");

/// SHOULD (PC-4.5, as `adapter.secret.other-grant-handle`): another grant's handle inside a
/// longer run of base64url bytes (20 before it, 3 after, in a one-line JSON string) is still
/// found: the handle's bytes are in the file whatever surrounds them, so a scan that only
/// looks at whole tokens, or at the first window of each run, reads it out. The file is
/// removed after the case.
fn secret_other_grant_inside_run(c: &mut Ctx<'_>) -> Outcome {
    let other = match other_grant(c) {
        Ok(g) => g,
        Err(skip) => return skip,
    };
    let name = "other-grant-run.json";
    let (before, after) = INSIDE_RUN;
    let body = format!("{{\"capabilityHandle\":\"{before}{}{after}\"}}\n", other.handle().expose());
    if std::fs::write(c.target.root.join(name), body).is_err() {
        return Outcome::Error("cannot lay the file of the case".into());
    }
    let out = tok(c.one(req::read(name)));
    let _ = std::fs::remove_file(c.target.root.join(name));
    out
}

/// Where `adapter.secret.other-grant-handle-across-chunks` cuts the handle: this many of its
/// bytes lie before the multiple of 64 KiB, the rest after it (two whole 8-byte words and a
/// part of a third before the cut, for a scan that skips words).
const ACROSS_CUT: u64 = 20;

/// SHOULD (PC-4.5, as `adapter.secret.other-grant-handle`): another grant's handle cut by a
/// chunk boundary of the adapter's content scan is still found. The runner cannot know the
/// adapter's chunk size, so the handle is laid across each multiple of 64 KiB up to 1 MiB in
/// turn, in a sparse file of zero bytes (a few KiB on disk whatever its length), and a small
/// window around it is read each time. Then, at each multiple again, a run of 64 base64url
/// bytes ends exactly at it and the handle lies 4 KiB after it: a scan that carries a run
/// across a chunk boundary must go on past the separator that starts the next chunk. A
/// refusal other than `capability_in_content` is inconclusive: the case provoked that one
/// only. The file is removed after the case.
fn secret_other_grant_across_chunks(c: &mut Ctx<'_>) -> Outcome {
    let other = match other_grant(c) {
        Ok(g) => g,
        Err(skip) => return skip,
    };
    let name = "other-grant-chunks.bin";
    let path = c.target.root.join(name);
    let out = across_chunks(c, name, &path, other.handle().expose().as_bytes());
    let _ = std::fs::remove_file(&path);
    out
}
fn across_chunks(c: &mut Ctx<'_>, name: &str, path: &std::path::Path, handle: &[u8]) -> Outcome {
    use std::os::unix::fs::FileExt;
    let want = format!("error:{}", AdapterCode::CapabilityInContent.as_str());
    let mut conn = tryo!(c.bound());
    // First the handle across each multiple of 64 KiB; then a run of the alphabet ending at
    // each multiple, a zero byte starting the next chunk, the handle a few KiB into it.
    let layouts = [false, true].into_iter().flat_map(|run_ends| (1..=16u64).map(move |k| (run_ends, k)));
    for (run_ends, k) in layouts {
        let cut = k * 64 * 1024;
        let (at, len) = if run_ends { (cut + 4096, cut + 8192) } else { (cut - ACROSS_CUT, cut + 64) };
        let laid = std::fs::File::create(path)
            .and_then(|f| {
                f.set_len(len)?;
                if run_ends {
                    f.write_all_at(&[b'A'; 64], cut - 64)?;
                }
                f.write_all_at(handle, at)
            })
            .is_ok();
        if !laid {
            return Outcome::Error("cannot lay the file of the case".into());
        }
        let r = c.call(&mut conn, req::read(name).offset(at - 8).max_bytes(64));
        let t = token(&r);
        if t == want {
            continue;
        }
        let (place, rule) = if run_ends {
            (
                format!("4 KiB after offset {cut} ({k} × 64 KiB), where a run of 64 base64url bytes ends and a zero byte follows"),
                "go on past a chunk that starts by ending a run",
            )
        } else {
            (format!("across offset {cut} ({k} × 64 KiB)"), "find a handle cut by a chunk boundary")
        };
        if data(&r).is_some() {
            return Outcome::with(
                t,
                vec![format!(
                    "a window of {name} holding another grant's handle {place} was read out: a content scan must {rule} \
                     (capability_in_content)"
                )],
            );
        }
        return Outcome::Error(format!(
            "inconclusive: the read of {name} with the handle {place} answered `{t}`, not the capability_in_content it \
             provokes, so nothing was judged"
        ));
    }
    Outcome::token(want)
}

/// PC-4.5 (audit gap 2): the handle in a *match path*. The file's name holds the handle and
/// its content only the query, so a content guard passes it and only a scan of the paths a
/// search returns can refuse it.
fn secret_search_match_path(c: &mut Ctx<'_>) -> Outcome {
    let h = c.target.handle().to_string();
    let name = format!("m-{h}.txt");
    if name.len() > 255 {
        return Outcome::Skip("the handle is too long to be a file name".into());
    }
    let _ = std::fs::create_dir_all(c.target.root.join("secret"));
    if std::fs::write(c.target.root.join("secret").join(&name), "needle here\n").is_err() {
        return Outcome::Error("cannot lay the file whose name holds the handle".into());
    }
    let rel = format!("secret/{name}");
    c.allow(&["secret", &rel]);
    tok(c.one(req::search("secret", "needle")))
}

/// Whether `pieces` (texts an adapter returned, in order) give `h` back: one holds it whole, or
/// one ends with a prefix of it and another starts with the rest (overlaps allowed).
fn reassembles(pieces: &[String], h: &str) -> bool {
    if pieces.concat().contains(h) {
        return true;
    }
    (1..h.len()).any(|k| {
        pieces.iter().any(|a| a.ends_with(&h[..k])) && (1..=k).any(|j| pieces.iter().any(|b| b.starts_with(&h[j..])))
    })
}

/// SHOULD (issue 24 item 5): the file holding the handle read in windows each shorter than
/// the handle; concatenated, the windows must not give it back (SPEC 4.5: the reference
/// refuses every window of such a file, `capability_in_content`).
fn secret_windowed_read(c: &mut Ctx<'_>) -> Outcome {
    plant_secret(c);
    c.allow(&["secret", "secret/grant.json"]);
    let grant = c.target.admitted.clone();
    windowed_read(c, &grant, "secret/grant.json")
}

/// Read `path`, a file holding `grant`'s handle, in windows each shorter than the handle on a
/// connection bound with `grant`; `reassembled` when the windows joined give the handle back.
fn windowed_read(c: &mut Ctx<'_>, grant: &crate::contract::Descriptor, path: &str) -> Outcome {
    let h = grant.handle().expose().to_string();
    let size = read_root(c, path).len() as u64;
    let window = (h.len() as u64 / 3).max(1);
    let mut conn = tryo!(bind_as(c, grant));
    let (mut offset, mut pieces, mut refused) = (0, Vec::new(), None);
    while offset < size && pieces.len() < 64 {
        let (id, key) = c.ids();
        let f = req::invoke_frame(
            &grant.identity(),
            &id,
            &c.unique_key(&key),
            &req::read(path).offset(offset).max_bytes(window),
        );
        conn.send(&f);
        let r = conn.recv_for(&id);
        let Some(d) = data(&r) else {
            refused = Some(token(&r));
            break;
        };
        let n = d["bytesRead"].as_u64().unwrap_or(0);
        pieces.push(d["content"].as_str().unwrap_or_default().to_string());
        if n == 0 {
            break;
        }
        offset += n;
    }
    if reassembles(&pieces, &h) {
        return Outcome::with(
            "reassembled",
            vec![format!(
                "{} fs.read windows of {window} bytes of {path}, each shorter than the handle, give it back \
             when joined: refuse every window of a file that holds the handle (capability_in_content)",
                pieces.len()
            )],
        );
    }
    not_reassembled(refused, !pieces.is_empty())
}

/// SHOULD (PC-4.5, as `adapter.secret.windowed-read`): fs.edit of the file holding the handle
/// must not tell, answer by answer, which strings occur in it. Two edits of
/// `secret/grant.json`, each with `newText` equal to its `oldText` (so an executed one changes
/// no byte): one whose `oldText` is the handle's first third (it occurs once), one whose
/// `oldText` occurs nowhere. Answered alike (the reference refuses both
/// `capability_in_content`), they tell nothing; a replacement for the first and
/// `edit_not_found` for the second tell that the piece is in the file, and so, probe by probe,
/// the handle. A refusal of another kind is inconclusive.
fn secret_edit_probe(c: &mut Ctx<'_>) -> Outcome {
    let h = c.target.handle().to_string();
    plant_secret(c);
    c.allow(&["secret", "secret/grant.json"]);
    let piece: String = h.chars().take((h.chars().count() / 3).max(1)).collect();
    let absent = "pi-conform-absent-text";
    let mut conn = tryo!(c.bound());
    let mut answers = Vec::new();
    for old in [piece.as_str(), absent] {
        let r = c.call(&mut conn, req::edit("secret/grant.json", &[(old, old)]));
        let t = token(&r);
        let told = [
            "result:ok".to_string(),
            format!("error:{}", AdapterCode::EditNotFound.as_str()),
            format!("error:{}", AdapterCode::EditAmbiguous.as_str()),
            format!("error:{}", AdapterCode::CapabilityInContent.as_str()),
        ];
        if !told.contains(&t) {
            return Outcome::Error(format!("inconclusive: an fs.edit of secret/grant.json was answered `{t}`"));
        }
        answers.push(t);
    }
    if answers[0] != answers[1] {
        return Outcome::with(
            "told",
            vec![format!(
                "fs.edit of secret/grant.json, which holds the handle, answered `{}` for an oldText that is a third of \
                 the handle and `{}` for one that occurs nowhere: the answers tell which strings occur in the file, so \
                 the handle can be had probe by probe; refuse every edit of a file holding it (capability_in_content)",
                answers[0], answers[1]
            )],
        );
    }
    Outcome::token("not-told")
}

/// The outcome of a windowed secret case whose pieces did not give the handle back: it passes
/// when the adapter answered windows or refused the file `capability_in_content`; any other
/// refusal before a single window tested nothing (inconclusive).
fn not_reassembled(refused: Option<String>, answered: bool) -> Outcome {
    let in_content = format!("error:{}", AdapterCode::CapabilityInContent.as_str());
    match refused {
        None => Outcome::token("not-reassembled"),
        Some(t) if t == in_content || answered => Outcome::token("not-reassembled"),
        Some(t) => Outcome::Error(format!(
            "inconclusive: the adapter answered `{t}` before any window, neither a window nor \
             capability_in_content, so nothing was tested"
        )),
    }
}

/// SHOULD (issue 24 item 5): one long line holds the handle; two searches for markers placed
/// so that each match window (PC-5.3.search: 4096 units from 1024 before the match) holds
/// one half of it must not give it back when joined.
fn secret_windowed_search(c: &mut Ctx<'_>) -> Outcome {
    let h = c.target.handle().to_string();
    let (s, k) = (5000usize, h.len() / 2);
    let (m1, m2) = (s + k - 3072, s + k + 1024);
    let mut line = vec![b'.'; m2 + 4096 + 64];
    line[s..s + h.len()].copy_from_slice(h.as_bytes());
    line[m1..m1 + 9].copy_from_slice(b"MARK-ONE.");
    line[m2..m2 + 9].copy_from_slice(b"MARK-TWO.");
    line.push(b'\n');
    let _ = std::fs::create_dir_all(c.target.root.join("secret"));
    if std::fs::write(c.target.root.join("secret/long.txt"), &line).is_err() {
        return Outcome::Error("cannot lay secret/long.txt".into());
    }
    c.allow(&["secret", "secret/long.txt"]);
    let mut conn = tryo!(c.bound());
    let (mut pieces, mut refused) = (Vec::new(), None);
    for marker in ["MARK-ONE", "MARK-TWO"] {
        let r = c.call(&mut conn, req::search("secret/long.txt", marker));
        match data(&r) {
            Some(_) => pieces.extend(matches(&r).iter().map(|m| m["text"].as_str().unwrap_or_default().to_string())),
            None => {
                refused.get_or_insert(token(&r));
            }
        }
    }
    if reassembles(&pieces, &h) {
        return Outcome::with(
            "reassembled",
            vec!["two fs.search match windows of secret/long.txt, each holding part of the handle, give it back when \
             joined: refuse a search of a file that holds the handle (capability_in_content)"
                .into()],
        );
    }
    not_reassembled(refused, !pieces.is_empty())
}

/// A case whose outcome carries every contract violation of the frames the adapter sent.
macro_rules! judged {
    ($f:ident) => {{
        fn judged_case(c: &mut Ctx<'_>) -> Outcome {
            let o = $f(c);
            c.judged(o)
        }
        judged_case as CaseFn
    }};
}

/// Every case implementation by id; each is judged ([`Ctx::judged`]).
pub fn registry() -> Vec<(&'static str, CaseFn)> {
    vec![
        ("adapter.bind.echo-exact", judged!(bind_echo_exact)),
        ("adapter.bind.bound-without-handle", judged!(bind_bound_without_handle)),
        ("adapter.bind.narrower-echo", judged!(bind_narrower)),
        ("adapter.bind.limit-above-grant", judged!(bind_limit_above_grant)),
        ("adapter.bind.operation-outside-grant", judged!(bind_operation_outside_grant)),
        ("adapter.bind.duplicate-key", judged!(bind_duplicate_key)),
        ("adapter.bind.each-identity-field-wrong", judged!(bind_each_identity_field_wrong)),
        ("adapter.bind.each-limit-above-grant", judged!(bind_each_limit_above_grant)),
        ("adapter.bind.after-refused-bind", judged!(bind_after_refused_bind)),
        ("adapter.bind.one-connection-per-generation", judged!(bind_one_connection_per_generation)),
        ("adapter.bind.two-waiting-connections", judged!(bind_two_waiting_connections)),
        ("adapter.bind.wrong-protocol-version", judged!(bind_wrong_protocol_version)),
        ("adapter.bind.wrong-adapter-version", judged!(bind_wrong_adapter_version)),
        ("adapter.bind.fit-check", judged!(bind_fit_check)),
        ("adapter.bind.escaped-spelling", judged!(bind_escaped_spelling)),
        ("adapter.bind.number-spellings", judged!(bind_number_spellings)),
        ("adapter.bind.escaped-unknown-key", judged!(bind_escaped_unknown_key)),
        ("adapter.bind.malformed-operations-and-limits", judged!(bind_malformed_operations_and_limits)),
        ("adapter.invoke.unknown-frame-key", judged!(invoke_unknown_frame_key)),
        ("adapter.invoke.unknown-frame-key.closes", judged!(invoke_unknown_frame_key)),
        ("adapter.invoke.handle-in-payload", judged!(invoke_handle_in_payload)),
        ("adapter.invoke.unknown-payload-key", judged!(invoke_unknown_payload_key)),
        ("adapter.invoke.payload-wrong-type", judged!(invoke_payload_wrong_type)),
        ("adapter.invoke.line-at-max-request-bytes", judged!(invoke_line_at_max_request_bytes)),
        ("adapter.invoke.ungranted-operation", judged!(invoke_ungranted_operation)),
        ("adapter.invoke.oversize-line", judged!(invoke_oversize_line)),
        ("adapter.invoke.partial-line-over-limit", judged!(invoke_partial_line_over_limit)),
        ("adapter.invoke.strict-lines", judged!(invoke_strict_lines)),
        ("adapter.invoke.case-variants", judged!(invoke_case_variants)),
        ("adapter.invoke.request-id-in-flight", judged!(invoke_request_id_in_flight)),
        ("adapter.invoke.escaped-spelling", judged!(invoke_escaped_spelling)),
        ("adapter.invoke.escaped-duplicate-key", judged!(invoke_escaped_duplicate_key)),
        ("adapter.path.empty", judged!(path_empty)),
        ("adapter.path.absolute", judged!(path_absolute)),
        ("adapter.path.backslash", judged!(path_backslash)),
        ("adapter.path.control-character", judged!(path_control)),
        ("adapter.path.dotdot-escape", judged!(path_dotdot)),
        ("adapter.path.dotdot-inner", judged!(path_dotdot_inner)),
        ("adapter.path.double-slash", judged!(path_double_slash)),
        ("adapter.path.dot-prefix", judged!(path_dot_prefix)),
        ("adapter.path.dot-segment", judged!(path_dot_segment)),
        ("adapter.path.dot-suffix", judged!(path_dot_suffix)),
        ("adapter.path.long-component", judged!(path_long_component)),
        ("adapter.path.dot-slash-root", judged!(path_dot_slash_root)),
        ("adapter.path.trailing-slash-dir", judged!(path_trailing_slash_dir)),
        ("adapter.path.trailing-slash-file", judged!(path_trailing_slash_file)),
        ("adapter.path.every-operation", judged!(path_every_operation)),
        ("adapter.path.adapter-forms-every-operation", judged!(path_adapter_forms_every_operation)),
        ("adapter.invoke.payload-closed-per-operation", judged!(invoke_payload_closed_per_operation)),
        ("adapter.secret.handle-inside-values", judged!(secret_handle_inside_values)),
        ("adapter.invoke.number-spellings", judged!(invoke_number_spellings)),
        ("adapter.special.every-operation", judged!(special_files_every_operation)),
        ("adapter.list.sorted-bytewise", judged!(list_sorted_bytewise)),
        ("adapter.list.types-and-sizes", judged!(list_types_and_sizes)),
        ("adapter.list.omits-symlinks", judged!(list_omits_symlinks)),
        ("adapter.list.omits-special-files", judged!(list_omits_special)),
        ("adapter.list.max-entries", judged!(list_max_entries)),
        ("adapter.list.max-entries-exact", judged!(list_max_entries_exact)),
        ("adapter.list.default-max-entries", judged!(list_default_max_entries)),
        ("adapter.list.not-a-directory", judged!(list_not_a_directory)),
        ("adapter.list.not-found", judged!(list_not_found)),
        ("adapter.list.mixed-directory", judged!(list_mixed)),
        ("adapter.list.unrepresentable-names", judged!(list_unrepresentable_names)),
        ("adapter.stat.file", judged!(stat_file)),
        ("adapter.stat.directory", judged!(stat_directory)),
        ("adapter.stat.root", judged!(stat_root)),
        ("adapter.stat.symlink-refused", judged!(stat_symlink)),
        ("adapter.stat.fifo-unsupported", judged!(stat_fifo)),
        ("adapter.stat.device-unsupported", judged!(stat_device)),
        ("adapter.stat.not-found", judged!(stat_not_found)),
        ("adapter.stat.modified-at-is-mtime", judged!(stat_modified_at)),
        ("adapter.stat.socket-unsupported", judged!(socket_unsupported)),
        ("adapter.read.empty-entries", judged!(empty_entries)),
        ("adapter.read.whole-file", judged!(read_whole)),
        ("adapter.read.ends-in-long-word", judged!(read_ends_in_long_word)),
        ("adapter.read.window", judged!(read_window)),
        ("adapter.read.max-bytes-exact", judged!(read_max_bytes_exact)),
        ("adapter.read.past-end", judged!(read_past_end)),
        ("adapter.read.offset-at-end", judged!(read_offset_at_end)),
        ("adapter.read.offset-inside-character", judged!(read_mid_char_offset)),
        ("adapter.read.window-ends-inside-character", judged!(read_window_ends_mid_char)),
        ("adapter.read.window-smaller-than-character", judged!(read_tiny_window)),
        ("adapter.read.not-utf8", judged!(read_not_utf8)),
        ("adapter.read.offset-inside-cut-character", judged!(read_offset_inside_cut_character)),
        ("adapter.read.larger-than-window", judged!(read_large_file)),
        ("adapter.read.offset-continues", judged!(read_continues)),
        ("adapter.read.directory", judged!(read_directory)),
        ("adapter.read.fifo-does-not-block", judged!(read_fifo)),
        ("adapter.read.symlink-refused", judged!(read_symlink)),
        ("adapter.search.literal-in-path-order", judged!(search_literal_order)),
        ("adapter.search.columns-in-scalar-values", judged!(search_columns_unicode)),
        ("adapter.search.non-overlapping", judged!(search_non_overlapping)),
        ("adapter.search.crlf-stripped", judged!(search_crlf)),
        ("adapter.search.long-line-window", judged!(search_long_line_window)),
        ("adapter.search.skips-binary-files", judged!(search_skips_binary)),
        ("adapter.search.named-binary-file", judged!(search_direct_binary)),
        ("adapter.search.strict-utf8-files", judged!(search_strict_utf8_files)),
        ("adapter.search.big-file-across-chunks", judged!(search_big_file_across_chunks)),
        ("adapter.search.long-line-window-start", judged!(search_window_start)),
        ("adapter.search.long-line-window-end", judged!(search_window_end)),
        ("adapter.search.query-with-newline", judged!(search_query_newline)),
        ("adapter.search.max-results", judged!(search_max_results)),
        ("adapter.search.max-results-exact", judged!(search_max_results_exact)),
        ("adapter.search.default-max-results", judged!(search_default_max_results)),
        ("adapter.search.max-results-limit", judged!(search_max_results_limit)),
        ("adapter.search.query-length-limit", judged!(search_query_length_limit)),
        ("adapter.search.case-sensitive", judged!(search_case_sensitive)),
        ("adapter.search.no-symlink-follow", judged!(search_no_symlink_follow)),
        ("adapter.search.literal-metacharacters", judged!(search_literal_metacharacters)),
        ("adapter.search.literal-text", judged!(search_literal_text)),
        ("adapter.search.mixed-directory", judged!(search_mixed)),
        ("adapter.write.create", judged!(write_create)),
        ("adapter.write.overwrite", judged!(write_overwrite)),
        ("adapter.write.empty-content", judged!(write_empty_content)),
        ("adapter.write.create-false", judged!(write_create_false)),
        ("adapter.write.create-false-existing", judged!(write_create_false_existing)),
        ("adapter.write.overwrite-false", judged!(write_overwrite_false)),
        ("adapter.write.overwrite-false-new", judged!(write_overwrite_false_new)),
        ("adapter.write.missing-parent", judged!(write_missing_parent)),
        ("adapter.write.onto-directory", judged!(write_onto_directory)),
        ("adapter.write.expected-digest-match", judged!(write_digest_match)),
        ("adapter.write.expected-digest-race", judged!(write_digest_race)),
        ("adapter.write.expected-digest-mismatch", judged!(write_digest_mismatch)),
        ("adapter.write.expected-digest-missing-file", judged!(write_digest_missing_file)),
        ("adapter.write.keeps-mode", judged!(write_keeps_mode)),
        ("adapter.write.symlink-target", judged!(write_through_symlink)),
        ("adapter.write.through-symlink-dir", judged!(write_through_symlink_dir)),
        ("adapter.write.atomic-overwrite", judged!(write_atomic_overwrite)),
        ("adapter.edit.sequential", judged!(edit_sequential)),
        ("adapter.edit.keeps-mode", judged!(edit_keeps_mode)),
        ("adapter.edit.grows-file", judged!(edit_grows_file)),
        ("adapter.edit.large-file", judged!(edit_large_file)),
        ("adapter.edit.memory-given-back", judged!(edit_memory_given_back)),
        ("adapter.edit.not-found", judged!(edit_not_found)),
        ("adapter.edit.ambiguous", judged!(edit_ambiguous)),
        ("adapter.edit.content-free-messages", judged!(edit_content_free_messages)),
        ("adapter.edit.overlapping-occurrences", judged!(edit_overlapping)),
        ("adapter.edit.all-or-nothing", judged!(edit_all_or_nothing)),
        ("adapter.edit.not-utf8", judged!(edit_not_utf8)),
        ("adapter.edit.expected-digest-mismatch", judged!(edit_digest_mismatch)),
        ("adapter.edit.expected-digest-match", judged!(edit_digest_match)),
        ("adapter.confine.symlink-first-component", judged!(confine_symlink_first)),
        ("adapter.confine.symlink-middle-component", judged!(confine_symlink_middle)),
        ("adapter.confine.list-through-symlink", judged!(confine_list_through_symlink)),
        ("adapter.confine.swap-race", judged!(confine_swap_race)),
        ("adapter.limits.response-budget", judged!(limits_response_budget)),
        ("adapter.limits.response-budget-exact", judged!(limits_response_budget_exact)),
        ("adapter.limits.response-budget-exact-match", judged!(limits_response_budget_exact_match)),
        ("adapter.limits.response-budget-escapes", judged!(limits_response_budget_escapes)),
        ("adapter.limits.busy-beyond-queue", judged!(limits_busy)),
        ("adapter.limits.never-busy-under-limit", judged!(limits_never_busy_under_limit)),
        ("adapter.limits.concurrency-held", judged!(limits_concurrency_held)),
        ("adapter.abort.unknown-target", judged!(abort_unknown)),
        ("adapter.abort.bad-ids", judged!(abort_bad_ids)),
        ("adapter.abort.finished-target", judged!(abort_finished)),
        ("adapter.abort.in-flight", judged!(abort_in_flight)),
        ("adapter.abort.running-target", judged!(abort_running)),
        ("adapter.abort.queued-target", judged!(abort_queued)),
        ("adapter.idempotency.replay-write", judged!(idem_replay_write)),
        ("adapter.idempotency.replay-any-spelling", judged!(idem_replay_any_spelling)),
        ("adapter.idempotency.replay-edit", judged!(idem_replay_edit)),
        ("adapter.idempotency.replay-failure", judged!(idem_replay_failure)),
        ("adapter.idempotency.conflict", judged!(idem_conflict)),
        ("adapter.idempotency.read-only-key-conflict", judged!(idem_read_only_key_conflict)),
        ("adapter.idempotency.in-flight-duplicate", judged!(idem_in_flight_duplicate)),
        ("adapter.idempotency.abort-primary-of-duplicate", judged!(idem_abort_primary_of_duplicate)),
        ("adapter.idempotency.abort-waiting-duplicate", judged!(idem_abort_waiting_duplicate)),
        ("adapter.idempotency.key-capacity", judged!(idem_key_capacity)),
        ("adapter.idempotency.key-capacity-evicts", judged!(idem_key_capacity_evicts)),
        ("adapter.idempotency.ttl", judged!(idem_ttl)),
        ("adapter.revoke.replies-and-closes", judged!(revoke_replies_and_closes)),
        ("adapter.revoke.nothing-after", judged!(revoke_nothing_after)),
        ("adapter.revoke.eof-closes", judged!(eof_closes)),
        ("adapter.revoke.queued-work", judged!(revoke_queued_work)),
        ("adapter.revoke.eof-queued-work", judged!(eof_queued_work)),
        ("adapter.secret.file-content", judged!(secret_read)),
        ("adapter.secret.search-text", judged!(secret_search)),
        ("adapter.secret.entry-name", judged!(secret_list_name)),
        ("adapter.secret.search-match-path", judged!(secret_search_match_path)),
        ("adapter.secret.windowed-read", judged!(secret_windowed_read)),
        ("adapter.secret.edit-probe", judged!(secret_edit_probe)),
        ("adapter.secret.windowed-search", judged!(secret_windowed_search)),
        ("adapter.secret.other-grant-handle", judged!(secret_other_grant_handle)),
        ("adapter.secret.other-grant-handle-across-chunks", judged!(secret_other_grant_across_chunks)),
        ("adapter.secret.other-grant-handle-inside-run", judged!(secret_other_grant_inside_run)),
        ("adapter.secret.long-handle-windowed-read", judged!(secret_long_handle_windowed_read)),
    ]
}
