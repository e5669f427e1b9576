//! `fs.list` (SPEC §5.3): direct children, regular files and directories only, sorted
//! bytewise by name. Memory stays bounded by `maxEntries`: only the smallest names are kept
//! while the directory is read.

use std::collections::BinaryHeap;
use std::os::fd::OwnedFd;

use rustix::fs::{AtFlags, Dir, FileType};
use serde_json::Value;

use super::budget::{typed, Entries};
use super::resolve::{self, err, Want};
use super::{cancelled, time, Cancel, Root, DEFAULT_MAX_ENTRIES, MAX_ITEMS};
use crate::contract::frame::is_entry_name;
use crate::contract::types::tool_adapter::{EntryType, FsListEntry};
use crate::contract::{AdapterCode, AdapterError, ToolPath};

/// How often (in directory entries) cancellation is checked.
const CANCEL_EVERY: usize = 1024;

/// A directory entry name that can be reported: UTF-8 and a valid entry name (no control
/// characters). Other names cannot be represented in a result and are omitted.
pub(super) fn reportable_name(raw: &[u8]) -> Option<&str> {
    std::str::from_utf8(raw).ok().filter(|s| is_entry_name(s))
}

/// The type of entry `name` in `dir`, from `d_type` or, when the filesystem does not
/// report it, from `fstatat(AT_SYMLINK_NOFOLLOW)`. An entry that vanished meanwhile is
/// [`FileType::Unknown`] (omitted); any other failure is an error, never a silent omission
/// (issue 15, F4).
pub(super) fn entry_type(dir: &OwnedFd, name: &str, d_type: FileType) -> Result<FileType, AdapterError> {
    match d_type {
        FileType::Unknown => match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(FileType::from_raw_mode(st.st_mode)),
            Err(rustix::io::Errno::NOENT) => Ok(FileType::Unknown),
            Err(e) => Err(resolve::map_errno(e)),
        },
        t => Ok(t),
    }
}

pub(super) fn list(
    root: &Root,
    path: &ToolPath,
    max_entries: Option<u64>,
    budget: usize,
    cancel: &Cancel,
) -> Result<Value, AdapterError> {
    let max = max_entries.unwrap_or(DEFAULT_MAX_ENTRIES);
    if !(1..=MAX_ITEMS).contains(&max) {
        return Err(err(AdapterCode::InvalidRequest, "maxEntries must be 1-10000"));
    }
    let max = max as usize;
    let (fd, _, _) = root.open_existing(path, Want::Dir)?;
    let mut dir = Dir::read_from(&fd).map_err(resolve::map_errno)?;
    // The max + 1 smallest names of regular files and directories (one more than needed
    // tells whether the listing is cut); a max-heap evicts the largest.
    let mut smallest: BinaryHeap<Vec<u8>> = BinaryHeap::with_capacity(max + 2);
    let mut seen = 0usize;
    while let Some(entry) = dir.read() {
        let entry = entry.map_err(resolve::map_errno)?;
        seen += 1;
        if seen % CANCEL_EVERY == 0 && cancel.is_cancelled() {
            return Err(cancelled());
        }
        let Some(name) = reportable_name(entry.file_name().to_bytes()) else { continue };
        if smallest.len() > max && smallest.peek().is_some_and(|top| top.as_slice() <= name.as_bytes()) {
            continue;
        }
        if !matches!(entry_type(&fd, name, entry.file_type())?, FileType::RegularFile | FileType::Directory) {
            continue;
        }
        smallest.push(name.as_bytes().to_vec());
        if smallest.len() > max + 1 {
            smallest.pop();
        }
    }
    if cancel.is_cancelled() {
        return Err(cancelled());
    }
    let mut out = Entries::entries(max, budget);
    for raw in smallest.into_sorted_vec() {
        let Some(name) = reportable_name(&raw) else { continue };
        // Judge each kept entry on its current metadata; one that vanished or changed
        // type since it was read is omitted, and any other failure fails the listing.
        let st = match rustix::fs::statat(&fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(rustix::io::Errno::NOENT) => continue,
            Err(e) => return Err(resolve::map_errno(e)),
        };
        let (type_, size) = match FileType::from_raw_mode(st.st_mode) {
            FileType::RegularFile => (EntryType::File, Some(resolve::byte_count(&st))),
            FileType::Directory => (EntryType::Directory, None),
            _ => continue,
        };
        let entry = FsListEntry {
            modified_at: time::modified_at(&st).map(typed).transpose()?,
            name: typed(name.to_string())?,
            size,
            type_,
        };
        if !out.push(entry) {
            break;
        }
    }
    out.finish()
}
