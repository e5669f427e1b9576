//! Schema ↔ type agreement: every vector document goes through the JSON Schema and through
//! the typed decode into the generated types; they must agree wherever the types can carry
//! the rule. Also: every vector the validator accepts is schema-valid.

use pi_conform::contract::schema::{self, Entry};
use pi_conform::contract::types::{protocol_v2, tool_adapter};
use pi_conform::judge::Kind;
use pi_conform::vectors::{default_dir, VectorSet};
use pi_conform::wire::decode_strict;
use serde_json::Value;

/// Keywords typify does not turn into type constraints: integer ranges (beyond `NonZero`),
/// array sizes and uniqueness, and single-value boolean enums. A schema violation made only
/// of these may decode; the semantic layer enforces them (and the vectors prove it).
const NOT_IN_TYPES: &[&str] = &["minimum", "maximum", "minItems", "maxItems", "uniqueItems", "enum", "oneOf"];

fn typed_ok(kind: Kind, v: &Value) -> Option<bool> {
    let v = v.clone();
    Some(match kind {
        Kind::Descriptor => serde_json::from_value::<tool_adapter::HostToolAdapterDescriptor>(v).is_ok(),
        Kind::Frame => serde_json::from_value::<tool_adapter::AdapterFrame>(v).is_ok(),
        Kind::Command => serde_json::from_value::<protocol_v2::Command>(v).is_ok(),
        Kind::Response => serde_json::from_value::<protocol_v2::Response>(v).is_ok(),
        Kind::Event => serde_json::from_value::<protocol_v2::Event>(v).is_ok(),
        Kind::Path => return None,
    })
}

fn entry(kind: Kind) -> Option<Entry> {
    Some(match kind {
        Kind::Descriptor => Entry::Descriptor,
        Kind::Frame => Entry::Frame,
        Kind::Command => Entry::Command,
        Kind::Response => Entry::Response,
        Kind::Event => Entry::Event,
        Kind::Path => return None,
    })
}

#[test]
fn schema_and_types_agree_on_every_vector() {
    let set = VectorSet::load(&default_dir()).expect("vectors load");
    let mut compared = 0;
    let mut disagreements = Vec::new();
    for v in &set.vectors {
        let Some(e) = entry(v.kind) else { continue };
        let Ok(line) = set.line(v) else { continue };
        let Ok(doc) = decode_strict(&line) else { continue };
        let violations = schema::violations(e, &doc);
        let typed = typed_ok(v.kind, &doc).unwrap();
        compared += 1;
        if violations.is_empty() && !typed {
            disagreements.push(format!("{}: schema accepts, typed decode refuses", v.id));
        }
        if !violations.is_empty() && typed && violations.iter().any(|x| !NOT_IN_TYPES.contains(&x.keyword.as_str())) {
            disagreements.push(format!("{}: schema refuses ({:?}), typed decode accepts", v.id, violations));
        }
    }
    assert!(compared > 500, "only {compared} documents compared");
    assert!(disagreements.is_empty(), "{} disagreements:\n{}", disagreements.len(), disagreements.join("\n"));
}

#[test]
fn every_accepted_vector_is_schema_valid() {
    let set = VectorSet::load(&default_dir()).expect("vectors load");
    let mut checked = 0;
    for v in &set.vectors {
        if v.expect.verdict != "valid" {
            continue;
        }
        let Some(e) = entry(v.kind) else { continue };
        let doc = decode_strict(&set.line(v).unwrap()).unwrap();
        assert!(schema::violations(e, &doc).is_empty(), "{} is valid but not schema-valid", v.id);
        checked += 1;
    }
    assert!(checked > 100, "only {checked} valid documents");
}

#[test]
fn schemas_are_valid_under_the_2020_12_meta_schema() {
    for text in [schema::TOOL_ADAPTER_SCHEMA, schema::PROTOCOL_V2_SCHEMA] {
        let s: Value = serde_json::from_str(text).unwrap();
        assert_eq!(s["$schema"], "https://json-schema.org/draft/2020-12/schema");
        jsonschema::meta::validate(&s).expect("valid under its meta-schema");
    }
}

#[test]
fn the_descriptor_definitions_are_shared_verbatim() {
    let ta: Value = serde_json::from_str(schema::TOOL_ADAPTER_SCHEMA).unwrap();
    let pv: Value = serde_json::from_str(schema::PROTOCOL_V2_SCHEMA).unwrap();
    let names = [
        "AdapterProtocolVersion",
        "AdapterId",
        "AdapterVersion",
        "HostInstanceId",
        "SessionId",
        "Generation",
        "CapabilityHandle",
        "ToolOperation",
        "ToolOperations",
        "EndpointTransport",
        "EndpointPath",
        "AdapterEndpoint",
        "AdapterBinding",
        "AdapterLimits",
        "HostToolAdapterDescriptor",
    ];
    for n in names {
        assert_eq!(ta["$defs"][n], pv["$defs"][n], "$defs/{n} differs between the two schemas");
        assert!(!ta["$defs"][n].is_null(), "$defs/{n} missing");
    }
}

#[test]
fn a_schema_violation_of_a_typed_rule_is_refused_by_the_types_too() {
    // The agreement test would pass vacuously if the types accepted everything: prove they
    // refuse what they can carry (closed objects, patterns, required keys, enums of strings).
    let d: Value = serde_json::from_str(include_str!("../vectors/bases/descriptor.json")).unwrap();
    for (ptr, val) in [
        ("/extra", Value::from(1)),
        ("/adapterId", Value::from("-bad")),
        ("/endpoint/transport", Value::from("tcp")),
        ("/binding/capabilityHandle", Value::from("short")),
    ] {
        let mut m = d.clone();
        let (parent, key) = ptr.rsplit_once('/').unwrap();
        m.pointer_mut(if parent.is_empty() { "" } else { parent }).unwrap()[key] = val;
        assert!(!schema::violations(Entry::Descriptor, &m).is_empty(), "{ptr}");
        assert!(!typed_ok(Kind::Descriptor, &m).unwrap(), "{ptr}: typed decode accepted");
    }
}

/// `schema::first_violation` judges a document by the one `oneOf` branch its discriminators
/// claim; its verdict and first violation must be exactly those of the whole entry point, on
/// every vector and on every vector with one top-level key removed, nulled or retyped.
#[test]
fn the_branch_check_gives_the_whole_schema_verdict() {
    let set = VectorSet::load(&default_dir()).expect("vectors load");
    let mut compared = 0;
    let mut valid = 0;
    let mut check = |e: Entry, doc: &Value, id: &str| {
        let full = schema::violations(e, doc).into_iter().next();
        assert_eq!(schema::first_violation(e, doc), full, "{id}");
        compared += 1;
        if full.is_none() {
            valid += 1;
        }
    };
    for v in &set.vectors {
        let Some(e) = entry(v.kind) else { continue };
        let Ok(line) = set.line(v) else { continue };
        let Ok(doc) = decode_strict(&line) else { continue };
        check(e, &doc, &v.id);
        let Value::Object(m) = &doc else { continue };
        for k in m.keys() {
            let mut removed = m.clone();
            removed.shift_remove(k);
            check(e, &Value::Object(removed), &format!("{} without {k}", v.id));
            for replacement in [Value::Null, Value::from(7), Value::from("x")] {
                let mut changed = m.clone();
                changed.insert(k.clone(), replacement);
                check(e, &Value::Object(changed), &format!("{} with {k} replaced", v.id));
            }
        }
    }
    assert!(compared > 5000 && valid > 200, "compared {compared}, of which valid {valid}");
}

/// The `$defs` of protocol-v2 that type what the reference daemon sends where the schema is
/// open (a response's and an event's `data`, an error's `details`, the snapshot's and the
/// handshake's extra members). They exist only for typify: no validating schema may refer to
/// them, so adding or changing one can never change a verdict on any peer.
const DAEMON_DATA_DEFS: &[&str] = &[
    "SessionRecovery",
    "SessionHostAdapterTools",
    "SessionTools",
    "SessionResource",
    "OpenData",
    "PortableSession",
    "PortableOpenData",
    "SessionStatusData",
    "ToolCallEntry",
    "TurnResult",
    "WakeResultData",
    "WakeTicket",
    "WakeTicketData",
    "QueuedData",
    "ClosedData",
    "AbortData",
    "AttachedData",
    "DetachedData",
    "DrainData",
    "EmptyEventData",
    "OpenedEventData",
    "SessionClosedEventData",
    "ToolCallStartEventData",
    "ToolCallEndEventData",
    "AgentEndEventData",
    "EventDroppedData",
    "GenerationDetails",
    "SessionCapacityDetails",
    "FieldDetails",
    "OpenFailureCause",
    "OpenFailedDetails",
    "ToolCallErrorDetails",
    "HostSessionCounts",
    "DaemonHostRecovery",
    "DaemonHostSnapshot",
    "QueueLimits",
    "DaemonCapabilities",
    "DaemonLimits",
    "DaemonHandshakeData",
];

/// Every `#/$defs/NAME` a schema value refers to, directly.
fn refs_in(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            if let Some(Value::String(r)) = m.get("$ref") {
                if let Some(name) = r.strip_prefix("#/$defs/") {
                    out.push(name.to_string());
                }
            }
            m.values().for_each(|x| refs_in(x, out));
        }
        Value::Array(a) => a.iter().for_each(|x| refs_in(x, out)),
        _ => {}
    }
}

/// The protocol-v2 definitions a validation can reach: from the root's `oneOf` and from every
/// entry point `contract::schema` compiles, following `$ref`s transitively.
fn validated_defs(pv: &Value) -> std::collections::BTreeSet<String> {
    // The protocol-v2 entry points of `contract::schema::Entry` (the branches it compiles are
    // definitions these reach).
    let entries = ["Command", "ResponseSuccess", "ResponseFailure", "Response", "Event", "HandshakeData"];
    assert_eq!(Entry::ALL.len(), 2 + entries.len(), "an entry point was added: list it here");
    let mut todo: Vec<String> = entries.iter().map(|s| s.to_string()).collect();
    refs_in(&pv["oneOf"], &mut todo);
    let mut seen = std::collections::BTreeSet::new();
    while let Some(name) = todo.pop() {
        if seen.insert(name.clone()) {
            let def = &pv["$defs"][&name];
            assert!(!def.is_null(), "$defs/{name} is referred to but missing");
            refs_in(def, &mut todo);
        }
    }
    seen
}

/// Whether a schema value closes an object anywhere (`additionalProperties: false` or
/// `unevaluatedProperties: false`), not following `$ref`s.
fn closes_an_object(v: &Value) -> bool {
    match v {
        Value::Object(m) => {
            m.get("additionalProperties") == Some(&Value::Bool(false))
                || m.get("unevaluatedProperties") == Some(&Value::Bool(false))
                || m.values().any(closes_an_object)
        }
        Value::Array(a) => a.iter().any(closes_an_object),
        _ => false,
    }
}

#[test]
fn the_daemon_data_definitions_are_open_and_on_no_validation_path() {
    let pv: Value = serde_json::from_str(schema::PROTOCOL_V2_SCHEMA).unwrap();
    let validated = validated_defs(&pv);
    for name in DAEMON_DATA_DEFS {
        let def = &pv["$defs"][name];
        assert!(def.is_object(), "$defs/{name} missing");
        assert!(!validated.contains(*name), "$defs/{name} is on a validation path");
        assert!(!closes_an_object(def), "$defs/{name} closes an object: the data it types must stay open");
        // Whatever it refers to is open too (or an existing, validated definition).
        let mut inner = Vec::new();
        refs_in(def, &mut inner);
        for r in inner {
            assert!(
                validated.contains(&r) || DAEMON_DATA_DEFS.contains(&r.as_str()),
                "$defs/{name} refers to $defs/{r}, which is neither validated nor daemon data"
            );
        }
    }
    // Every definition no validation reaches is a listed daemon data shape: an unreferenced
    // definition is never added by accident.
    let all: Vec<String> = pv["$defs"].as_object().unwrap().keys().cloned().collect();
    for name in all.iter().filter(|n| !validated.contains(*n)) {
        assert!(DAEMON_DATA_DEFS.contains(&name.as_str()), "$defs/{name} is on no validation path and not listed");
    }
    // And the validated ones are exactly those the schema had before them: the entry points
    // reach none of the daemon data.
    assert!(validated.iter().all(|n| !DAEMON_DATA_DEFS.contains(&n.as_str())));
}
