//! Host records: responses and events (SPEC §2.2, §2.3), and handshake data (SPEC §2.4).

use serde::Deserialize;
use serde_json::{Map, Value};

use super::error::{Code, ContractError};
use super::schema::{self, Entry, Violation};
use super::text::is_major_minor;
use super::types::protocol_v2 as v2;

fn first(code: Code, v: Option<Violation>) -> Result<(), ContractError> {
    match v {
        None => Ok(()),
        Some(v) => {
            let field = v.dotted("");
            let field = if field.is_empty() { "record".to_string() } else { field };
            Err(ContractError::new(code, field, format!("record violates the schema ({})", v.keyword)))
        }
    }
}

/// Judge a response record: the schema branch chosen by `ok`, so the field is precise.
pub fn validate_response(v: &Value) -> Result<(), ContractError> {
    let code = Code::InvalidResponse;
    let obj = v.as_object().ok_or_else(|| ContractError::new(code, "record", "response must be an object"))?;
    if !obj.get("protocolVersion").and_then(Value::as_str).is_some_and(is_major_minor) {
        return Err(ContractError::new(code, "protocolVersion", "protocolVersion must be MAJOR.MINOR"));
    }
    let entry = match obj.get("ok") {
        Some(Value::Bool(true)) => Entry::ResponseSuccess,
        Some(Value::Bool(false)) => Entry::ResponseFailure,
        _ => return Err(ContractError::new(code, "ok", "ok must be a boolean")),
    };
    if entry == Entry::ResponseSuccess && obj.contains_key("error") {
        return Err(ContractError::new(code, "error", "a successful response carries no error"));
    }
    if entry == Entry::ResponseFailure && obj.contains_key("data") {
        return Err(ContractError::new(code, "data", "a failed response carries no data"));
    }
    first(code, schema::first_violation(entry, v))
}

/// Judge an event record.
pub fn validate_event(v: &Value) -> Result<(), ContractError> {
    first(Code::InvalidEvent, schema::first_violation(Entry::Event, v))
}

/// Judge handshake response data (the `data` of a handshake response).
pub fn validate_handshake_data(v: &Value) -> Result<(), ContractError> {
    first(Code::InvalidResponse, schema::first_violation(Entry::HandshakeData, v))
}

/// A host record the contract accepted, as its generated type (SPEC §2.2, §2.3).
#[derive(Clone, Debug)]
pub enum HostRecord {
    /// `kind:"response"`, `ok:true`.
    Success(v2::ResponseSuccess),
    /// `kind:"response"`, `ok:false`.
    Failure(v2::ResponseFailure),
    /// `kind:"event"`.
    Event(v2::Event),
}

/// Decode a record the schema accepted. The schema's `integer` admits an integral float (`3.0`)
/// where the generated type holds a Rust integer, so such a record is decoded with its integral
/// floats written as integers (`wire::normalize_numbers`), as the commands are.
fn decode<T: for<'de> Deserialize<'de>>(code: Code, v: &Value) -> Result<T, ContractError> {
    T::deserialize(v)
        .or_else(|_| {
            let mut n = v.clone();
            crate::wire::normalize_numbers(&mut n);
            T::deserialize(n)
        })
        .map_err(|_| {
            ContractError::new(code, "record", "a record the schema accepts does not decode into the generated type")
        })
}

/// Judge a daemon's record (a response by `validate_response`, an event by `validate_event`)
/// and decode it into the generated type.
pub fn parse_host_record(v: &Value) -> Result<HostRecord, ContractError> {
    match v.get("kind").and_then(Value::as_str) {
        Some("response") => {
            validate_response(v)?;
            let code = Code::InvalidResponse;
            if v.get("ok") == Some(&Value::Bool(true)) {
                decode(code, v).map(HostRecord::Success)
            } else {
                decode(code, v).map(HostRecord::Failure)
            }
        }
        Some("event") => {
            validate_event(v)?;
            decode(Code::InvalidEvent, v).map(HostRecord::Event)
        }
        _ => Err(ContractError::new(Code::InvalidResponse, "kind", "a record that is neither a response nor an event")),
    }
}

/// Judge handshake response data and decode it into the generated [`v2::HandshakeData`].
pub fn parse_handshake_data(v: &Value) -> Result<v2::HandshakeData, ContractError> {
    validate_handshake_data(v)?;
    decode(Code::InvalidResponse, v)
}

impl HostRecord {
    /// `kind`.
    pub fn kind(&self) -> &'static str {
        match self {
            HostRecord::Event(_) => "event",
            _ => "response",
        }
    }

    /// `requestId` (an event's when it has one).
    pub fn request_id(&self) -> Option<&str> {
        match self {
            HostRecord::Success(r) => Some(r.request_id.as_str()),
            HostRecord::Failure(r) => Some(r.request_id.as_str()),
            HostRecord::Event(e) => e.request_id.as_ref().map(|r| r.as_str()),
        }
    }

    /// `ok` of a response.
    pub fn ok(&self) -> Option<bool> {
        match self {
            HostRecord::Success(_) => Some(true),
            HostRecord::Failure(_) => Some(false),
            HostRecord::Event(_) => None,
        }
    }

    /// The `error` of a failed response.
    pub fn error(&self) -> Option<&v2::ErrorBody> {
        match self {
            HostRecord::Failure(r) => Some(&r.error),
            _ => None,
        }
    }

    /// `data` of a successful response or an event (open objects in the schema).
    pub fn data(&self) -> Option<&Map<String, Value>> {
        match self {
            HostRecord::Success(r) => Some(&r.data),
            HostRecord::Event(e) => Some(&e.data),
            HostRecord::Failure(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn an_integral_float_the_schema_accepts_also_decodes() {
        let event = json!({"protocolVersion": "2.0", "kind": "event", "event": "opened", "hostInstanceId": "h",
            "sessionId": "s", "generation": 3.0, "sequence": 1.0, "data": {}});
        assert!(validate_event(&event).is_ok(), "the schema's integer admits 3.0");
        let r = parse_host_record(&event).expect("a record the contract accepts decodes");
        assert_eq!(r.kind(), "event");
        let failure = json!({"protocolVersion": "2.0", "kind": "response", "requestId": "r", "hostInstanceId": "h",
            "ok": false, "sequence": 2.0, "error": {"code": "busy", "message": "m", "retryable": true}});
        assert!(validate_response(&failure).is_ok());
        assert!(matches!(parse_host_record(&failure), Ok(HostRecord::Failure(_))));
        let fraction = json!({"protocolVersion": "2.0", "kind": "event", "event": "opened", "hostInstanceId": "h",
            "sessionId": "s", "generation": 3.5, "sequence": 1, "data": {}});
        let e = parse_host_record(&fraction).expect_err("3.5 is no generation");
        assert_eq!((e.code, e.field()), (Code::InvalidEvent, "generation"), "refused by the schema, not the decode");
    }
}
