//! The `pi-conform` command line: the table of subcommands and the exit status. Each
//! subcommand's arguments and its run live in `cli/` (one module each); every rule lives in
//! the library.

mod cli;

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};
use pi_conform::conform::case::visible;

use cli::{broken_pipe, ColorChoice, EXIT_OK, EXIT_USAGE};

#[derive(Parser)]
#[command(name = "pi-conform", version, about = "Conformance toolkit for the Pi host tool-adapter protocol")]
struct Cli {
    /// Colour in reports and logs: `auto` colours a terminal unless NO_COLOR is set.
    #[arg(long, value_enum, default_value = "auto", global = true, value_name = "WHEN")]
    color: ColorChoice,
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Judge NDJSON documents, one verdict per input line.
    ///
    /// Exit 0 when every line is valid, 1 when any is invalid, 2 on a usage error.
    Validate(cli::validate::Args),
    /// Run the reference tool adapter on an owner-private Unix socket.
    ///
    /// Binds are checked against the grants file (reloaded on SIGHUP); SIGTERM/SIGINT revoke
    /// every binding and remove the socket.
    ServeAdapter(cli::serve_adapter::Args),
    /// Mint a capability handle, add its grant to the grants file, print the descriptor.
    ///
    /// The descriptor (the only place the handle is written) goes to standard output, or to
    /// --output (created 0600); hand it to the daemon in a v2 open.
    Grant(cli::grant::Args),
    /// Check a tool adapter, clause by clause (the runner plays the daemon side).
    ///
    /// Exit codes: 0 conformant, 1 a MUST failed, 2 usage error, 3 stale baseline entry
    /// (otherwise conformant), 4 unreachable (nothing answers on the socket, or the --command
    /// adapter did not start), 5 inconclusive (a harness error, or the target answered but the
    /// suite could not run: no `bound` for the descriptor's bind, the fixture marker not
    /// visible under --root). The exit code is the verdict's even when standard output closes
    /// early (`| head`): the run finishes, only its printing stops.
    Adapter(cli::adapter::Args),
    /// Check a daemon that claims protocol v2 with host tool adapters, clause by clause. The
    /// runner hosts its own probe adapter on a private socket. Exit codes as for `adapter`.
    Daemon(cli::daemon::Args),
    /// Start the reference adapter on a private temporary socket with a fresh grant and run
    /// the whole adapter suite against it (no setup needed). Same exit codes as `adapter`.
    Selftest(cli::selftest::Args),
    /// Prove the adapter runner can fail: run the adapter suite against the reference
    /// adapter once per fault switch (each breaks exactly one rule) and print which cases
    /// each fault kills, then which faults kill each MUST clause of the catalogue.
    ///
    /// Exit 0 when every fault kills at least one case, every MUST clause is killed by some
    /// fault (checked only when no --fault filter is given) and, with --expect, the matrix
    /// equals the expected one; 1 otherwise; 2 on a usage error; 5 on a harness error
    /// (inconclusive). `--list` shows the faults. The same switches are hidden `--fault NAME` flags of `serve-adapter` and
    /// `selftest` (test aids: never in production).
    KillMatrix(cli::kill_matrix::Args),
    /// Run the reference daemon on an owner-private Unix socket (protocol v1 and v2, host
    /// tool adapters, durable wakes, restart quarantine). SIGTERM/SIGINT revoke every binding.
    ServeDaemon(cli::serve_daemon::Args),
    /// Prove the daemon runner can fail: run the daemon suite against the reference daemon
    /// once per daemon fault switch (each breaks exactly one rule; the daemon runs as a child
    /// process `serve-daemon --fault NAME` with a restart script) and print which cases each
    /// fault kills, then which faults kill each MUST clause of the daemon catalogue.
    ///
    /// Exit 0 when every fault kills at least one case, every MUST clause is killed by some
    /// fault (checked only when no --fault filter is given) and, with --expect, the matrix
    /// equals the expected one; 1 otherwise; 2 on a usage error; 5 on a harness error
    /// (inconclusive). `--list` shows the faults. Test aid: hidden.
    #[command(hide = true)]
    DaemonKillMatrix(cli::daemon_kill_matrix::Args),
    /// Read the reference daemon's durable state offline: each session's catalog record with
    /// its recovery condition, and the wake journal. With --reconcile, mark every
    /// indeterminate wake as reconciled (the explicit reconciliation that restores readiness;
    /// run it while the daemon is stopped, after checking what those wakes did).
    DaemonState(cli::daemon_state::Args),
    /// Run a scripted OpenAI-compatible chat model on loopback (no credentials, no network):
    /// `TOOL <name> <json-args>` lines of the last user message become tool calls, tool results
    /// get a summary. Prints `listening on http://ADDR`; serves until SIGINT/SIGTERM.
    FakeModel(cli::fake_model::Args),
    /// Judge live traffic: a Unix-socket proxy between two real peers that forwards every byte
    /// unchanged and reports each frame that breaks a rule (exit 0: none seen, 1: some).
    Watch(cli::watch::Args),
    /// Print a shell completion script (e.g. `pi-conform completions bash >
    /// ~/.local/share/bash-completion/completions/pi-conform`).
    Completions(cli::completions::Args),
    /// Print the manual page (roff) of pi-conform; with --dir, write one page per command
    /// there (`pi-conform.1`, `pi-conform-adapter.1`, …).
    Man(cli::man::Args),
    /// List the golden vectors; with --check, verify every verdict.
    ///
    /// Exit 0 when every vector matches, 1 on any mismatch, 2 when the vectors cannot be read.
    Vectors(cli::vectors::Args),
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
    cli::set_color(cli.color);
    let result = match cli.command {
        Cmd::Validate(a) => cli::validate::run(a),
        Cmd::Vectors(a) => cli::vectors::run(a),
        Cmd::Completions(a) => cli::completions::run(a, Cli::command()),
        Cmd::Man(a) => cli::man::run(a, Cli::command()),
        Cmd::Adapter(a) => cli::adapter::run(a),
        Cmd::Selftest(a) => cli::selftest::run(a),
        Cmd::ServeDaemon(a) => cli::serve_daemon::run(a),
        Cmd::DaemonKillMatrix(a) => cli::daemon_kill_matrix::run(a),
        Cmd::DaemonState(a) => cli::daemon_state::run(a),
        Cmd::FakeModel(a) => cli::fake_model::run(a),
        Cmd::Watch(a) => cli::watch::run(a),
        Cmd::Daemon(a) => cli::daemon::run(a),
        Cmd::KillMatrix(a) => cli::kill_matrix::run(a),
        Cmd::ServeAdapter(a) => cli::serve_adapter::run(a),
        Cmd::Grant(a) => cli::grant::run(a),
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
