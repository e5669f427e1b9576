//! The at-rest scan of `daemon.secrets.at-rest` (PC-6 Persistence, PC-7.1): the files where a
//! daemon keeps its state and its log (`--scan-path`) searched for the capability handles the
//! runner minted and for the probe adapter's endpoint path, in any JSON spelling.
//!
//! Bounded and read-only: symlinks are never followed (not even a given path), only regular
//! files are opened (`O_NOFOLLOW | O_NONBLOCK`, judged again once open), at most
//! [`SCAN_BUDGET`] bytes are read in all and at most [`MAX_ENTRIES`] directory entries visited.
//! What it finds names the file and the kind of secret, never the secret.

use std::collections::HashSet;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The most bytes one scan reads, all files together.
pub const SCAN_BUDGET: u64 = 256 * 1024 * 1024;
/// The most directory entries one scan visits (a tree of millions of empty files ends too).
pub const MAX_ENTRIES: usize = 200_000;

/// What a file was found to hold.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Held {
    /// A capability handle the runner minted.
    pub handle: bool,
    /// The probe adapter's endpoint path.
    pub endpoint: bool,
}

impl Held {
    fn any(self) -> bool {
        self.handle || self.endpoint
    }
}

/// What a scan saw.
#[derive(Debug, Default)]
pub struct Scan {
    /// Regular files read (whole or, at the budget, in part).
    pub files: usize,
    /// Bytes read.
    pub bytes: u64,
    /// The files holding a secret, in walk order.
    pub hits: Vec<(PathBuf, Held)>,
    /// Regular files (or directories) that could not be read, with why.
    pub unread: Vec<(PathBuf, String)>,
    /// The byte budget or the entry cap stopped the scan before everything was read.
    pub truncated: bool,
}

impl Scan {
    /// Add what a later scan of the same paths saw: its hits (a file found twice is listed
    /// once, with all it held), what it could not read, and whether it stopped early; the
    /// counts are the larger of the two.
    pub fn merge(&mut self, later: Scan) {
        for (path, held) in later.hits {
            match self.hits.iter_mut().find(|(p, _)| *p == path) {
                Some((_, h)) => {
                    h.handle |= held.handle;
                    h.endpoint |= held.endpoint;
                }
                None => self.hits.push((path, held)),
            }
        }
        for (path, why) in later.unread {
            if !self.unread.iter().any(|(p, _)| *p == path) {
                self.unread.push((path, why));
            }
        }
        self.files = self.files.max(later.files);
        self.bytes = self.bytes.max(later.bytes);
        self.truncated |= later.truncated;
    }
}

/// The secrets looked for: handles of the base64url alphabet (looked up by runs of that
/// alphabet, so a search costs about one pass whatever their number), any other handle one by
/// one, and the endpoint.
pub struct Needles<'a> {
    b64: HashSet<&'a [u8]>,
    lens: Vec<usize>,
    other: Vec<&'a str>,
    endpoint: &'a str,
}

fn b64url(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-' || b == b'_'
}

impl<'a> Needles<'a> {
    /// `handles` (empty ones ignored) and `endpoint` (ignored when empty).
    pub fn new(handles: &'a [String], endpoint: &'a str) -> Self {
        let mut b64 = HashSet::new();
        let mut other = Vec::new();
        for h in handles.iter().filter(|h| !h.is_empty()) {
            if h.bytes().all(b64url) {
                b64.insert(h.as_bytes());
            } else {
                other.push(h.as_str());
            }
        }
        let mut lens: Vec<usize> = b64.iter().map(|h| h.len()).collect();
        lens.sort_unstable();
        lens.dedup();
        Needles { b64, lens, other, endpoint }
    }

    /// Whether `text` holds a base64url handle as raw bytes.
    fn b64_in(&self, text: &[u8]) -> bool {
        if self.b64.is_empty() {
            return false;
        }
        let mut i = 0;
        while i < text.len() {
            if !b64url(text[i]) {
                i += 1;
                continue;
            }
            let start = i;
            while i < text.len() && b64url(text[i]) {
                i += 1;
            }
            let run = &text[start..i];
            for &n in &self.lens {
                if run.len() >= n && run.windows(n).any(|w| self.b64.contains(w)) {
                    return true;
                }
            }
        }
        false
    }

    /// What `text` holds: a secret as raw bytes, or inside a JSON string literal once its
    /// escapes are decoded (`\u0041`, `\/`) — the spellings `holds_handle` knows.
    pub fn held(&self, text: &[u8]) -> Held {
        let mut h = Held {
            handle: self.b64_in(text) || self.other.iter().any(|o| memchr::memmem::find(text, o.as_bytes()).is_some()),
            endpoint: !self.endpoint.is_empty() && memchr::memmem::find(text, self.endpoint.as_bytes()).is_some(),
        };
        if h.handle && (h.endpoint || self.endpoint.is_empty()) {
            return h;
        }
        for line in text.split(|b| *b == b'\n') {
            for (a, b) in crate::conform::case::escaped_literals(line) {
                let Ok(s) = serde_json::from_slice::<String>(&line[a..b]) else { continue };
                h.handle |= self.b64_in(s.as_bytes()) || self.other.iter().any(|o| s.contains(o));
                h.endpoint |= !self.endpoint.is_empty() && s.contains(self.endpoint);
            }
        }
        h
    }
}

/// Search `paths` (files or directories, walked without following any symlink) for
/// `needles`, reading at most `budget` bytes in all.
pub fn scan(paths: &[PathBuf], needles: &Needles<'_>, budget: u64) -> Scan {
    let mut s = Scan::default();
    let mut stack: Vec<PathBuf> = paths.iter().rev().cloned().collect();
    let mut entries = 0usize;
    while let Some(p) = stack.pop() {
        entries += 1;
        if entries > MAX_ENTRIES {
            s.truncated = true;
            break;
        }
        let meta = match std::fs::symlink_metadata(&p) {
            Ok(m) => m,
            Err(e) => {
                s.unread.push((p, e.to_string()));
                continue;
            }
        };
        let ft = meta.file_type();
        if ft.is_dir() {
            match std::fs::read_dir(&p) {
                Ok(rd) => {
                    let mut children: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
                    children.sort();
                    stack.extend(children.into_iter().rev());
                }
                Err(e) => s.unread.push((p, e.to_string())),
            }
            continue;
        }
        // Symlinks, sockets, FIFOs and devices hold nothing the daemon wrote as a file.
        if !ft.is_file() {
            continue;
        }
        let left = budget.saturating_sub(s.bytes);
        if left == 0 {
            s.truncated = true;
            break;
        }
        match read_regular(&p, left) {
            Ok((buf, whole)) => {
                s.files += 1;
                s.bytes += buf.len() as u64;
                s.truncated |= !whole;
                let held = needles.held(&buf);
                if held.any() {
                    s.hits.push((p, held));
                }
            }
            Err(e) => s.unread.push((p, e.to_string())),
        }
    }
    s
}

/// Read at most `left` bytes of the regular file `p` (never through a symlink, never blocking
/// on a FIFO put in its place); whether the whole file was read.
fn read_regular(p: &Path, left: u64) -> std::io::Result<(Vec<u8>, bool)> {
    let flags = rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK;
    let f = std::fs::OpenOptions::new().read(true).custom_flags(flags.bits() as i32).open(p)?;
    let meta = f.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::other("not a regular file once opened"));
    }
    let mut buf = Vec::new();
    f.take(left).read_to_end(&mut buf)?;
    let whole = (buf.len() as u64) < left || meta.len() <= left;
    Ok((buf, whole))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 43 characters of the base64url alphabet, as the runner mints them.
    const H: &str = "aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789_-ABCDE";

    fn escaped_all(s: &str) -> String {
        s.chars().map(|c| format!("\\u{:04x}", c as u32)).collect()
    }

    #[test]
    fn every_spelling_of_a_handle_or_the_endpoint_is_found() {
        let handles = vec![H.to_string(), "other-handle-0123456789".to_string()];
        let n = Needles::new(&handles, "/tmp/pi-conform-probeX/probe.sock");
        assert!(n.held(format!("{{\"h\":\"{H}\"}}").as_bytes()).handle);
        assert!(n.held(format!("log line xx{H}yy").as_bytes()).handle, "inside a longer run");
        assert!(n.held(format!("{{\"h\":\"x{}y\"}}", escaped_all(H)).as_bytes()).handle);
        assert!(n.held(b"{\"p\":\"\\/tmp\\/pi-conform-probeX\\/probe.sock\"}").endpoint);
        assert!(n.held(b"path=/tmp/pi-conform-probeX/probe.sock").endpoint);
        assert!(!n.held(&H.as_bytes()[..H.len() - 1]).handle, "a prefix is not the handle");
        assert!(!n.held(b"/tmp/pi-conform-probeX/probe.soc").endpoint);
        let both = n.held(format!("{H} /tmp/pi-conform-probeX/probe.sock").as_bytes());
        assert!(both.handle && both.endpoint);
        assert_eq!(n.held(b"nothing here"), Held::default());
    }

    #[test]
    fn a_later_scan_adds_its_hits_once() {
        let hit = |p: &str, handle, endpoint| (PathBuf::from(p), Held { handle, endpoint });
        let mut a = Scan { files: 3, hits: vec![hit("/s/a", true, false)], ..Scan::default() };
        let b = Scan {
            files: 2,
            hits: vec![hit("/s/a", false, true), hit("/s/b", true, false)],
            truncated: true,
            ..Scan::default()
        };
        a.merge(b);
        assert_eq!(a.hits, vec![hit("/s/a", true, true), hit("/s/b", true, false)]);
        assert_eq!(a.files, 3);
        assert!(a.truncated);
    }

    #[test]
    fn the_walk_reads_regular_files_only_follows_no_symlink_and_keeps_to_its_budget() {
        let d = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), H).unwrap();
        std::fs::create_dir(d.path().join("sub")).unwrap();
        std::fs::write(d.path().join("sub/record.json"), format!("{{\"h\":\"{H}\"}}")).unwrap();
        std::fs::write(d.path().join("clean"), "nothing").unwrap();
        std::os::unix::fs::symlink(outside.path(), d.path().join("link-dir")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), d.path().join("link-file")).unwrap();
        let handles = vec![H.to_string()];
        let n = Needles::new(&handles, "");
        let s = scan(&[d.path().to_path_buf()], &n, SCAN_BUDGET);
        assert_eq!(s.files, 2);
        assert_eq!(s.hits.len(), 1, "{:?}", s.hits);
        assert!(s.hits[0].0.ends_with("sub/record.json"));
        assert!(!s.truncated && s.unread.is_empty());
        // A symlink given as the path is not followed either.
        let s = scan(&[d.path().join("link-dir")], &n, SCAN_BUDGET);
        assert_eq!((s.files, s.hits.len()), (0, 0));
        // The budget: 10 bytes read, the rest left, and said.
        let s = scan(&[d.path().to_path_buf()], &n, 10);
        assert!(s.truncated && s.bytes <= 10, "{s:?}");
        // A missing path is said, not skipped.
        let s = scan(&[d.path().join("missing")], &n, SCAN_BUDGET);
        assert_eq!(s.unread.len(), 1);
    }
}
