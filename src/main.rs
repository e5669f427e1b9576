//! The `pi-conform` command line: argument parsing and output only; every rule lives in the
//! library.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use serde_json::json;

use pi_conform::contract::frame::{Binding, Direction};
use pi_conform::contract::{admit_descriptor, PathSide};
use pi_conform::judge::{judge_line, Context, Kind, Verdict};
use pi_conform::vectors::{default_dir, meets, VectorSet};

/// Exit code: everything valid / every vector matched.
const EXIT_OK: u8 = 0;
/// Exit code: something was invalid / a vector mismatched.
const EXIT_INVALID: u8 = 1;
/// Exit code: usage error or unusable input files.
const EXIT_USAGE: u8 = 2;

#[derive(Parser)]
#[command(name = "pi-conform", version, about = "Conformance toolkit for the Pi host tool-adapter protocol")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    Human,
    Json,
}

/// Options shared by the runners.
#[derive(clap::Args, Clone)]
struct RunnerOpts {
    /// Report format on standard output.
    #[arg(long, value_enum, default_value = "human")]
    format: Format,
    /// Also write a JUnit XML report here.
    #[arg(long, value_name = "FILE")]
    junit: Option<PathBuf>,
    /// Print the (filtered) case catalogue and exit.
    #[arg(long)]
    list: bool,
    /// Only cases whose id starts with this (repeatable).
    #[arg(long = "id", value_name = "PREFIX")]
    ids: Vec<String>,
    /// Only cases of this level (repeatable).
    #[arg(long, value_enum)]
    level: Vec<pi_conform::conform::case::Level>,
    /// Only cases with this tag (repeatable).
    #[arg(long = "tag", value_name = "TAG")]
    tags: Vec<String>,
    /// Multiply every step's time budget (slow machines: 3).
    #[arg(long, default_value_t = 1.0, value_name = "N")]
    time_scale: f64,
    /// Known failures, one case id per line (`#` comments); a listed case that passes is
    /// reported stale.
    #[arg(long, value_name = "FILE")]
    baseline: Option<PathBuf>,
    /// Show passing cases too.
    #[arg(long)]
    verbose: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum KindArg {
    Auto,
    Command,
    Response,
    Event,
    Descriptor,
    Frame,
    Path,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum DirectionArg {
    ToAdapter,
    ToDaemon,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum SideArg {
    Daemon,
    Adapter,
}

#[derive(Subcommand)]
enum Cmd {
    /// Judge NDJSON documents, one verdict per input line.
    ///
    /// Exit 0 when every line is valid, 1 when any is invalid, 2 on a usage error.
    Validate {
        /// What each line is (`auto` guesses from its fields).
        #[arg(long, value_enum, default_value = "auto")]
        kind: KindArg,
        /// Descriptor (JSON file) that frames are judged against; required for frames.
        #[arg(long, value_name = "FILE")]
        descriptor: Option<PathBuf>,
        /// Direction of frames: daemon → adapter, or adapter → daemon.
        #[arg(long, value_enum, default_value = "to-adapter")]
        direction: DirectionArg,
        /// The judging host's instance id (descriptor check 8).
        #[arg(long, value_name = "ID", default_value = "host-019f")]
        host_instance: String,
        /// The session a bare descriptor must be bound to.
        #[arg(long, value_name = "ID", default_value = "agent-a")]
        session: String,
        /// The generation a bare descriptor must be bound to.
        #[arg(long, default_value_t = 2)]
        generation: i64,
        /// Which side judges paths (`daemon` is strict, `adapter` also takes `./` and `a/`).
        #[arg(long, value_enum, default_value = "daemon")]
        side: SideArg,
        /// Output format.
        #[arg(long, value_enum, default_value = "human")]
        format: Format,
        /// Input file, or `-` for standard input.
        #[arg(default_value = "-")]
        file: String,
    },
    /// Run the reference tool adapter on an owner-private Unix socket.
    ///
    /// Binds are checked against the grants file (reloaded on SIGHUP); SIGTERM/SIGINT revoke
    /// every binding and remove the socket.
    ServeAdapter {
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
    },
    /// Mint a capability handle, add its grant to the grants file, print the descriptor.
    ///
    /// The descriptor (the only place the handle is written) goes to standard output, or to
    /// --output (created 0600); hand it to the daemon in a v2 open.
    Grant {
        /// Grants file (created 0600 if absent).
        #[arg(long, value_name = "FILE")]
        grants: PathBuf,
        /// The adapter's socket path (the descriptor's endpoint).
        #[arg(long, value_name = "PATH")]
        socket: PathBuf,
        /// Root directory the binding is confined to (the session cwd).
        #[arg(long, value_name = "DIR")]
        root: PathBuf,
        /// The daemon's hostInstanceId (from its handshake).
        #[arg(long, value_name = "ID")]
        host_instance: String,
        /// The session id.
        #[arg(long, value_name = "ID")]
        session: String,
        /// The session generation.
        #[arg(long)]
        generation: u64,
        /// Operations to grant, in order (comma-separated).
        #[arg(long, value_delimiter = ',', default_value = "fs.list,fs.stat,fs.read,fs.search,fs.write,fs.edit")]
        operations: Vec<String>,
        /// Limit: largest daemon → adapter line in bytes.
        #[arg(long, default_value_t = 1_048_576)]
        max_request_bytes: u64,
        /// Limit: largest adapter → daemon line in bytes.
        #[arg(long, default_value_t = 1_048_576)]
        max_response_bytes: u64,
        /// Limit: requests executing at once.
        #[arg(long, default_value_t = 4)]
        max_concurrent_requests: u64,
        /// Limit: requests waiting beyond those.
        #[arg(long, default_value_t = 16)]
        max_queued_requests: u64,
        /// Limit: per-request timeout in ms.
        #[arg(long, default_value_t = 30_000)]
        request_timeout_ms: u64,
        /// Limit: idempotency keys retained.
        #[arg(long, default_value_t = 256)]
        max_idempotency_keys: u64,
        /// Limit: idempotency retention in ms.
        #[arg(long, default_value_t = 3_600_000)]
        idempotency_ttl_ms: u64,
        /// adapterId of the adapter.
        #[arg(long, default_value = "pi-conform-reference")]
        adapter_id: String,
        /// adapterVersion of the adapter.
        #[arg(long, default_value = env!("CARGO_PKG_VERSION"))]
        adapter_version: String,
        /// Write the descriptor here (mode 0600) instead of standard output.
        #[arg(long, value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// Check a tool adapter, clause by clause (the runner plays the daemon side).
    ///
    /// Exit codes: 0 conformant, 1 a MUST failed, 2 usage or harness error, 3 stale
    /// baseline entry (otherwise conformant), 4 target unreachable.
    Adapter {
        /// The adapter's Unix socket.
        socket: Option<PathBuf>,
        /// The descriptor a daemon would receive for this adapter (JSON file; holds the handle).
        #[arg(long, value_name = "FILE")]
        descriptor: Option<PathBuf>,
        /// The grant's root directory: the runner lays its fixture tree here. It must be empty
        /// or hold a previous run's `.pi-conform-fixture` marker.
        #[arg(long, value_name = "DIR")]
        root: Option<PathBuf>,
        /// A directory beside the root that nothing may touch (default: `<root>.sentinel`).
        #[arg(long, value_name = "DIR")]
        sentinel: Option<PathBuf>,
        #[command(flatten)]
        run: RunnerOpts,
    },
    /// Start the reference adapter on a private temporary socket with a fresh grant and run
    /// the whole adapter suite against it (no setup needed). Same exit codes as `adapter`.
    Selftest {
        #[command(flatten)]
        run: RunnerOpts,
    },
    /// List the golden vectors; with --check, verify every verdict.
    ///
    /// Exit 0 when every vector matches, 1 on any mismatch, 2 when the vectors cannot be read.
    Vectors {
        /// Verify each vector's expected verdict.
        #[arg(long)]
        check: bool,
        /// Vector directory (default: the one shipped with this build).
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
        /// Only vectors whose id starts with this.
        #[arg(long, value_name = "PREFIX")]
        id: Option<String>,
        /// Output format.
        #[arg(long, value_enum, default_value = "human")]
        format: Format,
    },
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { EXIT_USAGE } else { EXIT_OK };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    let result = match cli.command {
        Cmd::Validate { kind, descriptor, direction, host_instance, session, generation, side, format, file } => {
            validate(kind, descriptor, direction, host_instance, session, generation, side, format, &file)
        }
        Cmd::Vectors { check, dir, id, format } => vectors(check, dir, id, format),
        Cmd::Adapter { socket, descriptor, root, sentinel, run } => {
            adapter_runner(socket, descriptor, root, sentinel, run)
        }
        Cmd::Selftest { run } => selftest(run),
        Cmd::ServeAdapter { socket, grants, log_format, adapter_id, adapter_version, op_delay_ms } => {
            serve_adapter(socket, grants, log_format, adapter_id, adapter_version, op_delay_ms)
        }
        Cmd::Grant {
            grants,
            socket,
            root,
            host_instance,
            session,
            generation,
            operations,
            max_request_bytes,
            max_response_bytes,
            max_concurrent_requests,
            max_queued_requests,
            request_timeout_ms,
            max_idempotency_keys,
            idempotency_ttl_ms,
            adapter_id,
            adapter_version,
            output,
        } => {
            let limits = pi_conform::contract::Limits::from_values([
                max_request_bytes,
                max_response_bytes,
                max_concurrent_requests,
                max_queued_requests,
                request_timeout_ms,
                max_idempotency_keys,
                idempotency_ttl_ms,
            ]);
            grant(
                grants,
                socket,
                root,
                host_instance,
                session,
                generation,
                operations,
                limits,
                adapter_id,
                adapter_version,
                output,
            )
        }
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("pi-conform: {e:#}");
            ExitCode::from(EXIT_USAGE)
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn validate(
    kind: KindArg,
    descriptor: Option<PathBuf>,
    direction: DirectionArg,
    host_instance: String,
    session: String,
    generation: i64,
    side: SideArg,
    format: Format,
    file: &str,
) -> anyhow::Result<u8> {
    let kind = match kind {
        KindArg::Auto => None,
        KindArg::Command => Some(Kind::Command),
        KindArg::Response => Some(Kind::Response),
        KindArg::Event => Some(Kind::Event),
        KindArg::Descriptor => Some(Kind::Descriptor),
        KindArg::Frame => Some(Kind::Frame),
        KindArg::Path => Some(Kind::Path),
    };
    let mut ctx = Context {
        host_instance_id: host_instance,
        session_id: session,
        generation,
        direction: match direction {
            DirectionArg::ToAdapter => Direction::ToAdapter,
            DirectionArg::ToDaemon => Direction::ToDaemon,
        },
        side: match side {
            SideArg::Daemon => PathSide::Daemon,
            SideArg::Adapter => PathSide::Adapter,
        },
        ..Context::default()
    };
    if let Some(path) = &descriptor {
        let text =
            std::fs::read(path).map_err(|e| anyhow::anyhow!("cannot read descriptor {}: {e}", path.display()))?;
        let value = pi_conform::wire::decode_strict(&text)
            .map_err(|e| anyhow::anyhow!("descriptor {}: {e}", path.display()))?;
        let d = admit_descriptor(&value, None)
            .map_err(|e| anyhow::anyhow!("descriptor {} refused: {e}", path.display()))?;
        ctx.binding = Some(Binding::from(&d));
    } else if kind == Some(Kind::Frame) {
        anyhow::bail!("--kind frame needs --descriptor FILE");
    }
    let mut input = Vec::new();
    if file == "-" {
        std::io::stdin().read_to_end(&mut input)?;
    } else {
        input = std::fs::read(file).map_err(|e| anyhow::anyhow!("cannot read {file}: {e}"))?;
    }
    let mut out = std::io::stdout().lock();
    let (mut valid, mut invalid) = (0usize, 0usize);
    for (n, raw) in input.split(|b| *b == b'\n').enumerate() {
        let line = raw.strip_suffix(b"\r").unwrap_or(raw);
        if line.is_empty() {
            continue;
        }
        let (k, verdict) = judge_line(line, kind, &ctx);
        if k == Kind::Frame && ctx.binding.is_none() {
            anyhow::bail!("line {}: a frame needs --descriptor FILE", n + 1);
        }
        if verdict.is_valid() {
            valid += 1;
        } else {
            invalid += 1;
        }
        let kname = serde_json::to_value(k)?.as_str().unwrap_or_default().to_string();
        match format {
            Format::Json => writeln!(out, "{}", json!({"line": n + 1, "kind": kname, "result": verdict}))?,
            Format::Human => match &verdict {
                Verdict::Valid => writeln!(out, "line {}: valid {kname}", n + 1)?,
                Verdict::Invalid { code, field, message, disposition } => {
                    let disp = disposition.as_deref().map(|d| format!(" ({d})")).unwrap_or_default();
                    writeln!(out, "line {}: invalid {kname}: {code} field={field}{disp}: {message}", n + 1)?
                }
            },
        }
    }
    if format == Format::Human {
        writeln!(out, "{valid} valid, {invalid} invalid")?;
    }
    Ok(if invalid == 0 { EXIT_OK } else { EXIT_INVALID })
}

fn vectors(check: bool, dir: Option<PathBuf>, id: Option<String>, format: Format) -> anyhow::Result<u8> {
    let set = VectorSet::load(&dir.unwrap_or_else(default_dir))?;
    let mut out = std::io::stdout().lock();
    let (mut passed, mut failed) = (0usize, 0usize);
    for v in &set.vectors {
        if id.as_deref().is_some_and(|p| !v.id.starts_with(p)) {
            continue;
        }
        let expect = serde_json::to_value(&v.expect)?;
        if !check {
            match format {
                Format::Json => writeln!(
                    out,
                    "{}",
                    json!({"id": v.id, "clause": v.clause, "kind": v.kind, "file": v.file, "expect": expect})
                )?,
                Format::Human => {
                    let exp = match (&v.expect.code, &v.expect.field) {
                        (Some(c), Some(f)) => format!("invalid {c} field={f}"),
                        _ => v.expect.verdict.clone(),
                    };
                    writeln!(out, "{:<64} {:<10} {:<10} {exp}", v.id, v.clause, kind_name(v.kind))?
                }
            }
            continue;
        }
        let verdict = set.judge(v);
        let ok = verdict.as_ref().is_ok_and(|vd| meets(vd, &v.expect));
        if ok {
            passed += 1;
        } else {
            failed += 1;
        }
        let actual = match &verdict {
            Ok(vd) => serde_json::to_value(vd)?,
            Err(e) => json!({"error": e}),
        };
        match format {
            Format::Json => writeln!(out, "{}", json!({"id": v.id, "ok": ok, "expect": expect, "actual": actual}))?,
            Format::Human if !ok => writeln!(out, "MISMATCH {} ({}): expected {expect}, got {actual}", v.id, v.clause)?,
            Format::Human => {}
        }
    }
    if check && format == Format::Human {
        writeln!(out, "vectors: {passed} passed, {failed} failed")?;
    }
    Ok(if failed == 0 { EXIT_OK } else { EXIT_INVALID })
}

fn list_cases(run: &RunnerOpts, filter: &pi_conform::conform::run::Filter) -> anyhow::Result<u8> {
    let mut out = std::io::stdout().lock();
    for m in pi_conform::conform::adapter::catalogue().iter().filter(|m| filter.keeps(m)) {
        match run.format {
            Format::Json => writeln!(out, "{}", serde_json::to_string(m)?)?,
            Format::Human => {
                let level = match m.level {
                    pi_conform::conform::case::Level::Must => "MUST",
                    pi_conform::conform::case::Level::Should => "SHOULD",
                };
                writeln!(
                    out,
                    "{:<48} {:<6} {:<14} [{}] accepts {}",
                    m.id,
                    level,
                    m.clause,
                    m.tags.join(","),
                    m.accepted.join(" | ")
                )?
            }
        }
    }
    Ok(EXIT_OK)
}

fn runner_filter(run: &RunnerOpts) -> anyhow::Result<pi_conform::conform::run::Filter> {
    if !(run.time_scale.is_finite() && run.time_scale > 0.0 && run.time_scale <= 100.0) {
        anyhow::bail!("--time-scale must be a number in (0, 100]");
    }
    Ok(pi_conform::conform::run::Filter {
        id_prefixes: run.ids.clone(),
        levels: run.level.clone(),
        tags: run.tags.clone(),
    })
}

fn run_and_report(target: &pi_conform::conform::adapter::Target, run: &RunnerOpts) -> anyhow::Result<u8> {
    use pi_conform::conform::{report, run as engine};
    let filter = runner_filter(run)?;
    let baseline = match &run.baseline {
        Some(p) => Some(engine::Baseline::parse(
            &std::fs::read_to_string(p).map_err(|e| anyhow::anyhow!("cannot read baseline {}: {e}", p.display()))?,
        )),
        None => None,
    };
    let catalogue = pi_conform::conform::adapter::catalogue();
    if !catalogue.iter().any(|m| filter.keeps(m)) {
        anyhow::bail!("no case matches the filters");
    }
    let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let progress = |i: usize, n: usize, r: &pi_conform::conform::case::CaseResult| {
        if tty {
            eprint!("\r\x1b[2K[{i}/{n}] {} {}", r.status.as_str(), r.id);
            if i == n {
                eprintln!();
            }
        }
    };
    let rep = match engine::run_adapter(target, &catalogue, &filter, baseline.as_ref(), progress) {
        Ok(r) => r,
        Err(engine::RunError::Unreachable(m)) => {
            eprintln!("pi-conform: target unreachable: {m}");
            return Ok(engine::EXIT_UNREACHABLE);
        }
        Err(e) => {
            eprintln!("pi-conform: {e}");
            return Ok(engine::EXIT_HARNESS);
        }
    };
    match run.format {
        Format::Human => print!("{}", report::human(&rep, run.verbose)),
        Format::Json => println!("{}", serde_json::to_string_pretty(&report::json(&rep))?),
    }
    if let Some(path) = &run.junit {
        let xml = report::junit(&rep).map_err(|e| anyhow::anyhow!("cannot render JUnit: {e}"))?;
        std::fs::write(path, xml).map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
    }
    Ok(rep.exit_code())
}

fn adapter_runner(
    socket: Option<PathBuf>,
    descriptor: Option<PathBuf>,
    root: Option<PathBuf>,
    sentinel: Option<PathBuf>,
    run: RunnerOpts,
) -> anyhow::Result<u8> {
    let filter = runner_filter(&run)?;
    if run.list {
        return list_cases(&run, &filter);
    }
    let socket = socket.ok_or_else(|| anyhow::anyhow!("give the adapter's socket (or --list)"))?;
    let dpath = descriptor.ok_or_else(|| anyhow::anyhow!("--descriptor FILE is required"))?;
    let root = root.ok_or_else(|| anyhow::anyhow!("--root DIR is required"))?;
    let text = std::fs::read(&dpath).map_err(|e| anyhow::anyhow!("cannot read descriptor {}: {e}", dpath.display()))?;
    let value =
        pi_conform::wire::decode_strict(&text).map_err(|e| anyhow::anyhow!("descriptor {}: {e}", dpath.display()))?;
    let root = std::fs::canonicalize(&root).map_err(|e| anyhow::anyhow!("root {}: {e}", root.display()))?;
    let sentinel = sentinel.unwrap_or_else(|| {
        let mut name = root.file_name().map(|n| n.to_os_string()).unwrap_or_default();
        name.push(".sentinel");
        root.with_file_name(name)
    });
    let target = pi_conform::conform::adapter::Target::new(&socket, value, &root, &sentinel, run.time_scale)
        .map_err(|e| anyhow::anyhow!(e))?;
    run_and_report(&target, &run)
}

fn selftest(run: RunnerOpts) -> anyhow::Result<u8> {
    let filter = runner_filter(&run)?;
    if run.list {
        return list_cases(&run, &filter);
    }
    let adapter = pi_conform::conform::selftest::ReferenceAdapter::start().map_err(|e| anyhow::anyhow!(e))?;
    let target = adapter.target(run.time_scale).map_err(|e| anyhow::anyhow!(e))?;
    if run.format == Format::Human {
        println!("selftest: the reference adapter on a private socket in {}", adapter.dir().display());
    }
    run_and_report(&target, &run)
}

fn init_logs(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("PI_CONFORM_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let b = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi);
    match format {
        LogFormat::Json => b.json().init(),
        LogFormat::Text => b.init(),
    }
}

fn serve_adapter(
    socket: PathBuf,
    grants: PathBuf,
    log_format: LogFormat,
    adapter_id: String,
    adapter_version: String,
    op_delay_ms: u64,
) -> anyhow::Result<u8> {
    init_logs(log_format);
    let cfg = pi_conform::adapter::server::ServeConfig {
        socket,
        grants,
        identity: pi_conform::adapter::session::AdapterIdentity { adapter_id, adapter_version },
        op_delay: std::time::Duration::from_millis(op_delay_ms),
        handle_signals: true,
    };
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(pi_conform::adapter::server::serve(cfg, None))?;
    Ok(EXIT_OK)
}

#[allow(clippy::too_many_arguments)]
fn grant(
    grants: PathBuf,
    socket: PathBuf,
    root: PathBuf,
    host_instance_id: String,
    session_id: String,
    generation: u64,
    operations: Vec<String>,
    limits: pi_conform::contract::Limits,
    adapter_id: String,
    adapter_version: String,
    output: Option<PathBuf>,
) -> anyhow::Result<u8> {
    let operations = operations
        .iter()
        .map(|o| o.trim().parse().map_err(|_| anyhow::anyhow!("unknown operation {o:?}")))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let req = pi_conform::adapter::grants::GrantRequest {
        socket,
        root,
        host_instance_id,
        session_id,
        generation,
        operations,
        limits,
        adapter_id,
        adapter_version,
    };
    let descriptor = pi_conform::adapter::grants::grant(&grants, &req)?;
    let text = serde_json::to_vec_pretty(&descriptor)?;
    match output {
        Some(path) => pi_conform::adapter::grants::write_atomic(&path, &text)?,
        None => {
            let mut out = std::io::stdout().lock();
            out.write_all(&text)?;
            out.write_all(b"\n")?;
        }
    }
    Ok(EXIT_OK)
}

fn kind_name(k: Kind) -> String {
    serde_json::to_value(k).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default()
}
