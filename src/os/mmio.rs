//! Memory-mapped I/O: BAR1 registers as a trait object, the UAR doorbell page, and
//! [`Bell`], the one writer of a doorbell.

use alloc::sync::Arc;
use core::ptr::NonNull;

use super::sync::to_device_barrier;

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
/// Doorbells are stored only through a [`Bell`] (a value bound to one word of the page),
/// which orders the DMA memory it makes the device read (WQEs, `prod_tail`) before the store
/// with [`to_device_barrier`]: no instruction on x86-64, on ARM64 the `dmb oshst` that
/// Linux's `writel()` issues before its store.
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

    /// Host only: adds the doorbell-forwarding hook, or refuses with [`OsError::Unavailable`](super::OsError::Unavailable)
    /// in a `bare-doorbell` build, which has no hook (a harness that needs the model to hear
    /// its doorbells cannot run there).
    #[cfg(not(target_os = "windows"))]
    pub fn try_with_hook(self, hook: DoorbellHook) -> Result<Self, super::OsError> {
        #[cfg(not(feature = "bare-doorbell"))]
        return Ok(self.with_hook(hook));
        #[cfg(feature = "bare-doorbell")]
        {
            drop(hook);
            Err(super::OsError::Unavailable)
        }
    }

    /// The doorbell word at byte offset `off`, reduced to an aligned offset inside the page
    /// (`off & 0xFFC`), so no value can reach outside the mapping.
    fn word(&self, off: u32) -> NonNull<u32> {
        let word = ((off & 0xFFC) >> 2) as usize;
        // SAFETY: `word < 1024`, so the pointer stays inside the mapped page (type invariant).
        unsafe { self.base.add(word) }
    }
}

/// One doorbell value bound to a word of the UAR page, and the only code that stores to the
/// page: ringing it is [`to_device_barrier`] and one volatile 32-bit store (§12). Callers
/// build it from the typed doorbells of `pvrdma::uar` (`QpDoorbell::send(handle)`), never
/// from raw offsets; a data-path port binds it once, when its queue is created.
///
/// `#[repr(C)]`, the two words a ring reads first: a post finds them in the same cache line
/// as the rest of its ring writer's state (`pvrdma::wq::WqWriter`).
#[repr(C)]
pub struct Bell {
    // INVARIANT: `word` is `uar.word(offset)` of a `Uar` that `_keep` keeps alive (and `uar`
    // points to it where the host's doorbell hook exists: the only reason to read it).
    word: NonNull<u32>,
    value: u32,
    #[cfg(all(not(target_os = "windows"), not(feature = "bare-doorbell")))]
    offset: u32,
    #[cfg(all(not(target_os = "windows"), not(feature = "bare-doorbell")))]
    uar: NonNull<Uar>,
    _keep: Arc<dyn Send + Sync>,
}

// SAFETY: `Bell` only ever stores through its word of a `Uar`, which is `Sync` (a doorbell is
// one volatile store that any processor may issue), and owns its keeper `Arc`.
unsafe impl Send for Bell {}
// SAFETY: as for `Send`.
unsafe impl Sync for Bell {}

impl Bell {
    /// `value` at byte offset `offset` of a UAR page this bell co-owns.
    pub fn new(uar: Arc<Uar>, offset: u32, value: u32) -> Bell {
        Bell::owned_by(uar, |u| u, offset, value)
    }

    /// `value` at byte offset `offset` of the UAR page that `owner` holds (`uar` projects
    /// it), co-owning `owner`.
    pub fn owned_by<K: Send + Sync + 'static>(
        owner: Arc<K>,
        uar: fn(&K) -> &Uar,
        offset: u32,
        value: u32,
    ) -> Bell {
        let u = uar(&owner);
        // INVARIANT: the page lives as long as `owner`, which the bell keeps.
        Bell {
            #[cfg(all(not(target_os = "windows"), not(feature = "bare-doorbell")))]
            uar: NonNull::from(u),
            word: u.word(offset),
            #[cfg(all(not(target_os = "windows"), not(feature = "bare-doorbell")))]
            offset: offset & 0xFFC,
            value,
            _keep: owner,
        }
    }

    /// Orders every earlier store to DMA memory (`prod_tail`, the WQEs) before the doorbell
    /// (§12), then stores the value.
    #[inline(always)]
    pub fn ring(&self) {
        to_device_barrier();
        // SAFETY: type invariant: `word` is a doorbell word of the live UAR page.
        unsafe { core::ptr::write_volatile(self.word.as_ptr(), self.value.to_le()) };
        #[cfg(all(not(target_os = "windows"), not(feature = "bare-doorbell")))]
        {
            // SAFETY: type invariant: the UAR outlives `self`.
            let uar = unsafe { self.uar.as_ref() };
            if let Some(hook) = &uar.hook {
                hook(self.offset, self.value);
            }
        }
    }
}
