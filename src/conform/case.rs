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
