//! The adapter runner as a user drives it: the real binary, real sockets, real processes.

mod support;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixListener;
use std::process::Command;

use serde_json::{json, Value};
use support::{bin, Adapter, Opts};

fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(bin()).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[test]
fn selftest_is_conformant_with_json_and_junit_reports() {
    let dir = tempfile::tempdir().unwrap();
    let junit = dir.path().join("report.xml");
    let (code, out, err) = run(&["selftest", "--format", "json", "--junit", junit.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}\n{err}");
    let v: Value = serde_json::from_str(&out).expect("the JSON report parses");
    let total = v["results"].as_array().unwrap().len();
    assert!(total >= 100, "{total} cases");
    assert_eq!(v["summary"]["failed"], 0);
    assert_eq!(v["summary"]["errors"], 0);
    // The reference adapter follows every SHOULD as well: a warning on it is a regression (and
    // this test is the oracle of `scripts/mutants adapter`, so a SHOULD case kills mutants too).
    let warned: Vec<&str> = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["status"] == "warn")
        .filter_map(|r| r["id"].as_str())
        .collect();
    assert!(warned.is_empty(), "the reference adapter is warned on {warned:?}");
    assert_eq!(v["exitCode"], 0);
    // The JUnit report is well-formed XML with one testcase per case.
    let xml = std::fs::read_to_string(&junit).unwrap();
    let mut reader = quick_xml::Reader::from_str(&xml);
    let mut cases = 0;
    loop {
        match reader.read_event().expect("well-formed JUnit XML") {
            quick_xml::events::Event::Eof => break,
            quick_xml::events::Event::Start(e) | quick_xml::events::Event::Empty(e)
                if e.name().as_ref() == b"testcase" =>
            {
                cases += 1
            }
            _ => {}
        }
    }
    assert_eq!(cases, total);
    // Nothing in any report carries the handle (the selftest mints its own; the reports say <handle>).
    assert!(!out.contains("capabilityHandle\":\"") || out.contains("<handle>"));
}

#[test]
fn list_and_filters() {
    let (code, out, _) = run(&["adapter", "--list"]);
    assert_eq!(code, 0);
    assert!(out.lines().count() >= 100);
    let (_, out, _) = run(&["adapter", "--list", "--level", "should"]);
    assert!(out.lines().count() >= 1 && out.lines().all(|l| l.contains(" SHOULD ")), "{out}");
    let (_, out, _) = run(&["adapter", "--list", "--tag", "fs.read", "--format", "json"]);
    for l in out.lines() {
        let m: Value = serde_json::from_str(l).unwrap();
        assert!(m["tags"].as_array().unwrap().contains(&json!("fs.read")));
    }
    // --technique keeps exactly the entries that name it, on both suites.
    for suite in ["adapter", "daemon"] {
        let (_, all, _) = run(&[suite, "--list", "--format", "json"]);
        let (code, out, err) = run(&[suite, "--list", "--technique", "provoked-state", "--format", "json"]);
        assert_eq!(code, 0, "{err}");
        let names = |t: &str| -> Vec<String> {
            t.lines()
                .map(|l| serde_json::from_str::<Value>(l).unwrap())
                .filter(|m| m["techniques"].as_array().unwrap().contains(&json!("provoked-state")))
                .map(|m| m["id"].as_str().unwrap().to_string())
                .collect()
        };
        let kept: Vec<String> =
            out.lines().map(|l| serde_json::from_str::<Value>(l).unwrap()["id"].as_str().unwrap().into()).collect();
        assert!(kept.len() >= 5, "{suite}: {out}");
        assert_eq!(kept, names(&all), "{suite}: --technique provoked-state kept another set");
    }
    let (code, _, err) = run(&["adapter", "--list", "--technique", "guesswork"]);
    assert_eq!(code, 2, "an unknown technique is a usage error: {err}");
    assert!(err.contains("provoked-state"), "the error lists the techniques: {err}");
    let (code, _, err) = run(&["selftest", "--id", "no.such.case"]);
    assert_eq!(code, 2, "{err}");
}

#[test]
fn unreachable_target_exits_4_and_bad_usage_exits_2() {
    let a = Adapter::start(Opts::default());
    let d = a.dir.path().join("d.json");
    std::fs::write(&d, serde_json::to_vec(&a.descriptor).unwrap()).unwrap();
    let missing = a.dir.path().join("nothing.sock");
    let (code, _, err) = run(&[
        "adapter",
        missing.to_str().unwrap(),
        "--descriptor",
        d.to_str().unwrap(),
        "--root",
        a.root.to_str().unwrap(),
    ]);
    assert_eq!(code, 4, "{err}");
    assert!(err.contains("unreachable"), "{err}");
    let (code, _, _) = run(&["adapter", a.socket.to_str().unwrap(), "--root", a.root.to_str().unwrap()]);
    assert_eq!(code, 2);
    // A root holding someone's files is never wiped.
    std::fs::write(a.root.join("precious.txt"), "mine").unwrap();
    let (code, _, err) = run(&[
        "adapter",
        a.socket.to_str().unwrap(),
        "--descriptor",
        d.to_str().unwrap(),
        "--root",
        a.root.to_str().unwrap(),
        "--id",
        "adapter.stat",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("refusing to wipe"), "{err}");
    assert_eq!(std::fs::read_to_string(a.root.join("precious.txt")).unwrap(), "mine");
}

#[test]
fn a_separate_adapter_process_passes_and_a_stale_baseline_is_reported() {
    let a = Adapter::start(Opts::default());
    let d = a.dir.path().join("d.json");
    std::fs::write(&d, serde_json::to_vec(&a.descriptor).unwrap()).unwrap();
    let args = [
        "adapter",
        a.socket.to_str().unwrap(),
        "--descriptor",
        d.to_str().unwrap(),
        "--root",
        a.root.to_str().unwrap(),
    ];
    let (code, out, err) = run(&[&args[..], &["--id", "adapter.read", "--id", "adapter.bind"]].concat());
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("verdict: CONFORMANT"), "{out}");
    let baseline = a.dir.path().join("baseline.txt");
    std::fs::write(&baseline, "# known failures\nadapter.read.window\n").unwrap();
    let (code, out, _) =
        run(&[&args[..], &["--id", "adapter.read", "--baseline", baseline.to_str().unwrap()]].concat());
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("STALE adapter.read.window"), "{out}");
}

/// A deliberately broken adapter: it binds correctly but answers every invoke with
/// `ok:true` and empty data, and never closes on bad input.
fn broken_adapter(socket: &std::path::Path, descriptor: Value) {
    let l = UnixListener::bind(socket).unwrap();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(s) = s else { break };
            let d = descriptor.clone();
            std::thread::spawn(move || {
                let mut w = s.try_clone().unwrap();
                let mut lines = BufReader::new(s).lines();
                let Some(Ok(first)) = lines.next() else { return };
                let bind: Value = serde_json::from_str(&first).unwrap_or(Value::Null);
                if bind["capabilityHandle"] != d["binding"]["capabilityHandle"] {
                    return;
                }
                let mut bound = bind.clone();
                bound.as_object_mut().unwrap().remove("capabilityHandle");
                bound["kind"] = json!("bound");
                let _ = writeln!(w, "{bound}");
                for line in lines.map_while(Result::ok) {
                    let f: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
                    let mut r = bound.clone();
                    let m = r.as_object_mut().unwrap();
                    m.remove("operations");
                    m.remove("limits");
                    m.insert("kind".into(), json!("result"));
                    for k in ["requestId", "idempotencyKey", "operation"] {
                        m.insert(k.into(), f[k].clone());
                    }
                    m.insert("ok".into(), json!(true));
                    m.insert("data".into(), json!({}));
                    let _ = writeln!(w, "{r}");
                }
            });
        }
    });
}

#[test]
fn a_broken_adapter_fails_with_named_cases_and_transcripts() {
    let a = Adapter::start(Opts::default());
    let sock = a.dir.path().join("broken.sock");
    broken_adapter(&sock, a.descriptor.clone());
    let d = a.dir.path().join("d.json");
    std::fs::write(&d, serde_json::to_vec(&a.descriptor).unwrap()).unwrap();
    let root = a.dir.path().join("broken-root");
    std::fs::create_dir(&root).unwrap();
    let (code, out, err) = run(&[
        "adapter",
        sock.to_str().unwrap(),
        "--descriptor",
        d.to_str().unwrap(),
        "--root",
        root.to_str().unwrap(),
        "--id",
        "adapter.path.dotdot",
        "--id",
        "adapter.invoke.unknown-frame-key",
        "--id",
        "adapter.stat.file",
        "--time-scale",
        "0.25",
    ]);
    assert_eq!(code, 1, "{out}\n{err}");
    for id in [
        "adapter.path.dotdot-escape",
        "adapter.path.dotdot-inner",
        "adapter.invoke.unknown-frame-key",
        "adapter.stat.file",
    ] {
        assert!(out.contains(&format!("FAIL {id} ")), "{id} not failed:\n{out}");
    }
    assert!(
        out.contains("Requirement:")
            && out.contains("Expected:")
            && out.contains("Actual:")
            && out.contains("Transcript:"),
        "{out}"
    );
    // Each "Why" says what the adapter did, the rule, and what it should do instead.
    assert!(
        out.contains(
            "Why:         the adapter answered ok:true; PC-5.1 (MUST): A write to a path with a .. segment is \
             answered invalid_path before any filesystem access; it should answer error `invalid_path` instead"
        ),
        "{out}"
    );
    // Not on a terminal: one line per case as it finishes, then the list of failing ids.
    assert!(out.contains("] FAIL  adapter.path.dotdot-inner (PC-5.1, MUST) "), "{out}");
    let list = out.split("\nfailures:\n").nth(1).expect("a failures: list");
    let ids: Vec<&str> = list.lines().take_while(|l| l.starts_with("    ")).map(str::trim).collect();
    // The SHOULD case among them fails too: its result (`data: {}`) breaks a MUST of the
    // contract, whatever the case tests.
    assert_eq!(
        ids,
        [
            "adapter.invoke.unknown-frame-key",
            "adapter.invoke.unknown-frame-key.closes",
            "adapter.path.dotdot-escape",
            "adapter.path.dotdot-inner",
            "adapter.stat.file"
        ]
    );
    assert!(
        out.contains("] FAIL  adapter.invoke.unknown-frame-key.closes (PC-4.5, SHOULD) ")
            && out.contains("the adapter broke a MUST beside what this SHOULD case tests"),
        "{out}"
    );
    assert!(!out.contains(&a.handle()), "the report must redact the handle");
    assert!(out.contains("<handle>"));
}
