//! The content guard (issue 15, F7; issue 25, N6): a file whose bytes contain a capability
//! handle is never read, searched or edited, whatever window is asked for, so a handle cannot
//! leave in pieces.
//!
//! Two handles are looked for, both as exact bytes:
//!
//! - the connection's bound handle, of any length, with one `memmem` searcher;
//! - every grant's handle of the minted shape ([`MINTED_HANDLE_LEN`] base64url characters),
//!   known to the adapter only by its SHA-256 and its 64-bit fingerprint
//!   ([`handle_fingerprint`], stored with the grant as `handleFingerprint`). Every window of
//!   that many base64url characters inside a longer or equal run of them gets a rolling
//!   polynomial hash, updated in O(1) per byte; only a window whose hash passes a bitmap of
//!   the granted fingerprints and equals one of them is hashed with SHA-256 and looked up in
//!   the grants' digests. A grants table holding a grant without a fingerprint (written
//!   before fingerprints existed) hashes every window instead, the cost of old. A
//!   hand-written grant of another length is protected only on connections bound with it.
//!
//! A whole file is streamed through a [`Scanner`] on the already-open descriptor in fixed
//! chunks (constant memory; the carried bytes catch an occurrence across a chunk boundary),
//! up to the size seen when it was opened and never further: a file appended to faster than
//! it can be scanned still gets an answer, about the snapshot it had at open. Whatever a read
//! returns lies inside that snapshot; when the file changed after the scan, the returned bytes
//! are scanned again together with enough bytes on each side to hold any handle that overlaps
//! them ([`Guard::context`]), so a handle written meanwhile cannot leave in pieces either.
//!
//! A clean verdict is cached per (device, inode, size, mtime, ctime, grants generation), for
//! every connection whose handle the scan covered, but only for a file whose ctime is at
//! least [`RACY_SECS`] old when its scan starts: a write in the same timestamp tick as the
//! scan could otherwise keep every cached field the same.

use std::collections::{HashMap, HashSet};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use rustix::fs::Stat;
use sha2::{Digest, Sha256};

use super::pread::pread_at;
use super::resolve::{self, err};
use super::{cancelled, Cancel};
use crate::contract::{AdapterCode, AdapterError, CapabilityHandle};

/// The length of a minted handle (`grants::mint_handle`: 32 random bytes in unpadded
/// base64url), the shape of the other grants' handles the guard looks for. It lives here,
/// below `grants`, which re-exports it.
pub const MINTED_HANDLE_LEN: usize = 43;

/// Bytes read per chunk of a whole-file scan.
const CHUNK: usize = 256 * 1024;
/// A file whose ctime is younger than this when its scan starts is never cached clean.
pub(super) const RACY_SECS: i64 = 2;
/// Most cached verdicts (the cache is emptied when full): a tree of this many files is
/// searched again without rescanning (about 80 bytes each, so at most about 5 MiB).
const MAX_CACHED: usize = 65_536;

/// The multiplier of the fingerprint's polynomial hash (odd).
const FP_BASE: u64 = 0x9E37_79B9_7F4A_7C15;
/// `FP_BASE` to the power [`MINTED_HANDLE_LEN`]: what the byte leaving a window weighs.
const FP_OUT: u64 = {
    let mut p = 1u64;
    let mut i = 0;
    while i < MINTED_HANDLE_LEN {
        p = p.wrapping_mul(FP_BASE);
        i += 1;
    }
    p
};

/// Whether each byte is in the base64url alphabet `[A-Za-z0-9_-]`.
const B64: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        t[b] = c.is_ascii_alphanumeric() || c == b'_' || c == b'-';
        b += 1;
    }
    t
};

/// The 64-bit fingerprint of a handle of the minted shape ([`MINTED_HANDLE_LEN`] base64url
/// characters), `None` for any other: the polynomial hash `sum(b[i] * B^(42 - i)) mod 2^64`
/// of its bytes, `B` = `0x9E3779B97F4A7C15`. It is stored with the grant (`handleFingerprint`,
/// 16 lowercase hex digits) so the content guard can skip every window that cannot be a
/// granted handle; 64 bits of a 256-bit random handle leave about 194 bits unknown.
pub fn handle_fingerprint(handle: &str) -> Option<u64> {
    let b = handle.as_bytes();
    (b.len() == MINTED_HANDLE_LEN && b.iter().all(|c| B64[usize::from(*c)]))
        .then(|| b.iter().fold(0u64, |h, c| h.wrapping_mul(FP_BASE).wrapping_add(u64::from(*c))))
}

/// Work done by whole-file scans since the process started (reported in the debug log and
/// read by tests and benches: the figures are work, not time).
#[derive(Debug, Default)]
struct Work {
    bytes: AtomicU64,
    confirmed: AtomicU64,
}

static WORK: Work = Work { bytes: AtomicU64::new(0), confirmed: AtomicU64::new(0) };

/// Bytes fed to content scanners and windows hashed with SHA-256 so far, process-wide.
pub fn scan_work() -> (u64, u64) {
    (WORK.bytes.load(Ordering::Relaxed), WORK.confirmed.load(Ordering::Relaxed))
}

/// The granted fingerprints: a bitmap of their top bits (one load per window) and the exact
/// values behind it.
#[derive(Debug, Default)]
struct Prefilter {
    /// `64 - log2(bits)`: the bitmap index of a hash is `hash >> shift`.
    shift: u32,
    bits: Vec<u64>,
    exact: HashSet<u64>,
}

impl Prefilter {
    fn new(fps: &HashSet<u64>) -> Self {
        // At least 64 bits per fingerprint (a window passes with probability < 1/64), at
        // least 4096 bits, at most 2^24 (2 MiB).
        let want = (fps.len() * 64).clamp(4096, 1 << 24).next_power_of_two();
        let log = want.trailing_zeros();
        let mut bits = vec![0u64; want / 64];
        for fp in fps {
            let i = (fp >> (64 - log)) as usize;
            bits[i / 64] |= 1 << (i % 64);
        }
        Self { shift: 64 - log, bits, exact: fps.clone() }
    }

    #[inline(always)]
    fn may_hold(&self, h: u64) -> bool {
        let i = (h >> self.shift) as usize;
        self.bits[i / 64] & (1 << (i % 64)) != 0
    }
}

/// The digests of every grant's handle, with their fingerprints and the clean verdicts,
/// shared by all connections; the digests are replaced on reload.
#[derive(Debug, Default)]
pub struct GrantDigests {
    current: RwLock<Arc<DigestSet>>,
    /// Clean verdicts valid for every connection whose handle the set covers: file version →
    /// the generation of the set it was judged by.
    clean: Mutex<HashMap<FileKey, u64>>,
}

/// One generation of the grants table's digests.
#[derive(Debug, Default)]
pub struct DigestSet {
    /// Bumped on every reload: a cached verdict is only good for the set it was judged by.
    generation: u64,
    set: HashSet<[u8; 32]>,
    prefilter: Prefilter,
    /// Some grant has no fingerprint: every window is hashed.
    unfiltered: bool,
}

impl DigestSet {
    fn new(generation: u64, grants: impl IntoIterator<Item = ([u8; 32], Option<u64>)>) -> Self {
        let (mut set, mut fps, mut unfiltered) = (HashSet::new(), HashSet::new(), false);
        for (digest, fp) in grants {
            set.insert(digest);
            match fp {
                Some(fp) => {
                    fps.insert(fp);
                }
                None => unfiltered = true,
            }
        }
        Self { generation, set, prefilter: Prefilter::new(&fps), unfiltered }
    }

    /// Whether a scan under this set finds a handle (its fingerprint `fp`, `None` for another
    /// shape than the minted one, and its digest) wherever it occurs.
    fn covers(&self, fp: Option<u64>, digest: &[u8; 32]) -> bool {
        let Some(fp) = fp else { return false };
        self.set.contains(digest) && (self.unfiltered || self.prefilter.exact.contains(&fp))
    }
}

impl GrantDigests {
    /// A table of the grants `(digest, fingerprint)`.
    pub fn new(grants: impl IntoIterator<Item = ([u8; 32], Option<u64>)>) -> Self {
        Self { current: RwLock::new(Arc::new(DigestSet::new(0, grants))), clean: Mutex::new(HashMap::new()) }
    }

    /// Replace the grants (after a reload).
    pub fn replace(&self, grants: impl IntoIterator<Item = ([u8; 32], Option<u64>)>) {
        let mut cur = self.current.write().unwrap_or_else(|p| p.into_inner());
        let generation = cur.generation + 1;
        *cur = Arc::new(DigestSet::new(generation, grants));
    }

    /// Whether some grant has no fingerprint (every window is hashed while one is granted).
    pub fn unfiltered(&self) -> bool {
        self.snapshot().unfiltered
    }

    fn snapshot(&self) -> Arc<DigestSet> {
        self.current.read().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// What identifies a version of a file for the verdict cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct FileKey {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl FileKey {
    /// The key of the file `st` describes.
    #[allow(clippy::useless_conversion, clippy::unnecessary_cast)] // field types differ between targets
    pub(super) fn of(st: &Stat) -> Self {
        let (dev, ino) = resolve::identity(st);
        Self {
            dev,
            ino,
            size: resolve::size_of(st),
            mtime: (st.st_mtime as i64, st.st_mtime_nsec as i64),
            ctime: (st.st_ctime as i64, st.st_ctime_nsec as i64),
        }
    }
}

impl FileKey {
    /// Whether `self` and `other` are the same content version of the same file: device,
    /// inode, size and mtime. The ctime is left out here (not in the cache key): it also
    /// moves when only the link count does, as when an atomic overwrite renames a new file
    /// over the one being read, whose bytes stay exactly those that were judged.
    pub(super) fn same_content(&self, other: &FileKey) -> bool {
        (self.dev, self.ino, self.size, self.mtime) == (other.dev, other.ino, other.size, other.mtime)
    }

    /// Whether `self` is the file `earlier` describes, at least as long as it was then
    /// (unchanged, appended to, or rewritten in place).
    pub(super) fn same_file_not_shorter(&self, earlier: &FileKey) -> bool {
        (self.dev, self.ino) == (earlier.dev, earlier.ino) && self.size >= earlier.size
    }
}

/// The guard of one binding: its handle and the grants' shared digests and verdicts.
#[derive(Debug)]
pub struct Guard {
    handle: Arc<CapabilityHandle>,
    /// SHA-256 of `handle`.
    digest: [u8; 32],
    /// Its fingerprint, if it has the minted shape.
    fingerprint: Option<u64>,
    digests: Arc<GrantDigests>,
    /// Verdicts for this binding alone, used while the shared set does not cover its handle
    /// (a hand-written grant of another shape, or one without a fingerprint that matches).
    own: Mutex<HashMap<FileKey, u64>>,
    /// Broken on purpose (the fault switch `other-grant-scan-per-chunk`, set by the server):
    /// the scan for the other grants' handles starts afresh at each chunk fed.
    minted_per_chunk: bool,
    /// Broken on purpose (the fault switch `other-grant-run-start-only`, set by the server):
    /// the scan for the other grants' handles confirms only the first window of each run.
    minted_run_start_only: bool,
    /// Broken on purpose (the fault switch `trailing-word-refused`, set by the server): a
    /// file whose scan ends inside a run of a window's length is refused `io_error`.
    trailing_word_refused: bool,
    /// Broken on purpose (the fault switch `bound-scan-minted-only`, set by the server): the
    /// exact scan for the bound handle never runs; only the minted-shape scan looks for it.
    bound_scan_off: bool,
    /// Broken on purpose (the fault switch `other-grant-chunk-wrap`, set by the server): see
    /// [`Guard::minted_chunk_wrap`].
    minted_chunk_wrap: bool,
}

/// `capability_in_content`: the file holds a handle.
pub(super) fn handle_in_content() -> AdapterError {
    err(AdapterCode::CapabilityInContent, "the file contains a capability handle")
}

fn remember(cache: &Mutex<HashMap<FileKey, u64>>, key: FileKey, generation: u64) {
    let mut clean = cache.lock().unwrap_or_else(|p| p.into_inner());
    if clean.len() >= MAX_CACHED {
        clean.clear();
    }
    clean.insert(key, generation);
}

impl Guard {
    /// A guard for a connection bound with `handle`, checking other grants against `digests`.
    pub fn new(handle: CapabilityHandle, digests: Arc<GrantDigests>) -> Self {
        let digest = Sha256::digest(handle.expose().as_bytes()).into();
        let fingerprint = handle_fingerprint(handle.expose());
        Self {
            handle: Arc::new(handle),
            digest,
            fingerprint,
            digests,
            own: Mutex::new(HashMap::new()),
            minted_per_chunk: false,
            minted_run_start_only: false,
            trailing_word_refused: false,
            bound_scan_off: false,
            minted_chunk_wrap: false,
        }
    }

    /// This guard broken on purpose, for the fault switch `other-grant-scan-per-chunk` only:
    /// its scans for the other grants' handles start afresh at each chunk, so a handle cut by
    /// a chunk boundary is missed.
    pub fn minted_per_chunk(mut self) -> Self {
        self.minted_per_chunk = true;
        self
    }

    /// This guard broken on purpose, for the fault switch `other-grant-run-start-only` only:
    /// its scans for the other grants' handles confirm only the first window of each run of
    /// base64url bytes, never a rolled one, so a handle with alphabet bytes before it is missed.
    pub fn minted_run_start_only(mut self) -> Self {
        self.minted_run_start_only = true;
        self
    }

    /// This guard broken on purpose, for the fault switch `bound-scan-minted-only` only: the
    /// bound handle is looked for by the scan for handles of the minted shape alone, so a
    /// bound handle of another length (a hand-written grant) is never found in a file.
    pub fn bound_scan_minted_only(mut self) -> Self {
        self.bound_scan_off = true;
        self
    }

    /// This guard broken on purpose, for the fault switch `other-grant-chunk-wrap` only: when a
    /// chunk starts with a byte outside the alphabet while a run of a window's length or more
    /// goes on from the chunk before, the scan for the other grants' handles stops for the
    /// rest of that chunk (cargo-mutants' `fs/guard.rs:570:23`, `+=` → `-=` on that byte's
    /// index, which wraps it at 0 in a release build; sample 15).
    pub fn minted_chunk_wrap(mut self) -> Self {
        self.minted_chunk_wrap = true;
        self
    }

    /// This guard broken on purpose, for the fault switch `trailing-word-refused` only: a
    /// file that ends in [`MINTED_HANDLE_LEN`] base64url bytes or more is refused `io_error`.
    pub fn trailing_word_refused(mut self) -> Self {
        self.trailing_word_refused = true;
        self
    }

    /// The cache whose verdicts hold for this binding under `set`.
    fn verdicts(&self, set: &DigestSet) -> &Mutex<HashMap<FileKey, u64>> {
        if set.covers(self.fingerprint, &self.digest) {
            &self.digests.clean
        } else {
            &self.own
        }
    }

    /// Whether `st` was judged clean under the current digests.
    pub(super) fn is_cached_clean(&self, st: &Stat) -> bool {
        let set = self.digests.snapshot();
        let clean = self.verdicts(&set).lock().unwrap_or_else(|p| p.into_inner());
        clean.get(&FileKey::of(st)) == Some(&set.generation)
    }

    /// Remember that the file `before` describes was scanned clean by `scanner`, when that is
    /// safe: it did not change during the scan (`after`) and its ctime is not racy. Every scan
    /// covers all the grants of its set, so the verdict is shared; a binding whose handle the
    /// set does not cover keeps it for itself as well.
    pub(super) fn remember_clean(&self, scanner: &Scanner, before: &Stat, after: &Stat) {
        let key = FileKey::of(before);
        if key != FileKey::of(after) || !ctime_settled(before, scanner.started) {
            return;
        }
        let generation = scanner.digests.generation;
        remember(&self.digests.clean, key, generation);
        if !scanner.digests.covers(self.fingerprint, &self.digest) {
            remember(&self.own, key, generation);
        }
    }

    /// A fresh streaming scanner.
    pub(super) fn scanner(&self) -> Scanner {
        let mut s = Scanner::new(self.handle.clone(), self.digests.snapshot());
        s.minted_per_chunk = self.minted_per_chunk;
        s.minted_run_start_only = self.minted_run_start_only;
        s.bound_scan_off = self.bound_scan_off;
        s.minted_chunk_wrap = self.minted_chunk_wrap;
        s
    }

    /// Bytes on each side of a range that can hold part of a handle overlapping it.
    pub(super) fn context(&self) -> usize {
        self.handle.expose().len().max(MINTED_HANDLE_LEN) - 1
    }

    /// Check the file open on `fd` (`st` its metadata when it was opened): its first
    /// `st_size` bytes, the snapshot every read of this request stays inside (bytes appended
    /// meanwhile are not waited for). `capability_in_content` if they hold a handle anywhere.
    /// Cached per file version (see the module documentation).
    pub(super) fn check_file(&self, fd: &OwnedFd, st: &Stat, cancel: &Cancel) -> Result<(), AdapterError> {
        if self.is_cached_clean(st) {
            return Ok(());
        }
        let size = resolve::size_of(st);
        let mut scanner = self.scanner();
        let mut at = 0u64;
        while at < size {
            if cancel.is_cancelled() {
                return Err(cancelled());
            }
            let want = (size - at).min(CHUNK as u64) as usize;
            let chunk = pread_at(fd, at, want)?;
            scanner.feed(&chunk);
            at += chunk.len() as u64;
            if scanner.found() {
                tracing::debug!(bytes = at, confirmed = scanner.confirmed, found = true, "content scan");
                return Err(handle_in_content());
            }
            if chunk.len() < want {
                break; // it shrank: the rest is gone
            }
        }
        tracing::debug!(bytes = at, confirmed = scanner.confirmed, found = false, "content scan");
        if self.trailing_word_refused && scanner.run >= MINTED_HANDLE_LEN {
            return Err(err(AdapterCode::IoError, "the content scan did not finish"));
        }
        let after = rustix::fs::fstat(fd).map_err(resolve::map_errno)?;
        self.remember_clean(&scanner, st, &after);
        Ok(())
    }

    /// Check the bytes `[from, to)` of the file open on `fd` as they are now, together with
    /// [`Guard::context`] bytes on each side (as far as the file reaches): what a result taken
    /// from that range after the file changed must pass (see the module documentation).
    pub(super) fn check_range(&self, fd: &OwnedFd, from: u64, to: u64, cancel: &Cancel) -> Result<(), AdapterError> {
        let ctx = self.context() as u64;
        let (mut at, end) = (from.saturating_sub(ctx), to.saturating_add(ctx));
        let mut scanner = self.scanner();
        while at < end {
            if cancel.is_cancelled() {
                return Err(cancelled());
            }
            let want = (end - at).min(CHUNK as u64) as usize;
            let chunk = pread_at(fd, at, want)?;
            scanner.feed(&chunk);
            if scanner.found() {
                return Err(handle_in_content());
            }
            if chunk.len() < want {
                break;
            }
            at += chunk.len() as u64;
        }
        Ok(())
    }

    /// Check bytes held in memory (a file `fs.edit` loaded whole, or a window read together
    /// with its [`Guard::context`]).
    pub(super) fn check_bytes(&self, bytes: &[u8]) -> Result<(), AdapterError> {
        let mut scanner = self.scanner();
        scanner.feed(bytes);
        if scanner.found() {
            Err(handle_in_content())
        } else {
            Ok(())
        }
    }
}

/// Whether `st`'s ctime is at least [`RACY_SECS`] before `started` (seconds since the epoch).
fn ctime_settled(st: &Stat, started: i64) -> bool {
    #[allow(clippy::useless_conversion, clippy::unnecessary_cast)]
    let ctime = st.st_ctime as i64;
    ctime.saturating_add(RACY_SECS) <= started
}

fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// A streaming search of a byte stream for the bound handle and for any granted handle of
/// the minted shape. Feed consecutive chunks; memory is constant.
pub(super) struct Scanner {
    handle: Arc<CapabilityHandle>,
    digests: Arc<DigestSet>,
    /// The last `handle.len() - 1` bytes fed (an occurrence may start in them).
    tail: Vec<u8>,
    /// The last [`MINTED_HANDLE_LEN`] bytes fed (the bytes leaving the rolling window at the
    /// start of the next chunk, and the start of a window to confirm).
    last: [u8; MINTED_HANDLE_LEN],
    /// Consecutive base64url bytes the stream ends in, at most [`MINTED_HANDLE_LEN`].
    run: usize,
    /// The rolling hash of the last `run` bytes.
    hash: u64,
    found: bool,
    /// When the scan started (seconds since the epoch), for the racy-ctime rule.
    started: i64,
    /// Windows hashed with SHA-256.
    confirmed: u64,
    /// See [`Guard::minted_per_chunk`].
    minted_per_chunk: bool,
    /// See [`Guard::minted_run_start_only`].
    minted_run_start_only: bool,
    /// See [`Guard::bound_scan_minted_only`].
    bound_scan_off: bool,
    /// See [`Guard::minted_chunk_wrap`].
    minted_chunk_wrap: bool,
}

impl Scanner {
    fn new(handle: Arc<CapabilityHandle>, digests: Arc<DigestSet>) -> Self {
        Self {
            handle,
            digests,
            tail: Vec::new(),
            last: [0; MINTED_HANDLE_LEN],
            run: 0,
            hash: 0,
            found: false,
            started: now_secs(),
            confirmed: 0,
            minted_per_chunk: false,
            minted_run_start_only: false,
            bound_scan_off: false,
            minted_chunk_wrap: false,
        }
    }

    /// Whether a handle was seen in what was fed so far.
    pub(super) fn found(&self) -> bool {
        self.found
    }

    /// Feed the next bytes of the stream.
    pub(super) fn feed(&mut self, chunk: &[u8]) {
        if self.found || chunk.is_empty() {
            return;
        }
        WORK.bytes.fetch_add(chunk.len() as u64, Ordering::Relaxed);
        if !self.bound_scan_off {
            self.feed_bound(chunk);
        }
        if !self.found && !self.digests.set.is_empty() {
            if self.minted_per_chunk {
                self.run = 0;
            }
            self.feed_minted(chunk);
        }
    }

    fn feed_bound(&mut self, chunk: &[u8]) {
        let n = self.handle.expose().len();
        if n == 0 {
            return;
        }
        // An occurrence across the boundary starts in the tail and ends in the chunk.
        if !self.tail.is_empty() {
            let mut joint = self.tail.clone();
            joint.extend_from_slice(&chunk[..chunk.len().min(n - 1)]);
            if self.handle.occurs_in(&joint) {
                self.found = true;
                return;
            }
        }
        if self.handle.occurs_in(chunk) {
            self.found = true;
            return;
        }
        let keep = n - 1;
        if chunk.len() >= keep {
            self.tail.clear();
            self.tail.extend_from_slice(&chunk[chunk.len() - keep..]);
        } else {
            self.tail.extend_from_slice(chunk);
            let excess = self.tail.len().saturating_sub(keep);
            self.tail.drain(..excess);
        }
    }

    /// Roll the fingerprint over every base64url window of the minted length; confirm the
    /// windows the prefilter lets through (all of them when some grant has no fingerprint).
    ///
    /// Three modes. Between runs, eight bytes at a time are skipped until four whole words in
    /// a row lie in the alphabet's byte span ([`skip_words`]): a run of a window's length
    /// covers at least four whole words, so nothing skipped can hold one. Near such words,
    /// the run's length is counted byte by byte (branch-free); once it reaches a window, the
    /// window's hash is computed whole and then rolled byte by byte until the run ends.
    fn feed_minted(&mut self, chunk: &[u8]) {
        const N: usize = MINTED_HANDLE_LEN;
        let set = &*self.digests;
        let (mut hash, mut run, mut confirmed) = (self.hash, self.run, 0u64);
        let rolled_checked = !self.minted_run_start_only;
        let chunk_wrap = self.minted_chunk_wrap;
        let last = &self.last;
        let mut found = false;
        let n = chunk.len();
        let mut i = 0;
        // Up to here bytes are looked at one by one, whatever the run.
        let mut exact_until = 0;
        'outer: while i < n {
            if run == 0 && i >= exact_until {
                (i, exact_until) = skip_words(chunk, i);
            }
            if run < N {
                // Count the run until it holds a window.
                while i < n {
                    run = (run + 1) * usize::from(B64[usize::from(chunk[i])]);
                    i += 1;
                    if run == N {
                        break;
                    }
                    if run == 0 && i >= exact_until {
                        continue 'outer;
                    }
                }
                if run < N {
                    break 'outer;
                }
                let end = i - 1;
                hash = window_at(last, chunk, end)
                    .iter()
                    .fold(0u64, |h, c| h.wrapping_mul(FP_BASE).wrapping_add(u64::from(*c)));
                if set.unfiltered || set.prefilter.may_hold(hash) && set.prefilter.exact.contains(&hash) {
                    confirmed += 1;
                    if confirm(set, last, chunk, end) {
                        found = true;
                        break 'outer;
                    }
                }
            }
            // Roll while the run goes on.
            while i < n {
                let c = chunk[i];
                if !B64[usize::from(c)] {
                    if chunk_wrap && i == 0 {
                        break 'outer;
                    }
                    run = 0;
                    i += 1;
                    continue 'outer;
                }
                let out = if i >= N { chunk[i - N] } else { last[i] };
                hash = hash
                    .wrapping_mul(FP_BASE)
                    .wrapping_add(u64::from(c))
                    .wrapping_sub(u64::from(out).wrapping_mul(FP_OUT));
                if rolled_checked
                    && (set.unfiltered || set.prefilter.may_hold(hash) && set.prefilter.exact.contains(&hash))
                {
                    confirmed += 1;
                    if confirm(set, last, chunk, i) {
                        found = true;
                        break 'outer;
                    }
                }
                i += 1;
            }
        }
        self.confirmed += confirmed;
        WORK.confirmed.fetch_add(confirmed, Ordering::Relaxed);
        (self.hash, self.run, self.found) = (hash, run.min(N), found);
        // Keep the last N bytes of the stream.
        if n >= N {
            self.last.copy_from_slice(&chunk[n - N..]);
        } else {
            self.last.copy_within(n.., 0);
            self.last[N - n..].copy_from_slice(chunk);
        }
    }
}

/// Whether all eight bytes of `w` lie in `0x2D..=0x7A`, the span of the base64url alphabet
/// (`-` to `z`). Exact as a whole: false means some byte is outside it, so no run of
/// base64url bytes goes through the word.
#[inline(always)]
fn in_b64_span(w: u64) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // Some byte below 0x2D (exact as a zero test for bytes under 0x80) ...
    let below = w.wrapping_sub(ONES * 0x2D) & !w & HIGH;
    // ... or above 0x7A, or with its high bit set.
    let above = (w.wrapping_add(ONES * (127 - 0x7A)) | w) & HIGH;
    below | above == 0
}

/// From `from` (where no run is going on), skip whole 8-byte words until four in a row lie
/// in the alphabet's span. Returns where to go on byte by byte, with the run starting at 0
/// there, and up to where to stay byte by byte: the word before those four failed (or lies
/// before `from`), so a run through them starts at or after that word; at the end of the
/// chunk, the same from the word before the trailing words in the span (their run is
/// counted exactly for the next chunk). A run of [`MINTED_HANDLE_LEN`] bytes covers at least
/// four whole words wherever it starts, so no skipped byte is part of a window.
fn skip_words(chunk: &[u8], from: usize) -> (usize, usize) {
    const _: () = assert!(MINTED_HANDLE_LEN >= 4 * 8 + 7);
    let n = chunk.len();
    let (mut j, mut full) = (from, 0usize);
    while j + 8 <= n {
        let w = <[u8; 8]>::try_from(&chunk[j..j + 8]).map_or(0, u64::from_le_bytes);
        if in_b64_span(w) {
            full += 1;
            if full == 4 {
                return (j.saturating_sub(32).max(from), j + 8);
            }
        } else {
            full = 0;
        }
        j += 8;
    }
    (j.saturating_sub(8 * (full + 1)).max(from), n)
}

/// The [`MINTED_HANDLE_LEN`] bytes ending at `chunk[end]`, the first of them perhaps in
/// `last` (the bytes fed before the chunk).
fn window_at(last: &[u8; MINTED_HANDLE_LEN], chunk: &[u8], end: usize) -> [u8; MINTED_HANDLE_LEN] {
    const N: usize = MINTED_HANDLE_LEN;
    let mut window = [0u8; N];
    let from_chunk = (end + 1).min(N);
    let from_last = N - from_chunk;
    window[..from_last].copy_from_slice(&last[N - from_last..]);
    window[from_last..].copy_from_slice(&chunk[end + 1 - from_chunk..=end]);
    window
}

/// Whether the window of [`MINTED_HANDLE_LEN`] bytes ending at `chunk[end]` hashes to a
/// granted digest.
#[cold]
fn confirm(set: &DigestSet, last: &[u8; MINTED_HANDLE_LEN], chunk: &[u8], end: usize) -> bool {
    let d: [u8; 32] = Sha256::digest(window_at(last, chunk, end)).into();
    set.set.contains(&d)
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: &str = "aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789_-ABCD"; // 42
    fn minted(c: char) -> String {
        format!("{H}{c}")
    }

    fn entry(h: &str, fingerprinted: bool) -> ([u8; 32], Option<u64>) {
        (Sha256::digest(h.as_bytes()).into(), if fingerprinted { handle_fingerprint(h) } else { None })
    }

    fn guard_with(handle: &str, others: &[&str], fingerprinted: bool) -> Guard {
        let digests = Arc::new(GrantDigests::new(others.iter().map(|h| entry(h, fingerprinted))));
        Guard::new(CapabilityHandle::new(handle), digests)
    }

    fn scan_chunks(g: &Guard, chunks: &[&[u8]]) -> Scanner {
        let mut s = g.scanner();
        for c in chunks {
            s.feed(c);
        }
        s
    }

    /// Found with fingerprints, and found the same way without (every window hashed).
    fn found(handle: &str, others: &[&str], chunks: &[&[u8]]) -> bool {
        let with = scan_chunks(&guard_with(handle, others, true), chunks).found();
        let without = scan_chunks(&guard_with(handle, others, false), chunks).found();
        assert_eq!(with, without, "the prefilter changed a verdict");
        with
    }

    fn split_everywhere(text: &[u8], handle: &str, others: &[&str]) -> Vec<bool> {
        (0..=text.len()).map(|at| found(handle, others, &[&text[..at], &text[at..]])).collect()
    }

    #[test]
    fn the_bound_handle_is_found_across_every_split() {
        let bound = minted('Z');
        let text = format!("prefix {bound} suffix");
        assert!(split_everywhere(text.as_bytes(), &bound, &[]).iter().all(|f| *f));
        // Byte by byte too.
        let bytes: Vec<&[u8]> = text.as_bytes().chunks(1).collect();
        assert!(found(&bound, &[], &bytes));
        // One character short is not the handle.
        let short = format!("prefix {} suffix", &bound[..bound.len() - 1]);
        assert!(split_everywhere(short.as_bytes(), &bound, &[]).iter().all(|f| !*f));
    }

    #[test]
    fn another_grants_handle_is_found_inside_any_run_and_split() {
        let bound = minted('Z');
        let other = minted('Q');
        let pad = "lorem ipsum.dolor=sit amet\n".repeat(4);
        for text in [
            format!("x {other} y"),
            format!("AAAA{other}BBBB"),
            other.clone(),
            format!("-{other}"),
            format!("{pad}.{other}.{pad}"),
            format!("{pad}{other}\n{pad}"),
            format!("{pad}=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA{other}"),
        ] {
            let f = split_everywhere(text.as_bytes(), &bound, &[&bound, &other]);
            assert!(f.iter().all(|f| *f), "{text}: {f:?}");
            let bytes: Vec<&[u8]> = text.as_bytes().chunks(1).collect();
            assert!(found(&bound, &[&other], &bytes), "{text} byte by byte");
            let threes: Vec<&[u8]> = text.as_bytes().chunks(3).collect();
            assert!(found(&bound, &[&other], &threes), "{text} by threes");
        }
        // Not granted, or cut by a separator: not found.
        let stranger = minted('W');
        assert!(!found(&bound, &[&other], &[format!("x {stranger} y").as_bytes()]));
        let cut = format!("{} {}", &other[..20], &other[20..]);
        assert!(split_everywhere(cut.as_bytes(), &bound, &[&other]).iter().all(|f| !*f));
    }

    /// Random base64url-heavy streams with granted handles planted at random places, fed in
    /// random pieces: the rolling prefilter finds exactly what a naive search finds.
    #[test]
    fn the_rolling_prefilter_agrees_with_a_naive_search() {
        let mut rng = crate::util::prng::SplitMix64::new(0x51ed_270b_2e8f_3a11);
        let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let granted: Vec<String> = (0..5)
            .map(|_| (0..MINTED_HANDLE_LEN).map(|_| alphabet[rng.below(64) as usize] as char).collect())
            .collect();
        let others: Vec<&str> = granted.iter().map(String::as_str).collect();
        let bound = minted('Z');
        for round in 0..300 {
            let mut text = Vec::new();
            while text.len() < 200 + (round % 7) * 300 {
                match rng.below(24) {
                    0 => text.extend_from_slice(granted[rng.below(5) as usize].as_bytes()),
                    1 => text.push(b' '),
                    // Separators inside the alphabet's byte span, and outside it.
                    3 => text.push(b".=:/@[`"[rng.below(7) as usize]),
                    4 => text.push([0u8, b'\n', 0xC3, 0x7B, 0x2C][rng.below(5) as usize]),
                    5 => {
                        // A run just short of, at, or just past a window's length.
                        let len = 38 + rng.below(10) as usize;
                        text.push(b'.');
                        text.extend((0..len).map(|_| alphabet[rng.below(64) as usize]));
                        text.push(b'.');
                    }
                    2 => {
                        // A granted handle with one character changed: not a handle.
                        let mut h = granted[rng.below(5) as usize].clone().into_bytes();
                        let at = rng.below(h.len() as u64) as usize;
                        h[at] = if h[at] == b'A' { b'B' } else { b'A' };
                        text.extend_from_slice(&h);
                    }
                    _ => text.push(alphabet[rng.below(64) as usize]),
                }
            }
            let naive = granted.iter().any(|h| memchr::memmem::find(&text, h.as_bytes()).is_some());
            let mut pieces = Vec::new();
            let mut rest = &text[..];
            while !rest.is_empty() {
                let n = (rng.below(90) as usize + 1).min(rest.len());
                pieces.push(&rest[..n]);
                rest = &rest[n..];
            }
            assert_eq!(found(&bound, &others, &pieces), naive, "round {round}");
            assert_eq!(found(&bound, &others, &[&text]), naive, "round {round}, whole");
        }
    }

    /// The work of a scan is linear: a megabyte of base64url holding no granted handle is
    /// rolled through without one SHA-256 (where every window used to be hashed), and a grant
    /// without a fingerprint brings back hashing every window.
    #[test]
    fn only_candidate_windows_are_hashed() {
        let mut rng = crate::util::prng::SplitMix64::new(7);
        let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let text: Vec<u8> = (0..1 << 20).map(|_| alphabet[rng.below(64) as usize]).collect();
        let others: Vec<String> = (0..1000).map(|i| format!("{}{i:04}", &H[..MINTED_HANDLE_LEN - 4])).collect();
        let refs: Vec<&str> = others.iter().map(String::as_str).collect();
        let g = guard_with(&minted('Z'), &refs, true);
        let s = scan_chunks(&g, &text.chunks(CHUNK).collect::<Vec<_>>());
        assert!(!s.found());
        assert_eq!(s.confirmed, 0, "no window of random text passes a 64-bit fingerprint");
        let g = guard_with(&minted('Z'), &refs, false);
        let s = scan_chunks(&g, &[&text[..4096]]);
        assert_eq!(s.confirmed, (4096 - MINTED_HANDLE_LEN + 1) as u64);
    }

    #[test]
    fn only_the_minted_shape_has_a_fingerprint() {
        assert!(handle_fingerprint(&minted('Q')).is_some());
        assert_ne!(handle_fingerprint(&minted('Q')), handle_fingerprint(&minted('R')));
        assert_eq!(handle_fingerprint(H), None, "42 characters");
        assert_eq!(handle_fingerprint(&format!("{H}=")), None, "not base64url");
        assert_eq!(handle_fingerprint(&format!("{H}QQ")), None, "44 characters");
    }

    /// A verdict judged on one connection serves another whose handle the set covers, and
    /// not one whose handle it does not cover.
    #[test]
    fn clean_verdicts_are_shared_across_bindings() {
        let (a, b) = (minted('A'), minted('B'));
        let digests = Arc::new(GrantDigests::new([entry(&a, true), entry(&b, true)]));
        let ga = Guard::new(CapabilityHandle::new(a.as_str()), digests.clone());
        let gb = Guard::new(CapabilityHandle::new(b.as_str()), digests.clone());
        let odd = Guard::new(CapabilityHandle::new("short-hand-written"), digests.clone());
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.txt");
        std::fs::write(&path, "clean text\n").unwrap();
        let file = std::fs::File::open(&path).unwrap();
        let fd: OwnedFd = file.into();
        let st = rustix::fs::fstat(&fd).unwrap();
        let mut scanner = ga.scanner();
        scanner.feed(b"clean text\n");
        scanner.started = now_secs() + RACY_SECS + 1; // as if the file were old
        ga.remember_clean(&scanner, &st, &st);
        assert!(ga.is_cached_clean(&st) && gb.is_cached_clean(&st));
        assert!(!odd.is_cached_clean(&st), "a handle outside the set was not looked for");
        digests.replace([entry(&a, true), entry(&b, true)]);
        assert!(!ga.is_cached_clean(&st), "a reload starts over");
    }
}
