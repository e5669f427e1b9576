//! Open+bind latency of the reference daemon against baselines measured in the same run
//! (`cargo bench --bench daemon`; plain `std::time::Instant`, medians and p95).
//!
//! The reference daemon and the reference adapter run in this process, each on its own tokio
//! runtime, on sockets in a private (0700) temporary directory. One client connection to the
//! daemon times, per request, the write of a prepared NDJSON line until its response line:
//!
//! 1. `open+bind`: a v2 `open` of a fresh session whose `resources.tools` is a host-adapter
//!    descriptor — the daemon admits the descriptor, connects to the adapter, sends `bind`,
//!    receives `bound` and then answers.
//! 2. `open (no tools)`: a v2 `open` of a fresh session with `tools: "none"` (baseline 1).
//! 3. `handshake`: a v2 `handshake` round trip (baseline 2).
//!
//! The three kinds alternate in blocks within each repetition (the block order is reversed on
//! every other block). Every open is checked (`ok`, `created`), and every session is closed
//! (untimed, `retainSession: false`) right after its open, so the daemon never holds more than
//! one benchmark session. Every host-adapter open has its own grant, minted with
//! `pi_conform::adapter::grants::grant` for the daemon's `hostInstanceId` (read from the
//! handshake) before anything is timed; the adapter is restarted per repetition with only that
//! repetition's grants so its grant table stays the same size. The capability handles are never
//! printed.
//!
//! Environment knobs: `PI_BENCH_N` timed requests of each kind per repetition (300),
//! `PI_BENCH_REPS` repetitions (5), `PI_BENCH_BLOCK` requests per block (25),
//! `PI_BENCH_WARMUP` untimed requests of each kind per repetition (30).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use memchr::memmem;
use pi_conform::adapter::grants::{grant, write_atomic, GrantRequest};
use pi_conform::adapter::server::{default_identity, serve, ServeConfig};
use pi_conform::contract::descriptor::OPERATIONS;
use pi_conform::contract::Limits;
use pi_conform::daemon::faults::DaemonFaults;
use pi_conform::daemon::server::{serve as serve_daemon, DaemonConfig};
use serde_json::{json, Value};
use tokio::sync::watch;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    OpenBind,
    OpenNone,
    Handshake,
}

const KINDS: [Kind; 3] = [Kind::OpenBind, Kind::OpenNone, Kind::Handshake];

impl Kind {
    fn index(self) -> usize {
        match self {
            Kind::OpenBind => 0,
            Kind::OpenNone => 1,
            Kind::Handshake => 2,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::OpenBind => "open+bind (host-adapter)",
            Kind::OpenNone => "open, tools \"none\"",
            Kind::Handshake => "handshake",
        }
    }
}

fn main() {
    let n: usize = env_num("PI_BENCH_N", 300).max(1);
    let reps: usize = env_num("PI_BENCH_REPS", 5).max(1);
    let block: usize = env_num("PI_BENCH_BLOCK", 25).max(1);
    let warmup: usize = env_num("PI_BENCH_WARMUP", 30);
    let started = Instant::now();
    println!(
        "load average at the start: {} ({} CPUs)",
        loadavg(),
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    println!(
        "config: {n} timed requests of each kind x {reps} repetitions, blocks of {block}, {warmup} warm-up requests of each kind per repetition"
    );

    let dir = tempfile::Builder::new().prefix("pi-conform-dbench").tempdir().expect("tempdir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let root = dir.path().join("root");
    std::fs::create_dir(&root).expect("mkdir root");
    let root = std::fs::canonicalize(&root).expect("canonical root");
    let mint_dir = dir.path().join("mint");
    std::fs::create_dir(&mint_dir).expect("mkdir mint");

    // --- the reference daemon, in process ------------------------------------------------
    let daemon_socket = dir.path().join("daemon.sock");
    let dcfg = DaemonConfig {
        socket: daemon_socket.clone(),
        state_dir: dir.path().join("state"),
        host_instance_id: None,
        handle_signals: false,
        handshake_deadline: pi_conform::daemon::server::DEFAULT_HANDSHAKE_DEADLINE,
        faults: DaemonFaults::NONE,
    };
    let (stop_daemon, drx) = watch::channel(false);
    let daemon_thread = std::thread::spawn(move || {
        if let Err(e) = runtime().block_on(serve_daemon(dcfg, Some(drx))) {
            eprintln!("the reference daemon stopped: {e}");
        }
    });
    wait_for(&daemon_socket);
    let mut c = Client::connect(&daemon_socket);
    let hs = c.call(&line_of(&handshake("hs-0")), "hs-0");
    assert_eq!(hs["ok"], true, "handshake failed: {}", hs["error"]);
    assert_eq!(hs["data"]["capabilities"]["hostToolAdapter"], true, "the daemon does not offer host tool adapters");
    let host = hs["data"]["host"]["hostInstanceId"].as_str().expect("hostInstanceId").to_string();

    // --- every grant, minted before anything is timed -------------------------------------
    let adapter_socket = dir.path().join("adapter.sock");
    let limits = Limits::from_values([65_536, 4_194_304, 4, 16, 120_000, 256, 3_600_000]);
    let per_rep = warmup + n;
    let mint_t = Instant::now();
    let mut descriptors: Vec<Vec<Value>> = Vec::with_capacity(reps);
    let mut grant_files = Vec::with_capacity(reps);
    for rep in 0..reps {
        let mut stored = Vec::with_capacity(per_rep);
        let mut ds = Vec::with_capacity(per_rep);
        for i in 0..per_rep {
            let scratch = mint_dir.join(format!("g-{rep}-{i}.json"));
            let req = GrantRequest {
                socket: adapter_socket.clone(),
                root: root.clone(),
                host_instance_id: host.clone(),
                session_id: session_id(Kind::OpenBind, rep, i),
                generation: 1,
                operations: OPERATIONS.iter().filter_map(|o| o.parse().ok()).collect(),
                limits,
                adapter_id: default_identity().adapter_id,
                adapter_version: default_identity().adapter_version,
            };
            ds.push(grant(&scratch, &req).unwrap_or_else(|e| panic!("grant: {e}")));
            let file: Value =
                serde_json::from_slice(&std::fs::read(&scratch).expect("read grant")).expect("grant JSON");
            stored.extend(file["grants"].as_array().expect("grants").iter().cloned());
            std::fs::remove_file(&scratch).expect("rm grant");
        }
        let path = dir.path().join(format!("grants-{rep}.json"));
        let body = serde_json::to_vec_pretty(&json!({"version": 1, "grants": stored})).expect("json");
        write_atomic(&path, &body).unwrap_or_else(|e| panic!("write grants: {e}"));
        descriptors.push(ds);
        grant_files.push(path);
    }
    println!(
        "minted {} grants ({per_rep} per repetition, one per host-adapter open) in {:.1} s",
        reps * per_rep,
        mint_t.elapsed().as_secs_f64()
    );

    // --- the repetitions ------------------------------------------------------------------
    let mut all: [Vec<f64>; 3] = [Vec::new(), Vec::new(), Vec::new()];
    let mut rep_medians: Vec<[f64; 3]> = Vec::with_capacity(reps);
    let mut seq = 0u64;
    for rep in 0..reps {
        let (stop_adapter, adapter_thread) = start_adapter(&adapter_socket, &grant_files[rep]);
        let ds = &descriptors[rep];
        // Warm-up: the same requests, untimed.
        for (i, d) in ds.iter().enumerate().take(warmup) {
            for kind in KINDS {
                one(&mut c, kind, rep, i, d, &root, &mut seq);
            }
        }
        let mut times: [Vec<f64>; 3] = [Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n)];
        let mut i = 0;
        let mut b = 0;
        while i < n {
            let end = (i + block).min(n);
            let order: Vec<Kind> =
                if (b + rep) % 2 == 0 { KINDS.to_vec() } else { KINDS.iter().rev().copied().collect() };
            for kind in order {
                for j in i..end {
                    let k = warmup + j;
                    let t = one(&mut c, kind, rep, k, &ds[k], &root, &mut seq);
                    times[kind.index()].push(t);
                }
            }
            i = end;
            b += 1;
        }
        let _ = stop_adapter.send(true);
        let _ = adapter_thread.join();
        let meds = [median(times[0].clone()), median(times[1].clone()), median(times[2].clone())];
        println!(
            "repetition {}: medians open+bind {:.1} µs, open (no tools) {:.1} µs, handshake {:.1} µs; ratios {:.3} {:.3}",
            rep + 1,
            meds[0],
            meds[1],
            meds[2],
            meds[0] / meds[1],
            meds[0] / meds[2]
        );
        rep_medians.push(meds);
        for (a, t) in all.iter_mut().zip(times) {
            a.extend(t);
        }
    }

    // --- report ---------------------------------------------------------------------------
    println!();
    println!(
        "{:<28} {:>8} {:>12} {:>10} {:>10}",
        "request (all repetitions)", "samples", "median µs", "p95 µs", "min µs"
    );
    for kind in KINDS {
        let v = &all[kind.index()];
        println!(
            "{:<28} {:>8} {:>12.1} {:>10.1} {:>10.1}",
            kind.name(),
            v.len(),
            median(v.clone()),
            p95(v.clone()),
            v.iter().copied().fold(f64::INFINITY, f64::min)
        );
    }
    let r_none: Vec<f64> = rep_medians.iter().map(|m| m[0] / m[1]).collect();
    let r_hs: Vec<f64> = rep_medians.iter().map(|m| m[0] / m[2]).collect();
    println!("open+bind / open (no tools) per repetition: {}", list(&r_none, 3));
    println!("open+bind / handshake       per repetition: {}", list(&r_hs, 3));
    println!(
        "ratios (median of per-repetition ratios of medians): open+bind / open (no tools) = {:.3}; open+bind / handshake = {:.3}",
        median(r_none),
        median(r_hs)
    );
    println!(
        "bind overhead (median open+bind - median open without tools): {:.1} µs",
        median(all[0].clone()) - median(all[1].clone())
    );
    println!("load average at the end: {}", loadavg());
    println!("total bench time {:.1} s", started.elapsed().as_secs_f64());

    drop(c);
    let _ = stop_daemon.send(true);
    let _ = daemon_thread.join();
}

/// One request of `kind`, checked; returns its latency in µs. Opens are closed (untimed).
fn one(c: &mut Client, kind: Kind, rep: usize, i: usize, d: &Value, cwd: &Path, seq: &mut u64) -> f64 {
    *seq += 1;
    let rid = format!("r{:08}", *seq);
    match kind {
        Kind::Handshake => {
            let line = line_of(&handshake(&rid));
            let (t, r) = c.timed(&line, &rid);
            assert_eq!(r["ok"], true, "handshake failed: {}", r["error"]);
            t
        }
        Kind::OpenBind | Kind::OpenNone => {
            let sid = session_id(kind, rep, i);
            let tools = if kind == Kind::OpenBind {
                assert_eq!(d["binding"]["sessionId"], sid.as_str(), "descriptor for another session");
                json!({"mode": "host-adapter", "descriptor": d})
            } else {
                json!("none")
            };
            let open = json!({"protocolVersion": "2.0", "requestId": rid, "operation": "open", "sessionId": sid,
                "generation": 1, "payload": {"cwd": cwd, "session": {"mode": "new"}, "resources": pi_conform::contract::resources_with_tools(tools.clone())}});
            let line = line_of(&open);
            let (t, r) = c.timed(&line, &rid);
            // Only the error body is ever printed (never the request, which holds the handle).
            assert_eq!(r["ok"], true, "{} of {sid} failed: {}", kind.name(), r["error"]);
            assert_eq!(r["data"]["created"], true, "{} of {sid} did not create the session", kind.name());
            let close_rid = format!("{rid}-close");
            let close = json!({"protocolVersion": "2.0", "requestId": close_rid, "operation": "close", "sessionId": sid,
                "generation": 1, "payload": {"retainSession": false}});
            let r = c.call(&line_of(&close), &close_rid);
            assert_eq!(r["data"]["closed"], true, "close of {sid} failed: {}", r["error"]);
            t
        }
    }
}

fn session_id(kind: Kind, rep: usize, i: usize) -> String {
    match kind {
        Kind::OpenBind => format!("bench-bind-{rep}-{i}"),
        _ => format!("bench-none-{rep}-{i}"),
    }
}

fn handshake(rid: &str) -> Value {
    json!({"protocolVersion": "2.0", "requestId": rid, "operation": "handshake", "payload": {}})
}

fn start_adapter(socket: &Path, grants: &Path) -> (watch::Sender<bool>, JoinHandle<()>) {
    let _ = std::fs::remove_file(socket);
    let cfg = ServeConfig {
        socket: socket.to_path_buf(),
        grants: grants.to_path_buf(),
        identity: default_identity(),
        op_delay: Duration::ZERO,
        handle_signals: false,
    };
    let (tx, rx) = watch::channel(false);
    let th = std::thread::spawn(move || {
        if let Err(e) = runtime().block_on(serve(cfg, Some(rx))) {
            eprintln!("the reference adapter stopped: {e}");
        }
    });
    wait_for(socket);
    (tx, th)
}

/// One blocking client connection to the daemon.
struct Client {
    w: UnixStream,
    r: BufReader<UnixStream>,
    line: Vec<u8>,
}

impl Client {
    fn connect(socket: &Path) -> Client {
        let w = UnixStream::connect(socket).expect("connect");
        w.set_read_timeout(Some(Duration::from_secs(60))).expect("timeout");
        let r = BufReader::with_capacity(64 * 1024, w.try_clone().expect("clone"));
        Client { w, r, line: Vec::with_capacity(64 * 1024) }
    }

    /// Write `request` and read lines until the response to `rid` (events are skipped); the
    /// time is taken as soon as that line is read, before it is parsed.
    fn timed(&mut self, request: &[u8], rid: &str) -> (f64, Value) {
        let needle = format!("\"requestId\":\"{rid}\"");
        let finder = memmem::Finder::new(needle.as_bytes());
        let t = Instant::now();
        self.w.write_all(request).expect("write");
        loop {
            self.line.clear();
            let n = self.r.read_until(b'\n', &mut self.line).expect("read");
            assert!(n > 0 && self.line.ends_with(b"\n"), "the daemon closed the connection");
            if finder.find(&self.line).is_some() && memmem::find(&self.line, b"\"kind\":\"response\"").is_some() {
                break;
            }
        }
        let el = t.elapsed().as_secs_f64() * 1e6;
        let v: Value = serde_json::from_slice(&self.line).expect("the daemon sent invalid JSON");
        assert_eq!(v["requestId"], rid);
        (el, v)
    }

    fn call(&mut self, request: &[u8], rid: &str) -> Value {
        self.timed(request, rid).1
    }
}

fn line_of(v: &Value) -> Vec<u8> {
    let mut l = serde_json::to_vec(v).expect("json");
    l.push(b'\n');
    l
}

/// The same runtime shape the adapter bench gives each in-process server.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime")
}

fn wait_for(socket: &Path) {
    let t = Instant::now();
    while UnixStream::connect(socket).is_err() {
        assert!(t.elapsed() < Duration::from_secs(10), "the server did not start");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The 1, 5 and 15 minute load averages (the machine may be shared with other work).
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map_or_else(|_| "?".into(), |l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
}

fn env_num(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn list(v: &[f64], prec: usize) -> String {
    v.iter().map(|x| format!("{x:.prec$}")).collect::<Vec<_>>().join(" ")
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

/// Nearest-rank 95th percentile.
fn p95(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let rank = ((v.len() as f64) * 0.95).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}
