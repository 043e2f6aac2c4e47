//! Ring index arithmetic (reference §7; M12, M14), including the Linux arithmetic applied
//! verbatim to non-power-of-two device rings.
#![deny(unsafe_code)]

/// Geometry of a ring of `n` elements with indices in `[0, 2n)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ring {
    n: u32,
}

/// The other side wrote an index that fails validation (M14).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingCorrupt;

impl Ring {
    /// A ring of `n` elements; `None` unless `1 ≤ n ≤ 2^30`.
    pub fn new(n: u32) -> Option<Self> {
        (1..=1 << 30).contains(&n).then_some(Self { n })
    }

    /// Element count N.
    pub fn n(&self) -> u32 {
        self.n
    }

    fn mask2(&self) -> u32 {
        (2 * self.n).wrapping_sub(1)
    }

    /// `(i & ~(2N − 1)) == 0`.
    pub fn valid(&self, i: u32) -> bool {
        i & !self.mask2() == 0
    }

    /// `i & (N − 1)`.
    pub fn slot(&self, i: u32) -> u32 {
        i & (self.n - 1)
    }

    /// `(i + 1) & (2N − 1)`.
    pub fn inc(&self, i: u32) -> u32 {
        i.wrapping_add(1) & self.mask2()
    }

    /// Usable capacity `N & −N` (M12): N for powers of two, the largest power-of-two factor
    /// otherwise (512 EQEs / 1024 CQNEs with 4 ring pages).
    pub fn cap(&self) -> u32 {
        self.n & self.n.wrapping_neg()
    }

    /// Elements between `head` and `tail`: `(tail − head) mod 2·cap`.
    pub fn used(&self, tail: u32, head: u32) -> u32 {
        tail.wrapping_sub(head) & (2 * self.cap() - 1)
    }

    /// Both indices valid and `used ≤ cap` (M14).
    pub fn check(&self, tail: u32, head: u32) -> Result<u32, RingCorrupt> {
        if !self.valid(tail) || !self.valid(head) {
            return Err(RingCorrupt);
        }
        let used = self.used(tail, head);
        if used > self.cap() {
            Err(RingCorrupt)
        } else {
            Ok(used)
        }
    }

    /// Device-side fullness (M12).
    pub fn full(&self, tail: u32, head: u32) -> bool {
        self.used(tail, head) == self.cap()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn power_of_two_ring_exhaustive_small() {
        for n in [1u32, 2, 4, 8] {
            let r = Ring::new(n).unwrap();
            let (mut head, mut tail) = (0u32, 0u32);
            for step in 0..(5 * n) {
                // fill completely then drain completely, checking invariants
                for _ in 0..n {
                    assert!(!r.full(tail, head), "n={n} step={step}");
                    tail = r.inc(tail);
                    assert!(r.check(tail, head).is_ok());
                }
                assert!(r.full(tail, head));
                assert_eq!(r.used(tail, head), n);
                // Linux's has_space test agrees with M12 for powers of two.
                assert_eq!(tail, head ^ n);
                for _ in 0..n {
                    head = r.inc(head);
                }
                assert_eq!(tail, head);
            }
            assert!(!r.valid(2 * n));
        }
    }

    #[test]
    fn non_power_of_two_ring_uses_largest_power_of_two_factor() {
        let r = Ring::new(1536).unwrap();
        assert_eq!(r.cap(), 512);
        let mut i = 0;
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..4096 {
            seen.insert(r.slot(i));
            i = r.inc(i);
            assert!(i < 1024);
        }
        assert_eq!(seen.len(), 512);
        assert_eq!(r.used(512, 0), 512);
        assert!(r.full(512, 0));
        assert_eq!(Ring::new(3072).unwrap().cap(), 1024);
    }

    #[test]
    fn corrupt_indices_are_rejected() {
        let r = Ring::new(8).unwrap();
        assert_eq!(r.check(16, 0), Err(RingCorrupt));
        assert_eq!(r.check(0, 17), Err(RingCorrupt));
        assert_eq!(r.check(9, 0), Err(RingCorrupt)); // 9 > cap
        assert_eq!(r.check(8, 0), Ok(8));
        assert_eq!(r.check(3, 12), Ok(7));
        assert!(Ring::new(0).is_none());
    }
}
