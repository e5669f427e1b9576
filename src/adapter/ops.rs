//! Run one validated job against a confined root: decode the payload (already checked by
//! `contract::frame::check_invoke_payload`) into the generated `Fs*Request` type of its
//! operation and call the filesystem operation.

use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use super::broken;
use super::faults::{self, Fault, Faults};
use super::fs::{Cancel, Root};
use super::job::Job;
use crate::contract::types::tool_adapter::{
    ByteCount, FsEditRequest, FsListRequest, FsReadRequest, FsSearchRequest, FsStatRequest, FsWriteRequest,
    RelativePath, ToolOperation,
};
use crate::contract::{validate_relative_path, AdapterCode, AdapterError, PathSide, ToolPath};

/// Execute `job` (blocking).
pub fn execute(root: &Root, job: &Job) -> Result<Value, AdapterError> {
    run(root, job, Faults::NONE)
}

/// [`execute`] of a job the caller gives up: the payload is decoded by moving its strings,
/// so a large `fs.write` content is not copied.
pub fn execute_owned(root: &Root, job: Job) -> Result<Value, AdapterError> {
    let Job { operation, payload, budget, cancel, .. } = job;
    let undecodable = undecodable(&payload);
    let request = Request::decode_owned(operation, payload).map_err(|_| undecodable)?;
    run_request(root, request, budget, &cancel, Faults::NONE)
}

/// [`execute`] with fault switches (test aid: production passes [`Faults::NONE`]). `dir` is
/// the grant's root path: only the deliberately broken fault code touches it, with plain
/// `std::fs`.
pub fn execute_with(root: &Root, dir: &Path, job: &Job, faults: Faults) -> Result<Value, AdapterError> {
    if faults.is_empty() {
        return execute(root, job);
    }
    let unlimited;
    let job = if faults.has(Fault::NoDefaultLimit) {
        unlimited = broken::without_default_limit(job);
        &unlimited
    } else {
        job
    };
    let path = job.payload.get("path").and_then(Value::as_str).unwrap_or_default();
    let op = job.operation;
    if op == ToolOperation::FsWrite && faults.has(Fault::AbortResultLate) {
        std::thread::sleep(faults::LATE_RESULT); // cancellation ignored meanwhile
    }
    if op == ToolOperation::FsWrite && faults.has(Fault::DigestCheckRacy) {
        if let Some(out) = broken::racy_digest_write(dir, job) {
            return out;
        }
    }
    if op == ToolOperation::FsWrite && faults.has(Fault::WriteInPlace) {
        if let Some(out) = broken::write_in_place(root, dir, job) {
            return out;
        }
    }
    if op == ToolOperation::FsRead
        && faults.has(Fault::CutCharacterOffsetPanics)
        && broken::offset_in_cut_character(dir, job)
    {
        // What an out-of-range slice does: the job dies and its request is never answered.
        panic!("fault cut-character-offset-panics: a slice past the bytes read");
    }
    let flag = |k: &str| job.payload.get(k).and_then(Value::as_bool);
    if op == ToolOperation::FsWrite && faults.has(Fault::CreateFalseRefusesAll) && flag("create") == Some(false) {
        return Err(AdapterError::new(AdapterCode::NotFound, "the file does not exist"));
    }
    if op == ToolOperation::FsWrite && faults.has(Fault::OverwriteFalseRefusesAll) && flag("overwrite") == Some(false) {
        return Err(AdapterError::new(AdapterCode::AlreadyExists, "the file exists"));
    }
    if op == ToolOperation::FsEdit
        && faults.has(Fault::EditRefusesDigest)
        && job.payload.get("expectedDigest").is_some()
    {
        return Err(AdapterError::new(AdapterCode::DigestMismatch, "the file changed"));
    }
    if op == ToolOperation::FsEdit && faults.has(Fault::EditMemoryLeaked) && broken::edit_memory_leaked(dir, job) {
        while !job.cancel.is_cancelled() {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        return Err(AdapterError::new(AdapterCode::IoError, "cancelled"));
    }
    if op == ToolOperation::FsEdit
        && faults.has(Fault::EditMissingDigestMismatch)
        && job.payload.get("expectedDigest").is_some()
        && std::fs::symlink_metadata(dir.join(path)).is_err()
    {
        return Err(AdapterError::new(AdapterCode::DigestMismatch, "the file changed"));
    }
    if op == ToolOperation::FsRead
        && faults.has(Fault::ReadWholeFileUtf8)
        && std::str::from_utf8(&broken::previous_version(dir, path)).is_err()
    {
        return Err(AdapterError::new(AdapterCode::NotUtf8, "the file is not valid UTF-8"));
    }
    if op == ToolOperation::FsSearch
        && faults.has(Fault::SearchNamedNulRefused)
        && broken::previous_version(dir, path).contains(&0)
    {
        return Err(AdapterError::new(AdapterCode::NotUtf8, "the file is not text"));
    }
    if op == ToolOperation::FsEdit && faults.has(Fault::EditLargeFileRefused) && broken::file_len(dir, job) > 1 << 20 {
        return Err(AdapterError::new(AdapterCode::InvalidRequest, "the file is too large to edit"));
    }
    if op == ToolOperation::FsEdit && faults.has(Fault::EditGrowthRefused) && broken::edit_outgrows_file(dir, job) {
        return Err(AdapterError::new(AdapterCode::InvalidRequest, "the file is too large to edit"));
    }
    // The version an fs.write replaces, for WriteDigestOfPrevious (read before the write).
    let previous = (op == ToolOperation::FsWrite && faults.has(Fault::WriteDigestOfPrevious))
        .then(|| broken::previous_version(dir, path));
    let mut out = match run(root, job, faults) {
        Err(e)
            if e.code == AdapterCode::InvalidPath && faults.has(Fault::DotdotAllowed) && broken::has_dotdot(path) =>
        {
            broken::plain_execute(dir, job).unwrap_or(Err(e))
        }
        Err(e)
            if e.code == AdapterCode::InvalidPath
                && faults.has(Fault::PathRulesWriteOnly)
                && op != ToolOperation::FsWrite =>
        {
            broken::plain_execute(dir, job).unwrap_or(Err(e))
        }
        o => o,
    };
    out = match out {
        Err(e) if e.code == AdapterCode::SymlinkRefused && faults.has(Fault::FollowSymlinks) => {
            broken::plain_execute(dir, job).unwrap_or(Err(e))
        }
        Err(e)
            if e.code == AdapterCode::ResponseTooLarge
                && op == ToolOperation::FsList
                && faults.has(Fault::NothingFitsEmptyList) =>
        {
            Ok(serde_json::json!({"entries": [], "truncated": true}))
        }
        Err(e)
            if e.code == AdapterCode::SymlinkRefused
                && faults.has(Fault::DanglingSymlinkFollowed)
                && broken::is_dangling_link(dir, path) =>
        {
            broken::plain_execute(dir, job).unwrap_or(Err(e))
        }
        Err(e) if e.code == AdapterCode::NotUtf8 && op == ToolOperation::FsRead && faults.has(Fault::ReadLossy) => {
            broken::lossy_read(dir, job).unwrap_or(Err(e))
        }
        Err(e)
            if e.code == AdapterCode::EditAmbiguous
                && op == ToolOperation::FsEdit
                && faults.has(Fault::EditFirstOccurrence) =>
        {
            broken::plain_edit(&dir.join(path), job, true)
        }
        Err(e)
            if matches!(e.code, AdapterCode::EditNotFound | AdapterCode::EditAmbiguous)
                && op == ToolOperation::FsEdit
                && faults.has(Fault::EditPartial) =>
        {
            // Apply the edits before the failing one and write them, then fail anyway.
            if let Some(n) = broken::failing_edit(&e).filter(|n| *n > 1) {
                let mut partial = job.clone();
                if let Some(edits) = partial.payload.get_mut("edits").and_then(Value::as_array_mut) {
                    edits.truncate(n - 1);
                }
                let _ = run(root, &partial, faults);
            }
            Err(e)
        }
        Err(e)
            if e.code == AdapterCode::CapabilityInContent
                && op == ToolOperation::FsRead
                && (faults.has(Fault::SecretWindowedRead) || faults.has(Fault::EscapedHandleInResults)) =>
        {
            broken::plain_execute(dir, job).unwrap_or(Err(e))
        }
        Err(e)
            if e.code == AdapterCode::CapabilityInContent
                && op == ToolOperation::FsEdit
                && faults.has(Fault::EditUnguarded) =>
        {
            broken::plain_edit(&dir.join(path), job, false)
        }
        Err(e)
            if e.code == AdapterCode::CapabilityInContent
                && op == ToolOperation::FsSearch
                && faults.has(Fault::SecretWindowedSearch) =>
        {
            broken::plain_search(dir, job).unwrap_or(Err(e))
        }
        Err(e)
            if e.code == AdapterCode::UnsupportedFileType
                && faults.has(Fault::SocketAsEmptyFile)
                && matches!(op, ToolOperation::FsStat | ToolOperation::FsRead)
                && broken::is_socket(dir, job) =>
        {
            Ok(if op == ToolOperation::FsStat {
                serde_json::json!({"type": "file", "size": 0})
            } else {
                serde_json::json!({"content": "", "bytesRead": 0, "eof": true})
            })
        }
        Err(e) if e.code == AdapterCode::NotFound && faults.has(Fault::MessageNamesPath) => {
            Err(AdapterError::new(e.code, format!("{}: {}", e.message, dir.join(path).display())))
        }
        Err(e) if e.code == AdapterCode::NotFound && faults.has(Fault::WrongNotFoundCode) => {
            Err(AdapterError::new(AdapterCode::IoError, e.message))
        }
        Err(e)
            if matches!(e.code, AdapterCode::EditNotFound | AdapterCode::EditAmbiguous | AdapterCode::NotUtf8)
                && op == ToolOperation::FsEdit
                && faults.has(Fault::ErrorMessageQuotesContent) =>
        {
            Err(broken::quoting_content(dir, path, e))
        }
        o => o,
    };
    let Ok(mut data) = out else { return out };
    if op == ToolOperation::FsRead
        && faults.has(Fault::ReadBudgetRefused)
        && broken::read_cut_by_budget(dir, job, &data)
    {
        return Err(AdapterError::new(AdapterCode::ResponseTooLarge, "the result does not fit the response budget"));
    }
    if op == ToolOperation::FsRead
        && faults.has(Fault::ReadControlCountedRaw)
        && broken::read_control_counted_raw(dir, job, &data)
    {
        return Err(AdapterError::new(AdapterCode::ResponseTooLarge, "the result does not fit the response budget"));
    }
    if op == ToolOperation::FsRead && faults.has(Fault::ReadAtEndRefused) && broken::offset_at_size(dir, job) {
        return Err(AdapterError::new(AdapterCode::InvalidOffset, "offset is not inside the file"));
    }
    if op == ToolOperation::FsRead
        && faults.has(Fault::ReadLookaheadShort)
        && broken::one_byte_at_four_byte_character(dir, job)
    {
        return Err(AdapterError::new(AdapterCode::NotUtf8, "the file is not valid UTF-8 in the requested window"));
    }
    match op {
        ToolOperation::FsList => {
            if faults.has(Fault::ListIncludesSymlinks) {
                data = broken::list_add(dir, job, data, |t| t.is_symlink());
            }
            if faults.has(Fault::ListIncludesSpecialFiles) {
                data = broken::list_add(dir, job, data, |t| !t.is_symlink() && !t.is_dir() && !t.is_file());
            }
            if faults.has(Fault::ListKeepsControlNames) {
                data = broken::list_keep_control_names(dir, job, data);
            }
            if faults.has(Fault::ListStopsAtMax) {
                data = broken::list_stops_at_max(dir, job, data);
            }
            if faults.has(Fault::ListUnsorted) {
                if let Some(a) = data["entries"].as_array_mut() {
                    a.reverse();
                }
            }
            if faults.has(Fault::ModifiedAtOffset) {
                data = broken::modified_at_offset(data);
            }
            if faults.has(Fault::ModifiedAtMonthFromZero) {
                data = broken::modified_at_month_from_zero(data);
            }
            if faults.has(Fault::BudgetCutNotTruncated) {
                data = broken::budget_cut_not_truncated(job, data, "entries", "maxEntries");
            }
            if faults.has(Fault::TruncatedAtLimit) {
                data = broken::truncated_at_limit(job, data, "entries", "maxEntries");
            }
            if faults.has(Fault::BudgetExactItemDropped) {
                data = broken::budget_exact_item_dropped(job, data, "entries")?;
            }
        }
        ToolOperation::FsStat if faults.has(Fault::ModifiedAtOffset) => data = broken::modified_at_offset(data),
        ToolOperation::FsStat if faults.has(Fault::ModifiedAtMonthFromZero) => {
            data = broken::modified_at_month_from_zero(data)
        }
        ToolOperation::FsSearch => {
            if faults.has(Fault::SearchOverlapping) {
                data = broken::search_overlapping(job, data);
            }
            if faults.has(Fault::SearchByteColumns) {
                data = broken::search_byte_columns(data);
            }
            if faults.has(Fault::SearchWindowClamped) {
                data = broken::search_window_clamped(dir, data);
            }
            if faults.has(Fault::SearchRegex) {
                data = broken::search_regex(dir, job, data);
            }
            if faults.has(Fault::SearchChunkSeams) {
                data = broken::search_chunk_seams(dir, job, data);
            }
            if faults.has(Fault::SearchLenientUtf8) {
                data = broken::search_lenient_utf8(dir, job, data);
            }
            if faults.has(Fault::SearchStray80Accepted) {
                data = broken::search_stray_80_accepted(dir, job, data);
            }
            if faults.has(Fault::SearchReachShort) {
                data = broken::search_reach_short(dir, job, data);
            }
            if faults.has(Fault::SearchKeptBytesMiscounted) {
                data = broken::search_kept_bytes_miscounted(dir, job, data);
            }
            if faults.has(Fault::SearchWindowCutCharacter) {
                data = broken::search_window_cut_character(dir, data);
            }
            if faults.has(Fault::SearchLaterFilesNoSpare) {
                data = broken::search_later_files_no_spare(dir, job, data);
            }
            if faults.has(Fault::SearchAlwaysTruncated) && broken::is_dir(dir, job) {
                data["truncated"] = true.into();
            }
            if faults.has(Fault::SearchPrefixAsSent) {
                data = broken::search_prefix_as_sent(path, data);
            }
            if faults.has(Fault::BudgetCutNotTruncated) {
                data = broken::budget_cut_not_truncated(job, data, "matches", "maxResults");
            }
            if faults.has(Fault::TruncatedAtLimit) {
                data = broken::truncated_at_limit(job, data, "matches", "maxResults");
            }
            if faults.has(Fault::BudgetExactItemDropped) {
                data = broken::budget_exact_item_dropped(job, data, "matches")?;
            }
        }
        ToolOperation::FsRead
            if faults.has(Fault::EmptyReadNotEof)
                && data["bytesRead"] == 0
                && job.payload.get("offset").and_then(Value::as_u64).unwrap_or(0) == 0 =>
        {
            data["eof"] = false.into();
        }
        ToolOperation::FsRead
            if faults.has(Fault::EofByShortWindow)
                && job.payload.get("maxBytes").is_some_and(|m| *m == data["bytesRead"]) =>
        {
            data["eof"] = false.into();
        }
        ToolOperation::FsWrite if faults.has(Fault::WriteResetsMode) && data["created"] == false => {
            broken::reset_mode(dir, job);
        }
        ToolOperation::FsEdit if faults.has(Fault::EditResetsMode) => broken::reset_mode(dir, job),
        _ => {}
    }
    if op == ToolOperation::FsWrite && faults.has(Fault::WriteBytesAsChars) {
        let content = job.payload.get("content").and_then(Value::as_str).unwrap_or_default();
        data["bytesWritten"] = content.chars().count().into();
    }
    if let Some(previous) = previous {
        data["digest"] = crate::contract::answer::content_digest(&previous).into();
    }
    if op == ToolOperation::FsEdit && faults.has(Fault::EditReplacementsOne) {
        data["replacements"] = 1.into();
    }
    if op == ToolOperation::FsEdit
        && faults.has(Fault::LargeEditReplacementsZero)
        && broken::file_len(dir, job) >= 1 << 20
    {
        data["replacements"] = 0.into();
    }
    if op == ToolOperation::FsSearch && faults.has(Fault::SearchPathsRelativeToSearched) {
        data = broken::search_paths_relative_to_searched(path, data);
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
    let Ok(Request::Read(r)) = Request::decode(job.operation, &job.payload) else {
        return Some(execute(root, job));
    };
    let Ok(path) = tool_path(&r.path) else { return Some(execute(root, job)) };
    root.read_small(&path, offset(r.offset), r.max_bytes.map(u64::from), job.budget, INLINE_SCAN_BYTES)
}

/// An invoke's payload decoded into the generated request type of its operation.
enum Request {
    List(FsListRequest),
    Stat(FsStatRequest),
    Read(FsReadRequest),
    Search(FsSearchRequest),
    Write(FsWriteRequest),
    Edit(FsEditRequest),
}

impl Request {
    /// Decode `job.payload` (already judged by `contract::frame::check_invoke_payload`, so
    /// this fails only for a payload a fault switch let through).
    fn decode(op: ToolOperation, p: &Value) -> Result<Request, serde_json::Error> {
        Ok(match op {
            ToolOperation::FsList => Request::List(FsListRequest::deserialize(p)?),
            ToolOperation::FsStat => Request::Stat(FsStatRequest::deserialize(p)?),
            ToolOperation::FsRead => Request::Read(FsReadRequest::deserialize(p)?),
            ToolOperation::FsSearch => Request::Search(FsSearchRequest::deserialize(p)?),
            ToolOperation::FsWrite => Request::Write(FsWriteRequest::deserialize(p)?),
            ToolOperation::FsEdit => Request::Edit(FsEditRequest::deserialize(p)?),
        })
    }

    /// [`Request::decode`], moving the payload's strings instead of copying them.
    fn decode_owned(op: ToolOperation, p: Value) -> Result<Request, serde_json::Error> {
        use serde_json::from_value;
        Ok(match op {
            ToolOperation::FsList => Request::List(from_value(p)?),
            ToolOperation::FsStat => Request::Stat(from_value(p)?),
            ToolOperation::FsRead => Request::Read(from_value(p)?),
            ToolOperation::FsSearch => Request::Search(from_value(p)?),
            ToolOperation::FsWrite => Request::Write(from_value(p)?),
            ToolOperation::FsEdit => Request::Edit(from_value(p)?),
        })
    }

    fn path(&self) -> &RelativePath {
        match self {
            Request::List(r) => &r.path,
            Request::Stat(r) => &r.path,
            Request::Read(r) => &r.path,
            Request::Search(r) => &r.path,
            Request::Write(r) => &r.path,
            Request::Edit(r) => &r.path,
        }
    }
}

/// The adapter-side path rule on a schema-valid path (it adds the byte and component limits).
fn tool_path(path: &RelativePath) -> Result<ToolPath, AdapterError> {
    validate_relative_path(path, PathSide::Adapter, "payload.path")
        .map_err(|e| AdapterError::new(AdapterCode::InvalidPath, e.message))
}

fn offset(o: Option<ByteCount>) -> Option<u64> {
    o.map(|o| u64::try_from(o.0).unwrap_or(0))
}

/// Why a payload did not decode: a path that breaks the path rule is `invalid_path` (what a
/// fault switch such as `dotdot-allowed` lets through), anything else `invalid_request`.
fn undecodable(payload: &Value) -> AdapterError {
    let bad = AdapterError::new(AdapterCode::InvalidRequest, "payload does not match the operation");
    match payload.get("path").and_then(Value::as_str) {
        Some(path) => match validate_relative_path(path, PathSide::Adapter, "payload.path") {
            Err(e) => AdapterError::new(AdapterCode::InvalidPath, e.message),
            Ok(_) => bad,
        },
        None => bad,
    }
}

fn run(root: &Root, job: &Job, faults: Faults) -> Result<Value, AdapterError> {
    let request = Request::decode(job.operation, &job.payload).map_err(|_| undecodable(&job.payload))?;
    run_request(root, request, job.budget, &job.cancel, faults)
}

fn run_request(
    root: &Root,
    request: Request,
    budget: usize,
    cancel: &Cancel,
    faults: Faults,
) -> Result<Value, AdapterError> {
    let path = tool_path(request.path())?;
    match request {
        Request::List(r) => root.list(&path, r.max_entries.map(u64::from), budget, cancel),
        Request::Stat(_) => root.stat(&path, budget, cancel),
        Request::Read(r) => root.read(&path, offset(r.offset), r.max_bytes.map(u64::from), budget, cancel),
        Request::Search(r) => root.search(&path, &r.query, r.max_results.map(u64::from), budget, cancel),
        Request::Write(r) => root.write(
            &path,
            &r.content,
            r.create,
            r.overwrite,
            r.expected_digest.as_deref().map(String::as_str).filter(|_| !faults.has(Fault::WriteIgnoresDigest)),
            budget,
            cancel,
        ),
        Request::Edit(r) => {
            let edits: Vec<(String, String)> =
                r.edits.into_iter().map(|e| (String::from(e.old_text), e.new_text)).collect();
            let digest =
                r.expected_digest.as_deref().map(String::as_str).filter(|_| !faults.has(Fault::EditIgnoresDigest));
            root.edit(&path, &edits, digest, budget, cancel)
        }
    }
}
