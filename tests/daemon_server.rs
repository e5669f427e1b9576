//! The reference daemon as a real process over real sockets, with the reference adapter as a
//! real process: envelope, handshake, open with binding, turns with tool calls, events,
//! retained policy, restart quarantine and reprovisioning, and secret hygiene.

mod support;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{bin, mint, Opts};

struct Daemon {
    _dir: tempfile::TempDir,
    socket: PathBuf,
    state: PathBuf,
    log: PathBuf,
    child: Option<Child>,
}

impl Daemon {
    fn start() -> Daemon {
        let dir = tempfile::Builder::new().prefix("pc-daemon").tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let socket = dir.path().join("d.sock");
        let state = dir.path().join("state");
        let log = dir.path().join("daemon.log");
        let mut d = Daemon { _dir: dir, socket, state, log, child: None };
        d.spawn();
        d
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log).unwrap();
        let child = Command::new(bin())
            .args(["serve-daemon", "--log-format", "json", "--socket"])
            .arg(&self.socket)
            .arg("--state-dir")
            .arg(&self.state)
            .env("PI_CONFORM_LOG", "debug")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
        let t = Instant::now();
        while UnixStream::connect(&self.socket).is_err() {
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "daemon did not start: {}",
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn client(&self) -> Client {
        let s = UnixStream::connect(&self.socket).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        Client { r: BufReader::new(s.try_clone().unwrap()), w: s, seen: Vec::new(), events: Vec::new() }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill9();
    }
}

struct Client {
    r: BufReader<UnixStream>,
    w: UnixStream,
    seen: Vec<u8>,
    events: Vec<Value>,
}

impl Client {
    fn send_raw(&mut self, b: &[u8]) {
        let _ = self.w.write_all(b);
    }
    fn send(&mut self, v: &Value) {
        let mut l = serde_json::to_vec(v).unwrap();
        l.push(b'\n');
        self.send_raw(&l);
    }
    fn line(&mut self) -> Option<Value> {
        let mut l = Vec::new();
        match self.r.read_until(b'\n', &mut l) {
            Ok(0) | Err(_) => None,
            Ok(_) => {
                self.seen.extend_from_slice(&l);
                Some(serde_json::from_slice(&l).expect("the daemon sent invalid JSON"))
            }
        }
    }
    /// The response to `rid`, keeping events aside.
    fn response(&mut self, rid: &str) -> Value {
        loop {
            let v = self.line().unwrap_or_else(|| panic!("closed before the response to {rid}"));
            if v["kind"] == "event" {
                self.events.push(v);
                continue;
            }
            if v["requestId"] == rid {
                return v;
            }
        }
    }
    fn call(&mut self, v: Value) -> Value {
        let rid = v["requestId"].as_str().unwrap().to_string();
        self.send(&v);
        self.response(&rid)
    }
    fn closed(&mut self) -> bool {
        self.w.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut l = Vec::new();
        matches!(self.r.read_until(b'\n', &mut l), Ok(0))
    }
}

fn cmd(version: &str, rid: &str, op: &str, extra: Value) -> Value {
    let mut v = json!({"protocolVersion": version, "requestId": rid, "operation": op, "payload": {}});
    if let Value::Object(m) = extra {
        for (k, x) in m {
            v[k] = x;
        }
    }
    v
}

fn host_id(c: &mut Client) -> String {
    let r = c.call(cmd("2.0", "hs", "handshake", json!({})));
    r["data"]["host"]["hostInstanceId"].as_str().unwrap().to_string()
}

/// A reference adapter process with a grant for (host, session, generation).
struct Adapter {
    a: support::Adapter,
}

fn adapter_for(host: &str, session: &str, generation: u64) -> Adapter {
    adapter_with(host, session, generation, Opts::default())
}

fn adapter_with(host: &str, session: &str, generation: u64, opts: Opts<'_>) -> Adapter {
    let limits = opts.limits;
    let mut a = support::Adapter::start(opts);
    // Re-mint for the daemon's identity (the default grant is for another host).
    let d = mint(&a.grants, &a.socket, &a.root, host, session, generation, &Opts { limits, ..Opts::default() });
    a.descriptor = d;
    // SIGHUP-free: restart the server so it loads the new grant.
    a.kill9();
    std::fs::remove_file(&a.socket).ok();
    a.spawn(0);
    Adapter { a }
}

fn open_v2(rid: &str, session: &str, generation: u64, cwd: &Path, descriptor: Option<&Value>) -> Value {
    let tools = match descriptor {
        Some(d) => json!({"mode": "host-adapter", "descriptor": d}),
        None => json!("none"),
    };
    json!({"protocolVersion": "2.0", "requestId": rid, "operation": "open", "sessionId": session, "generation": generation,
        "payload": {"cwd": cwd, "session": {"mode": "new"}, "resources": pi_conform::contract::resources_with_tools(tools.clone())}})
}

#[test]
fn handshake_advertises_versions_and_v2_capabilities() {
    let d = Daemon::start();
    let mut c = d.client();
    let r = c.call(cmd("2.7", "h1", "handshake", json!({})));
    assert_eq!(r["protocolVersion"], "2.7", "the exact accepted version is echoed");
    assert_eq!(r["ok"], true);
    assert_eq!(r["data"]["supportedVersions"], json!(["1.0", "2.0"]));
    assert_eq!(r["data"]["supportedProtocolVersions"], json!(["1.0", "2.0"]));
    assert_eq!(r["data"]["capabilities"]["hostToolAdapter"], true);
    assert_eq!(r["data"]["capabilities"]["hostToolOperationCount"], 6);
    assert!(r["data"]["host"]["recovery"]["quarantinedSessions"].is_array());
    pi_conform::contract::validate_handshake_data(&r["data"]).unwrap();
    let r = c.call(cmd("1.0", "h2", "handshake", json!({})));
    assert_eq!(r["protocolVersion"], "1.0");
    assert!(r["data"]["capabilities"].get("hostToolAdapter").is_none());
    // A handshake without payload is invalid_field and the connection stays open.
    let r = c.call(json!({"protocolVersion": "2.0", "requestId": "h3", "operation": "handshake"}));
    assert_eq!(r["error"]["code"], "invalid_field");
    assert_eq!(r["protocolVersion"], "2.0");
    let r = c.call(cmd("2.0", "h4", "handshake", json!({})));
    assert_eq!(r["ok"], true);
}

#[test]
fn envelope_errors_and_connection_behaviour() {
    let d = Daemon::start();
    let mut c = d.client();
    c.send_raw(b"[1,2]\n");
    let r = c.line().unwrap();
    assert_eq!(r["error"]["code"], "invalid_field");
    assert_eq!(r["protocolVersion"], "1.0");
    assert!(r["requestId"].as_str().unwrap().starts_with("invalid-"));
    let r = c.call(cmd("2.0", "u1", "explode", json!({})));
    assert_eq!(r["error"]["code"], "unknown_operation");
    assert_eq!(r["protocolVersion"], "2.0");
    c.send_raw(b"{\"a\":1,\"a\":2}\n");
    let r = c.line().unwrap();
    assert_eq!(r["error"]["code"], "invalid_json");
    assert!(c.closed(), "invalid JSON closes the connection");
    let mut c = d.client();
    let r = c.call(cmd("3.0", "x1", "handshake", json!({})));
    assert_eq!(r["error"]["code"], "incompatible_protocol");
    assert_eq!(r["error"]["details"]["received"], "3.0");
    assert!(c.closed(), "incompatible_protocol closes the connection");
    let mut c = d.client();
    let mut big = vec![b'x'; 1024 * 1024 + 10];
    big.push(b'\n');
    c.send_raw(&big);
    let r = c.line().unwrap();
    assert_eq!(r["error"]["code"], "line_too_large");
    assert!(c.closed());
}

#[test]
fn open_bind_wake_tools_and_events() {
    let d = Daemon::start();
    let mut c = d.client();
    let host = host_id(&mut c);
    let ad = adapter_for(&host, "agent-a", 2);
    std::fs::write(ad.a.root.join("hello.txt"), "hello world\n").unwrap();
    let r = c.call(open_v2("o1", "agent-a", 2, &ad.a.root, Some(&ad.a.descriptor)));
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["data"]["created"], true);
    let r = c.call(cmd("2.0", "a1", "attach", json!({"sessionId": "agent-a", "generation": 2})));
    assert_eq!(r["data"]["attached"], true);
    let prompt = "hi there\nTOOL fs_read {\"path\":\"hello.txt\"}\nTOOL fs_write {\"path\":\"out.txt\",\"content\":\"written by a turn\"}\nTOOL fs_read {\"path\":\"../escape\"}";
    let r = c.call(json!({"protocolVersion": "2.0", "requestId": "w1", "operation": "wake", "sessionId": "agent-a", "generation": 2,
        "idempotencyKey": "wake-1", "payload": {"prompt": prompt}}));
    assert_eq!(r["ok"], true, "{r}");
    let calls = r["data"]["result"]["toolCalls"].as_array().unwrap();
    assert_eq!(calls[0]["data"]["content"], "hello world\n");
    assert_eq!(calls[1]["ok"], true);
    assert_eq!(calls[2]["error"]["code"], "invalid_tool_adapter_path", "paths are checked before dispatch");
    assert_eq!(r["data"]["result"]["text"], "hi there");
    assert_eq!(std::fs::read_to_string(ad.a.root.join("out.txt")).unwrap(), "written by a turn");
    // Events: per-session sequence, the session's open version, in order.
    let names: Vec<&str> = c.events.iter().map(|e| e["event"].as_str().unwrap()).collect();
    assert_eq!(names.first(), Some(&"promptAccepted"), "{names:?}");
    assert!(
        names.contains(&"toolCallStart")
            && names.contains(&"toolCallEnd")
            && names.ends_with(&["agentEnd", "sessionIdle"]),
        "{names:?}"
    );
    let seqs: Vec<u64> = c.events.iter().map(|e| e["sequence"].as_u64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1) && seqs[0] >= 2, "{seqs:?}");
    assert!(c.events.iter().all(|e| e["protocolVersion"] == "2.0" && e["hostInstanceId"] == host.as_str()));
    // The same wake key and payload returns the journaled result; another payload conflicts.
    let again = c.call(json!({"protocolVersion": "2.0", "requestId": "w2", "operation": "wake", "sessionId": "agent-a", "generation": 2,
        "idempotencyKey": "wake-1", "payload": {"prompt": prompt}}));
    assert_eq!(again["data"]["result"], r["data"]["result"]);
    let conflict = c.call(json!({"protocolVersion": "2.0", "requestId": "w3", "operation": "wake", "sessionId": "agent-a", "generation": 2,
        "idempotencyKey": "wake-1", "payload": {"prompt": "other"}}));
    assert_eq!(conflict["error"]["code"], "idempotency_conflict");
    // Re-open at the same generation and policy: created:false, no rebind.
    let r = c.call(open_v2("o2", "agent-a", 2, &ad.a.root, Some(&ad.a.descriptor)));
    assert_eq!(r["data"]["created"], false, "{r}");
    let r = c.call(open_v2("o3", "agent-a", 2, &ad.a.root, None));
    assert_eq!(r["error"]["code"], "tool_adapter_reprovision_required");
    assert_eq!(r["error"]["retryable"], true);
    let r = c.call(open_v2("o4", "agent-a", 1, &ad.a.root, None));
    assert_eq!(r["error"]["code"], "stale_generation");
    assert_eq!(r["error"]["details"]["currentGeneration"], 2);
    let mut other = ad.a.descriptor.clone();
    other["limits"]["maxQueuedRequests"] = json!(15);
    let r = c.call(open_v2("o5", "agent-a", 2, &ad.a.root, Some(&other)));
    assert_eq!(r["error"]["code"], "session_policy_conflict");
    let h = ad.a.handle();
    assert!(!String::from_utf8_lossy(&c.seen).contains(&h), "the handle reached a client");
    assert!(!std::fs::read_to_string(&d.log).unwrap_or_default().contains(&h), "the handle reached the daemon log");
    for e in walk(&d.state) {
        assert!(!std::fs::read_to_string(&e).unwrap_or_default().contains(&h), "the handle reached {}", e.display());
    }
}

#[test]
fn a_turn_runs_consecutive_reads_concurrently_and_writes_alone() {
    let d = Daemon::start();
    let mut c = d.client();
    let host = host_id(&mut c);
    let prompt = "TOOL fs_read {\"path\":\"a.txt\"}\nTOOL fs_stat {\"path\":\"a.txt\"}\nTOOL fs_list {\"path\":\".\"}\nTOOL fs_write {\"path\":\"b.txt\",\"content\":\"new\"}\nTOOL fs_read {\"path\":\"b.txt\"}";
    let wake = |rid: &str, session: &str| {
        json!({"protocolVersion": "2.0", "requestId": rid, "operation": "wake", "sessionId": session, "generation": 1,
            "idempotencyKey": rid, "payload": {"prompt": prompt}})
    };
    let codes = |r: &Value| -> Vec<String> {
        r["data"]["result"]["toolCalls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| if t["ok"] == true { "ok".into() } else { t["error"]["code"].as_str().unwrap().to_string() })
            .collect()
    };
    // One call at a time and no queue (SPEC §4.4): the three reads are started together, so
    // the first is sent and the other two are refused by the daemon; the write waits for the
    // reads and runs alone, and the read after it sees what it wrote.
    let tight = Opts { limits: [1_048_576, 1_048_576, 1, 0, 10_000, 256, 3_600_000], ..Opts::default() };
    let ad = adapter_with(&host, "agent-q", 1, tight);
    std::fs::write(ad.a.root.join("a.txt"), "old").unwrap();
    let r = c.call(open_v2("o1", "agent-q", 1, &ad.a.root, Some(&ad.a.descriptor)));
    assert_eq!(r["ok"], true, "{r}");
    let r = c.call(wake("w1", "agent-q"));
    assert_eq!(r["ok"], true, "{r}");
    let q = "adapter_queue_capacity";
    assert_eq!(codes(&r), ["ok", q, q, "ok", "ok"], "{r}");
    let calls = &r["data"]["result"]["toolCalls"];
    assert_eq!(calls[0]["data"]["content"], "old");
    assert_eq!(calls[4]["data"]["content"], "new", "the read after the write runs after it");
    let refused = &calls[1]["error"];
    assert_eq!(refused["retryable"], true);
    assert_eq!(refused["details"]["retryAfterMs"], 500, "max(25, min(1000, floor(10000 / 20)))");
    assert!(refused["details"].get("indeterminate").is_none(), "never sent, so not indeterminate");
    for (n, t) in calls.as_array().unwrap().iter().enumerate() {
        assert!(t["toolCallId"].as_str().unwrap().ends_with(&format!("-{n}")), "prompt order: {t}");
    }
    let s = c.call(cmd("2.0", "s1", "status", json!({"sessionId": "agent-q", "generation": 1})));
    let tq = &s["data"]["session"]["toolQueue"];
    assert_eq!(tq["counters"]["accepted"], 3, "{tq}");
    assert_eq!(tq["counters"]["rejected"], 2, "{tq}");
    assert_eq!(tq["highWater"]["active"], 1, "{tq}");
    assert_eq!(tq["lastRefusalReason"], q);
    // With room for them (4 concurrent + 16 queued) the three reads are in flight together.
    let ad = adapter_for(&host, "agent-r", 1);
    std::fs::write(ad.a.root.join("a.txt"), "old").unwrap();
    let r = c.call(open_v2("o2", "agent-r", 1, &ad.a.root, Some(&ad.a.descriptor)));
    assert_eq!(r["ok"], true, "{r}");
    let r = c.call(wake("w2", "agent-r"));
    assert_eq!(codes(&r), ["ok", "ok", "ok", "ok", "ok"], "{r}");
    assert_eq!(r["data"]["result"]["toolCalls"][4]["data"]["content"], "new");
    let s = c.call(cmd("2.0", "s2", "status", json!({"sessionId": "agent-r", "generation": 1})));
    let tq = &s["data"]["session"]["toolQueue"];
    assert_eq!((tq["counters"]["accepted"].as_u64(), tq["highWater"]["active"].as_u64()), (Some(5), Some(3)), "{tq}");
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
    }
    out
}

#[test]
fn descriptor_rejections_come_before_any_adapter_connection() {
    let d = Daemon::start();
    let mut c = d.client();
    let host = host_id(&mut c);
    let probe_dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(probe_dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let probe = probe_dir.path().join("probe.sock");
    let l = UnixListener::bind(&probe).unwrap();
    std::fs::set_permissions(&probe, std::fs::Permissions::from_mode(0o600)).unwrap();
    l.set_nonblocking(true).unwrap();
    let base: Value = serde_json::from_str(include_str!("../vectors/bases/descriptor.json")).unwrap();
    let mut dsc = base.clone();
    dsc["endpoint"]["path"] = json!(probe);
    dsc["binding"]["hostInstanceId"] = json!(host);
    dsc["binding"]["sessionId"] = json!("s-1");
    dsc["binding"]["generation"] = json!(1);
    for (mutate, code) in [
        (json!({"binding": {"hostInstanceId": "host-other"}}), "tool_adapter_binding_mismatch"),
        (json!({"limits": {"maxRequestBytes": 2047}}), "invalid_tool_adapter_limit"),
        (json!({"operations": ["fs.read", "fs.read"]}), "unsupported_tool_operation"),
        (json!({"token": "x"}), "invalid_tool_adapter_descriptor"),
    ] {
        let mut x = dsc.clone();
        merge(&mut x, &mutate);
        let r = c.call(open_v2("o", "s-1", 1, probe_dir.path(), Some(&x)));
        assert_eq!(r["error"]["code"], code, "{r}");
    }
    assert!(l.accept().is_err(), "no connection may reach the adapter before admission");
    // A bound that violates the echo fails the open with the adapter_* cause, and a no-tools
    // reopen is then refused.
    let fake = std::thread::spawn(move || {
        l.set_nonblocking(false).unwrap();
        let (s, _) = l.accept().unwrap();
        let mut w = s.try_clone().unwrap();
        let mut r = BufReader::new(s);
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        let mut b: Value = serde_json::from_str(&line).unwrap();
        b.as_object_mut().unwrap().remove("capabilityHandle");
        b["kind"] = json!("bound");
        b["limits"]["maxQueuedRequests"] = json!(1);
        writeln!(w, "{b}").unwrap();
        std::thread::sleep(Duration::from_millis(500));
    });
    let r = c.call(open_v2(
        "o-bind",
        "s-2",
        1,
        probe_dir.path(),
        Some(&{
            let mut x = dsc.clone();
            x["binding"]["sessionId"] = json!("s-2");
            x["binding"]["generation"] = json!(1);
            x
        }),
    ));
    fake.join().unwrap();
    assert_eq!(r["error"]["code"], "open_failed", "{r}");
    assert_eq!(r["error"]["details"]["cause"]["code"], "adapter_protocol_invalid");
    let r = c.call(open_v2("o-none", "s-2", 1, probe_dir.path(), None));
    assert_eq!(r["error"]["code"], "tool_adapter_reprovision_required");
}

fn merge(dst: &mut Value, patch: &Value) {
    match (dst, patch) {
        (Value::Object(d), Value::Object(p)) => {
            for (k, v) in p {
                match d.get_mut(k) {
                    Some(x) if x.is_object() && v.is_object() => merge(x, v),
                    _ => {
                        d.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (d, p) => *d = p.clone(),
    }
}

#[test]
fn restart_quarantines_and_reprovisioning_clears_it() {
    let mut d = Daemon::start();
    let mut c = d.client();
    let host = host_id(&mut c);
    let ad = adapter_for(&host, "agent-q", 5);
    let r = c.call(open_v2("o1", "agent-q", 5, &ad.a.root, Some(&ad.a.descriptor)));
    assert_eq!(r["ok"], true, "{r}");
    let r = c.call(json!({"protocolVersion": "2.0", "requestId": "w1", "operation": "wake", "sessionId": "agent-q", "generation": 5,
        "idempotencyKey": "k1", "payload": {"prompt": "TOOL fs_write {\"path\":\"a.txt\",\"content\":\"x\"}"}}));
    assert_eq!(r["ok"], true, "{r}");
    d.kill9();
    d.spawn();
    let mut c = d.client();
    let hs = c.call(cmd("2.0", "hs2", "handshake", json!({})));
    let new_host = hs["data"]["host"]["hostInstanceId"].as_str().unwrap().to_string();
    assert_ne!(new_host, host, "a restart is a new host incarnation");
    let q = &hs["data"]["host"]["recovery"]["quarantinedSessions"];
    assert_eq!(
        q,
        &json!([{"sessionId": "agent-q", "generation": 5, "state": "reprovision_required", "code": "tool_adapter_reprovision_required", "retryable": true}])
    );
    assert_eq!(hs["data"]["host"]["ready"], true, "quarantine is not corruption");
    let r = c.call(json!({"protocolVersion": "2.0", "requestId": "w2", "operation": "wake", "sessionId": "agent-q", "generation": 5,
        "idempotencyKey": "k2", "payload": {"prompt": "hi"}}));
    assert_eq!(r["error"]["code"], "session_not_found");
    let r = c.call(cmd("2.0", "st", "status", json!({"sessionId": "agent-q"})));
    assert_eq!(r["error"]["code"], "session_not_found");
    let r = c.call(open_v2("o2", "agent-q", 5, &ad.a.root, None));
    assert_eq!(r["error"]["code"], "tool_adapter_reprovision_required");
    let r = c.call(open_v2("o3", "agent-q", 5, &ad.a.root, Some(&ad.a.descriptor)));
    assert_eq!(r["error"]["code"], "tool_adapter_binding_mismatch", "an old-host descriptor is refused");
    let ad2 = adapter_for(&new_host, "agent-q", 5);
    let r = c.call(open_v2("o4", "agent-q", 5, &ad2.a.root, Some(&ad2.a.descriptor)));
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["data"]["created"], false);
    let hs = c.call(cmd("2.0", "hs3", "handshake", json!({})));
    assert_eq!(hs["data"]["host"]["recovery"]["quarantinedSessions"], json!([]));
    // The durable wake is still answered from the journal.
    let r = c.call(json!({"protocolVersion": "2.0", "requestId": "w3", "operation": "wake", "sessionId": "agent-q", "generation": 5,
        "idempotencyKey": "k1", "payload": {"prompt": "TOOL fs_write {\"path\":\"a.txt\",\"content\":\"x\"}"}}));
    assert_eq!(r["ok"], true, "{r}");
    // The per-session catalog record with its recovery condition is readable offline.
    let out = Command::new(bin()).args(["daemon-state", "--state-dir"]).arg(&d.state).output().unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["sessions"][0]["sessionId"], "agent-q");
}

fn adapter_log_closes(a: &support::Adapter, reason: &str) -> usize {
    a.log_text().lines().filter(|l| l.contains("\"closed\"") && l.contains(&format!("\"reason\":\"{reason}\""))).count()
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < Duration::from_secs(15), "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn generation_replacement_and_close_revoke_the_adapter_connection() {
    let d = Daemon::start();
    let mut c = d.client();
    let host = host_id(&mut c);
    let ad = adapter_for(&host, "agent-r", 2);
    let r = c.call(open_v2("o1", "agent-r", 2, &ad.a.root, Some(&ad.a.descriptor)));
    assert_eq!(r["ok"], true, "{r}");
    // A higher generation replaces the session: the old binding is revoked.
    let mut a2 = support::Adapter::start(Opts::default());
    a2.descriptor = mint(&a2.grants, &a2.socket, &a2.root, &host, "agent-r", 3, &Opts::default());
    a2.kill9();
    std::fs::remove_file(&a2.socket).ok();
    a2.spawn(0);
    let r = c.call(open_v2("o2", "agent-r", 3, &a2.root, Some(&a2.descriptor)));
    assert_eq!(r["data"]["created"], true, "{r}");
    wait_for("the old binding's revoke", || adapter_log_closes(&ad.a, "revoked") == 1);
    let r = c.call(cmd(
        "2.0",
        "w-old",
        "wake",
        json!({"sessionId": "agent-r", "generation": 2, "idempotencyKey": "k", "payload": {"prompt": "x"}}),
    ));
    assert_eq!(r["error"]["code"], "stale_generation");
    // close sends revoke too.
    let r = c.call(cmd("2.0", "c1", "close", json!({"sessionId": "agent-r", "generation": 3})));
    assert_eq!(r["data"]["closed"], true);
    wait_for("close's revoke", || adapter_log_closes(&a2, "revoked") == 1);
}

#[test]
fn v1_resource_rules_and_v2_no_tools_storage() {
    let d = Daemon::start();
    let mut c = d.client();
    let dir = tempfile::tempdir().unwrap();
    let r = c.call(
        json!({"protocolVersion": "1.0", "requestId": "v1a", "operation": "open", "sessionId": "v1", "generation": 1,
        "payload": {"cwd": dir.path(), "session": {"mode": "new"}, "resources": pi_conform::contract::resources_with_tools(json!("none"))}}),
    );
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["protocolVersion"], "1.0");
    let r = c.call(
        json!({"protocolVersion": "1.0", "requestId": "v1b", "operation": "open", "sessionId": "v1b", "generation": 1,
        "payload": {"cwd": dir.path(), "session": {"mode": "new"}, "resources": pi_conform::contract::resources_with_tools(json!({"mode": "host-adapter"}))}}),
    );
    assert_eq!(r["error"]["code"], "invalid_field");
    assert_eq!(r["error"]["details"]["field"], "payload.resources.tools");
    let r = c.call(
        json!({"protocolVersion": "1.0", "requestId": "v1c", "operation": "open", "sessionId": "v1c", "generation": 1,
        "payload": {"cwd": dir.path(), "session": {"mode": "new"}, "resources": pi_conform::contract::resources_with_tools(json!("all"))}}),
    );
    assert_eq!(r["error"]["code"], "unsupported_resource_policy");
    // v2: tools "none" with an isolated agentDir and a confined sessionDir.
    let agent = dir.path().join("agent");
    let r = c.call(json!({"protocolVersion": "2.0", "requestId": "v2a", "operation": "open", "sessionId": "v2", "generation": 1,
        "payload": {"cwd": dir.path().join("work"), "agentDir": agent, "session": {"mode": "new", "sessionDir": agent.join("sessions/x")},
        "resources": pi_conform::contract::resources_with_tools(json!("none"))}}));
    assert_eq!(r["ok"], true, "{r}");
    let r = c.call(json!({"protocolVersion": "2.0", "requestId": "v2b", "operation": "open", "sessionId": "v2b", "generation": 1,
        "payload": {"cwd": dir.path().join("work"), "agentDir": agent, "session": {"mode": "new", "sessionDir": "/tmp/elsewhere"},
        "resources": pi_conform::contract::resources_with_tools(json!("none"))}}));
    assert_eq!(r["error"]["code"], "invalid_field", "{r}");
    // A relative cwd passes the command rules (as in Pi Daemon 0.3.3) but fails the open at
    // dispatch, naming the field, before anything touches the filesystem.
    for (i, payload) in [
        json!({"cwd": "work", "session": {"mode": "new"}}),
        json!({"cwd": dir.path(), "agentDir": "agent", "session": {"mode": "new"}}),
    ]
    .into_iter()
    .enumerate()
    {
        let mut open = json!({"protocolVersion": "2.0", "requestId": format!("rel{i}"), "operation": "open", "sessionId": format!("rel{i}"), "generation": 1,
            "payload": payload});
        open["payload"]["resources"] = pi_conform::contract::resources_with_tools(json!("none"));
        let r = c.call(open);
        assert_eq!(r["error"]["code"], "open_failed", "{r}");
        let why = r["error"]["details"]["cause"]["message"].as_str().unwrap_or("");
        assert!(
            why.contains(if i == 0 { "payload.cwd" } else { "payload.agentDir" }) && why.contains("absolute"),
            "{r}"
        );
    }
    // A turn without an adapter answers tool calls with a typed error.
    let r = c.call(
        json!({"protocolVersion": "2.0", "requestId": "w", "operation": "wake", "sessionId": "v2", "generation": 1,
        "idempotencyKey": "k", "payload": {"prompt": "TOOL fs_read {\"path\":\"x\"}"}}),
    );
    assert_eq!(r["data"]["result"]["toolCalls"][0]["error"]["code"], "tool_unavailable", "{r}");
    let r = c.call(cmd("2.0", "dr", "drain", json!({"payload": {"timeoutMs": 100}})));
    assert_eq!(r["data"]["draining"], true, "{r}");
    let r = c.call(
        json!({"protocolVersion": "2.0", "requestId": "w2", "operation": "wake", "sessionId": "v2", "generation": 1,
        "idempotencyKey": "k2", "payload": {"prompt": "x"}}),
    );
    assert_eq!(r["error"]["code"], "host_draining");
}

#[test]
fn kill_9_during_a_wake_makes_it_indeterminate_until_reconciled() {
    let mut d = Daemon::start();
    let mut c = d.client();
    let host = host_id(&mut c);
    let mut a = support::Adapter::start(Opts::default());
    a.descriptor = mint(&a.grants, &a.socket, &a.root, &host, "agent-k", 1, &Opts::default());
    a.kill9();
    std::fs::remove_file(&a.socket).ok();
    a.spawn(5000);
    let r = c.call(open_v2("o1", "agent-k", 1, &a.root, Some(&a.descriptor)));
    assert_eq!(r["ok"], true, "{r}");
    c.send(&json!({"protocolVersion": "2.0", "requestId": "w1", "operation": "wake", "sessionId": "agent-k", "generation": 1,
        "idempotencyKey": "slow", "payload": {"prompt": "TOOL fs_write {\"path\":\"slow.txt\",\"content\":\"x\"}"}}));
    std::thread::sleep(Duration::from_millis(500));
    d.kill9();
    d.spawn();
    let mut c = d.client();
    let hs = c.call(cmd("2.0", "hs", "handshake", json!({})));
    assert_eq!(hs["data"]["host"]["ready"], false, "an accepted wake found after restart degrades readiness");
    assert_eq!(hs["data"]["host"]["recovery"]["phase"], "degraded");
    assert_eq!(hs["data"]["host"]["recovery"]["indeterminateWakes"], 1);
    // Reprovision, then the same wake key is indeterminate, never replayed.
    let mut a2 = support::Adapter::start(Opts::default());
    let new_host = hs["data"]["host"]["hostInstanceId"].as_str().unwrap().to_string();
    a2.descriptor = mint(&a2.grants, &a2.socket, &a2.root, &new_host, "agent-k", 1, &Opts::default());
    a2.kill9();
    std::fs::remove_file(&a2.socket).ok();
    a2.spawn(0);
    let r = c.call(open_v2("o2", "agent-k", 1, &a2.root, Some(&a2.descriptor)));
    assert_eq!(r["ok"], true, "{r}");
    let r = c.call(json!({"protocolVersion": "2.0", "requestId": "w2", "operation": "wake", "sessionId": "agent-k", "generation": 1,
        "idempotencyKey": "slow", "payload": {"prompt": "TOOL fs_write {\"path\":\"slow.txt\",\"content\":\"x\"}"}}));
    assert_eq!(r["error"]["code"], "request_indeterminate");
    assert!(!a2.root.join("slow.txt").exists(), "never replayed");
    // Explicit reconciliation (daemon stopped) restores readiness.
    d.kill9();
    let out = Command::new(bin()).args(["daemon-state", "--reconcile", "--state-dir"]).arg(&d.state).output().unwrap();
    assert!(out.status.success());
    d.spawn();
    let mut c = d.client();
    let hs = c.call(cmd("2.0", "hs2", "handshake", json!({})));
    assert_eq!(hs["data"]["host"]["ready"], true, "{hs}");
}

#[test]
fn a_wake_record_written_with_the_legacy_fingerprint_keeps_its_idempotency_after_restart() {
    use sha2::{Digest, Sha256};
    let sha = |b: &[u8]| hex::encode(Sha256::digest(b));
    let mut d = Daemon::start();
    let mut c = d.client();
    let dir = tempfile::tempdir().unwrap();
    let open = |rid: &str| {
        json!({"protocolVersion": "2.0", "requestId": rid, "operation": "open", "sessionId": "fp", "generation": 1,
        "payload": {"cwd": dir.path(), "session": {"mode": "new"}, "resources": pi_conform::contract::resources_with_tools(json!("none"))}})
    };
    let wake = |rid: &str, prompt: &str| {
        json!({"protocolVersion": "2.0", "requestId": rid, "operation": "wake", "sessionId": "fp", "generation": 1,
        "idempotencyKey": "k1", "payload": {"prompt": prompt}})
    };
    assert_eq!(c.call(open("o1"))["ok"], true);
    let first = c.call(wake("w1", "legacy hello"));
    assert_eq!(first["data"]["result"]["text"], "legacy hello", "{first}");
    d.kill9();
    // The one wake record on disk carries the current form: the contract's canonical JSON. (A
    // kill -9 may leave the store's pre-allocated `.spare.*.tmp` file beside it.)
    let records: Vec<PathBuf> = walk(&d.state.join("wakes"))
        .into_iter()
        .filter(|p| !p.ends_with("manifest.json") && p.extension().is_some_and(|e| e == "json"))
        .collect();
    assert_eq!(records.len(), 1, "{records:?}");
    let mut rec: Value = serde_json::from_slice(&std::fs::read(&records[0]).unwrap()).unwrap();
    assert_eq!(rec["state"], "completed");
    assert_eq!(rec["fingerprint"], sha(br#"{"prompt":"legacy hello","source":null}"#));
    // Rewrite it as a daemon before the switch wrote it: a comma after every member.
    rec["fingerprint"] = json!(sha(br#"{"prompt":"legacy hello","source":null,}"#));
    std::fs::write(&records[0], serde_json::to_vec(&rec).unwrap()).unwrap();
    d.spawn();
    let mut c = d.client();
    assert_eq!(c.call(open("o2"))["ok"], true);
    let again = c.call(wake("w2", "legacy hello"));
    assert_eq!(again["ok"], true, "the same payload matches the legacy record: {again}");
    assert_eq!(again["data"]["result"], first["data"]["result"], "the journaled result, not a new turn");
    let conflict = c.call(wake("w3", "another prompt"));
    assert_eq!(conflict["error"]["code"], "idempotency_conflict", "{conflict}");
    // The record was not rewritten by the replay.
    let now: Value = serde_json::from_slice(&std::fs::read(&records[0]).unwrap()).unwrap();
    assert_eq!(now["fingerprint"], rec["fingerprint"]);
}
