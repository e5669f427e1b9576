//! The fit check (SPEC §3.3, PC-3.3) against a byte-count model.
//!
//! The model counts the compact `bind` / `bound` lines the way `JSON.stringify` (Pi Daemon's
//! encoder) writes them: `"` and `\` and \b \f \n \r \t take two bytes, the other C0 controls
//! six (`\u00XX`), everything else its raw UTF-8 bytes; one LF at the end. It is pinned to the
//! spec by the reference values of PC-3.3 (492/431, 1523/990, 1622/1561, 2285/1752,
//! 2288/1755).
//!
//! Capability handles here are random test strings, still kept out of every message: they
//! travel in [`FakeHandle`], whose `Debug` is redacted, and no assertion prints a frame.

use pi_conform::contract::descriptor::{fit_check, limits_from_values, Identity, LimitValues};
use pi_conform::contract::operation::OPERATIONS;
use pi_conform::contract::{CapabilityHandle, Code};
use pi_conform::util::prng::SplitMix64;
use pi_conform::wire::{decode_strict, encode_line};
use proptest::prelude::*;
use serde_json::{json, Map, Value};

use crate::common::config;

const MAX_SAFE: u64 = 9_007_199_254_740_991;
const SIX: [&str; 6] = OPERATIONS;
/// The limits table of SPEC §3.2: name, min, max.
const LIMIT_TABLE: [(&str, u64, u64); 7] = [
    ("maxRequestBytes", 2048, 4_194_304),
    ("maxResponseBytes", 1024, 4_194_304),
    ("maxConcurrentRequests", 1, 64),
    ("maxQueuedRequests", 0, 256),
    ("requestTimeoutMs", 100, 120_000),
    ("maxIdempotencyKeys", 1, 4096),
    ("idempotencyTtlMs", 1000, 86_400_000),
];

/// A random handle whose `Debug` never shows it.
#[derive(Clone)]
struct FakeHandle(String);

impl std::fmt::Debug for FakeHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FakeHandle(<{} characters>)", self.0.len())
    }
}

/// The identity strings of a binding.
#[derive(Clone, Debug)]
struct Ident {
    adapter_id: String,
    adapter_version: String,
    host: String,
    session: String,
    generation: u64,
}

impl Ident {
    fn identity(&self) -> Identity<'_> {
        Identity {
            protocol_version: "1.0",
            adapter_id: &self.adapter_id,
            adapter_version: &self.adapter_version,
            host_instance_id: &self.host,
            session_id: &self.session,
            generation: self.generation,
        }
    }
}

// ---- the model ----

fn json_string_bytes(s: &str) -> usize {
    let body: usize = s
        .chars()
        .map(|c| match c {
            '"' | '\\' | '\u{8}' | '\u{c}' | '\n' | '\r' | '\t' => 2,
            '\u{0}'..='\u{1f}' => 6,
            c => c.len_utf8(),
        })
        .sum();
    body + 2
}

fn object_bytes(members: &[(&str, usize)]) -> usize {
    let inner: usize = members.iter().map(|(k, v)| json_string_bytes(k) + 1 + v).sum();
    2 + inner + members.len().saturating_sub(1)
}

fn array_bytes(items: &[usize]) -> usize {
    2 + items.iter().sum::<usize>() + items.len().saturating_sub(1)
}

/// Bytes of the compact frame line, LF included; `handle` present makes it a `bind`.
fn model_frame_bytes(id: &Ident, handle: Option<&str>, ops: &[&str], limits: [u64; 7]) -> usize {
    let kind = if handle.is_some() { "bind" } else { "bound" };
    let mut m = vec![
        ("protocolVersion", json_string_bytes("1.0")),
        ("kind", json_string_bytes(kind)),
        ("adapterId", json_string_bytes(&id.adapter_id)),
        ("adapterVersion", json_string_bytes(&id.adapter_version)),
        ("hostInstanceId", json_string_bytes(&id.host)),
        ("sessionId", json_string_bytes(&id.session)),
        ("generation", id.generation.to_string().len()),
    ];
    if let Some(h) = handle {
        m.push(("capabilityHandle", json_string_bytes(h)));
    }
    let ops: Vec<usize> = ops.iter().map(|o| json_string_bytes(o)).collect();
    m.push(("operations", array_bytes(&ops)));
    let lim: Vec<(&str, usize)> =
        LIMIT_TABLE.iter().zip(limits).map(|((k, _, _), v)| (*k, v.to_string().len())).collect();
    m.push(("limits", object_bytes(&lim)));
    object_bytes(&m) + 1
}

/// The frame as the spec lists it (SPEC §3.3 / §4.1), for a structural comparison.
fn spec_frame(id: &Ident, handle: Option<&str>, ops: &[&str], limits: [u64; 7]) -> Value {
    let mut lim = Map::new();
    for ((k, _, _), v) in LIMIT_TABLE.iter().zip(limits) {
        lim.insert((*k).into(), v.into());
    }
    let mut f = json!({
        "protocolVersion": "1.0",
        "kind": if handle.is_some() { "bind" } else { "bound" },
        "adapterId": id.adapter_id,
        "adapterVersion": id.adapter_version,
        "hostInstanceId": id.host,
        "sessionId": id.session,
        "generation": id.generation,
        "operations": ops,
        "limits": lim,
    });
    if let Some(h) = handle {
        f["capabilityHandle"] = h.into();
    }
    f
}

// ---- strategies ----

const ALNUM: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
const ADAPTER_ID_TAIL: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-";
const BASE64URL: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-";
/// Identity characters: plain ones, multi-byte ones, ones JSON escapes in two bytes (`"`,
/// `\`, \n, \t) or six (other C0 controls), and ones it leaves raw (DEL, U+2028).
const ID_CHARS: &str = "aZ0-._ /é€😀\"\\\u{7f}\u{2028}\u{feff}\u{fffd}\u{10ffff}\u{1}\n\t\u{1f}";

/// Characters that take the most bytes: six (escaped controls), four, three, two.
const HEAVY: &str = "\u{1}\u{2}\u{1f}😀€\"";

/// `len` characters of `alphabet` picked by `seed`: far cheaper to generate than a vector
/// of character strategies, and shrinking still shortens the string.
fn seeded(alphabet: &str, len: usize, seed: u64) -> String {
    let chars: Vec<char> = alphabet.chars().collect();
    let mut rng = SplitMix64::new(seed);
    (0..len).map(|_| chars[rng.index(chars.len())]).collect()
}

/// 1..=max identity characters, from the plain ASCII id alphabet or from all of [`ID_CHARS`].
fn id_string(max: usize) -> impl Strategy<Value = String> {
    let alphabet = prop::sample::select(vec![ADAPTER_ID_TAIL, ID_CHARS, ID_CHARS, HEAVY]);
    let len = prop_oneof![1..=max, max * 3 / 4..=max];
    (alphabet, len, any::<u64>()).prop_map(|(a, n, seed)| seeded(a, n, seed))
}

fn adapter_id() -> impl Strategy<Value = String> {
    (0usize..128, any::<u64>()).prop_map(|(n, seed)| seeded(ALNUM, 1, seed) + &seeded(ADAPTER_ID_TAIL, n, seed >> 1))
}

fn semver() -> impl Strategy<Value = String> {
    let pre = prop::option::of("[A-Za-z-][0-9A-Za-z-]{0,7}");
    let build = prop::option::of("[0-9A-Za-z-]{1,8}");
    (0u32..1000, 0u32..1000, 0u32..100_000, pre, build).prop_map(|(a, b, c, pre, build)| {
        let mut s = format!("{a}.{b}.{c}");
        if let Some(p) = pre {
            s = format!("{s}-{p}");
        }
        if let Some(b) = build {
            s = format!("{s}+{b}");
        }
        s
    })
}

fn ident() -> impl Strategy<Value = Ident> {
    let generation = prop_oneof![0u64..100, 0u64..=MAX_SAFE, Just(MAX_SAFE)];
    let heavy = |max: usize| (max * 3 / 4..=max, any::<u64>()).prop_map(|(n, seed)| seeded(HEAVY, n, seed));
    // Mostly mixed identities; a quarter near their maxima in the widest characters, so that
    // `bind` outgrows the smallest `maxRequestBytes`.
    let strings = prop_oneof![3 => (id_string(128), id_string(256)), 1 => (heavy(128), heavy(256))];
    (adapter_id(), semver(), strings, generation).prop_map(
        |(adapter_id, adapter_version, (host, session), generation)| Ident {
            adapter_id,
            adapter_version,
            host,
            session,
            generation,
        },
    )
}

fn handle() -> impl Strategy<Value = FakeHandle> {
    (32usize..=512, any::<u64>()).prop_map(|(n, seed)| FakeHandle(seeded(BASE64URL, n, seed)))
}

fn operations() -> impl Strategy<Value = Vec<&'static str>> {
    (Just(SIX.to_vec()).prop_shuffle(), 1usize..=6).prop_map(|(v, n)| v[..n].to_vec())
}

/// A byte limit: a value in range, or a distance from what the frame needs.
#[derive(Clone, Copy, Debug)]
enum Lim {
    Abs(u64),
    Near(i64),
}

/// The seven limits, the two byte limits possibly relative to the frames.
#[derive(Clone, Copy, Debug)]
struct LimitsSpec {
    request: Lim,
    response: Lim,
    rest: [u64; 5],
}

impl LimitsSpec {
    /// The limits for these frames (sizes from the model, clamped to the ranges).
    fn resolve(&self, id: &Ident, h: &FakeHandle, ops: &[&str]) -> [u64; 7] {
        let r = self.rest;
        let probe = [4096, 4096, r[0], r[1], r[2], r[3], r[4]];
        let pick = |l: Lim, need: usize, lo: u64| match l {
            Lim::Abs(v) => v,
            Lim::Near(d) => (need as i64 + d).clamp(lo as i64, 4_194_304) as u64,
        };
        let request = pick(self.request, model_frame_bytes(id, Some(&h.0), ops, probe), 2048);
        let response = pick(self.response, model_frame_bytes(id, None, ops, probe), 1024);
        [request, response, r[0], r[1], r[2], r[3], r[4]]
    }
}

fn limits() -> impl Strategy<Value = LimitsSpec> {
    let request = prop_oneof![
        Just(Lim::Abs(2048)),
        (2048u64..6000).prop_map(Lim::Abs),
        (2048u64..=4_194_304).prop_map(Lim::Abs),
        (-24i64..24).prop_map(Lim::Near),
    ];
    let response = prop_oneof![
        Just(Lim::Abs(1024)),
        (1024u64..6000).prop_map(Lim::Abs),
        (1024u64..=4_194_304).prop_map(Lim::Abs),
        (-24i64..24).prop_map(Lim::Near),
    ];
    let rest: Vec<_> = LIMIT_TABLE[2..].iter().map(|(_, lo, hi)| *lo..=*hi).collect();
    (request, response, rest).prop_map(|(request, response, r)| LimitsSpec {
        request,
        response,
        rest: [r[0], r[1], r[2], r[3], r[4]],
    })
}

/// One identity value grown, the others kept.
#[derive(Clone, Debug)]
enum Grow {
    AdapterId(String),
    /// More build metadata keeps a valid SemVer valid.
    AdapterVersion(String),
    Host(String),
    Session(String),
    GenerationDigit(u8),
    Handle(String),
}

fn grow() -> impl Strategy<Value = Grow> {
    prop_oneof![
        (1usize..=8, any::<u64>()).prop_map(|(n, seed)| Grow::AdapterId(seeded(ADAPTER_ID_TAIL, n, seed))),
        "[0-9A-Za-z-]{1,8}".prop_map(Grow::AdapterVersion),
        id_string(8).prop_map(Grow::Host),
        id_string(8).prop_map(Grow::Session),
        (0u8..10).prop_map(Grow::GenerationDigit),
        (1usize..=8, any::<u64>()).prop_map(|(n, seed)| Grow::Handle(seeded(BASE64URL, n, seed))),
    ]
}

fn apply(g: &Grow, id: &Ident, h: &FakeHandle) -> (Ident, FakeHandle) {
    let (mut id, mut h) = (id.clone(), h.clone());
    match g {
        Grow::AdapterId(s) => id.adapter_id.push_str(s),
        Grow::AdapterVersion(s) if id.adapter_version.contains('+') => id.adapter_version.push_str(s),
        Grow::AdapterVersion(s) => id.adapter_version = format!("{}+{s}", id.adapter_version),
        Grow::Host(s) => id.host.push_str(s),
        Grow::Session(s) => id.session.push_str(s),
        Grow::GenerationDigit(d) => {
            // One more digit while it stays a safe integer.
            id.generation = id.generation.checked_mul(10).map_or(id.generation, |g| g + u64::from(*d));
            if id.generation > MAX_SAFE {
                id.generation /= 10;
            }
        }
        Grow::Handle(s) => h.0.push_str(s),
    }
    (id, h)
}

// ---- running the implementation ----

fn ops_json(ops: &[&str]) -> Value {
    Value::Array(ops.iter().map(|o| Value::from(*o)).collect())
}

fn run_fit(id: &Ident, h: &FakeHandle, ops: &[&str], limits: [u64; 7]) -> Result<(usize, usize), (Code, String, u64)> {
    let handle = CapabilityHandle::new(h.0.clone());
    let limits = limits_from_values(limits).expect("the strategies keep both non-zero limits at least 1");
    let r = fit_check(id.identity(), &handle, &ops_json(ops), &limits, "descriptor.limits.");
    r.map_err(|e| {
        // Nothing about the refusal may carry the handle.
        let body = serde_json::to_string(&e.to_body()).unwrap_or_default();
        assert!(!body.contains(&h.0), "the fit refusal carries the handle");
        let required = e.details.get("requiredBytes").and_then(Value::as_u64).unwrap_or(u64::MAX);
        (e.code, e.field().to_string(), required)
    })
}

const ROOMY: [u64; 7] = [4_194_304, 4_194_304, 64, 256, 120_000, 4096, 86_400_000];

proptest! {
    #![proptest_config(config(768))]

    /// Sizes and verdict follow the model; the counts are the lengths of the real lines, and
    /// those lines hold exactly the spec's frame.
    #[test]
    fn fit_check_matches_the_model(id in ident(), h in handle(), ops in operations(), lim in limits()) {
        let lim = lim.resolve(&id, &h, &ops);
        let bind = model_frame_bytes(&id, Some(&h.0), &ops, lim);
        let bound = model_frame_bytes(&id, None, &ops, lim);
        let got = run_fit(&id, &h, &ops, lim);
        let want = if bind as u64 > lim[0] {
            Err((Code::InvalidToolAdapterLimit, "descriptor.limits.maxRequestBytes".to_string(), bind as u64))
        } else if bound as u64 > lim[1] {
            Err((Code::InvalidToolAdapterLimit, "descriptor.limits.maxResponseBytes".to_string(), bound as u64))
        } else {
            Ok((bind, bound))
        };
        prop_assert_eq!(&got, &want, "model bind {} bound {}, limits {:?}", bind, bound, &lim[..2]);

        let identity = id.identity();
        let handle = CapabilityHandle::new(h.0.clone());
        let limits_json = limits_from_values(lim).expect("non-zero limits").to_json();
        // Identities no generated type admits (control characters): the frames are built raw.
        let bind_frame = identity.frame(
            "bind",
            [
                ("capabilityHandle", Value::from(handle.expose())),
                ("operations", ops_json(&ops)),
                ("limits", limits_json.clone()),
            ],
        );
        let bound_frame = identity.frame("bound", [("operations", ops_json(&ops)), ("limits", limits_json)]);
        let bind_line = encode_line(&bind_frame);
        let bound_line = encode_line(&bound_frame);
        prop_assert_eq!(bind_line.len(), bind);
        prop_assert_eq!(bound_line.len(), bound);
        let bind_back = decode_strict(&bind_line[..bind_line.len() - 1]);
        prop_assert!(bind_back == Ok(spec_frame(&id, Some(&h.0), &ops, lim)), "bind frame differs from SPEC §3.3");
        let bound_back = decode_strict(&bound_line[..bound_line.len() - 1]);
        prop_assert!(bound_back == Ok(spec_frame(&id, None, &ops, lim)), "bound frame differs from SPEC §3.3");
        prop_assert!(!bound_line.windows(h.0.len()).any(|w| w == h.0.as_bytes()), "bound carries the handle");
    }

    /// Equality passes, one byte less fails (when the limit range allows it).
    #[test]
    fn fit_limits_are_inclusive(id in ident(), h in handle(), ops in operations(), lim in limits()) {
        let lim = lim.resolve(&id, &h, &ops);
        // The frames hold the limits themselves: find the limits equal to the sizes they give.
        let mut exact = lim;
        for _ in 0..4 {
            exact[0] = (model_frame_bytes(&id, Some(&h.0), &ops, exact) as u64).max(2048);
            exact[1] = (model_frame_bytes(&id, None, &ops, exact) as u64).max(1024);
        }
        let bind = model_frame_bytes(&id, Some(&h.0), &ops, exact);
        let bound = model_frame_bytes(&id, None, &ops, exact);
        prop_assume!(exact[0] == (bind as u64).max(2048) && exact[1] == (bound as u64).max(1024));
        prop_assert_eq!(run_fit(&id, &h, &ops, exact), Ok((bind, bound)));
        let same_digits = |n: u64| (n - 1).to_string().len() == n.to_string().len();
        if bind as u64 > 2048 && same_digits(exact[0]) {
            let mut tight = exact;
            tight[0] -= 1;
            let field = run_fit(&id, &h, &ops, tight).map_err(|e| e.1);
            prop_assert_eq!(field, Err("descriptor.limits.maxRequestBytes".to_string()));
        }
        if bound as u64 > 1024 && same_digits(exact[1]) {
            let mut tight = exact;
            tight[1] -= 1;
            let field = run_fit(&id, &h, &ops, tight).map_err(|e| e.1);
            prop_assert_eq!(field, Err("descriptor.limits.maxResponseBytes".to_string()));
        }
    }

    /// Growing any one identity value never shrinks a frame and never turns a refusal into
    /// an admission (nor a `maxRequestBytes` refusal into a `maxResponseBytes` one).
    #[test]
    fn fit_is_monotone_in_every_identity_length(
        id in ident(), h in handle(), ops in operations(), lim in limits(), g in grow(),
    ) {
        let lim = lim.resolve(&id, &h, &ops);
        let (id2, h2) = apply(&g, &id, &h);
        let (Ok(base), Ok(grown)) = (run_fit(&id, &h, &ops, ROOMY), run_fit(&id2, &h2, &ops, ROOMY)) else {
            return Err(TestCaseError::fail("refused with the largest limits"));
        };
        prop_assert!(grown.0 >= base.0 && grown.1 >= base.1, "{:?}: {:?} -> {:?}", g, base, grown);
        let digits = |g: u64| g.to_string().len();
        let longer = !matches!(g, Grow::GenerationDigit(_)) || digits(id2.generation) > digits(id.generation);
        if longer {
            prop_assert!(grown.0 > base.0, "{:?}: bind did not grow", g);
        }
        if matches!(g, Grow::Handle(_)) {
            prop_assert_eq!(grown.1, base.1, "the handle is not in bound");
        }
        match (run_fit(&id, &h, &ops, lim), run_fit(&id2, &h2, &ops, lim)) {
            (Err(_), Ok(_)) => prop_assert!(false, "{:?} turned a refusal into an admission", g),
            (Err(a), Err(b)) if a.1.ends_with("maxRequestBytes") => prop_assert_eq!(a.1, b.1),
            _ => {}
        }
    }
}

/// The reference values of PC-3.3, through both the model and the implementation.
#[test]
fn fit_reference_values() {
    let worked = Ident {
        adapter_id: "owner-filesystem".into(),
        adapter_version: "1.2.0".into(),
        host: "host-019f".into(),
        session: "agent-a".into(),
        generation: 2,
    };
    let h40 = FakeHandle("aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789_-AB".into());
    let worked_limits = [1_048_576, 1_048_576, 4, 16, 30_000, 256, 3_600_000];
    let euro = Ident { host: "€".repeat(128), session: "€".repeat(256), ..worked.clone() };
    let euro_max = Ident {
        adapter_id: "a".repeat(128),
        adapter_version: format!("1.2.0+{}", "b".repeat(58)),
        generation: MAX_SAFE,
        ..euro.clone()
    };
    let ascii_max = Ident { host: "h".repeat(128), session: "s".repeat(256), ..euro_max.clone() };
    let h512 = FakeHandle("A".repeat(512));
    let with = |req: u64, resp: u64| [req, resp, 64, 256, 120_000, 4096, 86_400_000];
    let euro_limits = [2048, 1024, 4, 16, 30_000, 256, 3_600_000];
    let euro_roomy = [2048, 2048, 4, 16, 30_000, 256, 3_600_000];
    type Row<'a> = (&'a Ident, &'a FakeHandle, [u64; 7], (usize, usize), Option<&'a str>);
    let rows: [Row; 7] = [
        (&worked, &h40, worked_limits, (492, 431), None),
        (&ascii_max, &h512, ROOMY, (1523, 990), None),
        (&euro, &h40, euro_limits, (1622, 1561), Some("maxResponseBytes")),
        (&euro, &h40, euro_roomy, (1622, 1561), None),
        (&euro_max, &h512, with(2048, 2048), (2285, 1752), Some("maxRequestBytes")),
        (&euro_max, &h512, with(2048, 4_194_304), (2288, 1755), Some("maxRequestBytes")),
        (&euro_max, &h512, with(2048, 1024), (2285, 1752), Some("maxRequestBytes")),
    ];
    for (i, (id, h, lim, sizes, refused)) in rows.into_iter().enumerate() {
        let model = (model_frame_bytes(id, Some(&h.0), &SIX, lim), model_frame_bytes(id, None, &SIX, lim));
        assert_eq!(model, sizes, "row {i}: the model disagrees with PC-3.3");
        match (run_fit(id, h, &SIX, lim), refused) {
            (Ok(got), None) => assert_eq!(got, sizes, "row {i}"),
            (Err((code, field, required)), Some(which)) => {
                assert_eq!(code, Code::InvalidToolAdapterLimit, "row {i}");
                assert_eq!(field, format!("descriptor.limits.{which}"), "row {i}");
                let want = if which == "maxRequestBytes" { sizes.0 } else { sizes.1 };
                assert_eq!(required, want as u64, "row {i}");
            }
            (got, _) => panic!("row {i}: {got:?}"),
        }
    }
}
