//! OS-services seam: everything the hardware layer needs from the operating system, as small
//! traits and types, so the same driver code runs in the Windows kernel and in Linux host tests.
//!
//! What the Windows kernel implementation (`windows`, over hand-declared NDIS and ntoskrnl
//! imports) provides:
//! - [`alloc`]: non-paged pool allocation (the global allocator already is `ExAllocatePool2`
//!   under `wdk-alloc`; this module adds fallibility and accounting).
//! - [`mdl`]: the kernel's `MDL` (declared here, the lowest layer that reads it) and the one
//!   walker of MDL chains (the structures are the OS's; nothing to implement).
//! - [`dma::DmaAllocator`]: `NdisMAllocateSharedMemory` / `NdisMFreeSharedMemory`.
//! - [`mmio::RegisterIo`]: BAR1 accessors (`READ_REGISTER_ULONG` / `WRITE_REGISTER_ULONG`).
//! - [`mmio::Uar`]: the mapped UAR page 0 of BAR2 (`NdisMMapIoSpace`), written with one
//!   volatile store per doorbell.
//! - [`sync::SpinLock`]: `KeAcquireSpinLockRaiseToDpc` (marked seam in `sync.rs`).
//! - [`dpc::DpcScheduler`]: `KeInsertQueueDpc` / `KeSetTargetProcessorDpcEx` and
//!   `KeSetTimer` with a DPC.
//! - [`Platform`]: the bundle handed to the device, plus a monotonic clock
//!   (`KeQueryInterruptTimePrecise`) and a PASSIVE_LEVEL wait (`KeWaitForSingleObject`).
//! - [`NicPlatform`]: the same services for a network function with numbered BARs (vmxnet3).
//!
//! The host implementation (the dev-only crate `pvrdma-host` in `host/`, Linux only, uses std)
//! supplies DPC threads, timers and a clock; the device-specific parts (BAR1, DMA registration, doorbell forwarding) come from the
//! test harness that joins the driver to the device model.

pub mod alloc;
pub mod clock;
pub mod dma;
pub mod dpc;
pub mod mdl;
pub mod mmio;
pub mod net;
pub mod nic;
pub mod sync;

/// The Windows kernel implementation ([`windows::WindowsPlatform`], DPCs, allocator).
#[cfg(target_os = "windows")]
pub mod windows;
/// The DPC mailbox queue of `windows` is portable: its tests run on the host.
#[cfg(all(test, not(target_os = "windows")))]
#[path = "windows/mailbox.rs"]
mod windows_mailbox;

// The host implementation is Linux test infrastructure on std (threads, std locks), the dev-only
// crate `pvrdma-host` (host/): tests, examples and benches use it from there. The driver's own
// unit tests compile the same file in (they read crate-private items, so they cannot use the
// crate built against the library); the library itself never contains it.
#[cfg(all(test, not(target_os = "windows")))]
#[path = "../../host/src/platform.rs"]
#[allow(clippy::unwrap_used, clippy::expect_used, dead_code)]
pub(crate) mod host;

use ::alloc::sync::Arc;

pub use self::dma::{DmaAllocator, DmaBuffer, DmaRegion, DmaView, SharedDma};
pub use self::dpc::{Dpc, DpcHandler, DpcScheduler, Processor, Timer};
pub use self::mmio::{Bell, RegisterIo, Uar};
pub use self::nic::NicPlatform;
pub use self::sync::{SpinLock, SpinLockGuard};

/// Failure of an OS service.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OsError {
    /// Pool or DMA memory could not be allocated (or a test injected the failure).
    NoMemory,
    /// The platform cannot provide the requested resource (no UAR mapping, no such
    /// processor, interrupts already connected, ...).
    Unavailable,
}

/// Interrupt entry point the device registers with the platform before enabling interrupts
/// (Windows: the MSI-X `MiniportInterrupt` / `MiniportMessageInterrupt` handler registered with
/// `NdisMRegisterInterruptEx`). Runs at DIRQL: it may only acknowledge and queue DPCs.
pub trait InterruptHandler: Send + Sync {
    /// Message-signalled interrupt for `vector`. Returns whether the interrupt was ours.
    fn isr(&self, vector: u32) -> bool;
}

/// The OS services a PVRDMA device instance runs on.
///
/// One object per adapter. Every method may be called at DISPATCH_LEVEL or below unless its
/// documentation says otherwise.
pub trait Platform: Send + Sync {
    /// DMA-coherent memory for the DSR, slots, rings, queues and page directories.
    fn dma(&self) -> &Arc<dyn DmaAllocator>;
    /// BAR1 registers (§3 of the PVRDMA reference).
    fn bar1(&self) -> &dyn RegisterIo;
    /// Maps UAR page 0 of BAR2 (called once at bring-up, PASSIVE_LEVEL).
    fn map_uar(&self) -> Result<Uar, OsError>;
    /// Physical address of BAR2 page 0 shifted right by 12 (the DSR `uar_pfn`).
    fn uar_pfn(&self) -> u64;
    /// Queues DPCs and runs timers.
    fn scheduler(&self) -> &Arc<dyn DpcScheduler>;
    /// Monotonic time in nanoseconds.
    fn now_ns(&self) -> u64;
    /// Connects the device's interrupt handler; interrupts may arrive as soon as this returns
    /// and IMR unmasks them. PASSIVE_LEVEL.
    fn connect_interrupt(&self, handler: Arc<dyn InterruptHandler>) -> Result<(), OsError>;
    /// Disconnects the handler; no `isr` call runs after this returns. PASSIVE_LEVEL.
    fn disconnect_interrupt(&self);
    /// Blocks the calling thread until `cond` returns true or `timeout_ns` passes; returns the
    /// last value of `cond`. PASSIVE_LEVEL only (Windows: `KeWaitForSingleObject` on an event
    /// signalled by the completing DPC; host: sleeps or pumps the device model).
    fn wait_until(&self, cond: &dyn Fn() -> bool, timeout_ns: u64) -> bool;
}
