//! Monotonic time (Windows: `KeQueryInterruptTimePrecise` × 100; host: `std::time::Instant`).
#![deny(unsafe_code)]

/// Nanoseconds per millisecond.
pub const NS_PER_MS: u64 = 1_000_000;
/// Nanoseconds per second.
pub const NS_PER_SEC: u64 = 1_000_000_000;

/// A monotonic clock in nanoseconds since an arbitrary origin.
pub trait Clock: Send + Sync {
    /// Current time.
    fn now_ns(&self) -> u64;
}

/// A point in time after which something has expired.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Deadline(pub u64);

impl Deadline {
    /// `timeout_ns` after `now_ns` (saturating: never wraps into the past).
    pub fn after(now_ns: u64, timeout_ns: u64) -> Self {
        Deadline(now_ns.saturating_add(timeout_ns))
    }

    /// Whether `now_ns` is at or past the deadline.
    pub fn expired(self, now_ns: u64) -> bool {
        now_ns >= self.0
    }

    /// Time left, 0 when expired.
    pub fn remaining(self, now_ns: u64) -> u64 {
        self.0.saturating_sub(now_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadline_saturates_and_expires() {
        let d = Deadline::after(u64::MAX - 5, 10);
        assert_eq!(d, Deadline(u64::MAX));
        let d = Deadline::after(100, 50);
        assert!(!d.expired(149));
        assert!(d.expired(150));
        assert_eq!(d.remaining(120), 30);
        assert_eq!(d.remaining(200), 0);
    }
}
