//! The relative path rule (SPEC §5.1, PC-5.1) against a plain model.
//!
//! The model reads the spec's wording line by line: whole-string rules first (empty, over
//! 4096 bytes, absolute, backslash, C0/DEL), then the `/`-separated segments (no empty, `.`
//! or `..` segment; the whole path `.` is the root). The adapter side also accepts `./` and
//! one trailing `/`, and refuses a segment over 255 bytes.

use pi_conform::contract::{validate_relative_path, Code, PathSide};
use proptest::prelude::*;

use crate::common::config;

/// What the rule says about one path.
#[derive(Debug, PartialEq)]
enum Verdict {
    Accept { components: Vec<String>, trailing_slash: bool },
    Refuse,
}

fn model(path: &str, side: PathSide) -> Verdict {
    let adapter = side == PathSide::Adapter;
    // Whole-string rules.
    if path.is_empty() || path.len() > 4096 || path.starts_with('/') {
        return Verdict::Refuse;
    }
    let bad_char = |c: char| c == '\\' || ('\u{0}'..='\u{1f}').contains(&c) || c == '\u{7f}';
    if path.chars().any(bad_char) {
        return Verdict::Refuse;
    }
    // Segments. The adapter tolerates one trailing `/` (so `a/` is `a`, `./` is `.`).
    let mut segments: Vec<&str> = path.split('/').collect();
    let mut trailing_slash = false;
    if adapter && segments.len() > 1 && segments.last() == Some(&"") {
        segments.pop();
        trailing_slash = true;
    }
    if segments == ["."] {
        return Verdict::Accept { components: vec![], trailing_slash };
    }
    let canonical = |s: &&str| !s.is_empty() && *s != "." && *s != "..";
    if !segments.iter().all(canonical) {
        return Verdict::Refuse;
    }
    if adapter && segments.iter().any(|s| s.len() > 255) {
        return Verdict::Refuse;
    }
    Verdict::Accept { components: segments.iter().map(|s| s.to_string()).collect(), trailing_slash }
}

/// Characters that matter to the rule, plus a few ordinary ones.
fn interesting_char() -> impl Strategy<Value = char> {
    prop_oneof![
        8 => prop::sample::select(vec![
            'a', 'b', 'Z', '0', '.', '.', '/', '\\', '\0', '\u{1}', '\t', '\n', '\r', '\u{1f}', '\u{7f}', ':', ' ',
            '~', '-', 'é', '€', '😀', '\u{80}', '\u{85}', '\u{2028}', '\u{feff}',
        ]),
        1 => any::<char>(),
    ]
}

/// A string of about `n` bytes of `c`, padded with `a` to exactly `n` bytes.
fn filled(c: char, n: usize) -> String {
    let mut s = String::new();
    while s.len() + c.len_utf8() <= n {
        s.push(c);
    }
    while s.len() < n {
        s.push('a');
    }
    s
}

fn component() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(vec!["", ".", "..", "...", ".a", "..a", "a.", "a", "bc", "~", "C:", "a\\b", "é"])
            .prop_map(str::to_string),
        4 => prop::collection::vec(interesting_char(), 1..6).prop_map(|v| v.into_iter().collect()),
        1 => (254usize..=257, prop::sample::select(vec!['a', 'é', '€', '😀'])).prop_map(|(n, c)| filled(c, n)),
    ]
}

fn joined_path() -> impl Strategy<Value = String> {
    let prefix = prop::sample::select(vec!["", "", "", "/", "./", "//", "../"]);
    let suffix = prop::sample::select(vec!["", "", "", "/", "//", "/.", "/./", "/.."]);
    (prefix, prop::collection::vec(component(), 1..5), suffix).prop_map(|(p, c, s)| format!("{p}{}{s}", c.join("/")))
}

/// Paths of 4094–4098 bytes made of 200-byte components, possibly with a trailing `/`.
fn long_path() -> impl Strategy<Value = String> {
    (4094usize..=4098, any::<bool>(), prop::sample::select(vec!['a', 'é'])).prop_map(|(n, slash, c)| {
        let unit = format!("{}/", filled(c, 200));
        let mut s = String::new();
        while s.len() < n {
            s.push_str(&unit);
        }
        let mut cut = n - usize::from(slash);
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        if s.ends_with('/') {
            s.pop();
        }
        while s.len() < n - usize::from(slash) {
            s.push('b');
        }
        if slash {
            s.push('/');
        }
        s
    })
}

fn any_path() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => joined_path(),
        1 => long_path(),
        1 => prop::sample::select(vec![".", "./", "a/", "a//", "a/b/", "/", "", "./a", "a/.", "a/./b", "a/../b", "..."])
            .prop_map(str::to_string),
        1 => any::<String>(),
    ]
}

fn check(path: &str, side: PathSide) -> Result<(), TestCaseError> {
    let field = if side == PathSide::Adapter { "payload.path" } else { "path" };
    let want = model(path, side);
    match (validate_relative_path(path, side, field), want) {
        (Ok(got), Verdict::Accept { components, trailing_slash }) => {
            prop_assert_eq!(&got.components, &components, "{:?} side {:?}", path, side);
            prop_assert_eq!(got.trailing_slash, trailing_slash, "{:?} side {:?}", path, side);
            let canonical = if components.is_empty() { ".".to_string() } else { components.join("/") };
            prop_assert_eq!(got.canonical(), canonical);
        }
        (Err(e), Verdict::Refuse) => {
            let code = if side == PathSide::Adapter { Code::InvalidPath } else { Code::InvalidToolAdapterPath };
            prop_assert_eq!(e.code, code, "{:?}", path);
            prop_assert_eq!(e.field(), field);
            prop_assert!(!e.retryable);
            prop_assert!(!e.message.is_empty());
            // The error never carries the path (long paths cannot be a word of a fixed message).
            prop_assert!(path.len() < 12 || !e.message.contains(path), "message echoes the path");
        }
        (got, want) => {
            prop_assert!(false, "path {:?} side {:?}: model {:?}, implementation {:?}", path, side, want, got)
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(4096))]

    /// Accept/refuse, the components, the trailing `/` and the error code agree with the model
    /// on both sides.
    #[test]
    fn path_rule_matches_the_model(path in any_path()) {
        check(&path, PathSide::Adapter)?;
        check(&path, PathSide::Daemon)?;
    }

    /// Apart from the 255-byte component limit the daemon side is the stricter one: whatever
    /// it accepts, the adapter accepts as the same components without a trailing `/`.
    #[test]
    fn daemon_side_is_a_subset(path in any_path()) {
        let daemon = validate_relative_path(&path, PathSide::Daemon, "path");
        if let Some(d) = daemon.ok().filter(|d| d.components.iter().all(|c| c.len() <= 255)) {
            let a = validate_relative_path(&path, PathSide::Adapter, "path");
            let a = a.map_err(|e| TestCaseError::fail(format!("adapter refuses {path:?}: {e}")));
            let a = a?;
            prop_assert_eq!(a.components, d.components);
            prop_assert!(!a.trailing_slash && !d.trailing_slash);
        }
    }
}

/// The spec's own examples, so the model itself is pinned to the text.
#[test]
fn model_agrees_with_the_spec_examples() {
    use PathSide::{Adapter, Daemon};
    let refuse_both =
        ["", "/a", "a\\b", "C:\\a", "a\u{0}b", "a\u{7f}", "a/../b", "..", "a//b", "//", "./a", "a/./b", "a/."];
    for p in refuse_both {
        assert_eq!(model(p, Daemon), Verdict::Refuse, "{p:?}");
        assert_eq!(model(p, Adapter), Verdict::Refuse, "{p:?}");
    }
    for p in [".hidden", "..a", "...", "~", "a/b"] {
        assert!(matches!(model(p, Daemon), Verdict::Accept { .. }), "{p:?}");
    }
    assert_eq!(model(".", Daemon), Verdict::Accept { components: vec![], trailing_slash: false });
    for p in ["./", "a/", "a/b/"] {
        assert_eq!(model(p, Daemon), Verdict::Refuse, "{p:?}");
        assert!(matches!(model(p, Adapter), Verdict::Accept { trailing_slash: true, .. }), "{p:?}");
    }
    assert_eq!(model("a//", Adapter), Verdict::Refuse);
    let c255 = "€".repeat(85);
    assert!(matches!(model(&c255, Adapter), Verdict::Accept { .. }));
    assert_eq!(model(&format!("{c255}a"), Adapter), Verdict::Refuse);
    assert!(matches!(model(&format!("{c255}a"), Daemon), Verdict::Accept { .. }));
    let max = format!("{}/{}", "a".repeat(255), "b".repeat(4096 - 256));
    assert!(matches!(model(&max, Daemon), Verdict::Accept { .. }));
    assert_eq!(model(&format!("{max}c"), Daemon), Verdict::Refuse);
}
