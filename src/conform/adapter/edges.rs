//! Adapter cases at the edges of rules other cases test in their middle: a write through a
//! symlink whose target does not exist, every operation sent ungranted, a handle one
//! character short, long or of another case, a non-UTF-8 byte just outside a read window, a
//! named file holding NUL searched, an edit of a missing file. Each is a MUST of SPEC.md; a
//! broken adapter that passes the nearby cases fails here.

use std::path::Path;

use serde_json::{json, Value};

use super::cases::{busy_beyond, changed, granted, ok_with, CaseFn};
use super::conn::Recv;
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
