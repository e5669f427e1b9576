//! Docs true by construction (issue 26): no count in README.md, docs/ or examples/ that a test
//! does not check; one `$id` base for every schema; every case's level in `--list` is one its
//! clause in conformance/SPEC.md states. And the manual's shape: README.md at most 300 lines
//! with its two first-screen commands; every docs/ page linked from docs/README.md; every
//! relative link and anchor resolving; every pinned kill-matrix fault with its row in docs/.

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

/// What the count scan reads: [`prose`] and the CI recipe's workflow and script
/// (`examples/ci/`), whose comments are prose too.
fn counted() -> Vec<PathBuf> {
    let mut out = prose();
    let mut ci: Vec<PathBuf> = std::fs::read_dir(root().join("examples/ci"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yml" || x == "sh"))
        .collect();
    ci.sort();
    assert!(!ci.is_empty(), "examples/ci/ holds the CI recipe");
    out.extend(ci);
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
    // The only counts left: zero, the known failures against Pi Daemon 0.3.3, which are the
    // entries of its baseline, and the README's line limit, which the test below checks.
    let baseline = std::fs::read_to_string(root().join("conformance/pi-daemon-0.3.3.baseline")).unwrap();
    let known = baseline.lines().filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#')).count();
    let mut bad = Vec::new();
    for p in counted() {
        let text = std::fs::read_to_string(&p).unwrap();
        for (n, noun) in counts(&text) {
            let checked = n == "0"
                || (n == known.to_string() && (noun == "known" || noun == "failed"))
                || (n == README_MAX_LINES.to_string() && noun == "lines");
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

// ------------------------------------------------------------------ issue 26, items 6 and 8

/// The most lines README.md may have: the rest lives in docs/.
const README_MAX_LINES: usize = 300;

/// Every `.md` file directly in docs/.
fn docs_pages() -> Vec<PathBuf> {
    let mut pages: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    pages.sort();
    pages
}

/// `text` without its fenced code blocks (each fenced line becomes empty, so line numbers stay).
fn without_fences(text: &str) -> String {
    let mut out = String::new();
    let mut fence: Option<String> = None;
    for line in text.lines() {
        let t = line.trim_start();
        match &fence {
            Some(f) if t.starts_with(f.as_str()) && t.trim_start_matches('`').trim().is_empty() => fence = None,
            Some(_) => {}
            None if t.starts_with("```") => fence = Some(t.chars().take_while(|c| *c == '`').collect()),
            None => {
                out.push_str(line);
                out.push('\n');
                continue;
            }
        }
        out.push('\n');
    }
    out
}

/// `text` without its inline code spans (a run of N backticks up to the next run of N).
fn without_code_spans(text: &str) -> String {
    let b: Vec<char> = text.chars().collect();
    let (mut out, mut i) = (String::new(), 0);
    while i < b.len() {
        if b[i] != '`' {
            out.push(b[i]);
            i += 1;
            continue;
        }
        let n = b[i..].iter().take_while(|c| **c == '`').count();
        let mut j = i + n;
        let mut end = None;
        while j < b.len() {
            if b[j] == '`' {
                let m = b[j..].iter().take_while(|c| **c == '`').count();
                if m == n {
                    end = Some(j + m);
                    break;
                }
                j += m;
            } else {
                j += 1;
            }
        }
        match end {
            Some(e) => i = e,
            None => {
                out.extend(&b[i..i + n]);
                i += n;
            }
        }
    }
    out
}

/// The targets of the inline links `[text](target)` of a Markdown text, outside code.
fn link_targets(text: &str) -> Vec<String> {
    let text = without_code_spans(&without_fences(text));
    let mut out = Vec::new();
    let mut rest = text.as_str();
    while let Some(i) = rest.find("](") {
        rest = &rest[i + 2..];
        if let Some(end) = rest.find(')') {
            let target = rest[..end].trim();
            if !target.is_empty() && !target.contains(char::is_whitespace) {
                out.push(target.to_string());
            }
        }
    }
    out
}

/// GitHub's anchor of a heading: lower case, code marks dropped, punctuation other than `-`
/// and `_` dropped, spaces to hyphens.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a Markdown file's headings (outside code blocks), with GitHub's `-1`, `-2`
/// suffixes for repeats.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen = BTreeMap::<String, usize>::new();
    let mut out = BTreeSet::new();
    for line in without_fences(text).lines() {
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if (1..=6).contains(&hashes) && line[hashes..].starts_with(' ') {
            let s = slug(&line[hashes..]);
            let n = seen.entry(s.clone()).or_insert(0);
            out.insert(if *n == 0 { s.clone() } else { format!("{s}-{n}") });
            *n += 1;
        }
    }
    out
}

#[test]
fn the_readme_fits_in_300_lines_and_keeps_its_two_first_screen_commands() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(
        lines <= README_MAX_LINES,
        "README.md has {lines} lines; move detail into docs/ (at most {README_MAX_LINES})"
    );
    // The first code block, on the first screen, holds the main job and the test command.
    let head: Vec<&str> = readme.lines().take(30).collect();
    let open = head.iter().position(|l| l.starts_with("```")).expect("a code block on the first screen");
    let close =
        open + 1 + head[open + 1..].iter().position(|l| l.starts_with("```")).expect("closed on the first screen");
    let block = &head[open + 1..close];
    for cmd in ["cargo run --release -- selftest ", "cargo test --locked "] {
        assert!(block.iter().any(|l| l.starts_with(cmd)), "the first screen lacks `{}`: {block:?}", cmd.trim());
    }
    // `cargo test --locked` is what CI runs.
    let ci = std::fs::read_to_string(root().join(".ci/run")).unwrap();
    assert!(ci.lines().any(|l| l.trim() == "cargo test --locked"), ".ci/run no longer runs `cargo test --locked`");
}

#[test]
fn every_docs_page_is_linked_from_the_index_and_scanned_for_counts() {
    let index = std::fs::read_to_string(root().join("docs/README.md")).unwrap();
    let linked: BTreeSet<String> =
        link_targets(&index).into_iter().map(|t| t.split('#').next().unwrap().to_string()).collect();
    let scanned = counted();
    let mut missing = Vec::new();
    for page in docs_pages() {
        let name = page.file_name().unwrap().to_string_lossy().into_owned();
        assert!(scanned.contains(&page), "{name} is not scanned for counts");
        if name != "README.md" && !linked.contains(&name) {
            missing.push(name);
        }
    }
    assert!(missing.is_empty(), "docs pages not linked from docs/README.md: {missing:?}");
    assert!(docs_pages().len() > 10, "docs/ holds one page per command");
}

#[test]
fn every_relative_link_resolves() {
    let mut files = vec![root().join("README.md")];
    files.extend(
        prose().into_iter().filter(|p| p.starts_with(root().join("docs")) || p.starts_with(root().join("examples"))),
    );
    let mut bad = Vec::new();
    let mut checked = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let name = file.strip_prefix(root()).unwrap().display().to_string();
        for target in link_targets(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (path, anchor) = match target.split_once('#') {
                Some((p, a)) => (p, Some(a)),
                None => (target.as_str(), None),
            };
            let resolved = if path.is_empty() { file.clone() } else { file.parent().unwrap().join(path) };
            if !resolved.exists() {
                bad.push(format!("{name}: {target}: no such file"));
                continue;
            }
            if let Some(a) = anchor {
                let md = if resolved.is_dir() { resolved.join("README.md") } else { resolved.clone() };
                let known = std::fs::read_to_string(&md).map(|t| anchors(&t)).unwrap_or_default();
                if !known.contains(a) {
                    bad.push(format!("{name}: {target}: no heading with anchor #{a}"));
                }
            }
        }
    }
    assert!(bad.is_empty(), "broken links:\n{}", bad.join("\n"));
    assert!(checked > 50, "{checked} links checked");
    // The checker finds what it must.
    assert_eq!(link_targets("see [a](b.md#c) and `[x](y)` and\n```\n[p](q)\n```\n"), ["b.md#c"]);
    assert!(anchors("# A `b`: c\n## 1. D\n```\n# not\n```\n## 1. D\n").contains("1-d-1"));
    assert_eq!(slug("The real 0.3.3 example"), "the-real-033-example");
}

/// Each fault of a pinned kill matrix (`conformance/…kill-matrix.txt`) has its row on its page.
#[test]
fn every_fault_of_the_kill_matrices_has_a_row_in_the_docs() {
    for (matrix, page) in [
        ("conformance/kill-matrix.txt", "docs/kill-matrix.md"),
        ("conformance/daemon-kill-matrix.txt", "docs/daemon-kill-matrix.md"),
    ] {
        let faults: Vec<String> = std::fs::read_to_string(root().join(matrix))
            .unwrap()
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
            .map(|l| l.split_whitespace().next().unwrap().to_string())
            .collect();
        assert!(!faults.is_empty(), "{matrix}");
        let text = std::fs::read_to_string(root().join(page)).unwrap();
        let rows: String = text.lines().filter(|l| l.starts_with("| `")).collect::<Vec<_>>().join("\n");
        let missing: Vec<&String> = faults.iter().filter(|f| !rows.contains(&format!("`{f}`"))).collect();
        assert!(missing.is_empty(), "{page} has no row for {missing:?} of {matrix}");
    }
}
