//! The reference daemon's host: the async shell of [`HostCore`] (`daemon::core`, the session
//! table and its rules) — dispatch of the eleven operations, adapter binding, the scripted
//! agent, durable wakes on the store's writer, event delivery to attached connections (SPEC
//! §2, §3.4, §6). The socket shell is `daemon::server`, the envelope rules `daemon::conn`.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tokio::sync::{mpsc, watch};

use super::core::{check_absolute_paths, CloseWrite, HostCore, LinkState, OpenPlan};
pub use super::core::{
    DErr, MAX_CONNECTIONS, MAX_EVENT_BYTES, MAX_IN_FLIGHT, MAX_LINE_BYTES, MAX_OUTBOUND_BYTES, MAX_RESPONSE_BYTES,
};
use super::faults::{DaemonFault, DaemonFaults};
use super::journal::WakeFingerprint;
use super::link::{AdapterLink, CallError, PendingCall};
use super::store::{Pending, Store, StoreError, WakeRecord};
use crate::contract::command::Command;
use crate::contract::types::protocol_v2::{self, EnvGeneration, OpenCommand, OpenPayload, WakeCommand};
use crate::contract::types::tool_adapter::ToolOperation;
use crate::contract::{validate_relative_path, AdapterCode, Code, DaemonCode, PathSide};

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
    queued: Arc<AtomicUsize>,
    attachments: HashSet<(String, u64)>,
    activity: Arc<ConnActivity>,
}

/// The bit of [`ConnActivity`]'s state word that marks a reclaimed connection.
const RECLAIMED: usize = 1 << (usize::BITS - 1);

/// What the connection cap needs to know about one connection (SPEC PC-1.1, DECISION on idle
/// connections): when it last sent a byte, how many of its requests are unanswered, and whether
/// it has been reclaimed.
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
}

impl ConnActivity {
    /// A connection's record; `epoch` is the host's start, shared by every connection so
    /// their silences compare.
    pub fn new(epoch: Instant) -> Self {
        ConnActivity {
            epoch,
            last_read_ms: AtomicU64::new(u64::try_from(epoch.elapsed().as_millis()).unwrap_or(u64::MAX)),
            state: AtomicUsize::new(0),
            reclaimed: tokio::sync::Notify::new(),
        }
    }

    /// Record that bytes arrived now.
    pub fn touch(&self) {
        let ms = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_read_ms.store(ms, Ordering::Relaxed);
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

type WakeOutcome = Option<Result<Value, DErr>>;

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
    /// Rules broken on purpose (test aid; production: none).
    pub faults: DaemonFaults,
    /// Links kept alive unrevoked under the no-revoke faults.
    leaked: Mutex<Vec<AdapterLink>>,
}

impl LinkState for AdapterLink {
    fn telemetry(&self) -> Value {
        AdapterLink::telemetry(self)
    }
    fn is_failed(&self) -> bool {
        self.failed().is_some()
    }
}

fn poisoned() -> DErr {
    DErr::of(DaemonCode::InternalError, "state lock poisoned")
}

impl Host {
    /// Start a host over a state directory: load the catalog and apply restart recovery
    /// (SPEC §6, [`HostCore::recover`]): host-adapter sessions are quarantined, queued wakes
    /// fail terminally, accepted wakes become indeterminate.
    pub fn start(store: Store, id: Option<String>) -> Result<Arc<Host>, super::store::StoreError> {
        Self::start_with(store, id, DaemonFaults::NONE)
    }

    /// [`Host::start`] with fault switches: the host is broken on purpose (test aid for the
    /// daemon kill matrix; see [`crate::daemon::faults`]).
    pub fn start_with(
        store: Store,
        id: Option<String>,
        faults: DaemonFaults,
    ) -> Result<Arc<Host>, super::store::StoreError> {
        let id = id.unwrap_or_else(|| format!("host-{}", uuid::Uuid::new_v4().simple()));
        let loaded = store.load()?;
        let unix_secs =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        let started = Instant::now();
        let recovered = HostCore::recover(id.clone(), loaded, faults, started, unix_secs);
        for r in &recovered.sessions {
            store.put_session(r)?;
        }
        for w in &recovered.wakes {
            store.put_wake(w)?;
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
            faults,
            leaked: Mutex::new(Vec::new()),
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

    /// Register a connection. At the cap, the idle connection (nothing in flight, nothing
    /// attached) that has been silent longest is reclaimed to make room (it is closed without a
    /// line); `None` when every connection is busy or attached (SPEC PC-1.1, DECISION on idle
    /// connections).
    pub fn add_conn(
        &self,
        tx: mpsc::UnboundedSender<Out>,
        queued: Arc<AtomicUsize>,
        activity: Arc<ConnActivity>,
    ) -> Option<u64> {
        let mut c = self.conns.lock().ok()?;
        if c.len() >= MAX_CONNECTIONS {
            let mut idle: Vec<(u64, u64)> = c
                .iter()
                .filter(|(_, e)| e.attachments.is_empty())
                .map(|(id, e)| (e.activity.last_read_ms.load(Ordering::Relaxed), *id))
                .collect();
            // Silent longest first.
            idle.sort_unstable();
            let victim = idle.into_iter().map(|(_, id)| id).find(|id| c[id].activity.try_reclaim())?;
            c.remove(&victim);
            self.count("idleConnectionsReclaimed");
            tracing::info!(connection = victim, "connection cap reached: reclaimed the longest idle connection");
        }
        let id = self.next_conn.fetch_add(1, Ordering::Relaxed);
        c.insert(id, ConnEntry { tx, queued, attachments: HashSet::new(), activity });
        Some(id)
    }

    /// A new connection's activity record.
    pub fn new_activity(&self) -> Arc<ConnActivity> {
        Arc::new(ConnActivity::new(self.started))
    }

    /// Forget a connection.
    pub fn remove_conn(&self, id: u64) {
        if let Ok(mut c) = self.conns.lock() {
            c.remove(&id);
        }
    }

    /// Every capability handle the host holds (for the outgoing scan).
    pub fn live_handles(&self) -> Vec<crate::contract::CapabilityHandle> {
        self.core().handles()
    }

    /// Queue a line for a connection with the outbound byte bound; false when the reader is
    /// too slow (the caller closes the connection).
    pub fn push(tx: &mpsc::UnboundedSender<Out>, queued: &AtomicUsize, out: Out) -> bool {
        let n = out.line.len();
        if queued.fetch_add(n, Ordering::SeqCst) + n > MAX_OUTBOUND_BYTES {
            return false;
        }
        tx.send(out).is_ok()
    }

    fn emit(&self, sid: &str, generation: u64, event: &str, request_id: Option<&str>, data: Value) {
        let Some(line) = self.core().event(sid, generation, event, request_id, data) else { return };
        if let Ok(c) = self.conns.lock() {
            for e in c.values() {
                if e.attachments.contains(&(sid.to_string(), generation)) {
                    let _ = Host::push(&e.tx, &e.queued, Out { line: line.clone(), close: false });
                }
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

    /// Dispatch one accepted command for connection `conn`.
    pub async fn dispatch(self: &Arc<Self>, conn: u64, cmd: Command) -> Result<Value, DErr> {
        use protocol_v2::Command as C;
        self.count("commands");
        match &cmd.body {
            C::HandshakeCommand(_) => Ok(self.handshake(cmd.version.major == 2)),
            C::OpenCommand(open) => self.open(&cmd, open).await,
            C::WakeCommand(wake) => self.wake(wake).await,
            C::SteerCommand(c) => self.queue_message(&c.session_id, &c.generation),
            C::FollowUpCommand(c) => self.queue_message(&c.session_id, &c.generation),
            C::StatusCommand(c) => self.status(c.session_id.as_deref().map(String::as_str)),
            C::AbortCommand(c) => self.core().abort(&c.session_id, generation(&c.generation)),
            C::AttachCommand(c) => self.attach(conn, &c.session_id, generation(&c.generation), true),
            C::DetachCommand(c) => self.attach(conn, &c.session_id, generation(&c.generation), false),
            C::CloseCommand(c) => {
                let retain = c.payload.retain_session.unwrap_or(true);
                self.close(&c.session_id, generation(&c.generation), retain, &c.request_id).await
            }
            C::DrainCommand(c) => self.drain(c.payload.timeout_ms).await,
        }
    }

    fn live(&self, sid: &str, generation: u64) -> Result<(String, u64), DErr> {
        self.core().live(sid, generation)
    }

    async fn open(self: &Arc<Self>, cmd: &Command, open: &OpenCommand) -> Result<Value, DErr> {
        let sid = open.session_id.to_string();
        let generation = generation(&open.generation);
        let p = &open.payload;
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
                        match core.bound(&sid, generation, link, d.handle.clone(), &cmd.version.text) {
                            Ok((replaced, record)) => {
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
                    return Err(DErr::of(DaemonCode::OpenFailed, "the tool adapter binding failed").detail(
                        "cause",
                        json!({"name": "AdapterError", "message": "the tool adapter binding failed", "code": e.code}),
                    ));
                }
            }
        }
        if let Err(e) = durable(record).await.and(durable(rebound_record).await) {
            tracing::error!(session = %sid, generation, error = %e, "cannot persist the session");
            // Never answered, never kept: forget it and revoke its binding.
            let link = self.core().forget(&sid, generation);
            if let Some(l) = link {
                l.revoke().await;
            }
            return Err(DErr::of(DaemonCode::InternalError, "cannot persist the session"));
        }
        if rebind_existing {
            return Ok(json!({"created": false, "session": self.core().resource(&sid)}));
        }
        self.emit(&sid, generation, "opened", Some(&open.request_id), json!({"created": true}));
        Ok(json!({"created": true, "session": self.core().resource(&sid)}))
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
        if self.core().draining {
            return Err(DErr::of(DaemonCode::HostDraining, "the host is draining"));
        }
        let (sid, generation) = self.live(&cmd.session_id, generation(&cmd.generation))?;
        let key = cmd.idempotency_key.to_string();
        let payload = &cmd.payload;
        let fp = WakeFingerprint::of(&payload.prompt, payload.source.as_deref().map(String::as_str));
        let wait = payload.wait_for_terminal.unwrap_or(true);
        let rkey = (sid.clone(), generation, key.clone());
        // A running wake with this key: join it.
        let running = self.wakes_running.lock().ok().and_then(|w| w.get(&rkey).cloned());
        if let Some(mut rx) = running {
            let rec = self.store.wake(&sid, generation, &key).ok().flatten();
            if rec.as_ref().is_some_and(|r| !fp.matches(&r.fingerprint)) {
                return Err(DErr::new(
                    AdapterCode::IdempotencyConflict.as_str(),
                    "this idempotency key was used with another payload",
                ));
            }
            if !wait {
                return Ok(
                    json!({"ticket": {"sessionId": sid, "generation": generation, "idempotencyKey": key, "state": "accepted"}}),
                );
            }
            let _ = rx.wait_for(Option::is_some).await;
            return self
                .wake_reply(&sid, rx.borrow().clone().unwrap_or(Err(DErr::of(DaemonCode::InternalError, "lost"))));
        }
        if let Some(rec) = self
            .store
            .wake(&sid, generation, &key)
            .map_err(|_| DErr::of(DaemonCode::InternalError, "journal unreadable"))?
        {
            if !fp.matches(&rec.fingerprint) {
                return Err(DErr::new(
                    AdapterCode::IdempotencyConflict.as_str(),
                    "this idempotency key was used with another payload",
                ));
            }
            return match rec.state.as_str() {
                "completed" => self.wake_reply(&sid, Ok(rec.result.unwrap_or(Value::Null))),
                "failed" => Err(body_to_err(rec.error.as_ref())),
                _ => Err(DErr::of(
                    DaemonCode::RequestIndeterminate,
                    "this wake's outcome is unknown; it is never replayed",
                )),
            };
        }
        let abort = self.core().begin_turn(&sid)?;
        let mut rec = WakeRecord {
            session_id: sid.clone(),
            generation,
            idempotency_key: key.clone(),
            fingerprint: fp.hex().to_string(),
            state: "queued".into(),
            result: None,
            error: None,
        };
        let journal = |r: &WakeRecord| {
            let pending = self.store.queue_wake(r);
            async move {
                pending.durable().await.map_err(|_| DErr::of(DaemonCode::InternalError, "cannot journal the wake"))
            }
        };
        if let Err(e) = journal(&rec).await {
            self.end_turn(&sid);
            return Err(e);
        }
        // Raise the session's high-water mark after its journal record exists (a crash between
        // the two leaves more records than counted, which is consistent).
        if let Err(e) = self.count_wake(&sid).await {
            self.end_turn(&sid);
            return Err(e);
        }
        rec.state = "accepted".into();
        if let Err(e) = journal(&rec).await {
            self.end_turn(&sid);
            return Err(e);
        }
        let (tx, rx) = watch::channel(None);
        if let Ok(mut w) = self.wakes_running.lock() {
            w.insert(rkey.clone(), rx.clone());
        }
        let host = self.clone();
        let prompt = payload.prompt.to_string();
        let request_id = cmd.request_id.to_string();
        let task = tokio::spawn(async move {
            host.active_turns.send_modify(|n| *n += 1);
            let outcome = host.run_turn(&sid, generation, &key, &prompt, &request_id, &abort).await;
            host.active_turns.send_modify(|n| *n -= 1);
            match &outcome {
                Ok(r) => {
                    rec.state = "completed".into();
                    rec.result = Some(r.clone());
                }
                Err(e) => {
                    rec.state = "failed".into();
                    rec.error = Some(e.body());
                }
            }
            let _ = host.store.queue_wake(&rec).durable().await;
            host.end_turn(&sid);
            if let Ok(mut w) = host.wakes_running.lock() {
                w.remove(&rkey);
            }
            let _ = tx.send(Some(outcome));
        });
        if !wait {
            drop(task);
            let (sid, generation, key) = (cmd.session_id.to_string(), generation, cmd.idempotency_key.to_string());
            return Ok(
                json!({"ticket": {"sessionId": sid, "generation": generation, "idempotencyKey": key, "state": "accepted"}}),
            );
        }
        let _ = task.await;
        let outcome = rx.borrow().clone().unwrap_or(Err(DErr::of(DaemonCode::InternalError, "lost")));
        self.wake_reply(&cmd.session_id, outcome)
    }

    fn wake_reply(&self, sid: &str, outcome: Result<Value, DErr>) -> Result<Value, DErr> {
        let r = outcome?;
        Ok(json!({"result": r, "session": self.core().resource(sid)}))
    }

    fn end_turn(&self, sid: &str) {
        self.core().end_turn(sid);
    }

    /// The scripted agent: `TOOL <fs_x> <json>` lines become tool calls through the adapter;
    /// other lines are echoed as assistant text.
    ///
    /// Consecutive read-only calls (`fs_list`, `fs_stat`, `fs_read`, `fs_search`) run
    /// concurrently: every call of such a run is started (admitted, in prompt order) before
    /// any is awaited, so the adapter client's limits decide what is sent, queued or refused
    /// with `adapter_queue_capacity` (SPEC §4.4). Any other line — `fs_write`, `fs_edit`, an
    /// unknown tool, text — is a barrier: it runs alone, after everything before it ended.
    /// `toolCalls` keeps prompt order.
    async fn run_turn(
        &self,
        sid: &str,
        generation: u64,
        wake_key: &str,
        prompt: &str,
        request_id: &str,
        abort: &AtomicBool,
    ) -> Result<Value, DErr> {
        self.emit(sid, generation, "promptAccepted", Some(request_id), json!({}));
        self.emit(sid, generation, "agentStart", Some(request_id), json!({}));
        let link = self.core().link(sid);
        let mut text = Vec::new();
        let mut calls = Vec::new();
        let call_prefix = &hex::encode(Sha256::digest(format!("{generation}\0{wake_key}").as_bytes()))[..16];
        let mut aborted = false;
        let lines: Vec<&str> = prompt.lines().collect();
        let mut i = 0;
        while i < lines.len() {
            if abort.load(Ordering::Relaxed) {
                aborted = true;
                break;
            }
            let Some(first) = tool_line(lines[i]) else {
                text.push(lines[i].to_string());
                i += 1;
                continue;
            };
            // This call, and when it is read-only, the read-only calls right after it.
            let mut batch = vec![(i, first)];
            if is_read_only_tool(first.0) {
                while let Some(next) = lines.get(i + batch.len()).and_then(|l| tool_line(l)) {
                    if !is_read_only_tool(next.0) {
                        break;
                    }
                    batch.push((i + batch.len(), next));
                }
            }
            i += batch.len();
            // Start them all in prompt order (admission happens here), then await each.
            let mut started = Vec::with_capacity(batch.len());
            for (n, (tool, args)) in batch {
                let call_id = format!("call-{call_prefix}-{n}");
                self.emit(
                    sid,
                    generation,
                    "toolCallStart",
                    Some(request_id),
                    json!({"toolCallId": call_id, "tool": tool}),
                );
                let pending = self.start_tool_call(link.as_ref(), tool, args, &call_id);
                started.push((call_id, tool, pending));
            }
            for (call_id, tool, pending) in started {
                let outcome = match pending {
                    Ok(p) => p.outcome().await.map_err(call_error),
                    Err(e) => Err(e),
                };
                let mut entry = json!({"toolCallId": call_id, "tool": tool, "ok": outcome.is_ok()});
                match outcome {
                    Ok(d) => entry["data"] = d,
                    Err(e) => entry["error"] = e.body(),
                }
                self.emit(
                    sid,
                    generation,
                    "toolCallEnd",
                    Some(request_id),
                    json!({"toolCallId": call_id, "tool": tool, "ok": entry["ok"], "code": entry["error"]["code"]}),
                );
                calls.push(entry);
            }
        }
        self.emit(sid, generation, "agentEnd", Some(request_id), json!({"aborted": aborted}));
        self.emit(sid, generation, "sessionIdle", None, json!({}));
        if aborted {
            return Err(DErr::of(DaemonCode::Aborted, "the turn was aborted"));
        }
        Ok(json!({"text": text.join("\n"), "toolCalls": calls}))
    }

    /// Check a tool call locally and start it on the link (admission is synchronous, see
    /// [`AdapterLink::start`]); every refusal comes back here, before any wire write.
    fn start_tool_call(
        &self,
        link: Option<&AdapterLink>,
        tool: &str,
        args: &str,
        call_id: &str,
    ) -> Result<PendingCall, DErr> {
        let op: ToolOperation = tool.replacen('_', ".", 1).parse().map_err(|_| {
            DErr::of(
                DaemonCode::UnknownTool,
                "the tool is not one of fs_list fs_stat fs_read fs_search fs_write fs_edit",
            )
        })?;
        let payload: Value = serde_json::from_str(args)
            .map_err(|_| DErr::of(DaemonCode::InvalidToolArguments, "tool arguments must be a JSON object"))?;
        if !payload.is_object() {
            return Err(DErr::of(DaemonCode::InvalidToolArguments, "tool arguments must be a JSON object"));
        }
        if let Some(p) = payload.get("path").and_then(Value::as_str) {
            let passed = self.faults.has(DaemonFault::PassNonCanonicalPaths) && super::faults::is_0_3_3_passed_path(p);
            if !passed {
                validate_relative_path(p, PathSide::Daemon, "path")
                    .map_err(|e| DErr::new(e.code.as_str(), &e.message))?;
            }
        }
        let link = link.ok_or_else(|| DErr::of(DaemonCode::ToolUnavailable, "this session has no tool adapter"))?;
        link.start(op, payload, call_id).map_err(call_error)
    }

    fn queue_message(&self, sid: &str, generation: &EnvGeneration) -> Result<Value, DErr> {
        self.live(sid, self::generation(generation))?;
        Ok(json!({"queued": true}))
    }

    fn status(&self, session: Option<&str>) -> Result<Value, DErr> {
        let turns = *self.active_turns.borrow();
        self.core().status(session, Instant::now(), turns)
    }

    fn attach(&self, conn: u64, sid: &str, generation: u64, on: bool) -> Result<Value, DErr> {
        let (sid, generation) = if on { self.live(sid, generation)? } else { (sid.to_string(), generation) };
        let seq = self.core().sequence(&sid);
        let mut c = self.conns.lock().map_err(|_| poisoned())?;
        if let Some(e) = c.get_mut(&conn) {
            if on {
                e.attachments.insert((sid, generation));
            } else {
                e.attachments.remove(&(sid, generation));
            }
        }
        let k = if on { "attached" } else { "detached" };
        Ok(json!({k: true, "generation": generation, "sequence": seq}))
    }

    async fn close(&self, sid: &str, generation: u64, retain: bool, request_id: &str) -> Result<Value, DErr> {
        let (sid, generation) = self.live(sid, generation)?;
        self.emit(&sid, generation, "sessionClosed", Some(request_id), json!({"retained": retain}));
        let (link, pending) = {
            let mut core = self.core();
            let (link, write) = core.close(&sid, retain);
            let pending = match write {
                CloseWrite::Nothing => None,
                CloseWrite::Put(r) => Some(self.store.queue_session(&r)),
                CloseWrite::Remove => Some(self.store.queue_remove_session(&sid)),
            };
            (link, pending)
        };
        if let Some(l) = link {
            if self.faults.has(DaemonFault::NoRevokeOnClose) {
                self.leak(l);
            } else {
                l.revoke().await;
            }
        }
        if let Err(e) = durable(pending).await {
            tracing::warn!(session = %sid, error = %e, "cannot record the close");
        }
        Ok(json!({"closed": true}))
    }

    async fn drain(&self, timeout_ms: Option<i64>) -> Result<Value, DErr> {
        let timeout = timeout_ms.and_then(|t| u64::try_from(t).ok()).unwrap_or(30_000);
        self.core().draining = true;
        let mut turns = self.active_turns.subscribe();
        let idle = tokio::time::timeout(Duration::from_millis(timeout), turns.wait_for(|n| *n == 0)).await;
        let timed_out = !matches!(idle, Ok(Ok(_)));
        let aborted = if timed_out { self.core().abort_all_turns() } else { 0 };
        Ok(json!({"draining": true, "timeoutMs": timeout, "timedOut": timed_out, "abortedTurns": aborted}))
    }

    /// Revoke every binding (shutdown).
    pub async fn shutdown(&self) {
        let links = self.core().take_links();
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

/// A `TOOL <tool> <args>` prompt line: the tool and its arguments (`{}` when absent).
fn tool_line(line: &str) -> Option<(&str, &str)> {
    let rest = line.strip_prefix("TOOL ")?;
    Some(rest.split_once(' ').unwrap_or((rest, "{}")))
}

/// The read-only tools, which a turn runs concurrently.
fn is_read_only_tool(tool: &str) -> bool {
    matches!(tool, "fs_list" | "fs_stat" | "fs_read" | "fs_search")
}

/// An adapter call's error as the turn reports it: code, message, `retryable`, and
/// `details.indeterminate` / `details.retryAfterMs` when they apply.
fn call_error(e: CallError) -> DErr {
    let mut d = DErr::new(&e.code, &e.message);
    d.retryable = e.retryable;
    if e.indeterminate {
        d.details.insert("indeterminate".into(), json!(true));
    }
    if let Some(ms) = e.retry_after_ms {
        d.details.insert("retryAfterMs".into(), json!(ms));
    }
    d
}

fn body_to_err(v: Option<&Value>) -> DErr {
    let v = v.cloned().unwrap_or(Value::Null);
    let mut e = DErr::new(
        v["code"].as_str().unwrap_or(DaemonCode::InternalError.as_str()),
        v["message"].as_str().unwrap_or("failed"),
    );
    e.retryable = v["retryable"].as_bool().unwrap_or(false);
    if let Some(d) = v["details"].as_object() {
        e.details = d.clone();
    }
    e
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
        .detail("field", json!("payload.session.sessionDir"))
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
