//! What an adapter sends, judged one frame at a time: the single judge of adapter output,
//! called by the adapter runner on every frame it receives and by `pi-conform validate --kind
//! frame --direction to-daemon` on every line.
//!
//! A frame passes when a daemon accepts it ([`judge_adapter_frame`], [`Direction::ToDaemon`])
//! and it meets the adapter's own obligations on a single frame, which a daemon does not
//! check (Pi Daemon 0.3.3 accepts any well-formed error code):
//!
//! - PC-5.3.errors: an error body's `code` is one of the closed set of adapter error codes,
//!   with that code's `retryable` flag ([`check_adapter_error_code`]);
//! - PC-4.5: a `result` for one of the six operations that the bind did not grant is exactly
//!   `ok:false` `operation_not_granted` (a daemon never sends such an invoke, so a daemon's
//!   judge refuses the frame on `operation`; the runner sends one on purpose).
//! - PC-5.3.*: what one successful result's `data` says about itself ([`data_obligation`]):
//!   `fs.read`'s `bytesRead` is the UTF-8 length of its `content` (the bytes consumed, never
//!   lossy); `fs.stat` of a directory has `size` 0; `fs.list`'s entries are sorted bytewise by
//!   name, each name once; `fs.search`'s matches of one path come together, left to right
//!   (`line`, then `column`, strictly increasing); a `modifiedAt` is a real UTC time (the
//!   schema's pattern admits month 13).
//!
//! Rules that need the exchange (which invoke a result answers, `bound` first) are the
//! runner's, not a single frame's; what a result's data must say about its invoke is spelled
//! in [`super::answer`].

use serde_json::Value;

use super::adapter_error::{check_adapter_error_code, AdapterCode};
use super::data_order::{first_out_of_order, first_unsorted, is_real_time};
use super::frame::{judge_adapter_frame, Binding, Direction, Disposition, FrameError, FrameKind, JudgedFrame};
use super::types::tool_adapter::{AdapterFrame, EntryType, ToolOperation};
use super::{Code, ContractError};

/// Which kind of rule a refused frame broke.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    /// A rule a daemon applies: the frame is refused outright.
    Frame,
    /// The contract accepted the frame but its generated type refused it: a harness bug (the
    /// schema and the generated types agree on every vector, `tests/agreement.rs`).
    Typed,
    /// An adapter obligation on a single frame (the clause): a daemon would accept the frame.
    Obligation(&'static str),
}

/// Why a frame an adapter sent does not pass.
#[derive(Debug)]
pub struct OutputError {
    /// The typed refusal (`code`, `details.field`, message, disposition).
    pub error: FrameError,
    /// The kind of rule it broke.
    pub rule: Rule,
    /// The frame, when a daemon accepts it and it has its generated type (an
    /// [`Rule::Obligation`] breach): it still takes part in the exchange.
    pub frame: Option<Box<(JudgedFrame, AdapterFrame)>>,
    /// The strictly decoded line, when it decodes at all.
    pub value: Option<Value>,
}

impl OutputError {
    fn obligation(clause: &'static str, field: String, message: String, j: JudgedFrame, f: AdapterFrame) -> Self {
        let value = Some(j.value.clone());
        OutputError {
            error: FrameError {
                error: ContractError::new(Code::AdapterProtocolInvalid, field, message),
                disposition: Disposition::Close,
                attribution: None,
            },
            rule: Rule::Obligation(clause),
            frame: Some(Box::new((j, f))),
            value,
        }
    }
}

/// Judge one line (LF excluded) an adapter sent on `binding`: the frame and its generated type,
/// or why it does not pass.
pub fn judge_adapter_output(line: &[u8], binding: &Binding) -> Result<(JudgedFrame, AdapterFrame), OutputError> {
    let j = match judge_adapter_frame(line, binding, Direction::ToDaemon) {
        Ok(j) => j,
        Err(e) if e.error.field() == "operation" => match ungranted_result(line, binding) {
            Some(j) => return ungranted(j, e),
            None => return Err(refused(line, e)),
        },
        Err(e) => return Err(refused(line, e)),
    };
    let f = match j.typed() {
        Ok(f) => f,
        Err(e) => return Err(OutputError { error: e, rule: Rule::Typed, frame: None, value: Some(j.value) }),
    };
    error_code(j, f)
}

/// Whether `judge_adapter_output` passes the line, without building what it returns when a
/// faster path can tell (`validate`'s hot path): a frame the one-pass path accepts as an
/// adapter's output (a daemon's rules and the data obligations of [`data_obligation`], read
/// on its tape) and that carries no error body meets every single-frame obligation.
pub fn adapter_output_passes(line: &[u8], binding: &Binding) -> Result<(), OutputError> {
    match super::onepass::accept_adapter_output(line, binding) {
        Some(FrameKind::Result { ok: true, .. } | FrameKind::Bound | FrameKind::Revoked | FrameKind::Aborted(true)) => {
            Ok(())
        }
        _ => judge_adapter_output(line, binding).map(|_| ()),
    }
}

fn refused(line: &[u8], e: FrameError) -> OutputError {
    OutputError { error: e, rule: Rule::Frame, frame: None, value: crate::wire::decode_strict(line).ok() }
}

/// PC-5.3.errors on the error body, if any; then what a successful result's `data` says about
/// itself ([`data_obligation`]).
fn error_code(j: JudgedFrame, f: AdapterFrame) -> Result<(JudgedFrame, AdapterFrame), OutputError> {
    match f.error().map(|body| check_adapter_error_code(body, "error")) {
        Some(Err(e)) => {
            let (field, message) = (e.field().to_string(), e.message.clone());
            Err(OutputError::obligation("PC-5.3.errors", field, message, j, f))
        }
        _ => match data_obligation(&f) {
            Some((clause, field, message)) => Err(OutputError::obligation(clause, field, message, j, f)),
            None => Ok((j, f)),
        },
    }
}

/// The first single-frame rule of PC-5.3 that a successful result's `data` breaks, as
/// (clause, field, message); `None` when it keeps them all (and for any other frame). The
/// rules need no request: each is what the data says about itself.
pub fn data_obligation(f: &AdapterFrame) -> Option<(&'static str, String, String)> {
    let fail = |clause, field: String, message: &str| Some((clause, field, message.to_string()));
    match f {
        AdapterFrame::ResultFsRead(r) => {
            let d = &r.data;
            if u64::try_from(*d.bytes_read).ok() != Some(d.content.len() as u64) {
                return fail(
                    "PC-5.3.read",
                    "data.bytesRead".into(),
                    "bytesRead is not the UTF-8 length of content (the bytes consumed, never lossy)",
                );
            }
            None
        }
        AdapterFrame::ResultFsStat(r) => {
            let d = &r.data;
            if d.type_ == EntryType::Directory && *d.size != 0 {
                return fail("PC-5.3.stat", "data.size".into(), "a directory's size is 0");
            }
            d.modified_at.as_ref().filter(|t| !is_real_time(t)).and_then(|_| {
                fail("PC-5.3.stat", "data.modifiedAt".into(), "modifiedAt is not a real UTC date and time")
            })
        }
        AdapterFrame::ResultFsList(r) => {
            let entries = &r.data.entries;
            if let Some(i) = first_unsorted(entries.iter().map(|e| e.name.as_str())) {
                return fail(
                    "PC-5.3.list",
                    format!("data.entries.{i}.name"),
                    "entries are not sorted bytewise by name, each name once",
                );
            }
            let bad_time = entries.iter().position(|e| e.modified_at.as_ref().is_some_and(|t| !is_real_time(t)));
            bad_time.and_then(|i| {
                fail(
                    "PC-5.3.list",
                    format!("data.entries.{i}.modifiedAt"),
                    "modifiedAt is not a real UTC date and time",
                )
            })
        }
        AdapterFrame::ResultFsSearch(r) => {
            let matches = r.data.matches.iter().map(|m| (m.path.as_str(), m.line.get(), m.column.get()));
            match first_out_of_order(matches) {
                Some((i, false)) => fail(
                    "PC-5.3.search",
                    format!("data.matches.{i}"),
                    "the matches of one file are not left to right (line, then column, increasing)",
                ),
                Some((i, true)) => fail(
                    "PC-5.3.search",
                    format!("data.matches.{i}.path"),
                    "the matches of one file are not together (files are searched one after another)",
                ),
                None => None,
            }
        }
        _ => None,
    }
}

/// PC-4.5 for a result the daemon's judge refused on `operation` (`refusal`): only
/// `ok:false operation_not_granted` is the answer; any other result keeps the refusal.
fn ungranted(
    (j, f): (JudgedFrame, AdapterFrame),
    refusal: FrameError,
) -> Result<(JudgedFrame, AdapterFrame), OutputError> {
    if f.ok() == Some(false) && f.error_code() == Some(AdapterCode::OperationNotGranted.as_str()) {
        return error_code(j, f);
    }
    let value = Some(j.value.clone());
    Err(OutputError { error: refusal, rule: Rule::Obligation("PC-4.5"), frame: Some(Box::new((j, f))), value })
}

/// A `result` for an operation of the six that `binding` did not grant, judged with that
/// operation granted (every other rule applies); `None` for any other frame.
fn ungranted_result(line: &[u8], binding: &Binding) -> Option<(JudgedFrame, AdapterFrame)> {
    let v = crate::wire::decode_strict(line).ok()?;
    if v.get("kind")? != "result" {
        return None;
    }
    let op: ToolOperation = v.get("operation")?.as_str()?.parse().ok()?;
    if binding.operations().contains(&op) {
        return None;
    }
    let mut b = binding.clone();
    b.operations_mut().push(op);
    let j = judge_adapter_frame(line, &b, Direction::ToDaemon).ok()?;
    let f = j.typed().ok()?;
    Some((j, f))
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;
    use crate::contract::frame::tests::{base, binding};

    /// The worked example's result, for `op` with `data`, judged as an adapter's output.
    fn judged(op: &str, data: Value) -> Result<(JudgedFrame, AdapterFrame), OutputError> {
        let mut r = base("result");
        r["operation"] = json!(op);
        r["data"] = data;
        let line = serde_json::to_vec(&r).unwrap();
        let fast = adapter_output_passes(&line, &binding()).map_err(|e| e.error.error.field().to_string());
        let full = judge_adapter_output(&line, &binding());
        assert_eq!(
            fast,
            full.as_ref().map(|_| ()).map_err(|e| e.error.error.field().to_string()),
            "fast and full paths"
        );
        full
    }

    /// The clause and field a frame is refused on: an obligation, never a daemon's rule.
    fn refused(op: &str, data: Value) -> (&'static str, String) {
        let e = judged(op, data).expect_err("refused");
        let Rule::Obligation(clause) = e.rule else { panic!("not an obligation: {:?}", e.rule) };
        assert!(e.frame.is_some(), "the typed frame stays in the exchange");
        (clause, e.error.error.field().to_string())
    }

    #[test]
    fn read_bytes_read_is_the_utf8_length_of_content() {
        judged("fs.read", json!({"content": "a\u{e9}\u{1F600}", "bytesRead": 7, "eof": false})).unwrap();
        judged("fs.read", json!({"content": "", "bytesRead": 0, "eof": false})).unwrap();
        for n in [6, 8, 4] {
            // One short, one past, and the UTF-16 count (a, é, and a surrogate pair).
            let data = json!({"content": "a\u{e9}\u{1F600}", "bytesRead": n, "eof": false});
            assert_eq!(refused("fs.read", data), ("PC-5.3.read", "data.bytesRead".into()), "bytesRead {n}");
        }
    }

    #[test]
    fn a_directory_stats_with_size_zero_and_times_are_real() {
        judged("fs.stat", json!({"type": "directory", "size": 0, "modifiedAt": "2024-02-29T23:59:60.5Z"})).unwrap();
        judged("fs.stat", json!({"type": "file", "size": 5})).unwrap();
        assert_eq!(refused("fs.stat", json!({"type": "directory", "size": 1})), ("PC-5.3.stat", "data.size".into()));
        for t in [
            "2026-13-01T00:00:00Z",
            "2026-00-01T00:00:00Z",
            "2025-02-29T00:00:00Z",
            "2100-02-29T00:00:00Z",
            "2026-04-31T00:00:00Z",
            "2026-01-00T00:00:00Z",
            "2026-01-01T24:00:00Z",
            "2026-01-01T00:60:00Z",
            "2026-01-01T00:00:61Z",
        ] {
            let data = json!({"type": "file", "size": 1, "modifiedAt": t});
            assert_eq!(refused("fs.stat", data), ("PC-5.3.stat", "data.modifiedAt".into()), "{t}");
        }
        for t in ["2000-02-29T00:00:00Z", "2026-12-31T23:59:59.999999999Z", "0000-01-01T00:00:00Z"] {
            judged("fs.stat", json!({"type": "file", "size": 1, "modifiedAt": t})).unwrap();
        }
    }

    #[test]
    fn list_entries_are_sorted_bytewise_each_name_once() {
        let e = |n: &str| json!({"name": n, "type": "file", "size": 1});
        // Bytewise, not UTF-16 order: U+FF61 sorts before U+1F600 in UTF-8 and after it in UTF-16.
        judged("fs.list", json!({"entries": [e("B"), e("a"), e("\u{ff61}"), e("\u{1F600}")], "truncated": false}))
            .unwrap();
        judged("fs.list", json!({"entries": [], "truncated": false})).unwrap();
        for (entries, at) in
            [(vec![e("b"), e("a")], 1), (vec![e("a"), e("a")], 1), (vec![e("a"), e("\u{1F600}"), e("\u{ff61}")], 2)]
        {
            let data = json!({"entries": entries, "truncated": false});
            assert_eq!(refused("fs.list", data), ("PC-5.3.list", format!("data.entries.{at}.name")));
        }
        let data = json!({"entries": [e("a"), {"name": "b", "type": "file", "modifiedAt": "2026-02-30T00:00:00Z"}],
            "truncated": false});
        assert_eq!(refused("fs.list", data), ("PC-5.3.list", "data.entries.1.modifiedAt".into()));
    }

    #[test]
    fn search_matches_of_one_file_come_together_left_to_right() {
        let m = |p: &str, line: u64, column: u64| json!({"path": p, "line": line, "column": column, "text": "x"});
        // Either order of files is the walk's business; within a file, left to right.
        for matches in [
            vec![m("b", 1, 1), m("b", 1, 3), m("b", 2, 1), m("a/c", 1, 1), m("a-c", 9, 9)],
            vec![m("a-c", 1, 1), m("a/c", 1, 1), m("a/c", 1, 2)],
        ] {
            judged("fs.search", json!({"matches": matches, "truncated": false})).unwrap();
        }
        for (matches, field) in [
            (vec![m("a", 1, 3), m("a", 1, 1)], "data.matches.1"),
            (vec![m("a", 2, 1), m("a", 1, 5)], "data.matches.1"),
            (vec![m("a", 1, 1), m("a", 1, 1)], "data.matches.1"),
            (vec![m("a", 1, 1), m("b", 1, 1), m("a", 2, 1)], "data.matches.2.path"),
            (vec![m("a", 1, 1), m("b", 1, 1), m("c", 1, 1), m("b", 2, 1)], "data.matches.3.path"),
        ] {
            let data = json!({"matches": matches, "truncated": false});
            assert_eq!(refused("fs.search", data), ("PC-5.3.search", field.into()));
        }
    }

    #[test]
    fn a_write_or_an_edit_says_nothing_about_itself() {
        let d = "0".repeat(64);
        judged("fs.write", json!({"created": true, "bytesWritten": 3, "digest": d})).unwrap();
        judged("fs.edit", json!({"replacements": 0, "digest": d})).unwrap();
    }
}
