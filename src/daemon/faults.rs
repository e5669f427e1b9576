//! Fault switches: deliberate, test-only breakages of the reference daemon.
//!
//! Each [`DaemonFault`] breaks exactly one rule of SPEC §1.1, §1.2, §2, §3, §4.2–§4.4 or §6 in
//! the reference daemon, so that the daemon conformance runner can be shown to fail:
//! `pi-conform daemon-kill-matrix` runs the daemon suite once per fault and reports which
//! cases each one kills, and `tests/daemon_kill_matrix.rs` pins that matrix to
//! `conformance/daemon-kill-matrix.txt`.
//!
//! Production runs with [`DaemonFaults::NONE`]. Faults are reachable only through the hidden
//! `--fault NAME` flag of `serve-daemon`, through [`crate::daemon::server::DaemonConfig`]'s
//! `faults` field, and through the `*_with` constructors of the host, link and runtime.
//!
//! The matrix runs the faulty daemon as a real child process (`serve-daemon --fault NAME`)
//! with a restart script, exactly as an operator runs the daemon suite with `--restart-cmd`:
//! see [`FaultyDaemon`] and [`run_faulty_daemon`].

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command as Process;
use std::str::FromStr;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{json, Value};

use crate::conform::case::{CaseMeta, Level, Status};
use crate::conform::daemon::DaemonTarget;
use crate::conform::run::{run_daemon, Filter, Report};
use crate::contract::command::route_version;
use crate::contract::{parse_command, Command, CommandError, HostContext};

macro_rules! faults {
    ($( $(#[$doc:meta])* $variant:ident = $name:literal, $clause:literal, $rule:literal; )*) => {
        /// One deliberate breakage of the reference daemon (see the module docs).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum DaemonFault {
            $( $(#[$doc])* $variant, )*
        }

        impl DaemonFault {
            /// Every fault, in matrix order.
            pub const ALL: &'static [DaemonFault] = &[ $( DaemonFault::$variant, )* ];

            /// The stable kebab-case name (`--fault NAME`, `conformance/daemon-kill-matrix.txt`).
            pub fn name(self) -> &'static str {
                match self { $( DaemonFault::$variant => $name, )* }
            }

            /// The clause of `conformance/SPEC.md` whose rule it breaks.
            pub fn clause(self) -> &'static str {
                match self { $( DaemonFault::$variant => $clause, )* }
            }

            /// One line: the rule it breaks, as the broken daemon behaves.
            pub fn description(self) -> &'static str {
                match self { $( DaemonFault::$variant => $rule, )* }
            }
        }
    };
}

faults! {
    // ---- handshake and envelope
    /// The handshake advertises only `supportedProtocolVersions`.
    SupportedVersions033 = "supported-versions-0.3.3", "PC-2.4",
        "the handshake sends only supportedProtocolVersions (no supportedVersions), as Pi Daemon 0.3.3";
    /// duplicate_request_id is answered as "1.0".
    Echo10OnDuplicate = "echo-1.0-on-duplicate", "PC-2.2",
        "a duplicate_request_id refusal is answered with protocolVersion \"1.0\" instead of the request's";
    /// Every 2.x response says "2.0".
    NoMinorEcho = "no-minor-echo", "PC-2.2",
        "responses to a 2.x request always carry \"2.0\" instead of echoing the exact minor";
    /// A handshake without payload is answered ok.
    HandshakeWithoutPayloadOk = "handshake-without-payload-ok", "PC-2.1",
        "a handshake without payload is answered ok instead of invalid_field";
    /// The connection stays open after invalid JSON.
    KeepOpenOnInvalidJson = "keep-open-on-invalid-json", "PC-1.1",
        "after answering invalid_json the connection stays open instead of closing";
    // ---- resources and admission
    /// A v1 open with a tools object binds like v2.
    V1ToolsObjectAccepted = "v1-tools-object-accepted", "PC-3.1",
        "a v1 open with a host-adapter tools object is admitted and bound as in v2 instead of invalid_field";
    /// A relative endpoint path is resolved against the daemon's working directory.
    RelativeEndpointAccepted = "relative-endpoint-accepted", "PC-3.2.5",
        "a relative endpoint path is resolved against the daemon's working directory instead of check 5's refusal";
    /// Check 8 (binding against host, session, generation) is not applied.
    SkipBindingCheck = "skip-binding-check", "PC-3.2.8",
        "descriptor check 8 is not applied: a descriptor bound to another host/session/generation is admitted";
    /// Check 11 (the fit check) is not applied.
    SkipFitCheck = "skip-fit-check", "PC-3.3",
        "the fit check is not applied: a descriptor whose bind/bound do not fit its limits is admitted";
    /// The endpoint is connected to before the descriptor is judged.
    ConnectBeforeAdmission = "connect-before-admission", "PC-3.2",
        "the daemon connects to the descriptor's endpoint before checking the descriptor, then refuses";
    /// The endpoint's ownership and mode are not checked before connecting.
    SkipEndpointCheck = "skip-endpoint-check", "PC-1.2",
        "the endpoint is connected to without the owner-private checks (a 0666 socket is used)";
    // ---- binding and policy
    /// Any `bound` completes the bind.
    IgnoreBoundEcho = "ignore-bound-echo", "PC-3.4",
        "any bound frame completes the bind: its echo of identity, operations and limits is not compared";
    /// open_failed without details.cause.
    GenericOpenFailedCause = "generic-open-failed-cause", "PC-3.4",
        "a failed bind is answered open_failed without details.cause.code, as Pi Daemon 0.3.3";
    /// close does not revoke the binding.
    NoRevokeOnClose = "no-revoke-on-close", "PC-3.4",
        "close does not revoke the session's adapter binding (the connection is leaked open)";
    /// A replaced generation's binding is not revoked.
    NoRevokeOnReplacement = "no-revoke-on-replacement", "PC-3.4",
        "opening a newer generation does not revoke the old generation's binding (it is leaked open)";
    /// A re-open of the same generation and policy binds again.
    ReopenRebinds = "reopen-rebinds", "PC-3.4",
        "a re-open with the same generation and policy binds the adapter again instead of created:false alone";
    /// A no-tools re-open of a host-adapter generation is accepted.
    NoReprovisionRule = "no-reprovision-rule", "PC-3.4",
        "a no-tools re-open of a generation retained with a host-adapter policy is accepted instead of tool_adapter_reprovision_required";
    // ---- tool traffic
    /// Invokes carry an extra key.
    InvokeExtraKey = "invoke-extra-key", "PC-4.2",
        "invoke frames carry an extra toolCallId key (not a closed frame)";
    /// Timeouts do not abort.
    NoAbortOnTimeout = "no-abort-on-timeout", "PC-4.4",
        "an invoke whose requestTimeoutMs expires fails locally without sending abort";
    /// Calls beyond the admission limits are sent anyway.
    NoQueueCapacity = "no-queue-capacity", "PC-4.4",
        "a call beyond maxConcurrentRequests + maxQueuedRequests is written to the adapter at once instead of refused with adapter_queue_capacity";
    /// `./` and `dir/` tool paths are dispatched, as Pi Daemon 0.3.3 does.
    PassNonCanonicalPaths = "pass-non-canonical-paths-0.3.3", "PC-5.1",
        "tool paths `./` and `dir/` (one trailing slash) are sent to the adapter instead of refused before dispatch, as Pi Daemon 0.3.3";
    /// Results with another idempotencyKey are accepted.
    AcceptMismatchedResults = "accept-mismatched-results", "PC-4.3",
        "a result whose idempotencyKey differs from its invoke's is accepted instead of failing the connection";
    // ---- restart
    /// No quarantine after restart.
    NoQuarantine = "no-quarantine", "PC-6",
        "after a restart host-adapter sessions are not quarantined (not in quarantinedSessions)";
}

const _: () = assert!(DaemonFault::ALL.len() <= 64, "DaemonFaults is a u64 bitset");

impl fmt::Display for DaemonFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for DaemonFault {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        DaemonFault::ALL
            .iter()
            .copied()
            .find(|f| f.name() == s)
            .ok_or_else(|| format!("unknown daemon fault {s:?} (`pi-conform daemon-kill-matrix --list` lists them)"))
    }
}

/// A set of daemon faults (production: [`DaemonFaults::NONE`]).
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct DaemonFaults(u64);

impl DaemonFaults {
    /// No fault: the conforming reference daemon.
    pub const NONE: DaemonFaults = DaemonFaults(0);

    /// Whether `f` is switched on.
    pub fn has(self, f: DaemonFault) -> bool {
        self.0 & (1 << f as u32) != 0
    }

    /// This set plus `f`.
    pub fn with(self, f: DaemonFault) -> DaemonFaults {
        DaemonFaults(self.0 | (1 << f as u32))
    }

    /// Whether no fault is on.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The faults switched on, in [`DaemonFault::ALL`] order.
    pub fn iter(self) -> impl Iterator<Item = DaemonFault> {
        DaemonFault::ALL.iter().copied().filter(move |f| self.has(*f))
    }
}

impl From<DaemonFault> for DaemonFaults {
    fn from(f: DaemonFault) -> Self {
        DaemonFaults::NONE.with(f)
    }
}

impl FromIterator<DaemonFault> for DaemonFaults {
    fn from_iter<I: IntoIterator<Item = DaemonFault>>(iter: I) -> Self {
        iter.into_iter().fold(DaemonFaults::NONE, DaemonFaults::with)
    }
}

impl fmt::Display for DaemonFaults {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.iter().map(DaemonFault::name).collect();
        f.write_str(&names.join(","))
    }
}

impl fmt::Debug for DaemonFaults {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DaemonFaults({self})")
    }
}

// ------------------------------------------------------------------ broken command parsing

/// The descriptor codes of SPEC §3.2 (checks 1–11).
const ADMISSION_CODES: [&str; 10] = [
    "invalid_tool_adapter_descriptor",
    "invalid_tool_adapter_field",
    "unsupported_tool_adapter_version",
    "invalid_tool_adapter_identity",
    "invalid_tool_adapter_endpoint",
    "invalid_tool_adapter_binding",
    "invalid_tool_adapter_capability",
    "tool_adapter_binding_mismatch",
    "unsupported_tool_operation",
    "invalid_tool_adapter_limit",
];

/// The command line as a faulty daemon reads it before judging it
/// ([`DaemonFault::HandshakeWithoutPayloadOk`]: a missing handshake payload becomes `{}`).
pub(crate) fn lenient_value(value: &mut Value, faults: DaemonFaults) {
    if faults.has(DaemonFault::HandshakeWithoutPayloadOk)
        && value.get("operation").and_then(Value::as_str) == Some("handshake")
    {
        if let Some(o) = value.as_object_mut() {
            o.entry("payload").or_insert_with(|| json!({}));
        }
    }
}

fn descriptor_mut(v: &mut Value) -> Option<&mut Value> {
    v.get_mut("payload")?.get_mut("resources")?.get_mut("tools")?.get_mut("descriptor")
}

/// A command the contract refused (`err`) that a faulty daemon accepts anyway: `Some` when
/// one of `faults` skips exactly the rule that refused it.
pub(crate) fn lenient_command(
    value: &Value,
    err: &CommandError,
    host_id: &str,
    faults: DaemonFaults,
) -> Option<Command> {
    let code = err.error.code.as_str();
    let field = err.error.field().to_string();
    if faults.has(DaemonFault::V1ToolsObjectAccepted)
        && code == "invalid_field"
        && value.get("operation").and_then(Value::as_str) == Some("open")
        && value["payload"]["resources"]["tools"].is_object()
    {
        let v1 = route_version(value.get("protocolVersion")).ok().filter(|v| v.major == 1)?;
        let mut v2 = value.clone();
        v2["protocolVersion"] = json!("2.0");
        let mut cmd = parse_command(&v2, &HostContext { host_instance_id: host_id }).ok()?;
        cmd.version = v1;
        return Some(cmd);
    }
    if faults.has(DaemonFault::RelativeEndpointAccepted)
        && code == "invalid_tool_adapter_endpoint"
        && field == "descriptor.endpoint.path"
    {
        let mut v = value.clone();
        let d = descriptor_mut(&mut v)?;
        let rel = d["endpoint"]["path"].as_str()?.to_string();
        let cwd = std::env::current_dir().ok()?;
        d["endpoint"]["path"] = json!(cwd.join(rel).to_string_lossy());
        return parse_command(&v, &HostContext { host_instance_id: host_id }).ok();
    }
    if faults.has(DaemonFault::SkipBindingCheck) && code == "tool_adapter_binding_mismatch" {
        let mut v = value.clone();
        let (sid, generation) = (value.get("sessionId").cloned()?, value.get("generation").cloned()?);
        let d = descriptor_mut(&mut v)?;
        let claimed = d["binding"]["hostInstanceId"].as_str()?.to_string();
        d["binding"]["sessionId"] = sid;
        d["binding"]["generation"] = generation;
        return parse_command(&v, &HostContext { host_instance_id: &claimed }).ok();
    }
    if faults.has(DaemonFault::SkipFitCheck) && code == "invalid_tool_adapter_limit" {
        // Only the fit check refused it when roomy byte limits make it pass; the descriptor
        // then keeps its own (too small) limits.
        let mut v = value.clone();
        let d = descriptor_mut(&mut v)?;
        let (req, resp) = (d["limits"]["maxRequestBytes"].as_u64()?, d["limits"]["maxResponseBytes"].as_u64()?);
        d["limits"]["maxRequestBytes"] = json!(1_048_576);
        d["limits"]["maxResponseBytes"] = json!(1_048_576);
        let mut cmd = parse_command(&v, &HostContext { host_instance_id: host_id }).ok()?;
        if let Some(desc) = cmd.descriptor.as_mut() {
            desc.limits.max_request_bytes = req;
            desc.limits.max_response_bytes = resp;
        }
        return Some(cmd);
    }
    None
}

/// Under [`DaemonFault::ConnectBeforeAdmission`]: the endpoint a refused descriptor names,
/// which the faulty daemon connects to before answering the refusal.
pub(crate) fn premature_endpoint(value: &Value, err: &CommandError, faults: DaemonFaults) -> Option<PathBuf> {
    if !faults.has(DaemonFault::ConnectBeforeAdmission) || !ADMISSION_CODES.contains(&err.error.code.as_str()) {
        return None;
    }
    let p = value["payload"]["resources"]["tools"]["descriptor"]["endpoint"]["path"].as_str()?;
    Some(PathBuf::from(p))
}

/// The version a faulty daemon echoes ([`DaemonFault::NoMinorEcho`]).
pub(crate) fn echo_version(version: &str, faults: DaemonFaults) -> String {
    if faults.has(DaemonFault::NoMinorEcho) && version.starts_with("2.") {
        "2.0".into()
    } else {
        version.into()
    }
}

// ------------------------------------------------------------------ the daemon kill matrix

/// The reference daemon with `faults`, running as a child process of `bin`
/// (`serve-daemon --fault NAME`...) on a socket in a private 0700 temporary directory, with a
/// restart script (kill -9, start again on the same state directory) for the restart cases.
pub struct FaultyDaemon {
    dir: tempfile::TempDir,
    /// The daemon's socket.
    pub socket: PathBuf,
    /// The restart script (`sh <script>` restarts the daemon).
    pub script: PathBuf,
}

impl FaultyDaemon {
    /// Start it; returns once the socket answers a handshake.
    pub fn start(bin: &Path, faults: DaemonFaults) -> Result<FaultyDaemon, String> {
        let dir = tempfile::Builder::new().prefix("pc-dfault").tempdir().map_err(|e| e.to_string())?;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).map_err(|e| e.to_string())?;
        let d = dir.path();
        let socket = d.join("d.sock");
        let script = d.join("restart.sh");
        let flags: String = faults.iter().map(|f| format!(" --fault {}", f.name())).collect();
        let q = |p: &Path| format!("'{}'", p.display().to_string().replace('\'', "'\\''"));
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\nkill -9 $(cat {pid} 2>/dev/null) 2>/dev/null\nsleep 0.1\n{bin} serve-daemon --socket {sock} --state-dir {state}{flags} >> {log} 2>&1 &\necho $! > {pid}\n",
                pid = q(&d.join("pid")),
                bin = q(bin),
                sock = q(&socket),
                state = q(&d.join("state")),
                log = q(&d.join("log")),
            ),
        )
        .map_err(|e| e.to_string())?;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o700)).map_err(|e| e.to_string())?;
        let daemon = FaultyDaemon { dir, socket, script };
        let st = Process::new("sh").arg(&daemon.script).status().map_err(|e| e.to_string())?;
        if !st.success() {
            return Err("the start script failed".into());
        }
        let t = Instant::now();
        while crate::conform::daemon::read_host(&daemon.socket, Duration::from_secs(2)).is_err() {
            if t.elapsed() > Duration::from_secs(20) {
                return Err("the faulty daemon did not start".into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(daemon)
    }

    /// The runner's target: `cwd` inside the private directory, the restart script.
    pub fn target(&self, time_scale: f64) -> DaemonTarget {
        DaemonTarget {
            socket: self.socket.clone(),
            cwd: self.dir.path().join("cwd"),
            wake_template: "TOOL {tool} {args}".into(),
            restart_cmd: Some(format!("sh '{}'", self.script.display().to_string().replace('\'', "'\\''"))),
            model: None,
            step: Duration::from_secs_f64((2.0 * time_scale).max(0.05)),
            vectors: crate::vectors::default_dir(),
        }
    }
}

impl Drop for FaultyDaemon {
    fn drop(&mut self) {
        if let Ok(pid) = std::fs::read_to_string(self.dir.path().join("pid")) {
            let pid = pid.trim();
            if !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()) {
                let _ = Process::new("kill").arg("-9").arg(pid).status();
            }
        }
    }
}

/// Run `cases` (daemon catalogue entries, in order) against a fresh reference daemon started
/// from `bin` with `faults`.
pub fn run_faulty_daemon(
    bin: &Path,
    faults: DaemonFaults,
    cases: &[CaseMeta],
    time_scale: f64,
) -> Result<Report, String> {
    let daemon = FaultyDaemon::start(bin, faults)?;
    let target = daemon.target(time_scale);
    run_daemon(&target, cases, &Filter::default(), None, |_, _, _| {}).map_err(|e| e.to_string())
}

/// The ids a report counts as killed: every case that did not pass, sorted.
/// Whether `path` is one of the non-canonical forms Pi Daemon 0.3.3 passes on (`./`, or one
/// trailing `/` after a canonical path), which [`DaemonFault::PassNonCanonicalPaths`] lets by.
pub fn is_0_3_3_passed_path(path: &str) -> bool {
    path == "./"
        || path.strip_suffix('/').is_some_and(|p| {
            !p.is_empty()
                && crate::contract::validate_relative_path(p, crate::contract::PathSide::Daemon, "path").is_ok()
        })
}

/// A daemon case is killed when it does not pass: a failure, a warning, or `error` — the
/// runner's inconclusive verdict, which a fault earns when it breaks what a case relies on
/// (without an abort on the wire, no result can follow an `aborted`).
pub fn killed_ids(report: &Report) -> BTreeSet<String> {
    report
        .results
        .iter()
        .filter(|r| matches!(r.status, Status::Fail | Status::Warn | Status::Error))
        .map(|r| r.id.clone())
        .collect()
}

/// One fault's row of the daemon kill matrix.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DaemonKillRow {
    /// The fault's name.
    pub fault: String,
    /// The clause whose rule it breaks.
    pub clause: String,
    /// The rule it breaks, as the broken daemon behaves.
    pub description: String,
    /// Cases it killed (did not pass), sorted.
    pub killed: Vec<String>,
    /// Why the run could not happen, if it could not.
    pub errors: Vec<String>,
    /// Cases run.
    pub cases: usize,
    /// Wall time of the run, ms.
    pub millis: u64,
}

/// Run `cases` with `fault` switched on and summarize.
pub fn daemon_kill_row(bin: &Path, fault: DaemonFault, cases: &[CaseMeta], time_scale: f64) -> DaemonKillRow {
    let started = Instant::now();
    let (killed, errors) = match run_faulty_daemon(bin, fault.into(), cases, time_scale) {
        // An inconclusive case (`error`) under a fault counts as killed (see `killed_ids`).
        Ok(rep) => (killed_ids(&rep).into_iter().collect(), Vec::new()),
        Err(e) => (Vec::new(), vec![e]),
    };
    DaemonKillRow {
        fault: fault.name().into(),
        clause: fault.clause().into(),
        description: fault.description().into(),
        killed,
        errors,
        cases: cases.len(),
        millis: started.elapsed().as_millis() as u64,
    }
}

/// For every clause with a MUST case in `catalogue` (in catalogue order): the daemon faults of
/// `kills` (fault name → killed case ids) that kill one of its MUST cases.
pub fn daemon_must_clause_kills(
    catalogue: &[CaseMeta],
    kills: &BTreeMap<String, BTreeSet<String>>,
) -> Vec<crate::conform::selftest::ClauseKill> {
    use crate::conform::selftest::ClauseKill;
    let mut out: Vec<ClauseKill> = Vec::new();
    for m in catalogue.iter().filter(|m| m.level == Level::Must) {
        if !out.iter().any(|c| c.clause == m.clause) {
            out.push(ClauseKill { clause: m.clause.clone(), killed_by: Vec::new() });
        }
    }
    for c in &mut out {
        for f in DaemonFault::ALL {
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

/// Parse a daemon kill-matrix file: one line per fault, `<fault> <killed case id>...`, `#`
/// starts a comment. Unknown or repeated fault names are errors.
pub fn parse_daemon_kill_matrix(text: &str) -> Result<BTreeMap<String, BTreeSet<String>>, String> {
    let mut out = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        let mut words = line.split_whitespace();
        let Some(name) = words.next() else { continue };
        let fault: DaemonFault = name.parse().map_err(|e| format!("line {}: {e}", n + 1))?;
        if out.insert(fault.name().to_string(), words.map(str::to_string).collect()).is_some() {
            return Err(format!("line {}: fault {name} appears twice", n + 1));
        }
    }
    Ok(out)
}

/// The comment heading `conformance/daemon-kill-matrix.txt`.
pub const DAEMON_KILL_MATRIX_HEADER: &str = "\
# The expected daemon kill matrix: one line per fault switch of the reference daemon
# (src/daemon/faults.rs), then the sorted ids of the daemon cases that fail when only that
# fault is on. Checked by tests/daemon_kill_matrix.rs and by
#   pi-conform daemon-kill-matrix --expect conformance/daemon-kill-matrix.txt
# Regenerate it, after checking that every difference is intended, with
#   pi-conform daemon-kill-matrix --format lines > conformance/daemon-kill-matrix.txt
";

/// Render rows in the daemon kill-matrix file format (header included).
pub fn render_daemon_kill_matrix(rows: &[DaemonKillRow]) -> String {
    let mut out = DAEMON_KILL_MATRIX_HEADER.to_string();
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
