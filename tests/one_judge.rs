//! One judge for adapter frames (issue 26): `pi-conform validate --kind frame --direction
//! to-daemon` and the adapter runner give every frame the same verdict, because both call
//! `contract::adapter_output`. Checked on every golden frame vector (through the real binary)
//! and on every frame the runner judged in real runs of the suite against the reference
//! adapter, healthy and with faults that make it send frames a daemon accepts but an adapter
//! must not send (a code's wrong `retryable` flag) and frames a daemon refuses (the handle in
//! `bound`).

use std::io::Write;
use std::process::{Command, Stdio};

use pi_conform::adapter::faults::{Fault, Faults};
use pi_conform::conform::adapter::judge::{tap, FrameJudge};
use pi_conform::contract::frame::{Binding, Direction};
use pi_conform::judge::{judge_line, Context, Kind};
use pi_conform::vectors::{default_dir, VectorSet};
use serde_json::{json, Value};

/// The runner's verdict on `line`: a [`FrameJudge`] that has seen the bind, the `bound` and
/// the invoke or abort the frame answers (so that only single-frame rules can object), true
/// when it recorded no violation.
fn runner_passes(line: &[u8], binding: &Binding, bind: &Value) -> bool {
    let violations = std::rc::Rc::default();
    let mut judge = FrameJudge::new(binding.clone(), std::rc::Rc::clone(&violations));
    let wire = |v: &Value| serde_json::to_vec(v).unwrap();
    judge.sent(&wire(bind));
    let frame: Value = serde_json::from_slice(line).unwrap_or(Value::Null);
    let kind = frame.get("kind").and_then(Value::as_str).unwrap_or_default();
    if kind != "bound" {
        let mut bound = bind.clone();
        bound.as_object_mut().unwrap().remove("capabilityHandle");
        bound["kind"] = json!("bound");
        judge.received(&wire(&bound));
        assert!(violations.borrow().is_empty(), "the bound echo passes: {:?}", violations.borrow());
    }
    let s = |k: &str| frame.get(k).cloned().unwrap_or(Value::Null);
    match kind {
        "result" => judge.sent(&wire(&json!({"kind": "invoke", "requestId": s("requestId"),
            "idempotencyKey": s("idempotencyKey"), "operation": s("operation")}))),
        "aborted" => {
            judge.sent(&wire(&json!({"kind": "invoke", "requestId": s("targetRequestId"),
                "idempotencyKey": "k", "operation": "fs.read"})));
            judge.sent(&wire(&json!({"kind": "abort", "requestId": s("requestId"),
                "targetRequestId": s("targetRequestId")})));
        }
        _ => {}
    }
    judge.received(line);
    let v = violations.borrow();
    v.is_empty()
}

#[test]
fn validate_and_the_runner_agree_on_every_golden_frame_vector() {
    let set = VectorSet::load(&default_dir()).unwrap();
    let mut seen = 0;
    let (mut valid, mut invalid) = (0, 0);
    let dir = tempfile::tempdir().unwrap();
    for v in set.vectors.iter().filter(|v| v.kind == Kind::Frame) {
        let ctx = set.context(v).unwrap();
        if ctx.direction != Direction::ToDaemon {
            continue;
        }
        let line = set.line(v).unwrap();
        let binding = ctx.binding.clone().unwrap();
        // The descriptor the vector is judged against, as a file for the binary.
        let descriptor = match v.context.get("descriptor") {
            None => set.base("descriptor").unwrap(),
            Some(Value::String(name)) => set.base(name).unwrap(),
            Some(inline) => inline.clone(),
        };
        let dpath = dir.path().join("d.json");
        std::fs::write(&dpath, serde_json::to_vec(&descriptor).unwrap()).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_pi-conform"))
            .args(["validate", "--kind", "frame", "--direction", "to-daemon", "--format", "json", "--descriptor"])
            .arg(&dpath)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut input = child.stdin.take().unwrap();
        input.write_all(&line).unwrap();
        input.write_all(b"\n").unwrap();
        drop(input);
        let out = child.wait_with_output().unwrap();
        let verdict: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("{}", v.id));
        let cli_valid = verdict["result"]["verdict"] == "valid";
        assert_eq!(out.status.code(), Some(if cli_valid { 0 } else { 1 }), "{}", v.id);
        // The binding's bind frame, as the runner would send it.
        let runner = runner_passes(&line, &binding, &binding.bind_frame());
        assert_eq!(cli_valid, runner, "{}: validate says {verdict}, the runner {runner}", v.id);
        seen += 1;
        if cli_valid {
            valid += 1;
        } else {
            invalid += 1;
        }
    }
    assert!(valid > 10 && invalid > 10, "the vectors hold both verdicts: {valid} valid, {invalid} invalid of {seen}");
}

/// Runs `ids` of the adapter catalogue in-process against the reference adapter with `faults`
/// and returns every frame the runner judged.
fn frames_of_a_run(faults: &[Fault], ids: &[&str]) -> Vec<tap::Seen> {
    let (catalogue, _) = pi_conform::conform::adapter::catalogue_with_vectors(&default_dir());
    let cases: Vec<_> =
        catalogue.into_iter().filter(|m| ids.is_empty() || ids.iter().any(|p| m.id.starts_with(p))).collect();
    tap::start();
    let faults: Faults = faults.iter().copied().collect();
    pi_conform::conform::killmatrix::run_faulty(faults, &cases, 3.0).unwrap();
    tap::take()
}

fn validate_passes(line: &[u8], binding: &Binding) -> bool {
    let ctx = Context { binding: Some(binding.clone()), direction: Direction::ToDaemon, ..Context::default() };
    judge_line(line, Some(Kind::Frame), &ctx).1.is_valid()
}

#[test]
fn validate_and_the_runner_agree_on_every_frame_of_a_selftest() {
    let frames = frames_of_a_run(&[], &[]);
    assert!(frames.len() > 500, "a whole suite's frames: {}", frames.len());
    for (line, binding, runner) in &frames {
        assert_eq!(validate_passes(line, binding), *runner, "{}", String::from_utf8_lossy(line));
    }
    // The healthy reference adapter sends only frames that pass.
    assert!(frames.iter().all(|(_, _, ok)| *ok), "the reference adapter sent a refused frame");
}

#[test]
fn validate_and_the_runner_agree_on_frames_a_broken_adapter_sends() {
    let faults = [Fault::NotFoundRetryable, Fault::BoundLeaksHandle];
    let frames = frames_of_a_run(&faults, &["adapter.stat", "adapter.read", "adapter.bind"]);
    let refused = frames.iter().filter(|(_, _, ok)| !ok).count();
    assert!(refused > 0 && refused < frames.len(), "both verdicts: {refused} refused of {}", frames.len());
    for (line, binding, runner) in &frames {
        assert_eq!(validate_passes(line, binding), *runner, "{}", String::from_utf8_lossy(line));
    }
    // The two frames: `not_found` with `retryable:true` (a daemon accepts it; an
    // adapter must not send it) is refused by both.
    assert!(
        frames.iter().any(|(l, _, ok)| !ok && String::from_utf8_lossy(l).contains("\"retryable\":true")),
        "a not_found with retryable:true was seen and refused"
    );
}
