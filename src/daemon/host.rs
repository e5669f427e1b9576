//! The reference daemon's host: the async shell of [`HostCore`] (`daemon::core`, the session
//! table and its rules) — dispatch of the eleven operations, adapter binding, the scripted
//! agent, durable wakes on the store's writer, event delivery to attached connections (SPEC
//! §2, §3.4, §6). The socket shell is `daemon::server`, the envelope rules `daemon::conn`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::{mpsc, watch};

use super::core::{check_absolute_paths, CloseWrite, HostCore, LinkState, OpenPlan, TurnAbort};
pub use super::core::{
    DErr, MAX_CONNECTIONS, MAX_EVENT_BYTES, MAX_IN_FLIGHT, MAX_LINE_BYTES, MAX_OUTBOUND_BYTES, MAX_RESPONSE_BYTES,
};
use super::faults::{DaemonFault, DaemonFaults};
use super::journal::{self, WakeFingerprint, WakeStep};
use super::link::{AdapterLink, PendingCall};
use super::record::data;
use super::store::{Pending, Store, StoreError, WakeRecord};
use super::turn::{call_error, Turn};
use crate::contract::command::Command;
use crate::contract::types::protocol_v2::{self, EnvGeneration, OpenCommand, OpenPayload, WakeCommand};
use crate::contract::{Code, DaemonCode};

/// A record for one connection's writer.
#[derive(Debug)]
pub struct Out {
    /// The line (LF included).
    pub line: Vec<u8>,
    /// Close the connection after writing it.
    pub close: bool,
}

/// A connection as the host sees it (for event delivery and the connection cap).
pub struct ConnEntry {
    tx: mpsc::UnboundedSender<Out>,
    activity: Arc<ConnActivity>,
}

/// The bit of [`ConnActivity`]'s state word that marks a reclaimed connection.
const RECLAIMED: usize = 1 << (usize::BITS - 1);

/// An outbound queue that has made no progress this long is not being drained: its
/// connection is shed first at the connection cap (SPEC PC-1.1, DECISION on idle connections).
pub const STALLED_AFTER: Duration = Duration::from_secs(1);

/// What the connection cap needs to know about one connection (SPEC PC-1.1, DECISION on idle
/// connections): when it last sent a byte, how many of its requests are unanswered, whether
/// its outbound queue is being drained, and whether it has been reclaimed.
///
/// The in-flight count and the reclaimed mark share one atomic word, so "reclaim it only if
/// nothing is in flight" and "admit a request only if it is not reclaimed" are each a single
/// atomic step: a request is never admitted on a connection that is being closed, and a
/// connection with a request in flight is never reclaimed.
#[derive(Debug)]
pub struct ConnActivity {
    epoch: Instant,
    last_read_ms: AtomicU64,
    state: AtomicUsize,
    reclaimed: tokio::sync::Notify,
    /// Outbound bytes queued or being written (the writer subtracts a line once written).
    queued: AtomicUsize,
    /// When the outbound queue last made progress: a line written, or the first line queued
    /// on an empty queue.
    progress_ms: AtomicU64,
    /// Under [`DaemonFault::UnboundedOutbound`]: the queue has no bound.
    unbounded: bool,
}

impl ConnActivity {
    /// A connection's record; `epoch` is the host's start, shared by every connection so
    /// their silences compare.
    pub fn new(epoch: Instant) -> Self {
        let now = u64::try_from(epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        ConnActivity {
            epoch,
            last_read_ms: AtomicU64::new(now),
            state: AtomicUsize::new(0),
            reclaimed: tokio::sync::Notify::new(),
            queued: AtomicUsize::new(0),
            progress_ms: AtomicU64::new(now),
            unbounded: false,
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Record that bytes arrived now.
    pub fn touch(&self) {
        self.last_read_ms.store(self.now_ms(), Ordering::Relaxed);
    }

    /// Queue `n` outbound bytes; false past [`MAX_OUTBOUND_BYTES`] (the reader is too slow).
    fn queue(&self, n: usize) -> bool {
        let before = self.queued.fetch_add(n, Ordering::SeqCst);
        if before == 0 {
            self.progress_ms.store(self.now_ms(), Ordering::Relaxed);
        }
        before + n <= MAX_OUTBOUND_BYTES || self.unbounded
    }

    /// The writer wrote `n` queued bytes to the socket.
    pub fn written(&self, n: usize) {
        self.queued.fetch_sub(n, Ordering::SeqCst);
        self.progress_ms.store(self.now_ms(), Ordering::Relaxed);
    }

    /// Whether its outbound queue holds bytes and has made no progress for
    /// [`STALLED_AFTER`] (its peer is not reading).
    fn stalled(&self, now_ms: u64) -> bool {
        self.queued.load(Ordering::SeqCst) > 0
            && now_ms.saturating_sub(self.progress_ms.load(Ordering::Relaxed)) >= STALLED_AFTER.as_millis() as u64
    }

    /// Count one more request in flight; false when the connection was reclaimed (the caller
    /// closes it without dispatching).
    pub fn admit(&self) -> bool {
        self.state.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |s| (s & RECLAIMED == 0).then_some(s + 1)).is_ok()
    }

    /// One admitted request was answered.
    pub fn done(&self) {
        self.state.fetch_sub(1, Ordering::SeqCst);
    }

    /// Wait until the connection is reclaimed.
    pub async fn wait_reclaimed(&self) {
        self.reclaimed.notified().await;
    }

    /// Whether the connection was reclaimed.
    pub fn is_reclaimed(&self) -> bool {
        self.state.load(Ordering::SeqCst) & RECLAIMED != 0
    }

    /// Mark it reclaimed if nothing is in flight.
    fn try_reclaim(&self) -> bool {
        let ok = self.state.compare_exchange(0, RECLAIMED, Ordering::SeqCst, Ordering::SeqCst).is_ok();
        if ok {
            self.reclaimed.notify_one();
        }
        ok
    }
}

type WakeOutcome = Option<Result<protocol_v2::TurnResult, DErr>>;

/// The host.
pub struct Host {
    /// This incarnation's id.
    pub id: String,
    /// The connections' shared epoch (their silences compare).
    started: Instant,
    store: Store,
    /// The session table and its rules, under one lock.
    core: Mutex<HostCore<AdapterLink>>,
    conns: Mutex<HashMap<u64, ConnEntry>>,
    next_conn: AtomicU64,
    /// Turns running; `drain` waits on it for zero (a notification, never a poll).
    active_turns: watch::Sender<usize>,
    wakes_running: Mutex<HashMap<(String, u64, String), watch::Receiver<WakeOutcome>>>,
    /// Notified whenever a session's turn ends (the wakes queued behind it try their turn).
    turn_ended: tokio::sync::Notify,
    /// The wake keys this process journaled; kept only under
    /// [`DaemonFault::WakeJournalForgottenOnRestart`], which sees no other.
    journaled_here: Mutex<std::collections::HashSet<(String, u64, String)>>,
    /// Rules broken on purpose (test aid; production: none).
    pub faults: DaemonFaults,
    /// Links kept alive unrevoked under the no-revoke faults.
    leaked: Mutex<Vec<AdapterLink>>,
    /// Every handle a session holds, as the writers scan for them: republished under the
    /// core's lock whenever a binding is added (so no writer ever scans without a live
    /// handle) or removed, and read without the core's lock.
    handles: Mutex<Arc<Vec<crate::contract::CapabilityHandle>>>,
}

impl LinkState for AdapterLink {
    fn telemetry(&self) -> Value {
        AdapterLink::telemetry(self)
    }
    fn is_failed(&self) -> bool {
        self.failed().is_some()
    }
}

impl Host {
    /// Start a host over a state directory: load the catalog and apply restart recovery
    /// (SPEC §6, [`HostCore::recover`]): host-adapter sessions are quarantined, queued wakes
    /// fail terminally, accepted wakes become indeterminate.
    pub async fn start(store: Store, id: Option<String>) -> Result<Arc<Host>, super::store::StoreError> {
        Self::start_with(store, id, DaemonFaults::NONE, super::core::MAX_SESSIONS).await
    }

    /// [`Host::start`] with fault switches (the host is broken on purpose: test aid for the
    /// daemon kill matrix; see [`crate::daemon::faults`]) and the most sessions it keeps.
    ///
    /// Recovery rewrites no session record, and the wake records it settles are queued on the
    /// store's writer together and awaited together (group commits), so the time to restart
    /// is the time to read the state (SPEC PC-2.5, DECISION on the session cap).
    pub async fn start_with(
        store: Store,
        id: Option<String>,
        faults: DaemonFaults,
        max_sessions: usize,
    ) -> Result<Arc<Host>, super::store::StoreError> {
        let id = id.unwrap_or_else(|| format!("host-{}", uuid::Uuid::new_v4().simple()));
        let loaded = store.load()?;
        let unix_secs =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        let started = Instant::now();
        let mut recovered = HostCore::recover(id.clone(), loaded, faults, started, unix_secs);
        recovered.core.set_max_sessions(max_sessions);
        let (held, max) = recovered.core.session_count();
        if held > max {
            tracing::warn!(
                sessions = held,
                max_sessions = max,
                "the state holds more sessions than the cap: new sessions are refused until some are closed"
            );
        }
        // In order (the writer applies writes in queue order).
        let pending: Vec<Pending> = recovered.wakes.iter().map(|w| store.queue_wake(w)).collect();
        for p in pending {
            p.durable().await?;
        }
        Ok(Arc::new(Host {
            id,
            started,
            store,
            core: Mutex::new(recovered.core),
            conns: Mutex::new(HashMap::new()),
            next_conn: AtomicU64::new(1),
            active_turns: watch::Sender::new(0),
            wakes_running: Mutex::new(HashMap::new()),
            turn_ended: tokio::sync::Notify::new(),
            journaled_here: Mutex::new(std::collections::HashSet::new()),
            faults,
            leaked: Mutex::new(Vec::new()),
            handles: Mutex::new(Arc::new(Vec::new())),
        }))
    }

    /// The core, locked (a poisoned lock is recovered: every core method leaves the table
    /// consistent before it can panic).
    fn core(&self) -> MutexGuard<'_, HostCore<AdapterLink>> {
        self.core.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn count(&self, k: &'static str) {
        self.core().count(k);
    }

    /// Register a connection. At the cap, the oldest idle holder is shed to make room (closed
    /// without a line): among the connections with nothing in flight — attached or not — those
    /// whose outbound queue is stalled first, then the one that sent its last byte longest
    /// ago. `None` only when every connection has a request in flight (SPEC PC-1.1, DECISION
    /// on idle connections).
    pub fn add_conn(&self, tx: mpsc::UnboundedSender<Out>, activity: Arc<ConnActivity>) -> Option<u64> {
        // Lock order: the connections, then the core (never the other way round).
        let mut c = self.conns.lock().ok()?;
        let mut core = self.core();
        if c.len() >= MAX_CONNECTIONS && !self.faults.has(DaemonFault::NoConnectionCap) {
            let now = activity.now_ms();
            let mut idle: Vec<(bool, u64, u64)> = c
                .iter()
                .filter(|(_, e)| e.activity.state.load(Ordering::SeqCst) == 0)
                .map(|(id, e)| (!e.activity.stalled(now), e.activity.last_read_ms.load(Ordering::Relaxed), *id))
                .collect();
            // Stalled first, then silent longest.
            idle.sort_unstable();
            let victim = idle.into_iter().map(|(.., id)| id).find(|id| c[id].activity.try_reclaim())?;
            let attached = core.is_attached(victim);
            c.remove(&victim);
            core.close_conn(victim);
            core.count("idleConnectionsReclaimed");
            tracing::info!(
                connection = victim,
                attached,
                "connection cap reached: reclaimed the longest idle connection"
            );
        }
        let id = self.next_conn.fetch_add(1, Ordering::Relaxed);
        c.insert(id, ConnEntry { tx, activity });
        core.open_conn(id);
        Some(id)
    }

    /// A new connection's activity record.
    pub fn new_activity(&self) -> Arc<ConnActivity> {
        let mut a = ConnActivity::new(self.started);
        a.unbounded = self.faults.has(DaemonFault::UnboundedOutbound);
        Arc::new(a)
    }

    /// Forget a connection.
    pub fn remove_conn(&self, id: u64) {
        if let Ok(mut c) = self.conns.lock() {
            c.remove(&id);
        }
        self.core().close_conn(id);
    }

    /// Every capability handle the host holds (for the outgoing scan): a shared snapshot,
    /// taken without the core's lock.
    pub fn live_handles(&self) -> Arc<Vec<crate::contract::CapabilityHandle>> {
        self.handles.lock().map(|h| h.clone()).unwrap_or_else(|p| p.into_inner().clone())
    }

    /// Publish the handles of `core` (call it holding the core's lock, after any change of a
    /// session's binding).
    fn publish_handles(&self, core: &HostCore<AdapterLink>) {
        let now = Arc::new(core.handles());
        match self.handles.lock() {
            Ok(mut h) => *h = now,
            Err(p) => *p.into_inner() = now,
        }
    }

    /// Queue a line for a connection with the outbound byte bound; false when the reader is
    /// too slow (the caller closes the connection).
    pub fn push(tx: &mpsc::UnboundedSender<Out>, activity: &ConnActivity, out: Out) -> bool {
        if !activity.queue(out.line.len()) {
            return false;
        }
        tx.send(out).is_ok()
    }

    /// Deliver the next event of a session generation to the connections attached to it.
    fn emit(&self, sid: &str, generation: u64, event: &str, request_id: Option<&str>, data: Value) {
        let Some((line, mut to)) = self.core().deliver(sid, generation, event, request_id, data) else { return };
        if let Ok(c) = self.conns.lock() {
            if self.faults.has(DaemonFault::EventsToAll) {
                to = c.keys().copied().collect();
            }
            for e in to.iter().filter_map(|id| c.get(id)) {
                let _ = Host::push(&e.tx, &e.activity, Out { line: line.clone(), close: false });
            }
        }
    }

    /// The host snapshot (handshake and host status; SPEC §2.4).
    pub fn snapshot(&self) -> Value {
        let turns = *self.active_turns.borrow();
        self.core().snapshot(Instant::now(), turns)
    }

    fn handshake(&self, v2: bool) -> Value {
        let turns = *self.active_turns.borrow();
        self.core().handshake(v2, Instant::now(), turns)
    }

    /// Keep `link` alive without revoking it (the no-revoke faults).
    fn leak(&self, link: AdapterLink) {
        if let Ok(mut l) = self.leaked.lock() {
            l.push(link);
        }
    }

    /// Answer one accepted command for connection `conn` at once when it needs no I/O and
    /// never waits (`handshake`, `status`, `steer`, `followUp`, `abort`, `attach`, `detach`):
    /// the connection's task answers it inline, with no task spawned and no channel hop, so a
    /// `status` is not queued behind the turns that saturate the runtime. `None` for the
    /// others ([`Host::dispatch`] runs them).
    pub fn dispatch_now(&self, conn: u64, cmd: &Command) -> Option<Result<Value, DErr>> {
        use protocol_v2::Command as C;
        let r = match &cmd.body {
            C::HandshakeCommand(_) => Ok(self.handshake(cmd.version.major == 2)),
            C::SteerCommand(c) => self.queue_message(&c.session_id, &c.generation),
            C::FollowUpCommand(c) => self.queue_message(&c.session_id, &c.generation),
            C::StatusCommand(c) => self.status(c.session_id.as_deref().map(String::as_str)),
            C::AbortCommand(c) => self.core().abort(&c.session_id, generation(&c.generation)),
            C::AttachCommand(c) => self.attach(conn, &c.session_id, generation(&c.generation), true),
            C::DetachCommand(c) => self.attach(conn, &c.session_id, generation(&c.generation), false),
            C::OpenCommand(_) | C::WakeCommand(_) | C::CloseCommand(_) | C::DrainCommand(_) => return None,
        };
        self.count("commands");
        Some(r)
    }

    /// Dispatch one accepted command for connection `conn`.
    pub async fn dispatch(self: &Arc<Self>, conn: u64, cmd: Command) -> Result<Value, DErr> {
        use protocol_v2::Command as C;
        if let Some(r) = self.dispatch_now(conn, &cmd) {
            return r;
        }
        self.count("commands");
        match &cmd.body {
            C::OpenCommand(open) => self.open(&cmd, open).await,
            C::WakeCommand(wake) => self.wake(wake).await,
            C::CloseCommand(c) => {
                let retain = c.payload.retain_session.unwrap_or(true);
                self.close(&c.session_id, generation(&c.generation), retain, &c.request_id).await
            }
            C::DrainCommand(c) => self.drain(c.payload.timeout_ms).await,
            // Answered by `dispatch_now`.
            _ => Err(DErr::of(DaemonCode::InternalError, "not dispatched")),
        }
    }

    fn live(&self, sid: &str, generation: u64) -> Result<(String, u64), DErr> {
        self.core().live(sid, generation)
    }

    async fn open(self: &Arc<Self>, cmd: &Command, open: &OpenCommand) -> Result<Value, DErr> {
        let sid = open.session_id.to_string();
        let generation = generation(&open.generation);
        let p = &open.payload;
        if self.core().draining && !self.faults.has(DaemonFault::DrainAdmitsOpens) {
            return Err(self.draining_refusal());
        }
        check_absolute_paths(p, cmd.version.major)?;
        // v1 ignores sessionDir (its form was checked by the command rules; SPEC §3.1).
        if cmd.version.major == 2 {
            check_session_dir(p)?;
        }
        // The new session's record: queued before binding (under the core's lock, so records
        // are written in the order of the changes), durable before the answer.
        let plan = {
            let mut core = self.core();
            match core.admit_open(&cmd.version.text, open, cmd.descriptor.as_ref())? {
                OpenPlan::Done(answer) => return Ok(answer),
                OpenPlan::Reactivated { record, answer } => Err((record.map(|r| self.store.queue_session(&r)), answer)),
                OpenPlan::Bind { old_link, rebind_existing, record } => {
                    Ok((old_link, rebind_existing, record.map(|r| self.store.queue_session(&r))))
                }
            }
        };
        let (old_link, rebind_existing, record) = match plan {
            Ok(bind) => bind,
            Err((pending, answer)) => {
                durable(pending)
                    .await
                    .map_err(|_| DErr::of(DaemonCode::InternalError, "cannot persist the session"))?;
                return Ok(answer);
            }
        };
        if let Some(l) = old_link {
            if self.faults.has(DaemonFault::NoRevokeOnReplacement) {
                self.leak(l);
            } else {
                l.revoke().await;
            }
        }
        let mut rebound_record = None;
        if let Some(d) = &cmd.descriptor {
            match AdapterLink::open_with(d, self.faults).await {
                Ok(link) => {
                    let bound = {
                        let mut core = self.core();
                        match core.bound(&sid, generation, link, d.handle().clone(), &cmd.version.text) {
                            Ok((replaced, record)) => {
                                self.publish_handles(&core);
                                rebound_record = record.map(|r| self.store.queue_session(&r));
                                Ok(replaced)
                            }
                            Err(link) => Err(link),
                        }
                    };
                    match bound {
                        Ok(Some(old)) if self.faults.has(DaemonFault::NoRevokeOnReplacement) => self.leak(old),
                        Ok(_) => {}
                        Err(orphan) => {
                            orphan.revoke().await;
                            return Err(DErr::of(DaemonCode::OpenFailed, "the session was replaced while binding"));
                        }
                    }
                }
                Err(e) => {
                    self.count("bindFailures");
                    tracing::info!(session = %sid, generation, cause = e.code, "adapter bind failed");
                    if self.faults.has(DaemonFault::GenericOpenFailedCause) {
                        return Err(DErr::of(DaemonCode::OpenFailed, "the tool adapter binding failed"));
                    }
                    let message = if self.faults.has(DaemonFault::EndpointInFailureCause) {
                        format!("the tool adapter binding failed: {}", d.endpoint_path())
                    } else {
                        "the tool adapter binding failed".into()
                    };
                    let cause = protocol_v2::OpenFailureCause {
                        code: Some(e.code.to_string()),
                        message,
                        name: "AdapterError".into(),
                    };
                    return Err(DErr::of(DaemonCode::OpenFailed, "the tool adapter binding failed")
                        .with_details(&protocol_v2::OpenFailedDetails { cause }));
                }
            }
        }
        if let Err(e) = durable(record).await.and(durable(rebound_record).await) {
            tracing::error!(session = %sid, generation, error = %e, "cannot persist the session");
            // Never answered, never kept: forget it and revoke its binding.
            let link = {
                let mut core = self.core();
                let link = core.forget(&sid, generation);
                self.publish_handles(&core);
                link
            };
            if let Some(l) = link {
                l.revoke().await;
            }
            return Err(DErr::of(DaemonCode::InternalError, "cannot persist the session"));
        }
        if rebind_existing {
            return Ok(data(&protocol_v2::OpenData { created: false, session: self.core().resource(&sid) }));
        }
        self.emit(
            &sid,
            generation,
            "opened",
            Some(&open.request_id),
            data(&protocol_v2::OpenedEventData { created: true }),
        );
        let session = if self.faults.has(DaemonFault::OpenSessionNull) { None } else { self.core().resource(&sid) };
        Ok(data(&protocol_v2::OpenData { created: true, session }))
    }

    /// One more wake key journaled for `sid`: raise its record's high-water mark.
    async fn count_wake(&self, sid: &str) -> Result<(), DErr> {
        let pending = {
            let mut core = self.core();
            core.count_wake(sid)?.map(|r| self.store.queue_session(&r))
        };
        durable(pending).await.map_err(|_| DErr::of(DaemonCode::InternalError, "cannot journal the wake"))
    }

    async fn wake(self: &Arc<Self>, cmd: &WakeCommand) -> Result<Value, DErr> {
        if self.core().draining && !self.faults.has(DaemonFault::DrainAdmitsWakes) {
            return Err(self.draining_refusal());
        }
        let (sid, generation) = self.live(&cmd.session_id, generation(&cmd.generation))?;
        let key = cmd.idempotency_key.to_string();
        let payload = &cmd.payload;
        let fp = WakeFingerprint::of(&payload.prompt, payload.source.as_deref().map(String::as_str));
        let wait = payload.wait_for_terminal.unwrap_or(true);
        let rkey = (sid.clone(), generation, key.clone());
        let running = self.wakes_running.lock().ok().and_then(|w| w.get(&rkey).cloned());
        // A running key's record is read only to compare payloads; an unreadable journal fails
        // a new or settled key.
        let record = match self.store.wake(&sid, generation, &key) {
            Ok(r) => r,
            Err(_) if running.is_some() => None,
            Err(_) => return Err(DErr::of(DaemonCode::InternalError, "journal unreadable")),
        };
        let record = record.filter(|_| {
            !self.faults.has(DaemonFault::WakeJournalForgottenOnRestart)
                || self.journaled_here.lock().is_ok_and(|j| j.contains(&rkey))
        });
        let mut step = journal::admit_wake(&fp, record.as_ref(), running.is_some());
        let mut key = key;
        let rerun = match &step {
            WakeStep::Replay(_) => self.faults.has(DaemonFault::WakeKeyReruns),
            WakeStep::Conflict(_) => self.faults.has(DaemonFault::WakeConflictIgnored),
            WakeStep::Join => self.faults.has(DaemonFault::WakeJoinMissing),
            WakeStep::Start => false,
        };
        if rerun {
            // The faulty daemon runs the wake again, journaled under a key of its own.
            key = format!("{key}~rerun-{}", uuid::Uuid::new_v4().simple());
            step = WakeStep::Start;
        }
        match (step, running) {
            (WakeStep::Conflict(e), _) => return Err(e),
            (WakeStep::Replay(outcome), _) => return self.wake_reply(&sid, outcome),
            (WakeStep::Join, Some(mut rx)) => {
                if !wait {
                    return Ok(journal::ticket(&sid, generation, &key));
                }
                let _ = rx.wait_for(Option::is_some).await;
                let outcome = rx.borrow().clone().unwrap_or(Err(DErr::of(DaemonCode::InternalError, "lost")));
                return self.wake_reply(&sid, outcome);
            }
            (WakeStep::Join, None) | (WakeStep::Start, _) => {}
        }
        // A wake that finds its session's turn running waits behind it, journaled `queued`
        // (SPEC PC-2.5); one still queued at a restart fails terminally (PC-6).
        // (The core's guard is dropped before the match: an arm takes the lock again.)
        let begun = self.core().begin_turn(&sid);
        let abort = match begun {
            Ok(a) => Some(a),
            Err(e) if e.code == DaemonCode::SessionBusy.as_str() => {
                if !self.core().queue_wake(&sid) {
                    return Err(e);
                }
                None
            }
            Err(e) => return Err(e),
        };
        let queued = abort.is_none();
        let undo = |host: &Host| {
            if queued {
                host.core().unqueue_wake(&sid);
            } else {
                host.end_turn(&sid);
            }
        };
        if self.faults.has(DaemonFault::WakeJournalForgottenOnRestart) {
            if let Ok(mut j) = self.journaled_here.lock() {
                j.insert(rkey.clone());
            }
        }
        let mut rec = journal::queued(&sid, generation, &key, &fp);
        if let Err(e) = self.journal_wake(&rec).await {
            undo(self);
            return Err(e);
        }
        // Raise the session's high-water mark after its journal record exists (a crash between
        // the two leaves more records than counted, which is consistent).
        if let Err(e) = self.count_wake(&sid).await {
            undo(self);
            return Err(e);
        }
        if !queued {
            journal::accept(&mut rec);
            if let Err(e) = self.journal_wake(&rec).await {
                self.end_turn(&sid);
                return Err(e);
            }
        }
        let (tx, rx) = watch::channel(None);
        if let Ok(mut w) = self.wakes_running.lock() {
            w.insert(rkey.clone(), rx.clone());
        }
        let host = self.clone();
        let prompt = payload.prompt.to_string();
        let request_id = cmd.request_id.to_string();
        let (tsid, tkey) = (sid.clone(), key.clone());
        let task = tokio::spawn(async move {
            let begun = match abort {
                Some(a) => Ok(a),
                None => {
                    let begun = host.wait_for_turn(&tsid, generation).await;
                    host.core().unqueue_wake(&tsid);
                    match begun {
                        Ok(a) => {
                            journal::accept(&mut rec);
                            match host.journal_wake(&rec).await {
                                Ok(()) => Ok(a),
                                Err(e) => {
                                    host.end_turn(&tsid);
                                    Err(e)
                                }
                            }
                        }
                        Err(e) => Err(e),
                    }
                }
            };
            let outcome = match begun {
                Ok(abort) => {
                    host.active_turns.send_modify(|n| *n += 1);
                    let outcome = host.run_turn(&tsid, generation, &tkey, &prompt, &request_id, &abort).await;
                    host.active_turns.send_modify(|n| *n -= 1);
                    journal::settle(&mut rec, &outcome);
                    let _ = host.store.queue_wake(&rec).durable().await;
                    host.end_turn(&tsid);
                    outcome
                }
                // Never started: settled failed, no turn to end.
                Err(e) => {
                    let outcome = Err(e);
                    journal::settle(&mut rec, &outcome);
                    let _ = host.store.queue_wake(&rec).durable().await;
                    outcome
                }
            };
            if let Ok(mut w) = host.wakes_running.lock() {
                w.remove(&rkey);
            }
            let _ = tx.send(Some(outcome));
        });
        if !wait {
            drop(task);
            return Ok(journal::ticket(&sid, generation, &key));
        }
        let _ = task.await;
        let outcome = rx.borrow().clone().unwrap_or(Err(DErr::of(DaemonCode::InternalError, "lost")));
        self.wake_reply(&sid, outcome)
    }

    /// Write a wake's journal record and wait until it is durable.
    async fn journal_wake(&self, r: &WakeRecord) -> Result<(), DErr> {
        self.store
            .queue_wake(r)
            .durable()
            .await
            .map_err(|_| DErr::of(DaemonCode::InternalError, "cannot journal the wake"))
    }

    /// A queued wake waits for its session's running turn to end, then begins its own; it
    /// fails instead when its generation is no longer live (closed, replaced) or the host
    /// drains (a drain admits no new turn).
    async fn wait_for_turn(&self, sid: &str, generation: u64) -> Result<Arc<TurnAbort>, DErr> {
        loop {
            let ended = self.turn_ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            self.live(sid, generation)?;
            if self.core().draining {
                return Err(self.draining_refusal());
            }
            let begun = self.core().begin_turn(sid);
            match begun {
                Ok(a) => return Ok(a),
                Err(e) if e.code == DaemonCode::SessionBusy.as_str() => ended.await,
                Err(e) => return Err(e),
            }
        }
    }

    fn wake_reply(&self, sid: &str, outcome: Result<protocol_v2::TurnResult, DErr>) -> Result<Value, DErr> {
        let result = outcome?;
        Ok(data(&protocol_v2::WakeResultData { result, session: self.core().resource(sid) }))
    }

    fn end_turn(&self, sid: &str) {
        self.core().end_turn(sid);
        self.turn_ended.notify_waiters();
    }

    /// Run one turn of the scripted agent ([`Turn`], which decides everything): deliver its
    /// events, start each batch of calls on the session's link (admission is synchronous, see
    /// [`AdapterLink::start`]) before awaiting any of them, hand the outcomes back in order.
    async fn run_turn(
        &self,
        sid: &str,
        generation: u64,
        wake_key: &str,
        prompt: &str,
        request_id: &str,
        abort: &TurnAbort,
    ) -> Result<protocol_v2::TurnResult, DErr> {
        let link = self.core().link(sid);
        let mut turn = Turn::new(prompt, generation, wake_key, link.is_some(), self.faults);
        self.deliver_turn_events(&mut turn, sid, generation, request_id);
        while let Some(batch) = turn.poll_batch(abort.requested()) {
            self.deliver_turn_events(&mut turn, sid, generation, request_id);
            let mut started: std::collections::VecDeque<(String, Result<PendingCall, DErr>)> = batch
                .into_iter()
                .map(|call| {
                    let pending = match (call.start, link.as_ref()) {
                        (Ok((op, payload)), Some(l)) => l.start(op, payload, &call.call_id).map_err(call_error),
                        (Ok(_), None) => Err(DErr::of(DaemonCode::ToolUnavailable, "this session has no tool adapter")),
                        (Err(e), _) => Err(e),
                    };
                    (call.call_id, pending)
                })
                .collect();
            while let Some((call_id, pending)) = started.pop_front() {
                // An abort ends the wait: the call is dropped, which cancels it (an invoke
                // already sent is aborted on the wire), and the turn ends aborted.
                let outcome = match pending {
                    Ok(mut p) => {
                        let o = tokio::select! {
                            o = p.wait() => o.map_err(call_error),
                            () = abort.asked() => Err(DErr::of(DaemonCode::Aborted, "the turn was aborted")),
                        };
                        if abort.requested() && !self.faults.has(DaemonFault::AbortFreesSlotFirst) {
                            // The calls waiting behind this one are cancelled first, last
                            // first: cancelling this one frees its slot, and a call still
                            // queued then would be sent (a cancelled queued call never runs).
                            for (_, rest) in started.iter_mut().rev() {
                                let gone =
                                    std::mem::replace(rest, Err(DErr::of(DaemonCode::Aborted, "the turn was aborted")));
                                #[cfg(feature = "faults")]
                                let gone = match gone {
                                    Ok(q) if self.faults.has(DaemonFault::AbortedTurnLeavesCall) => {
                                        q.leave();
                                        Ok(())
                                    }
                                    other => other.map(drop),
                                };
                                drop(gone);
                            }
                        }
                        #[cfg(feature = "faults")]
                        if self.faults.has(DaemonFault::AbortedTurnLeavesCall) {
                            p.leave();
                        }
                        o
                    }
                    Err(e) => Err(e),
                };
                turn.handle_outcome(&call_id, outcome);
                self.deliver_turn_events(&mut turn, sid, generation, request_id);
            }
        }
        let result = turn.finish();
        self.deliver_turn_events(&mut turn, sid, generation, request_id);
        result
    }

    fn deliver_turn_events(&self, turn: &mut Turn, sid: &str, generation: u64, request_id: &str) {
        while let Some(e) = turn.poll_event() {
            self.emit(sid, generation, e.name, e.with_request.then_some(request_id), e.data);
        }
    }

    fn queue_message(&self, sid: &str, generation: &EnvGeneration) -> Result<Value, DErr> {
        self.live(sid, self::generation(generation))?;
        Ok(data(&protocol_v2::QueuedData { queued: true }))
    }

    fn status(&self, session: Option<&str>) -> Result<Value, DErr> {
        let turns = *self.active_turns.borrow();
        self.core().status(session, Instant::now(), turns)
    }

    fn attach(&self, conn: u64, sid: &str, generation: u64, on: bool) -> Result<Value, DErr> {
        self.core().attach(conn, sid, generation, on)
    }

    /// `close` (SPEC PC-2.5, DECISION on durable closes): the session's record change (its
    /// removal, or its `closed` state when retained) is durable before the answer; when it
    /// cannot be persisted the answer is `internal_error` and the session stays open, bound
    /// and live, as it was.
    async fn close(&self, sid: &str, generation: u64, retain: bool, request_id: &str) -> Result<Value, DErr> {
        let pending = {
            let mut core = self.core();
            match core.begin_close(sid, generation, retain)? {
                CloseWrite::Nothing => None,
                CloseWrite::Put(r) => Some(self.store.queue_session(&r)),
                CloseWrite::Remove => Some(self.store.queue_remove_session(sid)),
            }
        };
        if let Err(e) = durable(pending).await {
            tracing::error!(session = %sid, generation, error = %e, "cannot record the close: the session stays open");
            self.core().cancel_close(sid, generation);
            return Err(DErr::of(
                DaemonCode::InternalError,
                "the close could not be persisted; the session stays open",
            ));
        }
        self.emit(
            sid,
            generation,
            "sessionClosed",
            Some(request_id),
            data(&protocol_v2::SessionClosedEventData { retained: retain }),
        );
        let (link, busy) = {
            let mut core = self.core();
            let busy = core.sessions.get(sid).is_some_and(|x| x.generation == generation && x.turn.is_some());
            let link = core.finish_close(sid, generation, retain);
            self.publish_handles(&core);
            (link, busy)
        };
        if let Some(l) = link {
            if self.faults.has(DaemonFault::NoRevokeOnClose)
                || (busy && self.faults.has(DaemonFault::CloseLeavesCallRunning))
            {
                self.leak(l);
            } else {
                l.revoke().await;
            }
        }
        Ok(data(&protocol_v2::ClosedData { closed: true }))
    }

    /// `host_draining`, retryable (not retryable under a fault).
    fn draining_refusal(&self) -> DErr {
        let mut e = DErr::of(DaemonCode::HostDraining, "the host is draining");
        if self.faults.has(DaemonFault::DrainingNotRetryable) {
            e.retryable = false;
        }
        e
    }

    /// SPEC PC-2.5 (DECISION on drain): from now on no open or wake is admitted; running
    /// turns are waited for up to the timeout, and those still running then are aborted.
    async fn drain(&self, timeout_ms: Option<i64>) -> Result<Value, DErr> {
        let timeout = timeout_ms.and_then(|t| u64::try_from(t).ok()).unwrap_or(30_000);
        self.core().draining = true;
        let mut turns = self.active_turns.subscribe();
        let wait = if self.faults.has(DaemonFault::DrainAbortsAtOnce) { 0 } else { timeout };
        let idle = tokio::time::timeout(Duration::from_millis(wait), turns.wait_for(|n| *n == 0)).await;
        let timed_out = !matches!(idle, Ok(Ok(_)));
        let mut aborted = match timed_out {
            true if self.faults.has(DaemonFault::DrainReportsWithoutAborting) => self.core().running_turns(),
            true => self.core().abort_all_turns(),
            false => 0,
        };
        if timed_out && self.faults.has(DaemonFault::DrainMiscountsAborted) {
            aborted = 1;
        }
        Ok(data(&protocol_v2::DrainData {
            aborted_turns: aborted as u64,
            draining: true,
            timed_out,
            timeout_ms: timeout,
        }))
    }

    /// Revoke every binding (shutdown).
    pub async fn shutdown(&self) {
        let links = {
            let mut core = self.core();
            let mut links = core.take_links();
            if self.faults.has(DaemonFault::ShutdownWithoutRevoke) {
                // Never dropped, so never revoked: the connections end with the process.
                std::mem::forget(std::mem::take(&mut links));
            }
            self.publish_handles(&core);
            links
        };
        for l in links {
            l.revoke().await;
        }
    }
}

/// Wait for a queued write, if any, to be durable.
async fn durable(p: Option<Pending>) -> Result<(), StoreError> {
    match p {
        Some(p) => p.durable().await,
        None => Ok(()),
    }
}

/// A command's `generation` (checked by the contract to be 0..2^53-1).
fn generation(g: &EnvGeneration) -> u64 {
    u64::try_from(g.0).unwrap_or(0)
}

/// `session.sessionDir` must lie inside `<agentDir>/sessions` and, when it exists, be an
/// owner-controlled real directory (SPEC §3.1).
fn check_session_dir(p: &OpenPayload) -> Result<(), DErr> {
    let Some(dir) = p.session.session_dir.as_deref() else { return Ok(()) };
    let bad = || {
        DErr::contract(
            Code::InvalidField,
            "sessionDir must be an owner-controlled directory inside <agentDir>/sessions",
        )
        .with_details(&protocol_v2::FieldDetails { field: "payload.session.sessionDir".into() })
    };
    let agent = p.agent_dir.as_deref().ok_or_else(bad)?;
    let base = format!("{}/sessions/", agent.trim_end_matches('/'));
    if !dir.starts_with(&base) || dir.split('/').any(|c| c == ".." || c == ".") {
        return Err(bad());
    }
    let cwd: &str = &p.cwd;
    let inside = |a: &str, b: &str| a == b || a.starts_with(&format!("{}/", b.trim_end_matches('/')));
    if inside(dir, cwd) || inside(cwd, dir) || inside(cwd, agent) {
        return Err(bad());
    }
    if let Ok(m) = std::fs::symlink_metadata(dir) {
        use std::os::unix::fs::MetadataExt;
        if !m.file_type().is_dir() || m.uid() != rustix::process::geteuid().as_raw() {
            return Err(bad());
        }
    }
    Ok(())
}
