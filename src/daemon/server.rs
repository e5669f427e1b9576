//! The reference daemon's socket shell (tokio): an owner-private Unix socket, bounded
//! connections, concurrent dispatch per connection with in-flight limits, the exact error
//! replies and connection behaviour of SPEC §1.1, and the version echo of SPEC §2.2.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::sync::{mpsc, watch};
use tracing::{info, warn};

use super::faults::{self, DaemonFault, DaemonFaults};
use super::host::{DErr, Host, Out, MAX_IN_FLIGHT, MAX_LINE_BYTES, MAX_RESPONSE_BYTES};
use super::store::Store;
use crate::contract::{parse_command, HostContext};
use crate::wire::{decode_strict, encode_line, LineDecoder, LineError};

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
}

fn response(version: &str, request_id: &str, host: &str, session_id: Option<&str>, r: Result<Value, DErr>) -> Value {
    let mut v =
        json!({"protocolVersion": version, "kind": "response", "requestId": request_id, "hostInstanceId": host});
    if let Some(s) = session_id {
        v["sessionId"] = json!(s);
    }
    match r {
        Ok(d) => {
            v["ok"] = json!(true);
            v["data"] = d;
        }
        Err(e) => {
            v["ok"] = json!(false);
            v["error"] = e.body();
        }
    }
    v
}

fn invalid_id() -> String {
    format!("invalid-{}", uuid::Uuid::new_v4())
}

/// Run the daemon until SIGTERM/SIGINT or `shutdown`.
pub async fn serve(cfg: DaemonConfig, mut shutdown: Option<watch::Receiver<bool>>) -> Result<(), DaemonError> {
    let store = Store::open(&cfg.state_dir)?;
    if !cfg.faults.is_empty() {
        warn!(faults = %cfg.faults, "FAULT SWITCHES ON: this daemon is broken on purpose (test aid)");
    }
    let host = Host::start_with(store, cfg.host_instance_id.clone(), cfg.faults)?;
    let listener = crate::adapter::server::bind_private(&cfg.socket)?;
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

fn infl_remove(inflight: &Mutex<HashSet<String>>, rid: &str) {
    inflight.lock().unwrap_or_else(|p| p.into_inner()).remove(rid);
}

async fn connection(host: Arc<Host>, stream: UnixStream, handshake_deadline: Duration) {
    let (mut rd, mut wr) = stream.into_split();
    let (tx, mut rx) = mpsc::unbounded_channel::<Out>();
    let queued = Arc::new(AtomicUsize::new(0));
    let activity = host.new_activity();
    let Some(conn) = host.add_conn(tx.clone(), queued.clone(), activity.clone()) else {
        // Over the connection cap and nothing idle to reclaim: close without a line.
        info!("connection cap reached and every connection busy or attached: closed a new connection");
        return;
    };
    let writer_host = host.clone();
    let wq = queued.clone();
    let writer = tokio::spawn(async move {
        while let Some(out) = rx.recv().await {
            wq.fetch_sub(out.line.len(), Ordering::SeqCst);
            // Last line of defence: never write a handle the host holds.
            let line = if writer_host.live_handles().iter().any(|h| h.occurs_in(&out.line)) {
                let v: Value = serde_json::from_slice(&out.line).unwrap_or(Value::Null);
                let e = DErr::new("internal_error", "a record would have contained a capability handle; withheld");
                let version = v["protocolVersion"].as_str().unwrap_or("1.0");
                encode_line(&response(version, &invalid_id(), &writer_host.id, None, Err(e)))
            } else {
                out.line
            };
            if wr.write_all(&line).await.is_err() || out.close {
                break;
            }
        }
        let _ = wr.shutdown().await;
    });
    let inflight: Arc<Mutex<HashSet<String>>> = Arc::new(Mutex::new(HashSet::new()));
    let mut decoder = LineDecoder::new(MAX_LINE_BYTES);
    let mut buf = vec![0u8; 64 * 1024];
    let send = |line: Vec<u8>, close: bool| Host::push(&tx, &queued, Out { line, close });
    let deadline = tokio::time::sleep(handshake_deadline);
    tokio::pin!(deadline);
    let mut spoke = false;
    'read: loop {
        let n = tokio::select! {
            r = rd.read(&mut buf) => match r {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            },
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
            let fatal = |code: &str, msg: &str| {
                encode_line(&response("1.0", &invalid_id(), &host.id, None, Err(DErr::new(code, msg))))
            };
            let line = match line {
                Ok(l) => l,
                Err(LineError::TooLarge { .. }) => {
                    send(fatal("line_too_large", "the line exceeds maxLineBytes"), true);
                    break 'read;
                }
                Err(_) => break 'read,
            };
            let value = match decode_strict(&line) {
                Ok(v) => v,
                Err(LineError::InvalidUtf8) => {
                    send(fatal("invalid_utf8", "the line is not UTF-8"), true);
                    break 'read;
                }
                Err(_) if host.faults.has(DaemonFault::KeepOpenOnInvalidJson) => {
                    if !send(fatal("invalid_json", "the line is not one strict JSON object"), false) {
                        break 'read;
                    }
                    continue;
                }
                Err(_) => {
                    send(fatal("invalid_json", "the line is not one strict JSON object"), true);
                    break 'read;
                }
            };
            let value = if host.faults.is_empty() {
                value
            } else {
                let mut v = value;
                faults::lenient_value(&mut v, host.faults);
                v
            };
            let parsed = match parse_command(&value, &HostContext { host_instance_id: &host.id }) {
                Err(e) if !host.faults.is_empty() => match faults::lenient_command(&value, &e, &host.id, host.faults) {
                    Some(c) => Ok(c),
                    None => {
                        if let Some(p) = faults::premature_endpoint(&value, &e, host.faults) {
                            let _ =
                                tokio::time::timeout(std::time::Duration::from_secs(1), UnixStream::connect(p)).await;
                        }
                        Err(e)
                    }
                },
                r => r,
            };
            let cmd = match parsed {
                Ok(c) => c,
                Err(e) => {
                    let mut body = DErr::new(e.error.code.as_str(), &e.error.message);
                    body.details = e.error.details.clone();
                    let rid = e.request_id.clone().unwrap_or_else(invalid_id);
                    let echo = faults::echo_version(&e.echo_version, host.faults);
                    let rec = response(&echo, &rid, &host.id, None, Err(body));
                    if !send(encode_line(&rec), e.close) || e.close {
                        break 'read;
                    }
                    continue;
                }
            };
            let version = faults::echo_version(&cmd.version.text, host.faults);
            let rid = cmd.request_id.clone();
            let sid = cmd.session_id.clone();
            {
                let mut f = inflight.lock().unwrap_or_else(|p| p.into_inner());
                let refusal = if f.contains(&rid) {
                    Some(DErr::new("duplicate_request_id", "this requestId is already in flight on this connection"))
                } else if f.len() >= MAX_IN_FLIGHT {
                    let mut e = DErr::new("connection_busy", "too many requests in flight on this connection");
                    e.retryable = true;
                    Some(e)
                } else {
                    f.insert(rid.clone());
                    None
                };
                if let Some(e) = refusal {
                    // DECISION: the exact accepted version is echoed (protocol text).
                    let version = if host.faults.has(DaemonFault::Echo10OnDuplicate) && e.code == "duplicate_request_id"
                    {
                        "1.0".to_string()
                    } else {
                        version
                    };
                    if !send(encode_line(&response(&version, &rid, &host.id, sid.as_deref(), Err(e))), false) {
                        break 'read;
                    }
                    continue;
                }
            }
            if !activity.admit() {
                // Reclaimed as idle while this line arrived: close, as if it came after.
                infl_remove(&inflight, &rid);
                break 'read;
            }
            let host2 = host.clone();
            let act2 = activity.clone();
            let tx2 = tx.clone();
            let q2 = queued.clone();
            let infl = inflight.clone();
            tokio::spawn(async move {
                let r = host2.dispatch(conn, cmd).await;
                let mut line = encode_line(&response(&version, &rid, &host2.id, sid.as_deref(), r));
                if line.len() > MAX_RESPONSE_BYTES {
                    let e = DErr::new("outbound_record_too_large", "the response exceeded maxResponseBytes");
                    line = encode_line(&response(&version, &rid, &host2.id, sid.as_deref(), Err(e)));
                }
                infl_remove(&infl, &rid);
                if !Host::push(&tx2, &q2, Out { line, close: false }) {
                    // Slow reader past the outbound cap: disconnect.
                    let _ = tx2.send(Out { line: Vec::new(), close: true });
                }
                act2.done();
            });
        }
    }
    host.remove_conn(conn);
    drop(tx);
    let _ = writer.await;
}
