//! The reference adapter's socket shell (tokio): an owner-private Unix socket, one task per
//! connection driving a [`Session`], jobs on blocking threads, graceful shutdown on
//! SIGTERM/SIGINT (every binding revoked) and grants reloaded on SIGHUP.

use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use subtle::ConstantTimeEq;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, watch};
use tracing::{debug, info, warn};

use super::broken::EmptyLines;
use super::faults::{self, Fault, Faults};
use super::fs::{GrantDigests, Guard, PinError, Root};
use super::grants;
use super::idempotency::{self, IdempotencyCache, SharedCache};
use super::ops::{execute_owned, execute_with, try_inline};
use super::session::{handle_bind_with, Action, AdapterIdentity, CloseReason, Grant, Session, MAX_BIND_LINE};
use crate::contract::operation::is_mutating;
use crate::contract::types::tool_adapter::ToolOperation;
use crate::contract::AdapterError;
use crate::wire::LineDecoder;

/// How to run the adapter.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    /// Socket path.
    pub socket: PathBuf,
    /// Grants file.
    pub grants: PathBuf,
    /// Who this adapter is.
    pub identity: AdapterIdentity,
    /// Test aid: every operation first waits this long (cancellably), so that queueing,
    /// `busy` and abort can be exercised deterministically. Zero in production.
    pub op_delay: std::time::Duration,
    /// Install SIGTERM/SIGINT/SIGHUP handlers (the CLI server); off when embedded.
    pub handle_signals: bool,
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The socket directory or a stale path is unsafe.
    #[error("refusing to start: {0}")]
    Insecure(String),
    /// Grants could not be loaded.
    #[error(transparent)]
    Grants(#[from] grants::GrantsError),
    /// I/O.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Connection discipline before a binding exists (issue 15, F1/F2): how long a peer may take
/// to send its `bind`, and how many connections may wait unbound at once. The pre-bind line
/// cap is not a knob: it is [`MAX_BIND_LINE`], the largest legal bind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Discipline {
    /// From accept to a complete `bind` line; past it the connection is closed.
    pub bind_deadline: Duration,
    /// Connections accepted and waiting for their `bind`; one more sheds the oldest of them
    /// (closed without a line), so a newcomer always gets its turn (issue 25, N2).
    pub max_unbound: usize,
}

impl Default for Discipline {
    fn default() -> Self {
        Self { bind_deadline: DEFAULT_BIND_DEADLINE, max_unbound: DEFAULT_MAX_UNBOUND }
    }
}

/// Default [`Discipline::bind_deadline`].
pub const DEFAULT_BIND_DEADLINE: Duration = Duration::from_secs(10);
/// Default [`Discipline::max_unbound`].
pub const DEFAULT_MAX_UNBOUND: usize = 64;
/// Read buffer of an unbound connection (the whole largest bind fits in one read).
const PRE_BIND_READ: usize = 4096;
/// Longest pause of the accept loop when accepting fails (descriptor exhaustion).
const MAX_ACCEPT_BACKOFF: Duration = Duration::from_secs(1);
/// At most one log line per this interval for a repeated accept failure or cap refusal.
const LOG_EVERY: Duration = Duration::from_secs(1);
/// After SIGTERM (issue 25, N1): how long connections get to cancel their work, send
/// `revoked` and close before they are dropped. Shutdown completes within this bound (plus
/// the time a cancelled job takes to reach its next cancellation check) whatever clients do.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);
/// After [`SHUTDOWN_GRACE`]: how long the process waits for cancelled jobs still running on
/// blocking threads before it exits anyway (the CLI's runtime shutdown timeout). SIGTERM to
/// exit is bounded by the sum, 3 s.
pub const JOB_EXIT_GRACE: Duration = Duration::from_secs(1);

/// The default adapter identity: this crate's name and version.
pub fn default_identity() -> AdapterIdentity {
    AdapterIdentity { adapter_id: "pi-conform-reference".into(), adapter_version: env!("CARGO_PKG_VERSION").into() }
}

/// Check the socket's directory and clear a stale socket (ours and dead) before binding.
pub fn prepare_socket_path(path: &Path) -> Result<(), ServeError> {
    let uid = rustix::process::geteuid().as_raw();
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let meta = std::fs::symlink_metadata(dir).map_err(|e| ServeError::Insecure(format!("socket directory: {e}")))?;
    if !meta.file_type().is_dir() {
        return Err(ServeError::Insecure("the socket directory is not a real directory".into()));
    }
    if meta.uid() != uid {
        return Err(ServeError::Insecure(format!("the socket directory is owned by uid {}, not {uid}", meta.uid())));
    }
    if meta.permissions().mode() & 0o077 != 0 {
        return Err(ServeError::Insecure(format!(
            "the socket directory has group/other permission bits (mode {:o})",
            meta.permissions().mode() & 0o7777
        )));
    }
    match std::fs::symlink_metadata(path) {
        Ok(m) => {
            if !m.file_type().is_socket() || m.uid() != uid {
                return Err(ServeError::Insecure("the socket path exists and is not our socket".into()));
            }
            if probe_live(path)? {
                return Err(ServeError::Insecure("another server answers on the socket path".into()));
            }
            std::fs::remove_file(path)?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e.into()),
    }
    Ok(())
}

/// Whether something listens on the socket at `path`, without ever waiting: a non-blocking
/// `connect` either succeeds (a live server), fails with `EAGAIN` (a live server whose backlog
/// is full — a blocking connect would hang here forever, issue 15 F11) or with
/// `ECONNREFUSED` (a stale socket nobody listens on).
fn probe_live(path: &Path) -> Result<bool, ServeError> {
    use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
    let sock = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
        None,
    )
    .map_err(std::io::Error::from)?;
    let addr = SocketAddrUnix::new(path).map_err(std::io::Error::from)?;
    match rustix::net::connect(&sock, &addr) {
        Ok(()) => Ok(true),
        Err(rustix::io::Errno::AGAIN | rustix::io::Errno::INPROGRESS) => Ok(true),
        Err(rustix::io::Errno::CONNREFUSED | rustix::io::Errno::NOENT) => Ok(false),
        Err(e) => Err(ServeError::Insecure(format!("cannot probe the socket path: {e}"))),
    }
}

/// Bind an owner-only (0600) listener at `path`.
pub fn bind_private(path: &Path) -> Result<UnixListener, ServeError> {
    prepare_socket_path(path)?;
    let old = rustix::process::umask(rustix::fs::Mode::from_bits_truncate(0o177));
    let l = UnixListener::bind(path);
    rustix::process::umask(old);
    let l = l?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(l)
}

/// Whether the grant a connection was bound under is still in `current`: the same handle
/// digest with the same root and binding identity, still allowing the bound operations and
/// limits. A reload that drops or narrows it revokes the binding.
fn still_granted(
    bound: &Grant,
    ops: &[ToolOperation],
    limits: &crate::contract::AdapterLimits,
    current: &[Grant],
) -> bool {
    use crate::contract::LimitValues;
    current.iter().any(|g| {
        bool::from(g.handle_sha256.ct_eq(&bound.handle_sha256))
            && g.root == bound.root
            && g.root_pin == bound.root_pin
            && g.host_instance_id == bound.host_instance_id
            && g.session_id == bound.session_id
            && g.generation == bound.generation
            && ops.iter().all(|o| g.operations.contains(o))
            && limits.values().iter().zip(g.ceilings.values()).all(|(asked, max)| *asked <= max)
    })
}

/// The live connection of each grant (issue 15, F3), by handle digest: its connection id, the
/// sender that revokes it when a later bind of the same grant replaces it, and the lock file
/// that makes it the only one across processes (issue 25, N12), and its idempotency cache,
/// which a replacing bind of the same binding identity inherits (issue 25, N7).
struct LiveBindings {
    by_grant: std::sync::Mutex<HashMap<[u8; 32], LiveEntry>>,
    /// The grants file: the per-grant lock files lie beside it.
    grants_path: PathBuf,
}

/// A grant's live connection: its id, the sender that revokes it, the held lock file and the
/// idempotency cache with the binding identity it belongs to.
struct LiveEntry {
    id: u64,
    revoke: tokio::sync::oneshot::Sender<()>,
    lock: std::fs::File,
    scope: Scope,
    cache: SharedCache,
}

/// The binding identity an idempotency cache belongs to: host instance, session, generation.
type Scope = (String, String, u64);

/// Why a bind could not take its grant's place.
#[derive(Debug)]
enum TakeOver {
    /// Another process holds a live connection of this grant.
    HeldElsewhere,
    /// The lock file could not be opened or locked.
    Unavailable,
}

impl LiveBindings {
    fn new(grants_path: PathBuf) -> Self {
        Self { by_grant: Default::default(), grants_path }
    }

    /// Open and `flock` (exclusive, non-blocking) the grant's lock file. `grant` creates it
    /// when it mints the grant, so a bind only opens it: creating a file here would put a
    /// filesystem journal transaction on every first bind of a grant (about 100 µs measured,
    /// more beside a daemon's durable writes on the same filesystem). A grant minted before
    /// that, or written by hand, gets its lock file created here.
    fn lock_grant(&self, grant: &[u8; 32]) -> Result<std::fs::File, TakeOver> {
        use std::os::unix::fs::OpenOptionsExt;
        let path = grants::bind_lock_path(&self.grants_path, grant);
        let flags = rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK | rustix::fs::OFlags::CLOEXEC;
        let open = |create: bool| {
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(create)
                .truncate(false)
                .mode(0o600)
                .custom_flags(flags.bits() as i32)
                .open(&path)
        };
        let file = match open(false) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => open(true),
            other => other,
        }
        .map_err(|_| TakeOver::Unavailable)?;
        let meta = file.metadata().map_err(|_| TakeOver::Unavailable)?;
        if !meta.is_file() || meta.uid() != rustix::process::geteuid().as_raw() {
            return Err(TakeOver::Unavailable);
        }
        loop {
            match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => return Ok(file),
                Err(rustix::io::Errno::INTR) => continue,
                Err(rustix::io::Errno::WOULDBLOCK) => return Err(TakeOver::HeldElsewhere),
                Err(_) => return Err(TakeOver::Unavailable),
            }
        }
    }

    /// Make connection `id` the live one of `grant`, revoking the one it replaces (if any);
    /// the receiver fires when a later bind replaces this one. The first live connection of
    /// a grant in this process takes the grant's lock file; a grant whose lock another
    /// process holds cannot bind here. Returns the idempotency cache to use: the replaced
    /// connection's when its binding identity is `scope`, else a fresh one.
    fn take_over(
        &self,
        grant: [u8; 32],
        id: u64,
        scope: Scope,
    ) -> Result<(tokio::sync::oneshot::Receiver<()>, bool, SharedCache), TakeOver> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let mut map = self.by_grant.lock().unwrap_or_else(|p| p.into_inner());
        let fresh = || SharedCache::new(IdempotencyCache::new(1, Duration::ZERO).into());
        let (lock, replaced, cache) = match map.remove(&grant) {
            Some(old) => {
                let cache = if old.scope == scope { old.cache } else { fresh() };
                (old.lock, old.revoke.send(()).is_ok(), cache)
            }
            None => (self.lock_grant(&grant)?, false, fresh()),
        };
        map.insert(grant, LiveEntry { id, revoke: tx, lock, scope, cache: cache.clone() });
        Ok((rx, replaced, cache))
    }

    /// Connection `id` of `grant` is gone: forget it (releasing the lock file), unless a
    /// later bind already replaced it.
    fn release(&self, grant: [u8; 32], id: u64) {
        let mut map = self.by_grant.lock().unwrap_or_else(|p| p.into_inner());
        if map.get(&grant).is_some_and(|e| e.id == id) {
            map.remove(&grant);
        }
    }
}

/// Releases a connection's place in [`LiveBindings`] when the connection ends.
struct LiveGuard {
    live: Arc<LiveBindings>,
    grant: [u8; 32],
    id: u64,
}

impl Drop for LiveGuard {
    fn drop(&mut self) {
        self.live.release(self.grant, self.id);
    }
}

/// The connections waiting for their `bind`, oldest first, each with the sender that sheds
/// it (issue 25, N2): at the cap a newcomer sheds the oldest, never the other way round.
#[derive(Default)]
struct Unbound {
    waiting: std::sync::Mutex<BTreeMap<u64, tokio::sync::oneshot::Sender<()>>>,
}

impl Unbound {
    /// Register connection `id`; at the cap `max` first shed the oldest waiting one. Returns
    /// the receiver that fires when `id` is shed, and whether one was shed for it (`None`
    /// when the cap is zero: no connection may wait).
    fn admit(&self, id: u64, max: usize) -> Option<(tokio::sync::oneshot::Receiver<()>, bool)> {
        if max == 0 {
            return None;
        }
        let mut waiting = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
        let mut shed = false;
        while waiting.len() >= max {
            let Some((_, tx)) = waiting.pop_first() else { break };
            shed |= tx.send(()).is_ok();
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        waiting.insert(id, tx);
        Some((rx, shed))
    }

    fn leave(&self, id: u64) {
        self.waiting.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
    }
}

/// A place among the connections waiting for their `bind`, given back when dropped (a
/// complete first line arrived, or the connection is gone).
struct UnboundSlot(Arc<Unbound>, u64);

impl Drop for UnboundSlot {
    fn drop(&mut self) {
        self.0.leave(self.1);
    }
}

/// A log line at most once per [`LOG_EVERY`], with how many were suppressed meanwhile.
struct RateLimited {
    last: Option<Instant>,
    suppressed: u64,
}

impl RateLimited {
    fn new() -> Self {
        Self { last: None, suppressed: 0 }
    }

    /// `Some(suppressed)` when a line may be written now.
    fn tick(&mut self) -> Option<u64> {
        let now = Instant::now();
        if self.last.is_some_and(|t| now.duration_since(t) < LOG_EVERY) {
            self.suppressed += 1;
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.suppressed))
    }
}

/// Whether an accept error means the process or system is out of descriptors or memory.
fn is_exhaustion(e: &std::io::Error) -> bool {
    let raw = e.raw_os_error();
    [rustix::io::Errno::MFILE, rustix::io::Errno::NFILE, rustix::io::Errno::NOBUFS, rustix::io::Errno::NOMEM]
        .iter()
        .any(|x| raw == Some(x.raw_os_error()))
}

/// Run the adapter until SIGTERM/SIGINT (or `shutdown` fires). Returns when every connection
/// has been revoked and the socket removed.
pub async fn serve(cfg: ServeConfig, shutdown: Option<watch::Receiver<bool>>) -> Result<(), ServeError> {
    serve_with(cfg, Faults::NONE, shutdown).await
}

/// [`serve`] with fault switches: a test aid that breaks the adapter on purpose (see
/// [`crate::adapter::faults`]). Production passes [`Faults::NONE`].
///
/// The faults travel beside [`ServeConfig`] rather than in it so that existing
/// `ServeConfig { .. }` literals (the benchmark's) keep compiling.
pub async fn serve_with(
    cfg: ServeConfig,
    faults: Faults,
    shutdown: Option<watch::Receiver<bool>>,
) -> Result<(), ServeError> {
    serve_disciplined(cfg, faults, Discipline::default(), shutdown).await
}

/// [`serve_with`] with explicit pre-bind [`Discipline`] (the CLI's `--bind-deadline-ms` and
/// `--max-unbound`).
///
/// The server runs as a task of the runtime, not on the caller's thread: `block_on` polls its
/// future on the calling thread, which is no worker, so every accepted connection would cost a
/// wake-up of that thread and a hand-off of the new connection's task to a worker.
pub async fn serve_disciplined(
    cfg: ServeConfig,
    faults: Faults,
    discipline: Discipline,
    shutdown: Option<watch::Receiver<bool>>,
) -> Result<(), ServeError> {
    /// Dropping the caller's future stops the server, as it did when the caller polled it.
    struct AbortOnDrop(tokio::task::AbortHandle);
    impl Drop for AbortOnDrop {
        fn drop(&mut self) {
            self.0.abort();
        }
    }
    let task = tokio::spawn(serve_task(cfg, faults, discipline, shutdown));
    let _abort = AbortOnDrop(task.abort_handle());
    match task.await {
        Ok(r) => r,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        // The runtime is shutting down: so is the server.
        Err(_) => Ok(()),
    }
}

async fn serve_task(
    cfg: ServeConfig,
    faults: Faults,
    discipline: Discipline,
    mut shutdown: Option<watch::Receiver<bool>>,
) -> Result<(), ServeError> {
    if !faults.is_empty() {
        warn!(faults = %faults, "FAULT SWITCHES ON: this adapter is broken on purpose (test aid)");
    }
    let loaded = grants::load(&cfg.grants)?;
    info!(grants = loaded.len(), "grants loaded");
    // Every grant's handle digest, for the content guard of every binding (issue 15, F7).
    let digests = Arc::new(GrantDigests::new(loaded.iter().map(|g| (g.handle_sha256, g.handle_fingerprint))));
    warn_unfiltered(&digests);
    let live = Arc::new(LiveBindings::new(cfg.grants.clone()));
    // Connections read the grants when their bind arrives (not when accepted) and bound ones
    // watch them: a reload that drops their grant revokes them (issue 15, F5).
    let (grants_tx, grants_rx) = watch::channel(Arc::new(loaded));
    let unbound = Arc::new(Unbound::default());
    let mut accept_log = RateLimited::new();
    let mut cap_log = RateLimited::new();
    let mut backoff = Duration::ZERO;
    let mut paused_until: Option<tokio::time::Instant> = None;
    let listener = bind_private(&cfg.socket)?;
    info!("listening");
    let (stop_tx, stop_rx) = watch::channel(false);
    let signal = |kind| -> std::io::Result<Option<tokio::signal::unix::Signal>> {
        if cfg.handle_signals {
            tokio::signal::unix::signal(kind).map(Some)
        } else {
            Ok(None)
        }
    };
    let mut term = signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut int = signal(tokio::signal::unix::SignalKind::interrupt())?;
    let mut hup = signal(tokio::signal::unix::SignalKind::hangup())?;
    let mut tasks = tokio::task::JoinSet::new();
    let mut next_conn: u64 = 0;
    loop {
        let external = async {
            match shutdown.as_mut() {
                Some(rx) => {
                    let _ = rx.wait_for(|v| *v).await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        let resume = async {
            match paused_until {
                Some(t) => tokio::time::sleep_until(t).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            accepted = listener.accept(), if paused_until.is_none() => {
                let (stream, _) = match accepted {
                    Ok(x) => x,
                    Err(e) => {
                        // Never spin: pause accepting, longer while descriptors stay exhausted.
                        backoff = if is_exhaustion(&e) {
                            (backoff * 2).clamp(Duration::from_millis(10), MAX_ACCEPT_BACKOFF)
                        } else {
                            Duration::from_millis(10)
                        };
                        paused_until = Some(tokio::time::Instant::now() + backoff);
                        if let Some(suppressed) = accept_log.tick() {
                            warn!(error = %e, suppressed, backoff_ms = backoff.as_millis() as u64, "accept failed; pausing");
                        }
                        continue;
                    }
                };
                backoff = Duration::ZERO;
                next_conn += 1;
                let max_unbound = if faults.has(Fault::UnboundCapOne) { 1 } else { discipline.max_unbound };
                let Some((shed_rx, shed)) = unbound.admit(next_conn, max_unbound) else {
                    drop(stream);
                    continue;
                };
                if shed {
                    if let Some(suppressed) = cap_log.tick() {
                        warn!(max_unbound = discipline.max_unbound, suppressed, "unbound connection cap reached; shed the oldest waiting connection");
                    }
                }
                let slot = UnboundSlot(unbound.clone(), next_conn);
                let conn = Conn {
                    id: next_conn,
                    grants: grants_rx.clone(),
                    digests: digests.clone(),
                    live: live.clone(),
                    me: cfg.identity.clone(),
                    delay: cfg.op_delay,
                    faults,
                    bind_deadline: discipline.bind_deadline,
                    slot,
                    shed: shed_rx,
                };
                tasks.spawn(connection(conn, stream, stop_rx.clone()));
            }
            _ = resume => paused_until = None,
            Some(_) = recv(&mut hup) => {
                match grants::load(&cfg.grants) {
                    Ok(g) => {
                        info!(grants = g.len(), "grants reloaded");
                        digests.replace(g.iter().map(|g| (g.handle_sha256, g.handle_fingerprint)));
                        warn_unfiltered(&digests);
                        grants_tx.send_replace(Arc::new(g));
                    }
                    Err(e) => warn!(error = %e, "grants reload refused; keeping the previous grants"),
                }
            }
            Some(_) = recv(&mut term) => break,
            Some(_) = recv(&mut int) => break,
            _ = external => break,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
        }
    }
    // Stop accepting first: the socket path goes at once, so a new client is refused
    // rather than left waiting in a backlog nobody reads (issue 25, N1).
    drop(listener);
    let _ = std::fs::remove_file(&cfg.socket);
    info!(grace_ms = SHUTDOWN_GRACE.as_millis() as u64, "shutting down: revoking every binding");
    let _ = stop_tx.send(true);
    let drained = tokio::time::timeout(SHUTDOWN_GRACE, async { while tasks.join_next().await.is_some() {} }).await;
    if drained.is_err() {
        // A client that stops reading cannot hold shutdown: drop what is left.
        warn!(connections = tasks.len(), "shutdown grace over; dropping the remaining connections");
        tasks.abort_all();
        while tasks.join_next().await.is_some() {}
    }
    info!("stopped");
    Ok(())
}

async fn recv(s: &mut Option<tokio::signal::unix::Signal>) -> Option<()> {
    match s {
        Some(s) => s.recv().await,
        None => std::future::pending().await,
    }
}

type Done = (String, Result<serde_json::Value, AdapterError>, Instant);

/// What a connection needs to run jobs.
#[derive(Clone)]
struct Runner {
    root: Arc<Root>,
    /// The grant's root path (only fault code uses it).
    dir: Arc<PathBuf>,
    delay: std::time::Duration,
    faults: Faults,
    /// The session's shared idempotency cache: a job whose connection is gone settles its
    /// key here itself (issue 25, N7).
    cache: SharedCache,
}

/// Start a job: cheap ones run right here and their outcome is returned; the others go to the
/// blocking pool and report on `tx`.
fn spawn_job(r: &Runner, job: super::job::Job, key: Option<String>, tx: &mpsc::UnboundedSender<Done>) -> Option<Done> {
    let r = r.clone();
    let tx = tx.clone();
    let mut delay = r.delay;
    if r.faults.has(Fault::AbortSendsResult) && job.operation == ToolOperation::FsWrite {
        delay = delay.max(faults::SLOW_WRITE);
    }
    if r.faults.has(Fault::ConcurrencyUnbounded) && job.operation == ToolOperation::FsSearch {
        delay = delay.max(faults::SLOW_SEARCH);
    }
    // Cheap, bounded operations (a stat; a read of at most 64 KiB) run on the connection's
    // task: a few syscalls that never block (files are opened O_NONBLOCK and FIFOs are never
    // opened), so a hand-off to the blocking pool would cost more than the work itself.
    let small_read = job.operation == ToolOperation::FsRead
        && job.payload.get("maxBytes").and_then(serde_json::Value::as_u64).is_some_and(|n| n <= 64 * 1024);
    if delay.is_zero() && (job.operation == ToolOperation::FsStat || small_read) {
        let started = Instant::now();
        // A small window of a big file not scanned for handles yet goes to the pool: the
        // content guard reads the whole file once (issue 15, F7).
        let out = if r.faults.is_empty() {
            try_inline(&r.root, &job)
        } else {
            Some(execute_with(&r.root, &r.dir, &job, r.faults))
        };
        if let Some(out) = out {
            return Some((job.request_id, out, started));
        }
    }
    tokio::task::spawn_blocking(move || {
        let started = Instant::now();
        while started.elapsed() < delay && !job.cancel.is_cancelled() {
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        let request_id = job.request_id.clone();
        let op = job.operation;
        let out = if r.faults.is_empty() {
            execute_owned(&r.root, job)
        } else {
            execute_with(&r.root, &r.dir, &job, r.faults)
        };
        if let Err(mpsc::error::SendError((request_id, out, _))) = tx.send((request_id, out, started)) {
            // The connection is gone: the outcome still settles the key, so a retry on a
            // later connection replays it instead of running the mutation again.
            if let Some(key) = key {
                idempotency::lock(&r.cache).finish(Instant::now(), &key, &request_id, &out, is_mutating(op));
            }
        }
    });
    None
}

/// Under [`Fault::IgnoreFramesBeforeBind`]: a JSON object of another kind than `bind`.
fn skippable_before_bind(line: &[u8]) -> bool {
    crate::wire::decode_strict(line)
        .ok()
        .and_then(|v| v.get("kind").and_then(serde_json::Value::as_str).map(|k| k != "bind"))
        .unwrap_or(false)
}

/// A grant without a fingerprint makes the content guard hash every window (issue 25, N6).
fn warn_unfiltered(digests: &GrantDigests) {
    if digests.unfiltered() {
        warn!("a grant has no handleFingerprint: content scans hash every window; mint it again with `grant`");
    }
}

/// What one connection needs besides its socket.
struct Conn {
    id: u64,
    grants: watch::Receiver<Arc<Vec<Grant>>>,
    digests: Arc<GrantDigests>,
    live: Arc<LiveBindings>,
    me: AdapterIdentity,
    delay: Duration,
    faults: Faults,
    bind_deadline: Duration,
    slot: UnboundSlot,
    /// Fires when a newcomer sheds this connection before its `bind` (issue 25, N2).
    shed: tokio::sync::oneshot::Receiver<()>,
}

async fn connection(conn: Conn, stream: UnixStream, mut stop: watch::Receiver<bool>) {
    let Conn { id, grants: mut grants_rx, digests, live, me, delay, faults, bind_deadline, slot, mut shed } = conn;
    let (mut rd, mut wr) = stream.into_split();
    let mut decoder = LineDecoder::new(MAX_BIND_LINE);
    let mut buf = vec![0u8; PRE_BIND_READ];
    let mut empty = EmptyLines::default();
    let deadline = tokio::time::sleep(bind_deadline);
    tokio::pin!(deadline);
    // The first line must be a bind.
    let first = loop {
        if let Some(line) = decoder.next_line() {
            if faults.has(Fault::IgnoreFramesBeforeBind) && line.as_deref().is_ok_and(skippable_before_bind) {
                continue;
            }
            if faults.has(Fault::SkipGarbageBeforeBind)
                && line.as_deref().is_ok_and(|l| crate::wire::decode_strict(l).is_err())
            {
                continue;
            }
            break line;
        }
        tokio::select! {
            n = rd.read(&mut buf) => match n {
                Ok(0) | Err(_) => { debug!(conn = id, "closed before bind"); return; }
                Ok(n) if faults.has(Fault::EmptyLineCloses) && empty.seen_in(&buf[..n]) => {
                    info!(conn = id, reason = "empty_line", "bind refused");
                    return;
                }
                Ok(n) => decoder.push(&buf[..n]),
            },
            _ = stop.changed() => return,
            _ = &mut deadline => {
                info!(conn = id, reason = "bind_deadline", "bind refused");
                return;
            }
            Ok(()) = &mut shed => {
                info!(conn = id, reason = "shed", "closed before bind: the oldest of too many waiting connections");
                return;
            }
        }
    };
    // A complete first line: no longer waiting, so never shed.
    drop(slot);
    let Ok(first) = first else {
        info!(conn = id, reason = "oversize_bind", "bind refused");
        return;
    };
    // The grants as they are now, when the bind is judged: a grant removed by a reload since
    // this connection was accepted cannot bind.
    let grants = grants_rx.borrow_and_update().clone();
    let (binding, gi, bound) = match handle_bind_with(&first, &grants, &me, faults) {
        Ok(x) => x,
        Err(r) => {
            info!(conn = id, reason = r.as_str(), "bind refused");
            return;
        }
    };
    let grant = grants[gi].clone();
    drop(grants);
    let root_path = grant.root.clone();
    let dir = Arc::new(root_path.clone());
    let digests = if faults.has(Fault::ScanBoundHandleOnly) { Arc::new(GrantDigests::new([])) } else { digests };
    let guard = Guard::new(binding.handle().clone(), digests);
    let guard = if faults.has(Fault::OtherGrantScanPerChunk) { guard.minted_per_chunk() } else { guard };
    let guard = if faults.has(Fault::OtherGrantRunStartOnly) { guard.minted_run_start_only() } else { guard };
    let guard = if faults.has(Fault::TrailingWordRefused) { guard.trailing_word_refused() } else { guard };
    let guard = if faults.has(Fault::BoundScanMintedOnly) { guard.bound_scan_minted_only() } else { guard };
    let guard = if faults.has(Fault::OtherGrantChunkWrap) { guard.minted_chunk_wrap() } else { guard };
    let Some(pin) = grant.root_pin else {
        // DECISION (conformance/SPEC.md PC-4.5): a grant minted before roots were pinned
        // cannot bind; `grant` mints a pinned one.
        warn!(conn = id, reason = "root_unpinned", "bind refused");
        return;
    };
    // The root is opened on this task, not on the blocking pool: a handful of `openat`s on
    // the operator's own directory (as small reads are), where the hop to a pool thread and
    // back cost more than the work (two thread wake-ups per bind).
    let root = match Root::open_pinned(&root_path, pin) {
        // The fault that sends handles in results turns the content guard off as well.
        Ok(r) if faults.has(Fault::NoCapabilityScan) => Arc::new(r),
        Ok(r) => Arc::new(r.with_guard(guard)),
        Err(e) => {
            let reason = match e {
                PinError::Symlink => "root_symlink",
                PinError::Changed => "root_changed",
                PinError::NotCanonical => "root_not_canonical",
                PinError::Io(_) => "root_unavailable",
            };
            warn!(conn = id, reason, "bind refused");
            return;
        }
    };
    // DECISION (conformance/SPEC.md PC-4.5): one live connection per grant; this bind
    // replaces (revokes) an earlier live one in this process, so every limit of the grant
    // holds across all the connections that present its handle; another process's live
    // connection of the grant (its lock file held) refuses this bind (issue 25, N12).
    let scope = {
        let b = binding.identity();
        (b.host_instance_id.to_string(), b.session_id.to_string(), b.generation)
    };
    let (mut replaced_rx, replaced, cache) = match live.take_over(grant.handle_sha256, id, scope) {
        Ok(x) => x,
        Err(e) => {
            let reason = match e {
                TakeOver::HeldElsewhere => "bound_in_another_process",
                TakeOver::Unavailable => "bind_lock_unavailable",
            };
            warn!(conn = id, reason, "bind refused");
            return;
        }
    };
    let _live = LiveGuard { live: live.clone(), grant: grant.handle_sha256, id };
    let runner = Runner { root, dir, delay, faults, cache: cache.clone() };
    let mut replace_gone = false;
    if replaced {
        info!(conn = id, "bound over a live connection of the same grant; revoking it");
    }
    let mut buf = vec![0u8; 64 * 1024];
    info!(conn = id, session = %binding.identity().session_id, generation = binding.identity().generation, "bound");
    let mut session = Session::with_cache(binding, faults, cache);
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<Done>();
    'conn: {
        if wr.write_all(&bound).await.is_err() {
            break 'conn;
        }
        let limit = if faults.has(Fault::NoLineLimit) || faults.has(Fault::LineLimitAtLfOnly) {
            faults::NO_LINE_LIMIT
        } else {
            session.max_line()
        };
        let mut next = LineDecoder::new(limit);
        next.push(decoder.remainder());
        let mut decoder = next;
        let mut eof = false;
        loop {
            let mut actions = Vec::new();
            while let Some(line) = decoder.next_line() {
                match line {
                    Ok(l) => actions.extend(session.handle_line(Instant::now(), &l)),
                    Err(_) => actions.extend(session.handle_line_error()),
                }
            }
            if eof && !faults.has(Fault::EofIgnored) {
                actions.extend(session.handle_eof());
            }
            let mut actions: std::collections::VecDeque<Action> = actions.into();
            while let Some(a) = actions.pop_front() {
                match a {
                    Action::Send(line) => {
                        if wr.write_all(&line).await.is_err() {
                            break 'conn;
                        }
                    }
                    Action::Execute(job) => {
                        let key = session.key_of(&job.request_id).map(str::to_string);
                        if let Some((rid, outcome, started)) = spawn_job(&runner, job, key, &done_tx) {
                            let code = outcome.as_ref().err().map(|e| e.code.as_str()).unwrap_or("ok");
                            debug!(conn = id, request = %rid, outcome = code, micros = started.elapsed().as_micros() as u64, "operation finished");
                            actions.extend(session.handle_done(Instant::now(), &rid, outcome));
                        }
                    }
                    Action::Close(reason) => {
                        let reason = match reason {
                            CloseReason::Revoked => "revoked",
                            CloseReason::Eof => "eof",
                            CloseReason::ResponseBudget => "response_budget",
                            CloseReason::ProtocolViolation(code) => code,
                        };
                        let c = session.counters();
                        info!(
                            conn = id,
                            reason,
                            results = c.results,
                            busy = c.busy,
                            replays = c.replays,
                            aborted = c.aborted,
                            "closed"
                        );
                        let _ = wr.shutdown().await;
                        break 'conn;
                    }
                }
            }
            tokio::select! {
                n = rd.read(&mut buf), if !eof => match n {
                    Ok(0) | Err(_) => eof = true,
                    Ok(n) if faults.has(Fault::EmptyLineCloses) && empty.seen_in(&buf[..n]) => {
                        info!(conn = id, reason = "empty_line", "closed");
                        let _ = wr.shutdown().await;
                        break 'conn;
                    }
                    Ok(n) => decoder.push(&buf[..n]),
                },
                Some((rid, outcome, started)) = done_rx.recv() => {
                    let code = outcome.as_ref().err().map(|e| e.code.as_str()).unwrap_or("ok");
                    debug!(conn = id, request = %rid, outcome = code, micros = started.elapsed().as_micros() as u64, "operation finished");
                    for a in session.handle_done(Instant::now(), &rid, outcome) {
                        match a {
                            Action::Send(line) => { if wr.write_all(&line).await.is_err() { break 'conn; } }
                            Action::Execute(job) => {
                                let key = session.key_of(&job.request_id).map(str::to_string);
                                if let Some(inline) = spawn_job(&runner, job, key, &done_tx) {
                                    let _ = done_tx.send(inline);
                                }
                            }
                            Action::Close(_) => { let _ = wr.shutdown().await; break 'conn; }
                        }
                    }
                }
                _ = stop.changed() => {
                    // Shutdown revokes the binding: cancel everything, say revoked, close.
                    revoke(&mut session, &mut wr).await;
                    info!(conn = id, reason = "shutdown", "closed");
                    break 'conn;
                }
                r = &mut replaced_rx, if !replace_gone => {
                    if r.is_ok() && !faults.has(Fault::EarlierConnectionKept) {
                        revoke(&mut session, &mut wr).await;
                        info!(conn = id, reason = "replaced", "closed");
                        break 'conn;
                    }
                    // The registry dropped our entry without a replacement (never polled again).
                    replace_gone = true;
                }
                Ok(()) = grants_rx.changed() => {
                    let current = grants_rx.borrow_and_update().clone();
                    let b = session.binding();
                    if !still_granted(&grant, b.operations(), b.limits(), &current) {
                        // DECISION (conformance/SPEC.md PC-4.5): a reload that removes the grant
                        // aborts in-flight work exactly like shutdown — no further result is sent.
                        revoke(&mut session, &mut wr).await;
                        info!(conn = id, reason = "grant_revoked", "closed");
                        break 'conn;
                    }
                }
            }
        }
    }
    // Whatever ended the connection: cancel what runs, and let every outcome already
    // reported settle the shared idempotency cache; jobs still running settle it themselves
    // (their report finds the channel closed).
    session.handle_eof();
    done_rx.close();
    while let Ok((rid, outcome, _)) = done_rx.try_recv() {
        session.handle_done(Instant::now(), &rid, outcome);
    }
}

/// Revoke a bound session: cancel every job (no result of theirs is sent after this),
/// send `revoked` and close the write side.
async fn revoke(session: &mut Session, wr: &mut tokio::net::unix::OwnedWriteHalf) {
    let revoked = crate::wire::encode_line(&session.binding().identity().frame("revoked", []));
    session.handle_eof();
    // A peer that stopped reading cannot hold the revocation (issue 25, N1).
    let _ = tokio::time::timeout(SHUTDOWN_GRACE, async {
        let _ = wr.write_all(&revoked).await;
        let _ = wr.shutdown().await;
    })
    .await;
}
