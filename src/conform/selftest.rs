//! The reference adapter started in-process on a private temporary socket with a freshly
//! minted grant: what `pi-conform selftest` checks, and what the kill matrix breaks.
//!
//! The kill matrix runs the adapter suite against the reference adapter once per
//! [`Fault`] (each breaks exactly one rule) and records which cases each fault kills: proof
//! that the runner can fail, case by case and clause by clause. `conformance/kill-matrix.txt`
//! holds the expected matrix (see [`parse_kill_matrix`]); `pi-conform kill-matrix` prints the
//! observed one and `tests/kill_matrix.rs` compares the two.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::sync::watch;

use super::adapter::Target;
use super::case::{CaseMeta, Level, Status};
use super::run::{run_adapter, Filter, Report};
use crate::adapter::faults::{Fault, Faults};
use crate::adapter::grants::{grant, GrantRequest};
use crate::adapter::server::{default_identity, serve_with, ServeConfig};
use crate::contract::descriptor::OPERATIONS;
use crate::contract::Limits;

/// A running in-process reference adapter.
pub struct ReferenceAdapter {
    dir: tempfile::TempDir,
    /// The grant's root.
    pub root: PathBuf,
    /// The sentinel beside it.
    pub sentinel: PathBuf,
    /// The socket.
    pub socket: PathBuf,
    /// The descriptor minted for the grant.
    pub descriptor: serde_json::Value,
    stop: watch::Sender<bool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ReferenceAdapter {
    /// Mint a grant and start the adapter; returns once it accepts connections.
    pub fn start() -> Result<ReferenceAdapter, String> {
        Self::start_with(Faults::NONE)
    }

    /// [`ReferenceAdapter::start`] with fault switches: the adapter is broken on purpose
    /// (test aid for the kill matrix).
    pub fn start_with(faults: Faults) -> Result<ReferenceAdapter, String> {
        let dir = tempfile::Builder::new().prefix("pi-conform-selftest").tempdir().map_err(|e| e.to_string())?;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).map_err(|e| e.to_string())?;
        let root = dir.path().join("root");
        let sentinel = dir.path().join("sentinel");
        std::fs::create_dir(&root).map_err(|e| e.to_string())?;
        std::fs::create_dir(&sentinel).map_err(|e| e.to_string())?;
        let socket = dir.path().join("adapter.sock");
        let grants = dir.path().join("grants.json");
        let id = default_identity();
        let req = GrantRequest {
            socket: socket.clone(),
            root: root.clone(),
            host_instance_id: "selftest-host".into(),
            session_id: "selftest-session".into(),
            generation: 1,
            operations: OPERATIONS.iter().filter_map(|o| o.parse().ok()).collect(),
            limits: Limits::from_values([1_048_576, 1_048_576, 4, 16, 30_000, 256, 3_600_000]),
            adapter_id: id.adapter_id.clone(),
            adapter_version: id.adapter_version.clone(),
        };
        let descriptor = grant(&grants, &req).map_err(|e| e.to_string())?;
        let cfg = ServeConfig {
            socket: socket.clone(),
            grants,
            identity: id,
            op_delay: Duration::ZERO,
            handle_signals: false,
        };
        let (stop, rx) = watch::channel(false);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        let thread = std::thread::spawn(move || {
            if let Err(e) = rt.block_on(serve_with(cfg, faults, Some(rx))) {
                eprintln!("pi-conform: the reference adapter stopped: {e}");
            }
        });
        let t = Instant::now();
        while std::os::unix::net::UnixStream::connect(&socket).is_err() {
            if t.elapsed() > Duration::from_secs(10) || thread.is_finished() {
                return Err("the reference adapter did not start".into());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(ReferenceAdapter { dir, root, sentinel, socket, descriptor, stop, thread: Some(thread) })
    }

    /// The runner's target for this adapter.
    pub fn target(&self, time_scale: f64) -> Result<Target, String> {
        Target::new(&self.socket, self.descriptor.clone(), &self.root, &self.sentinel, time_scale)
    }

    /// The private directory holding everything.
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }
}

impl Drop for ReferenceAdapter {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

// ------------------------------------------------------------------ the kill matrix

/// Run `cases` (catalogue entries, in order) against a fresh reference adapter with `faults`.
pub fn run_faulty(faults: Faults, cases: &[CaseMeta], time_scale: f64) -> Result<Report, String> {
    let adapter = ReferenceAdapter::start_with(faults)?;
    let target = adapter.target(time_scale)?;
    run_adapter(&target, cases, &Filter::default(), None, |_, _, _| {}).map_err(|e| e.to_string())
}

/// The ids a report counts as killed: every case that did not pass (`fail`, or `warn` for a
/// SHOULD case), sorted.
pub fn killed_ids(report: &Report) -> BTreeSet<String> {
    report.results.iter().filter(|r| matches!(r.status, Status::Fail | Status::Warn)).map(|r| r.id.clone()).collect()
}

/// One fault's row of the kill matrix.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KillRow {
    /// The fault's name.
    pub fault: String,
    /// The clause whose rule it breaks.
    pub clause: String,
    /// The rule it breaks, as the broken adapter behaves.
    pub description: String,
    /// Cases it killed (did not pass), sorted.
    pub killed: Vec<String>,
    /// Harness errors: `<case id>: <reason>`, or why the run could not happen.
    pub errors: Vec<String>,
    /// Cases run.
    pub cases: usize,
    /// Wall time of the run, ms.
    pub millis: u64,
}

/// Run `cases` with `fault` switched on and summarize.
pub fn kill_row(fault: Fault, cases: &[CaseMeta], time_scale: f64) -> KillRow {
    let started = Instant::now();
    let (killed, errors) = match run_faulty(fault.into(), cases, time_scale) {
        Ok(rep) => (
            killed_ids(&rep).into_iter().collect(),
            rep.results
                .iter()
                .filter(|r| r.status == Status::Error)
                .map(|r| format!("{}: {}", r.id, r.reason))
                .collect(),
        ),
        Err(e) => (Vec::new(), vec![e]),
    };
    KillRow {
        fault: fault.name().into(),
        clause: fault.clause().into(),
        description: fault.description().into(),
        killed,
        errors,
        cases: cases.len(),
        millis: started.elapsed().as_millis() as u64,
    }
}

/// One MUST clause of the catalogue and the faults that kill at least one of its MUST cases.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ClauseKill {
    /// The clause.
    pub clause: String,
    /// Fault names, in matrix order.
    pub killed_by: Vec<String>,
}

/// For every clause that has a MUST case in `catalogue` (in catalogue order): the faults of
/// `kills` (fault name → killed case ids) that kill one of its MUST cases.
pub fn must_clause_kills(catalogue: &[CaseMeta], kills: &BTreeMap<String, BTreeSet<String>>) -> Vec<ClauseKill> {
    let mut out: Vec<ClauseKill> = Vec::new();
    for m in catalogue.iter().filter(|m| m.level == Level::Must) {
        if !out.iter().any(|c| c.clause == m.clause) {
            out.push(ClauseKill { clause: m.clause.clone(), killed_by: Vec::new() });
        }
    }
    for c in &mut out {
        for f in Fault::ALL {
            let kills_clause = kills.get(f.name()).is_some_and(|ids| {
                catalogue.iter().any(|m| m.level == Level::Must && m.clause == c.clause && ids.contains(&m.id))
            });
            if kills_clause {
                c.killed_by.push(f.name().into());
            }
        }
    }
    out
}

/// Parse a kill-matrix file: one line per fault, `<fault> <killed case id>...` (ids sorted,
/// space-separated), `#` starts a comment. Unknown or repeated fault names are errors.
pub fn parse_kill_matrix(text: &str) -> Result<BTreeMap<String, BTreeSet<String>>, String> {
    let mut out = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        let mut words = line.split_whitespace();
        let Some(name) = words.next() else { continue };
        let fault: Fault = name.parse().map_err(|e| format!("line {}: {e}", n + 1))?;
        if out.insert(fault.name().to_string(), words.map(str::to_string).collect()).is_some() {
            return Err(format!("line {}: fault {name} appears twice", n + 1));
        }
    }
    Ok(out)
}

/// The comment heading `conformance/kill-matrix.txt`.
pub const KILL_MATRIX_HEADER: &str = "\
# The expected kill matrix: one line per fault switch of the reference adapter
# (src/adapter/faults.rs), then the sorted ids of the adapter cases that fail when only that
# fault is on. Checked by tests/kill_matrix.rs and by
#   pi-conform kill-matrix --expect conformance/kill-matrix.txt
# Regenerate it, after checking that every difference is intended, with
#   pi-conform kill-matrix --format lines > conformance/kill-matrix.txt
";

/// Render rows in the kill-matrix file format (header included).
pub fn render_kill_matrix(rows: &[KillRow]) -> String {
    let mut out = KILL_MATRIX_HEADER.to_string();
    for r in rows {
        out.push_str(&r.fault);
        for id in &r.killed {
            out.push(' ');
            out.push_str(id);
        }
        out.push('\n');
    }
    out
}
