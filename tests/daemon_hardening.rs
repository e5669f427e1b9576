//! Regression tests for the daemon findings of issue 15, each against `pi-conform
//! serve-daemon` as a real process on a real socket and a real state directory:
//!
//! - F12: idle connections cannot lock other clients out (handshake deadline, idle reclaim at
//!   the connection cap; SPEC PC-1.1).
//! - F13: a tampered state directory is refused at startup with an error naming the file, and
//!   nothing in it is followed, blocked on or read whole (SPEC PC-6, DECISION on the state
//!   directory).

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::bin;

struct Daemon {
    dir: tempfile::TempDir,
    socket: PathBuf,
    state: PathBuf,
    log: PathBuf,
    args: Vec<String>,
    child: Option<Child>,
}

impl Daemon {
    fn new(args: &[&str]) -> Daemon {
        let dir = tempfile::Builder::new().prefix("pc-dharden").tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let socket = dir.path().join("d.sock");
        let state = dir.path().join("state");
        let log = dir.path().join("daemon.log");
        Daemon { dir, socket, state, log, args: args.iter().map(|s| s.to_string()).collect(), child: None }
    }

    fn start(args: &[&str]) -> Daemon {
        let mut d = Daemon::new(args);
        d.spawn();
        d
    }

    fn command(&self) -> Command {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log).unwrap();
        let mut c = Command::new(bin());
        c.args(["serve-daemon", "--socket"])
            .arg(&self.socket)
            .arg("--state-dir")
            .arg(&self.state)
            .args(&self.args)
            .stdout(Stdio::null())
            .stderr(log);
        c
    }

    fn spawn(&mut self) {
        let _ = std::fs::remove_file(&self.socket);
        let mut child = self.command().spawn().unwrap();
        let t = Instant::now();
        while UnixStream::connect(&self.socket).is_err() {
            if let Ok(Some(st)) = child.try_wait() {
                panic!("daemon exited at start ({st}): {}", self.log_text());
            }
            assert!(t.elapsed() < Duration::from_secs(20), "daemon did not start: {}", self.log_text());
            std::thread::sleep(Duration::from_millis(20));
        }
        self.child = Some(child);
    }

    /// Start a daemon that must refuse to start: its exit status and standard error. A daemon
    /// that starts listening, or is still running after 20 s (hung on the state), fails.
    fn start_refused(&self) -> (i32, String) {
        let _ = std::fs::remove_file(&self.socket);
        let mut child = self.command().stderr(Stdio::piped()).spawn().unwrap();
        let mut stderr = child.stderr.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut err = String::new();
            let _ = stderr.read_to_string(&mut err);
            err
        });
        let t = Instant::now();
        loop {
            if let Some(st) = child.try_wait().unwrap() {
                return (st.code().unwrap_or(-1), reader.join().unwrap());
            }
            let listening = UnixStream::connect(&self.socket).is_ok();
            let hung = t.elapsed() > Duration::from_secs(20);
            if listening || hung {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "the daemon {} on a tampered state directory instead of refusing to start",
                    if listening { "started listening" } else { "hung for 20 s" }
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn client(&self) -> Client {
        Client::connect(&self.socket)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill9();
    }
}

struct Client {
    r: BufReader<UnixStream>,
    w: UnixStream,
}

impl Client {
    fn connect(p: &Path) -> Client {
        let s = UnixStream::connect(p).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        Client { r: BufReader::new(s.try_clone().unwrap()), w: s }
    }
    fn send(&mut self, v: &Value) {
        let mut l = serde_json::to_vec(v).unwrap();
        l.push(b'\n');
        self.w.write_all(&l).unwrap();
    }
    fn call(&mut self, v: Value) -> Value {
        let rid = v["requestId"].as_str().unwrap().to_string();
        self.send(&v);
        loop {
            let mut l = Vec::new();
            let n = self.r.read_until(b'\n', &mut l).unwrap_or(0);
            assert!(n > 0, "closed before the response to {rid}");
            let v: Value = serde_json::from_slice(&l).unwrap();
            if v["kind"] != "event" && v["requestId"] == rid {
                return v;
            }
        }
    }
}

/// What the daemon does to a connection within `within`: `Some(bytes)` when it closed it
/// (with the bytes it wrote first), `None` when it is still open.
fn closed_within(s: &mut UnixStream, within: Duration) -> Option<Vec<u8>> {
    s.set_read_timeout(Some(within)).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return Some(got),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => return None,
            Err(_) => return Some(got),
        }
    }
}

fn handshake(rid: &str) -> Value {
    json!({"protocolVersion": "2.0", "requestId": rid, "operation": "handshake", "payload": {}})
}

// ---- F12: idle connections -------------------------------------------------------------

/// 64 connections that each completed a handshake and then went silent (so the handshake
/// deadline does not apply to them) hold every slot; a new client is still served, and the
/// connection reclaimed for it is the one silent longest, closed without a line.
#[test]
fn f12_idle_connections_at_the_cap_are_reclaimed_for_a_new_client() {
    let d = Daemon::start(&[]);
    let mut idle: Vec<Client> = (0..64)
        .map(|i| {
            let mut c = d.client();
            let r = c.call(handshake(&format!("h{i}")));
            assert_eq!(r["ok"], true, "{r}");
            // Order the silences: connection 0 is silent longest.
            std::thread::sleep(Duration::from_millis(5));
            c
        })
        .collect();
    let mut fresh = d.client();
    let r = fresh.call(handshake("fresh"));
    assert_eq!(r["ok"], true, "the 65th client must be served: {r}");
    assert_eq!(
        closed_within(&mut idle[0].w, Duration::from_secs(10)),
        Some(Vec::new()),
        "the longest idle connection is closed without a line"
    );
    // The others are still there and served.
    for (i, c) in idle.iter_mut().enumerate().skip(1) {
        let r = c.call(handshake(&format!("again{i}")));
        assert_eq!(r["ok"], true, "connection {i} must survive: {r}");
    }
    assert!(d.log_text().contains("reclaimed the longest idle connection"), "{}", d.log_text());
}

/// Connections that never send a complete line are closed (without a line) at the handshake
/// deadline, even below the cap; a partial line does not count.
#[test]
fn f12_silent_connections_are_closed_at_the_handshake_deadline() {
    let d = Daemon::start(&["--handshake-deadline-ms", "400"]);
    let mut silent: Vec<UnixStream> = (0..64).map(|_| UnixStream::connect(&d.socket).unwrap()).collect();
    // One sends half a line and stops.
    silent[1].write_all(b"{\"protocolVersion\":\"2.0\",").unwrap();
    for (i, s) in silent.iter_mut().enumerate() {
        assert_eq!(
            closed_within(s, Duration::from_secs(15)),
            Some(Vec::new()),
            "silent connection {i} must be closed without a line at the deadline"
        );
    }
    // A client that speaks in time is served and then kept past the deadline.
    let mut c = d.client();
    assert_eq!(c.call(handshake("a"))["ok"], true);
    std::thread::sleep(Duration::from_millis(800));
    assert_eq!(c.call(handshake("b"))["ok"], true, "a connection that spoke is not subject to the deadline");
    assert!(d.log_text().contains("handshake deadline"), "{}", d.log_text());
}

/// Attached connections are not idle: 64 of them keep every slot, and the 65th connection is
/// closed without a line (SPEC PC-1.1), while every attached one keeps working.
#[test]
fn f12_attached_connections_are_never_reclaimed() {
    let d = Daemon::start(&[]);
    let cwd = tempfile::tempdir().unwrap();
    let mut c0 = d.client();
    let r = c0.call(json!({"protocolVersion": "2.0", "requestId": "o", "operation": "open", "sessionId": "att", "generation": 1,
        "payload": {"cwd": cwd.path(), "session": {"mode": "memory"}, "resources": pi_conform::contract::resources_with_tools(json!("none"))}}));
    assert_eq!(r["ok"], true, "{r}");
    let attach = |rid: &str| json!({"protocolVersion": "2.0", "requestId": rid, "operation": "attach", "sessionId": "att", "generation": 1, "payload": {}});
    assert_eq!(c0.call(attach("a0"))["ok"], true);
    let mut attached = vec![c0];
    for i in 1..64 {
        let mut c = d.client();
        let r = c.call(attach(&format!("a{i}")));
        assert_eq!(r["ok"], true, "{r}");
        attached.push(c);
    }
    let mut extra = UnixStream::connect(&d.socket).unwrap();
    let _ = extra.write_all(&[serde_json::to_vec(&handshake("x")).unwrap(), b"\n".to_vec()].concat());
    assert_eq!(
        closed_within(&mut extra, Duration::from_secs(10)),
        Some(Vec::new()),
        "with every connection attached the new one is closed without a line"
    );
    for (i, c) in attached.iter_mut().enumerate() {
        assert_eq!(c.call(handshake(&format!("s{i}")))["ok"], true, "attached connection {i} must survive");
    }
}

// ---- F13: the state directory ----------------------------------------------------------

fn digest_name(parts: &[&str]) -> String {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0]);
    }
    format!("{}.json", hex::encode(h.finalize()))
}

/// The file of a session's catalog record.
fn session_file(state: &Path, id: &str) -> PathBuf {
    state.join("sessions").join(digest_name(&[id]))
}

/// The file of a wake's journal record.
fn wake_file(state: &Path, id: &str, generation: u64, key: &str) -> PathBuf {
    state.join("wakes").join(digest_name(&[id, &generation.to_string(), key]))
}

/// A daemon with durable sessions `ids` (tools "none"), each with one completed wake `k1`,
/// then killed: the state directory a tamper starts from.
fn prepared(ids: &[&str]) -> Daemon {
    let mut d = Daemon::start(&[]);
    let mut c = d.client();
    let cwd = d.dir.path().join("work");
    for id in ids {
        let r = c.call(json!({"protocolVersion": "2.0", "requestId": format!("o-{id}"), "operation": "open", "sessionId": id, "generation": 1,
            "payload": {"cwd": cwd, "session": {"mode": "new"}, "resources": pi_conform::contract::resources_with_tools(json!("none"))}}));
        assert_eq!(r["ok"], true, "{r}");
        let r = c.call(json!({"protocolVersion": "2.0", "requestId": format!("w-{id}"), "operation": "wake", "sessionId": id, "generation": 1,
            "idempotencyKey": "k1", "payload": {"prompt": format!("hello {id}")}}));
        assert_eq!(r["data"]["result"]["text"], format!("hello {id}"), "{r}");
        assert!(session_file(&d.state, id).is_file() && wake_file(&d.state, id, 1, "k1").is_file());
    }
    d.kill9();
    d
}

/// The refusal: non-zero exit, and the message names `file` and says `why`.
fn assert_refused(d: &Daemon, file: &Path, why: &str) {
    let (code, err) = d.start_refused();
    assert_ne!(code, 0, "{err}");
    assert!(err.contains(&file.display().to_string()), "the refusal must name {}: {err}", file.display());
    assert!(err.contains(why), "the refusal must say {why:?}: {err}");
    // `daemon-state` refuses the same directory with the same reason.
    let out = Command::new(bin()).args(["daemon-state", "--state-dir"]).arg(&d.state).output().unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && text.contains(why), "daemon-state must refuse too: {text}");
}

#[test]
fn f13_a_fifo_record_is_refused_without_blocking() {
    let d = prepared(&["s1"]);
    let f = session_file(&d.state, "s1");
    std::fs::remove_file(&f).unwrap();
    let st = Command::new("mkfifo").arg("-m").arg("600").arg(&f).status().unwrap();
    assert!(st.success());
    assert_refused(&d, &f, "is a FIFO, not a regular file");
    // In the journal too.
    let d = prepared(&["s1"]);
    let f = wake_file(&d.state, "s1", 1, "k1");
    std::fs::remove_file(&f).unwrap();
    assert!(Command::new("mkfifo").arg("-m").arg("600").arg(&f).status().unwrap().success());
    assert_refused(&d, &f, "is a FIFO, not a regular file");
}

#[test]
fn f13_a_missing_journal_is_refused_not_replayed() {
    // The whole directory.
    let d = prepared(&["s1"]);
    std::fs::remove_dir_all(d.state.join("wakes")).unwrap();
    assert_refused(&d, &d.state.join("wakes"), "is missing from an initialised state directory");
    // Recreated empty: the session's high-water mark still counts its wake.
    std::fs::create_dir(d.state.join("wakes")).unwrap();
    std::fs::set_permissions(d.state.join("wakes"), std::fs::Permissions::from_mode(0o700)).unwrap();
    assert_refused(&d, &session_file(&d.state, "s1"), "counts 1 journaled wakes of its session but");
    // One record removed out of two sessions' journals.
    let d = prepared(&["s1", "s2"]);
    std::fs::remove_file(wake_file(&d.state, "s2", 1, "k1")).unwrap();
    assert_refused(&d, &session_file(&d.state, "s2"), "wake records are missing");
}

#[test]
fn f13_a_missing_catalog_is_refused() {
    let d = prepared(&["s1"]);
    std::fs::remove_dir_all(d.state.join("sessions")).unwrap();
    assert_refused(&d, &d.state.join("sessions"), "is missing from an initialised state directory");
    // Without the manifest either, the journal's records still show it was initialised.
    std::fs::remove_file(d.state.join("manifest.json")).unwrap();
    assert_refused(&d, &d.state.join("manifest.json"), "is missing although");
}

#[test]
fn f13_a_record_copied_over_another_sessions_file_is_refused() {
    let d = prepared(&["s1", "s2"]);
    let victim = session_file(&d.state, "s2");
    std::fs::copy(session_file(&d.state, "s1"), &victim).unwrap();
    assert_refused(&d, &victim, "copied or renamed over another record");
    // A journal record likewise.
    let d = prepared(&["s1", "s2"]);
    let victim = wake_file(&d.state, "s2", 1, "k1");
    std::fs::copy(wake_file(&d.state, "s1", 1, "k1"), &victim).unwrap();
    assert_refused(&d, &victim, "copied or renamed over another record");
}

#[test]
fn f13_a_symlinked_state_subdirectory_is_refused_and_never_written_through() {
    for sub in ["sessions", "wakes"] {
        let d = prepared(&["s1"]);
        let elsewhere = d.dir.path().join(format!("elsewhere-{sub}"));
        std::fs::rename(d.state.join(sub), &elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, d.state.join(sub)).unwrap();
        let before: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(&elsewhere)
            .unwrap()
            .map(|e| {
                let p = e.unwrap().path();
                let b = std::fs::read(&p).unwrap();
                (p, b)
            })
            .collect();
        let (code, err) = d.start_refused();
        assert_ne!(code, 0);
        assert!(
            err.contains(&d.state.join(sub).display().to_string()) && err.contains("must be a real directory"),
            "{err}"
        );
        let after: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(&elsewhere)
            .unwrap()
            .map(|e| {
                let p = e.unwrap().path();
                let b = std::fs::read(&p).unwrap();
                (p, b)
            })
            .collect();
        assert_eq!(before, after, "nothing may be written through the symlinked {sub}/");
    }
}

#[test]
fn f13_invalid_values_are_refused() {
    for (field, value, why) in [
        ("state", json!("bogus"), "holds an invalid value: state \"bogus\" is not one of active, dormant, closed"),
        ("generation", json!(u64::MAX), "holds an invalid value: generation 18446744073709551615 is over 2^53-1"),
        ("wakes", json!(-1), "is not a valid session record"),
    ] {
        let d = prepared(&["s1"]);
        let f = session_file(&d.state, "s1");
        let mut v: Value = serde_json::from_slice(&std::fs::read(&f).unwrap()).unwrap();
        v[field] = value;
        std::fs::write(&f, serde_json::to_vec(&v).unwrap()).unwrap();
        assert_refused(&d, &f, why);
    }
    let d = prepared(&["s1"]);
    let f = wake_file(&d.state, "s1", 1, "k1");
    let mut v: Value = serde_json::from_slice(&std::fs::read(&f).unwrap()).unwrap();
    v["state"] = json!("completed");
    v["result"] = Value::Null;
    std::fs::write(&f, serde_json::to_vec(&v).unwrap()).unwrap();
    assert_refused(&d, &f, "a completed wake must hold a result and no error");
}

#[test]
fn f13_an_oversized_record_is_refused_unread() {
    let d = prepared(&["s1"]);
    let f = session_file(&d.state, "s1");
    // 1 GiB, sparse: refused from its size alone.
    std::fs::OpenOptions::new().write(true).open(&f).unwrap().set_len(1 << 30).unwrap();
    assert_refused(&d, &f, "is 1073741824 bytes, over the 16777216-byte record limit (not read)");
}

#[test]
fn f13_an_untampered_state_directory_restarts_and_answers_from_the_journal() {
    // The negative control of the tamper tests: the same preparation, no tamper, starts and
    // answers the completed wake from the journal instead of running it again.
    let mut d = prepared(&["s1"]);
    d.spawn();
    let mut c = d.client();
    let cwd = d.dir.path().join("work");
    let r = c.call(json!({"protocolVersion": "2.0", "requestId": "o", "operation": "open", "sessionId": "s1", "generation": 1,
        "payload": {"cwd": cwd, "session": {"mode": "new"}, "resources": pi_conform::contract::resources_with_tools(json!("none"))}}));
    assert_eq!(r["ok"], true, "{r}");
    let r = c.call(
        json!({"protocolVersion": "2.0", "requestId": "w", "operation": "wake", "sessionId": "s1", "generation": 1,
        "idempotencyKey": "k1", "payload": {"prompt": "hello s1"}}),
    );
    assert_eq!(r["data"]["result"]["text"], "hello s1", "{r}");
    let r = c.call(
        json!({"protocolVersion": "2.0", "requestId": "w2", "operation": "wake", "sessionId": "s1", "generation": 1,
        "idempotencyKey": "k1", "payload": {"prompt": "another payload"}}),
    );
    assert_eq!(r["error"]["code"], "idempotency_conflict", "{r}");
    d.kill9();
}
