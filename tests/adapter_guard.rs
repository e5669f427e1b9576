//! The reference adapter's content guard and root pinning (issue 15, F7 and F8): real
//! `pi-conform` processes, real sockets, real files and hard links.

mod support;

use std::time::Duration;

use serde_json::{json, Value};
use support::{mint, Adapter, Client, Opts};

fn sighup(a: &Adapter) {
    let pid = rustix::process::Pid::from_child(a.child.as_ref().unwrap());
    rustix::process::kill_process(pid, rustix::process::Signal::HUP).unwrap();
}

fn wait_log(a: &Adapter, needle: &str, n: usize) {
    let t = std::time::Instant::now();
    while a.log_text().matches(needle).count() < n {
        assert!(t.elapsed() < Duration::from_secs(10), "no {needle:?} in the log:\n{}", a.log_text());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Send one invoke and return its result.
fn call(c: &mut Client, id: &str, op: &str, payload: Value) -> Value {
    c.send(&c.invoke(id, &format!("k-{id}"), op, payload));
    c.result_of(id)
}

/// The error code of a result, or "ok".
fn code(r: &Value) -> String {
    if r["ok"] == true {
        "ok".into()
    } else {
        r["error"]["code"].as_str().unwrap_or("?").to_string()
    }
}

/// Every run of at least 8 consecutive characters of `h` is absent from `bytes`.
fn assert_no_piece(bytes: &[u8], h: &str) {
    let text = String::from_utf8_lossy(bytes);
    for start in 0..=h.len() - 8 {
        let piece = &h[start..start + 8];
        assert!(!text.contains(piece), "a piece of the handle ({start}..{}) left the adapter", start + 8);
    }
}

/// A file holding the bound handle behind 600 KiB of text (past a scan chunk and the inline
/// limit) is refused whole: every window, every offset, a search and an edit.
#[test]
fn the_bound_handle_never_leaves_in_pieces() {
    let a = Adapter::start(Opts::default());
    let h = a.handle();
    let pad = "lorem ipsum dolor\n".repeat(600 * 1024 / 18);
    let at = pad.len() + 3;
    let text = format!("{pad}k: {h} trailing words\nlast line\n");
    std::fs::write(a.root.join("notes.txt"), &text).unwrap();
    // A small file with the handle at its very end, and one with it at the start.
    std::fs::write(a.root.join("small.txt"), format!("x={h}")).unwrap();
    std::fs::write(a.root.join("head.txt"), format!("{h}\nrest\n")).unwrap();
    std::fs::write(a.root.join("clean.txt"), "nothing secret\n").unwrap();
    let mut c = a.bound();
    let windows: Vec<(u64, u64)> = vec![
        (0, 21),                      // far from the handle
        (at as u64, 21),              // its first 21 characters
        (at as u64 + 21, 22),         // its last 22
        (at as u64, 42),              // all but one
        (at as u64 + 1, 42),          // all but the first
        (0, 4 * 1024 * 1024),         // the whole file
        (text.len() as u64 - 5, 100), // the tail, far past it
    ];
    for (i, (offset, max)) in windows.iter().enumerate() {
        let r =
            call(&mut c, &format!("r{i}"), "fs.read", json!({"path": "notes.txt", "offset": offset, "maxBytes": max}));
        assert_eq!(code(&r), "capability_in_content", "window {offset}+{max}: {r}");
        assert_eq!(r["error"]["retryable"], false);
    }
    for (i, (path, offset, max)) in [("small.txt", 2, 10), ("small.txt", 0, 2), ("head.txt", 44, 4)].iter().enumerate()
    {
        let r = call(&mut c, &format!("s{i}"), "fs.read", json!({"path": path, "offset": offset, "maxBytes": max}));
        assert_eq!(code(&r), "capability_in_content", "{path} {offset}+{max}: {r}");
    }
    // A search that would only give columns (an oracle for the handle's letters) is refused.
    let r = call(&mut c, "q1", "fs.search", json!({"path": ".", "query": &h[..1]}));
    assert_eq!(code(&r), "capability_in_content", "{r}");
    let r = call(&mut c, "q2", "fs.search", json!({"path": "notes.txt", "query": "lorem"}));
    assert_eq!(code(&r), "capability_in_content", "{r}");
    // An edit's not-found / ambiguous answer would be an oracle too; nothing is written.
    let before = std::fs::read(a.root.join("small.txt")).unwrap();
    let r =
        call(&mut c, "e1", "fs.edit", json!({"path": "small.txt", "edits": [{"oldText": &h[..5], "newText": "z"}]}));
    assert_eq!(code(&r), "capability_in_content", "{r}");
    assert_eq!(std::fs::read(a.root.join("small.txt")).unwrap(), before);
    // A file without a handle is unaffected, and so is a search of a subtree without one.
    std::fs::create_dir(a.root.join("sub")).unwrap();
    std::fs::write(a.root.join("sub/a.txt"), "lorem\n").unwrap();
    let r = call(&mut c, "ok1", "fs.read", json!({"path": "clean.txt", "maxBytes": 7}));
    assert_eq!(r["data"]["content"], "nothing");
    let r = call(&mut c, "ok2", "fs.search", json!({"path": "sub", "query": "lorem"}));
    assert_eq!(r["data"]["matches"][0]["path"], "sub/a.txt", "{r}");
    assert_no_piece(&c.received, &h);
}

/// Another grant's handle lying in the root is refused as well (looked up by its digest),
/// inside a longer run of base64url characters too; a random string of the same shape that
/// no grant holds is read normally.
#[test]
fn another_grants_handle_in_the_root_is_refused() {
    let a = Adapter::start(Opts::default());
    let other = mint(&a.grants, &a.socket, &a.root, "host-t", "sess-2", 1, &Opts::default());
    let oh = other["binding"]["capabilityHandle"].as_str().unwrap().to_string();
    let mut c = a.bound();
    std::fs::write(a.root.join("desc.json"), serde_json::to_vec(&other).unwrap()).unwrap();
    std::fs::write(a.root.join("run.txt"), format!("AAAAAAAA{oh}BBBB\n")).unwrap();
    let stranger = "Zz09_-Zz09_-Zz09_-Zz09_-Zz09_-Zz09_-Zz09_-Z";
    assert_eq!(stranger.len(), oh.len());
    std::fs::write(a.root.join("stranger.txt"), format!("{stranger}\n")).unwrap();
    // Before the reload the adapter does not know the new grant: nothing to refuse it by.
    let r = call(&mut c, "r0", "fs.read", json!({"path": "stranger.txt"}));
    assert_eq!(r["data"]["content"], format!("{stranger}\n"));
    sighup(&a);
    wait_log(&a, "grants reloaded", 1);
    for (i, path) in ["desc.json", "run.txt"].iter().enumerate() {
        let r = call(&mut c, &format!("r{}", i + 1), "fs.read", json!({"path": path, "offset": 10, "maxBytes": 5}));
        assert_eq!(code(&r), "capability_in_content", "{path}: {r}");
    }
    let r = call(&mut c, "q", "fs.search", json!({"path": ".", "query": "B"}));
    assert_eq!(code(&r), "capability_in_content", "{r}");
    let r = call(&mut c, "r9", "fs.read", json!({"path": "stranger.txt"}));
    assert_eq!(code(&r), "ok", "no false positive: {r}");
    assert_no_piece(&c.received, &oh);
}

/// A verdict is cached per file version: a clean file read again after the handle was
/// appended to it is refused.
#[test]
fn a_cached_clean_verdict_does_not_outlive_a_change() {
    let a = Adapter::start(Opts::default());
    let h = a.handle();
    let big = "abc def\n".repeat(100_000);
    std::fs::write(a.root.join("big.txt"), &big).unwrap();
    // Old enough for its verdict to be cached (the racy window is two seconds).
    std::thread::sleep(Duration::from_millis(2200));
    let mut c = a.bound();
    for i in 0..3 {
        let r = call(&mut c, &format!("w{i}"), "fs.read", json!({"path": "big.txt", "offset": i * 8, "maxBytes": 7}));
        assert_eq!(r["data"]["content"], "abc def");
    }
    use std::io::Write;
    std::fs::OpenOptions::new().append(true).open(a.root.join("big.txt")).unwrap().write_all(h.as_bytes()).unwrap();
    let r = call(&mut c, "w9", "fs.read", json!({"path": "big.txt", "maxBytes": 7}));
    assert_eq!(code(&r), "capability_in_content", "{r}");
}

/// DECISION (F8): a regular file with more than one hard link is refused
/// `permission_denied` when named by a read, search or edit, and skipped by a tree search —
/// its other name may be outside the root. Listing and stat still show it.
#[test]
fn a_hard_link_into_the_root_exposes_nothing() {
    let a = Adapter::start(Opts::default());
    let outside = a.dir.path().join("outside-secret.txt");
    std::fs::write(&outside, "outside secret words\n").unwrap();
    std::fs::create_dir(a.root.join("d")).unwrap();
    std::fs::hard_link(&outside, a.root.join("d/link.txt")).unwrap();
    std::fs::write(a.root.join("d/own.txt"), "own secret words\n").unwrap();
    let mut c = a.bound();
    let r = call(&mut c, "r1", "fs.read", json!({"path": "d/link.txt"}));
    assert_eq!(code(&r), "permission_denied", "{r}");
    assert_eq!(r["error"]["message"], "the file has more than one hard link");
    let r = call(&mut c, "s1", "fs.search", json!({"path": "d/link.txt", "query": "secret"}));
    assert_eq!(code(&r), "permission_denied", "{r}");
    let r = call(&mut c, "s2", "fs.search", json!({"path": "d", "query": "secret"}));
    let paths: Vec<&str> =
        r["data"]["matches"].as_array().unwrap().iter().map(|m| m["path"].as_str().unwrap()).collect();
    assert_eq!(paths, ["d/own.txt"], "{r}");
    let r =
        call(&mut c, "e1", "fs.edit", json!({"path": "d/link.txt", "edits": [{"oldText": "outside", "newText": "x"}]}));
    assert_eq!(code(&r), "permission_denied", "{r}");
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "outside secret words\n");
    let r = call(&mut c, "l1", "fs.list", json!({"path": "d"}));
    assert_eq!(r["data"]["entries"].as_array().unwrap().len(), 2, "{r}");
    // Once the other name is gone the file is the root's alone again.
    std::fs::remove_file(&outside).unwrap();
    let r = call(&mut c, "r2", "fs.read", json!({"path": "d/link.txt"}));
    assert_eq!(r["data"]["content"], "outside secret words\n");
}

// ---------------------------------------------------------------------------------------
// F8: the root pinned at grant time.

fn grants_json(path: &std::path::Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn write_grants(path: &std::path::Path, v: &Value) {
    use std::os::unix::fs::PermissionsExt;
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, serde_json::to_vec(v).unwrap()).unwrap();
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// A bind that must be refused: the adapter closes without `bound`.
fn refused(a: &Adapter) {
    let mut c = a.connect();
    c.send(&c.bind_frame());
    assert!(c.recv().is_none(), "the bind was accepted");
}

#[test]
fn grant_pins_the_roots_device_and_inode() {
    use std::os::unix::fs::MetadataExt;
    let a = Adapter::start(Opts::default());
    let g = &grants_json(&a.grants)["grants"][0];
    let m = std::fs::metadata(&a.root).unwrap();
    assert_eq!(g["rootDevice"], m.dev(), "{g}");
    assert_eq!(g["rootInode"], m.ino(), "{g}");
}

#[test]
fn a_root_replaced_after_grant_does_not_bind() {
    let a = Adapter::start(Opts::default());
    let _ok = a.bound();
    // Another directory at the root path: same path, another inode.
    let real = a.dir.path().join("real-root");
    std::fs::rename(&a.root, &real).unwrap();
    std::fs::create_dir(&a.root).unwrap();
    refused(&a);
    wait_log(&a, "root_changed", 1);
    // The original directory reached through a symlink at the root path: right inode, but
    // the path resolves through a symlink.
    std::fs::remove_dir(&a.root).unwrap();
    std::os::unix::fs::symlink(&real, &a.root).unwrap();
    refused(&a);
    wait_log(&a, "root_symlink", 1);
    // Put back, it binds again.
    std::fs::remove_file(&a.root).unwrap();
    std::fs::rename(&real, &a.root).unwrap();
    let _again = a.bound();
}

#[test]
fn a_symlink_in_a_parent_of_the_root_does_not_bind() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::Builder::new().prefix("pc-pin").tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let root = dir.path().join("p/root");
    std::fs::create_dir_all(&root).unwrap();
    let socket = dir.path().join("a.sock");
    let grants = dir.path().join("grants.json");
    let descriptor = mint(&grants, &socket, &root, "host-t", "sess-1", 1, &Opts::default());
    let mut a = Adapter { log: dir.path().join("adapter.log"), dir, root, socket, grants, descriptor, child: None };
    a.spawn(0);
    let _ok = a.bound();
    // `p` becomes a symlink to the same directory under another name.
    std::fs::rename(a.dir.path().join("p"), a.dir.path().join("q")).unwrap();
    std::os::unix::fs::symlink("q", a.dir.path().join("p")).unwrap();
    refused(&a);
    wait_log(&a, "root_symlink", 1);
}

/// DECISION: a grants file written before roots were pinned still loads, but its grants do
/// not bind (mint them again); a grant with only one of the two fields is a format error.
#[test]
fn an_unpinned_grant_loads_but_does_not_bind() {
    let mut a = Adapter::start(Opts::default());
    a.sigterm();
    let mut file = grants_json(&a.grants);
    let g = file["grants"][0].as_object_mut().unwrap();
    g.remove("rootInode");
    write_grants(&a.grants, &file);
    let out = std::process::Command::new(support::bin())
        .args(["serve-adapter", "--socket"])
        .arg(&a.socket)
        .arg("--grants")
        .arg(&a.grants)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("rootDevice and rootInode go together"), "{err}");
    file["grants"][0].as_object_mut().unwrap().remove("rootDevice");
    write_grants(&a.grants, &file);
    a.spawn(0);
    refused(&a);
    wait_log(&a, "root_unpinned", 1);
    // A grant minted now on the same file binds beside it.
    let fresh = mint(&a.grants, &a.socket, &a.root, "host-t", "sess-9", 1, &Opts::default());
    sighup(&a);
    wait_log(&a, "grants reloaded", 1);
    let mut c = Client::new(&a.socket, fresh);
    c.send(&c.bind_frame());
    assert_eq!(c.recv().expect("bound"), c.expected_bound());
}
