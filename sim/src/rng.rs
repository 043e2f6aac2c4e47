//! Seeded deterministic PRNG for the simulated fabric's fault injection.
//!
//! SplitMix64 (Steele, Lea, Flood, "Fast splittable pseudorandom number generators", 2014): one
//! 64-bit state word, full period, good enough statistics for fault rolls, and trivially
//! reproducible, so the same seed replays the same fabric run exactly. Not cryptographic.
#![deny(unsafe_code)]

/// Deterministic 64-bit generator; the same seed gives the same sequence on every platform.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rng {
    state: u64,
}

impl Rng {
    /// A generator whose whole output is determined by `seed`.
    pub const fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)` with 53 bits of precision.
    pub fn next_f64(&mut self) -> f64 {
        // CAST: a 53-bit integer is exact in an f64.
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// True with probability `p` (`p <= 0` never, `p >= 1` always). Always consumes one draw so
    /// that changing one probability does not shift the rolls of unrelated decisions.
    pub fn chance(&mut self, p: f64) -> bool {
        let x = self.next_f64();
        x < p
    }

    /// Uniform in `[0, n)`; 0 when `n == 0`. Uses Lemire's multiply-shift (bias below 2^-64·n,
    /// irrelevant here).
    pub fn below(&mut self, n: u64) -> u64 {
        // CAST: the high half of a 64×64 product fits in u64.
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix64_known_answer() {
        // Reference outputs of SplitMix64 seeded with 1234567 (the Vigna reference
        // implementation splitmix64.c).
        let mut r = Rng::new(1_234_567);
        assert_eq!(r.next_u64(), 6_457_827_717_110_365_317);
        assert_eq!(r.next_u64(), 3_203_168_211_198_807_973);
        assert_eq!(r.next_u64(), 9_817_491_932_198_370_423);
    }

    #[test]
    fn below_and_chance_bounds() {
        let mut r = Rng::new(7);
        for _ in 0..1000 {
            assert!(r.below(10) < 10);
        }
        assert_eq!(r.below(0), 0);
        assert!(!(0..1000).any(|_| r.chance(0.0)));
        assert!((0..1000).all(|_| r.chance(1.0)));
        let hits = (0..10_000).filter(|_| r.chance(0.25)).count();
        assert!((2000..3000).contains(&hits), "{hits}");
    }
}
