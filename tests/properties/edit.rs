//! `fs.edit` (SPEC §5.3, PC-5.3.edit) on real files against a string model.
//!
//! The model: a malformed `expectedDigest` is `invalid_request` (payload validation comes
//! first); a missing file `not_found`; a digest that is not the file's SHA-256
//! `digest_mismatch`; a file that is not UTF-8 `not_utf8`; then the edits apply in order,
//! each to the result of the previous one, and each `oldText` must occur exactly once,
//! overlapping occurrences counted: none → `edit_not_found`, several → `edit_ambiguous`, the
//! 1-based index of the failing edit in the message. Success: `replacements` = number of
//! edits, `digest` = SHA-256 of the result, the file holds the result and keeps its mode.
//! Any failure leaves the file byte-for-byte as it was, and no temp file is ever left.
//!
//! Texts come from a three-letter alphabet (one of it two bytes wide) so that occurrences,
//! repeats and overlaps are frequent; most `oldText`s are cut from the model's current text,
//! and a `newText` may bring in a fourth letter that makes later cuts unique.

use std::os::unix::fs::PermissionsExt;

use pi_conform::adapter::fs::{Cancel, Root};
use pi_conform::adapter::ops::execute;
use pi_conform::adapter::session::Job;
use pi_conform::contract::types::tool_adapter::ToolOperation;
use pi_conform::contract::AdapterCode;
use proptest::prelude::*;
use proptest::sample::Index;
use serde_json::{json, Value};

use crate::common::{config, sha256_hex};

fn small_text(max: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(vec!['a', 'b', 'é']), 0..=max).prop_map(|v| v.into_iter().collect())
}

/// Where an edit's `oldText` comes from.
#[derive(Clone, Debug)]
enum Old {
    /// A slice of the model's current text: start and length in characters.
    Slice(Index, usize),
    /// Anything (from the same alphabet, plus a letter no text holds).
    Literal(String),
}

#[derive(Clone, Debug)]
struct EditSpec {
    old: Old,
    new: String,
}

#[derive(Clone, Debug)]
enum DigestSpec {
    Absent,
    Current,
    /// The digest of other bytes.
    Stale,
    /// Uppercase hex: not a digest at all.
    Malformed,
}

#[derive(Clone, Debug)]
struct Case {
    content: String,
    /// Replace one byte by 0xFF: not UTF-8.
    broken: Option<Index>,
    exists: bool,
    nested: bool,
    mode: u32,
    edits: Vec<EditSpec>,
    digest: DigestSpec,
}

fn edit_spec() -> impl Strategy<Value = EditSpec> {
    let old = prop_oneof![
        4 => (any::<Index>(), prop_oneof![1usize..=2, 3usize..=7]).prop_map(|(i, n)| Old::Slice(i, n)),
        1 => prop::collection::vec(prop::sample::select(vec!['a', 'b', 'é', 'q']), 1..=3)
            .prop_map(|v| Old::Literal(v.into_iter().collect())),
    ];
    let new = prop::collection::vec(prop::sample::select(vec!['a', 'b', 'é', 'X']), 0..=3);
    (old, new).prop_map(|(old, new)| EditSpec { old, new: new.into_iter().collect() })
}

fn case() -> impl Strategy<Value = Case> {
    let digest = prop_oneof![
        8 => Just(DigestSpec::Absent),
        4 => Just(DigestSpec::Current),
        1 => Just(DigestSpec::Stale),
        1 => Just(DigestSpec::Malformed),
    ];
    (
        small_text(14),
        prop::option::weighted(0.08, any::<Index>()),
        prop::bool::weighted(0.95),
        any::<bool>(),
        prop::sample::select(vec![0o600u32, 0o640, 0o644, 0o604]),
        prop::collection::vec(edit_spec(), 1..=4),
        digest,
    )
        .prop_map(|(content, broken, exists, nested, mode, edits, digest)| Case {
            content,
            broken,
            exists,
            nested,
            mode,
            edits,
            digest,
        })
}

/// What the model expects.
#[derive(Debug, PartialEq)]
enum Expect {
    Ok(String),
    Err(AdapterCode, Option<usize>),
}

/// Count the starts of `needle` in `hay`, overlapping ones included, character by character.
fn occurrences(hay: &str, needle: &str) -> Vec<usize> {
    hay.char_indices().map(|(i, _)| i).filter(|&i| hay[i..].starts_with(needle)).collect()
}

/// Resolve the edits against the model's evolving text and predict the outcome.
fn model(case: &Case, bytes: &[u8], digest: Option<&str>) -> (Vec<(String, String)>, Expect) {
    let mut edits = Vec::new();
    let mut verdict = None;
    if matches!(case.digest, DigestSpec::Malformed) {
        verdict = Some(Expect::Err(AdapterCode::InvalidRequest, None));
    } else if !case.exists {
        verdict = Some(Expect::Err(AdapterCode::NotFound, None));
    } else if digest.is_some_and(|d| d != sha256_hex(bytes)) {
        verdict = Some(Expect::Err(AdapterCode::DigestMismatch, None));
    }
    let mut text = match std::str::from_utf8(bytes) {
        Ok(t) => t.to_string(),
        Err(_) => {
            verdict.get_or_insert(Expect::Err(AdapterCode::NotUtf8, None));
            String::new()
        }
    };
    for (i, spec) in case.edits.iter().enumerate() {
        let old = match &spec.old {
            Old::Slice(at, n) if verdict.is_none() && !text.is_empty() => {
                let chars: Vec<char> = text.chars().collect();
                let start = at.index(chars.len());
                chars[start..(start + n).min(chars.len())].iter().collect()
            }
            Old::Slice(..) => "a".to_string(),
            Old::Literal(s) => s.clone(),
        };
        edits.push((old.clone(), spec.new.clone()));
        if verdict.is_some() {
            continue;
        }
        match occurrences(&text, &old)[..] {
            [] => verdict = Some(Expect::Err(AdapterCode::EditNotFound, Some(i + 1))),
            [at] => text = format!("{}{}{}", &text[..at], spec.new, &text[at + old.len()..]),
            _ => verdict = Some(Expect::Err(AdapterCode::EditAmbiguous, Some(i + 1))),
        }
    }
    (edits, verdict.unwrap_or(Expect::Ok(text)))
}

/// Every name under `dir`, relative, sorted.
fn tree(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![(dir.to_path_buf(), String::new())];
    while let Some((d, prefix)) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let name = format!("{prefix}{}", e.file_name().to_string_lossy());
            if e.file_type().unwrap().is_dir() {
                stack.push((e.path(), format!("{name}/")));
            }
            out.push(name);
        }
    }
    out.sort();
    out
}

fn run(case: &Case) -> Result<(), TestCaseError> {
    let tmp = tempfile::tempdir().unwrap();
    let rel = if case.nested { "d/f.txt" } else { "f.txt" };
    let file = tmp.path().join(rel);
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    let mut bytes = case.content.clone().into_bytes();
    if let Some(at) = case.broken {
        if !bytes.is_empty() {
            let i = at.index(bytes.len());
            bytes[i] = 0xff;
        } else {
            bytes.push(0xff);
        }
    }
    if case.exists {
        std::fs::write(&file, &bytes).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(case.mode)).unwrap();
    }
    let digest = match case.digest {
        DigestSpec::Absent => None,
        DigestSpec::Current => Some(sha256_hex(&bytes)),
        DigestSpec::Stale => Some(sha256_hex(&[bytes.as_slice(), b"x"].concat())),
        DigestSpec::Malformed => Some(sha256_hex(&bytes).to_uppercase()),
    };
    let (edits, want) = model(case, &bytes, digest.as_deref());
    let before = tree(tmp.path());

    let mut payload = json!({
        "path": rel,
        "edits": edits.iter().map(|(o, n)| json!({"oldText": o, "newText": n})).collect::<Vec<_>>(),
    });
    if let Some(d) = &digest {
        payload["expectedDigest"] = Value::from(d.as_str());
    }
    let job = Job {
        request_id: "edit-1".into(),
        operation: ToolOperation::FsEdit,
        payload,
        budget: 1 << 20,
        cancel: Cancel::new(),
    };
    let root = Root::open(tmp.path()).unwrap();
    let got = execute(&root, &job);

    prop_assert_eq!(tree(tmp.path()), before, "the directory changed (a temp file left?)");
    match (got, want) {
        (Ok(data), Expect::Ok(text)) => {
            let want = json!({"replacements": edits.len(), "digest": sha256_hex(text.as_bytes())});
            prop_assert_eq!(data, want);
            prop_assert_eq!(std::fs::read(&file).unwrap(), text.into_bytes());
            let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o7777;
            prop_assert_eq!(mode, case.mode, "the file lost its permission bits");
        }
        (Err(e), Expect::Err(code, index)) => {
            // A stale digest on a file that is not UTF-8: the spec does not order the two.
            let either = case.exists && case.broken.is_some() && matches!(case.digest, DigestSpec::Stale);
            if either {
                prop_assert!(matches!(e.code, AdapterCode::DigestMismatch | AdapterCode::NotUtf8), "{:?}", e);
            } else {
                prop_assert_eq!(e.code, code, "{}", e.message);
            }
            if let Some(i) = index {
                let prefix = format!("edit {i}:");
                prop_assert!(e.message.starts_with(&prefix), "message {:?} does not name edit {}", e.message, i);
            }
            if case.exists {
                prop_assert_eq!(std::fs::read(&file).unwrap(), bytes, "a failed edit changed the file");
            } else {
                prop_assert!(!file.exists(), "a failed edit created the file");
            }
        }
        (got, want) => prop_assert!(false, "edits {:?}: model {:?}, implementation {:?}", edits, want, got),
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(384))]

    #[test]
    fn edit_matches_the_model(case in case()) {
        run(&case)?;
    }
}

/// The model on the spec's own wording.
#[test]
fn model_counts_overlapping_occurrences() {
    assert_eq!(occurrences("aaa", "aa"), vec![0, 1]);
    assert_eq!(occurrences("abab", "ab"), vec![0, 2]);
    assert_eq!(occurrences("éaé", "é"), vec![0, 3]);
    assert!(occurrences("", "a").is_empty());
}
