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

fn kind_name(k: Kind) -> String {
    serde_json::to_value(k).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default()
}
