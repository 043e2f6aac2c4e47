//! Locks and barriers (style.md §12, §15; `rust/kernel/sync/lock.rs`, rdma-core
//! `util/udma_barrier.h`).

use core::cell::UnsafeCell;
use core::ops::{Deref, DerefMut};
#[cfg(not(target_arch = "aarch64"))]
use core::sync::atomic::fence;
use core::sync::atomic::{AtomicBool, Ordering};

/// The raw lock underneath [`SpinLock`]: acquiring returns the state the release needs.
///
/// Backend seam. The host build uses [`AtomicBackend`], a test-and-set lock whose state is
/// `()`. Every Windows build uses `os::windows::lock::KeSpinLock`: a `KSPIN_LOCK` acquired
/// with `KeAcquireSpinLockRaiseToDpc`, whose state is the old `KIRQL` handed back to
/// `KeReleaseSpinLock`.
pub trait RawLock {
    /// What acquire hands to release (old IRQL on Windows).
    type State;
    /// An unlocked lock.
    const INIT: Self;
    /// Spins until acquired.
    fn acquire(&self) -> Self::State;
    /// Acquires if free.
    fn try_acquire(&self) -> Option<Self::State>;
    /// Releases.
    fn release(&self, state: Self::State);
}

/// Test-and-set spin lock on an `AtomicBool`.
pub struct AtomicBackend(AtomicBool);

impl RawLock for AtomicBackend {
    type State = ();
    const INIT: Self = AtomicBackend(AtomicBool::new(false));
    fn acquire(&self) {
        loop {
            if self.try_acquire().is_some() {
                return;
            }
            while self.0.load(Ordering::Relaxed) {
                core::hint::spin_loop();
            }
        }
    }
    fn try_acquire(&self) -> Option<()> {
        self.0
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| ())
    }
    fn release(&self, (): ()) {
        self.0.store(false, Ordering::Release);
    }
}

/// The backend of this build.
#[cfg(not(target_os = "windows"))]
pub type Backend = AtomicBackend;
/// The backend of this build: `KSPIN_LOCK` + `KeAcquireSpinLockRaiseToDpc`.
#[cfg(target_os = "windows")]
pub type Backend = super::windows::lock::KeSpinLock;

/// A spin lock that owns its data.
///
/// IRQL: may be acquired at IRQL <= DISPATCH_LEVEL (the kernel backend raises to
/// DISPATCH_LEVEL and restores the old IRQL on release); holders must not block, wait or
/// touch pageable memory. Never acquire it from an ISR (DIRQL).
pub struct SpinLock<T: ?Sized> {
    raw: Backend,
    data: UnsafeCell<T>,
}

// SAFETY: the lock hands out at most one `&mut T` at a time, so it is Sync if T can be sent.
unsafe impl<T: ?Sized + Send> Sync for SpinLock<T> {}
// SAFETY: owning wrapper.
unsafe impl<T: ?Sized + Send> Send for SpinLock<T> {}

impl<T> SpinLock<T> {
    /// A new unlocked lock.
    pub const fn new(data: T) -> Self {
        SpinLock {
            raw: Backend::INIT,
            data: UnsafeCell::new(data),
        }
    }

    /// Consumes the lock.
    pub fn into_inner(self) -> T {
        self.data.into_inner()
    }
}

impl<T: ?Sized> SpinLock<T> {
    /// Acquires the lock, spinning.
    pub fn lock(&self) -> SpinLockGuard<'_, T> {
        // The state is `()` with the host backend and the old KIRQL with the kernel one.
        #[allow(clippy::let_unit_value)]
        let state = self.raw.acquire();
        held::acquired();
        SpinLockGuard {
            lock: self,
            state: Some(state),
        }
    }

    /// Acquires the lock if it is free.
    pub fn try_lock(&self) -> Option<SpinLockGuard<'_, T>> {
        self.raw.try_acquire().map(|state| {
            held::acquired();
            SpinLockGuard {
                lock: self,
                state: Some(state),
            }
        })
    }

    /// Exclusive access without locking.
    pub fn get_mut(&mut self) -> &mut T {
        self.data.get_mut()
    }
}

/// Proof that the lock is held; releases it on drop.
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct SpinLockGuard<'a, T: ?Sized> {
    lock: &'a SpinLock<T>,
    // INVARIANT: `Some` from construction until `drop`.
    state: Option<<Backend as RawLock>::State>,
}

impl<T: ?Sized> Deref for SpinLockGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard exists only while the lock is held, so no `&mut` aliases this.
        unsafe { &*self.lock.data.get() }
    }
}

impl<T: ?Sized> DerefMut for SpinLockGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the lock is held and `&mut self` makes this the only access path.
        unsafe { &mut *self.lock.data.get() }
    }
}

impl<T: ?Sized> Drop for SpinLockGuard<'_, T> {
    fn drop(&mut self) {
        if let Some(state) = self.state.take() {
            self.lock.raw.release(state);
            held::released();
        }
    }
}

/// Debug host builds count the spin locks each thread holds, so tests can prove that no
/// consumer callback runs under one ([`held_spin_locks`]). Elsewhere the hooks are empty.
#[cfg(all(debug_assertions, not(target_os = "windows")))]
mod held {
    use core::cell::Cell;

    std::thread_local! {
        pub(super) static HELD_SPIN_LOCKS: Cell<u32> = const { Cell::new(0) };
    }

    pub fn acquired() {
        HELD_SPIN_LOCKS.with(|c| c.set(c.get().wrapping_add(1)));
    }

    pub fn released() {
        HELD_SPIN_LOCKS.with(|c| c.set(c.get().wrapping_sub(1)));
    }
}

#[cfg(not(all(debug_assertions, not(target_os = "windows"))))]
mod held {
    #[inline(always)]
    pub fn acquired() {}
    #[inline(always)]
    pub fn released() {}
}

/// Spin locks the calling thread holds right now. Counted in debug host builds only (always 0
/// otherwise): a consumer callback must see 0 (the driver never calls out with one of its
/// spin locks held).
#[cfg(not(target_os = "windows"))]
pub fn held_spin_locks() -> u32 {
    #[cfg(debug_assertions)]
    return held::HELD_SPIN_LOCKS.with(core::cell::Cell::get);
    #[cfg(not(debug_assertions))]
    0
}

/// Whether [`held_spin_locks`] counts (debug host builds).
#[cfg(not(target_os = "windows"))]
pub const SPIN_LOCKS_COUNTED: bool = cfg!(debug_assertions);

// The DMA barriers, per architecture. Where the device sits matters on ARM64: it is an observer
// in the outer shareable domain, and the memory it is told about through a doorbell is Normal
// memory while the doorbell itself is Device memory (`NdisMMapIoSpace` maps BAR1 and the UAR
// page non-cached, not write-combined). The `dmb ish` that a Release or Acquire fence compiles
// to there orders accesses only for the inner shareable domain, not for the device, so ARM64
// takes the barriers Linux and rdma-core use (Linux `arch/arm64/include/asm/barrier.h` and
// `io.h`, rdma-core `util/udma_barrier.h`). On x86-64 stores are not reordered with older
// stores nor loads with older loads, to WB and to UC memory alike (no WC mapping, no
// non-temporal store here), so a compiler barrier is all the first three need: what a
// Release or Acquire fence compiles to there, no instruction (rdma-core's x86-64
// `udma_to_device_barrier()` is `asm volatile("" ::: "memory")`; Linux's `dma_wmb()`,
// `dma_rmb()` and `writel()`'s ordering are compiler barriers too).
//
// Every ARM64 `asm!` below leaves out `nomem`, so the compiler treats it as reading and
// writing any memory: it is a compiler barrier as well as a CPU one.

/// Orders the CPU's writes to DMA memory before a later write that tells the device to read
/// them: the WQEs before the `prod_tail` update (Linux's `dma_wmb()`), and `prod_tail` or a
/// command request before the store to device memory that rings (a UAR doorbell, the
/// REQUEST register: the ordering Linux's `writel()` gives and `writel_relaxed()` does not,
/// rdma-core's `udma_to_device_barrier()` before a doorbell ring). One barrier serves both:
/// `writel()`'s `__iowmb()` is `dma_wmb()`.
#[inline]
pub fn to_device_barrier() {
    // ARM64: `dma_wmb()` is `dmb oshst`, a store-store barrier for the outer shareable domain
    // (the device's): every earlier store is observed there before the next store, to
    // Normal or to Device memory. rdma-core's aarch64 `udma_to_device_barrier()` is the same
    // instruction. (`dsb st`, Linux's `wmb()` and rdma-core's `mmio_flush_writes()`, would
    // also wait for the stores to complete, which a UC doorbell does not need: that is for
    // draining write-combining buffers.)
    #[cfg(target_arch = "aarch64")]
    // SAFETY: a barrier instruction: it touches no memory, registers or flags and has no
    // memory-safety precondition.
    unsafe {
        core::arch::asm!("dmb oshst", options(nostack, preserves_flags))
    };
    #[cfg(not(target_arch = "aarch64"))]
    fence(Ordering::Release);
}

/// Orders a read of a device-written index (`prod_tail`, the response key) before the reads
/// of the entries it publishes (CQEs, EQEs, CQNEs, the command response): Linux's `dma_rmb()`.
#[inline]
pub fn from_device_barrier() {
    // ARM64: `dma_rmb()` is `dmb oshld`, a load-load/load-store barrier for the outer
    // shareable domain; rdma-core's aarch64 `udma_from_device_barrier()` is the same.
    #[cfg(target_arch = "aarch64")]
    // SAFETY: a barrier instruction: it touches no memory, registers or flags and has no
    // memory-safety precondition.
    unsafe {
        core::arch::asm!("dmb oshld", options(nostack, preserves_flags))
    };
    #[cfg(not(target_arch = "aarch64"))]
    fence(Ordering::Acquire);
}

/// Full barrier between an MMIO write and a following MMIO read of its outcome (REQUEST then
/// ERR, CTL then ERR, DSRHIGH then caps): Linux's `mb()` in `pvrdma_cmd_post` and probe.
#[inline]
pub fn mmio_flush() {
    // ARM64: `mb()` is `dsb sy`, which waits until every earlier access has completed, the
    // Device-memory write included. Off the data path (commands, probe), so its cost is moot.
    #[cfg(target_arch = "aarch64")]
    // SAFETY: a barrier instruction: it touches no memory, registers or flags and has no
    // memory-safety precondition.
    unsafe {
        core::arch::asm!("dsb sy", options(nostack, preserves_flags))
    };
    // x86-64: `mb()` is `mfence` (the SeqCst fence).
    #[cfg(not(target_arch = "aarch64"))]
    fence(Ordering::SeqCst);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn lock_excludes_and_try_lock_fails_while_held() {
        let l = SpinLock::new(0u32);
        let g = l.lock();
        assert!(l.try_lock().is_none());
        drop(g);
        assert!(l.try_lock().is_some());
        // Fewer rounds under Miri, where each spin is interpreted; still four threads racing.
        let rounds = if cfg!(miri) { 200 } else { 10_000 };
        let l = Arc::new(SpinLock::new(0u64));
        let threads: std::vec::Vec<_> = (0..4)
            .map(|_| {
                let l = l.clone();
                std::thread::spawn(move || {
                    for _ in 0..rounds {
                        *l.lock() += 1;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*l.lock(), 4 * rounds);
    }

    #[cfg(debug_assertions)]
    #[test]
    fn held_spin_locks_are_counted_per_thread() {
        let (a, b) = (SpinLock::new(()), SpinLock::new(()));
        assert_eq!(held_spin_locks(), 0);
        let ga = a.lock();
        let gb = b.try_lock().unwrap();
        assert_eq!(held_spin_locks(), 2);
        assert!(b.try_lock().is_none());
        assert_eq!(held_spin_locks(), 2, "a failed try_lock holds nothing");
        std::thread::scope(|s| {
            s.spawn(|| assert_eq!(held_spin_locks(), 0, "another thread holds none"));
        });
        drop(gb);
        assert_eq!(held_spin_locks(), 1);
        drop(ga);
        assert_eq!(held_spin_locks(), 0);
    }
}
