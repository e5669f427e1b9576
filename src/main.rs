//! The `pi-conform` command line: argument parsing and output only; every rule lives in the
//! library.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use pi_conform::conform::case::visible;
use serde_json::json;

use pi_conform::adapter::faults::{Fault, Faults};
use pi_conform::conform::killmatrix::FaultSwitch;
use pi_conform::contract::frame::{Binding, Direction};
use pi_conform::contract::{admit_descriptor, Code, PathSide};
use pi_conform::daemon::faults::DaemonFault;
use pi_conform::judge::{judge_line, Context, Kind, Verdict};
use pi_conform::vectors::{default_dir, meets, VectorSet};

/// Exit code: everything valid / every vector matched.
const EXIT_OK: u8 = 0;
/// Exit code: something was invalid / a vector mismatched.
const EXIT_INVALID: u8 = 1;
/// Exit code: usage error or unusable input files.
const EXIT_USAGE: u8 = 2;

#[derive(Parser)]
#[command(name = "pi-conform", version, about = "Conformance toolkit for the Pi host tool-adapter protocol")]
struct Cli {
    /// Colour in reports and logs: `auto` colours a terminal unless NO_COLOR is set.
    #[arg(long, value_enum, default_value = "auto", global = true, value_name = "WHEN")]
    color: ColorChoice,
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ColorChoice {
    Auto,
    Always,
    Never,
}

impl ColorChoice {
    /// Whether to colour what goes to a stream that is (`tty`) or is not a terminal.
    fn enabled(self, tty: bool) -> bool {
        match self {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => tty && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
        }
    }
}

/// The `--color` choice, set once at start.
static COLOR: std::sync::OnceLock<ColorChoice> = std::sync::OnceLock::new();

fn color_for(tty: bool) -> bool {
    COLOR.get().copied().unwrap_or(ColorChoice::Auto).enabled(tty)
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    Human,
    Json,
}

/// Options shared by the runners.
#[derive(clap::Args, Clone)]
struct RunnerOpts {
    /// Report format on standard output.
    #[arg(long, value_enum, default_value = "human")]
    format: Format,
    /// Also write a JUnit XML report here.
    #[arg(long, value_name = "FILE")]
    junit: Option<PathBuf>,
    /// Also write an HTML report here: one self-contained page (no network) with a summary
    /// by clause and level, a status filter and expandable transcripts.
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// Print the (filtered) case catalogue and exit.
    #[arg(long)]
    list: bool,
    /// Only cases whose id starts with this (repeatable).
    #[arg(long = "id", value_name = "PREFIX")]
    ids: Vec<String>,
    /// Only cases of this level (repeatable).
    #[arg(long, value_enum)]
    level: Vec<pi_conform::conform::case::Level>,
    /// Only cases with this tag (repeatable).
    #[arg(long = "tag", value_name = "TAG")]
    tags: Vec<String>,
    /// Multiply every step's time budget (slow machines: 3).
    #[arg(long, default_value_t = 1.0, value_name = "N")]
    time_scale: f64,
    /// Known failures, one case id per line (`#` comments); a listed case that passes is
    /// reported stale.
    #[arg(long, value_name = "FILE")]
    baseline: Option<PathBuf>,
    /// Show passing and skipped cases too.
    #[arg(long, conflicts_with = "quiet")]
    verbose: bool,
    /// No per-case lines or progress; the report shows failures only (no warnings or known
    /// failures), the `failures:` list and the verdict.
    #[arg(short, long)]
    quiet: bool,
    /// Stop after the first failure (a MUST failure not in the baseline, or a harness error);
    /// the cases left are reported as not run.
    #[arg(long, conflicts_with = "max_fail")]
    fail_fast: bool,
    /// Stop after N failures (as for --fail-fast).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    max_fail: Option<u64>,
}

impl RunnerOpts {
    fn fail_limit(&self) -> pi_conform::conform::run::FailLimit {
        let max =
            if self.fail_fast { Some(1) } else { self.max_fail.map(|n| usize::try_from(n).unwrap_or(usize::MAX)) };
        pi_conform::conform::run::FailLimit::new(max)
    }

    fn detail(&self) -> pi_conform::conform::report::Detail {
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

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum MatrixFormat {
    Human,
    Json,
    Lines,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum KindArg {
    Auto,
    Command,
    Response,
    Event,
    Descriptor,
    Frame,
    Path,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum DirectionArg {
    ToAdapter,
    ToDaemon,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum SideArg {
    Daemon,
    Adapter,
}

#[derive(Subcommand)]
enum Cmd {
    /// Judge NDJSON documents, one verdict per input line.
    ///
    /// Exit 0 when every line is valid, 1 when any is invalid, 2 on a usage error.
    Validate {
        /// What each line is (`auto` guesses from its fields).
        #[arg(long, value_enum, default_value = "auto")]
        kind: KindArg,
        /// Descriptor (JSON file) that frames are judged against; required for frames.
        #[arg(long, value_name = "FILE")]
        descriptor: Option<PathBuf>,
        /// Direction of frames: daemon → adapter, or adapter → daemon.
        #[arg(long, value_enum, default_value = "to-adapter")]
        direction: DirectionArg,
        /// The judging host's instance id (descriptor check 8).
        #[arg(long, value_name = "ID", default_value = "host-019f")]
        host_instance: String,
        /// The session a bare descriptor must be bound to.
        #[arg(long, value_name = "ID", default_value = "agent-a")]
        session: String,
        /// The generation a bare descriptor must be bound to.
        #[arg(long, default_value_t = 2)]
        generation: i64,
        /// Which side judges paths (`daemon` is strict, `adapter` also takes `./` and `a/`).
        #[arg(long, value_enum, default_value = "daemon")]
        side: SideArg,
        /// Output format.
        #[arg(long, value_enum, default_value = "human")]
        format: Format,
        /// Input file, or `-` for standard input (read as a stream, one line at a time).
        #[arg(default_value = "-")]
        file: String,
        /// Judge this file as one whole JSON document (pretty-printed or not, e.g. the
        /// descriptor `grant` writes) instead of NDJSON lines.
        #[arg(long, value_name = "FILE", conflicts_with = "file")]
        document: Option<PathBuf>,
    },
    /// Run the reference tool adapter on an owner-private Unix socket.
    ///
    /// Binds are checked against the grants file (reloaded on SIGHUP); SIGTERM/SIGINT revoke
    /// every binding and remove the socket.
    ServeAdapter {
        /// Socket path (its directory must be ours with no group/other bits).
        #[arg(long, value_name = "PATH")]
        socket: PathBuf,
        /// Grants file (mode 0600, ours), written by `pi-conform grant`.
        #[arg(long, value_name = "FILE")]
        grants: PathBuf,
        /// Log format on standard error.
        #[arg(long, value_enum, default_value = "text")]
        log_format: LogFormat,
        /// adapterId this adapter answers to.
        #[arg(long, default_value = "pi-conform-reference")]
        adapter_id: String,
        /// adapterVersion this adapter answers to.
        #[arg(long, default_value = env!("CARGO_PKG_VERSION"))]
        adapter_version: String,
        /// Test aid: delay every operation by this many ms (cancellable).
        #[arg(long, hide = true, default_value_t = 0)]
        op_delay_ms: u64,
        /// Test aid: break one rule on purpose (repeatable; see `kill-matrix --help`).
        #[arg(long = "fault", value_name = "NAME", hide = true)]
        faults: Vec<Fault>,
        /// Close a connection that has not sent a complete `bind` within this many ms.
        #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
        bind_deadline_ms: u64,
        /// Most connections waiting unbound at once; one more is closed at once.
        #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..))]
        max_unbound: u64,
    },
    /// Mint a capability handle, add its grant to the grants file, print the descriptor.
    ///
    /// The descriptor (the only place the handle is written) goes to standard output, or to
    /// --output (created 0600); hand it to the daemon in a v2 open.
    Grant {
        /// Grants file (created 0600 if absent).
        #[arg(long, value_name = "FILE")]
        grants: PathBuf,
        /// The adapter's socket path (the descriptor's endpoint).
        #[arg(long, value_name = "PATH")]
        socket: PathBuf,
        /// Root directory the binding is confined to (the session cwd).
        #[arg(long, value_name = "DIR")]
        root: PathBuf,
        /// The daemon's hostInstanceId (from its handshake).
        #[arg(long, value_name = "ID")]
        host_instance: String,
        /// The session id.
        #[arg(long, value_name = "ID")]
        session: String,
        /// The session generation.
        #[arg(long)]
        generation: u64,
        /// Operations to grant, in order (comma-separated).
        #[arg(long, value_delimiter = ',', default_value = "fs.list,fs.stat,fs.read,fs.search,fs.write,fs.edit")]
        operations: Vec<String>,
        /// Limit: largest daemon → adapter line in bytes.
        #[arg(long, default_value_t = 1_048_576)]
        max_request_bytes: u64,
        /// Limit: largest adapter → daemon line in bytes.
        #[arg(long, default_value_t = 1_048_576)]
        max_response_bytes: u64,
        /// Limit: requests executing at once.
        #[arg(long, default_value_t = 4)]
        max_concurrent_requests: u64,
        /// Limit: requests waiting beyond those.
        #[arg(long, default_value_t = 16)]
        max_queued_requests: u64,
        /// Limit: per-request timeout in ms.
        #[arg(long, default_value_t = 30_000)]
        request_timeout_ms: u64,
        /// Limit: idempotency keys retained.
        #[arg(long, default_value_t = 256)]
        max_idempotency_keys: u64,
        /// Limit: idempotency retention in ms.
        #[arg(long, default_value_t = 3_600_000)]
        idempotency_ttl_ms: u64,
        /// adapterId of the adapter.
        #[arg(long, default_value = "pi-conform-reference")]
        adapter_id: String,
        /// adapterVersion of the adapter.
        #[arg(long, default_value = env!("CARGO_PKG_VERSION"))]
        adapter_version: String,
        /// Write the descriptor here (mode 0600) instead of standard output.
        #[arg(long, value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// Check a tool adapter, clause by clause (the runner plays the daemon side).
    ///
    /// Exit codes: 0 conformant, 1 a MUST failed, 2 usage or harness error, 3 stale
    /// baseline entry (otherwise conformant), 4 the target could not be run (unreachable, or
    /// the preflight failed: no `bound` for the descriptor's bind, or the fixture marker not
    /// visible under --root).
    Adapter {
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
    },
    /// Check a daemon that claims protocol v2 with host tool adapters, clause by clause. The
    /// runner hosts its own probe adapter on a private socket. Exit codes as for `adapter`.
    Daemon {
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
        /// `payload.model` for opens, as PROVIDER/ID (e.g. openai/pi-conform-fake).
        #[arg(long, value_name = "PROVIDER/ID")]
        model: Option<String>,
        #[command(flatten)]
        run: RunnerOpts,
    },
    /// Start the reference adapter on a private temporary socket with a fresh grant and run
    /// the whole adapter suite against it (no setup needed). Same exit codes as `adapter`.
    Selftest {
        #[command(flatten)]
        run: RunnerOpts,
        /// Test aid: break one rule of the reference adapter on purpose (repeatable).
        #[arg(long = "fault", value_name = "NAME", hide = true)]
        faults: Vec<Fault>,
    },
    /// Prove the adapter runner can fail: run the adapter suite against the reference
    /// adapter once per fault switch (each breaks exactly one rule) and print which cases
    /// each fault kills, then which faults kill each MUST clause of the catalogue.
    ///
    /// Exit 0 when every fault kills at least one case, every MUST clause is killed by some
    /// fault (checked only when no --fault filter is given) and, with --expect, the matrix
    /// equals the expected one; 1 otherwise; 2 on a usage or harness error. `--list` shows
    /// the faults. The same switches are hidden `--fault NAME` flags of `serve-adapter` and
    /// `selftest` (test aids: never in production).
    KillMatrix {
        /// Only these faults (repeatable; default: all).
        #[arg(long = "fault", value_name = "NAME")]
        faults: Vec<Fault>,
        /// Output: `human`, `json`, or `lines` (the `conformance/kill-matrix.txt` format).
        #[arg(long, value_enum, default_value = "human")]
        format: MatrixFormat,
        /// Compare with an expected matrix (`conformance/kill-matrix.txt`); a difference exits 1.
        #[arg(long, value_name = "FILE")]
        expect: Option<PathBuf>,
        /// Multiply every step's time budget (slow machines: 3).
        #[arg(long, default_value_t = 1.0, value_name = "N")]
        time_scale: f64,
        /// List the faults (name, clause, the rule each breaks) and exit.
        #[arg(long)]
        list: bool,
    },
    /// Run the reference daemon on an owner-private Unix socket (protocol v1 and v2, host
    /// tool adapters, durable wakes, restart quarantine). SIGTERM/SIGINT revoke every binding.
    ServeDaemon {
        /// Socket path (its directory must be ours with no group/other bits).
        #[arg(long, value_name = "PATH")]
        socket: PathBuf,
        /// State directory (created 0700; catalog and wake journal).
        #[arg(long, value_name = "DIR")]
        state_dir: PathBuf,
        /// Fixed hostInstanceId (default: a new one per start, as a real restart has).
        #[arg(long, value_name = "ID")]
        host_instance: Option<String>,
        /// Log format on standard error.
        #[arg(long, value_enum, default_value = "text")]
        log_format: LogFormat,
        /// Test aid: break one rule of the reference daemon on purpose (repeatable; see
        /// `daemon-kill-matrix --help`).
        #[arg(long = "fault", value_name = "NAME", hide = true)]
        faults: Vec<DaemonFault>,
        /// Close a connection that has not sent one complete line within this many ms of
        /// being accepted (at the connection cap, idle connections are also reclaimed).
        #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
        handshake_deadline_ms: u64,
    },
    /// Prove the daemon runner can fail: run the daemon suite against the reference daemon
    /// once per daemon fault switch (each breaks exactly one rule; the daemon runs as a child
    /// process `serve-daemon --fault NAME` with a restart script) and print which cases each
    /// fault kills, then which faults kill each MUST clause of the daemon catalogue.
    ///
    /// Exit 0 when every fault kills at least one case, every MUST clause is killed by some
    /// fault (checked only when no --fault filter is given) and, with --expect, the matrix
    /// equals the expected one; 1 otherwise; 2 on a usage or harness error. `--list` shows
    /// the faults. Test aid: hidden.
    #[command(hide = true)]
    DaemonKillMatrix {
        /// Only these faults (repeatable; default: all).
        #[arg(long = "fault", value_name = "NAME")]
        faults: Vec<DaemonFault>,
        /// Output: `human`, `json`, or `lines` (the `conformance/daemon-kill-matrix.txt` format).
        #[arg(long, value_enum, default_value = "human")]
        format: MatrixFormat,
        /// Compare with an expected matrix (`conformance/daemon-kill-matrix.txt`); a difference exits 1.
        #[arg(long, value_name = "FILE")]
        expect: Option<PathBuf>,
        /// Multiply every step's time budget (slow machines: 3).
        #[arg(long, default_value_t = 1.0, value_name = "N")]
        time_scale: f64,
        /// List the faults (name, clause, the rule each breaks) and exit.
        #[arg(long)]
        list: bool,
    },
    /// Read the reference daemon's durable state offline: each session's catalog record with
    /// its recovery condition, and the wake journal. With --reconcile, mark every
    /// indeterminate wake as reconciled (the explicit reconciliation that restores readiness;
    /// run it while the daemon is stopped, after checking what those wakes did).
    DaemonState {
        /// State directory.
        #[arg(long, value_name = "DIR")]
        state_dir: PathBuf,
        /// Only this session.
        #[arg(long, value_name = "ID")]
        session: Option<String>,
        /// Mark indeterminate wakes reconciled.
        #[arg(long)]
        reconcile: bool,
    },
    /// Run a scripted OpenAI-compatible chat model on loopback (no credentials, no network):
    /// `TOOL <name> <json-args>` lines of the last user message become tool calls, tool results
    /// get a summary. Prints `listening on http://ADDR`; serves until SIGINT/SIGTERM.
    FakeModel {
        /// Loopback address to listen on (port 0 picks one); other addresses are refused.
        #[arg(long, value_name = "IP:PORT", default_value = "127.0.0.1:0")]
        listen: String,
    },
    /// Print a shell completion script (e.g. `pi-conform completions bash >
    /// ~/.local/share/bash-completion/completions/pi-conform`).
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff) of pi-conform; with --dir, write one page per command
    /// there (`pi-conform.1`, `pi-conform-adapter.1`, …).
    Man {
        /// Write every page into this directory instead.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
    /// List the golden vectors; with --check, verify every verdict.
    ///
    /// Exit 0 when every vector matches, 1 on any mismatch, 2 when the vectors cannot be read.
    Vectors {
        /// Verify each vector's expected verdict.
        #[arg(long)]
        check: bool,
        /// Vector directory (default: the vectors built into this binary; give the checkout's
        /// `vectors/` to check edited vectors without rebuilding).
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
        /// Only vectors whose id starts with this.
        #[arg(long, value_name = "PREFIX")]
        id: Option<String>,
        /// Output format.
        #[arg(long, value_enum, default_value = "human")]
        format: Format,
    },
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { EXIT_USAGE } else { EXIT_OK };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    let _ = COLOR.set(cli.color);
    let result = match cli.command {
        Cmd::Validate {
            kind,
            descriptor,
            direction,
            host_instance,
            session,
            generation,
            side,
            format,
            file,
            document,
        } => validate(kind, descriptor, direction, host_instance, session, generation, side, format, &file, document),
        Cmd::Vectors { check, dir, id, format } => vectors(check, dir, id, format),
        Cmd::Completions { shell } => completions(shell),
        Cmd::Man { dir } => man(dir),
        Cmd::Adapter { socket, descriptor, command, adapter_id, adapter_version, root, sentinel, run } => match command
        {
            Some(command) => adapter_launch(command, adapter_id, adapter_version, root, sentinel, run),
            None if adapter_id.is_some() || adapter_version.is_some() => Err(anyhow::anyhow!(
                "--adapter-id and --adapter-version go with --command (the runner mints the grant); without it \
                 the descriptor names the adapter"
            )),
            None => adapter_runner(socket, descriptor, root, sentinel, run),
        },
        Cmd::Selftest { run, faults } => selftest(run, faults.into_iter().collect()),
        Cmd::ServeDaemon { socket, state_dir, host_instance, log_format, faults, handshake_deadline_ms } => {
            init_logs(log_format);
            let cfg = pi_conform::daemon::server::DaemonConfig {
                socket,
                state_dir,
                host_instance_id: host_instance,
                handle_signals: true,
                handshake_deadline: std::time::Duration::from_millis(handshake_deadline_ms),
                faults: faults.into_iter().collect(),
            };
            (|| -> anyhow::Result<u8> {
                let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
                rt.block_on(pi_conform::daemon::server::serve(cfg, None))?;
                Ok(EXIT_OK)
            })()
        }
        Cmd::DaemonKillMatrix { faults, format, expect, time_scale, list } => {
            if list {
                list_faults::<DaemonFault>(format)
            } else {
                std::env::current_exe().map_err(anyhow::Error::from).and_then(|bin| {
                    // The daemon cases and every replayed golden vector (`vector:<id>`).
                    let (catalogue, _) = pi_conform::conform::daemon::catalogue_with_vectors(&default_dir());
                    kill_matrix(faults, format, expect, time_scale, catalogue, |f, cases| {
                        pi_conform::conform::killmatrix::run_faulty_daemon(&bin, f.into(), cases, time_scale)
                    })
                })
            }
        }
        Cmd::DaemonState { state_dir, session, reconcile } => daemon_state(state_dir, session, reconcile),
        Cmd::FakeModel { listen } => pi_conform::fakemodel::run_cli(&listen),
        Cmd::Daemon { socket, cwd, wake_template, restart_cmd, model, run } => {
            daemon_runner(socket, cwd, wake_template, restart_cmd, model, run)
        }
        Cmd::KillMatrix { faults, format, expect, time_scale, list } => {
            if list {
                list_faults::<Fault>(format)
            } else {
                kill_matrix(faults, format, expect, time_scale, adapter_catalogue(), |f, cases| {
                    pi_conform::conform::killmatrix::run_faulty(f.into(), cases, time_scale)
                })
            }
        }
        Cmd::ServeAdapter {
            socket,
            grants,
            log_format,
            adapter_id,
            adapter_version,
            op_delay_ms,
            faults,
            bind_deadline_ms,
            max_unbound,
        } => {
            let discipline = pi_conform::adapter::server::Discipline {
                bind_deadline: std::time::Duration::from_millis(bind_deadline_ms),
                max_unbound: usize::try_from(max_unbound).unwrap_or(usize::MAX),
            };
            serve_adapter(socket, grants, log_format, adapter_id, adapter_version, op_delay_ms, faults, discipline)
        }
        Cmd::Grant {
            grants,
            socket,
            root,
            host_instance,
            session,
            generation,
            operations,
            max_request_bytes,
            max_response_bytes,
            max_concurrent_requests,
            max_queued_requests,
            request_timeout_ms,
            max_idempotency_keys,
            idempotency_ttl_ms,
            adapter_id,
            adapter_version,
            output,
        } => {
            let limits = [
                max_request_bytes,
                max_response_bytes,
                max_concurrent_requests,
                max_queued_requests,
                request_timeout_ms,
                max_idempotency_keys,
                idempotency_ttl_ms,
            ];
            grant(
                grants,
                socket,
                root,
                host_instance,
                session,
                generation,
                operations,
                limits,
                adapter_id,
                adapter_version,
                output,
            )
        }
    };
    match result {
        Ok(code) => ExitCode::from(code),
        // Standard output closed early (`pi-conform … --list | head -1`): stop quietly, as
        // ripgrep does.
        Err(e) if broken_pipe(&e) => ExitCode::from(EXIT_OK),
        Err(e) => {
            eprintln!("pi-conform: {}", visible(&format!("{e:#}")));
            ExitCode::from(EXIT_USAGE)
        }
    }
}

fn completions(shell: clap_complete::Shell) -> anyhow::Result<u8> {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut <Cli as clap::CommandFactory>::command(), "pi-conform", &mut out);
    std::io::stdout().lock().write_all(&out)?;
    Ok(EXIT_OK)
}

fn man(dir: Option<PathBuf>) -> anyhow::Result<u8> {
    let cmd = <Cli as clap::CommandFactory>::command();
    match dir {
        Some(d) => {
            std::fs::create_dir_all(&d).map_err(|e| anyhow::anyhow!("cannot create {}: {e}", d.display()))?;
            clap_mangen::generate_to(cmd, &d).map_err(|e| anyhow::anyhow!("cannot write into {}: {e}", d.display()))?;
        }
        None => {
            let mut out = Vec::new();
            clap_mangen::Man::new(cmd).render(&mut out)?;
            std::io::stdout().lock().write_all(&out)?;
        }
    }
    Ok(EXIT_OK)
}

/// One strict JSON document from a file; a refusal names the file, the line and the column.
fn read_json_file(path: &std::path::Path, what: &str) -> anyhow::Result<serde_json::Value> {
    let text = std::fs::read(path).map_err(|e| anyhow::anyhow!("cannot read {what} {}: {e}", path.display()))?;
    pi_conform::wire::decode_strict_located(&text).map_err(|e| {
        anyhow::anyhow!("{what} {}:{}:{}: not strict JSON: {}", path.display(), e.line, e.column, e.detail)
    })
}

/// Whether `e` is, or was caused by, writing to a closed pipe.
fn broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe))
}

#[allow(clippy::too_many_arguments)]
fn validate(
    kind: KindArg,
    descriptor: Option<PathBuf>,
    direction: DirectionArg,
    host_instance: String,
    session: String,
    generation: i64,
    side: SideArg,
    format: Format,
    file: &str,
    document: Option<PathBuf>,
) -> anyhow::Result<u8> {
    let kind = match kind {
        KindArg::Auto => None,
        KindArg::Command => Some(Kind::Command),
        KindArg::Response => Some(Kind::Response),
        KindArg::Event => Some(Kind::Event),
        KindArg::Descriptor => Some(Kind::Descriptor),
        KindArg::Frame => Some(Kind::Frame),
        KindArg::Path => Some(Kind::Path),
    };
    let mut ctx = Context {
        host_instance_id: host_instance,
        session_id: session,
        generation,
        direction: match direction {
            DirectionArg::ToAdapter => Direction::ToAdapter,
            DirectionArg::ToDaemon => Direction::ToDaemon,
        },
        side: match side {
            SideArg::Daemon => PathSide::Daemon,
            SideArg::Adapter => PathSide::Adapter,
        },
        ..Context::default()
    };
    if let Some(path) = &descriptor {
        let value = read_json_file(path, "descriptor")?;
        let d = admit_descriptor(&value, None)
            .map_err(|e| anyhow::anyhow!("descriptor {} refused: {}", path.display(), e.describe()))?;
        ctx.binding = Some(Binding::from(&d));
    } else if kind == Some(Kind::Frame) {
        anyhow::bail!("--kind frame needs --descriptor FILE");
    }
    if let Some(doc) = document {
        return validate_document(&doc, kind, &ctx, format);
    }
    let input: Box<dyn std::io::Read> = if file == "-" {
        Box::new(std::io::stdin().lock())
    } else {
        Box::new(std::fs::File::open(file).map_err(|e| anyhow::anyhow!("cannot read {file}: {e}"))?)
    };
    // Streamed: at most one line (capped just over the largest limit) is held at a time.
    let cap = ctx.max_line_bytes.max(ctx.binding.as_ref().map_or(0, |b| {
        usize::try_from(b.line_limit(Direction::ToAdapter).max(b.line_limit(Direction::ToDaemon))).unwrap_or(usize::MAX)
    }));
    let mut lines = pi_conform::judge::LineReader::new(input, cap);
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let (mut valid, mut invalid) = (0usize, 0usize);
    let mut pretty = false;
    while let Some(item) = lines.next_line()? {
        let (n, line) = match item {
            pi_conform::judge::Line::Text { number, bytes } => (number, bytes),
            pi_conform::judge::Line::Binary { number, offset } => {
                out.flush()?;
                anyhow::bail!(
                    "{}: not text (a NUL byte at offset {offset}, line {number}): validate reads NDJSON, one JSON document per line; stopped after {valid} valid and {invalid} invalid lines",
                    if file == "-" { "standard input" } else { file }
                );
            }
        };
        let (k, verdict) = judge_line(line, kind, &ctx);
        if k == Kind::Frame && ctx.binding.is_none() {
            anyhow::bail!("line {n}: a frame needs --descriptor FILE");
        }
        if verdict.is_valid() {
            valid += 1;
        } else {
            invalid += 1;
            // A first line that opens an object or array alone: a pretty-printed document.
            pretty |= valid + invalid == 1 && matches!(line.trim_ascii(), b"{" | b"[");
        }
        if verdict.is_valid() && format == Format::Human {
            // The common case, written without building the label (same text as write_verdict).
            writeln!(out, "line {n}: valid {}", kind_name(k))?;
        } else {
            write_verdict(&mut out, &format!("line {n}"), json!(n), line, k, &verdict, format)?;
        }
        if lines.drained() {
            out.flush()?;
        }
    }
    if format == Format::Human {
        writeln!(out, "{valid} valid, {invalid} invalid")?;
    }
    out.flush()?;
    if pretty {
        eprintln!(
            "pi-conform: hint: {file} looks like one pretty-printed JSON document, not NDJSON; judge it whole with `pi-conform validate --document {file}`"
        );
    }
    Ok(if invalid == 0 { EXIT_OK } else { EXIT_INVALID })
}

/// One verdict, human or JSON; an `invalid_json`/`invalid_utf8` verdict also says where.
fn write_verdict(
    out: &mut impl Write,
    label: &str,
    at: serde_json::Value,
    text: &[u8],
    k: Kind,
    verdict: &Verdict,
    format: Format,
) -> anyhow::Result<()> {
    let kname = kind_name(k);
    let place = match verdict {
        Verdict::Invalid { code, .. } if code == Code::InvalidJson.as_str() || code == Code::InvalidUtf8.as_str() => {
            pi_conform::wire::decode_strict_located(text).err()
        }
        _ => None,
    };
    match format {
        Format::Json => {
            let mut v = json!({"kind": kname, "result": verdict});
            let key = if at.is_string() { "document" } else { "line" };
            v[key] = at;
            if let Some(p) = &place {
                v["position"] = json!({"line": p.line, "column": p.column, "detail": p.detail});
            }
            writeln!(out, "{v}")?
        }
        Format::Human => match verdict {
            Verdict::Valid => writeln!(out, "{label}: valid {kname}")?,
            Verdict::Invalid { code, field, message, disposition } => {
                let disp = disposition.as_deref().map(|d| format!(" ({d})")).unwrap_or_default();
                let at = match &place {
                    Some(p) if label.starts_with("line") => format!(" at column {}: {}", p.column, p.detail),
                    Some(p) => format!(" at line {} column {}: {}", p.line, p.column, p.detail),
                    None => String::new(),
                };
                writeln!(out, "{label}: invalid {kname}: {code} field={field}{disp}: {message}{at}")?
            }
        },
    }
    Ok(())
}

/// `validate --document FILE`: one whole JSON document (pretty-printed or not), judged as the
/// compact line it would be on the wire.
fn validate_document(path: &std::path::Path, kind: Option<Kind>, ctx: &Context, format: Format) -> anyhow::Result<u8> {
    /// Larger than any document the protocol carries (lines are at most 4 MiB).
    const MAX_DOCUMENT: u64 = 64 * 1024 * 1024;
    let label = path.display().to_string();
    let file = std::fs::File::open(path).map_err(|e| anyhow::anyhow!("cannot read {label}: {e}"))?;
    let mut text = Vec::new();
    file.take(MAX_DOCUMENT + 1).read_to_end(&mut text).map_err(|e| anyhow::anyhow!("cannot read {label}: {e}"))?;
    if text.len() as u64 > MAX_DOCUMENT {
        anyhow::bail!("{label}: larger than {MAX_DOCUMENT} bytes; not one protocol document");
    }
    if let Some(offset) = memchr::memchr(0, &text) {
        anyhow::bail!("{label}: not text (a NUL byte at offset {offset})");
    }
    let (k, verdict, shown) = match pi_conform::wire::decode_strict_located(&text) {
        // Judged as its compact encoding: what would travel as one line.
        Ok(value) => {
            let line = serde_json::to_vec(&value)?;
            let (k, verdict) = judge_line(&line, kind, ctx);
            if k == Kind::Frame && ctx.binding.is_none() {
                anyhow::bail!("{label}: a frame needs --descriptor FILE");
            }
            (k, verdict, line)
        }
        Err(_) => {
            let (k, verdict) = judge_line(&text, Some(kind.unwrap_or(Kind::Command)), ctx);
            (k, verdict, text)
        }
    };
    let mut out = std::io::stdout().lock();
    write_verdict(&mut out, &format!("document {label}"), json!(label), &shown, k, &verdict, format)?;
    Ok(if verdict.is_valid() { EXIT_OK } else { EXIT_INVALID })
}

fn vectors(check: bool, dir: Option<PathBuf>, id: Option<String>, format: Format) -> anyhow::Result<u8> {
    let set = VectorSet::load(&dir.unwrap_or_else(default_dir))?;
    if let Some(p) = &id {
        if !set.vectors.iter().any(|v| v.id.starts_with(p.as_str())) {
            anyhow::bail!("no vector id starts with {p:?}");
        }
    }
    let mut out = std::io::stdout().lock();
    let (mut passed, mut failed) = (0usize, 0usize);
    for v in &set.vectors {
        if id.as_deref().is_some_and(|p| !v.id.starts_with(p)) {
            continue;
        }
        let expect = serde_json::to_value(&v.expect)?;
        if !check {
            match format {
                Format::Json => writeln!(
                    out,
                    "{}",
                    json!({"id": v.id, "clause": v.clause, "kind": v.kind, "file": v.file, "expect": expect})
                )?,
                Format::Human => {
                    let exp = match (&v.expect.code, &v.expect.field) {
                        (Some(c), Some(f)) => format!("invalid {c} field={f}"),
                        _ => v.expect.verdict.clone(),
                    };
                    writeln!(out, "{:<64} {:<10} {:<10} {exp}", v.id, v.clause, kind_name(v.kind))?
                }
            }
            continue;
        }
        let verdict = set.judge(v);
        let ok = verdict.as_ref().is_ok_and(|vd| meets(vd, &v.expect));
        if ok {
            passed += 1;
        } else {
            failed += 1;
        }
        let actual = match &verdict {
            Ok(vd) => serde_json::to_value(vd)?,
            Err(e) => json!({"error": e}),
        };
        match format {
            Format::Json => writeln!(out, "{}", json!({"id": v.id, "ok": ok, "expect": expect, "actual": actual}))?,
            Format::Human if !ok => writeln!(out, "MISMATCH {} ({}): expected {expect}, got {actual}", v.id, v.clause)?,
            Format::Human => {}
        }
    }
    if check && format == Format::Human {
        writeln!(out, "vectors: {passed} passed, {failed} failed")?;
    }
    Ok(if failed == 0 { EXIT_OK } else { EXIT_INVALID })
}

fn list_cases(run: &RunnerOpts, filter: &pi_conform::conform::run::Filter) -> anyhow::Result<u8> {
    let catalogue = adapter_catalogue();
    if !catalogue.iter().any(|m| filter.keeps(m)) {
        anyhow::bail!("no case matches the filters");
    }
    let mut out = std::io::stdout().lock();
    for m in catalogue.iter().filter(|m| filter.keeps(m)) {
        match run.format {
            Format::Json => writeln!(out, "{}", serde_json::to_string(m)?)?,
            Format::Human => {
                let level = match m.level {
                    pi_conform::conform::case::Level::Must => "MUST",
                    pi_conform::conform::case::Level::Should => "SHOULD",
                };
                writeln!(
                    out,
                    "{:<48} {:<6} {:<14} [{}] accepts {}",
                    m.id,
                    level,
                    m.clause,
                    m.tags.join(","),
                    m.accepted.join(" | ")
                )?
            }
        }
    }
    Ok(EXIT_OK)
}

/// The adapter catalogue with the golden vectors replayed as cases (a warning, and the
/// built-in cases only, when the vectors cannot be read).
fn adapter_catalogue() -> Vec<pi_conform::conform::case::CaseMeta> {
    let (catalogue, no_vectors) = pi_conform::conform::adapter::catalogue_with_vectors(&default_dir());
    if let Some(why) = no_vectors {
        eprintln!("pi-conform: {why}");
    }
    catalogue
}

fn runner_filter(run: &RunnerOpts) -> anyhow::Result<pi_conform::conform::run::Filter> {
    if !(run.time_scale.is_finite() && run.time_scale > 0.0 && run.time_scale <= 100.0) {
        anyhow::bail!("--time-scale must be a number in (0, 100]");
    }
    Ok(pi_conform::conform::run::Filter {
        id_prefixes: run.ids.clone(),
        levels: run.level.clone(),
        tags: run.tags.clone(),
    })
}

fn run_and_report(target: &pi_conform::conform::adapter::Target, run: &RunnerOpts) -> anyhow::Result<u8> {
    use pi_conform::conform::run as engine;
    let filter = runner_filter(run)?;
    let baseline = load_baseline(run)?;
    let catalogue = adapter_catalogue();
    if !catalogue.iter().any(|m| filter.keeps(m)) {
        anyhow::bail!("no case matches the filters");
    }
    // One bind and one fs.stat of the fixture marker first: a mute adapter, a refused bind or
    // a wrong --root stops here with one diagnostic instead of failing every case.
    match pi_conform::conform::adapter::preflight::preflight(target) {
        Ok(()) => {}
        Err(pi_conform::conform::adapter::preflight::PreflightError::Target(m)) => {
            eprintln!("pi-conform: preflight failed: {}", visible(&m));
            return Ok(engine::EXIT_UNREACHABLE);
        }
        Err(e) => {
            eprintln!("pi-conform: {}", visible(&e.to_string()));
            return Ok(engine::EXIT_HARNESS);
        }
    }
    let progress = progress_printer(run);
    let rep = match engine::run_adapter(target, &catalogue, &filter, baseline.as_ref(), progress) {
        Ok(r) => r,
        Err(engine::RunError::Unreachable(m)) => {
            eprintln!("pi-conform: target unreachable: {}", visible(&m));
            return Ok(engine::EXIT_UNREACHABLE);
        }
        Err(e) => {
            eprintln!("pi-conform: {}", visible(&e.to_string()));
            return Ok(engine::EXIT_HARNESS);
        }
    };
    emit_report(&rep, run)
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
        return list_cases(&run, &filter);
    }
    let socket = socket.ok_or_else(|| anyhow::anyhow!("give the adapter's socket (or --list)"))?;
    let dpath = descriptor.ok_or_else(|| anyhow::anyhow!("--descriptor FILE is required"))?;
    let root = root.ok_or_else(|| anyhow::anyhow!("--root DIR is required"))?;
    let value = read_json_file(&dpath, "descriptor")?;
    let root = std::fs::canonicalize(&root).map_err(|e| anyhow::anyhow!("root {}: {e}", root.display()))?;
    let sentinel = sentinel.unwrap_or_else(|| default_sentinel(&root));
    let target = pi_conform::conform::adapter::Target::new(&socket, value, &root, &sentinel, run.time_scale)
        .map_err(|e| anyhow::anyhow!(e))?;
    run_and_report(&target, &run)
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
        return list_cases(&run, &filter);
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
    .map_err(|e| anyhow::anyhow!(e))?;
    if run.format == Format::Human && !run.quiet {
        writeln!(
            std::io::stdout(),
            "adapter: started `sh -c` with a fresh grant; socket and grants in {}",
            launched.dir().display()
        )?;
    }
    let code = run_and_report(&target, &run);
    pi_conform::conform::adapter::launch::yield_to_interrupt();
    drop(launched);
    code
}

fn default_sentinel(root: &std::path::Path) -> PathBuf {
    let mut name = root.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(".sentinel");
    root.with_file_name(name)
}

fn selftest(run: RunnerOpts, faults: Faults) -> anyhow::Result<u8> {
    let filter = runner_filter(&run)?;
    if run.list {
        return list_cases(&run, &filter);
    }
    if !adapter_catalogue().iter().any(|m| filter.keeps(m)) {
        anyhow::bail!("no case matches the filters");
    }
    let adapter =
        pi_conform::conform::selftest::ReferenceAdapter::start_with(faults).map_err(|e| anyhow::anyhow!(e))?;
    let target = adapter.target(run.time_scale).map_err(|e| anyhow::anyhow!(e))?;
    if !faults.is_empty() {
        eprintln!("pi-conform: FAULT SWITCHES ON ({faults}): the reference adapter is broken on purpose");
    }
    if run.format == Format::Human && !run.quiet {
        writeln!(
            std::io::stdout(),
            "selftest: the reference adapter on a private socket in {}",
            adapter.dir().display()
        )?;
    }
    run_and_report(&target, &run)
}

fn list_faults<F: FaultSwitch>(format: MatrixFormat) -> anyhow::Result<u8> {
    let mut out = std::io::stdout().lock();
    for f in F::ALL {
        match format {
            MatrixFormat::Json => {
                writeln!(out, "{}", json!({"fault": f.name(), "clause": f.clause(), "description": f.description()}))?
            }
            _ => writeln!(out, "{:<28} {:<13} {}", f.name(), f.clause(), f.description())?,
        }
    }
    Ok(EXIT_OK)
}

/// `kill-matrix` and `daemon-kill-matrix`: run `catalogue` once per fault of `only` (all when
/// empty) through `run`, judge and print the matrix.
fn kill_matrix<F: FaultSwitch>(
    only: Vec<F>,
    format: MatrixFormat,
    expect: Option<PathBuf>,
    time_scale: f64,
    catalogue: Vec<pi_conform::conform::case::CaseMeta>,
    mut run: impl FnMut(F, &[pi_conform::conform::case::CaseMeta]) -> Result<pi_conform::conform::run::Report, String>,
) -> anyhow::Result<u8> {
    use pi_conform::conform::killmatrix::{kill_row, parse_kill_matrix, render_kill_matrix, Matrix, Verdict};
    if !cfg!(feature = "faults") {
        anyhow::bail!(pi_conform::adapter::faults::NOT_BUILT);
    }
    if !(time_scale.is_finite() && time_scale > 0.0 && time_scale <= 100.0) {
        anyhow::bail!("--time-scale must be a number in (0, 100]");
    }
    let expected = match &expect {
        Some(p) => Some(
            parse_kill_matrix::<F>(
                &std::fs::read_to_string(p).map_err(|e| anyhow::anyhow!("cannot read {}: {e}", p.display()))?,
            )
            .map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?,
        ),
        None => None,
    };
    let all = only.is_empty();
    let faults: Vec<F> = F::ALL.iter().copied().filter(|f| all || only.contains(f)).collect();
    let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let mut rows = Vec::new();
    for (i, f) in faults.iter().enumerate() {
        if tty {
            eprint!("\r\x1b[2K[{}/{}] {f}", i + 1, faults.len());
        }
        rows.push(kill_row(*f, &catalogue, &mut run));
    }
    if tty {
        eprintln!();
    }
    let matrix = Matrix::judge::<F>(rows, &catalogue, all, expected.as_ref());
    let code = match matrix.verdict() {
        Verdict::Proven => EXIT_OK,
        Verdict::Inconclusive => EXIT_USAGE,
        Verdict::NotProven => EXIT_INVALID,
    };
    let mut out = std::io::stdout().lock();
    match format {
        MatrixFormat::Lines => out.write_all(render_kill_matrix::<F>(&matrix.rows).as_bytes())?,
        MatrixFormat::Json => writeln!(out, "{}", serde_json::to_string_pretty(&matrix.to_json(code))?)?,
        MatrixFormat::Human => out.write_all(matrix.to_human::<F>().as_bytes())?,
    }
    Ok(code)
}

fn load_baseline(run: &RunnerOpts) -> anyhow::Result<Option<pi_conform::conform::run::Baseline>> {
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
fn progress_printer(
    run: &RunnerOpts,
) -> impl FnMut(usize, usize, &pi_conform::conform::case::CaseResult) -> pi_conform::conform::run::Flow {
    use std::io::IsTerminal;
    let stdout_tty = std::io::stdout().is_terminal();
    let stderr_tty = std::io::stderr().is_terminal();
    let (quiet, format) = (run.quiet, run.format);
    let mut limit = run.fail_limit();
    move |i, n, r| {
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
            // A closed standard output ends the run quietly when the report is written.
            let _ = writeln!(std::io::stdout(), "{line}");
        } else {
            let line = pi_conform::conform::report::case_line(i, n, r, color_for(stderr_tty));
            let _ = writeln!(std::io::stderr(), "{line}");
        }
        flow
    }
}

fn emit_report(rep: &pi_conform::conform::run::Report, run: &RunnerOpts) -> anyhow::Result<u8> {
    use pi_conform::conform::report;
    // Files first: a closed standard output (`| head`) must not lose them.
    if let Some(path) = &run.junit {
        let xml = report::junit(rep).map_err(|e| anyhow::anyhow!("cannot render JUnit: {e}"))?;
        std::fs::write(path, xml).map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
    }
    if let Some(path) = &run.html {
        std::fs::write(path, report::html(rep)).map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
    }
    let mut out = std::io::stdout().lock();
    match run.format {
        Format::Human => {
            let color = color_for(std::io::IsTerminal::is_terminal(&out));
            out.write_all(report::human(rep, run.detail(), color).as_bytes())?
        }
        Format::Json => writeln!(out, "{}", serde_json::to_string_pretty(&report::json(rep))?)?,
    }
    out.flush()?;
    Ok(rep.exit_code())
}

fn daemon_runner(
    socket: Option<PathBuf>,
    cwd: Option<PathBuf>,
    wake_template: String,
    restart_cmd: Option<String>,
    model: Option<String>,
    run: RunnerOpts,
) -> anyhow::Result<u8> {
    use pi_conform::conform::run as engine;
    let filter = runner_filter(&run)?;
    let vectors = pi_conform::vectors::default_dir();
    let (catalogue, no_vectors) = pi_conform::conform::daemon::catalogue_with_vectors(&vectors);
    if let Some(why) = no_vectors {
        eprintln!("pi-conform: {why}");
    }
    if !catalogue.iter().any(|m| filter.keeps(m)) {
        anyhow::bail!("no case matches the filters");
    }
    if run.list {
        let mut out = std::io::stdout().lock();
        for m in catalogue.iter().filter(|m| filter.keeps(m)) {
            match run.format {
                Format::Json => writeln!(out, "{}", serde_json::to_string(m)?)?,
                Format::Human => writeln!(
                    out,
                    "{:<52} {:<6} {:<8} [{}] accepts {}",
                    m.id,
                    format!("{:?}", m.level).to_uppercase(),
                    m.clause,
                    m.tags.join(","),
                    m.accepted.join(" | ")
                )?,
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
        model,
        step: std::time::Duration::from_secs_f64((2.0 * run.time_scale).max(0.05)),
        vectors,
    };
    let baseline = load_baseline(&run)?;
    let progress = progress_printer(&run);
    let rep = match engine::run_daemon(&target, &catalogue, &filter, baseline.as_ref(), progress) {
        Ok(r) => r,
        Err(engine::RunError::Unreachable(m)) => {
            eprintln!("pi-conform: target unreachable: {}", visible(&m));
            return Ok(engine::EXIT_UNREACHABLE);
        }
        Err(e) => {
            eprintln!("pi-conform: {}", visible(&e.to_string()));
            return Ok(engine::EXIT_HARNESS);
        }
    };
    emit_report(&rep, &run)
}

fn daemon_state(state_dir: PathBuf, session: Option<String>, reconcile: bool) -> anyhow::Result<u8> {
    let store = pi_conform::daemon::store::Store::open(&state_dir)?;
    // Every record and the journal's high-water marks are checked before anything is changed.
    let loaded = store.load()?;
    if reconcile {
        let mut n = 0;
        for mut w in loaded.wakes {
            if w.state == "indeterminate" || w.state == "accepted" {
                w.state = "reconciled".into();
                store.put_wake(&w)?;
                n += 1;
            }
        }
        eprintln!("reconciled {n} indeterminate wakes");
    }
    let sessions: Vec<_> =
        store.sessions()?.into_iter().filter(|s| session.as_ref().is_none_or(|id| &s.session_id == id)).collect();
    let wakes: Vec<_> =
        store.wakes()?.into_iter().filter(|w| session.as_ref().is_none_or(|id| &w.session_id == id)).collect();
    writeln!(std::io::stdout(), "{}", serde_json::to_string_pretty(&json!({"sessions": sessions, "wakes": wakes}))?)?;
    Ok(EXIT_OK)
}

fn init_logs(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("PI_CONFORM_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let ansi = color_for(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let b = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi);
    match format {
        LogFormat::Json => b.json().init(),
        LogFormat::Text => b.init(),
    }
}

#[allow(clippy::too_many_arguments)]
fn serve_adapter(
    socket: PathBuf,
    grants: PathBuf,
    log_format: LogFormat,
    adapter_id: String,
    adapter_version: String,
    op_delay_ms: u64,
    faults: Vec<Fault>,
    discipline: pi_conform::adapter::server::Discipline,
) -> anyhow::Result<u8> {
    init_logs(log_format);
    let cfg = pi_conform::adapter::server::ServeConfig {
        socket,
        grants,
        identity: pi_conform::adapter::session::AdapterIdentity { adapter_id, adapter_version },
        op_delay: std::time::Duration::from_millis(op_delay_ms),
        handle_signals: true,
    };
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(pi_conform::adapter::server::serve_disciplined(cfg, faults.into_iter().collect(), discipline, None))?;
    Ok(EXIT_OK)
}

#[allow(clippy::too_many_arguments)]
fn grant(
    grants: PathBuf,
    socket: PathBuf,
    root: PathBuf,
    host_instance_id: String,
    session_id: String,
    generation: u64,
    operations: Vec<String>,
    limits: [u64; 7],
    adapter_id: String,
    adapter_version: String,
    output: Option<PathBuf>,
) -> anyhow::Result<u8> {
    let operations = operations
        .iter()
        .map(|o| o.trim().parse().map_err(|_| anyhow::anyhow!("unknown operation {o:?}")))
        .collect::<anyhow::Result<Vec<_>>>()?;
    // A zero `maxConcurrentRequests` or `maxIdempotencyKeys` is refused here, typed.
    let limits = pi_conform::adapter::grants::grant_limits(limits)?;
    let req = pi_conform::adapter::grants::GrantRequest {
        socket,
        root,
        host_instance_id,
        session_id,
        generation,
        operations,
        limits,
        adapter_id,
        adapter_version,
    };
    let descriptor = pi_conform::adapter::grants::grant(&grants, &req)?;
    let text = serde_json::to_vec_pretty(&descriptor)?;
    match output {
        Some(path) => pi_conform::adapter::grants::write_atomic(&path, &text)?,
        None => {
            let mut out = std::io::stdout().lock();
            out.write_all(&text)?;
            out.write_all(b"\n")?;
        }
    }
    Ok(EXIT_OK)
}

fn kind_name(k: Kind) -> &'static str {
    k.as_str()
}
