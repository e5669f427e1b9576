//! The reference daemon's host: sessions, dispatch of the eleven operations, events, the
//! scripted agent, durable wakes and restart recovery (SPEC §2, §3.4, §6). The socket shell
//! is `daemon::server`; every envelope rule comes from `contract::parse_command`.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};
use tokio::sync::{mpsc, watch};

use super::faults::{DaemonFault, DaemonFaults};
use super::link::{AdapterLink, CallError, PendingCall};
use super::store::{Pending, SessionRecord, Store, StoreError, WakeRecord};
use crate::contract::command::{Command, OPERATIONS};
use crate::contract::types::tool_adapter::ToolOperation;
use crate::contract::{validate_relative_path, AdapterCode, Code, DaemonCode, Descriptor, PathSide};

/// Bounds of the daemon socket (SPEC §1.1).
pub const MAX_CONNECTIONS: usize = 64;
/// In-flight requests per connection.
pub const MAX_IN_FLIGHT: usize = 64;
/// Largest command line, LF excluded.
pub const MAX_LINE_BYTES: usize = 1024 * 1024;
/// Largest response record.
pub const MAX_RESPONSE_BYTES: usize = 1024 * 1024;
/// Largest event record.
pub const MAX_EVENT_BYTES: usize = 1024 * 1024;
/// Queued outbound bytes per connection before a slow reader is disconnected.
pub const MAX_OUTBOUND_BYTES: usize = 4 * 1024 * 1024;

/// A dispatch error: the protocol's error body.
#[derive(Clone, Debug, PartialEq)]
pub struct DErr {
    /// Code.
    pub code: String,
    /// Message (content-free).
    pub message: String,
    /// Retryable.
    pub retryable: bool,
    /// Details.
    pub details: Map<String, Value>,
}

impl DErr {
    /// An error with a code that is not known here (an adapter's own error code, a journaled
    /// body): not retryable unless set.
    pub fn new(code: &str, message: &str) -> Self {
        DErr { code: code.into(), message: message.into(), retryable: false, details: Map::new() }
    }

    /// An error of the daemon catalogue, with its default `retryable`.
    pub fn of(code: DaemonCode, message: &str) -> Self {
        DErr { retryable: code.default_retryable(), ..Self::new(code.as_str(), message) }
    }

    /// An error with a validation code of the contract (never retryable).
    pub fn contract(code: Code, message: &str) -> Self {
        Self::new(code.as_str(), message)
    }
    fn detail(mut self, k: &str, v: Value) -> Self {
        self.details.insert(k.into(), v);
        self
    }
    /// The body.
    pub fn body(&self) -> Value {
        let mut m = Map::new();
        m.insert("code".into(), json!(self.code));
        m.insert("message".into(), json!(self.message));
        m.insert("retryable".into(), json!(self.retryable));
        if !self.details.is_empty() {
            m.insert("details".into(), Value::Object(self.details.clone()));
        }
        Value::Object(m)
    }
}

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

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SState {
    Active,
    Dormant,
}

struct Session {
    id: String,
    generation: u64,
    open_version: String,
    cwd: String,
    mode: String,
    policy: Option<Value>,
    link: Option<AdapterLink>,
    handle: Option<crate::contract::CapabilityHandle>,
    state: SState,
    recovery: Option<Value>,
    seq: u64,
    turn: Option<Arc<AtomicBool>>,
    /// Wake keys journaled (the record's high-water mark, carried across generations).
    wakes: u64,
}

impl Session {
    fn record(&self) -> SessionRecord {
        SessionRecord {
            session_id: self.id.clone(),
            generation: self.generation,
            open_version: self.open_version.clone(),
            cwd: self.cwd.clone(),
            mode: self.mode.clone(),
            policy: self.policy.clone(),
            state: match self.state {
                SState::Active => "active".into(),
                SState::Dormant => "dormant".into(),
            },
            recovery: self.recovery.clone(),
            wakes: self.wakes,
        }
    }

    fn resource(&self) -> Value {
        let mut v = json!({
            "sessionId": self.id,
            "generation": self.generation,
            "protocolVersion": self.open_version,
            "state": match self.state { SState::Active => "active", SState::Dormant => "dormant" },
            "busy": self.turn.is_some(),
            "sequence": self.seq,
            "tools": match &self.policy { Some(p) => json!({"mode": "host-adapter", "policy": p}), None => json!("none") },
        });
        if let Some(r) = &self.recovery {
            v["recovery"] = r.clone();
        }
        v
    }
}

type WakeOutcome = Option<Result<Value, DErr>>;

/// The host.
pub struct Host {
    /// This incarnation's id.
    pub id: String,
    started: Instant,
    started_at: String,
    store: Store,
    sessions: Mutex<HashMap<String, Session>>,
    conns: Mutex<HashMap<u64, ConnEntry>>,
    next_conn: AtomicU64,
    draining: AtomicBool,
    /// Turns running; `drain` waits on it for zero (a notification, never a poll).
    active_turns: watch::Sender<usize>,
    wakes_running: Mutex<HashMap<(String, u64, String), watch::Receiver<WakeOutcome>>>,
    indeterminate: AtomicUsize,
    failed_wakes: AtomicUsize,
    counters: Mutex<HashMap<&'static str, u64>>,
    /// Rules broken on purpose (test aid; production: none).
    pub faults: DaemonFaults,
    /// Links kept alive unrevoked under the no-revoke faults.
    leaked: Mutex<Vec<AdapterLink>>,
}

use super::store::quarantine_condition;

fn fingerprint(v: &Value) -> String {
    fn canon(v: &Value, out: &mut Vec<u8>) {
        match v {
            Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                out.push(b'{');
                for k in keys {
                    out.extend(serde_json::to_vec(k).unwrap_or_default());
                    out.push(b':');
                    canon(&m[k], out);
                    out.push(b',');
                }
                out.push(b'}');
            }
            Value::Array(a) => {
                out.push(b'[');
                for x in a {
                    canon(x, out);
                    out.push(b',');
                }
                out.push(b']');
            }
            o => out.extend(serde_json::to_vec(o).unwrap_or_default()),
        }
    }
    let mut b = Vec::new();
    canon(v, &mut b);
    hex::encode(Sha256::digest(&b))
}

fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // civil-from-days (Howard Hinnant)
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem / 60 % 60, rem % 60)
}

impl Host {
    /// Start a host over a state directory: load the catalog and apply restart recovery
    /// (SPEC §6): host-adapter sessions are quarantined, queued wakes fail terminally,
    /// accepted wakes become indeterminate.
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
        let mut sessions = HashMap::new();
        let mut quarantined = HashSet::new();
        let loaded = store.load()?;
        for mut r in loaded.sessions {
            if r.state == "closed" {
                continue;
            }
            let before = r.clone();
            if r.policy.is_some() && !faults.has(DaemonFault::NoQuarantine) {
                r.recovery = Some(quarantine_condition());
                quarantined.insert((r.session_id.clone(), r.generation));
            }
            r.state = "dormant".into();
            if r != before {
                store.put_session(&r)?;
            }
            sessions.insert(
                r.session_id.clone(),
                Session {
                    id: r.session_id.clone(),
                    generation: r.generation,
                    open_version: r.open_version.clone(),
                    cwd: r.cwd.clone(),
                    mode: r.mode.clone(),
                    policy: r.policy.clone(),
                    link: None,
                    handle: None,
                    state: SState::Dormant,
                    recovery: r.recovery.clone(),
                    seq: 0,
                    turn: None,
                    wakes: r.wakes,
                },
            );
        }
        let (mut failed, mut indeterminate) = (0, 0);
        for mut w in loaded.wakes {
            match w.state.as_str() {
                "queued" => {
                    let code = if quarantined.contains(&(w.session_id.clone(), w.generation)) {
                        DaemonCode::ToolAdapterReprovisionRequired
                    } else {
                        DaemonCode::HostRestarted
                    };
                    w.state = "failed".into();
                    // Terminal for this key, whatever the code's default: the same wake (same key)
                    // fails again; a new key may succeed.
                    let mut e = DErr::of(code, "the host restarted before this wake started; resubmit under a new key");
                    e.retryable = false;
                    w.error = Some(e.body());
                    store.put_wake(&w)?;
                    failed += 1;
                }
                "accepted" => {
                    w.state = "indeterminate".into();
                    store.put_wake(&w)?;
                    indeterminate += 1;
                }
                "indeterminate" => indeterminate += 1,
                _ => {}
            }
        }
        Ok(Arc::new(Host {
            id,
            started: Instant::now(),
            started_at: now_rfc3339(),
            store,
            sessions: Mutex::new(sessions),
            conns: Mutex::new(HashMap::new()),
            next_conn: AtomicU64::new(1),
            draining: AtomicBool::new(false),
            active_turns: watch::Sender::new(0),
            wakes_running: Mutex::new(HashMap::new()),
            indeterminate: AtomicUsize::new(indeterminate),
            failed_wakes: AtomicUsize::new(failed),
            counters: Mutex::new(HashMap::new()),
            faults,
            leaked: Mutex::new(Vec::new()),
        }))
    }

    fn count(&self, k: &'static str) {
        if let Ok(mut c) = self.counters.lock() {
            *c.entry(k).or_default() += 1;
        }
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
        self.sessions.lock().map(|s| s.values().filter_map(|x| x.handle.clone()).collect()).unwrap_or_default()
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
        let (version, seq) = {
            let Ok(mut s) = self.sessions.lock() else { return };
            let Some(sess) = s.get_mut(sid).filter(|x| x.generation == generation) else { return };
            sess.seq += 1;
            (sess.open_version.clone(), sess.seq)
        };
        let mut rec = json!({
            "protocolVersion": version, "kind": "event", "event": event, "hostInstanceId": self.id,
            "sessionId": sid, "generation": generation, "sequence": seq,
        });
        if let Some(r) = request_id {
            rec["requestId"] = json!(r);
        }
        rec["data"] = data;
        let mut line = crate::wire::encode_line(&rec);
        if line.len() > MAX_EVENT_BYTES {
            rec = json!({
                "protocolVersion": version, "kind": "event", "event": "eventDropped", "hostInstanceId": self.id,
                "sessionId": sid, "generation": generation, "sequence": seq,
                "data": {"originalEvent": event, "error": DErr::of(DaemonCode::OutboundRecordTooLarge, "the event exceeded maxEventBytes").body()},
            });
            line = crate::wire::encode_line(&rec);
        }
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
        let sessions = self.sessions.lock();
        let (resident, dormant, quarantined) = match &sessions {
            Ok(s) => {
                let q: Vec<Value> = s
                    .values()
                    .filter(|x| x.recovery.is_some())
                    .map(|x| {
                        json!({"sessionId": x.id, "generation": x.generation, "state": "reprovision_required",
                        "code": DaemonCode::ToolAdapterReprovisionRequired.as_str(),
                        "retryable": DaemonCode::ToolAdapterReprovisionRequired.default_retryable()})
                    })
                    .collect();
                (
                    s.values().filter(|x| x.state == SState::Active).count(),
                    s.values().filter(|x| x.state == SState::Dormant).count(),
                    q,
                )
            }
            Err(_) => (0, 0, vec![]),
        };
        drop(sessions);
        let indeterminate = self.indeterminate.load(Ordering::Relaxed);
        let failed = self.failed_wakes.load(Ordering::Relaxed);
        let phase = if indeterminate > 0 { "degraded" } else { "ready" };
        // failureCodes maps an error code to a count, `{}` when none (as Pi Daemon 0.3.3).
        let mut codes = Map::new();
        if indeterminate > 0 {
            codes.insert(DaemonCode::RequestIndeterminate.as_str().into(), json!(indeterminate));
        }
        let counters: Map<String, Value> = self
            .counters
            .lock()
            .map(|c| c.iter().map(|(k, v)| ((*k).to_string(), json!(v))).collect())
            .unwrap_or_default();
        json!({
            "hostInstanceId": self.id,
            "ready": indeterminate == 0,
            "durable": true,
            "draining": self.draining.load(Ordering::Relaxed),
            "activeTurns": *self.active_turns.borrow(),
            "queuedTurns": 0,
            "startedAt": self.started_at,
            "uptimeMs": self.started.elapsed().as_millis() as u64,
            "recovery": {
                "phase": phase,
                "failedWakes": failed,
                "indeterminateWakes": indeterminate,
                "failureCodes": codes,
                "quarantinedSessions": quarantined,
            },
            "sessions": {"resident": resident, "dormant": dormant},
            "counters": counters,
        })
    }

    fn handshake(&self, v2: bool) -> Value {
        let mut caps = json!({"operations": OPERATIONS, "transport": "unix-ndjson", "durable": true});
        if v2 {
            let m = caps.as_object_mut().unwrap_or_else(|| unreachable!());
            m.insert("hostToolAdapter".into(), json!(true));
            m.insert("hostToolAdapterQueueTelemetry".into(), json!(true));
            m.insert(
                "hostToolAdapterRecommendedQueueLimits".into(),
                json!({"maxConcurrentRequests": 4, "maxQueuedRequests": 16}),
            );
            m.insert("hostToolOperationCount".into(), json!(6));
            m.insert("configuredOpen".into(), json!(true));
            m.insert("sessionDir".into(), json!(true));
        }
        let mut v = json!({
            "protocolVersion": "1.0",
            "supportedVersions": ["1.0", "2.0"],
            "supportedProtocolVersions": ["1.0", "2.0"],
            "capabilities": caps,
            "limits": {
                "maxConnections": MAX_CONNECTIONS,
                "maxInFlightRequestsPerConnection": MAX_IN_FLIGHT,
                "maxLineBytes": MAX_LINE_BYTES,
                "maxEventBytes": MAX_EVENT_BYTES,
                "maxResponseBytes": MAX_RESPONSE_BYTES,
                "maxOutboundBytesPerConnection": MAX_OUTBOUND_BYTES,
                "multiplexer": "requestId",
            },
            "host": self.snapshot(),
        });
        if self.faults.has(DaemonFault::SupportedVersions033) {
            if let Some(m) = v.as_object_mut() {
                m.remove("supportedVersions");
            }
        }
        v
    }

    /// Keep `link` alive without revoking it (the no-revoke faults).
    fn leak(&self, link: AdapterLink) {
        if let Ok(mut l) = self.leaked.lock() {
            l.push(link);
        }
    }

    /// Dispatch one accepted command for connection `conn`.
    pub async fn dispatch(self: &Arc<Self>, conn: u64, cmd: Command) -> Result<Value, DErr> {
        self.count("commands");
        match cmd.operation.as_str() {
            "handshake" => Ok(self.handshake(cmd.version.major == 2)),
            "open" => self.open(cmd).await,
            "wake" => self.wake(cmd).await,
            "steer" | "followUp" => self.queue_message(&cmd),
            "status" => self.status(&cmd),
            "abort" => self.abort(&cmd),
            "attach" => self.attach(conn, &cmd, true),
            "detach" => self.attach(conn, &cmd, false),
            "close" => self.close(&cmd).await,
            "drain" => self.drain(&cmd).await,
            _ => Err(DErr::contract(Code::UnknownOperation, "operation is not one of the eleven")),
        }
    }

    fn live(&self, cmd: &Command) -> Result<(String, u64), DErr> {
        let sid = cmd.session_id.clone().unwrap_or_default();
        let generation = cmd.generation.unwrap_or(0);
        let s = self.sessions.lock().map_err(|_| DErr::of(DaemonCode::InternalError, "state lock poisoned"))?;
        match s.get(&sid) {
            Some(x) if x.state == SState::Active && x.generation == generation => Ok((sid, generation)),
            Some(x) if x.state == SState::Active && generation < x.generation => {
                Err(DErr::of(DaemonCode::StaleGeneration, "a newer generation of this session is open")
                    .detail("currentGeneration", json!(x.generation))
                    .detail("receivedGeneration", json!(generation)))
            }
            _ => Err(DErr::of(DaemonCode::SessionNotFound, "no such live session generation")),
        }
    }

    async fn open(self: &Arc<Self>, cmd: Command) -> Result<Value, DErr> {
        let sid = cmd.session_id.clone().unwrap_or_default();
        let generation = cmd.generation.unwrap_or(0);
        let p = &cmd.payload;
        let summary = cmd.descriptor.as_ref().map(Descriptor::policy_summary);
        check_absolute_paths(p, cmd.version.major)?;
        // v1 ignores sessionDir (its form was checked by the command rules; SPEC §3.1).
        if cmd.version.major == 2 {
            check_session_dir(p)?;
        }
        let mode = p.get("session").and_then(|s| s.get("mode")).and_then(Value::as_str).unwrap_or("new").to_string();
        let cwd = p.get("cwd").and_then(Value::as_str).unwrap_or("/").to_string();
        let mut old_link = None;
        let mut rebind_existing = false;
        let mut carried_wakes = 0;
        // The new session's record: queued before binding, durable before the answer.
        let mut record = None;
        let mut early = None;
        'locked: {
            let mut s = self.sessions.lock().map_err(|_| DErr::of(DaemonCode::InternalError, "state lock poisoned"))?;
            if let Some(x) = s.get_mut(&sid) {
                if generation < x.generation {
                    return Err(DErr::of(DaemonCode::StaleGeneration, "a newer generation of this session exists")
                        .detail("currentGeneration", json!(x.generation))
                        .detail("receivedGeneration", json!(generation)));
                }
                if generation == x.generation {
                    match (&x.policy, &summary) {
                        (Some(_), None) if !self.faults.has(DaemonFault::NoReprovisionRule) => {
                            return Err(DErr::of(
                                DaemonCode::ToolAdapterReprovisionRequired,
                                "this generation needs its tool adapter: open it again with a descriptor",
                            ));
                        }
                        (Some(a), Some(b)) if a != b => {
                            return Err(DErr::of(
                                DaemonCode::SessionPolicyConflict,
                                "the tool policy differs from the retained one",
                            ));
                        }
                        (None, Some(_)) => {
                            return Err(DErr::of(
                                DaemonCode::SessionPolicyConflict,
                                "this generation was opened without tools",
                            ));
                        }
                        _ => {}
                    }
                    let linked = x.link.as_ref().is_some_and(|l| l.failed().is_none());
                    let rebind = self.faults.has(DaemonFault::ReopenRebinds) && x.policy.is_some() && summary.is_some();
                    if x.state == SState::Active && (x.policy.is_none() || linked) && !rebind {
                        return Ok(json!({"created": false, "session": x.resource()}));
                    }
                    if x.policy.is_none() {
                        x.state = SState::Active;
                        x.open_version = cmd.version.text.clone();
                        early = Some((self.persist(x), json!({"created": false, "session": x.resource()})));
                        break 'locked;
                    }
                    rebind_existing = true;
                } else {
                    old_link = x.link.take();
                    carried_wakes = x.wakes;
                    s.remove(&sid);
                }
            }
            if !rebind_existing {
                let sess = Session {
                    id: sid.clone(),
                    generation,
                    open_version: cmd.version.text.clone(),
                    cwd: cwd.clone(),
                    mode: mode.clone(),
                    policy: summary.clone(),
                    link: None,
                    handle: None,
                    state: if summary.is_some() { SState::Dormant } else { SState::Active },
                    recovery: None,
                    seq: 0,
                    turn: None,
                    wakes: carried_wakes,
                };
                // The retained policy is recorded before binding (SPEC §3.4): queued now, in
                // order with every other write, and durable before the open is answered; the
                // write overlaps the bind.
                record = self.persist(&sess);
                s.insert(sid.clone(), sess);
            }
        }
        if let Some((pending, answer)) = early {
            durable(pending).await.map_err(|_| DErr::of(DaemonCode::InternalError, "cannot persist the session"))?;
            return Ok(answer);
        }
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
                    let orphan = {
                        let mut s = self
                            .sessions
                            .lock()
                            .map_err(|_| DErr::of(DaemonCode::InternalError, "state lock poisoned"))?;
                        match s.get_mut(&sid).filter(|x| x.generation == generation) {
                            Some(x) => {
                                if let Some(old) = x.link.replace(link) {
                                    if self.faults.has(DaemonFault::NoRevokeOnReplacement) {
                                        self.leak(old);
                                    }
                                }
                                // Only what a restart reads is rewritten: a cleared recovery
                                // condition or a new open version. Active and dormant recover
                                // alike, so a new session's record stays as queued.
                                let changed = x.recovery.is_some() || x.open_version != cmd.version.text;
                                x.handle = Some(d.handle.clone());
                                x.state = SState::Active;
                                x.recovery = None;
                                x.open_version = cmd.version.text.clone();
                                if changed {
                                    rebound_record = self.persist(x);
                                }
                                None
                            }
                            None => Some(link),
                        }
                    };
                    if let Some(link) = orphan {
                        link.revoke().await;
                        return Err(DErr::of(DaemonCode::OpenFailed, "the session was replaced while binding"));
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
            let link = self.sessions.lock().ok().and_then(|mut s| {
                if s.get(&sid).is_some_and(|x| x.generation == generation) {
                    s.remove(&sid).and_then(|x| x.link)
                } else {
                    None
                }
            });
            if let Some(l) = link {
                l.revoke().await;
            }
            return Err(DErr::of(DaemonCode::InternalError, "cannot persist the session"));
        }
        if rebind_existing {
            let s = self.sessions.lock().map_err(|_| DErr::of(DaemonCode::InternalError, "state lock poisoned"))?;
            return Ok(json!({"created": false, "session": s.get(&sid).map(Session::resource)}));
        }
        self.emit(&sid, generation, "opened", Some(&cmd.request_id), json!({"created": true}));
        let s = self.sessions.lock().map_err(|_| DErr::of(DaemonCode::InternalError, "state lock poisoned"))?;
        Ok(json!({"created": true, "session": s.get(&sid).map(Session::resource)}))
    }

    /// One more wake key journaled for `sid`: raise its record's high-water mark.
    async fn count_wake(&self, sid: &str) -> Result<(), DErr> {
        let pending = {
            let mut s = self.sessions.lock().map_err(|_| DErr::of(DaemonCode::InternalError, "state lock poisoned"))?;
            let x = s.get_mut(sid).ok_or_else(|| DErr::of(DaemonCode::SessionNotFound, "no such session"))?;
            x.wakes += 1;
            self.persist(x)
        };
        durable(pending).await.map_err(|_| DErr::of(DaemonCode::InternalError, "cannot journal the wake"))
    }

    /// Queue the session's record on the store's writer (nothing for a memory session). Called
    /// under the sessions lock, so records are written in the order of the changes; the caller
    /// awaits [`durable`] after releasing the lock: no fsync ever runs on an async worker or
    /// under a lock `status` needs.
    fn persist(&self, s: &Session) -> Option<Pending> {
        (s.mode != "memory").then(|| self.store.queue_session(&s.record()))
    }

    async fn wake(self: &Arc<Self>, cmd: Command) -> Result<Value, DErr> {
        if self.draining.load(Ordering::Relaxed) {
            return Err(DErr::of(DaemonCode::HostDraining, "the host is draining"));
        }
        let (sid, generation) = self.live(&cmd)?;
        let key = cmd.idempotency_key.clone().unwrap_or_default();
        let payload = Value::Object(cmd.payload.clone());
        let fp = fingerprint(&json!({"prompt": payload["prompt"], "source": payload.get("source")}));
        let wait = payload.get("waitForTerminal").and_then(Value::as_bool).unwrap_or(true);
        let rkey = (sid.clone(), generation, key.clone());
        // A running wake with this key: join it.
        let running = self.wakes_running.lock().ok().and_then(|w| w.get(&rkey).cloned());
        if let Some(mut rx) = running {
            let rec = self.store.wake(&sid, generation, &key).ok().flatten();
            if rec.as_ref().is_some_and(|r| r.fingerprint != fp) {
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
            if rec.fingerprint != fp {
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
        let abort = Arc::new(AtomicBool::new(false));
        {
            let mut s = self.sessions.lock().map_err(|_| DErr::of(DaemonCode::InternalError, "state lock poisoned"))?;
            let x = s.get_mut(&sid).ok_or_else(|| DErr::of(DaemonCode::SessionNotFound, "no such session"))?;
            if x.turn.is_some() {
                return Err(DErr::of(DaemonCode::SessionBusy, "a turn is running"));
            }
            x.turn = Some(abort.clone());
        }
        let mut rec = WakeRecord {
            session_id: sid.clone(),
            generation,
            idempotency_key: key.clone(),
            fingerprint: fp,
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
        let prompt = payload["prompt"].as_str().unwrap_or("").to_string();
        let request_id = cmd.request_id.clone();
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
            let (sid, generation, key) =
                (cmd.session_id.unwrap_or_default(), generation, cmd.idempotency_key.unwrap_or_default());
            return Ok(
                json!({"ticket": {"sessionId": sid, "generation": generation, "idempotencyKey": key, "state": "accepted"}}),
            );
        }
        let _ = task.await;
        let outcome = rx.borrow().clone().unwrap_or(Err(DErr::of(DaemonCode::InternalError, "lost")));
        self.wake_reply(cmd.session_id.as_deref().unwrap_or(""), outcome)
    }

    fn wake_reply(&self, sid: &str, outcome: Result<Value, DErr>) -> Result<Value, DErr> {
        let r = outcome?;
        let s = self.sessions.lock().map_err(|_| DErr::of(DaemonCode::InternalError, "state lock poisoned"))?;
        Ok(json!({"result": r, "session": s.get(sid).map(Session::resource)}))
    }

    fn end_turn(&self, sid: &str) {
        if let Ok(mut s) = self.sessions.lock() {
            if let Some(x) = s.get_mut(sid) {
                x.turn = None;
            }
        }
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
        let link = self.sessions.lock().ok().and_then(|s| s.get(sid).and_then(|x| x.link.clone()));
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

    fn queue_message(&self, cmd: &Command) -> Result<Value, DErr> {
        self.live(cmd)?;
        Ok(json!({"queued": true}))
    }

    fn status(&self, cmd: &Command) -> Result<Value, DErr> {
        let Some(sid) = &cmd.session_id else { return Ok(self.snapshot()) };
        let s = self.sessions.lock().map_err(|_| DErr::of(DaemonCode::InternalError, "state lock poisoned"))?;
        match s.get(sid).filter(|x| x.state == SState::Active) {
            Some(x) => {
                let mut r = x.resource();
                if let Some(l) = &x.link {
                    r["toolQueue"] = l.telemetry();
                }
                Ok(json!({"session": r}))
            }
            None => Err(DErr::of(DaemonCode::SessionNotFound, "no such live session")),
        }
    }

    fn abort(&self, cmd: &Command) -> Result<Value, DErr> {
        let (sid, _) = self.live(cmd)?;
        let s = self.sessions.lock().map_err(|_| DErr::of(DaemonCode::InternalError, "state lock poisoned"))?;
        let aborted = s.get(&sid).and_then(|x| x.turn.as_ref()).map(|a| a.swap(true, Ordering::Relaxed)).is_some();
        Ok(json!({"aborted": aborted}))
    }

    fn attach(&self, conn: u64, cmd: &Command, on: bool) -> Result<Value, DErr> {
        let (sid, generation) = if on {
            self.live(cmd)?
        } else {
            (cmd.session_id.clone().unwrap_or_default(), cmd.generation.unwrap_or(0))
        };
        let seq = self.sessions.lock().ok().and_then(|s| s.get(&sid).map(|x| x.seq)).unwrap_or(0);
        let mut c = self.conns.lock().map_err(|_| DErr::of(DaemonCode::InternalError, "state lock poisoned"))?;
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

    async fn close(&self, cmd: &Command) -> Result<Value, DErr> {
        let (sid, generation) = self.live(cmd)?;
        let retain = cmd.payload.get("retainSession").and_then(Value::as_bool).unwrap_or(true);
        self.emit(&sid, generation, "sessionClosed", Some(&cmd.request_id), json!({"retained": retain}));
        let (link, pending) = {
            let mut s = self.sessions.lock().map_err(|_| DErr::of(DaemonCode::InternalError, "state lock poisoned"))?;
            let x = s.remove(&sid);
            let pending = match &x {
                Some(x) if x.mode == "memory" => None,
                Some(x) if retain => {
                    let mut r = x.record();
                    r.state = "closed".into();
                    Some(self.store.queue_session(&r))
                }
                Some(_) => Some(self.store.queue_remove_session(&sid)),
                None => None,
            };
            (x.and_then(|x| x.link), pending)
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

    async fn drain(&self, cmd: &Command) -> Result<Value, DErr> {
        let timeout = cmd.payload.get("timeoutMs").and_then(Value::as_u64).unwrap_or(30_000);
        self.draining.store(true, Ordering::Relaxed);
        let mut turns = self.active_turns.subscribe();
        let idle = tokio::time::timeout(Duration::from_millis(timeout), turns.wait_for(|n| *n == 0)).await;
        let timed_out = !matches!(idle, Ok(Ok(_)));
        let mut aborted = 0;
        if timed_out {
            if let Ok(s) = self.sessions.lock() {
                for x in s.values() {
                    if let Some(a) = &x.turn {
                        a.store(true, Ordering::Relaxed);
                        aborted += 1;
                    }
                }
            }
        }
        Ok(json!({"draining": true, "timeoutMs": timeout, "timedOut": timed_out, "abortedTurns": aborted}))
    }

    /// Revoke every binding (shutdown).
    pub async fn shutdown(&self) {
        let links: Vec<AdapterLink> = self
            .sessions
            .lock()
            .map(|mut s| s.values_mut().filter_map(|x| x.link.take()).collect())
            .unwrap_or_default();
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

/// `cwd`, `agentDir` and `session.sessionDir` must be absolute at dispatch. The command parser
/// accepts relative forms as Pi Daemon 0.3.3's validator does (it then resolves them against
/// its own working directory, and fails the open); the reference daemon fails the open at once
/// with a cause naming the field, before anything touches the filesystem.
fn check_absolute_paths(p: &Map<String, Value>, major: u8) -> Result<(), DErr> {
    // v1 ignores sessionDir.
    let session = p.get("session").filter(|_| major == 2);
    for (field, v) in [
        ("payload.cwd", p.get("cwd")),
        ("payload.agentDir", p.get("agentDir")),
        ("payload.session.sessionDir", session.and_then(|s| s.get("sessionDir"))),
    ] {
        if v.and_then(Value::as_str).is_some_and(|s| !s.starts_with('/')) {
            return Err(DErr::of(DaemonCode::OpenFailed, "failed to open logical session").detail(
                "cause",
                json!({"name": "InvalidPath", "message": format!("{field} must be an absolute path")}),
            ));
        }
    }
    Ok(())
}

/// `session.sessionDir` must lie inside `<agentDir>/sessions` and, when it exists, be an
/// owner-controlled real directory (SPEC §3.1).
fn check_session_dir(p: &Map<String, Value>) -> Result<(), DErr> {
    let Some(dir) = p.get("session").and_then(|s| s.get("sessionDir")).and_then(Value::as_str) else { return Ok(()) };
    let bad = || {
        DErr::contract(
            Code::InvalidField,
            "sessionDir must be an owner-controlled directory inside <agentDir>/sessions",
        )
        .detail("field", json!("payload.session.sessionDir"))
    };
    let agent = p.get("agentDir").and_then(Value::as_str).ok_or_else(bad)?;
    let base = format!("{}/sessions/", agent.trim_end_matches('/'));
    if !dir.starts_with(&base) || dir.split('/').any(|c| c == ".." || c == ".") {
        return Err(bad());
    }
    let cwd = p.get("cwd").and_then(Value::as_str).unwrap_or("");
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
