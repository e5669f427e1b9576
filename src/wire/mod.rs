//! The wire: bounded NDJSON framing, strict JSON decoding and compact encoding (SPEC §1).
//!
//! Everything here is sans-I/O: callers feed bytes and take lines, so the same code serves
//! the socket servers, the runner and the vectors.

mod strict;

pub use strict::{decode_strict, decode_strict_located, normalize_numbers, JsonSyntaxError};

use serde_json::Value;

/// Why a line was refused before it became a JSON value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LineError {
    /// The line (or the partial line received so far) is over the limit.
    #[error("line exceeds {limit} bytes")]
    TooLarge {
        /// The limit in bytes, LF excluded.
        limit: usize,
    },
    /// The line is not UTF-8.
    #[error("line is not valid UTF-8")]
    InvalidUtf8,
    /// The line is not exactly one JSON text (syntax, duplicate key, BOM, trailing bytes).
    #[error("line is not one strict JSON text")]
    InvalidJson,
}

/// Incremental NDJSON line splitter with a byte limit.
///
/// Lines end at LF; one CR directly before the LF is stripped; empty lines are skipped. A
/// partial line that already exceeds the limit fails at once, without waiting for its LF.
#[derive(Debug)]
pub struct LineDecoder {
    buf: Vec<u8>,
    start: usize,
    scanned: usize,
    max: usize,
    failed: bool,
}

impl LineDecoder {
    /// A decoder for lines of at most `max_line_bytes` bytes, LF excluded.
    pub fn new(max_line_bytes: usize) -> Self {
        Self { buf: Vec::new(), start: 0, scanned: 0, max: max_line_bytes, failed: false }
    }

    /// The limit, LF excluded.
    pub fn limit(&self) -> usize {
        self.max
    }

    /// Append received bytes.
    pub fn push(&mut self, data: &[u8]) {
        if !self.failed {
            self.buf.extend_from_slice(data);
        }
    }

    /// The next complete line, if any. After an error the decoder yields nothing more.
    pub fn next_line(&mut self) -> Option<Result<Vec<u8>, LineError>> {
        loop {
            if self.failed {
                return None;
            }
            let pending = &self.buf[self.start..];
            let from = self.scanned - self.start;
            match memchr_lf(&pending[from..]) {
                Some(pos) => {
                    let end = self.start + from + pos;
                    let mut line = &self.buf[self.start..end];
                    if line.len() > self.max {
                        self.failed = true;
                        return Some(Err(LineError::TooLarge { limit: self.max }));
                    }
                    if line.last() == Some(&b'\r') {
                        line = &line[..line.len() - 1];
                    }
                    let out = line.to_vec();
                    self.start = end + 1;
                    self.scanned = self.start;
                    self.compact();
                    if out.is_empty() {
                        continue;
                    }
                    return Some(Ok(out));
                }
                None => {
                    self.scanned = self.buf.len();
                    if self.buf.len() - self.start > self.max {
                        self.failed = true;
                        return Some(Err(LineError::TooLarge { limit: self.max }));
                    }
                    return None;
                }
            }
        }
    }

    /// Bytes received after the last complete line (a partial line at EOF).
    pub fn remainder(&self) -> &[u8] {
        &self.buf[self.start..]
    }

    fn compact(&mut self) {
        if self.start > 64 * 1024 && self.start * 2 > self.buf.len() {
            self.buf.drain(..self.start);
            self.scanned -= self.start;
            self.start = 0;
        }
    }
}

fn memchr_lf(hay: &[u8]) -> Option<usize> {
    hay.iter().position(|&b| b == b'\n')
}

/// Decode one line (without its LF) into a JSON value: UTF-8, then strict JSON.
pub fn decode_line(line: &[u8]) -> Result<Value, LineError> {
    decode_strict(line)
}

/// Encode a value as one NDJSON line: compact JSON, raw UTF-8, one LF.
pub fn encode_line(value: &Value) -> Vec<u8> {
    let mut out = serde_json::to_vec(value).unwrap_or_else(|_| b"null".to_vec());
    out.push(b'\n');
    out
}

/// The byte length `encode_line` would produce (LF included).
pub fn encoded_len(value: &Value) -> usize {
    json_len(value).map_or(usize::MAX, |n| n + 1)
}

/// The length of the compact JSON serialization of `value`, counted without writing it
/// (`None` if it cannot be serialized, which a `Value` or a string never is).
pub fn json_len<T: serde::Serialize + ?Sized>(value: &T) -> Option<usize> {
    struct Counter(usize);
    impl std::io::Write for Counter {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0 += b.len();
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut c = Counter(0);
    serde_json::to_writer(&mut c, value).ok().map(|()| c.0)
}

/// [`json_len`] of a string, without the serializer when nothing in it is escaped (no `"`,
/// `\\` or control character below U+0020): then it is the bytes and two quotes.
pub fn json_str_len(s: &str) -> usize {
    if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        s.len() + 2
    } else {
        json_len(s).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_lengths_are_the_encoded_lengths() {
        for s in ["", "a", "é€😀", "a\"b", "a\\b", "\u{1}\n\t\u{1f}", "\u{7f}", "/<>&'", "\u{2028}"] {
            assert_eq!(json_str_len(s), serde_json::to_string(s).unwrap().len(), "{s:?}");
        }
    }

    fn lines(d: &mut LineDecoder) -> Vec<Result<Vec<u8>, LineError>> {
        std::iter::from_fn(|| d.next_line()).collect()
    }

    #[test]
    fn splits_strips_cr_and_skips_empty() {
        let mut d = LineDecoder::new(16);
        d.push(b"{\"a\":1}\r\n\n\r\n{\"b\"");
        assert_eq!(lines(&mut d), vec![Ok(b"{\"a\":1}".to_vec())]);
        d.push(b":2}\n");
        assert_eq!(lines(&mut d), vec![Ok(b"{\"b\":2}".to_vec())]);
        assert!(d.remainder().is_empty());
    }

    #[test]
    fn only_one_cr_is_stripped() {
        let mut d = LineDecoder::new(16);
        d.push(b"x\r\r\n");
        assert_eq!(lines(&mut d), vec![Ok(b"x\r".to_vec())]);
    }

    #[test]
    fn limit_is_exact_and_partial_lines_fail_early() {
        let mut d = LineDecoder::new(4);
        d.push(b"abcd\n");
        assert_eq!(lines(&mut d), vec![Ok(b"abcd".to_vec())]);
        d.push(b"abcde");
        assert_eq!(lines(&mut d), vec![Err(LineError::TooLarge { limit: 4 })]);
        d.push(b"\n{}\n");
        assert!(lines(&mut d).is_empty(), "nothing after a framing error");
    }

    #[test]
    fn encoder_is_compact_raw_utf8() {
        let v = serde_json::json!({"a": "€", "b": [1, 2]});
        assert_eq!(encode_line(&v), "{\"a\":\"€\",\"b\":[1,2]}\n".as_bytes());
        assert_eq!(encoded_len(&v), encode_line(&v).len());
    }
}
