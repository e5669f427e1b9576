//! `pi-conform watch`: the judge without the driver (DESIGN "Watching live traffic").
//!
//! A Unix-socket proxy between two live peers — a daemon and its tool adapter
//! (`watch adapter`, [`adapter`]), or a client and a daemon (`watch daemon`, [`daemon`]) —
//! that forwards every byte unchanged and in order ([`proxy`]) and judges every frame in both
//! directions with the contract's functions and the runners' exchange rules. A violation is
//! reported ([`report`]) and the bytes still pass: the peers decide. `--record FILE` writes
//! what was seen as session vectors the runners replay with `--session FILE` ([`record`]).
//! The handle never reaches the output or the recording.
//!
//! Exit: 0 when no violation was seen (known PC-9 conflicts are reported, not counted), 1
//! otherwise; SIGINT or SIGTERM ends the watch with the summary.

pub mod adapter;
pub mod daemon;
pub mod proxy;
pub mod record;
pub mod report;

use std::cell::RefCell;
use std::io::ErrorKind;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use self::proxy::JudgeFactory;
use self::record::Recorder;
use self::report::Reporter;
pub use self::report::WatchFormat;

/// Exit code: no violation seen.
pub const EXIT_CLEAN: u8 = 0;
/// Exit code: at least one violation seen.
pub const EXIT_VIOLATIONS: u8 = 1;

/// Which two peers to watch.
#[derive(clap::Subcommand, Clone, Debug)]
pub enum WatchCmd {
    /// Watch a daemon and its tool adapter: the daemon connects to --listen (the descriptor's
    /// `endpoint.path` names it) and the proxy connects to the adapter at --upstream.
    Adapter(WatchArgs),
    /// Watch a client and a daemon: the client connects to --listen, the proxy to the
    /// daemon's socket at --upstream.
    Daemon(WatchArgs),
}

/// The options of both watches.
#[derive(clap::Args, Clone, Debug)]
pub struct WatchArgs {
    /// The socket to listen on (created owner-only, 0600; removed at exit). A stale socket
    /// nothing answers on is replaced; anything else there is an error.
    #[arg(long, value_name = "PATH")]
    pub listen: PathBuf,
    /// The real peer's socket (connected once per accepted connection).
    #[arg(long, value_name = "PATH")]
    pub upstream: PathBuf,
    /// Write what was seen as session vectors (one per connection) to FILE, for
    /// `pi-conform adapter|daemon … --session FILE`.
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
    /// Output: one line per violation, or one JSON object per event.
    #[arg(long, value_enum, default_value = "human")]
    pub format: WatchFormat,
}

/// Why a watch could not run.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// The listening socket could not be made.
    #[error("cannot listen on {path}: {message}")]
    Listen {
        /// The path.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// The runtime or the signal handlers could not start.
    #[error("cannot start: {0}")]
    Start(#[from] std::io::Error),
}

/// Run a watch until SIGINT or SIGTERM; the exit code ([`EXIT_CLEAN`], [`EXIT_VIOLATIONS`]).
pub fn run(cmd: WatchCmd) -> Result<u8, WatchError> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async move { watch(cmd).await })
}

async fn watch(cmd: WatchCmd) -> Result<u8, WatchError> {
    use tokio::signal::unix::{signal, SignalKind};
    let (args, side) = match cmd {
        WatchCmd::Adapter(a) => (a, Side::Adapter),
        WatchCmd::Daemon(a) => (a, Side::Daemon),
    };
    let mut sigint = signal(SignalKind::interrupt())?;
    let mut sigterm = signal(SignalKind::terminate())?;
    let listener = listen(&args.listen)?;
    let report = Reporter::new(args.format, Box::new(std::io::stdout()));
    let recorder = args.record.clone().map(Recorder::new);
    let make: JudgeFactory = match side {
        Side::Adapter => {
            let rec = recorder.clone();
            Box::new(move |id, r| Box::new(adapter::AdapterWatch::new(id, r, rec.clone())))
        }
        Side::Daemon => {
            let rec = recorder.clone();
            let facts = Rc::new(RefCell::new(daemon::DaemonFacts::default()));
            Box::new(move |id, r| Box::new(daemon::DaemonWatch::new(id, r, facts.clone(), rec.clone())))
        }
    };
    report.note(None, &format!("watching {} → {} ({side:?} side)", args.listen.display(), args.upstream.display()));
    let serve = proxy::serve(listener, &args.upstream, make, report.clone());
    tokio::select! {
        _ = serve => {}
        _ = sigint.recv() => {}
        _ = sigterm.recv() => {}
    }
    let _ = std::fs::remove_file(&args.listen);
    if let Some(r) = &recorder {
        if let Err(e) = r.write() {
            report.note(None, &format!("cannot write the recording: {e}"));
        }
    }
    report.summary();
    Ok(if report.violations() == 0 { EXIT_CLEAN } else { EXIT_VIOLATIONS })
}

#[derive(Clone, Copy, Debug)]
enum Side {
    Adapter,
    Daemon,
}

/// Bind `path` owner-only, replacing only a stale socket.
fn listen(path: &Path) -> Result<tokio::net::UnixListener, WatchError> {
    let err = |m: String| WatchError::Listen { path: path.to_path_buf(), message: m };
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => {
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err(err("something answers on it already".into()));
            }
            std::fs::remove_file(path).map_err(|e| err(format!("cannot replace the stale socket: {e}")))?;
        }
        Ok(_) => return Err(err("the path exists and is not a socket".into())),
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => return Err(err(e.to_string())),
    }
    let l = tokio::net::UnixListener::bind(path).map_err(|e| err(e.to_string()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(|e| err(e.to_string()))?;
    Ok(l)
}
