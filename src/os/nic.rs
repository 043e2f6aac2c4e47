//! The OS services a PCI network function runs on (the vmxnet3 layer, `crate::vmxnet3`): its
//! memory BARs, DMA memory, DPCs, a clock and its MSI-X interrupt. Unlike [`super::Platform`]
//! (the PVRDMA device's bundle: one BAR and a UAR page), the function's BARs are numbered.
//!
//! Implementations:
//! - Windows (to come with the vmxnet3 miniport): the BARs mapped with `NdisMMapIoSpace` from
//!   the translated resources, `NdisMAllocateSharedMemory`, KDPCs, `NdisMRegisterInterruptEx`
//!   with MSI-X messages.
//! - `pvrdma_host::HostNicPlatform` (the dev-only crate in `host/`): host tests, over the
//!   device model.
//! - A qtest-backed seam (later, issue 24 item 4) fits the same trait: each BAR's
//!   [`RegisterIo`] sends `readl`/`writel` to the BAR's guest-physical address over QEMU's qtest
//!   socket, the [`DmaAllocator`] hands out pieces of guest RAM mapped from a shared
//!   memory-backend file (logical = guest-physical address, no copies), and interrupts come
//!   from MSI-X table entries programmed to write into a guest-RAM word the seam polls.
#![deny(unsafe_code)]

use ::alloc::sync::Arc;

use super::{DmaAllocator, DpcScheduler, InterruptHandler, OsError, RegisterIo};

/// The OS services of one PCI network function. Every method may be called at DISPATCH_LEVEL
/// or below unless its documentation says otherwise; [`NicPlatform::bar`] accessors at any
/// IRQL (the ISR writes a mask register).
pub trait NicPlatform: Send + Sync {
    /// DMA-coherent memory (rings, shared areas, receive buffers).
    fn dma(&self) -> &Arc<dyn DmaAllocator>;
    /// Memory BAR `index`, mapped; `None` when the function has no such BAR. Called at
    /// bring-up; the caller keeps the handle for the function's life.
    fn bar(&self, index: u32) -> Option<Arc<dyn RegisterIo>>;
    /// Queues DPCs and runs timers.
    fn scheduler(&self) -> &Arc<dyn DpcScheduler>;
    /// Monotonic time in nanoseconds.
    fn now_ns(&self) -> u64;
    /// MSI-X messages granted to the function (0: none).
    fn interrupt_vectors(&self) -> u32;
    /// Connects the interrupt handler; `isr(v)` may run as soon as this returns, for
    /// `v < interrupt_vectors()`. PASSIVE_LEVEL.
    fn connect_interrupt(&self, handler: Arc<dyn InterruptHandler>) -> Result<(), OsError>;
    /// Disconnects the handler; no `isr` call runs after this returns. PASSIVE_LEVEL.
    fn disconnect_interrupt(&self);
}
