//! The probe adapter: an owner-private socket the daemon suite creates, which records every
//! frame the daemon sends and answers — correctly, or wrongly on purpose, per case.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

use crate::adapter::fs::{Cancel, Root};
use crate::adapter::session::Job;
use crate::conform::adapter::conn::BoundedLines;
use crate::contract::types::tool_adapter::AdapterFrame;
use crate::contract::{compose, AdapterCode, AdapterError, Binding};

/// The data a probe result may take by default.
const PROBE_BUDGET: usize = 512 * 1024;

/// How the probe answers `bind`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BoundMode {
    /// The exact echo.
    Exact,
    /// One limit changed.
    WrongLimits,
    /// Operations reversed.
    ReorderedOps,
    /// Generation + 1.
    WrongGeneration,
    /// The handle echoed back.
    EchoHandle,
    /// Close without `bound`.
    Close,
    /// Never answer.
    Silence,
    /// The exact echo, then the probe shuts its reading half (every later write of the daemon
    /// fails) and holds the connection open without reading while this mode stays set (at
    /// most [`SHUT_READ_HOLD`]): a socket error the daemon meets only when it writes.
    ShutReadAfterBound,
    /// The exact echo, then the probe closes the connection at once (the binding fails after
    /// its open was answered).
    CloseAfterBound,
    /// The exact echo, this many milliseconds after the `bind` arrived.
    Delay(u64),
}

/// How the probe answers `invoke`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InvokeMode {
    /// Run it on the probe's root and answer correctly.
    Normal,
    /// Never answer (the daemon's timeout must fire).
    Ignore,
    /// Answer with another idempotencyKey.
    MismatchKey,
    /// Answer correctly, preceded by a result for a request that does not exist.
    Unsolicited,
    /// Answer with the handle inside the data.
    ReflectHandle,
    /// Never answer the invoke; answer an abort with `aborted:true`, then send the result.
    ResultAfterAborted,
    /// Answer with a well-formed result of another granted operation (its own data shape)
    /// under the invoke's `requestId` and `idempotencyKey`.
    OtherOperation,
    /// Hold the first invoke; when a second one arrives, send the first one's correct result
    /// twice and hold the second (so a call is pending when the duplicate arrives).
    DuplicateWhileHeld,
    /// Answer correctly, each invoke this many milliseconds after it arrived (the connection
    /// is read no further meanwhile).
    Delay(u64),
    /// Never answer the invoke; answer an abort with the late result first, then `aborted:true`
    /// (the race every abort has: the result was on its way).
    ResultBeforeAborted,
    /// As [`InvokeMode::ResultBeforeAborted`], but the late result names another (well-formed)
    /// idempotency key: not the aborted call's result, so it must fail the connection.
    WrongKeyBeforeAborted,
    /// Close the connection (EOF) on the first invoke, unanswered.
    CloseOnInvoke,
    /// Never answer an invoke, nor its abort (tombstones stay alive).
    Silent,
}

/// Where a scripted frame is sent: instead of the `bound` answer to the next `bind`, instead
/// of the answer to the next `invoke`, ahead of the (normal) answer to the next `invoke`, or
/// instead of the `aborted` answer to the next `abort`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScriptAt {
    /// Instead of `bound`.
    Bound,
    /// Instead of the result of the next invoke.
    Invoke,
    /// Before the result of the next invoke, which is then answered as the mode says.
    BeforeResult,
    /// Instead of the `aborted` answer to the next abort.
    Abort,
}

/// Builds the line (LF excluded) a scripted answer sends, from the live binding the probe
/// saw in `bind` and the live frame it answers (the invoke, or the abort; `None` for a
/// `bound`); `Err` says why the frame cannot be sent (the probe then answers normally).
pub type ScriptFn = Box<dyn FnOnce(&Binding, Option<&Value>) -> Result<Vec<u8>, String> + Send>;

/// One scripted answer, used once (the golden `to-daemon` frame vectors, [`super::replay`]).
#[derive(Default)]
pub struct ScriptSlot {
    /// The answer waiting to be sent.
    pub pending: Option<(ScriptAt, ScriptFn)>,
    /// What became of the last one: `Ok` sent, `Err` why not.
    pub outcome: Option<Result<(), String>>,
}

/// What the probe saw.
#[derive(Clone, Debug, Default)]
pub struct ProbeLog {
    /// Connections accepted.
    pub connections: usize,
    /// Every frame received, in order (connection index, frame).
    pub frames: Vec<(usize, Value)>,
    /// Raw byte lengths of each received line (LF included), parallel to `frames`.
    pub sizes: Vec<usize>,
    /// When each frame was received, parallel to `frames`.
    pub at: Vec<std::time::Instant>,
    /// Every frame that broke the contract (connection index, why): the first line of a
    /// connection is judged as a `bind` request, every later one as a daemon → adapter frame
    /// against that binding, by the same contract functions the reference adapter uses.
    pub violations: Vec<(usize, String)>,
    /// The connections the daemon ended (EOF or a read error, not a close of the probe's own),
    /// with when the probe saw it.
    pub ended: Vec<(usize, std::time::Instant)>,
    /// The connections on which a silent probe's bytes after `revoke` were refused (a write
    /// failed: the daemon closed the socket, not only its half), with when.
    pub refused: Vec<(usize, std::time::Instant)>,
    /// The connections on which a silent probe could not send its bytes after `revoke` (its
    /// socket could not be cloned for the trickle): whether the daemon refuses them is unknown.
    pub drip_unavailable: Vec<usize>,
    /// The connections whose reading half the probe shut after `bound`
    /// ([`BoundMode::ShutReadAfterBound`]).
    pub shut_read: Vec<usize>,
    /// The connections that are over (the daemon ended them, or the probe closed its own: after
    /// `revoked`, or as its bound mode says), with when the probe let go of the socket.
    pub closed: Vec<(usize, std::time::Instant)>,
}

/// A running probe adapter.
pub struct Probe {
    /// Private directory (0700) holding the socket.
    pub dir: tempfile::TempDir,
    /// The socket (0600).
    pub socket: PathBuf,
    /// How to answer bind.
    pub bound: Arc<Mutex<BoundMode>>,
    /// How to answer invokes.
    pub invoke: Arc<Mutex<InvokeMode>>,
    /// What was seen.
    pub log: Arc<Mutex<ProbeLog>>,
    /// A scripted answer for the next bind or invoke.
    pub script: Arc<Mutex<ScriptSlot>>,
    /// When set, `revoke` is neither answered nor followed by a close: the probe keeps
    /// reading until the daemon ends the connection (the daemon's close backstop), and
    /// meanwhile trickles the bytes of a line it never finishes (one space every
    /// [`REVOKE_DRIP_EVERY`], for as long as the knob stays set and at most
    /// [`REVOKE_DRIP_FOR`]): an adapter's activity must not put that backstop off.
    pub revoke_silent: Arc<AtomicBool>,
    /// Every capability handle the runner minted for this probe during the run, in order
    /// (`daemon.secrets.at-rest` looks for them where the daemon keeps its state).
    minted: Mutex<Vec<String>>,
    root: PathBuf,
}

impl Probe {
    /// Start a probe whose operations run on `root`.
    pub fn start(root: &Path) -> std::io::Result<Probe> {
        let dir = tempfile::Builder::new().prefix("pi-conform-probe").tempdir()?;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))?;
        let socket = dir.path().join("probe.sock");
        let listener = UnixListener::bind(&socket)?;
        std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600))?;
        let p = Probe {
            dir,
            socket,
            bound: Arc::new(Mutex::new(BoundMode::Exact)),
            invoke: Arc::new(Mutex::new(InvokeMode::Normal)),
            log: Arc::default(),
            script: Arc::default(),
            revoke_silent: Arc::default(),
            minted: Mutex::default(),
            root: root.to_path_buf(),
        };
        let (bound, invoke, log, root) = (p.bound.clone(), p.invoke.clone(), p.log.clone(), p.root.clone());
        let script = p.script.clone();
        let revoke_silent = p.revoke_silent.clone();
        std::thread::spawn(move || {
            for (n, s) in listener.incoming().enumerate() {
                let Ok(s) = s else { break };
                if let Ok(mut l) = log.lock() {
                    l.connections += 1;
                }
                let knobs = Knobs {
                    bound: bound.clone(),
                    invoke: invoke.clone(),
                    script: script.clone(),
                    revoke_silent: revoke_silent.clone(),
                };
                let (log, root) = (log.clone(), root.clone());
                std::thread::spawn(move || serve(n, s, knobs, log, root));
            }
        });
        Ok(p)
    }

    /// Remember `handle`, minted by the runner for a descriptor naming this probe.
    pub fn remember_minted(&self, handle: &str) {
        if let Ok(mut m) = self.minted.lock() {
            m.push(handle.to_string());
        }
    }

    /// Every handle the runner minted for this probe so far (never a vector's fixed handle).
    pub fn minted(&self) -> Vec<String> {
        self.minted.lock().map(|m| m.clone()).unwrap_or_default()
    }

    /// Snapshot of the log.
    pub fn seen(&self) -> ProbeLog {
        self.log.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// Set the modes for the next connections.
    pub fn set(&self, b: BoundMode, i: InvokeMode) {
        if let Ok(mut x) = self.bound.lock() {
            *x = b;
        }
        if let Ok(mut x) = self.invoke.lock() {
            *x = i;
        }
    }

    /// Whether the next `revoke`s go unanswered with the connection left open.
    pub fn set_revoke_silent(&self, silent: bool) {
        self.revoke_silent.store(silent, Ordering::SeqCst);
    }

    /// Script the answer to the next bind or invoke (replacing any script not yet used).
    pub fn script(&self, at: ScriptAt, build: ScriptFn) {
        if let Ok(mut s) = self.script.lock() {
            *s = ScriptSlot { pending: Some((at, build)), outcome: None };
        }
    }

    /// Drop an unused script and return what became of the last one (`None`: never used).
    pub fn take_script_outcome(&self) -> Option<Result<(), String>> {
        self.script.lock().ok().and_then(|mut s| {
            s.pending = None;
            s.outcome.take()
        })
    }
}

/// Run the scripted answer for `at`, if one is waiting: `true` when it was sent (or the
/// write failed), `false` when the probe must answer as usual.
fn scripted(
    slot: &Mutex<ScriptSlot>,
    at: ScriptAt,
    binding: Option<&Binding>,
    invoke: Option<&Value>,
    w: &mut UnixStream,
) -> bool {
    let Ok(mut s) = slot.lock() else { return false };
    let Some(binding) = binding else { return false };
    if !matches!(&s.pending, Some((a, _)) if *a == at) {
        return false;
    }
    let Some((_, build)) = s.pending.take() else { return false };
    match build(binding, invoke) {
        Ok(mut line) => {
            line.push(b'\n');
            let _ = w.write_all(&line);
            s.outcome = Some(Ok(()));
            true
        }
        Err(why) => {
            s.outcome = Some(Err(why));
            false
        }
    }
}

/// Judge one line the daemon sent through the contract: the first as a `bind` request (whose
/// binding then judges the rest), later ones as daemon → adapter frames (returned typed).
fn judge(line: &[u8], binding: &mut Option<Binding>) -> Result<Option<AdapterFrame>, String> {
    use crate::contract::{parse_adapter_frame, parse_bind_request, Direction};
    match binding {
        None => {
            let req = parse_bind_request(line, MAX_BIND_LINE)
                .map_err(|e| format!("the daemon's first frame is not a valid bind: {}", why(&e.error)))?;
            *binding = Some(req);
            Ok(None)
        }
        Some(b) => parse_adapter_frame(line, b, Direction::ToAdapter)
            .map(Some)
            .map_err(|e| format!("the daemon sent the adapter a frame that breaks the contract: {}", why(&e.error))),
    }
}

/// The exact `bound` echo of a valid bind, from the generated type.
fn typed_bound(b: &Binding) -> Option<Value> {
    Some(b.bound_frame())
}

fn why(e: &crate::contract::ContractError) -> String {
    format!("{} at `{}` ({})", e.code, e.field(), e.message)
}

/// The largest legal `bind` line (`maxRequestBytes` at its maximum, 4 MiB).
const MAX_BIND_LINE: usize = 4 * 1024 * 1024;

/// How often a silent probe sends a byte after `revoke` ([`Probe::revoke_silent`]).
pub const REVOKE_DRIP_EVERY: Duration = Duration::from_millis(200);
/// The longest a silent probe goes on sending bytes after `revoke`; it stops earlier when a
/// write fails or the case clears [`Probe::revoke_silent`] (every case clears it when it ends,
/// so that the trickle outlasts whatever wait the case allows at any `--time-scale`).
pub const REVOKE_DRIP_FOR: Duration = Duration::from_secs(600);

/// The longest a probe holds a connection whose reading half it shut
/// ([`BoundMode::ShutReadAfterBound`]); it lets go earlier when the case changes the mode.
pub const SHUT_READ_HOLD: Duration = Duration::from_secs(600);

/// Whether, on this platform, a write to a Unix stream socket whose peer shut its reading
/// half fails (Linux: `EPIPE`). Without it [`BoundMode::ShutReadAfterBound`] provokes no socket
/// error at all, and a case relying on one is inconclusive.
pub fn write_fails_after_peer_shut_read() -> bool {
    let Ok((mut a, b)) = UnixStream::pair() else { return false };
    if b.shutdown(std::net::Shutdown::Read).is_err() {
        return false;
    }
    a.write_all(b"x").is_err()
}

/// How a case wants the probe to answer (shared with [`Probe`], read per frame).
struct Knobs {
    bound: Arc<Mutex<BoundMode>>,
    invoke: Arc<Mutex<InvokeMode>>,
    script: Arc<Mutex<ScriptSlot>>,
    revoke_silent: Arc<AtomicBool>,
}

fn serve(n: usize, s: UnixStream, knobs: Knobs, log: Arc<Mutex<ProbeLog>>, root: PathBuf) {
    let Knobs { bound, invoke, script, revoke_silent } = knobs;
    let Ok(mut w) = s.try_clone() else { return };
    let reader = BoundedLines::new(s);
    let mut identity: Option<Value> = None;
    let mut handle = String::new();
    // What a result's data may take: 512 KiB, or nearly the binding's maxResponseBytes when
    // it allows results over 1 MiB (daemon.events.over-max-event-bytes-dropped reads more).
    let mut budget = PROBE_BUDGET;
    let mut held: Vec<Value> = Vec::new();
    let root = Root::open(&root).ok();
    let mut binding: Option<Binding> = None;
    // The correct answer to the first invoke of [`InvokeMode::DuplicateWhileHeld`], held.
    let mut dup_answer: Option<Value> = None;
    let mut dup_invokes = 0usize;
    // Whether the probe stopped reading on its own (not the daemon's EOF).
    let mut probe_stopped = false;
    // The daemon ended the connection: EOF, or a write the daemon no longer takes.
    let ended = DaemonEnded { n, log: log.clone(), seen: std::cell::Cell::new(false) };
    for line in reader {
        let line = match line {
            Ok(line) => line,
            Err(head) => {
                if let Ok(mut l) = log.lock() {
                    let why = judge(&head, &mut binding).err().unwrap_or_else(|| "an over-long line".into());
                    l.violations.push((n, why));
                }
                probe_stopped = true;
                break;
            }
        };
        let verdict = judge(&line, &mut binding);
        // The frame as the contract accepted it (the probe answers from it), `None` for a bind
        // or a frame the contract refused (answered from the raw value: the refusal is logged).
        let typed = verdict.as_ref().ok().cloned().flatten();
        // This line is the connection's bind, valid: `binding` is the one it made.
        let valid_bind = matches!(verdict, Ok(None));
        let Ok(f) = serde_json::from_slice::<Value>(&line) else {
            if let Ok(mut l) = log.lock() {
                l.violations.push((n, verdict.err().unwrap_or_else(|| "a line that is not JSON".into())));
            }
            probe_stopped = true;
            break;
        };
        if let Ok(mut l) = log.lock() {
            l.frames.push((n, f.clone()));
            l.sizes.push(line.len() + 1);
            l.at.push(std::time::Instant::now());
            if let Err(why) = verdict {
                l.violations.push((n, why));
            }
        }
        let send = |w: &mut UnixStream, v: &Value| {
            let mut b = serde_json::to_vec(v).unwrap_or_default();
            b.push(b'\n');
            let ok = w.write_all(&b).is_ok();
            if !ok {
                ended.seen.set(true);
            }
            ok
        };
        match f["kind"].as_str() {
            Some("bind") => {
                let bmode = bound.lock().map(|b| *b).unwrap_or(BoundMode::Exact);
                handle = f["capabilityHandle"].as_str().unwrap_or("").to_string();
                budget = match f["limits"]["maxResponseBytes"].as_u64() {
                    Some(m) if m > 1024 * 1024 => m as usize - 8 * 1024,
                    _ => PROBE_BUDGET,
                };
                let mut b = f.clone();
                let m = b.as_object_mut().map(|m| {
                    m.remove("capabilityHandle");
                    m.insert("kind".into(), json!("bound"));
                });
                if m.is_none() {
                    return;
                }
                let mut id = b.clone();
                if let Some(m) = id.as_object_mut() {
                    m.remove("operations");
                    m.remove("limits");
                    m.remove("kind");
                }
                identity = Some(id);
                if scripted(&script, ScriptAt::Bound, binding.as_ref(), None, &mut w) {
                    continue;
                }
                match bmode {
                    // The exact echo, from the generated type when the bind was valid.
                    BoundMode::Exact | BoundMode::ShutReadAfterBound | BoundMode::CloseAfterBound => {
                        if let Some(t) = binding.as_ref().filter(|_| valid_bind).and_then(typed_bound) {
                            b = t;
                        }
                    }
                    BoundMode::WrongLimits => {
                        let q = b["limits"]["maxQueuedRequests"].as_u64().unwrap_or(0);
                        b["limits"]["maxQueuedRequests"] = json!(if q == 0 { 1 } else { q - 1 });
                    }
                    BoundMode::ReorderedOps => {
                        if let Some(a) = b["operations"].as_array_mut() {
                            a.reverse();
                            if a.len() < 2 {
                                a.push(json!("fs.stat"));
                            }
                        }
                    }
                    BoundMode::WrongGeneration => b["generation"] = json!(b["generation"].as_u64().unwrap_or(0) + 1),
                    BoundMode::EchoHandle => b["capabilityHandle"] = json!(handle),
                    BoundMode::Close => return,
                    BoundMode::Silence => {
                        std::thread::sleep(Duration::from_secs(3600));
                        return;
                    }
                    BoundMode::Delay(ms) => {
                        std::thread::sleep(Duration::from_millis(ms));
                        if let Some(t) = binding.as_ref().filter(|_| valid_bind).and_then(typed_bound) {
                            b = t;
                        }
                    }
                }
                if !send(&mut w, &b) {
                    return;
                }
                if bmode == BoundMode::CloseAfterBound {
                    probe_stopped = true;
                    break;
                }
                if bmode == BoundMode::ShutReadAfterBound {
                    // Hold the socket without reading (a read would see EOF at once, and
                    // letting go would close it): only the daemon's next write fails.
                    if w.shutdown(std::net::Shutdown::Read).is_ok() {
                        if let Ok(mut l) = log.lock() {
                            l.shut_read.push(n);
                        }
                    }
                    let t = std::time::Instant::now();
                    while t.elapsed() < SHUT_READ_HOLD
                        && bound.lock().map(|b| *b == BoundMode::ShutReadAfterBound).unwrap_or(false)
                    {
                        std::thread::sleep(Duration::from_millis(50));
                    }
                    probe_stopped = true;
                    break;
                }
            }
            Some("invoke") => {
                let imode = invoke.lock().map(|b| *b).unwrap_or(InvokeMode::Normal);
                let Some(id) = &identity else { return };
                if scripted(&script, ScriptAt::Invoke, binding.as_ref(), Some(&f), &mut w) {
                    continue;
                }
                scripted(&script, ScriptAt::BeforeResult, binding.as_ref(), Some(&f), &mut w);
                // A well-formed answer, from the generated types (a case that mutates it on
                // purpose, or an invoke the contract refused, takes the raw one below).
                let typed_result = |data: &Result<Value, AdapterError>| -> Option<Value> {
                    let (b, inv) = (binding.as_ref()?, typed.as_ref()?);
                    let (rid, key, op) = (inv.request_id()?, inv.idempotency_key()?, inv.operation()?);
                    match data {
                        Ok(d) => compose::result(&b.identity(), rid, key, op, d).ok()?.map(|r| compose::to_wire(&r)),
                        Err(e) => {
                            compose::result_error(&b.identity(), rid, key, op, e).ok().map(|r| compose::to_wire(&r))
                        }
                    }
                };
                let result = |data: Result<Value, AdapterError>| {
                    let data = data.map_err(|e| e.body());
                    let mut r = id.clone();
                    r["kind"] = json!("result");
                    for k in ["requestId", "idempotencyKey", "operation"] {
                        r[k] = f[k].clone();
                    }
                    match data {
                        Ok(d) => {
                            r["ok"] = json!(true);
                            r["data"] = d;
                        }
                        Err(e) => {
                            r["ok"] = json!(false);
                            r["error"] = e;
                        }
                    }
                    r
                };
                let run = || -> Result<Value, AdapterError> {
                    let Some(root) = &root else {
                        return Err(AdapterError::new(AdapterCode::IoError, "no root"));
                    };
                    let job = Job {
                        request_id: f["requestId"].as_str().unwrap_or("").into(),
                        operation: f["operation"]
                            .as_str()
                            .and_then(|o| o.parse().ok())
                            .unwrap_or(crate::contract::types::tool_adapter::ToolOperation::FsStat),
                        payload: f["payload"].clone(),
                        budget,
                        cancel: Cancel::new(),
                    };
                    crate::adapter::ops::execute(root, &job)
                };
                match imode {
                    InvokeMode::Normal => {
                        let data = run();
                        let answer = typed_result(&data).unwrap_or_else(|| result(data));
                        if !send(&mut w, &answer) {
                            return;
                        }
                    }
                    InvokeMode::Ignore => {}
                    InvokeMode::MismatchKey => {
                        let mut r = result(run());
                        r["idempotencyKey"] = json!("tool-not-the-key");
                        let _ = send(&mut w, &r);
                    }
                    InvokeMode::Unsolicited => {
                        let mut r = result(run());
                        r["requestId"] = json!("00000000-0000-4000-8000-000000000000");
                        let _ = send(&mut w, &r);
                    }
                    InvokeMode::ReflectHandle => {
                        let _ = send(
                            &mut w,
                            &result(Ok(json!({"content": format!("leak {handle}"), "bytesRead": 1, "eof": true}))),
                        );
                    }
                    InvokeMode::ResultAfterAborted
                    | InvokeMode::ResultBeforeAborted
                    | InvokeMode::WrongKeyBeforeAborted => held.push(f.clone()),
                    InvokeMode::CloseOnInvoke => return,
                    InvokeMode::Silent => {}
                    InvokeMode::OtherOperation => {
                        // Another operation on the same path, run for real so that its data
                        // has that operation's shape; only the operation differs from the invoke.
                        let other = if f["operation"] == "fs.list" { "fs.stat" } else { "fs.list" };
                        let data = root.as_ref().map_or_else(
                            || Err(AdapterError::new(AdapterCode::IoError, "no root")),
                            |root| {
                                let job = Job {
                                    request_id: f["requestId"].as_str().unwrap_or("").into(),
                                    operation: other
                                        .parse()
                                        .unwrap_or(crate::contract::types::tool_adapter::ToolOperation::FsStat),
                                    payload: json!({"path": f["payload"]["path"].as_str().unwrap_or(".")}),
                                    budget,
                                    cancel: Cancel::new(),
                                };
                                crate::adapter::ops::execute(root, &job)
                            },
                        );
                        let mut r = result(data);
                        r["operation"] = json!(other);
                        let _ = send(&mut w, &r);
                    }
                    InvokeMode::DuplicateWhileHeld => {
                        dup_invokes += 1;
                        if dup_invokes == 1 {
                            let data = run();
                            dup_answer = Some(typed_result(&data).unwrap_or_else(|| result(data)));
                        } else if let Some(answer) = dup_answer.take() {
                            if !send(&mut w, &answer) || !send(&mut w, &answer) {
                                return;
                            }
                        }
                    }
                    InvokeMode::Delay(ms) => {
                        std::thread::sleep(Duration::from_millis(ms));
                        let data = run();
                        let answer = typed_result(&data).unwrap_or_else(|| result(data));
                        if !send(&mut w, &answer) {
                            return;
                        }
                    }
                }
            }
            Some("abort") => {
                let Some(id) = &identity else { return };
                if invoke.lock().map(|b| *b == InvokeMode::Silent).unwrap_or(false) {
                    continue;
                }
                if scripted(&script, ScriptAt::Abort, binding.as_ref(), Some(&f), &mut w) {
                    continue;
                }
                let typed_aborted = binding
                    .as_ref()
                    .zip(typed.as_ref())
                    .and_then(|(b, t)| compose::aborted(&b.identity(), t.request_id()?, t.target_request_id()?).ok());
                let a = match typed_aborted {
                    Some(t) => compose::to_wire(&t),
                    None => {
                        let mut a = id.clone();
                        a["kind"] = json!("aborted");
                        a["requestId"] = f["requestId"].clone();
                        a["targetRequestId"] = f["targetRequestId"].clone();
                        a["aborted"] = json!(true);
                        a
                    }
                };
                let imode = invoke.lock().map(|b| *b).unwrap_or(InvokeMode::Normal);
                let late = |h: &Value| {
                    let mut r = id.clone();
                    r["kind"] = json!("result");
                    for k in ["requestId", "idempotencyKey", "operation"] {
                        r[k] = h[k].clone();
                    }
                    r["ok"] = json!(false);
                    r["error"] = AdapterError::new(AdapterCode::IoError, "late").body();
                    r
                };
                if matches!(imode, InvokeMode::ResultBeforeAborted | InvokeMode::WrongKeyBeforeAborted) {
                    // The late result of the aborted call, then the acknowledgement.
                    for h in held.iter().filter(|h| h["requestId"] == f["targetRequestId"]) {
                        let mut r = late(h);
                        if imode == InvokeMode::WrongKeyBeforeAborted {
                            r["idempotencyKey"] = json!("tool-not-the-aborted-call");
                        }
                        let _ = send(&mut w, &r);
                    }
                    held.retain(|h| h["requestId"] != f["targetRequestId"]);
                    let _ = send(&mut w, &a);
                    continue;
                }
                let _ = send(&mut w, &a);
                if !held.is_empty() {
                    for h in std::mem::take(&mut held) {
                        let _ = send(&mut w, &late(&h));
                    }
                }
            }
            Some("revoke") => {
                if revoke_silent.load(Ordering::SeqCst) {
                    // Neither `revoked` nor a close: only the daemon can end this connection.
                    // Bytes keep coming (an unfinished line of spaces) until a write fails.
                    match w.try_clone() {
                        Ok(mut drip) => {
                            let (log, on) = (log.clone(), revoke_silent.clone());
                            std::thread::spawn(move || {
                                let t = std::time::Instant::now();
                                while t.elapsed() < REVOKE_DRIP_FOR && on.load(Ordering::SeqCst) {
                                    std::thread::sleep(REVOKE_DRIP_EVERY);
                                    if drip.write_all(b" ").is_err() {
                                        if let Ok(mut l) = log.lock() {
                                            l.refused.push((n, std::time::Instant::now()));
                                        }
                                        break;
                                    }
                                }
                            });
                        }
                        Err(_) => {
                            if let Ok(mut l) = log.lock() {
                                l.drip_unavailable.push(n);
                            }
                        }
                    }
                    continue;
                }
                if let Some(id) = &identity {
                    let typed_revoked = binding.as_ref().and_then(|b| compose::revoked(&b.identity()).ok());
                    let r = match typed_revoked {
                        Some(t) => compose::to_wire(&t),
                        None => {
                            let mut r = id.clone();
                            r["kind"] = json!("revoked");
                            r
                        }
                    };
                    let _ = send(&mut w, &r);
                }
                return;
            }
            _ => return,
        }
    }
    if !probe_stopped {
        ended.seen.set(true);
    }
}

/// Records, when the probe's connection `n` is done with, that it is closed and whether the
/// daemon ended it.
struct DaemonEnded {
    n: usize,
    log: Arc<Mutex<ProbeLog>>,
    seen: std::cell::Cell<bool>,
}

impl Drop for DaemonEnded {
    fn drop(&mut self) {
        if let Ok(mut l) = self.log.lock() {
            let now = std::time::Instant::now();
            if self.seen.get() {
                l.ended.push((self.n, now));
            }
            l.closed.push((self.n, now));
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    #[cfg(target_os = "linux")]
    fn a_write_to_a_peer_that_shut_its_reading_half_fails_on_linux() {
        assert!(super::write_fails_after_peer_shut_read());
    }
}
