//! One verdict for one document: the entry point `pi-conform validate` and the golden vectors
//! share. It only routes to the contract; it holds no protocol rule of its own.

use serde::Serialize;
use serde_json::Value;

use crate::contract::frame::{parse_adapter_frame, Binding, Direction, Disposition};
use crate::contract::onepass;
use crate::contract::{admit_descriptor, judge_command, validate_event, validate_relative_path, validate_response};
use crate::contract::{Code, ContractError, ExpectedBinding, HostContext, PathSide};
use crate::wire::{decode_strict, LineError};

/// What a document is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// A daemon command (SPEC §2.1).
    Command,
    /// A daemon response (SPEC §2.2).
    Response,
    /// A daemon event (SPEC §2.3).
    Event,
    /// A host tool-adapter descriptor (SPEC §3.2).
    Descriptor,
    /// An adapter frame (SPEC §4).
    Frame,
    /// A tool path (SPEC §5.1); the document is a JSON string.
    Path,
}

impl Kind {
    /// The kind's name, as it serializes (`frame`, `descriptor`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Command => "command",
            Kind::Response => "response",
            Kind::Event => "event",
            Kind::Descriptor => "descriptor",
            Kind::Frame => "frame",
            Kind::Path => "path",
        }
    }
}

/// Everything a verdict may depend on besides the document.
#[derive(Clone, Debug)]
pub struct Context {
    /// The judging host's instance id (commands, descriptors).
    pub host_instance_id: String,
    /// The expected session of a descriptor.
    pub session_id: String,
    /// The expected generation of a descriptor.
    pub generation: i64,
    /// The binding a frame is judged against.
    pub binding: Option<Binding>,
    /// The direction of a frame.
    pub direction: Direction,
    /// The side judging a path.
    pub side: PathSide,
    /// Line limit for commands (daemon `maxLineBytes`, LF excluded).
    pub max_line_bytes: usize,
}

impl Default for Context {
    fn default() -> Self {
        Self {
            host_instance_id: "host-019f".into(),
            session_id: "agent-a".into(),
            generation: 2,
            binding: None,
            direction: Direction::ToAdapter,
            side: PathSide::Daemon,
            max_line_bytes: 1024 * 1024,
        }
    }
}

/// The verdict on one document.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "verdict", rename_all = "lowercase")]
pub enum Verdict {
    /// Accepted.
    Valid,
    /// Refused, with the typed error.
    Invalid {
        /// The protocol code.
        code: String,
        /// `details.field`.
        field: String,
        /// The message (content-free).
        message: String,
        /// For frames: `reply` or `close`.
        #[serde(skip_serializing_if = "Option::is_none")]
        disposition: Option<String>,
    },
}

impl Verdict {
    fn from_error(e: &ContractError, disposition: Option<Disposition>) -> Self {
        Verdict::Invalid {
            code: e.code.as_str().to_string(),
            field: e.field().to_string(),
            message: e.message.clone(),
            disposition: disposition.map(|d| match d {
                Disposition::Reply => "reply".to_string(),
                Disposition::Close => "close".to_string(),
            }),
        }
    }

    /// Whether the verdict is `valid`.
    pub fn is_valid(&self) -> bool {
        matches!(self, Verdict::Valid)
    }
}

fn line_error(e: LineError) -> Verdict {
    let (code, msg) = match e {
        LineError::TooLarge { .. } => (Code::LineTooLarge, "line exceeds maxLineBytes"),
        LineError::InvalidUtf8 => (Code::InvalidUtf8, "line is not valid UTF-8"),
        LineError::InvalidJson => (Code::InvalidJson, "line is not one strict JSON text"),
    };
    Verdict::from_error(&ContractError::new(code, "line", msg), None)
}

/// Guess the kind of a decoded document (`--kind auto`).
pub fn detect_kind(v: &Value) -> Kind {
    match v.get("kind").and_then(Value::as_str) {
        Some("response") => return Kind::Response,
        Some("event") => return Kind::Event,
        Some(_) => return Kind::Frame,
        None => {}
    }
    if v.is_string() {
        Kind::Path
    } else if v.get("operation").is_some() || v.get("requestId").is_some() {
        Kind::Command
    } else if v.get("binding").is_some() || v.get("endpoint").is_some() {
        Kind::Descriptor
    } else {
        Kind::Command
    }
}

/// Judge one line (LF excluded) as `kind` (`None` = detect).
pub fn judge_line(line: &[u8], kind: Option<Kind>, ctx: &Context) -> (Kind, Verdict) {
    let limit = match (kind, &ctx.binding) {
        (Some(Kind::Frame), Some(b)) => b.line_limit(ctx.direction) as usize - 1,
        _ => ctx.max_line_bytes,
    };
    let kind_hint = kind.unwrap_or(Kind::Command);
    if line.len() > limit && kind_hint != Kind::Frame {
        return (kind_hint, line_error(LineError::TooLarge { limit }));
    }
    if kind == Some(Kind::Frame) {
        return (Kind::Frame, judge_frame_bytes(line, ctx));
    }
    // The accept path of a descriptor: one pass, no `Value` (see `contract::onepass`).
    if kind == Some(Kind::Descriptor) && onepass::descriptor_accepted(line, Some(&expected_binding(ctx))) {
        return (Kind::Descriptor, Verdict::Valid);
    }
    let value = match decode_strict(line) {
        Ok(v) => v,
        Err(e) => return (kind_hint, line_error(e)),
    };
    let kind = kind.unwrap_or_else(|| detect_kind(&value));
    if kind == Kind::Frame {
        return (kind, judge_frame_bytes(line, ctx));
    }
    (kind, judge_value(&value, kind, ctx))
}

fn judge_frame_bytes(line: &[u8], ctx: &Context) -> Verdict {
    let Some(binding) = &ctx.binding else {
        let e = ContractError::new(
            Code::AdapterProtocolInvalid,
            "frame",
            "a frame needs a descriptor to be judged against",
        );
        return Verdict::from_error(&e, None);
    };
    // The accept path: one pass, no `Value`; anything it does not accept gets the full path,
    // which alone reports refusals.
    if onepass::accept_frame(line, binding, ctx.direction).is_some() {
        return Verdict::Valid;
    }
    match parse_adapter_frame(line, binding, ctx.direction) {
        Ok(_) => Verdict::Valid,
        Err(e) => Verdict::from_error(&e.error, Some(e.disposition)),
    }
}

/// Judge one decoded document as `kind`.
pub fn judge_value(value: &Value, kind: Kind, ctx: &Context) -> Verdict {
    let host = HostContext { host_instance_id: &ctx.host_instance_id };
    match kind {
        Kind::Command => match judge_command(value, &host) {
            Ok(_) => Verdict::Valid,
            Err(e) => Verdict::from_error(&e.error, None),
        },
        Kind::Descriptor => {
            let exp = expected_binding(ctx);
            match admit_descriptor(value, Some(&exp)) {
                Ok(_) => Verdict::Valid,
                Err(e) => Verdict::from_error(&e, None),
            }
        }
        Kind::Response => verdict(validate_response(value)),
        Kind::Event => verdict(validate_event(value)),
        Kind::Path => match value.as_str() {
            Some(p) => verdict(validate_relative_path(p, ctx.side, "path").map(|_| ())),
            None => {
                let code = if ctx.side == PathSide::Daemon { Code::InvalidToolAdapterPath } else { Code::InvalidPath };
                Verdict::from_error(&ContractError::new(code, "path", "path must be a string"), None)
            }
        },
        Kind::Frame => judge_frame_bytes(&serde_json::to_vec(value).unwrap_or_default(), ctx),
    }
}

fn expected_binding(ctx: &Context) -> ExpectedBinding<'_> {
    ExpectedBinding { host_instance_id: &ctx.host_instance_id, session_id: &ctx.session_id, generation: ctx.generation }
}

fn verdict(r: Result<(), ContractError>) -> Verdict {
    match r {
        Ok(()) => Verdict::Valid,
        Err(e) => Verdict::from_error(&e, None),
    }
}

/// One item of an NDJSON stream as [`LineReader`] yields it.
#[derive(Debug, PartialEq, Eq)]
pub enum Line<'a> {
    /// A non-empty line (LF and one CR before it excluded), 1-based `number`. A line longer
    /// than the cap is cut to `cap + 1` bytes (so any limit up to the cap still refuses it)
    /// and the rest of it skipped unread into memory.
    Text {
        /// 1-based line number.
        number: usize,
        /// The line's bytes.
        bytes: &'a [u8],
    },
    /// A NUL byte: the input is not text. The reader yields nothing after it.
    Binary {
        /// The line it is on.
        number: usize,
        /// Its byte offset in the stream.
        offset: u64,
    },
}

/// Reads NDJSON lines from a stream in constant memory (one line of at most `cap + 1`
/// bytes is held at a time); a NUL byte ends the stream as [`Line::Binary`].
pub struct LineReader<R> {
    inner: std::io::BufReader<R>,
    cap: usize,
    buf: Vec<u8>,
    number: usize,
    offset: u64,
    done: bool,
    /// Bytes of `inner`'s buffer that the line last returned (borrowed from it) took: consumed
    /// at the next call.
    pending: usize,
}

impl<R: std::io::Read> LineReader<R> {
    /// A reader over `inner` keeping at most `cap + 1` bytes of a line (256 KiB reads).
    pub fn new(inner: R, cap: usize) -> Self {
        Self::with_chunk(inner, cap, 256 * 1024)
    }

    /// As [`LineReader::new`], reading `chunk` bytes at a time.
    pub fn with_chunk(inner: R, cap: usize, chunk: usize) -> Self {
        let inner = std::io::BufReader::with_capacity(chunk, inner);
        LineReader { inner, cap, buf: Vec::new(), number: 0, offset: 0, done: false, pending: 0 }
    }

    /// Whether the next line would need a read (nothing buffered): a caller writing verdicts
    /// flushes them then, so a slow or interactive producer sees each verdict without delay.
    pub fn drained(&self) -> bool {
        self.inner.buffer().len() == self.pending
    }

    /// The next non-empty line, a [`Line::Binary`] stop, or `None` at the end.
    pub fn next_line(&mut self) -> std::io::Result<Option<Line<'_>>> {
        std::io::BufRead::consume(&mut self.inner, std::mem::take(&mut self.pending));
        loop {
            if self.done {
                return Ok(None);
            }
            // The common case: the whole line is already buffered, not over the cap and
            // without a NUL byte. It is lent straight from the read buffer (no copy) and
            // consumed at the next call; every other case takes the general loop below.
            let avail = self.inner.buffer();
            if let Some(lf) = memchr::memchr(b'\n', avail) {
                let part = &avail[..lf];
                if part.len() <= self.cap + 1 && memchr::memchr(0, part).is_none() {
                    let cr = part.last() == Some(&b'\r') && part.len() <= self.cap;
                    let len = part.len() - usize::from(cr);
                    self.number += 1;
                    self.offset += lf as u64 + 1;
                    if len == 0 {
                        std::io::BufRead::consume(&mut self.inner, lf + 1);
                        continue;
                    }
                    self.pending = lf + 1;
                    return Ok(Some(Line::Text { number: self.number, bytes: &self.inner.buffer()[..len] }));
                }
            }
            self.buf.clear();
            self.number += 1;
            let mut ended = false;
            while !ended {
                let chunk = match std::io::BufRead::fill_buf(&mut self.inner) {
                    Ok(c) => c,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                };
                if chunk.is_empty() {
                    self.done = true;
                    break;
                }
                let lf = memchr::memchr(b'\n', chunk);
                let part = &chunk[..lf.unwrap_or(chunk.len())];
                if let Some(nul) = memchr::memchr(0, part) {
                    self.done = true;
                    return Ok(Some(Line::Binary { number: self.number, offset: self.offset + nul as u64 }));
                }
                let room = (self.cap + 1).saturating_sub(self.buf.len());
                self.buf.extend_from_slice(&part[..part.len().min(room)]);
                let used = lf.map_or(chunk.len(), |i| i + 1);
                ended = lf.is_some();
                std::io::BufRead::consume(&mut self.inner, used);
                self.offset += used as u64;
            }
            if self.buf.last() == Some(&b'\r') && self.buf.len() <= self.cap {
                self.buf.pop();
            }
            if !self.buf.is_empty() {
                return Ok(Some(Line::Text { number: self.number, bytes: &self.buf }));
            }
        }
    }
}

#[cfg(test)]
mod kind_tests {
    use super::Kind;

    #[test]
    fn names_are_the_serialized_names() {
        for k in [Kind::Command, Kind::Response, Kind::Event, Kind::Descriptor, Kind::Frame, Kind::Path] {
            assert_eq!(serde_json::to_value(k).unwrap(), serde_json::json!(k.as_str()));
        }
    }
}

#[cfg(test)]
mod line_reader_tests {
    use super::{Line, LineReader};

    fn all(input: &[u8], cap: usize) -> Vec<String> {
        let mut r = LineReader::with_chunk(input, cap, 3);
        let mut out = Vec::new();
        while let Some(l) = r.next_line().unwrap() {
            out.push(match l {
                Line::Text { number, bytes } => format!("{number}:{}", String::from_utf8_lossy(bytes)),
                Line::Binary { number, offset } => format!("{number}:NUL@{offset}"),
            });
        }
        out
    }

    #[test]
    fn lines_numbers_crlf_and_blank_lines() {
        assert_eq!(all(b"ab\r\n\n c\nlast", 100), ["1:ab", "3: c", "4:last"]);
    }

    #[test]
    fn an_over_long_line_is_cut_just_over_the_cap_and_the_next_line_survives() {
        assert_eq!(all(b"0123456789\nok\n", 4), ["1:01234", "2:ok"]);
    }

    #[test]
    fn every_chunk_size_gives_the_same_lines() {
        let input = b"ab\r\n\n c\n0123456789\r\nok\r\r\n\r\nlast\r";
        let want = all(input, 4);
        assert_eq!(want, ["1:ab", "3: c", "4:01234", "5:ok\r", "7:last\r"]);
        for chunk in 1..40 {
            let mut r = LineReader::with_chunk(&input[..], 4, chunk);
            let mut got = Vec::new();
            while let Some(l) = r.next_line().unwrap() {
                if let Line::Text { number, bytes } = l {
                    got.push(format!("{number}:{}", String::from_utf8_lossy(bytes)));
                }
            }
            assert_eq!(got, want, "chunk {chunk}");
        }
        let nul = b"{}\n{}\n{\"a\x00\":1}\n{}\n";
        for chunk in 1..20 {
            let mut r = LineReader::with_chunk(&nul[..], 100, chunk);
            let mut last = None;
            while let Some(l) = r.next_line().unwrap() {
                last = Some(format!("{l:?}"));
            }
            assert_eq!(last.as_deref(), Some("Binary { number: 3, offset: 9 }"), "chunk {chunk}");
        }
    }

    #[test]
    fn a_nul_byte_stops_the_stream_with_its_offset() {
        assert_eq!(all(b"{}\n{\"a\x00\":1}\n{}\n", 100), ["1:{}", "2:NUL@6"]);
    }
}
