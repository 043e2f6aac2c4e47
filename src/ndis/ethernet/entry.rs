//! The vmxnet3 adapter's NDIS glue (15AD:07B0): what `ndis::entry`'s handlers do for an
//! adapter whose InitializeEx found the vmxnet3 function (`AdapterKind::from_pci_ids` on the
//! IDs NdisMGetBusData reads). FFI only: every decision is [`EthMiniport`]'s.
//!
//! - InitializeEx: the resource list ([`super::resources::parse_eth_resources`]),
//!   NdisMRegisterScatterGatherDma (for NdisMAllocateSharedMemory), BAR0 and BAR1 mapped
//!   (NdisMMapIoSpace), the [`WindowsNicPlatform`] over them, NdisMRegisterInterruptEx with
//!   this file's ISRs, the receive NBLs' pool (NdisAllocateNetBufferListPool; one MDL and one
//!   NBL per receive buffer: NdisAllocateMdl, NdisAllocateNetBufferAndNetBufferList), the
//!   device brought up, the reset work item, the general attributes.
//! - The data path: NdisMSendNetBufferListsComplete, NdisMIndicateReceiveNetBufferLists,
//!   NDIS_STATUS_LINK_STATE, NdisMPauseComplete, NdisMResetMiniport ([`NdisEthSink`]).
//! - MiniportResetEx pends and resets the device from an NDIS I/O work item (the reset is
//!   PASSIVE_LEVEL work; ResetEx may run at DISPATCH_LEVEL), then NdisMResetComplete.
//! - NDK (a paired slot, issue 25; `ndis::pair`): when the function's PCI location is known
//!   (`entry::pci_location`), InitializeEx also reads `*NetworkDirect`, starts the address
//!   resolver over the adapter's interface (NetLuid, IfIndex), builds the NDK surface
//!   ([`NicNdk`]) over them with its PnP work item, registers it in the driver-global slot
//!   table (`entry::PAIRS`) and sets the NDK attributes (`Enabled` FALSE: the join with the
//!   slot's PVRDMA function, whichever arrives second, runs in the PnP work item, which then
//!   issues NetEventNDKEnable; InitializeEx's stack never carries the connection engine's
//!   start). OpenNDKAdapter and CloseNDKAdapter reach it through `entry`'s handlers, the NDK
//!   OIDs through the miniport.
//! - Halt: parted from the PVRDMA function first (a join the work item has not run is
//!   cancelled, one it runs is waited for; NDK disabled, the open NDK objects failed, the
//!   interface detached), the NDK surface, resolver and PnP work item let go (the item freed
//!   once no run is queued or running); then the device, the receive NBLs and their pool,
//!   the interrupt, the scheduler, shared memory, the mappings, the DMA registration, newest
//!   first.

use alloc::sync::Arc;
use core::ffi::c_void;
use core::ptr::{NonNull, null_mut};
use core::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use super::super::abi::*;
use super::super::attributes::GeneralAttributes;
use super::super::entry::{
    NdisStatusSink, NdkPnpSource, PAIRS, PnpKick, PnpWorker, general_attributes, header,
    log_config_event, map, pci_location, read_config, resource_descriptors, set_attributes,
};
use super::super::link::{LinkState, StatusSink};
use super::super::pair::nic::PART_GRACE_NS;
use super::super::pair::{NetInterface, NicNdk, PairedNic, PciLocation};
use super::abi::*;
use super::miniport::{ETH_MTU, EthConfig, EthMiniport, EthSink, MAX_MULTICAST, RxNblPool};
use super::oid::{ETH_NDK_SUPPORTED_OIDS, ETH_SUPPORTED_OIDS, ETH_SUPPORTED_STATISTICS};
use super::resources::parse_eth_resources;
use crate::ndkpi::BOOLEAN;
use crate::os::windows::imports::{
    DbgPrintEx, KeDelayExecutionThread, NdisAllocateIoWorkItem, NdisAllocateMdl,
    NdisAllocateNetBufferAndNetBufferList, NdisAllocateNetBufferListPool, NdisFreeIoWorkItem,
    NdisFreeMdl, NdisFreeNetBufferList, NdisFreeNetBufferListPool, NdisMDeregisterInterruptEx,
    NdisMDeregisterScatterGatherDma, NdisMIndicateReceiveNetBufferLists, NdisMPauseComplete,
    NdisMRegisterInterruptEx, NdisMRegisterScatterGatherDma, NdisMResetComplete,
    NdisMResetMiniport, NdisMSendNetBufferListsComplete, NdisMUnmapIoSpace, NdisQueueIoWorkItem,
};
use crate::os::windows::ke::KERNEL_MODE;
use crate::os::windows::nic::MAX_BARS;
use crate::os::windows::platform::MappedBar;
use crate::os::windows::{
    NdisSharedMemory, WindowsNicPlatform, WindowsResolver, WindowsScheduler, WindowsServices,
};
use crate::os::{NicPlatform, Platform};

/// The receive NBL pool's tag ('Vmx3' as it reads in a pool dump).
const POOL_TAG: u32 = u32::from_le_bytes(*b"Vmx3");
/// The maximum link speed the general attributes state (vmxnet3 reports 10 Gb/s).
const MAX_LINK_SPEED_BPS: u64 = 10_000_000_000;
/// Halt's wait for a reset work item still queued or running, in 100 µs steps (1 s).
const RESET_DRAIN_STEPS: u32 = 10_000;

/// What an adapter of the vmxnet3 function holds; `ndis::entry`'s AdapterContext owns it.
pub struct EthAdapter {
    handle: NDIS_HANDLE,
    dma_handle: NDIS_HANDLE,
    interrupt_handle: NDIS_HANDLE,
    bars: [Option<(NonNull<c_void>, u32)>; 2],
    scheduler: Option<Arc<WindowsScheduler>>,
    shared_memory: Option<Arc<NdisSharedMemory>>,
    platform: Option<Arc<WindowsNicPlatform>>,
    pool: Option<Arc<NdisRxPool>>,
    reset: Option<Arc<ResetWorker>>,
    miniport: Option<Arc<EthMiniport>>,
    /// The OS services of the NDK surface and the resolver (timers, waits).
    services: Option<Arc<WindowsServices>>,
    /// The address resolver over the adapter's interface (the paired function's GIDs).
    resolver: Option<Arc<WindowsResolver>>,
    /// The NDK surface of the paired slot and the work item that announces its changes.
    ndk: Option<Arc<NicNdk>>,
    pnp: Option<Arc<PnpWorker>>,
    /// Where the adapter is registered in the slot table.
    pair_at: Option<PciLocation>,
}

// SAFETY: NDIS handles and BAR mappings are usable from any processor; the rest is Sync.
unsafe impl Send for EthAdapter {}
// SAFETY: as above.
unsafe impl Sync for EthAdapter {}

impl EthAdapter {
    fn new(handle: NDIS_HANDLE) -> Self {
        EthAdapter {
            handle,
            dma_handle: null_mut(),
            interrupt_handle: null_mut(),
            bars: [None, None],
            scheduler: None,
            shared_memory: None,
            platform: None,
            pool: None,
            reset: None,
            miniport: None,
            services: None,
            resolver: None,
            ndk: None,
            pnp: None,
            pair_at: None,
        }
    }

    /// The NDK surface (None when the PCI location was unknown, or before InitializeEx
    /// built it).
    pub fn ndk(&self) -> Option<&NicNdk> {
        self.ndk.as_deref()
    }

    /// Halt's first step: parted from the slot's PVRDMA function, then the NDK surface, the
    /// resolver and the PnP work item let go. PASSIVE_LEVEL.
    fn teardown_ndk(&mut self) {
        let services: Option<&dyn Platform> = self.services.as_deref().map(|s| s as &dyn Platform);
        // Halted first: no open from here on, and the parting below announces nothing (NDIS
        // has closed this adapter's NDK_ADAPTERs before its Halt; a NetEventNDKDisable
        // issued by the work item while it halts would be one PnP event inside another).
        if let Some(nic) = &self.ndk {
            nic.halt();
        }
        if let (Some(at), Some(nic), Some(p)) = (self.pair_at.take(), self.ndk.clone(), services) {
            let as_nic: Arc<dyn PairedNic> = nic;
            if !PAIRS.leave_nic(at, &as_nic, p) {
                // SAFETY: a NUL-terminated format without arguments; PASSIVE_LEVEL.
                unsafe {
                    DbgPrintEx(
                        77,
                        0,
                        c"vmxnet3: the slot's PVRDMA function did not part in time\n"
                            .as_ptr()
                            .cast(),
                    )
                };
            }
        }
        if self.ndk.take().is_some()
            && let Some(m) = &self.miniport
        {
            m.set_ndk(None);
        }
        if let Some(r) = self.resolver.take() {
            r.stop();
        }
        if let Some(w) = self.pnp.take() {
            w.free(services);
        }
    }

    /// The adapter's core (None before InitializeEx brought it up).
    pub fn miniport(&self) -> Option<&EthMiniport> {
        self.miniport.as_deref()
    }

    /// Undoes InitializeEx's steps that succeeded, newest first. PASSIVE_LEVEL.
    pub fn teardown(&mut self) {
        self.teardown_ndk();
        if let Some(w) = self.reset.take() {
            w.free();
        }
        if let Some(m) = self.miniport.take() {
            m.halt();
        }
        if let Some(p) = self.pool.take() {
            p.destroy();
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
        self.services = None;
        if let Some(mem) = self.shared_memory.take() {
            mem.drain();
            if mem.live() != 0 {
                // SAFETY: a NUL-terminated format with one %u and its u32; PASSIVE_LEVEL.
                unsafe {
                    DbgPrintEx(
                        77,
                        0,
                        c"vmxnet3: %u shared-memory blocks still live at halt\n"
                            .as_ptr()
                            .cast(),
                        mem.live(),
                    )
                };
            }
        }
        self.scheduler = None;
        for (base, len) in self.bars.iter_mut().rev().filter_map(Option::take) {
            // SAFETY: mapped by NdisMMapIoSpace in InitializeEx with this length; the
            // platform and the device, which held the only handles to it, are gone.
            unsafe { NdisMUnmapIoSpace(self.handle, base.as_ptr(), len) };
        }
        if !self.dma_handle.is_null() {
            // SAFETY: registered in InitializeEx; every shared-memory block is freed.
            unsafe { NdisMDeregisterScatterGatherDma(self.dma_handle) };
            self.dma_handle = null_mut();
        }
    }

    /// MiniportResetEx: pends, the work item resets (NDIS_STATUS_RESET_IN_PROGRESS when a
    /// reset is queued already).
    pub fn reset_ex(&self, addressing_reset: *mut BOOLEAN) -> NDIS_STATUS {
        if let Some(a) = NonNull::new(addressing_reset) {
            // SAFETY: NDIS's out-parameter. The filter lives in DriverShared, which the
            // reset re-reads: NDIS need not set the addresses again.
            unsafe { a.as_ptr().write(0) };
        }
        match (&self.reset, &self.miniport) {
            (Some(w), Some(_)) => w.kick(),
            _ => NDIS_STATUS_FAILURE,
        }
    }

    /// MiniportOidRequest for this adapter (completed synchronously).
    ///
    /// # Safety
    /// `request` must be null or the request NDIS passed, valid for the call.
    pub unsafe fn oid_request(&self, request: *mut NDIS_OID_REQUEST) -> NDIS_STATUS {
        let Some(m) = self.miniport() else {
            return NDIS_STATUS_FAILURE;
        };
        // SAFETY: NDIS passes a valid request it owns until completion (here: return).
        let Some(request) = (unsafe { request.as_mut() }) else {
            return NDIS_STATUS_INVALID_PARAMETER;
        };
        match request.RequestType {
            NdisRequestQueryInformation | NdisRequestQueryStatistics => {
                // SAFETY: the union member for query requests.
                let q = unsafe { &mut request.DATA.QUERY_INFORMATION };
                // SAFETY: NDIS's buffer of the stated length.
                let r = m.query_oid(q.Oid, unsafe {
                    buffer(q.InformationBuffer, q.InformationBufferLength)
                });
                q.BytesWrittenOrRead = r.bytes_done;
                q.BytesNeeded = r.bytes_needed;
                r.status
            }
            NdisRequestSetInformation => {
                // SAFETY: the union member for set requests.
                let s = unsafe { &mut request.DATA.SET_INFORMATION };
                // SAFETY: NDIS's buffer of the stated length.
                let r = m.set_oid(s.Oid, unsafe {
                    buffer(s.InformationBuffer, s.InformationBufferLength)
                });
                s.BytesWrittenOrRead = r.bytes_done;
                s.BytesNeeded = r.bytes_needed;
                r.status
            }
            NdisRequestMethod => {
                // SAFETY: the union member for method requests.
                let me = unsafe { &mut request.DATA.METHOD_INFORMATION };
                let len = me.InputBufferLength.max(me.OutputBufferLength);
                let input = me.InputBufferLength as usize;
                // SAFETY: NDIS's buffer, `len` bytes long.
                let r = m.method_oid(me.Oid, unsafe { buffer(me.InformationBuffer, len) }, input);
                me.BytesWritten = r.bytes_done;
                me.BytesRead = me.InputBufferLength;
                me.BytesNeeded = r.bytes_needed;
                r.status
            }
            _ => NDIS_STATUS_NOT_SUPPORTED,
        }
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

/// The vmxnet3 part of MiniportInitializeEx, after the registration attributes. On failure
/// the caller tears down what `slot` holds.
///
/// # Safety
///
/// `params` must be the InitializeEx parameters NDIS passed; `handle` its adapter handle;
/// PASSIVE_LEVEL.
pub unsafe fn initialize(
    handle: NDIS_HANDLE,
    params: &NDIS_MINIPORT_INIT_PARAMETERS,
    slot: &mut Option<alloc::boxed::Box<EthAdapter>>,
) -> NDIS_STATUS {
    let Ok(boxed) = crate::os::alloc::try_box(EthAdapter::new(handle)) else {
        return NDIS_STATUS_RESOURCES;
    };
    let a = &mut **slot.insert(boxed.into_inner());
    // SAFETY: the translated resource list NDIS built for this adapter, or null.
    let res = match unsafe { resource_descriptors(params.AllocatedResources) } {
        Some(list) => parse_eth_resources(list),
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
        ProcessSGListHandler: Some(eth_process_sg_list),
        SharedMemAllocateCompleteHandler: None,
        ScatterGatherListSize: 0,
        PdoOverride: null_mut(),
    };
    // SAFETY: valid description and out-handle; PASSIVE_LEVEL.
    let status =
        unsafe { NdisMRegisterScatterGatherDma(handle, (&raw mut dma).cast(), &mut a.dma_handle) };
    if status != NDIS_STATUS_SUCCESS {
        a.dma_handle = null_mut();
        return status;
    }
    let mut bars: [Option<Arc<MappedBar>>; MAX_BARS] = Default::default();
    for (i, range) in [res.bar0, res.bar1].into_iter().enumerate() {
        let m = match map(handle, range, range.len) {
            Ok(m) => m,
            Err(s) => return s,
        };
        if let Some(s) = a.bars.get_mut(i) {
            *s = Some(m);
        }
        // SAFETY: mapped with `m.1` bytes until teardown, after the platform and the device
        // (the only holders of the handle) are gone.
        let bar = unsafe { MappedBar::new(m.0, m.1 as usize) };
        let Ok(bar) = crate::os::alloc::try_arc(bar) else {
            return NDIS_STATUS_RESOURCES;
        };
        if let Some(s) = bars.get_mut(i) {
            *s = Some(bar);
        }
    }
    let Ok(scheduler) = WindowsScheduler::new() else {
        return NDIS_STATUS_RESOURCES;
    };
    a.scheduler = Some(scheduler.clone());
    let Ok(shared_memory) = crate::os::alloc::try_arc(NdisSharedMemory::new(handle)) else {
        return NDIS_STATUS_RESOURCES;
    };
    a.shared_memory = Some(shared_memory.clone());
    let platform = WindowsNicPlatform::new(shared_memory, bars, scheduler, res.message_interrupts);
    let Ok(platform) = crate::os::alloc::try_arc(platform) else {
        return NDIS_STATUS_RESOURCES;
    };
    a.platform = Some(platform.clone());
    let status = register_interrupt(handle, &platform, &mut a.interrupt_handle);
    if status != NDIS_STATUS_SUCCESS {
        return status;
    }
    let pool = match NdisRxPool::new(handle) {
        Ok(p) => p,
        Err(s) => return s,
    };
    a.pool = Some(pool.clone());
    let nic: Arc<dyn NicPlatform> = platform;
    let miniport = match EthMiniport::initialize(nic, &res, &EthConfig::default(), pool) {
        Ok(m) => m,
        Err(s) => return s,
    };
    a.miniport = Some(miniport.clone());
    // SAFETY: the adapter handle InitializeEx received; PASSIVE_LEVEL.
    let work_item = unsafe { NdisAllocateIoWorkItem(handle) };
    if work_item.is_null() {
        return NDIS_STATUS_RESOURCES;
    }
    match crate::os::alloc::try_arc(ResetWorker {
        handle,
        work_item,
        miniport: miniport.clone(),
        queued: AtomicBool::new(false),
        outstanding: AtomicU32::new(0),
    }) {
        Ok(w) => a.reset = Some(w),
        Err(_) => {
            // SAFETY: just allocated, never queued.
            unsafe { NdisFreeIoWorkItem(work_item) };
            return NDIS_STATUS_RESOURCES;
        }
    }

    // Where the function is: with it, the adapter offers NDK for its slot's PVRDMA function
    // (the NDK OIDs join the supported list).
    // SAFETY: this InitializeEx's adapter handle; PASSIVE_LEVEL.
    let at = unsafe { pci_location(handle) };
    let reported = miniport.link();
    let mut g = GeneralAttributes::new(miniport.mac(), ETH_MTU, &reported, MAX_LINK_SPEED_BPS);
    g.permanent_mac_address = miniport.permanent_mac();
    g.max_multicast_list_size = MAX_MULTICAST as u32;
    g.supported_statistics = ETH_SUPPORTED_STATISTICS;
    g.supported_oids = if at.is_some() {
        &ETH_NDK_SUPPORTED_OIDS
    } else {
        ETH_SUPPORTED_OIDS
    };
    let mut general = general_attributes(&g);
    general.MacOptions = MAC_OPTIONS;
    // Owned by the miniport for the adapter's life: NDIS may keep the pointer.
    general.PowerManagementCapabilitiesEx = miniport.pm_capabilities_ptr().cast();
    // SAFETY: a general-attributes structure, valid for the call (NDIS copies it; the OID
    // list is 'static).
    let status = unsafe { set_attributes(handle, (&raw mut general).cast()) };
    if status != NDIS_STATUS_SUCCESS {
        return status;
    }
    match crate::os::alloc::try_arc(NdisEthSink {
        status: NdisStatusSink { handle },
    }) {
        Ok(sink) => miniport.set_sink(sink, reported),
        Err(_) => return NDIS_STATUS_RESOURCES,
    }
    let Some(at) = at else {
        // SAFETY: a NUL-terminated format without arguments; PASSIVE_LEVEL.
        unsafe {
            DbgPrintEx(
                77,
                0,
                c"vmxnet3: PCI location unknown: no NDK on this adapter\n"
                    .as_ptr()
                    .cast(),
            )
        };
        return NDIS_STATUS_SUCCESS;
    };
    // SAFETY: this InitializeEx's handle and parameters; PASSIVE_LEVEL.
    unsafe { start_ndk(a, handle, params, at, &miniport) }
}

/// InitializeEx's NDK part (module docs), for the function at `at`. On failure the caller
/// tears down what `a` holds.
///
/// # Safety
///
/// `handle` and `params` must be this InitializeEx's; PASSIVE_LEVEL.
unsafe fn start_ndk(
    a: &mut EthAdapter,
    handle: NDIS_HANDLE,
    params: &NDIS_MINIPORT_INIT_PARAMETERS,
    at: PciLocation,
    miniport: &Arc<EthMiniport>,
) -> NDIS_STATUS {
    // SAFETY: this InitializeEx's adapter handle; PASSIVE_LEVEL.
    let cfg = unsafe { read_config(handle) };
    for event in cfg.events.iter() {
        // SAFETY: this InitializeEx's adapter handle; PASSIVE_LEVEL.
        unsafe { log_config_event(handle, event) };
    }
    let (Some(shared), Some(scheduler)) = (a.shared_memory.clone(), a.scheduler.clone()) else {
        return NDIS_STATUS_FAILURE;
    };
    let Ok(services) = crate::os::alloc::try_arc(WindowsServices::new(shared, scheduler)) else {
        return NDIS_STATUS_RESOURCES;
    };
    a.services = Some(services.clone());
    let platform: Arc<dyn Platform> = services;
    // SAFETY: this InitializeEx's handle; teardown stops the resolver before Halt returns.
    let resolver = match unsafe {
        WindowsResolver::start(platform.clone(), handle, params.NetLuid, params.IfIndex)
    } {
        Ok(r) => r,
        Err(_) => return NDIS_STATUS_RESOURCES,
    };
    a.resolver = Some(resolver.clone());
    let iface = NetInterface {
        net_luid: params.NetLuid,
        if_index: params.IfIndex,
        mac: miniport.mac(),
        mtu: ETH_MTU,
    };
    let nic = match NicNdk::new(
        platform,
        iface,
        resolver,
        cfg.keywords.network_direct,
        miniport.link().connected,
        PART_GRACE_NS,
    ) {
        Ok(n) => n,
        Err(s) => return s,
    };
    let source: Arc<dyn NdkPnpSource> = nic.clone();
    // SAFETY: this InitializeEx's handle; teardown frees the worker.
    let worker = match unsafe { PnpWorker::new(handle, source) } {
        Ok(w) => w,
        Err(s) => return s,
    };
    a.pnp = Some(worker.clone());
    a.ndk = Some(nic.clone());
    miniport.set_ndk(Some(nic.clone()));
    let as_nic: Arc<dyn PairedNic> = nic.clone();
    if PAIRS.join_nic(at, as_nic).is_err() {
        return NDIS_STATUS_RESOURCES;
    }
    a.pair_at = Some(at);
    // `Enabled` is the state now: FALSE, the join (if the PVRDMA function is there) waits
    // for the work item, kicked below; NDIS learns it from the work item's
    // NetEventNDKEnable.
    let mut ndk =
        super::super::caps::ndk_attributes(nic.report_attributes(), nic.capabilities_ptr());
    // SAFETY: the NDK attributes, valid for the call; the capabilities live in the NDK
    // surface, which outlives the adapter's registration.
    let status = unsafe { set_attributes(handle, (&raw mut ndk).cast()) };
    if status != NDIS_STATUS_SUCCESS {
        return status;
    }
    let Ok(kick) = crate::os::alloc::try_arc(PnpKick(worker.clone())) else {
        return NDIS_STATUS_RESOURCES;
    };
    nic.set_events(Some(kick));
    // A join recorded before now (the PVRDMA function was there, or came on another
    // thread) found no work item to kick: kick it.
    if nic.has_pending_event() {
        worker.kick();
    }
    NDIS_STATUS_SUCCESS
}

/// The receive NBLs from NDIS's allocators: one MDL (NdisAllocateMdl over the buffer's
/// non-paged shared memory) and one NBL with one NET_BUFFER per buffer.
pub struct NdisRxPool {
    handle: NDIS_HANDLE,
    pool: NDIS_HANDLE,
    live: AtomicU32,
}

// SAFETY: NDIS handles, usable from any processor.
unsafe impl Send for NdisRxPool {}
// SAFETY: as above.
unsafe impl Sync for NdisRxPool {}

impl NdisRxPool {
    fn new(handle: NDIS_HANDLE) -> Result<Arc<Self>, NDIS_STATUS> {
        let mut p = NET_BUFFER_LIST_POOL_PARAMETERS {
            Header: header(
                NDIS_OBJECT_TYPE_DEFAULT,
                NET_BUFFER_LIST_POOL_PARAMETERS_REVISION_1,
                NDIS_SIZEOF_NET_BUFFER_LIST_POOL_PARAMETERS_REVISION_1,
            ),
            ProtocolId: NDIS_PROTOCOL_ID_DEFAULT,
            fAllocateNetBuffer: 1,
            ContextSize: 0,
            PoolTag: POOL_TAG,
            DataSize: 0,
        };
        // SAFETY: the adapter handle and valid parameters; PASSIVE_LEVEL.
        let pool = unsafe { NdisAllocateNetBufferListPool(handle, (&raw mut p).cast()) };
        if pool.is_null() {
            return Err(NDIS_STATUS_RESOURCES);
        }
        crate::os::alloc::try_arc(NdisRxPool {
            handle,
            pool,
            live: AtomicU32::new(0),
        })
        .map_err(|_| {
            // SAFETY: just allocated, holds no NBL.
            unsafe { NdisFreeNetBufferListPool(pool) };
            NDIS_STATUS_RESOURCES
        })
    }

    /// Frees the pool (at Halt, after the miniport freed its NBLs). One NBL still out (NDIS
    /// kept a receive past Halt) keeps the pool: leaked, never freed under it.
    fn destroy(&self) {
        if self.live.load(Ordering::Acquire) == 0 {
            // SAFETY: allocated in `new`; no NBL of it is left.
            unsafe { NdisFreeNetBufferListPool(self.pool) };
        }
    }
}

impl RxNblPool for NdisRxPool {
    fn alloc(&self, va: NonNull<u8>, _logical: u64, len: u32) -> Option<NonNull<NET_BUFFER_LIST>> {
        // SAFETY: `va` is `len` bytes of the adapter's non-paged shared memory, alive as long
        // as the NBL (the miniport frees the NBL before the buffer); PASSIVE_LEVEL.
        let mdl = unsafe { NdisAllocateMdl(self.handle, va.as_ptr().cast(), len) };
        if mdl.is_null() {
            return None;
        }
        // SAFETY: the pool takes the MDL as the NET_BUFFER's chain, `len` bytes of data.
        let nbl =
            unsafe { NdisAllocateNetBufferAndNetBufferList(self.pool, 0, 0, mdl, 0, len as usize) };
        let Some(nbl) = NonNull::new(nbl.cast::<NET_BUFFER_LIST>()) else {
            // SAFETY: allocated above, in no NBL.
            unsafe { NdisFreeMdl(mdl) };
            return None;
        };
        // SAFETY: the NBL just allocated, not yet shared.
        unsafe { (*nbl.as_ptr()).SourceHandle = self.handle };
        self.live.fetch_add(1, Ordering::AcqRel);
        Some(nbl)
    }

    fn free(&self, nbl: NonNull<NET_BUFFER_LIST>) {
        // SAFETY: an NBL `alloc` returned, back with the miniport: its one NET_BUFFER holds
        // the MDL `alloc` made.
        let nb = unsafe { (*nbl.as_ptr()).FirstNetBuffer }.cast::<NET_BUFFER>();
        // SAFETY: as above (null only if NDIS's NBL lost its NET_BUFFER: nothing to free).
        let mdl = unsafe { nb.as_ref() }.map_or(null_mut(), |b| b.MdlChain);
        // SAFETY: as above; PASSIVE_LEVEL.
        unsafe { NdisFreeNetBufferList(nbl.as_ptr().cast()) };
        if !mdl.is_null() {
            // SAFETY: the MDL `alloc` made, in no NBL any more.
            unsafe { NdisFreeMdl(mdl.cast()) };
        }
        self.live.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The miniport's indications, to NDIS.
struct NdisEthSink {
    status: NdisStatusSink,
}

impl EthSink for NdisEthSink {
    fn send_complete(&self, nbls: NonNull<NET_BUFFER_LIST>, flags: u32) {
        // SAFETY: a chain of NBLs NDIS sent, each completed once; IRQL <= DISPATCH_LEVEL.
        unsafe { NdisMSendNetBufferListsComplete(self.status.handle, nbls.as_ptr().cast(), flags) };
    }

    fn indicate_receive(&self, nbls: NonNull<NET_BUFFER_LIST>, count: u32, flags: u32) {
        // SAFETY: `count` receive NBLs of this adapter chained from `nbls`; port 0.
        unsafe {
            NdisMIndicateReceiveNetBufferLists(
                self.status.handle,
                nbls.as_ptr().cast(),
                0,
                count,
                flags,
            )
        };
    }

    fn link_state(&self, state: &LinkState) {
        self.status.link_state(state);
    }

    fn pause_complete(&self) {
        // SAFETY: the adapter handle; a pause pended; IRQL <= DISPATCH_LEVEL.
        unsafe { NdisMPauseComplete(self.status.handle) };
    }

    fn reset_needed(&self) {
        // SAFETY: the adapter handle; IRQL <= DISPATCH_LEVEL.
        unsafe { NdisMResetMiniport(self.status.handle) };
    }
}

/// The NDIS I/O work item that runs MiniportResetEx's device reset at PASSIVE_LEVEL.
struct ResetWorker {
    handle: NDIS_HANDLE,
    work_item: NDIS_HANDLE,
    miniport: Arc<EthMiniport>,
    /// A reset is queued or running (NDIS never overlaps resets; a second one is refused).
    queued: AtomicBool,
    /// Runs queued or running; Halt frees the item only at 0.
    outstanding: AtomicU32,
}

// SAFETY: NDIS handles, usable from any processor; the rest is Sync.
unsafe impl Send for ResetWorker {}
// SAFETY: as above.
unsafe impl Sync for ResetWorker {}

impl ResetWorker {
    fn kick(self: &Arc<Self>) -> NDIS_STATUS {
        if self.queued.swap(true, Ordering::AcqRel) {
            return NDIS_STATUS_RESET_IN_PROGRESS;
        }
        self.outstanding.fetch_add(1, Ordering::AcqRel);
        let context = Arc::into_raw(self.clone()).cast_mut().cast::<c_void>();
        // SAFETY: the item is allocated and not queued; the routine matches
        // NDIS_IO_WORKITEM_ROUTINE; the context stays valid until the routine releases it.
        unsafe { NdisQueueIoWorkItem(self.work_item, eth_reset_work_item, context) };
        NDIS_STATUS_PENDING
    }

    /// Frees the item once no run is queued or running (waits up to 1 s; one that outlives
    /// it keeps its item: leaked, never freed under it). PASSIVE_LEVEL.
    fn free(self: Arc<Self>) {
        let mut steps = 0;
        while self.outstanding.load(Ordering::Acquire) != 0 && steps < RESET_DRAIN_STEPS {
            let mut interval: i64 = -1_000;
            // SAFETY: PASSIVE_LEVEL (Halt); a valid local interval.
            unsafe { KeDelayExecutionThread(KERNEL_MODE, 0, &mut interval) };
            steps += 1;
        }
        if self.outstanding.load(Ordering::Acquire) == 0 {
            // SAFETY: allocated in InitializeEx; no run is queued or running.
            unsafe { NdisFreeIoWorkItem(self.work_item) };
        } else {
            core::mem::forget(self);
        }
    }
}

/// NDIS_IO_WORKITEM_ROUTINE (PASSIVE_LEVEL): the device reset, then NdisMResetComplete.
unsafe extern "system" fn eth_reset_work_item(context: *mut c_void, _item: NDIS_HANDLE) {
    // SAFETY: `kick` queued the item with a count of the worker as its context.
    let worker = unsafe { Arc::from_raw(context.cast_const().cast::<ResetWorker>()) };
    let status = worker.miniport.reset();
    worker.queued.store(false, Ordering::Release);
    // SAFETY: the adapter handle; ResetEx pended; AddressingReset FALSE.
    unsafe { NdisMResetComplete(worker.handle, status, 0) };
    worker.outstanding.fetch_sub(1, Ordering::AcqRel);
}

/// MiniportProcessSGList: never called (the driver maps NET_BUFFERs from their MDLs).
unsafe extern "system" fn eth_process_sg_list(
    _device: *mut c_void,
    _reserved: *mut c_void,
    _sg: *mut c_void,
    _context: *mut c_void,
) {
}

/// Connects the function's MSI-X messages to `platform` (the device layer connects its
/// handler through `NicPlatform::connect_interrupt`).
fn register_interrupt(
    handle: NDIS_HANDLE,
    platform: &Arc<WindowsNicPlatform>,
    out: &mut NDIS_HANDLE,
) -> NDIS_STATUS {
    let mut chars = NDIS_MINIPORT_INTERRUPT_CHARACTERISTICS {
        Header: header(
            NDIS_OBJECT_TYPE_MINIPORT_INTERRUPT,
            NDIS_MINIPORT_INTERRUPT_REVISION_1,
            NDIS_SIZEOF_MINIPORT_INTERRUPT_CHARACTERISTICS_REVISION_1,
        ),
        InterruptHandler: Some(eth_line_isr),
        InterruptDpcHandler: Some(eth_line_dpc),
        DisableInterruptHandler: Some(eth_line_control),
        EnableInterruptHandler: Some(eth_line_control),
        MsiSupported: 1,
        MsiSyncWithAllMessages: 0,
        MessageInterruptHandler: Some(eth_message_isr),
        MessageInterruptDpcHandler: Some(eth_message_dpc),
        DisableMessageInterruptHandler: Some(eth_message_control),
        EnableMessageInterruptHandler: Some(eth_message_control),
        InterruptType: 0,
        MessageInfoTable: null_mut(),
    };
    // The context is the platform, kept alive by the adapter until after deregistration.
    let context = Arc::as_ptr(platform).cast_mut().cast::<c_void>();
    // SAFETY: valid characteristics and out-handle; PASSIVE_LEVEL in InitializeEx.
    let status = unsafe { NdisMRegisterInterruptEx(handle, context, (&raw mut chars).cast(), out) };
    if status != NDIS_STATUS_SUCCESS {
        *out = null_mut();
    }
    status
}

/// # Safety
///
/// `context` must be the one `register_interrupt` registered, before its deregistration.
unsafe fn nic_platform<'a>(context: NDIS_HANDLE) -> Option<&'a WindowsNicPlatform> {
    // SAFETY: per the function's contract.
    unsafe { context.cast::<WindowsNicPlatform>().as_ref() }
}

/// MiniportMessageInterrupt (DIRQL): the device layer's ISR queues its own DPCs.
unsafe extern "system" fn eth_message_isr(
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
    let ours = unsafe { nic_platform(context) }.is_some_and(|p| p.dispatch_interrupt(message_id));
    BOOLEAN::from(ours)
}

/// MiniportInterrupt (a line): never granted to this function (InitializeEx requires MSI-X),
/// so the interrupt is not ours.
unsafe extern "system" fn eth_line_isr(
    _context: NDIS_HANDLE,
    queue_default_dpc: *mut BOOLEAN,
    _targets: *mut u32,
) -> BOOLEAN {
    if let Some(q) = NonNull::new(queue_default_dpc) {
        // SAFETY: NDIS's out-parameter.
        unsafe { q.as_ptr().write(0) };
    }
    0
}

unsafe extern "system" fn eth_line_dpc(
    _context: NDIS_HANDLE,
    _dpc_context: *mut c_void,
    _throttle: *mut c_void,
    _reserved: *mut c_void,
) {
}
unsafe extern "system" fn eth_message_dpc(
    _context: NDIS_HANDLE,
    _message_id: u32,
    _dpc_context: *mut c_void,
    _throttle: *mut c_void,
    _reserved: *mut c_void,
) {
}
/// Masking is the device's IMR, which the device layer drives itself.
unsafe extern "system" fn eth_line_control(_context: NDIS_HANDLE) {}
unsafe extern "system" fn eth_message_control(_context: NDIS_HANDLE, _message_id: u32) {}
