//! A fault-injection proxy between the daemon and an adapter socket.
//!
//! The descriptor's endpoint names the proxy's socket, which is owner-private exactly as the
//! daemon requires of an adapter endpoint (SPEC §1.2: a 0600 socket owned by us in a 0700
//! directory; the daemon also checks the peer uid, which is ours). Each connection the daemon
//! opens is relayed to a fresh connection to the upstream adapter socket, by two pump threads
//! that deliver the bytes according to the proxy's [`Mode`] and record every complete frame
//! (content-free for `bind`: the capability handle is removed before anything is kept).
//!
//! Every record carries a stamp from a shared monotonic counter ([`Proxy::clock`]), so a test
//! can order what the proxy saw against what its clients saw.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::harness::{private_dir, Rng};

/// How the proxy delivers bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Relay as read.
    Pass,
    /// One byte per write, with a 1 ms pause every 16 bytes: every line arrives in pieces.
    Bytes,
    /// Random pieces of 1–48 bytes with 0–2 ms between them: partial lines at random points.
    Chunks,
    /// Each chunk read is held 0–`max_ms` ms before it is relayed.
    Delays { max_ms: u64 },
    /// A slow reader: after the first chunk of each direction, every `every`-th read is
    /// followed by a stall of `stall_ms` ms before anything more is read or relayed, so the
    /// writer's socket buffer fills.
    Slow { stall_ms: u64, every: u64 },
    /// Relay whole lines, and when the adapter's `nth` `result` of a connection (1-based)
    /// comes, relay only the first half of that line, keep reading (not relaying) what the
    /// daemon sends for 200 ms, then close both sides abruptly: the adapter's death mid-line.
    Cut { nth_result: usize },
}

/// A frame the daemon sent (`invoke` or `abort`).
#[derive(Clone, Debug)]
pub struct Sent {
    pub stamp: u64,
    pub kind: String,
    pub request_id: String,
    pub key: String,
    pub operation: String,
    /// For `fs.write`: the first line of the content (the load tests put a version tag there).
    pub tag: Option<String>,
    pub target: String,
}

/// A `result` the daemon received whole.
#[derive(Clone, Debug)]
pub struct Delivered {
    pub stamp: u64,
    pub request_id: String,
    pub key: String,
    pub ok: bool,
}

/// What one relayed connection carried.
#[derive(Clone, Debug, Default)]
pub struct ConnLog {
    pub to_adapter: Vec<Sent>,
    pub results: Vec<Delivered>,
    /// The requestId of the result cut in half ([`Mode::Cut`]).
    pub cut: Option<String>,
    pub down_done: bool,
    pub up_done: bool,
    pub upstream_failed: bool,
}

impl ConnLog {
    pub fn closed(&self) -> bool {
        self.upstream_failed || (self.down_done && self.up_done)
    }

    pub fn invokes(&self) -> impl Iterator<Item = &Sent> {
        self.to_adapter.iter().filter(|s| s.kind == "invoke")
    }
}

type Log = Arc<Mutex<Vec<ConnLog>>>;

pub struct Proxy {
    _dir: tempfile::TempDir,
    pub socket: PathBuf,
    mode: Arc<Mutex<Mode>>,
    log: Log,
    clock: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
}

impl Proxy {
    /// Listen on a fresh owner-private socket and relay to `upstream`.
    pub fn start(upstream: &Path, mode: Mode, seed: u64, clock: Arc<AtomicU64>) -> Proxy {
        let dir = private_dir("pc-proxy");
        let socket = dir.path().join("p.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600)).unwrap();
        listener.set_nonblocking(true).unwrap();
        let mode = Arc::new(Mutex::new(mode));
        let log: Log = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let accept = {
            let (mode, log, stop, clock, upstream) =
                (mode.clone(), log.clone(), stop.clone(), clock.clone(), upstream.to_path_buf());
            std::thread::spawn(move || accept_loop(listener, upstream, mode, log, stop, clock, seed))
        };
        Proxy { _dir: dir, socket, mode, log, clock, stop, accept: Some(accept) }
    }

    /// The mode for connections accepted from now on.
    pub fn set_mode(&self, m: Mode) {
        *self.mode.lock().unwrap() = m;
    }

    pub fn clock(&self) -> Arc<AtomicU64> {
        self.clock.clone()
    }

    pub fn conns(&self) -> Vec<ConnLog> {
        self.log.lock().unwrap().clone()
    }

    pub fn conn_count(&self) -> usize {
        self.log.lock().unwrap().len()
    }

    pub fn conn(&self, i: usize) -> Option<ConnLog> {
        self.log.lock().unwrap().get(i).cloned()
    }

    /// Wait (bounded) until every relayed connection has ended in both directions.
    pub fn wait_all_closed(&self, bound: Duration) {
        let t = Instant::now();
        while !self.log.lock().unwrap().iter().all(ConnLog::closed) {
            assert!(t.elapsed() < bound, "a relayed connection did not end within {bound:?}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Wait (bounded) until connection `i` has carried `n` invokes to the adapter.
    pub fn wait_invokes(&self, i: usize, n: usize, bound: Duration) {
        let t = Instant::now();
        while self.conn(i).map_or(0, |c| c.invokes().count()) < n {
            assert!(t.elapsed() < bound, "connection {i} did not carry {n} invokes within {bound:?}");
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
    }
}

fn accept_loop(
    listener: UnixListener,
    upstream: PathBuf,
    mode: Arc<Mutex<Mode>>,
    log: Log,
    stop: Arc<AtomicBool>,
    clock: Arc<AtomicU64>,
    seed: u64,
) {
    let mut n: u64 = 0;
    while !stop.load(Ordering::SeqCst) {
        let daemon = match listener.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(2));
                continue;
            }
            Err(_) => continue,
        };
        n += 1;
        let _ = daemon.set_nonblocking(false);
        let m = *mode.lock().unwrap();
        let idx = {
            let mut l = log.lock().unwrap();
            l.push(ConnLog::default());
            l.len() - 1
        };
        let adapter = match UnixStream::connect(&upstream) {
            Ok(s) => s,
            Err(_) => {
                // Nothing upstream: the daemon sees the connection close.
                log.lock().unwrap()[idx].upstream_failed = true;
                continue;
            }
        };
        let cut = Arc::new(AtomicBool::new(false));
        let ctx = Ctx { log: log.clone(), idx, clock: clock.clone(), cut, mode: m };
        let (d2, a2) = (daemon.try_clone().unwrap(), adapter.try_clone().unwrap());
        let down = ctx.clone();
        let rng = Rng::new(seed ^ n.wrapping_mul(0x9E37_79B9));
        let rng2 = Rng::new(!seed ^ n);
        std::thread::spawn(move || pump_down(down, daemon, adapter, rng));
        std::thread::spawn(move || pump_up(ctx, a2, d2, rng2));
    }
}

#[derive(Clone)]
struct Ctx {
    log: Log,
    idx: usize,
    clock: Arc<AtomicU64>,
    cut: Arc<AtomicBool>,
    mode: Mode,
}

impl Ctx {
    fn stamp(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::SeqCst)
    }
    fn with(&self, f: impl FnOnce(&mut ConnLog)) {
        f(&mut self.log.lock().unwrap()[self.idx]);
    }
}

/// Splits a byte stream into complete lines.
#[derive(Default)]
struct Lines {
    buf: Vec<u8>,
}

impl Lines {
    fn push(&mut self, data: &[u8]) -> Vec<Vec<u8>> {
        self.buf.extend_from_slice(data);
        let mut out = Vec::new();
        while let Some(p) = self.buf.iter().position(|&b| b == b'\n') {
            out.push(self.buf.drain(..=p).collect());
        }
        out
    }
}

fn s(v: &Value, k: &str) -> String {
    v[k].as_str().unwrap_or_default().to_string()
}

/// Relay bytes according to the mode (not [`Mode::Cut`], which works on whole lines).
fn deliver(mode: Mode, data: &[u8], dst: &mut UnixStream, rng: &mut Rng, nth_read: u64) -> std::io::Result<()> {
    match mode {
        Mode::Pass | Mode::Cut { .. } => dst.write_all(data),
        Mode::Bytes => {
            for (i, b) in data.iter().enumerate() {
                dst.write_all(std::slice::from_ref(b))?;
                if i % 16 == 15 {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            Ok(())
        }
        Mode::Chunks => {
            let mut rest = data;
            while !rest.is_empty() {
                let n = (rng.range(1, 48) as usize).min(rest.len());
                dst.write_all(&rest[..n])?;
                rest = &rest[n..];
                std::thread::sleep(Duration::from_micros(rng.range(0, 2000)));
            }
            Ok(())
        }
        Mode::Delays { max_ms } => {
            std::thread::sleep(Duration::from_millis(rng.range(0, max_ms)));
            dst.write_all(data)
        }
        Mode::Slow { stall_ms, every } => {
            if nth_read > 1 && nth_read % every == 0 {
                std::thread::sleep(Duration::from_millis(stall_ms));
            }
            dst.write_all(data)
        }
    }
}

/// Daemon → adapter: record `invoke`/`abort` frames, relay per mode; after a cut or once the
/// adapter is gone, keep reading (and recording: the daemon did send it) without relaying until
/// the daemon's side closes.
fn pump_down(ctx: Ctx, mut src: UnixStream, mut dst: UnixStream, mut rng: Rng) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut lines = Lines::default();
    let mut reads = 0u64;
    let mut relaying = true;
    loop {
        let n = match src.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        reads += 1;
        for l in lines.push(&buf[..n]) {
            let Ok(v) = serde_json::from_slice::<Value>(&l) else { continue };
            let kind = s(&v, "kind");
            if kind != "invoke" && kind != "abort" {
                continue; // the bind (which carries the handle) and revoke are not kept
            }
            let tag = v["payload"]["content"].as_str().and_then(|c| c.lines().next()).map(str::to_string);
            let sent = Sent {
                stamp: ctx.stamp(),
                kind,
                request_id: s(&v, "requestId"),
                key: s(&v, "idempotencyKey"),
                operation: s(&v, "operation"),
                tag,
                target: s(&v, "targetRequestId"),
            };
            ctx.with(|c| c.to_adapter.push(sent));
        }
        if ctx.cut.load(Ordering::SeqCst) || !relaying {
            continue;
        }
        if deliver(ctx.mode, &buf[..n], &mut dst, &mut rng, reads).is_err() {
            relaying = false;
            let _ = dst.shutdown(std::net::Shutdown::Both);
        }
    }
    let _ = dst.shutdown(std::net::Shutdown::Write);
    ctx.with(|c| c.down_done = true);
}

/// Adapter → daemon: relay per mode and record each `result` once the daemon has it whole.
fn pump_up(ctx: Ctx, mut src: UnixStream, mut dst: UnixStream, mut rng: Rng) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut lines = Lines::default();
    let mut reads = 0u64;
    let mut results = 0usize;
    let record = |ctx: &Ctx, l: &[u8]| {
        if let Ok(v) = serde_json::from_slice::<Value>(l) {
            if v["kind"] == "result" {
                let d = Delivered {
                    stamp: ctx.stamp(),
                    request_id: s(&v, "requestId"),
                    key: s(&v, "idempotencyKey"),
                    ok: v["ok"] == true,
                };
                ctx.with(|c| c.results.push(d));
            }
        }
    };
    'read: loop {
        let n = match src.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        reads += 1;
        if let Mode::Cut { nth_result } = ctx.mode {
            for l in lines.push(&buf[..n]) {
                let is_result = serde_json::from_slice::<Value>(&l).is_ok_and(|v| v["kind"] == "result");
                if is_result {
                    results += 1;
                }
                if is_result && results == nth_result {
                    let _ = dst.write_all(&l[..l.len() / 2]);
                    ctx.cut.store(true, Ordering::SeqCst);
                    let rid = serde_json::from_slice::<Value>(&l).map(|v| s(&v, "requestId")).unwrap_or_default();
                    ctx.with(|c| c.cut = Some(rid));
                    // Let anything the daemon already wrote reach the down pump's record.
                    std::thread::sleep(Duration::from_millis(200));
                    let _ = dst.shutdown(std::net::Shutdown::Both);
                    let _ = src.shutdown(std::net::Shutdown::Both);
                    break 'read;
                }
                if dst.write_all(&l).is_err() {
                    break 'read;
                }
                record(&ctx, &l);
            }
            continue;
        }
        if deliver(ctx.mode, &buf[..n], &mut dst, &mut rng, reads).is_err() {
            break;
        }
        for l in lines.push(&buf[..n]) {
            record(&ctx, &l);
        }
    }
    let _ = dst.shutdown(std::net::Shutdown::Write);
    ctx.with(|c| c.up_done = true);
}
