//! The reports of real runs: the JSON report against `schemas/report.schema.json`, JUnit's
//! encoding of SHOULD warnings, and the HTML page (self-contained, every case present, the
//! capability handle never). Real adapters and a real daemon on real sockets.

mod support;

use std::os::unix::fs::PermissionsExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{bin, Adapter, Opts};

fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(bin()).args(args).env_remove("NO_COLOR").output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

fn schema() -> jsonschema::Validator {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/schemas/report.schema.json")).unwrap();
    let s: Value = serde_json::from_str(&text).unwrap();
    jsonschema::meta::validate(&s).expect("the report schema is valid under its meta-schema");
    jsonschema::draft202012::options().should_validate_formats(true).build(&s).expect("the report schema compiles")
}

fn assert_valid(v: &Value) {
    let errors: Vec<String> = schema().iter_errors(v).map(|e| format!("{} at {}", e, e.instance_path())).collect();
    assert!(errors.is_empty(), "report does not match its schema: {errors:#?}");
}

fn killed(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// A second reference adapter on the grant of `a`, with one rule broken on purpose.
fn faulty(a: &Adapter, name: &str, faults: &[&str]) -> (Child, std::path::PathBuf) {
    let sock = a.dir.path().join(name);
    let mut cmd = Command::new(bin());
    cmd.args(["serve-adapter", "--socket", sock.to_str().unwrap(), "--grants", a.grants.to_str().unwrap()]);
    for f in faults {
        cmd.args(["--fault", f]);
    }
    let child = cmd.stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let t = Instant::now();
    while std::os::unix::net::UnixStream::connect(&sock).is_err() {
        assert!(t.elapsed() < Duration::from_secs(20), "the adapter did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    (child, sock)
}

#[test]
fn json_reports_of_real_runs_match_the_schema_and_the_schema_is_not_vacuous() {
    let a = Adapter::start(Opts::default());
    let d = a.dir.path().join("d.json");
    std::fs::write(&d, serde_json::to_vec(&a.descriptor).unwrap()).unwrap();
    // Failures, a SHOULD warning, a known failure, a stale baseline entry and cases not run.
    let (mut child, sock) = faulty(&a, "f.sock", &["wrong-not-found-code", "accept-limits-above-grant"]);
    let baseline = a.dir.path().join("baseline.txt");
    std::fs::write(&baseline, "adapter.stat.file\nadapter.stat.directory\nno.such.case\n").unwrap();
    let (code, out, err) = run(&[
        "adapter",
        sock.to_str().unwrap(),
        "--descriptor",
        d.to_str().unwrap(),
        "--root",
        a.root.to_str().unwrap(),
        "--id",
        "adapter.bind.limit-above-grant",
        "--id",
        "adapter.stat",
        "--id",
        "adapter.read",
        "--baseline",
        baseline.to_str().unwrap(),
        "--max-fail",
        "1",
        "--format",
        "json",
    ]);
    killed(&mut child);
    assert_eq!(code, 1, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_valid(&v);
    assert_eq!(v["schemaVersion"], 1);
    assert_eq!(v["tool"], json!({"name": "pi-conform", "version": env!("CARGO_PKG_VERSION")}));
    assert_eq!(v["target"], sock.to_str().unwrap());
    assert_eq!(v["summary"]["warned"], 1, "{out}");
    assert_eq!(v["summary"]["failed"], 1, "{out}");
    assert_eq!(v["stale"], json!(["adapter.stat.file", "adapter.stat.directory"]));
    assert_eq!(v["unknownBaselineIds"], json!(["no.such.case"]));
    assert!(v["summary"]["notRun"].as_u64().unwrap() > 0, "{out}");
    let sum: u64 = v["results"].as_array().unwrap().iter().map(|r| r["durationMs"].as_u64().unwrap()).sum();
    assert!(v["durationMs"].as_u64().unwrap() >= sum, "the run lasts at least as long as its cases");
    // The timestamp is now-ish and UTC.
    let started = v["startedAt"].as_str().unwrap();
    assert!(started.ends_with('Z') && started.len() == 24, "{started}");
    // The schema refuses what a consumer must not receive.
    for (path, bad) in [
        ("/schemaVersion", json!(2)),
        ("/durationMs", json!(1.5)),
        ("/results/0/status", json!("passed")),
        ("/results/0/transcript", json!([{"dir": "?", "text": ""}])),
        ("/startedAt", json!("yesterday")),
    ] {
        let mut w = v.clone();
        *w.pointer_mut(path).unwrap() = bad.clone();
        assert!(!schema().is_valid(&w), "{path} = {bad} accepted");
    }
    let mut w = v.clone();
    w.as_object_mut().unwrap().remove("tool");
    assert!(!schema().is_valid(&w), "a report without the tool accepted");

    // A clean full selftest report matches too.
    let (code, out, err) = run(&["selftest", "--format", "json"]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_valid(&v);
    assert_eq!(v["verdict"], "CONFORMANT");
}

#[test]
fn a_daemon_report_matches_the_schema() {
    let dir = tempfile::Builder::new().prefix("pc-drep").tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let sock = dir.path().join("d.sock");
    let mut daemon = Command::new(bin())
        .args(["serve-daemon", "--socket", sock.to_str().unwrap(), "--state-dir"])
        .arg(dir.path().join("state"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while std::os::unix::net::UnixStream::connect(&sock).is_err() {
        assert!(t.elapsed() < Duration::from_secs(20), "the daemon did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    let (code, out, err) = run(&[
        "daemon",
        sock.to_str().unwrap(),
        "--cwd",
        dir.path().join("cwd").to_str().unwrap(),
        "--tag",
        "handshake",
        "--format",
        "json",
    ]);
    killed(&mut daemon);
    assert_eq!(code, 0, "{out}\n{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["suite"], "daemon");
    assert!(!v["results"].as_array().unwrap().is_empty());
    assert_valid(&v);
}

/// One `<testcase>`: name, whether it has a `<failure>`, its properties, its system-out.
type JCase = (String, bool, Vec<(String, String)>, String);

/// Every `<testcase>` of a JUnit document.
fn testcases(xml: &str) -> Vec<JCase> {
    use quick_xml::events::Event;
    let mut r = quick_xml::Reader::from_str(xml);
    let mut out = Vec::new();
    let mut cur: Option<JCase> = None;
    let mut in_out = false;
    loop {
        match r.read_event().expect("well-formed JUnit XML") {
            Event::Eof => break,
            Event::Start(e) | Event::Empty(e) => {
                let attr = |k: &[u8]| {
                    e.attributes()
                        .flatten()
                        .find(|a| a.key.as_ref() == k)
                        .map(|a| a.unescape_value().unwrap().to_string())
                        .unwrap_or_default()
                };
                match e.name().as_ref() {
                    b"testcase" => {
                        if let Some(c) = cur.take() {
                            out.push(c);
                        }
                        cur = Some((attr(b"name"), false, vec![], String::new()));
                    }
                    b"failure" => cur.as_mut().unwrap().1 = true,
                    b"property" => {
                        if let Some(c) = cur.as_mut() {
                            c.2.push((attr(b"name"), attr(b"value")));
                        }
                    }
                    b"system-out" => in_out = true,
                    _ => {}
                }
            }
            Event::Text(t) if in_out => {
                if let Some(c) = cur.as_mut() {
                    c.3.push_str(&t.decode().unwrap());
                }
            }
            Event::End(e) if e.name().as_ref() == b"system-out" => in_out = false,
            _ => {}
        }
    }
    out.extend(cur);
    out
}

#[test]
fn junit_keeps_should_warnings_as_passed_cases_with_a_note_and_must_failures_as_failures() {
    let a = Adapter::start(Opts::default());
    let d = a.dir.path().join("d.json");
    std::fs::write(&d, serde_json::to_vec(&a.descriptor).unwrap()).unwrap();
    let (mut child, sock) = faulty(&a, "j.sock", &["wrong-not-found-code", "accept-limits-above-grant"]);
    let junit = a.dir.path().join("r.xml");
    let (code, out, err) = run(&[
        "adapter",
        sock.to_str().unwrap(),
        "--descriptor",
        d.to_str().unwrap(),
        "--root",
        a.root.to_str().unwrap(),
        "--id",
        "adapter.bind.limit-above-grant",
        "--id",
        "adapter.stat.not-found",
        "--id",
        "adapter.stat.file",
        "--junit",
        junit.to_str().unwrap(),
    ]);
    killed(&mut child);
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(out.contains("WARN adapter.bind.limit-above-grant (PC-4.5, SHOULD)"), "{out}");
    let xml = std::fs::read_to_string(&junit).unwrap();
    let cases = testcases(&xml);
    let get = |id: &str| cases.iter().find(|c| c.0 == id).unwrap_or_else(|| panic!("{id} missing:\n{xml}"));
    let warn = get("adapter.bind.limit-above-grant");
    assert!(!warn.1, "a SHOULD warning is no <failure>:\n{xml}");
    assert!(warn.2.iter().any(|(k, v)| k == "pi-conform.warning" && !v.is_empty()), "{xml}");
    assert!(warn.3.starts_with("WARNING (SHOULD, not a failure): "), "{xml}");
    assert!(get("adapter.stat.not-found").1, "a MUST failure is a <failure>");
    assert!(!get("adapter.stat.file").1);
    assert!(xml.contains("<failure") && xml.contains("type=\"MUST\""), "{xml}");
    assert!(xml.contains("failures=\"1\""), "one failure in the suite counts:\n{xml}");
}

#[test]
fn the_html_report_is_one_self_contained_page_without_the_handle() {
    let a = Adapter::start(Opts::default());
    let d = a.dir.path().join("d.json");
    std::fs::write(&d, serde_json::to_vec(&a.descriptor).unwrap()).unwrap();
    // This adapter echoes the handle in its `bound` (a PC-4.2 failure): the transcript holds a
    // line that carried the handle.
    let (mut child, sock) = faulty(&a, "h.sock", &["bound-leaks-handle", "wrong-not-found-code"]);
    let html = a.dir.path().join("r.html");
    let junit = a.dir.path().join("r.xml");
    let (code, out, err) = run(&[
        "adapter",
        sock.to_str().unwrap(),
        "--descriptor",
        d.to_str().unwrap(),
        "--root",
        a.root.to_str().unwrap(),
        "--id",
        "adapter.bind",
        "--id",
        "adapter.stat",
        "--html",
        html.to_str().unwrap(),
        "--junit",
        junit.to_str().unwrap(),
        "--format",
        "json",
    ]);
    killed(&mut child);
    assert_eq!(code, 1, "{out}\n{err}");
    let page = std::fs::read_to_string(&html).unwrap();
    let handle = a.handle();
    for (what, text) in
        [("html", &page), ("json", &out), ("stderr", &err), ("junit", &std::fs::read_to_string(&junit).unwrap())]
    {
        assert!(!text.contains(&handle), "the handle is in the {what} report");
    }
    assert!(page.contains("&lt;handle&gt;"), "the leaked handle shows redacted in the transcript");
    // Self-contained: nothing to fetch, a CSP that forbids fetching.
    assert!(page.starts_with("<!DOCTYPE html>"));
    for needle in ["http://", "https://", " src=", " href=", "@import", "url("] {
        assert!(!page.contains(needle), "the page references {needle}");
    }
    assert!(page.contains("default-src 'none'"));
    // Every case, with its status, and the summary by clause and level.
    let v: Value = serde_json::from_str(&out).unwrap();
    for r in v["results"].as_array().unwrap() {
        let id = r["id"].as_str().unwrap();
        assert!(page.contains(&format!("id=\"case-{id}\"")), "{id} missing");
    }
    assert!(page.contains("<tr><td>PC-4.2</td><td>MUST</td>"), "summary by clause and level");
    assert!(page.contains("data-filter=\"fail\"") && page.contains("<pre class=\"transcript\">"));
    assert!(page.contains("id=\"verdict\">NOT CONFORMANT<"));
}
