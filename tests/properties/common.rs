//! Shared helpers: the run configuration and byte-stream chunking.

use proptest::sample::Index;
use proptest::test_runner::Config;

/// A configuration running `cases` cases (or `PROPTEST_CASES` when set), without failure
/// persistence files.
pub fn config(cases: u32) -> Config {
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|s| s.trim().parse().ok()).unwrap_or(cases);
    Config { cases, failure_persistence: None, ..Config::default() }
}

/// Cut `bytes` at the given points (any number, any order, duplicates allowed).
pub fn chunks<'a>(bytes: &'a [u8], cuts: &[Index]) -> Vec<&'a [u8]> {
    let mut points: Vec<usize> = cuts.iter().map(|i| i.index(bytes.len() + 1)).collect();
    points.push(0);
    points.push(bytes.len());
    points.sort_unstable();
    points.dedup();
    points.windows(2).map(|w| &bytes[w[0]..w[1]]).collect()
}

/// Lowercase hex SHA-256 (SPEC §5.3 digest).
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(bytes))
}
