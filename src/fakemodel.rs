//! `pi-conform fake-model`: a scripted, OpenAI-compatible chat-completions endpoint on
//! loopback, so that a real Pi Daemon can run tool-calling turns with no credentials and no
//! network.
//!
//! The "model" reads the last user message. Each line `TOOL <name> <json-args>` becomes one
//! tool call (the arguments are passed verbatim, as the string the line holds); without such
//! lines the answer echoes the prompt. Once tool results follow the last user message, the
//! answer is a one-line summary of them (`Tool results: N calls; ...`). Streaming answers split
//! every tool call's arguments into at least three fragments so that clients really reassemble
//! them.
//!
//! HTTP/1.1 is hyper's (no HTTP/2: the clients of a model endpoint speak HTTP/1.1 on
//! loopback): keep-alive and pipelining, `Content-Length` and chunked request bodies,
//! `Expect: 100-continue`. This module adds the bounds: 64 KiB of request head, 8 MiB of body,
//! a connection cap, a deadline for the next request head, for the body and for every write,
//! and a graceful close. Framing hyper refuses itself (a malformed request line or header,
//! conflicting `Content-Length`s, a transfer coding that does not end in `chunked`, an
//! oversize head) gets hyper's bare status (400 or 431, empty body) and a close; everything
//! this module refuses gets an OpenAI-shaped JSON error.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hyper::body::{Body, Bytes, Frame, Incoming, SizeHint};
use hyper::header::{self, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode, Version};
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio::time::{timeout, timeout_at, Instant};

/// The one model `GET /v1/models` lists (requests may name any model).
pub const MODEL_ID: &str = "pi-conform-fake";
/// Largest request body (after chunked decoding).
pub const MAX_BODY_BYTES: usize = 8 << 20;
/// Largest request head (request line and headers), and largest chunked trailer section.
pub const MAX_HEAD_BYTES: usize = 64 << 10;
/// Tool-call arguments are streamed in at least this many fragments (when they have as many
/// characters).
pub const MIN_ARGUMENT_FRAGMENTS: usize = 3;

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum FakeModelError {
    /// `--listen` is not an `IP:PORT`.
    #[error("--listen {0:?}: expected a loopback IP:PORT such as 127.0.0.1:0 or [::1]:8080")]
    BadAddress(String),
    /// `--listen` names an address other hosts could reach.
    #[error(
        "--listen {0}: refused: fake-model listens on loopback only (127.0.0.0/8 or ::1); it answers anyone \
         who can connect, so it must never be reachable from another host"
    )]
    NotLoopback(String),
    /// The listening socket.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
    /// Other I/O (runtime, thread).
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Parse `--listen`: `IP:PORT` (`[::1]:PORT` for IPv6) or `localhost:PORT`, loopback only.
pub fn parse_listen(listen: &str) -> Result<SocketAddr, FakeModelError> {
    let s = listen.trim();
    let addr = match s.strip_prefix("localhost:") {
        Some(port) => SocketAddr::new(
            Ipv4Addr::LOCALHOST.into(),
            port.parse().map_err(|_| FakeModelError::BadAddress(listen.to_string()))?,
        ),
        None => s.parse::<SocketAddr>().map_err(|_| FakeModelError::BadAddress(listen.to_string()))?,
    };
    if !addr.ip().is_loopback() {
        return Err(FakeModelError::NotLoopback(s.to_string()));
    }
    Ok(addr)
}

/// Bind the listening socket (loopback only).
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, FakeModelError> {
    if !addr.ip().is_loopback() {
        return Err(FakeModelError::NotLoopback(addr.to_string()));
    }
    TcpListener::bind(addr).await.map_err(|source| FakeModelError::Bind { addr, source })
}

/// The server's bounds.
#[derive(Clone, Debug)]
pub struct Config {
    /// Connections served at once; further ones wait in the listen backlog.
    pub max_connections: usize,
    /// How long a connection may wait for a complete request head: from its accept, or from the
    /// end of the previous response. Past it the connection closes without a word.
    pub idle_timeout: Duration,
    /// How long a request body may take to arrive once its head has; past it the answer is 408
    /// and the connection closes.
    pub request_timeout: Duration,
    /// How long one response write may block without progress.
    pub write_timeout: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_connections: 256,
            idle_timeout: Duration::from_secs(60),
            request_timeout: Duration::from_secs(30),
            write_timeout: Duration::from_secs(30),
        }
    }
}

/// Serve until `shutdown` turns true (or its sender is dropped).
pub async fn serve(listener: TcpListener, cfg: Config, mut shutdown: watch::Receiver<bool>) {
    let cfg = Arc::new(cfg);
    let slots = Arc::new(Semaphore::new(cfg.max_connections.max(1)));
    let mut tasks = JoinSet::new();
    loop {
        let permit = tokio::select! {
            _ = stopped(&mut shutdown) => break,
            p = slots.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
        };
        let stream = tokio::select! {
            _ = stopped(&mut shutdown) => break,
            r = listener.accept() => match r {
                Ok((s, _)) => s,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    tracing::warn!(error = %e, "fake-model: accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        tasks.spawn(connection(stream, permit, cfg.clone()));
        while tasks.try_join_next().is_some() {}
    }
    tasks.shutdown().await;
}

async fn stopped(rx: &mut watch::Receiver<bool>) {
    while !*rx.borrow_and_update() {
        if rx.changed().await.is_err() {
            return;
        }
    }
}

/// A fake model serving on its own thread (for tests and the daemon runner); dropping it stops
/// the server and closes every connection.
pub struct FakeModelServer {
    addr: SocketAddr,
    stop: Option<watch::Sender<bool>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FakeModelServer {
    /// Start on `listen` (loopback `IP:PORT`; port 0 picks one) with the default bounds.
    pub fn start(listen: &str) -> Result<Self, FakeModelError> {
        Self::start_with(listen, Config::default())
    }

    /// Start with explicit bounds.
    pub fn start_with(listen: &str, cfg: Config) -> Result<Self, FakeModelError> {
        let addr = parse_listen(listen)?;
        let (stop, rx) = watch::channel(false);
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new().name("pi-conform-fake-model".into()).spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = ready_tx.send(Err(FakeModelError::Io(e)));
                    return;
                }
            };
            rt.block_on(async move {
                let listener = match bind(addr).await {
                    Ok(l) => l,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let _ = ready_tx.send(listener.local_addr().map_err(FakeModelError::Io));
                serve(listener, cfg, rx).await;
            });
        })?;
        let addr = match ready_rx.recv() {
            Ok(r) => r?,
            Err(_) => return Err(FakeModelError::Io(std::io::Error::other("the fake-model thread died"))),
        };
        Ok(FakeModelServer { addr, stop: Some(stop), thread: Some(thread) })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The OpenAI base URL: `http://ADDR/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }
}

impl Drop for FakeModelServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(true);
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// `pi-conform fake-model --listen ADDR`: print `listening on http://ADDR` and serve until
/// SIGINT/SIGTERM (exit 0).
pub fn run_cli(listen: &str) -> anyhow::Result<u8> {
    let addr = parse_listen(listen)?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async move {
        let listener = bind(addr).await?;
        let local = listener.local_addr()?;
        {
            use std::io::Write;
            let mut out = std::io::stdout().lock();
            writeln!(out, "listening on http://{local}")?;
            out.flush()?;
        }
        let (stop, rx) = watch::channel(false);
        let server = tokio::spawn(serve(listener, Config::default(), rx));
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        let _ = stop.send(true);
        let _ = server.await;
        Ok(0)
    })
}

// ---------------------------------------------------------------------------------------------
// The model.

/// A refusal in OpenAI's error shape.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{status} {message}")]
pub struct ApiError {
    /// HTTP status.
    pub status: u16,
    /// `error.message`.
    pub message: String,
    /// `error.type`.
    pub kind: &'static str,
    /// `error.param`.
    pub param: Option<String>,
    /// `error.code`.
    pub code: Option<&'static str>,
}

impl ApiError {
    fn new(status: u16, message: impl Into<String>, code: Option<&'static str>) -> Self {
        let kind = if status >= 500 { "server_error" } else { "invalid_request_error" };
        ApiError { status, message: message.into(), kind, param: None, code }
    }

    fn param(mut self, p: impl Into<String>) -> Self {
        self.param = Some(p.into());
        self
    }

    /// The response body: `{"error": {message, type, param, code}}`.
    pub fn body(&self) -> Value {
        json!({"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}})
    }
}

/// One tool call the model makes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolCall {
    /// `call_<n>_<hash>`: n counts from 0 within the answer; the hash covers the conversation
    /// up to the last user message, so ids are stable for a request and differ between turns.
    pub id: String,
    /// Tool name, as written on the `TOOL` line.
    pub name: String,
    /// The arguments string, verbatim from the `TOOL` line (`{}` when the line has none).
    pub arguments: String,
}

/// What the model answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Call these tools (finish reason `tool_calls`).
    ToolCalls(Vec<ToolCall>),
    /// Say this (finish reason `stop`).
    Text(String),
}

impl Answer {
    fn finish_reason(&self) -> &'static str {
        match self {
            Answer::ToolCalls(_) => "tool_calls",
            Answer::Text(_) => "stop",
        }
    }

    fn chars(&self) -> usize {
        match self {
            Answer::ToolCalls(calls) => {
                calls.iter().map(|c| c.name.chars().count() + c.arguments.chars().count()).sum()
            }
            Answer::Text(t) => t.chars().count(),
        }
    }
}

/// The text of a message's `content`: a string, or the `text` of its `{"type":"text"}` parts
/// joined by newlines; anything else is empty.
fn text_of(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter(|p| p.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// `TOOL <name> <args>` lines, in order.
fn tool_lines(text: &str) -> Vec<(&str, &str)> {
    text.lines()
        .filter_map(|line| {
            let rest = line.trim().strip_prefix("TOOL")?;
            if !rest.starts_with([' ', '\t']) {
                return None;
            }
            let rest = rest.trim_start();
            let (name, args) = match rest.find(char::is_whitespace) {
                Some(i) => (&rest[..i], rest[i..].trim()),
                None => (rest, ""),
            };
            Some((name, if args.is_empty() { "{}" } else { args }))
        })
        .collect()
}

fn first_chars(s: &str, n: usize) -> String {
    s.chars().take(n).map(|c| if c.is_control() { ' ' } else { c }).collect()
}

/// Decide the answer to a chat-completions request body.
pub fn answer(request: &Value) -> Result<Answer, ApiError> {
    let obj = request.as_object().ok_or_else(|| ApiError::new(400, "the request body must be a JSON object", None))?;
    if let Some(m) = obj.get("model") {
        if !m.is_string() {
            return Err(ApiError::new(400, "model must be a string", None).param("model"));
        }
    }
    if let Some(s) = obj.get("stream") {
        if !s.is_boolean() && !s.is_null() {
            return Err(ApiError::new(400, "stream must be a boolean", None).param("stream"));
        }
    }
    let messages = match obj.get("messages") {
        Some(Value::Array(m)) if !m.is_empty() => m,
        Some(Value::Array(_)) => {
            return Err(ApiError::new(400, "messages must not be empty", None).param("messages"));
        }
        Some(_) => return Err(ApiError::new(400, "messages must be an array", None).param("messages")),
        None => return Err(ApiError::new(400, "Missing required parameter: 'messages'.", None).param("messages")),
    };
    let mut roles = Vec::with_capacity(messages.len());
    for (i, m) in messages.iter().enumerate() {
        match m.get("role").and_then(Value::as_str) {
            Some(r) => roles.push(r),
            None => {
                return Err(ApiError::new(400, format!("messages[{i}] must be an object with a string role"), None)
                    .param(format!("messages[{i}].role")));
            }
        }
    }
    let last_user = roles.iter().rposition(|r| *r == "user").ok_or_else(|| {
        ApiError::new(400, "messages must contain a user message (the fake model answers the last one)", None)
            .param("messages")
    })?;
    let after = messages.get(last_user + 1..).unwrap_or_default();
    let results: Vec<&Value> = after.iter().filter(|m| m.get("role").and_then(Value::as_str) == Some("tool")).collect();
    if !results.is_empty() {
        let parts: Vec<String> = results
            .iter()
            .map(|m| {
                let id = m.get("tool_call_id").and_then(Value::as_str).unwrap_or("(no tool_call_id)");
                format!("{id}: {}", first_chars(&text_of(m.get("content")), 80))
            })
            .collect();
        return Ok(Answer::Text(format!("Tool results: {} calls; {}", results.len(), parts.join("; "))));
    }
    let text = text_of(messages.get(last_user).and_then(|m| m.get("content")));
    if let Some(n) = say_bytes(&text) {
        return Ok(Answer::Text(SAY_TEXT.chars().cycle().take(n).collect()));
    }
    let no_tools = obj.get("tool_choice").and_then(Value::as_str) == Some("none");
    let lines = if no_tools { Vec::new() } else { tool_lines(&text) };
    if lines.is_empty() {
        let echo: Vec<String> =
            text.lines().map(str::trim_end).filter(|l| !l.is_empty()).map(|l| format!("echo: {l}")).collect();
        return Ok(Answer::Text(if echo.is_empty() { "echo: (empty prompt)".to_string() } else { echo.join("\n") }));
    }
    let history = Value::Array(messages.get(..=last_user).unwrap_or_default().to_vec()).to_string();
    let calls = lines
        .into_iter()
        .enumerate()
        .map(|(n, (name, arguments))| {
            let mut h = Sha256::new();
            h.update(history.as_bytes());
            h.update(format!("\0{n}\0{name}\0{arguments}").as_bytes());
            let hash = hex::encode(h.finalize());
            ToolCall {
                id: format!("call_{n}_{}", hash.get(..12).unwrap_or_default()),
                name: name.to_string(),
                arguments: arguments.to_string(),
            }
        })
        .collect();
    Ok(Answer::ToolCalls(calls))
}

/// The most bytes a `SAY <n>` prompt makes the model say.
pub const SAY_MAX: usize = 4 * 1024 * 1024;

/// What a `SAY <n>` answer repeats (ASCII, so n characters are n bytes).
const SAY_TEXT: &str = "pi-conform says a long answer. ";

/// A prompt that is exactly `SAY <n>` (n from 1 to [`SAY_MAX`]): the answer is n bytes of text,
/// so that a daemon's message events can be made larger than its `maxEventBytes`.
fn say_bytes(prompt: &str) -> Option<usize> {
    let n: usize = prompt.trim().strip_prefix("SAY ")?.parse().ok()?;
    (1..=SAY_MAX).contains(&n).then_some(n)
}

/// Estimated prompt tokens: characters of every message's text and tool calls, / 4.
fn prompt_chars(request: &Value) -> usize {
    let Some(messages) = request.get("messages").and_then(Value::as_array) else { return 0 };
    messages
        .iter()
        .map(|m| {
            let calls: usize = m
                .get("tool_calls")
                .and_then(Value::as_array)
                .map(|calls| {
                    calls
                        .iter()
                        .filter_map(|c| c.get("function"))
                        .map(|f| {
                            let s = |k| f.get(k).and_then(Value::as_str).map_or(0, |s| s.chars().count());
                            s("name") + s("arguments")
                        })
                        .sum()
                })
                .unwrap_or(0);
            text_of(m.get("content")).chars().count() + calls
        })
        .sum()
}

fn usage(request: &Value, answer: &Answer) -> Value {
    let prompt = prompt_chars(request).div_ceil(4);
    let completion = answer.chars().div_ceil(4);
    json!({"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion})
}

fn model_of(request: &Value) -> &str {
    request.get("model").and_then(Value::as_str).unwrap_or(MODEL_ID)
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

fn completion_id() -> String {
    format!("chatcmpl-{}", uuid::Uuid::new_v4().simple())
}

/// A non-streaming `chat.completion` object.
pub fn completion(request: &Value, answer: &Answer) -> Value {
    let mut message = json!({"role": "assistant", "content": null, "refusal": null});
    match answer {
        Answer::Text(t) => message["content"] = json!(t),
        Answer::ToolCalls(calls) => {
            message["tool_calls"] = calls
                .iter()
                .map(
                    |c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}),
                )
                .collect();
        }
    }
    json!({
        "id": completion_id(),
        "object": "chat.completion",
        "created": now(),
        "model": model_of(request),
        "system_fingerprint": "fp_pi_conform_fake",
        "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": answer.finish_reason()}],
        "usage": usage(request, answer),
    })
}

/// `s` in `pieces` fragments of near-equal character counts (fewer when `s` is shorter),
/// always cut on character boundaries.
fn fragments(s: &str, pieces: usize) -> Vec<&str> {
    let bounds: Vec<usize> = s.char_indices().map(|(i, _)| i).chain(std::iter::once(s.len())).collect();
    let chars = bounds.len() - 1;
    let pieces = pieces.clamp(1, chars.max(1));
    (0..pieces)
        .map(|k| {
            let from = bounds.get(k * chars / pieces).copied().unwrap_or(s.len());
            let to = bounds.get((k + 1) * chars / pieces).copied().unwrap_or(s.len());
            s.get(from..to).unwrap_or_default()
        })
        .collect()
}

/// The `chat.completion.chunk` objects of a streamed answer, in order (without `[DONE]`).
pub fn stream_chunks(request: &Value, answer: &Answer) -> Vec<Value> {
    let id = completion_id();
    let created = now();
    let model = model_of(request);
    let include_usage = request.pointer("/stream_options/include_usage").and_then(Value::as_bool) == Some(true);
    let chunk = |delta: Value, finish: Option<&str>| {
        let mut c = json!({
            "id": id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "system_fingerprint": "fp_pi_conform_fake",
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
        });
        if include_usage {
            c["usage"] = Value::Null;
        }
        c
    };
    let mut out = vec![chunk(json!({"role": "assistant"}), None)];
    match answer {
        Answer::Text(t) => {
            for piece in fragments(t, 3) {
                out.push(chunk(json!({"content": piece}), None));
            }
        }
        Answer::ToolCalls(calls) => {
            for (i, c) in calls.iter().enumerate() {
                out.push(chunk(
                    json!({"tool_calls": [{"index": i, "id": c.id, "type": "function",
                                           "function": {"name": c.name, "arguments": ""}}]}),
                    None,
                ));
                let pieces = c.arguments.chars().count().div_ceil(16).clamp(MIN_ARGUMENT_FRAGMENTS, 64);
                for frag in fragments(&c.arguments, pieces) {
                    out.push(chunk(json!({"tool_calls": [{"index": i, "function": {"arguments": frag}}]}), None));
                }
            }
        }
    }
    out.push(chunk(json!({}), Some(answer.finish_reason())));
    if include_usage {
        out.push(json!({
            "id": id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "system_fingerprint": "fp_pi_conform_fake",
            "choices": [],
            "usage": usage(request, answer),
        }));
    }
    out
}

/// `GET /v1/models`.
pub fn models() -> Value {
    json!({"object": "list", "data": [{"id": MODEL_ID, "object": "model", "created": 0, "owned_by": "pi-conform"}]})
}

// ---------------------------------------------------------------------------------------------
// HTTP/1.1, on hyper.

/// What to send back.
enum Reply {
    Json { status: u16, body: Value, allow: Option<&'static str> },
    Stream(Vec<Value>),
}

impl Reply {
    fn error(e: ApiError) -> Self {
        Reply::Json { status: e.status, body: e.body(), allow: None }
    }
}

fn err(status: u16, message: impl Into<String>, code: &'static str) -> Reply {
    Reply::error(ApiError::new(status, message, Some(code)))
}

fn route(method: &Method, path: &str, body: &[u8]) -> Reply {
    const CHAT: [&str; 2] = ["/v1/chat/completions", "/chat/completions"];
    const MODELS: [&str; 2] = ["/v1/models", "/models"];
    match *method {
        Method::POST if CHAT.contains(&path) => chat(body),
        Method::GET if MODELS.contains(&path) => Reply::Json { status: 200, body: models(), allow: None },
        _ if CHAT.contains(&path) || MODELS.contains(&path) => Reply::Json {
            status: 405,
            body: ApiError::new(405, format!("{method} is not allowed on {path}"), Some("method_not_allowed")).body(),
            allow: Some(if CHAT.contains(&path) { "POST" } else { "GET" }),
        },
        _ => err(
            404,
            format!(
                "Unknown request URL: {method} {path}. This fake model serves POST /v1/chat/completions and GET \
                 /v1/models."
            ),
            "unknown_url",
        ),
    }
}

fn chat(body: &[u8]) -> Reply {
    let request: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => {
            return Reply::error(ApiError::new(
                400,
                format!(
                    "We could not parse the JSON body of your request ({e}). The fake model expects a JSON \
                     chat-completions request."
                ),
                None,
            ))
        }
    };
    let a = match answer(&request) {
        Ok(a) => a,
        Err(e) => return Reply::error(e),
    };
    if request.get("stream").and_then(Value::as_bool) == Some(true) {
        Reply::Stream(stream_chunks(&request, &a))
    } else {
        Reply::Json { status: 200, body: completion(&request, &a), allow: None }
    }
}

fn bad(message: impl Into<String>) -> ApiError {
    ApiError::new(400, message, Some("bad_request"))
}

fn too_large() -> ApiError {
    ApiError::new(
        413,
        format!("the request body exceeds the fake model's limit of {MAX_BODY_BYTES} bytes"),
        Some("request_too_large"),
    )
}

/// A response body held in memory: one frame per JSON document or SSE event, so a stream
/// goes out as one chunk per event.
pub struct ReplyBody {
    frames: VecDeque<Bytes>,
    /// `Some` for a JSON body (sent with `Content-Length`); `None` for an event stream
    /// (chunked, or ended by closing the connection for HTTP/1.0).
    len: Option<u64>,
}

impl Body for ReplyBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.frames.pop_front().map(|b| Ok(Frame::data(b))))
    }

    fn is_end_stream(&self) -> bool {
        self.frames.is_empty() && self.len.is_some()
    }

    fn size_hint(&self) -> SizeHint {
        self.len.map_or_else(SizeHint::default, SizeHint::with_exact)
    }
}

/// The response for `reply`; `close` asks hyper to close the connection after it.
fn respond(reply: Reply, close: bool) -> Response<ReplyBody> {
    let (status, content_type, body, allow) = match reply {
        Reply::Json { status, body, allow } => {
            let bytes = Bytes::from(body.to_string());
            let len = bytes.len() as u64;
            (status, "application/json", ReplyBody { frames: VecDeque::from([bytes]), len: Some(len) }, allow)
        }
        Reply::Stream(chunks) => {
            let frames = chunks
                .iter()
                .map(|c| Bytes::from(format!("data: {c}\n\n")))
                .chain(std::iter::once(Bytes::from_static(b"data: [DONE]\n\n")))
                .collect();
            (200, "text/event-stream; charset=utf-8", ReplyBody { frames, len: None }, None)
        }
    };
    let mut r = Response::new(body);
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let h = r.headers_mut();
    h.insert(header::SERVER, HeaderValue::from_static("pi-conform-fake-model"));
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    if content_type.starts_with("text/event-stream") {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    }
    if let Some(a) = allow {
        h.insert(header::ALLOW, HeaderValue::from_static(a));
    }
    if close {
        h.insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    r
}

/// The framing rules hyper leaves to the application (hyper itself refuses malformed request
/// lines and headers, conflicting `Content-Length`s, transfer codings that do not end in
/// `chunked`, and heads over [`MAX_HEAD_BYTES`]), then the body, bounded in size and time.
async fn read_request(req: Request<Incoming>, cfg: &Config) -> Result<(Method, String, Vec<u8>), ApiError> {
    let (parts, body) = req.into_parts();
    let headers = &parts.headers;
    if parts.version == Version::HTTP_11 && headers.get_all(header::HOST).iter().count() != 1 {
        return Err(bad("an HTTP/1.1 request needs exactly one Host header"));
    }
    let mut codings = Vec::new();
    for v in headers.get_all(header::TRANSFER_ENCODING) {
        let v = v.to_str().map_err(|_| bad("malformed Transfer-Encoding"))?;
        codings.extend(v.split(',').map(|t| t.trim().to_ascii_lowercase()).filter(|t| !t.is_empty()));
    }
    let chunked = match codings.as_slice() {
        [] => false,
        [only] if only == "chunked" => true,
        _ => {
            return Err(ApiError::new(501, "only the chunked transfer coding is implemented", Some("not_implemented")));
        }
    };
    // hyper has checked that every Content-Length is one and the same number.
    let content_length = headers
        .get(header::CONTENT_LENGTH)
        .map(|v| v.to_str().ok().and_then(|s| s.trim().parse::<u64>().ok()).unwrap_or(u64::MAX));
    if content_length.is_some_and(|n| n > MAX_BODY_BYTES as u64) {
        return Err(too_large());
    }
    if let Some(e) = headers.get(header::EXPECT) {
        if !e.as_bytes().eq_ignore_ascii_case(b"100-continue") {
            return Err(ApiError::new(417, "unsupported Expect", Some("expectation_failed")));
        }
    }
    if parts.method == Method::POST && content_length.is_none() && !chunked {
        return Err(ApiError::new(
            411,
            "a POST needs Content-Length or chunked Transfer-Encoding",
            Some("length_required"),
        ));
    }
    let deadline = Instant::now() + cfg.request_timeout;
    let body = read_body(body, deadline).await?;
    Ok((parts.method, parts.uri.path().to_string(), body))
}

/// Collect a request body (hyper sends `100 Continue` on the first read when it was asked for).
async fn read_body(mut body: Incoming, deadline: Instant) -> Result<Vec<u8>, ApiError> {
    let mut out = Vec::new();
    loop {
        let frame = match timeout_at(deadline, std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx))).await {
            Err(_) => return Err(ApiError::new(408, "the request did not arrive in time", Some("timeout"))),
            Ok(None) => return Ok(out),
            Ok(Some(Err(e))) => return Err(bad(format!("the request body could not be read: {e}"))),
            Ok(Some(Ok(f))) => f,
        };
        if let Ok(data) = frame.into_data() {
            if out.len().saturating_add(data.len()) > MAX_BODY_BYTES {
                return Err(too_large());
            }
            out.extend_from_slice(&data);
        }
    }
}

async fn handle(req: Request<Incoming>, cfg: &Config) -> Response<ReplyBody> {
    match read_request(req, cfg).await {
        Ok((method, path, body)) => {
            tracing::debug!(%method, %path, bytes = body.len(), "fake-model request");
            respond(route(&method, &path, &body), false)
        }
        // The framing may be out of step with the peer: answer, then close.
        Err(e) => respond(Reply::error(e), true),
    }
}

async fn connection(stream: TcpStream, slot: OwnedSemaphorePermit, cfg: Arc<Config>) {
    let _ = stream.set_nodelay(true);
    let io =
        TokioIo::new(Guarded { stream: Some(stream), slot: Some(slot), write_timeout: cfg.write_timeout, stall: None });
    let service = {
        let cfg = cfg.clone();
        service_fn(move |req| {
            let cfg = cfg.clone();
            async move { Ok::<_, Infallible>(handle(req, &cfg).await) }
        })
    };
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(cfg.idle_timeout)
        .max_header_size(MAX_HEAD_BYTES)
        .keep_alive(true);
    if let Err(e) = http.serve_connection(io, service).await {
        tracing::debug!(error = %e, "fake-model: connection ended");
    }
}

/// The connection's socket, with a deadline on every write that makes no progress, and a
/// graceful close: when hyper drops it, a task sends FIN and drains what the peer still sends
/// (briefly, bounded) so that a reset does not destroy a response in flight. It holds the
/// connection's slot until then.
struct Guarded {
    stream: Option<TcpStream>,
    slot: Option<OwnedSemaphorePermit>,
    write_timeout: Duration,
    /// Started when a write first blocks; cleared by progress.
    stall: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Guarded {
    fn stream(&mut self) -> io::Result<Pin<&mut TcpStream>> {
        self.stream.as_mut().map(Pin::new).ok_or_else(|| io::Error::from(io::ErrorKind::NotConnected))
    }

    /// After the socket was not ready to write: fail once the write has been blocked too long.
    fn blocked<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        let timeout = self.write_timeout;
        let stall = self.stall.get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        match stall.as_mut().poll(cx) {
            Poll::Ready(()) => {
                Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, "fake-model: a response write timed out")))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn written<T>(&mut self, p: Poll<io::Result<T>>, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        match p {
            Poll::Ready(r) => {
                self.stall = None;
                Poll::Ready(r)
            }
            Poll::Pending => self.blocked(cx),
        }
    }
}

impl AsyncRead for Guarded {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        self.stream()?.poll_read(cx, buf)
    }
}

impl AsyncWrite for Guarded {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let p = self.stream()?.poll_write(cx, buf);
        self.written(p, cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let p = self.stream()?.poll_write_vectored(cx, bufs);
        self.written(p, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.as_ref().is_some_and(|s| s.is_write_vectored())
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let p = self.stream()?.poll_flush(cx);
        self.written(p, cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let p = self.stream()?.poll_shutdown(cx);
        self.written(p, cx)
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        let (Some(stream), slot) = (self.stream.take(), self.slot.take()) else { return };
        // Outside a runtime (it is shutting down) the socket simply closes.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(linger(stream, slot));
        }
    }
}

/// Close gracefully: FIN, then drain what the peer still sends (at most a second, and at most
/// twice the body limit) before the socket closes.
async fn linger(mut stream: TcpStream, _slot: Option<OwnedSemaphorePermit>) {
    let _ = timeout(Duration::from_secs(1), stream.shutdown()).await;
    let until = Instant::now() + Duration::from_secs(1);
    let mut sink = [0u8; 8192];
    let mut drained = 0usize;
    while drained < 2 * MAX_BODY_BYTES {
        match timeout_at(until, stream.read(&mut sink)).await {
            Ok(Ok(n)) if n > 0 => drained += n,
            _ => break,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fragments_cut_on_char_boundaries() {
        assert_eq!(fragments("{}", 3), vec!["{", "}"]);
        assert_eq!(fragments("", 3), vec![""]);
        let s = "{\"a\":\"é✓🎉\"}";
        let f = fragments(s, 5);
        assert_eq!(f.len(), 5);
        assert_eq!(f.concat(), s);
    }

    #[test]
    fn tool_lines_parse() {
        let t = "hello\nTOOL fs_read {\"path\": \"a b\"}\n  TOOL\tfs_list\nTOOLS x {}\nTOOL";
        assert_eq!(tool_lines(t), vec![("fs_read", "{\"path\": \"a b\"}"), ("fs_list", "{}")]);
    }

    #[test]
    fn say_answers_exactly_n_bytes_within_its_bounds() {
        let ask = |p: &str| answer(&serde_json::json!({"messages": [{"role": "user", "content": p}]}));
        for n in [1, 31, 32, 1_114_112, SAY_MAX] {
            match ask(&format!("SAY {n}")) {
                Ok(Answer::Text(t)) => assert!(t.len() == n && t.is_ascii(), "SAY {n}: {} bytes", t.len()),
                _ => panic!("SAY {n} is not a text answer"),
            }
        }
        // Out of bounds or not alone: an echo, as any other prompt.
        for p in ["SAY 0", &format!("SAY {}", SAY_MAX + 1), "SAY -1", "SAY x", "hello\nSAY 5"] {
            match ask(p) {
                Ok(Answer::Text(t)) => assert!(t.starts_with("echo: "), "{p:?} answered {t:?}"),
                _ => panic!("{p:?} is not a text answer"),
            }
        }
    }
}
