//! `pi-conform vectors`: list the golden vectors; with `--check`, verify every verdict.

use std::io::Write;
use std::path::PathBuf;

use serde_json::json;

use pi_conform::vectors::{default_dir, meets, VectorSet};

use super::{Format, EXIT_INVALID, EXIT_OK};

#[derive(clap::Args)]
pub struct Args {
    /// Verify each vector's expected verdict.
    #[arg(long)]
    check: bool,
    /// Vector directory (default: the vectors built into this binary; give the checkout's
    /// `vectors/` to check edited vectors without rebuilding).
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Only vectors whose id starts with this.
    #[arg(long, value_name = "PREFIX")]
    id: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value = "human")]
    format: Format,
}

/// `vectors`: list the golden vectors, or check every verdict.
pub fn run(args: Args) -> anyhow::Result<u8> {
    let Args { check, dir, id, format } = args;
    let set = VectorSet::load(&dir.unwrap_or_else(default_dir))?;
    if let Some(p) = &id {
        if !set.vectors.iter().any(|v| v.id.starts_with(p.as_str())) {
            anyhow::bail!("no vector id starts with {p:?}");
        }
    }
    let mut out = super::stdout();
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
                    writeln!(out, "{:<64} {:<10} {:<10} {exp}", v.id, v.clause, v.kind.as_str())?
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
