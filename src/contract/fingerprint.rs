//! Canonical JSON and the fingerprints built on it. Two documents that differ only in object
//! key order or whitespace (not significant in JSON) have the same canonical bytes and so the
//! same fingerprint: the idempotency rule of SPEC §4.5 (same key, another payload →
//! `idempotency_conflict`) and the daemon's wake records compare these.
//!
//! Canonical form: no whitespace; object members sorted by key (byte order of the UTF-8 key);
//! arrays in order; strings, numbers and literals as `serde_json` writes them.

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::types::tool_adapter::ToolOperation;

/// Append the canonical bytes of `v` to `out`.
pub fn write_canonical(v: &Value, out: &mut Vec<u8>) {
    match v {
        Value::Object(m) => {
            let mut members: Vec<(&String, &Value)> = m.iter().collect();
            members.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.push(b'{');
            for (i, (k, v)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                // Writing a string into a Vec cannot fail.
                let _ = serde_json::to_writer(&mut *out, k);
                out.push(b':');
                write_canonical(v, out);
            }
            out.push(b'}');
        }
        Value::Array(a) => {
            out.push(b'[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(x, out);
            }
            out.push(b']');
        }
        scalar => {
            let _ = serde_json::to_writer(&mut *out, scalar);
        }
    }
}

/// The canonical bytes of `v`.
pub fn canonical(v: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(128);
    write_canonical(v, &mut out);
    out
}

/// SHA-256 of the canonical bytes of `v`, as 64 lowercase hex digits.
pub fn fingerprint_hex(v: &Value) -> String {
    hex::encode(Sha256::digest(canonical(v)))
}

/// The idempotency fingerprint of an invoke (SPEC §4.5): SHA-256 of the operation's wire
/// name, a NUL byte, and the canonical payload.
pub fn invoke_fingerprint(op: ToolOperation, payload: &Value) -> [u8; 32] {
    let mut buf = Vec::with_capacity(128);
    buf.extend_from_slice(op.to_string().as_bytes());
    buf.push(0);
    write_canonical(payload, &mut buf);
    Sha256::digest(&buf).into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn canonical_bytes() {
        let v: Value = serde_json::from_str("{ \"b\" : 1.5, \"a\": [ {\"d\": null, \"c\": \"x\"} ] }").unwrap();
        assert_eq!(canonical(&v), br#"{"a":[{"c":"x","d":null}],"b":1.5}"#);
        assert_eq!(canonical(&json!({})), b"{}");
        assert_eq!(canonical(&json!([])), b"[]");
        assert_eq!(
            canonical(&json!({"é": "\u{1}\"", "Z": true, "a": -0})),
            "{\"Z\":true,\"a\":0,\"é\":\"\\u0001\\\"\"}".as_bytes()
        );
        // Computed independently: printf '{"a":[{"c":"x","d":null}],"b":1.5}' | sha256sum
        assert_eq!(fingerprint_hex(&v), "c8fa2d49c666a3bc2522b94972c9c1ec77dace9c9d488faf6328e397782167ad");
    }

    #[test]
    fn invoke_fingerprints() {
        let a = invoke_fingerprint(ToolOperation::FsWrite, &json!({"path": "a", "content": "x"}));
        // Computed independently: printf 'fs.write\0{"content":"x","path":"a"}' | sha256sum
        assert_eq!(hex::encode(a), "241e5bf75c76968018693dd3c54cfc5ce3b77fa4d4aa0973605a9c19b0e35272");
        assert_eq!(a, invoke_fingerprint(ToolOperation::FsWrite, &json!({"content": "x", "path": "a"})));
        assert_ne!(a, invoke_fingerprint(ToolOperation::FsEdit, &json!({"path": "a", "content": "x"})));
        assert_ne!(a, invoke_fingerprint(ToolOperation::FsWrite, &json!({"path": "a", "content": "y"})));
    }
}
