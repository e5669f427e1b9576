//! Confirmed provocation (issue 24, item 3): a case whose meaning depends on a state it
//! provokes — a full queue, a target still queued or running when its abort arrives, a
//! duplicate arriving while its first is in flight, work waiting when revoke or EOF comes —
//! proves that it reached the state, or ends inconclusive (`error`, with the reason), never
//! `pass`.
//!
//! The runner holds a request in flight with a slow operation it controls: a literal search
//! of a haystack directory it lays for the case (`slow/`, 1 MiB files of ASCII text that never
//! contain the query), ahead of the frames under test, all sent pipelined in one write. The
//! proof that the adapter saw those frames while the search ran is an answer it gives without
//! queueing: an `abort` (of the target, or of a request never sent, the *probe*) answered
//! before the search's result. Without that answer the attempt is repeated with a larger
//! haystack ([`HAY_MIB`]); after the last one the case is inconclusive — except when the
//! search ran for [`SERIAL_AFTER`] or more and the adapter still answered nothing behind it:
//! then it left frames unread while it worked, which no rule allows (busy and abort can only
//! be honoured by an adapter that reads and admits frames as they arrive).

use std::time::{Duration, Instant};

use super::conn::{Conn, Peer, Recv};
use super::req::{self, Call};
use super::Ctx;
use crate::conform::case::Outcome;

/// The haystack directory, relative to the root.
pub const HAY_DIR: &str = "slow";
/// The query the blocker searches for: no haystack file holds it.
pub const HAY_QUERY: &str = "zq-never-there";
/// The haystack's size in MiB at each attempt.
pub const HAY_MIB: [usize; 3] = [4, 12, 32];
/// A blocker that ran this long while the adapter answered nothing sent behind it proves
/// that the adapter left those frames unread (it is not merely fast).
pub const SERIAL_AFTER: Duration = Duration::from_millis(250);

/// What one attempt found.
pub enum Try {
    /// The state was reached (or the case ended for another reason): the outcome.
    Done(Outcome),
    /// The state was not reached: why.
    NotReached(String),
}

/// The blocker: a search of the haystack that finds nothing.
pub fn blocker() -> Call {
    req::search(HAY_DIR, HAY_QUERY).max_results(1)
}

/// One haystack line: ASCII, no long base64url run, never the query.
const HAY_LINE: &[u8] = b"the quick brown fox jumps over the lazy dog, 0123456789 times; pack my box.\n";

/// Lay the haystack up to `mib` 1-MiB files (adding to what an earlier attempt laid).
fn lay_hay(c: &mut Ctx<'_>, mib: usize) -> Result<(), Outcome> {
    let dir = c.target.root.join(HAY_DIR);
    std::fs::create_dir_all(&dir).map_err(|e| Outcome::Error(format!("cannot lay the haystack: {e}")))?;
    c.allow(&[HAY_DIR]);
    let mut file = Vec::with_capacity(1 << 20);
    while file.len() < 1 << 20 {
        file.extend_from_slice(HAY_LINE);
    }
    file.truncate(1 << 20);
    for i in 0..mib {
        let rel = format!("{HAY_DIR}/hay-{i:03}.txt");
        c.allow(&[&rel]);
        let p = c.target.root.join(&rel);
        if !p.exists() {
            std::fs::write(&p, &file).map_err(|e| Outcome::Error(format!("cannot lay the haystack: {e}")))?;
        }
    }
    Ok(())
}

/// Run `attempt` (given the attempt's index) until it reaches its state, at most
/// [`HAY_MIB`]`.len()` times with a growing haystack; inconclusive if it never does.
pub fn provoke(c: &mut Ctx<'_>, state: &str, mut attempt: impl FnMut(&mut Ctx<'_>, usize) -> Try) -> Outcome {
    let mut why = Vec::new();
    for (i, mib) in HAY_MIB.iter().enumerate() {
        if let Err(o) = lay_hay(c, *mib) {
            return o;
        }
        match attempt(c, i) {
            Try::Done(o) => return o,
            Try::NotReached(w) => why.push(format!("attempt {} ({mib} MiB haystack): {w}", i + 1)),
        }
    }
    Outcome::Error(format!(
        "inconclusive: {state} was never reached, so nothing was tested ({}). A correct adapter that reads \
         frames as they arrive reaches it; a very fast one may not",
        why.join("; ")
    ))
}

/// Frames received after a pipelined send, each with its arrival time (since the send).
#[derive(Default)]
pub struct Gathered {
    /// The frames, in arrival order.
    pub frames: Vec<(Duration, Peer)>,
    /// How reading ended when it did not end by the caller's predicate: closed or timeout.
    pub end: Option<Recv>,
}

impl Gathered {
    /// The first frame whose `requestId` is `id`, with its arrival time.
    pub fn get(&self, id: &str) -> Option<(Duration, &Peer)> {
        self.frames.iter().find(|(_, v)| v.request_id() == Some(id)).map(|(t, v)| (*t, v))
    }

    /// When the frame for `id` arrived.
    pub fn at(&self, id: &str) -> Option<Duration> {
        self.get(id).map(|(t, _)| t)
    }

    /// The first frame of `kind`.
    pub fn kind(&self, kind: &str) -> Option<(Duration, &Peer)> {
        self.frames.iter().find(|(_, v)| v.kind() == Some(kind)).map(|(t, v)| (*t, v))
    }

    /// Whether the adapter closed the connection.
    pub fn closed(&self) -> bool {
        self.end == Some(Recv::Closed)
    }

    /// How reading ended, as a token (`closed`, `timeout`).
    pub fn end_token(&self) -> String {
        self.end.as_ref().map(super::token).unwrap_or_else(|| "timeout".into())
    }
}

/// Read frames from `conn` (after a send at `t0`) until `done` holds, the connection closes,
/// or `budget` runs out.
pub fn gather(conn: &mut Conn, t0: Instant, budget: Duration, done: impl Fn(&Gathered) -> bool) -> Gathered {
    let mut g = Gathered::default();
    keep_reading(conn, t0, budget, &mut g, done);
    g
}

/// Go on reading into `g` (see [`gather`]).
pub fn keep_reading(
    conn: &mut Conn,
    t0: Instant,
    budget: Duration,
    g: &mut Gathered,
    done: impl Fn(&Gathered) -> bool,
) {
    let until = Instant::now() + budget;
    g.end = None;
    while !done(g) {
        let Some(left) = until.checked_duration_since(Instant::now()).filter(|d| !d.is_zero()) else {
            g.end = Some(Recv::Timeout);
            return;
        };
        match conn.recv_within(left) {
            Recv::Frame(v, _) => g.frames.push((t0.elapsed(), v)),
            Recv::Garbage(_) => {}
            r => {
                g.end = Some(r);
                return;
            }
        }
    }
}

/// Milliseconds, for messages.
pub fn ms(d: Duration) -> u128 {
    d.as_millis()
}

/// The sentence every failure by unread frames ends with.
pub const READ_AS_THEY_ARRIVE: &str = "an adapter must read and admit frames as they arrive while earlier requests \
     run (a serial adapter that leaves invokes unread can honour neither busy nor abort)";
