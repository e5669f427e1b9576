//! One-pass acceptance: the validator's accept path for adapter frames and descriptors.
//!
//! A line is decoded once, straight into small typed views that borrow their strings from the
//! line (`serde` with `deny_unknown_fields`; no `serde_json::Value`, no map, no hashing), and
//! every rule of the sibling modules is checked on the views with the same predicates
//! (`text`, `path`, the key lists of `frame`, the ranges of `descriptor`). The answer is only
//! ever "accepted" or "not decided here": on anything else — a refusal, or a form this path
//! does not handle (integral floats such as `2.0`, `\u` escapes, `bind`/`bound`) — the caller
//! runs the full path (strict decode into a `Value`, the rules, and the JSON Schema where it
//! is evaluated), which alone reports codes, fields and dispositions. So a verdict can differ
//! from the full path's only if this path accepts a document the full path refuses;
//! `tests/fast_path.rs` judges every golden vector and every single perturbation of each on
//! both paths and requires the identical verdict.
//!
//! Why each strictness rule of `wire::decode_strict` holds here too:
//! - **one JSON text, UTF-8, no BOM**: the whole line is checked to be UTF-8, `serde_json`
//!   parses it and `end()` refuses trailing bytes; a BOM is not JSON syntax;
//! - **duplicate keys at any depth**: every object is a derived struct whose fields are all
//!   known (`deny_unknown_fields`), and a derived struct refuses a repeated field;
//! - **objects are objects**: a derived struct would also accept a JSON array positionally,
//!   so every struct is read through [`Obj`], which asks for a map;
//! - **integer forms**: integers are read as `u64`; a float form (`2.0`, `1e3`) is not
//!   decided here (the full path normalizes it);
//! - **`null` is not absence**: optional members are [`Opt`], which is absent only when the
//!   key is, and otherwise decodes the member's own type (so `null` is refused, as by the
//!   rules).
//!
//! The handle scan: a frame must not carry the binding's handle in any key or string. Keys
//! here are known names (shorter than any handle). For strings, the raw line is searched
//! instead of each decoded string, which is equivalent when the line has no `\u` escape: the
//! other escapes decode to `"`, `\`, `/` or a control character, none of which is a base64url
//! character, so every occurrence of a (base64url) handle in a decoded string is a run of
//! literal characters, and therefore also an occurrence in the raw line. A line with `\u`
//! anywhere, or with the handle anywhere, is left to the full path.

use std::borrow::Cow;
use std::marker::PhantomData;

use serde::de::value::MapAccessDeserializer;
use serde::de::{MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

use super::descriptor::{fit_check, Descriptor, ExpectedBinding, Identity, Limits, LIMITS, MAX_SAFE_INTEGER};
use super::frame::{allowed_keys, data_keys, is_entry_name, payload_keys, Binding, Direction, FrameKind};
use super::frame::{IDENTITY_KEYS, MAX_CONTENT_BYTES};
use super::path::{is_valid_path, PathSide};
use super::secret::CapabilityHandle;
use super::text::{
    has_control, is_adapter_id, is_base64url, is_digest, is_error_code, is_frame_id, is_semver, is_timestamp, units_in,
    utf16_len,
};
use super::types::tool_adapter::ToolOperation;

/// A JSON string: borrowed from the line unless it had escapes.
#[derive(Debug)]
struct Str<'a>(Cow<'a, str>);

impl Str<'_> {
    fn as_str(&self) -> &str {
        &self.0
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Str<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Str<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Str<'a>, E> {
                Ok(Str(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Str<'a>, E> {
                Ok(Str(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E>(self, v: String) -> Result<Str<'a>, E> {
                Ok(Str(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V(PhantomData))
    }
}

/// An optional member: `None` only when the key is absent. A present member (`null`
/// included) must decode as `T`.
#[derive(Debug)]
struct Opt<T>(Option<T>);

impl<T> Default for Opt<T> {
    fn default() -> Self {
        Opt(None)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Opt<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        T::deserialize(d).map(|v| Opt(Some(v)))
    }
}

impl<T> Opt<T> {
    fn get(&self) -> Option<&T> {
        self.0.as_ref()
    }
    fn present(&self) -> bool {
        self.0.is_some()
    }
}

impl Opt<Str<'_>> {
    fn str(&self) -> Option<&str> {
        self.0.as_ref().map(Str::as_str)
    }
}

/// A JSON object decoded as the struct `T` (never a JSON array, which a derived struct would
/// also take, positionally).
#[derive(Debug)]
struct Obj<T>(T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Obj<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = Obj<T>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Obj<T>, A::Error> {
                T::deserialize(MapAccessDeserializer::new(map)).map(Obj)
            }
        }
        d.deserialize_map(V(PhantomData))
    }
}

/// An integer member within `lo..=hi` (every range here is within the safe integers).
fn int_in(v: Option<&u64>, lo: u64, hi: u64) -> bool {
    v.is_some_and(|n| (lo..=hi).contains(n) && *n <= MAX_SAFE_INTEGER)
}

fn opt_int_in(v: &Opt<u64>, lo: u64, hi: u64) -> bool {
    !v.present() || int_in(v.get(), lo, hi)
}

/// Every key present is one of `allowed`.
fn closed(present: &[(&str, bool)], allowed: &[&str]) -> bool {
    present.iter().all(|(k, p)| !*p || allowed.contains(k))
}

/// Decode `line` as exactly one JSON text of type `T` (a JSON object). The line is checked to
/// be UTF-8 once, as a whole (cheaper than `serde_json` checking every string on its own).
fn decode<'a, T: Deserialize<'a>>(line: &'a [u8]) -> Option<T> {
    let text = std::str::from_utf8(line).ok()?;
    let mut de = serde_json::Deserializer::from_str(text);
    let v = Obj::<T>::deserialize(&mut de).ok()?;
    de.end().ok()?;
    Some(v.0)
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
struct FrameView<'a> {
    #[serde(borrow)]
    kind: Opt<Str<'a>>,
    #[serde(borrow)]
    protocol_version: Opt<Str<'a>>,
    #[serde(borrow)]
    adapter_id: Opt<Str<'a>>,
    #[serde(borrow)]
    adapter_version: Opt<Str<'a>>,
    #[serde(borrow)]
    host_instance_id: Opt<Str<'a>>,
    #[serde(borrow)]
    session_id: Opt<Str<'a>>,
    generation: Opt<u64>,
    #[serde(borrow)]
    request_id: Opt<Str<'a>>,
    #[serde(borrow)]
    idempotency_key: Opt<Str<'a>>,
    #[serde(borrow)]
    target_request_id: Opt<Str<'a>>,
    #[serde(borrow)]
    operation: Opt<Str<'a>>,
    // Boxed: the views of payload, data and error are large, and a derived struct is built
    // from locals and moved out; a box keeps the frame view small to move.
    #[serde(borrow)]
    payload: Opt<Box<Obj<PayloadView<'a>>>>,
    ok: Opt<bool>,
    #[serde(borrow)]
    data: Opt<Box<Obj<DataView<'a>>>>,
    #[serde(borrow)]
    error: Opt<Box<Obj<ErrorView<'a>>>>,
    aborted: Opt<bool>,
}

impl FrameView<'_> {
    /// The keys present, by their wire names.
    fn keys(&self) -> [(&'static str, bool); 16] {
        [
            ("kind", self.kind.present()),
            ("protocolVersion", self.protocol_version.present()),
            ("adapterId", self.adapter_id.present()),
            ("adapterVersion", self.adapter_version.present()),
            ("hostInstanceId", self.host_instance_id.present()),
            ("sessionId", self.session_id.present()),
            ("generation", self.generation.present()),
            ("requestId", self.request_id.present()),
            ("idempotencyKey", self.idempotency_key.present()),
            ("targetRequestId", self.target_request_id.present()),
            ("operation", self.operation.present()),
            ("payload", self.payload.present()),
            ("ok", self.ok.present()),
            ("data", self.data.present()),
            ("error", self.error.present()),
            ("aborted", self.aborted.present()),
        ]
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
struct PayloadView<'a> {
    #[serde(borrow)]
    path: Opt<Str<'a>>,
    max_entries: Opt<u64>,
    offset: Opt<u64>,
    max_bytes: Opt<u64>,
    #[serde(borrow)]
    query: Opt<Str<'a>>,
    max_results: Opt<u64>,
    #[serde(borrow)]
    content: Opt<Str<'a>>,
    create: Opt<bool>,
    overwrite: Opt<bool>,
    #[serde(borrow)]
    expected_digest: Opt<Str<'a>>,
    #[serde(borrow)]
    edits: Opt<Vec<Obj<EditView<'a>>>>,
}

impl PayloadView<'_> {
    fn keys(&self) -> [(&'static str, bool); 11] {
        [
            ("path", self.path.present()),
            ("maxEntries", self.max_entries.present()),
            ("offset", self.offset.present()),
            ("maxBytes", self.max_bytes.present()),
            ("query", self.query.present()),
            ("maxResults", self.max_results.present()),
            ("content", self.content.present()),
            ("create", self.create.present()),
            ("overwrite", self.overwrite.present()),
            ("expectedDigest", self.expected_digest.present()),
            ("edits", self.edits.present()),
        ]
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
struct EditView<'a> {
    #[serde(borrow)]
    old_text: Opt<Str<'a>>,
    #[serde(borrow)]
    new_text: Opt<Str<'a>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
struct DataView<'a> {
    #[serde(rename = "type", borrow)]
    kind: Opt<Str<'a>>,
    size: Opt<u64>,
    #[serde(borrow)]
    modified_at: Opt<Str<'a>>,
    #[serde(borrow)]
    content: Opt<Str<'a>>,
    bytes_read: Opt<u64>,
    eof: Opt<bool>,
    #[serde(borrow)]
    entries: Opt<Vec<Obj<EntryView<'a>>>>,
    truncated: Opt<bool>,
    #[serde(borrow)]
    matches: Opt<Vec<Obj<MatchView<'a>>>>,
    created: Opt<bool>,
    bytes_written: Opt<u64>,
    #[serde(borrow)]
    digest: Opt<Str<'a>>,
    replacements: Opt<u64>,
}

impl DataView<'_> {
    fn keys(&self) -> [(&'static str, bool); 13] {
        [
            ("type", self.kind.present()),
            ("size", self.size.present()),
            ("modifiedAt", self.modified_at.present()),
            ("content", self.content.present()),
            ("bytesRead", self.bytes_read.present()),
            ("eof", self.eof.present()),
            ("entries", self.entries.present()),
            ("truncated", self.truncated.present()),
            ("matches", self.matches.present()),
            ("created", self.created.present()),
            ("bytesWritten", self.bytes_written.present()),
            ("digest", self.digest.present()),
            ("replacements", self.replacements.present()),
        ]
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
struct EntryView<'a> {
    #[serde(borrow)]
    name: Opt<Str<'a>>,
    #[serde(rename = "type", borrow)]
    kind: Opt<Str<'a>>,
    size: Opt<u64>,
    #[serde(borrow)]
    modified_at: Opt<Str<'a>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
struct MatchView<'a> {
    #[serde(borrow)]
    path: Opt<Str<'a>>,
    line: Opt<u64>,
    column: Opt<u64>,
    #[serde(borrow)]
    text: Opt<Str<'a>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
struct ErrorView<'a> {
    #[serde(borrow)]
    code: Opt<Str<'a>>,
    #[serde(borrow)]
    message: Opt<Str<'a>>,
    retryable: Opt<bool>,
}

/// Whether the line may be judged here at all: no `\u` escape, and not the handle anywhere
/// (see the module documentation).
fn scannable(line: &[u8], handle: &CapabilityHandle) -> bool {
    // A backslash followed by `u` (an escaped backslash before a `u` also declines: harmless).
    let unicode_escape = memchr::memchr_iter(b'\\', line).any(|i| line.get(i + 1) == Some(&b'u'));
    !unicode_escape && !handle.occurs_in(line)
}

/// `Some(kind)` when the line (LF excluded) is an adapter frame that the full path accepts
/// travelling in `dir` on `binding`; `None` when this path does not decide (the caller then
/// runs the full path). Always `None` inside `schema::with_schema_confirmation`, so that the
/// full path there is the whole validator as it was.
pub fn accept_frame(line: &[u8], binding: &Binding, dir: Direction) -> Option<FrameKind> {
    if super::schema::confirming() || line.len() as u64 + 1 > binding.line_limit(dir) {
        return None;
    }
    if !scannable(line, &binding.handle) {
        return None;
    }
    let f: FrameView<'_> = decode(line)?;
    let kind = f.kind.str()?;
    // bind and bound (a handle, operations, limits) are left to the full path.
    if !dir.kinds().contains(&kind) || kind == "bind" || kind == "bound" {
        return None;
    }
    let extra = allowed_keys(kind);
    if !f.keys().iter().all(|(k, p)| !*p || *k == "kind" || IDENTITY_KEYS.contains(k) || extra.contains(k)) {
        return None;
    }
    let id = &binding.identity;
    let same = f.protocol_version.str() == Some(id.protocol_version.as_str())
        && f.adapter_id.str() == Some(id.adapter_id.as_str())
        && f.adapter_version.str() == Some(id.adapter_version.as_str())
        && f.host_instance_id.str() == Some(id.host_instance_id.as_str())
        && f.session_id.str() == Some(id.session_id.as_str())
        && f.generation.get().is_some_and(|g| *g <= MAX_SAFE_INTEGER && *g == id.generation);
    if !same {
        return None;
    }
    let id_ok = |v: &Opt<Str<'_>>, max: usize| v.str().is_some_and(|s| s.len() <= max && is_frame_id(s));
    let op =
        || f.operation.str().and_then(|s| s.parse::<ToolOperation>().ok()).filter(|op| binding.operations.contains(op));
    match kind {
        "invoke" => {
            if !(id_ok(&f.request_id, 128) && id_ok(&f.idempotency_key, 512)) {
                return None;
            }
            let op = op()?;
            payload_ok(op, &f.payload.get()?.0).then_some(FrameKind::Invoke(op))
        }
        "result" => {
            if !(id_ok(&f.request_id, 128) && id_ok(&f.idempotency_key, 512)) {
                return None;
            }
            let op = op()?;
            let ok = *f.ok.get()?;
            let fine = if ok {
                !f.error.present() && f.data.get().is_some_and(|d| data_ok(op, &d.0))
            } else {
                !f.data.present() && f.error.get().is_some_and(|e| error_ok(&e.0))
            };
            fine.then_some(FrameKind::Result { operation: op, ok })
        }
        "abort" => (id_ok(&f.request_id, 128) && id_ok(&f.target_request_id, 128)).then_some(FrameKind::Abort),
        "aborted" => {
            if !(id_ok(&f.request_id, 128) && id_ok(&f.target_request_id, 128)) {
                return None;
            }
            let aborted = *f.aborted.get()?;
            let fine = match f.error.get() {
                None => true,
                Some(_) if aborted => false,
                Some(e) => error_ok(&e.0),
            };
            fine.then_some(FrameKind::Aborted(aborted))
        }
        "revoke" => Some(FrameKind::Revoke),
        "revoked" => Some(FrameKind::Revoked),
        _ => None,
    }
}

/// `frame::check_invoke_payload` accepts the payload.
fn payload_ok(op: ToolOperation, p: &PayloadView<'_>) -> bool {
    if !closed(&p.keys(), payload_keys(op)) {
        return false;
    }
    if !p.path.str().is_some_and(|s| is_valid_path(s, PathSide::Adapter, false)) {
        return false;
    }
    match op {
        ToolOperation::FsList => opt_int_in(&p.max_entries, 1, 10_000),
        ToolOperation::FsStat => true,
        ToolOperation::FsRead => {
            opt_int_in(&p.offset, 0, MAX_SAFE_INTEGER) && opt_int_in(&p.max_bytes, 1, MAX_CONTENT_BYTES as u64)
        }
        ToolOperation::FsSearch => {
            p.query.str().is_some_and(|q| units_in(q, 4096) && !q.contains(['\r', '\n']))
                && opt_int_in(&p.max_results, 1, 10_000)
        }
        ToolOperation::FsWrite => {
            p.content.str().is_some_and(|s| s.len() <= MAX_CONTENT_BYTES)
                && p.expected_digest.str().is_none_or(is_digest)
        }
        ToolOperation::FsEdit => {
            p.edits.get().is_some_and(|e| {
                (1..=256).contains(&e.len())
                    && e.iter().all(|Obj(e)| e.old_text.str().is_some_and(|t| !t.is_empty()) && e.new_text.present())
            }) && p.expected_digest.str().is_none_or(is_digest)
        }
    }
}

fn entry_type_ok(t: &Opt<Str<'_>>) -> bool {
    matches!(t.str(), Some("file" | "directory"))
}

/// `frame::check_result_data` accepts the data.
fn data_ok(op: ToolOperation, d: &DataView<'_>) -> bool {
    if !closed(&d.keys(), data_keys(op)) {
        return false;
    }
    let bytes = MAX_CONTENT_BYTES as u64;
    match op {
        ToolOperation::FsList => {
            d.entries.get().is_some_and(|e| {
                e.len() <= 10_000
                    && e.iter().all(|Obj(e)| {
                        e.name.str().is_some_and(is_entry_name)
                            && entry_type_ok(&e.kind)
                            && opt_int_in(&e.size, 0, MAX_SAFE_INTEGER)
                            && e.modified_at.str().is_none_or(is_timestamp)
                    })
            }) && d.truncated.present()
        }
        ToolOperation::FsStat => {
            entry_type_ok(&d.kind)
                && int_in(d.size.get(), 0, MAX_SAFE_INTEGER)
                && d.modified_at.str().is_none_or(is_timestamp)
        }
        ToolOperation::FsRead => {
            d.content.str().is_some_and(|s| s.len() <= MAX_CONTENT_BYTES)
                && int_in(d.bytes_read.get(), 0, bytes)
                && d.eof.present()
        }
        ToolOperation::FsSearch => {
            d.matches.get().is_some_and(|m| {
                m.len() <= 10_000
                    && m.iter().all(|Obj(m)| {
                        m.path.str().is_some_and(|p| is_valid_path(p, PathSide::Adapter, true))
                            && int_in(m.line.get(), 1, MAX_SAFE_INTEGER)
                            && int_in(m.column.get(), 1, MAX_SAFE_INTEGER)
                            && m.text.str().is_some_and(|t| utf16_len(t) <= 4096)
                    })
            }) && d.truncated.present()
        }
        ToolOperation::FsWrite => {
            d.created.present() && int_in(d.bytes_written.get(), 0, bytes) && d.digest.str().is_some_and(is_digest)
        }
        ToolOperation::FsEdit => int_in(d.replacements.get(), 0, 256) && d.digest.str().is_some_and(is_digest),
    }
}

/// `frame::check_error_body` accepts the error body.
fn error_ok(e: &ErrorView<'_>) -> bool {
    e.code.str().is_some_and(|s| s.len() <= 128 && is_error_code(s))
        && e.message.str().is_some_and(|s| units_in(s, 1024))
        && e.retryable.present()
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
struct DescriptorView<'a> {
    #[serde(borrow)]
    protocol_version: Opt<Str<'a>>,
    #[serde(borrow)]
    adapter_id: Opt<Str<'a>>,
    #[serde(borrow)]
    adapter_version: Opt<Str<'a>>,
    #[serde(borrow)]
    endpoint: Opt<Obj<EndpointView<'a>>>,
    #[serde(borrow)]
    binding: Opt<Obj<BindingView<'a>>>,
    #[serde(borrow)]
    operations: Opt<Vec<Str<'a>>>,
    limits: Opt<Obj<LimitsView>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
struct EndpointView<'a> {
    #[serde(borrow)]
    transport: Opt<Str<'a>>,
    #[serde(borrow)]
    path: Opt<Str<'a>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
struct BindingView<'a> {
    #[serde(borrow)]
    host_instance_id: Opt<Str<'a>>,
    #[serde(borrow)]
    session_id: Opt<Str<'a>>,
    generation: Opt<u64>,
    #[serde(borrow)]
    capability_handle: Opt<Str<'a>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
struct LimitsView {
    max_request_bytes: Opt<u64>,
    max_response_bytes: Opt<u64>,
    max_concurrent_requests: Opt<u64>,
    max_queued_requests: Opt<u64>,
    request_timeout_ms: Opt<u64>,
    max_idempotency_keys: Opt<u64>,
    idempotency_ttl_ms: Opt<u64>,
}

impl LimitsView {
    /// The seven values in the canonical order of [`LIMITS`].
    fn values(&self) -> [Option<u64>; 7] {
        [
            self.max_request_bytes.0,
            self.max_response_bytes.0,
            self.max_concurrent_requests.0,
            self.max_queued_requests.0,
            self.request_timeout_ms.0,
            self.max_idempotency_keys.0,
            self.idempotency_ttl_ms.0,
        ]
    }
}

/// `Some(descriptor)` when the line (LF excluded) is a descriptor that
/// `admit_descriptor(&decode_strict(line)?, expected)` admits, with the same result; `None`
/// when this path does not decide. Always `None` inside `schema::with_schema_confirmation`.
pub fn accept_descriptor(line: &[u8], expected: Option<&ExpectedBinding<'_>>) -> Option<Descriptor> {
    if super::schema::confirming() {
        return None;
    }
    let d: DescriptorView<'_> = decode(line)?;
    let pv = d.protocol_version.str().filter(|s| *s == "1.0")?;
    let aid = d.adapter_id.str().filter(|s| units_in(s, 128) && is_adapter_id(s))?;
    let aver = d.adapter_version.str().filter(|s| units_in(s, 64) && is_semver(s))?;
    let ep = &d.endpoint.get()?.0;
    if ep.transport.str() != Some("unix") {
        return None;
    }
    let ep_path = ep.path.str().filter(|s| units_in(s, 4096) && super::descriptor::is_endpoint_path(s))?;
    let b = &d.binding.get()?.0;
    let host = b.host_instance_id.str().filter(|s| units_in(s, 128) && !has_control(s))?;
    let session = b.session_id.str().filter(|s| units_in(s, 256) && !has_control(s))?;
    let generation = *b.generation.get().filter(|g| **g <= MAX_SAFE_INTEGER)?;
    let handle = b.capability_handle.str().filter(|s| (32..=512).contains(&s.len()) && is_base64url(s))?;
    if [aid, aver, ep_path, host, session].iter().any(|s| s.contains(handle)) {
        return None;
    }
    if let Some(exp) = expected {
        if host != exp.host_instance_id || session != exp.session_id || generation as i64 != exp.generation {
            return None;
        }
    }
    let ops = d.operations.get().filter(|o| (1..=6).contains(&o.len()))?;
    let mut operations: Vec<ToolOperation> = Vec::with_capacity(ops.len());
    for o in ops {
        let op: ToolOperation = o.as_str().parse().ok()?;
        if operations.contains(&op) {
            return None;
        }
        operations.push(op);
    }
    let given = d.limits.get()?.0.values();
    let mut vals = [0u64; 7];
    for (i, ((_, lo, hi), v)) in LIMITS.iter().zip(given).enumerate() {
        vals[i] = v.filter(|n| (*lo..=*hi).contains(n))?;
    }
    let limits = Limits::from_values(vals);
    let identity = Identity {
        protocol_version: pv.to_string(),
        adapter_id: aid.to_string(),
        adapter_version: aver.to_string(),
        host_instance_id: host.to_string(),
        session_id: session.to_string(),
        generation,
    };
    let handle = CapabilityHandle::new(handle);
    let ops_json =
        serde_json::Value::Array(operations.iter().map(|o| serde_json::Value::String(o.to_string())).collect());
    let (bind_bytes, bound_bytes) = fit_check(&identity, &handle, &ops_json, &limits, "descriptor.limits.").ok()?;
    Some(Descriptor {
        identity,
        endpoint_path: ep_path.to_string(),
        handle,
        operations,
        limits,
        bind_bytes,
        bound_bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::descriptor::admit_descriptor;
    use serde_json::{json, Value};

    fn base(name: &str) -> Value {
        let path = format!("{}/vectors/bases/{name}.json", env!("CARGO_MANIFEST_DIR"));
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    const EXP: ExpectedBinding<'static> =
        ExpectedBinding { host_instance_id: "host-019f", session_id: "agent-a", generation: 2 };

    fn binding() -> Binding {
        Binding::from(&admit_descriptor(&base("descriptor"), Some(&EXP)).unwrap())
    }

    fn line(v: &Value) -> Vec<u8> {
        serde_json::to_vec(v).unwrap()
    }

    #[test]
    fn base_frames_are_accepted_in_one_pass() {
        let b = binding();
        for (name, dir) in [
            ("invoke", Direction::ToAdapter),
            ("abort", Direction::ToAdapter),
            ("revoke", Direction::ToAdapter),
            ("result", Direction::ToDaemon),
            ("result-error", Direction::ToDaemon),
            ("aborted", Direction::ToDaemon),
            ("revoked", Direction::ToDaemon),
        ] {
            let l = line(&base(name));
            let full = crate::contract::frame::judge_adapter_frame(&l, &b, dir).unwrap().kind;
            assert_eq!(accept_frame(&l, &b, dir), Some(full), "{name}");
        }
    }

    #[test]
    fn forms_left_to_the_full_path() {
        let b = binding();
        let d = Direction::ToAdapter;
        let inv = line(&base("invoke"));
        let text = String::from_utf8(inv.clone()).unwrap();
        assert!(accept_frame(&inv, &b, d).is_some());
        // Duplicate keys, at the top and nested.
        let dup = text.replacen("\"kind\":\"invoke\"", "\"kind\":\"invoke\",\"kind\":\"invoke\"", 1);
        assert_eq!(accept_frame(dup.as_bytes(), &b, d), None);
        let dup = text.replacen("\"offset\":0", "\"offset\":0,\"offset\":0", 1);
        assert_ne!(dup, text);
        assert_eq!(accept_frame(dup.as_bytes(), &b, d), None);
        // A BOM, trailing bytes, an array where an object is due, null for an optional member.
        assert_eq!(accept_frame(&[b"\xef\xbb\xbf".as_slice(), &inv].concat(), &b, d), None);
        assert_eq!(accept_frame(&[inv.as_slice(), b" {}"].concat(), &b, d), None);
        let arr = text.replacen(
            "{\"path\":\"src/protocol.ts\",\"offset\":0,\"maxBytes\":4096}",
            "[\"src/protocol.ts\",0,4096]",
            1,
        );
        assert_ne!(arr, text);
        assert_eq!(accept_frame(arr.as_bytes(), &b, d), None);
        let null = text.replacen("\"offset\":0", "\"offset\":null", 1);
        assert_eq!(accept_frame(null.as_bytes(), &b, d), None);
        // An integral float is not decided here (the full path accepts it).
        let float = text.replacen("\"generation\":2", "\"generation\":2.0", 1);
        assert_eq!(accept_frame(float.as_bytes(), &b, d), None);
        assert!(crate::contract::frame::judge_adapter_frame(float.as_bytes(), &b, d).is_ok());
        // A \u escape anywhere, and the handle anywhere (even escaped).
        let esc = text.replacen("src/protocol.ts", "src/prot\\u006fcol.ts", 1);
        assert_eq!(accept_frame(esc.as_bytes(), &b, d), None);
        assert!(crate::contract::frame::judge_adapter_frame(esc.as_bytes(), &b, d).is_ok());
        let h = b.handle.expose().to_string();
        let with = text.replacen("src/protocol.ts", &format!("src/{h}.ts"), 1);
        assert_eq!(accept_frame(with.as_bytes(), &b, d), None);
        let hidden = format!("\\u{:04x}{}", h.as_bytes()[0], &h[1..]);
        let with = text.replacen("src/protocol.ts", &format!("src/{hidden}.ts"), 1);
        assert_eq!(accept_frame(with.as_bytes(), &b, d), None);
        assert!(crate::contract::frame::judge_adapter_frame(with.as_bytes(), &b, d).is_err());
    }

    #[test]
    fn descriptor_accepted_in_one_pass_equals_admission() {
        let v = base("descriptor");
        let one = accept_descriptor(&line(&v), Some(&EXP)).expect("the worked example");
        let full = admit_descriptor(&v, Some(&EXP)).unwrap();
        assert_eq!(format!("{one:?}"), format!("{full:?}"));
        let mut other = v.clone();
        other["binding"]["sessionId"] = json!("agent-b");
        assert!(accept_descriptor(&line(&other), Some(&EXP)).is_none());
        assert!(accept_descriptor(&line(&other), None).is_some());
        let mut extra = v.clone();
        extra["limits"]["maxFoo"] = json!(1);
        assert!(accept_descriptor(&line(&extra), None).is_none());
    }
}
