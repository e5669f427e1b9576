//! Confined filesystem operations of the reference adapter (SPEC §5, §7.2).
//!
//! A [`Root`] holds one directory file descriptor, opened once from the operator's canonical
//! root. Every operation resolves its [`ToolPath`] beneath that descriptor and never by a path
//! string: the parent directory is opened with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS
//! | RESOLVE_NO_MAGICLINKS)` (or, where `openat2` is unavailable, by a component-wise
//! `openat(O_NOFOLLOW | O_DIRECTORY)` walk), and the last component is looked up with
//! `fstatat(AT_SYMLINK_NOFOLLOW)` and opened with `openat(O_PATH | O_NOFOLLOW)` relative to
//! that parent, judged on that descriptor and only then reopened for reading as the same
//! inode (a regular file through `/proc/self/fd`, so procfs is required). A symlink anywhere
//! is refused; FIFOs, sockets and devices are never opened, even when one is swapped in
//! under a name between the look and the open, and never listed.
//!
//! The operations are synchronous and blocking; the server runs them on a blocking thread.
//! Each returns the `data` object of a successful result, whose compact JSON serialization
//! never exceeds the caller's `budget`, or a typed [`AdapterError`] whose message is a short
//! fixed string (no content, query, user path or absolute path).
//!
//! Mutations (`fs.write`, `fs.edit`) hold a process-wide lock keyed by directory entry (the
//! parent directory's identity and the name) from the first look at the target to the
//! rename, write a temp file with an unpredictable name in the same directory, fsync it,
//! pass the [`Cancel`] commit point, `renameat` it over the target and fsync the directory.

mod budget;
mod cancel;
mod guard;
mod list;
mod lock;
mod pread;
mod read;
mod resolve;
mod search;
mod time;
mod write;

use std::io;
use std::os::fd::OwnedFd;
use std::path::Path;

use rustix::fs::{Mode, OFlags, ResolveFlags};
use serde_json::Value;

use crate::contract::types::tool_adapter::{ByteCount, EntryType, FsStatData};
use crate::contract::{AdapterCode, AdapterError, ToolPath};

pub use cancel::Cancel;
pub use guard::{handle_fingerprint, scan_work, GrantDigests, Guard, MINTED_HANDLE_LEN};

/// The defaults and bounds of SPEC §5.2–5.3, spelled in the contract.
pub use crate::contract::answer::{DEFAULT_MAX_ENTRIES, DEFAULT_MAX_RESULTS, MAX_MATCH_TEXT_CHARS, MAX_READ_BYTES};
/// Largest `maxEntries` / `maxResults` (SPEC §5.2).
pub const MAX_ITEMS: u64 = 10_000;
/// Largest file `fs.edit` loads into memory; a larger one is refused with
/// `invalid_request` (the result of an edit is rewritten whole).
pub const MAX_EDIT_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// How paths are resolved beneath the root.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResolveMode {
    /// `openat2` when the kernel offers it, else the component-wise walk.
    Auto,
    /// `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`; opening a
    /// root in this mode fails where `openat2` is unavailable.
    Openat2,
    /// A component-wise `openat(O_NOFOLLOW | O_DIRECTORY)` walk from the root descriptor
    /// (the fallback for kernels before 5.6 or seccomp filters that refuse `openat2`).
    Walk,
}

/// The session root: one directory descriptor every operation resolves beneath.
pub struct Root {
    /// `O_RDONLY | O_DIRECTORY` descriptor of the canonical root.
    fd: OwnedFd,
    /// The effective resolution mode (never [`ResolveMode::Auto`]).
    mode: ResolveMode,
    /// The content guard of the binding (none for a root opened outside a binding).
    guard: Option<Guard>,
}

impl std::fmt::Debug for Root {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The root's location is operator configuration, not something to print by accident.
        f.debug_struct("Root").field("mode", &self.mode).finish_non_exhaustive()
    }
}

impl Root {
    /// Open the operator-given root directory: canonicalize it once (resolving any symlink
    /// in the operator's own path), open it as a directory and keep the descriptor. Every
    /// later operation resolves beneath this descriptor only.
    pub fn open(dir: &Path) -> io::Result<Root> {
        Self::open_with(dir, ResolveMode::Auto)
    }

    /// [`Root::open`] with an explicit resolution mode (tests force [`ResolveMode::Walk`] to
    /// exercise the fallback; an operator may too, e.g. under a seccomp filter).
    pub fn open_with(dir: &Path, mode: ResolveMode) -> io::Result<Root> {
        require_procfs()?;
        let canonical = std::fs::canonicalize(dir)?;
        let fd = rustix::fs::open(
            &canonical,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let mode = match mode {
            ResolveMode::Walk => ResolveMode::Walk,
            ResolveMode::Auto | ResolveMode::Openat2 => match probe_openat2(&fd) {
                Ok(()) => ResolveMode::Openat2,
                Err(_) if mode == ResolveMode::Auto => ResolveMode::Walk,
                Err(e) => return Err(io::Error::new(io::ErrorKind::Unsupported, e)),
            },
        };
        Ok(Root { fd, mode, guard: None })
    }

    /// Open a grant's root at bind time (issue 15, F8): `dir` (absolute and canonical, as
    /// `grant` stored it) is walked from `/` one component at a time with
    /// `O_PATH | O_DIRECTORY | O_NOFOLLOW`, so a symlink anywhere in it refuses the bind
    /// ([`PinError::Symlink`]) instead of being followed; the directory reached must be the
    /// one `grant` pinned (`pin`, device and inode), else [`PinError::Changed`].
    pub fn open_pinned(dir: &Path, pin: (u64, u64)) -> Result<Root, PinError> {
        require_procfs()?;
        let fd = open_no_symlinks(dir)?;
        let id = resolve::identity(&rustix::fs::fstat(&fd).map_err(|e| PinError::Io(e.into()))?);
        if id != pin {
            return Err(PinError::Changed);
        }
        let mode = match probe_openat2(&fd) {
            Ok(()) => ResolveMode::Openat2,
            Err(_) => ResolveMode::Walk,
        };
        Ok(Root { fd, mode, guard: None })
    }

    /// Guard every read, search and edit of this root with `guard`: a file whose content
    /// holds a capability handle is refused `capability_in_content` (issue 15, F7).
    pub fn with_guard(mut self, guard: Guard) -> Root {
        self.guard = Some(guard);
        self
    }

    /// The effective resolution mode: [`ResolveMode::Openat2`] or [`ResolveMode::Walk`].
    pub fn resolve_mode(&self) -> ResolveMode {
        self.mode
    }

    /// `fs.list`: the regular files and directories directly inside `path`, sorted bytewise
    /// by name, at most `max_entries` (default 1000) and at most `budget` bytes of data.
    pub fn list(
        &self,
        path: &ToolPath,
        max_entries: Option<u64>,
        budget: usize,
        cancel: &Cancel,
    ) -> Result<Value, AdapterError> {
        check_running(cancel)?;
        list::list(self, path, max_entries, budget, cancel)
    }

    /// `fs.stat`: `type`, `size` (0 for a directory) and `modifiedAt` of a regular file or
    /// directory.
    pub fn stat(&self, path: &ToolPath, budget: usize, cancel: &Cancel) -> Result<Value, AdapterError> {
        check_running(cancel)?;
        let (_, st) = self.lookup(path)?;
        let kind = resolve::classify(&st, path.trailing_slash, resolve::Want::Any)?;
        let (type_, size) = match kind {
            resolve::Kind::File => (EntryType::File, resolve::byte_count(&st)),
            resolve::Kind::Dir => (EntryType::Directory, ByteCount(0)),
        };
        let modified_at = time::modified_at(&st).map(budget::typed).transpose()?;
        let data = budget::data(&FsStatData { modified_at, size, type_ });
        budget::ensure_fits(&data, budget)?;
        Ok(data)
    }

    /// `fs.read`: the UTF-8 text of the byte window `[offset, offset + maxBytes)` (defaults
    /// 0 and 4 MiB), shortened to end on a character boundary and to fit `budget`.
    pub fn read(
        &self,
        path: &ToolPath,
        offset: Option<u64>,
        max_bytes: Option<u64>,
        budget: usize,
        cancel: &Cancel,
    ) -> Result<Value, AdapterError> {
        check_running(cancel)?;
        read::read(self, path, offset, max_bytes, budget, cancel, None).unwrap_or_else(|| Err(cancelled()))
    }

    /// [`Root::read`] that gives up (`None`) rather than scan more than `scan_limit` bytes
    /// of an unscanned file for handles: the server runs small reads on its connection task
    /// and hands the others to a blocking thread.
    pub fn read_small(
        &self,
        path: &ToolPath,
        offset: Option<u64>,
        max_bytes: Option<u64>,
        budget: usize,
        scan_limit: u64,
    ) -> Option<Result<Value, AdapterError>> {
        read::read(self, path, offset, max_bytes, budget, &Cancel::new(), Some(scan_limit))
    }

    /// `fs.search`: every non-overlapping occurrence of the literal `query` in the file at
    /// `path`, or in the files beneath the directory at `path` in bytewise path order, at
    /// most `max_results` (default 1000) and at most `budget` bytes of data.
    pub fn search(
        &self,
        path: &ToolPath,
        query: &str,
        max_results: Option<u64>,
        budget: usize,
        cancel: &Cancel,
    ) -> Result<Value, AdapterError> {
        check_running(cancel)?;
        search::search(self, path, query, max_results, budget, cancel)
    }

    /// `fs.write`: atomically replace or create the file at `path` with `content`
    /// (`create` and `overwrite` default to true; `expected_digest` guards the version).
    #[allow(clippy::too_many_arguments)]
    pub fn write(
        &self,
        path: &ToolPath,
        content: &str,
        create: Option<bool>,
        overwrite: Option<bool>,
        expected_digest: Option<&str>,
        budget: usize,
        cancel: &Cancel,
    ) -> Result<Value, AdapterError> {
        check_running(cancel)?;
        let opts = write::WriteOptions {
            create: create.unwrap_or(true),
            overwrite: overwrite.unwrap_or(true),
            expected_digest,
        };
        write::write(self, path, content, opts, budget, cancel)
    }

    /// `fs.edit`: apply `(oldText, newText)` replacements in order, each `oldText` occurring
    /// exactly once in the result of the previous edit, then atomically replace the file.
    pub fn edit(
        &self,
        path: &ToolPath,
        edits: &[(String, String)],
        expected_digest: Option<&str>,
        budget: usize,
        cancel: &Cancel,
    ) -> Result<Value, AdapterError> {
        check_running(cancel)?;
        write::edit(self, path, edits, expected_digest, budget, cancel)
    }
}

/// Why a grant's root cannot be opened at bind time.
#[derive(Debug, thiserror::Error)]
pub enum PinError {
    /// A component of the root path is a symlink (or not a directory).
    #[error("the root path resolves through a symlink or a non-directory")]
    Symlink,
    /// The directory at the root path is not the one pinned at grant time.
    #[error("the root is not the directory pinned at grant time")]
    Changed,
    /// The path is not absolute and plain (no `.` or `..`).
    #[error("the root path is not absolute and canonical")]
    NotCanonical,
    /// Any other failure (missing, permission).
    #[error("{0}")]
    Io(#[from] io::Error),
}

/// Open the absolute path `dir` as a directory without following any symlink in it: a
/// component-wise `openat(O_PATH | O_DIRECTORY | O_NOFOLLOW)` walk from `/`, then the last
/// directory reopened for reading.
pub fn open_no_symlinks(dir: &Path) -> Result<OwnedFd, PinError> {
    use std::path::Component;
    let step = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut cur: Option<OwnedFd> = None;
    for c in dir.components() {
        match c {
            Component::RootDir if cur.is_none() => {
                cur = Some(rustix::fs::open("/", step, Mode::empty()).map_err(|e| PinError::Io(e.into()))?);
            }
            Component::Normal(name) => {
                let Some(at) = &cur else { return Err(PinError::NotCanonical) };
                cur = Some(rustix::fs::openat(at, name, step, Mode::empty()).map_err(|e| match e {
                    rustix::io::Errno::NOTDIR | rustix::io::Errno::LOOP => PinError::Symlink,
                    e => PinError::Io(e.into()),
                })?);
            }
            _ => return Err(PinError::NotCanonical),
        }
    }
    let at = cur.ok_or(PinError::NotCanonical)?;
    rustix::fs::openat(&at, ".", OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| PinError::Io(e.into()))
}

/// `(device, inode)` of the directory at `dir`, opened without following symlinks (what
/// `grant` pins).
pub fn pin_of(dir: &Path) -> Result<(u64, u64), PinError> {
    let fd = open_no_symlinks(dir)?;
    Ok(resolve::identity(&rustix::fs::fstat(&fd).map_err(|e| PinError::Io(e.into()))?))
}

/// A root is only opened where procfs is mounted: a regular file is reopened for reading
/// through its `/proc/self/fd` entry after its type was judged on an `O_PATH` descriptor, and
/// reopening it by name instead could open a device swapped in meanwhile (issue 15, F9).
fn require_procfs() -> io::Result<()> {
    match resolve::proc_self_fd() {
        Some(_) => Ok(()),
        None => Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "procfs is not mounted at /proc: the adapter reopens files through /proc/self/fd",
        )),
    }
}

/// Whether `openat2` with the confinement flags works on this kernel and under this
/// process's seccomp policy.
fn probe_openat2(root: &OwnedFd) -> rustix::io::Result<()> {
    rustix::fs::openat2(
        root,
        ".",
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )
    .map(drop)
}

/// The error an operation returns once it has been cancelled (the caller discards it).
fn cancelled() -> AdapterError {
    AdapterError::new(AdapterCode::IoError, "operation cancelled")
}

/// Refuse to start an operation that was cancelled before it ran.
fn check_running(cancel: &Cancel) -> Result<(), AdapterError> {
    if cancel.is_cancelled() {
        Err(cancelled())
    } else {
        Ok(())
    }
}
