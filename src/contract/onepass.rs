//! One-pass acceptance: the validator's accept path for adapter frames and descriptors.
//!
//! A line is read once by a small strict JSON scanner written for this purpose: it checks the
//! syntax and records every value on a *tape* (one slot per value; strings as positions in
//! the line, or in a side buffer when they had escapes; no `serde_json::Value`, no map, no
//! hashing, no allocation once the thread's tape has grown to fit). Every rule of the sibling
//! modules is then checked on the tape with the same predicates (`text`, `path`, the key
//! lists of `frame` and `descriptor`, the ranges of `descriptor`, the fit check). The answer is
//! only ever "accepted" or "not decided here": on anything else — a refusal, or a form this
//! path does not handle (`null`, negative numbers, fractions and exponents such as `2.0`,
//! keys written with escapes, lone surrogate escapes, `bind`/`bound`) — the caller runs the
//! full path (strict decode into a `Value`, the rules, and the JSON Schema where it is
//! evaluated), which alone reports codes, fields and dispositions. So a verdict can differ
//! from the full path's only if this path accepts a document the full path refuses;
//! `tests/fast_path.rs` judges every golden vector, every single perturbation of each and
//! byte-level edits of their lines on both paths and requires the identical verdict.
//!
//! Why each strictness rule of `wire::decode_strict` holds here too:
//! - **one JSON text, UTF-8, no BOM**: the line is checked to be UTF-8 as a whole; the root
//!   must be an object and only JSON whitespace may follow it; a BOM is not JSON whitespace,
//!   so it is refused where the `{` is due;
//! - **the JSON grammar** (as `serde_json` reads it): whitespace is space, tab, LF and CR; a
//!   string holds no raw control character (U+0000–U+001F) and only the escapes `\" \\ \/ \b
//!   \f \n \r \t \uXXXX` (a `\u` surrogate must form a high–low pair, else the line is left
//!   to the full path); literals are spelled out; members and elements are separated by
//!   single commas with none trailing;
//! - **duplicate keys at any depth**: a key is one of the known member names (every object of
//!   a frame or a descriptor is closed, so any other key means a refusal or a form left to the
//!   full path), and each object keeps the set of its keys, so a repeated key is seen;
//! - **integer forms**: only a run of digits without a leading zero is read, as an integer of
//!   at most 16 digits (every integer accepted anywhere is at most 2^53 − 1); a sign, a
//!   fraction or an exponent (`-1`, `2.0`, `1e3`) is not decided here (the full path
//!   normalizes integral floats);
//! - **types and `null`**: every member is read as its one type, and a member of another type
//!   (`null` included: `null` is not absence) fails its rule.
//!
//! The handle scan: a frame must not carry the binding's handle in any key or string. Keys
//! are known names (shorter than any handle); every string at least as long as the handle is
//! searched for it as decoded, the way the full path searches the decoded `Value`.

use std::cell::RefCell;
use std::sync::OnceLock;

use super::descriptor::{
    fit, is_endpoint_path, limits_from_values, operations_len, Descriptor, ExpectedBinding, Identity,
};
use super::descriptor::{BINDING_KEYS, DESCRIPTOR_KEYS, ENDPOINT_KEYS, LIMITS, MAX_SAFE_INTEGER, OPERATIONS};
use super::frame::{allowed_keys, data_keys, is_entry_name, payload_keys, Binding, Direction, FrameKind};
use super::frame::{EDIT_KEYS, ENTRY_KEYS, ERROR_KEYS, IDENTITY_KEYS, MATCH_KEYS, MAX_CONTENT_BYTES};
use super::path::{is_valid_path, PathSide};
use super::secret::CapabilityHandle;
use super::text::{
    has_control, is_adapter_id, is_base64url, is_digest, is_error_code, is_frame_id, is_semver, is_timestamp, units_in,
    utf16_len,
};
use super::types::tool_adapter::{AdapterLimits, ToolOperation};

/// Every member name of a frame or a descriptor, at any depth (the union of the key lists of
/// `frame` and `descriptor`; a unit test keeps them equal), sorted. A key is its index here.
const NAMES: [&str; 61] = [
    "aborted",
    "adapterId",
    "adapterVersion",
    "binding",
    "bytesRead",
    "bytesWritten",
    "capabilityHandle",
    "code",
    "column",
    "content",
    "create",
    "created",
    "data",
    "digest",
    "edits",
    "endpoint",
    "entries",
    "eof",
    "error",
    "expectedDigest",
    "generation",
    "hostInstanceId",
    "idempotencyKey",
    "idempotencyTtlMs",
    "kind",
    "limits",
    "line",
    "matches",
    "maxBytes",
    "maxConcurrentRequests",
    "maxEntries",
    "maxIdempotencyKeys",
    "maxQueuedRequests",
    "maxRequestBytes",
    "maxResponseBytes",
    "maxResults",
    "message",
    "modifiedAt",
    "name",
    "newText",
    "offset",
    "ok",
    "oldText",
    "operation",
    "operations",
    "overwrite",
    "path",
    "payload",
    "protocolVersion",
    "query",
    "replacements",
    "requestId",
    "requestTimeoutMs",
    "retryable",
    "sessionId",
    "size",
    "targetRequestId",
    "text",
    "transport",
    "truncated",
    "type",
];

/// A member name: its index in [`NAMES`], so that a set of keys is a `u64` bit mask.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Key(u8);

/// `key!("path")`: the key of that name, resolved at compile time (a name that is not in
/// [`NAMES`] does not compile).
macro_rules! key {
    ($name:literal) => {
        const { Key::named($name) }
    };
}

/// Where a name of at least two bytes goes in [`INDEX`]: a hash of its length and its first,
/// middle and last bytes, free of collisions over [`NAMES`] (checked at compile time).
const fn index_slot(b: &[u8]) -> usize {
    let n = b.len();
    (n + 9 * b[0] as usize + 7 * b[n - 1] as usize + 5 * b[n / 2] as usize) % 256
}

/// From [`index_slot`] to the key there (`u8::MAX`: none).
const INDEX: [u8; 256] = {
    let mut t = [u8::MAX; 256];
    let mut i = 0;
    while i < NAMES.len() {
        let at = index_slot(NAMES[i].as_bytes());
        assert!(t[at] == u8::MAX, "two key names share an index slot: change `index_slot`");
        t[at] = i as u8;
        i += 1;
    }
    t
};

const fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// `name == b` for a name of at least two bytes, compared in (overlapping) words rather than
/// byte by byte.
fn same_key(name: &[u8], b: &[u8]) -> bool {
    fn word<const N: usize>(s: &[u8], at: usize) -> Option<[u8; N]> {
        s.get(at..at + N)?.try_into().ok()
    }
    fn same<const N: usize>(a: &[u8], b: &[u8], at: usize) -> bool {
        word::<N>(a, at).is_some_and(|w| Some(w) == word::<N>(b, at))
    }
    let n = b.len();
    if name.len() != n {
        return false;
    }
    match n {
        0..=1 => name == b,
        2..=3 => same::<2>(name, b, 0) && same::<2>(name, b, n - 2),
        4..=7 => same::<4>(name, b, 0) && same::<4>(name, b, n - 4),
        _ => (0..n - 8).step_by(8).all(|at| same::<8>(name, b, at)) && same::<8>(name, b, n - 8),
    }
}

impl Key {
    /// The key that array elements and the root carry (none).
    const NONE: Key = Key(u8::MAX);

    const fn named(name: &str) -> Key {
        let mut i = 0;
        while i < NAMES.len() {
            if same_bytes(NAMES[i].as_bytes(), name.as_bytes()) {
                return Key(i as u8);
            }
            i += 1;
        }
        panic!("not a member name of a frame or a descriptor")
    }

    /// The key spelled exactly `b`, if any (every name has at least two bytes).
    fn find(b: &[u8]) -> Option<Key> {
        if b.len() < 2 {
            return None;
        }
        let k = INDEX[index_slot(b)];
        same_key(NAMES.get(usize::from(k))?.as_bytes(), b).then_some(Key(k))
    }

    /// The key's bit in a key set (none for [`Key::NONE`]).
    fn bit(self) -> u64 {
        1u64.checked_shl(u32::from(self.0)).unwrap_or(0)
    }
}

/// The key set of `names`. A name missing from [`NAMES`] adds nothing, so a document carrying
/// it is never accepted here (the unit test `names_are_the_rules_keys` keeps none missing).
fn mask(names: &[&str]) -> u64 {
    names.iter().filter_map(|n| Key::find(n.as_bytes())).fold(0, |m, k| m | k.bit())
}

/// The closed key sets of the rules in `frame` and `descriptor`, as masks, built once.
struct Masks {
    /// The frame kinds judged here, each with every key it may carry (kind and identity too)
    /// and the direction it travels in.
    kinds: [(&'static str, u64, Direction); 6],
    /// `payload` and `data` keys by operation (`ToolOperation as usize`).
    payload: [u64; 6],
    data: [u64; 6],
    edit: u64,
    entry: u64,
    matched: u64,
    error: u64,
    descriptor: u64,
    endpoint: u64,
    binding: u64,
    limits: u64,
    /// The limits' keys in the order of [`LIMITS`].
    limit_keys: [Key; 7],
}

fn masks() -> &'static Masks {
    static MASKS: OnceLock<Masks> = OnceLock::new();
    MASKS.get_or_init(|| {
        let frame = mask(&IDENTITY_KEYS) | key!("kind").bit();
        let mut payload = [0; 6];
        let mut data = [0; 6];
        for op in OPERATIONS.iter().filter_map(|o| o.parse::<ToolOperation>().ok()) {
            payload[op as usize] = mask(payload_keys(op));
            data[op as usize] = mask(data_keys(op));
        }
        Masks {
            kinds: ["invoke", "result", "abort", "aborted", "revoke", "revoked"].map(|k| {
                let dir =
                    if Direction::ToAdapter.kinds().contains(&k) { Direction::ToAdapter } else { Direction::ToDaemon };
                (k, frame | mask(allowed_keys(k)), dir)
            }),
            payload,
            data,
            edit: mask(&EDIT_KEYS),
            entry: mask(&ENTRY_KEYS),
            matched: mask(&MATCH_KEYS),
            error: mask(&ERROR_KEYS),
            descriptor: mask(&DESCRIPTOR_KEYS),
            endpoint: mask(&ENDPOINT_KEYS),
            binding: mask(&BINDING_KEYS),
            limits: mask(&LIMITS.map(|(k, _, _)| k)),
            limit_keys: LIMITS.map(|(k, _, _)| Key::find(k.as_bytes()).unwrap_or(Key::NONE)),
        }
    })
}

/// One value of the line.
#[derive(Clone, Copy, Debug)]
enum Val {
    /// A string: `len` bytes at `at` in the line, or in the tape's decoded text when it had
    /// escapes.
    Str {
        at: u32,
        len: u32,
        decoded: bool,
    },
    /// A non-negative integer written as a plain run of digits.
    Int(u64),
    Bool(bool),
    /// An object: its members are the slots after it up to `end`; `keys` is their set.
    Obj {
        end: u32,
        keys: u64,
    },
    /// An array of `len` elements: the slots after it up to `end`.
    Arr {
        end: u32,
        len: u32,
    },
}

/// A value on the tape with the key it is the member of ([`Key::NONE`] in an array and at the
/// root).
#[derive(Clone, Copy, Debug)]
struct Slot {
    key: Key,
    val: Val,
}

/// The values of one line in document order: a container's slot comes first, then its
/// members (and theirs), so the member after member `i` is at `i + 1`, or at the end of `i`
/// when `i` is a container. Kept per thread and reused, so judging a line allocates nothing
/// once it has grown to fit.
#[derive(Default)]
struct Tape {
    slots: Vec<Slot>,
    /// The decoded text of the strings that had escapes.
    text: String,
}

impl Tape {
    fn clear(&mut self) {
        self.slots.clear();
        self.text.clear();
    }

    /// Give back the memory an unusually large line took (a line of up to 4 MiB may pass).
    fn trim(&mut self) {
        const KEEP: usize = 64 * 1024;
        if self.text.capacity() > KEEP {
            self.text = String::new();
        }
        if self.slots.capacity() > KEEP / std::mem::size_of::<Slot>() {
            self.slots = Vec::new();
        }
    }
}

/// Containers nest at most this deep in a frame (frame → data → entries → entry) or a
/// descriptor; anything deeper is left to the full path.
const MAX_DEPTH: u8 = 4;

/// The strict JSON scanner: reads one line onto a tape.
struct Scanner<'a, 't> {
    bytes: &'a [u8],
    at: usize,
    tape: &'t mut Tape,
    /// A string containing it is not accepted here.
    handle: Option<&'a CapabilityHandle>,
    /// The line may have a byte below 0x20 (else no string needs the check for one).
    controls: bool,
}

impl Scanner<'_, '_> {
    /// The next byte that is not JSON whitespace, not consumed.
    fn peek(&mut self) -> Option<u8> {
        loop {
            let c = *self.bytes.get(self.at)?;
            if !matches!(c, b' ' | b'\t' | b'\n' | b'\r') {
                return Some(c);
            }
            self.at += 1;
        }
    }

    /// The next byte that is not JSON whitespace, consumed.
    fn next(&mut self) -> Option<u8> {
        let c = self.peek()?;
        self.at += 1;
        Some(c)
    }

    /// The whole line: one object and nothing but whitespace after it (the root is slot 0).
    fn document(&mut self) -> Option<()> {
        if self.peek()? != b'{' {
            return None;
        }
        self.value(Key::NONE, 0)?;
        self.next().is_none().then_some(())
    }

    /// The next value, as the member `key`, onto the tape.
    fn value(&mut self, key: Key, depth: u8) -> Option<()> {
        let val = match self.next()? {
            b'"' => self.string()?,
            b'{' if depth < MAX_DEPTH => return self.object(key, depth + 1),
            b'[' if depth < MAX_DEPTH => return self.array(key, depth + 1),
            b't' => self.literal(b"rue", Val::Bool(true))?,
            b'f' => self.literal(b"alse", Val::Bool(false))?,
            c @ b'0'..=b'9' => self.integer(c)?,
            _ => return None,
        };
        self.tape.slots.push(Slot { key, val });
        Some(())
    }

    fn literal(&mut self, rest: &[u8], v: Val) -> Option<Val> {
        let end = self.at + rest.len();
        (self.bytes.get(self.at..end)? == rest).then(|| {
            self.at = end;
            v
        })
    }

    /// An integer whose first digit was just read.
    fn integer(&mut self, first: u8) -> Option<Val> {
        let mut n = u64::from(first - b'0');
        if first != b'0' {
            let mut digits = 1;
            while let Some(c @ b'0'..=b'9') = self.bytes.get(self.at).copied() {
                digits += 1;
                if digits > 16 {
                    return None;
                }
                n = n * 10 + u64::from(c - b'0');
                self.at += 1;
            }
        }
        // A fraction or an exponent, or a digit after a leading zero.
        match self.bytes.get(self.at) {
            Some(b'.' | b'e' | b'E' | b'0'..=b'9') => None,
            _ => Some(Val::Int(n)),
        }
    }

    /// An object whose `{` was just read, as the member `key`.
    fn object(&mut self, key: Key, depth: u8) -> Option<()> {
        let at = self.tape.slots.len();
        self.tape.slots.push(Slot { key, val: Val::Obj { end: 0, keys: 0 } });
        let mut keys = 0u64;
        let mut c = self.next()?;
        if c != b'}' {
            loop {
                if c != b'"' {
                    return None;
                }
                let member = self.key()?;
                if keys & member.bit() != 0 || self.next()? != b':' {
                    return None;
                }
                keys |= member.bit();
                self.value(member, depth)?;
                match self.next()? {
                    b',' => c = self.next()?,
                    b'}' => break,
                    _ => return None,
                }
            }
        }
        let end = self.tape.slots.len() as u32;
        self.tape.slots[at].val = Val::Obj { end, keys };
        Some(())
    }

    /// An array whose `[` was just read, as the member `key`.
    fn array(&mut self, key: Key, depth: u8) -> Option<()> {
        let at = self.tape.slots.len();
        self.tape.slots.push(Slot { key, val: Val::Arr { end: 0, len: 0 } });
        let mut len = 0;
        if self.peek()? == b']' {
            self.at += 1;
        } else {
            loop {
                self.value(Key::NONE, depth)?;
                len += 1;
                match self.next()? {
                    b',' => {}
                    b']' => break,
                    _ => return None,
                }
            }
        }
        let end = self.tape.slots.len() as u32;
        self.tape.slots[at].val = Val::Arr { end, len };
        Some(())
    }

    /// A key whose `"` was just read: a known name, spelled without escapes.
    fn key(&mut self) -> Option<Key> {
        let rest = self.bytes.get(self.at..)?;
        let end = quote_at(rest)?;
        self.at += end + 1;
        Key::find(&rest[..end])
    }

    /// A string whose `"` was just read.
    fn string(&mut self) -> Option<Val> {
        let start = self.at;
        let end = start + string_stop(self.bytes.get(start..)?)?;
        if self.bytes[end] == b'\\' {
            return self.escaped(start, end);
        }
        let s = self.bytes.get(start..end)?;
        if (self.controls && has_raw_control(s)) || self.has_handle(s) {
            return None;
        }
        self.at = end + 1;
        Some(Val::Str { at: start as u32, len: (end - start) as u32, decoded: false })
    }

    /// The rest of a string from `start` whose first escape is at `esc`, decoded onto the
    /// tape's text.
    fn escaped(&mut self, start: usize, mut esc: usize) -> Option<Val> {
        let at = self.tape.text.len();
        let mut from = start;
        loop {
            let run = self.bytes.get(from..esc)?;
            if self.controls && has_raw_control(run) {
                return None;
            }
            self.tape.text.push_str(std::str::from_utf8(run).ok()?);
            if self.bytes[esc] == b'"' {
                break;
            }
            let (c, next) = self.escape(esc + 1)?;
            self.tape.text.push(c);
            from = next;
            esc = from + string_stop(self.bytes.get(from..)?)?;
        }
        self.at = esc + 1;
        let len = self.tape.text.len() - at;
        if self.has_handle(&self.tape.text.as_bytes()[at..]) {
            return None;
        }
        Some(Val::Str { at: at as u32, len: len as u32, decoded: true })
    }

    /// The escape whose letter is at `i`: the character and where the string goes on.
    fn escape(&self, i: usize) -> Option<(char, usize)> {
        let c = match *self.bytes.get(i)? {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => {
                let unit = self.hex4(i + 1)?;
                return match unit {
                    0xD800..=0xDBFF => {
                        // Only a high surrogate followed by an escaped low one is decided here.
                        if self.bytes.get(i + 5..i + 7)? != b"\\u" {
                            return None;
                        }
                        let low = self.hex4(i + 7)?.checked_sub(0xDC00).filter(|l| *l < 0x400)?;
                        Some((char::from_u32(0x10000 + ((unit - 0xD800) << 10) + low)?, i + 11))
                    }
                    _ => Some((char::from_u32(unit)?, i + 5)),
                };
            }
            _ => return None,
        };
        Some((c, i + 1))
    }

    fn hex4(&self, i: usize) -> Option<u32> {
        self.bytes.get(i..i + 4)?.iter().try_fold(0, |n, &c| Some(n * 16 + char::from(c).to_digit(16)?))
    }

    fn has_handle(&self, s: &[u8]) -> bool {
        self.handle.is_some_and(|h| s.len() >= h.expose().len() && h.occurs_in(s))
    }
}

/// Eight copies of a byte.
const fn splat(b: u8) -> u64 {
    0x0101_0101_0101_0101 * b as u64
}

/// The index of the first byte of `b` that is one of `stops` (one or two bytes, as `splat`s),
/// eight bytes at a time: short strings and keys are the common case, where a call to
/// `memchr` costs more than it saves; past 64 bytes `memchr` takes over.
fn first_stop(b: &[u8], stops: &[u64], far: impl Fn(&[u8]) -> Option<usize>) -> Option<usize> {
    let mut i = 0;
    while let Some(word) = b.get(i..i + 8).and_then(|w| <[u8; 8]>::try_from(w).ok()) {
        let w = u64::from_le_bytes(word);
        // A byte of `w ^ stop` is zero where `w` has that stop; the lowest flagged byte of
        // `zero` is exactly the first such byte (a borrow can only flag bytes above a zero).
        let found = stops.iter().fold(0, |m, stop| {
            let x = w ^ stop;
            m | (x.wrapping_sub(splat(1)) & !x & splat(0x80))
        });
        if found != 0 {
            return Some(i + found.trailing_zeros() as usize / 8);
        }
        i += 8;
        if i >= 64 {
            return far(b.get(i..)?).map(|p| i + p);
        }
    }
    let stop_bytes = stops.iter().map(|s| *s as u8);
    b.get(i..)?.iter().position(|c| stop_bytes.clone().any(|s| s == *c)).map(|p| i + p)
}

/// The index of the first `"` in `b` (the end of a key).
fn quote_at(b: &[u8]) -> Option<usize> {
    first_stop(b, &[splat(b'"')], |rest| memchr::memchr(b'"', rest))
}

/// The index of the first `"` or `\` in `b` (the end of a string, or an escape).
fn string_stop(b: &[u8]) -> Option<usize> {
    first_stop(b, &[splat(b'"'), splat(b'\\')], |rest| memchr::memchr2(b'"', b'\\', rest))
}

/// A raw control character (U+0000–U+001F), which JSON refuses inside a string.
fn has_raw_control(s: &[u8]) -> bool {
    s.iter().copied().min().is_some_and(|b| b < 0x20)
}

/// A scanned line (known to be UTF-8): the line, the decoded text of escaped strings, and the
/// tape.
struct Doc<'d> {
    line: &'d [u8],
    /// The line as text, when it was converted whole (see [`with_root`]).
    whole: Option<&'d str>,
    text: &'d str,
    slots: &'d [Slot],
}

impl<'d> Doc<'d> {
    /// A string's text. (A string's bytes in the line lie between ASCII delimiters of a line
    /// that is UTF-8, so they are UTF-8 too; unless the line was converted whole, the
    /// conversion checks it again, on the string alone: readers of a string that may be long
    /// use [`Obj::str_len`].)
    fn str(&self, v: Val) -> Option<&'d str> {
        let Val::Str { at, len, decoded } = v else { return None };
        let span = at as usize..at as usize + len as usize;
        match (decoded, self.whole) {
            (true, _) => self.text.get(span),
            (false, Some(line)) => line.get(span),
            (false, None) => std::str::from_utf8(self.line.get(span)?).ok(),
        }
    }

    /// The container at slot `at`: its members and the key set of an object.
    fn container(&'d self, at: usize) -> Option<Members<'d>> {
        let (end, keys, len) = match self.slots.get(at)?.val {
            Val::Obj { end, keys } => (end, keys, None),
            Val::Arr { end, len } => (end, 0, Some(len)),
            _ => return None,
        };
        Some(Members { doc: self, at: at + 1, end: end as usize, keys, len })
    }
}

/// The members of an object, or the elements of an array (`len` is `Some`), of the line.
#[derive(Clone, Copy)]
struct Members<'d> {
    doc: &'d Doc<'d>,
    /// The first member's slot, and the slot after the last one's values.
    at: usize,
    end: usize,
    keys: u64,
    len: Option<u32>,
}

impl<'d> Iterator for Members<'d> {
    /// A member's slot index and the slot.
    type Item = (usize, Slot);

    fn next(&mut self) -> Option<(usize, Slot)> {
        if self.at >= self.end {
            return None;
        }
        let i = self.at;
        let slot = *self.doc.slots.get(i)?;
        self.at = match slot.val {
            Val::Obj { end, .. } | Val::Arr { end, .. } => end as usize,
            _ => i + 1,
        };
        Some((i, slot))
    }
}

/// An object of the line, read by key. Each reader is `None` when the member is absent or of
/// another type.
struct Obj<'d> {
    doc: &'d Doc<'d>,
    keys: u64,
    /// The slot of member `k` at `k.0`, where `keys` has `k` (found in one pass over the
    /// members, so that every read after it is direct).
    slot: [u32; 64],
}

impl<'d> Obj<'d> {
    fn at(doc: &'d Doc<'d>, at: usize) -> Option<Obj<'d>> {
        let members = doc.container(at).filter(|m| m.len.is_none())?;
        let mut slot = [0; 64];
        for (i, s) in members {
            *slot.get_mut(usize::from(s.key.0))? = i as u32;
        }
        Some(Obj { doc, keys: members.keys, slot })
    }

    fn has(&self, k: Key) -> bool {
        self.keys & k.bit() != 0
    }

    /// Every key present is in `allowed`.
    fn within(&self, allowed: u64) -> bool {
        self.keys & !allowed == 0
    }

    /// The slot index and the value of member `k`.
    fn get(&self, k: Key) -> Option<(usize, Val)> {
        if !self.has(k) {
            return None;
        }
        let at = *self.slot.get(usize::from(k.0))? as usize;
        Some((at, self.doc.slots.get(at)?.val))
    }

    fn str(&self, k: Key) -> Option<&'d str> {
        self.doc.str(self.get(k)?.1)
    }

    /// The length in bytes of string member `k`.
    fn str_len(&self, k: Key) -> Option<usize> {
        match self.get(k)?.1 {
            Val::Str { len, .. } => Some(len as usize),
            _ => None,
        }
    }

    fn int(&self, k: Key) -> Option<u64> {
        match self.get(k)?.1 {
            Val::Int(n) => Some(n),
            _ => None,
        }
    }

    fn bool(&self, k: Key) -> Option<bool> {
        match self.get(k)?.1 {
            Val::Bool(b) => Some(b),
            _ => None,
        }
    }

    fn obj(&self, k: Key) -> Option<Obj<'d>> {
        Obj::at(self.doc, self.get(k)?.0)
    }

    fn arr(&self, k: Key) -> Option<Arr<'d>> {
        let m = self.doc.container(self.get(k)?.0)?;
        Some(Arr(m, m.len? as usize))
    }

    /// `k` is absent, or present and passes `ok` once read as its type (`null` or another
    /// type fails).
    fn opt<T>(&self, k: Key, read: fn(&Self, Key) -> Option<T>, ok: impl FnOnce(T) -> bool) -> bool {
        !self.has(k) || read(self, k).is_some_and(ok)
    }

    fn int_in(&self, k: Key, lo: u64, hi: u64) -> bool {
        self.int(k).is_some_and(|n| (lo..=hi).contains(&n))
    }

    fn opt_int_in(&self, k: Key, lo: u64, hi: u64) -> bool {
        !self.has(k) || self.int_in(k, lo, hi)
    }
}

/// An array of the line and its length.
#[derive(Clone, Copy)]
struct Arr<'d>(Members<'d>, usize);

impl<'d> Arr<'d> {
    fn len(self) -> usize {
        self.1
    }

    /// Every element is an object with keys within `allowed` that passes `ok`.
    fn all_objs(self, allowed: u64, mut ok: impl FnMut(&Obj<'d>) -> bool) -> bool {
        let doc = self.0.doc;
        self.0.into_iter().all(|(i, _)| Obj::at(doc, i).is_some_and(|o| o.within(allowed) && ok(&o)))
    }

    /// The elements as strings (`None` for an element of another type).
    fn strs(self) -> impl Iterator<Item = Option<&'d str>> {
        let doc = self.0.doc;
        self.0.map(move |(_, s)| doc.str(s.val))
    }
}

thread_local! {
    /// This thread's tape, reused from line to line.
    static TAPE: RefCell<Tape> = RefCell::new(Tape::default());
}

/// Scan `line` (strings containing `handle` are not accepted) and judge its root object.
fn with_root<R>(
    line: &[u8],
    handle: Option<&CapabilityHandle>,
    judge: impl FnOnce(&Obj<'_>) -> Option<R>,
) -> Option<R> {
    // Positions on the tape are u32 (every line a binding allows is far shorter).
    if u32::try_from(line.len()).is_err() {
        return None;
    }
    // One cheap pass settles the common case: a line of printable ASCII only (0x20..=0x7f) is
    // UTF-8 and has no control character anywhere. Any other line is checked to be UTF-8 as a
    // whole, and its strings for control characters one by one. A line is converted to text
    // whole when that is checked anyway or the line is short; the strings of a long printable
    // line (a 4 KiB read result) are converted only when a rule reads them as text.
    let printable = line.iter().map(|b| b.wrapping_sub(0x20)).max().is_none_or(|m| m < 0x60);
    let whole = match printable && line.len() > 1024 {
        true => None,
        false => Some(std::str::from_utf8(line).ok()?),
    };
    TAPE.try_with(|cell| {
        let mut tape = cell.try_borrow_mut().ok()?;
        tape.clear();
        let scanned = Scanner { bytes: line, at: 0, tape: &mut tape, handle, controls: !printable }.document();
        let verdict = scanned.and_then(|()| {
            let doc = Doc { line, whole, text: &tape.text, slots: &tape.slots };
            Obj::at(&doc, 0).and_then(|root| judge(&root))
        });
        tape.trim();
        verdict
    })
    .ok()?
}

/// `Some(kind)` when the line (LF excluded) is an adapter frame that the full path accepts
/// travelling in `dir` on `binding`; `None` when this path does not decide (the caller then
/// runs the full path). Always `None` inside `schema::with_schema_confirmation`, so that the
/// full path there is the whole validator as it was.
pub fn accept_frame(line: &[u8], binding: &Binding, dir: Direction) -> Option<FrameKind> {
    if super::schema::confirming() || line.len() as u64 + 1 > binding.line_limit(dir) {
        return None;
    }
    with_root(line, Some(binding.handle()), |f| frame(f, binding, dir))
}

/// [`accept_frame`] towards the daemon, and a successful result's data keeps the adapter's
/// single-frame obligations (`adapter_output::data_obligation`, the same rules read on the
/// tape); `None` when this path does not decide.
pub fn accept_adapter_output(line: &[u8], binding: &Binding) -> Option<FrameKind> {
    let dir = Direction::ToDaemon;
    if super::schema::confirming() || line.len() as u64 + 1 > binding.line_limit(dir) {
        return None;
    }
    with_root(line, Some(binding.handle()), |f| {
        let k = frame(f, binding, dir)?;
        match k {
            FrameKind::Result { ok: true, operation } => obligations_ok(operation, &f.obj(key!("data"))?).then_some(k),
            _ => Some(k),
        }
    })
}

/// `adapter_output::data_obligation` finds nothing in the data `d` of a successful result.
fn obligations_ok(op: ToolOperation, d: &Obj<'_>) -> bool {
    use super::data_order::{first_out_of_order, first_unsorted, is_real_time};
    let real_time = |o: &Obj<'_>| o.opt(key!("modifiedAt"), Obj::str, is_real_time);
    match op {
        ToolOperation::FsRead => d.int(key!("bytesRead")) == d.str_len(key!("content")).map(|n| n as u64),
        ToolOperation::FsStat => {
            (d.str(key!("type")) != Some("directory") || d.int(key!("size")) == Some(0)) && real_time(d)
        }
        ToolOperation::FsList => d.arr(key!("entries")).is_some_and(|a| {
            let doc = a.0.doc;
            let entries = || a.0.filter_map(move |(i, _)| Obj::at(doc, i));
            first_unsorted(entries().map(|e| e.str(key!("name")).unwrap_or_default())).is_none()
                && entries().all(|e| real_time(&e))
        }),
        ToolOperation::FsSearch => d.arr(key!("matches")).is_some_and(|a| {
            let doc = a.0.doc;
            let matches = a.0.filter_map(move |(i, _)| Obj::at(doc, i)).map(|m| {
                (
                    m.str(key!("path")).unwrap_or_default(),
                    m.int(key!("line")).unwrap_or(0),
                    m.int(key!("column")).unwrap_or(0),
                )
            });
            first_out_of_order(matches).is_none()
        }),
        ToolOperation::FsWrite | ToolOperation::FsEdit => true,
    }
}

fn frame(f: &Obj<'_>, binding: &Binding, dir: Direction) -> Option<FrameKind> {
    let m = masks();
    let kind = f.str(key!("kind"))?;
    // bind and bound (a handle, operations, limits) are left to the full path.
    let (_, allowed, from) = m.kinds.iter().find(|(k, _, _)| *k == kind)?;
    if *from != dir || !f.within(*allowed) || !same_identity(f, binding) {
        return None;
    }
    let id = |k: Key, max: usize| f.str(k).is_some_and(|s| s.len() <= max && is_frame_id(s));
    let request = id(key!("requestId"), 128);
    let target = || request && id(key!("targetRequestId"), 128);
    // The operation of an invoke or a result, with valid ids.
    let op = || {
        let op = f.str(key!("operation"))?.parse::<ToolOperation>().ok();
        op.filter(|op| request && id(key!("idempotencyKey"), 512) && binding.operations().contains(op))
    };
    match kind {
        "invoke" => {
            let op = op()?;
            payload_ok(op, &f.obj(key!("payload"))?, m).then_some(FrameKind::Invoke(op))
        }
        "result" => {
            let op = op()?;
            let ok = f.bool(key!("ok"))?;
            let fine = if ok {
                !f.has(key!("error")) && f.obj(key!("data")).is_some_and(|d| data_ok(op, &d, m))
            } else {
                !f.has(key!("data")) && f.obj(key!("error")).is_some_and(|e| error_ok(&e, m))
            };
            fine.then_some(FrameKind::Result { operation: op, ok })
        }
        "abort" => target().then_some(FrameKind::Abort),
        "aborted" => {
            let aborted = f.bool(key!("aborted")).filter(|_| target())?;
            let fine = match f.get(key!("error")) {
                None => true,
                Some(_) if aborted => false,
                Some((at, _)) => Obj::at(f.doc, at).is_some_and(|e| error_ok(&e, m)),
            };
            fine.then_some(FrameKind::Aborted(aborted))
        }
        "revoke" => Some(FrameKind::Revoke),
        "revoked" => Some(FrameKind::Revoked),
        _ => None,
    }
}

/// The frame echoes the binding's identity.
fn same_identity(f: &Obj<'_>, binding: &Binding) -> bool {
    let id = binding.identity();
    let strings = [
        (key!("protocolVersion"), id.protocol_version),
        (key!("adapterId"), id.adapter_id),
        (key!("adapterVersion"), id.adapter_version),
        (key!("hostInstanceId"), id.host_instance_id),
        (key!("sessionId"), id.session_id),
    ];
    strings.iter().all(|(k, want)| f.str(*k) == Some(want))
        && f.int(key!("generation")).is_some_and(|g| g <= MAX_SAFE_INTEGER && g == id.generation)
}

/// `frame::check_invoke_payload` accepts the payload.
fn payload_ok(op: ToolOperation, p: &Obj<'_>, m: &Masks) -> bool {
    if !p.within(m.payload[op as usize])
        || !p.str(key!("path")).is_some_and(|s| is_valid_path(s, PathSide::Adapter, false))
    {
        return false;
    }
    let digest = || p.opt(key!("expectedDigest"), Obj::str, is_digest);
    match op {
        ToolOperation::FsList => p.opt_int_in(key!("maxEntries"), 1, 10_000),
        ToolOperation::FsStat => true,
        ToolOperation::FsRead => {
            p.opt_int_in(key!("offset"), 0, MAX_SAFE_INTEGER)
                && p.opt_int_in(key!("maxBytes"), 1, MAX_CONTENT_BYTES as u64)
        }
        ToolOperation::FsSearch => {
            p.str(key!("query")).is_some_and(|q| units_in(q, 4096) && !q.contains(['\r', '\n']))
                && p.opt_int_in(key!("maxResults"), 1, 10_000)
        }
        ToolOperation::FsWrite => {
            p.str_len(key!("content")).is_some_and(|n| n <= MAX_CONTENT_BYTES)
                && [key!("create"), key!("overwrite")].iter().all(|k| p.opt(*k, Obj::bool, |_| true))
                && digest()
        }
        ToolOperation::FsEdit => {
            p.arr(key!("edits")).is_some_and(|e| {
                (1..=256).contains(&e.len())
                    && e.all_objs(m.edit, |e| {
                        e.str_len(key!("oldText")).is_some_and(|n| n > 0) && e.str_len(key!("newText")).is_some()
                    })
            }) && digest()
        }
    }
}

/// `frame::check_result_data` accepts the data.
fn data_ok(op: ToolOperation, d: &Obj<'_>, m: &Masks) -> bool {
    if !d.within(m.data[op as usize]) {
        return false;
    }
    let bytes = MAX_CONTENT_BYTES as u64;
    let truncated = || d.bool(key!("truncated")).is_some();
    let entry_type = |o: &Obj<'_>| matches!(o.str(key!("type")), Some("file" | "directory"));
    let digest = || d.str(key!("digest")).is_some_and(is_digest);
    match op {
        ToolOperation::FsList => {
            d.arr(key!("entries")).is_some_and(|e| {
                e.len() <= 10_000
                    && e.all_objs(m.entry, |e| {
                        e.str(key!("name")).is_some_and(is_entry_name)
                            && entry_type(e)
                            && e.opt_int_in(key!("size"), 0, MAX_SAFE_INTEGER)
                            && e.opt(key!("modifiedAt"), Obj::str, is_timestamp)
                    })
            }) && truncated()
        }
        ToolOperation::FsStat => {
            entry_type(d)
                && d.int_in(key!("size"), 0, MAX_SAFE_INTEGER)
                && d.opt(key!("modifiedAt"), Obj::str, is_timestamp)
        }
        ToolOperation::FsRead => {
            d.str_len(key!("content")).is_some_and(|n| n <= MAX_CONTENT_BYTES)
                && d.int_in(key!("bytesRead"), 0, bytes)
                && d.bool(key!("eof")).is_some()
        }
        ToolOperation::FsSearch => {
            d.arr(key!("matches")).is_some_and(|ms| {
                ms.len() <= 10_000
                    && ms.all_objs(m.matched, |e| {
                        e.str(key!("path")).is_some_and(|p| is_valid_path(p, PathSide::Adapter, true))
                            && e.int_in(key!("line"), 1, MAX_SAFE_INTEGER)
                            && e.int_in(key!("column"), 1, MAX_SAFE_INTEGER)
                            && e.str(key!("text")).is_some_and(|t| utf16_len(t) <= 4096)
                    })
            }) && truncated()
        }
        ToolOperation::FsWrite => {
            d.bool(key!("created")).is_some() && d.int_in(key!("bytesWritten"), 0, bytes) && digest()
        }
        ToolOperation::FsEdit => d.int_in(key!("replacements"), 0, 256) && digest(),
    }
}

/// `frame::check_error_body` accepts the error body.
fn error_ok(e: &Obj<'_>, m: &Masks) -> bool {
    e.within(m.error)
        && e.str(key!("code")).is_some_and(|s| s.len() <= 128 && is_error_code(s))
        && e.str(key!("message")).is_some_and(|s| units_in(s, 1024))
        && e.bool(key!("retryable")).is_some()
}

/// A descriptor this path admits, borrowed from the line.
struct Admitted<'d> {
    identity: Identity<'d>,
    endpoint_path: &'d str,
    handle: &'d str,
    operations: [ToolOperation; 6],
    granted: usize,
    limits: AdapterLimits,
    bind_bytes: usize,
    bound_bytes: usize,
}

/// `admit_descriptor` (checks 1–11) admits the descriptor `d`.
fn admit<'d>(d: &Obj<'d>, expected: Option<&ExpectedBinding<'_>>) -> Option<Admitted<'d>> {
    let m = masks();
    if !d.within(m.descriptor) {
        return None;
    }
    let protocol_version = d.str(key!("protocolVersion")).filter(|s| *s == "1.0")?;
    let adapter_id = d.str(key!("adapterId")).filter(|s| units_in(s, 128) && is_adapter_id(s))?;
    let adapter_version = d.str(key!("adapterVersion")).filter(|s| units_in(s, 64) && is_semver(s))?;
    let ep = d.obj(key!("endpoint")).filter(|e| e.within(m.endpoint) && e.str(key!("transport")) == Some("unix"))?;
    let endpoint_path = ep.str(key!("path")).filter(|s| units_in(s, 4096) && is_endpoint_path(s))?;
    let b = d.obj(key!("binding")).filter(|b| b.within(m.binding))?;
    let binding_id = |k: Key, max: usize| b.str(k).filter(|s| units_in(s, max) && !has_control(s));
    let host_instance_id = binding_id(key!("hostInstanceId"), 128)?;
    let session_id = binding_id(key!("sessionId"), 256)?;
    let generation = b.int(key!("generation")).filter(|g| *g <= MAX_SAFE_INTEGER)?;
    let handle = b.str(key!("capabilityHandle")).filter(|s| (32..=512).contains(&s.len()) && is_base64url(s))?;
    if [adapter_id, adapter_version, endpoint_path, host_instance_id, session_id].iter().any(|s| s.contains(handle)) {
        return None;
    }
    if expected.is_some_and(|exp| {
        host_instance_id != exp.host_instance_id || session_id != exp.session_id || generation as i64 != exp.generation
    }) {
        return None;
    }
    let ops = d.arr(key!("operations")).filter(|o| (1..=6).contains(&o.len()))?;
    let mut operations = [ToolOperation::FsList; 6];
    let mut granted = 0;
    for name in ops.strs() {
        let op: ToolOperation = name?.parse().ok()?;
        if operations[..granted].contains(&op) {
            return None;
        }
        operations[granted] = op;
        granted += 1;
    }
    let l = d.obj(key!("limits")).filter(|l| l.within(m.limits))?;
    let mut values = [0u64; 7];
    for ((v, k), (_, lo, hi)) in values.iter_mut().zip(m.limit_keys).zip(LIMITS) {
        *v = l.int(k).filter(|n| (lo..=hi).contains(n))?;
    }
    let limits = limits_from_values(values)?;
    let identity = Identity { protocol_version, adapter_id, adapter_version, host_instance_id, session_id, generation };
    let (bind_bytes, bound_bytes) = fit(identity, handle, operations_len(ops.strs().flatten()), &limits).ok()?;
    Some(Admitted { identity, endpoint_path, handle, operations, granted, limits, bind_bytes, bound_bytes })
}

/// `Some(descriptor)` when the line (LF excluded) is a descriptor that
/// `admit_descriptor(&decode_strict(line)?, expected)` admits, with the same result; `None`
/// when this path does not decide. Always `None` inside `schema::with_schema_confirmation`.
pub fn accept_descriptor(line: &[u8], expected: Option<&ExpectedBinding<'_>>) -> Option<Descriptor> {
    if super::schema::confirming() {
        return None;
    }
    with_root(line, None, |d| {
        let a = admit(d, expected)?;
        let handle = CapabilityHandle::new(a.handle);
        let ops = &a.operations[..a.granted];
        // Admitted values fit every generated type (tests/fast_path.rs compares the two paths).
        let doc = super::compose::descriptor(&a.identity, a.endpoint_path, &handle, ops, &a.limits).ok()?;
        Some(Descriptor::from_admitted(doc, a.bind_bytes, a.bound_bytes))
    })
}

/// Whether [`accept_descriptor`] accepts the line, without building the descriptor (for a
/// verdict alone).
pub fn descriptor_accepted(line: &[u8], expected: Option<&ExpectedBinding<'_>>) -> bool {
    !super::schema::confirming() && with_root(line, None, |d| admit(d, expected).map(|_| ())).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::descriptor::admit_descriptor;
    use crate::contract::frame::judge_adapter_frame;
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
    fn names_are_the_rules_keys() {
        let mut rules: Vec<&str> = vec!["kind"];
        rules.extend(IDENTITY_KEYS);
        for kind in ["bind", "bound", "invoke", "result", "abort", "aborted", "revoke", "revoked"] {
            rules.extend(allowed_keys(kind));
        }
        for op in OPERATIONS.iter().map(|o| o.parse::<ToolOperation>().unwrap()) {
            rules.extend(payload_keys(op));
            rules.extend(data_keys(op));
        }
        rules.extend(EDIT_KEYS.iter().chain(&ENTRY_KEYS).chain(&MATCH_KEYS).chain(&ERROR_KEYS));
        rules.extend(DESCRIPTOR_KEYS.iter().chain(&ENDPOINT_KEYS).chain(&BINDING_KEYS));
        rules.extend(LIMITS.map(|(k, _, _)| k));
        let rules: std::collections::BTreeSet<&str> = rules.into_iter().collect();
        let names: std::collections::BTreeSet<&str> = NAMES.into_iter().collect();
        assert_eq!(names, rules);
        assert_eq!(names.len(), NAMES.len(), "a name twice");
        assert!(NAMES.windows(2).all(|w| w[0] < w[1]), "NAMES is kept sorted");
    }

    #[test]
    fn keys_are_found_exactly() {
        for (i, n) in NAMES.iter().enumerate() {
            assert_eq!(Key::find(n.as_bytes()), Some(Key(i as u8)), "{n}");
            assert_eq!(Key::find(format!("{n}x").as_bytes()), None, "{n}x");
            let cut = &n[..n.len() - 1];
            let found = Key::find(cut.as_bytes()).map(|k| NAMES[usize::from(k.0)]);
            assert_eq!(found, NAMES.contains(&cut).then_some(cut), "{n} cut");
            assert_eq!(Key::find(n.to_uppercase().as_bytes()), None, "{n} upper");
            // Every single byte changed.
            for i in 0..n.len() {
                let mut b = n.as_bytes().to_vec();
                b[i] ^= 0x20;
                assert_eq!(Key::find(&b), None, "{n} byte {i}");
                assert!(!same_key(n.as_bytes(), &b));
            }
        }
        for other in ["", "k", "ok\\", "kin\\u0064", "zzExtra"] {
            assert_eq!(Key::find(other.as_bytes()), None, "{other}");
        }
        assert_eq!(key!("path"), Key::find(b"path").unwrap());
        assert_eq!(Key::NONE.bit(), 0);
    }

    #[test]
    fn quotes_are_found_at_every_position() {
        for len in 0..150 {
            for at in 0..=len {
                let mut b = vec![b'a'; len];
                // Bytes that differ from a quote by one bit or by a borrow.
                for (i, c) in b.iter_mut().enumerate() {
                    *c = [b'a', b'#', b'!', 0xa2, 0x21, 0x02][i % 6];
                }
                if at < len {
                    b[at] = b'"';
                    if at + 1 < len {
                        b[at + 1] = b'"';
                    }
                }
                let want = b.iter().position(|&c| c == b'"');
                assert_eq!(quote_at(&b), want, "{len} {at}");
                if at < len {
                    b[at] = b'\\';
                }
                let want = b.iter().position(|&c| c == b'"' || c == b'\\');
                assert_eq!(string_stop(&b), want, "{len} {at} backslash");
            }
        }
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
            let full = judge_adapter_frame(&l, &b, dir).unwrap().kind;
            assert_eq!(accept_frame(&l, &b, dir), Some(full), "{name}");
            // Pretty-printed (whitespace everywhere) it is the same frame.
            let pretty = serde_json::to_vec_pretty(&base(name))
                .unwrap()
                .iter()
                .map(|&c| if c == b'\n' { b'\r' } else { c })
                .collect::<Vec<u8>>();
            assert_eq!(accept_frame(&pretty, &b, dir), Some(full), "{name} pretty");
        }
    }

    /// A frame travelling to the daemon with `message` as its error message, as raw JSON.
    fn error_result(message_json: &str) -> Vec<u8> {
        let l = String::from_utf8(line(&base("result-error"))).unwrap();
        let v = base("result-error");
        let old = serde_json::to_string(&v["error"]["message"]).unwrap();
        assert!(l.contains(&old));
        l.replacen(&old, message_json, 1).into_bytes()
    }

    #[test]
    fn escapes_decode_as_serde_json_decodes_them() {
        let b = binding();
        let d = Direction::ToDaemon;
        for ok in [
            r#""plain""#,
            r#""a\nb\t\"q\" \\ \/ \b\f\r""#,
            r#""\u00e9\u00E9 \u20ac \ud83d\ude00 \uD83D\uDE00 \u0000""#,
            "\"é€😀\"",
        ] {
            let l = error_result(ok);
            assert!(judge_adapter_frame(&l, &b, d).is_ok(), "{ok}");
            assert!(accept_frame(&l, &b, d).is_some(), "{ok}");
        }
        // Escaped strings are decoded before the rules see them: a message of 1025 units
        // written with escapes is too long, one of 1024 is not.
        let long = format!("\"{}\"", "\\u0041".repeat(1024));
        assert!(accept_frame(&error_result(&long), &b, d).is_some());
        let long = format!("\"{}\\n\"", "\\u0041".repeat(1024));
        assert!(accept_frame(&error_result(&long), &b, d).is_none());
        assert!(judge_adapter_frame(&error_result(&long), &b, d).is_err());
        // Not decided here: lone or reversed surrogates, bad escapes, raw control characters,
        // unterminated strings.
        for no in [
            r#""\ud83d""#,
            r#""\ud83dx""#,
            r#""\ude00\ud83d""#,
            r#""\ud83d\u0041""#,
            r#""\x41""#,
            r#""\u00g1""#,
            r#""\u00e""#,
            "\"a\u{1}b\"",
            "\"a\tb\"",
            r#""abc"#,
            r#""abc\"#,
        ] {
            assert_eq!(accept_frame(&error_result(no), &b, d), None, "{no}");
        }
    }

    #[test]
    fn forms_left_to_the_full_path() {
        let b = binding();
        let d = Direction::ToAdapter;
        let inv = line(&base("invoke"));
        let text = String::from_utf8(inv.clone()).unwrap();
        assert!(accept_frame(&inv, &b, d).is_some());
        let refused = |l: &str| {
            assert_eq!(accept_frame(l.as_bytes(), &b, d), None, "{l}");
        };
        // Duplicate keys, at the top and nested.
        refused(&text.replacen("\"kind\":\"invoke\"", "\"kind\":\"invoke\",\"kind\":\"invoke\"", 1));
        let dup = text.replacen("\"offset\":0", "\"offset\":0,\"offset\":0", 1);
        assert_ne!(dup, text);
        refused(&dup);
        // A BOM, trailing bytes, an array where an object is due, null for an optional member.
        assert_eq!(accept_frame(&[b"\xef\xbb\xbf".as_slice(), &inv].concat(), &b, d), None);
        refused(&format!("{text} {{}}"));
        refused(&format!("{text},"));
        let arr = text.replacen(
            "{\"path\":\"src/protocol.ts\",\"offset\":0,\"maxBytes\":4096}",
            "[\"src/protocol.ts\",0,4096]",
            1,
        );
        assert_ne!(arr, text);
        refused(&arr);
        refused(&text.replacen("\"offset\":0", "\"offset\":null", 1));
        // Syntax: trailing and missing commas, leading zeros, unknown or escaped keys, bad
        // literals, invalid UTF-8.
        refused(&text.replacen("\"maxBytes\":4096}", "\"maxBytes\":4096,}", 1));
        refused(&text.replacen(",\"offset\"", "\"offset\"", 1));
        refused(&text.replacen("\"offset\":0", "\"offset\":00", 1));
        refused(&text.replacen("\"maxBytes\":4096", "\"maxBytes\":04096", 1));
        refused(&text.replacen("\"offset\":0", "\"offset\":-0", 1));
        refused(&text.replacen("\"offset\"", "\"off\\u0073et\"", 1));
        refused(&text.replacen("\"offset\":0", "\"offset\":0,\"zz\":0", 1));
        let mut bad = inv.clone();
        let at = text.find("protocol.ts").unwrap();
        bad[at] = 0xff;
        assert_eq!(accept_frame(&bad, &b, d), None);
        // An integral float or an exponent is not decided here (the full path accepts it).
        for float in ["\"generation\":2.0", "\"generation\":2e0", "\"generation\":2E0"] {
            let l = text.replacen("\"generation\":2", float, 1);
            refused(&l);
            assert!(judge_adapter_frame(l.as_bytes(), &b, d).is_ok(), "{l}");
        }
        // Whitespace and escapes are JSON: accepted by both.
        for same in [
            format!(" \t{text}\r "),
            text.replacen("src/protocol.ts", "src\\/prot\\u006fcol.ts", 1),
            text.replace(':', " : ").replace(',', "\t,\r"),
        ] {
            assert!(judge_adapter_frame(same.as_bytes(), &b, d).is_ok(), "{same}");
            assert!(accept_frame(same.as_bytes(), &b, d).is_some(), "{same}");
        }
        // The handle anywhere, even escaped.
        let h = b.handle().expose().to_string();
        refused(&text.replacen("src/protocol.ts", &format!("src/{h}.ts"), 1));
        let hidden = format!("\\u{:04x}{}", h.as_bytes()[0], &h[1..]);
        let with = text.replacen("src/protocol.ts", &format!("src/{hidden}.ts"), 1);
        refused(&with);
        assert!(judge_adapter_frame(with.as_bytes(), &b, d).is_err());
    }

    #[test]
    fn every_member_is_read_as_its_type() {
        let b = binding();
        let write = json!({"path": "a.txt", "content": "x", "create": true, "overwrite": false,
                           "expectedDigest": "0".repeat(64)});
        let edit = json!({"path": "a.txt", "edits": [{"oldText": "a", "newText": ""}]});
        let mut inv = base("invoke");
        let mut b2 = b.clone();
        *b2.operations_mut() = ToolOperation::FsList.to_string().parse().into_iter().collect();
        for (op, payload) in [("fs.write", write), ("fs.edit", edit)] {
            inv["operation"] = json!(op);
            inv["payload"] = payload.clone();
            assert!(accept_frame(&line(&inv), &b, Direction::ToAdapter).is_some(), "{op}");
            for key in payload.as_object().unwrap().keys() {
                for wrong in [json!(null), json!(1), json!("1"), json!(true), json!([]), json!({})] {
                    let mut w = inv.clone();
                    w["payload"][key] = wrong.clone();
                    let l = line(&w);
                    if accept_frame(&l, &b, Direction::ToAdapter).is_some() {
                        assert!(judge_adapter_frame(&l, &b, Direction::ToAdapter).is_ok(), "{op} {key} {wrong}");
                    }
                }
            }
            // Granted operations only.
            assert_eq!(accept_frame(&line(&inv), &b2, Direction::ToAdapter), None, "{op}");
        }
    }

    #[test]
    fn descriptor_accepted_in_one_pass_equals_admission() {
        let v = base("descriptor");
        let one = accept_descriptor(&line(&v), Some(&EXP)).expect("the worked example");
        let full = admit_descriptor(&v, Some(&EXP)).unwrap();
        assert_eq!(format!("{one:?}"), format!("{full:?}"));
        assert!(one.handle() == full.handle());
        assert!(descriptor_accepted(&line(&v), Some(&EXP)));
        let mut other = v.clone();
        other["binding"]["sessionId"] = json!("agent-b");
        assert!(accept_descriptor(&line(&other), Some(&EXP)).is_none());
        assert!(!descriptor_accepted(&line(&other), Some(&EXP)));
        assert!(accept_descriptor(&line(&other), None).is_some());
        let mut extra = v.clone();
        extra["limits"]["maxFoo"] = json!(1);
        assert!(accept_descriptor(&line(&extra), None).is_none());
        // Limits too small for the bound frame: the fit check refuses (1561 bytes needed).
        let mut tight = v.clone();
        tight["binding"]["hostInstanceId"] = json!("€".repeat(128));
        tight["binding"]["sessionId"] = json!("€".repeat(256));
        tight["limits"]["maxRequestBytes"] = json!(2048);
        tight["limits"]["maxResponseBytes"] = json!(1561);
        assert!(admit_descriptor(&tight, None).is_ok());
        assert!(accept_descriptor(&line(&tight), None).is_some());
        tight["limits"]["maxResponseBytes"] = json!(1560);
        assert!(admit_descriptor(&tight, None).is_err());
        assert!(accept_descriptor(&line(&tight), None).is_none());
        // Duplicate and repeated operations.
        let mut twice = v.clone();
        twice["operations"] = json!(["fs.read", "fs.read"]);
        assert!(accept_descriptor(&line(&twice), None).is_none());
    }
}
