//! The adapter suite: the runner plays the daemon side against an adapter socket and judges
//! it clause by clause (SPEC §4.5, §5, §7).

pub mod cases;
pub mod conn;
pub mod edges;
pub mod fixture;
pub mod judge;
pub mod launch;
pub mod preflight;
pub mod provoke;
pub mod replay;
pub mod req;
pub mod script;

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Duration;

use serde_json::{json, Value};

use self::conn::{Conn, Recv};
use self::fixture::Fixture;
use self::judge::FrameJudge;
use self::req::Call;
use super::case::{CaseMeta, Outcome, WireLine};
use crate::contract::compose;
use crate::contract::descriptor::admit_descriptor;
use crate::contract::frame::Binding;
use crate::contract::Descriptor;

/// The adapter case catalogue (`conformance/adapter-cases.json`), built in.
pub const CATALOGUE: &str = include_str!("../../../conformance/adapter-cases.json");

/// Parse the built-in catalogue: the cases written in Rust, then the session vectors
/// ([`script`], `vectors/sessions/adapter.json`).
pub fn catalogue() -> Vec<CaseMeta> {
    let mut cat: Vec<CaseMeta> = serde_json::from_str(CATALOGUE).expect("the built-in adapter catalogue is valid");
    cat.extend(script::catalogue());
    cat
}

/// The catalogue of an adapter run: the built-in cases, then one `vector:<id>` case per golden
/// `to-adapter` frame vector and path vector of `dir` ([`replay`]). The vectors are not loaded
/// (and no vector case is listed) when `dir` cannot be read; the second value says why.
pub fn catalogue_with_vectors(dir: &Path) -> (Vec<CaseMeta>, Option<String>) {
    let mut cat = catalogue();
    match crate::vectors::VectorSet::load(dir) {
        Ok(set) => {
            cat.extend(replay::catalogue(&set));
            (cat, None)
        }
        Err(e) => (cat, Some(format!("no vector is replayed: {e}"))),
    }
}

/// What the runner is pointed at.
#[derive(Clone, Debug)]
pub struct Target {
    /// The adapter's socket.
    pub socket: PathBuf,
    /// The descriptor a daemon would receive for it.
    pub descriptor: Value,
    /// The admitted descriptor.
    pub admitted: Descriptor,
    /// The grant's root (fixtures go here).
    pub root: PathBuf,
    /// A directory beside the root that nothing may touch.
    pub sentinel: PathBuf,
    /// One step's time budget (already scaled).
    pub step: Duration,
    /// The golden vectors replayed as `vector:` cases.
    pub vectors: PathBuf,
    /// Whether the runner minted the grant itself (`--command`, selftest): it then knows the
    /// grant's operations and ceilings, and the cases whose catalogue entry has
    /// `levelWithGrant` are graded at that level ([`CaseMeta::graded`], issue 24 item 6).
    /// Against a plain socket the grant is taken to be the descriptor.
    pub grant_known: bool,
    /// A second, narrower grant the runner minted (every operation but one) beside the
    /// descriptor's, when it minted them ([`launch::narrow_grant`]).
    pub narrow: Option<Descriptor>,
    /// A third grant the runner minted, whose identity is non-ASCII enough that its `bound`
    /// does not fit the smallest `maxResponseBytes` ([`launch::fit_grant`]): the fit check of
    /// a `bind` (PC-3.3) can be met and missed by one byte only with it.
    pub fit: Option<Descriptor>,
    /// A fourth grant, whose handle is not of the minted length: written into the grants file
    /// by hand, as an operator may (selftest only; `adapter.secret.long-handle-windowed-read`).
    pub long: Option<Descriptor>,
    /// Session vectors loaded from files (`--session`), run as cases beside the built-in ones.
    pub sessions: Vec<script::Session>,
}

impl Target {
    /// Build a target, admitting the descriptor (checks 1–7, 9–11).
    pub fn new(
        socket: &Path,
        descriptor: Value,
        root: &Path,
        sentinel: &Path,
        time_scale: f64,
    ) -> Result<Target, String> {
        let admitted =
            admit_descriptor(&descriptor, None).map_err(|e| format!("the descriptor is refused: {}", e.describe()))?;
        let step = Duration::from_secs_f64((2.0 * time_scale).max(0.05));
        Ok(Target {
            socket: socket.to_path_buf(),
            descriptor,
            admitted,
            root: root.to_path_buf(),
            sentinel: sentinel.to_path_buf(),
            step,
            vectors: crate::vectors::default_dir(),
            grant_known: false,
            narrow: None,
            fit: None,
            long: None,
            sessions: Vec::new(),
        })
    }

    /// This target with the grants the runner minted: the descriptor's, `narrow` (the second
    /// grant's descriptor) and `fit` (the third's, [`launch::fit_grant`]). The grant is then
    /// known (MUST levels of `levelWithGrant`).
    pub fn with_minted_grant(mut self, narrow: Value, fit: Value) -> Result<Target, String> {
        let admitted =
            admit_descriptor(&narrow, None).map_err(|e| format!("the second grant is refused: {}", e.describe()))?;
        let fit = admit_descriptor(&fit, None).map_err(|e| format!("the third grant is refused: {}", e.describe()))?;
        self.narrow = Some(admitted);
        self.fit = Some(fit);
        self.grant_known = true;
        Ok(self)
    }

    /// This target with a grant whose handle is not of the minted length (selftest only: the
    /// runner writes it into the grants file by hand), for `adapter.secret.long-handle-windowed-read`.
    pub fn with_long_handle_grant(mut self, long: Value) -> Result<Target, String> {
        let admitted =
            admit_descriptor(&long, None).map_err(|e| format!("the long-handle grant is refused: {}", e.describe()))?;
        self.long = Some(admitted);
        Ok(self)
    }

    /// Every handle the runner holds for this target (for the secret scan only).
    pub fn handles(&self) -> Vec<&str> {
        let mut h = vec![self.handle()];
        h.extend(self.narrow.as_ref().map(|n| n.handle().expose()));
        h.extend(self.fit.as_ref().map(|n| n.handle().expose()));
        h.extend(self.long.as_ref().map(|n| n.handle().expose()));
        h
    }

    /// The handle (for binding and for the secret scan only).
    pub fn handle(&self) -> &str {
        self.admitted.handle().expose()
    }
}

/// Every adapter case implemented in Rust, by id: the cases of [`cases`] and of [`edges`].
/// The engine judges each one's outcome with the frames it saw ([`Ctx::judged`]).
pub fn registry() -> Vec<(&'static str, cases::CaseFn)> {
    cases::registry().into_iter().chain(edges::registry()).collect()
}

/// Everything one case may use.
pub struct Ctx<'a> {
    /// The target.
    pub target: &'a Target,
    /// The fixture laid for this case.
    pub fixture: &'a Fixture,
    /// Wire transcript of this case.
    pub transcript: Rc<RefCell<Vec<WireLine>>>,
    /// Every byte received in this case.
    pub received: Rc<RefCell<Vec<u8>>>,
    /// Paths (relative to the root) this case may change.
    pub allowed: Vec<String>,
    /// What the contract refused in the frames the adapter sent (each with its clause).
    pub violations: Rc<RefCell<Vec<String>>>,
    /// How long the engine waits after the case before the side-effect oracle looks (time for
    /// a misbehaving adapter to finish what it may still do).
    pub settle: Duration,
    seq: u64,
    /// Unique to this case run: appended to every well-formed idempotency key it sends.
    nonce: String,
}

/// Case runs of this process so far (part of each case's key nonce).
static CASE_RUNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A nonce no other case run (of this process or of another run within the keys' TTL) uses:
/// the time, the process id and a per-process counter, in hex.
fn case_nonce() -> String {
    let n = CASE_RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    format!("{:x}{:x}", (t as u64) ^ (u64::from(std::process::id()) << 40), n)
}

impl<'a> Ctx<'a> {
    /// A fresh context.
    pub fn new(target: &'a Target, fixture: &'a Fixture) -> Self {
        Ctx {
            target,
            fixture,
            transcript: Rc::default(),
            received: Rc::default(),
            allowed: Vec::new(),
            violations: Rc::default(),
            settle: Duration::from_millis(20),
            seq: 0,
            nonce: case_nonce(),
        }
    }

    /// One step's budget.
    pub fn step(&self) -> Duration {
        self.target.step
    }

    /// Declare that this case may change `paths` (relative to the root).
    pub fn allow(&mut self, paths: &[&str]) {
        self.allowed.extend(paths.iter().map(|p| p.to_string()));
    }

    /// A new connection; every frame on it is judged by the contract ([`FrameJudge`]).
    pub fn connect(&mut self) -> Result<Conn, Outcome> {
        let admitted = self.target.admitted.clone();
        self.connect_as(&admitted)
    }

    /// Connect, judging the frames against the binding of `descriptor` (one of the target's
    /// grants); every handle the runner holds is redacted from the transcript.
    pub fn connect_as(&mut self, descriptor: &Descriptor) -> Result<Conn, Outcome> {
        let judge = FrameJudge::new(Binding::from(descriptor), self.violations.clone());
        Conn::connect(
            &self.target.socket,
            descriptor.handle().expose(),
            self.step(),
            self.transcript.clone(),
            self.received.clone(),
        )
        .map(|c| {
            let others = self.target.handles().into_iter().filter(|h| *h != descriptor.handle().expose());
            others.fold(c, |c, h| c.also_redacting(h)).judged_by(judge)
        })
        .map_err(|e| Outcome::Error(format!("cannot connect to the adapter: {e}")))
    }

    /// The case's outcome with every contract violation the adapter's frames showed added:
    /// a violation fails the case whatever it was testing (the engine judges every case's
    /// outcome so, also a replayed vector's or a script's; judging twice adds nothing).
    /// A note of the judge about itself ([`judge::HARNESS`]) makes the case inconclusive.
    pub fn judged(&self, outcome: Outcome) -> Outcome {
        with_violations(outcome, self.violations.borrow().clone())
    }

    /// A frame of `kind` with the binding's identity and `extra` members, raw: for a frame a
    /// case breaks on purpose (a well-formed one comes from [`Ctx::invoke`], [`Ctx::abort`],
    /// [`Ctx::revoke`]).
    pub fn frame(&self, kind: &str, extra: Value) -> Value {
        let mut f = self.target.admitted.identity().frame(kind, []);
        if let (Value::Object(m), Value::Object(e)) = (&mut f, extra) {
            m.extend(e);
        }
        f
    }

    /// An `abort` of `target`, built from the generated type.
    pub fn abort(&self, request_id: &str, target: &str) -> Value {
        match compose::abort(&self.target.admitted.identity(), request_id, target) {
            Ok(f) => compose::to_wire(&f),
            Err(_) => self.frame("abort", json!({"requestId": request_id, "targetRequestId": target})),
        }
    }

    /// The `revoke` of the binding, built from the generated type.
    pub fn revoke(&self) -> Value {
        match compose::revoke(&self.target.admitted.identity()) {
            Ok(f) => compose::to_wire(&f),
            Err(_) => self.frame("revoke", json!({})),
        }
    }

    /// The normalized bind of the descriptor.
    pub fn bind_frame(&self) -> Value {
        self.target.admitted.bind_frame()
    }

    /// Connect and bind with `bind`; the failing outcome if no `bound` comes back (the
    /// connection's judge checks that it echoes `bind` exactly).
    pub fn bind_with(&mut self, bind: &Value) -> Result<Conn, Outcome> {
        let mut c = self.connect()?;
        c.send(bind);
        let r = c.recv();
        match r.frame() {
            Some(v) if v.kind() == Some("bound") => Ok(c),
            _ => Err(Outcome::with(format!("bind-{}", r.describe()), vec!["no bound for a valid bind".into()])),
        }
    }

    /// Connect and bind with the descriptor.
    pub fn bound(&mut self) -> Result<Conn, Outcome> {
        let b = self.bind_frame();
        self.bind_with(&b)
    }

    /// Fresh ids for an invoke.
    pub fn ids(&mut self) -> (String, String) {
        self.seq += 1;
        (format!("req-{}", self.seq), format!("key-{}", self.seq))
    }

    /// An invoke frame of `call` ([`req`]): built from the generated types when its payload
    /// is typed and the ids fit, raw otherwise (a payload or an id a case broke on purpose).
    pub fn invoke(&self, id: &str, key: &str, call: Call) -> Value {
        req::invoke_frame(&self.target.admitted.identity(), id, &self.unique_key(key), &call)
    }

    /// `key` made unique to this case run (`key.NONCE`) when it is a well-formed key short
    /// enough to stay one (at most 128 bytes); any other key is sent as the case wrote it (a
    /// case that breaks a key on purpose, or sits at its length limit, keeps its bytes).
    /// Why: SPEC lets an adapter remember keys per grant for idempotencyTtlMs, across
    /// connections; cases reusing `key-1` with other payloads would then draw a false
    /// idempotency_conflict. Within one case a key still means one key.
    pub fn unique_key(&self, key: &str) -> String {
        if crate::contract::text::is_frame_id(key) && key.len() + 1 + self.nonce.len() <= 128 {
            format!("{key}.{}", self.nonce)
        } else {
            key.to_string()
        }
    }

    /// Send `call` on `conn` with fresh ids and wait for its result.
    pub fn call(&mut self, conn: &mut Conn, call: Call) -> Recv {
        let (id, key) = self.ids();
        let f = self.invoke(&id, &key, call);
        conn.send(&f);
        conn.recv_for(&id)
    }

    /// Bind, send `call` once, return the result.
    pub fn one(&mut self, call: Call) -> Result<Recv, Outcome> {
        let mut c = self.bound()?;
        Ok(self.call(&mut c, call))
    }
}

/// The token of a result: `result:ok`, `error:<code>`, `closed`, `timeout`, ….
pub fn token(r: &Recv) -> String {
    r.describe()
}

/// The `data` of a successful result.
pub fn data(r: &Recv) -> Option<&Value> {
    r.frame().filter(|v| v.ok() == Some(true)).map(|v| &v["data"])
}

/// `outcome` with the contract violations the adapter's frames showed: each fails the case,
/// except a harness note (the judge broke, not the peer), which makes it inconclusive.
fn with_violations(outcome: Outcome, violations: Vec<String>) -> Outcome {
    if let Some(h) = violations.iter().find(|v| v.starts_with(judge::HARNESS)) {
        return Outcome::Error(h.clone());
    }
    if violations.is_empty() {
        return outcome;
    }
    match outcome {
        Outcome::Observed { token, mut problems } => {
            // Judged once: a violation the outcome already carries is not added again.
            for v in violations {
                if !problems.contains(&v) {
                    problems.push(v);
                }
            }
            Outcome::Observed { token, problems }
        }
        Outcome::Skip(_) => Outcome::with("contract-violation", violations),
        o @ Outcome::Error(_) => o,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn observed(problems: &[&str]) -> Outcome {
        Outcome::Observed { token: "result:ok".into(), problems: problems.iter().map(|p| p.to_string()).collect() }
    }

    #[test]
    fn a_violation_fails_the_case_and_a_harness_note_makes_it_inconclusive() {
        let peer = "PC-4.2: the adapter sent a result frame the contract refuses".to_string();
        match with_violations(observed(&[]), vec![peer.clone()]) {
            Outcome::Observed { token, problems } => {
                assert_eq!((token.as_str(), problems), ("result:ok", vec![peer.clone()]))
            }
            o => panic!("a peer's violation must fail the case: {o:?}"),
        }
        let harness = format!("{}a frame the contract accepts does not decode", judge::HARNESS);
        match with_violations(observed(&[]), vec![peer.clone(), harness.clone()]) {
            Outcome::Error(why) => assert_eq!(why, harness, "the harness note is the reason"),
            o => panic!("a harness note must never fail the peer: {o:?}"),
        }
        assert!(matches!(with_violations(Outcome::Skip("n/a".into()), vec![]), Outcome::Skip(_)));
        match with_violations(Outcome::Skip("n/a".into()), vec![peer.clone()]) {
            Outcome::Observed { token, problems } => {
                assert_eq!((token.as_str(), problems), ("contract-violation", vec![peer]))
            }
            o => panic!("a skipped case with a violation fails: {o:?}"),
        }
    }

    #[test]
    fn an_outcome_judged_twice_lists_each_violation_once() {
        let peer = "PC-4.3: a frame before bound".to_string();
        let once = with_violations(observed(&[]), vec![peer.clone()]);
        match with_violations(once, vec![peer.clone()]) {
            Outcome::Observed { problems, .. } => assert_eq!(problems, vec![peer]),
            o => panic!("still a failure: {o:?}"),
        }
    }
}
