//! Regression tests for the daemon findings of issue 15, each against `pi-conform
//! serve-daemon` as a real process on a real socket and a real state directory:
//!
//! - F12: idle connections cannot lock other clients out (handshake deadline, idle reclaim at
//!   the connection cap; SPEC PC-1.1).

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
    _dir: tempfile::TempDir,
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
        Daemon { _dir: dir, socket, state, log, args: args.iter().map(|s| s.to_string()).collect(), child: None }
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
