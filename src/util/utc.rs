//! UTC timestamps: the proleptic Gregorian calendar from a day count, and the two spellings
//! the crate writes (`YYYY-MM-DDTHH:MM:SS.mmmZ`, as JavaScript's `toISOString`, and the same
//! without the milliseconds).

use std::time::{SystemTime, UNIX_EPOCH};

/// (year, month 1–12, day 1–31) of a count of days from 1970-01-01, negative before it, in the
/// proleptic Gregorian calendar (Howard Hinnant's `civil_from_days`).
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097); // [0, 146096]
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // [0, 399]
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // [0, 365]
    let mp = (5 * doy + 2) / 153; // [0, 11]
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// Seconds since the Unix epoch plus nanoseconds as `YYYY-MM-DDTHH:MM:SS.mmmZ` (milliseconds
/// truncated), or `None` when the year is outside 0000–9999 (four digits cannot hold it).
pub fn format_millis(secs: i64, nsec: u64) -> Option<String> {
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    if !(0..=9999).contains(&y) {
        return None;
    }
    let (hh, mm, ss) = (sod / 3600, sod % 3600 / 60, sod % 60);
    let ms = nsec.min(999_999_999) / 1_000_000;
    // Written digit by digit: the adapter formats one for every stat and listed entry, and the
    // formatting machinery of `format!` costs more than the calendar arithmetic.
    let mut out = *b"0000-00-00T00:00:00.000Z";
    let mut put = |at: usize, width: usize, mut v: u64| {
        for i in (at..at + width).rev() {
            if let Some(b) = out.get_mut(i) {
                *b = b'0' + (v % 10) as u8;
            }
            v /= 10;
        }
    };
    // Every field is non-negative and within its width here (y in 0..=9999).
    put(0, 4, y as u64);
    put(5, 2, u64::from(m));
    put(8, 2, u64::from(d));
    put(11, 2, hh as u64);
    put(14, 2, mm as u64);
    put(17, 2, ss as u64);
    put(20, 3, ms);
    Some(out.iter().map(|&b| b as char).collect())
}

/// `t` as `YYYY-MM-DDTHH:MM:SS.mmmZ`; a time before 1970 or after 9999 reads as the epoch.
pub fn rfc3339_millis(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = i64::try_from(d.as_secs()).unwrap_or(0);
    format_millis(secs, u64::from(d.subsec_nanos())).unwrap_or_else(|| "1970-01-01T00:00:00.000Z".to_string())
}

/// `t` as `YYYY-MM-DDTHH:MM:SSZ` (whole seconds); a time before 1970 or after 9999 reads as the
/// epoch.
pub fn rfc3339_seconds(t: SystemTime) -> String {
    let mut s = rfc3339_millis(t);
    s.replace_range(19..23, "");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::text::is_timestamp;
    use std::time::Duration;

    #[test]
    fn known_instants() {
        assert_eq!(format_millis(0, 0).unwrap(), "1970-01-01T00:00:00.000Z");
        assert_eq!(format_millis(951_782_400, 5_000_000).unwrap(), "2000-02-29T00:00:00.005Z");
        assert_eq!(format_millis(1_709_251_199, 999_999_999).unwrap(), "2024-02-29T23:59:59.999Z");
        assert_eq!(format_millis(-1, 0).unwrap(), "1969-12-31T23:59:59.000Z");
        assert_eq!(format_millis(253_402_300_799, 0).unwrap(), "9999-12-31T23:59:59.000Z");
        assert_eq!(format_millis(253_402_300_800, 0), None);
        assert_eq!(format_millis(-62_167_219_200, 0).unwrap(), "0000-01-01T00:00:00.000Z");
        assert_eq!(format_millis(-62_167_219_201, 0), None);
    }

    #[test]
    fn system_times() {
        let t = UNIX_EPOCH + Duration::new(784_111_777, 125_999_999);
        assert_eq!(rfc3339_millis(t), "1994-11-06T08:49:37.125Z");
        assert_eq!(rfc3339_seconds(t), "1994-11-06T08:49:37Z");
        let before = UNIX_EPOCH - Duration::from_secs(5);
        assert_eq!(rfc3339_millis(before), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339_seconds(before), "1970-01-01T00:00:00Z");
        assert!(is_timestamp(&rfc3339_millis(SystemTime::now())));
    }

    #[test]
    fn rfc3339_agrees_with_chrono_across_centuries_and_leap_days() {
        let mut t = 0u64;
        while t < 8_000_000_000 {
            let at = UNIX_EPOCH + Duration::from_millis(t * 1000 + t % 1000);
            let want = chrono::DateTime::<chrono::Utc>::from(at).to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
            assert_eq!(rfc3339_millis(at), want);
            let want = chrono::DateTime::<chrono::Utc>::from(at).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
            assert_eq!(rfc3339_seconds(at), want);
            t += 86_399 * 7 + 12_345;
        }
    }

    #[test]
    fn digits_agree_with_format() {
        // The same fields through `format!`, over the whole representable range.
        let reference = |secs: i64, nsec: u64| {
            let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
            let sod = secs.rem_euclid(86_400);
            let (hh, mm, ss, ms) = (sod / 3600, sod % 3600 / 60, sod % 60, nsec.min(999_999_999) / 1_000_000);
            format!("{y:04}-{m:02}-{d:02}T{hh:02}:{mm:02}:{ss:02}.{ms:03}Z")
        };
        let mut secs = -62_167_219_200_i64;
        let mut checked = 0;
        while secs <= 253_402_300_799 {
            for nsec in [0, 7_000_000, 999_999_999, 123_456_789, u64::MAX] {
                assert_eq!(format_millis(secs, nsec).unwrap(), reference(secs, nsec), "secs {secs} nsec {nsec}");
                checked += 1;
            }
            secs += 7_777_777;
        }
        assert!(checked > 100_000);
    }

    #[test]
    fn every_day_is_contiguous() {
        // Walk day by day over four centuries and check the calendar has no gap or repeat.
        let (mut py, mut pm, mut pd) = civil_from_days(-1);
        assert_eq!((py, pm, pd), (1969, 12, 31));
        for day in 0..146_097 {
            let (y, m, d) = civil_from_days(day);
            let next_day = (y, m, d) == (py, pm, pd + 1);
            let next_month = d == 1 && ((y == py && m == pm + 1) || (y == py + 1 && m == 1 && pm == 12));
            assert!(next_day || next_month, "{py}-{pm}-{pd} -> {y}-{m}-{d}");
            (py, pm, pd) = (y, m, d);
        }
    }
}
