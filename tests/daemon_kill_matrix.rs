//! The daemon kill matrix: the daemon suite can fail. For every daemon fault switch (each
//! breaks exactly one rule in the reference daemon) the whole daemon suite runs against the
//! faulty reference daemon, and the cases that fail must be exactly the ones
//! `conformance/daemon-kill-matrix.txt` lists for that fault; every fault kills at least one
//! case; and every MUST clause of the daemon catalogue is killed by some fault.
//!
//! How the daemon runs. Each fault gets its own reference daemon, started as a real child
//! process of this test (`pi-conform serve-daemon --fault NAME`, socket and state in a
//! private 0700 temporary directory) through a restart script — kill -9, then start again on
//! the same state directory — which is the runner's `--restart-cmd`, exactly as
//! `tests/daemon_runner.rs` runs the suite (see `pi_conform::conform::killmatrix::FaultyDaemon`).
//! So the restart cases run under every fault too.
//!
//! Time. One full daemon suite takes ~6–9 s, nearly all of it waiting on timeouts (bind
//! silence, request timeouts, revoke windows), not CPU. The 22 faults plus the fault-free
//! control therefore run on `JOBS` worker threads at once (each with its own daemon, probe
//! and directories): ~1 min instead of ~2.6 min sequentially. Set
//! `PI_CONFORM_DAEMON_KILL_MATRIX_JOBS=1` to run them one after another.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Mutex;

use pi_conform::conform::case::{Level, Status};
use pi_conform::conform::daemon::catalogue;
use pi_conform::conform::killmatrix::{killed_ids, must_clause_kills, parse_kill_matrix, run_faulty_daemon};
use pi_conform::conform::run::Report;
use pi_conform::daemon::faults::{DaemonFault, DaemonFaults};

const EXPECTED: &str = include_str!("../conformance/daemon-kill-matrix.txt");

/// Worker threads (each drives one faulty daemon at a time).
const JOBS: usize = 3;

/// One run: the fault (`None`: the control), its report, its wall time in seconds.
type Run = (Option<DaemonFault>, Result<Report, String>, f64);

fn expected() -> BTreeMap<String, BTreeSet<String>> {
    parse_kill_matrix::<DaemonFault>(EXPECTED).expect("conformance/daemon-kill-matrix.txt parses")
}

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_pi-conform"))
}

#[test]
fn the_expected_matrix_names_every_fault_and_only_real_cases() {
    let exp = expected();
    let cat = catalogue();
    let names: BTreeSet<&str> = DaemonFault::ALL.iter().map(|f| f.name()).collect();
    let listed: BTreeSet<&str> = exp.keys().map(String::as_str).collect();
    assert_eq!(names, listed, "conformance/daemon-kill-matrix.txt must have one line per daemon fault");
    for (fault, ids) in &exp {
        assert!(!ids.is_empty(), "fault {fault} kills nothing in conformance/daemon-kill-matrix.txt");
        for id in ids {
            assert!(cat.iter().any(|m| &m.id == id), "fault {fault}: {id} is no case of the daemon catalogue");
        }
    }
    for line in EXPECTED.lines().filter(|l| !l.trim().is_empty() && !l.starts_with('#')) {
        let ids: Vec<&str> = line.split_whitespace().skip(1).collect();
        let mut sorted = ids.clone();
        sorted.sort_unstable();
        assert_eq!(ids, sorted, "ids are not sorted on the line of {}", line.split(' ').next().unwrap_or(""));
    }
    // Names are stable kebab-case and every fault names a clause the catalogue knows.
    for f in DaemonFault::ALL {
        assert!(f.name().bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.'));
        assert_eq!(f.name().parse::<DaemonFault>().unwrap(), *f);
        assert!(
            cat.iter().any(|m| m.clause == f.clause() || m.clause.starts_with(&format!("{}.", f.clause()))),
            "fault {f}: clause {} is not in the daemon catalogue",
            f.clause()
        );
    }
}

#[test]
fn every_must_clause_of_the_daemon_catalogue_is_killed_by_some_fault() {
    let cat = catalogue();
    let kills = must_clause_kills::<DaemonFault>(&cat, &expected());
    let unkilled: Vec<&str> = kills.iter().filter(|c| c.killed_by.is_empty()).map(|c| c.clause.as_str()).collect();
    assert!(unkilled.is_empty(), "MUST clauses no daemon fault kills: {unkilled:?}");
    let must: BTreeSet<&str> = cat.iter().filter(|m| m.level == Level::Must).map(|m| m.clause.as_str()).collect();
    assert_eq!(must, kills.iter().map(|c| c.clause.as_str()).collect());
}

#[test]
fn each_daemon_fault_kills_exactly_its_expected_cases() {
    let exp = expected();
    let cat = catalogue();
    let jobs = std::env::var("PI_CONFORM_DAEMON_KILL_MATRIX_JOBS")
        .ok()
        .and_then(|j| j.parse::<usize>().ok())
        .filter(|j| *j > 0)
        .unwrap_or(JOBS);
    let started = std::time::Instant::now();
    // The control (no fault) first, then every fault.
    let work: Vec<Option<DaemonFault>> =
        std::iter::once(None).chain(DaemonFault::ALL.iter().copied().map(Some)).collect();
    let next = Mutex::new(0usize);
    let results: Mutex<Vec<Run>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..jobs {
            s.spawn(|| loop {
                let i = {
                    let mut n = next.lock().unwrap();
                    let i = *n;
                    *n += 1;
                    i
                };
                let Some(w) = work.get(i).copied() else { break };
                let faults = w.map(DaemonFaults::from).unwrap_or(DaemonFaults::NONE);
                let t = std::time::Instant::now();
                let r = run_faulty_daemon(bin(), faults, &cat, 1.0);
                results.lock().unwrap().push((w, r, t.elapsed().as_secs_f64()));
            });
        }
    });
    let mut results = results.into_inner().unwrap();
    results.sort_by_key(|(w, _, _)| w.map(|f| f as usize + 1).unwrap_or(0));
    let mut problems = Vec::new();
    for (w, report, secs) in &results {
        let name = w.map(DaemonFault::name).unwrap_or("(none)");
        let report = match report {
            Ok(r) => r,
            Err(e) => {
                problems.push(format!("fault {name}: the run failed: {e}"));
                continue;
            }
        };
        eprintln!("fault {name}: {} cases in {secs:.1} s", report.results.len());
        // Skips are never expected; an error (inconclusive) is a problem only without a fault
        // (under a fault it counts as killed, see `killed_ids`).
        for r in
            report.results.iter().filter(|r| r.status == Status::Skip || (w.is_none() && r.status == Status::Error))
        {
            problems.push(format!("fault {name}: {} {}: {}", r.status.as_str(), r.id, r.reason));
        }
        let got = killed_ids::<DaemonFault>(report);
        let Some(fault) = w else {
            for id in &got {
                problems.push(format!("without faults every case must pass, but {id} failed"));
            }
            continue;
        };
        if got.is_empty() {
            problems.push(format!("fault {name} ({}) kills no case", fault.clause()));
        }
        let want = &exp[fault.name()];
        let missing: Vec<&String> = want.difference(&got).collect();
        if !missing.is_empty() {
            problems.push(format!("fault {name} ({}): expected to fail but passed: {missing:?}", fault.clause()));
        }
        for id in got.difference(want) {
            let r = report.results.iter().find(|r| &r.id == id).expect("a killed id is a result");
            problems.push(format!(
                "fault {name} ({}): {id} failed but is not in its expected line: actual {}: {}",
                fault.clause(),
                r.actual,
                r.reason
            ));
        }
    }
    eprintln!(
        "daemon kill matrix: {} faults + control on {jobs} workers in {:.1} s",
        DaemonFault::ALL.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(
        problems.is_empty(),
        "the daemon kill matrix differs from conformance/daemon-kill-matrix.txt:\n{}",
        problems.join("\n")
    );
}
