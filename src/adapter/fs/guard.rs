//! The content guard (issue 15, F7): a file whose bytes contain a capability handle is never
//! read, searched or edited, whatever window is asked for, so a handle cannot leave in pieces.
//!
//! Two handles are looked for, both as exact bytes:
//!
//! - the connection's bound handle, of any length, with one `memmem` searcher;
//! - every other grant's handle, known only by its SHA-256: each window of
//!   [`MINTED_HANDLE_LEN`] base64url characters inside a longer or equal run of base64url
//!   characters is hashed and looked up in the grants table's digests (`grant` mints handles
//!   of exactly that shape; a hand-written grant with another length is protected only on
//!   connections bound with it).
//!
//! A whole file is streamed through a [`Scanner`] on the already-open descriptor in fixed
//! chunks (constant memory; the last `len - 1` bytes of each chunk carry over, so an
//! occurrence across a chunk boundary is found). A clean verdict is cached per
//! (device, inode, size, mtime, ctime, grants generation), but only for a file whose ctime is
//! at least [`RACY_SECS`] old when its scan starts: a write in the same timestamp tick as the
//! scan could otherwise keep every cached field the same.

use std::collections::{HashMap, HashSet};
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex, RwLock};

use rustix::fs::Stat;
use sha2::{Digest, Sha256};

use super::pread::pread_at;
use super::resolve::{self, err};
use super::{cancelled, Cancel};
use crate::adapter::grants::MINTED_HANDLE_LEN;
use crate::contract::{AdapterCode, AdapterError, CapabilityHandle};

/// Bytes read per chunk of a whole-file scan.
const CHUNK: usize = 256 * 1024;
/// A file whose ctime is younger than this when its scan starts is never cached clean.
pub(super) const RACY_SECS: i64 = 2;
/// Most cached verdicts per connection (the cache is emptied when full).
const MAX_CACHED: usize = 4096;

/// The digests of every grant's handle, shared by all connections and replaced on reload.
#[derive(Debug, Default)]
pub struct GrantDigests {
    current: RwLock<Arc<DigestSet>>,
}

/// One generation of the grants table's digests.
#[derive(Debug, Default)]
pub struct DigestSet {
    /// Bumped on every reload: a cached verdict is only good for the set it was judged by.
    generation: u64,
    set: HashSet<[u8; 32]>,
}

impl GrantDigests {
    /// A table holding `digests`.
    pub fn new(digests: impl IntoIterator<Item = [u8; 32]>) -> Self {
        Self { current: RwLock::new(Arc::new(DigestSet { generation: 0, set: digests.into_iter().collect() })) }
    }

    /// Replace the digests (after a reload).
    pub fn replace(&self, digests: impl IntoIterator<Item = [u8; 32]>) {
        let mut cur = self.current.write().unwrap_or_else(|p| p.into_inner());
        let generation = cur.generation + 1;
        *cur = Arc::new(DigestSet { generation, set: digests.into_iter().collect() });
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
}

/// The guard of one binding: its handle, the grants' digests and the clean verdicts.
#[derive(Debug)]
pub struct Guard {
    handle: CapabilityHandle,
    digests: Arc<GrantDigests>,
    clean: Mutex<HashMap<FileKey, u64>>,
}

/// `capability_in_content`: the file holds a handle.
pub(super) fn handle_in_content() -> AdapterError {
    err(AdapterCode::CapabilityInContent, "the file contains a capability handle")
}

impl Guard {
    /// A guard for a connection bound with `handle`, checking other grants against `digests`.
    pub fn new(handle: CapabilityHandle, digests: Arc<GrantDigests>) -> Self {
        Self { handle, digests, clean: Mutex::new(HashMap::new()) }
    }

    /// Whether `st` was judged clean under the current digests.
    pub(super) fn is_cached_clean(&self, st: &Stat) -> bool {
        let generation = self.digests.snapshot().generation;
        let clean = self.clean.lock().unwrap_or_else(|p| p.into_inner());
        clean.get(&FileKey::of(st)) == Some(&generation)
    }

    /// Remember that the file `before` describes was scanned clean by `scanner`, when that is
    /// safe: it did not change during the scan (`after`) and its ctime is not racy.
    pub(super) fn remember_clean(&self, scanner: &Scanner, before: &Stat, after: &Stat) {
        let key = FileKey::of(before);
        if key != FileKey::of(after) || !ctime_settled(before, scanner.started) {
            return;
        }
        let mut clean = self.clean.lock().unwrap_or_else(|p| p.into_inner());
        if clean.len() >= MAX_CACHED {
            clean.clear();
        }
        clean.insert(key, scanner.digests.generation);
    }

    /// A fresh streaming scanner.
    pub(super) fn scanner(&self) -> Scanner {
        Scanner::new(self.handle.clone(), self.digests.snapshot())
    }

    /// Check the whole file open on `fd` (`st` its metadata): `capability_in_content` if it
    /// holds a handle anywhere. Cached per file version (see the module documentation).
    pub(super) fn check_file(&self, fd: &OwnedFd, st: &Stat, cancel: &Cancel) -> Result<(), AdapterError> {
        if self.is_cached_clean(st) {
            return Ok(());
        }
        let mut scanner = self.scanner();
        let mut at = 0u64;
        loop {
            if cancel.is_cancelled() {
                return Err(cancelled());
            }
            let chunk = pread_at(fd, at, CHUNK)?;
            scanner.feed(&chunk);
            if scanner.found() {
                return Err(handle_in_content());
            }
            at += chunk.len() as u64;
            if chunk.len() < CHUNK {
                break;
            }
        }
        let after = rustix::fs::fstat(fd).map_err(resolve::map_errno)?;
        self.remember_clean(&scanner, st, &after);
        Ok(())
    }

    /// Check bytes held in memory (a file `fs.edit` loaded whole).
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

/// Whether `b` is in the base64url alphabet `[A-Za-z0-9_-]`.
fn is_b64(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

/// A streaming search of a byte stream for the bound handle and for any granted handle of
/// the minted shape. Feed consecutive chunks; memory is constant.
pub(super) struct Scanner {
    handle: CapabilityHandle,
    digests: Arc<DigestSet>,
    /// The last `handle.len() - 1` bytes fed (an occurrence may start in them).
    tail: Vec<u8>,
    /// The last up to `MINTED_HANDLE_LEN - 1` bytes of the base64url run the stream ends in.
    run: Vec<u8>,
    found: bool,
    /// When the scan started (seconds since the epoch), for the racy-ctime rule.
    started: i64,
}

impl Scanner {
    fn new(handle: CapabilityHandle, digests: Arc<DigestSet>) -> Self {
        Self { handle, digests, tail: Vec::new(), run: Vec::new(), found: false, started: now_secs() }
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
        self.feed_bound(chunk);
        if !self.found && !self.digests.set.is_empty() {
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

    fn feed_minted(&mut self, chunk: &[u8]) {
        const N: usize = MINTED_HANDLE_LEN;
        let mut i = 0;
        while i < chunk.len() {
            // The run continuing from the previous chunk (or a new one) from `i`.
            let start = i;
            while i < chunk.len() && is_b64(chunk[i]) {
                i += 1;
            }
            let segment = &chunk[start..i];
            let reaches_end = i == chunk.len();
            if !segment.is_empty() {
                let carried = if start == 0 { std::mem::take(&mut self.run) } else { Vec::new() };
                if carried.len() + segment.len() >= N {
                    // Windows that start in the carried bytes need them joined to the segment.
                    if !carried.is_empty() {
                        let mut joint = carried.clone();
                        joint.extend_from_slice(&segment[..segment.len().min(N - 1)]);
                        if self.any_window(&joint) {
                            self.found = true;
                            return;
                        }
                    }
                    if self.any_window(segment) {
                        self.found = true;
                        return;
                    }
                }
                if reaches_end {
                    let mut run = carried;
                    run.extend_from_slice(&segment[segment.len().saturating_sub(N - 1)..]);
                    let excess = run.len().saturating_sub(N - 1);
                    run.drain(..excess);
                    self.run = run;
                }
            } else if start == 0 {
                self.run.clear();
            }
            // Skip the separators.
            while i < chunk.len() && !is_b64(chunk[i]) {
                i += 1;
                self.run.clear();
            }
        }
    }

    /// Whether any window of [`MINTED_HANDLE_LEN`] bytes of `run` hashes to a granted digest.
    fn any_window(&self, run: &[u8]) -> bool {
        run.windows(MINTED_HANDLE_LEN).any(|w| {
            let d: [u8; 32] = Sha256::digest(w).into();
            self.digests.set.contains(&d)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: &str = "aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789_-ABCD"; // 42
    fn minted(c: char) -> String {
        format!("{H}{c}")
    }

    fn found(handle: &str, others: &[&str], chunks: &[&[u8]]) -> bool {
        let digests = Arc::new(GrantDigests::new(others.iter().map(|h| Sha256::digest(h.as_bytes()).into())));
        let g = Guard::new(CapabilityHandle::new(handle), digests);
        let mut s = g.scanner();
        for c in chunks {
            s.feed(c);
        }
        s.found()
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
        for text in [format!("x {other} y"), format!("AAAA{other}BBBB"), other.clone(), format!("-{other}")] {
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
}
