//! The wire layer (SPEC §1, PC-1): encoder, `LineDecoder` and strict decoding.
//!
//! Oracles written here: a whole-stream line splitter (LF ends a line, one CR before it is
//! stripped, empty lines are skipped, a line or partial line over the limit — LF excluded —
//! fails and ends the stream), a JSON writer that spells strings with `\u` escapes and puts
//! whitespace between tokens, a duplicate-key detector, and the number normalization of the
//! schema-agreement DECISION (an integral number within ±2^53 is an integer).

use std::collections::HashSet;

use pi_conform::util::prng::SplitMix64;
use pi_conform::wire::{decode_strict, encode_line, encoded_len, LineDecoder, LineError};
use proptest::prelude::*;
use proptest::sample::Index;
use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Number, Value};

use crate::common::{chunks, config};

// ---- values ----

fn text_char() -> impl Strategy<Value = char> {
    prop_oneof![
        8 => prop::sample::select(vec![
            'a', 'Z', '0', ' ', '"', '\\', '/', '\0', '\u{1}', '\u{8}', '\t', '\n', '\u{c}', '\r', '\u{1f}', '\u{7f}',
            'é', '€', '😀', '\u{2028}', '\u{2029}', '\u{feff}', '\u{fffd}', '\u{10ffff}',
        ]),
        2 => any::<char>(),
    ]
}

fn text() -> impl Strategy<Value = String> {
    prop::collection::vec(text_char(), 0..12).prop_map(|v| v.into_iter().collect())
}

fn number() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (-64i64..64).prop_map(Value::from),
        // Quarters: exact in binary and in short decimal; every fourth one is integral.
        (-4000i64..4000).prop_map(|k| Value::from(k as f64 / 4.0)),
        prop::sample::select(vec![1e16, -1e16, 1e20, 4e15, -4e15, 0.5, -0.0, 0.0, 2.5, 1.5e-7]).prop_map(Value::from),
    ]
}

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![Just(Value::Null), any::<bool>().prop_map(Value::Bool), number(), text().prop_map(Value::String)]
}

fn value() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            // Collecting into a map keeps one value per key: no duplicates by construction.
            prop::collection::vec((text(), inner), 0..6).prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

/// The value a strict decoder must return for `v`: integral numbers within ±2^53 become
/// integers (`2.0` is `2`, `-0.0` is `0`).
fn normalized(v: &Value) -> Value {
    match v {
        Value::Number(n) if n.is_f64() => {
            let f = n.as_f64().unwrap_or(f64::NAN);
            if f.fract() == 0.0 && f.abs() <= 9_007_199_254_740_992.0 {
                if f == 0.0 {
                    Value::from(0u64)
                } else if f > 0.0 {
                    Value::from(f as u64)
                } else {
                    Value::from(f as i64)
                }
            } else {
                v.clone()
            }
        }
        Value::Array(a) => Value::Array(a.iter().map(normalized).collect()),
        Value::Object(m) => Value::Object(m.iter().map(|(k, v)| (k.clone(), normalized(v))).collect()),
        _ => v.clone(),
    }
}

// ---- the encoder's form ----

/// One LF at the end and no other LF or CR; compact (no whitespace outside strings); raw
/// UTF-8 (a `\u` escape only for a C0 control); no raw control inside a string.
fn check_encoded_form(line: &[u8]) -> Result<(), TestCaseError> {
    prop_assert_eq!(line.last(), Some(&b'\n'));
    let body = &line[..line.len() - 1];
    prop_assert!(!body.contains(&b'\n') && !body.contains(&b'\r'), "raw LF/CR inside the line");
    prop_assert!(std::str::from_utf8(body).is_ok(), "not UTF-8");
    let mut in_string = false;
    let mut i = 0;
    while i < body.len() {
        let b = body[i];
        if in_string {
            match b {
                b'"' => in_string = false,
                b'\\' => {
                    let e = body.get(i + 1).copied().unwrap_or(0);
                    if e == b'u' {
                        let hex = body.get(i + 2..i + 6).and_then(|h| std::str::from_utf8(h).ok()).unwrap_or("zz");
                        let cp = u32::from_str_radix(hex, 16).unwrap_or(u32::MAX);
                        prop_assert!(cp < 0x20, "\\u{} escape of a non-control character", hex);
                        i += 4;
                    } else {
                        prop_assert!(b"\"\\/bfnrt".contains(&e), "bad escape");
                    }
                    i += 1;
                }
                0..=0x1f => prop_assert!(false, "raw control character in a string"),
                _ => {}
            }
        } else {
            prop_assert!(b != b' ' && b != b'\t', "whitespace outside strings");
            in_string = b == b'"';
        }
        i += 1;
    }
    Ok(())
}

// ---- the line splitter model ----

/// The lines (or the one framing error) a whole stream yields, and the unfinished tail.
fn model_lines(stream: &[u8], limit: usize) -> (Vec<Result<Vec<u8>, LineError>>, Vec<u8>) {
    let mut out = Vec::new();
    let mut rest = stream;
    while let Some(lf) = rest.iter().position(|&b| b == b'\n') {
        let line = &rest[..lf];
        if line.len() > limit {
            out.push(Err(LineError::TooLarge { limit }));
            return (out, Vec::new());
        }
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if !line.is_empty() {
            out.push(Ok(line.to_vec()));
        }
        rest = &rest[lf + 1..];
    }
    if rest.len() > limit {
        out.push(Err(LineError::TooLarge { limit }));
        return (out, Vec::new());
    }
    (out, rest.to_vec())
}

/// Feed the pieces one by one, taking every line after each.
fn run_decoder(pieces: &[&[u8]], limit: usize) -> (Vec<Result<Vec<u8>, LineError>>, LineDecoder) {
    let mut dec = LineDecoder::new(limit);
    let mut out = Vec::new();
    for p in pieces {
        dec.push(p);
        while let Some(line) = dec.next_line() {
            out.push(line);
        }
    }
    (out, dec)
}

// ---- an independent JSON writer ----

/// A deterministic choice source (the crate's PRNG), so one generated seed drives every
/// spelling choice of the writer.
struct Choices(SplitMix64);

impl Choices {
    fn pick(&mut self, n: u64) -> u64 {
        self.0.below(n)
    }
}

fn write_ws(c: &mut Choices, out: &mut String) {
    for _ in 0..c.pick(3).saturating_sub(1) {
        out.push([' ', '\t', '\r', '\n'][c.pick(4) as usize]);
    }
}

fn write_string(s: &str, c: &mut Choices, out: &mut String) {
    out.push('"');
    for ch in s.chars() {
        let short = match ch {
            '"' => Some("\\\""),
            '\\' => Some("\\\\"),
            '\u{8}' => Some("\\b"),
            '\u{c}' => Some("\\f"),
            '\n' => Some("\\n"),
            '\r' => Some("\\r"),
            '\t' => Some("\\t"),
            '/' => Some("\\/"),
            _ => None,
        };
        let must_escape = ch == '"' || ch == '\\' || (ch as u32) < 0x20;
        match (short, must_escape || c.pick(3) == 0) {
            (Some(e), true) if c.pick(2) == 0 => out.push_str(e),
            (_, true) => {
                let mut units = [0u16; 2];
                for u in ch.encode_utf16(&mut units) {
                    if c.pick(2) == 0 {
                        out.push_str(&format!("\\u{u:04x}"));
                    } else {
                        out.push_str(&format!("\\u{u:04X}"));
                    }
                }
            }
            (_, false) => out.push(ch),
        }
    }
    out.push('"');
}

fn write_number(n: &Number, c: &mut Choices, out: &mut String) {
    let safe = |x: u64| x <= 9_007_199_254_740_992;
    match (n.as_u64(), n.as_i64()) {
        (Some(u), _) if safe(u) && c.pick(3) == 0 => {
            out.push_str(&format!("{u}{}", [".0", "e0", ".000E+0"][c.pick(3) as usize]))
        }
        (_, Some(i)) if i < 0 && safe(i.unsigned_abs()) && c.pick(3) == 0 => out.push_str(&format!("{i}.0")),
        _ => out.push_str(&n.to_string()),
    }
}

fn write_json(v: &Value, c: &mut Choices, out: &mut String) {
    write_ws(c, out);
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => write_number(n, c, out),
        Value::String(s) => write_string(s, c, out),
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_json(x, c, out);
            }
            write_ws(c, out);
            out.push(']');
        }
        Value::Object(m) => {
            out.push('{');
            for (i, (k, x)) in m.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_ws(c, out);
                write_string(k, c, out);
                write_ws(c, out);
                out.push(':');
                write_json(x, c, out);
            }
            write_ws(c, out);
            out.push('}');
        }
    }
    write_ws(c, out);
}

// ---- a duplicate-key detector ----

/// Whether a JSON text has an object with the same key twice, at any depth.
struct HasDuplicate(bool);

impl<'de> Deserialize<'de> for HasDuplicate {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = HasDuplicate;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("JSON")
            }
            fn visit_bool<E>(self, _: bool) -> Result<HasDuplicate, E> {
                Ok(HasDuplicate(false))
            }
            fn visit_i64<E>(self, _: i64) -> Result<HasDuplicate, E> {
                Ok(HasDuplicate(false))
            }
            fn visit_u64<E>(self, _: u64) -> Result<HasDuplicate, E> {
                Ok(HasDuplicate(false))
            }
            fn visit_f64<E>(self, _: f64) -> Result<HasDuplicate, E> {
                Ok(HasDuplicate(false))
            }
            fn visit_str<E>(self, _: &str) -> Result<HasDuplicate, E> {
                Ok(HasDuplicate(false))
            }
            fn visit_unit<E>(self) -> Result<HasDuplicate, E> {
                Ok(HasDuplicate(false))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<HasDuplicate, A::Error> {
                let mut dup = false;
                while let Some(HasDuplicate(d)) = seq.next_element()? {
                    dup |= d;
                }
                Ok(HasDuplicate(dup))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<HasDuplicate, A::Error> {
                let (mut seen, mut dup) = (HashSet::new(), false);
                while let Some(k) = map.next_key::<String>()? {
                    dup |= !seen.insert(k);
                    let HasDuplicate(d) = map.next_value()?;
                    dup |= d;
                }
                Ok(HasDuplicate(dup))
            }
        }
        d.deserialize_any(V)
    }
}

/// What strict decoding must answer: UTF-8 judged first, then BOM, grammar (one text) and
/// duplicate keys; the value normalized.
fn strict_oracle(line: &[u8]) -> Result<Value, LineError> {
    let text = std::str::from_utf8(line).map_err(|_| LineError::InvalidUtf8)?;
    if text.starts_with('\u{feff}') {
        return Err(LineError::InvalidJson);
    }
    match serde_json::from_str::<HasDuplicate>(text) {
        Ok(HasDuplicate(false)) => {}
        _ => return Err(LineError::InvalidJson),
    }
    let v: Value = serde_json::from_str(text).map_err(|_| LineError::InvalidJson)?;
    Ok(normalized(&v))
}

// ---- byte soup ----

fn soup_piece() -> impl Strategy<Value = Vec<u8>> {
    let pieces: Vec<&'static [u8]> = vec![
        b"{",
        b"}",
        b"[",
        b"]",
        b"\"a\"",
        b"\"b\"",
        b":",
        b",",
        b"1",
        b"-",
        b"2.0",
        b"e5",
        b"0",
        b"true",
        b"null",
        b" ",
        b"\t",
        b"\n",
        b"\n",
        b"\r",
        b"\r\n",
        b"\"\\u0061\"",
        b"\"\\ud83d\\ude00\"",
        b"\"\\ud800\"",
        b"\\",
        b"\"",
        b"\xff",
        b"\xfe",
        b"\xc3",
        b"\xa9",
        b"\xc3\xa9",
        b"\xef\xbb\xbf",
        b"\xed\xa0\x80",
        b"\xc0\xaf",
        b"\xf4\x90\x80\x80",
        b"\x00",
        b"\x1f",
        b"/",
        b"{\"a\":1,\"a\":2}",
        b"{\"a\":1,\"\\u0061\":2}",
        b"{\"a\":{}}",
        b"[1e400]",
        b"NaN",
        b"'a'",
        b"[1,]",
    ];
    prop_oneof![
        6 => prop::sample::select(pieces).prop_map(<[u8]>::to_vec),
        1 => any::<u8>().prop_map(|b| vec![b]),
        1 => value().prop_map(|v| {
            let mut l = encode_line(&v);
            l.pop();
            l
        }),
    ]
}

fn soup() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(soup_piece(), 0..24).prop_map(|v| v.concat())
}

fn cuts() -> impl Strategy<Value = Vec<Index>> {
    prop::collection::vec(any::<Index>(), 0..8)
}

proptest! {
    #![proptest_config(config(1024))]

    /// encode_line → LineDecoder (any chunking, limit exactly the line) → decode_strict gives
    /// the value back; the line has the encoder's form and `encoded_len` is its length.
    #[test]
    fn round_trip(v in value(), cuts in cuts()) {
        let line = encode_line(&v);
        check_encoded_form(&line)?;
        prop_assert_eq!(encoded_len(&v), line.len());
        let body = line[..line.len() - 1].to_vec();
        let (lines, dec) = run_decoder(&chunks(&line, &cuts), body.len());
        prop_assert_eq!(lines, vec![Ok(body.clone())]);
        prop_assert!(dec.remainder().is_empty());
        prop_assert_eq!(decode_strict(&body), Ok(normalized(&v)));
    }

    /// A stream of lines (LF or CRLF, blank lines between, an unfinished tail) splits the
    /// same way under any chunking, and every line decodes to its value.
    #[test]
    fn streams_split_like_the_model(
        items in prop::collection::vec((value(), any::<bool>(), prop::collection::vec(any::<bool>(), 0..3)), 1..8),
        tail in any::<Option<(Index, Index)>>(),
        cuts in prop::collection::vec(any::<Index>(), 0..16),
    ) {
        let mut stream = Vec::new();
        let mut want = Vec::new();
        let mut limit = 0;
        for (v, crlf, blanks) in &items {
            for crlf_blank in blanks {
                stream.extend_from_slice(if *crlf_blank { b"\r\n" } else { b"\n" });
            }
            let mut line = encode_line(v);
            line.pop();
            limit = limit.max(line.len() + usize::from(*crlf));
            want.push((line.clone(), v));
            stream.extend_from_slice(&line);
            stream.extend_from_slice(if *crlf { b"\r\n" } else { b"\n" });
        }
        let mut unfinished = Vec::new();
        if let Some((which, len)) = tail {
            let (line, _) = &want[which.index(want.len())];
            unfinished = line[..len.index(line.len() + 1)].to_vec();
            stream.extend_from_slice(&unfinished);
        }
        let (model, model_rest) = model_lines(&stream, limit);
        let (got, dec) = run_decoder(&chunks(&stream, &cuts), limit);
        prop_assert_eq!(&got, &model);
        prop_assert_eq!(got.len(), want.len());
        prop_assert_eq!(dec.remainder(), &model_rest[..]);
        prop_assert_eq!(&model_rest, &unfinished);
        for (g, (line, v)) in got.iter().zip(&want) {
            prop_assert_eq!(g.as_ref().ok(), Some(line));
            prop_assert_eq!(decode_strict(line), Ok(normalized(v)));
        }
    }

    /// Another spelling of the same value — `\u` escapes (lower or upper case hex, surrogate
    /// pairs), `\/`, whitespace between tokens, integers written `2.0` / `2e0` — decodes to
    /// the same (normalized) value.
    #[test]
    fn any_spelling_decodes_to_the_value(v in value(), seed in any::<u64>()) {
        let mut text = String::new();
        write_json(&v, &mut Choices(SplitMix64::new(seed)), &mut text);
        prop_assert_eq!(decode_strict(text.as_bytes()), Ok(normalized(&v)), "text {:?}", text);
    }

    /// A duplicate key anywhere — even spelled with escapes, even with equal values — makes
    /// the text invalid JSON.
    #[test]
    fn duplicate_keys_are_invalid(
        v in value(), key in text(), wrap in prop::collection::vec(any::<bool>(), 0..4), seed in any::<u64>(),
    ) {
        let mut c = Choices(SplitMix64::new(seed));
        let (mut a, mut b, mut x) = (String::new(), String::new(), String::new());
        write_string(&key, &mut c, &mut a);
        write_string(&key, &mut c, &mut b);
        write_json(&v, &mut c, &mut x);
        let mut text = format!("{{{a}:{x},\"other\":null,{b}:{x}}}");
        for in_array in wrap {
            text = if in_array { format!("[1,{text}]") } else { format!("{{\"w\":{text}}}") };
        }
        prop_assert_eq!(decode_strict(text.as_bytes()), Err(LineError::InvalidJson), "text {:?}", text);
    }

    /// A line over the limit (LF excluded) is refused with the typed error — already as a
    /// partial line — and the decoder yields nothing after it; at the limit it passes.
    #[test]
    fn over_limit_lines_are_refused(v in value(), short in 1usize..64, cuts in cuts()) {
        let line = encode_line(&v);
        let body_len = line.len() - 1;
        let limit = body_len.saturating_sub(short);
        if body_len > limit {
            let mut dec = LineDecoder::new(limit);
            dec.push(&line[..body_len]);
            prop_assert_eq!(dec.next_line(), Some(Err(LineError::TooLarge { limit })));
            dec.push(b"{}\n");
            prop_assert_eq!(dec.next_line(), None);
            let (got, mut dec) = run_decoder(&chunks(&line, &cuts), limit);
            prop_assert_eq!(got, vec![Err(LineError::TooLarge { limit })]);
            dec.push(b"{}\n");
            prop_assert_eq!(dec.next_line(), None);
        }
        let (got, _) = run_decoder(&chunks(&line, &cuts), body_len);
        prop_assert_eq!(got, vec![Ok(line[..body_len].to_vec())]);
    }
}

proptest! {
    #![proptest_config(config(2048))]

    /// Byte soup: the decoder never panics, splits like the model under any chunking, and
    /// strict decoding of each line agrees with the oracle.
    #[test]
    fn byte_soup_matches_the_oracles(
        soup in soup(), limit in prop_oneof![1usize..80, Just(4096usize)], cuts in cuts(),
    ) {
        let (model, model_rest) = model_lines(&soup, limit);
        let (got, dec) = run_decoder(&chunks(&soup, &cuts), limit);
        prop_assert_eq!(&got, &model);
        if !matches!(got.last(), Some(Err(_))) {
            prop_assert_eq!(dec.remainder(), &model_rest[..]);
        }
        for line in got.into_iter().flatten() {
            prop_assert!(line.len() <= limit && !line.contains(&b'\n'));
            prop_assert_eq!(decode_strict(&line), strict_oracle(&line), "line {:?}", String::from_utf8_lossy(&line));
        }
    }
}

proptest! {
    #![proptest_config(config(24))]

    /// Streams well past the decoder's 64 KiB compaction point still split exactly.
    #[test]
    fn long_streams_survive_compaction(
        sizes in prop::collection::vec(1usize..20_000, 8..24), cuts in prop::collection::vec(any::<Index>(), 0..64),
    ) {
        let mut stream = Vec::new();
        let mut want = Vec::new();
        for (i, n) in sizes.iter().enumerate() {
            let v = Value::from(format!("{i}:{}", "é".repeat(*n)));
            let mut line = encode_line(&v);
            stream.extend_from_slice(&line);
            line.pop();
            want.push(Ok(line));
        }
        let (got, dec) = run_decoder(&chunks(&stream, &cuts), 40_010);
        prop_assert!(got == want, "{} lines, {} expected", got.len(), want.len());
        prop_assert!(dec.remainder().is_empty());
    }
}
