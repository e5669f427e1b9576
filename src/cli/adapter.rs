//! `pi-conform adapter`: check a tool adapter clause by clause, given its socket and
//! descriptor, or started by the runner with `--command`.

use std::io::Write;
use std::path::PathBuf;

use super::runner::{default_sentinel, list_cases, run_and_report, runner_filter, RunnerOpts};
use super::{read_json_file, Format};

#[derive(clap::Args)]
pub struct Args {
    /// The adapter's Unix socket.
    #[arg(conflicts_with = "command")]
    socket: Option<PathBuf>,
    /// The descriptor a daemon would receive for this adapter (JSON file; holds the handle).
    #[arg(long, value_name = "FILE", conflicts_with = "command")]
    descriptor: Option<PathBuf>,
    /// Start the adapter with `sh -c CMD`: the runner mints a grant for --adapter-id /
    /// --adapter-version into a private grants file and replaces `{socket}` (required),
    /// `{grants}` and `{root}` with those paths (shell-quoted); it stops the adapter
    /// (SIGTERM, then SIGKILL) and removes everything it made at the end.
    #[arg(long, value_name = "CMD")]
    command: Option<String>,
    /// With --command: the adapterId the adapter answers to [default: pi-conform-reference].
    #[arg(long, value_name = "ID", requires = "command")]
    adapter_id: Option<String>,
    /// With --command: the adapterVersion the adapter answers to [default: this version].
    #[arg(long, value_name = "VERSION", requires = "command")]
    adapter_version: Option<String>,
    /// The grant's root directory: the runner lays its fixture tree here. It must be empty
    /// or hold a previous run's `.pi-conform-fixture` marker.
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,
    /// A directory beside the root that nothing may touch (default: `<root>.sentinel`).
    #[arg(long, value_name = "DIR")]
    sentinel: Option<PathBuf>,
    #[command(flatten)]
    run: RunnerOpts,
}

/// `adapter`: against a running adapter, or one started with `--command`.
pub fn run(args: Args) -> anyhow::Result<u8> {
    let Args { socket, descriptor, command, adapter_id, adapter_version, root, sentinel, run } = args;
    match command {
        Some(command) => adapter_launch(command, adapter_id, adapter_version, root, sentinel, run),
        None if adapter_id.is_some() || adapter_version.is_some() => Err(anyhow::anyhow!(
            "--adapter-id and --adapter-version go with --command (the runner mints the grant); without it \
             the descriptor names the adapter"
        )),
        None => adapter_runner(socket, descriptor, root, sentinel, run),
    }
}

fn adapter_runner(
    socket: Option<PathBuf>,
    descriptor: Option<PathBuf>,
    root: Option<PathBuf>,
    sentinel: Option<PathBuf>,
    run: RunnerOpts,
) -> anyhow::Result<u8> {
    let filter = runner_filter(&run)?;
    if run.list {
        return list_cases(&run, &filter, false);
    }
    let socket = socket.ok_or_else(|| anyhow::anyhow!("give the adapter's socket (or --list)"))?;
    let dpath = descriptor.ok_or_else(|| anyhow::anyhow!("--descriptor FILE is required"))?;
    let root = root.ok_or_else(|| anyhow::anyhow!("--root DIR is required"))?;
    let value = read_json_file(&dpath, "descriptor")?;
    let root = std::fs::canonicalize(&root).map_err(|e| anyhow::anyhow!("root {}: {e}", root.display()))?;
    let sentinel = sentinel.unwrap_or_else(|| default_sentinel(&root));
    let target = pi_conform::conform::adapter::Target::new(&socket, value, &root, &sentinel, run.time_scale)
        .map_err(|e| anyhow::anyhow!(e))?;
    run_and_report(&target, &run, &String::new)
}

fn adapter_launch(
    command: String,
    adapter_id: Option<String>,
    adapter_version: Option<String>,
    root: Option<PathBuf>,
    sentinel: Option<PathBuf>,
    run: RunnerOpts,
) -> anyhow::Result<u8> {
    use pi_conform::conform::adapter::launch::{LaunchError, LaunchSpec, Launched};
    let filter = runner_filter(&run)?;
    if run.list {
        return list_cases(&run, &filter, true);
    }
    if !(run.time_scale.is_finite() && run.time_scale > 0.0 && run.time_scale <= 100.0) {
        anyhow::bail!("--time-scale must be a number in (0, 100]");
    }
    let spec = LaunchSpec {
        command,
        root,
        adapter_id: adapter_id.unwrap_or_else(|| "pi-conform-reference".into()),
        adapter_version: adapter_version.unwrap_or_else(|| env!("CARGO_PKG_VERSION").into()),
        startup: std::time::Duration::from_secs_f64(10.0 * run.time_scale),
    };
    let launched = match Launched::start(&spec) {
        Ok(l) => l,
        Err(LaunchError::Usage(m)) => anyhow::bail!(m),
        Err(LaunchError::Target(m)) => {
            eprintln!("pi-conform: the adapter did not start: {m}");
            return Ok(pi_conform::conform::run::EXIT_UNREACHABLE);
        }
    };
    let sentinel = sentinel.unwrap_or_else(|| default_sentinel(&launched.root));
    let target = pi_conform::conform::adapter::Target::new(
        &launched.socket,
        launched.descriptor.clone(),
        &launched.root,
        &sentinel,
        run.time_scale,
    )
    .and_then(|t| t.with_minted_grant(launched.narrow.clone(), launched.fit.clone()))
    .map_err(|e| anyhow::anyhow!(e))?;
    if run.format == Format::Human && !run.quiet {
        writeln!(
            super::stdout(),
            "adapter: started `sh -c` with a fresh grant; socket and grants in {}",
            launched.dir().display()
        )?;
    }
    // A refused preflight names the identity the grant was minted for and shows the end of the
    // adapter's own output (where an adapter says why it refused).
    let explain = || {
        // The adapter may log why it refused just after closing the connection.
        std::thread::sleep(std::time::Duration::from_secs_f64(0.2 * run.time_scale));
        format!(
            "\n  the runner minted the grant for adapterId {:?}, adapterVersion {:?} (--adapter-id, \
             --adapter-version): the adapter must answer to exactly these{}",
            spec.adapter_id,
            spec.adapter_version,
            launched.log_tail()
        )
    };
    let code = run_and_report(&target, &run, &explain);
    pi_conform::conform::adapter::launch::yield_to_interrupt();
    drop(launched);
    code
}
