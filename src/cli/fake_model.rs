//! `pi-conform fake-model`: a scripted OpenAI-compatible chat model on loopback.

#[derive(clap::Args)]
pub struct Args {
    /// Loopback address to listen on (port 0 picks one); other addresses are refused.
    #[arg(long, value_name = "IP:PORT", default_value = "127.0.0.1:0")]
    listen: String,
}

/// `fake-model`: serve until SIGINT/SIGTERM.
pub fn run(args: Args) -> anyhow::Result<u8> {
    pi_conform::fakemodel::run_cli(&args.listen)
}
