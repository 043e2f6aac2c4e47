//! The ten NDKPI dispatch tables (ndkpi.md §2.1–2.10), members in ABI order.
//!
//! Every slot is mandatory (§5.0), so slots are non-`Option` fn pointers: a table can only be
//! built with a real function in each. The connector table is the NDKPI 2.1 one (13 slots).
//! The adapter table has no close slot; adapters close through CLOSE_NDK_ADAPTER_HANDLER.

use super::callbacks::*;

/// `NDK_ADAPTER_DISPATCH` (§2.1, 9 slots).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NDK_ADAPTER_DISPATCH {
    pub NdkQueryExtension: NDK_FN_QUERY_EXTENSION_INTERFACE,
    pub NdkQueryAdapterInfo: NDK_FN_QUERY_ADAPTER_INFO,
    pub NdkCreateCq: NDK_FN_CREATE_CQ,
    pub NdkCreatePd: NDK_FN_CREATE_PD,
    pub NdkCreateSharedEndpoint: NDK_FN_CREATE_SHARED_ENDPOINT,
    pub NdkCreateConnector: NDK_FN_CREATE_CONNECTOR,
    pub NdkCreateListener: NDK_FN_CREATE_LISTENER,
    pub NdkBuildLAM: NDK_FN_BUILD_LAM,
    pub NdkReleaseLAM: NDK_FN_RELEASE_LAM,
}

/// `NDK_PD_DISPATCH` (§2.2, 8 slots).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NDK_PD_DISPATCH {
    pub NdkClosePd: NDK_FN_CLOSE_OBJECT,
    pub NdkQueryExtension: NDK_FN_QUERY_EXTENSION_INTERFACE,
    pub NdkCreateMr: NDK_FN_CREATE_MR,
    pub NdkCreateMw: NDK_FN_CREATE_MW,
    pub NdkCreateSrq: NDK_FN_CREATE_SRQ,
    pub NdkCreateQp: NDK_FN_CREATE_QP,
    pub NdkCreateQpWithSrq: NDK_FN_CREATE_QP_WITH_SRQ,
    pub NdkGetPrivilegedMemoryRegionToken: NDK_FN_GET_PRIVILEGED_MEMORY_REGION_TOKEN,
}

/// `NDK_CQ_DISPATCH` (§2.3, 7 slots).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NDK_CQ_DISPATCH {
    pub NdkCloseCq: NDK_FN_CLOSE_OBJECT,
    pub NdkQueryExtension: NDK_FN_QUERY_EXTENSION_INTERFACE,
    pub NdkResizeCq: NDK_FN_RESIZE_CQ,
    pub NdkArmCq: NDK_FN_ARM_CQ,
    pub NdkGetCqResults: NDK_FN_GET_CQ_RESULTS,
    pub NdkControlCqInterruptModeration: NDK_FN_CONTROL_CQ_INTERRUPT_MODERATION,
    /// NDKPI ≥ 1.2.
    pub NdkGetCqResultsEx: NDK_FN_GET_CQ_RESULTS_EX,
}

/// `NDK_MR_DISPATCH` (§2.4, 7 slots).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NDK_MR_DISPATCH {
    pub NdkCloseMr: NDK_FN_CLOSE_OBJECT,
    pub NdkQueryExtension: NDK_FN_QUERY_EXTENSION_INTERFACE,
    pub NdkRegisterMr: NDK_FN_REGISTER_MR,
    pub NdkDeregisterMr: NDK_FN_DEREGISTER_MR,
    pub NdkInitializeFastRegisterMr: NDK_FN_INITIALIZE_FAST_REGISTER_MR,
    pub NdkGetRemoteTokenFromMr: NDK_FN_GET_REMOTE_TOKEN_FROM_MR,
    pub NdkGetLocalTokenFromMr: NDK_FN_GET_LOCAL_TOKEN_FROM_MR,
}

/// `NDK_MW_DISPATCH` (§2.5, 3 slots).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NDK_MW_DISPATCH {
    pub NdkCloseMw: NDK_FN_CLOSE_OBJECT,
    pub NdkQueryExtension: NDK_FN_QUERY_EXTENSION_INTERFACE,
    pub NdkGetRemoteTokenFromMw: NDK_FN_GET_REMOTE_TOKEN_FROM_MW,
}

/// `NDK_QP_DISPATCH` (§2.6, 11 slots).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NDK_QP_DISPATCH {
    pub NdkCloseQp: NDK_FN_CLOSE_OBJECT,
    pub NdkQueryExtension: NDK_FN_QUERY_EXTENSION_INTERFACE,
    pub NdkFlush: NDK_FN_FLUSH,
    pub NdkSend: NDK_FN_SEND,
    pub NdkReceive: NDK_FN_RECEIVE,
    pub NdkBind: NDK_FN_BIND,
    pub NdkFastRegister: NDK_FN_FAST_REGISTER,
    pub NdkInvalidate: NDK_FN_INVALIDATE,
    pub NdkRead: NDK_FN_READ,
    pub NdkWrite: NDK_FN_WRITE,
    /// NDKPI ≥ 1.2.
    pub NdkSendAndInvalidate: NDK_FN_SEND_AND_INVALIDATE,
}

/// `NDK_SRQ_DISPATCH` (§2.7, 4 slots).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NDK_SRQ_DISPATCH {
    pub NdkCloseSrq: NDK_FN_CLOSE_OBJECT,
    pub NdkQueryExtension: NDK_FN_QUERY_EXTENSION_INTERFACE,
    pub NdkModifySrq: NDK_FN_MODIFY_SRQ,
    pub NdkSrqReceive: NDK_FN_SRQ_RECEIVE,
}

/// `NDK_CONNECTOR_DISPATCH` (§2.8), NDKPI 2.1: 13 slots, 0x68 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NDK_CONNECTOR_DISPATCH {
    pub NdkCloseConnector: NDK_FN_CLOSE_OBJECT,
    pub NdkQueryExtension: NDK_FN_QUERY_EXTENSION_INTERFACE,
    pub NdkConnect: NDK_FN_CONNECT,
    pub NdkConnectWithSharedEndpoint: NDK_FN_CONNECT_WITH_SHARED_ENDPOINT,
    pub NdkCompleteConnect: NDK_FN_COMPLETE_CONNECT,
    pub NdkAccept: NDK_FN_ACCEPT,
    pub NdkReject: NDK_FN_REJECT,
    pub NdkGetConnectionData: NDK_FN_GET_CONNECTION_DATA,
    pub NdkGetLocalAddress: NDK_FN_GET_LOCAL_ADDRESS,
    pub NdkGetPeerAddress: NDK_FN_GET_PEER_ADDRESS,
    pub NdkDisconnect: NDK_FN_DISCONNECT,
    /// NDKPI 2.1.
    pub NdkCompleteConnectEx: NDK_FN_COMPLETE_CONNECT_EX,
    /// NDKPI 2.1.
    pub NdkAcceptEx: NDK_FN_ACCEPT_EX,
}

/// `NDK_LISTENER_DISPATCH` (§2.9, 5 slots).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NDK_LISTENER_DISPATCH {
    pub NdkCloseListener: NDK_FN_CLOSE_OBJECT,
    pub NdkQueryExtension: NDK_FN_QUERY_EXTENSION_INTERFACE,
    pub NdkListen: NDK_FN_LISTEN,
    pub NdkGetLocalAddress: NDK_FN_GET_LISTENER_LOCAL_ADDRESS,
    pub NdkControlConnectEvents: NDK_FN_CONTROL_CONNECT_EVENTS,
}

/// `NDK_SHARED_ENDPOINT_DISPATCH` (§2.10, 3 slots).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NDK_SHARED_ENDPOINT_DISPATCH {
    pub NdkCloseSharedEndpoint: NDK_FN_CLOSE_OBJECT,
    pub NdkQueryExtension: NDK_FN_QUERY_EXTENSION_INTERFACE,
    pub NdkGetLocalAddress: NDK_FN_GET_SHARED_ENDPOINT_LOCAL_ADDRESS,
}
