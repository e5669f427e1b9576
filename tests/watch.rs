//! `pi-conform watch` with real processes on real sockets: the adapter suite through the proxy
//! against the reference adapter, a reference adapter with a fault switch on, bytes compared at
//! both ends, memory under a flooding peer, a recorded session replayed by the runner, and the
//! daemon side against the reference daemon.

mod support;

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{bin, mint, Client, Opts};

/// A running `pi-conform watch`, its stdout in a file.
struct Watch {
    child: Option<Child>,
    socket: PathBuf,
    out: PathBuf,
}

impl Watch {
    fn start(side: &str, dir: &Path, upstream: &Path, record: Option<&Path>) -> Watch {
        let socket = dir.join(format!("watch-{side}.sock"));
        let out = dir.join(format!("watch-{side}.out"));
        let mut cmd = Command::new(bin());
        cmd.args(["watch", side, "--format", "json", "--listen"]).arg(&socket).arg("--upstream").arg(upstream);
        if let Some(r) = record {
            cmd.arg("--record").arg(r);
        }
        let child = cmd
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(dir.join(format!("watch-{side}.err"))).unwrap())
            .spawn()
            .unwrap();
        // Not probed by connecting (a connection would reach the upstream): the watch says
        // when it listens.
        let t = Instant::now();
        while !std::fs::read_to_string(&out).unwrap_or_default().contains("watching") {
            assert!(t.elapsed() < Duration::from_secs(20), "watch did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        Watch { child: Some(child), socket, out }
    }

    fn events(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.out)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("watch printed a non-JSON line ({e}): {l}")))
            .collect()
    }

    /// Wait until `pred` holds for the events (or fail after 20 s).
    fn wait_for(&self, what: &str, pred: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let t = Instant::now();
        loop {
            let ev = self.events();
            if pred(&ev) {
                return ev;
            }
            assert!(t.elapsed() < Duration::from_secs(20), "no {what} within 20 s: {ev:#?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM; the exit code and every event.
    fn stop(&mut self) -> (Option<i32>, Vec<Value>) {
        let mut child = self.child.take().unwrap();
        rustix::process::kill_process(rustix::process::Pid::from_child(&child), rustix::process::Signal::TERM).unwrap();
        let status = child.wait().unwrap();
        (status.code(), self.events())
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A reference adapter with `faults` on, its descriptor, root and socket in `dir`.
fn adapter_with_faults(dir: &Path, faults: &[&str]) -> (Child, Value, PathBuf, PathBuf) {
    let root = dir.join("root");
    std::fs::create_dir_all(&root).unwrap();
    let socket = dir.join("a.sock");
    let grants = dir.join("grants.json");
    let d = mint(&grants, &socket, &root, "host-t", "sess-1", 3, &Opts::default());
    let mut cmd = Command::new(bin());
    cmd.args(["serve-adapter", "--socket"]).arg(&socket).arg("--grants").arg(&grants);
    for f in faults {
        cmd.args(["--fault", f]);
    }
    let child = cmd.stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let t = Instant::now();
    while UnixStream::connect(&socket).is_err() {
        assert!(t.elapsed() < Duration::from_secs(20), "adapter did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    (child, d, root, socket)
}

fn private_dir(prefix: &str) -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let d = tempfile::Builder::new().prefix(prefix).tempdir().unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    d
}

fn descriptor_file(dir: &Path, d: &Value) -> PathBuf {
    let p = dir.join("descriptor.json");
    std::fs::write(&p, serde_json::to_vec(d).unwrap()).unwrap();
    p
}

fn handle_of(d: &Value) -> String {
    d["binding"]["capabilityHandle"].as_str().unwrap().to_string()
}

#[test]
fn the_adapter_suite_through_watch_stays_conformant_and_only_the_suites_own_bad_frames_are_reported() {
    let dir = private_dir("pc-watch-suite");
    let (mut adapter, d, root, socket) = adapter_with_faults(dir.path(), &[]);
    let mut w = Watch::start("adapter", dir.path(), &socket, None);
    let dfile = descriptor_file(dir.path(), &d);
    let out = Command::new(bin())
        .arg("adapter")
        .arg(&w.socket)
        .arg("--descriptor")
        .arg(&dfile)
        .arg("--root")
        .arg(&root)
        // Budgets scaled: the proxy adds a hop, and the test machine is shared.
        .args(["--color", "never", "--id", "adapter.", "--time-scale", "3"])
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "the suite through watch: {report}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(report.contains("verdict: CONFORMANT"), "{report}");
    let (code, events) = w.stop();
    let _ = adapter.kill();
    let _ = adapter.wait();
    let v: Vec<&Value> = events.iter().filter(|e| e["event"] == "violation").collect();
    let adapter_side: Vec<&&Value> = v.iter().filter(|e| e["direction"] == "to-daemon").collect();
    assert!(adapter_side.is_empty(), "the reference adapter broke no rule: {adapter_side:#?}");
    // The suite's deliberate bad frames are the daemon side's violations, each with its clause
    // and code: a bind with an extra key, a second bind, a frame before the bind, a `..` path.
    let has = |field: &str, clause: &str, code: &str| {
        v.iter().any(|e| {
            e["direction"] == "to-adapter" && e["field"] == field && e["clause"] == clause && e["code"] == code
        })
    };
    assert!(has("environment", "PC-4.2", "adapter_protocol_invalid"), "{v:#?}");
    assert!(has("kind", "PC-4.2", "adapter_protocol_invalid"), "second bind / frame before bind: {v:#?}");
    assert!(has("payload.path", "PC-5.1", "invalid_path"), "{v:#?}");
    assert!(has("generation", "PC-4.1", "adapter_protocol_invalid"), "{v:#?}");
    assert!(v.iter().all(|e| e["clause"].as_str().is_some_and(|c| c.starts_with("PC-"))), "{v:#?}");
    assert_eq!(code, Some(1), "violations were seen: exit 1");
    let summary = events.iter().find(|e| e["event"] == "summary").expect("a summary at SIGTERM");
    assert_eq!(summary["violations"], json!(v.len()), "{summary}");
    assert!(summary["connections"].as_u64().unwrap() > 50, "{summary}");
    let text = std::fs::read_to_string(&w.out).unwrap();
    assert!(!text.contains(&handle_of(&d)), "the handle reached the watch's output");
}

#[test]
fn an_adapter_reflecting_the_handle_is_reported_and_the_report_redacts_it() {
    let dir = private_dir("pc-watch-leak");
    let (mut adapter, d, _root, socket) = adapter_with_faults(dir.path(), &["bound-leaks-handle"]);
    let mut w = Watch::start("adapter", dir.path(), &socket, None);
    let mut c = Client::new(&w.socket, d.clone());
    c.send(&c.bind_frame());
    let bound = c.recv().expect("bound passes through unchanged, handle and all: the peers decide");
    assert_eq!(bound["capabilityHandle"].as_str(), Some(handle_of(&d).as_str()));
    let ev = w.wait_for("the leak", |ev| ev.iter().any(|e| e["event"] == "violation"));
    let v: Vec<&Value> = ev.iter().filter(|e| e["event"] == "violation").collect();
    assert_eq!(v.len(), 1, "{v:#?}");
    let leak = v[0];
    assert_eq!(
        (leak["direction"].as_str(), leak["clause"].as_str(), leak["code"].as_str(), leak["field"].as_str()),
        (Some("to-daemon"), Some("PC-4.5"), Some("adapter_secret_reflected"), Some("frame"))
    );
    assert!(leak["excerpt"].as_str().unwrap().contains("<redacted>"), "{leak}");
    let (code, _) = w.stop();
    assert_eq!(code, Some(1));
    let text = std::fs::read_to_string(&w.out).unwrap();
    assert!(!text.contains(&handle_of(&d)), "the leaked handle is redacted in the report");
    let _ = adapter.kill();
    let _ = adapter.wait();
}

#[test]
fn a_faulty_adapter_is_reported_with_the_clause_it_breaks() {
    let dir = private_dir("pc-watch-fault");
    let (mut adapter, d, _root, socket) =
        adapter_with_faults(dir.path(), &["not-found-retryable", "accept-second-bind"]);
    let mut w = Watch::start("adapter", dir.path(), &socket, None);
    let mut c = Client::new(&w.socket, d.clone());
    c.send(&c.bind_frame());
    assert_eq!(c.recv().expect("bound")["kind"], "bound");
    c.send(&c.invoke("r-1", "k-1", "fs.stat", json!({"path": "missing.txt"})));
    let r = c.result_of("r-1");
    assert_eq!((r["error"]["code"].as_str(), r["error"]["retryable"].as_bool()), (Some("not_found"), Some(true)));
    c.send(&c.bind_frame());
    assert_eq!(c.recv().expect("a second bound")["kind"], "bound");
    let ev = w.wait_for("two adapter-side violations", |ev| {
        ev.iter().filter(|e| e["event"] == "violation" && e["direction"] == "to-daemon").count() >= 2
    });
    let v: Vec<&Value> = ev.iter().filter(|e| e["event"] == "violation").collect();
    assert_eq!(v.len(), 3, "{v:#?}");
    let find = |dir: &str, clause: &str| v.iter().find(|e| e["direction"] == dir && e["clause"] == clause).copied();
    let retry = find("to-daemon", "PC-5.3.errors").unwrap_or_else(|| panic!("not_found retryable: {v:#?}"));
    assert_eq!(retry["requestId"], "r-1");
    assert!(retry["field"].as_str().unwrap().contains("retryable"), "{retry}");
    let second = find("to-daemon", "PC-4.3").unwrap_or_else(|| panic!("a second bound: {v:#?}"));
    assert!(second["message"].as_str().unwrap().contains("second bound"), "{second}");
    // The daemon side sent the second bind: its own violation.
    let bind2 = find("to-adapter", "PC-4.2").unwrap_or_else(|| panic!("the second bind: {v:#?}"));
    assert!(bind2["message"].as_str().unwrap().contains("second bind"), "{bind2}");
    let (code, _) = w.stop();
    assert_eq!(code, Some(1));
    let _ = adapter.kill();
    let _ = adapter.wait();
}

/// A peer that records everything it receives and, once it has seen `expect` bytes, sends
/// `reply` and closes.
fn recording_peer(socket: &Path, expect: usize, reply: Vec<u8>) -> std::thread::JoinHandle<Vec<u8>> {
    let l = UnixListener::bind(socket).unwrap();
    std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while got.len() < expect {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        s.write_all(&reply).unwrap();
        got
    })
}

#[test]
fn bytes_pass_unchanged_in_both_directions_whatever_they_are() {
    let dir = private_dir("pc-watch-bytes");
    let upstream = dir.path().join("peer.sock");
    // Valid frames, broken JSON, CRLF, a lone CR, NUL, invalid UTF-8, empty lines, a partial
    // last line: the proxy judges what it can and forwards every byte as it came.
    std::fs::create_dir(dir.path().join("r")).unwrap();
    let d = mint(&dir.path().join("g.json"), &upstream, &dir.path().join("r"), "h", "s", 1, &Opts::default());
    let bind = json!({
        "protocolVersion": "1.0", "kind": "bind", "adapterId": d["adapterId"], "adapterVersion": d["adapterVersion"],
        "hostInstanceId": "h", "sessionId": "s", "generation": 1,
        "capabilityHandle": d["binding"]["capabilityHandle"], "operations": d["operations"], "limits": d["limits"],
    });
    let mut up = serde_json::to_vec(&bind).unwrap();
    up.extend_from_slice(b"\r\n\n{\"kind\":\x00\xff}\n\r{not json\n   \nno-lf-at-the-end");
    let mut down = Vec::new();
    for i in 0..2000u32 {
        down.extend_from_slice(format!("{{\"kind\":\"result\",\"n\":{i}}}\n").as_bytes());
    }
    down.extend_from_slice(b"\xfe\xfe garbage \r\n");
    let peer = recording_peer(&upstream, up.len(), down.clone());
    let w = Watch::start("adapter", dir.path(), &upstream, None);
    let mut s = UnixStream::connect(&w.socket).unwrap();
    // Written in odd-sized pieces so lines straddle reads.
    for piece in up.chunks(7) {
        s.write_all(piece).unwrap();
    }
    let mut got = Vec::new();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.read_to_end(&mut got).unwrap();
    let seen_up = peer.join().unwrap();
    assert_eq!(seen_up, up, "the adapter got exactly the daemon's bytes");
    assert_eq!(got, down, "the daemon got exactly the adapter's bytes");
    // …and the judge saw them: the garbage lines are reported on their side.
    let v = w.wait_for("the garbage reported", |ev| {
        ev.iter().any(|e| e["event"] == "violation" && e["direction"] == "to-daemon")
            && ev.iter().any(|e| e["event"] == "violation" && e["direction"] == "to-adapter")
    });
    assert!(v.iter().any(|e| e["field"] == "line" && e["direction"] == "to-adapter"), "{v:#?}");
}

fn rss_kib(pid: u32) -> i64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

#[test]
fn a_flooding_peer_passes_through_in_bounded_memory_and_is_reported_once() {
    let dir = private_dir("pc-watch-flood");
    let upstream = dir.path().join("peer.sock");
    let l = UnixListener::bind(&upstream).unwrap();
    // The "adapter" floods 512 MiB without an LF.
    const TOTAL: usize = 512 << 20;
    std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let chunk = vec![b'x'; 1 << 16];
        let mut sent = 0;
        while sent < TOTAL && s.write_all(&chunk).is_ok() {
            sent += chunk.len();
        }
    });
    let mut w = Watch::start("adapter", dir.path(), &upstream, None);
    let pid = w.pid();
    let mut s = UnixStream::connect(&w.socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut buf = vec![0u8; 1 << 16];
    let (mut got, mut peak) = (0usize, 0i64);
    let t = Instant::now();
    let mut reads = 0u64;
    while got < TOTAL {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got += n,
        }
        reads += 1;
        if reads % 64 == 0 {
            peak = peak.max(rss_kib(pid));
        }
        assert!(t.elapsed() < Duration::from_secs(300), "the flood stalled at {got} bytes");
    }
    peak = peak.max(rss_kib(pid));
    assert_eq!(got, TOTAL, "every byte of the flood was forwarded");
    // One line over the pre-bind cap (4 MiB) is held at most; the rest streams through.
    assert!(peak < 48 * 1024, "peak RSS {peak} KiB: the proxy buffered the flood");
    let (_, events) = w.stop();
    let over: Vec<&Value> = events.iter().filter(|e| e["event"] == "violation" && e["field"] == "line").collect();
    assert_eq!(over.len(), 1, "one oversize line, reported once: {over:#?}");
    assert_eq!(over[0]["direction"], "to-daemon");
}

#[test]
fn a_recorded_session_replays_green_against_the_reference_adapter() {
    let dir = private_dir("pc-watch-record");
    let (mut adapter, d, root, socket) = adapter_with_faults(dir.path(), &[]);
    let dfile = descriptor_file(dir.path(), &d);
    // Lay the runner's fixture in the root (one case), so the recorded traffic uses its files.
    let lay = Command::new(bin())
        .arg("adapter")
        .arg(&socket)
        .arg("--descriptor")
        .arg(&dfile)
        .arg("--root")
        .arg(&root)
        .args(["--id", "adapter.bind.wrong-handle", "--color", "never"])
        .output()
        .unwrap();
    assert_eq!(lay.status.code(), Some(0), "{}", String::from_utf8_lossy(&lay.stdout));
    let rec = dir.path().join("recorded.json");
    let mut w = Watch::start("adapter", dir.path(), &socket, Some(&rec));
    let mut c = Client::new(&w.socket, d.clone());
    c.send(&c.bind_frame());
    assert_eq!(c.recv().unwrap()["kind"], "bound");
    let calls = [
        ("fs.stat", json!({"path": "hello.txt"})),
        ("fs.read", json!({"path": "hello.txt"})),
        ("fs.list", json!({"path": "dir"})),
        ("fs.search", json!({"path": "dir", "query": "needle"})),
        ("fs.write", json!({"path": "recorded-new.txt", "content": "new\n"})),
        ("fs.stat", json!({"path": "no-such-file.txt"})),
        ("fs.read", json!({"path": "../outside.txt"})),
    ];
    for (i, (op, payload)) in calls.iter().enumerate() {
        let id = format!("r-{i}");
        c.send(&c.invoke(&id, &format!("k-{i}"), op, payload.clone()));
        c.result_of(&id);
    }
    c.send(&c.frame("revoke", json!({})));
    assert_eq!(c.recv().unwrap()["kind"], "revoked");
    // The adapter ends a revoked connection itself: that close is part of the recording.
    c.expect_closed();
    drop(c);
    w.wait_for("the connection's end", |ev| ev.iter().any(|e| e["state"] == "closed"));
    let (code, events) = w.stop();
    let violations: Vec<&Value> = events.iter().filter(|e| e["event"] == "violation").collect();
    // The `../` attempt is the daemon side's violation (a daemon never sends it); nothing else.
    assert_eq!(violations.len(), 1, "{violations:#?}");
    assert_eq!(
        (violations[0]["clause"].as_str(), violations[0]["code"].as_str()),
        (Some("PC-5.1"), Some("invalid_path"))
    );
    assert_eq!(code, Some(1));
    let text = std::fs::read_to_string(&rec).unwrap();
    assert!(!text.contains(&handle_of(&d)), "the recording holds the handle");
    assert!(!text.contains("host-t") && !text.contains("sess-1"), "host and session are placeholders: {text}");
    let sessions: Vec<Value> = serde_json::from_str(&text).unwrap();
    let ours: Vec<&Value> = sessions.iter().filter(|s| s["steps"].as_array().unwrap().len() > 3).collect();
    assert_eq!(ours.len(), 1, "{text}");
    assert_eq!(ours[0]["accepted"], json!(["closed"]), "{}", ours[0]);
    // Replay it (only it) with the runner, straight against the adapter.
    let only = dir.path().join("only.json");
    std::fs::write(&only, serde_json::to_vec(&json!([ours[0]])).unwrap()).unwrap();
    std::fs::remove_file(root.join("recorded-new.txt")).unwrap();
    let run = Command::new(bin())
        .arg("adapter")
        .arg(&socket)
        .arg("--descriptor")
        .arg(&dfile)
        .arg("--root")
        .arg(&root)
        .arg("--session")
        .arg(&only)
        .args(["--color", "never", "--verbose"])
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&run.stdout);
    assert_eq!(run.status.code(), Some(0), "{report}\n{}", String::from_utf8_lossy(&run.stderr));
    assert!(report.contains("1 passed") && report.contains("verdict: CONFORMANT"), "{report}");
    // A recorded session whose answer no longer holds fails: the replay is a real check.
    let mut broken = ours[0].clone();
    for st in broken["steps"].as_array_mut().unwrap() {
        if st.pointer("/expect/result/ok") == Some(&json!(false)) {
            st["expect"]["result"]["error"]["code"] = json!("permission_denied");
        }
    }
    std::fs::write(&only, serde_json::to_vec(&json!([broken])).unwrap()).unwrap();
    let run = Command::new(bin())
        .arg("adapter")
        .arg(&socket)
        .arg("--descriptor")
        .arg(&dfile)
        .arg("--root")
        .arg(&root)
        .arg("--session")
        .arg(&only)
        .args(["--color", "never"])
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(1), "{}", String::from_utf8_lossy(&run.stdout));
    let _ = adapter.kill();
    let _ = adapter.wait();
}

fn send_line(s: &mut UnixStream, v: &Value) {
    let mut line = serde_json::to_vec(v).unwrap();
    line.push(b'\n');
    s.write_all(&line).unwrap();
}

fn read_line(r: &mut impl std::io::BufRead) -> Value {
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
}

#[test]
fn the_daemon_side_judges_commands_and_records_and_the_recording_replays() {
    let dir = private_dir("pc-watch-daemon");
    let sock = dir.path().join("d.sock");
    let mut daemon = Command::new(bin())
        .args(["serve-daemon", "--socket"])
        .arg(&sock)
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while UnixStream::connect(&sock).is_err() {
        assert!(t.elapsed() < Duration::from_secs(20), "daemon did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    let rec = dir.path().join("recorded.json");
    let mut w = Watch::start("daemon", dir.path(), &sock, Some(&rec));
    let mut s = UnixStream::connect(&w.socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut r = std::io::BufReader::new(s.try_clone().unwrap());
    send_line(&mut s, &json!({"protocolVersion": "2.0", "requestId": "h-1", "operation": "handshake", "payload": {}}));
    let hs = read_line(&mut r);
    assert_eq!(hs["ok"], true, "{hs}");
    let host = hs["data"]["host"]["hostInstanceId"].as_str().unwrap().to_string();
    // A client's bad command: the client's violation (to-daemon), answered by the daemon.
    send_line(&mut s, &json!({"protocolVersion": "2.0", "requestId": "x-1", "operation": "fly", "payload": {}}));
    assert_eq!(read_line(&mut r)["error"]["code"], "unknown_operation");
    send_line(&mut s, &json!({"protocolVersion": "2.3", "requestId": "s-1", "operation": "status", "payload": {}}));
    let st = read_line(&mut r);
    assert_eq!((st["ok"].as_bool(), st["protocolVersion"].as_str()), (Some(true), Some("2.3")), "{st}");
    drop(r);
    drop(s);
    w.wait_for("the connection's end", |ev| ev.iter().any(|e| e["state"] == "closed"));
    let (code, events) = w.stop();
    let v: Vec<&Value> = events.iter().filter(|e| e["event"] == "violation").collect();
    assert_eq!(v.len(), 1, "only the client's unknown operation: {v:#?}");
    assert_eq!(
        (v[0]["direction"].as_str(), v[0]["clause"].as_str(), v[0]["code"].as_str(), v[0]["field"].as_str()),
        (Some("to-daemon"), Some("PC-2.1"), Some("unknown_operation"), Some("operation"))
    );
    assert!(!events.iter().any(|e| e["event"] == "known-conflict"), "the reference daemon has none of PC-9");
    assert_eq!(code, Some(1));
    let text = std::fs::read_to_string(&rec).unwrap();
    assert!(!text.contains(&host), "the host instance is a placeholder: {text}");
    let sessions: Vec<Value> = serde_json::from_str(&text).unwrap();
    assert_eq!(sessions.len(), 1, "{text}");
    assert_eq!(sessions[0]["accepted"], json!(["ok+error:unknown_operation+ok"]), "{text}");
    let run = Command::new(bin())
        .arg("daemon")
        .arg(&sock)
        .arg("--session")
        .arg(&rec)
        .args(["--color", "never", "--verbose"])
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&run.stdout);
    assert_eq!(run.status.code(), Some(0), "{report}\n{}", String::from_utf8_lossy(&run.stderr));
    assert!(report.contains("1 passed"), "{report}");
    let _ = daemon.kill();
    let _ = daemon.wait();
}
