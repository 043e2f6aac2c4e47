//! A bounded multi-producer multi-consumer queue (D. Vyukov's bounded MPMC queue) that is
//! valid when all-zero, for the DPC mailboxes of `os::windows::dpc`: pushes come from ISRs at
//! DIRQL, so no lock and no allocation. Portable (no kernel call), so the host tests run it.
//!
//! Each cell's sequence is stored minus the cell's index: Vyukov initializes cell `i` to `i`,
//! which this encoding turns into zero, so a queue allocated zeroed is a valid empty one and
//! is never built on the (24 KiB) kernel stack.

use core::cell::UnsafeCell;
use core::mem::MaybeUninit;
use core::sync::atomic::{AtomicUsize, Ordering};

struct Cell<T> {
    /// Vyukov's cell sequence minus the cell's index.
    sequence: AtomicUsize,
    value: UnsafeCell<MaybeUninit<T>>,
}

/// `N` slots (a power of two). All-zero bytes are a valid empty queue.
pub struct Mailbox<T, const N: usize> {
    cells: [Cell<T>; N],
    enqueue_pos: AtomicUsize,
    dequeue_pos: AtomicUsize,
}

// SAFETY: values move in by `push` and out by `pop`, each handed over exactly once through
// the cell sequences; T: Send is all that moving them across threads needs.
unsafe impl<T: Send, const N: usize> Sync for Mailbox<T, N> {}
// SAFETY: as above.
unsafe impl<T: Send, const N: usize> Send for Mailbox<T, N> {}

impl<T, const N: usize> Mailbox<T, N> {
    const POWER_OF_TWO: () = assert!(N.is_power_of_two());

    /// The cell of queue position `pos`, and its index.
    fn cell(&self, pos: usize) -> Option<(&Cell<T>, usize)> {
        let () = Self::POWER_OF_TWO;
        let index = pos & (N - 1);
        self.cells.get(index).map(|c| (c, index))
    }

    /// Appends `value`; any IRQL. Gives it back when the queue is full.
    pub fn push(&self, value: T) -> Result<(), T> {
        let mut pos = self.enqueue_pos.load(Ordering::Relaxed);
        loop {
            let Some((cell, index)) = self.cell(pos) else {
                return Err(value);
            };
            let seq = cell.sequence.load(Ordering::Acquire).wrapping_add(index);
            let diff = seq.wrapping_sub(pos) as isize;
            if diff == 0 {
                match self.enqueue_pos.compare_exchange_weak(
                    pos,
                    pos.wrapping_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        // SAFETY: winning the CAS for `pos` gives this producer the cell
                        // exclusively until it publishes the sequence below.
                        unsafe { (*cell.value.get()).write(value) };
                        let published = pos.wrapping_add(1).wrapping_sub(index);
                        cell.sequence.store(published, Ordering::Release);
                        return Ok(());
                    }
                    Err(now) => pos = now,
                }
            } else if diff < 0 {
                return Err(value);
            } else {
                pos = self.enqueue_pos.load(Ordering::Relaxed);
            }
        }
    }

    /// Takes the oldest value, if any.
    pub fn pop(&self) -> Option<T> {
        let mut pos = self.dequeue_pos.load(Ordering::Relaxed);
        loop {
            let (cell, index) = self.cell(pos)?;
            let seq = cell.sequence.load(Ordering::Acquire).wrapping_add(index);
            let diff = seq.wrapping_sub(pos.wrapping_add(1)) as isize;
            if diff == 0 {
                match self.dequeue_pos.compare_exchange_weak(
                    pos,
                    pos.wrapping_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        // SAFETY: the sequence says a producer wrote this cell, and winning the
                        // CAS makes this the only consumer to take it.
                        let slot = unsafe { cell.value.get().read() };
                        // SAFETY: the producer initialized it before publishing the sequence.
                        let value = unsafe { slot.assume_init() };
                        let freed = pos.wrapping_add(N).wrapping_sub(index);
                        cell.sequence.store(freed, Ordering::Release);
                        return Some(value);
                    }
                    Err(now) => pos = now,
                }
            } else if diff < 0 {
                return None;
            } else {
                pos = self.dequeue_pos.load(Ordering::Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::alloc::{Layout, alloc_zeroed, dealloc};
    use std::sync::Arc;
    use std::vec::Vec;

    /// A zeroed queue, as the scheduler allocates it; the guard frees it.
    struct Zeroed<const N: usize>(*mut Mailbox<u64, N>);
    impl<const N: usize> Zeroed<N> {
        fn new() -> Self {
            // SAFETY: a non-zero-sized layout.
            let p = unsafe { alloc_zeroed(Layout::new::<Mailbox<u64, N>>()) };
            assert!(!p.is_null());
            Zeroed(p.cast())
        }
        fn get(&self) -> &Mailbox<u64, N> {
            // SAFETY: zeroed bytes are a valid empty queue (the point of the encoding).
            unsafe { &*self.0 }
        }
    }
    impl<const N: usize> Drop for Zeroed<N> {
        fn drop(&mut self) {
            // SAFETY: allocated in `new` with this layout; u64 needs no drop.
            unsafe { dealloc(self.0.cast(), Layout::new::<Mailbox<u64, N>>()) }
        }
    }
    // SAFETY: the queue is Sync; the guard only frees it after the threads joined.
    unsafe impl<const N: usize> Send for Zeroed<N> {}
    // SAFETY: as above.
    unsafe impl<const N: usize> Sync for Zeroed<N> {}

    #[test]
    fn a_zeroed_queue_is_empty_fills_to_n_and_keeps_order_over_many_laps() {
        let q = Zeroed::<4>::new();
        let q = q.get();
        assert_eq!(q.pop(), None);
        let mut next_in = 0u64;
        let mut next_out = 0u64;
        for _lap in 0..50 {
            for _ in 0..4 {
                assert_eq!(q.push(next_in), Ok(()));
                next_in += 1;
            }
            assert_eq!(q.push(999), Err(999), "a full queue gives the value back");
            for _ in 0..3 {
                assert_eq!(q.pop(), Some(next_out));
                next_out += 1;
            }
            assert_eq!(q.push(next_in), Ok(()));
            next_in += 1;
            for _ in 0..2 {
                assert_eq!(q.pop(), Some(next_out));
                next_out += 1;
            }
        }
        while let Some(v) = q.pop() {
            assert_eq!(v, next_out);
            next_out += 1;
        }
        assert_eq!(next_out, next_in);
    }

    #[test]
    fn four_producers_and_a_consumer_move_every_value_exactly_once() {
        // Under Miri, enough for every slot to be reused several times (4 x 300 values through
        // 256 slots); natively, enough for real interleavings.
        const PER_PRODUCER: u64 = if cfg!(miri) { 300 } else { 20_000 };
        let q = Arc::new(Zeroed::<256>::new());
        let producers: Vec<_> = (0..4u64)
            .map(|p| {
                let q = q.clone();
                std::thread::spawn(move || {
                    for i in 0..PER_PRODUCER {
                        let mut v = (p << 32) | i;
                        // Full: wait for the consumer (a fact, not a sleep).
                        while let Err(back) = q.get().push(v) {
                            v = back;
                            std::thread::yield_now();
                        }
                    }
                })
            })
            .collect();
        let mut last = [None::<u64>; 4];
        let mut taken = 0u64;
        while taken < 4 * PER_PRODUCER {
            match q.get().pop() {
                Some(v) => {
                    let (p, i) = ((v >> 32) as usize, v & 0xFFFF_FFFF);
                    // Each producer's values arrive in its own order, none twice.
                    assert!(
                        last[p].is_none_or(|l| i == l + 1),
                        "producer {p}: {i} after {:?}",
                        last[p]
                    );
                    last[p] = Some(i);
                    taken += 1;
                }
                None => std::thread::yield_now(),
            }
        }
        for t in producers {
            t.join().unwrap();
        }
        assert_eq!(q.get().pop(), None);
        assert_eq!(last, [Some(PER_PRODUCER - 1); 4]);
    }
}
