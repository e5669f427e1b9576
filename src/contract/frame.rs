//! Adapter frames (SPEC §4): parsing one line against a binding and a direction, with the
//! closed-key, identity, echo, id-pattern and result/aborted shape rules, and the payload and
//! data rules of SPEC §5.2.

use serde_json::{Map, Value};

use super::descriptor::{
    fit_check, operations_json, parse_limits, parse_operations, safe_integer, Descriptor, Identity, LimitValues,
};
use super::error::{safe_key, Code, ContractError};
use super::path::{validate_relative_path, validate_result_path, PathSide};
use super::schema::{self, Entry};
use super::secret::CapabilityHandle;
use super::text::{has_control, is_base64url, is_digest, is_error_code, is_frame_id, is_timestamp, units_in};
use super::types::tool_adapter::{AdapterFrame, AdapterLimits, BindFrame, ToolOperation};
use crate::wire::{decode_strict, LineError};

/// Largest `content` (fs.read data, fs.write payload) in bytes.
pub const MAX_CONTENT_BYTES: usize = 4 * 1024 * 1024;

/// Who sends the frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Daemon → adapter (`bind invoke abort revoke`), judged by an adapter.
    ToAdapter,
    /// Adapter → daemon (`bound result aborted revoked`), judged by a daemon.
    ToDaemon,
}

impl Direction {
    /// Kinds this direction carries.
    pub fn kinds(self) -> &'static [&'static str] {
        match self {
            Direction::ToAdapter => &["bind", "invoke", "abort", "revoke"],
            Direction::ToDaemon => &["bound", "result", "aborted", "revoked"],
        }
    }
}

/// What the receiver does with a refused frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Disposition {
    /// Answer with `result ok:false` carrying the error (an attributable invoke).
    Reply,
    /// Close the connection (daemon side: fail it with the code).
    Close,
}

/// The keys of an attributable invoke, needed to answer it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attribution {
    /// The invoke's `requestId`.
    pub request_id: String,
    /// The invoke's `idempotencyKey`.
    pub idempotency_key: String,
    /// The invoke's operation.
    pub operation: ToolOperation,
}

/// A refused frame.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{error}")]
pub struct FrameError {
    /// The typed error (`details.field` names the offending key path).
    pub error: ContractError,
    /// Reply or close.
    pub disposition: Disposition,
    /// For `Reply`: the keys to answer with.
    pub attribution: Option<Attribution>,
}

impl FrameError {
    fn close(code: Code, field: impl Into<String>, msg: &str) -> Self {
        Self {
            error: ContractError::new(code, field, msg.to_string()),
            disposition: Disposition::Close,
            attribution: None,
        }
    }
}

/// The bound state a frame is judged against: a view over the generated `bind` frame that
/// made it (identity, handle, operations and limits).
#[derive(Clone, Debug)]
pub struct Binding {
    bind: BindFrame,
}

impl From<&Descriptor> for Binding {
    fn from(d: &Descriptor) -> Self {
        Self { bind: d.bind() }
    }
}

impl Binding {
    /// The binding a `bind` frame makes.
    pub fn new(bind: BindFrame) -> Self {
        Self { bind }
    }

    /// The generated `bind` frame (carries the handle: send it, never log it).
    pub fn bind(&self) -> &BindFrame {
        &self.bind
    }

    /// The nonsecret identity.
    pub fn identity(&self) -> Identity<'_> {
        let b = &self.bind;
        Identity {
            protocol_version: "1.0",
            adapter_id: &b.adapter_id,
            adapter_version: &b.adapter_version,
            host_instance_id: &b.host_instance_id,
            session_id: &b.session_id,
            generation: u64::try_from(b.generation.0).unwrap_or(0),
        }
    }

    /// The handle.
    pub fn handle(&self) -> &CapabilityHandle {
        &self.bind.capability_handle
    }

    /// Granted operations in order.
    pub fn operations(&self) -> &[ToolOperation] {
        &self.bind.operations.0
    }

    /// The limits.
    pub fn limits(&self) -> &AdapterLimits {
        &self.bind.limits
    }

    /// The limits, to change (a runner case or a fault that breaks them on purpose).
    pub fn limits_mut(&mut self) -> &mut AdapterLimits {
        &mut self.bind.limits
    }

    /// The operations, to change (a runner narrowing a binding).
    pub fn operations_mut(&mut self) -> &mut Vec<ToolOperation> {
        &mut self.bind.operations.0
    }

    /// Present another handle (a runner rewriting a vector onto a live binding).
    pub fn set_handle(&mut self, handle: CapabilityHandle) {
        self.bind.capability_handle = handle;
    }

    /// The operations as JSON strings.
    pub fn operations_json(&self) -> Value {
        operations_json(self.operations())
    }

    /// The `bind` frame's wire value (carries the handle: send it, never log it).
    pub fn bind_frame(&self) -> Value {
        super::compose::to_wire(&self.bind)
    }

    /// The `bound` frame echoing it.
    pub fn bound_frame(&self) -> Value {
        super::compose::to_wire(&super::compose::bound(&self.bind))
    }

    /// The byte limit of a line travelling in `dir`, LF included.
    pub fn line_limit(&self, dir: Direction) -> u64 {
        let l = self.limits();
        let n = match dir {
            Direction::ToAdapter => l.max_request_bytes,
            Direction::ToDaemon => l.max_response_bytes,
        };
        u64::try_from(n).unwrap_or(0)
    }
}

/// A `bind` frame read before any binding exists (the adapter's first line): the binding it
/// asks for.
pub type BindRequest = Binding;

pub(crate) const IDENTITY_KEYS: [&str; 6] =
    ["protocolVersion", "adapterId", "adapterVersion", "hostInstanceId", "sessionId", "generation"];

/// The keys of an `fs.edit` edit.
pub(crate) const EDIT_KEYS: [&str; 2] = ["oldText", "newText"];
/// The keys of an error body.
pub(crate) const ERROR_KEYS: [&str; 3] = ["code", "message", "retryable"];
/// The keys of an `fs.list` entry.
pub(crate) const ENTRY_KEYS: [&str; 4] = ["name", "type", "size", "modifiedAt"];
/// The keys of an `fs.search` match.
pub(crate) const MATCH_KEYS: [&str; 4] = ["path", "line", "column", "text"];

/// The keys a frame of `kind` may carry besides `kind` and the identity.
pub(crate) fn allowed_keys(kind: &str) -> &'static [&'static str] {
    match kind {
        "bind" => &["capabilityHandle", "operations", "limits"],
        "bound" => &["operations", "limits"],
        "invoke" => &["requestId", "idempotencyKey", "operation", "payload"],
        "result" => &["requestId", "idempotencyKey", "operation", "ok", "data", "error"],
        "abort" => &["requestId", "targetRequestId"],
        "aborted" => &["requestId", "targetRequestId", "aborted", "error"],
        _ => &[],
    }
}

/// Whether `handle` appears anywhere in `v` (keys or strings).
pub fn value_contains_handle(v: &Value, handle: &CapabilityHandle) -> bool {
    match v {
        Value::String(s) => handle.occurs_in(s.as_bytes()),
        Value::Array(a) => a.iter().any(|x| value_contains_handle(x, handle)),
        Value::Object(m) => m.iter().any(|(k, x)| handle.occurs_in(k.as_bytes()) || value_contains_handle(x, handle)),
        _ => false,
    }
}

/// Which frame a judged line is: the kind and, where it matters, the operation and outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameKind {
    /// `bind`.
    Bind,
    /// `bound`.
    Bound,
    /// `invoke` of an operation.
    Invoke(ToolOperation),
    /// `result` for an operation; `ok` says success or failure.
    Result {
        /// The operation.
        operation: ToolOperation,
        /// `ok`.
        ok: bool,
    },
    /// `abort`.
    Abort,
    /// `aborted`, with its `aborted` flag.
    Aborted(bool),
    /// `revoke`.
    Revoke,
    /// `revoked`.
    Revoked,
}

/// A frame that passed every rule: the strictly decoded value and what it is. The generated
/// type is decoded on demand by [`JudgedFrame::typed`] (the schema has already accepted the
/// value, and the schema and the generated types agree on every vector: tests/agreement.rs).
#[derive(Clone, Debug)]
pub struct JudgedFrame {
    /// What the frame is.
    pub kind: FrameKind,
    /// The strictly decoded frame.
    pub value: Value,
}

impl JudgedFrame {
    /// The frame as its generated type.
    pub fn typed(&self) -> Result<AdapterFrame, FrameError> {
        typed_decode(&self.value)
    }

    /// A string field of the frame (`requestId`, `idempotencyKey`, …); empty when absent.
    pub fn str_field(&self, key: &str) -> &str {
        self.value.get(key).and_then(Value::as_str).unwrap_or_default()
    }
}

/// Decode one line (LF excluded) and judge it as a frame travelling in `dir` on `binding`,
/// returning the generated type.
pub fn parse_adapter_frame(line: &[u8], binding: &Binding, dir: Direction) -> Result<AdapterFrame, FrameError> {
    judge_adapter_frame(line, binding, dir)?.typed()
}

/// Decode one line (LF excluded) and judge it as a frame travelling in `dir` on `binding`:
/// every rule of [`parse_adapter_frame`], without building the generated type (the hot path
/// of the reference adapter and daemon).
pub fn judge_adapter_frame(line: &[u8], binding: &Binding, dir: Direction) -> Result<JudgedFrame, FrameError> {
    let code = Code::AdapterProtocolInvalid;
    if line.len() as u64 + 1 > binding.line_limit(dir) {
        return Err(FrameError::close(code, "line", "frame exceeds the direction's byte limit"));
    }
    let value = decode_strict(line).map_err(|e| {
        let msg = match e {
            LineError::InvalidUtf8 => "frame is not UTF-8",
            _ => "frame is not one strict JSON object",
        };
        FrameError::close(code, "line", msg)
    })?;
    // The handle check is made on the decoded value (every key and string), so a handle
    // written with JSON escapes is found too.
    let kind = judge_value(&value, binding, dir)?;
    Ok(JudgedFrame { kind, value })
}

/// SPEC §4.5: an invoke whose ids and operation are valid but which carries unknown top-level
/// keys may be answered `invalid_request` **or** closed. When `value` (sent to an adapter) is
/// refused only because of such keys — with them removed it is accepted or answerable — this
/// returns the keys it is answered with; `None` for any other frame or refusal (a handle
/// anywhere, a wrong identity, a bad id: close only). No line-size check here.
pub fn extra_keys_only(value: &Value, binding: &Binding) -> Option<Attribution> {
    let obj = value.as_object()?;
    if obj.get("kind")?.as_str()? != "invoke" {
        return None;
    }
    let e = judge_value(value, binding, Direction::ToAdapter).err()?;
    if e.error.code != Code::AdapterProtocolInvalid || e.disposition != Disposition::Close {
        return None;
    }
    let allowed = allowed_keys("invoke");
    let known: Map<String, Value> = obj
        .iter()
        .filter(|(k, _)| k.as_str() == "kind" || IDENTITY_KEYS.contains(&k.as_str()) || allowed.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if known.len() == obj.len() {
        return None;
    }
    let s = |k: &str| known.get(k).and_then(Value::as_str).map(str::to_string);
    match judge_value(&Value::Object(known.clone()), binding, Direction::ToAdapter) {
        Ok(_) => Some(Attribution {
            request_id: s("requestId")?,
            idempotency_key: s("idempotencyKey")?,
            operation: s("operation")?.parse().ok()?,
        }),
        Err(e) if e.disposition == Disposition::Reply => e.attribution,
        Err(_) => None,
    }
}

/// Judge an already decoded frame (see [`parse_adapter_frame`]; no line-size check here).
pub fn check_adapter_frame(value: &Value, binding: &Binding, dir: Direction) -> Result<AdapterFrame, FrameError> {
    judge_value(value, binding, dir)?;
    typed_decode(value)
}

fn judge_value(value: &Value, binding: &Binding, dir: Direction) -> Result<FrameKind, FrameError> {
    let is_bind = value.get("kind").and_then(Value::as_str) == Some("bind");
    if !(dir == Direction::ToAdapter && is_bind) && value_contains_handle(value, binding.handle()) {
        return Err(FrameError::close(
            Code::AdapterSecretReflected,
            "frame",
            "the capability handle appears in the frame",
        ));
    }
    let code = Code::AdapterProtocolInvalid;
    let obj = value.as_object().ok_or_else(|| FrameError::close(code, "frame", "frame must be a JSON object"))?;
    let kind = check_kind_and_keys(obj, dir)?;
    check_identity(obj, binding.identity())?;
    match kind {
        "bind" => {
            let (handle, _, _) = check_bind_body(obj)?;
            if !binding.handle().ct_eq_bytes(handle.expose().as_bytes()) {
                return Err(FrameError::close(code, "capabilityHandle", "bind presents another capability handle"));
            }
            check_echo(obj, binding)?;
        }
        "bound" => {
            check_ops_and_limits(obj)?;
            check_echo(obj, binding)?;
        }
        "invoke" => check_invoke(obj, binding)?,
        "result" => check_result(obj, binding)?,
        "abort" => check_ids(obj, &["requestId", "targetRequestId"])?,
        "aborted" => check_aborted(obj)?,
        _ => {}
    }
    check_schema(value)?;
    frame_kind(value).ok_or_else(|| FrameError::close(code, "kind", "unknown frame kind"))
}

/// The schema must agree with the rules above.
fn check_schema(value: &Value) -> Result<(), FrameError> {
    match schema::confirm_accepted(Entry::Frame, value) {
        Some(v) => Err(FrameError::close(Code::AdapterProtocolInvalid, v.dotted(""), "frame violates the schema")),
        None => Ok(()),
    }
}

fn frame_kind(value: &Value) -> Option<FrameKind> {
    let op = || value.get("operation").and_then(Value::as_str).and_then(|s| s.parse::<ToolOperation>().ok());
    let flag = |k: &str| value.get(k).and_then(Value::as_bool);
    Some(match value.get("kind").and_then(Value::as_str)? {
        "bind" => FrameKind::Bind,
        "bound" => FrameKind::Bound,
        "invoke" => FrameKind::Invoke(op()?),
        "result" => FrameKind::Result { operation: op()?, ok: flag("ok")? },
        "abort" => FrameKind::Abort,
        "aborted" => FrameKind::Aborted(flag("aborted")?),
        "revoke" => FrameKind::Revoke,
        "revoked" => FrameKind::Revoked,
        _ => return None,
    })
}

/// Read the first line of a connection as a `bind`, before any binding exists: shape,
/// identity types, handle format, operations, limits and fit. The caller matches it against
/// its grants.
pub fn parse_bind_request(line: &[u8], max_line_bytes: usize) -> Result<BindRequest, FrameError> {
    let code = Code::AdapterProtocolInvalid;
    if line.len() + 1 > max_line_bytes {
        return Err(FrameError::close(code, "line", "frame exceeds the byte limit"));
    }
    let value =
        decode_strict(line).map_err(|_| FrameError::close(code, "line", "frame is not one strict JSON object"))?;
    let obj = value.as_object().ok_or_else(|| FrameError::close(code, "frame", "frame must be a JSON object"))?;
    let kind = check_kind_and_keys(obj, Direction::ToAdapter)?;
    if kind != "bind" {
        return Err(FrameError::close(code, "kind", "the first frame must be bind"));
    }
    let identity = read_identity(obj)?;
    let (handle, _, limits) = check_bind_body(obj)?;
    fit_check(identity, &handle, &obj["operations"], &limits, "limits.")
        .map_err(|e| FrameError::close(code, e.field().to_string(), "limits cannot contain the bind frame"))?;
    check_schema(&value)?;
    match typed_decode(&value)? {
        AdapterFrame::BindFrame(bind) => Ok(Binding::new(bind)),
        _ => Err(FrameError::close(code, "kind", "the first frame must be bind")),
    }
}

fn check_kind_and_keys(obj: &Map<String, Value>, dir: Direction) -> Result<&str, FrameError> {
    let code = Code::AdapterProtocolInvalid;
    let kind =
        obj.get("kind").and_then(Value::as_str).filter(|k| dir.kinds().contains(k)).ok_or_else(|| {
            FrameError::close(code, "kind", "kind is missing, unknown or not allowed in this direction")
        })?;
    let extra = allowed_keys(kind);
    if let Some(k) = obj
        .keys()
        .find(|k| k.as_str() != "kind" && !IDENTITY_KEYS.contains(&k.as_str()) && !extra.contains(&k.as_str()))
    {
        return Err(FrameError::close(code, safe_key(k), "frame has a key its kind does not allow"));
    }
    Ok(kind)
}

fn read_identity(obj: &Map<String, Value>) -> Result<Identity<'_>, FrameError> {
    let code = Code::AdapterProtocolInvalid;
    let s = |k: &'static str, ok: &dyn Fn(&str) -> bool| {
        obj.get(k)
            .and_then(Value::as_str)
            .filter(|s| ok(s))
            .ok_or_else(|| FrameError::close(code, k, "identity field is missing or malformed"))
    };
    let protocol_version = s("protocolVersion", &|v| v == "1.0")?;
    let adapter_id = s("adapterId", &|v| units_in(v, 128) && super::text::is_adapter_id(v))?;
    let adapter_version = s("adapterVersion", &|v| units_in(v, 64) && super::text::is_semver(v))?;
    let host_instance_id = s("hostInstanceId", &super::text::is_host_instance_id)?;
    let session_id = s("sessionId", &|v| units_in(v, 256) && !has_control(v))?;
    let generation = obj
        .get("generation")
        .and_then(safe_integer)
        .filter(|g| *g >= 0)
        .ok_or_else(|| FrameError::close(code, "generation", "identity field is missing or malformed"))?
        as u64;
    Ok(Identity { protocol_version, adapter_id, adapter_version, host_instance_id, session_id, generation })
}

fn check_identity(obj: &Map<String, Value>, id: Identity<'_>) -> Result<(), FrameError> {
    let code = Code::AdapterProtocolInvalid;
    let strings = [
        ("protocolVersion", id.protocol_version),
        ("adapterId", id.adapter_id),
        ("adapterVersion", id.adapter_version),
        ("hostInstanceId", id.host_instance_id),
        ("sessionId", id.session_id),
    ];
    for (k, want) in strings {
        if obj.get(k).and_then(Value::as_str) != Some(want) {
            return Err(FrameError::close(code, k, "identity does not match the binding"));
        }
    }
    if obj.get("generation").and_then(safe_integer) != Some(id.generation as i64) {
        return Err(FrameError::close(code, "generation", "identity does not match the binding"));
    }
    Ok(())
}

fn check_ops_and_limits(obj: &Map<String, Value>) -> Result<(Vec<ToolOperation>, AdapterLimits), FrameError> {
    let code = Code::AdapterProtocolInvalid;
    let ops = parse_operations(obj.get("operations"))
        .ok_or_else(|| FrameError::close(code, "operations", "operations must be 1-6 unique operations of the six"))?;
    let limits = parse_limits(obj.get("limits")).map_err(|k| {
        let field = if k.is_empty() { "limits".to_string() } else { format!("limits.{}", safe_key(&k)) };
        FrameError::close(code, field, "limits must be exactly the seven keys, each an integer in range")
    })?;
    Ok((ops, limits))
}

fn check_bind_body(
    obj: &Map<String, Value>,
) -> Result<(CapabilityHandle, Vec<ToolOperation>, AdapterLimits), FrameError> {
    let code = Code::AdapterProtocolInvalid;
    let handle = obj
        .get("capabilityHandle")
        .and_then(Value::as_str)
        .filter(|s| (32..=512).contains(&s.len()) && is_base64url(s))
        .map(CapabilityHandle::new)
        .ok_or_else(|| {
            FrameError::close(code, "capabilityHandle", "capabilityHandle must be 32-512 base64url characters")
        })?;
    let (operations, limits) = check_ops_and_limits(obj)?;
    Ok((handle, operations, limits))
}

/// `operations` and `limits` must equal the binding's exactly (order included).
fn check_echo(obj: &Map<String, Value>, b: &Binding) -> Result<(), FrameError> {
    let code = Code::AdapterProtocolInvalid;
    let (ops, limits) = check_ops_and_limits(obj)?;
    if ops != b.operations() {
        return Err(FrameError::close(
            code,
            "operations",
            "operations differ from the binding's (order is significant)",
        ));
    }
    for ((k, _, _), (got, want)) in
        super::descriptor::LIMITS.iter().zip(limits.values().into_iter().zip(b.limits().values()))
    {
        if got != want {
            return Err(FrameError::close(code, format!("limits.{k}"), "limit differs from the binding's"));
        }
    }
    Ok(())
}

fn check_ids(obj: &Map<String, Value>, keys: &[&str]) -> Result<(), FrameError> {
    for k in keys {
        let max = if *k == "idempotencyKey" { 512 } else { 128 };
        if !obj.get(*k).and_then(Value::as_str).is_some_and(|s| s.len() <= max && is_frame_id(s)) {
            return Err(FrameError::close(
                Code::AdapterProtocolInvalid,
                *k,
                "id is missing or does not match the id pattern",
            ));
        }
    }
    Ok(())
}

fn operation_of(obj: &Map<String, Value>) -> Option<ToolOperation> {
    obj.get("operation").and_then(Value::as_str).and_then(|s| s.parse().ok())
}

fn check_invoke(obj: &Map<String, Value>, b: &Binding) -> Result<(), FrameError> {
    check_ids(obj, &["requestId", "idempotencyKey"])?;
    let op = operation_of(obj).ok_or_else(|| {
        FrameError::close(Code::AdapterProtocolInvalid, "operation", "operation is not one of the six")
    })?;
    let attribution = Attribution {
        request_id: obj["requestId"].as_str().unwrap_or_default().to_string(),
        idempotency_key: obj["idempotencyKey"].as_str().unwrap_or_default().to_string(),
        operation: op,
    };
    let reply = |error: ContractError| FrameError {
        error,
        disposition: Disposition::Reply,
        attribution: Some(attribution.clone()),
    };
    if !b.operations().contains(&op) {
        return Err(reply(ContractError::new(
            Code::OperationNotGranted,
            "operation",
            "operation is not granted by the binding",
        )));
    }
    check_invoke_payload(op, obj.get("payload")).map_err(reply)
}

/// The keys of the closed `payload` object of an invoke of `op`.
pub(crate) fn payload_keys(op: ToolOperation) -> &'static [&'static str] {
    match op {
        ToolOperation::FsList => &["path", "maxEntries"],
        ToolOperation::FsStat => &["path"],
        ToolOperation::FsRead => &["path", "offset", "maxBytes"],
        ToolOperation::FsSearch => &["path", "query", "maxResults"],
        ToolOperation::FsWrite => &["path", "content", "create", "overwrite", "expectedDigest"],
        ToolOperation::FsEdit => &["path", "edits", "expectedDigest"],
    }
}

/// The keys of the closed `data` object of a successful result of `op`.
pub(crate) fn data_keys(op: ToolOperation) -> &'static [&'static str] {
    match op {
        ToolOperation::FsList => &["entries", "truncated"],
        ToolOperation::FsStat => &["type", "size", "modifiedAt"],
        ToolOperation::FsRead => &["content", "bytesRead", "eof"],
        ToolOperation::FsSearch => &["matches", "truncated"],
        ToolOperation::FsWrite => &["created", "bytesWritten", "digest"],
        ToolOperation::FsEdit => &["replacements", "digest"],
    }
}

/// The payload rules of SPEC §5.2 for `op`, as an adapter judges them: `invalid_request`
/// with the field, or `invalid_path` for the path.
pub fn check_invoke_payload(op: ToolOperation, payload: Option<&Value>) -> Result<(), ContractError> {
    let mut c = Checker { code: Code::InvalidRequest };
    let p = c.object(payload, "payload")?;
    c.closed(p, payload_keys(op), "payload")?;
    let path = p.get("path").and_then(Value::as_str).ok_or_else(|| c.fail("payload.path", "path must be a string"))?;
    validate_relative_path(path, PathSide::Adapter, "payload.path")?;
    match op {
        ToolOperation::FsList => c.opt_int(p, "maxEntries", "payload", 1, 10_000),
        ToolOperation::FsStat => Ok(()),
        ToolOperation::FsRead => {
            c.opt_int(p, "offset", "payload", 0, super::descriptor::MAX_SAFE_INTEGER)?;
            c.opt_int(p, "maxBytes", "payload", 1, MAX_CONTENT_BYTES as u64)
        }
        ToolOperation::FsSearch => {
            let q = p.get("query").and_then(Value::as_str).filter(|q| units_in(q, 4096));
            match q {
                Some(q) if !q.contains(['\r', '\n']) => {}
                _ => return Err(c.fail("payload.query", "query must be 1-4096 units without CR or LF")),
            }
            c.opt_int(p, "maxResults", "payload", 1, 10_000)
        }
        ToolOperation::FsWrite => {
            if p.get("content").and_then(Value::as_str).is_none_or(|s| s.len() > MAX_CONTENT_BYTES) {
                return Err(c.fail("payload.content", "content must be a string of at most 4 MiB"));
            }
            c.opt_bool(p, "create", "payload")?;
            c.opt_bool(p, "overwrite", "payload")?;
            c.opt_digest(p, "expectedDigest", "payload")
        }
        ToolOperation::FsEdit => {
            let edits = p
                .get("edits")
                .and_then(Value::as_array)
                .filter(|e| (1..=256).contains(&e.len()))
                .ok_or_else(|| c.fail("payload.edits", "edits must be an array of 1-256 edits"))?;
            for (i, e) in edits.iter().enumerate() {
                let prefix = format!("payload.edits.{i}");
                let m = c.object(Some(e), &prefix)?;
                c.closed(m, &EDIT_KEYS, &prefix)?;
                if m.get("oldText").and_then(Value::as_str).is_none_or(str::is_empty) {
                    return Err(c.fail(&format!("{prefix}.oldText"), "oldText must be a non-empty string"));
                }
                if !m.get("newText").is_some_and(Value::is_string) {
                    return Err(c.fail(&format!("{prefix}.newText"), "newText must be a string"));
                }
            }
            c.opt_digest(p, "expectedDigest", "payload")
        }
    }
}

fn check_result(obj: &Map<String, Value>, b: &Binding) -> Result<(), FrameError> {
    let code = Code::AdapterProtocolInvalid;
    check_ids(obj, &["requestId", "idempotencyKey"])?;
    let op = operation_of(obj)
        .filter(|op| b.operations().contains(op))
        .ok_or_else(|| FrameError::close(code, "operation", "result for an operation the binding does not grant"))?;
    let ok =
        obj.get("ok").and_then(Value::as_bool).ok_or_else(|| FrameError::close(code, "ok", "ok must be a boolean"))?;
    let as_close = |e: ContractError| FrameError { error: e, disposition: Disposition::Close, attribution: None };
    if ok {
        if !obj.contains_key("data") {
            return Err(FrameError::close(code, "data", "a successful result carries data"));
        }
        if obj.contains_key("error") {
            return Err(FrameError::close(code, "error", "a successful result carries no error"));
        }
        check_result_data(op, obj.get("data")).map_err(as_close)
    } else {
        if !obj.contains_key("error") {
            return Err(FrameError::close(code, "error", "a failed result carries an error"));
        }
        if obj.contains_key("data") {
            return Err(FrameError::close(code, "data", "a failed result carries no data"));
        }
        check_error_body(obj.get("error"), "error").map_err(as_close)
    }
}

fn check_aborted(obj: &Map<String, Value>) -> Result<(), FrameError> {
    let code = Code::AdapterProtocolInvalid;
    check_ids(obj, &["requestId", "targetRequestId"])?;
    let aborted = obj
        .get("aborted")
        .and_then(Value::as_bool)
        .ok_or_else(|| FrameError::close(code, "aborted", "aborted must be a boolean"))?;
    match obj.get("error") {
        None => Ok(()),
        Some(_) if aborted => Err(FrameError::close(code, "error", "aborted:true carries no error")),
        Some(e) => check_error_body(Some(e), "error").map_err(|e| FrameError {
            error: e,
            disposition: Disposition::Close,
            attribution: None,
        }),
    }
}

/// The closed error body `{code, message, retryable}` of a result or aborted frame.
pub fn check_error_body(v: Option<&Value>, prefix: &str) -> Result<(), ContractError> {
    let mut c = Checker { code: Code::AdapterProtocolInvalid };
    let m = c.object(v, prefix)?;
    c.closed(m, &ERROR_KEYS, prefix)?;
    if !m.get("code").and_then(Value::as_str).is_some_and(|s| s.len() <= 128 && is_error_code(s)) {
        return Err(
            c.fail(&format!("{prefix}.code"), "error code must match ^[a-z][a-z0-9_]*$ and be at most 128 characters")
        );
    }
    if !m.get("message").and_then(Value::as_str).is_some_and(|s| units_in(s, 1024)) {
        return Err(c.fail(&format!("{prefix}.message"), "error message must be 1-1024 units"));
    }
    if !m.get("retryable").is_some_and(Value::is_boolean) {
        return Err(c.fail(&format!("{prefix}.retryable"), "retryable must be a boolean"));
    }
    Ok(())
}

/// The success data rules of SPEC §5.2 for `op`.
pub fn check_result_data(op: ToolOperation, data: Option<&Value>) -> Result<(), ContractError> {
    let mut c = Checker { code: Code::AdapterProtocolInvalid };
    let d = c.object(data, "data")?;
    match op {
        ToolOperation::FsList => {
            c.closed(d, data_keys(op), "data")?;
            let entries = d
                .get("entries")
                .and_then(Value::as_array)
                .filter(|e| e.len() <= 10_000)
                .ok_or_else(|| c.fail("data.entries", "entries must be an array of at most 10000"))?;
            for (i, e) in entries.iter().enumerate() {
                let prefix = format!("data.entries.{i}");
                let m = c.object(Some(e), &prefix)?;
                c.closed(m, &ENTRY_KEYS, &prefix)?;
                if !m.get("name").and_then(Value::as_str).is_some_and(is_entry_name) {
                    return Err(c.fail(
                        &format!("{prefix}.name"),
                        "entry name must be 1-255 bytes, not . or .., without / or control characters",
                    ));
                }
                c.entry_type(m, &prefix)?;
                c.opt_int(m, "size", &prefix, 0, super::descriptor::MAX_SAFE_INTEGER)?;
                c.opt_timestamp(m, "modifiedAt", &prefix)?;
            }
            c.req_bool(d, "truncated", "data")
        }
        ToolOperation::FsStat => {
            c.closed(d, data_keys(op), "data")?;
            c.entry_type(d, "data")?;
            c.req_int(d, "size", "data", 0, super::descriptor::MAX_SAFE_INTEGER)?;
            c.opt_timestamp(d, "modifiedAt", "data")
        }
        ToolOperation::FsRead => {
            c.closed(d, data_keys(op), "data")?;
            if d.get("content").and_then(Value::as_str).is_none_or(|s| s.len() > MAX_CONTENT_BYTES) {
                return Err(c.fail("data.content", "content must be a string of at most 4 MiB"));
            }
            c.req_int(d, "bytesRead", "data", 0, MAX_CONTENT_BYTES as u64)?;
            c.req_bool(d, "eof", "data")
        }
        ToolOperation::FsSearch => {
            c.closed(d, data_keys(op), "data")?;
            let matches = d
                .get("matches")
                .and_then(Value::as_array)
                .filter(|m| m.len() <= 10_000)
                .ok_or_else(|| c.fail("data.matches", "matches must be an array of at most 10000"))?;
            for (i, e) in matches.iter().enumerate() {
                let prefix = format!("data.matches.{i}");
                let m = c.object(Some(e), &prefix)?;
                c.closed(m, &MATCH_KEYS, &prefix)?;
                let path = m.get("path").and_then(Value::as_str).unwrap_or("");
                validate_result_path(path, "")
                    .map_err(|_| c.fail(&format!("{prefix}.path"), "match path must be a root-relative path"))?;
                c.req_int(m, "line", &prefix, 1, super::descriptor::MAX_SAFE_INTEGER)?;
                c.req_int(m, "column", &prefix, 1, super::descriptor::MAX_SAFE_INTEGER)?;
                if m.get("text").and_then(Value::as_str).is_none_or(|t| super::text::utf16_len(t) > 4096) {
                    return Err(c.fail(&format!("{prefix}.text"), "match text must be at most 4096 UTF-16 units"));
                }
            }
            c.req_bool(d, "truncated", "data")
        }
        ToolOperation::FsWrite => {
            c.closed(d, data_keys(op), "data")?;
            c.req_bool(d, "created", "data")?;
            c.req_int(d, "bytesWritten", "data", 0, MAX_CONTENT_BYTES as u64)?;
            c.req_digest(d, "digest", "data")
        }
        ToolOperation::FsEdit => {
            c.closed(d, data_keys(op), "data")?;
            c.req_int(d, "replacements", "data", 0, 256)?;
            c.req_digest(d, "digest", "data")
        }
    }
}

/// A directory entry name as a daemon judges it: 1–255 UTF-16 units (Pi Daemon 0.3.3), not
/// `.`/`..`, no `/`, no C0/DEL. (A real name is at most 255 bytes, which is never more units.)
pub fn is_entry_name(s: &str) -> bool {
    units_in(s, 255) && s != "." && s != ".." && !s.contains('/') && !has_control(s)
}

struct Checker {
    code: Code,
}

impl Checker {
    fn fail(&self, field: &str, msg: &str) -> ContractError {
        ContractError::new(self.code, field, msg.to_string())
    }
    fn object<'v>(&mut self, v: Option<&'v Value>, field: &str) -> Result<&'v Map<String, Value>, ContractError> {
        v.and_then(Value::as_object).ok_or_else(|| self.fail(field, "must be an object"))
    }
    fn closed(&mut self, m: &Map<String, Value>, keys: &[&str], prefix: &str) -> Result<(), ContractError> {
        match m.keys().find(|k| !keys.contains(&k.as_str())) {
            Some(k) => Err(self.fail(&format!("{prefix}.{}", safe_key(k)), "unexpected key in a closed object")),
            None => Ok(()),
        }
    }
    fn opt_int(
        &mut self,
        m: &Map<String, Value>,
        key: &str,
        prefix: &str,
        lo: u64,
        hi: u64,
    ) -> Result<(), ContractError> {
        if m.contains_key(key) {
            self.req_int(m, key, prefix, lo, hi)
        } else {
            Ok(())
        }
    }
    fn req_int(
        &mut self,
        m: &Map<String, Value>,
        key: &str,
        prefix: &str,
        lo: u64,
        hi: u64,
    ) -> Result<(), ContractError> {
        match m.get(key).and_then(safe_integer) {
            Some(n) if n >= 0 && (lo..=hi).contains(&(n as u64)) => Ok(()),
            _ => Err(self.fail(&format!("{prefix}.{key}"), "must be an integer in range")),
        }
    }
    fn opt_bool(&mut self, m: &Map<String, Value>, key: &str, prefix: &str) -> Result<(), ContractError> {
        if m.contains_key(key) {
            self.req_bool(m, key, prefix)
        } else {
            Ok(())
        }
    }
    fn req_bool(&mut self, m: &Map<String, Value>, key: &str, prefix: &str) -> Result<(), ContractError> {
        if m.get(key).is_some_and(Value::is_boolean) {
            Ok(())
        } else {
            Err(self.fail(&format!("{prefix}.{key}"), "must be a boolean"))
        }
    }
    fn opt_digest(&mut self, m: &Map<String, Value>, key: &str, prefix: &str) -> Result<(), ContractError> {
        if m.contains_key(key) {
            self.req_digest(m, key, prefix)
        } else {
            Ok(())
        }
    }
    fn req_digest(&mut self, m: &Map<String, Value>, key: &str, prefix: &str) -> Result<(), ContractError> {
        if m.get(key).and_then(Value::as_str).is_some_and(is_digest) {
            Ok(())
        } else {
            Err(self.fail(&format!("{prefix}.{key}"), "must be 64 lowercase hex characters"))
        }
    }
    fn opt_timestamp(&mut self, m: &Map<String, Value>, key: &str, prefix: &str) -> Result<(), ContractError> {
        match m.get(key) {
            None => Ok(()),
            Some(v) if v.as_str().is_some_and(is_timestamp) => Ok(()),
            Some(_) => Err(self.fail(&format!("{prefix}.{key}"), "must be YYYY-MM-DDTHH:MM:SS[.fraction]Z")),
        }
    }
    fn entry_type(&mut self, m: &Map<String, Value>, prefix: &str) -> Result<(), ContractError> {
        match m.get("type").and_then(Value::as_str) {
            Some("file" | "directory") => Ok(()),
            _ => Err(self.fail(&format!("{prefix}.type"), "type must be file or directory")),
        }
    }
}

/// Decode a schema-valid frame into the generated frame type chosen by kind (and operation,
/// ok, aborted).
fn typed_decode(value: &Value) -> Result<AdapterFrame, FrameError> {
    let code = Code::AdapterProtocolInvalid;
    let bad = |_| FrameError::close(code, "frame", "frame does not decode into its generated type");
    let v = value;
    let kind = value["kind"].as_str().unwrap_or_default();
    let op = value.get("operation").and_then(Value::as_str).and_then(|s| s.parse::<ToolOperation>().ok());
    fn de<'a, T: serde::Deserialize<'a>>(v: &'a Value) -> Result<T, serde_json::Error> {
        T::deserialize(v)
    }
    use ToolOperation as O;
    Ok(match (kind, op) {
        ("bind", _) => AdapterFrame::BindFrame(de(v).map_err(bad)?),
        ("bound", _) => AdapterFrame::BoundFrame(de(v).map_err(bad)?),
        ("invoke", Some(O::FsList)) => AdapterFrame::InvokeFsList(de(v).map_err(bad)?),
        ("invoke", Some(O::FsStat)) => AdapterFrame::InvokeFsStat(de(v).map_err(bad)?),
        ("invoke", Some(O::FsRead)) => AdapterFrame::InvokeFsRead(de(v).map_err(bad)?),
        ("invoke", Some(O::FsSearch)) => AdapterFrame::InvokeFsSearch(de(v).map_err(bad)?),
        ("invoke", Some(O::FsWrite)) => AdapterFrame::InvokeFsWrite(de(v).map_err(bad)?),
        ("invoke", Some(O::FsEdit)) => AdapterFrame::InvokeFsEdit(de(v).map_err(bad)?),
        ("result", _) if value["ok"] == Value::Bool(false) => AdapterFrame::ResultError(de(v).map_err(bad)?),
        ("result", Some(O::FsList)) => AdapterFrame::ResultFsList(de(v).map_err(bad)?),
        ("result", Some(O::FsStat)) => AdapterFrame::ResultFsStat(de(v).map_err(bad)?),
        ("result", Some(O::FsRead)) => AdapterFrame::ResultFsRead(de(v).map_err(bad)?),
        ("result", Some(O::FsSearch)) => AdapterFrame::ResultFsSearch(de(v).map_err(bad)?),
        ("result", Some(O::FsWrite)) => AdapterFrame::ResultFsWrite(de(v).map_err(bad)?),
        ("result", Some(O::FsEdit)) => AdapterFrame::ResultFsEdit(de(v).map_err(bad)?),
        ("abort", _) => AdapterFrame::AbortFrame(de(v).map_err(bad)?),
        ("aborted", _) if value["aborted"] == Value::Bool(true) => AdapterFrame::AbortedTrue(de(v).map_err(bad)?),
        ("aborted", _) => AdapterFrame::AbortedFalse(de(v).map_err(bad)?),
        ("revoke", _) => AdapterFrame::RevokeFrame(de(v).map_err(bad)?),
        ("revoked", _) => AdapterFrame::RevokedFrame(de(v).map_err(bad)?),
        _ => return Err(FrameError::close(code, "kind", "unknown frame kind")),
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::contract::descriptor::{admit_descriptor, ExpectedBinding};
    use serde_json::json;

    pub(crate) fn base(name: &str) -> Value {
        let path = format!("{}/vectors/bases/{name}.json", env!("CARGO_MANIFEST_DIR"));
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    pub(crate) fn binding() -> Binding {
        let exp = ExpectedBinding { host_instance_id: "host-019f", session_id: "agent-a", generation: 2 };
        Binding::from(&admit_descriptor(&base("descriptor"), Some(&exp)).unwrap())
    }

    fn line(v: &Value) -> Vec<u8> {
        serde_json::to_vec(v).unwrap()
    }

    #[test]
    fn only_an_attributable_invoke_refused_for_unknown_keys_may_be_answered() {
        let b = binding();
        let with = |f: &dyn Fn(&mut Value)| {
            let mut v = base("invoke");
            f(&mut v);
            extra_keys_only(&v, &b)
        };
        let a = with(&|v| v["timeoutMs"] = json!(5)).expect("an extra key on a valid invoke");
        assert_eq!((a.request_id.as_str(), a.idempotency_key.as_str()), ("tool-1", "turn-1-read-1"));
        assert_eq!(a.operation, ToolOperation::FsRead);
        // Extra key plus a bad payload: still answerable (the payload error is a reply).
        assert!(with(&|v| {
            v["timeoutMs"] = json!(5);
            v["payload"]["maxBytes"] = json!(0);
        })
        .is_some());
        // No extra key, a valid frame, or a reply-only refusal: nothing to allow.
        assert_eq!(with(&|_| {}), None);
        assert_eq!(with(&|v| v["payload"]["maxBytes"] = json!(0)), None);
        // Close for another reason as well: wrong identity, a bad id, the handle.
        assert_eq!(
            with(&|v| {
                v["timeoutMs"] = json!(5);
                v["sessionId"] = json!("agent-b");
            }),
            None
        );
        assert_eq!(
            with(&|v| {
                v["timeoutMs"] = json!(5);
                v["requestId"] = json!("-bad");
            }),
            None
        );
        let h = b.handle().expose().to_string();
        assert_eq!(with(&|v| v["note"] = json!(h.clone())), None);
        // Not an invoke.
        let mut abort = base("abort");
        abort["reason"] = json!("x");
        assert_eq!(extra_keys_only(&abort, &b), None);
    }

    #[test]
    fn every_base_frame_is_valid_in_its_direction_only() {
        let b = binding();
        for (name, dir) in [
            ("bind", Direction::ToAdapter),
            ("invoke", Direction::ToAdapter),
            ("abort", Direction::ToAdapter),
            ("revoke", Direction::ToAdapter),
            ("bound", Direction::ToDaemon),
            ("result", Direction::ToDaemon),
            ("result-error", Direction::ToDaemon),
            ("aborted", Direction::ToDaemon),
            ("revoked", Direction::ToDaemon),
        ] {
            let v = base(name);
            assert!(parse_adapter_frame(&line(&v), &b, dir).is_ok(), "{name}");
            let other = if dir == Direction::ToAdapter { Direction::ToDaemon } else { Direction::ToAdapter };
            let e = parse_adapter_frame(&line(&v), &b, other).unwrap_err();
            let want = if name == "bind" { "frame" } else { "kind" };
            assert_eq!(e.error.field(), want, "{name}");
        }
    }

    #[test]
    fn bind_request_reads_without_a_binding() {
        let r = parse_bind_request(&line(&base("bind")), 1 << 20).unwrap();
        assert_eq!(r.identity().session_id, "agent-a");
        assert_eq!(r.operations().len(), 6);
    }

    #[test]
    fn attributable_invoke_is_a_reply() {
        let b = binding();
        let mut v = base("invoke");
        v["payload"]["path"] = "../x".into();
        let e = parse_adapter_frame(&line(&v), &b, Direction::ToAdapter).unwrap_err();
        assert_eq!(
            (e.error.code, e.error.field(), e.disposition),
            (Code::InvalidPath, "payload.path", Disposition::Reply)
        );
        assert_eq!(e.attribution.unwrap().request_id, "tool-1");
    }
}
