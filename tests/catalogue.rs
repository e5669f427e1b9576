//! The case catalogue and the implementations agree, ids are unique and stable in shape,
//! and every clause names a heading of conformance/SPEC.md.

use std::collections::BTreeSet;

#[test]
fn catalogue_and_implementations_are_one_to_one() {
    let cat = pi_conform::conform::adapter::catalogue();
    let reg = pi_conform::conform::adapter::registry();
    let cat_ids: BTreeSet<&str> = cat.iter().map(|m| m.id.as_str()).collect();
    // Implemented in Rust (the registry) or as a session vector (vectors/sessions/), never both.
    let sessions = pi_conform::conform::adapter::script::sessions();
    let mut reg_ids: BTreeSet<&str> = reg.iter().map(|(id, _)| *id).collect();
    assert_eq!(cat_ids.len(), cat.len(), "duplicate ids in the catalogue");
    assert_eq!(reg_ids.len(), reg.len(), "duplicate ids in the registry");
    for s in &sessions {
        assert!(reg_ids.insert(s.meta.id.as_str()), "{} is both a Rust case and a session vector", s.meta.id);
    }
    let missing: Vec<_> = cat_ids.difference(&reg_ids).collect();
    let extra: Vec<_> = reg_ids.difference(&cat_ids).collect();
    assert!(missing.is_empty(), "catalogued but not implemented: {missing:?}");
    assert!(extra.is_empty(), "implemented but not catalogued: {extra:?}");
}

#[test]
fn ids_levels_clauses_and_outcomes_are_well_formed() {
    let spec = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/conformance/SPEC.md")).unwrap();
    for m in pi_conform::conform::adapter::catalogue() {
        assert!(
            m.id.starts_with("adapter.")
                && m.id.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-'),
            "{}",
            m.id
        );
        let heading = spec.lines().any(|l| l.starts_with('#') && l.contains(&format!(" {} ", m.clause)));
        assert!(heading, "{}: clause {} is not a heading of conformance/SPEC.md", m.id, m.clause);
        assert!(!m.accepted.is_empty(), "{}: no accepted outcome", m.id);
        assert!(!m.requirement.is_empty() && !m.tags.is_empty(), "{}", m.id);
    }
}

#[test]
fn daemon_catalogue_and_implementations_are_one_to_one() {
    let cat = pi_conform::conform::daemon::catalogue();
    let reg = pi_conform::conform::daemon::cases::registry();
    let cat_ids: Vec<&str> = cat.iter().map(|m| m.id.as_str()).collect();
    // Implemented in Rust (the registry, in catalogue order) or as a session vector
    // (vectors/sessions/daemon.json, listed after them), never both; the cases that judge the
    // whole run (RUN_LAST) come after everything.
    let sessions = pi_conform::conform::daemon::script::sessions();
    let last = pi_conform::conform::daemon::RUN_LAST;
    let mut impl_ids: Vec<&str> = reg.iter().map(|(id, _)| *id).filter(|id| !last.contains(id)).collect();
    impl_ids.extend(sessions.iter().map(|s| s.meta.id.as_str()));
    impl_ids.extend(last.iter().copied());
    assert!(!sessions.is_empty());
    assert!(last.iter().all(|id| reg.iter().any(|(r, _)| r == id)), "RUN_LAST names Rust cases");
    assert_eq!(cat_ids.iter().collect::<BTreeSet<_>>().len(), cat.len(), "duplicate ids in the daemon catalogue");
    assert_eq!(
        cat_ids, impl_ids,
        "the daemon catalogue lists the Rust cases, then the session vectors, then the RUN_LAST cases"
    );
}

#[test]
fn daemon_ids_levels_clauses_and_outcomes_are_well_formed() {
    let spec = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/conformance/SPEC.md")).unwrap();
    for m in pi_conform::conform::daemon::catalogue() {
        assert!(
            m.id.starts_with("daemon.")
                && m.id.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-'),
            "{}",
            m.id
        );
        let heading = spec.lines().any(|l| l.starts_with('#') && l.contains(&format!(" {} ", m.clause)));
        assert!(heading, "{}: clause {} is not a heading of conformance/SPEC.md", m.id, m.clause);
        assert!(!m.accepted.is_empty(), "{}: no accepted outcome", m.id);
        assert!(!m.requirement.is_empty() && !m.tags.is_empty(), "{}", m.id);
    }
}
