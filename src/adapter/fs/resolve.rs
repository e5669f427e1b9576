//! Race-free resolution of a [`ToolPath`] beneath the root descriptor (SPEC §5.1, §7.2).
//!
//! The directory holding the target is opened beneath the root in one of two ways:
//!
//! - `openat2(root, "a/b", O_DIRECTORY, RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
//!   RESOLVE_NO_MAGICLINKS)`: the kernel refuses any symlink (`ELOOP`) and any escape
//!   (`EXDEV`) atomically;
//! - the fallback walk: `openat(dir, component, O_PATH | O_DIRECTORY | O_NOFOLLOW)` one
//!   component at a time from the root descriptor. Components never contain `/` or `..`
//!   (the [`ToolPath`] rule), so each step stays beneath the previous descriptor, and
//!   `O_NOFOLLOW` refuses a symlink in each position.
//!
//! The last component is then only ever used relative to that directory descriptor, by
//! `fstatat(AT_SYMLINK_NOFOLLOW)` and `openat(O_PATH | O_NOFOLLOW)`, judged with `fstat` on
//! that descriptor and only then reopened for reading as the same inode ([`open_entry`]),
//! so nothing is checked by path and used by path again, and a FIFO, socket or device that
//! raced into the name is never opened.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::OnceLock;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags, Stat};
use rustix::io::Errno;

use super::{ResolveMode, Root};
use crate::contract::types::tool_adapter::ByteCount;
use crate::contract::{AdapterCode, AdapterError, ToolPath};

/// A refusal with a fixed message.
pub(super) fn err(code: AdapterCode, message: &'static str) -> AdapterError {
    AdapterError::new(code, message)
}

/// `not_found`: nothing at the path (or a missing parent).
pub(super) fn not_found() -> AdapterError {
    err(AdapterCode::NotFound, "no such file or directory")
}

/// `not_a_directory`: a directory was required.
pub(super) fn not_a_directory() -> AdapterError {
    err(AdapterCode::NotADirectory, "not a directory")
}

/// `not_a_file`: a regular file was required.
pub(super) fn not_a_file() -> AdapterError {
    err(AdapterCode::NotAFile, "not a regular file")
}

/// `symlink_refused`: a symlink was met.
pub(super) fn symlink_refused() -> AdapterError {
    err(AdapterCode::SymlinkRefused, "symbolic links are refused")
}

/// `unsupported_file_type`: a FIFO, socket or device.
pub(super) fn unsupported() -> AdapterError {
    err(AdapterCode::UnsupportedFileType, "unsupported file type")
}

/// `permission_denied`: the OS refused access.
pub(super) fn permission_denied() -> AdapterError {
    err(AdapterCode::PermissionDenied, "permission denied")
}

/// `io_error`: any other OS failure (retryable; nothing was changed).
pub(super) fn io_error() -> AdapterError {
    err(AdapterCode::IoError, "input/output error")
}

/// Map an OS error met while resolving or opening a path to its adapter code.
pub(super) fn map_errno(e: Errno) -> AdapterError {
    match e {
        Errno::NOENT => not_found(),
        Errno::NOTDIR => not_a_directory(),
        Errno::LOOP | Errno::XDEV => symlink_refused(),
        Errno::ACCESS | Errno::PERM | Errno::ROFS => permission_denied(),
        Errno::NAMETOOLONG => err(AdapterCode::InvalidPath, "path is too long"),
        Errno::NXIO | Errno::NODEV => unsupported(),
        Errno::ISDIR => not_a_file(),
        Errno::EXIST => err(AdapterCode::AlreadyExists, "file already exists"),
        _ => io_error(),
    }
}

/// What a path names, once symlinks and special files are refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
}

/// What an operation needs the path to name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Want {
    /// A regular file (`fs.read`): a directory is `not_a_file`.
    File,
    /// A directory (`fs.list`): a file is `not_a_directory`.
    Dir,
    /// Either (`fs.stat`, `fs.search`).
    Any,
}

/// Judge a target's type: a symlink is `symlink_refused`, a FIFO, socket or device
/// `unsupported_file_type`; a trailing `/` requires a directory; then `want` applies.
pub(super) fn classify(st: &Stat, trailing_slash: bool, want: Want) -> Result<Kind, AdapterError> {
    let kind = match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => Kind::File,
        FileType::Directory => Kind::Dir,
        FileType::Symlink => return Err(symlink_refused()),
        _ => return Err(unsupported()),
    };
    match (kind, want) {
        (Kind::File, _) if trailing_slash => Err(not_a_directory()),
        (Kind::Dir, Want::File) => Err(not_a_file()),
        (Kind::File, Want::Dir) => Err(not_a_directory()),
        _ => Ok(kind),
    }
}

/// A regular file with more than one hard link is `permission_denied`: its other names may
/// lie outside the root, so its bytes are not the root's to give (issue 15, F8).
pub(super) fn single_link(st: &Stat) -> Result<(), AdapterError> {
    #[allow(clippy::useless_conversion)] // `st_nlink` is u32 or u64 depending on the target
    let links = u64::from(st.st_nlink);
    if FileType::from_raw_mode(st.st_mode) == FileType::RegularFile && links > 1 {
        return Err(err(AdapterCode::PermissionDenied, "the file has more than one hard link"));
    }
    Ok(())
}

/// A file's length from its metadata.
pub(super) fn size_of(st: &Stat) -> u64 {
    #[allow(clippy::useless_conversion)] // `st_size` is `c_long` or `i64` depending on the target
    u64::try_from(i64::from(st.st_size)).unwrap_or(0)
}

/// A file's length from its metadata, as the generated `ByteCount`.
pub(super) fn byte_count(st: &Stat) -> ByteCount {
    ByteCount(i64::try_from(size_of(st)).unwrap_or(i64::MAX))
}

/// `(device, inode)` of a file.
pub(super) fn identity(st: &Stat) -> (u64, u64) {
    #[allow(clippy::useless_conversion)] // field types differ between targets
    (u64::from(st.st_dev), u64::from(st.st_ino))
}

/// How the directory holding a target is opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Access {
    /// `O_PATH`: enough for `fstatat` and `openat` beneath it (lookups only).
    Path,
    /// `O_RDONLY`: also for `fsync` after a rename.
    Read,
}

impl Access {
    fn flags(self) -> OFlags {
        match self {
            Access::Path => OFlags::PATH,
            Access::Read => OFlags::RDONLY,
        }
    }
}

/// A directory beneath (or at) the root: the root's own descriptor, borrowed, or one opened
/// beneath it.
pub(super) enum DirFd<'a> {
    /// The root itself: an entry directly inside it needs no path resolution at all.
    Root(&'a OwnedFd),
    /// A directory opened beneath the root.
    Opened(OwnedFd),
}

impl AsFd for DirFd<'_> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            DirFd::Root(fd) => fd.as_fd(),
            DirFd::Opened(fd) => fd.as_fd(),
        }
    }
}

/// Where a path leads.
pub(super) enum Target<'a> {
    /// The root itself (no components).
    Root,
    /// The entry `name` in the directory `parent`.
    Child {
        /// The directory holding the entry.
        parent: DirFd<'a>,
        /// The entry's name (one component, never `.`, `..` or containing `/`).
        name: &'a str,
    },
}

/// Flags for opening an existing regular file or directory for reading.
fn read_flags(kind: Kind) -> OFlags {
    let base = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    match kind {
        Kind::File => base,
        Kind::Dir => base | OFlags::DIRECTORY,
    }
}

/// The process's `/proc/self/fd` directory (`O_PATH`), opened once and kept only when it
/// really is procfs (`fstatfs` magic), so an entry in it is the kernel's link to an open
/// descriptor and nothing a mount could fake. `None` without procfs.
pub(super) fn proc_self_fd() -> Option<BorrowedFd<'static>> {
    static DIR: OnceLock<Option<OwnedFd>> = OnceLock::new();
    DIR.get_or_init(|| {
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let fd = rustix::fs::open("/proc/self/fd", flags, Mode::empty()).ok()?;
        let fs = rustix::fs::fstatfs(&fd).ok()?;
        (fs.f_type == rustix::fs::PROC_SUPER_MAGIC).then_some(fd)
    })
    .as_ref()
    .map(|fd| fd.as_fd())
}

/// Open the entry `name` in `dir`, seen as `kind`, for reading, without ever opening a FIFO,
/// socket or device (issue 15, F9): the name may have been swapped since it was looked at,
/// and merely opening a device can act (a tape rewinds, a terminal becomes the controlling
/// one, a FIFO's writer is released). So the name is opened `O_PATH | O_NOFOLLOW` (which
/// opens no file: it only pins the inode), the type is judged with `fstat` on that
/// descriptor — a symlink is `symlink_refused`, anything but a regular file or directory
/// `unsupported_file_type`, a regular file where a directory was seen `not_a_directory` —
/// and only then is the *same inode* opened for reading: a directory as `.` beneath its
/// `O_PATH` descriptor, a regular file through its `/proc/self/fd` entry (an inode's type
/// never changes, so this opens a regular file). The reading descriptor is returned with
/// the metadata judged on the pinned one: both name the same inode (`.` of a directory is
/// that directory; a `/proc/self/fd` entry of the procfs checked at start is a magic link to
/// the pinned file itself), so a second `fstat` could only see a later version of it.
pub(super) fn open_entry(dir: impl AsFd, name: &str, kind: Kind) -> Result<(OwnedFd, Stat), AdapterError> {
    let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let pinned = rustix::fs::openat(dir, name, flags, Mode::empty()).map_err(map_errno)?;
    let seen = rustix::fs::fstat(&pinned).map_err(map_errno)?;
    let fd = match FileType::from_raw_mode(seen.st_mode) {
        FileType::Directory => rustix::fs::openat(&pinned, ".", read_flags(Kind::Dir), Mode::empty()),
        FileType::RegularFile if kind == Kind::Dir => return Err(not_a_directory()),
        FileType::RegularFile => reopen_file(&pinned),
        FileType::Symlink => return Err(symlink_refused()),
        _ => return Err(unsupported()),
    }
    .map_err(map_errno)?;
    Ok((fd, seen))
}

/// Open the regular file behind the `O_PATH` descriptor `pinned` for reading, through its
/// `/proc/self/fd` entry. The entry is a magic link to the open file itself, not a name that
/// can be swapped, so it is followed (no `O_NOFOLLOW`, which would refuse it).
fn reopen_file(pinned: &OwnedFd) -> Result<OwnedFd, Errno> {
    let proc = proc_self_fd().ok_or(Errno::NOSYS)?;
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    rustix::fs::openat(proc, pinned.as_raw_fd().to_string(), flags, Mode::empty())
}

impl Root {
    /// Open the directory named by `components` beneath the root (`access` applies to the
    /// last one; intermediate directories are opened `O_PATH`).
    pub(super) fn open_dir(&self, components: &[String], access: Access) -> Result<OwnedFd, AdapterError> {
        let flags = access.flags() | OFlags::DIRECTORY | OFlags::CLOEXEC;
        if components.is_empty() {
            return rustix::fs::openat(&self.fd, ".", flags, Mode::empty()).map_err(map_errno);
        }
        match self.mode {
            ResolveMode::Walk => self.walk(components, flags),
            _ => self.openat2(components, flags),
        }
    }

    fn openat2(&self, components: &[String], flags: OFlags) -> Result<OwnedFd, AdapterError> {
        let rel = components.join("/");
        let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
        // RESOLVE_NO_SYMLINKS refuses a trailing symlink too (ELOOP), so no O_NOFOLLOW: with
        // O_PATH it would open the link itself. EAGAIN only signals a concurrent rename
        // during `..` handling (never met here); retry a few times regardless.
        let mut last = Errno::AGAIN;
        for _ in 0..8 {
            match rustix::fs::openat2(&self.fd, rel.as_str(), flags, Mode::empty(), resolve) {
                Ok(fd) => return Ok(fd),
                Err(Errno::AGAIN) => continue,
                Err(e) => {
                    last = e;
                    break;
                }
            }
        }
        Err(map_errno(last))
    }

    fn walk(&self, components: &[String], last_flags: OFlags) -> Result<OwnedFd, AdapterError> {
        let step = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let mut cur = rustix::fs::openat(&self.fd, ".", step, Mode::empty()).map_err(map_errno)?;
        for (i, c) in components.iter().enumerate() {
            let flags = if i + 1 == components.len() { last_flags | OFlags::NOFOLLOW } else { step };
            cur = match rustix::fs::openat(&cur, c.as_str(), flags, Mode::empty()) {
                Ok(fd) => fd,
                // A symlink with O_NOFOLLOW gives ELOOP, or ENOTDIR together with O_PATH and
                // O_DIRECTORY: tell a symlink from a plain non-directory by looking at it.
                Err(Errno::NOTDIR | Errno::LOOP) => return Err(component_error(&cur, c)),
                Err(e) => return Err(map_errno(e)),
            };
        }
        Ok(cur)
    }

    /// Locate `path`: the root, or its parent directory (opened beneath the root with
    /// `access`) and last name, with the target's own metadata (`lstat`-like: a symlink is
    /// reported as one, never followed). A missing target is `not_found`.
    pub(super) fn lookup<'a>(&'a self, path: &'a ToolPath) -> Result<(Target<'a>, Stat), AdapterError> {
        let (target, st) = self.lookup_opt(path, Access::Path)?;
        Ok((target, st.ok_or_else(not_found)?))
    }

    /// [`Root::lookup`] where a missing last component is `None` (its parent must exist).
    pub(super) fn lookup_opt<'a>(
        &'a self,
        path: &'a ToolPath,
        access: Access,
    ) -> Result<(Target<'a>, Option<Stat>), AdapterError> {
        let Some((name, dirs)) = path.components.split_last() else {
            let st = rustix::fs::fstat(&self.fd).map_err(map_errno)?;
            return Ok((Target::Root, Some(st)));
        };
        // An entry directly inside the root is looked up on the root's descriptor (which can
        // do everything an `O_PATH` or `O_RDONLY` directory can): `name` is one component,
        // never `.` or `..`, and `statat`/`openat` below never follow it.
        let parent = if dirs.is_empty() { DirFd::Root(&self.fd) } else { DirFd::Opened(self.open_dir(dirs, access)?) };
        let st = match rustix::fs::statat(&parent, name.as_str(), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => Some(st),
            Err(Errno::NOENT) => None,
            Err(e) => return Err(map_errno(e)),
        };
        Ok((Target::Child { parent, name: name.as_str() }, st))
    }

    /// Open an existing regular file or directory for reading, judged against `want`. The
    /// type is checked on the name first, then on an `O_PATH` descriptor before anything is
    /// opened for reading ([`open_entry`]: a FIFO or device is never opened), and again on
    /// the reading descriptor.
    pub(super) fn open_existing(&self, path: &ToolPath, want: Want) -> Result<(OwnedFd, Stat, Kind), AdapterError> {
        let (target, st) = self.lookup(path)?;
        let kind = classify(&st, path.trailing_slash, want)?;
        let (fd, st) = match target {
            Target::Root => {
                // A fresh open file description: directory reading moves its offset.
                let fd = rustix::fs::openat(&self.fd, ".", read_flags(Kind::Dir), Mode::empty()).map_err(map_errno)?;
                let st = rustix::fs::fstat(&fd).map_err(map_errno)?;
                (fd, st)
            }
            Target::Child { parent, name } => open_entry(&parent, name, kind)?,
        };
        let kind = classify(&st, path.trailing_slash, want)?;
        Ok((fd, st, kind))
    }
}

/// Why the component `name` in `dir` could not be opened as a directory.
fn component_error(dir: &OwnedFd, name: &str) -> AdapterError {
    match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Symlink => symlink_refused(),
        Ok(_) => not_a_directory(),
        Err(e) => map_errno(e),
    }
}
