//! `fs.write` and `fs.edit` (SPEC §5.3): atomic replacement under a per-path lock.
//!
//! Both follow the same steps: refuse early what cannot succeed (payload bounds, a result
//! that would not fit the budget), open the parent directory beneath the root, take the
//! path's lock, judge the current target (existence, type, flags, `expectedDigest`), write
//! the new bytes to a temp file in the same directory, `fsync` it, pass the [`Cancel`]
//! commit point, put it in place and `fsync` the directory. Any failure before that leaves
//! nothing behind: nothing is changed.
//!
//! The temp file is anonymous where the filesystem allows it (`O_TMPFILE`): it has no name
//! while its bytes are written and synced, so a crash (`kill -9`) at any point of that
//! leaves nothing in the directory, and an agent listing the directory never sees it. It is
//! then linked into place through `/proc/self/fd` — under the target's name directly when
//! the target must not exist yet (`linkat` fails on an existing name, atomically), or under
//! a fresh temp name renamed over the target at once. Where `O_TMPFILE` or `/proc` is
//! missing, the temp file is created under an unpredictable name (`O_EXCL`) and renamed.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::Duration;

use memchr::memmem;
use rustix::fs::{AtFlags, FileType, Mode, OFlags, RenameFlags, Stat};
use rustix::io::Errno;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::budget::{self, data, typed};
use super::lock::PathLock;
use super::pread::pread_at;
use super::resolve::{self, err, io_error, map_errno, Access, Kind, Want};
use super::{cancelled, Cancel, Root, MAX_EDIT_FILE_BYTES};
use crate::contract::frame::MAX_CONTENT_BYTES;
use crate::contract::text::is_digest;
use crate::contract::types::tool_adapter::{ByteCount, FsEditData, FsWriteData};
use crate::contract::{AdapterCode, AdapterError, ToolPath};

/// Permission bits of a file `fs.write` creates (the umask is not applied).
const NEW_FILE_MODE: u32 = 0o644;
/// Bytes written between two cancellation checks.
const WRITE_SLICE: usize = 1 << 20;
/// Bytes hashed per `pread`.
const HASH_CHUNK: usize = 256 * 1024;

/// The flags of `fs.write`.
pub(super) struct WriteOptions<'a> {
    /// Allow creating a missing file.
    pub(super) create: bool,
    /// Allow replacing an existing file.
    pub(super) overwrite: bool,
    /// Replace only the version with this digest.
    pub(super) expected_digest: Option<&'a str>,
}

/// Bytes every `fs.edit` running at once may hold together (issue 25, N11): twice the largest
/// file an edit loads. An edit reserves the file's size plus the most its edits can grow it
/// before it reads a byte, and waits (cancellably) while the reservation does not fit, so
/// the memory of all edits together stays under this bound however many run: one edit of a
/// 60 MiB file holds about 60 MiB, and any number of concurrent edits at most 128 MiB.
pub(super) const EDIT_MEMORY_BUDGET: u64 = 2 * MAX_EDIT_FILE_BYTES;

/// The bytes reserved by the edits running now.
static EDIT_MEMORY: (Mutex<u64>, Condvar) = (Mutex::new(0), Condvar::new());

/// A reservation of edit memory, given back when dropped.
struct EditMemory(u64);

impl EditMemory {
    /// Reserve `bytes` (at most [`EDIT_MEMORY_BUDGET`]), waiting while other edits hold too
    /// much; a cancellation while waiting ends the wait.
    fn reserve(bytes: u64, cancel: &Cancel) -> Result<EditMemory, AdapterError> {
        if bytes > EDIT_MEMORY_BUDGET {
            return Err(err(AdapterCode::InvalidRequest, "the file is too large to edit"));
        }
        let (used, freed) = &EDIT_MEMORY;
        let mut used = used.lock().unwrap_or_else(|e| e.into_inner());
        while *used + bytes > EDIT_MEMORY_BUDGET {
            if cancel.is_cancelled() {
                return Err(cancelled());
            }
            used = freed.wait_timeout(used, Duration::from_millis(50)).unwrap_or_else(|e| e.into_inner()).0;
        }
        *used += bytes;
        Ok(EditMemory(bytes))
    }
}

impl Drop for EditMemory {
    fn drop(&mut self) {
        let (used, freed) = &EDIT_MEMORY;
        let mut used = used.lock().unwrap_or_else(|e| e.into_inner());
        *used = used.saturating_sub(self.0);
        freed.notify_all();
    }
}

/// The `data` of an `fs.write` result.
fn write_data(created: bool, bytes_written: usize, digest: String) -> Result<Value, AdapterError> {
    Ok(data(&FsWriteData { bytes_written: ByteCount(bytes_written as i64), created, digest: typed(digest)? }))
}

/// The `data` of an `fs.edit` result.
fn edit_data(replacements: usize, digest: String) -> Result<Value, AdapterError> {
    Ok(data(&FsEditData { digest: typed(digest)?, replacements: replacements as i64 }))
}

/// Lowercase hex SHA-256 of `bytes`.
pub(super) fn digest(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

fn digest_mismatch() -> AdapterError {
    err(AdapterCode::DigestMismatch, "the file does not match expectedDigest")
}

fn check_digest_arg(expected: Option<&str>) -> Result<(), AdapterError> {
    match expected {
        Some(d) if !is_digest(d) => Err(err(AdapterCode::InvalidRequest, "expectedDigest must be 64 lowercase hex")),
        _ => Ok(()),
    }
}

/// Stream the file through SHA-256.
fn digest_fd(fd: &OwnedFd, cancel: &Cancel) -> Result<String, AdapterError> {
    let mut hasher = Sha256::new();
    let mut offset = 0u64;
    loop {
        if cancel.is_cancelled() {
            return Err(cancelled());
        }
        let chunk = pread_at(fd, offset, HASH_CHUNK)?;
        hasher.update(&chunk);
        offset += chunk.len() as u64;
        if chunk.len() < HASH_CHUNK {
            return Ok(hex::encode(hasher.finalize()));
        }
    }
}

/// The whole file, read up to its end (not merely its `fstat` size) into a buffer of
/// `capacity` bytes allocated once; a file that grew past `size` (its `fstat` size) while it
/// was read is `io_error` (retryable: nothing was changed).
fn read_to_end(fd: &OwnedFd, size: u64, capacity: usize, cancel: &Cancel) -> Result<Vec<u8>, AdapterError> {
    let mut bytes = Vec::with_capacity(capacity);
    loop {
        if cancel.is_cancelled() {
            return Err(cancelled());
        }
        let chunk = pread_at(fd, bytes.len() as u64, HASH_CHUNK)?;
        if bytes.len() as u64 + chunk.len() as u64 > size {
            return Err(io_error());
        }
        bytes.extend_from_slice(&chunk);
        if chunk.len() < HASH_CHUNK {
            return Ok(bytes);
        }
    }
}

/// The parent directory (opened for reading, so it can be fsynced) and the name of a
/// mutation's target. The root itself is a directory: `not_a_file`.
fn mutation_target<'p>(root: &Root, path: &'p ToolPath) -> Result<(OwnedFd, &'p str), AdapterError> {
    let Some((name, dirs)) = path.components.split_last() else {
        return Err(resolve::not_a_file());
    };
    Ok((root.open_dir(dirs, Access::Read)?, name.as_str()))
}

/// Take the process-wide lock of the directory entry `name` in `parent` (issue 25, N3): keyed
/// by the parent directory's `(device, inode)` and the name, so one file has one key whatever
/// grant (root) names it — two grants whose roots nest reach `R/sub/f` as `sub/f` and as `f`
/// and still exclude each other.
fn lock_entry(parent: &OwnedFd, name: &str) -> Result<PathLock, AdapterError> {
    let dir = resolve::identity(&rustix::fs::fstat(parent).map_err(map_errno)?);
    Ok(PathLock::acquire(dir, name.to_string()))
}

/// The target's current metadata, `None` when it does not exist. A symlink is
/// `symlink_refused`, a directory `not_a_file`, a FIFO, socket or device
/// `unsupported_file_type`, and an existing file named with a trailing `/`
/// `not_a_directory`.
fn current(parent: &OwnedFd, name: &str, trailing_slash: bool) -> Result<Option<Stat>, AdapterError> {
    let st = match rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(Errno::NOENT) => return Ok(None),
        Err(e) => return Err(map_errno(e)),
    };
    match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile if trailing_slash => Err(resolve::not_a_directory()),
        FileType::RegularFile => Ok(Some(st)),
        FileType::Directory => Err(resolve::not_a_file()),
        FileType::Symlink => Err(resolve::symlink_refused()),
        _ => Err(resolve::unsupported()),
    }
}

/// Open the existing regular file `name` for reading, judged again on the descriptor.
fn open_current(parent: &OwnedFd, name: &str) -> Result<(OwnedFd, Stat), AdapterError> {
    let (fd, st) = resolve::open_entry(parent, name, Kind::File)?;
    resolve::classify(&st, false, Want::File)?;
    Ok((fd, st))
}

pub(super) fn write(
    root: &Root,
    path: &ToolPath,
    content: &str,
    opts: WriteOptions<'_>,
    budget: usize,
    cancel: &Cancel,
) -> Result<Value, AdapterError> {
    if content.len() > MAX_CONTENT_BYTES {
        return Err(err(AdapterCode::InvalidRequest, "content exceeds 4 MiB"));
    }
    check_digest_arg(opts.expected_digest)?;
    // The result's size is known now (`created:false` is the longer form): refuse before
    // any side effect rather than after.
    let longest = write_data(false, content.len(), "0".repeat(64))?;
    budget::ensure_fits(&longest, budget)?;
    let (parent, name) = mutation_target(root, path)?;
    let _lock = lock_entry(&parent, name)?;
    let existing = current(&parent, name, path.trailing_slash)?;
    let (perm, owner) = match &existing {
        None if path.trailing_slash => return Err(resolve::not_a_directory()),
        None if opts.expected_digest.is_some() || !opts.create => return Err(resolve::not_found()),
        None => (NEW_FILE_MODE, None),
        Some(_) if !opts.overwrite => return Err(err(AdapterCode::AlreadyExists, "file already exists")),
        Some(st) => {
            if let Some(expected) = opts.expected_digest {
                let (fd, _) = open_current(&parent, name)?;
                if digest_fd(&fd, cancel)? != expected {
                    return Err(digest_mismatch());
                }
            }
            (st.st_mode & 0o777, Some((st.st_uid, st.st_gid)))
        }
    };
    let bytes = content.as_bytes();
    let commit = Commit {
        parent: &parent,
        name,
        perm,
        owner,
        no_replace: existing.is_none() && !opts.overwrite,
        anonymous: true,
    };
    commit.replace(bytes, cancel)?;
    write_data(existing.is_none(), bytes.len(), digest(bytes))
}

pub(super) fn edit(
    root: &Root,
    path: &ToolPath,
    edits: &[(String, String)],
    expected_digest: Option<&str>,
    budget: usize,
    cancel: &Cancel,
) -> Result<Value, AdapterError> {
    if edits.is_empty() || edits.len() > 256 {
        return Err(err(AdapterCode::InvalidRequest, "edits must hold 1-256 edits"));
    }
    if edits.iter().any(|(old, _)| old.is_empty()) {
        return Err(err(AdapterCode::InvalidRequest, "oldText must not be empty"));
    }
    check_digest_arg(expected_digest)?;
    let longest = edit_data(edits.len(), "0".repeat(64))?;
    budget::ensure_fits(&longest, budget)?;
    let (parent, name) = mutation_target(root, path)?;
    let _lock = lock_entry(&parent, name)?;
    if current(&parent, name, path.trailing_slash)?.is_none() {
        return Err(resolve::not_found());
    }
    let (fd, st) = open_current(&parent, name)?;
    // A file with another name (perhaps outside the root) is not the root's to rewrite.
    resolve::single_link(&st)?;
    let size = resolve::size_of(&st);
    if size > MAX_EDIT_FILE_BYTES {
        return Err(err(AdapterCode::InvalidRequest, "the file is too large to edit"));
    }
    // The most the text can hold: each edit applies once, growing it by at most the
    // difference of its texts. Reserved before a byte is read (issue 25, N11).
    let growth: u64 = edits.iter().map(|(old, new)| new.len().saturating_sub(old.len()) as u64).sum();
    let _memory = EditMemory::reserve(size + growth, cancel)?;
    let bytes = read_to_end(&fd, size, (size + growth) as usize, cancel)?;
    drop(fd);
    // An edit's outcome (not found, ambiguous) would tell pieces of a handle in the file.
    if let Some(g) = &root.guard {
        g.check_bytes(&bytes)?;
    }
    if expected_digest.is_some_and(|d| d != digest(&bytes)) {
        return Err(digest_mismatch());
    }
    let mut text = String::from_utf8(bytes).map_err(|_| err(AdapterCode::NotUtf8, "the file is not valid UTF-8"))?;
    for (i, (old, new)) in edits.iter().enumerate() {
        let at = apply_position(&text, old).map_err(|code| {
            let what = if code == AdapterCode::EditNotFound { "not found" } else { "occurs more than once" };
            AdapterError::new(code, format!("edit {}: oldText {what}", i + 1))
        })?;
        text.replace_range(at..at + old.len(), new);
    }
    if cancel.is_cancelled() {
        return Err(cancelled());
    }
    let owner = Some((st.st_uid, st.st_gid));
    let commit = Commit { parent: &parent, name, perm: st.st_mode & 0o777, owner, no_replace: false, anonymous: true };
    commit.replace(text.as_bytes(), cancel)?;
    edit_data(edits.len(), digest(text.as_bytes()))
}

/// The byte position of the single occurrence of `old` in `text`; overlapping occurrences
/// count (`aa` occurs twice in `aaa`).
fn apply_position(text: &str, old: &str) -> Result<usize, AdapterCode> {
    let (hay, needle) = (text.as_bytes(), old.as_bytes());
    let first = memmem::find(hay, needle).ok_or(AdapterCode::EditNotFound)?;
    match memmem::find(&hay[first + 1..], needle) {
        Some(_) => Err(AdapterCode::EditAmbiguous),
        None => Ok(first),
    }
}

/// A temp file in the parent directory, removed on drop unless it was renamed away.
struct TempFile<'a> {
    dir: &'a OwnedFd,
    name: String,
    armed: bool,
}

impl Drop for TempFile<'_> {
    fn drop(&mut self) {
        if self.armed {
            if let Err(e) = rustix::fs::unlinkat(self.dir, self.name.as_str(), AtFlags::empty()) {
                tracing::warn!(errno = e.raw_os_error(), "could not remove a temp file");
            }
        }
    }
}

/// `.pi-conform-<32 random hex>.tmp`.
fn temp_name() -> Result<String, AdapterError> {
    let mut random = [0u8; 16];
    getrandom::fill(&mut random).map_err(|_| io_error())?;
    Ok(format!(".pi-conform-{}.tmp", hex::encode(random)))
}

impl TempFile<'_> {
    /// Create a temp file under a fresh name exclusively (`O_EXCL | O_NOFOLLOW`, 0600).
    fn create(dir: &OwnedFd) -> Result<(TempFile<'_>, OwnedFd), AdapterError> {
        let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        for _ in 0..8 {
            let name = temp_name()?;
            match rustix::fs::openat(dir, name.as_str(), flags, Mode::from_raw_mode(0o600)) {
                Ok(fd) => return Ok((TempFile { dir, name, armed: true }, fd)),
                Err(Errno::EXIST) => continue,
                Err(e) => return Err(map_errno(e)),
            }
        }
        Err(io_error())
    }
}

/// Whether an open file can be linked by its `/proc/self/fd` entry (procfs is mounted).
fn proc_fd_links() -> bool {
    static PROC: OnceLock<bool> = OnceLock::new();
    *PROC.get_or_init(|| std::fs::metadata("/proc/self/fd").is_ok_and(|m| m.is_dir()))
}

/// The file the new bytes go to before they are put in place.
enum Staging<'a> {
    /// `O_TMPFILE`: no name until it is linked.
    Anonymous,
    /// A named temp file, removed on drop unless renamed away.
    Named(TempFile<'a>),
}

/// Where and how new bytes replace a target.
struct Commit<'a> {
    parent: &'a OwnedFd,
    name: &'a str,
    /// Permission bits of the result.
    perm: u32,
    /// Owner and group to keep (best effort: only a privileged adapter can give a file away).
    owner: Option<(u32, u32)>,
    /// Fail with `already_exists` rather than replace a file that appeared meanwhile.
    no_replace: bool,
    /// Try an anonymous temp file first (always, but in tests of the named fallback).
    anonymous: bool,
}

impl Commit<'_> {
    /// Write `bytes` to a temp file, fsync, commit, rename over the target, fsync the
    /// directory. Before the rename, every failure (and a cancellation) removes the temp
    /// file and leaves the target untouched.
    fn replace(&self, bytes: &[u8], cancel: &Cancel) -> Result<(), AdapterError> {
        let (staging, fd) = self.stage()?;
        for slice in bytes.chunks(WRITE_SLICE) {
            if cancel.is_cancelled() {
                return Err(cancelled());
            }
            write_all(&fd, slice)?;
        }
        if let Some((uid, gid)) = self.owner {
            let st = rustix::fs::fstat(&fd).map_err(map_errno)?;
            if (st.st_uid, st.st_gid) != (uid, gid) {
                // Ignored when unprivileged: the file then belongs to the adapter's user.
                let _ =
                    rustix::fs::fchown(&fd, Some(rustix::fs::Uid::from_raw(uid)), Some(rustix::fs::Gid::from_raw(gid)));
            }
        }
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(self.perm)).map_err(map_errno)?;
        rustix::fs::fsync(&fd).map_err(map_errno)?;
        if !cancel.try_commit() {
            return Err(cancelled());
        }
        match staging {
            Staging::Anonymous => self.link_into_place(&fd)?,
            Staging::Named(mut temp) => {
                drop(fd);
                self.rename(&mut temp)?;
            }
        }
        if let Err(e) = rustix::fs::fsync(self.parent) {
            // The new content is in place; only its durability across a crash is unknown.
            tracing::warn!(errno = e.raw_os_error(), "could not fsync a directory after a rename");
        }
        Ok(())
    }

    /// Open the file the new bytes are written to: anonymous where possible.
    fn stage(&self) -> Result<(Staging<'_>, OwnedFd), AdapterError> {
        if self.anonymous && proc_fd_links() {
            let flags = OFlags::TMPFILE | OFlags::WRONLY | OFlags::CLOEXEC;
            match rustix::fs::openat(self.parent, ".", flags, Mode::from_raw_mode(0o600)) {
                Ok(fd) => return Ok((Staging::Anonymous, fd)),
                // This filesystem (or kernel) has no O_TMPFILE: use a named temp file.
                Err(Errno::OPNOTSUPP | Errno::ISDIR | Errno::INVAL) => {}
                Err(e) => return Err(map_errno(e)),
            }
        }
        let (temp, fd) = TempFile::create(self.parent)?;
        Ok((Staging::Named(temp), fd))
    }

    /// Give the anonymous file `fd` its place: the target's name itself when the target must
    /// not exist (`linkat` refuses an existing name atomically), else a fresh temp name that
    /// is renamed over the target at once.
    fn link_into_place(&self, fd: &OwnedFd) -> Result<(), AdapterError> {
        let proc = format!("/proc/self/fd/{}", fd.as_raw_fd());
        let link =
            |name: &str| rustix::fs::linkat(rustix::fs::CWD, proc.as_str(), self.parent, name, AtFlags::SYMLINK_FOLLOW);
        if self.no_replace {
            return link(self.name).map_err(map_errno);
        }
        for _ in 0..8 {
            let name = temp_name()?;
            match link(&name) {
                Ok(()) => return self.rename(&mut TempFile { dir: self.parent, name, armed: true }),
                Err(Errno::EXIST) => continue,
                Err(e) => return Err(map_errno(e)),
            }
        }
        Err(io_error())
    }

    fn rename(&self, temp: &mut TempFile<'_>) -> Result<(), AdapterError> {
        let (dir, tmp) = (self.parent, temp.name.as_str());
        if !self.no_replace {
            rustix::fs::renameat(dir, tmp, dir, self.name).map_err(map_errno)?;
            temp.armed = false;
            return Ok(());
        }
        match rustix::fs::renameat_with(dir, tmp, dir, self.name, RenameFlags::NOREPLACE) {
            Ok(()) => {
                temp.armed = false;
                Ok(())
            }
            // A filesystem without RENAME_NOREPLACE: link(2) fails on an existing name just
            // as atomically; the temp name is then removed when `temp` drops.
            Err(Errno::INVAL | Errno::NOSYS) => {
                rustix::fs::linkat(dir, tmp, dir, self.name, AtFlags::empty()).map_err(map_errno)
            }
            Err(e) => Err(map_errno(e)),
        }
    }
}

fn write_all(fd: &OwnedFd, mut bytes: &[u8]) -> Result<(), AdapterError> {
    while !bytes.is_empty() {
        match rustix::io::write(fd, bytes) {
            Ok(0) => return Err(io_error()),
            Ok(n) => bytes = &bytes[n..],
            Err(Errno::INTR) => continue,
            Err(e) => return Err(map_errno(e)),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlapping_occurrences_count() {
        assert_eq!(apply_position("aaa", "aa"), Err(AdapterCode::EditAmbiguous));
        assert_eq!(apply_position("aab", "aa"), Ok(0));
        assert_eq!(apply_position("xyz", "q"), Err(AdapterCode::EditNotFound));
        assert_eq!(apply_position("é-é", "é-"), Ok(0));
        assert_eq!(apply_position("abab", "ab"), Err(AdapterCode::EditAmbiguous));
    }

    fn commit<'a>(parent: &'a OwnedFd, name: &'a str, no_replace: bool, anonymous: bool) -> Commit<'a> {
        Commit { parent, name, perm: 0o644, owner: None, no_replace, anonymous }
    }

    fn names(dir: &std::path::Path) -> Vec<String> {
        let mut v: Vec<String> =
            std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        v.sort();
        v
    }

    #[test]
    fn cancelled_before_the_rename_leaves_nothing() {
        for anonymous in [true, false] {
            cancelled_before_the_rename_leaves_nothing_with(anonymous);
        }
    }

    fn cancelled_before_the_rename_leaves_nothing_with(anonymous: bool) {
        let tmp = tempfile::tempdir().unwrap();
        let root = Root::open(tmp.path()).unwrap();
        let parent = root.open_dir(&[], Access::Read).unwrap();
        let cancel = Cancel::new();
        assert!(cancel.cancel());
        let commit = commit(&parent, "f", false, anonymous);
        // Caught between two written slices.
        let e = commit.replace(&vec![b'x'; 3 * WRITE_SLICE], &cancel).unwrap_err();
        assert_eq!(e.code, AdapterCode::IoError);
        // Caught at the commit point itself (no slice to write).
        commit.replace(b"", &cancel).unwrap_err();
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0, "no target and no temp file");
        let done = Cancel::new();
        let commit = self::commit(&parent, "g", true, anonymous);
        commit.replace(b"ok", &done).unwrap();
        assert!(!done.cancel(), "committed: too late to cancel");
        assert_eq!(std::fs::read(tmp.path().join("g")).unwrap(), b"ok");
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 1);
    }

    #[test]
    fn no_replace_refuses_an_existing_name() {
        for anonymous in [true, false] {
            let tmp = tempfile::tempdir().unwrap();
            std::fs::write(tmp.path().join("f"), "old").unwrap();
            let root = Root::open(tmp.path()).unwrap();
            let parent = root.open_dir(&[], Access::Read).unwrap();
            let e = commit(&parent, "f", true, anonymous).replace(b"new", &Cancel::new()).unwrap_err();
            assert_eq!(e.code, AdapterCode::AlreadyExists, "anonymous {anonymous}");
            assert_eq!(std::fs::read(tmp.path().join("f")).unwrap(), b"old");
            assert_eq!(names(tmp.path()), ["f"]);
            // Replacing works in both modes and leaves no temp name behind.
            commit(&parent, "f", false, anonymous).replace(b"new", &Cancel::new()).unwrap();
            assert_eq!(std::fs::read(tmp.path().join("f")).unwrap(), b"new");
            assert_eq!(names(tmp.path()), ["f"]);
        }
    }

    /// While the new bytes are written and synced they have no name in the directory (so a
    /// crash there leaves nothing, and fs.list never shows them); the named fallback does
    /// show a temp name meanwhile. On a filesystem without O_TMPFILE both are named.
    #[test]
    fn the_new_bytes_have_no_name_until_they_are_in_place() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("f"), "old").unwrap();
        let root = Root::open(tmp.path()).unwrap();
        let parent = root.open_dir(&[], Access::Read).unwrap();
        for (name, no_replace) in [("f", false), ("new", true)] {
            let c = commit(&parent, name, no_replace, true);
            let (staging, fd) = c.stage().unwrap();
            write_all(&fd, b"fresh").unwrap();
            match staging {
                Staging::Anonymous => {
                    assert_eq!(names(tmp.path()).iter().filter(|n| n.ends_with(".tmp")).count(), 0);
                    c.link_into_place(&fd).unwrap();
                }
                Staging::Named(mut temp) => {
                    eprintln!("this filesystem has no O_TMPFILE: the named fallback ran");
                    assert!(names(tmp.path()).iter().any(|n| n.starts_with(".pi-conform-")));
                    drop(fd);
                    c.rename(&mut temp).unwrap();
                }
            }
            assert_eq!(std::fs::read(tmp.path().join(name)).unwrap(), b"fresh");
        }
        assert_eq!(names(tmp.path()), ["f", "new"]);
        // The named fallback, forced, shows its temp name while it writes.
        let c = commit(&parent, "f", false, false);
        let (staging, _fd) = c.stage().unwrap();
        assert!(matches!(staging, Staging::Named(_)));
        assert!(names(tmp.path()).iter().any(|n| n.starts_with(".pi-conform-") && n.ends_with(".tmp")));
        drop(staging);
        assert_eq!(names(tmp.path()), ["f", "new"], "a dropped named temp file is removed");
    }
}
