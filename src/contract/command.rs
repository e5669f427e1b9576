//! Daemon commands: version routing, the check order of SPEC §2.1, the v1 resource rules and
//! the v2 `open` parse order of SPEC §3.2.

use serde_json::{json, Map, Value};

use super::descriptor::{admit_descriptor, safe_integer, Descriptor, ExpectedBinding, MAX_SAFE_INTEGER};
use super::error::{Code, ContractError};
use super::schema::{self, Entry};
use super::text::{is_major_minor, units_in, utf16_len};
use super::types::protocol_v2;

/// The eleven daemon operations.
pub const OPERATIONS: [&str; 11] =
    ["handshake", "open", "wake", "steer", "followUp", "status", "abort", "attach", "detach", "close", "drain"];

/// Versions a host speaks (the `supported` detail of `incompatible_protocol`).
pub const SUPPORTED_VERSIONS: [&str; 2] = ["1.0", "2.0"];

/// Every code [`parse_command`] can refuse a command with (validation, never dispatch): five
/// of the envelope and payload, then the ten of descriptor admission (SPEC §3.2), in that order.
pub const VALIDATION_CODES: [Code; 15] = [
    Code::InvalidField,
    Code::InvalidProtocolVersion,
    Code::IncompatibleProtocol,
    Code::UnknownOperation,
    Code::UnsupportedResourcePolicy,
    Code::InvalidToolAdapterDescriptor,
    Code::InvalidToolAdapterField,
    Code::UnsupportedToolAdapterVersion,
    Code::InvalidToolAdapterIdentity,
    Code::InvalidToolAdapterEndpoint,
    Code::InvalidToolAdapterBinding,
    Code::InvalidToolAdapterCapability,
    Code::ToolAdapterBindingMismatch,
    Code::UnsupportedToolOperation,
    Code::InvalidToolAdapterLimit,
];

/// The ten descriptor admission codes of SPEC §3.2 (checks 1–11): the tail of
/// [`VALIDATION_CODES`].
pub const ADMISSION_CODES: &[Code] = VALIDATION_CODES.split_at(5).1;

/// The six resource policies of an open, in the order they are checked (SPEC §3.1).
pub const RESOURCES: [&str; 6] = ["extensions", "skills", "promptTemplates", "themes", "contextFiles", "tools"];

/// The `resources` of an open in the protocol text's example shape: the five non-tool
/// policies `"none"` and the given `tools` (`"none"` or a host-adapter policy). Every open
/// this project sends uses it (a daemon may require all six members, as Pi Daemon 0.3.3 does).
pub fn resources_with_tools(tools: Value) -> Value {
    let mut m = Map::with_capacity(RESOURCES.len());
    for name in RESOURCES {
        m.insert(name.to_string(), if name == "tools" { tools.clone() } else { Value::String("none".into()) });
    }
    Value::Object(m)
}

/// A resource policy string is 1–16 units.
const MAX_RESOURCE_UNITS: usize = 16;

/// `operation` is a string of 1–32 units before it is looked up (Pi Daemon 0.3.3).
const MAX_OPERATION_UNITS: usize = 32;

/// The thinking levels Pi Daemon 0.3.3 accepts in `model.thinkingLevel` (a string of 1–16
/// units first).
pub const THINKING_LEVELS: [&str; 7] = ["off", "minimal", "low", "medium", "high", "xhigh", "max"];

/// `prompt`, `message` and `systemPrompt` are at most 262144 units.
const MAX_PROMPT_UNITS: usize = 262_144;

/// The accepted envelope version: its exact text (echoed verbatim) and major.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Version {
    /// The request's `protocolVersion`, echoed on every reply.
    pub text: String,
    /// 1 or 2.
    pub major: u8,
}

/// A command that passed every rule: a thin view over the generated command type, with what
/// the rules learned on the way (the accepted version, the admitted descriptor).
#[derive(Clone, Debug)]
pub struct Command {
    /// The accepted version.
    pub version: Version,
    /// The command, decoded into the generated type of its operation (forward tolerant:
    /// unknown members are not kept).
    pub body: protocol_v2::Command,
    /// The admitted descriptor of a v2 host-adapter open.
    pub descriptor: Option<Descriptor>,
}

impl Command {
    /// `requestId`.
    pub fn request_id(&self) -> &str {
        use protocol_v2::Command as C;
        match &self.body {
            C::HandshakeCommand(c) => &c.request_id,
            C::OpenCommand(c) => &c.request_id,
            C::WakeCommand(c) => &c.request_id,
            C::SteerCommand(c) => &c.request_id,
            C::FollowUpCommand(c) => &c.request_id,
            C::StatusCommand(c) => &c.request_id,
            C::AbortCommand(c) => &c.request_id,
            C::AttachCommand(c) => &c.request_id,
            C::DetachCommand(c) => &c.request_id,
            C::CloseCommand(c) => &c.request_id,
            C::DrainCommand(c) => &c.request_id,
        }
    }

    /// `sessionId`, when the operation has one.
    pub fn session_id(&self) -> Option<&str> {
        use protocol_v2::Command as C;
        match &self.body {
            C::HandshakeCommand(_) | C::DrainCommand(_) => None,
            C::StatusCommand(c) => c.session_id.as_deref().map(String::as_str),
            C::OpenCommand(c) => Some(&c.session_id),
            C::WakeCommand(c) => Some(&c.session_id),
            C::SteerCommand(c) => Some(&c.session_id),
            C::FollowUpCommand(c) => Some(&c.session_id),
            C::AbortCommand(c) => Some(&c.session_id),
            C::AttachCommand(c) => Some(&c.session_id),
            C::DetachCommand(c) => Some(&c.session_id),
            C::CloseCommand(c) => Some(&c.session_id),
        }
    }

    /// `generation`, when the operation has one (checked to be 0..2^53-1).
    pub fn generation(&self) -> Option<u64> {
        use protocol_v2::Command as C;
        let g = match &self.body {
            C::HandshakeCommand(_) | C::StatusCommand(_) | C::DrainCommand(_) => return None,
            C::OpenCommand(c) => &c.generation,
            C::WakeCommand(c) => &c.generation,
            C::SteerCommand(c) => &c.generation,
            C::FollowUpCommand(c) => &c.generation,
            C::AbortCommand(c) => &c.generation,
            C::AttachCommand(c) => &c.generation,
            C::DetachCommand(c) => &c.generation,
            C::CloseCommand(c) => &c.generation,
        };
        u64::try_from(g.0).ok()
    }

    /// `idempotencyKey` of a wake, steer or followUp.
    pub fn idempotency_key(&self) -> Option<&str> {
        use protocol_v2::Command as C;
        match &self.body {
            C::WakeCommand(c) => Some(&c.idempotency_key),
            C::SteerCommand(c) => Some(&c.idempotency_key),
            C::FollowUpCommand(c) => Some(&c.idempotency_key),
            _ => None,
        }
    }

    /// The operation's name: one of [`OPERATIONS`].
    pub fn operation(&self) -> &'static str {
        use protocol_v2::Command as C;
        match &self.body {
            C::HandshakeCommand(_) => "handshake",
            C::OpenCommand(_) => "open",
            C::WakeCommand(_) => "wake",
            C::SteerCommand(_) => "steer",
            C::FollowUpCommand(_) => "followUp",
            C::StatusCommand(_) => "status",
            C::AbortCommand(_) => "abort",
            C::AttachCommand(_) => "attach",
            C::DetachCommand(_) => "detach",
            C::CloseCommand(_) => "close",
            C::DrainCommand(_) => "drain",
        }
    }
}

/// The generated type of a command value that passed the rules of [`judge_command`], decoded
/// straight into the variant its `operation` names (no trial of the eleven variants in turn).
/// The schema and the generated types agree on every vector and perturbation
/// (tests/agreement.rs), so after the rules this never fails; if it did, the command is refused
/// as `invalid_field` rather than dispatched half-read.
pub fn typed_command(value: &Value) -> Result<protocol_v2::Command, ContractError> {
    use protocol_v2::Command as C;
    fn de<T: serde::de::DeserializeOwned>(v: &Value) -> Result<T, ContractError> {
        T::deserialize(v).map_err(|_| err(Code::InvalidField, "command", "command does not decode"))
    }
    Ok(match value.get("operation").and_then(Value::as_str).unwrap_or_default() {
        "handshake" => C::HandshakeCommand(de(value)?),
        "open" => C::OpenCommand(de(value)?),
        "wake" => C::WakeCommand(de(value)?),
        "steer" => C::SteerCommand(de(value)?),
        "followUp" => C::FollowUpCommand(de(value)?),
        "status" => C::StatusCommand(de(value)?),
        "abort" => C::AbortCommand(de(value)?),
        "attach" => C::AttachCommand(de(value)?),
        "detach" => C::DetachCommand(de(value)?),
        "close" => C::CloseCommand(de(value)?),
        "drain" => C::DrainCommand(de(value)?),
        _ => return Err(err(Code::UnknownOperation, "operation", "operation is not one of the eleven")),
    })
}

/// A refused command, with what the reply needs besides the error (SPEC §2.2).
#[derive(Clone, Debug)]
pub struct CommandError {
    /// The typed error.
    pub error: ContractError,
    /// The version the reply carries: the request's if it was a `MAJOR.MINOR` string, else
    /// `1.0`.
    pub echo_version: String,
    /// The request's `requestId` if it was a valid one.
    pub request_id: Option<String>,
    /// The request's `sessionId` if it was a valid one (dispatch errors carry it).
    pub session_id: Option<String>,
    /// Whether the connection closes after the reply (`incompatible_protocol`).
    pub close: bool,
}

/// What the judging host knows.
#[derive(Clone, Copy, Debug)]
pub struct HostContext<'a> {
    /// This host's `hostInstanceId`: descriptors must be bound to it.
    pub host_instance_id: &'a str,
}

fn err(code: Code, field: &str, msg: &str) -> ContractError {
    ContractError::new(code, field, msg.to_string())
}

/// Parse and check one command value (already strict-decoded), in the order of SPEC §2.1 and
/// §3.2, and decode it into the generated type of its operation. Every refusal is typed; none
/// contains the handle.
pub fn parse_command(value: &Value, host: &HostContext<'_>) -> Result<Command, CommandError> {
    let (version, descriptor) = check_command(value, host).map_err(|e| refusal(value, e))?;
    let body = typed_command(value).map_err(|e| refusal(value, e))?;
    Ok(Command { version, body, descriptor })
}

/// The verdict of [`parse_command`] without the typed decode (the judges' path: `validate`
/// and the vectors need the verdict, not the command).
pub fn judge_command(value: &Value, host: &HostContext<'_>) -> Result<(), CommandError> {
    check_command(value, host).map(drop).map_err(|e| refusal(value, e))
}

/// A refusal of `value` with what its reply needs (SPEC §2.2).
fn refusal(value: &Value, error: ContractError) -> CommandError {
    let echo_version =
        value.get("protocolVersion").and_then(Value::as_str).filter(|s| is_major_minor(s)).unwrap_or("1.0").to_string();
    let request_id = value.get("requestId").and_then(Value::as_str).filter(|s| units_in(s, 128)).map(str::to_string);
    let close = error.code == Code::IncompatibleProtocol;
    CommandError {
        error,
        echo_version,
        request_id,
        session_id: value.get("sessionId").and_then(Value::as_str).filter(|s| units_in(s, 256)).map(str::to_string),
        close,
    }
}

/// The rules: the accepted version and the admitted descriptor.
fn check_command(value: &Value, host: &HostContext<'_>) -> Result<(Version, Option<Descriptor>), ContractError> {
    let obj = value.as_object().ok_or_else(|| err(Code::InvalidField, "command", "command must be a JSON object"))?;
    let version = route_version(obj.get("protocolVersion"))?;
    let mut descriptor = None;
    if version.major == 2 && obj.get("operation").and_then(Value::as_str) == Some("open") {
        descriptor = v2_open_prelude(obj, host)?;
    }
    check_envelope(obj)?;
    let operation = obj["operation"].as_str().unwrap_or_default();
    let empty = Map::new();
    let payload = obj["payload"].as_object().unwrap_or(&empty);
    check_payload(operation, payload, version.major, descriptor.is_some())?;
    // The schema must agree with the rules above.
    if let Some(v) = schema::confirm_accepted(Entry::Command, value) {
        return Err(err(Code::InvalidField, &v.dotted(""), "command violates the schema"));
    }
    Ok((version, descriptor))
}

/// Version routing exactly as Pi Daemon 0.3.3 (SPEC §2.1): `^2\.[0-9]+$` is v2 at once (no
/// length check); anything else takes the v1 path.
pub fn route_version(v: Option<&Value>) -> Result<Version, ContractError> {
    let field = "protocolVersion";
    if let Some(Value::String(s)) = v {
        if let Some(minor) = s.strip_prefix("2.") {
            if !minor.is_empty() && minor.bytes().all(|c| c.is_ascii_digit()) {
                return Ok(Version { text: s.clone(), major: 2 });
            }
        }
    }
    let s = v
        .and_then(Value::as_str)
        .filter(|s| units_in(s, 32))
        .ok_or_else(|| err(Code::InvalidField, field, "protocolVersion must be a string of 1-32 units"))?;
    if !is_major_minor(s) {
        return Err(err(Code::InvalidProtocolVersion, field, "protocolVersion must be MAJOR.MINOR"));
    }
    let major = s.split('.').next().unwrap_or_default().trim_start_matches('0');
    if major == "1" {
        return Ok(Version { text: s.to_string(), major: 1 });
    }
    Err(err(Code::IncompatibleProtocol, field, "protocol major version is not supported")
        .with_detail("supported", json!(SUPPORTED_VERSIONS))
        .with_detail("received", Value::String(s.to_string())))
}

/// The v2 `open` prelude (SPEC §3.2): payload, resources, the tools policy, then the
/// descriptor against the expected binding. `Ok(None)` when tools is `"none"` or absent.
fn v2_open_prelude(obj: &Map<String, Value>, host: &HostContext<'_>) -> Result<Option<Descriptor>, ContractError> {
    let payload = obj
        .get("payload")
        .and_then(Value::as_object)
        .ok_or_else(|| err(Code::InvalidField, "payload", "payload must be an object"))?;
    let resources = match payload.get("resources") {
        None => return Ok(None),
        Some(Value::Object(r)) => r,
        Some(_) => return Err(err(Code::InvalidField, "payload.resources", "resources must be an object")),
    };
    // When `resources` is present `tools` is required (Pi Daemon 0.3.3): missing is
    // `invalid_field`, like any value that is neither "none" nor a policy object.
    let tools = match resources.get("tools") {
        Some(Value::String(s)) if s == "none" => return Ok(None),
        Some(Value::Object(t)) => t,
        _ => {
            return Err(err(
                Code::InvalidField,
                "payload.resources.tools",
                "tools must be \"none\" or a host-adapter policy",
            ))
        }
    };
    if tools.keys().any(|k| k != "mode" && k != "descriptor") {
        return Err(err(
            Code::InvalidToolAdapterDescriptor,
            "payload.resources.tools",
            "the tools policy has only mode and descriptor",
        ));
    }
    if tools.get("mode").and_then(Value::as_str) != Some("host-adapter") {
        return Err(err(
            Code::UnsupportedResourcePolicy,
            "payload.resources.tools.mode",
            "tools mode must be host-adapter",
        ));
    }
    // The early envelope check fires only when `sessionId` is not a string or `generation` is
    // not a safe integer (|n| <= 2^53-1, as JavaScript's Number.isSafeInteger); a negative
    // generation is judged by check 8, then the envelope (Pi Daemon 0.3.3).
    let session_id = obj.get("sessionId").and_then(Value::as_str);
    let generation = obj.get("generation").and_then(safe_integer);
    let (Some(session_id), Some(generation)) = (session_id, generation) else {
        check_envelope(obj)?;
        return Err(err(Code::InvalidField, "sessionId", "sessionId and generation are required"));
    };
    let descriptor = tools
        .get("descriptor")
        .ok_or_else(|| err(Code::InvalidToolAdapterDescriptor, "descriptor", "the tools policy needs a descriptor"))?;
    let expected = ExpectedBinding { host_instance_id: host.host_instance_id, session_id, generation };
    admit_descriptor(descriptor, Some(&expected)).map(Some)
}

fn needs_session(op: &str) -> bool {
    !matches!(op, "handshake" | "status" | "drain")
}

/// Longest `sessionId`, in UTF-16 units.
pub const MAX_SESSION_ID_UNITS: usize = 256;
/// Longest `idempotencyKey`, in UTF-16 units.
pub const MAX_IDEMPOTENCY_KEY_UNITS: usize = 512;
/// The values of `payload.session.mode`.
pub const SESSION_MODES: [&str; 4] = ["new", "open", "continue", "memory"];

/// The envelope checks of SPEC §2.1 after the version: requestId, operation, payload,
/// sessionId, generation, idempotencyKey.
fn check_envelope(obj: &Map<String, Value>) -> Result<(), ContractError> {
    if !obj.get("requestId").and_then(Value::as_str).is_some_and(|s| units_in(s, 128)) {
        return Err(err(Code::InvalidField, "requestId", "requestId must be a string of 1-128 units"));
    }
    // A missing, non-string, empty or over-long operation is a malformed field; a well-formed
    // name outside the eleven is unknown (Pi Daemon 0.3.3).
    let op = obj
        .get("operation")
        .and_then(Value::as_str)
        .filter(|o| units_in(o, MAX_OPERATION_UNITS))
        .ok_or_else(|| err(Code::InvalidField, "operation", "operation must be a string of 1-32 units"))?;
    if !OPERATIONS.contains(&op) {
        return Err(err(Code::UnknownOperation, "operation", "operation is not one of the eleven"));
    }
    if !obj.get("payload").is_some_and(Value::is_object) {
        return Err(err(Code::InvalidField, "payload", "payload must be an object"));
    }
    let session_ok = |v: Option<&Value>| v.and_then(Value::as_str).is_some_and(|s| units_in(s, MAX_SESSION_ID_UNITS));
    if (needs_session(op) || (op == "status" && obj.contains_key("sessionId"))) && !session_ok(obj.get("sessionId")) {
        return Err(err(Code::InvalidField, "sessionId", "sessionId must be a string of 1-256 units"));
    }
    if needs_session(op) {
        let g = obj.get("generation").and_then(safe_integer);
        if !g.is_some_and(|g| g >= 0 && g as u64 <= MAX_SAFE_INTEGER) {
            return Err(err(Code::InvalidField, "generation", "generation must be an integer 0..2^53-1"));
        }
    }
    if matches!(op, "wake" | "steer" | "followUp")
        && !obj.get("idempotencyKey").and_then(Value::as_str).is_some_and(|s| units_in(s, MAX_IDEMPOTENCY_KEY_UNITS))
    {
        return Err(err(Code::InvalidField, "idempotencyKey", "idempotencyKey must be a string of 1-512 units"));
    }
    Ok(())
}

/// An optional string of 1..=max units. (Paths such as `cwd` are not required to be absolute
/// here: Pi Daemon 0.3.3's validator does not, and where a path leads is judged at dispatch.)
fn opt_string(p: &Map<String, Value>, key: &str, field: &str, max: usize) -> Result<(), ContractError> {
    match p.get(key) {
        None => Ok(()),
        Some(Value::String(s)) if units_in(s, max) => Ok(()),
        Some(_) => Err(err(Code::InvalidField, field, "must be a string within bounds")),
    }
}

fn opt_bool(p: &Map<String, Value>, key: &str, field: &str) -> Result<(), ContractError> {
    match p.get(key) {
        None | Some(Value::Bool(_)) => Ok(()),
        Some(_) => Err(err(Code::InvalidField, field, "must be a boolean")),
    }
}

fn check_payload(op: &str, p: &Map<String, Value>, major: u8, has_descriptor: bool) -> Result<(), ContractError> {
    match op {
        "open" => check_open_payload(p, major, has_descriptor),
        "wake" => {
            if !p.get("prompt").and_then(Value::as_str).is_some_and(|s| units_in(s, MAX_PROMPT_UNITS)) {
                return Err(err(Code::InvalidField, "payload.prompt", "prompt must be a string of 1-262144 units"));
            }
            opt_string(p, "source", "payload.source", 128)?;
            opt_bool(p, "waitForTerminal", "payload.waitForTerminal")
        }
        "steer" | "followUp" => {
            if !p.get("message").and_then(Value::as_str).is_some_and(|s| units_in(s, MAX_PROMPT_UNITS)) {
                return Err(err(Code::InvalidField, "payload.message", "message must be a string of 1-262144 units"));
            }
            Ok(())
        }
        "close" => opt_bool(p, "retainSession", "payload.retainSession"),
        "drain" => match p.get("timeoutMs") {
            None => Ok(()),
            Some(v) if safe_integer(v).is_some_and(|n| (0..=86_400_000).contains(&n)) => Ok(()),
            Some(_) => Err(err(Code::InvalidField, "payload.timeoutMs", "timeoutMs must be an integer 0-86400000")),
        },
        _ => Ok(()),
    }
}

fn check_open_payload(p: &Map<String, Value>, major: u8, has_descriptor: bool) -> Result<(), ContractError> {
    if !p.get("cwd").and_then(Value::as_str).is_some_and(|s| units_in(s, 4096)) {
        return Err(err(Code::InvalidField, "payload.cwd", "cwd must be a string of 1-4096 units"));
    }
    opt_string(p, "name", "payload.name", 128)?;
    opt_string(p, "agentDir", "payload.agentDir", 4096)?;
    let session = p
        .get("session")
        .and_then(Value::as_object)
        .ok_or_else(|| err(Code::InvalidField, "payload.session", "session must be an object"))?;
    let mode = session.get("mode").and_then(Value::as_str).filter(|m| SESSION_MODES.contains(m)).ok_or_else(|| {
        err(Code::InvalidField, "payload.session.mode", "session mode must be new, open, continue or memory")
    })?;
    opt_string(session, "path", "payload.session.path", 4096)?;
    opt_string(session, "sessionDir", "payload.session.sessionDir", 4096)?;
    if mode == "open" && !session.contains_key("path") {
        return Err(err(Code::InvalidField, "payload.session.path", "session path is required for mode open"));
    }
    if let Some(model) = p.get("model") {
        let m = model.as_object().ok_or_else(|| err(Code::InvalidField, "payload.model", "model must be an object"))?;
        for (key, max) in [("provider", 128), ("id", 256)] {
            if !m.get(key).and_then(Value::as_str).is_some_and(|s| units_in(s, max)) {
                let field = format!("payload.model.{key}");
                return Err(err(Code::InvalidField, &field, "must be a string within bounds"));
            }
        }
        match m.get("thinkingLevel") {
            None => {}
            Some(Value::String(s)) if units_in(s, 16) && THINKING_LEVELS.contains(&s.as_str()) => {}
            Some(_) => {
                return Err(err(
                    Code::InvalidField,
                    "payload.model.thinkingLevel",
                    "thinkingLevel must be one of off, minimal, low, medium, high, xhigh, max",
                ))
            }
        }
    }
    let resources = match p.get("resources") {
        None => return Ok(()),
        Some(Value::Object(r)) => r,
        Some(_) => return Err(err(Code::InvalidField, "payload.resources", "resources must be an object")),
    };
    // When present, all six policies are required (Pi Daemon 0.3.3, SPEC §3.1): a member
    // missing, not a string, empty or over 16 units is `invalid_field`; a well-formed string
    // other than "none" is `unsupported_resource_policy`. The v2 `tools` member was judged by
    // the prelude (`"none"` or an admitted policy object).
    for name in RESOURCES {
        if name == "tools" && major == 2 {
            debug_assert!(resources.get("tools").is_some_and(|t| t == "none" || (t.is_object() && has_descriptor)));
            continue;
        }
        let field = format!("payload.resources.{name}");
        match resources.get(name) {
            Some(Value::String(s)) if units_between(s, 1, MAX_RESOURCE_UNITS) => {
                if s != "none" {
                    return Err(err(Code::UnsupportedResourcePolicy, &field, "this resource policy must be \"none\""));
                }
            }
            _ => return Err(err(Code::InvalidField, &field, "resource policy must be a string of 1-16 units")),
        }
    }
    match resources.get("systemPrompt") {
        None => {}
        Some(Value::String(s)) if units_between(s, 0, MAX_PROMPT_UNITS) => {}
        Some(_) => {
            return Err(err(
                Code::InvalidField,
                "payload.resources.systemPrompt",
                "systemPrompt must be a string of at most 262144 units",
            ))
        }
    }
    Ok(())
}

/// Whether `s` has min..=max UTF-16 units.
fn units_between(s: &str, min: usize, max: usize) -> bool {
    (min..=max).contains(&utf16_len(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOST: HostContext<'static> = HostContext { host_instance_id: "host-019f" };

    #[test]
    fn admission_codes_are_the_ten_descriptor_codes() {
        assert_eq!(ADMISSION_CODES.len(), 10);
        assert_eq!(ADMISSION_CODES[0], Code::InvalidToolAdapterDescriptor);
        assert_eq!(ADMISSION_CODES[9], Code::InvalidToolAdapterLimit);
        assert!(ADMISSION_CODES
            .iter()
            .all(|c| c.as_str().contains("tool_adapter") || *c == Code::UnsupportedToolOperation));
        assert!(!ADMISSION_CODES.contains(&Code::InvalidField));
    }

    fn base(name: &str) -> Value {
        let path = format!("{}/vectors/bases/{name}.json", env!("CARGO_MANIFEST_DIR"));
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    #[test]
    fn worked_example_open_is_admitted() {
        let c = parse_command(&base("open-v2"), &HOST).unwrap();
        let d = c.descriptor.unwrap();
        assert_eq!((d.bind_bytes(), d.bound_bytes()), (492, 431));
        assert_eq!(c.version.text, "2.0");
    }

    #[test]
    fn routing() {
        let r = |s: &str| route_version(Some(&Value::String(s.into())));
        assert_eq!(r("2.7").unwrap().major, 2);
        assert_eq!(r(&format!("2.{}", "9".repeat(60))).unwrap().major, 2);
        assert_eq!(r("01.0").unwrap().major, 1);
        assert_eq!(r("02.0").unwrap_err().code, Code::IncompatibleProtocol);
        assert_eq!(r("3.0").unwrap_err().code, Code::IncompatibleProtocol);
        assert_eq!(r("2").unwrap_err().code, Code::InvalidProtocolVersion);
        assert_eq!(r(&format!("1.{}", "0".repeat(31))).unwrap_err().code, Code::InvalidField);
    }

    #[test]
    fn incompatible_closes_and_echoes() {
        let mut c = base("handshake");
        c["protocolVersion"] = "3.0".into();
        let e = parse_command(&c, &HOST).unwrap_err();
        assert!(e.close);
        assert_eq!(e.echo_version, "3.0");
        assert_eq!(e.error.details["received"], "3.0");
    }
}
