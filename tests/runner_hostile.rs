//! The runners against hostile peers (real sockets, the real binary): a peer that floods bytes
//! without an LF, or trickles them, must not grow the runner's memory without bound or stall
//! it; the runner ends with the documented exit code and says why.

use std::io::{Read, Write};
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_pi-conform");

/// A peer on `socket` that answers every connection with `behave`.
fn peer(socket: &Path, behave: fn(std::os::unix::net::UnixStream)) {
    let l = UnixListener::bind(socket).unwrap();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            std::thread::spawn(move || behave(s));
        }
    });
}

fn flood(mut s: std::os::unix::net::UnixStream) {
    let chunk = vec![b'x'; 1 << 16];
    while s.write_all(&chunk).is_ok() {}
}

fn trickle(mut s: std::os::unix::net::UnixStream) {
    let _ = s.set_read_timeout(Some(Duration::from_millis(10)));
    let mut sink = [0u8; 4096];
    for _ in 0..6000 {
        let _ = s.read(&mut sink);
        if s.write_all(b"{").is_err() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Mint a descriptor for `socket` with the real `grant` command.
fn descriptor(dir: &Path, socket: &Path, root: &Path) -> std::path::PathBuf {
    let out = Command::new(BIN)
        .args(["grant", "--grants"])
        .arg(dir.join("grants.json"))
        .arg("--socket")
        .arg(socket)
        .arg("--root")
        .arg(root)
        .args(["--host-instance", "host-a", "--session", "s-1", "--generation", "1"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let path = dir.join("descriptor.json");
    std::fs::write(&path, &out.stdout).unwrap();
    path
}

/// Start `pi-conform adapter` against the peer at `socket` with descriptor file `d` and root
/// `root`; stdout discarded, stderr piped.
fn spawn_runner(socket: &Path, d: &Path, root: &Path) -> std::process::Child {
    Command::new(BIN)
        .arg("adapter")
        .arg(socket)
        .arg("--descriptor")
        .arg(d)
        .arg("--root")
        .arg(root)
        .args(["--color", "never"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Run `pi-conform adapter` against the peer; the exit status, stderr and the child's peak RSS
/// in KiB (sampled from /proc every 20 ms). A runner still alive after `limit` is killed: a hang.
fn run_adapter(behave: fn(std::os::unix::net::UnixStream), limit: Duration) -> (Option<i32>, String, i64) {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("peer.sock");
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    peer(&socket, behave);
    let d = descriptor(dir.path(), &socket, &root);
    let mut child = spawn_runner(&socket, &d, &root);
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let status_file = format!("/proc/{}/status", child.id());
    let start = Instant::now();
    let mut peak_kib = 0i64;
    loop {
        if let Ok(text) = std::fs::read_to_string(&status_file) {
            let rss =
                text.lines().find_map(|l| l.strip_prefix("VmRSS:")).map(|v| v.trim().trim_end_matches("kB").trim());
            peak_kib = peak_kib.max(rss.and_then(|v| v.parse().ok()).unwrap_or(0));
        }
        if child.try_wait().unwrap().is_some() || start.elapsed() > limit {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let status = child.wait().unwrap();
    (status.code(), reader.join().unwrap(), peak_kib)
}

#[test]
fn a_peer_flooding_bytes_without_lf_is_refused_with_bounded_memory() {
    let (code, err, maxrss_kib) = run_adapter(flood, Duration::from_secs(120));
    // It answered (a line too long to read): inconclusive (exit 5), not unreachable.
    assert_eq!(code, Some(5), "the runner must end with exit 5 (preflight refused), stderr: {err}");
    assert!(err.contains("a line over 16777216 bytes"), "the refusal names the over-long line: {err}");
    // The cap is 16 MiB of line plus bounded buffers; before it, the runner grew by about
    // 200 MB a second until the kernel killed it.
    assert!(maxrss_kib < 256 * 1024, "peak RSS {maxrss_kib} KiB: the runner buffered the flood");
}

#[test]
fn a_peer_trickling_a_line_without_lf_does_not_stall_the_runner() {
    let (code, err, _) = run_adapter(trickle, Duration::from_secs(120));
    assert_eq!(code, Some(4), "a trickling peer is mute for the preflight (exit 4), not a hang: {err}");
    assert!(err.contains("did not answer the descriptor's bind within"), "{err}");
}

#[test]
fn a_peer_whose_backlog_is_full_is_unreachable_not_a_hang() {
    use rustix::net::{AddressFamily, SocketAddrUnix, SocketType};
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("peer.sock");
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    // A listener with backlog 0 that never accepts, its one queue slot taken.
    let l = rustix::net::socket(AddressFamily::UNIX, SocketType::STREAM, None).unwrap();
    rustix::net::bind(&l, &SocketAddrUnix::new(&socket).unwrap()).unwrap();
    rustix::net::listen(&l, 0).unwrap();
    let mut held = Vec::new();
    for _ in 0..4 {
        let s =
            rustix::net::socket_with(AddressFamily::UNIX, SocketType::STREAM, rustix::net::SocketFlags::NONBLOCK, None)
                .unwrap();
        let full = rustix::net::connect(&s, &SocketAddrUnix::new(&socket).unwrap()).is_err();
        held.push(s);
        if full {
            break;
        }
    }
    let d = descriptor(dir.path(), &socket, &root);
    let out = spawn_runner(&socket, &d, &root);
    let pid = out.id();
    let waiter = std::thread::spawn(move || out.wait_with_output().unwrap());
    let start = Instant::now();
    while !waiter.is_finished() && start.elapsed() < Duration::from_secs(120) {
        std::thread::sleep(Duration::from_millis(50));
    }
    if !waiter.is_finished() {
        let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
        panic!("the runner hung on a peer whose backlog is full");
    }
    let out = waiter.join().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "unreachable is exit 4: {err}");
    assert!(err.contains("listen backlog stayed full"), "the reason is named: {err}");
    drop((l, held));
}
