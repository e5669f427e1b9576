//! Differential check of the contract against Pi Daemon 0.3.3's own validator functions.
//!
//! Builds a corpus — every golden vector of kind command, descriptor, frame and path, plus
//! systematic variants of the bases (each member missing, null, of the wrong type, empty, at
//! and around every length and integer bound, bad patterns, an extra key, and pairs of faults
//! for precedence) — judges each document with the contract in-process (the same
//! `judge_line` that `pi-conform validate` uses), has `scripts/differential/pi-daemon-verdicts.mjs`
//! judge the whole batch with 0.3.3's functions in one node process, and compares:
//! verdicts for every kind, codes for commands and descriptors (0.3.3's frame-parser codes are
//! internal; on the wire a frame failure is `adapter_protocol_invalid`).
//!
//! Every difference must be listed, with the DECISION that justifies it, in
//! `conformance/pi-daemon-0.3.3-differences.json` (matched by the variant's description).
//!
//! Skipped (with a printed reason) unless `PI_DAEMON_DIST` (0.3.3's built `dist/`) and
//! `PI_DAEMON_NODE` (a node 22 binary) are set. Run:
//! `PI_DAEMON_DIST=... PI_DAEMON_NODE=... cargo test --release --test differential_pi_daemon -- --nocapture`

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use pi_conform::contract::descriptor::admit_descriptor;
use pi_conform::contract::frame::{Binding, Direction};
use pi_conform::contract::PathSide;
use pi_conform::judge::{judge_line, Context, Kind, Verdict};
use pi_conform::vectors::{default_dir, VectorSet};
use serde_json::{json, Value};

const MIN_VERDICT_AGREEMENT: f64 = 99.5;
const MIN_CODE_AGREEMENT: f64 = 99.0;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn base(name: &str) -> Value {
    let p = root().join("vectors/bases").join(format!("{name}.json"));
    serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap()
}

/// One document of the corpus.
struct Doc {
    /// Stable description: `kind:base:fault` (never an index).
    desc: String,
    kind: Kind,
    line: Vec<u8>,
    ctx: Context,
    /// The context as the node script reads it.
    node_ctx: Value,
}

/// A frame's judging context: the descriptor and the direction.
#[derive(Clone)]
struct FrameCtx {
    descriptor: Value,
    direction: Direction,
}

fn kind_name(k: Kind) -> &'static str {
    match k {
        Kind::Command => "command",
        Kind::Response => "response",
        Kind::Event => "event",
        Kind::Descriptor => "descriptor",
        Kind::Frame => "frame",
        Kind::Path => "path",
    }
}

fn dir_name(d: Direction) -> &'static str {
    match d {
        Direction::ToAdapter => "to-adapter",
        Direction::ToDaemon => "to-daemon",
    }
}

struct Corpus {
    docs: Vec<Doc>,
    seen: BTreeSet<String>,
}

impl Corpus {
    fn push(&mut self, desc: String, kind: Kind, line: Vec<u8>, ctx: Context, node_ctx: Value) {
        if self.seen.insert(desc.clone()) {
            self.docs.push(Doc { desc, kind, line, ctx, node_ctx });
        }
    }

    fn command(&mut self, desc: String, doc: &Value) {
        let ctx = Context::default();
        let node_ctx = json!({"hostInstanceId": ctx.host_instance_id});
        self.push(desc, Kind::Command, serde_json::to_vec(doc).unwrap(), ctx, node_ctx);
    }

    fn descriptor(&mut self, desc: String, doc: &Value) {
        let ctx = Context::default();
        let node_ctx = json!({"hostInstanceId": ctx.host_instance_id, "sessionId": ctx.session_id,
                              "generation": ctx.generation});
        self.push(desc, Kind::Descriptor, serde_json::to_vec(doc).unwrap(), ctx, node_ctx);
    }

    fn frame(&mut self, desc: String, doc: &Value, fc: &FrameCtx) {
        let d = admit_descriptor(&fc.descriptor, None).expect("frame context descriptor");
        let ctx = Context { binding: Some(Binding::from(&d)), direction: fc.direction, ..Context::default() };
        let node_ctx = json!({"descriptor": fc.descriptor, "direction": dir_name(fc.direction)});
        self.push(desc, Kind::Frame, serde_json::to_vec(doc).unwrap(), ctx, node_ctx);
    }

    fn path(&mut self, desc: String, path: &Value, side: PathSide) {
        let ctx = Context { side, ..Context::default() };
        self.push(desc, Kind::Path, serde_json::to_vec(path).unwrap(), ctx, json!({"field": "path"}));
    }
}

// ---------------------------------------------------------------------------------------
// Bases

const HANDLE: &str = "aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789_-AB";
const DIGEST: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

fn set(doc: &mut Value, ptr: &str, v: Value) {
    let (parent, key) = ptr.rsplit_once('/').unwrap();
    doc.pointer_mut(parent).unwrap().as_object_mut().unwrap().insert(key.to_string(), v);
}

fn command_bases() -> Vec<(String, Value)> {
    let mut out = Vec::new();
    let open_v2 = base("open-v2");
    out.push(("open-v2".into(), open_v2.clone()));
    let mut full = open_v2.clone();
    set(&mut full, "/payload/name", json!("agent a"));
    set(&mut full, "/payload/model", json!({"provider": "fakellm", "id": "fake-model", "thinkingLevel": "low"}));
    set(
        &mut full,
        "/payload/session",
        json!({"mode": "open", "path": "/home/operator/s.jsonl",
        "sessionDir": "/home/operator/.pi/agent/sessions/cacophony/agent-a"}),
    );
    set(&mut full, "/payload/resources/systemPrompt", json!("be brief"));
    out.push(("open-v2-full".into(), full));
    let mut none = open_v2.clone();
    set(&mut none, "/payload/resources/tools", json!("none"));
    out.push(("open-v2-none".into(), none));
    let mut nores = open_v2.clone();
    nores["payload"].as_object_mut().unwrap().shift_remove("resources");
    out.push(("open-v2-nores".into(), nores));
    let open_v1 = base("open-v1");
    out.push(("open-v1".into(), open_v1.clone()));
    let mut v1full = open_v1.clone();
    set(&mut v1full, "/payload/name", json!("agent a"));
    set(&mut v1full, "/payload/agentDir", json!("/home/operator/.pi/agent"));
    set(&mut v1full, "/payload/model", json!({"provider": "fakellm", "id": "fake-model", "thinkingLevel": "high"}));
    set(&mut v1full, "/payload/session", json!({"mode": "continue", "sessionDir": "/home/operator/s"}));
    set(&mut v1full, "/payload/resources/systemPrompt", json!(""));
    out.push(("open-v1-full".into(), v1full));
    let ident = |op: &str, payload: Value, key: bool| {
        let mut c = json!({"protocolVersion": "2.0", "requestId": format!("{op}-1"), "operation": op,
                           "sessionId": "agent-a", "generation": 2, "payload": payload});
        if key {
            c["idempotencyKey"] = json!(format!("{op}-key-1"));
        }
        c
    };
    let mut ops = vec![
        ("handshake".to_string(), base("handshake")),
        ("wake".to_string(), base("wake")),
        (
            "wake-full".to_string(),
            ident("wake", json!({"prompt": "hi", "source": "cli", "waitForTerminal": false}), true),
        ),
        ("steer".to_string(), ident("steer", json!({"message": "go"}), true)),
        ("followUp".to_string(), ident("followUp", json!({"message": "more"}), true)),
        ("abort".to_string(), ident("abort", json!({}), false)),
        ("attach".to_string(), ident("attach", json!({}), false)),
        ("detach".to_string(), ident("detach", json!({}), false)),
        ("close".to_string(), ident("close", json!({"retainSession": true}), false)),
        (
            "status-session".to_string(),
            json!({"protocolVersion": "2.0", "requestId": "s1", "operation": "status",
            "sessionId": "agent-a", "payload": {}}),
        ),
        (
            "status".to_string(),
            json!({"protocolVersion": "2.0", "requestId": "s2", "operation": "status", "payload": {}}),
        ),
        (
            "drain".to_string(),
            json!({"protocolVersion": "2.0", "requestId": "d1", "operation": "drain",
            "payload": {"timeoutMs": 1000}}),
        ),
    ];
    let v1: Vec<(String, Value)> = ops
        .iter()
        .map(|(n, c)| {
            let mut c = c.clone();
            c["protocolVersion"] = json!("1.0");
            (format!("{n}-v1"), c)
        })
        .collect();
    ops.extend(v1);
    out.extend(ops);
    out
}

fn frame_bases() -> Vec<(String, Value, Direction)> {
    use Direction::*;
    let mut out = vec![
        ("bind".to_string(), base("bind"), ToAdapter),
        ("abort".to_string(), base("abort"), ToAdapter),
        ("revoke".to_string(), base("revoke"), ToAdapter),
        ("bound".to_string(), base("bound"), ToDaemon),
        ("aborted".to_string(), base("aborted"), ToDaemon),
        ("revoked".to_string(), base("revoked"), ToDaemon),
        ("result-error".to_string(), base("result-error"), ToDaemon),
    ];
    let mut aborted_false = base("aborted");
    aborted_false["aborted"] = json!(false);
    aborted_false["error"] = json!({"code": "unknown_request", "message": "no such request", "retryable": false});
    out.push(("aborted-false".into(), aborted_false, ToDaemon));
    let invoke = base("invoke");
    let result = base("result");
    let payloads = [
        ("fs.list", json!({"path": "src", "maxEntries": 100})),
        ("fs.stat", json!({"path": "src/protocol.ts"})),
        ("fs.read", invoke["payload"].clone()),
        ("fs.search", json!({"path": ".", "query": "PROTOCOL", "maxResults": 10})),
        (
            "fs.write",
            json!({"path": "notes/a.txt", "content": "hello", "create": true, "overwrite": false,
                            "expectedDigest": DIGEST}),
        ),
        ("fs.edit", json!({"path": "a.txt", "edits": [{"oldText": "a", "newText": "b"}], "expectedDigest": DIGEST})),
    ];
    let datas = [
        (
            "fs.list",
            json!({"entries": [{"name": "a.txt", "type": "file", "size": 3, "modifiedAt": "2026-12-02T14:43:25Z"},
                                       {"name": "dir", "type": "directory"}], "truncated": false}),
        ),
        ("fs.stat", json!({"type": "file", "size": 39, "modifiedAt": "2026-12-02T14:43:25.123Z"})),
        ("fs.read", result["data"].clone()),
        (
            "fs.search",
            json!({"matches": [{"path": "src/protocol.ts", "line": 1, "column": 14, "text": "export const"}],
                             "truncated": false}),
        ),
        ("fs.write", json!({"created": true, "bytesWritten": 5, "digest": DIGEST})),
        ("fs.edit", json!({"replacements": 1, "digest": DIGEST})),
    ];
    for (op, p) in payloads {
        let mut f = invoke.clone();
        f["operation"] = json!(op);
        f["payload"] = p;
        out.push((format!("invoke-{op}"), f, ToAdapter));
    }
    for (op, d) in datas {
        let mut f = result.clone();
        f["operation"] = json!(op);
        f["data"] = d;
        out.push((format!("result-{op}"), f, ToDaemon));
    }
    out
}

// ---------------------------------------------------------------------------------------
// Variants

/// Every member (object key or array item) of `v`, as (JSON Pointer, value).
fn members(v: &Value, ptr: &str, out: &mut Vec<(String, Value)>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                let p = format!("{ptr}/{}", k.replace('~', "~0").replace('/', "~1"));
                out.push((p.clone(), x.clone()));
                members(x, &p, out);
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                let p = format!("{ptr}/{i}");
                out.push((p.clone(), x.clone()));
                members(x, &p, out);
            }
        }
        _ => {}
    }
}

fn objects(v: &Value, ptr: &str, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            out.push(ptr.to_string());
            for (k, x) in m {
                objects(x, &format!("{ptr}/{k}"), out);
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                objects(x, &format!("{ptr}/{i}"), out);
            }
        }
        _ => {}
    }
}

enum Fault {
    Remove,
    Set(Value),
}

fn apply(doc: &Value, ptr: &str, fault: &Fault) -> Option<Value> {
    let mut d = doc.clone();
    let (parent, last) = ptr.rsplit_once('/')?;
    let last = last.replace("~1", "/").replace("~0", "~");
    match (d.pointer_mut(parent)?, fault) {
        (Value::Object(m), Fault::Remove) => {
            m.shift_remove(&last)?;
        }
        (Value::Object(m), Fault::Set(v)) => {
            m.insert(last, v.clone());
        }
        (Value::Array(a), Fault::Remove) => {
            let i: usize = last.parse().ok()?;
            a.remove(i);
        }
        (Value::Array(a), Fault::Set(v)) => {
            let i: usize = last.parse().ok()?;
            a[i] = v.clone();
        }
        _ => return None,
    }
    Some(d)
}

const LENGTHS: &[usize] = &[
    1, 2, 15, 16, 17, 20, 21, 31, 32, 33, 39, 63, 64, 65, 99, 100, 101, 127, 128, 129, 255, 256, 257, 511, 512, 513,
    1023, 1024, 1025, 4095, 4096, 4097,
];
const UNICODE_LENGTHS: &[usize] = &[16, 32, 64, 100, 128, 256, 512, 1024, 4096];

fn is_timestamp_like(s: &str) -> bool {
    s.len() >= 20 && s.as_bytes().get(10) == Some(&b'T') && s.ends_with('Z')
}

/// A string of `n` units shaped like `orig` (so that only the length is at fault).
fn fill(orig: &str, n: usize) -> String {
    if orig.starts_with('/') {
        return format!("/{}", "a".repeat(n.saturating_sub(1)));
    }
    if orig == "1.2.0" && n >= 7 {
        return format!("1.2.0-{}", "a".repeat(n - 6));
    }
    if let Some((maj, min)) = orig.split_once('.') {
        let digits = |p: &str| !p.is_empty() && p.bytes().all(|c| c.is_ascii_digit());
        if digits(maj) && (min.is_empty() || digits(min)) && n > maj.len() + 1 {
            return format!("{maj}.{}", "0".repeat(n - maj.len() - 1));
        }
    }
    if is_timestamp_like(orig) && n >= 22 {
        return format!("2026-12-02T14:43:25.{}Z", "1".repeat(n - 21));
    }
    if orig == HANDLE {
        return "aB0_-".chars().cycle().take(n).collect();
    }
    "a".repeat(n)
}

fn relative_paths() -> Vec<Value> {
    let mut v: Vec<Value> = [
        ".",
        "./",
        "a/",
        "a//",
        "./a",
        "a/./b",
        "a/.",
        "a/..",
        "..",
        "../a",
        "a/../b",
        "/a",
        "a\\b",
        "a\u{0}b",
        "a\u{1}",
        "a\u{7f}",
        "a\u{80}",
        "..a",
        "...",
        ".hidden",
        "a/b/c",
        "~",
        "a/b/",
        "é",
        "C:\\a",
        "a//b",
        "a/b//",
        " ",
        "a b",
        "a\nb",
        "\u{feff}a",
        "😀",
    ]
    .iter()
    .map(|s| json!(s))
    .collect();
    for n in [255usize, 256] {
        v.push(json!("a".repeat(n)));
        v.push(json!(format!("d/{}", "a".repeat(n))));
    }
    for n in [4095usize, 4096, 4097] {
        // n bytes in many short components.
        v.push(json!("a/".repeat((n - 1) / 2) + if (n - 1) % 2 == 1 { "bb" } else { "b" }));
        v.push(json!("a".repeat(n)));
    }
    v.push(json!("é".repeat(2048)));
    v.push(json!("é".repeat(2049)));
    v
}

/// A stable, short label for a value: its JSON when short, else a prefix and the length.
fn vlabel(v: &Value) -> String {
    let text = v.to_string();
    if text.chars().count() <= 40 {
        return format!("value:{text}");
    }
    let units: usize = v.as_str().map(|s| s.encode_utf16().count()).unwrap_or(0);
    let bytes = v.as_str().map(str::len).unwrap_or(0);
    let head: String = text.chars().take(12).collect();
    format!("value:{head}…({units}u/{bytes}b)")
}

/// Values to try for a member, by key name (and the enclosing pointer).
fn special_values(ptr: &str, key: &str, orig: &Value) -> Vec<(String, Value)> {
    let strs = |xs: &[&str]| xs.iter().map(|s| (vlabel(&json!(s)), json!(s))).collect::<Vec<_>>();
    let ids = ["-a", ".a", "_a", "a b", "a/b", "a:b", "a.b", "a\u{0}", "é", "a\n", "A.b_c-1:2"];
    let mut out = match key {
        "protocolVersion" => strs(&[
            "2", "2.", "2.0.0", "02.0", "01.0", "3.0", "0.9", "1.0 ", " 2.0", "2.0\n", "2.x", "1.1", "2.99", "١.0",
            "1.0.0", "10.0", "1.0", "2.0", "2.7", "1.9",
        ]),
        "requestId" | "idempotencyKey" | "targetRequestId" => strs(&ids),
        "sessionId" | "hostInstanceId" => {
            strs(&["a\u{0}b", "a\u{1f}b", "a\u{7f}b", "a\u{80}b", "é", " ", "a\nb", "agent-b", "host-019g", "AGENT-A"])
        }
        "adapterId" => strs(&ids),
        "adapterVersion" => strs(&[
            "1.2",
            "01.2.0",
            "1.02.0",
            "v1.2.0",
            "1.2.0-",
            "1.2.0+",
            "1.2.0-01",
            "1.2.0-a..b",
            "1.2.0-.a",
            "1.2.0+..",
            "1.2.3.4",
            "1.2.0-rc.1+build.5",
            "1.2.0-0a",
            "1.2.0+001",
            " 1.2.0",
            "1.2.0 ",
            "1.2.0-é",
            "1.2.0-a_b",
        ]),
        "capabilityHandle" => {
            let mut v = strs(&[&HANDLE[..39], &format!("{}+", &HANDLE[..39]), &format!("{}=", &HANDLE[..39])]);
            v.extend(strs(&[&format!("{}/", &HANDLE[..39]), &format!("{} ", &HANDLE[..39])]));
            v.extend(strs(&[&format!("{}é", &HANDLE[..39]), &HANDLE.to_uppercase(), &HANDLE.replace('a', "b")]));
            v
        }
        "path" if ptr.ends_with("/endpoint/path") => {
            let mut v = strs(&[
                "relative", "/", "//a", "/a//b", "/a/./b", "/a/../b", "/a/.", "/a/..", "/a/", "/a/b/", "/./a",
                "/a\u{1}", "/a\u{0}", "/a b", "/é", "/...", "/.hidden", "~/a", "/a\\b", "/a/b//", "//",
            ]);
            for (label, s) in [
                ("ascii", format!("/{}", "a".repeat(99))),
                ("ascii", format!("/{}", "a".repeat(100))),
                ("utf8", format!("/{}", "é".repeat(49))),
                ("utf8", format!("/{}", "é".repeat(50))),
            ] {
                v.push((format!("len-bytes:{label}:{}", s.len()), json!(s)));
            }
            v
        }
        "path" if ptr.starts_with("/payload/session") => strs(&["relative", "", "/", "a\u{0}"]),
        "path" => relative_paths().into_iter().map(|p| (vlabel(&p), p)).collect(),
        "cwd" | "agentDir" | "sessionDir" => strs(&["relative", "./a", "/", "~/a", "/a/../b", "/a\u{0}", "a/"]),
        "mode" if ptr.ends_with("/session/mode") => strs(&["open", "continue", "memory", "New", "bogus", "new "]),
        "mode" => strs(&["host-adapter", "Host-Adapter", "none", "", "host-adapter "]),
        "thinkingLevel" => strs(&["off", "minimal", "low", "medium", "high", "xhigh", "max", "ultra", "LOW", ""]),
        "transport" => strs(&["unix", "UNIX", "tcp", "", "unix "]),
        "operation" if !ptr.starts_with("/payload") && orig.as_str().is_some_and(|s| s.starts_with("fs.")) => strs(&[
            "fs.list",
            "fs.stat",
            "fs.read",
            "fs.search",
            "fs.write",
            "fs.edit",
            "fs.delete",
            "FS.READ",
            "fs.read ",
            "",
        ]),
        "operation" => strs(&[
            "handshake",
            "open",
            "wake",
            "steer",
            "followUp",
            "status",
            "abort",
            "attach",
            "detach",
            "close",
            "drain",
            "Open",
            "followup",
            "bogus",
            "",
            &"x".repeat(33),
        ]),
        "kind" => {
            strs(&["bind", "bound", "invoke", "result", "abort", "aborted", "revoke", "revoked", "Bind", "error", ""])
        }
        "extensions" | "skills" | "promptTemplates" | "themes" | "contextFiles" => {
            strs(&["none", "None", "all", "NONE", "none "])
        }
        "tools" => strs(&["none", "None", "all", "host-adapter"]),
        "code" => strs(&["Bad", "_x", "a-b", "a b", "9a", "not_found", "a1_"]),
        "modifiedAt" => strs(&[
            "2026-12-02T14:43:25Z",
            "2026-12-02T14:43:25.1Z",
            "2026-12-02T14:43:25.123456789Z",
            "2026-12-02T14:43:25.1234567890Z",
            "2026-12-02T14:43:25+00:00",
            "2026-12-02 14:43:25Z",
            "2026-12-02T14:43:25.Z",
            "2026-13-45T99:99:99Z",
            "20261-12-02T14:43:25Z",
            "2026-12-02T14:43:25z",
            "2026-12-02t14:43:25Z",
        ]),
        "digest" | "expectedDigest" => {
            strs(&[&DIGEST.to_uppercase(), &DIGEST[..63], &format!("{DIGEST}0"), &"g".repeat(64), &"0".repeat(64)])
        }
        "name" if ptr.contains("/entries/") => {
            let mut v = strs(&[".", "..", "a/b", "a\u{0}", "a\u{7f}", "...", ".a", "é", " "]);
            v.push(("value:é*127".into(), json!("é".repeat(127))));
            v.push(("value:é*128".into(), json!("é".repeat(128))));
            v
        }
        "content" => strs(&["", "é", "\u{0}"]),
        "query" => strs(&["a\nb", "a\rb", "a\u{0}b", " "]),
        "text" => {
            vec![("astral:2048".into(), json!("😀".repeat(2048))), ("astral:2049".into(), json!("😀".repeat(2049)))]
        }
        "oldText" | "newText" => strs(&["", "é"]),
        _ => vec![],
    };
    // Big strings where the bound is large.
    if matches!(key, "prompt" | "message" | "systemPrompt") {
        for n in [262_143usize, 262_144, 262_145] {
            out.push((format!("len:{n}"), json!("a".repeat(n))));
        }
        out.push(("astral-units:262146".into(), json!("😀".repeat(131_073))));
    }
    out
}

/// Integer bounds by key (min, max) where the protocol fixes them.
fn int_bounds(key: &str) -> Option<(i64, i64)> {
    const MAX: i64 = 9_007_199_254_740_991;
    Some(match key {
        "maxRequestBytes" => (2048, 4_194_304),
        "maxResponseBytes" => (1024, 4_194_304),
        "maxConcurrentRequests" => (1, 64),
        "maxQueuedRequests" => (0, 256),
        "requestTimeoutMs" => (100, 120_000),
        "maxIdempotencyKeys" => (1, 4096),
        "idempotencyTtlMs" => (1000, 86_400_000),
        "timeoutMs" => (0, 86_400_000),
        "maxEntries" | "maxResults" => (1, 10_000),
        "maxBytes" => (1, 4_194_304),
        "replacements" => (0, 256),
        "generation" | "offset" | "size" | "bytesRead" | "bytesWritten" => (0, MAX),
        "line" | "column" => (1, MAX),
        _ => return None,
    })
}

fn int_values(key: &str) -> Vec<(String, Value)> {
    let mut ints: BTreeSet<i64> = [
        -1,
        0,
        1,
        2,
        3,
        255,
        256,
        257,
        1023,
        1024,
        1025,
        2047,
        2048,
        4096,
        4097,
        10_000,
        10_001,
        120_000,
        120_001,
        86_400_000,
        86_400_001,
        4_194_304,
        4_194_305,
        9_007_199_254_740_991,
        9_007_199_254_740_992,
    ]
    .into_iter()
    .collect();
    if let Some((lo, hi)) = int_bounds(key) {
        ints.extend([lo - 1, lo, hi, hi + 1]);
    }
    let mut out: Vec<(String, Value)> = ints.into_iter().map(|i| (format!("int:{i}"), json!(i))).collect();
    out.push(("float:1.5".into(), json!(1.5)));
    out.push(("float:2.0".into(), json!(2.0)));
    out.push(("float:-0.0".into(), json!(-0.0)));
    out.push(("float:1e19".into(), json!(1.0e19)));
    out
}

/// Every single-member variant of `doc`, as (fault label, document).
fn single_variants(doc: &Value) -> Vec<(String, Value)> {
    let mut ms = Vec::new();
    members(doc, "", &mut ms);
    let mut out = Vec::new();
    for (ptr, orig) in &ms {
        let key = ptr.rsplit('/').next().unwrap_or_default().to_string();
        let mut faults: Vec<(String, Fault)> =
            vec![("missing".into(), Fault::Remove), ("null".into(), Fault::Set(Value::Null))];
        match orig {
            Value::String(s) => {
                faults.push(("type:number".into(), Fault::Set(json!(1))));
                faults.push(("type:bool".into(), Fault::Set(json!(true))));
                faults.push(("type:array".into(), Fault::Set(json!([s]))));
                faults.push(("type:object".into(), Fault::Set(json!({}))));
                faults.push(("empty".into(), Fault::Set(json!(""))));
                for &n in LENGTHS {
                    faults.push((format!("len:{n}"), Fault::Set(json!(fill(s, n)))));
                }
                for &n in UNICODE_LENGTHS {
                    faults.push((format!("euro:{n}"), Fault::Set(json!("€".repeat(n)))));
                    faults.push((format!("astral:{n}"), Fault::Set(json!("😀".repeat(n / 2)))));
                }
            }
            Value::Number(_) => {
                faults.push(("type:string".into(), Fault::Set(json!(orig.to_string()))));
                faults.push(("type:bool".into(), Fault::Set(json!(false))));
                faults.push(("type:array".into(), Fault::Set(json!([orig]))));
                for (label, v) in int_values(&key) {
                    faults.push((label, Fault::Set(v)));
                }
            }
            Value::Bool(b) => {
                faults.push(("type:string".into(), Fault::Set(json!(b.to_string()))));
                faults.push(("type:number".into(), Fault::Set(json!(1))));
                faults.push(("flip".into(), Fault::Set(json!(!b))));
            }
            Value::Object(_) => {
                faults.push(("type:array".into(), Fault::Set(json!([]))));
                faults.push(("type:string".into(), Fault::Set(json!("x"))));
                faults.push(("empty".into(), Fault::Set(json!({}))));
            }
            Value::Array(a) => {
                faults.push(("type:object".into(), Fault::Set(json!({}))));
                faults.push(("type:string".into(), Fault::Set(json!("x"))));
                faults.push(("empty".into(), Fault::Set(json!([]))));
                if let Some(first) = a.first() {
                    let mut dup = a.clone();
                    dup.push(first.clone());
                    faults.push(("duplicate-first".into(), Fault::Set(Value::Array(dup))));
                    let mut rev = a.clone();
                    rev.reverse();
                    faults.push(("reversed".into(), Fault::Set(Value::Array(rev))));
                    let mut bad = a.clone();
                    bad.push(json!(7));
                    faults.push(("append-number".into(), Fault::Set(Value::Array(bad))));
                    let mut unk = a.clone();
                    unk.push(json!("fs.delete"));
                    faults.push(("append-unknown".into(), Fault::Set(Value::Array(unk))));
                }
            }
            Value::Null => {}
        }
        for (label, v) in special_values(ptr, &key, orig) {
            faults.push((label, Fault::Set(v)));
        }
        for (label, f) in faults {
            if let Some(d) = apply(doc, ptr, &f) {
                out.push((format!("{ptr}={label}"), d));
            }
        }
    }
    // An extra key in every object (forward tolerance vs closed objects).
    let mut objs = Vec::new();
    objects(doc, "", &mut objs);
    for o in objs {
        for (k, label) in [("zzExtra", "extra-key"), ("capabilityHandle", "extra-handle-key")] {
            let mut d = doc.clone();
            if let Some(Value::Object(m)) = d.pointer_mut(&o) {
                if m.contains_key(k) {
                    continue;
                }
                m.insert(k.into(), if k == "zzExtra" { json!(1) } else { json!(HANDLE) });
                out.push((format!("{o}/={label}"), d));
            }
        }
    }
    out
}

/// Pairs of faults (both members missing; both null) on members that do not contain each
/// other, to compare which error wins.
fn pair_variants(doc: &Value) -> Vec<(String, Value)> {
    let mut ms = Vec::new();
    members(doc, "", &mut ms);
    let ptrs: Vec<String> = ms.into_iter().map(|(p, _)| p).collect();
    let mut out = Vec::new();
    for (i, a) in ptrs.iter().enumerate() {
        for b in &ptrs[i + 1..] {
            if b.starts_with(&format!("{a}/")) || a.starts_with(&format!("{b}/")) {
                continue;
            }
            // Array items: removing one shifts the next; only pair them as nulls.
            let in_array = |p: &str| p.rsplit('/').next().is_some_and(|k| k.parse::<usize>().is_ok());
            if !in_array(a) && !in_array(b) {
                if let Some(d) = apply(doc, a, &Fault::Remove).and_then(|d| apply(&d, b, &Fault::Remove)) {
                    out.push((format!("{a}=missing+{b}=missing"), d));
                }
            }
            if let Some(d) =
                apply(doc, a, &Fault::Set(Value::Null)).and_then(|d| apply(&d, b, &Fault::Set(Value::Null)))
            {
                out.push((format!("{a}=null+{b}=null"), d));
            }
        }
    }
    out
}

fn build_corpus() -> Corpus {
    let mut c = Corpus { docs: Vec::new(), seen: BTreeSet::new() };
    // 1. Every golden vector of the four kinds.
    let set = VectorSet::load(&default_dir()).expect("vectors load");
    for v in &set.vectors {
        if !matches!(v.kind, Kind::Command | Kind::Descriptor | Kind::Frame | Kind::Path) {
            continue;
        }
        let line = set.line(v).expect("vector line");
        let ctx = set.context(v).expect("vector context");
        let node_ctx = match v.kind {
            Kind::Command => json!({"hostInstanceId": ctx.host_instance_id}),
            Kind::Descriptor => json!({"hostInstanceId": ctx.host_instance_id, "sessionId": ctx.session_id,
                                       "generation": ctx.generation}),
            Kind::Frame => {
                let d = match v.context.get("descriptor") {
                    None => base("descriptor"),
                    Some(Value::String(name)) => base(name),
                    Some(inline) => inline.clone(),
                };
                json!({"descriptor": d, "direction": dir_name(ctx.direction)})
            }
            _ => json!({"field": "path"}),
        };
        let desc = format!("vector:{}", v.id);
        c.push(desc, v.kind, line, ctx, node_ctx);
    }
    // 2. Variants of the bases.
    for (name, doc) in command_bases() {
        c.command(format!("command:{name}:base"), &doc);
        for (label, d) in single_variants(&doc).into_iter().chain(pair_variants(&doc)) {
            c.command(format!("command:{name}:{label}"), &d);
        }
    }
    let descriptor = base("descriptor");
    c.descriptor("descriptor:descriptor:base".into(), &descriptor);
    for (label, d) in single_variants(&descriptor).into_iter().chain(pair_variants(&descriptor)) {
        c.descriptor(format!("descriptor:descriptor:{label}"), &d);
    }
    let fc = |direction| FrameCtx { descriptor: descriptor.clone(), direction };
    for (name, doc, dir) in frame_bases() {
        c.frame(format!("frame:{name}:base"), &doc, &fc(dir));
        let other = if dir == Direction::ToAdapter { Direction::ToDaemon } else { Direction::ToAdapter };
        c.frame(format!("frame:{name}:wrong-direction"), &doc, &fc(other));
        for (label, d) in single_variants(&doc).into_iter().chain(pair_variants(&doc)) {
            c.frame(format!("frame:{name}:{label}"), &d, &fc(dir));
        }
    }
    for p in relative_paths() {
        for (side, sname) in [(PathSide::Daemon, "daemon"), (PathSide::Adapter, "adapter")] {
            c.path(format!("path:{sname}:{}", vlabel(&p)), &p, side);
        }
    }
    for p in [json!(null), json!(1), json!([]), json!({}), json!("")] {
        c.path(format!("path:daemon:{}", vlabel(&p)), &p, PathSide::Daemon);
    }
    c
}

// ---------------------------------------------------------------------------------------
// Judging and comparing

#[derive(Clone, Debug, PartialEq)]
struct Outcome {
    valid: bool,
    code: String,
    field: String,
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.valid {
            f.write_str("valid")
        } else {
            write!(f, "{}@{}", self.code, self.field)
        }
    }
}

fn ours(d: &Doc) -> Outcome {
    match judge_line(&d.line, Some(d.kind), &d.ctx).1 {
        Verdict::Valid => Outcome { valid: true, code: String::new(), field: String::new() },
        Verdict::Invalid { code, field, .. } => Outcome { valid: false, code, field },
    }
}

fn theirs(node: &Path, script: &Path, dist: &str, docs: &[Doc]) -> Vec<Outcome> {
    let mut child = Command::new(node)
        .arg(script)
        .arg(dist)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start node");
    let mut stdin = child.stdin.take().unwrap();
    let requests: Vec<Vec<u8>> = docs
        .iter()
        .map(|d| {
            let mut r = json!({"kind": kind_name(d.kind), "context": d.node_ctx});
            match std::str::from_utf8(&d.line) {
                Ok(s) => r["doc"] = json!(s),
                Err(_) => r["docHex"] = json!(hex::encode(&d.line)),
            }
            let mut line = serde_json::to_vec(&r).unwrap();
            line.push(b'\n');
            line
        })
        .collect();
    let writer = std::thread::spawn(move || {
        for r in requests {
            stdin.write_all(&r).expect("write to node");
        }
    });
    let reader = BufReader::new(child.stdout.take().unwrap());
    let mut out = Vec::with_capacity(docs.len());
    for line in reader.lines() {
        let v: Value = serde_json::from_str(&line.expect("read node")).expect("node answer is JSON");
        let valid = v["verdict"] == "valid";
        out.push(Outcome {
            valid,
            code: v["code"].as_str().unwrap_or_default().to_string(),
            field: v["field"].as_str().unwrap_or_default().to_string(),
        });
    }
    writer.join().unwrap();
    assert!(child.wait().unwrap().success(), "node script failed");
    assert_eq!(out.len(), docs.len(), "node answered {} of {} documents", out.len(), docs.len());
    out
}

/// `*` matches any run of characters; everything else is literal.
fn glob(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == text;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !text.starts_with(first) || !text[first.len()..].ends_with(last) || text.len() < first.len() + last.len() {
        return false;
    }
    let mut rest = &text[first.len()..text.len() - last.len()];
    for p in &parts[1..parts.len() - 1] {
        match rest.find(p) {
            Some(i) => rest = &rest[i + p.len()..],
            None => return false,
        }
    }
    true
}

struct Allowed {
    pattern: String,
    clause: String,
    hits: usize,
}

fn load_allow_list() -> Vec<Allowed> {
    let path = root().join("conformance/pi-daemon-0.3.3-differences.json");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&path).expect("allow-list")).expect("allow-list JSON");
    let spec = std::fs::read_to_string(root().join("conformance/SPEC.md")).unwrap();
    let mut out = Vec::new();
    for e in v["differences"].as_array().expect("differences array") {
        let clause = e["clause"].as_str().expect("clause").to_string();
        let decision = e["decision"].as_str().expect("decision");
        assert!(!e["reason"].as_str().unwrap_or_default().is_empty(), "{decision}: reason missing");
        assert!(spec.contains(&format!("### {clause} ")), "allow-list names unknown clause {clause}");
        for m in e["match"].as_array().expect("match array") {
            out.push(Allowed { pattern: m.as_str().unwrap().to_string(), clause: clause.clone(), hits: 0 });
        }
    }
    out
}

#[test]
fn contract_agrees_with_pi_daemon_0_3_3_validators() {
    let (Ok(dist), Ok(node)) = (std::env::var("PI_DAEMON_DIST"), std::env::var("PI_DAEMON_NODE")) else {
        println!("skipped: set PI_DAEMON_DIST (Pi Daemon 0.3.3's built dist/) and PI_DAEMON_NODE (node 22) to run");
        return;
    };
    let corpus = build_corpus();
    let docs = &corpus.docs;
    let script = root().join("scripts/differential/pi-daemon-verdicts.mjs");
    let theirs = theirs(Path::new(&node), &script, &dist, docs);
    let mut allow = load_allow_list();

    let mut per_kind: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    let (mut code_total, mut code_agree) = (0usize, 0usize);
    let mut verdict_agree = 0usize;
    let mut field_diffs = Vec::new();
    let mut differences = Vec::new();
    let mut unexplained = Vec::new();
    for (d, t) in docs.iter().zip(&theirs) {
        let o = ours(d);
        let k = per_kind.entry(kind_name(d.kind)).or_default();
        k.0 += 1;
        let verdict_same = o.valid == t.valid;
        if verdict_same {
            verdict_agree += 1;
            k.1 += 1;
        }
        let compare_code = matches!(d.kind, Kind::Command | Kind::Descriptor);
        let mut differs = !verdict_same;
        if compare_code {
            code_total += 1;
            let same = o.valid == t.valid && (o.valid || o.code == t.code);
            if same {
                code_agree += 1;
            } else {
                differs = true;
            }
            // Fields are compared by their last dotted segment, and only reported.
            let last = |f: &str| f.rsplit('.').next().unwrap_or_default().to_string();
            if same && !o.valid && !t.field.is_empty() && last(&o.field) != last(&t.field) {
                field_diffs.push(format!("{}  ours={o}  0.3.3={t}", d.desc));
            }
        }
        if differs {
            let line = format!("{}  ours={o}  0.3.3={t}", d.desc);
            match allow.iter_mut().find(|a| glob(&a.pattern, &d.desc)) {
                Some(a) => {
                    a.hits += 1;
                    differences.push(format!("{line}  [{}]", a.clause));
                }
                None => {
                    differences.push(format!("{line}  [NOT ALLOWED]"));
                    unexplained.push(line);
                }
            }
        }
    }
    let pct = |a: usize, b: usize| if b == 0 { 100.0 } else { 100.0 * a as f64 / b as f64 };
    let verdict_pct = pct(verdict_agree, docs.len());
    let code_pct = pct(code_agree, code_total);
    println!("differential check against Pi Daemon 0.3.3's validators");
    println!("documents: {}", docs.len());
    for (k, (n, a)) in &per_kind {
        println!("  {k}: {n} documents, verdict agreement {:.2}%", pct(*a, *n));
    }
    println!("verdict agreement: {verdict_agree}/{} = {verdict_pct:.2}%", docs.len());
    println!("code agreement (commands + descriptors): {code_agree}/{code_total} = {code_pct:.2}%");
    println!("same code, different field (last segment; informative), commands + descriptors: {}", field_diffs.len());
    for l in &field_diffs {
        println!("  {l}");
    }
    println!("differences: {} ({} not in the allow-list)", differences.len(), unexplained.len());
    for l in &differences {
        println!("  {l}");
    }
    let stale: Vec<&str> = allow.iter().filter(|a| a.hits == 0).map(|a| a.pattern.as_str()).collect();
    for s in &stale {
        println!("  stale allow-list entry (matches no difference): {s}");
    }
    assert!(verdict_pct >= MIN_VERDICT_AGREEMENT, "verdict agreement {verdict_pct:.2}% < {MIN_VERDICT_AGREEMENT}%");
    assert!(code_pct >= MIN_CODE_AGREEMENT, "code agreement {code_pct:.2}% < {MIN_CODE_AGREEMENT}%");
    assert!(unexplained.is_empty(), "{} differences not in the allow-list", unexplained.len());
    assert!(stale.is_empty(), "{} stale allow-list entries", stale.len());
}

#[test]
fn glob_matches_literally_except_star() {
    assert!(glob("a*c", "abc") && glob("a*", "a") && glob("*", "") && glob("x", "x"));
    assert!(!glob("a*c", "ab") && !glob("a.c", "abc") && !glob("a*b*c", "acb"));
}
