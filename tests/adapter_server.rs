//! The reference adapter over a real socket, as a real process: binding, every operation,
//! refusals, limits, abort, idempotency, revoke, shutdown and secret hygiene (SPEC §1.2,
//! §4.5, §5, §7).

mod support;

use std::time::Duration;

use serde_json::{json, Value};
use support::{Adapter, Opts};

fn ok_data(r: &Value) -> &Value {
    assert_eq!(r["ok"], true, "expected success, got {r}");
    &r["data"]
}

fn err_code(r: &Value) -> &str {
    assert_eq!(r["ok"], false, "expected an error, got {r}");
    assert!(r.get("data").is_none());
    r["error"]["code"].as_str().unwrap()
}

#[test]
fn every_operation_over_the_socket() {
    let a = Adapter::start(Opts::default());
    std::fs::create_dir(a.root.join("src")).unwrap();
    std::fs::write(a.root.join("src/protocol.ts"), "export const PROTOCOL_VERSION = \"1.0\";\n").unwrap();
    let mut c = a.bound();
    c.send(&c.invoke("t1", "k1", "fs.list", json!({"path": "."})));
    let r = c.result_of("t1");
    assert_eq!(
        ok_data(&r)["entries"],
        json!([{"name": "src", "type": "directory", "modifiedAt": ok_data(&r)["entries"][0]["modifiedAt"]}])
    );
    c.send(&c.invoke("t2", "k2", "fs.stat", json!({"path": "src/protocol.ts"})));
    let r = c.result_of("t2");
    assert_eq!(ok_data(&r)["type"], "file");
    assert_eq!(ok_data(&r)["size"], 39);
    c.send(&c.invoke("t3", "k3", "fs.read", json!({"path": "src/protocol.ts", "offset": 0, "maxBytes": 4096})));
    let r = c.result_of("t3");
    assert_eq!(ok_data(&r)["content"], "export const PROTOCOL_VERSION = \"1.0\";\n");
    assert_eq!(ok_data(&r)["eof"], true);
    c.send(&c.invoke("t4", "k4", "fs.search", json!({"path": ".", "query": "VERSION"})));
    let r = c.result_of("t4");
    assert_eq!(
        ok_data(&r)["matches"],
        json!([{"path": "src/protocol.ts", "line": 1, "column": 23, "text": "export const PROTOCOL_VERSION = \"1.0\";"}])
    );
    c.send(&c.invoke("t5", "k5", "fs.write", json!({"path": "src/new.txt", "content": "a\n"})));
    let r = c.result_of("t5");
    assert_eq!(ok_data(&r)["created"], true);
    assert_eq!(ok_data(&r)["bytesWritten"], 2);
    c.send(&c.invoke(
        "t6",
        "k6",
        "fs.edit",
        json!({"path": "src/new.txt", "edits": [{"oldText": "a", "newText": "b"}]}),
    ));
    let r = c.result_of("t6");
    assert_eq!(ok_data(&r)["replacements"], 1);
    assert_eq!(std::fs::read_to_string(a.root.join("src/new.txt")).unwrap(), "b\n");
    use sha2::Digest;
    assert_eq!(
        ok_data(&r)["digest"],
        hex::encode(sha2::Sha256::digest(b"b\n")),
        "digest is SHA-256 of the whole new file"
    );
    // Results echo identity and both keys.
    assert_eq!(r["requestId"], "t6");
    assert_eq!(r["idempotencyKey"], "k6");
    assert_eq!(r["operation"], "fs.edit");
}

#[test]
fn refused_binds_close_without_bound() {
    let a = Adapter::start(Opts {
        operations: "fs.read,fs.stat",
        limits: [65536, 65536, 2, 2, 30_000, 16, 60_000],
        ..Opts::default()
    });
    let mut cases: Vec<(&str, Value)> = Vec::new();
    let c = a.connect();
    let mut wrong_handle = c.bind_frame();
    wrong_handle["capabilityHandle"] = json!("A".repeat(43));
    cases.push(("wrong handle", wrong_handle));
    let mut wrong_session = c.bind_frame();
    wrong_session["sessionId"] = json!("sess-2");
    cases.push(("wrong session", wrong_session));
    let mut wrong_gen = c.bind_frame();
    wrong_gen["generation"] = json!(4);
    cases.push(("wrong generation", wrong_gen));
    let mut wrong_adapter = c.bind_frame();
    wrong_adapter["adapterVersion"] = json!("9.9.9");
    cases.push(("wrong adapter version", wrong_adapter));
    let mut more_ops = c.bind_frame();
    more_ops["operations"] = json!(["fs.read", "fs.stat", "fs.write"]);
    cases.push(("operation outside the grant", more_ops));
    let mut high_limit = c.bind_frame();
    high_limit["limits"]["maxConcurrentRequests"] = json!(3);
    cases.push(("limit above the ceiling", high_limit));
    let mut extra = c.bind_frame();
    extra["token"] = json!("x");
    cases.push(("unknown key", extra));
    cases.push(("invoke before bind", c.invoke("r", "k", "fs.read", json!({"path": "a"}))));
    for (why, frame) in cases {
        let mut c = a.connect();
        c.send(&frame);
        c.expect_closed();
        assert!(c.received.is_empty(), "{why}: got bytes");
    }
    // Garbage before bind closes too.
    let mut c = a.connect();
    c.send_raw(b"not json\n");
    c.expect_closed();
    // A narrower bind within the grant is accepted and echoed exactly.
    let mut c = a.connect();
    let mut narrow = c.bind_frame();
    narrow["operations"] = json!(["fs.stat"]);
    narrow["limits"]["maxConcurrentRequests"] = json!(1);
    c.send(&narrow);
    let b = c.recv().unwrap();
    assert_eq!(b["kind"], "bound");
    assert_eq!(b["operations"], json!(["fs.stat"]));
    assert_eq!(b["limits"]["maxConcurrentRequests"], 1);
    assert!(b.get("capabilityHandle").is_none());
}

#[test]
fn bad_invokes_reply_or_close_as_spec_says() {
    let a = Adapter::start(Opts { operations: "fs.read,fs.list", ..Opts::default() });
    let mut c = a.bound();
    c.send(&c.invoke("r1", "k1", "fs.write", json!({"path": "x", "content": ""})));
    assert_eq!(err_code(&c.result_of("r1")), "operation_not_granted");
    c.send(&c.invoke("r2", "k2", "fs.read", json!({"path": "../etc/passwd"})));
    assert_eq!(err_code(&c.result_of("r2")), "invalid_path");
    c.send(&c.invoke("r3", "k3", "fs.read", json!({"path": "/etc/passwd"})));
    assert_eq!(err_code(&c.result_of("r3")), "invalid_path");
    c.send(&c.invoke("r4", "k4", "fs.read", json!({"path": "a", "maxBytes": 0})));
    assert_eq!(err_code(&c.result_of("r4")), "invalid_request");
    c.send(&c.invoke("r5", "k5", "fs.list", json!({"path": "a", "env": {}})));
    assert_eq!(err_code(&c.result_of("r5")), "invalid_request");
    c.send(&c.invoke("r6", "k6", "fs.read", json!({"path": "missing"})));
    assert_eq!(err_code(&c.result_of("r6")), "not_found");
    // Unattributable: a bad request id closes the connection.
    c.send(&c.invoke("-bad", "k7", "fs.read", json!({"path": "a"})));
    c.expect_closed();
    // A second bind closes.
    let mut c = a.bound();
    c.send(&c.bind_frame());
    c.expect_closed();
    // A frame with another identity closes.
    let mut c = a.bound();
    let mut f = c.invoke("r1", "k1", "fs.read", json!({"path": "a"}));
    f["generation"] = json!(99);
    c.send(&f);
    c.expect_closed();
    // An oversize line closes.
    let a2 = Adapter::start(Opts { limits: [2048, 65536, 4, 16, 30_000, 256, 60_000], ..Opts::default() });
    let mut c = a2.bound();
    c.send(&c.invoke("r1", "k1", "fs.write", json!({"path": "x", "content": "y".repeat(3000)})));
    c.expect_closed();
    assert!(!a2.root.join("x").exists());
}

#[test]
fn queue_saturation_is_busy_and_retryable() {
    let a =
        Adapter::start(Opts { limits: [65536, 65536, 1, 1, 30_000, 256, 60_000], op_delay_ms: 400, ..Opts::default() });
    std::fs::write(a.root.join("f"), "x").unwrap();
    let mut c = a.bound();
    for i in 1..=3 {
        c.send(&c.invoke(&format!("r{i}"), &format!("k{i}"), "fs.stat", json!({"path": "f"})));
    }
    let r3 = c.result_of("r3");
    assert_eq!(err_code(&r3), "busy");
    assert_eq!(r3["error"]["retryable"], true);
    assert_eq!(ok_data(&c.result_of("r1"))["type"], "file");
    assert_eq!(ok_data(&c.result_of("r2"))["type"], "file");
}

#[test]
fn abort_of_a_slow_write_leaves_no_side_effect_and_no_result() {
    let a = Adapter::start(Opts { op_delay_ms: 1500, ..Opts::default() });
    let mut c = a.bound();
    c.send(&c.invoke("w1", "kw1", "fs.write", json!({"path": "never.txt", "content": "x"})));
    std::thread::sleep(Duration::from_millis(200));
    c.send(&c.frame("abort", json!({"requestId": "a1", "targetRequestId": "w1"})));
    let ack = c.recv().unwrap();
    assert_eq!(ack["kind"], "aborted");
    assert_eq!(ack["aborted"], true);
    assert_eq!(ack["targetRequestId"], "w1");
    // Nothing follows for w1: a later request's result comes first and w1's never.
    c.send(&c.invoke("s1", "ks1", "fs.stat", json!({"path": "."})));
    let next = c.recv().unwrap();
    assert_eq!(next["requestId"], "s1", "the aborted request's result must never be sent");
    assert!(!a.root.join("never.txt").exists());
    // Abort of a finished request: aborted:false; of an unknown one: unknown_request.
    c.send(&c.frame("abort", json!({"requestId": "a2", "targetRequestId": "s1"})));
    let ack = c.recv().unwrap();
    assert_eq!((ack["aborted"].clone(), ack.get("error").is_none()), (json!(false), true));
    c.send(&c.frame("abort", json!({"requestId": "a3", "targetRequestId": "nope"})));
    let ack = c.recv().unwrap();
    assert_eq!(ack["aborted"], false);
    assert_eq!(ack["error"]["code"], "unknown_request");
    let entries: Vec<_> = std::fs::read_dir(&a.root).unwrap().collect();
    assert!(entries.is_empty(), "no temp file may remain");
}

#[test]
fn idempotent_replay_waiting_and_conflict() {
    let a = Adapter::start(Opts { op_delay_ms: 300, ..Opts::default() });
    let mut c = a.bound();
    let payload = json!({"path": "once.txt", "content": "v1"});
    c.send(&c.invoke("r1", "same-key", "fs.write", payload.clone()));
    c.send(&c.invoke("r2", "same-key", "fs.write", payload.clone()));
    let r1 = c.result_of("r1");
    let r2 = c.result_of("r2");
    // Executed once: both say created:true (a second execution would say false).
    assert_eq!(ok_data(&r1)["created"], true);
    assert_eq!(ok_data(&r2), ok_data(&r1));
    // Replay after completion, even though the file changed meanwhile.
    std::fs::write(a.root.join("once.txt"), "changed").unwrap();
    c.send(&c.invoke("r3", "same-key", "fs.write", payload.clone()));
    assert_eq!(ok_data(&c.result_of("r3")), ok_data(&r1));
    assert_eq!(std::fs::read_to_string(a.root.join("once.txt")).unwrap(), "changed", "replay must not write");
    c.send(&c.invoke("r4", "same-key", "fs.write", json!({"path": "once.txt", "content": "v2"})));
    assert_eq!(err_code(&c.result_of("r4")), "idempotency_conflict");
    c.send(&c.invoke(
        "r5",
        "same-key",
        "fs.edit",
        json!({"path": "once.txt", "edits": [{"oldText": "c", "newText": "d"}]}),
    ));
    assert_eq!(err_code(&c.result_of("r5")), "idempotency_conflict");
}

#[test]
fn revoke_and_eof_stop_work_before_its_side_effect() {
    let a = Adapter::start(Opts { op_delay_ms: 1500, ..Opts::default() });
    let mut c = a.bound();
    c.send(&c.invoke("w1", "k1", "fs.write", json!({"path": "r.txt", "content": "x"})));
    std::thread::sleep(Duration::from_millis(100));
    c.send(&c.frame("revoke", json!({})));
    assert_eq!(c.recv().unwrap(), c.frame("revoked", json!({})));
    c.expect_closed();
    let mut c = a.bound();
    c.send(&c.invoke("w2", "k2", "fs.write", json!({"path": "e.txt", "content": "x"})));
    std::thread::sleep(Duration::from_millis(100));
    c.shutdown_write();
    c.expect_closed();
    std::thread::sleep(Duration::from_millis(1800));
    assert!(!a.root.join("r.txt").exists() && !a.root.join("e.txt").exists());
}

#[test]
fn the_handle_never_leaves_even_when_a_file_holds_it() {
    let a = Adapter::start(Opts::default());
    let h = a.handle();
    std::fs::write(a.root.join("descriptor-copy.json"), serde_json::to_vec(&a.descriptor).unwrap()).unwrap();
    std::fs::write(a.root.join(format!("name-{}", &h[..20])), "x").unwrap();
    let mut c = a.bound();
    c.send(&c.invoke("r1", "k1", "fs.read", json!({"path": "descriptor-copy.json"})));
    assert_eq!(err_code(&c.result_of("r1")), "capability_in_content");
    c.send(&c.invoke("r2", "k2", "fs.search", json!({"path": ".", "query": "capabilityHandle"})));
    assert_eq!(err_code(&c.result_of("r2")), "capability_in_content");
    c.send(&c.invoke("r3", "k3", "fs.list", json!({"path": "."})));
    assert_eq!(ok_data(&c.result_of("r3"))["entries"].as_array().unwrap().len(), 2);
    // A window that misses the handle is refused too: windows would give it away in pieces
    // (SPEC PC-4.5, the handle never leaves in pieces).
    c.send(&c.invoke("r4", "k4", "fs.read", json!({"path": "descriptor-copy.json", "maxBytes": 20})));
    assert_eq!(err_code(&c.result_of("r4")), "capability_in_content");
    let received = String::from_utf8_lossy(&c.received).to_string();
    assert!(!received.contains(&h), "the handle crossed the socket");
}

#[test]
fn the_response_budget_is_never_exceeded() {
    let a = Adapter::start(Opts { limits: [65536, 1024, 4, 16, 30_000, 256, 60_000], ..Opts::default() });
    std::fs::write(a.root.join("big.txt"), "\"quoted\"\n".repeat(2000)).unwrap();
    for i in 0..50 {
        std::fs::write(a.root.join(format!("file-{i:03}.txt")), "needle\n").unwrap();
    }
    let mut c = a.bound();
    c.send(&c.invoke("r1", "k1", "fs.read", json!({"path": "big.txt"})));
    let line = c.recv_raw();
    assert!(line.len() <= 1024, "{} bytes", line.len());
    let r: Value = serde_json::from_slice(&line).unwrap();
    assert_eq!(r["data"]["eof"], false);
    assert!(r["data"]["bytesRead"].as_u64().unwrap() > 0);
    // Each request has its own idempotency key: reusing one with another payload is a conflict.
    for (i, (op, payload)) in
        [("fs.list", json!({"path": "."})), ("fs.search", json!({"path": ".", "query": "needle"}))]
            .into_iter()
            .enumerate()
    {
        c.send(&c.invoke(&format!("r2-{i}"), &format!("k2-{i}"), op, payload));
        let line = c.recv_raw();
        assert!(line.len() <= 1024, "{op}: {} bytes", line.len());
        let r: Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(r["data"]["truncated"], true, "{op}");
    }
}

#[test]
fn sigterm_revokes_every_binding_and_removes_the_socket() {
    let mut a = Adapter::start(Opts::default());
    let mut c1 = a.bound();
    let mut c2 = a.bound();
    let status = a.sigterm();
    assert!(status.success(), "{status:?}");
    assert_eq!(c1.recv().unwrap()["kind"], "revoked");
    assert_eq!(c2.recv().unwrap()["kind"], "revoked");
    c1.expect_closed();
    assert!(!a.socket.exists());
}

#[test]
fn refuses_to_start_on_an_unsafe_socket_directory_or_grants_file() {
    use std::os::unix::fs::PermissionsExt;
    let a = Adapter::start(Opts::default());
    let open_dir = a.dir.path().join("open");
    std::fs::create_dir(&open_dir).unwrap();
    std::fs::set_permissions(&open_dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = std::process::Command::new(support::bin())
        .args(["serve-adapter", "--socket"])
        .arg(open_dir.join("s.sock"))
        .arg("--grants")
        .arg(&a.grants)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("group/other"), "{}", String::from_utf8_lossy(&out.stderr));
    std::fs::set_permissions(&a.grants, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = std::process::Command::new(support::bin())
        .args(["serve-adapter", "--socket"])
        .arg(a.dir.path().join("s2.sock"))
        .arg("--grants")
        .arg(&a.grants)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("mode 0600"), "{}", String::from_utf8_lossy(&out.stderr));
    // A live socket is not replaced.
    std::fs::set_permissions(&a.grants, std::fs::Permissions::from_mode(0o600)).unwrap();
    let out = std::process::Command::new(support::bin())
        .args(["serve-adapter", "--socket"])
        .arg(&a.socket)
        .arg("--grants")
        .arg(&a.grants)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("another server"));
}

#[test]
fn kill_9_during_writes_leaves_whole_files() {
    let mut a = Adapter::start(Opts::default());
    let size = 256 * 1024;
    for f in 0..4 {
        std::fs::write(a.root.join(format!("f{f}")), "0".repeat(size)).unwrap();
    }
    let mut c = a.bound();
    let writer = std::thread::spawn(move || {
        for i in 0..400u32 {
            let d = char::from(b'0' + (i % 10) as u8);
            let f = i % 4;
            c.send(&c.invoke(
                &format!("w{i}"),
                &format!("k{i}"),
                "fs.write",
                json!({"path": format!("f{f}"), "content": d.to_string().repeat(size)}),
            ));
        }
    });
    // Kill once writes are landing (so the kill falls inside the stream), not before.
    let t = std::time::Instant::now();
    let changed = |a: &Adapter| {
        (0..4).any(|f| std::fs::read(a.root.join(format!("f{f}"))).is_ok_and(|b| b.first() != Some(&b'0')))
    };
    while !changed(&a) {
        assert!(t.elapsed() < Duration::from_secs(30), "no write landed");
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(u64::from(std::process::id() % 40)));
    a.kill9();
    let _ = writer.join();
    for f in 0..4 {
        let text = std::fs::read_to_string(a.root.join(format!("f{f}"))).unwrap();
        assert_eq!(text.len(), size, "f{f} is torn");
        let first = text.as_bytes()[0];
        assert!(text.bytes().all(|b| b == first), "f{f} mixes two versions");
    }
}
