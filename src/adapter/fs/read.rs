//! `fs.read` (SPEC §5.3): a UTF-8 window read with `pread`, never the whole file.

use std::os::fd::OwnedFd;

use rustix::fs::Stat;
use serde_json::Value;

use super::budget::{self, data, escaped_char_len};
use super::guard::{FileKey, Guard};
use super::pread::pread_at;
use super::resolve::{self, err, io_error, Want};
use super::{Cancel, Root, MAX_READ_BYTES};
use crate::contract::types::tool_adapter::{ByteCount, FsReadData};
use crate::contract::{AdapterCode, AdapterError, ToolPath};

fn not_utf8() -> AdapterError {
    err(AdapterCode::NotUtf8, "the file is not valid UTF-8 in the requested window")
}

/// Whether `b` continues a multi-byte UTF-8 sequence.
pub(super) fn is_continuation(b: u8) -> bool {
    b & 0xC0 == 0x80
}

/// Length of the UTF-8 sequence a lead byte announces, `None` for a byte that cannot lead.
fn sequence_len(b: u8) -> Option<usize> {
    match b {
        0x00..=0x7F => Some(1),
        0xC2..=0xDF => Some(2),
        0xE0..=0xEF => Some(3),
        0xF0..=0xF4 => Some(4),
        _ => None,
    }
}

/// Compact JSON length of `{"content":"<escaped>","bytesRead":n,"eof":b}`.
fn data_len(escaped: usize, bytes_read: usize, eof: bool) -> usize {
    let digits = bytes_read.checked_ilog10().map_or(1, |d| d as usize + 1);
    r#"{"content":"","bytesRead":,"eof":}"#.len() + escaped + digits + if eof { 4 } else { 5 }
}

/// `fs.read`. With `scan_limit`, `None` when the content guard would have to scan more than
/// that many bytes (the caller runs the read elsewhere); otherwise always `Some`.
pub(super) fn read(
    root: &Root,
    path: &ToolPath,
    offset: Option<u64>,
    max_bytes: Option<u64>,
    budget: usize,
    cancel: &Cancel,
    scan_limit: Option<u64>,
) -> Option<Result<Value, AdapterError>> {
    let max = max_bytes.unwrap_or(MAX_READ_BYTES);
    if !(1..=MAX_READ_BYTES).contains(&max) {
        return Some(Err(err(AdapterCode::InvalidRequest, "maxBytes must be 1-4194304")));
    }
    let (fd, st, _) = match root.open_existing(path, Want::File) {
        Ok(x) => x,
        Err(e) => return Some(Err(e)),
    };
    if let (Some(limit), Some(g)) = (scan_limit, &root.guard) {
        if resolve::size_of(&st) > limit && !g.is_cached_clean(&st) {
            return None;
        }
    }
    Some(guarded(root, &fd, &st, cancel).and_then(|()| {
        let offset = offset.unwrap_or(0);
        let data = window(&fd, &st, offset, max, budget, None)?;
        if let Some(g) = &root.guard {
            // The guard judged the file's first `st_size` bytes, the snapshot the window stays
            // inside. If the file changed since (a log being appended to, say), the window is
            // read again with the bytes around it and all of them are scanned: no handle
            // written meanwhile can leave in pieces, and a growing file still gets an answer
            // (issue 25, N6) instead of waiting for it to stand still.
            let after = rustix::fs::fstat(&fd).map_err(resolve::map_errno)?;
            if !FileKey::of(&after).same_content(&FileKey::of(&st)) {
                return window(&fd, &st, offset, max, budget, Some(g));
            }
        }
        Ok(data)
    }))
}

/// What every read of a regular file's content passes first (issue 15, F7/F8): a file with
/// more than one hard link is `permission_denied` (another name of it may lie outside the
/// root), and, under a content guard, a file holding a capability handle anywhere is
/// `capability_in_content`.
pub(super) fn guarded(root: &Root, fd: &OwnedFd, st: &Stat, cancel: &Cancel) -> Result<(), AdapterError> {
    resolve::single_link(st)?;
    match &root.guard {
        Some(g) => g.check_file(fd, st, cancel),
        None => Ok(()),
    }
}

/// The window `[offset, offset + max)` of the open file, inside its first `st_size` bytes.
/// With a `guard`, the window is read together with [`Guard::context`] bytes on each side
/// (past `st_size` too, where the file grew) and all of them must hold no handle.
fn window(
    fd: &OwnedFd,
    st: &Stat,
    offset: u64,
    max: u64,
    budget: usize,
    guard: Option<&Guard>,
) -> Result<Value, AdapterError> {
    let size = resolve::size_of(st);
    if offset >= size {
        return finish(String::new(), 0, true, budget);
    }
    let window = max.min(size - offset) as usize;
    // Up to three bytes past the window tell a character cut by the window from a broken one.
    let lookahead = (size - offset).min(window as u64 + 3) as usize;
    let buf = match guard {
        None => pread_at(fd, offset, lookahead)?,
        Some(g) => {
            let ctx = g.context();
            let before = offset.min(ctx as u64) as usize;
            let mut all = pread_at(fd, offset - before as u64, before + lookahead + ctx)?;
            g.check_bytes(&all)?;
            all.drain(..before.min(all.len()));
            all.truncate(lookahead);
            all
        }
    };
    if buf.is_empty() {
        // The file shrank under us: the offset is now at or past its end.
        return finish(String::new(), 0, true, budget);
    }
    // The end of file as this read observed it.
    let end_of_file = if buf.len() < lookahead { offset + buf.len() as u64 } else { size };
    let window = window.min(buf.len());
    if is_continuation(buf[0]) {
        return Err(offset_error(fd, offset, &buf)?);
    }
    let valid = match std::str::from_utf8(&buf) {
        Ok(_) => buf.len(),
        Err(e) => e.valid_up_to(),
    };
    if valid < window {
        // Invalid bytes inside the window, or a character truncated by the end of file.
        return Err(not_utf8());
    }
    let mut end = window;
    if end < valid {
        while end > 0 && is_continuation(buf[end]) {
            end -= 1;
        }
    }
    let text = std::str::from_utf8(&buf[..end]).map_err(|_| not_utf8())?;
    // The whole window usually fits: one pass over the bytes settles it.
    let eof = offset + text.len() as u64 == end_of_file;
    if data_len(escaped_len(text), text.len(), eof) <= budget {
        // `data_len` is exact (unit test), so the result is known to fit.
        let data = read_data(text.to_string(), text.len(), eof);
        debug_assert!(budget::json_len(&data) <= budget);
        return Ok(data);
    }
    // Shorten to the longest prefix whose escaped form fits the budget. The total only
    // grows with each character (`eof` turning true saves one byte but only on the last
    // character, which adds at least one), so stop at the first that does not fit.
    let mut escaped = 0;
    let mut fits = 0;
    for (i, c) in text.char_indices() {
        let bytes = i + c.len_utf8();
        escaped += escaped_char_len(c);
        let eof = offset + bytes as u64 == end_of_file;
        if data_len(escaped, bytes, eof) > budget {
            break;
        }
        fits = bytes;
    }
    if fits == 0 && !text.is_empty() {
        return Err(budget::too_large());
    }
    finish(text[..fits].to_string(), fits, offset + fits as u64 == end_of_file, budget)
}

/// The escaped length of `text` inside a JSON string: the sum of [`escaped_char_len`] over
/// its characters, counted byte by byte (a byte of a multi-byte character is never escaped).
fn escaped_len(text: &str) -> usize {
    let special = |b: &u8| *b < 0x20 || *b == b'"' || *b == b'\\';
    // Most text has nothing to escape; this count is a plain vectorizable comparison.
    if !text.as_bytes().iter().any(special) {
        return text.len();
    }
    let extra: usize = text
        .bytes()
        .map(|b| match b {
            b'"' | b'\\' | 0x08 | b'\t' | b'\n' | 0x0c | b'\r' => 1,
            0x00..=0x1f => 5,
            _ => 0,
        })
        .sum();
    text.len() + extra
}

/// The `data` of an `fs.read` result.
fn read_data(content: String, bytes_read: usize, eof: bool) -> Value {
    data(&FsReadData { bytes_read: ByteCount(bytes_read as i64), content, eof })
}

fn finish(content: String, bytes_read: usize, eof: bool, budget: usize) -> Result<Value, AdapterError> {
    let data = read_data(content, bytes_read, eof);
    budget::ensure_fits(&data, budget)?;
    Ok(data)
}

/// The window starts with a continuation byte: `invalid_offset` if it lies inside a valid
/// multi-byte character, `not_utf8` if the bytes there are not UTF-8 at all.
fn offset_error(fd: &OwnedFd, offset: u64, window: &[u8]) -> Result<AdapterError, AdapterError> {
    let back = offset.min(3);
    let mut bytes = pread_at(fd, offset - back, back as usize)?;
    if bytes.len() != back as usize {
        return Err(io_error());
    }
    let before = bytes.len();
    bytes.extend_from_slice(&window[..window.len().min(3)]);
    for lead in (0..before).rev() {
        let b = bytes[lead];
        if is_continuation(b) {
            continue;
        }
        let spans_offset = sequence_len(b).is_some_and(|n| lead + n > before && lead + n <= bytes.len());
        if spans_offset && std::str::from_utf8(&bytes[lead..lead + sequence_len(b).unwrap_or(1)]).is_ok() {
            return Ok(err(AdapterCode::InvalidOffset, "offset is inside a multi-byte character"));
        }
        break;
    }
    Ok(not_utf8())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn escaped_len_is_the_sum_of_escaped_char_lens() {
        let mut all: String = (0u32..0x300).filter_map(char::from_u32).collect();
        all.push_str("\u{2028}\u{fffd}\u{1f600}\u{10ffff}\u{7f}\"\\ plain text");
        for text in [all.as_str(), "", "abc", "\r\n", "日本語\u{0}"] {
            let want: usize = text.chars().map(escaped_char_len).sum();
            assert_eq!(escaped_len(text), want, "{text:?}");
            assert_eq!(escaped_len(text), serde_json::to_string(text).unwrap().len() - 2);
        }
    }

    #[test]
    fn data_len_matches_serde() {
        for (content, n, eof) in [("", 0, true), ("a\"\\\n\u{1}é", 9, false), ("x", 12345, true)] {
            let escaped: usize = content.chars().map(escaped_char_len).sum();
            let v = json!({"content": content, "bytesRead": n, "eof": eof});
            assert_eq!(data_len(escaped, n, eof), budget::json_len(&v));
        }
    }
}
