//! What a successful result must say about the invoke it answers (SPEC §5.2–5.3): the
//! adapter obligations that need the request, judged by the adapter runner on every result of
//! every case ([`crate::conform::adapter::judge::FrameJudge`]), beside the single-frame ones
//! of [`super::adapter_output::data_obligation`].
//!
//! Each rule follows from the request and the data alone, whatever the files hold:
//!
//! - `fs.read`: `bytesRead` ≤ the request's `maxBytes` (default 4 MiB).
//! - `fs.list`: at most `maxEntries` entries (default 1000).
//! - `fs.search`: at most `maxResults` matches (default 1000); every match's `path` is the
//!   searched path or beneath it; a match whose `text` is shorter than 4096 characters is a
//!   whole line, so the query stands in it at `column` (1-based, in Unicode scalar values).
//! - `fs.write`: `bytesWritten` is the UTF-8 length of the content, `digest` its SHA-256;
//!   `created` is false when the file had to exist (`expectedDigest` given, or `create:false`)
//!   and true when it had to be missing (`overwrite:false`).
//! - `fs.edit`: `replacements` is the number of edits (all of them apply, or none).

use sha2::{Digest as _, Sha256};

use super::types::tool_adapter::AdapterFrame;

/// Default `maxEntries` of `fs.list` (SPEC §5.3).
pub const DEFAULT_MAX_ENTRIES: u64 = 1000;
/// Default `maxResults` of `fs.search` (SPEC §5.3).
pub const DEFAULT_MAX_RESULTS: u64 = 1000;
/// Largest `maxBytes` of `fs.read`, also its default (SPEC §5.2).
pub const MAX_READ_BYTES: u64 = 4 * 1024 * 1024;
/// Longest line, in characters, returned whole as a search match `text` (SPEC §5.3); a longer
/// one gives a window of exactly this many characters.
pub const MAX_MATCH_TEXT_CHARS: usize = 4096;

/// SPEC §5.3 "Digest": the SHA-256 of a file's complete bytes, lowercase hex.
pub fn content_digest(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Whether a match `path` lies in the searched `root` (the request's path: a file, a
/// directory, `.` or `./` for the root, or `dir/`): equal to it or beneath it.
pub fn within_searched(root: &str, path: &str) -> bool {
    let root = root.strip_suffix('/').filter(|r| !r.is_empty()).unwrap_or(root);
    if root == "." {
        return true;
    }
    path == root || path.strip_prefix(root).is_some_and(|rest| rest.starts_with('/'))
}

/// Whether `query` stands in the line `text` at the 1-based scalar-value `column`.
pub fn query_at_column(text: &str, column: u64, query: &str) -> bool {
    let Some(skip) = usize::try_from(column).ok().and_then(|c| c.checked_sub(1)) else { return false };
    match text.char_indices().nth(skip) {
        Some((at, _)) => text[at..].starts_with(query),
        None => false,
    }
}

/// The first rule of SPEC §5.2–5.3 that the successful `result` breaks about the `invoke` it
/// answers, as (clause, field, message); `None` when it keeps them all, and for any pair that
/// is not an invoke and a successful result of the same operation.
pub fn answer_obligation(invoke: &AdapterFrame, result: &AdapterFrame) -> Option<(&'static str, String, String)> {
    let fail = |clause, field: String, message: String| Some((clause, field, message));
    match (invoke, result) {
        (AdapterFrame::InvokeFsRead(i), AdapterFrame::ResultFsRead(r)) => {
            let max = i.payload.max_bytes.map_or(MAX_READ_BYTES, |m| m.get());
            let read = u64::try_from(*r.data.bytes_read).unwrap_or(u64::MAX);
            (read > max).then(|| {
                (
                    "PC-5.3.read",
                    "data.bytesRead".into(),
                    format!("bytesRead {read} is over the invoke's maxBytes {max}"),
                )
            })
        }
        (AdapterFrame::InvokeFsList(i), AdapterFrame::ResultFsList(r)) => {
            let max = i.payload.max_entries.map_or(DEFAULT_MAX_ENTRIES, |m| m.get());
            let n = r.data.entries.len() as u64;
            (n > max).then(|| {
                ("PC-5.3.list", "data.entries".into(), format!("{n} entries, over the invoke's maxEntries {max}"))
            })
        }
        (AdapterFrame::InvokeFsSearch(i), AdapterFrame::ResultFsSearch(r)) => {
            let p = &i.payload;
            let max = p.max_results.map_or(DEFAULT_MAX_RESULTS, |m| m.get());
            let n = r.data.matches.len() as u64;
            if n > max {
                return fail(
                    "PC-5.3.search",
                    "data.matches".into(),
                    format!("{n} matches, over the invoke's maxResults {max}"),
                );
            }
            for (k, m) in r.data.matches.iter().enumerate() {
                if !within_searched(&p.path, &m.path) {
                    return fail(
                        "PC-5.3.search",
                        format!("data.matches.{k}.path"),
                        "a match outside the searched path (it is the path searched or beneath it)".into(),
                    );
                }
                let whole_line = m.text.chars().count() < MAX_MATCH_TEXT_CHARS;
                if whole_line && !query_at_column(&m.text, m.column.get(), &p.query) {
                    return fail(
                        "PC-5.3.search",
                        format!("data.matches.{k}.column"),
                        "the query does not stand in the match's line at its column (1-based, in Unicode scalar \
                         values)"
                            .into(),
                    );
                }
            }
            None
        }
        (AdapterFrame::InvokeFsWrite(i), AdapterFrame::ResultFsWrite(r)) => {
            let (p, d) = (&i.payload, &r.data);
            let len = p.content.len() as u64;
            if u64::try_from(*d.bytes_written).ok() != Some(len) {
                return fail(
                    "PC-5.3.write",
                    "data.bytesWritten".into(),
                    format!("bytesWritten is {}, not the content's UTF-8 length {len}", *d.bytes_written),
                );
            }
            if d.digest.as_str() != content_digest(p.content.as_bytes()) {
                return fail(
                    "PC-5.3.write",
                    "data.digest".into(),
                    "digest is not the SHA-256 of the content written".into(),
                );
            }
            let must_exist = p.expected_digest.is_some() || p.create == Some(false);
            if d.created && must_exist {
                return fail(
                    "PC-5.3.write",
                    "data.created".into(),
                    "created:true, yet the invoke let it replace only an existing file (expectedDigest or \
                     create:false)"
                        .into(),
                );
            }
            (!d.created && p.overwrite == Some(false)).then(|| {
                (
                    "PC-5.3.write",
                    "data.created".into(),
                    "created:false, yet the invoke (overwrite:false) let it only create a missing file".into(),
                )
            })
        }
        (AdapterFrame::InvokeFsEdit(i), AdapterFrame::ResultFsEdit(r)) => {
            let want = i.payload.edits.len() as i64;
            (r.data.replacements != want).then(|| {
                (
                    "PC-5.3.edit",
                    "data.replacements".into(),
                    format!(
                        "replacements is {}, not the invoke's {want} edits (all apply or none)",
                        r.data.replacements
                    ),
                )
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;
    use crate::contract::adapter_output::judge_adapter_output;
    use crate::contract::frame::tests::{base, binding};
    use crate::contract::frame::{parse_adapter_frame, Direction};

    #[test]
    fn the_digest_is_lowercase_sha256_hex() {
        // printf 'abc' | sha256sum
        assert_eq!(content_digest(b"abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    }

    #[test]
    fn a_match_lies_in_the_searched_path() {
        for (root, path) in
            [(".", "a/b"), ("./", "a"), ("src", "src/x.rs"), ("src/", "src/a/b.rs"), ("src/x.rs", "src/x.rs")]
        {
            assert!(within_searched(root, path), "{root} {path}");
        }
        for (root, path) in [("src", "srcx/a"), ("src", "other/src/a"), ("src/x.rs", "src/x.rs2"), ("a/b", "a")] {
            assert!(!within_searched(root, path), "{root} {path}");
        }
    }

    #[test]
    fn the_query_stands_at_its_scalar_column() {
        assert!(query_at_column("find me", 6, "me"));
        assert!(query_at_column("é😀x😀", 3, "x"));
        assert!(!query_at_column("é😀x😀", 4, "x"));
        assert!(!query_at_column("abc", 0, "a"));
        assert!(!query_at_column("abc", 4, "c"));
        assert!(query_at_column("abc", 3, "c"));
    }

    /// The worked example's invoke and a successful result of `op`, as generated types.
    fn pair(op: &str, payload: Value, data: Value) -> (AdapterFrame, AdapterFrame) {
        let b = binding();
        let mut i = base("invoke");
        i["operation"] = json!(op);
        i["payload"] = payload;
        let invoke = parse_adapter_frame(&serde_json::to_vec(&i).unwrap(), &b, Direction::ToAdapter).expect("invoke");
        let mut r = base("result");
        r["operation"] = json!(op);
        r["data"] = data;
        let (_, result) = judge_adapter_output(&serde_json::to_vec(&r).unwrap(), &b).expect("result");
        (invoke, result)
    }

    /// The clause and field `answer_obligation` refuses the pair on (`None`: it passes).
    fn judge(op: &str, payload: Value, data: Value) -> Option<(&'static str, String)> {
        let (i, r) = pair(op, payload, data);
        answer_obligation(&i, &r).map(|(c, f, _)| (c, f))
    }

    #[test]
    fn a_read_keeps_to_max_bytes() {
        let data = |n: u64| json!({"content": "x".repeat(n as usize), "bytesRead": n, "eof": false});
        assert_eq!(judge("fs.read", json!({"path": "a", "maxBytes": 3}), data(3)), None);
        assert_eq!(
            judge("fs.read", json!({"path": "a", "maxBytes": 3}), data(4)),
            Some(("PC-5.3.read", "data.bytesRead".into()))
        );
        assert_eq!(judge("fs.read", json!({"path": "a"}), data(4)), None);
    }

    #[test]
    fn a_list_keeps_to_max_entries_and_its_default() {
        let entries = |n: usize| {
            let e: Vec<Value> =
                (0..n).map(|k| json!({"name": format!("f{k:05}"), "type": "file", "size": 1})).collect();
            json!({"entries": e, "truncated": true})
        };
        assert_eq!(judge("fs.list", json!({"path": ".", "maxEntries": 2}), entries(2)), None);
        assert_eq!(
            judge("fs.list", json!({"path": ".", "maxEntries": 2}), entries(3)),
            Some(("PC-5.3.list", "data.entries".into()))
        );
        assert_eq!(judge("fs.list", json!({"path": "."}), entries(1000)), None);
        assert_eq!(judge("fs.list", json!({"path": "."}), entries(1001)), Some(("PC-5.3.list", "data.entries".into())));
    }

    #[test]
    fn search_matches_keep_to_max_results_the_searched_path_and_their_column() {
        let m = |path: &str, column: u64, text: &str| json!({"path": path, "line": 1, "column": column, "text": text});
        let q = |path: &str| json!({"path": path, "query": "needle", "maxResults": 2});
        let ok = json!({"matches": [m("src/a", 3, "a needle"), m("src/b", 1, "needle")], "truncated": false});
        assert_eq!(judge("fs.search", q("src"), ok.clone()), None);
        assert_eq!(judge("fs.search", q("src/"), ok.clone()), None);
        assert_eq!(judge("fs.search", q("."), ok.clone()), None);
        assert_eq!(judge("fs.search", q("srcx"), ok), Some(("PC-5.3.search", "data.matches.0.path".into())));
        let three = json!({"matches": [m("a", 1, "needle"), m("a", 8, "needle needle"), m("b", 1, "needle")],
            "truncated": true});
        assert_eq!(judge("fs.search", q("."), three), Some(("PC-5.3.search", "data.matches".into())));
        // Columns count scalar values: after é and an astral character, the third.
        let astral = json!({"matches": [m("a", 3, "\u{e9}\u{1F600}needle")], "truncated": false});
        assert_eq!(judge("fs.search", q("."), astral), None);
        let utf16 = json!({"matches": [m("a", 4, "\u{e9}\u{1F600}needle")], "truncated": false});
        assert_eq!(judge("fs.search", q("."), utf16), Some(("PC-5.3.search", "data.matches.0.column".into())));
        // A 4096-character text may be a window of a longer line: its column is not judged.
        let window = json!({"matches": [m("a", 9000, &"n".repeat(4096))], "truncated": false});
        assert_eq!(judge("fs.search", q("."), window), None);
        let short = json!({"matches": [m("a", 1, &"n".repeat(4095))], "truncated": false});
        assert_eq!(judge("fs.search", q("."), short), Some(("PC-5.3.search", "data.matches.0.column".into())));
    }

    #[test]
    fn a_write_reports_its_content_and_what_its_flags_allowed() {
        let d = content_digest("h\u{e9}".as_bytes());
        let data =
            |created: bool, n: u64, digest: &str| json!({"created": created, "bytesWritten": n, "digest": digest});
        let w = |extra: Value| {
            let mut p = json!({"path": "a", "content": "h\u{e9}"});
            p.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            p
        };
        assert_eq!(judge("fs.write", w(json!({})), data(true, 3, &d)), None);
        assert_eq!(judge("fs.write", w(json!({})), data(false, 3, &d)), None);
        assert_eq!(
            judge("fs.write", w(json!({})), data(true, 2, &d)),
            Some(("PC-5.3.write", "data.bytesWritten".into()))
        );
        let other = content_digest(b"he");
        assert_eq!(
            judge("fs.write", w(json!({})), data(true, 3, &other)),
            Some(("PC-5.3.write", "data.digest".into()))
        );
        let created = Some(("PC-5.3.write", "data.created".into()));
        assert_eq!(judge("fs.write", w(json!({"create": false})), data(true, 3, &d)), created);
        assert_eq!(judge("fs.write", w(json!({"expectedDigest": other})), data(true, 3, &d)), created);
        assert_eq!(judge("fs.write", w(json!({"expectedDigest": other})), data(false, 3, &d)), None);
        assert_eq!(judge("fs.write", w(json!({"overwrite": false})), data(false, 3, &d)), created);
        assert_eq!(judge("fs.write", w(json!({"overwrite": false})), data(true, 3, &d)), None);
    }

    #[test]
    fn an_edit_reports_every_edit_applied() {
        let d = content_digest(b"x");
        let p = json!({"path": "a", "edits": [{"oldText": "a", "newText": "b"}, {"oldText": "c", "newText": ""}]});
        assert_eq!(judge("fs.edit", p.clone(), json!({"replacements": 2, "digest": d})), None);
        for n in [0, 1, 3] {
            assert_eq!(
                judge("fs.edit", p.clone(), json!({"replacements": n, "digest": d})),
                Some(("PC-5.3.edit", "data.replacements".into())),
                "{n}"
            );
        }
    }

    #[test]
    fn other_pairs_are_not_judged() {
        let (i, _) = pair("fs.read", json!({"path": "a"}), json!({"content": "", "bytesRead": 0, "eof": true}));
        let (_, r) = pair("fs.list", json!({"path": "."}), json!({"entries": [], "truncated": false}));
        assert_eq!(answer_obligation(&i, &r), None);
    }
}
