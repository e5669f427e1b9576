//! The adapter authors' guide tells the truth about the wire (issue 26, item 7): every line of
//! the worked exchange in docs/adapter-authors.md (its ```ndjson blocks) is a frame the
//! project's own contract judges valid in its direction — by the library's `judge_line`, by
//! `pi-conform validate` (the real binary), and, in the order the guide shows them, by the
//! adapter runner's exchange judge (`FrameJudge`: `bound` first, one result per invoke with its
//! keys, none after `aborted:true`, an `aborted` only for an abort sent).

use std::cell::RefCell;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::rc::Rc;

use pi_conform::conform::adapter::judge::FrameJudge;
use pi_conform::contract::admit_descriptor;
use pi_conform::contract::frame::{Binding, Direction};
use pi_conform::judge::{judge_line, Context, Kind};
use serde_json::{json, Value};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// One line of the worked exchange: the label the guide gives its block, and the line.
struct Step {
    label: String,
    line: String,
}

/// The lines of every ```ndjson block of the guide, in order, each with the last non-empty
/// line of prose before its block.
fn exchange() -> Vec<Step> {
    let text = std::fs::read_to_string(root().join("docs/adapter-authors.md")).unwrap();
    let mut steps = Vec::new();
    let (mut label, mut inside) = (String::new(), false);
    for line in text.lines() {
        if inside {
            if line.starts_with("```") {
                inside = false;
            } else if !line.trim().is_empty() {
                steps.push(Step { label: label.clone(), line: line.to_string() });
            }
        } else if line.trim() == "```ndjson" {
            inside = true;
        } else if !line.trim().is_empty() {
            label = line.trim().to_string();
        }
    }
    steps
}

/// Who sends a frame of `kind`.
fn direction(kind: &str) -> Direction {
    match kind {
        "bind" | "invoke" | "abort" | "revoke" => Direction::ToAdapter,
        "bound" | "result" | "aborted" | "revoked" => Direction::ToDaemon,
        other => panic!("the guide shows a frame of kind {other:?}"),
    }
}

fn kind(line: &str) -> String {
    let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
    v["kind"].as_str().unwrap_or_else(|| panic!("no kind: {line}")).to_string()
}

/// The descriptor of the worked example (SPEC PC-0.1), which the guide's session uses.
fn descriptor() -> Value {
    serde_json::from_slice(&std::fs::read(root().join("vectors/bases/descriptor.json")).unwrap()).unwrap()
}

fn binding() -> Binding {
    Binding::from(&admit_descriptor(&descriptor(), None).expect("the worked example's descriptor is admitted"))
}

#[test]
fn every_line_of_the_worked_exchange_is_valid_in_its_direction() {
    let steps = exchange();
    assert!(!steps.is_empty(), "docs/adapter-authors.md shows no ```ndjson exchange");
    let binding = binding();
    let mut kinds = std::collections::BTreeSet::new();
    for s in &steps {
        let k = kind(&s.line);
        let dir = direction(&k);
        // The block's label names the direction the frame travels.
        let want = if dir == Direction::ToAdapter { "daemon → adapter" } else { "adapter → daemon" };
        assert!(s.label.starts_with(want), "a `{k}` frame is labelled {:?}, not {want:?}", s.label);
        let ctx = Context { binding: Some(binding.clone()), direction: dir, ..Context::default() };
        let (_, verdict) = judge_line(s.line.as_bytes(), Some(Kind::Frame), &ctx);
        assert!(verdict.is_valid(), "the guide's `{k}` line is refused: {verdict:?}\n{}", s.line);
        // Compact, as it travels: one line, no padding.
        let compact = serde_json::to_string(&serde_json::from_str::<Value>(&s.line).unwrap()).unwrap();
        assert_eq!(compact, s.line, "the guide's `{k}` line is not in compact form");
        kinds.insert(k);
    }
    let all = ["bind", "bound", "invoke", "result", "abort", "aborted", "revoke", "revoked"];
    assert_eq!(kinds, all.iter().map(|k| k.to_string()).collect(), "the exchange shows every kind");
    // The sizes the guide states (SPEC PC-0.1): bind 492 bytes, bound 431, LF included.
    let size = |k: &str| steps.iter().find(|s| kind(&s.line) == k).map(|s| s.line.len() + 1).unwrap();
    assert_eq!((size("bind"), size("bound")), (492, 431));
}

#[test]
fn the_exchange_passes_the_runners_exchange_rules_in_order() {
    let steps = exchange();
    let violations = Rc::new(RefCell::new(Vec::new()));
    let mut judge = FrameJudge::new(binding(), Rc::clone(&violations));
    for s in &steps {
        match direction(&kind(&s.line)) {
            Direction::ToAdapter => judge.sent(s.line.as_bytes()),
            Direction::ToDaemon => {
                judge.received(s.line.as_bytes()).expect("the adapter's frame decodes");
            }
        }
    }
    assert!(violations.borrow().is_empty(), "{:?}", violations.borrow());
    // Every invoke is answered: by a result, or by an aborted:true for it.
    let answered = |id: &str| {
        steps.iter().any(|s| {
            let v: Value = serde_json::from_str(&s.line).unwrap();
            (v["kind"] == "result" && v["requestId"] == id)
                || (v["kind"] == "aborted" && v["targetRequestId"] == id && v["aborted"] == true)
        })
    };
    for s in &steps {
        let v: Value = serde_json::from_str(&s.line).unwrap();
        if v["kind"] == "invoke" {
            assert!(answered(v["requestId"].as_str().unwrap()), "invoke {} is never answered", v["requestId"]);
        }
    }

    // The judge is not vacuous: the aborted search's result sent after all is caught.
    let aborted: Value = steps
        .iter()
        .map(|s| serde_json::from_str::<Value>(&s.line).unwrap())
        .find(|v| v["kind"] == "aborted" && v["aborted"] == true)
        .expect("the exchange aborts a running request");
    let target = aborted["targetRequestId"].as_str().unwrap();
    let invoke: Value = steps
        .iter()
        .map(|s| serde_json::from_str::<Value>(&s.line).unwrap())
        .find(|v| v["kind"] == "invoke" && v["requestId"] == target)
        .unwrap();
    let mut late = invoke.clone();
    let obj = late.as_object_mut().unwrap();
    obj.remove("payload");
    obj.insert("kind".into(), json!("result"));
    obj.insert("ok".into(), json!(true));
    obj.insert("data".into(), json!({"matches": [], "truncated": false}));
    judge.received(serde_json::to_string(&late).unwrap().as_bytes());
    let v = violations.borrow();
    assert!(v.iter().any(|m| m.contains("after it was answered aborted:true")), "{v:?}");
}

/// What an author would run: `pi-conform validate` on the extracted lines, per direction.
#[test]
fn pi_conform_validate_judges_the_extracted_lines_valid() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("descriptor.json");
    std::fs::write(&d, serde_json::to_vec_pretty(&descriptor()).unwrap()).unwrap();
    for (flag, dir_) in [("to-adapter", Direction::ToAdapter), ("to-daemon", Direction::ToDaemon)] {
        let lines: Vec<String> =
            exchange().into_iter().filter(|s| direction(&kind(&s.line)) == dir_).map(|s| s.line).collect();
        assert!(!lines.is_empty(), "{flag}");
        let mut child = Command::new(env!("CARGO_BIN_EXE_pi-conform"))
            .args(["validate", "--kind", "frame", "--direction", flag, "--format", "json", "--descriptor"])
            .arg(&d)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut input = child.stdin.take().unwrap();
        for l in &lines {
            writeln!(input, "{l}").unwrap();
        }
        drop(input);
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{flag}: {stdout}{}", String::from_utf8_lossy(&out.stderr));
        let verdicts: Vec<Value> = stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(verdicts.len(), lines.len(), "{flag}: one verdict per line");
        assert!(verdicts.iter().all(|v| v["result"]["verdict"] == "valid"), "{flag}: {stdout}");
    }
}
