//! `fs.search` (SPEC §5.3): a literal, case-sensitive search over one file or a directory
//! tree, in bytewise path order, without following symlinks.
//!
//! Files are streamed in 256 KiB chunks (a carry of `query.len() - 1` bytes catches
//! occurrences across chunk boundaries) through one `memmem::Finder`, while the same pass
//! checks that the file is UTF-8 without NUL. Line and column are tracked lazily: newlines
//! are counted in bulk and characters only on the line a match is on, and a file without a
//! match needs no counting at all. A match's line text is fetched afterwards with a few
//! small `pread`s, so no file is ever held in memory whole. A file's matches are reported
//! only once the whole file proved to be text.
//!
//! A tree is walked on the calling thread (directories read whole and sorted, entries
//! classified by type) and its files are handed out in path order, in batches, to a few
//! scanner threads, which open each one by its path beneath the root (the parent directory
//! with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` or the component walk, kept while
//! consecutive files share it, then the file with `O_PATH | O_NOFOLLOW`, judged before it
//! is reopened for reading, so a FIFO or device is never opened), check it is a
//! regular file and scan it. Their results come back tagged with the batch number and are
//! merged on the calling thread strictly in path order (match texts are read there too,
//! after opening the file again), so the outcome is the sequential one. At most
//! [`WINDOW_PER_SCANNER`] batches per scanner are in flight, which bounds memory (a few
//! words per occurrence found). No descriptor is kept per directory level, so a search holds
//! a bounded number of descriptors however deep the tree (issue 15, F4). An entry that
//! vanished or changed type meanwhile is skipped; any other failure to open or read fails the
//! search. A small tree (one batch) is scanned on the calling thread with no thread started.

use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::sync::Mutex;

use memchr::memmem::Finder;
use rustix::buffer::spare_capacity;
use rustix::fs::{Dir, FileType, Stat};
use serde_json::Value;

use super::budget::{typed, Matches};
use super::guard::{handle_in_content, FileKey, Guard};
use super::list::{entry_type, reportable_name};
use super::pread::pread_at;
use super::read::is_continuation;
use super::resolve::{self, err, open_entry, Access, Kind, Want};
use super::{cancelled, Cancel, Root, DEFAULT_MAX_RESULTS, MAX_ITEMS, MAX_MATCH_TEXT_CHARS};
use crate::contract::path::MAX_PATH_BYTES;
use crate::contract::types::tool_adapter::FsSearchMatch;
use crate::contract::{AdapterCode, AdapterError, ToolPath};

/// Bytes read per chunk.
const CHUNK: usize = 256 * 1024;
/// UTF-16 units kept before a match in the window of a long line.
const WINDOW_BEFORE: u64 = 1024;
/// The window of a long line, in UTF-16 units.
const WINDOW: u64 = MAX_MATCH_TEXT_CHARS as u64;
/// Files per batch handed to a scanner thread.
const BATCH_FILES: usize = 32;
/// Batches in flight (handed out, not yet merged) per scanner thread.
const WINDOW_PER_SCANNER: usize = 4;
/// Most scanner threads one search starts.
const MAX_SCANNERS: usize = 4;

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
    let (fd, st, kind) = root.open_existing(path, Want::Any)?;
    let q = Query { finder: Finder::new(query.as_bytes()), root, guard: root.guard.as_ref() };
    let mut out = Matches::matches(max as usize, budget);
    match kind {
        Kind::File => {
            // One more than still fits under the limit tells whether the result is cut.
            let want = out.remaining() + 1;
            resolve::single_link(&st)?;
            if let Some(raw) = scan(&fd, &st, &q, want, cancel, &mut Vec::new())? {
                emit(&mut out, &fd, &path.canonical(), &raw)?;
                recheck_texts(&q, &fd, &FileKey::of(&st), &raw, cancel)?;
            }
        }
        Kind::Dir => {
            let prefix = if path.is_root() { String::new() } else { path.canonical() };
            tree(fd, prefix, &q, &mut out, cancel)?;
        }
    }
    out.finish()
}

/// Under a guard, the texts of `raw` come from the version it judged (`judged`), or, when the
/// file changed since, from a range that is scanned again now with the bytes around it
/// ([`Guard::check_range`]): a file appended to while it is searched still gets an answer
/// (issue 25, N6) and no handle written meanwhile leaves in a match text.
fn recheck_texts(
    query: &Query<'_>,
    fd: &OwnedFd,
    judged: &FileKey,
    raw: &[RawMatch],
    cancel: &Cancel,
) -> Result<(), AdapterError> {
    let (Some(g), Some(first), Some(last)) = (query.guard, raw.first(), raw.last()) else { return Ok(()) };
    let now = rustix::fs::fstat(fd).map_err(resolve::map_errno)?;
    if FileKey::of(&now).same_content(judged) {
        return Ok(());
    }
    g.check_range(fd, first.line_start, last.line_end, cancel)
}

/// Report one text file's matches, in order, as far as the limit and budget allow; nothing
/// if the file changed under the search (a line no longer where the scan saw it).
fn emit(out: &mut Matches, fd: &OwnedFd, rel: &str, raw: &[RawMatch]) -> Result<(), AdapterError> {
    let mut found = Vec::with_capacity(raw.len());
    for m in raw {
        let Some(text) = match_text(fd, m)? else {
            return Ok(()); // the file changed under the search: treat it as not text
        };
        found.push(FsSearchMatch {
            column: nonzero(m.column)?,
            line: nonzero(m.line)?,
            path: typed(rel.to_string())?,
            text: typed(text)?,
        });
    }
    for v in found {
        if !out.push(v) {
            break;
        }
    }
    Ok(())
}

/// A 1-based line or column as the generated type's `NonZeroU64`.
fn nonzero(n: u64) -> Result<std::num::NonZeroU64, AdapterError> {
    std::num::NonZeroU64::new(n).ok_or_else(|| err(AdapterCode::IoError, "a result value broke the contract"))
}

/// What a search looks for and where: the query, the root every file and directory of the
/// tree is opened beneath (by its path), and the content guard of the binding, if any.
struct Query<'a> {
    finder: Finder<'a>,
    root: &'a Root,
    guard: Option<&'a Guard>,
}

/// A directory being walked: its entries still to visit (sorted so that `pop` yields them
/// in bytewise path order) and its root-relative path. No descriptor is kept: a directory
/// is read whole when entered, and its children are opened by path beneath the root, so the
/// walk holds a bounded number of descriptors however deep the tree is (issue 15, F4).
struct Frame {
    entries: Vec<Entry>,
    prefix: String,
    /// A regular file or directory was left out because its name cannot be reported.
    skipped: bool,
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
    let mut skipped = false;
    while let Some(entry) = stream.read() {
        let entry = entry.map_err(resolve::map_errno)?;
        let raw = entry.file_name();
        let Some(name) = reportable_name(raw.to_bytes()) else {
            // DECISION (SPEC PC-5.3.search, issue 25 N9): a regular file or directory whose
            // name cannot be a match path (not UTF-8, control characters) is not searched,
            // and the answer says so with `truncated: true`.
            if !matches!(raw.to_bytes(), b"." | b"..") && searchable(&dir, raw, entry.file_type())? {
                skipped = true;
            }
            continue;
        };
        match entry_type(&dir, name, entry.file_type())? {
            FileType::RegularFile => entries.push(Entry { key: name.to_string(), is_dir: false }),
            FileType::Directory => entries.push(Entry { key: format!("{name}/"), is_dir: true }),
            _ => {}
        }
    }
    entries.sort_unstable_by(|a, b| b.key.as_bytes().cmp(a.key.as_bytes()));
    Ok(Frame { entries, prefix, skipped })
}

/// Whether the entry `name` of `dir` is a regular file or a directory (from `d_type`, or
/// `fstatat(AT_SYMLINK_NOFOLLOW)` when the filesystem does not report it); one that vanished
/// is not.
fn searchable(dir: &OwnedFd, name: &std::ffi::CStr, d_type: FileType) -> Result<bool, AdapterError> {
    let t = match d_type {
        FileType::Unknown => match rustix::fs::statat(dir, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => FileType::from_raw_mode(st.st_mode),
            Err(rustix::io::Errno::NOENT) => return Ok(false),
            Err(e) => return Err(resolve::map_errno(e)),
        },
        t => t,
    };
    Ok(matches!(t, FileType::RegularFile | FileType::Directory))
}

/// A file of the tree, not opened yet: its root-relative path (whose last component, from
/// `name_at`, is its name) and how many occurrences to find.
struct FileJob {
    rel: String,
    name_at: usize,
    want: usize,
}

/// Whether a failure to open an entry of the tree means it changed under the walk (it
/// vanished, or is now a symlink, a special file or of the other type): such an entry is
/// skipped, as it is no longer a file or directory of the tree. Any other failure (no
/// descriptor left, permission, I/O) fails the search: a walk never answers as if it had
/// seen what it could not open (issue 15, F4).
fn changed_under_walk(e: &AdapterError) -> bool {
    matches!(
        e.code,
        AdapterCode::NotFound
            | AdapterCode::SymlinkRefused
            | AdapterCode::NotADirectory
            | AdapterCode::NotAFile
            | AdapterCode::UnsupportedFileType
    )
}

/// The components of a root-relative path.
fn components(rel: &str) -> Vec<String> {
    rel.split('/').map(str::to_string).collect()
}

/// The parent directory last opened by a scanner (or the merge), reused while consecutive
/// files share it: one descriptor, whatever the depth.
#[derive(Default)]
struct ParentCache {
    prefix: String,
    fd: Option<OwnedFd>,
}

impl ParentCache {
    /// Open an entry of the tree that was seen as a regular file, by its path beneath the
    /// root: the parent directory with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` (or the
    /// component walk), the file with [`open_entry`] on it (judged on an `O_PATH` descriptor
    /// before it is opened for reading: a FIFO or device swapped in is never opened). `Ok(None)` when it changed under the walk ([`changed_under_walk`]).
    fn open_file(&mut self, root: &Root, job: &FileJob) -> Result<Option<(OwnedFd, Stat)>, AdapterError> {
        let name = &job.rel[job.name_at..];
        let opened = if job.name_at == 0 {
            open_entry(&root.fd, name, Kind::File)
        } else {
            let parent = &job.rel[..job.name_at - 1];
            if self.fd.is_none() || self.prefix != parent {
                self.fd = None;
                match root.open_dir(&components(parent), Access::Path) {
                    Ok(fd) => self.fd = Some(fd),
                    Err(e) if changed_under_walk(&e) => return Ok(None),
                    Err(e) => return Err(e),
                }
                self.prefix.clear();
                self.prefix.push_str(parent);
            }
            let Some(dir) = &self.fd else { return Ok(None) };
            open_entry(dir, name, Kind::File)
        };
        let (fd, st) = match opened {
            Ok(x) => x,
            Err(e) if changed_under_walk(&e) => return Ok(None),
            Err(e) => return Err(e),
        };
        Ok((resolve::classify(&st, false, Want::Any) == Ok(Kind::File)).then_some((fd, st)))
    }
}

/// What scanning one file of the tree gave.
enum Scanned {
    /// Nothing to report: no occurrence, not text, gone, not a regular file, or a file with
    /// more than one hard link.
    Nothing,
    /// A text file's first occurrences. The descriptor is not kept (a window of results
    /// would otherwise hold as many open files): the merge opens the file again the same
    /// confined way and reads the texts only if it is still the same version of the same file
    /// (device, inode, size, mtime, ctime).
    Matches { job: FileJob, id: FileKey, raw: Vec<RawMatch> },
    /// The search was cancelled, or a scanner failed: the search fails with this.
    Failed(AdapterError),
}

/// Open and scan one file of the tree. A read error fails the search (never a skip).
fn scan_entry(
    job: FileJob,
    query: &Query<'_>,
    parents: &mut ParentCache,
    cancel: &Cancel,
    buf: &mut Vec<u8>,
) -> Scanned {
    let (fd, st) = match parents.open_file(query.root, &job) {
        Ok(Some(x)) => x,
        Ok(None) => return Scanned::Nothing,
        Err(e) => return Scanned::Failed(e),
    };
    // DECISION (SPEC PC-5.3.search): a file with another name, perhaps outside the root, is
    // not the root's to search; a tree search skips it like a binary file.
    if resolve::single_link(&st).is_err() {
        return Scanned::Nothing;
    }
    match scan(&fd, &st, query, job.want, cancel, buf) {
        Ok(Some(raw)) if !raw.is_empty() => Scanned::Matches { job, id: FileKey::of(&st), raw },
        Ok(_) => Scanned::Nothing,
        Err(e) => Scanned::Failed(e),
    }
}

/// Merge one scanned file into the result; `Ok(true)` once no more matches are wanted.
fn merge(
    out: &mut Matches,
    scanned: Scanned,
    query: &Query<'_>,
    parents: &mut ParentCache,
    cancel: &Cancel,
) -> Result<bool, AdapterError> {
    match scanned {
        Scanned::Nothing => {}
        Scanned::Matches { job, id, raw } => {
            // A file replaced or cut short since its scan is treated like one that changed
            // under it (as if it had been replaced just before the scan); one appended to or
            // rewritten in place gives its texts once they pass the guard again.
            if let Some((fd, _)) =
                parents.open_file(query.root, &job)?.filter(|(_, st)| FileKey::of(st).same_file_not_shorter(&id))
            {
                recheck_texts(query, &fd, &id, &raw, cancel)?;
                emit(out, &fd, &job.rel, &raw)?;
            }
        }
        Scanned::Failed(e) => return Err(e),
    }
    Ok(!out.wants_more())
}

/// The depth-first walk of a tree in bytewise path order.
struct Walker {
    stack: Vec<Frame>,
    /// A regular file or directory of the tree was not searched because its path cannot be
    /// reported (see [`read_frame`]; paths over [`MAX_PATH_BYTES`] too): the answer is
    /// marked truncated.
    skipped: bool,
}

impl Walker {
    fn new(top: Frame) -> Self {
        let skipped = top.skipped;
        Self { stack: vec![top], skipped }
    }

    /// The next regular file (as seen in its directory) in path order, or `None` at the end.
    /// A directory is only entered by its path beneath the root with
    /// `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` (or the component walk), so a
    /// swapped-in symlink is never followed; entries that vanish or change type meanwhile are
    /// skipped ([`changed_under_walk`]); any other failure fails the search.
    fn next_file(&mut self, root: &Root, cancel: &Cancel, want: usize) -> Result<Option<FileJob>, AdapterError> {
        while let Some(top) = self.stack.last_mut() {
            if cancel.is_cancelled() {
                return Err(cancelled());
            }
            let Some(entry) = top.entries.pop() else {
                self.stack.pop();
                continue;
            };
            let name = entry.name();
            let (child, name_at) = if top.prefix.is_empty() {
                (name.to_string(), 0)
            } else {
                (format!("{}/{name}", top.prefix), top.prefix.len() + 1)
            };
            if child.len() > MAX_PATH_BYTES {
                self.skipped = true; // not representable as a match path
                continue;
            }
            if !entry.is_dir {
                return Ok(Some(FileJob { rel: child, name_at, want }));
            }
            let fd = match root.open_dir(&components(&child), Access::Read) {
                Ok(fd) => fd,
                Err(e) if changed_under_walk(&e) => continue,
                Err(e) => return Err(e),
            };
            let frame = read_frame(fd, child)?;
            self.skipped |= frame.skipped;
            self.stack.push(frame);
        }
        Ok(None)
    }
}

/// Search the tree under `dir`: the walk and the merge on this thread, the files scanned
/// by scanner threads (or here, for a tree of at most one batch of files).
fn tree(
    dir: OwnedFd,
    prefix: String,
    query: &Query<'_>,
    out: &mut Matches,
    cancel: &Cancel,
) -> Result<(), AdapterError> {
    let mut walker = Walker::new(read_frame(dir, prefix)?);
    let result = walk(&mut walker, query, out, cancel);
    if walker.skipped {
        out.mark_incomplete();
    }
    result
}

/// [`tree`] once its top directory is read.
fn walk(walker: &mut Walker, query: &Query<'_>, out: &mut Matches, cancel: &Cancel) -> Result<(), AdapterError> {
    // One more than still fits under the limit tells whether the result is cut; the count
    // only shrinks as matches are merged, so the figure at hand-out time is a safe bound.
    let mut first = Vec::with_capacity(BATCH_FILES);
    let mut ended = false;
    while first.len() < BATCH_FILES {
        match walker.next_file(query.root, cancel, out.remaining() + 1)? {
            Some(job) => first.push(job),
            None => {
                ended = true;
                break;
            }
        }
    }
    let scanners = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, MAX_SCANNERS);
    if ended {
        return sequential(walker, first, query, out, cancel);
    }
    let window = WINDOW_PER_SCANNER * scanners;
    let (job_tx, job_rx) = mpsc::sync_channel::<Batch>(window);
    let job_rx = Mutex::new(job_rx);
    let (done_tx, done_rx) = mpsc::channel::<Done>();
    let stop = AtomicBool::new(false);
    let (jobs, halt) = (&job_rx, &stop);
    std::thread::scope(move |s| {
        let mut started = 0;
        for _ in 0..scanners {
            let done = done_tx.clone();
            let spawned = std::thread::Builder::new()
                .name("fs.search".into())
                .spawn_scoped(s, move || scanner(jobs, done, query, cancel, halt));
            started += usize::from(spawned.is_ok());
        }
        drop(done_tx);
        if started == 0 {
            drop(job_tx);
            return sequential(walker, first, query, out, cancel);
        }
        let mut p = Pipeline { job_tx, done_rx, window, sent: 0, merged: 0, ready: VecDeque::new() };
        let result = p.run(walker, first, out, query, cancel);
        // Busy scanners stop at their next file; closing the channels (dropping the
        // pipeline) makes idle ones return too, and the scope joins them all.
        halt.store(true, Ordering::Relaxed);
        drop(p);
        result
    })
}

/// Scan the rest of the tree on this thread, starting with `pending`.
fn sequential(
    walker: &mut Walker,
    pending: Vec<FileJob>,
    query: &Query<'_>,
    out: &mut Matches,
    cancel: &Cancel,
) -> Result<(), AdapterError> {
    let mut buf = Vec::new();
    let mut parents = ParentCache::default();
    let mut pending = pending.into_iter();
    loop {
        if cancel.is_cancelled() {
            return Err(cancelled());
        }
        let job = match pending.next() {
            Some(job) => job,
            None => match walker.next_file(query.root, cancel, out.remaining() + 1)? {
                Some(job) => job,
                None => return Ok(()),
            },
        };
        let scanned = scan_entry(job, query, &mut parents, cancel, &mut buf);
        if merge(out, scanned, query, &mut parents, cancel)? {
            return Ok(());
        }
    }
}

/// Files handed to a scanner, numbered in path order.
struct Batch {
    id: u64,
    files: Vec<FileJob>,
}

/// A batch's results, in the batch's order.
struct Done {
    id: u64,
    files: Vec<Scanned>,
}

/// A scanner thread: take batches until the channel closes or the search stops.
fn scanner(jobs: &Mutex<Receiver<Batch>>, done: Sender<Done>, query: &Query<'_>, cancel: &Cancel, stop: &AtomicBool) {
    let mut buf = Vec::new();
    let mut parents = ParentCache::default();
    loop {
        let batch = match jobs.lock() {
            Ok(rx) => rx.recv(),
            Err(_) => return,
        };
        let Ok(batch) = batch else { return };
        let mut files = Vec::with_capacity(batch.files.len());
        for job in batch.files {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            // A bug must fail this search, not leave the merge waiting for the batch.
            let scanned = catch_unwind(AssertUnwindSafe(|| scan_entry(job, query, &mut parents, cancel, &mut buf)))
                .unwrap_or_else(|_| Scanned::Failed(resolve::io_error()));
            files.push(scanned);
        }
        if done.send(Done { id: batch.id, files }).is_err() {
            return;
        }
    }
}

/// The calling thread's side of a parallel search: hand out batches in path order, merge
/// their results back in the same order.
struct Pipeline {
    job_tx: SyncSender<Batch>,
    done_rx: Receiver<Done>,
    /// Most batches handed out and not yet merged.
    window: usize,
    /// Batches handed out.
    sent: u64,
    /// Batches merged.
    merged: u64,
    /// Results of batches `merged..sent`, as they arrive.
    ready: VecDeque<Option<Vec<Scanned>>>,
}

impl Pipeline {
    fn run(
        &mut self,
        walker: &mut Walker,
        first: Vec<FileJob>,
        out: &mut Matches,
        query: &Query<'_>,
        cancel: &Cancel,
    ) -> Result<(), AdapterError> {
        let mut parents = ParentCache::default();
        let mut batch = first;
        let mut walking = true;
        loop {
            if cancel.is_cancelled() {
                return Err(cancelled());
            }
            if batch.len() >= BATCH_FILES || (!walking && !batch.is_empty()) {
                while self.sent - self.merged >= self.window as u64 {
                    if self.wait(out, query, &mut parents, cancel)? {
                        return Ok(());
                    }
                }
                let files = std::mem::replace(&mut batch, Vec::with_capacity(BATCH_FILES));
                self.job_tx.send(Batch { id: self.sent, files }).map_err(|_| resolve::io_error())?;
                self.sent += 1;
                self.ready.push_back(None);
            }
            if walking {
                match walker.next_file(query.root, cancel, out.remaining() + 1)? {
                    Some(job) => batch.push(job),
                    None => walking = false,
                }
                // Merge what has arrived meanwhile, without waiting.
                while let Ok(done) = self.done_rx.try_recv() {
                    if self.arrived(done, out, query, &mut parents, cancel)? {
                        return Ok(());
                    }
                }
            } else if batch.is_empty() {
                if self.merged == self.sent {
                    return Ok(());
                }
                if self.wait(out, query, &mut parents, cancel)? {
                    return Ok(());
                }
            }
        }
    }

    /// Wait for one batch's results and merge what is in order; `Ok(true)` once done.
    fn wait(
        &mut self,
        out: &mut Matches,
        query: &Query<'_>,
        parents: &mut ParentCache,
        cancel: &Cancel,
    ) -> Result<bool, AdapterError> {
        let done = self.done_rx.recv().map_err(|_| resolve::io_error())?;
        self.arrived(done, out, query, parents, cancel)
    }

    fn arrived(
        &mut self,
        done: Done,
        out: &mut Matches,
        query: &Query<'_>,
        parents: &mut ParentCache,
        cancel: &Cancel,
    ) -> Result<bool, AdapterError> {
        let slot = done.id.checked_sub(self.merged).and_then(|i| self.ready.get_mut(i as usize));
        let Some(slot) = slot else { return Err(resolve::io_error()) };
        *slot = Some(done.files);
        while let Some(Some(_)) = self.ready.front() {
            let files = self.ready.pop_front().flatten().unwrap_or_default();
            self.merged += 1;
            for scanned in files {
                if merge(out, scanned, query, parents, cancel)? {
                    return Ok(true);
                }
            }
        }
        Ok(false)
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

/// Number of LF bytes (counted in blocks of 255 so the compiler vectorizes the sum).
fn count_lf(bytes: &[u8]) -> u64 {
    bytes.chunks(255).map(|c| u64::from(c.iter().fold(0u8, |n, b| n.wrapping_add(u8::from(*b == b'\n'))))).sum()
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
    /// Move over `bytes` (the file's bytes from `pos` on); the first LF closes the line of
    /// the matches from `open` on. Past that, only the number of LFs and the characters of
    /// the last (unfinished) line matter, so nothing else is counted.
    fn advance(&mut self, bytes: &[u8], matches: &mut [RawMatch], open: &mut usize) {
        let mut rest = bytes;
        if *open < matches.len() {
            let Some(nl) = memchr::memchr(b'\n', rest) else {
                self.chars += count_chars(rest);
                self.pos += rest.len() as u64;
                return;
            };
            self.chars += count_chars(&rest[..nl]);
            let at = self.pos + nl as u64;
            for m in &mut matches[*open..] {
                (m.line_end, m.line_chars) = (at, self.chars);
            }
            *open = matches.len();
            (self.line, self.line_start, self.chars, self.pos) = (self.line + 1, at + 1, 0, at + 1);
            rest = &rest[nl + 1..];
        }
        match memchr::memrchr(b'\n', rest) {
            None => self.chars += count_chars(rest),
            Some(last) => {
                self.line += count_lf(&rest[..=last]);
                self.line_start = self.pos + last as u64 + 1;
                self.chars = count_chars(&rest[last + 1..]);
            }
        }
        self.pos += rest.len() as u64;
    }
}

/// The length of a prefix of `bytes` that is valid UTF-8 and ends on a character boundary:
/// all of `bytes` when they are valid, else at most up to the first sequence that is invalid
/// or cut off. ASCII is skipped a block at a time; each multi-byte character is checked
/// as `std::str::from_utf8` does (no overlong forms, surrogates or values over U+10FFFF).
fn utf8_valid_prefix(bytes: &[u8]) -> usize {
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let n = bytes.len();
    let mut i = 0;
    loop {
        // Whole 32-byte blocks of ASCII first (the OR of a fixed-size block vectorizes),
        // then eight bytes at a time to find where the next non-ASCII byte is.
        while let Some(block) = bytes.get(i..i + 32).and_then(|b| <&[u8; 32]>::try_from(b).ok()) {
            if block.iter().fold(0u8, |acc, b| acc | b) >= 0x80 {
                break;
            }
            i += 32;
        }
        while let Some(word) = bytes.get(i..i + 8).and_then(|w| <[u8; 8]>::try_from(w).ok()) {
            let high = u64::from_le_bytes(word) & HIGH;
            if high != 0 {
                i += (high.trailing_zeros() / 8) as usize;
                break;
            }
            i += 8;
        }
        let Some(&lead) = bytes.get(i) else { return n };
        if lead < 0x80 {
            i += 1;
            continue;
        }
        let width = match lead {
            0xC2..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF4 => 4,
            _ => return i,
        };
        let Some(seq) = bytes.get(i..i + width) else { return i };
        let second = match lead {
            0xE0 => 0xA0..=0xBF,
            0xED => 0x80..=0x9F,
            0xF0 => 0x90..=0xBF,
            0xF4 => 0x80..=0x8F,
            _ => 0x80..=0xBF,
        };
        if !second.contains(&seq[1]) || seq[2..].iter().any(|b| !is_continuation(*b)) {
            return i;
        }
        i += width;
    }
}

/// Append one `pread` worth of bytes (retrying on EINTR) to `buf`, filling its spare
/// capacity in place. Returns the bytes read (0 means end of file).
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

/// Stream a file of `size` bytes (as seen when it was opened) through `buf` (scratch space,
/// reused across files): `None` if it is not UTF-8 or holds a NUL byte, else its first
/// `want` non-overlapping occurrences, left to right.
///
/// Under a content guard the same pass looks for capability handles (unless this version of
/// the file was already judged clean): a file holding one is `capability_in_content`.
fn scan(
    fd: &OwnedFd,
    st: &Stat,
    query: &Query<'_>,
    want: usize,
    cancel: &Cancel,
    buf: &mut Vec<u8>,
) -> Result<Option<Vec<RawMatch>>, AdapterError> {
    let size = resolve::size_of(st);
    let mut guard = query.guard.filter(|g| !g.is_cached_clean(st)).map(|g| (g, g.scanner()));
    let qlen = query.finder.needle().len() as u64;
    // `buf` holds the file's bytes from offset `base` on.
    buf.clear();
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
        let n = pread_more(fd, buf, read_pos)?;
        read_pos += n as u64;
        // The file is searched as the snapshot of its first `st_size` bytes: bytes appended
        // since it was opened are not waited for (a file growing faster than it is scanned
        // still gets an answer, issue 25 N6), and reaching that size is the end of file,
        // which spares the final empty read.
        if read_pos > size {
            buf.truncate(buf.len() - (read_pos - size) as usize);
            read_pos = size;
        }
        let eof = n == 0 || read_pos >= size;
        if let Some((_, scanner)) = &mut guard {
            scanner.feed(&buf[old..]);
            if scanner.found() {
                return Err(handle_in_content());
            }
        }
        // A file read whole in one chunk without an occurrence has nothing to report whether
        // or not it is text: its NUL and UTF-8 checks are skipped (most files of a tree).
        let whole_without_match = eof && base == 0 && old == 0 && query.finder.find(buf).is_none();
        if !whole_without_match {
            if memchr::memchr(0, &buf[old..]).is_some() {
                return Ok(None);
            }
            // The fast check proves a prefix valid; the standard one judges the rest
            // (nothing, a character cut by the chunk end, or the first invalid sequence).
            let proven = valid + utf8_valid_prefix(&buf[valid..]);
            match std::str::from_utf8(&buf[proven..]) {
                Ok(_) => valid = buf.len(),
                // A character cut by the chunk end completes with the next chunk.
                Err(e) if e.error_len().is_none() && !eof => valid = proven + e.valid_up_to(),
                Err(_) => return Ok(None),
            }
        }
        let matching = tracking && matches.len() < want && !whole_without_match;
        if matching {
            let s = (search_from - base) as usize;
            let mut next = search_from;
            for at in query.finder.find_iter(&buf[s..]) {
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
            // Only the lines of matches still open need the rest of the file.
            if open < matches.len() {
                let rel = (cur.pos - base) as usize;
                cur.advance(&buf[rel..], &mut matches, &mut open);
                for m in &mut matches[open..] {
                    (m.line_end, m.line_chars) = (cur.pos, cur.chars);
                }
            }
            if let Some((g, scanner)) = &guard {
                let after = rustix::fs::fstat(fd).map_err(resolve::map_errno)?;
                g.remember_clean(scanner, st, &after);
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

/// The `text` of a match: its line without the terminator (a trailing CR stripped), or, for a
/// line over 4096 UTF-16 units, a window of whole characters of at most 4096 units that starts
/// at most 1024 units before the match and is filled forward, then shifted back to stay inside
/// the line. Units, not characters: Pi Daemon 0.3.3 bounds `text` by its JavaScript length and
/// drops the connection on a longer one. `None` if the file changed meanwhile.
fn match_text(fd: &OwnedFd, m: &RawMatch) -> Result<Option<String>, AdapterError> {
    let mut end = m.line_end;
    if end > m.line_start && pread_at(fd, end - 1, 1)?.first() == Some(&b'\r') {
        end -= 1;
    }
    // A line of at most 4096 bytes has at most 4096 units: whole.
    if end - m.line_start <= WINDOW {
        return Ok(String::from_utf8(pread_at(fd, m.line_start, (end - m.line_start) as usize)?).ok());
    }
    // A character takes at most 3 bytes per unit, so 3 × 4096 bytes on each side of the
    // match start hold every character a window can take from that side.
    let reach = 3 * WINDOW + 3;
    let from = m.start.saturating_sub(reach).max(m.line_start);
    let mut before = pread_at(fd, from, (m.start - from) as usize)?;
    if from > m.line_start {
        // Skip a character cut by the read.
        let skip = before.iter().take_while(|b| is_continuation(**b)).count();
        before.drain(..skip);
    }
    let to = (m.start + reach).min(end);
    let mut after = pread_at(fd, m.start, (to - m.start) as usize)?;
    if to < end {
        let valid = std::str::from_utf8(&after).map_or_else(|e| e.valid_up_to(), |s| s.len());
        after.truncate(valid);
    }
    let (Ok(before), Ok(after)) = (String::from_utf8(before), String::from_utf8(after)) else { return Ok(None) };
    Ok(Some(window_text(&before, &after, to == end)))
}

/// The window of [`match_text`] over a line around a match: `before` is the line's text
/// before the match (at least 4096 units of it, or all of it), `after` from the match on (to
/// the line end when `at_end`).
fn window_text(before: &str, after: &str, at_end: bool) -> String {
    let (window, back) = (WINDOW as usize, WINDOW_BEFORE as usize);
    let units = |c: char| c.len_utf16();
    // At most 1024 units of whole characters before the match.
    let mut used = 0;
    let mut start = before.len();
    for (i, c) in before.char_indices().rev() {
        if used + units(c) > back {
            break;
        }
        used += units(c);
        start = i;
    }
    // Then forward while the window holds.
    let mut stop = 0;
    for (i, c) in after.char_indices() {
        if used + units(c) > window {
            break;
        }
        used += units(c);
        stop = i + c.len_utf8();
    }
    // The line ended first: shift back to stay inside the line.
    if stop == after.len() && at_end {
        for (i, c) in before[..start].char_indices().rev() {
            if used + units(c) > window {
                break;
            }
            used += units(c);
            start = i;
        }
    }
    format!("{}{}", &before[start..], &after[..stop])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn units(s: &str) -> usize {
        s.encode_utf16().count()
    }

    #[test]
    fn windows_are_bounded_in_utf16_units() {
        // An astral line: 6000 characters, 12000 units. The window holds 4096 units (2048
        // characters), 1024 units (512 characters) before the match.
        let line: String = "\u{1F600}".repeat(6000);
        let (b, a) = line.split_at(4 * 1500);
        let w = window_text(b, a, true);
        assert_eq!(units(&w), 4096);
        assert!(a.starts_with(&w[4 * 512..]) && b.ends_with(&w[..4 * 512]), "512 characters before the match");
        // Near the end the window shifts back to stay inside the line: its last 4096 units.
        let (b, a) = line.split_at(4 * 5990);
        let w = window_text(b, a, true);
        assert_eq!((units(&w), line.ends_with(&w)), (4096, true));
        // A match at the start: nothing before it.
        let w = window_text("", &line, true);
        assert_eq!((units(&w), line.starts_with(&w)), (4096, true));
        // Mixed widths never split a character and never exceed the bound.
        let line: String = "a\u{1F600}\u{e9}".repeat(2000);
        for cut in (0..line.len()).filter(|i| line.is_char_boundary(*i)).step_by(997) {
            let w = window_text(&line[..cut], &line[cut..], true);
            assert!(units(&w) <= 4096 && units(&w) >= 4095, "{cut}: {}", units(&w));
            assert!(line.contains(&w));
        }
        // BMP text: exactly the old 4096-character window, 1024 characters before.
        let line = "x".repeat(10_000);
        let w = window_text(&line[..5000], &line[5000..], true);
        assert_eq!(w.len(), 4096);
    }

    /// What the fast check must agree with: a valid prefix on a character boundary, and
    /// the whole input when it is valid.
    fn check_prefix(bytes: &[u8]) {
        let p = utf8_valid_prefix(bytes);
        assert!(std::str::from_utf8(&bytes[..p]).is_ok(), "{bytes:02x?}: prefix {p} is not valid");
        match std::str::from_utf8(bytes) {
            Ok(_) => assert_eq!(p, bytes.len(), "{bytes:02x?}: valid input not accepted whole"),
            Err(e) => assert!(p <= e.valid_up_to(), "{bytes:02x?}: prefix {p} past the error"),
        }
    }

    #[test]
    fn utf8_prefix_agrees_with_std() {
        // Every one- and two-byte input, and every lead byte with every second byte
        // followed by continuation or not.
        for a in 0..=255u8 {
            check_prefix(&[a]);
            for b in 0..=255u8 {
                check_prefix(&[a, b]);
                for c in [0x41u8, 0x80, 0xBF, 0xC0] {
                    check_prefix(&[a, b, c]);
                    check_prefix(&[a, b, c, 0x80]);
                    check_prefix(&[b'x'; 9].iter().copied().chain([a, b, c, 0x80]).collect::<Vec<_>>());
                }
            }
        }
        // Random mixtures of characters of every width, cut and corrupted anywhere.
        let pieces = [
            "a",
            "abcdefgh",
            "é",
            "€",
            "😀",
            "\u{7f}",
            "\u{80}",
            "\u{7ff}",
            "\u{800}",
            "\u{ffff}",
            "\u{10000}",
            "\u{10ffff}",
            "\u{d7ff}",
            "\u{e000}",
        ];
        let mut rng = crate::util::prng::SplitMix64::new(0x9e37_79b9_7f4a_7c15);
        let mut next = move || rng.next_u64();
        for _ in 0..3000 {
            let mut s = String::new();
            while s.len() < (next() % 100) as usize {
                s.push_str(pieces[(next() % pieces.len() as u64) as usize]);
            }
            let mut bytes = s.into_bytes();
            check_prefix(&bytes);
            if !bytes.is_empty() {
                let cut = (next() % bytes.len() as u64) as usize;
                check_prefix(&bytes[..cut]);
                check_prefix(&bytes[cut..]);
                let at = (next() % bytes.len() as u64) as usize;
                bytes[at] = next() as u8;
                check_prefix(&bytes);
            }
        }
    }

    /// A tree of a few hundred files over many directories: text with and without the
    /// needle, binary and non-UTF-8 files, empty files, a file over one chunk, names whose
    /// bytewise order differs from other orders, and symlinks (never followed). Returns the
    /// number of occurrences of `needle` a search of the root must report.
    fn tree_fixture(root: &std::path::Path) -> usize {
        let mut rng = crate::util::prng::SplitMix64::new(0x2545_f491_4f6c_dd1d);
        let mut next = move |n: u64| rng.below(n);
        let mut expected = 0;
        for d in 0..9 {
            for e in ["a", "a.b", "a-b", "B", "é"] {
                let dir = root.join(format!("d{d}")).join(e);
                std::fs::create_dir_all(&dir).unwrap();
                for f in 0..(d * 2 + next(5) as usize) {
                    let (mut text, mut needles) = (String::new(), 0);
                    for line in 0..next(20) {
                        if next(4) == 0 {
                            text.push_str(&format!("{line} ééé needle x needle\r\n"));
                            needles += 2;
                        } else {
                            text.push_str("plain € line\n");
                        }
                    }
                    let mut bytes = text.into_bytes();
                    match next(12) {
                        0 => bytes.extend(b"needle\0"),    // binary: skipped whole
                        1 => bytes.extend(b"needle \xff"), // not UTF-8: skipped whole
                        _ => expected += needles,
                    }
                    std::fs::write(dir.join(format!("f{f:02}.txt")), bytes).unwrap();
                }
            }
        }
        for name in ["a", "a.txt", "a-b", "a0"] {
            std::fs::write(root.join(name), "needle\n").unwrap();
            expected += 1;
        }
        std::fs::write(root.join("empty.txt"), "").unwrap();
        let big = "x".repeat(CHUNK + 100) + "needle\n";
        std::fs::write(root.join("d3/big.txt"), big).unwrap();
        expected += 1;
        std::os::unix::fs::symlink(root.join("a.txt"), root.join("link.txt")).unwrap();
        std::os::unix::fs::symlink(root.join("d1"), root.join("d1-link")).unwrap();
        expected
    }

    fn run_tree(root: &std::path::Path, query: &str, max: usize, budget: usize, parallel: bool) -> String {
        use rustix::fs::{Mode, OFlags};
        let fd = rustix::fs::open(root, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty()).unwrap();
        let root = Root::open(root).unwrap();
        let finder = Finder::new(query.as_bytes());
        let mut out = Matches::matches(max, budget);
        let cancel = Cancel::new();
        let done = if parallel {
            tree(fd, String::new(), &Query { finder, root: &root, guard: None }, &mut out, &cancel)
        } else {
            let mut walker = Walker::new(read_frame(fd, String::new()).unwrap());
            sequential(&mut walker, Vec::new(), &Query { finder, root: &root, guard: None }, &mut out, &cancel)
        };
        match done.and_then(|()| out.finish()) {
            Ok(v) => v.to_string(),
            Err(e) => format!("error {:?}", e.code),
        }
    }

    #[test]
    fn parallel_tree_search_equals_sequential() {
        let dir = tempfile::tempdir().unwrap();
        let expected = tree_fixture(dir.path());
        let all: Value = serde_json::from_str(&run_tree(dir.path(), "needle", 10_000, 1 << 30, true)).unwrap();
        let matches = all["matches"].as_array().unwrap();
        assert_eq!(matches.len(), expected);
        let paths: Vec<&str> = matches.iter().map(|m| m["path"].as_str().unwrap()).collect();
        assert!(paths.windows(2).all(|w| w[0].as_bytes() <= w[1].as_bytes()), "bytewise path order");
        assert!(paths.iter().all(|p| !p.contains("link")), "symlinks are not followed");
        for query in ["needle", "e", "€ l", "absent"] {
            for max in [1, 2, 17, 100, 1000, 10_000] {
                for budget in [1 << 30, 5000, 300, 20] {
                    let par = run_tree(dir.path(), query, max, budget, true);
                    let seq = run_tree(dir.path(), query, max, budget, false);
                    assert_eq!(par, seq, "query {query:?}, maxResults {max}, budget {budget}");
                }
            }
        }
    }

    #[test]
    fn parallel_tree_search_cancelled() {
        let dir = tempfile::tempdir().unwrap();
        tree_fixture(dir.path());
        use rustix::fs::{Mode, OFlags};
        let fd = rustix::fs::open(dir.path(), OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).unwrap();
        let root = Root::open(dir.path()).unwrap();
        let finder = Finder::new(b"needle");
        let mut out = Matches::matches(10_000, 1 << 30);
        let cancel = Cancel::new();
        cancel.cancel();
        assert!(tree(fd, String::new(), &Query { finder, root: &root, guard: None }, &mut out, &cancel).is_err());
    }
}
