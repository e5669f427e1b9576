//! The reference daemon's socket shell (tokio): an owner-private Unix socket, bounded
//! connections, concurrent dispatch per connection with in-flight limits, the exact error
//! replies and connection behaviour of SPEC §1.1, and the version echo of SPEC §2.2.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::sync::{mpsc, watch};
use tracing::{info, warn};

use super::conn::{withheld_line, Connection, ReplyTo};
use super::faults::DaemonFaults;
use super::host::{DErr, Host, Out, MAX_LINE_BYTES};
use super::ids::OsRng;
use super::store::Store;
use crate::wire::LineDecoder;

/// How to run the daemon.
#[derive(Clone, Debug)]
pub struct DaemonConfig {
    /// Socket path.
    pub socket: PathBuf,
    /// State directory (owner-only).
    pub state_dir: PathBuf,
    /// Fixed host instance id (default: a new one per start).
    pub host_instance_id: Option<String>,
    /// Install signal handlers (the CLI); off when embedded.
    pub handle_signals: bool,
    /// A connection that has not sent one complete line this long after it was accepted is
    /// closed without a line (SPEC PC-1.1, DECISION on idle connections).
    pub handshake_deadline: Duration,
    /// The most sessions kept, resident, dormant and retained closed together (SPEC PC-2.5,
    /// DECISION on the session cap; default [`super::core::MAX_SESSIONS`]).
    pub max_sessions: usize,
    /// Test aid: rules broken on purpose (production: [`DaemonFaults::NONE`]; see
    /// [`crate::daemon::faults`]).
    pub faults: DaemonFaults,
}

/// The default of [`DaemonConfig::handshake_deadline`].
pub const DEFAULT_HANDSHAKE_DEADLINE: Duration = Duration::from_secs(10);

/// Why the daemon could not start.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// Socket setup.
    #[error(transparent)]
    Socket(#[from] crate::adapter::server::ServeError),
    /// State directory.
    #[error(transparent)]
    Store(#[from] super::store::StoreError),
    /// I/O.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// A configured `hostInstanceId` no descriptor could be bound to.
    #[error("host instance id must be 1-128 UTF-16 units without control characters")]
    HostInstanceId,
}

/// Run the daemon until SIGTERM/SIGINT or `shutdown`.
pub async fn serve(cfg: DaemonConfig, mut shutdown: Option<watch::Receiver<bool>>) -> Result<(), DaemonError> {
    if cfg.host_instance_id.as_deref().is_some_and(|id| !crate::contract::text::is_host_instance_id(id)) {
        return Err(DaemonError::HostInstanceId);
    }
    // One owner per state directory, before anything of it is read (SPEC PC-6).
    let store = Store::open_exclusive(&cfg.state_dir)?;
    if !cfg.faults.is_empty() {
        warn!(faults = %cfg.faults, "FAULT SWITCHES ON: this daemon is broken on purpose (test aid)");
    }
    let host = Host::start_with(store, cfg.host_instance_id.clone(), cfg.faults, cfg.max_sessions).await?;
    let listener = crate::adapter::server::bind_private(&cfg.socket)?;
    if cfg.faults.has(super::faults::DaemonFault::SocketWorldWritable) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&cfg.socket, std::fs::Permissions::from_mode(0o666))?;
    }
    info!(host = %host.id, "daemon listening");
    let mut term = if cfg.handle_signals {
        Some(tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?)
    } else {
        None
    };
    let mut int = if cfg.handle_signals {
        Some(tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?)
    } else {
        None
    };
    loop {
        let external = async {
            match shutdown.as_mut() {
                Some(rx) => {
                    let _ = rx.wait_for(|v| *v).await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        let sig = async {
            match (&mut term, &mut int) {
                (Some(t), Some(i)) => {
                    tokio::select! { _ = t.recv() => {}, _ = i.recv() => {} }
                }
                _ => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            a = listener.accept() => match a {
                Ok((stream, _)) => { tokio::spawn(connection(host.clone(), stream, cfg.handshake_deadline)); }
                Err(e) => warn!(error = %e, "accept failed"),
            },
            _ = external => break,
            _ = sig => break,
        }
    }
    info!("daemon shutting down: revoking every binding");
    host.shutdown().await;
    let _ = std::fs::remove_file(&cfg.socket);
    Ok(())
}

async fn connection(host: Arc<Host>, stream: UnixStream, handshake_deadline: Duration) {
    let (mut rd, mut wr) = stream.into_split();
    let (tx, mut rx) = mpsc::unbounded_channel::<Out>();
    let activity = host.new_activity();
    let Some(conn) = host.add_conn(tx.clone(), activity.clone()) else {
        // Over the connection cap and nothing idle to reclaim: close without a line.
        info!("connection cap reached and every connection has a request in flight: closed a new connection");
        return;
    };
    let writer_host = host.clone();
    let wa = activity.clone();
    let mut writer = tokio::spawn(async move {
        while let Some(out) = rx.recv().await {
            let n = out.line.len();
            // Last line of defence: never write a handle the host holds.
            let line = if writer_host.live_handles().iter().any(|h| h.occurs_in(&out.line)) {
                withheld_line(&out.line, &writer_host.id, &mut OsRng)
            } else {
                out.line
            };
            let failed = wr.write_all(&line).await.is_err();
            // Counted until written: a peer that does not read shows as a stalled queue.
            wa.written(n);
            if failed || out.close {
                break;
            }
        }
        let _ = wr.shutdown().await;
    });
    let mut core = Connection::new(host.id.clone(), host.faults, Box::new(OsRng));
    // Dispatched commands come back here with their outcome.
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<(ReplyTo, Result<Value, DErr>)>();
    let mut decoder = LineDecoder::new(super::faults::line_limit(MAX_LINE_BYTES, host.faults));
    let mut buf = vec![0u8; 64 * 1024];
    let send = |line: Vec<u8>, close: bool| Host::push(&tx, &activity, Out { line, close });
    // A response: written, or past the outbound cap the connection is closed (slow reader).
    let answer = |core: &mut Connection, reply: ReplyTo, r: Result<Value, DErr>| {
        core.handle_response(reply, r);
        while let Some(t) = core.poll_transmit() {
            if !send(t.line, t.close) {
                let _ = tx.send(Out { line: Vec::new(), close: true });
            }
        }
        activity.done();
    };
    let deadline = tokio::time::sleep(handshake_deadline);
    tokio::pin!(deadline);
    let mut spoke = false;
    'read: loop {
        let n = tokio::select! {
            r = rd.read(&mut buf) => match r {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            },
            Some((reply, r)) = done_rx.recv() => {
                answer(&mut core, reply, r);
                continue;
            }
            _ = activity.wait_reclaimed() => break,
            _ = &mut deadline, if !spoke => {
                info!(connection = conn, "no complete line within the handshake deadline: connection closed");
                break;
            }
        };
        activity.touch();
        decoder.push(&buf[..n]);
        while let Some(line) = decoder.next_line() {
            spoke = true;
            if activity.is_reclaimed() {
                break 'read;
            }
            core.handle_line(line);
            while let Some(p) = core.poll_probe() {
                let _ = tokio::time::timeout(Duration::from_secs(1), UnixStream::connect(p)).await;
            }
            while let Some(t) = core.poll_transmit() {
                if !send(t.line, t.close) {
                    break 'read;
                }
            }
            while let Some(d) = core.poll_dispatch() {
                if !activity.admit() {
                    // Reclaimed as idle while this line arrived: close, as if it came after.
                    core.forget(&d.reply.request_id);
                    break 'read;
                }
                if let Some(r) = host.dispatch_now(conn, &d.command) {
                    answer(&mut core, d.reply, r);
                    continue;
                }
                let host2 = host.clone();
                let done = done_tx.clone();
                tokio::spawn(async move {
                    let r = host2.dispatch(conn, d.command).await;
                    let _ = done.send((d.reply, r));
                });
            }
            if core.is_closed() {
                break 'read;
            }
        }
    }
    host.remove_conn(conn);
    // Answer what is still in flight (a peer may half-close and wait for its responses).
    drop(done_tx);
    while core.in_flight() > 0 {
        match done_rx.recv().await {
            Some((reply, r)) => answer(&mut core, reply, r),
            None => break,
        }
    }
    drop(tx);
    // A reclaimed connection is closed without a line; any other gets what is queued, for at
    // most FLUSH_DEADLINE (a peer that stopped reading never holds the task and its socket).
    if activity.is_reclaimed() || tokio::time::timeout(FLUSH_DEADLINE, &mut writer).await.is_err() {
        writer.abort();
    }
}

/// How long a closing connection's queued lines may take to be written.
const FLUSH_DEADLINE: Duration = Duration::from_secs(10);
