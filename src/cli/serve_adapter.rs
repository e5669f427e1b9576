//! `pi-conform serve-adapter`: run the reference tool adapter.

use std::path::PathBuf;

use pi_conform::adapter::faults::Fault;

use super::{init_logs, LogFormat, EXIT_OK};

#[derive(clap::Args)]
pub struct Args {
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
}

/// `serve-adapter`: the reference adapter until SIGTERM/SIGINT.
pub fn run(args: Args) -> anyhow::Result<u8> {
    let Args {
        socket,
        grants,
        log_format,
        adapter_id,
        adapter_version,
        op_delay_ms,
        faults,
        bind_deadline_ms,
        max_unbound,
    } = args;
    let discipline = pi_conform::adapter::server::Discipline {
        bind_deadline: std::time::Duration::from_millis(bind_deadline_ms),
        max_unbound: usize::try_from(max_unbound).unwrap_or(usize::MAX),
    };
    init_logs(log_format);
    let cfg = pi_conform::adapter::server::ServeConfig {
        socket,
        grants,
        identity: pi_conform::adapter::session::AdapterIdentity { adapter_id, adapter_version },
        op_delay: std::time::Duration::from_millis(op_delay_ms),
        handle_signals: true,
    };
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let served = rt.block_on(pi_conform::adapter::server::serve_disciplined(
        cfg,
        faults.into_iter().collect(),
        discipline,
        None,
    ));
    // Jobs still running after the shutdown grace (cancelled, not yet at a check) do not hold
    // the exit (issue 25, N1).
    rt.shutdown_timeout(pi_conform::adapter::server::JOB_EXIT_GRACE);
    served?;
    Ok(EXIT_OK)
}
