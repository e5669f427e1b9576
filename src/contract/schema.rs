//! The two JSON Schemas, embedded at compile time and compiled once per process.

use std::sync::OnceLock;

use jsonschema::Validator;
use serde_json::Value;

/// `schemas/tool-adapter.schema.json`, as built into this binary.
pub const TOOL_ADAPTER_SCHEMA: &str = include_str!("../../schemas/tool-adapter.schema.json");
/// `schemas/protocol-v2.schema.json`, as built into this binary.
pub const PROTOCOL_V2_SCHEMA: &str = include_str!("../../schemas/protocol-v2.schema.json");

/// A named definition of one of the schemas that documents are validated against.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Entry {
    /// `tool-adapter#/$defs/HostToolAdapterDescriptor`
    Descriptor,
    /// `tool-adapter#/$defs/AdapterFrame`
    Frame,
    /// `protocol-v2#/$defs/Command`
    Command,
    /// `protocol-v2#/$defs/ResponseSuccess`
    ResponseSuccess,
    /// `protocol-v2#/$defs/ResponseFailure`
    ResponseFailure,
    /// `protocol-v2#/$defs/Response`
    Response,
    /// `protocol-v2#/$defs/Event`
    Event,
    /// `protocol-v2#/$defs/HandshakeData`
    HandshakeData,
}

impl Entry {
    /// Every entry point.
    pub const ALL: &'static [Entry] = &[
        Entry::Descriptor,
        Entry::Frame,
        Entry::Command,
        Entry::ResponseSuccess,
        Entry::ResponseFailure,
        Entry::Response,
        Entry::Event,
        Entry::HandshakeData,
    ];

    fn source(self) -> (&'static str, &'static str) {
        match self {
            Entry::Descriptor => (TOOL_ADAPTER_SCHEMA, "HostToolAdapterDescriptor"),
            Entry::Frame => (TOOL_ADAPTER_SCHEMA, "AdapterFrame"),
            Entry::Command => (PROTOCOL_V2_SCHEMA, "Command"),
            Entry::ResponseSuccess => (PROTOCOL_V2_SCHEMA, "ResponseSuccess"),
            Entry::ResponseFailure => (PROTOCOL_V2_SCHEMA, "ResponseFailure"),
            Entry::Response => (PROTOCOL_V2_SCHEMA, "Response"),
            Entry::Event => (PROTOCOL_V2_SCHEMA, "Event"),
            Entry::HandshakeData => (PROTOCOL_V2_SCHEMA, "HandshakeData"),
        }
    }

    fn index(self) -> usize {
        Entry::ALL.iter().position(|e| *e == self).unwrap_or(0)
    }
}

/// One schema violation: where in the instance, and which keyword refused it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// JSON Pointer into the instance (`/limits/maxRequestBytes`).
    pub pointer: String,
    /// The failing keyword (`maximum`, `additionalProperties`, …).
    pub keyword: String,
    /// For `required` and `additionalProperties`: the key concerned, so the field can name it.
    pub key: Option<String>,
}

impl Violation {
    /// The pointer as a dotted field path (`limits.maxRequestBytes`).
    pub fn dotted(&self, prefix: &str) -> String {
        let mut out = prefix.to_string();
        for seg in self.pointer.split('/').skip(1) {
            let seg = seg.replace("~1", "/").replace("~0", "~");
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(crate::contract::error::safe_key(&seg));
        }
        if let Some(k) = &self.key {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(crate::contract::error::safe_key(k));
        }
        out
    }
}

fn compiled() -> &'static Vec<Validator> {
    static CELL: OnceLock<Vec<Validator>> = OnceLock::new();
    CELL.get_or_init(|| {
        Entry::ALL
            .iter()
            .map(|e| {
                let (text, def) = e.source();
                let mut root: Value = serde_json::from_str(text).expect("embedded schema is valid JSON");
                if let Value::Object(m) = &mut root {
                    m.remove("oneOf");
                    m.insert("$ref".into(), Value::String(format!("#/$defs/{def}")));
                }
                jsonschema::draft202012::options()
                    .should_validate_formats(false)
                    .build(&root)
                    .expect("embedded schema compiles")
            })
            .collect()
    })
}

/// Validate `instance` against one entry point; every violation, in the validator's order.
pub fn violations(entry: Entry, instance: &Value) -> Vec<Violation> {
    compiled()[entry.index()]
        .iter_errors(instance)
        .map(|e| {
            let key = match e.kind() {
                jsonschema::error::ValidationErrorKind::Required { property } => property.as_str().map(str::to_string),
                jsonschema::error::ValidationErrorKind::AdditionalProperties { unexpected } => {
                    unexpected.first().cloned()
                }
                _ => None,
            };
            Violation { pointer: e.instance_path().as_str().to_string(), keyword: e.kind().keyword().to_string(), key }
        })
        .collect()
}

/// Whether `instance` is valid under one entry point.
pub fn is_valid(entry: Entry, instance: &Value) -> bool {
    compiled()[entry.index()].is_valid(instance)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_entry_compiles() {
        for e in Entry::ALL {
            let _ = violations(*e, &Value::Null);
        }
    }
}
