//! `modifiedAt` timestamps: `YYYY-MM-DDTHH:MM:SS.mmmZ` in UTC (SPEC §5.2).

use rustix::fs::Stat;

/// The modification time of `st`, or `None` when its year is outside 0000–9999 (the field
/// is optional, so an unrepresentable time is omitted rather than invented).
pub(super) fn modified_at(st: &Stat) -> Option<String> {
    #[allow(clippy::useless_conversion)] // the field types differ between architectures
    let (secs, nsec) = (i64::from(st.st_mtime), u64::from(st.st_mtime_nsec));
    format_utc(secs, nsec)
}

/// The formatting itself has one home, `util::utc` (the calendar is shared with the
/// reports and the reference daemon).
use crate::util::utc::format_millis as format_utc;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::text::is_timestamp;
    use crate::util::utc::civil_from_days;

    #[test]
    fn known_instants() {
        assert_eq!(format_utc(0, 0).unwrap(), "1970-01-01T00:00:00.000Z");
        assert_eq!(format_utc(951_782_400, 5_000_000).unwrap(), "2000-02-29T00:00:00.005Z");
        assert_eq!(format_utc(1_709_251_199, 999_999_999).unwrap(), "2024-02-29T23:59:59.999Z");
        assert_eq!(format_utc(-1, 0).unwrap(), "1969-12-31T23:59:59.000Z");
        assert_eq!(format_utc(253_402_300_799, 0).unwrap(), "9999-12-31T23:59:59.000Z");
        assert_eq!(format_utc(253_402_300_800, 0), None);
        assert_eq!(format_utc(-62_167_219_200, 0).unwrap(), "0000-01-01T00:00:00.000Z");
        assert_eq!(format_utc(-62_167_219_201, 0), None);
    }

    #[test]
    fn every_day_round_trips_and_matches_the_contract() {
        // Walk day by day over four centuries and check the calendar is contiguous.
        let (mut py, mut pm, mut pd) = civil_from_days(-1);
        for day in 0..146_097 {
            let (y, m, d) = civil_from_days(day);
            let next_day = (y, m, d) == (py, pm, pd + 1);
            let next_month = d == 1 && ((y == py && m == pm + 1) || (y == py + 1 && m == 1 && pm == 12));
            assert!(next_day || next_month, "{py}-{pm}-{pd} -> {y}-{m}-{d}");
            (py, pm, pd) = (y, m, d);
        }
        assert!(is_timestamp(&format_utc(1_700_000_000, 123_456_789).unwrap()));
    }
}
