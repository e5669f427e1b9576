//! Descriptor admission: SPEC §3.2 checks 1–11, in order, with the exact codes and fields,
//! and the fit check of SPEC §3.3.

use std::num::NonZeroU64;

use serde_json::{json, Map, Value};

use super::error::{join_field, Code, ContractError};
use super::schema::{self, Entry};
use super::secret::CapabilityHandle;
use super::text::{has_control, is_adapter_id, is_base64url, is_semver, units_in};
use super::types::tool_adapter::{AdapterLimits, HostToolAdapterDescriptor, ToolOperation};

/// Largest safe JavaScript integer, 2^53 − 1.
pub const MAX_SAFE_INTEGER: u64 = 9_007_199_254_740_991;

/// The six operations, in their canonical order.
pub const OPERATIONS: [&str; 6] = ["fs.list", "fs.stat", "fs.read", "fs.search", "fs.write", "fs.edit"];

/// The seven limits in canonical order, with their inclusive ranges (SPEC §3.2).
pub const LIMITS: [(&str, u64, u64); 7] = [
    ("maxRequestBytes", 2048, 4_194_304),
    ("maxResponseBytes", 1024, 4_194_304),
    ("maxConcurrentRequests", 1, 64),
    ("maxQueuedRequests", 0, 256),
    ("requestTimeoutMs", 100, 120_000),
    ("maxIdempotencyKeys", 1, 4096),
    ("idempotencyTtlMs", 1000, 86_400_000),
];

/// The inclusive range `(min, max)` of the limit named `key` ([`LIMITS`]); `None` for a name
/// that is no limit.
pub fn limit_range(key: &str) -> Option<(u64, u64)> {
    LIMITS.iter().find(|(k, _, _)| *k == key).map(|(_, lo, hi)| (*lo, *hi))
}

/// The `retryAfterMs` of an `adapter_queue_capacity` refusal on a binding whose
/// `requestTimeoutMs` is `request_timeout_ms` (SPEC PC-4.4):
/// `max(25, min(1000, floor(requestTimeoutMs / 20)))`.
pub fn retry_after_ms(request_timeout_ms: u64) -> u64 {
    (request_timeout_ms / 20).clamp(25, 1000)
}

pub(crate) const DESCRIPTOR_KEYS: [&str; 7] =
    ["protocolVersion", "adapterId", "adapterVersion", "endpoint", "binding", "operations", "limits"];
pub(crate) const BINDING_KEYS: [&str; 4] = ["hostInstanceId", "sessionId", "generation", "capabilityHandle"];
pub(crate) const ENDPOINT_KEYS: [&str; 2] = ["transport", "path"];

/// The limits as plain values: the generated [`AdapterLimits`] keeps the two that must be at
/// least 1 as `NonZeroU64` and the rest as `i64`; every consumer reads them through this.
pub trait LimitValues {
    /// The values in canonical order ([`LIMITS`]).
    fn values(&self) -> [u64; 7];
    /// The limits object as JSON, keys in canonical order.
    fn to_json(&self) -> Value {
        let mut m = Map::new();
        for ((k, _, _), v) in LIMITS.iter().zip(self.values()) {
            m.insert((*k).into(), v.into());
        }
        Value::Object(m)
    }
}

impl LimitValues for AdapterLimits {
    fn values(&self) -> [u64; 7] {
        // Admission and the builders below only make nonnegative values.
        let u = |n: i64| u64::try_from(n).unwrap_or(0);
        [
            u(self.max_request_bytes),
            u(self.max_response_bytes),
            self.max_concurrent_requests.get(),
            u(self.max_queued_requests),
            u(self.request_timeout_ms),
            self.max_idempotency_keys.get(),
            u(self.idempotency_ttl_ms),
        ]
    }
}

/// The limits of values in canonical order; `None` when `maxConcurrentRequests` or
/// `maxIdempotencyKeys` is 0 or a value exceeds `i64` (ranges are admission's business).
pub fn limits_from_values(v: [u64; 7]) -> Option<AdapterLimits> {
    let i = |n: u64| i64::try_from(n).ok();
    Some(AdapterLimits {
        max_request_bytes: i(v[0])?,
        max_response_bytes: i(v[1])?,
        max_concurrent_requests: NonZeroU64::new(v[2])?,
        max_queued_requests: i(v[3])?,
        request_timeout_ms: i(v[4])?,
        max_idempotency_keys: NonZeroU64::new(v[5])?,
        idempotency_ttl_ms: i(v[6])?,
    })
}

/// [`limits_from_values`] for constants: a zero or oversized value fails the build.
pub const fn const_limits(v: [u64; 7]) -> AdapterLimits {
    const fn nz(n: u64) -> NonZeroU64 {
        match NonZeroU64::new(n) {
            Some(n) => n,
            None => panic!("a limit that must be at least 1 is 0"),
        }
    }
    const fn i(n: u64) -> i64 {
        assert!(n <= i64::MAX as u64, "a limit exceeds i64");
        n as i64
    }
    AdapterLimits {
        max_request_bytes: i(v[0]),
        max_response_bytes: i(v[1]),
        max_concurrent_requests: nz(v[2]),
        max_queued_requests: i(v[3]),
        request_timeout_ms: i(v[4]),
        max_idempotency_keys: nz(v[5]),
        idempotency_ttl_ms: i(v[6]),
    }
}

/// The nonsecret identity every frame of a binding carries (SPEC §4.1), borrowed from the
/// generated descriptor or frame that owns it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Identity<'a> {
    /// Tool-adapter protocol version (`1.0`).
    pub protocol_version: &'a str,
    /// Adapter id.
    pub adapter_id: &'a str,
    /// Adapter version.
    pub adapter_version: &'a str,
    /// Host incarnation.
    pub host_instance_id: &'a str,
    /// Logical session.
    pub session_id: &'a str,
    /// Session generation.
    pub generation: u64,
}

impl Identity<'_> {
    /// A raw frame of `kind` with this identity and the extra members appended in order: for
    /// a frame the generated types cannot express (a negative case, a fault) and for the
    /// adapter's result-line prefix, its hot path. Every well-formed frame a daemon or a runner
    /// sends is built in [`super::compose`] from the generated types.
    pub fn frame(&self, kind: &str, extra: impl IntoIterator<Item = (&'static str, Value)>) -> Value {
        let mut m = Map::new();
        m.insert("protocolVersion".into(), self.protocol_version.into());
        m.insert("kind".into(), kind.into());
        m.insert("adapterId".into(), self.adapter_id.into());
        m.insert("adapterVersion".into(), self.adapter_version.into());
        m.insert("hostInstanceId".into(), self.host_instance_id.into());
        m.insert("sessionId".into(), self.session_id.into());
        m.insert("generation".into(), self.generation.into());
        for (k, v) in extra {
            m.insert(k.into(), v);
        }
        Value::Object(m)
    }
}

/// An admitted descriptor: a view over the generated [`HostToolAdapterDescriptor`] with the
/// sizes of its normalized `bind` and `bound` frames, which admission computed.
#[derive(Clone, Debug)]
pub struct Descriptor {
    doc: HostToolAdapterDescriptor,
    bind_bytes: usize,
    bound_bytes: usize,
}

impl Descriptor {
    /// The generated descriptor.
    pub fn doc(&self) -> &HostToolAdapterDescriptor {
        &self.doc
    }

    /// The binding identity.
    pub fn identity(&self) -> Identity<'_> {
        let d = &self.doc;
        Identity {
            protocol_version: "1.0",
            adapter_id: &d.adapter_id,
            adapter_version: &d.adapter_version,
            host_instance_id: &d.binding.host_instance_id,
            session_id: &d.binding.session_id,
            generation: u64::try_from(d.binding.generation.0).unwrap_or(0),
        }
    }

    /// The adapter socket path.
    pub fn endpoint_path(&self) -> &str {
        &self.doc.endpoint.path
    }

    /// The secret handle.
    pub fn handle(&self) -> &CapabilityHandle {
        &self.doc.binding.capability_handle
    }

    /// Granted operations, in descriptor order.
    pub fn operations(&self) -> &[ToolOperation] {
        &self.doc.operations.0
    }

    /// The seven limits.
    pub fn limits(&self) -> &AdapterLimits {
        &self.doc.limits
    }

    /// Serialized size of the normalized `bind` frame, LF included.
    pub fn bind_bytes(&self) -> usize {
        self.bind_bytes
    }

    /// Serialized size of the normalized `bound` frame, LF included.
    pub fn bound_bytes(&self) -> usize {
        self.bound_bytes
    }

    /// Whether `op` is granted.
    pub fn grants(&self, op: ToolOperation) -> bool {
        self.operations().contains(&op)
    }

    /// The operations as JSON strings, in order.
    pub fn operations_json(&self) -> Value {
        operations_json(self.operations())
    }

    /// The nonsecret policy summary retained by a daemon (SPEC §3.4).
    pub fn policy_summary(&self) -> Value {
        json!({
            "protocolVersion": "1.0",
            "adapterId": self.identity().adapter_id,
            "adapterVersion": self.identity().adapter_version,
            "operations": self.operations_json(),
            "limits": self.limits().to_json(),
        })
    }

    /// The same descriptor with other limits (a fault or a test that breaks a size on
    /// purpose); the frame sizes are recomputed, the fit is not checked.
    pub fn with_limits(&self, limits: AdapterLimits) -> Self {
        let mut doc = self.doc.clone();
        doc.limits = limits;
        let id = self.identity();
        let names: Vec<String> = self.operations().iter().map(ToString::to_string).collect();
        let ops_len = operations_len(names.iter().map(String::as_str));
        let (bind_bytes, bound_bytes) = frame_lengths(id, self.handle().expose(), ops_len, &limits);
        Self { doc, bind_bytes, bound_bytes }
    }
}

/// Operations as JSON strings, in order.
pub fn operations_json(ops: &[ToolOperation]) -> Value {
    Value::Array(ops.iter().map(|o| Value::String(o.to_string())).collect())
}

/// The binding a descriptor must match (check 8): this host, and the command's session and
/// generation as given (a negative or otherwise impossible generation never matches).
#[derive(Clone, Copy, Debug)]
pub struct ExpectedBinding<'a> {
    /// This host's `hostInstanceId`.
    pub host_instance_id: &'a str,
    /// The command's `sessionId`.
    pub session_id: &'a str,
    /// The command's `generation`.
    pub generation: i64,
}

/// The fit check (SPEC §3.3): compact `bind` must fit `maxRequestBytes` and `bound`
/// `maxResponseBytes`, LF included; `bind` is compared first; equality passes. Returns
/// `(bind_bytes, bound_bytes)`.
pub fn fit_check(
    identity: Identity<'_>,
    handle: &CapabilityHandle,
    operations: &Value,
    limits: &AdapterLimits,
    field_prefix: &str,
) -> Result<(usize, usize), ContractError> {
    let operations_len = crate::wire::json_len(operations).unwrap_or(0);
    fit(identity, handle.expose(), operations_len, limits).map_err(|over| {
        ContractError::new(
            Code::InvalidToolAdapterLimit,
            format!("{field_prefix}{}", over.limit),
            format!("{} cannot contain the {}-byte {} frame", over.limit, over.bytes, over.frame),
        )
        .with_detail("requiredBytes", over.bytes.into())
    })
}

/// A normalized frame that does not fit its limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Overflow {
    /// The limit's key (`maxRequestBytes` or `maxResponseBytes`).
    pub limit: &'static str,
    /// The frame (`bind` or `bound`).
    pub frame: &'static str,
    /// Its encoded length, LF included.
    pub bytes: usize,
}

/// The rule of [`fit_check`] on borrowed parts (`operations_len`: the encoded length of the
/// operations array): `(bind_bytes, bound_bytes)`, or the first frame that does not fit.
pub(crate) fn fit(
    identity: Identity<'_>,
    handle: &str,
    operations_len: usize,
    limits: &AdapterLimits,
) -> Result<(usize, usize), Overflow> {
    let (bind, bound) = frame_lengths(identity, handle, operations_len, limits);
    if bind as i64 > limits.max_request_bytes {
        return Err(Overflow { limit: "maxRequestBytes", frame: "bind", bytes: bind });
    }
    if bound as i64 > limits.max_response_bytes {
        return Err(Overflow { limit: "maxResponseBytes", frame: "bound", bytes: bound });
    }
    Ok((bind, bound))
}

/// The encoded length of an operations array of `names` (what [`fit`] takes).
pub(crate) fn operations_len<'a>(names: impl IntoIterator<Item = &'a str>) -> usize {
    let (count, len) = names.into_iter().fold((0usize, 0usize), |(n, l), s| (n + 1, l + crate::wire::json_str_len(s)));
    2 + len + count.saturating_sub(1)
}

/// The encoded length of an integer.
fn int_len(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |d| d as usize + 1)
}

/// The encoded lengths (LF included) of the normalized `bind` and `bound` frames, computed
/// without building them: `bound` is `{` + identity + `,"operations":…,"limits":…}` + LF and
/// `bind` has `,"capabilityHandle":"…"` more. Equal to `encode_line(&bind_frame(..)).len()`
/// and `encode_line(&bound_frame(..)).len()` (unit test and tests/properties.rs).
fn frame_lengths(
    identity: Identity<'_>,
    handle: &str,
    operations_len: usize,
    limits: &AdapterLimits,
) -> (usize, usize) {
    let json_len = crate::wire::json_str_len;
    // `"key":` is the key's length plus 3 (two quotes and a colon); members are joined by commas.
    let member = |key: &str, value_len: usize| key.len() + 3 + value_len;
    let id = &identity;
    let common = [
        member("protocolVersion", json_len(id.protocol_version)),
        member("adapterId", json_len(id.adapter_id)),
        member("adapterVersion", json_len(id.adapter_version)),
        member("hostInstanceId", json_len(id.host_instance_id)),
        member("sessionId", json_len(id.session_id)),
        member("generation", int_len(id.generation)),
        member("operations", operations_len),
        member("limits", {
            let inner: usize =
                LIMITS.iter().zip(limits.values()).map(|((k, _, _), v)| member(k, int_len(v))).sum::<usize>();
            2 + inner + (LIMITS.len() - 1)
        }),
    ];
    // Braces, the members with the commas between them, and the LF.
    let frame = |extra: &[usize]| {
        let members = common.len() + extra.len();
        2 + common.iter().sum::<usize>() + extra.iter().sum::<usize>() + (members - 1) + 1
    };
    let bound_kind = member("kind", json_len("bound"));
    let bind_kind = member("kind", json_len("bind"));
    let handle_member = member("capabilityHandle", json_len(handle));
    (frame(&[bind_kind, handle_member]), frame(&[bound_kind]))
}

/// Read a safe integer (|n| ≤ 2^53 − 1) from a JSON value.
pub fn safe_integer(v: &Value) -> Option<i64> {
    let n = v.as_i64().or_else(|| v.as_u64().and_then(|u| i64::try_from(u).ok()))?;
    (n.unsigned_abs() <= MAX_SAFE_INTEGER).then_some(n)
}

/// Check an operations array (1–6 unique known operations), returning them in order.
pub fn parse_operations(v: Option<&Value>) -> Option<Vec<ToolOperation>> {
    let arr = v?.as_array()?;
    if arr.is_empty() || arr.len() > 6 {
        return None;
    }
    let mut out: Vec<ToolOperation> = Vec::with_capacity(arr.len());
    for item in arr {
        let op: ToolOperation = item.as_str()?.parse().ok()?;
        if out.contains(&op) {
            return None;
        }
        out.push(op);
    }
    Some(out)
}

/// Check a limits object (exactly the seven keys, each an integer in range). On failure,
/// the field suffix (`""` for the object, or the offending key).
pub fn parse_limits(v: Option<&Value>) -> Result<AdapterLimits, String> {
    let obj = v.and_then(Value::as_object).ok_or_else(String::new)?;
    if let Some(k) = obj.keys().find(|k| !LIMITS.iter().any(|(n, _, _)| n == k)) {
        return Err(k.clone());
    }
    let mut vals = [0u64; 7];
    for (i, (k, lo, hi)) in LIMITS.iter().enumerate() {
        match obj.get(*k).and_then(safe_integer) {
            Some(n) if n >= 0 && (*lo..=*hi).contains(&(n as u64)) => vals[i] = n as u64,
            _ => return Err((*k).to_string()),
        }
    }
    // The ranges keep both non-zero limits at least 1.
    limits_from_values(vals).ok_or_else(String::new)
}

fn err(code: Code, field: impl Into<String>, msg: &str) -> ContractError {
    ContractError::new(code, field, msg.to_string())
}

/// Admit a descriptor (SPEC §3.2): checks 1–11 in order, then the schema and the typed
/// decode. `expected` is the binding check 8 compares against; `None` skips check 8 (for
/// tools that judge a descriptor on its own, such as a grant).
///
/// Every error carries `details.field`; none contains the handle or any input value.
pub fn admit_descriptor(value: &Value, expected: Option<&ExpectedBinding<'_>>) -> Result<Descriptor, ContractError> {
    use Code::*;
    // 1. closed object
    let obj = value
        .as_object()
        .ok_or_else(|| err(InvalidToolAdapterDescriptor, "descriptor", "descriptor must be an object"))?;
    if let Some(k) = obj.keys().find(|k| !DESCRIPTOR_KEYS.contains(&k.as_str())) {
        return Err(err(InvalidToolAdapterDescriptor, join_field("descriptor", k), "descriptor has an unknown key"));
    }
    // 2. protocolVersion: a string of 1-16 units (a malformed field), then exactly "1.0"
    let pv = obj.get("protocolVersion").and_then(Value::as_str).filter(|s| units_in(s, 16)).ok_or_else(|| {
        err(InvalidToolAdapterField, "descriptor.protocolVersion", "protocolVersion must be a string of 1-16 units")
    })?;
    if pv != "1.0" {
        return Err(err(
            UnsupportedToolAdapterVersion,
            "descriptor.protocolVersion",
            "tool adapter protocolVersion must be \"1.0\"",
        ));
    }
    // 3. adapterId
    let aid = obj.get("adapterId").and_then(Value::as_str).filter(|s| units_in(s, 128)).ok_or_else(|| {
        err(InvalidToolAdapterField, "descriptor.adapterId", "adapterId must be a string of 1-128 units")
    })?;
    if !is_adapter_id(aid) {
        return Err(err(
            InvalidToolAdapterIdentity,
            "descriptor.adapterId",
            "adapterId must match ^[A-Za-z0-9][A-Za-z0-9._-]*$",
        ));
    }
    // 4. adapterVersion
    let aver = obj.get("adapterVersion").and_then(Value::as_str).filter(|s| units_in(s, 64)).ok_or_else(|| {
        err(InvalidToolAdapterField, "descriptor.adapterVersion", "adapterVersion must be a string of 1-64 units")
    })?;
    if !is_semver(aver) {
        return Err(err(InvalidToolAdapterIdentity, "descriptor.adapterVersion", "adapterVersion must be SemVer"));
    }
    // 5. endpoint
    let ep_path = check_endpoint(obj.get("endpoint"))?;
    // 6. binding shape and ids
    let b = obj
        .get("binding")
        .and_then(Value::as_object)
        .ok_or_else(|| err(InvalidToolAdapterBinding, "descriptor.binding", "binding must be an object"))?;
    if let Some(k) = b.keys().find(|k| !BINDING_KEYS.contains(&k.as_str())) {
        return Err(err(InvalidToolAdapterBinding, join_field("descriptor.binding", k), "binding has an unknown key"));
    }
    let host = binding_id(b, "hostInstanceId", 128)?;
    let session = binding_id(b, "sessionId", 256)?;
    let generation = b.get("generation").and_then(safe_integer).filter(|g| *g >= 0).ok_or_else(|| {
        err(InvalidToolAdapterField, "descriptor.binding.generation", "generation must be an integer 0..2^53-1")
    })? as u64;
    // 7. capabilityHandle
    let handle = b
        .get("capabilityHandle")
        .and_then(Value::as_str)
        .filter(|s| (32..=512).contains(&s.len()) && is_base64url(s))
        .ok_or_else(|| {
            err(
                InvalidToolAdapterCapability,
                "descriptor.binding.capabilityHandle",
                "capabilityHandle must be 32-512 base64url characters",
            )
        })?;
    // 7 (DECISION): the handle must not occur in any nonsecret field. Every frame echoes the
    // identity and a daemon retains the summary, so such a descriptor would leak the handle
    // into `bound`, logs and status; the daemon side would fail it closed at bind anyway.
    let nonsecret = [aid, aver, ep_path.as_str(), host, session];
    if nonsecret.iter().any(|s| s.contains(handle)) {
        return Err(err(
            InvalidToolAdapterCapability,
            "descriptor.binding.capabilityHandle",
            "capabilityHandle must not occur in a nonsecret descriptor field",
        ));
    }
    // 8. binding equals the expected one
    if let Some(exp) = expected {
        if host != exp.host_instance_id {
            return Err(err(
                ToolAdapterBindingMismatch,
                "binding.hostInstanceId",
                "descriptor is bound to another host instance",
            ));
        }
        if session != exp.session_id {
            return Err(err(ToolAdapterBindingMismatch, "binding.sessionId", "descriptor is bound to another session"));
        }
        if generation as i64 != exp.generation {
            return Err(err(
                ToolAdapterBindingMismatch,
                "binding.generation",
                "descriptor is bound to another generation",
            ));
        }
    }
    // 9. operations
    let operations = parse_operations(obj.get("operations")).ok_or_else(|| {
        err(UnsupportedToolOperation, "descriptor.operations", "operations must be 1-6 unique operations of the six")
    })?;
    // 10. limits
    let limits = parse_limits(obj.get("limits")).map_err(|k| {
        let field = if k.is_empty() { "descriptor.limits".to_string() } else { join_field("descriptor.limits", &k) };
        err(InvalidToolAdapterLimit, field, "limits must be exactly the seven keys, each an integer in range")
    })?;
    // The schema must agree with checks 1-10.
    if let Some(v) = schema::confirm_accepted(Entry::Descriptor, value) {
        return Err(err(InvalidToolAdapterDescriptor, v.dotted("descriptor"), "descriptor violates the schema"));
    }
    let identity = Identity {
        protocol_version: pv,
        adapter_id: aid,
        adapter_version: aver,
        host_instance_id: host,
        session_id: session,
        generation,
    };
    let ops_json = operations_json(&operations);
    // 11. fit check
    let (bind_bytes, bound_bytes) =
        fit_check(identity, &CapabilityHandle::new(handle), &ops_json, &limits, "descriptor.limits.")?;
    let doc = typed_descriptor(value)?;
    Ok(Descriptor { doc, bind_bytes, bound_bytes })
}

impl Descriptor {
    /// The view over a generated descriptor that admission accepted, with its frame sizes
    /// (the one-pass admission, which has computed them, builds it so).
    pub(crate) fn from_admitted(doc: HostToolAdapterDescriptor, bind_bytes: usize, bound_bytes: usize) -> Self {
        Self { doc, bind_bytes, bound_bytes }
    }
}

/// The generated type of a descriptor value that [`admit_descriptor`] accepted (decoded on
/// demand: admission itself never needs it, and the schema and the generated types agree on
/// every vector, tests/agreement.rs).
pub fn typed_descriptor(value: &Value) -> Result<HostToolAdapterDescriptor, ContractError> {
    <HostToolAdapterDescriptor as serde::Deserialize>::deserialize(value)
        .map_err(|_| err(Code::InvalidToolAdapterDescriptor, "descriptor", "descriptor does not decode"))
}

/// A binding id: a string of 1..=max units (`invalid_tool_adapter_field`), then free of C0/DEL
/// (`invalid_tool_adapter_binding`, as Pi Daemon 0.3.3 reports it).
fn binding_id<'a>(b: &'a Map<String, Value>, key: &str, max: usize) -> Result<&'a str, ContractError> {
    let field = format!("descriptor.binding.{key}");
    let s = b.get(key).and_then(Value::as_str).filter(|s| units_in(s, max)).ok_or_else(|| {
        ContractError::new(
            Code::InvalidToolAdapterField,
            field.clone(),
            format!("{key} must be a string of 1-{max} units"),
        )
    })?;
    if has_control(s) {
        return Err(ContractError::new(
            Code::InvalidToolAdapterBinding,
            field,
            format!("{key} must not contain control characters"),
        ));
    }
    Ok(s)
}

fn check_endpoint(v: Option<&Value>) -> Result<String, ContractError> {
    use Code::InvalidToolAdapterEndpoint as E;
    let ep = v.and_then(Value::as_object).ok_or_else(|| err(E, "descriptor.endpoint", "endpoint must be an object"))?;
    if let Some(k) = ep.keys().find(|k| !ENDPOINT_KEYS.contains(&k.as_str())) {
        return Err(err(E, join_field("descriptor.endpoint", k), "endpoint has an unknown key"));
    }
    if ep.get("transport").and_then(Value::as_str) != Some("unix") {
        return Err(err(E, "descriptor.endpoint.transport", "endpoint transport must be \"unix\""));
    }
    // A path that is not a string of 1-4096 units is a malformed field (Pi Daemon 0.3.3); a
    // string that is not a canonical socket path is a bad endpoint.
    let path = ep.get("path").and_then(Value::as_str).filter(|s| units_in(s, 4096)).ok_or_else(|| {
        err(Code::InvalidToolAdapterField, "descriptor.endpoint.path", "endpoint path must be a string of 1-4096 units")
    })?;
    if !is_endpoint_path(path) {
        return Err(err(
            E,
            "descriptor.endpoint.path",
            "endpoint path must be absolute, normalized, at most 100 bytes, not /, without control characters",
        ));
    }
    Ok(path.to_string())
}

/// SPEC §3.2 check 5 on a socket path: absolute, ≤ 100 bytes, not `/`, no `//`, `.` or `..`
/// segment, no control character. One trailing `/` passes here (it fails at connect).
pub fn is_endpoint_path(path: &str) -> bool {
    if !path.starts_with('/') || path == "/" || path.len() > 100 || has_control(path) {
        return false;
    }
    let body = path[1..].strip_suffix('/').unwrap_or(&path[1..]);
    !body.is_empty() && body.split('/').all(|s| !s.is_empty() && s != "." && s != "..")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn worked() -> Value {
        serde_json::from_str(include_str!("../../vectors/bases/descriptor.json")).unwrap()
    }

    const EXP: ExpectedBinding<'static> =
        ExpectedBinding { host_instance_id: "host-019f", session_id: "agent-a", generation: 2 };

    #[test]
    fn limit_ranges_and_retry_after_are_the_spec_tables() {
        assert_eq!(limit_range("maxResponseBytes"), Some((1024, 4_194_304)));
        assert_eq!(limit_range("maxQueuedRequests"), Some((0, 256)));
        assert_eq!(limit_range("requestTimeout"), None);
        assert_eq!([499, 500, 520, 20_019, 20_020].map(retry_after_ms), [25, 25, 26, 1000, 1000]);
    }

    #[test]
    fn worked_example_sizes() {
        let d = admit_descriptor(&worked(), Some(&EXP)).unwrap();
        assert_eq!((d.bind_bytes(), d.bound_bytes()), (492, 431));
        assert_eq!(crate::wire::encode_line(&d.bind_frame()).len(), 492);
        assert_eq!(crate::wire::encode_line(&d.bound_frame()).len(), 431);
    }

    #[test]
    fn frame_lengths_equal_the_encoded_frames() {
        for (host, session, generation) in
            [("h", "s", 0u64), ("€\"\\\u{1}x", "日本語\n", 9_007_199_254_740_991), ("host-019f", "agent-a", 2)]
        {
            // Control characters no generated type admits: the frames are built raw.
            let id = Identity {
                protocol_version: "1.0",
                adapter_id: "owner-filesystem",
                adapter_version: "1.2.0-rc.1+b",
                host_instance_id: host,
                session_id: session,
                generation,
            };
            let handle = CapabilityHandle::new("aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789_-AB");
            let ops = json!(["fs.read", "fs.stat"]);
            let limits = const_limits([2048, 1024, 1, 0, 100, 1, 1000]);
            let lj = limits.to_json();
            let bind = id.frame(
                "bind",
                [("capabilityHandle", handle.expose().into()), ("operations", ops.clone()), ("limits", lj.clone())],
            );
            let bound = id.frame("bound", [("operations", ops.clone()), ("limits", lj)]);
            let want = (crate::wire::encode_line(&bind).len(), crate::wire::encode_line(&bound).len());
            let ops_len = crate::wire::json_len(&ops).unwrap();
            assert_eq!(ops_len, operations_len(["fs.read", "fs.stat"]));
            assert_eq!(operations_len([]), 2);
            for n in [0, 9, 10, 99, 100, u64::MAX] {
                assert_eq!(int_len(n), n.to_string().len());
            }
            assert_eq!(frame_lengths(id, handle.expose(), ops_len, &limits), want, "{host:?} {session:?}");
        }
    }

    #[test]
    fn endpoint_paths() {
        for ok in ["/run/x.sock", "/run/x/", "/a"] {
            assert!(is_endpoint_path(ok), "{ok}");
        }
        for bad in ["/", "run/x", "//run", "/run/./x", "/run/../x", "/run/.", "/run//x", "/a\u{7}"] {
            assert!(!is_endpoint_path(bad), "{bad}");
        }
        assert!(is_endpoint_path(&format!("/{}", "a".repeat(99))));
        assert!(!is_endpoint_path(&format!("/{}", "a".repeat(100))));
    }

    #[test]
    fn euro_identities_fail_on_response_then_pass() {
        let mut d = worked();
        let host = "€".repeat(128);
        let session = "€".repeat(256);
        d["binding"]["hostInstanceId"] = host.clone().into();
        d["binding"]["sessionId"] = session.clone().into();
        d["limits"]["maxRequestBytes"] = 2048.into();
        d["limits"]["maxResponseBytes"] = 1024.into();
        let exp = ExpectedBinding { host_instance_id: &host, session_id: &session, generation: 2 };
        let e = admit_descriptor(&d, Some(&exp)).unwrap_err();
        assert_eq!((e.code, e.field()), (Code::InvalidToolAdapterLimit, "descriptor.limits.maxResponseBytes"));
        assert_eq!(e.details["requiredBytes"], 1561);
        d["limits"]["maxResponseBytes"] = 2048.into();
        let ok = admit_descriptor(&d, Some(&exp)).unwrap();
        assert_eq!((ok.bind_bytes(), ok.bound_bytes()), (1622, 1561));
    }
}
