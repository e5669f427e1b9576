//! Hardening of the reference adapter against hostile peers and local races (issue 15):
//! real `pi-conform` processes, real sockets, real signals.

mod support;

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sha2::Digest;
use support::{bin, mint, Adapter, Client, Opts};

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

/// Read until EOF (or the read timeout); true when the peer closed within `within`.
fn closed_within(s: &mut UnixStream, within: Duration) -> bool {
    s.set_read_timeout(Some(within)).unwrap();
    let t = Instant::now();
    let mut b = [0u8; 4096];
    loop {
        match s.read(&mut b) {
            Ok(0) => return t.elapsed() <= within,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

fn grants_json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn write_grants(path: &Path, v: &Value) {
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, serde_json::to_vec(v).unwrap()).unwrap();
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn handle_hash(descriptor: &Value) -> String {
    hex::encode(sha2::Sha256::digest(descriptor["binding"]["capabilityHandle"].as_str().unwrap().as_bytes()))
}

/// Start a second adapter process with extra flags on an existing grants file.
fn spawn_with(a: &mut Adapter, extra: &[&str]) {
    let log = std::fs::File::create(&a.log).unwrap();
    let child = Command::new(bin())
        .args(["serve-adapter", "--log-format", "json", "--socket"])
        .arg(&a.socket)
        .arg("--grants")
        .arg(&a.grants)
        .args(extra)
        .env("PI_CONFORM_LOG", "debug")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    a.child = Some(child);
    let t = Instant::now();
    while UnixStream::connect(&a.socket).is_err() {
        assert!(t.elapsed() < Duration::from_secs(20), "adapter did not start: {}", a.log_text());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Restart the fixture's adapter with extra flags.
fn restart_with(a: &mut Adapter, extra: &[&str]) {
    a.sigterm();
    spawn_with(a, extra);
}

// ---------------------------------------------------------------------------------------
// F6: `grant` under concurrency.

#[test]
fn fifty_parallel_grants_lose_nothing() {
    let dir = tempfile::Builder::new().prefix("pc-grant").tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let grants = dir.path().join("grants.json");
    let socket = dir.path().join("a.sock");
    let children: Vec<Child> = (0..50)
        .map(|i| {
            Command::new(bin())
                .args(["grant", "--grants"])
                .arg(&grants)
                .arg("--socket")
                .arg(&socket)
                .arg("--root")
                .arg(&root)
                .args(["--host-instance", "host-t", "--session", &format!("s-{i}"), "--generation", "1"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let descriptors: Vec<Value> = children
        .into_iter()
        .map(|c| {
            let out = c.wait_with_output().unwrap();
            assert!(out.status.success(), "grant failed: {}", String::from_utf8_lossy(&out.stderr));
            serde_json::from_slice(&out.stdout).unwrap()
        })
        .collect();
    let file = grants_json(&grants);
    let stored: Vec<&str> =
        file["grants"].as_array().unwrap().iter().map(|g| g["handleSha256"].as_str().unwrap()).collect();
    assert_eq!(stored.len(), 50, "every parallel grant must be in the file");
    for d in &descriptors {
        assert!(stored.contains(&handle_hash(d).as_str()), "a printed descriptor has no grant in the file");
    }
    // And each descriptor binds.
    let mut a = Adapter {
        dir,
        root,
        socket,
        grants,
        log: std::path::PathBuf::new(),
        descriptor: descriptors[0].clone(),
        child: None,
    };
    a.log = a.dir.path().join("adapter.log");
    a.spawn(0);
    for d in &descriptors {
        let mut c = Client::new(&a.socket, d.clone());
        c.send(&c.bind_frame());
        assert_eq!(c.recv().expect("bound"), c.expected_bound());
    }
}

// ---------------------------------------------------------------------------------------
// F5: revocation by reload.

#[test]
fn reload_that_removes_a_grant_revokes_it() {
    let a = Adapter::start(Opts { op_delay_ms: 3000, ..Opts::default() });
    let other = mint(&a.grants, &a.socket, &a.root, "host-t", "sess-2", 1, &Opts::default());
    // The second grant is only in the file; load it.
    sighup(&a);
    wait_log(&a, "grants reloaded", 1);
    std::fs::write(a.root.join("f.txt"), "x").unwrap();
    // c1: bound, with a request in flight (the operation waits 3 s).
    let mut c1 = a.bound();
    c1.send(&c1.invoke("r1", "k1", "fs.stat", json!({"path": "f.txt"})));
    // c2: accepted before the reload, binds only after it.
    let mut c2 = a.connect();
    // c3: bound under the grant that stays.
    let mut c3 = Client::new(&a.socket, other.clone());
    c3.send(&c3.bind_frame());
    assert_eq!(c3.recv().expect("bound"), c3.expected_bound());
    // Remove the first grant.
    let mut file = grants_json(&a.grants);
    let keep = handle_hash(&other);
    file["grants"].as_array_mut().unwrap().retain(|g| g["handleSha256"] == keep.as_str());
    assert_eq!(file["grants"].as_array().unwrap().len(), 1);
    write_grants(&a.grants, &file);
    sighup(&a);
    wait_log(&a, "grants reloaded", 2);
    // c1 is revoked: `revoked`, then EOF, and never the in-flight result.
    let t = Instant::now();
    let first = c1.recv().expect("a revoked frame before the close");
    assert_eq!(first["kind"], "revoked", "in-flight work is aborted, not answered: {first}");
    assert!(c1.recv().is_none(), "the revoked connection must close");
    assert!(t.elapsed() < Duration::from_secs(2), "revocation must not wait for in-flight work");
    // c2 cannot bind the removed grant.
    c2.send(&c2.bind_frame());
    assert!(c2.recv().is_none(), "a connection accepted before the reload bound a removed grant");
    // A fresh connection cannot either.
    let mut c4 = a.connect();
    c4.send(&c4.bind_frame());
    assert!(c4.recv().is_none(), "a removed grant still binds");
    // The remaining grant's connection keeps working.
    c3.send(&c3.invoke("r2", "k2", "fs.stat", json!({"path": "f.txt"})));
    assert_eq!(c3.result_of("r2")["ok"], true);
    assert!(a.log_text().contains("grant_revoked"));
}

// ---------------------------------------------------------------------------------------
// F10: a grants file swapped for a FIFO never blocks the reload.

#[test]
fn reload_of_a_fifo_grants_file_is_refused_without_blocking() {
    let mut a = Adapter::start(Opts::default());
    std::fs::remove_file(&a.grants).unwrap();
    rustix::fs::mknodat(rustix::fs::CWD, &a.grants, rustix::fs::FileType::Fifo, rustix::fs::Mode::from(0o600), 0)
        .unwrap();
    sighup(&a);
    wait_log(&a, "grants reload refused", 1);
    // The old grants are kept and the server still serves.
    let _c = a.bound();
    // And SIGTERM is acted on promptly.
    let t = Instant::now();
    let status = a.sigterm();
    assert!(status.success(), "{status:?}");
    assert!(t.elapsed() < Duration::from_secs(5));
}

// ---------------------------------------------------------------------------------------
// F1: pre-bind discipline.

#[test]
fn a_slow_bind_is_closed_at_the_deadline() {
    let mut a = Adapter::start(Opts::default());
    restart_with(&mut a, &["--bind-deadline-ms", "500"]);
    // A slowloris: one byte of a valid bind every 100 ms never completes in time.
    let mut c = a.connect();
    let line = serde_json::to_vec(&c.bind_frame()).unwrap();
    let t = Instant::now();
    let mut closed = false;
    for b in &line {
        if c.stream.write_all(std::slice::from_ref(b)).is_err() {
            closed = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
        if t.elapsed() > Duration::from_secs(3) {
            break;
        }
    }
    assert!(closed || closed_within(&mut c.stream, Duration::from_secs(2)), "the slow bind was not closed");
    assert!(t.elapsed() < Duration::from_secs(3), "closed only after {:?}", t.elapsed());
    wait_log(&a, "bind_deadline", 1);
    // A prompt bind still works.
    let _ok = a.bound();
}

#[test]
fn a_bind_line_over_the_largest_legal_bind_is_refused_at_once() {
    let a = Adapter::start(Opts::default());
    let mut c = a.connect();
    // One byte more than the largest legal bind (2291 bytes with its LF), no LF yet.
    c.send_raw(&vec![b' '; 2292]);
    assert!(closed_within(&mut c.stream, Duration::from_secs(2)), "an oversize partial bind is buffered");
    wait_log(&a, "oversize_bind", 1);
    // The largest legal bind itself is not refused as oversize: it reaches the bind check.
    assert_eq!(pi_conform::adapter::session::MAX_BIND_LINE, 2291);
}

#[test]
fn unbound_connections_are_capped() {
    let mut a = Adapter::start(Opts::default());
    restart_with(&mut a, &["--max-unbound", "8"]);
    // Let the start-up readiness probe's connection go, so it holds no slot.
    std::thread::sleep(Duration::from_millis(500));
    // Twelve unbound connections: exactly eight are kept, the four over the cap are closed.
    let mut idle: Vec<UnixStream> = (0..12).map(|_| UnixStream::connect(&a.socket).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(500));
    let closed = idle.iter_mut().map(|s| closed_within(s, Duration::from_millis(200))).filter(|c| *c).count();
    assert_eq!(closed, 4, "of 12 unbound connections with a cap of 8, {closed} were closed");
    wait_log(&a, "unbound connection cap reached", 1);
    drop(idle);
    std::thread::sleep(Duration::from_millis(300));
    // Slots come back when unbound connections go; bound ones do not hold a slot.
    let bound: Vec<Client> = (0..10).map(|_| a.bound()).collect();
    assert_eq!(bound.len(), 10);
}

// ---------------------------------------------------------------------------------------
// F2: descriptor exhaustion never makes the accept loop spin.

fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = after.split(' ').collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

#[test]
fn accept_backs_off_at_the_descriptor_limit() {
    let mut a = Adapter::start(Opts::default());
    a.sigterm();
    let log = std::fs::File::create(&a.log).unwrap();
    // A shell lowers the descriptor limit, then becomes the adapter.
    let cmd = format!(
        "ulimit -n 32 && exec '{}' serve-adapter --log-format json --max-unbound 1000 --socket '{}' --grants '{}'",
        bin(),
        a.socket.display(),
        a.grants.display()
    );
    a.child = Some(Command::new("sh").args(["-c", &cmd]).stdout(Stdio::null()).stderr(log).spawn().unwrap());
    let t = Instant::now();
    while UnixStream::connect(&a.socket).is_err() {
        assert!(t.elapsed() < Duration::from_secs(20), "adapter did not start: {}", a.log_text());
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = a.child.as_ref().unwrap().id();
    let held: Vec<UnixStream> = (0..60).filter_map(|_| UnixStream::connect(&a.socket).ok()).collect();
    std::thread::sleep(Duration::from_millis(500));
    let before = cpu_ticks(pid);
    std::thread::sleep(Duration::from_secs(2));
    let used = cpu_ticks(pid) - before;
    let ticks_per_s = 100; // USER_HZ
    assert!(used * 10 < 2 * ticks_per_s, "the accept loop used {used} ticks of CPU in 2 s at the descriptor limit");
    let lines = a.log_text().matches("accept failed").count();
    assert!((1..=10).contains(&lines), "{lines} accept-failure lines in ~2.5 s (want rate-limited, at least one)");
    drop(held);
    // Once descriptors are free again the adapter serves.
    std::thread::sleep(Duration::from_millis(1500));
    let _c = a.bound();
}

// ---------------------------------------------------------------------------------------
// F11: a live socket with a full backlog never hangs startup.

#[test]
fn startup_does_not_hang_on_a_live_socket_with_a_full_backlog() {
    let dir = tempfile::Builder::new().prefix("pc-stale").tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let socket = dir.path().join("a.sock");
    let grants = dir.path().join("grants.json");
    mint(&grants, &socket, &root, "h", "s", 1, &Opts::default());
    // A listener that never accepts, its backlog filled with non-blocking connects.
    let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let mut fill = Vec::new();
    for _ in 0..10_000 {
        use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
        let s = rustix::net::socket_with(AddressFamily::UNIX, SocketType::STREAM, SocketFlags::NONBLOCK, None).unwrap();
        match rustix::net::connect(&s, &SocketAddrUnix::new(&socket).unwrap()) {
            Ok(()) => fill.push(s),
            Err(_) => break,
        }
    }
    let t = Instant::now();
    let mut child = Command::new(bin())
        .args(["serve-adapter", "--socket"])
        .arg(&socket)
        .arg("--grants")
        .arg(&grants)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if t.elapsed() > Duration::from_secs(5) {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let status = status.expect("startup hung probing a live socket with a full backlog");
    assert!(!status.success());
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(err.contains("another server answers"), "{err}");
    assert!(socket.exists(), "a live server's socket must not be removed");
    drop(listener);
}

// ---------------------------------------------------------------------------------------
// F4: walks never lie, and hold a bounded number of descriptors.

/// Start the fixture's adapter again under `ulimit -n <nofile>` with extra flags.
fn restart_limited(a: &mut Adapter, nofile: u32, extra: &str) {
    a.sigterm();
    let log = std::fs::File::create(&a.log).unwrap();
    let cmd = format!(
        "ulimit -n {nofile} && exec '{}' serve-adapter --log-format json {extra} --socket '{}' --grants '{}'",
        bin(),
        a.socket.display(),
        a.grants.display()
    );
    a.child = Some(Command::new("sh").args(["-c", &cmd]).stdout(Stdio::null()).stderr(log).spawn().unwrap());
    let t = Instant::now();
    while UnixStream::connect(&a.socket).is_err() {
        assert!(t.elapsed() < Duration::from_secs(20), "adapter did not start: {}", a.log_text());
        std::thread::sleep(Duration::from_millis(20));
    }
    // Let the readiness probes' connections go.
    std::thread::sleep(Duration::from_millis(300));
}

fn call(c: &mut Client, id: &str, op: &str, payload: Value) -> Value {
    c.send(&c.invoke(id, &format!("k-{id}"), op, payload));
    c.result_of(id)
}

/// A search over a tree 2,000 directories deep finds the match at the bottom under a
/// descriptor limit of 40 (the walk holds no descriptor per level); with every descriptor
/// taken it fails `io_error` (retryable) instead of answering `ok` without the match; once
/// descriptors are free it finds it again.
#[test]
fn a_deep_search_under_descriptor_pressure_never_answers_an_incomplete_ok() {
    let mut a = Adapter::start(Opts::default());
    let mut deep = a.root.clone();
    let mut rel = String::new();
    for _ in 0..2000 {
        deep.push("d");
        rel.push_str("d/");
    }
    std::fs::create_dir_all(&deep).unwrap();
    std::fs::write(deep.join("n.txt"), "a needle here\n").unwrap();
    std::fs::write(a.root.join("top.txt"), "no match\n").unwrap();
    let want_path = format!("{rel}n.txt");
    restart_limited(&mut a, 40, "--max-unbound 1000");
    let mut c = a.bound();
    let r = call(&mut c, "s1", "fs.search", json!({"path": ".", "query": "needle"}));
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["data"]["truncated"], false);
    let m = r["data"]["matches"].as_array().unwrap();
    assert_eq!(m.len(), 1, "{r}");
    assert_eq!(m[0]["path"], want_path.as_str());
    assert_eq!((m[0]["line"].as_u64(), m[0]["column"].as_u64()), (Some(1), Some(3)));
    // Take every descriptor the adapter has left: unbound connections until accept fails.
    let held: Vec<UnixStream> = (0..80).filter_map(|_| UnixStream::connect(&a.socket).ok()).collect();
    wait_log(&a, "accept failed", 1);
    let r = call(&mut c, "s2", "fs.search", json!({"path": ".", "query": "needle"}));
    assert_eq!(r["ok"], false, "a search that could not open the tree answered ok: {r}");
    assert_eq!(r["error"]["code"], "io_error", "{r}");
    assert_eq!(r["error"]["retryable"], true);
    let r = call(&mut c, "l1", "fs.list", json!({"path": "d"}));
    assert_eq!((r["ok"].as_bool(), r["error"]["code"].as_str()), (Some(false), Some("io_error")), "{r}");
    drop(held);
    // Descriptors come back: the same search is complete again.
    let t = Instant::now();
    loop {
        let r = call(
            &mut c,
            &format!("s3-{}", t.elapsed().as_millis()),
            "fs.search",
            json!({"path": ".", "query": "needle"}),
        );
        if r["ok"] == true {
            assert_eq!(r["data"]["matches"][0]["path"], want_path.as_str(), "{r}");
            break;
        }
        assert_eq!(r["error"]["code"], "io_error", "{r}");
        assert!(t.elapsed() < Duration::from_secs(10), "descriptors never came back");
        std::thread::sleep(Duration::from_millis(100));
    }
}

// ---------------------------------------------------------------------------------------
// F3: one live connection per grant.

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// DECISION (SPEC PC-4.5): a bind of a grant that has a live connection replaces it — the
/// earlier one is revoked (in-flight work aborted, `revoked`, close), the new one works.
#[test]
fn a_later_bind_of_the_same_grant_replaces_the_live_connection() {
    let a = Adapter::start(Opts { op_delay_ms: 2000, ..Opts::default() });
    std::fs::write(a.root.join("f.txt"), "x").unwrap();
    let mut conns: Vec<Client> = Vec::new();
    for i in 0..10 {
        let mut c = a.bound();
        c.send(&c.invoke(&format!("r{i}"), &format!("k{i}"), "fs.stat", json!({"path": "f.txt"})));
        if let Some(prev) = conns.last_mut() {
            let f = prev.recv().expect("the replaced connection says revoked");
            assert_eq!(f["kind"], "revoked", "in-flight work of a replaced connection is aborted: {f}");
            assert!(prev.recv().is_none(), "the replaced connection must close");
        }
        conns.push(c);
    }
    wait_log(&a, "\"replaced\"", 9);
    let last = conns.last_mut().unwrap();
    assert_eq!(last.result_of("r9")["ok"], true, "the live connection works");
    // A different grant is not affected by this grant's binds.
    let other = mint(&a.grants, &a.socket, &a.root, "host-t", "sess-2", 1, &Opts::default());
    sighup(&a);
    wait_log(&a, "grants reloaded", 1);
    let mut o = Client::new(&a.socket, other);
    o.send(&o.bind_frame());
    assert_eq!(o.recv().expect("bound"), o.expected_bound());
    let _again = a.bound();
    o.send(&o.invoke("o1", "ko1", "fs.stat", json!({"path": "f.txt"})));
    assert_eq!(o.result_of("o1")["ok"], true);
}

/// Ten connections bound with one handle, each filling its queue with 1 MiB writes, hold
/// the memory of one: the RSS of the adapter after ten is compared with after one.
#[test]
fn ten_connections_of_one_grant_hold_the_memory_of_one() {
    let a = Adapter::start(Opts { op_delay_ms: 30_000, ..Opts::default() });
    let pid = a.child.as_ref().unwrap().id();
    let content = "w".repeat(1_000_000);
    let fill = |c: &mut Client, tag: &str| {
        // 4 running + 16 queued: every request is admitted.
        for i in 0..20 {
            let id = format!("{tag}-{i}");
            c.send(&c.invoke(&id, &id, "fs.write", json!({"path": format!("{tag}-{i}.txt"), "content": content})));
        }
    };
    let settle = || std::thread::sleep(Duration::from_millis(1500));
    let idle = rss_kib(pid);
    let mut first = a.bound();
    fill(&mut first, "one");
    settle();
    let one = rss_kib(pid);
    let mut conns = vec![first];
    for n in 1..10 {
        let mut c = a.bound();
        fill(&mut c, &format!("c{n}"));
        conns.push(c);
    }
    settle();
    let ten = rss_kib(pid);
    eprintln!("adapter RSS: idle {idle} KiB, one connection with 20 x 1 MB writes in flight {one} KiB, ten such connections of one grant {ten} KiB");
    assert!(one > idle + 15_000, "the in-flight writes of one connection are not held ({idle} -> {one} KiB)");
    assert!(
        ten < one + (one - idle),
        "ten connections of one grant hold more than twice one's in-flight memory: {one} -> {ten} KiB"
    );
}

// ---------------------------------------------------------------------------------------
// F9: a FIFO or device swapped in under a name is never opened.

/// How many `IN_OPEN` events of the FIFO watched by the inotify descriptor `ino` are queued
/// (an `O_PATH` open raises none; identical unread events are coalesced, so this counts
/// bursts of opens), draining the queue.
fn opens_seen(ino: &std::os::fd::OwnedFd) -> usize {
    let mut n = 0;
    let mut buf = [0u8; 4096];
    loop {
        match rustix::io::read(ino, &mut buf) {
            Ok(len) => {
                let mut i = 0;
                while i + 16 <= len {
                    let mask = u32::from_ne_bytes(buf[i + 4..i + 8].try_into().unwrap());
                    let name_len = u32::from_ne_bytes(buf[i + 12..i + 16].try_into().unwrap()) as usize;
                    if mask & rustix::fs::inotify::ReadFlags::OPEN.bits() != 0 {
                        n += 1;
                    }
                    i += 16 + name_len;
                }
            }
            Err(rustix::io::Errno::AGAIN) => return n,
            Err(e) => panic!("inotify read: {e}"),
        }
    }
}

/// `x.txt` (a regular file) and `p` (a FIFO) swap names as fast as `renameat2(RENAME_EXCHANGE)`
/// allows while `fs.read`, `fs.search` (the file, and the root as a directory search) and
/// `fs.edit` of `x.txt` run: between the adapter's look at the name and its open, the name
/// often changes type. The FIFO is never opened (no `IN_OPEN` on its inode — an `O_PATH`
/// descriptor raises none — and a non-blocking writer never finds a reader: `ENXIO` every
/// time), and every answer is either the file's or the typed refusal
/// `unsupported_file_type` (not retryable).
#[test]
fn a_fifo_swapped_in_under_a_name_is_never_opened() {
    use rustix::fs::{inotify, FileType, Mode, OFlags, RenameFlags, CWD};
    use std::os::fd::AsRawFd;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;

    let a = Adapter::start(Opts::default());
    let (file, fifo) = (a.root.join("x.txt"), a.root.join("p"));
    std::fs::write(&file, "one needle\n").unwrap();
    rustix::fs::mknodat(CWD, &fifo, FileType::Fifo, Mode::from_raw_mode(0o600), 0).unwrap();
    let ino = inotify::init(inotify::CreateFlags::NONBLOCK | inotify::CreateFlags::CLOEXEC).unwrap();
    inotify::add_watch(&ino, &fifo, inotify::WatchFlags::OPEN).unwrap();
    // The FIFO itself, whatever its name: the writer probe reopens it through /proc.
    let pinned = rustix::fs::open(&fifo, OFlags::PATH | OFlags::CLOEXEC, Mode::empty()).unwrap();
    let probe_path = format!("/proc/self/fd/{}", pinned.as_raw_fd());
    // The witnesses work: a reader of our own is seen by both.
    {
        let reader = rustix::fs::open(&probe_path, OFlags::RDONLY | OFlags::NONBLOCK, Mode::empty()).unwrap();
        let writer = rustix::fs::open(&probe_path, OFlags::WRONLY | OFlags::NONBLOCK, Mode::empty());
        assert!(writer.is_ok(), "a writer must find our reader: {writer:?}");
        drop((reader, writer));
        // Identical unread events are coalesced: at least one.
        assert!(opens_seen(&ino) >= 1, "inotify must see our own reader and writer");
    }
    assert_eq!(
        rustix::fs::open(&probe_path, OFlags::WRONLY | OFlags::NONBLOCK, Mode::empty()).err(),
        Some(rustix::io::Errno::NXIO),
        "without a reader a non-blocking writer gets ENXIO"
    );
    assert_eq!(opens_seen(&ino), 0);

    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicUsize::new(0));
    let racer = {
        let (stop, swaps, file, fifo) = (stop.clone(), swaps.clone(), file.clone(), fifo.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                rustix::fs::renameat_with(CWD, &file, CWD, &fifo, RenameFlags::EXCHANGE).unwrap();
                swaps.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let writer_found_reader = Arc::new(AtomicUsize::new(0));
    let prober = {
        let (stop, found) = (stop.clone(), writer_found_reader.clone());
        let probe_path = probe_path.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                match rustix::fs::open(&probe_path, OFlags::WRONLY | OFlags::NONBLOCK, Mode::empty()) {
                    Ok(_) => {
                        found.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => assert_eq!(e, rustix::io::Errno::NXIO),
                }
            }
        })
    };

    let mut c = a.bound();
    let ops = [
        ("fs.read", json!({"path": "x.txt"})),
        ("fs.search", json!({"path": "x.txt", "query": "needle"})),
        ("fs.search", json!({"path": ".", "query": "needle"})),
        // An edit and a write that read the file and then refuse: one that succeeded would
        // rename a new file over whatever the name is at that moment, the FIFO included.
        ("fs.edit", json!({"path": "x.txt", "edits": [{"oldText": "absent", "newText": "x"}]})),
        ("fs.write", json!({"path": "x.txt", "content": "x", "expectedDigest": "0".repeat(64)})),
    ];
    // What each operation answers for the regular file.
    let file_answer = ["ok", "ok", "ok", "edit_not_found", "digest_mismatch"];
    let mut refused = [0usize; 5];
    let mut answered = [0usize; 5];
    let mut opens = 0;
    for i in 0..500 {
        opens += opens_seen(&ino);
        for (k, (op, payload)) in ops.iter().enumerate() {
            let r = call(&mut c, &format!("r{i}-{k}"), op, payload.clone());
            let code = if r["ok"] == true { "ok" } else { r["error"]["code"].as_str().unwrap_or("?") };
            if code == file_answer[k] {
                answered[k] += 1;
                if *op == "fs.read" {
                    assert_eq!(r["data"]["content"], "one needle\n", "{r}");
                }
                if k == 2 {
                    // The directory search found the file or skipped the FIFO under its name.
                    assert!(r["data"]["matches"].as_array().unwrap().len() <= 1, "{r}");
                }
                continue;
            }
            assert_eq!(code, "unsupported_file_type", "{op} {payload}: {r}");
            assert_eq!(r["error"]["retryable"], false, "{r}");
            refused[k] += 1;
        }
    }
    stop.store(true, Ordering::Relaxed);
    racer.join().unwrap();
    prober.join().unwrap();
    opens += opens_seen(&ino);
    eprintln!(
        "swaps {}, answered {answered:?}, refused {refused:?}, FIFO opens {opens}, writer found a reader {}",
        swaps.load(Ordering::Relaxed),
        writer_found_reader.load(Ordering::Relaxed)
    );
    // The race was really run: the file and the FIFO each met the requests.
    assert!(swaps.load(Ordering::Relaxed) > 1000, "the racer barely ran");
    for k in [0, 1, 3, 4] {
        assert!(refused[k] > 0 && answered[k] > 0, "{}: answered {answered:?}, refused {refused:?}", ops[k].0);
    }
    // A directory search skips what is not a regular file: it never fails for it.
    assert_eq!(refused[2], 0);
    assert_eq!(opens, 0, "the adapter opened the FIFO {opens} times");
    assert_eq!(writer_found_reader.load(Ordering::Relaxed), 0, "a writer found the adapter reading the FIFO");
    // Afterwards the file is intact, under whichever name it ended.
    let t = FileType::from_raw_mode(rustix::fs::lstat(&file).unwrap().st_mode);
    let f = if t == FileType::RegularFile { &file } else { &fifo };
    assert_eq!(std::fs::read_to_string(f).unwrap(), "one needle\n");
}
