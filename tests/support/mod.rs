//! Shared harness for integration tests: the real `pi-conform` binary as a reference adapter
//! on a private socket, and a raw NDJSON client that records every byte it receives.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_pi-conform")
}

/// A running reference adapter with one grant.
pub struct Adapter {
    pub dir: tempfile::TempDir,
    pub root: PathBuf,
    pub socket: PathBuf,
    pub grants: PathBuf,
    pub log: PathBuf,
    pub descriptor: Value,
    pub child: Option<Child>,
}

pub struct Opts<'a> {
    pub operations: &'a str,
    pub limits: [u64; 7],
    pub op_delay_ms: u64,
}

impl Default for Opts<'_> {
    fn default() -> Self {
        Self {
            operations: "fs.list,fs.stat,fs.read,fs.search,fs.write,fs.edit",
            limits: [1_048_576, 1_048_576, 4, 16, 30_000, 256, 3_600_000],
            op_delay_ms: 0,
        }
    }
}

impl Adapter {
    pub fn start(opts: Opts<'_>) -> Adapter {
        let dir = tempfile::Builder::new().prefix("pc-adapter").tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir(&root).unwrap();
        let socket = dir.path().join("a.sock");
        let grants = dir.path().join("grants.json");
        let log = dir.path().join("adapter.log");
        let descriptor = mint(&grants, &socket, &root, "host-t", "sess-1", 3, &opts);
        let mut a = Adapter { dir, root, socket, grants, log, descriptor, child: None };
        a.spawn(opts.op_delay_ms);
        a
    }

    pub fn spawn(&mut self, op_delay_ms: u64) {
        let log = std::fs::File::create(&self.log).unwrap();
        let child = Command::new(bin())
            .args(["serve-adapter", "--log-format", "json", "--socket"])
            .arg(&self.socket)
            .arg("--grants")
            .arg(&self.grants)
            .arg("--op-delay-ms")
            .arg(op_delay_ms.to_string())
            .env("PI_CONFORM_LOG", "debug")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
        let t = Instant::now();
        while UnixStream::connect(&self.socket).is_err() {
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "adapter did not start: {}",
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn handle(&self) -> String {
        self.descriptor["binding"]["capabilityHandle"].as_str().unwrap().to_string()
    }

    pub fn connect(&self) -> Client {
        Client::new(&self.socket, self.descriptor.clone())
    }

    /// Connect and bind with the descriptor; asserts the exact `bound` echo.
    pub fn bound(&self) -> Client {
        let mut c = self.connect();
        c.send(&c.bind_frame());
        let b = c.recv().expect("bound");
        assert_eq!(b, c.expected_bound(), "bound must echo identity, operations and limits exactly");
        c
    }

    pub fn sigterm(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().unwrap();
        rustix::process::kill_process(rustix::process::Pid::from_child(&child), rustix::process::Signal::TERM).unwrap();
        child.wait().unwrap()
    }

    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Adapter {
    fn drop(&mut self) {
        self.kill9();
        // Secret hygiene: the handle never appears in the adapter's logs.
        let log = self.log_text();
        let h = self.descriptor["binding"]["capabilityHandle"].as_str().unwrap_or("");
        if !std::thread::panicking() {
            assert!(!h.is_empty() && !log.contains(h), "the adapter log contains the capability handle");
            let root = self.root.to_string_lossy().to_string();
            assert!(!log.contains(&root), "the adapter log contains the absolute root path");
        }
    }
}

/// Run `pi-conform grant` and return the descriptor.
pub fn mint(
    grants: &Path,
    socket: &Path,
    root: &Path,
    host: &str,
    session: &str,
    generation: u64,
    opts: &Opts<'_>,
) -> Value {
    let l = opts.limits;
    let out = Command::new(bin())
        .args(["grant", "--grants"])
        .arg(grants)
        .arg("--socket")
        .arg(socket)
        .arg("--root")
        .arg(root)
        .args(["--host-instance", host, "--session", session, "--generation", &generation.to_string()])
        .args(["--operations", opts.operations])
        .args(["--max-request-bytes", &l[0].to_string(), "--max-response-bytes", &l[1].to_string()])
        .args(["--max-concurrent-requests", &l[2].to_string(), "--max-queued-requests", &l[3].to_string()])
        .args(["--request-timeout-ms", &l[4].to_string(), "--max-idempotency-keys", &l[5].to_string()])
        .args(["--idempotency-ttl-ms", &l[6].to_string()])
        .output()
        .unwrap();
    assert!(out.status.success(), "grant failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A raw client that keeps every byte it received.
pub struct Client {
    pub stream: UnixStream,
    reader: BufReader<UnixStream>,
    pub received: Vec<u8>,
    pub descriptor: Value,
}

impl Client {
    pub fn new(socket: &Path, descriptor: Value) -> Client {
        let stream = UnixStream::connect(socket).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let reader = BufReader::new(stream.try_clone().unwrap());
        Client { stream, reader, received: Vec::new(), descriptor }
    }

    pub fn identity(&self) -> serde_json::Map<String, Value> {
        let d = &self.descriptor;
        let b = &d["binding"];
        let mut m = serde_json::Map::new();
        m.insert("protocolVersion".into(), json!("1.0"));
        m.insert("adapterId".into(), d["adapterId"].clone());
        m.insert("adapterVersion".into(), d["adapterVersion"].clone());
        m.insert("hostInstanceId".into(), b["hostInstanceId"].clone());
        m.insert("sessionId".into(), b["sessionId"].clone());
        m.insert("generation".into(), b["generation"].clone());
        m
    }

    pub fn frame(&self, kind: &str, extra: Value) -> Value {
        let mut m = self.identity();
        m.insert("kind".into(), json!(kind));
        if let Value::Object(e) = extra {
            m.extend(e);
        }
        Value::Object(m)
    }

    pub fn bind_frame(&self) -> Value {
        let d = &self.descriptor;
        self.frame(
            "bind",
            json!({"capabilityHandle": d["binding"]["capabilityHandle"], "operations": d["operations"], "limits": d["limits"]}),
        )
    }

    pub fn expected_bound(&self) -> Value {
        let d = &self.descriptor;
        self.frame("bound", json!({"operations": d["operations"], "limits": d["limits"]}))
    }

    pub fn invoke(&self, id: &str, key: &str, op: &str, payload: Value) -> Value {
        self.frame("invoke", json!({"requestId": id, "idempotencyKey": key, "operation": op, "payload": payload}))
    }

    pub fn send(&mut self, v: &Value) {
        let mut line = serde_json::to_vec(v).unwrap();
        line.push(b'\n');
        self.send_raw(&line);
    }

    pub fn send_raw(&mut self, bytes: &[u8]) {
        // The peer may have closed already; a failed write shows up as EOF on read.
        let _ = self.stream.write_all(bytes);
    }

    /// The next line as JSON, or None on EOF. A reset is the peer's close too: an adapter that
    /// closes a connection (revoked, replaced) before reading what the client had already sent
    /// resets it (AF_UNIX: `ECONNRESET` once the lines it wrote before are read).
    pub fn recv(&mut self) -> Option<Value> {
        let mut line = Vec::new();
        match self.reader.read_until(b'\n', &mut line) {
            Ok(0) => None,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset && line.is_empty() => None,
            Ok(_) => {
                self.received.extend_from_slice(&line);
                Some(serde_json::from_slice(&line).unwrap_or_else(|e| panic!("adapter sent invalid JSON ({e})")))
            }
            Err(e) => panic!("read failed: {e}"),
        }
    }

    /// The next line's raw bytes (LF included), or empty on EOF.
    pub fn recv_raw(&mut self) -> Vec<u8> {
        let mut line = Vec::new();
        let _ = self.reader.read_until(b'\n', &mut line);
        self.received.extend_from_slice(&line);
        line
    }

    /// Asserts the adapter closes the connection without sending anything more.
    pub fn expect_closed(&mut self) {
        let mut rest = Vec::new();
        let _ = self.reader.read_to_end(&mut rest);
        self.received.extend_from_slice(&rest);
        assert!(rest.is_empty(), "expected a close without a frame, got {}", String::from_utf8_lossy(&rest));
    }

    /// Waits for the result of `id`, collecting other frames.
    pub fn result_of(&mut self, id: &str) -> Value {
        loop {
            let v = self.recv().unwrap_or_else(|| panic!("connection closed before the result of {id}"));
            if v["kind"] == "result" && v["requestId"] == id {
                return v;
            }
        }
    }

    pub fn shutdown_write(&self) {
        let _ = self.stream.shutdown(std::net::Shutdown::Write);
    }
}
