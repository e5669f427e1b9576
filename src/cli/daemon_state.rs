//! `pi-conform daemon-state`: read the reference daemon's durable state offline.

use std::io::Write;
use std::path::PathBuf;

use serde_json::json;

use super::EXIT_OK;

#[derive(clap::Args)]
pub struct Args {
    /// State directory.
    #[arg(long, value_name = "DIR")]
    state_dir: PathBuf,
    /// Only this session.
    #[arg(long, value_name = "ID")]
    session: Option<String>,
    /// Mark indeterminate wakes reconciled.
    #[arg(long)]
    reconcile: bool,
}

/// `daemon-state`: print (and with `--reconcile`, reconcile) the durable state.
pub fn run(args: Args) -> anyhow::Result<u8> {
    let Args { state_dir, session, reconcile } = args;
    // Reconciling writes the state: only while no daemon owns it (its lock); reading does not lock.
    let store = if reconcile {
        pi_conform::daemon::store::Store::open_exclusive(&state_dir)?
    } else {
        pi_conform::daemon::store::Store::open(&state_dir)?
    };
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
        eprintln!("reconciled {}", pi_conform::conform::report::count(n, "indeterminate wake", "indeterminate wakes"));
    }
    let sessions: Vec<_> =
        store.sessions()?.into_iter().filter(|s| session.as_ref().is_none_or(|id| &s.session_id == id)).collect();
    let wakes: Vec<_> =
        store.wakes()?.into_iter().filter(|w| session.as_ref().is_none_or(|id| &w.session_id == id)).collect();
    writeln!(super::stdout(), "{}", serde_json::to_string_pretty(&json!({"sessions": sessions, "wakes": wakes}))?)?;
    Ok(EXIT_OK)
}
