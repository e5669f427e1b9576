//! Coverage as data (issue 24 item 2): both catalogues, against `conformance/enumerations.json`.
//!
//! Fails when a catalogue entry names no technique; when a clause with MUST cases in a suite
//! has no negative case there; when an item of an enumerating MUST sentence has no case on a
//! side the sentence binds; when a limit has no case applying `boundary` (exactly at it); when
//! the enumerations name a case id no catalogue holds. Every known gap is listed in
//! [`KNOWN_GAPS`] with why it is open; the list may only shrink: an entry that is no longer a
//! gap fails the test until it is removed, and a new gap fails it until a case covers it (or,
//! for a gap that cannot be closed now, until the lead adds it here with a reason).

use pi_conform::conform::coverage::{gaps, Enumerations, Gap};

/// Known gaps: `(key, why it is open)`, found on main at 720345f plus this branch. The lead
/// hands them on; this list MAY ONLY SHRINK (see the module docs): never add a gap to make the
/// test pass without the lead's decision and a reason a reviewer can check.
const KNOWN_GAPS: &[(&str, &str)] = &[];

fn all_gaps() -> Vec<Gap> {
    let dir = pi_conform::vectors::default_dir();
    let (adapter, why) = pi_conform::conform::adapter::catalogue_with_vectors(&dir);
    assert!(why.is_none(), "the vectors must load: {why:?}");
    let (daemon, why) = pi_conform::conform::daemon::catalogue_with_vectors(&dir);
    assert!(why.is_none(), "the vectors must load: {why:?}");
    gaps(&adapter, &daemon, &Enumerations::built_in())
}

#[test]
fn every_gap_is_known_and_every_known_gap_is_still_open() {
    let found = all_gaps();
    let new: Vec<String> = found
        .iter()
        .filter(|g| !KNOWN_GAPS.iter().any(|(k, _)| *k == g.key))
        .map(|g| format!("  (\"{}\", \"…\"), // {}", g.key, g.why))
        .collect();
    let closed: Vec<&str> = KNOWN_GAPS.iter().map(|(k, _)| *k).filter(|k| !found.iter().any(|g| g.key == *k)).collect();
    assert!(
        new.is_empty() && closed.is_empty(),
        "coverage gaps not in KNOWN_GAPS (cover them with a case, or list them with a reason):\n{}\n\
         KNOWN_GAPS entries that are no longer gaps (remove them; the list only shrinks):\n  {}",
        new.join("\n"),
        closed.join("\n  ")
    );
}

#[test]
fn known_gaps_are_only_missing_cases_never_a_broken_reference() {
    for (k, why) in KNOWN_GAPS {
        assert!(
            ["no-negative:", "uncovered:", "no-boundary:"].iter().any(|p| k.starts_with(p)),
            "{k}: an untagged entry, an unknown case id or a duplicate is fixed, never allowlisted"
        );
        assert!(why.len() > 20, "{k}: say why the gap is open");
    }
    let mut keys: Vec<&str> = KNOWN_GAPS.iter().map(|(k, _)| *k).collect();
    keys.sort_unstable();
    keys.dedup();
    assert_eq!(keys.len(), KNOWN_GAPS.len(), "a known gap is listed twice");
}
