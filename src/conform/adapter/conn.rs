//! A recording NDJSON client connection to the adapter under test.

use std::cell::RefCell;
use std::io::{ErrorKind, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::rc::Rc;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::judge::FrameJudge;
pub use super::judge::Peer;
use crate::conform::case::WireLine;

/// What a read produced.
#[derive(Clone, Debug, PartialEq)]
pub enum Recv {
    /// One line that decoded as JSON (the raw bytes kept, LF excluded).
    Frame(Peer, Vec<u8>),
    /// A line that is not JSON.
    Garbage(Vec<u8>),
    /// The adapter closed the connection.
    Closed,
    /// Nothing arrived within the step budget.
    Timeout,
}

impl Recv {
    /// The frame, if one arrived.
    pub fn frame(&self) -> Option<&Peer> {
        match self {
            Recv::Frame(v, _) => Some(v),
            _ => None,
        }
    }

    /// A short token for reports: `closed`, `timeout`, `garbage`, or the frame's kind (the
    /// peer's text with its control characters made visible).
    pub fn describe(&self) -> String {
        crate::conform::case::visible(&self.describe_raw())
    }

    fn describe_raw(&self) -> String {
        match self {
            Recv::Frame(v, _) => match (v.kind(), v.ok()) {
                (Some("result"), Some(true)) => "result:ok".into(),
                (Some("result"), Some(false)) => format!("error:{}", v.error_code().unwrap_or("?")),
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

/// The longest line the runner buffers from a peer, LF excluded: four times the largest line
/// any limit of the protocol allows (`maxResponseBytes` at most 4 MiB; a daemon's response
/// lines are bounded by what the runner asks for). A longer line is cut here, judged as the
/// over-limit line it is, and the connection is read no further: a peer that floods bytes
/// without an LF cannot grow the runner's memory.
pub const MAX_READ_LINE: usize = 16 * 1024 * 1024;

/// Bytes of a case's `received` record kept for the end-of-case secret scan. Frames are
/// scanned one by one by the contract as they arrive; this record is the second net, for
/// lines that are not frames. Beyond it a note says the rest was not kept.
pub const MAX_RECEIVED_KEPT: usize = 64 * 1024 * 1024;

/// How long [`Conn::recv_for`] keeps reading frames meant for other requests, in steps: a
/// peer streaming unrelated frames cannot keep a case waiting forever.
const RECV_FOR_STEPS: u32 = 20;

/// A connection that records a transcript with the handle redacted and keeps every byte
/// received (for the secret scan), up to [`MAX_RECEIVED_KEPT`].
pub struct Conn {
    stream: UnixStream,
    /// Bytes read and not yet returned as a line.
    pending: Vec<u8>,
    /// How much of `pending` is known to hold no LF.
    scanned: usize,
    handle: String,
    /// Further handles redacted from the transcript (another grant's).
    others: Vec<String>,
    transcript: Rc<RefCell<Vec<WireLine>>>,
    received: Rc<RefCell<Vec<u8>>>,
    step: Duration,
    closed: bool,
    stash: Vec<Recv>,
    judge: Option<FrameJudge>,
    /// Bytes sent after the last LF: the head of a line sent in pieces, judged as one line
    /// once its LF is sent.
    unsent_tail: Vec<u8>,
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
        let stream = connect_within(socket, step)?;
        let c = Conn {
            stream,
            pending: Vec::new(),
            scanned: 0,
            handle: handle.to_string(),
            others: Vec::new(),
            transcript,
            received,
            step,
            closed: false,
            stash: Vec::new(),
            judge: None,
            unsent_tail: Vec::new(),
        };
        c.note("connected");
        Ok(c)
    }

    /// Judge every frame sent and received on this connection with `judge` (adapter frames).
    pub fn judged_by(mut self, judge: FrameJudge) -> Conn {
        self.judge = Some(judge);
        self
    }

    /// Also redact `handle` (another grant's) from the transcript.
    pub fn also_redacting(mut self, handle: &str) -> Conn {
        self.others.push(handle.to_string());
        self
    }

    /// The handles redacted in every JSON spelling ([`crate::conform::case::redact_handle`]).
    fn redact(&self, text: &str) -> String {
        let once = crate::conform::case::redact_handle(text, &self.handle);
        self.others.iter().fold(once, |t, h| crate::conform::case::redact_handle(&t, h))
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

    /// Send `frames` pipelined: every line in one write, so that they reach the adapter
    /// together. The transcript shows one line per frame, after a note that says so.
    pub fn send_all(&mut self, frames: &[Value]) {
        let mut bytes = Vec::new();
        for f in frames {
            let line = serde_json::to_vec(f).unwrap_or_default();
            let shown = String::from_utf8_lossy(&line);
            let text = self.redact(&shorten(&shown, line.len()));
            bytes.extend_from_slice(&line);
            bytes.push(b'\n');
            self.transcript.borrow_mut().push(WireLine { dir: ">".into(), text });
        }
        self.note(&format!("the {} lines above were sent pipelined, in one write", frames.len()));
        self.write_judged(&bytes);
    }

    /// Send raw bytes (a line, a partial line, garbage).
    pub fn send_raw(&mut self, bytes: &[u8]) {
        let shown = String::from_utf8_lossy(bytes);
        let shown = shorten(&shown, bytes.len());
        let text = self.redact(&shown);
        self.transcript.borrow_mut().push(WireLine { dir: ">".into(), text });
        self.write_judged(bytes);
    }

    fn write_judged(&mut self, bytes: &[u8]) {
        if let Some(j) = &mut self.judge {
            let mut lines = bytes.split_inclusive(|b| *b == b'\n').peekable();
            while let Some(l) = lines.next() {
                match l.strip_suffix(b"\n") {
                    // A line sent in pieces is judged whole, once its LF is sent.
                    Some(line) if !self.unsent_tail.is_empty() => {
                        let mut whole = std::mem::take(&mut self.unsent_tail);
                        whole.extend_from_slice(line);
                        j.sent(&whole);
                    }
                    Some(line) => j.sent(line),
                    None if lines.peek().is_none() => self.unsent_tail.extend_from_slice(l),
                    None => {}
                }
            }
        }
        if let Err(e) = self.stream.write_all(bytes) {
            self.note(&format!("write failed: {}", e.kind()));
        }
    }

    /// Keep `bytes` in the case's `received` record, up to [`MAX_RECEIVED_KEPT`].
    fn keep(&self, bytes: &[u8]) {
        let mut r = self.received.borrow_mut();
        let room = MAX_RECEIVED_KEPT.saturating_sub(r.len());
        if bytes.len() > room {
            r.extend_from_slice(&bytes[..room]);
            drop(r);
            if room > 0 {
                self.note(&format!("received bytes beyond {MAX_RECEIVED_KEPT} not kept for the end-of-case scan"));
            }
        } else {
            r.extend_from_slice(bytes);
        }
    }

    /// One complete line out of `pending` (LF included), or the over-long head of one.
    fn take_line(&mut self) -> Option<Result<Vec<u8>, Vec<u8>>> {
        match memchr::memchr(b'\n', &self.pending[self.scanned..]) {
            Some(pos) => {
                let end = self.scanned + pos + 1;
                self.scanned = 0;
                if end - 1 > MAX_READ_LINE {
                    return Some(Err(self.pending[..MAX_READ_LINE + 1].to_vec()));
                }
                Some(Ok(self.pending.drain(..end).collect()))
            }
            None => {
                self.scanned = self.pending.len();
                (self.pending.len() > MAX_READ_LINE).then(|| Err(self.pending[..MAX_READ_LINE + 1].to_vec()))
            }
        }
    }

    /// Read the next line within `wait`: the whole line, not each read, is bounded by it, so a
    /// peer trickling bytes without an LF cannot stall the runner.
    pub fn recv_within(&mut self, wait: Duration) -> Recv {
        if self.closed {
            return Recv::Closed;
        }
        let deadline = Instant::now() + wait.max(Duration::from_millis(1));
        let mut chunk = vec![0u8; 64 * 1024];
        loop {
            match self.take_line() {
                Some(Ok(line)) => return self.got_line(line),
                Some(Err(head)) => {
                    self.keep(&head);
                    self.closed = true;
                    self.pending = Vec::new();
                    self.scanned = 0;
                    self.note(&format!(
                        "a line over {MAX_READ_LINE} bytes: the runner reads this connection no further"
                    ));
                    let shown = String::from_utf8_lossy(&head[..600.min(head.len())]).into_owned();
                    let text = self.redact(&shorten(&shown, head.len()));
                    self.transcript.borrow_mut().push(WireLine { dir: "<".into(), text });
                    let value = match &mut self.judge {
                        Some(j) => j.received(&head),
                        None => None,
                    };
                    return match value {
                        Some(v) => Recv::Frame(v, head),
                        None => Recv::Garbage(head),
                    };
                }
                None => {}
            }
            let now = Instant::now();
            if now >= deadline {
                self.note(&format!("no line within {} ms", wait.as_millis()));
                return Recv::Timeout;
            }
            let _ = self.stream.set_read_timeout(Some(deadline - now));
            match self.stream.read(&mut chunk) {
                Ok(0) => {
                    self.closed = true;
                    if !self.pending.is_empty() {
                        let rest = std::mem::take(&mut self.pending);
                        self.keep(&rest);
                        let shown = String::from_utf8_lossy(&rest).into_owned();
                        let text = self.redact(&shorten(&shown, rest.len()));
                        self.note(&format!("closed by the adapter after a partial line without LF: {text}"));
                    } else {
                        self.note("closed by the adapter");
                    }
                    return Recv::Closed;
                }
                Ok(n) => self.pending.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(e) => {
                    self.closed = true;
                    self.note(&format!("read failed: {}", e.kind()));
                    return Recv::Closed;
                }
            }
        }
    }

    /// A complete line (LF included) received: record, judge and decode it.
    fn got_line(&mut self, line: Vec<u8>) -> Recv {
        self.keep(&line);
        let body = line.strip_suffix(b"\n").unwrap_or(&line).to_vec();
        let shown = String::from_utf8_lossy(&body);
        let shown = shorten(&shown, body.len());
        let text = self.redact(&shown);
        self.transcript.borrow_mut().push(WireLine { dir: "<".into(), text });
        let value = match &mut self.judge {
            Some(j) => j.received(&body),
            None => crate::wire::decode_strict(&body).ok().map(Peer::read),
        };
        match value {
            Some(v) => Recv::Frame(v, body),
            None => Recv::Garbage(body),
        }
    }

    /// Read the next line within one step.
    pub fn recv(&mut self) -> Recv {
        self.recv_within(self.step)
    }

    /// Read until a frame with `requestId == id` (results) arrives, or close/timeout. Frames
    /// for other requests are kept for their own `recv_for` (results may come in any order).
    pub fn recv_for(&mut self, id: &str) -> Recv {
        if let Some(i) = self.stash.iter().position(|r| matches!(r, Recv::Frame(v, _) if v.request_id() == Some(id))) {
            return self.stash.remove(i);
        }
        let deadline = Instant::now() + self.step * RECV_FOR_STEPS;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                self.note(&format!("no frame for {id} within {RECV_FOR_STEPS} steps of frames for other requests"));
                return Recv::Timeout;
            }
            let r = self.recv_within(self.step.min(left));
            match &r {
                Recv::Frame(v, _) if v.request_id() == Some(id) => return r,
                Recv::Frame(_, raw) => {
                    let held: usize =
                        self.stash.iter().map(|r| if let Recv::Frame(_, b) = r { b.len() } else { 0 }).sum();
                    if held + raw.len() > MAX_RECEIVED_KEPT {
                        self.note("frames for other requests beyond the runner's buffer were dropped");
                    } else {
                        self.stash.push(r);
                    }
                }
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

/// Connect to the Unix socket at `path`, giving up after `wait`. A blocking `connect` to a
/// peer that listens but never accepts hangs once its backlog is full; this one retries a
/// non-blocking `connect` while the kernel answers `EAGAIN` and then fails with `TimedOut`.
/// The stream it returns is blocking.
pub fn connect_within(path: &Path, wait: Duration) -> std::io::Result<UnixStream> {
    use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
    let deadline = Instant::now() + wait;
    let addr = SocketAddrUnix::new(path)?;
    loop {
        let sock = rustix::net::socket_with(AddressFamily::UNIX, SocketType::STREAM, SocketFlags::CLOEXEC, None)?;
        rustix::fs::fcntl_setfl(&sock, rustix::fs::OFlags::NONBLOCK)?;
        match rustix::net::connect(&sock, &addr) {
            Ok(()) => {
                rustix::fs::fcntl_setfl(&sock, rustix::fs::OFlags::empty())?;
                return Ok(UnixStream::from(sock));
            }
            Err(rustix::io::Errno::AGAIN) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(rustix::io::Errno::AGAIN) => {
                return Err(std::io::Error::new(
                    ErrorKind::TimedOut,
                    format!("the listen backlog stayed full for {} ms (the peer is not accepting)", wait.as_millis()),
                ))
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Lines (LF excluded) read from a blocking stream, each at most [`MAX_READ_LINE`] bytes: what
/// `BufRead::split` does, without letting a peer that never sends an LF grow the buffer. An
/// over-long line yields `Err` with its first `MAX_READ_LINE + 1` bytes and ends the
/// iteration; a partial line at EOF is yielded as a line, as `split` does.
pub struct BoundedLines<R> {
    inner: R,
    pending: Vec<u8>,
    scanned: usize,
    done: bool,
}

impl<R: Read> BoundedLines<R> {
    /// Lines of `inner`.
    pub fn new(inner: R) -> Self {
        BoundedLines { inner, pending: Vec::new(), scanned: 0, done: false }
    }
}

impl<R: Read> Iterator for BoundedLines<R> {
    type Item = Result<Vec<u8>, Vec<u8>>;

    fn next(&mut self) -> Option<Self::Item> {
        let mut chunk = [0u8; 64 * 1024];
        loop {
            if self.done {
                return None;
            }
            if let Some(pos) = memchr::memchr(b'\n', &self.pending[self.scanned..]) {
                let end = self.scanned + pos;
                self.scanned = 0;
                if end > MAX_READ_LINE {
                    self.done = true;
                    return Some(Err(self.pending[..MAX_READ_LINE + 1].to_vec()));
                }
                let line: Vec<u8> = self.pending.drain(..=end).take(end).collect();
                return Some(Ok(line));
            }
            self.scanned = self.pending.len();
            if self.pending.len() > MAX_READ_LINE {
                self.done = true;
                return Some(Err(self.pending[..MAX_READ_LINE + 1].to_vec()));
            }
            match self.inner.read(&mut chunk) {
                Ok(0) | Err(_) if self.pending.is_empty() => {
                    self.done = true;
                    return None;
                }
                Ok(0) => {
                    self.done = true;
                    return Some(Ok(std::mem::take(&mut self.pending)));
                }
                Ok(n) => self.pending.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => {
                    self.done = true;
                    return Some(Ok(std::mem::take(&mut self.pending)));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_lines_split_like_bufread_split() {
        let input: &[u8] = b"{\"a\":1}\n\nx\r\npartial";
        let lines: Vec<_> = BoundedLines::new(input).collect();
        assert_eq!(
            lines,
            vec![Ok(b"{\"a\":1}".to_vec()), Ok(Vec::new()), Ok(b"x\r".to_vec()), Ok(b"partial".to_vec())]
        );
    }

    #[test]
    fn bounded_lines_stop_at_an_over_long_line_without_buffering_it_all() {
        // An endless stream of `x` without LF: the iterator stops after MAX_READ_LINE + 1 bytes
        // (plus at most one read) instead of reading forever.
        let endless = std::io::repeat(b'x');
        let mut lines = BoundedLines::new(endless);
        match lines.next() {
            Some(Err(head)) => assert_eq!(head.len(), MAX_READ_LINE + 1),
            other => panic!("expected the over-long head, got {:?}", other.map(|r| r.map(|l| l.len()))),
        }
        assert!(lines.next().is_none(), "nothing after an over-long line");
    }
}
