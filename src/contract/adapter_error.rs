//! The closed set of adapter error codes (SPEC §5.3) and the error body an adapter sends.

use serde_json::{json, Value};

use crate::contract::types::tool_adapter::AdapterErrorBody;

macro_rules! adapter_codes {
    ($( $(#[$doc:meta])* $variant:ident = $text:literal, $retry:literal ),* $(,)?) => {
        /// An adapter's `result` / `aborted` error code.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum AdapterCode {
            $( $(#[$doc])* $variant, )*
        }

        impl AdapterCode {
            /// The wire code.
            pub fn as_str(self) -> &'static str {
                match self { $( AdapterCode::$variant => $text, )* }
            }
            /// Whether a retry may succeed (`busy`, `io_error`).
            pub fn retryable(self) -> bool {
                match self { $( AdapterCode::$variant => $retry, )* }
            }
            /// Every code.
            pub const ALL: &'static [AdapterCode] = &[ $( AdapterCode::$variant, )* ];
            /// Parse a wire code.
            pub fn from_wire(s: &str) -> Option<Self> {
                match s { $( $text => Some(AdapterCode::$variant), )* _ => None }
            }
        }
    };
}

adapter_codes! {
    /// The path breaks SPEC §5.1 (or a component is over 255 bytes).
    InvalidPath = "invalid_path", false,
    /// The payload is malformed.
    InvalidRequest = "invalid_request", false,
    /// The operation is not granted by the bind.
    OperationNotGranted = "operation_not_granted", false,
    /// Nothing at the path (or a missing parent, or a refused create).
    NotFound = "not_found", false,
    /// A directory was required.
    NotADirectory = "not_a_directory", false,
    /// A regular file was required.
    NotAFile = "not_a_file", false,
    /// `overwrite:false` and the file exists.
    AlreadyExists = "already_exists", false,
    /// A symlink in the path.
    SymlinkRefused = "symlink_refused", false,
    /// A FIFO, socket or device.
    UnsupportedFileType = "unsupported_file_type", false,
    /// Bytes that are not UTF-8 where text is required.
    NotUtf8 = "not_utf8", false,
    /// `offset` inside a multi-byte character.
    InvalidOffset = "invalid_offset", false,
    /// `expectedDigest` does not match the current file.
    DigestMismatch = "digest_mismatch", false,
    /// An edit's `oldText` does not occur.
    EditNotFound = "edit_not_found", false,
    /// An edit's `oldText` occurs more than once.
    EditAmbiguous = "edit_ambiguous", false,
    /// The idempotency key was used with another operation or payload.
    IdempotencyConflict = "idempotency_conflict", false,
    /// Not even one entry, match or character fits the response budget.
    ResponseTooLarge = "response_too_large", false,
    /// The result would contain the capability handle.
    CapabilityInContent = "capability_in_content", false,
    /// The OS refused access.
    PermissionDenied = "permission_denied", false,
    /// Abort of a request the adapter does not know.
    UnknownRequest = "unknown_request", false,
    /// Concurrency and queue are full.
    Busy = "busy", true,
    /// An I/O failure that changed nothing.
    IoError = "io_error", true,
}

/// An adapter refusal: a code and a short, content-free message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}: {message}", code.as_str())]
pub struct AdapterError {
    /// The code.
    pub code: AdapterCode,
    /// At most a sentence; never file content, a handle or an absolute path.
    pub message: String,
}

impl AdapterError {
    /// A refusal.
    pub fn new(code: AdapterCode, message: impl Into<String>) -> Self {
        Self { code, message: message.into() }
    }

    /// The closed `{code, message, retryable}` body.
    pub fn body(&self) -> Value {
        json!({"code": self.code.as_str(), "message": self.message, "retryable": self.code.retryable()})
    }
}

impl AdapterCode {
    /// Whether `retryable` is the flag this code must carry (SPEC §5.3, PC-5.3.errors): `busy`
    /// and `io_error` true, every other code false. `io_error` may also carry false: it is
    /// retryable "only when nothing was changed", so an adapter that changed something says so.
    pub fn allows_retryable(self, retryable: bool) -> bool {
        retryable == self.retryable() || self == AdapterCode::IoError
    }
}

/// An adapter's error body (`error` of a `result` or `aborted`) against the closed code set of
/// SPEC §5.3 and each code's `retryable` flag; the shape itself is
/// [`crate::contract::frame::check_error_body`]. An adapter obligation (PC-5.3.errors), so a
/// daemon does not apply it (Pi Daemon 0.3.3 accepts any well-formed code); the adapter runner does.
pub fn check_adapter_error_code(body: &AdapterErrorBody, prefix: &str) -> Result<(), crate::contract::ContractError> {
    use crate::contract::{Code, ContractError};
    let Some(code) = AdapterCode::from_wire(&body.code) else {
        return Err(ContractError::new(
            Code::AdapterProtocolInvalid,
            format!("{prefix}.code"),
            "error code is not one of the closed set of adapter error codes".to_string(),
        ));
    };
    if code.allows_retryable(body.retryable) {
        Ok(())
    } else {
        Err(ContractError::new(
            Code::AdapterProtocolInvalid,
            format!("{prefix}.retryable"),
            format!("{} must carry retryable:{}", code.as_str(), code.retryable()),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(v: Value) -> AdapterErrorBody {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn each_code_carries_its_retryable_flag() {
        for c in AdapterCode::ALL {
            let good = json!({"code": c.as_str(), "message": "m", "retryable": c.retryable()});
            assert!(check_adapter_error_code(&body(good), "error").is_ok(), "{}", c.as_str());
            let flipped = json!({"code": c.as_str(), "message": "m", "retryable": !c.retryable()});
            let r = check_adapter_error_code(&body(flipped), "error");
            if *c == AdapterCode::IoError {
                assert!(r.is_ok());
            } else {
                assert_eq!(r.unwrap_err().field(), "error.retryable", "{}", c.as_str());
            }
        }
        let unknown = json!({"code": "no_such_code", "message": "m", "retryable": false});
        assert_eq!(check_adapter_error_code(&body(unknown), "error").unwrap_err().field(), "error.code");
        assert!(AdapterCode::Busy.retryable() && !AdapterCode::NotFound.retryable());
    }
}
