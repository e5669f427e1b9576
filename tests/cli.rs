//! The real `pi-conform` binary: verdicts, output formats and exit codes.

use std::io::Write;
use std::process::{Command, Stdio};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_pi-conform"))
}

fn base(name: &str) -> String {
    let p = format!("{}/vectors/bases/{name}.json", env!("CARGO_MANIFEST_DIR"));
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
    serde_json::to_string(&v).unwrap()
}

fn run(args: &[&str], stdin: &str) -> (i32, String, String) {
    let mut child =
        bin().args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    // A command that refuses its arguments may exit before reading: a broken pipe here is
    // not the test's subject (its exit code and stderr are).
    if let Err(e) = child.stdin.take().unwrap().write_all(stdin.as_bytes()) {
        assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "{e}");
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[test]
fn worked_example_open_is_valid_and_exit_0() {
    let (code, out, _) = run(&["validate"], &format!("{}\n", base("open-v2")));
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("line 1: valid command"), "{out}");
}

#[test]
fn one_invalid_line_gives_exit_1_with_code_and_field() {
    let input = format!(
        "{}\n{{\"protocolVersion\":\"3.0\",\"requestId\":\"r\",\"operation\":\"handshake\",\"payload\":{{}}}}\n",
        base("handshake")
    );
    let (code, out, _) = run(&["validate", "--kind", "command"], &input);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("line 2: invalid command: incompatible_protocol field=protocolVersion"), "{out}");
    assert!(out.contains("1 valid, 1 invalid"), "{out}");
}

#[test]
fn json_format_is_one_object_per_line() {
    let (code, out, _) = run(&["validate", "--format", "json"], "{\"a\":1,\"a\":2}\n");
    assert_eq!(code, 1);
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["line"], 1);
    assert_eq!(v["result"]["verdict"], "invalid");
    assert_eq!(v["result"]["code"], "invalid_json");
    assert_eq!(v["result"]["field"], "line");
}

#[test]
fn frames_are_judged_against_a_descriptor_file() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("d.json");
    std::fs::write(&d, base("descriptor")).unwrap();
    let bind = base("bind");
    let bound = base("bound");
    assert_eq!(bind.len() + 1, 492, "SPEC §0.1: bind is 492 bytes with its LF");
    assert_eq!(bound.len() + 1, 431, "SPEC §0.1: bound is 431 bytes with its LF");
    let ds = d.to_str().unwrap();
    let (code, out, _) =
        run(&["validate", "--kind", "frame", "--descriptor", ds], &format!("{bind}\n{}\n", base("invoke")));
    assert_eq!(code, 0, "{out}");
    let (code, out, _) = run(
        &["validate", "--kind", "frame", "--descriptor", ds, "--direction", "to-daemon"],
        &format!("{bound}\n{bind}\n"),
    );
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("line 1: valid frame"), "{out}");
    assert!(out.contains("line 2: invalid frame: adapter_secret_reflected field=frame (close)"), "{out}");
    assert!(!out.contains("aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789_-AB"), "handle in output: {out}");
}

#[test]
fn usage_errors_exit_2() {
    let (code, _, err) = run(&["validate", "--kind", "frame"], "{}\n");
    assert_eq!(code, 2);
    assert!(err.contains("--descriptor"), "{err}");
    let (code, _, err) = run(&["validate", "/nonexistent/file.ndjson"], "");
    assert_eq!(code, 2);
    assert!(err.contains("cannot read"), "{err}");
    let (code, _, _) = run(&["validate", "--kind", "nonsense"], "");
    assert_eq!(code, 2);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("d.json");
    std::fs::write(&d, "{\"protocolVersion\":\"1.0\"}").unwrap();
    let (code, _, err) = run(&["validate", "--kind", "frame", "--descriptor", d.to_str().unwrap()], "{}\n");
    assert_eq!(code, 2);
    assert!(err.contains("refused"), "{err}");
}

#[test]
fn vectors_check_passes_and_catches_a_wrong_expectation() {
    let (code, out, _) = run(&["vectors", "--check"], "");
    assert_eq!(code, 0, "{out}");
    assert!(out.contains(" passed, 0 failed"), "{out}");
    // A copy of the vectors with one expectation changed must fail, naming that vector.
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("vectors");
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("bases")).unwrap();
    for e in std::fs::read_dir(src.join("bases")).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dir.path().join("bases").join(e.file_name())).unwrap();
    }
    let text = std::fs::read_to_string(src.join("paths.json")).unwrap();
    let mut vs: Vec<serde_json::Value> = serde_json::from_str(&text).unwrap();
    let victim = vs.iter_mut().find(|v| v["expect"]["verdict"] == "invalid").unwrap();
    victim["expect"]["field"] = "not-the-field".into();
    let id = victim["id"].as_str().unwrap().to_string();
    std::fs::write(dir.path().join("paths.json"), serde_json::to_string(&vs).unwrap()).unwrap();
    let (code, out, _) = run(&["vectors", "--check", "--dir", dir.path().to_str().unwrap()], "");
    assert_eq!(code, 1, "{out}");
    assert!(out.contains(&format!("MISMATCH {id}")), "{out}");
    assert!(out.contains(" passed, 1 failed"), "{out}");
}

#[test]
fn vectors_list_names_ids_and_clauses() {
    let (code, out, _) = run(&["vectors", "--id", "fit."], "");
    assert_eq!(code, 0);
    assert!(out.lines().count() >= 10, "{out}");
    assert!(out.lines().all(|l| l.starts_with("fit.")), "{out}");
    assert!(out.contains("PC-3.3"), "{out}");
}

#[test]
fn serve_daemon_refuses_a_host_instance_id_no_descriptor_could_bind() {
    // Empty, over 128 UTF-16 units (64 astral characters are 128 units, 65 are 130), and a
    // control character: each is refused before the socket exists.
    let long = "\u{1F600}".repeat(65);
    for id in ["", long.as_str(), "host\u{7f}1"] {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("d.sock");
        let state = dir.path().join("state");
        let (code, _, err) = run(
            &[
                "serve-daemon",
                "--socket",
                sock.to_str().unwrap(),
                "--state-dir",
                state.to_str().unwrap(),
                "--host-instance",
                id,
            ],
            "",
        );
        assert_ne!(code, 0, "{id:?}: {err}");
        assert!(err.contains("host instance id must be 1-128 UTF-16 units"), "{id:?}: {err}");
        assert!(!sock.exists(), "{id:?}: the socket was bound");
    }
}

/// `grant` refuses a zero `--max-concurrent-requests` or `--max-idempotency-keys` with a typed
/// error naming the limit, and writes no grant.
#[test]
fn grant_refuses_a_zero_limit() {
    let dir = tempfile::tempdir().unwrap();
    let grants = dir.path().join("grants.json");
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    for (flag, name) in
        [("--max-concurrent-requests", "maxConcurrentRequests"), ("--max-idempotency-keys", "maxIdempotencyKeys")]
    {
        let out = bin()
            .args(["grant", "--grants"])
            .arg(&grants)
            .arg("--socket")
            .arg(dir.path().join("a.sock"))
            .arg("--root")
            .arg(&root)
            .args(["--host-instance", "h", "--session", "s", "--generation", "1", flag, "0"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{flag} 0 must be refused");
        assert!(stderr.contains(&format!("limits.{name} must be an integer from 1 to 2^53-1")), "{stderr}");
        assert!(out.stdout.is_empty(), "no descriptor is printed");
        assert!(!grants.exists(), "no grant is written");
    }
}
