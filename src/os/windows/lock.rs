//! The kernel backend of `crate::os::SpinLock`: a `KSPIN_LOCK` taken with
//! `KeAcquireSpinLockRaiseToDpc`, whose state is the old KIRQL `KeReleaseSpinLock` restores.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicUsize, Ordering};

use super::imports::{KeAcquireSpinLockRaiseToDpc, KeReleaseSpinLock};
use super::ke::KSPIN_LOCK;
use crate::os::sync::RawLock;

/// A `KSPIN_LOCK` (0 = free, which is all `KeInitializeSpinLock` writes on x64).
pub struct KeSpinLock(UnsafeCell<KSPIN_LOCK>);

// SAFETY: the kernel's spin-lock routines synchronize every access to the word.
unsafe impl Sync for KeSpinLock {}
// SAFETY: a plain word, not tied to a thread.
unsafe impl Send for KeSpinLock {}

impl KeSpinLock {
    fn word(&self) -> &AtomicUsize {
        // SAFETY: KSPIN_LOCK is a ULONG_PTR the kernel updates atomically; AtomicUsize has
        // the same size and alignment, and reads through it are only a hint (try_acquire).
        unsafe { AtomicUsize::from_ptr(self.0.get()) }
    }
}

impl RawLock for KeSpinLock {
    type State = u8;
    const INIT: Self = KeSpinLock(UnsafeCell::new(0));

    fn acquire(&self) -> u8 {
        // SAFETY: a valid KSPIN_LOCK; IRQL <= DISPATCH_LEVEL (SpinLock's documented rule).
        unsafe { KeAcquireSpinLockRaiseToDpc(self.0.get()) }
    }

    /// Acquires only a lock that looks free: a holder that takes it in between makes this
    /// spin for that (short) hold, as `lock` would. The driver never relies on try_lock
    /// failing fast.
    fn try_acquire(&self) -> Option<u8> {
        if self.word().load(Ordering::Relaxed) != 0 {
            return None;
        }
        Some(self.acquire())
    }

    fn release(&self, old_irql: u8) {
        // SAFETY: the lock is held by this processor (the guard's invariant), acquired with
        // KeAcquireSpinLockRaiseToDpc, which returned `old_irql`.
        unsafe { KeReleaseSpinLock(self.0.get(), old_irql) }
    }
}
