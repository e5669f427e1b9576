//! The daemon runner against the reference daemon (real processes, real sockets, restarts
//! through a restart command), and against a deliberately broken daemon.

mod support;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::bin;

fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(bin()).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[test]
fn the_reference_daemon_passes_every_case_including_restart() {
    let dir = tempfile::Builder::new().prefix("pc-drun").tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let d = dir.path();
    let script = d.join("restart.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nkill -9 $(cat {pid} 2>/dev/null) 2>/dev/null\nsleep 0.1\n{bin} serve-daemon --socket {sock} --state-dir {state} >> {log} 2>&1 &\necho $! > {pid}\n",
            pid = d.join("pid").display(),
            bin = bin(),
            sock = d.join("d.sock").display(),
            state = d.join("state").display(),
            log = d.join("log").display(),
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o700)).unwrap();
    let stop = d.join("stop.sh");
    std::fs::write(&stop, pi_conform::conform::killmatrix::stop_script(&d.join("pid"))).unwrap();
    assert!(Command::new("sh").arg(&script).status().unwrap().success());
    let t = Instant::now();
    while std::os::unix::net::UnixStream::connect(d.join("d.sock")).is_err() {
        assert!(t.elapsed() < Duration::from_secs(20));
        std::thread::sleep(Duration::from_millis(20));
    }
    let junit = d.join("junit.xml");
    let (code, out, err) = run(&[
        "daemon",
        d.join("d.sock").to_str().unwrap(),
        "--cwd",
        d.join("cwd").to_str().unwrap(),
        "--restart-cmd",
        script.to_str().unwrap(),
        "--stop-cmd",
        &format!("sh {}", stop.display()),
        "--scan-path",
        d.join("state").to_str().unwrap(),
        "--scan-path",
        d.join("log").to_str().unwrap(),
        "--format",
        "json",
        "--junit",
        junit.to_str().unwrap(),
    ]);
    let _ = Command::new("sh").arg("-c").arg(format!("kill -9 $(cat {})", d.join("pid").display())).status();
    assert_eq!(code, 0, "{out}\n{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let results = v["results"].as_array().unwrap();
    assert!(results.iter().filter(|r| !r["id"].as_str().unwrap().starts_with("vector:")).count() >= 50);
    // With --restart-cmd, --stop-cmd and --scan-path no case is skipped; only vectors that cannot apply on
    // a live socket are, each with its reason.
    for r in results.iter().filter(|r| r["status"] == "skip") {
        assert!(r["id"].as_str().unwrap().starts_with("vector:"), "{r}");
        assert!(!r["reason"].as_str().unwrap().is_empty(), "{r}");
    }
    // Every golden command and descriptor vector is replayed (or skipped with its reason),
    // and the reference daemon passes every one replayed, warnings included.
    let vectors: Vec<&Value> = results.iter().filter(|r| r["id"].as_str().unwrap().starts_with("vector:")).collect();
    assert!(vectors.len() > 500, "{}", vectors.len());
    assert!(vectors.iter().all(|r| r["status"] == "pass" || r["status"] == "skip"), "{out}");
    // The to-daemon frame vectors are among them: a bad result fails the adapter closed, a
    // valid one completes; an `aborted` frame answers the abort of a timed-out call, a
    // `revoked` one goes unsolicited ahead of a result.
    let by = |id: &str| *vectors.iter().find(|r| r["id"] == id).unwrap_or_else(|| panic!("{id}"));
    assert_eq!(by("vector:frame.result.fs-list.entry-name-dot")["status"], "pass");
    assert_eq!(by("vector:frame.result.error.valid")["status"], "pass");
    assert_eq!(by("vector:frame.bound.limits.changed")["status"], "pass");
    for (id, actual) in [
        ("vector:frame.aborted.true.valid", "acknowledged"),
        ("vector:frame.aborted.extra-key", "failed-closed"),
        ("vector:frame.revoked.valid", "ignored"),
        ("vector:frame.revoked.identity.host-instance-id", "failed-closed"),
    ] {
        let r = by(id);
        assert_eq!((&r["status"], &r["actual"]), (&json!("pass"), &json!(actual)), "{r}");
    }
    // The session vectors (vectors/sessions/daemon.json) run as cases of the suite.
    let session = results.iter().find(|r| r["id"] == "daemon.envelope.validation-keeps-open").unwrap();
    assert_eq!((&session["status"], &session["actual"]), (&json!("pass"), &json!("error:unknown_operation+ok")));
    assert!(std::fs::read_to_string(&junit).unwrap().contains("<testsuite"));
}

#[test]
fn restart_cases_skip_without_a_restart_command_and_list_works() {
    let (code, out, _) = run(&["daemon", "--list"]);
    assert_eq!(code, 0);
    assert!(out.lines().count() >= 50);
    assert!(out.contains("daemon.restart.reprovision-clears"));
}

/// A fake daemon on `sock`: every line gets the reply `answer` builds from the command.
fn fake_daemon(sock: &std::path::Path, answer: fn(&Value) -> Value) {
    let l = UnixListener::bind(sock).unwrap();
    std::fs::set_permissions(sock, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(s) = s else { break };
            std::thread::spawn(move || {
                let mut w = s.try_clone().unwrap();
                for line in BufReader::new(s).lines().map_while(Result::ok) {
                    let v: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
                    let _ = writeln!(w, "{}", answer(&v));
                }
            });
        }
    });
}

/// A broken daemon: it answers every line `ok:true` with an empty data object as version
/// "1.0", never closes, never binds.
fn broken_daemon(sock: &std::path::Path) {
    fake_daemon(sock, |v| {
        let rid = v["requestId"].as_str().unwrap_or("x");
        let data = if v["operation"] == "handshake" {
            json!({"host": {"hostInstanceId": "broken-host"}, "supportedProtocolVersions": ["1.0", "2.0"]})
        } else {
            json!({})
        };
        json!({"protocolVersion": "1.0", "kind": "response", "requestId": rid, "hostInstanceId": "broken-host", "ok": true, "data": data})
    });
}

#[test]
fn a_broken_daemon_fails_on_named_cases_with_diagnostics() {
    let dir = tempfile::Builder::new().prefix("pc-dbroken").tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let sock = dir.path().join("broken.sock");
    broken_daemon(&sock);
    let (code, out, err) = run(&[
        "daemon",
        sock.to_str().unwrap(),
        "--id",
        "daemon.handshake",
        "--id",
        "daemon.envelope.echo",
        "--id",
        "daemon.admission.check-8",
        "--id",
        "daemon.v1",
        "--id",
        "vector:cmd.operation.",
        "--time-scale",
        "0.25",
    ]);
    assert_eq!(code, 1, "{out}\n{err}");
    // Replayed golden vectors fail on a daemon that accepts what they refuse.
    assert!(out.contains("FAIL vector:cmd.operation.missing "), "{out}");
    assert!(out.contains("Actual:      accepted"), "{out}");
    for id in [
        "daemon.handshake.payload-required",
        "daemon.handshake.supported-versions",
        "daemon.envelope.echo-minor",
        "daemon.admission.check-8-binding-mismatch",
        "daemon.v1.tools-string",
    ] {
        assert!(out.contains(&format!("FAIL {id} ")), "{id} not failed:\n{out}");
    }
    assert!(out.contains("supportedProtocolVersions"), "the diagnostic names the Pi Daemon 0.3.3 variant:\n{out}");
}

/// A daemon that refuses every command but the handshake with `invalid_field` naming
/// `extensions`: what Pi Daemon 0.3.3 answered to opens whose `resources` held `tools` alone.
/// Its responses are valid records, so only the reasons are wrong.
fn wrong_reason_daemon(sock: &std::path::Path) {
    fake_daemon(sock, |v| {
        let rid = v["requestId"].as_str().unwrap_or("x");
        let version = v["protocolVersion"].as_str().unwrap_or("1.0");
        if v["operation"] == "handshake" {
            json!({"protocolVersion": version, "kind": "response", "requestId": rid, "hostInstanceId": "wrong-reason-host", "ok": true,
                "data": {"host": {"hostInstanceId": "wrong-reason-host"}}})
        } else {
            json!({"protocolVersion": version, "kind": "response", "requestId": rid, "hostInstanceId": "wrong-reason-host", "ok": false,
                "error": {"code": "invalid_field", "message": "extensions must be a string", "retryable": false, "details": {"field": "extensions"}}})
        }
    });
}

#[test]
fn a_refusal_for_another_reason_makes_negative_cases_inconclusive_never_pass() {
    let dir = tempfile::Builder::new().prefix("pc-dwrong").tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let sock = dir.path().join("wrong.sock");
    wrong_reason_daemon(&sock);
    let (code, out, err) = run(&[
        "daemon",
        sock.to_str().unwrap(),
        "--cwd",
        dir.path().join("cwd").to_str().unwrap(),
        "--id",
        "daemon.admission",
        "--id",
        "daemon.v1",
        "--id",
        "daemon.bind",
        "--id",
        "daemon.policy",
        "--id",
        "daemon.tools",
        "--format",
        "json",
        "--time-scale",
        "0.25",
    ]);
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}\n{out}\n{err}"));
    let results = v["results"].as_array().unwrap();
    assert!(results.len() >= 30, "{out}");
    for r in results {
        let (id, status, reason) =
            (r["id"].as_str().unwrap(), r["status"].as_str().unwrap(), r["reason"].as_str().unwrap());
        assert_ne!(status, "pass", "{id} passed on a refusal it did not provoke: {reason}");
        // No refusal names the member a case faulted, so every negative open case is
        // inconclusive; positive cases fail or are inconclusive (their precondition failed).
        if id.starts_with("daemon.admission.") || id.starts_with("daemon.v1.") || id == "daemon.bind.endpoint-insecure"
        {
            assert_eq!(status, "error", "{id}: {reason}");
            assert!(reason.contains("inconclusive") && reason.contains("extensions"), "{id}: {reason}");
        }
        // Diagnostics never name a variant they did not observe.
        assert!(!reason.contains("0.3.3 variant"), "{id} names a variant it did not observe: {reason}");
    }
    assert_ne!(code, 0, "a run with harness errors is never green");
}

/// The reference daemon with one fault switched on, on a private socket; killed on drop.
struct Faulty(std::process::Child, tempfile::TempDir);
impl Drop for Faulty {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
fn faulty_daemon(fault: &str) -> Faulty {
    let dir = tempfile::Builder::new().prefix("pc-dfault").tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let sock = dir.path().join("d.sock");
    let child = Command::new(bin())
        .args(["serve-daemon", "--socket", sock.to_str().unwrap(), "--state-dir"])
        .arg(dir.path().join("state"))
        .args(["--fault", fault])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while std::os::unix::net::UnixStream::connect(&sock).is_err() {
        assert!(t.elapsed() < Duration::from_secs(20));
        std::thread::sleep(Duration::from_millis(20));
    }
    Faulty(child, dir)
}

#[test]
fn aborted_vectors_fail_on_a_daemon_that_rejects_a_matching_aborted() {
    let d = faulty_daemon("reject-aborted");
    let sock = d.1.path().join("d.sock");
    let (code, out, err) =
        run(&["daemon", sock.to_str().unwrap(), "--id", "vector:frame.aborted.", "--format", "json"]);
    assert_eq!(code, 1, "{out}\n{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let results = v["results"].as_array().unwrap();
    let by = |id: &str| results.iter().find(|r| r["id"] == id).unwrap_or_else(|| panic!("{id}: {out}"));
    // A valid acknowledgement of the daemon's own abort failed the connection: the case fails
    // and says why.
    let r = by("vector:frame.aborted.true.valid");
    assert_eq!(r["status"], "fail", "{r}");
    assert!(r["actual"].as_str().unwrap().starts_with("acknowledged, with 1 violation"), "{r}");
    assert!(r.to_string().contains("failed the adapter connection after a valid aborted"), "{r}");
    // An invalid one fails the connection either way: still a pass.
    assert_eq!(by("vector:frame.aborted.extra-key")["status"], "pass", "{out}");
}

#[test]
fn revoked_vectors_fail_on_a_daemon_that_does_not_judge_revoked() {
    let d = faulty_daemon("unchecked-revoked");
    let sock = d.1.path().join("d.sock");
    let (code, out, err) =
        run(&["daemon", sock.to_str().unwrap(), "--id", "vector:frame.revoked.", "--format", "json"]);
    assert_eq!(code, 1, "{out}\n{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let results = v["results"].as_array().unwrap();
    let by = |id: &str| results.iter().find(|r| r["id"] == id).unwrap_or_else(|| panic!("{id}: {out}"));
    // A revoked with an extra key, sent ahead of a result, is ignored: the call succeeds and
    // the connection stays usable.
    let r = by("vector:frame.revoked.extra-key");
    assert_eq!(r["status"], "fail", "{r}");
    assert!(r["actual"].as_str().unwrap().starts_with("failed-closed, with 2 violations"), "{r}");
    assert!(r.to_string().contains("accepted as a successful tool result"), "{r}");
    assert!(r.to_string().contains("a later tool call still reached the adapter"), "{r}");
    // A valid revoked is ignored by the faulty daemon as by the reference.
    assert_eq!(by("vector:frame.revoked.valid")["status"], "pass", "{out}");
}

#[test]
fn frame_vectors_fail_on_a_daemon_that_accepts_a_bad_bound() {
    let d = faulty_daemon("ignore-bound-echo");
    let sock = d.1.path().join("d.sock");
    let (code, out, err) = run(&["daemon", sock.to_str().unwrap(), "--id", "vector:frame.bound.", "--format", "json"]);
    assert_eq!(code, 1, "{out}\n{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let results = v["results"].as_array().unwrap();
    let by = |id: &str| results.iter().find(|r| r["id"] == id).unwrap_or_else(|| panic!("{id}: {out}"));
    // A bound whose limits differ from the bind is accepted by the broken daemon: the vector
    // case fails on the rule it replays.
    for id in ["vector:frame.bound.limits.changed", "vector:frame.bound.operations.reordered"] {
        let r = by(id);
        assert_eq!((&r["status"], &r["actual"]), (&json!("fail"), &json!("opened")), "{r}");
        assert!(r.to_string().contains("a bound violation must fail the open"), "{r}");
    }
    // A valid bound still opens: the fault does not touch it.
    assert_eq!(by("vector:frame.bound.valid")["status"], "pass", "{out}");
}
