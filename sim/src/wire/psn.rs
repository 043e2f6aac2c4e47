//! 24-bit packet sequence numbers (IBTA 9.7.1; cm.md §7.2 BTH bytes 9–11).
//!
//! PSNs wrap modulo 2^24. Ordering is only meaningful within half the space: `a` is "before"
//! `b` when `(b − a) mod 2^24` lies in `1..2^23`, the same rule as rxe `psn_compare`
//! (`(s32)((a − b) << 8)`).

use core::cmp::Ordering;

/// PSN modulus.
pub const PSN_MODULUS: u32 = 1 << 24;
/// Mask of the 24 PSN bits.
pub const PSN_MASK: u32 = PSN_MODULUS - 1;

/// A 24-bit packet sequence number with wrapping arithmetic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Psn(u32);

impl Psn {
    /// Wraps `v` into 24 bits.
    pub const fn new(v: u32) -> Self {
        Self(v & PSN_MASK)
    }

    /// The 24-bit value.
    pub const fn value(self) -> u32 {
        self.0
    }

    /// `self + n` modulo 2^24.
    pub const fn add(self, n: u32) -> Self {
        Self::new(self.0.wrapping_add(n))
    }

    /// `self − n` modulo 2^24.
    pub const fn sub(self, n: u32) -> Self {
        Self::new(self.0.wrapping_sub(n))
    }

    /// The following PSN.
    pub const fn next(self) -> Self {
        self.add(1)
    }

    /// Forward distance from `from` to `self`, modulo 2^24 (`0..2^24`).
    pub const fn distance_from(self, from: Psn) -> u32 {
        self.0.wrapping_sub(from.0) & PSN_MASK
    }

    /// Signed difference `self − other` in `−2^23..2^23`.
    pub const fn diff(self, other: Psn) -> i32 {
        // CAST: shifting the 24-bit difference to the top of an i32 sign-extends it.
        ((self.0.wrapping_sub(other.0) << 8) as i32) >> 8
    }

    /// Serial-number comparison (see the module doc); antipodal PSNs compare as `Less`.
    pub const fn cmp_wrapping(self, other: Psn) -> Ordering {
        let d = self.diff(other);
        if d < 0 {
            Ordering::Less
        } else if d == 0 {
            Ordering::Equal
        } else {
            Ordering::Greater
        }
    }

    /// True if `self` is in the window `[base, base + len)` modulo 2^24.
    pub const fn in_window(self, base: Psn, len: u32) -> bool {
        self.distance_from(base) < len
    }
}

impl core::fmt::Display for Psn {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{:#08x}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrapping_arithmetic() {
        let top = Psn::new(0xFF_FFFF);
        assert_eq!(top.next(), Psn::new(0));
        assert_eq!(Psn::new(0x0100_0005).value(), 5);
        assert_eq!(Psn::new(2).sub(3), top);
        assert_eq!(Psn::new(1).distance_from(top), 2);
        assert_eq!(top.distance_from(Psn::new(1)), 0xFF_FFFE);
        assert_eq!(Psn::new(1).diff(top), 2);
        assert_eq!(top.diff(Psn::new(1)), -2);
    }

    #[test]
    fn comparison_across_wrap() {
        let top = Psn::new(0xFF_FFF0);
        let low = Psn::new(0x10);
        assert_eq!(top.cmp_wrapping(low), Ordering::Less);
        assert_eq!(low.cmp_wrapping(top), Ordering::Greater);
        assert_eq!(low.cmp_wrapping(low), Ordering::Equal);
        // Half the space away: the sign bit decides (rxe psn_compare gives negative).
        assert_eq!(
            Psn::new(0).cmp_wrapping(Psn::new(0x80_0000)),
            Ordering::Less
        );
        assert_eq!(
            Psn::new(0x80_0000).cmp_wrapping(Psn::new(0)),
            Ordering::Less
        );
        assert!(low.in_window(top, 0x21));
        assert!(!low.in_window(top, 0x20));
        assert!(top.in_window(top, 1));
        assert!(!top.in_window(top, 0));
    }
}
