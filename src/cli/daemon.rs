//! `pi-conform daemon`: check a daemon that claims protocol v2 with host tool adapters,
//! clause by clause; the runner hosts its own probe adapter.

use std::io::Write;
use std::path::PathBuf;

use serde_json::json;

use super::runner::{
    emit_report, load_baseline, print_coverage, progress_printer, run_error, runner_filter, with_sessions, RunnerOpts,
};
use super::{Format, EXIT_OK};

#[derive(clap::Args)]
pub struct Args {
    /// The daemon's Unix socket.
    socket: Option<PathBuf>,
    /// Directory used as the sessions' cwd (and the probe adapter's root); created if
    /// missing (default: a private temporary directory).
    #[arg(long, value_name = "DIR")]
    cwd: Option<PathBuf>,
    /// Prompt that makes one tool call; `{tool}` and `{args}` are replaced.
    #[arg(long, value_name = "T", default_value = "TOOL {tool} {args}")]
    wake_template: String,
    /// Shell command that restarts the daemon (enables the restart cases).
    #[arg(long, value_name = "CMD")]
    restart_cmd: Option<String>,
    /// Shell command that stops the daemon gracefully (SIGTERM) and returns once it has
    /// exited; with --restart-cmd it enables daemon.shutdown.revokes-bindings (host shutdown
    /// revokes every binding), after which the daemon is restarted.
    #[arg(long, value_name = "CMD")]
    stop_cmd: Option<String>,
    /// `payload.model` for opens, as PROVIDER/ID (e.g. openai/pi-conform-fake).
    #[arg(long, value_name = "PROVIDER/ID")]
    model: Option<String>,
    /// A file or directory where the daemon keeps its state or its log (repeatable): the last
    /// case, daemon.secrets.at-rest, searches it for every capability handle the run minted
    /// and for the probe's endpoint path (symlinks not followed, at most 256 MiB read).
    #[arg(long = "scan-path", value_name = "PATH")]
    scan_paths: Vec<PathBuf>,
    #[command(flatten)]
    run: RunnerOpts,
}

/// `daemon`: the daemon suite against a running daemon.
pub fn run(args: Args) -> anyhow::Result<u8> {
    let Args { socket, cwd, wake_template, restart_cmd, stop_cmd, model, scan_paths, run } = args;
    use pi_conform::conform::run as engine;
    let filter = runner_filter(&run)?;
    let vectors = pi_conform::vectors::default_dir();
    let (catalogue, no_vectors) = pi_conform::conform::daemon::catalogue_with_vectors(&vectors);
    if let Some(why) = no_vectors {
        eprintln!("pi-conform: {why}");
    }
    let (mut catalogue, sessions) = with_sessions(&run, "daemon.", catalogue)?;
    pi_conform::conform::daemon::run_last_at_end(&mut catalogue);
    if !catalogue.iter().any(|m| filter.keeps(m)) {
        anyhow::bail!("no case matches the filters");
    }
    if run.list && run.coverage {
        return print_coverage(&run, &catalogue, &filter);
    }
    if run.list {
        let mut out = super::stdout();
        for m in catalogue.iter().filter(|m| filter.keeps(m)) {
            match run.format {
                Format::Json => writeln!(out, "{}", serde_json::to_string(m)?)?,
                Format::Human => writeln!(out, "{}", pi_conform::conform::report::catalogue_line(m, 52, 8))?,
            }
        }
        return Ok(EXIT_OK);
    }
    let socket = socket.ok_or_else(|| anyhow::anyhow!("give the daemon's socket (or --list)"))?;
    let model = match model {
        Some(m) => {
            let (p, id) = m.split_once('/').ok_or_else(|| anyhow::anyhow!("--model must be PROVIDER/ID"))?;
            Some(json!({"provider": p, "id": id}))
        }
        None => None,
    };
    let _tmp;
    let cwd = match cwd {
        Some(c) => c,
        None => {
            let t = tempfile::Builder::new().prefix("pi-conform-daemon-cwd").tempdir()?;
            let p = t.path().to_path_buf();
            _tmp = t;
            p
        }
    };
    let target = pi_conform::conform::daemon::DaemonTarget {
        socket,
        cwd,
        wake_template,
        restart_cmd,
        stop_cmd,
        model,
        step: std::time::Duration::from_secs_f64((2.0 * run.time_scale).max(0.05)),
        vectors,
        sessions,
        scan_paths,
    };
    let baseline = load_baseline(&run)?;
    let progress = progress_printer(&run);
    match engine::run_daemon(&target, &catalogue, &filter, baseline.as_ref(), progress) {
        Ok(rep) => emit_report(&rep, &run),
        Err(e) => Ok(run_error(e)),
    }
}
