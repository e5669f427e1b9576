//! The daemon's durable state (SPEC §2.5, §6): an owner-only directory with the session
//! catalog (nonsecret records, `sessions/`), the wake journal (`wakes/`) and a manifest
//! (`manifest.json`). Endpoints and handles never reach it.
//!
//! Every file is written crash-safely (temp file, fsync, rename, fsync the directory; a new
//! session record into a slot whose name is already durable, see [`Slots`]) and read
//! defensively (SPEC PC-6, DECISION on the state directory):
//!
//! - the directories are opened once, `O_DIRECTORY | O_NOFOLLOW`, judged with `fstat` (a real
//!   directory, ours, no group/other bits), and every later access is relative to those
//!   descriptors, so a `sessions/` replaced by a symlink is refused, never followed or written
//!   through;
//! - a record is judged with `lstat`, opened `O_NOFOLLOW | O_NONBLOCK` (a FIFO never blocks),
//!   judged again with `fstat` (a regular file, ours, owner-only, at most
//!   [`MAX_RECORD_BYTES`]; nothing larger is read), and its values are validated;
//! - the state is tamper-evident: the manifest says the directory was initialised, so a missing
//!   `sessions/` or `wakes/` is refused; a record's file name is the digest of its own key, so
//!   a record copied over another's file is refused; each session record carries the number
//!   of wake keys it journaled (a high-water mark), so a journal that lost records is refused.
//!
//! Every refusal names the file.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, Stat};
use rustix::io::Errno;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::contract::command::{MAX_IDEMPOTENCY_KEY_UNITS, MAX_SESSION_ID_UNITS, SESSION_MODES};
use crate::contract::descriptor::MAX_SAFE_INTEGER;
use crate::contract::text::units_in;
use crate::contract::types::protocol_v2 as v2;
use crate::contract::DaemonCode;

/// Largest record file the store reads; a larger one is refused unread.
pub const MAX_RECORD_BYTES: u64 = 16 * 1024 * 1024;
/// The manifest's file name, in the state directory.
pub const MANIFEST: &str = "manifest.json";
/// The owner lock's file name, in the state directory: a daemon holds an exclusive `flock` on
/// it for its whole life (SPEC PC-6, DECISION on one owner per state directory).
pub const LOCK: &str = "daemon.lock";
/// How long [`Store::open_exclusive`] waits for a holder that is going away (a restart script
/// that has just sent `kill -9` to the previous daemon) before it reports the directory in use.
pub const LOCK_GRACE: std::time::Duration = std::time::Duration::from_secs(1);
const MANIFEST_FORMAT: &str = "pi-conform-daemon-state";
const MANIFEST_VERSION: u64 = 1;
/// The session catalog's directory.
pub const SESSIONS: &str = "sessions";
/// The wake journal's directory.
pub const WAKES: &str = "wakes";
/// A session record's `state`.
pub const SESSION_STATES: [&str; 3] = ["active", "dormant", "closed"];
/// A wake record's `state`.
pub const WAKE_STATES: [&str; 6] = ["queued", "accepted", "completed", "failed", "indeterminate", "reconciled"];

/// Why the state could not be used.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// I/O outside any one file.
    #[error("state directory: {0}")]
    Io(#[from] std::io::Error),
    /// A directory that is not owner-only, a symlink, or not ours.
    #[error("state directory {0} must be a real directory owned by us with no group/other bits")]
    Insecure(PathBuf),
    /// Another process (a running daemon, or `daemon-state --reconcile`) owns the state
    /// directory: it holds the exclusive lock on its [`LOCK`] file.
    #[error(
        "state directory {} is in use by another daemon{}: one daemon per state directory (stop it first, or give this one another --state-dir)",
        dir.display(),
        holder.map(|p| format!(" (process {p})")).unwrap_or_default()
    )]
    Locked {
        /// The state directory.
        dir: PathBuf,
        /// The holder's process id, as it wrote it in the lock file (when readable).
        holder: Option<u32>,
    },
    /// A file of the state that cannot be trusted or used: the daemon refuses to start on it.
    #[error("state file {path}: {why}")]
    Refused {
        /// The file.
        path: PathBuf,
        /// Why.
        why: String,
    },
}

fn refused(path: impl Into<PathBuf>, why: impl Into<String>) -> StoreError {
    StoreError::Refused { path: path.into(), why: why.into() }
}

/// A session's catalog record: everything durable about it, nothing secret.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SessionRecord {
    /// Session id.
    pub session_id: String,
    /// Current generation.
    pub generation: u64,
    /// The envelope version of its successful open (`2.0`, `1.0`, …).
    pub open_version: String,
    /// The session cwd (the adapter's implicit root).
    pub cwd: String,
    /// `session.mode` of the open (`memory` sessions are never persisted).
    pub mode: String,
    /// The retained nonsecret tool policy summary, or null for `tools:"none"`.
    pub policy: Option<Value>,
    /// `active`, `dormant` or `closed`.
    pub state: String,
    /// The recovery condition after a restart (SPEC §6), if any.
    pub recovery: Option<Value>,
    /// How many wake keys this session has journaled, over all its generations (the journal's
    /// high-water mark: `wakes/` must hold at least this many of its records).
    #[serde(default)]
    pub wakes: u64,
}

/// A wake's journal record (SPEC §2.5).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WakeRecord {
    /// Session id.
    pub session_id: String,
    /// Generation.
    pub generation: u64,
    /// The wake's idempotency key.
    pub idempotency_key: String,
    /// SHA-256 of the canonical payload (hex).
    pub fingerprint: String,
    /// `queued`, `accepted`, `completed`, `failed`, `indeterminate` or `reconciled`.
    pub state: String,
    /// The turn result (completed).
    pub result: Option<Value>,
    /// The error body (failed).
    pub error: Option<Value>,
}

/// The recovery condition of a quarantined generation (SPEC §6); the only one a record holds.
pub fn quarantine_condition() -> Value {
    let code = DaemonCode::ToolAdapterReprovisionRequired;
    super::record::data(&v2::SessionRecovery {
        code: code.as_str().into(),
        retryable: code.default_retryable(),
        state: v2::SessionRecoveryState::ReprovisionRequired,
    })
}

fn is_version(v: &str) -> bool {
    let Some((major, minor)) = v.split_once('.') else { return false };
    matches!(major, "1" | "2") && !minor.is_empty() && minor.len() <= 9 && minor.bytes().all(|c| c.is_ascii_digit())
}

impl SessionRecord {
    /// Why the values are not ones the daemon writes, if they are not.
    pub fn invalid(&self) -> Option<String> {
        if !units_in(&self.session_id, MAX_SESSION_ID_UNITS) {
            return Some(format!("sessionId is not a string of 1-{MAX_SESSION_ID_UNITS} units"));
        }
        if self.generation > MAX_SAFE_INTEGER {
            return Some(format!("generation {} is over 2^53-1", self.generation));
        }
        if !is_version(&self.open_version) {
            return Some(format!("openVersion {:?} is not 1.x or 2.x", self.open_version));
        }
        if !self.cwd.starts_with('/') {
            return Some("cwd is not an absolute path".into());
        }
        if self.mode == "memory" || !SESSION_MODES.contains(&self.mode.as_str()) {
            return Some(format!("mode {:?} is not one of new, open, continue", self.mode));
        }
        if self.policy.as_ref().is_some_and(|p| !p.is_object()) {
            return Some("policy is neither null nor an object".into());
        }
        if !SESSION_STATES.contains(&self.state.as_str()) {
            return Some(format!("state {:?} is not one of {}", self.state, SESSION_STATES.join(", ")));
        }
        if self.recovery.as_ref().is_some_and(|r| *r != quarantine_condition()) {
            return Some("recovery is neither null nor the reprovision_required condition".into());
        }
        if self.wakes > MAX_SAFE_INTEGER {
            return Some(format!("wakes {} is over 2^53-1", self.wakes));
        }
        None
    }

    /// The record's file name.
    pub fn file_name(&self) -> String {
        session_file(&self.session_id)
    }
}

impl WakeRecord {
    /// Why the values are not ones the daemon writes, if they are not.
    pub fn invalid(&self) -> Option<String> {
        if !units_in(&self.session_id, MAX_SESSION_ID_UNITS) {
            return Some(format!("sessionId is not a string of 1-{MAX_SESSION_ID_UNITS} units"));
        }
        if self.generation > MAX_SAFE_INTEGER {
            return Some(format!("generation {} is over 2^53-1", self.generation));
        }
        if !units_in(&self.idempotency_key, MAX_IDEMPOTENCY_KEY_UNITS) {
            return Some(format!("idempotencyKey is not a string of 1-{MAX_IDEMPOTENCY_KEY_UNITS} units"));
        }
        if self.fingerprint.len() != 64 || !self.fingerprint.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')) {
            return Some("fingerprint is not 64 lowercase hex digits".into());
        }
        if !WAKE_STATES.contains(&self.state.as_str()) {
            return Some(format!("state {:?} is not one of {}", self.state, WAKE_STATES.join(", ")));
        }
        let error_ok = self.error.as_ref().is_some_and(|e| e.get("code").is_some_and(Value::is_string));
        match self.state.as_str() {
            "completed" if self.result.is_none() || self.error.is_some() => {
                Some("a completed wake must hold a result and no error".into())
            }
            "failed" if self.result.is_some() || !error_ok => {
                Some("a failed wake must hold an error body with a code and no result".into())
            }
            "queued" | "accepted" | "indeterminate" | "reconciled" if self.result.is_some() || self.error.is_some() => {
                Some(format!("a {} wake holds neither result nor error", self.state))
            }
            _ => None,
        }
    }

    /// The record's file name.
    pub fn file_name(&self) -> String {
        wake_file(&self.session_id, self.generation, &self.idempotency_key)
    }
}

fn key_name(parts: &[&str]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0]);
    }
    hex::encode(h.finalize())
}

fn session_file(session_id: &str) -> String {
    format!("{}.json", key_name(&[session_id]))
}

fn wake_file(session_id: &str, generation: u64, key: &str) -> String {
    format!("{}.json", key_name(&[session_id, &generation.to_string(), key]))
}

/// A record file name: 64 lowercase hex digits and `.json`.
fn is_record_name(n: &str) -> bool {
    n.strip_suffix(".json").is_some_and(|h| h.len() == 64 && h.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')))
}

/// A temporary file a crashed write may leave behind (ignored).
fn is_temp_name(n: &str) -> bool {
    n.starts_with('.') && n.ends_with(".tmp")
}

/// Everything the state holds, checked (see [`Store::load`]).
#[derive(Debug, Default)]
pub struct Loaded {
    /// Session records, by file name.
    pub sessions: Vec<SessionRecord>,
    /// Wake records, by file name.
    pub wakes: Vec<WakeRecord>,
}

#[derive(Debug)]
struct Dirs {
    path: PathBuf,
    sessions: OwnedFd,
    wakes: OwnedFd,
    /// The owner lock, held (an exclusive `flock`) as long as this descriptor is open; `None`
    /// for a store opened without it ([`Store::open`]).
    _lock: Option<OwnedFd>,
}

impl Dirs {
    fn sub(&self, s: Sub) -> (BorrowedFd<'_>, PathBuf) {
        let fd = match s {
            Sub::Sessions => self.sessions.as_fd(),
            Sub::Wakes => self.wakes.as_fd(),
        };
        (fd, self.path.join(s.name()))
    }
}

/// The store: the state directory's subdirectories, held open, and (once a write is queued)
/// its writer thread.
#[derive(Debug, Clone)]
pub struct Store {
    dirs: Arc<Dirs>,
    writer: Arc<std::sync::OnceLock<std::sync::mpsc::Sender<Job>>>,
}

/// One queued write: the file's new bytes, or its removal.
#[derive(Debug)]
struct Job {
    sub: Sub,
    name: String,
    bytes: Option<Vec<u8>>,
    /// Taken when the write is answered early (a record committed in a slot, see [`Slots`]).
    done: Option<tokio::sync::oneshot::Sender<WriteOutcome>>,
}

/// A write queued on the store's writer thread (see [`Store::queue_session`]); await
/// [`Pending::durable`] before acting on it.
#[derive(Debug)]
pub struct Pending {
    path: PathBuf,
    rx: tokio::sync::oneshot::Receiver<WriteOutcome>,
}

impl Pending {
    /// Wait until the write is durable (its file and directory synced), or failed.
    pub async fn durable(self) -> Result<(), StoreError> {
        match self.rx.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err((path, why))) => Err(refused(path, why)),
            Err(_) => Err(refused(self.path, "cannot be written: the store's writer stopped")),
        }
    }
}

/// A write's outcome as the writer reports it: the file and why, on failure.
type WriteOutcome = Result<(), (PathBuf, String)>;

/// Most writes the writer commits together.
const MAX_BATCH: usize = 256;

/// The writer thread: takes every queued write, commits them as one group — the newest
/// content of each file (a file written twice in one group is written once), each file's data
/// synced before its rename, then each touched directory synced once — and only then answers
/// every write of the group. Writes are applied in queue order, so a later write of a file
/// always wins.
///
/// A new session record (its file does not exist yet) that fits in a slot is the exception
/// (see [`Slots`]): it is written into a slot whose name and size are already durable, and
/// answered as soon as that slot's data is synced — one data flush, no directory commit. The
/// slot is renamed to the record's own name later, before any other write is applied (at the
/// start of the next group, or when the writer is idle), so a later write of that record
/// always finds it under its own name.
fn writer_loop(dirs: Arc<Dirs>, rx: std::sync::mpsc::Receiver<Job>) {
    let mut spares = Spares::default();
    loop {
        // Idle: settle committed slots, prepare spare files (off every write's path); then
        // wait for a write.
        // A pool at or above its low-water mark is topped up only once no write has come for
        // IDLE_GRACE: a burst of writes then never waits behind a top-up's syncs.
        let mut settled = false;
        let first = loop {
            match rx.try_recv() {
                Ok(j) => break j,
                Err(std::sync::mpsc::TryRecvError::Disconnected) => return spares.stop(&dirs),
                Err(std::sync::mpsc::TryRecvError::Empty) => {
                    if !settled && !spares.low() {
                        match rx.recv_timeout(IDLE_GRACE) {
                            Ok(j) => break j,
                            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return spares.stop(&dirs),
                            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => settled = true,
                        }
                        continue;
                    }
                    if !spares.idle_work(&dirs) {
                        match rx.recv() {
                            Ok(j) => break j,
                            Err(_) => return spares.stop(&dirs),
                        }
                    }
                }
            }
        };
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(j) => batch.push(j),
                Err(_) => break,
            }
        }
        let mut touched = Vec::new();
        // Slots committed earlier get their own names first: every write below then finds
        // the record where a write of it expects it.
        if spares.rename_committed(&dirs) {
            touched.push(Sub::Sessions);
        }
        // The last write of each file, in queue order.
        let mut last: std::collections::HashMap<(Sub, &str), usize> = std::collections::HashMap::new();
        for (i, j) in batch.iter().enumerate() {
            last.insert((j.sub, j.name.as_str()), i);
        }
        let mut order: Vec<usize> = last.values().copied().collect();
        order.sort_unstable();
        let mut outcome: std::collections::HashMap<(Sub, String), WriteOutcome> = std::collections::HashMap::new();
        let split = |e: StoreError, j: &Job| match e {
            StoreError::Refused { path, why } => (path, why),
            e => (dirs.path.join(j.sub.name()).join(&j.name), e.to_string()),
        };
        // Stage every new content first, then sync them all (the first sync commits the
        // filesystem journal for every staged file at once), then rename in queue order.
        let mut staged = Vec::new();
        let mut in_slots = Vec::new();
        for &i in &order {
            let j = &batch[i];
            let (fd, dir) = dirs.sub(j.sub);
            if let Some(b) = &j.bytes {
                // Only a prefix of the group goes to slots: answering a slot early then never
                // makes a write durable before one queued ahead of it.
                let slot = if staged.is_empty() && outcome.is_empty() {
                    spares.slot_for(&dirs, j.sub, &j.name, b)
                } else {
                    None
                };
                if let Some(slot) = slot {
                    match slot.write() {
                        Ok(()) => in_slots.push((i, slot)),
                        Err(e) => {
                            let e = spares.discard(&dirs, slot, &dir.join(&j.name), e);
                            outcome.insert((j.sub, j.name.clone()), Err(split(e, j)));
                        }
                    }
                    continue;
                }
                let one = match spares.take(j.sub, b.len()) {
                    Some(spare) => stage_in(spare, fd, &dir, &j.name, b),
                    None => stage(fd, &dir, &j.name, b),
                };
                match one {
                    Ok(s) => staged.push((i, Some(s))),
                    Err(e) => {
                        outcome.insert((j.sub, j.name.clone()), Err(split(e, j)));
                    }
                }
            } else {
                staged.push((i, None));
            }
        }
        // The records written into slots are durable once their data is: answer them now.
        for (i, slot) in in_slots {
            let j = &batch[i];
            let (sub, name) = (j.sub, j.name.clone());
            let (_, dir) = dirs.sub(sub);
            let r = match slot.sync() {
                Ok(()) => {
                    spares.committed(slot, name.clone());
                    Ok(())
                }
                Err(e) => Err(split(spares.discard(&dirs, slot, &dir.join(&name), e), j)),
            };
            for k in batch.iter_mut().filter(|k| k.sub == sub && k.name == name) {
                if let Some(done) = k.done.take() {
                    let _ = done.send(r.clone());
                }
            }
        }
        for (i, s) in staged.iter_mut() {
            if let Some(st) = s {
                if let Err(e) = st.sync() {
                    let j = &batch[*i];
                    outcome.insert((j.sub, j.name.clone()), Err(split(e, j)));
                    if let Some(st) = s.take() {
                        let _ = st.abandon(std::io::Error::other("sync failed"));
                    }
                }
            }
        }
        for (i, s) in staged {
            let j = &batch[i];
            let key = (j.sub, j.name.clone());
            if outcome.contains_key(&key) {
                continue;
            }
            let (fd, dir) = dirs.sub(j.sub);
            let r = match s {
                Some(st) => st.commit().map_err(|e| split(e, j)),
                None => match rustix::fs::unlinkat(fd, j.name.as_str(), AtFlags::empty()) {
                    Ok(()) | Err(Errno::NOENT) => Ok(()),
                    Err(e) => Err((dir.join(&j.name), format!("cannot be removed: {e}"))),
                },
            };
            if !touched.contains(&j.sub) {
                touched.push(j.sub);
            }
            outcome.insert(key, r);
        }
        for sub in touched {
            let (fd, dir) = dirs.sub(sub);
            if let Err(e) = rustix::fs::fsync(fd) {
                for ((s, _), r) in outcome.iter_mut() {
                    if *s == sub && r.is_ok() {
                        *r = Err((dir.clone(), format!("cannot be synced: {e}")));
                    }
                }
            }
        }
        for j in batch {
            if let Some(done) = j.done {
                let _ = done.send(outcome.get(&(j.sub, j.name)).cloned().unwrap_or(Ok(())));
            }
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Sub {
    Sessions,
    Wakes,
}

impl Sub {
    fn name(self) -> &'static str {
        match self {
            Sub::Sessions => SESSIONS,
            Sub::Wakes => WAKES,
        }
    }
}

fn uid() -> u32 {
    rustix::process::geteuid().as_raw()
}

fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

/// Judge an open directory: real, ours, owner-only.
fn check_dir(fd: BorrowedFd<'_>, path: &Path) -> Result<(), StoreError> {
    let st = rustix::fs::fstat(fd).map_err(|e| refused(path, format!("cannot be examined: {e}")))?;
    if FileType::from_raw_mode(st.st_mode) != FileType::Directory || st.st_uid != uid() || st.st_mode & 0o077 != 0 {
        return Err(StoreError::Insecure(path.to_path_buf()));
    }
    Ok(())
}

/// Open `name` in `parent` as a directory without following a symlink; `None` if absent.
fn open_subdir(parent: BorrowedFd<'_>, name: &str, path: &Path) -> Result<Option<OwnedFd>, StoreError> {
    match rustix::fs::openat(parent, name, dir_flags(), Mode::empty()) {
        Ok(fd) => {
            check_dir(fd.as_fd(), path)?;
            Ok(Some(fd))
        }
        Err(Errno::NOENT) => Ok(None),
        Err(Errno::LOOP | Errno::NOTDIR) => Err(StoreError::Insecure(path.to_path_buf())),
        Err(e) => Err(refused(path, format!("cannot be opened: {e}"))),
    }
}

fn file_kind(st: &Stat) -> &'static str {
    match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => "regular file",
        FileType::Directory => "directory",
        FileType::Symlink => "symlink",
        FileType::Fifo => "FIFO",
        FileType::Socket => "socket",
        FileType::CharacterDevice => "character device",
        FileType::BlockDevice => "block device",
        FileType::Unknown => "file of unknown type",
    }
}

/// Judge a record's metadata before any byte of it is read.
fn check_file(st: &Stat, path: &Path) -> Result<(), StoreError> {
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Err(refused(path, format!("is a {}, not a regular file", file_kind(st))));
    }
    if st.st_uid != uid() || st.st_mode & 0o077 != 0 {
        return Err(refused(path, "is not an owner-only file owned by us"));
    }
    let size = u64::try_from(st.st_size).unwrap_or(u64::MAX);
    if size > MAX_RECORD_BYTES {
        return Err(refused(
            path,
            format!("is {size} bytes, over the {MAX_RECORD_BYTES}-byte record limit (not read)"),
        ));
    }
    Ok(())
}

/// Read a record file of `dir` defensively; `None` when it does not exist.
fn read_file(dir: BorrowedFd<'_>, dir_path: &Path, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
    let path = dir_path.join(name);
    let st = match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(Errno::NOENT) => return Ok(None),
        Err(e) => return Err(refused(&path, format!("cannot be examined: {e}"))),
    };
    check_file(&st, &path)?;
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    let fd = match rustix::fs::openat(dir, name, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(None),
        Err(e) => return Err(refused(&path, format!("cannot be opened: {e}"))),
    };
    let st2 = rustix::fs::fstat(&fd).map_err(|e| refused(&path, format!("cannot be examined: {e}")))?;
    check_file(&st2, &path)?;
    if (st2.st_dev, st2.st_ino) != (st.st_dev, st.st_ino) {
        return Err(refused(&path, "was replaced while being opened"));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(st2.st_size).unwrap_or(0));
    File::from(fd)
        .take(MAX_RECORD_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| refused(&path, format!("cannot be read: {e}")))?;
    if bytes.len() as u64 > MAX_RECORD_BYTES {
        return Err(refused(&path, format!("grew over the {MAX_RECORD_BYTES}-byte record limit while being read")));
    }
    Ok(Some(bytes))
}

/// Write `name` in `dir` crash-safely: temp file, fsync, rename, fsync the directory.
fn write_file(dir: BorrowedFd<'_>, dir_path: &Path, name: &str, bytes: &[u8]) -> Result<(), StoreError> {
    write_unsynced(dir, dir_path, name, bytes)?;
    rustix::fs::fsync(dir).map_err(|e| refused(dir_path, format!("cannot be synced: {e}")))
}

/// [`write_file`] without the final fsync of the directory (a caller syncs it once for many).
fn write_unsynced(dir: BorrowedFd<'_>, dir_path: &Path, name: &str, bytes: &[u8]) -> Result<(), StoreError> {
    let staged = stage(dir, dir_path, name, bytes)?;
    staged.sync()?;
    staged.commit()
}

/// A record's new content in its temporary file, not yet synced or renamed.
struct Staged<'a> {
    dir: BorrowedFd<'a>,
    path: PathBuf,
    name: String,
    tmp: String,
    file: File,
}

/// Write `bytes` to a fresh temporary file beside `name` (no sync).
fn stage<'a>(dir: BorrowedFd<'a>, dir_path: &Path, name: &str, bytes: &[u8]) -> Result<Staged<'a>, StoreError> {
    let mut rnd = [0u8; 8];
    let _ = getrandom::fill(&mut rnd);
    let tmp = format!(".{name}.{}.tmp", hex::encode(rnd));
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let path = dir_path.join(name);
    let fd = rustix::fs::openat(dir, tmp.as_str(), flags, Mode::from_raw_mode(0o600))
        .map_err(|e| refused(&path, format!("cannot be written: {e}")))?;
    let staged = Staged { dir, path, name: name.to_string(), tmp, file: File::from(fd) };
    if let Err(e) = (&staged.file).write_all(bytes) {
        return Err(staged.abandon(e));
    }
    Ok(staged)
}

/// The size of a spare file: a record up to this size is written into one (padded with
/// spaces, which JSON allows after the value) instead of a new file.
const SPARE_BYTES: usize = 4096;
/// Spare files kept ready per directory.
const SPARES: usize = 64;
/// Below this many ready spares in a directory the writer tops the pool up as soon as it is
/// idle; at or above it, only once no write has come for [`IDLE_GRACE`].
const SPARES_LOW: usize = 8;
/// How long the writer waits for another write before topping up a pool that is not low.
const IDLE_GRACE: std::time::Duration = std::time::Duration::from_millis(5);
/// The first word of a slot's header (see [`Slots`]).
const SLOT_MAGIC: &str = "pi-conform-slot-1";

/// Spare files the writer prepares while idle, per directory, [`SPARE_BYTES`] spaces each,
/// their data and size synced. Writing a record into one changes no metadata a data sync
/// needs (same size, blocks already allocated and written), so its `fdatasync` is a data
/// flush rather than a filesystem journal commit.
///
/// In `wakes/` a spare has a temporary name: the record is renamed over its own file (one
/// directory commit), and a spare a crash leaves behind is ignored on load like any temporary
/// file. In `sessions/` a spare is a *slot* (see [`Slots`]).
#[derive(Default)]
struct Spares {
    slots: Slots,
    wakes: Vec<(String, File)>,
    /// A spare could not be made (a read-only or full directory): no new try before then.
    pause_until: Option<std::time::Instant>,
}

/// The slots of `sessions/`: spare files named `slot.<16 hex digits>` whose name was made
/// durable (the directory synced) before the slot is used. A new session record (no file of
/// its name exists) is written into a slot behind a header naming its length and SHA-256
/// ([`slot_content`]), and is durable once the slot's data is synced: a durable open costs one
/// data flush instead of a data flush and a directory commit. The slot is then renamed to the
/// record's own name (off the open's path) before any other write of the store is applied.
///
/// On load a slot is one of three things ([`read_slot`]): blank (a spare: removed), a whole
/// record (a write answered before the crash: renamed to its name by the directory's owner,
/// read as that record by anyone else), or neither — a write the crash interrupted before its
/// sync, so never answered: removed, with a warning. A slot whose record's own file also
/// exists is refused (no write the daemon makes leaves both).
#[derive(Default)]
struct Slots {
    /// Blank slots whose name is durable.
    ready: Vec<(String, File)>,
    /// Slots holding a committed record, not yet renamed: (slot name, record's file name).
    committed: Vec<(String, String)>,
}

/// A slot being written for one record.
struct SlotWrite {
    name: String,
    file: File,
    content: Vec<u8>,
}

impl SlotWrite {
    fn write(&self) -> std::io::Result<()> {
        std::os::unix::fs::FileExt::write_all_at(&self.file, &self.content, 0)
    }

    fn sync(&self) -> std::io::Result<()> {
        self.file.sync_data()
    }
}

/// A slot's bytes holding `record`: the header line (`pi-conform-slot-1 <sha256 hex> <len>`),
/// the record, spaces up to [`SPARE_BYTES`]; `None` when it does not fit.
fn slot_content(record: &[u8]) -> Option<Vec<u8>> {
    let header = format!("{SLOT_MAGIC} {} {}\n", hex::encode(Sha256::digest(record)), record.len());
    if header.len() + record.len() > SPARE_BYTES {
        return None;
    }
    let mut out = Vec::with_capacity(SPARE_BYTES);
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(record);
    out.resize(SPARE_BYTES, b' ');
    Some(out)
}

/// What a slot file holds (see [`Slots`]).
#[derive(Debug, PartialEq)]
enum SlotState {
    /// Only spaces (or nothing): a spare.
    Blank,
    /// A record whose header, length, digest and padding all check.
    Record(Vec<u8>),
    /// Anything else: a write interrupted before its sync.
    Torn,
}

fn read_slot(bytes: &[u8]) -> SlotState {
    if bytes.iter().all(|&b| b == b' ') {
        return SlotState::Blank;
    }
    let parsed = (|| {
        let nl = bytes.iter().take(128).position(|&b| b == b'\n')?;
        let header = std::str::from_utf8(&bytes[..nl]).ok()?;
        let mut words = header.split(' ');
        let (magic, digest, len) = (words.next()?, words.next()?, words.next()?);
        if magic != SLOT_MAGIC || words.next().is_some() {
            return None;
        }
        let len: usize = len.parse().ok()?;
        // A length past the file (or one that would overflow) is not a whole record.
        let end = nl.checked_add(1)?.checked_add(len)?;
        let record = bytes.get(nl + 1..end)?;
        let rest = bytes.get(end..)?;
        let whole = hex::encode(Sha256::digest(record)) == digest
            && rest.iter().all(|&b| b == b' ')
            && bytes.len() == SPARE_BYTES;
        whole.then(|| record.to_vec())
    })();
    parsed.map_or(SlotState::Torn, SlotState::Record)
}

/// A slot's file name: `slot.` and 16 lowercase hex digits.
fn is_slot_name(n: &str) -> bool {
    n.strip_prefix("slot.").is_some_and(|h| h.len() == 16 && h.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')))
}

impl Spares {
    /// A spare for a record of `len` bytes in `wakes/`, if one is ready and it fits (session
    /// records go to slots, see [`Spares::slot_for`]).
    fn take(&mut self, sub: Sub, len: usize) -> Option<(String, File)> {
        if len > SPARE_BYTES || sub != Sub::Wakes {
            return None;
        }
        self.wakes.pop()
    }

    /// A ready slot for `record`, a new session record of file `name` (none exists), if it fits.
    fn slot_for(&mut self, dirs: &Dirs, sub: Sub, name: &str, record: &[u8]) -> Option<SlotWrite> {
        if sub != Sub::Sessions || self.slots.ready.is_empty() {
            return None;
        }
        let content = slot_content(record)?;
        let (fd, _) = dirs.sub(sub);
        match rustix::fs::statat(fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Err(Errno::NOENT) => {}
            _ => return None,
        }
        let (name, file) = self.slots.ready.pop()?;
        Some(SlotWrite { name, file, content })
    }

    /// A slot whose record is durable: to be renamed to `target`.
    fn committed(&mut self, slot: SlotWrite, target: String) {
        self.slots.committed.push((slot.name, target));
    }

    /// A slot whose write or sync failed: blanked and removed (its content was never
    /// answered); the error to report for `path`.
    fn discard(&mut self, dirs: &Dirs, slot: SlotWrite, path: &Path, e: std::io::Error) -> StoreError {
        let (fd, _) = dirs.sub(Sub::Sessions);
        let _ = rustix::fs::unlinkat(fd, slot.name.as_str(), AtFlags::empty());
        let _ = rustix::fs::fsync(fd);
        refused(path, format!("cannot be written: {e}"))
    }

    /// Rename every committed slot to its record's name (no sync); true when any was renamed.
    /// A rename that fails leaves the slot, which the next load reads as the record.
    fn rename_committed(&mut self, dirs: &Dirs) -> bool {
        let (fd, dir) = dirs.sub(Sub::Sessions);
        let any = !self.slots.committed.is_empty();
        for (slot, target) in self.slots.committed.drain(..) {
            let noreplace = rustix::fs::RenameFlags::NOREPLACE;
            if let Err(e) = rustix::fs::renameat_with(fd, slot.as_str(), fd, target.as_str(), noreplace) {
                tracing::error!(error = %e, slot = %dir.join(&slot).display(), "cannot rename a committed slot to its record (the next start reads it from the slot)");
            }
        }
        any
    }

    /// A directory's pool is below [`SPARES_LOW`], or committed slots wait for their names.
    fn low(&self) -> bool {
        self.pause_until.is_none_or(|t| std::time::Instant::now() >= t)
            && (self.slots.ready.len() < SPARES_LOW || self.wakes.len() < SPARES_LOW)
    }

    /// Work for an idle writer: rename committed slots, make one spare where one is missing,
    /// then sync `sessions/` if either touched it. False when there was nothing to do (or
    /// spares cannot be made).
    fn idle_work(&mut self, dirs: &Dirs) -> bool {
        let renamed = self.rename_committed(dirs);
        let made = self.fill_one(dirs);
        if renamed || made == Some(Sub::Sessions) {
            let (fd, _) = dirs.sub(Sub::Sessions);
            if let Err(e) = rustix::fs::fsync(fd) {
                tracing::warn!(error = %e, "cannot sync the session catalog's directory");
                // A slot whose name may not be durable is not used.
                if made == Some(Sub::Sessions) {
                    if let Some((name, _)) = self.slots.ready.pop() {
                        let _ = rustix::fs::unlinkat(fd, name.as_str(), AtFlags::empty());
                    }
                }
            }
        }
        renamed || made.is_some()
    }

    /// The writer stops: rename committed slots, remove every spare, sync `sessions/`.
    fn stop(&mut self, dirs: &Dirs) {
        self.rename_committed(dirs);
        let (sfd, _) = dirs.sub(Sub::Sessions);
        for (name, _) in self.slots.ready.drain(..) {
            let _ = rustix::fs::unlinkat(sfd, name.as_str(), AtFlags::empty());
        }
        let _ = rustix::fs::fsync(sfd);
        let (wfd, _) = dirs.sub(Sub::Wakes);
        for (name, _) in self.wakes.drain(..) {
            let _ = rustix::fs::unlinkat(wfd, name.as_str(), AtFlags::empty());
        }
    }

    /// Make one spare where one is missing: which directory's, or `None` when none is missing
    /// (or they cannot be made). A slot is usable only once `sessions/` is synced (the caller).
    fn fill_one(&mut self, dirs: &Dirs) -> Option<Sub> {
        if self.pause_until.is_some_and(|t| std::time::Instant::now() < t) {
            return None;
        }
        let sub = if self.slots.ready.len() < SPARES {
            Sub::Sessions
        } else if self.wakes.len() < SPARES {
            Sub::Wakes
        } else {
            return None;
        };
        let (fd, _) = dirs.sub(sub);
        let mut rnd = [0u8; 8];
        let _ = getrandom::fill(&mut rnd);
        let name = match sub {
            Sub::Sessions => format!("slot.{}", hex::encode(rnd)),
            Sub::Wakes => format!(".spare.{}.tmp", hex::encode(rnd)),
        };
        let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let made = rustix::fs::openat(fd, name.as_str(), flags, Mode::from_raw_mode(0o600))
            .map_err(std::io::Error::from)
            .map(File::from)
            .and_then(|mut f| {
                f.write_all(&[b' '; SPARE_BYTES])?;
                f.sync_all()?;
                Ok(f)
            });
        match made {
            Ok(f) => match sub {
                Sub::Sessions => self.slots.ready.push((name, f)),
                Sub::Wakes => self.wakes.push((name, f)),
            },
            Err(_) => {
                let _ = rustix::fs::unlinkat(fd, name.as_str(), AtFlags::empty());
                self.pause_until = Some(std::time::Instant::now() + std::time::Duration::from_secs(10));
                return None;
            }
        }
        Some(sub)
    }
}

/// Write `bytes` into a spare file (see [`Spares`]) beside `name`, padded with spaces to the
/// spare's size (no sync).
fn stage_in<'a>(
    spare: (String, File),
    dir: BorrowedFd<'a>,
    dir_path: &Path,
    name: &str,
    bytes: &[u8],
) -> Result<Staged<'a>, StoreError> {
    let (tmp, file) = spare;
    let staged = Staged { dir, path: dir_path.join(name), name: name.to_string(), tmp, file };
    let mut padded = Vec::with_capacity(SPARE_BYTES);
    padded.extend_from_slice(bytes);
    padded.resize(SPARE_BYTES, b' ');
    if let Err(e) = std::os::unix::fs::FileExt::write_all_at(&staged.file, &padded, 0) {
        return Err(staged.abandon(e));
    }
    Ok(staged)
}

impl Staged<'_> {
    /// Sync the temporary file's data (and its size).
    fn sync(&self) -> Result<(), StoreError> {
        self.file.sync_data().map_err(|e| refused(&self.path, format!("cannot be written: {e}")))
    }

    /// Rename it over the record (after [`Staged::sync`]).
    fn commit(self) -> Result<(), StoreError> {
        match rustix::fs::renameat(self.dir, self.tmp.as_str(), self.dir, self.name.as_str()) {
            Ok(()) => Ok(()),
            Err(e) => Err(self.abandon(e.into())),
        }
    }

    /// Remove the temporary file; the error to report.
    fn abandon(self, e: std::io::Error) -> StoreError {
        let _ = rustix::fs::unlinkat(self.dir, self.tmp.as_str(), AtFlags::empty());
        refused(self.path, format!("cannot be written: {e}"))
    }
}

/// The record names of a directory, sorted; an unknown entry is refused, and so is a slot
/// (see [`Slots`]) outside `sessions/`.
fn list(dir: BorrowedFd<'_>, dir_path: &Path) -> Result<Vec<String>, StoreError> {
    let (names, slots) = list_with_slots(dir, dir_path)?;
    if let Some(slot) = slots.first() {
        return Err(refused(dir_path.join(slot), "is not a state record (a slot, which only sessions/ holds)"));
    }
    Ok(names)
}

/// The record names and the slot names (see [`Slots`]) of a directory, each sorted; an unknown
/// entry is refused.
fn list_with_slots(dir: BorrowedFd<'_>, dir_path: &Path) -> Result<(Vec<String>, Vec<String>), StoreError> {
    let mut names = Vec::new();
    let mut slots = Vec::new();
    let rd = rustix::fs::Dir::read_from(dir).map_err(|e| refused(dir_path, format!("cannot be listed: {e}")))?;
    for entry in rd {
        let entry = entry.map_err(|e| refused(dir_path, format!("cannot be listed: {e}")))?;
        let raw = entry.file_name().to_bytes();
        if raw == b"." || raw == b".." {
            continue;
        }
        let Ok(name) = std::str::from_utf8(raw) else {
            return Err(refused(dir_path.join(String::from_utf8_lossy(raw).as_ref()), "is not a state record"));
        };
        if is_temp_name(name) {
            continue;
        }
        if is_slot_name(name) {
            slots.push(name.to_string());
            continue;
        }
        if !is_record_name(name) {
            return Err(refused(dir_path.join(name), "is not a state record (unknown file in the state directory)"));
        }
        names.push(name.to_string());
    }
    names.sort();
    slots.sort();
    Ok((names, slots))
}

/// A session record's bytes, parsed and judged (see [`SessionRecord::invalid`]).
fn parse_session(bytes: &[u8], path: &Path) -> Result<SessionRecord, StoreError> {
    let r: SessionRecord =
        serde_json::from_slice(bytes).map_err(|e| refused(path, format!("is not a valid session record: {e}")))?;
    if let Some(why) = r.invalid() {
        return Err(refused(path, format!("holds an invalid value: {why}")));
    }
    Ok(r)
}

/// The committed session record a slot of `sessions/` holds, if any (see [`Slots`]).
fn slot_record(dir: BorrowedFd<'_>, dir_path: &Path, slot: &str) -> Result<Option<SessionRecord>, StoreError> {
    let Some(bytes) = read_file(dir, dir_path, slot)? else { return Ok(None) };
    match read_slot(&bytes) {
        SlotState::Record(b) => parse_session(&b, &dir_path.join(slot)).map(Some),
        SlotState::Blank | SlotState::Torn => Ok(None),
    }
}

fn both_refused(dir_path: &Path, slot: &str, own: &str) -> StoreError {
    refused(
        dir_path.join(slot),
        format!(
            "holds the record whose file is {}, which another slot holds too (the daemon never leaves both)",
            dir_path.join(own).display()
        ),
    )
}

/// Settle the slots of `sessions/` (its owner, on open; see [`Slots`]): a committed record is
/// renamed to its own name, a blank slot or a torn write (never answered) is removed; then the
/// directory is synced. A slot whose record's own file exists too is stale and removed: that
/// file was written after the slot (a slot is only used while no file of its record exists),
/// and the slot's rename was lost in the crash while the later write's was not (a filesystem
/// may persist two renames of one directory in either order until it is synced). Two slots
/// with one record are refused before anything is renamed.
fn settle_slots(dir: BorrowedFd<'_>, dir_path: &Path) -> Result<(), StoreError> {
    let (_, slots) = list_with_slots(dir, dir_path)?;
    if slots.is_empty() {
        return Ok(());
    }
    let mut owns: Vec<String> = Vec::new();
    for slot in &slots {
        if let Some(r) = slot_record(dir, dir_path, slot)? {
            let own = r.file_name();
            if owns.contains(&own) {
                return Err(both_refused(dir_path, slot, &own));
            }
            owns.push(own);
        }
    }
    for slot in &slots {
        let path = dir_path.join(slot);
        let Some(bytes) = read_file(dir, dir_path, slot)? else { continue };
        match read_slot(&bytes) {
            SlotState::Record(b) => {
                let own = parse_session(&b, &path)?.file_name();
                let noreplace = rustix::fs::RenameFlags::NOREPLACE;
                match rustix::fs::renameat_with(dir, slot.as_str(), dir, own.as_str(), noreplace) {
                    Ok(()) => {}
                    Err(Errno::EXIST) => {
                        tracing::warn!(slot = %path.display(), "removing a slot whose record was written again later");
                        if let Err(e) = rustix::fs::unlinkat(dir, slot.as_str(), AtFlags::empty()) {
                            return Err(refused(&path, format!("cannot be removed: {e}")));
                        }
                    }
                    Err(e) => return Err(refused(&path, format!("cannot be renamed to its record's name: {e}"))),
                }
            }
            state => {
                if state == SlotState::Torn {
                    tracing::warn!(slot = %path.display(), "removing a session record whose write a crash interrupted (it was never acknowledged)");
                }
                if let Err(e) = rustix::fs::unlinkat(dir, slot.as_str(), AtFlags::empty()) {
                    return Err(refused(&path, format!("cannot be removed: {e}")));
                }
            }
        }
    }
    rustix::fs::fsync(dir).map_err(|e| refused(dir_path, format!("cannot be synced: {e}")))
}

/// Take the owner lock of the state directory `root` (see [`Store::open_exclusive`]): open
/// (creating, 0600) its [`LOCK`] file without following a symlink, judge it like a record (a
/// regular owner-only file of ours; a FIFO never blocks), take an exclusive `flock`, and write
/// our process id into it for the error a second daemon reports.
fn lock_owner(root: BorrowedFd<'_>, dir: &Path) -> Result<OwnedFd, StoreError> {
    let path = dir.join(LOCK);
    let flags = OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    let fd = rustix::fs::openat(root, LOCK, flags, Mode::from_raw_mode(0o600))
        .map_err(|e| refused(&path, format!("cannot be opened: {e}")))?;
    let st = rustix::fs::fstat(&fd).map_err(|e| refused(&path, format!("cannot be examined: {e}")))?;
    check_file(&st, &path)?;
    let deadline = std::time::Instant::now() + LOCK_GRACE;
    loop {
        match rustix::fs::flock(&fd, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => break,
            Err(Errno::WOULDBLOCK) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(Errno::WOULDBLOCK) => {
                let mut held = [0u8; 16];
                let n = rustix::io::pread(&fd, &mut held, 0).unwrap_or(0);
                let holder = std::str::from_utf8(&held[..n]).ok().and_then(|t| t.trim().parse().ok());
                return Err(StoreError::Locked { dir: dir.to_path_buf(), holder });
            }
            Err(e) => return Err(refused(&path, format!("cannot be locked: {e}"))),
        }
    }
    let pid = format!("{}\n", std::process::id());
    rustix::fs::ftruncate(&fd, 0)
        .and_then(|()| rustix::io::pwrite(&fd, pid.as_bytes(), 0))
        .map_err(|e| refused(&path, format!("cannot be written: {e}")))?;
    Ok(fd)
}

/// Remove the temporary files of a directory (see [`is_temp_name`]).
fn remove_temps(dir: BorrowedFd<'_>, dir_path: &Path) -> Result<(), StoreError> {
    let rd = rustix::fs::Dir::read_from(dir).map_err(|e| refused(dir_path, format!("cannot be listed: {e}")))?;
    let mut temps = Vec::new();
    for entry in rd {
        let entry = entry.map_err(|e| refused(dir_path, format!("cannot be listed: {e}")))?;
        if let Ok(name) = std::str::from_utf8(entry.file_name().to_bytes()) {
            if is_temp_name(name) && entry.file_type() == FileType::RegularFile {
                temps.push(name.to_string());
            }
        }
    }
    for name in temps {
        let _ = rustix::fs::unlinkat(dir, name.as_str(), AtFlags::empty());
    }
    Ok(())
}

/// The state directory's manifest.
#[derive(Serialize)]
struct Manifest {
    format: String,
    version: u64,
}

fn manifest() -> Manifest {
    Manifest { format: MANIFEST_FORMAT.into(), version: MANIFEST_VERSION }
}

fn manifest_bytes() -> Vec<u8> {
    serde_json::to_vec(&manifest()).unwrap_or_default()
}

impl Store {
    /// Open (creating, mode 0700) the state directory; refuse one that is not owner-only, a
    /// subdirectory that is a symlink, a manifest that is missing from a directory that holds
    /// records, and a subdirectory that is missing from an initialised one.
    ///
    /// It takes no lock: a reader of the state ([`Store::load`]) may run beside the daemon. A
    /// process that writes it opens it with [`Store::open_exclusive`].
    pub fn open(dir: &Path) -> Result<Store, StoreError> {
        Self::open_as(dir, false)
    }

    /// [`Store::open`] as the directory's one owner: an exclusive `flock` on its [`LOCK`] file,
    /// taken before anything of the state is read and held as long as the store (any clone of
    /// it) lives. A directory another process owns is [`StoreError::Locked`], after waiting at
    /// most [`LOCK_GRACE`] for a holder that is exiting.
    pub fn open_exclusive(dir: &Path) -> Result<Store, StoreError> {
        Self::open_as(dir, true)
    }

    fn open_as(dir: &Path, exclusive: bool) -> Result<Store, StoreError> {
        let root = match rustix::fs::open(dir, dir_flags(), Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => {
                std::fs::create_dir_all(dir)?;
                std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
                rustix::fs::open(dir, dir_flags(), Mode::empty()).map_err(std::io::Error::from)?
            }
            Err(Errno::LOOP | Errno::NOTDIR) => return Err(StoreError::Insecure(dir.to_path_buf())),
            Err(e) => return Err(std::io::Error::from(e).into()),
        };
        check_dir(root.as_fd(), dir)?;
        let lock = if exclusive { Some(lock_owner(root.as_fd(), dir)?) } else { None };
        let manifest_path = dir.join(MANIFEST);
        match read_file(root.as_fd(), dir, MANIFEST)? {
            Some(bytes) => {
                let v: Value = serde_json::from_slice(&bytes)
                    .map_err(|_| refused(&manifest_path, "is not a state manifest (not JSON)"))?;
                if serde_json::to_value(manifest()).ok().as_ref() != Some(&v) {
                    return Err(refused(
                        &manifest_path,
                        format!("is not a version {MANIFEST_VERSION} {MANIFEST_FORMAT} manifest"),
                    ));
                }
            }
            None => {
                // Uninitialised only when neither subdirectory holds a record.
                for sub in [SESSIONS, WAKES] {
                    let p = dir.join(sub);
                    if let Some(fd) = open_subdir(root.as_fd(), sub, &p)? {
                        if let Some(first) = list_with_slots(fd.as_fd(), &p)?.0.first() {
                            return Err(refused(
                                &manifest_path,
                                format!(
                                    "is missing although {} holds records: this is not a state directory this daemon initialised (or its manifest was removed)",
                                    p.join(first).display()
                                ),
                            ));
                        }
                    }
                }
                for sub in [SESSIONS, WAKES] {
                    match rustix::fs::mkdirat(&root, sub, Mode::from_raw_mode(0o700)) {
                        Ok(()) | Err(Errno::EXIST) => {}
                        Err(e) => return Err(refused(dir.join(sub), format!("cannot be created: {e}"))),
                    }
                }
                rustix::fs::fsync(&root).map_err(std::io::Error::from)?;
                write_file(root.as_fd(), dir, MANIFEST, &manifest_bytes())?;
            }
        }
        let mut subs = Vec::new();
        for sub in [SESSIONS, WAKES] {
            let p = dir.join(sub);
            let fd = open_subdir(root.as_fd(), sub, &p)?.ok_or_else(|| {
                refused(&p, "is missing from an initialised state directory; refusing to start rather than forget sessions or re-execute completed wakes")
            })?;
            subs.push(fd);
        }
        if lock.is_some() {
            // The one owner: no write is in progress, so every temporary file is a leftover
            // (an interrupted write's, or a spare of an earlier run).
            for (fd, sub) in subs.iter().zip([SESSIONS, WAKES]) {
                remove_temps(fd.as_fd(), &dir.join(sub))?;
            }
            // Every slot settled: a committed record under its own name, nothing else left.
            settle_slots(subs[0].as_fd(), &dir.join(SESSIONS))?;
        }
        let wakes = subs.pop().unwrap_or_else(|| unreachable!());
        let sessions = subs.pop().unwrap_or_else(|| unreachable!());
        Ok(Store {
            dirs: Arc::new(Dirs { path: dir.to_path_buf(), sessions, wakes, _lock: lock }),
            writer: Arc::new(std::sync::OnceLock::new()),
        })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dirs.path
    }

    fn sub(&self, s: Sub) -> (BorrowedFd<'_>, PathBuf) {
        self.dirs.sub(s)
    }

    /// Queue a write on the writer thread (started on first use); never blocks on I/O.
    fn queue(&self, sub: Sub, name: String, bytes: Option<Vec<u8>>) -> Pending {
        let (done, rx) = tokio::sync::oneshot::channel();
        let path = self.dirs.path.join(sub.name()).join(&name);
        let tx = self.writer.get_or_init(|| {
            let (tx, rx) = std::sync::mpsc::channel();
            let dirs = self.dirs.clone();
            let spawned =
                std::thread::Builder::new().name("pi-daemon-store".into()).spawn(move || writer_loop(dirs, rx));
            if let Err(e) = spawned {
                tracing::error!(error = %e, "cannot start the store's writer thread");
            }
            tx
        });
        // A failed send drops `done`: `durable` then reports the stopped writer.
        let _ = tx.send(Job { sub, name, bytes, done: Some(done) });
        Pending { path, rx }
    }

    /// Queue a session record write on the writer thread (group commit with other writes).
    /// Queue it while holding whatever orders it (writes are applied in queue order), then
    /// await [`Pending::durable`] without holding anything.
    pub fn queue_session(&self, r: &SessionRecord) -> Pending {
        self.queue(Sub::Sessions, r.file_name(), Some(serde_json::to_vec(r).unwrap_or_default()))
    }

    /// Queue the removal of a session record (see [`Store::queue_session`]).
    pub fn queue_remove_session(&self, session_id: &str) -> Pending {
        self.queue(Sub::Sessions, session_file(session_id), None)
    }

    /// Queue a wake record write (see [`Store::queue_session`]).
    pub fn queue_wake(&self, w: &WakeRecord) -> Pending {
        self.queue(Sub::Wakes, w.file_name(), Some(serde_json::to_vec(w).unwrap_or_default()))
    }

    /// Read, parse, validate one record and check that `name` is its own file name.
    fn read_record<T: for<'de> Deserialize<'de>>(
        &self,
        s: Sub,
        name: &str,
        check: impl Fn(&T) -> (Option<String>, String),
    ) -> Result<Option<T>, StoreError> {
        let (fd, dir) = self.sub(s);
        let path = dir.join(name);
        let Some(mut bytes) = read_file(fd, &dir, name)? else { return Ok(None) };
        // A session record renamed from its slot keeps the slot's form (see [`Slots`]).
        if s == Sub::Sessions && bytes.starts_with(SLOT_MAGIC.as_bytes()) {
            match read_slot(&bytes) {
                SlotState::Record(b) => bytes = b,
                _ => return Err(refused(&path, "is not a valid session record (a slot that holds no whole record)")),
            }
        }
        let r: T = serde_json::from_slice(&bytes)
            .map_err(|e| refused(&path, format!("is not a valid {} record: {}", s.name().trim_end_matches('s'), e)))?;
        let (invalid, own_name) = check(&r);
        if let Some(why) = invalid {
            return Err(refused(&path, format!("holds an invalid value: {why}")));
        }
        if own_name != name {
            return Err(refused(
                &path,
                format!(
                    "holds the record whose file is {}, not this one (copied or renamed over another record)",
                    dir.join(own_name).display()
                ),
            ));
        }
        Ok(Some(r))
    }

    fn session_at(&self, name: &str) -> Result<Option<SessionRecord>, StoreError> {
        self.read_record(Sub::Sessions, name, |r: &SessionRecord| (r.invalid(), r.file_name()))
    }

    fn wake_at(&self, name: &str) -> Result<Option<WakeRecord>, StoreError> {
        self.read_record(Sub::Wakes, name, |r: &WakeRecord| (r.invalid(), r.file_name()))
    }

    /// Write a session's record (replacing the previous one).
    pub fn put_session(&self, r: &SessionRecord) -> Result<(), StoreError> {
        let (fd, dir) = self.sub(Sub::Sessions);
        write_file(fd, &dir, &r.file_name(), &serde_json::to_vec(r).unwrap_or_default())
    }

    /// Remove a session's record.
    pub fn remove_session(&self, session_id: &str) -> Result<(), StoreError> {
        let (fd, dir) = self.sub(Sub::Sessions);
        let name = session_file(session_id);
        match rustix::fs::unlinkat(fd, name.as_str(), AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => {}
            Err(e) => return Err(refused(dir.join(&name), format!("cannot be removed: {e}"))),
        }
        rustix::fs::fsync(fd).map_err(|e| refused(&dir, format!("cannot be synced: {e}")))
    }

    /// Every session record (checked one by one; see [`Store::load`] for the whole state),
    /// the ones still in a slot included (see [`Slots`]: a reader beside the daemon, or after a
    /// crash before the owner settled them).
    pub fn sessions(&self) -> Result<Vec<SessionRecord>, StoreError> {
        let (fd, dir) = self.sub(Sub::Sessions);
        let (names, slots) = list_with_slots(fd, &dir)?;
        let mut out = Vec::new();
        for n in &names {
            out.extend(self.session_at(n)?);
        }
        let mut from_slots: Vec<String> = Vec::new();
        for slot in &slots {
            let Some(r) = slot_record(fd, &dir, slot)? else { continue };
            let own = r.file_name();
            if names.contains(&own) {
                // Stale: a later write of the record (see `settle_slots`).
                continue;
            }
            if from_slots.contains(&own) {
                return Err(both_refused(&dir, slot, &own));
            }
            from_slots.push(own);
            out.push(r);
        }
        Ok(out)
    }

    /// Write a wake record (replacing the previous state of the same key).
    pub fn put_wake(&self, w: &WakeRecord) -> Result<(), StoreError> {
        let (fd, dir) = self.sub(Sub::Wakes);
        write_file(fd, &dir, &w.file_name(), &serde_json::to_vec(w).unwrap_or_default())
    }

    /// The wake record of a key, if any.
    pub fn wake(&self, session_id: &str, generation: u64, key: &str) -> Result<Option<WakeRecord>, StoreError> {
        self.wake_at(&wake_file(session_id, generation, key))
    }

    /// Every wake record.
    pub fn wakes(&self) -> Result<Vec<WakeRecord>, StoreError> {
        let (fd, dir) = self.sub(Sub::Wakes);
        let mut out = Vec::new();
        for n in list(fd, &dir)? {
            out.extend(self.wake_at(&n)?);
        }
        Ok(out)
    }

    /// The whole state, every record checked, and the journal checked against every session's
    /// high-water mark: a session record that counts more wake keys than `wakes/` holds for
    /// it is refused (records were lost, and a completed wake would run again).
    pub fn load(&self) -> Result<Loaded, StoreError> {
        let sessions = self.sessions()?;
        let wakes = self.wakes()?;
        let mut per_session: std::collections::HashMap<&str, u64> = std::collections::HashMap::new();
        for w in &wakes {
            *per_session.entry(w.session_id.as_str()).or_default() += 1;
        }
        let (_, dir) = self.sub(Sub::Sessions);
        for s in &sessions {
            let held = per_session.get(s.session_id.as_str()).copied().unwrap_or(0);
            if held < s.wakes {
                return Err(refused(
                    dir.join(s.file_name()),
                    format!(
                        "counts {} journaled wakes of its session but {} holds {held}: wake records are missing; refusing to start rather than run a completed wake again",
                        s.wakes,
                        self.dirs.path.join(WAKES).display()
                    ),
                ));
            }
        }
        Ok(Loaded { sessions, wakes })
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use serde_json::json;

    use super::*;

    fn session(id: &str) -> SessionRecord {
        SessionRecord {
            session_id: id.into(),
            generation: 1,
            open_version: "2.0".into(),
            cwd: "/w".into(),
            mode: "new".into(),
            policy: None,
            state: "active".into(),
            recovery: None,
            wakes: 0,
        }
    }

    fn wake(id: &str, key: &str) -> WakeRecord {
        WakeRecord {
            session_id: id.into(),
            generation: 2,
            idempotency_key: key.into(),
            fingerprint: "ab".repeat(32),
            state: "queued".into(),
            result: None,
            error: None,
        }
    }

    #[test]
    fn records_round_trip_and_replace() {
        let d = tempfile::tempdir().unwrap();
        let s = Store::open(&d.path().join("state")).unwrap();
        let mut r = session("a");
        s.put_session(&r).unwrap();
        r.generation = 2;
        s.put_session(&r).unwrap();
        assert_eq!(s.sessions().unwrap(), vec![r]);
        let w = wake("a", "k");
        s.put_wake(&w).unwrap();
        assert_eq!(s.wake("a", 2, "k").unwrap(), Some(w));
        assert_eq!(s.wake("a", 2, "other").unwrap(), None);
        s.remove_session("a").unwrap();
        assert!(s.sessions().unwrap().is_empty());
        // Reopening the same directory finds the manifest.
        Store::open(&d.path().join("state")).unwrap();
    }

    #[test]
    fn refuses_an_open_directory() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("open");
        std::fs::create_dir(&p).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(matches!(Store::open(&p), Err(StoreError::Insecure(_))));
    }

    #[test]
    fn invalid_values_are_named() {
        let mut r = session("a");
        r.state = "bogus".into();
        assert!(r.invalid().unwrap().contains("state \"bogus\""));
        let mut r = session("a");
        r.generation = u64::MAX;
        assert!(r.invalid().unwrap().contains("generation 18446744073709551615"));
        let mut w = wake("a", "k");
        w.state = "completed".into();
        assert!(w.invalid().unwrap().contains("result"));
        w.result = Some(json!({}));
        assert_eq!(w.invalid(), None);
        w.fingerprint = "AB".repeat(32);
        assert!(w.invalid().unwrap().contains("fingerprint"));
    }

    #[tokio::test]
    async fn the_writer_applies_queued_writes_in_order() {
        let d = tempfile::tempdir().unwrap();
        let s = Store::open(&d.path().join("state")).unwrap();
        let mut r = session("a");
        // Queued back to back: they may share a group; the last write of the file wins.
        let mut pending = Vec::new();
        for g in 1..=5 {
            r.generation = g;
            pending.push(s.queue_session(&r));
        }
        pending.push(s.queue_wake(&wake("a", "k")));
        for p in pending {
            p.durable().await.unwrap();
        }
        assert_eq!(s.sessions().unwrap(), vec![r.clone()]);
        assert_eq!(s.wakes().unwrap(), vec![wake("a", "k")]);
        let put = s.queue_session(&r);
        let gone = s.queue_remove_session("a");
        put.durable().await.unwrap();
        gone.durable().await.unwrap();
        assert!(s.sessions().unwrap().is_empty(), "a removal queued after a write wins");
        // No temporary file is left behind (only the writer's spares and blank slots, which it
        // removes when it stops).
        let sessions = d.path().join("state/sessions");
        let left: Vec<String> = std::fs::read_dir(&sessions)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| {
                let blank_slot =
                    is_slot_name(n) && read_slot(&std::fs::read(sessions.join(n)).unwrap()) == SlotState::Blank;
                !n.starts_with(".spare.") && !blank_slot
            })
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }

    #[tokio::test]
    async fn a_failed_group_write_reports_the_file() {
        let d = tempfile::tempdir().unwrap();
        let s = Store::open(&d.path().join("state")).unwrap();
        // A directory where the record's file would go: the rename fails.
        let r = session("a");
        std::fs::create_dir(d.path().join("state/sessions").join(r.file_name())).unwrap();
        let e = s.queue_session(&r).durable().await.unwrap_err().to_string();
        assert!(e.contains(&r.file_name()) && e.contains("cannot be written"), "{e}");
    }

    /// Plant a slot holding `bytes` in `sessions/` (what a crash before the rename leaves).
    fn plant_slot(state: &Path, name: &str, bytes: &[u8]) -> PathBuf {
        let p = state.join(SESSIONS).join(name);
        std::fs::write(&p, bytes).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        p
    }

    fn record_bytes(r: &SessionRecord) -> Vec<u8> {
        serde_json::to_vec(r).unwrap()
    }

    #[test]
    fn a_slot_is_blank_a_whole_record_or_torn() {
        let rec = record_bytes(&session("a"));
        let whole = slot_content(&rec).unwrap();
        assert_eq!(whole.len(), SPARE_BYTES);
        assert_eq!(read_slot(&whole), SlotState::Record(rec.clone()));
        assert_eq!(read_slot(&[b' '; SPARE_BYTES]), SlotState::Blank);
        assert_eq!(read_slot(b""), SlotState::Blank, "a spare a crash cut before its first byte");
        // One byte of the record changed, the record cut short, the padding or size wrong, or
        // another header: a write interrupted before its sync (or not ours).
        let nl = whole.iter().position(|&b| b == b'\n').unwrap();
        let mut flipped = whole.clone();
        flipped[nl + 3] ^= 1;
        assert_eq!(read_slot(&flipped), SlotState::Torn);
        let mut cut = whole.clone();
        cut[nl + rec.len()..].fill(b' ');
        assert_eq!(read_slot(&cut), SlotState::Torn);
        let mut trailing = whole.clone();
        trailing[SPARE_BYTES - 1] = b'x';
        assert_eq!(read_slot(&trailing), SlotState::Torn);
        assert_eq!(read_slot(&whole[..SPARE_BYTES - 1]), SlotState::Torn);
        let mut magic = whole.clone();
        magic[0] = b'P';
        assert_eq!(read_slot(&magic), SlotState::Torn);
        // A header whose length runs past the file, or past the largest index: torn, never a
        // panic.
        for len in [u64::MAX.to_string(), (SPARE_BYTES * 2).to_string()] {
            let mut huge = format!("{SLOT_MAGIC} {} {len}\n", "0".repeat(64)).into_bytes();
            huge.resize(SPARE_BYTES, b' ');
            assert_eq!(read_slot(&huge), SlotState::Torn, "{len}");
        }
        // A record too long for a slot is not put in one.
        assert_eq!(slot_content(&vec![b'x'; SPARE_BYTES]), None);
        assert!(is_slot_name("slot.0123456789abcdef"));
        assert!(
            !is_slot_name("slot.0123456789ABCDEF")
                && !is_slot_name("slot.0123")
                && !is_slot_name("xslot.0123456789abcdef")
        );
    }

    #[test]
    fn a_committed_slot_is_read_as_its_record_and_settled_by_the_owner() {
        let d = tempfile::tempdir().unwrap();
        let state = d.path().join("state");
        drop(Store::open(&state).unwrap());
        let r = session("a");
        let slot = plant_slot(&state, "slot.00000000000000aa", &slot_content(&record_bytes(&r)).unwrap());
        let blank = plant_slot(&state, "slot.00000000000000bb", &[b' '; SPARE_BYTES]);
        let mut torn = slot_content(&record_bytes(&session("b"))).unwrap();
        torn[200..].fill(b' ');
        let torn = plant_slot(&state, "slot.00000000000000cc", &torn);
        // A reader (no lock) sees the committed record, and neither the blank nor the torn one.
        assert_eq!(Store::open(&state).unwrap().sessions().unwrap(), vec![r.clone()]);
        assert!(slot.exists());
        // The owner renames it to its own name and removes the others.
        let s = Store::open_exclusive(&state).unwrap();
        assert!(!slot.exists() && !blank.exists() && !torn.exists());
        assert!(state.join(SESSIONS).join(r.file_name()).is_file());
        assert_eq!(s.sessions().unwrap(), vec![r]);
    }

    #[test]
    fn a_slot_beside_its_records_own_file_is_stale_and_two_slots_of_one_record_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let state = d.path().join("state");
        let s = Store::open(&state).unwrap();
        // The record written again after its slot (the slot's rename lost in a crash, the later
        // write's kept): the file under its name is the newer one and wins.
        let mut r = session("a");
        let slot = plant_slot(&state, "slot.00000000000000aa", &slot_content(&record_bytes(&r)).unwrap());
        r.generation = 2;
        s.put_session(&r).unwrap();
        drop(s);
        assert_eq!(Store::open(&state).unwrap().sessions().unwrap(), vec![r.clone()]);
        let s = Store::open_exclusive(&state).unwrap();
        assert!(!slot.exists(), "the stale slot is removed by the owner");
        assert_eq!(s.sessions().unwrap(), vec![r.clone()]);
        drop(s);
        // Two slots with one record: no write of the daemon leaves that; refused.
        std::fs::remove_file(state.join(SESSIONS).join(r.file_name())).unwrap();
        plant_slot(&state, "slot.00000000000000aa", &slot_content(&record_bytes(&r)).unwrap());
        plant_slot(&state, "slot.00000000000000bb", &slot_content(&record_bytes(&r)).unwrap());
        let own = state.join(SESSIONS).join(r.file_name()).display().to_string();
        let e = Store::open(&state).unwrap().sessions().unwrap_err().to_string();
        assert!(e.contains("slot.00000000000000bb") && e.contains(&own) && e.contains("another slot holds too"), "{e}");
        let e = Store::open_exclusive(&state).unwrap_err().to_string();
        assert!(e.contains("slot.00000000000000bb") && e.contains(&own) && e.contains("another slot holds too"), "{e}");
        assert!(state.join(SESSIONS).join("slot.00000000000000aa").exists(), "nothing is renamed before the refusal");
    }

    #[test]
    fn a_slot_with_an_invalid_record_or_outside_sessions_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let state = d.path().join("state");
        drop(Store::open(&state).unwrap());
        let mut r = session("a");
        r.state = "bogus".into();
        let slot = plant_slot(&state, "slot.00000000000000aa", &slot_content(&record_bytes(&r)).unwrap());
        let e = Store::open_exclusive(&state).unwrap_err().to_string();
        assert!(e.contains("slot.00000000000000aa") && e.contains("state \"bogus\""), "{e}");
        std::fs::remove_file(slot).unwrap();
        let p = state.join(WAKES).join("slot.00000000000000aa");
        std::fs::write(&p, [b' '; SPARE_BYTES]).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        let e = Store::open(&state).unwrap().wakes().unwrap_err().to_string();
        assert!(e.contains("slot.00000000000000aa") && e.contains("only sessions/ holds"), "{e}");
    }

    #[tokio::test]
    async fn a_new_session_record_is_written_into_a_slot_then_renamed() {
        let d = tempfile::tempdir().unwrap();
        let state = d.path().join("state");
        let s = Store::open_exclusive(&state).unwrap();
        // The first write starts the writer; it then prepares slots while idle.
        s.queue_session(&session("first")).durable().await.unwrap();
        let slots = |state: &Path| -> Vec<(String, SlotState)> {
            std::fs::read_dir(state.join(SESSIONS))
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .filter(|n| is_slot_name(n))
                .map(|n| {
                    let b = std::fs::read(state.join(SESSIONS).join(&n)).unwrap();
                    (n, read_slot(&b))
                })
                .collect()
        };
        let t = std::time::Instant::now();
        while slots(&state).len() < SPARES {
            assert!(t.elapsed() < std::time::Duration::from_secs(10), "no slots prepared: {:?}", slots(&state));
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        let before: Vec<String> = slots(&state).into_iter().map(|(n, _)| n).collect();
        let r = session("a");
        s.queue_session(&r).durable().await.unwrap();
        // Durable: either still in one of the prepared slots, whole, or already renamed.
        let own = state.join(SESSIONS).join(r.file_name());
        let in_slot =
            slots(&state).into_iter().any(|(n, st)| st == SlotState::Record(record_bytes(&r)) && before.contains(&n));
        assert!(in_slot || own.is_file(), "the record is neither in a slot nor under its name");
        // A later write of the record finds it under its own name (the slot renamed first).
        let mut r2 = r.clone();
        r2.generation = 2;
        s.queue_session(&r2).durable().await.unwrap();
        assert_eq!(serde_json::from_slice::<SessionRecord>(&std::fs::read(&own).unwrap()).unwrap(), r2);
        assert!(!slots(&state).iter().any(|(_, st)| matches!(st, SlotState::Record(_))), "{:?}", slots(&state));
        let mut got = s.sessions().unwrap();
        got.sort_by(|a, b| a.session_id.cmp(&b.session_id));
        assert_eq!(got, vec![r2, session("first")]);
    }

    #[test]
    fn high_water_mark_catches_lost_wakes() {
        let d = tempfile::tempdir().unwrap();
        let s = Store::open(&d.path().join("state")).unwrap();
        let mut r = session("a");
        r.wakes = 2;
        s.put_session(&r).unwrap();
        s.put_wake(&wake("a", "k1")).unwrap();
        let e = s.load().unwrap_err().to_string();
        assert!(e.contains(&r.file_name()) && e.contains("counts 2 journaled wakes") && e.contains("holds 1"), "{e}");
        s.put_wake(&wake("a", "k2")).unwrap();
        assert_eq!(s.load().unwrap().wakes.len(), 2);
    }
}
