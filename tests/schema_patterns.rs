//! The schema's path patterns are written without lookaround (so validators run them on a
//! DFA rather than a backtracking VM). This checks that each one still accepts exactly what
//! its rule says, over every string up to a length built from the characters that matter,
//! against two references: a plain Rust model of the rule, and the earlier lookaround form
//! of the pattern, run with `regress` (an ECMA-262 engine, the dialect JSON Schema names).

use serde_json::Value;

/// `RelativePath` as the schema's description states it: `.` or `./`, or components
/// separated by single `/` with at most one trailing `/`; no component empty, `.` or `..`;
/// no `\`, C0 control or DEL anywhere.
fn relative_path_model(s: &str) -> bool {
    if s == "." || s == "./" {
        return true;
    }
    let body = s.strip_suffix('/').unwrap_or(s);
    !body.is_empty() && body.split('/').all(|c| !c.is_empty() && c != "." && c != ".." && c.chars().all(plain))
}

/// `EntryName`: 1 or more characters, not `.` or `..`, no `/`, no C0 control or DEL (a `\`
/// is allowed: it is an ordinary byte in a POSIX name).
fn entry_name_model(s: &str) -> bool {
    !s.is_empty() && s != "." && s != ".." && !s.contains('/') && s.chars().all(|c| c == '\\' || plain(c))
}

fn plain(c: char) -> bool {
    !(c == '\\' || c < '\u{20}' || c == '\u{7f}')
}

/// The patterns as the schema held them before (lookaround).
const OLD_RELATIVE_PATH: &str =
    r"^(?:\./?|(?!\.\.?(?:/|$))[^/\\\x00-\x1f\x7f]+(?:/(?!\.\.?(?:/|$))[^/\\\x00-\x1f\x7f]+)*/?)$";
const OLD_ENTRY_NAME: &str = r"^(?!\.\.?$)[^/\x00-\x1f\x7f]+$";

fn schema_pattern(def: &str) -> String {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/schemas/tool-adapter.schema.json"))
        .expect("read the schema");
    let schema: Value = serde_json::from_str(&text).expect("the schema is JSON");
    schema["$defs"][def]["pattern"].as_str().unwrap_or_else(|| panic!("$defs.{def}.pattern")).to_string()
}

/// Every string over `alphabet` of length 0..=max_len.
fn all_strings(alphabet: &[&str], max_len: usize) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut layer = vec![String::new()];
    for _ in 0..max_len {
        layer = layer.iter().flat_map(|p| alphabet.iter().map(move |a| format!("{p}{a}"))).collect();
        out.extend(layer.iter().cloned());
    }
    out
}

fn check(def: &str, old: &str, model: fn(&str) -> bool, alphabet: &[&str], max_len: usize) {
    let new_src = schema_pattern(def);
    assert!(!new_src.contains("(?=") && !new_src.contains("(?!"), "{def} uses lookaround again: {new_src}");
    let new = regress::Regex::new(&new_src).expect("the new pattern compiles");
    let old = regress::Regex::new(old).expect("the old pattern compiles");
    let strings = all_strings(alphabet, max_len);
    let mut accepted = 0;
    for s in &strings {
        let (n, o, m) = (new.find(s).is_some(), old.find(s).is_some(), model(s));
        assert_eq!(n, m, "{def}: the schema pattern and the rule disagree on {s:?}");
        assert_eq!(n, o, "{def}: the schema pattern and its lookaround form disagree on {s:?}");
        accepted += usize::from(n);
    }
    // Both verdicts occur in quantity: the comparison is not vacuous.
    assert!(accepted > 1000 && strings.len() - accepted > 1000, "{def}: {accepted} of {}", strings.len());
}

#[test]
fn relative_path_pattern_is_the_rule() {
    check("RelativePath", OLD_RELATIVE_PATH, relative_path_model, &[".", "/", "\\", "a", "\u{1}", "\u{7f}", "é"], 6);
}

#[test]
fn entry_name_pattern_is_the_rule() {
    check("EntryName", OLD_ENTRY_NAME, entry_name_model, &[".", "/", "\\", "a", "\u{1f}", "\u{7f}", "日"], 6);
}

/// The compiled validator (jsonschema, the engine every frame goes through) agrees too, on a
/// sample of paths inside a real frame position.
#[test]
fn the_frame_validator_applies_the_rule() {
    use pi_conform::contract::schema::{first_violation, Entry};
    let base = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/vectors/bases/invoke.json"))
        .expect("read the invoke base vector");
    let base: Value = serde_json::from_str(&base).expect("the base vector is JSON");
    assert!(first_violation(Entry::Frame, &base).is_none(), "the base vector is valid");
    let frame = |path: &str| {
        let mut f = base.clone();
        f["operation"] = "fs.stat".into();
        f["payload"] = serde_json::json!({ "path": path });
        f
    };
    let alphabet = [".", "/", "\\", "a", "\u{1}"];
    let mut seen = [0usize; 2];
    for s in all_strings(&alphabet, 5).iter().filter(|s| !s.is_empty()) {
        let ok = first_violation(Entry::Frame, &frame(s)).is_none();
        assert_eq!(ok, relative_path_model(s), "frame validator on path {s:?}");
        seen[usize::from(ok)] += 1;
    }
    assert!(seen[0] > 100 && seen[1] > 100, "{seen:?}");
}
