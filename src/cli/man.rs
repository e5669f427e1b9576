//! `pi-conform man`: the manual pages (roff).

use std::io::Write;
use std::path::PathBuf;

use super::EXIT_OK;

#[derive(clap::Args)]
pub struct Args {
    /// Write every page into this directory instead.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

/// `man`: the page of `cmd` on standard output, or one page per command into `--dir`.
pub fn run(args: Args, cmd: clap::Command) -> anyhow::Result<u8> {
    match args.dir {
        Some(d) => {
            std::fs::create_dir_all(&d).map_err(|e| anyhow::anyhow!("cannot create {}: {e}", d.display()))?;
            clap_mangen::generate_to(cmd, &d).map_err(|e| anyhow::anyhow!("cannot write into {}: {e}", d.display()))?;
        }
        None => {
            let mut out = Vec::new();
            clap_mangen::Man::new(cmd).render(&mut out)?;
            super::stdout().write_all(&out)?;
        }
    }
    Ok(EXIT_OK)
}
