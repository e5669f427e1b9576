//! The adapter cases. Each returns the observed outcome token (compared with the catalogue's
//! accepted outcomes) and any further problems it found; the engine adds the side-effect
//! oracle and the secret scan to every case.

use std::time::Duration;

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::conn::{Peer, Recv};
use super::fixture::BIG_SIZE;
use super::{data, req, token, Ctx};
use crate::conform::case::Outcome;
use crate::contract::adapter_error::AdapterCode;
use crate::contract::frame::MAX_CONTENT_BYTES as MAX_CONTENT;
use crate::contract::types::tool_adapter::AdapterFrame;

/// A case implementation.
pub type CaseFn = fn(&mut Ctx<'_>) -> Outcome;

macro_rules! tryo {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(o) => return o,
        }
    };
}

fn tok(r: Result<Recv, Outcome>) -> Outcome {
    match r {
        Ok(r) => Outcome::token(token(&r)),
        Err(o) => o,
    }
}

fn sha(b: &[u8]) -> String {
    hex::encode(Sha256::digest(b))
}

fn read_root(c: &Ctx<'_>, p: &str) -> Vec<u8> {
    std::fs::read(c.target.root.join(p)).unwrap_or_default()
}

/// Check one successful result's data against expected fields; returns the outcome.
fn ok_with(r: &Recv, checks: &[(&str, Value)]) -> Outcome {
    let Some(d) = data(r) else { return Outcome::token(token(r)) };
    let problems = checks
        .iter()
        .filter(|(k, v)| d.pointer(k) != Some(v))
        .map(|(k, v)| {
            format!("data{k} should be {v}, got {}", d.pointer(k).map(|x| x.to_string()).unwrap_or("nothing".into()))
        })
        .collect();
    Outcome::with("result:ok", problems)
}

// ---------------------------------------------------------------- bind

/// The echo itself (identity, operation order, every limit, no handle, no extra key) is
/// judged by the connection's contract judge against the bind sent.
fn bind_echo_exact(c: &mut Ctx<'_>) -> Outcome {
    let mut conn = tryo!(c.connect());
    conn.send(&c.bind_frame());
    let r = conn.recv();
    Outcome::token(if r.frame().is_some_and(|v| v.kind() == Some("bound")) { "bound".into() } else { token(&r) })
}

fn bind_bound_without_handle(c: &mut Ctx<'_>) -> Outcome {
    // A handle in bound is refused by the judge (closed keys, then the secret scan).
    bind_echo_exact(c)
}

fn bind_narrower(c: &mut Ctx<'_>) -> Outcome {
    let mut b = c.bind_frame();
    let ops: Vec<Value> = b["operations"].as_array().cloned().unwrap_or_default().into_iter().rev().collect();
    b["operations"] = Value::Array(ops);
    let l = &mut b["limits"];
    if let Some(n) = l["maxConcurrentRequests"].as_u64().filter(|n| *n > 1) {
        l["maxConcurrentRequests"] = json!(n - 1);
    }
    if let Some(n) = l["requestTimeoutMs"].as_u64().filter(|n| *n > 100) {
        l["requestTimeoutMs"] = json!(n - 1);
    }
    match c.bind_with(&b) {
        Ok(_) => Outcome::token("bound"),
        Err(o) => o,
    }
}

fn refused_bind(c: &mut Ctx<'_>, mutate: impl FnOnce(&mut Value)) -> Outcome {
    let mut b = c.bind_frame();
    mutate(&mut b);
    let mut conn = tryo!(c.connect());
    conn.send(&b);
    let r = conn.expect_close(c.step());
    Outcome::token(token(&r))
}

fn bind_limit_above_grant(c: &mut Ctx<'_>) -> Outcome {
    let cur = c.target.admitted.limits().max_concurrent_requests.get();
    if cur >= 64 {
        return Outcome::Skip("maxConcurrentRequests is already at its maximum".into());
    }
    refused_bind(c, |b| b["limits"]["maxConcurrentRequests"] = json!(cur + 1))
}
fn bind_operation_outside_grant(c: &mut Ctx<'_>) -> Outcome {
    let granted = c.target.admitted.operations().len();
    if granted == 6 {
        return Outcome::Skip("the descriptor grants all six operations".into());
    }
    let all = crate::contract::descriptor::OPERATIONS;
    let missing = all
        .iter()
        .find(|o| !c.target.admitted.operations().iter().any(|g| g.to_string() == **o))
        .copied()
        .unwrap_or("fs.write");
    refused_bind(c, |b| {
        if let Some(a) = b["operations"].as_array_mut() {
            a.push(json!(missing))
        }
    })
}
fn bind_duplicate_key(c: &mut Ctx<'_>) -> Outcome {
    // The bind with its sessionId repeated, with the same valid value: a decoder that takes
    // either copy sees a correct bind, so only one that refuses duplicates closes.
    let b = c.bind_frame();
    let text = serde_json::to_string(&b).unwrap_or_default();
    let Some(body) = text.strip_suffix('}') else { return Outcome::Error("bind is not an object".into()) };
    let dup = format!("{body},\"sessionId\":{}}}\n", b["sessionId"]);
    let mut conn = tryo!(c.connect());
    conn.send_raw(dup.as_bytes());
    Outcome::token(token(&conn.expect_close(c.step())))
}

// ---------------------------------------------------------------- invoke hygiene

fn closes_after(c: &mut Ctx<'_>, f: Value) -> Outcome {
    let mut conn = tryo!(c.bound());
    conn.send(&f);
    Outcome::token(token(&conn.expect_close(c.step())))
}

/// SPEC 4.5: an attributable invoke with an extra frame key may be closed **or** answered
/// `invalid_request`; both conform. Either way nothing is written (the oracle).
fn invoke_unknown_frame_key(c: &mut Ctx<'_>) -> Outcome {
    let mut f = c.invoke("r-1", "k-1", req::write("x.txt", "x"));
    f["token"] = json!("smuggled");
    let mut conn = tryo!(c.bound());
    conn.send(&f);
    Outcome::token(token(&conn.recv_within(c.step())))
}
fn invoke_handle_in_payload(c: &mut Ctx<'_>) -> Outcome {
    let h = c.target.handle().to_string();
    let f = c.invoke("r-1", "k-1", req::search(".", &h));
    closes_after(c, f)
}
fn invoke_unknown_payload_key(c: &mut Ctx<'_>) -> Outcome {
    tok(c.one(req::raw("fs.write", json!({"path": "x.txt", "content": "x", "mode": 511}))))
}
fn invoke_payload_wrong_type(c: &mut Ctx<'_>) -> Outcome {
    tok(c.one(req::raw("fs.read", json!({"path": "hello.txt", "maxBytes": "10"}))))
}
fn invoke_ungranted_operation(c: &mut Ctx<'_>) -> Outcome {
    let mut b = c.bind_frame();
    let ops: Vec<Value> =
        c.target.admitted.operations().iter().map(|o| json!(o.to_string())).filter(|o| o != "fs.write").collect();
    if ops.is_empty() {
        return Outcome::Skip("the descriptor grants only fs.write".into());
    }
    b["operations"] = Value::Array(ops);
    let mut conn = tryo!(c.bind_with(&b));
    let r = c.call(&mut conn, req::write("x.txt", "x"));
    Outcome::token(token(&r))
}
fn invoke_oversize_line(c: &mut Ctx<'_>) -> Outcome {
    let max = c.target.admitted.limits().max_request_bytes as usize;
    let f = c.invoke("r-1", "k-1", req::write("x.txt", &"y".repeat(max)));
    closes_after(c, f)
}

// ---------------------------------------------------------------- paths

fn bad_path(c: &mut Ctx<'_>, path: &str) -> Outcome {
    c.allow(&[]);
    tok(c.one(req::write(path, "escape")))
}
fn path_empty(c: &mut Ctx<'_>) -> Outcome {
    bad_path(c, "")
}
fn path_absolute(c: &mut Ctx<'_>) -> Outcome {
    let p = c.fixture.sentinel.join("written.txt").to_string_lossy().into_owned();
    bad_path(c, &p)
}
fn path_backslash(c: &mut Ctx<'_>) -> Outcome {
    bad_path(c, "dir\\x.txt")
}
fn path_control(c: &mut Ctx<'_>) -> Outcome {
    bad_path(c, "dir/x\u{1}.txt")
}
fn path_dotdot(c: &mut Ctx<'_>) -> Outcome {
    let name = c.fixture.sentinel.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    bad_path(c, &format!("../{name}/written.txt"))
}
fn path_dotdot_inner(c: &mut Ctx<'_>) -> Outcome {
    bad_path(c, "dir/../x.txt")
}
fn path_double_slash(c: &mut Ctx<'_>) -> Outcome {
    bad_path(c, "dir//x.txt")
}
fn path_dot_prefix(c: &mut Ctx<'_>) -> Outcome {
    bad_path(c, "./x.txt")
}
fn path_dot_segment(c: &mut Ctx<'_>) -> Outcome {
    bad_path(c, "dir/./x.txt")
}
fn path_dot_suffix(c: &mut Ctx<'_>) -> Outcome {
    tok(c.one(req::list("dir/.")))
}
fn path_long_component(c: &mut Ctx<'_>) -> Outcome {
    bad_path(c, &"n".repeat(256))
}
fn path_dot_slash_root(c: &mut Ctx<'_>) -> Outcome {
    tok(c.one(req::list("./")))
}
fn path_trailing_slash_dir(c: &mut Ctx<'_>) -> Outcome {
    let r = tryo!(c.one(req::list("dir/")));
    let names: Vec<&str> = data(&r)
        .and_then(|d| d["entries"].as_array())
        .map(|a| a.iter().filter_map(|e| e["name"].as_str()).collect())
        .unwrap_or_default();
    let problems = if data(&r).is_some() && names != ["a.txt", "b.txt", "sub"] {
        vec![format!("dir/ lists {names:?}")]
    } else {
        vec![]
    };
    Outcome::with(token(&r), problems)
}
fn path_trailing_slash_file(c: &mut Ctx<'_>) -> Outcome {
    tok(c.one(req::stat("hello.txt/")))
}

// ---------------------------------------------------------------- fs.list

fn list_entries(r: &Recv) -> Vec<Value> {
    data(r).and_then(|d| d["entries"].as_array().cloned()).unwrap_or_default()
}
fn list_sorted_bytewise(c: &mut Ctx<'_>) -> Outcome {
    let r = tryo!(c.one(req::list("sorted")));
    let names: Vec<String> = list_entries(&r).iter().filter_map(|e| e["name"].as_str().map(String::from)).collect();
    let want = ["B", "Z", "_", "a", "m", "\u{e9}"];
    let problems =
        if data(&r).is_some() && names != want { vec![format!("order {names:?}, want {want:?}")] } else { vec![] };
    Outcome::with(token(&r), problems)
}
fn list_types_and_sizes(c: &mut Ctx<'_>) -> Outcome {
    let r = tryo!(c.one(req::list("dir")));
    let e = list_entries(&r);
    let mut problems = Vec::new();
    if data(&r).is_some() {
        let get = |n: &str| e.iter().find(|x| x["name"] == n).cloned().unwrap_or(Value::Null);
        if get("a.txt")["type"] != "file" || get("a.txt")["size"] != 9 {
            problems.push("a.txt should be a file of size 9".into());
        }
        if get("sub")["type"] != "directory" {
            problems.push("sub should be a directory".into());
        }
        if data(&r).is_some_and(|d| d["truncated"] != false) {
            problems.push("truncated should be false".into());
        }
    }
    Outcome::with(token(&r), problems)
}
fn list_omits_symlinks(c: &mut Ctx<'_>) -> Outcome {
    let r = tryo!(c.one(req::list("links")));
    let n = list_entries(&r).len();
    Outcome::with(
        token(&r),
        if data(&r).is_some() && n != 0 { vec![format!("{n} symlink entries listed")] } else { vec![] },
    )
}
fn list_omits_special(c: &mut Ctx<'_>) -> Outcome {
    if !c.fixture.fifo {
        return Outcome::Skip("no FIFO could be made in the root".into());
    }
    let r = tryo!(c.one(req::list("special")));
    let n = list_entries(&r).len();
    Outcome::with(
        token(&r),
        if data(&r).is_some() && n != 0 { vec![format!("{n} FIFO/device entries listed")] } else { vec![] },
    )
}
fn list_max_entries(c: &mut Ctx<'_>) -> Outcome {
    let r = tryo!(c.one(req::list("sorted").max_entries(2)));
    ok_with(&r, &[("/truncated", json!(true)), ("/entries/0/name", json!("B")), ("/entries/1/name", json!("Z"))])
        .and_len(&r, "/entries", 2)
}
fn list_not_a_directory(c: &mut Ctx<'_>) -> Outcome {
    tok(c.one(req::list("hello.txt")))
}
fn list_not_found(c: &mut Ctx<'_>) -> Outcome {
    tok(c.one(req::list("missing")))
}

trait AndLen {
    fn and_len(self, r: &Recv, ptr: &str, n: usize) -> Outcome;
}
impl AndLen for Outcome {
    fn and_len(self, r: &Recv, ptr: &str, n: usize) -> Outcome {
        match self {
            Outcome::Observed { token, mut problems } => {
                if let Some(a) = data(r).and_then(|d| d.pointer(ptr)).and_then(Value::as_array) {
                    if a.len() != n {
                        problems.push(format!("data{ptr} has {} items, want {n}", a.len()));
                    }
                }
                Outcome::Observed { token, problems }
            }
            o => o,
        }
    }
}

// ---------------------------------------------------------------- fs.stat

fn stat_file(c: &mut Ctx<'_>) -> Outcome {
    let r = tryo!(c.one(req::stat("hello.txt")));
    ok_with(&r, &[("/type", json!("file")), ("/size", json!(12))])
}
fn stat_directory(c: &mut Ctx<'_>) -> Outcome {
    let r = tryo!(c.one(req::stat("dir")));
    ok_with(&r, &[("/type", json!("directory")), ("/size", json!(0))])
}
fn stat_root(c: &mut Ctx<'_>) -> Outcome {
    let r = tryo!(c.one(req::stat(".")));
    ok_with(&r, &[("/type", json!("directory"))])
}
fn stat_symlink(c: &mut Ctx<'_>) -> Outcome {
    tok(c.one(req::stat("links/in.txt")))
}
fn stat_fifo(c: &mut Ctx<'_>) -> Outcome {
    if !c.fixture.fifo {
        return Outcome::Skip("no FIFO could be made in the root".into());
    }
    tok(c.one(req::stat("special/fifo")))
}
fn stat_device(c: &mut Ctx<'_>) -> Outcome {
    if !c.fixture.device {
        return Outcome::Skip("no character device could be made (needs CAP_MKNOD)".into());
    }
    tok(c.one(req::stat("special/null")))
}
fn stat_not_found(c: &mut Ctx<'_>) -> Outcome {
    tok(c.one(req::stat("dir/missing.txt")))
}

// ---------------------------------------------------------------- fs.read

fn read_whole(c: &mut Ctx<'_>) -> Outcome {
    let r = tryo!(c.one(req::read("hello.txt")));
    ok_with(&r, &[("/content", json!("hello world\n")), ("/bytesRead", json!(12)), ("/eof", json!(true))])
}
fn read_window(c: &mut Ctx<'_>) -> Outcome {
    let r = tryo!(c.one(req::read("hello.txt").offset(6).max_bytes(5)));
    ok_with(&r, &[("/content", json!("world")), ("/bytesRead", json!(5)), ("/eof", json!(false))])
}
fn read_past_end(c: &mut Ctx<'_>) -> Outcome {
    let r = tryo!(c.one(req::read("hello.txt").offset(100)));
    ok_with(&r, &[("/content", json!("")), ("/bytesRead", json!(0)), ("/eof", json!(true))])
}
fn read_mid_char_offset(c: &mut Ctx<'_>) -> Outcome {
    tok(c.one(req::read("utf8.txt").offset(2)))
}
fn read_window_ends_mid_char(c: &mut Ctx<'_>) -> Outcome {
    let r = tryo!(c.one(req::read("utf8.txt").offset(0).max_bytes(5)));
    ok_with(&r, &[("/content", json!("a\u{e9}")), ("/bytesRead", json!(3)), ("/eof", json!(false))])
}
fn read_tiny_window(c: &mut Ctx<'_>) -> Outcome {
    let r = tryo!(c.one(req::read("utf8.txt").offset(6).max_bytes(3)));
    ok_with(&r, &[("/content", json!("")), ("/bytesRead", json!(0)), ("/eof", json!(false))])
}
fn read_not_utf8(c: &mut Ctx<'_>) -> Outcome {
    tok(c.one(req::read("latin1.txt")))
}
fn read_large_file(c: &mut Ctx<'_>) -> Outcome {
    let r = tryo!(c.one(req::read("big.txt")));
    let Some(d) = data(&r) else { return Outcome::token(token(&r)) };
    let content = d["content"].as_str().unwrap_or("");
    let n = d["bytesRead"].as_u64().unwrap_or(0) as usize;
    let big = read_root(c, "big.txt");
    let mut problems = Vec::new();
    if n == 0 || n != content.len() || big.get(..n) != Some(content.as_bytes()) {
        problems.push("content is not the file's first bytesRead bytes".into());
    }
    if (n == BIG_SIZE) != (d["eof"] == true) {
        problems.push("eof must be offset + bytesRead == size".into());
    }
    Outcome::with("result:ok", problems)
}
fn read_continues(c: &mut Ctx<'_>) -> Outcome {
    let mut conn = tryo!(c.bound());
    let mut offset = 0u64;
    let mut got = Vec::new();
    for _ in 0..64 {
        let r = c.call(&mut conn, req::read("utf8.txt").offset(offset).max_bytes(4));
        let Some(d) = data(&r) else { return Outcome::token(token(&r)) };
        got.extend_from_slice(d["content"].as_str().unwrap_or("").as_bytes());
        offset += d["bytesRead"].as_u64().unwrap_or(0);
        if d["eof"] == true {
            break;
        }
    }
    let problems = if got != read_root(c, "utf8.txt") {
        vec!["offset + bytesRead does not continue the file".into()]
    } else {
        vec![]
    };
    Outcome::with("result:ok", problems)
}
fn read_directory(c: &mut Ctx<'_>) -> Outcome {
    tok(c.one(req::read("dir")))
}
fn read_fifo(c: &mut Ctx<'_>) -> Outcome {
    if !c.fixture.fifo {
        return Outcome::Skip("no FIFO could be made in the root".into());
    }
    tok(c.one(req::read("special/fifo")))
}
fn read_symlink(c: &mut Ctx<'_>) -> Outcome {
    tok(c.one(req::read("links/out.txt")))
}

// ---------------------------------------------------------------- fs.search

fn matches(r: &Recv) -> Vec<Value> {
    data(r).and_then(|d| d["matches"].as_array().cloned()).unwrap_or_default()
}
fn search_literal_order(c: &mut Ctx<'_>) -> Outcome {
    let r = tryo!(c.one(req::search("dir", "needle")));
    let got: Vec<(String, u64, u64)> = matches(&r)
        .iter()
        .map(|m| {
            (
                m["path"].as_str().unwrap_or("").into(),
                m["line"].as_u64().unwrap_or(0),
                m["column"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    let want = vec![("dir/a.txt".to_string(), 1, 3), ("dir/sub/c.txt".to_string(), 1, 1)];
    let problems =
        if data(&r).is_some() && got != want { vec![format!("matches {got:?}, want {want:?}")] } else { vec![] };
    Outcome::with(token(&r), problems)
}
fn search_columns_unicode(c: &mut Ctx<'_>) -> Outcome {
    let r = tryo!(c.one(req::search("uni.txt", "needle")));
    ok_with(
        &r,
        &[("/matches/0/column", json!(4)), ("/matches/0/line", json!(1)), ("/matches/0/path", json!("uni.txt"))],
    )
}
fn search_non_overlapping(c: &mut Ctx<'_>) -> Outcome {
    let r = tryo!(c.one(req::search("overlap.txt", "aa")));
    ok_with(&r, &[("/matches/0/column", json!(1)), ("/matches/1/column", json!(3))]).and_len(&r, "/matches", 2)
}
fn search_crlf(c: &mut Ctx<'_>) -> Outcome {
    let r = tryo!(c.one(req::search("crlf.txt", "needle")));
    ok_with(&r, &[("/matches/0/line", json!(2)), ("/matches/0/text", json!("two needle"))])
}
fn search_long_line_window(c: &mut Ctx<'_>) -> Outcome {
    let r = tryo!(c.one(req::search("long.txt", "needle")));
    let Some(m) = matches(&r).first().cloned() else { return Outcome::with(token(&r), vec!["no match".into()]) };
    let text = m["text"].as_str().unwrap_or("");
    let mut problems = Vec::new();
    // The fixture line is ASCII: its window is 4096 units = 4096 characters.
    let units = crate::contract::text::utf16_len(text);
    if units != 4096 {
        problems.push(format!("text has {units} UTF-16 units, want the 4096-unit window"));
    }
    if text.find("needle") != Some(1024) {
        problems.push("the window must start 1024 units before the match".into());
    }
    if m["column"] != 6001 {
        problems.push(format!("column {} want 6001", m["column"]));
    }
    Outcome::with(token(&r), problems)
}
fn search_skips_binary(c: &mut Ctx<'_>) -> Outcome {
    let r = tryo!(c.one(req::search(".", "needle").max_results(1000)));
    let bad: Vec<String> = matches(&r)
        .iter()
        .filter_map(|m| m["path"].as_str())
        .filter(|p| *p == "latin1.txt" || *p == "nul.txt")
        .map(String::from)
        .collect();
    Outcome::with(
        token(&r),
        if bad.is_empty() { vec![] } else { vec![format!("matches in non-UTF-8/NUL files: {bad:?}")] },
    )
}
fn search_direct_binary(c: &mut Ctx<'_>) -> Outcome {
    let r = tryo!(c.one(req::search("latin1.txt", "needle")));
    ok_with(&r, &[("/matches", json!([]))])
}
fn search_query_newline(c: &mut Ctx<'_>) -> Outcome {
    tok(c.one(req::search(".", "needle\nx")))
}
fn search_max_results(c: &mut Ctx<'_>) -> Outcome {
    let r = tryo!(c.one(req::search("notes.md", "needle").max_results(2)));
    ok_with(&r, &[("/truncated", json!(true)), ("/matches/0/line", json!(1)), ("/matches/1/line", json!(3))])
        .and_len(&r, "/matches", 2)
}
fn search_case_sensitive(c: &mut Ctx<'_>) -> Outcome {
    let r = tryo!(c.one(req::search("notes.md", "NEEDLE")));
    ok_with(&r, &[("/matches", json!([]))])
}
fn search_no_symlink_follow(c: &mut Ctx<'_>) -> Outcome {
    let r = tryo!(c.one(req::search(".", "SENTINEL")));
    ok_with(&r, &[("/matches", json!([]))])
}

/// The matches a literal, case-sensitive, non-overlapping search of `query` must find in the
/// file `path` whose text is `text` (PC-5.3.search): the expected value, computed here.
fn literal_matches(path: &str, text: &str, query: &str) -> Vec<Value> {
    let mut out = Vec::new();
    for (i, line) in text.split('\n').enumerate() {
        let line = line.strip_suffix('\r').unwrap_or(line);
        for (at, _) in line.match_indices(query) {
            let column = line[..at].chars().count() + 1;
            out.push(json!({"path": path, "line": i + 1, "column": column, "text": line}));
        }
    }
    out
}

/// Search `path` for each query on one connection and compare every match list with the
/// literal one.
fn search_each_literally(c: &mut Ctx<'_>, path: &str, queries: &[&str]) -> Outcome {
    let text = String::from_utf8(read_root(c, path)).unwrap_or_default();
    let mut conn = tryo!(c.bound());
    let mut problems = Vec::new();
    for q in queries {
        let r = c.call(&mut conn, req::search(path, q).max_results(1000));
        let Some(d) = data(&r) else { return Outcome::with(token(&r), problems) };
        let want = literal_matches(path, &text, q);
        if d["matches"] != Value::Array(want.clone()) || d["truncated"] != false {
            let got: Vec<(u64, u64)> = matches(&r)
                .iter()
                .map(|m| (m["line"].as_u64().unwrap_or(0), m["column"].as_u64().unwrap_or(0)))
                .collect();
            let want: Vec<(u64, u64)> =
                want.iter().map(|m| (m["line"].as_u64().unwrap_or(0), m["column"].as_u64().unwrap_or(0))).collect();
            let show = |v: &[(u64, u64)]| {
                let head: Vec<String> = v.iter().take(6).map(|(l, c)| format!("{l}:{c}")).collect();
                format!("[{}{}] ({} in all)", head.join(" "), if v.len() > 6 { " …" } else { "" }, v.len())
            };
            problems.push(format!("query {q:?}: matches at line:column {}, literally {}", show(&got), show(&want)));
        }
    }
    Outcome::with("result:ok", problems)
}

/// Every regex and glob metacharacter, alone and in the patterns they usually make, is
/// matched literally (a regex or glob engine finds other lines and columns in `meta.txt`).
fn search_literal_metacharacters(c: &mut Ctx<'_>) -> Outcome {
    const QUERIES: &[&str] = &[
        ".", "*", "+", "?", "(", ")", "[", "]", "{", "}", "|", "\\", "^", "$", "a.c", "a*c", "a+c", "a?c", "(x)",
        "[ab]", "{2}", "a|b", "\\d", "^start", "end$", "x?y", ".*", "*.txt", "?.md", "[!a]", "{a,b}", "**", "f.md",
        "^", "$", "\\.",
    ];
    search_each_literally(c, "meta.txt", QUERIES)
}

/// Case-sensitive matching of multi-byte text on CRLF lines: columns in scalar values, the CR
/// never part of `text`, a query ending where the CR begins still found.
fn search_literal_text(c: &mut Ctx<'_>) -> Outcome {
    const QUERIES: &[&str] = &[
        "start",
        "Start",
        "START",
        "sTaRt",
        "\u{e9}.\u{e9}",
        "\u{1f600}.\u{1f600}",
        "\u{fc}n\u{ef}c\u{f6}d\u{e9}",
        "\u{2713}",
        "x\u{1f600}",
        "the end",
        "end",
        "$ .* ^ $",
        "d\u{e9} \u{2713}",
    ];
    search_each_literally(c, "meta.txt", QUERIES)
}

// ---------------------------------------------------------------- fs.write

fn write_create(c: &mut Ctx<'_>) -> Outcome {
    c.allow(&["new.txt"]);
    let r = tryo!(c.one(req::write("new.txt", "fresh €\n")));
    let o = ok_with(
        &r,
        &[("/created", json!(true)), ("/bytesWritten", json!(10)), ("/digest", json!(sha("fresh €\n".as_bytes())))],
    );
    on_disk(o, c, "new.txt", "fresh €\n")
}
fn on_disk(o: Outcome, c: &Ctx<'_>, p: &str, want: &str) -> Outcome {
    match o {
        Outcome::Observed { token, mut problems } if token == "result:ok" => {
            if read_root(c, p) != want.as_bytes() {
                problems.push(format!("{p} does not hold the written content"));
            }
            Outcome::Observed { token, problems }
        }
        o => o,
    }
}
fn write_overwrite(c: &mut Ctx<'_>) -> Outcome {
    c.allow(&["hello.txt"]);
    let r = tryo!(c.one(req::write("hello.txt", "replaced")));
    on_disk(ok_with(&r, &[("/created", json!(false)), ("/bytesWritten", json!(8))]), c, "hello.txt", "replaced")
}
fn write_empty_content(c: &mut Ctx<'_>) -> Outcome {
    c.allow(&["hello.txt"]);
    let r = tryo!(c.one(req::write("hello.txt", "")));
    on_disk(ok_with(&r, &[("/bytesWritten", json!(0)), ("/digest", json!(sha(b"")))]), c, "hello.txt", "")
}
fn write_create_false(c: &mut Ctx<'_>) -> Outcome {
    tok(c.one(req::write("absent.txt", "x").create(false)))
}
fn write_overwrite_false(c: &mut Ctx<'_>) -> Outcome {
    tok(c.one(req::write("hello.txt", "x").overwrite(false)))
}
fn write_missing_parent(c: &mut Ctx<'_>) -> Outcome {
    tok(c.one(req::write("nodir/x.txt", "x")))
}
fn write_onto_directory(c: &mut Ctx<'_>) -> Outcome {
    tok(c.one(req::write("dir", "x")))
}
fn write_digest_match(c: &mut Ctx<'_>) -> Outcome {
    c.allow(&["hello.txt"]);
    let d = sha(b"hello world\n");
    let r = tryo!(c.one(req::write("hello.txt", "v2").expected_digest(&d)));
    on_disk(ok_with(&r, &[("/created", json!(false))]), c, "hello.txt", "v2")
}
fn write_digest_mismatch(c: &mut Ctx<'_>) -> Outcome {
    let d = sha(b"some other version");
    tok(c.one(req::write("hello.txt", "v2").expected_digest(&d)))
}
fn write_digest_missing_file(c: &mut Ctx<'_>) -> Outcome {
    let d = sha(b"hello world\n");
    tok(c.one(req::write("absent.txt", "v2").expected_digest(&d)))
}
fn write_keeps_mode(c: &mut Ctx<'_>) -> Outcome {
    use std::os::unix::fs::PermissionsExt;
    c.allow(&["dir/b.txt"]);
    let p = c.target.root.join("dir/b.txt");
    let _ = std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o640));
    let r = tryo!(c.one(req::write("dir/b.txt", "kept")));
    let mode = std::fs::metadata(&p).map(|m| m.permissions().mode() & 0o777).unwrap_or(0);
    match ok_with(&r, &[("/created", json!(false))]) {
        Outcome::Observed { token, mut problems } => {
            if token == "result:ok" && mode != 0o640 {
                problems.push(format!("mode changed from 640 to {mode:o}"));
            }
            Outcome::Observed { token, problems }
        }
        o => o,
    }
}
fn write_through_symlink(c: &mut Ctx<'_>) -> Outcome {
    tok(c.one(req::write("links/out.txt", "overwritten")))
}
fn write_through_symlink_dir(c: &mut Ctx<'_>) -> Outcome {
    tok(c.one(req::write("links/outdir/planted.txt", "x")))
}

/// PC-5.3.write: an overwrite is atomic. A large file is replaced while reads of the whole
/// file run beside the write on the same connection; each read returns the old or the new
/// content whole (a torn file shows as a shorter or mixed content, or an early `eof`). The
/// size is as large as the bound limits let one line carry (at most 4 MiB).
fn write_atomic_overwrite(c: &mut Ctx<'_>) -> Outcome {
    let l = *c.target.admitted.limits();
    let len = (l.max_request_bytes.min(l.max_response_bytes) as usize).min(MAX_CONTENT).saturating_sub(4096);
    if len < 64 * 1024 {
        return Outcome::Skip("maxRequestBytes/maxResponseBytes are too small for a large overwrite".into());
    }
    if l.max_concurrent_requests.get() < 2 {
        return Outcome::Skip("maxConcurrentRequests 1: no read can run beside the write".into());
    }
    let make = |tag: &str| {
        let mut b = Vec::with_capacity(len + 32);
        let mut i = 0u64;
        while b.len() < len {
            b.extend_from_slice(format!("{tag} {i:08}; ").as_bytes()); // nothing JSON escapes
            i += 1;
        }
        b.truncate(len);
        String::from_utf8(b).unwrap_or_default()
    };
    let (old, new) = (make("old line"), make("NEW LINE"));
    c.allow(&["atomic.txt"]);
    if std::fs::write(c.target.root.join("atomic.txt"), &old).is_err() {
        return Outcome::Error("cannot lay atomic.txt".into());
    }
    let mut conn = tryo!(c.bound());
    let in_flight = (l.max_concurrent_requests.get() as usize - 1).min(3);
    let read = |c: &mut Ctx<'_>, conn: &mut super::conn::Conn| {
        let (id, key) = c.ids();
        conn.send(&c.invoke(&id, &key, req::read("atomic.txt").max_bytes(MAX_CONTENT as u64)));
        id
    };
    // The write goes first: while its long line is being sent the adapter must not be busy
    // sending us read results we do not read yet (each side would wait for the other).
    let (wid, wkey) = c.ids();
    conn.send(&c.invoke(&wid, &wkey, req::write("atomic.txt", &new)));
    let mut queue: std::collections::VecDeque<String> = (0..in_flight).map(|_| read(c, &mut conn)).collect();
    let mut problems = Vec::new();
    let (mut seen_old, mut seen_new) = (0, 0);
    for i in 0..48 {
        let Some(id) = queue.pop_front() else { break };
        let r = conn.recv_for(&id);
        let Some(d) = data(&r) else { return Outcome::with(format!("read-{}", token(&r)), problems) };
        let content = d["content"].as_str().unwrap_or_default();
        let whole = d["eof"] == true && d["bytesRead"] == len;
        match content {
            x if x == old && whole => seen_old += 1,
            x if x == new && whole => seen_new += 1,
            x => {
                problems.push(format!(
                    "read {i}: {} bytes (bytesRead {}, eof {}) that are neither the old nor the new content whole: a torn file",
                    x.len(),
                    d["bytesRead"],
                    d["eof"]
                ));
                break;
            }
        }
        if i + in_flight < 48 {
            queue.push_back(read(c, &mut conn));
        }
    }
    for id in queue {
        conn.recv_for(&id);
    }
    let w = conn.recv_for(&wid);
    if data(&w).is_none() {
        return Outcome::with(format!("write-{}", token(&w)), problems);
    }
    if read_root(c, "atomic.txt") != new.as_bytes() {
        problems.push("after the write the file does not hold the new content".into());
    }
    conn.note(&format!("reads saw the old content {seen_old} times, the new {seen_new} times"));
    Outcome::with("result:ok", problems)
}

// ---------------------------------------------------------------- fs.edit

fn edit_sequential(c: &mut Ctx<'_>) -> Outcome {
    c.allow(&["edit.txt"]);
    let edits = [("unique line", "foo once"), ("foo once", "done")];
    let r = tryo!(c.one(req::edit("edit.txt", &edits)));
    let want = "foo bar foo\ndone\naaa\n";
    on_disk(ok_with(&r, &[("/replacements", json!(2)), ("/digest", json!(sha(want.as_bytes())))]), c, "edit.txt", want)
}
fn edit_not_found(c: &mut Ctx<'_>) -> Outcome {
    tok(c.one(req::edit("edit.txt", &[("absent", "x")])))
}
fn edit_ambiguous(c: &mut Ctx<'_>) -> Outcome {
    tok(c.one(req::edit("edit.txt", &[("foo", "x")])))
}
fn edit_overlapping(c: &mut Ctx<'_>) -> Outcome {
    tok(c.one(req::edit("edit.txt", &[("aa", "b")])))
}
fn edit_all_or_nothing(c: &mut Ctx<'_>) -> Outcome {
    let edits = [("unique line", "changed"), ("absent", "x")];
    tok(c.one(req::edit("edit.txt", &edits)))
}
fn edit_not_utf8(c: &mut Ctx<'_>) -> Outcome {
    tok(c.one(req::edit("latin1.txt", &[("needle", "x")])))
}
fn edit_digest_mismatch(c: &mut Ctx<'_>) -> Outcome {
    let edits = [("unique line", "x")];
    tok(c.one(req::edit("edit.txt", &edits).expected_digest(&sha(b"other"))))
}

// ---------------------------------------------------------------- confinement

fn confine_symlink_first(c: &mut Ctx<'_>) -> Outcome {
    tok(c.one(req::read("links/outdir/secret.txt")))
}
fn confine_symlink_middle(c: &mut Ctx<'_>) -> Outcome {
    tok(c.one(req::read("links/indir/a.txt")))
}
fn confine_list_through_symlink(c: &mut Ctx<'_>) -> Outcome {
    tok(c.one(req::list("links/outdir")))
}
fn confine_swap_race(c: &mut Ctx<'_>) -> Outcome {
    // A directory swapped for a symlink to the sentinel while searches and reads run: nothing
    // of the sentinel may ever come back.
    let root = c.target.root.clone();
    let sentinel = c.fixture.sentinel.clone();
    let _ = std::fs::create_dir_all(root.join("swap/d"));
    let _ = std::fs::write(root.join("swap/d/secret.txt"), "inside");
    c.allow(&["swap", "swap/d", "swap/d/secret.txt", "swap/d.real", "swap/d.real/secret.txt"]);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s2 = stop.clone();
    let swapper = std::thread::spawn(move || {
        let d = root.join("swap/d");
        let real = root.join("swap/d.real");
        while !s2.load(std::sync::atomic::Ordering::Relaxed) {
            let _ = std::fs::rename(&d, &real);
            let _ = std::os::unix::fs::symlink(&sentinel, &d);
            std::thread::yield_now();
            let _ = std::fs::remove_file(&d);
            let _ = std::fs::rename(&real, &d);
        }
    });
    let mut conn = match c.bound() {
        Ok(x) => x,
        Err(o) => {
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            let _ = swapper.join();
            return o;
        }
    };
    let mut problems = Vec::new();
    let mut last = String::from("result:ok");
    for i in 0..150 {
        let call = if i % 2 == 0 { req::search("swap", "SENTINEL") } else { req::read("swap/d/secret.txt") };
        let r = c.call(&mut conn, call);
        if let Some(v) = r.frame() {
            if v.to_string().contains("SENTINEL") {
                problems.push(format!("iteration {i}: the sentinel's content came back through the swapped directory"));
                break;
            }
        } else {
            last = token(&r);
            break;
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = swapper.join();
    Outcome::with(last, problems)
}

// ---------------------------------------------------------------- limits

/// The number of entries (fs.list) or matches (fs.search) in a result's data: typed, or read
/// raw from a frame the contract refused (its judge has already failed the case).
fn items(v: &Peer) -> Option<usize> {
    match v.adapter() {
        Some(AdapterFrame::ResultFsList(r)) => Some(r.data.entries.len()),
        Some(AdapterFrame::ResultFsSearch(r)) => Some(r.data.matches.len()),
        Some(_) => None,
        None => v["data"]["entries"].as_array().or_else(|| v["data"]["matches"].as_array()).map(Vec::len),
    }
}

fn limits_response_budget(c: &mut Ctx<'_>) -> Outcome {
    let calls = [req::read("big.txt"), req::list("."), req::search(".", "line")];
    // What the list and the search hold without the small budget: a result cut by the budget
    // has fewer items and must say `truncated:true`; one that fits whole need not (PC-5.3).
    let mut full = Vec::new();
    {
        let mut conn = tryo!(c.bound());
        for call in &calls {
            full.push(c.call(&mut conn, call.clone()).frame().and_then(items));
        }
    }
    let mut b = c.bind_frame();
    b["limits"]["maxResponseBytes"] = json!(1024);
    let mut conn = tryo!(c.bind_with(&b));
    let mut problems = Vec::new();
    let mut last = String::from("result:ok");
    for (call, whole) in calls.into_iter().zip(full) {
        let op = call.op().to_string();
        let r = c.call(&mut conn, call);
        match &r {
            Recv::Frame(_, raw) if raw.len() + 1 > 1024 => {
                // The judge also refuses it (PC-4.5); the token says what differed.
                last = format!("{op}:line-of-{}-bytes-over-1024", raw.len() + 1);
                break;
            }
            Recv::Frame(v, _) => {
                let cut = matches!((items(v), whole), (Some(got), Some(all)) if got < all);
                if v.ok() == Some(true) && cut && v["data"]["truncated"] != true {
                    problems.push(format!(
                        "PC-5.3: {op} returned {} of {} items within the 1024-byte budget but did not set \
                         truncated:true; a result the budget cut must say so",
                        items(v).unwrap_or(0),
                        whole.unwrap_or(0)
                    ));
                }
            }
            other => {
                last = token(other);
                break;
            }
        }
    }
    Outcome::with(last, problems)
}
fn burst(c: &mut Ctx<'_>, concurrent: u64, queued: u64, n: usize) -> Result<Vec<Recv>, Outcome> {
    let mut b = c.bind_frame();
    b["limits"]["maxConcurrentRequests"] = json!(concurrent);
    b["limits"]["maxQueuedRequests"] = json!(queued);
    let mut conn = c.bind_with(&b)?;
    let mut ids = Vec::new();
    let mut bytes = Vec::new();
    for _ in 0..n {
        let (id, key) = c.ids();
        let f = c.invoke(&id, &key, req::search("big.txt", "zzzz-not-there"));
        bytes.extend(serde_json::to_vec(&f).unwrap_or_default());
        bytes.push(b'\n');
        ids.push(id);
    }
    conn.send_raw(&bytes);
    Ok(ids.iter().map(|id| conn.recv_for(id)).collect())
}
fn limits_busy(c: &mut Ctx<'_>) -> Outcome {
    let rs = tryo!(burst(c, 1, 0, 8));
    // `busy` must be retryable: the judge checks every code's flag (PC-5.3.errors).
    let busy = rs.iter().filter_map(|r| r.frame()).any(|v| v.error_code() == Some(AdapterCode::Busy.as_str()));
    if rs.iter().any(|r| r.frame().is_none()) {
        return Outcome::token(rs.iter().map(token).find(|t| t == "closed" || t == "timeout").unwrap_or_default());
    }
    Outcome::token(if busy { "busy-seen" } else { "no-busy" })
}
fn limits_never_busy_under_limit(c: &mut Ctx<'_>) -> Outcome {
    let l = *c.target.admitted.limits();
    let (concurrent, queued) = (l.max_concurrent_requests.get(), l.max_queued_requests as u64);
    let n = (concurrent + queued).min(16) as usize;
    let rs = tryo!(burst(c, concurrent, queued, n));
    let tokens: Vec<String> = rs.iter().map(token).collect();
    if tokens.iter().all(|t| t == "result:ok") {
        Outcome::token("all-ok")
    } else {
        Outcome::token(tokens.into_iter().find(|t| t != "result:ok").unwrap_or_default())
    }
}

// ---------------------------------------------------------------- abort

fn abort_unknown(c: &mut Ctx<'_>) -> Outcome {
    let mut conn = tryo!(c.bound());
    conn.send(&c.abort("abort-1", "never-sent"));
    let r = conn.recv();
    match r.frame() {
        // The echo of requestId/targetRequestId and aborted:false for a target never invoked
        // are judged on every aborted frame.
        Some(v) if v.kind() == Some("aborted") => {
            Outcome::token(format!("aborted:{}", v.error_code().unwrap_or("none")))
        }
        _ => Outcome::token(token(&r)),
    }
}
fn abort_finished(c: &mut Ctx<'_>) -> Outcome {
    let mut conn = tryo!(c.bound());
    let (id, key) = c.ids();
    conn.send(&c.invoke(&id, &key, req::stat("hello.txt")));
    let r = conn.recv_for(&id);
    if r.frame().is_none() {
        return Outcome::token(token(&r));
    }
    conn.send(&c.abort("abort-2", &id));
    let a = conn.recv();
    match a.frame() {
        // SPEC 4.5 asks for aborted:false; an adapter that no longer remembers the finished
        // request may add unknown_request, which the protocol does not forbid.
        Some(v) if v.kind() == Some("aborted") => Outcome::token(
            if v.aborted() == Some(false)
                && (!v.has_error() || v.error_code() == Some(AdapterCode::UnknownRequest.as_str()))
            {
                "aborted:false"
            } else {
                "aborted-wrong"
            },
        ),
        _ => Outcome::token(token(&a)),
    }
}
fn abort_in_flight(c: &mut Ctx<'_>) -> Outcome {
    c.allow(&["aborted.txt"]);
    let mut conn = tryo!(c.bound());
    let (id, key) = c.ids();
    let content = "z".repeat(200_000);
    let f = c.invoke(&id, &key, req::write("aborted.txt", &content));
    let a = c.abort("abort-3", &id);
    let mut bytes = serde_json::to_vec(&f).unwrap_or_default();
    bytes.push(b'\n');
    bytes.extend(serde_json::to_vec(&a).unwrap_or_default());
    bytes.push(b'\n');
    conn.send_raw(&bytes);
    let mut ack = None;
    let mut result = None;
    for _ in 0..2 {
        let r = conn.recv_within(c.step() * 2);
        match r.frame() {
            Some(v) if v.kind() == Some("aborted") => ack = Some(v.clone()),
            Some(v) if v.kind() == Some("result") && v.request_id() == Some(id.as_str()) => result = Some(v.clone()),
            Some(_) => {}
            None => break,
        }
        if ack.as_ref().is_some_and(|a| a.aborted() == Some(true)) {
            // PC-4.5: after aborted:true its result must never come; keep reading for the
            // step budget (the judge also fails any result for it, whenever it is read).
            let until = std::time::Instant::now() + c.step();
            while let Some(left) = until.checked_duration_since(std::time::Instant::now()) {
                let late = conn.recv_within(left);
                match late.frame() {
                    Some(v) if v.request_id() == Some(id.as_str()) => result = Some(v.clone()),
                    Some(_) => {}
                    None => break,
                }
            }
            break;
        }
        if ack.is_some() && result.is_some() {
            break;
        }
    }
    let exists = c.target.root.join("aborted.txt").exists();
    match (ack, result) {
        (Some(a), None) if a.aborted() == Some(true) => Outcome::with(
            "consistent",
            if exists { vec!["aborted:true but the write happened".into()] } else { vec![] },
        ),
        (Some(a), Some(_)) if a.aborted() == Some(true) => {
            Outcome::with("result-after-aborted", vec!["a result was sent after aborted:true".into()])
        }
        (Some(a), Some(r)) if a.aborted() == Some(false) => {
            let p = if r.ok() == Some(true) && !exists {
                vec!["aborted:false and ok, but nothing was written".into()]
            } else {
                vec![]
            };
            Outcome::with("consistent", p)
        }
        (Some(_), None) => Outcome::token("aborted:false-without-result"),
        (None, _) => Outcome::token("no-aborted"),
        _ => Outcome::token("inconsistent"),
    }
}

// ---------------------------------------------------------------- idempotency

fn idem_replay_write(c: &mut Ctx<'_>) -> Outcome {
    c.allow(&["idem.txt"]);
    let mut conn = tryo!(c.bound());
    let payload = req::write("idem.txt", "first");
    let f1 = c.invoke("w-1", "same-key", payload.clone());
    conn.send(&f1);
    let r1 = conn.recv_for("w-1");
    let Some(d1) = data(&r1).cloned() else { return Outcome::token(token(&r1)) };
    let _ = std::fs::write(c.target.root.join("idem.txt"), "changed by someone else");
    conn.send(&c.invoke("w-2", "same-key", payload));
    let r2 = conn.recv_for("w-2");
    let mut p = Vec::new();
    if data(&r2) != Some(&d1) {
        p.push("the replay's data differs from the first outcome".into());
    }
    if read_root(c, "idem.txt") != b"changed by someone else" {
        p.push("the replay executed the write again".into());
    }
    Outcome::with(token(&r2), p)
}
fn idem_replay_edit(c: &mut Ctx<'_>) -> Outcome {
    c.allow(&["edit.txt"]);
    let mut conn = tryo!(c.bound());
    let payload = req::edit("edit.txt", &[("unique line", "edited once")]);
    conn.send(&c.invoke("e-1", "edit-key", payload.clone()));
    let r1 = conn.recv_for("e-1");
    let Some(d1) = data(&r1).cloned() else { return Outcome::token(token(&r1)) };
    conn.send(&c.invoke("e-2", "edit-key", payload));
    let r2 = conn.recv_for("e-2");
    let p = if data(&r2) != Some(&d1) {
        vec!["a replayed edit must return the first outcome, not run again".into()]
    } else {
        vec![]
    };
    Outcome::with(token(&r2), p)
}
fn idem_conflict(c: &mut Ctx<'_>) -> Outcome {
    c.allow(&["idem.txt"]);
    let mut conn = tryo!(c.bound());
    conn.send(&c.invoke("w-1", "k-conflict", req::write("idem.txt", "one")));
    let r1 = conn.recv_for("w-1");
    if data(&r1).is_none() {
        return Outcome::token(token(&r1));
    }
    conn.send(&c.invoke("w-2", "k-conflict", req::write("idem.txt", "two")));
    let r2 = conn.recv_for("w-2");
    let p =
        if read_root(c, "idem.txt") != b"one" { vec!["the conflicting request was executed".into()] } else { vec![] };
    Outcome::with(token(&r2), p)
}
/// SPEC 4.5: every key is remembered with its fingerprint, a read-only one too; reusing it
/// with another payload is idempotency_conflict, even though the same read may run again.
fn idem_read_only_key_conflict(c: &mut Ctx<'_>) -> Outcome {
    let mut conn = tryo!(c.bound());
    conn.send(&c.invoke("ro-1", "k-read-only", req::read("hello.txt")));
    let r1 = conn.recv_for("ro-1");
    if data(&r1).is_none() {
        return Outcome::token(token(&r1));
    }
    conn.send(&c.invoke("ro-2", "k-read-only", req::stat("notes.md")));
    let r2 = conn.recv_for("ro-2");
    let p = if data(&r2).is_some() {
        vec!["a key first used by fs.read was reused by fs.stat with another payload and ran".into()]
    } else {
        vec![]
    };
    Outcome::with(token(&r2), p)
}
fn idem_in_flight_duplicate(c: &mut Ctx<'_>) -> Outcome {
    c.allow(&["dup.txt"]);
    let mut conn = tryo!(c.bound());
    let payload = req::write("dup.txt", &"y".repeat(100_000));
    let mut bytes = Vec::new();
    for id in ["d-1", "d-2"] {
        bytes.extend(serde_json::to_vec(&c.invoke(id, "dup-key", payload.clone())).unwrap_or_default());
        bytes.push(b'\n');
    }
    conn.send_raw(&bytes);
    let r1 = conn.recv_for("d-1");
    let r2 = conn.recv_for("d-2");
    let (Some(a), Some(b)) = (data(&r1), data(&r2)) else {
        return Outcome::token(if data(&r1).is_none() { token(&r1) } else { token(&r2) });
    };
    let p = if a != b || a["created"] != true {
        vec!["the duplicate ran twice (results differ or created:false)".into()]
    } else {
        vec![]
    };
    Outcome::with("result:ok", p)
}

// ---------------------------------------------------------------- revoke / EOF

fn revoke_replies_and_closes(c: &mut Ctx<'_>) -> Outcome {
    let mut conn = tryo!(c.bound());
    conn.send(&c.revoke());
    let r = conn.recv();
    // The identity and closed keys of revoked are judged on every frame.
    match r.frame() {
        Some(v) if v.kind() == Some("revoked") => {
            let after = conn.expect_close(c.step());
            Outcome::token(if after == Recv::Closed { "revoked-closed" } else { "revoked-open" })
        }
        _ => Outcome::token(token(&r)),
    }
}
fn revoke_nothing_after(c: &mut Ctx<'_>) -> Outcome {
    let mut conn = tryo!(c.bound());
    let mut bytes = serde_json::to_vec(&c.revoke()).unwrap_or_default();
    bytes.push(b'\n');
    bytes.extend(serde_json::to_vec(&c.invoke("after-1", "after-k", req::write("after.txt", "x"))).unwrap_or_default());
    bytes.push(b'\n');
    conn.send_raw(&bytes);
    let mut saw_result = false;
    loop {
        let r = conn.recv();
        match r.frame() {
            Some(v) if v.kind() == Some("result") => saw_result = true,
            Some(_) => {}
            None => break,
        }
    }
    std::thread::sleep(Duration::from_millis(50));
    let written = c.target.root.join("after.txt").exists();
    Outcome::token(if saw_result || written { "executed-after-revoke" } else { "nothing-after-revoke" })
}
/// SPEC 4.5: EOF is revocation, so the adapter may answer `revoked` before it closes.
fn eof_closes(c: &mut Ctx<'_>) -> Outcome {
    let mut conn = tryo!(c.bound());
    conn.shutdown_write();
    let mut r = conn.expect_close(c.step());
    if r.frame().is_some_and(|v| v.kind() == Some("revoked")) {
        r = conn.expect_close(c.step());
    }
    Outcome::token(token(&r))
}

// ---------------------------------------------------------------- secret hygiene

fn plant_secret(c: &mut Ctx<'_>) {
    let h = c.target.handle().to_string();
    let _ = std::fs::create_dir_all(c.target.root.join("secret"));
    let _ = std::fs::write(c.target.root.join("secret/grant.json"), format!("{{\"capabilityHandle\":\"{h}\"}}\n"));
}
fn secret_read(c: &mut Ctx<'_>) -> Outcome {
    plant_secret(c);
    c.allow(&["secret", "secret/grant.json"]);
    tok(c.one(req::read("secret/grant.json")))
}
fn secret_search(c: &mut Ctx<'_>) -> Outcome {
    plant_secret(c);
    c.allow(&["secret", "secret/grant.json"]);
    tok(c.one(req::search("secret", "capabilityHandle")))
}
fn secret_list_name(c: &mut Ctx<'_>) -> Outcome {
    let h = c.target.handle().to_string();
    let _ = std::fs::create_dir_all(c.target.root.join("secret"));
    let name = format!("n-{h}");
    if name.len() > 255 {
        return Outcome::Skip("the handle is too long to be a file name".into());
    }
    let _ = std::fs::write(c.target.root.join("secret").join(&name), "x");
    let rel = format!("secret/{name}");
    c.allow(&["secret", &rel]);
    tok(c.one(req::list("secret")))
}

/// A case whose outcome carries every contract violation of the frames the adapter sent.
macro_rules! judged {
    ($f:ident) => {{
        fn judged_case(c: &mut Ctx<'_>) -> Outcome {
            let o = $f(c);
            c.judged(o)
        }
        judged_case as CaseFn
    }};
}

/// Every case implementation by id; each is judged ([`Ctx::judged`]).
pub fn registry() -> Vec<(&'static str, CaseFn)> {
    vec![
        ("adapter.bind.echo-exact", judged!(bind_echo_exact)),
        ("adapter.bind.bound-without-handle", judged!(bind_bound_without_handle)),
        ("adapter.bind.narrower-echo", judged!(bind_narrower)),
        ("adapter.bind.limit-above-grant", judged!(bind_limit_above_grant)),
        ("adapter.bind.operation-outside-grant", judged!(bind_operation_outside_grant)),
        ("adapter.bind.duplicate-key", judged!(bind_duplicate_key)),
        ("adapter.invoke.unknown-frame-key", judged!(invoke_unknown_frame_key)),
        ("adapter.invoke.unknown-frame-key.closes", judged!(invoke_unknown_frame_key)),
        ("adapter.invoke.handle-in-payload", judged!(invoke_handle_in_payload)),
        ("adapter.invoke.unknown-payload-key", judged!(invoke_unknown_payload_key)),
        ("adapter.invoke.payload-wrong-type", judged!(invoke_payload_wrong_type)),
        ("adapter.invoke.ungranted-operation", judged!(invoke_ungranted_operation)),
        ("adapter.invoke.oversize-line", judged!(invoke_oversize_line)),
        ("adapter.path.empty", judged!(path_empty)),
        ("adapter.path.absolute", judged!(path_absolute)),
        ("adapter.path.backslash", judged!(path_backslash)),
        ("adapter.path.control-character", judged!(path_control)),
        ("adapter.path.dotdot-escape", judged!(path_dotdot)),
        ("adapter.path.dotdot-inner", judged!(path_dotdot_inner)),
        ("adapter.path.double-slash", judged!(path_double_slash)),
        ("adapter.path.dot-prefix", judged!(path_dot_prefix)),
        ("adapter.path.dot-segment", judged!(path_dot_segment)),
        ("adapter.path.dot-suffix", judged!(path_dot_suffix)),
        ("adapter.path.long-component", judged!(path_long_component)),
        ("adapter.path.dot-slash-root", judged!(path_dot_slash_root)),
        ("adapter.path.trailing-slash-dir", judged!(path_trailing_slash_dir)),
        ("adapter.path.trailing-slash-file", judged!(path_trailing_slash_file)),
        ("adapter.list.sorted-bytewise", judged!(list_sorted_bytewise)),
        ("adapter.list.types-and-sizes", judged!(list_types_and_sizes)),
        ("adapter.list.omits-symlinks", judged!(list_omits_symlinks)),
        ("adapter.list.omits-special-files", judged!(list_omits_special)),
        ("adapter.list.max-entries", judged!(list_max_entries)),
        ("adapter.list.not-a-directory", judged!(list_not_a_directory)),
        ("adapter.list.not-found", judged!(list_not_found)),
        ("adapter.stat.file", judged!(stat_file)),
        ("adapter.stat.directory", judged!(stat_directory)),
        ("adapter.stat.root", judged!(stat_root)),
        ("adapter.stat.symlink-refused", judged!(stat_symlink)),
        ("adapter.stat.fifo-unsupported", judged!(stat_fifo)),
        ("adapter.stat.device-unsupported", judged!(stat_device)),
        ("adapter.stat.not-found", judged!(stat_not_found)),
        ("adapter.read.whole-file", judged!(read_whole)),
        ("adapter.read.window", judged!(read_window)),
        ("adapter.read.past-end", judged!(read_past_end)),
        ("adapter.read.offset-inside-character", judged!(read_mid_char_offset)),
        ("adapter.read.window-ends-inside-character", judged!(read_window_ends_mid_char)),
        ("adapter.read.window-smaller-than-character", judged!(read_tiny_window)),
        ("adapter.read.not-utf8", judged!(read_not_utf8)),
        ("adapter.read.larger-than-window", judged!(read_large_file)),
        ("adapter.read.offset-continues", judged!(read_continues)),
        ("adapter.read.directory", judged!(read_directory)),
        ("adapter.read.fifo-does-not-block", judged!(read_fifo)),
        ("adapter.read.symlink-refused", judged!(read_symlink)),
        ("adapter.search.literal-in-path-order", judged!(search_literal_order)),
        ("adapter.search.columns-in-scalar-values", judged!(search_columns_unicode)),
        ("adapter.search.non-overlapping", judged!(search_non_overlapping)),
        ("adapter.search.crlf-stripped", judged!(search_crlf)),
        ("adapter.search.long-line-window", judged!(search_long_line_window)),
        ("adapter.search.skips-binary-files", judged!(search_skips_binary)),
        ("adapter.search.named-binary-file", judged!(search_direct_binary)),
        ("adapter.search.query-with-newline", judged!(search_query_newline)),
        ("adapter.search.max-results", judged!(search_max_results)),
        ("adapter.search.case-sensitive", judged!(search_case_sensitive)),
        ("adapter.search.no-symlink-follow", judged!(search_no_symlink_follow)),
        ("adapter.search.literal-metacharacters", judged!(search_literal_metacharacters)),
        ("adapter.search.literal-text", judged!(search_literal_text)),
        ("adapter.write.create", judged!(write_create)),
        ("adapter.write.overwrite", judged!(write_overwrite)),
        ("adapter.write.empty-content", judged!(write_empty_content)),
        ("adapter.write.create-false", judged!(write_create_false)),
        ("adapter.write.overwrite-false", judged!(write_overwrite_false)),
        ("adapter.write.missing-parent", judged!(write_missing_parent)),
        ("adapter.write.onto-directory", judged!(write_onto_directory)),
        ("adapter.write.expected-digest-match", judged!(write_digest_match)),
        ("adapter.write.expected-digest-mismatch", judged!(write_digest_mismatch)),
        ("adapter.write.expected-digest-missing-file", judged!(write_digest_missing_file)),
        ("adapter.write.keeps-mode", judged!(write_keeps_mode)),
        ("adapter.write.symlink-target", judged!(write_through_symlink)),
        ("adapter.write.through-symlink-dir", judged!(write_through_symlink_dir)),
        ("adapter.write.atomic-overwrite", judged!(write_atomic_overwrite)),
        ("adapter.edit.sequential", judged!(edit_sequential)),
        ("adapter.edit.not-found", judged!(edit_not_found)),
        ("adapter.edit.ambiguous", judged!(edit_ambiguous)),
        ("adapter.edit.overlapping-occurrences", judged!(edit_overlapping)),
        ("adapter.edit.all-or-nothing", judged!(edit_all_or_nothing)),
        ("adapter.edit.not-utf8", judged!(edit_not_utf8)),
        ("adapter.edit.expected-digest-mismatch", judged!(edit_digest_mismatch)),
        ("adapter.confine.symlink-first-component", judged!(confine_symlink_first)),
        ("adapter.confine.symlink-middle-component", judged!(confine_symlink_middle)),
        ("adapter.confine.list-through-symlink", judged!(confine_list_through_symlink)),
        ("adapter.confine.swap-race", judged!(confine_swap_race)),
        ("adapter.limits.response-budget", judged!(limits_response_budget)),
        ("adapter.limits.busy-beyond-queue", judged!(limits_busy)),
        ("adapter.limits.never-busy-under-limit", judged!(limits_never_busy_under_limit)),
        ("adapter.abort.unknown-target", judged!(abort_unknown)),
        ("adapter.abort.finished-target", judged!(abort_finished)),
        ("adapter.abort.in-flight", judged!(abort_in_flight)),
        ("adapter.idempotency.replay-write", judged!(idem_replay_write)),
        ("adapter.idempotency.replay-edit", judged!(idem_replay_edit)),
        ("adapter.idempotency.conflict", judged!(idem_conflict)),
        ("adapter.idempotency.read-only-key-conflict", judged!(idem_read_only_key_conflict)),
        ("adapter.idempotency.in-flight-duplicate", judged!(idem_in_flight_duplicate)),
        ("adapter.revoke.replies-and-closes", judged!(revoke_replies_and_closes)),
        ("adapter.revoke.nothing-after", judged!(revoke_nothing_after)),
        ("adapter.revoke.eof-closes", judged!(eof_closes)),
        ("adapter.secret.file-content", judged!(secret_read)),
        ("adapter.secret.search-text", judged!(secret_search)),
        ("adapter.secret.entry-name", judged!(secret_list_name)),
    ]
}
