//! The runner engine: select cases, run each with a fresh fixture and fresh connections,
//! apply the side-effect oracle and the secret scan, classify, apply the baseline.

use std::collections::BTreeSet;
use std::time::Instant;

use serde::Serialize;

use super::adapter::cases::registry;
use super::adapter::fixture::{diff, lay, snapshot, Fixture, Snapshot, SENTINEL_TEXT};
use super::adapter::{Ctx, Target};
use super::case::{CaseMeta, CaseResult, Level, Outcome, Status};

/// Which cases to run.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    /// Keep ids starting with any of these (all when empty).
    pub id_prefixes: Vec<String>,
    /// Keep these levels (all when empty).
    pub levels: Vec<Level>,
    /// Keep cases with any of these tags (all when empty).
    pub tags: Vec<String>,
}

impl Filter {
    /// Whether `m` is selected.
    pub fn keeps(&self, m: &CaseMeta) -> bool {
        (self.id_prefixes.is_empty() || self.id_prefixes.iter().any(|p| m.id.starts_with(p.as_str())))
            && (self.levels.is_empty() || self.levels.contains(&m.level))
            && (self.tags.is_empty() || self.tags.iter().any(|t| m.tags.contains(t)))
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

/// A whole run.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// `adapter` or `daemon`.
    pub suite: String,
    /// What was checked (socket path).
    pub target: String,
    /// Every selected case, in catalogue order.
    pub results: Vec<CaseResult>,
    /// Baselined cases that passed (the baseline is stale).
    pub stale: Vec<String>,
    /// Baseline ids that name no case at all.
    pub unknown_baseline_ids: Vec<String>,
}

/// Exit code: conformant.
pub const EXIT_CONFORMANT: u8 = 0;
/// Exit code: at least one MUST failed (not baselined).
pub const EXIT_FAILURES: u8 = 1;
/// Exit code: usage error, or the harness broke on some case.
pub const EXIT_HARNESS: u8 = 2;
/// Exit code: everything else fine, but a baselined case now passes.
pub const EXIT_STALE_BASELINE: u8 = 3;
/// Exit code: the target could not be reached at all.
pub const EXIT_UNREACHABLE: u8 = 4;

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
            EXIT_HARNESS
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
    /// The harness cannot work (fixture directory unusable, catalogue broken).
    #[error("harness error: {0}")]
    Harness(String),
}

/// Run the adapter suite against `target`.
pub fn run_adapter(
    target: &Target,
    catalogue: &[CaseMeta],
    filter: &Filter,
    baseline: Option<&Baseline>,
    mut progress: impl FnMut(usize, usize, &CaseResult),
) -> Result<Report, RunError> {
    std::os::unix::net::UnixStream::connect(&target.socket)
        .map_err(|e| RunError::Unreachable(format!("{}: {e}", target.socket.display())))?;
    let reg = registry();
    let selected: Vec<&CaseMeta> = catalogue.iter().filter(|m| filter.keeps(m)).collect();
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
        let r = match (f, vector, &vectors) {
            (Some(f), _, _) => run_one(target, meta, &f, &mut state)?,
            (None, Some(id), Some(set)) => {
                run_one(target, meta, &|c: &mut Ctx<'_>| super::adapter::replay::run(c, set, id), &mut state)?
            }
            _ => return Err(RunError::Harness(format!("case {} has no implementation", meta.id))),
        };
        progress(i + 1, selected.len(), &r);
        results.push(r);
    }
    Ok(finish("adapter", target.socket.display().to_string(), results, catalogue, baseline))
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
    Report { suite: suite.into(), target, results, stale, unknown_baseline_ids: unknown }
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
    let mut oracle = Vec::new();
    let allowed: Vec<&str> = ctx.allowed.iter().map(String::as_str).collect();
    let after_root = snapshot(&target.root);
    let after_sentinel = snapshot(&target.sentinel);
    for d in diff(&before_root, &after_root, &allowed) {
        oracle.push(format!("unexpected side effect in the root: {d}"));
    }
    for d in diff(&before_sentinel, &after_sentinel, &[]) {
        oracle.push(format!("side effect OUTSIDE the root (sentinel): {d}"));
    }
    state.pristine = after_root == before_root && after_sentinel == before_sentinel;
    let received = ctx.received.borrow().clone();
    if memchr::memmem::find(&received, target.handle().as_bytes()).is_some() {
        oracle.push("the adapter sent the capability handle".into());
    }
    if memchr::memmem::find(&received, SENTINEL_TEXT.as_bytes()).is_some() {
        oracle.push("the adapter sent content from outside the root (sentinel)".into());
    }
    let root_text = target.root.to_string_lossy();
    if root_text.len() > 1 && memchr::memmem::find(&received, root_text.as_bytes()).is_some() {
        oracle.push("the adapter revealed the absolute root path".into());
    }
    let transcript = ctx.transcript.borrow().clone();
    Ok(classify(meta, outcome, oracle, transcript, started.elapsed()))
}

/// Turn an outcome (plus problems found by the engine) into a case result.
pub fn classify(
    meta: &CaseMeta,
    outcome: Outcome,
    oracle: Vec<String>,
    transcript: Vec<super::case::WireLine>,
    duration: std::time::Duration,
) -> CaseResult {
    let expected = meta.accepted.join(" | ");
    let (status, actual, reason) = match outcome {
        Outcome::Skip(why) => (Status::Skip, "skipped".to_string(), why),
        Outcome::Error(why) => (Status::Error, "harness error".to_string(), why),
        Outcome::Observed { token, mut problems } => {
            problems.extend(oracle);
            let accepted = meta.accepted.contains(&token);
            let mut why = Vec::new();
            if !accepted {
                why.push(format!("observed `{token}`, which is not an accepted outcome"));
            }
            why.extend(problems);
            let status = match (why.is_empty(), meta.level) {
                (true, _) => Status::Pass,
                (false, Level::Must) => Status::Fail,
                (false, Level::Should) => Status::Warn,
            };
            (status, token, why.join("; "))
        }
    };
    let keep = !matches!(status, Status::Pass | Status::Skip);
    CaseResult {
        id: meta.id.clone(),
        clause: meta.clause.clone(),
        level: meta.level,
        status,
        requirement: meta.requirement.clone(),
        expected,
        actual,
        reason,
        transcript: if keep { transcript } else { Vec::new() },
        duration,
        baselined: false,
    }
}

/// Run the daemon suite against `target`.
pub fn run_daemon(
    target: &super::daemon::DaemonTarget,
    catalogue: &[CaseMeta],
    filter: &Filter,
    baseline: Option<&Baseline>,
    mut progress: impl FnMut(usize, usize, &CaseResult),
) -> Result<Report, RunError> {
    let mut host = super::daemon::read_host(&target.socket, target.step)
        .map_err(|e| RunError::Unreachable(format!("{}: {e}", target.socket.display())))?;
    std::fs::create_dir_all(&target.cwd)
        .map_err(|e| RunError::Harness(format!("cannot create the session cwd: {e}")))?;
    let probe = super::daemon::probe::Probe::start(&target.cwd)
        .map_err(|e| RunError::Harness(format!("cannot start the probe adapter: {e}")))?;
    let reg = super::daemon::cases::registry();
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
        if f.is_none() && vector.is_none() {
            return Err(RunError::Harness(format!("case {} has no implementation", meta.id)));
        }
        let started = Instant::now();
        let first_link = probe.seen().connections;
        let mut ctx = super::daemon::DCtx::new(target, &probe, host.clone(), i);
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match (f, vector, &vectors) {
            (Some(f), _, _) => f(&mut ctx),
            (None, Some(id), Some(set)) => super::daemon::replay::run(&mut ctx, set, id),
            _ => Outcome::Error("no implementation".into()),
        }))
        .unwrap_or_else(|_| Outcome::Error("the case panicked".into()));
        host = ctx.host.clone();
        let mut oracle = Vec::new();
        let received = ctx.received.borrow().clone();
        if ctx.handles.iter().any(|h| memchr::memmem::find(&received, h.as_bytes()).is_some()) {
            oracle.push("the daemon sent a capability handle to a client".into());
        }
        // Every frame the daemon sent, to a client or to the probe, is judged by the contract.
        oracle.extend(super::daemon::judge_client_lines(&received));
        oracle.extend(probe.seen().violations.into_iter().filter(|(n, _)| *n >= first_link).map(|(_, why)| why));
        let transcript = ctx.transcript.borrow().clone();
        let r = classify(meta, outcome, oracle, transcript, started.elapsed());
        progress(i + 1, selected.len(), &r);
        results.push(r);
    }
    Ok(finish("daemon", target.socket.display().to_string(), results, catalogue, baseline))
}
