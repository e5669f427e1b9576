//! What the runner subcommands (`adapter`, `daemon`, `selftest`) share: their options, the
//! case filter, the catalogue listing, progress lines and the reports they write.

use std::io::Write;
use std::path::PathBuf;

use pi_conform::conform::adapter::launch::{interrupted, yield_to_interrupt};
use pi_conform::conform::case::visible;
use pi_conform::vectors::default_dir;

use super::{color_for, Format, EXIT_OK};

/// Options shared by the runners.
#[derive(clap::Args, Clone)]
pub struct RunnerOpts {
    /// Report format on standard output.
    #[arg(long, value_enum, default_value = "human")]
    pub format: Format,
    /// Also write a JUnit XML report here.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Also write an HTML report here: one self-contained page (no network) with a summary
    /// by clause and level, a status filter and expandable transcripts.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Print the (filtered) case catalogue and exit.
    #[arg(long)]
    pub list: bool,
    /// With --list: print clause × technique × case ids instead (coverage as data).
    #[arg(long, requires = "list")]
    pub coverage: bool,
    /// Only cases whose id starts with this (repeatable).
    #[arg(long = "id", value_name = "PREFIX")]
    pub ids: Vec<String>,
    /// Only cases of this level (repeatable).
    #[arg(long, value_enum)]
    pub level: Vec<pi_conform::conform::case::Level>,
    /// Only cases with this tag (repeatable).
    #[arg(long = "tag", value_name = "TAG")]
    pub tags: Vec<String>,
    /// Only cases that apply this technique (repeatable), e.g. `provoked-state`.
    #[arg(long = "technique", value_enum, value_name = "TECHNIQUE")]
    pub techniques: Vec<pi_conform::conform::case::Technique>,
    /// Multiply every step's time budget (slow machines: 3).
    #[arg(long, default_value_t = 1.0, value_name = "N")]
    pub time_scale: f64,
    /// Known failures, one case id per line (`#` comments); a listed case that passes is
    /// reported stale.
    #[arg(long, value_name = "FILE")]
    pub baseline: Option<PathBuf>,
    /// Show passing and skipped cases too.
    #[arg(long, conflicts_with = "quiet")]
    pub verbose: bool,
    /// No per-case lines or progress; the report shows failures only (no warnings or known
    /// failures), the `failures:` list and the verdict.
    #[arg(short, long)]
    pub quiet: bool,
    /// Stop after the first failure (a MUST failure not in the baseline, or a harness error);
    /// the cases left are reported as not run.
    #[arg(long, conflicts_with = "max_fail")]
    pub fail_fast: bool,
    /// Stop after N failures (as for --fail-fast).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_fail: Option<u64>,
    /// Run the session vectors of FILE instead of the built-in suite (repeatable), e.g. a
    /// session recorded by `pi-conform watch … --record FILE`.
    #[arg(long = "session", value_name = "FILE")]
    pub sessions: Vec<PathBuf>,
}

/// With `--session`: the files' sessions and their catalogue instead of `catalogue`.
pub fn with_sessions(
    run: &RunnerOpts,
    prefix: &str,
    catalogue: Vec<pi_conform::conform::case::CaseMeta>,
) -> anyhow::Result<(Vec<pi_conform::conform::case::CaseMeta>, Vec<pi_conform::conform::script::Session>)> {
    if run.sessions.is_empty() {
        return Ok((catalogue, Vec::new()));
    }
    let taken: Vec<String> = catalogue.into_iter().map(|m| m.id).collect();
    let sessions = pi_conform::conform::script::load(&run.sessions, prefix, &taken).map_err(|e| anyhow::anyhow!(e))?;
    Ok((sessions.iter().map(|s| s.meta.clone()).collect(), sessions))
}

impl RunnerOpts {
    pub fn fail_limit(&self) -> pi_conform::conform::run::FailLimit {
        let max =
            if self.fail_fast { Some(1) } else { self.max_fail.map(|n| usize::try_from(n).unwrap_or(usize::MAX)) };
        pi_conform::conform::run::FailLimit::new(max)
    }

    pub fn detail(&self) -> pi_conform::conform::report::Detail {
        use pi_conform::conform::report::Detail;
        if self.quiet {
            Detail::Quiet
        } else if self.verbose {
            Detail::Verbose
        } else {
            Detail::Normal
        }
    }
}

pub fn list_cases(
    run: &RunnerOpts,
    filter: &pi_conform::conform::run::Filter,
    grant_known: bool,
) -> anyhow::Result<u8> {
    let catalogue: Vec<_> = adapter_catalogue().into_iter().map(|m| m.graded(grant_known)).collect();
    if !catalogue.iter().any(|m| filter.keeps(m)) {
        anyhow::bail!("no case matches the filters");
    }
    if run.coverage {
        return print_coverage(run, &catalogue, filter);
    }
    let mut out = super::stdout();
    for m in catalogue.iter().filter(|m| filter.keeps(m)) {
        match run.format {
            Format::Json => writeln!(out, "{}", serde_json::to_string(m)?)?,
            Format::Human => writeln!(out, "{}", pi_conform::conform::report::catalogue_line(m, 48, 14))?,
        }
    }
    Ok(EXIT_OK)
}

/// `--list --coverage`: clause × technique × case ids of the filtered catalogue.
pub fn print_coverage(
    run: &RunnerOpts,
    catalogue: &[pi_conform::conform::case::CaseMeta],
    filter: &pi_conform::conform::run::Filter,
) -> anyhow::Result<u8> {
    let kept: Vec<_> = catalogue.iter().filter(|m| filter.keeps(m)).cloned().collect();
    let coverage = pi_conform::conform::coverage::Coverage::of(&kept);
    let mut out = super::stdout();
    match run.format {
        Format::Json => writeln!(out, "{}", serde_json::to_string_pretty(&coverage.json())?)?,
        Format::Human => out.write_all(coverage.human().as_bytes())?,
    }
    Ok(EXIT_OK)
}

/// The adapter catalogue with the golden vectors replayed as cases (a warning, and the
/// built-in cases only, when the vectors cannot be read).
pub fn adapter_catalogue() -> Vec<pi_conform::conform::case::CaseMeta> {
    let (catalogue, no_vectors) = pi_conform::conform::adapter::catalogue_with_vectors(&default_dir());
    if let Some(why) = no_vectors {
        eprintln!("pi-conform: {why}");
    }
    catalogue
}

pub fn runner_filter(run: &RunnerOpts) -> anyhow::Result<pi_conform::conform::run::Filter> {
    if !(run.time_scale.is_finite() && run.time_scale > 0.0 && run.time_scale <= 100.0) {
        anyhow::bail!("--time-scale must be a number in (0, 100]");
    }
    Ok(pi_conform::conform::run::Filter {
        id_prefixes: run.ids.clone(),
        levels: run.level.clone(),
        tags: run.tags.clone(),
        techniques: run.techniques.clone(),
    })
}

/// Preflight, run and report the adapter suite against `target`. `explain` adds to a refused
/// preflight what only the caller knows (with `--command`: the identity the grant was minted
/// for and the end of the adapter's output).
pub fn run_and_report(
    target: &pi_conform::conform::adapter::Target,
    run: &RunnerOpts,
    explain: &dyn Fn() -> String,
) -> anyhow::Result<u8> {
    use pi_conform::conform::adapter::preflight::{preflight, PreflightError};
    use pi_conform::conform::run as engine;
    let filter = runner_filter(run)?;
    let baseline = load_baseline(run)?;
    let (catalogue, sessions) = with_sessions(run, "adapter.", adapter_catalogue())?;
    let target = &pi_conform::conform::adapter::Target { sessions, ..target.clone() };
    if !catalogue.iter().any(|m| filter.keeps(m)) {
        anyhow::bail!("no case matches the filters");
    }
    // One bind and one fs.stat of the fixture marker first: a mute adapter, a refused bind or
    // a wrong --root stops here with one diagnostic instead of failing every case.
    let preflight = preflight(target);
    // An interrupted run ends here with exit 130 and the one line of the signal guard.
    yield_to_interrupt();
    match preflight {
        Ok(()) => {}
        Err(PreflightError::Unreachable(m)) => {
            eprintln!("pi-conform: preflight failed: {}{}", visible(&m), explain());
            return Ok(engine::EXIT_UNREACHABLE);
        }
        Err(PreflightError::Refused(m)) => {
            eprintln!("pi-conform: preflight failed: {}{}", visible(&m), explain());
            return Ok(engine::EXIT_INCONCLUSIVE);
        }
        Err(e @ PreflightError::Harness(_)) => {
            eprintln!("pi-conform: {}", visible(&e.to_string()));
            return Ok(engine::EXIT_USAGE);
        }
    }
    let progress = progress_printer(run);
    let rep = engine::run_adapter(target, &catalogue, &filter, baseline.as_ref(), progress);
    yield_to_interrupt();
    match rep {
        Ok(rep) => emit_report(&rep, run),
        Err(e) => Ok(run_error(e)),
    }
}

/// The one diagnostic and the exit code of a run that could not happen.
pub fn run_error(e: pi_conform::conform::run::RunError) -> u8 {
    use pi_conform::conform::run::{self as engine, RunError};
    eprintln!("pi-conform: {}", visible(&e.to_string()));
    match e {
        RunError::Unreachable(_) => engine::EXIT_UNREACHABLE,
        RunError::Refused(_) | RunError::Harness(_) => engine::EXIT_INCONCLUSIVE,
    }
}

pub fn default_sentinel(root: &std::path::Path) -> PathBuf {
    let mut name = root.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(".sentinel");
    root.with_file_name(name)
}

pub fn load_baseline(run: &RunnerOpts) -> anyhow::Result<Option<pi_conform::conform::run::Baseline>> {
    match &run.baseline {
        Some(p) => Ok(Some(pi_conform::conform::run::Baseline::parse(
            &std::fs::read_to_string(p).map_err(|e| anyhow::anyhow!("cannot read baseline {}: {e}", p.display()))?,
        ))),
        None => Ok(None),
    }
}

/// Progress as cases finish: on a terminal, one rewritten `[n/N]` line on standard error;
/// otherwise (CI logs) one line per case, on standard output for the human report and on
/// standard error beside a JSON report; nothing with `-q`. Stops the run at the failure
/// limit.
pub fn progress_printer(
    run: &RunnerOpts,
) -> impl FnMut(usize, usize, &pi_conform::conform::case::CaseResult) -> pi_conform::conform::run::Flow {
    use std::io::IsTerminal;
    let stdout_tty = super::stdout().is_terminal();
    let stderr_tty = std::io::stderr().is_terminal();
    let (quiet, format) = (run.quiet, run.format);
    let mut limit = run.fail_limit();
    move |i, n, r| {
        // Interrupted (`--command`): the adapter is being stopped, so what the cases see now
        // is the interruption, not the adapter; print nothing more and stop.
        if interrupted() {
            return pi_conform::conform::run::Flow::Stop;
        }
        let flow = limit.after(r);
        let stopping = flow == pi_conform::conform::run::Flow::Stop;
        if quiet {
        } else if stdout_tty {
            if stderr_tty {
                eprint!("\r\x1b[2K[{i}/{n}] {} {}", r.status.as_str(), r.id);
                if i == n || stopping {
                    eprintln!();
                }
            }
        } else if format == Format::Human {
            let line = pi_conform::conform::report::case_line(i, n, r, color_for(false));
            // A closed standard output drops the line; the run goes on to its verdict.
            let _ = writeln!(super::stdout(), "{line}");
        } else {
            let line = pi_conform::conform::report::case_line(i, n, r, color_for(stderr_tty));
            let _ = writeln!(std::io::stderr(), "{line}");
        }
        flow
    }
}

pub fn emit_report(rep: &pi_conform::conform::run::Report, run: &RunnerOpts) -> anyhow::Result<u8> {
    use pi_conform::conform::report;
    // Files first: a closed standard output (`| head`) must not lose them.
    if let Some(path) = &run.junit {
        let xml = report::junit(rep).map_err(|e| anyhow::anyhow!("cannot render JUnit: {e}"))?;
        std::fs::write(path, xml).map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
    }
    if let Some(path) = &run.html {
        std::fs::write(path, report::html(rep)).map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
    }
    let mut out = super::stdout();
    match run.format {
        Format::Human => {
            let color = color_for(out.is_terminal());
            out.write_all(report::human(rep, run.detail(), color).as_bytes())?
        }
        Format::Json => writeln!(out, "{}", serde_json::to_string_pretty(&report::json(rep))?)?,
    }
    out.flush()?;
    Ok(rep.exit_code())
}
