//! The daemon side of one adapter connection as a sans-I/O state machine (SPEC §1.2, §3.4,
//! §4.3, §4.4): one bound capability of one session generation.
//!
//! The shell (`daemon::link`) feeds it the bytes it reads, end of input, socket errors and
//! the time (`handle_*`, every one takes `now`; nothing here reads a clock), and takes from
//! it the lines to write ([`AdapterRuntime::poll_transmit`]), what happened
//! ([`AdapterRuntime::poll_event`]) and when to wake it next
//! ([`AdapterRuntime::poll_timeout`]). The `requestId`s it sends come from the [`Rng`] the
//! shell gives it (no OS randomness here). Every frame rule comes from `contract`
//! ([`judge_adapter_frame`]); this module keeps the state: the handshake, admission, the
//! queue, timeouts, tombstones of aborted requests and the content-free telemetry.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use super::faults::{DaemonFault, DaemonFaults};
use super::ids::{uuid_v4, Rng};
use crate::contract::compose;
use crate::contract::frame::{judge_adapter_frame, Binding, Direction, Disposition, FrameError, FrameKind};
use crate::contract::operation::is_mutating;
use crate::contract::types::tool_adapter::ToolOperation;
use crate::contract::{Code, DaemonCode, Descriptor};
use crate::wire::{decode_strict, encode_line, LineDecoder};

/// The active calls of every runtime of the process, counted only under
/// [`DaemonFault::SharedAdapterQueue`] (one queue for all sessions, a fault).
static SHARED_ACTIVE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
/// Deadlines closer together than this expire together (the resolution of the shell's timer).
pub const TIMER_GRANULARITY: Duration = Duration::from_millis(1);

/// Why a connection could not be opened (SPEC §1.2, §3.4). `Display` never contains the
/// capability handle, a path or a payload: the message is a fixed, generic sentence.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct LinkError {
    /// An `adapter_*` code ([`DaemonCode`] or [`Code`]).
    pub code: &'static str,
    /// A short, content-free explanation.
    pub message: String,
}

impl LinkError {
    /// An error with `code` and a generic message.
    pub fn new(code: &'static str, message: impl Into<String>) -> Self {
        Self { code, message: message.into() }
    }

    /// The generic error for a connection that failed with `code`.
    pub fn from_code(code: &'static str) -> Self {
        Self::new(code, failure_message(code))
    }
}

/// Why one call did not produce data: a daemon-side refusal or failure (`adapter_*`), or the
/// adapter's own `result ok:false` error (its code, message and `retryable`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct CallError {
    /// The error code.
    pub code: String,
    /// A short, content-free message.
    pub message: String,
    /// Whether the same request may succeed later.
    pub retryable: bool,
    /// The invoke reached the adapter and its outcome is unknown: never replay it blindly.
    pub indeterminate: bool,
    /// For `adapter_queue_capacity`: when to retry.
    pub retry_after_ms: Option<u64>,
}

impl CallError {
    fn local(code: &str, message: &str) -> Self {
        Self {
            code: code.to_string(),
            message: message.to_string(),
            retryable: false,
            indeterminate: false,
            retry_after_ms: None,
        }
    }

    /// The protocol's error body `{code, message, retryable, details?}`; `details` carries
    /// `indeterminate` and `retryAfterMs` when they apply.
    pub fn to_body(&self) -> Value {
        let mut body = json!({"code": self.code, "message": self.message, "retryable": self.retryable});
        let mut details = Map::new();
        if self.indeterminate {
            details.insert("indeterminate".into(), Value::Bool(true));
        }
        if let Some(ms) = self.retry_after_ms {
            details.insert("retryAfterMs".into(), ms.into());
        }
        if !details.is_empty() {
            body["details"] = Value::Object(details);
        }
        body
    }
}

/// A generic message for a connection failure code.
pub fn failure_message(code: &str) -> &'static str {
    if let Some(c) = DaemonCode::from_wire(code) {
        match c {
            DaemonCode::AdapterEndpointInsecure => "adapter endpoint is not an owner-private socket",
            DaemonCode::AdapterConnectTimeout => "connecting to the adapter timed out",
            DaemonCode::AdapterBindTimeout => "the adapter did not answer bound in time",
            DaemonCode::AdapterConnectionClosed => "the adapter closed the connection",
            DaemonCode::AdapterAbortCapacity => "too many aborted requests await acknowledgement",
            DaemonCode::AdapterRevoked => "the adapter binding was revoked",
            _ => "the adapter connection failed",
        }
    } else {
        match Code::from_wire(code) {
            Some(Code::AdapterProtocolInvalid) => "the adapter broke the frame protocol",
            Some(Code::AdapterSecretReflected) => "the adapter reflected the capability handle",
            Some(Code::AdapterResponseMismatch) => "the adapter sent a frame that matches no request",
            _ => "the adapter connection failed",
        }
    }
}

/// `max(25, min(1000, floor(requestTimeoutMs / 20)))` (SPEC §4.4): the contract's rule.
pub use crate::contract::retry_after_ms;

/// `"tool-" + hex(sha256(operation ‖ 0x00 ‖ toolCallId))`, as Pi Daemon 0.3.3 derives it
/// (SPEC §4.4): a retry of the same tool call keeps its key.
pub fn idempotency_key(op: ToolOperation, tool_call_id: &str) -> String {
    let mut h = Sha256::new();
    h.update(op.to_string().as_bytes());
    h.update([0u8]);
    h.update(tool_call_id.as_bytes());
    format!("tool-{}", hex::encode(h.finalize()))
}

/// A line to write, LF included. It may be the `bind` (which carries the handle), so its
/// `Debug` prints only the length.
#[derive(Clone, PartialEq, Eq)]
pub struct OutLine(Vec<u8>);

impl OutLine {
    /// The bytes to write.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The bytes, owned.
    pub fn into_bytes(self) -> Vec<u8> {
        self.0
    }
}

impl std::fmt::Debug for OutLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "OutLine({} bytes)", self.0.len())
    }
}

/// One admitted call, as the caller knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CallId(u64);

/// What happened.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// The adapter answered a valid `bound`: calls may flow.
    Bound,
    /// A call finished: the adapter's data, or why not.
    Completed {
        /// Which call.
        call: CallId,
        /// Its outcome.
        outcome: Result<Value, CallError>,
    },
    /// The connection failed with this code: destroy the socket. Every pending call has
    /// already been completed with the same code.
    Failed(&'static str),
}

/// Where the connection is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// `bind` sent (or queued), waiting for `bound`.
    Binding,
    /// Bound: calls flow.
    Bound,
    /// Failed with a code; nothing more happens.
    Failed(&'static str),
    /// Revoked by the daemon: the `revoke` line is queued; input is ignored.
    Revoked,
}

impl State {
    fn name(self) -> &'static str {
        match self {
            State::Binding => "binding",
            State::Bound => "bound",
            State::Failed(_) => "failed",
            State::Revoked => "revoked",
        }
    }
}

/// The tool call id suffix of a call replayed under [`DaemonFault::TimedOutCallReplayed`]
/// (replayed once: a replay is not replayed again).
const REPLAY_SUFFIX: &str = "~replayed";

#[derive(Debug)]
struct Call {
    op: ToolOperation,
    request_id: String,
    key: String,
    /// The invoke line until it is written.
    line: Option<Vec<u8>>,
    admitted: Instant,
    deadline: Instant,
    dispatched: Option<Instant>,
    /// `fs.write` / `fs.edit` run one at a time per path (SPEC §4.4).
    path_lock: Option<String>,
    /// Under [`DaemonFault::TimedOutCallReplayed`]: the payload and tool call id, to send the
    /// call again once it timed out (`None` otherwise).
    replay: Option<(Value, String)>,
}

#[derive(Debug)]
struct Tombstone {
    key: String,
    op: ToolOperation,
    abort_request_id: String,
    expires: Instant,
    result_dropped: bool,
}

#[derive(Clone, Copy, Debug, Default)]
struct Summary {
    count: u64,
    min: Duration,
    max: Duration,
    sum: Duration,
}

impl Summary {
    fn record(&mut self, d: Duration) {
        if self.count == 0 || d < self.min {
            self.min = d;
        }
        if d > self.max {
            self.max = d;
        }
        self.count += 1;
        self.sum += d;
    }

    fn to_json(self) -> Value {
        let ms = |d: Duration| (d.as_secs_f64() * 1_000_000.0).round() / 1000.0;
        if self.count == 0 {
            return json!({"count": 0, "min": null, "max": null, "mean": null});
        }
        json!({
            "count": self.count,
            "min": ms(self.min),
            "max": ms(self.max),
            "mean": (self.sum.as_secs_f64() * 1_000_000.0 / self.count as f64).round() / 1000.0,
        })
    }
}

/// Content-free counters (SPEC §4.4).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Calls admitted (sent at once or queued).
    pub accepted: u64,
    /// Calls answered `ok:true`.
    pub completed: u64,
    /// Calls answered `ok:false`, or failed with the connection.
    pub failed: u64,
    /// Calls refused before admission (capacity, validation, state).
    pub rejected: u64,
    /// Calls cancelled by the caller or by revocation.
    pub cancelled: u64,
    /// Calls whose `requestTimeoutMs` expired.
    pub timed_out: u64,
}

/// One bound adapter connection of one session generation (see the module docs).
pub struct AdapterRuntime {
    binding: Binding,
    /// Where the `requestId`s of invokes and aborts come from.
    rng: Box<dyn Rng>,
    state: State,
    decoder: LineDecoder,
    bind_deadline: Instant,
    next_call: u64,
    /// Admitted and not finished, in admission order.
    calls: BTreeMap<CallId, Call>,
    /// Admitted and not yet sent, in admission order.
    queue: VecDeque<CallId>,
    /// Sent and unanswered, by requestId.
    active: HashMap<String, CallId>,
    locked_paths: HashSet<String>,
    /// Aborted (or timed out) on the wire and not yet acknowledged, by target requestId.
    tombstones: HashMap<String, Tombstone>,
    transmit: VecDeque<OutLine>,
    events: VecDeque<Event>,
    counters: Counters,
    high_active: usize,
    high_queued: usize,
    last_refusal: Option<String>,
    queue_wait: BTreeMap<ToolOperation, Summary>,
    latency: BTreeMap<ToolOperation, Summary>,
    faults: DaemonFaults,
    /// Completed requestIds, kept only under [`DaemonFault::IgnoreDuplicateResults`].
    completed: HashSet<String>,
}

impl std::fmt::Debug for AdapterRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdapterRuntime")
            .field("state", &self.state)
            .field("active", &self.active.len())
            .field("queued", &self.queue.len())
            .field("tombstones", &self.tombstones.len())
            .field("counters", &self.counters)
            .finish_non_exhaustive()
    }
}

fn frame_code(e: &FrameError) -> &'static str {
    match e.error.code {
        Code::AdapterSecretReflected => Code::AdapterSecretReflected.as_str(),
        _ => Code::AdapterProtocolInvalid.as_str(),
    }
}

impl AdapterRuntime {
    /// A connection for an admitted descriptor, just connected at `now`: the `bind` line is
    /// queued and `bound` is due within `requestTimeoutMs`.
    /// Every `requestId` it sends is a UUID drawn from `rng`.
    pub fn new(descriptor: &Descriptor, now: Instant, rng: Box<dyn Rng>) -> Self {
        Self::new_with(descriptor, now, rng, DaemonFaults::NONE)
    }

    /// [`AdapterRuntime::new`] with fault switches: the runtime is broken on purpose (test
    /// aid for the daemon kill matrix; see [`crate::daemon::faults`]).
    pub fn new_with(descriptor: &Descriptor, now: Instant, rng: Box<dyn Rng>, faults: DaemonFaults) -> Self {
        let binding = Binding::from(descriptor);
        let limits = *binding.limits();
        let mut transmit = VecDeque::new();
        transmit.push_back(OutLine(encode_line(&descriptor.bind_frame())));
        Self {
            // Adapter lines are at most maxResponseBytes, LF included.
            decoder: LineDecoder::new((limits.max_response_bytes as usize).saturating_sub(
                if faults.has(DaemonFault::AdapterLineOnePast) {
                    0
                } else if faults.has(DaemonFault::AdapterLineAtLimitRefused) {
                    2
                } else {
                    1
                },
            )),
            bind_deadline: now + Duration::from_millis(limits.request_timeout_ms as u64),
            binding,
            rng,
            state: State::Binding,
            next_call: 0,
            calls: BTreeMap::new(),
            queue: VecDeque::new(),
            active: HashMap::new(),
            locked_paths: HashSet::new(),
            tombstones: HashMap::new(),
            completed: HashSet::new(),
            transmit,
            events: VecDeque::new(),
            counters: Counters::default(),
            high_active: 0,
            high_queued: 0,
            last_refusal: None,
            queue_wait: BTreeMap::new(),
            latency: BTreeMap::new(),
            faults,
        }
    }

    /// Where the connection is.
    pub fn state(&self) -> State {
        self.state
    }

    /// The failure code, once the connection failed.
    pub fn failure(&self) -> Option<&'static str> {
        match self.state {
            State::Failed(c) => Some(c),
            _ => None,
        }
    }

    /// Failed or revoked: the shell flushes what is queued and closes.
    pub fn is_closed(&self) -> bool {
        matches!(self.state, State::Failed(_) | State::Revoked)
    }

    /// Counters so far.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// Calls sent and unanswered.
    pub fn active(&self) -> usize {
        self.active.len()
    }

    /// Calls admitted and not yet sent.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Tombstones alive (aborted requests awaiting their `aborted`).
    pub fn tombstones(&self) -> usize {
        self.tombstones.len()
    }

    /// The next line to write.
    pub fn poll_transmit(&mut self) -> Option<OutLine> {
        self.transmit.pop_front()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When to call [`AdapterRuntime::handle_timeout`] next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.state {
            State::Binding if !self.faults.has(DaemonFault::NoBindTimeout) => Some(self.bind_deadline),
            State::Bound => self.calls.values().map(|c| c.deadline).min(),
            _ => None,
        }
    }

    /// Admit a call (SPEC §4.4). On success the invoke is queued for writing now, or waits
    /// for a free slot. Every refusal happens before any wire write.
    pub fn begin_call(
        &mut self,
        now: Instant,
        op: ToolOperation,
        payload: Value,
        tool_call_id: &str,
    ) -> Result<CallId, CallError> {
        self.expire(now);
        let r = self.admit(now, op, payload, tool_call_id);
        match &r {
            Ok(_) => self.counters.accepted += 1,
            Err(e) => {
                if self.faults.has(DaemonFault::TelemetryCallsWrap) {
                    self.counters.rejected = self.counters.rejected.wrapping_sub(1);
                } else {
                    self.counters.rejected += 1;
                }
                self.last_refusal = Some(e.code.clone());
            }
        }
        r
    }

    fn admit(
        &mut self,
        now: Instant,
        op: ToolOperation,
        payload: Value,
        tool_call_id: &str,
    ) -> Result<CallId, CallError> {
        match self.state {
            State::Binding => {
                return Err(CallError::local(
                    DaemonCode::AdapterNotBound.as_str(),
                    "the adapter binding is not complete",
                ))
            }
            State::Failed(code) => return Err(CallError::local(code, failure_message(code))),
            State::Revoked => {
                return Err(CallError::local(
                    DaemonCode::AdapterRevoked.as_str(),
                    failure_message(DaemonCode::AdapterRevoked.as_str()),
                ))
            }
            State::Bound => {}
        }
        // The daemon side sends canonical paths only (SPEC §5.1).
        let path = payload.get("path").and_then(Value::as_str).map(str::to_string);
        let passed = path.as_deref().is_some_and(|p| super::faults::path_passed(p, self.faults));
        if let Some(p) = &path {
            if !passed {
                crate::contract::validate_relative_path(p, crate::contract::PathSide::Daemon, "payload.path")
                    .map_err(|e| CallError::local(e.code.as_str(), &e.message))?;
            }
        }
        let request_id = uuid_v4(self.rng.as_mut());
        let key = if self.faults.has(DaemonFault::OneIdempotencyKeyPerOperation) {
            // Under the fault: the key names the operation, not the tool call.
            idempotency_key(op, "")
        } else {
            idempotency_key(op, tool_call_id)
        };
        let replay = self
            .faults
            .has(DaemonFault::TimedOutCallReplayed)
            .then(|| (payload.clone(), tool_call_id.to_string()))
            .filter(|(_, t)| !t.ends_with(REPLAY_SUFFIX));
        let frame = self.binding.identity().frame(
            "invoke",
            [
                ("requestId", Value::String(request_id.clone())),
                ("idempotencyKey", Value::String(key.clone())),
                ("operation", Value::String(op.to_string())),
                ("payload", payload),
            ],
        );
        let mut line = encode_line(&frame);
        // Never send what a conforming adapter must refuse: the contract judges the invoke
        // exactly as the adapter will (size, handle, ids, grant, payload).
        let judged_len = if self.faults.has(DaemonFault::InvokeLimitOneShort) { line.len() } else { line.len() - 1 };
        let judged = judge_adapter_frame(&line[..judged_len], &self.binding, Direction::ToAdapter)
            // Under a path fault, the path the fault let through is sent as it is.
            .map(|_| ())
            .or_else(|e| if passed && e.error.field() == "payload.path" { Ok(()) } else { Err(e) })
            .or_else(|e| {
                let ignored = self.faults.has(DaemonFault::IgnoreOperationGrant)
                    && e.error.code == crate::contract::Code::OperationNotGranted;
                if ignored {
                    Ok(())
                } else {
                    Err(e)
                }
            })
            .or_else(|e| {
                let sent_anyway = self.faults.has(DaemonFault::InvokeOverLimitSent) && e.error.field() == "line";
                if sent_anyway {
                    Ok(())
                } else {
                    Err(e)
                }
            });
        if let Err(e) = judged {
            return Err(match (e.error.code, e.disposition) {
                (Code::AdapterSecretReflected, _) => CallError::local(
                    DaemonCode::AdapterSecretInRequest.as_str(),
                    "the payload contains the capability handle",
                ),
                (_, Disposition::Close) if e.error.field() == "line" => CallError::local(
                    DaemonCode::AdapterRequestTooLarge.as_str(),
                    "the invoke frame exceeds maxRequestBytes",
                ),
                (code, _) => CallError::local(code.as_str(), &e.error.message),
            });
        }
        if self.faults.has(DaemonFault::InvokeExtraKey) {
            let mut f = frame;
            f["toolCallId"] = Value::String(tool_call_id.to_string());
            line = encode_line(&f);
        }
        let l = *self.binding.limits();
        let mut capacity = (l.max_concurrent_requests.get() + l.max_queued_requests as u64) as usize;
        if self.faults.has(DaemonFault::QueueCapacityOneShort) {
            capacity -= 1;
        } else if self.faults.has(DaemonFault::QueueCapacityOnePast) {
            capacity += 1;
        }
        // Under the fault, every session's active calls count against this one's limits.
        let active = if self.faults.has(DaemonFault::SharedAdapterQueue) {
            SHARED_ACTIVE.load(std::sync::atomic::Ordering::SeqCst)
        } else {
            self.active.len()
        };
        let full = active + self.queue.len() >= capacity;
        if full && !self.faults.has(DaemonFault::NoQueueCapacity) {
            return Err(CallError {
                code: DaemonCode::AdapterQueueCapacity.as_str().into(),
                message: "adapter concurrency and queue limits reached".into(),
                retryable: true,
                indeterminate: false,
                retry_after_ms: Some(if self.faults.has(DaemonFault::RetryAfterUnclamped) {
                    l.request_timeout_ms as u64 / 20
                } else {
                    retry_after_ms(l.request_timeout_ms as u64)
                }),
            });
        }
        let id = CallId(self.next_call);
        self.next_call += 1;
        let call = Call {
            op,
            request_id,
            key,
            line: Some(line),
            admitted: now,
            // Under timeout-from-dispatch the clock starts only at dispatch: a queued call
            // never expires; under timeout-early it runs at half speed.
            deadline: if self.faults.has(DaemonFault::TimeoutFromDispatch) {
                now + Duration::from_secs(86_400)
            } else {
                now + Duration::from_millis(l.request_timeout_ms as u64)
                    / if self.faults.has(DaemonFault::TimeoutEarly) { 2 } else { 1 }
            },
            dispatched: None,
            path_lock: path.filter(|_| is_mutating(op)),
            replay,
        };
        self.calls.insert(id, call);
        if full {
            // Under the fault: the call the limits refuse is written at once, beyond
            // maxConcurrentRequests.
            self.dispatch(now, id);
        } else {
            self.queue.push_back(id);
            self.pump(now);
        }
        Ok(id)
    }

    /// The caller gave up on a call: a queued call is dropped; an active one is aborted and
    /// tombstoned. No event follows for it. Returns whether the call was pending.
    pub fn cancel_call(&mut self, now: Instant, call: CallId) -> bool {
        if self.is_closed() || !self.calls.contains_key(&call) {
            return false;
        }
        self.expire(now);
        let Some(c) = self.calls.get(&call) else { return false };
        if c.dispatched.is_none() {
            self.queue.retain(|q| *q != call);
            self.calls.remove(&call);
            self.counters.cancelled += 1;
        } else if self.abort_active(now, call).is_some() {
            self.counters.cancelled += 1;
        }
        self.pump(now);
        true
    }

    /// Revoke the binding (SPEC §3.4): the `revoke` line is queued, every pending call fails
    /// with `adapter_revoked` (sent ones flagged indeterminate) and no call is admitted again.
    pub fn revoke(&mut self, _now: Instant) {
        if self.is_closed() {
            return;
        }
        self.state = State::Revoked;
        let revoke = compose::to_wire(&compose::revoke_of(self.binding.bind()));
        self.transmit.push_back(OutLine(encode_line(&revoke)));
        let n = self.fail_pending(DaemonCode::AdapterRevoked.as_str());
        self.counters.cancelled += n;
        self.tombstones.clear();
    }

    /// Bytes read from the socket.
    pub fn handle_input(&mut self, now: Instant, data: &[u8]) {
        if self.is_closed() {
            return;
        }
        self.expire(now);
        self.decoder.push(data);
        while !self.is_closed() {
            match self.decoder.next_line() {
                None => break,
                Some(Err(_)) => self.fail(Code::AdapterProtocolInvalid.as_str()),
                Some(Ok(line)) => self.handle_line(now, &line),
            }
        }
    }

    /// One complete adapter line (LF excluded).
    pub fn handle_line(&mut self, now: Instant, line: &[u8]) {
        if self.is_closed() {
            return;
        }
        if self.state == State::Binding
            && self.faults.has(DaemonFault::IgnoreBoundEcho)
            && decode_strict(line).is_ok_and(|v| v["kind"] == "bound")
        {
            self.state = State::Bound;
            self.events.push_back(Event::Bound);
            self.pump(now);
            return;
        }
        if self.faults.has(DaemonFault::UncheckedRevoked) && decode_strict(line).is_ok_and(|v| v["kind"] == "revoked") {
            return;
        }
        let folded;
        let line = match self.faults.has(DaemonFault::KeysCaseInsensitive).then(|| decode_strict(line)) {
            Some(Ok(mut v)) => {
                super::faults::fold_letter_case(&mut v);
                folded = encode_line(&v);
                &folded[..folded.len() - 1]
            }
            _ => line,
        };
        // Under the fault: a line one byte past maxResponseBytes (LF included) is judged as if
        // the limit were one byte larger.
        let lenient;
        let judged_on = if self.faults.has(DaemonFault::AdapterLineOnePast)
            && line.len() as u64 == self.binding.line_limit(Direction::ToDaemon)
        {
            let mut b = self.binding.bind().clone();
            b.limits.max_response_bytes += 1;
            lenient = Binding::new(b);
            &lenient
        } else {
            &self.binding
        };
        let frame = match judge_adapter_frame(line, judged_on, Direction::ToDaemon) {
            Ok(f) => f,
            Err(e)
                if self.faults.has(DaemonFault::AbortedSecretUnchecked)
                    && e.error.code == Code::AdapterSecretReflected
                    && self.state == State::Bound =>
            {
                match decode_strict(line) {
                    Ok(v) if v["kind"] == "aborted" => return self.handle_aborted(now, &v),
                    _ => return self.fail(frame_code(&e)),
                }
            }
            Err(e) if self.faults.has(DaemonFault::KeepConnectionOnInvalidFrame) && self.state != State::Binding => {
                self.fail_pending(frame_code(&e));
                return;
            }
            Err(e) => return self.fail(frame_code(&e)),
        };
        if self.state == State::Binding {
            if frame.kind == FrameKind::Bound {
                self.state = State::Bound;
                self.events.push_back(Event::Bound);
                self.pump(now);
            } else if !self.faults.has(DaemonFault::IgnoreFrameBeforeBound) {
                // Any frame before bound.
                self.fail(Code::AdapterProtocolInvalid.as_str());
            }
            return;
        }
        match frame.kind {
            FrameKind::Bound if self.faults.has(DaemonFault::IgnoreSecondBound) => {}
            FrameKind::Bound => self.fail(Code::AdapterProtocolInvalid.as_str()),
            FrameKind::Revoked if self.faults.has(DaemonFault::RejectRevoked) => {
                self.fail(Code::AdapterProtocolInvalid.as_str())
            }
            FrameKind::Revoked => {}
            FrameKind::Aborted(_) if self.faults.has(DaemonFault::RejectAborted) => {
                self.fail(Code::AdapterResponseMismatch.as_str())
            }
            FrameKind::Aborted(_) => self.handle_aborted(now, &frame.value),
            FrameKind::Result { .. } => self.handle_result(now, frame.value),
            // Daemon-bound kinds only reach here; anything else breaks the protocol.
            _ => self.fail(Code::AdapterProtocolInvalid.as_str()),
        }
    }

    /// End of input.
    pub fn handle_eof(&mut self, _now: Instant) {
        self.fail(DaemonCode::AdapterConnectionClosed.as_str());
    }

    /// The socket failed (read or write).
    pub fn handle_io_error(&mut self, _now: Instant) {
        if self.faults.has(DaemonFault::IoErrorIgnored) {
            return;
        }
        self.fail(DaemonCode::AdapterConnectionFailed.as_str());
    }

    /// Time passed: the bind timeout, call timeouts.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.expire(now);
    }

    fn expire(&mut self, now: Instant) {
        match self.state {
            State::Binding if now >= self.bind_deadline => return self.fail(DaemonCode::AdapterBindTimeout.as_str()),
            State::Bound => {}
            _ => return,
        }
        if !self.faults.has(DaemonFault::TombstonesNeverExpire) {
            self.tombstones.retain(|_, t| t.expires > now);
        }
        let horizon = now + TIMER_GRANULARITY;
        let expired: Vec<CallId> =
            self.calls.iter().filter(|(_, c)| c.deadline <= horizon).map(|(id, _)| *id).collect();
        if expired.is_empty() {
            return;
        }
        // Queued ones first: they were never sent, so they fail retryable.
        for id in &expired {
            if self.calls.get(id).is_some_and(|c| c.dispatched.is_none()) {
                self.queue.retain(|q| q != id);
                if let Some(c) = self.calls.remove(id) {
                    self.queue_wait.entry(c.op).or_default().record(now.saturating_duration_since(c.admitted));
                }
                if self.faults.has(DaemonFault::QueuedTimeoutWraps) {
                    self.counters.timed_out = self.counters.timed_out.wrapping_sub(1);
                } else if !self.faults.has(DaemonFault::QueuedTimeoutUncounted) {
                    self.counters.timed_out += 1;
                }
                let mut e = CallError::local(
                    DaemonCode::AdapterRequestTimeout.as_str(),
                    "the request timed out before it was sent",
                );
                e.retryable = true;
                self.events.push_back(Event::Completed { call: *id, outcome: Err(e) });
            }
        }
        // Then the sent ones: abort, tombstone, indeterminate.
        for id in &expired {
            if !self.calls.contains_key(id) {
                continue;
            }
            let replay = self.calls.get(id).and_then(|c| c.replay.clone().map(|r| (c.op, r)));
            if self.faults.has(DaemonFault::NoAbortOnTimeout) {
                if let Some(c) = self.calls.remove(id) {
                    self.release(&c);
                }
            } else if self.abort_active(now, *id).is_none() {
                return; // the connection failed
            }
            if let Some((op, (payload, tool_call_id))) = replay {
                // Under the fault: the indeterminate call is sent again, as a new tool call
                // (so a new idempotency key); nobody waits for its outcome.
                let _ = self.admit(now, op, payload, &format!("{tool_call_id}{REPLAY_SUFFIX}"));
            }
            self.counters.timed_out += 1;
            let mut e = CallError::local(
                DaemonCode::AdapterRequestTimeout.as_str(),
                "the request timed out; its outcome is unknown",
            );
            e.indeterminate = true;
            self.events.push_back(Event::Completed { call: *id, outcome: Err(e) });
        }
        self.pump(now);
    }

    /// Abort a sent call: `abort` frame, tombstone, slot freed. `None` when the tombstone
    /// would overflow `maxIdempotencyKeys` (the connection has then failed).
    fn abort_active(&mut self, now: Instant, id: CallId) -> Option<()> {
        if !self.faults.has(DaemonFault::TombstonesNeverExpire) {
            self.tombstones.retain(|_, t| t.expires > now);
        }
        let mut max = self.binding.limits().max_idempotency_keys.get();
        if self.faults.has(DaemonFault::AbortCapacityOnePast) {
            max += 1;
        }
        if self.tombstones.len() as u64 >= max {
            self.fail(DaemonCode::AdapterAbortCapacity.as_str());
            return None;
        }
        let c = self.calls.remove(&id)?;
        self.release(&c);
        let abort_id = if self.faults.has(DaemonFault::AbortReusesTargetId) {
            c.request_id.clone()
        } else {
            uuid_v4(self.rng.as_mut())
        };
        // Both ids are UUIDs this runtime drew, which the generated `RequestId` always holds;
        // were one refused, no abort could be sent and the connection fails.
        let Ok(frame) = compose::abort_of(self.binding.bind(), &abort_id, &c.request_id) else {
            self.fail(DaemonCode::AdapterConnectionFailed.as_str());
            return None;
        };
        self.transmit.push_back(OutLine(encode_line(&compose::to_wire(&frame))));
        let ttl = Duration::from_millis(self.binding.limits().idempotency_ttl_ms as u64);
        self.tombstones.insert(
            c.request_id,
            Tombstone { key: c.key, op: c.op, abort_request_id: abort_id, expires: now + ttl, result_dropped: false },
        );
        Some(())
    }

    fn release(&mut self, c: &Call) {
        if self.active.remove(&c.request_id).is_some() && self.faults.has(DaemonFault::SharedAdapterQueue) {
            SHARED_ACTIVE.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        }
        if let Some(p) = &c.path_lock {
            if c.dispatched.is_some() {
                self.locked_paths.remove(p);
            }
        }
    }

    /// Send queued calls while slots are free, in admission order, skipping a mutating call
    /// whose path is busy.
    fn pump(&mut self, now: Instant) {
        if self.state != State::Bound {
            return;
        }
        let mut max = self.binding.limits().max_concurrent_requests.get() as usize;
        if self.faults.has(DaemonFault::ConcurrencyOnePast) {
            max += 1;
        }
        let mut i = 0;
        while self.active.len() < max && i < self.queue.len() {
            let id = self.queue[i];
            let Some(c) = self.calls.get(&id) else {
                self.queue.remove(i);
                continue;
            };
            if c.path_lock.as_ref().is_some_and(|p| self.locked_paths.contains(p)) {
                i += 1;
                continue;
            }
            self.queue.remove(i);
            self.dispatch(now, id);
        }
        self.high_active = self.high_active.max(self.active.len());
        self.high_queued = self.high_queued.max(self.queue.len());
    }

    /// Send an admitted call now: its invoke line is queued for writing and it is active.
    fn dispatch(&mut self, now: Instant, id: CallId) {
        let timeout = Duration::from_millis(self.binding.limits().request_timeout_ms as u64);
        let from_dispatch = self.faults.has(DaemonFault::TimeoutFromDispatch);
        let Some(c) = self.calls.get_mut(&id) else { return };
        c.dispatched = Some(now);
        if from_dispatch {
            c.deadline = now + timeout;
        }
        if let Some(p) = &c.path_lock {
            self.locked_paths.insert(p.clone());
        }
        if let Some(line) = c.line.take() {
            self.transmit.push_back(OutLine(line));
        }
        self.queue_wait.entry(c.op).or_default().record(now.saturating_duration_since(c.admitted));
        if self.active.insert(c.request_id.clone(), id).is_none() && self.faults.has(DaemonFault::SharedAdapterQueue) {
            SHARED_ACTIVE.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        self.high_active = self.high_active.max(self.active.len());
    }

    fn handle_result(&mut self, now: Instant, v: Value) {
        let rid = v["requestId"].as_str().unwrap_or_default();
        let key = v["idempotencyKey"].as_str().unwrap_or_default();
        let op = v["operation"].as_str().unwrap_or_default();
        if let Some(&id) = self.active.get(rid) {
            let Some(c) = self.calls.get(&id) else { return self.fail(Code::AdapterResponseMismatch.as_str()) };
            let key_ok = c.key == key || self.faults.has(DaemonFault::AcceptMismatchedResults);
            let op_ok = c.op.to_string() == op || self.faults.has(DaemonFault::AcceptOtherOperationResults);
            if !key_ok || !op_ok {
                return self.fail(Code::AdapterResponseMismatch.as_str());
            }
            let Some(c) = self.calls.remove(&id) else { return };
            self.release(&c);
            if self.faults.has(DaemonFault::IgnoreDuplicateResults) {
                self.completed.insert(c.request_id.clone());
            }
            if let Some(at) = c.dispatched {
                self.latency.entry(c.op).or_default().record(now.saturating_duration_since(at));
            }
            let outcome = if v["ok"] == Value::Bool(true) {
                if self.faults.has(DaemonFault::TelemetryCallsWrap) {
                    self.counters.completed = self.counters.completed.wrapping_sub(1);
                } else {
                    self.counters.completed += 1;
                }
                Ok(v["data"].clone())
            } else {
                if !self.faults.has(DaemonFault::ErrorResultsUncounted) {
                    self.counters.failed += 1;
                }
                let e = &v["error"];
                Err(CallError {
                    code: e["code"].as_str().unwrap_or_default().to_string(),
                    message: e["message"].as_str().unwrap_or_default().to_string(),
                    retryable: e["retryable"].as_bool().unwrap_or(false),
                    indeterminate: false,
                    retry_after_ms: None,
                })
            };
            self.events.push_back(Event::Completed { call: id, outcome });
            self.pump(now);
            return;
        }
        // A result for an aborted or timed-out request is dropped while its tombstone lives
        // and before the matching `aborted` (once); anything else is a mismatch.
        if self.completed.contains(rid) {
            return; // only under DaemonFault::IgnoreDuplicateResults
        }
        match self.tombstones.get_mut(rid) {
            Some(t) if self.faults.has(DaemonFault::NoTombstone) && t.expires > now => {
                self.fail(Code::AdapterResponseMismatch.as_str())
            }
            Some(t)
                if t.expires > now
                    && !t.result_dropped
                    && (t.key == key || self.faults.has(DaemonFault::TombstoneIgnoresKey))
                    && t.op.to_string() == op =>
            {
                t.result_dropped = true;
            }
            _ => self.fail(Code::AdapterResponseMismatch.as_str()),
        }
    }

    fn handle_aborted(&mut self, now: Instant, v: &Value) {
        let rid = v["requestId"].as_str().unwrap_or_default();
        let target = v["targetRequestId"].as_str().unwrap_or_default();
        match self.tombstones.get(target) {
            Some(t) if t.expires > now && t.abort_request_id == rid => {
                // Acknowledged: a result for the target is now fatal (it is unknown).
                self.tombstones.remove(target);
            }
            _ if self.faults.has(DaemonFault::UncheckedAborted) => {}
            _ => self.fail(Code::AdapterResponseMismatch.as_str()),
        }
    }

    /// Fail every pending call with `code` (sent ones indeterminate); returns how many.
    fn fail_pending(&mut self, code: &'static str) -> u64 {
        let mut calls = std::mem::take(&mut self.calls);
        if self.faults.has(DaemonFault::QueuedNotFailedOnEof) && code == DaemonCode::AdapterConnectionClosed.as_str() {
            // Under the fault the queued calls are left waiting on a connection that is gone.
            let (sent, queued): (BTreeMap<_, _>, BTreeMap<_, _>) =
                calls.into_iter().partition(|(_, c)| c.dispatched.is_some());
            self.calls = queued;
            calls = sent;
        }
        self.queue.clear();
        self.active.clear();
        self.locked_paths.clear();
        let n = calls.len() as u64;
        for (id, c) in calls {
            let mut e = CallError::local(code, failure_message(code));
            e.indeterminate = c.dispatched.is_some();
            self.events.push_back(Event::Completed { call: id, outcome: Err(e) });
        }
        n
    }

    /// Fail the connection (SPEC §4.3): nothing more is written, every pending call fails.
    fn fail(&mut self, code: &'static str) {
        if self.is_closed() {
            return;
        }
        self.state = State::Failed(code);
        self.transmit.clear();
        self.tombstones.clear();
        let n = self.fail_pending(code);
        if self.faults.has(DaemonFault::TelemetryFailedWraps) {
            self.counters.failed = self.counters.failed.wrapping_sub(n);
        } else {
            self.counters.failed += n;
        }
        self.events.push_back(Event::Failed(code));
    }

    /// Content-free telemetry (SPEC §4.4): capacity, occupancy, high-water marks, counters,
    /// the last refusal code, saturation and per-operation queue-wait and latency summaries
    /// in milliseconds. Never payloads, paths, keys, ids, endpoints or handles.
    pub fn telemetry(&self) -> Value {
        let l = *self.binding.limits();
        let c = self.counters;
        let capacity = if self.faults.has(DaemonFault::TelemetrySaturatedEarly) {
            l.max_concurrent_requests.get().wrapping_sub(l.max_queued_requests as u64)
        } else {
            l.max_concurrent_requests.get() + l.max_queued_requests as u64
        };
        let full = if self.faults.has(DaemonFault::TelemetryOccupancySubtracted) {
            self.active.len().wrapping_sub(self.queue.len()) >= capacity as usize
        } else {
            self.active.len() + self.queue.len() >= capacity as usize
        };
        // Under the fault the queue reads as saturated whenever the binding is live.
        let full = full && !self.faults.has(DaemonFault::TelemetryNeverSaturated);
        let saturated =
            (full || self.faults.has(DaemonFault::TelemetrySaturatedWhenIdle)) && self.state == State::Bound;
        let summary = |s: Option<&Summary>| {
            if self.faults.has(DaemonFault::TelemetrySummariesEmpty) {
                Value::Null
            } else if self.faults.has(DaemonFault::TelemetryExtremesScaled) {
                let mut j = s.copied().unwrap_or_default().to_json();
                for k in ["min", "max"] {
                    if let Some(x) = j[k].as_f64() {
                        j[k] = json!((x / 1e9).round() / 1000.0);
                    }
                }
                j
            } else if self.faults.has(DaemonFault::TelemetryMinStuckAtZero) {
                let mut j = s.copied().unwrap_or_default().to_json();
                if j["min"].is_number() {
                    j["min"] = json!(0.0);
                }
                j
            } else {
                s.copied().unwrap_or_default().to_json()
            }
        };
        let uncounted = self.faults.has(DaemonFault::TelemetryEndsUncounted);
        let mut ops = Map::new();
        for op in self.binding.operations() {
            ops.insert(
                op.to_string(),
                json!({
                    "queueWaitMs": summary(self.queue_wait.get(op)),
                    "latencyMs": summary(self.latency.get(op)),
                }),
            );
        }
        json!({
            "state": self.state.name(),
            "failureCode": self.failure(),
            "capacity": {"concurrent": l.max_concurrent_requests, "queued": l.max_queued_requests},
            "occupancy": {"active": self.active.len(), "queued": self.queue.len(), "tombstones": self.tombstones.len()},
            "highWater": {"active": self.high_active, "queued": self.high_queued},
            "counters": {
                "accepted": c.accepted,
                "completed": c.completed,
                "failed": c.failed,
                "rejected": c.rejected,
                "cancelled": if uncounted { 0 } else { c.cancelled },
                "timedOut": if uncounted { 0 } else { c.timed_out },
            },
            "lastRefusalReason": self.last_refusal,
            "saturated": saturated,
            "operations": ops,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::admit_descriptor;
    use crate::util::prng::SplitMix64;

    fn rng() -> Box<dyn Rng> {
        Box::new(SplitMix64::new(42))
    }

    const HANDLE: &str = "aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789_-AB";

    fn descriptor(limits: [u64; 7]) -> Descriptor {
        let path = format!("{}/vectors/bases/descriptor.json", env!("CARGO_MANIFEST_DIR"));
        let mut v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let keys = ["maxRequestBytes", "maxResponseBytes", "maxConcurrentRequests", "maxQueuedRequests"];
        let more = ["requestTimeoutMs", "maxIdempotencyKeys", "idempotencyTtlMs"];
        for (k, n) in keys.iter().chain(more.iter()).zip(limits) {
            v["limits"][*k] = n.into();
        }
        admit_descriptor(&v, None).unwrap()
    }

    fn lines(rt: &mut AdapterRuntime) -> Vec<Value> {
        std::iter::from_fn(|| rt.poll_transmit())
            .map(|l| serde_json::from_slice(&l.as_bytes()[..l.as_bytes().len() - 1]).unwrap())
            .collect()
    }

    fn events(rt: &mut AdapterRuntime) -> Vec<Event> {
        std::iter::from_fn(|| rt.poll_event()).collect()
    }

    fn bound(d: &Descriptor, rt: &mut AdapterRuntime, now: Instant) {
        let _ = lines(rt);
        rt.handle_input(now, &encode_line(&d.bound_frame()));
        assert_eq!(events(rt), vec![Event::Bound]);
    }

    fn result_for(d: &Descriptor, invoke: &Value, data: Value) -> Vec<u8> {
        encode_line(&d.identity().frame(
            "result",
            [
                ("requestId", invoke["requestId"].clone()),
                ("idempotencyKey", invoke["idempotencyKey"].clone()),
                ("operation", invoke["operation"].clone()),
                ("ok", Value::Bool(true)),
                ("data", data),
            ],
        ))
    }

    fn stat() -> Value {
        json!({"type": "file", "size": 3})
    }

    const BASE: [u64; 7] = [1_048_576, 1_048_576, 2, 1, 1000, 4, 60_000];

    #[test]
    fn retry_after_arithmetic() {
        assert_eq!(retry_after_ms(100), 25);
        assert_eq!(retry_after_ms(500), 25);
        assert_eq!(retry_after_ms(519), 25);
        assert_eq!(retry_after_ms(520), 26);
        assert_eq!(retry_after_ms(10_000), 500);
        assert_eq!(retry_after_ms(20_019), 1000);
        assert_eq!(retry_after_ms(30_000), 1000);
        assert_eq!(retry_after_ms(120_000), 1000);
    }

    #[test]
    fn idempotency_key_is_sha256_of_operation_nul_call_id() {
        // Computed independently: printf 'fs.read\0call-1' | sha256sum
        assert_eq!(
            idempotency_key(ToolOperation::FsRead, "call-1"),
            "tool-aacb7e7f1b127909e5fbd9c20197851a22586ec6787fe6f114d7ae6bd8c01fd3"
        );
        // printf 'fs.write\0toolu_01' | sha256sum
        assert_eq!(
            idempotency_key(ToolOperation::FsWrite, "toolu_01"),
            "tool-4ea0faa8f44d2197c8db1b7ca22c0bfadebe67d4978094c50abe1c7d388960df"
        );
        assert_ne!(idempotency_key(ToolOperation::FsStat, "call-1"), idempotency_key(ToolOperation::FsRead, "call-1"));
    }

    #[test]
    fn request_ids_come_from_the_callers_rng() {
        let d = descriptor(BASE);
        let t0 = Instant::now();
        let ids = |seed: u64| {
            let mut rt = AdapterRuntime::new(&d, t0, Box::new(SplitMix64::new(seed)));
            bound(&d, &mut rt, t0);
            let call = rt.begin_call(t0, ToolOperation::FsStat, json!({"path": "a"}), "c").unwrap();
            let invoke = lines(&mut rt).remove(0)["requestId"].as_str().unwrap().to_string();
            assert!(rt.cancel_call(t0, call));
            let abort = lines(&mut rt).remove(0);
            assert_eq!(abort["kind"], "abort");
            assert_eq!(abort["targetRequestId"], invoke.as_str());
            (invoke, abort["requestId"].as_str().unwrap().to_string())
        };
        let (a, b) = (ids(9), ids(9));
        assert_eq!(a, b, "the same seed gives the same invoke and abort ids");
        assert_ne!(a.0, a.1);
        assert_ne!(ids(10).0, a.0);
        assert_eq!(uuid::Uuid::parse_str(&a.0).unwrap().get_version_num(), 4);
    }

    #[test]
    fn bind_then_bound_then_a_call() {
        let d = descriptor(BASE);
        let t0 = Instant::now();
        let mut rt = AdapterRuntime::new(&d, t0, rng());
        let sent = lines(&mut rt);
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0]["kind"], "bind");
        assert_eq!(sent[0]["capabilityHandle"], HANDLE);
        let e = rt.begin_call(t0, ToolOperation::FsStat, json!({"path": "a"}), "c").unwrap_err();
        assert_eq!(e.code, DaemonCode::AdapterNotBound.as_str());
        rt.handle_input(t0, &encode_line(&d.bound_frame()));
        assert_eq!(events(&mut rt), vec![Event::Bound]);
        let id = rt.begin_call(t0, ToolOperation::FsStat, json!({"path": "a"}), "c").unwrap();
        let inv = lines(&mut rt).remove(0);
        assert_eq!(inv["kind"], "invoke");
        assert_eq!(inv["idempotencyKey"], idempotency_key(ToolOperation::FsStat, "c"));
        assert!(uuid::Uuid::parse_str(inv["requestId"].as_str().unwrap()).is_ok());
        assert!(!serde_json::to_string(&inv).unwrap().contains(HANDLE));
        rt.handle_input(t0, &result_for(&d, &inv, stat()));
        assert_eq!(events(&mut rt), vec![Event::Completed { call: id, outcome: Ok(stat()) }]);
        assert_eq!(rt.counters().completed, 1);
    }

    #[test]
    fn admission_refuses_at_active_max_and_queued_max() {
        let d = descriptor([1_048_576, 1_048_576, 1, 0, 10_000, 4, 60_000]);
        let t0 = Instant::now();
        let mut rt = AdapterRuntime::new(&d, t0, rng());
        bound(&d, &mut rt, t0);
        rt.begin_call(t0, ToolOperation::FsStat, json!({"path": "a"}), "1").unwrap();
        assert_eq!(lines(&mut rt).len(), 1);
        let e = rt.begin_call(t0, ToolOperation::FsStat, json!({"path": "b"}), "2").unwrap_err();
        assert_eq!(
            (e.code.as_str(), e.retryable, e.retry_after_ms),
            (DaemonCode::AdapterQueueCapacity.as_str(), true, Some(500))
        );
        assert!(lines(&mut rt).is_empty(), "refused before any wire write");
        let t = rt.telemetry();
        assert_eq!(t["lastRefusalReason"], DaemonCode::AdapterQueueCapacity.as_str());
        assert_eq!(t["saturated"], true);
        assert_eq!(t["counters"]["rejected"], 1);
    }

    #[test]
    fn the_no_queue_capacity_fault_writes_the_extra_invoke() {
        let d = descriptor([1_048_576, 1_048_576, 1, 0, 10_000, 4, 60_000]);
        let t0 = Instant::now();
        let mut rt = AdapterRuntime::new_with(&d, t0, rng(), DaemonFault::NoQueueCapacity.into());
        bound(&d, &mut rt, t0);
        rt.begin_call(t0, ToolOperation::FsStat, json!({"path": "a"}), "1").unwrap();
        rt.begin_call(t0, ToolOperation::FsStat, json!({"path": "b"}), "2").unwrap();
        assert_eq!(lines(&mut rt).iter().filter(|l| l["kind"] == "invoke").count(), 2, "both written");
        assert_eq!((rt.active(), rt.queued()), (2, 0));
        assert_eq!(rt.counters().rejected, 0);
    }

    #[test]
    fn queue_drains_in_order_and_times_out_retryable() {
        let d = descriptor(BASE); // 2 concurrent + 1 queued, 1000 ms
        let t0 = Instant::now();
        let mut rt = AdapterRuntime::new(&d, t0, rng());
        bound(&d, &mut rt, t0);
        let a = rt.begin_call(t0, ToolOperation::FsStat, json!({"path": "a"}), "a").unwrap();
        let _b = rt.begin_call(t0, ToolOperation::FsStat, json!({"path": "b"}), "b").unwrap();
        let t1 = t0 + Duration::from_millis(10);
        let c = rt.begin_call(t1, ToolOperation::FsStat, json!({"path": "c"}), "c").unwrap();
        assert_eq!(lines(&mut rt).len(), 2);
        assert_eq!((rt.active(), rt.queued()), (2, 1));
        // a and b expire (sent: aborts, indeterminate); c was admitted 10 ms later and was
        // sent when their slots freed.
        rt.handle_timeout(t0 + Duration::from_millis(1000));
        let sent = lines(&mut rt);
        assert_eq!(sent.iter().filter(|l| l["kind"] == "abort").count(), 2);
        assert_eq!(sent.iter().filter(|l| l["kind"] == "invoke").count(), 1);
        let ev = events(&mut rt);
        assert!(ev.iter().any(|e| matches!(e, Event::Completed { call, outcome: Err(x) }
            if *call == a && x.indeterminate && !x.retryable && x.code == DaemonCode::AdapterRequestTimeout.as_str())));
        assert_eq!(rt.tombstones(), 2);
        let _ = c;
        // Now coalesced expiry of an active and a queued call: the queued one is retryable.
        let d = descriptor([1_048_576, 1_048_576, 1, 1, 1000, 4, 60_000]);
        let mut rt = AdapterRuntime::new(&d, t0, rng());
        bound(&d, &mut rt, t0);
        let a = rt.begin_call(t0, ToolOperation::FsStat, json!({"path": "a"}), "a").unwrap();
        let b = rt.begin_call(t0, ToolOperation::FsStat, json!({"path": "b"}), "b").unwrap();
        let _ = lines(&mut rt);
        assert_eq!(rt.poll_timeout(), Some(t0 + Duration::from_millis(1000)));
        rt.handle_timeout(t0 + Duration::from_millis(1000));
        let ev = events(&mut rt);
        let find = |id: CallId| {
            ev.iter()
                .find_map(|e| match e {
                    Event::Completed { call, outcome: Err(x) } if *call == id => Some(x.clone()),
                    _ => None,
                })
                .unwrap()
        };
        let (ea, eb) = (find(a), find(b));
        assert!(ea.indeterminate && !ea.retryable);
        assert!(!eb.indeterminate && eb.retryable);
        assert_eq!(eb.code, DaemonCode::AdapterRequestTimeout.as_str());
        let sent = lines(&mut rt);
        assert_eq!(sent.len(), 1, "only the abort of a; b was never sent");
        assert_eq!(sent[0]["kind"], "abort");
        let t = rt.telemetry();
        assert_eq!(t["counters"]["timedOut"], 2);
        assert_eq!(t["counters"]["accepted"], 2);
    }

    #[test]
    fn mutating_calls_on_one_path_run_one_at_a_time() {
        let d = descriptor([1_048_576, 1_048_576, 4, 4, 10_000, 4, 60_000]);
        let t0 = Instant::now();
        let mut rt = AdapterRuntime::new(&d, t0, rng());
        bound(&d, &mut rt, t0);
        let w = json!({"path": "f", "content": "x"});
        rt.begin_call(t0, ToolOperation::FsWrite, w.clone(), "1").unwrap();
        rt.begin_call(t0, ToolOperation::FsWrite, w.clone(), "2").unwrap();
        rt.begin_call(t0, ToolOperation::FsRead, json!({"path": "f"}), "3").unwrap();
        let sent = lines(&mut rt);
        assert_eq!(sent.len(), 2, "the second write waits for the first");
        assert_eq!((sent[0]["operation"].as_str(), sent[1]["operation"].as_str()), (Some("fs.write"), Some("fs.read")));
        rt.handle_input(
            t0,
            &result_for(&d, &sent[0], json!({"created": true, "bytesWritten": 1, "digest": "0".repeat(64)})),
        );
        let next = lines(&mut rt);
        assert_eq!(next.len(), 1);
        assert_eq!(next[0]["idempotencyKey"], idempotency_key(ToolOperation::FsWrite, "2"));
    }

    #[test]
    fn tombstones_are_bounded_and_overflow_fails_the_connection() {
        // maxIdempotencyKeys = 1: the second unacknowledged abort overflows.
        let d = descriptor([1_048_576, 1_048_576, 2, 0, 1000, 1, 60_000]);
        let t0 = Instant::now();
        let mut rt = AdapterRuntime::new(&d, t0, rng());
        bound(&d, &mut rt, t0);
        let a = rt.begin_call(t0, ToolOperation::FsStat, json!({"path": "a"}), "a").unwrap();
        let b =
            rt.begin_call(t0 + Duration::from_millis(500), ToolOperation::FsStat, json!({"path": "b"}), "b").unwrap();
        let _ = lines(&mut rt);
        rt.handle_timeout(t0 + Duration::from_millis(1000));
        assert_eq!(rt.tombstones(), 1);
        let ev = events(&mut rt);
        assert!(matches!(&ev[..], [Event::Completed { call, .. }] if *call == a));
        rt.handle_timeout(t0 + Duration::from_millis(1500));
        assert_eq!(rt.failure(), Some(DaemonCode::AdapterAbortCapacity.as_str()));
        let ev = events(&mut rt);
        assert!(ev.iter().any(|e| matches!(e, Event::Completed { call, outcome: Err(x) }
            if *call == b && x.indeterminate && x.code == DaemonCode::AdapterAbortCapacity.as_str())));
        assert_eq!(ev.last(), Some(&Event::Failed(DaemonCode::AdapterAbortCapacity.as_str())));
        assert!(lines(&mut rt).is_empty());
    }

    #[test]
    fn tombstones_expire_after_the_ttl() {
        let d = descriptor([1_048_576, 1_048_576, 2, 0, 1000, 1, 1000]);
        let t0 = Instant::now();
        let mut rt = AdapterRuntime::new(&d, t0, rng());
        bound(&d, &mut rt, t0);
        rt.begin_call(t0, ToolOperation::FsStat, json!({"path": "a"}), "a").unwrap();
        let inv = lines(&mut rt).remove(0);
        rt.handle_timeout(t0 + Duration::from_millis(1000));
        assert_eq!(rt.tombstones(), 1);
        // The next abort after the ttl fits again.
        let t2 = t0 + Duration::from_millis(2000);
        rt.begin_call(t2, ToolOperation::FsStat, json!({"path": "b"}), "b").unwrap();
        rt.handle_timeout(t2 + Duration::from_millis(1000));
        assert_eq!((rt.failure(), rt.tombstones()), (None, 1));
        // A result for the expired tombstone is now a mismatch.
        rt.handle_input(t2 + Duration::from_millis(1001), &result_for(&d, &inv, stat()));
        assert_eq!(rt.failure(), Some(Code::AdapterResponseMismatch.as_str()));
    }

    #[test]
    fn late_result_is_dropped_once_before_aborted_and_fatal_after() {
        let d = descriptor(BASE);
        let t0 = Instant::now();
        let mut rt = AdapterRuntime::new(&d, t0, rng());
        bound(&d, &mut rt, t0);
        rt.begin_call(t0, ToolOperation::FsStat, json!({"path": "a"}), "a").unwrap();
        let inv = lines(&mut rt).remove(0);
        let t1 = t0 + Duration::from_millis(1000);
        rt.handle_timeout(t1);
        let abort = lines(&mut rt).remove(0);
        assert_eq!(abort["targetRequestId"], inv["requestId"]);
        rt.handle_input(t1, &result_for(&d, &inv, stat()));
        assert_eq!(rt.failure(), None, "dropped while the tombstone lives");
        let aborted = d.identity().frame(
            "aborted",
            [
                ("requestId", abort["requestId"].clone()),
                ("targetRequestId", abort["targetRequestId"].clone()),
                ("aborted", Value::Bool(false)),
            ],
        );
        rt.handle_input(t1, &encode_line(&aborted));
        assert_eq!((rt.failure(), rt.tombstones()), (None, 0));
        rt.handle_input(t1, &result_for(&d, &inv, stat()));
        assert_eq!(rt.failure(), Some(Code::AdapterResponseMismatch.as_str()));
    }

    #[test]
    fn fatal_frames() {
        let d = descriptor(BASE);
        let t0 = Instant::now();
        let fresh = || {
            let mut rt = AdapterRuntime::new(&d, t0, rng());
            bound(&d, &mut rt, t0);
            let id = rt.begin_call(t0, ToolOperation::FsStat, json!({"path": "a"}), "a").unwrap();
            let inv = lines(&mut rt).remove(0);
            (rt, id, inv)
        };
        let check = |mut rt: AdapterRuntime, id: CallId, code: &'static str| {
            assert_eq!(rt.failure(), Some(code));
            let ev = events(&mut rt);
            assert!(ev.iter().any(|e| matches!(e, Event::Completed { call, outcome: Err(x) }
                if *call == id && x.indeterminate && x.code == code)));
            assert_eq!(ev.last(), Some(&Event::Failed(code)));
        };
        // Unknown request.
        let (mut rt, id, inv) = fresh();
        let mut other = inv.clone();
        other["requestId"] = "nope".into();
        rt.handle_input(t0, &result_for(&d, &other, stat()));
        check(rt, id, Code::AdapterResponseMismatch.as_str());
        // Mismatched key.
        let (mut rt, id, inv) = fresh();
        let mut other = inv.clone();
        other["idempotencyKey"] = "tool-0".into();
        rt.handle_input(t0, &result_for(&d, &other, stat()));
        check(rt, id, Code::AdapterResponseMismatch.as_str());
        // Mismatched operation (granted, but not the invoke's).
        let (mut rt, id, inv) = fresh();
        let mut other = inv.clone();
        other["operation"] = "fs.list".into();
        rt.handle_input(t0, &result_for(&d, &other, json!({"entries": [], "truncated": false})));
        check(rt, id, Code::AdapterResponseMismatch.as_str());
        // The handle reflected in a result.
        let (mut rt, id, inv) = fresh();
        let mut fake = inv.clone();
        fake["operation"] = "fs.read".into();
        rt.handle_input(t0, &result_for(&d, &fake, json!({"content": HANDLE, "bytesRead": 40, "eof": true})));
        check(rt, id, Code::AdapterSecretReflected.as_str());
        // aborted without abort.
        let (mut rt, id, _) = fresh();
        let ab = d.identity().frame(
            "aborted",
            [("requestId", "x1".into()), ("targetRequestId", "x2".into()), ("aborted", Value::Bool(true))],
        );
        rt.handle_input(t0, &encode_line(&ab));
        check(rt, id, Code::AdapterResponseMismatch.as_str());
        // A second bound.
        let (mut rt, id, _) = fresh();
        rt.handle_input(t0, &encode_line(&d.bound_frame()));
        check(rt, id, Code::AdapterProtocolInvalid.as_str());
        // Adapter-sent invoke.
        let (mut rt, id, inv) = fresh();
        rt.handle_input(t0, &encode_line(&inv));
        check(rt, id, Code::AdapterProtocolInvalid.as_str());
        // Garbage.
        let (mut rt, id, _) = fresh();
        rt.handle_input(t0, b"{\"a\":1,\"a\":2}\n");
        check(rt, id, Code::AdapterProtocolInvalid.as_str());
        // EOF.
        let (mut rt, id, _) = fresh();
        rt.handle_eof(t0);
        check(rt, id, DaemonCode::AdapterConnectionClosed.as_str());
    }

    #[test]
    fn line_limit_is_max_response_bytes_lf_included() {
        let d = descriptor([1_048_576, 2048, 2, 1, 1000, 4, 60_000]);
        let t0 = Instant::now();
        let mut rt = AdapterRuntime::new(&d, t0, rng());
        bound(&d, &mut rt, t0);
        rt.handle_input(t0, &encode_line(&d.identity().frame("revoked", [])));
        // A valid frame padded with whitespace to exactly 2048 bytes, LF included, passes.
        let mut line = serde_json::to_vec(&d.identity().frame("revoked", [])).unwrap();
        line.splice(1..1, std::iter::repeat_n(b' ', 2047 - line.len()));
        line.push(b'\n');
        assert_eq!(line.len(), 2048);
        rt.handle_input(t0, &line);
        assert_eq!(rt.failure(), None);
        let mut long = line.clone();
        long.insert(1, b' ');
        rt.handle_input(t0, &long);
        assert_eq!(rt.failure(), Some(Code::AdapterProtocolInvalid.as_str()));
    }

    #[test]
    fn frames_before_bound_and_bind_timeout() {
        let d = descriptor(BASE);
        let t0 = Instant::now();
        let mut rt = AdapterRuntime::new(&d, t0, rng());
        rt.handle_input(t0, &encode_line(&d.identity().frame("revoked", [])));
        assert_eq!(rt.failure(), Some(Code::AdapterProtocolInvalid.as_str()));
        let mut rt = AdapterRuntime::new(&d, t0, rng());
        assert_eq!(rt.poll_timeout(), Some(t0 + Duration::from_millis(1000)));
        rt.handle_timeout(t0 + Duration::from_millis(999));
        assert_eq!(rt.failure(), None);
        rt.handle_timeout(t0 + Duration::from_millis(1000));
        assert_eq!(rt.failure(), Some(DaemonCode::AdapterBindTimeout.as_str()));
    }

    #[test]
    fn refusals_before_the_wire() {
        let d = descriptor([2048, 1_048_576, 2, 1, 1000, 4, 60_000]);
        let t0 = Instant::now();
        let mut rt = AdapterRuntime::new(&d, t0, rng());
        bound(&d, &mut rt, t0);
        let big = json!({"path": "f", "content": "x".repeat(4000)});
        let e = rt.begin_call(t0, ToolOperation::FsWrite, big, "1").unwrap_err();
        assert_eq!(e.code, DaemonCode::AdapterRequestTooLarge.as_str());
        let e = rt.begin_call(t0, ToolOperation::FsWrite, json!({"path": "f", "content": HANDLE}), "2").unwrap_err();
        assert_eq!(e.code, DaemonCode::AdapterSecretInRequest.as_str());
        assert!(!e.to_string().contains(HANDLE));
        let e = rt.begin_call(t0, ToolOperation::FsRead, json!({"path": "a/"}), "3").unwrap_err();
        assert_eq!(e.code, "invalid_tool_adapter_path");
        let e = rt.begin_call(t0, ToolOperation::FsRead, json!({"path": "a", "bogus": 1}), "4").unwrap_err();
        assert_eq!(e.code, "invalid_request");
        assert!(lines(&mut rt).is_empty());
        assert_eq!(rt.state(), State::Bound, "a refused call leaves the connection alone");
        assert_eq!(rt.counters().rejected, 4);
    }

    #[test]
    fn revoke_fails_pending_and_refuses_new_calls() {
        let d = descriptor(BASE);
        let t0 = Instant::now();
        let mut rt = AdapterRuntime::new(&d, t0, rng());
        bound(&d, &mut rt, t0);
        let a = rt.begin_call(t0, ToolOperation::FsStat, json!({"path": "a"}), "a").unwrap();
        let _ = lines(&mut rt);
        rt.revoke(t0);
        assert_eq!(lines(&mut rt)[0]["kind"], "revoke");
        let ev = events(&mut rt);
        assert!(matches!(&ev[..], [Event::Completed { call, outcome: Err(x) }]
            if *call == a && x.code == DaemonCode::AdapterRevoked.as_str() && x.indeterminate));
        let e = rt.begin_call(t0, ToolOperation::FsStat, json!({"path": "a"}), "b").unwrap_err();
        assert_eq!(e.code, DaemonCode::AdapterRevoked.as_str());
        assert!(rt.is_closed());
        assert_eq!(rt.failure(), None);
    }

    #[test]
    fn telemetry_is_content_free() {
        let d = descriptor(BASE);
        let t0 = Instant::now();
        let mut rt = AdapterRuntime::new(&d, t0, rng());
        bound(&d, &mut rt, t0);
        rt.begin_call(t0, ToolOperation::FsRead, json!({"path": "secret-name.txt"}), "call-xyz").unwrap();
        let inv = lines(&mut rt).remove(0);
        rt.handle_input(
            t0 + Duration::from_millis(3),
            &result_for(&d, &inv, json!({"content": "payload-text", "bytesRead": 12, "eof": true})),
        );
        let t = serde_json::to_string(&rt.telemetry()).unwrap();
        for needle in [HANDLE, "secret-name", "call-xyz", "payload-text", "pi-tools.sock", "tool-", "agent-a"] {
            assert!(!t.contains(needle), "{needle} in {t}");
        }
        assert!(!t.contains(inv["requestId"].as_str().unwrap()));
        let v = rt.telemetry();
        assert_eq!(v["operations"]["fs.read"]["latencyMs"]["count"], 1);
        assert_eq!(v["operations"]["fs.read"]["latencyMs"]["min"], 3.0);
        assert_eq!(v["highWater"]["active"], 1);
    }
}
