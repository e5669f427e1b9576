//! `pi-conform serve-daemon`: run the reference daemon.

use std::path::PathBuf;

use pi_conform::daemon::faults::DaemonFault;

use super::{init_logs, LogFormat, EXIT_OK};

#[derive(clap::Args)]
pub struct Args {
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
    /// Most sessions kept, resident, dormant and retained closed together; a new one past
    /// it is refused with `session_capacity`.
    #[arg(long, default_value_t = pi_conform::daemon::core::MAX_SESSIONS as u64, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    max_sessions: u64,
}

/// `serve-daemon`: the reference daemon until SIGTERM/SIGINT.
pub fn run(args: Args) -> anyhow::Result<u8> {
    let Args { socket, state_dir, host_instance, log_format, faults, handshake_deadline_ms, max_sessions } = args;
    init_logs(log_format);
    let cfg = pi_conform::daemon::server::DaemonConfig {
        socket,
        state_dir,
        host_instance_id: host_instance,
        handle_signals: true,
        handshake_deadline: std::time::Duration::from_millis(handshake_deadline_ms),
        max_sessions: usize::try_from(max_sessions).unwrap_or(usize::MAX),
        faults: faults.into_iter().collect(),
    };
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(pi_conform::daemon::server::serve(cfg, None))?;
    Ok(EXIT_OK)
}
