//! [`WindowsNicPlatform`]: the OS services of one PCI network function (the vmxnet3
//! function, `crate::vmxnet3`) over NDIS and ntoskrnl, the `os::NicPlatform` seam's Windows
//! side (docs/BUILD.md).
//!
//! Built by the Ethernet adapter's InitializeEx (`ndis::ethernet::entry`) once the memory
//! BARs are mapped (`NdisMMapIoSpace`); DMA memory is [`NdisSharedMemory`], DPCs and timers
//! the [`WindowsScheduler`], the MSI-X messages `NdisMRegisterInterruptEx`'s, whose ISRs
//! enter [`WindowsNicPlatform::dispatch_interrupt`].

use alloc::sync::Arc;

use super::dpc::WindowsScheduler;
use super::imports::KeQueryInterruptTimePrecise;
use super::platform::{InterruptSlot, MappedBar, NdisSharedMemory};
use crate::os::{DmaAllocator, DpcScheduler, InterruptHandler, NicPlatform, OsError, RegisterIo};

/// Memory BARs a function may have mapped (BAR0..BAR5).
pub const MAX_BARS: usize = 6;

/// The platform of one network function.
pub struct WindowsNicPlatform {
    dma: Arc<dyn DmaAllocator>,
    shared_memory: Arc<NdisSharedMemory>,
    bars: [Option<Arc<MappedBar>>; MAX_BARS],
    scheduler: Arc<dyn DpcScheduler>,
    vectors: u32,
    interrupt: InterruptSlot,
}

impl WindowsNicPlatform {
    /// The platform over the mapped BARs (`bars[i]`: BAR i, or None), the shared-memory
    /// allocator, the scheduler and the MSI-X messages granted. The owner unmaps the BARs
    /// only after every clone of a BAR handle is gone (the device layer's, this platform's).
    pub fn new(
        shared_memory: Arc<NdisSharedMemory>,
        bars: [Option<Arc<MappedBar>>; MAX_BARS],
        scheduler: Arc<WindowsScheduler>,
        vectors: u32,
    ) -> Self {
        let dma: Arc<dyn DmaAllocator> = shared_memory.clone();
        WindowsNicPlatform {
            dma,
            shared_memory,
            bars,
            scheduler,
            vectors,
            interrupt: InterruptSlot::new(),
        }
    }

    /// The shared-memory allocator (halt drains it and checks it is empty).
    pub fn shared_memory(&self) -> &Arc<NdisSharedMemory> {
        &self.shared_memory
    }

    /// The ISR thunk's entry (MiniportMessageInterrupt, DIRQL): false when no handler is
    /// connected (the interrupt is not ours).
    pub fn dispatch_interrupt(&self, vector: u32) -> bool {
        vector < self.vectors && self.interrupt.dispatch(vector)
    }
}

impl NicPlatform for WindowsNicPlatform {
    fn dma(&self) -> &Arc<dyn DmaAllocator> {
        &self.dma
    }

    fn bar(&self, index: u32) -> Option<Arc<dyn RegisterIo>> {
        let bar = self.bars.get(index as usize)?.clone()?;
        Some(bar)
    }

    fn scheduler(&self) -> &Arc<dyn DpcScheduler> {
        &self.scheduler
    }

    fn now_ns(&self) -> u64 {
        // SAFETY: the QPC out-parameter may be NULL; callable at any IRQL.
        let ticks = unsafe { KeQueryInterruptTimePrecise(core::ptr::null_mut()) };
        ticks.saturating_mul(100)
    }

    fn interrupt_vectors(&self) -> u32 {
        self.vectors
    }

    fn connect_interrupt(&self, handler: Arc<dyn InterruptHandler>) -> Result<(), OsError> {
        self.interrupt.connect(handler)
    }

    fn disconnect_interrupt(&self) {
        self.interrupt.disconnect();
    }
}
