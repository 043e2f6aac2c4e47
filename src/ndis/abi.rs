//! NDIS-side NDK ABI (ndkpi.md §6.2–6.6, §6.9): provider characteristics, open/close
//! handlers, adapter attributes and capabilities, the NDK OIDs and their buffers, the NDK
//! PnP events, and the WSK NDK dispatch table. Layout only; asserted in `layout.rs`.
#![deny(unsafe_code)]

use core::mem::{offset_of, size_of};

use crate::ndkpi::{BOOLEAN, GUID, NDK_ADAPTER, NDK_ADAPTER_INFO, NDK_VERSION, SOCKADDR_INET};
pub use crate::ndkpi::{
    NDIS_STATUS, NDIS_STATUS_ADAPTER_NOT_READY, NDIS_STATUS_BAD_VERSION,
    NDIS_STATUS_BUFFER_TOO_SHORT, NDIS_STATUS_FAILURE, NDIS_STATUS_INVALID_DATA,
    NDIS_STATUS_INVALID_DEVICE_REQUEST, NDIS_STATUS_INVALID_LENGTH, NDIS_STATUS_INVALID_OID,
    NDIS_STATUS_INVALID_PARAMETER, NDIS_STATUS_NOT_SUPPORTED, NDIS_STATUS_PENDING,
    NDIS_STATUS_RESOURCES, NDIS_STATUS_SUCCESS, NTSTATUS,
};

/// `NDIS_HANDLE`.
pub type NDIS_HANDLE = *mut core::ffi::c_void;
/// `NDIS_OID`.
pub type NDIS_OID = u32;
/// `NDIS_PORT_NUMBER`.
pub type NDIS_PORT_NUMBER = u32;
/// `NDIS_NIC_SWITCH_ID`.
pub type NDIS_NIC_SWITCH_ID = u32;
/// `NDIS_NIC_SWITCH_VPORT_ID`.
pub type NDIS_NIC_SWITCH_VPORT_ID = u32;
/// `NET_IFINDEX`.
pub type NET_IFINDEX = u32;
/// `PWSK_CLIENT` (opaque).
pub type PWSK_CLIENT = *mut core::ffi::c_void;

/// `NDIS_OBJECT_HEADER`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NDIS_OBJECT_HEADER {
    pub Type: u8,
    pub Revision: u8,
    pub Size: u16,
}

/// `RTL_SIZEOF_THROUGH_FIELD` as the `USHORT` of `NDIS_OBJECT_HEADER.Size`
/// (`offset + size_of_field`, saturated; every use here is far below 0xFFFF).
const fn through(offset: usize, field_size: usize) -> u16 {
    let end = offset.saturating_add(field_size);
    if end > u16::MAX as usize {
        u16::MAX
    } else {
        end as u16
    }
}

pub const NDIS_OBJECT_TYPE_DEFAULT: u8 = 0x80;
pub const NDIS_OBJECT_TYPE_NDK_PROVIDER_CHARACTERISTICS: u8 = 0xB2;
pub const NDIS_OBJECT_TYPE_MINIPORT_ADAPTER_NDK_ATTRIBUTES: u8 = 0xB3;

// ---- §6.2 / §6.3: provider characteristics and the open/close handlers ----

/// `NDIS_STATUS OPEN_NDK_ADAPTER_HANDLER(NDIS_HANDLE MiniportAdapterContext,
/// PNDIS_OPEN_NDK_ADAPTER_PARAMETERS Parameters, NDK_ADAPTER** ppNdkAdapter)`. PASSIVE_LEVEL.
pub type OPEN_NDK_ADAPTER_HANDLER = unsafe extern "system" fn(
    MiniportAdapterContext: NDIS_HANDLE,
    Parameters: *mut NDIS_OPEN_NDK_ADAPTER_PARAMETERS,
    ppNdkAdapter: *mut *mut NDK_ADAPTER,
) -> NDIS_STATUS;
/// `VOID CLOSE_NDK_ADAPTER_HANDLER(NDIS_HANDLE MiniportAdapterContext, NDK_ADAPTER*)`.
/// PASSIVE_LEVEL, blocking until every descendant callback has returned.
pub type CLOSE_NDK_ADAPTER_HANDLER =
    unsafe extern "system" fn(MiniportAdapterContext: NDIS_HANDLE, pNdkAdapter: *mut NDK_ADAPTER);

/// `NDIS_NDK_PROVIDER_CHARACTERISTICS` (ndisndk.h), passed to NdisSetOptionalHandlers.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NDIS_NDK_PROVIDER_CHARACTERISTICS {
    pub Header: NDIS_OBJECT_HEADER,
    /// Reserved, 0.
    pub Flags: u32,
    pub OpenNDKAdapterHandler: OPEN_NDK_ADAPTER_HANDLER,
    pub CloseNDKAdapterHandler: CLOSE_NDK_ADAPTER_HANDLER,
}
pub const NDIS_NDK_PROVIDER_CHARACTERISTICS_REVISION_1: u8 = 1;
pub const NDIS_SIZEOF_NDK_PROVIDER_CHARACTERISTICS_REVISION_1: u16 = through(
    offset_of!(NDIS_NDK_PROVIDER_CHARACTERISTICS, CloseNDKAdapterHandler),
    size_of::<CLOSE_NDK_ADAPTER_HANDLER>(),
);

/// `NDIS_OPEN_NDK_ADAPTER_PARAMETERS` (ndisndk.h, NDIS 6.50 layout; 4 bytes before 6.50).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NDIS_OPEN_NDK_ADAPTER_PARAMETERS {
    /// Requested major and the lowest acceptable minor (§1.7).
    pub Version: NDK_VERSION,
    pub SwitchId: NDIS_NIC_SWITCH_ID,
    pub VPortId: NDIS_NIC_SWITCH_VPORT_ID,
}
pub const NDIS_DEFAULT_SWITCH_ID: NDIS_NIC_SWITCH_ID = 0;
pub const NDIS_DEFAULT_VPORT_ID: NDIS_NIC_SWITCH_VPORT_ID = 0;

// ---- §6.4: adapter attributes and capabilities ----

/// `NDIS_MINIPORT_ADAPTER_NDK_ATTRIBUTES` (ndis.h), set at MiniportInitializeEx.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NDIS_MINIPORT_ADAPTER_NDK_ATTRIBUTES {
    pub Header: NDIS_OBJECT_HEADER,
    pub Enabled: BOOLEAN,
    pub NdkCapabilities: *mut NDIS_NDK_CAPABILITIES,
}
pub const NDIS_MINIPORT_ADAPTER_NDK_ATTRIBUTES_REVISION_1: u8 = 1;
/// Presumed `RTL_SIZEOF_THROUGH_FIELD(.., NdkCapabilities)` (Appendix C #9).
pub const NDIS_SIZEOF_MINIPORT_ADAPTER_NDK_ATTRIBUTES_REVISION_1: u16 = through(
    offset_of!(NDIS_MINIPORT_ADAPTER_NDK_ATTRIBUTES, NdkCapabilities),
    size_of::<*mut NDIS_NDK_CAPABILITIES>(),
);

/// `NDIS_NDK_CAPABILITIES` (ntddndis.h): adapter-wide limits plus per-consumer `NdkInfo`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NDIS_NDK_CAPABILITIES {
    pub Header: NDIS_OBJECT_HEADER,
    /// Reserved, 0.
    pub Flags: u32,
    pub MaxQpCount: u32,
    pub MaxCqCount: u32,
    pub MaxMrCount: u32,
    pub MaxPdCount: u32,
    /// 0 = no adapter-wide limit.
    pub MaxInboundReadLimit: u32,
    /// 0 = no adapter-wide limit.
    pub MaxOutboundReadLimit: u32,
    pub MaxMwCount: u32,
    /// 0 = SRQs not supported.
    pub MaxSrqCount: u32,
    /// Bit i = counter i of NDIS_NDK_PERFORMANCE_COUNTERS unsupported.
    pub MissingCounterMask: u64,
    pub NdkInfo: *mut NDK_ADAPTER_INFO,
}
pub const NDIS_NDK_CAPABILITIES_REVISION_1: u8 = 1;
pub const NDIS_SIZEOF_NDK_CAPABILITIES_REVISION_1: u16 = through(
    offset_of!(NDIS_NDK_CAPABILITIES, NdkInfo),
    size_of::<*mut NDK_ADAPTER_INFO>(),
);

// ---- §6.6: OIDs and their buffers ----

pub const OID_NDK_SET_STATE: NDIS_OID = 0xFC04_0201;
pub const OID_NDK_STATISTICS: NDIS_OID = 0xFC04_0202;
pub const OID_NDK_CONNECTIONS: NDIS_OID = 0xFC04_0203;
pub const OID_NDK_LOCAL_ENDPOINTS: NDIS_OID = 0xFC04_0204;

/// `NDIS_NDK_PERFORMANCE_COUNTERS` (ntddndis.h): field order fixed by the PCW manifest.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NDIS_NDK_PERFORMANCE_COUNTERS {
    pub Connect: u64,
    pub Accept: u64,
    pub ConnectFailure: u64,
    pub ConnectionError: u64,
    pub ActiveConnection: u64,
    pub Reserved01: u64,
    pub Reserved02: u64,
    pub Reserved03: u64,
    pub Reserved04: u64,
    pub Reserved05: u64,
    pub Reserved06: u64,
    pub Reserved07: u64,
    pub Reserved08: u64,
    pub Reserved09: u64,
    pub Reserved10: u64,
    pub Reserved11: u64,
    pub Reserved12: u64,
    pub Reserved13: u64,
    pub Reserved14: u64,
    pub Reserved15: u64,
    pub Reserved16: u64,
    pub Reserved17: u64,
    pub Reserved18: u64,
    pub Reserved19: u64,
    pub Reserved20: u64,
    pub CQError: u64,
    pub RDMAInOctets: u64,
    pub RDMAOutOctets: u64,
    pub RDMAInFrames: u64,
    pub RDMAOutFrames: u64,
}

/// `NDIS_NDK_PERFORMANCE_COUNTER_MASK(Field)` by field index, where the index of a field is
/// `offset_of!(NDIS_NDK_PERFORMANCE_COUNTERS, Field) / 8` (the C macro's
/// `FIELD_OFFSET / sizeof(ULONG64)`). Indexes ≥ 64 name no counter and give 0.
pub const fn NDIS_NDK_PERFORMANCE_COUNTER_MASK(field_index: u32) -> u64 {
    match 1u64.checked_shl(field_index) {
        Some(bit) => bit,
        None => 0,
    }
}

/// `NDIS_NDK_STATISTICS_INFO` (ntddndis.h), the OID_NDK_STATISTICS buffer.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NDIS_NDK_STATISTICS_INFO {
    pub Header: NDIS_OBJECT_HEADER,
    /// Reserved, 0.
    pub Flags: u32,
    pub CounterSet: NDIS_NDK_PERFORMANCE_COUNTERS,
}
pub const NDIS_NDK_STATISTICS_INFO_REVISION_1: u8 = 1;
pub const NDIS_SIZEOF_NDK_STATISTICS_INFO_REVISION_1: u16 = through(
    offset_of!(NDIS_NDK_STATISTICS_INFO, CounterSet),
    size_of::<NDIS_NDK_PERFORMANCE_COUNTERS>(),
);

/// `NDIS_NDK_CONNECTION_ENTRY` (ntddndis.h).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct NDIS_NDK_CONNECTION_ENTRY {
    pub Local: SOCKADDR_INET,
    pub Remote: SOCKADDR_INET,
    /// TRUE = NDSPI (user mode), FALSE = NDKPI.
    pub UserModeOwner: BOOLEAN,
    pub OwnerPid: u32,
}

/// `NDIS_NDK_CONNECTIONS` (ntddndis.h): `Count` entries follow the header; declared with one
/// as in C. Size a buffer with [`NDIS_SIZEOF_NDK_CONNECTIONS_REVISION_1`].
#[repr(C)]
#[derive(Clone, Copy)]
pub struct NDIS_NDK_CONNECTIONS {
    pub Header: NDIS_OBJECT_HEADER,
    /// Reserved, 0.
    pub Flags: u32,
    pub Count: u32,
    pub NDConnectionsMappedtoTCPConnections: BOOLEAN,
    pub Connections: [NDIS_NDK_CONNECTION_ENTRY; 1],
}
pub const NDIS_NDK_CONNECTIONS_REVISION_1: u8 = 1;

/// `NDIS_SIZEOF_NDK_CONNECTIONS_REVISION_1(n)` = `FIELD_OFFSET(NDIS_NDK_CONNECTIONS,
/// Connections[n])`, saturating instead of wrapping. `Header.Size` is this value clamped
/// to 0xFFFF ([`ndis_header_size`]).
pub const fn NDIS_SIZEOF_NDK_CONNECTIONS_REVISION_1(n: u32) -> usize {
    (n as usize)
        .saturating_mul(size_of::<NDIS_NDK_CONNECTION_ENTRY>())
        .saturating_add(offset_of!(NDIS_NDK_CONNECTIONS, Connections))
}

/// `NDIS_NDK_LOCAL_ENDPOINT_ENTRY` (ntddndis.h).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct NDIS_NDK_LOCAL_ENDPOINT_ENTRY {
    pub Local: SOCKADDR_INET,
    pub UserModeOwner: BOOLEAN,
    /// TRUE = listener, FALSE = shared endpoint.
    pub Listener: BOOLEAN,
    pub OwnerPid: u32,
}

/// `NDIS_NDK_LOCAL_ENDPOINTS` (ntddndis.h): `Count` entries, declared with one as in C.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct NDIS_NDK_LOCAL_ENDPOINTS {
    pub Header: NDIS_OBJECT_HEADER,
    /// Reserved, 0.
    pub Flags: u32,
    pub Count: u32,
    pub NDLocalEndpointsMappedtoTCPLocalEndpoints: BOOLEAN,
    pub LocalEndpoints: [NDIS_NDK_LOCAL_ENDPOINT_ENTRY; 1],
}
pub const NDIS_NDK_LOCAL_ENDPOINTS_REVISION_1: u8 = 1;

/// `NDIS_SIZEOF_NDK_LOCAL_ENDPOINTS_REVISION_1(n)` = `FIELD_OFFSET(NDIS_NDK_LOCAL_ENDPOINTS,
/// LocalEndpoints[n])`, saturating.
pub const fn NDIS_SIZEOF_NDK_LOCAL_ENDPOINTS_REVISION_1(n: u32) -> usize {
    (n as usize)
        .saturating_mul(size_of::<NDIS_NDK_LOCAL_ENDPOINT_ENTRY>())
        .saturating_add(offset_of!(NDIS_NDK_LOCAL_ENDPOINTS, LocalEndpoints))
}

/// `(USHORT)min(MAXUSHORT, bytes)`: the `Header.Size` of a variable-length NDIS object.
pub const fn ndis_header_size(bytes: usize) -> u16 {
    through(bytes, 0)
}

// ---- §6.5: PnP events ----

/// `NET_PNP_EVENT_CODE` (ndis.h enum). Only the values the reference establishes are named.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct NET_PNP_EVENT_CODE(pub i32);

impl NET_PNP_EVENT_CODE {
    pub const NetEventIMReEnableDevice: Self = Self(12);
    pub const NetEventNDKEnable: Self = Self(13);
    pub const NetEventNDKDisable: Self = Self(14);
    pub const NetEventFilterPreDetach: Self = Self(15);
}
pub const NetEventIMReEnableDevice: NET_PNP_EVENT_CODE =
    NET_PNP_EVENT_CODE::NetEventIMReEnableDevice;
pub const NetEventNDKEnable: NET_PNP_EVENT_CODE = NET_PNP_EVENT_CODE::NetEventNDKEnable;
pub const NetEventNDKDisable: NET_PNP_EVENT_CODE = NET_PNP_EVENT_CODE::NetEventNDKDisable;
pub const NetEventFilterPreDetach: NET_PNP_EVENT_CODE = NET_PNP_EVENT_CODE::NetEventFilterPreDetach;

/// `NET_PNP_EVENT` (ndis.h).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NET_PNP_EVENT {
    pub NetEvent: NET_PNP_EVENT_CODE,
    pub Buffer: *mut core::ffi::c_void,
    pub BufferLength: u32,
    pub NdisReserved: [usize; 4],
    pub TransportReserved: [usize; 4],
    pub TdiReserved: [usize; 4],
    pub TdiClientReserved: [usize; 4],
}

/// `NET_PNP_EVENT_NOTIFICATION` (ndis.h), NDIS 6.50 layout (REVISION_2 adds the switch and
/// vPort ids; a REVISION_1 header size stops after `Flags`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NET_PNP_EVENT_NOTIFICATION {
    pub Header: NDIS_OBJECT_HEADER,
    pub PortNumber: NDIS_PORT_NUMBER,
    pub NetPnPEvent: NET_PNP_EVENT,
    pub Flags: u32,
    pub SwitchId: NDIS_NIC_SWITCH_ID,
    pub VPortId: NDIS_NIC_SWITCH_VPORT_ID,
}
pub const NET_PNP_EVENT_NOTIFICATION_REVISION_1: u8 = 1;
pub const NET_PNP_EVENT_NOTIFICATION_REVISION_2: u8 = 2;
pub const NDIS_SIZEOF_NET_PNP_EVENT_NOTIFICATION_REVISION_1: u16 = through(
    offset_of!(NET_PNP_EVENT_NOTIFICATION, Flags),
    size_of::<u32>(),
);
pub const NDIS_SIZEOF_NET_PNP_EVENT_NOTIFICATION_REVISION_2: u16 = through(
    offset_of!(NET_PNP_EVENT_NOTIFICATION, VPortId),
    size_of::<NDIS_NIC_SWITCH_VPORT_ID>(),
);
/// Required in `Flags` when `VPortId` is not the default vPort.
pub const NET_EVENT_FLAGS_VPORT_ID_VALID: u32 = 0x0000_0002;

// ---- §6.5 / §6.7: registry keywords, §6.4 WMI GUIDs ----

/// `NETWORK_DIRECT_KEYWORD` (an NDIS_STRING_CONST in C; convert to UTF-16 at the call).
pub const NETWORK_DIRECT_KEYWORD: &str = "*NetworkDirect";
/// `NETWORK_DIRECT_GLOBAL_FLAGS_KEYWORD`.
pub const NETWORK_DIRECT_GLOBAL_FLAGS_KEYWORD: &str = "*NetworkDirectGlobalFlags";
pub const NETWORK_DIRECT_GLOBAL_FLAGS_ALLOW_REMOTE_IP_SUBNET: u32 = 0x0000_0001;

/// `GUID_NDIS_NDK_CAPABILITIES` {7969ba4d-dd80-4bc7-b3e6-68043997e519}.
pub const GUID_NDIS_NDK_CAPABILITIES: GUID = GUID {
    Data1: 0x7969_ba4d,
    Data2: 0xdd80,
    Data3: 0x4bc7,
    Data4: [0xb3, 0xe6, 0x68, 0x04, 0x39, 0x97, 0xe5, 0x19],
};
/// `GUID_NDIS_NDK_STATE` {530c69c9-2f51-49de-a1af-088d54ffa474}.
pub const GUID_NDIS_NDK_STATE: GUID = GUID {
    Data1: 0x530c_69c9,
    Data2: 0x2f51,
    Data3: 0x49de,
    Data4: [0xa1, 0xaf, 0x08, 0x8d, 0x54, 0xff, 0xa4, 0x74],
};

// ---- §6.9: WSK NDK extension (consumer side, for test drivers) ----

/// `NTSTATUS PFN_WSK_NDK_OPEN_ADAPTER(PWSK_CLIENT, NDK_VERSION, NET_IFINDEX, NDK_ADAPTER**)`.
pub type PFN_WSK_NDK_OPEN_ADAPTER = unsafe extern "system" fn(
    Client: PWSK_CLIENT,
    NdkVersion: NDK_VERSION,
    IfIndex: NET_IFINDEX,
    ppNdkAdapter: *mut *mut NDK_ADAPTER,
) -> NTSTATUS;
/// `VOID PFN_WSK_NDK_CLOSE_ADAPTER(PWSK_CLIENT, NDK_ADAPTER*)`.
pub type PFN_WSK_NDK_CLOSE_ADAPTER =
    unsafe extern "system" fn(Client: PWSK_CLIENT, pNdkAdapter: *mut NDK_ADAPTER);

/// `WSK_PROVIDER_NDK_DISPATCH` (wskndk.h), returned by WskControlClient.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct WSK_PROVIDER_NDK_DISPATCH {
    pub WskOpenNdkAdapter: PFN_WSK_NDK_OPEN_ADAPTER,
    pub WskCloseNdkAdapter: PFN_WSK_NDK_CLOSE_ADAPTER,
}

/// `WSKNDK_GET_WSK_PROVIDER_NDK_DISPATCH` = `(ULONG)'NDKD'` (MSVC multi-char packing).
pub const WSKNDK_GET_WSK_PROVIDER_NDK_DISPATCH: u32 = u32::from_be_bytes(*b"NDKD");

// ==== syslink (issue 12): the miniport-driver ABI the FFI layer (`ndis::entry`) fills and
// reads. Layouts per the ndis.h prototypes on Learn (`ns-ndis-_ndis_miniport_driver_
// characteristics`, `ns-ndis-_ndis_miniport_init_parameters`, `ns-ndis-_ndis_sg_dma_
// description`, `ns-oidrequest-ndis_oid_request`, `ns-ndis-_ndis_miniport_adapter_
// registration_attributes`, `ns-ndis-_ndis_miniport_adapter_general_attributes`,
// `ns-wdm-_cm_partial_resource_descriptor`); object types cross-checked with win32metadata.

pub const NDIS_OBJECT_TYPE_MINIPORT_INIT_PARAMETERS: u8 = 0x81;
pub const NDIS_OBJECT_TYPE_SG_DMA_DESCRIPTION: u8 = 0x83;
pub const NDIS_OBJECT_TYPE_MINIPORT_DRIVER_CHARACTERISTICS: u8 = 0x8A;
pub const NDIS_OBJECT_TYPE_OID_REQUEST: u8 = 0x96;
pub const NDIS_OBJECT_TYPE_MINIPORT_ADAPTER_REGISTRATION_ATTRIBUTES: u8 = 0x9E;
pub const NDIS_OBJECT_TYPE_MINIPORT_ADAPTER_GENERAL_ATTRIBUTES: u8 = 0x9F;

/// `NDIS_MINIPORT_DRIVER_CHARACTERISTICS.MajorNdisVersion` / `MinorNdisVersion`: NDIS 6.85,
/// Windows Server 2022's version and the one its certification checks expect (smb-direct.md
/// §1.1, Test-NetHLK); Server 2025 (6.89) loads it unchanged. NDK needs 6.30; the NDKPI 2.x
/// fields (RdmaTechnology, SwitchId/VPortId, NET_PNP_EVENT_NOTIFICATION revision 2) need
/// 6.50. Learn, "Introduction to NDIS 6.85": characteristics REVISION_3, and the 6.85
/// revision of every structure (here NDIS_SG_DMA_DESCRIPTION REVISION_2).
pub const NDIS_MINIPORT_MAJOR_VERSION: u8 = 6;
pub const NDIS_MINIPORT_MINOR_VERSION: u8 = 85;

/// An untyped NDIS handler slot (`NULL` = not provided).
pub type NDIS_HANDLER = Option<unsafe extern "system" fn()>;

/// `MINIPORT_SET_OPTIONS(NDIS_HANDLE NdisDriverHandle, NDIS_HANDLE DriverContext)`.
pub type SET_OPTIONS_HANDLER = unsafe extern "system" fn(
    NdisDriverHandle: NDIS_HANDLE,
    DriverContext: NDIS_HANDLE,
) -> NDIS_STATUS;
/// `MINIPORT_INITIALIZE(NDIS_HANDLE MiniportAdapterHandle, NDIS_HANDLE MiniportDriverContext,
/// PNDIS_MINIPORT_INIT_PARAMETERS MiniportInitParameters)`.
pub type MINIPORT_INITIALIZE_HANDLER = unsafe extern "system" fn(
    MiniportAdapterHandle: NDIS_HANDLE,
    MiniportDriverContext: NDIS_HANDLE,
    MiniportInitParameters: *mut NDIS_MINIPORT_INIT_PARAMETERS,
) -> NDIS_STATUS;
/// `MINIPORT_HALT(NDIS_HANDLE MiniportAdapterContext, NDIS_HALT_ACTION HaltAction)`.
pub type MINIPORT_HALT_HANDLER =
    unsafe extern "system" fn(MiniportAdapterContext: NDIS_HANDLE, HaltAction: i32);
/// `MINIPORT_UNLOAD(PDRIVER_OBJECT DriverObject)`.
pub type MINIPORT_DRIVER_UNLOAD = unsafe extern "system" fn(DriverObject: *mut core::ffi::c_void);
/// `MINIPORT_PAUSE(NDIS_HANDLE, PNDIS_MINIPORT_PAUSE_PARAMETERS)`.
pub type MINIPORT_PAUSE_HANDLER = unsafe extern "system" fn(
    MiniportAdapterContext: NDIS_HANDLE,
    PauseParameters: *mut core::ffi::c_void,
) -> NDIS_STATUS;
/// `MINIPORT_RESTART(NDIS_HANDLE, PNDIS_MINIPORT_RESTART_PARAMETERS)`.
pub type MINIPORT_RESTART_HANDLER = unsafe extern "system" fn(
    MiniportAdapterContext: NDIS_HANDLE,
    RestartParameters: *mut core::ffi::c_void,
) -> NDIS_STATUS;
/// `MINIPORT_OID_REQUEST(NDIS_HANDLE, PNDIS_OID_REQUEST)` (also the direct OID handler).
pub type MINIPORT_OID_REQUEST_HANDLER = unsafe extern "system" fn(
    MiniportAdapterContext: NDIS_HANDLE,
    OidRequest: *mut NDIS_OID_REQUEST,
) -> NDIS_STATUS;
/// `MINIPORT_SEND_NET_BUFFER_LISTS(NDIS_HANDLE, PNET_BUFFER_LIST, NDIS_PORT_NUMBER,
/// ULONG SendFlags)`.
pub type MINIPORT_SEND_NET_BUFFER_LISTS_HANDLER = unsafe extern "system" fn(
    MiniportAdapterContext: NDIS_HANDLE,
    NetBufferList: *mut NET_BUFFER_LIST,
    PortNumber: NDIS_PORT_NUMBER,
    SendFlags: u32,
);
/// `MINIPORT_RETURN_NET_BUFFER_LISTS(NDIS_HANDLE, PNET_BUFFER_LIST, ULONG ReturnFlags)`.
pub type MINIPORT_RETURN_NET_BUFFER_LISTS_HANDLER = unsafe extern "system" fn(
    MiniportAdapterContext: NDIS_HANDLE,
    NetBufferLists: *mut NET_BUFFER_LIST,
    ReturnFlags: u32,
);
/// `MINIPORT_CANCEL_SEND(NDIS_HANDLE, PVOID CancelId)`; also `MINIPORT_CANCEL_OID_REQUEST`
/// and `MINIPORT_CANCEL_DIRECT_OID_REQUEST(NDIS_HANDLE, PVOID RequestId)`.
pub type MINIPORT_CANCEL_HANDLER =
    unsafe extern "system" fn(MiniportAdapterContext: NDIS_HANDLE, Id: *mut core::ffi::c_void);
/// `MINIPORT_DEVICE_PNP_EVENT_NOTIFY(NDIS_HANDLE, PNET_DEVICE_PNP_EVENT)`.
pub type MINIPORT_DEVICE_PNP_EVENT_NOTIFY_HANDLER = unsafe extern "system" fn(
    MiniportAdapterContext: NDIS_HANDLE,
    NetDevicePnPEvent: *mut NET_DEVICE_PNP_EVENT,
);
/// `MINIPORT_SHUTDOWN(NDIS_HANDLE, NDIS_SHUTDOWN_ACTION ShutdownAction)`.
pub type MINIPORT_SHUTDOWN_HANDLER =
    unsafe extern "system" fn(MiniportAdapterContext: NDIS_HANDLE, ShutdownAction: i32);

/// `NDIS_MINIPORT_DRIVER_CHARACTERISTICS`, REVISION_3 (NDIS 6.80+, required of a 6.85
/// driver): REVISION_2's direct-OID handlers (required for miniports that implement RDMA)
/// and the synchronous OID handler, which is optional (RSSv2 only) and left NULL here.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NDIS_MINIPORT_DRIVER_CHARACTERISTICS {
    pub Header: NDIS_OBJECT_HEADER,
    pub MajorNdisVersion: u8,
    pub MinorNdisVersion: u8,
    pub MajorDriverVersion: u8,
    pub MinorDriverVersion: u8,
    pub Flags: u32,
    pub SetOptionsHandler: Option<SET_OPTIONS_HANDLER>,
    pub InitializeHandlerEx: Option<MINIPORT_INITIALIZE_HANDLER>,
    pub HaltHandlerEx: Option<MINIPORT_HALT_HANDLER>,
    pub UnloadHandler: Option<MINIPORT_DRIVER_UNLOAD>,
    pub PauseHandler: Option<MINIPORT_PAUSE_HANDLER>,
    pub RestartHandler: Option<MINIPORT_RESTART_HANDLER>,
    pub OidRequestHandler: Option<MINIPORT_OID_REQUEST_HANDLER>,
    pub SendNetBufferListsHandler: Option<MINIPORT_SEND_NET_BUFFER_LISTS_HANDLER>,
    pub ReturnNetBufferListsHandler: Option<MINIPORT_RETURN_NET_BUFFER_LISTS_HANDLER>,
    pub CancelSendHandler: Option<MINIPORT_CANCEL_HANDLER>,
    pub CheckForHangHandlerEx: NDIS_HANDLER,
    pub ResetHandlerEx: NDIS_HANDLER,
    pub DevicePnPEventNotifyHandler: Option<MINIPORT_DEVICE_PNP_EVENT_NOTIFY_HANDLER>,
    pub ShutdownHandlerEx: Option<MINIPORT_SHUTDOWN_HANDLER>,
    pub CancelOidRequestHandler: Option<MINIPORT_CANCEL_HANDLER>,
    pub DirectOidRequestHandler: Option<MINIPORT_OID_REQUEST_HANDLER>,
    pub CancelDirectOidRequestHandler: Option<MINIPORT_CANCEL_HANDLER>,
    pub SynchronousOidRequestHandler: NDIS_HANDLER,
}
pub const NDIS_MINIPORT_DRIVER_CHARACTERISTICS_REVISION_2: u8 = 2;
pub const NDIS_MINIPORT_DRIVER_CHARACTERISTICS_REVISION_3: u8 = 3;
pub const NDIS_SIZEOF_MINIPORT_DRIVER_CHARACTERISTICS_REVISION_3: u16 = through(
    offset_of!(
        NDIS_MINIPORT_DRIVER_CHARACTERISTICS,
        SynchronousOidRequestHandler
    ),
    size_of::<NDIS_HANDLER>(),
);
pub const NDIS_SIZEOF_MINIPORT_DRIVER_CHARACTERISTICS_REVISION_2: u16 = through(
    offset_of!(
        NDIS_MINIPORT_DRIVER_CHARACTERISTICS,
        CancelDirectOidRequestHandler
    ),
    size_of::<Option<MINIPORT_CANCEL_HANDLER>>(),
);

/// `NDIS_DRIVER_OPTIONAL_HANDLERS`: a union of characteristics structures told apart by
/// their header; NdisSetOptionalHandlers receives one of them (here
/// [`NDIS_NDK_PROVIDER_CHARACTERISTICS`]) through this type.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NDIS_DRIVER_OPTIONAL_HANDLERS {
    pub Header: NDIS_OBJECT_HEADER,
}

/// `CM_PARTIAL_RESOURCE_DESCRIPTOR` (wdm.h, `#pragma pack(4)`: 0x14 bytes on x64). The
/// 16-byte union `u` as words; its meaning depends on `Type`.
#[repr(C, packed(4))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CM_PARTIAL_RESOURCE_DESCRIPTOR {
    pub Type: u8,
    pub ShareDisposition: u8,
    pub Flags: u16,
    pub u: [u32; 4],
}
pub const CmResourceTypePort: u8 = 1;
pub const CmResourceTypeInterrupt: u8 = 2;
pub const CmResourceTypeMemory: u8 = 3;
/// `CM_RESOURCE_INTERRUPT_MESSAGE` in `Flags` of an interrupt descriptor.
pub const CM_RESOURCE_INTERRUPT_MESSAGE: u16 = 0x0002;

/// `CM_PARTIAL_RESOURCE_LIST` (= `NDIS_RESOURCE_LIST`): `Count` descriptors follow,
/// declared with one as in C.
#[repr(C, packed(4))]
#[derive(Clone, Copy, Debug)]
pub struct CM_PARTIAL_RESOURCE_LIST {
    pub Version: u16,
    pub Revision: u16,
    pub Count: u32,
    pub PartialDescriptors: [CM_PARTIAL_RESOURCE_DESCRIPTOR; 1],
}

/// `NDIS_MINIPORT_INIT_PARAMETERS` (NDIS 6.0 fields the driver reads; later fields follow).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NDIS_MINIPORT_INIT_PARAMETERS {
    pub Header: NDIS_OBJECT_HEADER,
    pub Flags: u32,
    /// Translated resources (`PNDIS_RESOURCE_LIST`).
    pub AllocatedResources: *mut CM_PARTIAL_RESOURCE_LIST,
    pub IMDeviceInstanceContext: NDIS_HANDLE,
    pub MiniportAddDeviceContext: NDIS_HANDLE,
    pub IfIndex: NET_IFINDEX,
    pub NetLuid: u64,
    pub DefaultPortAuthStates: *mut core::ffi::c_void,
    pub PciDeviceCustomProperties: *mut core::ffi::c_void,
}

/// `MINIPORT_PROCESS_SG_LIST(PDEVICE_OBJECT, PVOID Reserved, PSCATTER_GATHER_LIST, PVOID
/// Context)`.
pub type MINIPORT_PROCESS_SG_LIST_HANDLER = unsafe extern "system" fn(
    DeviceObject: *mut core::ffi::c_void,
    Reserved: *mut core::ffi::c_void,
    ScatterGatherListBuffer: *mut core::ffi::c_void,
    Context: *mut core::ffi::c_void,
);

/// `NDIS_SG_DMA_DESCRIPTION`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NDIS_SG_DMA_DESCRIPTION {
    pub Header: NDIS_OBJECT_HEADER,
    pub Flags: u32,
    pub MaximumPhysicalMapping: u32,
    pub ProcessSGListHandler: Option<MINIPORT_PROCESS_SG_LIST_HANDLER>,
    pub SharedMemAllocateCompleteHandler: NDIS_HANDLER,
    /// Out: set by NdisMRegisterScatterGatherDma.
    pub ScatterGatherListSize: u32,
    /// NDIS 6.85 (REVISION_2): a PDO to use for DMA instead of the miniport's; NULL.
    pub PdoOverride: *mut core::ffi::c_void,
}
pub const NDIS_SG_DMA_DESCRIPTION_REVISION_1: u8 = 1;
pub const NDIS_SIZEOF_SG_DMA_DESCRIPTION_REVISION_1: u16 = through(
    offset_of!(NDIS_SG_DMA_DESCRIPTION, ScatterGatherListSize),
    size_of::<u32>(),
);
pub const NDIS_SG_DMA_DESCRIPTION_REVISION_2: u8 = 2;
pub const NDIS_SIZEOF_SG_DMA_DESCRIPTION_REVISION_2: u16 = through(
    offset_of!(NDIS_SG_DMA_DESCRIPTION, PdoOverride),
    size_of::<*mut core::ffi::c_void>(),
);
pub const NDIS_SG_DMA_64_BIT_ADDRESS: u32 = 0x0000_0001;

/// `NDIS_MINIPORT_ADAPTER_ATTRIBUTES`: a union of the attribute structures, told apart by
/// their header (like [`NDIS_DRIVER_OPTIONAL_HANDLERS`]).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NDIS_MINIPORT_ADAPTER_ATTRIBUTES {
    pub Header: NDIS_OBJECT_HEADER,
}

/// `NDIS_MINIPORT_ADAPTER_REGISTRATION_ATTRIBUTES`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NDIS_MINIPORT_ADAPTER_REGISTRATION_ATTRIBUTES {
    pub Header: NDIS_OBJECT_HEADER,
    pub MiniportAdapterContext: NDIS_HANDLE,
    pub AttributeFlags: u32,
    pub CheckForHangTimeInSeconds: u32,
    /// `NDIS_INTERFACE_TYPE` (`NdisInterfacePci` = 5).
    pub InterfaceType: i32,
}
pub const NDIS_MINIPORT_ADAPTER_REGISTRATION_ATTRIBUTES_REVISION_2: u8 = 2;
pub const NDIS_SIZEOF_MINIPORT_ADAPTER_REGISTRATION_ATTRIBUTES_REVISION_2: u16 = through(
    offset_of!(NDIS_MINIPORT_ADAPTER_REGISTRATION_ATTRIBUTES, InterfaceType),
    size_of::<i32>(),
);
pub const NDIS_MINIPORT_ATTRIBUTES_HARDWARE_DEVICE: u32 = 0x0000_0001;
pub const NDIS_MINIPORT_ATTRIBUTES_BUS_MASTER: u32 = 0x0000_0008;
pub const NdisInterfacePci: i32 = 5;

/// `NDIS_MINIPORT_ADAPTER_GENERAL_ATTRIBUTES` (REVISION_2, NDIS 6.20+).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NDIS_MINIPORT_ADAPTER_GENERAL_ATTRIBUTES {
    pub Header: NDIS_OBJECT_HEADER,
    pub Flags: u32,
    /// `NDIS_MEDIUM` (`NdisMedium802_3` = 0).
    pub MediaType: i32,
    /// `NDIS_PHYSICAL_MEDIUM` (`NdisPhysicalMedium802_3` = 14).
    pub PhysicalMediumType: i32,
    pub MtuSize: u32,
    pub MaxXmitLinkSpeed: u64,
    pub XmitLinkSpeed: u64,
    pub MaxRcvLinkSpeed: u64,
    pub RcvLinkSpeed: u64,
    /// `NDIS_MEDIA_CONNECT_STATE` (connected = 1).
    pub MediaConnectState: i32,
    /// `NDIS_MEDIA_DUPLEX_STATE` (full = 2).
    pub MediaDuplexState: i32,
    pub LookaheadSize: u32,
    pub PowerManagementCapabilities: *mut core::ffi::c_void,
    pub MacOptions: u32,
    pub SupportedPacketFilters: u32,
    pub MaxMulticastListSize: u32,
    pub MacAddressLength: u16,
    pub PermanentMacAddress: [u8; 32],
    pub CurrentMacAddress: [u8; 32],
    pub RecvScaleCapabilities: *mut core::ffi::c_void,
    /// `NET_IF_ACCESS_TYPE` (broadcast = 2).
    pub AccessType: i32,
    /// `NET_IF_DIRECTION_TYPE` (send-receive = 0).
    pub DirectionType: i32,
    /// `NET_IF_CONNECTION_TYPE` (dedicated = 1).
    pub ConnectionType: i32,
    /// `NET_IFTYPE` (`IF_TYPE_ETHERNET_CSMACD` = 6).
    pub IfType: u16,
    pub IfConnectorPresent: BOOLEAN,
    pub SupportedStatistics: u32,
    pub SupportedPauseFunctions: i32,
    pub DataBackFillSize: u32,
    pub ContextBackFillSize: u32,
    pub SupportedOidList: *mut NDIS_OID,
    pub SupportedOidListLength: u32,
    pub AutoNegotiationFlags: u32,
    pub PowerManagementCapabilitiesEx: *mut core::ffi::c_void,
}
pub const NDIS_MINIPORT_ADAPTER_GENERAL_ATTRIBUTES_REVISION_2: u8 = 2;
pub const NDIS_SIZEOF_MINIPORT_ADAPTER_GENERAL_ATTRIBUTES_REVISION_2: u16 = through(
    offset_of!(
        NDIS_MINIPORT_ADAPTER_GENERAL_ATTRIBUTES,
        PowerManagementCapabilitiesEx
    ),
    size_of::<*mut core::ffi::c_void>(),
);

/// `NDIS_REQUEST_TYPE` values the driver handles.
pub const NdisRequestQueryInformation: i32 = 0;
pub const NdisRequestSetInformation: i32 = 1;
pub const NdisRequestQueryStatistics: i32 = 2;
pub const NdisRequestMethod: i32 = 12;

/// `NDIS_OID_REQUEST.DATA.QUERY_INFORMATION` (also `SET_INFORMATION`, whose `BytesRead`
/// sits where the query's `BytesWritten` does).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NDIS_OID_REQUEST_QUERY {
    pub Oid: NDIS_OID,
    pub InformationBuffer: *mut core::ffi::c_void,
    pub InformationBufferLength: u32,
    pub BytesWrittenOrRead: u32,
    pub BytesNeeded: u32,
}

/// `NDIS_OID_REQUEST.DATA.METHOD_INFORMATION`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NDIS_OID_REQUEST_METHOD {
    pub Oid: NDIS_OID,
    pub InformationBuffer: *mut core::ffi::c_void,
    pub InputBufferLength: u32,
    pub OutputBufferLength: u32,
    pub MethodId: u32,
    pub BytesWritten: u32,
    pub BytesRead: u32,
    pub BytesNeeded: u32,
}

/// `NDIS_OID_REQUEST.DATA`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union NDIS_OID_REQUEST_DATA {
    pub QUERY_INFORMATION: NDIS_OID_REQUEST_QUERY,
    pub SET_INFORMATION: NDIS_OID_REQUEST_QUERY,
    pub METHOD_INFORMATION: NDIS_OID_REQUEST_METHOD,
}

/// `NDIS_OID_REQUEST`, through `DATA` (the fields after it are NDIS's and the source's).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct NDIS_OID_REQUEST {
    pub Header: NDIS_OBJECT_HEADER,
    /// `NDIS_REQUEST_TYPE`.
    pub RequestType: i32,
    pub PortNumber: NDIS_PORT_NUMBER,
    pub Timeout: u32,
    pub RequestId: *mut core::ffi::c_void,
    pub RequestHandle: NDIS_HANDLE,
    pub DATA: NDIS_OID_REQUEST_DATA,
}

/// `NET_DEVICE_PNP_EVENT` (NDIS 6.0 fields).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NET_DEVICE_PNP_EVENT {
    pub Header: NDIS_OBJECT_HEADER,
    pub PortNumber: NDIS_PORT_NUMBER,
    /// `NDIS_DEVICE_PNP_EVENT`.
    pub DevicePnPEvent: i32,
    pub InformationBuffer: *mut core::ffi::c_void,
    pub InformationBufferLength: u32,
}

/// `NET_BUFFER_LIST` up to `Status` (the `NetBufferListInfo` array after it is not
/// declared). The reserved arrays are `DECLSPEC_ALIGN(MEMORY_ALLOCATION_ALIGNMENT)` in nbl.h
/// (16 on x64), as the leading `SLIST_HEADER` union makes the whole structure: `_Align`
/// stands for the gap before `NdisReserved`, so `Status` is at 0x8C (issue 24; it was
/// declared at 0x7C before, where the PVRDMA adapter's aborted sends wrote it).
#[repr(C, align(16))]
#[derive(Debug)]
pub struct NET_BUFFER_LIST {
    pub Next: *mut NET_BUFFER_LIST,
    pub FirstNetBuffer: *mut core::ffi::c_void,
    pub Context: *mut core::ffi::c_void,
    pub ParentNetBufferList: *mut NET_BUFFER_LIST,
    pub NdisPoolHandle: NDIS_HANDLE,
    pub _Align: usize,
    pub NdisReserved: [*mut core::ffi::c_void; 2],
    pub ProtocolReserved: [*mut core::ffi::c_void; 4],
    pub MiniportReserved: [*mut core::ffi::c_void; 2],
    pub Scratch: *mut core::ffi::c_void,
    pub SourceHandle: NDIS_HANDLE,
    pub NblFlags: u32,
    pub ChildRefCount: i32,
    pub Flags: u32,
    pub Status: NDIS_STATUS,
}
/// `NDIS_SEND_FLAGS_DISPATCH_LEVEL` (send) = `NDIS_SEND_COMPLETE_FLAGS_DISPATCH_LEVEL`.
pub const NDIS_SEND_FLAGS_DISPATCH_LEVEL: u32 = 0x0000_0001;
/// `NDIS_STATUS_REQUEST_ABORTED` (= STATUS_REQUEST_ABORTED): the status of every send, since
/// the adapter carries no NDIS data path.
pub const NDIS_STATUS_REQUEST_ABORTED: NDIS_STATUS = 0xC000_0240_u32 as i32;

pub const NDIS_OBJECT_TYPE_MINIPORT_INTERRUPT: u8 = 0x84;

/// `MINIPORT_ISR(NDIS_HANDLE MiniportInterruptContext, PBOOLEAN QueueDefaultInterruptDpc,
/// PULONG TargetProcessors)`. DIRQL.
pub type MINIPORT_ISR_HANDLER = unsafe extern "system" fn(
    MiniportInterruptContext: NDIS_HANDLE,
    QueueDefaultInterruptDpc: *mut BOOLEAN,
    TargetProcessors: *mut u32,
) -> BOOLEAN;
/// `MINIPORT_INTERRUPT_DPC(NDIS_HANDLE, PVOID MiniportDpcContext,
/// PVOID ReceiveThrottleParameters, PVOID NdisReserved2)`.
pub type MINIPORT_INTERRUPT_DPC_HANDLER = unsafe extern "system" fn(
    MiniportInterruptContext: NDIS_HANDLE,
    MiniportDpcContext: *mut core::ffi::c_void,
    ReceiveThrottleParameters: *mut core::ffi::c_void,
    NdisReserved2: *mut core::ffi::c_void,
);
/// `MINIPORT_DISABLE_INTERRUPT` / `MINIPORT_ENABLE_INTERRUPT(NDIS_HANDLE)`.
pub type MINIPORT_LINE_INTERRUPT_CONTROL_HANDLER =
    unsafe extern "system" fn(MiniportInterruptContext: NDIS_HANDLE);
/// `MINIPORT_MESSAGE_INTERRUPT(NDIS_HANDLE, ULONG MessageId, PBOOLEAN
/// QueueDefaultInterruptDpc, PULONG TargetProcessors)`. DIRQL.
pub type MINIPORT_MSI_ISR_HANDLER = unsafe extern "system" fn(
    MiniportInterruptContext: NDIS_HANDLE,
    MessageId: u32,
    QueueDefaultInterruptDpc: *mut BOOLEAN,
    TargetProcessors: *mut u32,
) -> BOOLEAN;
/// `MINIPORT_MESSAGE_INTERRUPT_DPC(NDIS_HANDLE, ULONG MessageId, PVOID MiniportDpcContext,
/// PVOID ReceiveThrottleParameters, PVOID NdisReserved2)`.
pub type MINIPORT_MSI_INTERRUPT_DPC_HANDLER = unsafe extern "system" fn(
    MiniportInterruptContext: NDIS_HANDLE,
    MessageId: u32,
    MiniportDpcContext: *mut core::ffi::c_void,
    ReceiveThrottleParameters: *mut core::ffi::c_void,
    NdisReserved2: *mut core::ffi::c_void,
);
/// `MINIPORT_DISABLE_MESSAGE_INTERRUPT` / `MINIPORT_ENABLE_MESSAGE_INTERRUPT(NDIS_HANDLE,
/// ULONG MessageId)`.
pub type MINIPORT_MSI_INTERRUPT_CONTROL_HANDLER =
    unsafe extern "system" fn(MiniportInterruptContext: NDIS_HANDLE, MessageId: u32);

/// `NDIS_MINIPORT_INTERRUPT_CHARACTERISTICS` (REVISION_1), for NdisMRegisterInterruptEx.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NDIS_MINIPORT_INTERRUPT_CHARACTERISTICS {
    pub Header: NDIS_OBJECT_HEADER,
    pub InterruptHandler: Option<MINIPORT_ISR_HANDLER>,
    pub InterruptDpcHandler: Option<MINIPORT_INTERRUPT_DPC_HANDLER>,
    pub DisableInterruptHandler: Option<MINIPORT_LINE_INTERRUPT_CONTROL_HANDLER>,
    pub EnableInterruptHandler: Option<MINIPORT_LINE_INTERRUPT_CONTROL_HANDLER>,
    pub MsiSupported: BOOLEAN,
    pub MsiSyncWithAllMessages: BOOLEAN,
    pub MessageInterruptHandler: Option<MINIPORT_MSI_ISR_HANDLER>,
    pub MessageInterruptDpcHandler: Option<MINIPORT_MSI_INTERRUPT_DPC_HANDLER>,
    pub DisableMessageInterruptHandler: Option<MINIPORT_MSI_INTERRUPT_CONTROL_HANDLER>,
    pub EnableMessageInterruptHandler: Option<MINIPORT_MSI_INTERRUPT_CONTROL_HANDLER>,
    /// Out: `NDIS_INTERRUPT_TYPE` (1 = line based, 2 = message signalled).
    pub InterruptType: i32,
    /// Out: `PIO_INTERRUPT_MESSAGE_INFO`.
    pub MessageInfoTable: *mut core::ffi::c_void,
}
pub const NDIS_MINIPORT_INTERRUPT_REVISION_1: u8 = 1;
pub const NDIS_SIZEOF_MINIPORT_INTERRUPT_CHARACTERISTICS_REVISION_1: u16 = through(
    offset_of!(NDIS_MINIPORT_INTERRUPT_CHARACTERISTICS, MessageInfoTable),
    size_of::<*mut core::ffi::c_void>(),
);

// x64 layouts of the syslink block, computed by hand from the declarations on Learn (pointers
// 8 bytes, natural alignment; CM_PARTIAL_RESOURCE_DESCRIPTOR under pack(4)).
#[cfg(target_pointer_width = "64")]
const _: () = {
    assert!(NDIS_SIZEOF_MINIPORT_DRIVER_CHARACTERISTICS_REVISION_2 == 0x98);
    assert!(NDIS_SIZEOF_MINIPORT_DRIVER_CHARACTERISTICS_REVISION_3 == 0xA0);
    assert!(offset_of!(NDIS_MINIPORT_DRIVER_CHARACTERISTICS, SetOptionsHandler) == 0x10);
    assert!(offset_of!(NDIS_MINIPORT_DRIVER_CHARACTERISTICS, CheckForHangHandlerEx) == 0x60);
    assert!(
        offset_of!(
            NDIS_MINIPORT_DRIVER_CHARACTERISTICS,
            CancelOidRequestHandler
        ) == 0x80
    );
    assert!(size_of::<NDIS_NDK_PROVIDER_CHARACTERISTICS>() == 0x18);
    assert!(size_of::<CM_PARTIAL_RESOURCE_DESCRIPTOR>() == 0x14);
    assert!(offset_of!(CM_PARTIAL_RESOURCE_LIST, PartialDescriptors) == 8);
    assert!(offset_of!(NDIS_MINIPORT_INIT_PARAMETERS, AllocatedResources) == 8);
    assert!(size_of::<NDIS_MINIPORT_INIT_PARAMETERS>() == 0x40);
    assert!(NDIS_SIZEOF_SG_DMA_DESCRIPTION_REVISION_1 == 0x24);
    assert!(NDIS_SIZEOF_SG_DMA_DESCRIPTION_REVISION_2 == 0x30);
    assert!(NDIS_SIZEOF_NDIS_PM_CAPABILITIES_REVISION_2 == 0x3C);
    assert!(NDIS_SIZEOF_CONFIGURATION_OBJECT_REVISION_1 == 0x18);
    assert!(offset_of!(NDIS_CONFIGURATION_PARAMETER, ParameterData) == 8);
    assert!(size_of::<NDIS_CONFIGURATION_PARAMETER>() == 0x18);
    assert!(NDIS_SIZEOF_STATUS_INDICATION_REVISION_1 == 0x70);
    assert!(offset_of!(NDIS_STATUS_INDICATION, StatusBuffer) == 0x30);
    assert!(offset_of!(NDIS_STATUS_INDICATION, Guid) == 0x3C);
    assert!(NDIS_SIZEOF_LINK_STATE_REVISION_1 == 0x28);
    assert!(offset_of!(NDIS_LINK_STATE, XmitLinkSpeed) == 0x10);
    assert!(offset_of!(NDIS_SG_DMA_DESCRIPTION, ProcessSGListHandler) == 0x10);
    assert!(NDIS_SIZEOF_MINIPORT_ADAPTER_REGISTRATION_ATTRIBUTES_REVISION_2 == 0x1C);
    assert!(offset_of!(NDIS_MINIPORT_ADAPTER_GENERAL_ATTRIBUTES, MaxXmitLinkSpeed) == 0x18);
    assert!(
        offset_of!(
            NDIS_MINIPORT_ADAPTER_GENERAL_ATTRIBUTES,
            PowerManagementCapabilities
        ) == 0x48
    );
    assert!(
        offset_of!(
            NDIS_MINIPORT_ADAPTER_GENERAL_ATTRIBUTES,
            PermanentMacAddress
        ) == 0x5E
    );
    assert!(
        offset_of!(
            NDIS_MINIPORT_ADAPTER_GENERAL_ATTRIBUTES,
            RecvScaleCapabilities
        ) == 0xA0
    );
    assert!(offset_of!(NDIS_MINIPORT_ADAPTER_GENERAL_ATTRIBUTES, IfType) == 0xB4);
    assert!(offset_of!(NDIS_MINIPORT_ADAPTER_GENERAL_ATTRIBUTES, SupportedOidList) == 0xC8);
    assert!(NDIS_SIZEOF_MINIPORT_ADAPTER_GENERAL_ATTRIBUTES_REVISION_2 == 0xE0);
    assert!(offset_of!(NDIS_OID_REQUEST, RequestId) == 0x10);
    assert!(offset_of!(NDIS_OID_REQUEST, DATA) == 0x20);
    assert!(offset_of!(NDIS_OID_REQUEST_QUERY, InformationBuffer) == 8);
    assert!(offset_of!(NDIS_OID_REQUEST_QUERY, BytesNeeded) == 0x18);
    assert!(offset_of!(NDIS_OID_REQUEST_METHOD, BytesNeeded) == 0x24);
    assert!(offset_of!(NET_DEVICE_PNP_EVENT, InformationBuffer) == 0x10);
    assert!(offset_of!(NET_BUFFER_LIST, NblFlags) == 0x80);
    assert!(offset_of!(NET_BUFFER_LIST, Status) == 0x8C);
    assert!(offset_of!(NDIS_MINIPORT_INTERRUPT_CHARACTERISTICS, MsiSupported) == 0x28);
    assert!(
        offset_of!(
            NDIS_MINIPORT_INTERRUPT_CHARACTERISTICS,
            MessageInterruptHandler
        ) == 0x30
    );
    assert!(NDIS_SIZEOF_MINIPORT_INTERRUPT_CHARACTERISTICS_REVISION_1 == 0x60);
};

impl CM_PARTIAL_RESOURCE_DESCRIPTOR {
    /// `u.Memory.Start` / `u.Generic.Start` (PHYSICAL_ADDRESS at `u` + 0).
    pub const fn memory_start(&self) -> u64 {
        let u = self.u;
        (u[1] as u64) << 32 | u[0] as u64
    }
    /// `u.Memory.Length` (ULONG at `u` + 8); for CmResourceTypeMemoryLarge it is
    /// `Length40` / `Length48` / `Length64`, in units the flags name.
    pub const fn memory_length_field(&self) -> u32 {
        let u = self.u;
        u[2]
    }
    /// `u.MessageInterrupt.Raw.MessageCount` (USHORT at `u` + 2; raw lists only).
    pub const fn message_count(&self) -> u16 {
        let u = self.u;
        (u[0] >> 16) as u16
    }
    /// A memory descriptor (tests and the host harness build resource lists with it).
    pub const fn memory(start: u64, length: u32) -> Self {
        CM_PARTIAL_RESOURCE_DESCRIPTOR {
            Type: CmResourceTypeMemory,
            ShareDisposition: CmResourceShareDeviceExclusive,
            Flags: CM_RESOURCE_MEMORY_READ_WRITE,
            u: [start as u32, (start >> 32) as u32, length, 0],
        }
    }
    /// A translated message-signalled interrupt descriptor (one per MSI-X message).
    pub const fn message_interrupt(vector: u32) -> Self {
        CM_PARTIAL_RESOURCE_DESCRIPTOR {
            Type: CmResourceTypeInterrupt,
            ShareDisposition: CmResourceShareDeviceExclusive,
            Flags: CM_RESOURCE_INTERRUPT_LATCHED | CM_RESOURCE_INTERRUPT_MESSAGE,
            u: [0, vector, 1, 0],
        }
    }
}

pub const CmResourceTypeNull: u8 = 0;
pub const CmResourceTypeDma: u8 = 4;
pub const CmResourceTypeDeviceSpecific: u8 = 5;
pub const CmResourceTypeBusNumber: u8 = 6;
pub const CmResourceTypeMemoryLarge: u8 = 7;
pub const CmResourceTypeDevicePrivate: u8 = 129;
pub const CmResourceShareDeviceExclusive: u8 = 1;
pub const CM_RESOURCE_INTERRUPT_LATCHED: u16 = 0x0001;
pub const CM_RESOURCE_MEMORY_READ_WRITE: u16 = 0x0000;
/// `Length40` counts 256-byte units.
pub const CM_RESOURCE_MEMORY_LARGE_40: u16 = 0x0200;
/// `Length48` counts 64 KiB units.
pub const CM_RESOURCE_MEMORY_LARGE_48: u16 = 0x0400;
/// `Length64` counts 4 GiB units.
pub const CM_RESOURCE_MEMORY_LARGE_64: u16 = 0x0800;

// ---- ntddndis.h: the general OIDs every miniport answers ----

pub const OID_GEN_SUPPORTED_LIST: NDIS_OID = 0x0001_0101;
pub const OID_GEN_HARDWARE_STATUS: NDIS_OID = 0x0001_0102;
pub const OID_GEN_MEDIA_SUPPORTED: NDIS_OID = 0x0001_0103;
pub const OID_GEN_MEDIA_IN_USE: NDIS_OID = 0x0001_0104;
pub const OID_GEN_MAXIMUM_LOOKAHEAD: NDIS_OID = 0x0001_0105;
pub const OID_GEN_MAXIMUM_FRAME_SIZE: NDIS_OID = 0x0001_0106;
pub const OID_GEN_TRANSMIT_BUFFER_SPACE: NDIS_OID = 0x0001_0108;
pub const OID_GEN_RECEIVE_BUFFER_SPACE: NDIS_OID = 0x0001_0109;
pub const OID_GEN_TRANSMIT_BLOCK_SIZE: NDIS_OID = 0x0001_010A;
pub const OID_GEN_RECEIVE_BLOCK_SIZE: NDIS_OID = 0x0001_010B;
pub const OID_GEN_VENDOR_ID: NDIS_OID = 0x0001_010C;
pub const OID_GEN_VENDOR_DESCRIPTION: NDIS_OID = 0x0001_010D;
pub const OID_GEN_CURRENT_PACKET_FILTER: NDIS_OID = 0x0001_010E;
pub const OID_GEN_CURRENT_LOOKAHEAD: NDIS_OID = 0x0001_010F;
pub const OID_GEN_MAXIMUM_TOTAL_SIZE: NDIS_OID = 0x0001_0111;
pub const OID_GEN_VENDOR_DRIVER_VERSION: NDIS_OID = 0x0001_0116;
pub const OID_GEN_LINK_PARAMETERS: NDIS_OID = 0x0001_0208;
pub const OID_GEN_INTERRUPT_MODERATION: NDIS_OID = 0x0001_0209;
pub const OID_GEN_XMIT_OK: NDIS_OID = 0x0002_0101;
pub const OID_GEN_RCV_OK: NDIS_OID = 0x0002_0102;
pub const OID_GEN_STATISTICS: NDIS_OID = 0x0002_0106;

/// `NDIS_HARDWARE_STATUS::NdisHardwareStatusReady`.
pub const NdisHardwareStatusReady: u32 = 0;
/// `NDIS_MEDIUM::NdisMedium802_3`.
pub const NdisMedium802_3: u32 = 0;
/// `NDIS_PHYSICAL_MEDIUM::NdisPhysicalMedium802_3`.
pub const NdisPhysicalMedium802_3: u32 = 14;
/// `NDIS_LINK_SPEED_UNKNOWN`.
pub const NDIS_LINK_SPEED_UNKNOWN: u64 = u64::MAX;
/// `NDIS_MEDIA_CONNECT_STATE::MediaConnectStateUnknown`.
pub const MediaConnectStateUnknown: u32 = 0;
/// `NDIS_MEDIA_CONNECT_STATE::MediaConnectStateConnected`.
pub const MediaConnectStateConnected: u32 = 1;
/// `NDIS_MEDIA_CONNECT_STATE::MediaConnectStateDisconnected`.
pub const MediaConnectStateDisconnected: u32 = 2;
/// `NDIS_MEDIA_DUPLEX_STATE::MediaDuplexStateFull`.
pub const MediaDuplexStateFull: u32 = 2;

pub const NDIS_PACKET_TYPE_DIRECTED: u32 = 0x0000_0001;
pub const NDIS_PACKET_TYPE_MULTICAST: u32 = 0x0000_0002;
pub const NDIS_PACKET_TYPE_ALL_MULTICAST: u32 = 0x0000_0004;
pub const NDIS_PACKET_TYPE_BROADCAST: u32 = 0x0000_0008;
pub const NDIS_PACKET_TYPE_PROMISCUOUS: u32 = 0x0000_0020;

/// `NDIS_INTERRUPT_MODERATION_PARAMETERS` (ntddndis.h).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NDIS_INTERRUPT_MODERATION_PARAMETERS {
    pub Header: NDIS_OBJECT_HEADER,
    pub Flags: u32,
    /// `NDIS_INTERRUPT_MODERATION`.
    pub InterruptModeration: u32,
}
pub const NDIS_INTERRUPT_MODERATION_PARAMETERS_REVISION_1: u8 = 1;
pub const NDIS_SIZEOF_INTERRUPT_MODERATION_PARAMETERS_REVISION_1: u16 = through(
    offset_of!(NDIS_INTERRUPT_MODERATION_PARAMETERS, InterruptModeration),
    size_of::<u32>(),
);
pub const NdisInterruptModerationNotSupported: u32 = 1;

/// `NDIS_LINK_PARAMETERS` (ntddndis.h), the OID_GEN_LINK_PARAMETERS set buffer.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NDIS_LINK_PARAMETERS {
    pub Header: NDIS_OBJECT_HEADER,
    pub MediaDuplexState: u32,
    pub XmitLinkSpeed: u64,
    pub RcvLinkSpeed: u64,
    pub PauseFunctions: u32,
    pub AutoNegotiationFlags: u32,
}
pub const NDIS_LINK_PARAMETERS_REVISION_1: u8 = 1;
pub const NDIS_SIZEOF_LINK_PARAMETERS_REVISION_1: u16 = through(
    offset_of!(NDIS_LINK_PARAMETERS, AutoNegotiationFlags),
    size_of::<u32>(),
);

/// `NDIS_STATISTICS_INFO` (ntddndis.h), the OID_GEN_STATISTICS buffer.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NDIS_STATISTICS_INFO {
    pub Header: NDIS_OBJECT_HEADER,
    pub SupportedStatistics: u32,
    pub ifInDiscards: u64,
    pub ifInErrors: u64,
    pub ifHCInOctets: u64,
    pub ifHCInUcastPkts: u64,
    pub ifHCInMulticastPkts: u64,
    pub ifHCInBroadcastPkts: u64,
    pub ifHCOutOctets: u64,
    pub ifHCOutUcastPkts: u64,
    pub ifHCOutMulticastPkts: u64,
    pub ifHCOutBroadcastPkts: u64,
    pub ifOutErrors: u64,
    pub ifOutDiscards: u64,
    pub ifHCInUcastOctets: u64,
    pub ifHCInMulticastOctets: u64,
    pub ifHCInBroadcastOctets: u64,
    pub ifHCOutUcastOctets: u64,
    pub ifHCOutMulticastOctets: u64,
    pub ifHCOutBroadcastOctets: u64,
}
pub const NDIS_STATISTICS_INFO_REVISION_1: u8 = 1;
pub const NDIS_SIZEOF_STATISTICS_INFO_REVISION_1: u16 = through(
    offset_of!(NDIS_STATISTICS_INFO, ifHCOutBroadcastOctets),
    size_of::<u64>(),
);
pub const NDIS_STATISTICS_FLAGS_VALID_DIRECTED_FRAMES_RCV: u32 = 0x0000_0001;
pub const NDIS_STATISTICS_FLAGS_VALID_BYTES_RCV: u32 = 0x0000_0008;
pub const NDIS_STATISTICS_FLAGS_VALID_DIRECTED_FRAMES_XMIT: u32 = 0x0000_0040;
pub const NDIS_STATISTICS_FLAGS_VALID_BYTES_XMIT: u32 = 0x0000_0200;
pub const NDIS_STATISTICS_FLAGS_VALID_DIRECTED_BYTES_RCV: u32 = 0x0001_0000;
pub const NDIS_STATISTICS_FLAGS_VALID_DIRECTED_BYTES_XMIT: u32 = 0x0008_0000;

/// `NDIS_DEVICE_PNP_EVENT::NdisDevicePnPEventSurpriseRemoved` (ndis.h enum: QueryRemoved 0,
/// Removed 1, SurpriseRemoved 2, QueryStopped 3, Stopped 4, PowerProfileChanged 5).
pub const NdisDevicePnPEventSurpriseRemoved: u32 = 2;

// ==== issue 23: power-management capabilities, status indications, configuration ====
// (Learn: ns-ntddndis-_ndis_pm_capabilities, ns-ndis-_ndis_status_indication,
// ns-ntddndis-_ndis_link_state, ns-ndis-_ndis_configuration_object,
// ns-ndis-_ndis_configuration_parameter, nf-ndis-ndiswriteerrorlogentry; netevent.h.)

/// `NDIS_PM_CAPABILITIES` (ntddndis.h; REVISION_2 for NDIS 6.30+). The general attributes'
/// `PowerManagementCapabilitiesEx` is mandatory for NDIS 6.20+ drivers; a function with no
/// wake-up support reports zeros and `NdisDeviceStateUnspecified` (0).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NDIS_PM_CAPABILITIES {
    pub Header: NDIS_OBJECT_HEADER,
    pub Flags: u32,
    pub SupportedWoLPacketPatterns: u32,
    pub NumTotalWoLPatterns: u32,
    pub MaxWoLPatternSize: u32,
    pub MaxWoLPatternOffset: u32,
    pub MaxWoLPacketSaveBuffer: u32,
    pub SupportedProtocolOffloads: u32,
    pub NumArpOffloadIPv4Addresses: u32,
    pub NumNSOffloadIPv6Addresses: u32,
    /// `NDIS_DEVICE_POWER_STATE`.
    pub MinMagicPacketWakeUp: i32,
    pub MinPatternWakeUp: i32,
    pub MinLinkChangeWakeUp: i32,
    pub SupportedWakeUpEvents: u32,
    pub MediaSpecificWakeUpEvents: u32,
}
pub const NDIS_PM_CAPABILITIES_REVISION_2: u8 = 2;
pub const NDIS_SIZEOF_NDIS_PM_CAPABILITIES_REVISION_2: u16 = through(
    offset_of!(NDIS_PM_CAPABILITIES, MediaSpecificWakeUpEvents),
    size_of::<u32>(),
);
/// `NDIS_DEVICE_POWER_STATE::NdisDeviceStateUnspecified`.
pub const NdisDeviceStateUnspecified: i32 = 0;

/// `NDIS_STATUS_INDICATION` (ndis.h), passed to NdisMIndicateStatusEx.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NDIS_STATUS_INDICATION {
    pub Header: NDIS_OBJECT_HEADER,
    pub SourceHandle: NDIS_HANDLE,
    pub PortNumber: NDIS_PORT_NUMBER,
    pub StatusCode: NDIS_STATUS,
    pub Flags: u32,
    pub DestinationHandle: NDIS_HANDLE,
    pub RequestId: *mut core::ffi::c_void,
    pub StatusBuffer: *mut core::ffi::c_void,
    pub StatusBufferSize: u32,
    pub Guid: GUID,
    pub NdisReserved: [*mut core::ffi::c_void; 4],
}
pub const NDIS_OBJECT_TYPE_STATUS_INDICATION: u8 = 0x98;
pub const NDIS_STATUS_INDICATION_REVISION_1: u8 = 1;
pub const NDIS_SIZEOF_STATUS_INDICATION_REVISION_1: u16 = through(
    offset_of!(NDIS_STATUS_INDICATION, NdisReserved),
    size_of::<[*mut core::ffi::c_void; 4]>(),
);
/// `NDIS_STATUS_LINK_STATE`: the status buffer is an [`NDIS_LINK_STATE`].
pub const NDIS_STATUS_LINK_STATE: NDIS_STATUS = 0x4001_0017;

/// `NDIS_LINK_STATE` (ntddndis.h), the NDIS_STATUS_LINK_STATE buffer.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NDIS_LINK_STATE {
    pub Header: NDIS_OBJECT_HEADER,
    /// `NDIS_MEDIA_CONNECT_STATE`.
    pub MediaConnectState: u32,
    /// `NDIS_MEDIA_DUPLEX_STATE`.
    pub MediaDuplexState: u32,
    pub XmitLinkSpeed: u64,
    pub RcvLinkSpeed: u64,
    /// `NDIS_SUPPORTED_PAUSE_FUNCTIONS`.
    pub PauseFunctions: u32,
    pub AutoNegotiationFlags: u32,
}
pub const NDIS_LINK_STATE_REVISION_1: u8 = 1;
pub const NDIS_SIZEOF_LINK_STATE_REVISION_1: u16 = through(
    offset_of!(NDIS_LINK_STATE, AutoNegotiationFlags),
    size_of::<u32>(),
);

/// `NDIS_CONFIGURATION_OBJECT` (ndis.h), for NdisOpenConfigurationEx.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NDIS_CONFIGURATION_OBJECT {
    pub Header: NDIS_OBJECT_HEADER,
    /// The MiniportAdapterHandle InitializeEx received (the adapter's own keywords).
    pub NdisHandle: NDIS_HANDLE,
    pub Flags: u32,
}
pub const NDIS_OBJECT_TYPE_CONFIGURATION_OBJECT: u8 = 0xA9;
pub const NDIS_CONFIGURATION_OBJECT_REVISION_1: u8 = 1;
/// `sizeof(NDIS_CONFIGURATION_OBJECT)`, as the WDK's macro is.
pub const NDIS_SIZEOF_CONFIGURATION_OBJECT_REVISION_1: u16 =
    size_of::<NDIS_CONFIGURATION_OBJECT>() as u16;

/// `UNICODE_STRING` / `NDIS_STRING`: lengths in bytes, not NUL-terminated.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NDIS_STRING {
    pub Length: u16,
    pub MaximumLength: u16,
    pub Buffer: *mut u16,
}

/// `NDIS_PARAMETER_TYPE::NdisParameterInteger`: NDIS converts a decimal REG_SZ (what an
/// INF enum keyword stores) or a REG_DWORD to a ULONG.
pub const NdisParameterInteger: i32 = 0;

/// `NDIS_CONFIGURATION_PARAMETER` (ndis.h): the type, then a union of IntegerData (its
/// first ULONG), an NDIS_STRING and BINARY_DATA, pointer-aligned; kept as raw words here.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NDIS_CONFIGURATION_PARAMETER {
    pub ParameterType: i32,
    pub ParameterData: [u64; 2],
}

impl NDIS_CONFIGURATION_PARAMETER {
    /// The union's `IntegerData`.
    pub const fn integer_data(&self) -> u32 {
        // CAST: the low ULONG of the union's first word (little-endian).
        self.ParameterData[0] as u32
    }
}

/// `NDIS_ERROR_CODE_UNSUPPORTED_CONFIGURATION` = `EVENT_NDIS_UNSUPPORTED_CONFIGURATION`
/// (netevent.h; "%2: The supplied configuration is not supported."), the event
/// NdisWriteErrorLogEntry logs under the INF's netevent.dll message file.
pub const NDIS_ERROR_CODE_UNSUPPORTED_CONFIGURATION: u32 = 0xC000_1391;
