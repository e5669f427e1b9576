//! The daemon side of the adapter connection over real sockets (SPEC §1.2, §3.4, §4.3, §4.4,
//! §7): against the in-process reference adapter, and against small scripted fake adapters
//! (a std `UnixListener` thread on a 0600 socket in a 0700 directory) that break one rule each.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use pi_conform::conform::selftest::ReferenceAdapter;
use pi_conform::contract::operation::OPERATIONS;
use pi_conform::contract::types::tool_adapter::ToolOperation;
use pi_conform::contract::{admit_descriptor, Descriptor};
use pi_conform::contract::{Code, DaemonCode};
use pi_conform::daemon::endpoint::check_endpoint;
use pi_conform::daemon::link::{AdapterLink, CallError};
use pi_conform::daemon::runtime::idempotency_key;

const HANDLE: &str = "Zq9sT3vWx0yB1cD2eF3gH4iJ5kL6mN7oP8qR9sT0uV";

/// maxRequestBytes, maxResponseBytes, maxConcurrentRequests, maxQueuedRequests,
/// requestTimeoutMs, maxIdempotencyKeys, idempotencyTtlMs.
const LIMITS: [u64; 7] = [1_048_576, 4096, 2, 1, 10_000, 16, 60_000];

fn descriptor_json(socket: &str, limits: [u64; 7]) -> Value {
    json!({
        "protocolVersion": "1.0",
        "adapterId": "fake-adapter",
        "adapterVersion": "0.1.0",
        "endpoint": {"transport": "unix", "path": socket},
        "binding": {
            "hostInstanceId": "host-link",
            "sessionId": "sess-link",
            "generation": 7,
            "capabilityHandle": HANDLE,
        },
        "operations": OPERATIONS,
        "limits": {
            "maxRequestBytes": limits[0],
            "maxResponseBytes": limits[1],
            "maxConcurrentRequests": limits[2],
            "maxQueuedRequests": limits[3],
            "requestTimeoutMs": limits[4],
            "maxIdempotencyKeys": limits[5],
            "idempotencyTtlMs": limits[6],
        },
    })
}

fn descriptor(socket: &Path, limits: [u64; 7]) -> Descriptor {
    admit_descriptor(&descriptor_json(socket.to_str().unwrap(), limits), None).unwrap()
}

/// A 0700 directory with a 0600 listening socket in it.
fn private_listener(dir_mode: u32) -> (tempfile::TempDir, PathBuf, UnixListener) {
    let dir = tempfile::Builder::new().prefix("pcl").tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let socket = dir.path().join("a.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(dir_mode)).unwrap();
    (dir, socket, listener)
}

fn no_connection_attempted(listener: &UnixListener) -> bool {
    listener.set_nonblocking(true).unwrap();
    matches!(listener.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

/// The fake adapter's end of one connection.
struct Peer {
    rd: BufReader<UnixStream>,
    wr: UnixStream,
    d: Descriptor,
    seen: Vec<Value>,
    closed: bool,
}

impl Peer {
    fn recv(&mut self) -> Option<Value> {
        let mut line = String::new();
        match self.rd.read_line(&mut line) {
            Ok(0) | Err(_) => None,
            Ok(_) => {
                let v: Value = serde_json::from_str(line.trim_end_matches('\n')).expect("the daemon sent JSON");
                self.seen.push(v.clone());
                Some(v)
            }
        }
    }

    fn expect(&mut self, kind: &str) -> Value {
        let v = self.recv().unwrap_or_else(|| panic!("expected {kind}, got EOF"));
        assert_eq!(v["kind"], kind, "{v}");
        v
    }

    fn send(&mut self, v: &Value) {
        let mut line = serde_json::to_vec(v).unwrap();
        line.push(b'\n');
        self.raw(&line);
    }

    fn raw(&mut self, bytes: &[u8]) {
        let _ = self.wr.write_all(bytes);
    }

    fn bound(&mut self) {
        let bind = self.expect("bind");
        assert_eq!(bind, self.d.bind_frame(), "the normalized bind frame");
        let b = self.d.bound_frame();
        self.send(&b);
    }

    fn result(&self, invoke: &Value, data: Value) -> Value {
        self.d.identity().frame(
            "result",
            [
                ("requestId", invoke["requestId"].clone()),
                ("idempotencyKey", invoke["idempotencyKey"].clone()),
                ("operation", invoke["operation"].clone()),
                ("ok", Value::Bool(true)),
                ("data", data),
            ],
        )
    }

    fn aborted(&self, abort: &Value, aborted: bool) -> Value {
        self.d.identity().frame(
            "aborted",
            [
                ("requestId", abort["requestId"].clone()),
                ("targetRequestId", abort["targetRequestId"].clone()),
                ("aborted", Value::Bool(aborted)),
            ],
        )
    }

    fn close(&mut self) {
        let _ = self.wr.shutdown(std::net::Shutdown::Both);
        self.closed = true;
    }
}

fn read_data(content: &str) -> Value {
    json!({"content": content, "bytesRead": content.len(), "eof": true})
}

/// A fake adapter serving one connection with `script`, then reading until EOF.
struct Fake {
    _dir: tempfile::TempDir,
    d: Descriptor,
    thread: Option<std::thread::JoinHandle<Vec<Value>>>,
}

impl Fake {
    fn start(limits: [u64; 7], script: impl FnOnce(&mut Peer) + Send + 'static) -> Fake {
        let (dir, socket, listener) = private_listener(0o700);
        let d = descriptor(&socket, limits);
        let pd = d.clone();
        let thread = std::thread::spawn(move || {
            let (s, _) = listener.accept().unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let rd = BufReader::new(s.try_clone().unwrap());
            let mut p = Peer { rd, wr: s, d: pd, seen: Vec::new(), closed: false };
            script(&mut p);
            if !p.closed {
                while p.recv().is_some() {}
            }
            p.seen
        });
        Fake { _dir: dir, d, thread: Some(thread) }
    }

    /// Everything the fake received (after the daemon closed the connection).
    async fn finish(mut self) -> Vec<Value> {
        let t = self.thread.take().unwrap();
        let seen = tokio::task::spawn_blocking(move || t.join()).await.unwrap().expect("the fake adapter panicked");
        // §7.1: the handle travels only inside bind.
        for v in &seen {
            if v["kind"] != "bind" {
                assert!(!v.to_string().contains(HANDLE), "handle outside bind: {}", v["kind"]);
            }
        }
        seen
    }
}

fn kinds(seen: &[Value]) -> Vec<&str> {
    seen.iter().map(|v| v["kind"].as_str().unwrap_or("?")).collect()
}

fn assert_clean(e: &CallError) {
    assert!(!e.to_string().contains(HANDLE));
    assert!(!e.message.contains(HANDLE));
}

// ------------------------------------------------------------------ the reference adapter

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reference_adapter_binds_and_serves_every_operation() {
    let adapter = ReferenceAdapter::start().unwrap();
    let d = admit_descriptor(&adapter.descriptor, None).unwrap();
    let link = AdapterLink::open(&d).await.unwrap();
    assert_eq!(link.failed(), None);
    use ToolOperation::*;
    let w = link.call(FsWrite, json!({"path": "a.txt", "content": "hello world\n"}), "t1").await.unwrap();
    assert_eq!((w["created"].as_bool(), w["bytesWritten"].as_u64()), (Some(true), Some(12)));
    let r = link.call(FsRead, json!({"path": "a.txt"}), "t2").await.unwrap();
    assert_eq!(r["content"], "hello world\n");
    let s = link.call(FsStat, json!({"path": "a.txt"}), "t3").await.unwrap();
    assert_eq!((s["type"].as_str(), s["size"].as_u64()), (Some("file"), Some(12)));
    let l = link.call(FsList, json!({"path": "."}), "t4").await.unwrap();
    assert!(l["entries"].as_array().unwrap().iter().any(|e| e["name"] == "a.txt"));
    let q = link.call(FsSearch, json!({"path": ".", "query": "world"}), "t5").await.unwrap();
    assert_eq!(q["matches"][0]["path"], "a.txt");
    assert_eq!((q["matches"][0]["line"].as_u64(), q["matches"][0]["column"].as_u64()), (Some(1), Some(7)));
    let e = link
        .call(FsEdit, json!({"path": "a.txt", "edits": [{"oldText": "world", "newText": "there"}]}), "t6")
        .await
        .unwrap();
    assert_eq!(e["replacements"], 1);
    let r = link.call(FsRead, json!({"path": "a.txt"}), "t7").await.unwrap();
    assert_eq!(r["content"], "hello there\n");
    assert_eq!(std::fs::read_to_string(adapter.root.join("a.txt")).unwrap(), "hello there\n");
    // An adapter refusal is the call's error, not the connection's.
    let nf = link.call(FsRead, json!({"path": "missing.txt"}), "t8").await.unwrap_err();
    assert_eq!((nf.code.as_str(), nf.retryable, nf.indeterminate), ("not_found", false, false));
    assert_eq!(link.failed(), None);
    // Twenty at once: 4 run, 16 wait in the queue, none is refused.
    let ids: Vec<String> = (0..20).map(|i| format!("s{i}")).collect();
    let out = join_all(ids.iter().map(|id| link.call(FsStat, json!({"path": "a.txt"}), id)).collect()).await;
    assert!(out.iter().all(Result::is_ok), "4 concurrent + 16 queued hold 20 calls");
    let t = link.telemetry();
    assert_eq!(t["state"], "bound");
    assert_eq!(t["counters"]["completed"], 27);
    assert_eq!(t["counters"]["failed"], 1);
    assert_eq!(t["highWater"]["active"], 4);
    assert_eq!(t["operations"]["fs.read"]["latencyMs"]["count"], 3);
    let text = t.to_string();
    for needle in [HANDLE, d.handle().expose(), "a.txt", "hello", d.endpoint_path(), "tool-"] {
        assert!(!text.contains(needle), "telemetry leaks {needle}");
    }
    link.revoke().await;
    let e = link.call(FsStat, json!({"path": "a.txt"}), "t9").await.unwrap_err();
    assert_eq!(e.code, DaemonCode::AdapterRevoked.as_str());
    assert!(link.is_revoked());
}

/// `join_all` without a futures dependency: poll them all on this task.
async fn join_all<F: std::future::Future>(fs: Vec<F>) -> Vec<F::Output> {
    let mut pinned: Vec<std::pin::Pin<Box<F>>> = fs.into_iter().map(Box::pin).collect();
    let mut out: Vec<Option<F::Output>> = pinned.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (f, o) in pinned.iter_mut().zip(out.iter_mut()) {
            if o.is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => *o = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    out.into_iter().flatten().collect()
}

// ------------------------------------------------------------------ admission and timeouts

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_capacity_is_refused_before_any_write() {
    let limits = [1_048_576, 4096, 1, 0, 10_000, 16, 60_000];
    let f = Fake::start(limits, |p| p.bound());
    let link = AdapterLink::open(&f.d).await.unwrap();
    let l2 = link.clone();
    let first = tokio::spawn(async move { l2.call(ToolOperation::FsStat, json!({"path": "a"}), "first").await });
    let t = Instant::now();
    while link.telemetry()["occupancy"]["active"] != 1 {
        assert!(t.elapsed() < Duration::from_secs(5));
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let e = link.call(ToolOperation::FsStat, json!({"path": "b"}), "second").await.unwrap_err();
    assert_eq!(e.code, DaemonCode::AdapterQueueCapacity.as_str());
    assert!(e.retryable && !e.indeterminate);
    // max(25, min(1000, floor(10000 / 20)))
    assert_eq!(e.retry_after_ms, Some(500));
    let t = link.telemetry();
    assert_eq!(
        (t["lastRefusalReason"].as_str(), t["saturated"].as_bool()),
        (Some(DaemonCode::AdapterQueueCapacity.as_str()), Some(true))
    );
    link.revoke().await;
    let first = first.await.unwrap().unwrap_err();
    assert_eq!((first.code.as_str(), first.indeterminate), (DaemonCode::AdapterRevoked.as_str(), true));
    drop(link);
    let seen = f.finish().await;
    assert_eq!(kinds(&seen), ["bind", "invoke", "revoke"], "exactly one invoke reached the adapter");
    assert_eq!(seen[1]["idempotencyKey"], idempotency_key(ToolOperation::FsStat, "first"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn started_calls_run_concurrently_and_the_extra_one_is_refused_at_start() {
    // 2 concurrent + 1 queued: of four calls started back to back, two are sent, one waits
    // and the fourth is refused by `start` itself, before any wire write.
    let limits = [1_048_576, 4096, 2, 1, 10_000, 16, 60_000];
    let (go, wait) = std::sync::mpsc::channel::<()>();
    let f = Fake::start(limits, move |p| {
        p.bound();
        let a = p.expect("invoke");
        let b = p.expect("invoke");
        // Both are in flight; nothing is answered until the test has checked the refusal.
        wait.recv().unwrap();
        // Answering one lets the queued one go.
        let r = p.result(&b, read_data("b"));
        p.send(&r);
        let c = p.expect("invoke");
        let r = p.result(&a, read_data("a"));
        p.send(&r);
        let r = p.result(&c, read_data("c"));
        p.send(&r);
    });
    let link = AdapterLink::open(&f.d).await.unwrap();
    let a = link.start(ToolOperation::FsRead, json!({"path": "a"}), "a").unwrap();
    let b = link.start(ToolOperation::FsRead, json!({"path": "b"}), "b").unwrap();
    let c = link.start(ToolOperation::FsRead, json!({"path": "c"}), "c").unwrap();
    let e = link.start(ToolOperation::FsRead, json!({"path": "d"}), "d").unwrap_err();
    assert_eq!(
        (e.code.as_str(), e.retryable, e.retry_after_ms),
        (DaemonCode::AdapterQueueCapacity.as_str(), true, Some(500))
    );
    assert_eq!(link.telemetry()["occupancy"], json!({"active": 2, "queued": 1, "tombstones": 0}));
    go.send(()).unwrap();
    assert_eq!(a.outcome().await.unwrap(), read_data("a"));
    assert_eq!(b.outcome().await.unwrap(), read_data("b"));
    assert_eq!(c.outcome().await.unwrap(), read_data("c"));
    link.revoke().await;
    drop(link);
    let seen = f.finish().await;
    assert_eq!(kinds(&seen), ["bind", "invoke", "invoke", "invoke", "revoke"], "the refused call was never sent");
    assert!(seen.iter().all(|v| v["idempotencyKey"] != idempotency_key(ToolOperation::FsRead, "d")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_while_active_sends_abort_and_is_indeterminate() {
    let limits = [1_048_576, 4096, 2, 1, 300, 16, 60_000];
    let f = Fake::start(limits, |p| {
        p.bound();
        let inv = p.expect("invoke");
        let abort = p.expect("abort");
        assert_eq!(abort["targetRequestId"], inv["requestId"]);
        assert_ne!(abort["requestId"], inv["requestId"]);
        assert!(abort.get("idempotencyKey").is_none());
    });
    let link = AdapterLink::open(&f.d).await.unwrap();
    let t = Instant::now();
    let e = link.call(ToolOperation::FsRead, json!({"path": "a"}), "slow").await.unwrap_err();
    assert!(t.elapsed() >= Duration::from_millis(290), "{:?}", t.elapsed());
    assert_eq!(e.code, DaemonCode::AdapterRequestTimeout.as_str());
    assert!(e.indeterminate && !e.retryable);
    assert_clean(&e);
    assert_eq!(link.failed(), None, "a timeout does not fail the connection");
    assert_eq!(link.telemetry()["occupancy"]["tombstones"], 1);
    link.revoke().await;
    drop(link);
    assert_eq!(kinds(&f.finish().await), ["bind", "invoke", "abort", "revoke"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_while_queued_is_retryable_and_never_sent() {
    let limits = [1_048_576, 4096, 1, 1, 300, 16, 60_000];
    let f = Fake::start(limits, |p| {
        p.bound();
        p.expect("invoke");
        p.expect("abort");
    });
    let link = AdapterLink::open(&f.d).await.unwrap();
    let (a, b) = tokio::join!(
        link.call(ToolOperation::FsRead, json!({"path": "a"}), "a"),
        link.call(ToolOperation::FsRead, json!({"path": "b"}), "b"),
    );
    let (a, b) = (a.unwrap_err(), b.unwrap_err());
    assert_eq!(
        (a.code.as_str(), a.indeterminate, a.retryable),
        (DaemonCode::AdapterRequestTimeout.as_str(), true, false)
    );
    assert_eq!(
        (b.code.as_str(), b.indeterminate, b.retryable),
        (DaemonCode::AdapterRequestTimeout.as_str(), false, true)
    );
    assert_eq!(link.telemetry()["counters"]["timedOut"], 2);
    link.revoke().await;
    drop(link);
    let seen = f.finish().await;
    assert_eq!(kinds(&seen), ["bind", "invoke", "abort", "revoke"], "the queued call was never sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_call_aborts_it() {
    let f = Fake::start(LIMITS, |p| {
        p.bound();
        let inv = p.expect("invoke");
        let abort = p.expect("abort");
        assert_eq!(abort["targetRequestId"], inv["requestId"]);
        let ack = p.aborted(&abort, true);
        p.send(&ack);
    });
    let link = AdapterLink::open(&f.d).await.unwrap();
    let r = tokio::time::timeout(
        Duration::from_millis(100),
        link.call(ToolOperation::FsRead, json!({"path": "a"}), "dropped"),
    )
    .await;
    assert!(r.is_err());
    let t = Instant::now();
    while link.telemetry()["occupancy"]["tombstones"] != 0 {
        assert!(t.elapsed() < Duration::from_secs(5));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(link.telemetry()["counters"]["cancelled"], 1);
    assert_eq!(link.failed(), None);
    drop(link);
    assert_eq!(kinds(&f.finish().await), ["bind", "invoke", "abort", "revoke"], "dropping the link revokes");
}

// ------------------------------------------------------------------ bind violations

async fn open_fails(limits: [u64; 7], script: impl FnOnce(&mut Peer) + Send + 'static) -> (&'static str, Duration) {
    let f = Fake::start(limits, script);
    let t = Instant::now();
    let e = AdapterLink::open(&f.d).await.unwrap_err();
    let took = t.elapsed();
    assert!(!e.to_string().contains(HANDLE));
    let seen = f.finish().await;
    assert_eq!(seen.first().map(|v| v["kind"].clone()), Some(json!("bind")));
    assert!(!kinds(&seen).contains(&"invoke"));
    (e.code, took)
}

fn bound_with(edit: impl FnOnce(&mut Value) + Send + 'static) -> impl FnOnce(&mut Peer) + Send + 'static {
    move |p: &mut Peer| {
        p.expect("bind");
        let mut b = p.d.bound_frame();
        edit(&mut b);
        p.send(&b);
    }
}

type Script = Box<dyn FnOnce(&mut Peer) + Send>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bound_violations_fail_the_open() {
    let cases: Vec<(&str, Script, &str)> = vec![
        (
            "wrong limits",
            Box::new(bound_with(|b| b["limits"]["maxQueuedRequests"] = 2.into())),
            Code::AdapterProtocolInvalid.as_str(),
        ),
        (
            "reordered operations",
            Box::new(bound_with(|b| {
                b["operations"].as_array_mut().unwrap().reverse();
            })),
            Code::AdapterProtocolInvalid.as_str(),
        ),
        (
            "wrong generation",
            Box::new(bound_with(|b| b["generation"] = 8.into())),
            Code::AdapterProtocolInvalid.as_str(),
        ),
        (
            "wrong session",
            Box::new(bound_with(|b| b["sessionId"] = "other".into())),
            Code::AdapterProtocolInvalid.as_str(),
        ),
        ("extra key", Box::new(bound_with(|b| b["extra"] = true.into())), Code::AdapterProtocolInvalid.as_str()),
        (
            "handle echoed in bound",
            Box::new(bound_with(|b| b["capabilityHandle"] = HANDLE.into())),
            Code::AdapterSecretReflected.as_str(),
        ),
        (
            "close before bound",
            Box::new(|p: &mut Peer| {
                p.expect("bind");
                p.close();
            }),
            DaemonCode::AdapterConnectionClosed.as_str(),
        ),
        (
            "garbage",
            Box::new(|p: &mut Peer| {
                p.expect("bind");
                p.raw(b"this is not json\n");
            }),
            Code::AdapterProtocolInvalid.as_str(),
        ),
        (
            "a result before bound",
            Box::new(|p: &mut Peer| {
                p.expect("bind");
                let inv = json!({"requestId": "r1", "idempotencyKey": "k1", "operation": "fs.read"});
                let r = p.result(&inv, read_data("x"));
                p.send(&r);
            }),
            Code::AdapterProtocolInvalid.as_str(),
        ),
        (
            "two bound frames at once",
            Box::new(|p: &mut Peer| {
                p.expect("bind");
                let b = p.d.bound_frame();
                let mut two = serde_json::to_vec(&b).unwrap();
                two.push(b'\n');
                two.extend_from_slice(&two.clone());
                p.raw(&two);
            }),
            // The open succeeds on the first; the second fails the connection at once, so
            // either outcome is checked below.
            "",
        ),
    ];
    for (name, script, want) in cases {
        if want.is_empty() {
            let f = Fake::start(LIMITS, script);
            match AdapterLink::open(&f.d).await {
                Ok(link) => {
                    let t = Instant::now();
                    while link.failed().is_none() {
                        assert!(t.elapsed() < Duration::from_secs(5), "{name}");
                        tokio::time::sleep(Duration::from_millis(2)).await;
                    }
                    assert_eq!(link.failed().as_deref(), Some(Code::AdapterProtocolInvalid.as_str()), "{name}");
                }
                Err(e) => assert_eq!(e.code, Code::AdapterProtocolInvalid.as_str(), "{name}"),
            }
            f.finish().await;
            continue;
        }
        let (code, _) = open_fails(LIMITS, script).await;
        assert_eq!(code, want, "{name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silence_after_bind_is_a_bind_timeout() {
    let limits = [1_048_576, 4096, 2, 1, 300, 16, 60_000];
    let (code, took) = open_fails(limits, |p| {
        p.expect("bind");
    })
    .await;
    assert_eq!(code, DaemonCode::AdapterBindTimeout.as_str());
    assert!(took >= Duration::from_millis(290) && took < Duration::from_secs(3), "{took:?}");
}

// ------------------------------------------------------------------ fail-closed during calls

struct Outcome {
    calls: Vec<Result<Value, CallError>>,
    failed: Option<String>,
}

/// Three calls on a 2 concurrent + 1 queued binding: the fake reads the first two invokes
/// and then runs `script` with them.
async fn three_calls(script: impl FnOnce(&mut Peer, [Value; 2]) + Send + 'static) -> Outcome {
    let f = Fake::start(LIMITS, move |p| {
        p.bound();
        let a = p.expect("invoke");
        let b = p.expect("invoke");
        script(p, [a, b]);
    });
    let link = AdapterLink::open(&f.d).await.unwrap();
    let (a, b, c) = tokio::join!(
        link.call(ToolOperation::FsRead, json!({"path": "a"}), "call-a"),
        link.call(ToolOperation::FsRead, json!({"path": "b"}), "call-b"),
        link.call(ToolOperation::FsRead, json!({"path": "c"}), "call-c"),
    );
    let failed = link.failed();
    drop(link);
    let seen = f.finish().await;
    assert_eq!(seen[1]["idempotencyKey"], idempotency_key(ToolOperation::FsRead, "call-a"));
    Outcome { calls: vec![a, b, c], failed }
}

fn assert_failed_closed(o: &Outcome, code: &str) {
    assert_eq!(o.failed.as_deref(), Some(code));
    for (i, r) in o.calls.iter().enumerate() {
        let e = r.as_ref().unwrap_err();
        assert_clean(e);
        assert_eq!(e.code, code, "call {i}");
        assert!(!e.retryable, "call {i}");
        // a and b were sent; c was still queued.
        assert_eq!(e.indeterminate, i < 2, "call {i}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn result_for_an_unknown_request_fails_the_connection() {
    let o = three_calls(|p, [a, _]| {
        let mut r = p.result(&a, read_data("x"));
        r["requestId"] = "not-a-request".into();
        p.send(&r);
    })
    .await;
    assert_failed_closed(&o, Code::AdapterResponseMismatch.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn result_with_a_mismatched_idempotency_key_fails_the_connection() {
    let o = three_calls(|p, [a, _]| {
        let mut r = p.result(&a, read_data("x"));
        r["idempotencyKey"] = "tool-0000".into();
        p.send(&r);
    })
    .await;
    assert_failed_closed(&o, Code::AdapterResponseMismatch.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn result_with_a_mismatched_operation_fails_the_connection() {
    let o = three_calls(|p, [a, _]| {
        let mut inv = a.clone();
        inv["operation"] = "fs.stat".into();
        let r = p.result(&inv, json!({"type": "file", "size": 1}));
        p.send(&r);
    })
    .await;
    assert_failed_closed(&o, Code::AdapterResponseMismatch.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_result_fails_the_connection() {
    let o = three_calls(|p, [a, _]| {
        let r = p.result(&a, read_data("x"));
        p.send(&r);
        p.send(&r);
    })
    .await;
    assert_eq!(o.failed.as_deref(), Some(Code::AdapterResponseMismatch.as_str()));
    assert_eq!(o.calls[0].as_ref().unwrap(), &read_data("x"));
    let b = o.calls[1].as_ref().unwrap_err();
    assert_eq!((b.code.as_str(), b.indeterminate), (Code::AdapterResponseMismatch.as_str(), true));
    assert_eq!(o.calls[2].as_ref().unwrap_err().code, Code::AdapterResponseMismatch.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_handle_reflected_in_a_result_fails_the_connection() {
    let o = three_calls(|p, [a, _]| {
        let r = p.result(&a, read_data(&format!("leaked {HANDLE} here")));
        p.send(&r);
    })
    .await;
    assert_failed_closed(&o, Code::AdapterSecretReflected.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aborted_without_abort_fails_the_connection() {
    let o = three_calls(|p, [a, _]| {
        let ack = json!({"requestId": "abort-x", "targetRequestId": a["requestId"]});
        let f = p.aborted(&ack, true);
        p.send(&f);
    })
    .await;
    assert_failed_closed(&o, Code::AdapterResponseMismatch.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversize_line_fails_the_connection() {
    // maxResponseBytes is 4096, LF included: 4096 bytes before the LF is one too many.
    let o = three_calls(|p, _| {
        let mut line = vec![b' '; 4096];
        line.push(b'\n');
        p.raw(&line);
    })
    .await;
    assert_failed_closed(&o, Code::AdapterProtocolInvalid.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_adapter_sent_invoke_fails_the_connection() {
    let o = three_calls(|p, [a, _]| p.send(&a)).await;
    assert_failed_closed(&o, Code::AdapterProtocolInvalid.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eof_during_calls_fails_them() {
    let o = three_calls(|p, _| p.close()).await;
    assert_failed_closed(&o, DaemonCode::AdapterConnectionClosed.as_str());
}

/// A call that times out, then a second call; the fake acknowledges the abort and then
/// (`late` = true) sends the first call's result after `aborted`, or (`late` = false) before.
async fn late_result(late: bool) -> (CallError, Result<Value, CallError>, Option<String>) {
    let limits = [1_048_576, 4096, 2, 1, 300, 16, 60_000];
    let f = Fake::start(limits, move |p| {
        p.bound();
        let a = p.expect("invoke");
        let abort = p.expect("abort");
        let ra = p.result(&a, read_data("late"));
        let ack = p.aborted(&abort, true);
        if !late {
            p.send(&ra); // dropped: the tombstone lives and aborted has not come yet
        }
        p.send(&ack);
        let b = p.expect("invoke");
        if late {
            p.send(&ra); // fatal: after aborted
        } else {
            let rb = p.result(&b, read_data("b"));
            p.send(&rb);
        }
    });
    let link = AdapterLink::open(&f.d).await.unwrap();
    let a = link.call(ToolOperation::FsRead, json!({"path": "a"}), "a").await.unwrap_err();
    let b = link.call(ToolOperation::FsRead, json!({"path": "b"}), "b").await;
    let failed = link.failed();
    drop(link);
    f.finish().await;
    (a, b, failed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_after_aborted_fails_the_connection() {
    let (a, b, failed) = late_result(true).await;
    assert!(a.indeterminate && a.code == DaemonCode::AdapterRequestTimeout.as_str());
    let b = b.unwrap_err();
    assert_eq!((b.code.as_str(), b.indeterminate), (Code::AdapterResponseMismatch.as_str(), true));
    assert_eq!(failed.as_deref(), Some(Code::AdapterResponseMismatch.as_str()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_before_aborted_is_dropped() {
    let (a, b, failed) = late_result(false).await;
    assert!(a.indeterminate);
    assert_eq!(b.unwrap(), read_data("b"));
    assert_eq!(failed, None);
}

// ------------------------------------------------------------------ endpoint checks

async fn endpoint_refused(d: &Descriptor, listener: &UnixListener) {
    let e = AdapterLink::open(d).await.unwrap_err();
    assert_eq!(e.code, DaemonCode::AdapterEndpointInsecure.as_str());
    assert!(!e.to_string().contains(d.endpoint_path()), "the message stays generic");
    assert!(no_connection_attempted(listener), "no connection is attempted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoint_in_a_group_writable_directory_is_refused() {
    let (_dir, socket, listener) = private_listener(0o770);
    endpoint_refused(&descriptor(&socket, LIMITS), &listener).await;
    let (_dir, socket, listener) = private_listener(0o705);
    endpoint_refused(&descriptor(&socket, LIMITS), &listener).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoint_socket_with_group_bits_is_refused() {
    let (_dir, socket, listener) = private_listener(0o700);
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o660)).unwrap();
    endpoint_refused(&descriptor(&socket, LIMITS), &listener).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoint_symlink_to_a_socket_is_refused() {
    let (dir, socket, listener) = private_listener(0o700);
    let link = dir.path().join("link.sock");
    std::os::unix::fs::symlink(&socket, &link).unwrap();
    endpoint_refused(&descriptor(&link, LIMITS), &listener).await;
    // A symlinked parent directory too.
    let other = tempfile::Builder::new().prefix("pcl").tempdir().unwrap();
    std::fs::set_permissions(other.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let via = other.path().join("d");
    std::os::unix::fs::symlink(dir.path(), &via).unwrap();
    endpoint_refused(&descriptor(&via.join("a.sock"), LIMITS), &listener).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoint_relative_or_trailing_slash_is_refused() {
    let (dir, socket, listener) = private_listener(0o700);
    // A trailing slash passes descriptor admission and fails here (SPEC §3.2 check 5).
    let trailing = format!("{}/", socket.to_str().unwrap());
    let d = admit_descriptor(&descriptor_json(&trailing, LIMITS), None).unwrap();
    endpoint_refused(&d, &listener).await;
    // Admission refuses a relative path, and a descriptor (a view over the generated type,
    // whose endpoint path is absolute by construction) cannot hold one; the link's own check
    // refuses it anyway.
    for bad in ["a.sock", "./a.sock"] {
        assert_eq!(check_endpoint(Path::new(bad)).unwrap_err().code, DaemonCode::AdapterEndpointInsecure.as_str());
    }
    for bad in [format!("{}/./a.sock", dir.path().display()), format!("{}//a.sock", dir.path().display())] {
        assert_eq!(
            check_endpoint(Path::new(&bad)).unwrap_err().code,
            DaemonCode::AdapterEndpointInsecure.as_str(),
            "{bad}"
        );
    }
    assert!(no_connection_attempted(&listener));
    // The same socket, named canonically, passes.
    assert!(check_endpoint(&socket).is_ok());
}
