//! Fuzz harnesses: one function per cargo-fuzz target (`fuzz/fuzz_targets/`), each taking the
//! raw input, running the code under test and asserting invariants (a violation panics).
//!
//! The same functions run under libFuzzer and in the stable test `tests/fuzz_replay.rs`, which
//! replays every vector and every committed regression input (`fuzz/regressions/<target>/`).
//!
//! Assertion messages never carry an input value: an input may hold a capability handle, and
//! the fixed bindings' handle is only ever compared, never exposed.

use std::sync::OnceLock;

use serde_json::Value;

use crate::contract::descriptor::{admit_descriptor, safe_integer, Descriptor, ExpectedBinding};
use crate::contract::frame::{
    check_adapter_frame, parse_adapter_frame, parse_bind_request, Binding, Direction, Disposition, FrameError,
};
use crate::contract::onepass;
use crate::contract::schema::{self, Entry};
use crate::contract::text::is_major_minor;
use crate::contract::{parse_command, validate_relative_path, CapabilityHandle, Code, ContractError};
use crate::contract::{HostContext, PathSide, ToolPath};
use crate::util::prng::SplitMix64;
use crate::vectors::Vector;
use crate::wire::{decode_line, decode_strict, encode_line, encoded_len, LineDecoder, LineError};

/// Every target, in the order `scripts/fuzz.sh` runs them.
pub const TARGETS: [&str; 7] =
    ["ndjson", "command", "descriptor", "frame_to_adapter", "frame_to_daemon", "bind_request", "path"];

/// Run the harness of `target` on `data`. Panics on an unknown target name.
pub fn run(target: &str, data: &[u8]) {
    match target {
        "ndjson" => ndjson(data),
        "command" => command(data),
        "descriptor" => descriptor(data),
        "frame_to_adapter" => frame_to_adapter(data),
        "frame_to_daemon" => frame_to_daemon(data),
        "bind_request" => bind_request(data),
        "path" => path(data),
        _ => panic!("unknown fuzz target"),
    }
}

/// The judging host of the vectors (`vectors/README.md`: default context).
const HOST: &str = "host-019f";
const SESSION: &str = "agent-a";
const GENERATION: i64 = 2;

// ---------------------------------------------------------------------------------------------
// Deterministic choices derived from the input.

fn fnv1a(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3))
}

// ---------------------------------------------------------------------------------------------
// ndjson: LineDecoder, decode_strict, encode_line.

/// Line limits tried by the framing target (LF excluded), small ones so the limit is reached.
const LINE_LIMITS: [usize; 10] = [0, 1, 2, 3, 8, 33, 100, 1000, 4096, 1 << 20];

type Lines = (Vec<Result<Vec<u8>, LineError>>, Option<Vec<u8>>);

/// What a decoder must produce for `stream` (SPEC PC-1): lines end at LF; a line over the
/// limit (its CR counted, as the partial-line rule needs) fails and ends the stream; one CR
/// before the LF is stripped; empty lines are skipped; the unterminated tail is the remainder,
/// and fails at once when it is already over the limit.
fn expected_lines(stream: &[u8], limit: usize) -> Lines {
    let mut out = Vec::new();
    let mut rest = stream;
    while let Some(pos) = rest.iter().position(|&b| b == b'\n') {
        let seg = &rest[..pos];
        if seg.len() > limit {
            out.push(Err(LineError::TooLarge { limit }));
            return (out, None);
        }
        let seg = seg.strip_suffix(b"\r").unwrap_or(seg);
        if !seg.is_empty() {
            out.push(Ok(seg.to_vec()));
        }
        rest = &rest[pos + 1..];
    }
    if rest.len() > limit {
        out.push(Err(LineError::TooLarge { limit }));
        return (out, None);
    }
    (out, Some(rest.to_vec()))
}

/// Feed `stream` to a decoder in chunks of the given sizes (cycled), draining after each push.
fn decode_in_chunks(stream: &[u8], limit: usize, sizes: &mut dyn FnMut() -> usize) -> Lines {
    let mut d = LineDecoder::new(limit);
    assert_eq!(d.limit(), limit, "LineDecoder::limit differs from the limit it was built with");
    let mut out = Vec::new();
    let mut failed = false;
    let mut at = 0;
    while at < stream.len() {
        let n = sizes().clamp(1, stream.len() - at);
        d.push(&stream[at..at + n]);
        at += n;
        while let Some(r) = d.next_line() {
            assert!(!failed, "LineDecoder produced a line after a framing error");
            failed = r.is_err();
            out.push(r);
        }
    }
    while let Some(r) = d.next_line() {
        assert!(!failed, "LineDecoder produced a line after a framing error");
        failed = r.is_err();
        out.push(r);
    }
    let rem = (!failed).then(|| d.remainder().to_vec());
    (out, rem)
}

/// The framing target: the input is a byte stream, cut into chunks at positions derived from
/// the input, decoded with a limit derived from the input; every produced line is checked
/// against an independent model of the framing rules and then strictly decoded.
pub fn ndjson(data: &[u8]) {
    let h = fnv1a(data);
    let limit = LINE_LIMITS[(h % LINE_LIMITS.len() as u64) as usize];
    // One input in 64 is repeated past 64 KiB, so the decoder's buffer compaction runs (rarely:
    // the long streams cost most of the time of this target).
    let big;
    let stream: &[u8] = if h >> 58 == 0 && !data.is_empty() {
        big = data.repeat((80 * 1024) / data.len() + 1);
        &big
    } else {
        data
    };
    let model = expected_lines(stream, limit);
    let whole = decode_in_chunks(stream, limit, &mut || usize::MAX);
    assert!(whole == model, "LineDecoder (one push) differs from the framing model");
    // Seeded from the input, so the same input always splits the same way.
    let mut rng = SplitMix64::new(h);
    let max_chunk = if stream.len() > 8192 { 8192 } else { 1 + rng.index(64) };
    let chunked = decode_in_chunks(stream, limit, &mut || 1 + rng.index(max_chunk));
    assert!(chunked == model, "LineDecoder (random chunks) differs from the framing model");
    if stream.len() <= 4096 {
        let bytewise = decode_in_chunks(stream, limit, &mut || 1);
        assert!(bytewise == model, "LineDecoder (byte by byte) differs from the framing model");
    }
    for line in model.0.iter().flatten() {
        assert!(line.len() <= limit && !line.is_empty() && !line.contains(&b'\n'), "bad line from LineDecoder");
    }
    if stream.len() != data.len() {
        // A repeated stream has the input's own lines (up to the seams): decoded on the input's run.
        return;
    }
    for line in model.0.iter().flatten() {
        check_strict(line);
    }
    if let Some(rem) = &model.1 {
        check_strict(rem);
    }
    // The whole input as one line too (the vectors' lines are seeds without framing).
    check_strict(data);
}

/// `decode_strict` never panics; what it accepts re-encodes as one compact line that decodes
/// back to an equal value.
fn check_strict(line: &[u8]) {
    let r = decode_strict(line);
    assert!(r == decode_line(line), "decode_line differs from decode_strict");
    let Ok(v) = r else { return };
    let text = std::str::from_utf8(line);
    assert!(text.is_ok_and(|t| !t.starts_with('\u{feff}')), "decode_strict accepted non-UTF-8 or a BOM");
    let enc = encode_line(&v);
    assert_eq!(enc.len(), encoded_len(&v), "encoded_len differs from encode_line");
    assert!(enc.last() == Some(&b'\n'), "encode_line must end with LF");
    let body = &enc[..enc.len() - 1];
    assert!(!body.contains(&b'\n') && !body.contains(&b'\r'), "encode_line wrote a raw LF or CR inside the line");
    let back = decode_strict(body);
    assert!(back.as_ref() == Ok(&v), "encode_line output does not decode back to an equal value");
    // Encoding is canonical: a second round gives the same bytes.
    assert!(back.is_ok_and(|b| encode_line(&b) == enc), "encode_line is not idempotent");
    // A decoder with room for it yields exactly that line.
    let mut d = LineDecoder::new(body.len());
    d.push(&enc);
    assert!(d.next_line() == Some(Ok(body.to_vec())), "encoded line does not frame back");
    assert!(d.next_line().is_none() && d.remainder().is_empty(), "encoded line framed into more than one line");
}

// ---------------------------------------------------------------------------------------------
// Shared checks on errors.

/// A refusal is typed, carries a non-empty `details.field`, is not retryable, and neither its
/// message nor its details contain `handle` (when there is one).
fn check_error(e: &ContractError, allowed: &[Code], handle: Option<&CapabilityHandle>, what: &str) {
    assert!(
        allowed.contains(&e.code),
        "{what}: code {} is not one this parser may produce (field {})",
        e.code,
        e.field()
    );
    assert_eq!(Code::from_wire(e.code.as_str()), Some(e.code), "{what}: code is not in the catalogue");
    assert!(!e.field().is_empty(), "{what}: error {} has an empty details.field", e.code);
    assert!(!e.retryable, "{what}: a validation error is never retryable");
    if let Some(h) = handle {
        let details = serde_json::to_vec(&e.details).unwrap_or_default();
        assert!(
            !h.occurs_in(e.message.as_bytes()) && !h.occurs_in(&details),
            "{what}: error {} (field {}) reflects the capability handle",
            e.code,
            e.field()
        );
    }
}

/// A handle-shaped string found at `pointer` in `v`, as a redacting handle.
fn handle_at(v: &Value, pointer: &str) -> Option<CapabilityHandle> {
    v.pointer(pointer).and_then(Value::as_str).filter(|s| s.len() >= 32).map(CapabilityHandle::new)
}

// ---------------------------------------------------------------------------------------------
// command

const COMMAND_CODES: [Code; 15] = crate::contract::command::VALIDATION_CODES;

/// The command target: a strictly decoded value through `parse_command`; Ok or a typed
/// error from the command catalogue, with a coherent reply envelope.
pub fn command(data: &[u8]) {
    let Ok(value) = decode_strict(data) else { return };
    let host = HostContext { host_instance_id: HOST };
    let handle = handle_at(&value, "/payload/resources/tools/descriptor/binding/capabilityHandle");
    let judged = crate::contract::judge_command(&value, &host).map_err(|e| e.error.code);
    let parsed = parse_command(&value, &host);
    assert_eq!(judged, parsed.as_ref().map(drop).map_err(|e| e.error.code), "judge and typed parse disagree");
    match parsed {
        Ok(c) => {
            assert!(schema::is_valid(Entry::Command, &value), "accepted command violates the schema");
            assert!(crate::contract::command::OPERATIONS.contains(&c.operation()), "unknown operation accepted");
            assert!(matches!(c.version.major, 1 | 2), "accepted command has major {}", c.version.major);
            assert!(value.get("protocolVersion").and_then(Value::as_str) == Some(c.version.text.as_str()));
            assert!(value.get("requestId").and_then(Value::as_str) == Some(c.request_id()));
            if let Some(d) = &c.descriptor {
                assert!(c.version.major == 2 && c.operation() == "open", "a descriptor outside a v2 open");
                let dv = value.pointer("/payload/resources/tools/descriptor").expect("admitted descriptor is present");
                let exp = ExpectedBinding {
                    host_instance_id: HOST,
                    session_id: c.session_id().unwrap_or_default(),
                    generation: c.generation().map_or(-1, |g| g as i64),
                };
                let again = admit_descriptor(dv, Some(&exp));
                assert!(again.is_ok_and(|a| same_descriptor(&a, d)), "open's descriptor is not admitted on its own");
            }
        }
        Err(e) => {
            check_error(&e.error, &COMMAND_CODES, handle.as_ref(), "command");
            assert_eq!(e.close, e.error.code == Code::IncompatibleProtocol, "close iff incompatible_protocol");
            let pv = value.get("protocolVersion").and_then(Value::as_str).filter(|s| is_major_minor(s));
            assert_eq!(e.echo_version.as_str(), pv.unwrap_or("1.0"), "reply echoes the wrong version");
            if let Some(id) = &e.request_id {
                assert!(value.get("requestId").and_then(Value::as_str) == Some(id.as_str()), "echoed requestId");
            }
        }
    }
}

fn same_descriptor(a: &Descriptor, b: &Descriptor) -> bool {
    a.identity() == b.identity()
        && a.handle() == b.handle()
        && a.operations() == b.operations()
        && a.limits() == b.limits()
        && a.endpoint_path() == b.endpoint_path()
        && (a.bind_bytes(), a.bound_bytes()) == (b.bind_bytes(), b.bound_bytes())
}

// ---------------------------------------------------------------------------------------------
// descriptor

/// The descriptor codes: the command validation codes after the five envelope and payload ones.
const DESCRIPTOR_CODES: &[Code] = crate::contract::command::ADMISSION_CODES;

fn same_result(a: &Result<Descriptor, ContractError>, b: &Result<Descriptor, ContractError>) -> bool {
    match (a, b) {
        (Ok(a), Ok(b)) => same_descriptor(a, b),
        (Err(a), Err(b)) => a == b,
        _ => false,
    }
}

/// The descriptor target: `admit_descriptor` without and with an expected binding (the
/// vectors' default, and the descriptor's own). An admitted descriptor is schema-valid, its
/// byte counts are those of its encoded `bind`/`bound` lines, and those frames are valid on
/// the binding it defines.
pub fn descriptor(data: &[u8]) {
    // The one-pass accept path never admits what the full path refuses, and admits the same.
    for exp in [None, Some(ExpectedBinding { host_instance_id: HOST, session_id: SESSION, generation: GENERATION })] {
        if let Some(d) = onepass::accept_descriptor(data, exp.as_ref()) {
            let value = decode_strict(data).expect("a descriptor accepted in one pass is strict JSON");
            let full = admit_descriptor(&value, exp.as_ref()).expect("the full path admits it too");
            assert_eq!(format!("{d:?}"), format!("{full:?}"), "one-pass and full admission differ");
            assert!(d.handle() == full.handle(), "one-pass and full admission differ in the handle");
        }
    }
    let Ok(value) = decode_strict(data) else { return };
    let handle = handle_at(&value, "/binding/capabilityHandle");
    let free = admit_descriptor(&value, None);
    match &free {
        Ok(d) => check_admitted(&value, d),
        Err(e) => check_error(e, DESCRIPTOR_CODES, handle.as_ref(), "descriptor"),
    }
    assert!(
        !matches!(&free, Err(e) if e.code == Code::ToolAdapterBindingMismatch),
        "binding mismatch without an expected binding"
    );
    // Against the vectors' default binding: check 8 only adds a mismatch.
    let default = ExpectedBinding { host_instance_id: HOST, session_id: SESSION, generation: GENERATION };
    let bound = admit_descriptor(&value, Some(&default));
    match &bound {
        Err(e) if e.code == Code::ToolAdapterBindingMismatch => {
            check_error(e, DESCRIPTOR_CODES, handle.as_ref(), "descriptor");
            let b = |k: &str| value.pointer(&format!("/binding/{k}")).cloned().unwrap_or(Value::Null);
            let same = b("hostInstanceId") == HOST
                && b("sessionId") == SESSION
                && safe_integer(&b("generation")) == Some(GENERATION);
            assert!(!same, "binding mismatch on a descriptor bound to the expected binding");
        }
        other => assert!(same_result(other, &free), "an expected binding changed a verdict other than check 8"),
    }
    // Against its own binding: check 8 passes, so the verdict is the free one.
    let b = value.get("binding");
    let host = b.and_then(|b| b.get("hostInstanceId")).and_then(Value::as_str);
    let session = b.and_then(|b| b.get("sessionId")).and_then(Value::as_str);
    let generation = b.and_then(|b| b.get("generation")).and_then(safe_integer);
    if let (Some(host_instance_id), Some(session_id), Some(generation)) = (host, session, generation) {
        let own = ExpectedBinding { host_instance_id, session_id, generation };
        let r = admit_descriptor(&value, Some(&own));
        assert!(same_result(&r, &free), "a descriptor's own binding changed its verdict");
    }
}

fn check_admitted(value: &Value, d: &Descriptor) {
    assert!(schema::is_valid(Entry::Descriptor, value), "admitted descriptor violates the schema");
    let given = value.pointer("/binding/capabilityHandle").and_then(Value::as_str).unwrap_or_default();
    assert!(d.handle().ct_eq_bytes(given.as_bytes()), "admitted handle differs from the descriptor's");
    let bind = encode_line(&d.bind_frame());
    let bound = encode_line(&d.bound_frame());
    assert_eq!(d.bind_bytes(), bind.len(), "bind_bytes differs from the encoded bind line");
    assert_eq!(d.bound_bytes(), bound.len(), "bound_bytes differs from the encoded bound line");
    assert!(d.bind_bytes() as i64 <= d.limits().max_request_bytes, "admitted bind does not fit maxRequestBytes");
    assert!(d.bound_bytes() as i64 <= d.limits().max_response_bytes, "admitted bound does not fit maxResponseBytes");
    // The frames the descriptor defines are valid on the binding it defines.
    let binding = Binding::from(d);
    let bind_line = &bind[..bind.len() - 1];
    let bound_line = &bound[..bound.len() - 1];
    if let Err(e) = parse_adapter_frame(bind_line, &binding, Direction::ToAdapter) {
        panic!("the descriptor's own bind is refused: {} (field {})", e.error.code, e.error.field());
    }
    if let Err(e) = parse_adapter_frame(bound_line, &binding, Direction::ToDaemon) {
        panic!("the descriptor's own bound is refused: {} (field {})", e.error.code, e.error.field());
    }
    match parse_bind_request(bind_line, d.limits().max_request_bytes as usize) {
        Ok(req) => assert!(
            req.identity() == d.identity()
                && req.handle() == d.handle()
                && req.operations() == d.operations()
                && req.limits() == d.limits(),
            "the descriptor's bind reads back as another binding"
        ),
        Err(e) => {
            panic!("the descriptor's own bind is refused as a first line: {} ({})", e.error.code, e.error.field())
        }
    }
}

// ---------------------------------------------------------------------------------------------
// frames

/// The fixed bindings frames are judged against: the worked example (`desc.worked-example.valid`)
/// and the same with every limit at its minimum (`desc.limits.all-min.valid`), so the line
/// limits are within reach of the fuzzer.
fn bindings() -> &'static [Binding; 2] {
    static CELL: OnceLock<[Binding; 2]> = OnceLock::new();
    CELL.get_or_init(|| {
        let vectors: Vec<Vector> =
            serde_json::from_str(include_str!("../vectors/descriptors.json")).expect("descriptors.json parses");
        let base: Value =
            serde_json::from_str(include_str!("../vectors/bases/descriptor.json")).expect("descriptor base parses");
        let binding = |id: &str| {
            let v = vectors.iter().find(|v| v.id == id).expect("binding vector exists");
            assert_eq!(v.base.as_deref(), Some("descriptor"), "binding vector is built on the descriptor base");
            let mut doc = base.clone();
            for op in &v.patch {
                assert_eq!(op.op, "set", "binding vector only sets");
                let (parent, key) = op.path.rsplit_once('/').expect("patch path is a pointer");
                let obj = doc.pointer_mut(parent).and_then(Value::as_object_mut).expect("patch parent is an object");
                obj.insert(key.to_string(), op.value.clone());
            }
            let d = admit_descriptor(&doc, None).expect("binding vector is a valid descriptor");
            Binding::from(&d)
        };
        [binding("desc.worked-example.valid"), binding("desc.limits.all-min.valid")]
    })
}

const CLOSE_CODES: [Code; 2] = [Code::AdapterProtocolInvalid, Code::AdapterSecretReflected];
const REPLY_CODES: [Code; 3] = [Code::OperationNotGranted, Code::InvalidRequest, Code::InvalidPath];

fn other(dir: Direction) -> Direction {
    match dir {
        Direction::ToAdapter => Direction::ToDaemon,
        Direction::ToDaemon => Direction::ToAdapter,
    }
}

fn frame(data: &[u8], dir: Direction) {
    let value = decode_strict(data).ok();
    for binding in bindings() {
        let r = parse_adapter_frame(data, binding, dir);
        if let Some(kind) = onepass::accept_frame(data, binding, dir) {
            assert!(r.is_ok(), "the one-pass path accepts a frame the full path refuses");
            let full = crate::contract::frame::judge_adapter_frame(data, binding, dir).map(|j| j.kind);
            assert_eq!(full.ok(), Some(kind), "one-pass and full path see another frame kind");
        }
        match &r {
            Ok(_) => {
                let v = value.as_ref().expect("an accepted frame is strict JSON");
                assert!(schema::is_valid(Entry::Frame, v), "accepted frame violates the schema");
                assert!((data.len() as u64) < binding.line_limit(dir), "accepted frame exceeds the line limit");
                let kind = v.get("kind").and_then(Value::as_str).unwrap_or_default();
                assert!(dir.kinds().contains(&kind), "accepted frame of a kind this direction does not carry");
                let is_bind = dir == Direction::ToAdapter && kind == "bind";
                assert!(is_bind || !binding.handle().occurs_in(data), "accepted frame carries the handle");
                if is_bind {
                    let h = v.get("capabilityHandle").and_then(Value::as_str).unwrap_or_default();
                    assert!(binding.handle().ct_eq_bytes(h.as_bytes()), "accepted bind presents another handle");
                }
                for (k, want) in [
                    ("protocolVersion", binding.identity().protocol_version),
                    ("adapterId", binding.identity().adapter_id),
                    ("adapterVersion", binding.identity().adapter_version),
                    ("hostInstanceId", binding.identity().host_instance_id),
                    ("sessionId", binding.identity().session_id),
                ] {
                    assert!(v.get(k).and_then(Value::as_str) == Some(want), "accepted frame: identity differs");
                }
                assert!(
                    v.get("generation").and_then(safe_integer) == Some(binding.identity().generation as i64),
                    "accepted frame: generation differs"
                );
                assert!(check_adapter_frame(v, binding, dir).is_ok(), "check_adapter_frame refuses an accepted line");
                assert!(parse_adapter_frame(data, binding, other(dir)).is_err(), "a frame valid in both directions");
                // Canonical re-encoding of an accepted frame is accepted too (when it fits).
                let enc = encode_line(v);
                if enc.len() as u64 <= binding.line_limit(dir) {
                    let again = parse_adapter_frame(&enc[..enc.len() - 1], binding, dir);
                    assert!(again.is_ok(), "the compact re-encoding of an accepted frame is refused");
                }
            }
            Err(e) => check_frame_error(e, binding, dir, value.as_ref()),
        }
    }
}

fn check_frame_error(e: &FrameError, binding: &Binding, dir: Direction, value: Option<&Value>) {
    match e.disposition {
        Disposition::Reply => {
            let a = e.attribution.as_ref();
            assert!(a.is_some(), "a reply error without attribution ({}, field {})", e.error.code, e.error.field());
            assert!(dir == Direction::ToAdapter, "a reply error on a frame sent to the daemon");
            check_error(&e.error, &REPLY_CODES, Some(binding.handle()), "frame reply");
            let v = value.expect("a reply error is on a decoded frame");
            assert!(v.get("kind").and_then(Value::as_str) == Some("invoke"), "a reply error on a non-invoke");
            let a = a.expect("checked above");
            assert!(
                v.get("requestId").and_then(Value::as_str) == Some(a.request_id.as_str())
                    && v.get("idempotencyKey").and_then(Value::as_str) == Some(a.idempotency_key.as_str())
                    && v.get("operation").and_then(Value::as_str) == Some(a.operation.to_string().as_str()),
                "attribution differs from the invoke's keys"
            );
        }
        Disposition::Close => check_error(&e.error, &CLOSE_CODES, Some(binding.handle()), "frame close"),
    }
}

/// Frames sent to the adapter (`bind invoke abort revoke`), judged on the fixed bindings.
pub fn frame_to_adapter(data: &[u8]) {
    frame(data, Direction::ToAdapter);
}

/// Frames sent to the daemon (`bound result aborted revoked`), judged on the fixed bindings.
pub fn frame_to_daemon(data: &[u8]) {
    frame(data, Direction::ToDaemon);
}

// ---------------------------------------------------------------------------------------------
// bind_request

/// The first-line target: `parse_bind_request` with several line limits. An accepted request
/// is a schema-valid `bind` within the limit, and it is a valid `bind` on the binding it asks
/// for.
pub fn bind_request(data: &[u8]) {
    let value = decode_strict(data).ok();
    let handle = value.as_ref().and_then(|v| handle_at(v, "/capabilityHandle"));
    let big = 1usize << 20;
    let roomy = parse_bind_request(data, big);
    for max in [big, 2048, data.len() + 1, data.len()] {
        let r = parse_bind_request(data, max);
        match &r {
            Ok(req) => {
                assert!(data.len() < max, "accepted bind request exceeds the line limit");
                let v = value.as_ref().expect("an accepted bind request is strict JSON");
                assert!(schema::is_valid(Entry::Frame, v), "accepted bind request violates the schema");
                assert!(v.get("kind").and_then(Value::as_str) == Some("bind"), "accepted a first line that is no bind");
                let h = v.get("capabilityHandle").and_then(Value::as_str).unwrap_or_default();
                assert!(req.handle().ct_eq_bytes(h.as_bytes()), "bind request handle differs from the line's");
                let binding = req.clone();
                let ops = binding.operations_json();
                let fit = crate::contract::descriptor::fit_check(req.identity(), req.handle(), &ops, req.limits(), "");
                assert!(fit.is_ok(), "accepted bind request fails the fit check");
                if let Err(e) = check_adapter_frame(v, &binding, Direction::ToAdapter) {
                    panic!(
                        "accepted bind request is refused on its own binding: {} ({})",
                        e.error.code,
                        e.error.field()
                    );
                }
                if (data.len() as i64) < req.limits().max_request_bytes {
                    let p = parse_adapter_frame(data, &binding, Direction::ToAdapter);
                    assert!(p.is_ok(), "accepted bind request line is refused on its own binding");
                }
            }
            Err(e) => {
                assert!(e.disposition == Disposition::Close && e.attribution.is_none(), "bind refusal must close");
                check_error(&e.error, &[Code::AdapterProtocolInvalid], handle.as_ref(), "bind request");
            }
        }
        if data.len() < max && max <= big {
            // Within the limit, the verdict does not depend on the limit.
            let same = match (&r, &roomy) {
                (Ok(_), Ok(_)) => true,
                (Err(a), Err(b)) => a == b,
                _ => false,
            };
            assert!(same, "bind request verdict depends on a limit the line fits");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// path

/// SPEC PC-5.1, written out independently: the components of an accepted path, or `None`.
fn path_model(p: &str, side: PathSide) -> Option<ToolPath> {
    let bad_char = |c: char| c == '\\' || (c as u32) < 0x20 || c as u32 == 0x7f;
    if p.is_empty() || p.len() > 4096 || p.starts_with('/') || p.chars().any(bad_char) {
        return None;
    }
    let (body, trailing_slash) = match p.strip_suffix('/') {
        Some(b) if side == PathSide::Adapter => (b, true),
        _ => (p, false),
    };
    if body == "." {
        return Some(ToolPath { components: vec![], trailing_slash });
    }
    let parts: Vec<&str> = body.split('/').collect();
    let ok = parts.iter().all(|s| !s.is_empty() && *s != "." && *s != "..");
    let short = side == PathSide::Daemon || parts.iter().all(|s| s.len() <= 255);
    (ok && short).then(|| ToolPath { components: parts.iter().map(|s| s.to_string()).collect(), trailing_slash })
}

/// The path target: the input as UTF-8, judged on both sides.
pub fn path(data: &[u8]) {
    let Ok(p) = std::str::from_utf8(data) else { return };
    let mut results = Vec::new();
    for (side, code) in [(PathSide::Daemon, Code::InvalidToolAdapterPath), (PathSide::Adapter, Code::InvalidPath)] {
        let r = validate_relative_path(p, side, "payload.path");
        match &r {
            Ok(tp) => {
                assert!(!p.starts_with('/') && !p.contains('\0') && !p.contains('\\'), "accepted an absolute path");
                assert!(
                    tp.components.iter().all(|c| !c.is_empty() && c != "." && c != ".." && !c.contains('/')),
                    "accepted path has an empty, `.` or `..` component"
                );
                let rebuilt = format!("{}{}", tp.canonical(), if tp.trailing_slash { "/" } else { "" });
                assert_eq!(rebuilt, p, "components do not spell the accepted path");
                assert!(side == PathSide::Adapter || !tp.trailing_slash, "daemon side accepted a trailing slash");
            }
            Err(e) => {
                assert_eq!(e.code, code, "path refusal with another side's code");
                assert_eq!(e.field(), "payload.path", "path refusal names another field");
                assert!(p.len() < 8 || !e.message.contains(p), "path refusal message carries the path");
            }
        }
        assert!(r.as_ref().ok() == path_model(p, side).as_ref(), "validate_relative_path differs from SPEC PC-5.1");
        results.push(r);
    }
    // What a daemon may send, an adapter accepts, unless a component is over 255 bytes.
    if let (Ok(d), a) = (&results[0], &results[1]) {
        if d.components.iter().all(|c| c.len() <= 255) {
            assert!(a.as_ref().ok() == Some(d), "adapter side refuses a path the daemon side sends");
        }
    }
}
