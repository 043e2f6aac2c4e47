//! Every routine the driver imports from the kernel, declared by hand in this one file.
//!
//! raw-dylib links any name, so a misspelt import would only fail when Windows loads the
//! driver: each declaration carries its documented prototype (Learn, under
//! https://learn.microsoft.com/windows-hardware/drivers/ddi/), and `tools/imports.allow` lists
//! the names `tools/pecheck.py` accepts in the linked image. Add a routine here and there
//! together. `+verbatim` keeps the DLL names as written (without it rustc would append
//! `.dll`, and `ntoskrnl.exe.dll` would never load).
//!
//! Types follow LLP64: ULONG = u32, ULONG_PTR/SIZE_T = usize, BOOLEAN = u8, KIRQL = u8,
//! LARGE_INTEGER = i64, NTSTATUS/NDIS_STATUS = i32.
//!
//! The image imports from ntoskrnl.exe, HAL.dll, ndis.sys and netio.sys (the IP helper
//! routines of the address-resolution seam, `super::net`).
#![allow(
    non_snake_case,
    non_camel_case_types,
    dead_code,
    clippy::upper_case_acronyms
)]

use core::ffi::c_void;

use super::ke::{KDEFERRED_ROUTINE, KDPC, KSPIN_LOCK, KTIMER, PROCESSOR_NUMBER};
use super::net::{
    MIB_IPNET_ROW2, MIB_UNICASTIPADDRESS_TABLE, PUNICAST_IPADDRESS_CHANGE_CALLBACK, SOCKADDR_INET,
};

// The OS layer sits below `ndis`: NDIS structures cross this seam as untyped pointers, which
// `ndis::entry` casts from the typed structures of `ndis::abi`.
type NDIS_HANDLE = *mut c_void;
type NDIS_STATUS = i32;
type NTSTATUS = i32;
/// Pointer to an NDIS structure named in the prototype's comment.
type PNDIS_STRUCT = *mut c_void;

#[link(name = "ntoskrnl.exe", kind = "raw-dylib", modifiers = "+verbatim")]
unsafe extern "system" {
    /// `PVOID ExAllocatePool2(POOL_FLAGS Flags, SIZE_T NumberOfBytes, ULONG Tag)`
    /// (wdm.h; POOL_FLAGS = ULONG64). IRQL <= DISPATCH_LEVEL for non-paged pool.
    pub fn ExAllocatePool2(Flags: u64, NumberOfBytes: usize, Tag: u32) -> *mut c_void;
    /// `void ExFreePoolWithTag(PVOID P, ULONG Tag)`. IRQL <= DISPATCH_LEVEL.
    pub fn ExFreePoolWithTag(P: *mut c_void, Tag: u32);
    /// `void KeBugCheckEx(ULONG BugCheckCode, ULONG_PTR BugCheckParameter1..4)`; never returns.
    pub fn KeBugCheckEx(BugCheckCode: u32, P1: usize, P2: usize, P3: usize, P4: usize) -> !;
    /// `void KeInitializeDpc(PRKDPC Dpc, PKDEFERRED_ROUTINE DeferredRoutine,
    /// PVOID DeferredContext)`. Any IRQL.
    pub fn KeInitializeDpc(
        Dpc: *mut KDPC,
        DeferredRoutine: KDEFERRED_ROUTINE,
        Context: *mut c_void,
    );
    /// `NTSTATUS KeSetTargetProcessorDpcEx(PKDPC Dpc, PPROCESSOR_NUMBER ProcNumber)`.
    /// Only while the DPC is not queued.
    pub fn KeSetTargetProcessorDpcEx(Dpc: *mut KDPC, ProcNumber: *mut PROCESSOR_NUMBER)
    -> NTSTATUS;
    /// `BOOLEAN KeInsertQueueDpc(PRKDPC Dpc, PVOID SystemArgument1, PVOID SystemArgument2)`.
    /// Any IRQL.
    pub fn KeInsertQueueDpc(
        Dpc: *mut KDPC,
        SystemArgument1: *mut c_void,
        SystemArgument2: *mut c_void,
    ) -> u8;
    /// `NTSTATUS KeGetProcessorNumberFromIndex(ULONG ProcIndex, PPROCESSOR_NUMBER ProcNumber)`.
    pub fn KeGetProcessorNumberFromIndex(
        ProcIndex: u32,
        ProcNumber: *mut PROCESSOR_NUMBER,
    ) -> NTSTATUS;
    /// `ULONG KeQueryActiveProcessorCountEx(USHORT GroupNumber)`; ALL_PROCESSOR_GROUPS = 0xFFFF.
    pub fn KeQueryActiveProcessorCountEx(GroupNumber: u16) -> u32;
    /// `void KeInitializeTimer(PKTIMER Timer)`. IRQL <= DISPATCH_LEVEL.
    pub fn KeInitializeTimer(Timer: *mut KTIMER);
    /// `BOOLEAN KeSetTimer(PKTIMER Timer, LARGE_INTEGER DueTime, PKDPC Dpc)`; a negative due
    /// time is relative, in 100 ns units. IRQL <= DISPATCH_LEVEL.
    pub fn KeSetTimer(Timer: *mut KTIMER, DueTime: i64, Dpc: *mut KDPC) -> u8;
    /// `BOOLEAN KeCancelTimer(PKTIMER)`. IRQL <= DISPATCH_LEVEL.
    pub fn KeCancelTimer(Timer: *mut KTIMER) -> u8;
    /// `BOOLEAN KeRemoveQueueDpc(PRKDPC Dpc)`. Any IRQL.
    pub fn KeRemoveQueueDpc(Dpc: *mut KDPC) -> u8;
    /// `void KeFlushQueuedDpcs(void)`. PASSIVE_LEVEL: returns after every queued DPC ran.
    pub fn KeFlushQueuedDpcs();
    /// `ULONG64 KeQueryInterruptTimePrecise(PULONG64 QpcTimeStamp)`: 100 ns units since boot.
    pub fn KeQueryInterruptTimePrecise(QpcTimeStamp: *mut u64) -> u64;
    /// `NTSTATUS KeDelayExecutionThread(KPROCESSOR_MODE WaitMode, BOOLEAN Alertable,
    /// PLARGE_INTEGER Interval)`. PASSIVE_LEVEL (APC_LEVEL); negative = relative, 100 ns.
    pub fn KeDelayExecutionThread(WaitMode: i8, Alertable: u8, Interval: *mut i64) -> NTSTATUS;
    /// `KIRQL KeAcquireSpinLockRaiseToDpc(PKSPIN_LOCK SpinLock)` (exported on x64).
    pub fn KeAcquireSpinLockRaiseToDpc(SpinLock: *mut KSPIN_LOCK) -> u8;
    /// `void KeReleaseSpinLock(PKSPIN_LOCK SpinLock, KIRQL NewIrql)`.
    pub fn KeReleaseSpinLock(SpinLock: *mut KSPIN_LOCK, NewIrql: u8);
    /// `ULONG KeGetCurrentProcessorNumberEx(PPROCESSOR_NUMBER ProcNumber)`: the system-wide
    /// index of the current processor (ProcNumber may be NULL).
    pub fn KeGetCurrentProcessorNumberEx(ProcNumber: *mut PROCESSOR_NUMBER) -> u32;
    /// `NTSTATUS IoGetDeviceProperty(PDEVICE_OBJECT DeviceObject, DEVICE_REGISTRY_PROPERTY
    /// DeviceProperty, ULONG BufferLength, PVOID PropertyBuffer, PULONG ResultLength)`
    /// (wdm.h; DeviceProperty an enum: DevicePropertyBusNumber 14, DevicePropertyAddress
    /// 16). PASSIVE_LEVEL; `DeviceObject` must be a PDO.
    pub fn IoGetDeviceProperty(
        DeviceObject: *mut c_void,
        DeviceProperty: i32,
        BufferLength: u32,
        PropertyBuffer: *mut c_void,
        ResultLength: *mut u32,
    ) -> NTSTATUS;
}

#[link(name = "ntoskrnl.exe", kind = "raw-dylib", modifiers = "+verbatim")]
unsafe extern "C" {
    /// `ULONG DbgPrintEx(ULONG ComponentId, ULONG Level, PCSTR Format, ...)`. Any IRQL
    /// (%s/%d only: no Unicode formats above PASSIVE_LEVEL).
    pub fn DbgPrintEx(ComponentId: u32, Level: u32, Format: *const u8, ...) -> u32;
    // The C runtime routines the sysroot calls (compiler_builtins exports them only under
    // mangled names on this target); ntoskrnl.exe exports each with the C prototype.
    /// `void *memcpy(void *dest, const void *src, size_t count)`.
    pub fn memcpy(dest: *mut c_void, src: *const c_void, count: usize) -> *mut c_void;
    /// `void *memmove(void *dest, const void *src, size_t count)`.
    pub fn memmove(dest: *mut c_void, src: *const c_void, count: usize) -> *mut c_void;
    /// `void *memset(void *dest, int c, size_t count)`.
    pub fn memset(dest: *mut c_void, c: i32, count: usize) -> *mut c_void;
    /// `int memcmp(const void *buffer1, const void *buffer2, size_t count)`.
    pub fn memcmp(a: *const c_void, b: *const c_void, count: usize) -> i32;
    /// `size_t strlen(const char *str)`.
    pub fn strlen(s: *const u8) -> usize;
    /// `__chkstk`: stack probe for frames over a page (x64 ntoskrnl exports it). Not a C
    /// function: called by compiler-generated prologues only; declared to import it.
    pub fn __chkstk();
}

#[link(name = "ndis.sys", kind = "raw-dylib", modifiers = "+verbatim")]
unsafe extern "system" {
    /// `NDIS_STATUS NdisMRegisterMiniportDriver(PDRIVER_OBJECT DriverObject,
    /// PUNICODE_STRING RegistryPath, NDIS_HANDLE MiniportDriverContext,
    /// PNDIS_MINIPORT_DRIVER_CHARACTERISTICS MiniportDriverCharacteristics,
    /// PNDIS_HANDLE NdisMiniportDriverHandle)`. PASSIVE_LEVEL.
    pub fn NdisMRegisterMiniportDriver(
        DriverObject: *mut c_void,
        RegistryPath: *mut c_void,
        MiniportDriverContext: NDIS_HANDLE,
        MiniportDriverCharacteristics: PNDIS_STRUCT,
        NdisMiniportDriverHandle: *mut NDIS_HANDLE,
    ) -> NDIS_STATUS;
    /// `void NdisMDeregisterMiniportDriver(NDIS_HANDLE NdisMiniportDriverHandle)`.
    pub fn NdisMDeregisterMiniportDriver(NdisMiniportDriverHandle: NDIS_HANDLE);
    /// `NDIS_STATUS NdisSetOptionalHandlers(NDIS_HANDLE NdisHandle,
    /// PNDIS_DRIVER_OPTIONAL_HANDLERS OptionalHandlers)`. From MiniportSetOptions only.
    pub fn NdisSetOptionalHandlers(
        NdisHandle: NDIS_HANDLE,
        OptionalHandlers: PNDIS_STRUCT,
    ) -> NDIS_STATUS;
    /// `NDIS_STATUS NdisMSetMiniportAttributes(NDIS_HANDLE NdisMiniportHandle,
    /// PNDIS_MINIPORT_ADAPTER_ATTRIBUTES MiniportAttributes)`. From MiniportInitializeEx.
    pub fn NdisMSetMiniportAttributes(
        NdisMiniportHandle: NDIS_HANDLE,
        MiniportAttributes: PNDIS_STRUCT,
    ) -> NDIS_STATUS;
    /// `NDIS_STATUS NdisMMapIoSpace(PVOID *VirtualAddress, NDIS_HANDLE MiniportAdapterHandle,
    /// NDIS_PHYSICAL_ADDRESS PhysicalAddress, UINT Length)`. PASSIVE_LEVEL.
    pub fn NdisMMapIoSpace(
        VirtualAddress: *mut *mut c_void,
        MiniportAdapterHandle: NDIS_HANDLE,
        PhysicalAddress: i64,
        Length: u32,
    ) -> NDIS_STATUS;
    /// `void NdisMUnmapIoSpace(NDIS_HANDLE MiniportAdapterHandle, PVOID VirtualAddress,
    /// UINT Length)`. PASSIVE_LEVEL.
    pub fn NdisMUnmapIoSpace(
        MiniportAdapterHandle: NDIS_HANDLE,
        VirtualAddress: *mut c_void,
        Length: u32,
    );
    /// `NDIS_STATUS NdisMRegisterScatterGatherDma(NDIS_HANDLE MiniportAdapterHandle,
    /// PNDIS_SG_DMA_DESCRIPTION DmaDescription, PNDIS_HANDLE NdisMiniportDmaHandle)`: NDIS 6
    /// requires it before NdisMAllocateSharedMemory. PASSIVE_LEVEL.
    pub fn NdisMRegisterScatterGatherDma(
        MiniportAdapterHandle: NDIS_HANDLE,
        DmaDescription: PNDIS_STRUCT,
        NdisMiniportDmaHandle: *mut NDIS_HANDLE,
    ) -> NDIS_STATUS;
    /// `void NdisMDeregisterScatterGatherDma(NDIS_HANDLE NdisMiniportDmaHandle)`.
    pub fn NdisMDeregisterScatterGatherDma(NdisMiniportDmaHandle: NDIS_HANDLE);
    /// `void NdisMAllocateSharedMemory(NDIS_HANDLE MiniportAdapterHandle, ULONG Length,
    /// BOOLEAN Cached, PVOID *VirtualAddress, PNDIS_PHYSICAL_ADDRESS PhysicalAddress)`.
    /// PASSIVE_LEVEL.
    pub fn NdisMAllocateSharedMemory(
        MiniportAdapterHandle: NDIS_HANDLE,
        Length: u32,
        Cached: u8,
        VirtualAddress: *mut *mut c_void,
        PhysicalAddress: *mut i64,
    );
    /// `void NdisMFreeSharedMemory(NDIS_HANDLE MiniportAdapterHandle, ULONG Length,
    /// BOOLEAN Cached, PVOID VirtualAddress, NDIS_PHYSICAL_ADDRESS PhysicalAddress)`.
    /// PASSIVE_LEVEL.
    pub fn NdisMFreeSharedMemory(
        MiniportAdapterHandle: NDIS_HANDLE,
        Length: u32,
        Cached: u8,
        VirtualAddress: *mut c_void,
        PhysicalAddress: i64,
    );
}

#[link(name = "ndis.sys", kind = "raw-dylib", modifiers = "+verbatim")]
unsafe extern "system" {
    /// `void NdisMSendNetBufferListsComplete(NDIS_HANDLE MiniportAdapterHandle,
    /// PNET_BUFFER_LIST NetBufferLists, ULONG SendCompleteFlags)`. IRQL <= DISPATCH_LEVEL.
    pub fn NdisMSendNetBufferListsComplete(
        MiniportAdapterHandle: NDIS_HANDLE,
        NetBufferLists: PNDIS_STRUCT,
        SendCompleteFlags: u32,
    );
}

#[link(name = "ndis.sys", kind = "raw-dylib", modifiers = "+verbatim")]
unsafe extern "system" {
    /// `NDIS_STATUS NdisMRegisterInterruptEx(NDIS_HANDLE MiniportAdapterHandle,
    /// NDIS_HANDLE MiniportInterruptContext, PNDIS_MINIPORT_INTERRUPT_CHARACTERISTICS
    /// MiniportInterruptCharacteristics, PNDIS_HANDLE NdisInterruptHandle)`. From
    /// MiniportInitializeEx, PASSIVE_LEVEL.
    pub fn NdisMRegisterInterruptEx(
        MiniportAdapterHandle: NDIS_HANDLE,
        MiniportInterruptContext: NDIS_HANDLE,
        MiniportInterruptCharacteristics: PNDIS_STRUCT,
        NdisInterruptHandle: *mut NDIS_HANDLE,
    ) -> NDIS_STATUS;
    /// `void NdisMDeregisterInterruptEx(NDIS_HANDLE NdisInterruptHandle)`. PASSIVE_LEVEL.
    pub fn NdisMDeregisterInterruptEx(NdisInterruptHandle: NDIS_HANDLE);
}

/// `VOID (*NDIS_IO_WORKITEM_ROUTINE)(PVOID WorkItemContext, NDIS_HANDLE NdisIoWorkItemHandle)`
/// (ndis.h): runs at PASSIVE_LEVEL in a system worker thread.
pub type NDIS_IO_WORKITEM_ROUTINE =
    unsafe extern "system" fn(WorkItemContext: *mut c_void, NdisIoWorkItemHandle: NDIS_HANDLE);

#[link(name = "ndis.sys", kind = "raw-dylib", modifiers = "+verbatim")]
unsafe extern "system" {
    /// `NDIS_HANDLE NdisAllocateIoWorkItem(NDIS_HANDLE NdisObjectHandle)`: NULL on failure.
    /// IRQL <= DISPATCH_LEVEL.
    pub fn NdisAllocateIoWorkItem(NdisObjectHandle: NDIS_HANDLE) -> NDIS_HANDLE;
    /// `VOID NdisQueueIoWorkItem(NDIS_HANDLE NdisIoWorkItemHandle,
    /// NDIS_IO_WORKITEM_ROUTINE Routine, PVOID WorkItemContext)`. IRQL <= DISPATCH_LEVEL.
    pub fn NdisQueueIoWorkItem(
        NdisIoWorkItemHandle: NDIS_HANDLE,
        Routine: NDIS_IO_WORKITEM_ROUTINE,
        WorkItemContext: *mut c_void,
    );
    /// `VOID NdisFreeIoWorkItem(NDIS_HANDLE NdisIoWorkItemHandle)`: never while it is queued.
    /// IRQL <= DISPATCH_LEVEL.
    pub fn NdisFreeIoWorkItem(NdisIoWorkItemHandle: NDIS_HANDLE);
    /// `NDIS_STATUS NdisMNetPnPEvent(NDIS_HANDLE MiniportAdapterHandle,
    /// PNET_PNP_EVENT_NOTIFICATION NetPnPEventNotification)`. PASSIVE_LEVEL; an NDK disable
    /// returns only once every NDK_ADAPTER is closed (ndkpi.md §6.5).
    pub fn NdisMNetPnPEvent(
        MiniportAdapterHandle: NDIS_HANDLE,
        NetPnPEventNotification: PNDIS_STRUCT,
    ) -> NDIS_STATUS;
}

// The adapter's registry keywords, link indications and event-log entries (issue 23).
#[link(name = "ndis.sys", kind = "raw-dylib", modifiers = "+verbatim")]
unsafe extern "system" {
    /// `NDIS_STATUS NdisOpenConfigurationEx(PNDIS_CONFIGURATION_OBJECT ConfigObject,
    /// PNDIS_HANDLE ConfigurationHandle)`: with the MiniportAdapterHandle, the adapter's own
    /// keywords (its driver key, where the INF's `HKR` values live). PASSIVE_LEVEL.
    pub fn NdisOpenConfigurationEx(
        ConfigObject: PNDIS_STRUCT,
        ConfigurationHandle: *mut NDIS_HANDLE,
    ) -> NDIS_STATUS;
    /// `VOID NdisReadConfiguration(PNDIS_STATUS Status, PNDIS_CONFIGURATION_PARAMETER
    /// *ParameterValue, NDIS_HANDLE ConfigurationHandle, PNDIS_STRING Keyword,
    /// NDIS_PARAMETER_TYPE ParameterType)`: the value stays NDIS's until the handle closes.
    /// PASSIVE_LEVEL.
    pub fn NdisReadConfiguration(
        Status: *mut NDIS_STATUS,
        ParameterValue: *mut PNDIS_STRUCT,
        ConfigurationHandle: NDIS_HANDLE,
        Keyword: PNDIS_STRUCT,
        ParameterType: i32,
    );
    /// `VOID NdisCloseConfiguration(NDIS_HANDLE ConfigurationHandle)`. PASSIVE_LEVEL.
    pub fn NdisCloseConfiguration(ConfigurationHandle: NDIS_HANDLE);
    /// `VOID NdisMIndicateStatusEx(NDIS_HANDLE MiniportAdapterHandle,
    /// PNDIS_STATUS_INDICATION StatusIndication)`. IRQL <= DISPATCH_LEVEL.
    pub fn NdisMIndicateStatusEx(
        MiniportAdapterHandle: NDIS_HANDLE,
        StatusIndication: PNDIS_STRUCT,
    );
}

#[link(name = "ndis.sys", kind = "raw-dylib", modifiers = "+verbatim")]
unsafe extern "C" {
    /// `VOID NdisWriteErrorLogEntry(NDIS_HANDLE NdisAdapterHandle, NDIS_ERROR_CODE ErrorCode,
    /// ULONG NumberOfErrorValues, ...)`: the ULONG values follow. Written to the System log
    /// under the service's EventMessageFile (netevent.dll, the INF). IRQL <= DISPATCH_LEVEL.
    pub fn NdisWriteErrorLogEntry(
        NdisAdapterHandle: NDIS_HANDLE,
        ErrorCode: u32,
        NumberOfErrorValues: u32,
        ...
    );
}

// The IP helper routines (netioapi.h, Learn under .../ddi/netioapi/). Each: PASSIVE_LEVEL.
#[link(name = "netio.sys", kind = "raw-dylib", modifiers = "+verbatim")]
unsafe extern "system" {
    /// `NETIOAPI_API GetIpNetEntry2(PMIB_IPNET_ROW2 Row)`: the neighbour entry keyed by
    /// `Address` and `InterfaceLuid` (or `InterfaceIndex`); STATUS_NOT_FOUND without one.
    pub fn GetIpNetEntry2(Row: *mut MIB_IPNET_ROW2) -> NTSTATUS;
    /// `NETIOAPI_API ResolveIpNetEntry2(PMIB_IPNET_ROW2 Row, const SOCKADDR_INET
    /// *SourceAddress)`: solicits the neighbour and blocks until it answers or the stack
    /// gives up; fills the row.
    pub fn ResolveIpNetEntry2(
        Row: *mut MIB_IPNET_ROW2,
        SourceAddress: *const SOCKADDR_INET,
    ) -> NTSTATUS;
    /// `NETIOAPI_API GetUnicastIpAddressTable(ADDRESS_FAMILY Family,
    /// PMIB_UNICASTIPADDRESS_TABLE *Table)`: every interface's addresses, freed with
    /// FreeMibTable.
    pub fn GetUnicastIpAddressTable(
        Family: u16,
        Table: *mut *mut MIB_UNICASTIPADDRESS_TABLE,
    ) -> NTSTATUS;
    /// `VOID FreeMibTable(PVOID Memory)`.
    pub fn FreeMibTable(Memory: *mut c_void);
    /// `NETIOAPI_API NotifyUnicastIpAddressChange(ADDRESS_FAMILY Family,
    /// PUNICAST_IPADDRESS_CHANGE_CALLBACK Callback, PVOID CallerContext,
    /// BOOLEAN InitialNotification, HANDLE *NotificationHandle)`.
    pub fn NotifyUnicastIpAddressChange(
        Family: u16,
        Callback: PUNICAST_IPADDRESS_CHANGE_CALLBACK,
        CallerContext: *mut c_void,
        InitialNotification: u8,
        NotificationHandle: *mut *mut c_void,
    ) -> NTSTATUS;
    /// `NETIOAPI_API CancelMibChangeNotify2(HANDLE NotificationHandle)`: returns once no
    /// callback of the registration runs; never from the callback.
    pub fn CancelMibChangeNotify2(NotificationHandle: *mut c_void) -> NTSTATUS;
}

// The vmxnet3 Ethernet adapter (`ndis::ethernet::entry`): its function's identity, the
// receive NBLs, the data path's indications and the pause / reset completions.
#[link(name = "ndis.sys", kind = "raw-dylib", modifiers = "+verbatim")]
unsafe extern "system" {
    /// `ULONG NdisMGetBusData(NDIS_HANDLE NdisMiniportHandle, ULONG WhichSpace, ULONG Offset,
    /// PVOID Buffer, ULONG Length)`: bytes read from the function's PCI configuration space
    /// (`PCI_WHICHSPACE_CONFIG` 0). IRQL <= DISPATCH_LEVEL.
    pub fn NdisMGetBusData(
        NdisMiniportHandle: NDIS_HANDLE,
        WhichSpace: u32,
        Offset: u32,
        Buffer: *mut c_void,
        Length: u32,
    ) -> u32;
    /// `VOID NdisMGetDeviceProperty(NDIS_HANDLE MiniportAdapterHandle, PDEVICE_OBJECT
    /// *PhysicalDeviceObject, PDEVICE_OBJECT *FunctionalDeviceObject, PDEVICE_OBJECT
    /// *NextDeviceObject, PCM_RESOURCE_LIST *AllocatedResources, PCM_RESOURCE_LIST
    /// *AllocatedResourcesTranslated)`: each non-NULL out-parameter gets its object.
    /// PASSIVE_LEVEL.
    pub fn NdisMGetDeviceProperty(
        MiniportAdapterHandle: NDIS_HANDLE,
        PhysicalDeviceObject: *mut *mut c_void,
        FunctionalDeviceObject: *mut *mut c_void,
        NextDeviceObject: *mut *mut c_void,
        AllocatedResources: *mut *mut c_void,
        AllocatedResourcesTranslated: *mut *mut c_void,
    );
    /// `NDIS_HANDLE NdisAllocateNetBufferListPool(NDIS_HANDLE NdisHandle,
    /// PNET_BUFFER_LIST_POOL_PARAMETERS Parameters)`. IRQL <= DISPATCH_LEVEL.
    pub fn NdisAllocateNetBufferListPool(
        NdisHandle: NDIS_HANDLE,
        Parameters: PNDIS_STRUCT,
    ) -> NDIS_HANDLE;
    /// `void NdisFreeNetBufferListPool(NDIS_HANDLE PoolHandle)`. IRQL <= DISPATCH_LEVEL.
    pub fn NdisFreeNetBufferListPool(PoolHandle: NDIS_HANDLE);
    /// `PNET_BUFFER_LIST NdisAllocateNetBufferAndNetBufferList(NDIS_HANDLE PoolHandle,
    /// USHORT ContextSize, USHORT ContextBackFill, PMDL MdlChain, ULONG DataOffset,
    /// SIZE_T DataLength)`. IRQL <= DISPATCH_LEVEL.
    pub fn NdisAllocateNetBufferAndNetBufferList(
        PoolHandle: NDIS_HANDLE,
        ContextSize: u16,
        ContextBackFill: u16,
        MdlChain: PNDIS_STRUCT,
        DataOffset: u32,
        DataLength: usize,
    ) -> PNDIS_STRUCT;
    /// `void NdisFreeNetBufferList(PNET_BUFFER_LIST NetBufferList)`. IRQL <= DISPATCH_LEVEL.
    pub fn NdisFreeNetBufferList(NetBufferList: PNDIS_STRUCT);
    /// `PMDL NdisAllocateMdl(NDIS_HANDLE NdisHandle, PVOID VirtualAddress, UINT Length)`:
    /// an MDL over non-paged memory, its PFN array filled. IRQL <= DISPATCH_LEVEL.
    pub fn NdisAllocateMdl(
        NdisHandle: NDIS_HANDLE,
        VirtualAddress: *mut c_void,
        Length: u32,
    ) -> PNDIS_STRUCT;
    /// `void NdisFreeMdl(PMDL Mdl)`. IRQL <= DISPATCH_LEVEL.
    pub fn NdisFreeMdl(Mdl: PNDIS_STRUCT);
    /// `void NdisMIndicateReceiveNetBufferLists(NDIS_HANDLE MiniportAdapterHandle,
    /// PNET_BUFFER_LIST NetBufferLists, NDIS_PORT_NUMBER PortNumber,
    /// ULONG NumberOfNetBufferLists, ULONG ReceiveFlags)`. IRQL <= DISPATCH_LEVEL.
    pub fn NdisMIndicateReceiveNetBufferLists(
        MiniportAdapterHandle: NDIS_HANDLE,
        NetBufferLists: PNDIS_STRUCT,
        PortNumber: u32,
        NumberOfNetBufferLists: u32,
        ReceiveFlags: u32,
    );
    /// `void NdisMPauseComplete(NDIS_HANDLE MiniportAdapterHandle)`: a MiniportPause that
    /// returned NDIS_STATUS_PENDING is done. IRQL <= DISPATCH_LEVEL.
    pub fn NdisMPauseComplete(MiniportAdapterHandle: NDIS_HANDLE);
    /// `void NdisMResetComplete(NDIS_HANDLE MiniportAdapterHandle, NDIS_STATUS Status,
    /// BOOLEAN AddressingReset)`: a MiniportResetEx that returned NDIS_STATUS_PENDING is
    /// done. IRQL <= DISPATCH_LEVEL.
    pub fn NdisMResetComplete(
        MiniportAdapterHandle: NDIS_HANDLE,
        Status: NDIS_STATUS,
        AddressingReset: u8,
    );
    /// `void NdisMResetMiniport(NDIS_HANDLE MiniportAdapterHandle)`: NDIS calls
    /// MiniportResetEx later, from a work item (NDIS 6.30). IRQL <= DISPATCH_LEVEL.
    pub fn NdisMResetMiniport(MiniportAdapterHandle: NDIS_HANDLE);
}
