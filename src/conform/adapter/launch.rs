//! `pi-conform adapter --command "…{socket}…{grants}…"` (issue 16): the runner provisions and
//! runs the adapter itself. It mints a grant for the adapter's declared identity into a private
//! grants file (the handle exists only in the descriptor it keeps in memory), starts the command
//! with `sh -c` in its own process group, waits for the socket to answer, and afterwards stops
//! the whole group (SIGTERM, then SIGKILL) and removes every file it made — also when the
//! runner itself is interrupted (SIGINT, SIGTERM, SIGHUP: exit 130).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::adapter::grants::{grant, GrantRequest};
use crate::contract::const_limits;
use crate::contract::descriptor::OPERATIONS;

/// The binding the runner grants (it plays a daemon with this identity).
pub const HOST_INSTANCE: &str = "pi-conform-runner";
/// The session of the runner's grant.
pub const SESSION: &str = "pi-conform-conformance";
/// The generation of the runner's grant.
pub const GENERATION: u64 = 1;

/// The second grant the runner mints beside the full one (issue 24 item 6): the same socket,
/// root and identity for another session, with every operation but `fs.edit`. Knowing it, the
/// runner can ask a bind for an operation outside a grant it minted and require the close.
pub fn narrow_grant(full: &GrantRequest) -> GrantRequest {
    let mut narrow = full.clone();
    narrow.session_id = format!("{}-narrow", full.session_id);
    narrow.operations.retain(|o| o.to_string() != "fs.edit");
    narrow
}

/// The third grant the runner mints (PC-3.3): the same socket, root, operations and limits for
/// a binding whose `hostInstanceId` (128 × `€`) and `sessionId` (256 × `€`) take 3 bytes a
/// unit, so its normalized `bound` is longer than the smallest `maxResponseBytes` (1024). A
/// `bind` of it can then ask a `maxResponseBytes` exactly the length of its `bound` (it fits)
/// or one byte less (it fails the fit check, not the range check).
pub fn fit_grant(full: &GrantRequest) -> GrantRequest {
    let mut fit = full.clone();
    fit.host_instance_id = "\u{20ac}".repeat(128);
    fit.session_id = "\u{20ac}".repeat(256);
    fit
}

/// What to launch.
#[derive(Clone, Debug)]
pub struct LaunchSpec {
    /// The shell command, with `{socket}` (required), `{grants}` and `{root}` placeholders.
    pub command: String,
    /// The grant's root; `None`: a fresh directory beside the socket.
    pub root: Option<PathBuf>,
    /// The adapterId the adapter answers to.
    pub adapter_id: String,
    /// The adapterVersion the adapter answers to.
    pub adapter_version: String,
    /// How long the socket may take to answer after the start.
    pub startup: Duration,
}

/// Why the adapter could not be launched.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// The command or identity cannot be used (exit 2).
    #[error("{0}")]
    Usage(String),
    /// The adapter did not come up (exit 4).
    #[error("{0}")]
    Target(String),
}

/// A running adapter started by the runner; stopped and cleaned up when dropped.
pub struct Launched {
    dir: tempfile::TempDir,
    child: Option<Child>,
    /// The socket the adapter serves.
    pub socket: PathBuf,
    /// The grants file it was given.
    pub grants: PathBuf,
    /// The grant's root.
    pub root: PathBuf,
    /// The descriptor minted for the grant (holds the handle: never print it).
    pub descriptor: Value,
    /// The descriptor of the narrower second grant ([`narrow_grant`]; holds its handle).
    pub narrow: Value,
    /// The descriptor of the third grant ([`fit_grant`]; holds its handle).
    pub fit: Value,
}

/// `s` as one single-quoted shell word.
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Replace `{socket}`, `{grants}` and `{root}` in one pass (a substituted path is never
/// substituted again); other braces are left alone.
pub fn substitute(template: &str, socket: &Path, grants: &Path, root: &Path) -> String {
    let mut out = String::with_capacity(template.len() + 128);
    let mut rest = template;
    'outer: while !rest.is_empty() {
        for (name, path) in [("{socket}", socket), ("{grants}", grants), ("{root}", root)] {
            if let Some(after) = rest.strip_prefix(name) {
                out.push_str(&shell_quote(&path.to_string_lossy()));
                rest = after;
                continue 'outer;
            }
        }
        let mut chars = rest.chars();
        if let Some(c) = chars.next() {
            out.push(c);
        }
        rest = chars.as_str();
    }
    out
}

impl Launched {
    /// Mint the grant, start the command, and wait until its socket answers.
    pub fn start(spec: &LaunchSpec) -> Result<Launched, LaunchError> {
        if !spec.command.contains("{socket}") {
            return Err(LaunchError::Usage(
                "--command must contain {socket} (the runner picks the socket path; {grants} is the grants file)"
                    .into(),
            ));
        }
        let usage = |e: std::io::Error| LaunchError::Usage(format!("cannot prepare a private directory: {e}"));
        let dir = tempfile::Builder::new().prefix("pi-conform-launch").tempdir().map_err(usage)?;
        // The socket's directory must be owner-only (PC-1.2).
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).map_err(usage)?;
        let socket = dir.path().join("adapter.sock");
        let grants = dir.path().join("grants.json");
        let root = match &spec.root {
            Some(r) => r.clone(),
            None => {
                let r = dir.path().join("root");
                std::fs::create_dir(&r).map_err(usage)?;
                r
            }
        };
        let root =
            std::fs::canonicalize(&root).map_err(|e| LaunchError::Usage(format!("root {}: {e}", root.display())))?;
        let req = GrantRequest {
            socket: socket.clone(),
            root: root.clone(),
            host_instance_id: HOST_INSTANCE.into(),
            session_id: SESSION.into(),
            generation: GENERATION,
            operations: OPERATIONS.iter().filter_map(|o| o.parse().ok()).collect(),
            limits: const_limits([1_048_576, 1_048_576, 4, 16, 30_000, 256, 3_600_000]),
            adapter_id: spec.adapter_id.clone(),
            adapter_version: spec.adapter_version.clone(),
        };
        let descriptor = grant(&grants, &req).map_err(|e| LaunchError::Usage(format!("cannot mint the grant: {e}")))?;
        let narrow = grant(&grants, &narrow_grant(&req))
            .map_err(|e| LaunchError::Usage(format!("cannot mint the second grant: {e}")))?;
        let fit = grant(&grants, &fit_grant(&req))
            .map_err(|e| LaunchError::Usage(format!("cannot mint the third grant: {e}")))?;
        let command = substitute(&spec.command, &socket, &grants, &root);
        let log = std::fs::File::create(dir.path().join("adapter.log")).map_err(usage)?;
        let log2 = log.try_clone().map_err(usage)?;
        let child = {
            use std::os::unix::process::CommandExt;
            Command::new("sh")
                .arg("-c")
                .arg(&command)
                .stdin(Stdio::null())
                .stdout(log)
                .stderr(log2)
                .process_group(0)
                .spawn()
                .map_err(|e| LaunchError::Target(format!("cannot start `sh -c`: {e}")))?
        };
        guard_signals(rustix::process::Pid::from_child(&child), dir.path().to_path_buf());
        let mut me = Launched { dir, child: Some(child), socket, grants, root, descriptor, narrow, fit };
        me.wait_for_socket(spec.startup)?;
        Ok(me)
    }

    fn wait_for_socket(&mut self, startup: Duration) -> Result<(), LaunchError> {
        let t = Instant::now();
        loop {
            if super::conn::connect_within(&self.socket, Duration::from_millis(100)).is_ok() {
                return Ok(());
            }
            // The signal guard may be stopping everything; it then exits the process.
            yield_to_interrupt();
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    self.child = None;
                    return Err(LaunchError::Target(format!(
                        "the adapter command exited ({status}) before its socket answered{}",
                        self.log_tail()
                    )));
                }
            }
            if t.elapsed() > startup {
                self.stop();
                return Err(LaunchError::Target(format!(
                    "the adapter's socket did not answer within {startup:?} of its start{}",
                    self.log_tail()
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The last lines the adapter wrote (standard output and error), with the handle
    /// redacted, as `; its output ends:\n  …` (empty when it wrote nothing).
    pub fn log_tail(&self) -> String {
        let text = std::fs::read(self.dir.path().join("adapter.log")).unwrap_or_default();
        let text = String::from_utf8_lossy(&text);
        let lines: Vec<&str> = text.lines().collect();
        let mut tail = lines[lines.len().saturating_sub(12)..].join("\n  ");
        for d in [&self.descriptor, &self.narrow, &self.fit] {
            let handle = d["binding"]["capabilityHandle"].as_str().unwrap_or_default();
            tail = crate::conform::case::redact_handle(&tail, handle);
        }
        if tail.trim().is_empty() {
            String::new()
        } else {
            format!("; its output ends:\n  {tail}")
        }
    }

    /// The private directory (socket, grants, log, and the root when none was given).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Stop the adapter's whole process group: SIGTERM, up to 3 s, then SIGKILL; reap it.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else { return };
        let pid = rustix::process::Pid::from_child(&child);
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::TERM);
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(3) {
            if let Ok(Some(_)) = child.try_wait() {
                // sh is gone; anything it left in the group gets the same end.
                let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        let _ = child.wait();
    }
}

/// Set by the signal guard before it stops the adapter: its exit is then not a failed start.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Whether the runner was interrupted (SIGINT, SIGTERM, SIGHUP during a `--command` run): the
/// signal guard is stopping the adapter and will end the process with exit 130.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// If the runner was interrupted, wait here for the signal guard to end the process (exit
/// 130): a run cut short must not end with the exit code of its broken remainder.
pub fn yield_to_interrupt() {
    while INTERRUPTED.load(Ordering::SeqCst) {
        std::thread::park();
    }
}

/// The adapter runs in its own process group, so a Ctrl-C at the terminal does not reach it:
/// on SIGINT, SIGTERM or SIGHUP the runner stops the group (SIGTERM, SIGKILL after 0.5 s),
/// removes the private directory and exits 130 itself.
fn guard_signals(pid: rustix::process::Pid, dir: PathBuf) {
    std::thread::spawn(move || {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return };
        let signalled = rt.block_on(async {
            use tokio::signal::unix::{signal, SignalKind};
            let (Ok(mut i), Ok(mut t), Ok(mut h)) =
                (signal(SignalKind::interrupt()), signal(SignalKind::terminate()), signal(SignalKind::hangup()))
            else {
                return false;
            };
            tokio::select! {
                _ = i.recv() => true,
                _ = t.recv() => true,
                _ = h.recv() => true,
            }
        });
        if !signalled {
            return;
        }
        INTERRUPTED.store(true, Ordering::SeqCst);
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::TERM);
        std::thread::sleep(Duration::from_millis(500));
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        // The suite may still be laying a fixture in the directory while it is removed: remove
        // until it stays gone for a few rounds (a case in progress gets its errors, not files).
        let mut quiet = 0;
        for _ in 0..50 {
            if dir.exists() {
                let _ = std::fs::remove_dir_all(&dir);
                quiet = 0;
            } else {
                quiet += 1;
                if quiet == 3 {
                    break;
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // On a terminal the progress line is replaced, so the interruption is one line.
        let clear = if std::io::IsTerminal::is_terminal(&std::io::stderr()) { "\r\x1b[2K" } else { "" };
        eprintln!("{clear}pi-conform: interrupted; the adapter was stopped");
        std::process::exit(130);
    });
}

impl Drop for Launched {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_replaced_once_and_quoted() {
        let s = substitute(
            "run {socket} --grants={grants} {root} {other} {socket}",
            Path::new("/t/a b.sock"),
            Path::new("/t/it's.json"),
            Path::new("/r/{socket}"),
        );
        assert_eq!(s, r"run '/t/a b.sock' --grants='/t/it'\''s.json' '/r/{socket}' {other} '/t/a b.sock'");
    }

    #[test]
    fn a_command_without_socket_is_a_usage_error() {
        let spec = LaunchSpec {
            command: "true".into(),
            root: None,
            adapter_id: "x".into(),
            adapter_version: "1.0.0".into(),
            startup: Duration::from_secs(1),
        };
        match Launched::start(&spec) {
            Err(LaunchError::Usage(m)) => assert!(m.contains("{socket}"), "{m}"),
            Err(e) => panic!("expected a usage error, got {e}"),
            Ok(_) => panic!("expected a usage error, got a launch"),
        }
    }
}
