//! The reference daemon's host state as a sans-I/O core: the session table, restart
//! recovery, open admission, events, the host snapshot and handshake, and the counters.
//!
//! `daemon::host` is its async shell: it holds the core under one lock, queues the records
//! the core returns on the store's writer, binds adapters, runs turns and delivers events.
//! The core does no I/O, reads no clock (every method that needs the time takes `now`, and
//! the start time comes in as Unix seconds) and draws no randomness; the adapter link it keeps
//! per session is a type parameter `L` it only asks [`LinkState`] questions of.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::num::NonZeroU64;
use std::sync::Arc;
use std::time::Instant;

use serde_json::{Map, Value};

use super::faults::{DaemonFault, DaemonFaults};
pub use super::record::DErr;
use super::record::{self, data, event_line, EventOf, Snapshot};
use super::store::{quarantine_condition, Loaded, SessionRecord, WakeRecord};
use crate::contract::types::protocol_v2::{self as v2, OpenCommand, OpenPayload};
use crate::contract::{CapabilityHandle, DaemonCode, Descriptor};

/// A running turn's abort: a flag the turn polls between steps, and a wake-up for a turn
/// waiting on a tool call, so an abort (the client's `abort`, a drain that timed out) ends the
/// turn at once instead of when the call returns (SPEC PC-2.5, DECISION on drain). Plain
/// `std` (a waker slot), so the core stays free of any runtime.
#[derive(Debug, Default)]
pub struct TurnAbort {
    flag: std::sync::atomic::AtomicBool,
    waker: std::sync::Mutex<Option<std::task::Waker>>,
}

impl TurnAbort {
    /// Ask the turn to abort; whether it had been asked before.
    pub fn abort(&self) -> bool {
        let before = self.flag.swap(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(w) = self.waker.lock().unwrap_or_else(|p| p.into_inner()).take() {
            w.wake();
        }
        before
    }

    /// Whether an abort was asked.
    pub fn requested(&self) -> bool {
        self.flag.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Resolves once an abort is asked (at once when it already was). The flag is read again
    /// after the waker is stored, so an abort between the two is never missed.
    pub async fn asked(&self) {
        std::future::poll_fn(|cx| {
            if self.requested() {
                return std::task::Poll::Ready(());
            }
            *self.waker.lock().unwrap_or_else(|p| p.into_inner()) = Some(cx.waker().clone());
            if self.requested() {
                std::task::Poll::Ready(())
            } else {
                std::task::Poll::Pending
            }
        })
        .await
    }
}

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
/// The default most sessions a host keeps: resident, dormant and retained closed together
/// (SPEC PC-2.5, DECISION on the session cap; `serve-daemon --max-sessions`). Pi Daemon 0.3.3's
/// retained catalog has the same default.
pub const MAX_SESSIONS: usize = 4096;

/// What the core asks of a session's adapter link.
pub trait LinkState {
    /// The link's queue telemetry (`toolQueue` of a session status).
    fn telemetry(&self) -> Value;
    /// Whether the link has failed.
    fn is_failed(&self) -> bool;
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SState {
    Active,
    Dormant,
}

pub(crate) struct Session<L> {
    pub(crate) id: String,
    pub(crate) generation: u64,
    pub(crate) open_version: String,
    pub(crate) cwd: String,
    pub(crate) mode: String,
    pub(crate) policy: Option<Value>,
    pub(crate) link: Option<L>,
    pub(crate) handle: Option<crate::contract::CapabilityHandle>,
    pub(crate) state: SState,
    pub(crate) recovery: Option<v2::SessionRecovery>,
    pub(crate) seq: u64,
    pub(crate) turn: Option<Arc<TurnAbort>>,
    /// Wake keys journaled (the record's high-water mark, carried across generations).
    pub(crate) wakes: u64,
    /// A `close` is persisting this generation's record change: it is no longer live, and
    /// comes back if the change cannot be persisted (SPEC PC-2.5, DECISION on durable closes).
    pub(crate) closing: bool,
}

impl<L> Session<L> {
    pub(crate) fn record(&self) -> SessionRecord {
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
            recovery: self.recovery.as_ref().map(data),
            wakes: self.wakes,
        }
    }

    /// The session's resource (the `session` of open, wake and status answers; SPEC §2.5).
    pub(crate) fn resource(&self) -> v2::SessionResource {
        v2::SessionResource {
            busy: self.turn.is_some(),
            generation: self.generation,
            protocol_version: self.open_version.clone(),
            recovery: self.recovery.clone(),
            sequence: self.seq,
            session_id: self.id.clone(),
            state: match self.state {
                SState::Active => v2::SessionResourceState::Active,
                SState::Dormant => v2::SessionResourceState::Dormant,
            },
            tool_queue: Map::new(),
            tools: match &self.policy {
                Some(policy) => v2::SessionTools::SessionHostAdapterTools(v2::SessionHostAdapterTools {
                    mode: v2::SessionHostAdapterToolsMode::HostAdapter,
                    policy: object(policy),
                }),
                None => v2::SessionTools::NoneResource(v2::NoneResource::None),
            },
        }
    }
}

/// The members of an object value (`{}` for any other value; never one of ours).
pub(crate) fn object(v: &Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap_or_default()
}

/// `secs` after the Unix epoch as RFC 3339 UTC (`2026-12-03T17:19:23Z`).
pub fn rfc3339(secs: u64) -> String {
    let (y, m, d) = crate::util::utc::civil_from_days((secs / 86_400) as i64);
    let rem = secs % 86_400;
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem / 60 % 60, rem % 60)
}

/// What the shell does for an admitted open (see [`HostCore::admit_open`]).
pub enum OpenPlan<L> {
    /// Answer at once.
    Done(Value),
    /// A tool-less generation made active again: persist `record` (when the session is
    /// durable), then answer.
    Reactivated {
        /// The record to persist.
        record: Option<SessionRecord>,
        /// The answer.
        answer: Value,
    },
    /// Revoke `old_link`, then bind the descriptor (if any) and persist `record`.
    Bind {
        /// The replaced generation's link.
        old_link: Option<L>,
        /// The same generation is bound again (quarantined or its link failed).
        rebind_existing: bool,
        /// The new session's record (when it is durable).
        record: Option<SessionRecord>,
    },
}

/// What the store does for a closed session.
#[derive(Debug, PartialEq)]
pub enum CloseWrite {
    /// Nothing (a memory session, or none).
    Nothing,
    /// Rewrite its record as `closed`.
    Put(Box<SessionRecord>),
    /// Remove its record.
    Remove,
}

/// The host state (see the module docs).
pub struct HostCore<L> {
    id: String,
    started: Instant,
    started_at: String,
    pub(crate) sessions: HashMap<String, Session<L>>,
    pub(crate) draining: bool,
    indeterminate: usize,
    failed_wakes: usize,
    counters: BTreeMap<&'static str, u64>,
    /// The session generations each open connection is attached to (event delivery).
    attachments: HashMap<u64, HashSet<(String, u64)>>,
    faults: DaemonFaults,
    /// The host-wide event counter of [`DaemonFault::GlobalEventSequence`] (unused otherwise).
    global_seq: u64,
    /// Sessions closed with `retainSession:true`: their `closed` records stay in the catalog.
    retained_closed: HashSet<String>,
    /// The most sessions kept, `sessions` and `retained_closed` together.
    max_sessions: usize,
    /// Under [`DaemonFault::SnapshotLeaksEndpoint`]: the directory of the last host-adapter
    /// open's endpoint.
    leaked_endpoint: Option<String>,
    /// Under [`DaemonFault::EndpointInStatus`]: each session's endpoint of its last host-adapter open.
    status_endpoints: HashMap<String, String>,
    /// Wakes journaled `queued` behind each session's running turn, waiting for it to end.
    queued_wakes: HashMap<String, usize>,
}

/// The most wakes one session holds queued behind its running turn; one more is refused
/// `session_busy` (retryable). Pi Daemon 0.3.3's default `maxSessionQueueDepth` is the same.
pub const MAX_QUEUED_WAKES: usize = 32;

/// A restarted host: its core and the wake records to rewrite, in order. No session record
/// is rewritten: what recovery makes of a session (dormant, quarantined when it has a tool
/// policy) follows from its record alone and is derived again at every start, so the time to
/// restart is the time to read the state (SPEC PC-2.5, DECISION on the session cap).
pub struct Recovered<L> {
    /// The core.
    pub core: HostCore<L>,
    /// Wake records that failed or became indeterminate.
    pub wakes: Vec<WakeRecord>,
}

/// The record to persist for `s`: none for a memory session.
pub(crate) fn durable_record<L>(s: &Session<L>) -> Option<SessionRecord> {
    (s.mode != "memory").then(|| s.record())
}

impl<L: LinkState + Clone> HostCore<L> {
    /// Restart recovery over what the store loaded (SPEC §6): host-adapter sessions are
    /// quarantined and every session is dormant; queued wakes fail terminally, accepted wakes
    /// become indeterminate. `now` and `unix_secs` are the start time.
    pub fn recover(id: String, loaded: Loaded, faults: DaemonFaults, now: Instant, unix_secs: u64) -> Recovered<L> {
        let mut sessions = HashMap::new();
        let mut quarantined = HashSet::new();
        let mut retained_closed = HashSet::new();
        for mut r in loaded.sessions {
            if r.state == "closed" {
                retained_closed.insert(r.session_id);
                continue;
            }
            if faults.has(DaemonFault::PersistDescriptor) {
                // The raw policy it wrote is read back as its summary (only the disk is broken).
                if let Some(d) = r.policy.as_ref().and_then(|p| p.get("descriptor")) {
                    r.policy = crate::contract::admit_descriptor(d, None).ok().map(|d| d.policy_summary());
                }
            }
            let tools = r.policy.is_some() || faults.has(DaemonFault::QuarantinesPlainSessions);
            if tools && !faults.has(DaemonFault::NoQuarantine) {
                r.recovery = Some(quarantine_condition());
                quarantined.insert((r.session_id.clone(), r.generation));
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
                    // A condition this daemon did not write is none it knows of.
                    recovery: r.recovery.as_ref().and_then(|v| serde_json::from_value(v.clone()).ok()),
                    seq: 0,
                    turn: None,
                    wakes: r.wakes,
                    closing: false,
                },
            );
        }
        let (mut failed, mut indeterminate) = (0, 0usize);
        let mut wake_writes = Vec::new();
        for mut w in loaded.wakes {
            if w.state == "accepted" && faults.has(DaemonFault::AcceptedWakeRequeued) {
                w.state = "queued".into();
            } else if w.state == "queued"
                && faults.has(DaemonFault::QueuedWakeIndeterminate)
                && quarantined.contains(&(w.session_id.clone(), w.generation))
            {
                w.state = "accepted".into();
            }
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
                    wake_writes.push(w);
                    failed += 1;
                }
                "accepted" => {
                    w.state = "indeterminate".into();
                    wake_writes.push(w);
                    if !faults.has(DaemonFault::IndeterminateNotCounted) {
                        indeterminate += 1;
                    }
                }
                "indeterminate" if faults.has(DaemonFault::IndeterminateCountWraps) => {
                    indeterminate = indeterminate.wrapping_sub(1)
                }
                "indeterminate" if !faults.has(DaemonFault::IndeterminateForgottenOnSecondRestart) => {
                    indeterminate += 1
                }
                _ => {}
            }
        }
        let core = HostCore {
            id,
            started: now,
            started_at: rfc3339(unix_secs),
            sessions,
            draining: false,
            indeterminate,
            failed_wakes: failed,
            counters: BTreeMap::new(),
            attachments: HashMap::new(),
            faults,
            global_seq: 0,
            retained_closed,
            max_sessions: MAX_SESSIONS,
            leaked_endpoint: None,
            status_endpoints: HashMap::new(),
            queued_wakes: HashMap::new(),
        };
        Recovered { core, wakes: wake_writes }
    }

    /// Set the most sessions kept (at least 1; see [`MAX_SESSIONS`]). A state that already
    /// holds more is kept whole: new sessions are refused until it is below the cap.
    pub fn set_max_sessions(&mut self, n: usize) {
        self.max_sessions = n.max(1);
    }

    /// The sessions kept (resident, dormant and retained closed), and the most kept.
    pub fn session_count(&self) -> (usize, usize) {
        (self.sessions.len() + self.retained_closed.len(), self.max_sessions)
    }

    /// This incarnation's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Count one occurrence of `k` (the snapshot's `counters`).
    pub fn count(&mut self, k: &'static str) {
        *self.counters.entry(k).or_default() += 1;
    }

    /// Every capability handle a session holds (for the outgoing scan).
    pub fn handles(&self) -> Vec<CapabilityHandle> {
        self.sessions.values().filter_map(|x| x.handle.clone()).collect()
    }

    /// The live generation a command names, or `stale_generation` / `session_not_found`.
    pub fn live(&self, sid: &str, generation: u64) -> Result<(String, u64), DErr> {
        match self.sessions.get(sid).filter(|x| !x.closing) {
            Some(x) if x.state == SState::Active && x.generation == generation => Ok((sid.to_string(), generation)),
            Some(x) if x.recovery.is_some() && self.faults.has(DaemonFault::QuarantinedAsReprovision) => {
                Err(DErr::of(DaemonCode::ToolAdapterReprovisionRequired, "this generation needs its tool adapter"))
            }
            Some(x)
                if x.state == SState::Active
                    && generation < x.generation
                    && !self.faults.has(DaemonFault::StaleGenerationAsNotFound) =>
            {
                let e = DErr::of(DaemonCode::StaleGeneration, "a newer generation of this session is open");
                if self.faults.has(DaemonFault::StaleGenerationWithoutDetails) {
                    return Err(e);
                }
                Err(e.with_details(&v2::GenerationDetails {
                    current_generation: x.generation,
                    received_generation: generation,
                }))
            }
            _ => Err(DErr::of(DaemonCode::SessionNotFound, "no such live session generation")),
        }
    }

    /// The next event of a session generation as a line (its sequence taken), replaced by
    /// `eventDropped` past `maxEventBytes`, and the connections attached to that generation,
    /// which it is delivered to; `None` when that generation is gone.
    pub fn deliver(
        &mut self,
        sid: &str,
        generation: u64,
        event: &str,
        request_id: Option<&str>,
        data: Value,
    ) -> Option<(Vec<u8>, Vec<u64>)> {
        let sess = self.sessions.get_mut(sid).filter(|x| x.generation == generation)?;
        if self.faults.has(DaemonFault::GlobalEventSequence) {
            // Under the fault: one counter for every session of the host.
            self.global_seq = self.global_seq.max(sess.seq) + 1;
            sess.seq = self.global_seq;
        } else if !self.faults.has(DaemonFault::EventSequenceFrozen) {
            sess.seq += 1;
        }
        let fixed = self.faults.has(DaemonFault::EventsVersionFixed);
        let of = EventOf {
            version: if fixed { "2.0" } else { &sess.open_version },
            host_id: &self.id,
            session_id: sid,
            generation,
            sequence: NonZeroU64::new(sess.seq).unwrap_or(NonZeroU64::MIN),
        };
        let key = (sid.to_string(), generation);
        let any_generation = self.faults.has(DaemonFault::AttachmentsFollowSession);
        let mut to: Vec<u64> = self
            .attachments
            .iter()
            .filter(|(_, a)| a.contains(&key) || (any_generation && a.iter().any(|(s, _)| s == sid)))
            .map(|(c, _)| *c)
            .collect();
        to.sort_unstable();
        if to.is_empty() && !self.faults.has(DaemonFault::EventsToAll) {
            // Nobody is attached: the sequence is taken, and no line is built (a result
            // riding on `toolCallEnd` is not serialized a second time for no one).
            return Some((Vec::new(), to));
        }
        let mut line = event_line(&of, event, request_id, data);
        if line.len() > MAX_EVENT_BYTES && !self.faults.has(DaemonFault::NoEventCap) {
            let of = if self.faults.has(DaemonFault::EventDroppedNewSequence) {
                sess.seq += 1;
                EventOf { sequence: NonZeroU64::new(sess.seq).unwrap_or(NonZeroU64::MIN), ..of }
            } else {
                of
            };
            let error =
                record::error_body(&DErr::of(DaemonCode::OutboundRecordTooLarge, "the event exceeded maxEventBytes"));
            line = event_line(
                &of,
                "eventDropped",
                None,
                record::data(&v2::EventDroppedData { error, original_event: event.into() }),
            );
        }
        Some((line, to))
    }

    /// A connection opened: it may attach.
    pub fn open_conn(&mut self, conn: u64) {
        self.attachments.entry(conn).or_default();
    }

    /// A connection closed: its attachments end.
    pub fn close_conn(&mut self, conn: u64) {
        self.attachments.remove(&conn);
    }

    /// Whether a connection is attached to any session (the log of a reclaim says so).
    pub fn is_attached(&self, conn: u64) -> bool {
        self.attachments.get(&conn).is_some_and(|a| !a.is_empty())
    }

    /// `attach` (`on`) a live generation to a connection, or `detach` it: the answer with the
    /// session's current sequence. A connection that closed meanwhile attaches nothing.
    pub fn attach(&mut self, conn: u64, sid: &str, generation: u64, on: bool) -> Result<Value, DErr> {
        let key = if on { self.live(sid, generation)? } else { (sid.to_string(), generation) };
        let seq = self.sequence(sid);
        if let Some(a) = self.attachments.get_mut(&conn) {
            if on {
                a.insert(key);
            } else {
                a.remove(&key);
            }
        }
        Ok(if on {
            data(&v2::AttachedData { attached: true, generation, sequence: seq })
        } else {
            data(&v2::DetachedData { detached: true, generation, sequence: seq })
        })
    }

    /// The host snapshot at `now` with `active_turns` running (handshake and host status;
    /// SPEC §2.4).
    pub fn snapshot(&self, now: Instant, active_turns: usize) -> Value {
        self.snapshot_of(now, active_turns).to_value()
    }

    fn snapshot_of(&self, now: Instant, active_turns: usize) -> Snapshot<'_> {
        let s = &self.sessions;
        let count = |state| s.values().filter(|x| x.state == state).count() as u64;
        Snapshot {
            host_id: &self.id,
            draining: self.draining,
            active_turns: active_turns as u64,
            started_at: &self.started_at,
            uptime_ms: u64::try_from(now.saturating_duration_since(self.started).as_millis()).unwrap_or(u64::MAX),
            failed_wakes: self.failed_wakes as u64,
            indeterminate_wakes: self.indeterminate as u64,
            queued_turns: self.queued_wakes.values().sum::<usize>() as u64,
            quarantined: s.values().filter(|x| x.recovery.is_some()).map(|x| (x.id.as_str(), x.generation)).collect(),
            sessions: v2::HostSessionCounts { resident: count(SState::Active), dormant: count(SState::Dormant) },
            counters: &self.counters,
        }
    }

    /// The handshake data (SPEC §2.4): v2 adds the host-adapter capabilities.
    pub fn handshake(&self, v2: bool, now: Instant, active_turns: usize) -> Value {
        let limits = v2::DaemonLimits {
            max_connections: MAX_CONNECTIONS as u64,
            max_in_flight_requests_per_connection: MAX_IN_FLIGHT as u64,
            max_line_bytes: MAX_LINE_BYTES as u64,
            max_event_bytes: MAX_EVENT_BYTES as u64,
            max_response_bytes: MAX_RESPONSE_BYTES as u64,
            max_outbound_bytes_per_connection: MAX_OUTBOUND_BYTES as u64,
            multiplexer: "requestId".into(),
        };
        let both_names = !self.faults.has(DaemonFault::SupportedVersions033);
        let mut hs = record::handshake(v2, limits, &self.snapshot_of(now, active_turns), both_names);
        if let Some(e) = &self.leaked_endpoint {
            hs["host"]["adapterEndpointDir"] = Value::String(e.clone());
        }
        hs
    }

    /// `status`: the host snapshot, or one active session with its link's telemetry.
    pub fn status(&self, session: Option<&str>, now: Instant, active_turns: usize) -> Result<Value, DErr> {
        let Some(sid) = session else { return Ok(self.snapshot(now, active_turns)) };
        let live = |x: &&Session<L>| x.state == SState::Active && !self.faults.has(DaemonFault::SessionStatusNotFound);
        match self.sessions.get(sid).filter(live) {
            Some(x) => {
                let mut session = x.resource();
                if let Some(l) = x.link.as_ref().filter(|_| !self.faults.has(DaemonFault::StatusWithoutTelemetry)) {
                    session.tool_queue = object(&l.telemetry());
                }
                let mut answer = data(&v2::SessionStatusData { session });
                if let Some(e) = self.status_endpoints.get(sid) {
                    answer["session"]["adapterEndpoint"] = Value::String(e.clone());
                }
                Ok(answer)
            }
            None if self.faults.has(DaemonFault::QuarantinedAsReprovision)
                && self.sessions.get(sid).is_some_and(|x| x.recovery.is_some()) =>
            {
                Err(DErr::of(DaemonCode::ToolAdapterReprovisionRequired, "this generation needs its tool adapter"))
            }
            None => Err(DErr::of(DaemonCode::SessionNotFound, "no such live session")),
        }
    }

    /// The open rules of SPEC §3.4 against the session table: a stale generation, the
    /// retained-policy rules of a same-generation open, an already active generation, a
    /// tool-less generation made active again, or a new session entered (dormant until bound
    /// when it has tools) replacing an older generation.
    /// `version` is the accepted `protocolVersion`, `descriptor` the admitted one of a v2
    /// host-adapter open.
    pub fn admit_open(
        &mut self,
        version: &str,
        open: &OpenCommand,
        descriptor: Option<&Descriptor>,
    ) -> Result<OpenPlan<L>, DErr> {
        let sid = open.session_id.to_string();
        let generation = u64::try_from(open.generation.0).unwrap_or(0);
        let summary = descriptor.map(Descriptor::policy_summary);
        if self.faults.has(DaemonFault::SnapshotLeaksEndpoint) {
            if let Some(d) = descriptor {
                // Its directory, not the whole path: the runner looks for the whole path in every
                // line a client gets, the directory only in the host snapshot.
                let path = d.endpoint_path();
                self.leaked_endpoint = Some(path.rsplit_once('/').map_or(path, |(dir, _)| dir).to_string());
            }
        }
        if self.faults.has(DaemonFault::EndpointInStatus) {
            if let Some(d) = descriptor {
                self.status_endpoints.insert(open.session_id.to_string(), d.endpoint_path().to_string());
            }
        }
        let mode = open.payload.session.mode.to_string();
        let cwd = open.payload.cwd.to_string();
        let mut old_link = None;
        let mut carried_wakes = 0;
        if !self.sessions.contains_key(&sid) {
            // A new session (not a new generation of one kept): within the cap. Its own
            // retained `closed` record, if any, is replaced, not added to.
            let held =
                self.sessions.len() + self.retained_closed.len() - usize::from(self.retained_closed.contains(&sid));
            if held >= self.max_sessions {
                let max_sessions = NonZeroU64::new(self.max_sessions as u64).unwrap_or(NonZeroU64::MIN);
                return Err(DErr::of(DaemonCode::SessionCapacity, "the host keeps as many sessions as it may")
                    .with_details(&v2::SessionCapacityDetails { max_sessions }));
            }
        }
        if let Some(x) = self.sessions.get_mut(&sid) {
            if generation < x.generation {
                let e = DErr::of(DaemonCode::StaleGeneration, "a newer generation of this session exists");
                if self.faults.has(DaemonFault::StaleGenerationWithoutDetails) {
                    return Err(e);
                }
                return Err(e.with_details(&v2::GenerationDetails {
                    current_generation: x.generation,
                    received_generation: generation,
                }));
            }
            if generation == x.generation {
                let live_link = x.link.as_ref().is_some_and(|l| !l.is_failed());
                let reprovision_rule = !(self.faults.has(DaemonFault::NoReprovisionRule)
                    || live_link && self.faults.has(DaemonFault::NoToolsReopenOfLiveAccepted));
                match (&x.policy, &summary) {
                    (Some(_), None) if reprovision_rule => {
                        return Err(DErr::of(
                            DaemonCode::ToolAdapterReprovisionRequired,
                            "this generation needs its tool adapter: open it again with a descriptor",
                        ));
                    }
                    (Some(a), Some(b))
                        if if self.faults.has(DaemonFault::SummaryLimitsOnly) {
                            a["limits"] != b["limits"]
                        } else if self.faults.has(DaemonFault::SummaryFirstLimitsOnly) {
                            // Identity, operations and the size limits; not the timing ones.
                            let keep = |v: &Value| {
                                let mut v = v.clone();
                                for k in [
                                    "maxConcurrentRequests",
                                    "maxQueuedRequests",
                                    "requestTimeoutMs",
                                    "maxIdempotencyKeys",
                                    "idempotencyTtlMs",
                                ] {
                                    if let Some(l) = v["limits"].as_object_mut() {
                                        l.remove(k);
                                    }
                                }
                                v
                            };
                            keep(a) != keep(b)
                        } else {
                            a != b
                        } =>
                    {
                        return Err(DErr::of(
                            DaemonCode::SessionPolicyConflict,
                            "the tool policy differs from the retained one",
                        ));
                    }
                    (None, Some(_)) if !self.faults.has(DaemonFault::ToolsAddedOnReopen) => {
                        return Err(DErr::of(
                            DaemonCode::SessionPolicyConflict,
                            "this generation was opened without tools",
                        ));
                    }
                    _ => {}
                }
                let linked = x.link.as_ref().is_some_and(|l| !l.is_failed());
                let rebind = self.faults.has(DaemonFault::ReopenRebinds) && x.policy.is_some() && summary.is_some();
                if x.state == SState::Active && (x.policy.is_none() || linked) && !rebind {
                    return Ok(OpenPlan::Done(data(&v2::OpenData { created: false, session: Some(x.resource()) })));
                }
                if x.policy.is_none() {
                    if self.faults.has(DaemonFault::PlainReopenStaysDormant) {
                        return Ok(OpenPlan::Done(data(&v2::OpenData { created: false, session: Some(x.resource()) })));
                    }
                    x.state = SState::Active;
                    x.open_version = version.to_string();
                    return Ok(OpenPlan::Reactivated {
                        record: durable_record(x),
                        answer: data(&v2::OpenData { created: false, session: Some(x.resource()) }),
                    });
                }
                if self.faults.has(DaemonFault::FailedReprovisionClears) {
                    x.recovery = None;
                }
                return Ok(OpenPlan::Bind { old_link: None, rebind_existing: true, record: None });
            }
            old_link = x.link.take();
            carried_wakes = x.wakes;
            self.sessions.remove(&sid);
        }
        let sess = Session {
            id: sid.clone(),
            generation,
            open_version: version.to_string(),
            cwd,
            mode,
            policy: summary.clone(),
            link: None,
            handle: None,
            state: if summary.is_some() { SState::Dormant } else { SState::Active },
            recovery: None,
            seq: 0,
            turn: None,
            wakes: carried_wakes,
            closing: false,
        };
        // The retained policy is recorded before binding (SPEC §3.4): the shell queues the
        // record now, in order with every other write, and waits for it before answering.
        let mut record = durable_record(&sess);
        if self.faults.has(DaemonFault::PersistDescriptor) && descriptor.is_some() {
            if let Some(r) = record.as_mut() {
                r.policy = open.payload.resources.as_ref().and_then(|x| serde_json::to_value(&x.tools).ok());
            }
        }
        if record.is_some() {
            // Its record replaces the retained `closed` one.
            self.retained_closed.remove(&sid);
        }
        self.sessions.insert(sid, sess);
        Ok(OpenPlan::Bind { old_link, rebind_existing: false, record })
    }

    /// The adapter of `sid`'s `generation` answered `bound`: the session keeps `link` and
    /// `handle` and is active at `version`. Returns the link it replaced and the record to
    /// persist when what a restart reads changed (a cleared recovery condition or a new open
    /// version; active and dormant recover alike, so a new session's record stays as queued).
    /// `Err(link)` when that generation was replaced while binding.
    #[allow(clippy::type_complexity)]
    pub fn bound(
        &mut self,
        sid: &str,
        generation: u64,
        link: L,
        handle: CapabilityHandle,
        version: &str,
    ) -> Result<(Option<L>, Option<SessionRecord>), L> {
        let Some(x) = self.sessions.get_mut(sid).filter(|x| x.generation == generation) else { return Err(link) };
        let replaced = x.link.replace(link);
        let changed = x.recovery.is_some() || x.open_version != version;
        x.handle = Some(handle);
        x.state = SState::Active;
        x.recovery = None;
        x.open_version = version.to_string();
        Ok((replaced, if changed { durable_record(x) } else { None }))
    }

    /// Forget `sid`'s `generation` (an open that could not be persisted); its link.
    pub fn forget(&mut self, sid: &str, generation: u64) -> Option<L> {
        if self.sessions.get(sid).is_some_and(|x| x.generation == generation) {
            self.sessions.remove(sid).and_then(|x| x.link)
        } else {
            None
        }
    }

    /// One more wake key journaled for `sid`: its record's raised high-water mark to persist.
    pub fn count_wake(&mut self, sid: &str) -> Result<Option<SessionRecord>, DErr> {
        // A closing session writes nothing more: its record's removal is already queued.
        let x = self
            .sessions
            .get_mut(sid)
            .filter(|x| !x.closing)
            .ok_or_else(|| DErr::of(DaemonCode::SessionNotFound, "no such session"))?;
        x.wakes += 1;
        Ok(durable_record(x))
    }

    /// Start closing the live `generation` of `sid` (SPEC PC-2.5, DECISION on durable closes):
    /// it stops being live (no command reaches it, no wake is counted) and the store write to
    /// make durable before answering is returned — keep its record as `closed` (`retain`),
    /// remove it, or nothing (a memory session). Then [`HostCore::finish_close`] once the
    /// write is durable, or [`HostCore::cancel_close`] when it failed.
    pub fn begin_close(&mut self, sid: &str, generation: u64, retain: bool) -> Result<CloseWrite, DErr> {
        self.live(sid, generation)?;
        let Some(x) = self.sessions.get_mut(sid) else {
            return Err(DErr::of(DaemonCode::SessionNotFound, "no such live session generation"));
        };
        x.closing = true;
        Ok(if x.mode == "memory" || self.faults.has(DaemonFault::CloseNotPersisted) {
            CloseWrite::Nothing
        } else if retain {
            let mut r = x.record();
            r.state = "closed".into();
            CloseWrite::Put(Box::new(r))
        } else {
            CloseWrite::Remove
        })
    }

    /// The close of `sid`'s `generation` is durable: the session is removed (its `closed`
    /// record counted while `retained`); its link (for revocation). Nothing when that
    /// generation was replaced meanwhile.
    pub fn finish_close(&mut self, sid: &str, generation: u64, retained: bool) -> Option<L> {
        if self.sessions.get(sid).is_none_or(|x| x.generation != generation) {
            return None;
        }
        let x = self.sessions.remove(sid)?;
        if retained && x.mode != "memory" {
            self.retained_closed.insert(x.id);
        }
        x.link
    }

    /// The close of `sid`'s `generation` could not be persisted: the session is live again,
    /// exactly as it was.
    pub fn cancel_close(&mut self, sid: &str, generation: u64) {
        if let Some(x) = self.sessions.get_mut(sid).filter(|x| x.generation == generation) {
            x.closing = false;
        }
    }

    /// Take every link (shutdown revokes them).
    pub fn take_links(&mut self) -> Vec<L> {
        self.sessions.values_mut().filter_map(|x| x.link.take()).collect()
    }

    /// A session's link, when bound.
    pub fn link(&self, sid: &str) -> Option<L> {
        self.sessions.get(sid).and_then(|x| x.link.clone())
    }

    /// A session's current event sequence (0 when unknown).
    pub fn sequence(&self, sid: &str) -> u64 {
        self.sessions.get(sid).map(|x| x.seq).unwrap_or(0)
    }

    /// `abort`: flag the running turn of a live generation; whether there was one.
    pub fn abort(&self, sid: &str, generation: u64) -> Result<Value, DErr> {
        let (sid, _) = self.live(sid, generation)?;
        let aborted = self.sessions.get(&sid).and_then(|x| x.turn.as_ref()).map(|a| a.abort()).is_some();
        Ok(data(&v2::AbortData { aborted }))
    }

    /// Start a turn in a session: its abort handle, or `session_busy` / `session_not_found`.
    pub fn begin_turn(&mut self, sid: &str) -> Result<Arc<TurnAbort>, DErr> {
        let x = self.sessions.get_mut(sid).ok_or_else(|| DErr::of(DaemonCode::SessionNotFound, "no such session"))?;
        if x.turn.is_some() {
            return Err(DErr::of(DaemonCode::SessionBusy, "a turn is running"));
        }
        let abort = Arc::new(TurnAbort::default());
        x.turn = Some(abort.clone());
        Ok(abort)
    }

    /// Queue one more wake behind `sid`'s running turn: false when [`MAX_QUEUED_WAKES`] wait.
    pub fn queue_wake(&mut self, sid: &str) -> bool {
        let n = self.queued_wakes.entry(sid.to_string()).or_insert(0);
        if *n >= MAX_QUEUED_WAKES {
            return false;
        }
        *n += 1;
        true
    }

    /// A queued wake of `sid` stopped waiting (its turn began, or it failed).
    pub fn unqueue_wake(&mut self, sid: &str) {
        if let Some(n) = self.queued_wakes.get_mut(sid) {
            *n -= 1;
            if *n == 0 {
                self.queued_wakes.remove(sid);
            }
        }
    }

    /// A session's turn ended.
    pub fn end_turn(&mut self, sid: &str) {
        if let Some(x) = self.sessions.get_mut(sid) {
            x.turn = None;
        }
    }

    /// How many turns run (a fault's drain counts them without aborting them).
    pub fn running_turns(&self) -> usize {
        self.sessions.values().filter(|x| x.turn.is_some()).count()
    }

    /// Flag every running turn aborted (a drain that timed out); how many.
    pub fn abort_all_turns(&self) -> usize {
        let mut n = 0;
        for a in self.sessions.values().filter_map(|x| x.turn.as_ref()) {
            a.abort();
            n += 1;
        }
        n
    }

    /// A session's resource, when it exists.
    pub fn resource(&self, sid: &str) -> Option<v2::SessionResource> {
        self.sessions.get(sid).map(Session::resource)
    }
}

/// `cwd`, `agentDir` and `session.sessionDir` must be absolute at dispatch. The command parser
/// accepts relative forms as Pi Daemon 0.3.3's validator does (it then resolves them against
/// its own working directory, and fails the open); the reference daemon fails the open at once
/// with a cause naming the field, before anything touches the filesystem.
pub fn check_absolute_paths(p: &OpenPayload, major: u8) -> Result<(), DErr> {
    // v1 ignores sessionDir.
    let session_dir = p.session.session_dir.as_deref().filter(|_| major == 2);
    for (field, v) in [
        ("payload.cwd", Some(&*p.cwd)),
        ("payload.agentDir", p.agent_dir.as_deref()),
        ("payload.session.sessionDir", session_dir),
    ] {
        if v.is_some_and(|s| !s.starts_with('/')) {
            let cause = v2::OpenFailureCause {
                code: None,
                message: format!("{field} must be an absolute path"),
                name: "InvalidPath".into(),
            };
            return Err(DErr::of(DaemonCode::OpenFailed, "failed to open logical session")
                .with_details(&v2::OpenFailedDetails { cause }));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::contract::{parse_command, HostContext};

    const HOST: &str = "host-core-test";

    /// A link the core can hold: a name and whether it failed.
    #[derive(Clone, Debug, PartialEq)]
    struct FakeLink(&'static str, bool);

    impl LinkState for FakeLink {
        fn telemetry(&self) -> Value {
            json!({"link": self.0})
        }
        fn is_failed(&self) -> bool {
            self.1
        }
    }

    /// An open command through the contract, as the shell hands it over.
    fn open(sid: &str, generation: u64, mode: &str) -> OpenCommand {
        let v = json!({"protocolVersion": "2.0", "requestId": "o", "operation": "open", "sessionId": sid,
            "generation": generation, "payload": {"cwd": "/w", "session": {"mode": mode},
            "resources": crate::contract::resources_with_tools(json!("none"))}});
        match parse_command(&v, &HostContext { host_instance_id: HOST }).expect("a valid command").body {
            crate::contract::types::protocol_v2::Command::OpenCommand(o) => o,
            other => panic!("not an open: {other:?}"),
        }
    }

    fn admit(core: &mut HostCore<FakeLink>, o: &OpenCommand) -> Result<OpenPlan<FakeLink>, DErr> {
        core.admit_open("2.0", o, None)
    }

    fn session(sid: &str, generation: u64, state: &str, policy: Option<Value>) -> SessionRecord {
        SessionRecord {
            session_id: sid.into(),
            generation,
            open_version: "2.0".into(),
            cwd: "/w".into(),
            mode: "new".into(),
            policy,
            state: state.into(),
            recovery: None,
            wakes: 1,
        }
    }

    fn wake(sid: &str, generation: u64, key: &str, state: &str) -> WakeRecord {
        WakeRecord {
            session_id: sid.into(),
            generation,
            idempotency_key: key.into(),
            fingerprint: "f".into(),
            state: state.into(),
            result: None,
            error: None,
        }
    }

    fn empty(now: Instant) -> HostCore<FakeLink> {
        HostCore::recover(HOST.into(), Loaded { sessions: vec![], wakes: vec![] }, DaemonFaults::NONE, now, 0).core
    }

    #[test]
    fn recovery_quarantines_tool_sessions_and_settles_wakes_without_any_io() {
        let t0 = Instant::now();
        let loaded = Loaded {
            sessions: vec![
                session("tools", 3, "active", Some(json!({"adapterId": "a"}))),
                session("plain", 1, "dormant", None),
                session("gone", 1, "closed", None),
            ],
            wakes: vec![
                wake("tools", 3, "k1", "queued"),
                wake("plain", 1, "k2", "queued"),
                wake("plain", 1, "k3", "accepted"),
                wake("plain", 1, "k4", "indeterminate"),
                wake("plain", 1, "k5", "completed"),
            ],
        };
        let r = HostCore::<FakeLink>::recover(HOST.into(), loaded, DaemonFaults::NONE, t0, 951_782_400);
        // No session record is rewritten; the tool session is quarantined in memory.
        assert_eq!(r.core.sessions["tools"].recovery.as_ref().map(data), Some(quarantine_condition()));
        assert_eq!(r.core.sessions["tools"].state, SState::Dormant);
        assert!(r.core.sessions["plain"].recovery.is_none());
        assert_eq!(r.core.session_count(), (3, MAX_SESSIONS), "the retained closed record counts");
        let codes: Vec<(String, String, Option<Value>)> = r
            .wakes
            .iter()
            .map(|w| (w.idempotency_key.clone(), w.state.clone(), w.error.as_ref().map(|e| e["code"].clone())))
            .collect();
        assert_eq!(
            codes,
            vec![
                ("k1".into(), "failed".into(), Some(json!("tool_adapter_reprovision_required"))),
                ("k2".into(), "failed".into(), Some(json!("host_restarted"))),
                ("k3".into(), "indeterminate".into(), None),
            ]
        );
        assert!(r.wakes.iter().filter_map(|w| w.error.as_ref()).all(|e| e["retryable"] == false));
        let snap = r.core.snapshot(t0 + Duration::from_millis(1500), 2);
        assert_eq!(snap["startedAt"], "2000-02-29T00:00:00Z");
        assert_eq!(snap["uptimeMs"], 1500, "uptime from the time it is given");
        assert_eq!(snap["activeTurns"], 2);
        assert_eq!(snap["ready"], false);
        assert_eq!(snap["recovery"]["phase"], "degraded");
        assert_eq!(snap["recovery"]["failedWakes"], 2);
        assert_eq!(snap["recovery"]["indeterminateWakes"], 2);
        assert_eq!(snap["recovery"]["failureCodes"], json!({"request_indeterminate": 2}));
        assert_eq!(snap["recovery"]["quarantinedSessions"][0]["sessionId"], "tools");
        assert_eq!(snap["recovery"]["quarantinedSessions"][0]["retryable"], true);
        assert_eq!(snap["sessions"], json!({"resident": 0, "dormant": 2}));
    }

    #[test]
    fn a_session_queues_at_most_max_queued_wakes() {
        let loaded = Loaded { sessions: vec![], wakes: vec![] };
        let mut core = HostCore::<FakeLink>::recover(HOST.into(), loaded, DaemonFaults::NONE, Instant::now(), 0).core;
        assert!((0..MAX_QUEUED_WAKES).all(|_| core.queue_wake("s")));
        assert!(!core.queue_wake("s"), "one past the queue");
        assert!(core.queue_wake("t"), "each session has its own queue");
        assert_eq!(core.snapshot(Instant::now(), 1)["queuedTurns"], (MAX_QUEUED_WAKES + 1) as u64);
        core.unqueue_wake("s");
        assert!(core.queue_wake("s"), "a slot freed");
        (0..=MAX_QUEUED_WAKES).for_each(|_| core.unqueue_wake("s"));
        core.unqueue_wake("t");
        assert_eq!(core.snapshot(Instant::now(), 0)["queuedTurns"], 0);
    }

    #[test]
    fn a_quarantined_generation_needs_its_descriptor_again() {
        let t0 = Instant::now();
        let loaded = Loaded { sessions: vec![session("tools", 3, "active", Some(json!({"a": 1})))], wakes: vec![] };
        let mut core = HostCore::<FakeLink>::recover(HOST.into(), loaded, DaemonFaults::NONE, t0, 0).core;
        let e = admit(&mut core, &open("tools", 3, "new")).err().expect("refused");
        assert_eq!((e.code.as_str(), e.retryable), ("tool_adapter_reprovision_required", true));
        let e = core.live("tools", 3).unwrap_err();
        assert_eq!(e.code, "session_not_found", "a dormant generation is not live");
    }

    #[test]
    fn open_admission_new_reopen_stale_and_replacement() {
        let mut core = empty(Instant::now());
        let Ok(OpenPlan::Bind { old_link: None, rebind_existing: false, record: Some(rec) }) =
            admit(&mut core, &open("s", 2, "new"))
        else {
            panic!("a new durable session is bound with its record queued")
        };
        assert_eq!((rec.session_id.as_str(), rec.generation, rec.state.as_str()), ("s", 2, "active"));
        assert_eq!(core.live("s", 2).unwrap(), ("s".to_string(), 2));
        // The same generation again: answered at once, not created.
        let Ok(OpenPlan::Done(answer)) = admit(&mut core, &open("s", 2, "new")) else { panic!("answered") };
        assert_eq!(answer["created"], false);
        assert_eq!(answer["session"]["generation"], 2);
        // A lower generation: stale, with both numbers.
        let e = admit(&mut core, &open("s", 1, "new")).err().unwrap();
        assert_eq!(e.code, "stale_generation");
        assert_eq!(e.details["currentGeneration"], 2);
        assert_eq!(e.details["receivedGeneration"], 1);
        let e = core.live("s", 1).unwrap_err();
        assert_eq!(e.code, "stale_generation");
        // A higher generation replaces it and hands its link back for revocation.
        core.sessions.get_mut("s").unwrap().link = Some(FakeLink("old", false));
        let Ok(OpenPlan::Bind { old_link, rebind_existing: false, .. }) = admit(&mut core, &open("s", 3, "memory"))
        else {
            panic!("replaced")
        };
        assert_eq!(old_link, Some(FakeLink("old", false)));
        assert_eq!(core.live("s", 2).unwrap_err().code, "stale_generation");
        // A memory session queues no record.
        let Ok(OpenPlan::Bind { record: None, .. }) = admit(&mut core, &open("m", 1, "memory")) else {
            panic!("memory session")
        };
    }

    #[test]
    fn bound_forget_and_close_return_what_the_shell_must_do() {
        let mut core = empty(Instant::now());
        let _ = admit(&mut core, &open("s", 1, "new")).ok().unwrap();
        let handle = crate::contract::CapabilityHandle::new("h".repeat(43));
        let (replaced, record) = core.bound("s", 1, FakeLink("a", false), handle.clone(), "2.0").unwrap();
        assert_eq!((replaced, record), (None, None), "nothing a restart reads changed");
        assert_eq!(core.handles(), vec![handle.clone()]);
        let st = core.status(Some("s"), Instant::now(), 0).unwrap();
        assert_eq!(st["session"]["toolQueue"], json!({"link": "a"}));
        let (replaced, record) = core.bound("s", 1, FakeLink("b", false), handle.clone(), "2.3").unwrap();
        assert_eq!(replaced, Some(FakeLink("a", false)));
        assert_eq!(record.map(|r| r.open_version), Some("2.3".into()), "a new open version is persisted");
        assert_eq!(core.bound("s", 9, FakeLink("c", false), handle.clone(), "2.0").unwrap_err(), FakeLink("c", false));
        let CloseWrite::Put(r) = core.begin_close("s", 1, true).unwrap() else { panic!("retained") };
        assert_eq!(r.state, "closed");
        // While the close is persisted the session is not live, and writes nothing more.
        assert_eq!(core.live("s", 1).unwrap_err().code, "session_not_found");
        assert_eq!(core.count_wake("s").unwrap_err().code, "session_not_found");
        assert_eq!(core.begin_close("s", 1, true).unwrap_err().code, "session_not_found", "one close at a time");
        // A close that could not be persisted leaves the session as it was.
        core.cancel_close("s", 1);
        assert_eq!(core.live("s", 1).unwrap(), ("s".to_string(), 1));
        assert_eq!(core.handles(), vec![handle.clone()]);
        assert_eq!(core.begin_close("s", 2, true).unwrap_err().code, "session_not_found", "only the live generation");
        let CloseWrite::Put(_) = core.begin_close("s", 1, true).unwrap() else { panic!("retained") };
        assert_eq!(core.finish_close("s", 1, true), Some(FakeLink("b", false)));
        assert!(core.handles().is_empty());
        let _ = admit(&mut core, &open("t", 1, "new")).ok().unwrap();
        assert_eq!(core.begin_close("t", 1, false).unwrap(), CloseWrite::Remove);
        assert_eq!(core.finish_close("t", 1, false), None);
        let _ = admit(&mut core, &open("m", 1, "memory")).ok().unwrap();
        assert_eq!(core.begin_close("m", 1, false).unwrap(), CloseWrite::Nothing, "a memory session writes nothing");
        let _ = admit(&mut core, &open("u", 1, "new")).ok().unwrap();
        core.sessions.get_mut("u").unwrap().link = Some(FakeLink("u", false));
        assert_eq!(core.forget("u", 2), None, "another generation is left alone");
        assert_eq!(core.forget("u", 1), Some(FakeLink("u", false)));
        assert_eq!(core.status(Some("u"), Instant::now(), 0).unwrap_err().code, "session_not_found");
    }

    #[test]
    fn events_take_the_next_sequence_and_oversized_ones_are_dropped() {
        let mut core = empty(Instant::now());
        let _ = admit(&mut core, &open("s", 1, "new")).ok().unwrap();
        // With nobody attached the sequence is taken and no line is built.
        assert_eq!(core.deliver("s", 1, "opened", Some("o"), json!({"created": true})), Some((Vec::new(), vec![])));
        core.open_conn(1);
        core.attach(1, "s", 1, true).unwrap();
        let line = core.deliver("s", 1, "opened", Some("o"), json!({"created": true})).unwrap().0;
        let v: Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(
            (v["sequence"].clone(), v["event"].clone(), v["requestId"].clone()),
            (json!(2), json!("opened"), json!("o"))
        );
        assert_eq!(v["hostInstanceId"], HOST);
        assert!(core.deliver("s", 2, "x", None, json!({})).is_none(), "another generation has no events");
        let big = core.deliver("s", 1, "agentText", None, json!({"t": "x".repeat(MAX_EVENT_BYTES)})).unwrap().0;
        let v: Value = serde_json::from_slice(&big).unwrap();
        assert_eq!(v["event"], "eventDropped");
        assert_eq!(v["sequence"], 3);
        assert_eq!(v["data"]["error"]["code"], "outbound_record_too_large");
        assert_eq!(core.sequence("s"), 3);
    }

    #[test]
    fn events_go_to_the_connections_attached_to_that_generation() {
        let mut core = empty(Instant::now());
        let _ = admit(&mut core, &open("s", 1, "new")).ok().unwrap();
        core.open_conn(7);
        core.open_conn(8);
        core.open_conn(9);
        assert!(!core.is_attached(7));
        assert_eq!(core.attach(7, "s", 1, true).unwrap(), json!({"attached": true, "generation": 1, "sequence": 0}));
        let _ = core.attach(9, "s", 1, true).unwrap();
        assert_eq!(core.attach(8, "s", 2, true).unwrap_err().code, "session_not_found", "only a live generation");
        assert!(core.is_attached(7) && !core.is_attached(8));
        let (line, to) = core.deliver("s", 1, "opened", Some("o"), json!({})).unwrap();
        assert_eq!(to, vec![7, 9]);
        assert_eq!(serde_json::from_slice::<Value>(&line).unwrap()["sequence"], 1);
        assert_eq!(core.attach(9, "s", 1, false).unwrap(), json!({"detached": true, "generation": 1, "sequence": 1}));
        core.close_conn(7);
        assert!(!core.is_attached(7));
        assert_eq!(core.deliver("s", 1, "x", None, json!({})).unwrap().1, Vec::<u64>::new());
        // A connection that closed before its attach was answered attaches nothing.
        let _ = core.attach(7, "s", 1, true).unwrap();
        assert!(!core.is_attached(7));
        assert!(core.deliver("s", 5, "x", None, json!({})).is_none(), "another generation has no events");
    }

    #[test]
    fn turns_are_exclusive_and_abortable() {
        let mut core = empty(Instant::now());
        let _ = admit(&mut core, &open("s", 1, "new")).ok().unwrap();
        let flag = core.begin_turn("s").unwrap();
        let e = core.begin_turn("s").unwrap_err();
        assert_eq!((e.code.as_str(), e.retryable), ("session_busy", true));
        assert!(core.resource("s").unwrap().busy);
        assert_eq!(core.abort("s", 1).unwrap(), json!({"aborted": true}));
        assert!(flag.requested());
        assert_eq!(core.abort_all_turns(), 1);
        core.end_turn("s");
        assert_eq!(core.abort("s", 1).unwrap(), json!({"aborted": false}));
        assert_eq!(core.begin_turn("nope").unwrap_err().code, "session_not_found");
    }

    #[test]
    fn the_handshake_is_built_from_the_core_and_the_given_time() {
        let t0 = Instant::now();
        let core = empty(t0);
        let v1 = core.handshake(false, t0 + Duration::from_millis(7), 0);
        assert_eq!(v1["host"]["uptimeMs"], 7);
        assert!(v1["capabilities"].get("hostToolAdapter").is_none());
        assert_eq!(v1["limits"]["maxInFlightRequestsPerConnection"], MAX_IN_FLIGHT);
        let v2 = core.handshake(true, t0, 0);
        assert_eq!(v2["capabilities"]["hostToolAdapter"], true);
        assert_eq!(v2["supportedVersions"], json!(["1.0", "2.0"]));
        let faulty: HostCore<FakeLink> = HostCore::recover(
            HOST.into(),
            Loaded { sessions: vec![], wakes: vec![] },
            DaemonFault::SupportedVersions033.into(),
            t0,
            0,
        )
        .core;
        assert!(faulty.handshake(true, t0, 0).get("supportedVersions").is_none());
    }

    #[test]
    fn utc_formatting() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_796_320_763), "2026-12-03T17:59:23Z");
    }
}
