//! `pi-conform validate`: judge NDJSON documents (or one whole document), one verdict per line.

use std::io::{Read, Write};
use std::path::PathBuf;

use clap::ValueEnum;
use serde_json::json;

use pi_conform::contract::frame::{Binding, Direction};
use pi_conform::contract::{admit_descriptor, PathSide};
use pi_conform::judge::{judge_line, Context, Kind, Verdict};

use super::{read_json_file, Format, EXIT_INVALID, EXIT_OK};

#[derive(clap::Args)]
pub struct Args {
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
    /// Input file, or `-` for standard input (read as a stream, one line at a time).
    #[arg(default_value = "-")]
    file: String,
    /// Judge this file as one whole JSON document (pretty-printed or not, e.g. the
    /// descriptor `grant` writes) instead of NDJSON lines.
    #[arg(long, value_name = "FILE", conflicts_with = "file")]
    document: Option<PathBuf>,
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

/// `validate`: one verdict per input line (or for one whole document).
pub fn run(args: Args) -> anyhow::Result<u8> {
    let Args { kind, descriptor, direction, host_instance, session, generation, side, format, file, document } = args;
    let file = file.as_str();
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
        let value = read_json_file(path, "descriptor")?;
        let d = admit_descriptor(&value, None)
            .map_err(|e| anyhow::anyhow!("descriptor {} refused: {}", path.display(), e.describe()))?;
        ctx.binding = Some(Binding::from(&d));
    } else if kind == Some(Kind::Frame) {
        anyhow::bail!("--kind frame needs --descriptor FILE");
    }
    if let Some(doc) = document {
        return validate_document(&doc, kind, &ctx, format);
    }
    let input: Box<dyn std::io::Read> = if file == "-" {
        Box::new(std::io::stdin().lock())
    } else {
        Box::new(std::fs::File::open(file).map_err(|e| anyhow::anyhow!("cannot read {file}: {e}"))?)
    };
    // Streamed: at most one line (capped just over the largest limit) is held at a time.
    let cap = ctx.max_line_bytes.max(ctx.binding.as_ref().map_or(0, |b| {
        usize::try_from(b.line_limit(Direction::ToAdapter).max(b.line_limit(Direction::ToDaemon))).unwrap_or(usize::MAX)
    }));
    let mut lines = pi_conform::judge::LineReader::new(input, cap);
    let mut out = std::io::BufWriter::new(super::stdout());
    let (mut valid, mut invalid) = (0usize, 0usize);
    let mut pretty = false;
    // Every line gets a verdict whatever bytes it holds: a NUL or another raw control byte is
    // `invalid_json`, invalid UTF-8 `invalid_utf8`, as a peer reading the line would answer.
    while let Some(pi_conform::judge::Line { number: n, bytes: line }) = lines.next_line()? {
        let (k, verdict) = judge_line(line, kind, &ctx);
        if k == Kind::Frame && ctx.binding.is_none() {
            anyhow::bail!("line {n}: a frame needs --descriptor FILE");
        }
        if verdict.is_valid() {
            valid += 1;
        } else {
            invalid += 1;
            // A first line that opens an object or array alone: a pretty-printed document.
            pretty |= valid + invalid == 1 && matches!(line.trim_ascii(), b"{" | b"[");
        }
        if verdict.is_valid() && format == Format::Human {
            // The common case, written without building the label (same text as write_verdict).
            writeln!(out, "line {n}: valid {}", kind_name(k))?;
        } else {
            write_verdict(&mut out, &format!("line {n}"), json!(n), line, k, &verdict, format)?;
        }
        if lines.drained() {
            out.flush()?;
        }
    }
    if format == Format::Human {
        writeln!(out, "{valid} valid, {invalid} invalid")?;
    }
    out.flush()?;
    if pretty {
        eprintln!(
            "pi-conform: hint: {file} looks like one pretty-printed JSON document, not NDJSON; judge it whole with `pi-conform validate --document {file}`"
        );
    }
    Ok(if invalid == 0 { EXIT_OK } else { EXIT_INVALID })
}

/// One verdict, human or JSON, as the judge renders it.
fn write_verdict(
    out: &mut impl Write,
    label: &str,
    at: serde_json::Value,
    text: &[u8],
    k: Kind,
    verdict: &Verdict,
    format: Format,
) -> anyhow::Result<()> {
    out.write_all(pi_conform::judge::render_verdict(label, at, text, k, verdict, format == Format::Json).as_bytes())?;
    Ok(())
}

/// `validate --document FILE`: one whole JSON document (pretty-printed or not), judged as the
/// compact line it would be on the wire.
fn validate_document(path: &std::path::Path, kind: Option<Kind>, ctx: &Context, format: Format) -> anyhow::Result<u8> {
    /// Larger than any document the protocol carries (lines are at most 4 MiB).
    const MAX_DOCUMENT: u64 = 64 * 1024 * 1024;
    let label = path.display().to_string();
    let file = std::fs::File::open(path).map_err(|e| anyhow::anyhow!("cannot read {label}: {e}"))?;
    let mut text = Vec::new();
    file.take(MAX_DOCUMENT + 1).read_to_end(&mut text).map_err(|e| anyhow::anyhow!("cannot read {label}: {e}"))?;
    if text.len() as u64 > MAX_DOCUMENT {
        anyhow::bail!("{label}: larger than {MAX_DOCUMENT} bytes; not one protocol document");
    }
    let (k, verdict, shown) = match pi_conform::wire::decode_strict_located(&text) {
        // Judged as its compact encoding: what would travel as one line.
        Ok(value) => {
            let line = serde_json::to_vec(&value)?;
            let (k, verdict) = judge_line(&line, kind, ctx);
            if k == Kind::Frame && ctx.binding.is_none() {
                anyhow::bail!("{label}: a frame needs --descriptor FILE");
            }
            (k, verdict, line)
        }
        Err(_) => {
            let (k, verdict) = judge_line(&text, Some(kind.unwrap_or(Kind::Command)), ctx);
            (k, verdict, text)
        }
    };
    let mut out = super::stdout();
    write_verdict(&mut out, &format!("document {label}"), json!(label), &shown, k, &verdict, format)?;
    Ok(if verdict.is_valid() { EXIT_OK } else { EXIT_INVALID })
}

fn kind_name(k: Kind) -> &'static str {
    k.as_str()
}
