//! Where the daemon's random ids come from: the sans-I/O cores ([`super::conn`],
//! [`super::runtime`]) draw every UUID from an [`Rng`] their caller hands them, so a test feeds
//! them the crate's seeded `util::prng::SplitMix64` and gets the same ids every run; the
//! async shells hand them [`OsRng`].

/// A source of 64-bit random words.
pub trait Rng: Send {
    /// The next word.
    fn next_u64(&mut self) -> u64;
}

/// A version-4 UUID from two words of `rng`, in its hyphenated form.
pub fn uuid_v4(rng: &mut dyn Rng) -> String {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&rng.next_u64().to_le_bytes());
    b[8..].copy_from_slice(&rng.next_u64().to_le_bytes());
    uuid::Builder::from_random_bytes(b).into_uuid().to_string()
}

/// The operating system's random source: what the shells give the cores.
#[derive(Clone, Copy, Debug, Default)]
pub struct OsRng;

impl Rng for OsRng {
    fn next_u64(&mut self) -> u64 {
        let mut b = [0u8; 8];
        // The OS source failing is not recoverable (uuid's own v4 panics the same way).
        getrandom::fill(&mut b).unwrap_or_else(|e| panic!("the OS random source failed: {e}"));
        u64::from_le_bytes(b)
    }
}

/// The crate's seeded test PRNG ([`crate::util::prng::SplitMix64`]) as an [`Rng`]: the same
/// seed gives the same ids.
impl Rng for crate::util::prng::SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        crate::util::prng::SplitMix64::next_u64(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::prng::SplitMix64;

    #[test]
    fn uuids_are_version_4_and_repeat_with_the_seed() {
        let a = uuid_v4(&mut SplitMix64::new(7));
        let b = uuid_v4(&mut SplitMix64::new(7));
        let c = uuid_v4(&mut SplitMix64::new(8));
        assert_eq!(a, b);
        assert_ne!(a, c);
        let u = uuid::Uuid::parse_str(&a).unwrap();
        assert_eq!(u.get_version_num(), 4);
        assert_eq!(u.get_variant(), uuid::Variant::RFC4122);
        assert_ne!(uuid_v4(&mut OsRng), uuid_v4(&mut OsRng));
    }
}
