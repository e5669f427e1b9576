//! Hardening round 3 of the reference adapter (issue 25): real `pi-conform serve-adapter`
//! processes, real sockets, real signals, real files.

mod support;

use std::io::Read;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sha2::Digest;
use support::{mint, Adapter, Client, Opts};

/// The binary under test (`PI_CONFORM_BIN` overrides it, to run these repros against an
/// older build and watch them fail).
fn bin() -> String {
    std::env::var("PI_CONFORM_BIN").unwrap_or_else(|_| support::bin().to_string())
}

/// Start a `serve-adapter` process on `socket` with `grants` and extra flags, logging to `log`;
/// returns once the socket accepts.
fn spawn_adapter(socket: &Path, grants: &Path, log: &Path, extra: &[&str]) -> Child {
    let logf = std::fs::File::create(log).unwrap();
    let child = Command::new(bin())
        .args(["serve-adapter", "--log-format", "json", "--socket"])
        .arg(socket)
        .arg("--grants")
        .arg(grants)
        .args(extra)
        .env("PI_CONFORM_LOG", "debug")
        .stdout(Stdio::null())
        .stderr(logf)
        .spawn()
        .unwrap();
    let t = Instant::now();
    while UnixStream::connect(socket).is_err() {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "adapter did not start: {}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

/// The fixture's adapter again, as the binary under test, with extra flags.
fn restart_with(a: &mut Adapter, extra: &[&str]) {
    a.sigterm();
    a.child = Some(spawn_adapter(&a.socket, &a.grants, &a.log, extra));
    // Let the readiness probe's connection go.
    std::thread::sleep(Duration::from_millis(300));
}

fn call(c: &mut Client, id: &str, key: &str, op: &str, payload: Value) -> Value {
    c.send(&c.invoke(id, key, op, payload));
    c.result_of(id)
}

/// Wait for a child to exit, at most `within`; `None` (and the child killed) when it did not.
fn exit_within(child: &mut Child, within: Duration) -> Option<(std::process::ExitStatus, Duration)> {
    let t = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return Some((s, t.elapsed()));
        }
        if t.elapsed() > within {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn sighup(a: &Adapter) {
    let pid = rustix::process::Pid::from_child(a.child.as_ref().unwrap());
    rustix::process::kill_process(pid, rustix::process::Signal::HUP).unwrap();
}

/// Wait until the adapter's log holds `needle` `n` times.
fn wait_log(a: &Adapter, needle: &str, n: usize) {
    let t = Instant::now();
    while a.log_text().matches(needle).count() < n {
        assert!(t.elapsed() < Duration::from_secs(10), "no {needle:?} in the log:\n{}", a.log_text());
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn handle_hash(descriptor: &Value) -> String {
    sha256_hex(descriptor["binding"]["capabilityHandle"].as_str().unwrap().as_bytes())
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(sha2::Sha256::digest(bytes))
}

fn bind(socket: &Path, descriptor: &Value) -> Client {
    let mut c = Client::new(socket, descriptor.clone());
    c.send(&c.bind_frame());
    let b = c.recv().expect("bound");
    assert_eq!(b, c.expected_bound());
    c
}

// ---------------------------------------------------------------------------------------
// N3: one lock key per file, whatever the grant.

/// Two grants whose roots nest (`R` and `R/sub`) name one file `R/sub/f.txt` by two paths.
/// Writes racing through both with the same `expectedDigest` (the file's current digest):
/// exactly one may win each race, the other must see `digest_mismatch` — both winning is a
/// lost update.
#[test]
fn expected_digest_is_atomic_across_nested_grant_roots() {
    let mut a = Adapter::start(Opts::default());
    restart_with(&mut a, &[]);
    let sub = a.root.join("sub");
    std::fs::create_dir(&sub).unwrap();
    let inner = mint(&a.grants, &a.socket, &sub, "host-t", "sess-sub", 1, &Opts::default());
    sighup(&a);
    wait_log(&a, "grants reloaded", 1);
    let file = sub.join("f.txt");
    // Big enough that writing and syncing the new bytes takes a while: the window between
    // the digest check and the rename is wide.
    let size = 256 * 1024;
    let mut both_won = 0;
    let mut one_won = 0;
    for round in 0..40 {
        let start = format!("start {round}\n");
        std::fs::write(&file, &start).unwrap();
        let expected = sha256_hex(start.as_bytes());
        let outer = a.bound();
        let inner_c = bind(&a.socket, &inner);
        let content = |who: &str| format!("{who}{round}:{}", "x".repeat(size));
        let (co, ci) = (content("outer"), content("inner"));
        // Both lines are written at the same moment from two threads.
        let go = std::sync::Arc::new(std::sync::Barrier::new(2));
        let race = |mut c: Client, path: &'static str, content: String, go: std::sync::Arc<std::sync::Barrier>| {
            let expected = expected.clone();
            std::thread::spawn(move || {
                let line = c.invoke(
                    "w",
                    &format!("kw{round}"),
                    "fs.write",
                    json!({"path": path, "content": content, "expectedDigest": expected}),
                );
                go.wait();
                c.send(&line);
                c.result_of("w")
            })
        };
        let to = race(outer, "sub/f.txt", co.clone(), go.clone());
        let ti = race(inner_c, "f.txt", ci.clone(), go);
        let (ro, ri) = (to.join().unwrap(), ti.join().unwrap());
        let codes: Vec<&str> = [&ro, &ri]
            .iter()
            .map(|r| if r["ok"] == true { "ok" } else { r["error"]["code"].as_str().unwrap() })
            .collect();
        let wins = codes.iter().filter(|c| **c == "ok").count();
        assert!(codes.iter().all(|c| *c == "ok" || *c == "digest_mismatch"), "round {round}: {codes:?}");
        match wins {
            2 => both_won += 1,
            1 => one_won += 1,
            _ => panic!("round {round}: no write won: {codes:?}"),
        }
        // The file holds the winner's bytes, whole.
        let now = std::fs::read_to_string(&file).unwrap();
        assert!(now == co || now == ci, "round {round}: the file is neither write");
    }
    assert_eq!(
        both_won, 0,
        "both writes accepted the same expectedDigest in {both_won} of 40 races (one won in {one_won})"
    );
}

// ---------------------------------------------------------------------------------------
// N1: shutdown is bounded in time whatever clients do.

/// A bound client floods the adapter with reads of a 900 KB file and never reads a byte: the
/// adapter's writer blocks on a full socket. SIGTERM still removes the socket at once (a new
/// client is refused, not left hanging) and the process exits within the documented grace
/// (`SHUTDOWN_GRACE`, 2 s) plus slack.
#[test]
fn sigterm_completes_while_a_bound_client_stops_reading() {
    let mut a = Adapter::start(Opts::default());
    restart_with(&mut a, &[]);
    std::fs::write(a.root.join("big.txt"), "r".repeat(900_000)).unwrap();
    let mut c = a.bound();
    for i in 0..20 {
        c.send(&c.invoke(&format!("r{i}"), &format!("k{i}"), "fs.read", json!({"path": "big.txt"})));
    }
    // Let the results pile up until the adapter's writes block.
    std::thread::sleep(Duration::from_millis(1500));
    let mut child = a.child.take().unwrap();
    rustix::process::kill_process(rustix::process::Pid::from_child(&child), rustix::process::Signal::TERM).unwrap();
    let t = Instant::now();
    while a.socket.exists() {
        assert!(t.elapsed() < Duration::from_secs(2), "the socket file stayed {:?} after SIGTERM", t.elapsed());
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(UnixStream::connect(&a.socket).is_err(), "a new client was accepted after SIGTERM");
    let exited = exit_within(&mut child, Duration::from_secs(15));
    if exited.is_none() {
        eprintln!("{}", a.log_text().lines().rev().take(15).collect::<Vec<_>>().join("\n"));
    }
    let (status, took) = exited.expect("serve-adapter still ran 15 s after SIGTERM while a client stopped reading");
    assert!(status.success(), "{status:?}");
    assert!(took < Duration::from_secs(5), "shutdown took {took:?} (bound: 2 s grace)");
    drop(c);
    let log = a.log_text();
    assert!(log.contains("shutting down") && log.contains("stopped"), "{log}");
}

// ---------------------------------------------------------------------------------------
// N2: at the cap of unbound connections the oldest waiting one is shed.

/// An attacker holds every unbound slot (`--max-unbound 8`) and re-opens each connection the
/// adapter closes, as fast as it notices. Twenty legitimate binds, one after another, each
/// get `bound`: a newcomer sheds the oldest waiting connection instead of being refused.
#[test]
fn an_attacker_holding_every_unbound_slot_never_locks_out_a_bind() {
    let mut a = Adapter::start(Opts::default());
    restart_with(&mut a, &["--max-unbound", "8"]);
    let stop = Arc::new(AtomicBool::new(false));
    let held = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    // Connections of the attacker the adapter closed (a shed one reads EOF), seen as they go.
    let shed_seen = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let attacker = {
        let (stop, held, socket, shed_seen) = (stop.clone(), held.clone(), a.socket.clone(), shed_seen.clone());
        std::thread::spawn(move || {
            let open = || {
                let s = UnixStream::connect(&socket).ok()?;
                s.set_nonblocking(true).ok()?;
                Some(s)
            };
            let mut conns: Vec<Option<UnixStream>> = (0..8).map(|_| open()).collect();
            let mut reopened = 0usize;
            while !stop.load(Ordering::Relaxed) {
                for c in conns.iter_mut() {
                    let alive = c.as_mut().is_some_and(|s| {
                        let mut b = [0u8; 16];
                        matches!(s.read(&mut b), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
                    });
                    if !alive {
                        if c.is_some() {
                            shed_seen.fetch_add(1, Ordering::Relaxed);
                        }
                        *c = open();
                        reopened += 1;
                    }
                }
                held.store(conns.iter().filter(|c| c.is_some()).count(), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(2));
            }
            reopened
        })
    };
    let t = Instant::now();
    while held.load(Ordering::Relaxed) < 8 {
        assert!(t.elapsed() < Duration::from_secs(5), "the attacker could not hold 8 connections");
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(300));
    let mut bound = 0;
    for _ in 0..20 {
        let mut c = a.connect();
        c.stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        c.send(&c.bind_frame());
        let mut line = String::new();
        let _ = std::io::BufRead::read_line(&mut std::io::BufReader::new(&c.stream), &mut line);
        if let Ok(v) = serde_json::from_str::<Value>(&line) {
            assert_eq!(v, c.expected_bound());
            bound += 1;
        }
    }
    // A shed connection is closed by its own task, which may run after the binds are done on
    // a loaded machine: give the attacker time to see it before stopping it.
    let t = Instant::now();
    while shed_seen.load(Ordering::Relaxed) == 0 && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(10));
    }
    stop.store(true, Ordering::Relaxed);
    let reopened = attacker.join().unwrap();
    eprintln!("bound {bound} of 20 while the attacker re-opened {reopened} connections");
    assert_eq!(bound, 20, "{bound} of 20 legitimate binds got through an attacker holding every unbound slot");
    assert!(reopened > 0 && shed_seen.load(Ordering::Relaxed) > 0, "no connection of the attacker was shed");
    wait_log(&a, "\"shed\"", 1);
}

// ---------------------------------------------------------------------------------------
// N7: a retried write never runs twice within its TTL.

fn write_payload() -> Value {
    json!({"path": "f.txt", "content": "A"})
}

/// The retry of a write answered earlier must replay, not run: the file, changed by someone
/// else since, keeps that change.
fn assert_replayed(c: &mut Client, id: &str, first: &Value, file: &Path) {
    let r = call(c, id, "kw", "fs.write", write_payload());
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["data"], first["data"], "the retry's outcome is the first one's");
    assert_eq!(
        std::fs::read_to_string(file).unwrap(),
        "B",
        "the retried write ran again and overwrote a concurrent change"
    );
}

/// `maxIdempotencyKeys` 8: one write, then 20 read-only requests with fresh keys. The write's
/// key must survive them (read-only keys are evicted first, and never evict a mutating key).
#[test]
fn read_only_requests_never_evict_a_write_key() {
    let opts = Opts { limits: [1_048_576, 1_048_576, 4, 16, 30_000, 8, 3_600_000], ..Opts::default() };
    let mut a = Adapter::start(opts);
    restart_with(&mut a, &[]);
    let file = a.root.join("f.txt");
    let mut c = a.bound();
    let first = call(&mut c, "w1", "kw", "fs.write", write_payload());
    assert_eq!(first["ok"], true, "{first}");
    std::fs::write(&file, "B").unwrap();
    for i in 0..20 {
        let r = call(&mut c, &format!("s{i}"), &format!("ks{i}"), "fs.stat", json!({"path": "f.txt"}));
        assert_eq!(r["ok"], true, "{r}");
    }
    assert_replayed(&mut c, "w2", &first, &file);
    // Keys first used by reads still get their conflict check while there is room.
    let r = call(&mut c, "s-again", "ks19", "fs.read", json!({"path": "f.txt"}));
    assert_eq!(r["error"]["code"], "idempotency_conflict", "{r}");
}

/// A write answered on one connection; the daemon binds again while that connection is live
/// (replacing it): the retry on the new connection replays, twice. Another grant with the
/// same key and payload is another scope: its write runs.
#[test]
fn a_replacing_bind_keeps_the_outcomes_of_completed_writes() {
    let mut a = Adapter::start(Opts::default());
    restart_with(&mut a, &[]);
    let file = a.root.join("f.txt");
    let mut c1 = a.bound();
    let first = call(&mut c1, "w1", "kw", "fs.write", write_payload());
    assert_eq!(first["ok"], true, "{first}");
    std::fs::write(&file, "B").unwrap();
    // A replacing bind while c1 is live.
    let mut c2 = a.bound();
    assert_eq!(c1.recv().expect("revoked")["kind"], "revoked");
    assert_replayed(&mut c2, "w2", &first, &file);
    // And again over c2.
    let mut c3 = a.bound();
    assert_eq!(c2.recv().expect("revoked")["kind"], "revoked");
    assert_replayed(&mut c3, "w3", &first, &file);
    // The cache belongs to the grant: another grant's identical write runs.
    let other = mint(&a.grants, &a.socket, &a.root, "host-t", "sess-other", 1, &Opts::default());
    sighup(&a);
    wait_log(&a, "grants reloaded", 1);
    let mut o = bind(&a.socket, &other);
    let r = call(&mut o, "o1", "kw", "fs.write", write_payload());
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "A", "another grant's write ran");
}

// ---------------------------------------------------------------------------------------
// N12: one connection per grant across processes.

/// Two adapter processes on two sockets with one grants file: while one holds a live
/// connection of a grant, the other refuses to bind it (closes without `bound`, log reason
/// `bound_in_another_process`); once that connection ends, or its process dies (`kill -9`),
/// the grant binds on the other. The lock files beside the grants file do not name the
/// handle's digest.
#[test]
fn a_second_process_never_binds_a_grant_bound_in_the_first() {
    let mut a = Adapter::start(Opts::default());
    restart_with(&mut a, &[]);
    std::fs::write(a.root.join("f.txt"), "x").unwrap();
    // `grant` created the grant's lock file; without it (a grant minted by an older version)
    // the first bind creates it, at the same path for both processes.
    let mut removed = 0;
    for e in std::fs::read_dir(a.dir.path()).unwrap() {
        let path = e.unwrap().path();
        if path.file_name().unwrap().to_string_lossy().contains(".bind-") {
            std::fs::remove_file(&path).unwrap();
            removed += 1;
        }
    }
    assert!(removed >= 1, "grant left no bind lock file");
    let (sock_b, log_b) = (a.dir.path().join("b.sock"), a.dir.path().join("b.log"));
    let mut b = spawn_adapter(&sock_b, &a.grants, &log_b, &[]);
    std::thread::sleep(Duration::from_millis(300));
    let mut ca = a.bound();
    let try_bind = |socket: &Path| -> Option<Client> {
        let mut c = Client::new(socket, a.descriptor.clone());
        c.send(&c.bind_frame());
        let got = c.recv()?;
        assert_eq!(got, c.expected_bound());
        Some(c)
    };
    assert!(try_bind(&sock_b).is_none(), "process B bound a grant live in process A");
    let log_text = std::fs::read_to_string(&log_b).unwrap();
    assert!(log_text.contains("bound_in_another_process"), "{log_text}");
    // A's connection is untouched.
    assert_eq!(call(&mut ca, "r1", "k1", "fs.stat", json!({"path": "f.txt"}))["ok"], true);
    // A's connection ends: B may bind; then A refuses.
    drop(ca);
    let t = Instant::now();
    let mut cb = loop {
        if let Some(c) = try_bind(&sock_b) {
            break c;
        }
        assert!(t.elapsed() < Duration::from_secs(5), "B never bound after A's connection ended");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(call(&mut cb, "r2", "k2", "fs.stat", json!({"path": "f.txt"}))["ok"], true);
    assert!(try_bind(&a.socket).is_none(), "process A bound a grant live in process B");
    // B dies without a word: its lock goes with it.
    let _ = b.kill();
    let _ = b.wait();
    let t = Instant::now();
    while try_bind(&a.socket).is_none() {
        assert!(t.elapsed() < Duration::from_secs(5), "A never bound after B died");
        std::thread::sleep(Duration::from_millis(50));
    }
    let digest = handle_hash(&a.descriptor);
    for e in std::fs::read_dir(a.dir.path()).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().into_owned();
        assert!(!name.contains(&digest[..16]), "a file name carries the handle's digest: {name}");
    }
    assert!(!std::fs::read_to_string(&log_b).unwrap().contains(&a.handle()));
}

// ---------------------------------------------------------------------------------------
// N11: the memory of edits is bounded, however many run.

fn vm_hwm_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// One edit of a 60 MiB file raises the adapter's peak RSS by about the file's size; four
/// edits of four such files at once (`maxConcurrentRequests` 4) stay within the edit memory
/// budget (128 MiB: two at a time), not four files' worth. The edits do not match, so
/// nothing is written.
#[test]
fn concurrent_edits_of_big_files_hold_bounded_memory() {
    const MIB: u64 = 1024;
    let mut a = Adapter::start(Opts::default());
    restart_with(&mut a, &[]);
    let line = "ab. cd, ef! gh; ij: kl.\n";
    let body = line.repeat(60 * 1024 * 1024 / line.len());
    for i in 0..4 {
        std::fs::write(a.root.join(format!("big{i}.txt")), &body).unwrap();
    }
    drop(body);
    let pid = a.child.as_ref().unwrap().id();
    let mut c = a.bound();
    // A debug build scans and searches 60 MiB slowly.
    c.stream.set_read_timeout(Some(Duration::from_secs(600))).unwrap();
    let edit =
        |i: usize| json!({"path": format!("big{i}.txt"), "edits": [{"oldText": "absent needle", "newText": "x"}]});
    let idle = vm_hwm_kib(pid);
    let r = call(&mut c, "e-one", "k-one", "fs.edit", edit(0));
    assert_eq!(r["error"]["code"], "edit_not_found", "{r}");
    let one = vm_hwm_kib(pid);
    for i in 0..4 {
        c.send(&c.invoke(&format!("e{i}"), &format!("k{i}"), "fs.edit", edit(i)));
    }
    // The four finish in any order: take every result as it comes.
    let mut left: std::collections::BTreeSet<String> = (0..4).map(|i| format!("e{i}")).collect();
    while !left.is_empty() {
        let r = c.recv().expect("the connection stays open until every edit is answered");
        if r["kind"] != "result" {
            continue;
        }
        let id = r["requestId"].as_str().unwrap_or_default().to_string();
        assert!(left.remove(&id), "an unexpected or repeated result: {r}");
        assert_eq!(r["error"]["code"], "edit_not_found", "{r}");
    }
    let four = vm_hwm_kib(pid);
    eprintln!(
        "adapter peak RSS: idle {idle} KiB, after one edit of a 60 MiB file {one} KiB, after four at once {four} KiB"
    );
    assert!(one - idle >= 55 * MIB, "one edit did not load the file ({idle} -> {one} KiB): the measure is blind");
    assert!(
        four - idle < 170 * MIB,
        "four concurrent edits of 60 MiB files peaked at {} MiB over idle",
        (four - idle) / MIB
    );
}
