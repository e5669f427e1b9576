//! The capability handle never appears in an error message, an error detail or a Debug
//! rendering of the contract's types, wherever it is planted in the input.

use pi_conform::contract::descriptor::{admit_descriptor, ExpectedBinding};
use pi_conform::contract::frame::{parse_adapter_frame, Binding, Direction};
use pi_conform::contract::{parse_command, HostContext};
use pi_conform::judge::{judge_line, Context, Kind};
use serde_json::Value;

const HANDLE: &str = "aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789_-AB";

fn base(name: &str) -> Value {
    let p = format!("{}/vectors/bases/{name}.json", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

/// Every JSON Pointer of a document (objects and arrays included, root excluded).
fn pointers(v: &Value, at: String, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                let p = format!("{at}/{}", k.replace('~', "~0").replace('/', "~1"));
                out.push(p.clone());
                pointers(x, p, out);
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                let p = format!("{at}/{i}");
                out.push(p.clone());
                pointers(x, p, out);
            }
        }
        _ => {}
    }
}

/// The document with the handle planted at `ptr` in several ways: as the value, inside a
/// longer value, and as an extra key of the object there.
fn plantings(doc: &Value) -> Vec<Value> {
    let mut ptrs = vec![String::new()];
    pointers(doc, String::new(), &mut ptrs);
    let mut out = Vec::new();
    for p in ptrs {
        for value in [Value::from(HANDLE), Value::from(format!("x/{HANDLE}.y")), Value::from(format!("2.{HANDLE}"))] {
            if !p.is_empty() {
                let mut d = doc.clone();
                *d.pointer_mut(&p).unwrap() = value;
                out.push(d);
            }
        }
        let mut d = doc.clone();
        if let Some(Value::Object(m)) = d.pointer_mut(&p) {
            m.insert(HANDLE.into(), Value::from(1));
            out.push(d.clone());
            let mut d2 = doc.clone();
            if let Some(Value::Object(m)) = d2.pointer_mut(&p) {
                m.insert(format!("k{HANDLE}"), Value::from(HANDLE));
                out.push(d2);
            }
        }
    }
    out
}

fn assert_clean(what: &str, text: &str) {
    assert!(!text.contains(HANDLE), "{what} leaked the handle: {text}");
}

#[test]
fn descriptor_errors_never_contain_the_handle() {
    let exp = ExpectedBinding { host_instance_id: "host-019f", session_id: "agent-a", generation: 2 };
    let mut refused = 0;
    for d in plantings(&base("descriptor")) {
        match admit_descriptor(&d, Some(&exp)) {
            Ok(ok) => assert_clean("Descriptor Debug", &format!("{ok:?}")),
            Err(e) => {
                refused += 1;
                assert_clean("descriptor error", &format!("{e} {e:?} {}", e.to_body()));
            }
        }
    }
    assert!(refused > 50, "plantings should mostly be refused, got {refused}");
}

#[test]
fn command_errors_never_contain_the_handle() {
    let host = HostContext { host_instance_id: "host-019f" };
    let mut refused = 0;
    for c in plantings(&base("open-v2")).into_iter().chain(plantings(&base("wake"))) {
        match parse_command(&c, &host) {
            Ok(ok) => assert_clean("Command Debug", &format!("{:?}", ok.descriptor)),
            Err(e) => {
                refused += 1;
                // requestId and the version are echoed by protocol rule (SPEC §2.2); the error
                // body itself must be clean.
                assert_clean("command error", &format!("{} {:?}", e.error.to_body(), e.error));
            }
        }
    }
    assert!(refused > 50);
}

#[test]
fn frame_errors_never_contain_the_handle() {
    let exp = ExpectedBinding { host_instance_id: "host-019f", session_id: "agent-a", generation: 2 };
    let b = Binding::from(&admit_descriptor(&base("descriptor"), Some(&exp)).unwrap());
    assert_clean("Binding Debug", &format!("{b:?}"));
    let mut refused = 0;
    for (name, dir) in [
        ("bind", Direction::ToAdapter),
        ("invoke", Direction::ToAdapter),
        ("abort", Direction::ToAdapter),
        ("bound", Direction::ToDaemon),
        ("result", Direction::ToDaemon),
        ("result-error", Direction::ToDaemon),
        ("aborted", Direction::ToDaemon),
    ] {
        for f in plantings(&base(name)) {
            let line = serde_json::to_vec(&f).unwrap();
            for d in [dir, Direction::ToAdapter, Direction::ToDaemon] {
                match parse_adapter_frame(&line, &b, d) {
                    Ok(frame) => assert_clean("frame Debug", &format!("{frame:?}")),
                    Err(e) => {
                        refused += 1;
                        assert_clean("frame error", &format!("{e} {:?} {}", e.error, e.error.to_body()));
                    }
                }
            }
        }
    }
    assert!(refused > 100);
}

#[test]
fn verdicts_of_every_kind_never_contain_the_handle() {
    let ctx = Context {
        binding: Some(Binding::from(&admit_descriptor(&base("descriptor"), None).unwrap())),
        ..Context::default()
    };
    for name in ["response", "response-error", "event", "handshake"] {
        for doc in plantings(&base(name)) {
            let line = serde_json::to_vec(&doc).unwrap();
            for kind in [None, Some(Kind::Response), Some(Kind::Event), Some(Kind::Command), Some(Kind::Path)] {
                let (_, v) = judge_line(&line, kind, &ctx);
                if let pi_conform::judge::Verdict::Invalid { field, message, .. } = v {
                    assert_clean("verdict", &format!("{field} {message}"));
                }
            }
        }
    }
}
