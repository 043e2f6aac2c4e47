//! Memory-mapped I/O: BAR1 registers as a trait object and the UAR doorbell page.

use core::ptr::NonNull;

#[cfg(not(target_os = "windows"))]
use alloc::sync::Arc;

/// 32-bit register access to BAR1 (PVRDMA reference §3: 32-bit LE accesses only).
/// Windows: `READ_REGISTER_ULONG` / `WRITE_REGISTER_ULONG` on the mapped BAR; host tests: the
/// device model (or the unit tests' fake device). Callable at any IRQL.
pub trait RegisterIo: Send + Sync {
    /// Reads the register at byte offset `off`.
    fn read32(&self, off: u32) -> u32;
    /// Writes `val` to the register at byte offset `off`.
    fn write32(&self, off: u32, val: u32);
}

/// Host-only doorbell observer: called after the store with `(offset, value)`.
#[cfg(not(target_os = "windows"))]
pub type DoorbellHook = Arc<dyn Fn(u32, u32) + Send + Sync>;

/// The mapped UAR page 0 of BAR2 (§12). A doorbell is one volatile 32-bit store to it: that is
/// all the Windows build runs, and what instruction-count benchmarks measure.
///
/// The store orders nothing before it: a doorbell that makes the device read DMA memory
/// (WQEs, `prod_tail`) follows [`crate::os::sync::doorbell_barrier`], as `pvrdma::uar` rings
/// them. On x86-64 that costs no instruction; on ARM64 it is the `dmb oshst` that Linux's
/// `writel()` issues before its store.
///
/// On the Linux host build a `Uar` may also carry a hook, called after the store with
/// `(offset, value)`, through which the test harness forwards doorbells to the device model.
/// The cargo feature `bare-doorbell` (instruction counting) compiles the hook out, so the
/// host doorbell is the Windows build's bare store, not even the test for a hook.
pub struct Uar {
    // INVARIANT: points to a mapped, writable, 4-byte-aligned 4 KiB page that outlives `self`.
    base: NonNull<u32>,
    #[cfg(all(not(target_os = "windows"), not(feature = "bare-doorbell")))]
    hook: Option<DoorbellHook>,
}

// SAFETY: the UAR page is device memory written only with single volatile stores; stores from
// several processors are what the device expects (one doorbell = one store).
unsafe impl Send for Uar {}
// SAFETY: as above; `&Uar` allows only volatile stores.
unsafe impl Sync for Uar {}

impl Uar {
    /// Wraps a mapped UAR page.
    ///
    /// # Safety
    ///
    /// `base` must point to a 4-byte-aligned, writable 4 KiB mapping that stays valid for the
    /// lifetime of the returned value.
    pub unsafe fn new(base: NonNull<u32>) -> Self {
        Uar {
            base,
            #[cfg(all(not(target_os = "windows"), not(feature = "bare-doorbell")))]
            hook: None,
        }
    }

    /// Host only (and not with `bare-doorbell`): adds the doorbell-forwarding hook.
    #[cfg(all(not(target_os = "windows"), not(feature = "bare-doorbell")))]
    pub fn with_hook(mut self, hook: DoorbellHook) -> Self {
        self.hook = Some(hook);
        self
    }

    /// The doorbell word at byte offset `off` (reduced to `off & 0xFFC` as in
    /// [`Uar::write32`]), for data-path ports that precompute it. Store to it only with
    /// a volatile 32-bit store, then call `Uar::after_store` where the host hook exists.
    pub fn word(&self, off: u32) -> NonNull<u32> {
        let word = ((off & 0xFFC) >> 2) as usize;
        // SAFETY: `word < 1024`, so the pointer stays inside the mapped page (type invariant).
        unsafe { self.base.add(word) }
    }

    /// Host only: what [`Uar::write32`] does after its store (the harness hook).
    #[cfg(all(not(target_os = "windows"), not(feature = "bare-doorbell")))]
    #[inline(always)]
    pub fn after_store(&self, off: u32, val: u32) {
        if let Some(hook) = &self.hook {
            hook(off & 0xFFC, val);
        }
    }

    /// Stores `val` at byte offset `off` of the page. The offset is reduced to an aligned
    /// offset inside the page (`off & 0xFFC`), so no value can reach outside the mapping.
    /// Callers use the typed doorbells of `pvrdma::uar`, never raw offsets.
    #[inline]
    pub fn write32(&self, off: u32, val: u32) {
        let word = ((off & 0xFFC) >> 2) as usize;
        // SAFETY: `word < 1024`, so the pointer stays inside the mapped page (type invariant).
        let p = unsafe { self.base.as_ptr().add(word) };
        // SAFETY: `p` is in bounds, aligned and writable (type invariant).
        unsafe { core::ptr::write_volatile(p, val.to_le()) }
        #[cfg(all(not(target_os = "windows"), not(feature = "bare-doorbell")))]
        if let Some(hook) = &self.hook {
            hook(off & 0xFFC, val);
        }
    }
}
