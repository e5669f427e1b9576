//! Adapter cases at the edges of rules other cases test in their middle: a write through a
//! symlink whose target does not exist, every operation sent ungranted, a handle one
//! character short, long or of another case, a non-UTF-8 byte just outside a read window, a
//! named file holding NUL searched, an edit of a missing file, a duplicate waiting on an edit
//! that fails retryably. Each is a MUST of SPEC.md; a broken adapter that passes the nearby
//! cases fails here.

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::cases::{busy_beyond, changed, granted, ok_with, CaseFn};
use super::conn::Recv;
use super::provoke::{gather, keep_reading, ms};
use super::{data, req, token, Ctx};
use crate::conform::case::Outcome;
use crate::contract::adapter_error::AdapterCode;

macro_rules! tryo {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(o) => return o,
        }
    };
}

/// The case implementations of this module, by id.
pub fn registry() -> Vec<(&'static str, CaseFn)> {
    vec![
        ("adapter.write.dangling-symlink", write_dangling_symlink as CaseFn),
        ("adapter.invoke.ungranted-every-operation", invoke_ungranted_every_operation),
        ("adapter.bind.near-handle", bind_near_handle),
        ("adapter.read.not-utf8-outside-window", read_not_utf8_outside_window),
        ("adapter.search.named-nul-file", search_named_nul_file),
        ("adapter.edit.missing-file", edit_missing_file),
        ("adapter.abort.each-identity-field-wrong", abort_each_identity_field_wrong),
        ("adapter.invoke.each-identity-field-wrong", invoke_each_identity_field_wrong),
        ("adapter.limits.busy-with-no-queue", limits_busy_with_no_queue),
        ("adapter.limits.nothing-fits-list", limits_nothing_fits_list),
        ("adapter.idempotency.duplicate-after-retryable-failure", idem_duplicate_after_retryable_failure),
    ]
}

/// PC-5.1 / PC-7.2: symlinks are refused in every component, whether their target exists or
/// not. The case lays `dangling.lnk` pointing at a file that does not exist in the sentinel
/// tree (outside the root) and sends `fs.write` with the default flags, with
/// `overwrite:false` and with `create:true`, then `fs.edit`: each must be `symlink_refused`,
/// the link left as it was and nothing made outside the root (the sentinel oracle). An
/// adapter that looks for a symlink only when the path exists (`exists()` follows links)
/// creates the file outside the root, or renames its temporary file over the link.
fn write_dangling_symlink(c: &mut Ctx<'_>) -> Outcome {
    if !granted(c, "fs.write") {
        return Outcome::Skip("the descriptor does not grant fs.write".into());
    }
    let name = "dangling.lnk";
    let link = c.target.root.join(name);
    let target = c.target.sentinel.join("made-through-a-dangling-link.txt");
    if std::os::unix::fs::symlink(&target, &link).is_err() {
        return Outcome::Error("cannot lay the symlink of the case".into());
    }
    let out = dangling_cells(c, name, &link, &target);
    let _ = std::fs::remove_file(&link);
    let _ = std::fs::remove_file(&target);
    out
}

fn dangling_cells(c: &mut Ctx<'_>, name: &str, link: &Path, target: &Path) -> Outcome {
    let refused = format!("error:{}", AdapterCode::SymlinkRefused.as_str());
    let mut calls = vec![
        ("fs.write", req::write(name, "through the link")),
        ("fs.write overwrite:false", req::write(name, "through the link").overwrite(false)),
        ("fs.write create:true", req::write(name, "through the link").create(true)),
    ];
    if granted(c, "fs.edit") {
        calls.push(("fs.edit", req::edit(name, &[("x", "y")])));
    }
    let mut conn = tryo!(c.bound());
    let mut problems = Vec::new();
    for (what, call) in calls {
        let r = c.call(&mut conn, call);
        let t = token(&r);
        if t != refused {
            problems.push(format!("{what} of a symlink whose target does not exist answered {t}, not {refused}"));
        }
        if std::fs::read_link(link).ok().as_deref() != Some(target) {
            problems.push(format!("after {what} the symlink is no longer the one laid (replaced or removed)"));
            break;
        }
        if std::fs::symlink_metadata(target).is_ok() {
            problems.push(format!("{what} created the link's target, outside the root"));
            break;
        }
        if matches!(r, Recv::Closed | Recv::Timeout) {
            break;
        }
    }
    Outcome::with(if problems.is_empty() { refused } else { "not-refused".into() }, problems)
}

/// One call of `op` (a path the fixture holds), and one whose payload is wrong for it: the
/// grant is checked before the payload (the refusal table of PC-4.5).
fn calls_of(op: &str) -> [req::Call; 2] {
    let valid = match op {
        "fs.list" => req::list("."),
        "fs.stat" => req::stat("hello.txt"),
        "fs.read" => req::read("hello.txt"),
        "fs.search" => req::search(".", "needle"),
        "fs.write" => req::write("ungranted.txt", "x"),
        _ => req::edit("hello.txt", &[("Hello", "Bye")]),
    };
    [valid, req::raw(op, json!({"bogus": 1}))]
}

/// PC-4.5: an operation the bind did not grant is answered `operation_not_granted`, with no
/// side effect, whichever of the six it is, and before the payload is judged. For each
/// operation the descriptor grants, a bind with every other granted operation (a narrower
/// bind, which must be bound) sends that operation valid and with an unknown payload key.
/// (`adapter.invoke.ungranted-operation` sends `fs.write` only: an adapter checking the
/// grant of mutating operations only passes it.)
fn invoke_ungranted_every_operation(c: &mut Ctx<'_>) -> Outcome {
    let ops: Vec<String> = c.target.admitted.operations().iter().map(|o| o.to_string()).collect();
    if ops.len() < 2 {
        return Outcome::Skip("the descriptor grants a single operation: no narrower bind leaves it out".into());
    }
    c.allow(&["ungranted.txt"]);
    let want = format!("error:{}", AdapterCode::OperationNotGranted.as_str());
    let mut problems = Vec::new();
    for op in &ops {
        let mut b = c.bind_frame();
        b["operations"] = Value::Array(ops.iter().filter(|o| *o != op).map(|o| json!(o)).collect());
        let mut conn = tryo!(c.bind_with(&b));
        for (i, call) in calls_of(op).into_iter().enumerate() {
            let r = c.call(&mut conn, call);
            let t = token(&r);
            if t != want {
                let which = if i == 0 { "a valid" } else { "an unknown-key" };
                problems.push(format!("{which} {op} on a bind without it answered {t}, not {want}"));
            }
            if matches!(r, Recv::Closed | Recv::Timeout) {
                break;
            }
        }
    }
    if c.target.root.join("ungranted.txt").exists() {
        problems.push("an ungranted fs.write created its file".into());
    }
    Outcome::with(if problems.is_empty() { want } else { "granted".into() }, problems)
}

/// PC-4.5 Bind: a `bind` matches the capability handle exactly. Three handles that are not
/// it by one character: one short (its last character cut), one long (a character added) and
/// one with the case of one letter changed. Each must be closed without `bound`; an adapter
/// comparing a prefix, or without case, binds one. Each near handle is redacted from the
/// transcript as the handle is.
fn bind_near_handle(c: &mut Ctx<'_>) -> Outcome {
    let h = c.bind_frame()["capabilityHandle"].as_str().unwrap_or_default().to_string();
    let Some(flip) = h.char_indices().find(|(_, ch)| ch.is_ascii_alphabetic()).map(|(i, ch)| {
        let other = if ch.is_ascii_lowercase() { ch.to_ascii_uppercase() } else { ch.to_ascii_lowercase() };
        format!("{}{other}{}", &h[..i], &h[i + ch.len_utf8()..])
    }) else {
        return Outcome::Skip("the handle holds no letter whose case could change".into());
    };
    let near = [
        ("one character short", h[..h.len().saturating_sub(1)].to_string()),
        ("one character long", format!("{h}A")),
        ("one letter's case changed", flip),
    ];
    let mut problems = Vec::new();
    for (what, handle) in near {
        let mut b = c.bind_frame();
        b["capabilityHandle"] = json!(handle);
        let mut conn = tryo!(c.connect()).also_redacting(&handle);
        conn.note(&format!("a bind with the handle {what}"));
        conn.send(&b);
        let r = conn.expect_close(c.step());
        if r != Recv::Closed {
            problems.push(format!("a bind with the handle {what} was answered {} instead of closed", token(&r)));
        }
    }
    Outcome::with(if problems.is_empty() { "closed" } else { "bound-near" }, problems)
}

/// PC-5.3.read: only non-UTF-8 bytes *in the window* are `not_utf8`. `latin1.txt` is
/// `caf\xE9 needle\n`: the window from offset 5 (`needle\n`) and the 3-byte window from 0
/// (`caf`) hold none and must be read (an adapter that judges the whole file refuses them).
fn read_not_utf8_outside_window(c: &mut Ctx<'_>) -> Outcome {
    let mut conn = tryo!(c.bound());
    let after = c.call(&mut conn, req::read("latin1.txt").offset(5));
    let o = ok_with(&after, &[("/content", json!("needle\n")), ("/bytesRead", json!(7)), ("/eof", json!(true))]);
    let Outcome::Observed { token: t, mut problems } = o else { return o };
    if t != "result:ok" {
        return Outcome::with(t, vec!["the window from offset 5 holds only `needle\\n`".into()]);
    }
    let before = c.call(&mut conn, req::read("latin1.txt").offset(0).max_bytes(3));
    match ok_with(&before, &[("/content", json!("caf")), ("/bytesRead", json!(3)), ("/eof", json!(false))]) {
        Outcome::Observed { token: t, problems: more } if t == "result:ok" => problems.extend(more),
        Outcome::Observed { token: t, .. } => {
            problems.push(format!("the 3-byte window from offset 0 (`caf`) answered {t}"));
            return Outcome::with("window-refused", problems);
        }
        o => return o,
    }
    Outcome::with("result:ok", problems)
}

/// PC-5.3.search: a file named directly that contains NUL yields no matches, not an error
/// (`adapter.search.named-binary-file` names a file that is not UTF-8 only). `nul.txt` holds
/// `needle` before its NUL.
fn search_named_nul_file(c: &mut Ctx<'_>) -> Outcome {
    let r = tryo!(c.one(req::search("nul.txt", "needle")));
    ok_with(&r, &[("/matches", json!([])), ("/truncated", json!(false))])
}

/// PC-5.3: "`expectedDigest` … the file must exist (else `not_found`)": an edit of a missing
/// file with an `expectedDigest` is `not_found` and creates nothing. Without one the spec
/// names no code, so `not_found` and `edit_not_found` (its `oldText` occurs nowhere) are both
/// accepted there, and only creating the file fails.
fn edit_missing_file(c: &mut Ctx<'_>) -> Outcome {
    let name = "edit-missing.txt";
    c.allow(&[name]);
    let not_found = format!("error:{}", AdapterCode::NotFound.as_str());
    let edit_not_found = format!("error:{}", AdapterCode::EditNotFound.as_str());
    let mut conn = tryo!(c.bound());
    let mut problems = Vec::new();
    let digest = crate::contract::answer::content_digest(b"x");
    for (what, call, accepted) in [
        ("with an expectedDigest", req::edit(name, &[("x", "y")]).expected_digest(&digest), vec![&not_found]),
        ("without one", req::edit(name, &[("x", "y")]), vec![&not_found, &edit_not_found]),
    ] {
        let r = c.call(&mut conn, call);
        let t = token(&r);
        if !accepted.contains(&&t) {
            problems.push(format!("an edit of a missing file {what} answered {t}, not {}", accepted[0]));
        }
        if data(&r).is_some() || c.target.root.join(name).exists() {
            problems.push(format!("an edit of a missing file {what} created it"));
            let _ = std::fs::remove_file(c.target.root.join(name));
        }
    }
    Outcome::with(if problems.is_empty() { not_found } else { "edited".into() }, problems)
}

/// The identity fields of a frame (each changed by [`changed`] in turn).
const IDENTITY: [&str; 6] =
    ["protocolVersion", "adapterId", "adapterVersion", "hostInstanceId", "sessionId", "generation"];

/// PC-4.5 (the refusal table: "not attributable: … wrong identity … close") and PC-4.1: a
/// frame whose identity is not the binding's is closed, whatever its kind. On a bound
/// connection each, an `abort` and an `invoke` (`fs.stat` of `hello.txt`, or the first
/// granted operation) with one identity field changed: the connection must close with no
/// `aborted` and no result. (The bind and the session's invokes are tested so; an adapter that
/// judges the identity of invokes only, or of some fields only, answers here.)
fn frames_with_wrong_identity(c: &mut Ctx<'_>, kind: &str) -> Outcome {
    let op = c.target.admitted.operations().first().map(|o| o.to_string()).unwrap_or_default();
    let op = if granted(c, "fs.stat") { "fs.stat".to_string() } else { op };
    c.allow(&["ungranted.txt"]);
    let mut answered = Vec::new();
    for (i, field) in IDENTITY.into_iter().enumerate() {
        let mut f = if kind == "abort" {
            c.abort(&format!("abort-{i}"), "req-none")
        } else {
            let [call, _] = calls_of(&op);
            let call = if op == "fs.stat" { req::stat("hello.txt") } else { call };
            c.invoke(&format!("req-{i}"), &format!("key-{i}"), call)
        };
        f[field] = changed(&f[field]);
        let mut conn = tryo!(c.bound());
        conn.note(&format!("the {kind} with {field} changed"));
        conn.send(&f);
        match conn.expect_close(c.step()) {
            Recv::Closed => {}
            r => answered.push(format!("{field} ({})", token(&r))),
        }
    }
    if c.target.root.join("ungranted.txt").exists() {
        answered.push("an fs.write with a wrong identity was executed".into());
    }
    if answered.is_empty() {
        Outcome::token("closed")
    } else {
        Outcome::with(
            "answered",
            vec![format!("a {kind} differing from the binding only in {} was not closed", answered.join(", "))],
        )
    }
}

fn abort_each_identity_field_wrong(c: &mut Ctx<'_>) -> Outcome {
    frames_with_wrong_identity(c, "abort")
}

fn invoke_each_identity_field_wrong(c: &mut Ctx<'_>) -> Outcome {
    frames_with_wrong_identity(c, "invoke")
}

/// PC-4.5: `maxQueuedRequests` may be 0, its lowest value: bound with one slot and no queue
/// place, one slow search holds the slot and the next invoke is refused `busy` (retryable,
/// no side effect, its retry once the slot is free runs), as `adapter.limits.busy-beyond-queue`
/// judges it with up to two of each. An adapter reading 0 as "no bound" or as a default
/// admits it.
fn limits_busy_with_no_queue(c: &mut Ctx<'_>) -> Outcome {
    busy_beyond(c, 1, 0)
}

/// PC-5.3.errors: "when not even one entry, match or character fits the response budget →
/// `response_too_large`" (a MUST; keeping every entry that fits is the SHOULD of
/// `adapter.limits.response-budget-exact-match`). The runner lays a directory holding one file
/// with a 255-byte name and lists it with a 128-character `requestId` and a 512-character
/// `idempotencyKey`, so that the result line is over 1 KiB (the smallest `maxResponseBytes`);
/// then, bound with `maxResponseBytes` one byte short of that line, lists it again with a key
/// of the same length: not even the one entry fits, and the answer must be
/// `response_too_large` — not an empty listing with `truncated:true`, and never a line over the
/// budget (the judge). Skipped when the line cannot be such a budget within the grant.
fn limits_nothing_fits_list(c: &mut Ctx<'_>) -> Outcome {
    if !granted(c, "fs.list") {
        return Outcome::Skip("the descriptor does not grant fs.list".into());
    }
    let dir = "budget-one-entry";
    let laid = std::fs::create_dir(c.target.root.join(dir))
        .and_then(|_| std::fs::write(c.target.root.join(dir).join("n".repeat(255)), b"x"));
    let out = match laid {
        Ok(()) => nothing_fits(c, dir),
        Err(_) => Outcome::Error("cannot lay the directory of the case".into()),
    };
    let _ = std::fs::remove_dir_all(c.target.root.join(dir));
    out
}

fn nothing_fits(c: &mut Ctx<'_>, dir: &str) -> Outcome {
    let id = "r".repeat(128);
    let key = |last: char| format!("{}{last}", "k".repeat(511));
    let line_len = {
        let mut conn = tryo!(c.bound());
        conn.send(&c.invoke(&id, &key('1'), req::list(dir)));
        let r = conn.recv_for(&id);
        match (&r, data(&r)) {
            (Recv::Frame(_, raw), Some(d)) if d["entries"].as_array().is_some_and(|e| e.len() == 1) => raw.len() + 1,
            _ => {
                return Outcome::Error(format!(
                    "inconclusive: the listing of a directory holding one file was answered `{}`, not its one entry",
                    token(&r)
                ))
            }
        }
    };
    let budget = line_len as i64 - 1;
    if budget < 1024 || budget > c.target.admitted.limits().max_response_bytes {
        return Outcome::Skip(format!("a {line_len}-byte result line cannot be a budget within the grant"));
    }
    let mut b = c.bind_frame();
    b["limits"]["maxResponseBytes"] = json!(budget);
    let mut conn = tryo!(c.bind_with(&b));
    conn.note(&format!(
        "maxResponseBytes {budget}: the listing of the one entry is a {line_len}-byte line, LF included"
    ));
    conn.send(&c.invoke(&id, &key('2'), req::list(dir)));
    let r = conn.recv_for(&id);
    match data(&r) {
        Some(d) => Outcome::with(
            "result:ok",
            vec![format!(
                "with maxResponseBytes {budget}, one byte short of the line holding the one entry, the listing returned {} \
                 entries, truncated {}: not even one entry fits, so the answer is response_too_large (PC-5.3.errors)",
                d["entries"].as_array().map(Vec::len).unwrap_or(0),
                d["truncated"]
            )],
        ),
        None => Outcome::token(token(&r)),
    }
}

/// The file the edit of [`idem_duplicate_after_retryable_failure`] reads: a marker line, then
/// this many bytes of short ASCII lines (no long base64url run, nothing like a handle).
const GROWING_BYTES: usize = 8 << 20;
/// The most the runner appends to it during one attempt.
const GROWING_APPEND_CAP: usize = 4 << 20;
/// Attempts at a retryable failure of the primary.
const GROWING_ATTEMPTS: usize = 4;

/// PC-4.5: every invoke gets one result unless it is itself aborted, a duplicate waiting on
/// its primary too, whatever the primary's outcome. A retryable failure (`io_error`: nothing
/// was changed) is not an outcome to replay for ever, so an adapter either replays it to the
/// waiting duplicate or runs the duplicate in its place; either way the duplicate is answered.
/// The runner provokes one the way a daemon meets it: an `fs.edit` of an 8 MiB file that a
/// runner thread keeps appending to while the adapter reads it (an adapter may refuse a file
/// that grew while it was read, `io_error`), with its duplicate (same key and payload) and an
/// abort probe (of a request never sent) pipelined behind it. The state is confirmed when the
/// edit answers a retryable error other than `busy` and the probe was answered before it (so
/// the duplicate was read while the edit ran); then the duplicate must be answered, and when
/// it answers `ok` the file holds the edit. An adapter that answers every such edit `ok` or
/// with a lasting error never reaches the state: skipped, it is allowed to. Reached but not
/// confirmed: inconclusive.
fn idem_duplicate_after_retryable_failure(c: &mut Ctx<'_>) -> Outcome {
    if !granted(c, "fs.edit") {
        return Outcome::Skip("the descriptor does not grant fs.edit".into());
    }
    let limits = c.target.admitted.limits();
    if limits.max_concurrent_requests.get() as i64 + limits.max_queued_requests < 2 {
        return Outcome::Skip("the grant admits a single request at a time: no duplicate can wait".into());
    }
    let mut lasting = Vec::new();
    let mut unconfirmed = Vec::new();
    for i in 1..=GROWING_ATTEMPTS {
        let file = format!("growing-{i}.txt");
        c.allow(&[&file]);
        let out = growing_attempt(c, &file, i);
        let _ = std::fs::remove_file(c.target.root.join(&file));
        match out {
            Attempt::Done(o) => return o,
            Attempt::Lasting(t) => lasting.push(t),
            Attempt::Unconfirmed(w) => unconfirmed.push(format!("attempt {i}: {w}")),
        }
    }
    if unconfirmed.is_empty() {
        return Outcome::Skip(format!(
            "the adapter answered each edit of a file growing while it was read without a retryable error ({}): \
             the rule for a duplicate whose primary fails retryably was not exercised",
            lasting.join(", ")
        ));
    }
    Outcome::Error(format!(
        "inconclusive: a retryable failure of an edit with its duplicate waiting was never confirmed ({})",
        unconfirmed.join("; ")
    ))
}

enum Attempt {
    Done(Outcome),
    /// The edit was answered without a retryable error: its token.
    Lasting(String),
    /// A retryable failure not confirmed to have had a duplicate waiting: why.
    Unconfirmed(String),
}

/// Appends short lines to `path` until `stop` or [`GROWING_APPEND_CAP`]; counts the bytes.
fn appender(path: std::path::PathBuf, stop: Arc<AtomicBool>, appended: Arc<AtomicUsize>) {
    let Ok(mut f) = std::fs::OpenOptions::new().append(true).open(path) else { return };
    let line = b"appended while the edit reads the file, one more short line of text\n";
    while !stop.load(Ordering::Relaxed) && appended.load(Ordering::Relaxed) < GROWING_APPEND_CAP {
        if f.write_all(line).is_err() {
            return;
        }
        appended.fetch_add(line.len(), Ordering::Relaxed);
        std::thread::sleep(Duration::from_micros(20));
    }
}

fn growing_attempt(c: &mut Ctx<'_>, file: &str, i: usize) -> Attempt {
    let (marker, edited) = (format!("growing-marker-{i}"), format!("growing-edited-{i}"));
    let mut body = format!("{marker}\n").into_bytes();
    let filler = b"the file an edit reads while the runner appends to it, line after line\n";
    while body.len() < GROWING_BYTES {
        body.extend_from_slice(filler);
    }
    let path = c.target.root.join(file);
    if std::fs::write(&path, &body).is_err() {
        return Attempt::Done(Outcome::Error("cannot lay the file of the case".into()));
    }
    let mut conn = match c.bound() {
        Ok(x) => x,
        Err(o) => return Attempt::Done(o),
    };
    let key = format!("growing-key-{i}");
    let (d1, d2, probe) = (format!("growing-{i}-a"), format!("growing-{i}-b"), format!("growing-probe-{i}"));
    let call = || req::edit(file, &[(marker.as_str(), edited.as_str())]);
    let frames = [c.invoke(&d1, &key, call()), c.invoke(&d2, &key, call()), c.abort(&probe, "never-sent-probe")];
    let (stop, appended) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicUsize::new(0)));
    let writer = {
        let (path, stop, appended) = (path.clone(), stop.clone(), appended.clone());
        std::thread::spawn(move || appender(path, stop, appended))
    };
    let started = Instant::now();
    while appended.load(Ordering::Relaxed) == 0 && started.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_micros(50));
    }
    conn.note(&format!(
        "{d1} edits {file} (8 MiB) while the runner appends to it; {d2} is its duplicate; {probe} is an abort probe"
    ));
    let t0 = Instant::now();
    conn.send_all(&frames);
    let mut g = gather(&mut conn, t0, c.step() * 20, |g| g.get(&d1).is_some() && g.get(&probe).is_some());
    stop.store(true, Ordering::Relaxed);
    let _ = writer.join();
    let (Some((d1_at, r1)), Some(probe_at)) = (g.get(&d1).map(|(t, r)| (t, r.clone())), g.at(&probe)) else {
        let missing = if g.get(&d1).is_none() { &d1 } else { &probe };
        return Attempt::Done(Outcome::with(g.end_token(), vec![format!("no answer to {missing}")]));
    };
    let code = r1.error_code().unwrap_or("?").to_string();
    if r1.ok() != Some(false) || r1["error"]["retryable"] != true || code == AdapterCode::Busy.as_str() {
        // Answered before the duplicate could be judged: it has no retryable failure to follow.
        return Attempt::Lasting(if r1.ok() == Some(true) { "ok".into() } else { code });
    }
    if probe_at >= d1_at {
        return Attempt::Unconfirmed(format!(
            "the edit failed {code} after {} ms, before the probe behind its duplicate was answered",
            ms(d1_at)
        ));
    }
    keep_reading(&mut conn, t0, c.step() * 20, &mut g, |g| g.get(&d2).is_some());
    let on_disk = std::fs::read(&path).unwrap_or_default();
    let holds = |s: &str| on_disk.windows(s.len()).any(|w| w == s.as_bytes());
    let mut p = Vec::new();
    match g.get(&d2) {
        None => p.push(format!(
            "{d2}, a duplicate waiting for {d1}, was never answered after {d1} failed {code} (retryable): every \
             invoke gets one result unless it is itself aborted (a duplicate whose primary failed retryably is \
             run in its place or given that failure)"
        )),
        Some((_, r2)) if r2.ok() == Some(true) => {
            if !holds(&edited) || holds(&marker) {
                p.push(format!("{d2} answered ok, yet {file} does not hold the edit"));
            }
        }
        Some((_, r2)) => {
            if holds(&edited) {
                p.push(format!(
                    "{d2} answered {}, yet {file} holds the edit: a failure must leave nothing changed",
                    r2.error_code().unwrap_or("?")
                ));
            }
        }
    }
    let token = if g.get(&d2).is_some() { "duplicate-answered" } else { "duplicate-unanswered" };
    Attempt::Done(Outcome::with(token, p))
}
