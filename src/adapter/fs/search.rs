//! `fs.search` (SPEC §5.3): a literal, case-sensitive search over one file or a directory
//! tree, in bytewise path order, without following symlinks.
//!
//! Files are streamed in 256 KiB chunks (a carry of `query.len() - 1` bytes catches
//! occurrences across chunk boundaries) through one `memmem::Finder`, while the same pass
//! checks that the file is UTF-8 without NUL. Line and column are tracked by counting
//! newlines and character starts up to each match; a match's line text is fetched
//! afterwards with a few small `pread`s, so no file is ever held in memory whole. A file's
//! matches are reported only once the whole file proved to be text.

use std::os::fd::OwnedFd;

use memchr::memmem::Finder;
use rustix::buffer::spare_capacity;
use rustix::fs::{Dir, FileType};
use serde_json::{json, Value};

use super::budget::Bounded;
use super::list::{entry_type, reportable_name};
use super::read::{is_continuation, pread_at};
use super::resolve::{self, err, open_entry, Kind, Want};
use super::{cancelled, Cancel, Root, DEFAULT_MAX_RESULTS, MAX_ITEMS, MAX_MATCH_TEXT_CHARS};
use crate::contract::path::MAX_PATH_BYTES;
use crate::contract::{AdapterCode, AdapterError, ToolPath};

/// Bytes read per chunk.
const CHUNK: usize = 256 * 1024;
/// Characters kept before a match in the window of a long line.
const WINDOW_BEFORE: u64 = 1024;
/// The window of a long line, in characters.
const WINDOW: u64 = MAX_MATCH_TEXT_CHARS as u64;

pub(super) fn search(
    root: &Root,
    path: &ToolPath,
    query: &str,
    max_results: Option<u64>,
    budget: usize,
    cancel: &Cancel,
) -> Result<Value, AdapterError> {
    if query.is_empty() || query.contains(['\r', '\n']) || query.encode_utf16().count() > 4096 {
        return Err(err(AdapterCode::InvalidRequest, "query must be 1-4096 characters without CR or LF"));
    }
    let max = max_results.unwrap_or(DEFAULT_MAX_RESULTS);
    if !(1..=MAX_ITEMS).contains(&max) {
        return Err(err(AdapterCode::InvalidRequest, "maxResults must be 1-10000"));
    }
    let (fd, _, kind) = root.open_existing(path, Want::Any)?;
    let mut searcher =
        Searcher { finder: Finder::new(query.as_bytes()), out: Bounded::new("matches", max as usize, budget), cancel };
    match kind {
        Kind::File => searcher.file(&fd, &path.canonical())?,
        Kind::Dir => {
            let prefix = if path.is_root() { String::new() } else { path.canonical() };
            searcher.tree(fd, prefix)?;
        }
    }
    searcher.out.finish()
}

struct Searcher<'q, 'c> {
    finder: Finder<'q>,
    out: Bounded,
    cancel: &'c Cancel,
}

/// A directory being walked: its descriptor, its entries still to visit (sorted so that
/// `pop` yields them in bytewise path order) and its root-relative path.
struct Frame {
    dir: OwnedFd,
    entries: Vec<Entry>,
    prefix: String,
}

struct Entry {
    /// The name, with `/` appended for a directory: sorting siblings by this key visits
    /// paths in bytewise order (`a.txt` < `a/b`, because `.` < `/`).
    key: String,
    is_dir: bool,
}

impl Entry {
    fn name(&self) -> &str {
        self.key.strip_suffix('/').unwrap_or(&self.key)
    }
}

/// Read a directory's regular files and directories (symlinks and special files are not
/// entries of a search).
fn read_frame(dir: OwnedFd, prefix: String) -> Result<Frame, AdapterError> {
    let mut stream = Dir::read_from(&dir).map_err(resolve::map_errno)?;
    let mut entries = Vec::new();
    while let Some(entry) = stream.read() {
        let entry = entry.map_err(resolve::map_errno)?;
        let Some(name) = reportable_name(entry.file_name().to_bytes()) else { continue };
        match entry_type(&dir, name, entry.file_type()) {
            FileType::RegularFile => entries.push(Entry { key: name.to_string(), is_dir: false }),
            FileType::Directory => entries.push(Entry { key: format!("{name}/"), is_dir: true }),
            _ => {}
        }
    }
    entries.sort_unstable_by(|a, b| b.key.as_bytes().cmp(a.key.as_bytes()));
    Ok(Frame { dir, entries, prefix })
}

impl Searcher<'_, '_> {
    /// Walk the tree under `dir` depth first in bytewise path order. Entries that vanish,
    /// change type, turn into symlinks or cannot be opened meanwhile are skipped: a
    /// directory is only entered through `openat(O_DIRECTORY | O_NOFOLLOW)` on its parent's
    /// descriptor, so a swapped-in symlink is never followed.
    fn tree(&mut self, dir: OwnedFd, prefix: String) -> Result<(), AdapterError> {
        let mut stack = vec![read_frame(dir, prefix)?];
        while let Some(top) = stack.last_mut() {
            if self.cancel.is_cancelled() {
                return Err(cancelled());
            }
            if !self.out.wants_more() {
                break;
            }
            let Some(entry) = top.entries.pop() else {
                stack.pop();
                continue;
            };
            let name = entry.name();
            let child = if top.prefix.is_empty() { name.to_string() } else { format!("{}/{name}", top.prefix) };
            if child.len() > MAX_PATH_BYTES {
                continue; // not representable as a match path
            }
            let kind = if entry.is_dir { Kind::Dir } else { Kind::File };
            let Ok((fd, st)) = open_entry(&top.dir, name, kind) else { continue };
            if resolve::classify(&st, false, Want::Any) != Ok(kind) {
                continue;
            }
            if entry.is_dir {
                if let Ok(frame) = read_frame(fd, child) {
                    stack.push(frame);
                }
            } else if let Err(e) = self.file(&fd, &child) {
                if self.cancel.is_cancelled() {
                    return Err(e);
                }
                // An unreadable file is skipped like a binary one.
            }
        }
        Ok(())
    }

    /// Search one regular file; report its matches only if it is UTF-8 without NUL.
    fn file(&mut self, fd: &OwnedFd, rel: &str) -> Result<(), AdapterError> {
        // One more than still fits under the limit tells whether the result is cut.
        let want = self.out.remaining() + 1;
        let Some(raw) = scan(fd, &self.finder, want, self.cancel)? else { return Ok(()) };
        let mut found = Vec::with_capacity(raw.len());
        for m in &raw {
            let Some(text) = match_text(fd, m)? else {
                return Ok(()); // the file changed under the search: treat it as not text
            };
            found.push(json!({"path": rel, "line": m.line, "column": m.column, "text": text}));
        }
        for v in found {
            if !self.out.push(v) {
                break;
            }
        }
        Ok(())
    }
}

/// One occurrence, with what is needed to fetch its line afterwards.
#[derive(Debug, Clone, PartialEq, Eq)]
struct RawMatch {
    /// File offset of the first byte.
    start: u64,
    /// 1-based line.
    line: u64,
    /// 1-based column in Unicode scalar values.
    column: u64,
    /// File offset of the line's first byte.
    line_start: u64,
    /// File offset of the line's LF, or the end of file.
    line_end: u64,
    /// Characters from `line_start` to `line_end`.
    line_chars: u64,
}

fn count_chars(bytes: &[u8]) -> u64 {
    bytes.iter().filter(|b| !is_continuation(**b)).count() as u64
}

/// Line and column bookkeeping at a file position.
struct Cursor {
    /// The file offset reached.
    pos: u64,
    /// 1-based line at `pos`.
    line: u64,
    /// Offset of the current line's first byte.
    line_start: u64,
    /// Characters from `line_start` to `pos`.
    chars: u64,
}

impl Cursor {
    /// Move over `bytes` (the file's bytes from `pos` on); each LF closes the line of the
    /// matches from `open` on.
    fn advance(&mut self, bytes: &[u8], matches: &mut [RawMatch], open: &mut usize) {
        let mut from = 0;
        for nl in memchr::memchr_iter(b'\n', bytes) {
            self.chars += count_chars(&bytes[from..nl]);
            let at = self.pos + nl as u64;
            for m in &mut matches[*open..] {
                (m.line_end, m.line_chars) = (at, self.chars);
            }
            *open = matches.len();
            (self.line, self.line_start, self.chars) = (self.line + 1, at + 1, 0);
            from = nl + 1;
        }
        self.chars += count_chars(&bytes[from..]);
        self.pos += bytes.len() as u64;
    }
}

/// Append at least one `pread` worth of bytes (retrying on EINTR) to `buf`, filling its
/// spare capacity in place; 0 means end of file.
fn pread_more(fd: &OwnedFd, buf: &mut Vec<u8>, offset: u64) -> Result<usize, AdapterError> {
    buf.reserve(CHUNK);
    loop {
        match rustix::io::pread(fd, spare_capacity(buf), offset) {
            Ok(n) => return Ok(n),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(resolve::map_errno(e)),
        }
    }
}

/// Stream a file: `None` if it is not UTF-8 or holds a NUL byte, else its first `want`
/// non-overlapping occurrences, left to right.
fn scan(
    fd: &OwnedFd,
    finder: &Finder<'_>,
    want: usize,
    cancel: &Cancel,
) -> Result<Option<Vec<RawMatch>>, AdapterError> {
    let qlen = finder.needle().len() as u64;
    // `buf` holds the file's bytes from offset `base` on.
    let mut buf: Vec<u8> = Vec::new();
    let mut base = 0u64;
    let mut read_pos = 0u64;
    // `buf[..valid]` is known to be complete UTF-8 characters.
    let mut valid = 0usize;
    // No occurrence starts before `search_from` that was not already found.
    let mut search_from = 0u64;
    let mut cur = Cursor { pos: 0, line: 1, line_start: 0, chars: 0 };
    let mut matches: Vec<RawMatch> = Vec::new();
    // Matches from `open` on still wait for the end of their line.
    let mut open = 0usize;
    // Positions are tracked while matches are wanted or lines are open.
    let mut tracking = true;
    loop {
        if cancel.is_cancelled() {
            return Err(cancelled());
        }
        let old = buf.len();
        let n = pread_more(fd, &mut buf, read_pos)?;
        read_pos += n as u64;
        let eof = n == 0;
        if memchr::memchr(0, &buf[old..]).is_some() {
            return Ok(None);
        }
        match std::str::from_utf8(&buf[valid..]) {
            Ok(_) => valid = buf.len(),
            // A character cut by the chunk end completes with the next chunk.
            Err(e) if e.error_len().is_none() && !eof => valid += e.valid_up_to(),
            Err(_) => return Ok(None),
        }
        let matching = tracking && matches.len() < want;
        if matching {
            let s = (search_from - base) as usize;
            let mut next = search_from;
            for at in finder.find_iter(&buf[s..]) {
                let start = base + (s + at) as u64;
                let rel = (cur.pos - base) as usize;
                cur.advance(&buf[rel..s + at], &mut matches, &mut open);
                matches.push(RawMatch {
                    start,
                    line: cur.line,
                    column: cur.chars + 1,
                    line_start: cur.line_start,
                    line_end: 0,
                    line_chars: 0,
                });
                next = start + qlen;
                if matches.len() >= want {
                    break;
                }
            }
            // Starts up to `end - qlen` were examined; later ones may complete next chunk.
            let end = base + buf.len() as u64;
            search_from = next.max((end + 1).saturating_sub(qlen));
        }
        if eof {
            if tracking {
                let rel = (cur.pos - base) as usize;
                cur.advance(&buf[rel..], &mut matches, &mut open);
                for m in &mut matches[open..] {
                    (m.line_end, m.line_chars) = (cur.pos, cur.chars);
                }
            }
            return Ok(Some(matches));
        }
        // Drop what no later step needs: keep an incomplete trailing character and, while
        // matching, the bytes an occurrence crossing into the next chunk may start in.
        let mut keep = base + valid as u64;
        if tracking {
            if matches.len() < want {
                keep = keep.min(search_from);
            }
            let keep_at = keep.max(cur.pos);
            let rel = (cur.pos - base) as usize;
            cur.advance(&buf[rel..(keep_at - base) as usize], &mut matches, &mut open);
            keep = keep_at;
            tracking = matches.len() < want || open < matches.len();
        }
        // Never past the validated bytes (an occurrence is whole characters, so the cursor
        // cannot be beyond them either; the bound only keeps the bookkeeping safe).
        let drop_n = ((keep - base) as usize).min(valid);
        buf.drain(..drop_n);
        base += drop_n as u64;
        valid -= drop_n;
    }
}

/// The byte index where the `n`-th character counted from the end of `bytes` starts.
fn nth_char_from_end(bytes: &[u8], n: u64) -> Option<usize> {
    if n == 0 {
        return Some(bytes.len());
    }
    let mut seen = 0;
    for (i, b) in bytes.iter().enumerate().rev() {
        if !is_continuation(*b) {
            seen += 1;
            if seen == n {
                return Some(i);
            }
        }
    }
    None
}

/// The `text` of a match: its line without the terminator (a trailing CR stripped), or for
/// a line over 4096 characters the 4096-character window starting 1024 characters before
/// the match, shifted to stay inside the line. `None` if the file changed meanwhile.
fn match_text(fd: &OwnedFd, m: &RawMatch) -> Result<Option<String>, AdapterError> {
    let (mut end, mut chars) = (m.line_end, m.line_chars);
    if end > m.line_start && pread_at(fd, end - 1, 1)?.first() == Some(&b'\r') {
        (end, chars) = (end - 1, chars - 1);
    }
    let bytes = if chars <= WINDOW {
        pread_at(fd, m.line_start, (end - m.line_start) as usize)?
    } else {
        let col = m.column - 1;
        let first = col.saturating_sub(WINDOW_BEFORE).min(chars - WINDOW);
        if first == chars - WINDOW {
            // The window ends with the line: its last 4096 characters.
            let from = end.saturating_sub(4 * WINDOW).max(m.line_start);
            let tail = pread_at(fd, from, (end - from) as usize)?;
            let Some(cut) = nth_char_from_end(&tail, WINDOW) else { return Ok(None) };
            tail[cut..].to_vec()
        } else {
            // The window starts `col - first` (at most 1024) characters before the match.
            let back = col - first;
            let from = m.start.saturating_sub(4 * back).max(m.line_start);
            let head = pread_at(fd, from, (m.start - from) as usize)?;
            let Some(cut) = nth_char_from_end(&head, back) else { return Ok(None) };
            let start = from + cut as u64;
            let mut body = pread_at(fd, start, (4 * WINDOW).min(end - start) as usize)?;
            let valid = std::str::from_utf8(&body).map_or_else(|e| e.valid_up_to(), |s| s.len());
            body.truncate(valid);
            let cut =
                std::str::from_utf8(&body).ok().and_then(|s| s.char_indices().nth(WINDOW as usize)).map(|(i, _)| i);
            if let Some(cut) = cut {
                body.truncate(cut);
            }
            body
        }
    };
    Ok(String::from_utf8(bytes).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nth_char_from_end_counts_scalars() {
        let s = "aé€😀".as_bytes();
        assert_eq!(nth_char_from_end(s, 0), Some(s.len()));
        assert_eq!(nth_char_from_end(s, 1), Some(6));
        assert_eq!(nth_char_from_end(s, 2), Some(3));
        assert_eq!(nth_char_from_end(s, 4), Some(0));
        assert_eq!(nth_char_from_end(s, 5), None);
    }
}
