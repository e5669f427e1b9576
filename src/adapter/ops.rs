//! Run one validated job against a confined root: read the payload fields (already checked
//! by `contract::frame::check_invoke_payload`) and call the filesystem operation.

use std::path::Path;

use serde_json::Value;

use super::faults::{self, Fault, Faults};
use super::fs::Root;
use super::session::Job;
use crate::contract::types::tool_adapter::ToolOperation;
use crate::contract::{validate_relative_path, AdapterCode, AdapterError, PathSide};

/// Execute `job` (blocking).
pub fn execute(root: &Root, job: &Job) -> Result<Value, AdapterError> {
    run(root, job, Faults::NONE)
}

/// [`execute`] with fault switches (test aid: production passes [`Faults::NONE`]). `dir` is
/// the grant's root path: only the deliberately broken fault code touches it, with plain
/// `std::fs`.
pub fn execute_with(root: &Root, dir: &Path, job: &Job, faults: Faults) -> Result<Value, AdapterError> {
    if faults.is_empty() {
        return execute(root, job);
    }
    let path = job.payload.get("path").and_then(Value::as_str).unwrap_or_default();
    let op = job.operation;
    if op == ToolOperation::FsWrite && faults.has(Fault::AbortResultLate) {
        std::thread::sleep(faults::LATE_RESULT); // cancellation ignored meanwhile
    }
    if op == ToolOperation::FsWrite && faults.has(Fault::WriteInPlace) {
        if let Some(out) = faults::write_in_place(root, dir, job) {
            return out;
        }
    }
    let mut out = match run(root, job, faults) {
        Err(e)
            if e.code == AdapterCode::InvalidPath && faults.has(Fault::DotdotAllowed) && faults::has_dotdot(path) =>
        {
            faults::plain_execute(dir, job).unwrap_or(Err(e))
        }
        o => o,
    };
    out = match out {
        Err(e) if e.code == AdapterCode::SymlinkRefused && faults.has(Fault::FollowSymlinks) => {
            faults::plain_execute(dir, job).unwrap_or(Err(e))
        }
        Err(e) if e.code == AdapterCode::NotUtf8 && op == ToolOperation::FsRead && faults.has(Fault::ReadLossy) => {
            faults::lossy_read(dir, job).unwrap_or(Err(e))
        }
        Err(e)
            if e.code == AdapterCode::EditAmbiguous
                && op == ToolOperation::FsEdit
                && faults.has(Fault::EditFirstOccurrence) =>
        {
            faults::plain_edit(&dir.join(path), job, true)
        }
        Err(e)
            if matches!(e.code, AdapterCode::EditNotFound | AdapterCode::EditAmbiguous)
                && op == ToolOperation::FsEdit
                && faults.has(Fault::EditPartial) =>
        {
            // Apply the edits before the failing one and write them, then fail anyway.
            if let Some(n) = faults::failing_edit(&e).filter(|n| *n > 1) {
                let mut partial = job.clone();
                if let Some(edits) = partial.payload.get_mut("edits").and_then(Value::as_array_mut) {
                    edits.truncate(n - 1);
                }
                let _ = run(root, &partial, faults);
            }
            Err(e)
        }
        Err(e) if e.code == AdapterCode::NotFound && faults.has(Fault::WrongNotFoundCode) => {
            Err(AdapterError::new(AdapterCode::IoError, e.message))
        }
        o => o,
    };
    let Ok(mut data) = out else { return out };
    match op {
        ToolOperation::FsList => {
            if faults.has(Fault::ListIncludesSymlinks) {
                data = faults::list_add(dir, job, data, |t| t.is_symlink());
            }
            if faults.has(Fault::ListIncludesSpecialFiles) {
                data = faults::list_add(dir, job, data, |t| !t.is_symlink() && !t.is_dir() && !t.is_file());
            }
            if faults.has(Fault::ListUnsorted) {
                if let Some(a) = data["entries"].as_array_mut() {
                    a.reverse();
                }
            }
            if faults.has(Fault::ModifiedAtOffset) {
                data = faults::modified_at_offset(data);
            }
            if faults.has(Fault::BudgetCutNotTruncated) {
                data = faults::budget_cut_not_truncated(job, data, "entries", "maxEntries");
            }
        }
        ToolOperation::FsStat if faults.has(Fault::ModifiedAtOffset) => data = faults::modified_at_offset(data),
        ToolOperation::FsSearch => {
            if faults.has(Fault::SearchOverlapping) {
                data = faults::search_overlapping(job, data);
            }
            if faults.has(Fault::SearchByteColumns) {
                data = faults::search_byte_columns(data);
            }
            if faults.has(Fault::SearchRegex) {
                data = faults::search_regex(dir, job, data);
            }
            if faults.has(Fault::BudgetCutNotTruncated) {
                data = faults::budget_cut_not_truncated(job, data, "matches", "maxResults");
            }
        }
        ToolOperation::FsWrite if faults.has(Fault::WriteResetsMode) && data["created"] == false => {
            faults::reset_mode(dir, job);
        }
        _ => {}
    }
    Ok(data)
}

/// Largest file a read run on the connection task may scan for handles (see [`try_inline`]).
pub const INLINE_SCAN_BYTES: u64 = 256 * 1024;

/// Run a cheap job right away: `None` when it is a read whose file needs a content scan of
/// more than [`INLINE_SCAN_BYTES`] (the caller runs [`execute`] on a blocking thread instead).
pub fn try_inline(root: &Root, job: &Job) -> Option<Result<Value, AdapterError>> {
    if job.operation != ToolOperation::FsRead {
        return Some(execute(root, job));
    }
    let p = &job.payload;
    let path = match p
        .get("path")
        .and_then(Value::as_str)
        .map(|s| validate_relative_path(s, PathSide::Adapter, "payload.path"))
    {
        Some(Ok(path)) => path,
        _ => return Some(execute(root, job)),
    };
    let u = |k: &str| p.get(k).and_then(Value::as_u64);
    root.read_small(&path, u("offset"), u("maxBytes"), job.budget, INLINE_SCAN_BYTES)
}

fn run(root: &Root, job: &Job, faults: Faults) -> Result<Value, AdapterError> {
    let p = &job.payload;
    let bad = || AdapterError::new(AdapterCode::InvalidRequest, "payload does not match the operation");
    let path = p.get("path").and_then(Value::as_str).ok_or_else(bad)?;
    let path = validate_relative_path(path, PathSide::Adapter, "payload.path")
        .map_err(|e| AdapterError::new(AdapterCode::InvalidPath, e.message))?;
    let u = |k: &str| p.get(k).and_then(Value::as_u64);
    let b = |k: &str| p.get(k).and_then(Value::as_bool);
    let s = |k: &str| p.get(k).and_then(Value::as_str);
    let (budget, cancel) = (job.budget, &job.cancel);
    match job.operation {
        ToolOperation::FsList => root.list(&path, u("maxEntries"), budget, cancel),
        ToolOperation::FsStat => root.stat(&path, budget, cancel),
        ToolOperation::FsRead => root.read(&path, u("offset"), u("maxBytes"), budget, cancel),
        ToolOperation::FsSearch => root.search(&path, s("query").ok_or_else(bad)?, u("maxResults"), budget, cancel),
        ToolOperation::FsWrite => root.write(
            &path,
            s("content").ok_or_else(bad)?,
            b("create"),
            b("overwrite"),
            s("expectedDigest").filter(|_| !faults.has(Fault::WriteIgnoresDigest)),
            budget,
            cancel,
        ),
        ToolOperation::FsEdit => {
            let edits: Vec<(String, String)> = p
                .get("edits")
                .and_then(Value::as_array)
                .ok_or_else(bad)?
                .iter()
                .map(|e| Some((e.get("oldText")?.as_str()?.to_string(), e.get("newText")?.as_str()?.to_string())))
                .collect::<Option<_>>()
                .ok_or_else(bad)?;
            let digest = s("expectedDigest").filter(|_| !faults.has(Fault::EditIgnoresDigest));
            root.edit(&path, &edits, digest, budget, cancel)
        }
    }
}
