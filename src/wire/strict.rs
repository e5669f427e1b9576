//! Strict JSON: one JSON text, no BOM, no duplicate object key anywhere (SPEC §1 DECISION),
//! and integral numbers normalised to integers (the schema-agreement DECISION).

use serde::de::{DeserializeSeed, Deserializer, Error as _, MapAccess, SeqAccess, Visitor};
use serde_json::map::Entry;
use serde_json::{Map, Number, Value};

use super::LineError;

/// Decode `bytes` as exactly one strict JSON text.
///
/// - not UTF-8 → [`LineError::InvalidUtf8`];
/// - a BOM, a syntax error, a duplicate key at any depth, or bytes after the value →
///   [`LineError::InvalidJson`].
///
/// Integral numbers written as floats (`2.0`, `1e3`) become integers, as JavaScript and JSON
/// Schema 2020-12 both treat them; see [`normalize_numbers`].
pub fn decode_strict(bytes: &[u8]) -> Result<Value, LineError> {
    decode_strict_located(bytes).map_err(|e| e.error)
}

/// Where and why a text is not strict JSON: the [`LineError`], the 1-based line and column
/// (in bytes) of the offending byte, and what is wrong there.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line} column {column}: {detail}")]
pub struct JsonSyntaxError {
    /// The refusal as the wire reports it.
    pub error: LineError,
    /// 1-based line.
    pub line: usize,
    /// 1-based column, in bytes.
    pub column: usize,
    /// What is wrong (`duplicate object key "a"`, `expected `,` or `}``, …).
    pub detail: String,
}

/// [`decode_strict`], with the position and the reason of a refusal (for files and
/// diagnostics; the wire only reports the code).
pub fn decode_strict_located(bytes: &[u8]) -> Result<Value, JsonSyntaxError> {
    let text = std::str::from_utf8(bytes).map_err(|e| {
        let (line, column) = position(bytes, e.valid_up_to());
        JsonSyntaxError { error: LineError::InvalidUtf8, line, column, detail: "invalid UTF-8 byte".into() }
    })?;
    if text.starts_with('\u{feff}') {
        return Err(JsonSyntaxError {
            error: LineError::InvalidJson,
            line: 1,
            column: 1,
            detail: "byte order mark (BOM) before the JSON text".into(),
        });
    }
    let mut de = serde_json::Deserializer::from_str(text);
    let value = StrictSeed.deserialize(&mut de).map_err(syntax)?;
    de.end().map_err(syntax)?;
    Ok(value)
}

/// The 1-based line and column (bytes) of byte `offset`.
fn position(bytes: &[u8], offset: usize) -> (usize, usize) {
    let before = &bytes[..offset.min(bytes.len())];
    let line = 1 + memchr::memchr_iter(b'\n', before).count();
    let column = 1 + before.len() - memchr::memrchr(b'\n', before).map_or(0, |i| i + 1);
    (line, column)
}

fn syntax(e: serde_json::Error) -> JsonSyntaxError {
    let text = e.to_string();
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    let detail = text.strip_suffix(&suffix).unwrap_or(&text).to_string();
    JsonSyntaxError { error: LineError::InvalidJson, line: e.line(), column: e.column(), detail }
}

/// Rewrite every integral float within ±2^53 as an integer, in place.
pub fn normalize_numbers(v: &mut Value) {
    match v {
        Value::Number(n) => {
            if let Some(i) = integral(n) {
                *n = i;
            }
        }
        Value::Array(a) => a.iter_mut().for_each(normalize_numbers),
        Value::Object(m) => m.values_mut().for_each(normalize_numbers),
        _ => {}
    }
}

const MAX_SAFE: f64 = 9_007_199_254_740_992.0;

fn integral(n: &Number) -> Option<Number> {
    if n.is_i64() || n.is_u64() {
        return None;
    }
    let f = n.as_f64()?;
    if f.fract() == 0.0 && f.abs() <= MAX_SAFE {
        if f >= 0.0 {
            Some(Number::from(f as u64))
        } else {
            Some(Number::from(f as i64))
        }
    } else {
        None
    }
}

struct StrictSeed;

impl<'de> DeserializeSeed<'de> for StrictSeed {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(StrictVisitor)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }
    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Value, E> {
        let n = Number::from_f64(v).ok_or_else(|| E::custom("non-finite number"))?;
        Ok(Value::Number(integral(&n).unwrap_or(n)))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(StrictSeed)? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        // Room for a typical frame's keys up front (growing the map rehashes every key), and
        // one hash per key: the vacant entry both proves the key new and receives the value.
        let mut out = Map::with_capacity(map.size_hint().unwrap_or(8).min(64));
        while let Some(key) = map.next_key::<String>()? {
            match out.entry(key) {
                Entry::Occupied(o) => return Err(A::Error::custom(format_args!("duplicate object key {:?}", o.key()))),
                Entry::Vacant(slot) => {
                    slot.insert(map.next_value_seed(StrictSeed)?);
                }
            }
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicates_at_any_depth_are_invalid() {
        assert_eq!(decode_strict(br#"{"a":1,"a":1}"#), Err(LineError::InvalidJson));
        assert_eq!(decode_strict(br#"{"x":[{"b":{"c":1,"c":2}}]}"#), Err(LineError::InvalidJson));
        assert!(decode_strict(br#"{"a":{"a":1}}"#).is_ok());
    }

    #[test]
    fn bom_trailing_and_utf8() {
        assert_eq!(decode_strict(b"\xef\xbb\xbf{}"), Err(LineError::InvalidJson));
        assert_eq!(decode_strict(b"{} {}"), Err(LineError::InvalidJson));
        assert_eq!(decode_strict(b"{\"a\":\"\xff\"}"), Err(LineError::InvalidUtf8));
        assert!(decode_strict(b"  {}  ").is_ok());
    }

    #[test]
    fn integral_floats_become_integers() {
        let v = decode_strict(br#"{"g":2.0,"h":1e3,"i":2.5,"j":-0.0}"#).unwrap();
        assert_eq!(v["g"], serde_json::json!(2));
        assert!(v["g"].is_u64());
        assert!(v["h"].is_u64());
        assert!(v["i"].is_f64());
        assert_eq!(v["j"], serde_json::json!(0));
    }

    #[test]
    fn refusals_carry_line_column_and_reason() {
        let e = decode_strict_located(b"{\n  \"a\": 1,\n  \"a\": 2\n}").unwrap_err();
        assert_eq!((e.error, e.line), (LineError::InvalidJson, 3), "{e}");
        assert!(e.detail.contains("duplicate object key \"a\""), "{e}");
        let e = decode_strict_located(b"{\"a\": 1,\n \"b\" 2}").unwrap_err();
        assert_eq!((e.line, e.column), (2, 6), "{e}");
        assert!(e.detail.contains("expected `:`"), "{e}");
        let e = decode_strict_located(b"{}\n{}").unwrap_err();
        assert_eq!((e.line, e.column, e.detail.as_str()), (2, 1, "trailing characters"), "{e}");
        let e = decode_strict_located(b"{\"a\":\n\"x\xffy\"}").unwrap_err();
        assert_eq!((e.error, e.line, e.column), (LineError::InvalidUtf8, 2, 3), "{e}");
        let e = decode_strict_located(b"\xef\xbb\xbf{}").unwrap_err();
        assert_eq!((e.line, e.column), (1, 1));
        assert!(e.to_string().starts_with("line 1 column 1: byte order mark"), "{e}");
    }

    #[test]
    fn deep_nesting_is_refused_not_a_crash() {
        let deep = "[".repeat(100_000);
        assert_eq!(decode_strict(deep.as_bytes()), Err(LineError::InvalidJson));
    }
}
