//! Small text rules shared by every check: UTF-16 unit counts, control characters and the
//! protocol's fixed patterns (written out by hand, so each is exact and cheap).

/// Length in UTF-16 code units, as JavaScript's `String.length` counts it: every character is
/// one unit except those beyond the BMP (four UTF-8 bytes), which are two. Counted on the
/// bytes: each byte that starts a character (not `10xxxxxx`) once, and a four-byte lead
/// (`11110xxx`) once more.
pub fn utf16_len(s: &str) -> usize {
    s.bytes().map(|b| usize::from(b & 0xc0 != 0x80) + usize::from(b >= 0xf0)).sum()
}

/// Whether `s` has 1..=max UTF-16 units (never more units than bytes).
pub fn units_in(s: &str, max: usize) -> bool {
    !s.is_empty() && (s.len() <= max || utf16_len(s) <= max)
}

/// C0 control characters and DEL (all ASCII, so a byte of one is the character).
pub fn has_control(s: &str) -> bool {
    s.bytes().any(|b| b < 0x20 || b == 0x7f)
}

/// A `hostInstanceId`: 1–128 UTF-16 units, no C0 control or DEL (tool-adapter schema
/// `HostInstanceId`, with the length counted as the semantic layer counts it).
pub fn is_host_instance_id(s: &str) -> bool {
    units_in(s, 128) && !has_control(s)
}

/// `^[A-Za-z0-9][A-Za-z0-9._:-]*$`: adapter request ids and idempotency keys.
pub fn is_frame_id(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b[0].is_ascii_alphanumeric()
        && b[1..].iter().all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b':' | b'-'))
}

/// `^[A-Za-z0-9][A-Za-z0-9._-]*$`: adapter ids.
pub fn is_adapter_id(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b[0].is_ascii_alphanumeric()
        && b[1..].iter().all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'))
}

/// base64url alphabet `[A-Za-z0-9_-]`.
pub fn is_base64url(s: &str) -> bool {
    s.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-')
}

/// `^[a-z][a-z0-9_]*$`: error codes.
pub fn is_error_code(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b[0].is_ascii_lowercase()
        && b[1..].iter().all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_')
}

/// 64 lowercase hex characters.
pub fn is_digest(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
}

/// `^[0-9]+\.[0-9]+$` (ASCII digits only).
pub fn is_major_minor(s: &str) -> bool {
    match s.split_once('.') {
        Some((a, b)) => {
            !a.is_empty()
                && !b.is_empty()
                && a.bytes().all(|c| c.is_ascii_digit())
                && b.bytes().all(|c| c.is_ascii_digit())
        }
        None => false,
    }
}

/// `adapterVersion`, as Pi Daemon 0.3.3 checks it: `MAJOR.MINOR.PATCH` with no leading zeros,
/// then an optional `-pre` and an optional `+build`, each a non-empty run of
/// `[0-9A-Za-z.-]` (so `1.2.0-01` and `1.2.0-a..b` pass; strict SemVer 2.0.0 would refuse
/// them, but the protocol text does not ask for it). ASCII only.
pub fn is_semver(s: &str) -> bool {
    fn numeric(p: &str) -> bool {
        !p.is_empty() && p.bytes().all(|c| c.is_ascii_digit()) && (p == "0" || !p.starts_with('0'))
    }
    fn tail_chars(p: &str) -> bool {
        !p.is_empty() && p.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'.' || c == b'-')
    }
    let core_end = s.find(['-', '+']).unwrap_or(s.len());
    let (core, mut rest) = s.split_at(core_end);
    let parts: Vec<&str> = core.split('.').collect();
    if parts.len() != 3 || !parts.iter().all(|p| numeric(p)) {
        return false;
    }
    if let Some(r) = rest.strip_prefix('-') {
        let end = r.find('+').unwrap_or(r.len());
        if !tail_chars(&r[..end]) {
            return false;
        }
        rest = &r[end..];
    }
    match rest.strip_prefix('+') {
        Some(build) => tail_chars(build),
        None => rest.is_empty(),
    }
}

/// `YYYY-MM-DDTHH:MM:SS[.fraction]Z`, the fraction 1–9 digits (so at most 30 characters).
pub fn is_timestamp(s: &str) -> bool {
    let b = s.as_bytes();
    let digits = |r: std::ops::Range<usize>| b.get(r).is_some_and(|x| x.iter().all(u8::is_ascii_digit));
    if b.len() < 20 || !digits(0..4) || b[4] != b'-' || !digits(5..7) || b[7] != b'-' || !digits(8..10) {
        return false;
    }
    if b[10] != b'T' || !digits(11..13) || b[13] != b':' || !digits(14..16) || b[16] != b':' || !digits(17..19) {
        return false;
    }
    let tail = &b[19..];
    match tail {
        [b'Z'] => true,
        // One to nine fraction digits (Pi Daemon 0.3.3 refuses more).
        [b'.', frac @ .., b'Z'] => (1..=9).contains(&frac.len()) && frac.iter().all(u8::is_ascii_digit),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_count_astral_twice() {
        assert_eq!(utf16_len("a€😀"), 1 + 1 + 2);
        for s in ["", "a", "é", "日本語", "😀😀x", "\u{7f}\u{80}\u{7ff}\u{800}\u{ffff}\u{10000}\u{10ffff}"] {
            assert_eq!(utf16_len(s), s.encode_utf16().count(), "{s:?}");
            let text = s.repeat(40);
            assert_eq!(utf16_len(&text), text.encode_utf16().count(), "{s:?} repeated");
            assert_eq!(units_in(&text, 2 * text.len()), !text.is_empty());
        }
        assert!(units_in("😀", 2) && !units_in("😀", 1) && !units_in("", 5));
        assert!(has_control("a\u{7f}") && has_control("\u{0}") && !has_control("é€😀 ~"));
    }

    #[test]
    fn semver_cases() {
        for ok in [
            "1.2.0",
            "0.0.0",
            "1.2.0-rc.1+build.5",
            "1.0.0-alpha-1",
            "1.0.0+001",
            "10.20.30-0a",
            "1.2.0-01",
            "1.2.0-a..b",
            "1.2.0-.a",
            "1.2.0+..",
            "1.2.0--+-",
        ] {
            assert!(is_semver(ok), "{ok}");
        }
        for bad in ["01.2.0", "1.2", "v1.2.0", "1.2.0-", "1.2.0+", "1.2.3.4", "", "1.2.0+a+b", "1.2.0-é", "1.2.0_a"] {
            assert!(!is_semver(bad), "{bad}");
        }
    }

    #[test]
    fn timestamps() {
        assert!(is_timestamp("2026-12-02T14:43:25Z"));
        assert!(is_timestamp("2026-12-02T14:43:25.123456789Z"));
        assert!(!is_timestamp("2026-12-02T14:43:25.1234567890Z"));
        assert!(!is_timestamp("2026-12-02T14:43:25.Z"));
        assert!(!is_timestamp("2026-12-02 14:43:25Z"));
        assert!(!is_timestamp("2026-12-02T14:43:25+00:00"));
    }

    #[test]
    fn ids() {
        assert!(is_frame_id("tool-1") && is_frame_id("a:b.c_d-e") && !is_frame_id("-a") && !is_frame_id(""));
        assert!(is_adapter_id("owner-filesystem") && !is_adapter_id("a:b"));
        assert!(is_error_code("not_found") && !is_error_code("Bad-Code") && !is_error_code("_x"));
        assert!(is_major_minor("2.0") && !is_major_minor("２.0") && !is_major_minor("2.") && !is_major_minor("2.0.0"));
    }
}
