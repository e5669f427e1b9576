//! `pi-conform daemon-kill-matrix` (hidden): prove the daemon runner can fail, one fault
//! switch of the reference daemon (run as a child process) at a time.

use std::path::PathBuf;

use pi_conform::daemon::faults::DaemonFault;
use pi_conform::vectors::default_dir;

use super::kill_matrix::{kill_matrix, list_faults, MatrixFormat};

#[derive(clap::Args)]
pub struct Args {
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
}

/// `daemon-kill-matrix`: the daemon suite once per daemon fault switch.
pub fn run(args: Args) -> anyhow::Result<u8> {
    let Args { faults, format, expect, time_scale, list } = args;
    if list {
        return list_faults::<DaemonFault>(format);
    }
    let bin = std::env::current_exe()?;
    // The daemon cases and every replayed golden vector (`vector:<id>`).
    let (catalogue, _) = pi_conform::conform::daemon::catalogue_with_vectors(&default_dir());
    kill_matrix(faults, format, expect, time_scale, catalogue, |f, cases| {
        pi_conform::conform::killmatrix::run_faulty_daemon(&bin, f.into(), cases, time_scale)
    })
}
