//! `pi-conform selftest`: start the reference adapter with a fresh grant and run the whole
//! adapter suite against it.

use std::io::Write;

use pi_conform::adapter::faults::{Fault, Faults};

use super::runner::{adapter_catalogue, list_cases, run_and_report, runner_filter, RunnerOpts};
use super::Format;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    run: RunnerOpts,
    /// Test aid: break one rule of the reference adapter on purpose (repeatable).
    #[arg(long = "fault", value_name = "NAME", hide = true)]
    faults: Vec<Fault>,
}

/// `selftest`: the adapter suite against the reference adapter on a private socket.
pub fn run(args: Args) -> anyhow::Result<u8> {
    let Args { run, faults } = args;
    let faults: Faults = faults.into_iter().collect();
    let filter = runner_filter(&run)?;
    if run.list {
        return list_cases(&run, &filter, true);
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
            super::stdout(),
            "selftest: the reference adapter on a private socket in {}",
            adapter.dir().display()
        )?;
    }
    run_and_report(&target, &run, &String::new)
}
