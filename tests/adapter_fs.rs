//! The confined filesystem operations (SPEC §5, §7.2) on real temp directories.
//!
//! Every case runs twice: with `openat2` resolution and with the component-wise `openat`
//! walk (the fallback for kernels without `openat2`), see `in_both_modes!` at the bottom.

use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use pi_conform::adapter::fs::{Cancel, ResolveMode, Root};
use pi_conform::contract::frame::check_result_data;
use pi_conform::contract::types::tool_adapter::ToolOperation;
use pi_conform::contract::{validate_relative_path, AdapterCode, AdapterError, PathSide, ToolPath};
use pi_conform::util::prng::SplitMix64;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tempfile::TempDir;

/// A budget nothing in these tests reaches.
const BIG: usize = 256 << 20;

/// A temp dir holding `root/` (the session root) and `outside/` (with a secret file).
struct Fx {
    _tmp: TempDir,
    dir: PathBuf,
    outside: PathBuf,
    root: Root,
}

fn fx(mode: ResolveMode) -> Option<Fx> {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("root");
    let outside = tmp.path().join("outside");
    std::fs::create_dir(&dir).unwrap();
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), "needle OUTSIDE-SECRET\n").unwrap();
    match Root::open_with(&dir, mode) {
        Ok(root) => {
            assert_ne!(root.resolve_mode(), ResolveMode::Auto);
            Some(Fx { _tmp: tmp, dir, outside, root })
        }
        Err(e) if mode == ResolveMode::Openat2 && e.kind() == std::io::ErrorKind::Unsupported => {
            eprintln!("SKIP: openat2 is unavailable here ({e}); the walk mode covers this case");
            None
        }
        Err(e) => panic!("cannot open the root: {e}"),
    }
}

impl Fx {
    fn path(&self, rel: &str) -> PathBuf {
        self.dir.join(rel)
    }
    fn file(&self, rel: &str, content: impl AsRef<[u8]>) {
        let p = self.path(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }
    fn mkdir(&self, rel: &str) {
        std::fs::create_dir_all(self.path(rel)).unwrap();
    }
    fn link(&self, target: impl AsRef<Path>, rel: &str) {
        symlink(target, self.path(rel)).unwrap();
    }
    fn fifo(&self, rel: &str) {
        mkfifo(&self.path(rel));
    }
    fn read(&self, rel: &str) -> Vec<u8> {
        std::fs::read(self.path(rel)).unwrap()
    }
    /// The names in a directory of the root, sorted (temp files included).
    fn names(&self, rel: &str) -> Vec<String> {
        let mut v: Vec<String> =
            std::fs::read_dir(self.path(rel)).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        v.sort();
        v
    }

    fn list(&self, path: &str) -> Result<Value, AdapterError> {
        self.root.list(&p(path), None, BIG, &Cancel::new())
    }
    fn stat(&self, path: &str) -> Result<Value, AdapterError> {
        self.root.stat(&p(path), BIG, &Cancel::new())
    }
    fn read_at(&self, path: &str, offset: Option<u64>, max: Option<u64>) -> Result<Value, AdapterError> {
        self.root.read(&p(path), offset, max, BIG, &Cancel::new())
    }
    fn search(&self, path: &str, query: &str) -> Result<Value, AdapterError> {
        self.root.search(&p(path), query, None, BIG, &Cancel::new())
    }
    fn write(&self, path: &str, content: &str) -> Result<Value, AdapterError> {
        self.root.write(&p(path), content, None, None, None, BIG, &Cancel::new())
    }
    fn edit(&self, path: &str, edits: &[(&str, &str)], digest: Option<&str>) -> Result<Value, AdapterError> {
        let edits: Vec<(String, String)> = edits.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect();
        self.root.edit(&p(path), &edits, digest, BIG, &Cancel::new())
    }
}

fn mkfifo(path: &Path) {
    rustix::fs::mknodat(rustix::fs::CWD, path, rustix::fs::FileType::Fifo, rustix::fs::Mode::from_raw_mode(0o644), 0)
        .unwrap();
}

fn p(s: &str) -> ToolPath {
    validate_relative_path(s, PathSide::Adapter, "path").unwrap()
}

fn sha(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The data passes the contract's success-shape check for `op`.
#[track_caller]
fn ok(op: ToolOperation, r: Result<Value, AdapterError>) -> Value {
    let v = r.unwrap_or_else(|e| panic!("{op} failed: {e}"));
    check_result_data(op, Some(&v)).unwrap_or_else(|e| panic!("{op} data {v} breaks the contract: {e}"));
    v
}

/// The error code, checking the message is short and content-free.
#[track_caller]
fn code(r: Result<Value, AdapterError>) -> AdapterCode {
    let e = r.expect_err("expected an error");
    assert!(!e.message.is_empty() && e.message.len() <= 128, "{e:?}");
    assert!(!e.message.contains('/') && !e.message.contains("needle") && !e.message.contains("SECRET"), "{e:?}");
    e.code
}

fn len(v: &Value) -> usize {
    serde_json::to_vec(v).unwrap().len()
}

fn names_of(v: &Value) -> Vec<&str> {
    v["entries"].as_array().unwrap().iter().map(|e| e["name"].as_str().unwrap()).collect()
}

fn is_root_user() -> bool {
    rustix::process::geteuid().is_root()
}

// ---------------------------------------------------------------------------------------
// fs.list

fn list_shape_and_bytewise_order(mode: ResolveMode) {
    let Some(f) = fx(mode) else { return };
    for name in ["B", "a", "é", "Z", "a.txt", "a-b"] {
        f.file(name, name);
    }
    f.mkdir("dir/inner");
    f.file("dir/inner/deep.txt", "x");
    f.link("a", "link-inside");
    f.link(&f.outside, "link-outside");
    f.fifo("pipe");
    let v = ok(ToolOperation::FsList, f.list("."));
    assert_eq!(names_of(&v), ["B", "Z", "a", "a-b", "a.txt", "dir", "é"]);
    assert_eq!(v["truncated"], false);
    let a = &v["entries"][2];
    assert_eq!((a["type"].as_str(), a["size"].as_u64()), (Some("file"), Some(1)));
    let d = &v["entries"][5];
    assert_eq!(d["type"], "directory");
    assert!(d.get("size").is_none(), "no size for a directory");
    assert!(d["modifiedAt"].as_str().unwrap().ends_with('Z'));
    assert_eq!(v["entries"][6]["size"], "é".len());
    // Other spellings of the same directories.
    assert_eq!(ok(ToolOperation::FsList, f.list("./")), v);
    let inner = ok(ToolOperation::FsList, f.list("dir/"));
    assert_eq!(names_of(&inner), ["inner"]);
    assert_eq!(names_of(&ok(ToolOperation::FsList, f.list("dir/inner"))), ["deep.txt"]);
}

fn list_limits_and_budget(mode: ResolveMode) {
    let Some(f) = fx(mode) else { return };
    for i in 0..30 {
        f.file(&format!("f{i:02}-\"quoted\"\\{i}"), "x".repeat(i));
    }
    let all = ok(ToolOperation::FsList, f.list("."));
    assert_eq!(all["entries"].as_array().unwrap().len(), 30);
    let cut = ok(ToolOperation::FsList, f.root.list(&p("."), Some(7), BIG, &Cancel::new()));
    assert_eq!(cut["truncated"], true);
    assert_eq!(cut["entries"].as_array().unwrap()[..], all["entries"].as_array().unwrap()[..7]);
    let exact = ok(ToolOperation::FsList, f.root.list(&p("."), Some(30), BIG, &Cancel::new()));
    assert_eq!(exact["truncated"], false);
    // Every budget: never over it, entries a prefix of the full listing, growing with the
    // budget; response_too_large only when not even one entry fits.
    let full = len(&all);
    let one = len(&json!({"entries": [all["entries"][0]], "truncated": true}));
    let mut prev = 0;
    for budget in 0..=full + 2 {
        match f.root.list(&p("."), None, budget, &Cancel::new()) {
            Ok(v) => {
                check_result_data(ToolOperation::FsList, Some(&v)).unwrap();
                assert!(len(&v) <= budget, "budget {budget}");
                let n = v["entries"].as_array().unwrap().len();
                assert_eq!(v["entries"].as_array().unwrap()[..], all["entries"].as_array().unwrap()[..n]);
                assert_eq!(v["truncated"], n < 30);
                assert!(n >= prev);
                prev = n;
            }
            Err(e) => {
                assert_eq!(e.code, AdapterCode::ResponseTooLarge);
                assert!(budget < one, "budget {budget} fits one entry ({one})");
            }
        }
    }
    assert_eq!(prev, 30);
    // An empty directory needs room for the empty result itself.
    f.mkdir("empty");
    assert_eq!(code(f.root.list(&p("empty"), None, 10, &Cancel::new())), AdapterCode::ResponseTooLarge);
    let e = ok(ToolOperation::FsList, f.root.list(&p("empty"), None, 32, &Cancel::new()));
    assert_eq!(e, json!({"entries": [], "truncated": false}));
}

fn list_errors(mode: ResolveMode) {
    let Some(f) = fx(mode) else { return };
    f.file("f.txt", "x");
    f.mkdir("d");
    assert_eq!(code(f.list("missing")), AdapterCode::NotFound);
    assert_eq!(code(f.list("missing/deeper")), AdapterCode::NotFound);
    assert_eq!(code(f.list("f.txt")), AdapterCode::NotADirectory);
    assert_eq!(code(f.list("f.txt/")), AdapterCode::NotADirectory);
    assert_eq!(code(f.list("f.txt/x")), AdapterCode::NotADirectory);
    f.link("d", "ld");
    assert_eq!(code(f.list("ld")), AdapterCode::SymlinkRefused);
    assert_eq!(code(f.list("ld/")), AdapterCode::SymlinkRefused);
    assert_eq!(code(f.root.list(&p("."), Some(0), BIG, &Cancel::new())), AdapterCode::InvalidRequest);
}

// ---------------------------------------------------------------------------------------
// fs.stat

fn stat_shapes_and_errors(mode: ResolveMode) {
    let Some(f) = fx(mode) else { return };
    f.file("d/f.txt", "hello");
    let v = ok(ToolOperation::FsStat, f.stat("d/f.txt"));
    assert_eq!((v["type"].as_str(), v["size"].as_u64()), (Some("file"), Some(5)));
    // Exactly these keys; their order is not significant (SPEC PC-4.1), and the data is
    // built from the generated `FsStatData`, which serializes them alphabetically.
    let mut keys: Vec<&String> = v.as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(keys, ["modifiedAt", "size", "type"]);
    let d = ok(ToolOperation::FsStat, f.stat("d"));
    assert_eq!((d["type"].as_str(), d["size"].as_u64()), (Some("directory"), Some(0)));
    assert_eq!(ok(ToolOperation::FsStat, f.stat("d/")), d);
    let r = ok(ToolOperation::FsStat, f.stat("."));
    assert_eq!((r["type"].as_str(), r["size"].as_u64()), (Some("directory"), Some(0)));
    ok(ToolOperation::FsStat, f.stat("./"));
    assert_eq!(code(f.stat("d/f.txt/")), AdapterCode::NotADirectory);
    assert_eq!(code(f.stat("nope")), AdapterCode::NotFound);
    assert_eq!(code(f.stat("d/f.txt/x")), AdapterCode::NotADirectory);
    f.link("d/f.txt", "l");
    assert_eq!(code(f.stat("l")), AdapterCode::SymlinkRefused);
    f.link("nowhere", "dangling");
    assert_eq!(code(f.stat("dangling")), AdapterCode::SymlinkRefused);
    assert_eq!(code(f.root.stat(&p("d/f.txt"), 20, &Cancel::new())), AdapterCode::ResponseTooLarge);
    let need = len(&v);
    ok(ToolOperation::FsStat, f.root.stat(&p("d/f.txt"), need, &Cancel::new()));
    assert_eq!(code(f.root.stat(&p("d/f.txt"), need - 1, &Cancel::new())), AdapterCode::ResponseTooLarge);
}

// ---------------------------------------------------------------------------------------
// fs.read

fn read_windows(mode: ResolveMode) {
    let Some(f) = fx(mode) else { return };
    let text = "export const PROTOCOL_VERSION = \"1.0\";\n";
    f.file("src/protocol.ts", text);
    let v = ok(ToolOperation::FsRead, f.read_at("src/protocol.ts", Some(0), Some(4096)));
    assert_eq!(v, json!({"content": text, "bytesRead": 39, "eof": true}));
    let v = ok(ToolOperation::FsRead, f.read_at("src/protocol.ts", None, None));
    assert_eq!(v["bytesRead"], 39);
    let v = ok(ToolOperation::FsRead, f.read_at("src/protocol.ts", Some(7), Some(5)));
    assert_eq!(v, json!({"content": "const", "bytesRead": 5, "eof": false}));
    for off in [39, 40, 1 << 40] {
        let v = ok(ToolOperation::FsRead, f.read_at("src/protocol.ts", Some(off), Some(10)));
        assert_eq!(v, json!({"content": "", "bytesRead": 0, "eof": true}), "offset {off}");
    }
    f.file("empty", "");
    assert_eq!(ok(ToolOperation::FsRead, f.read_at("empty", None, None))["eof"], true);
    // A window ending inside a multi-byte character is shortened to the boundary, and
    // offset + bytesRead continues: reading in windows reassembles the file.
    let multi = "aé€😀\r\nz\u{0}\u{1f}\"\\ end 😀";
    f.file("m.txt", multi);
    let v = ok(ToolOperation::FsRead, f.read_at("m.txt", Some(0), Some(5)));
    assert_eq!(v, json!({"content": "aé", "bytesRead": 3, "eof": false}));
    for max in 4..=9u64 {
        let (mut off, mut got) = (0u64, String::new());
        loop {
            let v = ok(ToolOperation::FsRead, f.read_at("m.txt", Some(off), Some(max)));
            got.push_str(v["content"].as_str().unwrap());
            off += v["bytesRead"].as_u64().unwrap();
            if v["eof"] == true {
                break;
            }
        }
        assert_eq!(got, multi, "maxBytes {max}");
    }
    // maxBytes smaller than the next character: nothing, but not the end.
    let v = ok(ToolOperation::FsRead, f.read_at("m.txt", Some(6), Some(3)));
    assert_eq!(v, json!({"content": "", "bytesRead": 0, "eof": false}));
    assert_eq!(code(f.read_at("m.txt", None, Some(0))), AdapterCode::InvalidRequest);
    assert_eq!(code(f.read_at("m.txt", None, Some(4 * 1024 * 1024 + 1))), AdapterCode::InvalidRequest);
}

fn read_utf8_rules(mode: ResolveMode) {
    let Some(f) = fx(mode) else { return };
    f.file("m.txt", "aé€");
    // Offsets 2 (inside é), 4 and 5 (inside €).
    for off in [2, 4, 5] {
        assert_eq!(code(f.read_at("m.txt", Some(off), None)), AdapterCode::InvalidOffset, "offset {off}");
    }
    f.file("bad.bin", b"ok\xff\xfeok".as_slice());
    assert_eq!(code(f.read_at("bad.bin", None, None)), AdapterCode::NotUtf8);
    // Invalid bytes beyond the window do not matter.
    let v = ok(ToolOperation::FsRead, f.read_at("bad.bin", Some(0), Some(2)));
    assert_eq!(v, json!({"content": "ok", "bytesRead": 2, "eof": false}));
    assert_eq!(code(f.read_at("bad.bin", Some(3), None)), AdapterCode::NotUtf8);
    // A stray continuation byte at the offset is not inside a character: not_utf8.
    f.file("stray.bin", b"ok\x80ok".as_slice());
    assert_eq!(code(f.read_at("stray.bin", Some(2), None)), AdapterCode::NotUtf8);
    let v = ok(ToolOperation::FsRead, f.read_at("bad.bin", Some(4), None));
    assert_eq!(v, json!({"content": "ok", "bytesRead": 2, "eof": true}));
    // A lead byte followed by a non-continuation byte, and a character cut by the end of file.
    f.file("broken.txt", b"ab\xe2\x82Acd".as_slice());
    assert_eq!(code(f.read_at("broken.txt", Some(0), Some(3))), AdapterCode::NotUtf8);
    assert_eq!(ok(ToolOperation::FsRead, f.read_at("broken.txt", Some(0), Some(2)))["content"], "ab");
    f.file("cut.txt", b"ab\xe2\x82".as_slice());
    assert_eq!(code(f.read_at("cut.txt", None, None)), AdapterCode::NotUtf8);
    assert_eq!(code(f.read_at("cut.txt", Some(1), Some(2))), AdapterCode::NotUtf8);
    f.file("nul.txt", "a\u{0}b");
    assert_eq!(ok(ToolOperation::FsRead, f.read_at("nul.txt", None, None))["content"], "a\u{0}b");
}

fn read_budget_property(mode: ResolveMode) {
    let Some(f) = fx(mode) else { return };
    let content = "q\"\\\u{1}\t\né€😀 plain\u{7f}\r";
    f.file("c.txt", content);
    let full = ok(ToolOperation::FsRead, f.read_at("c.txt", None, None));
    assert_eq!(full["content"], content);
    let first = len(&json!({"content": "q", "bytesRead": 1, "eof": false}));
    let mut prev = 0;
    for budget in 0..=len(&full) + 2 {
        match f.root.read(&p("c.txt"), None, None, budget, &Cancel::new()) {
            Ok(v) => {
                check_result_data(ToolOperation::FsRead, Some(&v)).unwrap();
                assert!(len(&v) <= budget, "budget {budget}: {v}");
                let got = v["content"].as_str().unwrap();
                assert!(content.starts_with(got));
                assert_eq!(v["bytesRead"].as_u64().unwrap() as usize, got.len());
                assert_eq!(v["eof"], got.len() == content.len());
                assert!(got.len() >= prev);
                prev = got.len();
            }
            Err(e) => {
                assert_eq!(e.code, AdapterCode::ResponseTooLarge);
                assert!(budget < first);
            }
        }
    }
    assert_eq!(prev, content.len());
    // At or past the end the (empty) result still needs its room.
    let eof = len(&json!({"content": "", "bytesRead": 0, "eof": true}));
    assert_eq!(code(f.root.read(&p("c.txt"), Some(999), None, eof - 1, &Cancel::new())), AdapterCode::ResponseTooLarge);
    ok(ToolOperation::FsRead, f.root.read(&p("c.txt"), Some(999), None, eof, &Cancel::new()));
}

fn read_large_file_window(mode: ResolveMode) {
    let Some(f) = fx(mode) else { return };
    let line = "0123456789abcdef€\n"; // 20 bytes
    let big = line.repeat(600_000); // 12 MB, larger than the largest window
    f.file("big.txt", &big);
    // 4098 bytes from a line start end inside the `€` at line offset 16..19.
    let v = ok(ToolOperation::FsRead, f.read_at("big.txt", Some(5_000_000), Some(4098)));
    assert_eq!(v["bytesRead"], 4096);
    assert_eq!(v["content"], big[5_000_000..5_004_096]);
    let v = ok(ToolOperation::FsRead, f.read_at("big.txt", None, None));
    assert_eq!(v["bytesRead"].as_u64().unwrap(), 4 * 1024 * 1024);
    assert_eq!(v["eof"], false);
    let last = ok(ToolOperation::FsRead, f.read_at("big.txt", Some(big.len() as u64 - 20), None));
    assert_eq!(last, json!({"content": line, "bytesRead": 20, "eof": true}));
}

fn read_type_errors(mode: ResolveMode) {
    let Some(f) = fx(mode) else { return };
    f.file("d/f.txt", "x");
    assert_eq!(code(f.read_at("d", None, None)), AdapterCode::NotAFile);
    assert_eq!(code(f.read_at(".", None, None)), AdapterCode::NotAFile);
    assert_eq!(code(f.read_at("d/f.txt/", None, None)), AdapterCode::NotADirectory);
    assert_eq!(code(f.read_at("d/nope", None, None)), AdapterCode::NotFound);
}

// ---------------------------------------------------------------------------------------
// fs.search

fn matches_of(v: &Value) -> Vec<(String, u64, u64, String)> {
    v["matches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["path"].as_str().unwrap().to_string(),
                m["line"].as_u64().unwrap(),
                m["column"].as_u64().unwrap(),
                m["text"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn m(path: &str, line: u64, column: u64, text: &str) -> (String, u64, u64, String) {
    (path.to_string(), line, column, text.to_string())
}

fn search_basics(mode: ResolveMode) {
    let Some(f) = fx(mode) else { return };
    f.file("a.txt", "first needle\r\nééé needle needle\r\nnone\nneedle");
    f.file("a/b.txt", "needle in a/\n");
    f.file("a-c.txt", "xneedlex");
    f.file("B.txt", "needle B");
    f.file("overlap.txt", "aaaa\n");
    let v = ok(ToolOperation::FsSearch, f.search(".", "needle"));
    assert_eq!(v["truncated"], false);
    assert_eq!(
        matches_of(&v),
        [
            m("B.txt", 1, 1, "needle B"),
            m("a-c.txt", 1, 2, "xneedlex"),
            m("a.txt", 1, 7, "first needle"),
            m("a.txt", 2, 5, "ééé needle needle"),
            m("a.txt", 2, 12, "ééé needle needle"),
            m("a.txt", 4, 1, "needle"),
            m("a/b.txt", 1, 1, "needle in a/"),
        ]
    );
    // Non-overlapping, left to right.
    let v = ok(ToolOperation::FsSearch, f.search("overlap.txt", "aa"));
    assert_eq!(matches_of(&v), [m("overlap.txt", 1, 1, "aaaa"), m("overlap.txt", 1, 3, "aaaa")]);
    // A directory below the root gives root-relative paths; so does a named file.
    let v = ok(ToolOperation::FsSearch, f.search("a/", "needle"));
    assert_eq!(matches_of(&v), [m("a/b.txt", 1, 1, "needle in a/")]);
    let v = ok(ToolOperation::FsSearch, f.search("a/b.txt", "in a"));
    assert_eq!(matches_of(&v), [m("a/b.txt", 1, 8, "needle in a/")]);
    // Case-sensitive, multi-byte queries, no match.
    assert_eq!(matches_of(&ok(ToolOperation::FsSearch, f.search(".", "NEEDLE"))), []);
    let v = ok(ToolOperation::FsSearch, f.search("a.txt", "é n"));
    assert_eq!(matches_of(&v), [m("a.txt", 2, 3, "ééé needle needle")]);
    // Errors.
    assert_eq!(code(f.search(".", "a\rb")), AdapterCode::InvalidRequest);
    assert_eq!(code(f.search(".", "a\nb")), AdapterCode::InvalidRequest);
    assert_eq!(code(f.search(".", "")), AdapterCode::InvalidRequest);
    assert_eq!(code(f.search("a.txt/", "x")), AdapterCode::NotADirectory);
    assert_eq!(code(f.search("nope", "x")), AdapterCode::NotFound);
    assert_eq!(code(f.root.search(&p("."), "x", Some(0), BIG, &Cancel::new())), AdapterCode::InvalidRequest);
}

fn search_skips_binary(mode: ResolveMode) {
    let Some(f) = fx(mode) else { return };
    f.file("bin/latin1.txt", b"needle caf\xe9\n".as_slice());
    f.file("bin/nul.txt", b"needle\0\n".as_slice());
    f.file("bin/cut.txt", b"needle \xe2\x82".as_slice());
    // Invalid bytes far after the match, past the first chunk: the file is still skipped.
    let mut late = b"needle early\n".to_vec();
    late.extend(std::iter::repeat_n(b'x', 700_000));
    late.extend(b"\xff");
    f.file("bin/late.txt", &late);
    let mut late_nul = b"needle early\n".to_vec();
    late_nul.extend(std::iter::repeat_n(b'y', 300_000));
    late_nul.push(0);
    f.file("bin/late-nul.txt", &late_nul);
    f.file("bin/ok.txt", "needle ok");
    let v = ok(ToolOperation::FsSearch, f.search(".", "needle"));
    assert_eq!(matches_of(&v), [m("bin/ok.txt", 1, 1, "needle ok")]);
    for named in ["bin/latin1.txt", "bin/nul.txt", "bin/cut.txt", "bin/late.txt", "bin/late-nul.txt"] {
        let v = ok(ToolOperation::FsSearch, f.search(named, "needle"));
        assert_eq!(v, json!({"matches": [], "truncated": false}), "{named}");
    }
}

/// The window rule, computed naively over the line's characters: a line of at most 4096 UTF-16
/// units whole; else whole characters, at most 1024 units before the match, then forward
/// while the window holds 4096 units, then back again if the line ended first.
fn window(line: &str, col: usize) -> String {
    let chars: Vec<char> = line.chars().collect();
    let units = |c: &char| c.len_utf16();
    if chars.iter().map(units).sum::<usize>() <= 4096 {
        return line.to_string();
    }
    let (mut start, mut end, mut used) = (col - 1, col - 1, 0);
    while start > 0 && used + units(&chars[start - 1]) <= 1024 {
        start -= 1;
        used += units(&chars[start]);
    }
    while end < chars.len() && used + units(&chars[end]) <= 4096 {
        used += units(&chars[end]);
        end += 1;
    }
    if end == chars.len() {
        while start > 0 && used + units(&chars[start - 1]) <= 4096 {
            start -= 1;
            used += units(&chars[start]);
        }
    }
    chars[start..end].iter().collect()
}

fn search_long_line_window(mode: ResolveMode) {
    let Some(f) = fx(mode) else { return };
    // 10000 characters, mixed widths, with markers at known character positions.
    let mut chars: Vec<char> = (0..10_000).map(|i| ['a', 'é', '€', '😀'][i % 4]).collect();
    for (at, c) in [(9, 'X'), (2000, 'X'), (5000, 'X'), (9000, 'X'), (9999, 'X')] {
        chars[at] = c;
    }
    let line: String = chars.iter().collect();
    f.file("long.txt", format!("short X\n{line}\r\nend X"));
    let v = ok(ToolOperation::FsSearch, f.search("long.txt", "X"));
    let got = matches_of(&v);
    assert_eq!(got.len(), 7);
    assert_eq!(got[0], m("long.txt", 1, 7, "short X"));
    assert_eq!(got[6], m("long.txt", 3, 5, "end X"));
    for (g, at) in got[1..6].iter().zip([9usize, 2000, 5000, 9000, 9999]) {
        assert_eq!((g.1, g.2), (2, at as u64 + 1));
        // At most 4096 UTF-16 units (Pi Daemon 0.3.3 counts JavaScript length), and at most
        // one unit short of it (a surrogate pair that does not fit).
        let units = g.3.encode_utf16().count();
        assert!((4095..=4096).contains(&units), "match at {at}: {units} units");
        assert_eq!(g.3, window(&line, at + 1), "match at {at}");
    }
    // Near the start the window starts at the line start; near the end it ends there.
    assert!(line.starts_with(&got[1].3));
    assert!(line.ends_with(&got[5].3));
    // In the middle it starts at most 1024 units before the match.
    let before = &got[3].3[..got[3].3.find('X').unwrap()];
    assert!((1021..=1024).contains(&before.encode_utf16().count()), "{}", before.encode_utf16().count());
    // A line of exactly 4096 characters is returned whole.
    let exact: String = "é".repeat(4095) + "X";
    f.file("exact.txt", &exact);
    let v = ok(ToolOperation::FsSearch, f.search("exact.txt", "X"));
    assert_eq!(matches_of(&v), [m("exact.txt", 1, 4096, &exact)]);
}

/// Every match of `query` in `content`, computed naively line by line.
fn naive(path: &str, content: &str, query: &str) -> Vec<(String, u64, u64, String)> {
    let mut out = Vec::new();
    for (i, raw) in content.split('\n').enumerate() {
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        for (b, _) in line.match_indices(query) {
            let col = line[..b].chars().count() + 1;
            out.push(m(path, i as u64 + 1, col as u64, &window(line, col)));
        }
    }
    out
}

fn search_streaming_matches_naive(mode: ResolveMode) {
    let Some(f) = fx(mode) else { return };
    let pieces = ["a", "b", "ab", "é", "€", "😀", " ", "\n", "\r\n", "needle", "nee", "dle", "é€", "\r"];
    let long_query = "ab€".repeat(100);
    for (seed, query) in [(1u64, "needle"), (2, "é€"), (3, "aa"), (4, long_query.as_str()), (5, "😀 ")] {
        let mut rng = SplitMix64::new(seed);
        let mut content = String::new();
        while content.len() < 700_000 {
            match rng.index(400) {
                // Now and then a long line (window rule) or the long query itself.
                0 => content.extend(std::iter::repeat_n('é', 3000 + rng.index(6000))),
                1 => content.push_str(&long_query),
                _ => content.push_str(pieces[rng.index(pieces.len())]),
            }
        }
        let name = format!("gen{seed}.txt");
        f.file(&name, &content);
        let want = naive(&name, &content, query);
        let v = ok(ToolOperation::FsSearch, f.root.search(&p(&name), query, Some(10_000), BIG, &Cancel::new()));
        let got = matches_of(&v);
        assert!(!want.is_empty(), "seed {seed}");
        let n = want.len().min(10_000);
        assert_eq!(got.len(), n, "seed {seed}");
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g, w, "seed {seed}, match {i}");
        }
        assert_eq!(v["truncated"], want.len() > 10_000);
    }
}

/// Occurrences, characters, CRLFs and invalid bytes placed across the 256 KiB read chunks.
fn search_chunk_boundaries(mode: ResolveMode) {
    let Some(f) = fx(mode) else { return };
    const CHUNK: usize = 256 * 1024;
    for shift in [0usize, 1, 2, 3, 5, 6] {
        // `shift` bytes of "needle" fall before the boundary; odd shifts also put an `é`
        // across it on the line before.
        let mut content = String::new();
        while content.len() < CHUNK - 40 {
            content.push_str("line é\r\n");
        }
        while content.len() + shift + 1 < CHUNK {
            content.push('x');
        }
        content.push('\n');
        let at = content.len();
        content.insert_str(at - 1, if shift % 2 == 1 { "é" } else { "" });
        while content.len() < CHUNK - shift {
            content.push('y');
        }
        content.push_str("needle\r\nafter needle");
        let name = format!("b{shift}.txt");
        f.file(&name, &content);
        let v = ok(ToolOperation::FsSearch, f.search(&name, "needle"));
        assert_eq!(matches_of(&v), naive(&name, &content, "needle"), "shift {shift}");
        assert_eq!(v["matches"].as_array().unwrap().len(), 2);
        // The same file with a bad byte right after the boundary is skipped in a tree.
        let mut bad = content.clone().into_bytes();
        bad.insert(CHUNK + 1, 0xff);
        f.file(&format!("bad/{name}"), &bad);
        assert_eq!(ok(ToolOperation::FsSearch, f.search("bad", "needle"))["matches"], json!([]));
    }
}

fn search_limits_and_budget(mode: ResolveMode) {
    let Some(f) = fx(mode) else { return };
    for i in 0..12 {
        f.file(&format!("f{i:02}.txt"), format!("needle \"{i}\"\\\nneedle again\n"));
    }
    let all = ok(ToolOperation::FsSearch, f.search(".", "needle"));
    assert_eq!(all["matches"].as_array().unwrap().len(), 24);
    let cut = ok(ToolOperation::FsSearch, f.root.search(&p("."), "needle", Some(5), BIG, &Cancel::new()));
    assert_eq!(cut["truncated"], true);
    assert_eq!(cut["matches"].as_array().unwrap()[..], all["matches"].as_array().unwrap()[..5]);
    let exact = ok(ToolOperation::FsSearch, f.root.search(&p("."), "needle", Some(24), BIG, &Cancel::new()));
    assert_eq!(exact["truncated"], false);
    let one = ok(ToolOperation::FsSearch, f.root.search(&p("f00.txt"), "again", Some(1), BIG, &Cancel::new()));
    assert_eq!(one["truncated"], false, "exactly one match and maxResults 1");
    let first = len(&json!({"matches": [all["matches"][0]], "truncated": true}));
    let mut prev = 0;
    for budget in 0..=len(&all) + 2 {
        match f.root.search(&p("."), "needle", None, budget, &Cancel::new()) {
            Ok(v) => {
                check_result_data(ToolOperation::FsSearch, Some(&v)).unwrap();
                assert!(len(&v) <= budget);
                let n = v["matches"].as_array().unwrap().len();
                assert_eq!(v["matches"].as_array().unwrap()[..], all["matches"].as_array().unwrap()[..n]);
                assert_eq!(v["truncated"], n < 24);
                assert!(n >= prev);
                prev = n;
            }
            Err(e) => {
                assert_eq!(e.code, AdapterCode::ResponseTooLarge);
                assert!(budget < first);
            }
        }
    }
    assert_eq!(prev, 24);
    let none = ok(ToolOperation::FsSearch, f.root.search(&p("."), "absent", None, 32, &Cancel::new()));
    assert_eq!(none, json!({"matches": [], "truncated": false}));
    assert_eq!(code(f.root.search(&p("."), "absent", None, 31, &Cancel::new())), AdapterCode::ResponseTooLarge);
}

fn search_does_not_follow_symlinks(mode: ResolveMode) {
    let Some(f) = fx(mode) else { return };
    f.file("real/in.txt", "needle inside\n");
    f.link("real", "alias-dir");
    f.link("real/in.txt", "alias-file");
    f.link(&f.outside, "escape-dir");
    f.link(f.outside.join("secret.txt"), "escape-file");
    f.fifo("real/pipe");
    let v = ok(ToolOperation::FsSearch, f.search(".", "needle"));
    assert_eq!(matches_of(&v), [m("real/in.txt", 1, 1, "needle inside")]);
    assert_eq!(code(f.search("alias-dir", "needle")), AdapterCode::SymlinkRefused);
    assert_eq!(code(f.search("escape-dir/", "needle")), AdapterCode::SymlinkRefused);
    assert_eq!(code(f.search("escape-dir/secret.txt", "needle")), AdapterCode::SymlinkRefused);
    assert_eq!(code(f.search("escape-file", "needle")), AdapterCode::SymlinkRefused);
    assert_eq!(code(f.search("real/pipe", "needle")), AdapterCode::UnsupportedFileType);
}

// ---------------------------------------------------------------------------------------
// fs.write

fn write_create_and_overwrite(mode: ResolveMode) {
    let Some(f) = fx(mode) else { return };
    f.mkdir("d");
    let v = ok(ToolOperation::FsWrite, f.write("d/new.txt", "héllo\n"));
    assert_eq!(v, json!({"created": true, "bytesWritten": 7, "digest": sha("héllo\n".as_bytes())}));
    assert_eq!(f.read("d/new.txt"), "héllo\n".as_bytes());
    let mode_bits = std::fs::metadata(f.path("d/new.txt")).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode_bits, 0o644);
    // Overwrite keeps the permission bits.
    std::fs::set_permissions(f.path("d/new.txt"), std::fs::Permissions::from_mode(0o600)).unwrap();
    let v = ok(ToolOperation::FsWrite, f.write("d/new.txt", ""));
    assert_eq!(v, json!({"created": false, "bytesWritten": 0, "digest": sha(b"")}));
    assert_eq!(std::fs::metadata(f.path("d/new.txt")).unwrap().permissions().mode() & 0o7777, 0o600);
    std::fs::set_permissions(f.path("d/new.txt"), std::fs::Permissions::from_mode(0o755)).unwrap();
    ok(ToolOperation::FsWrite, f.write("d/new.txt", "x"));
    assert_eq!(std::fs::metadata(f.path("d/new.txt")).unwrap().permissions().mode() & 0o7777, 0o755);
    // Flags.
    let w = |path: &str, create, overwrite| f.root.write(&p(path), "z", create, overwrite, None, BIG, &Cancel::new());
    assert_eq!(code(w("d/other.txt", Some(false), None)), AdapterCode::NotFound);
    assert_eq!(code(w("d/new.txt", None, Some(false))), AdapterCode::AlreadyExists);
    assert_eq!(f.read("d/new.txt"), b"x");
    assert_eq!(ok(ToolOperation::FsWrite, w("d/new.txt", Some(false), Some(true)))["created"], false);
    assert_eq!(ok(ToolOperation::FsWrite, w("d/third.txt", Some(true), Some(false)))["created"], true);
    ok(ToolOperation::FsWrite, f.write("top.txt", "root level"));
    assert_eq!(f.read("top.txt"), b"root level");
    // No temp file is ever left behind.
    assert_eq!(f.names("d"), ["new.txt", "third.txt"]);
    assert_eq!(f.names("."), ["d", "top.txt"]);
    // The budget is judged before any side effect.
    assert_eq!(
        code(f.root.write(&p("d/budget.txt"), "x", None, None, None, 40, &Cancel::new())),
        AdapterCode::ResponseTooLarge
    );
    assert!(!f.path("d/budget.txt").exists());
}

fn write_errors(mode: ResolveMode) {
    let Some(f) = fx(mode) else { return };
    f.file("d/f.txt", "keep");
    f.mkdir("d/sub");
    assert_eq!(code(f.write("missing/f.txt", "x")), AdapterCode::NotFound);
    assert_eq!(code(f.write("d/f.txt/x", "x")), AdapterCode::NotADirectory);
    assert_eq!(code(f.write("d/sub", "x")), AdapterCode::NotAFile);
    assert_eq!(code(f.write("d/sub/", "x")), AdapterCode::NotAFile);
    assert_eq!(code(f.write(".", "x")), AdapterCode::NotAFile);
    assert_eq!(code(f.write("./", "x")), AdapterCode::NotAFile);
    assert_eq!(code(f.write("d/f.txt/", "x")), AdapterCode::NotADirectory);
    assert_eq!(code(f.write("d/new/", "x")), AdapterCode::NotADirectory);
    f.fifo("d/pipe");
    assert_eq!(code(f.write("d/pipe", "x")), AdapterCode::UnsupportedFileType);
    assert_eq!(f.read("d/f.txt"), b"keep");
    assert_eq!(f.names("d"), ["f.txt", "pipe", "sub"]);
    assert_eq!(
        code(f.root.write(&p("d/f.txt"), "x", None, None, Some("ABC"), BIG, &Cancel::new())),
        AdapterCode::InvalidRequest
    );
}

fn write_expected_digest(mode: ResolveMode) {
    let Some(f) = fx(mode) else { return };
    f.file("f.txt", "v1");
    let wd = |content: &str, d: &str| f.root.write(&p("f.txt"), content, None, None, Some(d), BIG, &Cancel::new());
    assert_eq!(code(wd("v2", &sha(b"other"))), AdapterCode::DigestMismatch);
    assert_eq!(f.read("f.txt"), b"v1");
    let v = ok(ToolOperation::FsWrite, wd("v2", &sha(b"v1")));
    assert_eq!(v["digest"], sha(b"v2"));
    assert_eq!(code(wd("v3", &sha(b"v1"))), AdapterCode::DigestMismatch);
    let missing = f.root.write(&p("nope.txt"), "x", None, None, Some(&sha(b"")), BIG, &Cancel::new());
    assert_eq!(code(missing), AdapterCode::NotFound);
    assert!(!f.path("nope.txt").exists());
    // Two writers with the same expectedDigest: exactly one wins, every round.
    for round in 0..40 {
        let base = format!("base {round}");
        std::fs::write(f.path("f.txt"), &base).unwrap();
        let d = sha(base.as_bytes());
        let barrier = Barrier::new(2);
        let results: Vec<Result<Value, AdapterError>> = std::thread::scope(|s| {
            let hs: Vec<_> = ["A", "B"]
                .into_iter()
                .map(|w| {
                    let (f, d, barrier) = (&f, &d, &barrier);
                    s.spawn(move || {
                        barrier.wait();
                        f.root.write(&p("f.txt"), w, None, None, Some(d), BIG, &Cancel::new())
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let wins: Vec<usize> = (0..2).filter(|i| results[*i].is_ok()).collect();
        assert_eq!(wins.len(), 1, "round {round}: {results:?}");
        let loser = &results[1 - wins[0]];
        assert_eq!(loser.as_ref().unwrap_err().code, AdapterCode::DigestMismatch);
        assert_eq!(f.read("f.txt"), ["A", "B"][wins[0]].as_bytes());
    }
    assert_eq!(f.names("."), ["f.txt"]);
}

// ---------------------------------------------------------------------------------------
// fs.edit

fn edit_semantics(mode: ResolveMode) {
    let Some(f) = fx(mode) else { return };
    f.file("e.txt", "alpha beta gamma\nδέλτα\n");
    std::fs::set_permissions(f.path("e.txt"), std::fs::Permissions::from_mode(0o640)).unwrap();
    let d0 = sha(&f.read("e.txt"));
    // Edits apply in order, each on the previous result.
    let v = ok(
        ToolOperation::FsEdit,
        f.edit("e.txt", &[("beta", "BETA beta"), ("BETA beta gamma", "x"), ("δέ", "")], Some(&d0)),
    );
    let want = "alpha x\nλτα\n";
    assert_eq!(v, json!({"replacements": 3, "digest": sha(want.as_bytes())}));
    assert_eq!(f.read("e.txt"), want.as_bytes());
    assert_eq!(std::fs::metadata(f.path("e.txt")).unwrap().permissions().mode() & 0o7777, 0o640);
    // Overlapping occurrences count; the failing edit is named, nothing is written.
    f.file("o.txt", "aaa b");
    let e = f.edit("o.txt", &[("b", "c"), ("aa", "x")], None).unwrap_err();
    assert_eq!((e.code, e.message.as_str()), (AdapterCode::EditAmbiguous, "edit 2: oldText occurs more than once"));
    let e = f.edit("o.txt", &[("b", "c"), ("zz", "x")], None).unwrap_err();
    assert_eq!((e.code, e.message.as_str()), (AdapterCode::EditNotFound, "edit 2: oldText not found"));
    let e = f.edit("o.txt", &[("b", "c"), ("c", "d"), ("b", "e")], None).unwrap_err();
    assert_eq!((e.code, e.message.as_str()), (AdapterCode::EditNotFound, "edit 3: oldText not found"));
    assert_eq!(f.read("o.txt"), b"aaa b");
    let e = f.edit("o.txt", &[("a b", "ab")], Some(&sha(b"x"))).unwrap_err();
    assert_eq!(e.code, AdapterCode::DigestMismatch);
    assert_eq!(f.read("o.txt"), b"aaa b");
    let v = ok(ToolOperation::FsEdit, f.edit("o.txt", &[("a b", "ab")], Some(&sha(b"aaa b"))));
    assert_eq!(v["digest"], sha(b"aaab"));
    assert_eq!(f.names("."), ["e.txt", "o.txt"]);
}

fn edit_errors(mode: ResolveMode) {
    let Some(f) = fx(mode) else { return };
    f.file("bin.txt", b"ab\xff".as_slice());
    f.mkdir("d");
    assert_eq!(code(f.edit("bin.txt", &[("ab", "x")], None)), AdapterCode::NotUtf8);
    assert_eq!(f.read("bin.txt"), b"ab\xff");
    assert_eq!(code(f.edit("nope.txt", &[("a", "b")], None)), AdapterCode::NotFound);
    assert_eq!(code(f.edit("nope.txt", &[("a", "b")], Some(&sha(b"")))), AdapterCode::NotFound);
    assert_eq!(code(f.edit("d", &[("a", "b")], None)), AdapterCode::NotAFile);
    assert_eq!(code(f.edit(".", &[("a", "b")], None)), AdapterCode::NotAFile);
    assert_eq!(code(f.edit("bin.txt/", &[("a", "b")], None)), AdapterCode::NotADirectory);
    assert_eq!(code(f.edit("bin.txt", &[], None)), AdapterCode::InvalidRequest);
    assert_eq!(code(f.edit("bin.txt", &[("", "b")], None)), AdapterCode::InvalidRequest);
    f.file("t.txt", "text");
    let edits = vec![("text".to_string(), "new".to_string())];
    assert_eq!(code(f.root.edit(&p("t.txt"), &edits, None, 20, &Cancel::new())), AdapterCode::ResponseTooLarge);
    assert_eq!(f.read("t.txt"), b"text");
}

// ---------------------------------------------------------------------------------------
// Confinement

fn symlink_in_every_position(mode: ResolveMode) {
    let Some(f) = fx(mode) else { return };
    f.file("real/sub/f.txt", "needle real\n");
    // First, middle and last components; links to inside and to outside the root.
    f.link("real", "in-first");
    f.link(&f.outside, "out-first");
    f.link("sub", "real/in-mid");
    f.link(&f.outside, "real/out-mid");
    f.link("f.txt", "real/sub/in-last");
    f.link(f.outside.join("secret.txt"), "real/sub/out-last");
    f.link("../outside", "rel-escape");
    let paths = [
        "in-first/sub/f.txt",
        "out-first/secret.txt",
        "real/in-mid/f.txt",
        "real/out-mid/secret.txt",
        "real/sub/in-last",
        "real/sub/out-last",
        "rel-escape/secret.txt",
        "in-first",
        "out-first/",
    ];
    let secret = f.outside.join("secret.txt");
    let before = std::fs::read(&secret).unwrap();
    for path in paths {
        let what = |op: &str| format!("{op} {path}");
        assert_eq!(code(f.list(path)), AdapterCode::SymlinkRefused, "{}", what("list"));
        assert_eq!(code(f.stat(path)), AdapterCode::SymlinkRefused, "{}", what("stat"));
        assert_eq!(code(f.read_at(path, None, None)), AdapterCode::SymlinkRefused, "{}", what("read"));
        assert_eq!(code(f.search(path, "needle")), AdapterCode::SymlinkRefused, "{}", what("search"));
        let trailing = path.ends_with('/');
        let w = code(f.write(path, "pwned"));
        assert!(w == AdapterCode::SymlinkRefused || (trailing && w == AdapterCode::NotADirectory), "{}", what("write"));
        assert_eq!(code(f.edit(path, &[("needle", "x")], None)), AdapterCode::SymlinkRefused, "{}", what("edit"));
    }
    // Writing through a link to a new name beneath it is refused too.
    assert_eq!(code(f.write("out-first/new.txt", "x")), AdapterCode::SymlinkRefused);
    assert_eq!(code(f.write("real/out-mid/new.txt", "x")), AdapterCode::SymlinkRefused);
    assert_eq!(std::fs::read(&secret).unwrap(), before);
    assert_eq!(std::fs::read_dir(&f.outside).unwrap().count(), 1, "nothing created outside");
    assert_eq!(f.read("real/sub/f.txt"), b"needle real\n");
    // The links are omitted from listings and never followed by a search of the root.
    assert_eq!(names_of(&ok(ToolOperation::FsList, f.list("."))), ["real"]);
    let v = ok(ToolOperation::FsSearch, f.search(".", "needle"));
    assert_eq!(matches_of(&v), [m("real/sub/f.txt", 1, 1, "needle real")]);
}

fn special_files(mode: ResolveMode) {
    let Some(f) = fx(mode) else { return };
    f.file("d/plain.txt", "needle");
    f.fifo("d/pipe");
    let sock_path = f.path("d/sock");
    let _sock = std::os::unix::net::UnixListener::bind(&sock_path).unwrap();
    let mut special = vec!["d/pipe", "d/sock"];
    if is_root_user() {
        rustix::fs::mknodat(
            rustix::fs::CWD,
            f.path("d/null"),
            rustix::fs::FileType::CharacterDevice,
            rustix::fs::Mode::from_raw_mode(0o666),
            rustix::fs::makedev(1, 3),
        )
        .unwrap();
        special.push("d/null");
    } else {
        eprintln!("SKIP (device part): creating a character device needs root");
    }
    // Nothing here may block: run the operations on a thread and bound the wait.
    let root = Arc::new(f);
    let r = Arc::clone(&root);
    let specials: Vec<String> = special.iter().map(|s| s.to_string()).collect();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for s in &specials {
            assert_eq!(code(r.stat(s)), AdapterCode::UnsupportedFileType, "stat {s}");
            assert_eq!(code(r.read_at(s, None, None)), AdapterCode::UnsupportedFileType, "read {s}");
            assert_eq!(code(r.search(s, "x")), AdapterCode::UnsupportedFileType, "search {s}");
            assert_eq!(code(r.write(s, "x")), AdapterCode::UnsupportedFileType, "write {s}");
            assert_eq!(code(r.edit(s, &[("a", "b")], None)), AdapterCode::UnsupportedFileType, "edit {s}");
            assert_eq!(code(r.list(s)), AdapterCode::UnsupportedFileType, "list {s}");
        }
        assert_eq!(names_of(&ok(ToolOperation::FsList, r.list("d"))), ["plain.txt"]);
        let v = ok(ToolOperation::FsSearch, r.search(".", "needle"));
        assert_eq!(matches_of(&v), [m("d/plain.txt", 1, 1, "needle")]);
        tx.send(()).unwrap();
    });
    rx.recv_timeout(Duration::from_secs(20)).expect("an operation on a special file blocked or failed");
    let ft = std::fs::symlink_metadata(root.path("d/pipe")).unwrap().file_type();
    assert!(std::os::unix::fs::FileTypeExt::is_fifo(&ft), "the FIFO is untouched");
}

fn swap_race_never_escapes(mode: ResolveMode) {
    let Some(f) = fx(mode) else { return };
    f.file("d/inside.txt", "needle inside\n");
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let swapper = s.spawn(|| {
            let (d, real) = (f.path("d"), f.path("d-real"));
            for _ in 0..300 {
                std::fs::rename(&d, &real).unwrap();
                symlink(&f.outside, &d).unwrap();
                std::thread::yield_now();
                std::fs::remove_file(&d).unwrap();
                std::fs::rename(&real, &d).unwrap();
            }
            stop.store(true, Ordering::SeqCst);
        });
        let mut rounds = 0;
        while !stop.load(Ordering::SeqCst) || rounds < 50 {
            rounds += 1;
            if let Ok(v) = f.search(".", "needle") {
                for (path, _, _, text) in matches_of(&v) {
                    assert!(path.ends_with("inside.txt") && !text.contains("OUTSIDE"), "{path}: {text}");
                }
            }
            if let Ok(v) = f.search("d", "needle") {
                assert!(!v.to_string().contains("OUTSIDE"));
            }
            for path in ["d/secret.txt", "d/inside.txt"] {
                if let Ok(v) = f.read_at(path, None, None) {
                    assert_eq!(v["content"], "needle inside\n");
                }
            }
            if let Ok(v) = f.list("d") {
                assert_eq!(names_of(&v), ["inside.txt"]);
            }
            if let Ok(v) = f.stat("d/secret.txt") {
                panic!("stat reached outside: {v}");
            }
        }
        swapper.join().unwrap();
    });
    assert_eq!(std::fs::read_dir(&f.outside).unwrap().count(), 1);
}

fn cancel_before_commit(mode: ResolveMode) {
    let Some(f) = fx(mode) else { return };
    f.file("keep.txt", "old");
    let cancel = Cancel::new();
    assert!(cancel.cancel());
    assert!(f.root.write(&p("new.txt"), "x", None, None, None, BIG, &cancel).is_err());
    assert!(f.root.write(&p("keep.txt"), "x", None, None, None, BIG, &cancel).is_err());
    let edits = vec![("old".to_string(), "new".to_string())];
    assert!(f.root.edit(&p("keep.txt"), &edits, None, BIG, &cancel).is_err());
    assert!(f.root.search(&p("."), "old", None, BIG, &cancel).is_err());
    assert_eq!(f.names("."), ["keep.txt"], "no file created and no temp file left");
    assert_eq!(f.read("keep.txt"), b"old");
    // After a commit it is too late to cancel.
    let done = Cancel::new();
    ok(ToolOperation::FsWrite, f.root.write(&p("new.txt"), "x", None, None, None, BIG, &done));
    assert!(!done.cancel());
}

fn permission_denied(mode: ResolveMode) {
    let Some(f) = fx(mode) else { return };
    f.file("ro/f.txt", "x");
    if !is_root_user() {
        std::fs::set_permissions(f.path("ro/f.txt"), std::fs::Permissions::from_mode(0o000)).unwrap();
        assert_eq!(code(f.read_at("ro/f.txt", None, None)), AdapterCode::PermissionDenied);
        std::fs::set_permissions(f.path("ro"), std::fs::Permissions::from_mode(0o555)).unwrap();
        assert_eq!(code(f.write("ro/new.txt", "x")), AdapterCode::PermissionDenied);
        std::fs::set_permissions(f.path("ro"), std::fs::Permissions::from_mode(0o755)).unwrap();
        return;
    }
    eprintln!("SKIP (read part): running as root, which bypasses permission bits");
    // Root still cannot modify an immutable directory (EPERM), where the filesystem has one.
    let chattr = |flag: &str| std::process::Command::new("chattr").arg(flag).arg(f.path("ro")).status();
    match chattr("+i") {
        Ok(s) if s.success() => {
            let w = code(f.write("ro/new.txt", "x"));
            let e = code(f.edit("ro/f.txt", &[("x", "y")], None));
            assert!(chattr("-i").unwrap().success());
            assert_eq!(w, AdapterCode::PermissionDenied);
            assert_eq!(e, AdapterCode::PermissionDenied);
            assert_eq!(f.names("ro"), ["f.txt"]);
        }
        _ => eprintln!("SKIP (write part): chattr +i is unavailable on this filesystem"),
    }
}

fn root_given_through_a_symlink(mode: ResolveMode) {
    let Some(f) = fx(mode) else { return };
    f.file("f.txt", "x");
    let alias = f.dir.parent().unwrap().join("alias");
    symlink(&f.dir, &alias).unwrap();
    let root = Root::open_with(&alias, mode).unwrap();
    let v = ok(ToolOperation::FsList, root.list(&p("."), None, BIG, &Cancel::new()));
    assert_eq!(names_of(&v), ["f.txt"]);
    assert!(Root::open_with(&f.path("f.txt"), mode).is_err(), "a file is not a root");
    assert!(format!("{root:?}").contains("Root") && !format!("{root:?}").contains("alias"));
}

macro_rules! in_both_modes {
    ($($name:ident),* $(,)?) => {
        mod openat2 {
            $( #[test] fn $name() { super::$name(super::ResolveMode::Openat2) } )*
        }
        mod walk {
            $( #[test] fn $name() { super::$name(super::ResolveMode::Walk) } )*
        }
    };
}

in_both_modes! {
    list_shape_and_bytewise_order,
    list_limits_and_budget,
    list_errors,
    stat_shapes_and_errors,
    read_windows,
    read_utf8_rules,
    read_budget_property,
    read_large_file_window,
    read_type_errors,
    search_basics,
    search_skips_binary,
    search_long_line_window,
    search_streaming_matches_naive,
    search_chunk_boundaries,
    search_limits_and_budget,
    search_does_not_follow_symlinks,
    write_create_and_overwrite,
    write_errors,
    write_expected_digest,
    edit_semantics,
    edit_errors,
    symlink_in_every_position,
    special_files,
    swap_race_never_escapes,
    cancel_before_commit,
    permission_denied,
    root_given_through_a_symlink,
}

#[test]
fn auto_mode_picks_a_working_resolver() {
    let tmp = tempfile::tempdir().unwrap();
    let root = Root::open(tmp.path()).unwrap();
    eprintln!("resolution mode on this kernel: {:?}", root.resolve_mode());
    assert_ne!(root.resolve_mode(), ResolveMode::Auto);
}
