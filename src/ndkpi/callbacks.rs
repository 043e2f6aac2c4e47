//! Every `NDK_FN_*` function-pointer type (ndkpi.md §2.11 provider functions, §2.12
//! consumer callbacks), parameters in ABI order under their C names.
//!
//! Conventions (Appendix A.2): `extern "system"` (= "C" on x64/ARM64); a callback parameter
//! marked `opt` in the reference is `Option<..>` (nullable-pointer ABI), every other callback
//! parameter and every dispatch slot is a non-null fn pointer. `CONST` pointers are
//! `*const`. `NDK_VERSION` is passed by value. NDK_FN_QUERY_ADAPTER_INFO_EX and
//! NDK_FN_DISCONNECT_EX (§2.13) belong to no dispatch table and are not declared.

use core::ffi::c_void;

use super::mdl::MDL;
use super::object::{
    NDK_ADAPTER, NDK_CONNECTOR, NDK_CQ, NDK_LISTENER, NDK_MR, NDK_MW, NDK_OBJECT_HEADER, NDK_PD,
    NDK_QP, NDK_SHARED_ENDPOINT, NDK_SRQ, NDK_VERSION,
};
use super::structs::{
    NDK_ADAPTER_INFO, NDK_EXTENSION_INTERFACE, NDK_LOGICAL_ADDRESS_MAPPING, NDK_RESULT,
    NDK_RESULT_EX, NDK_SGE,
};
use super::types::{
    BOOLEAN, GROUP_AFFINITY, GUID, NDK_LOGICAL_ADDRESS, NTSTATUS, PVOID, SIZE_T, SOCKADDR, UINT32,
    UINT64, ULONG,
};

// ---- §2.12 consumer callbacks (implemented by the consumer, called by the provider) ----

/// `VOID NDK_FN_CLOSE_COMPLETION(PVOID Context opt)`.
pub type NDK_FN_CLOSE_COMPLETION = unsafe extern "system" fn(Context: PVOID);
/// `VOID NDK_FN_CREATE_COMPLETION(PVOID Context opt, NTSTATUS Status, NDK_OBJECT_HEADER*)`.
pub type NDK_FN_CREATE_COMPLETION =
    unsafe extern "system" fn(Context: PVOID, Status: NTSTATUS, pNdkObject: *mut NDK_OBJECT_HEADER);
/// `VOID NDK_FN_REQUEST_COMPLETION(PVOID Context opt, NTSTATUS Status)`.
pub type NDK_FN_REQUEST_COMPLETION = unsafe extern "system" fn(Context: PVOID, Status: NTSTATUS);
/// `VOID NDK_FN_CQ_NOTIFICATION_CALLBACK(PVOID CqNotificationContext opt, NTSTATUS CqStatus)`.
pub type NDK_FN_CQ_NOTIFICATION_CALLBACK =
    unsafe extern "system" fn(CqNotificationContext: PVOID, CqStatus: NTSTATUS);
/// `VOID NDK_FN_SRQ_NOTIFICATION_CALLBACK(PVOID SrqNotificationContext opt, NTSTATUS)`.
pub type NDK_FN_SRQ_NOTIFICATION_CALLBACK =
    unsafe extern "system" fn(SrqNotificationContext: PVOID, SrqStatus: NTSTATUS);
/// `VOID NDK_FN_CONNECT_EVENT_CALLBACK(PVOID ConnectEventContext opt, NDK_CONNECTOR*)`.
pub type NDK_FN_CONNECT_EVENT_CALLBACK =
    unsafe extern "system" fn(ConnectEventContext: PVOID, pNdkConnector: *mut NDK_CONNECTOR);
/// `VOID NDK_FN_DISCONNECT_EVENT_CALLBACK(PVOID DisconnectEventContext opt)`.
pub type NDK_FN_DISCONNECT_EVENT_CALLBACK =
    unsafe extern "system" fn(DisconnectEventContext: PVOID);
/// (2.1) `VOID NDK_FN_DISCONNECT_EVENT_CALLBACK_EX(PVOID DisconnectEventContext opt,
/// ULONG ProviderDisconnectReason)`.
pub type NDK_FN_DISCONNECT_EVENT_CALLBACK_EX =
    unsafe extern "system" fn(DisconnectEventContext: PVOID, ProviderDisconnectReason: ULONG);

// ---- §2.11 provider functions: object management ----

/// Close of every object but the adapter. Never fails: STATUS_SUCCESS or STATUS_PENDING.
pub type NDK_FN_CLOSE_OBJECT = unsafe extern "system" fn(
    pNdkObject: *mut NDK_OBJECT_HEADER,
    CloseCompletion: NDK_FN_CLOSE_COMPLETION,
    RequestContext: PVOID,
) -> NTSTATUS;
pub type NDK_FN_QUERY_EXTENSION_INTERFACE = unsafe extern "system" fn(
    pNdkObject: *mut NDK_OBJECT_HEADER,
    ExtensionInterfaceID: *const GUID,
    ExtensionInterfaceVersion: NDK_VERSION,
    pExtensionInterface: *mut NDK_EXTENSION_INTERFACE,
) -> NTSTATUS;

// ---- adapter ----

/// PASSIVE_LEVEL. `pInfo` may be null (size query); `*pBufferSize` is in/out.
pub type NDK_FN_QUERY_ADAPTER_INFO = unsafe extern "system" fn(
    pNdkAdapter: *mut NDK_ADAPTER,
    pInfo: *mut NDK_ADAPTER_INFO,
    pBufferSize: *mut ULONG,
) -> NTSTATUS;
pub type NDK_FN_CREATE_CQ = unsafe extern "system" fn(
    pNdkAdapter: *mut NDK_ADAPTER,
    CqDepth: ULONG,
    CqNotification: NDK_FN_CQ_NOTIFICATION_CALLBACK,
    CqNotificationContext: PVOID,
    Affinity: *mut GROUP_AFFINITY,
    CreateCompletion: NDK_FN_CREATE_COMPLETION,
    RequestContext: PVOID,
    ppNdkCq: *mut *mut NDK_CQ,
) -> NTSTATUS;
pub type NDK_FN_CREATE_PD = unsafe extern "system" fn(
    pNdkAdapter: *mut NDK_ADAPTER,
    CreateCompletion: NDK_FN_CREATE_COMPLETION,
    RequestContext: PVOID,
    ppNdkPd: *mut *mut NDK_PD,
) -> NTSTATUS;
pub type NDK_FN_CREATE_SHARED_ENDPOINT = unsafe extern "system" fn(
    pNdkAdapter: *mut NDK_ADAPTER,
    pAddress: *const SOCKADDR,
    AddressLength: ULONG,
    CreateCompletion: NDK_FN_CREATE_COMPLETION,
    RequestContext: PVOID,
    ppNdkSharedEndpoint: *mut *mut NDK_SHARED_ENDPOINT,
) -> NTSTATUS;
pub type NDK_FN_CREATE_CONNECTOR = unsafe extern "system" fn(
    pNdkAdapter: *mut NDK_ADAPTER,
    CreateCompletion: NDK_FN_CREATE_COMPLETION,
    RequestContext: PVOID,
    ppNdkConnector: *mut *mut NDK_CONNECTOR,
) -> NTSTATUS;
pub type NDK_FN_CREATE_LISTENER = unsafe extern "system" fn(
    pNdkAdapter: *mut NDK_ADAPTER,
    ConnectEvent: NDK_FN_CONNECT_EVENT_CALLBACK,
    ConnectEventContext: PVOID,
    CreateCompletion: NDK_FN_CREATE_COMPLETION,
    RequestContext: PVOID,
    ppNdkListener: *mut *mut NDK_LISTENER,
) -> NTSTATUS;
/// `RequestCompletion` is `_In_opt_` in the header copy and `[in]` on Learn; it is typed
/// `Option` because a null from a consumer must not become an invalid Rust fn pointer.
pub type NDK_FN_BUILD_LAM = unsafe extern "system" fn(
    pNdkAdapter: *mut NDK_ADAPTER,
    Mdl: *mut MDL,
    Length: SIZE_T,
    RequestCompletion: Option<NDK_FN_REQUEST_COMPLETION>,
    RequestContext: PVOID,
    pNdkLAM: *mut NDK_LOGICAL_ADDRESS_MAPPING,
    pLAMSize: *mut ULONG,
    pFBO: *mut ULONG,
) -> NTSTATUS;
pub type NDK_FN_RELEASE_LAM = unsafe extern "system" fn(
    pNdkAdapter: *mut NDK_ADAPTER,
    pNdkLAM: *mut NDK_LOGICAL_ADDRESS_MAPPING,
);

// ---- PD ----

pub type NDK_FN_CREATE_MR = unsafe extern "system" fn(
    pNdkPd: *mut NDK_PD,
    FastRegister: BOOLEAN,
    CreateCompletion: NDK_FN_CREATE_COMPLETION,
    RequestContext: PVOID,
    ppNdkMr: *mut *mut NDK_MR,
) -> NTSTATUS;
pub type NDK_FN_CREATE_MW = unsafe extern "system" fn(
    pNdkPd: *mut NDK_PD,
    CreateCompletion: NDK_FN_CREATE_COMPLETION,
    RequestContext: PVOID,
    ppNdkMw: *mut *mut NDK_MW,
) -> NTSTATUS;
pub type NDK_FN_CREATE_SRQ = unsafe extern "system" fn(
    pNdkPd: *mut NDK_PD,
    SrqDepth: ULONG,
    MaxReceiveRequestSge: ULONG,
    NotifyThreshold: ULONG,
    SrqNotification: Option<NDK_FN_SRQ_NOTIFICATION_CALLBACK>,
    SrqNotificationContext: PVOID,
    Affinity: *mut GROUP_AFFINITY,
    CreateCompletion: NDK_FN_CREATE_COMPLETION,
    RequestContext: PVOID,
    ppNdkSrq: *mut *mut NDK_SRQ,
) -> NTSTATUS;
pub type NDK_FN_CREATE_QP = unsafe extern "system" fn(
    pNdkPd: *mut NDK_PD,
    pReceiveCq: *mut NDK_CQ,
    pInitiatorCq: *mut NDK_CQ,
    QPContext: PVOID,
    ReceiveQueueDepth: ULONG,
    InitiatorQueueDepth: ULONG,
    MaxReceiveRequestSge: ULONG,
    MaxInitiatorRequestSge: ULONG,
    InlineDataSize: ULONG,
    CreateCompletion: NDK_FN_CREATE_COMPLETION,
    RequestContext: PVOID,
    ppNdkQp: *mut *mut NDK_QP,
) -> NTSTATUS;
pub type NDK_FN_CREATE_QP_WITH_SRQ = unsafe extern "system" fn(
    pNdkPd: *mut NDK_PD,
    pReceiveCq: *mut NDK_CQ,
    pInitiatorCq: *mut NDK_CQ,
    pSrq: *mut NDK_SRQ,
    QPContext: PVOID,
    InitiatorQueueDepth: ULONG,
    MaxInitiatorRequestSge: ULONG,
    InlineDataSize: ULONG,
    CreateCompletion: NDK_FN_CREATE_COMPLETION,
    RequestContext: PVOID,
    ppNdkQp: *mut *mut NDK_QP,
) -> NTSTATUS;
pub type NDK_FN_GET_PRIVILEGED_MEMORY_REGION_TOKEN =
    unsafe extern "system" fn(pNdkPd: *mut NDK_PD, pToken: *mut UINT32);

// ---- CQ ----

pub type NDK_FN_RESIZE_CQ = unsafe extern "system" fn(
    pNdkCq: *mut NDK_CQ,
    CqDepth: ULONG,
    RequestCompletion: NDK_FN_REQUEST_COMPLETION,
    RequestContext: PVOID,
) -> NTSTATUS;
/// `Type` is an `NDK_CQ_NOTIFY_*` value.
pub type NDK_FN_ARM_CQ = unsafe extern "system" fn(pNdkCq: *mut NDK_CQ, Type: ULONG);
/// Returns the number of results written.
pub type NDK_FN_GET_CQ_RESULTS = unsafe extern "system" fn(
    pNdkCq: *mut NDK_CQ,
    pResults: *mut NDK_RESULT,
    nResults: ULONG,
) -> ULONG;
pub type NDK_FN_CONTROL_CQ_INTERRUPT_MODERATION = unsafe extern "system" fn(
    pNdkCq: *mut NDK_CQ,
    ModerationInterval: ULONG,
    ModerationCount: ULONG,
) -> NTSTATUS;
/// Returns the number of results written.
pub type NDK_FN_GET_CQ_RESULTS_EX = unsafe extern "system" fn(
    pNdkCq: *mut NDK_CQ,
    pResults: *mut NDK_RESULT_EX,
    nResults: ULONG,
) -> ULONG;

// ---- MR / MW ----

/// `Mdl` VA is an index, never dereferenced; `Flags` are `NDK_MR_FLAG_*`.
pub type NDK_FN_REGISTER_MR = unsafe extern "system" fn(
    pNdkMr: *mut NDK_MR,
    Mdl: *mut MDL,
    Length: SIZE_T,
    Flags: ULONG,
    RequestCompletion: NDK_FN_REQUEST_COMPLETION,
    RequestContext: PVOID,
) -> NTSTATUS;
pub type NDK_FN_DEREGISTER_MR = unsafe extern "system" fn(
    pNdkMr: *mut NDK_MR,
    RequestCompletion: NDK_FN_REQUEST_COMPLETION,
    RequestContext: PVOID,
) -> NTSTATUS;
pub type NDK_FN_INITIALIZE_FAST_REGISTER_MR = unsafe extern "system" fn(
    pNdkMr: *mut NDK_MR,
    AdapterPageCount: ULONG,
    RemoteAccess: BOOLEAN,
    RequestCompletion: NDK_FN_REQUEST_COMPLETION,
    RequestContext: PVOID,
) -> NTSTATUS;
pub type NDK_FN_GET_REMOTE_TOKEN_FROM_MR = unsafe extern "system" fn(pNdkMr: *mut NDK_MR) -> UINT32;
pub type NDK_FN_GET_LOCAL_TOKEN_FROM_MR = unsafe extern "system" fn(pNdkMr: *mut NDK_MR) -> UINT32;
pub type NDK_FN_GET_REMOTE_TOKEN_FROM_MW = unsafe extern "system" fn(pNdkMw: *mut NDK_MW) -> UINT32;

// ---- QP work requests ----

pub type NDK_FN_FLUSH = unsafe extern "system" fn(pNdkQp: *mut NDK_QP);
pub type NDK_FN_SEND = unsafe extern "system" fn(
    pNdkQp: *mut NDK_QP,
    RequestContext: PVOID,
    pSgl: *const NDK_SGE,
    nSge: ULONG,
    Flags: ULONG,
) -> NTSTATUS;
pub type NDK_FN_RECEIVE = unsafe extern "system" fn(
    pNdkQp: *mut NDK_QP,
    RequestContext: PVOID,
    pSgl: *const NDK_SGE,
    nSge: ULONG,
) -> NTSTATUS;
pub type NDK_FN_BIND = unsafe extern "system" fn(
    pNdkQp: *mut NDK_QP,
    RequestContext: PVOID,
    pMr: *mut NDK_MR,
    pMw: *mut NDK_MW,
    VirtualAddress: PVOID,
    Length: SIZE_T,
    Flags: ULONG,
) -> NTSTATUS;
pub type NDK_FN_FAST_REGISTER = unsafe extern "system" fn(
    pNdkQp: *mut NDK_QP,
    RequestContext: PVOID,
    pMr: *mut NDK_MR,
    AdapterPageCount: ULONG,
    AdapterPageArray: *const NDK_LOGICAL_ADDRESS,
    FBO: ULONG,
    Length: SIZE_T,
    BaseVirtualAddress: PVOID,
    Flags: ULONG,
) -> NTSTATUS;
/// `pNdkMrOrMw` is the header of a fast-registered MR or of an MW.
pub type NDK_FN_INVALIDATE = unsafe extern "system" fn(
    pNdkQp: *mut NDK_QP,
    RequestContext: PVOID,
    pNdkMrOrMw: *mut NDK_OBJECT_HEADER,
    Flags: ULONG,
) -> NTSTATUS;
pub type NDK_FN_READ = unsafe extern "system" fn(
    pNdkQp: *mut NDK_QP,
    RequestContext: PVOID,
    pSgl: *const NDK_SGE,
    nSge: ULONG,
    RemoteAddress: UINT64,
    RemoteToken: UINT32,
    Flags: ULONG,
) -> NTSTATUS;
pub type NDK_FN_WRITE = unsafe extern "system" fn(
    pNdkQp: *mut NDK_QP,
    RequestContext: PVOID,
    pSgl: *const NDK_SGE,
    nSge: ULONG,
    RemoteAddress: UINT64,
    RemoteToken: UINT32,
    Flags: ULONG,
) -> NTSTATUS;
/// Note the order: `Flags` before `RemoteToken`, unlike Read/Write.
pub type NDK_FN_SEND_AND_INVALIDATE = unsafe extern "system" fn(
    pNdkQp: *mut NDK_QP,
    RequestContext: PVOID,
    pSgl: *const NDK_SGE,
    nSge: ULONG,
    Flags: ULONG,
    RemoteToken: UINT32,
) -> NTSTATUS;

// ---- SRQ ----

pub type NDK_FN_MODIFY_SRQ = unsafe extern "system" fn(
    pNdkSrq: *mut NDK_SRQ,
    SrqDepth: ULONG,
    NotifyThreshold: ULONG,
    RequestCompletion: NDK_FN_REQUEST_COMPLETION,
    RequestContext: PVOID,
) -> NTSTATUS;
pub type NDK_FN_SRQ_RECEIVE = unsafe extern "system" fn(
    pNdkSrq: *mut NDK_SRQ,
    RequestContext: PVOID,
    pSgl: *const NDK_SGE,
    nSge: ULONG,
) -> NTSTATUS;

// ---- connector ----

pub type NDK_FN_CONNECT = unsafe extern "system" fn(
    pNdkConnector: *mut NDK_CONNECTOR,
    pNdkQp: *mut NDK_QP,
    pSrcAddress: *const SOCKADDR,
    SrcAddressLength: ULONG,
    pDestAddress: *const SOCKADDR,
    DestAddressLength: ULONG,
    InboundReadLimit: ULONG,
    OutboundReadLimit: ULONG,
    pPrivateData: *const c_void,
    PrivateDataLength: ULONG,
    RequestCompletion: NDK_FN_REQUEST_COMPLETION,
    RequestContext: PVOID,
) -> NTSTATUS;
pub type NDK_FN_CONNECT_WITH_SHARED_ENDPOINT = unsafe extern "system" fn(
    pNdkConnector: *mut NDK_CONNECTOR,
    pNdkQp: *mut NDK_QP,
    pNdkSharedEndpoint: *mut NDK_SHARED_ENDPOINT,
    pDestAddress: *const SOCKADDR,
    DestAddressLength: ULONG,
    InboundReadLimit: ULONG,
    OutboundReadLimit: ULONG,
    pPrivateData: *const c_void,
    PrivateDataLength: ULONG,
    RequestCompletion: NDK_FN_REQUEST_COMPLETION,
    RequestContext: PVOID,
) -> NTSTATUS;
pub type NDK_FN_COMPLETE_CONNECT = unsafe extern "system" fn(
    pNdkConnector: *mut NDK_CONNECTOR,
    DisconnectEvent: Option<NDK_FN_DISCONNECT_EVENT_CALLBACK>,
    DisconnectEventContext: PVOID,
    RequestCompletion: NDK_FN_REQUEST_COMPLETION,
    RequestContext: PVOID,
) -> NTSTATUS;
pub type NDK_FN_ACCEPT = unsafe extern "system" fn(
    pNdkConnector: *mut NDK_CONNECTOR,
    pNdkQp: *mut NDK_QP,
    InboundReadLimit: ULONG,
    OutboundReadLimit: ULONG,
    pPrivateData: *const c_void,
    PrivateDataLength: ULONG,
    DisconnectEvent: Option<NDK_FN_DISCONNECT_EVENT_CALLBACK>,
    DisconnectEventContext: PVOID,
    RequestCompletion: NDK_FN_REQUEST_COMPLETION,
    RequestContext: PVOID,
) -> NTSTATUS;
pub type NDK_FN_REJECT = unsafe extern "system" fn(
    pNdkConnector: *mut NDK_CONNECTOR,
    pPrivateData: *const c_void,
    PrivateDataLength: ULONG,
) -> NTSTATUS;
pub type NDK_FN_GET_CONNECTION_DATA = unsafe extern "system" fn(
    pNdkConnector: *mut NDK_CONNECTOR,
    pInboundReadLimit: *mut ULONG,
    pOutboundReadLimit: *mut ULONG,
    pPrivateData: PVOID,
    pPrivateDataLength: *mut ULONG,
) -> NTSTATUS;
pub type NDK_FN_GET_LOCAL_ADDRESS = unsafe extern "system" fn(
    pNdkConnector: *mut NDK_CONNECTOR,
    pAddress: *mut SOCKADDR,
    pAddressLength: *mut ULONG,
) -> NTSTATUS;
pub type NDK_FN_GET_PEER_ADDRESS = unsafe extern "system" fn(
    pNdkConnector: *mut NDK_CONNECTOR,
    pAddress: *mut SOCKADDR,
    pAddressLength: *mut ULONG,
) -> NTSTATUS;
pub type NDK_FN_DISCONNECT = unsafe extern "system" fn(
    pNdkConnector: *mut NDK_CONNECTOR,
    RequestCompletion: NDK_FN_REQUEST_COMPLETION,
    RequestContext: PVOID,
) -> NTSTATUS;
/// (2.1) CompleteConnect with the Ex disconnect callback.
pub type NDK_FN_COMPLETE_CONNECT_EX = unsafe extern "system" fn(
    pNdkConnector: *mut NDK_CONNECTOR,
    DisconnectEvent: Option<NDK_FN_DISCONNECT_EVENT_CALLBACK_EX>,
    DisconnectEventContext: PVOID,
    RequestCompletion: NDK_FN_REQUEST_COMPLETION,
    RequestContext: PVOID,
) -> NTSTATUS;
/// (2.1) Accept with the Ex disconnect callback.
pub type NDK_FN_ACCEPT_EX = unsafe extern "system" fn(
    pNdkConnector: *mut NDK_CONNECTOR,
    pNdkQp: *mut NDK_QP,
    InboundReadLimit: ULONG,
    OutboundReadLimit: ULONG,
    pPrivateData: *const c_void,
    PrivateDataLength: ULONG,
    DisconnectEvent: Option<NDK_FN_DISCONNECT_EVENT_CALLBACK_EX>,
    DisconnectEventContext: PVOID,
    RequestCompletion: NDK_FN_REQUEST_COMPLETION,
    RequestContext: PVOID,
) -> NTSTATUS;

// ---- listener / shared endpoint ----

pub type NDK_FN_LISTEN = unsafe extern "system" fn(
    pNdkListener: *mut NDK_LISTENER,
    pAddress: *const SOCKADDR,
    AddressLength: ULONG,
    RequestCompletion: NDK_FN_REQUEST_COMPLETION,
    RequestContext: PVOID,
) -> NTSTATUS;
pub type NDK_FN_GET_LISTENER_LOCAL_ADDRESS = unsafe extern "system" fn(
    pNdkListener: *mut NDK_LISTENER,
    pAddress: *mut SOCKADDR,
    pAddressLength: *mut ULONG,
) -> NTSTATUS;
pub type NDK_FN_CONTROL_CONNECT_EVENTS =
    unsafe extern "system" fn(pNdkListener: *mut NDK_LISTENER, Pause: BOOLEAN);
pub type NDK_FN_GET_SHARED_ENDPOINT_LOCAL_ADDRESS = unsafe extern "system" fn(
    pNdkSharedEndpoint: *mut NDK_SHARED_ENDPOINT,
    pAddress: *mut SOCKADDR,
    pAddressLength: *mut ULONG,
) -> NTSTATUS;
