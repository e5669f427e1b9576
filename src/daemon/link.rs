//! The tokio shell around [`AdapterRuntime`]: checks the endpoint, connects, binds, and then
//! drives one adapter connection from a background task (SPEC §1.2, §3.4, §4.3, §4.4).
//!
//! The runtime sits behind a mutex shared by the handle and the task. A call admits itself
//! synchronously ([`AdapterLink::start`]: a capacity refusal happens there, before any wire
//! write), wakes the task and is then awaited ([`PendingCall::outcome`]); starting several
//! calls before awaiting any runs them concurrently, as far as the descriptor's limits allow.
//! The task reads, writes (through a separate writer task, so a slow adapter reader never
//! stops the daemon from reading), runs the timers and delivers events.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::UnixStream;
use tokio::sync::{mpsc, oneshot, watch, Notify};

use super::endpoint::check_endpoint;
use super::faults::{DaemonFault, DaemonFaults};
use super::ids::OsRng;
use super::runtime::{AdapterRuntime, CallId, Event, OutLine, State};
pub use super::runtime::{CallError, LinkError};
use crate::contract::types::tool_adapter::ToolOperation;
use crate::contract::{DaemonCode, Descriptor};

/// Longest wait for the adapter's `revoked` / EOF after a `revoke`.
pub const REVOKE_GRACE: Duration = Duration::from_millis(1000);

type Reply = oneshot::Sender<Result<Value, CallError>>;

struct Shared {
    rt: AdapterRuntime,
    waiters: HashMap<CallId, Reply>,
    bound: Option<oneshot::Sender<Result<(), &'static str>>>,
}

struct Inner {
    shared: Arc<Mutex<Shared>>,
    wake: Arc<Notify>,
    done: watch::Receiver<bool>,
    grace: Duration,
    /// Under [`DaemonFault::DroppedLinkNotRevoked`]: dropping the last handle does nothing.
    keep_on_drop: bool,
}

fn lock(m: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Drop for Inner {
    // Dropping the last handle revokes the binding; the task flushes `revoke` and closes.
    fn drop(&mut self) {
        if self.keep_on_drop {
            return;
        }
        let mut s = lock(&self.shared);
        s.rt.revoke(Instant::now());
        deliver(&mut s);
        drop(s);
        self.wake.notify_one();
    }
}

/// One bound adapter connection. Cloneable; dropping the last clone revokes the binding.
#[derive(Clone)]
pub struct AdapterLink {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for AdapterLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdapterLink").field("state", &lock(&self.inner.shared).rt.state()).finish_non_exhaustive()
    }
}

impl AdapterLink {
    /// Check the endpoint, connect (within `requestTimeoutMs`), send `bind` and wait for a
    /// valid `bound` (within `requestTimeoutMs`). Every failure is a typed `adapter_*` code.
    pub async fn open(descriptor: &Descriptor) -> Result<AdapterLink, LinkError> {
        Self::open_with(descriptor, DaemonFaults::NONE).await
    }

    /// [`AdapterLink::open`] with fault switches: the link is broken on purpose (test aid for
    /// the daemon kill matrix; see [`crate::daemon::faults`]).
    pub async fn open_with(descriptor: &Descriptor, faults: DaemonFaults) -> Result<AdapterLink, LinkError> {
        let path = Path::new(descriptor.endpoint_path());
        let skip_checks = faults.has(DaemonFault::SkipEndpointCheck);
        let loose = super::endpoint::Loose {
            mask: if faults.has(DaemonFault::EndpointWriteBitsOnly) {
                0o022
            } else if faults.has(DaemonFault::EndpointGroupBitsOnly) {
                0o070
            } else {
                0o077
            },
            follow: faults.has(DaemonFault::EndpointFollowsSymlinks),
            ancestors: faults.has(DaemonFault::EndpointAncestorsUnchecked),
        };
        if loose.mask != 0o077 || loose.follow || loose.ancestors {
            super::endpoint::check_endpoint_loose(path, loose)?;
        } else if !skip_checks {
            check_endpoint(path)?;
        }
        let timeout = Duration::from_millis(descriptor.limits().request_timeout_ms as u64);
        let stream = match tokio::time::timeout(timeout, UnixStream::connect(path)).await {
            Err(_) => return Err(LinkError::from_code(DaemonCode::AdapterConnectTimeout.as_str())),
            Ok(Err(_)) => {
                return Err(LinkError::new(
                    DaemonCode::AdapterConnectionFailed.as_str(),
                    "could not connect to the adapter",
                ))
            }
            Ok(Ok(s)) => s,
        };
        // The socket was checked by path; make sure the peer behind it is ours too.
        let uid = rustix::process::geteuid().as_raw();
        if !skip_checks && stream.peer_cred().map(|c| c.uid()).ok() != Some(uid) {
            return Err(LinkError::from_code(DaemonCode::AdapterEndpointInsecure.as_str()));
        }
        let (bound_tx, bound_rx) = oneshot::channel();
        let shared = Arc::new(Mutex::new(Shared {
            rt: AdapterRuntime::new_with(descriptor, Instant::now(), Box::new(OsRng), faults),
            waiters: HashMap::new(),
            bound: Some(bound_tx),
        }));
        let wake = Arc::new(Notify::new());
        let (done_tx, done) = watch::channel(false);
        let (rd, wr) = stream.into_split();
        let grace = timeout.min(REVOKE_GRACE);
        let keep_open = faults.has(DaemonFault::RevokeKeepsConnection);
        let restart_grace = faults.has(DaemonFault::RevokeGraceRestarts);
        tokio::spawn(drive(shared.clone(), wake.clone(), rd, wr, done_tx, Closing { grace, keep_open, restart_grace }));
        // From here on, dropping the link (an abandoned open included) revokes.
        let keep_on_drop = faults.has(DaemonFault::DroppedLinkNotRevoked);
        let link = AdapterLink { inner: Arc::new(Inner { shared, wake, done, grace, keep_on_drop }) };
        match bound_rx.await {
            Ok(Ok(())) => Ok(link),
            Ok(Err(code)) => Err(LinkError::from_code(code)),
            Err(_) => Err(LinkError::from_code(DaemonCode::AdapterConnectionFailed.as_str())),
        }
    }

    /// Invoke `op` for the tool call `tool_call_id` (its idempotency key derives from it, so a
    /// retry of the same tool call keeps the key). Refusals (capacity, validation, a failed or
    /// revoked connection) come back at once, before any wire write. Dropping the future
    /// cancels the call (an invoke already sent is aborted).
    pub async fn call(&self, op: ToolOperation, payload: Value, tool_call_id: &str) -> Result<Value, CallError> {
        self.start(op, payload, tool_call_id)?.outcome().await
    }

    /// Admit a call now, without waiting for it (SPEC §4.4): it is sent at once when a
    /// concurrency slot is free, or queued. A refusal — `adapter_queue_capacity` when
    /// `maxConcurrentRequests` calls are active and `maxQueuedRequests` wait, a validation
    /// refusal, a failed or revoked connection — is returned here, before any wire write.
    /// Await the outcome with [`PendingCall::outcome`]; dropping the [`PendingCall`] cancels
    /// the call (an invoke already sent is aborted).
    pub fn start(&self, op: ToolOperation, payload: Value, tool_call_id: &str) -> Result<PendingCall, CallError> {
        let (tx, rx) = oneshot::channel();
        let id = {
            let mut s = lock(&self.inner.shared);
            let id = s.rt.begin_call(Instant::now(), op, payload, tool_call_id)?;
            s.waiters.insert(id, tx);
            id
        };
        self.inner.wake.notify_one();
        Ok(PendingCall { inner: self.inner.clone(), id: Some(id), rx })
    }

    /// Revoke the binding: send `revoke`, close, and wait briefly for the adapter's answer.
    /// Pending calls fail with `adapter_revoked`; later calls are refused.
    pub async fn revoke(&self) {
        {
            let mut s = lock(&self.inner.shared);
            s.rt.revoke(Instant::now());
            deliver(&mut s);
        }
        self.inner.wake.notify_one();
        let mut done = self.inner.done.clone();
        let _ = tokio::time::timeout(self.inner.grace + Duration::from_millis(100), done.wait_for(|d| *d)).await;
    }

    /// Content-free telemetry of this connection (see [`AdapterRuntime::telemetry`]).
    pub fn telemetry(&self) -> Value {
        lock(&self.inner.shared).rt.telemetry()
    }

    /// The connection failure code, once the connection failed.
    pub fn failed(&self) -> Option<String> {
        lock(&self.inner.shared).rt.failure().map(str::to_string)
    }

    /// Whether the binding was revoked by this daemon.
    pub fn is_revoked(&self) -> bool {
        lock(&self.inner.shared).rt.state() == State::Revoked
    }
}

/// A call admitted by [`AdapterLink::start`] and not yet awaited. Dropping it cancels the
/// call: a queued call is dropped, a sent one is aborted and tombstoned.
pub struct PendingCall {
    inner: Arc<Inner>,
    id: Option<CallId>,
    rx: oneshot::Receiver<Result<Value, CallError>>,
}

impl std::fmt::Debug for PendingCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingCall").field("call", &self.id).finish_non_exhaustive()
    }
}

impl PendingCall {
    /// Wait for the call's outcome: the adapter's data, or why not.
    pub async fn outcome(mut self) -> Result<Value, CallError> {
        self.wait().await
    }

    /// [`PendingCall::outcome`] without giving the call up: a wait that is itself dropped
    /// (cancel-safe) leaves the call pending, and dropping the call then cancels it.
    pub async fn wait(&mut self) -> Result<Value, CallError> {
        let out = (&mut self.rx).await;
        self.id = None;
        out.unwrap_or_else(|_| {
            let code = lock(&self.inner.shared).rt.failure().unwrap_or(DaemonCode::AdapterConnectionFailed.as_str());
            Err(CallError {
                code: code.to_string(),
                message: super::runtime::failure_message(code).to_string(),
                retryable: false,
                indeterminate: true,
                retry_after_ms: None,
            })
        })
    }
}

#[cfg(feature = "faults")]
impl PendingCall {
    /// The call left running when its waiter goes (the daemon fault
    /// `aborted-turn-leaves-call`): no cancel, so no `abort` reaches the adapter.
    pub fn leave(mut self) {
        self.id = None;
    }
}

impl Drop for PendingCall {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            let mut s = lock(&self.inner.shared);
            s.waiters.remove(&id);
            s.rt.cancel_call(Instant::now(), id);
            deliver(&mut s);
            drop(s);
            self.inner.wake.notify_one();
        }
    }
}

/// Hand every event to its waiter.
fn deliver(s: &mut Shared) {
    while let Some(ev) = s.rt.poll_event() {
        match ev {
            Event::Bound => {
                if let Some(tx) = s.bound.take() {
                    let _ = tx.send(Ok(()));
                }
            }
            Event::Completed { call, outcome } => {
                if let Some(tx) = s.waiters.remove(&call) {
                    let _ = tx.send(outcome);
                }
            }
            Event::Failed(code) => {
                tracing::info!(code, "adapter connection failed");
                if let Some(tx) = s.bound.take() {
                    let _ = tx.send(Err(code));
                }
            }
        }
    }
    if s.rt.state() == State::Revoked {
        if let Some(tx) = s.bound.take() {
            let _ = tx.send(Err(DaemonCode::AdapterRevoked.as_str()));
        }
    }
}

async fn writer(mut wr: OwnedWriteHalf, mut rx: mpsc::UnboundedReceiver<OutLine>, failed: oneshot::Sender<()>) {
    while let Some(line) = rx.recv().await {
        if wr.write_all(line.as_bytes()).await.is_err() {
            let _ = failed.send(());
            return;
        }
    }
    // The driver dropped the sender after a revoke: everything is flushed.
    let _ = wr.shutdown().await;
}

async fn drive(
    shared: Arc<Mutex<Shared>>,
    wake: Arc<Notify>,
    mut rd: OwnedReadHalf,
    wr: OwnedWriteHalf,
    done: watch::Sender<bool>,
    closing_policy: Closing,
) {
    let Closing { grace, keep_open, restart_grace } = closing_policy;
    let (out_tx, out_rx) = mpsc::unbounded_channel::<OutLine>();
    let (werr_tx, mut werr_rx) = oneshot::channel();
    let writer_task = tokio::spawn(writer(wr, out_rx, werr_tx));
    let mut out_tx = Some(out_tx);
    let mut closing: Option<tokio::time::Instant> = None;
    let mut writer_done = false;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let (deadline, state) = {
            let mut s = lock(&shared);
            while let Some(line) = s.rt.poll_transmit() {
                if let Some(tx) = &out_tx {
                    let _ = tx.send(line);
                }
            }
            deliver(&mut s);
            (s.rt.poll_timeout(), s.rt.state())
        };
        match state {
            // Destroy the socket at once: nothing more is written or read.
            State::Failed(_) => {
                writer_task.abort();
                break;
            }
            State::Revoked if closing.is_none() && keep_open => {
                // Fault `revoke-keeps-connection`: `revoke` is flushed, the connection is left
                // open until the adapter ends it.
                closing = Some(tokio::time::Instant::now() + Duration::from_secs(3600));
            }
            // Fault `revoke-grace-restarts`: the grace starts again at every wake-up (each read).
            State::Revoked if closing.is_none() || restart_grace => {
                // Dropping the sender lets the writer flush `revoke` and shut down its half;
                // then wait briefly for the adapter's `revoked` and EOF.
                out_tx = None;
                closing = Some(tokio::time::Instant::now() + grace);
            }
            _ => {}
        }
        let timer = deadline.map(tokio::time::Instant::from_std);
        tokio::select! {
            r = rd.read(&mut buf) => {
                let now = Instant::now();
                let mut s = lock(&shared);
                match r {
                    Ok(0) if closing.is_some() => break,
                    Ok(0) => s.rt.handle_eof(now),
                    Ok(n) => s.rt.handle_input(now, &buf[..n]),
                    Err(_) if closing.is_some() => break,
                    Err(_) => s.rt.handle_io_error(now),
                }
            }
            _ = wake.notified() => {}
            _ = sleep_until(timer), if timer.is_some() => lock(&shared).rt.handle_timeout(Instant::now()),
            r = &mut werr_rx, if !writer_done => {
                writer_done = true;
                // `Ok` is a write error; `Err` means the writer flushed and shut down (revoke).
                if r.is_ok() {
                    if closing.is_some() {
                        break;
                    }
                    lock(&shared).rt.handle_io_error(Instant::now());
                }
            }
            _ = sleep_until(closing), if closing.is_some() => break,
        }
    }
    {
        let mut s = lock(&shared);
        deliver(&mut s);
    }
    drop(out_tx);
    let _ = tokio::time::timeout(grace, writer_task).await;
    let _ = done.send(true);
}

/// How a revoked connection ends: after `grace` at the latest (the adapter's `revoked` and
/// EOF are awaited that long); `keep_open` only under the fault `revoke-keeps-connection`,
/// `restart_grace` only under `revoke-grace-restarts`.
struct Closing {
    grace: Duration,
    keep_open: bool,
    restart_grace: bool,
}

async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
