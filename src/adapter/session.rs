//! The adapter's session protocol as a sans-I/O state machine (SPEC §4.5): the shell feeds it
//! lines, completions and time; it answers with lines to send, jobs to run and when to close.
//! Every frame rule comes from `contract`; this module only keeps the state.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use serde_json::Value;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::broken;
use super::faults::{self, Fault, Faults};
use super::fs::Cancel;
use super::idempotency::{self, fingerprint, IdempotencyCache, Lookup, SharedCache};
use crate::contract::descriptor::LimitValues;
use crate::contract::frame::{
    extra_keys_only, judge_adapter_frame, parse_bind_request, Binding, Direction, Disposition, FrameKind,
};
use crate::contract::operation::is_mutating;
use crate::contract::types::tool_adapter::AdapterLimits;
use crate::contract::types::tool_adapter::ToolOperation;
use crate::contract::{AdapterCode, AdapterError, Code};
use crate::wire::{decode_strict, encode_line, json_len};

/// Largest first line read before a binding exists: the compact `bind` frame with every
/// field at its contract maximum (`adapterId` 128 and `adapterVersion` 64 units, then
/// `hostInstanceId` 128 and `sessionId` 256 UTF-16 units of 3-byte characters, generation
/// 2^53-1, a 512-character handle, all six operations, every limit at its maximum), LF
/// included. A daemon encodes compactly (SPEC §1), so no legal bind is longer; a unit test
/// rebuilds that frame and checks this figure.
pub const MAX_BIND_LINE: usize = 2291;

/// One provisioned grant (see `adapter::grants`).
#[derive(Clone, Debug)]
pub struct Grant {
    /// SHA-256 of the capability handle.
    pub handle_sha256: [u8; 32],
    /// The handle's fingerprint, the content guard's prefilter (`None`: minted before it).
    pub handle_fingerprint: Option<u64>,
    /// The directory the binding is confined to.
    pub root: std::path::PathBuf,
    /// Device and inode of `root` when the grant was minted (`None`: a grant written before
    /// roots were pinned, which cannot bind).
    pub root_pin: Option<(u64, u64)>,
    /// Host incarnation the grant is for.
    pub host_instance_id: String,
    /// Session the grant is for.
    pub session_id: String,
    /// Generation the grant is for.
    pub generation: u64,
    /// Operations a bind may ask for.
    pub operations: Vec<ToolOperation>,
    /// Upper bounds of the limits a bind may ask for.
    pub ceilings: AdapterLimits,
}

/// Who this adapter is (a bind must name it).
#[derive(Clone, Debug)]
pub struct AdapterIdentity {
    /// `adapterId`.
    pub adapter_id: String,
    /// `adapterVersion`.
    pub adapter_version: String,
}

/// Why a bind was refused (content-free, for logs; the peer only sees the close).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BindRefusal {
    /// The line is not a well-formed `bind` (or not a bind at all).
    Malformed,
    /// No grant holds this handle.
    UnknownHandle,
    /// adapterId / adapterVersion name another adapter.
    WrongAdapter,
    /// Host, session or generation differ from the grant.
    WrongIdentity,
    /// An operation the grant does not allow.
    OperationNotGranted,
    /// A limit above the grant's ceiling.
    LimitAboveCeiling,
}

impl BindRefusal {
    /// A log-safe reason.
    pub fn as_str(self) -> &'static str {
        match self {
            BindRefusal::Malformed => "malformed_bind",
            BindRefusal::UnknownHandle => "unknown_handle",
            BindRefusal::WrongAdapter => "wrong_adapter",
            BindRefusal::WrongIdentity => "wrong_identity",
            BindRefusal::OperationNotGranted => AdapterCode::OperationNotGranted.as_str(),
            BindRefusal::LimitAboveCeiling => "limit_above_ceiling",
        }
    }
}

/// SHA-256 of a handle.
pub fn handle_digest(handle: &str) -> [u8; 32] {
    Sha256::digest(handle.as_bytes()).into()
}

/// Judge the first line of a connection against the grants. On success: the binding, the
/// index of its grant, and the `bound` line to send.
pub fn handle_bind(
    line: &[u8],
    grants: &[Grant],
    me: &AdapterIdentity,
) -> Result<(Binding, usize, Vec<u8>), BindRefusal> {
    handle_bind_with(line, grants, me, Faults::NONE)
}

/// [`handle_bind`] with fault switches (test aid: production passes [`Faults::NONE`]).
pub fn handle_bind_with(
    line: &[u8],
    grants: &[Grant],
    me: &AdapterIdentity,
    faults: Faults,
) -> Result<(Binding, usize, Vec<u8>), BindRefusal> {
    if faults.has(Fault::EscapedStringsRefused) && broken::has_escape(line) {
        return Err(BindRefusal::Malformed);
    }
    if faults.has(Fault::BindFloatSpellingRefused) && broken::has_float_spelling(line) {
        return Err(BindRefusal::Malformed);
    }
    let grant_of = |handle: &str| {
        let digest = handle_digest(handle);
        grants.iter().find(|g| g.handle_sha256 == digest).map(|g| (g.operations.clone(), g.ceilings.to_json()))
    };
    let folded = faults.has(Fault::KeysCaseInsensitive).then(|| broken::fold_key_case(line)).flatten();
    let line = folded.as_deref().unwrap_or(line);
    let rewritten = broken::lenient_bind_line(line, faults, &grant_of);
    let line = rewritten.as_deref().unwrap_or(line);
    let req = parse_bind_request(line, MAX_BIND_LINE + 1).map_err(|_| BindRefusal::Malformed)?;
    let digest = handle_digest(req.handle().expose());
    // Constant time in the handle: every grant is compared, and the comparison itself is
    // constant-time.
    let mut found: Option<usize> = None;
    for (i, g) in grants.iter().enumerate() {
        if bool::from(g.handle_sha256.ct_eq(&digest)) && found.is_none() {
            found = Some(i);
        }
    }
    if found.is_none() && faults.has(Fault::HandleLastCharOptional) {
        let digests: Vec<[u8; 32]> = grants.iter().map(|g| g.handle_sha256).collect();
        found = broken::short_handle_grant(&digests, req.handle().expose(), handle_digest);
    }
    if found.is_none() && faults.has(Fault::AcceptAnyHandle) && !grants.is_empty() {
        found = Some(0);
    }
    let i = found.ok_or(BindRefusal::UnknownHandle)?;
    let g = &grants[i];
    let id = req.identity();
    if (id.adapter_id != me.adapter_id
        || (id.adapter_version != me.adapter_version && !faults.has(Fault::IgnoreAdapterVersion)))
        && !faults.has(Fault::IgnoreAdapterIdentity)
    {
        return Err(BindRefusal::WrongAdapter);
    }
    if (id.host_instance_id != g.host_instance_id || id.session_id != g.session_id || id.generation != g.generation)
        && !faults.has(Fault::IgnoreBindIdentity)
    {
        return Err(BindRefusal::WrongIdentity);
    }
    if req.operations().iter().any(|op| !g.operations.contains(op)) && !faults.has(Fault::AcceptOperationsOutsideGrant)
    {
        return Err(BindRefusal::OperationNotGranted);
    }
    let checked = if faults.has(Fault::CeilingFirstLimitOnly) { 1 } else { usize::MAX };
    if req.limits().values().iter().zip(g.ceilings.values()).take(checked).any(|(asked, max)| *asked > max)
        && !faults.has(Fault::AcceptLimitsAboveGrant)
    {
        return Err(BindRefusal::LimitAboveCeiling);
    }
    let binding = req;
    let mut bound = binding.bound_frame();
    if faults.has(Fault::BoundEchoesGrant) {
        bound["operations"] = Value::Array(g.operations.iter().map(|o| Value::String(o.to_string())).collect());
        bound["limits"] = g.ceilings.to_json();
    }
    if faults.has(Fault::BoundLeaksHandle) {
        bound["capabilityHandle"] = Value::String(binding.handle().expose().to_string());
    }
    Ok((binding, i, encode_line(&bound)))
}

/// [`Job`] at its old path, `adapter::session::Job` (it lives in `job.rs`).
pub use super::job::Job;

/// Why the session closes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CloseReason {
    /// The daemon revoked the binding (after `revoked` is sent).
    Revoked,
    /// A frame that cannot be attributed (SPEC §4.5) — the code is in the log line.
    ProtocolViolation(&'static str),
    /// End of input.
    Eof,
    /// Even an error result would not fit `maxResponseBytes`.
    ResponseBudget,
}

/// What the shell must do.
#[derive(Debug)]
pub enum Action {
    /// Write this line (LF included).
    Send(Vec<u8>),
    /// Run this job.
    Execute(Job),
    /// Close the connection (after writing what was queued before).
    Close(CloseReason),
}

#[derive(Debug)]
enum Stage {
    Queued,
    Running(Cancel),
    Waiting,
}

#[derive(Debug)]
struct Inflight {
    key: String,
    operation: ToolOperation,
    payload: Value,
    stage: Stage,
    aborted: bool,
    /// Aborts that arrived after the commit point: `aborted:false` is sent only once the
    /// result is, since a daemon treats a result after `aborted` as fatal (SPEC §4.3, §4.5).
    late_aborts: Vec<String>,
}

/// Counters for logs and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Invokes admitted (run, queued or waiting).
    pub admitted: u64,
    /// Results sent.
    pub results: u64,
    /// `busy` refusals.
    pub busy: u64,
    /// Idempotent replays.
    pub replays: u64,
    /// Aborts that cancelled their target.
    pub aborted: u64,
}

/// One bound connection.
#[derive(Debug)]
pub struct Session {
    binding: Binding,
    /// `{"protocolVersion":…,"kind":"result",…,"generation":N` of this binding, encoded once:
    /// every result line starts with it.
    result_prefix: Vec<u8>,
    inflight: HashMap<String, Inflight>,
    queue: VecDeque<String>,
    running: usize,
    /// The idempotency cache, shared with the other sessions of this grant and binding
    /// identity in this process (a replacing bind inherits it, issue 25 N7).
    cache: SharedCache,
    /// This session's tag on the keys it runs.
    owner: u64,
    /// Jobs still running when the session closed, by request id: their key and operation,
    /// so their outcome still settles the shared cache (a mutation past its commit point is
    /// then replayed, never run twice).
    orphans: HashMap<String, (String, ToolOperation)>,
    finished: VecDeque<String>,
    closed: bool,
    counters: Counters,
    faults: Faults,
}

impl Session {
    /// A session for a binding accepted by [`handle_bind`].
    pub fn new(binding: Binding) -> Self {
        Self::with_faults(binding, Faults::NONE)
    }

    /// [`Session::new`] with fault switches (test aid: production passes [`Faults::NONE`]).
    pub fn with_faults(binding: Binding, faults: Faults) -> Self {
        let cache = SharedCache::new(IdempotencyCache::new(1, Duration::ZERO).into());
        Self::with_cache(binding, faults, cache)
    }

    /// A session whose idempotency cache is `cache`, shared with the earlier sessions of the
    /// same grant and binding identity; it takes this binding's `maxIdempotencyKeys` and
    /// `idempotencyTtlMs`.
    pub fn with_cache(binding: Binding, faults: Faults, cache: SharedCache) -> Self {
        static NEXT_OWNER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let l = *binding.limits();
        let keys = l.max_idempotency_keys.get() as usize - usize::from(faults.has(Fault::IdempotencyKeysOneShort))
            + usize::from(faults.has(Fault::IdempotencyKeysOneOver));
        let ttl = Duration::from_millis(l.idempotency_ttl_ms as u64);
        let ttl = if faults.has(Fault::IdempotencyTtlIgnored) { Duration::MAX } else { ttl };
        idempotency::lock(&cache).reconfigure(keys, ttl);
        let mut result_prefix = encode_line(&binding.identity().frame("result", []));
        result_prefix.truncate(result_prefix.len().saturating_sub(2)); // the closing `}` and LF
        Self {
            cache,
            owner: NEXT_OWNER.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            orphans: HashMap::new(),
            result_prefix,
            binding,
            inflight: HashMap::new(),
            queue: VecDeque::new(),
            running: 0,
            finished: VecDeque::new(),
            closed: false,
            counters: Counters::default(),
            faults,
        }
    }

    /// The binding.
    pub fn binding(&self) -> &Binding {
        &self.binding
    }

    /// Counters so far.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// Requests executing now.
    pub fn running(&self) -> usize {
        self.running
    }

    /// Requests waiting for a slot.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Longest line the daemon may send, LF excluded.
    pub fn max_line(&self) -> usize {
        let max = self.binding.limits().max_request_bytes as usize;
        if self.faults.has(Fault::LineLimitOnePast) {
            max
        } else {
            max - 1
        }
    }

    fn close(&mut self, reason: CloseReason) -> Vec<Action> {
        let mut out = Vec::new();
        if self.faults.has(Fault::RevokeRunsQueued) && matches!(reason, CloseReason::Revoked | CloseReason::Eof) {
            // Broken on purpose: the queued requests start, on a cancel nobody holds.
            while let Some(id) = self.queue.pop_front() {
                let budget = self.data_budget(&id);
                if let Some(f) = self.inflight.get_mut(&id) {
                    let (operation, payload) = (f.operation, std::mem::take(&mut f.payload));
                    out.push(Action::Execute(Job {
                        request_id: id,
                        operation,
                        payload,
                        budget,
                        cancel: Cancel::new(),
                    }));
                }
            }
        }
        self.release_all();
        out.push(Action::Close(reason));
        out
    }

    /// Stop everything: cancel the running jobs (kept as orphans until their outcome settles
    /// the shared cache) and forget the keys of those that never ran.
    fn release_all(&mut self) {
        self.closed = true;
        let mut cache = idempotency::lock(&self.cache);
        for (id, f) in self.inflight.drain() {
            match &f.stage {
                Stage::Running(c) => {
                    c.cancel();
                    self.orphans.insert(id, (f.key, f.operation));
                }
                Stage::Queued | Stage::Waiting => {
                    cache.forget(&f.key, &id);
                }
            }
        }
        self.queue.clear();
    }

    /// The idempotency key of request `request_id`, while it is in flight.
    pub fn key_of(&self, request_id: &str) -> Option<&str> {
        self.inflight.get(request_id).map(|f| f.key.as_str())
    }

    /// A framing error on the input (oversize line): close.
    pub fn handle_line_error(&mut self) -> Vec<Action> {
        self.close(CloseReason::ProtocolViolation(Code::AdapterProtocolInvalid.as_str()))
    }

    /// End of input: revocation (SPEC §4.5).
    pub fn handle_eof(&mut self) -> Vec<Action> {
        if self.closed {
            return vec![];
        }
        self.close(CloseReason::Eof)
    }

    /// One line from the daemon (LF excluded).
    pub fn handle_line(&mut self, now: Instant, line: &[u8]) -> Vec<Action> {
        if self.closed {
            return vec![];
        }
        if self.faults.has(Fault::LineLimitAtLfOnly) && line.len() > self.max_line() {
            // The shell read the line whole (its decoder has no limit): judged at its LF only.
            return self.handle_line_error();
        }
        if self.faults.has(Fault::LossyUtf8Lines) && std::str::from_utf8(line).is_err() {
            // Valid UTF-8 once decoded lossily, so this recurses once.
            let lossy = String::from_utf8_lossy(line).into_owned();
            return self.handle_line(now, lossy.as_bytes());
        }
        if self.faults.has(Fault::TrailingValuesRun) && decode_strict(line).is_err() {
            if let Some(spans) = broken::stream_values(line) {
                // Each span is one whole value: `stream_values` finds nothing more in it.
                return spans.into_iter().flat_map(|(a, b)| self.handle_line(now, &line[a..b])).collect();
            }
        }
        if self.faults.has(Fault::EscapedStringsRefused) && broken::has_escape(line) {
            return self.close(CloseReason::ProtocolViolation(Code::AdapterProtocolInvalid.as_str()));
        }
        if self.faults.has(Fault::KeysCaseInsensitive) {
            if let Some(folded) = broken::fold_key_case(line) {
                // Folding twice changes nothing, so this recurses once.
                return self.handle_line(now, &folded);
            }
        }
        let truncated;
        let line = if self.faults.has(Fault::FractionTruncated) {
            truncated = broken::truncate_fractions(line);
            &truncated[..]
        } else {
            line
        };
        if self.faults.has(Fault::FloatSpellingRefused) && broken::has_float_spelling(line) {
            let v = decode_strict(line).ok();
            let s = |k: &str| v.as_ref().and_then(|v| v[k].as_str()).map(str::to_string);
            let op = s("operation").and_then(|o| o.parse::<ToolOperation>().ok());
            if let (Some(rid), Some(key), Some(op)) = (s("requestId"), s("idempotencyKey"), op) {
                let err = AdapterError::new(AdapterCode::InvalidRequest, "a number is not an integer");
                return self.send_result(&rid, &key, op, Err(err));
            }
        }
        let frame = match judge_adapter_frame(line, &self.binding, Direction::ToAdapter) {
            Ok(f) => f,
            Err(e) => {
                if !self.faults.is_empty() {
                    if let Some(i) = broken::lenient_invoke(line, &self.binding, self.faults) {
                        return self.handle_invoke(now, i.request_id, i.key, i.op, i.payload);
                    }
                    let (ids, identity) =
                        (self.faults.has(Fault::AbortIdsUnchecked), self.faults.has(Fault::IgnoreAbortIdentity));
                    if ids || identity {
                        if let Some((id, target)) = broken::lenient_abort(line, &self.binding, ids, identity) {
                            return self.handle_abort(now, id, target);
                        }
                    }
                    if self.faults.has(Fault::ExtraFrameKeyReplies) && e.error.field() != "line" {
                        let a = decode_strict(line).ok().and_then(|v| extra_keys_only(&v, &self.binding));
                        if let Some(a) = a.filter(|a| !self.inflight.contains_key(&a.request_id)) {
                            let err = AdapterError::new(AdapterCode::InvalidRequest, "unknown frame key");
                            return self.send_result(&a.request_id, &a.idempotency_key, a.operation, Err(err));
                        }
                    }
                }
                if e.disposition == Disposition::Reply {
                    if let Some(a) = &e.attribution {
                        if self.inflight.contains_key(&a.request_id) {
                            return self.close(CloseReason::ProtocolViolation("duplicate_request_id"));
                        }
                        let err = AdapterError::new(
                            AdapterCode::from_wire(e.error.code.as_str()).unwrap_or(AdapterCode::InvalidRequest),
                            e.error.message.clone(),
                        );
                        return self.send_result(&a.request_id, &a.idempotency_key, a.operation, Err(err));
                    }
                }
                return self.close(CloseReason::ProtocolViolation(e.error.code.as_str()));
            }
        };
        match frame.kind {
            FrameKind::Bind if self.faults.has(Fault::AcceptSecondBind) => {
                vec![Action::Send(encode_line(&self.binding.bound_frame()))]
            }
            FrameKind::Bind => self.close(CloseReason::ProtocolViolation("second_bind")),
            FrameKind::Revoke => {
                if self.faults.has(Fault::RevokeNoReply) {
                    return self.close(CloseReason::Revoked);
                }
                let mut out = vec![Action::Send(encode_line(&self.binding.identity().frame("revoked", [])))];
                if !self.faults.has(Fault::KeepWorkingAfterRevoke) {
                    out.extend(self.close(CloseReason::Revoked));
                }
                out
            }
            FrameKind::Abort => {
                let (id, target) = (frame.str_field("requestId"), frame.str_field("targetRequestId"));
                self.handle_abort(now, id.to_string(), target.to_string())
            }
            FrameKind::Invoke(op) => {
                let request_id = frame.str_field("requestId").to_string();
                let key = frame.str_field("idempotencyKey").to_string();
                let mut value = frame.value;
                let payload = value.get_mut("payload").map(Value::take).unwrap_or(Value::Null);
                self.handle_invoke(now, request_id, key, op, payload)
            }
            // Adapter-to-daemon kinds never pass a to-adapter judgement.
            _ => self.close(CloseReason::ProtocolViolation(Code::AdapterProtocolInvalid.as_str())),
        }
    }

    fn handle_invoke(
        &mut self,
        now: Instant,
        request_id: String,
        key: String,
        op: ToolOperation,
        payload: Value,
    ) -> Vec<Action> {
        if self.inflight.contains_key(&request_id) && !self.faults.has(Fault::DuplicateRequestIdRuns) {
            return self.close(CloseReason::ProtocolViolation("duplicate_request_id"));
        }
        let fp = fingerprint_with(self.faults, op, &payload);
        let begun = idempotency::lock(&self.cache).begin(now, &key, fp, &request_id, self.owner, is_mutating(op));
        let lookup = match begun {
            Lookup::Replay(_) | Lookup::Wait(_) if self.faults.has(Fault::NoIdempotency) => Lookup::New,
            Lookup::Wait(_) if self.faults.has(Fault::InFlightDuplicateRuns) => Lookup::New,
            Lookup::Conflict if self.faults.has(Fault::NoIdempotencyConflict) => Lookup::New,
            l => l,
        };
        let is_new = lookup == Lookup::New;
        let waiting = match lookup {
            Lookup::Conflict => {
                let e =
                    AdapterError::new(AdapterCode::IdempotencyConflict, "idempotency key reused with another payload");
                return self.send_result(&request_id, &key, op, Err(e));
            }
            Lookup::Full => {
                self.counters.busy += 1;
                let e = AdapterError::new(AdapterCode::Busy, "idempotency key capacity reached");
                return self.send_result(&request_id, &key, op, Err(e));
            }
            // The first request with this key still runs on a connection this one replaced:
            // its outcome is not known yet, so a mutation must not run again (retry later).
            Lookup::InFlightElsewhere if is_mutating(op) => {
                self.counters.busy += 1;
                let e = AdapterError::new(AdapterCode::Busy, "the key's first request is still running");
                return self.send_result(&request_id, &key, op, Err(e));
            }
            Lookup::Replay(outcome) if is_mutating(op) => {
                self.counters.replays += 1;
                return self.send_result(&request_id, &key, op, outcome);
            }
            Lookup::Wait(_) if is_mutating(op) => true,
            // A read-only operation simply runs again.
            Lookup::Replay(_)
            | Lookup::Wait(_)
            | Lookup::InFlightElsewhere
            | Lookup::Rerun
            | Lookup::Untracked
            | Lookup::New => false,
        };
        let l = *self.binding.limits();
        let queue_cap = match l.max_queued_requests as usize {
            _ if self.faults.has(Fault::BusyEarly) => 0,
            q if self.faults.has(Fault::BusyOneLate) => q + 1,
            0 if self.faults.has(Fault::NoQueueUnbounded) => usize::MAX,
            q => q,
        };
        let concurrent = l.max_concurrent_requests.get() as usize;
        let full = if self.faults.has(Fault::ConcurrencyUnbounded) {
            // Nothing waits: every admitted request runs, so only their total is held.
            self.running + self.queue.len() >= concurrent + queue_cap
        } else {
            self.running >= concurrent && self.queue.len() >= queue_cap
        };
        if !waiting && !self.faults.has(Fault::NoBusy) && full {
            self.counters.busy += 1;
            let e = AdapterError::new(AdapterCode::Busy, "concurrency and queue limits reached");
            if is_new && self.faults.has(Fault::BusyRemembered) {
                idempotency::lock(&self.cache).settle(now, &key, &Err(e.clone()), is_mutating(op));
            } else if is_new {
                // The key was recorded for this request just now: a refusal leaves no trace.
                idempotency::lock(&self.cache).forget(&key, &request_id);
            }
            return self.send_result(&request_id, &key, op, Err(e));
        }
        self.counters.admitted += 1;
        let stage = if waiting { Stage::Waiting } else { Stage::Queued };
        self.inflight.insert(
            request_id.clone(),
            Inflight { key, operation: op, payload, stage, aborted: false, late_aborts: Vec::new() },
        );
        if waiting {
            return vec![];
        }
        self.queue.push_back(request_id);
        self.pump()
    }

    /// Start queued requests while slots are free.
    fn pump(&mut self) -> Vec<Action> {
        let mut out = Vec::new();
        let l = *self.binding.limits();
        let slots = match l.max_concurrent_requests.get() as usize {
            c if self.faults.has(Fault::ConcurrencyUnbounded) => c + l.max_queued_requests as usize,
            c => c,
        };
        while self.running < slots {
            let Some(id) = self.queue.pop_front() else { break };
            let budget = self.data_budget(&id);
            let Some(f) = self.inflight.get_mut(&id) else { continue };
            let cancel = Cancel::new();
            f.stage = Stage::Running(cancel.clone());
            self.running += 1;
            out.push(Action::Execute(Job {
                request_id: id,
                operation: f.operation,
                // Only a waiting request needs its payload again (its fingerprint, when it
                // is promoted); a running one never does.
                payload: std::mem::take(&mut f.payload),
                budget,
                cancel,
            }));
        }
        out
    }

    /// Bytes left for `data` in a result line for this request.
    fn data_budget(&self, request_id: &str) -> usize {
        if self.faults.has(Fault::NoResponseBudget) {
            return faults::NO_BUDGET;
        }
        let Some(f) = self.inflight.get(request_id) else { return 0 };
        (self.binding.limits().max_response_bytes as usize).saturating_sub(self.result_overhead(
            request_id,
            &f.key,
            f.operation,
        ))
    }

    /// The length of [`Session::result_line`] for a success, without its `data` value: what
    /// every byte of `data` must fit beside. Counted, not written (unit test below).
    fn result_overhead(&self, request_id: &str, key: &str, op: ToolOperation) -> usize {
        const FIXED: usize = ",\"requestId\":".len()
            + ",\"idempotencyKey\":".len()
            + ",\"operation\":".len()
            + ",\"ok\":true,\"data\":".len()
            + "}\n".len();
        let strings =
            [request_id, key, op_name(op)].iter().map(|s| json_len(*s).unwrap_or(usize::MAX / 4)).sum::<usize>();
        self.result_prefix.len() + FIXED + strings
    }

    /// The encoded `result` line (LF included), written directly: the identity prefix, then
    /// `requestId`, `idempotencyKey`, `operation`, `ok` and `data` or `error`, the same bytes
    /// as `encode_line(&identity.frame("result", [...]))` (unit test below).
    fn result_line(
        &self,
        request_id: &str,
        key: &str,
        op: ToolOperation,
        outcome: Result<&Value, &AdapterError>,
    ) -> Vec<u8> {
        fn string(out: &mut Vec<u8>, s: &str) {
            // Serializing a string into a Vec cannot fail.
            let _ = serde_json::to_writer(&mut *out, s);
        }
        let mut out = Vec::with_capacity(self.result_prefix.len() + 128);
        out.extend_from_slice(&self.result_prefix);
        out.extend_from_slice(b",\"requestId\":");
        string(&mut out, request_id);
        out.extend_from_slice(b",\"idempotencyKey\":");
        string(&mut out, key);
        out.extend_from_slice(b",\"operation\":");
        string(&mut out, op_name(op));
        let body = match outcome {
            Ok(data) => {
                out.extend_from_slice(b",\"ok\":true,\"data\":");
                serde_json::to_writer(&mut out, data)
            }
            Err(e) => {
                out.extend_from_slice(b",\"ok\":false,\"error\":");
                serde_json::to_writer(&mut out, &broken::error_body(e, self.faults))
            }
        };
        debug_assert!(body.is_ok(), "a JSON value always serializes");
        out.extend_from_slice(b"}\n");
        out
    }

    /// Build, police and send a result: never the handle, never over the budget.
    fn send_result(
        &mut self,
        request_id: &str,
        key: &str,
        op: ToolOperation,
        outcome: Result<Value, AdapterError>,
    ) -> Vec<Action> {
        let mut line = self.result_line(request_id, key, op, outcome.as_ref());
        if self.faults.has(Fault::EscapedHandleInResults) {
            line = broken::escape_handle(&line, self.binding.handle().expose());
        }
        if self.faults.has(Fault::MessageNamesPath) {
            line = broken::escape_solidus(&line);
        }
        let unscanned = self.faults.has(Fault::NoCapabilityScan)
            || (op == ToolOperation::FsSearch && self.faults.has(Fault::SearchResultUnscanned));
        if self.binding.handle().occurs_in(&line) && !unscanned {
            let e =
                AdapterError::new(AdapterCode::CapabilityInContent, "the result would contain the capability handle");
            line = self.result_line(request_id, key, op, Err(&e));
        }
        let over = line.len() as i64 > self.binding.limits().max_response_bytes
            || (self.faults.has(Fault::BudgetOffByOne)
                && line.len() as i64 == self.binding.limits().max_response_bytes);
        if over && !self.faults.has(Fault::NoResponseBudget) {
            let e = AdapterError::new(AdapterCode::ResponseTooLarge, "the result does not fit maxResponseBytes");
            line = self.result_line(request_id, key, op, Err(&e));
            if line.len() as i64 > self.binding.limits().max_response_bytes || self.binding.handle().occurs_in(&line) {
                return self.close(CloseReason::ResponseBudget);
            }
        }
        self.counters.results += 1;
        self.finished.push_back(request_id.to_string());
        while self.finished.len() > self.binding.limits().max_idempotency_keys.get() as usize {
            self.finished.pop_front();
        }
        vec![Action::Send(line)]
    }

    /// A job finished.
    pub fn handle_done(&mut self, now: Instant, request_id: &str, outcome: Result<Value, AdapterError>) -> Vec<Action> {
        if self.closed {
            // A job that outlived its session still settles the shared cache: nothing is sent.
            if let Some((key, op)) = self.orphans.remove(request_id) {
                idempotency::lock(&self.cache).finish(now, &key, request_id, &outcome, is_mutating(op));
            }
            return vec![];
        }
        let Some(f) = self.inflight.remove(request_id) else { return vec![] };
        if matches!(f.stage, Stage::Running(_)) {
            self.running = self.running.saturating_sub(1);
        }
        let mut out = Vec::new();
        if f.aborted {
            // aborted:true was sent: the result is never sent. A waiter takes over the key.
            let forgotten = idempotency::lock(&self.cache).forget(&f.key, request_id);
            if forgotten {
                out.extend(self.promote_waiter(now, &f.key));
            }
        } else {
            let keep = is_mutating(f.operation);
            let forget_error = outcome.is_err() && self.faults.has(Fault::ErrorsNotKept);
            let primary = if forget_error {
                idempotency::lock(&self.cache).forget(&f.key, request_id)
            } else {
                idempotency::lock(&self.cache).finish(now, &f.key, request_id, &outcome, keep)
            };
            let retryable = forget_error || outcome.as_ref().err().is_some_and(|e| e.code.retryable());
            // Requests waiting on this primary (same key and fingerprint, mutating).
            let waiters: Vec<String> = if primary {
                self.inflight
                    .iter()
                    .filter(|(_, w)| w.key == f.key && matches!(w.stage, Stage::Waiting))
                    .map(|(id, _)| id.clone())
                    .collect()
            } else {
                Vec::new()
            };
            let replay = (!waiters.is_empty() && !retryable).then(|| outcome.clone());
            out.extend(self.send_result(request_id, &f.key, f.operation, outcome));
            for abort_id in &f.late_aborts {
                out.push(Action::Send(self.aborted_frame(abort_id, request_id, false, None)));
            }
            match replay {
                // Nothing was kept: one waiter becomes the primary and runs; the others keep
                // waiting for it (so the operation never runs twice at once).
                None if !waiters.is_empty() && !self.faults.has(Fault::RetryableFailureStrandsDuplicate) => {
                    out.extend(self.promote_waiter(now, &f.key))
                }
                None => {}
                Some(outcome) => {
                    for w in waiters {
                        if let Some(wf) = self.inflight.remove(&w) {
                            self.counters.replays += 1;
                            out.extend(self.send_result(&w, &wf.key, wf.operation, outcome.clone()));
                        }
                    }
                }
            }
        }
        out.extend(self.pump());
        out
    }

    fn promote_waiter(&mut self, now: Instant, key: &str) -> Vec<Action> {
        let next = self
            .inflight
            .iter()
            .find(|(_, w)| w.key == key && matches!(w.stage, Stage::Waiting))
            .map(|(id, _)| id.clone());
        if let Some(id) = next {
            if let Some(f) = self.inflight.get_mut(&id) {
                f.stage = Stage::Queued;
            }
            let fp = self.inflight.get(&id).map(|f| fingerprint_with(self.faults, f.operation, &f.payload));
            if let Some(fp) = fp {
                let mutating = self.inflight.get(&id).is_some_and(|f| is_mutating(f.operation));
                let _ = idempotency::lock(&self.cache).begin(now, key, fp, &id, self.owner, mutating);
            }
            self.queue.push_back(id);
        }
        vec![]
    }

    fn aborted_frame(&self, request_id: &str, target: &str, aborted: bool, error: Option<AdapterError>) -> Vec<u8> {
        let mut extra = vec![
            ("requestId", Value::from(request_id)),
            ("targetRequestId", Value::from(target)),
            ("aborted", Value::Bool(aborted)),
        ];
        if let Some(e) = error {
            extra.push(("error", e.body()));
        }
        encode_line(&self.binding.identity().frame("aborted", extra))
    }

    fn handle_abort(&mut self, now: Instant, request_id: String, target: String) -> Vec<Action> {
        let Some(f) = self.inflight.get_mut(&target) else {
            if self.finished.contains(&target) {
                return vec![Action::Send(self.aborted_frame(&request_id, &target, false, None))];
            }
            let e = AdapterError::new(AdapterCode::UnknownRequest, "no such request in flight");
            let e = Some(e).filter(|_| !self.faults.has(Fault::AbortUnknownNoError));
            return vec![Action::Send(self.aborted_frame(&request_id, &target, false, e))];
        };
        let (cancelled, running) = match &f.stage {
            Stage::Running(_) if self.faults.has(Fault::AbortRunningIgnored) && !is_mutating(f.operation) => {
                (false, true)
            }
            Stage::Running(c) => (c.cancel(), true),
            Stage::Queued | Stage::Waiting => (!self.faults.has(Fault::AbortQueuedIgnored), false),
        };
        if !cancelled {
            // Past its commit point: its result follows, then `aborted:false` (see Inflight).
            f.late_aborts.push(request_id);
            return vec![];
        }
        if running && !self.faults.has(Fault::AbortSendsResult) && !self.faults.has(Fault::AbortResultLate) {
            f.aborted = true; // handle_done drops its outcome
        }
        self.counters.aborted += 1;
        let mut out = vec![Action::Send(self.aborted_frame(&request_id, &target, true, None))];
        let leave_waiter = self.faults.has(Fault::AbortLeavesWaiter)
            && self.inflight.get(&target).is_some_and(|f| matches!(f.stage, Stage::Waiting));
        if !running && !leave_waiter {
            if let Some(f) = self.inflight.remove(&target) {
                if matches!(f.stage, Stage::Queued) {
                    self.queue.retain(|q| q != &target);
                    let forgotten = idempotency::lock(&self.cache).forget(&f.key, &target);
                    if forgotten && !self.faults.has(Fault::AbortStrandsDuplicate) {
                        out.extend(self.promote_waiter(now, &f.key));
                    }
                    out.extend(self.pump());
                }
            }
        }
        out
    }
}

impl Drop for Session {
    /// A session dropped without closing (its task was aborted at shutdown) still cancels its
    /// jobs and forgets the keys of those that never ran.
    fn drop(&mut self) {
        if !self.closed {
            self.release_all();
        }
    }
}

/// The wire name of an operation.
fn op_name(op: ToolOperation) -> &'static str {
    match op {
        ToolOperation::FsList => "fs.list",
        ToolOperation::FsStat => "fs.stat",
        ToolOperation::FsRead => "fs.read",
        ToolOperation::FsSearch => "fs.search",
        ToolOperation::FsWrite => "fs.write",
        ToolOperation::FsEdit => "fs.edit",
    }
}

/// The idempotency fingerprint of an invoke: the contract's, on canonical JSON; under
/// [`Fault::FingerprintMemberOrder`] one that keeps the payload's members in the order sent.
fn fingerprint_with(faults: Faults, op: ToolOperation, payload: &Value) -> [u8; 32] {
    if faults.has(Fault::FingerprintMemberOrder) {
        broken::ordered_fingerprint(op, payload)
    } else {
        fingerprint(op, payload)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::descriptor::admit_descriptor;
    use serde_json::json;

    fn session(host: &str, session: &str) -> Session {
        let mut d: Value = serde_json::from_str(include_str!("../../vectors/bases/descriptor.json")).unwrap();
        d["binding"]["hostInstanceId"] = host.into();
        d["binding"]["sessionId"] = session.into();
        Session::new(Binding::from(&admit_descriptor(&d, None).unwrap()))
    }

    #[test]
    fn result_lines_are_the_encoded_result_frames() {
        let data = json!({"content": "a\"b\\c\n\u{1}€日本", "bytesRead": 9, "eof": true});
        let err = AdapterError::new(AdapterCode::NotFound, "no \"such\" file");
        for (host, sid) in [("host-019f", "agent-a"), ("h€\"\\", "s q日\"")] {
            let s = session(host, sid);
            for op in [ToolOperation::FsRead, ToolOperation::FsEdit, ToolOperation::FsSearch] {
                for outcome in [Ok(&data), Err(&err)] {
                    let mut extra = vec![
                        ("requestId", Value::from("r-1.x:y")),
                        ("idempotencyKey", Value::from("k_2")),
                        ("operation", Value::from(op.to_string())),
                    ];
                    match outcome {
                        Ok(d) => extra.extend([("ok", Value::Bool(true)), ("data", d.clone())]),
                        Err(e) => extra.extend([("ok", Value::Bool(false)), ("error", e.body())]),
                    }
                    let want = encode_line(&s.binding.identity().frame("result", extra));
                    assert_eq!(s.result_line("r-1.x:y", "k_2", op, outcome), want);
                }
                // The counted overhead is the line of an empty `data` without the `{}`.
                for (rid, key) in [("r-1.x:y", "k_2"), ("r\"\u{7}€", "k\\日")] {
                    let empty = json!({});
                    let line = s.result_line(rid, key, op, Ok(&empty));
                    assert_eq!(s.result_overhead(rid, key, op), line.len() - 2, "{rid} {key} {op}");
                }
            }
        }
    }

    fn invoke(s: &Session, rid: &str, key: &str, op: &str, payload: Value) -> Vec<u8> {
        let extra = [
            ("requestId", Value::from(rid)),
            ("idempotencyKey", Value::from(key)),
            ("operation", Value::from(op)),
            ("payload", payload),
        ];
        let mut line = encode_line(&s.binding.identity().frame("invoke", extra));
        line.pop();
        line
    }

    fn sent_code(actions: &[Action]) -> Option<String> {
        actions.iter().find_map(|a| match a {
            Action::Send(l) => {
                let v: Value = serde_json::from_slice(l).ok()?;
                Some(v["error"]["code"].as_str().unwrap_or("ok").to_string())
            }
            _ => None,
        })
    }

    /// SPEC §4.5: a key used by a read-only operation is remembered with its fingerprint; a
    /// reuse with another payload is a conflict (and runs nothing), the same payload runs again.
    #[test]
    fn a_read_only_key_reused_with_another_payload_is_a_conflict() {
        let mut s = session("host-019f", "agent-a");
        let t = Instant::now();
        let a = s.handle_line(t, &invoke(&s, "r1", "k1", "fs.read", json!({"path": "a.txt"})));
        assert!(matches!(&a[..], [Action::Execute(j)] if j.request_id == "r1"));
        let done = s.handle_done(t, "r1", Ok(json!({"content": "x", "bytesRead": 1, "eof": true})));
        assert_eq!(sent_code(&done).as_deref(), Some("ok"));
        let b = s.handle_line(t, &invoke(&s, "r2", "k1", "fs.stat", json!({"path": "b.txt"})));
        assert_eq!(sent_code(&b).as_deref(), Some("idempotency_conflict"));
        assert!(!b.iter().any(|a| matches!(a, Action::Execute(_))), "nothing runs on a conflict");
        let c = s.handle_line(t, &invoke(&s, "r3", "k1", "fs.read", json!({"path": "a.txt"})));
        assert!(matches!(&c[..], [Action::Execute(j)] if j.request_id == "r3"), "the same read runs again");
    }

    /// A read-only duplicate that runs beside its primary and is aborted while queued must not
    /// drop the primary's key (else another payload could reuse it unchallenged).
    #[test]
    fn an_aborted_duplicate_leaves_the_primary_key() {
        let mut d: Value = serde_json::from_str(include_str!("../../vectors/bases/descriptor.json")).unwrap();
        d["limits"]["maxConcurrentRequests"] = 1.into();
        let mut s = Session::new(Binding::from(&admit_descriptor(&d, None).unwrap()));
        let t = Instant::now();
        let p = json!({"path": "a.txt"});
        assert!(matches!(&s.handle_line(t, &invoke(&s, "r1", "k1", "fs.read", p.clone()))[..], [Action::Execute(_)]));
        assert!(s.handle_line(t, &invoke(&s, "r2", "k1", "fs.read", p.clone())).is_empty(), "r2 queues");
        let mut abort =
            s.binding.identity().frame("abort", [("requestId", "a1".into()), ("targetRequestId", "r2".into())]);
        let aborted = s.handle_line(t, &encode_line(&abort.take())[..]);
        assert!(!aborted.is_empty());
        let c = s.handle_line(t, &invoke(&s, "r3", "k1", "fs.stat", json!({"path": "b.txt"})));
        assert_eq!(sent_code(&c).as_deref(), Some("idempotency_conflict"));
    }

    #[test]
    fn max_bind_line_is_the_largest_legal_bind() {
        let wide = |n: usize| "\u{fffd}".repeat(n);
        let mut limits = serde_json::Map::new();
        for (k, _, max) in crate::contract::descriptor::LIMITS {
            limits.insert(k.into(), max.into());
        }
        let frame = json!({
            "protocolVersion": "1.0", "kind": "bind", "adapterId": "a".repeat(128),
            "adapterVersion": "1".repeat(64), "hostInstanceId": wide(128), "sessionId": wide(256),
            "generation": (1u64 << 53) - 1, "capabilityHandle": "A".repeat(512),
            "operations": crate::contract::operation::OPERATIONS,
            "limits": limits,
        });
        assert_eq!(encode_line(&frame).len(), MAX_BIND_LINE);
    }
}
