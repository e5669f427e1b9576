//! Grades follow knowledge (issue 24 item 6): where the runner minted the grant (`adapter
//! --command`, `selftest`) it knows the grant's operations and ceilings, so a bind outside
//! them is MUST; against a plain socket it takes the descriptor to be the grant and grades the
//! same cases SHOULD. Both the catalogue listing and the reports say which, and a broken
//! adapter fails (MUST) or is warned (SHOULD) accordingly. Real adapters on real sockets.

mod support;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{bin, Adapter, Opts};

const CASES: [&str; 2] = ["adapter.bind.limit-above-grant", "adapter.bind.operation-outside-grant"];

fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(bin()).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

fn listed_levels(args: &[&str]) -> Vec<(String, String)> {
    let mut a = args.to_vec();
    a.extend(["--list", "--format", "json", "--id", "adapter.bind"]);
    let (code, out, err) = run(&a);
    assert_eq!(code, 0, "{err}");
    out.lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| CASES.contains(&v["id"].as_str().unwrap()))
        .map(|v| (v["id"].as_str().unwrap().to_string(), v["level"].as_str().unwrap().to_string()))
        .collect()
}

#[test]
fn the_listing_grades_a_bind_outside_the_grant_by_what_the_runner_knows() {
    let should: Vec<_> = CASES.iter().map(|c| (c.to_string(), "SHOULD".to_string())).collect();
    let must: Vec<_> = CASES.iter().map(|c| (c.to_string(), "MUST".to_string())).collect();
    assert_eq!(listed_levels(&["adapter"]), should, "a plain socket: the grant is not known");
    assert_eq!(listed_levels(&["adapter", "--command", "true {socket}"]), must, "--command mints the grant");
    assert_eq!(listed_levels(&["selftest"]), must, "selftest mints the grant");
    // The level filter follows the grading of the run.
    let (_, out, _) = run(&["selftest", "--list", "--level", "should", "--id", "adapter.bind"]);
    assert!(!CASES.iter().any(|c| out.contains(c)), "{out}");
    let (_, out, _) = run(&["adapter", "--list", "--level", "should", "--id", "adapter.bind"]);
    assert!(CASES.iter().all(|c| out.contains(c)), "{out}");
}

/// A reference adapter on the grant of `a`, with `fault` on.
fn faulty(a: &Adapter, fault: &str) -> (Child, std::path::PathBuf) {
    let sock = a.dir.path().join("faulty.sock");
    let child = Command::new(bin())
        .args(["serve-adapter", "--socket", sock.to_str().unwrap(), "--grants", a.grants.to_str().unwrap()])
        .args(["--fault", fault])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while std::os::unix::net::UnixStream::connect(&sock).is_err() {
        assert!(t.elapsed() < Duration::from_secs(20), "the adapter did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    (child, sock)
}

fn report(args: &[&str]) -> (i32, Value, String) {
    let mut a = args.to_vec();
    a.extend(["--format", "json"]);
    for c in CASES {
        a.extend(["--id", c]);
    }
    let (code, out, err) = run(&a);
    (code, serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out} {err}")), err)
}

fn graded(v: &Value) -> Vec<(String, String, String)> {
    v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let s = |k: &str| r[k].as_str().unwrap().to_string();
            (s("id"), s("level"), s("status"))
        })
        .collect()
}

fn triples(level: &str, status: [&str; 2]) -> Vec<(String, String, String)> {
    CASES.iter().zip(status).map(|(c, s)| (c.to_string(), level.to_string(), s.to_string())).collect()
}

#[test]
fn a_plain_socket_warns_where_a_minted_grant_fails() {
    // Plain socket: the descriptor (five operations, no fs.edit) is taken to be the grant.
    let a = Adapter::start(Opts { operations: "fs.list,fs.stat,fs.read,fs.search,fs.write", ..Opts::default() });
    let d = a.dir.path().join("d.json");
    std::fs::write(&d, serde_json::to_vec(&a.descriptor).unwrap()).unwrap();
    let plain = |sock: &std::path::Path| {
        report(&[
            "adapter",
            sock.to_str().unwrap(),
            "--descriptor",
            d.to_str().unwrap(),
            "--root",
            a.root.to_str().unwrap(),
        ])
    };
    let (code, v, err) = plain(&a.socket);
    assert_eq!((code, v["grant"].as_str()), (0, Some("descriptor")), "{err}");
    assert_eq!(graded(&v), triples("SHOULD", ["pass", "pass"]));
    for (fault, status) in
        [("accept-limits-above-grant", ["warn", "pass"]), ("accept-operations-outside-grant", ["pass", "warn"])]
    {
        let (mut child, sock) = faulty(&a, fault);
        let (code, v, err) = plain(&sock);
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(code, 0, "a SHOULD warning never fails the run: {err}");
        assert_eq!(graded(&v), triples("SHOULD", status), "{fault}");
    }

    // The runner mints the grant (selftest): the same cases are MUST, and the same faults fail.
    let (code, v, err) = report(&["selftest"]);
    assert_eq!((code, v["grant"].as_str()), (0, Some("minted")), "{err}");
    assert_eq!(graded(&v), triples("MUST", ["pass", "pass"]), "operation-outside-grant runs on the second grant");
    for (fault, status) in
        [("accept-limits-above-grant", ["fail", "pass"]), ("accept-operations-outside-grant", ["pass", "fail"])]
    {
        let (code, v, err) = report(&["selftest", "--fault", fault]);
        assert_eq!(code, 1, "{fault}: {err}");
        assert_eq!(graded(&v), triples("MUST", status), "{fault}");
    }

    // --command: the runner mints the grant for the command it starts.
    let cmd = format!("exec {} serve-adapter --socket {{socket}} --grants {{grants}}", bin());
    let (code, v, err) = report(&["adapter", "--command", &cmd]);
    assert_eq!((code, v["grant"].as_str()), (0, Some("minted")), "{err}");
    assert_eq!(graded(&v), triples("MUST", ["pass", "pass"]));
    let human = run(&["adapter", "--command", &cmd, "--id", CASES[0]]).1;
    assert!(human.contains("levels: the runner minted the grant"), "{human}");
}
