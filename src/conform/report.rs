//! Reports: human text (Requirement / Expected / Actual / transcript per failure), JSON, and
//! JUnit XML through `quick-junit`.

use std::fmt::Write as _;

use quick_junit::{NonSuccessKind, Report as JReport, TestCase, TestCaseStatus, TestSuite};

use super::case::Status;
use super::run::Report;

/// The human report.
pub fn human(r: &Report, verbose: bool) -> String {
    let mut out = String::new();
    for c in &r.results {
        let show = verbose || matches!(c.status, Status::Fail | Status::Warn | Status::Error);
        if !show {
            continue;
        }
        let tag = match (c.status, c.baselined) {
            (_, true) => "KNOWN".to_string(),
            (s, _) => s.as_str().to_uppercase(),
        };
        let level = match c.level {
            super::case::Level::Must => "MUST",
            super::case::Level::Should => "SHOULD",
        };
        let _ = writeln!(out, "{tag} {} ({}, {level})", c.id, c.clause);
        if c.status == Status::Pass {
            continue;
        }
        let _ = writeln!(out, "  Requirement: {}", c.requirement);
        let _ = writeln!(out, "  Expected:    {}", c.expected);
        let _ = writeln!(out, "  Actual:      {}", c.actual);
        if !c.reason.is_empty() {
            let _ = writeln!(out, "  Why:         {}", c.reason);
        }
        if !c.transcript.is_empty() {
            let _ = writeln!(out, "  Transcript:");
            for l in &c.transcript {
                let _ = writeln!(out, "    {} {}", l.dir, l.text);
            }
        }
        out.push('\n');
    }
    for s in &r.stale {
        let _ = writeln!(out, "STALE {s}: listed in the baseline but now passes; remove it from the baseline");
    }
    for s in &r.unknown_baseline_ids {
        let _ = writeln!(out, "NOTE the baseline names {s}, which is no case of this suite");
    }
    let s = r.summary();
    let _ = writeln!(
        out,
        "{} suite against {}: {} passed, {} failed, {} known failures (baseline), {} warnings, {} skipped, {} harness errors, {} stale baseline entries",
        r.suite, r.target, s.passed, s.failed, s.baselined, s.warned, s.skipped, s.errors, s.stale
    );
    let verdict = match r.exit_code() {
        0 => "CONFORMANT",
        1 => "NOT CONFORMANT",
        2 => "INCONCLUSIVE (harness errors)",
        _ => "CONFORMANT, but the baseline is stale",
    };
    let _ = writeln!(out, "verdict: {verdict}");
    out
}

/// The JSON report.
pub fn json(r: &Report) -> serde_json::Value {
    serde_json::json!({
        "suite": r.suite,
        "target": r.target,
        "summary": r.summary(),
        "exitCode": r.exit_code(),
        "results": r.results,
        "stale": r.stale,
        "unknownBaselineIds": r.unknown_baseline_ids,
    })
}

/// The JUnit XML report.
pub fn junit(r: &Report) -> Result<String, quick_junit::SerializeError> {
    let mut report = JReport::new(format!("pi-conform {}", r.suite));
    let mut suite = TestSuite::new(format!("{} suite", r.suite));
    for c in &r.results {
        let status = match (c.status, c.baselined) {
            (Status::Pass, _) => TestCaseStatus::success(),
            (_, true) => {
                let mut s = TestCaseStatus::skipped();
                s.set_message(format!("known failure (baseline): {}", c.reason));
                s
            }
            (Status::Skip, _) => {
                let mut s = TestCaseStatus::skipped();
                s.set_message(c.reason.clone());
                s
            }
            (Status::Fail, _) | (Status::Warn, _) => {
                let mut s = TestCaseStatus::non_success(NonSuccessKind::Failure);
                s.set_message(format!("expected {}; actual {}: {}", c.expected, c.actual, c.reason));
                s.set_type(if c.status == Status::Warn { "SHOULD" } else { "MUST" });
                s
            }
            (Status::Error, _) => {
                let mut s = TestCaseStatus::non_success(NonSuccessKind::Error);
                s.set_message(c.reason.clone());
                s
            }
        };
        let mut tc = TestCase::new(c.id.clone(), status);
        tc.set_classname(c.clause.clone());
        tc.set_time(c.duration);
        if !c.transcript.is_empty() {
            let text: String = c.transcript.iter().map(|l| format!("{} {}\n", l.dir, l.text)).collect();
            tc.set_system_out(text);
        }
        suite.add_test_case(tc);
    }
    report.add_test_suite(suite);
    report.to_string()
}
