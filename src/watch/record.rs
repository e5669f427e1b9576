//! `--record FILE`: what the proxy saw, written as session vectors (the `vectors/sessions/`
//! format, `vectors/README.md`) that the runners replay with `--session FILE`.
//!
//! One session per connection. Adapter connections: each frame to the adapter becomes a `send`
//! on the runner's base of its kind (`bind`, `invoke`, `abort`, `revoke`) with only what
//! differs from that base set — the recorded binding's identity is the base's, so the replay
//! uses the runner's own binding; each frame to the daemon an `expect` (`bound`, `{"result":
//! {requestId, ok, error.code}}`, the kind), the adapter's close `"close"`. Daemon
//! connections: each command a `sendRaw` of its line, each response an `expect`
//! `{"response": {ok, error.code}}`, a close `"close"`. Placeholders replace what belongs to the
//! deployment: every handle (`<handle>`; in a daemon session, where the runner has no live
//! handle, a fixed well-formed stand-in), the host instance (`<hostInstanceId>`), the session
//! (`<sessionId>`), the adapter's identity, the open's `cwd` (`<cwd>`), and every other
//! absolute path (`<cwd>/recorded-path-N`). The file never holds a handle.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::rc::Rc;

use serde_json::{json, Map, Value};

use super::proxy::Way;
use super::report::Redactor;
use crate::contract::frame::Binding;
use crate::contract::secret::CapabilityHandle;
use crate::wire::decode_strict;

/// Steps kept per connection; a longer connection's session ends with a note.
pub const MAX_STEPS: usize = 10_000;
/// Bytes of recorded lines kept per connection.
pub const MAX_BYTES: usize = 32 << 20;
/// Sessions kept in one file.
pub const MAX_SESSIONS: usize = 1_000;

/// The stand-in for a handle in a daemon session (well formed: 43 base64url characters).
pub const STAND_IN_HANDLE: &str = "recordedByPiConformWatchNotTheRealHandle000";

/// The sessions recorded so far and the file they go to (rewritten whole, atomically, when a
/// connection ends and at exit).
#[derive(Clone)]
pub struct Recorder {
    path: PathBuf,
    sessions: Rc<RefCell<Vec<Value>>>,
    /// The connections still open: written as they stand when the watch ends.
    live: Rc<RefCell<BTreeMap<u64, Rc<dyn Live>>>>,
}

/// A connection's recording as it stands.
pub trait Live {
    /// The session vector so far (none while nothing was sent).
    fn snapshot(&self) -> Option<Value>;
}

impl Live for RefCell<AdapterRecording> {
    fn snapshot(&self) -> Option<Value> {
        self.borrow().session()
    }
}

impl Live for RefCell<DaemonRecording> {
    fn snapshot(&self) -> Option<Value> {
        self.borrow().session()
    }
}

impl Recorder {
    /// A recorder writing `path`.
    pub fn new(path: PathBuf) -> Self {
        Recorder { path, sessions: Rc::default(), live: Rc::default() }
    }

    /// Track connection `id`'s recording while it is open.
    pub fn track(&self, id: u64, rec: Rc<dyn Live>) {
        self.live.borrow_mut().insert(id, rec);
    }

    /// Connection `id` ended: keep its session and rewrite the file.
    pub fn finish(&self, id: u64) {
        let Some(rec) = self.live.borrow_mut().remove(&id) else { return };
        self.add(rec.snapshot());
    }

    fn add(&self, session: Option<Value>) {
        let Some(s) = session else { return };
        {
            let mut all = self.sessions.borrow_mut();
            if all.len() >= MAX_SESSIONS {
                return;
            }
            all.push(s);
        }
        let _ = self.write();
    }

    /// Write the file (`FILE.tmp`, then rename).
    pub fn write(&self) -> std::io::Result<()> {
        let mut all = self.sessions.borrow().clone();
        all.extend(self.live.borrow().values().filter_map(|l| l.snapshot()));
        let text = serde_json::to_string_pretty(&all).map_err(std::io::Error::other)?;
        let mut tmp = self.path.clone().into_os_string();
        tmp.push(".tmp");
        std::fs::write(&tmp, text + "\n")?;
        std::fs::rename(&tmp, &self.path)
    }

    /// Sessions recorded.
    pub fn len(&self) -> usize {
        self.sessions.borrow().len()
    }

    /// Whether none was recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Replacements of deployment values by placeholders, longest first.
#[derive(Default, Clone)]
struct Places {
    pairs: Vec<(String, String)>,
    paths: Vec<String>,
    /// Whether absolute paths are the deployment's (daemon commands) rather than a frame's
    /// own content (an adapter invoke's `/etc/passwd` attempt stays as it is).
    absolute: bool,
}

impl Places {
    fn add(&mut self, value: &str, placeholder: &str) {
        if !value.is_empty() && !self.pairs.iter().any(|(v, _)| v == value) {
            self.pairs.push((value.to_string(), placeholder.to_string()));
            self.pairs.sort_by_key(|p| std::cmp::Reverse(p.0.len()));
        }
    }

    fn text(&self, s: &str) -> String {
        let mut out = s.to_string();
        for (v, p) in &self.pairs {
            out = out.replace(v.as_str(), p);
        }
        out
    }

    /// `v` with placeholders; an absolute path not already replaced becomes
    /// `<cwd>/recorded-path-N`.
    fn value(&mut self, v: &Value) -> Value {
        match v {
            Value::String(s) => {
                let t = self.text(s);
                if self.absolute && t.starts_with('/') {
                    let n = match self.paths.iter().position(|p| p == &t) {
                        Some(n) => n,
                        None => {
                            self.paths.push(t.clone());
                            self.paths.len() - 1
                        }
                    };
                    return json!(format!("<cwd>/recorded-path-{}", n + 1));
                }
                json!(t)
            }
            Value::Array(a) => Value::Array(a.iter().map(|x| self.value(x)).collect()),
            Value::Object(m) => Value::Object(m.iter().map(|(k, x)| (self.text(k), self.value(x))).collect()),
            x => x.clone(),
        }
    }
}

struct Steps {
    up_closed: bool,
    steps: Vec<Value>,
    bytes: usize,
    truncated: bool,
    /// The token of every `expect`, in order.
    tokens: Vec<String>,
}

impl Steps {
    fn new() -> Self {
        Steps { up_closed: false, steps: Vec::new(), bytes: 0, truncated: false, tokens: Vec::new() }
    }

    fn push(&mut self, step: Value, token: Option<String>) {
        if self.truncated {
            return;
        }
        let n = serde_json::to_string(&step).map_or(usize::MAX, |s| s.len());
        if self.steps.len() >= MAX_STEPS || self.bytes.saturating_add(n) > MAX_BYTES {
            self.truncated = true;
            return;
        }
        self.bytes += n;
        self.steps.push(step);
        self.tokens.extend(token);
    }

    /// The session; its accepted outcome is the last `expect`'s token (the adapter runner's
    /// scoring) or, with `joined`, every token joined by `+` (the daemon runner's).
    fn session(&self, id: String, clause: &str, what: &str, places: &Places, joined: bool) -> Option<Value> {
        if self.steps.is_empty() {
            return None;
        }
        let mut steps = self.steps.clone();
        let mut tokens = self.tokens.clone();
        if tokens.is_empty() {
            steps.push(json!({"expect": "close"}));
            tokens.push("closed".into());
        }
        let last = if joined { tokens.join("+") } else { tokens.pop().unwrap_or_default() };
        let cut = if self.truncated { " (recording cut at its size bound)" } else { "" };
        let steps = scrub(Value::Array(steps), places);
        Some(json!({
            "id": id,
            "clause": clause,
            "level": "MUST",
            "tags": ["recorded"],
            "requirement": format!("The {what} answers this recorded exchange as it was answered when it was recorded{cut}."),
            "accepted": [last],
            "steps": steps,
        }))
    }
}

/// The last line of defence: every handle learned replaced wherever it still is (a key, a
/// value, inside a longer string), on the serialized session.
fn scrub(v: Value, places: &Places) -> Value {
    let text = serde_json::to_string(&v).unwrap_or_default();
    let mut out = text.clone();
    for (h, p) in places.pairs.iter().filter(|(_, p)| p == "<handle>" || p == STAND_IN_HANDLE) {
        out = out.replace(h.as_str(), p);
    }
    if out == text {
        return v;
    }
    serde_json::from_str(&out).unwrap_or_else(|_| json!([{"expect": "close"}]))
}

/// One adapter connection being recorded.
pub struct AdapterRecording {
    id: u64,
    steps: Steps,
    places: Places,
}

const IDENTITY: [&str; 6] =
    ["protocolVersion", "adapterId", "adapterVersion", "hostInstanceId", "sessionId", "generation"];

impl AdapterRecording {
    /// Recording of connection `id`.
    pub fn new(id: u64) -> Self {
        AdapterRecording { id, steps: Steps::new(), places: Places::default() }
    }

    /// A line the daemon sent, with the contract's verdict on it.
    pub fn sent(&mut self, line: &[u8], verdict: &str, binding: Option<&Binding>, redact: &Redactor) {
        for h in redact.handles() {
            self.places.add(h.expose(), "<handle>");
        }
        if let Some(b) = binding {
            self.places.add(b.handle().expose(), "<handle>");
            let id = b.identity();
            self.places.add(id.host_instance_id, "<hostInstanceId>");
            self.places.add(id.session_id, "<sessionId>");
            self.places.add(id.adapter_id, "<adapterId>");
            self.places.add(id.adapter_version, "<adapterVersion>");
        }
        let value = decode_strict(line).ok();
        let kind = value.as_ref().and_then(|v| v.get("kind")).and_then(Value::as_str);
        let step = match (&value, kind, binding) {
            (Some(Value::Object(m)), Some(k @ ("bind" | "invoke" | "abort" | "revoke")), Some(b)) => {
                let mut set = Map::new();
                let generation = b.identity().generation;
                for (key, v) in m {
                    if key == "kind" {
                        continue;
                    }
                    if IDENTITY.contains(&key.as_str()) {
                        let base = b.bind_frame().get(key).cloned();
                        if base.as_ref() == Some(v) {
                            continue;
                        }
                        if key == "generation" && v.as_u64() == generation.checked_add(1) {
                            set.insert(key.clone(), json!("<generation+1>"));
                            continue;
                        }
                    }
                    if k == "bind" && matches!(key.as_str(), "capabilityHandle" | "operations" | "limits") {
                        let base = b.bind_frame().get(key).cloned();
                        if base.as_ref() == Some(v) {
                            continue;
                        }
                    }
                    if key == "capabilityHandle" {
                        let h = v.as_str().map(|s| CapabilityHandle::new(s.to_string()));
                        let same = h.as_ref() == Some(b.handle());
                        set.insert(key.clone(), json!(if same { "<handle>" } else { "<other-handle>" }));
                        continue;
                    }
                    set.insert(self.places.text(key), self.places.value(v));
                }
                json!({"send": {"base": k, "set": set}, "contract": verdict})
            }
            _ => {
                // A line no base can build (garbage, a bind the contract refused, an unknown
                // kind): raw, every handle seen replaced.
                let text = String::from_utf8_lossy(line);
                let mut t = self.places.text(&redact_handles(&text, redact));
                if t.contains("<redacted>") {
                    t = t.replace("<redacted>", "<other-handle>");
                }
                json!({"sendRaw": t})
            }
        };
        self.steps.push(step, None);
    }

    /// A line the adapter sent.
    pub fn received(&mut self, line: &[u8]) {
        let v = decode_strict(line).ok();
        let kind = v.as_ref().and_then(|v| v.get("kind")).and_then(Value::as_str);
        let (step, token) = match (kind, &v) {
            (Some("result"), Some(v)) => {
                let ok = v.get("ok").and_then(Value::as_bool);
                let mut p = Map::new();
                if let Some(r) = v.get("requestId") {
                    p.insert("requestId".into(), self.places.value(r));
                }
                if let Some(ok) = ok {
                    p.insert("ok".into(), json!(ok));
                }
                let code = v.pointer("/error/code").and_then(Value::as_str);
                if let (Some(false), Some(c)) = (ok, code) {
                    p.insert("error".into(), json!({"code": c}));
                }
                let token = match (ok, code) {
                    (Some(true), _) => "result:ok".to_string(),
                    (_, c) => format!("error:{}", c.unwrap_or("?")),
                };
                (json!({"expect": {"result": p}}), token)
            }
            (Some(k), _) => (json!({"expect": k}), k.to_string()),
            (None, Some(_)) => (json!({"expect": "frame"}), "frame".into()),
            (None, None) => (json!({"expect": "garbage"}), "garbage".into()),
        };
        self.steps.push(step, Some(token));
    }

    /// A line over its limit: replayed as the same number of spaces is not possible within the
    /// bound, so the session ends its recording here.
    pub fn oversize(&mut self, _way: Way) {
        self.steps.truncated = true;
    }

    /// A side closed.
    pub fn closed(&mut self, way: Way) {
        // The upstream's close is its own decision only while the other side was still open
        // (after that it only follows the end it was passed).
        match way {
            Way::Up => self.steps.up_closed = true,
            Way::Down if !self.steps.up_closed => self.steps.push(json!({"expect": "close"}), Some("closed".into())),
            Way::Down => {}
        }
    }

    /// The session vector (none for a connection on which nothing was sent).
    pub fn session(&self) -> Option<Value> {
        self.steps.session(format!("adapter.recorded.conn-{}", self.id), "PC-4.3", "adapter", &self.places, false)
    }
}

fn redact_handles(text: &str, redact: &Redactor) -> String {
    // The redactor replaces learned handles and every capabilityHandle member's value.
    let r = redact.clone();
    let mut out = r.text(text);
    if out.contains("\"capabilityHandle\"") {
        out = super::report::redact_members(&out);
    }
    out
}

/// One daemon connection being recorded.
pub struct DaemonRecording {
    id: u64,
    steps: Steps,
    places: Places,
    session_seen: bool,
}

impl DaemonRecording {
    /// Recording of connection `id`.
    pub fn new(id: u64) -> Self {
        DaemonRecording {
            id,
            steps: Steps::new(),
            places: Places { absolute: true, ..Places::default() },
            session_seen: false,
        }
    }

    /// Learn the daemon's host instance (from its handshake).
    pub fn host(&mut self, host: &str) {
        self.places.add(host, "<hostInstanceId>");
    }

    /// A command line the client sent, with the contract's verdict on it.
    pub fn sent(&mut self, line: &[u8], verdict: &str, redact: &Redactor) {
        for h in redact.handles() {
            self.places.add(h.expose(), STAND_IN_HANDLE);
        }
        let value = decode_strict(line).ok();
        if let Some(v) = &value {
            if !self.session_seen {
                if let Some(s) = v.get("sessionId").and_then(Value::as_str) {
                    self.places.add(s, "<sessionId>");
                    self.session_seen = true;
                }
            }
            if let Some(cwd) = v.pointer("/payload/cwd").and_then(Value::as_str) {
                self.places.add(cwd, "<cwd>");
            }
        }
        let text = match value {
            Some(mut v) => {
                stand_in_handles(&mut v);
                let v = self.places.value(&v);
                serde_json::to_string(&v).unwrap_or_default()
            }
            None => {
                let t = redact_handles(&String::from_utf8_lossy(line), redact);
                self.places.text(&t).replace("<redacted>", STAND_IN_HANDLE)
            }
        };
        self.steps.push(json!({"sendRaw": text, "contract": verdict}), None);
    }

    /// A line the daemon sent (events are not expectations: the runner skips them).
    pub fn received(&mut self, line: &[u8]) {
        let Ok(v) = decode_strict(line) else { return };
        if v.get("kind").and_then(Value::as_str) != Some("response") {
            return;
        }
        let ok = v.get("ok").and_then(Value::as_bool);
        let code = v.pointer("/error/code").and_then(Value::as_str);
        let mut p = Map::new();
        if let Some(ok) = ok {
            p.insert("ok".into(), json!(ok));
        }
        if let (Some(false), Some(c)) = (ok, code) {
            p.insert("error".into(), json!({"code": c}));
        }
        let token = match (ok, code) {
            (Some(true), _) => "ok".to_string(),
            (_, c) => format!("error:{}", c.unwrap_or("?")),
        };
        self.steps.push(json!({"expect": {"response": p}}), Some(token));
    }

    /// A side closed.
    pub fn closed(&mut self, way: Way) {
        // The upstream's close is its own decision only while the other side was still open
        // (after that it only follows the end it was passed).
        match way {
            Way::Up => self.steps.up_closed = true,
            Way::Down if !self.steps.up_closed => self.steps.push(json!({"expect": "close"}), Some("closed".into())),
            Way::Down => {}
        }
    }

    /// The session vector.
    pub fn session(&self) -> Option<Value> {
        self.steps.session(format!("daemon.recorded.conn-{}", self.id), "PC-2.1", "daemon", &self.places, true)
    }
}

/// Replace every `capabilityHandle` string in `v` by the stand-in.
fn stand_in_handles(v: &mut Value) {
    match v {
        Value::Object(m) => {
            for (k, x) in m.iter_mut() {
                if k == "capabilityHandle" && x.is_string() {
                    *x = json!(STAND_IN_HANDLE);
                } else {
                    stand_in_handles(x);
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(stand_in_handles),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::frame::parse_bind_request;

    #[test]
    fn a_recording_holds_placeholders_never_the_deployment_values() {
        let p = format!("{}/vectors/bases/bind.json", env!("CARGO_MANIFEST_DIR"));
        let v: Value = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
        let line = serde_json::to_vec(&v).unwrap();
        let b = parse_bind_request(&line, usize::MAX).unwrap();
        let h = b.handle().expose().to_string();
        let mut red = Redactor::default();
        red.learn(b.handle().clone());
        let mut r = AdapterRecording::new(7);
        r.sent(&line, "valid", Some(&b), &red);
        r.received(br#"{"kind":"bound"}"#);
        // A frame with the handle as a key and inside a string, and another host.
        let mut abort = v.as_object().unwrap().clone();
        for k in ["capabilityHandle", "operations", "limits"] {
            abort.remove(k);
        }
        abort.insert("kind".into(), json!("abort"));
        abort.insert("requestId".into(), json!("a-1"));
        abort.insert("targetRequestId".into(), json!(format!("x{h}y")));
        abort.insert(h.clone(), json!(true));
        abort.insert("hostInstanceId".into(), json!("host-019f-other"));
        r.sent(&serde_json::to_vec(&abort).unwrap(), "adapter_protocol_invalid", Some(&b), &red);
        r.sent(
            format!("garbage \"capabilityHandle\":\"{h}\" and {h}").as_bytes(),
            "adapter_protocol_invalid",
            Some(&b),
            &red,
        );
        r.received(br#"{"kind":"result","requestId":"a-1","ok":false,"error":{"code":"not_found"}}"#);
        r.closed(Way::Down);
        let s = r.session().unwrap();
        let text = serde_json::to_string(&s).unwrap();
        assert!(!text.contains(&h), "{text}");
        assert!(!text.contains("host-019f") && !text.contains("agent-a"), "{text}");
        assert_eq!(s["id"], "adapter.recorded.conn-7");
        assert_eq!(s["steps"][0], json!({"send": {"base": "bind", "set": {}}, "contract": "valid"}));
        assert_eq!(s["steps"][2]["send"]["set"]["hostInstanceId"], "<hostInstanceId>-other");
        assert_eq!(s["steps"][2]["send"]["set"]["targetRequestId"], "x<handle>y");
        assert_eq!(s["steps"][2]["send"]["set"]["<handle>"], true);
        assert!(s["steps"][3]["sendRaw"].as_str().unwrap().contains("<other-handle>"), "{text}");
        assert_eq!(
            s["steps"][4],
            json!({"expect": {"result": {"requestId": "a-1", "ok": false, "error": {"code": "not_found"}}}})
        );
        // The adapter closed on its own: the last expectation, and the accepted outcome.
        assert_eq!(s["accepted"], json!(["closed"]));
    }

    #[test]
    fn a_close_that_only_follows_the_other_side_is_not_recorded() {
        let mut r = AdapterRecording::new(1);
        r.sent(b"x", "invalid_json", None, &Redactor::default());
        r.received(br#"{"kind":"revoked"}"#);
        r.closed(Way::Up);
        r.closed(Way::Down);
        let s = r.session().unwrap();
        assert_eq!(s["steps"].as_array().unwrap().len(), 2, "{s}");
        assert_eq!(s["accepted"], json!(["revoked"]), "{s}");
    }
}
