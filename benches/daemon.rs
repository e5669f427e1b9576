//! The reference daemon against Pi Daemon 0.3.3, side by side in the same run
//! (`cargo bench --bench daemon`; plain `std::time::Instant`).
//!
//! Both daemons run as real child processes on sockets in a private (0700) directory, and one
//! client (this process) drives both with the same request bytes (only the session id and the
//! descriptor differ). Pi Daemon 0.3.3 takes part when `PI_DAEMON_DIST` (its built `dist/`)
//! and `PI_DAEMON_NODE` (a node 22 binary) are set: it is started with
//! `scripts/real-peer/start` (beside `pi-conform fake-model`); otherwise only the reference
//! daemon is measured and no ratio is printed. One reference adapter (in this process, on its
//! own tokio runtime) serves both daemons; every grant is minted before anything is timed and
//! the capability handles are never printed.
//!
//! Measured:
//!
//! 1. **durable open**: a v2 `open` of a fresh session, `session.mode:"new"`, with a
//!    host-adapter descriptor — admission, the durable catalog record, connect, `bind`,
//!    `bound`, answer. Each session is closed (untimed, `retainSession:false`) right after.
//! 2. **memory open**: the same with `session.mode:"memory"` (nothing durable).
//! 3. **status under saturation**: 64 durable sessions with descriptors, each kept busy by
//!    back-to-back wakes (one in flight per session, driven over 8 connections; each turn writes
//!    and reads a file through the adapter, and every wake is journaled), while another
//!    connection sends a host `status` every 10 ms and times each one.
//! 4. **restart with N sessions** (reference daemon only; issue 25 N10): a state directory
//!    holding N durable session records (written through `daemon::store`, as the daemon
//!    writes them; a quarter of them with a tool policy, so recovery quarantines them), and
//!    the time from spawning `serve-daemon` on it until its socket accepts a connection,
//!    beside the same for an empty state directory.
//!
//! Opens alternate daemon by daemon and kind by kind within each repetition, so both see the
//! same machine conditions; ratios are reference / 0.3.3 (median of per-repetition ratios of
//! medians). The status phase runs one daemon at a time (saturating both at once would measure
//! each under the other's load).
//!
//! Environment knobs: `PI_BENCH_N` timed opens of each kind per daemon per repetition (40),
//! `PI_BENCH_REPS` repetitions (3), `PI_BENCH_WARMUP` untimed opens of each kind per daemon
//! per repetition (5), `PI_BENCH_STATUS` timed statuses per daemon (300),
//! `PI_BENCH_SESSIONS` saturated sessions (64), `PI_BENCH_RESTART` the session counts of
//! the restart phase (`4096,10000`; `0` skips it).

use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use memchr::memmem;
use pi_conform::adapter::grants::{grant, write_atomic, GrantRequest};
use pi_conform::adapter::server::{default_identity, serve, ServeConfig};
use pi_conform::contract::const_limits;
use pi_conform::contract::descriptor::OPERATIONS;
use serde_json::{json, Value};
use tokio::sync::watch;

const BIN: &str = env!("CARGO_BIN_EXE_pi-conform");
const MANIFEST_DIR: &str = env!("CARGO_MANIFEST_DIR");

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Durable,
    Memory,
}

const KINDS: [Kind; 2] = [Kind::Durable, Kind::Memory];

impl Kind {
    fn index(self) -> usize {
        match self {
            Kind::Durable => 0,
            Kind::Memory => 1,
        }
    }
    fn name(self) -> &'static str {
        match self {
            Kind::Durable => "durable open (descriptor)",
            Kind::Memory => "memory open (descriptor)",
        }
    }
    fn mode(self) -> &'static str {
        match self {
            Kind::Durable => "new",
            Kind::Memory => "memory",
        }
    }
    fn tag(self) -> &'static str {
        match self {
            Kind::Durable => "d",
            Kind::Memory => "m",
        }
    }
}

/// One daemon under test.
struct Target {
    name: &'static str,
    socket: PathBuf,
    host: String,
    /// Descriptors: `[rep][kind][i]` for the opens, then the saturated sessions.
    opens: Vec<[Vec<Value>; 2]>,
    saturated: Vec<Value>,
}

fn main() {
    let n: usize = env_num("PI_BENCH_N", 40).max(1);
    let reps: usize = env_num("PI_BENCH_REPS", 3).max(1);
    let warmup: usize = env_num("PI_BENCH_WARMUP", 5);
    let status_n: usize = env_num("PI_BENCH_STATUS", 300).max(1);
    let sessions: usize = env_num("PI_BENCH_SESSIONS", 64).max(1);
    let started = Instant::now();
    println!(
        "load average at the start: {} ({} CPUs)",
        loadavg(),
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    println!(
        "config: {n} timed opens of each kind per daemon x {reps} repetitions ({warmup} warm-up), {status_n} statuses under {sessions} saturated sessions"
    );

    // A short private directory (socket paths must stay under 108 bytes).
    let dir = PathBuf::from(format!("/tmp/pdb-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir(&dir).expect("bench directory");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let _cleanup = RemoveDir(dir.clone());

    // --- the daemons -----------------------------------------------------------------------
    let peer = match (std::env::var_os("PI_DAEMON_DIST"), std::env::var_os("PI_DAEMON_NODE")) {
        (Some(d), Some(n)) => Some(Rig::start(&dir.join("peer"), PathBuf::from(d), PathBuf::from(n))),
        _ => {
            println!(
                "Pi Daemon 0.3.3: not measured (set PI_DAEMON_DIST and PI_DAEMON_NODE for the side-by-side figures)"
            );
            None
        }
    };
    // The sessions' root: inside the peer's allowed root when it runs.
    let root = match &peer {
        Some(r) => r.dir.join("work/bench"),
        None => dir.join("root"),
    };
    std::fs::create_dir_all(&root).expect("root");
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o700)).expect("chmod root");
    let root = std::fs::canonicalize(&root).expect("canonical root");
    let reference = RefDaemon::start(&dir);

    let mut targets = vec![Target {
        name: "reference",
        socket: reference.socket.clone(),
        host: String::new(),
        opens: Vec::new(),
        saturated: Vec::new(),
    }];
    if let Some(r) = &peer {
        targets.push(Target {
            name: "pi-daemon 0.3.3",
            socket: r.socket(),
            host: String::new(),
            opens: Vec::new(),
            saturated: Vec::new(),
        });
    }
    for t in targets.iter_mut() {
        let mut c = Client::connect(&t.socket);
        let hs = c.call(
            &line_of(&json!({"protocolVersion": "2.0", "requestId": "hs", "operation": "handshake", "payload": {}})),
            "hs",
        );
        assert_eq!(hs["ok"], true, "{}: handshake failed: {}", t.name, hs["error"]);
        t.host = hs["data"]["host"]["hostInstanceId"].as_str().expect("hostInstanceId").to_string();
    }

    // --- every grant, minted before anything is timed ---------------------------------------
    let adapter_socket = dir.join("adapter.sock");
    let limits = const_limits([65_536, 4_194_304, 4, 16, 120_000, 256, 3_600_000]);
    let mint_t = Instant::now();
    let mut stored = Vec::new();
    let mint_dir = dir.join("mint");
    std::fs::create_dir(&mint_dir).expect("mint dir");
    let mut mint = |host: &str, sid: &str| -> Value {
        // Named like the grants file the adapter serves, so that the lock file `grant` creates
        // beside it for each grant has the name the adapter opens (moved there below).
        let scratch = mint_dir.join("grants.json");
        let req = GrantRequest {
            socket: adapter_socket.clone(),
            root: root.clone(),
            host_instance_id: host.to_string(),
            session_id: sid.to_string(),
            generation: 1,
            operations: OPERATIONS.iter().filter_map(|o| o.parse().ok()).collect(),
            limits,
            adapter_id: default_identity().adapter_id,
            adapter_version: default_identity().adapter_version,
        };
        let d = grant(&scratch, &req).unwrap_or_else(|e| panic!("grant: {e}"));
        let file: Value = serde_json::from_slice(&std::fs::read(&scratch).expect("read grant")).expect("grant JSON");
        stored.extend(file["grants"].as_array().expect("grants").iter().cloned());
        std::fs::remove_file(&scratch).expect("rm grant");
        d
    };
    for (ti, t) in targets.iter_mut().enumerate() {
        for rep in 0..reps {
            let mut per_kind: [Vec<Value>; 2] = [Vec::new(), Vec::new()];
            for kind in KINDS {
                for i in 0..warmup + n {
                    per_kind[kind.index()].push(mint(&t.host, &format!("b{ti}-{}-{rep}-{i}", kind.tag())));
                }
            }
            t.opens.push(per_kind);
        }
        t.saturated = (0..sessions).map(|i| mint(&t.host, &format!("b{ti}-sat-{i}"))).collect();
    }
    let grants_file = dir.join("grants.json");
    let body = serde_json::to_vec(&json!({"version": 1, "grants": stored})).expect("json");
    write_atomic(&grants_file, &body).unwrap_or_else(|e| panic!("write grants: {e}"));
    // Each grant's bind lock file, as `grant` into this grants file would have left it.
    for entry in std::fs::read_dir(&mint_dir).expect("mint dir") {
        let name = entry.expect("mint dir entry").file_name();
        if name.to_string_lossy().starts_with("grants.json.bind-") {
            std::fs::rename(mint_dir.join(&name), dir.join(&name)).expect("move a bind lock file");
        }
    }
    println!("minted {} grants in {:.1} s", stored.len(), mint_t.elapsed().as_secs_f64());
    let (stop_adapter, adapter_thread) = start_adapter(&adapter_socket, &grants_file);

    // --- opens, side by side ------------------------------------------------------------------
    let mut clients: Vec<Client> = targets.iter().map(|t| Client::connect(&t.socket)).collect();
    // times[target][kind]: all samples; rep_medians[target][kind]: one median per repetition.
    let mut times: Vec<[Vec<f64>; 2]> = targets.iter().map(|_| [Vec::new(), Vec::new()]).collect();
    let mut rep_medians: Vec<[Vec<f64>; 2]> = targets.iter().map(|_| [Vec::new(), Vec::new()]).collect();
    let mut seq = 0u64;
    for rep in 0..reps {
        let mut this: Vec<[Vec<f64>; 2]> = targets.iter().map(|_| [Vec::new(), Vec::new()]).collect();
        for i in 0..warmup + n {
            // Alternate which daemon goes first, and the kind order.
            let order: Vec<usize> =
                if (i + rep) % 2 == 0 { (0..targets.len()).collect() } else { (0..targets.len()).rev().collect() };
            for ti in order {
                let kinds: Vec<Kind> = if i % 2 == 0 { KINDS.to_vec() } else { KINDS.iter().rev().copied().collect() };
                for kind in kinds {
                    let d = &targets[ti].opens[rep][kind.index()][i];
                    let t = open_once(&mut clients[ti], targets[ti].name, kind, d, &root, &mut seq);
                    if i >= warmup {
                        this[ti][kind.index()].push(t);
                    }
                }
            }
        }
        let mut line = format!("repetition {}:", rep + 1);
        for (ti, t) in targets.iter().enumerate() {
            for kind in KINDS {
                let m = median(this[ti][kind.index()].clone());
                rep_medians[ti][kind.index()].push(m);
                line.push_str(&format!(" {} {} {:.2} ms;", t.name, kind.tag(), m / 1000.0));
                times[ti][kind.index()].extend(this[ti][kind.index()].iter().copied());
            }
        }
        println!("{line}");
    }
    drop(clients);

    // --- status under saturation, one daemon at a time ------------------------------------------
    let mut status: Vec<Vec<f64>> = Vec::new();
    let mut wakes_done: Vec<(u64, u64, f64)> = Vec::new();
    for t in &targets {
        let (lat, ok, failed, secs) = saturated_status(t, &root, status_n);
        status.push(lat);
        wakes_done.push((ok, failed, secs));
    }

    // --- report -----------------------------------------------------------------------------------
    println!();
    println!(
        "{:<18} {:<28} {:>8} {:>10} {:>10} {:>10}",
        "daemon", "request", "samples", "median ms", "p95 ms", "p99 ms"
    );
    for (ti, t) in targets.iter().enumerate() {
        for kind in KINDS {
            let v = &times[ti][kind.index()];
            println!(
                "{:<18} {:<28} {:>8} {:>10.2} {:>10.2} {:>10.2}",
                t.name,
                kind.name(),
                v.len(),
                median(v.clone()) / 1000.0,
                pct(v.clone(), 0.95) / 1000.0,
                pct(v.clone(), 0.99) / 1000.0
            );
        }
        let v = &status[ti];
        let (ok, failed, secs) = wakes_done[ti];
        println!(
            "{:<18} {:<28} {:>8} {:>10.2} {:>10.2} {:>10.2}   (max {:.2} ms; {} wakes completed, {} failed, in {:.1} s: {:.1}/s)",
            t.name,
            "status, 64 saturated",
            v.len(),
            median(v.clone()) / 1000.0,
            pct(v.clone(), 0.95) / 1000.0,
            pct(v.clone(), 0.99) / 1000.0,
            v.iter().copied().fold(0.0, f64::max) / 1000.0,
            ok,
            failed,
            secs,
            ok as f64 / secs
        );
    }
    println!();
    let status_p99 = pct(status[0].clone(), 0.99) / 1000.0;
    println!(
        "target: status p99 under {sessions} saturated sessions <= 5 ms: reference {status_p99:.2} ms {}",
        if status_p99 <= 5.0 { "(met)" } else { "(MISSED)" }
    );
    if targets.len() > 1 {
        for kind in KINDS {
            let r: Vec<f64> =
                rep_medians[0][kind.index()].iter().zip(&rep_medians[1][kind.index()]).map(|(a, b)| a / b).collect();
            println!(
                "ratio reference / 0.3.3, {}: {:.3} (per repetition: {}); medians {:.2} ms vs {:.2} ms",
                kind.name(),
                median(r.clone()),
                list(&r, 3),
                median(times[0][kind.index()].clone()) / 1000.0,
                median(times[1][kind.index()].clone()) / 1000.0
            );
        }
        let rs = pct(status[0].clone(), 0.99) / pct(status[1].clone(), 0.99);
        println!("ratio reference / 0.3.3, status p99 under saturation: {rs:.3}");
        let r: Vec<f64> = rep_medians[0][0].iter().zip(&rep_medians[1][0]).map(|(a, b)| a / b).collect();
        let rd = median(r);
        println!("target: durable open <= 1/20 of 0.3.3's: {rd:.3} {}", if rd <= 0.05 { "(met)" } else { "(MISSED)" });
    }
    println!("load average at the end: {}", loadavg());
    println!("total bench time {:.1} s", started.elapsed().as_secs_f64());

    let _ = stop_adapter.send(true);
    let _ = adapter_thread.join();
    drop(reference);
    drop(peer);

    // --- restart with N sessions (reference daemon) ----------------------------------------------
    let counts: Vec<usize> = std::env::var("PI_BENCH_RESTART")
        .unwrap_or_else(|_| "4096,10000".into())
        .split(',')
        .filter_map(|n| n.trim().parse().ok())
        .filter(|&n| n > 0)
        .collect();
    if !counts.is_empty() {
        let empty = restart_ms(&dir, 0);
        println!("restart of an empty state directory: {} ms to listen", list(&empty, 1));
        for n in counts {
            let t = restart_ms(&dir, n);
            println!(
                "restart with {n} sessions: median {:.1} ms to listen (runs: {}; empty state: median {:.1} ms)",
                median(t.clone()),
                list(&t, 1),
                median(empty.clone())
            );
        }
    }
}

/// Write `n` durable session records into a fresh state directory (as the daemon writes
/// them, through `daemon::store`), then start `serve-daemon` on it three times (each killed
/// once listening): the milliseconds from spawn to an accepted connection.
fn restart_ms(dir: &Path, n: usize) -> Vec<f64> {
    use pi_conform::daemon::store::{SessionRecord, Store};
    let state = dir.join(format!("restart-{n}"));
    let _ = std::fs::remove_dir_all(&state);
    {
        let store = Store::open(&state).expect("state directory");
        let rt = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
        let policy = json!({"protocolVersion": "1.0", "adapterId": "a", "adapterVersion": "1", "operations": ["fs.read"],
            "limits": {"maxRequestBytes": 65536}});
        let pending: Vec<_> = (0..n)
            .map(|i| {
                store.queue_session(&SessionRecord {
                    session_id: format!("restart-{i}"),
                    generation: 1,
                    open_version: "2.0".into(),
                    cwd: "/w".into(),
                    mode: "new".into(),
                    policy: (i % 4 == 0).then(|| policy.clone()),
                    state: "active".into(),
                    recovery: None,
                    wakes: 0,
                })
            })
            .collect();
        rt.block_on(async {
            for p in pending {
                p.durable().await.expect("record written");
            }
        });
    }
    let socket = dir.join("restart.sock");
    let mut out = Vec::new();
    for _ in 0..3 {
        let _ = std::fs::remove_file(&socket);
        let t = Instant::now();
        let mut child = Command::new(BIN)
            .args(["serve-daemon", "--socket"])
            .arg(&socket)
            .arg("--state-dir")
            .arg(&state)
            .env("PI_CONFORM_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn serve-daemon");
        while UnixStream::connect(&socket).is_err() {
            assert!(child.try_wait().expect("wait").is_none(), "serve-daemon exited on a state of {n} sessions");
            assert!(t.elapsed() < Duration::from_secs(300), "serve-daemon did not listen within 300 s");
            std::thread::sleep(Duration::from_millis(1));
        }
        out.push(t.elapsed().as_secs_f64() * 1000.0);
        let _ = child.kill();
        let _ = child.wait();
    }
    let _ = std::fs::remove_dir_all(&state);
    out
}

fn open_payload(kind: Kind, cwd: &Path, d: &Value) -> Value {
    json!({"cwd": cwd, "session": {"mode": kind.mode()}, "model": {"provider": "fakellm", "id": "fake-model"},
        "resources": pi_conform::contract::resources_with_tools(json!({"mode": "host-adapter", "descriptor": d}))})
}

/// One open of `kind`, checked; its latency in µs. The session is closed (untimed).
fn open_once(c: &mut Client, target: &str, kind: Kind, d: &Value, cwd: &Path, seq: &mut u64) -> f64 {
    *seq += 1;
    let rid = format!("r{:08}", *seq);
    let sid = d["binding"]["sessionId"].as_str().expect("sessionId").to_string();
    let open = json!({"protocolVersion": "2.0", "requestId": rid, "operation": "open", "sessionId": sid,
        "generation": 1, "payload": open_payload(kind, cwd, d)});
    let (t, r) = c.timed(&line_of(&open), &rid);
    // Only the error body is ever printed (never the request, which holds the handle).
    assert_eq!(r["ok"], true, "{target}: {} of {sid} failed: {}", kind.name(), r["error"]);
    assert_eq!(r["data"]["created"], true, "{target}: {} of {sid} did not create the session", kind.name());
    let close_rid = format!("{rid}-close");
    let close = json!({"protocolVersion": "2.0", "requestId": close_rid, "operation": "close", "sessionId": sid,
        "generation": 1, "payload": {"retainSession": false}});
    let r = c.call(&line_of(&close), &close_rid);
    assert_eq!(r["ok"], true, "{target}: close of {sid} failed: {}", r["error"]);
    t
}

/// Open every saturated session, keep each busy with back-to-back wakes, and time `n` host
/// statuses (one every 10 ms) meanwhile: (latencies µs, wakes completed, wakes failed, seconds).
fn saturated_status(t: &Target, root: &Path, n: usize) -> (Vec<f64>, u64, u64, f64) {
    let mut c = Client::connect(&t.socket);
    let mut seq = 0u64;
    for d in &t.saturated {
        seq += 1;
        let rid = format!("so{seq}");
        let sid = d["binding"]["sessionId"].as_str().expect("sessionId");
        let open = json!({"protocolVersion": "2.0", "requestId": rid, "operation": "open", "sessionId": sid,
            "generation": 1, "payload": open_payload(Kind::Durable, root, d)});
        let r = c.call(&line_of(&open), &rid);
        assert_eq!(r["ok"], true, "{}: open of {sid} failed: {}", t.name, r["error"]);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let sids: Vec<String> =
        t.saturated.iter().map(|d| d["binding"]["sessionId"].as_str().expect("sessionId").to_string()).collect();
    let drivers: Vec<JoinHandle<()>> = sids
        .chunks(sids.len().div_ceil(8))
        .map(|chunk| {
            let chunk = chunk.to_vec();
            let (socket, stop, ok, failed) = (t.socket.clone(), stop.clone(), ok.clone(), failed.clone());
            let name = t.name;
            std::thread::spawn(move || drive(&socket, name, &chunk, &stop, &ok, &failed))
        })
        .collect();
    // Let the turns get going.
    std::thread::sleep(Duration::from_secs(2));
    let (ok0, t0) = (ok.load(Ordering::Relaxed), Instant::now());
    let mut lat = Vec::with_capacity(n);
    for i in 0..n {
        let rid = format!("st{i}");
        let (el, r) = c.timed(
            &line_of(&json!({"protocolVersion": "2.0", "requestId": rid, "operation": "status", "payload": {}})),
            &rid,
        );
        assert_eq!(r["ok"], true, "{}: status failed: {}", t.name, r["error"]);
        lat.push(el);
        std::thread::sleep(Duration::from_millis(10));
    }
    let secs = t0.elapsed().as_secs_f64();
    let done = ok.load(Ordering::Relaxed) - ok0;
    stop.store(true, Ordering::Relaxed);
    for d in drivers {
        let _ = d.join();
    }
    (lat, done, failed.load(Ordering::Relaxed), secs)
}

/// One driver connection: a wake in flight for each of `sids` at all times until `stop`.
fn drive(socket: &Path, target: &str, sids: &[String], stop: &AtomicBool, ok: &AtomicU64, failed: &AtomicU64) {
    let w = UnixStream::connect(socket).expect("connect");
    w.set_read_timeout(Some(Duration::from_millis(200))).expect("timeout");
    let mut r = BufReader::new(w.try_clone().expect("clone"));
    let mut w = w;
    let mut n = 0u64;
    let send = |w: &mut UnixStream, k: usize, n: &mut u64| {
        *n += 1;
        let file = format!("sat-{k}.txt");
        let prompt = format!(
            "TOOL fs_write {}\nTOOL fs_read {}",
            json!({"path": file, "content": format!("turn {n}\n")}),
            json!({"path": file})
        );
        let wake = json!({"protocolVersion": "2.0", "requestId": format!("w{k}-{n}"), "operation": "wake",
            "sessionId": sids[k], "generation": 1, "idempotencyKey": format!("k{n}"), "payload": {"prompt": prompt}});
        w.write_all(&line_of(&wake)).expect("send wake");
    };
    for k in 0..sids.len() {
        send(&mut w, k, &mut n);
    }
    let mut first_error = true;
    let mut line = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        line.clear();
        match r.read_until(b'\n', &mut line) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted) => {
                continue
            }
            Err(_) => return,
        }
        if memmem::find(&line, b"\"kind\":\"response\"").is_none() {
            continue;
        }
        let v: Value = serde_json::from_slice(&line).expect("the daemon sent invalid JSON");
        let Some(k) = v["requestId"]
            .as_str()
            .and_then(|r| r.strip_prefix('w'))
            .and_then(|r| r.split('-').next())
            .and_then(|k| k.parse::<usize>().ok())
        else {
            continue;
        };
        if v["ok"] == true {
            ok.fetch_add(1, Ordering::Relaxed);
        } else {
            failed.fetch_add(1, Ordering::Relaxed);
            if first_error {
                eprintln!("{target}: a saturating wake failed: {}", v["error"]);
                first_error = false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        send(&mut w, k, &mut n);
    }
}

/// The reference daemon, as a child process.
struct RefDaemon {
    child: Child,
    socket: PathBuf,
}

impl RefDaemon {
    fn start(dir: &Path) -> RefDaemon {
        let socket = dir.join("ref.sock");
        let log = std::fs::File::create(dir.join("ref.log")).expect("log");
        let child = Command::new(BIN)
            .args(["serve-daemon", "--socket"])
            .arg(&socket)
            .arg("--state-dir")
            .arg(dir.join("ref-state"))
            .env("PI_CONFORM_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn serve-daemon");
        wait_for(&socket);
        RefDaemon { child, socket }
    }
}

impl Drop for RefDaemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Pi Daemon 0.3.3 and fake-model, through `scripts/real-peer`.
struct Rig {
    dir: PathBuf,
    dist: PathBuf,
    node: PathBuf,
}

impl Rig {
    fn start(dir: &Path, dist: PathBuf, node: PathBuf) -> Rig {
        std::fs::create_dir(dir).expect("peer dir");
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        let rig = Rig { dir: dir.to_path_buf(), dist, node };
        let out = rig.script("start");
        assert!(out.status.success(), "scripts/real-peer/start failed: {}", String::from_utf8_lossy(&out.stderr));
        rig
    }
    fn socket(&self) -> PathBuf {
        self.dir.join("run/pid.sock")
    }
    fn script(&self, name: &str) -> std::process::Output {
        Command::new("sh")
            .arg(Path::new(MANIFEST_DIR).join("scripts/real-peer").join(name))
            .env("PI_DAEMON_DIST", &self.dist)
            .env("PI_DAEMON_NODE", &self.node)
            .env("PI_PEER_DIR", &self.dir)
            .env("PI_PEER_PORT", "0")
            .env("PI_CONFORM", BIN)
            .output()
            .expect("run a real-peer script")
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        let _ = self.script("stop");
    }
}

struct RemoveDir(PathBuf);

impl Drop for RemoveDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
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
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
        if let Err(e) = rt.block_on(serve(cfg, Some(rx))) {
            eprintln!("the reference adapter stopped: {e}");
        }
    });
    wait_for(socket);
    (tx, th)
}

/// One blocking client connection to a daemon.
struct Client {
    w: UnixStream,
    r: BufReader<UnixStream>,
    line: Vec<u8>,
}

impl Client {
    fn connect(socket: &Path) -> Client {
        let w = UnixStream::connect(socket).expect("connect");
        w.set_read_timeout(Some(Duration::from_secs(120))).expect("timeout");
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

fn wait_for(socket: &Path) {
    let t = Instant::now();
    while UnixStream::connect(socket).is_err() {
        assert!(t.elapsed() < Duration::from_secs(30), "the server at {} did not start", socket.display());
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

/// Nearest-rank percentile `q` (0..1].
fn pct(mut v: Vec<f64>, q: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    let rank = ((v.len() as f64) * q).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}
