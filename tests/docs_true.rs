//! Docs true by construction (issue 26): no count in README.md, docs/ or examples/ that a test
//! does not check; one `$id` base for every schema; every case's level in `--list` is one its
//! clause in conformance/SPEC.md states.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and every Markdown file under docs/ and examples/.
fn prose() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "md") {
                out.push(p);
            }
        }
    }
    let mut out = vec![root().join("README.md")];
    walk(&root().join("docs"), &mut out);
    walk(&root().join("examples"), &mut out);
    out
}

/// `N noun` for the nouns that count what grows with the catalogue, and `[ n/N]` progress.
fn counts(text: &str) -> Vec<(String, String)> {
    const NOUNS: &[&str] = &[
        "cases",
        "case",
        "vectors",
        "vector",
        "golden vectors",
        "replayed",
        "skips",
        "skipped",
        "passed",
        "failed",
        "MUST clauses",
        "clauses",
        "faults",
        "fault switches",
        "warnings",
        "warning",
        "known failures",
        "tests",
        "lines",
    ];
    let mut out = Vec::new();
    let words: Vec<&str> = text.split(|c: char| c.is_whitespace() || c == '`' || c == '(').collect();
    for (i, w) in words.iter().enumerate() {
        let digits = w.trim_start_matches('[').replace(',', "");
        if digits.is_empty() || !digits.chars().all(|c| c.is_ascii_digit()) {
            if let Some((a, b)) = w.trim_matches(|c| c == '[' || c == ']').split_once('/') {
                if !a.is_empty() && a.chars().all(|c| c.is_ascii_digit()) && b.chars().all(|c| c.is_ascii_digit()) {
                    out.push((w.to_string(), "progress".into()));
                }
            }
            continue;
        }
        let next = words.get(i + 1).map(|n| n.trim_end_matches([',', '.', ';', ':', ')'])).unwrap_or("");
        let two = format!("{next} {}", words.get(i + 2).copied().unwrap_or(""));
        if NOUNS.contains(&next) || NOUNS.iter().any(|n| n.contains(' ') && two.starts_with(n)) {
            out.push((digits, next.to_string()));
        }
    }
    out
}

#[test]
fn no_count_in_the_prose_goes_unchecked() {
    // The only counts left: zero, and the known failures against Pi Daemon 0.3.3, which are
    // the entries of its baseline.
    let baseline = std::fs::read_to_string(root().join("conformance/pi-daemon-0.3.3.baseline")).unwrap();
    let known = baseline.lines().filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#')).count();
    let mut bad = Vec::new();
    for p in prose() {
        let text = std::fs::read_to_string(&p).unwrap();
        for (n, noun) in counts(&text) {
            let checked = n == "0" || (n == known.to_string() && (noun == "known" || noun == "failed"));
            if !checked {
                bad.push(format!("{}: {n} {noun}", p.strip_prefix(root()).unwrap().display()));
            }
        }
    }
    assert!(bad.is_empty(), "counts that no test checks (remove them, or check them here):\n{}", bad.join("\n"));
    // The scanner finds what it must.
    let found = counts("runs 121 cases and 1,400 vectors; `[ 3/121] FAIL`, 4 known failures");
    assert_eq!(found.len(), 4, "{found:?}");
}

#[test]
fn every_schema_has_the_same_id_base() {
    let mut ids = BTreeMap::new();
    for e in std::fs::read_dir(root().join("schemas")).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.ends_with(".json") {
            continue;
        }
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(e.path()).unwrap()).unwrap();
        ids.insert(name, v["$id"].as_str().unwrap_or_default().to_string());
    }
    assert!(ids.len() >= 4, "{ids:?}");
    for (name, id) in &ids {
        assert_eq!(id, &format!("https://pi-conform.dev/schemas/{name}"), "{name}");
    }
}

/// The levels each clause of conformance/SPEC.md states (`**MUST**`, `**SHOULD**`, `**MAY**`);
/// a `####` sub-clause also has its `###` clause's.
fn spec_levels() -> BTreeMap<String, BTreeSet<String>> {
    let spec = std::fs::read_to_string(root().join("conformance/SPEC.md")).unwrap();
    let (mut own, mut parent) = (BTreeMap::<String, String>::new(), BTreeMap::new());
    let (mut cur, mut last3): (Option<String>, Option<String>) = (None, None);
    for line in spec.lines() {
        let head = line.strip_prefix("#### ").map(|h| (h, 4)).or_else(|| line.strip_prefix("### ").map(|h| (h, 3)));
        if let Some((h, depth)) = head.filter(|(h, _)| h.starts_with("PC-")) {
            let id = h.split(" — ").next().unwrap().to_string();
            if depth == 3 {
                last3 = Some(id.clone());
            } else if let Some(p) = &last3 {
                parent.insert(id.clone(), p.clone());
            }
            own.insert(id.clone(), String::new());
            cur = Some(id);
        } else if line.starts_with("## ") || line.starts_with("### ") {
            cur = None;
        } else if let Some(c) = &cur {
            own.get_mut(c).unwrap().push_str(line);
        }
    }
    let levels = |t: &str| -> BTreeSet<String> {
        ["MUST", "SHOULD", "MAY"].iter().filter(|l| t.contains(&format!("**{l}"))).map(|l| l.to_string()).collect()
    };
    own.iter()
        .map(|(id, t)| {
            let mut l = levels(t);
            if let Some(p) = parent.get(id) {
                l.extend(levels(&own[p]));
            }
            (id.clone(), l)
        })
        .collect()
}

/// Whether `id` (a `vector:` case) matches a `vector:` pattern of the 0.3.3 differences.
fn a_listed_decision(id: &str) -> bool {
    let text = std::fs::read_to_string(root().join("conformance/pi-daemon-0.3.3-differences.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let glob = |p: &str| match p.split_once('*') {
        None => p == id,
        Some((head, tail)) => id.starts_with(head) && id.ends_with(tail) && id.len() >= head.len() + tail.len(),
    };
    v["differences"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|d| d["match"].as_array().into_iter().flatten())
        .filter_map(serde_json::Value::as_str)
        .any(|p| p.starts_with("vector:") && glob(p))
}

#[test]
fn list_grades_match_the_spec() {
    let levels = spec_levels();
    let mut bad = Vec::new();
    let mut seen = 0;
    for suite in ["adapter", "daemon"] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_pi-conform"))
            .args([suite, "--list", "--format", "json"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0));
        for line in String::from_utf8(out.stdout).unwrap().lines() {
            let m: serde_json::Value = serde_json::from_str(line).unwrap();
            let (id, clause, level) =
                (m["id"].as_str().unwrap(), m["clause"].as_str().unwrap(), m["level"].as_str().unwrap().to_uppercase());
            seen += 1;
            let Some(stated) = levels.get(clause) else {
                bad.push(format!("{id}: clause {clause} is not in conformance/SPEC.md"));
                continue;
            };
            let silent = m["requirement"]
                .as_str()
                .is_some_and(|r| r.contains("a decision of this project where the protocol text is silent"));
            let decision = level == "SHOULD" && id.starts_with("vector:") && (a_listed_decision(id) || silent);
            if !stated.contains(&level) && !decision {
                bad.push(format!("{id}: graded {level}, but {clause} states {stated:?}"));
            }
        }
    }
    assert!(seen > 100, "{seen} cases listed");
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}
