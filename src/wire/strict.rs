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
    let text = std::str::from_utf8(bytes).map_err(|_| LineError::InvalidUtf8)?;
    if text.starts_with('\u{feff}') {
        return Err(LineError::InvalidJson);
    }
    let mut de = serde_json::Deserializer::from_str(text);
    let value = StrictSeed.deserialize(&mut de).map_err(|_| LineError::InvalidJson)?;
    de.end().map_err(|_| LineError::InvalidJson)?;
    Ok(value)
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
                Entry::Occupied(_) => return Err(A::Error::custom("duplicate object key")),
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
    fn deep_nesting_is_refused_not_a_crash() {
        let deep = "[".repeat(100_000);
        assert_eq!(decode_strict(deep.as_bytes()), Err(LineError::InvalidJson));
    }
}
