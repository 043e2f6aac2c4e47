//! Ring index arithmetic, a port of `pvrdma_ring.h` (§7, M12, M14; style.md §7).
//!
//! Indices live in [0, 2N) with the Linux rules applied verbatim, also for the
//! non-power-of-two device rings (N = 1536 and 3072 with 4 pages): `valid(i)` is
//! `(i & !(2N − 1)) == 0`, `slot(i) = i & (N − 1)`, `inc(i) = (i + 1) & (2N − 1)`. For
//! N = 2^a·m the indices cycle through [0, 2^(a+1)) and only `cap = N & −N` slots are used.
//!
//! On top of the Linux test, every index pair is checked with M14: both indices lie in
//! [0, 2·cap) (the only values the other side can reach by incrementing from 0) and the
//! occupancy `(tail − head) mod 2·cap` is at most `cap`. A failing pair is
//! [`RingCorrupt`], never an element to process. Fullness follows M12: a ring is full at
//! occupancy `cap`, which for power-of-two N is exactly Linux's `tail == head ^ N`.
//! `slot()` is always `< N`, so no device-written value can index outside a ring.
#![deny(unsafe_code)]

/// A ring index failed validation (§7, M14).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingCorrupt;

impl From<RingCorrupt> for super::error::PvrdmaError {
    fn from(_: RingCorrupt) -> Self {
        super::error::PvrdmaError::RingCorrupt
    }
}

/// A ring of `N` elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ring {
    n: u32,
    /// 2N − 1.
    mask: u32,
    /// `N & −N`: usable slots.
    cap: u32,
}

impl Ring {
    /// A ring of `n` elements, `1 ≤ n ≤ 2^30`.
    pub const fn new(n: u32) -> Option<Ring> {
        if n == 0 || n > (1 << 30) {
            return None;
        }
        Some(Ring {
            n,
            mask: 2 * n - 1,
            cap: n & n.wrapping_neg(),
        })
    }

    /// N.
    pub const fn n(&self) -> u32 {
        self.n
    }

    /// Usable slots (`N & −N`; N when N is a power of two).
    pub const fn cap(&self) -> u32 {
        self.cap
    }

    /// `pvrdma_idx_valid`.
    pub const fn valid(&self, i: u32) -> bool {
        i & !self.mask == 0
    }

    /// `pvrdma_idx`: the slot of a (valid) index; always `< N`.
    pub const fn slot(&self, i: u32) -> u32 {
        i & (self.n - 1)
    }

    /// `pvrdma_idx_ring_inc`.
    pub const fn inc(&self, i: u32) -> u32 {
        i.wrapping_add(1) & self.mask
    }

    /// Number of posted elements between `head` and `tail`, after validating both (M14).
    pub fn occupancy(&self, tail: u32, head: u32) -> Result<u32, RingCorrupt> {
        let span = 2 * self.cap;
        if !self.valid(tail) || !self.valid(head) || tail >= span || head >= span {
            return Err(RingCorrupt);
        }
        let d = tail.wrapping_sub(head) & (span - 1);
        if d > self.cap {
            return Err(RingCorrupt);
        }
        Ok(d)
    }

    /// `pvrdma_idx_ring_has_data`: `Some(slot of head)` when an element is available.
    pub fn has_data(&self, tail: u32, head: u32) -> Result<Option<u32>, RingCorrupt> {
        let d = self.occupancy(tail, head)?;
        Ok((d != 0).then_some(self.slot(head)))
    }

    /// `pvrdma_idx_ring_has_space` with M12's fullness: `Some(slot of tail)` when there is
    /// room for one more element.
    pub fn has_space(&self, tail: u32, head: u32) -> Result<Option<u32>, RingCorrupt> {
        let d = self.occupancy(tail, head)?;
        Ok((d < self.cap && linux_has_space(self, tail, head)).then_some(self.slot(tail)))
    }
}

/// The raw Linux `has_space` test, `tail != head ^ N` (kept for tests and documentation).
pub const fn linux_has_space(r: &Ring, tail: u32, head: u32) -> bool {
    tail != (head ^ r.n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeSet, VecDeque};

    #[test]
    fn constructor_limits() {
        assert!(Ring::new(0).is_none());
        assert!(Ring::new((1 << 30) + 1).is_none());
        assert_eq!(Ring::new(1536).unwrap().cap(), 512);
        assert_eq!(Ring::new(3072).unwrap().cap(), 1024);
        assert_eq!(Ring::new(8).unwrap().cap(), 8);
    }

    #[test]
    fn exhaustive_small_power_of_two() {
        for n in [1u32, 2, 4, 8] {
            let r = Ring::new(n).unwrap();
            for tail in 0..4 * n {
                for head in 0..4 * n {
                    let valid = tail < 2 * n && head < 2 * n;
                    let d = tail.wrapping_sub(head) & (2 * n - 1);
                    let data = r.has_data(tail, head);
                    let space = r.has_space(tail, head);
                    if !valid {
                        assert_eq!(data, Err(RingCorrupt), "n={n} t={tail} h={head}");
                        assert_eq!(space, Err(RingCorrupt));
                        continue;
                    }
                    // Linux accepts any valid pair; M14 also rejects an occupancy above N.
                    if d > n {
                        assert_eq!(data, Err(RingCorrupt), "n={n} t={tail} h={head}");
                        assert_eq!(space, Err(RingCorrupt));
                        continue;
                    }
                    assert_eq!(data, Ok((tail != head).then_some(head % n)));
                    assert_eq!(
                        space,
                        Ok((tail != (head ^ n)).then_some(tail % n)),
                        "n={n} t={tail} h={head}"
                    );
                    assert_eq!(r.occupancy(tail, head), Ok(d));
                }
            }
            // Run a producer/consumer against a reference queue over several wraps.
            let (mut tail, mut head) = (0u32, 0u32);
            let mut q = VecDeque::new();
            let mut slots = [u32::MAX; 8];
            for step in 0..(40 * n) {
                let produce = (step * 7 + step / 3) % 5 < 3;
                if produce {
                    match r.has_space(tail, head).unwrap() {
                        Some(s) => {
                            assert!(q.len() < n as usize);
                            slots[s as usize] = step;
                            q.push_back(step);
                            tail = r.inc(tail);
                        }
                        None => assert_eq!(q.len(), n as usize),
                    }
                } else {
                    match r.has_data(tail, head).unwrap() {
                        Some(s) => {
                            assert_eq!(Some(slots[s as usize]), q.pop_front());
                            head = r.inc(head);
                        }
                        None => assert!(q.is_empty()),
                    }
                }
            }
        }
    }

    fn device_ring_properties(n: u32, cap: u32) {
        let r = Ring::new(n).unwrap();
        assert_eq!(r.cap(), cap);
        // Indices from 0 cycle through [0, 2·cap) and use exactly `cap` distinct slots.
        let mut i = 0u32;
        let mut seen = BTreeSet::new();
        let mut slots = BTreeSet::new();
        loop {
            seen.insert(i);
            slots.insert(r.slot(i));
            i = r.inc(i);
            if i == 0 {
                break;
            }
        }
        assert_eq!(seen.len() as u32, 2 * cap);
        assert_eq!(*seen.last().unwrap(), 2 * cap - 1);
        assert_eq!(slots.len() as u32, cap);
        assert!(slots.iter().all(|&s| s < n));
        // Linux's has-space test never fails on reachable pairs: the producer must track
        // fullness itself (M12), which `has_space` does.
        for tail in 0..2 * cap {
            for head in 0..2 * cap {
                assert!(linux_has_space(&r, tail, head));
                let d = tail.wrapping_sub(head) & (2 * cap - 1);
                let space = r.has_space(tail, head);
                if d > cap {
                    assert_eq!(space, Err(RingCorrupt));
                } else {
                    assert_eq!(space, Ok((d < cap).then_some(r.slot(tail))));
                    assert_eq!(r.has_data(tail, head), Ok((d != 0).then_some(r.slot(head))));
                }
            }
        }
        // Linux-valid but unreachable indices are rejected.
        assert!(r.valid(4 * cap) && r.slot(4 * cap) < n);
        assert_eq!(r.has_data(4 * cap, 0), Err(RingCorrupt));
        assert_eq!(r.has_data(0, 2 * cap), Err(RingCorrupt));
        assert_eq!(r.has_data(0, 2 * n), Err(RingCorrupt));
        // Fill to capacity from a non-zero start and drain in order.
        let (mut tail, mut head) = (2 * cap - 3, 2 * cap - 3);
        let mut q = VecDeque::new();
        let mut store = std::vec![u32::MAX; n as usize];
        for v in 0..cap + 5 {
            match r.has_space(tail, head).unwrap() {
                Some(s) => {
                    store[s as usize] = v;
                    q.push_back(v);
                    tail = r.inc(tail);
                }
                None => assert_eq!(q.len() as u32, cap),
            }
        }
        assert_eq!(r.occupancy(tail, head), Ok(cap));
        while let Some(s) = r.has_data(tail, head).unwrap() {
            assert_eq!(Some(store[s as usize]), q.pop_front());
            head = r.inc(head);
        }
        assert!(q.is_empty());
    }

    /// The device rings' shape, 3·2^k slots; under Miri, which interprets each of the
    /// million index pairs, the same shape 16 times smaller.
    const SHRINK: u32 = if cfg!(miri) { 16 } else { 1 };

    #[test]
    fn async_ring_1536() {
        device_ring_properties(1536 / SHRINK, 512 / SHRINK);
    }

    #[test]
    fn cqne_ring_3072() {
        device_ring_properties(3072 / SHRINK, 1024 / SHRINK);
    }
}
