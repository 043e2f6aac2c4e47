//! Fallible, accounted non-paged allocation.
//!
//! Every kernel allocation in the driver goes through [`try_box`] or [`KVec`], which
//! (a) report failure as [`OsError::NoMemory`] instead of aborting, (b) count live allocations
//! and bytes in global atomics so tests can check for leaks, and (c) honour a global
//! failure-injection countdown ([`inject_failure_at`]). The countdown check is one relaxed
//! atomic load on the success path, cheap enough to keep in every build, including the Windows
//! driver (where it is never armed).
//!
//! Limitation: stable Rust has no fallible `Arc` constructor, so [`try_arc`] checks the
//! injection countdown and then calls `Arc::new`, which aborts on real pool exhaustion.
//! `Arc`s are only created at object-creation time (PASSIVE_LEVEL), never in data paths.
//! TODO: switch to `Arc::try_new` once it is stable.

use alloc::boxed::Box;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::mem::ManuallyDrop;
use core::ops::{Deref, DerefMut};
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use super::OsError;

static LIVE_ALLOCS: AtomicUsize = AtomicUsize::new(0);
static LIVE_BYTES: AtomicUsize = AtomicUsize::new(0);
/// 0 = disarmed; n > 0 = the n-th allocation from now fails.
static FAIL_COUNTDOWN: AtomicU64 = AtomicU64::new(0);

/// Live allocation counters (pool and DMA), for leak checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AllocStats {
    /// Live [`try_box`]/[`KVec`]/[`try_arc`] allocations.
    pub live_allocs: usize,
    /// Bytes held by those allocations.
    pub live_bytes: usize,
    /// Live DMA buffers ([`super::dma::DmaBuffer`] / [`super::dma::SharedDma`]).
    pub dma_buffers: usize,
    /// Bytes held by those DMA buffers.
    pub dma_bytes: usize,
}

/// Current counters.
pub fn stats() -> AllocStats {
    let (dma_buffers, dma_bytes) = super::dma::live();
    AllocStats {
        live_allocs: LIVE_ALLOCS.load(Ordering::Relaxed),
        live_bytes: LIVE_BYTES.load(Ordering::Relaxed),
        dma_buffers,
        dma_bytes,
    }
}

/// Makes the `n`-th allocation from now (pool or DMA) fail; `n = 0` disarms. Test hook.
///
/// The countdown is global: any thread's allocation consumes it, so tests that arm it must
/// not run concurrently with other allocating tests (integration tests: one test per binary
/// or a shared lock). Inside this crate's own unit tests (`cfg(test)`) only allocations of
/// the arming thread count, so unit tests can run in parallel.
pub fn inject_failure_at(n: u64) {
    #[cfg(test)]
    ARMED_HERE.with(|a| a.set(n != 0));
    FAIL_COUNTDOWN.store(n, Ordering::SeqCst);
}

/// True while an [`inject_failure_at`] failure has not happened yet. Test hook: lets a
/// test loop over `n` until a run makes fewer than `n` allocations.
pub fn injection_pending() -> bool {
    FAIL_COUNTDOWN.load(Ordering::SeqCst) != 0
}

#[cfg(test)]
std::thread_local! {
    static ARMED_HERE: core::cell::Cell<bool> = const { core::cell::Cell::new(false) };
    /// (allocations, bytes) made minus freed on this thread, for race-free unit tests.
    static LOCAL: core::cell::Cell<(isize, isize)> = const { core::cell::Cell::new((0, 0)) };
}

/// Consumes one step of the failure-injection countdown; true if this allocation must fail.
pub(crate) fn injected_failure() -> bool {
    if FAIL_COUNTDOWN.load(Ordering::Relaxed) == 0 {
        return false;
    }
    #[cfg(test)]
    if !ARMED_HERE.with(|a| a.get()) {
        return false;
    }
    let mut fail = false;
    let _ = FAIL_COUNTDOWN.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
        fail = n == 1;
        n.checked_sub(1)
    });
    fail
}

fn account_alloc(bytes: usize) {
    LIVE_ALLOCS.fetch_add(1, Ordering::Relaxed);
    LIVE_BYTES.fetch_add(bytes, Ordering::Relaxed);
    #[cfg(test)]
    LOCAL.with(|l| {
        let (a, b) = l.get();
        l.set((a + 1, b + bytes as isize));
    });
}

fn account_free(bytes: usize) {
    LIVE_ALLOCS.fetch_sub(1, Ordering::Relaxed);
    LIVE_BYTES.fetch_sub(bytes, Ordering::Relaxed);
    #[cfg(test)]
    LOCAL.with(|l| {
        let (a, b) = l.get();
        l.set((a - 1, b - bytes as isize));
    });
}

fn account_grow(bytes: usize) {
    LIVE_BYTES.fetch_add(bytes, Ordering::Relaxed);
    #[cfg(test)]
    LOCAL.with(|l| {
        let (a, b) = l.get();
        l.set((a, b + bytes as isize));
    });
}

/// An accounted, fallibly allocated box. Derefs to `T`; the counters drop with it.
pub struct KBox<T: ?Sized> {
    // INVARIANT: always initialised; dropped only in `Drop::drop`, or moved out (once) by
    // `map_box` / `into_inner`, which then forget `self`.
    inner: ManuallyDrop<Box<T>>,
}

/// Allocates `value` in non-paged pool.
pub fn try_box<T>(value: T) -> Result<KBox<T>, OsError> {
    if injected_failure() {
        return Err(OsError::NoMemory);
    }
    let mut vec = Vec::new();
    vec.try_reserve_exact(1).map_err(|_| OsError::NoMemory)?;
    // Capacity 1 is reserved, so neither the push nor the boxing reallocates.
    vec.push(value);
    let raw = Box::into_raw(vec.into_boxed_slice()).cast::<T>();
    // SAFETY: `raw` comes from `Box::<[T]>::into_raw` of exactly one element allocated by the
    // global allocator with `T`'s layout, which is a valid `Box<T>` allocation.
    let inner = unsafe { Box::from_raw(raw) };
    account_alloc(core::mem::size_of::<T>());
    Ok(KBox {
        inner: ManuallyDrop::new(inner),
    })
}

impl<T: ?Sized> KBox<T> {
    fn take_box(self) -> Box<T> {
        let mut me = ManuallyDrop::new(self);
        // SAFETY: `me` is never dropped or used again, so the box is moved out exactly once
        // (type invariant).
        unsafe { ManuallyDrop::take(&mut me.inner) }
    }

    /// Converts the box, typically to unsize it: `kb.map_box(|b| b as Box<dyn Trait>)`.
    /// The closure must return the same allocation (an unsizing coercion).
    pub fn map_box<U: ?Sized>(self, f: impl FnOnce(Box<T>) -> Box<U>) -> KBox<U> {
        KBox {
            inner: ManuallyDrop::new(f(self.take_box())),
        }
    }

    /// Unwraps to the plain box and stops accounting it.
    pub fn into_inner(self) -> Box<T> {
        account_free(core::mem::size_of_val::<T>(&self.inner));
        self.take_box()
    }
}

impl<T: ?Sized> Drop for KBox<T> {
    fn drop(&mut self) {
        account_free(core::mem::size_of_val::<T>(&self.inner));
        // SAFETY: the box is initialised (type invariant) and this is its only drop.
        unsafe { ManuallyDrop::drop(&mut self.inner) }
    }
}

impl<T: ?Sized> Deref for KBox<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.inner
    }
}

impl<T: ?Sized> DerefMut for KBox<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.inner
    }
}

impl<T: ?Sized + core::fmt::Debug> core::fmt::Debug for KBox<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        (**self.inner).fmt(f)
    }
}

/// Allocates an `Arc`. See the module limitation: only injected failures are reported, and
/// `Arc`s are not counted (their last drop is not observable without a wrapper).
pub fn try_arc<T>(value: T) -> Result<Arc<T>, OsError> {
    if injected_failure() {
        return Err(OsError::NoMemory);
    }
    Ok(Arc::new(value))
}

/// An accounted vector whose growth is fallible. Counts as one live allocation while it has
/// capacity.
pub struct KVec<T> {
    vec: Vec<T>,
}

impl<T> Default for KVec<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> KVec<T> {
    /// Empty, no allocation.
    pub const fn new() -> Self {
        KVec { vec: Vec::new() }
    }

    /// Allocates room for `cap` elements.
    pub fn try_with_capacity(cap: usize) -> Result<Self, OsError> {
        let mut v = Self::new();
        v.try_reserve(cap)?;
        Ok(v)
    }

    fn bytes(&self) -> usize {
        self.vec
            .capacity()
            .saturating_mul(core::mem::size_of::<T>())
    }

    /// Reserves room for `additional` more elements.
    pub fn try_reserve(&mut self, additional: usize) -> Result<(), OsError> {
        if self.vec.capacity().saturating_sub(self.vec.len()) >= additional {
            return Ok(());
        }
        if injected_failure() {
            return Err(OsError::NoMemory);
        }
        let before = self.bytes();
        let had = self.vec.capacity() != 0;
        self.vec
            .try_reserve_exact(additional)
            .map_err(|_| OsError::NoMemory)?;
        let after = self.bytes();
        if had {
            account_grow(after.saturating_sub(before));
        } else if after != 0 {
            account_alloc(after);
        }
        Ok(())
    }

    /// Appends without allocating; gives the value back when full.
    pub fn push_within_capacity(&mut self, value: T) -> Result<(), T> {
        if self.vec.len() < self.vec.capacity() {
            self.vec.push(value);
            Ok(())
        } else {
            Err(value)
        }
    }

    /// Reserves (fallibly) and appends.
    pub fn try_push(&mut self, value: T) -> Result<(), OsError> {
        self.try_reserve(1)?;
        self.push_within_capacity(value)
            .map_err(|_| OsError::NoMemory)
    }

    /// Removes the last element.
    pub fn pop(&mut self) -> Option<T> {
        self.vec.pop()
    }
}

impl<T> Drop for KVec<T> {
    fn drop(&mut self) {
        if self.vec.capacity() != 0 {
            account_free(self.bytes());
        }
    }
}

impl<T> Deref for KVec<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.vec
    }
}

impl<T> DerefMut for KVec<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        &mut self.vec
    }
}

#[cfg(test)]
pub(crate) mod test_support {
    /// (allocations, bytes) accounted minus freed on the calling thread.
    pub fn local() -> (isize, isize) {
        super::LOCAL.with(|l| l.get())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn box_and_vec_are_accounted_and_freed() {
        let before = test_support::local();
        let b = try_box([7u8; 100]).unwrap();
        assert_eq!(b[99], 7);
        let mut v = KVec::<u32>::try_with_capacity(10).unwrap();
        v.try_push(5).unwrap();
        let mid = test_support::local();
        assert_eq!(mid.0, before.0 + 2);
        assert_eq!(mid.1, before.1 + 100 + 40);
        assert!(stats().live_allocs >= 2);
        let d: KBox<dyn Fn() -> u32> = try_box(|| 42u32)
            .unwrap()
            .map_box(|b| b as Box<dyn Fn() -> u32>);
        assert_eq!(d(), 42);
        drop(d);
        drop(b);
        drop(v);
        assert_eq!(test_support::local(), before);
    }

    #[test]
    fn injected_failure_hits_exactly_the_nth_allocation() {
        inject_failure_at(3);
        assert!(try_box(1u32).is_ok());
        assert!(try_box(2u32).is_ok());
        assert_eq!(try_box(3u32).err(), Some(OsError::NoMemory));
        assert!(try_box(4u32).is_ok());
        inject_failure_at(1);
        assert_eq!(
            KVec::<u8>::try_with_capacity(4).err(),
            Some(OsError::NoMemory)
        );
        inject_failure_at(2);
        let other = std::thread::spawn(|| try_box(0u8).is_ok()).join().unwrap();
        assert!(
            other,
            "only the arming thread's allocations count in unit tests"
        );
        assert!(try_arc(5u8).is_ok());
        assert_eq!(try_arc(6u8).err(), Some(OsError::NoMemory));
        inject_failure_at(0);
        assert!(try_box(7u8).is_ok());
    }
}
