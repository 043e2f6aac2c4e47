//! A fixed-capacity batch on the stack (the DPC's Rx frames and Tx tokens): pushing costs one
//! store, creating it nothing, where an initialized `[T; N]` cost a 512-byte memset per DPC
//! run (about 50 instructions, a tenth of a one-frame receive).
#![allow(unsafe_code)]

use core::mem::MaybeUninit;

/// Up to `N` values of a `Copy` type.
pub(super) struct Batch<T: Copy, const N: usize> {
    items: [MaybeUninit<T>; N],
    // INVARIANT: `len <= N` and `items[..len]` are initialized.
    len: usize,
}

impl<T: Copy, const N: usize> Batch<T, N> {
    /// Empty.
    pub(super) fn new() -> Self {
        Batch {
            items: [const { MaybeUninit::uninit() }; N],
            len: 0,
        }
    }

    /// Appends `v`; false (nothing changes) when full.
    #[inline]
    pub(super) fn push(&mut self, v: T) -> bool {
        match self.items.get_mut(self.len) {
            Some(slot) => {
                slot.write(v);
                self.len += 1;
                true
            }
            None => false,
        }
    }

    /// Whether no more fit.
    #[inline]
    pub(super) fn is_full(&self) -> bool {
        self.len == N
    }

    /// Forgets the values.
    #[inline]
    pub(super) fn clear(&mut self) {
        self.len = 0;
    }

    /// The values pushed.
    #[inline]
    pub(super) fn as_slice(&self) -> &[T] {
        let init = self.items.get(..self.len).unwrap_or(&[]);
        // SAFETY: `items[..len]` are initialized (type invariant) and `MaybeUninit<T>` has the
        // layout of `T`, so the prefix may be read as `[T]`.
        unsafe { &*(core::ptr::from_ref(init) as *const [T]) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pushes_up_to_capacity_and_reads_back_in_order() {
        let mut b = Batch::<u64, 3>::new();
        assert!(b.as_slice().is_empty());
        assert!(b.push(7) && b.push(8) && b.push(9));
        assert!(b.is_full());
        assert!(!b.push(10));
        assert_eq!(b.as_slice(), &[7, 8, 9]);
        b.clear();
        assert!(b.push(1));
        assert_eq!(b.as_slice(), &[1]);
    }
}
