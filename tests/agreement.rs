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
