//! Processes and clients for `tests/load_faults.rs`: the reference daemon and a reference
//! adapter holding many grants as real processes, a daemon NDJSON client whose every read is
//! bounded, peak RSS from `/proc`, and a small seeded RNG.
//!
//! Capability handles live only in memory (descriptors) and in the adapter's 0600 grants file
//! digest form; nothing here prints a descriptor, a `bind` line or an `open` command.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use pi_conform::adapter::grants::{self, GrantRequest};
use pi_conform::adapter::server::default_identity;
use pi_conform::contract::limits_from_values;
use pi_conform::contract::operation::OPERATIONS;
use pi_conform::contract::types::tool_adapter::ToolOperation;

use crate::support::bin;

/// A fresh 0700 temporary directory (sockets, state and grants need owner-private parents).
pub fn private_dir(prefix: &str) -> tempfile::TempDir {
    let dir = tempfile::Builder::new().prefix(prefix).tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    dir
}

fn wait_connectable(socket: &Path, log: &Path, what: &str) {
    let t = Instant::now();
    while UnixStream::connect(socket).is_err() {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "{what} did not start: {}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// An integer from the environment, or `default`.
pub fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok()).unwrap_or(default)
}

/// Peak resident set size (`VmHWM`, KiB) of a live process.
pub fn peak_rss_kib(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Whether a log holds a panic message.
pub fn has_panic(log: &str) -> bool {
    log.contains("panicked at")
}

/// The reference daemon as a child process on a private socket and state directory.
pub struct DaemonProc {
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
    pub state: PathBuf,
    pub log: PathBuf,
    child: Option<Child>,
}

impl DaemonProc {
    pub fn start() -> DaemonProc {
        let dir = private_dir("pc-load-d");
        let socket = dir.path().join("d.sock");
        let state = dir.path().join("state");
        let log = dir.path().join("daemon.log");
        let mut d = DaemonProc { dir, socket, state, log, child: None };
        d.spawn();
        d
    }

    /// Start (again) on the same socket and state directory.
    pub fn spawn(&mut self) {
        assert!(self.child.is_none(), "the daemon is already running");
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log).unwrap();
        let child = Command::new(bin())
            .args(["serve-daemon", "--log-format", "json", "--socket"])
            .arg(&self.socket)
            .arg("--state-dir")
            .arg(&self.state)
            .env("PI_CONFORM_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
        wait_connectable(&self.socket, &self.log, "the daemon");
    }

    /// SIGKILL and reap.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("the daemon runs").id()
    }

    /// Still running (not exited, not crashed).
    pub fn alive(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    pub fn client(&self, bound: Duration) -> DClient {
        DClient::connect(&self.socket, bound).unwrap_or_else(|e| panic!("cannot connect to the daemon: {e}"))
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `pi-conform daemon-state --state-dir DIR` (the documented offline view of the catalog
    /// and the wake journal).
    pub fn state_dump(&self) -> Value {
        let out = Command::new(bin()).args(["daemon-state", "--state-dir"]).arg(&self.state).output().unwrap();
        assert!(out.status.success(), "daemon-state failed: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).expect("daemon-state prints JSON")
    }

    /// `pi-conform daemon-state --reconcile` (the daemon must be stopped).
    pub fn reconcile(&self) {
        assert!(self.child.is_none(), "reconcile runs with the daemon stopped");
        let out =
            Command::new(bin()).args(["daemon-state", "--reconcile", "--state-dir"]).arg(&self.state).output().unwrap();
        assert!(out.status.success(), "daemon-state --reconcile failed");
    }
}

impl Drop for DaemonProc {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// The reference adapter as a child process, with any number of grants (one per session),
/// each confined to its own root under `roots`.
pub struct AdapterProc {
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
    pub grants: PathBuf,
    pub log: PathBuf,
    pub roots: PathBuf,
    /// Every handle minted (in memory only), for the log hygiene check.
    handles: Vec<String>,
    child: Option<Child>,
}

impl AdapterProc {
    /// Directories only; mint grants, then [`AdapterProc::spawn`].
    pub fn new() -> AdapterProc {
        let dir = private_dir("pc-load-a");
        let socket = dir.path().join("a.sock");
        let grants = dir.path().join("grants.json");
        let log = dir.path().join("adapter.log");
        let roots = dir.path().join("roots");
        std::fs::create_dir(&roots).unwrap();
        AdapterProc { dir, socket, grants, log, roots, handles: Vec::new(), child: None }
    }

    /// A fresh root directory `roots/<name>`.
    pub fn root(&self, name: &str) -> PathBuf {
        let p = self.roots.join(name);
        std::fs::create_dir_all(&p).unwrap();
        p
    }

    /// A grant for (host, session, generation 1) with all six operations and these limits;
    /// the descriptor's endpoint is `endpoint` (the adapter's socket or a proxy's). This is
    /// what `pi-conform grant` runs (`adapter::grants::grant`), in process: a debug-build CLI
    /// spends ~0.3 s per grant compiling the schemas, and the saturation test needs 64.
    pub fn grant(&mut self, endpoint: &Path, root: &Path, host: &str, session: &str, limits: [u64; 7]) -> Value {
        let req = GrantRequest {
            socket: endpoint.to_path_buf(),
            root: root.to_path_buf(),
            host_instance_id: host.to_string(),
            session_id: session.to_string(),
            generation: 1,
            operations: OPERATIONS.iter().map(|o| o.parse::<ToolOperation>().unwrap()).collect(),
            limits: limits_from_values(limits).expect("non-zero limits"),
            adapter_id: default_identity().adapter_id,
            adapter_version: default_identity().adapter_version,
        };
        let d = grants::grant(&self.grants, &req).unwrap_or_else(|e| panic!("grant failed: {e}"));
        self.handles.push(d["binding"]["capabilityHandle"].as_str().unwrap().to_string());
        d
    }

    pub fn spawn(&mut self, op_delay_ms: u64) {
        assert!(self.child.is_none(), "the adapter is already running");
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log).unwrap();
        let child = Command::new(bin())
            .args(["serve-adapter", "--log-format", "json", "--socket"])
            .arg(&self.socket)
            .arg("--grants")
            .arg(&self.grants)
            .arg("--op-delay-ms")
            .arg(op_delay_ms.to_string())
            .env("PI_CONFORM_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
        wait_connectable(&self.socket, &self.log, "the adapter");
    }

    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("the adapter runs").id()
    }

    pub fn alive(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGHUP (reload the grants file, README) and wait until the adapter logged the reload.
    pub fn reload_grants(&self) {
        let count = |s: &str| s.lines().filter(|l| l.contains("grants reloaded")).count();
        let before = count(&self.log_text());
        let child = self.child.as_ref().expect("the adapter runs");
        rustix::process::kill_process(rustix::process::Pid::from_child(child), rustix::process::Signal::HUP).unwrap();
        let t = Instant::now();
        while count(&self.log_text()) <= before {
            assert!(t.elapsed() < Duration::from_secs(20), "the adapter did not reload its grants");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// No minted handle and no root path in the adapter's log, nor in `other` (SPEC §7.1).
    pub fn assert_logs_clean(&self, other: &[(&str, String)]) {
        let mut logs = vec![("adapter", self.log_text())];
        logs.extend(other.iter().map(|(n, t)| (*n, t.clone())));
        for (name, text) in &logs {
            for h in &self.handles {
                assert!(!text.contains(h.as_str()), "the {name} log contains a capability handle");
            }
            assert!(!has_panic(text), "the {name} log records a panic");
        }
        let roots = self.roots.to_string_lossy().to_string();
        assert!(!logs[0].1.contains(&roots), "the adapter log contains a root path");
    }
}

impl Drop for AdapterProc {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Why a read from the daemon produced no line.
#[derive(Debug)]
pub enum ReadError {
    /// The daemon closed the connection (or died).
    Eof,
    /// Nothing within the bound: a hang.
    Timeout,
    /// Another socket error.
    Io(std::io::ErrorKind),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self:?}")
    }
}

/// A daemon client whose every read is bounded (the liveness bound of these tests).
pub struct DClient {
    r: BufReader<UnixStream>,
    w: UnixStream,
}

impl DClient {
    pub fn connect(socket: &Path, bound: Duration) -> std::io::Result<DClient> {
        let s = UnixStream::connect(socket)?;
        s.set_read_timeout(Some(bound))?;
        Ok(DClient { r: BufReader::new(s.try_clone()?), w: s })
    }

    /// Write one command line; false when the daemon is gone.
    pub fn send(&mut self, v: &Value) -> bool {
        let mut l = serde_json::to_vec(v).unwrap();
        l.push(b'\n');
        self.w.write_all(&l).is_ok()
    }

    /// The next response (events are skipped).
    pub fn next_response(&mut self) -> Result<Value, ReadError> {
        loop {
            let mut l = Vec::new();
            match self.r.read_until(b'\n', &mut l) {
                Ok(0) => return Err(ReadError::Eof),
                Ok(_) if !l.ends_with(b"\n") => return Err(ReadError::Eof),
                Ok(_) => {
                    let v: Value = serde_json::from_slice(&l).expect("the daemon sent invalid JSON");
                    if v["kind"] == "response" {
                        return Ok(v);
                    }
                }
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                    return Err(ReadError::Timeout)
                }
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return Err(ReadError::Eof),
                Err(e) => return Err(ReadError::Io(e.kind())),
            }
        }
    }

    /// The response to `rid` (others are dropped: use on a connection with one command in flight).
    pub fn response(&mut self, rid: &str) -> Result<Value, ReadError> {
        loop {
            let v = self.next_response()?;
            if v["requestId"] == rid {
                return Ok(v);
            }
        }
    }

    pub fn try_call(&mut self, v: &Value) -> Result<Value, ReadError> {
        let rid = v["requestId"].as_str().unwrap().to_string();
        if !self.send(v) {
            return Err(ReadError::Eof);
        }
        self.response(&rid)
    }

    /// A command and its response; panics (naming the operation only) when none comes.
    pub fn call(&mut self, v: &Value) -> Value {
        self.try_call(v).unwrap_or_else(|e| panic!("no response to {} {}: {e}", v["operation"], v["requestId"]))
    }
}

/// A v2 command.
pub fn cmd(rid: &str, op: &str, extra: Value) -> Value {
    let mut v = json!({"protocolVersion": "2.0", "requestId": rid, "operation": op, "payload": {}});
    if let Value::Object(m) = extra {
        for (k, x) in m {
            v[k] = x;
        }
    }
    v
}

/// The daemon's `hostInstanceId` (from the handshake).
pub fn host_id(c: &mut DClient) -> String {
    let r = c.call(&cmd("hs", "handshake", json!({})));
    r["data"]["host"]["hostInstanceId"].as_str().unwrap().to_string()
}

/// A v2 open of (session, generation 1) with cwd = the adapter root and a host-adapter
/// descriptor.
pub fn open_v2(rid: &str, session: &str, cwd: &Path, descriptor: &Value) -> Value {
    json!({"protocolVersion": "2.0", "requestId": rid, "operation": "open", "sessionId": session, "generation": 1,
        "payload": {"cwd": cwd, "session": {"mode": "new"},
            "resources": pi_conform::contract::resources_with_tools(json!({"mode": "host-adapter", "descriptor": descriptor}))}})
}

/// A wake of (session, generation 1) that waits for the terminal result.
pub fn wake(rid: &str, session: &str, key: &str, prompt: &str) -> Value {
    json!({"protocolVersion": "2.0", "requestId": rid, "operation": "wake", "sessionId": session, "generation": 1,
        "idempotencyKey": key, "payload": {"prompt": prompt}})
}

/// A scripted-agent prompt line: `TOOL <tool> <json-args>`.
pub fn tool(name: &str, args: Value) -> String {
    format!("TOOL {name} {args}")
}

/// The idempotency key the daemon derives for a tool call (PC-4.4):
/// `"tool-" + hex(sha256(operation ‖ 0x00 ‖ toolCallId))`.
pub fn tool_key(tool: &str, tool_call_id: &str) -> String {
    let op = tool.replacen('_', ".", 1);
    let mut h = Sha256::new();
    h.update(op.as_bytes());
    h.update([0u8]);
    h.update(tool_call_id.as_bytes());
    format!("tool-{}", hex::encode(h.finalize()))
}

/// The tool calls of a wake response, or a panic naming the wake error.
pub fn tool_calls(r: &Value) -> &Vec<Value> {
    assert_eq!(r["ok"], true, "the wake failed: {}", r["error"]);
    r["data"]["result"]["toolCalls"].as_array().expect("toolCalls")
}

/// A tool call's outcome code: `ok` or its error code.
pub fn outcome(tc: &Value) -> String {
    if tc["ok"] == true {
        "ok".into()
    } else {
        tc["error"]["code"].as_str().unwrap_or("<untyped>").to_string()
    }
}

/// The crate's seeded PRNG (`pi_conform::util::prng`).
pub use pi_conform::util::prng::SplitMix64 as Rng;
