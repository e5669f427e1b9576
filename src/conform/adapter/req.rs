//! The tool payloads the adapter cases send, built from the generated `Fs*Request` types
//! ([`compose::Request`]).
//!
//! A builder ([`stat`], [`read`], …, then the optional members in the order the case names
//! them) makes the generated request while every value fits its type. A value the type refuses
//! (a path or a query a case breaks on purpose, a zero where at least 1 is required) turns the
//! call raw: the payload then goes as the members the case named, in that order, exactly as a
//! hand-written `json!` would (and a payload no builder can express is written with [`raw`]).
//! The raw members are kept beside the typed request for that fallback only.

use serde_json::{Map, Value};

use crate::contract::compose::{self, Request};
use crate::contract::descriptor::Identity;
use crate::contract::types::tool_adapter as ta;
use crate::contract::types::tool_adapter::ToolOperation;

/// One tool call: the operation and its payload, typed while it fits the generated request.
#[derive(Clone, Debug)]
pub struct Call {
    op: String,
    typed: Option<Request>,
    raw: Value,
}

impl Call {
    /// A call whose payload a case broke on purpose, sent as written (an unknown member, a
    /// wrong type, an operation name outside the six).
    pub fn raw(op: &str, payload: Value) -> Call {
        let op_typed = op.parse::<ToolOperation>().ok();
        let typed = op_typed.and_then(|o| Request::from_payload(o, &payload));
        Call { op: op.to_string(), typed, raw: payload }
    }

    fn start(op: ToolOperation, path: &str, typed: impl FnOnce(ta::RelativePath) -> Request) -> Call {
        let mut raw = Map::new();
        raw.insert("path".into(), Value::from(path));
        Call { op: op.to_string(), typed: ta::RelativePath::try_from(path).ok().map(typed), raw: Value::Object(raw) }
    }

    /// Add the member `key`; `set` puts it into the typed request, `None` when the generated
    /// type refuses the value (`false`: the call goes raw from then on).
    fn with(mut self, key: &str, value: Value, set: impl FnOnce(&mut Request) -> bool) -> Call {
        if let Some(r) = &mut self.typed {
            if !set(r) {
                self.typed = None;
            }
        }
        if let Value::Object(m) = &mut self.raw {
            m.insert(key.into(), value);
        }
        self
    }

    /// The operation's wire name.
    pub fn op(&self) -> &str {
        &self.op
    }

    /// The typed request, when every member fit the generated type.
    pub fn request(&self) -> Option<&Request> {
        self.typed.as_ref()
    }

    /// The payload's wire value.
    pub fn payload(&self) -> Value {
        match &self.typed {
            Some(r) => r.payload(),
            None => self.raw.clone(),
        }
    }

    /// `maxEntries` of an `fs.list`.
    pub fn max_entries(self, n: u64) -> Call {
        self.with("maxEntries", n.into(), |r| match r {
            Request::List(l) => {
                l.max_entries = std::num::NonZeroU64::new(n);
                l.max_entries.is_some()
            }
            _ => false,
        })
    }

    /// `offset` of an `fs.read`.
    pub fn offset(self, n: u64) -> Call {
        self.with("offset", n.into(), |r| match r {
            Request::Read(q) => {
                q.offset = i64::try_from(n).ok().map(ta::ByteCount);
                q.offset.is_some()
            }
            _ => false,
        })
    }

    /// `maxBytes` of an `fs.read`.
    pub fn max_bytes(self, n: u64) -> Call {
        self.with("maxBytes", n.into(), |r| match r {
            Request::Read(q) => {
                q.max_bytes = std::num::NonZeroU64::new(n);
                q.max_bytes.is_some()
            }
            _ => false,
        })
    }

    /// `maxResults` of an `fs.search`.
    pub fn max_results(self, n: u64) -> Call {
        self.with("maxResults", n.into(), |r| match r {
            Request::Search(q) => {
                q.max_results = std::num::NonZeroU64::new(n);
                q.max_results.is_some()
            }
            _ => false,
        })
    }

    /// `create` of an `fs.write`.
    pub fn create(self, b: bool) -> Call {
        self.with("create", b.into(), |r| match r {
            Request::Write(w) => {
                w.create = Some(b);
                true
            }
            _ => false,
        })
    }

    /// `overwrite` of an `fs.write`.
    pub fn overwrite(self, b: bool) -> Call {
        self.with("overwrite", b.into(), |r| match r {
            Request::Write(w) => {
                w.overwrite = Some(b);
                true
            }
            _ => false,
        })
    }

    /// `expectedDigest` of an `fs.write` or an `fs.edit`.
    pub fn expected_digest(self, d: &str) -> Call {
        self.with("expectedDigest", d.into(), |r| {
            let digest = ta::Digest::try_from(d).ok();
            let ok = digest.is_some();
            match r {
                Request::Write(w) => w.expected_digest = digest,
                Request::Edit(e) => e.expected_digest = digest,
                _ => return false,
            }
            ok
        })
    }
}

/// `fs.stat` of `path`.
pub fn stat(path: &str) -> Call {
    Call::start(ToolOperation::FsStat, path, |path| Request::Stat(ta::FsStatRequest { path }))
}

/// `fs.list` of `path`.
pub fn list(path: &str) -> Call {
    Call::start(ToolOperation::FsList, path, |path| Request::List(ta::FsListRequest { path, max_entries: None }))
}

/// `fs.read` of `path`.
pub fn read(path: &str) -> Call {
    Call::start(ToolOperation::FsRead, path, |path| {
        Request::Read(ta::FsReadRequest { path, offset: None, max_bytes: None })
    })
}

/// `fs.search` for `query` under `path`.
pub fn search(path: &str, query: &str) -> Call {
    let q = ta::FsSearchRequestQuery::try_from(query).ok();
    let mut c = Call::start(ToolOperation::FsSearch, path, |path| Request::Stat(ta::FsStatRequest { path }));
    // The path was typed as a stat's: it becomes the search's with the query, or the call raw.
    c.typed = match (c.typed.take(), q) {
        (Some(Request::Stat(s)), Some(query)) => {
            Some(Request::Search(ta::FsSearchRequest { path: s.path, query, max_results: None }))
        }
        _ => None,
    };
    c.with("query", query.into(), |_| true)
}

/// `fs.write` of `content` to `path`.
pub fn write(path: &str, content: &str) -> Call {
    Call::start(ToolOperation::FsWrite, path, |path| {
        Request::Write(ta::FsWriteRequest {
            path,
            content: String::new(),
            create: None,
            overwrite: None,
            expected_digest: None,
        })
    })
    .with("content", content.into(), |r| match r {
        Request::Write(w) => {
            w.content = content.to_string();
            true
        }
        _ => false,
    })
}

/// `fs.edit` of `path` with `edits` (`(oldText, newText)` in order).
pub fn edit(path: &str, edits: &[(&str, &str)]) -> Call {
    let typed: Option<Vec<ta::FsEdit>> = edits
        .iter()
        .map(|(o, n)| Some(ta::FsEdit { old_text: ta::FsEditOldText::try_from(*o).ok()?, new_text: n.to_string() }))
        .collect();
    let raw: Vec<Value> = edits
        .iter()
        .map(|(o, n)| {
            let mut m = Map::new();
            m.insert("oldText".into(), Value::from(*o));
            m.insert("newText".into(), Value::from(*n));
            Value::Object(m)
        })
        .collect();
    Call::start(ToolOperation::FsEdit, path, |path| {
        Request::Edit(ta::FsEditRequest { path, edits: Vec::new(), expected_digest: None })
    })
    .with("edits", Value::Array(raw), |r| match (r, typed) {
        (Request::Edit(e), Some(t)) => {
            e.edits = t;
            true
        }
        _ => false,
    })
}

/// A call whose payload a case broke on purpose (see [`Call::raw`]).
pub fn raw(op: &str, payload: Value) -> Call {
    Call::raw(op, payload)
}

/// The `invoke` frame of `call` on the binding of `identity`: built from the generated types
/// when the call is typed and the ids fit them, raw otherwise.
pub fn invoke_frame(identity: &Identity, id: &str, key: &str, call: &Call) -> Value {
    if let Some(r) = &call.typed {
        if let Ok(f) = compose::invoke_request(identity, id, key, r.clone()) {
            return compose::to_wire(&f);
        }
    }
    let mut extra = Map::new();
    extra.insert("requestId".into(), id.into());
    extra.insert("idempotencyKey".into(), key.into());
    extra.insert("operation".into(), call.op.clone().into());
    extra.insert("payload".into(), call.raw.clone());
    let mut f = identity.frame("invoke", []);
    if let Value::Object(m) = &mut f {
        m.extend(extra);
    }
    f
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    use crate::contract::compose::test_identity as identity;

    /// The invoke the adapter cases built before this module: `payload` written with `json!`,
    /// typed when the operation's request type accepts it, raw otherwise.
    fn legacy(op: &str, payload: Value) -> Vec<u8> {
        let id = identity();
        let typed = op
            .parse::<ToolOperation>()
            .ok()
            .and_then(|op| compose::invoke(&id, "r-1", "k-1", op, &payload).ok().flatten());
        let f = match typed {
            Some(f) => compose::to_wire(&f),
            None => {
                let mut f = id.frame("invoke", []);
                let extra = json!({"requestId": "r-1", "idempotencyKey": "k-1", "operation": op, "payload": payload});
                if let (Value::Object(m), Value::Object(e)) = (&mut f, extra) {
                    m.extend(e);
                }
                f
            }
        };
        serde_json::to_vec(&f).unwrap()
    }

    fn sha(b: &[u8]) -> String {
        crate::contract::answer::content_digest(b)
    }

    /// Every payload shape the adapter cases send (their literal values; the variables given
    /// values of the kinds the cases use, good and broken): the builder's invoke has the bytes
    /// of the old `json!` invoke.
    #[test]
    fn every_case_payload_has_the_bytes_of_its_old_json() {
        const MAX_CONTENT: usize = crate::contract::frame::MAX_CONTENT_BYTES;
        let h = "A".repeat(43);
        let max = 64usize;
        let d = sha(b"hello world\n");
        let (new, content) = ("NEW LINE 00000001; ".to_string(), "z".repeat(2000));
        let offset = 3u64;
        let edits = [("unique line", "foo once"), ("foo once", "done")];
        let edits_json =
            json!([{"oldText": "unique line", "newText": "foo once"}, {"oldText": "foo once", "newText": "done"}]);
        let (mut n_typed, mut n_raw) = (0, 0);
        for (path, q) in [("ok/x.txt", "needle"), ("../escape.txt", "a\nb"), ("/abs", ""), ("a\\b", "x")] {
            let cases: Vec<(&str, Value, Call)> = vec![
                ("fs.write", json!({"path": "x.txt", "content": "x"}), write("x.txt", "x")),
                ("fs.search", json!({"path": ".", "query": h}), search(".", &h)),
                ("fs.write", json!({"path": "x.txt", "content": "y".repeat(max)}), write("x.txt", &"y".repeat(max))),
                ("fs.write", json!({"path": path, "content": "escape"}), write(path, "escape")),
                ("fs.list", json!({"path": "dir/."}), list("dir/.")),
                ("fs.list", json!({"path": "./"}), list("./")),
                ("fs.list", json!({"path": "dir/"}), list("dir/")),
                ("fs.stat", json!({"path": "hello.txt/"}), stat("hello.txt/")),
                ("fs.list", json!({"path": "sorted"}), list("sorted")),
                ("fs.list", json!({"path": "dir"}), list("dir")),
                ("fs.list", json!({"path": "links"}), list("links")),
                ("fs.list", json!({"path": "special"}), list("special")),
                ("fs.list", json!({"path": "sorted", "maxEntries": 2}), list("sorted").max_entries(2)),
                ("fs.list", json!({"path": "hello.txt"}), list("hello.txt")),
                ("fs.list", json!({"path": "missing"}), list("missing")),
                ("fs.stat", json!({"path": "hello.txt"}), stat("hello.txt")),
                ("fs.stat", json!({"path": "dir"}), stat("dir")),
                ("fs.stat", json!({"path": "."}), stat(".")),
                ("fs.stat", json!({"path": "links/in.txt"}), stat("links/in.txt")),
                ("fs.stat", json!({"path": "special/fifo"}), stat("special/fifo")),
                ("fs.stat", json!({"path": "special/null"}), stat("special/null")),
                ("fs.stat", json!({"path": "dir/missing.txt"}), stat("dir/missing.txt")),
                ("fs.read", json!({"path": "hello.txt"}), read("hello.txt")),
                (
                    "fs.read",
                    json!({"path": "hello.txt", "offset": 6, "maxBytes": 5}),
                    read("hello.txt").offset(6).max_bytes(5),
                ),
                ("fs.read", json!({"path": "hello.txt", "offset": 100}), read("hello.txt").offset(100)),
                ("fs.read", json!({"path": "utf8.txt", "offset": 2}), read("utf8.txt").offset(2)),
                (
                    "fs.read",
                    json!({"path": "utf8.txt", "offset": 0, "maxBytes": 5}),
                    read("utf8.txt").offset(0).max_bytes(5),
                ),
                (
                    "fs.read",
                    json!({"path": "utf8.txt", "offset": 6, "maxBytes": 3}),
                    read("utf8.txt").offset(6).max_bytes(3),
                ),
                ("fs.read", json!({"path": "latin1.txt"}), read("latin1.txt")),
                ("fs.read", json!({"path": "big.txt"}), read("big.txt")),
                (
                    "fs.read",
                    json!({"path": "utf8.txt", "offset": offset, "maxBytes": 4}),
                    read("utf8.txt").offset(offset).max_bytes(4),
                ),
                ("fs.read", json!({"path": "dir"}), read("dir")),
                ("fs.read", json!({"path": "special/fifo"}), read("special/fifo")),
                ("fs.read", json!({"path": "links/out.txt"}), read("links/out.txt")),
                ("fs.search", json!({"path": "dir", "query": "needle"}), search("dir", "needle")),
                ("fs.search", json!({"path": "uni.txt", "query": "needle"}), search("uni.txt", "needle")),
                ("fs.search", json!({"path": "overlap.txt", "query": "aa"}), search("overlap.txt", "aa")),
                ("fs.search", json!({"path": "crlf.txt", "query": "needle"}), search("crlf.txt", "needle")),
                ("fs.search", json!({"path": "long.txt", "query": "needle"}), search("long.txt", "needle")),
                (
                    "fs.search",
                    json!({"path": ".", "query": "needle", "maxResults": 1000}),
                    search(".", "needle").max_results(1000),
                ),
                ("fs.search", json!({"path": "latin1.txt", "query": "needle"}), search("latin1.txt", "needle")),
                ("fs.search", json!({"path": ".", "query": "needle\nx"}), search(".", "needle\nx")),
                (
                    "fs.search",
                    json!({"path": "notes.md", "query": "needle", "maxResults": 2}),
                    search("notes.md", "needle").max_results(2),
                ),
                ("fs.search", json!({"path": "notes.md", "query": "NEEDLE"}), search("notes.md", "NEEDLE")),
                ("fs.search", json!({"path": ".", "query": "SENTINEL"}), search(".", "SENTINEL")),
                ("fs.search", json!({"path": path, "query": q, "maxResults": 1000}), search(path, q).max_results(1000)),
                ("fs.write", json!({"path": "new.txt", "content": "fresh €\n"}), write("new.txt", "fresh €\n")),
                ("fs.write", json!({"path": "hello.txt", "content": "replaced"}), write("hello.txt", "replaced")),
                ("fs.write", json!({"path": "hello.txt", "content": ""}), write("hello.txt", "")),
                (
                    "fs.write",
                    json!({"path": "absent.txt", "content": "x", "create": false}),
                    write("absent.txt", "x").create(false),
                ),
                (
                    "fs.write",
                    json!({"path": "hello.txt", "content": "x", "overwrite": false}),
                    write("hello.txt", "x").overwrite(false),
                ),
                ("fs.write", json!({"path": "nodir/x.txt", "content": "x"}), write("nodir/x.txt", "x")),
                ("fs.write", json!({"path": "dir", "content": "x"}), write("dir", "x")),
                (
                    "fs.write",
                    json!({"path": "hello.txt", "content": "v2", "expectedDigest": d}),
                    write("hello.txt", "v2").expected_digest(&d),
                ),
                (
                    "fs.write",
                    json!({"path": "absent.txt", "content": "v2", "expectedDigest": d}),
                    write("absent.txt", "v2").expected_digest(&d),
                ),
                ("fs.write", json!({"path": "dir/b.txt", "content": "kept"}), write("dir/b.txt", "kept")),
                (
                    "fs.write",
                    json!({"path": "links/out.txt", "content": "overwritten"}),
                    write("links/out.txt", "overwritten"),
                ),
                (
                    "fs.write",
                    json!({"path": "links/outdir/planted.txt", "content": "x"}),
                    write("links/outdir/planted.txt", "x"),
                ),
                (
                    "fs.read",
                    json!({"path": "atomic.txt", "maxBytes": MAX_CONTENT}),
                    read("atomic.txt").max_bytes(MAX_CONTENT as u64),
                ),
                ("fs.write", json!({"path": "atomic.txt", "content": new}), write("atomic.txt", &new)),
                ("fs.edit", json!({"path": "edit.txt", "edits": edits_json}), edit("edit.txt", &edits)),
                (
                    "fs.edit",
                    json!({"path": "edit.txt", "edits": [{"oldText": "absent", "newText": "x"}]}),
                    edit("edit.txt", &[("absent", "x")]),
                ),
                (
                    "fs.edit",
                    json!({"path": "edit.txt", "edits": [{"oldText": "foo", "newText": "x"}]}),
                    edit("edit.txt", &[("foo", "x")]),
                ),
                (
                    "fs.edit",
                    json!({"path": "edit.txt", "edits": [{"oldText": "aa", "newText": "b"}]}),
                    edit("edit.txt", &[("aa", "b")]),
                ),
                (
                    "fs.edit",
                    json!({"path": "latin1.txt", "edits": [{"oldText": "needle", "newText": "x"}]}),
                    edit("latin1.txt", &[("needle", "x")]),
                ),
                (
                    "fs.edit",
                    json!({"path": "edit.txt", "edits": edits_json, "expectedDigest": sha(b"other")}),
                    edit("edit.txt", &edits).expected_digest(&sha(b"other")),
                ),
                ("fs.read", json!({"path": "links/outdir/secret.txt"}), read("links/outdir/secret.txt")),
                ("fs.read", json!({"path": "links/indir/a.txt"}), read("links/indir/a.txt")),
                ("fs.list", json!({"path": "links/outdir"}), list("links/outdir")),
                ("fs.search", json!({"path": "swap", "query": "SENTINEL"}), search("swap", "SENTINEL")),
                ("fs.read", json!({"path": "swap/d/secret.txt"}), read("swap/d/secret.txt")),
                ("fs.list", json!({"path": "."}), list(".")),
                ("fs.search", json!({"path": ".", "query": "line"}), search(".", "line")),
                (
                    "fs.search",
                    json!({"path": "big.txt", "query": "zzzz-not-there"}),
                    search("big.txt", "zzzz-not-there"),
                ),
                ("fs.write", json!({"path": "aborted.txt", "content": content}), write("aborted.txt", &content)),
                ("fs.write", json!({"path": "idem.txt", "content": "one"}), write("idem.txt", "one")),
                ("fs.write", json!({"path": "idem.txt", "content": "two"}), write("idem.txt", "two")),
                ("fs.stat", json!({"path": "notes.md"}), stat("notes.md")),
                ("fs.write", json!({"path": "after.txt", "content": "x"}), write("after.txt", "x")),
                ("fs.read", json!({"path": "secret/grant.json"}), read("secret/grant.json")),
                (
                    "fs.search",
                    json!({"path": "secret", "query": "capabilityHandle"}),
                    search("secret", "capabilityHandle"),
                ),
                ("fs.list", json!({"path": "secret"}), list("secret")),
            ];
            for (op, old, call) in cases {
                let shown = old.to_string();
                if call.request().is_some() {
                    n_typed += 1
                } else {
                    n_raw += 1
                }
                assert_eq!(
                    String::from_utf8(legacy(op, old)).unwrap(),
                    String::from_utf8(serde_json::to_vec(&invoke_frame(&identity(), "r-1", "k-1", &call)).unwrap())
                        .unwrap(),
                    "{op} {shown}"
                );
            }
        }
        assert!(n_typed > 250 && n_raw > 10, "typed {n_typed} raw {n_raw}");
        let empty_edit = edit("e.txt", &[("", "x")]);
        assert!(empty_edit.request().is_none());
        assert_eq!(
            legacy("fs.edit", json!({"path": "e.txt", "edits": [{"oldText": "", "newText": "x"}]})),
            serde_json::to_vec(&invoke_frame(&identity(), "r-1", "k-1", &empty_edit)).unwrap()
        );
        let zero = read("a.txt").offset(1).max_bytes(0);
        assert!(zero.request().is_none());
        assert_eq!(
            legacy("fs.read", json!({"path": "a.txt", "offset": 1, "maxBytes": 0})),
            serde_json::to_vec(&invoke_frame(&identity(), "r-1", "k-1", &zero)).unwrap()
        );
        let broken = raw("fs.write", json!({"path": "x.txt", "content": "x", "mode": 511}));
        assert!(broken.request().is_none());
        assert_eq!(
            legacy("fs.write", json!({"path": "x.txt", "content": "x", "mode": 511})),
            serde_json::to_vec(&invoke_frame(&identity(), "r-1", "k-1", &broken)).unwrap()
        );
    }
}
