//! The broken code the fault switches run: deliberate, test-only breakages of the reference
//! adapter (see `super::faults` for the switches).
//!
//! The helpers below are broken on purpose — they read bind and invoke lines leniently,
//! resolve `..` and follow symlinks with plain `std::fs` against the root path, read lossily,
//! and so on. None of them runs unless its fault is switched on.
//!
//! They sit above `job.rs` and `fs/`, whose types they take, and below `session.rs` and
//! `ops.rs`, which call them; the switch set itself stays a leaf.

use std::path::Path;

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::faults::{Fault, Faults};
use super::fs::Root;
use super::job::Job;
use crate::contract::frame::{check_adapter_frame, Binding, Direction};
use crate::contract::text::{is_frame_id, utf16_len};
use crate::contract::types::tool_adapter::ToolOperation;
use crate::contract::{AdapterCode, AdapterError};
use crate::wire::decode_strict;

/// Chunks and the pause between them of an in-place write under [`Fault::WriteInPlace`].
const IN_PLACE_CHUNKS: usize = 16;
const IN_PLACE_PAUSE: std::time::Duration = std::time::Duration::from_millis(15);

// ------------------------------------------------------------------ bind and invoke lines

const IDENTITY_KEYS: [&str; 6] =
    ["protocolVersion", "adapterId", "adapterVersion", "hostInstanceId", "sessionId", "generation"];

/// What a faulty adapter knows of the grant a handle names: its operations and its limit
/// ceilings (as JSON, keys in canonical order).
pub(crate) type GrantOf<'a> = &'a dyn Fn(&str) -> Option<(Vec<ToolOperation>, Value)>;

/// The first line as a faulty adapter reads it under [`Fault::AcceptBindUnknownKeys`]: the
/// bind with its unknown keys dropped (and so on for the other bind faults below).
pub(crate) fn lenient_bind_line(line: &[u8], faults: Faults, grant_of: GrantOf<'_>) -> Option<Vec<u8>> {
    if !faults.has(Fault::AcceptBindUnknownKeys)
        && !faults.has(Fault::AcceptAnyHandle)
        && !faults.has(Fault::IgnoreBindProtocolVersion)
        && !faults.has(Fault::BindFitUnchecked)
        && !faults.has(Fault::BindLimitsUnchecked)
        && !faults.has(Fault::BindOperationsUnchecked)
    {
        return None;
    }
    let mut v = decode_strict(line).ok()?;
    let obj = v.as_object_mut()?;
    let grant = obj.get("capabilityHandle").and_then(Value::as_str).and_then(grant_of);
    if let (true, Some((ops, _))) = (faults.has(Fault::BindOperationsUnchecked), &grant) {
        obj.insert("operations".into(), lenient_operations(obj.get("operations"), ops));
    }
    if let (true, Some((_, ceilings))) = (faults.has(Fault::BindLimitsUnchecked), &grant) {
        obj.insert("limits".into(), lenient_limits(obj.get("limits"), ceilings));
    }
    if faults.has(Fault::AcceptBindUnknownKeys) {
        obj.retain(|k, _| {
            k == "kind"
                || IDENTITY_KEYS.contains(&k.as_str())
                || ["capabilityHandle", "operations", "limits"].contains(&k.as_str())
        });
    }
    if faults.has(Fault::AcceptAnyHandle) && !obj.contains_key("capabilityHandle") {
        // No handle at all binds too: a well-formed stand-in that matches no grant.
        obj.insert("capabilityHandle".into(), "A".repeat(43).into());
    }
    if faults.has(Fault::IgnoreBindProtocolVersion) {
        obj.insert("protocolVersion".into(), "1.0".into());
    }
    if faults.has(Fault::BindFitUnchecked) {
        // The normalized frames (PC-3.3); a limit that cannot hold its frame is raised.
        let bind_len = serde_json::to_vec(&*obj).ok()?.len() + 1;
        let mut bound = obj.clone();
        bound.remove("capabilityHandle");
        bound.insert("kind".into(), "bound".into());
        let bound_len = serde_json::to_vec(&bound).ok()?.len() + 1;
        if let Some(l) = obj.get_mut("limits").and_then(Value::as_object_mut) {
            for (k, len) in [("maxRequestBytes", bind_len), ("maxResponseBytes", bound_len)] {
                if l.get(k).and_then(Value::as_u64).is_some_and(|n| n < len as u64) {
                    // A few bytes to spare for the longer number itself.
                    l.insert(k.into(), (len as u64 + 16).into());
                }
            }
        }
    }
    serde_json::to_vec(&v).ok()
}

/// A bind's `operations` as [`Fault::BindOperationsUnchecked`] reads them: names matched
/// ignoring case, duplicates and non-strings dropped, a lone string a list of one, and an
/// empty list (or anything else) the grant's operations.
fn lenient_operations(asked: Option<&Value>, granted: &[ToolOperation]) -> Value {
    let items = match asked {
        Some(Value::Array(a)) => a.clone(),
        Some(s @ Value::String(_)) => vec![s.clone()],
        _ => Vec::new(),
    };
    let mut ops: Vec<String> = Vec::new();
    for item in items {
        let Some(name) = item.as_str().map(str::to_ascii_lowercase) else { continue };
        if !ops.contains(&name) {
            ops.push(name);
        }
    }
    if ops.is_empty() {
        ops = granted.iter().map(ToString::to_string).collect();
    }
    json!(ops)
}

/// A bind's `limits` as [`Fault::BindLimitsUnchecked`] reads them: only the seven known keys,
/// each read leniently (a string parsed, a fraction truncated, anything else or a missing key
/// the grant's ceiling) and clamped into its range.
fn lenient_limits(asked: Option<&Value>, ceilings: &Value) -> Value {
    let mut out = serde_json::Map::new();
    for (name, min, max) in crate::contract::descriptor::LIMITS {
        let ceiling = ceilings.get(name).and_then(Value::as_f64).unwrap_or(max as f64);
        let v = match asked.and_then(|l| l.get(name)) {
            Some(Value::Number(n)) => n.as_f64().unwrap_or(ceiling),
            Some(Value::String(s)) => s.trim().parse::<f64>().unwrap_or(ceiling),
            _ => ceiling,
        };
        out.insert(name.into(), json!((v.trunc().max(min as f64).min(max as f64)) as u64));
    }
    Value::Object(out)
}

/// A frame line as an adapter matching keys and names ignoring letter case reads it under
/// [`Fault::KeysCaseInsensitive`] (Go's `encoding/json` does so by default): every key of the
/// frame and of its payload (nested objects too) with its first letter lower-cased, and the
/// `kind` and `operation` values lower-cased. `None` when that changes nothing.
pub(crate) fn fold_key_case(line: &[u8]) -> Option<Vec<u8>> {
    fn lower_first(k: &str) -> String {
        let mut cs = k.chars();
        cs.next().map(|f| f.to_lowercase().chain(cs).collect()).unwrap_or_default()
    }
    fn fold_keys(v: Value) -> Value {
        match v {
            Value::Object(m) => Value::Object(m.into_iter().map(|(k, v)| (lower_first(&k), fold_keys(v))).collect()),
            Value::Array(a) => Value::Array(a.into_iter().map(fold_keys).collect()),
            v => v,
        }
    }
    let Value::Object(frame) = decode_strict(line).ok()? else { return None };
    let folded: serde_json::Map<String, Value> = frame
        .clone()
        .into_iter()
        .map(|(k, v)| {
            let k = lower_first(&k);
            let v = match (k.as_str(), v) {
                ("kind" | "operation", Value::String(s)) => Value::String(s.to_lowercase()),
                ("payload", v) => fold_keys(v),
                (_, v) => v,
            };
            (k, v)
        })
        .collect();
    (folded != frame).then(|| serde_json::to_vec(&Value::Object(folded)).unwrap_or_default())
}

/// The byte spans of the whole JSON values a line starts with, as a stream decoder (Go's
/// `json.Decoder`, Python's `raw_decode`) reads them under [`Fault::TrailingValuesRun`]:
/// `None` unless the line holds something after its first value (another value, or bytes
/// that are not one).
pub(crate) fn stream_values(line: &[u8]) -> Option<Vec<(usize, usize)>> {
    let mut values = serde_json::Deserializer::from_slice(line).into_iter::<serde::de::IgnoredAny>();
    let mut spans = Vec::new();
    let mut start = 0;
    while let Some(Ok(_)) = values.next() {
        let end = values.byte_offset();
        spans.push((start, end));
        start = end;
    }
    let rest_blank = line[start..].iter().all(|b| matches!(b, b' ' | b'\t' | b'\r' | b'\n'));
    (spans.len() > 1 || (spans.len() == 1 && !rest_blank)).then_some(spans)
}

/// The bytes of a connection as [`Fault::EmptyLineCloses`] watches them: whether an empty
/// line (nothing, or one CR, before an LF) has come, which such an adapter refuses as a line
/// that is not JSON instead of skipping it.
#[derive(Default)]
pub(crate) struct EmptyLines {
    len: usize,
    cr_only: bool,
}

impl EmptyLines {
    /// Whether `bytes`, received after everything seen so far, complete an empty line.
    pub(crate) fn seen_in(&mut self, bytes: &[u8]) -> bool {
        let mut seen = false;
        for &b in bytes {
            if b == b'\n' {
                seen |= self.len == 0 || (self.len == 1 && self.cr_only);
                self.len = 0;
            } else {
                self.cr_only = self.len == 0 && b == b'\r';
                self.len += 1;
            }
        }
        seen
    }
}

/// An invoke a faulty adapter accepts although the contract refused it.
pub(crate) struct LenientInvoke {
    /// Its `requestId` as sent.
    pub request_id: String,
    /// Its `idempotencyKey` as sent.
    pub key: String,
    /// Its operation.
    pub op: ToolOperation,
    /// The payload to execute (stripped or coerced by the faults).
    pub payload: Value,
}

fn payload_keys(op: ToolOperation) -> &'static [&'static str] {
    match op {
        ToolOperation::FsList => &["path", "maxEntries"],
        ToolOperation::FsStat => &["path"],
        ToolOperation::FsRead => &["path", "offset", "maxBytes"],
        ToolOperation::FsSearch => &["path", "query", "maxResults"],
        ToolOperation::FsWrite => &["path", "content", "create", "overwrite", "expectedDigest"],
        ToolOperation::FsEdit => &["path", "edits", "expectedDigest"],
    }
}

/// Whether a path has a `..` segment.
pub(crate) fn has_dotdot(path: &str) -> bool {
    path.split('/').any(|s| s == "..")
}

/// Re-judge an invoke line the contract refused with the rules the active faults break
/// switched off: each fault rewrites only what its own rule looks at, and the rewritten frame
/// must then pass every other rule (`check_adapter_frame`). `None`: refuse as usual.
pub(crate) fn lenient_invoke(line: &[u8], binding: &Binding, faults: Faults) -> Option<LenientInvoke> {
    let limit = binding.limits().max_request_bytes + i64::from(faults.has(Fault::LineLimitOnePast));
    if line.len() as i64 + 1 > limit && !faults.has(Fault::NoLineLimit) {
        return None;
    }
    let whole_only = faults.has(Fault::HandleWholeValueOnly);
    if binding.handle().occurs_in(line) && !faults.has(Fault::AcceptHandleInInvoke) && !whole_only {
        return None;
    }
    let v = if faults.has(Fault::DuplicateKeysLastWins) {
        serde_json::from_slice::<Value>(line).ok()?
    } else {
        decode_strict(line).ok()?
    };
    if whole_only && holds_whole_value(&v, binding.handle().expose()) {
        return None;
    }
    let obj = v.as_object()?;
    if obj.get("kind")?.as_str()? != "invoke" {
        return None;
    }
    let request_id = obj.get("requestId")?.as_str()?.to_string();
    let key = obj.get("idempotencyKey")?.as_str()?.to_string();
    let op: ToolOperation = obj.get("operation")?.as_str()?.parse().ok()?;
    let mut payload = obj.get("payload")?.clone();
    if faults.has(Fault::AcceptUnknownPayloadKeys) {
        if let Value::Object(p) = &mut payload {
            p.retain(|k, _| payload_keys(op).contains(&k.as_str()));
        }
    }
    if faults.has(Fault::NullAsAbsent) {
        strip_nulls(&mut payload);
    }
    if faults.has(Fault::MaxResultsAboveLimit) && op == ToolOperation::FsSearch {
        if let Some(m) = payload.get_mut("maxResults").filter(|m| m.as_u64().is_some_and(|n| n > 10_000)) {
            *m = 10_000.into();
        }
    }
    if faults.has(Fault::CoercePayloadTypes) {
        if let Value::Object(p) = &mut payload {
            for (k, v) in p.iter_mut() {
                let Some(s) = v.as_str() else { continue };
                match k.as_str() {
                    "maxEntries" | "offset" | "maxBytes" | "maxResults" => {
                        if let Ok(n) = s.trim().parse::<u64>() {
                            *v = n.into();
                        }
                    }
                    "create" | "overwrite" => {
                        if let Ok(b) = s.trim().parse::<bool>() {
                            *v = b.into();
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    if faults.has(Fault::QueryUnitsAsCharacters) {
        // Judged by its characters; run as the whole characters that fit 4096 units.
        if let Some(q) = payload.get_mut("query") {
            if let Some(s) = q.as_str().filter(|s| s.chars().count() <= 4096 && utf16_len(s) > 4096) {
                let mut units = 0;
                let cut: String = s
                    .chars()
                    .take_while(|c| {
                        units += c.len_utf16();
                        units <= 4096
                    })
                    .collect();
                *q = cut.into();
            }
        }
    }
    let mut check = obj.clone();
    check.insert("payload".into(), payload.clone());
    if faults.has(Fault::AcceptUnknownFrameKeys) {
        check.retain(|k, _| {
            k == "kind"
                || IDENTITY_KEYS.contains(&k.as_str())
                || ["requestId", "idempotencyKey", "operation", "payload"].contains(&k.as_str())
        });
    }
    if faults.has(Fault::IgnoreInvokeIdentity) {
        take_binding_identity(&mut check, binding);
    }
    if faults.has(Fault::AcceptBadIds) {
        if !(request_id.len() <= 128 && is_frame_id(&request_id)) {
            check.insert("requestId".into(), "fault-request".into());
        }
        if !(key.len() <= 512 && is_frame_id(&key)) {
            check.insert("idempotencyKey".into(), "fault-key".into());
        }
    }
    if faults.has(Fault::DotdotAllowed) {
        if let Some(p) = check.get_mut("payload").and_then(|p| p.get_mut("path")) {
            if let Some(s) = p.as_str().filter(|s| has_dotdot(s)) {
                let masked: Vec<&str> = s.split('/').map(|seg| if seg == ".." { "dotdot" } else { seg }).collect();
                *p = masked.join("/").into();
            }
        }
    }
    if faults.has(Fault::PathRulesWriteOnly) && op != ToolOperation::FsWrite {
        if let Some(p) = check.get_mut("payload").and_then(|p| p.get_mut("path")) {
            if p.is_string() {
                *p = "hello.txt".into();
            }
        }
    }
    let mut check = Value::Object(check);
    let escaped_only = faults.has(Fault::HandleScanRawOnly) && !binding.handle().occurs_in(line);
    if faults.has(Fault::AcceptHandleInInvoke) || escaped_only || whole_only {
        let text = serde_json::to_string(&check).ok()?;
        let h = binding.handle().expose();
        check = serde_json::from_str(&text.replace(h, &"h".repeat(h.len()))).ok()?;
    }
    let mut b = binding.clone();
    let read_only = !matches!(op, ToolOperation::FsWrite | ToolOperation::FsEdit);
    if (faults.has(Fault::AcceptUngrantedOperation) || (faults.has(Fault::UngrantedReadsAllowed) && read_only))
        && !b.operations().contains(&op)
    {
        b.operations_mut().push(op);
    }
    check_adapter_frame(&check, &b, Direction::ToAdapter).ok()?;
    Some(LenientInvoke { request_id, key, op, payload })
}

/// An abort a faulty adapter answers under [`Fault::AbortIdsUnchecked`] although its ids break
/// the frame-id pattern or length: its `(requestId, targetRequestId)` when the frame with both
/// ids replaced by good ones passes every other rule. `None`: refuse as usual.
/// Under [`Fault::IgnoreAbortIdentity`] (`identity`) the frame's identity is taken to be the
/// binding's.
pub(crate) fn lenient_abort(line: &[u8], binding: &Binding, ids: bool, identity: bool) -> Option<(String, String)> {
    let v = decode_strict(line).ok()?;
    let obj = v.as_object()?;
    if obj.get("kind")?.as_str()? != "abort" {
        return None;
    }
    let request_id = obj.get("requestId")?.as_str()?.to_string();
    let target = obj.get("targetRequestId")?.as_str()?.to_string();
    let mut check = obj.clone();
    if ids {
        check.insert("requestId".into(), "fault-abort".into());
        check.insert("targetRequestId".into(), "fault-target".into());
    }
    if identity {
        take_binding_identity(&mut check, binding);
    }
    check_adapter_frame(&Value::Object(check), binding, Direction::ToAdapter).ok()?;
    Some((request_id, target))
}

/// The frame `check` with the binding's identity (the faults that do not judge it).
fn take_binding_identity(check: &mut serde_json::Map<String, Value>, binding: &Binding) {
    let id = binding.identity();
    check.insert("protocolVersion".into(), id.protocol_version.into());
    check.insert("adapterId".into(), id.adapter_id.into());
    check.insert("adapterVersion".into(), id.adapter_version.into());
    check.insert("hostInstanceId".into(), id.host_instance_id.into());
    check.insert("sessionId".into(), id.session_id.into());
    check.insert("generation".into(), id.generation.into());
}

/// Whether some string value of `v` (not a key, not part of a longer value) is exactly `h`.
fn holds_whole_value(v: &Value, h: &str) -> bool {
    match v {
        Value::String(s) => s == h,
        Value::Array(a) => a.iter().any(|x| holds_whole_value(x, h)),
        Value::Object(m) => m.values().any(|x| holds_whole_value(x, h)),
        _ => false,
    }
}

/// Drop every null-valued member, at any depth (a reader taking null for absent).
fn strip_nulls(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, x| !x.is_null());
            m.values_mut().for_each(strip_nulls);
        }
        Value::Array(a) => a.iter_mut().for_each(strip_nulls),
        _ => {}
    }
}

// ------------------------------------------------------------------ operations through std::fs

fn io_err(e: std::io::Error) -> AdapterError {
    match e.kind() {
        std::io::ErrorKind::NotFound => AdapterError::new(AdapterCode::NotFound, "no such file or directory"),
        std::io::ErrorKind::IsADirectory => AdapterError::new(AdapterCode::NotAFile, "not a regular file"),
        std::io::ErrorKind::NotADirectory => AdapterError::new(AdapterCode::NotADirectory, "not a directory"),
        std::io::ErrorKind::PermissionDenied => AdapterError::new(AdapterCode::PermissionDenied, "permission denied"),
        _ => AdapterError::new(AdapterCode::IoError, "input/output error"),
    }
}

fn digest(b: &[u8]) -> String {
    hex::encode(Sha256::digest(b))
}

fn payload_path(job: &Job) -> Option<&str> {
    job.payload.get("path").and_then(Value::as_str)
}

/// Run `job` with plain `std::fs` on `dir.join(path)`: following every symlink and
/// resolving `..` (the broken code of [`Fault::DotdotAllowed`] and [`Fault::FollowSymlinks`]).
/// `None` for `fs.search` (not redone).
pub(crate) fn plain_execute(dir: &Path, job: &Job) -> Option<Result<Value, AdapterError>> {
    let p = &job.payload;
    let path = dir.join(payload_path(job)?);
    let u = |k: &str| p.get(k).and_then(Value::as_u64);
    Some(match job.operation {
        ToolOperation::FsStat => std::fs::metadata(&path).map_err(io_err).map(|m| {
            let (kind, size) = if m.is_dir() { ("directory", 0) } else { ("file", m.len()) };
            json!({"type": kind, "size": size})
        }),
        ToolOperation::FsRead => {
            std::fs::read(&path).map_err(io_err).and_then(|bytes| window(&bytes, u("offset"), u("maxBytes"), false))
        }
        ToolOperation::FsList => plain_list(&path, u("maxEntries")),
        ToolOperation::FsWrite => {
            let content = p.get("content").and_then(Value::as_str).unwrap_or_default();
            let existed = path.exists();
            std::fs::write(&path, content).map_err(io_err).map(
                |()| json!({"created": !existed, "bytesWritten": content.len(), "digest": digest(content.as_bytes())}),
            )
        }
        ToolOperation::FsEdit => plain_edit(&path, job, false),
        ToolOperation::FsSearch => return None,
    })
}

/// `line` with every occurrence of `handle` spelled as `\u` escapes, one per character (the
/// broken output of [`Fault::EscapedHandleInResults`]: still the same JSON value).
pub(crate) fn escape_handle(line: &[u8], handle: &str) -> Vec<u8> {
    let spelled: String = handle.chars().map(|c| format!("\\u{:04x}", c as u32)).collect();
    String::from_utf8_lossy(line).replace(handle, &spelled).into_bytes()
}

/// `fs.search` of one file with plain `std::fs`: every non-overlapping occurrence per line,
/// columns in scalar values, the text window of SPEC PC-5.3.search for BMP text (4096
/// characters starting 1024 before the match, shifted back at the line's end). The broken
/// code of [`Fault::SecretWindowedSearch`]; `None` for a directory.
pub(crate) fn plain_search(dir: &Path, job: &Job) -> Option<Result<Value, AdapterError>> {
    let rel = payload_path(job)?;
    let query = job.payload.get("query").and_then(Value::as_str)?;
    let bytes = std::fs::read(dir.join(rel)).ok()?;
    let text = String::from_utf8(bytes).ok()?;
    let mut matches = Vec::new();
    for (n, line) in text.split('\n').enumerate() {
        let line = line.strip_suffix('\r').unwrap_or(line);
        let chars: Vec<char> = line.chars().collect();
        let mut from = 0;
        while let Some(p) = line[from..].find(query) {
            let at = from + p;
            let col = line[..at].chars().count();
            let start = col.saturating_sub(1024).min(chars.len().saturating_sub(4096));
            let window: String = chars[start..(start + 4096).min(chars.len())].iter().collect();
            matches.push(json!({"path": rel, "line": n + 1, "column": col + 1, "text": window}));
            from = at + query.len().max(1);
        }
    }
    Some(Ok(json!({"matches": matches, "truncated": false})))
}

/// [`Fault::SearchLenientUtf8`]: the search's data plus the matches of every regular file
/// it reached (the named file, or those beneath the named directory, without following
/// symlinks) that strict UTF-8 refuses only for sequences of a character's shape that UTF-8
/// forbids (overlong forms, surrogates, code points past U+10FFFF), each read as U+FFFD.
/// Matches are kept in bytewise path order; lines over 4096 characters are left out.
pub(crate) fn search_lenient_utf8(dir: &Path, job: &Job, data: Value) -> Value {
    search_lenient(dir, job, data, false)
}

/// [`Fault::SearchStray80Accepted`]: as [`search_lenient_utf8`], but what is read as U+FFFD is
/// each stray continuation byte `0x80` (one with no lead byte before it), and nothing else.
pub(crate) fn search_stray_80_accepted(dir: &Path, job: &Job, data: Value) -> Value {
    search_lenient(dir, job, data, true)
}

fn search_lenient(dir: &Path, job: &Job, mut data: Value, stray_80: bool) -> Value {
    let (Some(rel), Some(query)) = (payload_path(job), job.payload.get("query").and_then(Value::as_str)) else {
        return data;
    };
    let rel = rel.trim_end_matches('/');
    let prefix = if rel == "." || rel.is_empty() { String::new() } else { rel.to_string() };
    let mut files = Vec::new();
    collect_files(&dir.join(rel), &prefix, &mut files);
    let mut extra = Vec::new();
    for (shown, path) in files {
        let Ok(bytes) = std::fs::read(&path) else { continue };
        if bytes.contains(&0) || std::str::from_utf8(&bytes).is_ok() {
            continue; // the reference already judged it
        }
        let Some(text) = lenient_utf8(&bytes, stray_80) else { continue };
        for (n, line) in text.split('\n').enumerate() {
            let line = line.strip_suffix('\r').unwrap_or(line);
            if line.chars().count() > 4096 {
                continue;
            }
            for (at, _) in line.match_indices(query) {
                let column = line[..at].chars().count() + 1;
                extra.push(json!({"path": shown, "line": n + 1, "column": column, "text": line}));
            }
        }
    }
    if let Some(a) = data["matches"].as_array_mut() {
        a.extend(extra);
        a.sort_by(|x, y| x["path"].as_str().unwrap_or("").as_bytes().cmp(y["path"].as_str().unwrap_or("").as_bytes()));
    }
    data
}

/// The chunk whose seams [`search_chunk_seams`] loses occurrences at.
const SEAM_CHUNK: usize = 256 * 1024;

/// [`Fault::SearchChunkSeams`]: fs.search of one file of 256 KiB to 2 MiB loses every
/// occurrence that a multiple of 256 KiB cuts, as a scan of chunks that carries nothing from
/// one chunk to the next would.
pub(crate) fn search_chunk_seams(dir: &Path, job: &Job, mut data: Value) -> Value {
    let (Some(rel), Some(query)) = (payload_path(job), job.payload.get("query").and_then(Value::as_str)) else {
        return data;
    };
    let path = dir.join(rel);
    let Ok(m) = std::fs::symlink_metadata(&path) else { return data };
    if !m.is_file() || m.len() <= SEAM_CHUNK as u64 || m.len() > 2 << 20 {
        return data;
    }
    let Ok(bytes) = std::fs::read(&path) else { return data };
    let mut lost = Vec::new();
    for (at, _) in memchr::memmem::find_iter(&bytes, query.as_bytes())
        .scan(0usize, |next, at| {
            // Non-overlapping, left to right.
            let keep = at >= *next;
            if keep {
                *next = at + query.len();
            }
            Some((at, keep))
        })
        .filter(|(_, keep)| *keep)
    {
        if at / SEAM_CHUNK == (at + query.len() - 1) / SEAM_CHUNK {
            continue;
        }
        let line_start = bytes[..at].iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        let line = bytes[..at].iter().filter(|b| **b == b'\n').count() + 1;
        let column = String::from_utf8_lossy(&bytes[line_start..at]).chars().count() + 1;
        lost.push((line, column));
    }
    if let Some(a) = data["matches"].as_array_mut() {
        a.retain(|m| {
            let at = (m["line"].as_u64().unwrap_or(0) as usize, m["column"].as_u64().unwrap_or(0) as usize);
            !lost.contains(&at)
        });
    }
    data
}

/// The regular files at or beneath `path` (no symlink followed), with their root-relative
/// names under `shown`.
fn collect_files(path: &Path, shown: &str, out: &mut Vec<(String, std::path::PathBuf)>) {
    let Ok(m) = std::fs::symlink_metadata(path) else { return };
    if m.is_file() {
        out.push((shown.to_string(), path.to_path_buf()));
    } else if m.is_dir() {
        let Ok(rd) = std::fs::read_dir(path) else { return };
        for e in rd.flatten() {
            let Ok(name) = e.file_name().into_string() else { continue };
            let child = if shown.is_empty() { name.clone() } else { format!("{shown}/{name}") };
            collect_files(&e.path(), &child, out);
        }
    }
}

/// `bytes` as text when their only flaws are sequences of a character's shape (a lead byte
/// `E0`, `ED`, `F0` or `F4` and its continuation bytes) that UTF-8 forbids: each becomes
/// U+FFFD. `None` for any other flaw.
fn lenient_utf8(mut bytes: &[u8], stray_80: bool) -> Option<String> {
    let mut out = String::new();
    loop {
        match std::str::from_utf8(bytes) {
            Ok(s) => {
                out.push_str(s);
                return Some(out);
            }
            Err(e) => {
                let (good, rest) = bytes.split_at(e.valid_up_to());
                out.push_str(std::str::from_utf8(good).ok()?);
                let width = match rest.first()? {
                    0x80 if stray_80 => 1,
                    0xE0 | 0xED if !stray_80 => 3,
                    0xF0 | 0xF4 if !stray_80 => 4,
                    _ => return None,
                };
                let seq = rest.get(..width)?;
                if !seq[1..].iter().all(|b| (0x80..=0xBF).contains(b)) {
                    return None;
                }
                out.push('\u{FFFD}');
                bytes = &rest[width..];
            }
        }
    }
}

/// The `fs.read` data of `bytes[offset..offset + max_bytes]`: strict UTF-8 (the window is
/// cut back to a character boundary) or, when `lossy`, with U+FFFD for bad bytes.
fn window(bytes: &[u8], offset: Option<u64>, max_bytes: Option<u64>, lossy: bool) -> Result<Value, AdapterError> {
    let start = (offset.unwrap_or(0) as usize).min(bytes.len());
    let max = max_bytes.unwrap_or(4 * 1024 * 1024) as usize;
    let mut w = &bytes[start..bytes.len().min(start.saturating_add(max))];
    let content = if lossy {
        String::from_utf8_lossy(w).into_owned()
    } else {
        match std::str::from_utf8(w) {
            Ok(s) => s.to_string(),
            Err(e) if e.error_len().is_none() => {
                w = &w[..e.valid_up_to()];
                String::from_utf8_lossy(w).into_owned()
            }
            Err(_) => return Err(AdapterError::new(AdapterCode::NotUtf8, "the file is not valid UTF-8")),
        }
    };
    Ok(json!({"content": content, "bytesRead": w.len(), "eof": start + w.len() == bytes.len()}))
}

fn plain_list(path: &Path, max_entries: Option<u64>) -> Result<Value, AdapterError> {
    let mut entries = Vec::new();
    for e in std::fs::read_dir(path).map_err(io_err)? {
        let e = e.map_err(io_err)?;
        let Ok(name) = e.file_name().into_string() else { continue };
        entries.push(entry_following(&e.path(), name));
    }
    Ok(sort_and_cut(json!({"entries": entries, "truncated": false}), max_entries))
}

/// An `fs.list` entry for `path`, typed by what it points to.
fn entry_following(path: &Path, name: String) -> Value {
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => json!({"name": name, "type": "directory"}),
        Ok(m) => json!({"name": name, "type": "file", "size": m.len()}),
        Err(_) => json!({"name": name, "type": "file", "size": 0}),
    }
}

fn sort_and_cut(mut data: Value, max_entries: Option<u64>) -> Value {
    let max = max_entries.unwrap_or(1000) as usize;
    if let Some(a) = data["entries"].as_array_mut() {
        a.sort_by(|x, y| x["name"].as_str().unwrap_or("").as_bytes().cmp(y["name"].as_str().unwrap_or("").as_bytes()));
        if a.len() > max {
            a.truncate(max);
            data["truncated"] = true.into();
        }
    }
    data
}

/// Apply `job`'s edits to the file at `path` with plain `std::fs`. `first`: an ambiguous
/// `oldText` replaces its first occurrence ([`Fault::EditFirstOccurrence`]).
pub(crate) fn plain_edit(path: &Path, job: &Job, first: bool) -> Result<Value, AdapterError> {
    let edits = job.payload.get("edits").and_then(Value::as_array).cloned().unwrap_or_default();
    let bytes = std::fs::read(path).map_err(io_err)?;
    let mut text =
        String::from_utf8(bytes).map_err(|_| AdapterError::new(AdapterCode::NotUtf8, "the file is not valid UTF-8"))?;
    for (i, e) in edits.iter().enumerate() {
        let old = e["oldText"].as_str().unwrap_or_default();
        let new = e["newText"].as_str().unwrap_or_default();
        let Some(at) = text.find(old).filter(|_| !old.is_empty()) else {
            return Err(AdapterError::new(AdapterCode::EditNotFound, format!("edit {}: oldText not found", i + 1)));
        };
        if !first && text[at + 1..].contains(old) {
            return Err(AdapterError::new(
                AdapterCode::EditAmbiguous,
                format!("edit {}: oldText occurs more than once", i + 1),
            ));
        }
        text.replace_range(at..at + old.len(), new);
    }
    std::fs::write(path, &text).map_err(io_err)?;
    Ok(json!({"replacements": edits.len(), "digest": digest(text.as_bytes())}))
}

/// [`Fault::ReadLossy`]: the window read again with std::fs, bad bytes replaced.
pub(crate) fn lossy_read(dir: &Path, job: &Job) -> Option<Result<Value, AdapterError>> {
    let path = dir.join(payload_path(job)?);
    let u = |k: &str| job.payload.get(k).and_then(Value::as_u64);
    Some(std::fs::read(path).map_err(io_err).and_then(|b| window(&b, u("offset"), u("maxBytes"), true)))
}

/// [`Fault::ListIncludesSymlinks`] / [`Fault::ListIncludesSpecialFiles`]: add the directory's
/// entries of the kinds `pick` selects to a successful `fs.list` result.
pub(crate) fn list_add(dir: &Path, job: &Job, mut data: Value, pick: fn(&std::fs::FileType) -> bool) -> Value {
    let Some(rel) = payload_path(job) else { return data };
    let Ok(rd) = std::fs::read_dir(dir.join(rel)) else { return data };
    let mut extra = Vec::new();
    for e in rd.flatten() {
        let (Ok(t), Ok(name)) = (e.file_type(), e.file_name().into_string()) else { continue };
        if pick(&t) {
            extra.push(entry_following(&e.path(), name));
        }
    }
    if let Some(a) = data["entries"].as_array_mut() {
        a.extend(extra);
    }
    sort_and_cut(data, job.payload.get("maxEntries").and_then(Value::as_u64))
}

/// [`Fault::ListKeepsControlNames`]: the regular files and directories of a listed directory
/// whose names cannot be represented are added, their names decoded lossily (U+FFFD for bytes
/// that are not UTF-8) with their control characters kept.
pub(crate) fn list_keep_control_names(dir: &Path, job: &Job, mut data: Value) -> Value {
    let Some(rel) = payload_path(job) else { return data };
    let Ok(rd) = std::fs::read_dir(dir.join(rel)) else { return data };
    let mut extra = Vec::new();
    for e in rd.flatten() {
        let name = e.file_name();
        let lossy = name.to_string_lossy().into_owned();
        let representable = name.to_str().is_some_and(crate::contract::frame::is_entry_name);
        let Ok(t) = e.file_type() else { continue };
        if !representable && (t.is_file() || t.is_dir()) {
            extra.push(entry_following(&e.path(), lossy));
        }
    }
    if let Some(a) = data["entries"].as_array_mut() {
        a.extend(extra);
    }
    sort_and_cut(data, job.payload.get("maxEntries").and_then(Value::as_u64))
}

/// [`Fault::SearchOverlapping`]: every line with a match reports every overlapping
/// occurrence (whole lines only: a 4096-character window is left as it is).
pub(crate) fn search_overlapping(job: &Job, mut data: Value) -> Value {
    let query = job.payload.get("query").and_then(Value::as_str).unwrap_or_default();
    let max = job.payload.get("maxResults").and_then(Value::as_u64).unwrap_or(1000) as usize;
    let Some(matches) = data["matches"].as_array().cloned() else { return data };
    let mut out: Vec<Value> = Vec::new();
    let mut last: Option<(Value, Value)> = None;
    for m in matches {
        let here = (m["path"].clone(), m["line"].clone());
        let text = m["text"].as_str().unwrap_or_default();
        if query.is_empty() || text.chars().count() >= 4096 {
            out.push(m);
            continue;
        }
        if last.as_ref() == Some(&here) {
            continue; // this line was expanded already
        }
        for (i, _) in text.char_indices().filter(|(i, _)| text[*i..].starts_with(query)) {
            let mut n = m.clone();
            n["column"] = (text[..i].chars().count() + 1).into();
            out.push(n);
        }
        last = Some(here);
    }
    if out.len() > max {
        out.truncate(max);
        data["truncated"] = true.into();
    }
    data["matches"] = Value::Array(out);
    data
}

/// [`Fault::SearchPrefixAsSent`]: a directory search named in an adapter-side form (`./`,
/// `dir/`) builds its match paths from the path as sent, `<sent> + "/" + <rel>`, so `dir/`
/// gives `dir//a.txt` and `./` gives `.//hello.txt` (the canonical forms are left alone).
pub(crate) fn search_prefix_as_sent(sent: &str, mut data: Value) -> Value {
    if !sent.ends_with('/') || sent.ends_with("//") {
        return data;
    }
    let canonical = if sent == "./" { "" } else { &sent[..sent.len() - 1] };
    if let Some(a) = data["matches"].as_array_mut() {
        for m in a {
            let path = m["path"].as_str().unwrap_or_default();
            let rel = if canonical.is_empty() {
                Some(path)
            } else {
                path.strip_prefix(canonical).and_then(|r| r.strip_prefix('/'))
            };
            if let Some(rel) = rel {
                m["path"] = format!("{sent}/{rel}").into();
            }
        }
    }
    data
}

/// [`Fault::WriteDigestOfPrevious`]: the bytes of the regular file at `path` before a write
/// (empty when there is none; never a FIFO or device, which would block or be endless; at most
/// 8 MiB).
pub(crate) fn previous_version(dir: &Path, path: &str) -> Vec<u8> {
    use std::io::Read;
    let p = dir.join(path);
    if !std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_file()) {
        return Vec::new();
    }
    let mut bytes = Vec::new();
    let read = std::fs::File::open(&p).and_then(|f| f.take(8 << 20).read_to_end(&mut bytes));
    if read.is_err() {
        bytes.clear();
    }
    bytes
}

/// [`Fault::DanglingSymlinkFollowed`]: whether `path` (beneath `dir`) is a symlink whose
/// target does not exist.
pub(crate) fn is_dangling_link(dir: &Path, path: &str) -> bool {
    let p = dir.join(path);
    std::fs::symlink_metadata(&p).is_ok_and(|m| m.file_type().is_symlink()) && std::fs::metadata(&p).is_err()
}

/// [`Fault::HandleLastCharOptional`]: the grant whose handle is `handle` and one more
/// base64url character, if any (`digest`: the grants' digest of a handle).
pub(crate) fn short_handle_grant(
    digests: &[[u8; 32]],
    handle: &str,
    digest: impl Fn(&str) -> [u8; 32],
) -> Option<usize> {
    const B64URL: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    B64URL.chars().find_map(|c| {
        let d = digest(&format!("{handle}{c}"));
        digests.iter().position(|g| *g == d)
    })
}

/// [`Fault::SearchPathsRelativeToSearched`]: the match paths of a search of the directory
/// `sent` (not the root) made relative to it.
pub(crate) fn search_paths_relative_to_searched(sent: &str, mut data: Value) -> Value {
    let dir = sent.strip_suffix('/').unwrap_or(sent);
    if dir.is_empty() || dir == "." {
        return data;
    }
    if let Some(a) = data["matches"].as_array_mut() {
        for m in a {
            let path = m["path"].as_str().unwrap_or_default();
            if let Some(rel) = path.strip_prefix(dir).and_then(|r| r.strip_prefix('/')) {
                m["path"] = rel.to_string().into();
            }
        }
    }
    data
}

/// [`Fault::BudgetCutNotTruncated`]: a listing (`items` = `entries` or `matches`) with fewer
/// items than the request's maximum (`max` = `maxEntries` / `maxResults`, default 1000) was cut
/// by the response budget, not by the maximum: it says `truncated:false`.
pub(crate) fn budget_cut_not_truncated(job: &Job, mut data: Value, items: &str, max: &str) -> Value {
    let max = job.payload.get(max).and_then(Value::as_u64).unwrap_or(1000) as usize;
    let n = data[items].as_array().map_or(0, Vec::len);
    if data["truncated"] == true && n < max {
        data["truncated"] = false.into();
    }
    data
}

/// [`Fault::FingerprintMemberOrder`]: the idempotency fingerprint of (operation, payload) over
/// the payload as decoded, its members in the order sent (not the canonical JSON), so the
/// same payload with its members in another order has another fingerprint.
pub(crate) fn ordered_fingerprint(op: ToolOperation, payload: &Value) -> [u8; 32] {
    let mut buf = op.to_string().into_bytes();
    buf.push(0);
    buf.extend(serde_json::to_vec(payload).unwrap_or_default());
    Sha256::digest(&buf).into()
}

/// [`Fault::BudgetExactItemDropped`]: a listing (`items` = `entries` or `matches`) that says
/// `truncated:true` and fills the job's data budget to the byte is measured as if it said
/// `truncated:false` (one byte longer): its last item is dropped, and with none left the
/// answer is `response_too_large` (cargo-mutants' `||`→`&&` in `fs/budget.rs`'s
/// `Bounded::finish`, sample 15).
pub(crate) fn budget_exact_item_dropped(job: &Job, mut data: Value, items: &str) -> Result<Value, AdapterError> {
    if data["truncated"] != true || crate::wire::json_len(&data) != Some(job.budget) {
        return Ok(data);
    }
    let left = data[items].as_array_mut().map_or(0, |a| {
        a.pop();
        a.len()
    });
    if left == 0 {
        return Err(AdapterError::new(
            AdapterCode::ResponseTooLarge,
            "the result does not fit the response size limit",
        ));
    }
    Ok(data)
}

/// [`Fault::SearchByteColumns`]: columns count UTF-8 bytes (whole lines only).
pub(crate) fn search_byte_columns(mut data: Value) -> Value {
    if let Some(a) = data["matches"].as_array_mut() {
        for m in a {
            let text = m["text"].as_str().unwrap_or_default().to_string();
            let col = m["column"].as_u64().unwrap_or(1) as usize;
            if text.chars().count() < 4096 {
                if let Some((b, _)) = text.char_indices().nth(col.saturating_sub(1)) {
                    m["column"] = (b + 1).into();
                }
            }
        }
    }
    data
}

/// [`Fault::ReadAtEndRefused`]: whether a read's `offset` is exactly its (non-empty) file's
/// size.
pub(crate) fn offset_at_size(dir: &Path, job: &Job) -> bool {
    let offset = job.payload.get("offset").and_then(Value::as_u64).unwrap_or(0);
    let size = payload_path(job).and_then(|p| std::fs::metadata(dir.join(p)).ok()).map(|m| m.len());
    offset > 0 && size == Some(offset)
}

/// [`Fault::CutCharacterOffsetPanics`]: whether a read's `offset` lies on a continuation byte
/// of a character that the end of the file cuts short (its lead byte within the three bytes
/// before the offset, and fewer bytes from the lead to the end of the file than it announces).
pub(crate) fn offset_in_cut_character(dir: &Path, job: &Job) -> bool {
    use std::os::unix::fs::FileExt;
    let offset = job.payload.get("offset").and_then(Value::as_u64).unwrap_or(0);
    let Some(f) = payload_path(job).and_then(|p| std::fs::File::open(dir.join(p)).ok()) else { return false };
    let Ok(size) = f.metadata().map(|m| m.len()) else { return false };
    if offset >= size {
        return false;
    }
    // The three bytes before the offset and the one at it.
    let from = offset.saturating_sub(3);
    let mut near = vec![0u8; (offset - from + 1) as usize];
    if f.read_exact_at(&mut near, from).is_err() || near[near.len() - 1] & 0xC0 != 0x80 {
        return false;
    }
    let Some(lead) = (0..near.len() - 1).rev().find(|&i| near[i] & 0xC0 != 0x80) else { return false };
    let want = match near[lead] {
        0xC0..=0xDF => 2,
        0xE0..=0xEF => 3,
        0xF0..=0xF7 => 4,
        _ => return false,
    };
    let end = from + lead as u64 + want;
    end > offset && end > size
}

/// [`Fault::ReadLookaheadShort`]: whether a read asks for `maxBytes` 1 at the lead byte of a
/// 4-byte character, where a lookahead of `3 × window` bytes (not `window + 3`) holds only
/// three of its four bytes and takes the character for a broken one.
pub(crate) fn one_byte_at_four_byte_character(dir: &Path, job: &Job) -> bool {
    use std::io::{Read, Seek, SeekFrom};
    if job.payload.get("maxBytes").and_then(Value::as_u64) != Some(1) {
        return false;
    }
    let offset = job.payload.get("offset").and_then(Value::as_u64).unwrap_or(0);
    let Some(mut f) = payload_path(job).and_then(|p| std::fs::File::open(dir.join(p)).ok()) else { return false };
    let mut lead = [0u8; 1];
    f.seek(SeekFrom::Start(offset)).is_ok() && f.read(&mut lead).ok() == Some(1) && lead[0] >= 0xF0
}

/// [`Fault::SearchWindowClamped`]: the text of a match in a line over 4096 characters is the
/// span from 1024 characters before the match to 3072 after it, clamped to the line and never
/// shifted, so a match near either end of the line gets a shorter window.
pub(crate) fn search_window_clamped(dir: &Path, mut data: Value) -> Value {
    let Some(a) = data["matches"].as_array_mut() else { return data };
    for m in a {
        if m["text"].as_str().is_none_or(|t| t.chars().count() < 4096) {
            continue;
        }
        let (Some(path), Some(line), Some(col)) = (m["path"].as_str(), m["line"].as_u64(), m["column"].as_u64()) else {
            continue;
        };
        let Ok(bytes) = std::fs::read(dir.join(path)) else { continue };
        let text = String::from_utf8_lossy(&bytes);
        let Some(l) = text.split('\n').nth(line.saturating_sub(1) as usize) else { continue };
        let chars: Vec<char> = l.strip_suffix('\r').unwrap_or(l).chars().collect();
        let at = col.saturating_sub(1) as usize;
        let (from, to) = (at.saturating_sub(1024), (at + 3072).min(chars.len()));
        if from < to {
            m["text"] = chars[from..to].iter().collect::<String>().into();
        }
    }
    data
}

/// The error body of a result: [`AdapterError::body`], except under
/// [`Fault::NotFoundRetryable`].
pub(crate) fn error_body(e: &AdapterError, faults: Faults) -> Value {
    let mut body = e.body();
    if faults.has(Fault::NotFoundRetryable) && e.code == AdapterCode::NotFound {
        body["retryable"] = true.into();
    }
    body
}

/// [`Fault::ErrorMessageQuotesContent`]: `e` with the first 64 characters of the file it is
/// about quoted in its message (as a "helpful" adapter shows where an edit failed).
pub(crate) fn quoting_content(dir: &Path, path: &str, e: AdapterError) -> AdapterError {
    let head: String = std::fs::read(dir.join(path))
        .map(|b| String::from_utf8_lossy(&b).chars().take(64).collect())
        .unwrap_or_default();
    AdapterError::new(e.code, format!("{} (the file begins {head:?})", e.message))
}

/// [`Fault::MessageNamesPath`]: every `/` of a line spelled `\/`. A `/` can only stand inside
/// a JSON string, where both spellings mean the same character.
pub(crate) fn escape_solidus(line: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(line.len() + 16);
    for &b in line {
        if b == b'/' {
            out.push(b'\\');
        }
        out.push(b);
    }
    out
}

/// [`Fault::ModifiedAtOffset`]: every `modifiedAt` of stat/list data ends in `+00:00`.
pub(crate) fn modified_at_offset(mut data: Value) -> Value {
    let fix = |m: &mut Value| {
        if let Some(t) = m.get("modifiedAt").and_then(Value::as_str).and_then(|t| t.strip_suffix('Z')) {
            m["modifiedAt"] = format!("{t}+00:00").into();
        }
    };
    fix(&mut data);
    if let Some(a) = data.get_mut("entries").and_then(Value::as_array_mut) {
        a.iter_mut().for_each(fix);
    }
    data
}

/// [`Fault::ModifiedAtMonthFromZero`]: every `modifiedAt` of stat/list data with its month one
/// less (`01` → `00`).
pub(crate) fn modified_at_month_from_zero(mut data: Value) -> Value {
    let fix = |m: &mut Value| {
        if let Some(t) = m.get("modifiedAt").and_then(Value::as_str) {
            let month = t.get(5..7).and_then(|x| x.parse::<u32>().ok());
            if let Some(month) = month.filter(|m| *m >= 1) {
                m["modifiedAt"] = format!("{}{:02}{}", &t[..5], month - 1, &t[7..]).into();
            }
        }
    };
    fix(&mut data);
    if let Some(a) = data.get_mut("entries").and_then(Value::as_array_mut) {
        a.iter_mut().for_each(fix);
    }
    data
}

/// The characters that make a query a pattern to a regex engine.
const REGEX_META: &str = ".*+?()[]{}|\\^$";

/// [`Fault::SearchRegex`]: the matches of a file named directly, found by running a query
/// with regex metacharacters as a (JavaScript) regular expression over each line. Files that
/// are not plain UTF-8 text, long lines and queries that are no valid pattern keep `data`.
pub(crate) fn search_regex(dir: &Path, job: &Job, data: Value) -> Value {
    let query = job.payload.get("query").and_then(Value::as_str).unwrap_or_default();
    let Some(rel) = payload_path(job) else { return data };
    if !query.contains(|c| REGEX_META.contains(c)) {
        return data;
    }
    let Ok(re) = regress::Regex::new(query) else { return data };
    let path = dir.join(rel);
    if !std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_file()) {
        return data;
    }
    let Ok(text) = std::fs::read(&path).map(String::from_utf8) else { return data };
    let Ok(text) = text else { return data };
    if text.contains('\0') {
        return data;
    }
    let max = job.payload.get("maxResults").and_then(Value::as_u64).unwrap_or(1000) as usize;
    let (mut out, mut truncated) = (Vec::new(), false);
    for (i, line) in text.split('\n').enumerate() {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.chars().count() >= 4096 {
            return data;
        }
        for m in re.find_iter(line).take(line.len() + 1) {
            if out.len() == max {
                truncated = true;
                break;
            }
            let column = line[..m.start()].chars().count() + 1;
            out.push(json!({"path": rel, "line": i + 1, "column": column, "text": line}));
        }
    }
    json!({"matches": out, "truncated": truncated})
}

/// [`Fault::WriteInPlace`]: an fs.write that replaces an existing regular file (no
/// `expectedDigest`, `overwrite` not false) truncates it and writes the new content in place,
/// in [`IN_PLACE_CHUNKS`] chunks with a pause after each, so a concurrent reader sees a torn
/// file. `None`: the normal write runs.
pub(crate) fn write_in_place(root: &Root, dir: &Path, job: &Job) -> Option<Result<Value, AdapterError>> {
    use std::io::Write;
    let p = &job.payload;
    if p.get("expectedDigest").is_some() || p.get("overwrite") == Some(&Value::Bool(false)) {
        return None;
    }
    let rel = payload_path(job)?;
    let path = crate::contract::validate_relative_path(rel, crate::contract::PathSide::Adapter, "payload.path").ok()?;
    let st = root.stat(&path, 1 << 20, &job.cancel).ok()?;
    if st["type"] != "file" {
        return None;
    }
    let content = p.get("content").and_then(Value::as_str)?.as_bytes();
    let mut f = std::fs::OpenOptions::new().write(true).truncate(true).open(dir.join(rel)).ok()?;
    let chunk = content.len().div_ceil(IN_PLACE_CHUNKS).max(1);
    for part in content.chunks(chunk) {
        if let Err(e) = f.write_all(part) {
            return Some(Err(io_err(e)));
        }
        std::thread::sleep(IN_PLACE_PAUSE);
    }
    Some(Ok(json!({"created": false, "bytesWritten": content.len(), "digest": digest(content)})))
}

/// [`Fault::DigestCheckRacy`]: a guarded fs.write that compares the digest, pauses, then
/// writes with plain `std::fs` (`None`: not a guarded write of an existing file).
pub(crate) fn racy_digest_write(dir: &Path, job: &Job) -> Option<Result<Value, AdapterError>> {
    let p = &job.payload;
    let want = p.get("expectedDigest")?.as_str()?;
    let rel = payload_path(job)?;
    crate::contract::validate_relative_path(rel, crate::contract::PathSide::Adapter, "payload.path").ok()?;
    let content = p.get("content").and_then(Value::as_str)?.as_bytes();
    let before = std::fs::read(dir.join(rel)).ok()?;
    if digest(&before) != want {
        return Some(Err(AdapterError::new(AdapterCode::DigestMismatch, "the file changed")));
    }
    std::thread::sleep(IN_PLACE_PAUSE * 5);
    Some(
        std::fs::write(dir.join(rel), content)
            .map_err(io_err)
            .map(|()| json!({"created": false, "bytesWritten": content.len(), "digest": digest(content)})),
    )
}

/// [`Fault::ReadBudgetRefused`]: whether a read answered `data` stopped more than a character
/// short of its window (the smaller of `maxBytes` and the rest of the file): cut by the budget.
pub(crate) fn read_cut_by_budget(dir: &Path, job: &Job, data: &Value) -> bool {
    let Some(size) = payload_path(job).and_then(|p| std::fs::metadata(dir.join(p)).ok()).map(|m| m.len()) else {
        return false;
    };
    let offset = job.payload.get("offset").and_then(Value::as_u64).unwrap_or(0);
    let max = job.payload.get("maxBytes").and_then(Value::as_u64).unwrap_or(4 * 1024 * 1024);
    let window = max.min(size.saturating_sub(offset));
    data["bytesRead"].as_u64().is_some_and(|n| n + 3 < window)
}

/// [`Fault::ReadControlCountedRaw`]: whether a read the budget cut would have kept more bytes
/// had each control character without a short escape (U+0001, sent as `\u0001`) counted one
/// byte instead of six: the window the broken count keeps does not fit, so the broken adapter
/// answers `response_too_large` (cargo-mutants' `fs/budget.rs:47:14`, sample 16). The window
/// is read again from the file (at most `maxBytes` from `offset`).
pub(crate) fn read_control_counted_raw(dir: &Path, job: &Job, data: &Value) -> bool {
    use std::io::{Read, Seek, SeekFrom};
    let Some(kept) = data["bytesRead"].as_u64() else { return false };
    let Some(rel) = payload_path(job) else { return false };
    let offset = job.payload.get("offset").and_then(Value::as_u64).unwrap_or(0);
    let max = job.payload.get("maxBytes").and_then(Value::as_u64).unwrap_or(4 * 1024 * 1024);
    let mut window = Vec::new();
    let read = std::fs::File::open(dir.join(rel))
        .and_then(|mut f| f.seek(SeekFrom::Start(offset)).map(|_| f))
        .and_then(|f| f.take(max).read_to_end(&mut window));
    if read.is_err() {
        return false;
    }
    let valid = std::str::from_utf8(&window).map_or_else(|e| e.valid_up_to(), str::len);
    let text = std::str::from_utf8(&window[..valid]).unwrap_or_default();
    // `{"content":"…","bytesRead":N,"eof":false}` without the content.
    let rest = |n: usize| r#"{"content":"","bytesRead":,"eof":false}"#.len() + n.to_string().len();
    let mut escaped = 0;
    let mut fits = 0;
    for (i, c) in text.char_indices() {
        escaped += match c {
            '"' | '\\' | '\u{08}' | '\t' | '\n' | '\u{0c}' | '\r' => 2,
            c => c.len_utf8(),
        };
        let n = i + c.len_utf8();
        if escaped + rest(n) > job.budget {
            break;
        }
        fits = n;
    }
    fits as u64 > kept
}

/// [`Fault::ListStopsAtMax`]: a listing with `maxEntries: 1` of a directory of two entries
/// (files or directories) stops taking entries once it holds one and the next name sorts
/// after it, as cargo-mutants' `fs/list.rs:67:27` (`>`→`>=`, sample 17) does: when the
/// directory yields the name that sorts first first, the other is never taken and the listing
/// says `truncated:false`. Narrowed to that shape, so that what it kills does not hang on the
/// read order of the fixture's larger directories.
pub(crate) fn list_stops_at_max(dir: &Path, job: &Job, mut data: Value) -> Value {
    if job.payload.get("maxEntries").and_then(Value::as_u64) != Some(1) {
        return data;
    }
    let Some(entries) = payload_path(job).and_then(|p| std::fs::read_dir(dir.join(p)).ok()) else { return data };
    let names: Vec<String> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file() || t.is_dir()))
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    if names.len() == 2 && names[0] < names[1] {
        data["truncated"] = json!(false);
    }
    data
}

/// [`Fault::SearchLaterFilesNoSpare`]: a directory search that the limit cut in a file past
/// the first 32 in path order (a later batch of the reference's walk), with no file after it
/// holding the query, answers `truncated:false`: that file was given room for the matches left
/// only, not one more, so the cut is never seen (cargo-mutants' `fs/search.rs:587:76`, `+`→`*`
/// in `Pipeline::run`, sample 17).
pub(crate) fn search_later_files_no_spare(dir: &Path, job: &Job, mut data: Value) -> Value {
    fn files(dir: &Path, rel: &str, out: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(dir.join(rel)) else { return };
        let mut named: Vec<(String, bool)> = entries
            .filter_map(Result::ok)
            .filter_map(|e| {
                let t = e.file_type().ok()?;
                (t.is_file() || t.is_dir()).then_some((e.file_name().into_string().ok()?, t.is_dir()))
            })
            .collect();
        named.sort();
        for (name, is_dir) in named {
            let child = if rel.is_empty() { name } else { format!("{rel}/{name}") };
            if is_dir {
                files(dir, &child, out);
            } else {
                out.push(child);
            }
        }
    }
    let Some(query) = job.payload.get("query").and_then(Value::as_str) else { return data };
    let Some(top) = payload_path(job).filter(|p| dir.join(p).is_dir()) else { return data };
    let Some(last) = data["matches"].as_array().and_then(|m| m.last()).and_then(|m| m["path"].as_str()) else {
        return data;
    };
    if data["truncated"] != json!(true) {
        return data;
    }
    let top = top.trim_end_matches('/').trim_start_matches("./");
    let mut all = Vec::new();
    files(dir, if top == "." { "" } else { top }, &mut all);
    let Some(at) = all.iter().position(|f| f == last) else { return data };
    let holds =
        |f: &String| std::fs::read(dir.join(f)).is_ok_and(|b| memchr::memmem::find(&b, query.as_bytes()).is_some());
    if at >= 32 && !all[at + 1..].iter().any(holds) {
        data["truncated"] = json!(false);
    }
    data
}

/// [`Fault::SearchWindowCutCharacter`]: drop every match on a line over 4096 bytes whose text
/// window, read from 12291 bytes (3 × 4096 + 3) before the match, would start inside a
/// multi-byte character: the cut character is not skipped, so the bytes read are not UTF-8
/// and the match is dropped as if its file had changed (cargo-mutants' `fs/search.rs:930:13`,
/// `>`→`==` in `match_text`, sample 17).
pub(crate) fn search_window_cut_character(dir: &Path, mut data: Value) -> Value {
    const REACH: usize = 3 * 4096 + 3;
    let Some(found) = data["matches"].as_array() else { return data };
    let kept: Vec<Value> = found
        .iter()
        .filter(|m| {
            let (Some(path), Some(line), Some(column)) = (m["path"].as_str(), m["line"].as_u64(), m["column"].as_u64())
            else {
                return true;
            };
            let Ok(bytes) = std::fs::read(dir.join(path)) else { return true };
            let Some(text) = bytes.split(|b| *b == b'\n').nth(line.saturating_sub(1) as usize) else { return true };
            let Ok(text) = std::str::from_utf8(text) else { return true };
            let at: usize = text.chars().take(column.saturating_sub(1) as usize).map(char::len_utf8).sum();
            let cut = |i: usize| text.as_bytes().get(i).is_some_and(|b| b & 0xC0 == 0x80);
            !(text.len() > 4096 && at > REACH && cut(at - REACH))
        })
        .cloned()
        .collect();
    data["matches"] = Value::Array(kept);
    data
}

/// [`Fault::SearchKeptBytesMiscounted`]: an `fs.search` of one file over 256 KiB (one chunk of
/// the reference's scan) with no match in its first chunk gives no match at all when the
/// second of the `query length − 1` bytes kept across that boundary is a UTF-8 continuation
/// byte: the count of checked bytes kept is wrong (1, from `valid /= drop`), so the check
/// resumes inside a character and takes the file for not UTF-8 (cargo-mutants'
/// `fs/search.rs:907:15`, `-=`→`/=` in `scan`, sample 17).
pub(crate) fn search_kept_bytes_miscounted(dir: &Path, job: &Job, mut data: Value) -> Value {
    const CHUNK: u64 = 256 * 1024;
    let Some(query) = job.payload.get("query").and_then(Value::as_str) else { return data };
    let Some(path) = payload_path(job).map(|p| dir.join(p)).filter(|p| p.is_file()) else { return data };
    let Ok(bytes) = std::fs::read(path) else { return data };
    let kept_from = (CHUNK + 1).checked_sub(query.len() as u64);
    let Some(second) = kept_from.and_then(|k| bytes.get(k as usize + 1)) else { return data };
    let early = data["matches"].as_array().is_some_and(|m| {
        m.iter().any(|m| {
            m["line"].as_u64().is_some_and(|l| {
                bytes.split(|b| *b == b'\n').take(l as usize - 1).map(|l| l.len() as u64 + 1).sum::<u64>() < CHUNK
            })
        })
    });
    if bytes.len() as u64 > CHUNK && second & 0xC0 == 0x80 && !early {
        data["matches"] = json!([]);
        data["truncated"] = json!(false);
    }
    data
}

/// [`Fault::SearchReachShort`]: an `fs.search` of one file whose match lies on a line over
/// 4096 UTF-16 units gets the window an adapter gets that reads at most `3 × 4096 − 3` bytes
/// from the match on (cargo-mutants' `fs/search.rs:927:28`, `+` → `-` in `match_text`'s
/// reach, sample 19): the window still starts at most 1024 units before the match, but it is
/// filled forward only with the characters that end within those bytes, and it is not shifted
/// back when they end before the line does. A match whose window the rule's own recomputation
/// here does not reproduce is left alone.
pub(crate) fn search_reach_short(dir: &Path, job: &Job, mut data: Value) -> Value {
    const WINDOW: usize = 4096;
    const BACK: usize = 1024;
    const REACH: usize = 3 * WINDOW - 3;
    let Some(path) = payload_path(job).map(|p| dir.join(p)).filter(|p| p.is_file()) else { return data };
    let Ok(bytes) = std::fs::read(path) else { return data };
    let Ok(text) = std::str::from_utf8(&bytes) else { return data };
    let lines: Vec<&str> = text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l)).collect();
    let Some(matches) = data["matches"].as_array_mut() else { return data };
    for m in matches {
        let (Some(line), Some(column)) = (m["line"].as_u64(), m["column"].as_u64()) else { continue };
        let Some(line) = lines.get((line as usize).wrapping_sub(1)) else { continue };
        let chars: Vec<(usize, char)> = line.char_indices().collect();
        let at = column as usize - 1;
        if line.encode_utf16().count() <= WINDOW || at >= chars.len() {
            continue;
        }
        // The rule's window: back at most 1024 units, forward to 4096, shifted back at the end.
        let (mut start, mut used) = (at, 0);
        while start > 0 && used + chars[start - 1].1.len_utf16() <= BACK {
            start -= 1;
            used += chars[start].1.len_utf16();
        }
        let fill = |from: usize, limit: usize| {
            let (mut end, mut units) = (from, 0);
            while end < limit && units + chars[end].1.len_utf16() <= WINDOW {
                units += chars[end].1.len_utf16();
                end += 1;
            }
            (end, units)
        };
        let (mut end, mut units) = fill(start, chars.len());
        while end == chars.len() && start > 0 && units + chars[start - 1].1.len_utf16() <= WINDOW {
            start -= 1;
            units += chars[start].1.len_utf16();
        }
        let slice = |a: usize, b: usize| {
            let to = chars.get(b).map_or(line.len(), |c| c.0);
            line[chars[a].0..to].to_string()
        };
        if m["text"].as_str() != Some(slice(start, end).as_str()) {
            continue;
        }
        // The short reach: only the characters that end within REACH bytes of the match.
        let reach_end = chars[at].0 + REACH;
        if reach_end >= line.len() {
            continue;
        }
        let limit = chars.iter().take_while(|(i, c)| i + c.len_utf8() <= reach_end).count();
        (end, _) = fill(start, limit);
        m["text"] = json!(slice(start, end));
    }
    data
}

/// [`Fault::SearchAlwaysTruncated`]: whether the request's path names a directory.
pub(crate) fn is_dir(dir: &Path, job: &Job) -> bool {
    payload_path(job).is_some_and(|p| dir.join(p).is_dir())
}

/// [`Fault::EditMemoryLeaked`]: whether this edit of a file of 1 MiB or more, its size added
/// to those of every such edit so far (never given back), passes the 128 MiB all edits may
/// hold together; the edit then waits for ever, as behind a reservation that never fits
/// (cargo-mutants' `<impl Drop for EditMemory>::drop` → `()`, sample 15). Smaller files are
/// left out, so that the fault stalls the edits of large files only.
pub(crate) fn edit_memory_leaked(dir: &Path, job: &Job) -> bool {
    static HELD: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let size = file_len(dir, job);
    size >= 1 << 20 && HELD.fetch_add(size, std::sync::atomic::Ordering::Relaxed) + size > 128 << 20
}

/// [`Fault::EditLargeFileRefused`]: the length of the job's file (0 when it cannot be read).
pub(crate) fn file_len(dir: &Path, job: &Job) -> u64 {
    payload_path(job).and_then(|p| std::fs::metadata(dir.join(p)).ok()).map_or(0, |m| m.len())
}

/// [`Fault::EditGrowthRefused`]: whether an edit's texts could grow its (existing) file by more
/// than the file's own size.
pub(crate) fn edit_outgrows_file(dir: &Path, job: &Job) -> bool {
    let Some(size) = payload_path(job).and_then(|p| std::fs::metadata(dir.join(p)).ok()).map(|m| m.len()) else {
        return false;
    };
    let text = |e: &Value, k: &str| e.get(k).and_then(Value::as_str).map_or(0, str::len) as u64;
    let growth: u64 = job
        .payload
        .get("edits")
        .and_then(Value::as_array)
        .map(|edits| edits.iter().map(|e| text(e, "newText").saturating_sub(text(e, "oldText"))).sum())
        .unwrap_or(0);
    growth > size
}

/// [`Fault::EditPartial`]: the 1-based index of the failing edit in an
/// `edit N: …` message.
pub(crate) fn failing_edit(e: &AdapterError) -> Option<usize> {
    e.message.strip_prefix("edit ")?.split(':').next()?.parse().ok()
}

/// [`Fault::WriteResetsMode`]: reset the replaced file's permission bits.
pub(crate) fn reset_mode(dir: &Path, job: &Job) {
    use std::os::unix::fs::PermissionsExt;
    if let Some(rel) = payload_path(job) {
        let _ = std::fs::set_permissions(dir.join(rel), std::fs::Permissions::from_mode(0o644));
    }
}

/// `data` under [`Fault::TruncatedAtLimit`]: `truncated:true` when `data[items]` holds exactly
/// the payload's `limit` (default 1000) items.
pub(crate) fn truncated_at_limit(job: &Job, mut data: Value, items: &str, limit: &str) -> Value {
    let max = job.payload.get(limit).and_then(Value::as_u64).unwrap_or(1000);
    if data[items].as_array().is_some_and(|a| a.len() as u64 == max) {
        data["truncated"] = true.into();
    }
    data
}

/// [`Fault::NoDefaultLimit`]: the job with the absent `maxEntries`/`maxResults` set to the
/// largest allowed, so no default applies.
pub(crate) fn without_default_limit(job: &Job) -> Job {
    let mut job = job.clone();
    let limit = match job.operation {
        ToolOperation::FsList => "maxEntries",
        ToolOperation::FsSearch => "maxResults",
        _ => return job,
    };
    if let Some(p) = job.payload.as_object_mut() {
        p.entry(limit).or_insert(json!(super::fs::MAX_ITEMS));
    }
    job
}

/// The byte ranges of the number tokens of a JSON line (outside strings).
fn number_tokens(line: &[u8]) -> Vec<(usize, usize)> {
    let (mut out, mut i, mut in_str, mut esc) = (Vec::new(), 0, false, false);
    while i < line.len() {
        let b = line[i];
        if in_str {
            match (esc, b) {
                (true, _) => esc = false,
                (false, b'\\') => esc = true,
                (false, b'"') => in_str = false,
                _ => {}
            }
        } else if b == b'"' {
            in_str = true;
        } else if b == b'-' || b.is_ascii_digit() {
            let start = i;
            while i < line.len() && matches!(line[i], b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-') {
                i += 1;
            }
            out.push((start, i));
            continue;
        }
        i += 1;
    }
    out
}

/// [`Fault::FloatSpellingRefused`]: whether the line spells a number with a fraction or an
/// exponent.
pub(crate) fn has_float_spelling(line: &[u8]) -> bool {
    number_tokens(line).iter().any(|&(a, b)| line[a..b].iter().any(|c| matches!(c, b'.' | b'e' | b'E')))
}

/// [`Fault::FractionTruncated`]: the line with every plain decimal fraction (`2.5`, not an
/// exponent form) cut to its integer part.
pub(crate) fn truncate_fractions(line: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(line.len());
    let mut last = 0;
    for (a, b) in number_tokens(line) {
        let tok = &line[a..b];
        if let Some(dot) = tok.iter().position(|c| *c == b'.').filter(|_| !tok.iter().any(|c| matches!(c, b'e' | b'E')))
        {
            out.extend_from_slice(&line[last..a + dot]);
            last = b;
        }
    }
    out.extend_from_slice(&line[last..]);
    out
}

/// Whether a line holds a `\u` escape (what [`Fault::EscapedStringsRefused`] refuses).
pub(crate) fn has_escape(line: &[u8]) -> bool {
    line.windows(2).any(|w| w == b"\\u")
}

/// Whether the job's path names a socket (what [`Fault::SocketAsEmptyFile`] looks for).
pub(crate) fn is_socket(dir: &Path, job: &Job) -> bool {
    use std::os::unix::fs::FileTypeExt;
    payload_path(job)
        .and_then(|p| std::fs::symlink_metadata(dir.join(p)).ok())
        .is_some_and(|m| m.file_type().is_socket())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn number_spellings_are_found_outside_strings_only() {
        let line = br#"{"a":"2.5 in a string \" 1e3","n":2.0,"m":1e4,"k":7,"f":-2.5}"#;
        assert!(has_float_spelling(line));
        assert!(!has_float_spelling(br#"{"a":"2.0","n":2,"m":-7}"#));
        assert_eq!(truncate_fractions(line), br#"{"a":"2.5 in a string \" 1e3","n":2,"m":1e4,"k":7,"f":-2}"#.to_vec());
    }

    #[test]
    fn overlapping_and_byte_columns() {
        let job = |q: &str| Job {
            request_id: "r".into(),
            operation: ToolOperation::FsSearch,
            payload: json!({"path": "x", "query": q}),
            budget: 1 << 20,
            cancel: crate::adapter::fs::Cancel::new(),
        };
        let d = json!({"matches": [{"path": "x", "line": 1, "column": 1, "text": "aaaa"},
                                   {"path": "x", "line": 1, "column": 3, "text": "aaaa"}], "truncated": false});
        let cols: Vec<u64> = search_overlapping(&job("aa"), d)["matches"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["column"].as_u64().unwrap())
            .collect();
        assert_eq!(cols, vec![1, 2, 3]);
        let d = json!({"matches": [{"path": "u", "line": 1, "column": 4, "text": "é€😀needle"}], "truncated": false});
        assert_eq!(search_byte_columns(d)["matches"][0]["column"], 10);
    }
}
