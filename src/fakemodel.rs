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
//! The HTTP/1.1 server is deliberately small and bounded: keep-alive, `Content-Length` and
//! chunked request bodies, `Expect: 100-continue`, 64 KiB of request head, 8 MiB of body, a
//! connection cap, and a deadline on every read and write.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;
use tokio::time::{timeout, timeout_at, Instant};

/// The one model `GET /v1/models` lists (requests may name any model).
pub const MODEL_ID: &str = "pi-conform-fake";
/// Largest request body (after chunked decoding).
pub const MAX_BODY_BYTES: usize = 8 << 20;
/// Largest request head (request line and headers), and largest chunked trailer section.
pub const MAX_HEAD_BYTES: usize = 64 << 10;
/// Largest chunk-size line of a chunked body.
const MAX_CHUNK_LINE: usize = 1024;
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
    /// How long an open connection may sit idle between requests.
    pub idle_timeout: Duration,
    /// How long one request (head and body) may take to arrive once it has begun.
    pub request_timeout: Duration,
    /// How long one response write may block.
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
        let cfg = cfg.clone();
        tasks.spawn(async move {
            let _slot = permit;
            connection(stream, &cfg).await;
        });
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
// HTTP/1.1.

/// A parsed request.
struct Request {
    method: String,
    path: String,
    http10: bool,
    keep_alive: bool,
    body: Vec<u8>,
}

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

fn route(req: &Request) -> Reply {
    const CHAT: [&str; 2] = ["/v1/chat/completions", "/chat/completions"];
    const MODELS: [&str; 2] = ["/v1/models", "/models"];
    let path = req.path.as_str();
    match req.method.as_str() {
        "POST" if CHAT.contains(&path) => chat(&req.body),
        "GET" if MODELS.contains(&path) => Reply::Json { status: 200, body: models(), allow: None },
        _ if CHAT.contains(&path) || MODELS.contains(&path) => Reply::Json {
            status: 405,
            body: ApiError::new(405, format!("{} is not allowed on {path}", req.method), Some("method_not_allowed"))
                .body(),
            allow: Some(if CHAT.contains(&path) { "POST" } else { "GET" }),
        },
        m => err(
            404,
            format!(
                "Unknown request URL: {m} {path}. This fake model serves POST /v1/chat/completions and GET /v1/models."
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

fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        411 => "Length Required",
        413 => "Content Too Large",
        417 => "Expectation Failed",
        431 => "Request Header Fields Too Large",
        501 => "Not Implemented",
        505 => "HTTP Version Not Supported",
        _ => "Error",
    }
}

/// IMF-fixdate (RFC 9110 §5.6.7) of a Unix time.
fn http_date(secs: u64) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let days = secs / 86_400;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    format!(
        "{}, {day:02} {} {year} {:02}:{:02}:{:02} GMT",
        DAYS.get((days % 7) as usize).unwrap_or(&"Thu"),
        MONTHS.get(month.saturating_sub(1) as usize).unwrap_or(&"Jan"),
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// How a connection ended or failed before a request was complete.
enum Fail {
    /// Answer this, then close.
    Reply(ApiError),
    /// Close without a word (EOF, reset, idle timeout).
    Silent,
}

struct Conn<'a> {
    stream: TcpStream,
    buf: Vec<u8>,
    cfg: &'a Config,
}

async fn connection(stream: TcpStream, cfg: &Config) {
    let _ = stream.set_nodelay(true);
    let mut c = Conn { stream, buf: Vec::new(), cfg };
    loop {
        let req = match c.read_request().await {
            Ok(r) => r,
            Err(Fail::Reply(e)) => {
                let _ = c.send(Reply::error(e), false, false).await;
                c.linger().await;
                return;
            }
            Err(Fail::Silent) => return,
        };
        tracing::debug!(method = %req.method, path = %req.path, bytes = req.body.len(), "fake-model request");
        let reply = route(&req);
        if !c.send(reply, req.http10, req.keep_alive).await {
            return;
        }
        if !req.keep_alive {
            c.linger().await;
            return;
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn is_token(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

fn bad(message: impl Into<String>) -> Fail {
    Fail::Reply(ApiError::new(400, message, Some("bad_request")))
}

fn too_large() -> Fail {
    Fail::Reply(ApiError::new(
        413,
        format!("the request body exceeds the fake model's limit of {MAX_BODY_BYTES} bytes"),
        Some("request_too_large"),
    ))
}

/// The framing-relevant fields of a request head.
struct Head {
    method: String,
    path: String,
    http10: bool,
    keep_alive: bool,
    content_length: Option<usize>,
    chunked: bool,
    expect_continue: bool,
}

fn parse_head(head: &[u8]) -> Result<Head, Fail> {
    let head = std::str::from_utf8(head).map_err(|_| bad("the request head is not UTF-8"))?;
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or_default();
    let parts: Vec<&str> = request_line.split(' ').collect();
    let [method, target, version] = parts.as_slice() else {
        return Err(bad("malformed request line"));
    };
    let http10 = match *version {
        "HTTP/1.1" => false,
        "HTTP/1.0" => true,
        v if v.starts_with("HTTP/") => {
            return Err(Fail::Reply(ApiError::new(505, format!("{v} is not supported"), Some("bad_request"))));
        }
        _ => return Err(bad("malformed request line")),
    };
    if !is_token(method) {
        return Err(bad("malformed method"));
    }
    // origin-form, or absolute-form (RFC 9112 §3.2.2) reduced to its path.
    let target = match target.strip_prefix("http://").or_else(|| target.strip_prefix("https://")) {
        Some(rest) => rest.find('/').and_then(|i| rest.get(i..)).unwrap_or("/"),
        None => target,
    };
    if !target.starts_with('/') || target.bytes().any(|b| b <= b' ' || b == 0x7f) {
        return Err(bad("malformed request target"));
    }
    let path = target.split(['?', '#']).next().unwrap_or(target).to_string();
    let mut content_length: Option<usize> = None;
    let mut te: Vec<String> = Vec::new();
    let mut connection: Vec<String> = Vec::new();
    let mut expect: Option<String> = None;
    let mut host = 0usize;
    for line in lines {
        if line.starts_with([' ', '\t']) {
            return Err(bad("obsolete header line folding is not accepted"));
        }
        let (name, value) = line.split_once(':').ok_or_else(|| bad("malformed header line"))?;
        if !is_token(name) {
            return Err(bad(format!("malformed header name {name:?}")));
        }
        let value = value.trim_matches([' ', '\t']);
        match name.to_ascii_lowercase().as_str() {
            "content-length" => {
                if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(bad("invalid Content-Length"));
                }
                let n = value.parse::<u64>().map_or(usize::MAX, |n| usize::try_from(n).unwrap_or(usize::MAX));
                if content_length.is_some_and(|m| m != n) {
                    return Err(bad("conflicting Content-Length headers"));
                }
                content_length = Some(n);
            }
            "transfer-encoding" => {
                te.extend(value.split(',').map(|t| t.trim().to_ascii_lowercase()).filter(|t| !t.is_empty()))
            }
            "connection" => connection.extend(value.split(',').map(|t| t.trim().to_ascii_lowercase())),
            "expect" => expect = Some(value.to_ascii_lowercase()),
            "host" => host += 1,
            _ => {}
        }
    }
    if !http10 && host != 1 {
        return Err(bad("an HTTP/1.1 request needs exactly one Host header"));
    }
    let chunked = match te.as_slice() {
        [] => false,
        [only] if only == "chunked" => true,
        [.., last] if last == "chunked" => {
            return Err(Fail::Reply(ApiError::new(
                501,
                "only the chunked transfer coding is implemented",
                Some("not_implemented"),
            )));
        }
        _ => return Err(bad("a request's transfer codings must end with chunked")),
    };
    if chunked && content_length.is_some() {
        return Err(bad("both Transfer-Encoding and Content-Length"));
    }
    if content_length.is_some_and(|n| n > MAX_BODY_BYTES) {
        return Err(too_large());
    }
    let expect_continue = match expect.as_deref() {
        None => false,
        Some("100-continue") => !http10,
        Some(_) => {
            return Err(Fail::Reply(ApiError::new(417, "unsupported Expect", Some("expectation_failed"))));
        }
    };
    let keep_alive =
        if http10 { connection.iter().any(|t| t == "keep-alive") } else { !connection.iter().any(|t| t == "close") };
    Ok(Head { method: method.to_string(), path, http10, keep_alive, content_length, chunked, expect_continue })
}

/// Incremental chunked-body decoder (RFC 9112 §7.1); trailers are read and ignored.
enum Chunk {
    Size,
    Data(usize),
    DataEnd,
    Trailer(usize),
    Done,
}

impl Conn<'_> {
    /// Read more bytes into the buffer before `deadline`.
    async fn fill(&mut self, deadline: Instant) -> Result<(), Fail> {
        self.buf.reserve(16 << 10);
        match timeout_at(deadline, self.stream.read_buf(&mut self.buf)).await {
            Err(_) => Err(Fail::Reply(ApiError::new(408, "the request did not arrive in time", Some("timeout")))),
            Ok(Ok(0)) | Ok(Err(_)) => Err(Fail::Silent),
            Ok(Ok(_)) => Ok(()),
        }
    }

    async fn read_request(&mut self) -> Result<Request, Fail> {
        // Idle: wait for the first byte of a request.
        let idle = Instant::now() + self.cfg.idle_timeout;
        loop {
            // RFC 9112 §2.2: ignore empty lines before a request line.
            let skip = self.buf.iter().take_while(|b| **b == b'\r' || **b == b'\n').count();
            self.buf.drain(..skip);
            if !self.buf.is_empty() {
                break;
            }
            self.fill(idle).await.map_err(|_| Fail::Silent)?;
        }
        let deadline = Instant::now() + self.cfg.request_timeout;
        let mut scanned = 0usize;
        let head_end = loop {
            // Only the new bytes (and 3 before them) are searched: no quadratic rescans.
            let from = scanned.saturating_sub(3);
            let window = self.buf.get(from..(MAX_HEAD_BYTES + 4).min(self.buf.len())).unwrap_or_default();
            if let Some(i) = find(window, b"\r\n\r\n") {
                break from + i;
            }
            scanned = self.buf.len();
            if self.buf.len() > MAX_HEAD_BYTES {
                return Err(Fail::Reply(ApiError::new(
                    431,
                    format!("the request head exceeds {MAX_HEAD_BYTES} bytes"),
                    Some("request_header_fields_too_large"),
                )));
            }
            self.fill(deadline).await?;
        };
        let head = parse_head(self.buf.get(..head_end).unwrap_or_default())?;
        self.buf.drain(..head_end + 4);
        if head.method == "POST" && head.content_length.is_none() && !head.chunked {
            return Err(Fail::Reply(ApiError::new(
                411,
                "a POST needs Content-Length or chunked Transfer-Encoding",
                Some("length_required"),
            )));
        }
        let needs_body = head.chunked || head.content_length.unwrap_or(0) > self.buf.len();
        if head.expect_continue && needs_body {
            self.write(b"HTTP/1.1 100 Continue\r\n\r\n").await.then_some(()).ok_or(Fail::Silent)?;
        }
        let body = if head.chunked {
            self.read_chunked(deadline).await?
        } else {
            let n = head.content_length.unwrap_or(0);
            while self.buf.len() < n {
                self.fill(deadline).await?;
            }
            self.buf.drain(..n).collect()
        };
        Ok(Request { method: head.method, path: head.path, http10: head.http10, keep_alive: head.keep_alive, body })
    }

    async fn read_chunked(&mut self, deadline: Instant) -> Result<Vec<u8>, Fail> {
        let mut body = Vec::new();
        let mut state = Chunk::Size;
        // How much of the buffer is known to hold no CRLF (no quadratic rescans).
        let mut scanned = 0usize;
        let crlf = |buf: &[u8], scanned: &mut usize| {
            let from = scanned.saturating_sub(1);
            let hit = buf.get(from..).and_then(|w| find(w, b"\r\n")).map(|i| from + i);
            *scanned = if hit.is_some() { 0 } else { buf.len() };
            hit
        };
        loop {
            let mut progressed = true;
            while progressed {
                progressed = false;
                match state {
                    Chunk::Size => {
                        if let Some(i) = crlf(&self.buf, &mut scanned) {
                            let line = std::str::from_utf8(self.buf.get(..i).unwrap_or_default())
                                .map_err(|_| bad("malformed chunk size"))?;
                            let size = line.split(';').next().unwrap_or_default().trim_matches([' ', '\t']);
                            if size.is_empty() || size.len() > 15 || !size.bytes().all(|b| b.is_ascii_hexdigit()) {
                                return Err(bad("malformed chunk size"));
                            }
                            let size = usize::from_str_radix(size, 16).map_err(|_| bad("malformed chunk size"))?;
                            if body.len().saturating_add(size) > MAX_BODY_BYTES {
                                return Err(too_large());
                            }
                            self.buf.drain(..i + 2);
                            state = if size == 0 { Chunk::Trailer(0) } else { Chunk::Data(size) };
                            progressed = true;
                        } else if self.buf.len() > MAX_CHUNK_LINE {
                            return Err(bad("chunk size line too long"));
                        }
                    }
                    Chunk::Data(left) => {
                        let take = left.min(self.buf.len());
                        if take > 0 {
                            body.extend(self.buf.drain(..take));
                            state = if take == left { Chunk::DataEnd } else { Chunk::Data(left - take) };
                            progressed = true;
                        }
                    }
                    Chunk::DataEnd => {
                        if self.buf.len() >= 2 {
                            if !self.buf.starts_with(b"\r\n") {
                                return Err(bad("chunk data not followed by CRLF"));
                            }
                            self.buf.drain(..2);
                            state = Chunk::Size;
                            progressed = true;
                        }
                    }
                    Chunk::Trailer(seen) => {
                        if let Some(i) = crlf(&self.buf, &mut scanned) {
                            self.buf.drain(..i + 2);
                            state = if i == 0 { Chunk::Done } else { Chunk::Trailer(seen + i + 2) };
                            progressed = true;
                        }
                        let pending = if progressed { 0 } else { self.buf.len() };
                        if matches!(state, Chunk::Trailer(seen) if seen + pending > MAX_HEAD_BYTES) {
                            return Err(Fail::Reply(ApiError::new(
                                431,
                                "the chunked trailer section is too large",
                                Some("request_header_fields_too_large"),
                            )));
                        }
                    }
                    Chunk::Done => return Ok(body),
                }
            }
            if let Chunk::Done = state {
                return Ok(body);
            }
            self.fill(deadline).await?;
        }
    }

    /// Write all of `bytes` within the write timeout.
    async fn write(&mut self, bytes: &[u8]) -> bool {
        matches!(timeout(self.cfg.write_timeout, self.stream.write_all(bytes)).await, Ok(Ok(())))
    }

    fn head(status: u16, content_type: &str, http10: bool, keep_alive: bool) -> String {
        let mut h = format!(
            "HTTP/1.1 {status} {}\r\ndate: {}\r\nserver: pi-conform-fake-model\r\ncontent-type: {content_type}\r\n",
            reason(status),
            http_date(now())
        );
        if !keep_alive {
            h.push_str("connection: close\r\n");
        } else if http10 {
            h.push_str("connection: keep-alive\r\n");
        }
        h
    }

    /// Send a reply; false when the connection is gone.
    async fn send(&mut self, reply: Reply, http10: bool, keep_alive: bool) -> bool {
        match reply {
            Reply::Json { status, body, allow } => {
                let body = body.to_string();
                let mut h = Self::head(status, "application/json", http10, keep_alive);
                if let Some(a) = allow {
                    h.push_str(&format!("allow: {a}\r\n"));
                }
                h.push_str(&format!("content-length: {}\r\n\r\n", body.len()));
                h.push_str(&body);
                self.write(h.as_bytes()).await
            }
            Reply::Stream(chunks) => {
                // HTTP/1.0 has no chunked coding: the body ends when the connection closes.
                let chunked = !http10;
                let keep_alive = keep_alive && chunked;
                let mut h = Self::head(200, "text/event-stream; charset=utf-8", http10, keep_alive);
                h.push_str("cache-control: no-cache\r\n");
                if chunked {
                    h.push_str("transfer-encoding: chunked\r\n");
                }
                h.push_str("\r\n");
                if !self.write(h.as_bytes()).await {
                    return false;
                }
                let events =
                    chunks.iter().map(|c| format!("data: {c}\n\n")).chain(std::iter::once("data: [DONE]\n\n".into()));
                for ev in events {
                    let frame = if chunked { format!("{:x}\r\n{ev}\r\n", ev.len()) } else { ev };
                    if !self.write(frame.as_bytes()).await || self.stream.flush().await.is_err() {
                        return false;
                    }
                }
                if chunked && !self.write(b"0\r\n\r\n").await {
                    return false;
                }
                if !keep_alive {
                    self.linger().await;
                    return false;
                }
                true
            }
        }
    }

    /// Close gracefully: FIN, then drain what the peer still sends (briefly, bounded) so that a
    /// reset does not destroy the response in flight.
    async fn linger(&mut self) {
        let _ = timeout(Duration::from_secs(1), self.stream.shutdown()).await;
        let until = Instant::now() + Duration::from_secs(1);
        let mut sink = [0u8; 8192];
        let mut drained = 0usize;
        while drained < 2 * MAX_BODY_BYTES {
            match timeout_at(until, self.stream.read(&mut sink)).await {
                Ok(Ok(n)) if n > 0 => drained += n,
                _ => break,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_dates() {
        assert_eq!(http_date(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(http_date(784_111_777), "Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(http_date(951_782_400), "Tue, 29 Feb 2000 00:00:00 GMT");
    }

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
}
