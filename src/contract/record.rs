//! Host records: responses and events (SPEC §2.2, §2.3), and handshake data (SPEC §2.4).

use serde_json::Value;

use super::error::{Code, ContractError};
use super::schema::{self, Entry, Violation};
use super::text::is_major_minor;

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
