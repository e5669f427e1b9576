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

fn decode<T: for<'de> Deserialize<'de>>(code: Code, v: &Value) -> Result<T, ContractError> {
    T::deserialize(v).map_err(|_| {
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
