//! The NDIS entry points: `DriverEntry` and the `Miniport*` / NDK open-close handlers NDIS
//! calls. Each one only marshals between NDIS structures and [`super::miniport`] (the
//! portable core); the OS services come from `crate::os::windows`.
//!
//! Lifetime: InitializeEx allocates an [`AdapterContext`] (the MiniportAdapterContext NDIS
//! hands back to every handler) and registers it before anything else, as NDIS requires;
//! Halt tears it down in the reverse order and frees it.

use alloc::boxed::Box;
use alloc::sync::Arc;
use core::ffi::c_void;
use core::ptr::{NonNull, null_mut};
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, Ordering, fence};

use super::abi::*;
use super::attributes::GeneralAttributes;
use super::config::{ConfigEvent, Keyword, Registry};
use super::ethernet::abi::PCI_WHICHSPACE_CONFIG;
use super::ethernet::entry::EthAdapter;
use super::ethernet::{AdapterKind, EthMiniport};
use super::link::{LinkState, StatusSink};
use super::miniport::{MemRange, Miniport, MiniportConfig, OidResult, parse_resources};
use super::pair::{NdkEvents, NicNdk, PairRegistry, PciLocation};
use crate::ndkpi::{BOOLEAN, NDK_ADAPTER, NTSTATUS};
use crate::os::Platform;
use crate::os::windows::imports::{
    DbgPrintEx, IoGetDeviceProperty, NdisAllocateIoWorkItem, NdisCloseConfiguration,
    NdisFreeIoWorkItem, NdisMDeregisterInterruptEx, NdisMDeregisterMiniportDriver,
    NdisMDeregisterScatterGatherDma, NdisMGetBusData, NdisMGetDeviceProperty,
    NdisMIndicateStatusEx, NdisMMapIoSpace, NdisMNetPnPEvent, NdisMRegisterInterruptEx,
    NdisMRegisterMiniportDriver, NdisMRegisterScatterGatherDma, NdisMSendNetBufferListsComplete,
    NdisMSetMiniportAttributes, NdisMUnmapIoSpace, NdisOpenConfigurationEx, NdisQueueIoWorkItem,
    NdisReadConfiguration, NdisSetOptionalHandlers, NdisWriteErrorLogEntry,
};
use crate::os::windows::{
    MappedBar, NdisSharedMemory, WindowsPlatform, WindowsResolver, WindowsScheduler,
};

/// The handle NdisMRegisterMiniportDriver returned (for Unload's deregistration).
static DRIVER_HANDLE: AtomicPtr<c_void> = AtomicPtr::new(null_mut());

/// The driver-global table where the two adapters of a paired slot find each other
/// (`super::pair::registry`): the vmxnet3 adapter registers at its InitializeEx
/// (`super::ethernet::entry`), the PVRDMA adapter at its own when its `Paired` value is set;
/// each leaves at its Halt.
pub(super) static PAIRS: PairRegistry = PairRegistry::new();

/// `DEVICE_REGISTRY_PROPERTY` (wdm.h): the PCI bus number, and the address (device number
/// in the high word, function in the low one) of a PCI function's PDO.
const DEVICE_PROPERTY_BUS_NUMBER: i32 = 14;
const DEVICE_PROPERTY_ADDRESS: i32 = 16;

/// Resource descriptors read from a list at most (a PCI function has a handful).
const MAX_RESOURCE_DESCRIPTORS: u32 = 64;

/// Bytes of BAR2 the driver maps: UAR page 0, the only one it uses.
const UAR_MAP_LEN: u64 = 4096;

pub(super) fn header(Type: u8, Revision: u8, Size: u16) -> NDIS_OBJECT_HEADER {
    NDIS_OBJECT_HEADER {
        Type,
        Revision,
        Size,
    }
}

/// The driver's entry point: registers the miniport characteristics with NDIS.
/// PASSIVE_LEVEL.
///
/// # Safety
///
/// Called by the kernel only, with its driver object and registry path.
#[unsafe(no_mangle)]
pub unsafe extern "system" fn DriverEntry(
    driver_object: *mut c_void,
    registry_path: *mut c_void,
) -> NTSTATUS {
    let mut chars = NDIS_MINIPORT_DRIVER_CHARACTERISTICS {
        Header: header(
            NDIS_OBJECT_TYPE_MINIPORT_DRIVER_CHARACTERISTICS,
            NDIS_MINIPORT_DRIVER_CHARACTERISTICS_REVISION_3,
            NDIS_SIZEOF_MINIPORT_DRIVER_CHARACTERISTICS_REVISION_3,
        ),
        MajorNdisVersion: NDIS_MINIPORT_MAJOR_VERSION,
        MinorNdisVersion: NDIS_MINIPORT_MINOR_VERSION,
        MajorDriverVersion: 0,
        MinorDriverVersion: 1,
        Flags: 0,
        SetOptionsHandler: Some(set_options),
        InitializeHandlerEx: Some(initialize),
        HaltHandlerEx: Some(halt),
        UnloadHandler: Some(unload),
        PauseHandler: Some(pause),
        RestartHandler: Some(restart),
        OidRequestHandler: Some(oid_request),
        SendNetBufferListsHandler: Some(send_net_buffer_lists),
        ReturnNetBufferListsHandler: Some(return_net_buffer_lists),
        CancelSendHandler: Some(cancel),
        // No check-for-hang: NDIS 6.30 drivers use NdisMResetMiniport instead (Learn).
        CheckForHangHandlerEx: None,
        // SAFETY: NDIS calls the slot with MINIPORT_RESET's prototype, which `reset` has;
        // NDIS_HANDLER is the untyped slot of the characteristics structure.
        ResetHandlerEx: Some(unsafe {
            core::mem::transmute::<MiniportResetHandler, unsafe extern "system" fn()>(reset)
        }),
        DevicePnPEventNotifyHandler: Some(device_pnp_event),
        ShutdownHandlerEx: Some(shutdown),
        CancelOidRequestHandler: Some(cancel),
        // Required for miniports that implement RDMA (Learn); served like ordinary requests.
        DirectOidRequestHandler: Some(oid_request),
        CancelDirectOidRequestHandler: Some(cancel),
        // Optional (RSSv2 only): this miniport has no OID that needs the synchronous path.
        SynchronousOidRequestHandler: None,
    };
    let mut handle: NDIS_HANDLE = null_mut();
    // SAFETY: the characteristics and the handle are valid for the call (NDIS copies the
    // characteristics); PASSIVE_LEVEL in DriverEntry.
    let status = unsafe {
        NdisMRegisterMiniportDriver(
            driver_object,
            registry_path,
            null_mut(),
            (&raw mut chars).cast(),
            &mut handle,
        )
    };
    if status == NDIS_STATUS_SUCCESS {
        DRIVER_HANDLE.store(handle, Ordering::Release);
    }
    status
}

/// MiniportDriverUnload.
unsafe extern "system" fn unload(_driver_object: *mut c_void) {
    let handle = DRIVER_HANDLE.swap(null_mut(), Ordering::AcqRel);
    if !handle.is_null() {
        // SAFETY: the handle NdisMRegisterMiniportDriver returned; PASSIVE_LEVEL.
        unsafe { NdisMDeregisterMiniportDriver(handle) };
    }
}

/// MiniportSetOptions: registers the NDK provider's open/close handlers.
unsafe extern "system" fn set_options(
    driver_handle: NDIS_HANDLE,
    _context: NDIS_HANDLE,
) -> NDIS_STATUS {
    let mut ndk = NDIS_NDK_PROVIDER_CHARACTERISTICS {
        Header: header(
            NDIS_OBJECT_TYPE_NDK_PROVIDER_CHARACTERISTICS,
            NDIS_NDK_PROVIDER_CHARACTERISTICS_REVISION_1,
            NDIS_SIZEOF_NDK_PROVIDER_CHARACTERISTICS_REVISION_1,
        ),
        Flags: 0,
        OpenNDKAdapterHandler: open_ndk_adapter,
        CloseNDKAdapterHandler: close_ndk_adapter,
    };
    let optional = (&raw mut ndk).cast::<NDIS_DRIVER_OPTIONAL_HANDLERS>();
    // SAFETY: NdisSetOptionalHandlers takes any optional-handler structure by its header;
    // `ndk` is valid for the call (NDIS copies it).
    unsafe { NdisSetOptionalHandlers(driver_handle, optional.cast()) }
}

/// Where an adapter's NDK PnP events come from: the PVRDMA miniport's own NDK state, or the
/// NDK surface of a paired vmxnet3 adapter.
pub(super) trait NdkPnpSource: Send + Sync {
    /// The next event NDIS must be told (until `None`).
    fn next_ndk_pnp_event(&self) -> Option<NET_PNP_EVENT_CODE>;
    /// Work deferred to the work item (PASSIVE_LEVEL, its own stack), done before the events
    /// are drained: a paired vmxnet3 adapter's join with its PVRDMA function.
    fn run_deferred(&self) {}
}

impl NdkPnpSource for Miniport {
    fn next_ndk_pnp_event(&self) -> Option<NET_PNP_EVENT_CODE> {
        Miniport::next_ndk_pnp_event(self)
    }
}

impl NdkPnpSource for NicNdk {
    fn next_ndk_pnp_event(&self) -> Option<NET_PNP_EVENT_CODE> {
        NicNdk::next_ndk_pnp_event(self)
    }

    fn run_deferred(&self) {
        NicNdk::run_deferred(self);
    }
}

/// The NDIS I/O work item that issues the core's NDK PnP events (ndkpi.md §6.5: never from
/// the OID handler, where NdisMNetPnPEvent would deadlock), and for a paired vmxnet3 adapter
/// first joins it with its PVRDMA function ([`NdkPnpSource::run_deferred`]: the connection
/// engine's start runs on a system worker thread's stack, not an InitializeEx's). Shared by
/// the adapter context and each queued run, so a run never reads a context Halt has freed.
pub(super) struct PnpWorker {
    adapter_handle: NDIS_HANDLE,
    work_item: NDIS_HANDLE,
    source: Arc<dyn NdkPnpSource>,
    /// Set while a run is queued and has not started: the item is never queued twice.
    queued: AtomicBool,
    /// Runs queued or running; Halt frees the item only at 0.
    outstanding: AtomicU32,
}

// SAFETY: the handles are NDIS's, usable from any thread at the IRQLs their routines allow;
// the rest is Sync.
unsafe impl Send for PnpWorker {}
// SAFETY: as above.
unsafe impl Sync for PnpWorker {}

impl PnpWorker {
    /// The worker of the adapter `handle` (its work item allocated), issuing `source`'s
    /// events. PASSIVE_LEVEL (InitializeEx).
    ///
    /// # Errors
    /// NDIS_STATUS_RESOURCES.
    ///
    /// # Safety
    /// `handle` must be the MiniportAdapterHandle of a running InitializeEx; the worker must
    /// be freed ([`PnpWorker::free`]) before its Halt returns.
    pub(super) unsafe fn new(
        handle: NDIS_HANDLE,
        source: Arc<dyn NdkPnpSource>,
    ) -> Result<Arc<PnpWorker>, NDIS_STATUS> {
        // SAFETY: the adapter handle InitializeEx received (contract); PASSIVE_LEVEL.
        let work_item = unsafe { NdisAllocateIoWorkItem(handle) };
        if work_item.is_null() {
            return Err(NDIS_STATUS_RESOURCES);
        }
        crate::os::alloc::try_arc(PnpWorker {
            adapter_handle: handle,
            work_item,
            source,
            queued: AtomicBool::new(false),
            outstanding: AtomicU32::new(0),
        })
        .map_err(|_| {
            // SAFETY: just allocated, never queued.
            unsafe { NdisFreeIoWorkItem(work_item) };
            NDIS_STATUS_RESOURCES
        })
    }

    /// Frees the work item once no run is queued or running. NDIS sends no OID during Halt,
    /// so no new run is queued by one; one still pending gets the core's Halt grace (on
    /// `platform`), and one that outlives it keeps its item and worker (leaked, never freed
    /// under it). PASSIVE_LEVEL.
    pub(super) fn free(self: Arc<Self>, platform: Option<&dyn Platform>) {
        let idle = || self.outstanding.load(Ordering::Acquire) == 0;
        let idle =
            idle() || platform.is_some_and(|p| p.wait_until(&idle, super::miniport::HALT_GRACE_NS));
        if idle {
            // SAFETY: allocated in `new`; no run is queued or running.
            unsafe { NdisFreeIoWorkItem(self.work_item) };
        } else {
            // SAFETY: a NUL-terminated format without arguments; PASSIVE_LEVEL.
            unsafe {
                DbgPrintEx(
                    77,
                    0,
                    c"pvrdma: NDK PnP work item still running at halt\n"
                        .as_ptr()
                        .cast(),
                )
            };
            core::mem::forget(self);
        }
    }

    /// After a change of the NDK state: queue a run unless one is queued and not started
    /// (that one will see the new state). IRQL <= DISPATCH_LEVEL.
    pub(super) fn kick(self: &Arc<Self>) {
        // Pairs with the routine's fence: either it sees the new state, or this sees its
        // cleared flag (a store then a load on each side, so both need the full fence).
        fence(Ordering::SeqCst);
        if self.queued.swap(true, Ordering::AcqRel) {
            return;
        }
        self.outstanding.fetch_add(1, Ordering::AcqRel);
        // The run owns this count of the worker; `pnp_work_item` takes it back.
        let context = Arc::into_raw(self.clone()).cast_mut().cast::<c_void>();
        // SAFETY: the item is allocated and not queued (`queued` was clear); the routine
        // matches NDIS_IO_WORKITEM_ROUTINE; the context stays valid until the routine
        // releases it.
        unsafe { NdisQueueIoWorkItem(self.work_item, pnp_work_item, context) };
    }
}

/// NDIS_IO_WORKITEM_ROUTINE (PASSIVE_LEVEL): the deferred join, if any, then every pending
/// NDK PnP event in order.
unsafe extern "system" fn pnp_work_item(context: *mut c_void, _item: NDIS_HANDLE) {
    // SAFETY: `kick` queued the item with a count of the worker as its context.
    let worker = unsafe { Arc::from_raw(context.cast_const().cast::<PnpWorker>()) };
    // Cleared before draining: a state change after this point queues a new run (an item
    // may be requeued once its routine runs), one before it is drained here.
    worker.queued.store(false, Ordering::Relaxed);
    fence(Ordering::SeqCst);
    worker.source.run_deferred();
    while let Some(event) = worker.source.next_ndk_pnp_event() {
        // REVISION_2 (NDIS 6.50+): the default switch and vPort, the only ones NDK is offered on.
        let mut notification = NET_PNP_EVENT_NOTIFICATION {
            Header: header(
                NDIS_OBJECT_TYPE_DEFAULT,
                NET_PNP_EVENT_NOTIFICATION_REVISION_2,
                NDIS_SIZEOF_NET_PNP_EVENT_NOTIFICATION_REVISION_2,
            ),
            PortNumber: 0,
            NetPnPEvent: NET_PNP_EVENT {
                NetEvent: event,
                Buffer: null_mut(),
                BufferLength: 0,
                NdisReserved: [0; 4],
                TransportReserved: [0; 4],
                TdiReserved: [0; 4],
                TdiClientReserved: [0; 4],
            },
            Flags: 0,
            SwitchId: NDIS_DEFAULT_SWITCH_ID,
            VPortId: NDIS_DEFAULT_VPORT_ID,
        };
        // SAFETY: a REVISION_2 notification valid for the call; PASSIVE_LEVEL in a work item,
        // no lock held (a disable waits here until NDIS has closed every NDK_ADAPTER).
        let status =
            unsafe { NdisMNetPnPEvent(worker.adapter_handle, (&raw mut notification).cast()) };
        if status != NDIS_STATUS_SUCCESS {
            // SAFETY: a NUL-terminated format with two %x and their u32s; PASSIVE_LEVEL.
            unsafe {
                DbgPrintEx(
                    77,
                    0,
                    c"pvrdma: NdisMNetPnPEvent(%x) failed: %x\n".as_ptr().cast(),
                    event.0 as u32,
                    status as u32,
                )
            };
        }
    }
    worker.outstanding.fetch_sub(1, Ordering::AcqRel);
}

/// How a paired vmxnet3 adapter's NDK surface announces its state changes: it queues the
/// adapter's PnP work item ([`NdkEvents`] for `ndis::pair::NicNdk`).
pub(super) struct PnpKick(pub(super) Arc<PnpWorker>);

impl NdkEvents for PnpKick {
    fn ndk_state_changed(&self) {
        self.0.kick();
    }
}

/// The MiniportAdapterContext.
struct AdapterContext {
    handle: NDIS_HANDLE,
    /// The address-resolution seam over netio.sys, for the interface NDIS named at
    /// InitializeEx (NetLuid, IfIndex). Nothing in the core consumes it yet.
    resolver: Option<Arc<WindowsResolver>>,
    pnp: Option<Arc<PnpWorker>>,
    dma_handle: NDIS_HANDLE,
    interrupt_handle: NDIS_HANDLE,
    bar1: Option<(NonNull<c_void>, u32)>,
    uar: Option<(NonNull<c_void>, u32)>,
    scheduler: Option<Arc<WindowsScheduler>>,
    shared_memory: Option<Arc<NdisSharedMemory>>,
    platform: Option<Arc<WindowsPlatform>>,
    miniport: Option<Arc<Miniport>>,
    /// Where the adapter is registered in [`PAIRS`] (its `Paired` value was set).
    pair_at: Option<PciLocation>,
    /// The vmxnet3 function's adapter (15AD:07B0), instead of everything above.
    eth: Option<Box<EthAdapter>>,
}

impl AdapterContext {
    /// Undoes InitializeEx's steps that succeeded, newest first. PASSIVE_LEVEL.
    fn teardown(&mut self) {
        if let Some(mut e) = self.eth.take() {
            e.teardown();
        }
        if let Some(r) = self.resolver.take() {
            r.stop();
        }
        if let Some(worker) = self.pnp.take() {
            worker.free(self.platform.as_deref().map(|p| p as &dyn Platform));
        }
        if let Some(m) = self.miniport.take() {
            match self.pair_at.take() {
                // Parted from the vmxnet3 adapter first: NDK disabled there, its open NDK
                // objects failed, the interface detached; then halted.
                Some(at) => super::rdma::leave_and_halt(&PAIRS, at, &m),
                None => m.halt(),
            }
        }
        if !self.interrupt_handle.is_null() {
            // SAFETY: registered in InitializeEx; the platform (its context) is still alive.
            unsafe { NdisMDeregisterInterruptEx(self.interrupt_handle) };
            self.interrupt_handle = null_mut();
        }
        if let Some(s) = &self.scheduler {
            s.shutdown();
        }
        self.platform = None;
        if let Some(mem) = self.shared_memory.take() {
            mem.drain();
            if mem.live() != 0 {
                // Unmapping below is still right (the device was reset by halt); the blocks
                // are leaked, not freed under a device that might use them.
                // SAFETY: a NUL-terminated format with one %u and its u32; PASSIVE_LEVEL.
                unsafe {
                    DbgPrintEx(
                        77,
                        0,
                        c"pvrdma: %u shared-memory blocks still live at halt\n"
                            .as_ptr()
                            .cast(),
                        mem.live(),
                    )
                };
            }
        }
        self.scheduler = None;
        for (base, len) in [self.uar.take(), self.bar1.take()].into_iter().flatten() {
            // SAFETY: mapped by NdisMMapIoSpace in InitializeEx with this length, and no
            // object that used it is left (platform and miniport are gone).
            unsafe { NdisMUnmapIoSpace(self.handle, base.as_ptr(), len) };
        }
        if !self.dma_handle.is_null() {
            // SAFETY: registered in InitializeEx; every shared-memory block is freed.
            unsafe { NdisMDeregisterScatterGatherDma(self.dma_handle) };
            self.dma_handle = null_mut();
        }
    }
}

/// The adapter context of a handler call, or None for a null one.
///
/// # Safety
///
/// `context` must be null or the context InitializeEx registered and Halt has not freed.
unsafe fn adapter<'a>(context: NDIS_HANDLE) -> Option<&'a AdapterContext> {
    // SAFETY: per the function's contract.
    unsafe { context.cast::<AdapterContext>().as_ref() }
}

fn miniport(context: NDIS_HANDLE) -> Option<&'static Miniport> {
    // SAFETY: NDIS passes the registered context to every handler between InitializeEx and
    // Halt (the only window in which it calls them).
    let a = unsafe { adapter(context) }?;
    // SAFETY: lengthening to 'static is sound for the call's duration: Halt, which frees the
    // context, never runs concurrently with another handler of the same adapter.
    a.miniport
        .as_deref()
        .map(|m| unsafe { &*core::ptr::from_ref(m) })
}

pub(super) fn map(
    handle: NDIS_HANDLE,
    range: MemRange,
    len: u64,
) -> Result<(NonNull<c_void>, u32), NDIS_STATUS> {
    let len = u32::try_from(len.min(range.len)).map_err(|_| NDIS_STATUS_RESOURCES)?;
    if len == 0 {
        return Err(NDIS_STATUS_RESOURCES);
    }
    let phys = i64::try_from(range.phys).map_err(|_| NDIS_STATUS_RESOURCES)?;
    let mut va: *mut c_void = null_mut();
    // SAFETY: `va` is a valid out-parameter; PASSIVE_LEVEL in InitializeEx.
    let status = unsafe { NdisMMapIoSpace(&mut va, handle, phys, len) };
    if status != NDIS_STATUS_SUCCESS {
        return Err(status);
    }
    NonNull::new(va)
        .map(|p| (p, len))
        .ok_or(NDIS_STATUS_RESOURCES)
}

/// The adapter type of the function (vendor and device ID from PCI configuration space);
/// None when they cannot be read or name a function this driver does not serve.
///
/// # Safety
///
/// `handle` must be the MiniportAdapterHandle of a running InitializeEx.
unsafe fn adapter_kind(handle: NDIS_HANDLE) -> Option<AdapterKind> {
    let mut ids = [0u8; 4];
    // SAFETY: a 4-byte local buffer; IRQL <= DISPATCH_LEVEL.
    let got = unsafe {
        NdisMGetBusData(
            handle,
            PCI_WHICHSPACE_CONFIG,
            0,
            ids.as_mut_ptr().cast(),
            ids.len() as u32,
        )
    };
    if got != ids.len() as u32 {
        return None;
    }
    let [v0, v1, d0, d1] = ids;
    AdapterKind::from_pci_ids(u16::from_le_bytes([v0, v1]), u16::from_le_bytes([d0, d1]))
}

/// The vmxnet3 adapter behind a handler's context, if the context is one.
fn eth(context: NDIS_HANDLE) -> Option<&'static EthAdapter> {
    // SAFETY: NDIS passes the registered context to every handler between InitializeEx and
    // Halt (the only window in which it calls them).
    let a = unsafe { adapter(context) }?;
    // SAFETY: lengthening to 'static is sound for the call's duration: Halt, which frees the
    // context, never runs concurrently with another handler of the same adapter.
    a.eth
        .as_deref()
        .map(|e| unsafe { &*core::ptr::from_ref(e) })
}

/// MiniportInitializeEx.
unsafe extern "system" fn initialize(
    handle: NDIS_HANDLE,
    _driver_context: NDIS_HANDLE,
    params: *mut NDIS_MINIPORT_INIT_PARAMETERS,
) -> NDIS_STATUS {
    let Ok(ctx) = crate::os::alloc::try_box(AdapterContext {
        handle,
        resolver: None,
        pnp: None,
        dma_handle: null_mut(),
        interrupt_handle: null_mut(),
        bar1: None,
        uar: None,
        scheduler: None,
        shared_memory: None,
        platform: None,
        miniport: None,
        pair_at: None,
        eth: None,
    }) else {
        return NDIS_STATUS_RESOURCES;
    };
    let ctx = Box::into_raw(ctx.into_inner());
    // SAFETY: `ctx` was just allocated; nothing else sees it until registration succeeds.
    let adapter = unsafe { &mut *ctx };
    // SAFETY: the parameters NDIS passed to InitializeEx.
    let status = unsafe { initialize_adapter(adapter, params) };
    if status != NDIS_STATUS_SUCCESS {
        // SAFETY: InitializeEx failed, so NDIS will call no handler with this context.
        let mut ctx = unsafe { Box::from_raw(ctx) };
        ctx.teardown();
    }
    status
}

/// # Safety
///
/// `params` must be the InitializeEx parameters NDIS passed (or null).
unsafe fn initialize_adapter(
    ctx: &mut AdapterContext,
    params: *mut NDIS_MINIPORT_INIT_PARAMETERS,
) -> NDIS_STATUS {
    let handle = ctx.handle;
    let mut registration = NDIS_MINIPORT_ADAPTER_REGISTRATION_ATTRIBUTES {
        Header: header(
            NDIS_OBJECT_TYPE_MINIPORT_ADAPTER_REGISTRATION_ATTRIBUTES,
            NDIS_MINIPORT_ADAPTER_REGISTRATION_ATTRIBUTES_REVISION_2,
            NDIS_SIZEOF_MINIPORT_ADAPTER_REGISTRATION_ATTRIBUTES_REVISION_2,
        ),
        MiniportAdapterContext: core::ptr::from_mut(ctx).cast(),
        AttributeFlags: NDIS_MINIPORT_ATTRIBUTES_HARDWARE_DEVICE
            | NDIS_MINIPORT_ATTRIBUTES_BUS_MASTER,
        CheckForHangTimeInSeconds: 0,
        InterfaceType: NdisInterfacePci,
    };
    // SAFETY: a registration-attributes structure, valid for the call, from InitializeEx.
    let status = unsafe { set_attributes(handle, (&raw mut registration).cast()) };
    if status != NDIS_STATUS_SUCCESS {
        return status;
    }

    // SAFETY: NDIS passes valid parameters (or null, refused here).
    let Some(params) = (unsafe { params.as_ref() }) else {
        return NDIS_STATUS_INVALID_DATA;
    };
    // One image serves both functions of the slot: the PCI IDs choose the adapter type.
    // SAFETY: this InitializeEx's adapter handle; PASSIVE_LEVEL.
    match unsafe { adapter_kind(handle) } {
        Some(AdapterKind::Pvrdma) => {}
        Some(AdapterKind::Vmxnet3) => {
            // SAFETY: the parameters and handle of this InitializeEx; PASSIVE_LEVEL.
            return unsafe { super::ethernet::entry::initialize(handle, params, &mut ctx.eth) };
        }
        None => return NDIS_STATUS_NOT_SUPPORTED,
    }
    // SAFETY: the translated resource list NDIS built for this adapter, or null.
    let res = match unsafe { resource_descriptors(params.AllocatedResources) } {
        Some(list) => parse_resources(list),
        None => Err(NDIS_STATUS_RESOURCES),
    };
    let res = match res {
        Ok(r) => r,
        Err(s) => return s,
    };

    let mut dma = NDIS_SG_DMA_DESCRIPTION {
        Header: header(
            NDIS_OBJECT_TYPE_SG_DMA_DESCRIPTION,
            NDIS_SG_DMA_DESCRIPTION_REVISION_2,
            NDIS_SIZEOF_SG_DMA_DESCRIPTION_REVISION_2,
        ),
        Flags: NDIS_SG_DMA_64_BIT_ADDRESS,
        MaximumPhysicalMapping: u32::MAX,
        ProcessSGListHandler: Some(process_sg_list),
        SharedMemAllocateCompleteHandler: None,
        ScatterGatherListSize: 0,
        PdoOverride: null_mut(),
    };
    // SAFETY: valid description and out-handle; PASSIVE_LEVEL.
    let status = unsafe {
        NdisMRegisterScatterGatherDma(handle, (&raw mut dma).cast(), &mut ctx.dma_handle)
    };
    if status != NDIS_STATUS_SUCCESS {
        ctx.dma_handle = null_mut();
        return status;
    }

    let bar1 = match map(handle, res.bar1, res.bar1.len) {
        Ok(m) => m,
        Err(s) => return s,
    };
    ctx.bar1 = Some(bar1);
    let uar = match map(handle, res.bar2, UAR_MAP_LEN) {
        Ok(m) => m,
        Err(s) => return s,
    };
    ctx.uar = Some(uar);
    if (uar.1 as u64) < UAR_MAP_LEN {
        return NDIS_STATUS_RESOURCES;
    }

    let Ok(scheduler) = WindowsScheduler::new() else {
        return NDIS_STATUS_RESOURCES;
    };
    ctx.scheduler = Some(scheduler.clone());
    let Ok(shared_memory) = crate::os::alloc::try_arc(NdisSharedMemory::new(handle)) else {
        return NDIS_STATUS_RESOURCES;
    };
    ctx.shared_memory = Some(shared_memory.clone());
    // SAFETY: BAR1 is mapped with `bar1.1` bytes until teardown, after the platform is gone.
    let registers = unsafe { MappedBar::new(bar1.0, bar1.1 as usize) };
    // SAFETY: the UAR page is mapped (4 KiB checked above) until teardown, after the
    // platform is gone.
    let platform =
        unsafe { WindowsPlatform::new(shared_memory, registers, uar.0, res.bar2.phys, scheduler) };
    let Ok(platform) = crate::os::alloc::try_arc(platform) else {
        return NDIS_STATUS_RESOURCES;
    };
    ctx.platform = Some(platform.clone());
    let status = register_interrupt(handle, &platform, &mut ctx.interrupt_handle);
    if status != NDIS_STATUS_SUCCESS {
        return status;
    }
    // SAFETY: this InitializeEx's adapter handle; PASSIVE_LEVEL.
    let cfg = unsafe { read_config(handle) };
    let miniport = match Miniport::initialize_with(platform, &res, &cfg) {
        Ok(m) => m,
        Err(s) => return s,
    };
    for event in miniport.config_events().iter() {
        // SAFETY: this InitializeEx's adapter handle; PASSIVE_LEVEL.
        unsafe { log_config_event(handle, event) };
    }
    ctx.miniport = Some(miniport.clone());
    // A paired function (the hidden PVRDMA adapter of a paired installation) has no NDK state
    // of its own to announce and no IP interface: the vmxnet3 adapter of its slot attaches its
    // interface when they join (below).
    let paired = cfg.paired;
    if !paired {
        let source: Arc<dyn NdkPnpSource> = miniport.clone();
        // SAFETY: this InitializeEx's adapter handle; teardown frees the worker.
        match unsafe { PnpWorker::new(handle, source) } {
            Ok(w) => ctx.pnp = Some(w),
            Err(s) => return s,
        }
        let Some(platform) = ctx.platform.clone() else {
            return NDIS_STATUS_FAILURE;
        };
        // SAFETY: this InitializeEx's adapter handle; teardown stops the resolver before
        // Halt returns.
        match unsafe { WindowsResolver::start(platform, handle, params.NetLuid, params.IfIndex) } {
            Ok(r) => ctx.resolver = Some(r),
            Err(_) => return NDIS_STATUS_RESOURCES,
        }
        if let Some(r) = ctx.resolver.clone()
            && let Err(s) = miniport.start_connections(r)
        {
            return s;
        }
    }

    let reported = miniport.link();
    let mut general = general_attributes(&miniport.general_attributes());
    // Owned by the miniport for the adapter's life: NDIS may keep the pointer.
    general.PowerManagementCapabilitiesEx = miniport.pm_capabilities_ptr().cast();
    // SAFETY: a general-attributes structure, valid for the call; the PM capabilities it
    // points to live as long as the miniport.
    let status = unsafe { set_attributes(handle, (&raw mut general).cast()) };
    if status != NDIS_STATUS_SUCCESS {
        return status;
    }
    if !paired {
        // The capabilities (and the NDK_ADAPTER_INFO they point at) are the miniport's, alive
        // until Halt: NDIS may keep the pointer (ndkpi.md §6.4). `Enabled` is the state at
        // this moment (`*NetworkDirect`, §6.5).
        let mut ndk =
            super::caps::ndk_attributes(miniport.ndk_enabled(), miniport.ndk_capabilities_ptr());
        // SAFETY: the NDK attributes, valid for the call; the capabilities outlive it.
        let status = unsafe { set_attributes(handle, (&raw mut ndk).cast()) };
        if status != NDIS_STATUS_SUCCESS {
            return status;
        }
    }
    match crate::os::alloc::try_arc(NdisStatusSink { handle }) {
        Ok(sink) => miniport.set_status_sink(sink, reported),
        Err(_) => return NDIS_STATUS_RESOURCES,
    }
    if paired {
        // SAFETY: this InitializeEx's adapter handle; PASSIVE_LEVEL.
        let Some(at) = (unsafe { pci_location(handle) }) else {
            // SAFETY: a NUL-terminated format without arguments; PASSIVE_LEVEL.
            unsafe {
                DbgPrintEx(
                    77,
                    0,
                    c"pvrdma: Paired is set but the PCI location is unknown: not started\n"
                        .as_ptr()
                        .cast(),
                )
            };
            return NDIS_STATUS_FAILURE;
        };
        // Joined when the slot's vmxnet3 adapter is there, or when it arrives: that adapter's
        // work item attaches its interface and offers NDK (not this InitializeEx's stack).
        if let Err(s) = super::rdma::join(&PAIRS, at, &miniport) {
            return s;
        }
        ctx.pair_at = Some(at);
    }
    NDIS_STATUS_SUCCESS
}

/// Where the adapter's PCI function is: the bus number and address of its PDO
/// (NdisMGetDeviceProperty, IoGetDeviceProperty), None when either cannot be read.
///
/// # Safety
///
/// `handle` must be the MiniportAdapterHandle of a running InitializeEx; PASSIVE_LEVEL.
pub(super) unsafe fn pci_location(handle: NDIS_HANDLE) -> Option<PciLocation> {
    let mut pdo: *mut c_void = null_mut();
    // SAFETY: the adapter handle (contract) and one out-parameter, the others NULL (not
    // asked for); PASSIVE_LEVEL.
    unsafe {
        NdisMGetDeviceProperty(
            handle,
            &mut pdo,
            null_mut(),
            null_mut(),
            null_mut(),
            null_mut(),
        )
    };
    if pdo.is_null() {
        return None;
    }
    let property = |which: i32| -> Option<u32> {
        let mut value: u32 = 0;
        let mut len: u32 = 0;
        // SAFETY: the PDO NDIS returned, a 4-byte local buffer and its length; PASSIVE_LEVEL.
        let status =
            unsafe { IoGetDeviceProperty(pdo, which, 4, (&raw mut value).cast(), &mut len) };
        (status == 0 && len == 4).then_some(value)
    };
    Some(PciLocation::from_address(
        property(DEVICE_PROPERTY_BUS_NUMBER)?,
        property(DEVICE_PROPERTY_ADDRESS)?,
    ))
}

/// The adapter's keywords (NdisOpenConfigurationEx on its handle, NdisReadConfiguration),
/// or the INF defaults when the registry cannot be opened.
///
/// # Safety
///
/// `handle` must be the MiniportAdapterHandle of a running InitializeEx; PASSIVE_LEVEL.
pub(super) unsafe fn read_config(handle: NDIS_HANDLE) -> MiniportConfig {
    let mut object = NDIS_CONFIGURATION_OBJECT {
        Header: header(
            NDIS_OBJECT_TYPE_CONFIGURATION_OBJECT,
            NDIS_CONFIGURATION_OBJECT_REVISION_1,
            NDIS_SIZEOF_CONFIGURATION_OBJECT_REVISION_1,
        ),
        NdisHandle: handle,
        Flags: 0,
    };
    let mut config: NDIS_HANDLE = null_mut();
    // SAFETY: a valid configuration object and out-handle; PASSIVE_LEVEL.
    let status = unsafe { NdisOpenConfigurationEx((&raw mut object).cast(), &mut config) };
    if status != NDIS_STATUS_SUCCESS || config.is_null() {
        // SAFETY: a NUL-terminated format with one %x and its u32; PASSIVE_LEVEL.
        unsafe {
            DbgPrintEx(
                77,
                0,
                c"pvrdma: NdisOpenConfigurationEx failed (%x): INF defaults\n"
                    .as_ptr()
                    .cast(),
                status as u32,
            )
        };
        return MiniportConfig::default();
    }
    let cfg = MiniportConfig::from_registry(&AdapterRegistry(config));
    // SAFETY: opened above; nothing read from it is kept past this point.
    unsafe { NdisCloseConfiguration(config) };
    cfg
}

/// NdisReadConfiguration over an open configuration handle.
struct AdapterRegistry(NDIS_HANDLE);

/// Longest keyword name read (in UTF-16 units).
const MAX_KEYWORD: usize = 40;

impl Registry for AdapterRegistry {
    fn integer(&self, keyword: &str) -> Option<u32> {
        let mut wide = [0u16; MAX_KEYWORD];
        if keyword.len() > MAX_KEYWORD || !keyword.is_ascii() {
            return None;
        }
        for (d, b) in wide.iter_mut().zip(keyword.bytes()) {
            *d = u16::from(b);
        }
        // CAST: at most 80 bytes.
        let bytes = (keyword.len() * 2) as u16;
        let mut name = NDIS_STRING {
            Length: bytes,
            MaximumLength: bytes,
            Buffer: wide.as_mut_ptr(),
        };
        let mut status: NDIS_STATUS = NDIS_STATUS_FAILURE;
        let mut value: *mut c_void = null_mut();
        // SAFETY: the open configuration handle, a counted keyword valid for the call and two
        // out-parameters; PASSIVE_LEVEL.
        unsafe {
            NdisReadConfiguration(
                &mut status,
                &mut value,
                self.0,
                (&raw mut name).cast(),
                NdisParameterInteger,
            )
        };
        if status != NDIS_STATUS_SUCCESS {
            return None;
        }
        let p = value.cast::<NDIS_CONFIGURATION_PARAMETER>();
        if p.is_null() {
            return None;
        }
        // SAFETY: NDIS returned a parameter it owns until the handle closes.
        let param = unsafe { p.read_unaligned() };
        (param.ParameterType == NdisParameterInteger).then(|| param.integer_data())
    }
}

/// The keyword's name as a C string (for the debugger).
fn keyword_cstr(k: Keyword) -> &'static core::ffi::CStr {
    match k {
        Keyword::NetworkDirect => c"*NetworkDirect",
        Keyword::NetworkDirectTechnology => c"*NetworkDirectTechnology",
        Keyword::RoceFrameSize => c"*NetworkDirectRoCEFrameSize",
        Keyword::JumboPacket => c"*JumboPacket",
    }
}

/// Writes `event` to the System event log (NDIS_ERROR_CODE_UNSUPPORTED_CONFIGURATION with
/// the keyword number and its values) and to the debugger.
///
/// # Safety
///
/// `handle` must be the adapter's MiniportAdapterHandle; IRQL <= DISPATCH_LEVEL.
pub(super) unsafe fn log_config_event(handle: NDIS_HANDLE, event: &ConfigEvent) {
    let [a, b, c] = event.log_values();
    // SAFETY: the adapter handle and three ULONG values, as NumberOfErrorValues says.
    unsafe {
        NdisWriteErrorLogEntry(
            handle,
            NDIS_ERROR_CODE_UNSUPPORTED_CONFIGURATION,
            3,
            a,
            b,
            c,
        )
    };
    match *event {
        ConfigEvent::OutOfRange {
            keyword,
            value,
            used,
        } => {
            // SAFETY: a NUL-terminated format, a NUL-terminated %s and two u32 %u.
            unsafe {
                DbgPrintEx(
                    77,
                    0,
                    c"pvrdma: %s = %u is not a value this adapter accepts; %u is used\n"
                        .as_ptr()
                        .cast(),
                    keyword_cstr(keyword).as_ptr(),
                    value,
                    used,
                )
            }
        }
        ConfigEvent::UnsupportedTechnology { value } => {
            // SAFETY: a NUL-terminated format and one u32 %u.
            unsafe {
                DbgPrintEx(
                    77,
                    0,
                    c"pvrdma: *NetworkDirectTechnology = %u is not RoCEv2 (4), this device's only transport: NDK is off\n"
                        .as_ptr()
                        .cast(),
                    value,
                )
            }
        }
        ConfigEvent::OperationalMtu {
            configured,
            operational,
        } => {
            // SAFETY: a NUL-terminated format and two u32 %u.
            unsafe {
                DbgPrintEx(
                    77,
                    0,
                    c"pvrdma: *NetworkDirectRoCEFrameSize = %u; the operational RoCE MTU is %u (port or Ethernet MTU)\n"
                        .as_ptr()
                        .cast(),
                    configured,
                    operational,
                )
            }
        }
        ConfigEvent::PortQueryFailed => {
            // SAFETY: a NUL-terminated format without conversions.
            unsafe {
                DbgPrintEx(
                    77,
                    0,
                    c"pvrdma: QUERY_PORT failed: link unknown, RoCE MTU at most 1024\n"
                        .as_ptr()
                        .cast(),
                )
            }
        }
    };
}

/// NDIS_STATUS_LINK_STATE indications (NdisMIndicateStatusEx), from the device's DPCs.
pub(super) struct NdisStatusSink {
    pub(super) handle: NDIS_HANDLE,
}

// SAFETY: an NDIS handle, usable from any thread at the IRQLs NdisMIndicateStatusEx allows;
// the miniport drops the sink at Halt, before NDIS invalidates the handle.
unsafe impl Send for NdisStatusSink {}
// SAFETY: as above.
unsafe impl Sync for NdisStatusSink {}

impl StatusSink for NdisStatusSink {
    fn link_state(&self, state: &LinkState) {
        let mut link = state.ndis_link_state();
        let mut indication = NDIS_STATUS_INDICATION {
            Header: header(
                NDIS_OBJECT_TYPE_STATUS_INDICATION,
                NDIS_STATUS_INDICATION_REVISION_1,
                NDIS_SIZEOF_STATUS_INDICATION_REVISION_1,
            ),
            SourceHandle: self.handle,
            PortNumber: 0,
            StatusCode: NDIS_STATUS_LINK_STATE,
            Flags: 0,
            DestinationHandle: null_mut(),
            RequestId: null_mut(),
            StatusBuffer: (&raw mut link).cast(),
            StatusBufferSize: u32::from(NDIS_SIZEOF_LINK_STATE_REVISION_1),
            Guid: crate::ndkpi::GUID::default(),
            NdisReserved: [null_mut(); 4],
        };
        // SAFETY: the adapter handle and an indication with its buffer, valid for the call
        // (NDIS copies what it keeps); IRQL <= DISPATCH_LEVEL.
        unsafe { NdisMIndicateStatusEx(self.handle, (&raw mut indication).cast()) };
    }
}

/// Connects the adapter's interrupts (MSI-X, or a line) to `platform`, which the device
/// layer hands its handler through `Platform::connect_interrupt`; until then, and after it
/// disconnects, the handlers report the interrupt as not ours.
fn register_interrupt(
    handle: NDIS_HANDLE,
    platform: &Arc<WindowsPlatform>,
    out: &mut NDIS_HANDLE,
) -> NDIS_STATUS {
    let mut chars = NDIS_MINIPORT_INTERRUPT_CHARACTERISTICS {
        Header: header(
            NDIS_OBJECT_TYPE_MINIPORT_INTERRUPT,
            NDIS_MINIPORT_INTERRUPT_REVISION_1,
            NDIS_SIZEOF_MINIPORT_INTERRUPT_CHARACTERISTICS_REVISION_1,
        ),
        InterruptHandler: Some(line_isr),
        InterruptDpcHandler: Some(line_dpc),
        DisableInterruptHandler: Some(line_control),
        EnableInterruptHandler: Some(line_control),
        MsiSupported: 1,
        MsiSyncWithAllMessages: 0,
        MessageInterruptHandler: Some(message_isr),
        MessageInterruptDpcHandler: Some(message_dpc),
        DisableMessageInterruptHandler: Some(message_control),
        EnableMessageInterruptHandler: Some(message_control),
        InterruptType: 0,
        MessageInfoTable: null_mut(),
    };
    // The context is the platform, kept alive by the adapter context until after
    // NdisMDeregisterInterruptEx.
    let context = Arc::as_ptr(platform).cast_mut().cast::<c_void>();
    // SAFETY: valid characteristics and out-handle; PASSIVE_LEVEL in InitializeEx.
    let status = unsafe { NdisMRegisterInterruptEx(handle, context, (&raw mut chars).cast(), out) };
    if status != NDIS_STATUS_SUCCESS {
        *out = null_mut();
    }
    status
}

/// The platform behind an interrupt context.
///
/// # Safety
///
/// `context` must be the one `register_interrupt` registered, before its deregistration.
unsafe fn interrupt_platform<'a>(context: NDIS_HANDLE) -> Option<&'a WindowsPlatform> {
    // SAFETY: per the function's contract.
    unsafe { context.cast::<WindowsPlatform>().as_ref() }
}

/// MiniportMessageInterrupt (DIRQL): the device layer's ISR queues its own DPCs, so NDIS's
/// default DPC is never requested.
unsafe extern "system" fn message_isr(
    context: NDIS_HANDLE,
    message_id: u32,
    queue_default_dpc: *mut BOOLEAN,
    _targets: *mut u32,
) -> BOOLEAN {
    if let Some(q) = NonNull::new(queue_default_dpc) {
        // SAFETY: NDIS's out-parameter.
        unsafe { q.as_ptr().write(0) };
    }
    // SAFETY: NDIS passes the registered context.
    let ours =
        unsafe { interrupt_platform(context) }.is_some_and(|p| p.dispatch_interrupt(message_id));
    BOOLEAN::from(ours)
}

/// MiniportInterrupt for a line-based interrupt: the device has no interrupt status register
/// to tell its vectors apart, so every vector's handler gets a look.
unsafe extern "system" fn line_isr(
    context: NDIS_HANDLE,
    queue_default_dpc: *mut BOOLEAN,
    _targets: *mut u32,
) -> BOOLEAN {
    if let Some(q) = NonNull::new(queue_default_dpc) {
        // SAFETY: NDIS's out-parameter.
        unsafe { q.as_ptr().write(0) };
    }
    // SAFETY: NDIS passes the registered context.
    let Some(p) = (unsafe { interrupt_platform(context) }) else {
        return 0;
    };
    let mut ours = false;
    for vector in 0..LINE_INTERRUPT_VECTORS {
        ours |= p.dispatch_interrupt(vector);
    }
    BOOLEAN::from(ours)
}

/// Device vectors a line interrupt stands for (command, async events, CQ notifications).
const LINE_INTERRUPT_VECTORS: u32 = 3;

/// The default interrupt DPCs are never requested (the ISRs answer FALSE to it).
unsafe extern "system" fn line_dpc(
    _context: NDIS_HANDLE,
    _dpc_context: *mut c_void,
    _throttle: *mut c_void,
    _reserved: *mut c_void,
) {
}
unsafe extern "system" fn message_dpc(
    _context: NDIS_HANDLE,
    _message_id: u32,
    _dpc_context: *mut c_void,
    _throttle: *mut c_void,
    _reserved: *mut c_void,
) {
}
/// Masking is the device's IMR register, which the device layer drives itself.
unsafe extern "system" fn line_control(_context: NDIS_HANDLE) {}
unsafe extern "system" fn message_control(_context: NDIS_HANDLE, _message_id: u32) {}

/// # Safety
///
/// `attributes` must point to one of the adapter attribute structures, from InitializeEx.
pub(super) unsafe fn set_attributes(
    handle: NDIS_HANDLE,
    attributes: *mut NDIS_MINIPORT_ADAPTER_ATTRIBUTES,
) -> NDIS_STATUS {
    // SAFETY: per the function's contract.
    unsafe { NdisMSetMiniportAttributes(handle, attributes.cast()) }
}

/// The descriptors of a resource list, bounded by [`MAX_RESOURCE_DESCRIPTORS`].
///
/// # Safety
///
/// `list` must be null or a resource list NDIS built, with `Count` descriptors.
pub(super) unsafe fn resource_descriptors<'a>(
    list: *const CM_PARTIAL_RESOURCE_LIST,
) -> Option<&'a [CM_PARTIAL_RESOURCE_DESCRIPTOR]> {
    if list.is_null() {
        return None;
    }
    // SAFETY: a non-null list NDIS built (contract): the field's address is in bounds.
    let count_field = unsafe { &raw const (*list).Count };
    // SAFETY: as above; the read is unaligned-safe (pack(4)).
    let count = unsafe { count_field.read_unaligned() };
    if count > MAX_RESOURCE_DESCRIPTORS {
        return None;
    }
    // SAFETY: the descriptors follow the header in the list NDIS allocated; the pointer is
    // 4-aligned, as CM_PARTIAL_RESOURCE_DESCRIPTOR (pack(4)) requires.
    let first =
        unsafe { (&raw const (*list).PartialDescriptors).cast::<CM_PARTIAL_RESOURCE_DESCRIPTOR>() };
    // SAFETY: `count` descriptors are there (contract).
    Some(unsafe { core::slice::from_raw_parts(first, count as usize) })
}

pub(super) fn general_attributes(
    g: &GeneralAttributes,
) -> NDIS_MINIPORT_ADAPTER_GENERAL_ATTRIBUTES {
    let widen = |m: [u8; 6]| {
        let mut out = [0u8; 32];
        for (d, s) in out.iter_mut().zip(m) {
            *d = s;
        }
        out
    };
    // The list is 'static and NDIS only reads it; its byte length fits a ULONG (a few dozen OIDs).
    let oid_bytes = u32::try_from(core::mem::size_of_val(g.supported_oids)).unwrap_or(0);
    NDIS_MINIPORT_ADAPTER_GENERAL_ATTRIBUTES {
        Header: header(
            NDIS_OBJECT_TYPE_MINIPORT_ADAPTER_GENERAL_ATTRIBUTES,
            NDIS_MINIPORT_ADAPTER_GENERAL_ATTRIBUTES_REVISION_2,
            NDIS_SIZEOF_MINIPORT_ADAPTER_GENERAL_ATTRIBUTES_REVISION_2,
        ),
        Flags: 0,
        // The C enums are `int`; the values are small constants (0..=14).
        MediaType: g.media_type as i32,
        PhysicalMediumType: g.physical_medium_type as i32,
        MtuSize: g.mtu,
        MaxXmitLinkSpeed: g.max_xmit_link_speed,
        XmitLinkSpeed: g.xmit_link_speed,
        MaxRcvLinkSpeed: g.max_rcv_link_speed,
        RcvLinkSpeed: g.rcv_link_speed,
        MediaConnectState: g.media_connect_state as i32,
        MediaDuplexState: g.media_duplex_state as i32,
        LookaheadSize: g.lookahead_size,
        PowerManagementCapabilities: null_mut(),
        MacOptions: 0,
        SupportedPacketFilters: g.supported_packet_filters,
        MaxMulticastListSize: g.max_multicast_list_size,
        MacAddressLength: g.mac_address_length,
        PermanentMacAddress: widen(g.permanent_mac_address),
        CurrentMacAddress: widen(g.current_mac_address),
        RecvScaleCapabilities: null_mut(),
        AccessType: 2,
        DirectionType: 0,
        ConnectionType: 1,
        IfType: 6,
        IfConnectorPresent: 1,
        SupportedStatistics: g.supported_statistics,
        SupportedPauseFunctions: 0,
        DataBackFillSize: 0,
        ContextBackFillSize: 0,
        SupportedOidList: g.supported_oids.as_ptr().cast_mut(),
        SupportedOidListLength: oid_bytes,
        AutoNegotiationFlags: 0,
        PowerManagementCapabilitiesEx: null_mut(),
    }
}

/// MiniportHaltEx: tears down and frees the adapter context.
unsafe extern "system" fn halt(context: NDIS_HANDLE, _action: i32) {
    if context.is_null() {
        return;
    }
    // SAFETY: the context InitializeEx registered; NDIS calls no handler after Halt.
    let mut ctx = unsafe { Box::from_raw(context.cast::<AdapterContext>()) };
    ctx.teardown();
}

unsafe extern "system" fn pause(context: NDIS_HANDLE, _params: *mut c_void) -> NDIS_STATUS {
    if let Some(e) = eth(context) {
        return e.miniport().map_or(NDIS_STATUS_FAILURE, EthMiniport::pause);
    }
    miniport(context).map_or(NDIS_STATUS_FAILURE, Miniport::pause)
}

unsafe extern "system" fn restart(context: NDIS_HANDLE, _params: *mut c_void) -> NDIS_STATUS {
    if let Some(e) = eth(context) {
        return e
            .miniport()
            .map_or(NDIS_STATUS_FAILURE, EthMiniport::restart);
    }
    miniport(context).map_or(NDIS_STATUS_FAILURE, Miniport::restart)
}

unsafe extern "system" fn shutdown(context: NDIS_HANDLE, _action: i32) {
    if let Some(m) = eth(context).and_then(EthAdapter::miniport) {
        m.shutdown();
        return;
    }
    if let Some(m) = miniport(context) {
        m.shutdown();
    }
}

unsafe extern "system" fn device_pnp_event(context: NDIS_HANDLE, event: *mut NET_DEVICE_PNP_EVENT) {
    // SAFETY: NDIS passes a valid event (or null, ignored).
    let Some(event) = (unsafe { event.as_ref() }) else {
        return;
    };
    if let Some(m) = eth(context).and_then(EthAdapter::miniport) {
        m.pnp_event(event.DevicePnPEvent as u32);
        return;
    }
    if let Some(m) = miniport(context) {
        m.pnp_event(event.DevicePnPEvent as u32);
    }
}

/// The information buffer of a request as a slice (empty for a null buffer).
///
/// # Safety
///
/// `buf` must be null or valid for `len` bytes for the call.
unsafe fn buffer<'a>(buf: *mut c_void, len: u32) -> &'a mut [u8] {
    match NonNull::new(buf.cast::<u8>()) {
        // SAFETY: per the function's contract.
        Some(p) => unsafe { core::slice::from_raw_parts_mut(p.as_ptr(), len as usize) },
        None => &mut [],
    }
}

/// MiniportOidRequest (and MiniportDirectOidRequest): completed synchronously. The core
/// never answers NDIS_STATUS_PENDING (completing later would need NdisMOidRequestComplete,
/// which the driver does not import).
unsafe extern "system" fn oid_request(
    context: NDIS_HANDLE,
    request: *mut NDIS_OID_REQUEST,
) -> NDIS_STATUS {
    if let Some(e) = eth(context) {
        // SAFETY: NDIS's request, valid for the call.
        return unsafe { e.oid_request(request) };
    }
    let Some(m) = miniport(context) else {
        return NDIS_STATUS_FAILURE;
    };
    // SAFETY: the registered context (`miniport` found it).
    let pnp = unsafe { adapter(context) }.and_then(|a| a.pnp.as_ref());
    // SAFETY: NDIS passes a valid request it owns until completion (here: return).
    let Some(request) = (unsafe { request.as_mut() }) else {
        return NDIS_STATUS_INVALID_PARAMETER;
    };
    match request.RequestType {
        NdisRequestQueryInformation | NdisRequestQueryStatistics => {
            // SAFETY: the union member for query requests.
            let q = unsafe { &mut request.DATA.QUERY_INFORMATION };
            // SAFETY: NDIS's buffer of the stated length.
            let OidResult {
                status,
                bytes_done,
                bytes_needed,
            } = m.query_oid(q.Oid, unsafe {
                buffer(q.InformationBuffer, q.InformationBufferLength)
            });
            q.BytesWrittenOrRead = bytes_done;
            q.BytesNeeded = bytes_needed;
            status
        }
        NdisRequestSetInformation => {
            // SAFETY: the union member for set requests.
            let s = unsafe { &mut request.DATA.SET_INFORMATION };
            // SAFETY: NDIS's buffer of the stated length.
            let OidResult {
                status,
                bytes_done,
                bytes_needed,
            } = m.set_oid(s.Oid, unsafe {
                buffer(s.InformationBuffer, s.InformationBufferLength)
            });
            if s.Oid == OID_NDK_SET_STATE
                && status == NDIS_STATUS_SUCCESS
                && let Some(worker) = pnp
            {
                worker.kick();
            }
            s.BytesWrittenOrRead = bytes_done;
            s.BytesNeeded = bytes_needed;
            status
        }
        NdisRequestMethod => {
            // SAFETY: the union member for method requests.
            let me = unsafe { &mut request.DATA.METHOD_INFORMATION };
            // One buffer serves input and output: it holds the larger of the two.
            let len = me.InputBufferLength.max(me.OutputBufferLength);
            let input = me.InputBufferLength as usize;
            // SAFETY: NDIS's buffer, `len` bytes long.
            let OidResult {
                status,
                bytes_done,
                bytes_needed,
            } = m.method_oid(me.Oid, unsafe { buffer(me.InformationBuffer, len) }, input);
            me.BytesWritten = bytes_done;
            me.BytesRead = me.InputBufferLength;
            me.BytesNeeded = bytes_needed;
            status
        }
        _ => NDIS_STATUS_NOT_SUPPORTED,
    }
}

/// MiniportCancelOidRequest / CancelDirectOidRequest / CancelSend: every request completes
/// before its handler returns, so nothing is ever pending to cancel.
unsafe extern "system" fn cancel(_context: NDIS_HANDLE, _id: *mut c_void) {}

/// MiniportSendNetBufferLists: the adapter is NDK-only, so every send completes at once
/// with NDIS_STATUS_REQUEST_ABORTED.
unsafe extern "system" fn send_net_buffer_lists(
    context: NDIS_HANDLE,
    nbls: *mut NET_BUFFER_LIST,
    _port: NDIS_PORT_NUMBER,
    send_flags: u32,
) {
    if let Some(m) = eth(context).and_then(EthAdapter::miniport) {
        // SAFETY: the chain NDIS hands to the miniport until each NBL is completed.
        unsafe { m.send_net_buffer_lists(nbls, send_flags) };
        return;
    }
    // SAFETY: NDIS calls this only with the registered context.
    let Some(a) = (unsafe { adapter(context) }) else {
        return;
    };
    let mut nbl = nbls;
    while let Some(n) = NonNull::new(nbl) {
        // SAFETY: NDIS hands the chain to the miniport until it is completed below.
        unsafe { (*n.as_ptr()).Status = NDIS_STATUS_REQUEST_ABORTED };
        // SAFETY: as above.
        nbl = unsafe { (*n.as_ptr()).Next };
    }
    if !nbls.is_null() {
        let flags = send_flags & NDIS_SEND_FLAGS_DISPATCH_LEVEL;
        // SAFETY: the whole chain NDIS passed, completed once.
        unsafe { NdisMSendNetBufferListsComplete(a.handle, nbls.cast(), flags) };
    }
}

/// MiniportReturnNetBufferLists: the vmxnet3 adapter's receive NBLs come back; the PVRDMA
/// adapter never indicates receives, so nothing returns to it.
unsafe extern "system" fn return_net_buffer_lists(
    context: NDIS_HANDLE,
    nbls: *mut NET_BUFFER_LIST,
    _flags: u32,
) {
    if let Some(m) = eth(context).and_then(EthAdapter::miniport) {
        // SAFETY: a chain of this adapter's receive NBLs NDIS returns.
        unsafe { m.return_net_buffer_lists(nbls) };
    }
}

/// `MINIPORT_RESET(NDIS_HANDLE, PBOOLEAN AddressingReset)`.
type MiniportResetHandler =
    unsafe extern "system" fn(context: NDIS_HANDLE, addressing_reset: *mut BOOLEAN) -> NDIS_STATUS;

/// MiniportResetEx: the vmxnet3 adapter resets its device from a work item (pending); the
/// PVRDMA adapter has nothing to reset (its requests complete before their handlers return)
/// and succeeds at once.
unsafe extern "system" fn reset(
    context: NDIS_HANDLE,
    addressing_reset: *mut BOOLEAN,
) -> NDIS_STATUS {
    if let Some(e) = eth(context) {
        return e.reset_ex(addressing_reset);
    }
    if let Some(a) = NonNull::new(addressing_reset) {
        // SAFETY: NDIS's out-parameter.
        unsafe { a.as_ptr().write(0) };
    }
    NDIS_STATUS_SUCCESS
}

/// MiniportProcessSGList: never called (the driver maps no NET_BUFFERs).
unsafe extern "system" fn process_sg_list(
    _device: *mut c_void,
    _reserved: *mut c_void,
    _sg: *mut c_void,
    _context: *mut c_void,
) {
}

/// OPEN_NDK_ADAPTER_HANDLER. PASSIVE_LEVEL.
unsafe extern "system" fn open_ndk_adapter(
    context: NDIS_HANDLE,
    params: *mut NDIS_OPEN_NDK_ADAPTER_PARAMETERS,
    out: *mut *mut NDK_ADAPTER,
) -> NDIS_STATUS {
    // SAFETY: NDIS passes valid parameters (or null, refused).
    let Some(params) = (unsafe { params.as_ref() }) else {
        return NDIS_STATUS_INVALID_PARAMETER;
    };
    if out.is_null() {
        return NDIS_STATUS_INVALID_PARAMETER;
    }
    // A vmxnet3 adapter's NDK is its paired PVRDMA function's (none: not ready).
    let opened = if let Some(e) = eth(context) {
        e.ndk().map_or(Err(NDIS_STATUS_ADAPTER_NOT_READY), |n| {
            n.open_ndk_adapter_with(params)
        })
    } else {
        let Some(m) = miniport(context) else {
            return NDIS_STATUS_ADAPTER_NOT_READY;
        };
        m.open_ndk_adapter_with(params)
    };
    match opened {
        Ok(adapter) => {
            // SAFETY: `out` is NDIS's non-null out-parameter.
            unsafe { out.write(adapter) };
            NDIS_STATUS_SUCCESS
        }
        Err(status) => status,
    }
}

/// CLOSE_NDK_ADAPTER_HANDLER. PASSIVE_LEVEL.
unsafe extern "system" fn close_ndk_adapter(context: NDIS_HANDLE, adapter: *mut NDK_ADAPTER) {
    if let Some(e) = eth(context) {
        if let Some(n) = e.ndk() {
            n.close_ndk_adapter(adapter);
        }
        return;
    }
    if let Some(m) = miniport(context) {
        m.close_ndk_adapter(adapter);
    }
}
