//! Interoperability with a real Pi Daemon 0.3.3 (issue 12, deliverable 3).
//!
//! Skipped (with the reason printed) unless `PI_DAEMON_DIST` (the built `dist/` holding
//! `cli.js`) and `PI_DAEMON_NODE` (a node 22 binary) are set; CI runs without them. With them,
//! each test starts its own rig with `scripts/real-peer/start` (fake-model on a loopback port it
//! picks, the daemon on `<R>/run/pid.sock`, `--allow-root <R>/work`), under a short private
//! directory `R = /tmp/ie-<pid>-<tag>`, and stops it again whatever happens (a Drop guard). The
//! rig directory is removed after a passing test and kept (its path printed) after a failing
//! one.
//!
//! - `daemon_suite_against_real_pi_daemon`: `pi-conform daemon` with `--restart-cmd` (the rig's
//!   `restart`, kill -9 and start again) and `conformance/pi-daemon-0.3.3.baseline`: no failure
//!   outside the baseline, no harness error, no stale baseline entry.
//! - `end_to_end_real_daemon_drives_reference_adapter`: the real daemon drives
//!   `pi-conform serve-adapter` through fake-model turns for all six operations, one adapter
//!   error, `../` attempts, then kill -9, quarantine, refusal of a no-tools reopen, and
//!   reprovisioning through a fresh grant; the capability handles never appear in any log,
//!   state file, response or event.
//!
//! The two tests run one at a time (a lock): the suite has timing-sensitive cases and the
//! machine may have two cores.

use std::fs;
use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use pi_conform::contract::resources_with_tools;

/// One rig at a time.
static SERIAL: Mutex<()> = Mutex::new(());

const BIN: &str = env!("CARGO_BIN_EXE_pi-conform");
const MANIFEST_DIR: &str = env!("CARGO_MANIFEST_DIR");
const SESSION: &str = "e2e-1";
/// Written beside the adapter's root; must never be read, changed or revealed.
const SENTINEL: &str = "SENTINEL-7f3a9c: outside the root, never to be read\n";

/// The peer's settings, or `None` (with the reason printed) when the test must be skipped.
fn peer() -> Option<(PathBuf, PathBuf)> {
    match (std::env::var_os("PI_DAEMON_DIST"), std::env::var_os("PI_DAEMON_NODE")) {
        (Some(dist), Some(node)) => Some((PathBuf::from(dist), PathBuf::from(node))),
        _ => {
            println!(
                "skipped: set PI_DAEMON_DIST (the built dist/ of Pi Daemon 0.3.3) and PI_DAEMON_NODE (a node 22 \
                 binary) to run this test against a real Pi Daemon (see scripts/real-peer/common.sh)"
            );
            None
        }
    }
}

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn script(name: &str) -> PathBuf {
    Path::new(MANIFEST_DIR).join("scripts/real-peer").join(name)
}

/// Run `cmd` to completion within `limit`, its output in files under `dir` (a child that
/// inherits a pipe can never make us wait). Killed and reported on timeout.
fn run_timed(mut cmd: Command, dir: &Path, tag: &str, limit: Duration) -> (ExitStatus, String, String) {
    let out = dir.join(format!("{tag}.stdout"));
    let err = dir.join(format!("{tag}.stderr"));
    cmd.stdin(Stdio::null())
        .stdout(fs::File::create(&out).expect("stdout file"))
        .stderr(fs::File::create(&err).expect("stderr file"));
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("{tag}: cannot spawn: {e}"));
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(s) = child.try_wait().expect("try_wait") {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{tag}: still running after {limit:?}; killed. stderr:\n{}",
                fs::read_to_string(&err).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    (status, fs::read_to_string(&out).unwrap_or_default(), fs::read_to_string(&err).unwrap_or_default())
}

// ---------------------------------------------------------------------------------------------
// The rig

/// A running rig (fake-model + Pi Daemon); stopped on drop, even while panicking.
struct Rig {
    dir: PathBuf,
    dist: PathBuf,
    node: PathBuf,
    /// Where this test's own command output goes (outside the rig's own files).
    out: PathBuf,
}

impl Rig {
    fn start(tag: &str, dist: PathBuf, node: PathBuf) -> Rig {
        let dir = PathBuf::from(format!("/tmp/ie-{}-{tag}", std::process::id()));
        let rig = Rig { out: dir.join("test-out"), dir, dist, node };
        if rig.dir.exists() {
            rig.script("stop", Duration::from_secs(30));
            fs::remove_dir_all(&rig.dir).expect("remove an old rig directory");
        }
        fs::create_dir(&rig.dir).expect("rig directory");
        fs::set_permissions(&rig.dir, fs::Permissions::from_mode(0o700)).unwrap();
        fs::create_dir(&rig.out).unwrap();
        let t = Instant::now();
        let (st, out, err) = rig.script("start", Duration::from_secs(60));
        assert!(st.success(), "scripts/real-peer/start failed ({st}):\n{err}\n--- daemon.log:\n{}", rig.daemon_log());
        assert_eq!(out.trim(), rig.socket().to_str().unwrap(), "start prints the daemon socket");
        println!("rig {} up in {:?}", rig.dir.display(), t.elapsed());
        rig
    }

    fn socket(&self) -> PathBuf {
        self.dir.join("run/pid.sock")
    }

    fn work(&self) -> PathBuf {
        self.dir.join("work")
    }

    /// The environment the rig's scripts read (also exported to `pi-conform daemon`, so that
    /// `--restart-cmd` works).
    fn env(&self, cmd: &mut Command) {
        cmd.env("PI_DAEMON_DIST", &self.dist)
            .env("PI_DAEMON_NODE", &self.node)
            .env("PI_PEER_DIR", &self.dir)
            .env("PI_PEER_PORT", "0")
            .env("PI_CONFORM", BIN);
    }

    fn script(&self, name: &str, limit: Duration) -> (ExitStatus, String, String) {
        let mut cmd = Command::new("sh");
        cmd.arg(script(name));
        self.env(&mut cmd);
        let out = if self.out.is_dir() { self.out.clone() } else { std::env::temp_dir() };
        run_timed(cmd, &out, &format!("{name}-{}", std::process::id()), limit)
    }

    /// kill -9 and start again: a new hostInstanceId, the same state directory.
    fn restart(&self) {
        let (st, _, err) = self.script("restart", Duration::from_secs(60));
        assert!(st.success(), "scripts/real-peer/restart failed ({st}):\n{err}");
    }

    fn daemon_log(&self) -> String {
        fs::read_to_string(self.dir.join("daemon.log")).unwrap_or_default()
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        let (st, _, err) = self.script("stop", Duration::from_secs(30));
        if !st.success() {
            eprintln!("scripts/real-peer/stop failed ({st}): {err}");
        }
        // Whatever stop could not do: the processes named by the pid files.
        for f in ["daemon.pid", "fake-model.pid"] {
            if let Ok(pid) = fs::read_to_string(self.dir.join(f)) {
                let _ = Command::new("kill").arg("-9").arg(pid.trim()).status();
            }
        }
        if std::thread::panicking() {
            eprintln!("rig directory kept for inspection: {}", self.dir.display());
        } else {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

/// A child process killed (and reaped) on drop.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

// ---------------------------------------------------------------------------------------------
// A raw NDJSON client of the daemon socket

struct Client {
    s: UnixStream,
    buf: Vec<u8>,
    /// Every line the daemon sent, verbatim.
    received: Vec<String>,
    /// Every event, in arrival order.
    events: Vec<Value>,
    next: u64,
}

impl Client {
    fn connect(socket: &Path) -> Client {
        let s = UnixStream::connect(socket).unwrap_or_else(|e| panic!("connect {}: {e}", socket.display()));
        s.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
        s.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
        Client { s, buf: Vec::new(), received: Vec::new(), events: Vec::new(), next: 0 }
    }

    /// The next line, or `None` at EOF; panics past `deadline`.
    fn line(&mut self, deadline: Instant, what: &str) -> Option<Value> {
        loop {
            if let Some(i) = self.buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=i).collect();
                let text = String::from_utf8(line[..i].to_vec()).expect("the daemon sent invalid UTF-8");
                let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
                self.received.push(text);
                if v["kind"] == "event" {
                    self.events.push(v.clone());
                }
                return Some(v);
            }
            if Instant::now() > deadline {
                panic!("timed out waiting for {what}");
            }
            let mut chunk = [0u8; 65536];
            match self.s.read(&mut chunk) {
                Ok(0) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted) => {}
                Err(e) if e.kind() == ErrorKind::ConnectionReset => return None,
                Err(e) => panic!("read from the daemon: {e}"),
            }
        }
    }

    /// Send one v2 command and return its response (events met meanwhile are kept).
    fn request(&mut self, op: &str, env: Value, payload: Value, limit: Duration) -> Value {
        self.next += 1;
        let rid = format!("ie-{op}-{}", self.next);
        let mut cmd = json!({"protocolVersion": "2.0", "requestId": rid, "operation": op, "payload": payload});
        if let Value::Object(m) = env {
            for (k, v) in m {
                cmd[k] = v;
            }
        }
        let mut line = serde_json::to_vec(&cmd).unwrap();
        line.push(b'\n');
        self.s.write_all(&line).unwrap_or_else(|e| panic!("send {op}: {e}"));
        let deadline = Instant::now() + limit;
        loop {
            let Some(v) = self.line(deadline, &format!("the response to {op} {rid}")) else {
                panic!("the daemon closed the connection before answering {op} {rid}");
            };
            if v["kind"] == "response" && v["requestId"] == rid.as_str() {
                return v;
            }
        }
    }

    fn handshake(&mut self) -> Value {
        let r = self.request("handshake", json!({}), json!({}), Duration::from_secs(20));
        assert_eq!(r["ok"], true, "handshake: {r}");
        r["data"].clone()
    }

    /// Read until an event of `session` with a sequence ≥ `seq` has arrived.
    fn events_through(&mut self, session: &str, seq: u64, limit: Duration) {
        let deadline = Instant::now() + limit;
        while !self.events.iter().any(|e| e["sessionId"] == session && e["sequence"].as_u64().is_some_and(|s| s >= seq))
        {
            if self.line(deadline, &format!("events of {session} through sequence {seq}")).is_none() {
                panic!("the daemon closed the connection before event {seq} of {session}");
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 1. The daemon suite

#[test]
fn daemon_suite_against_real_pi_daemon() {
    let Some((dist, node)) = peer() else { return };
    let _serial = serial();
    let t = Instant::now();
    let baseline = Path::new(MANIFEST_DIR).join("conformance/pi-daemon-0.3.3.baseline");
    let rig = Rig::start("s", dist, node);
    let mut cmd = Command::new(BIN);
    cmd.arg("daemon")
        .arg(rig.socket())
        .arg("--cwd")
        .arg(rig.work().join("suite"))
        .args(["--model", "fakellm/fake-model"])
        .arg("--restart-cmd")
        .arg(script("restart"))
        // A graceful stop (SIGTERM): daemon.shutdown.revokes-bindings.
        .arg("--stop-cmd")
        .arg(script("stop-daemon"))
        // Where the rig keeps Pi Daemon's state and its log (daemon.secrets.at-rest).
        .arg("--scan-path")
        .arg(rig.dir.join("state"))
        .arg("--scan-path")
        .arg(rig.dir.join("daemon.log"))
        .args(["--format", "json"]);
    // Without the baseline the run still happens and is printed in full, then the test fails.
    if baseline.is_file() {
        cmd.arg("--baseline").arg(&baseline);
    }
    rig.env(&mut cmd);
    let (st, out, err) = run_timed(cmd, &rig.out, "suite", Duration::from_secs(600));
    let report: Value = serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("the report is not JSON ({e}); exit {st}; stderr:\n{err}\nstdout:\n{out}"));
    let s = &report["summary"];
    println!(
        "daemon suite against {}: {} passed, {} failed, {} known failures (baseline), {} warnings, {} skipped, {} \
         harness errors, {} stale baseline entries (exit {}, {:?})",
        rig.socket().display(),
        s["passed"],
        s["failed"],
        s["baselined"],
        s["warned"],
        s["skipped"],
        s["errors"],
        s["stale"],
        st.code().map_or("signal".into(), |c| c.to_string()),
        t.elapsed()
    );
    let results = report["results"].as_array().expect("results");
    let mut bad = Vec::new();
    for r in results {
        let (status, baselined) = (r["status"].as_str().unwrap_or(""), r["baselined"] == true);
        let tag = match (status, baselined) {
            (_, true) => "KNOWN",
            ("fail", _) => "FAIL",
            ("error", _) => "ERROR",
            ("warn", _) => "WARN",
            ("skip", _) => "SKIP",
            _ => continue,
        };
        println!("  {tag} {}: expected {}; actual {}; {}", r["id"], r["expected"], r["actual"], r["reason"]);
        if matches!(tag, "FAIL" | "ERROR") {
            bad.push(format!("{tag} {}", r["id"]));
        }
    }
    let stale: Vec<&Value> = report["stale"].as_array().map(|a| a.iter().collect()).unwrap_or_default();
    let unknown: Vec<&Value> = report["unknownBaselineIds"].as_array().map(|a| a.iter().collect()).unwrap_or_default();
    assert!(baseline.is_file(), "{} is missing", baseline.display());
    assert!(bad.is_empty(), "cases failing or broken outside the baseline: {bad:?}");
    assert!(stale.is_empty(), "stale baseline entries (these cases now pass): {stale:?}");
    assert!(unknown.is_empty(), "the baseline names no such cases: {unknown:?}");
    assert_eq!(report["exitCode"], 0, "the report's exit code");
    assert!(st.success(), "pi-conform daemon exited {st}; stderr:\n{err}");
}

// ---------------------------------------------------------------------------------------------
// 2. End to end: the real daemon drives the reference adapter

/// What one wake produced: the response and the `toolEnd` events of its turn, in order.
struct Turn {
    response: Value,
    tool_ends: Vec<Value>,
}

impl Turn {
    /// The one toolEnd of `tool`.
    fn tool_end(&self, tool: &str) -> &Value {
        let v: Vec<&Value> = self.tool_ends.iter().filter(|e| e["data"]["toolName"] == tool).collect();
        assert_eq!(v.len(), 1, "exactly one toolEnd for {tool}: {:?}", self.tool_ends);
        v[0]
    }

    /// The text of `tool`'s result (`result.content[0].text`), asserting `isError`.
    fn text(&self, tool: &str, is_error: bool) -> String {
        let e = self.tool_end(tool);
        assert_eq!(e["data"]["isError"], is_error, "isError of {tool}: {e}");
        e["data"]["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("no text in the result of {tool}: {e}"))
            .to_string()
    }

    /// The result of `tool`, which must have succeeded, parsed from its JSON text.
    fn data(&self, tool: &str) -> Value {
        let text = self.text(tool, false);
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{tool}'s result is not JSON ({e}): {text}"))
    }

    /// Per-operation `(completed, failed)` from the session's hostToolAdapterQueue telemetry.
    fn counts(&self, op: &str) -> (u64, u64) {
        let q = &self.response["data"]["session"]["hostToolAdapterQueue"];
        let o = q["operations"]
            .as_array()
            .and_then(|a| a.iter().find(|o| o["operation"] == op))
            .unwrap_or_else(|| panic!("no telemetry for {op}: {q}"));
        (o["completedRequests"].as_u64().unwrap(), o["failedRequests"].as_u64().unwrap())
    }
}

fn tool_line(tool: &str, args: Value) -> String {
    format!("TOOL {tool} {args}")
}

fn wake(c: &mut Client, key: &str, lines: &[String]) -> Turn {
    let response = c.request(
        "wake",
        json!({"sessionId": SESSION, "generation": 1, "idempotencyKey": key}),
        json!({"prompt": lines.join("\n")}),
        Duration::from_secs(90),
    );
    assert_eq!(response["ok"], true, "wake {key}: {response}");
    let rid = response["requestId"].as_str().unwrap().to_string();
    if let Some(seq) = response["sequence"].as_u64() {
        c.events_through(SESSION, seq, Duration::from_secs(10));
    }
    let tool_ends: Vec<Value> = c
        .events
        .iter()
        .filter(|e| e["event"] == "toolEnd" && e["requestId"] == rid.as_str() && e["sessionId"] == SESSION)
        .cloned()
        .collect();
    assert_eq!(tool_ends.len(), lines.len(), "one toolEnd per tool call of wake {key}: {tool_ends:?}");
    Turn { response, tool_ends }
}

fn sha256_hex(b: &[u8]) -> String {
    hex::encode(Sha256::digest(b))
}

/// The reference adapter with its grants, descriptors and log.
struct Adapter {
    /// The descriptors (the only files allowed to hold a handle).
    desc_dir: PathBuf,
    /// Output of the commands run here (checked for handles too).
    out: PathBuf,
    root: PathBuf,
    socket: PathBuf,
    grants: PathBuf,
    log: PathBuf,
    proc: Option<Proc>,
    /// With `PI_CONFORM_INTEROP_WATCH=1`: the adapter listens here, and `pi-conform watch
    /// adapter` on `socket` (the descriptor's endpoint) proxies and judges the daemon's traffic.
    upstream: PathBuf,
    watch: Option<Proc>,
}

impl Adapter {
    fn new(rig: &Rig) -> Adapter {
        let dir = rig.dir.join("ad");
        let desc_dir = rig.dir.join("desc");
        for d in [&dir, &desc_dir] {
            fs::create_dir(d).unwrap();
            fs::set_permissions(d, fs::Permissions::from_mode(0o700)).unwrap();
        }
        let root = rig.work().join("root");
        fs::create_dir(&root).unwrap();
        fs::set_permissions(&root, fs::Permissions::from_mode(0o700)).unwrap();
        let watched = std::env::var_os("PI_CONFORM_INTEROP_WATCH").is_some_and(|v| v == "1");
        Adapter {
            upstream: dir.join(if watched { "up.sock" } else { "a.sock" }),
            watch: None,
            socket: dir.join("a.sock"),
            grants: dir.join("grants.json"),
            log: dir.join("adapter.log"),
            out: rig.out.clone(),
            desc_dir,
            root,
            proc: None,
        }
    }

    /// `pi-conform grant` for (host, SESSION, generation 1) with the default operations and
    /// limits; returns the descriptor.
    fn grant(&self, host: &str, name: &str) -> Value {
        let out = self.desc_dir.join(format!("{name}.descriptor.json"));
        let mut cmd = Command::new(BIN);
        cmd.arg("grant")
            .arg("--grants")
            .arg(&self.grants)
            .arg("--socket")
            .arg(&self.socket)
            .arg("--root")
            .arg(&self.root)
            .args(["--host-instance", host, "--session", SESSION, "--generation", "1"])
            .arg("--output")
            .arg(&out);
        let (st, _, err) = run_timed(cmd, &self.out, &format!("grant-{name}"), Duration::from_secs(30));
        assert!(st.success(), "pi-conform grant: {err}");
        serde_json::from_slice(&fs::read(&out).unwrap()).expect("the descriptor is JSON")
    }

    fn start(&mut self) {
        let log = fs::File::create(&self.log).unwrap();
        let child = Command::new(BIN)
            .arg("serve-adapter")
            .arg("--socket")
            .arg(&self.upstream)
            .arg("--grants")
            .arg(&self.grants)
            .args(["--log-format", "json"])
            .env("PI_CONFORM_LOG", "debug")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn serve-adapter");
        self.proc = Some(Proc(child));
        self.wait_log("listening", 1);
        if self.upstream != self.socket && self.watch.is_none() {
            let dir = self.socket.parent().unwrap();
            let child = Command::new(BIN)
                .args(["watch", "adapter", "--format", "json", "--listen"])
                .arg(&self.socket)
                .arg("--upstream")
                .arg(&self.upstream)
                .arg("--record")
                .arg(dir.join("recorded.json"))
                .stdout(fs::File::create(dir.join("watch.out")).unwrap())
                .stderr(fs::File::create(dir.join("watch.err")).unwrap())
                .spawn()
                .expect("spawn watch");
            self.watch = Some(Proc(child));
            let t = Instant::now();
            while !fs::read_to_string(dir.join("watch.out")).unwrap_or_default().contains("watching") {
                assert!(t.elapsed() < Duration::from_secs(15), "watch did not start");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    /// With the watch: stop it (SIGTERM) and return its exit code and events.
    fn stop_watch(&mut self) -> Option<(Option<i32>, Vec<Value>)> {
        let mut p = self.watch.take()?;
        let st = Command::new("kill").arg("-TERM").arg(p.0.id().to_string()).status().unwrap();
        assert!(st.success());
        let code = p.0.wait().unwrap().code();
        let text = fs::read_to_string(self.socket.parent().unwrap().join("watch.out")).unwrap_or_default();
        Some((code, text.lines().map(|l| serde_json::from_str(l).expect("watch prints JSON lines")).collect()))
    }

    fn log_lines(&self) -> Vec<Value> {
        fs::read_to_string(&self.log).unwrap_or_default().lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
    }

    /// How many log lines carry `message`.
    fn count(&self, message: &str) -> usize {
        self.log_lines().iter().filter(|l| l["fields"]["message"] == message).count()
    }

    /// The `outcome` of every finished operation, in order.
    fn outcomes(&self) -> Vec<String> {
        self.log_lines()
            .iter()
            .filter(|l| l["fields"]["message"] == "operation finished")
            .map(|l| l["fields"]["outcome"].as_str().unwrap_or("?").to_string())
            .collect()
    }

    fn wait_log(&mut self, message: &str, at_least: usize) {
        let deadline = Instant::now() + Duration::from_secs(15);
        while self.count(message) < at_least {
            if let Some(Proc(child)) = &mut self.proc {
                if let Ok(Some(st)) = child.try_wait() {
                    panic!("the adapter exited ({st}):\n{}", fs::read_to_string(&self.log).unwrap_or_default());
                }
            }
            assert!(
                Instant::now() < deadline,
                "the adapter never logged {message:?} ({at_least} times):\n{}",
                fs::read_to_string(&self.log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGHUP: reload the grants file.
    fn reload(&mut self) {
        let before = self.count("grants reloaded");
        let pid = self.proc.as_ref().expect("the adapter runs").0.id();
        let st = Command::new("kill").arg("-HUP").arg(pid.to_string()).status().unwrap();
        assert!(st.success());
        self.wait_log("grants reloaded", before + 1);
    }
}

fn open_payload(root: &Path, tools: Value) -> Value {
    json!({
        "cwd": root,
        "session": {"mode": "new"},
        "model": {"provider": "fakellm", "id": "fake-model"},
        "resources": resources_with_tools(tools),
    })
}

fn host_adapter(descriptor: &Value) -> Value {
    json!({"mode": "host-adapter", "descriptor": descriptor})
}

/// The retained nonsecret summary of a descriptor (SPEC §3.4).
fn summary(d: &Value) -> Value {
    json!([d["protocolVersion"], d["adapterId"], d["adapterVersion"], d["operations"], d["limits"]])
}

fn handle_of(d: &Value) -> String {
    let h = d["binding"]["capabilityHandle"].as_str().expect("a handle").to_string();
    assert!(h.len() >= 32);
    h
}

/// Wait until recovery has settled (phase not `not_started`/`recovering`); the handshake data.
fn settled_handshake(c: &mut Client) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let h = c.handshake();
        let phase = h["host"]["recovery"]["phase"].as_str().unwrap_or("").to_string();
        if phase != "recovering" && phase != "not_started" {
            return h;
        }
        assert!(Instant::now() < deadline, "recovery never settled: {h}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn quarantined(h: &Value) -> Vec<Value> {
    h["host"]["recovery"]["quarantinedSessions"]
        .as_array()
        .expect("host.recovery.quarantinedSessions is an array")
        .iter()
        .filter(|q| q["sessionId"] == SESSION)
        .cloned()
        .collect()
}

/// Every regular file under `dir` (skipping `skip`), recursively.
fn files_under(dir: &Path, skip: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = fs::read_dir(dir) else { return };
    for e in rd.flatten() {
        let p = e.path();
        if p == skip {
            continue;
        }
        match e.file_type() {
            Ok(t) if t.is_dir() => files_under(&p, skip, out),
            Ok(t) if t.is_file() => out.push(p),
            _ => {}
        }
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn end_to_end_real_daemon_drives_reference_adapter() {
    let Some((dist, node)) = peer() else { return };
    let _serial = serial();
    let t0 = Instant::now();
    let rig = Rig::start("e", dist, node);
    let mut ad = Adapter::new(&rig);
    let sentinel = rig.work().join("sentinel.txt");
    fs::write(&sentinel, SENTINEL).unwrap();
    let mut transcript: Vec<String> = Vec::new();

    // Grant, serve, open v2 bound to (host, session, generation 1).
    let mut c = Client::connect(&rig.socket());
    let host1 = settled_handshake(&mut c)["host"]["hostInstanceId"].as_str().expect("hostInstanceId").to_string();
    let desc1 = ad.grant(&host1, "g1");
    let handle1 = handle_of(&desc1);
    ad.start();
    let env = json!({"sessionId": SESSION, "generation": 1});
    let open = c.request("open", env.clone(), open_payload(&ad.root, host_adapter(&desc1)), Duration::from_secs(60));
    assert_eq!(open["ok"], true, "the v2 open through the reference adapter: {open}");
    assert_eq!(open["data"]["created"], true, "{open}");
    ad.wait_log("bound", 1);
    let attach = c.request("attach", env.clone(), json!({}), Duration::from_secs(20));
    assert_eq!(attach["ok"], true, "attach: {attach}");

    // fs.write
    let t = wake(&mut c, "w-1", &[tool_line("fs_write", json!({"path": "notes.txt", "content": "alpha\nbeta\n"}))]);
    let d = t.data("fs_write");
    assert_eq!(fs::read_to_string(ad.root.join("notes.txt")).unwrap(), "alpha\nbeta\n");
    assert_eq!(d, json!({"created": true, "bytesWritten": 11, "digest": sha256_hex(b"alpha\nbeta\n")}));
    let conversation = t.response["data"]["result"]["sessionId"].clone();
    println!("toolEnd of fs_write as 0.3.3 sends it: {}", t.tool_end("fs_write"));

    // fs.edit
    let t = wake(
        &mut c,
        "w-2",
        &[tool_line("fs_edit", json!({"path": "notes.txt", "edits": [{"oldText": "beta", "newText": "gamma"}]}))],
    );
    assert_eq!(fs::read_to_string(ad.root.join("notes.txt")).unwrap(), "alpha\ngamma\n");
    assert_eq!(t.data("fs_edit"), json!({"replacements": 1, "digest": sha256_hex(b"alpha\ngamma\n")}));

    // The four read-only operations in one turn (0.3.3 runs them concurrently).
    let t = wake(
        &mut c,
        "w-3",
        &[
            tool_line("fs_read", json!({"path": "notes.txt"})),
            tool_line("fs_list", json!({"path": "."})),
            tool_line("fs_stat", json!({"path": "notes.txt"})),
            tool_line("fs_search", json!({"path": ".", "query": "gamma"})),
        ],
    );
    // 0.3.3 shows fs.read's content itself, the other results as indented JSON.
    assert_eq!(t.text("fs_read", false), "alpha\ngamma\n");
    let list = t.data("fs_list");
    assert_eq!(list["truncated"], false, "{list}");
    let entries = list["entries"].as_array().expect("entries");
    assert_eq!(entries.len(), 1, "only notes.txt in the root: {list}");
    assert_eq!(
        (&entries[0]["name"], &entries[0]["type"], &entries[0]["size"]),
        (&json!("notes.txt"), &json!("file"), &json!(12))
    );
    let stat = t.data("fs_stat");
    assert_eq!((&stat["type"], &stat["size"]), (&json!("file"), &json!(12)), "{stat}");
    assert_eq!(
        t.data("fs_search"),
        json!({"matches": [{"path": "notes.txt", "line": 2, "column": 1, "text": "gamma"}], "truncated": false})
    );
    for op in ["fs.write", "fs.edit", "fs.read", "fs.list", "fs.stat", "fs.search"] {
        assert_eq!(t.counts(op), (1, 0), "telemetry of {op}");
    }
    assert_eq!(ad.outcomes(), vec!["ok"; 6], "six invokes reached the adapter, all ok");

    // One adapter error: fs.write with create:false on a missing file. (0.3.3 resolves every
    // path itself first and refuses a missing fs.read target before any invoke; fs.write may
    // name a missing leaf, so this one reaches the adapter, which answers not_found.)
    let t =
        wake(&mut c, "w-4", &[tool_line("fs_write", json!({"path": "absent.txt", "content": "x", "create": false}))]);
    let text = t.text("fs_write", true);
    println!("toolEnd of the adapter's not_found as 0.3.3 sends it: {}", t.tool_end("fs_write"));
    assert!(
        text.contains("not_found") || text == "Host tool adapter request failed",
        "the failed call's reported result: {text:?}"
    );
    assert!(!ad.root.join("absent.txt").exists(), "a refused write created nothing");
    assert_eq!(t.counts("fs.write"), (1, 1), "the failure is counted against fs.write");
    assert_eq!(ad.outcomes().last().map(String::as_str), Some("not_found"), "the adapter answered not_found");
    assert_eq!(ad.outcomes().len(), 7);

    // `../`: refused before any invoke (0.3.3 validates paths daemon-side) or by the adapter.
    let t = wake(
        &mut c,
        "w-5",
        &[
            tool_line("fs_read", json!({"path": "../sentinel.txt"})),
            tool_line("fs_write", json!({"path": "../escape.txt", "content": "escaped"})),
        ],
    );
    let (r, w) = (t.text("fs_read", true), t.text("fs_write", true));
    println!("`../` refusals as 0.3.3 reports them: fs_read {r:?}, fs_write {w:?}");
    let adapter_outcomes = ad.outcomes();
    assert!(
        adapter_outcomes.len() == 7 || adapter_outcomes[7..].iter().all(|o| o == "invalid_path"),
        "a `../` path that reached the adapter must be refused invalid_path: {adapter_outcomes:?}"
    );
    assert_eq!(fs::read_to_string(&sentinel).unwrap(), SENTINEL, "the sentinel beside the root is untouched");
    let mut outside: Vec<String> =
        fs::read_dir(rig.work()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    outside.sort();
    assert_eq!(outside, ["root", "sentinel.txt"], "nothing was written beside the root");
    let mut inside: Vec<String> =
        fs::read_dir(&ad.root).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    inside.sort();
    assert_eq!(inside, ["notes.txt"], "the root holds only what the turns wrote");

    // kill -9 the daemon and start it again: the session's generation is quarantined.
    transcript.append(&mut c.received);
    drop(c);
    rig.restart();
    ad.wait_log("closed", 1); // the adapter saw its connection end
    let mut c = Client::connect(&rig.socket());
    let h = settled_handshake(&mut c);
    let host2 = h["host"]["hostInstanceId"].as_str().unwrap().to_string();
    assert_ne!(host2, host1, "a restart is a new host instance");
    let q = quarantined(&h);
    assert_eq!(
        q,
        vec![json!({"sessionId": SESSION, "generation": 1, "state": "reprovision_required",
                     "code": "tool_adapter_reprovision_required", "retryable": true})],
        "host.recovery.quarantinedSessions after the restart: {}",
        h["host"]["recovery"]
    );

    // While quarantined: a no-tools open of that generation is refused; a live wake finds no
    // session; a descriptor bound to the old host is a binding mismatch.
    let r = c.request("open", env.clone(), open_payload(&ad.root, json!("none")), Duration::from_secs(30));
    assert_eq!(r["ok"], false, "{r}");
    assert_eq!(r["error"]["code"], "tool_adapter_reprovision_required", "{r}");
    assert_eq!(r["error"]["retryable"], true, "{r}");
    let r = c.request(
        "wake",
        json!({"sessionId": SESSION, "generation": 1, "idempotencyKey": "w-q"}),
        json!({"prompt": "hello"}),
        Duration::from_secs(30),
    );
    assert_eq!(r["error"]["code"], "session_not_found", "a wake of the quarantined generation: {r}");
    let r = c.request("open", env.clone(), open_payload(&ad.root, host_adapter(&desc1)), Duration::from_secs(30));
    assert_eq!(r["error"]["code"], "tool_adapter_binding_mismatch", "the old host's descriptor: {r}");

    // Reprovision: a fresh grant bound to the new host, the identical nonsecret summary.
    let desc2 = ad.grant(&host2, "g2");
    let handle2 = handle_of(&desc2);
    assert_ne!(handle2, handle1);
    assert_eq!(summary(&desc2), summary(&desc1), "the same nonsecret summary");
    ad.reload();
    let r = c.request("open", env.clone(), open_payload(&ad.root, host_adapter(&desc2)), Duration::from_secs(60));
    assert_eq!(r["ok"], true, "reprovisioning open: {r}");
    ad.wait_log("bound", 2);
    let h = settled_handshake(&mut c);
    assert!(quarantined(&h).is_empty(), "the quarantine is cleared: {}", h["host"]["recovery"]);
    let attach = c.request("attach", env.clone(), json!({}), Duration::from_secs(20));
    assert_eq!(attach["ok"], true, "attach: {attach}");
    let before = ad.outcomes().len();
    let t = wake(&mut c, "w-6", &[tool_line("fs_read", json!({"path": "notes.txt"}))]);
    assert_eq!(t.text("fs_read", false), "alpha\ngamma\n", "a wake works through the adapter again");
    assert_eq!(ad.outcomes()[before..], ["ok"]);
    assert_eq!(t.response["data"]["result"]["sessionId"], conversation, "the same conversation continues");
    transcript.append(&mut c.received);
    drop(c);

    // The handles appear nowhere: daemon log and state, rig files, adapter log and grants,
    // every response and event.
    if let Some((code, events)) = ad.stop_watch() {
        let v: Vec<&Value> = events.iter().filter(|e| e["event"] == "violation").collect();
        let summary = events.iter().find(|e| e["event"] == "summary").expect("the watch's summary");
        println!("watch adapter between Pi Daemon 0.3.3 and serve-adapter: {summary}");
        for e in &v {
            println!("  {e}");
        }
        assert!(v.is_empty(), "Pi Daemon 0.3.3 and the reference adapter broke no rule on the wire");
        assert_eq!(code, Some(0), "no violation: exit 0");
        assert!(summary["frames"]["to-adapter"].as_u64().unwrap() >= 8, "{summary}");
        // The first connection's recording replays green against the reference adapter, on a
        // fresh grant with the runner's fixture.
        let dir = ad.socket.parent().unwrap().to_path_buf();
        let rec: Vec<Value> = serde_json::from_slice(&fs::read(dir.join("recorded.json")).unwrap()).unwrap();
        assert!(rec.len() >= 2, "both connections are recorded, the open one at exit: {}", rec.len());
        let first = dir.join("recorded-first.json");
        fs::write(&first, serde_json::to_vec(&json!([rec[0]])).unwrap()).unwrap();
        let replay_root = rig.work().join("replay-root");
        fs::create_dir(&replay_root).unwrap();
        fs::set_permissions(&replay_root, fs::Permissions::from_mode(0o700)).unwrap();
        let desc = ad.desc_dir.join("replay.descriptor.json");
        let mut cmd = Command::new(BIN);
        cmd.arg("grant").arg("--grants").arg(&ad.grants).arg("--socket").arg(&ad.upstream).arg("--root");
        cmd.arg(&replay_root).args(["--host-instance", "host-replay", "--session", "replay", "--generation", "1"]);
        cmd.arg("--output").arg(&desc);
        let (st, _, err) = run_timed(cmd, &ad.out, "grant-replay", Duration::from_secs(30));
        assert!(st.success(), "{err}");
        ad.reload();
        let mut cmd = Command::new(BIN);
        cmd.arg("adapter").arg(&ad.upstream).arg("--descriptor").arg(&desc).arg("--root").arg(&replay_root);
        cmd.arg("--session").arg(&first).args(["--color", "never"]);
        let (st, out, err) = run_timed(cmd, &ad.out, "replay", Duration::from_secs(120));
        println!("replay of the recorded 0.3.3 session: {}", out.lines().last().unwrap_or_default());
        assert!(st.success() && out.contains("1 passed"), "the recorded session replays green:\n{out}\n{err}");
    }
    let mut files = Vec::new();
    files_under(&rig.dir, &ad.desc_dir, &mut files);
    assert!(files.iter().any(|f| f.starts_with(rig.dir.join("state"))), "the state directory has files");
    assert!(files.contains(&rig.dir.join("daemon.log")) && files.contains(&ad.log) && files.contains(&ad.grants));
    for handle in [&handle1, &handle2] {
        for f in &files {
            let bytes = fs::read(f).unwrap_or_default();
            assert!(!contains(&bytes, handle.as_bytes()), "a capability handle is in {}", f.display());
        }
        for l in &transcript {
            assert!(!l.contains(handle.as_str()), "a capability handle came back from the daemon: {l}");
        }
    }
    let marker = SENTINEL.lines().next().unwrap();
    assert!(!transcript.iter().any(|l| l.contains(marker)), "the sentinel's content was revealed");
    // The adapter's log carries ids and outcome codes, never file content or the root's path.
    let log = fs::read_to_string(&ad.log).unwrap();
    for secret in [ad.root.to_str().unwrap(), "alpha", "gamma", marker] {
        assert!(!log.contains(secret), "the adapter log reveals {secret:?}");
    }
    println!(
        "end to end: {} lines from the daemon, {} files checked for the handles, {:?}",
        transcript.len(),
        files.len(),
        t0.elapsed()
    );
}
