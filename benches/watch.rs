//! The latency `pi-conform watch adapter` adds per frame (`cargo bench --bench watch`; plain
//! `std::time::Instant`, warm-up, medians).
//!
//! One client does `fs.stat` round trips (an `invoke` out, a `result` back: two frames) with
//! the reference adapter (`serve-adapter`, the release binary), directly and through `watch
//! adapter`, interleaved repetition by repetition in the same run. The added latency per frame
//! is (p50 through the watch − p50 direct) / 2; the target is at most 50 µs.
//!
//! Placement (`PI_BENCH_PIN`, as in `benches/adapter.rs`): `same` (default) puts the client and
//! both child processes on CPU 0 (children inherit the affinity), so the figure is the proxy's
//! own work and its extra socket hops, not cross-CPU wake-ups of a 2-vCPU VM; `none` leaves
//! placement to the scheduler (reported for reference). Knobs: `PI_BENCH_RTT_N` round trips
//! per repetition (5000), `PI_BENCH_REPS` repetitions (5).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

const BIN: &str = env!("CARGO_BIN_EXE_pi-conform");

fn env_n(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_for(socket: &Path) {
    let t = Instant::now();
    while UnixStream::connect(socket).is_err() {
        assert!(t.elapsed() < Duration::from_secs(20), "{} did not come up", socket.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A bound connection to `socket` for descriptor `d`.
fn bound(socket: &Path, d: &Value) -> (UnixStream, BufReader<UnixStream>) {
    let mut s = UnixStream::connect(socket).unwrap();
    let r = BufReader::new(s.try_clone().unwrap());
    let bind = json!({
        "protocolVersion": "1.0", "kind": "bind", "adapterId": d["adapterId"], "adapterVersion": d["adapterVersion"],
        "hostInstanceId": d["binding"]["hostInstanceId"], "sessionId": d["binding"]["sessionId"],
        "generation": d["binding"]["generation"], "capabilityHandle": d["binding"]["capabilityHandle"],
        "operations": d["operations"], "limits": d["limits"],
    });
    let mut line = serde_json::to_vec(&bind).unwrap();
    line.push(b'\n');
    s.write_all(&line).unwrap();
    let mut r = r;
    let mut got = String::new();
    r.read_line(&mut got).unwrap();
    assert!(got.contains("\"bound\""), "{got}");
    (s, r)
}

/// Median round-trip time of `n` `fs.stat` calls, in µs.
fn rtt(socket: &Path, d: &Value, n: usize, tag: &str) -> f64 {
    let (mut s, mut r) = bound(socket, d);
    let mut samples = Vec::with_capacity(n);
    let mut got = String::new();
    for i in 0..n + n / 10 {
        let inv = json!({
            "protocolVersion": "1.0", "kind": "invoke", "adapterId": d["adapterId"], "adapterVersion": d["adapterVersion"],
            "hostInstanceId": d["binding"]["hostInstanceId"], "sessionId": d["binding"]["sessionId"],
            "generation": d["binding"]["generation"], "requestId": format!("{tag}-{i}"),
            "idempotencyKey": format!("{tag}-k-{i}"), "operation": "fs.stat", "payload": {"path": "hello.txt"},
        });
        let mut line = serde_json::to_vec(&inv).unwrap();
        line.push(b'\n');
        let t = Instant::now();
        s.write_all(&line).unwrap();
        got.clear();
        r.read_line(&mut got).unwrap();
        let dt = t.elapsed();
        assert!(got.contains("\"ok\":true"), "{got}");
        if i >= n / 10 {
            samples.push(dt.as_secs_f64() * 1e6);
        }
    }
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

fn main() {
    let pin = std::env::var("PI_BENCH_PIN").unwrap_or_else(|_| "same".into());
    if pin == "same" {
        let mut set = rustix::thread::CpuSet::new();
        set.set(0);
        if let Err(e) = rustix::thread::sched_setaffinity(None, &set) {
            eprintln!("cannot set the CPU affinity ({e}); the placement is not enforced");
        }
    }
    let (n, reps) = (env_n("PI_BENCH_RTT_N", 5000), env_n("PI_BENCH_REPS", 5));
    let dir = tempfile::Builder::new().prefix("pc-bench-watch").tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("hello.txt"), "hello world\n").unwrap();
    let (a_sock, w_sock, grants) = (dir.path().join("a.sock"), dir.path().join("w.sock"), dir.path().join("g.json"));
    let out = Command::new(BIN)
        .args(["grant", "--grants"])
        .arg(&grants)
        .arg("--socket")
        .arg(&a_sock)
        .arg("--root")
        .arg(&root)
        .args(["--host-instance", "host-bench", "--session", "s-bench", "--generation", "1"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let d: Value = serde_json::from_slice(&out.stdout).unwrap();
    let quiet = || (Stdio::null(), Stdio::null());
    let (o, e) = quiet();
    let _adapter = Kill(
        Command::new(BIN)
            .args(["serve-adapter", "--socket"])
            .arg(&a_sock)
            .arg("--grants")
            .arg(&grants)
            .stdout(o)
            .stderr(e)
            .spawn()
            .unwrap(),
    );
    wait_for(&a_sock);
    let (o, e) = quiet();
    let _watch = Kill(
        Command::new(BIN)
            .args(["watch", "adapter", "--format", "json", "--listen"])
            .arg(&w_sock)
            .arg("--upstream")
            .arg(&a_sock)
            .stdout(o)
            .stderr(e)
            .spawn()
            .unwrap(),
    );
    wait_for(&w_sock);
    // Warm-up.
    rtt(&a_sock, &d, n / 5, "warm-a");
    rtt(&w_sock, &d, n / 5, "warm-w");
    let (mut direct, mut watched) = (Vec::new(), Vec::new());
    for rep in 0..reps {
        direct.push(rtt(&a_sock, &d, n, &format!("a{rep}")));
        watched.push(rtt(&w_sock, &d, n, &format!("w{rep}")));
    }
    direct.sort_by(f64::total_cmp);
    watched.sort_by(f64::total_cmp);
    let (a, w) = (direct[direct.len() / 2], watched[watched.len() / 2]);
    let added = (w - a) / 2.0;
    println!("watch latency (PI_BENCH_PIN={pin}, {reps} repetitions x {n} fs.stat round trips, medians of p50s)");
    println!("  direct round trip p50        {a:8.1} µs   (repetitions: {direct:.1?})");
    println!("  through watch round trip p50 {w:8.1} µs   (repetitions: {watched:.1?})");
    println!(
        "  added per frame (2 per round trip) {added:8.1} µs   target <= 50 µs: {}",
        if added <= 50.0 { "met" } else { "NOT met" }
    );
}
