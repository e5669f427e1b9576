//! The fuzz harnesses (`pi_conform::fuzzing`) on stable: every target over every vector input
//! (the same inputs `scripts/fuzz_seeds.py` writes as seeds) and over every committed
//! regression input in `fuzz/regressions/<target>/`.

use std::path::{Path, PathBuf};

use pi_conform::fuzzing::{self, TARGETS};
use pi_conform::judge::Kind;
use pi_conform::vectors::{default_dir, VectorSet};

/// The seeds of each target, as `scripts/fuzz_seeds.py` derives them from the vectors:
/// - `ndjson`: each `framing.json` line followed by LF;
/// - `command`, `descriptor`: each line of that kind;
/// - `frame_to_adapter`, `frame_to_daemon`, `bind_request`: each frame line;
/// - `path`: the string of each path vector, as UTF-8.
fn seeds() -> Vec<(&'static str, String, Vec<u8>)> {
    let set = VectorSet::load(&default_dir()).expect("vectors load");
    let mut out = Vec::new();
    for v in &set.vectors {
        let line = set.line(v).expect("vector line");
        if v.file == "framing.json" {
            let mut framed = line.clone();
            framed.push(b'\n');
            out.push(("ndjson", v.id.clone(), framed));
        }
        match v.kind {
            Kind::Command => out.push(("command", v.id.clone(), line)),
            Kind::Descriptor => out.push(("descriptor", v.id.clone(), line)),
            Kind::Frame => {
                for t in ["frame_to_adapter", "frame_to_daemon", "bind_request"] {
                    out.push((t, v.id.clone(), line.clone()));
                }
            }
            Kind::Path => {
                if let Ok(serde_json::Value::String(p)) = set.document(v) {
                    out.push(("path", v.id.clone(), p.into_bytes()));
                }
            }
            Kind::Response | Kind::Event => {}
        }
    }
    out
}

fn run_caught(target: &str, name: &str, data: &[u8]) -> Option<String> {
    let r = std::panic::catch_unwind(|| fuzzing::run(target, data));
    r.err().map(|_| format!("{target}: {name}"))
}

#[test]
fn every_target_holds_on_every_vector() {
    let seeds = seeds();
    for t in TARGETS {
        assert!(seeds.iter().any(|(s, _, _)| *s == t), "target {t} has no seed");
    }
    // The panic messages themselves are printed by the default hook; collect every failure.
    let failures: Vec<String> = seeds.iter().filter_map(|(t, name, data)| run_caught(t, name, data)).collect();
    assert!(failures.is_empty(), "{} invariant failures:\n{}", failures.len(), failures.join("\n"));
}

fn regression_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz").join("regressions")
}

#[test]
fn every_target_holds_on_every_regression_input() {
    let root = regression_dir();
    assert!(root.join("README.md").is_file(), "fuzz/regressions/README.md is missing");
    let mut failures = Vec::new();
    for entry in std::fs::read_dir(&root).expect("fuzz/regressions is readable") {
        let dir = entry.expect("dir entry").path();
        if !dir.is_dir() {
            continue;
        }
        let target = dir.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
        assert!(TARGETS.contains(&target.as_str()), "fuzz/regressions/{target} is not a fuzz target");
        for f in std::fs::read_dir(&dir).expect("regression dir is readable") {
            let f = f.expect("dir entry").path();
            let data = std::fs::read(&f).expect("regression input is readable");
            let name = f.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
            failures.extend(run_caught(&target, &name, &data));
        }
    }
    assert!(failures.is_empty(), "{} invariant failures:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn harnesses_accept_degenerate_inputs() {
    for t in TARGETS {
        for data in [&b""[..], b"\n", b"\r\n", b"\xff", b"{}", b"[]", b"\"\"", b"null", b"."] {
            fuzzing::run(t, data);
        }
    }
}

#[test]
fn seed_script_writes_the_replayed_inputs() {
    let Ok(dir) = tempfile::tempdir() else { return };
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts").join("fuzz_seeds.py");
    let run = std::process::Command::new("python3").arg(&script).arg(dir.path()).output();
    let Ok(out) = run else {
        eprintln!("SKIP seed_script_writes_the_replayed_inputs: python3 is not available");
        return;
    };
    assert!(out.status.success(), "fuzz_seeds.py failed: {}", String::from_utf8_lossy(&out.stderr));
    let seeds = seeds();
    for (target, name, data) in &seeds {
        let written = std::fs::read(dir.path().join(target).join(name)).unwrap_or_default();
        assert!(written == *data, "fuzz_seeds.py wrote another input for {target}/{name}");
    }
    let files = walk_count(dir.path());
    assert_eq!(files, seeds.len(), "fuzz_seeds.py wrote seeds the replay does not run");
}

fn walk_count(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .map(|rd| rd.filter_map(Result::ok).map(|e| if e.path().is_dir() { walk_count(&e.path()) } else { 1 }).sum())
        .unwrap_or(0)
}
