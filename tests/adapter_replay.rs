//! The golden vectors replayed against live adapters (`vector:<id>` cases), and the runner's
//! acceptance of both conforming answers to an invoke with an unknown frame key (SPEC §4.5).
//! Real reference adapters on real sockets; the binary for the command-line selection.

use std::process::Command;

use pi_conform::adapter::faults::{Fault, Faults};
use pi_conform::conform::adapter::catalogue_with_vectors;
use pi_conform::conform::case::{CaseMeta, Level, Status};
use pi_conform::conform::killmatrix::run_faulty;

fn catalogue() -> Vec<CaseMeta> {
    let (cat, no_vectors) = catalogue_with_vectors(&pi_conform::vectors::default_dir());
    assert!(no_vectors.is_none(), "{no_vectors:?}");
    cat
}

#[test]
fn every_to_adapter_frame_and_path_vector_is_replayed_and_the_reference_passes_them() {
    let set = pi_conform::vectors::VectorSet::load(&pi_conform::vectors::default_dir()).unwrap();
    let replayable: Vec<&str> = set
        .vectors
        .iter()
        .filter(|v| {
            v.kind == pi_conform::judge::Kind::Path
                || (v.kind == pi_conform::judge::Kind::Frame
                    && v.context.get("direction").and_then(|d| d.as_str()) == Some("to-adapter"))
        })
        .map(|v| v.id.as_str())
        .collect();
    let cat: Vec<CaseMeta> = catalogue().into_iter().filter(|m| m.id.starts_with("vector:")).collect();
    assert_eq!(cat.len(), replayable.len());
    let report = run_faulty(Faults::NONE, &cat, 1.0).expect("the reference adapter runs");
    let mut skipped = Vec::new();
    for r in &report.results {
        match r.status {
            Status::Pass => {}
            Status::Skip => {
                // A skip always says why, and only for the reasons the replay knows.
                assert!(
                    r.reason.contains("depends on its own descriptor")
                        || r.reason.contains("judges a bind against its grant"),
                    "{}: {}",
                    r.id,
                    r.reason
                );
                skipped.push(r.id.clone());
            }
            _ => panic!("{} {}: {} (actual {})", r.id, r.status.as_str(), r.reason, r.actual),
        }
    }
    // The bind vectors that change operations or limits are the only ones a grant may allow.
    assert_eq!(skipped, ["vector:frame.bind.limits-differ", "vector:frame.bind.operations-differ"]);
}

/// The other conforming answer of SPEC §4.5 (`invalid_request` instead of closing): every MUST
/// case passes, the extra-key cases and vectors observe that answer, and only the SHOULD case
/// that pins this project's choice warns.
#[test]
fn an_adapter_answering_an_extra_frame_key_with_invalid_request_conforms() {
    let cat = catalogue();
    let report = run_faulty(Faults::NONE.with(Fault::ExtraFrameKeyReplies), &cat, 1.0).expect("runs");
    let not_passed: Vec<String> = report
        .results
        .iter()
        .filter(|r| !matches!(r.status, Status::Pass | Status::Skip))
        .map(|r| format!("{} {}: {}", r.id, r.status.as_str(), r.reason))
        .collect();
    assert_eq!(
        not_passed,
        ["adapter.invoke.unknown-frame-key.closes warn: the adapter answered error `invalid_request`; PC-4.5 (SHOULD): \
          This project's choice between the two conforming answers of SPEC 4.5: an invoke whose ids and operation are \
          valid but which carries an extra frame key is closed; answering invalid_request also conforms and is only \
          warned here; it should close the connection instead"]
    );
    let warned = report.results.iter().find(|r| r.id == "adapter.invoke.unknown-frame-key.closes").unwrap();
    assert_eq!(warned.level, Level::Should);
    for id in [
        "adapter.invoke.unknown-frame-key",
        "vector:frame.invoke.extra-key",
        "vector:frame.invoke.extra-key-capability-handle",
    ] {
        let r = report.results.iter().find(|r| r.id == id).unwrap();
        assert_eq!((r.status, r.actual.as_str()), (Status::Pass, "error:invalid_request"), "{id}");
    }
    // Frames that are not attributable invokes are still closed by it, and must be.
    for id in ["vector:frame.abort.extra-key", "vector:frame.bind.extra-key", "vector:frame.invoke.secret.in-content"] {
        let r = report.results.iter().find(|r| r.id == id).unwrap();
        assert_eq!((r.status, r.actual.as_str()), (Status::Pass, "closed"), "{id}");
    }
}

/// An adapter that executes an invoke with an unknown payload key fails the vector that
/// pins it, with the observed answer as the reason.
#[test]
fn a_broken_adapter_fails_the_vector_naming_what_it_did() {
    let cat: Vec<CaseMeta> =
        catalogue().into_iter().filter(|m| m.id == "vector:frame.invoke.fs-stat.extra-key").collect();
    let report = run_faulty(Faults::NONE.with(Fault::AcceptUnknownPayloadKeys), &cat, 1.0).expect("runs");
    let r = &report.results[0];
    assert_eq!((r.status, r.clause.as_str()), (Status::Fail, "PC-5.2"));
    assert_eq!(r.actual, "answered");
    assert!(r.reason.starts_with("the adapter ended in `answered`; PC-5.2 (MUST): "), "{}", r.reason);
    assert!(r.reason.ends_with("; it should answer error `invalid_request` instead"), "{}", r.reason);
    assert_eq!(r.expected, "error:invalid_request");
}

#[test]
fn vector_cases_are_listed_and_selected_by_id_and_tag() {
    let bin = env!("CARGO_BIN_EXE_pi-conform");
    let out = Command::new(bin).args(["selftest", "--list", "--tag", "vector", "--format", "json"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let listed: Vec<serde_json::Value> =
        String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let n = catalogue().iter().filter(|m| m.tags.iter().any(|t| t == "vector")).count();
    assert_eq!(listed.len(), n);
    assert!(listed.iter().all(|m| m["id"].as_str().unwrap().starts_with("vector:")));

    let out =
        Command::new(bin).args(["selftest", "--id", "vector:frame.invoke.path.", "--format", "json"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let ids: Vec<&str> = report["results"].as_array().unwrap().iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert!(ids.len() >= 5 && ids.iter().all(|i| i.starts_with("vector:frame.invoke.path.")), "{ids:?}");
}
