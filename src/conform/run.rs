//! The runner engine: select cases, run each with a fresh fixture and fresh connections,
//! apply the side-effect oracle and the secret scan, classify, apply the baseline.

use std::collections::BTreeSet;
use std::time::{Duration, Instant, SystemTime};

use serde::Serialize;

use super::adapter::fixture::{diff, lay, snapshot, Fixture, Snapshot, SENTINEL_PIECES};
use super::adapter::registry;
use super::adapter::script;
use super::adapter::{Ctx, Target};
use super::case::{holds_handle, holds_text, CaseMeta, CaseResult, Level, Outcome, Status, Technique};

/// Which cases to run.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    /// Keep ids starting with any of these (all when empty).
    pub id_prefixes: Vec<String>,
    /// Keep these levels (all when empty).
    pub levels: Vec<Level>,
    /// Keep cases with any of these tags (all when empty).
    pub tags: Vec<String>,
    /// Keep cases that apply any of these techniques (all when empty).
    pub techniques: Vec<Technique>,
}

impl Filter {
    /// Whether `m` is selected.
    pub fn keeps(&self, m: &CaseMeta) -> bool {
        (self.id_prefixes.is_empty() || self.id_prefixes.iter().any(|p| m.id.starts_with(p.as_str())))
            && (self.levels.is_empty() || self.levels.contains(&m.level))
            && (self.tags.is_empty() || self.tags.iter().any(|t| m.tags.contains(t)))
            && (self.techniques.is_empty() || self.techniques.iter().any(|t| m.techniques.contains(t)))
    }
}

/// Known failures: one case id per line, `#` starts a comment.
#[derive(Clone, Debug, Default)]
pub struct Baseline {
    /// The ids.
    pub ids: BTreeSet<String>,
}

impl Baseline {
    /// Parse a baseline file's text.
    pub fn parse(text: &str) -> Baseline {
        let ids = text
            .lines()
            .map(|l| l.split('#').next().unwrap_or("").trim())
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect();
        Baseline { ids }
    }
}

/// Side effects listed one per line in a case's reasons; more are counted, not listed (a peer
/// that creates thousands of files must not turn the report into a directory listing).
const SIDE_EFFECTS_LISTED: usize = 16;

/// Add the side effects `found` to `oracle`, each prefixed with `what`, at most
/// [`SIDE_EFFECTS_LISTED`] of them and then their count.
fn side_effects(oracle: &mut Vec<String>, found: Vec<String>, what: &str) {
    let more = found.len().saturating_sub(SIDE_EFFECTS_LISTED);
    oracle.extend(found.into_iter().take(SIDE_EFFECTS_LISTED).map(|d| format!("{what}: {d}")));
    if more > 0 {
        oracle.push(format!("{what}: {more} more not listed"));
    }
}

/// A whole run.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// `adapter` or `daemon`.
    pub suite: String,
    /// What was checked (socket path).
    pub target: String,
    /// Every selected case that ran, in catalogue order.
    pub results: Vec<CaseResult>,
    /// Baselined cases that passed (the baseline is stale).
    pub stale: Vec<String>,
    /// Baseline ids that name no case at all.
    pub unknown_baseline_ids: Vec<String>,
    /// When the run started (wall clock).
    #[serde(skip)]
    pub started_at: SystemTime,
    /// How long the whole run took.
    #[serde(skip)]
    pub duration: Duration,
    /// Selected cases that did not run because the run was stopped early (`--fail-fast`,
    /// `--max-fail`), in catalogue order.
    pub not_run: Vec<String>,
    /// Adapter suite: whether the runner minted the grant (`--command`, selftest) and so
    /// graded the cases whose level follows that knowledge at MUST; `None` for the daemon suite.
    pub grant_known: Option<bool>,
}

/// What the engine does after a case: go on, or stop the run (the remaining cases are
/// reported as not run). A progress callback returning `()` always goes on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    /// Run the next case.
    Continue,
    /// Stop here.
    Stop,
}

impl From<()> for Flow {
    fn from((): ()) -> Flow {
        Flow::Continue
    }
}

impl Baseline {
    /// Whether `r` is a failure (or warning) this baseline lists.
    pub fn covers(&self, r: &CaseResult) -> bool {
        matches!(r.status, Status::Fail | Status::Warn) && self.ids.contains(&r.id)
    }
}

/// Counts failures as cases finish and says when to stop (`--fail-fast` is a limit of 1).
/// A failure is a MUST that failed (not baselined) or a harness error; warnings, skips and
/// known failures never stop a run.
#[derive(Clone, Copy, Debug, Default)]
pub struct FailLimit {
    /// Stop once this many failures were seen (none: never).
    pub max: Option<usize>,
    seen: usize,
}

impl FailLimit {
    /// A limit of `max` failures (none: unlimited).
    pub fn new(max: Option<usize>) -> FailLimit {
        FailLimit { max, seen: 0 }
    }

    /// Count `r`; `Stop` once the limit is reached.
    pub fn after(&mut self, r: &CaseResult) -> Flow {
        if is_failure(r) {
            self.seen += 1;
        }
        match self.max {
            Some(m) if self.seen >= m => Flow::Stop,
            _ => Flow::Continue,
        }
    }
}

/// Whether `r` fails the run: a MUST failure not in the baseline, or a harness error.
pub fn is_failure(r: &CaseResult) -> bool {
    matches!((r.status, r.baselined), (Status::Fail, false) | (Status::Error, _))
}

/// Exit code: conformant.
pub const EXIT_CONFORMANT: u8 = 0;
/// Exit code: at least one MUST failed (not baselined).
pub const EXIT_FAILURES: u8 = 1;
/// Exit code: a usage error (bad arguments, unusable input files, a `--root` the fixture cannot
/// be laid in); nothing was judged.
pub const EXIT_USAGE: u8 = 2;
/// Exit code: everything else fine, but a baselined case now passes.
pub const EXIT_STALE_BASELINE: u8 = 3;
/// Exit code: the target could not be reached at all: nothing answers on the socket (no
/// connection, or a connection on which nothing is ever said), or the `--command` adapter
/// did not start.
pub const EXIT_UNREACHABLE: u8 = 4;
/// Exit code: inconclusive: the harness broke on some case, or the target answered but not so
/// that the suite could run (a refused preflight bind, a handshake without the host's id).
pub const EXIT_INCONCLUSIVE: u8 = 5;

/// Counts by status.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct Summary {
    /// Passed.
    pub passed: usize,
    /// Failed (MUST), not baselined.
    pub failed: usize,
    /// Failed but listed in the baseline.
    pub baselined: usize,
    /// SHOULD failed.
    pub warned: usize,
    /// Skipped.
    pub skipped: usize,
    /// Harness errors.
    pub errors: usize,
    /// Stale baseline entries.
    pub stale: usize,
}

impl Report {
    /// Counts.
    pub fn summary(&self) -> Summary {
        let mut s = Summary { stale: self.stale.len(), ..Summary::default() };
        for r in &self.results {
            match (r.status, r.baselined) {
                (Status::Pass, _) => s.passed += 1,
                (Status::Fail, true) | (Status::Warn, true) => s.baselined += 1,
                (Status::Fail, false) => s.failed += 1,
                (Status::Warn, false) => s.warned += 1,
                (Status::Skip, _) => s.skipped += 1,
                (Status::Error, _) => s.errors += 1,
            }
        }
        s
    }

    /// The exit code: harness errors first, then failures, then a stale baseline.
    pub fn exit_code(&self) -> u8 {
        let s = self.summary();
        if s.errors > 0 {
            EXIT_INCONCLUSIVE
        } else if s.failed > 0 {
            EXIT_FAILURES
        } else if s.stale > 0 {
            EXIT_STALE_BASELINE
        } else {
            EXIT_CONFORMANT
        }
    }
}

/// Why a run could not happen.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Nothing answers on the socket.
    #[error("target unreachable: {0}")]
    Unreachable(String),
    /// The target answered, but not so that the suite could run (exit 5).
    #[error("{0}")]
    Refused(String),
    /// The harness cannot work (fixture directory unusable, catalogue broken).
    #[error("harness error: {0}")]
    Harness(String),
}

/// Run the adapter suite against `target`.
pub fn run_adapter<R: Into<Flow>>(
    target: &Target,
    catalogue: &[CaseMeta],
    filter: &Filter,
    baseline: Option<&Baseline>,
    mut progress: impl FnMut(usize, usize, &CaseResult) -> R,
) -> Result<Report, RunError> {
    let (started_at, clock) = (SystemTime::now(), Instant::now());
    super::adapter::conn::connect_within(&target.socket, target.step)
        .map_err(|e| RunError::Unreachable(format!("{}: {e}", target.socket.display())))?;
    let reg = registry();
    // Graded for this run: MUST where the runner minted the grant and the entry says so.
    let graded: Vec<CaseMeta> = catalogue.iter().map(|m| m.clone().graded(target.grant_known)).collect();
    let selected: Vec<&CaseMeta> = graded.iter().filter(|m| filter.keeps(m)).collect();
    // Golden vectors replayed as cases (`vector:<id>`), loaded only when one is selected.
    let prefix = super::daemon::replay::PREFIX;
    let vectors = if selected.iter().any(|m| m.id.starts_with(prefix)) {
        Some(
            crate::vectors::VectorSet::load(&target.vectors)
                .map_err(|e| RunError::Harness(format!("cannot load the golden vectors: {e}")))?,
        )
    } else {
        None
    };
    let mut results = Vec::new();
    let mut state = FixtureState::default();
    for (i, meta) in selected.iter().enumerate() {
        let f = reg.iter().find(|(id, _)| *id == meta.id).map(|(_, f)| *f);
        let vector = meta.id.strip_prefix(prefix).filter(|_| f.is_none());
        let mut r = match (f, vector, &vectors) {
            (Some(f), _, _) => run_one(target, meta, &f, &mut state)?,
            (None, Some(id), Some(set)) => {
                run_one(target, meta, &|c: &mut Ctx<'_>| super::adapter::replay::run(c, set, id), &mut state)?
            }
            (None, None, _) if script::sessions().iter().chain(&target.sessions).any(|s| s.meta.id == meta.id) => {
                run_one(target, meta, &|c: &mut Ctx<'_>| script::run(c, &meta.id), &mut state)?
            }
            _ => return Err(RunError::Harness(format!("case {} has no implementation", meta.id))),
        };
        r.baselined = baseline.is_some_and(|b| b.covers(&r));
        let flow = progress(i + 1, selected.len(), &r).into();
        results.push(r);
        if flow == Flow::Stop {
            break;
        }
    }
    let not_run = selected[results.len()..].iter().map(|m| m.id.clone()).collect();
    let mut rep = finish("adapter", target.socket.display().to_string(), results, catalogue, baseline);
    rep.grant_known = Some(target.grant_known);
    (rep.started_at, rep.duration, rep.not_run) = (started_at, clock.elapsed(), not_run);
    Ok(rep)
}

/// Apply the baseline and assemble the report.
pub fn finish(
    suite: &str,
    target: String,
    mut results: Vec<CaseResult>,
    catalogue: &[CaseMeta],
    baseline: Option<&Baseline>,
) -> Report {
    let mut stale = Vec::new();
    let mut unknown = Vec::new();
    if let Some(b) = baseline {
        for r in &mut results {
            if b.ids.contains(&r.id) {
                match r.status {
                    Status::Fail | Status::Warn => r.baselined = true,
                    Status::Pass => stale.push(r.id.clone()),
                    _ => {}
                }
            }
        }
        unknown = b.ids.iter().filter(|id| !catalogue.iter().any(|m| &m.id == *id)).cloned().collect();
    }
    Report {
        suite: suite.into(),
        target,
        results,
        stale,
        unknown_baseline_ids: unknown,
        started_at: SystemTime::now(),
        duration: Duration::ZERO,
        not_run: Vec::new(),
        grant_known: None,
    }
}

/// The fixture as laid, and whether the trees still equal it (then it is not laid again).
#[derive(Default)]
struct FixtureState {
    laid: Option<(Fixture, Snapshot, Snapshot)>,
    pristine: bool,
}

fn run_one(
    target: &Target,
    meta: &CaseMeta,
    f: &dyn Fn(&mut Ctx<'_>) -> Outcome,
    state: &mut FixtureState,
) -> Result<CaseResult, RunError> {
    if !state.pristine || state.laid.is_none() {
        let fx = lay(&target.root, &target.sentinel)
            .map_err(|e| RunError::Harness(format!("cannot lay the fixture: {e}")))?;
        state.laid = Some((fx, snapshot(&target.root), snapshot(&target.sentinel)));
    }
    let Some((fixture, before_root, before_sentinel)) = state.laid.clone() else {
        return Err(RunError::Harness("no fixture".into()));
    };
    let started = Instant::now();
    let mut ctx = Ctx::new(target, &fixture);
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&mut ctx)))
        .unwrap_or_else(|_| Outcome::Error("the case panicked".into()));
    // Let the adapter finish anything a misbehaving peer may still do before judging.
    std::thread::sleep(ctx.settle);
    // Every case, a replayed vector's and a script's too, carries what the frame judges found.
    let outcome = ctx.judged(outcome);
    let mut oracle = Vec::new();
    // What breaks a MUST whatever the case tests: a frame the contract refuses (the frame
    // judge's clauses are all MUSTs) and anything outside the root (PC-7.2).
    let mut must: Vec<String> =
        ctx.violations.borrow().iter().filter(|v| !v.starts_with(super::adapter::judge::HARNESS)).cloned().collect();
    let allowed: Vec<&str> = ctx.allowed.iter().map(String::as_str).collect();
    let after_root = snapshot(&target.root);
    let after_sentinel = snapshot(&target.sentinel);
    side_effects(&mut oracle, diff(&before_root, &after_root, &allowed), "unexpected side effect in the root");
    side_effects(&mut must, diff(&before_sentinel, &after_sentinel, &[]), "side effect OUTSIDE the root (sentinel)");
    state.pristine = after_root == before_root && after_sentinel == before_sentinel;
    let received = ctx.received.borrow().clone();
    // In any JSON spelling: a rule about a frame's content is about the decoded value.
    if target.handles().into_iter().any(|h| holds_handle(&received, h)) {
        oracle.push("the adapter sent the capability handle".into());
    }
    if SENTINEL_PIECES.iter().any(|piece| holds_text(&received, piece)) {
        must.push("the adapter sent content from outside the root (sentinel)".into());
    }
    // Messages hold no absolute path (PC-5): neither the root's nor the sentinel's, which a
    // `--sentinel` elsewhere does not share a prefix with.
    for (path, what) in [(&target.root, "root"), (&target.sentinel, "sentinel")] {
        let text = path.to_string_lossy();
        if text.len() > 1 && holds_text(&received, &text) {
            oracle.push(format!("the adapter revealed the absolute {what} path"));
        }
    }
    let transcript = ctx.transcript.borrow().clone();
    Ok(classify(meta, ADAPTER, outcome, Found { oracle, must }, transcript, started.elapsed()))
}

/// What the engine found beside a case's own outcome.
#[derive(Clone, Debug, Default)]
pub struct Found {
    /// Findings at the case's level (a side effect in the root the case did not allow, the
    /// handles of every grant in what the peer sent: another grant's is only a SHOULD).
    pub oracle: Vec<String>,
    /// Breaches of a MUST whatever the case tests (a frame the contract refuses, anything
    /// outside the root, a handle or the endpoint given to a client): they fail a SHOULD case
    /// too, and a case that was skipped.
    pub must: Vec<String>,
}

/// Turn an outcome (plus problems found by the engine) into a case result.
pub fn classify(
    meta: &CaseMeta,
    peer: &str,
    outcome: Outcome,
    found: Found,
    transcript: Vec<super::case::WireLine>,
    duration: std::time::Duration,
) -> CaseResult {
    let Found { oracle, must } = found;
    let mut expected = meta.accepted.join(" | ");
    let outcome = match outcome {
        // A MUST broken while the case found nothing to test is still a failure.
        Outcome::Skip(_) if !must.is_empty() => Outcome::with("contract-violation", vec![]),
        o => o,
    };
    let (status, actual, reason) = match outcome {
        Outcome::Skip(why) => (Status::Skip, "skipped".to_string(), why),
        Outcome::Error(why) => (Status::Error, "harness error".to_string(), why),
        Outcome::Observed { token, mut problems } => {
            problems.extend(oracle);
            let breaches_must = !must.is_empty();
            for m in must {
                if !problems.contains(&m) {
                    problems.push(m);
                }
            }
            let accepted = meta.accepted.contains(&token);
            let mut why = Vec::new();
            if breaches_must && meta.level == Level::Should {
                why.push(format!("{peer} broke a MUST beside what this SHOULD case tests"));
            }
            if !accepted {
                why.push(instead(meta, peer, &token));
            } else if !problems.is_empty() && !problems[0].starts_with("PC-") {
                // Findings of the case itself: say which rule they break first.
                why.push(format!("{peer} broke {}", rule(meta)));
            }
            let violations = problems.len();
            why.extend(problems);
            let status = match (why.is_empty(), meta.level) {
                (true, _) => Status::Pass,
                (false, Level::Must) => Status::Fail,
                (false, Level::Should) if breaches_must => Status::Fail,
                (false, Level::Should) => Status::Warn,
            };
            // The outcome was an accepted one but something else was wrong: say so in
            // Expected/Actual, never "expected X, actual X".
            let actual = if accepted && violations > 0 {
                expected = format!("{expected}, with every frame and side effect within the contract");
                let s = if violations == 1 { "" } else { "s" };
                format!("{token}, with {violations} violation{s} (see Why)")
            } else {
                token
            };
            (status, actual, why.join("; "))
        }
    };
    let keep = !matches!(status, Status::Pass | Status::Skip);
    // What the peer sent reaches `actual`, `reason` and the transcript: no report may pass
    // its control characters on (terminal escapes, forged lines).
    let transcript = if keep {
        transcript.into_iter().map(|l| super::case::WireLine { text: super::case::visible(&l.text), ..l }).collect()
    } else {
        Vec::new()
    };
    CaseResult {
        id: meta.id.clone(),
        clause: meta.clause.clone(),
        level: meta.level,
        status,
        requirement: meta.requirement.clone(),
        expected,
        actual: super::case::visible(&actual),
        reason: super::case::visible(&reason),
        transcript,
        duration,
        baselined: false,
    }
}

/// Run the daemon suite against `target`.
pub fn run_daemon<R: Into<Flow>>(
    target: &super::daemon::DaemonTarget,
    catalogue: &[CaseMeta],
    filter: &Filter,
    baseline: Option<&Baseline>,
    mut progress: impl FnMut(usize, usize, &CaseResult) -> R,
) -> Result<Report, RunError> {
    let (started_at, clock) = (SystemTime::now(), Instant::now());
    let mut host = super::daemon::read_host(&target.socket, target.step).map_err(|e| match e {
        super::daemon::HostError::Unreachable(m) => RunError::Unreachable(format!("{}: {m}", target.socket.display())),
        super::daemon::HostError::Answered(m) => RunError::Refused(format!("{}: {m}", target.socket.display())),
    })?;
    std::fs::create_dir_all(&target.cwd)
        .map_err(|e| RunError::Harness(format!("cannot create the session cwd: {e}")))?;
    let probe = super::daemon::probe::Probe::start(&target.cwd)
        .map_err(|e| RunError::Harness(format!("cannot start the probe adapter: {e}")))?;
    let endpoint = probe.socket.to_string_lossy().into_owned();
    let reg = super::daemon::cases::registry();
    let daemon_sessions = super::daemon::script::sessions();
    let selected: Vec<&CaseMeta> = catalogue.iter().filter(|m| filter.keeps(m)).collect();
    // Golden vectors replayed as cases (`vector:<id>`), loaded only when one is selected.
    let replay = super::daemon::replay::PREFIX;
    let vectors = if selected.iter().any(|m| m.id.starts_with(replay)) {
        Some(
            crate::vectors::VectorSet::load(&target.vectors)
                .map_err(|e| RunError::Harness(format!("cannot load the golden vectors: {e}")))?,
        )
    } else {
        None
    };
    let mut results = Vec::new();
    for (i, meta) in selected.iter().enumerate() {
        let f = reg.iter().find(|(id, _)| *id == meta.id).map(|(_, f)| *f);
        let vector = meta.id.strip_prefix(replay).filter(|_| f.is_none());
        let session = f.is_none()
            && vector.is_none()
            && daemon_sessions.iter().chain(&target.sessions).any(|s| s.meta.id == meta.id);
        if f.is_none() && vector.is_none() && !session {
            return Err(RunError::Harness(format!("case {} has no implementation", meta.id)));
        }
        let started = Instant::now();
        let first_link = probe.seen().connections;
        let mut ctx = super::daemon::DCtx::new(target, &probe, host.clone(), i);
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match (f, vector, &vectors) {
            (Some(f), _, _) => f(&mut ctx),
            (None, Some(id), Some(set)) => super::daemon::replay::run(&mut ctx, set, id),
            _ if session => super::daemon::script::run(&mut ctx, &meta.id),
            _ => Outcome::Error("no implementation".into()),
        }))
        .unwrap_or_else(|_| Outcome::Error("the case panicked".into()));
        host = ctx.host.clone();
        // Every finding of the engine on a daemon breaks a MUST, whatever the case tests.
        let mut must = Vec::new();
        let received = ctx.received.borrow().clone();
        if ctx.handles.iter().any(|h| holds_handle(&received, h)) {
            must.push("the daemon sent a capability handle to a client".into());
        }
        // PC-6: the endpoint never reaches a status, event, error or response either. The
        // probe's socket path is the runner's own (a private directory of its own name, never
        // part of the cwd or of anything else a client sends), so it cannot appear by chance.
        if std::iter::once(&endpoint).chain(&ctx.endpoints).any(|e| holds_handle(&received, e)) {
            must.push(
                "PC-6 (MUST): the daemon sent a client the adapter endpoint path (it must never reach a response, \
                 event, error or status)"
                    .into(),
            );
        }
        // Every frame the daemon sent, to a client or to the probe, is judged by the contract.
        must.extend(super::daemon::judge_client_lines(&received));
        must.extend(probe.seen().violations.into_iter().filter(|(n, _)| *n >= first_link).map(|(_, why)| why));
        let transcript = ctx.transcript.borrow().clone();
        let mut r = classify(meta, DAEMON, outcome, Found { oracle: vec![], must }, transcript, started.elapsed());
        r.baselined = baseline.is_some_and(|b| b.covers(&r));
        let flow = progress(i + 1, selected.len(), &r).into();
        results.push(r);
        if flow == Flow::Stop {
            break;
        }
    }
    let not_run = selected[results.len()..].iter().map(|m| m.id.clone()).collect();
    let mut rep = finish("daemon", target.socket.display().to_string(), results, catalogue, baseline);
    (rep.started_at, rep.duration, rep.not_run) = (started_at, clock.elapsed(), not_run);
    Ok(rep)
}

/// The peer the adapter suite judges, as its findings name it.
pub const ADAPTER: &str = "the adapter";
/// The peer the daemon suite judges.
pub const DAEMON: &str = "the daemon";

/// What an outcome token means, as a verb phrase: `close the connection`, or in the past
/// tense `closed the connection`.
pub fn token_phrase(token: &str, past: bool) -> String {
    let (answer, close, send, end) =
        if past { ("answered", "closed", "sent", "ended in") } else { ("answer", "close", "send", "end in") };
    token
        .split('+')
        .map(|t| match t {
            "closed" => format!("{close} the connection"),
            "timeout" if past => "answered nothing within the step budget".to_string(),
            "timeout" => "answer nothing within the step budget".to_string(),
            "garbage" => format!("{send} a line that is not JSON"),
            "result:ok" | "ok" => format!("{answer} ok:true"),
            "bound" => format!("{answer} `bound`"),
            t => match t.strip_prefix("error:") {
                Some(code) => match code.split_once('@') {
                    Some((code, field)) => format!("{answer} error `{code}` naming the member `{field}`"),
                    None => format!("{answer} error `{code}`"),
                },
                None => match t.split_once(":line-of-") {
                    // `fs.read:line-of-N-bytes-over-M` (the response budget case).
                    Some((op, size)) => format!("{send} a {op} result line of {}", size.replace('-', " ")),
                    None => format!("{end} `{t}`"),
                },
            },
        })
        .collect::<Vec<_>>()
        .join(" and ")
}

/// `PC-x (LEVEL): requirement`.
fn rule(meta: &CaseMeta) -> String {
    let level = match meta.level {
        Level::Must => "MUST",
        Level::Should => "SHOULD",
    };
    format!("{} ({level}): {}", meta.clause, meta.requirement.trim_end_matches('.'))
}

/// Whether `token` is a wire outcome [`token_phrase`] can say as an action (not a case's own
/// summary word such as `busy-seen`).
fn is_wire_token(token: &str) -> bool {
    token.split('+').all(|t| {
        matches!(t, "closed" | "timeout" | "garbage" | "result:ok" | "ok" | "bound") || t.starts_with("error:")
    })
}

/// The "Why" of an outcome that is not an accepted one: what the peer did, the rule (clause,
/// level and requirement), and what it should do instead where that is a wire outcome (a
/// case's own summary words add nothing to the requirement).
fn instead(meta: &CaseMeta, peer: &str, token: &str) -> String {
    let mut why = format!("{peer} {}; {}", token_phrase(token, true), rule(meta));
    if meta.accepted.iter().all(|t| is_wire_token(t)) {
        let alternatives: Vec<String> = meta.accepted.iter().map(|t| token_phrase(t, false)).collect();
        why.push_str(&format!("; it should {} instead", alternatives.join(", or ")));
    }
    why
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(accepted: &[&str]) -> CaseMeta {
        CaseMeta {
            id: "adapter.stat.not-found".into(),
            clause: "PC-5.3.stat".into(),
            level: Level::Must,
            tags: vec![],
            requirement: "A missing path is not_found.".into(),
            accepted: accepted.iter().map(|s| s.to_string()).collect(),
            techniques: vec![],
            level_with_grant: None,
        }
    }

    fn judged(m: &CaseMeta, o: Outcome) -> CaseResult {
        classify(m, ADAPTER, o, Found::default(), vec![], Duration::ZERO)
    }

    #[test]
    fn side_effects_are_listed_up_to_a_cap_then_counted() {
        let found = |n: usize| (0..n).map(|i| format!("created f{i}")).collect::<Vec<_>>();
        let mut oracle = Vec::new();
        side_effects(&mut oracle, found(SIDE_EFFECTS_LISTED), "in the root");
        assert_eq!(oracle.len(), SIDE_EFFECTS_LISTED, "{oracle:?}");
        assert!(!oracle.iter().any(|l| l.contains("more")));
        let mut oracle = Vec::new();
        side_effects(&mut oracle, found(1001), "in the root");
        assert_eq!(oracle.len(), SIDE_EFFECTS_LISTED + 1);
        assert_eq!(oracle[0], "in the root: created f0");
        assert_eq!(oracle[SIDE_EFFECTS_LISTED], format!("in the root: {} more not listed", 1001 - SIDE_EFFECTS_LISTED));
    }

    #[test]
    fn a_peers_control_characters_reach_no_report_raw() {
        let evil = "\u{1b}]0;pwned\u{7}\u{1b}[2J\u{0}\nverdict: CONFORMANT\u{202e}";
        let line = crate::conform::case::WireLine { dir: "<".into(), text: evil.into() };
        let r = classify(
            &meta(&["error:not_found"]),
            ADAPTER,
            Outcome::Observed { token: format!("error:{evil}"), problems: vec![format!("PC-5.3: {evil}")] },
            Found::default(),
            vec![line],
            Duration::ZERO,
        );
        assert_eq!(r.status, Status::Fail);
        for text in [&r.actual, &r.reason, &r.transcript[0].text] {
            assert!(!text.chars().any(|c| c.is_control() || c == '\u{202e}'), "raw control left in {text:?}");
            assert!(text.contains("\\u{1b}]0;pwned\\u{7}") && text.contains("\\u{a}verdict"), "{text:?}");
        }
        let human = crate::conform::report::human(
            &Report {
                suite: "adapter".into(),
                target: "t.sock".into(),
                results: vec![r],
                stale: vec![],
                unknown_baseline_ids: vec![],
                started_at: std::time::SystemTime::UNIX_EPOCH,
                duration: Duration::ZERO,
                not_run: vec![],
                grant_known: None,
            },
            crate::conform::report::Detail::Normal,
            false,
        );
        assert!(!human.contains('\u{1b}') && !human.lines().any(|l| l.starts_with("verdict: CONFORMANT")), "{human}");
    }

    #[test]
    fn a_wrong_outcome_says_what_was_done_the_rule_and_what_to_do_instead() {
        let r = judged(&meta(&["error:not_found", "closed"]), Outcome::token("error:io_error"));
        assert_eq!(r.status, Status::Fail);
        assert_eq!((r.expected.as_str(), r.actual.as_str()), ("error:not_found | closed", "error:io_error"));
        assert_eq!(
            r.reason,
            "the adapter answered error `io_error`; PC-5.3.stat (MUST): A missing path is not_found; \
             it should answer error `not_found`, or close the connection instead"
        );
        // A case's own summary words are not turned into advice: the requirement says it.
        let r = judged(&meta(&["busy-seen"]), Outcome::token("no-busy"));
        assert_eq!(r.reason, "the adapter ended in `no-busy`; PC-5.3.stat (MUST): A missing path is not_found");
    }

    #[test]
    fn an_accepted_outcome_with_violations_never_reads_expected_x_actual_x() {
        let m = meta(&["result:ok"]);
        let r = judged(&m, Outcome::with("result:ok", vec!["size should be 5, got 4".into()]));
        assert_eq!(r.status, Status::Fail);
        assert_ne!(r.expected, r.actual);
        assert_eq!(r.actual, "result:ok, with 1 violation (see Why)");
        assert_eq!(
            r.reason,
            "the adapter broke PC-5.3.stat (MUST): A missing path is not_found; size should be 5, got 4"
        );
        // A violation that names its own clause is not prefixed again.
        let r = judged(&m, Outcome::with("result:ok", vec!["PC-4.5: a line over the budget".into()]));
        assert_eq!(r.reason, "PC-4.5: a line over the budget");
        // The same outcome with no violation passes, with nothing to say.
        let r = judged(&m, Outcome::token("result:ok"));
        assert_eq!((r.status, r.reason.as_str(), r.actual.as_str()), (Status::Pass, "", "result:ok"));
    }

    #[test]
    fn a_must_broken_inside_a_should_case_fails_it_and_says_so() {
        let should = CaseMeta { level: Level::Should, ..meta(&["result:ok"]) };
        let breach = "PC-5.3.write: the result for `req-1` does not answer its invoke".to_string();
        let must = |v: &[&String]| Found { oracle: vec![], must: v.iter().map(|s| s.to_string()).collect() };
        // The case's own finding stays at its level.
        let own = classify(&should, ADAPTER, Outcome::token("closed"), Found::default(), vec![], Duration::ZERO);
        assert_eq!(own.status, Status::Warn);
        let side = Found { oracle: vec!["unexpected side effect in the root: created x".into()], must: vec![] };
        assert_eq!(
            classify(&should, ADAPTER, Outcome::token("result:ok"), side, vec![], Duration::ZERO).status,
            Status::Warn
        );
        // A breach of a MUST beside it fails the case, whether the outcome was accepted,
        // already carried it (the frame judge's), was refused, or the case skipped.
        for outcome in [
            Outcome::token("result:ok"),
            Outcome::with("result:ok", vec![breach.clone()]),
            Outcome::token("closed"),
            Outcome::Skip("the descriptor does not grant fs.write".into()),
        ] {
            let r = classify(&should, ADAPTER, outcome.clone(), must(&[&breach]), vec![], Duration::ZERO);
            assert_eq!(r.status, Status::Fail, "{outcome:?}");
            assert!(
                r.reason.starts_with("the adapter broke a MUST beside what this SHOULD case tests; "),
                "{}",
                r.reason
            );
            assert_eq!(r.reason.matches(breach.as_str()).count(), 1, "listed once: {}", r.reason);
        }
        // In a MUST case it fails as before, without the SHOULD note; a harness error stays one.
        let r = classify(
            &meta(&["result:ok"]),
            ADAPTER,
            Outcome::token("result:ok"),
            must(&[&breach]),
            vec![],
            Duration::ZERO,
        );
        assert_eq!((r.status, r.reason.as_str()), (Status::Fail, breach.as_str()));
        let r = classify(&should, ADAPTER, Outcome::Error("broke".into()), must(&[&breach]), vec![], Duration::ZERO);
        assert_eq!(r.status, Status::Error);
        // Nothing found: a skip stays a skip.
        let r = classify(&should, ADAPTER, Outcome::Skip("n/a".into()), Found::default(), vec![], Duration::ZERO);
        assert_eq!(r.status, Status::Skip);
    }

    #[test]
    fn the_fail_limit_counts_must_failures_and_harness_errors_only() {
        let m = meta(&["result:ok"]);
        let fail = judged(&m, Outcome::token("closed"));
        let mut known = fail.clone();
        known.baselined = true;
        let error = judged(&m, Outcome::Error("broke".into()));
        let warn = judged(&CaseMeta { level: Level::Should, ..m.clone() }, Outcome::token("closed"));
        assert_eq!(warn.status, Status::Warn);
        let mut limit = FailLimit::new(Some(2));
        for r in [&known, &warn, &fail] {
            assert_eq!(limit.after(r), Flow::Continue);
        }
        assert_eq!(limit.after(&error), Flow::Stop);
        let mut none = FailLimit::new(None);
        assert!((0..10).all(|_| none.after(&fail) == Flow::Continue));
    }
}
