//! The case model shared by the adapter and daemon suites: catalogue entries, statuses,
//! results and wire transcripts.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// MUST (a failure fails the run) or SHOULD (a failure is a warning).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "UPPERCASE")]
pub enum Level {
    /// A requirement.
    #[value(name = "must")]
    Must,
    /// A recommendation.
    #[value(name = "should")]
    Should,
}

/// One catalogue entry (`conformance/*-cases.json`).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CaseMeta {
    /// Stable id (`adapter.bind.echo-exact`), never derived from order.
    pub id: String,
    /// Clause of `conformance/SPEC.md`.
    pub clause: String,
    /// MUST or SHOULD.
    pub level: Level,
    /// Tags for filtering.
    pub tags: Vec<String>,
    /// The requirement, in one sentence.
    pub requirement: String,
    /// The outcomes that pass (`bound`, `closed`, `result:ok`, `error:invalid_path`, …).
    pub accepted: Vec<String>,
    /// The techniques the case applies (closed vocabulary, [`Technique`]; an unknown word is a
    /// load error). Every catalogue entry names at least one (`tests/coverage.rs`); an entry
    /// without the field loads (so a catalogue merged from elsewhere still runs) and is then
    /// reported by that test.
    #[serde(default)]
    pub techniques: Vec<Technique>,
    /// The level when the runner minted the grant itself (`adapter --command`, `selftest`):
    /// the runner then knows the grant's operations and ceilings, so a case it can only grade
    /// SHOULD against a descriptor becomes MUST (issue 24 item 6).
    #[serde(default, rename = "levelWithGrant", skip_serializing_if = "Option::is_none")]
    pub level_with_grant: Option<Level>,
}

impl CaseMeta {
    /// The entry as graded in a run where the runner does (`true`) or does not know the grant.
    pub fn graded(mut self, grant_known: bool) -> CaseMeta {
        if grant_known {
            if let Some(l) = self.level_with_grant {
                self.level = l;
            }
        }
        self
    }
}

/// How a case probes its clause (issue 24): the closed vocabulary of `techniques`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
#[value(rename_all = "kebab-case")]
pub enum Technique {
    /// The rule holds on a well-formed input (the happy path).
    Positive,
    /// A broken input is refused, and the refusal is the one provoked.
    Negative,
    /// Exactly at a limit: accepted, and not marked truncated where that applies.
    Boundary,
    /// One past a limit: refused or truncated.
    OnePast,
    /// The case provokes a state (in flight, queue full, work at EOF) and depends on reaching it.
    ProvokedState,
    /// Another JSON (or path) spelling of the same value.
    Spelling,
    /// A fixture entry of a kind or size class the rule distinguishes.
    FixtureEdge,
    /// A transition (EOF, revoke, replacement, close, restart) and what it leaves behind.
    Lifecycle,
}

impl Technique {
    /// Every technique, in report order.
    pub const ALL: [Technique; 8] = [
        Technique::Positive,
        Technique::Negative,
        Technique::Boundary,
        Technique::OnePast,
        Technique::ProvokedState,
        Technique::Spelling,
        Technique::FixtureEdge,
        Technique::Lifecycle,
    ];

    /// The catalogue word (`one-past`).
    pub fn as_str(self) -> &'static str {
        match self {
            Technique::Positive => "positive",
            Technique::Negative => "negative",
            Technique::Boundary => "boundary",
            Technique::OnePast => "one-past",
            Technique::ProvokedState => "provoked-state",
            Technique::Spelling => "spelling",
            Technique::FixtureEdge => "fixture-edge",
            Technique::Lifecycle => "lifecycle",
        }
    }
}

/// How a case ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, PartialOrd, Ord, Hash)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// The requirement holds.
    Pass,
    /// A MUST failed.
    Fail,
    /// A SHOULD failed.
    Warn,
    /// Not applicable here (with the reason).
    Skip,
    /// The harness itself broke (never green).
    Error,
}

impl Status {
    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Fail => "fail",
            Status::Warn => "warn",
            Status::Skip => "skip",
            Status::Error => "error",
        }
    }
}

/// `text` with every character that could act on a terminal or forge a report line written
/// as a visible escape (`\u{1b}`): C0 and C1 controls (LF and CR included, TAB kept), DEL, and
/// the bidirectional overrides and isolates. A peer's bytes reach reasons and transcripts; a
/// report must show them, never let them move the cursor, set a window title or start a
/// line of their own.
pub fn visible(text: &str) -> String {
    let hostile =
        |c: char| (c.is_control() && c != '\t') || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
    if !text.chars().any(hostile) {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if hostile(c) {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

/// The JSON string literals of one line (`"…"`, quotes included) that carry an escape, with
/// their byte ranges; an unterminated literal ends the scan.
pub(crate) fn escaped_literals(line: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(p) = memchr::memchr(b'"', &line[i..]) {
        let start = i + p;
        let mut j = start + 1;
        let mut escaped = false;
        while j < line.len() && line[j] != b'"' {
            if line[j] == b'\\' {
                escaped = true;
                j += 1;
            }
            j += 1;
        }
        if j >= line.len() {
            break;
        }
        if escaped {
            out.push((start, j + 1));
        }
        i = j + 1;
    }
    out
}

/// Whether `text` (lines a peer sent or the runner sent) holds `handle` in any JSON spelling:
/// as raw bytes, or inside a string literal (a key or a value) once its escapes are decoded
/// (`\u0061` for `a`, `\/` for `/`). A rule about a frame's content is about the decoded value
/// (issue 24 item 5); the line need not parse as a whole.
pub fn holds_handle(text: &[u8], handle: &str) -> bool {
    holds_text(text, handle)
}

/// Whether `text` holds `needle` in any JSON spelling, as [`holds_handle`] reads it: what the
/// engine looks for in everything an adapter sent (the sentinel's content, the absolute paths
/// of the root and the sentinel), so that an escape cannot hide it.
pub fn holds_text(text: &[u8], needle: &str) -> bool {
    if needle.is_empty() {
        return false;
    }
    if memchr::memmem::find(text, needle.as_bytes()).is_some() {
        return true;
    }
    text.split(|b| *b == b'\n').any(|line| {
        escaped_literals(line)
            .into_iter()
            .any(|(a, b)| serde_json::from_slice::<String>(&line[a..b]).is_ok_and(|s| s.contains(needle)))
    })
}

/// `text` with every spelling of `handle` shown as `<handle>`: the raw bytes, and every JSON
/// string literal whose decoded value holds it (re-encoded with the handle replaced). What a
/// transcript keeps of a line, whatever escapes the runner or the peer used.
pub fn redact_handle(text: &str, handle: &str) -> String {
    if handle.is_empty() {
        return text.to_string();
    }
    let raw = text.replace(handle, "<handle>");
    let mut out = String::with_capacity(raw.len());
    let mut last = 0;
    for line_start in std::iter::once(0).chain(raw.match_indices('\n').map(|(i, _)| i + 1)) {
        let line_end = raw[line_start..].find('\n').map_or(raw.len(), |p| line_start + p);
        for (a, b) in escaped_literals(&raw.as_bytes()[line_start..line_end]) {
            let (a, b) = (line_start + a, line_start + b);
            let Ok(decoded) = serde_json::from_str::<String>(&raw[a..b]) else { continue };
            if decoded.contains(handle) {
                out.push_str(&raw[last..a]);
                out.push_str(&serde_json::to_string(&decoded.replace(handle, "<handle>")).unwrap_or_default());
                last = b;
            }
        }
    }
    out.push_str(&raw[last..]);
    out
}

/// One line of a wire transcript.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct WireLine {
    /// `>` sent by the runner, `<` received, `#` a note (close, timeout).
    pub dir: String,
    /// The line, with every capability handle replaced by `<handle>`.
    pub text: String,
}

/// The result of one case.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CaseResult {
    /// Case id.
    pub id: String,
    /// Clause.
    pub clause: String,
    /// Level.
    pub level: Level,
    /// Outcome.
    pub status: Status,
    /// The requirement.
    pub requirement: String,
    /// What passes.
    pub expected: String,
    /// What was observed.
    pub actual: String,
    /// Why it failed, was skipped or errored (empty on pass).
    pub reason: String,
    /// The wire transcript (kept for failures, warnings and errors).
    pub transcript: Vec<WireLine>,
    /// How long it took.
    #[serde(with = "millis")]
    pub duration: Duration,
    /// Whether a baseline listed it as a known failure.
    #[serde(default)]
    pub baselined: bool,
}

mod millis {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_millis() as u64)
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }
}

/// What a case implementation reports.
#[derive(Clone, Debug)]
pub enum Outcome {
    /// The observed outcome (compared with `accepted`), plus any further violations found.
    Observed {
        /// The outcome token (`closed`, `error:busy`, …).
        token: String,
        /// Violations beyond the token (each a sentence), which fail the case.
        problems: Vec<String>,
    },
    /// Not applicable, with the reason.
    Skip(String),
    /// The harness broke.
    Error(String),
}

impl Outcome {
    /// An outcome with no further problem.
    pub fn token(t: impl Into<String>) -> Self {
        Outcome::Observed { token: t.into(), problems: vec![] }
    }

    /// An outcome with problems found while observing it.
    pub fn with(t: impl Into<String>, problems: Vec<String>) -> Self {
        Outcome::Observed { token: t.into(), problems }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: &str = "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG";

    fn escaped_all(h: &str) -> String {
        h.chars().map(|c| format!("\\u{:04x}", c as u32)).collect()
    }

    #[test]
    fn the_handle_is_found_in_every_json_spelling_and_only_whole() {
        let raw = format!("{{\"q\":\"{H}\"}}");
        assert!(holds_handle(raw.as_bytes(), H));
        let all = format!("{{\"q\":\"x{}y\"}}\n", escaped_all(H));
        assert!(!all.contains(H));
        assert!(holds_handle(all.as_bytes(), H));
        let first = format!("{{\"k\":1}}\n{{\"{}{}\":true}}", escaped_all(&H[..1]), &H[1..]);
        assert!(holds_handle(first.as_bytes(), H), "as a key, on a later line");
        let solidus = format!("[\"a\\/b{}\"]", escaped_all(H));
        assert!(holds_handle(solidus.as_bytes(), "a/b"));
        assert!(holds_handle(solidus.as_bytes(), H));
        // Pieces, a prefix, another case, an unterminated literal: not the handle.
        let pieces = format!("[\"{}\",\"{}\"]", &H[..20], &H[20..]);
        assert!(!holds_handle(pieces.as_bytes(), H));
        assert!(!holds_handle(format!("\"{}\"", escaped_all(&H[..42])).as_bytes(), H));
        assert!(!holds_handle(format!("\"{}\"", escaped_all(&H.to_uppercase())).as_bytes(), H));
        assert!(!holds_handle(format!("\"{}", escaped_all(H)).as_bytes(), H));
    }

    #[test]
    fn a_transcript_shows_no_spelling_of_the_handle() {
        let line = format!(
            "{{\"a\":\"{H}\",\"b\":\"x{}y\",\"{}{}\":0,\"c\":\"\\u0041 other\"}}",
            escaped_all(H),
            escaped_all(&H[..3]),
            &H[3..]
        );
        let shown = redact_handle(&line, H);
        assert!(!holds_handle(shown.as_bytes(), H), "{shown}");
        assert_eq!(
            shown, "{\"a\":\"<handle>\",\"b\":\"x<handle>y\",\"<handle>\":0,\"c\":\"\\u0041 other\"}",
            "the rest of the line is kept as sent"
        );
        assert_eq!(redact_handle("no json at all", H), "no json at all");
    }
}
