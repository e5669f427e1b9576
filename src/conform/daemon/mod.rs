//! The daemon suite: the runner plays a client of the daemon and hosts a probe adapter
//! that records every frame the daemon sends (SPEC §1–§4, §6).

pub mod at_rest;
pub mod cases;
pub mod frames;
pub mod probe;
pub mod replay;
pub mod script;

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Duration;

use base64::Engine;
use serde_json::{json, Value};

use self::probe::Probe;
use super::adapter::conn::{Conn, Recv};
use super::case::{CaseMeta, Outcome, WireLine};
use crate::contract::compose;
use crate::contract::operation::OPERATIONS;
use crate::contract::types::protocol_v2::{NoneResource, ToolsPolicy};
use crate::contract::types::tool_adapter::{AdapterLimits, ToolOperation};
use crate::contract::{const_limits, CapabilityHandle, Identity};

/// The prefix of a replayed golden vector's case id (`vector:<vector id>`), in both suites.
pub const PREFIX: &str = "vector:";

/// The daemon case catalogue (`conformance/daemon-cases.json`), built in.
pub const CATALOGUE: &str = include_str!("../../../conformance/daemon-cases.json");

/// Parse the built-in catalogue: the cases written in Rust, then the session vectors
/// ([`script`], `vectors/sessions/daemon.json`).
pub fn catalogue() -> Vec<CaseMeta> {
    let mut cat: Vec<CaseMeta> = serde_json::from_str(CATALOGUE).expect("the built-in daemon catalogue is valid");
    cat.extend(script::catalogue());
    run_last_at_end(&mut cat);
    cat
}

/// The cases run after every other case, replayed vectors and `--session` files included, in
/// this order: `daemon.restart.accepted-wake-indeterminate` leaves the host degraded (not
/// ready until an operator reconciles its indeterminate wake, as the protocol wants),
/// `daemon.restart.queued-wake-fails-reprovision` leaves another indeterminate wake (it needs
/// no ready host), and `daemon.secrets.at-rest` judges the whole run: it searches the daemon's files for every
/// handle the run minted.
pub const RUN_LAST: &[&str] = &[
    "daemon.restart.accepted-wake-indeterminate",
    "daemon.restart.queued-wake-fails-reprovision",
    "daemon.secrets.at-rest",
];

/// Move the [`RUN_LAST`] cases of `cat` to its end, in that order (the others keep theirs).
pub fn run_last_at_end(cat: &mut Vec<CaseMeta>) {
    let (mut last, rest): (Vec<CaseMeta>, Vec<CaseMeta>) =
        std::mem::take(cat).into_iter().partition(|m| RUN_LAST.contains(&m.id.as_str()));
    last.sort_by_key(|m| RUN_LAST.iter().position(|id| *id == m.id));
    *cat = rest;
    cat.extend(last);
}

/// The catalogue of a daemon run: the built-in cases, then one `vector:<id>` case per golden
/// command and descriptor vector of `dir` ([`replay`]). The vectors are not loaded (and no
/// vector case is listed) when `dir` cannot be read; the second value says why.
pub fn catalogue_with_vectors(dir: &Path) -> (Vec<CaseMeta>, Option<String>) {
    let mut cat = catalogue();
    match crate::vectors::VectorSet::load(dir) {
        Ok(set) => {
            cat.extend(replay::catalogue(&set));
            run_last_at_end(&mut cat);
            (cat, None)
        }
        Err(e) => (cat, Some(format!("no vector is replayed: {e}"))),
    }
}

/// What the runner is pointed at.
#[derive(Clone, Debug)]
pub struct DaemonTarget {
    /// The daemon's socket.
    pub socket: PathBuf,
    /// Directory the runner's sessions use as cwd (the probe's root).
    pub cwd: PathBuf,
    /// Prompt template for one tool call (`{tool}` and `{args}` are replaced).
    pub wake_template: String,
    /// Shell command that restarts the daemon (restart cases skip without it).
    pub restart_cmd: Option<String>,
    /// Shell command that stops the daemon gracefully (SIGTERM) and returns once it has
    /// exited; with `restart_cmd`, `daemon.shutdown.revokes-bindings` runs (skipped without).
    pub stop_cmd: Option<String>,
    /// `payload.model` for opens (`{provider, id}`), for daemons that need one.
    pub model: Option<Value>,
    /// One step's budget.
    pub step: Duration,
    /// The golden vectors replayed as `vector:` cases.
    pub vectors: PathBuf,
    /// Session vectors loaded from files (`--session`), run as cases beside the built-in ones.
    pub sessions: Vec<crate::conform::script::Session>,
    /// Files and directories where the daemon keeps its state and logs (`--scan-path`), searched
    /// by `daemon.secrets.at-rest` for the handles and the endpoint (skipped when empty).
    pub scan_paths: Vec<PathBuf>,
}

/// Everything one daemon case may use.
pub struct DCtx<'a> {
    /// The target.
    pub target: &'a DaemonTarget,
    /// The probe adapter.
    pub probe: &'a Probe,
    /// The daemon's hostInstanceId (re-read after a restart).
    pub host: String,
    /// Transcript.
    pub transcript: Rc<RefCell<Vec<WireLine>>>,
    /// Every byte received from the daemon.
    pub received: Rc<RefCell<Vec<u8>>>,
    /// Handles minted in this case (redacted, and never allowed back).
    pub handles: Vec<String>,
    /// Other endpoint paths this case named in a descriptor besides the probe's socket (a
    /// symlink to it, a path through an alias): never allowed back either (PC-6).
    pub endpoints: Vec<String>,
    /// A session id unique to this case.
    pub session: String,
    seq: u64,
}

impl<'a> DCtx<'a> {
    /// A fresh context.
    pub fn new(target: &'a DaemonTarget, probe: &'a Probe, host: String, case_no: usize) -> Self {
        let mut r = [0u8; 4];
        let _ = getrandom::fill(&mut r);
        DCtx {
            target,
            probe,
            host,
            transcript: Rc::default(),
            received: Rc::default(),
            handles: Vec::new(),
            endpoints: Vec::new(),
            session: format!("pc-{case_no}-{}", hex::encode(r)),
            seq: 0,
        }
    }

    /// A new client connection to the daemon.
    pub fn connect(&mut self) -> Result<Conn, Outcome> {
        let h = self.handles.first().cloned().unwrap_or_default();
        Conn::connect(&self.target.socket, &h, self.target.step, self.transcript.clone(), self.received.clone())
            .map_err(|e| Outcome::Error(format!("cannot connect to the daemon: {e}")))
    }

    /// A fresh request id.
    pub fn rid(&mut self) -> String {
        self.seq += 1;
        format!("pc-req-{}", self.seq)
    }

    /// Send `v` on `c` and wait for the response to its requestId.
    pub fn call(&mut self, c: &mut Conn, v: Value) -> Recv {
        let rid = v["requestId"].as_str().unwrap_or("").to_string();
        c.send(&v);
        loop {
            let r = c.recv_within(self.target.step * 3);
            match r.frame() {
                Some(f) if f["kind"] == "event" => continue,
                Some(f) if f["requestId"] == rid.as_str() => return r,
                Some(_) => continue,
                None => return r,
            }
        }
    }

    /// Mint a descriptor for the probe, bound to this host, the case session and `generation`
    /// (built from the generated types; `limits` replaces the default limits, raw when a case
    /// broke them on purpose).
    pub fn descriptor(&mut self, generation: u64, limits: Option<Value>) -> Result<Value, Outcome> {
        let ops: Vec<ToolOperation> = OPERATIONS.iter().filter_map(|o| o.parse().ok()).collect();
        self.descriptor_ops(generation, limits, &ops)
    }

    /// [`DCtx::descriptor`] granting only `ops`, in that order.
    pub fn descriptor_ops(
        &mut self,
        generation: u64,
        limits: Option<Value>,
        ops: &[ToolOperation],
    ) -> Result<Value, Outcome> {
        let mut b = [0u8; 32];
        let _ = getrandom::fill(&mut b);
        let handle = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
        self.handles.push(handle.clone());
        self.probe.remember_minted(&handle);
        let id = Identity {
            protocol_version: "1.0",
            adapter_id: "pi-conform-probe",
            adapter_version: "1.0.0",
            host_instance_id: &self.host,
            session_id: &self.session,
            generation,
        };
        let socket = self.probe.socket.to_string_lossy();
        let d =
            compose::descriptor(&id, &socket, &CapabilityHandle::new(handle), ops, &DEFAULT_LIMITS).map_err(harness)?;
        let mut d = compose::to_wire(&d);
        if let Some(l) = limits {
            d["limits"] = compose::typed_or_raw::<AdapterLimits>(l).map_or_else(|raw| raw, |t| compose::to_wire(&t));
        }
        Ok(d)
    }

    /// A v2 open of the case session with tools policy `tools` (raw when a case broke the
    /// policy or its descriptor on purpose).
    pub fn open(&mut self, generation: u64, tools: Value) -> Result<Value, Outcome> {
        self.open_as("2.0", generation, tools)
    }

    /// An open of the case session as `version` (`"1.0"` or `"2.0"`); a v2 open carries the
    /// `--model`, a v1 open none.
    pub fn open_as(&mut self, version: &str, generation: u64, tools: Value) -> Result<Value, Outcome> {
        let rid = self.rid();
        let (typed, raw) = match compose::typed_or_raw::<ToolsPolicy>(tools) {
            Ok(t) => (t, None),
            Err(raw) => (ToolsPolicy::NoneResource(NoneResource::None), Some(raw)),
        };
        let cwd = self.target.cwd.clone();
        let mut payload = compose::open_payload(&cwd.to_string_lossy(), compose::resources(typed)).map_err(harness)?;
        if let Some(m) = self.target.model.as_ref().filter(|_| version != "1.0") {
            payload.model = Some(
                compose::model(m["provider"].as_str().unwrap_or_default(), m["id"].as_str().unwrap_or_default())
                    .map_err(harness)?,
            );
        }
        let e = compose::Envelope { version, request_id: &rid };
        let s = compose::SessionRef { session_id: &self.session, generation };
        let mut v = compose::to_wire(&compose::open(&e, &s, payload).map_err(harness)?);
        if let Some(raw) = raw {
            v["payload"]["resources"]["tools"] = raw;
        }
        Ok(v)
    }

    /// A v2 open of the case session in `cwd` with no tools; `storage` gives an isolated
    /// `agentDir` and the confined `session.sessionDir` inside it.
    pub fn open_in(&mut self, generation: u64, cwd: &Path, storage: Option<(&Path, &Path)>) -> Result<Value, Outcome> {
        let rid = self.rid();
        let none = ToolsPolicy::NoneResource(NoneResource::None);
        let mut payload = compose::open_payload(&cwd.to_string_lossy(), compose::resources(none)).map_err(harness)?;
        if let Some((agent, session_dir)) = storage {
            let agent = agent.to_string_lossy();
            let dir = session_dir.to_string_lossy();
            payload.agent_dir = Some(
                agent.as_ref().try_into().map_err(|e| harness(compose::ComposeError::new("payload.agentDir", e)))?,
            );
            payload.session.session_dir = Some(
                dir.as_ref()
                    .try_into()
                    .map_err(|e| harness(compose::ComposeError::new("payload.session.sessionDir", e)))?,
            );
        }
        let e = compose::Envelope { version: "2.0", request_id: &rid };
        let s = compose::SessionRef { session_id: &self.session, generation };
        Ok(compose::to_wire(&compose::open(&e, &s, payload).map_err(harness)?))
    }

    /// The tools policy for a descriptor.
    pub fn host_adapter(d: &Value) -> Value {
        json!({"mode": "host-adapter", "descriptor": d})
    }

    /// A v2 wake of the case session whose prompt makes one tool call.
    pub fn wake(&mut self, generation: u64, tool: &str, args: &Value) -> Result<Value, Outcome> {
        self.wake_calls(generation, &[(tool, args.clone())])
    }

    /// A v2 wake of the case session whose prompt makes these tool calls, in order: the wake
    /// template once per call, one per line (consecutive read-only calls may run concurrently).
    pub fn wake_calls(&mut self, generation: u64, calls: &[(&str, Value)]) -> Result<Value, Outcome> {
        let rid = self.rid();
        let prompt: Vec<String> = calls
            .iter()
            .map(|(tool, args)| self.target.wake_template.replace("{tool}", tool).replace("{args}", &args.to_string()))
            .collect();
        let e = compose::Envelope { version: "2.0", request_id: &rid };
        let s = compose::SessionRef { session_id: &self.session, generation };
        compose::wake(&e, &s, &format!("{rid}-wake"), &prompt.join("\n")).map(|w| compose::to_wire(&w)).map_err(harness)
    }

    /// A v2 handshake; `request_id` replaces a fresh one.
    pub fn handshake(&mut self, request_id: Option<&str>) -> Result<Value, Outcome> {
        let rid = request_id.map_or_else(|| self.rid(), str::to_string);
        compose::handshake(&compose::Envelope { version: "2.0", request_id: &rid })
            .map(|h| compose::to_wire(&h))
            .map_err(harness)
    }

    /// A v2 attach to the case session.
    pub fn attach(&mut self, generation: u64) -> Result<Value, Outcome> {
        let rid = self.rid();
        let s = compose::SessionRef { session_id: &self.session, generation };
        compose::attach(&compose::Envelope { version: "2.0", request_id: &rid }, &s)
            .map(|a| compose::to_wire(&a))
            .map_err(harness)
    }

    /// A v2 close of the case session.
    pub fn close(&mut self, generation: u64) -> Result<Value, Outcome> {
        let rid = self.rid();
        let s = compose::SessionRef { session_id: &self.session, generation };
        compose::close(&compose::Envelope { version: "2.0", request_id: &rid }, &s)
            .map(|a| compose::to_wire(&a))
            .map_err(harness)
    }

    /// A v2 close of the case session with `retainSession` given.
    pub fn close_retaining(&mut self, generation: u64, retain: bool) -> Result<Value, Outcome> {
        let rid = self.rid();
        let s = compose::SessionRef { session_id: &self.session, generation };
        let mut cmd = compose::close(&compose::Envelope { version: "2.0", request_id: &rid }, &s).map_err(harness)?;
        cmd.payload.retain_session = Some(retain);
        Ok(compose::to_wire(&cmd))
    }

    /// Restart the daemon with the restart command and reconnect; refresh `host`.
    pub fn restart(&mut self) -> Result<(), Outcome> {
        let Some(cmd) = self.target.restart_cmd.clone() else {
            return Err(Outcome::Skip("no --restart-cmd given".into()));
        };
        self.run_cmd(&cmd, "restart")?;
        let t = std::time::Instant::now();
        loop {
            if let Ok(h) = read_host(&self.target.socket, self.target.step) {
                self.host = h;
                return Ok(());
            }
            if t.elapsed() > self.target.step * 10 {
                return Err(Outcome::Error("the daemon did not come back after the restart".into()));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Run the `--stop-cmd` (a graceful stop; it returns once the daemon has exited).
    pub fn stop(&mut self) -> Result<(), Outcome> {
        let Some(cmd) = self.target.stop_cmd.clone() else {
            return Err(Outcome::Skip("no --stop-cmd given".into()));
        };
        self.run_cmd(&cmd, "stop")
    }

    /// Run the shell command `cmd` (the `what` command) to its end, within a deadline; its
    /// output goes to stderr, never into a report on stdout.
    fn run_cmd(&self, cmd: &str, what: &str) -> Result<(), Outcome> {
        let child = std::process::Command::new("sh")
            .arg("-c")
            .arg(cmd)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::from(std::io::stderr()))
            .spawn();
        let mut child = child.map_err(|e| Outcome::Error(format!("the {what} command could not start: {e}")))?;
        let deadline = RESTART_CMD_BUDGET.max(self.target.step * 20);
        let started = std::time::Instant::now();
        loop {
            match child.try_wait() {
                Ok(Some(st)) if st.success() => return Ok(()),
                Ok(Some(st)) => return Err(Outcome::Error(format!("the {what} command failed ({st})"))),
                Ok(None) if started.elapsed() > deadline => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(Outcome::Error(format!(
                        "the {what} command did not finish within {} s",
                        deadline.as_secs()
                    )));
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                Err(e) => return Err(Outcome::Error(format!("cannot wait for the {what} command: {e}"))),
            }
        }
    }
}

/// The limits of a minted descriptor unless a case names others.
pub(crate) const DEFAULT_LIMITS: AdapterLimits = const_limits([1_048_576, 1_048_576, 4, 16, 3000, 256, 60_000]);

/// A command or descriptor the runner could not build from the generated types: a value the
/// daemon or the options gave it breaks the schema (inconclusive, never a verdict on the
/// daemon's clause under test).
fn harness(e: compose::ComposeError) -> Outcome {
    Outcome::Error(format!("inconclusive: the runner cannot build what this case sends: {e}"))
}

/// The least time a `--restart-cmd` is given to finish (a daemon may take seconds to start).
const RESTART_CMD_BUDGET: Duration = Duration::from_secs(60);

/// Why the daemon's hostInstanceId could not be learnt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostError {
    /// Nothing answers: no connection, or a connection on which nothing is said.
    Unreachable(String),
    /// The daemon answered the handshake, but with no usable `data.host.hostInstanceId`.
    Answered(String),
}

impl std::fmt::Display for HostError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HostError::Unreachable(m) | HostError::Answered(m) => f.write_str(m),
        }
    }
}

/// Read the daemon's hostInstanceId with a v2 handshake.
pub fn read_host(socket: &Path, step: Duration) -> Result<String, HostError> {
    let mut c = Conn::connect(socket, "", step, Rc::default(), Rc::default())
        .map_err(|e| HostError::Unreachable(e.to_string()))?;
    let hs = compose::handshake(&compose::Envelope { version: "2.0", request_id: "pc-hs" })
        .map_err(|e| HostError::Unreachable(e.to_string()))?;
    c.send(&compose::to_wire(&hs));
    match c.recv() {
        Recv::Frame(v, _) => match crate::contract::parse_handshake_data(&v.data()) {
            Ok(hs) => Ok(hs.host.host_instance_id.to_string()),
            // Handshake data the contract refuses is still read raw for the host id: the cases
            // judge the handshake; this only learns which host to address.
            Err(_) => v["data"]["host"]["hostInstanceId"].as_str().map(str::to_string).ok_or_else(|| {
                HostError::Answered(
                    "the daemon answered the handshake, but without data.host.hostInstanceId (the suite \
                     addresses every session to it), so the suite was not run"
                        .to_string(),
                )
            }),
        },
        r @ (Recv::Closed | Recv::Timeout) => {
            Err(HostError::Unreachable(format!("no handshake response: {}", r.describe())))
        }
        Recv::Garbage(_) => Err(HostError::Answered(
            "the daemon answered the handshake with a line that is not JSON, so the suite was not run".to_string(),
        )),
    }
}

/// Judge every line the daemon sent a client during a case through the contract: each must be
/// one strict JSON object, a response (`validate_response`) or an event (`validate_event`).
/// Returns one sentence per violation (at most `MAX_LISTED`, then a count).
pub fn judge_client_lines(received: &[u8]) -> Vec<String> {
    const MAX_LISTED: usize = 5;
    let mut out = Vec::new();
    let mut more = 0usize;
    for line in received.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            continue;
        }
        let why = match crate::wire::decode_strict(line) {
            Err(_) => Some("a line that is not one strict JSON object".to_string()),
            Ok(v) => {
                // A refused record has no generated type: what it was is read raw for the report.
                crate::contract::parse_host_record(&v).err().map(|e| {
                    let what = v.get("event").and_then(Value::as_str).map_or_else(
                        || format!("a {}", v.get("kind").and_then(Value::as_str).unwrap_or("record")),
                        |ev| format!("a `{ev}` event"),
                    );
                    format!("{what} that breaks the contract: {} at `{}` ({})", e.code, e.field(), e.message)
                })
            }
        };
        if let Some(why) = why {
            if out.len() < MAX_LISTED {
                out.push(format!("the daemon sent a client {why}"));
            } else {
                more += 1;
            }
        }
    }
    if more > 0 {
        out.push(format!("… and {more} more such lines"));
    }
    out
}

/// A response's outcome token: `ok`, or `error:<code>`; `closed` / `timeout` otherwise.
pub fn rtoken(r: &Recv) -> String {
    match r.frame() {
        Some(v) if v.ok() == Some(true) => "ok".into(),
        Some(v) if v.ok() == Some(false) => format!("error:{}", v.error_code().unwrap_or("?")),
        Some(_) => "frame".into(),
        None => r.describe(),
    }
}

#[cfg(test)]
mod tests {
    use super::judge_client_lines;

    #[test]
    fn every_client_line_is_judged_and_violations_say_why() {
        let good =
            br#"{"protocolVersion":"2.0","kind":"response","requestId":"r","hostInstanceId":"h","ok":true,"data":{}}"#;
        assert!(judge_client_lines(&[good.as_slice(), b"\n"].concat()).is_empty());
        // A failed response without its error body, a line that is not JSON, an unknown kind.
        let bad = [
            br#"{"protocolVersion":"2.0","kind":"response","requestId":"r","hostInstanceId":"h","ok":false}"#
                .as_slice(),
            b"not json",
            br#"{"kind":"gossip"}"#,
        ];
        let got = judge_client_lines(&bad.join(&b'\n'));
        assert_eq!(got.len(), 3, "{got:?}");
        assert!(got[0].contains("a response that breaks the contract"), "{}", got[0]);
        assert!(got[1].contains("not one strict JSON object"), "{}", got[1]);
        assert!(got[2].contains("neither a response nor an event"), "{}", got[2]);
    }

    #[test]
    fn violations_are_listed_up_to_five_then_counted() {
        let got = judge_client_lines(&b"x\n".repeat(8));
        assert_eq!(got.len(), 6);
        assert!(got[5].contains("3 more"), "{}", got[5]);
    }
}
