//! The reference adapter's socket shell (tokio): an owner-private Unix socket, one task per
//! connection driving a [`Session`], jobs on blocking threads, graceful shutdown on
//! SIGTERM/SIGINT (every binding revoked) and grants reloaded on SIGHUP.

use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Instant;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, watch};
use tracing::{debug, info, warn};

use super::faults::{self, Fault, Faults};
use super::fs::Root;
use super::grants;
use super::ops::execute_with;
use super::session::{handle_bind_with, Action, AdapterIdentity, CloseReason, Grant, Session, MAX_BIND_LINE};
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
            match std::os::unix::net::UnixStream::connect(path) {
                Ok(_) => return Err(ServeError::Insecure("another server answers on the socket path".into())),
                Err(_) => std::fs::remove_file(path)?,
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e.into()),
    }
    Ok(())
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

type SharedGrants = Arc<RwLock<Arc<Vec<Grant>>>>;

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
    mut shutdown: Option<watch::Receiver<bool>>,
) -> Result<(), ServeError> {
    if !faults.is_empty() {
        warn!(faults = %faults, "FAULT SWITCHES ON: this adapter is broken on purpose (test aid)");
    }
    let loaded = grants::load(&cfg.grants)?;
    info!(grants = loaded.len(), "grants loaded");
    let grants: SharedGrants = Arc::new(RwLock::new(Arc::new(loaded)));
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
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, _) = match accepted {
                    Ok(x) => x,
                    Err(e) => { warn!(error = %e, "accept failed"); continue; }
                };
                next_conn += 1;
                let g = grants.read().map(|g| g.clone()).unwrap_or_default();
                let ident = cfg.identity.clone();
                tasks.spawn(connection(next_conn, stream, g, ident, cfg.op_delay, faults, stop_rx.clone()));
            }
            Some(_) = recv(&mut hup) => {
                match grants::load(&cfg.grants) {
                    Ok(g) => {
                        info!(grants = g.len(), "grants reloaded");
                        if let Ok(mut w) = grants.write() { *w = Arc::new(g); }
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
    info!("shutting down: revoking every binding");
    let _ = stop_tx.send(true);
    while tasks.join_next().await.is_some() {}
    let _ = std::fs::remove_file(&cfg.socket);
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
}

/// Start a job: cheap ones run right here and their outcome is returned; the others go to the
/// blocking pool and report on `tx`.
fn spawn_job(r: &Runner, job: super::session::Job, tx: &mpsc::UnboundedSender<Done>) -> Option<Done> {
    let r = r.clone();
    let tx = tx.clone();
    let mut delay = r.delay;
    if r.faults.has(Fault::AbortSendsResult) && job.operation == ToolOperation::FsWrite {
        delay = delay.max(faults::SLOW_WRITE);
    }
    // Cheap, bounded operations (a stat; a read of at most 64 KiB) run on the connection's
    // task: a few syscalls that never block (files are opened O_NONBLOCK and FIFOs are never
    // opened), so a hand-off to the blocking pool would cost more than the work itself.
    let small_read = job.operation == ToolOperation::FsRead
        && job.payload.get("maxBytes").and_then(serde_json::Value::as_u64).is_some_and(|n| n <= 64 * 1024);
    if delay.is_zero() && (job.operation == ToolOperation::FsStat || small_read) {
        let started = Instant::now();
        let out = execute_with(&r.root, &r.dir, &job, r.faults);
        return Some((job.request_id, out, started));
    }
    tokio::task::spawn_blocking(move || {
        let started = Instant::now();
        while started.elapsed() < delay && !job.cancel.is_cancelled() {
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        let out = execute_with(&r.root, &r.dir, &job, r.faults);
        let _ = tx.send((job.request_id.clone(), out, started));
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

async fn connection(
    id: u64,
    stream: UnixStream,
    grants: Arc<Vec<Grant>>,
    me: AdapterIdentity,
    delay: std::time::Duration,
    faults: Faults,
    mut stop: watch::Receiver<bool>,
) {
    let (mut rd, mut wr) = stream.into_split();
    let mut decoder = LineDecoder::new(MAX_BIND_LINE);
    let mut buf = vec![0u8; 64 * 1024];
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
                Ok(n) => decoder.push(&buf[..n]),
            },
            _ = stop.changed() => return,
        }
    };
    let Ok(first) = first else {
        info!(conn = id, reason = "oversize_bind", "bind refused");
        return;
    };
    let (binding, gi, bound) = match handle_bind_with(&first, &grants, &me, faults) {
        Ok(x) => x,
        Err(r) => {
            info!(conn = id, reason = r.as_str(), "bind refused");
            return;
        }
    };
    let root_path = grants[gi].root.clone();
    let dir = Arc::new(root_path.clone());
    let root = match tokio::task::spawn_blocking(move || Root::open(&root_path)).await {
        Ok(Ok(r)) => Arc::new(r),
        _ => {
            warn!(conn = id, "bind refused: the grant's root cannot be opened");
            return;
        }
    };
    let runner = Runner { root, dir, delay, faults };
    info!(conn = id, session = %binding.identity.session_id, generation = binding.identity.generation, "bound");
    let mut session = Session::with_faults(binding, faults);
    if wr.write_all(&bound).await.is_err() {
        return;
    }
    let limit = if faults.has(Fault::NoLineLimit) { faults::NO_LINE_LIMIT } else { session.max_line() };
    let mut next = LineDecoder::new(limit);
    next.push(decoder.remainder());
    let mut decoder = next;
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<Done>();
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
                        session.handle_eof();
                        return;
                    }
                }
                Action::Execute(job) => {
                    if let Some((rid, outcome, started)) = spawn_job(&runner, job, &done_tx) {
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
                    return;
                }
            }
        }
        tokio::select! {
            n = rd.read(&mut buf), if !eof => match n {
                Ok(0) | Err(_) => eof = true,
                Ok(n) => decoder.push(&buf[..n]),
            },
            Some((rid, outcome, started)) = done_rx.recv() => {
                let code = outcome.as_ref().err().map(|e| e.code.as_str()).unwrap_or("ok");
                debug!(conn = id, request = %rid, outcome = code, micros = started.elapsed().as_micros() as u64, "operation finished");
                for a in session.handle_done(Instant::now(), &rid, outcome) {
                    match a {
                        Action::Send(line) => { if wr.write_all(&line).await.is_err() { return; } }
                        Action::Execute(job) => {
                            if let Some(inline) = spawn_job(&runner, job, &done_tx) {
                                let _ = done_tx.send(inline);
                            }
                        }
                        Action::Close(_) => { let _ = wr.shutdown().await; return; }
                    }
                }
            }
            _ = stop.changed() => {
                // Shutdown revokes the binding: cancel everything, say revoked, close.
                let revoked = crate::wire::encode_line(&session.binding().identity.frame("revoked", []));
                session.handle_eof();
                let _ = wr.write_all(&revoked).await;
                let _ = wr.shutdown().await;
                info!(conn = id, reason = "shutdown", "closed");
                return;
            }
        }
    }
}
