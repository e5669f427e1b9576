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

fn compile(text: &str, def: &str) -> Validator {
    let mut root: Value = serde_json::from_str(text).expect("embedded schema is valid JSON");
    if let Value::Object(m) = &mut root {
        m.remove("oneOf");
        m.insert("$ref".into(), Value::String(format!("#/$defs/{def}")));
    }
    jsonschema::draft202012::options().should_validate_formats(false).build(&root).expect("embedded schema compiles")
}

fn compiled() -> &'static Vec<Validator> {
    static CELL: OnceLock<Vec<Validator>> = OnceLock::new();
    CELL.get_or_init(|| {
        Entry::ALL
            .iter()
            .map(|e| {
                let (text, def) = e.source();
                compile(text, def)
            })
            .collect()
    })
}

/// The branches of the entry points that are a `oneOf` of closed objects told apart by
/// single-value discriminators (`kind`, `operation`, `ok`, `aborted`): a document that claims
/// one branch can only ever match that branch, so validating the branch alone gives the
/// `oneOf`'s verdict without trying every other branch.
const BRANCHES: &[(Entry, &str)] = &[
    (Entry::Frame, "BindFrame"),
    (Entry::Frame, "BoundFrame"),
    (Entry::Frame, "InvokeFsList"),
    (Entry::Frame, "InvokeFsStat"),
    (Entry::Frame, "InvokeFsRead"),
    (Entry::Frame, "InvokeFsSearch"),
    (Entry::Frame, "InvokeFsWrite"),
    (Entry::Frame, "InvokeFsEdit"),
    (Entry::Frame, "ResultFsList"),
    (Entry::Frame, "ResultFsStat"),
    (Entry::Frame, "ResultFsRead"),
    (Entry::Frame, "ResultFsSearch"),
    (Entry::Frame, "ResultFsWrite"),
    (Entry::Frame, "ResultFsEdit"),
    (Entry::Frame, "ResultError"),
    (Entry::Frame, "AbortFrame"),
    (Entry::Frame, "AbortedTrue"),
    (Entry::Frame, "AbortedFalse"),
    (Entry::Frame, "RevokeFrame"),
    (Entry::Frame, "RevokedFrame"),
    (Entry::Command, "HandshakeCommand"),
    (Entry::Command, "OpenCommand"),
    (Entry::Command, "WakeCommand"),
    (Entry::Command, "SteerCommand"),
    (Entry::Command, "FollowUpCommand"),
    (Entry::Command, "StatusCommand"),
    (Entry::Command, "AbortCommand"),
    (Entry::Command, "AttachCommand"),
    (Entry::Command, "DetachCommand"),
    (Entry::Command, "CloseCommand"),
    (Entry::Command, "DrainCommand"),
];

fn branches() -> &'static Vec<Validator> {
    static CELL: OnceLock<Vec<Validator>> = OnceLock::new();
    CELL.get_or_init(|| BRANCHES.iter().map(|(e, def)| compile(e.source().0, def)).collect())
}

/// The `$defs` branch of `entry` that `instance` claims by its discriminators, if any.
pub fn branch_of(entry: Entry, instance: &Value) -> Option<&'static str> {
    let s = |k: &str| instance.get(k).and_then(Value::as_str);
    let name = match entry {
        Entry::Frame => match (s("kind")?, s("operation")) {
            ("bind", _) => "BindFrame",
            ("bound", _) => "BoundFrame",
            ("abort", _) => "AbortFrame",
            ("revoke", _) => "RevokeFrame",
            ("revoked", _) => "RevokedFrame",
            ("aborted", _) => match instance.get("aborted")? {
                Value::Bool(true) => "AbortedTrue",
                Value::Bool(false) => "AbortedFalse",
                _ => return None,
            },
            ("result", op) => match (instance.get("ok")?, op?) {
                (Value::Bool(false), _) => "ResultError",
                (Value::Bool(true), "fs.list") => "ResultFsList",
                (Value::Bool(true), "fs.stat") => "ResultFsStat",
                (Value::Bool(true), "fs.read") => "ResultFsRead",
                (Value::Bool(true), "fs.search") => "ResultFsSearch",
                (Value::Bool(true), "fs.write") => "ResultFsWrite",
                (Value::Bool(true), "fs.edit") => "ResultFsEdit",
                _ => return None,
            },
            ("invoke", Some("fs.list")) => "InvokeFsList",
            ("invoke", Some("fs.stat")) => "InvokeFsStat",
            ("invoke", Some("fs.read")) => "InvokeFsRead",
            ("invoke", Some("fs.search")) => "InvokeFsSearch",
            ("invoke", Some("fs.write")) => "InvokeFsWrite",
            ("invoke", Some("fs.edit")) => "InvokeFsEdit",
            _ => return None,
        },
        Entry::Command => match s("operation")? {
            "handshake" => "HandshakeCommand",
            "open" => "OpenCommand",
            "wake" => "WakeCommand",
            "steer" => "SteerCommand",
            "followUp" => "FollowUpCommand",
            "status" => "StatusCommand",
            "abort" => "AbortCommand",
            "attach" => "AttachCommand",
            "detach" => "DetachCommand",
            "close" => "CloseCommand",
            "drain" => "DrainCommand",
            _ => return None,
        },
        _ => return None,
    };
    Some(name)
}

/// The first violation of `instance` under `entry`, or `None` when it is valid. The verdict is
/// exactly [`violations`]'s; valid documents (the common case) are judged by the one branch
/// they claim (see [`branch_of`]) with a short-circuiting check, and the full, slower report is
/// computed only for a refusal.
pub fn first_violation(entry: Entry, instance: &Value) -> Option<Violation> {
    let fast = match branch_of(entry, instance) {
        Some(name) => BRANCHES
            .iter()
            .position(|(e, d)| *e == entry && *d == name)
            .is_some_and(|i| branches()[i].is_valid(instance)),
        None => compiled()[entry.index()].is_valid(instance),
    };
    if fast {
        return None;
    }
    violations(entry, instance).into_iter().next()
}

thread_local! {
    static CONFIRM_ACCEPTED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The schema's word on a document that the hand-written rules of `entry` (frames,
/// descriptors, commands) have **already accepted**: `None` on the fast path, where the rules
/// are the verdict and the schema is not evaluated; [`first_violation`] inside
/// [`with_schema_confirmation`], the full path that also runs the schema after the rules.
///
/// Skipping it cannot change a verdict as long as the rules accept nothing the schema refuses:
/// every refusal of the rules is reported by the rules themselves (the schema only ever spoke
/// after them), so the two paths can differ only on a document the rules accept. That the
/// rules are at least as strict as the schema is proven by `tests/fast_path.rs` (every vector
/// and every small perturbation of it gives the identical verdict on both paths) and by
/// `tests/agreement.rs` (every accepted vector is schema-valid). Responses and events have no
/// hand-written rules beyond their envelope and always use [`first_violation`].
pub fn confirm_accepted(entry: Entry, instance: &Value) -> Option<Violation> {
    if CONFIRM_ACCEPTED.with(std::cell::Cell::get) {
        first_violation(entry, instance)
    } else {
        None
    }
}

/// Whether this thread is inside [`with_schema_confirmation`] (the full path): the one-pass
/// accept path (`contract::onepass`) then declines, so the full path is the whole validator
/// as it was.
pub fn confirming() -> bool {
    CONFIRM_ACCEPTED.with(std::cell::Cell::get)
}

/// Run `f` on the full path: [`confirm_accepted`] evaluates the schema (on this thread, for
/// the duration of `f`). For the proofs that the fast path gives the same verdicts.
pub fn with_schema_confirmation<T>(f: impl FnOnce() -> T) -> T {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            CONFIRM_ACCEPTED.with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(CONFIRM_ACCEPTED.with(|c| c.replace(true)));
    f()
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

    #[test]
    fn confirmation_runs_the_schema_only_on_the_full_path() {
        // A frame no schema branch accepts: the full path reports it, the fast path leaves
        // the verdict to the rules.
        let v = serde_json::json!({"kind": "invoke"});
        assert_eq!(confirm_accepted(Entry::Frame, &v), None);
        let full = with_schema_confirmation(|| confirm_accepted(Entry::Frame, &v)).expect("refused");
        assert_eq!(full, first_violation(Entry::Frame, &v).unwrap());
        assert_eq!(confirm_accepted(Entry::Frame, &v), None, "the switch is restored");
    }
}
