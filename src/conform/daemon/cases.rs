//! The daemon cases. Each returns the observed outcome token (compared with the catalogue)
//! and any further problems; the engine adds the secret scan (no handle minted by the case
//! may come back from the daemon).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::probe::{BoundMode, InvokeMode, ScriptAt};
use super::{rtoken, DCtx};
use crate::conform::adapter::conn::{Conn, Recv};
use crate::conform::case::Outcome;
use crate::contract::types::protocol_v2;
use crate::contract::{AdapterCode, AdapterLimits, Code, DaemonCode, LimitValues};

/// A case implementation.
pub type DCaseFn = fn(&mut DCtx<'_>) -> Outcome;

macro_rules! tryo {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(o) => return o,
        }
    };
}

/// The default limits with another `requestTimeoutMs`.
fn limits_with_timeout(ms: u64) -> Value {
    AdapterLimits { request_timeout_ms: ms as i64, ..super::DEFAULT_LIMITS }.to_json()
}

fn data(r: &Recv) -> Value {
    r.frame().map_or(Value::Null, |v| v.data())
}

pub(super) fn one(c: &mut DCtx<'_>, v: Value) -> Result<Recv, Outcome> {
    let mut conn = c.connect()?;
    Ok(c.call(&mut conn, v))
}

fn tok(r: Result<Recv, Outcome>) -> Outcome {
    match r {
        Ok(r) => Outcome::token(rtoken(&r)),
        Err(o) => o,
    }
}

/// The last dotted segment of a `details.field`: SPEC §3.2 fixes codes, not field spellings,
/// so a field is compared only by the member it names (`descriptor.binding.extra`,
/// `binding.extra` and `extra` all name `extra`).
pub fn last_segment(field: &str) -> &str {
    field.rsplit('.').next().unwrap_or(field)
}

/// Judge the refusal a negative case provoked. `code` is the code the case provokes and
/// `member` the member it put the fault in (when the daemon names one).
///
/// - accepted (`ok:true`) → token `accepted`, which no catalogue entry accepts: fail;
/// - refused naming `member` (last dotted segment) → `error:<code>@<member>`: the refusal is
///   the one provoked, so a wrong code fails against the catalogue;
/// - refused with `code` when there is no member to confirm → `error:<code>`;
/// - any other refusal (another member, or another code where no member is named) →
///   `error` (inconclusive): the daemon refused for a reason the case did not provoke, so
///   the clause under test was never reached.
pub fn refusal(r: &Recv, code: &str, member: Option<&str>) -> Outcome {
    let Some(f) = r.frame() else { return Outcome::token(rtoken(r)) };
    if f.ok() == Some(true) {
        return Outcome::token("accepted");
    }
    let got = f.error_code().unwrap_or("?");
    let field = f.error_field().unwrap_or("");
    match member {
        Some(m) if last_segment(field) == m => Outcome::token(format!("error:{got}@{m}")),
        // The provoked descriptor refusal, but without the field SPEC §3.2 requires on every
        // descriptor error: the refusal is the one provoked, and it breaks the rule.
        Some(m)
            if field.is_empty()
                && got == code
                && crate::contract::command::ADMISSION_CODES.iter().any(|c| c.as_str() == got) =>
        {
            Outcome::with(
                format!("error:{got}@(no field)"),
                vec![format!(
                    "the descriptor refusal {got} has no details.field: every descriptor error names the member it \
                     refuses (SPEC §3.2), here `{m}`"
                )],
            )
        }
        None if got == code => Outcome::token(format!("error:{got}")),
        _ => Outcome::Error(format!(
            "inconclusive: the daemon refused with {got}{} where the case provoked {code}{}; it refused for \
             another reason before it judged what this case tests",
            if field.is_empty() { String::new() } else { format!(" (field `{field}`)") },
            member.map(|m| format!(" naming `{m}`")).unwrap_or_default(),
        )),
    }
}

/// A valid open a case relies on was refused: the case cannot reach what it tests, so the
/// verdict is `error` (inconclusive), never `fail` of the clause under test. The positive
/// cases (`daemon.bind.before-open-answer`, `daemon.v2.no-tools-storage`) fail for it.
fn precondition_open(r: &Recv) -> Outcome {
    Outcome::Error(format!(
        "inconclusive: a valid host-adapter open this case relies on was answered {} ({})",
        rtoken(r),
        r.frame().map(|f| f.error_message().unwrap_or("").to_string()).unwrap_or_default()
    ))
}

/// Whether a `bind` reached the probe on a connection accepted at or after `first`.
fn bind_seen_since(c: &DCtx<'_>, first: usize) -> bool {
    c.probe.seen().frames.iter().any(|(n, f)| *n >= first && f["kind"] == "bind")
}

/// [`refusal`] of a response that may be missing.
fn refusal_of(r: Result<Recv, Outcome>, code: &str, member: Option<&str>) -> Outcome {
    match r {
        Ok(r) => refusal(&r, code, member),
        Err(o) => o,
    }
}

/// Add a problem to an observed `code` refusal whose `error.retryable` is not the one the
/// contract fixes for that code (`DaemonCode::default_retryable`). Other outcomes and refusals
/// with another code are returned as they are.
fn retryable_as_contract(out: Outcome, r: &Recv, code: DaemonCode) -> Outcome {
    let Outcome::Observed { token, mut problems } = out else { return out };
    let want = code.default_retryable();
    if let Some(f) = r.frame().filter(|f| f.ok() == Some(false) && f.error_code() == Some(code.as_str())) {
        let got = &f["error"]["retryable"];
        if got != &Value::Bool(want) {
            problems.push(format!(
                "{} is answered with retryable {got}; the contract fixes retryable:{want} for it",
                f.error_code().unwrap_or("the refusal")
            ));
        }
    }
    Outcome::Observed { token, problems }
}

/// Add a problem to an observed `stale_generation` refusal whose details are not exactly
/// `{currentGeneration, receivedGeneration}` with the generations the case set up (PC-2.5 lists
/// the code with those details; Pi Daemon 0.3.3 always sends them).
fn stale_details_must_be(out: Outcome, r: &Recv, current: u64, received: u64) -> Outcome {
    let Outcome::Observed { token, mut problems } = out else { return out };
    if token == format!("error:{}", DaemonCode::StaleGeneration.as_str()) {
        let details = r.frame().map(|f| f["error"]["details"].clone()).unwrap_or_default();
        if details.get("currentGeneration") != Some(&json!(current))
            || details.get("receivedGeneration") != Some(&json!(received))
        {
            problems.push(format!(
                "stale_generation for generation {received} of a session at generation {current} carries details \
                 {details}: they must be {{currentGeneration: {current}, receivedGeneration: {received}}}"
            ));
        }
    }
    Outcome::Observed { token, problems }
}

// ---------------------------------------------------------------- handshake

fn hs_supported_versions(c: &mut DCtx<'_>) -> Outcome {
    let v = tryo!(c.handshake(None));
    let r = tryo!(one(c, v));
    let d = data(&r);
    let has = |k: &str| d[k].as_array().is_some_and(|a| a.contains(&json!("1.0")) && a.contains(&json!("2.0")));
    if has("supportedVersions") {
        Outcome::token("advertised")
    } else if has("supportedProtocolVersions") {
        Outcome::with(
            "only-supportedProtocolVersions",
            vec!["observed the Pi Daemon 0.3.3 variant: `supportedProtocolVersions` instead of the protocol text's `supportedVersions` (SPEC §9)".into()],
        )
    } else {
        Outcome::token(rtoken(&r))
    }
}
fn hs_host_snapshot(c: &mut DCtx<'_>) -> Outcome {
    let v = tryo!(c.handshake(None));
    let r = tryo!(one(c, v));
    let d = data(&r);
    let mut p = Vec::new();
    if let Err(e) = crate::contract::validate_handshake_data(&d) {
        p.push(format!("handshake data breaks the schema: {} at {}", e.message, e.field()));
    }
    Outcome::with(rtoken(&r), p)
}

// ---------------------------------------------------------------- envelope

fn env_duplicate_request_id(c: &mut DCtx<'_>) -> Outcome {
    c.probe.set(BoundMode::Silence, InvokeMode::Normal);
    let d = tryo!(c.descriptor(1, Some(limits_with_timeout(1500))));
    let open = tryo!(c.open(1, super::DCtx::host_adapter(&d)));
    let rid = open["requestId"].as_str().unwrap_or("").to_string();
    let mut conn = tryo!(c.connect());
    conn.send(&open);
    std::thread::sleep(Duration::from_millis(200));
    let second = tryo!(c.handshake(Some(&rid)));
    conn.send(&second);
    // Up to three steps: on a loaded machine the refusal may take longer than one.
    let mut r = conn.recv_for(&rid);
    for _ in 0..2 {
        if r != crate::conform::adapter::conn::Recv::Timeout {
            break;
        }
        r = conn.recv_for(&rid);
    }
    let out = match r.frame() {
        Some(v) if v.error_code() == Some(DaemonCode::DuplicateRequestId.as_str()) => match v["protocolVersion"].as_str() {
            Some("2.0") => Outcome::token("duplicate_request_id@2.0"),
            Some(x) => Outcome::with(
                format!("duplicate_request_id@{x}"),
                vec![format!("answered as {x}: the Pi Daemon 0.3.3 variant (SPEC §9); the protocol text requires the accepted version 2.0")],
            ),
            None => Outcome::token("duplicate_request_id@none"),
        },
        _ => Outcome::token(rtoken(&r)),
    };
    let _ = conn.recv_for(&rid);
    c.probe.set(BoundMode::Exact, InvokeMode::Normal);
    out
}

/// `requestTimeoutMs` of the held opens of [`env_in_flight_limit`]: how long each stays in
/// flight (the probe never answers their binds).
const HELD_OPEN_TIMEOUT_MS: u64 = 3000;

/// What an outcome says, for a message.
fn outcome_text(o: &Outcome) -> String {
    match o {
        Outcome::Observed { token, problems } => {
            std::iter::once(token.clone()).chain(problems.iter().cloned()).collect::<Vec<_>>().join("; ")
        }
        Outcome::Skip(w) | Outcome::Error(w) => w.clone(),
    }
}

/// SPEC §1.1 at the boundary (MUST [daemon]): `maxConnections` (advertised; 64). With that
/// many connections each holding a request in flight (an open whose bind the probe holds),
/// one more connection is closed without a line — the reference's idle reclaim (a DECISION)
/// has nothing to reclaim then, so every reading agrees. Confirmed state: every bind reached
/// the probe and no open was answered before the verdict, else inconclusive. Then, the held
/// opens answered, a new connection is served.
fn env_connection_limit(c: &mut DCtx<'_>) -> Outcome {
    c.probe.set(BoundMode::Silence, InvokeMode::Normal);
    let first = c.probe.seen().connections;
    let mut held = 0;
    let out = connection_limit(c, first, &mut held);
    let until = Instant::now() + Duration::from_millis(HELD_OPEN_TIMEOUT_MS) + c.target.step * 6;
    while c.probe.seen().connections < first + held && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    c.probe.set(BoundMode::Exact, InvokeMode::Normal);
    out
}
fn connection_limit(c: &mut DCtx<'_>, first: usize, held: &mut usize) -> Outcome {
    let mut conns = vec![tryo!(c.connect())];
    let h = tryo!(c.handshake(None));
    let hs = c.call(&mut conns[0], h);
    let n = match data(&hs)["limits"]["maxConnections"].as_u64() {
        Some(n) if (2..=256).contains(&n) => n as usize,
        Some(n) => {
            return Outcome::Skip(format!("the daemon advertises maxConnections {n}: the case holds at most 256"))
        }
        None => 64,
    };
    let own = c.session.clone();
    let mut open_ids = Vec::new();
    let t0 = Instant::now();
    for i in 0..n {
        if i > 0 {
            conns.push(tryo!(c.connect()));
        }
        c.session = format!("{own}-c{i}");
        let v = c
            .descriptor(1, Some(limits_with_timeout(HELD_OPEN_TIMEOUT_MS)))
            .and_then(|d| c.open(1, DCtx::host_adapter(&d)));
        c.session = own.clone();
        let v = tryo!(v);
        open_ids.push(v["requestId"].clone());
        conns[i].send_all(&[v]);
        *held += 1;
    }
    // Every open in flight: its bind reached the probe (which holds it).
    let until = Instant::now() + c.target.step * 2;
    while c.probe.seen().connections < first + n && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(10));
    }
    let seen = c.probe.seen().connections.saturating_sub(first);
    if seen < n {
        return Outcome::Error(format!(
            "inconclusive: only {seen} of the {n} opens' binds reached the probe, so not every connection held a \
             request in flight"
        ));
    }
    // A connect refused outright counts as closed without a line; whether the daemon still
    // serves is checked below either way.
    let wait = c.target.step * 2;
    let h = tryo!(c.handshake(None));
    let (extra, got) = match c.connect() {
        Ok(mut x) => {
            x.send_all(&[h]);
            let got = x.recv_within(wait);
            (Some(x), got)
        }
        Err(_) => (None, Recv::Closed),
    };
    let verdict_at = t0.elapsed();
    // Confirm: no open was answered before the verdict (each stayed in flight).
    for (i, conn) in conns.iter_mut().enumerate() {
        if let Recv::Frame(f, _) = conn.recv_within(Duration::from_millis(1)) {
            if json!(f.request_id()) == open_ids[i] {
                return Outcome::Error(format!(
                    "inconclusive: an open was answered ({}) before the connection past maxConnections was judged \
                     (at {} ms), so not every connection held a request in flight",
                    f.error_code().unwrap_or("ok"),
                    verdict_at.as_millis()
                ));
            }
        }
    }
    if verdict_at >= Duration::from_millis(HELD_OPEN_TIMEOUT_MS) {
        return Outcome::Error(format!(
            "inconclusive: the connection past the cap was judged after {} ms, when the held opens may have timed out",
            verdict_at.as_millis()
        ));
    }
    let mut p = Vec::new();
    let token = match got {
        Recv::Closed => "closed-without-line".to_string(),
        Recv::Frame(f, _) => {
            p.push(format!(
                "a connection past maxConnections ({n} connections, each with a request in flight) was served: its \
                 handshake was answered {}; it must be closed without a line",
                f.error_code().unwrap_or("ok")
            ));
            "served-past-limit".into()
        }
        Recv::Garbage(_) => {
            p.push("a connection past maxConnections got a line (not JSON); it must be closed without one".into());
            "line-past-limit".into()
        }
        Recv::Timeout => {
            p.push(format!(
                "a connection past maxConnections ({n} connections, each with a request in flight) was neither \
                 served nor closed within {} ms: it must be closed without a line",
                wait.as_millis()
            ));
            "left-open-past-limit".into()
        }
    };
    // The held opens end (their binds time out) on connections that stay open: the connection
    // past the cap must have cost the others nothing.
    drop(extra);
    let until = Instant::now() + Duration::from_millis(HELD_OPEN_TIMEOUT_MS) + c.target.step * 4;
    let mut dropped = 0;
    for (i, conn) in conns.iter_mut().enumerate() {
        loop {
            let left = until.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
            match conn.recv_within(left) {
                Recv::Frame(f, _) if json!(f.request_id()) == open_ids[i] => break,
                Recv::Frame(..) | Recv::Garbage(_) => {}
                Recv::Closed => {
                    dropped += 1;
                    break;
                }
                Recv::Timeout => break,
            }
        }
    }
    if dropped > 0 {
        p.push(format!(
            "{dropped} of the {n} connections at the cap were closed before their opens were answered: the \
             connection past the cap must be closed alone"
        ));
    }
    drop(conns);
    let until = Instant::now() + c.target.step * 6;
    let mut served = false;
    let mut last = String::from("no attempt");
    while !served && Instant::now() < until {
        match c.connect() {
            Ok(mut conn) => {
                let h = tryo!(c.handshake(None));
                let r = c.call(&mut conn, h);
                served = r.frame().is_some_and(|f| f.ok() == Some(true));
                last = r.describe();
            }
            Err(o) => last = outcome_text(&o),
        }
        if !served {
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    if !served {
        p.push(format!(
            "after the connections at the cap closed, a new connection was not served ({last}): the daemon \
             stopped serving"
        ));
        // Let the remaining cases run on a daemon that serves again.
        if c.target.restart_cmd.is_some() {
            match c.restart() {
                Ok(()) => {
                    p.push("(the runner restarted the daemon with --restart-cmd so the remaining cases run)".into())
                }
                Err(o) => p.push(format!("(restarting it with --restart-cmd failed: {})", outcome_text(&o))),
            }
        }
    }
    Outcome::with(&token, p)
}

/// SPEC §1.1 at the boundary (MUST [daemon]): at most `maxInFlightRequestsPerConnection`
/// (advertised in the handshake, 64 by the working spec) requests in flight on one connection;
/// one more is `connection_busy`, retryable, and the connection stays open. The provoked state:
/// N − 1 opens of distinct sessions, pipelined, whose binds the probe holds (each stays in
/// flight until its `requestTimeoutMs`); a handshake then is the N-th in flight and must be
/// answered; one more held open, and a second handshake is the (N+1)-th and must be
/// `connection_busy`. Both handshakes must be answered before any open (else the opens were
/// not all in flight: inconclusive); once the opens are answered a third handshake must be
/// answered on the same connection.
fn env_in_flight_limit(c: &mut DCtx<'_>) -> Outcome {
    c.probe.set(BoundMode::Silence, InvokeMode::Normal);
    let first = c.probe.seen().connections;
    let mut held = 0;
    let out = in_flight_limit(c, &mut held);
    // Whatever the verdict, the held opens' binds must all have reached the probe before the
    // next case starts (a late one would look like that case's connection).
    let until = Instant::now() + Duration::from_millis(HELD_OPEN_TIMEOUT_MS) + c.target.step * 6;
    while c.probe.seen().connections < first + held && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    c.probe.set(BoundMode::Exact, InvokeMode::Normal);
    out
}
fn in_flight_limit(c: &mut DCtx<'_>, held: &mut usize) -> Outcome {
    const BUSY: &str = DaemonCode::ConnectionBusy.as_str();
    let mut conn = tryo!(c.connect());
    let h = tryo!(c.handshake(None));
    let hs = c.call(&mut conn, h);
    let advertised = data(&hs)["limits"]["maxInFlightRequestsPerConnection"].as_u64();
    let n = match advertised {
        Some(n) if (2..=256).contains(&n) => n as usize,
        Some(n) => {
            return Outcome::Skip(format!(
                "the daemon advertises maxInFlightRequestsPerConnection {n}: the case holds at most 256 opens"
            ))
        }
        None => 64,
    };
    let own = c.session.clone();
    let mut opens = Vec::new();
    for i in 0..n {
        c.session = format!("{own}-f{i}");
        let d = c.descriptor(1, Some(limits_with_timeout(HELD_OPEN_TIMEOUT_MS)));
        let v = d.and_then(|d| c.open(1, super::DCtx::host_adapter(&d)));
        match v {
            Ok(v) => opens.push(v),
            Err(o) => {
                c.session = own;
                return o;
            }
        }
    }
    c.session = own;
    let open_ids: std::collections::HashSet<String> =
        opens.iter().filter_map(|o| o["requestId"].as_str().map(str::to_string)).collect();
    let at_limit = tryo!(c.handshake(None));
    let past = tryo!(c.handshake(None));
    let (at_rid, past_rid) = (at_limit["requestId"].clone(), past["requestId"].clone());
    // The first N − 1 opens and the handshake that makes N, pipelined; then the N-th open and
    // the handshake that makes N + 1.
    let mut first: Vec<Value> = opens[..n - 1].to_vec();
    first.push(at_limit);
    conn.send_all(&first);
    *held = n - 1;
    // Wait until the first handshake is answered (every open before it is in flight) before the
    // second batch, so that its answer cannot be counted against the second.
    let wait = c.target.step * 3;
    let mut answered_opens = 0usize;
    let mut at_answer = None;
    let mut past_answer = None;
    let mut opens_before_past = 0usize;
    let deadline = Instant::now() + wait;
    while at_answer.is_none() && Instant::now() < deadline {
        match conn.recv_within(wait) {
            Recv::Frame(f, _) if f.request_id().is_some_and(|r| open_ids.contains(r)) => answered_opens += 1,
            Recv::Frame(f, _) if json!(f.request_id()) == at_rid => at_answer = Some(f.value().clone()),
            Recv::Frame(..) => {}
            other => {
                return Outcome::Error(format!("inconclusive: the connection ended the wait with {}", other.describe()))
            }
        }
    }
    let Some(at_answer) = at_answer else {
        return Outcome::with(
            "at-limit-unanswered",
            vec![format!(
                "the handshake sent with {} opens in flight (the {n}th request in flight) was not answered within {} ms",
                n - 1,
                wait.as_millis()
            )],
        );
    };
    let opens_before_at = answered_opens;
    conn.send_all(&[opens[n - 1].clone(), past]);
    *held = n;
    while past_answer.is_none() && Instant::now() < deadline + wait {
        match conn.recv_within(wait) {
            Recv::Frame(f, _) if f.request_id().is_some_and(|r| open_ids.contains(r)) => answered_opens += 1,
            Recv::Frame(f, _) if json!(f.request_id()) == past_rid => {
                opens_before_past = answered_opens;
                past_answer = Some(f.value().clone());
            }
            Recv::Frame(..) => {}
            other => {
                return Outcome::Error(format!("inconclusive: the connection ended the wait with {}", other.describe()))
            }
        }
    }
    let code = |v: &Value| v["error"]["code"].as_str().unwrap_or("").to_string();
    if code(&at_answer) == BUSY {
        if opens_before_at > 0 {
            return Outcome::Error(format!(
                "inconclusive: {opens_before_at} open(s) were answered before the handshake that made {n} in flight, \
                 which the daemon answered {BUSY}"
            ));
        }
        return Outcome::with(
            "busy-at-limit",
            vec![format!(
                "the handshake sent with {} requests in flight (making {n}, the advertised \
                 maxInFlightRequestsPerConnection) was refused {BUSY}: the limit is reached only by the {}th",
                n - 1,
                n + 1
            )],
        );
    }
    if at_answer["ok"] != true || opens_before_at > 0 {
        return Outcome::Error(format!(
            "inconclusive: the handshake making {n} in flight was answered {} after {opens_before_at} open(s) were \
             answered (every open must still be in flight: the probe holds their binds)",
            if at_answer["ok"] == true { "ok".to_string() } else { code(&at_answer) }
        ));
    }
    let Some(past_answer) = past_answer else {
        return Outcome::with(
            "past-limit-unanswered",
            vec![format!("the handshake sent as the {}th request in flight got no answer", n + 1)],
        );
    };
    if opens_before_past > 0 {
        return Outcome::Error(format!(
            "inconclusive: {opens_before_past} open(s) were answered before the handshake meant as the {}th request in \
             flight (answered {}): the opens did not stay in flight",
            n + 1,
            if past_answer["ok"] == true { "ok".to_string() } else { code(&past_answer) }
        ));
    }
    let mut p = Vec::new();
    if past_answer["ok"] == true {
        return Outcome::with(
            "accepted-past-limit",
            vec![format!(
                "the daemon answered a handshake sent as the {}th request in flight on one connection \
                 (maxInFlightRequestsPerConnection {n}); it must be refused {BUSY} (retryable)",
                n + 1
            )],
        );
    }
    if code(&past_answer) != BUSY {
        return Outcome::Error(format!(
            "inconclusive: the {}th request in flight was refused {}, not {BUSY}: a refusal the case did not provoke",
            n + 1,
            code(&past_answer)
        ));
    }
    if past_answer["error"]["retryable"] != true {
        p.push(format!("the {BUSY} refusal is not retryable: {}", past_answer["error"]));
    }
    // The connection stays open: every open is answered on it (their binds time out), then a
    // handshake is answered.
    let settle = Duration::from_millis(HELD_OPEN_TIMEOUT_MS) + c.target.step * 6;
    let until = Instant::now() + settle;
    while answered_opens < n && Instant::now() < until {
        match conn.recv_within(settle) {
            Recv::Frame(f, _) if f.request_id().is_some_and(|r| open_ids.contains(r)) => answered_opens += 1,
            Recv::Frame(..) => {}
            Recv::Timeout => break,
            other => {
                p.push(format!(
                    "the connection ended ({}) after the {BUSY} refusal: it must stay open",
                    other.describe()
                ));
                return Outcome::with("busy-then-closed", p);
            }
        }
    }
    if answered_opens < n {
        return Outcome::Error(format!(
            "inconclusive: {answered_opens} of the {n} held opens were answered within {} ms of the {BUSY} refusal",
            settle.as_millis()
        ));
    }
    let h = tryo!(c.handshake(None));
    let after = c.call(&mut conn, h);
    if rtoken(&after) != "ok" {
        p.push(format!(
            "after the held opens were answered, a handshake on the same connection was answered {}: the connection \
             must stay usable after {BUSY}",
            rtoken(&after)
        ));
    }
    Outcome::with("busy-past-limit", p)
}

/// Open the case session as a memory session without tools and send it a wake asking the
/// model for an `n`-byte answer (`SAY <n>`) on `conn`: the wake's requestId and its answer.
fn say_in_memory(c: &mut DCtx<'_>, conn: &mut Conn, n: usize) -> Result<(Value, Recv), Outcome> {
    let mut o = c.open(1, json!("none"))?;
    o["payload"]["session"] = json!({"mode": "memory"});
    let opened = one(c, o)?;
    if rtoken(&opened) != "ok" {
        return Err(precondition_open(&opened));
    }
    let sid = c.session.clone();
    let rid = c.rid();
    let s = crate::contract::compose::SessionRef { session_id: &sid, generation: 1 };
    let e = crate::contract::compose::Envelope { version: "2.0", request_id: &rid };
    let w = crate::contract::compose::wake(&e, &s, &format!("{rid}-wake"), &format!("SAY {n}"))
        .map(|w| crate::contract::compose::to_wire(&w))
        .map_err(|e| Outcome::Error(format!("inconclusive: the runner cannot build a wake: {e}")))?;
    let r = c.call(conn, w.clone());
    Ok((w["requestId"].clone(), r))
}

/// SPEC §1.1 (MUST [daemon]): a response over `maxResponseBytes` (advertised; 1 MiB) is
/// replaced by `outbound_record_too_large` and the connection stays open. The provoked state: a
/// wake whose calls read files of 400,000 bytes, enough of them that their results together
/// exceed the limit — where the daemon's answer carries its calls' results (the reference's
/// `result.toolCalls[].data`). A daemon whose answer does not carry them (Pi Daemon 0.3.3
/// reports calls as `toolEnd` events, pi truncating their output) gets a second wake asking the
/// model for an answer of `maxResponseBytes` + 64 KiB (`SAY <n>`, which `fake-model` speaks):
/// its answer carries the model's text. A daemon whose answer carries neither is skipped,
/// saying so.
fn env_response_over_max_bytes(c: &mut DCtx<'_>) -> Outcome {
    const CHUNK: usize = 400_000;
    let mut conn = tryo!(c.connect());
    let h = tryo!(c.handshake(None));
    let hs = c.call(&mut conn, h);
    let limit = data(&hs)["limits"]["maxResponseBytes"].as_u64().unwrap_or(1024 * 1024) as usize;
    if limit > 4 * 1024 * 1024 {
        return Outcome::Skip(format!(
            "the daemon advertises maxResponseBytes {limit}: the case provokes at most 4 MiB"
        ));
    }
    let (_, link) = tryo!(open_bound(c, 1));
    let name = format!("pc-big-{}.txt", &c.session[c.session.len().saturating_sub(8)..]);
    let file = c.target.cwd.join(&name);
    if let Err(e) = std::fs::write(&file, "a".repeat(CHUNK)) {
        return Outcome::Error(format!("cannot write the {CHUNK}-byte file the calls read: {e}"));
    }
    let calls: Vec<(&str, Value)> =
        (0..limit / CHUNK + 2).map(|_| ("fs_read", json!({"path": name, "maxBytes": CHUNK}))).collect();
    let w = c.wake_calls(1, &calls);
    let out = w.map(|w| {
        let rid = w["requestId"].clone();
        let r = c.call(&mut conn, w);
        (rid, r)
    });
    let _ = std::fs::remove_file(&file);
    let (mut rid, mut r) = tryo!(out);
    let reads = link_frames(c, link, "invoke").len();
    let mut what = format!("the wake reading {} × {CHUNK} bytes", calls.len());
    let mut small = None;
    for second in [false, true] {
        if second {
            // The first answer was small: ask the model for a long one, in a memory session of
            // its own (Pi Daemon 0.3.3 cannot journal a result that long: a durable session's
            // answer would be durability_completion_failed).
            let n = limit + 64 * 1024;
            let main = c.session.clone();
            c.session = format!("{main}-m");
            let said = say_in_memory(c, &mut conn, n);
            release(c, 1);
            c.session = main;
            (rid, r) = tryo!(said);
            what = format!("the wake asking for a {n}-byte answer (SAY {n})");
        }
        let Recv::Frame(f, raw) = &r else {
            return Outcome::with(
                format!("no-answer:{}", rtoken(&r)),
                vec![format!("{what} got no answer: {}", rtoken(&r))],
            );
        };
        if raw.len() > limit + 1 {
            return Outcome::with(
                "sent-over-limit",
                vec![format!(
                    "the daemon sent a response of {} bytes on a connection whose maxResponseBytes is {limit}: it must \
                     be replaced by {}",
                    raw.len(),
                    DaemonCode::OutboundRecordTooLarge.as_str()
                )],
            );
        }
        match f.error_code() {
            Some(code) if code == DaemonCode::OutboundRecordTooLarge.as_str() => break,
            Some(code) => {
                return Outcome::Error(format!(
                    "inconclusive: {what} was refused {code}: a refusal the case did not provoke"
                ))
            }
            None if !second && reads < calls.len() => {
                return Outcome::Error(format!(
                    "inconclusive: {reads} of the {} reads reached the adapter, so no answer over {limit} bytes was \
                     provoked",
                    calls.len()
                ))
            }
            None if !second => small = Some(raw.len()),
            None => {
                return Outcome::Skip(format!(
                    "neither the wake's answer ({} bytes) nor a model answer asked to be longer than the bound ({} \
                     bytes) carries that much, so no answer over maxResponseBytes ({limit}) can be provoked with this \
                     daemon",
                    small.unwrap_or(0),
                    raw.len()
                ))
            }
        }
    }
    let mut p = Vec::new();
    if r.frame().map(|f| json!(f.request_id())) != Some(rid) {
        p.push(format!(
            "the {} refusal does not echo the wake's requestId",
            DaemonCode::OutboundRecordTooLarge.as_str()
        ));
    }
    let h = tryo!(c.handshake(None));
    let after = c.call(&mut conn, h);
    if rtoken(&after) != "ok" {
        p.push(format!(
            "after the {} refusal a handshake on the same connection was answered {}: the connection stays open",
            DaemonCode::OutboundRecordTooLarge.as_str(),
            rtoken(&after)
        ));
    }
    Outcome::with("replaced", p)
}

/// SPEC §1.1 (MUST [daemon]): a client that stops reading is disconnected once the bytes
/// queued for it pass `maxOutboundBytesPerConnection` (advertised; 4 MiB). The provoked state:
/// one raw connection pipelines handshakes whose answers together pass the bound plus
/// [`KERNEL_SLACK`] by 2 MiB even if each answer were 128 bytes, and reads nothing until the
/// daemon has had time to answer them all (100 µs each, 2–10 s); then it reads what the connection holds, up to its end
/// or a silence. What conforms: the connection ended (disconnected), or the daemon stopped
/// reading the pipeline and held no more than the bound (back-pressure: the bound is never
/// passed). What never conforms: more than the bound plus what the kernel buffers, unread,
/// on a connection that stayed open or ended only after handing it all over. Either way the
/// daemon must go on serving other connections.
fn env_slow_reader_disconnected(c: &mut DCtx<'_>) -> Outcome {
    use std::io::{ErrorKind, Read, Write};
    /// What the kernel may hold for an unread Unix stream on top of a daemon's own queue (the
    /// sender's socket buffer, 208 KiB by default), with a wide margin.
    const KERNEL_SLACK: usize = 4 * 1024 * 1024;
    let mut conn = tryo!(c.connect());
    let h = tryo!(c.handshake(None));
    let t0 = Instant::now();
    let hs = c.call(&mut conn, h);
    let round_trip = t0.elapsed();
    let Recv::Frame(_, answer) = &hs else {
        return Outcome::Error(format!("inconclusive: the handshake was answered {}", rtoken(&hs)));
    };
    if rtoken(&hs) != "ok" {
        return Outcome::Error(format!("inconclusive: the handshake was answered {}", rtoken(&hs)));
    }
    let advertised = data(&hs)["limits"]["maxOutboundBytesPerConnection"].as_u64();
    let bound = advertised.unwrap_or(4 * 1024 * 1024) as usize;
    if bound > 32 * 1024 * 1024 {
        return Outcome::Skip(format!(
            "the daemon advertises maxOutboundBytesPerConnection {bound}: the case provokes at most 32 MiB"
        ));
    }
    // Enough requests that even answers of SMALLEST bytes each pass the bound (a daemon may
    // answer most of the pipeline with short connection_busy refusals: Pi Daemon 0.3.3 does).
    const SMALLEST: usize = 128;
    let per = answer.len();
    let n = (bound + KERNEL_SLACK + 2 * 1024 * 1024) / SMALLEST + 1;
    let mut pipeline = Vec::with_capacity(n * 96);
    for i in 0..n {
        let h = tryo!(c.handshake(Some(&format!("pc-slow-{i}"))));
        pipeline.extend_from_slice(&crate::wire::encode_line(&h));
    }
    let mut s = match std::os::unix::net::UnixStream::connect(&c.target.socket) {
        Ok(s) => s,
        Err(e) => return Outcome::Error(format!("cannot connect to the daemon: {e}")),
    };
    let _ = s.set_write_timeout(Some(Duration::from_secs(2)));
    let (mut sent, mut blocked, mut refused, started) = (0, false, false, Instant::now());
    while sent < pipeline.len() {
        match s.write(&pipeline[sent..]) {
            Ok(0) => break,
            Ok(k) => sent += k,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                blocked = true;
                break;
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            // The daemon closed the connection while the pipeline was being sent.
            Err(_) => {
                refused = true;
                break;
            }
        }
        if started.elapsed() > Duration::from_secs(30) {
            blocked = true;
            break;
        }
    }
    // Time to answer every request sent: 100 µs each (Pi Daemon 0.3.3 needs under 10), at
    // least 2 s and the measured round trip, at most 10 s.
    // A daemon that closed the connection or stopped reading has answered what it will.
    let settle = if refused {
        Duration::ZERO
    } else if blocked {
        Duration::from_secs(2)
    } else {
        (Duration::from_micros(100) * u32::try_from(n).unwrap_or(u32::MAX))
            .max(round_trip)
            .clamp(Duration::from_secs(2), Duration::from_secs(10))
    };
    std::thread::sleep(settle);
    let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
    let (mut held, mut ended, mut buf) = (0usize, false, vec![0u8; 256 * 1024]);
    loop {
        match s.read(&mut buf) {
            Ok(0) => {
                ended = true;
                break;
            }
            Ok(k) => held += k,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => break,
            Err(_) => {
                ended = true;
                break;
            }
        }
        if held > 64 * 1024 * 1024 {
            break;
        }
    }
    drop(s);
    let what = format!(
        "{n} pipelined handshakes ({} of {} bytes sent{}), answers of about {per} bytes each; {held} bytes held for the \
         connection after {} ms unread, then {}",
        sent,
        pipeline.len(),
        if blocked { ", then the daemon stopped reading" } else { "" },
        settle.as_millis(),
        if ended { "the connection ended" } else { "silence with the connection open" }
    );
    let mut p = Vec::new();
    let h = tryo!(c.handshake(None));
    let after = tryo!(one(c, h));
    if rtoken(&after) != "ok" {
        p.push(format!(
            "after the slow reader, a handshake on a new connection was answered {}: the daemon must go on serving",
            rtoken(&after)
        ));
    }
    if held > bound + KERNEL_SLACK {
        p.push(format!(
            "{what}: the daemon queued more than maxOutboundBytesPerConnection ({bound}) plus {KERNEL_SLACK} bytes the \
             kernel may buffer for a client that did not read: past the bound the slow reader must be disconnected"
        ));
        return Outcome::with("queued-past-bound", p);
    }
    if ended {
        return Outcome::with("disconnected", p);
    }
    if blocked {
        return Outcome::with("back-pressure", p);
    }
    Outcome::Error(format!(
        "inconclusive: {what}: the answers to the whole pipeline exceed the bound, yet the connection neither ended \
         nor held them (the daemon may not have answered them all in time)"
    ))
}

// ---------------------------------------------------------------- v1 / v2 resources

fn v1_tools_object(c: &mut DCtx<'_>) -> Outcome {
    let d = tryo!(c.descriptor(1, None));
    let before = c.probe.seen().connections;
    let v = tryo!(c.open_as("1.0", 1, super::DCtx::host_adapter(&d)));
    let r = tryo!(one(c, v));
    let p = if c.probe.seen().connections != before { vec!["a v1 open reached the adapter".into()] } else { vec![] };
    match refusal(&r, Code::InvalidField.as_str(), Some("tools")) {
        Outcome::Observed { token, .. } => Outcome::with(token, p),
        other => other,
    }
}
fn v2_no_tools_storage(c: &mut DCtx<'_>) -> Outcome {
    // The case creates what it relies on, owner-only, under --cwd: a session cwd, an isolated
    // agentDir beside it (no overlap) and the confined sessionDir inside <agentDir>/sessions.
    let base = c.target.cwd.join(format!(".pc-storage-{}", c.session));
    let (cwd, agent) = (base.join("work"), base.join("agent"));
    let session_dir = agent.join("sessions").join(&c.session);
    for d in [&base, &cwd, &agent, &agent.join("sessions"), &session_dir] {
        if let Err(e) = private_dir(d) {
            return Outcome::Error(format!("cannot create {}: {e}", d.display()));
        }
    }
    let v = tryo!(c.open_in(1, &cwd, Some((&agent, &session_dir))));
    tok(one(c, v))
}

/// Create `d` (if missing) with mode 0700.
fn private_dir(d: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    match std::fs::DirBuilder::new().mode(0o700).create(d) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o700))
        }
        Err(e) => Err(e),
    }
}

// ---------------------------------------------------------------- admission

/// Whether a refusal is one that only comes after admission (`open_failed`, or an `adapter_*`
/// code): the descriptor was admitted.
fn admitted_then_failed(r: &Recv) -> bool {
    r.frame()
        .and_then(|f| f.error_code())
        .is_some_and(|c| c == DaemonCode::OpenFailed.as_str() || c.starts_with("adapter_"))
}

/// A descriptor check: `member` is the member the fault is put in, `code` the code it must
/// draw (compared exactly; the field only by its last dotted segment).
fn admission(c: &mut DCtx<'_>, code: Code, member: &str, mutate: impl FnOnce(&mut Value, &str)) -> Outcome {
    let mut d = tryo!(c.descriptor(1, None));
    let host = c.host.clone();
    mutate(&mut d, &host);
    let before = c.probe.seen().connections;
    let v = tryo!(c.open(1, super::DCtx::host_adapter(&d)));
    let r = tryo!(one(c, v));
    std::thread::sleep(Duration::from_millis(50));
    let mut p = Vec::new();
    if c.probe.seen().connections != before {
        p.push("a refused descriptor reached the adapter: admission must answer before any connection".into());
    }
    match refusal(&r, code.as_str(), Some(member)) {
        Outcome::Observed { token, .. } => Outcome::with(token, p),
        // Refused only after admission (the open failed later, or an adapter reason): the
        // faulted descriptor was admitted.
        Outcome::Error(_) if admitted_then_failed(&r) => {
            let got = r.frame().and_then(|f| f.error_code()).unwrap_or("?").to_string();
            p.insert(
                0,
                format!("the descriptor passed admission: the open failed only later ({got}), not with {code}"),
            );
            Outcome::with(format!("admitted:{got}"), p)
        }
        // Another refusal: inconclusive, but a connection to the adapter is still a failure.
        other if p.is_empty() => other,
        _ => Outcome::with("reached-adapter", p),
    }
}
fn adm_1(c: &mut DCtx<'_>) -> Outcome {
    admission(c, Code::InvalidToolAdapterDescriptor, "token", |d, _| d["token"] = json!("smuggled"))
}
fn adm_2(c: &mut DCtx<'_>) -> Outcome {
    admission(c, Code::UnsupportedToolAdapterVersion, "protocolVersion", |d, _| d["protocolVersion"] = json!("2.0"))
}
fn adm_3(c: &mut DCtx<'_>) -> Outcome {
    admission(c, Code::InvalidToolAdapterIdentity, "adapterId", |d, _| d["adapterId"] = json!("-bad"))
}
fn adm_4(c: &mut DCtx<'_>) -> Outcome {
    admission(c, Code::InvalidToolAdapterIdentity, "adapterVersion", |d, _| d["adapterVersion"] = json!("01.2.0"))
}
fn adm_5(c: &mut DCtx<'_>) -> Outcome {
    admission(c, Code::InvalidToolAdapterEndpoint, "path", |d, _| d["endpoint"]["path"] = json!("relative/tools.sock"))
}
fn adm_6(c: &mut DCtx<'_>) -> Outcome {
    admission(c, Code::InvalidToolAdapterBinding, "extra", |d, _| d["binding"]["extra"] = json!(1))
}
fn adm_7(c: &mut DCtx<'_>) -> Outcome {
    admission(c, Code::InvalidToolAdapterCapability, "capabilityHandle", |d, _| {
        d["binding"]["capabilityHandle"] = json!("tooShort")
    })
}
fn adm_8(c: &mut DCtx<'_>) -> Outcome {
    admission(c, Code::ToolAdapterBindingMismatch, "hostInstanceId", |d, h| {
        d["binding"]["hostInstanceId"] = json!(format!("{h}-previous"))
    })
}
fn adm_9(c: &mut DCtx<'_>) -> Outcome {
    admission(c, Code::UnsupportedToolOperation, "operations", |d, _| d["operations"] = json!(["fs.read", "fs.read"]))
}
fn adm_10(c: &mut DCtx<'_>) -> Outcome {
    admission(c, Code::InvalidToolAdapterLimit, "maxConcurrentRequests", |d, _| {
        d["limits"]["maxConcurrentRequests"] = json!(65)
    })
}
fn adm_11(c: &mut DCtx<'_>) -> Outcome {
    // SPEC §3.3: 256 × € in the session id makes `bound` larger than 1024 bytes, so limits
    // 2048/1024 pass the range check and fail the fit check on maxResponseBytes.
    c.session = "\u{20ac}".repeat(256);
    admission(c, Code::InvalidToolAdapterLimit, "maxResponseBytes", |d, _| {
        d["limits"]["maxRequestBytes"] = json!(2048);
        d["limits"]["maxResponseBytes"] = json!(1024);
    })
}

// ---------------------------------------------------------------- binding at open

fn bind_before_answer(c: &mut DCtx<'_>) -> Outcome {
    c.probe.set(BoundMode::Exact, InvokeMode::Normal);
    let d = tryo!(c.descriptor(1, None));
    let v = tryo!(c.open(1, super::DCtx::host_adapter(&d)));
    let r = tryo!(one(c, v));
    let seen = c.probe.seen();
    let mut p = Vec::new();
    // This case's session only: a bind of an earlier case's open may still arrive (one whose
    // bind the probe held, answered late by a daemon under test).
    let binds: Vec<(usize, &Value)> = seen
        .frames
        .iter()
        .enumerate()
        .filter(|(_, (_, f))| f["kind"] == "bind" && f["sessionId"] == c.session.as_str())
        .map(|(i, (_, f))| (i, f))
        .collect();
    let Some((i, bind)) = binds.last().copied() else {
        return Outcome::with(rtoken(&r), vec!["the daemon answered the open without binding".into()]);
    };
    let admitted = crate::contract::admit_descriptor(&d, None);
    if let Ok(a) = admitted {
        if *bind != a.bind_frame() {
            p.push(
                "the bind frame is not the descriptor's normalized bind (identity, handle, operation order, limits)"
                    .into(),
            );
        }
        if seen.sizes[i] as i64 > a.limits().max_request_bytes {
            p.push("the bind line exceeds maxRequestBytes".into());
        }
    }
    Outcome::with(if rtoken(&r) == "ok" { "bound-before-answer".to_string() } else { rtoken(&r) }, p)
}
fn bound_violation(c: &mut DCtx<'_>, mode: BoundMode) -> Outcome {
    c.probe.set(mode, InvokeMode::Normal);
    let d = tryo!(c.descriptor(1, Some(limits_with_timeout(800))));
    let seen = open_then_call(c, &d, 1, "fs_stat", &json!({"path": "."}));
    c.probe.set(BoundMode::Exact, InvokeMode::Normal);
    let seen = tryo!(seen);
    if let Some(o) = seen.inconclusive() {
        return o;
    }
    seen.outcome()
}

/// What [`open_then_call`] observed.
pub(super) struct OpenSeen {
    /// The open's token ([`rtoken`]).
    pub open: String,
    /// Whether a `bind` reached the probe for this open.
    pub bound: bool,
    /// Whether the later tool call reached the adapter.
    pub reached: bool,
}

impl OpenSeen {
    /// A refusal that came before any bind: whatever the case made the probe answer was
    /// never provoked.
    pub fn inconclusive(&self) -> Option<Outcome> {
        (self.open != "ok" && !self.bound).then(|| {
            Outcome::Error(format!(
                "inconclusive: the daemon refused the open ({}) before any bind reached the probe, so the bound \
                 violation this case provokes was never sent",
                self.open
            ))
        })
    }

    /// The verdict of a provoked bound violation: the open must fail, and no tool call may
    /// reach the adapter afterwards (`open-refused`), else `opened` with the problems.
    pub fn outcome(&self) -> Outcome {
        let mut p = Vec::new();
        if self.open == "ok" {
            p.push("a bound violation must fail the open".into());
        }
        if self.reached {
            p.push("a tool call reached the adapter after a failed bind".into());
        }
        // Refused means answered with an error: an open never answered (a daemon waiting on
        // the adapter for ever) did not fail, it hangs.
        if !self.open.starts_with("error:") && self.open != "ok" {
            p.push(format!(
                "the open was not answered ({}): a bound violation, silence included, must fail the open within                  requestTimeoutMs",
                self.open
            ));
            return Outcome::with(format!("open-unanswered:{}", self.open), p);
        }
        Outcome::with(if self.open == "ok" { "opened" } else { "open-refused" }, p)
    }
}

/// Open the case session with descriptor `d` at `generation` (the probe armed by the caller
/// answers the bind), then make one tool call (`tool`, `args`) and see whether it reaches the
/// adapter.
pub(super) fn open_then_call(
    c: &mut DCtx<'_>,
    d: &Value,
    generation: u64,
    tool: &str,
    args: &Value,
) -> Result<OpenSeen, Outcome> {
    let first = c.probe.seen().connections;
    let v = c.open(generation, super::DCtx::host_adapter(d))?;
    let r = one(c, v)?;
    c.probe.set(BoundMode::Exact, InvokeMode::Normal);
    let open = rtoken(&r);
    let bound = bind_seen_since(c, first);
    let w = c.wake(generation, tool, args)?;
    let before = invokes(c).len();
    let _ = one(c, w);
    Ok(OpenSeen { open, bound, reached: invokes(c).len() != before })
}
/// SPEC §3.4 and the §9 conflict "adapter failure reasons are typed": a failed bind names its
/// `adapter_*` reason, as the error code or as `details.cause.code`.
fn bind_typed_cause(c: &mut DCtx<'_>) -> Outcome {
    c.probe.set(BoundMode::WrongLimits, InvokeMode::Normal);
    let first = c.probe.seen().connections;
    let d = tryo!(c.descriptor(1, Some(limits_with_timeout(800))));
    let v = tryo!(c.open(1, super::DCtx::host_adapter(&d)));
    let r = one(c, v);
    c.probe.set(BoundMode::Exact, InvokeMode::Normal);
    let r = tryo!(r);
    let t = rtoken(&r);
    let Some(f) = r.frame().filter(|f| f.ok() == Some(false)) else {
        return Outcome::with(t.clone(), vec![format!("a bound with a changed limit must fail the open, got {t}")]);
    };
    if !bind_seen_since(c, first) {
        return Outcome::Error(format!(
            "inconclusive: the daemon refused the open ({t}) before any bind reached the probe"
        ));
    }
    let code = f.error_code().unwrap_or("");
    let cause = f.error_details().and_then(|d| d.get("cause")).unwrap_or(&Value::Null);
    if let Some(typed) = [code, cause["code"].as_str().unwrap_or("")].into_iter().find(|c| c.starts_with("adapter_")) {
        return Outcome::token(format!("typed:{typed}"));
    }
    if code == DaemonCode::OpenFailed.as_str() && cause.is_object() {
        return Outcome::with(
            "generic-cause",
            vec![format!(
                "observed the Pi Daemon 0.3.3 variant (SPEC §9): open_failed with a generic cause {{name: {}, message: {}}} \
                 and no adapter_* code; the reason (a bound whose limits differ: adapter_protocol_invalid) should be typed",
                cause["name"], cause["message"]
            )],
        );
    }
    Outcome::with(
        format!("untyped:{t}"),
        vec!["the failed bind's reason is named neither by the error code nor by details.cause.code".into()],
    )
}
fn bound_wrong_limits(c: &mut DCtx<'_>) -> Outcome {
    bound_violation(c, BoundMode::WrongLimits)
}
fn bound_reordered(c: &mut DCtx<'_>) -> Outcome {
    bound_violation(c, BoundMode::ReorderedOps)
}
fn bound_wrong_generation(c: &mut DCtx<'_>) -> Outcome {
    bound_violation(c, BoundMode::WrongGeneration)
}
fn bound_echo_handle(c: &mut DCtx<'_>) -> Outcome {
    bound_violation(c, BoundMode::EchoHandle)
}
fn bound_close(c: &mut DCtx<'_>) -> Outcome {
    bound_violation(c, BoundMode::Close)
}
fn bound_silence(c: &mut DCtx<'_>) -> Outcome {
    bound_violation(c, BoundMode::Silence)
}
fn endpoint_insecure(c: &mut DCtx<'_>) -> Outcome {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(&c.probe.socket, std::fs::Permissions::from_mode(0o666));
    let before = c.probe.seen().connections;
    let d = tryo!(c.descriptor(1, None));
    let v = tryo!(c.open(1, super::DCtx::host_adapter(&d)));
    let r = one(c, v);
    let _ = std::fs::set_permissions(&c.probe.socket, std::fs::Permissions::from_mode(0o600));
    let r = tryo!(r);
    let connected = c.probe.seen().connections != before;
    let p = if connected { vec!["the daemon connected to a socket others can write".into()] } else { vec![] };
    let t = rtoken(&r);
    if t == "ok" || connected {
        return Outcome::with(if t == "ok" { "opened" } else { "open-refused" }, p);
    }
    if !t.starts_with("error:") {
        return Outcome::with(
            format!("open-unanswered:{t}"),
            vec![format!("the open naming an insecure endpoint was not answered ({t}): it must fail")],
        );
    }
    // Confirm the refusal is about the endpoint: not a parse or admission refusal, and the
    // same open with the socket made private again succeeds (in a fresh session).
    let code = r.frame().and_then(|f| f.error_code()).unwrap_or("").to_string();
    if code.starts_with("invalid_")
        || code.starts_with("unsupported_")
        || code == Code::ToolAdapterBindingMismatch.as_str()
    {
        let field = r.frame().and_then(|f| f.error_field()).unwrap_or("").to_string();
        return Outcome::Error(format!(
            "inconclusive: the open was refused at parse or admission ({t}, field `{field}`), before the endpoint was looked at"
        ));
    }
    c.session = format!("{}-control", c.session);
    let d = tryo!(c.descriptor(1, None));
    let v = tryo!(c.open(1, super::DCtx::host_adapter(&d)));
    let control = tryo!(one(c, v));
    if rtoken(&control) != "ok" {
        return Outcome::Error(format!(
            "inconclusive: the control open with the socket private again was refused too ({})",
            rtoken(&control)
        ));
    }
    Outcome::token("open-refused")
}
/// One insecure form of the endpoint for [`endpoint_insecure_forms`]: its name, how to make
/// it (returning the endpoint path to name) and how to undo it.
struct InsecureForm {
    what: &'static str,
    make: fn(&Path) -> std::io::Result<PathBuf>,
    undo: fn(&Path),
}

/// PC-1.2 MUST [daemon], each listed check on its own: the endpoint must be a socket and not a
/// symlink with no group/other mode bits, in a real (non-symlink) directory with no
/// group/other bits, both owned by the daemon's uid. One form per open, each in its own
/// session: refused, and never connected to. A read-only bit counts (the rule is "no
/// group/other bits", not "not writable by others"), and so does an other bit without a group
/// bit. Canonical is checked whole: a symlink above the socket's directory is refused too
/// (0.3.3 compares the directory with its realpath). The owner form needs the runner to be
/// root (it lends the socket to uid 65534); without it, it is left out, said in the outcome.
fn endpoint_insecure_forms(c: &mut DCtx<'_>) -> Outcome {
    use std::os::unix::fs::PermissionsExt;
    fn mode(p: &Path, m: u32) -> std::io::Result<()> {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m))
    }
    let forms: Vec<InsecureForm> = vec![
        InsecureForm {
            what: "the socket readable by its group (0640)",
            make: |s| mode(s, 0o640).map(|()| s.to_path_buf()),
            undo: |s| drop(mode(s, 0o600)),
        },
        InsecureForm {
            what: "the socket usable by its group (0660)",
            make: |s| mode(s, 0o660).map(|()| s.to_path_buf()),
            undo: |s| drop(mode(s, 0o600)),
        },
        // Other bits without a group bit: a check for group bits only passes these.
        InsecureForm {
            what: "the socket writable by others (0602)",
            make: |s| mode(s, 0o602).map(|()| s.to_path_buf()),
            undo: |s| drop(mode(s, 0o600)),
        },
        InsecureForm {
            what: "the socket readable by others (0604)",
            make: |s| mode(s, 0o604).map(|()| s.to_path_buf()),
            undo: |s| drop(mode(s, 0o600)),
        },
        InsecureForm {
            what: "its directory readable and searchable by its group (0750)",
            make: |s| mode(s.parent().unwrap_or(s), 0o750).map(|()| s.to_path_buf()),
            undo: |s| drop(mode(s.parent().unwrap_or(s), 0o700)),
        },
        InsecureForm {
            what: "its directory searchable by others (0701)",
            make: |s| mode(s.parent().unwrap_or(s), 0o701).map(|()| s.to_path_buf()),
            undo: |s| drop(mode(s.parent().unwrap_or(s), 0o700)),
        },
        InsecureForm {
            what: "its directory writable and searchable by others (0703)",
            make: |s| mode(s.parent().unwrap_or(s), 0o703).map(|()| s.to_path_buf()),
            undo: |s| drop(mode(s.parent().unwrap_or(s), 0o700)),
        },
        // A symlink above the socket's own directory: that directory and the socket pass
        // lstat, so only resolving the whole path (canonical) refuses it.
        InsecureForm {
            what: "its directory reached through a symlinked ancestor",
            make: |s| {
                let dir = s.parent().unwrap_or(s);
                let (Some(up), Some(name), Some(file)) = (dir.parent(), dir.file_name(), s.file_name()) else {
                    return Err(std::io::Error::other("the socket's directory has no parent"));
                };
                let anc = dir.join("anc");
                std::fs::create_dir_all(&anc)?;
                mode(&anc, 0o700)?;
                let _ = std::fs::remove_file(anc.join("up"));
                std::os::unix::fs::symlink(up, anc.join("up"))?;
                let endpoint = anc.join("up").join(name).join(file);
                if endpoint.as_os_str().len() > 100 {
                    return Err(std::io::Error::other("the path through the symlink is over 100 bytes"));
                }
                Ok(endpoint)
            },
            undo: |s| {
                let anc = s.parent().unwrap_or(s).join("anc");
                let _ = std::fs::remove_file(anc.join("up"));
                let _ = std::fs::remove_dir(anc);
            },
        },
        InsecureForm {
            what: "the endpoint a symlink to the private socket",
            make: |s| {
                let link = s.with_file_name("link.sock");
                let _ = std::fs::remove_file(&link);
                std::os::unix::fs::symlink(s, &link).map(|()| link)
            },
            undo: |s| drop(std::fs::remove_file(s.with_file_name("link.sock"))),
        },
        InsecureForm {
            what: "its directory reached through a symlink",
            make: |s| {
                let dir = s.parent().unwrap_or(s);
                let alias = dir.join("alias");
                let _ = std::fs::remove_file(&alias);
                std::os::unix::fs::symlink(dir, &alias).map(|()| alias.join(s.file_name().unwrap_or_default()))
            },
            undo: |s| drop(std::fs::remove_file(s.parent().unwrap_or(s).join("alias"))),
        },
        InsecureForm {
            what: "the socket owned by another uid (65534)",
            make: |s| {
                if !rustix::process::geteuid().is_root() {
                    return Err(std::io::Error::other("not root"));
                }
                std::os::unix::fs::chown(s, Some(65534), None).map(|()| s.to_path_buf())
            },
            undo: |s| drop(std::os::unix::fs::chown(s, Some(rustix::process::geteuid().as_raw()), None)),
        },
    ];
    let socket = c.probe.socket.clone();
    let own = c.session.clone();
    let mut problems = Vec::new();
    let mut left_out = Vec::new();
    for (i, f) in forms.iter().enumerate() {
        let endpoint = match (f.make)(&socket) {
            Ok(p) => p,
            Err(e) => {
                (f.undo)(&socket);
                left_out.push(format!("{} ({e})", f.what));
                continue;
            }
        };
        c.session = format!("{own}-e{i}");
        c.endpoints.push(endpoint.to_string_lossy().into_owned());
        let before = c.probe.seen().connections;
        let d = c.descriptor(1, None).map(|mut d| {
            d["endpoint"]["path"] = json!(endpoint.to_string_lossy());
            d
        });
        let r = d.and_then(|d| c.open(1, DCtx::host_adapter(&d))).and_then(|v| one(c, v));
        (f.undo)(&socket);
        c.session = own.clone();
        let r = tryo!(r);
        let connected = c.probe.seen().connections != before;
        let t = rtoken(&r);
        let code = r.frame().and_then(|f| f.error_code()).unwrap_or("").to_string();
        if code.starts_with("invalid_") || code.starts_with("unsupported_") {
            let field = r.frame().and_then(|f| f.error_field()).unwrap_or("").to_string();
            return Outcome::Error(format!(
                "inconclusive: the open naming {} was refused at parse ({t}, field `{field}`), before the endpoint \
                 was looked at",
                f.what
            ));
        }
        if connected {
            problems.push(format!("{}: the daemon connected to it", f.what));
        } else if !t.starts_with("error:") {
            problems
                .push(format!("{}: the open was answered {t}; it must be refused (adapter_endpoint_insecure)", f.what));
        }
    }
    // The same open on the private socket succeeds: the refusals were about the endpoint.
    c.session = format!("{own}-control");
    let d = tryo!(c.descriptor(1, None));
    let v = tryo!(c.open(1, DCtx::host_adapter(&d)));
    let control = tryo!(one(c, v));
    release(c, 1);
    c.session = own;
    if rtoken(&control) != "ok" {
        return Outcome::Error(format!(
            "inconclusive: the control open naming the private socket was refused too ({})",
            rtoken(&control)
        ));
    }
    let token = match (problems.is_empty(), left_out.is_empty()) {
        (false, _) => "insecure-form-used".to_string(),
        (true, true) => "refused-each".to_string(),
        // The owner form needs root: said by the token, not failed.
        (true, false) => "refused-each-tried".to_string(),
    };
    Outcome::with(token, problems)
}
fn revoke_seen_within(c: &DCtx<'_>, conn_index: usize, wait: Duration) -> bool {
    let t = Instant::now();
    while t.elapsed() < wait {
        if c.probe.seen().frames.iter().any(|(n, f)| *n == conn_index && f["kind"] == "revoke") {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}
fn open_bound(c: &mut DCtx<'_>, generation: u64) -> Result<(Value, usize), Outcome> {
    let d = c.descriptor(generation, None)?;
    let idx = open_with(c, &d, generation)?;
    Ok((d, idx))
}
/// Open the case session with descriptor `d` on a probe that answers `bound` exactly; the
/// probe connection's index. A refused open is a failed precondition (inconclusive).
pub(super) fn open_with(c: &mut DCtx<'_>, d: &Value, generation: u64) -> Result<usize, Outcome> {
    c.probe.set(BoundMode::Exact, InvokeMode::Normal);
    let v = c.open(generation, super::DCtx::host_adapter(d))?;
    let r = one(c, v)?;
    if rtoken(&r) != "ok" {
        return Err(precondition_open(&r));
    }
    Ok(c.probe.seen().connections.saturating_sub(1))
}
fn revoke_on_close(c: &mut DCtx<'_>) -> Outcome {
    let (_, idx) = tryo!(open_bound(c, 1));
    let v = tryo!(c.close(1));
    let r = tryo!(one(c, v));
    let t = rtoken(&r);
    Outcome::token(if revoke_seen_within(c, idx, c.target.step) {
        "revoked".to_string()
    } else {
        format!("close-{t}-no-revoke")
    })
}
fn revoke_on_replacement(c: &mut DCtx<'_>) -> Outcome {
    let (_, idx) = tryo!(open_bound(c, 1));
    if let Err(o) = open_bound(c, 2) {
        return o;
    }
    Outcome::token(if revoke_seen_within(c, idx, c.target.step) { "revoked" } else { "no-revoke" })
}
/// `requestTimeoutMs` of the close-backstop case: the daemon's own budget for any answer.
const BACKSTOP_TIMEOUT_MS: u64 = 1000;

/// The protocol text (revoke is best effort; closing the private socket is the final
/// revocation backstop) and SPEC §3.4: after `close`, the daemon ends the adapter connection
/// itself, even when the adapter neither answers `revoked` nor closes — and keeps sending bytes
/// (a line of spaces it never finishes, one every 200 ms): activity on the connection must not
/// put the backstop off. The daemon may wait for `revoked` within its own `requestTimeoutMs`
/// (1 s here); the case allows twice that plus one step for its half-close (the probe's EOF),
/// then the same again from that EOF, plus one trickle interval, for the socket to be closed
/// (a trickled byte refused), so a daemon that closes near the end of its grace is never
/// judged by when the probe's next byte happened to be due. The provoked state is confirmed:
/// `close` answered ok, the probe still reading and able to trickle (a probe that cannot clone
/// its socket to send the bytes makes the case inconclusive).
fn revoke_closes_connection(c: &mut DCtx<'_>) -> Outcome {
    c.probe.set_revoke_silent(true);
    let out = revoke_backstop(c);
    c.probe.set_revoke_silent(false);
    out
}
fn revoke_backstop(c: &mut DCtx<'_>) -> Outcome {
    let d = tryo!(c.descriptor(1, Some(limits_with_timeout(BACKSTOP_TIMEOUT_MS))));
    let idx = tryo!(open_with(c, &d, 1));
    let v = tryo!(c.close(1));
    let r = tryo!(one(c, v));
    if rtoken(&r) != "ok" {
        return Outcome::Error(format!(
            "inconclusive: close was not answered ok ({}), so no revocation was due",
            rtoken(&r)
        ));
    }
    let grace = Duration::from_millis(BACKSTOP_TIMEOUT_MS * 2) + c.target.step;
    if !ended_within(c, idx, grace) {
        return Outcome::token("left-open");
    }
    // Its write half ended; the socket is closed once the probe's bytes are refused.
    loop {
        let seen = c.probe.seen();
        let now = Instant::now();
        match backstop_verdict(&seen, idx, grace, now) {
            Some(out) => return out,
            None => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}
/// The close-backstop case's verdict on probe connection `idx` at `now`, once the daemon ended
/// its half (`None`: wait on). Closed when a trickled byte was refused; inconclusive when the
/// probe could not trickle; still reading once `grace` plus one trickle interval passed since
/// the probe saw the EOF (the refusal of a byte shows at the next byte due after the close).
fn backstop_verdict(seen: &super::probe::ProbeLog, idx: usize, grace: Duration, now: Instant) -> Option<Outcome> {
    if seen.refused.iter().any(|(n, _)| *n == idx) {
        return Some(Outcome::token("closed"));
    }
    if seen.drip_unavailable.contains(&idx) {
        return Some(Outcome::Error(
            "inconclusive: the probe could not clone its socket to keep sending bytes after revoke, so whether the \
             daemon closed the socket (and not only its half) cannot be observed"
                .into(),
        ));
    }
    let eof = seen.ended.iter().find(|(n, _)| *n == idx).map(|(_, at)| *at)?;
    let allowed = grace + super::probe::REVOKE_DRIP_EVERY;
    let since = now.saturating_duration_since(eof);
    if since < allowed {
        return None;
    }
    Some(Outcome::with(
        "left-open-reading",
        vec![format!(
            "the daemon ended its half of the adapter connection after revoke but went on reading the adapter's \
             bytes for {} ms after that (allowed: {} ms and one {} ms trickle interval): an adapter that keeps \
             sending holds the socket open, so closing it is no backstop",
            since.as_millis(),
            grace.as_millis(),
            super::probe::REVOKE_DRIP_EVERY.as_millis()
        )],
    ))
}
/// SPEC §3.4 and §4.3 (lifecycle): a higher generation replaces the session while a call of
/// the old generation is in flight (its invoke reached the probe, which never answers it): the
/// old connection gets `revoke`, the old generation's call fails at once (its wake is answered
/// in less than half of `requestTimeoutMs`, 3 s) and nothing more is sent on the old
/// connection, and the new generation's tool calls reach the adapter on its own connection. A
/// daemon may instead refuse the replacement `session_busy` while the turn runs (Pi Daemon
/// 0.3.3): then nothing is revoked and the running call goes on to its own end.
/// `requestTimeoutMs` of the replacement case's old generation.
const REPLACE_TIMEOUT_MS: u64 = 3000;

fn revoke_replacement_in_flight(c: &mut DCtx<'_>) -> Outcome {
    let out = replacement_in_flight(c);
    c.probe.set(BoundMode::Exact, InvokeMode::Normal);
    out
}
/// Open generation 1 with `requestTimeoutMs` `timeout_ms` on a probe that never answers an
/// invoke, and send a one-call wake on a fresh connection: the probe connection's index, that
/// connection, the wake command, and whether the call's invoke reached the probe within
/// two steps (the provoked state: a call in flight on the wire).
fn call_held_in_flight(c: &mut DCtx<'_>, timeout_ms: u64) -> Result<(usize, Conn, Value, bool), Outcome> {
    let d = c.descriptor(1, Some(limits_with_timeout(timeout_ms)))?;
    let link = open_with(c, &d, 1)?;
    c.probe.set(BoundMode::Exact, InvokeMode::Ignore);
    let mut conn = c.connect()?;
    let w = c.wake(1, "fs_stat", &json!({"path": "."}))?;
    conn.send(&w);
    let t = Instant::now();
    let in_flight = loop {
        let seen = c.probe.seen().frames.iter().any(|(n, f)| *n == link && f["kind"] == "invoke");
        if seen || t.elapsed() > c.target.step * 2 {
            break seen;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Ok((link, conn, w, in_flight))
}

/// The `requestId` of a command.
fn rid_of(v: &Value) -> String {
    v["requestId"].as_str().unwrap_or("").to_string()
}

fn replacement_in_flight(c: &mut DCtx<'_>) -> Outcome {
    let (old, mut conn, w, in_flight) = tryo!(call_held_in_flight(c, REPLACE_TIMEOUT_MS));
    let rid = rid_of(&w);
    if !in_flight {
        return Outcome::Error(
            "inconclusive: the old generation's wake made no tool call through the adapter, so no call was in flight \
             at the replacement"
                .into(),
        );
    }
    let replaced = Instant::now();
    // A daemon may refuse to replace a generation while its turn runs (Pi Daemon 0.3.3:
    // session_busy); then nothing may be revoked and the call in flight goes on undisturbed.
    let d2 = tryo!(c.descriptor(2, None));
    c.probe.set(BoundMode::Exact, InvokeMode::Ignore);
    let v = tryo!(c.open(2, super::DCtx::host_adapter(&d2)));
    let r2 = tryo!(one(c, v));
    if r2.frame().and_then(|f| f.error_code()) == Some(DaemonCode::SessionBusy.as_str()) {
        let mut p = Vec::new();
        if revoke_seen_within(c, old, c.target.step / 2) {
            p.push(
                "the replacement was refused session_busy, yet the running generation's connection was revoked".into(),
            );
        }
        let r = conn.recv_for(&rid);
        let r = if r == Recv::Timeout { conn.recv_within(Duration::from_millis(REPLACE_TIMEOUT_MS) * 2) } else { r };
        if r.frame().is_none() {
            p.push(format!("the running generation's wake was never answered ({})", rtoken(&r)));
        }
        return Outcome::with("busy-refused", p);
    }
    if rtoken(&r2) != "ok" {
        return precondition_open(&r2);
    }
    let new = c.probe.seen().connections.saturating_sub(1);
    let mut p = Vec::new();
    if !revoke_seen_within(c, old, c.target.step) {
        p.push("the replaced generation's connection got no revoke".into());
    }
    let r = conn.recv_for(&rid);
    let r = if r == Recv::Timeout { conn.recv_within(Duration::from_millis(REPLACE_TIMEOUT_MS)) } else { r };
    let took = replaced.elapsed();
    if r.frame().is_none() {
        p.push(format!("the old generation's wake was not answered after the replacement ({})", rtoken(&r)));
    } else if took >= Duration::from_millis(REPLACE_TIMEOUT_MS / 2) {
        p.push(format!(
            "the old generation's call in flight ended only {} ms after the replacement: a revoked binding's calls \
             fail at once, not at requestTimeoutMs ({REPLACE_TIMEOUT_MS} ms)",
            took.as_millis()
        ));
    }
    let before = c.probe.seen().frames.iter().filter(|(n, f)| *n == new && f["kind"] == "invoke").count();
    let w2 = tryo!(c.wake(2, "fs_stat", &json!({"path": "."})));
    let _ = one(c, w2);
    let seen = c.probe.seen();
    if seen.frames.iter().filter(|(n, f)| *n == new && f["kind"] == "invoke").count() == before {
        p.push("the new generation's tool call did not reach the adapter on its own connection".into());
    }
    let after_revoke =
        seen.frames.iter().filter(|(n, _)| *n == old).skip_while(|(_, f)| f["kind"] != "revoke").skip(1).count();
    if after_revoke > 0 {
        p.push(format!("{after_revoke} frame(s) were sent on the old connection after its revoke"));
    }
    Outcome::with("replaced", p)
}
/// `requestTimeoutMs` of the close-in-flight case.
const CLOSE_TIMEOUT_MS: u64 = 3000;

/// SPEC §3.4 (`close` sends `revoke`) and lifecycle: `close` of a generation whose turn waits
/// on a tool call in flight (its invoke reached the probe, which never answers it). Two
/// behaviours are allowed, as for a replacement. A daemon may refuse the close `session_busy`
/// while the turn runs (Pi Daemon 0.3.3): then nothing is revoked, the turn goes on to its own
/// end (the call times out at `requestTimeoutMs`, 3 s, and the wake is answered), and the
/// session still works: a close once the wake is answered is ok and revokes. Or it accepts the
/// close: then the connection gets `revoke` (an `abort` of the call before it is allowed,
/// nothing after it) and the closed generation's call fails at once: its wake is answered in
/// less than half of `requestTimeoutMs`. A close refused for another reason is inconclusive.
fn bind_close_in_flight(c: &mut DCtx<'_>) -> Outcome {
    let out = close_in_flight(c);
    c.probe.set(BoundMode::Exact, InvokeMode::Normal);
    out
}
fn close_in_flight(c: &mut DCtx<'_>) -> Outcome {
    let (link, mut conn, w, in_flight) = tryo!(call_held_in_flight(c, CLOSE_TIMEOUT_MS));
    let rid = rid_of(&w);
    if !in_flight {
        release(c, 1);
        return Outcome::Error(
            "inconclusive: the wake made no tool call through the adapter, so no call was in flight at the close"
                .into(),
        );
    }
    let closed_at = Instant::now();
    let v = tryo!(c.close_retaining(1, false));
    let r = tryo!(one(c, v));
    let mut p = Vec::new();
    if r.frame().and_then(|f| f.error_code()) == Some(DaemonCode::SessionBusy.as_str()) {
        if revoke_seen_within(c, link, c.target.step / 2) {
            p.push("the close was refused session_busy, yet the running generation's connection was revoked".into());
        }
        let r = conn.recv_for(&rid);
        let r = if r == Recv::Timeout { conn.recv_within(Duration::from_millis(CLOSE_TIMEOUT_MS) * 2) } else { r };
        if r.frame().is_none() {
            p.push(format!("the running wake was never answered after the refused close ({})", rtoken(&r)));
        }
        // The session still works: once its turn ended, it closes (and revokes).
        c.probe.set(BoundMode::Exact, InvokeMode::Normal);
        let v = tryo!(c.close_retaining(1, false));
        let again = tryo!(one(c, v));
        if rtoken(&again) != "ok" {
            p.push(format!(
                "after the refused close and the end of its turn, the session's close was answered {}, not ok",
                rtoken(&again)
            ));
        } else if !revoke_seen_within(c, link, c.target.step) {
            p.push("the close after the turn ended was answered ok but sent no revoke".into());
        }
        return Outcome::with("busy-refused", p);
    }
    if rtoken(&r) != "ok" {
        release(c, 1);
        return Outcome::Error(format!(
            "inconclusive: the close was answered {}, neither ok nor session_busy (the refusal this case allows)",
            rtoken(&r)
        ));
    }
    if !revoke_seen_within(c, link, c.target.step) {
        p.push("the closed generation's connection got no revoke".into());
    }
    let r = conn.recv_for(&rid);
    let r = if r == Recv::Timeout { conn.recv_within(Duration::from_millis(CLOSE_TIMEOUT_MS)) } else { r };
    let took = closed_at.elapsed();
    if r.frame().is_none() {
        p.push(format!("the closed session's wake was not answered after the close ({})", rtoken(&r)));
    } else if took >= Duration::from_millis(CLOSE_TIMEOUT_MS / 2) {
        p.push(format!(
            "the closed generation's call in flight ended only {} ms after the close: a revoked binding's calls fail \
             at once, not at requestTimeoutMs ({CLOSE_TIMEOUT_MS} ms)",
            took.as_millis()
        ));
    }
    let after_revoke = link_frames_after_revoke(c, link);
    if after_revoke > 0 {
        p.push(format!("{after_revoke} frame(s) were sent on the closed generation's connection after its revoke"));
    }
    Outcome::with("closed", p)
}
/// How many frames the daemon sent on probe connection `link` after its `revoke`.
fn link_frames_after_revoke(c: &DCtx<'_>, link: usize) -> usize {
    c.probe.seen().frames.iter().filter(|(n, _)| *n == link).skip_while(|(_, f)| f["kind"] != "revoke").skip(1).count()
}
/// SPEC §3.4: re-opening a bound generation with the same policy answers `created:false`
/// without binding again. SPEC §2.5: each successful open answers `{created, session}`, the
/// session naming the `sessionId` and `generation` it opened — the first open's
/// (`created:true`) and the re-open's alike, read through the contract's `PortableOpenData`.
fn policy_reopen_same(c: &mut DCtx<'_>) -> Outcome {
    let d = tryo!(c.descriptor(1, None));
    c.probe.set(BoundMode::Exact, InvokeMode::Normal);
    let v = tryo!(c.open(1, super::DCtx::host_adapter(&d)));
    let first = tryo!(one(c, v));
    if rtoken(&first) != "ok" {
        return precondition_open(&first);
    }
    let conns = c.probe.seen().connections;
    let v = tryo!(c.open(1, super::DCtx::host_adapter(&d)));
    let r = tryo!(one(c, v));
    let mut p = Vec::new();
    if c.probe.seen().connections != conns {
        p.push("a re-open at the same generation and policy rebound the adapter".into());
    }
    p.extend(open_names_session(&first, "the first open", &c.session, 1));
    if rtoken(&r) != "ok" {
        return Outcome::with(rtoken(&r), p);
    }
    p.extend(open_names_session(&r, "the re-open", &c.session, 1));
    Outcome::with(format!("created:{}", data(&r)["created"]), p)
}
/// How long the probe holds `bound` to each re-open of the concurrent re-open case, so that
/// a daemon binding both has both binds in flight at once (well inside `requestTimeoutMs`).
const REOPEN_BOUND_DELAY_MS: u64 = 500;
/// `requestTimeoutMs` of the concurrent re-open case's generation.
const REOPEN_TIMEOUT_MS: u64 = 3000;

/// SPEC §1.2 (one connection per session generation) and §3.4: a generation whose adapter
/// connection failed after its open (the probe closes right after `bound`) is re-opened twice at
/// once, the probe holding each `bound` for 500 ms. A daemon may serialize the two (Pi Daemon
/// 0.3.3 answers both `created:false` without binding: the session stays resident), bind once
/// and answer the other `created:false`, or bind twice; when it binds twice, at most one of those
/// connections may still be open once both re-opens are answered and a grace has passed — the
/// other revoked and closed (`revoke` is best effort, closing the socket the backstop: the grace
/// is twice `requestTimeoutMs` plus one step, as for `daemon.bind.revoke-closes-connection`).
/// Skipped when the provoked state is not confirmed: the first open refused, or fewer than two
/// binds of the generation after the failure (nothing could be left over).
fn bind_concurrent_reopen(c: &mut DCtx<'_>) -> Outcome {
    let out = concurrent_reopen(c, true);
    c.probe.set(BoundMode::Exact, InvokeMode::Normal);
    out
}
/// PC-1.2 MUST [both], one connection per session generation, at a session's birth: two opens
/// of a new session at generation 1 sent at once, the probe holding each `bound` for 500 ms.
/// As [`bind_concurrent_reopen`]: a daemon that serializes them (Pi Daemon 0.3.3: the second
/// finds the session and answers `created:false`) is skipped; one that binds twice must leave
/// at most one of those connections open.
fn bind_concurrent_first_opens(c: &mut DCtx<'_>) -> Outcome {
    let out = concurrent_reopen(c, false);
    c.probe.set(BoundMode::Exact, InvokeMode::Normal);
    out
}
fn concurrent_reopen(c: &mut DCtx<'_>, failed_first: bool) -> Outcome {
    let d = tryo!(c.descriptor(1, Some(limits_with_timeout(REOPEN_TIMEOUT_MS))));
    if failed_first {
        c.probe.set(BoundMode::CloseAfterBound, InvokeMode::Normal);
        let v = tryo!(c.open(1, super::DCtx::host_adapter(&d)));
        let r = tryo!(one(c, v));
        if rtoken(&r) != "ok" {
            return Outcome::Skip(format!(
                "the open whose adapter closes right after bound was answered {}: the failed binding the case \
                 re-opens was never set up",
                rtoken(&r)
            ));
        }
        // The daemon's own read of the adapter's EOF.
        std::thread::sleep(Duration::from_millis(200));
    }
    c.probe.set(BoundMode::Delay(REOPEN_BOUND_DELAY_MS), InvokeMode::Normal);
    let first = c.probe.seen().connections;
    let (mut a, mut b) = (tryo!(c.connect()), tryo!(c.connect()));
    let (va, vb) = (tryo!(c.open(1, super::DCtx::host_adapter(&d))), tryo!(c.open(1, super::DCtx::host_adapter(&d))));
    a.send(&va);
    b.send(&vb);
    let wait = c.target.step * 3 + Duration::from_millis(REOPEN_BOUND_DELAY_MS);
    let (ra, rb) = (answer_within(&mut a, &va, wait), answer_within(&mut b, &vb, wait));
    let answered = Instant::now();
    let session = c.session.clone();
    let bound_conns = |seen: &super::probe::ProbeLog| -> Vec<usize> {
        let mut v: Vec<usize> = seen
            .frames
            .iter()
            .filter(|(n, f)| {
                *n >= first && f["kind"] == "bind" && f["sessionId"] == session.as_str() && f["generation"] == 1
            })
            .map(|(n, _)| *n)
            .collect();
        v.dedup();
        v
    };
    let binds = bound_conns(&c.probe.seen());
    let answers = format!("{} and {}", rtoken(&ra), rtoken(&rb));
    if binds.len() < 2 {
        return Outcome::Skip(format!(
            "the two concurrent opens of generation 1 were answered {answers} with {} bind(s) reaching the probe: \
             the daemon did not bind twice (it serialized them, or kept the session without binding), so no second \
             connection could be left over",
            binds.len()
        ));
    }
    let grace = Duration::from_millis(REOPEN_TIMEOUT_MS * 2) + c.target.step;
    loop {
        let seen = c.probe.seen();
        let open: Vec<usize> = binds.iter().copied().filter(|n| !seen.closed.iter().any(|(m, _)| m == n)).collect();
        if open.len() <= 1 {
            return Outcome::token("one-connection");
        }
        if answered.elapsed() >= grace {
            return Outcome::with(
                "connections-left-open",
                vec![format!(
                    "the two concurrent opens (answered {answers}) bound generation 1 on {} adapter connections and \
                     {} of them ({open:?}) were still open {} ms after both answers: one connection per session \
                     generation (the replaced binding is revoked and its connection closed)",
                    binds.len(),
                    open.len(),
                    grace.as_millis()
                )],
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
/// The answer to command `v` (sent on `conn`) within `wait`, events and other answers skipped.
fn answer_within(conn: &mut Conn, v: &Value, wait: Duration) -> Recv {
    let deadline = Instant::now() + wait;
    loop {
        let r = conn.recv_within(deadline.saturating_duration_since(Instant::now()));
        match r.frame() {
            Some(f) if f["requestId"] == v["requestId"] && f["kind"] != "event" => return r,
            Some(_) => continue,
            None => return r,
        }
    }
}
/// SPEC §2.5: the data of an open answered ok is `{created, session}`, its session naming
/// `session_id` and `generation` (the contract's `PortableOpenData`); what breaks it, said of
/// `what`. The session is `null` only when it was closed meanwhile, which no case here does.
fn open_names_session(r: &Recv, what: &str, session_id: &str, generation: u64) -> Vec<String> {
    let d = match serde_json::from_value::<protocol_v2::PortableOpenData>(data(r)) {
        Ok(d) => d,
        Err(e) => {
            return vec![format!("{what}'s data breaks the contract (PortableOpenData: {{created, session}}): {e}")]
        }
    };
    match d.session {
        None => vec![format!(
            "{what} answered session: null although nothing closed the session: an open answers the session it \
             opened ({{created, session}})"
        )],
        Some(s) if s.session_id != session_id || s.generation != generation => vec![format!(
            "{what} of session {session_id} generation {generation} answered the session {} generation {}",
            s.session_id, s.generation
        )],
        Some(_) => Vec::new(),
    }
}
fn policy_no_tools_after_failed_bind(c: &mut DCtx<'_>) -> Outcome {
    c.probe.set(BoundMode::Close, InvokeMode::Normal);
    let first = c.probe.seen().connections;
    let d = tryo!(c.descriptor(1, None));
    let v = tryo!(c.open(1, super::DCtx::host_adapter(&d)));
    let r = one(c, v);
    c.probe.set(BoundMode::Exact, InvokeMode::Normal);
    let r = tryo!(r);
    if !bind_seen_since(c, first) {
        return Outcome::Error(format!(
            "inconclusive: the first open was answered {} before any bind reached the probe, so no policy was retained by a failed bind",
            rtoken(&r)
        ));
    }
    let v = tryo!(c.open(1, json!("none")));
    let r = tryo!(one(c, v));
    retryable_as_contract(
        refusal(&r, DaemonCode::ToolAdapterReprovisionRequired.as_str(), None),
        &r,
        DaemonCode::ToolAdapterReprovisionRequired,
    )
}
/// PC-3.4 MUST [daemon], the table's "same generation, no descriptor" row on a generation
/// whose adapter link is live and bound (the other cases reach it after a failed bind or a
/// restart): `tool_adapter_reprovision_required` with the contract's retryable:true, and the
/// refused re-open leaves the binding alone: no `revoke` reaches the adapter, and a later tool
/// call of the generation still reaches the same connection (a daemon that let the re-open
/// through would keep the session without its tools).
fn policy_no_tools_reopen_live(c: &mut DCtx<'_>) -> Outcome {
    let (_, idx) = tryo!(open_bound(c, 1));
    let v = tryo!(c.open(1, json!("none")));
    let r = tryo!(one(c, v));
    let out = retryable_as_contract(
        refusal(&r, DaemonCode::ToolAdapterReprovisionRequired.as_str(), None),
        &r,
        DaemonCode::ToolAdapterReprovisionRequired,
    );
    let Outcome::Observed { token, mut problems } = out else { return out };
    if revoke_seen_within(c, idx, c.target.step) {
        problems.push("the refused no-tools re-open revoked the live binding".into());
    }
    let before = invokes(c).len();
    let w = tryo!(c.wake(1, "fs_stat", &json!({"path": "."})));
    let w = tryo!(one(c, w));
    let seen = c.probe.seen();
    let later: Vec<usize> =
        seen.frames.iter().filter(|(_, f)| f["kind"] == "invoke").skip(before).map(|(n, _)| *n).collect();
    match later.first() {
        Some(n) if *n == idx => {}
        Some(_) => problems.push("after the refused no-tools re-open, the tool call went to another connection".into()),
        None if rtoken(&w) == "ok" => problems.push(format!(
            "after the refused no-tools re-open, a wake with an fs_stat call was answered {} and no invoke reached the \
             adapter: the generation lost its tools",
            rtoken(&w)
        )),
        None => {
            return Outcome::Error(format!(
                "inconclusive: the wake after the re-open was answered {} with no invoke, so the binding could not be \
                 checked",
                rtoken(&w)
            ))
        }
    }
    Outcome::with(token, problems)
}
/// SPEC §3.4: a re-open at the same generation with a different summary is
/// `session_policy_conflict`. A generation opened without tools has no summary; re-opened
/// with a descriptor, the summaries differ (none against one): it should be refused, with no
/// bind reaching the adapter. A SHOULD case: the rule compares two summaries and this
/// generation has none, and Pi Daemon 0.3.3 answers `created:false` without binding.
fn policy_tools_added_on_reopen(c: &mut DCtx<'_>) -> Outcome {
    tryo!(open_plain(c));
    let first = c.probe.seen().connections;
    let d = tryo!(c.descriptor(1, None));
    let v = tryo!(c.open(1, super::DCtx::host_adapter(&d)));
    let out = refusal_of(one(c, v), DaemonCode::SessionPolicyConflict.as_str(), None);
    if bind_seen_since(c, first) {
        let mut p = vec!["a re-open adding tools to a generation opened without them reached the adapter".to_string()];
        if let Outcome::Observed { problems, .. } = &out {
            p.extend(problems.iter().cloned());
        }
        return Outcome::with("bound", p);
    }
    out
}
/// SPEC §3.4: a reopen of the live generation whose summary differs in any one limit, or in
/// its operations (one left out), is `session_policy_conflict`: each of the seven limits and
/// the narrowed operations on their own, one re-open each (a refused one changes nothing).
fn policy_summary_mismatch(c: &mut DCtx<'_>) -> Outcome {
    let (_, _) = tryo!(open_bound(c, 1));
    let mut p = Vec::new();
    let mut token = "error:session_policy_conflict".to_string();
    for item in SummaryItem::grant() {
        let mut d = tryo!(c.descriptor(1, None));
        if !item.applies(&d) {
            continue;
        }
        item.apply(&mut d);
        let v = tryo!(c.open(1, super::DCtx::host_adapter(&d)));
        match refusal_of(one(c, v), DaemonCode::SessionPolicyConflict.as_str(), None) {
            Outcome::Observed { token: t, problems } if t == token => {
                p.extend(problems.into_iter().map(|x| format!("{}: {x}", item.name())));
            }
            Outcome::Observed { token: t, .. } => {
                p.push(format!("a re-open whose {} differs from the live one was answered {t}", item.name()));
                token = t;
            }
            other => return other,
        }
    }
    Outcome::with(token, p)
}
/// What differs in a summary-mismatch case: one item of the retained summary (SPEC §3.4 and
/// §6: IDs, version, operations and their order, any limit).
#[derive(Clone, Copy)]
enum SummaryItem {
    AdapterId,
    AdapterVersion,
    OperationOrder,
    /// The last operation left out (a grant narrowed).
    OperationDropped,
    /// One limit, by its key, one step off (still in range and past the fit check).
    Limit(&'static str),
}

/// Every limit of a descriptor: "any limit" differing is a conflict, each on its own.
const SUMMARY_LIMITS: [&str; 7] = [
    "maxRequestBytes",
    "maxResponseBytes",
    "maxConcurrentRequests",
    "maxQueuedRequests",
    "requestTimeoutMs",
    "maxIdempotencyKeys",
    "idempotencyTtlMs",
];

impl SummaryItem {
    /// Every item, each limit on its own.
    fn all() -> Vec<SummaryItem> {
        let mut v = vec![
            SummaryItem::AdapterId,
            SummaryItem::AdapterVersion,
            SummaryItem::OperationOrder,
            SummaryItem::OperationDropped,
        ];
        v.extend(SUMMARY_LIMITS.iter().map(|k| SummaryItem::Limit(k)));
        v
    }

    /// The limits and the operation set (what `daemon.policy.summary-mismatch` changes).
    fn grant() -> Vec<SummaryItem> {
        let mut v = vec![SummaryItem::OperationDropped];
        v.extend(SUMMARY_LIMITS.iter().map(|k| SummaryItem::Limit(k)));
        v
    }

    fn name(self) -> &'static str {
        match self {
            SummaryItem::AdapterId => "adapterId",
            SummaryItem::AdapterVersion => "adapterVersion",
            SummaryItem::OperationOrder => "the operation order",
            SummaryItem::OperationDropped => "the operations (one left out)",
            SummaryItem::Limit(k) => k,
        }
    }

    /// Whether `d` lets this item differ (an order needs two operations, a dropped one two).
    fn applies(self, d: &Value) -> bool {
        match self {
            SummaryItem::OperationOrder | SummaryItem::OperationDropped => {
                d["operations"].as_array().is_some_and(|a| a.len() >= 2)
            }
            SummaryItem::Limit(k) => d["limits"][k].as_u64().is_some(),
            _ => true,
        }
    }

    /// `d` with this item changed and everything else kept (the descriptor stays valid).
    fn apply(self, d: &mut Value) {
        match self {
            SummaryItem::AdapterId => {
                let id = d["adapterId"].as_str().unwrap_or("pi-conform-probe");
                d["adapterId"] = json!(format!("{}-other", &id[..id.len().min(100)]));
            }
            SummaryItem::AdapterVersion => {
                let v = d["adapterVersion"].as_str().unwrap_or("0.1.0");
                d["adapterVersion"] = json!(if v == "9.9.9" { "9.9.8" } else { "9.9.9" });
            }
            SummaryItem::OperationOrder => {
                if let Some(ops) = d["operations"].as_array_mut() {
                    ops.reverse();
                }
            }
            SummaryItem::OperationDropped => {
                if let Some(ops) = d["operations"].as_array_mut() {
                    ops.pop();
                }
            }
            SummaryItem::Limit(k) => {
                // One down, unless that leaves its range (the contract's minimum); then one up.
                let v = d["limits"][k].as_u64().unwrap_or(0);
                let floor = crate::contract::limit_range(k).map_or(0, |(min, _)| min);
                d["limits"][k] = json!(if v > floor { v - 1 } else { v + 1 });
            }
        }
    }
}

/// SPEC §3.4: a reopen of the live generation whose summary differs in `item` alone is
/// `session_policy_conflict`.
fn policy_summary_item(c: &mut DCtx<'_>, item: SummaryItem) -> Outcome {
    let (_, _) = tryo!(open_bound(c, 1));
    let mut d = tryo!(c.descriptor(1, None));
    if !item.applies(&d) {
        return Outcome::Error("inconclusive: the descriptor grants one operation, so its order cannot differ".into());
    }
    item.apply(&mut d);
    let v = tryo!(c.open(1, super::DCtx::host_adapter(&d)));
    refusal_of(one(c, v), DaemonCode::SessionPolicyConflict.as_str(), None)
}
fn policy_summary_adapter_id(c: &mut DCtx<'_>) -> Outcome {
    policy_summary_item(c, SummaryItem::AdapterId)
}
fn policy_summary_adapter_version(c: &mut DCtx<'_>) -> Outcome {
    policy_summary_item(c, SummaryItem::AdapterVersion)
}
fn policy_summary_operation_order(c: &mut DCtx<'_>) -> Outcome {
    policy_summary_item(c, SummaryItem::OperationOrder)
}
fn policy_lower_generation(c: &mut DCtx<'_>) -> Outcome {
    let (_, _) = tryo!(open_bound(c, 2));
    let d = tryo!(c.descriptor(1, None));
    let v = tryo!(c.open(1, super::DCtx::host_adapter(&d)));
    let r = tryo!(one(c, v));
    stale_details_must_be(refusal(&r, DaemonCode::StaleGeneration.as_str(), None), &r, 2, 1)
}

/// SPEC §2.5: a command naming a lower generation than the session's live one is
/// `stale_generation` with `{currentGeneration, receivedGeneration}`; not `session_not_found`.
fn generation_stale_attach(c: &mut DCtx<'_>) -> Outcome {
    let _ = tryo!(open_bound(c, 2));
    let a = tryo!(c.attach(1));
    let r = tryo!(one(c, a));
    // The session was just opened at generation 2 (confirmed): session_not_found is not
    // another reason, it is the wrong answer to the one provoked.
    if r.frame().and_then(|f| f.error_code()) == Some(DaemonCode::SessionNotFound.as_str()) {
        return Outcome::with(
            "error:session_not_found",
            vec!["generation 1 of a session live at generation 2 is stale, not missing: stale_generation".into()],
        );
    }
    stale_details_must_be(refusal(&r, DaemonCode::StaleGeneration.as_str(), None), &r, 2, 1)
}

// ---------------------------------------------------------------- tool traffic

pub(super) fn invokes(c: &DCtx<'_>) -> Vec<Value> {
    c.probe.seen().frames.into_iter().filter(|(_, f)| f["kind"] == "invoke").map(|(_, f)| f).collect()
}
/// SPEC §4.4: an idempotency key names one semantic request (a retry keeps it). Two different
/// tool calls of one operation in one turn are two requests: their invokes carry different
/// keys, or a conforming adapter would answer the second idempotency_conflict, or replay the
/// first's outcome for a write it never ran.
fn tools_distinct_keys(c: &mut DCtx<'_>) -> Outcome {
    let (_, idx) = tryo!(open_bound(c, 1));
    // Two searches of the root with different queries: both paths exist wherever the case
    // runs (Pi Daemon 0.3.3 refuses a path missing under its own cwd before any invoke).
    let calls = [
        ("fs_search", json!({"path": ".", "query": "pi-conform-a"})),
        ("fs_search", json!({"path": ".", "query": "pi-conform-b"})),
    ];
    let w = tryo!(c.wake_calls(1, &calls));
    let r = tryo!(one(c, w));
    let seen = c.probe.seen();
    let inv: Vec<&Value> =
        seen.frames.iter().filter(|(n, f)| *n == idx && f["kind"] == "invoke").map(|(_, f)| f).collect();
    if inv.len() < 2 {
        return Outcome::Error(format!(
            "inconclusive: the turn sent {} invoke(s) for its two fs_search calls (answered {}), so no two keys \
             could be compared",
            inv.len(),
            rtoken(&r)
        ));
    }
    let (a, b) = (&inv[0]["idempotencyKey"], &inv[1]["idempotencyKey"]);
    if inv[0]["payload"] == inv[1]["payload"] {
        return Outcome::Error("inconclusive: the two invokes carry the same payload".into());
    }
    if a == b {
        return Outcome::with(
            "shared-key",
            vec![format!(
                "two different fs_search calls of one turn (queries `pi-conform-a` and `pi-conform-b`) were sent with the same \
                 idempotencyKey: a key names one request, and a conforming adapter answers the second \
                 idempotency_conflict"
            )],
        );
    }
    Outcome::token("distinct-keys")
}
fn tools_invoke_shape(c: &mut DCtx<'_>) -> Outcome {
    let (d, _) = tryo!(open_bound(c, 1));
    let w = tryo!(c.wake(1, "fs_stat", &json!({"path": "."})));
    let r = tryo!(one(c, w));
    let Some(inv) = invokes(c).into_iter().last() else {
        return Outcome::with(rtoken(&r), vec!["the wake made no tool call through the adapter".into()]);
    };
    let admitted = match crate::contract::admit_descriptor(&d, None) {
        Ok(a) => a,
        Err(e) => return Outcome::Error(format!("minted descriptor refused: {e}")),
    };
    let b = crate::contract::Binding::from(&admitted);
    let line = serde_json::to_vec(&inv).unwrap_or_default();
    let mut p = Vec::new();
    if let Err(e) = crate::contract::parse_adapter_frame(&line, &b, crate::contract::Direction::ToAdapter) {
        p.push(format!("the invoke breaks the frame rules: {} at {}", e.error.code, e.error.field()));
    }
    Outcome::with("invoked", p)
}
fn tools_timeout_abort(c: &mut DCtx<'_>) -> Outcome {
    c.probe.set(BoundMode::Exact, InvokeMode::Ignore);
    let limits = AdapterLimits {
        max_concurrent_requests: std::num::NonZeroU64::new(2).unwrap_or(std::num::NonZeroU64::MIN),
        max_queued_requests: 1,
        request_timeout_ms: 300,
        ..super::DEFAULT_LIMITS
    }
    .to_json();
    let d = tryo!(c.descriptor(1, Some(limits)));
    let v = tryo!(c.open(1, super::DCtx::host_adapter(&d)));
    let r = tryo!(one(c, v));
    if rtoken(&r) != "ok" {
        c.probe.set(BoundMode::Exact, InvokeMode::Normal);
        return precondition_open(&r);
    }
    let link = c.probe.seen().connections.saturating_sub(1);
    let sent_before = invokes(c).len();
    let w = tryo!(c.wake(1, "fs_stat", &json!({"path": "."})));
    let mut conn = tryo!(c.connect());
    conn.send(&w);
    // SPEC §4.4 (saturation): one call in flight of maxConcurrentRequests 2 + maxQueuedRequests 1
    // is no full queue (not judged when the call ended before the status came back).
    let mut p = Vec::new();
    if saturation_while_held(c, link) == Some(true) {
        p.push(
            "the session's status read while its one call was held at the adapter reports the queue saturated \
             (a `saturated` flag, or `saturation.active`): one call of maxConcurrentRequests 2 + maxQueuedRequests \
             1 fills neither"
                .into(),
        );
    }
    let first = answer_within(&mut conn, &w, c.target.step * 3);
    let first: Result<Recv, Outcome> = Ok(first);
    c.probe.set(BoundMode::Exact, InvokeMode::Normal);
    // The provoked state: a call really in flight (its invoke reached the probe, which never
    // answers it) when the timeout fires; without one there is nothing to abort.
    if invokes(c).len() == sent_before {
        return Outcome::Error(format!(
            "inconclusive: the wake ({}) made no tool call through the adapter, so no call was in flight when the \
             timeout could fire",
            first.as_ref().map(rtoken).unwrap_or_else(|_| "no answer".into())
        ));
    }
    // The abort is written as the timeout fails the call, so it may reach the probe just
    // after the daemon answered the wake: wait up to one step for it.
    let t = Instant::now();
    let abort = loop {
        let frames = c.probe.seen().frames;
        let inv = frames.iter().rev().find(|(_, f)| f["kind"] == "invoke").map(|(_, f)| f["requestId"].clone());
        let abort = frames.iter().any(|(_, f)| f["kind"] == "abort" && Some(&f["targetRequestId"]) == inv.as_ref());
        if abort || t.elapsed() >= c.target.step {
            break abort;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // SPEC §4.4: the timed-out call is indeterminate and never replayed blindly; a retry of
    // the same semantic request keeps its idempotency key. Watched for a while after the
    // abort: no invoke of the same operation and payload under another key.
    std::thread::sleep(REPLAY_WATCH);
    let on_link: Vec<Value> = c
        .probe
        .seen()
        .frames
        .into_iter()
        .filter(|(n, f)| *n == link && f["kind"] == "invoke")
        .map(|(_, f)| f)
        .collect();
    if let Some(timed_out) = on_link.first() {
        let replays = on_link
            .iter()
            .filter(|f| {
                f["requestId"] != timed_out["requestId"]
                    && f["operation"] == timed_out["operation"]
                    && f["payload"] == timed_out["payload"]
                    && f["idempotencyKey"] != timed_out["idempotencyKey"]
            })
            .count();
        if replays > 0 {
            p.push(format!(
                "the call that timed out (indeterminate) was sent again {replays} time(s) with the same operation and \
                 payload under a new idempotencyKey: an indeterminate request is never replayed blindly, and a retry \
                 of the same request keeps its key"
            ));
        }
    }
    Outcome::with(if abort { "abort-sent" } else { "no-abort" }, p)
}
/// The first value under `key` anywhere inside `v` (depth-first).
fn find_key<'v>(v: &'v Value, key: &str) -> Option<&'v Value> {
    match v {
        Value::Object(m) => m.get(key).or_else(|| m.values().find_map(|x| find_key(x, key))),
        Value::Array(a) => a.iter().find_map(|x| find_key(x, key)),
        _ => None,
    }
}

/// `requestTimeoutMs` of the queue-capacity case: `retryAfterMs` = max(25, min(1000,
/// floor(600 / 20))) = 30, a value the clamp does not produce.
const CAPACITY_TIMEOUT_MS: u64 = 600;

/// Whether a queue telemetry `t` reports the queue saturated: a flag (`saturated`), or an
/// object whose `active` says it (Pi Daemon 0.3.3's `saturation`).
fn saturated_of(t: &Value) -> bool {
    ["saturated", "saturation"].iter().any(|k| match t.get(*k) {
        Some(Value::Bool(b)) => *b,
        Some(o @ Value::Object(_)) => o["active"] == true,
        _ => false,
    })
}

/// The session's queue telemetry read while the first invoke on `link` is held at the probe:
/// whether it reports the queue saturated. `None` (not judged) when no invoke came within a
/// step, the status carried no queue telemetry, or that invoke was aborted before the status
/// was answered (the held state is not confirmed).
fn saturation_while_held(c: &mut DCtx<'_>, link: usize) -> Option<bool> {
    let t = Instant::now();
    while link_frames(c, link, "invoke").is_empty() {
        if t.elapsed() >= c.target.step {
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let r = session_status(c).ok()?;
    if !link_frames(c, link, "abort").is_empty() {
        return None;
    }
    let d = (rtoken(&r) == "ok").then(|| data(&r))?;
    telemetry_holder(&d).map(saturated_of)
}

/// The telemetry's occupancy, `(active, queued)`: the first number under a key starting with
/// `active` and with `queued` in its `occupancy` object (the reference's `{active, queued}`, Pi
/// Daemon 0.3.3's `{activeRequests, queuedRequests}`). `None` without both.
fn occupancy_of(t: &Value) -> Option<(u64, u64)> {
    let o = t.get("occupancy")?.as_object()?;
    let first = |prefix: &str| o.iter().find(|(k, _)| k.starts_with(prefix)).and_then(|(_, v)| v.as_u64());
    Some((first("active")?, first("queued")?))
}

/// SPEC §4.4 (saturation) with a queue slot in use: with maxConcurrentRequests 1 and
/// maxQueuedRequests 1, a wake's two read-only calls fill both (the probe answers neither, so
/// the first stays active and the second queued until they time out). A status read while the
/// telemetry's own occupancy shows the queue full — at least one active and one queued call —
/// must report the queue saturated (a `saturated` flag, or `saturation.active`): both come from
/// one snapshot. Read again until the occupancy shows it, for one step; inconclusive when it
/// never does (the daemon ran the calls one at a time, or its telemetry has no occupancy).
fn status_saturated_while_full(c: &mut DCtx<'_>) -> Outcome {
    let out = saturated_while_full(c);
    c.probe.set(BoundMode::Exact, InvokeMode::Normal);
    out
}
fn saturated_while_full(c: &mut DCtx<'_>) -> Outcome {
    let timeout_ms = (c.target.step.as_millis() as u64).clamp(1000, 120_000);
    let limits = AdapterLimits {
        max_concurrent_requests: std::num::NonZeroU64::MIN,
        max_queued_requests: 1,
        request_timeout_ms: timeout_ms as i64,
        ..super::DEFAULT_LIMITS
    }
    .to_json();
    let d = tryo!(c.descriptor(1, Some(limits)));
    let link = tryo!(open_with(c, &d, 1));
    c.probe.set(BoundMode::Exact, InvokeMode::Ignore);
    let mut conn = tryo!(c.connect());
    let attach = tryo!(c.attach(1));
    let _ = c.call(&mut conn, attach);
    let calls = [("fs_stat", json!({"path": "."})), ("fs_list", json!({"path": "."}))];
    let w = tryo!(c.wake_calls(1, &calls));
    conn.send(&w);
    let t = Instant::now();
    while link_frames(c, link, "invoke").is_empty() {
        if t.elapsed() >= c.target.step {
            let r = answer_within(&mut conn, &w, c.target.step);
            return Outcome::Error(format!(
                "inconclusive: no call of the wake reached the adapter within a step (the wake was answered {})",
                rtoken(&r)
            ));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    // Each status is one snapshot: its occupancy says whether the queue was full when it was
    // taken, and then its saturation must say so too.
    let mut last = None;
    let judged = loop {
        let r = match session_status(c) {
            Ok(r) => r,
            Err(o) => return o,
        };
        let d = (rtoken(&r) == "ok").then(|| data(&r));
        let t_holder = d.as_ref().and_then(telemetry_holder);
        let Some(tel) = t_holder else {
            break Err(format!("the session's status was answered {} with no queue telemetry", rtoken(&r)));
        };
        let Some((active, queued)) = occupancy_of(tel) else {
            break Err("the session's queue telemetry has no occupancy (active and queued calls)".into());
        };
        last = Some((active, queued));
        if active >= 1 && queued >= 1 {
            break Ok(saturated_of(tel));
        }
        if t.elapsed() >= c.target.step || !link_frames(c, link, "abort").is_empty() {
            break Err(format!(
                "the telemetry's occupancy never showed the queue full (last: {active} active, {queued} queued) while \
                 the first call was held"
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    // Let the turn end (both calls time out) before the next case.
    let _ = answer_within(&mut conn, &w, Duration::from_millis(timeout_ms) * 2 + c.target.step);
    match judged {
        Ok(true) => Outcome::token("saturated"),
        Ok(false) => Outcome::with(
            "not-saturated",
            vec![format!(
                "the session's status, whose occupancy shows {} active and {} queued calls of maxConcurrentRequests 1 \
                 and maxQueuedRequests 1 (the queue full), does not report the queue saturated (a `saturated` flag, or \
                 `saturation.active`)",
                last.map_or(0, |x| x.0),
                last.map_or(0, |x| x.1)
            )],
        ),
        Err(why) => Outcome::Error(format!("inconclusive: {why}")),
    }
}

/// `requestTimeoutMs` of the queue-wait case: long enough that a loaded machine's delays stay
/// well inside the half timeout of slack the case allows.
const QUEUE_WAIT_TIMEOUT_MS: u64 = 1000;

fn tools_queue_capacity(c: &mut DCtx<'_>) -> Outcome {
    // SPEC §4.4: with maxConcurrentRequests 1 and maxQueuedRequests 0 one call is admitted;
    // the other calls of a concurrent run must be refused by the daemon itself, retryable
    // `adapter_queue_capacity`, before any invoke is written for them. The probe never
    // answers, so the admitted call stays active until its timeout (then its abort).
    c.probe.set(BoundMode::Exact, InvokeMode::Ignore);
    let out = queue_capacity(c);
    c.probe.set(BoundMode::Exact, InvokeMode::Normal);
    out
}
/// The timeouts whose `retryAfterMs` is one past a clamp of PC-4.4's
/// `max(25, min(1000, floor(requestTimeoutMs / 20)))`: 24 unclamped (25), and 1001 (1000).
const RETRY_AFTER_CLAMPS: [u64; 2] = [499, 20020];

fn queue_capacity(c: &mut DCtx<'_>) -> Outcome {
    let out = queue_capacity_with(c, CAPACITY_TIMEOUT_MS, true);
    let Outcome::Observed { token, mut problems } = out else { return out };
    if token != "refused-before-write" {
        return Outcome::Observed { token, problems };
    }
    // Each clamp one past (PC-4.4), in a session of its own whose admitted call the probe
    // answers after 200 ms (a 20 s timeout is not waited for). Only a refusal reported per call
    // carries retryAfterMs to compare; a phase that saw no refusal adds nothing (the first
    // phase judged the refusal itself).
    let own = c.session.clone();
    for timeout in RETRY_AFTER_CLAMPS {
        c.session = format!("{own}-t{timeout}");
        c.probe.set(BoundMode::Exact, InvokeMode::Delay(200));
        let phase = queue_capacity_with(c, timeout, false);
        c.probe.set(BoundMode::Exact, InvokeMode::Ignore);
        if let Outcome::Observed { token, problems: p } = phase {
            if token == "refused-before-write" {
                problems.extend(p.into_iter().map(|p| format!("with requestTimeoutMs {timeout}: {p}")));
            }
        }
    }
    c.session = own;
    Outcome::Observed { token, problems }
}

fn queue_capacity_with(c: &mut DCtx<'_>, timeout_ms: u64, saturation_check: bool) -> Outcome {
    const CODE: &str = DaemonCode::AdapterQueueCapacity.as_str();
    let allowed = 1; // maxConcurrentRequests + maxQueuedRequests
    let retry_after = crate::contract::retry_after_ms(timeout_ms);
    let limits = AdapterLimits {
        max_concurrent_requests: std::num::NonZeroU64::MIN,
        max_queued_requests: 0,
        request_timeout_ms: timeout_ms as i64,
        ..super::DEFAULT_LIMITS
    }
    .to_json();
    let d = tryo!(c.descriptor(1, Some(limits)));
    let v = tryo!(c.open(1, super::DCtx::host_adapter(&d)));
    let r = tryo!(one(c, v));
    if rtoken(&r) != "ok" {
        return precondition_open(&r);
    }
    let link = c.probe.seen().connections.saturating_sub(1);
    // Attached, so the turn's toolCallEnd events are seen too.
    let mut conn = tryo!(c.connect());
    let attach = tryo!(c.attach(1));
    let _ = c.call(&mut conn, attach);
    let calls = [
        ("fs_stat", json!({"path": "."})),
        ("fs_list", json!({"path": "."})),
        ("fs_search", json!({"path": ".", "query": "pi-conform"})),
    ];
    let w = tryo!(c.wake_calls(1, &calls));
    let rid = w["requestId"].as_str().unwrap_or("").to_string();
    conn.send(&w);
    // SPEC §4.4 (saturation): while the one slot is taken (maxQueuedRequests 0) the queue is
    // full, and the session's status read then reports it saturated.
    let saturation = if saturation_check { saturation_while_held(c, link) } else { None };
    let mut events = Vec::new();
    let resp = loop {
        let r = conn.recv_within(c.target.step * 3);
        match r.frame() {
            Some(f) if f.kind() == Some("event") => events.push(f.clone()),
            Some(f) if f.request_id() == Some(rid.as_str()) => break r,
            Some(_) => continue,
            None => break r,
        }
    };
    // What reached the probe on this binding: how many invokes, and at most how many were
    // outstanding at once (the probe answers none; an abort ends one).
    let (mut invokes, mut outstanding, mut most) = (0, std::collections::HashSet::new(), 0);
    for (_, f) in c.probe.seen().frames.iter().filter(|(n, _)| *n == link) {
        match f["kind"].as_str() {
            Some("invoke") => {
                invokes += 1;
                outstanding.insert(f["requestId"].to_string());
                most = most.max(outstanding.len());
            }
            Some("abort") => {
                outstanding.remove(&f["targetRequestId"].to_string());
            }
            _ => {}
        }
    }
    // How the daemon reported the refusals. Two forms are accepted (the protocol fixes the
    // refusal, not how a turn reports it):
    // - per call (the reference daemon): `result.toolCalls[]` / `toolCallEnd` events whose
    //   error is `adapter_queue_capacity`, with `retryable` and `details.retryAfterMs` checked;
    // - Pi Daemon 0.3.3: failed `toolEnd` events (`isError`) and the session's
    //   `hostToolAdapterQueue` telemetry (`rejectedRequests`, `lastRejectionReason`).
    let mut refused = std::collections::BTreeSet::new();
    let mut p = Vec::new();
    let result = resp.frame().map(|f| f.data()["result"]["toolCalls"].clone()).unwrap_or(Value::Null);
    for (i, t) in result.as_array().into_iter().flatten().enumerate() {
        let e = &t["error"];
        if e["code"] != CODE {
            continue;
        }
        refused.insert(t["toolCallId"].as_str().map_or_else(|| format!("#{i}"), str::to_string));
        if e["retryable"] != true {
            p.push(format!("the {CODE} refusal is not retryable: {e}"));
        }
        if e["details"]["retryAfterMs"] != retry_after {
            p.push(format!(
                "the {CODE} refusal has retryAfterMs {}, expected max(25, min(1000, floor({timeout_ms} / 20))) = {retry_after}",
                e["details"]["retryAfterMs"]
            ));
        }
        if e["details"]["indeterminate"] == true {
            p.push(format!("the {CODE} refusal is flagged indeterminate, but the call was never sent"));
        }
    }
    for (i, e) in events.iter().filter(|e| e["event"] == "toolCallEnd").enumerate() {
        if e["data"].to_string().contains(CODE) {
            refused.insert(e["data"]["toolCallId"].as_str().map_or_else(|| format!("event#{i}"), str::to_string));
        }
    }
    if refused.is_empty() {
        let failed_tool_ends =
            events.iter().filter(|e| e["event"] == "toolEnd" && e["data"]["isError"] == true).count();
        let telemetry =
            resp.frame().and_then(|f| find_key(&f.data(), "hostToolAdapterQueue").cloned()).unwrap_or(Value::Null);
        let rejected = telemetry["rejectedRequests"].as_u64().unwrap_or(0) as usize;
        if rejected > 0 && telemetry["lastRejectionReason"] == CODE && failed_tool_ends >= rejected {
            refused.extend((0..rejected).map(|i| format!("telemetry#{i}")));
        }
    }
    let extra = calls.len() - allowed;
    if most > allowed {
        p.insert(
            0,
            format!(
                "{most} invoke frames were outstanding at once on a binding with maxConcurrentRequests 1 and \
                 maxQueuedRequests 0: the daemon wrote the call(s) it had to refuse with {CODE}"
            ),
        );
        return Outcome::with("over-capacity-write", p);
    }
    if invokes == 0 {
        return Outcome::with(
            format!("no-invoke@{}", rtoken(&resp)),
            vec!["no call reached the adapter: one of the concurrent calls fits the limits".into()],
        );
    }
    if invokes == allowed && refused.len() >= extra {
        if saturation == Some(false) {
            p.push(
                "the session's status, read while the one call maxConcurrentRequests 1 and maxQueuedRequests 0 allow \
                 was held at the adapter (the queue full), does not report the queue saturated (a `saturated` flag, \
                 or `saturation.active`)"
                    .into(),
            );
        }
        // SPEC §4.4: the refusals are counted, not taken off a counter.
        if let Ok(r) = session_status(c) {
            if let Some(t) = (rtoken(&r) == "ok").then(|| data(&r)).as_ref().and_then(telemetry_holder) {
                p.extend(telemetry_counters_bounded(t));
            }
        }
        return Outcome::with("refused-before-write", p);
    }
    if refused.is_empty() && invokes == calls.len() {
        return Outcome::Skip(format!(
            "the daemon ran the {} tool calls one at a time (no invoke was sent while another was outstanding), \
             so none met a full queue: the refusal cannot be observed with this daemon and wake template",
            calls.len()
        ));
    }
    p.push(format!(
        "{invokes} invoke(s) reached the probe (allowed {allowed}) and {} call(s) reported {CODE} (expected {extra}); \
         the turn answered {}",
        refused.len(),
        rtoken(&resp)
    ));
    Outcome::with("not-refused", p)
}
/// SPEC §4.4: at most `maxConcurrentRequests` invokes are outstanding on a binding; the rest
/// wait in the queue. With maxConcurrentRequests 1 and maxQueuedRequests 2 three concurrent
/// read-only calls are all admitted; the probe answers none, so each stays outstanding until
/// its abort. The provoked state (calls really waiting in the queue) is confirmed from the
/// turn's events: at least two tool calls started before the first ended.
fn tools_concurrency_limit(c: &mut DCtx<'_>) -> Outcome {
    c.probe.set(BoundMode::Exact, InvokeMode::Ignore);
    let out = concurrency_limit(c, false);
    c.probe.set(BoundMode::Exact, InvokeMode::Normal);
    out
}
/// SPEC §4.4: `requestTimeoutMs` runs from admission, so queue wait counts. The same three
/// calls as [`tools_concurrency_limit`] (the queued state confirmed the same way): every call
/// is admitted at once, so every one has expired within `requestTimeoutMs` of the first
/// invoke; a daemon that starts a call's clock only when it sends the invoke aborts the last
/// the next one only a whole timeout after the first expired. The bound checked is 1.5 ×
/// `requestTimeoutMs` (1000 ms) from the first invoke to the last abort: a clock started at
/// dispatch takes at least two.
fn tools_queue_wait_counts(c: &mut DCtx<'_>) -> Outcome {
    c.probe.set(BoundMode::Exact, InvokeMode::Ignore);
    let out = concurrency_limit(c, true);
    c.probe.set(BoundMode::Exact, InvokeMode::Normal);
    out
}
fn concurrency_limit(c: &mut DCtx<'_>, timing: bool) -> Outcome {
    let timeout_ms = if timing { QUEUE_WAIT_TIMEOUT_MS } else { CAPACITY_TIMEOUT_MS };
    let limits = AdapterLimits {
        max_concurrent_requests: std::num::NonZeroU64::MIN,
        max_queued_requests: 2,
        request_timeout_ms: timeout_ms as i64,
        ..super::DEFAULT_LIMITS
    }
    .to_json();
    let d = tryo!(c.descriptor(1, Some(limits)));
    let v = tryo!(c.open(1, super::DCtx::host_adapter(&d)));
    let r = tryo!(one(c, v));
    if rtoken(&r) != "ok" {
        return precondition_open(&r);
    }
    let link = c.probe.seen().connections.saturating_sub(1);
    let mut conn = tryo!(c.connect());
    let attach = tryo!(c.attach(1));
    let _ = c.call(&mut conn, attach);
    let calls = [
        ("fs_stat", json!({"path": "."})),
        ("fs_list", json!({"path": "."})),
        ("fs_search", json!({"path": ".", "query": "pi-conform"})),
    ];
    let w = tryo!(c.wake_calls(1, &calls));
    let rid = w["requestId"].as_str().unwrap_or("").to_string();
    conn.send(&w);
    let (mut started_before_end, mut ended, mut ends) = (0usize, false, 0u64);
    loop {
        let r = conn.recv_within(c.target.step * 3);
        match r.frame() {
            Some(f) if f.kind() == Some("event") => match f["event"].as_str() {
                Some("toolCallStart" | "toolStart") if !ended => started_before_end += 1,
                Some("toolCallEnd" | "toolEnd") => {
                    ended = true;
                    ends += 1;
                }
                _ => {}
            },
            Some(f) if f.request_id() == Some(rid.as_str()) => break,
            Some(_) => continue,
            None => break,
        }
    }
    // The abort of the last call may follow the wake's answer.
    std::thread::sleep(c.target.step / 5);
    let seen = c.probe.seen();
    let (mut invokes, mut outstanding, mut most) = (0, std::collections::HashSet::new(), 0);
    let (mut first_invoke, mut last_abort) = (None, None);
    for ((_, f), at) in seen.frames.iter().zip(&seen.at).filter(|((n, _), _)| *n == link) {
        match f["kind"].as_str() {
            Some("invoke") => {
                first_invoke = first_invoke.or(Some(*at));
                invokes += 1;
                outstanding.insert(f["requestId"].to_string());
                most = most.max(outstanding.len());
            }
            Some("abort") => {
                last_abort = Some(*at);
                outstanding.remove(&f["targetRequestId"].to_string());
            }
            _ => {}
        }
    }
    if most > 1 && !timing {
        return Outcome::with(
            "over-concurrency",
            vec![format!(
                "{most} invoke frames were outstanding at once on a binding with maxConcurrentRequests 1: the calls \
                 beyond it must wait in the queue until a slot is free"
            )],
        );
    }
    if invokes == 0 {
        return Outcome::Error("inconclusive: no call of the wake reached the adapter".into());
    }
    if started_before_end < 2 {
        return Outcome::Error(format!(
            "inconclusive: the turn's events show {started_before_end} tool call(s) started before the first ended, so \
             no call ever waited in the queue (a daemon that runs tool calls one at a time cannot show this limit)"
        ));
    }
    if !timing {
        return Outcome::token("queued");
    }
    let (Some(first), Some(last)) = (first_invoke, last_abort) else {
        return Outcome::Error("inconclusive: no abort reached the probe, so no call was seen to expire".into());
    };
    let span = last.saturating_duration_since(first);
    let bound = Duration::from_millis(timeout_ms * 3 / 2);
    if span >= bound {
        return Outcome::with(
            "clock-from-dispatch",
            vec![format!(
                "the last of three calls admitted together expired {} ms after the first invoke, more than 1.5 × \
                 requestTimeoutMs ({timeout_ms} ms): the time a call waits in the queue must count toward its timeout",
                span.as_millis()
            )],
        );
    }
    // SPEC §4.4: the probe answered none of the calls, nothing aborted the turn and the
    // connection stayed up, so every call the turn saw end either timed out — those that
    // expired still queued included — or never got a slot: refused at admission (the
    // telemetry's `rejected…` counter) or cancelled by the daemon itself (`cancelled…`). When
    // the session's status carries queue telemetry, its timed-out counter (`timedOut…`) counts
    // at least the rest.
    let mut p = Vec::new();
    if let Ok(r) = session_status(c) {
        if let Some(t) = (rtoken(&r) == "ok").then(|| data(&r)).as_ref().and_then(telemetry_holder) {
            let mut all = Vec::new();
            numbers_under(t, &mut all);
            let counter = |prefix: &str| all.iter().filter(|(k, _)| k.starts_with(prefix)).map(|(_, n)| *n).max();
            let not_timed = counter("rejected").unwrap_or(0).saturating_add(counter("cancelled").unwrap_or(0));
            let want = ends.saturating_sub(not_timed);
            match counter("timedOut") {
                Some(n) if n >= want => {}
                Some(n) => p.push(format!(
                    "the telemetry counts {n} timed-out calls after {want} of the turn's {ends} calls timed out (the \
                     probe answered none; {not_timed} were refused or cancelled; some expired while still queued): a \
                     call that times out in the queue is a timed-out call too"
                )),
                None => p.push("the telemetry has no timed-out-calls counter (`timedOut…`)".into()),
            }
            // A call that expired in the queue is added to the counter, not taken off it.
            p.extend(telemetry_counters_bounded(t));
        }
    }
    Outcome::with("expired-from-admission", p)
}
/// The most calls a telemetry counter may count in the cases that read one: far more than any
/// of them makes (at most eight), far less than a counter that wrapped below zero.
const TELEMETRY_COUNTER_BOUND: u64 = 64;

/// SPEC §4.4: the queue telemetry's call counters (`accepted…`, `completed…`, `failed…`,
/// `rejected…`, `cancelled…`, `timedOut…`) count calls, so after a case that made a handful of
/// calls none exceeds [`TELEMETRY_COUNTER_BOUND`]: a counter a call was taken off instead of
/// added to wraps to nearly 2^64. What breaks it, said of the telemetry `t`.
fn telemetry_counters_bounded(t: &Value) -> Vec<String> {
    let mut all = Vec::new();
    numbers_under(t, &mut all);
    let prefixes = ["accepted", "completed", "failed", "rejected", "cancelled", "timedOut"];
    all.iter()
        .filter(|(k, n)| prefixes.iter().any(|p| k.starts_with(p)) && *n > TELEMETRY_COUNTER_BOUND)
        .map(|(k, n)| {
            format!(
                "the queue telemetry's counter `{k}` is {n} after the session made at most eight calls: a call \
                 counter wrapped (a call taken off it instead of counted)"
            )
        })
        .collect()
}
/// The object of a status's data holding a `capacity` object: the session's queue telemetry,
/// whatever it is called (the reference's `toolQueue`, Pi Daemon 0.3.3's `hostToolAdapterQueue`).
fn telemetry_holder(v: &Value) -> Option<&Value> {
    match v {
        Value::Object(m) if m.get("capacity").is_some_and(Value::is_object) => Some(v),
        Value::Object(m) => m.values().find_map(telemetry_holder),
        Value::Array(a) => a.iter().find_map(telemetry_holder),
        _ => None,
    }
}
/// `requestTimeoutMs` of the write-error case: far longer than the case allows for a call to
/// fail, so that only the socket error can end it in time.
const WRITE_ERROR_TIMEOUT_MS: u64 = 8000;

/// SPEC §4.3 (lifecycle): a socket error fails the whole adapter connection
/// (`adapter_connection_failed`), a write error as much as a read error. The probe answers
/// `bound`, then shuts its reading half and holds the socket open without reading or closing:
/// the daemon meets the error only when it writes the next frame, the invoke of a wake's one
/// tool call. That call must fail at once — the wake is answered in less than half of
/// `requestTimeoutMs` (8 s) — and nothing reconnects: a later wake's call neither opens a new
/// connection to the adapter nor waits for its timeout. The provoked state is confirmed: the
/// probe shut its reading half, this platform makes such a write fail (Linux: `EPIPE`), and the
/// turn started a tool call.
fn tools_write_error_fails(c: &mut DCtx<'_>) -> Outcome {
    let out = write_error_fails(c);
    c.probe.set(BoundMode::Exact, InvokeMode::Normal);
    out
}
fn write_error_fails(c: &mut DCtx<'_>) -> Outcome {
    if !super::probe::write_fails_after_peer_shut_read() {
        return Outcome::Error(
            "inconclusive: on this platform a write to a socket whose peer shut its reading half does not fail, so \
             the probe cannot provoke a write error"
                .into(),
        );
    }
    let d = tryo!(c.descriptor(1, Some(limits_with_timeout(WRITE_ERROR_TIMEOUT_MS))));
    c.probe.set(BoundMode::ShutReadAfterBound, InvokeMode::Normal);
    let v = tryo!(c.open(1, super::DCtx::host_adapter(&d)));
    let r = tryo!(one(c, v));
    if rtoken(&r) != "ok" {
        return precondition_open(&r);
    }
    let link = c.probe.seen().connections.saturating_sub(1);
    let t = Instant::now();
    while !c.probe.seen().shut_read.contains(&link) {
        if t.elapsed() >= c.target.step {
            return Outcome::Error(
                "inconclusive: the probe could not shut the reading half of its connection after bound".into(),
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let wait = Duration::from_millis(WRITE_ERROR_TIMEOUT_MS) * 2;
    let budget = Duration::from_millis(WRITE_ERROR_TIMEOUT_MS / 2);
    let first = tryo!(wake_attached(c, 1, &[("fs_stat", json!({"path": "."}))], wait));
    if first.resp.frame().is_some() && first.ends().is_empty() && first.started_before_first_end() == 0 {
        return Outcome::Error(format!(
            "inconclusive: the wake was answered {} without starting a tool call, so nothing was written to the \
             adapter",
            rtoken(&first.resp)
        ));
    }
    let mut p = Vec::new();
    if first.resp.frame().is_none() {
        p.push(format!(
            "the wake was not answered ({}) after its call's invoke could not be written",
            rtoken(&first.resp)
        ));
    } else if first.took >= budget {
        p.push(format!(
            "the wake was answered only {} ms after it was sent: the write of its call's invoke failed (the adapter \
             shut its reading half), which fails the adapter connection and its calls at once, not at \
             requestTimeoutMs ({WRITE_ERROR_TIMEOUT_MS} ms)",
            first.took.as_millis()
        ));
    }
    // No reconnect, and no later call waiting on the dead connection.
    let conns = c.probe.seen().connections;
    let later = tryo!(wake_attached(c, 1, &[("fs_stat", json!({"path": "."}))], wait));
    if c.probe.seen().connections != conns {
        p.push(
            "after the adapter connection failed, a later call of that session connected to the adapter again".into(),
        );
    }
    if later.resp.frame().is_none() || later.took >= budget {
        p.push(format!(
            "a later wake of the session was answered {} after {} ms: once the adapter connection failed, its calls \
             fail at once (nothing is written to the dead connection)",
            rtoken(&later.resp),
            later.took.as_millis()
        ));
    }
    Outcome::with(if p.is_empty() { "failed-at-once" } else { "waited" }, p)
}
/// `requestTimeoutMs` of the adapter-EOF case: far longer than the case waits, so that only
/// the EOF can end the queued calls in time.
const EOF_TIMEOUT_MS: u64 = 8000;
/// The most failed calls the adapter-EOF case accepts in a telemetry counter: far more than
/// the four calls it makes, far less than a counter that wrapped.
const EOF_FAILED_BOUND: u64 = 64;

/// SPEC §4.3 (lifecycle): the adapter closes its connection (EOF) while one call is in flight
/// and two more wait in the queue (maxConcurrentRequests 1, maxQueuedRequests 2; confirmed from
/// the turn's events). Every pending call fails at once — the wake is answered long before
/// `requestTimeoutMs` (8 s) — and nothing reconnects: a later call of that session never
/// reaches the adapter. When the session's status still carries queue telemetry, its
/// failed-calls counters stay within the calls made (SPEC §4.4). Another session bound to the
/// same adapter keeps working.
fn tools_eof_fails_queued(c: &mut DCtx<'_>) -> Outcome {
    let out = eof_fails_queued(c);
    c.probe.set(BoundMode::Exact, InvokeMode::Normal);
    out
}
fn eof_fails_queued(c: &mut DCtx<'_>) -> Outcome {
    // The other party: a second session bound to the same adapter, opened first.
    let main_session = c.session.clone();
    c.session = format!("{main_session}-other");
    let (_, other_link) = tryo!(open_bound(c, 1));
    c.session = main_session;
    let limits = AdapterLimits {
        max_concurrent_requests: std::num::NonZeroU64::MIN,
        max_queued_requests: 2,
        request_timeout_ms: EOF_TIMEOUT_MS as i64,
        ..super::DEFAULT_LIMITS
    }
    .to_json();
    let d = tryo!(c.descriptor(1, Some(limits)));
    let link = tryo!(open_with(c, &d, 1));
    c.probe.set(BoundMode::Exact, InvokeMode::CloseOnInvoke);
    let mut conn = tryo!(c.connect());
    let attach = tryo!(c.attach(1));
    let _ = c.call(&mut conn, attach);
    let calls = [
        ("fs_stat", json!({"path": "."})),
        ("fs_list", json!({"path": "."})),
        ("fs_search", json!({"path": ".", "query": "pi-conform"})),
    ];
    let w = tryo!(c.wake_calls(1, &calls));
    let rid = w["requestId"].as_str().unwrap_or("").to_string();
    let sent = Instant::now();
    conn.send(&w);
    let (mut started_before_end, mut ended) = (0usize, false);
    let resp = loop {
        let r = conn.recv_within(Duration::from_millis(EOF_TIMEOUT_MS) * 2);
        match r.frame() {
            Some(f) if f.kind() == Some("event") => match f["event"].as_str() {
                Some("toolCallStart" | "toolStart") if !ended => started_before_end += 1,
                Some("toolCallEnd" | "toolEnd") => ended = true,
                _ => {}
            },
            Some(f) if f.request_id() == Some(rid.as_str()) => break r,
            Some(_) => continue,
            None => break r,
        }
    };
    let took = sent.elapsed();
    c.probe.set(BoundMode::Exact, InvokeMode::Normal);
    let on_link = c.probe.seen().frames.iter().filter(|(n, f)| *n == link && f["kind"] == "invoke").count();
    if on_link == 0 {
        return Outcome::Error(format!(
            "inconclusive: no call of the wake reached the adapter ({}), so the adapter never closed with work in flight",
            rtoken(&resp)
        ));
    }
    if started_before_end < 2 {
        return Outcome::Error(format!(
            "inconclusive: the turn's events show {started_before_end} tool call(s) started before the first ended, so \
             no call was waiting in the queue when the adapter closed"
        ));
    }
    let mut p = Vec::new();
    if resp.frame().is_none() {
        p.push(format!("the wake was not answered ({}) after the adapter closed its connection", rtoken(&resp)));
    } else if took >= Duration::from_millis(EOF_TIMEOUT_MS / 2) {
        p.push(format!(
            "the wake was answered only {} ms after the adapter closed with calls queued: queued calls must fail at \
             once when the adapter connection ends, not wait for requestTimeoutMs ({EOF_TIMEOUT_MS} ms)",
            took.as_millis()
        ));
    }
    // No reconnect: a later call of this session does not reach the adapter.
    let conns = c.probe.seen().connections;
    let before = invokes(c).len();
    let w2 = tryo!(c.wake(1, "fs_stat", &json!({"path": "."})));
    let _ = one(c, w2);
    if invokes(c).len() != before || c.probe.seen().connections != conns {
        p.push(
            "after the adapter closed, a later call of that session reached the adapter again (no reconnect)".into(),
        );
    }
    // SPEC §4.4: the telemetry counts the calls the EOF failed. When the session's status still
    // carries it, no failed-calls counter (`failed…`) may exceed the calls this session made
    // (four; bounded at EOF_FAILED_BOUND): a counter the failure took the calls off wraps.
    if let Ok(r) = session_status(c) {
        if rtoken(&r) == "ok" {
            let d = data(&r);
            let mut all = Vec::new();
            numbers_under(&d, &mut all);
            if let Some((k, n)) = all.iter().find(|(k, n)| k.starts_with("failed") && *n > EOF_FAILED_BOUND) {
                p.push(format!(
                    "after the adapter's EOF failed the pending calls, the session's telemetry counts {n} failed calls \
                     (`{k}`) although the session made {} calls",
                    calls.len() + 1
                ));
            }
        }
    }
    // The other party: the other session's binding is untouched.
    let other = c.session.clone();
    c.session = format!("{other}-other");
    let before = c.probe.seen().frames.iter().filter(|(n, f)| *n == other_link && f["kind"] == "invoke").count();
    let w3 = c.wake(1, "fs_stat", &json!({"path": "."}));
    c.session = other;
    let w3 = tryo!(w3);
    let _ = one(c, w3);
    let after = c.probe.seen().frames.iter().filter(|(n, f)| *n == other_link && f["kind"] == "invoke").count();
    if after == before {
        p.push(
            "another session bound to the same adapter stopped working when this session's connection closed".into(),
        );
    }
    Outcome::with("failed-at-eof", p)
}
/// SPEC §4.4: at most `maxIdempotencyKeys` tombstones (aborted calls awaiting their
/// `aborted`) live at once, and one more fails the connection (`adapter_abort_capacity`).
/// With maxIdempotencyKeys 2 and a probe that answers neither invokes nor aborts, the calls of
/// three wakes time out one after the other: the first two aborts fill the tombstones exactly
/// (the connection stays usable: the third call reaches the adapter), the third overflows them
/// (a fourth call never reaches the adapter). The first two aborts are confirmed on the wire.
fn tools_abort_capacity(c: &mut DCtx<'_>) -> Outcome {
    let out = abort_capacity(c);
    c.probe.set(BoundMode::Exact, InvokeMode::Normal);
    out
}
fn abort_capacity(c: &mut DCtx<'_>) -> Outcome {
    let limits = AdapterLimits {
        max_idempotency_keys: std::num::NonZeroU64::new(2).unwrap_or(std::num::NonZeroU64::MIN),
        request_timeout_ms: 300,
        ..super::DEFAULT_LIMITS
    }
    .to_json();
    let d = tryo!(c.descriptor(1, Some(limits)));
    let link = tryo!(open_with(c, &d, 1));
    c.probe.set(BoundMode::Exact, InvokeMode::Silent);
    let count = |c: &DCtx<'_>, kind: &str| {
        c.probe.seen().frames.iter().filter(|(n, f)| *n == link && f["kind"] == kind).count()
    };
    for round in 1..=3usize {
        let before = count(c, "invoke");
        let w = tryo!(c.wake(1, "fs_stat", &json!({"path": "."})));
        let _ = one(c, w);
        if count(c, "invoke") == before {
            return if round == 3 {
                Outcome::with(
                    "refused-at-limit",
                    vec!["with exactly maxIdempotencyKeys (2) tombstones alive, the next call did not reach the \
                          adapter: the limit itself must be usable"
                        .into()],
                )
            } else {
                Outcome::Error(format!("inconclusive: call {round} made no tool call through the adapter"))
            };
        }
        if round == 3 {
            // Its timeout overflows the tombstones: the connection fails instead of an abort.
            break;
        }
        let t = Instant::now();
        while count(c, "abort") < round && t.elapsed() < c.target.step {
            std::thread::sleep(Duration::from_millis(20));
        }
        if count(c, "abort") < round {
            return Outcome::Error(format!(
                "inconclusive: call {round} timed out without an abort on the wire (daemon.tools.timeout-sends-abort \
                 judges that), so no tombstone was provoked"
            ));
        }
    }
    let before = count(c, "invoke");
    let w = tryo!(c.wake(1, "fs_stat", &json!({"path": "."})));
    let _ = one(c, w);
    if count(c, "invoke") != before {
        return Outcome::with(
            "over-capacity",
            vec!["a third tombstone beyond maxIdempotencyKeys (2) did not fail the connection: a fourth call still \
                  reached the adapter"
                .into()],
        );
    }
    if !ended_within(c, link, c.target.step) {
        return Outcome::with(
            "failed-at-capacity",
            vec!["the daemon did not close the adapter connection the overflow failed (the socket is destroyed)".into()],
        );
    }
    Outcome::token("failed-at-capacity")
}
/// Protocol text: "Empty, absolute, backslash, control-character, non-canonical, and .. paths
/// fail before adapter dispatch." Each path below goes to the model as one tool call; none may
/// reach the adapter. Pi Daemon 0.3.3 passes `./` and `dir/` on (SPEC §9).
fn tools_non_canonical_path(c: &mut DCtx<'_>) -> Outcome {
    let _ = tryo!(open_bound(c, 1));
    let dir = format!("pc-ncp-{}", &c.session[c.session.len().saturating_sub(8)..]);
    if let Err(e) = private_dir(&c.target.cwd.join(&dir)) {
        return Outcome::Error(format!("cannot create the directory the paths name: {e}"));
    }
    let bad = [
        "./".to_string(),
        format!("{dir}/"),
        format!("{dir}//x"),
        format!("./{dir}"),
        format!("{dir}/./x"),
        format!("{dir}/../x"),
    ];
    // A control call with the canonical path comes last: it must reach the adapter, or the
    // wake made no tool calls at all and proves nothing.
    let mut calls: Vec<(&str, Value)> = bad.iter().map(|p| ("fs_stat", json!({"path": p}))).collect();
    calls.push(("fs_stat", json!({"path": dir})));
    let before = invokes(c).len();
    let w = tryo!(c.wake_calls(1, &calls));
    let r = tryo!(one(c, w));
    let seen = invokes(c);
    if !seen[before.min(seen.len())..].iter().any(|f| f["payload"]["path"] == dir.as_str()) {
        return Outcome::Error(format!(
            "inconclusive: the control call with the canonical path `{dir}` never reached the adapter (the wake was \
             answered {}), so the daemon's tool calls cannot be observed with this wake template",
            rtoken(&r)
        ));
    }
    let dispatched: Vec<String> = seen[before.min(seen.len())..]
        .iter()
        .filter_map(|f| f["payload"]["path"].as_str())
        .filter(|p| bad.iter().any(|b| b == p))
        .map(str::to_string)
        .collect();
    if dispatched.is_empty() {
        return Outcome::with(
            "refused-before-dispatch",
            if rtoken(&r) == "ok" || rtoken(&r).starts_with("error:") {
                vec![]
            } else {
                vec![format!("the wake was answered {}", rtoken(&r))]
            },
        );
    }
    let only_0_3_3 = dispatched.iter().all(|p| crate::contract::is_0_3_3_passed_path(p));
    let mut why = format!("non-canonical paths reached the adapter: {}", dispatched.join(", "));
    if only_0_3_3 {
        why.push_str(" (observed the Pi Daemon 0.3.3 variant, SPEC §9: `./` and a single trailing `/` are passed on)");
    }
    Outcome::with(format!("dispatched:{}", dispatched.len()), vec![why])
}
/// Open, arm the probe with `mode` for one tool call, and judge the bad answer it sends: the
/// call fails with `code` and the connection is failed ([`CallSeen::fail_closed_with`]).
fn fail_closed(c: &mut DCtx<'_>, mode: InvokeMode, code: &str) -> Outcome {
    let (_, link) = tryo!(open_bound(c, 1));
    c.probe.set(BoundMode::Exact, mode);
    let seen = tryo!(call_then_call(c, 1, "fs_stat", &json!({"path": "."})));
    if let Some(o) = seen.inconclusive() {
        return o;
    }
    seen.fail_closed_with(c, link, code)
}

/// What [`call_then_call`] observed.
pub(super) struct CallSeen {
    /// The response to the wake whose tool call the armed probe answered.
    pub first: Recv,
    /// Whether that wake made a tool call through the adapter.
    pub invoked: bool,
    /// Whether a later tool call reached the adapter.
    pub reached: bool,
}

impl CallSeen {
    /// The wake made no tool call: the answer the probe was armed with was never sent.
    pub fn inconclusive(&self) -> Option<Outcome> {
        (!self.invoked).then(|| {
            Outcome::Error(format!(
                "inconclusive: the wake ({}) made no tool call through the adapter, so the bad adapter frame was never sent",
                rtoken(&self.first)
            ))
        })
    }

    /// Whether the first tool call is reported a success (`toolCalls[0].ok` of the wake).
    pub fn first_call_ok(&self) -> Option<bool> {
        self.first.frame().and_then(|f| f.data()["result"]["toolCalls"][0]["ok"].as_bool())
    }

    /// The verdict of a provoked bad adapter frame: it is never a successful tool result, and
    /// the connection is failed (a later call does not reach the adapter through it).
    pub fn fail_closed(&self) -> Outcome {
        let mut p = Vec::new();
        if self.first_call_ok() == Some(true) {
            p.push(format!("the bad adapter frame was accepted as a successful tool result ({})", rtoken(&self.first)));
        }
        if self.reached {
            p.push("the connection was not failed: a later tool call still reached the adapter".into());
        }
        Outcome::with("failed-closed", p)
    }

    /// [`Self::fail_closed`], and what SPEC §4.3 says of the failure itself: the call in
    /// flight fails with `code` where the daemon reports calls one by one (the reference
    /// daemon's `toolCalls`), is not counted completed where it reports counters only (Pi
    /// Daemon 0.3.3's `hostToolAdapterQueue`), and the daemon destroys the socket (`link`, the
    /// probe connection, sees its EOF within a step).
    pub fn fail_closed_with(&self, c: &DCtx<'_>, link: usize, code: &str) -> Outcome {
        let Outcome::Observed { token, mut problems } = self.fail_closed() else {
            return self.fail_closed();
        };
        if let Some(calls) = per_call(&self.first) {
            match calls.first() {
                Some(call) if !call.ok && call.code.as_deref() != Some(code) => problems.push(format!(
                    "the call in flight failed with {}, not {code}: every pending call fails with the code of the \
                     connection failure",
                    call.code.as_deref().unwrap_or("no code")
                )),
                None => problems.push("the wake reported no tool call".into()),
                _ => {}
            }
        } else if queue_counter(&self.first, "completedRequests").is_some_and(|n| n > 0) {
            problems.push("the call whose answer failed the connection was counted completed".into());
        }
        if !ended_within(c, link, c.target.step) {
            problems.push("the daemon did not close the adapter connection it failed (the socket is destroyed)".into());
        }
        Outcome::with(token, problems)
    }
}

/// With the session open at `generation` and the probe armed by the caller: make one tool
/// call (`tool`, `args`), disarm the probe, then make a second one and see whether it reaches
/// the adapter.
pub(super) fn call_then_call(c: &mut DCtx<'_>, generation: u64, tool: &str, args: &Value) -> Result<CallSeen, Outcome> {
    let sent = invokes(c).len();
    let w = c.wake(generation, tool, args)?;
    let r1 = one(c, w);
    c.probe.set(BoundMode::Exact, InvokeMode::Normal);
    let first = r1?;
    let invoked = invokes(c).len() != sent;
    let before = invokes(c).len();
    let w2 = c.wake(generation, tool, args)?;
    let _ = one(c, w2)?;
    Ok(CallSeen { first, invoked, reached: invokes(c).len() != before })
}
/// `adapter_response_mismatch`.
fn mismatch() -> &'static str {
    Code::AdapterResponseMismatch.as_str()
}

fn tools_mismatch(c: &mut DCtx<'_>) -> Outcome {
    fail_closed(c, InvokeMode::MismatchKey, mismatch())
}
fn tools_unsolicited(c: &mut DCtx<'_>) -> Outcome {
    fail_closed(c, InvokeMode::Unsolicited, mismatch())
}
fn tools_reflected(c: &mut DCtx<'_>) -> Outcome {
    fail_closed(c, InvokeMode::ReflectHandle, Code::AdapterSecretReflected.as_str())
}
fn tools_result_after_aborted(c: &mut DCtx<'_>) -> Outcome {
    c.probe.set(BoundMode::Exact, InvokeMode::Normal);
    let d = tryo!(c.descriptor(1, Some(limits_with_timeout(300))));
    let v = tryo!(c.open(1, super::DCtx::host_adapter(&d)));
    let r = tryo!(one(c, v));
    if rtoken(&r) != "ok" {
        return precondition_open(&r);
    }
    c.probe.set(BoundMode::Exact, InvokeMode::ResultAfterAborted);
    let w = tryo!(c.wake(1, "fs_stat", &json!({"path": "."})));
    let _ = one(c, w);
    std::thread::sleep(Duration::from_millis(100));
    c.probe.set(BoundMode::Exact, InvokeMode::Normal);
    if !c.probe.seen().frames.iter().any(|(_, f)| f["kind"] == "abort") {
        return Outcome::Error(
            "inconclusive: no abort reached the probe (the call did not time out on the wire), so no result after \
             aborted was ever sent"
                .into(),
        );
    }
    let before = invokes(c).len();
    let w2 = tryo!(c.wake(1, "fs_stat", &json!({"path": "."})));
    let _ = tryo!(one(c, w2));
    let reached = invokes(c).len() != before;
    Outcome::with(
        "failed-closed",
        if reached { vec!["a result after aborted did not fail the connection".into()] } else { vec![] },
    )
}

// ---------------------------------------------------------------- SPEC §4.3, row by row

/// SPEC §4.3: a `result` whose `operation` differs from its invoke's (another granted
/// operation, with that operation's own well-formed data) fails the connection.
fn tools_other_operation(c: &mut DCtx<'_>) -> Outcome {
    fail_closed(c, InvokeMode::OtherOperation, mismatch())
}
/// SPEC §4.3: a duplicate `result` (the same frame twice) fails the connection. Two read-only
/// calls of one wake reach the probe together; it answers the first one twice and holds the
/// second. The first copy is valid, so the first call may complete; the second, pending when
/// the duplicate arrives, fails at once with `adapter_response_mismatch` (long before its 8 s
/// `requestTimeoutMs`), no later call reaches the adapter and the socket is closed.
fn tools_duplicate_result(c: &mut DCtx<'_>) -> Outcome {
    let out = duplicate_result(c);
    c.probe.set(BoundMode::Exact, InvokeMode::Normal);
    out
}
fn duplicate_result(c: &mut DCtx<'_>) -> Outcome {
    let d = tryo!(c.descriptor(1, Some(limits_with_timeout(EOF_TIMEOUT_MS))));
    let link = tryo!(open_with(c, &d, 1));
    c.probe.set(BoundMode::Exact, InvokeMode::DuplicateWhileHeld);
    let calls = [("fs_stat", json!({"path": "."})), ("fs_list", json!({"path": "."}))];
    let seen = tryo!(wake_attached(c, 1, &calls, Duration::from_millis(EOF_TIMEOUT_MS) * 2));
    c.probe.set(BoundMode::Exact, InvokeMode::Normal);
    let sent = link_frames(c, link, "invoke");
    if sent.len() < 2 {
        return Outcome::Error(format!(
            "inconclusive: {} call(s) of the wake reached the adapter together (answered {}), so no call was pending \
             when the duplicate result could be sent",
            sent.len(),
            rtoken(&seen.resp)
        ));
    }
    // The held call, by its tool name (`fs.list` → `fs_list`).
    let held = sent[1]["operation"].as_str().unwrap_or_default().replacen('.', "_", 1);
    let mut p = Vec::new();
    if seen.resp.frame().is_none() {
        p.push(format!("the wake was not answered ({}) after the duplicate result", rtoken(&seen.resp)));
    } else if seen.took >= Duration::from_millis(EOF_TIMEOUT_MS / 2) {
        p.push(format!(
            "the wake was answered only {} ms after the duplicate result: the call pending then must fail at once, \
             not at requestTimeoutMs ({EOF_TIMEOUT_MS} ms)",
            seen.took.as_millis()
        ));
    }
    match per_call(&seen.resp) {
        Some(calls) => match calls.iter().find(|x| x.tool == held) {
            Some(x) if x.ok => {
                p.push(format!("the call pending when the duplicate arrived ({held}) was reported a success"))
            }
            Some(x) if x.code.as_deref() != Some(mismatch()) => p.push(format!(
                "the call pending when the duplicate arrived ({held}) failed with {}, not {}",
                x.code.as_deref().unwrap_or("no code"),
                mismatch()
            )),
            Some(_) => {}
            None => p.push(format!("the wake's toolCalls do not report the pending call ({held})")),
        },
        None => {
            if queue_counter(&seen.resp, "completedRequests").is_some_and(|n| n > 1) {
                p.push("both calls were counted completed: the pending one must fail with the connection".into());
            }
        }
    }
    let before = invokes(c).len();
    let w2 = tryo!(c.wake(1, "fs_stat", &json!({"path": "."})));
    let _ = tryo!(one(c, w2));
    if invokes(c).len() != before {
        p.push("a duplicate result did not fail the connection: a later tool call still reached the adapter".into());
    }
    if !ended_within(c, link, c.target.step) {
        p.push("the daemon did not close the adapter connection it failed (the socket is destroyed)".into());
    }
    Outcome::with("failed-closed", p)
}
/// What a scripted line's send (`Probe::take_script_outcome`) makes of the case: `None` when
/// the probe sent it; otherwise inconclusive, saying why `what` was not sent (`never`: it was
/// never tried).
fn unsent(sent: Option<Result<(), String>>, what: &str, never: &str) -> Option<Outcome> {
    match sent {
        Some(Ok(())) => None,
        Some(Err(why)) => Some(Outcome::Error(format!("inconclusive: the probe could not send {what}: {why}"))),
        None => Some(Outcome::Error(format!("inconclusive: {never}"))),
    }
}

/// SPEC §4.3: a second `bound` on a bound connection, sent where the result of a call in
/// flight belongs, fails the connection: the call fails with `adapter_protocol_invalid`.
fn tools_second_bound(c: &mut DCtx<'_>) -> Outcome {
    let (_, link) = tryo!(open_bound(c, 1));
    c.probe.script(ScriptAt::Invoke, Box::new(|b, _| Ok(line_of(&b.bound_frame()))));
    let seen = call_then_call(c, 1, "fs_stat", &json!({"path": "."}));
    let sent = c.probe.take_script_outcome();
    let seen = tryo!(seen);
    if let Some(o) = seen.inconclusive() {
        return o;
    }
    if let Some(o) = unsent(sent, "the second bound", "the second bound was never sent") {
        return o;
    }
    seen.fail_closed_with(c, link, Code::AdapterProtocolInvalid.as_str())
}

/// Answer the next bind with the lines `build` makes from the live binding, then open and make
/// one tool call: the open must fail, or the connection must be failed (no later tool call
/// reaches the adapter). The bind must have reached the probe and the script been sent, else
/// the case is inconclusive.
fn bind_script_fails_closed(
    c: &mut DCtx<'_>,
    what: &str,
    before_bound: bool,
    build: impl FnOnce(&crate::contract::Binding) -> Result<Vec<u8>, String> + Send + 'static,
) -> Outcome {
    c.probe.set(BoundMode::Exact, InvokeMode::Normal);
    let d = tryo!(c.descriptor(1, None));
    let link = c.probe.seen().connections;
    c.probe.script(ScriptAt::Bound, Box::new(move |b, _| build(b)));
    let seen = open_then_call(c, &d, 1, "fs_stat", &json!({"path": "."}));
    let sent = c.probe.take_script_outcome();
    let seen = tryo!(seen);
    if let Some(o) = seen.inconclusive() {
        return o;
    }
    if let Some(o) = unsent(sent, what, &format!("no bind reached the probe, so {what} was never sent")) {
        return o;
    }
    if seen.open == "ok" && seen.reached {
        return Outcome::with(
            "accepted",
            vec![format!(
                "{what} did not fail the connection: the open succeeded and a later tool call reached the adapter"
            )],
        );
    }
    let mut p = Vec::new();
    if before_bound && seen.open == "ok" {
        p.push(format!(
            "the open succeeded although the connection failed at {what}: a bind that fails fails the open (SPEC §3.4)"
        ));
    }
    if !ended_within(c, link, c.target.step) {
        p.push("the daemon did not close the adapter connection it failed (the socket is destroyed)".into());
    }
    Outcome::with("failed-closed", p)
}
/// The compact line of a frame value.
fn line_of(v: &Value) -> Vec<u8> {
    serde_json::to_vec(v).unwrap_or_default()
}
/// SPEC §4.3: a second `bound` fails the connection.
fn bind_second_bound(c: &mut DCtx<'_>) -> Outcome {
    bind_script_fails_closed(c, "a second bound", false, |b| {
        let bound = line_of(&b.bound_frame());
        Ok([bound.as_slice(), b"\n", bound.as_slice()].concat())
    })
}
/// SPEC §4.3: any frame before `bound` fails the connection (a well-formed `revoked`, which
/// after `bound` is ignored).
fn bind_frame_before_bound(c: &mut DCtx<'_>) -> Outcome {
    bind_script_fails_closed(c, "a revoked before bound", true, |b| {
        let revoked = crate::contract::compose::revoked(&b.identity()).map_err(|e| e.to_string())?;
        let revoked = line_of(&crate::contract::compose::to_wire(&revoked));
        Ok([revoked.as_slice(), b"\n", line_of(&b.bound_frame()).as_slice()].concat())
    })
}

/// The descriptor of a case that needs a call to time out on the wire (`requestTimeoutMs`
/// 1000 ms, as the `aborted` frame vectors).
fn open_for_abort(c: &mut DCtx<'_>) -> Result<(), Outcome> {
    let d = c.descriptor(1, Some(limits_with_timeout(1000)))?;
    open_with(c, &d, 1).map(|_| ())
}
/// SPEC §4.3: an `aborted` whose `requestId` is not the abort's own ("no matching abort")
/// fails the connection.
fn tools_aborted_other_request_id(c: &mut DCtx<'_>) -> Outcome {
    tryo!(open_for_abort(c));
    let build: super::probe::ScriptFn = Box::new(|b, abort| {
        let abort = abort.ok_or("no abort to answer")?;
        let target = abort["targetRequestId"].as_str().ok_or("the abort has no targetRequestId")?;
        let own = abort["requestId"].as_str().unwrap_or_default();
        let other = if own == "pc-not-the-abort" { "pc-not-the-abort-2" } else { "pc-not-the-abort" };
        let a = crate::contract::compose::aborted(&b.identity(), other, target).map_err(|e| e.to_string())?;
        Ok(line_of(&crate::contract::compose::to_wire(&a)))
    });
    // A replayed vector may skip when no abort came (timeout-sends-abort judges that); this
    // hand-written case needs the abort to test anything, so without one it is inconclusive.
    match abort_then_call(c, false, 1, "fs_stat", &json!({"path": "."}), build) {
        Outcome::Skip(why) => Outcome::Error(format!("inconclusive: {why}")),
        other => other,
    }
}
/// SPEC §4.3: an `aborted` for a call the daemon never aborted (sent ahead of that call's
/// result) fails the connection: the call is never a successful tool result.
fn tools_aborted_unsolicited(c: &mut DCtx<'_>) -> Outcome {
    let (_, link) = tryo!(open_bound(c, 1));
    c.probe.script(
        ScriptAt::BeforeResult,
        Box::new(|b, invoke| {
            let target = invoke.and_then(|f| f["requestId"].as_str()).ok_or("no invoke to name")?;
            let a = crate::contract::compose::aborted(&b.identity(), "pc-unsolicited-abort", target)
                .map_err(|e| e.to_string())?;
            Ok(line_of(&crate::contract::compose::to_wire(&a)))
        }),
    );
    let seen = call_then_call(c, 1, "fs_stat", &json!({"path": "."}));
    let sent = c.probe.take_script_outcome();
    let seen = tryo!(seen);
    if let Some(o) = seen.inconclusive() {
        return o;
    }
    if let Some(o) = unsent(sent, "the unsolicited aborted", "the unsolicited aborted was never sent") {
        return o;
    }
    seen.fail_closed_with(c, link, mismatch())
}
/// SPEC §4.3/§4.4: a result for a call the daemon aborted (timed out) that arrives before the
/// matching `aborted` is dropped while its tombstone lives; the connection stays usable.
fn tools_late_result_dropped(c: &mut DCtx<'_>) -> Outcome {
    late_result(c, false)
}
/// SPEC §4.3/§4.4: a tombstone drops the late result *of the aborted call*: one that arrives
/// before `aborted` under the aborted call's `requestId` but another `idempotencyKey` is a
/// mismatched result, and mismatched results fail closed — a later tool call must not reach
/// the adapter.
fn tools_late_result_wrong_key(c: &mut DCtx<'_>) -> Outcome {
    late_result(c, true)
}
fn late_result(c: &mut DCtx<'_>, wrong_key: bool) -> Outcome {
    tryo!(open_for_abort(c));
    let mode = if wrong_key { InvokeMode::WrongKeyBeforeAborted } else { InvokeMode::ResultBeforeAborted };
    c.probe.set(BoundMode::Exact, mode);
    let sent_before = invokes(c).len();
    let w = c.wake(1, "fs_stat", &json!({"path": "."})).and_then(|w| one(c, w));
    // The abort follows the timeout; give it a step to reach the probe.
    let t = Instant::now();
    let aborted = loop {
        let seen = c.probe.seen().frames.iter().any(|(_, f)| f["kind"] == "abort");
        if seen || t.elapsed() > c.target.step * 2 {
            break seen;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    c.probe.set(BoundMode::Exact, InvokeMode::Normal);
    let first = tryo!(w);
    if invokes(c).len() == sent_before {
        return Outcome::Error(format!(
            "inconclusive: the wake ({}) made no tool call through the adapter, so nothing timed out on the wire",
            rtoken(&first)
        ));
    }
    if !aborted {
        return Outcome::Error(
            "inconclusive: no abort reached the probe (daemon.tools.timeout-sends-abort judges that), so no late \
             result was sent"
                .into(),
        );
    }
    std::thread::sleep(c.target.step / 5);
    let before = invokes(c).len();
    let w2 = tryo!(c.wake(1, "fs_stat", &json!({"path": "."})));
    let _ = tryo!(one(c, w2));
    if wrong_key {
        return if invokes(c).len() == before {
            Outcome::token("failed-closed")
        } else {
            Outcome::with(
                "accepted",
                vec!["a result under the aborted call's requestId but another idempotencyKey was dropped as a late                       result (a later tool call reached the adapter): it is a mismatched result and must fail the                       connection"
                    .into()],
            )
        };
    }
    let p = if invokes(c).len() == before {
        vec!["a late result that arrived before the aborted acknowledgement failed the connection: it must be \
              dropped while the call's tombstone lives (a later tool call did not reach the adapter)"
            .into()]
    } else {
        vec![]
    };
    Outcome::with("dropped", p)
}

/// The exact byte length of the normalized `bound` line (LF included) of descriptor `d`.
fn bound_line_bytes(d: &Value) -> Result<usize, Outcome> {
    let a = crate::contract::admit_descriptor(d, None)
        .map_err(|e| Outcome::Error(format!("inconclusive: the minted descriptor is refused by the contract: {e}")))?;
    Ok(line_of(&a.bound_frame()).len() + 1)
}
/// The case session becomes 256 × `€` (SPEC §3.3), long enough that `maxResponseBytes` can
/// sit at its normalized `bound` line; returns that line's exact length with
/// `maxResponseBytes` itself set to it (a fixed point: the limit's own digits count).
fn fit_setup(c: &mut DCtx<'_>) -> Result<(Value, usize), Outcome> {
    c.session = "\u{20ac}".repeat(256);
    let mut limits = super::DEFAULT_LIMITS.to_json();
    let mut d = c.descriptor(1, Some(limits.clone()))?;
    for _ in 0..4 {
        let n = bound_line_bytes(&d)?;
        if limits["maxResponseBytes"] == n {
            if n <= 1024 {
                return Err(Outcome::Error(format!(
                    "inconclusive: the bound line is only {n} bytes with this host's id, so maxResponseBytes cannot \
                     sit one below it inside its range"
                )));
            }
            return Ok((d, n));
        }
        limits["maxResponseBytes"] = json!(n);
        d["limits"] = limits.clone();
    }
    Err(Outcome::Error("inconclusive: no maxResponseBytes equals the bound line it is part of".into()))
}
/// Whether a refusal is one of descriptor admission (SPEC §3.2 codes).
fn admission_refusal(r: &Recv) -> Option<(String, String)> {
    let f = r.frame().filter(|f| f.ok() == Some(false))?;
    let code = f.error_code().unwrap_or("?");
    crate::contract::command::ADMISSION_CODES
        .iter()
        .any(|c| c.as_str() == code)
        .then(|| (code.to_string(), f.error_field().unwrap_or("").to_string()))
}
/// SPEC §3.3: `maxResponseBytes` exactly equal to the normalized `bound` line passes the fit
/// check (equality passes). What comes after admission is not this case's: an open that
/// fails later for another reason (Pi Daemon 0.3.3 cannot store a 256 × `€` session) still
/// passed the fit check.
fn adm_fit_equality(c: &mut DCtx<'_>) -> Outcome {
    let (d, n) = tryo!(fit_setup(c));
    c.probe.set(BoundMode::Exact, InvokeMode::Normal);
    let v = tryo!(c.open(1, super::DCtx::host_adapter(&d)));
    let r = tryo!(one(c, v));
    match admission_refusal(&r) {
        None if rtoken(&r) == "ok" => Outcome::token("admitted"),
        // A refusal naming a member of the open (invalid_field `extensions`, say) is a
        // validation refusal this case did not provoke: nothing was learnt about the fit check.
        None if r.frame().and_then(|f| f.error_field()).is_some_and(|f| !f.is_empty()) => Outcome::Error(format!(
            "inconclusive: the open with a descriptor that fits exactly was refused for another reason ({}, \
             field `{}`)",
            rtoken(&r),
            r.frame().and_then(|f| f.error_field()).unwrap_or("")
        )),
        // A failure naming no member came after admission (0.3.3: internal_error, it cannot
        // store the session): the fit check was passed.
        None if r.frame().is_some_and(|f| f.ok() == Some(false)) => Outcome::token("admitted"),
        None => Outcome::Error(format!("inconclusive: the open was answered {}, neither ok nor refused", rtoken(&r))),
        Some((code, field)) if code == Code::InvalidToolAdapterLimit.as_str() => Outcome::with(
            format!("refused:{code}@{}", last_segment(&field)),
            vec![format!(
                "a descriptor whose maxResponseBytes equals its bound line ({n} bytes) was refused by the fit check: \
                 equality passes"
            )],
        ),
        Some((code, field)) => Outcome::Error(format!(
            "inconclusive: the descriptor was refused at admission for another reason ({code}, field `{field}`)"
        )),
    }
}
/// SPEC §3.3: `maxResponseBytes` one byte below the normalized `bound` line fails the fit
/// check with `invalid_tool_adapter_limit` naming `maxResponseBytes`, before any connection.
fn adm_fit_one_past(c: &mut DCtx<'_>) -> Outcome {
    let (mut d, n) = tryo!(fit_setup(c));
    d["limits"]["maxResponseBytes"] = json!(n - 1);
    let before = c.probe.seen().connections;
    let v = tryo!(c.open(1, super::DCtx::host_adapter(&d)));
    let r = tryo!(one(c, v));
    std::thread::sleep(Duration::from_millis(50));
    let mut p = Vec::new();
    if c.probe.seen().connections != before {
        p.push("a refused descriptor reached the adapter: admission must answer before any connection".into());
    }
    if rtoken(&r) == "ok" {
        p.insert(
            0,
            format!(
                "maxResponseBytes {} is one byte below the {n}-byte bound line, yet the descriptor passed admission \
                 (answered {})",
                n - 1,
                rtoken(&r)
            ),
        );
        return Outcome::with(format!("admitted:{}", rtoken(&r)), p);
    }
    match refusal(&r, Code::InvalidToolAdapterLimit.as_str(), Some("maxResponseBytes")) {
        Outcome::Observed { token, .. } => Outcome::with(token, p),
        other => other,
    }
}

/// Open the case session at generation 1 with `tools:"none"`; a refusal is a failed
/// precondition (inconclusive).
fn open_plain(c: &mut DCtx<'_>) -> Result<(), Outcome> {
    let v = c.open(1, json!("none"))?;
    let r = one(c, v)?;
    if rtoken(&r) != "ok" {
        return Err(precondition_open(&r));
    }
    Ok(())
}

/// A `status` of the case session (`sessionId` given).
fn session_status(c: &mut DCtx<'_>) -> Result<Recv, Outcome> {
    let rid = c.rid();
    let v = json!({"protocolVersion": "2.0", "requestId": rid, "operation": "status", "sessionId": c.session, "payload": {}});
    one(c, v)
}

/// Events go only to the connections attached to that session generation: a connection
/// that never attached, and one that attached and detached, receive none of a wake's events
/// (the attached one must receive some, else nothing was emitted and the case is
/// inconclusive).
fn events_attached_only(c: &mut DCtx<'_>) -> Outcome {
    tryo!(open_plain(c));
    let mut bystander = tryo!(c.connect());
    let hs = tryo!(c.handshake(None));
    let _ = c.call(&mut bystander, hs);
    let mut detached = tryo!(c.connect());
    let a = tryo!(c.attach(1));
    let _ = c.call(&mut detached, a);
    let rid = c.rid();
    let sid = c.session.clone();
    let s = crate::contract::compose::SessionRef { session_id: &sid, generation: 1 };
    let det =
        crate::contract::compose::detach(&crate::contract::compose::Envelope { version: "2.0", request_id: &rid }, &s)
            .map(|d| crate::contract::compose::to_wire(&d));
    let det = match det {
        Ok(d) => d,
        Err(e) => return Outcome::Error(format!("inconclusive: the runner cannot build a detach: {e}")),
    };
    let dr = c.call(&mut detached, det);
    if rtoken(&dr) != "ok" {
        return Outcome::Error(format!("inconclusive: the detach was answered {}", rtoken(&dr)));
    }
    let mut attached = tryo!(c.connect());
    let a = tryo!(c.attach(1));
    let ar = c.call(&mut attached, a);
    if rtoken(&ar) != "ok" {
        return Outcome::Error(format!("inconclusive: the attach was answered {}", rtoken(&ar)));
    }
    let rid = c.rid();
    let e = crate::contract::compose::Envelope { version: "2.0", request_id: &rid };
    let w = crate::contract::compose::wake(&e, &s, &format!("{rid}-wake"), "pi-conform: say hello")
        .map(|w| crate::contract::compose::to_wire(&w));
    let w = match w {
        Ok(w) => w,
        Err(e) => return Outcome::Error(format!("inconclusive: the runner cannot build a wake: {e}")),
    };
    attached.send(&w);
    let mut got = 0usize;
    loop {
        let r = attached.recv_within(c.target.step * 3);
        match r.frame() {
            Some(f) if f.kind() == Some("event") => got += 1,
            Some(f) if f.request_id() == Some(rid.as_str()) => break,
            Some(_) => continue,
            None => break,
        }
    }
    if got == 0 {
        return Outcome::Error("inconclusive: the attached connection received no event of the wake".into());
    }
    let mut p = Vec::new();
    for (who, conn) in [("a connection that never attached", &mut bystander), ("a detached connection", &mut detached)]
    {
        let mut n = 0usize;
        loop {
            let r = conn.recv_within(c.target.step / 2);
            match r.frame() {
                Some(f) if f.kind() == Some("event") => n += 1,
                Some(_) => continue,
                None => break,
            }
        }
        if n > 0 {
            p.push(format!("{who} received {n} event(s) of the session's wake"));
        }
    }
    Outcome::with("attached-only", p)
}

/// Invokes the probe saw on connection `idx`.
fn invokes_on(c: &DCtx<'_>, idx: usize) -> usize {
    c.probe.seen().frames.iter().filter(|(n, f)| *n == idx && f["kind"] == "invoke").count()
}

/// A settled wake of one `fs_stat` call on a fresh host-adapter session: the wake command, its
/// answer, the probe connection and the invokes it made. Inconclusive unless it completed ok
/// with at least one invoke (the provoked state every wake-key case relies on).
fn settled_wake(c: &mut DCtx<'_>) -> Result<(Value, Recv, usize, usize), Outcome> {
    let (_, idx) = open_bound(c, 1)?;
    let w = c.wake(1, "fs_stat", &json!({"path": "."}))?;
    let r = one(c, w.clone())?;
    let n = invokes_on(c, idx);
    if rtoken(&r) != "ok" || n == 0 {
        return Err(Outcome::Error(format!(
            "inconclusive: the first wake (one fs_stat call) was answered {} after {n} invoke(s); a settled wake \
             with a tool call is what this case resends",
            rtoken(&r)
        )));
    }
    Ok((w, r, idx, n))
}

/// SPEC §2.5 (**MUST** [daemon]): the same key and payload return the cached terminal record:
/// the wake sent again under a new requestId is answered ok with the same result, and its turn
/// does not run again (no new invoke reaches the adapter).
fn wake_same_key_replays(c: &mut DCtx<'_>) -> Outcome {
    let (mut w, first, idx, n) = tryo!(settled_wake(c));
    w["requestId"] = json!(c.rid());
    let again = tryo!(one(c, w));
    let m = invokes_on(c, idx);
    let mut p = Vec::new();
    if m > n {
        p.push(format!(
            "the same wake (same key, same payload) sent again ran its turn again: {} more invoke(s) reached the \
             adapter; a settled key returns its journaled outcome",
            m - n
        ));
    }
    match again.frame() {
        Some(f) if f.ok() == Some(true) => {
            if f.data()["result"] != data(&first)["result"] {
                p.push("the same wake sent again was answered with another result than the first".into());
            }
        }
        Some(f) if f.error_code() == Some(DaemonCode::HostDraining.as_str()) => {
            return Outcome::Error("inconclusive: the resent wake was answered host_draining".into());
        }
        _ => p.push(format!(
            "the same wake (same key, same payload) sent again was answered {}: a settled key returns its \
             journaled outcome, here ok",
            rtoken(&again)
        )),
    }
    Outcome::with("replayed", p)
}

/// SPEC §2.5 (**MUST** [daemon]): the same key with another payload is
/// `idempotency_conflict`, and nothing runs (no new invoke).
fn wake_same_key_other_payload(c: &mut DCtx<'_>) -> Outcome {
    let (mut w, _, idx, n) = tryo!(settled_wake(c));
    w["requestId"] = json!(c.rid());
    let prompt = w["payload"]["prompt"].as_str().unwrap_or_default().to_string();
    w["payload"]["prompt"] = json!(format!("{prompt}\npi-conform: another payload under the same key"));
    let r = tryo!(one(c, w));
    let out = refusal(&r, AdapterCode::IdempotencyConflict.as_str(), None);
    let m = invokes_on(c, idx);
    match out {
        Outcome::Observed { token, mut problems } => {
            if m > n {
                problems
                    .push(format!("the wake with another payload under a settled key ran: {} more invoke(s)", m - n));
            }
            Outcome::Observed { token, problems }
        }
        other => other,
    }
}

/// SPEC §2.5 (**MUST** [daemon]): the same key and payload *join* a running wake. The wake's
/// one tool call is held 1500 ms by the probe; once its invoke reached the probe (the turn
/// runs: the provoked state, confirmed), the same wake under a new requestId and the same key
/// with another prompt are sent on two more connections. The other prompt is
/// `idempotency_conflict`; the same one is answered ok with the first's result; and only the
/// one invoke reached the adapter (a second turn would have run the call again).
fn wake_same_key_joins_running(c: &mut DCtx<'_>) -> Outcome {
    let d = tryo!(c.descriptor(1, Some(limits_with_timeout(30_000))));
    let link = tryo!(open_with(c, &d, 1));
    c.probe.set(BoundMode::Exact, InvokeMode::Delay(1500));
    let out = same_key_joins_running(c, link);
    c.probe.set(BoundMode::Exact, InvokeMode::Normal);
    release(c, 1);
    out
}
fn same_key_joins_running(c: &mut DCtx<'_>, link: usize) -> Outcome {
    let w = tryo!(c.wake(1, "fs_stat", &json!({"path": "."})));
    let rid = w["requestId"].as_str().unwrap_or_default().to_string();
    let before = invokes_on(c, link);
    let mut first = tryo!(c.connect());
    first.send(&w);
    let t = Instant::now();
    while invokes_on(c, link) == before && t.elapsed() < c.target.step * 2 {
        std::thread::sleep(Duration::from_millis(10));
    }
    if invokes_on(c, link) == before {
        return Outcome::Error(
            "inconclusive: the wake's tool call never reached the adapter, so no turn was surely running".into(),
        );
    }
    let mut again = w.clone();
    let again_rid = c.rid();
    again["requestId"] = json!(again_rid);
    let mut other = w.clone();
    let other_rid = c.rid();
    other["requestId"] = json!(other_rid);
    other["payload"]["prompt"] = json!(format!("{} (another payload)", w["payload"]["prompt"].as_str().unwrap_or("")));
    let mut k2 = tryo!(c.connect());
    k2.send(&again);
    let mut k3 = tryo!(c.connect());
    k3.send(&other);
    let wait = c.target.step * 3 + Duration::from_millis(1500);
    let conflict = response_to(&mut k3, &other_rid, wait);
    let joined = response_to(&mut k2, &again_rid, wait);
    let original = response_to(&mut first, &rid, wait);
    let mut p = Vec::new();
    let made = invokes_on(c, link) - before;
    if made > 1 {
        p.push(format!(
            "the same wake sent again while its turn ran started another turn: {made} invokes reached the adapter for \
             one tool call (the same key and payload join the running wake)"
        ));
    }
    if rtoken(&original) != "ok" {
        return Outcome::Error(format!("inconclusive: the first wake was answered {}", rtoken(&original)));
    }
    match joined.frame() {
        Some(f) if f.ok() == Some(true) => {
            if f.data()["result"] != data(&original)["result"] {
                p.push("the same wake sent while its turn ran was answered with another result than the first".into());
            }
        }
        _ => p.push(format!(
            "the same wake (same key and payload) sent while its turn ran was answered {}, not joined to the running \
             one",
            rtoken(&joined)
        )),
    }
    let code = rtoken(&conflict);
    if code != format!("error:{}", AdapterCode::IdempotencyConflict.as_str()) {
        p.push(format!("the running wake's key with another prompt was answered {code}, not idempotency_conflict"));
    }
    Outcome::with(if p.is_empty() { "joined" } else { "ran-again" }, p)
}

/// PC-1.2/PC-4.2: one adapter connection multiplexes requests by `requestId`, and an abort
/// carries its own. With `requestTimeoutMs` 300 and a probe that answers neither invokes nor
/// aborts, two wakes (one call, then two concurrent reads) time out three calls, all still in
/// flight at the adapter (the provoked state: three invokes and three aborts on the link, else
/// inconclusive). Every invoke `requestId` on the link is distinct, every abort's own
/// `requestId` differs from every invoke's and every other abort's, and every abort targets an
/// invoke sent before it on the link.
fn tools_request_ids_unique(c: &mut DCtx<'_>) -> Outcome {
    let d = tryo!(c.descriptor(1, Some(limits_with_timeout(300))));
    let link = tryo!(open_with(c, &d, 1));
    c.probe.set(BoundMode::Exact, InvokeMode::Silent);
    let first = c.wake(1, "fs_stat", &json!({"path": "."})).and_then(|w| one(c, w));
    let second = c
        .wake_calls(1, &[("fs_stat", json!({"path": "."})), ("fs_list", json!({"path": "."}))])
        .and_then(|w| one(c, w));
    // The aborts follow the timeouts: give the last one a step to arrive.
    let t = Instant::now();
    while link_frames(c, link, "abort").len() < 3 && t.elapsed() < c.target.step {
        std::thread::sleep(Duration::from_millis(20));
    }
    c.probe.set(BoundMode::Exact, InvokeMode::Normal);
    let (first, second) = (tryo!(first), tryo!(second));
    let frames: Vec<Value> = c
        .probe
        .seen()
        .frames
        .into_iter()
        .filter(|(n, f)| *n == link && (f["kind"] == "invoke" || f["kind"] == "abort"))
        .map(|(_, f)| f)
        .collect();
    let invokes = frames.iter().filter(|f| f["kind"] == "invoke").count();
    let aborts = frames.iter().filter(|f| f["kind"] == "abort").count();
    if invokes < 3 || aborts < 3 {
        return Outcome::Error(format!(
            "inconclusive: {invokes} invoke(s) and {aborts} abort(s) reached the adapter (the wakes were answered {} \
             and {}); three timed-out calls still in flight are what this case compares",
            rtoken(&first),
            rtoken(&second)
        ));
    }
    let mut p = Vec::new();
    let mut invoke_ids: Vec<&Value> = Vec::new();
    let mut abort_ids: Vec<&Value> = Vec::new();
    for f in &frames {
        let id = &f["requestId"];
        if f["kind"] == "invoke" {
            if invoke_ids.contains(&id) {
                p.push(format!("two invokes on one connection carry the requestId {id}"));
            }
            if abort_ids.contains(&id) {
                p.push(format!("an invoke reuses the requestId {id} of an earlier abort"));
            }
            invoke_ids.push(id);
        } else {
            if invoke_ids.contains(&id) {
                p.push(format!("an abort carries the requestId {id} of an invoke; an abort carries its own"));
            }
            if abort_ids.contains(&id) {
                p.push(format!("two aborts on one connection carry the requestId {id}"));
            }
            if !invoke_ids.contains(&&f["targetRequestId"]) {
                p.push(format!(
                    "an abort targets {}, which no earlier invoke on the connection carried",
                    f["targetRequestId"]
                ));
            }
            abort_ids.push(id);
        }
    }
    release(c, 1);
    Outcome::with(if p.is_empty() { "distinct" } else { "reused" }, p)
}

/// Run `body` with the case session's base id (it opens `<base>-a` and `<base>-b`); then put
/// the probe back to normal, give both sessions back and restore the case session.
fn with_sessions_a_b(c: &mut DCtx<'_>, body: fn(&mut DCtx<'_>, &str) -> Outcome) -> Outcome {
    let base = c.session.clone();
    let out = body(c, &base);
    c.probe.set(BoundMode::Exact, InvokeMode::Normal);
    for s in [format!("{base}-a"), format!("{base}-b")] {
        c.session = s;
        release(c, 1);
    }
    c.session = base;
    out
}

/// PC-4.4: each session generation has its own adapter queue. Two sessions A and B on the
/// probe, each with `maxConcurrentRequests` 1 and `maxQueuedRequests` 0; the probe answers each
/// invoke 3000 ms after it arrives. Once A's call reached the probe (A's one slot is taken: the
/// provoked state, confirmed), B's wake makes one call: its invoke must reach the probe within
/// 2000 ms of A's, before A's result (a queue shared with A would refuse B's call
/// `adapter_queue_capacity` or hold it until A's result), and both wakes complete.
fn tools_queue_per_generation(c: &mut DCtx<'_>) -> Outcome {
    with_sessions_a_b(c, queue_per_generation)
}
fn queue_per_generation(c: &mut DCtx<'_>, base: &str) -> Outcome {
    let limits = AdapterLimits {
        max_concurrent_requests: std::num::NonZeroU64::MIN,
        max_queued_requests: 0,
        request_timeout_ms: 30_000,
        ..super::DEFAULT_LIMITS
    }
    .to_json();
    let (sa, sb) = (format!("{base}-a"), format!("{base}-b"));
    let mut links = Vec::new();
    for s in [&sa, &sb] {
        c.session = s.clone();
        let d = tryo!(c.descriptor(1, Some(limits.clone())));
        links.push(tryo!(open_with(c, &d, 1)));
    }
    let (la, lb) = (links[0], links[1]);
    c.probe.set(BoundMode::Exact, InvokeMode::Delay(3000));
    c.session = sa;
    let wa = tryo!(c.wake(1, "fs_stat", &json!({"path": "."})));
    let ra = wa["requestId"].as_str().unwrap_or_default().to_string();
    let mut ka = tryo!(c.connect());
    ka.send(&wa);
    let t = Instant::now();
    while link_frames(c, la, "invoke").is_empty() && t.elapsed() < c.target.step * 2 {
        std::thread::sleep(Duration::from_millis(5));
    }
    if link_frames(c, la, "invoke").is_empty() {
        return Outcome::Error("inconclusive: session A's tool call never reached the adapter".into());
    }
    let a_seen = Instant::now();
    c.session = sb;
    let wb = tryo!(c.wake(1, "fs_stat", &json!({"path": "."})));
    let rb = wb["requestId"].as_str().unwrap_or_default().to_string();
    let mut kb = tryo!(c.connect());
    kb.send(&wb);
    while link_frames(c, lb, "invoke").is_empty() && a_seen.elapsed() < Duration::from_millis(2000) {
        std::thread::sleep(Duration::from_millis(5));
    }
    let b_after = a_seen.elapsed();
    let b_sent = !link_frames(c, lb, "invoke").is_empty();
    let wait = c.target.step * 3 + Duration::from_millis(3000);
    let answer_b = response_to(&mut kb, &rb, wait);
    let answer_a = response_to(&mut ka, &ra, wait);
    let mut p = Vec::new();
    let refused = per_call(&answer_b)
        .and_then(|calls| calls.first().and_then(|x| x.code.clone()))
        .filter(|code| code == DaemonCode::AdapterQueueCapacity.as_str());
    if let Some(code) = refused {
        p.push(format!(
            "session B's only call was refused {code} while session A's call held A's one slot: the sessions share a \
             queue"
        ));
    } else if !b_sent {
        p.push(format!(
            "session B's only call did not reach the adapter within {} ms while session A's call held A's one slot \
             (for 3000 ms): the sessions share a queue",
            b_after.as_millis()
        ));
    }
    if p.is_empty() && (rtoken(&answer_a) != "ok" || rtoken(&answer_b) != "ok") {
        return Outcome::Error(format!(
            "inconclusive: the wakes were answered {} (A) and {} (B)",
            rtoken(&answer_a),
            rtoken(&answer_b)
        ));
    }
    Outcome::with(if p.is_empty() { "separate" } else { "shared" }, p)
}

/// PC-4.4: aborted and timed-out requests are tombstoned *for `idempotencyTtlMs`*, at most
/// `maxIdempotencyKeys` of them. With `maxIdempotencyKeys` 1, `idempotencyTtlMs` 1000,
/// `requestTimeoutMs` 300 and an adapter that answers neither invokes nor aborts: a first
/// call times out (its abort on the wire: one tombstone, the provoked state, confirmed); after
/// the TTL has passed, a second call times out with an abort of its own (its tombstone fits:
/// the first expired), and a third call still reaches the adapter on the same connection. A
/// daemon keeping tombstones forever fails the connection `adapter_abort_capacity` at the
/// second timeout.
fn tools_tombstone_expires(c: &mut DCtx<'_>) -> Outcome {
    let limits = AdapterLimits {
        max_idempotency_keys: std::num::NonZeroU64::MIN,
        idempotency_ttl_ms: 1000,
        request_timeout_ms: 300,
        ..super::DEFAULT_LIMITS
    }
    .to_json();
    let d = tryo!(c.descriptor(1, Some(limits)));
    let link = tryo!(open_with(c, &d, 1));
    c.probe.set(BoundMode::Exact, InvokeMode::Silent);
    let out = tombstone_expires(c, link);
    c.probe.set(BoundMode::Exact, InvokeMode::Normal);
    release(c, 1);
    out
}
fn tombstone_expires(c: &mut DCtx<'_>, link: usize) -> Outcome {
    let count = |c: &DCtx<'_>, kind: &str| link_frames(c, link, kind).len();
    let wait_for = |c: &DCtx<'_>, kind: &str, n: usize| {
        let t = Instant::now();
        while count(c, kind) < n && t.elapsed() < c.target.step {
            std::thread::sleep(Duration::from_millis(10));
        }
        count(c, kind) >= n
    };
    let first = tryo!(c.wake(1, "fs_stat", &json!({"path": "."})).and_then(|w| one(c, w)));
    if !wait_for(c, "abort", 1) || count(c, "invoke") != 1 {
        return Outcome::Error(format!(
            "inconclusive: the first call's invoke and abort were not both seen ({} invoke(s), {} abort(s); the wake \
             was answered {})",
            count(c, "invoke"),
            count(c, "abort"),
            rtoken(&first)
        ));
    }
    // Past the tombstone's TTL (1000 ms from the abort), with a margin.
    std::thread::sleep(Duration::from_millis(1000) + c.target.step / 2);
    let second = tryo!(c.wake(1, "fs_stat", &json!({"path": "."})).and_then(|w| one(c, w)));
    let mut p = Vec::new();
    if !wait_for(c, "invoke", 2) {
        return Outcome::Error(format!(
            "inconclusive: the second call never reached the adapter (the wake was answered {})",
            rtoken(&second)
        ));
    }
    if !wait_for(c, "abort", 2) {
        p.push(format!(
            "the second call timed out {} ms after the first one's tombstone expired (idempotencyTtlMs 1000) and no \
             abort was sent for it: the expired tombstone still filled maxIdempotencyKeys 1",
            1000 + (c.target.step / 2).as_millis()
        ));
    }
    let third = tryo!(c.wake(1, "fs_stat", &json!({"path": "."})).and_then(|w| one(c, w)));
    if !wait_for(c, "invoke", 3) {
        p.push(format!(
            "a third call never reached the adapter on the connection (the wake was answered {}): the connection \
             failed although every tombstone but one had expired",
            rtoken(&third)
        ));
    }
    Outcome::with(if p.is_empty() { "expired" } else { "kept" }, p)
}

/// SPEC §2.5: `status` with a `sessionId` answers that resident session: its id and the
/// generation just opened, as `data.session` or as `data` itself.
fn status_resident_session(c: &mut DCtx<'_>) -> Outcome {
    tryo!(open_plain(c));
    let r = tryo!(session_status(c));
    if rtoken(&r) != "ok" {
        return Outcome::token(rtoken(&r));
    }
    // The session as `data.session` (this project's reference) or as `data` itself (Pi Daemon
    // 0.3.3's session snapshot): SPEC §2.5 says "one resident session", not its wrapping.
    let d = data(&r);
    let session = if d["session"].is_object() { d["session"].clone() } else { d };
    let mut p = Vec::new();
    if session["sessionId"] != c.session.as_str() || session["generation"] != 1 {
        p.push(format!(
            "the status of session {} generation 1 answered the session resource {}",
            c.session,
            session.to_string().chars().take(300).collect::<String>()
        ));
    }
    Outcome::with("ok", p)
}

/// The numbers under `v`, recursively, with the key that holds each.
fn numbers_under<'v>(v: &'v Value, out: &mut Vec<(&'v str, u64)>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                match x.as_u64() {
                    Some(n) => out.push((k.as_str(), n)),
                    None => numbers_under(x, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| numbers_under(x, out)),
        _ => {}
    }
}

/// PC-1.1: the daemon socket is owner-only (no group or other permission bits), in a directory
/// that is not group- or world-writable, both owned by the daemon's uid (read from the
/// connection's peer credentials). Judged on the real objects: the path is resolved first, so a
/// symlink of the user's own making to the socket (or to its directory) is not held against the
/// daemon.
fn socket_owner_only(c: &mut DCtx<'_>) -> Outcome {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let path = match std::fs::canonicalize(&c.target.socket) {
        Ok(p) => p,
        Err(e) => return Outcome::Error(format!("cannot resolve the daemon socket path: {e}")),
    };
    let stream = match crate::conform::adapter::conn::connect_within(&path, c.target.step) {
        Ok(s) => s,
        Err(e) => return Outcome::Error(format!("cannot connect to the daemon socket: {e}")),
    };
    let uid = match rustix::net::sockopt::socket_peercred(&stream) {
        Ok(cred) => cred.uid.as_raw(),
        Err(e) => return Outcome::Error(format!("cannot read the daemon's peer credentials: {e}")),
    };
    drop(stream);
    let Some(dir) = path.parent() else {
        return Outcome::Error("the daemon socket path has no directory".into());
    };
    let (sock, dirm) = match (std::fs::symlink_metadata(&path), std::fs::symlink_metadata(dir)) {
        (Ok(s), Ok(d)) => (s, d),
        (Err(e), _) | (_, Err(e)) => {
            return Outcome::Error(format!("cannot stat the daemon socket or its directory: {e}"))
        }
    };
    let mut problems = Vec::new();
    if !sock.file_type().is_socket() {
        problems.push("the path is not a socket".to_string());
    }
    if sock.mode() & 0o077 != 0 {
        problems.push(format!(
            "the socket has group/other permission bits (mode {:o}): another local user could drive every session",
            sock.mode() & 0o7777
        ));
    }
    if sock.uid() != uid {
        problems.push(format!("the socket is owned by uid {}, the daemon runs as uid {uid}", sock.uid()));
    }
    if dirm.mode() & 0o022 != 0 {
        problems.push(format!(
            "the socket's directory is group- or world-writable (mode {:o}): another user could replace the socket",
            dirm.mode() & 0o7777
        ));
    }
    if dirm.uid() != uid {
        problems.push(format!("the socket's directory is owned by uid {}, the daemon runs as uid {uid}", dirm.uid()));
    }
    Outcome::with("owner-only", problems)
}

/// `requestTimeoutMs` of the queue-telemetry case: its second call times out on purpose.
const TELEMETRY_TIMEOUT_MS: u64 = 600;

/// SPEC §4.4 (MUST [daemon]): `status` carries content-free queue telemetry per session —
/// capacity, occupancy, high-water marks, counters (accepted, completed, failed, rejected,
/// cancelled, timed out), saturation, per-operation summaries. Spellings differ between daemons
/// (the reference's `toolQueue`, Pi Daemon 0.3.3's `hostToolAdapterQueue`), so the case looks for
/// the telemetry by what it must say. Three wakes: one call completes and a read of a file that
/// does not exist fails (the adapter's error result), each held by the probe for
/// [`TELEMETRY_HOLD_MS`]; one the probe never answers times out (`requestTimeoutMs` 600); then
/// two calls, the first held by the probe and
/// the second queued behind it (`maxConcurrentRequests` 1), are cancelled by the client's
/// `abort` of their turn. Then, with nothing in flight, the status must hold a `capacity` object
/// with the descriptor's `maxConcurrentRequests` and `maxQueuedRequests` (1 and 7, not the
/// recommended 4 and 16); a completed-calls counter (`completed…`) of at least 1, a failed one
/// (`failed…`) of at least 1, a timed-out one (`timedOut…`) of at least 1 and a cancelled one
/// (`cancelled…`) of at least 2 — 1 when
/// the accepted counter (`accepted…`) shows the queued call was never admitted — (each only
/// when its calls were confirmed at the probe); an `operations` summary holding a `count` of at
/// least 1 (the calls ran: a queue-wait or latency summary counts them); no saturation (a
/// `saturated` flag, or `saturation.active`, true with at most two of eight slots used); and
/// nowhere a call's `requestId`, `idempotencyKey` or path. The status answering the session
/// without any of it fails. Every timing summary's mean, `sum / count` and `last` lie between its
/// `min` and `max` ([`summaries_inconsistent`]); and a status read right after the first wake
/// must not summarize the latency of one held call (a summary whose name holds `latency`, with a
/// `count` of 1) with a `min` below half the hold: no measure of a request's latency is shorter
/// than the adapter's hold of it.
fn status_queue_telemetry(c: &mut DCtx<'_>) -> Outcome {
    let limits = AdapterLimits {
        max_concurrent_requests: std::num::NonZeroU64::MIN,
        max_queued_requests: 7,
        request_timeout_ms: TELEMETRY_TIMEOUT_MS as i64,
        ..super::DEFAULT_LIMITS
    }
    .to_json();
    let d = tryo!(c.descriptor(1, Some(limits)));
    let link = tryo!(open_with(c, &d, 1));
    let dir = format!("pc-tel-{}", &c.session[c.session.len().saturating_sub(8)..]);
    if let Err(e) = private_dir(&c.target.cwd.join(&dir)) {
        return Outcome::Error(format!("cannot create the directory the call names: {e}"));
    }
    // The first wake: a call that completes and a read of a file that does not exist, which the
    // adapter answers with an error result (a failed call).
    let absent = format!("{dir}/absent.txt");
    c.probe.set(BoundMode::Exact, InvokeMode::Delay(TELEMETRY_HOLD_MS));
    let calls = [("fs_stat", json!({"path": dir})), ("fs_read", json!({"path": absent}))];
    let seen = wake_attached(c, 1, &calls, c.target.step * 3);
    c.probe.set(BoundMode::Exact, InvokeMode::Normal);
    let seen = tryo!(seen);
    let Some(invoke) = link_frames(c, link, "invoke").into_iter().find(|f| f["payload"]["path"] == dir.as_str()) else {
        return Outcome::Error(format!(
            "inconclusive: the call never reached the adapter (the wake was answered {})",
            rtoken(&seen.resp)
        ));
    };
    let failed = link_frames(c, link, "invoke").iter().any(|f| f["payload"]["path"] == absent.as_str());
    // The one held call's latency, read before any other call ran.
    let mut p = Vec::new();
    if let Ok(r) = session_status(c) {
        if let Some(t) = (rtoken(&r) == "ok").then(|| data(&r)).as_ref().and_then(telemetry_holder) {
            p.extend(latency_below_hold(t, "", TELEMETRY_HOLD_MS));
        }
    }
    c.probe.set(BoundMode::Exact, InvokeMode::Ignore);
    let ends = telemetry_ends(c, link);
    c.probe.set(BoundMode::Exact, InvokeMode::Normal);
    let (timed_out, cancelled) = tryo!(ends);
    let r = tryo!(session_status(c));
    if rtoken(&r) != "ok" {
        return Outcome::Error(format!("inconclusive: the status of the live session was answered {}", rtoken(&r)));
    }
    let d = data(&r);
    // The object holding `capacity` is the telemetry.
    let Some(t) = telemetry_holder(&d) else {
        return Outcome::with(
            "no-telemetry",
            vec![format!(
                "the status of a session with a bound tool adapter carries no queue telemetry (no `capacity` object): \
                 SPEC §4.4 requires capacity, occupancy, high-water marks, counters and per-operation summaries; \
                 data: {}",
                d.to_string().chars().take(300).collect::<String>()
            )],
        );
    };
    let mut cap = Vec::new();
    numbers_under(&t["capacity"], &mut cap);
    let mut cap: Vec<u64> = cap.into_iter().map(|(_, n)| n).collect();
    cap.sort_unstable();
    if cap != [1, 7] {
        p.push(format!(
            "the telemetry's capacity {} is not the binding's maxConcurrentRequests 1 and maxQueuedRequests 7",
            t["capacity"]
        ));
    }
    let mut all = Vec::new();
    numbers_under(t, &mut all);
    let counter = |prefix: &str| all.iter().filter(|(k, _)| k.starts_with(prefix)).map(|(_, n)| *n).max();
    // The cancelled turn's second call waited in the queue behind the first: it was cancelled
    // too when the daemon had admitted it (five calls accepted in all).
    let cancels = if counter("accepted").is_some_and(|n| n >= 5) { 2 } else { 1 };
    for (prefix, what, want) in [
        ("completed", "completed", 1),
        ("failed", "failed", u64::from(failed)),
        ("timedOut", "timed-out", u64::from(timed_out)),
        ("cancelled", "cancelled", if cancelled { cancels } else { 0 }),
    ] {
        match counter(prefix) {
            _ if want == 0 => {}
            Some(n) if n >= want => {}
            Some(n) => p.push(format!("the telemetry counts {n} {what} calls after {want} {what} call(s)")),
            None => p.push(format!("the telemetry has no {what}-calls counter (`{prefix}…`)")),
        }
    }
    match t.get("operations") {
        None => p.push("the telemetry has no per-operation summaries (`operations`)".into()),
        Some(ops) => {
            let mut n = Vec::new();
            numbers_under(ops, &mut n);
            if !n.iter().any(|(k, v)| *k == "count" && *v >= 1) {
                p.push(format!(
                    "the per-operation summaries count no call after four fs.stat calls and one fs.read ran (no queue-wait or \
                     latency summary with a `count` of at least 1): {}",
                    ops.to_string().chars().take(300).collect::<String>()
                ));
            }
            p.extend(summaries_inconsistent(ops, ""));
        }
    }
    p.extend(telemetry_counters_bounded(t));
    // Saturation: a flag (`saturated`), or an object whose `active` says it (0.3.3's
    // `saturation`). At most two of 1 + 7 slots were ever used, and none is now.
    if saturated_of(t) {
        p.push(format!(
            "the telemetry reports the queue saturated with nothing in flight (at most two of maxConcurrentRequests 1 \
             + maxQueuedRequests 7 were ever used): {}",
            t.to_string().chars().take(300).collect::<String>()
        ));
    }
    let text = t.to_string();
    for (what, v) in [("requestId", &invoke["requestId"]), ("idempotencyKey", &invoke["idempotencyKey"])] {
        if let Some(s) = v.as_str().filter(|s| !s.is_empty() && text.contains(*s)) {
            p.push(format!("the telemetry carries the call's {what} `{s}`: it must be content-free"));
        }
    }
    if text.contains(&dir) {
        p.push(format!("the telemetry carries the call's path `{dir}`: it must be content-free"));
    }
    Outcome::with("telemetry", p)
}

/// How long the probe holds the queue-telemetry case's first call.
const TELEMETRY_HOLD_MS: u64 = 100;

/// Every timing summary under `v` whose name (its key path, `path` so far) holds `latency`
/// (any case) and whose `count` is 1, after one call the adapter held `hold_ms`: a numeric
/// `min` below half the hold is no latency of that call.
fn latency_below_hold(v: &Value, path: &str, hold_ms: u64) -> Vec<String> {
    let mut p = Vec::new();
    if let Value::Object(m) = v {
        let is_latency = path.to_ascii_lowercase().contains("latency");
        if let (true, Some(1), Some(min)) =
            (is_latency, m.get("count").and_then(Value::as_u64), m.get("min").and_then(Value::as_f64))
        {
            if min < hold_ms as f64 / 2.0 {
                p.push(format!(
                    "after one call that the adapter held {hold_ms} ms the latency summary `{path}` gives a min of \
                     {min} ms: no latency of that call is shorter than the hold; {}",
                    v.to_string().chars().take(200).collect::<String>()
                ));
            }
        }
        for (k, x) in m {
            p.extend(latency_below_hold(x, &if path.is_empty() { k.clone() } else { format!("{path}.{k}") }, hold_ms));
        }
    }
    p
}

/// SPEC §4.4's per-operation timing summaries, judged by arithmetic alone: every object under
/// `v` (`path` names it) with a numeric `count` of at least 1 and numeric `min` and `max` must
/// have `min ≤ max`, and each of its `mean`, `sum / count` and `last`, when numeric, between
/// them (0.001 of slack for rounding). Whatever the unit or the rounding, a summary of values
/// holds them between its least and its greatest; one whose mean is above its maximum says
/// nothing true. Pi Daemon 0.3.3 summarizes `{count, sum, min, max, last}`, the reference
/// `{count, min, max, mean}`.
fn summaries_inconsistent(v: &Value, path: &str) -> Vec<String> {
    let mut p = Vec::new();
    match v {
        Value::Object(m) => {
            let num = |k: &str| m.get(k).and_then(Value::as_f64);
            if let (Some(count), Some(min), Some(max)) = (num("count"), num("min"), num("max")) {
                if count >= 1.0 {
                    let eps = 0.001;
                    let mut between = vec![("mean", num("mean")), ("last", num("last"))];
                    between.push(("sum / count", num("sum").map(|s| s / count)));
                    let mut bad: Vec<String> = Vec::new();
                    if min > max + eps {
                        bad.push(format!("min {min} above max {max}"));
                    }
                    for (what, x) in between {
                        if let Some(x) = x.filter(|x| *x < min - eps || *x > max + eps) {
                            bad.push(format!("{what} {x} outside [min {min}, max {max}]"));
                        }
                    }
                    if !bad.is_empty() {
                        p.push(format!(
                            "the timing summary `{path}` is inconsistent ({}): a summary holds its values between \
                             its min and its max; {}",
                            bad.join(", "),
                            v.to_string().chars().take(200).collect::<String>()
                        ));
                    }
                }
            }
            for (k, x) in m {
                p.extend(summaries_inconsistent(x, &if path.is_empty() { k.clone() } else { format!("{path}.{k}") }));
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                p.extend(summaries_inconsistent(x, &format!("{path}[{i}]")));
            }
        }
        _ => {}
    }
    p
}

/// The queue-telemetry case's calls that end without a result, with the probe never answering
/// an invoke: one that times out, then two whose turn the client aborts while the probe holds
/// the first (the second waits behind it). Whether each was provoked: the invoke reached the
/// probe and, for the timeout, its abort did; for the cancel, the client's `abort` was answered
/// `aborted:true` and the wake was answered before its calls could have timed out (less than
/// `requestTimeoutMs` after the wake was sent, so no earlier than their admission). Otherwise
/// that counter is not judged.
fn telemetry_ends(c: &mut DCtx<'_>, link: usize) -> Result<(bool, bool), Outcome> {
    let invokes = |c: &DCtx<'_>| link_frames(c, link, "invoke").len();
    let wait_invokes = |c: &DCtx<'_>, n: usize| {
        let t = Instant::now();
        while invokes(c) < n && t.elapsed() < c.target.step * 2 {
            std::thread::sleep(Duration::from_millis(10));
        }
        invokes(c) >= n
    };
    // The timeout: the wake is answered once the call failed (requestTimeoutMs 600).
    let before = invokes(c);
    let w = c.wake(1, "fs_stat", &json!({"path": "."}))?;
    let _ = one(c, w)?;
    let t = Instant::now();
    while link_frames(c, link, "abort").is_empty() && t.elapsed() < c.target.step {
        std::thread::sleep(Duration::from_millis(10));
    }
    let timed_out = invokes(c) > before && !link_frames(c, link, "abort").is_empty();
    // The cancel: a wake of two calls, the first held by the probe and the second queued behind
    // it (maxConcurrentRequests 1), then the client's abort of its turn.
    let before = invokes(c);
    let mut conn = c.connect()?;
    let w = c.wake_calls(1, &[("fs_stat", json!({"path": "."})), ("fs_stat", json!({"path": "."}))])?;
    let rid = w["requestId"].as_str().unwrap_or_default().to_string();
    let sent = Instant::now();
    conn.send(&w);
    if !wait_invokes(c, before + 1) {
        let _ = conn.recv_for(&rid);
        return Ok((timed_out, false));
    }
    let a = json!({"protocolVersion": "2.0", "requestId": c.rid(), "operation": "abort", "sessionId": c.session,
        "generation": 1, "payload": {}});
    let ar = one(c, a)?;
    let aborted = ar.frame().is_some_and(|f| f.ok() == Some(true) && f.data()["aborted"] == true);
    let answered = conn.recv_for(&rid).frame().is_some();
    let before_timeout = sent.elapsed() < Duration::from_millis(TELEMETRY_TIMEOUT_MS - 50);
    Ok((timed_out, aborted && answered && before_timeout))
}

/// PC-4.4 MUST [daemon]: a client's `abort` of a turn cancels its tool calls, in flight or
/// still queued (the protocol's `abort`/`targetRequestId` is how an in-flight call is
/// cancelled). A wake of two calls on a binding with maxConcurrentRequests 1: the probe holds
/// the first (confirmed at the probe), the second waits behind it. After the client's abort is
/// answered `aborted:true`, an `abort` naming the held invoke reaches the adapter within a step,
/// the waiting call never reaches it (watched for two steps), and the wake is answered long
/// before the calls' own 30 s timeout. Pi Daemon 0.3.3 sends the abort of the active call and
/// drops a queued call whose signal is aborted.
fn tools_client_abort_cancels_calls(c: &mut DCtx<'_>) -> Outcome {
    let out = client_abort_cancels(c);
    c.probe.set(BoundMode::Exact, InvokeMode::Normal);
    out
}
fn client_abort_cancels(c: &mut DCtx<'_>) -> Outcome {
    let limits = AdapterLimits {
        max_concurrent_requests: std::num::NonZeroU64::MIN,
        max_queued_requests: 2,
        request_timeout_ms: 30_000,
        ..super::DEFAULT_LIMITS
    }
    .to_json();
    let d = tryo!(c.descriptor(1, Some(limits)));
    let link = tryo!(open_with(c, &d, 1));
    c.probe.set(BoundMode::Exact, InvokeMode::Ignore);
    let dir = format!("pc-abort-{}", &c.session[c.session.len().saturating_sub(8)..]);
    if let Err(e) = private_dir(&c.target.cwd.join(&dir)) {
        return Outcome::Error(format!("cannot create the directory the calls name: {e}"));
    }
    let (first, second) = (format!("{dir}/a"), format!("{dir}/b"));
    // Both exist: Pi Daemon 0.3.3 refuses a path missing under its cwd before any invoke.
    for f in [&first, &second] {
        if let Err(e) = std::fs::write(c.target.cwd.join(f), b"x") {
            return Outcome::Error(format!("cannot create the file a call names: {e}"));
        }
    }
    let named = |c: &DCtx<'_>, path: &str| {
        link_frames(c, link, "invoke")
            .into_iter()
            .find(|f| f["payload"]["path"] == path)
            .map(|f| f["requestId"].clone())
    };
    let mut conn = tryo!(c.connect());
    let w = tryo!(c.wake_calls(1, &[("fs_stat", json!({"path": first})), ("fs_stat", json!({"path": second}))]));
    let rid = w["requestId"].as_str().unwrap_or_default().to_string();
    let sent = Instant::now();
    conn.send(&w);
    let t = Instant::now();
    while named(c, &first).is_none() && named(c, &second).is_none() && t.elapsed() < c.target.step * 2 {
        std::thread::sleep(Duration::from_millis(10));
    }
    // Whichever call the daemon sent first is the held one; the other waits behind it.
    let (held, waiting) = match (named(c, &first), named(c, &second)) {
        (Some(id), None) => (id, second),
        (None, Some(id)) => (id, first),
        (None, None) => {
            return Outcome::Error("inconclusive: neither tool call of the wake reached the adapter".into());
        }
        (Some(_), Some(_)) => {
            return Outcome::Error(
                "inconclusive: both calls reached the adapter at once on a binding with maxConcurrentRequests 1 \
                 (daemon.tools.concurrency-limit judges that), so none was waiting"
                    .into(),
            );
        }
    };
    let a = json!({"protocolVersion": "2.0", "requestId": c.rid(), "operation": "abort", "sessionId": c.session,
        "generation": 1, "payload": {}});
    let ar = tryo!(one(c, a));
    if !ar.frame().is_some_and(|f| f.ok() == Some(true) && f.data()["aborted"] == true) {
        return Outcome::Error(format!(
            "inconclusive: the client's abort of the running turn was answered {}, not aborted:true",
            rtoken(&ar)
        ));
    }
    let mut p = Vec::new();
    let t = Instant::now();
    let aborted = |c: &DCtx<'_>| link_frames(c, link, "abort").iter().any(|f| f["targetRequestId"] == held);
    while !aborted(c) && t.elapsed() < c.target.step {
        std::thread::sleep(Duration::from_millis(10));
    }
    if !aborted(c) {
        p.push(format!(
            "the client's abort of the turn was answered aborted:true, but no abort naming the held invoke reached the \
             adapter within {} ms: the call kept running",
            c.target.step.as_millis()
        ));
    }
    let answer = conn.recv_for(&rid);
    if answer.frame().is_none() || sent.elapsed() >= Duration::from_millis(15_000) {
        p.push(format!(
            "the aborted wake was not answered before half its calls' 30 s timeout ({})",
            answer.describe()
        ));
    }
    std::thread::sleep(c.target.step * 2);
    if named(c, &waiting).is_some() {
        p.push(
            "the call waiting behind the held one reached the adapter after the client aborted its turn: a cancelled \
             queued call never runs"
                .into(),
        );
    }
    Outcome::with("cancelled", p)
}

/// SPEC §2.3: an event's sequence is per session and monotonic from 1: the events a wake
/// sends to an attached connection carry strictly increasing sequences, each above the
/// `sequence` the attach answered with (the last one the session had sent).
fn events_sequence_increasing(c: &mut DCtx<'_>) -> Outcome {
    tryo!(open_plain(c));
    let mut attached = tryo!(c.connect());
    let a = tryo!(c.attach(1));
    let ar = c.call(&mut attached, a);
    let Some(at) = ar.frame().filter(|f| f.ok() == Some(true)).map(|f| f.data()["sequence"].as_u64()) else {
        return Outcome::Error(format!("inconclusive: the attach was answered {}", rtoken(&ar)));
    };
    let rid = c.rid();
    let sid = c.session.clone();
    let s = crate::contract::compose::SessionRef { session_id: &sid, generation: 1 };
    let e = crate::contract::compose::Envelope { version: "2.0", request_id: &rid };
    let w = match crate::contract::compose::wake(&e, &s, &format!("{rid}-wake"), "pi-conform: say hello") {
        Ok(w) => crate::contract::compose::to_wire(&w),
        Err(e) => return Outcome::Error(format!("inconclusive: the runner cannot build a wake: {e}")),
    };
    attached.send(&w);
    let mut seqs: Vec<Option<u64>> = Vec::new();
    loop {
        let r = attached.recv_within(c.target.step * 3);
        match r.frame() {
            Some(f) if f.kind() == Some("event") && f["sessionId"] == sid.as_str() => seqs.push(f["sequence"].as_u64()),
            Some(f) if f.request_id() == Some(rid.as_str()) => break,
            Some(_) => continue,
            None => break,
        }
    }
    if seqs.len() < 2 {
        return Outcome::Error(format!(
            "inconclusive: the attached connection received {} event(s) of the wake; two are needed",
            seqs.len()
        ));
    }
    let mut p = Vec::new();
    let mut last = at;
    for (i, q) in seqs.iter().enumerate() {
        let Some(q) = *q else { continue }; // the contract's judge refuses an event without one
        if let Some(l) = last.filter(|l| q <= *l) {
            p.push(format!(
                "event {} of the wake has sequence {q}, not above {} ({l}): a session's sequence increases with every \
                 event",
                i + 1,
                if i == 0 { "the sequence the attach answered" } else { "the event before it" }
            ));
        }
        last = Some(q);
    }
    Outcome::with("increasing", p)
}

/// How far past `maxEventBytes` the read that provokes an oversize event goes.
const EVENT_OVERSHOOT: usize = 64 * 1024;

/// An event received on an attached connection: its sequence, name and line length.
struct EventLine {
    sequence: Option<u64>,
    name: String,
    bytes: usize,
    data: Value,
}

/// PC-1.1 and PC-2.3 (MUST [daemon]): an event over `maxEventBytes` is replaced, at the same
/// sequence, by `eventDropped` with data `{originalEvent, error}`. A connection is attached to
/// a host-adapter session whose descriptor lets a result reach 4 MiB, and a wake makes one
/// `fs_read` of a file `maxEventBytes` + 64 KiB long: a daemon whose events carry a call's
/// result (Pi Daemon 0.3.3's `toolEnd`, the reference daemon's `toolCallEnd`) has an event
/// over the bound to replace. Every event the connection gets until the wake's answer (and a
/// short while after) is judged: none may be over `maxEventBytes`; an `eventDropped` must
/// decode as the contract's `EventDroppedData` and name a valid event; and where the daemon
/// numbers the other events one by one, the `eventDropped` must sit in the sequence exactly
/// where the dropped event would have (no gap before or after it), and no gap may hide an
/// event dropped without a replacement. No event over the bound, no `eventDropped` and no gap
/// means the daemon's events do not carry results: nothing was provoked (skipped).
fn events_over_max_dropped(c: &mut DCtx<'_>) -> Outcome {
    let mut conn = tryo!(c.connect());
    let h = tryo!(c.handshake(None));
    let hs = c.call(&mut conn, h);
    let Some(limit) = data(&hs)["limits"]["maxEventBytes"].as_u64() else {
        return Outcome::Error(format!(
            "inconclusive: the handshake advertises no limits.maxEventBytes (answered {})",
            rtoken(&hs)
        ));
    };
    let max_result = 4 * 1024 * 1024;
    let size = limit as usize + EVENT_OVERSHOOT;
    if size + EVENT_OVERSHOOT > max_result {
        return Outcome::Skip(format!(
            "the daemon advertises maxEventBytes {limit}: an adapter result (at most 4 MiB) cannot outgrow it"
        ));
    }
    let limits = AdapterLimits { max_response_bytes: max_result as i64, ..super::DEFAULT_LIMITS }.to_json();
    let d = tryo!(c.descriptor(1, Some(limits)));
    let link = tryo!(open_with(c, &d, 1));
    let mut attached = tryo!(attached_conn(c, 1));
    let name = format!("pc-ev-{}.txt", &c.session[c.session.len().saturating_sub(8)..]);
    let file = c.target.cwd.join(&name);
    if let Err(e) = std::fs::write(&file, "e".repeat(size)) {
        return Outcome::Error(format!("cannot write the {size}-byte file the call reads: {e}"));
    }
    let w = c.wake_calls(1, &[("fs_read", json!({"path": name, "maxBytes": size}))]);
    let events = w.map(|w| events_of_wake(c, &mut attached, &w));
    let _ = std::fs::remove_file(&file);
    let mut events = tryo!(events);
    if link_frames(c, link, "invoke").is_empty() {
        release(c, 1);
        return Outcome::Error("inconclusive: the wake's fs_read never reached the adapter".into());
    }
    // A second wake asks the model for a long answer (`SAY <n>`, which `fake-model` speaks):
    // a daemon whose message events carry the model's text has an event over the bound too.
    let rid = c.rid();
    let sid = c.session.clone();
    let s = crate::contract::compose::SessionRef { session_id: &sid, generation: 1 };
    let e = crate::contract::compose::Envelope { version: "2.0", request_id: &rid };
    match crate::contract::compose::wake(&e, &s, &format!("{rid}-wake"), &format!("SAY {size}")) {
        Ok(w) => events.extend(events_of_wake(c, &mut attached, &crate::contract::compose::to_wire(&w))),
        Err(e) => return Outcome::Error(format!("inconclusive: the runner cannot build a wake: {e}")),
    }
    release(c, 1);
    judge_event_cap(&events, limit as usize)
}

/// Send wake `w` on the attached connection and collect the events it gets until the answer,
/// and for half a step after it.
fn events_of_wake(c: &DCtx<'_>, attached: &mut Conn, w: &Value) -> Vec<EventLine> {
    let rid = rid_of(w);
    attached.send(w);
    let mut events = Vec::new();
    let mut answered = false;
    loop {
        let r = attached.recv_within(if answered { c.target.step / 2 } else { c.target.step * 3 });
        let Recv::Frame(f, raw) = &r else { break };
        if f.kind() == Some("event") {
            events.push(EventLine {
                sequence: f["sequence"].as_u64(),
                name: f["event"].as_str().unwrap_or("").to_string(),
                bytes: raw.len(),
                data: f["data"].clone(),
            });
        } else if f.request_id() == Some(rid.as_str()) {
            answered = true;
        }
    }
    events
}

/// The judgement of [`events_over_max_dropped`] on the events received.
fn judge_event_cap(events: &[EventLine], limit: usize) -> Outcome {
    let mut p = Vec::new();
    for e in events.iter().filter(|e| e.bytes > limit + 1) {
        p.push(format!(
            "the event `{}` (sequence {}) was sent as a line of {} bytes on a connection whose maxEventBytes is \
             {limit}: it must be replaced by eventDropped",
            e.name,
            e.sequence.map_or("?".into(), |s| s.to_string()),
            e.bytes
        ));
    }
    let dropped: Vec<usize> = (0..events.len()).filter(|&i| events[i].name == "eventDropped").collect();
    for &i in &dropped {
        match serde_json::from_value::<protocol_v2::EventDroppedData>(events[i].data.clone()) {
            Err(e) => {
                p.push(format!("an eventDropped's data is not {{originalEvent, error}} as the contract has it: {e}"))
            }
            Ok(d) if protocol_v2::EventEvent::try_from(d.original_event.as_str()).is_err() => {
                p.push(format!("an eventDropped names `{}` as its originalEvent, not an event name", d.original_event))
            }
            Ok(_) => {}
        }
    }
    // Where the daemon numbers its events one by one, a dropped event leaves no gap.
    let seqs: Vec<u64> = events.iter().filter_map(|e| e.sequence).collect();
    let steps: Vec<u64> = seqs.windows(2).map(|w| w[1].wrapping_sub(w[0])).collect();
    let gaps: Vec<usize> = (0..steps.len()).filter(|&k| steps[k] != 1).collect();
    // Judged where at least three in four steps are one: a daemon that numbers otherwise (by
    // twos, say) is not judged on gaps.
    if steps.len() >= 3 && gaps.len() * 4 <= steps.len() {
        for &k in &gaps {
            let (a, b) = (&events[k], &events[k + 1]);
            let at_drop = a.name == "eventDropped" || b.name == "eventDropped";
            p.push(if at_drop {
                format!(
                    "an eventDropped is not at the sequence of the event it replaces: `{}` {} is followed by `{}` {} \
                     (every other event is numbered one after the one before)",
                    a.name,
                    seqs[k],
                    b.name,
                    seqs[k + 1]
                )
            } else {
                format!(
                    "sequence {} is missing between `{}` and `{}`: an event was dropped without an eventDropped at its \
                     sequence",
                    seqs[k] + 1,
                    a.name,
                    b.name
                )
            });
        }
    }
    if !p.is_empty() {
        return Outcome::with("not-replaced", p);
    }
    if dropped.is_empty() {
        return Outcome::Skip(format!(
            "no event of the wake reached maxEventBytes ({limit}) and none was dropped ({} events, the largest {} \
             bytes): this daemon's events do not carry the call's result, so no event over the bound can be provoked",
            events.len(),
            events.iter().map(|e| e.bytes).max().unwrap_or(0)
        ));
    }
    Outcome::token("dropped")
}

/// A new connection attached to `generation` of the case session (inconclusive unless the
/// attach is answered ok).
fn attached_conn(c: &mut DCtx<'_>, generation: u64) -> Result<Conn, Outcome> {
    let mut conn = c.connect()?;
    let a = c.attach(generation)?;
    let ar = c.call(&mut conn, a);
    if ar.frame().is_none_or(|f| f.ok() != Some(true)) {
        return Err(Outcome::Error(format!(
            "inconclusive: the attach to generation {generation} was answered {}",
            rtoken(&ar)
        )));
    }
    Ok(conn)
}

/// PC-2.3 MUST [daemon]: `sequence` is per session, monotonic, starting at 1 with `opened`
/// first. Sessions A and B are opened; A is attached (its answer's `sequence` is 1: only
/// `opened` so far) and woken (its events take 2, 3, …); then B is attached: its answer's
/// `sequence` is still 1, and B's first wake event is 2 — a counter shared by the sessions
/// would have moved on with A's events. The provoked state: A's wake produced events (else
/// inconclusive).
fn events_sequence_per_session(c: &mut DCtx<'_>) -> Outcome {
    with_sessions_a_b(c, sequence_per_session)
}
fn sequence_per_session(c: &mut DCtx<'_>, base: &str) -> Outcome {
    let (sa, sb) = (format!("{base}-a"), format!("{base}-b"));
    for s in [&sa, &sb] {
        c.session = s.clone();
        tryo!(open_plain(c));
    }
    let attach_seq = |c: &mut DCtx<'_>| -> Result<(Conn, Option<u64>), Outcome> {
        let mut conn = c.connect()?;
        let a = c.attach(1)?;
        let ar = c.call(&mut conn, a);
        if ar.frame().is_none_or(|f| f.ok() != Some(true)) {
            return Err(Outcome::Error(format!("inconclusive: the attach was answered {}", rtoken(&ar))));
        }
        Ok((conn, data(&ar)["sequence"].as_u64()))
    };
    let mut p = Vec::new();
    c.session = sa;
    let (mut ka, seq_a) = tryo!(attach_seq(c));
    if seq_a != Some(1) {
        p.push(format!("right after its open, session A's attach answered sequence {seq_a:?}, not 1 (opened is 1)"));
    }
    let events_a = tryo!(wake_and_gather(c, &mut ka, 1));
    if events_a.is_empty() {
        return Outcome::Error("inconclusive: session A's wake produced no event on its attached connection".into());
    }
    c.session = sb;
    let (mut kb, seq_b) = tryo!(attach_seq(c));
    if seq_b != Some(1) {
        p.push(format!(
            "after session A's wake ({} events), session B — opened, never woken — answered its attach with sequence \
             {seq_b:?}, not 1: the sequence is per session",
            events_a.len()
        ));
    }
    let events_b = tryo!(wake_and_gather(c, &mut kb, 1));
    if let Some(first) = events_b.first().and_then(|e| e["sequence"].as_u64()) {
        if first != 2 {
            p.push(format!("session B's first event after opened carries sequence {first}, not 2"));
        }
    }
    Outcome::with(if p.is_empty() { "per-session" } else { "shared" }, p)
}

/// Send a 2.0 wake of `generation` of the case session on `conn`, and gather the events of
/// that session generation that arrive on it until the wake is answered (or nothing comes for
/// three steps).
fn wake_and_gather(c: &mut DCtx<'_>, conn: &mut Conn, generation: u64) -> Result<Vec<Value>, Outcome> {
    let rid = c.rid();
    let sid = c.session.clone();
    let s = crate::contract::compose::SessionRef { session_id: &sid, generation };
    let e = crate::contract::compose::Envelope { version: "2.0", request_id: &rid };
    let w = crate::contract::compose::wake(&e, &s, &format!("{rid}-wake"), "pi-conform: say hello")
        .map(|w| crate::contract::compose::to_wire(&w))
        .map_err(|e| Outcome::Error(format!("inconclusive: the runner cannot build a wake: {e}")))?;
    conn.send(&w);
    let mut events = Vec::new();
    loop {
        let r = conn.recv_within(c.target.step * 3);
        match r.frame() {
            Some(f) if f.kind() == Some("event") && f["sessionId"] == sid.as_str() && f["generation"] == generation => {
                events.push(f.value().clone())
            }
            Some(f) if f.request_id() == Some(rid.as_str()) => break,
            Some(_) => continue,
            None => break,
        }
    }
    Ok(events)
}

/// Close generation `generation` of the case session without retaining it: a case that opened
/// a session only to look at it gives the slot back (a daemon keeps a bounded number of
/// resident sessions, 128 in Pi Daemon 0.3.3, and the suite opens many). Best effort: the
/// verdict never depends on it.
pub(super) fn release(c: &mut DCtx<'_>, generation: u64) {
    if let Ok(v) = c.close_retaining(generation, false) {
        let _ = one(c, v);
    }
}

/// PC-2.3 MUST [daemon]: replacing a generation makes older attachments inert. Connection A
/// attaches to generation 1, generation 2 replaces it, connection B attaches to generation 2,
/// and a wake of generation 2 runs: B receives its events (the confirmation), A none of them.
fn events_replaced_generation_inert(c: &mut DCtx<'_>) -> Outcome {
    tryo!(open_plain(c));
    let mut old = tryo!(attached_conn(c, 1));
    let v = tryo!(c.open(2, json!("none")));
    let r = tryo!(one(c, v));
    if rtoken(&r) != "ok" {
        return precondition_open(&r);
    }
    let mut new = tryo!(attached_conn(c, 2));
    let seen_new = tryo!(wake_and_gather(c, &mut new, 2)).len();
    let sid = c.session.clone();
    if seen_new == 0 {
        return Outcome::Error(
            "inconclusive: the connection attached to generation 2 received no event of its wake".into(),
        );
    }
    let mut leaked = Vec::new();
    loop {
        match old.recv_within(c.target.step) {
            Recv::Frame(f, _)
                if f.kind() == Some("event") && f["sessionId"] == sid.as_str() && f["generation"] == 2 =>
            {
                leaked.push(f["event"].as_str().unwrap_or("?").to_string())
            }
            Recv::Frame(..) | Recv::Garbage(_) => {}
            Recv::Closed | Recv::Timeout => break,
        }
    }
    drop((old, new));
    release(c, 2);
    if leaked.is_empty() {
        return Outcome::token("inert");
    }
    Outcome::with(
        "old-attachment-live",
        vec![format!(
            "a connection attached to generation 1 received {} event(s) of generation 2 after the replacement ({}); \
             replacing a generation makes older attachments inert",
            leaked.len(),
            leaked.join(", ")
        )],
    )
}

/// PC-2.3 MUST [daemon]: events carry the protocol version recorded by the session's
/// successful open. The session is opened with "2.1" (a 2.x minor the daemon must accept and
/// echo), attached and woken with "2.0": every event of it on the attached connection says
/// "2.1". Confirmed: the open was answered ok with "2.1", and at least one event arrived.
fn events_version_of_open(c: &mut DCtx<'_>) -> Outcome {
    let mut v = tryo!(c.open(1, json!("none")));
    v["protocolVersion"] = json!("2.1");
    let r = tryo!(one(c, v));
    if rtoken(&r) != "ok" {
        return precondition_open(&r);
    }
    if r.frame().is_some_and(|f| f["protocolVersion"] != "2.1") {
        return Outcome::Error(
            "inconclusive: the 2.1 open was not answered as 2.1 (daemon.envelope.echo-minor judges that)".into(),
        );
    }
    let mut attached = tryo!(attached_conn(c, 1));
    let versions: Vec<(String, Value)> = tryo!(wake_and_gather(c, &mut attached, 1))
        .iter()
        .map(|f| (f["event"].as_str().unwrap_or("?").to_string(), f["protocolVersion"].clone()))
        .collect();
    if versions.is_empty() {
        return Outcome::Error("inconclusive: the attached connection received no event of the wake".into());
    }
    drop(attached);
    release(c, 1);
    let wrong: Vec<String> = versions.iter().filter(|(_, v)| *v != "2.1").map(|(e, v)| format!("{e} ({v})")).collect();
    if wrong.is_empty() {
        return Outcome::token("open-version");
    }
    Outcome::with(
        "other-version",
        vec![format!(
            "{} of {} events of a session opened with \"2.1\" carry another protocolVersion: {}; events carry \
             the version of the session's successful open",
            wrong.len(),
            versions.len(),
            wrong.join(", ")
        )],
    )
}

/// With the session open and `build` ready to answer the next abort: make one tool call the
/// probe never answers (it times out on the wire, so the daemon sends an abort, answered with
/// the vector's frame), then a second call, and see whether it reaches the adapter.
pub(super) fn abort_then_call(
    c: &mut DCtx<'_>,
    valid: bool,
    generation: u64,
    tool: &str,
    args: &Value,
    build: super::probe::ScriptFn,
) -> Outcome {
    c.probe.set(BoundMode::Exact, InvokeMode::Ignore);
    c.probe.script(ScriptAt::Abort, build);
    let sent_before = invokes(c).len();
    let first = c.wake(generation, tool, args).and_then(|w| one(c, w));
    // The abort is written as the timeout fails the call: it may reach the probe just after
    // the daemon answered the wake.
    let t = Instant::now();
    let sent = loop {
        let out = c.probe.script.lock().ok().and_then(|s| s.outcome.clone());
        if out.is_some() || t.elapsed() > c.target.step * 2 {
            break out;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let _ = c.probe.take_script_outcome();
    c.probe.set(BoundMode::Exact, InvokeMode::Normal);
    let first = match first {
        Ok(r) => r,
        Err(o) => return o,
    };
    if invokes(c).len() == sent_before {
        return Outcome::Error(format!(
            "inconclusive: the wake ({}) made no tool call through the adapter, so no abort could follow",
            rtoken(&first)
        ));
    }
    match sent {
        Some(Ok(())) => {}
        Some(Err(why)) => return Outcome::Skip(why),
        None => {
            return Outcome::Skip(
                "the daemon sent no abort for the call that timed out on the wire, so the vector's aborted frame \
                 had nothing to answer (daemon.tools.timeout-sends-abort judges the abort)"
                    .into(),
            )
        }
    }
    // The daemon reads the acknowledgement before the next call is made.
    std::thread::sleep(c.target.step / 5);
    let before = invokes(c).len();
    if let Err(o) = c.wake(generation, tool, args).and_then(|w2| one(c, w2)) {
        return o;
    }
    let reached = invokes(c).len() != before;
    match (valid, reached) {
        (true, true) => Outcome::token("acknowledged"),
        (true, false) => Outcome::with(
            "acknowledged",
            vec!["the daemon failed the adapter connection after a valid aborted: a later tool call did not reach \
                  the adapter"
                .into()],
        ),
        (false, false) => Outcome::token("failed-closed"),
        (false, true) => Outcome::with(
            "failed-closed",
            vec!["the connection was not failed: a later tool call still reached the adapter".into()],
        ),
    }
}

// ---------------------------------------------------------------- observing a wake

/// One tool call as a daemon that reports calls one by one says it ended (the reference
/// daemon's `data.result.toolCalls[]`).
pub(super) struct CallReport {
    /// The tool (`fs_stat`).
    pub tool: String,
    /// Whether it succeeded.
    pub ok: bool,
    /// Its error code, when it failed.
    pub code: Option<String>,
}

/// The tool calls of a wake's answer in prompt order, where the daemon reports them one by one
/// (`data.result.toolCalls`); `None` for a daemon that reports them otherwise (Pi Daemon 0.3.3:
/// `toolEnd` events and the session's `hostToolAdapterQueue` counters).
pub(super) fn per_call(r: &Recv) -> Option<Vec<CallReport>> {
    let f = r.frame()?;
    let calls = f.data()["result"]["toolCalls"].as_array()?.clone();
    Some(
        calls
            .iter()
            .map(|t| CallReport {
                tool: t["tool"].as_str().unwrap_or_default().to_string(),
                ok: t["ok"] == true,
                code: t["error"]["code"].as_str().map(str::to_string),
            })
            .collect(),
    )
}

/// A counter of the session's adapter queue telemetry a wake's answer carries (Pi Daemon
/// 0.3.3's `hostToolAdapterQueue`: `completedRequests`, `rejectedRequests`, …).
fn queue_counter(r: &Recv, key: &str) -> Option<u64> {
    let f = r.frame()?;
    find_key(&f.data(), "hostToolAdapterQueue")?.get(key)?.as_u64()
}

/// The session's adapter queue telemetry a wake's answer carries, raw (`Null` without one).
fn queue_telemetry(r: &Recv) -> Value {
    r.frame().and_then(|f| find_key(&f.data(), "hostToolAdapterQueue").cloned()).unwrap_or(Value::Null)
}

/// Whether the daemon ended probe connection `link` (EOF), waiting up to `wait`.
fn ended_within(c: &DCtx<'_>, link: usize, wait: Duration) -> bool {
    let t = Instant::now();
    loop {
        if c.probe.seen().ended.iter().any(|(n, _)| *n == link) {
            return true;
        }
        if t.elapsed() >= wait {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The frames of `kind` the daemon sent on probe connection `link`, in order.
fn link_frames(c: &DCtx<'_>, link: usize, kind: &str) -> Vec<Value> {
    c.probe.seen().frames.into_iter().filter(|(n, f)| *n == link && f["kind"] == kind).map(|(_, f)| f).collect()
}

/// A wake sent on a connection attached to the case session.
pub(super) struct WakeSeen {
    /// The wake's answer (or why there is none).
    pub resp: Recv,
    /// Every event received before it.
    pub events: Vec<Value>,
    /// From sending the wake to its answer.
    pub took: Duration,
}

impl WakeSeen {
    /// How many tool calls had started before the first one ended (`toolCallStart` and
    /// `toolCallEnd` of the reference daemon, `toolStart` and `toolEnd` of Pi Daemon 0.3.3).
    fn started_before_first_end(&self) -> usize {
        let mut n = 0;
        for e in &self.events {
            match e["event"].as_str() {
                Some("toolCallStart" | "toolStart") => n += 1,
                Some("toolCallEnd" | "toolEnd") => break,
                _ => {}
            }
        }
        n
    }

    /// How each tool call ended, from its end event: `true` for a success.
    fn ends(&self) -> Vec<bool> {
        self.events
            .iter()
            .filter_map(|e| match e["event"].as_str() {
                Some("toolCallEnd") => Some(e["data"]["ok"] == true),
                Some("toolEnd") => Some(e["data"]["isError"] != true),
                _ => None,
            })
            .collect()
    }
}

/// Attach a new connection to the case session at `generation`, send a wake making `calls`
/// on it, and collect the events until its answer (each read waits up to `wait`).
fn wake_attached(
    c: &mut DCtx<'_>,
    generation: u64,
    calls: &[(&str, Value)],
    wait: Duration,
) -> Result<WakeSeen, Outcome> {
    let mut conn = c.connect()?;
    let attach = c.attach(generation)?;
    let a = c.call(&mut conn, attach);
    if rtoken(&a) != "ok" {
        return Err(Outcome::Error(format!(
            "inconclusive: the attach to the case session was answered {}",
            rtoken(&a)
        )));
    }
    let w = c.wake_calls(generation, calls)?;
    let rid = w["requestId"].as_str().unwrap_or_default().to_string();
    let sent = Instant::now();
    conn.send(&w);
    let mut events = Vec::new();
    let resp = loop {
        let r = conn.recv_within(wait);
        match r.frame() {
            Some(f) if f.kind() == Some("event") => events.push(f.value().clone()),
            Some(f) if f.request_id() == Some(rid.as_str()) => break r,
            Some(_) => continue,
            None => break r,
        }
    };
    Ok(WakeSeen { resp, events, took: sent.elapsed() })
}

// ---------------------------------------------------------------- SPEC §5.1, form by form

/// Protocol text: "Empty, absolute, backslash, control-character, non-canonical, and .. paths
/// fail before adapter dispatch." One wake makes one `fs_stat` call per path of the `form`,
/// then a control call with a canonical path of the session root that must reach the adapter
/// (else the wake proves nothing). Each call must have been made (one end event or `toolCalls`
/// entry per call, else inconclusive); exactly one invoke — the control's — reaches the
/// adapter. Where the daemon reports calls one by one, each refused call names
/// `invalid_tool_adapter_path`; another refusal is one this case did not provoke (inconclusive).
fn path_refused(c: &mut DCtx<'_>, form: &str, bad: impl FnOnce(&str, &str) -> Vec<String>) -> Outcome {
    let (_, link) = tryo!(open_bound(c, 1));
    let dir = format!("pc-prf-{}", &c.session[c.session.len().saturating_sub(8)..]);
    if let Err(e) = private_dir(&c.target.cwd.join(&dir)) {
        return Outcome::Error(format!("cannot create the directory the paths name: {e}"));
    }
    let root = c.target.cwd.to_string_lossy().into_owned();
    let bad = bad(&dir, &root);
    let mut calls: Vec<(&str, Value)> = bad.iter().map(|p| ("fs_stat", json!({"path": p}))).collect();
    calls.push(("fs_stat", json!({"path": dir})));
    let before = link_frames(c, link, "invoke").len();
    let seen = tryo!(wake_attached(c, 1, &calls, c.target.step * 3));
    let sent = link_frames(c, link, "invoke");
    let sent = &sent[before.min(sent.len())..];
    if !sent.iter().any(|f| f["payload"]["path"] == dir.as_str()) {
        return Outcome::Error(format!(
            "inconclusive: the control call with the canonical path `{dir}` never reached the adapter (the wake was \
             answered {}), so the daemon's tool calls cannot be observed with this wake template",
            rtoken(&seen.resp)
        ));
    }
    let reported = per_call(&seen.resp);
    let made = reported.as_ref().map_or_else(|| seen.ends().len(), Vec::len);
    if made < calls.len() {
        return Outcome::Error(format!(
            "inconclusive: the daemon reports {made} tool call(s) of the {} the wake asked for, so a {form} path that \
             never became a tool call proves nothing",
            calls.len()
        ));
    }
    let shown = |p: &str| -> String {
        let v = crate::conform::case::visible(p);
        if v.len() > 48 {
            format!("{}… ({} bytes)", &v[..v.char_indices().nth(40).map_or(v.len(), |(i, _)| i)], p.len())
        } else {
            v
        }
    };
    let dispatched: Vec<String> = sent
        .iter()
        .filter(|f| f["payload"]["path"] != dir.as_str())
        .map(|f| match f["payload"]["path"].as_str() {
            Some(p) if bad.iter().any(|b| b == p) => format!("`{}`", shown(p)),
            Some(p) => format!("`{}` (a rewritten form)", shown(p)),
            None => "an invoke without a path".to_string(),
        })
        .collect();
    if !dispatched.is_empty() {
        return Outcome::with(
            format!("dispatched:{}", dispatched.len()),
            vec![format!(
                "{form} tool paths reached the adapter: {}; they must fail before adapter dispatch",
                dispatched.join(", ")
            )],
        );
    }
    if let Some(calls) = reported {
        let path_code = Code::InvalidToolAdapterPath.as_str();
        for (p, call) in bad.iter().zip(&calls) {
            if call.ok {
                return Outcome::with(
                    "reported-ok",
                    vec![format!("the {form} path `{}` was reported a successful call", shown(p))],
                );
            }
            if call.code.as_deref() != Some(path_code) {
                return Outcome::Error(format!(
                    "inconclusive: the {form} path `{}` was refused with {}, not {path_code}: a refusal the case did \
                     not provoke",
                    shown(p),
                    call.code.as_deref().unwrap_or("no code")
                ));
            }
        }
    }
    Outcome::token("refused-before-dispatch")
}
fn path_empty(c: &mut DCtx<'_>) -> Outcome {
    path_refused(c, "empty", |_, _| vec![String::new()])
}
fn path_absolute(c: &mut DCtx<'_>) -> Outcome {
    // The absolute spelling of a directory inside the session root, and the root `/` itself.
    path_refused(c, "absolute", |dir, root| vec![format!("{root}/{dir}"), "/".into(), format!("/{dir}")])
}
fn path_backslash(c: &mut DCtx<'_>) -> Outcome {
    path_refused(c, "backslash", |dir, _| vec![format!("{dir}\\x"), format!("{dir}\\"), format!("C:\\{dir}")])
}
fn path_control(c: &mut DCtx<'_>) -> Outcome {
    path_refused(c, "C0 control character", |dir, _| {
        ["\u{0}", "\u{1}", "\t", "\n", "\r", "\u{1b}", "\u{1f}"].iter().map(|x| format!("{dir}/a{x}b")).collect()
    })
}
fn path_del(c: &mut DCtx<'_>) -> Outcome {
    path_refused(c, "DEL", |dir, _| vec![format!("{dir}/a\u{7f}b"), format!("{dir}\u{7f}")])
}
fn path_dot_dot(c: &mut DCtx<'_>) -> Outcome {
    // Every place a `..` or `.` segment can take, and a way out of the root and back into it
    // (`../<the root's own name>/<dir>`, which a check of the resolved path alone lets by).
    path_refused(c, "`..` or `.` segment", |dir, root| {
        let name = Path::new(root).file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        vec![
            "..".into(),
            "../x".into(),
            format!("../{name}/{dir}"),
            format!("{dir}/.."),
            format!("{dir}/."),
            format!("{dir}/x/.."),
        ]
    })
}

/// PC-4.2: an invoke carries a *granted* operation. A session whose descriptor grants only
/// `fs.stat` asks, in one wake, for `fs_stat` (control), `fs_list`, `fs_write` of a new file,
/// and `fs_stat` again: no invoke of another operation reaches the adapter, the file is not
/// created, and a call reported one by one for an ungranted tool is reported failed. The
/// provoked state: the bind granted exactly `["fs.stat"]`, and a control call reached the
/// adapter (else inconclusive).
fn tools_ungranted_operation(c: &mut DCtx<'_>) -> Outcome {
    use crate::contract::types::tool_adapter::ToolOperation;
    let d = tryo!(c.descriptor_ops(1, None, &[ToolOperation::FsStat]));
    let link = tryo!(open_with(c, &d, 1));
    let bound_ops = link_frames(c, link, "bind").first().map(|b| b["operations"].clone());
    if bound_ops != Some(json!(["fs.stat"])) {
        return Outcome::Error(format!(
            "inconclusive: the bind did not grant exactly [\"fs.stat\"] (it granted {})",
            bound_ops.map_or_else(|| "nothing: no bind seen".to_string(), |o| o.to_string())
        ));
    }
    let file = format!("pc-ungranted-{}", &c.session[c.session.len().saturating_sub(8)..]);
    let calls = [
        ("fs_stat", json!({"path": "."})),
        ("fs_list", json!({"path": "."})),
        ("fs_write", json!({"path": file, "content": "x"})),
        ("fs_stat", json!({"path": "."})),
    ];
    let seen = tryo!(wake_attached(c, 1, &calls, c.target.step * 3));
    let sent = link_frames(c, link, "invoke");
    if !sent.iter().any(|f| f["operation"] == "fs.stat") {
        return Outcome::Error(format!(
            "inconclusive: no control fs.stat call reached the adapter (the wake was answered {}), so the daemon's \
             tool calls cannot be observed with this wake template",
            rtoken(&seen.resp)
        ));
    }
    let mut p = Vec::new();
    let other: Vec<String> =
        sent.iter().filter(|f| f["operation"] != "fs.stat").map(|f| f["operation"].to_string()).collect();
    if !other.is_empty() {
        p.push(format!(
            "invokes of operations the descriptor does not grant reached the adapter: {}",
            other.join(", ")
        ));
    }
    if c.target.cwd.join(&file).symlink_metadata().is_ok() {
        p.push(format!("`{file}` was created by an fs_write the descriptor does not grant"));
        let _ = std::fs::remove_file(c.target.cwd.join(&file));
    }
    if let Some(calls) = per_call(&seen.resp) {
        for call in calls.iter().filter(|x| x.tool == "fs_list" || x.tool == "fs_write") {
            if call.ok {
                p.push(format!("the ungranted {} call was reported successful", call.tool));
            }
        }
    }
    release(c, 1);
    Outcome::with(if p.is_empty() { "not-dispatched" } else { "dispatched" }, p)
}

fn path_over_4096(c: &mut DCtx<'_>) -> Outcome {
    // 4097 ASCII bytes; 2049 × `é` (4098 bytes in 2049 UTF-16 units: a limit counted in units
    // lets it by); one segment under the directory, 4097 bytes in all.
    path_refused(c, "over 4096 bytes", |dir, _| {
        let under = format!("{dir}/");
        vec!["a".repeat(4097), "\u{e9}".repeat(2049), format!("{under}{}", "b".repeat(4097 - under.len()))]
    })
}

// ---------------------------------------------------------------- limits at the boundary

/// The `maxRequestBytes` of the invoke-size cases: the smallest the protocol allows.
const INVOKE_LIMIT: usize = 2048;

/// The size of the invoke line (LF included) that carried the search `query` on probe
/// connection `link` since frame `from` of that connection, if one did.
fn invoke_size_of(c: &DCtx<'_>, link: usize, query: &str) -> Option<usize> {
    let seen = c.probe.seen();
    seen.frames
        .iter()
        .zip(&seen.sizes)
        .find(|((n, f), _)| *n == link && f["kind"] == "invoke" && f["payload"]["query"] == query)
        .map(|(_, s)| *s)
}

/// SPEC §1.1 at the boundary: every daemon → adapter line, LF included, is at most
/// `maxRequestBytes`, and "an invoke line of exactly 2048 bytes (LF included) is valid and one
/// of 2049 bytes is not". With `maxRequestBytes` 2048 the case measures the invoke of an
/// `fs_search` twice (queries of two lengths, in two wakes: the framing around the query must
/// grow by exactly the query's growth, else the daemon's ids vary in length and the exact size
/// cannot be aimed at — inconclusive), then makes the call whose invoke is exactly
/// `INVOKE_LIMIT + past` bytes, followed by a control call that must reach the adapter.
/// `past` 0: the invoke must be sent, exactly that long. `past` 1: it must not be sent, and the
/// call must have been made and failed (its end event or `toolCalls` entry).
fn invoke_size(c: &mut DCtx<'_>, past: usize) -> Outcome {
    let limits = AdapterLimits { max_request_bytes: INVOKE_LIMIT as i64, ..super::DEFAULT_LIMITS }.to_json();
    let d = tryo!(c.descriptor(1, Some(limits)));
    let link = tryo!(open_with(c, &d, 1));
    let tag = format!("pc-size-{}-", &c.session[c.session.len().saturating_sub(6)..]);
    let query = |n: usize| format!("{tag}{}", "q".repeat(n));
    let mut measured = Vec::new();
    for n in [1, 101] {
        let q = query(n);
        let seen = tryo!(wake_attached(c, 1, &[("fs_search", json!({"path": ".", "query": q}))], c.target.step * 3));
        let Some(size) = invoke_size_of(c, link, &q) else {
            return Outcome::Error(format!(
                "inconclusive: the measuring call (a {}-byte query) never reached the adapter (the wake was answered \
                 {})",
                q.len(),
                rtoken(&seen.resp)
            ));
        };
        measured.push((q.len(), size));
    }
    let ((q1, s1), (q2, s2)) = (measured[0], measured[1]);
    if s2 - s1 != q2 - q1 || s1 > INVOKE_LIMIT {
        return Outcome::Error(format!(
            "inconclusive: invokes of {q1}- and {q2}-byte queries were {s1} and {s2} bytes: the framing around the \
             query changes between calls, so an invoke of exactly {} bytes cannot be aimed at",
            INVOKE_LIMIT + past
        ));
    }
    let want = INVOKE_LIMIT + past;
    let target = query(1 + want - s1);
    let control = query(2);
    let calls =
        [("fs_search", json!({"path": ".", "query": target})), ("fs_search", json!({"path": ".", "query": control}))];
    let seen = tryo!(wake_attached(c, 1, &calls, c.target.step * 3));
    if invoke_size_of(c, link, &control).is_none() {
        return Outcome::Error(format!(
            "inconclusive: the control call after the {want}-byte one never reached the adapter (the wake was \
             answered {}), so the daemon's tool calls cannot be observed with this wake template",
            rtoken(&seen.resp)
        ));
    }
    let reported = per_call(&seen.resp);
    match (invoke_size_of(c, link, &target), past) {
        (Some(n), _) if n > INVOKE_LIMIT => Outcome::with(
            "sent-over-limit",
            vec![format!(
                "the daemon sent an invoke line of {n} bytes (LF included) on a binding with maxRequestBytes \
                 {INVOKE_LIMIT}: every daemon → adapter line must fit (SPEC §1.1); the call must fail before any write"
            )],
        ),
        (Some(n), 0) if n == INVOKE_LIMIT => Outcome::token("sent-at-limit"),
        (Some(n), _) => Outcome::Error(format!(
            "inconclusive: the call aimed at a {want}-byte invoke was sent as {n} bytes: the framing changed between \
             the wakes"
        )),
        (None, 0) => Outcome::with(
            "not-sent-at-limit",
            vec![format!(
                "an invoke of exactly maxRequestBytes ({INVOKE_LIMIT} bytes, LF included) is valid (SPEC §1.1), but \
                 the daemon did not send the call whose invoke is that long (measured: the framing grows with the \
                 query byte for byte); the limit counts the LF once"
            )],
        ),
        (None, _) => {
            // Per call in prompt order (the reference), or end events (Pi Daemon 0.3.3, whose
            // read-only calls may end in any order: one of the two ends failed).
            let failed = match &reported {
                Some(calls) if calls.len() >= 2 => Some(!calls[0].ok),
                Some(_) => None,
                None => {
                    let ends = seen.ends();
                    (ends.len() >= 2).then(|| ends.iter().any(|ok| !ok))
                }
            };
            match failed {
                Some(true) => Outcome::token("refused-before-write"),
                Some(false) => Outcome::with(
                    "reported-ok",
                    vec![format!("the {want}-byte call never reached the adapter, yet it was reported a success")],
                ),
                None => Outcome::Error(
                    "inconclusive: the daemon reports no end for the call over the limit, so a call never made \
                     cannot be told from one refused"
                        .into(),
                ),
            }
        }
    }
}
fn invoke_at_max_request_bytes(c: &mut DCtx<'_>) -> Outcome {
    invoke_size(c, 0)
}
fn invoke_one_past_max_request_bytes(c: &mut DCtx<'_>) -> Outcome {
    invoke_size(c, 1)
}

/// `maxResponseBytes` of the result-size cases: its minimum, so the padded error message
/// (at most 1024 characters) can make a result line that long.
const RESULT_LIMIT: usize = 1024;

/// SPEC §1.2 at the boundary: adapter → daemon lines, LF included, are at most
/// `maxResponseBytes`, and the daemon kills the connection on an oversize adapter line. With
/// `maxResponseBytes` 1024 the probe answers one `fs_stat` call with a well-formed failed
/// result (`not_found`) whose message is padded so the line is exactly `RESULT_LIMIT + past`
/// bytes, LF included; a second call follows. `past` 0: the line is read, so the connection
/// stays usable (the second call reaches the adapter) and the call does not fail with
/// `adapter_protocol_invalid`. `past` 1: the line fails the connection (no later call reaches
/// the adapter; the call in flight fails `adapter_protocol_invalid` where calls are reported
/// one by one, and the socket is destroyed).
fn result_size(c: &mut DCtx<'_>, past: usize) -> Outcome {
    let limits = AdapterLimits { max_response_bytes: RESULT_LIMIT as i64, ..super::DEFAULT_LIMITS }.to_json();
    let d = tryo!(c.descriptor(1, Some(limits)));
    let link = tryo!(open_with(c, &d, 1));
    let want = RESULT_LIMIT + past;
    let not_found = AdapterCode::NotFound.as_str();
    c.probe.script(
        ScriptAt::Invoke,
        Box::new(move |b, inv| {
            let inv = inv.ok_or("no invoke to answer")?;
            let frame = |message: &str| {
                b.identity().frame(
                    "result",
                    [
                        ("requestId", inv["requestId"].clone()),
                        ("idempotencyKey", inv["idempotencyKey"].clone()),
                        ("operation", inv["operation"].clone()),
                        ("ok", json!(false)),
                        ("error", json!({"code": not_found, "message": message, "retryable": false})),
                    ],
                )
            };
            let bare = line_of(&frame("")).len() + 1;
            let pad = (want + 1).checked_sub(bare + 1).filter(|n| (1..=1024).contains(n));
            let pad = pad.ok_or_else(|| format!("a {want}-byte result cannot be padded from {bare} bytes"))?;
            let line = line_of(&frame(&"x".repeat(pad)));
            if line.len() + 1 != want {
                return Err(format!("the padded result is {} bytes, not {want}", line.len() + 1));
            }
            Ok(line)
        }),
    );
    let seen = call_then_call(c, 1, "fs_stat", &json!({"path": "."}));
    let sent = c.probe.take_script_outcome();
    let seen = tryo!(seen);
    if let Some(o) = seen.inconclusive() {
        return o;
    }
    if let Some(o) = unsent(sent, "the result", "the padded result was never sent") {
        return o;
    }
    if past > 0 {
        return seen.fail_closed_with(c, link, Code::AdapterProtocolInvalid.as_str());
    }
    let mut p = Vec::new();
    if !seen.reached {
        p.push(format!(
            "a result line of exactly maxResponseBytes ({RESULT_LIMIT} bytes, LF included) failed the connection: a \
             later tool call did not reach the adapter; the limit counts the LF once"
        ));
    }
    if let Some(call) = per_call(&seen.first).and_then(|calls| calls.into_iter().next()) {
        if call.code.as_deref() == Some(Code::AdapterProtocolInvalid.as_str()) {
            p.push(format!(
                "the call answered with a result line of exactly maxResponseBytes ({RESULT_LIMIT} bytes, LF \
                 included) failed adapter_protocol_invalid: that line is within the limit"
            ));
        }
    }
    Outcome::with("read-at-limit", p)
}
fn result_at_max_response_bytes(c: &mut DCtx<'_>) -> Outcome {
    result_size(c, 0)
}
fn result_one_past_max_response_bytes(c: &mut DCtx<'_>) -> Outcome {
    result_size(c, 1)
}

/// SPEC §4.4 at the boundary: with maxConcurrentRequests 1 and maxQueuedRequests 2, four
/// read-only calls admitted together fill the queue exactly and one past: three are admitted
/// and every one of them runs — the probe answers each a quarter step after it arrives, so the
/// third is sent only after the first two were answered, and completes — and the fourth is
/// refused `adapter_queue_capacity` without reaching the adapter. The provoked state (all four
/// started before the first ended) is confirmed from the turn's events, else inconclusive.
fn tools_queue_filled_exactly(c: &mut DCtx<'_>) -> Outcome {
    let out = queue_filled_exactly(c);
    c.probe.set(BoundMode::Exact, InvokeMode::Normal);
    out
}
fn queue_filled_exactly(c: &mut DCtx<'_>) -> Outcome {
    const CODE: &str = DaemonCode::AdapterQueueCapacity.as_str();
    const ADMITTED: usize = 3; // maxConcurrentRequests + maxQueuedRequests
    let hold_ms = (c.target.step.as_millis() as u64 / 4).max(50);
    let timeout_ms = (hold_ms * 12).clamp(1000, 120_000);
    let limits = AdapterLimits {
        max_concurrent_requests: std::num::NonZeroU64::MIN,
        max_queued_requests: 2,
        request_timeout_ms: timeout_ms as i64,
        ..super::DEFAULT_LIMITS
    }
    .to_json();
    let d = tryo!(c.descriptor(1, Some(limits)));
    let link = tryo!(open_with(c, &d, 1));
    c.probe.set(BoundMode::Exact, InvokeMode::Delay(hold_ms));
    let calls = [
        ("fs_stat", json!({"path": "."})),
        ("fs_list", json!({"path": "."})),
        ("fs_search", json!({"path": ".", "query": "pi-conform"})),
        ("fs_stat", json!({"path": "."})),
    ];
    let seen = tryo!(wake_attached(c, 1, &calls, Duration::from_millis(timeout_ms) * 2));
    c.probe.set(BoundMode::Exact, InvokeMode::Normal);
    let invoked = link_frames(c, link, "invoke").len();
    let started = seen.started_before_first_end();
    if started < calls.len() {
        return Outcome::Error(format!(
            "inconclusive: the turn's events show {started} tool call(s) started before the first ended, so the {} \
             calls were not admitted together (a daemon that runs tool calls one at a time cannot fill its queue)",
            calls.len()
        ));
    }
    // How the calls ended: one by one (the reference daemon), or the session's counters (Pi
    // Daemon 0.3.3), or at least the end events.
    let (ok, refused, other) = match per_call(&seen.resp) {
        Some(r) => {
            let ok = r.iter().filter(|x| x.ok).count();
            let refused = r.iter().filter(|x| x.code.as_deref() == Some(CODE)).count();
            (ok, refused, r.len() - ok - refused)
        }
        None => {
            let t = queue_telemetry(&seen.resp);
            match (t["completedRequests"].as_u64(), t["rejectedRequests"].as_u64()) {
                (Some(ok), Some(rej)) if rej == 0 || t["lastRejectionReason"] == CODE => {
                    let ends = seen.ends().len();
                    (ok as usize, rej as usize, ends.saturating_sub((ok + rej) as usize))
                }
                _ => {
                    let ends = seen.ends();
                    let ok = ends.iter().filter(|x| **x).count();
                    // A failure without a code is taken for the refusal only with the invokes
                    // confirming it (no invoke for it).
                    let failed = ends.len() - ok;
                    let refused = if invoked + failed == calls.len() { failed } else { 0 };
                    (ok, refused, failed - refused)
                }
            }
        }
    };
    let summary = format!(
        "{invoked} invoke(s) reached the adapter; {ok} call(s) succeeded, {refused} were refused {CODE}, {other} \
         failed otherwise (the wake was answered {})",
        rtoken(&seen.resp)
    );
    if invoked > ADMITTED {
        return Outcome::with(
            "over-capacity",
            vec![format!(
                "{summary}: with maxConcurrentRequests 1 + maxQueuedRequests 2 at most 3 calls are admitted; the \
                 fourth must be refused {CODE} before any write"
            )],
        );
    }
    if invoked < ADMITTED && refused > calls.len() - ADMITTED {
        return Outcome::with(
            "refused-at-limit",
            vec![format!(
                "{summary}: a queue of maxConcurrentRequests 1 + maxQueuedRequests 2 admits exactly 3 calls; it was \
                 refused before it was full"
            )],
        );
    }
    if invoked == ADMITTED && ok == ADMITTED && refused == calls.len() - ADMITTED {
        return Outcome::token("filled-exactly");
    }
    if invoked == ADMITTED && refused == calls.len() - ADMITTED {
        return Outcome::with(
            "admitted-not-run",
            vec![format!("{summary}: every admitted call must run to its result, the last admitted one included")],
        );
    }
    Outcome::Error(format!("inconclusive: {summary}"))
}

/// SPEC §4.4 at the boundary: a result answered just inside `requestTimeoutMs` (at three
/// quarters of it, measured by the probe from the invoke) is accepted: the call succeeds and no
/// abort is sent for it.
fn tools_result_inside_timeout(c: &mut DCtx<'_>) -> Outcome {
    let out = result_inside_timeout(c);
    c.probe.set(BoundMode::Exact, InvokeMode::Normal);
    out
}
fn result_inside_timeout(c: &mut DCtx<'_>) -> Outcome {
    let timeout_ms = (c.target.step.as_millis() as u64).clamp(1000, 120_000);
    let hold_ms = timeout_ms * 3 / 4;
    let d = tryo!(c.descriptor(1, Some(limits_with_timeout(timeout_ms))));
    let link = tryo!(open_with(c, &d, 1));
    c.probe.set(BoundMode::Exact, InvokeMode::Delay(hold_ms));
    let calls = [("fs_stat", json!({"path": "."}))];
    let seen = tryo!(wake_attached(c, 1, &calls, Duration::from_millis(timeout_ms) * 2 + c.target.step));
    c.probe.set(BoundMode::Exact, InvokeMode::Normal);
    let sent = link_frames(c, link, "invoke");
    let [invoke] = sent.as_slice() else {
        return Outcome::Error(format!(
            "inconclusive: {} invoke(s) reached the adapter for one tool call (the wake was answered {})",
            sent.len(),
            rtoken(&seen.resp)
        ));
    };
    // An abort is written as a timeout fails the call: give it a moment to arrive.
    std::thread::sleep(c.target.step / 5);
    let aborted = link_frames(c, link, "abort").iter().any(|a| a["targetRequestId"] == invoke["requestId"]);
    let mut p = Vec::new();
    if aborted {
        p.push(format!(
            "the daemon aborted a call whose result the adapter sent {hold_ms} ms after the invoke, inside its \
             requestTimeoutMs ({timeout_ms} ms)"
        ));
    }
    let ok = match per_call(&seen.resp) {
        Some(r) => r.first().map(|x| (x.ok, x.code.clone())),
        None => match queue_counter(&seen.resp, "completedRequests") {
            Some(n) => Some((n == 1, None)),
            None => seen.ends().first().map(|ok| (*ok, None)),
        },
    };
    match ok {
        Some((true, _)) => {}
        Some((false, code)) => p.push(format!(
            "the call failed ({}) although its result arrived {hold_ms} ms after the invoke, inside requestTimeoutMs \
             ({timeout_ms} ms)",
            code.as_deref().unwrap_or("no code")
        )),
        None => {
            return Outcome::Error(format!(
                "inconclusive: the daemon reports the call's outcome in no form the case reads (answered {})",
                rtoken(&seen.resp)
            ))
        }
    }
    Outcome::with(if p.is_empty() { "accepted-inside-timeout" } else { "timed-out-early" }, p)
}

/// A v2 handshake of exactly `n` bytes (LF excluded), padded with an unknown envelope field
/// (forward tolerance, SPEC §2.1).
fn padded_handshake(c: &mut DCtx<'_>, rid: &str, n: usize) -> Result<Vec<u8>, Outcome> {
    let mut v = c.handshake(Some(rid))?;
    v["pad"] = json!("");
    let base = line_of(&v).len();
    if n < base {
        return Err(Outcome::Error(format!("inconclusive: maxLineBytes {n} is shorter than a handshake")));
    }
    v["pad"] = json!("x".repeat(n - base));
    let line = line_of(&v);
    debug_assert_eq!(line.len(), n);
    Ok(line)
}
/// SPEC §1.1 at the boundary: a client line of exactly `maxLineBytes` bytes (LF excluded, the
/// value the handshake advertises) is read and answered; on the same connection a line of
/// `maxLineBytes` + 1 bytes is `line_too_large`, then the connection closes — and the refusal
/// comes without waiting for the LF (a partial line already over the limit fails at once).
fn env_line_at_max_bytes(c: &mut DCtx<'_>) -> Outcome {
    let hs = tryo!(c.handshake(None));
    let r = tryo!(one(c, hs));
    let Some(max) = data(&r)["limits"]["maxLineBytes"].as_u64() else {
        return Outcome::Error(format!(
            "inconclusive: the handshake advertises no limits.maxLineBytes (answered {})",
            rtoken(&r)
        ));
    };
    if max > 64 << 20 {
        return Outcome::Error(format!("inconclusive: maxLineBytes {max} is more than the runner sends"));
    }
    let max = max as usize;
    let mut conn = tryo!(c.connect());
    let rid = c.rid();
    let mut line = tryo!(padded_handshake(c, &rid, max));
    line.push(b'\n');
    conn.send_raw(&line);
    let first = conn.recv_for(&rid);
    let at = rtoken(&first);
    if at != "ok" {
        return Outcome::with(
            format!("{at}+not-tried"),
            vec![format!("a line of exactly maxLineBytes ({max}) bytes, LF excluded, was answered {at}")],
        );
    }
    let rid = c.rid();
    let over = tryo!(padded_handshake(c, &rid, max + 1));
    conn.send_raw(&over);
    let mut p = Vec::new();
    let mut r = conn.recv_within(c.target.step);
    if r == Recv::Timeout {
        p.push(format!(
            "a partial line of maxLineBytes + 1 ({}) bytes got no answer until its LF: a line already over the limit \
             fails at once",
            max + 1
        ));
        conn.send_raw(b"\n");
        r = conn.recv_within(c.target.step * 2);
    }
    let refusal = rtoken(&r);
    let close = if refusal == "ok" {
        p.push(format!("a line of maxLineBytes + 1 ({}) bytes was read and answered", max + 1));
        "open".to_string()
    } else {
        match conn.recv_within(c.target.step) {
            Recv::Closed => "closed".into(),
            other => format!("then-{}", other.describe()),
        }
    };
    Outcome::with(format!("ok+{refusal}+{close}"), p)
}

/// SPEC §2.4: the host snapshot **MUST NOT** contain endpoints, handles, prompts or error text.
/// With a host-adapter session open and resident, a wake with a unique prompt run on it, and a
/// failed open's error text in hand, neither the handshake's `host` nor the host `status`
/// holds the endpoint path, the probe's private directory, the prompt or that error text (the
/// engine's secret scan covers the handles).
fn hs_snapshot_content_free(c: &mut DCtx<'_>) -> Outcome {
    let (d, _) = tryo!(open_bound(c, 1));
    let endpoint = d["endpoint"]["path"].as_str().unwrap_or_default().to_string();
    let probe_dir = std::path::Path::new(&endpoint)
        .parent()
        .and_then(|p| p.file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut r = [0u8; 8];
    let _ = getrandom::fill(&mut r);
    let marker = format!("pc-prompt-{}", hex::encode(r));
    let mut w = tryo!(c.wake(1, "fs_stat", &json!({"path": "."})));
    let prompt = format!("{marker}\n{}", w["payload"]["prompt"].as_str().unwrap_or_default());
    w["payload"]["prompt"] = json!(prompt);
    let wr = tryo!(one(c, w));
    if rtoken(&wr) != "ok" {
        return Outcome::Error(format!("inconclusive: the wake with the prompt was answered {}", rtoken(&wr)));
    }
    // An error text: a failed open (the adapter closes before bound) of another session.
    let main = c.session.clone();
    c.session = format!("{main}-failed");
    c.probe.set(BoundMode::Close, InvokeMode::Normal);
    let failed = c.descriptor(1, None).and_then(|d| c.open(1, super::DCtx::host_adapter(&d))).and_then(|v| one(c, v));
    c.probe.set(BoundMode::Exact, InvokeMode::Normal);
    c.session = main;
    let failed = tryo!(failed);
    let mut texts: Vec<(String, String)> = vec![
        ("the adapter endpoint path".into(), endpoint.clone()),
        ("the adapter endpoint's private directory".into(), probe_dir),
        ("the wake's prompt".into(), marker),
    ];
    if let Some(f) = failed.frame().filter(|f| f.ok() == Some(false)) {
        let cause = f.error_details().and_then(|d| d.get("cause")).cloned().unwrap_or(Value::Null);
        for m in [f.error_message(), cause["message"].as_str()].into_iter().flatten() {
            if m.chars().count() >= 16 {
                texts.push(("a failed open's error text".into(), m.to_string()));
            }
        }
    }
    let hs = tryo!(c.handshake(None));
    let h = tryo!(one(c, hs));
    let Some(host) = h.frame().map(|f| f.data()["host"].clone()).filter(Value::is_object) else {
        return Outcome::Error(format!(
            "inconclusive: the handshake carries no host snapshot (answered {})",
            rtoken(&h)
        ));
    };
    let rid = c.rid();
    let st = one(c, json!({"protocolVersion": "2.0", "requestId": rid, "operation": "status", "payload": {}}));
    let status = tryo!(st).frame().map(|f| f.data()).unwrap_or(Value::Null);
    let mut p = Vec::new();
    for (what, snapshot) in
        [("the handshake's host snapshot", host.to_string()), ("the host status", status.to_string())]
    {
        for (name, text) in &texts {
            // Compared as JSON text, as it is written on the wire.
            let needle = json!(text).to_string();
            if !text.is_empty() && snapshot.contains(needle.trim_matches('"')) {
                p.push(format!("{what} contains {name}"));
            }
        }
    }
    Outcome::with("content-free", p)
}

// ---------------------------------------------------------------- restart

fn restart_flow(c: &mut DCtx<'_>) -> Result<Value, Outcome> {
    let (d, _) = open_bound(c, 1)?;
    c.restart()?;
    Ok(d)
}
fn restart_quarantine_listed(c: &mut DCtx<'_>) -> Outcome {
    if c.target.restart_cmd.is_none() {
        return Outcome::Skip("no --restart-cmd given".into());
    }
    let _ = tryo!(restart_flow(c));
    let v = tryo!(c.handshake(None));
    let r = tryo!(one(c, v));
    let d = data(&r);
    let q = d["host"]["recovery"]["quarantinedSessions"].clone();
    let listed = q.as_array().is_some_and(|a| {
        a.iter().any(|x| {
            x["sessionId"] == c.session.as_str()
                && x["generation"] == 1
                && x["code"] == DaemonCode::ToolAdapterReprovisionRequired.as_str()
        })
    });
    // The snapshot with a quarantined entry in it, judged by the contract (each entry's
    // `state` and `retryable` included).
    let mut p = Vec::new();
    if let Err(e) = crate::contract::validate_handshake_data(&d) {
        p.push(format!("the handshake data after the restart breaks the schema: {} at {}", e.message, e.field()));
    }
    Outcome::with(if listed { "quarantined" } else { "not-listed" }, p)
}
fn restart_no_tools_refused(c: &mut DCtx<'_>) -> Outcome {
    if c.target.restart_cmd.is_none() {
        return Outcome::Skip("no --restart-cmd given".into());
    }
    let _ = tryo!(restart_flow(c));
    let v = tryo!(c.open(1, json!("none")));
    let r = tryo!(one(c, v));
    retryable_as_contract(
        refusal(&r, DaemonCode::ToolAdapterReprovisionRequired.as_str(), None),
        &r,
        DaemonCode::ToolAdapterReprovisionRequired,
    )
}
fn restart_old_host_refused(c: &mut DCtx<'_>) -> Outcome {
    if c.target.restart_cmd.is_none() {
        return Outcome::Skip("no --restart-cmd given".into());
    }
    let d = tryo!(restart_flow(c));
    let v = tryo!(c.open(1, super::DCtx::host_adapter(&d)));
    refusal_of(one(c, v), Code::ToolAdapterBindingMismatch.as_str(), Some("hostInstanceId"))
}
fn restart_reprovision(c: &mut DCtx<'_>) -> Outcome {
    if c.target.restart_cmd.is_none() {
        return Outcome::Skip("no --restart-cmd given".into());
    }
    let _ = tryo!(restart_flow(c));
    let d = tryo!(c.descriptor(1, None));
    let v = tryo!(c.open(1, super::DCtx::host_adapter(&d)));
    let r = tryo!(one(c, v));
    let v = tryo!(c.handshake(None));
    let h = tryo!(one(c, v));
    let still = data(&h)["host"]["recovery"]["quarantinedSessions"]
        .as_array()
        .is_some_and(|a| a.iter().any(|x| x["sessionId"] == c.session.as_str()));
    let p = if still { vec!["the quarantine was not cleared by a successful reprovision".into()] } else { vec![] };
    Outcome::with(rtoken(&r), p)
}

/// SPEC §6 with a close before the restart: only a retained generation is recovered. A
/// session with tools closed with `retainSession:false` (answered ok, so durable: SPEC §2.5,
/// deletes are persisted before the answer) is gone after a restart: not listed in
/// `quarantinedSessions`, and its `status` is `session_not_found`.
fn restart_closed_session_gone(c: &mut DCtx<'_>) -> Outcome {
    if c.target.restart_cmd.is_none() {
        return Outcome::Skip("no --restart-cmd given".into());
    }
    let _ = tryo!(open_bound(c, 1));
    let v = tryo!(c.close_retaining(1, false));
    let r = tryo!(one(c, v));
    if rtoken(&r) != "ok" {
        return Outcome::Error(format!("inconclusive: the close with retainSession:false was answered {}", rtoken(&r)));
    }
    tryo!(c.restart());
    let session = c.session.clone();
    let mut p = Vec::new();
    if tryo!(quarantine_listed(c, &session)) {
        p.push(
            "a session closed with retainSession:false (answered ok) is listed in quarantinedSessions after a \
             restart: the close was not persisted"
                .to_string(),
        );
    }
    let s = tryo!(session_status(c));
    let code = s.frame().and_then(|f| f.error_code().map(str::to_string));
    if code.as_deref() != Some(DaemonCode::SessionNotFound.as_str()) {
        p.push(format!(
            "the status of a session closed with retainSession:false is answered {} after a restart, not \
             session_not_found",
            rtoken(&s)
        ));
    }
    Outcome::with(if p.is_empty() { "gone" } else { "restored" }, p)
}

/// The host snapshot's `ready` and `recovery.phase`, from a fresh handshake.
fn readiness(c: &mut DCtx<'_>) -> Result<(Option<bool>, String), Outcome> {
    let v = c.handshake(None)?;
    let r = one(c, v)?;
    let host = data(&r)["host"].clone();
    let phase = host["recovery"]["phase"].as_str().unwrap_or("(none)").to_string();
    Ok((host["ready"].as_bool(), phase))
}

/// The held call's `requestTimeoutMs`: longer than the case.
const HELD_TIMEOUT_MS: u64 = 120_000;

/// The most indeterminate records a recovery counter may count after
/// `daemon.restart.accepted-wake-indeterminate` on a host that was ready before it (it leaves
/// one): far less than a count that wrapped below zero.
const RECOVERY_COUNT_BOUND: u64 = 64;

/// How long a reprovisioned binding is watched for a replayed call.
const REPLAY_WATCH: Duration = Duration::from_millis(500);

/// SPEC §2.5 and §6 (MUST [daemon]): an `accepted` wake found after a restart is
/// `indeterminate`, never replayed, and keeps global readiness degraded until explicit
/// reconciliation; `ready` is true only with no indeterminate work (PC-2.4). A wake's tool call
/// is held at the probe (so the wake was accepted: marked before the model call), the daemon
/// is killed and started again (`--restart-cmd`). Then: the host is not ready (and its
/// recovery phase is not `ready`); once the generation is reprovisioned no call of the old
/// wake reaches the adapter, and the same wake (key and payload) is `request_indeterminate`;
/// the host is still not ready; and after a second restart it is still not ready (the
/// indeterminate record is counted again). The daemon stays degraded after the case, as the
/// protocol wants, so it runs last. A host already not ready before the case leaves `ready`
/// unjudged: the rest is judged, and with nothing wrong the case is skipped with that reason.
fn restart_accepted_wake_indeterminate(c: &mut DCtx<'_>) -> Outcome {
    if c.target.restart_cmd.is_none() {
        return Outcome::Skip("no --restart-cmd given".into());
    }
    let (ready_before, _) = tryo!(readiness(c));
    let (_, conn, w, in_flight) = tryo!(call_held_in_flight(c, HELD_TIMEOUT_MS));
    if !in_flight {
        return Outcome::Error(
            "inconclusive: the wake made no tool call through the adapter, so it was never seen accepted before the \
             restart"
                .into(),
        );
    }
    tryo!(c.restart());
    drop(conn);
    let judged = ready_before == Some(true);
    let mut p = Vec::new();
    let not_ready = |p: &mut Vec<String>, when: &str, (ready, phase): (Option<bool>, String)| {
        if judged && ready != Some(false) {
            p.push(format!(
                "{when} the handshake reports ready:{} with a wake accepted before the restart (indeterminate): ready \
                 is true only with no indeterminate work",
                ready.map_or("(missing)".into(), |b| b.to_string())
            ));
        }
        if phase == "ready" {
            p.push(format!(
                "{when} host.recovery.phase is ready with an indeterminate wake: it keeps readiness degraded until \
                 reconciliation"
            ));
        }
    };
    not_ready(&mut p, "after the restart", tryo!(readiness(c)));
    // The retained summary's limits, so that this open reprovisions the generation.
    let d = tryo!(c.descriptor(1, Some(limits_with_timeout(HELD_TIMEOUT_MS))));
    let link = tryo!(open_with(c, &d, 1));
    std::thread::sleep(REPLAY_WATCH);
    let replayed = invokes_on(c, link);
    if replayed > 0 {
        p.push(format!(
            "once reprovisioned, the binding got {replayed} invoke(s) nobody asked for: the wake accepted before the \
             restart was replayed"
        ));
    }
    let mut again = w.clone();
    again["requestId"] = json!(c.rid());
    let retry = tryo!(one(c, again));
    let ran = invokes_on(c, link) - replayed;
    match retry.frame().and_then(|f| f.error_code().map(str::to_string)) {
        Some(code) if code == DaemonCode::RequestIndeterminate.as_str() => {}
        Some(code) if code == DaemonCode::HostDraining.as_str() || code == DaemonCode::HostNotReady.as_str() => {
            return Outcome::Error(format!("inconclusive: the wake sent again was answered {code}"));
        }
        _ => p.push(format!(
            "the wake accepted before the restart, sent again under its key and payload, was answered {} after {ran} \
             invoke(s), not request_indeterminate: its outcome is unknown and it is never replayed",
            rtoken(&retry)
        )),
    }
    not_ready(&mut p, "after the reprovisioning open and the refused retry,", tryo!(readiness(c)));
    tryo!(c.restart());
    not_ready(&mut p, "after a second restart", tryo!(readiness(c)));
    if judged {
        // SPEC §2.4: the recovery counters count records. The host was ready before the case
        // (no indeterminate work), and the case left one indeterminate wake.
        let hs = tryo!(c.handshake(None));
        let r = tryo!(one(c, hs));
        let mut all = Vec::new();
        let host = data(&r);
        numbers_under(&host["host"]["recovery"], &mut all);
        for (k, n) in all.into_iter().filter(|(k, _)| k.to_ascii_lowercase().contains("indeterminate")) {
            if n > RECOVERY_COUNT_BOUND {
                p.push(format!(
                    "after a second restart host.recovery counts {n} under `{k}` when the case left one indeterminate \
                     wake on a host that was ready before it: the count wrapped (a record taken off it instead of \
                     counted)"
                ));
            }
        }
    }
    if !p.is_empty() {
        return Outcome::with("replayed-or-ready", p);
    }
    if !judged {
        return Outcome::Skip(format!(
            "the host reported ready:{} before the case (an earlier run's indeterminate wake, or another condition), \
             so readiness could not be judged; the wake sent again was request_indeterminate and nothing was replayed",
            ready_before.map_or("(missing)".into(), |b| b.to_string())
        ));
    }
    Outcome::token("indeterminate")
}

/// SPEC §6 (MUST [daemon]): a durable `queued` wake for a quarantined generation fails
/// terminally with `tool_adapter_reprovision_required`, and the failure stays cached under its
/// key (a client resubmits under a new key). A wake's tool call is held at the probe (its turn
/// runs); a second wake of the session (another key, `waitForTerminal:false`) is admitted
/// behind it, answered with its ticket (so it is journaled); the daemon is killed and started
/// again. Once the generation is reprovisioned, no call reaches the adapter (neither wake is
/// replayed), and the second wake sent again under its key and payload is
/// `tool_adapter_reprovision_required` (its `retryable` is not judged: Pi Daemon 0.3.3 writes
/// the code's own `true`, the reference daemon `false` for this key). A daemon that refuses a
/// second wake while a turn runs (`session_busy`, `session_queue_full`) never holds a queued
/// wake at a restart: skipped. It leaves the held wake indeterminate (the host degraded), so
/// it runs after `daemon.restart.accepted-wake-indeterminate`, which judges readiness.
fn restart_queued_wake_fails(c: &mut DCtx<'_>) -> Outcome {
    if c.target.restart_cmd.is_none() {
        return Outcome::Skip("no --restart-cmd given".into());
    }
    let (link, conn, _, in_flight) = tryo!(call_held_in_flight(c, HELD_TIMEOUT_MS));
    if !in_flight {
        return Outcome::Error(
            "inconclusive: the first wake made no tool call through the adapter, so no turn was running for a second \
             wake to queue behind"
                .into(),
        );
    }
    let mut queued = tryo!(c.wake(1, "fs_stat", &json!({"path": "."})));
    queued["payload"]["waitForTerminal"] = json!(false);
    let admitted = tryo!(one(c, queued.clone()));
    match admitted.frame().and_then(|f| f.error_code().map(str::to_string)) {
        None if data(&admitted).get("ticket").is_some() => {}
        Some(code) if code == DaemonCode::SessionBusy.as_str() || code == DaemonCode::SessionQueueFull.as_str() => {
            return Outcome::Skip(format!(
                "the daemon refuses a second wake while a turn runs ({code}), so no wake is ever queued at a restart"
            ));
        }
        _ => {
            return Outcome::Error(format!(
                "inconclusive: the second wake (waitForTerminal:false) sent while the first one's call was held was \
                 answered {}, not with a ticket",
                rtoken(&admitted)
            ))
        }
    }
    if invokes_on(c, link) > 1 {
        return Outcome::Error(
            "inconclusive: the second wake's call reached the adapter while the first was held, so it was not queued"
                .into(),
        );
    }
    tryo!(c.restart());
    drop(conn);
    c.probe.set(BoundMode::Exact, InvokeMode::Normal);
    // The retained summary's limits, so that this open reprovisions the generation.
    let d = tryo!(c.descriptor(1, Some(limits_with_timeout(HELD_TIMEOUT_MS))));
    let link = tryo!(open_with(c, &d, 1));
    std::thread::sleep(REPLAY_WATCH);
    let mut p = Vec::new();
    let replayed = invokes_on(c, link);
    if replayed > 0 {
        p.push(format!(
            "once reprovisioned, the binding got {replayed} invoke(s) nobody asked for: a wake queued or accepted \
             before the restart was replayed"
        ));
    }
    let mut again = queued.clone();
    again["requestId"] = json!(c.rid());
    if let Some(pl) = again["payload"].as_object_mut() {
        pl.remove("waitForTerminal");
    }
    let retry = tryo!(one(c, again));
    let ran = invokes_on(c, link) - replayed;
    match retry.frame().and_then(|f| f.error_code().map(str::to_string)) {
        Some(code) if code == DaemonCode::ToolAdapterReprovisionRequired.as_str() && ran == 0 => {}
        Some(code) if code == DaemonCode::HostDraining.as_str() || code == DaemonCode::HostNotReady.as_str() => {
            return Outcome::Error(format!("inconclusive: the queued wake sent again was answered {code}"));
        }
        _ => p.push(format!(
            "the wake still queued at the restart, sent again under its key and payload once the generation was \
             reprovisioned, was answered {} after {ran} invoke(s), not tool_adapter_reprovision_required: a queued \
             wake of a quarantined generation fails terminally with that code, cached under its key",
            rtoken(&retry)
        )),
    }
    Outcome::with("failed-reprovision-required", p)
}

// ---------------------------------------------------------------- drain

/// Run a drain case: it needs `--restart-cmd` (a drained host stays draining for the rest of
/// its process), and the daemon is restarted once the case is judged, so the cases after it
/// meet a host that admits work again. A failed restart makes the case inconclusive: the run
/// cannot go on on a draining host.
fn drain_case(c: &mut DCtx<'_>, body: fn(&mut DCtx<'_>) -> Outcome) -> Outcome {
    if c.target.restart_cmd.is_none() {
        return Outcome::Skip("no --restart-cmd given (a drain leaves the daemon draining until it restarts)".into());
    }
    let verdict = body(c);
    c.probe.set(BoundMode::Exact, InvokeMode::Normal);
    match c.restart() {
        Ok(()) => verdict,
        Err(o) => Outcome::Error(format!(
            "inconclusive: the daemon could not be restarted after the drain ({}); the case found: {}",
            outcome_text(&o),
            outcome_text(&verdict)
        )),
    }
}

// ---------------------------------------------------------------- shutdown

/// How long a stopped daemon may take to end its adapter connections (Pi Daemon 0.3.3 gives
/// its shutdown 30 s after SIGTERM).
const SHUTDOWN_WAIT: Duration = Duration::from_secs(35);

/// SPEC §3.4 (MUST [daemon]): host shutdown sends `revoke`. A host-adapter session is open and
/// bound; the `--stop-cmd` stops the daemon gracefully (and returns once it has exited): the
/// adapter connection must get a `revoke` before it ends. Needs `--stop-cmd` and
/// `--restart-cmd` (the daemon is restarted once the case is judged, as after a drain).
fn shutdown_revokes_bindings(c: &mut DCtx<'_>) -> Outcome {
    if c.target.stop_cmd.is_none() {
        return Outcome::Skip("no --stop-cmd given (a graceful stop of the daemon)".into());
    }
    drain_case(c, |c| {
        let (_, idx) = tryo!(open_bound(c, 1));
        tryo!(c.stop());
        if super::read_host(&c.target.socket, c.target.step).is_ok() {
            return Outcome::Error("inconclusive: the daemon still answers after the stop command returned".into());
        }
        // A revoke, or the connection's end, whichever comes first.
        let t = Instant::now();
        let ended = loop {
            if !link_frames(c, idx, "revoke").is_empty() {
                break false;
            }
            if ended_within(c, idx, Duration::ZERO) || t.elapsed() >= SHUTDOWN_WAIT {
                break ended_within(c, idx, Duration::ZERO);
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let revoked = !link_frames(c, idx, "revoke").is_empty();
        match (revoked, ended) {
            (true, _) => Outcome::token("revoked"),
            (false, true) => Outcome::with(
                "ended-without-revoke",
                vec![
                    "the daemon stopped and its adapter connection ended without a revoke: host shutdown must revoke \
                      every binding"
                        .into(),
                ],
            ),
            (false, false) => Outcome::with(
                "left-open",
                vec![format!(
                    "the daemon stopped, yet its adapter connection neither got a revoke nor ended within {} s",
                    SHUTDOWN_WAIT.as_secs()
                )],
            ),
        }
    })
}

/// Send a `drain` (with `timeoutMs` when given) on a fresh connection; its answer and how long
/// it took from the send.
fn drain(c: &mut DCtx<'_>, timeout_ms: Option<u64>) -> Result<(Recv, Duration), Outcome> {
    let rid = c.rid();
    let v = crate::contract::compose::drain(
        &crate::contract::compose::Envelope { version: "2.0", request_id: &rid },
        timeout_ms,
    )
    .map(|d| crate::contract::compose::to_wire(&d))
    .map_err(|e| Outcome::Error(format!("inconclusive: the runner cannot build a drain: {e}")))?;
    let mut conn = c.connect()?;
    let t = Instant::now();
    let r = c.call(&mut conn, v);
    Ok((r, t.elapsed()))
}

/// The response to `rid` on `k` (events naming it, and other frames, are skipped), waiting up
/// to `wait` for each frame.
fn response_to(k: &mut Conn, rid: &str, wait: Duration) -> Recv {
    loop {
        let r = k.recv_within(wait);
        match r.frame() {
            Some(f) if f.kind() == Some("event") => continue,
            Some(f) if f.request_id() == Some(rid) => return r,
            Some(_) => continue,
            None => return r,
        }
    }
}

/// A drain's answer decoded into the contract's `DrainData`; a refused or malformed answer is
/// the problem to report.
fn drain_data(r: &Recv) -> Result<protocol_v2::DrainData, String> {
    if rtoken(r) != "ok" {
        return Err(format!("the drain was answered {}", rtoken(r)));
    }
    serde_json::from_value(data(r)).map_err(|e| format!("the drain's data breaks the contract (DrainData): {e}"))
}

/// The host snapshot's `activeTurns` and `draining` (from a handshake).
fn host_turns(c: &mut DCtx<'_>) -> Result<(Option<u64>, Option<bool>), Outcome> {
    let v = c.handshake(None)?;
    let r = one(c, v)?;
    let h = data(&r)["host"].clone();
    Ok((h["activeTurns"].as_u64(), h["draining"].as_bool()))
}

/// SPEC PC-2.5 (DECISION on drain): a drain with no turn running answers at once
/// `{draining:true, timeoutMs:<the request's>, timedOut:false, abortedTurns:0}`; the host
/// snapshot then says `draining:true`, and a wake of an open session is refused
/// `host_draining`.
fn drain_refuses_wakes(c: &mut DCtx<'_>) -> Outcome {
    drain_case(c, |c| {
        tryo!(open_plain(c));
        let (active, _) = tryo!(host_turns(c));
        let (r, _) = tryo!(drain(c, Some(2_000)));
        let mut p = Vec::new();
        match drain_data(&r) {
            Err(e) => return Outcome::Error(format!("inconclusive: {e}; nothing was drained")),
            Ok(d) => {
                if !d.draining {
                    p.push("the drain answered draining:false".to_string());
                }
                if d.timeout_ms != 2_000 {
                    p.push(format!("the drain asked timeoutMs 2000 and answered timeoutMs {}", d.timeout_ms));
                }
                // Only when the host said no turn ran (another client's turn could).
                if active == Some(0) && (d.timed_out || d.aborted_turns != 0) {
                    p.push(format!(
                        "with no turn running the drain answered timedOut:{} abortedTurns:{} (expected false, 0)",
                        d.timed_out, d.aborted_turns
                    ));
                }
            }
        }
        let (_, draining) = tryo!(host_turns(c));
        if draining != Some(true) {
            p.push(format!("after the drain the host snapshot says draining:{draining:?}, not true"));
        }
        let rid = c.rid();
        let sid = c.session.clone();
        let s = crate::contract::compose::SessionRef { session_id: &sid, generation: 1 };
        let e = crate::contract::compose::Envelope { version: "2.0", request_id: &rid };
        let w = tryo!(crate::contract::compose::wake(&e, &s, &format!("{rid}-wake"), "pi-conform: say hello")
            .map(|w| crate::contract::compose::to_wire(&w))
            .map_err(|e| Outcome::Error(format!("inconclusive: the runner cannot build a wake: {e}"))));
        let r = tryo!(one(c, w));
        release(c, 1);
        retryable_as_contract(Outcome::with(rtoken(&r), p), &r, DaemonCode::HostDraining)
    })
}

/// SPEC PC-2.5 (DECISION on drain), SHOULD: a draining host refuses an `open` with
/// `host_draining` (Pi Daemon 0.3.3 does).
fn drain_refuses_opens(c: &mut DCtx<'_>) -> Outcome {
    drain_case(c, |c| {
        let (r, _) = tryo!(drain(c, Some(1_000)));
        if let Err(e) = drain_data(&r) {
            return Outcome::Error(format!("inconclusive: {e}; nothing was drained"));
        }
        let v = tryo!(c.open(1, json!("none")));
        let r = tryo!(one(c, v));
        if rtoken(&r) == "ok" {
            release(c, 1);
        }
        retryable_as_contract(Outcome::token(rtoken(&r)), &r, DaemonCode::HostDraining)
    })
}

/// SPEC PC-2.5 (DECISION on drain): turns still running at the drain's timeout are aborted.
/// Two sessions each hold a wake whose tool call the probe never answers (the provoked state,
/// confirmed: both invokes reached the probe, and the host counts the running turns); a drain
/// with `timeoutMs` 300 must answer no earlier than 300 ms, `timedOut:true`, and `abortedTurns`
/// equal to the turns running (at least the two).
fn drain_timeout_aborts(c: &mut DCtx<'_>) -> Outcome {
    drain_case(c, |c| {
        let base = c.session.clone();
        let sessions = [format!("{base}-a"), format!("{base}-b")];
        for s in &sessions {
            c.session = s.clone();
            let d = tryo!(c.descriptor(1, Some(limits_with_timeout(60_000))));
            tryo!(open_with(c, &d, 1));
        }
        c.probe.set(BoundMode::Exact, InvokeMode::Ignore);
        let before = invokes(c).len();
        let mut held = Vec::new();
        for s in &sessions {
            c.session = s.clone();
            let w = tryo!(c.wake(1, "fs_stat", &json!({"path": "."})));
            let rid = w["requestId"].as_str().unwrap_or_default().to_string();
            let mut k = tryo!(c.connect());
            k.send(&w);
            held.push((s.clone(), rid, k));
        }
        c.session = base.clone();
        let base_after = base;
        let t = Instant::now();
        while invokes(c).len() < before + 2 && t.elapsed() < c.target.step * 2 {
            std::thread::sleep(Duration::from_millis(20));
        }
        let reached = invokes(c).len() - before;
        if reached < 2 {
            return Outcome::Error(format!(
                "inconclusive: {reached} of the two wakes' tool calls reached the adapter, so fewer than two turns \
                 were surely running"
            ));
        }
        let held_calls: Vec<Value> = invokes(c).into_iter().skip(before).map(|f| f["requestId"].clone()).collect();
        let (active, _) = tryo!(host_turns(c));
        let (r, took) = tryo!(drain(c, Some(300)));
        let d = match drain_data(&r) {
            Ok(d) => d,
            Err(e) => return Outcome::with("refused", vec![e]),
        };
        let mut p = Vec::new();
        if !d.timed_out {
            p.push("two turns held past the timeout, and the drain answered timedOut:false".to_string());
        }
        let expected = active.filter(|&a| a >= 2).unwrap_or(2);
        if d.aborted_turns != expected {
            p.push(format!(
                "the drain aborted the turns still running ({expected}: the host counted {active:?}, two held by the \
                 probe) and answered abortedTurns:{}",
                d.aborted_turns
            ));
        }
        if d.timeout_ms != 300 {
            p.push(format!("the drain asked timeoutMs 300 and answered timeoutMs {}", d.timeout_ms));
        }
        // The daemon's timer starts after the runner's send: the answer cannot be earlier.
        if d.timed_out && took < Duration::from_millis(290) {
            p.push(format!(
                "the drain answered timedOut:true after {} ms, before its timeout of 300 ms",
                took.as_millis()
            ));
        }
        // Aborted means ended: each held wake is answered (ok or not: Pi Daemon 0.3.3 ends the
        // turn with the aborted tool call failed and answers ok), though its tool call is still
        // unanswered and 60 s from its own timeout.
        if d.timed_out {
            for (sid, rid, k) in held.iter_mut() {
                let answer = response_to(k, rid, c.target.step * 3);
                if answer.frame().and_then(|f| f.ok()).is_none() {
                    p.push(format!(
                        "the drain counted the turn of session {sid} aborted, but its wake got no answer within {} ms \
                         ({}): the turn kept running",
                        (c.target.step * 3).as_millis(),
                        answer.describe()
                    ));
                }
            }
            // The aborted turns' calls are cancelled: an `abort` naming each reaches the adapter
            // (their own timeout is 60 s away).
            let t = Instant::now();
            let unaborted = || {
                let aborts: Vec<Value> = c
                    .probe
                    .seen()
                    .frames
                    .into_iter()
                    .filter(|(_, f)| f["kind"] == "abort")
                    .map(|(_, f)| f["targetRequestId"].clone())
                    .collect();
                held_calls.iter().filter(|id| !aborts.contains(id)).count()
            };
            while unaborted() > 0 && t.elapsed() < c.target.step {
                std::thread::sleep(Duration::from_millis(20));
            }
            let n = unaborted();
            if n > 0 {
                p.push(format!(
                    "the drain aborted the turns, but {n} of their {} tool calls got no abort at the adapter within {} ms: \
                     an aborted turn's call is cancelled",
                    held_calls.len(),
                    c.target.step.as_millis()
                ));
            }
        }
        // Give the slots back (Pi Daemon 0.3.3 keeps at most 128 sessions).
        for (sid, _, _) in &held {
            c.session = sid.clone();
            release(c, 1);
        }
        c.session = base_after;
        Outcome::with(if p.is_empty() { "aborted" } else { "miscounted" }, p)
    })
}

/// SPEC PC-2.5 (DECISION on drain): a turn that settles within the drain's timeout is waited
/// for, not aborted. A wake's tool call is answered by the probe 600 ms after it arrives; a
/// drain sent once the call is in flight (confirmed at the probe) with `timeoutMs` 20000 must
/// answer `timedOut:false, abortedTurns:0`, and the wake must complete `ok`.
fn drain_waits_for_turns(c: &mut DCtx<'_>) -> Outcome {
    drain_case(c, |c| {
        let d = tryo!(c.descriptor(1, Some(limits_with_timeout(30_000))));
        tryo!(open_with(c, &d, 1));
        c.probe.set(BoundMode::Exact, InvokeMode::Delay(600));
        let before = invokes(c).len();
        let w = tryo!(c.wake(1, "fs_stat", &json!({"path": "."})));
        let wake_rid = w["requestId"].as_str().unwrap_or_default().to_string();
        let mut k = tryo!(c.connect());
        k.send(&w);
        let t = Instant::now();
        while invokes(c).len() == before && t.elapsed() < c.target.step * 2 {
            std::thread::sleep(Duration::from_millis(10));
        }
        if invokes(c).len() == before {
            return Outcome::Error(
                "inconclusive: the wake's tool call never reached the adapter, so no turn was surely running".into(),
            );
        }
        let (r, _) = tryo!(drain(c, Some(20_000)));
        let mut p = Vec::new();
        match drain_data(&r) {
            Err(e) => p.push(e),
            Ok(d) if d.timed_out || d.aborted_turns != 0 => p.push(format!(
                "a turn settling 600 ms into a 20000 ms drain was not waited for: the drain answered timedOut:{} \
                 abortedTurns:{}",
                d.timed_out, d.aborted_turns
            )),
            Ok(_) => {}
        }
        let answer = response_to(&mut k, &wake_rid, c.target.step * 3);
        let wake = rtoken(&answer);
        if wake != "ok" {
            p.push(format!("the wake running while the host drained was answered {wake}, not completed"));
        }
        release(c, 1);
        Outcome::with(if p.is_empty() { "waited" } else { "cut-short" }, p)
    })
}

/// PC-2.5/PC-6: the wake journal is durable. A wake settled before a restart (one fs_stat,
/// answered ok) is, after the restart and a reprovisioning open (confirmed ok), replayed when
/// sent again under its key and payload — ok, the same result, no invoke on the new binding —
/// and the key with another prompt is `idempotency_conflict`.
fn restart_wake_key_survives(c: &mut DCtx<'_>) -> Outcome {
    if c.target.restart_cmd.is_none() {
        return Outcome::Skip("no --restart-cmd given".into());
    }
    let (w, first, _, _) = tryo!(settled_wake(c));
    tryo!(c.restart());
    let d = tryo!(c.descriptor(1, None));
    let link = tryo!(open_with(c, &d, 1));
    let before = invokes_on(c, link);
    let mut again = w.clone();
    again["requestId"] = json!(c.rid());
    let replay = tryo!(one(c, again));
    let mut other = w.clone();
    other["requestId"] = json!(c.rid());
    other["payload"]["prompt"] = json!(format!("{} (another payload)", w["payload"]["prompt"].as_str().unwrap_or("")));
    let conflict = tryo!(one(c, other));
    let mut p = Vec::new();
    let ran = invokes_on(c, link) - before;
    if ran > 0 {
        p.push(format!(
            "the wake settled before the restart ran its turn again when sent under its key after the restart ({ran} \
             invoke(s)): the journaled outcome is replayed"
        ));
    }
    match replay.frame() {
        Some(f) if f.ok() == Some(true) => {
            if f.data()["result"] != data(&first)["result"] {
                p.push("the wake settled before the restart was answered with another result after it".into());
            }
        }
        _ => p.push(format!(
            "the wake settled before the restart, sent again under its key and payload, was answered {}",
            rtoken(&replay)
        )),
    }
    let code = rtoken(&conflict);
    if code != format!("error:{}", AdapterCode::IdempotencyConflict.as_str()) {
        p.push(format!(
            "after the restart the settled key with another prompt was answered {code}, not idempotency_conflict"
        ));
    }
    release(c, 1);
    Outcome::with(if p.is_empty() { "replayed" } else { "forgotten" }, p)
}

/// Whether the handshake's host snapshot lists generation 1 of `session` as quarantined.
fn quarantine_listed(c: &mut DCtx<'_>, session: &str) -> Result<bool, Outcome> {
    let v = c.handshake(None)?;
    let r = one(c, v)?;
    let q = data(&r)["host"]["recovery"]["quarantinedSessions"].clone();
    Ok(q.as_array().is_some_and(|a| a.iter().any(|x| x["sessionId"] == session && x["generation"] == 1)))
}

/// After a restart, confirm the case session is quarantined (else the case cannot judge
/// what it tests: inconclusive; `daemon.restart.quarantine-listed` fails that daemon).
fn restart_quarantined(c: &mut DCtx<'_>) -> Result<Value, Outcome> {
    if c.target.restart_cmd.is_none() {
        return Err(Outcome::Skip("no --restart-cmd given".into()));
    }
    let d = restart_flow(c)?;
    let session = c.session.clone();
    if !quarantine_listed(c, &session)? {
        return Err(Outcome::Error(
            "inconclusive: after the restart the session is not listed in quarantinedSessions, so the quarantine \
             this case relies on was never confirmed"
                .into(),
        ));
    }
    Ok(d)
}

/// The answer to a live command on a quarantined generation (SPEC §6: `session_not_found`).
/// The quarantine was confirmed just before, so another code is the wrong answer, not
/// another reason; only a draining host is inconclusive.
fn quarantined_refusal(r: &Recv, what: &str) -> Outcome {
    let Some(f) = r.frame() else { return Outcome::token(rtoken(r)) };
    if f.ok() == Some(true) {
        return Outcome::with(
            "accepted",
            vec![format!(
                "{what} of a quarantined generation was answered ok: while quarantined it is session_not_found"
            )],
        );
    }
    let got = f.error_code().unwrap_or("?");
    if got == DaemonCode::SessionNotFound.as_str() {
        return Outcome::token(format!("error:{got}"));
    }
    if got == DaemonCode::HostDraining.as_str() {
        return Outcome::Error(format!("inconclusive: {what} was answered {got}"));
    }
    Outcome::with(
        format!("error:{got}"),
        vec![format!(
            "{what} of a quarantined generation was answered {got}: while quarantined, a live wake, status or \
             attach is session_not_found (SPEC §6)"
        )],
    )
}

/// SPEC §6: while quarantined, a live `wake` of the generation is `session_not_found`.
fn restart_quarantined_wake(c: &mut DCtx<'_>) -> Outcome {
    let _ = tryo!(restart_quarantined(c));
    let w = tryo!(c.wake(1, "fs_stat", &json!({"path": "."})));
    let r = tryo!(one(c, w));
    quarantined_refusal(&r, "a wake")
}
/// SPEC §6: while quarantined, a session `status` of it is `session_not_found`.
fn restart_quarantined_status(c: &mut DCtx<'_>) -> Outcome {
    let _ = tryo!(restart_quarantined(c));
    let r = tryo!(session_status(c));
    quarantined_refusal(&r, "a session status")
}
/// SPEC §6: while quarantined, an `attach` of the generation is `session_not_found`.
fn restart_quarantined_attach(c: &mut DCtx<'_>) -> Outcome {
    let _ = tryo!(restart_quarantined(c));
    let a = tryo!(c.attach(1));
    let r = tryo!(one(c, a));
    quarantined_refusal(&r, "an attach")
}

/// SPEC §6: a current-host descriptor whose summary differs from the retained one in any item
/// (IDs, version, operation order, any limit) is `session_policy_conflict`, and the quarantine
/// stays. Each item is tried in turn after one restart.
fn restart_summary_mismatch(c: &mut DCtx<'_>) -> Outcome {
    let _ = tryo!(restart_quarantined(c));
    let mut p = Vec::new();
    for item in SummaryItem::all() {
        let mut d = tryo!(c.descriptor(1, None));
        if !item.applies(&d) {
            continue;
        }
        item.apply(&mut d);
        let v = tryo!(c.open(1, super::DCtx::host_adapter(&d)));
        let r = tryo!(one(c, v));
        match refusal(&r, DaemonCode::SessionPolicyConflict.as_str(), None) {
            Outcome::Observed { token, .. } if token == "error:session_policy_conflict" => {}
            Outcome::Observed { token, .. } => p.push(format!(
                "a reprovision whose {} differs from the retained summary was answered {token}: \
                 session_policy_conflict",
                item.name()
            )),
            other => return other,
        }
    }
    let session = c.session.clone();
    if p.is_empty() && !tryo!(quarantine_listed(c, &session)) {
        p.push("a refused reprovision cleared the quarantine".into());
    }
    Outcome::with("policy-conflict", p)
}

/// SPEC §6: only a successful runtime open (bind + bound) clears the quarantine: a
/// reprovision whose adapter closes before `bound` fails, and the generation stays listed.
fn restart_failed_reprovision(c: &mut DCtx<'_>) -> Outcome {
    let _ = tryo!(restart_quarantined(c));
    let d = tryo!(c.descriptor(1, None));
    c.probe.set(BoundMode::Close, InvokeMode::Normal);
    let r = c.open(1, super::DCtx::host_adapter(&d)).and_then(|v| one(c, v));
    c.probe.set(BoundMode::Exact, InvokeMode::Normal);
    let r = tryo!(r);
    if rtoken(&r) == "ok" {
        return Outcome::Error(
            "inconclusive: the reprovision whose adapter closes before bound was answered ok".into(),
        );
    }
    let session = c.session.clone();
    if tryo!(quarantine_listed(c, &session)) {
        Outcome::token("still-quarantined")
    } else {
        Outcome::with(
            "cleared",
            vec![format!(
                "a reprovision that failed ({}) cleared the quarantine: only a successful bind + bound clears it",
                rtoken(&r)
            )],
        )
    }
}

/// SPEC §6: quarantine is for host-adapter generations, whose binding a restart lost. A
/// session opened with `tools:"none"` has nothing to reprovision: after the same restart that
/// quarantines the case session (confirmed), it is not listed, and it can be used again: an
/// open of its generation with `tools:"none"` answered ok makes it live, so a wake of it after
/// that open is answered ok. Pi Daemon 0.3.3 has it resident at once (the open answers
/// `created:false`); the reference keeps it dormant until that open. The open refused, or the
/// wake refused with another code than `session_not_found`, is inconclusive.
fn restart_no_tools_not_quarantined(c: &mut DCtx<'_>) -> Outcome {
    if c.target.restart_cmd.is_none() {
        return Outcome::Skip("no --restart-cmd given".into());
    }
    let main = c.session.clone();
    let plain = format!("{main}-plain");
    c.session = plain.clone();
    let opened = open_plain(c);
    c.session = main.clone();
    tryo!(opened);
    let _ = tryo!(restart_quarantined(c));
    if tryo!(quarantine_listed(c, &plain)) {
        return Outcome::with(
            "plain-quarantined",
            vec!["a session opened with tools:\"none\" was quarantined by the restart: it has no adapter binding to reprovision".into()],
        );
    }
    c.session = plain;
    let used = plain_reopened_wake(c);
    c.session = main;
    let r = tryo!(used);
    match r.frame() {
        Some(f) if f.ok() == Some(true) => Outcome::token("not-quarantined"),
        Some(f) if f.error_code() == Some(DaemonCode::SessionNotFound.as_str()) => Outcome::with(
            "reopened-not-live",
            vec![format!(
                "after the restart, the tools:\"none\" session was opened again at its generation (answered ok), yet a \
                 wake of it was answered session_not_found: the open did not make it live ({})",
                f.error_message().unwrap_or("")
            )],
        ),
        _ => Outcome::Error(format!(
            "inconclusive: the wake of the re-opened tools:\"none\" session was answered {}",
            rtoken(&r)
        )),
    }
}

/// Open the case session again at generation 1 with `tools:"none"` (a refusal is
/// inconclusive) and answer a plain wake of it.
fn plain_reopened_wake(c: &mut DCtx<'_>) -> Result<Recv, Outcome> {
    let v = c.open(1, json!("none"))?;
    let r = one(c, v)?;
    if rtoken(&r) != "ok" {
        return Err(Outcome::Error(format!(
            "inconclusive: after the restart, the open of the tools:\"none\" session at its generation was answered {}",
            rtoken(&r)
        )));
    }
    let rid = c.rid();
    let sid = c.session.clone();
    let s = crate::contract::compose::SessionRef { session_id: &sid, generation: 1 };
    let e = crate::contract::compose::Envelope { version: "2.0", request_id: &rid };
    let w = crate::contract::compose::wake(&e, &s, &format!("{rid}-wake"), "pi-conform: say hello")
        .map(|w| crate::contract::compose::to_wire(&w))
        .map_err(|e| Outcome::Error(format!("inconclusive: the runner cannot build a wake: {e}")))?;
    one(c, w)
}

// ---------------------------------------------------------------- at rest

/// One search of the scan paths for every handle the runner minted and the endpoint, after a
/// moment for what the daemon writes just after answering to reach its files.
fn at_rest_scan(c: &DCtx<'_>) -> super::at_rest::Scan {
    std::thread::sleep(c.target.step / 4);
    let handles = c.probe.minted();
    let endpoint = c.probe.socket.to_string_lossy().into_owned();
    let needles = super::at_rest::Needles::new(&handles, &endpoint);
    super::at_rest::scan(&c.target.scan_paths, &needles, super::at_rest::SCAN_BUDGET)
}

/// Hits listed one by one in the case's findings; more are counted.
const AT_REST_LISTED: usize = 10;

/// PC-6 (Persistence, MUST) and PC-7.1: the endpoint and the handle never touch disk or logs.
/// With `--scan-path` (the daemon's state directory, its log file), this case runs after every
/// other one ([`super::RUN_LAST`]): it opens a durable session of its own with a descriptor
/// (bound, answered ok) and wakes it with one tool call, so that at least one host-adapter
/// session and one journaled wake are on disk (when that open is refused — a daemon full after
/// the run — the sessions the earlier cases bound stand in for it; with none, inconclusive).
/// Before the wake and after it, it searches every
/// regular file under the paths (symlinks not followed, at most 256 MiB) for every capability
/// handle the runner minted during the run — raw or in any JSON spelling — and for the probe's
/// endpoint path. A file
/// holding one fails the case, named with what it holds, never the secret. Nothing read (no
/// regular file, an unreadable one, or the cap reached) with nothing found is inconclusive.
/// The case cannot stop the daemon gracefully (a `--restart-cmd` kills it), so a daemon that
/// buffers its log is judged on what it has written by then.
fn secrets_at_rest(c: &mut DCtx<'_>) -> Outcome {
    if c.target.scan_paths.is_empty() {
        return Outcome::Skip(
            "no --scan-path given (the daemon's state directory and log file, searched for handles and the endpoint)"
                .into(),
        );
    }
    for p in &c.target.scan_paths {
        if let Err(e) = std::fs::symlink_metadata(p) {
            return Outcome::Error(format!("inconclusive: --scan-path {}: {e}", p.display()));
        }
    }
    let scan = match open_bound(c, 1) {
        Ok(_) => {
            // Searched twice: with the session just opened, and once it has journaled a wake
            // (a daemon may write a record again then; a secret written first was on disk
            // all the same).
            let mut scan = at_rest_scan(c);
            let w = c.wake(1, "fs_stat", &json!({"path": "."}));
            let _ = w.and_then(|w| one(c, w));
            scan.merge(at_rest_scan(c));
            release(c, 1);
            scan
        }
        // A daemon full after the run (Pi Daemon 0.3.3 keeps 128 sessions, and the replayed
        // vectors keep theirs): the sessions the earlier cases bound are what is searched.
        Err(_) if c.probe.seen().frames.iter().any(|(_, f)| f["kind"] == "bind") => at_rest_scan(c),
        Err(o) => return o,
    };
    let mut p: Vec<String> = scan
        .hits
        .iter()
        .take(AT_REST_LISTED)
        .map(|(path, held)| {
            let what = match (held.handle, held.endpoint) {
                (true, true) => "a capability handle the runner minted and the adapter endpoint path",
                (true, false) => "a capability handle the runner minted",
                _ => "the adapter endpoint path",
            };
            format!("{} holds {what}", path.display())
        })
        .collect();
    if scan.hits.len() > AT_REST_LISTED {
        p.push(format!("… and {} more such files", scan.hits.len() - AT_REST_LISTED));
    }
    if !p.is_empty() {
        return Outcome::with("at-rest", p);
    }
    let read = format!("{} files, {} bytes read", scan.files, scan.bytes);
    if scan.files == 0 {
        return Outcome::Error(format!(
            "inconclusive: the scan paths hold no regular file ({read}), so nothing the daemon keeps was searched"
        ));
    }
    if let Some((path, why)) = scan.unread.first() {
        return Outcome::Error(format!(
            "inconclusive: nothing found, but {} could not be read ({why}; {} unread in all, {read})",
            path.display(),
            scan.unread.len()
        ));
    }
    if scan.truncated {
        return Outcome::Error(format!(
            "inconclusive: nothing found, but the scan stopped at its cap ({} MiB or {} entries; {read})",
            super::at_rest::SCAN_BUDGET >> 20,
            super::at_rest::MAX_ENTRIES
        ));
    }
    Outcome::token("clean")
}

/// Every daemon case implementation by id.
pub fn registry() -> Vec<(&'static str, DCaseFn)> {
    vec![
        ("daemon.socket.owner-only", socket_owner_only),
        ("daemon.handshake.supported-versions", hs_supported_versions),
        ("daemon.handshake.host-snapshot", hs_host_snapshot),
        ("daemon.handshake.snapshot-content-free", hs_snapshot_content_free),
        ("daemon.envelope.duplicate-request-id", env_duplicate_request_id),
        ("daemon.envelope.line-at-max-bytes", env_line_at_max_bytes),
        ("daemon.envelope.in-flight-limit", env_in_flight_limit),
        ("daemon.envelope.connection-limit", env_connection_limit),
        ("daemon.envelope.response-over-max-bytes", env_response_over_max_bytes),
        ("daemon.envelope.slow-reader-disconnected", env_slow_reader_disconnected),
        ("daemon.v1.tools-object", v1_tools_object),
        ("daemon.v2.no-tools-storage", v2_no_tools_storage),
        ("daemon.admission.check-1-closed-descriptor", adm_1),
        ("daemon.admission.check-2-protocol-version", adm_2),
        ("daemon.admission.check-3-adapter-id", adm_3),
        ("daemon.admission.check-4-adapter-version", adm_4),
        ("daemon.admission.check-5-endpoint", adm_5),
        ("daemon.admission.check-6-binding", adm_6),
        ("daemon.admission.check-7-capability", adm_7),
        ("daemon.admission.check-8-binding-mismatch", adm_8),
        ("daemon.admission.check-9-operations", adm_9),
        ("daemon.admission.check-10-limits", adm_10),
        ("daemon.admission.check-11-fit", adm_11),
        ("daemon.bind.before-open-answer", bind_before_answer),
        ("daemon.bind.bound-wrong-limits", bound_wrong_limits),
        ("daemon.bind.bound-reordered-operations", bound_reordered),
        ("daemon.bind.bound-wrong-generation", bound_wrong_generation),
        ("daemon.bind.bound-echoes-handle", bound_echo_handle),
        ("daemon.bind.close-before-bound", bound_close),
        ("daemon.bind.silence", bound_silence),
        ("daemon.bind.typed-failure-cause", bind_typed_cause),
        ("daemon.bind.endpoint-insecure", endpoint_insecure),
        ("daemon.bind.endpoint-insecure-forms", endpoint_insecure_forms),
        ("daemon.bind.revoke-on-close", revoke_on_close),
        ("daemon.bind.revoke-on-replacement", revoke_on_replacement),
        ("daemon.bind.revoke-closes-connection", revoke_closes_connection),
        ("daemon.bind.replacement-with-call-in-flight", revoke_replacement_in_flight),
        ("daemon.bind.close-with-call-in-flight", bind_close_in_flight),
        ("daemon.bind.concurrent-reopen-one-connection", bind_concurrent_reopen),
        ("daemon.bind.concurrent-first-opens-one-connection", bind_concurrent_first_opens),
        ("daemon.policy.reopen-same", policy_reopen_same),
        ("daemon.policy.no-tools-after-failed-bind", policy_no_tools_after_failed_bind),
        ("daemon.policy.no-tools-reopen-live", policy_no_tools_reopen_live),
        ("daemon.policy.tools-added-on-reopen", policy_tools_added_on_reopen),
        ("daemon.policy.summary-mismatch", policy_summary_mismatch),
        ("daemon.policy.summary-mismatch-adapter-id", policy_summary_adapter_id),
        ("daemon.policy.summary-mismatch-adapter-version", policy_summary_adapter_version),
        ("daemon.policy.summary-mismatch-operation-order", policy_summary_operation_order),
        ("daemon.policy.lower-generation", policy_lower_generation),
        ("daemon.generation.stale-attach", generation_stale_attach),
        ("daemon.tools.invoke-shape", tools_invoke_shape),
        ("daemon.tools.distinct-idempotency-keys", tools_distinct_keys),
        ("daemon.tools.queue-capacity", tools_queue_capacity),
        ("daemon.tools.queue-filled-exactly", tools_queue_filled_exactly),
        ("daemon.tools.concurrency-limit", tools_concurrency_limit),
        ("daemon.tools.queue-wait-counts-toward-timeout", tools_queue_wait_counts),
        ("daemon.tools.eof-fails-queued-calls", tools_eof_fails_queued),
        ("daemon.tools.write-error-fails-connection", tools_write_error_fails),
        ("daemon.tools.client-abort-cancels-calls", tools_client_abort_cancels_calls),
        ("daemon.tools.abort-capacity", tools_abort_capacity),
        ("daemon.tools.non-canonical-path-refused", tools_non_canonical_path),
        ("daemon.tools.path-empty-refused", path_empty),
        ("daemon.tools.path-absolute-refused", path_absolute),
        ("daemon.tools.path-backslash-refused", path_backslash),
        ("daemon.tools.path-control-char-refused", path_control),
        ("daemon.tools.path-del-refused", path_del),
        ("daemon.tools.path-over-4096-bytes-refused", path_over_4096),
        ("daemon.tools.path-dot-dot-refused", path_dot_dot),
        ("daemon.tools.ungranted-operation-not-dispatched", tools_ungranted_operation),
        ("daemon.tools.request-ids-unique", tools_request_ids_unique),
        ("daemon.tools.queue-per-generation", tools_queue_per_generation),
        ("daemon.tools.tombstone-expires", tools_tombstone_expires),
        ("daemon.tools.invoke-at-max-request-bytes", invoke_at_max_request_bytes),
        ("daemon.tools.invoke-one-past-max-request-bytes", invoke_one_past_max_request_bytes),
        ("daemon.tools.result-at-max-response-bytes", result_at_max_response_bytes),
        ("daemon.tools.result-one-past-max-response-bytes", result_one_past_max_response_bytes),
        ("daemon.tools.timeout-sends-abort", tools_timeout_abort),
        ("daemon.tools.result-inside-timeout-accepted", tools_result_inside_timeout),
        ("daemon.tools.mismatched-result-fails-closed", tools_mismatch),
        ("daemon.tools.unsolicited-result-fails-closed", tools_unsolicited),
        ("daemon.tools.reflected-handle-fails-closed", tools_reflected),
        ("daemon.tools.result-after-aborted-fails-closed", tools_result_after_aborted),
        ("daemon.tools.other-operation-result-fails-closed", tools_other_operation),
        ("daemon.tools.duplicate-result-fails-closed", tools_duplicate_result),
        ("daemon.tools.second-bound-fails-closed", tools_second_bound),
        ("daemon.bind.second-bound-fails-closed", bind_second_bound),
        ("daemon.bind.frame-before-bound-fails-closed", bind_frame_before_bound),
        ("daemon.tools.aborted-other-request-id-fails-closed", tools_aborted_other_request_id),
        ("daemon.tools.aborted-unsolicited-fails-closed", tools_aborted_unsolicited),
        ("daemon.tools.late-result-before-aborted-dropped", tools_late_result_dropped),
        ("daemon.tools.late-result-wrong-key-fails-closed", tools_late_result_wrong_key),
        ("daemon.admission.fit-at-equality", adm_fit_equality),
        ("daemon.admission.fit-one-past", adm_fit_one_past),
        ("daemon.events.attached-only", events_attached_only),
        ("daemon.events.sequence-increasing", events_sequence_increasing),
        ("daemon.events.sequence-per-session", events_sequence_per_session),
        ("daemon.events.version-of-open", events_version_of_open),
        ("daemon.events.replaced-generation-inert", events_replaced_generation_inert),
        ("daemon.events.over-max-event-bytes-dropped", events_over_max_dropped),
        ("daemon.status.resident-session", status_resident_session),
        ("daemon.status.queue-telemetry", status_queue_telemetry),
        ("daemon.status.saturated-while-full", status_saturated_while_full),
        ("daemon.wake.same-key-replays", wake_same_key_replays),
        ("daemon.wake.same-key-other-payload-conflict", wake_same_key_other_payload),
        ("daemon.wake.same-key-joins-running", wake_same_key_joins_running),
        ("daemon.restart.quarantine-listed", restart_quarantine_listed),
        ("daemon.restart.no-tools-reopen-refused", restart_no_tools_refused),
        ("daemon.restart.old-host-descriptor-refused", restart_old_host_refused),
        ("daemon.restart.reprovision-clears", restart_reprovision),
        ("daemon.restart.quarantined-wake-not-found", restart_quarantined_wake),
        ("daemon.restart.quarantined-status-not-found", restart_quarantined_status),
        ("daemon.restart.quarantined-attach-not-found", restart_quarantined_attach),
        ("daemon.restart.summary-mismatch-refused", restart_summary_mismatch),
        ("daemon.restart.failed-reprovision-keeps-quarantine", restart_failed_reprovision),
        ("daemon.restart.no-tools-session-not-quarantined", restart_no_tools_not_quarantined),
        ("daemon.restart.closed-session-gone", restart_closed_session_gone),
        ("daemon.restart.wake-key-survives", restart_wake_key_survives),
        ("daemon.restart.accepted-wake-indeterminate", restart_accepted_wake_indeterminate),
        ("daemon.restart.queued-wake-fails-reprovision", restart_queued_wake_fails),
        ("daemon.drain.refuses-wakes", drain_refuses_wakes),
        ("daemon.drain.refuses-opens", drain_refuses_opens),
        ("daemon.drain.timeout-aborts-running-turns", drain_timeout_aborts),
        ("daemon.drain.waits-for-running-turns", drain_waits_for_turns),
        ("daemon.shutdown.revokes-bindings", shutdown_revokes_bindings),
        ("daemon.secrets.at-rest", secrets_at_rest),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conform::adapter::conn::Peer;

    fn refused(code: &str, field: Option<&str>) -> Recv {
        let mut e = json!({"code": code, "message": "m", "retryable": false});
        if let Some(f) = field {
            e["details"] = json!({"field": f});
        }
        let v = json!({"protocolVersion": "2.0", "kind": "response", "requestId": "r", "hostInstanceId": "h", "ok": false, "error": e});
        Recv::Frame(Peer::raw(v), Vec::new())
    }

    fn token(o: Outcome) -> String {
        match o {
            Outcome::Observed { token, .. } => token,
            other => panic!("expected an observed outcome, got {other:?}"),
        }
    }

    #[test]
    fn a_refusal_naming_the_faulted_member_is_judged_by_its_code() {
        // Every spelling of the member passes through the last dotted segment.
        for field in ["descriptor.binding.extra", "binding.extra", "extra"] {
            let r = refused("invalid_tool_adapter_binding", Some(field));
            assert_eq!(
                token(refusal(&r, "invalid_tool_adapter_binding", Some("extra"))),
                "error:invalid_tool_adapter_binding@extra"
            );
        }
        // The provoked member with another code is a token the catalogue does not accept: fail.
        let r = refused("invalid_tool_adapter_field", Some("binding.extra"));
        assert_eq!(
            token(refusal(&r, "invalid_tool_adapter_binding", Some("extra"))),
            "error:invalid_tool_adapter_field@extra"
        );
    }

    #[test]
    fn a_refusal_for_another_reason_is_inconclusive_never_a_pass() {
        // The 0.3.3 resources refusal that made bind.endpoint-insecure and v1.tools-object pass.
        let r = refused("invalid_field", Some("extensions"));
        match refusal(&r, Code::InvalidField.as_str(), Some("tools")) {
            Outcome::Error(why) => {
                assert!(why.contains("inconclusive") && why.contains("extensions") && why.contains("`tools`"), "{why}")
            }
            other => panic!("another member's refusal must be inconclusive, got {other:?}"),
        }
        // No member to confirm: only the provoked code passes.
        let r = refused("invalid_protocol_version", None);
        assert!(matches!(refusal(&r, "incompatible_protocol", None), Outcome::Error(_)));
        assert_eq!(
            token(refusal(&refused("incompatible_protocol", None), "incompatible_protocol", None)),
            "error:incompatible_protocol"
        );
    }

    #[test]
    fn a_descriptor_refusal_without_its_field_fails() {
        let r = refused("invalid_tool_adapter_endpoint", None);
        match refusal(&r, "invalid_tool_adapter_endpoint", Some("path")) {
            Outcome::Observed { token, problems } => {
                assert_eq!(token, "error:invalid_tool_adapter_endpoint@(no field)");
                assert!(problems[0].contains("details.field"), "{problems:?}");
            }
            other => panic!("a fieldless descriptor refusal must be observed, got {other:?}"),
        }
        // Another code without a field stays inconclusive.
        let r = refused("invalid_tool_adapter_limit", None);
        assert!(matches!(refusal(&r, "invalid_tool_adapter_endpoint", Some("path")), Outcome::Error(_)));
    }

    #[test]
    fn an_acceptance_is_observed_as_accepted() {
        let ok = Recv::Frame(Peer::raw(json!({"ok": true, "data": {}})), Vec::new());
        assert_eq!(token(refusal(&ok, "invalid_field", Some("payload"))), "accepted");
        assert_eq!(token(refusal(&Recv::Timeout, "invalid_field", Some("payload"))), "timeout");
    }

    #[test]
    fn the_close_backstop_is_timed_from_the_half_close_and_inconclusive_without_a_trickle() {
        use super::super::probe::{ProbeLog, REVOKE_DRIP_EVERY};
        let grace = Duration::from_millis(2000);
        let t0 = Instant::now();
        let eof = t0 + Duration::from_millis(1900);
        let mut seen = ProbeLog { ended: vec![(3, eof)], ..ProbeLog::default() };
        // No byte refused yet, within the grace from the EOF plus one trickle interval: wait on
        // (the old budget, measured from before the EOF, had already run out here).
        assert!(backstop_verdict(&seen, 3, grace, eof + grace + REVOKE_DRIP_EVERY / 2).is_none());
        // The daemon closed near the end of the grace: the next byte due is refused.
        seen.refused.push((3, eof + grace + REVOKE_DRIP_EVERY / 2));
        assert_eq!(token(backstop_verdict(&seen, 3, grace, eof + grace + REVOKE_DRIP_EVERY).unwrap()), "closed");
        // Still reading past the grace and one interval: the backstop failed.
        let open = ProbeLog { ended: vec![(3, eof)], ..ProbeLog::default() };
        match backstop_verdict(&open, 3, grace, eof + grace + REVOKE_DRIP_EVERY) {
            Some(Outcome::Observed { token, problems }) => {
                assert_eq!(token, "left-open-reading");
                assert!(!problems.is_empty());
            }
            other => panic!("expected left-open-reading, got {other:?}"),
        }
        // Another connection's refusal says nothing about this one.
        let other = ProbeLog { ended: vec![(3, eof)], refused: vec![(2, eof)], ..ProbeLog::default() };
        assert!(backstop_verdict(&other, 3, grace, eof).is_none());
        // A probe that could not clone its socket never trickled: inconclusive, never a failure.
        let blind = ProbeLog { ended: vec![(3, eof)], drip_unavailable: vec![3], ..ProbeLog::default() };
        assert!(matches!(backstop_verdict(&blind, 3, grace, eof + grace * 10), Some(Outcome::Error(_))));
    }

    #[test]
    fn timing_summaries_are_judged_by_arithmetic_alone() {
        // The reference's shape, 0.3.3's shape, an empty summary of each: consistent.
        let good = json!({"fs.stat": {
            "latencyMs": {"count": 3, "min": 0.12, "max": 2.5, "mean": 1.0},
            "queueWaitMs": {"count": 0, "min": null, "max": null, "mean": null},
            "requestLatencyMs": {"count": 2, "sum": 3, "min": 1, "max": 2, "last": 2},
            "empty": {"count": 0, "sum": 0, "min": 0, "max": 0, "last": 0},
            "rounded": {"count": 1, "min": 0.001, "max": 0.001, "mean": 0.0015}
        }});
        assert!(summaries_inconsistent(&good, "").is_empty(), "{:?}", summaries_inconsistent(&good, ""));
        // A mean above the max, a sum whose mean is below the min, a last above the max.
        let bad = json!({"fs.stat": {
            "latencyMs": {"count": 3, "min": 0.0, "max": 0.0, "mean": 0.41},
            "requestLatencyMs": {"count": 2, "sum": 1, "min": 1, "max": 2, "last": 3}
        }});
        let p = summaries_inconsistent(&bad, "");
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(p[0].contains("fs.stat.latencyMs") && p[0].contains("mean 0.41"), "{p:?}");
        assert!(p[1].contains("last 3") && p[1].contains("sum / count 0.5"), "{p:?}");
    }
}
