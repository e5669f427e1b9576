//! The typed error of the contract layer and the catalogue of protocol error codes.

use serde_json::{Map, Value};

macro_rules! codes {
    ($( $(#[$doc:meta])* $variant:ident = $text:literal ),* $(,)?) => {
        /// Every error code the contract layer can produce (SPEC §2, §3, §4, §5).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Code {
            $( $(#[$doc])* $variant, )*
        }

        impl Code {
            /// The code as it appears on the wire.
            pub fn as_str(self) -> &'static str {
                match self { $( Code::$variant => $text, )* }
            }

            /// Every code, in declaration order.
            pub const ALL: &'static [Code] = &[ $( Code::$variant, )* ];

            /// Parse a wire code.
            pub fn from_wire(s: &str) -> Option<Code> {
                match s { $( $text => Some(Code::$variant), )* _ => None }
            }
        }
    };
}

codes! {
    /// A line that is not one strict JSON text (duplicate keys, BOM, trailing bytes).
    InvalidJson = "invalid_json",
    /// A line that is not UTF-8.
    InvalidUtf8 = "invalid_utf8",
    /// A line over the byte limit.
    LineTooLarge = "line_too_large",
    /// An envelope or payload field with the wrong type, length or value.
    InvalidField = "invalid_field",
    /// A `protocolVersion` string that is not `MAJOR.MINOR`.
    InvalidProtocolVersion = "invalid_protocol_version",
    /// A major version the host does not speak.
    IncompatibleProtocol = "incompatible_protocol",
    /// An operation outside the eleven.
    UnknownOperation = "unknown_operation",
    /// A resource policy other than `"none"` (or `host-adapter` tools in v2).
    UnsupportedResourcePolicy = "unsupported_resource_policy",
    /// Descriptor check 1, or a malformed tools policy object.
    InvalidToolAdapterDescriptor = "invalid_tool_adapter_descriptor",
    /// A descriptor field with the wrong type or length.
    InvalidToolAdapterField = "invalid_tool_adapter_field",
    /// A descriptor `protocolVersion` other than `"1.0"`.
    UnsupportedToolAdapterVersion = "unsupported_tool_adapter_version",
    /// `adapterId` / `adapterVersion` failing its pattern.
    InvalidToolAdapterIdentity = "invalid_tool_adapter_identity",
    /// Descriptor check 5.
    InvalidToolAdapterEndpoint = "invalid_tool_adapter_endpoint",
    /// Descriptor check 6 (shape of the binding object).
    InvalidToolAdapterBinding = "invalid_tool_adapter_binding",
    /// Descriptor check 7.
    InvalidToolAdapterCapability = "invalid_tool_adapter_capability",
    /// Descriptor check 8.
    ToolAdapterBindingMismatch = "tool_adapter_binding_mismatch",
    /// Descriptor check 9.
    UnsupportedToolOperation = "unsupported_tool_operation",
    /// Descriptor checks 10 and 11.
    InvalidToolAdapterLimit = "invalid_tool_adapter_limit",
    /// A tool path refused by the daemon side (SPEC §5.1).
    InvalidToolAdapterPath = "invalid_tool_adapter_path",
    /// An adapter frame that breaks the frame protocol (SPEC §4.3).
    AdapterProtocolInvalid = "adapter_protocol_invalid",
    /// The capability handle appeared where it must not (SPEC §4.3).
    AdapterSecretReflected = "adapter_secret_reflected",
    /// A result or acknowledgement that matches no request (SPEC §4.3).
    AdapterResponseMismatch = "adapter_response_mismatch",
    /// Adapter reply: the operation is not granted by the bind.
    OperationNotGranted = "operation_not_granted",
    /// Adapter reply: a malformed payload.
    InvalidRequest = "invalid_request",
    /// Adapter reply: a path refused by SPEC §5.1.
    InvalidPath = "invalid_path",
    /// A response record that breaks the schema.
    InvalidResponse = "invalid_response",
    /// An event record that breaks the schema.
    InvalidEvent = "invalid_event",
}

impl std::fmt::Display for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A refusal by the contract: the protocol's `{code, message, retryable, details}`.
///
/// Messages and details are built only from field names, limits and type names, never from
/// the values of the input, so no capability handle or file content can reach them. Key
/// names taken from the input are reported only when they are short and plain (see
/// [`safe_key`]).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ContractError {
    /// The protocol error code.
    pub code: Code,
    /// A short, content-free explanation.
    pub message: String,
    /// Whether the same request may succeed later (false for every validation error).
    pub retryable: bool,
    /// Typed details; always carries `field`.
    pub details: Map<String, Value>,
}

impl ContractError {
    /// An error about `field`.
    pub fn new(code: Code, field: impl Into<String>, message: impl Into<String>) -> Self {
        let mut details = Map::new();
        details.insert("field".into(), Value::String(field.into()));
        Self { code, message: message.into(), retryable: false, details }
    }

    /// Add one detail.
    pub fn with_detail(mut self, key: &str, value: Value) -> Self {
        self.details.insert(key.into(), value);
        self
    }

    /// The `details.field` of this error.
    pub fn field(&self) -> &str {
        self.details.get("field").and_then(Value::as_str).unwrap_or("")
    }

    /// For people: the code, the member it names and the message
    /// (`invalid_tool_adapter_descriptor at member "descriptor.x": descriptor has an unknown key`).
    pub fn describe(&self) -> String {
        match self.field() {
            "" => format!("{}: {}", self.code, self.message),
            f => format!("{} at member {f:?}: {}", self.code, self.message),
        }
    }

    /// The `{code, message, retryable, details}` body as JSON.
    pub fn to_body(&self) -> Value {
        serde_json::json!({
            "code": self.code.as_str(),
            "message": self.message,
            "retryable": self.retryable,
            "details": self.details,
        })
    }
}

/// A key name from the input, fit to appear in a field path or message.
///
/// A capability handle is at least 32 characters, so a key of at most 31 plain characters
/// cannot contain one; anything longer or stranger is reported as `<key>`.
pub fn safe_key(key: &str) -> &str {
    if !key.is_empty()
        && key.len() <= 31
        && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.')
    {
        key
    } else {
        "<key>"
    }
}

/// `prefix.key` with the key made safe.
pub fn join_field(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        safe_key(key).to_string()
    } else {
        format!("{prefix}.{}", safe_key(key))
    }
}
