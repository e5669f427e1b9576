//! `pi-conform completions`: a shell completion script.

use std::io::Write;

use super::EXIT_OK;

#[derive(clap::Args)]
pub struct Args {
    /// The shell.
    #[arg(value_enum)]
    shell: clap_complete::Shell,
}

/// `completions`: the script for `args.shell`, completing the commands of `cmd`.
pub fn run(args: Args, mut cmd: clap::Command) -> anyhow::Result<u8> {
    let mut out = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "pi-conform", &mut out);
    super::stdout().write_all(&out)?;
    Ok(EXIT_OK)
}
