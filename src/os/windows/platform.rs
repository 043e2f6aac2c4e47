//! [`WindowsPlatform`]: the OS services of one adapter over NDIS and ntoskrnl.
//!
//! Built by MiniportInitializeEx (`ndis::entry`) once the BARs are mapped; handed to
//! `Miniport::initialize`. PASSIVE_LEVEL unless a method says otherwise.

use alloc::sync::Arc;
use core::ffi::c_void;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicPtr, AtomicU32, Ordering};

use super::dpc::WindowsScheduler;
use super::imports::{
    KeDelayExecutionThread, KeQueryInterruptTimePrecise, NdisMAllocateSharedMemory,
    NdisMFreeSharedMemory,
};
use super::ke::KERNEL_MODE;
use crate::os::dma::PAGE_SIZE;
use crate::os::{
    DmaAllocator, DmaRegion, DpcScheduler, InterruptHandler, OsError, Platform, RegisterIo, Uar,
};

/// A mapped BAR (NdisMMapIoSpace); registers are read and written as volatile 32-bit
/// accesses, which is all `READ_REGISTER_ULONG` / `WRITE_REGISTER_ULONG` are on x64.
pub struct MappedBar {
    // INVARIANT: `base` maps `len` bytes of device memory for the lifetime of `self`.
    base: NonNull<u32>,
    len: usize,
}

// SAFETY: device registers are not thread-affine; every access is a single volatile load or
// store, which is what the device expects from any processor.
unsafe impl Send for MappedBar {}
// SAFETY: as above: `&MappedBar` allows only volatile 32-bit accesses.
unsafe impl Sync for MappedBar {}

impl MappedBar {
    /// Wraps a mapping.
    ///
    /// # Safety
    ///
    /// `base` must map `len` bytes of the device's BAR, 4-byte aligned, until `self` is
    /// dropped (the owner unmaps it afterwards).
    pub unsafe fn new(base: NonNull<c_void>, len: usize) -> Self {
        MappedBar {
            base: base.cast(),
            len,
        }
    }

    /// The mapping's first byte.
    pub fn base(&self) -> NonNull<c_void> {
        self.base.cast()
    }

    /// The register at `off`, or None outside the BAR or misaligned: the offsets come from
    /// driver constants, but a wrong one must not reach outside the mapping.
    fn word(&self, off: u32) -> Option<*mut u32> {
        let off = off as usize;
        if !off.is_multiple_of(4) || off.checked_add(4)? > self.len {
            return None;
        }
        // SAFETY: `off + 4 <= len`, so the word lies inside the mapping (type invariant).
        Some(unsafe { self.base.as_ptr().byte_add(off) })
    }
}

impl RegisterIo for MappedBar {
    fn read32(&self, off: u32) -> u32 {
        match self.word(off) {
            // SAFETY: an aligned word inside the mapped BAR (checked by `word`).
            Some(p) => u32::from_le(unsafe { core::ptr::read_volatile(p) }),
            // What a PCI read of a nonexistent register returns.
            None => u32::MAX,
        }
    }

    fn write32(&self, off: u32, val: u32) {
        if let Some(p) = self.word(off) {
            // SAFETY: an aligned word inside the mapped BAR (checked by `word`).
            unsafe { core::ptr::write_volatile(p, val.to_le()) }
        }
    }
}

/// Shared memory through `NdisMAllocateSharedMemory` (cached: x64 DMA is cache-coherent).
///
/// `NdisMFreeSharedMemory` needs PASSIVE_LEVEL, but the last reference to a queue can go at
/// DISPATCH_LEVEL (os::dma). A free above PASSIVE_LEVEL is therefore parked on a lock-free
/// list threaded through the freed regions themselves (no allocation, any IRQL) and done by
/// the next PASSIVE_LEVEL allocation or free, or by [`NdisSharedMemory::drain`] at halt.
pub struct NdisSharedMemory {
    /// The MiniportAdapterHandle (`NDIS_HANDLE`).
    adapter: *mut c_void,
    parked: AtomicPtr<ParkedRegion>,
    live: AtomicU32,
}

/// The header a parked region carries in its own first bytes.
#[repr(C)]
struct ParkedRegion {
    next: *mut ParkedRegion,
    logical: u64,
    len: usize,
}

// SAFETY: the NDIS adapter handle may be used from any processor; the parked list is atomic.
unsafe impl Send for NdisSharedMemory {}
// SAFETY: as above.
unsafe impl Sync for NdisSharedMemory {}

impl NdisSharedMemory {
    /// Shared memory of the adapter `adapter` (NdisMRegisterScatterGatherDma must have
    /// succeeded first).
    pub fn new(adapter: *mut c_void) -> Self {
        NdisSharedMemory {
            adapter,
            parked: AtomicPtr::new(core::ptr::null_mut()),
            live: AtomicU32::new(0),
        }
    }

    /// Regions allocated and not freed (parked ones count as freed).
    pub fn live(&self) -> u32 {
        self.live.load(Ordering::Acquire)
    }

    /// Frees every parked region. PASSIVE_LEVEL.
    pub fn drain(&self) {
        let mut p = self.parked.swap(core::ptr::null_mut(), Ordering::AcqRel);
        while !p.is_null() {
            // SAFETY: `p` heads a region parked by `free`, written before the release push
            // and owned exclusively by this drain since the swap took the whole list.
            let ParkedRegion { next, logical, len } = unsafe { p.read() };
            self.release(p.cast(), logical, len);
            p = next;
        }
    }

    fn release(&self, cpu: *mut c_void, logical: u64, len: usize) {
        let Ok(len32) = u32::try_from(len) else {
            return;
        };
        // SAFETY: the region was returned by NdisMAllocateSharedMemory with these exact
        // length, cache type and addresses; PASSIVE_LEVEL is the caller's (checked) duty.
        unsafe { NdisMFreeSharedMemory(self.adapter, len32, 1, cpu, logical as i64) }
    }
}

// SAFETY: `alloc` returns page-aligned, zeroed, non-aliased regions of the reported length
// (it checks the alignment NDIS returned and zeroes the memory), valid until `free`.
unsafe impl DmaAllocator for NdisSharedMemory {
    fn alloc(&self, len: usize) -> Option<DmaRegion> {
        if at_passive_level() {
            self.drain();
        }
        let len = len.max(1).checked_next_multiple_of(PAGE_SIZE)?;
        let len32 = u32::try_from(len).ok()?;
        let mut cpu: *mut c_void = core::ptr::null_mut();
        let mut logical: i64 = 0;
        // SAFETY: both out-pointers are valid locals; PASSIVE_LEVEL (DmaAllocator::alloc's
        // documented IRQL: creation paths only).
        unsafe { NdisMAllocateSharedMemory(self.adapter, len32, 1, &mut cpu, &mut logical) };
        let cpu = NonNull::new(cpu.cast::<u8>())?;
        let logical = logical as u64;
        if !(cpu.as_ptr() as usize).is_multiple_of(PAGE_SIZE)
            || !logical.is_multiple_of(PAGE_SIZE as u64)
        {
            self.release(cpu.as_ptr().cast(), logical, len);
            return None;
        }
        // SAFETY: `len` bytes at `cpu` were just allocated for this region only.
        unsafe { core::ptr::write_bytes(cpu.as_ptr(), 0, len) };
        self.live.fetch_add(1, Ordering::AcqRel);
        Some(DmaRegion { cpu, logical, len })
    }

    fn free(&self, region: DmaRegion) {
        self.live.fetch_sub(1, Ordering::AcqRel);
        if at_passive_level() {
            self.drain();
            self.release(region.cpu.as_ptr().cast(), region.logical, region.len);
            return;
        }
        let node = region.cpu.as_ptr().cast::<ParkedRegion>();
        let mut head = self.parked.load(Ordering::Acquire);
        loop {
            // SAFETY: the region is at least a page, page-aligned and no longer used by
            // anyone (DmaAllocator::free's contract): its first bytes can hold the header.
            unsafe {
                node.write(ParkedRegion {
                    next: head,
                    logical: region.logical,
                    len: region.len,
                })
            };
            match self
                .parked
                .compare_exchange_weak(head, node, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return,
                Err(now) => head = now,
            }
        }
    }
}

/// Whether the current IRQL is PASSIVE_LEVEL (`KeGetCurrentIrql`, an inline read of CR8 on
/// x64). Elsewhere the answer is "no", which only ever defers work.
pub fn at_passive_level() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        let irql: u64;
        // SAFETY: reading CR8 (the task-priority register = IRQL) is allowed in ring 0 and has
        // no side effect.
        unsafe {
            core::arch::asm!("mov {}, cr8", out(reg) irql, options(nomem, nostack, preserves_flags))
        };
        irql == 0
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The interrupt handler slot: the ISR thunk reads it at DIRQL, so no lock: a pointer to a
/// pool-allocated `Arc`, plus a count of ISRs inside it so that disconnecting can wait them
/// out before freeing.
pub(super) struct InterruptSlot {
    handler: AtomicPtr<Arc<dyn InterruptHandler>>,
    inside: AtomicU32,
}

impl InterruptSlot {
    pub(super) const fn new() -> Self {
        InterruptSlot {
            handler: AtomicPtr::new(core::ptr::null_mut()),
            inside: AtomicU32::new(0),
        }
    }

    /// The ISR thunk's entry (DIRQL): false when no handler is connected.
    pub(super) fn dispatch(&self, vector: u32) -> bool {
        self.inside.fetch_add(1, Ordering::AcqRel);
        let h = self.handler.load(Ordering::Acquire);
        // SAFETY: a non-null slot points to a live Arc: disconnect clears the slot and then
        // waits until `inside` drops to zero before freeing it.
        let ours = !h.is_null() && unsafe { &*h }.isr(vector);
        self.inside.fetch_sub(1, Ordering::AcqRel);
        ours
    }

    /// Publishes `handler`; fails when one is connected already.
    pub(super) fn connect(&self, handler: Arc<dyn InterruptHandler>) -> Result<(), OsError> {
        let slot = crate::os::alloc::try_box(handler)?.into_inner();
        let raw = alloc::boxed::Box::into_raw(slot);
        if self
            .handler
            .compare_exchange(
                core::ptr::null_mut(),
                raw,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_err()
        {
            // SAFETY: `raw` was never published; this is its only owner.
            drop(unsafe { alloc::boxed::Box::from_raw(raw) });
            return Err(OsError::Unavailable);
        }
        Ok(())
    }

    /// Unpublishes the handler and frees it once no ISR is inside it.
    pub(super) fn disconnect(&self) {
        let raw = self.handler.swap(core::ptr::null_mut(), Ordering::AcqRel);
        if raw.is_null() {
            return;
        }
        while self.inside.load(Ordering::Acquire) != 0 {
            core::hint::spin_loop();
        }
        // SAFETY: unpublished above and no ISR is inside any more: this is the only owner.
        drop(unsafe { alloc::boxed::Box::from_raw(raw) });
    }
}

/// The platform of one adapter.
pub struct WindowsPlatform {
    dma: Arc<dyn DmaAllocator>,
    shared_memory: Arc<NdisSharedMemory>,
    bar1: MappedBar,
    uar: NonNull<u32>,
    uar_phys: u64,
    scheduler: Arc<dyn DpcScheduler>,
    interrupt: InterruptSlot,
}

// SAFETY: the raw pointers are device mappings owned for the adapter's lifetime, usable from
// any processor; everything else is Send + Sync.
unsafe impl Send for WindowsPlatform {}
// SAFETY: as above.
unsafe impl Sync for WindowsPlatform {}

impl WindowsPlatform {
    /// The platform over mapped BAR1, the mapped UAR page 0 of BAR2 and its physical address.
    ///
    /// # Safety
    ///
    /// `uar` must map at least 4 KiB of BAR2 at `uar_phys` for the platform's lifetime.
    pub unsafe fn new(
        shared_memory: Arc<NdisSharedMemory>,
        bar1: MappedBar,
        uar: NonNull<c_void>,
        uar_phys: u64,
        scheduler: Arc<WindowsScheduler>,
    ) -> Self {
        let dma: Arc<dyn DmaAllocator> = shared_memory.clone();
        WindowsPlatform {
            dma,
            shared_memory,
            bar1,
            uar: uar.cast(),
            uar_phys,
            scheduler,
            interrupt: InterruptSlot::new(),
        }
    }

    /// The shared-memory allocator (halt drains it and checks it is empty).
    pub fn shared_memory(&self) -> &Arc<NdisSharedMemory> {
        &self.shared_memory
    }

    /// BAR1 (for unmapping at halt).
    pub fn bar1_mapping(&self) -> &MappedBar {
        &self.bar1
    }

    /// The ISR thunk's entry (MiniportMessageInterrupt, DIRQL): false when no handler is
    /// connected (the interrupt is not ours).
    pub fn dispatch_interrupt(&self, vector: u32) -> bool {
        self.interrupt.dispatch(vector)
    }
}

impl Platform for WindowsPlatform {
    fn dma(&self) -> &Arc<dyn DmaAllocator> {
        &self.dma
    }

    fn bar1(&self) -> &dyn RegisterIo {
        &self.bar1
    }

    fn map_uar(&self) -> Result<Uar, OsError> {
        // SAFETY: the UAR page stays mapped for the platform's lifetime (constructor
        // contract), which outlives every device object holding the Uar.
        Ok(unsafe { Uar::new(self.uar) })
    }

    fn uar_pfn(&self) -> u64 {
        self.uar_phys >> 12
    }

    fn scheduler(&self) -> &Arc<dyn DpcScheduler> {
        &self.scheduler
    }

    fn now_ns(&self) -> u64 {
        // SAFETY: the QPC out-parameter may be NULL; callable at any IRQL.
        let ticks = unsafe { KeQueryInterruptTimePrecise(core::ptr::null_mut()) };
        ticks.saturating_mul(100)
    }

    fn connect_interrupt(&self, handler: Arc<dyn InterruptHandler>) -> Result<(), OsError> {
        self.interrupt.connect(handler)
    }

    fn disconnect_interrupt(&self) {
        self.interrupt.disconnect();
    }

    fn wait_until(&self, cond: &dyn Fn() -> bool, timeout_ns: u64) -> bool {
        wait_passive(cond, timeout_ns)
    }
}

/// The interrupt-time clock in nanoseconds (any IRQL).
fn interrupt_time_ns() -> u64 {
    // SAFETY: the QPC out-parameter may be NULL; callable at any IRQL.
    let ticks = unsafe { KeQueryInterruptTimePrecise(core::ptr::null_mut()) };
    ticks.saturating_mul(100)
}

/// `Platform::wait_until` on Windows: polls `cond` every 100 µs (KeDelayExecutionThread)
/// until it holds or `timeout_ns` passes. PASSIVE_LEVEL.
fn wait_passive(cond: &dyn Fn() -> bool, timeout_ns: u64) -> bool {
    let deadline = interrupt_time_ns().saturating_add(timeout_ns);
    loop {
        if cond() {
            return true;
        }
        if interrupt_time_ns() >= deadline {
            return cond();
        }
        // 100 µs: the command channel answers in microseconds; a relative interval is
        // negative, in 100 ns units.
        let mut interval: i64 = -1_000;
        // SAFETY: PASSIVE_LEVEL (Platform::wait_until's contract); `interval` is a valid
        // local for the call.
        unsafe { KeDelayExecutionThread(KERNEL_MODE, 0, &mut interval) };
    }
}

/// A register file that is not there: reads all ones (what a PCI read of nothing returns),
/// writes go nowhere.
struct NoRegisters;

impl RegisterIo for NoRegisters {
    fn read32(&self, _offset: u32) -> u32 {
        u32::MAX
    }
    fn write32(&self, _offset: u32, _value: u32) {}
}

/// The OS services of an adapter without PVRDMA registers (the vmxnet3 adapter of a paired
/// slot, `ndis::ethernet::entry`): DPCs and timers, the clock and waits, for its address
/// resolver and its NDK surface (`ndis::pair::NicNdk`). No BAR1 (reads all ones), no UAR,
/// no interrupt; the DMA allocator is the adapter's shared memory.
pub struct WindowsServices {
    dma: Arc<dyn DmaAllocator>,
    scheduler: Arc<dyn DpcScheduler>,
}

impl WindowsServices {
    pub fn new(shared_memory: Arc<NdisSharedMemory>, scheduler: Arc<WindowsScheduler>) -> Self {
        WindowsServices {
            dma: shared_memory,
            scheduler,
        }
    }
}

impl Platform for WindowsServices {
    fn dma(&self) -> &Arc<dyn DmaAllocator> {
        &self.dma
    }

    fn bar1(&self) -> &dyn RegisterIo {
        &NoRegisters
    }

    fn map_uar(&self) -> Result<Uar, OsError> {
        Err(OsError::Unavailable)
    }

    fn uar_pfn(&self) -> u64 {
        0
    }

    fn scheduler(&self) -> &Arc<dyn DpcScheduler> {
        &self.scheduler
    }

    fn now_ns(&self) -> u64 {
        interrupt_time_ns()
    }

    fn connect_interrupt(&self, _handler: Arc<dyn InterruptHandler>) -> Result<(), OsError> {
        Err(OsError::Unavailable)
    }

    fn disconnect_interrupt(&self) {}

    fn wait_until(&self, cond: &dyn Fn() -> bool, timeout_ns: u64) -> bool {
        wait_passive(cond, timeout_ns)
    }
}
