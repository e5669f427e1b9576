//! Every golden vector: the validator's verdict meets the expectation, and the verdicts are
//! pinned as insta snapshots (one per vector file), so any change of code, field or message
//! shows up in review.

use pi_conform::vectors::{default_dir, meets, VectorSet};
use serde_json::{json, Map, Value};

#[test]
fn every_vector_meets_its_expectation_and_matches_its_snapshot() {
    let set = VectorSet::load(&default_dir()).expect("vectors load");
    assert!(set.vectors.len() >= 150, "at least 150 vectors, got {}", set.vectors.len());
    let mut by_file: std::collections::BTreeMap<String, Map<String, Value>> = Default::default();
    let mut failures = Vec::new();
    for v in &set.vectors {
        let verdict = set.judge(v).unwrap_or_else(|e| panic!("harness error on {}: {e}", v.id));
        if !meets(&verdict, &v.expect) {
            failures.push(format!("{}: expected {:?}, got {:?}", v.id, v.expect, verdict));
        }
        by_file.entry(v.file.clone()).or_default().insert(v.id.clone(), json!(verdict));
    }
    assert!(failures.is_empty(), "{} mismatches:\n{}", failures.len(), failures.join("\n"));
    for (file, verdicts) in by_file {
        let name = file.trim_end_matches(".json").to_string();
        insta::assert_json_snapshot!(name, verdicts);
    }
}

#[test]
fn every_clause_family_is_covered_valid_and_invalid() {
    let set = VectorSet::load(&default_dir()).unwrap();
    let clause_ids = [
        "PC-1",
        "PC-2.1",
        "PC-2.2",
        "PC-2.3",
        "PC-3.1",
        "PC-3.2",
        "PC-3.2.1",
        "PC-3.2.2",
        "PC-3.2.3",
        "PC-3.2.4",
        "PC-3.2.5",
        "PC-3.2.6",
        "PC-3.2.7",
        "PC-3.2.8",
        "PC-3.2.9",
        "PC-3.2.10",
        "PC-3.3",
        "PC-4.2",
        "PC-5.1",
    ];
    for c in clause_ids {
        let of: Vec<_> = set.vectors.iter().filter(|v| v.clause == c).collect();
        assert!(of.iter().any(|v| v.expect.verdict == "invalid"), "{c} has no invalid vector");
        if c != "PC-3.2.1" {
            assert!(of.iter().any(|v| v.expect.verdict == "valid"), "{c} has no valid vector");
        }
    }
}
