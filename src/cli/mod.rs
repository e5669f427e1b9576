//! The subcommands of `pi-conform`, one module each: their arguments and how each turns them
//! into library calls and an exit code. Every rule lives in the library; what a subcommand
//! prints is rendered by the report layer (`pi_conform::conform::report`, `pi_conform::judge`).

pub mod adapter;
pub mod completions;
pub mod daemon;
pub mod daemon_kill_matrix;
pub mod daemon_state;
pub mod fake_model;
pub mod grant;
pub mod kill_matrix;
pub mod man;
pub mod runner;
pub mod selftest;
pub mod serve_adapter;
pub mod serve_daemon;
pub mod validate;
pub mod vectors;
pub mod watch;

use clap::ValueEnum;

/// Exit code: everything valid / every vector matched.
pub const EXIT_OK: u8 = 0;
/// Exit code: something was invalid / a vector mismatched.
pub const EXIT_INVALID: u8 = 1;
/// Exit code: usage error or unusable input files.
pub const EXIT_USAGE: u8 = 2;

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ColorChoice {
    Auto,
    Always,
    Never,
}

impl ColorChoice {
    /// Whether to colour what goes to a stream that is (`tty`) or is not a terminal.
    fn enabled(self, tty: bool) -> bool {
        match self {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => tty && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
        }
    }
}

/// The `--color` choice, set once at start.
static COLOR: std::sync::OnceLock<ColorChoice> = std::sync::OnceLock::new();

/// Records the `--color` choice (once, at start).
pub fn set_color(choice: ColorChoice) {
    let _ = COLOR.set(choice);
}

/// Whether to colour what goes to a stream that is (`tty`) or is not a terminal.
pub fn color_for(tty: bool) -> bool {
    COLOR.get().copied().unwrap_or(ColorChoice::Auto).enabled(tty)
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Human,
    Json,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// One strict JSON document from a file; a refusal names the file, the line and the column.
pub fn read_json_file(path: &std::path::Path, what: &str) -> anyhow::Result<serde_json::Value> {
    let text = std::fs::read(path).map_err(|e| anyhow::anyhow!("cannot read {what} {}: {e}", path.display()))?;
    pi_conform::wire::decode_strict_located(&text).map_err(|e| {
        anyhow::anyhow!("{what} {}:{}:{}: not strict JSON: {}", path.display(), e.line, e.column, e.detail)
    })
}

/// Set once standard output's reader is gone (`| head -1`).
static STDOUT_CLOSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Standard output that goes quiet when its reader is gone: the first write that meets a closed
/// pipe (EPIPE) and every one after it is dropped and reported as written. A command therefore
/// finishes its work and exits with its verdict's code whatever happens to its output; only
/// what would have been printed is lost (files it writes, such as `--junit` and `--html`, are
/// not).
pub struct Out(std::io::Stdout);

/// Standard output, quiet once closed (see [`Out`]).
pub fn stdout() -> Out {
    Out(std::io::stdout())
}

/// Whether standard output's reader has gone.
pub fn stdout_closed() -> bool {
    STDOUT_CLOSED.load(std::sync::atomic::Ordering::Relaxed)
}

impl Out {
    fn quiet(&self, r: std::io::Result<()>) -> std::io::Result<()> {
        match r {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                STDOUT_CLOSED.store(true, std::sync::atomic::Ordering::Relaxed);
                Ok(())
            }
            r => r,
        }
    }

    /// Whether standard output is a terminal.
    pub fn is_terminal(&self) -> bool {
        std::io::IsTerminal::is_terminal(&self.0)
    }
}

impl std::io::Write for Out {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if stdout_closed() {
            return Ok(buf.len());
        }
        let r = self.0.lock().write_all(buf);
        self.quiet(r).map(|()| buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if stdout_closed() {
            return Ok(());
        }
        let r = self.0.lock().flush();
        self.quiet(r)
    }
}

/// Whether `e` is, or was caused by, writing to a closed pipe.
pub fn broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe))
}

/// Logs on standard error for the servers, filtered by `PI_CONFORM_LOG` (default `info`).
pub fn init_logs(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("PI_CONFORM_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let ansi = color_for(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let b = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi);
    match format {
        LogFormat::Json => b.json().init(),
        LogFormat::Text => b.init(),
    }
}
