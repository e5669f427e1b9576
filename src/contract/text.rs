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

/// The instant a `modifiedAt` names, as Unix seconds and nanoseconds, when it has the form
/// [`is_timestamp`] checks *and* is a real UTC time (the pattern alone admits month 13): a
/// month 01–12, a day that month has (29 February in leap years only), hours 00–23, minutes
/// 00–59, seconds 00–60 (a leap second, counted as the next minute's first).
pub fn utc_instant(s: &str) -> Option<(i64, u32)> {
    if !is_timestamp(s) {
        return None;
    }
    let b = s.as_bytes();
    let num = |r: std::ops::Range<usize>| b[r].iter().fold(0i64, |n, d| n * 10 + i64::from(d - b'0'));
    let (y, mo, d, h, mi, sec) = (num(0..4), num(5..7), num(8..10), num(11..13), num(14..16), num(17..19));
    let leap = y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
    let days_in_month = match mo {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return None,
    };
    if !(1..=days_in_month).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let frac = &b[19..b.len() - 1];
    let nanos =
        frac.iter().skip(1).chain(std::iter::repeat(&b'0')).take(9).fold(0u32, |n, d| n * 10 + u32::from(d - b'0'));
    // Days from 1970-01-01 in the proleptic Gregorian calendar (March-based years).
    let (yy, mm) = if mo <= 2 { (y - 1, mo + 9) } else { (y, mo - 3) };
    let era = yy.div_euclid(400);
    let yoe = yy - era * 400;
    let doy = (153 * mm + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some((days * 86_400 + h * 3_600 + mi * 60 + sec, nanos))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_instants_are_real_times() {
        assert_eq!(utc_instant("1970-01-01T00:00:00Z"), Some((0, 0)));
        assert_eq!(utc_instant("2000-02-29T00:00:00.005Z"), Some((951_782_400, 5_000_000)));
        assert_eq!(utc_instant("2024-02-29T23:59:59.999999999Z"), Some((1_709_251_199, 999_999_999)));
        assert_eq!(utc_instant("1969-12-31T23:59:59.5Z"), Some((-1, 500_000_000)));
        assert_eq!(utc_instant("0000-01-01T00:00:00Z"), Some((-62_167_219_200, 0)));
        assert_eq!(utc_instant("9999-12-31T23:59:60Z"), Some((253_402_300_800, 0)));
        for t in [
            "2026-13-01T00:00:00Z",
            "2026-00-01T00:00:00Z",
            "2025-02-29T00:00:00Z",
            "1900-02-29T00:00:00Z",
            "2026-04-31T00:00:00Z",
            "2026-01-00T00:00:00Z",
            "2026-01-01T24:00:00Z",
            "2026-01-01T00:60:00Z",
            "2026-01-01T00:00:61Z",
            "2026-01-01T00:00:00+00:00",
        ] {
            assert_eq!(utc_instant(t), None, "{t}");
        }
        // Every day of four centuries agrees with the calendar the reports and the reference
        // adapter format with.
        for day in (-146_097..146_097).step_by(7) {
            let secs = day * 86_400 + 45_296;
            let t = crate::util::utc::format_millis(secs, 0).unwrap();
            assert_eq!(utc_instant(&t), Some((secs, 0)), "{t}");
        }
    }

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
