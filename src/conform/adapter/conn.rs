//! A recording NDJSON client connection to the adapter under test.

use std::cell::RefCell;
use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::rc::Rc;
use std::time::Duration;

use serde_json::Value;

use super::judge::FrameJudge;
use crate::conform::case::WireLine;

/// What a read produced.
#[derive(Clone, Debug, PartialEq)]
pub enum Recv {
    /// One line that decoded as JSON (the raw bytes kept, LF excluded).
    Frame(Value, Vec<u8>),
    /// A line that is not JSON.
    Garbage(Vec<u8>),
    /// The adapter closed the connection.
    Closed,
    /// Nothing arrived within the step budget.
    Timeout,
}

impl Recv {
    /// The frame, if one arrived.
    pub fn frame(&self) -> Option<&Value> {
        match self {
            Recv::Frame(v, _) => Some(v),
            _ => None,
        }
    }

    /// A short token for reports: `closed`, `timeout`, `garbage`, or the frame's kind.
    pub fn describe(&self) -> String {
        match self {
            Recv::Frame(v, _) => match (v["kind"].as_str(), v["ok"].as_bool()) {
                (Some("result"), Some(true)) => "result:ok".into(),
                (Some("result"), Some(false)) => format!("error:{}", v["error"]["code"].as_str().unwrap_or("?")),
                (Some(k), _) => k.to_string(),
                _ => "frame".into(),
            },
            Recv::Garbage(_) => "garbage".into(),
            Recv::Closed => "closed".into(),
            Recv::Timeout => "timeout".into(),
        }
    }
}

/// At most 600 bytes of a line for a transcript, cut on a character boundary.
fn shorten(text: &str, len: usize) -> String {
    let text = text.trim_end();
    if text.len() <= 600 {
        return text.to_string();
    }
    let mut cut = 600;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}… ({len} bytes)", &text[..cut])
}

/// A connection that records a transcript with the handle redacted and keeps every byte
/// received (for the secret scan).
pub struct Conn {
    stream: UnixStream,
    reader: BufReader<UnixStream>,
    handle: String,
    transcript: Rc<RefCell<Vec<WireLine>>>,
    received: Rc<RefCell<Vec<u8>>>,
    step: Duration,
    closed: bool,
    stash: Vec<Recv>,
    judge: Option<FrameJudge>,
}

impl Conn {
    /// Connect to `socket`.
    pub fn connect(
        socket: &Path,
        handle: &str,
        step: Duration,
        transcript: Rc<RefCell<Vec<WireLine>>>,
        received: Rc<RefCell<Vec<u8>>>,
    ) -> std::io::Result<Conn> {
        let stream = UnixStream::connect(socket)?;
        let reader = BufReader::new(stream.try_clone()?);
        let c = Conn {
            stream,
            reader,
            handle: handle.to_string(),
            transcript,
            received,
            step,
            closed: false,
            stash: Vec::new(),
            judge: None,
        };
        c.note("connected");
        Ok(c)
    }

    /// Judge every frame sent and received on this connection with `judge` (adapter frames).
    pub fn judged_by(mut self, judge: FrameJudge) -> Conn {
        self.judge = Some(judge);
        self
    }

    fn redact(&self, text: &str) -> String {
        if self.handle.is_empty() {
            text.to_string()
        } else {
            text.replace(&self.handle, "<handle>")
        }
    }

    /// Add a note to the transcript.
    pub fn note(&self, text: &str) {
        self.transcript.borrow_mut().push(WireLine { dir: "#".into(), text: text.to_string() });
    }

    /// Send one frame.
    pub fn send(&mut self, v: &Value) {
        let mut line = serde_json::to_vec(v).unwrap_or_default();
        line.push(b'\n');
        self.send_raw(&line);
    }

    /// Send raw bytes (a line, a partial line, garbage).
    pub fn send_raw(&mut self, bytes: &[u8]) {
        let shown = String::from_utf8_lossy(bytes);
        let shown = shorten(&shown, bytes.len());
        let text = self.redact(&shown);
        self.transcript.borrow_mut().push(WireLine { dir: ">".into(), text });
        if let Some(j) = &mut self.judge {
            for line in bytes.split_inclusive(|b| *b == b'\n').filter_map(|l| l.strip_suffix(b"\n")) {
                j.sent(line);
            }
        }
        if let Err(e) = self.stream.write_all(bytes) {
            self.note(&format!("write failed: {}", e.kind()));
        }
    }

    /// Read the next line within `step × factor`.
    pub fn recv_within(&mut self, wait: Duration) -> Recv {
        if self.closed {
            return Recv::Closed;
        }
        let _ = self.stream.set_read_timeout(Some(wait.max(Duration::from_millis(1))));
        let mut line = Vec::new();
        let r = match self.reader.read_until(b'\n', &mut line) {
            Ok(0) => {
                self.closed = true;
                self.note("closed by the adapter");
                Recv::Closed
            }
            Ok(_) => {
                self.received.borrow_mut().extend_from_slice(&line);
                let body = line.strip_suffix(b"\n").unwrap_or(&line).to_vec();
                let shown = String::from_utf8_lossy(&body);
                let shown = shorten(&shown, body.len());
                let text = self.redact(&shown);
                self.transcript.borrow_mut().push(WireLine { dir: "<".into(), text });
                let value = match &mut self.judge {
                    Some(j) => j.received(&body),
                    None => crate::wire::decode_strict(&body).ok(),
                };
                match value {
                    Some(v) => Recv::Frame(v, body),
                    None => Recv::Garbage(body),
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                if !line.is_empty() {
                    self.received.borrow_mut().extend_from_slice(&line);
                }
                self.note(&format!("no line within {} ms", wait.as_millis()));
                Recv::Timeout
            }
            Err(e) => {
                self.closed = true;
                self.note(&format!("read failed: {}", e.kind()));
                Recv::Closed
            }
        };
        r
    }

    /// Read the next line within one step.
    pub fn recv(&mut self) -> Recv {
        self.recv_within(self.step)
    }

    /// Read until a frame with `requestId == id` (results) arrives, or close/timeout. Frames
    /// for other requests are kept for their own `recv_for` (results may come in any order).
    pub fn recv_for(&mut self, id: &str) -> Recv {
        if let Some(i) = self.stash.iter().position(|r| matches!(r, Recv::Frame(v, _) if v["requestId"] == id)) {
            return self.stash.remove(i);
        }
        loop {
            let r = self.recv();
            match &r {
                Recv::Frame(v, _) if v["requestId"] == id => return r,
                Recv::Frame(..) => self.stash.push(r),
                Recv::Garbage(_) => continue,
                _ => return r,
            }
        }
    }

    /// Whether the adapter closes without sending anything (within `wait`).
    pub fn expect_close(&mut self, wait: Duration) -> Recv {
        self.recv_within(wait)
    }

    /// Close our writing half (EOF for the adapter).
    pub fn shutdown_write(&mut self) {
        self.note("runner closes its writing half (EOF)");
        let _ = self.stream.shutdown(std::net::Shutdown::Write);
    }
}
