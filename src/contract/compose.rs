//! Well-formed frames, descriptors and commands built from the generated types (issue 14
//! item 1). The runners build what they send through these functions, so a value that breaks
//! the schema cannot be sent by accident: every generated newtype checks its pattern and
//! bounds as it is built, and a builder refuses with [`ComposeError`] instead. A deliberately
//! broken line (a negative case) cannot be expressed by a generated type and is written raw
//! by the case that sends it ([`typed_or_raw`] tells the two apart for a payload or a policy
//! a case may have broken on purpose).
//!
//! The generated structs serialize their members alphabetically; [`to_wire`] puts them in the
//! order the protocol text shows them (the envelope first, then the body), the order the
//! reference implementations write. Member order carries no meaning on the wire; it keeps
//! transcripts readable and the same as before.

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{Map, Value};

use super::adapter_error::AdapterError;
use super::command::RESOURCES;
use super::descriptor::{Descriptor, Identity, LIMITS};
use super::secret::CapabilityHandle;
use super::types::protocol_v2 as v2;
use super::types::tool_adapter as ta;
use super::types::tool_adapter::ToolOperation;

/// A value a builder was given that its generated type refuses (a harness bug: the runner
/// sends a broken line only on purpose, raw).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("cannot build `{member}`: {why}")]
pub struct ComposeError {
    /// The wire member whose value was refused.
    pub member: &'static str,
    /// What the generated type said (never the value itself: it may be a handle).
    pub why: String,
}

impl ComposeError {
    /// A refusal of `member`, saying why.
    pub fn new(member: &'static str, why: impl std::fmt::Display) -> Self {
        Self { member, why: why.to_string() }
    }
}

fn conv<T, S>(member: &'static str, s: S) -> Result<T, ComposeError>
where
    T: TryFrom<S>,
    T::Error: std::fmt::Display,
{
    T::try_from(s).map_err(|e| ComposeError { member, why: e.to_string() })
}

fn int<T: From<i64>>(member: &'static str, n: u64) -> Result<T, ComposeError> {
    i64::try_from(n).map(T::from).map_err(|_| ComposeError { member, why: "above i64".into() })
}

// ---------------------------------------------------------------- wire order

/// Top-level member order of an adapter frame.
const FRAME_ORDER: &[&str] = &[
    "protocolVersion",
    "kind",
    "adapterId",
    "adapterVersion",
    "hostInstanceId",
    "sessionId",
    "generation",
    "requestId",
    "idempotencyKey",
    "operation",
    "targetRequestId",
    "capabilityHandle",
    "operations",
    "limits",
    "ok",
    "aborted",
    "data",
    "error",
    "payload",
];

/// Top-level member order of a command.
const COMMAND_ORDER: &[&str] =
    &["protocolVersion", "requestId", "operation", "sessionId", "generation", "idempotencyKey", "payload"];

/// Member order of every nested object (and of a descriptor): the descriptor's members, the
/// open payload's, the model's, the wake payload's and a tool payload's `path` first.
const NESTED_ORDER: &[&str] = &[
    "protocolVersion",
    "adapterId",
    "adapterVersion",
    "transport",
    "endpoint",
    "hostInstanceId",
    "sessionId",
    "generation",
    "capabilityHandle",
    "binding",
    "operations",
    "limits",
    "cwd",
    "agentDir",
    "session",
    "mode",
    "sessionDir",
    "path",
    "resources",
    "descriptor",
    "model",
    "provider",
    "id",
    "thinkingLevel",
    "prompt",
    "source",
    "waitForTerminal",
];

fn rank(order: &[&str], key: &str) -> usize {
    if let Some(i) = order.iter().position(|k| *k == key) {
        return i;
    }
    // The seven limits and the six resource policies in their canonical orders.
    let base = order.len();
    if let Some(i) = LIMITS.iter().position(|(k, _, _)| *k == key) {
        return base + i;
    }
    if let Some(i) = RESOURCES.iter().position(|k| *k == key) {
        return base + LIMITS.len() + i;
    }
    usize::MAX
}

fn reorder(v: Value, order: &[&str]) -> Value {
    match v {
        Value::Object(m) => {
            let mut members: Vec<(String, Value)> = m.into_iter().map(|(k, x)| (k, reorder(x, NESTED_ORDER))).collect();
            // A stable sort: members the lists do not name keep their serialized order, last.
            members.sort_by_key(|(k, _)| rank(order, k));
            Value::Object(members.into_iter().collect::<Map<String, Value>>())
        }
        Value::Array(a) => Value::Array(a.into_iter().map(|x| reorder(x, NESTED_ORDER)).collect()),
        other => other,
    }
}

/// The wire value of a generated frame, command or descriptor, its members in wire order.
pub fn to_wire<T: Serialize>(t: &T) -> Value {
    let v = serde_json::to_value(t).unwrap_or(Value::Null);
    let order = match &v {
        Value::Object(m) if m.contains_key("kind") => FRAME_ORDER,
        Value::Object(m) if m.contains_key("operation") && m.contains_key("requestId") => COMMAND_ORDER,
        _ => NESTED_ORDER,
    };
    reorder(v, order)
}

/// `value` decoded into the generated type `T` when it fits it and says exactly the same
/// (it encodes back to an equal document); `Err(value)` unchanged otherwise — a payload or
/// policy a negative case broke on purpose, which is sent raw. The round trip matters: a
/// generated `Option` decodes a JSON `null` as absent, so a typed copy of `{"offset": null}`
/// would silently send `{}`, not the spelling the case chose.
pub fn typed_or_raw<T: DeserializeOwned + Serialize>(value: Value) -> Result<T, Value> {
    match T::deserialize(&value) {
        Ok(t) if serde_json::to_value(&t).is_ok_and(|back| back == value) => Ok(t),
        _ => Err(value),
    }
}

// ---------------------------------------------------------------- adapter frames

/// The identity members of every frame of a binding, typed.
struct Ids {
    adapter_id: ta::AdapterId,
    adapter_version: ta::AdapterVersion,
    host_instance_id: ta::HostInstanceId,
    session_id: ta::SessionId,
    generation: ta::Generation,
}

fn ids(id: &Identity<'_>) -> Result<Ids, ComposeError> {
    if id.protocol_version != ta::AdapterProtocolVersion::X10.to_string() {
        return Err(ComposeError { member: "protocolVersion", why: "a frame is version 1.0".into() });
    }
    Ok(Ids {
        adapter_id: conv("adapterId", id.adapter_id)?,
        adapter_version: conv("adapterVersion", id.adapter_version)?,
        host_instance_id: conv("hostInstanceId", id.host_instance_id)?,
        session_id: conv("sessionId", id.session_id)?,
        generation: int("generation", id.generation)?,
    })
}

// The frames of an admitted descriptor live here, not in `descriptor.rs`, so that `descriptor`
// does not import `compose` (no import cycle, tests/tidy.rs).
impl Descriptor {
    /// The normalized `bind` frame, generated (carries the handle: send it, never log it).
    pub fn bind(&self) -> ta::BindFrame {
        bind(self.doc())
    }

    /// The normalized `bind` frame's wire value (carries the handle: send it, never log it).
    pub fn bind_frame(&self) -> Value {
        to_wire(&self.bind())
    }

    /// The normalized `bound` frame the adapter must echo.
    pub fn bound_frame(&self) -> Value {
        to_wire(&bound(&self.bind()))
    }
}

/// The normalized `bind` frame of an admitted descriptor (SPEC §3.3): its identity, handle,
/// operations and limits (carries the handle: send it, never log it).
pub fn bind(d: &ta::HostToolAdapterDescriptor) -> ta::BindFrame {
    ta::BindFrame {
        adapter_id: d.adapter_id.clone(),
        adapter_version: d.adapter_version.clone(),
        capability_handle: d.binding.capability_handle.clone(),
        generation: d.binding.generation.clone(),
        host_instance_id: d.binding.host_instance_id.clone(),
        kind: ta::KindBind::Bind,
        limits: d.limits,
        operations: d.operations.clone(),
        protocol_version: d.protocol_version,
        session_id: d.binding.session_id.clone(),
    }
}

/// The normalized `bound` frame answering `bind` (SPEC §3.3): its exact echo without the
/// handle.
pub fn bound(b: &ta::BindFrame) -> ta::BoundFrame {
    ta::BoundFrame {
        adapter_id: b.adapter_id.clone(),
        adapter_version: b.adapter_version.clone(),
        generation: b.generation.clone(),
        host_instance_id: b.host_instance_id.clone(),
        kind: ta::KindBound::Bound,
        limits: b.limits,
        operations: b.operations.clone(),
        protocol_version: b.protocol_version,
        session_id: b.session_id.clone(),
    }
}

/// The `revoke` of the binding a `bind` made (infallible: every member is already typed).
pub fn revoke_of(b: &ta::BindFrame) -> ta::RevokeFrame {
    ta::RevokeFrame {
        adapter_id: b.adapter_id.clone(),
        adapter_version: b.adapter_version.clone(),
        generation: b.generation.clone(),
        host_instance_id: b.host_instance_id.clone(),
        kind: ta::KindRevoke::Revoke,
        protocol_version: b.protocol_version,
        session_id: b.session_id.clone(),
    }
}

/// An `abort` of `target` on the binding a `bind` made.
pub fn abort_of(b: &ta::BindFrame, request_id: &str, target: &str) -> Result<ta::AbortFrame, ComposeError> {
    Ok(ta::AbortFrame {
        adapter_id: b.adapter_id.clone(),
        adapter_version: b.adapter_version.clone(),
        generation: b.generation.clone(),
        host_instance_id: b.host_instance_id.clone(),
        kind: ta::KindAbort::Abort,
        protocol_version: b.protocol_version,
        request_id: conv("requestId", request_id)?,
        session_id: b.session_id.clone(),
        target_request_id: conv("targetRequestId", target)?,
    })
}

/// An `abort` of `target`.
pub fn abort(id: &Identity<'_>, request_id: &str, target: &str) -> Result<ta::AbortFrame, ComposeError> {
    let i = ids(id)?;
    Ok(ta::AbortFrame {
        adapter_id: i.adapter_id,
        adapter_version: i.adapter_version,
        generation: i.generation,
        host_instance_id: i.host_instance_id,
        kind: ta::KindAbort::Abort,
        protocol_version: ta::AdapterProtocolVersion::X10,
        request_id: conv("requestId", request_id)?,
        session_id: i.session_id,
        target_request_id: conv("targetRequestId", target)?,
    })
}

/// A `revoke` of the binding.
pub fn revoke(id: &Identity<'_>) -> Result<ta::RevokeFrame, ComposeError> {
    let i = ids(id)?;
    Ok(ta::RevokeFrame {
        adapter_id: i.adapter_id,
        adapter_version: i.adapter_version,
        generation: i.generation,
        host_instance_id: i.host_instance_id,
        kind: ta::KindRevoke::Revoke,
        protocol_version: ta::AdapterProtocolVersion::X10,
        session_id: i.session_id,
    })
}

/// The `revoked` acknowledgement of the binding.
pub fn revoked(id: &Identity<'_>) -> Result<ta::RevokedFrame, ComposeError> {
    let i = ids(id)?;
    Ok(ta::RevokedFrame {
        adapter_id: i.adapter_id,
        adapter_version: i.adapter_version,
        generation: i.generation,
        host_instance_id: i.host_instance_id,
        kind: ta::KindRevoked::Revoked,
        protocol_version: ta::AdapterProtocolVersion::X10,
        session_id: i.session_id,
    })
}

/// The `aborted:true` acknowledgement of the abort `request_id` of `target`.
pub fn aborted(id: &Identity<'_>, request_id: &str, target: &str) -> Result<ta::AbortedTrue, ComposeError> {
    let i = ids(id)?;
    Ok(ta::AbortedTrue {
        aborted: ta::True(true),
        adapter_id: i.adapter_id,
        adapter_version: i.adapter_version,
        generation: i.generation,
        host_instance_id: i.host_instance_id,
        kind: ta::KindAborted::Aborted,
        protocol_version: ta::AdapterProtocolVersion::X10,
        request_id: conv("requestId", request_id)?,
        session_id: i.session_id,
        target_request_id: conv("targetRequestId", target)?,
    })
}

/// A well-formed tool request: the payload of an `invoke`, one generated `Fs*Request`.
#[derive(Clone, Debug)]
pub enum Request {
    /// `fs.list`.
    List(ta::FsListRequest),
    /// `fs.stat`.
    Stat(ta::FsStatRequest),
    /// `fs.read`.
    Read(ta::FsReadRequest),
    /// `fs.search`.
    Search(ta::FsSearchRequest),
    /// `fs.write`.
    Write(ta::FsWriteRequest),
    /// `fs.edit`.
    Edit(ta::FsEditRequest),
}

impl Request {
    /// `payload` as the request type of `op`, when that type accepts it; `None` when it does
    /// not (a payload a case broke on purpose, which is sent raw).
    pub fn from_payload(op: ToolOperation, payload: &Value) -> Option<Request> {
        let p = payload.clone();
        Some(match op {
            ToolOperation::FsList => Request::List(typed_or_raw(p).ok()?),
            ToolOperation::FsStat => Request::Stat(typed_or_raw(p).ok()?),
            ToolOperation::FsRead => Request::Read(typed_or_raw(p).ok()?),
            ToolOperation::FsSearch => Request::Search(typed_or_raw(p).ok()?),
            ToolOperation::FsWrite => Request::Write(typed_or_raw(p).ok()?),
            ToolOperation::FsEdit => Request::Edit(typed_or_raw(p).ok()?),
        })
    }

    /// The operation the request is for.
    pub fn operation(&self) -> ToolOperation {
        match self {
            Request::List(_) => ToolOperation::FsList,
            Request::Stat(_) => ToolOperation::FsStat,
            Request::Read(_) => ToolOperation::FsRead,
            Request::Search(_) => ToolOperation::FsSearch,
            Request::Write(_) => ToolOperation::FsWrite,
            Request::Edit(_) => ToolOperation::FsEdit,
        }
    }

    /// The payload's wire value (`path` first).
    pub fn payload(&self) -> Value {
        match self {
            Request::List(r) => to_wire(r),
            Request::Stat(r) => to_wire(r),
            Request::Read(r) => to_wire(r),
            Request::Search(r) => to_wire(r),
            Request::Write(r) => to_wire(r),
            Request::Edit(r) => to_wire(r),
        }
    }
}

/// An `invoke` of `request`.
pub fn invoke_request(
    id: &Identity,
    request_id: &str,
    key: &str,
    request: Request,
) -> Result<ta::AdapterFrame, ComposeError> {
    let i = ids(id)?;
    let request_id: ta::RequestId = conv("requestId", request_id)?;
    let idempotency_key: ta::IdempotencyKey = conv("idempotencyKey", key)?;
    macro_rules! invoke_of {
        ($variant:ident, $op:expr, $payload:expr) => {
            ta::AdapterFrame::$variant(ta::$variant {
                adapter_id: i.adapter_id,
                adapter_version: i.adapter_version,
                generation: i.generation,
                host_instance_id: i.host_instance_id,
                idempotency_key,
                kind: ta::KindInvoke::Invoke,
                operation: $op,
                payload: $payload,
                protocol_version: ta::AdapterProtocolVersion::X10,
                request_id,
                session_id: i.session_id,
            })
        };
    }
    Ok(match request {
        Request::List(p) => invoke_of!(InvokeFsList, ta::OpFsList::FsList, p),
        Request::Stat(p) => invoke_of!(InvokeFsStat, ta::OpFsStat::FsStat, p),
        Request::Read(p) => invoke_of!(InvokeFsRead, ta::OpFsRead::FsRead, p),
        Request::Search(p) => invoke_of!(InvokeFsSearch, ta::OpFsSearch::FsSearch, p),
        Request::Write(p) => invoke_of!(InvokeFsWrite, ta::OpFsWrite::FsWrite, p),
        Request::Edit(p) => invoke_of!(InvokeFsEdit, ta::OpFsEdit::FsEdit, p),
    })
}

/// An `invoke` of `op` with `payload`, when the payload is one the operation's generated
/// request type accepts: `Ok(None)` when it is not (a payload a case broke on purpose, which
/// the case sends raw).
pub fn invoke(
    id: &Identity<'_>,
    request_id: &str,
    key: &str,
    op: ToolOperation,
    payload: &Value,
) -> Result<Option<ta::AdapterFrame>, ComposeError> {
    match Request::from_payload(op, payload) {
        Some(r) => invoke_request(id, request_id, key, r).map(Some),
        None => {
            // The ids are still checked, as for a typed payload.
            ids(id)?;
            conv::<ta::RequestId, _>("requestId", request_id)?;
            conv::<ta::IdempotencyKey, _>("idempotencyKey", key)?;
            Ok(None)
        }
    }
}

/// A successful `result` of `op` carrying `data`, when `data` is one the operation's generated
/// data type accepts: `Ok(None)` when it is not.
pub fn result(
    id: &Identity,
    request_id: &str,
    key: &str,
    op: ToolOperation,
    data: &Value,
) -> Result<Option<ta::AdapterFrame>, ComposeError> {
    let i = ids(id)?;
    let request_id: ta::RequestId = conv("requestId", request_id)?;
    let idempotency_key: ta::IdempotencyKey = conv("idempotencyKey", key)?;
    macro_rules! result_of {
        ($variant:ident, $op:expr) => {
            match typed_or_raw(data.clone()) {
                Ok(data) => ta::AdapterFrame::$variant(ta::$variant {
                    adapter_id: i.adapter_id,
                    adapter_version: i.adapter_version,
                    data,
                    generation: i.generation,
                    host_instance_id: i.host_instance_id,
                    idempotency_key,
                    kind: ta::KindResult::Result,
                    ok: ta::True(true),
                    operation: $op,
                    protocol_version: ta::AdapterProtocolVersion::X10,
                    request_id,
                    session_id: i.session_id,
                }),
                Err(_) => return Ok(None),
            }
        };
    }
    Ok(Some(match op {
        ToolOperation::FsList => result_of!(ResultFsList, ta::OpFsList::FsList),
        ToolOperation::FsStat => result_of!(ResultFsStat, ta::OpFsStat::FsStat),
        ToolOperation::FsRead => result_of!(ResultFsRead, ta::OpFsRead::FsRead),
        ToolOperation::FsSearch => result_of!(ResultFsSearch, ta::OpFsSearch::FsSearch),
        ToolOperation::FsWrite => result_of!(ResultFsWrite, ta::OpFsWrite::FsWrite),
        ToolOperation::FsEdit => result_of!(ResultFsEdit, ta::OpFsEdit::FsEdit),
    }))
}

/// A failed `result` of `op` with `error`.
pub fn result_error(
    id: &Identity,
    request_id: &str,
    key: &str,
    op: ToolOperation,
    error: &AdapterError,
) -> Result<ta::ResultError, ComposeError> {
    let i = ids(id)?;
    Ok(ta::ResultError {
        adapter_id: i.adapter_id,
        adapter_version: i.adapter_version,
        error: ta::AdapterErrorBody {
            code: conv("error.code", error.code.as_str())?,
            message: conv("error.message", error.message.as_str())?,
            retryable: error.code.retryable(),
        },
        generation: i.generation,
        host_instance_id: i.host_instance_id,
        idempotency_key: conv("idempotencyKey", key)?,
        kind: ta::KindResult::Result,
        ok: ta::False(false),
        operation: op,
        protocol_version: ta::AdapterProtocolVersion::X10,
        request_id: conv("requestId", request_id)?,
        session_id: i.session_id,
    })
}

/// A host tool adapter descriptor for the adapter at `endpoint` (a Unix socket path).
pub fn descriptor(
    id: &Identity<'_>,
    endpoint: &str,
    handle: &CapabilityHandle,
    operations: &[ToolOperation],
    limits: &ta::AdapterLimits,
) -> Result<ta::HostToolAdapterDescriptor, ComposeError> {
    let i = ids(id)?;
    Ok(ta::HostToolAdapterDescriptor {
        adapter_id: i.adapter_id,
        adapter_version: i.adapter_version,
        binding: ta::AdapterBinding {
            capability_handle: handle.clone(),
            generation: i.generation,
            host_instance_id: i.host_instance_id,
            session_id: i.session_id,
        },
        endpoint: ta::AdapterEndpoint {
            path: conv("endpoint.path", endpoint)?,
            transport: ta::EndpointTransport::Unix,
        },
        limits: *limits,
        operations: ta::ToolOperations(operations.to_vec()),
        protocol_version: ta::AdapterProtocolVersion::X10,
    })
}

// ---------------------------------------------------------------- commands

/// The envelope members every command has.
pub struct Envelope<'a> {
    /// `protocolVersion` (`"2.0"`, or `"1.0"` for a v1 command).
    pub version: &'a str,
    /// `requestId`.
    pub request_id: &'a str,
}

/// `sessionId` and `generation` of a session command.
pub struct SessionRef<'a> {
    /// `sessionId`.
    pub session_id: &'a str,
    /// `generation`.
    pub generation: u64,
}

fn version(e: &Envelope<'_>) -> Result<v2::EnvelopeVersion, ComposeError> {
    conv("protocolVersion", e.version)
}

fn rid(e: &Envelope<'_>) -> Result<v2::CommandRequestId, ComposeError> {
    conv("requestId", e.request_id)
}

fn sid(s: &SessionRef<'_>) -> Result<v2::EnvSessionId, ComposeError> {
    conv("sessionId", s.session_id)
}

/// A `handshake`.
pub fn handshake(e: &Envelope<'_>) -> Result<v2::HandshakeCommand, ComposeError> {
    Ok(v2::HandshakeCommand {
        operation: v2::HandshakeCommandOperation::Handshake,
        payload: v2::EmptyTolerantPayload(Map::new()),
        protocol_version: version(e)?,
        request_id: rid(e)?,
    })
}

/// A `drain`, with `timeoutMs` when given.
pub fn drain(e: &Envelope<'_>, timeout_ms: Option<u64>) -> Result<v2::DrainCommand, ComposeError> {
    Ok(v2::DrainCommand {
        operation: v2::DrainCommandOperation::Drain,
        payload: v2::DrainPayload { timeout_ms: timeout_ms.map(|t| int("payload.timeoutMs", t)).transpose()? },
        protocol_version: version(e)?,
        request_id: rid(e)?,
    })
}

/// The resources of an open: every policy `"none"`, and `tools`.
pub fn resources(tools: v2::ToolsPolicy) -> v2::OpenResources {
    let none = v2::NoneResource::None;
    v2::OpenResources {
        context_files: none,
        extensions: none,
        prompt_templates: none,
        skills: none,
        system_prompt: None,
        themes: none,
        tools,
    }
}

/// The tools policy of a host adapter with `descriptor`.
pub fn host_adapter(descriptor: ta::HostToolAdapterDescriptor) -> v2::ToolsPolicy {
    v2::ToolsPolicy::HostAdapterTools(v2::HostAdapterTools { descriptor, mode: v2::HostAdapterToolsMode::HostAdapter })
}

/// The payload of an open of a new session in `cwd`.
pub fn open_payload(cwd: &str, resources: v2::OpenResources) -> Result<v2::OpenPayload, ComposeError> {
    Ok(v2::OpenPayload {
        agent_dir: None,
        cwd: conv("payload.cwd", cwd)?,
        model: None,
        name: None,
        resources: Some(resources),
        session: v2::OpenSession { mode: v2::OpenSessionMode::New, path: None, session_dir: None },
    })
}

/// A model selection `{provider, id}`.
pub fn model(provider: &str, id: &str) -> Result<v2::OpenModel, ComposeError> {
    Ok(v2::OpenModel {
        id: conv("payload.model.id", id)?,
        provider: conv("payload.model.provider", provider)?,
        thinking_level: None,
    })
}

/// An `open`.
pub fn open(e: &Envelope<'_>, s: &SessionRef<'_>, payload: v2::OpenPayload) -> Result<v2::OpenCommand, ComposeError> {
    Ok(v2::OpenCommand {
        generation: int("generation", s.generation)?,
        operation: v2::OpenCommandOperation::Open,
        payload,
        protocol_version: version(e)?,
        request_id: rid(e)?,
        session_id: sid(s)?,
    })
}

/// A `wake` with `prompt`.
pub fn wake(e: &Envelope<'_>, s: &SessionRef<'_>, key: &str, prompt: &str) -> Result<v2::WakeCommand, ComposeError> {
    Ok(v2::WakeCommand {
        generation: int("generation", s.generation)?,
        idempotency_key: conv("idempotencyKey", key)?,
        operation: v2::WakeCommandOperation::Wake,
        payload: v2::WakePayload { prompt: conv("payload.prompt", prompt)?, source: None, wait_for_terminal: None },
        protocol_version: version(e)?,
        request_id: rid(e)?,
        session_id: sid(s)?,
    })
}

/// An `attach`.
pub fn attach(e: &Envelope<'_>, s: &SessionRef<'_>) -> Result<v2::AttachCommand, ComposeError> {
    Ok(v2::AttachCommand {
        generation: int("generation", s.generation)?,
        operation: v2::AttachCommandOperation::Attach,
        payload: v2::EmptyTolerantPayload(Map::new()),
        protocol_version: version(e)?,
        request_id: rid(e)?,
        session_id: sid(s)?,
    })
}

/// A `detach`.
pub fn detach(e: &Envelope<'_>, s: &SessionRef<'_>) -> Result<v2::DetachCommand, ComposeError> {
    Ok(v2::DetachCommand {
        generation: int("generation", s.generation)?,
        operation: v2::DetachCommandOperation::Detach,
        payload: v2::EmptyTolerantPayload(Map::new()),
        protocol_version: version(e)?,
        request_id: rid(e)?,
        session_id: sid(s)?,
    })
}

/// A `close` (retention left to the daemon's default).
pub fn close(e: &Envelope<'_>, s: &SessionRef<'_>) -> Result<v2::CloseCommand, ComposeError> {
    Ok(v2::CloseCommand {
        generation: int("generation", s.generation)?,
        operation: v2::CloseCommandOperation::Close,
        payload: v2::ClosePayload::default(),
        protocol_version: version(e)?,
        request_id: rid(e)?,
        session_id: sid(s)?,
    })
}

/// The identity the unit tests of `compose` and of the runners' builders frame with.
#[cfg(test)]
pub(crate) fn test_identity() -> Identity<'static> {
    Identity {
        protocol_version: "1.0",
        adapter_id: "probe",
        adapter_version: "1.0.0",
        host_instance_id: "host-1",
        session_id: "s-1",
        generation: 3,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::descriptor::admit_descriptor;
    use crate::contract::frame::{parse_adapter_frame, Binding, Direction};
    use crate::contract::{parse_command, HostContext};

    use super::test_identity as identity;

    fn line(v: &Value) -> Vec<u8> {
        serde_json::to_vec(v).unwrap()
    }

    fn wire_descriptor() -> Value {
        let l = crate::contract::descriptor::const_limits([4096, 4096, 2, 4, 1000, 16, 60_000]);
        let h = CapabilityHandle::new("A".repeat(43));
        to_wire(
            &descriptor(&identity(), "/run/a.sock", &h, &[ToolOperation::FsStat, ToolOperation::FsRead], &l).unwrap(),
        )
    }

    #[test]
    fn a_built_descriptor_is_admitted_and_in_wire_order() {
        let d = wire_descriptor();
        let keys: Vec<&str> = d.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            ["protocolVersion", "adapterId", "adapterVersion", "endpoint", "binding", "operations", "limits"]
        );
        let limits: Vec<&str> = d["limits"].as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(limits, LIMITS.map(|(k, _, _)| k));
        let a = admit_descriptor(&d, None).expect("a built descriptor is admitted");
        assert_eq!(a.identity(), identity());
        assert_eq!(a.operations(), [ToolOperation::FsStat, ToolOperation::FsRead]);
    }

    /// The exact bytes of a composed `bind`, `bound` and `invoke`: building them from the
    /// generated types leaves the wire as it was (member order included).
    #[test]
    fn composed_frames_have_pinned_bytes() {
        let d = admit_descriptor(&wire_descriptor(), None).unwrap();
        let h = "A".repeat(43);
        let bind = String::from_utf8(crate::wire::encode_line(&d.bind_frame())).unwrap();
        assert_eq!(
            bind,
            format!(
                "{{\"protocolVersion\":\"1.0\",\"kind\":\"bind\",\"adapterId\":\"probe\",\"adapterVersion\":\"1.0.0\",\
                 \"hostInstanceId\":\"host-1\",\"sessionId\":\"s-1\",\"generation\":3,\"capabilityHandle\":\"{h}\",\
                 \"operations\":[\"fs.stat\",\"fs.read\"],\"limits\":{{\"maxRequestBytes\":4096,\"maxResponseBytes\":4096,\
                 \"maxConcurrentRequests\":2,\"maxQueuedRequests\":4,\"requestTimeoutMs\":1000,\"maxIdempotencyKeys\":16,\
                 \"idempotencyTtlMs\":60000}}}}\n"
            )
        );
        assert_eq!(bind.len(), d.bind_bytes());
        let bound = crate::wire::encode_line(&d.bound_frame());
        assert_eq!(
            bound,
            b"{\"protocolVersion\":\"1.0\",\"kind\":\"bound\",\"adapterId\":\"probe\",\"adapterVersion\":\"1.0.0\",\
              \"hostInstanceId\":\"host-1\",\"sessionId\":\"s-1\",\"generation\":3,\"operations\":[\"fs.stat\",\"fs.read\"],\
              \"limits\":{\"maxRequestBytes\":4096,\"maxResponseBytes\":4096,\"maxConcurrentRequests\":2,\
              \"maxQueuedRequests\":4,\"requestTimeoutMs\":1000,\"maxIdempotencyKeys\":16,\"idempotencyTtlMs\":60000}}\n"
        );
        assert_eq!(bound.len(), d.bound_bytes());
        let inv = invoke(
            &d.identity(),
            "r-1",
            "k-1",
            ToolOperation::FsRead,
            &serde_json::json!({"path": "a", "maxBytes": 5}),
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            crate::wire::encode_line(&to_wire(&inv)),
            b"{\"protocolVersion\":\"1.0\",\"kind\":\"invoke\",\"adapterId\":\"probe\",\"adapterVersion\":\"1.0.0\",\
              \"hostInstanceId\":\"host-1\",\"sessionId\":\"s-1\",\"generation\":3,\"requestId\":\"r-1\",\
              \"idempotencyKey\":\"k-1\",\"operation\":\"fs.read\",\"payload\":{\"path\":\"a\",\"maxBytes\":5}}\n"
        );
    }

    #[test]
    fn built_frames_pass_the_frame_rules() {
        let b = Binding::from(&admit_descriptor(&wire_descriptor(), None).unwrap());
        let inv =
            invoke(&identity(), "r-1", "k-1", ToolOperation::FsRead, &serde_json::json!({"path": "a", "maxBytes": 5}))
                .unwrap()
                .expect("a well-formed payload is typed");
        let inv = to_wire(&inv);
        let keys: Vec<&str> = inv.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "protocolVersion",
                "kind",
                "adapterId",
                "adapterVersion",
                "hostInstanceId",
                "sessionId",
                "generation",
                "requestId",
                "idempotencyKey",
                "operation",
                "payload"
            ]
        );
        assert_eq!(inv["payload"], serde_json::json!({"path": "a", "maxBytes": 5}));
        for f in [inv, to_wire(&abort(&identity(), "a-1", "r-1").unwrap()), to_wire(&revoke(&identity()).unwrap())] {
            parse_adapter_frame(&line(&f), &b, Direction::ToAdapter).unwrap_or_else(|e| panic!("{f}: {e:?}"));
        }
        for f in [to_wire(&aborted(&identity(), "a-1", "r-1").unwrap()), to_wire(&revoked(&identity()).unwrap())] {
            parse_adapter_frame(&line(&f), &b, Direction::ToDaemon).unwrap_or_else(|e| panic!("{f}: {e:?}"));
        }
    }

    #[test]
    fn a_payload_broken_on_purpose_is_not_typed_and_a_bad_value_is_refused() {
        // An unknown member and a wrong type: the generated request types refuse them.
        for p in [serde_json::json!({"path": "x", "mode": 1}), serde_json::json!({"path": "x", "maxBytes": "10"})] {
            assert!(invoke(&identity(), "r", "k", ToolOperation::FsRead, &p).unwrap().is_none(), "{p}");
        }
        let e = abort(&identity(), "", "r").unwrap_err();
        assert_eq!(e.member, "requestId");
        let mut bad = identity();
        bad.adapter_id = "-bad";
        assert_eq!(revoke(&bad).unwrap_err().member, "adapterId");
        bad = identity();
        bad.protocol_version = "2.0";
        assert_eq!(revoke(&bad).unwrap_err().member, "protocolVersion");
    }

    #[test]
    fn built_commands_pass_the_command_rules() {
        let host = HostContext { host_instance_id: "host-1" };
        let e = Envelope { version: "2.0", request_id: "r-1" };
        let s = SessionRef { session_id: "s-1", generation: 3 };
        let d: ta::HostToolAdapterDescriptor = serde_json::from_value(wire_descriptor()).unwrap();
        let mut payload = open_payload("/work", resources(host_adapter(d))).unwrap();
        payload.model = Some(model("openai", "m").unwrap());
        let cmds = [
            to_wire(&handshake(&e).unwrap()),
            to_wire(&open(&e, &s, payload).unwrap()),
            to_wire(&wake(&e, &s, "k-1", "TOOL fs_stat {}").unwrap()),
            to_wire(&attach(&e, &s).unwrap()),
            to_wire(&close(&e, &s).unwrap()),
        ];
        for c in &cmds {
            parse_command(c, &host).unwrap_or_else(|e| panic!("{c}: {:?}", e.error));
            assert_eq!(c.as_object().unwrap().keys().next().map(String::as_str), Some("protocolVersion"));
            assert_eq!(c.as_object().unwrap().keys().nth(1).map(String::as_str), Some("requestId"));
        }
        let open = &cmds[1]["payload"];
        let keys: Vec<&str> = open.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys, ["cwd", "session", "resources", "model"]);
        let res: Vec<&str> = open["resources"].as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(res, RESOURCES);
        assert_eq!(wake(&e, &s, "k", "").unwrap_err().member, "payload.prompt");
    }
}
