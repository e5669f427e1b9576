//! The proxy: one listening Unix socket, one upstream connection per accepted connection,
//! bytes forwarded unchanged in both directions, every complete line handed to the
//! connection's judge before the chunk that completes it is forwarded (so the judge sees a
//! frame before its peer can answer it, and the exchange rules see cause before effect).
//!
//! Memory per connection and direction: one read buffer ([`CHUNK`]) and at most one partial
//! line of the judge's current limit ([`Splitter`]); a line over the limit is reported once
//! and skipped to its LF, never held. The proxy never writes a byte of its own and never
//! reorders: each direction is one read → judge → write loop.

use std::cell::RefCell;
use std::path::Path;
use std::rc::Rc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};

use super::report::Reporter;

/// Bytes read at once per direction.
pub const CHUNK: usize = 64 * 1024;

/// Which way a line travels: `Up` from the accepted peer to the upstream, `Down` back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Way {
    /// Accepted peer → upstream (daemon → adapter, client → daemon).
    Up,
    /// Upstream → accepted peer (adapter → daemon, daemon → client).
    Down,
}

/// What a side's judge does with one connection's traffic.
pub trait ConnJudge {
    /// The byte limit of a line travelling `way` now, LF included.
    fn limit(&self, way: Way) -> usize;
    /// One complete line (LF and one CR before it stripped; never empty).
    fn line(&mut self, way: Way, line: &[u8]);
    /// A line that grew past [`ConnJudge::limit`] (`len` bytes seen so far, LF excluded).
    fn oversize(&mut self, way: Way, len: usize);
    /// The sender of `way` closed its side (EOF or error).
    fn closed(&mut self, way: Way);
    /// The connection is over (both directions done): flush what it recorded.
    fn finish(&mut self) {}
}

/// A bounded line splitter: holds at most `limit` bytes of a partial line.
#[derive(Default)]
pub struct Splitter {
    buf: Vec<u8>,
    skipping: bool,
}

impl Splitter {
    /// Feed `chunk`, calling the judge for every complete line and every line over its limit.
    pub fn feed(&mut self, chunk: &[u8], way: Way, judge: &mut dyn ConnJudge) {
        let mut rest = chunk;
        loop {
            let lf = memchr::memchr(b'\n', rest);
            let (seg, ended) = match lf {
                Some(i) => (&rest[..i], true),
                None => (rest, false),
            };
            if self.skipping {
                if ended {
                    self.skipping = false;
                }
            } else {
                let limit = judge.limit(way);
                // LF included: a line of `limit - 1` bytes plus its LF is the largest allowed.
                if self.buf.len() + seg.len() + 1 > limit {
                    judge.oversize(way, self.buf.len() + seg.len());
                    self.buf.clear();
                    self.buf.shrink_to(CHUNK);
                    self.skipping = !ended;
                } else {
                    self.buf.extend_from_slice(seg);
                    if ended {
                        let mut line = &self.buf[..];
                        if line.last() == Some(&b'\r') {
                            line = &line[..line.len() - 1];
                        }
                        if !line.is_empty() {
                            judge.line(way, line);
                        }
                        self.buf.clear();
                        if self.buf.capacity() > 4 * CHUNK {
                            self.buf.shrink_to(CHUNK);
                        }
                    }
                }
            }
            match lf {
                Some(i) => rest = &rest[i + 1..],
                None => break,
            }
        }
    }

    /// Bytes held now (a partial line).
    pub fn held(&self) -> usize {
        self.buf.capacity()
    }
}

/// Makes the judge of a new connection.
pub type JudgeFactory = Box<dyn Fn(u64, Reporter) -> Box<dyn ConnJudge>>;

/// Accept connections on `listener` forever, each proxied to `upstream` and judged.
pub async fn serve(listener: UnixListener, upstream: &Path, make: JudgeFactory, report: Reporter) {
    let make = Rc::new(make);
    let mut next = 0u64;
    loop {
        let down = match listener.accept().await {
            Ok((s, _)) => s,
            Err(e) => {
                report.note(None, &format!("accept failed: {e}"));
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        next += 1;
        let id = next;
        let upstream = upstream.to_path_buf();
        let (make, report) = (make.clone(), report.clone());
        tokio::task::spawn_local(async move {
            let up = match UnixStream::connect(&upstream).await {
                Ok(s) => s,
                Err(e) => {
                    report.note(Some(id), &format!("cannot connect to the upstream {}: {e}", upstream.display()));
                    return; // dropping `down` closes it, as an absent upstream would
                }
            };
            report.opened(id);
            let judge = Rc::new(RefCell::new(make(id, report.clone())));
            let (down_r, down_w) = down.into_split();
            let (up_r, up_w) = up.into_split();
            let a = pump(down_r, up_w, Way::Up, judge.clone());
            let b = pump(up_r, down_w, Way::Down, judge.clone());
            tokio::join!(a, b);
            judge.borrow_mut().finish();
            report.closed(id);
        });
    }
}

async fn pump(
    mut from: tokio::net::unix::OwnedReadHalf,
    mut to: tokio::net::unix::OwnedWriteHalf,
    way: Way,
    judge: Rc<RefCell<Box<dyn ConnJudge>>>,
) {
    let mut buf = vec![0u8; CHUNK];
    let mut split = Splitter::default();
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        split.feed(&buf[..n], way, judge.borrow_mut().as_mut());
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    judge.borrow_mut().closed(way);
    // Pass the end on: the receiver sees EOF, as it would on a direct connection.
    let _ = to.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Lines {
        limit: usize,
        got: Vec<String>,
    }

    impl ConnJudge for Lines {
        fn limit(&self, _: Way) -> usize {
            self.limit
        }
        fn line(&mut self, _: Way, line: &[u8]) {
            self.got.push(String::from_utf8_lossy(line).into_owned());
        }
        fn oversize(&mut self, _: Way, len: usize) {
            self.got.push(format!("<oversize {len}>"));
        }
        fn closed(&mut self, _: Way) {}
    }

    #[test]
    fn lines_split_across_chunks_and_crlf_and_empty_lines() {
        let mut j = Lines { limit: 100, ..Default::default() };
        let mut s = Splitter::default();
        for chunk in [&b"ab"[..], b"c\r\n\nde", b"f\n", b"g"] {
            s.feed(chunk, Way::Up, &mut j);
        }
        assert_eq!(j.got, ["abc", "def"]);
    }

    #[test]
    fn a_line_at_the_limit_passes_one_past_is_reported_and_skipped() {
        // limit 5, LF included: 4 bytes + LF is the largest line.
        let mut j = Lines { limit: 5, ..Default::default() };
        let mut s = Splitter::default();
        s.feed(b"abcd\nabcde\nxy\n", Way::Up, &mut j);
        assert_eq!(j.got, ["abcd", "<oversize 5>", "xy"]);
        // An oversized partial line is reported before its LF, then skipped to it.
        let mut j = Lines { limit: 5, ..Default::default() };
        let mut s = Splitter::default();
        s.feed(b"abcdefgh", Way::Up, &mut j);
        s.feed(b"ijkl", Way::Up, &mut j);
        assert!(s.held() <= CHUNK);
        s.feed(b"mn\nok\n", Way::Up, &mut j);
        assert_eq!(j.got, ["<oversize 8>", "ok"]);
    }
}
