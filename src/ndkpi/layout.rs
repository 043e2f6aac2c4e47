//! x64 layout of every NDKPI structure, asserted at compile time (ndkpi.md Appendix A.1 and
//! the offset tables of §1–3; MDL and GROUP_AFFINITY from windows-build.md §6). The PDB
//! offsets are the ground truth; a mismatch fails the build.

use super::assert_layout;
use super::*;

// §1
assert_layout!(NDK_VERSION, size 0x4, align 2, Major @ 0x0, Minor @ 0x2);
assert_layout!(NDK_OBJECT_TYPE, size 0x4, align 4);
assert_layout!(NDK_OBJECT_HEADER_RESERVED_BLOCK, size 0x20, align 8, rf @ 0x0);
assert_layout!(NDK_OBJECT_HEADER, size 0x28, align 8,
    Version @ 0x00, ObjectType @ 0x04, NdkReserved @ 0x08);
assert_layout!(NDK_ADAPTER, size 0x30, align 8, Header @ 0x00, Dispatch @ 0x28);
assert_layout!(NDK_PD, size 0x30, align 8, Header @ 0x00, Dispatch @ 0x28);
assert_layout!(NDK_CQ, size 0x30, align 8, Header @ 0x00, Dispatch @ 0x28);
assert_layout!(NDK_MR, size 0x30, align 8, Header @ 0x00, Dispatch @ 0x28);
assert_layout!(NDK_MW, size 0x30, align 8, Header @ 0x00, Dispatch @ 0x28);
assert_layout!(NDK_QP, size 0x30, align 8, Header @ 0x00, Dispatch @ 0x28);
assert_layout!(NDK_SRQ, size 0x30, align 8, Header @ 0x00, Dispatch @ 0x28);
assert_layout!(NDK_CONNECTOR, size 0x30, align 8, Header @ 0x00, Dispatch @ 0x28);
assert_layout!(NDK_LISTENER, size 0x30, align 8, Header @ 0x00, Dispatch @ 0x28);
assert_layout!(NDK_SHARED_ENDPOINT, size 0x30, align 8, Header @ 0x00, Dispatch @ 0x28);

// §2 dispatch tables, every slot.
assert_layout!(NDK_ADAPTER_DISPATCH, size 0x48, align 8, every 8: [
    NdkQueryExtension, NdkQueryAdapterInfo, NdkCreateCq, NdkCreatePd, NdkCreateSharedEndpoint,
    NdkCreateConnector, NdkCreateListener, NdkBuildLAM, NdkReleaseLAM,
]);
assert_layout!(NDK_PD_DISPATCH, size 0x40, align 8, every 8: [
    NdkClosePd, NdkQueryExtension, NdkCreateMr, NdkCreateMw, NdkCreateSrq, NdkCreateQp,
    NdkCreateQpWithSrq, NdkGetPrivilegedMemoryRegionToken,
]);
assert_layout!(NDK_CQ_DISPATCH, size 0x38, align 8, every 8: [
    NdkCloseCq, NdkQueryExtension, NdkResizeCq, NdkArmCq, NdkGetCqResults,
    NdkControlCqInterruptModeration, NdkGetCqResultsEx,
]);
assert_layout!(NDK_MR_DISPATCH, size 0x38, align 8, every 8: [
    NdkCloseMr, NdkQueryExtension, NdkRegisterMr, NdkDeregisterMr, NdkInitializeFastRegisterMr,
    NdkGetRemoteTokenFromMr, NdkGetLocalTokenFromMr,
]);
assert_layout!(NDK_MW_DISPATCH, size 0x18, align 8, every 8: [
    NdkCloseMw, NdkQueryExtension, NdkGetRemoteTokenFromMw,
]);
assert_layout!(NDK_QP_DISPATCH, size 0x58, align 8, every 8: [
    NdkCloseQp, NdkQueryExtension, NdkFlush, NdkSend, NdkReceive, NdkBind, NdkFastRegister,
    NdkInvalidate, NdkRead, NdkWrite, NdkSendAndInvalidate,
]);
assert_layout!(NDK_SRQ_DISPATCH, size 0x20, align 8, every 8: [
    NdkCloseSrq, NdkQueryExtension, NdkModifySrq, NdkSrqReceive,
]);
assert_layout!(NDK_CONNECTOR_DISPATCH, size 0x68, align 8, every 8: [
    NdkCloseConnector, NdkQueryExtension, NdkConnect, NdkConnectWithSharedEndpoint,
    NdkCompleteConnect, NdkAccept, NdkReject, NdkGetConnectionData, NdkGetLocalAddress,
    NdkGetPeerAddress, NdkDisconnect, NdkCompleteConnectEx, NdkAcceptEx,
]);
assert_layout!(NDK_LISTENER_DISPATCH, size 0x28, align 8, every 8: [
    NdkCloseListener, NdkQueryExtension, NdkListen, NdkGetLocalAddress, NdkControlConnectEvents,
]);
assert_layout!(NDK_SHARED_ENDPOINT_DISPATCH, size 0x18, align 8, every 8: [
    NdkCloseSharedEndpoint, NdkQueryExtension, NdkGetLocalAddress,
]);
// Optional callbacks must keep the nullable-pointer ABI of the C typedefs.
const _: () = assert!(
    core::mem::size_of::<Option<NDK_FN_DISCONNECT_EVENT_CALLBACK_EX>>()
        == core::mem::size_of::<usize>()
);
const _: () = assert!(
    core::mem::size_of::<Option<NDK_FN_SRQ_NOTIFICATION_CALLBACK>>()
        == core::mem::size_of::<usize>()
);

// §3
assert_layout!(NDK_SGE_0, size 0x8, align 8, VirtualAddress @ 0x0, LogicalAddress @ 0x0);
assert_layout!(NDK_SGE, size 0x10, align 8,
    Anonymous @ 0x00, Length @ 0x08, MemoryRegionToken @ 0x0C);
assert_layout!(NDK_RESULT, size 0x18, align 8,
    Status @ 0x00, BytesTransferred @ 0x04, QPContext @ 0x08, RequestContext @ 0x10);
assert_layout!(NDK_RESULT_EX, size 0x28, align 8,
    Status @ 0x00, BytesTransferred @ 0x04, QPContext @ 0x08, RequestContext @ 0x10,
    Type @ 0x18, ProviderErrorCode @ 0x1C, TypeSpecificCompletionOutput @ 0x20);
assert_layout!(NDK_OPERATION_TYPE, size 0x4, align 4);
const _: () = assert!(core::mem::size_of::<NDK_LOGICAL_ADDRESS>() == 0x8);
const _: () = assert!(core::mem::align_of::<NDK_LOGICAL_ADDRESS>() == 0x8);
assert_layout!(NDK_LOGICAL_ADDRESS_MAPPING, size 0x18, align 8,
    AdapterContext @ 0x00, AdapterPageCount @ 0x08, AdapterPageArray @ 0x10);
const _: () = assert!(matches!(ndk_lam_size(0), Some(0x10)));
const _: () = assert!(matches!(ndk_lam_size(3), Some(0x28)));
const _: () = assert!(ndk_lam_size(u32::MAX / 8).is_none());
assert_layout!(NDK_EXTENSION_INTERFACE, size 0x8, align 8, Dispatch @ 0x0);
assert_layout!(NDK_ADAPTER_INFO, size 0x68, align 8, Version @ 0x00, VendorId @ 0x04,
    DeviceId @ 0x08, MaxRegistrationSize @ 0x10, MaxWindowSize @ 0x18);
assert_layout!(NDK_ADAPTER_INFO, every 4 from 0x20: [
    FRMRPageCount, MaxInitiatorRequestSge, MaxReceiveRequestSge, MaxReadRequestSge,
    MaxTransferLength, MaxInlineDataSize, MaxInboundReadLimit, MaxOutboundReadLimit,
    MaxReceiveQueueDepth, MaxInitiatorQueueDepth, MaxSrqDepth, MaxCqDepth,
    LargeRequestThreshold, MaxCallerData, MaxCalleeData, AdapterFlags, RdmaTechnology,
]);
const _: () = assert!(NDK_ADAPTER_INFO_SIZE_WITHOUT_RDMA_TECHNOLOGY == 0x60);
assert_layout!(NDK_RDMA_TECHNOLOGY, size 0x4, align 4);
assert_layout!(GROUP_AFFINITY, size 0x10, align 8, Mask @ 0x0, Group @ 0x8, Reserved @ 0xA);

// OS types
assert_layout!(GUID, size 0x10, align 4, Data1 @ 0x0, Data2 @ 0x4, Data3 @ 0x6, Data4 @ 0x8);
assert_layout!(SOCKADDR, size 0x10, align 2, sa_family @ 0x0, sa_data @ 0x2);
assert_layout!(IN_ADDR, size 0x4, align 4, S_un_b @ 0x0);
assert_layout!(IN6_ADDR, size 0x10, align 2, Byte @ 0x0);
assert_layout!(SOCKADDR_IN, size 0x10, align 4,
    sin_family @ 0x0, sin_port @ 0x2, sin_addr @ 0x4, sin_zero @ 0x8);
assert_layout!(SOCKADDR_IN6, size 0x1C, align 4, sin6_family @ 0x00, sin6_port @ 0x02,
    sin6_flowinfo @ 0x04, sin6_addr @ 0x08, sin6_scope_id @ 0x18);
assert_layout!(SOCKADDR_INET, size 0x1C, align 4, Ipv4 @ 0x0, Ipv6 @ 0x0, si_family @ 0x0);
assert_layout!(MDL, size 0x30, align 8, Next @ 0x00, Size @ 0x08, MdlFlags @ 0x0A,
    AllocationProcessorNumber @ 0x0C, Reserved @ 0x0E, Process @ 0x10, MappedSystemVa @ 0x18,
    StartVa @ 0x20, ByteCount @ 0x28, ByteOffset @ 0x2C);
const _: () = assert!(core::mem::size_of::<PFN_NUMBER>() == 8);
const _: () = assert!(ADDRESS_AND_SIZE_TO_SPAN_PAGES(0x1FFF, 2) == 2);
const _: () = assert!(ADDRESS_AND_SIZE_TO_SPAN_PAGES(0x1000, 0x1000) == 1);
const _: () = assert!(ADDRESS_AND_SIZE_TO_SPAN_PAGES(0x1001, 0) == 1);
const _: () = assert!(ADDRESS_AND_SIZE_TO_SPAN_PAGES(0xFFF, u32::MAX) == 0x10_0001);
