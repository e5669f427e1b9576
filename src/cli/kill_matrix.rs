//! `pi-conform kill-matrix`: prove the adapter runner can fail, one fault switch of the
//! reference adapter at a time. The matrix itself (`kill_matrix`) serves `daemon-kill-matrix`
//! too.

use std::io::Write;
use std::path::PathBuf;

use clap::ValueEnum;

use pi_conform::adapter::faults::Fault;
use pi_conform::conform::killmatrix::FaultSwitch;

use super::runner::adapter_catalogue;
use super::{EXIT_INVALID, EXIT_OK};

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum MatrixFormat {
    Human,
    Json,
    Lines,
}

#[derive(clap::Args)]
pub struct Args {
    /// Only these faults (repeatable; default: all).
    #[arg(long = "fault", value_name = "NAME")]
    faults: Vec<Fault>,
    /// Output: `human`, `json`, or `lines` (the `conformance/kill-matrix.txt` format).
    #[arg(long, value_enum, default_value = "human")]
    format: MatrixFormat,
    /// Compare with an expected matrix (`conformance/kill-matrix.txt`); a difference exits 1.
    #[arg(long, value_name = "FILE")]
    expect: Option<PathBuf>,
    /// Multiply every step's time budget (slow machines: 3).
    #[arg(long, default_value_t = 1.0, value_name = "N")]
    time_scale: f64,
    /// List the faults (name, clause, the rule each breaks) and exit.
    #[arg(long)]
    list: bool,
}

/// `kill-matrix`: the adapter suite once per adapter fault switch.
pub fn run(args: Args) -> anyhow::Result<u8> {
    let Args { faults, format, expect, time_scale, list } = args;
    if list {
        list_faults::<Fault>(format)
    } else {
        kill_matrix(faults, format, expect, time_scale, adapter_catalogue(), |f, cases| {
            pi_conform::conform::killmatrix::run_faulty(f.into(), cases, time_scale)
        })
    }
}

pub fn list_faults<F: FaultSwitch>(format: MatrixFormat) -> anyhow::Result<u8> {
    let mut out = super::stdout();
    for f in F::ALL {
        writeln!(out, "{}", pi_conform::conform::killmatrix::fault_line(*f, format == MatrixFormat::Json))?;
    }
    Ok(EXIT_OK)
}

/// `kill-matrix` and `daemon-kill-matrix`: run `catalogue` once per fault of `only` (all when
/// empty) through `run`, judge and print the matrix.
pub fn kill_matrix<F: FaultSwitch>(
    only: Vec<F>,
    format: MatrixFormat,
    expect: Option<PathBuf>,
    time_scale: f64,
    catalogue: Vec<pi_conform::conform::case::CaseMeta>,
    mut run: impl FnMut(F, &[pi_conform::conform::case::CaseMeta]) -> Result<pi_conform::conform::run::Report, String>,
) -> anyhow::Result<u8> {
    use pi_conform::conform::killmatrix::{kill_row, parse_kill_matrix, render_kill_matrix, Matrix, Verdict};
    if !cfg!(feature = "faults") {
        anyhow::bail!(pi_conform::adapter::faults::NOT_BUILT);
    }
    if !(time_scale.is_finite() && time_scale > 0.0 && time_scale <= 100.0) {
        anyhow::bail!("--time-scale must be a number in (0, 100]");
    }
    let expected = match &expect {
        Some(p) => Some(
            parse_kill_matrix::<F>(
                &std::fs::read_to_string(p).map_err(|e| anyhow::anyhow!("cannot read {}: {e}", p.display()))?,
            )
            .map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?,
        ),
        None => None,
    };
    let all = only.is_empty();
    let faults: Vec<F> = F::ALL.iter().copied().filter(|f| all || only.contains(f)).collect();
    let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let mut rows = Vec::new();
    for (i, f) in faults.iter().enumerate() {
        if tty {
            eprint!("\r\x1b[2K[{}/{}] {f}", i + 1, faults.len());
        }
        rows.push(kill_row(*f, &catalogue, &mut run));
    }
    if tty {
        eprintln!();
    }
    let matrix = Matrix::judge::<F>(rows, &catalogue, all, expected.as_ref());
    let code = match matrix.verdict() {
        Verdict::Proven => EXIT_OK,
        Verdict::Inconclusive => pi_conform::conform::run::EXIT_INCONCLUSIVE,
        Verdict::NotProven => EXIT_INVALID,
    };
    let mut out = super::stdout();
    match format {
        MatrixFormat::Lines => out.write_all(render_kill_matrix::<F>(&matrix.rows).as_bytes())?,
        MatrixFormat::Json => writeln!(out, "{}", serde_json::to_string_pretty(&matrix.to_json(code))?)?,
        MatrixFormat::Human => out.write_all(matrix.to_human::<F>().as_bytes())?,
    }
    Ok(code)
}
