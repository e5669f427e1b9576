//! The reference adapter driven by a client that shares no code with this crate:
//! `scripts/independent_client.py` (Python's standard library only) mints a grant with the
//! real binary, starts the real `serve-adapter`, and checks every operation and SPEC §5.3
//! error code over the socket literally. Then the same client against deliberately broken
//! adapters (hidden `--fault` switches), each failing on the check that names its rule.

use std::process::Command;

fn run(faults: &[&str]) -> (i32, String) {
    let args: Vec<String> = faults.iter().map(|f| format!("--fault {f}")).collect();
    let out = Command::new("python3")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/independent_client.py"))
        .arg(env!("CARGO_BIN_EXE_pi-conform"))
        .env("PI_INDEPENDENT_SERVE_ARGS", args.join(" "))
        .output()
        .expect("python3 runs (the machine's CPython; the client needs no package)");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), text)
}

#[test]
fn every_operation_and_error_code_as_an_independent_client_sees_them() {
    let (code, out) = run(&[]);
    assert_eq!(code, 0, "{out}");
    let passed: usize = out
        .split_whitespace()
        .zip(out.split_whitespace().skip(1))
        .find(|(_, w)| *w == "checks")
        .and_then(|(n, _)| n.parse().ok())
        .unwrap_or_else(|| panic!("no check count in {out:?}"));
    assert!(passed > 400, "only {passed} checks ran: {out}");
}

/// Each broken adapter fails, and on the check of the rule it breaks.
#[test]
fn the_independent_client_catches_broken_adapters() {
    for (fault, why) in [
        ("follow-symlinks", "fs.stat {\"path\": \"link\"}: expected symlink_refused"),
        ("read-lossy", "fs.read {\"path\": \"bad.bin\"}: expected not_utf8"),
        ("edit-first-occurrence", "expected edit_ambiguous"),
        ("no-capability-scan", "the handle appears in bytes the adapter sent"),
        ("list-includes-symlinks", "fs.list . names"),
        ("no-idempotency", "replay differs"),
        ("revoke-no-reply", "revoked expected"),
        ("accept-handle-in-invoke", "an invoke carrying the handle was answered"),
        ("accept-any-handle", "a bind with an unknown handle was answered"),
    ] {
        let (code, out) = run(&[fault]);
        assert_eq!(code, 1, "--fault {fault} was not caught: {out}");
        assert!(out.contains(why), "--fault {fault} failed, but not on {why:?}: {out}");
    }
    // What the broken adapter leaked is reported with the handle redacted.
    let (_, out) = run(&["no-capability-scan"]);
    assert!(out.contains("token=<handle>"), "{out}");
}
