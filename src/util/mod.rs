//! Small helpers with no protocol meaning, each written once for the whole crate (issue 14):
//! UTC calendar arithmetic and timestamp formatting ([`utc`]) and the seeded PRNG of tests,
//! fuzz targets and benches ([`prng`]). Protocol rules (operation sets, fingerprints, codes)
//! live in `contract/`, not here.
//!
//! **Invariant:** pure functions and plain values: no I/O, no clock read except where a
//! function says it reads the system time.

pub mod prng;
pub mod utc;
