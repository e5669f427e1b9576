//! Reports: human text (Requirement / Expected / Actual / transcript per failure), JSON, and
//! JUnit XML through `quick-junit`.

use std::fmt::Write as _;

use quick_junit::{NonSuccessKind, Report as JReport, TestCase, TestCaseStatus, TestSuite};

use super::case::{CaseResult, Status};
use super::run::{is_failure, Report, EXIT_CONFORMANT, EXIT_FAILURES, EXIT_INCONCLUSIVE};
use crate::util::utc::rfc3339_millis;

/// The tag a case is shown with: `PASS`, `FAIL`, `WARN`, `SKIP`, `ERROR`, or `KNOWN` for a
/// failure the baseline lists.
pub fn tag(c: &CaseResult) -> &'static str {
    match (c.status, c.baselined) {
        (Status::Fail | Status::Warn, true) => "KNOWN",
        (Status::Pass, _) => "PASS",
        (Status::Fail, _) => "FAIL",
        (Status::Warn, _) => "WARN",
        (Status::Skip, _) => "SKIP",
        (Status::Error, _) => "ERROR",
    }
}

/// `text` in the colour of `tag` (ANSI SGR) when `color`, else as is.
pub fn paint(tag: &str, text: &str, color: bool) -> String {
    let sgr = match tag {
        "PASS" => "32",
        "FAIL" | "ERROR" | "NOT CONFORMANT" => "1;31",
        "WARN" | "STALE" => "33",
        "KNOWN" | "SKIP" | "NOTE" => "2",
        "CONFORMANT" => "1;32",
        _ => "",
    };
    if !color || sgr.is_empty() {
        text.to_string()
    } else {
        format!("\x1b[{sgr}m{text}\x1b[0m")
    }
}

fn level(c: &CaseResult) -> &'static str {
    match c.level {
        super::case::Level::Must => "MUST",
        super::case::Level::Should => "SHOULD",
    }
}

/// At most `max` characters of `text`, cut on a character boundary, `…` when cut.
fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_string(),
    }
}

/// One line for a finished case (what a run prints per case when its output is not a
/// terminal): `[  3/121] FAIL id (clause, level) 12 ms: why`.
pub fn case_line(i: usize, n: usize, c: &CaseResult, color: bool) -> String {
    let width = n.to_string().len();
    let t = tag(c);
    let mut line = format!(
        "[{i:>width$}/{n}] {} {} ({}, {}) {} ms",
        paint(t, &format!("{t:<5}"), color),
        c.id,
        c.clause,
        level(c),
        c.duration.as_millis()
    );
    if c.status != Status::Pass && !c.reason.is_empty() {
        line.push_str(": ");
        line.push_str(&clip(&c.reason, 200));
    }
    line
}

/// How much the human report shows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Detail {
    /// Failures and errors in full; warnings in full; known failures one line each.
    #[default]
    Normal,
    /// Also a line for every passing and skipped case.
    Verbose,
    /// Failures and errors in full; warnings and known failures only counted.
    Quiet,
}

/// The human report: a block per failure (Requirement / Expected / Actual / Why /
/// Transcript), a line per known failure, the `failures:` list and the summary.
pub fn human(r: &Report, detail: Detail, color: bool) -> String {
    let mut out = String::new();
    for c in &r.results {
        let t = tag(c);
        let full = match (t, detail) {
            ("FAIL" | "ERROR", _) => true,
            ("WARN", Detail::Normal | Detail::Verbose) => true,
            ("KNOWN", Detail::Normal | Detail::Verbose) => {
                let _ = writeln!(
                    out,
                    "{} {} ({}, {}): known failure (baseline): {}",
                    paint(t, t, color),
                    c.id,
                    c.clause,
                    level(c),
                    clip(&c.reason, 200)
                );
                continue;
            }
            ("PASS" | "SKIP", Detail::Verbose) => {
                let why = if c.status == Status::Skip { format!(": {}", c.reason) } else { String::new() };
                let _ = writeln!(out, "{} {} ({}, {}){why}", paint(t, t, color), c.id, c.clause, level(c));
                continue;
            }
            _ => false,
        };
        if !full {
            continue;
        }
        let _ = writeln!(out, "{} {} ({}, {})", paint(t, t, color), c.id, c.clause, level(c));
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
        let _ = writeln!(
            out,
            "{} {s}: listed in the baseline but now passes; remove it from the baseline",
            paint("STALE", "STALE", color)
        );
    }
    for s in &r.unknown_baseline_ids {
        let _ =
            writeln!(out, "{} the baseline names {s}, which is no case of this suite", paint("NOTE", "NOTE", color));
    }
    if !r.not_run.is_empty() {
        let _ = writeln!(
            out,
            "stopped early (--fail-fast / --max-fail): {} not run, from {}",
            count(r.not_run.len(), "selected case", "selected cases"),
            r.not_run[0]
        );
    }
    let failures: Vec<&CaseResult> = r.results.iter().filter(|c| is_failure(c)).collect();
    if !failures.is_empty() {
        let _ = writeln!(out, "failures:");
        for c in failures {
            let _ = writeln!(out, "    {}{}", c.id, if c.status == Status::Error { " (harness error)" } else { "" });
        }
    }
    if let Some(line) = grant_line(r) {
        let _ = writeln!(out, "{line}");
    }
    let s = r.summary();
    let not_run = if r.not_run.is_empty() { String::new() } else { format!(", {} not run", r.not_run.len()) };
    // How many of the cases were replayed golden vectors (`vector:<id>`).
    let replayed = r.results.iter().filter(|c| c.id.starts_with("vector:")).count();
    let not_run = if replayed == 0 {
        not_run
    } else {
        format!("{not_run} ({} among the cases)", count(replayed, "replayed golden vector", "replayed golden vectors"))
    };
    let _ = writeln!(
        out,
        "{} suite against {}: {} passed, {} failed, {} (baseline), {}, {} skipped, {}, {}{not_run}; {:.1} s",
        r.suite,
        r.target,
        s.passed,
        s.failed,
        count(s.baselined, "known failure", "known failures"),
        count(s.warned, "warning", "warnings"),
        s.skipped,
        count(s.errors, "harness error", "harness errors"),
        count(s.stale, "stale baseline entry", "stale baseline entries"),
        r.duration.as_secs_f64()
    );
    let verdict = match r.exit_code() {
        EXIT_CONFORMANT => "CONFORMANT",
        EXIT_FAILURES => "NOT CONFORMANT",
        EXIT_INCONCLUSIVE => "INCONCLUSIVE (harness errors)",
        _ => "CONFORMANT, but the baseline is stale",
    };
    let key = if verdict.starts_with("CONFORMANT") { "CONFORMANT" } else { "NOT CONFORMANT" };
    let _ = writeln!(out, "verdict: {}", paint(key, verdict, color));
    out
}

/// One entry of a runner's case catalogue as `--list` prints it: id, level, clause (each padded
/// to its column), tags and accepted outcomes.
pub fn catalogue_line(m: &super::case::CaseMeta, id_width: usize, clause_width: usize) -> String {
    let level = match m.level {
        super::case::Level::Must => "MUST",
        super::case::Level::Should => "SHOULD",
    };
    format!(
        "{:<id_width$} {:<6} {:<clause_width$} [{}] accepts {}",
        m.id,
        level,
        m.clause,
        m.tags.join(","),
        m.accepted.join(" | ")
    )
}

/// `n` and the noun in its number: `1 warning`, `0 warnings`, `2 warnings`.
pub fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// Version of the JSON report's format (`schemas/report.schema.json`); raised on any
/// incompatible change.
pub const REPORT_SCHEMA_VERSION: u64 = 1;

/// The verdict word of a report.
pub fn verdict(r: &Report) -> &'static str {
    match r.exit_code() {
        EXIT_CONFORMANT => "CONFORMANT",
        EXIT_FAILURES => "NOT CONFORMANT",
        EXIT_INCONCLUSIVE => "INCONCLUSIVE",
        _ => "CONFORMANT, STALE BASELINE",
    }
}

/// The JSON report (format: `schemas/report.schema.json`, version
/// [`REPORT_SCHEMA_VERSION`]; every duration in milliseconds).
pub fn json(r: &Report) -> serde_json::Value {
    let s = r.summary();
    let results: Vec<serde_json::Value> = r
        .results
        .iter()
        .map(|c| {
            serde_json::json!({
                "id": c.id,
                "clause": c.clause,
                "level": c.level,
                "status": c.status,
                "baselined": c.baselined,
                "requirement": c.requirement,
                "expected": c.expected,
                "actual": c.actual,
                "reason": c.reason,
                "durationMs": c.duration.as_millis() as u64,
                "transcript": c.transcript,
            })
        })
        .collect();
    let mut report = serde_json::json!({
        "schemaVersion": REPORT_SCHEMA_VERSION,
        "tool": {"name": "pi-conform", "version": env!("CARGO_PKG_VERSION")},
        "suite": r.suite,
        "target": r.target,
        "startedAt": rfc3339_millis(r.started_at),
        "durationMs": r.duration.as_millis() as u64,
        "summary": {
            "total": r.results.len() + r.not_run.len(),
            "passed": s.passed,
            "failed": s.failed,
            "baselined": s.baselined,
            "warned": s.warned,
            "skipped": s.skipped,
            "errors": s.errors,
            "stale": s.stale,
            "notRun": r.not_run.len(),
        },
        "exitCode": r.exit_code(),
        "verdict": verdict(r),
        "results": results,
        "notRun": r.not_run,
        "stale": r.stale,
        "unknownBaselineIds": r.unknown_baseline_ids,
    });
    if let Some(known) = r.grant_known {
        report["grant"] = serde_json::json!(if known { "minted" } else { "descriptor" });
    }
    report
}

/// The adapter suite's grading, in one line: whether the runner knew the grant (issue 24
/// item 6). `None` for the daemon suite.
pub fn grant_line(r: &Report) -> Option<&'static str> {
    r.grant_known.map(|known| {
        if known {
            "levels: the runner minted the grant, so it knows its operations and ceilings: a bind outside them \
             must close (MUST)"
        } else {
            "levels: the grant is not known (plain socket; taken to be the descriptor): a bind outside it is \
             checked at SHOULD only (run with --command to grade it MUST)"
        }
    })
}

/// The JUnit XML report. A SHOULD warning is a passed test case carrying a
/// `pi-conform.warning` property and a note in `system-out` (a recommendation never fails a
/// CI job); a known failure (baseline) is skipped with the reason; a MUST failure is a
/// `<failure>`, a harness error an `<error>`.
pub fn junit(r: &Report) -> Result<String, quick_junit::SerializeError> {
    let mut report = JReport::new(format!("pi-conform {}", r.suite));
    report.set_time(r.duration);
    let started: chrono::DateTime<chrono::Utc> = r.started_at.into();
    report.set_timestamp(started);
    let mut suite = TestSuite::new(format!("{} suite", r.suite));
    suite.set_timestamp(started);
    suite.set_time(r.duration);
    suite.add_property(("pi-conform.version", env!("CARGO_PKG_VERSION")));
    suite.add_property(("pi-conform.target", r.target.as_str()));
    for c in &r.results {
        let mut note = None;
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
            (Status::Warn, _) => {
                note = Some(format!(
                    "WARNING (SHOULD, not a failure): expected {}; actual {}: {}\n",
                    c.expected, c.actual, c.reason
                ));
                TestCaseStatus::success()
            }
            (Status::Fail, _) => {
                let mut s = TestCaseStatus::non_success(NonSuccessKind::Failure);
                s.set_message(format!("expected {}; actual {}: {}", c.expected, c.actual, c.reason));
                s.set_type("MUST");
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
        if c.status == Status::Warn && !c.baselined {
            tc.add_property(("pi-conform.warning", c.reason.as_str()));
        }
        let transcript: String = c.transcript.iter().map(|l| format!("{} {}\n", l.dir, l.text)).collect();
        let out = format!("{}{transcript}", note.unwrap_or_default());
        if !out.is_empty() {
            tc.set_system_out(out);
        }
        suite.add_test_case(tc);
    }
    report.add_test_suite(suite);
    report.to_string()
}

/// Text for HTML: `&`, `<`, `>`, `"`, `'` escaped.
fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for ch in text.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const HTML_STYLE: &str = r#"
body{font:14px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1100px;padding:1em 2em;color:#222}
h1{font-size:1.4em;margin:.2em 0}.meta{color:#555}.verdict{font-weight:bold;padding:.1em .5em;border-radius:4px}
.CONFORMANT{background:#d8f3dc}.NOT-CONFORMANT,.INCONCLUSIVE{background:#ffd6d6}.STALE{background:#fff3bf}
table{border-collapse:collapse;margin:.6em 0}td,th{border:1px solid #ccc;padding:.15em .6em;text-align:right}
th:first-child,td:first-child{text-align:left}.zero{color:#bbb}
.filters button{margin:.2em;padding:.25em .8em;border:1px solid #999;border-radius:12px;background:#f6f6f6;cursor:pointer}
.filters button.active{background:#333;color:#fff}
details.case{border-left:6px solid #ccc;margin:.3em 0;padding:.2em .6em;background:#fafafa}
details.case>summary{cursor:pointer}details.case[hidden]{display:none}
.pass{border-color:#2b8a3e!important}.fail,.error{border-color:#c92a2a!important}.warn{border-color:#e67700!important}
.known,.skip{border-color:#adb5bd!important}.tag{font-weight:bold;font-family:monospace;display:inline-block;width:4.5em}
dl{display:grid;grid-template-columns:max-content auto;gap:.1em .8em}dt{font-weight:bold}dd{margin:0;white-space:pre-wrap}
pre.transcript{background:#111;color:#eee;padding:.6em;overflow:auto;max-height:30em;white-space:pre-wrap;word-break:break-all}
"#;

const HTML_SCRIPT: &str = r#"
(function(){
  var buttons=document.querySelectorAll('.filters button');
  function apply(f){
    buttons.forEach(function(b){b.classList.toggle('active',b.dataset.filter===f);});
    var shown=0;
    document.querySelectorAll('details.case').forEach(function(d){
      var on=f==='all'||d.dataset.status===f; d.hidden=!on; if(on)shown++;
    });
    document.getElementById('shown').textContent=shown;
  }
  buttons.forEach(function(b){b.addEventListener('click',function(){apply(b.dataset.filter);});});
  var first=document.querySelector('.filters button[data-default]');
  apply(first?first.dataset.filter:'all');
})();
"#;

/// The HTML report: one self-contained page (inline style and script, nothing fetched)
/// with the verdict, a summary by clause and level, a status filter, and each case as an
/// expandable entry holding its requirement, expected and actual outcome, why, and the wire
/// transcript (handles already shown as `<handle>`). Opens on the failures when there are
/// any.
pub fn html(r: &Report) -> String {
    use std::collections::BTreeMap;
    let statuses = ["fail", "error", "warn", "known", "skip", "pass"];
    let key = |c: &CaseResult| tag(c).to_lowercase();
    let mut by_clause: BTreeMap<(String, &str), BTreeMap<String, usize>> = BTreeMap::new();
    let mut totals: BTreeMap<String, usize> = BTreeMap::new();
    for c in &r.results {
        *by_clause.entry((c.clause.clone(), level(c))).or_default().entry(key(c)).or_default() += 1;
        *totals.entry(key(c)).or_default() += 1;
    }
    let verdict = verdict(r);
    let vclass = verdict.split(',').next().unwrap_or("").replace(' ', "-");
    let mut out = String::new();
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'\">\
         <title>pi-conform {suite} report: {v}</title><style>{HTML_STYLE}</style></head><body>\n\
         <h1>pi-conform {suite} suite: <span class=\"verdict {vclass}\" id=\"verdict\">{v}</span></h1>\n\
         <p class=\"meta\">Target <code>{target}</code> · pi-conform {version} · started {started} · {secs:.1} s · exit code {code}</p>\n",
        suite = esc(&r.suite),
        v = esc(verdict),
        target = esc(&r.target),
        version = env!("CARGO_PKG_VERSION"),
        started = rfc3339_millis(r.started_at),
        secs = r.duration.as_secs_f64(),
        code = r.exit_code(),
    );
    // Summary by clause and level.
    out.push_str(
        "<h2>Summary by clause and level</h2>\n<table id=\"by-clause\"><thead><tr><th>Clause</th><th>Level</th>",
    );
    for s in statuses {
        let _ = write!(out, "<th>{s}</th>");
    }
    out.push_str("</tr></thead><tbody>\n");
    for ((clause, lvl), counts) in &by_clause {
        let _ = write!(out, "<tr><td>{}</td><td>{lvl}</td>", esc(clause));
        for s in statuses {
            let n = counts.get(s).copied().unwrap_or(0);
            let class = if n == 0 { " class=\"zero\"" } else { "" };
            let _ = write!(out, "<td{class}>{n}</td>");
        }
        out.push_str("</tr>\n");
    }
    out.push_str("<tr><th>all</th><th></th>");
    for s in statuses {
        let _ = write!(out, "<th>{}</th>", totals.get(s).copied().unwrap_or(0));
    }
    out.push_str("</tr></tbody></table>\n");
    if !r.not_run.is_empty() {
        let _ = writeln!(out, "<p>Stopped early: {} selected cases not run.</p>", r.not_run.len());
    }
    for s in &r.stale {
        let _ = writeln!(out, "<p class=\"verdict STALE\">STALE {}: listed in the baseline but now passes</p>", esc(s));
    }
    // Filter.
    let failing = totals.get("fail").copied().unwrap_or(0) + totals.get("error").copied().unwrap_or(0);
    let default = if failing > 0 { "fail" } else { "all" };
    out.push_str("<h2>Cases</h2>\n<div class=\"filters\" role=\"toolbar\">");
    for f in std::iter::once("all").chain(statuses) {
        let n = if f == "all" { r.results.len() } else { totals.get(f).copied().unwrap_or(0) };
        let d = if f == default { " data-default" } else { "" };
        let _ = write!(out, "<button type=\"button\" data-filter=\"{f}\" id=\"filter-{f}\"{d}>{f} ({n})</button>");
    }
    out.push_str(" <span class=\"meta\">showing <span id=\"shown\"></span></span></div>\n");
    for c in &r.results {
        let k = key(c);
        let _ = write!(
            out,
            "<details class=\"case {k}\" data-status=\"{k}\" id=\"case-{id}\"><summary><span class=\"tag\">{tag}</span> \
             <code>{id}</code> ({clause}, {lvl}) · {ms} ms</summary>\n<dl>\
             <dt>Requirement</dt><dd>{req}</dd><dt>Expected</dt><dd>{exp}</dd><dt>Actual</dt><dd>{act}</dd>",
            tag = tag(c),
            id = esc(&c.id),
            clause = esc(&c.clause),
            lvl = level(c),
            ms = c.duration.as_millis(),
            req = esc(&c.requirement),
            exp = esc(&c.expected),
            act = esc(&c.actual),
        );
        if !c.reason.is_empty() {
            let _ = write!(out, "<dt>Why</dt><dd>{}</dd>", esc(&c.reason));
        }
        out.push_str("</dl>");
        if !c.transcript.is_empty() {
            out.push_str("<pre class=\"transcript\">");
            for l in &c.transcript {
                let _ = writeln!(out, "{} {}", esc(&l.dir), esc(&l.text));
            }
            out.push_str("</pre>");
        }
        out.push_str("</details>\n");
    }
    let _ = write!(out, "<script>{HTML_SCRIPT}</script>\n</body></html>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_text_is_escaped() {
        assert_eq!(esc(r#"<a href="x">'&'</a>"#), "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;");
    }

    #[test]
    fn clip_cuts_on_a_character_boundary() {
        assert_eq!(clip("ééé", 2), "éé…");
        assert_eq!(clip("ab", 2), "ab");
    }
}
