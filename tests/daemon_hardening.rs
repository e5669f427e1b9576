//! Regression tests for the daemon findings of issue 15, each against `pi-conform
//! serve-daemon` as a real process on a real socket and a real state directory:
//!
//! - F12: idle connections cannot lock other clients out (handshake deadline, idle reclaim at
//!   the connection cap; SPEC PC-1.1).
//! - F13: a tampered state directory is refused at startup with an error naming the file, and
//!   nothing in it is followed, blocked on or read whole (SPEC PC-6, DECISION on the state
//!   directory).
//!
//! And those of issue 25 (round 3):
//!
//! - N4: one owner per state directory (SPEC PC-6, DECISION on one owner per state directory).
//! - N5: attached connections that fall silent cannot lock new clients out either: at the cap
//!   the oldest idle holder is shed, attached or not, a stalled outbound queue first (SPEC
//!   PC-1.1, DECISION on idle connections).
//! - N10: a cap on sessions, resident, dormant and retained closed together (SPEC PC-2.5,
//!   DECISION on the session cap).
//! - N8: a close is durable before it is answered (SPEC PC-2.5, DECISION on durable closes).

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

// ---- N4: one owner per state directory ---------------------------------------------------

/// A second `serve-daemon` on the same state directory (another socket): its exit status, its
/// standard error, and whether it ever listened. A daemon still running after 20 s fails.
fn second_daemon(d: &Daemon, socket: &Path) -> (i32, String, bool) {
    let log = d.dir.path().join("second.log");
    let mut child = Command::new(bin())
        .args(["serve-daemon", "--socket"])
        .arg(socket)
        .arg("--state-dir")
        .arg(&d.state)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let t = Instant::now();
    let mut listened = false;
    loop {
        listened |= UnixStream::connect(socket).is_ok();
        if let Some(st) = child.try_wait().unwrap() {
            return (st.code().unwrap_or(-1), std::fs::read_to_string(&log).unwrap_or_default(), listened);
        }
        if t.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("a second daemon on an owned state directory ran for 20 s (listening: {listened})");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// While a daemon runs, a second one on the same state directory exits at once (status 2) with
/// an error naming the directory and the owner, without ever listening or touching the state;
/// `daemon-state --reconcile` is refused the same way while reading is not; once the first
/// daemon is gone (SIGTERM, or kill -9 as a restart script does), the directory is free.
#[test]
fn n4_a_second_daemon_on_the_same_state_directory_is_refused() {
    let mut d = Daemon::start(&[]);
    let mut c = d.client();
    let cwd = d.dir.path().join("work");
    let open = |rid: &str, generation: u64| {
        json!({"protocolVersion": "2.0", "requestId": rid, "operation": "open", "sessionId": "s", "generation": generation,
        "payload": {"cwd": cwd, "session": {"mode": "new"}, "resources": pi_conform::contract::resources_with_tools(json!("none"))}})
    };
    assert_eq!(c.call(open("o1", 5))["ok"], true);
    let before = std::fs::read(session_file(&d.state, "s")).unwrap();
    let owner = d.child.as_ref().unwrap().id();

    let second = d.dir.path().join("d2.sock");
    let (code, err, listened) = second_daemon(&d, &second);
    assert_eq!(code, 2, "{err}");
    assert!(!listened && !second.exists(), "the second daemon must not listen");
    let dir = d.state.display().to_string();
    assert!(
        err.contains(&format!("state directory {dir} is in use by another daemon (process {owner})")),
        "the refusal must name the directory and its owner: {err}"
    );
    // The state is the first daemon's, untouched, and the first daemon still serves.
    assert_eq!(std::fs::read(session_file(&d.state, "s")).unwrap(), before);
    assert_eq!(c.call(open("o2", 5))["data"]["created"], false);
    // Reconciling writes the state: refused while the daemon owns it; reading is not.
    let out = Command::new(bin()).args(["daemon-state", "--reconcile", "--state-dir"]).arg(&d.state).output().unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains(&format!("state directory {dir} is in use")), "{text}");
    let out = Command::new(bin()).args(["daemon-state", "--state-dir"]).arg(&d.state).output().unwrap();
    assert!(out.status.success(), "reading the state needs no lock: {}", String::from_utf8_lossy(&out.stderr));

    // SIGTERM: the daemon exits and its lock goes with it.
    let mut first = d.child.take().unwrap();
    assert!(Command::new("kill").arg("-TERM").arg(owner.to_string()).status().unwrap().success());
    assert!(first.wait().unwrap().success());
    d.spawn();
    let mut c = d.client();
    assert_eq!(c.call(open("o3", 6))["ok"], true, "the restarted daemon owns the directory");
    // kill -9 and an immediate restart (the restart scripts' pattern): free as well.
    d.kill9();
    d.spawn();
    let mut c = d.client();
    assert_eq!(c.call(open("o4", 7))["ok"], true);
}

// ---- N8: a close is durable before `ok` ----------------------------------------------------

/// Makes a directory unwritable for this process, and writable again when dropped: mode 0500,
/// and for root (whom modes do not stop) the immutable attribute too. `None` when neither
/// stops a write here (the caller skips, saying why).
struct Unwritable(PathBuf, bool);

impl Unwritable {
    fn make(dir: &Path) -> Option<Unwritable> {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o500)).unwrap();
        let probe = dir.join(".probe.tmp");
        let writable = |p: &Path| {
            let ok = std::fs::write(p, b"x").is_ok();
            let _ = std::fs::remove_file(p);
            ok
        };
        if !writable(&probe) {
            return Some(Unwritable(dir.to_path_buf(), false));
        }
        let immutable = Command::new("chattr").arg("+i").arg(dir).status().is_ok_and(|s| s.success());
        let u = Unwritable(dir.to_path_buf(), immutable);
        (immutable && !writable(&probe)).then_some(u)
    }
}

impl Drop for Unwritable {
    fn drop(&mut self) {
        if self.1 {
            let _ = Command::new("chattr").arg("-i").arg(&self.0).status();
        }
        let _ = std::fs::set_permissions(&self.0, std::fs::Permissions::from_mode(0o700));
    }
}

/// With `sessions/` unwritable, `close` (`retainSession:false`, and retained) is refused with
/// `internal_error` naming no file, and the session stays open and live — and after a restart
/// the catalog still holds it. Once the directory is writable, the same close is `ok`, and
/// after a restart the session is gone.
#[test]
fn n8_a_close_that_cannot_be_persisted_is_refused_and_the_session_kept() {
    let mut d = Daemon::start(&[]);
    let mut c = d.client();
    let cwd = d.dir.path().join("work");
    let open = |rid: &str, sid: &str| {
        json!({"protocolVersion": "2.0", "requestId": rid, "operation": "open", "sessionId": sid, "generation": 3,
        "payload": {"cwd": cwd, "session": {"mode": "new"}, "resources": pi_conform::contract::resources_with_tools(json!("none"))}})
    };
    let close = |rid: &str, sid: &str, retain: bool| {
        json!({"protocolVersion": "2.0", "requestId": rid, "operation": "close", "sessionId": sid, "generation": 3,
        "payload": {"retainSession": retain}})
    };
    let status = |rid: &str, sid: &str| json!({"protocolVersion": "2.0", "requestId": rid, "operation": "status", "sessionId": sid, "payload": {}});
    for sid in ["del", "ret"] {
        assert_eq!(c.call(open(&format!("o-{sid}"), sid))["data"]["created"], true);
    }
    let sessions = d.state.join("sessions");
    {
        let Some(_ro) = Unwritable::make(&sessions) else {
            eprintln!("skipped: cannot make a directory unwritable here (mode and chattr both ignored)");
            return;
        };
        for (sid, retain) in [("del", false), ("ret", true)] {
            let r = c.call(close(&format!("c-{sid}"), sid, retain));
            assert_eq!(r["ok"], false, "a close that cannot be persisted must not be ok: {r}");
            assert_eq!(r["error"]["code"], "internal_error", "{r}");
            assert!(!r.to_string().contains("sessions/"), "the error names no file: {r}");
            let st = c.call(status(&format!("s-{sid}"), sid));
            assert_eq!(st["data"]["session"]["state"], "active", "the session stays open: {st}");
        }
        assert!(session_file(&d.state, "del").is_file() && session_file(&d.state, "ret").is_file());
    }
    // A restart: the catalog still holds both (a same-generation open is not a creation).
    d.kill9();
    d.spawn();
    let mut c = d.client();
    for sid in ["del", "ret"] {
        let r = c.call(open(&format!("o2-{sid}"), sid));
        assert_eq!(r["data"]["created"], false, "{sid} must survive the refused close: {r}");
    }
    // Writable again: the delete is ok, durable, and survives a restart.
    let r = c.call(close("c2", "del", false));
    assert_eq!(r["data"]["closed"], true, "{r}");
    assert!(!session_file(&d.state, "del").exists());
    d.kill9();
    d.spawn();
    let mut c = d.client();
    assert_eq!(c.call(open("o3", "del"))["data"]["created"], true, "a deleted session is gone after a restart");
    assert!(d.log_text().contains("cannot record the close"), "{}", d.log_text());
}

// ---- N5: attached, silent connections ------------------------------------------------------

fn attach(rid: &str) -> Value {
    json!({"protocolVersion": "2.0", "requestId": rid, "operation": "attach", "sessionId": "att", "generation": 1, "payload": {}})
}

fn open_memory(d: &Daemon, c: &mut Client) {
    let cwd = d.dir.path().join("work");
    let r = c.call(json!({"protocolVersion": "2.0", "requestId": "o", "operation": "open", "sessionId": "att", "generation": 1,
        "payload": {"cwd": cwd, "session": {"mode": "memory"}, "resources": pi_conform::contract::resources_with_tools(json!("none"))}}));
    assert_eq!(r["ok"], true, "{r}");
}

/// 64 connections attach to a session and then never send or read again: they hold every
/// slot. Five new clients each still get their handshake answer; each takes the slot of the
/// attached connection silent longest (closed without a line), the younger ones stay, and the
/// attached session keeps delivering to them.
#[test]
fn n5_attached_silent_connections_do_not_lock_new_clients_out() {
    let d = Daemon::start(&[]);
    let mut c0 = d.client();
    open_memory(&d, &mut c0);
    assert_eq!(c0.call(attach("a0"))["ok"], true);
    let mut attached = vec![c0];
    for i in 1..64 {
        // Order the silences: connection 0 is silent longest.
        std::thread::sleep(Duration::from_millis(5));
        let mut c = d.client();
        assert_eq!(c.call(attach(&format!("a{i}")))["ok"], true);
        attached.push(c);
    }
    let mut fresh = Vec::new();
    for i in 0..5 {
        let mut c = d.client();
        let r = c.call(handshake(&format!("new{i}")));
        assert_eq!(r["ok"], true, "new client {i} must get its handshake answer: {r}");
        fresh.push(c);
    }
    for (i, c) in attached.iter_mut().enumerate().take(5) {
        assert_eq!(
            closed_within(&mut c.w, Duration::from_secs(10)),
            Some(Vec::new()),
            "the attached connection silent longest ({i}) is shed without a line"
        );
    }
    for (i, c) in attached.iter_mut().enumerate().skip(5) {
        assert_eq!(closed_within(&mut c.w, Duration::from_millis(50)), None, "attached connection {i} must stay");
    }
    for (i, c) in fresh.iter_mut().enumerate() {
        assert_eq!(c.call(handshake(&format!("again{i}")))["ok"], true, "new client {i} keeps its slot");
    }
    // The survivors are still attached: a close reaches them as an event.
    let r = fresh[0].call(json!({"protocolVersion": "2.0", "requestId": "c", "operation": "close", "sessionId": "att", "generation": 1, "payload": {}}));
    assert_eq!(r["ok"], true, "{r}");
    let mut ev = Vec::new();
    attached[63].w.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    attached[63].r.read_until(b'\n', &mut ev).unwrap();
    let ev: Value = serde_json::from_slice(&ev).unwrap();
    assert_eq!(ev["event"], "sessionClosed", "{ev}");
    let log = d.log_text();
    assert!(log.contains("reclaimed the longest idle connection") && log.contains("attached=true"), "{log}");
}

/// A connection whose outbound queue is not being drained (its peer sends requests with large
/// answers and never reads) is shed first at the cap, even though it spoke last; the
/// connection silent longest keeps its slot.
#[test]
fn n5_a_connection_that_does_not_read_its_answers_is_shed_first() {
    let d = Daemon::start(&[]);
    let mut idle: Vec<Client> = Vec::new();
    let mut c0 = d.client();
    open_memory(&d, &mut c0);
    idle.push(c0);
    for i in 1..63 {
        let mut c = d.client();
        assert_eq!(c.call(handshake(&format!("h{i}")))["ok"], true);
        idle.push(c);
    }
    // 63 idle connections, then one that asks for ~1 MiB of answers and reads none of them.
    let mut hog = UnixStream::connect(&d.socket).unwrap();
    let prompt = "x".repeat(250_000);
    for k in 0..4 {
        let w = json!({"protocolVersion": "2.0", "requestId": format!("w{k}"), "operation": "wake", "sessionId": "att", "generation": 1,
            "idempotencyKey": format!("k{k}"), "payload": {"prompt": prompt}});
        hog.write_all(&[serde_json::to_vec(&w).unwrap(), b"\n".to_vec()].concat()).unwrap();
    }
    // Its queue stalls (no progress for a second).
    std::thread::sleep(Duration::from_millis(2500));
    let mut fresh = d.client();
    assert_eq!(fresh.call(handshake("fresh"))["ok"], true, "the 65th client must be served");
    let got = closed_within(&mut hog, Duration::from_secs(10));
    assert!(got.is_some(), "the connection with a stalled outbound queue must be shed");
    assert_eq!(closed_within(&mut idle[0].w, Duration::from_millis(50)), None, "the oldest idle connection stays");
    assert_eq!(idle[0].call(handshake("still"))["ok"], true);
}

// ---- N10: a cap on sessions ------------------------------------------------------------------

/// With `--max-sessions 6`: six sessions are kept (durable and memory alike); a seventh is
/// refused with retryable `session_capacity` naming the cap, while a new generation of a kept
/// session is not a new session. A retained close keeps its slot (its record stays), a delete
/// frees one, and reopening a retained session's id replaces its record. The durable count
/// survives a restart.
#[test]
fn n10_sessions_past_the_cap_are_refused_with_session_capacity() {
    let mut d = Daemon::start(&["--max-sessions", "6"]);
    let mut c = d.client();
    let cwd = d.dir.path().join("work");
    let open = |rid: &str, sid: &str, generation: u64, mode: &str| {
        json!({"protocolVersion": "2.0", "requestId": rid, "operation": "open", "sessionId": sid, "generation": generation,
        "payload": {"cwd": cwd, "session": {"mode": mode}, "resources": pi_conform::contract::resources_with_tools(json!("none"))}})
    };
    let close = |rid: &str, sid: &str, generation: u64, retain: bool| {
        json!({"protocolVersion": "2.0", "requestId": rid, "operation": "close", "sessionId": sid, "generation": generation,
        "payload": {"retainSession": retain}})
    };
    let refused = |r: &Value| {
        assert_eq!(r["ok"], false, "{r}");
        assert_eq!(r["error"]["code"], "session_capacity", "{r}");
        assert_eq!(r["error"]["retryable"], true, "{r}");
        assert_eq!(r["error"]["details"]["maxSessions"], 6, "{r}");
    };
    for i in 0..5 {
        assert_eq!(c.call(open(&format!("o{i}"), &format!("s{i}"), 1, "new"))["data"]["created"], true);
    }
    assert_eq!(c.call(open("om", "mem", 1, "memory"))["data"]["created"], true, "a memory session counts too");
    refused(&c.call(open("x1", "s6", 1, "new")));
    refused(&c.call(open("x2", "mem2", 1, "memory")));
    // Not new sessions: the same generation again, and a higher generation replacing one.
    assert_eq!(c.call(open("r0", "s0", 1, "new"))["data"]["created"], false);
    assert_eq!(c.call(open("g0", "s0", 2, "new"))["data"]["created"], true);
    // A retained close keeps the slot; a delete frees one.
    assert_eq!(c.call(close("c1", "s1", 1, true))["data"]["closed"], true);
    refused(&c.call(open("x3", "s6", 1, "new")));
    assert_eq!(c.call(close("c2", "s2", 1, false))["data"]["closed"], true);
    assert_eq!(c.call(open("o6", "s6", 1, "new"))["data"]["created"], true);
    refused(&c.call(open("x4", "s7", 1, "new")));
    // After a restart the memory session is gone: four durable sessions and one retained
    // record are five, and one more is the sixth.
    d.kill9();
    d.spawn();
    let mut c = d.client();
    assert_eq!(c.call(open("om2", "mem", 1, "memory"))["data"]["created"], true);
    refused(&c.call(open("x5", "s7", 1, "new")));
    // The retained session's id may be opened again: its record is replaced, not added to.
    assert_eq!(c.call(open("o1", "s1", 2, "new"))["data"]["created"], true);
    refused(&c.call(open("x6", "s7", 1, "new")));
    assert_eq!(c.call(close("c3", "s1", 2, false))["data"]["closed"], true);
    assert_eq!(c.call(open("o7", "s7", 1, "new"))["data"]["created"], true);
}

// ---- Issue 25: a durable open answered from a slot -----------------------------------------

/// The files of `sessions/` that are slots holding a record (a write answered before the slot
/// was renamed to the record's name).
fn committed_slots(state: &Path) -> Vec<String> {
    std::fs::read_dir(state.join("sessions"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with("slot."))
        .filter(|n| std::fs::read(state.join("sessions").join(n)).unwrap().starts_with(b"pi-conform-slot-1 "))
        .collect()
}

#[test]
fn issue25_every_answered_durable_open_survives_kill_9_right_after_its_answer() {
    // A new session's record may be answered from a slot (one data flush) and renamed to its
    // own name later. Killed right after the answers, whatever the writer had got to, the
    // restarted daemon has every answered session (a re-open of the same generation and policy
    // is `created:false`), each record under its own name, and no slot left holding one.
    let mut d = Daemon::start(&[]);
    let cwd = d.dir.path().join("work");
    let open = |rid: &str, sid: &str| {
        json!({"protocolVersion": "2.0", "requestId": rid, "operation": "open", "sessionId": sid, "generation": 1,
        "payload": {"cwd": cwd, "session": {"mode": "new"}, "resources": pi_conform::contract::resources_with_tools(json!("none"))}})
    };
    let mut answered: Vec<String> = Vec::new();
    let mut seen_in_slots = 0;
    for round in 0..4 {
        let mut c = d.client();
        for (i, sid) in answered.iter().enumerate() {
            let r = c.call(open(&format!("re{round}-{i}"), sid));
            assert_eq!(r["data"]["created"], false, "{sid} was answered before a kill -9 but is gone: {r}");
            assert!(
                session_file(&d.state, sid).is_file(),
                "{sid}'s record is not under its own name after the restart"
            );
        }
        assert!(committed_slots(&d.state).is_empty(), "a slot still holds a record after the restart");
        for i in 0..6 {
            let sid = format!("r{round}-s{i}");
            let r = c.call(open(&format!("o{round}-{i}"), &sid));
            assert_eq!(r["data"]["created"], true, "{r}");
            answered.push(sid);
        }
        d.kill9();
        seen_in_slots += committed_slots(&d.state).len();
        d.spawn();
    }
    eprintln!("{seen_in_slots} answered records were still in their slot at a kill -9");
}
