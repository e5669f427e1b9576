//! The seeded PRNG of tests, fuzz targets and benches: SplitMix64 (Steele, Lea and Flood,
//! "Fast splittable pseudorandom number generators", 2014). Small, fast, every seed (0
//! included) gives a full-period stream, and the same seed always gives the same stream, so a
//! failure reproduces from its seed. Not for secrets: anything an attacker must not guess
//! (capability handles, ids) comes from the OS.

/// A SplitMix64 stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// The stream of `seed`.
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    /// The next 64 bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A value in `0..n` (0 when `n` is 0). The modulo bias is below 2⁻³² for any `n` under
    /// 2³², which no test here can notice.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64().checked_rem(n).unwrap_or(0)
    }

    /// [`SplitMix64::below`] for indexes.
    pub fn index(&mut self, n: usize) -> usize {
        self.below(n as u64) as usize
    }

    /// A value in `lo..=hi` (`lo` when `hi < lo`).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi.saturating_sub(lo).saturating_add(1))
    }

    /// True with probability `percent`/100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_outputs() {
        // SplitMix64 from seed 1234567, as published with the algorithm (and computed by the
        // reference C code of Vigna's splitmix64.c).
        let mut r = SplitMix64::new(1_234_567);
        let got: Vec<u64> = (0..3).map(|_| r.next_u64()).collect();
        assert_eq!(got, [6_457_827_717_110_365_317, 3_203_168_211_198_807_973, 9_817_491_932_198_370_423]);
    }

    #[test]
    fn bounds_hold() {
        let mut r = SplitMix64::new(0);
        assert_ne!(r.next_u64(), 0, "seed 0 is a good seed");
        let mut seen = [0u32; 7];
        for _ in 0..7000 {
            let i = r.index(7);
            seen[i] += 1;
            let v = r.range(10, 12);
            assert!((10..=12).contains(&v));
        }
        assert!(seen.iter().all(|&n| n > 800), "{seen:?}");
        assert_eq!(r.below(0), 0);
        assert_eq!(r.range(5, 5), 5);
        assert_eq!(r.range(5, 1), 5);
        assert!(!r.chance(0));
        assert!(r.chance(100));
    }
}
