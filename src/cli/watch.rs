//! `pi-conform watch`: judge live traffic between two real peers.

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    side: pi_conform::watch::WatchCmd,
}

/// `watch adapter|daemon`: proxy and judge until SIGINT/SIGTERM.
pub fn run(args: Args) -> anyhow::Result<u8> {
    pi_conform::watch::run(args.side).map_err(anyhow::Error::from)
}
