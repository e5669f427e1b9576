//! One verdict for one document: the entry point `pi-conform validate` and the golden vectors
//! share. It only routes to the contract; it holds no protocol rule of its own.

use serde::Serialize;
use serde_json::Value;

use crate::contract::frame::{parse_adapter_frame, Binding, Direction, Disposition};
use crate::contract::{adapter_output_passes, onepass};
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
    // What an adapter sends is judged by the adapter runner's judge, the one function of
    // `contract::adapter_output` (a daemon's rules and the adapter's single-frame obligations).
    if ctx.direction == Direction::ToDaemon {
        return match adapter_output_passes(line, binding) {
            Ok(()) => Verdict::Valid,
            Err(e) => Verdict::from_error(&e.error.error, Some(e.error.disposition)),
        };
    }
    frame_by_daemon_rules(line, binding, ctx.direction)
}

/// A frame judged by the rules a daemon applies (towards the daemon) or an adapter applies
/// (towards the adapter) — for a frame travelling to the daemon, without the adapter's own
/// single-frame obligations: what a daemon must accept, which the golden frame vectors pin and
/// the daemon suite replays. (`judge_line` judges what an adapter sends with the obligations.)
pub fn judge_frame_by_daemon_rules(line: &[u8], ctx: &Context) -> Verdict {
    match &ctx.binding {
        Some(binding) => frame_by_daemon_rules(line, binding, ctx.direction),
        None => judge_frame_bytes(line, ctx),
    }
}

fn frame_by_daemon_rules(line: &[u8], binding: &Binding, direction: Direction) -> Verdict {
    // The accept path: one pass, no `Value`; anything it does not accept gets the full path,
    // which alone reports refusals.
    if onepass::accept_frame(line, binding, direction).is_some() {
        return Verdict::Valid;
    }
    match parse_adapter_frame(line, binding, direction) {
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

/// One verdict as `pi-conform validate` prints it (one line, LF included): human
/// (`line 3: invalid command: invalid_json field=line: … at column 8: …`) or, with `json`, one
/// JSON object. `label` names the input (`line 3`, `document d.json`), `at` is its JSON
/// identity (the line number, or the document's name); an `invalid_json`/`invalid_utf8`
/// verdict also says where, found again in `text`.
pub fn render_verdict(label: &str, at: Value, text: &[u8], k: Kind, verdict: &Verdict, json: bool) -> String {
    let kname = k.as_str();
    let place = match verdict {
        Verdict::Invalid { code, .. } if code == Code::InvalidJson.as_str() || code == Code::InvalidUtf8.as_str() => {
            crate::wire::decode_strict_located(text).err()
        }
        _ => None,
    };
    if json {
        let mut v = serde_json::json!({"kind": kname, "result": verdict});
        let key = if at.is_string() { "document" } else { "line" };
        v[key] = at;
        if let Some(p) = &place {
            v["position"] = serde_json::json!({"line": p.line, "column": p.column, "detail": p.detail});
        }
        return format!("{v}\n");
    }
    match verdict {
        Verdict::Valid => format!("{label}: valid {kname}\n"),
        Verdict::Invalid { code, field, message, disposition } => {
            let disp = disposition.as_deref().map(|d| format!(" ({d})")).unwrap_or_default();
            let at = match &place {
                Some(p) if label.starts_with("line") => format!(" at column {}: {}", p.column, p.detail),
                Some(p) => format!(" at line {} column {}: {}", p.line, p.column, p.detail),
                None => String::new(),
            };
            format!("{label}: invalid {kname}: {code} field={field}{disp}: {message}{at}\n")
        }
    }
}

/// One line of an NDJSON stream as [`LineReader`] yields it: a non-empty line (LF and one CR
/// before it excluded), whatever bytes it holds (a NUL or another raw control byte, invalid
/// UTF-8: each is a protocol case for the judge, not a reason to stop). A line longer than the
/// cap is cut to `cap + 1` bytes (so any limit up to the cap still refuses it) and the rest of
/// it skipped unread into memory.
#[derive(Debug, PartialEq, Eq)]
pub struct Line<'a> {
    /// 1-based line number.
    pub number: usize,
    /// The line's bytes.
    pub bytes: &'a [u8],
}

/// Reads NDJSON lines from a stream in constant memory (one line of at most `cap + 1`
/// bytes is held at a time).
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

    /// The next non-empty line, or `None` at the end.
    pub fn next_line(&mut self) -> std::io::Result<Option<Line<'_>>> {
        std::io::BufRead::consume(&mut self.inner, std::mem::take(&mut self.pending));
        loop {
            if self.done {
                return Ok(None);
            }
            // The common case: the whole line is already buffered and not over the cap. It is
            // lent straight from the read buffer (no copy) and
            // consumed at the next call; every other case takes the general loop below.
            let avail = self.inner.buffer();
            if let Some(lf) = memchr::memchr(b'\n', avail) {
                let part = &avail[..lf];
                if part.len() <= self.cap + 1 {
                    let cr = part.last() == Some(&b'\r') && part.len() <= self.cap;
                    let len = part.len() - usize::from(cr);
                    self.number += 1;
                    self.offset += lf as u64 + 1;
                    if len == 0 {
                        std::io::BufRead::consume(&mut self.inner, lf + 1);
                        continue;
                    }
                    self.pending = lf + 1;
                    return Ok(Some(Line { number: self.number, bytes: &self.inner.buffer()[..len] }));
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
                return Ok(Some(Line { number: self.number, bytes: &self.buf }));
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
    use super::LineReader;

    fn all(input: &[u8], cap: usize) -> Vec<String> {
        let mut r = LineReader::with_chunk(input, cap, 3);
        let mut out = Vec::new();
        while let Some(l) = r.next_line().unwrap() {
            out.push(format!("{}:{}", l.number, String::from_utf8_lossy(l.bytes)));
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
                got.push(format!("{}:{}", l.number, String::from_utf8_lossy(l.bytes)));
            }
            assert_eq!(got, want, "chunk {chunk}");
        }
        // Raw control bytes and invalid UTF-8 are bytes of a line like any other.
        let raw = b"{}\n\x00\n{\"a\x00\":1}\n\xff\x01\n{}\n";
        for chunk in 1..20 {
            let mut r = LineReader::with_chunk(&raw[..], 100, chunk);
            let mut got = Vec::new();
            while let Some(l) = r.next_line().unwrap() {
                got.push((l.number, l.bytes.to_vec()));
            }
            let want: Vec<(usize, Vec<u8>)> = vec![
                (1, b"{}".to_vec()),
                (2, b"\x00".to_vec()),
                (3, b"{\"a\x00\":1}".to_vec()),
                (4, b"\xff\x01".to_vec()),
                (5, b"{}".to_vec()),
            ];
            assert_eq!(got, want, "chunk {chunk}");
        }
    }

    #[test]
    fn a_nul_byte_is_a_byte_of_its_line_and_the_stream_goes_on() {
        assert_eq!(all(b"{}\n{\"a\x00\":1}\n{}\n", 100), ["1:{}", "2:{\"a\u{0}\":1}", "3:{}"]);
    }
}
