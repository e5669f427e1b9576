//! `pi-conform fake-model`: the OpenAI-compatible endpoint spoken to over raw HTTP/1.1 (and,
//! when the `openai` Python package is installed, through the official OpenAI client).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use pi_conform::fakemodel::{parse_listen, Config, FakeModelError, FakeModelServer, MODEL_ID};
use serde_json::{json, Value};

fn server() -> FakeModelServer {
    FakeModelServer::start("127.0.0.1:0").expect("start the fake model")
}

struct Resp {
    /// `HTTP/1.1`, or `HTTP/1.0` in answer to an HTTP/1.0 request.
    version: String,
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Resp {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }
    fn text(&self) -> String {
        String::from_utf8(self.body.clone()).expect("UTF-8 body")
    }
    /// The `data:` payloads of an SSE body, in order.
    fn sse(&self) -> Vec<String> {
        assert_eq!(self.header("content-type"), Some("text/event-stream; charset=utf-8"));
        let text = self.text();
        assert!(text.ends_with("\n\n"), "SSE body must end with a blank line: {text:?}");
        text.split("\n\n")
            .filter(|e| !e.is_empty())
            .map(|e| e.strip_prefix("data: ").unwrap_or_else(|| panic!("not a data event: {e:?}")).to_string())
            .collect()
    }
}

/// A raw HTTP/1.1 client connection.
struct Conn {
    r: BufReader<TcpStream>,
    w: TcpStream,
}

impl Conn {
    fn open(addr: SocketAddr) -> Conn {
        let s = TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        Conn { r: BufReader::new(s.try_clone().unwrap()), w: s }
    }

    fn send(&mut self, bytes: &[u8]) {
        self.w.write_all(bytes).expect("write");
    }

    fn post(&mut self, path: &str, body: &str) {
        self.send(
            format!(
                "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        );
    }

    fn line(&mut self) -> String {
        let mut l = String::new();
        self.r.read_line(&mut l).expect("read a line");
        assert!(l.ends_with("\r\n"), "line not CRLF-terminated: {l:?}");
        l.truncate(l.len() - 2);
        l
    }

    /// Read one final response (1xx interim responses are skipped).
    fn response(&mut self) -> Resp {
        loop {
            let status_line = self.line();
            let mut parts = status_line.splitn(3, ' ');
            let version = parts.next().unwrap_or_default().to_string();
            assert!(version == "HTTP/1.1" || version == "HTTP/1.0", "{status_line}");
            let status: u16 = parts.next().unwrap().parse().unwrap();
            let mut headers = Vec::new();
            loop {
                let l = self.line();
                if l.is_empty() {
                    break;
                }
                let (n, v) = l.split_once(':').expect("header line");
                headers.push((n.to_ascii_lowercase(), v.trim().to_string()));
            }
            if (100..200).contains(&status) {
                continue;
            }
            let mut resp = Resp { version, status, headers, body: Vec::new() };
            if resp.header("transfer-encoding") == Some("chunked") {
                loop {
                    let size = usize::from_str_radix(&self.line(), 16).expect("chunk size");
                    if size == 0 {
                        assert_eq!(self.line(), "", "no trailers expected");
                        break;
                    }
                    let mut chunk = vec![0; size];
                    self.r.read_exact(&mut chunk).unwrap();
                    resp.body.extend(chunk);
                    assert_eq!(self.line(), "");
                }
            } else if let Some(n) = resp.header("content-length") {
                let mut body = vec![0; n.parse().unwrap()];
                self.r.read_exact(&mut body).unwrap();
                resp.body = body;
            } else {
                self.r.read_to_end(&mut resp.body).unwrap();
            }
            return resp;
        }
    }

    /// The server closed the connection (EOF, or a reset).
    fn closed(&mut self) -> bool {
        let mut b = [0u8; 1];
        matches!(self.r.read(&mut b), Ok(0) | Err(_))
    }
}

fn chat(addr: SocketAddr, body: &Value) -> Resp {
    let mut c = Conn::open(addr);
    c.post("/v1/chat/completions", &body.to_string());
    c.response()
}

fn user(text: &str) -> Value {
    json!({"role": "user", "content": text})
}

const READ_ARGS: &str = r#"{"path": "docs/\"quoted\" name.txt", "note": "héllo ✓ 日本 🎉"}"#;
const WRITE_ARGS: &str = r#"{"path":"out/a.txt","content":"line1\nline2 \u00e9 \\ end"}"#;

fn two_tool_prompt() -> String {
    format!("Please do two things.\nTOOL fs_read {READ_ARGS}\nand then\n  TOOL fs_write {WRITE_ARGS}\nthanks")
}

fn is_call_id(id: &str, n: usize) -> bool {
    let Some(rest) = id.strip_prefix(&format!("call_{n}_")) else { return false };
    rest.len() == 12 && rest.bytes().all(|b| b.is_ascii_hexdigit())
}

#[test]
fn tool_calls_non_streaming() {
    let s = server();
    let r = chat(
        s.addr(),
        &json!({"model": "whatever-model", "messages": [{"role": "system", "content": "be a tool user"}, user(&two_tool_prompt())],
                "tools": [{"type": "function", "function": {"name": "fs_read", "parameters": {"type": "object"}}}]}),
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert!(r.header("date").is_some_and(|d| d.ends_with(" GMT")));
    let v = r.json();
    assert_eq!(v["object"], "chat.completion");
    assert!(v["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert!(v["created"].as_u64().unwrap() > 1_600_000_000);
    assert_eq!(v["model"], "whatever-model", "any model name is accepted and echoed");
    let choice = &v["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls");
    assert_eq!(choice["message"]["role"], "assistant");
    assert_eq!(choice["message"]["content"], Value::Null);
    let calls = choice["message"]["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 2);
    for (n, (call, (name, args))) in calls.iter().zip([("fs_read", READ_ARGS), ("fs_write", WRITE_ARGS)]).enumerate() {
        assert!(is_call_id(call["id"].as_str().unwrap(), n), "{call}");
        assert_eq!(call["type"], "function");
        assert_eq!(call["function"]["name"], name);
        assert_eq!(call["function"]["arguments"], args, "arguments are the TOOL line's JSON, verbatim");
    }
    assert_ne!(calls[0]["id"], calls[1]["id"]);
    let u = &v["usage"];
    assert!(u["prompt_tokens"].as_u64().unwrap() > 10);
    assert!(u["completion_tokens"].as_u64().unwrap() > 10);
    assert_eq!(
        u["total_tokens"].as_u64(),
        Some(u["prompt_tokens"].as_u64().unwrap() + u["completion_tokens"].as_u64().unwrap())
    );

    // Deterministic for the same conversation; different once the history differs.
    let again = chat(
        s.addr(),
        &json!({"messages": [{"role": "system", "content": "be a tool user"}, user(&two_tool_prompt())]}),
    );
    assert_eq!(again.json()["choices"][0]["message"]["tool_calls"][0]["id"], calls[0]["id"]);
    assert_eq!(again.json()["model"], MODEL_ID);
    let other = chat(s.addr(), &json!({"messages": [user("earlier"), user(&two_tool_prompt())]}));
    assert_ne!(other.json()["choices"][0]["message"]["tool_calls"][0]["id"], calls[0]["id"]);
}

#[test]
fn text_answer_echoes_the_prompt() {
    let s = server();
    let v = chat(
        s.addr(),
        &json!({"model": "m", "messages": [user("hello there\n\nsecond line\nTOOLS are not a TOOL line")]}),
    )
    .json();
    let choice = &v["choices"][0];
    assert_eq!(choice["finish_reason"], "stop");
    assert_eq!(choice["message"]["content"], "echo: hello there\necho: second line\necho: TOOLS are not a TOOL line");
    assert!(choice["message"].get("tool_calls").is_none());

    // Array content: the text parts count, other parts are ignored.
    let v = chat(
        s.addr(),
        &json!({"messages": [{"role": "user", "content": [
            {"type": "text", "text": "look"},
            {"type": "image_url", "image_url": {"url": "data:,"}},
            {"type": "text", "text": "TOOL fs_list {\"path\":\".\"}"}]}]}),
    )
    .json();
    let calls = &v["choices"][0]["message"]["tool_calls"];
    assert_eq!(calls[0]["function"]["name"], "fs_list");
    assert_eq!(calls[0]["function"]["arguments"], "{\"path\":\".\"}");

    // A TOOL line without arguments calls with {}; tool_choice "none" forbids tool calls.
    let v = chat(s.addr(), &json!({"messages": [user("TOOL fs_stat")]})).json();
    assert_eq!(v["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"], "{}");
    let v = chat(s.addr(), &json!({"tool_choice": "none", "messages": [user("TOOL fs_stat {}")]})).json();
    assert_eq!(v["choices"][0]["message"]["content"], "echo: TOOL fs_stat {}");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
}

#[test]
fn summary_after_tool_results() {
    let s = server();
    let long = "x".repeat(100);
    let messages = json!([
        user("TOOL fs_read {\"path\":\"a\"}\nTOOL fs_read {\"path\":\"b\"}"),
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_0_aaa", "type": "function", "function": {"name": "fs_read", "arguments": "{\"path\":\"a\"}"}},
            {"id": "call_1_bbb", "type": "function", "function": {"name": "fs_read", "arguments": "{\"path\":\"b\"}"}}]},
        {"role": "tool", "tool_call_id": "call_0_aaa", "content": long},
        {"role": "tool", "tool_call_id": "call_1_bbb", "content": [{"type": "text", "text": "ünï\ncode"}]},
    ]);
    let v = chat(s.addr(), &json!({"model": "m", "messages": messages})).json();
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    assert_eq!(
        v["choices"][0]["message"]["content"],
        format!("Tool results: 2 calls; call_0_aaa: {}; call_1_bbb: ünï code", "x".repeat(80))
    );

    // Results before the last user message do not count: a new prompt calls tools again.
    let mut later = messages.as_array().unwrap().clone();
    later.push(json!({"role": "assistant", "content": "done"}));
    later.push(user("TOOL fs_list {}"));
    let v = chat(s.addr(), &json!({"messages": later})).json();
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(v["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "fs_list");
}

#[derive(Default, Debug)]
struct Acc {
    id: String,
    name: String,
    arguments: String,
    fragments: usize,
}

#[test]
fn streaming_tool_calls_reassemble() {
    let s = server();
    let r = chat(
        s.addr(),
        &json!({"model": "m", "stream": true, "stream_options": {"include_usage": true},
                "messages": [user(&two_tool_prompt())]}),
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.header("transfer-encoding"), Some("chunked"));
    let events = r.sse();
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let chunks: Vec<Value> =
        events[..events.len() - 1].iter().map(|e| serde_json::from_str(e).expect("chunk JSON")).collect();
    let id = chunks[0]["id"].clone();
    assert_eq!(chunks[0]["choices"][0]["delta"], json!({"role": "assistant"}));
    let mut calls: Vec<Acc> = Vec::new();
    let mut finish = None;
    let mut usage = None;
    for c in &chunks {
        assert_eq!(c["object"], "chat.completion.chunk");
        assert_eq!(c["id"], id, "one id for the whole stream");
        if let Some(u) = c.get("usage").filter(|u| !u.is_null()) {
            assert_eq!(c["choices"], json!([]), "the usage chunk has no choices");
            usage = Some(u.clone());
            continue;
        }
        assert!(finish.is_none(), "nothing but usage after the finish chunk");
        let choice = &c["choices"][0];
        if let Some(f) = choice["finish_reason"].as_str() {
            finish = Some(f.to_string());
        }
        for tc in choice["delta"]["tool_calls"].as_array().into_iter().flatten() {
            let i = tc["index"].as_u64().unwrap() as usize;
            if i == calls.len() {
                calls.push(Acc::default());
            }
            let acc = &mut calls[i];
            if let Some(id) = tc["id"].as_str() {
                acc.id = id.into();
                assert_eq!(tc["type"], "function");
            }
            if let Some(n) = tc["function"]["name"].as_str() {
                acc.name.push_str(n);
            }
            if let Some(a) = tc["function"]["arguments"].as_str().filter(|a| !a.is_empty()) {
                acc.arguments.push_str(a);
                acc.fragments += 1;
            }
        }
    }
    assert_eq!(finish.as_deref(), Some("tool_calls"));
    assert_eq!(calls.len(), 2, "{calls:?}");
    for (n, (acc, (name, args))) in calls.iter().zip([("fs_read", READ_ARGS), ("fs_write", WRITE_ARGS)]).enumerate() {
        assert!(is_call_id(&acc.id, n), "{acc:?}");
        assert_eq!(acc.name, name);
        assert!(acc.fragments >= 3, "arguments must arrive in at least 3 fragments: {acc:?}");
        assert_eq!(acc.arguments, args);
        let parsed: Value = serde_json::from_str(&acc.arguments).unwrap();
        assert_eq!(parsed, serde_json::from_str::<Value>(args).unwrap());
    }
    let usage = usage.expect("include_usage gives a usage chunk");
    assert!(usage["total_tokens"].as_u64().unwrap() > 0);

    // The non-streaming answer to the same conversation has the same calls.
    let v = chat(s.addr(), &json!({"messages": [user(&two_tool_prompt())]})).json();
    assert_eq!(v["choices"][0]["message"]["tool_calls"][1]["id"], calls[1].id.as_str());
}

#[test]
fn streaming_text_without_usage() {
    let s = server();
    let r = chat(s.addr(), &json!({"stream": true, "messages": [user("just talk, please")]}));
    let events = r.sse();
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let mut text = String::new();
    let mut pieces = 0;
    let mut finish = None;
    for e in &events[..events.len() - 1] {
        let c: Value = serde_json::from_str(e).unwrap();
        assert!(c.get("usage").is_none(), "no usage without stream_options.include_usage");
        if let Some(t) = c["choices"][0]["delta"]["content"].as_str() {
            text.push_str(t);
            pieces += 1;
        }
        if let Some(f) = c["choices"][0]["finish_reason"].as_str() {
            finish = Some(f.to_string());
        }
    }
    assert_eq!(text, "echo: just talk, please");
    assert!(pieces >= 3);
    assert_eq!(finish.as_deref(), Some("stop"));
}

#[test]
fn bad_requests_are_400_and_the_connection_survives() {
    let s = server();
    let mut c = Conn::open(s.addr());
    c.post("/v1/chat/completions", "{\"messages\": [");
    let r = c.response();
    assert_eq!(r.status, 400);
    let e = r.json();
    assert_eq!(e["error"]["type"], "invalid_request_error");
    assert!(e["error"]["message"].as_str().unwrap().contains("could not parse the JSON body"), "{e}");
    assert!(e["error"].get("param").is_some() && e["error"].get("code").is_some());

    for (body, param) in [
        (json!({"model": "m"}), "messages"),
        (json!({"messages": []}), "messages"),
        (json!({"messages": [{"role": "system", "content": "no user"}]}), "messages"),
        (json!({"messages": [{"content": "no role"}]}), "messages[0].role"),
        (json!({"stream": "yes", "messages": [user("x")]}), "stream"),
    ] {
        c.post("/chat/completions", &body.to_string());
        let r = c.response();
        assert_eq!(r.status, 400, "{body}");
        assert_eq!(r.json()["error"]["param"], param, "{body}");
    }
    c.post("/chat/completions", "[1, 2]");
    assert_eq!(c.response().status, 400);
    // Still usable.
    c.post("/chat/completions", &json!({"messages": [user("ok")]}).to_string());
    assert_eq!(c.response().status, 200);
}

#[test]
fn unknown_path_is_404_and_wrong_method_405() {
    let s = server();
    let mut c = Conn::open(s.addr());
    c.post("/v1/embeddings", "{}");
    let r = c.response();
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["error"]["code"], "unknown_url");
    assert_eq!(r.json()["error"]["type"], "invalid_request_error");
    c.send(b"GET /v1/chat/completions HTTP/1.1\r\nHost: x\r\n\r\n");
    let r = c.response();
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow"), Some("POST"));
    c.send(b"GET /v1/models?limit=5 HTTP/1.1\r\nHost: x\r\n\r\n");
    let r = c.response();
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["data"][0]["id"], MODEL_ID);
    assert_eq!(r.json()["object"], "list");
}

#[test]
fn oversize_bodies_are_413() {
    let s = server();
    let mut c = Conn::open(s.addr());
    c.send(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 8388609\r\n\r\n{\"messages\":");
    let r = c.response();
    assert_eq!(r.status, 413);
    assert_eq!(r.json()["error"]["code"], "request_too_large");
    assert_eq!(r.header("connection"), Some("close"));
    assert!(c.closed());

    // Exactly 8 MiB is allowed (and parsed).
    let mut c = Conn::open(s.addr());
    let pad = 8 * 1024 * 1024 - json!({"messages": [user("big")], "pad": ""}).to_string().len();
    c.post("/v1/chat/completions", &json!({"messages": [user("big")], "pad": " ".repeat(pad)}).to_string());
    assert_eq!(c.response().status, 200);

    // Chunked bodies are bounded too.
    let mut c = Conn::open(s.addr());
    c.send(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
    let chunk = vec![b' '; 1 << 20];
    for _ in 0..8 {
        c.send(format!("{:x}\r\n", chunk.len()).as_bytes());
        c.send(&chunk);
        c.send(b"\r\n");
    }
    c.send(b"1\r\n ");
    let r = c.response();
    assert_eq!(r.status, 413);
    assert!(c.closed());
}

#[test]
fn chunked_and_expect_continue_bodies() {
    let s = server();
    let body = json!({"messages": [user("TOOL fs_read {\"path\":\"ä\"}")]}).to_string();
    let (a, b) = body.as_bytes().split_at(7);
    let mut c = Conn::open(s.addr());
    c.send(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
    c.send(format!("{:X};ext=1\r\n", a.len()).as_bytes());
    c.send(a);
    c.send(format!("\r\n{:x}\r\n", b.len()).as_bytes());
    c.send(b);
    c.send(b"\r\n0\r\nX-Trailer: t\r\n\r\n");
    let r = c.response();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"], "{\"path\":\"ä\"}");

    // Expect: 100-continue gets an interim 100 before the body is sent.
    c.send(
        format!(
            "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    );
    assert_eq!(c.line(), "HTTP/1.1 100 Continue");
    assert_eq!(c.line(), "");
    c.send(body.as_bytes());
    assert_eq!(c.response().status, 200);

    // Transfer codings other than chunked are not implemented.
    c.send(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n");
    assert_eq!(c.response().status, 501);
    assert!(c.closed());
}

#[test]
fn keep_alive_serves_two_requests_on_one_connection() {
    let s = server();
    let mut c = Conn::open(s.addr());
    c.post("/v1/chat/completions", &json!({"messages": [user("one")]}).to_string());
    let r = c.response();
    assert_eq!(r.status, 200);
    assert!(r.header("connection").is_none(), "HTTP/1.1 stays open by default");
    c.post("/v1/chat/completions", &json!({"stream": true, "messages": [user("TOOL fs_list {}")]}).to_string());
    let r = c.response();
    assert_eq!(r.status, 200);
    assert_eq!(r.sse().last().map(String::as_str), Some("[DONE]"));

    // Pipelined: two requests in one write, two responses in order.
    let one = json!({"messages": [user("first")]}).to_string();
    let two = json!({"messages": [user("second")]}).to_string();
    c.send(
        format!(
            "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{one}\
             POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{two}",
            one.len(),
            two.len()
        )
        .as_bytes(),
    );
    assert_eq!(c.response().json()["choices"][0]["message"]["content"], "echo: first");
    let r = c.response();
    assert_eq!(r.json()["choices"][0]["message"]["content"], "echo: second");
    assert_eq!(r.header("connection"), Some("close"));
    assert!(c.closed(), "Connection: close is honoured");

    // HTTP/1.0 closes unless asked to keep alive; a streamed answer then ends at EOF.
    let mut c = Conn::open(s.addr());
    c.send(format!("POST /v1/chat/completions HTTP/1.0\r\nContent-Length: {}\r\n\r\n{one}", one.len()).as_bytes());
    let r = c.response();
    assert_eq!((r.version.as_str(), r.status), ("HTTP/1.0", 200));
    assert!(c.closed());
    // HTTP/1.0 with keep-alive: a sized answer keeps the connection open.
    let mut c = Conn::open(s.addr());
    for _ in 0..2 {
        c.send(
            format!(
                "POST /v1/chat/completions HTTP/1.0\r\nConnection: keep-alive\r\nContent-Length: {}\r\n\r\n{one}",
                one.len()
            )
            .as_bytes(),
        );
        let r = c.response();
        assert_eq!(r.json()["choices"][0]["message"]["content"], "echo: first");
        assert_eq!(r.header("connection"), Some("keep-alive"));
    }
    let stream = json!({"stream": true, "messages": [user("x")]}).to_string();
    let mut c = Conn::open(s.addr());
    c.send(
        format!(
            "POST /v1/chat/completions HTTP/1.0\r\nConnection: keep-alive\r\nContent-Length: {}\r\n\r\n{stream}",
            stream.len()
        )
        .as_bytes(),
    );
    let r = c.response();
    assert!(r.header("transfer-encoding").is_none());
    assert_eq!(r.sse().last().map(String::as_str), Some("[DONE]"));
    assert!(c.closed(), "an unsized HTTP/1.0 answer ends by closing");
}

/// What the server answers to a malformed request: hyper refuses a malformed request line or
/// header, conflicting `Content-Length`s and an oversize head itself (a bare status, empty
/// body); the rules hyper leaves to the application get an OpenAI-shaped JSON error. Either
/// way the connection closes, since the framing may be out of step.
#[test]
fn malformed_framing_is_refused() {
    let s = server();
    // (request, status, the JSON error code when the fake model itself refuses it)
    let cases: [(&[u8], u16, Option<&str>); 10] = [
        (b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}", 400, Some("bad_request")), // no Host
        (b"GET /v1/models HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n", 400, Some("bad_request")),
        (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n\r\n", 411, Some("length_required")),
        (b"GET /v1/models HTTP/1.1\r\nHost: x\r\nExpect: 200-ok\r\n\r\n", 417, Some("expectation_failed")),
        (
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
            400,
            Some("bad_request"),
        ),
        (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2x\r\n\r\n", 400, None),
        (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n", 400, None),
        (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", 400, None),
        (b"GET /v1/models HTTP/2.0\r\nHost: x\r\n\r\n", 400, None),
        (b"GET /v1/models  HTTP/1.1\r\nHost: x\r\n\r\n", 400, None),
    ];
    for (req, status, code) in cases {
        let what = String::from_utf8_lossy(req);
        let mut c = Conn::open(s.addr());
        c.send(req);
        let r = c.response();
        assert_eq!(r.status, status, "{what}");
        match code {
            Some(code) => {
                let e = r.json();
                assert_eq!(e["error"]["code"], code, "{what}");
                assert!(!e["error"]["message"].as_str().unwrap().is_empty(), "{what}");
                assert_eq!(r.header("connection"), Some("close"), "{what}");
            }
            None => assert!(r.body.is_empty(), "{what}: {}", r.text()),
        }
        assert!(c.closed(), "a framing error closes the connection: {what}");
    }
    // A malformed chunk says why.
    let mut c = Conn::open(s.addr());
    c.send(cases[4].0);
    let m = c.response().json()["error"]["message"].as_str().unwrap().to_string();
    assert!(m.starts_with("the request body could not be read"), "{m}");
    // A head over 64 KiB.
    let mut c = Conn::open(s.addr());
    c.send(format!("GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n", "a".repeat(70 * 1024)).as_bytes());
    assert_eq!(c.response().status, 431);
    assert!(c.closed());
}

/// Both `Content-Length` and chunked: the body is read as chunked (RFC 9112 §6.1), answered,
/// and the connection closes (a request smuggled behind it is never read as a request).
#[test]
fn content_length_beside_chunked_reads_chunked_and_closes() {
    let s = server();
    let body = json!({"messages": [user("TOOL fs_stat {}")]}).to_string();
    let smuggled = "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n";
    let mut c = Conn::open(s.addr());
    c.send(
        format!(
            "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n\
             {:x}\r\n{body}\r\n0\r\n\r\n{smuggled}",
            body.len()
        )
        .as_bytes(),
    );
    let r = c.response();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "fs_stat");
    assert!(c.closed(), "no second response: the connection closed after the first");
}

/// Several requests on one keep-alive connection, with chunked and Content-Length bodies
/// mixed, streamed and plain answers, and a refused request in between.
#[test]
fn one_connection_many_requests() {
    let s = server();
    let mut c = Conn::open(s.addr());
    for i in 0..12 {
        let body = json!({"stream": i % 3 == 0, "messages": [user(&format!("turn {i}"))]}).to_string();
        if i % 2 == 0 {
            c.post("/v1/chat/completions", &body);
        } else {
            let (a, b) = body.as_bytes().split_at(body.len() / 2);
            c.send(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
            c.send(format!("{:x}\r\n", a.len()).as_bytes());
            c.send(a);
            c.send(format!("\r\n{:x}\r\n", b.len()).as_bytes());
            c.send(b);
            c.send(b"\r\n0\r\n\r\n");
        }
        let r = c.response();
        assert_eq!(r.status, 200, "request {i}: {}", r.text());
        let text = if i % 3 == 0 {
            let events = r.sse();
            assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
            events[..events.len() - 1]
                .iter()
                .filter_map(|e| {
                    serde_json::from_str::<Value>(e).unwrap()["choices"][0]["delta"]["content"]
                        .as_str()
                        .map(String::from)
                })
                .collect::<String>()
        } else {
            r.json()["choices"][0]["message"]["content"].as_str().unwrap().to_string()
        };
        assert_eq!(text, format!("echo: turn {i}"));
        if i == 5 {
            c.post("/v1/chat/completions", "{\"messages\": 3}");
            let r = c.response();
            assert_eq!(r.status, 400);
            assert_eq!(r.json()["error"]["param"], "messages");
        }
    }
}

#[test]
fn slow_and_idle_connections_time_out() {
    let cfg = Config {
        idle_timeout: Duration::from_millis(400),
        request_timeout: Duration::from_millis(300),
        ..Config::default()
    };
    let s = FakeModelServer::start_with("127.0.0.1:0", cfg).unwrap();
    // A request that never completes gets 408 and the connection closes.
    let mut c = Conn::open(s.addr());
    c.send(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"messa");
    let t = Instant::now();
    let r = c.response();
    assert_eq!(r.status, 408);
    assert!(c.closed());
    assert!(t.elapsed() < Duration::from_secs(5));
    // An idle connection is closed without a word.
    let mut c = Conn::open(s.addr());
    let t = Instant::now();
    assert!(c.closed());
    assert!(t.elapsed() >= Duration::from_millis(300) && t.elapsed() < Duration::from_secs(5));
}

#[test]
fn connections_are_capped() {
    let cfg = Config { max_connections: 1, ..Config::default() };
    let s = FakeModelServer::start_with("127.0.0.1:0", cfg).unwrap();
    let mut first = Conn::open(s.addr());
    first.send(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(first.response().status, 200);
    let mut second = Conn::open(s.addr()); // accepted by the kernel, not yet served
    second.w.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
    second.send(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n");
    let mut b = [0u8; 1];
    let waited = second.r.get_mut().read(&mut b);
    assert!(waited.is_err(), "the second connection must wait while the first holds the only slot: {waited:?}");
    second.w.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    drop(first);
    assert_eq!(second.response().status, 200);
}

#[test]
fn non_loopback_listen_is_refused() {
    for bad in ["0.0.0.0:0", "192.168.1.10:8080", "[::]:0", "10.0.0.1:1"] {
        assert!(matches!(parse_listen(bad), Err(FakeModelError::NotLoopback(_))), "{bad}");
        let e = FakeModelServer::start(bad).err().expect("refused");
        assert!(e.to_string().contains("loopback only"), "{e}");
    }
    for bad in ["example.com:80", "127.0.0.1", "nonsense"] {
        assert!(matches!(parse_listen(bad), Err(FakeModelError::BadAddress(_))), "{bad}");
    }
    for good in ["127.0.0.1:0", "127.1.2.3:8080", "[::1]:0", "localhost:9"] {
        assert!(parse_listen(good).unwrap().ip().is_loopback(), "{good}");
    }
    let out =
        Command::new(env!("CARGO_BIN_EXE_pi-conform")).args(["fake-model", "--listen", "0.0.0.0:0"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("refused") && err.contains("loopback only"), "{err}");
    assert!(out.stdout.is_empty());
}

#[test]
fn cli_prints_its_address_and_serves() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_pi-conform"))
        .args(["fake-model"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let result = std::panic::catch_unwind(|| {
        let addr = line.trim().strip_prefix("listening on http://").unwrap_or_else(|| panic!("{line:?}"));
        let addr: SocketAddr = addr.parse().unwrap();
        assert_eq!(addr.ip().to_string(), "127.0.0.1");
        assert_ne!(addr.port(), 0);
        let r = chat(addr, &json!({"messages": [user("TOOL fs_read {}")]}));
        assert_eq!(r.json()["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "fs_read");
    });
    let _ = child.kill();
    let _ = child.wait();
    if let Err(p) = result {
        std::panic::resume_unwind(p);
    }
}

/// The official OpenAI Python client against the fake model (scripts/fake_model_client.py).
/// Skipped, with a message, where the `openai` package is not installed (as in CI).
#[test]
fn openai_python_client() {
    let have = Command::new("python3")
        .args(["-c", "import openai"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !have {
        eprintln!(
            "SKIP openai_python_client: `python3 -c \"import openai\"` failed; install the OpenAI Python client \
             (pip install openai) to run scripts/fake_model_client.py against the fake model"
        );
        return;
    }
    let s = server();
    let script = format!("{}/scripts/fake_model_client.py", env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("python3").arg(&script).arg(s.base_url()).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    eprintln!("{stderr}");
    assert!(out.status.success(), "{script} failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains(" passed, 0 failed"), "{stdout}");
}

/// A client that stops reading cannot hold a connection slot: the blocked response write
/// times out, the connection closes and the slot serves the next client.
#[test]
fn a_stalled_reader_releases_its_slot() {
    let cfg = Config { max_connections: 1, write_timeout: Duration::from_millis(300), ..Config::default() };
    let s = FakeModelServer::start_with("127.0.0.1:0", cfg).unwrap();
    let mut stalled = Conn::open(s.addr());
    // A small fixed receive buffer (no autotuning), so a 6 MiB answer cannot fit in the socket
    // buffers of both ends.
    rustix::net::sockopt::set_socket_recv_buffer_size(&stalled.w, 64 << 10).unwrap();
    let args = format!("{{\"pad\":\"{}\"}}", "a".repeat(6 << 20));
    stalled.post("/v1/chat/completions", &json!({"messages": [user(&format!("TOOL fs_write {args}"))]}).to_string());
    // The answer is being written and blocks; this client never reads it.
    std::thread::sleep(Duration::from_millis(500));
    let mut next = Conn::open(s.addr());
    next.send(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n");
    // Served once the stalled write has timed out (300 ms) and the close drained (≤ 1 s more).
    assert_eq!(next.response().status, 200, "the slot must come free");
    // The stalled client got a truncated answer and then the end of the connection.
    let mut got = Vec::new();
    let _ = stalled.r.read_to_end(&mut got);
    assert!(got.len() < args.len(), "the answer was cut off, not completed: {} bytes", got.len());
}
