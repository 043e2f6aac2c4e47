//! x64 layout of the NDIS-side NDK structures, asserted at compile time (ndkpi.md §6 and
//! Appendix A.1; the "(computed)" rows follow standard C layout from the header text).

use super::abi::*;
use crate::ndkpi::assert_layout;

assert_layout!(NDIS_OBJECT_HEADER, size 0x4, align 2, Type @ 0x0, Revision @ 0x1, Size @ 0x2);

assert_layout!(NDIS_NDK_PROVIDER_CHARACTERISTICS, size 0x18, align 8,
    Header @ 0x00, Flags @ 0x04, OpenNDKAdapterHandler @ 0x08, CloseNDKAdapterHandler @ 0x10);
const _: () = assert!(NDIS_SIZEOF_NDK_PROVIDER_CHARACTERISTICS_REVISION_1 == 0x18);

assert_layout!(NDIS_OPEN_NDK_ADAPTER_PARAMETERS, size 0xC, align 4,
    Version @ 0x0, SwitchId @ 0x4, VPortId @ 0x8);

assert_layout!(NDIS_MINIPORT_ADAPTER_NDK_ATTRIBUTES, size 0x10, align 8,
    Header @ 0x0, Enabled @ 0x4, NdkCapabilities @ 0x8);
const _: () = assert!(NDIS_SIZEOF_MINIPORT_ADAPTER_NDK_ATTRIBUTES_REVISION_1 == 0x10);

assert_layout!(NDIS_NDK_CAPABILITIES, size 0x38, align 8,
    Header @ 0x00, MissingCounterMask @ 0x28, NdkInfo @ 0x30);
assert_layout!(NDIS_NDK_CAPABILITIES, every 4 from 0x04: [
    Flags, MaxQpCount, MaxCqCount, MaxMrCount, MaxPdCount, MaxInboundReadLimit,
    MaxOutboundReadLimit, MaxMwCount, MaxSrqCount,
]);
const _: () = assert!(NDIS_SIZEOF_NDK_CAPABILITIES_REVISION_1 == 0x38);

assert_layout!(NDIS_NDK_PERFORMANCE_COUNTERS, size 0xF0, align 8, every 8: [
    Connect, Accept, ConnectFailure, ConnectionError, ActiveConnection,
    Reserved01, Reserved02, Reserved03, Reserved04, Reserved05, Reserved06, Reserved07,
    Reserved08, Reserved09, Reserved10, Reserved11, Reserved12, Reserved13, Reserved14,
    Reserved15, Reserved16, Reserved17, Reserved18, Reserved19, Reserved20,
    CQError, RDMAInOctets, RDMAOutOctets, RDMAInFrames, RDMAOutFrames,
]);
// The mask bit of a counter is its field index (offset / 8), as the C macro computes.
const _: () = assert!(
    NDIS_NDK_PERFORMANCE_COUNTER_MASK(
        (core::mem::offset_of!(NDIS_NDK_PERFORMANCE_COUNTERS, CQError) / 8) as u32
    ) == 1 << 25
);
const _: () = assert!(
    NDIS_NDK_PERFORMANCE_COUNTER_MASK(
        (core::mem::offset_of!(NDIS_NDK_PERFORMANCE_COUNTERS, RDMAOutFrames) / 8) as u32
    ) == 1 << 29
);
const _: () = assert!(NDIS_NDK_PERFORMANCE_COUNTER_MASK(0) == 1);
const _: () = assert!(NDIS_NDK_PERFORMANCE_COUNTER_MASK(64) == 0);

assert_layout!(NDIS_NDK_STATISTICS_INFO, size 0xF8, align 8,
    Header @ 0x0, Flags @ 0x4, CounterSet @ 0x8);
const _: () = assert!(NDIS_SIZEOF_NDK_STATISTICS_INFO_REVISION_1 == 0xF8);

assert_layout!(NDIS_NDK_CONNECTION_ENTRY, size 0x40, align 4,
    Local @ 0x00, Remote @ 0x1C, UserModeOwner @ 0x38, OwnerPid @ 0x3C);
assert_layout!(NDIS_NDK_CONNECTIONS, size 0x50, align 4, Header @ 0x00, Flags @ 0x04,
    Count @ 0x08, NDConnectionsMappedtoTCPConnections @ 0x0C, Connections @ 0x10);
const _: () = assert!(NDIS_SIZEOF_NDK_CONNECTIONS_REVISION_1(0) == 0x10);
const _: () = assert!(NDIS_SIZEOF_NDK_CONNECTIONS_REVISION_1(3) == 0x10 + 3 * 0x40);
const _: () =
    assert!(NDIS_SIZEOF_NDK_CONNECTIONS_REVISION_1(u32::MAX) == 0x10 + 0x40 * u32::MAX as usize);

assert_layout!(NDIS_NDK_LOCAL_ENDPOINT_ENTRY, size 0x24, align 4,
    Local @ 0x00, UserModeOwner @ 0x1C, Listener @ 0x1D, OwnerPid @ 0x20);
assert_layout!(NDIS_NDK_LOCAL_ENDPOINTS, size 0x34, align 4, Header @ 0x00, Flags @ 0x04,
    Count @ 0x08, NDLocalEndpointsMappedtoTCPLocalEndpoints @ 0x0C, LocalEndpoints @ 0x10);
const _: () = assert!(NDIS_SIZEOF_NDK_LOCAL_ENDPOINTS_REVISION_1(0) == 0x10);
const _: () = assert!(NDIS_SIZEOF_NDK_LOCAL_ENDPOINTS_REVISION_1(5) == 0x10 + 5 * 0x24);
const _: () = assert!(ndis_header_size(0x1234) == 0x1234);
const _: () =
    assert!(ndis_header_size(NDIS_SIZEOF_NDK_LOCAL_ENDPOINTS_REVISION_1(10_000)) == 0xFFFF);

assert_layout!(NET_PNP_EVENT_CODE, size 0x4, align 4);
assert_layout!(NET_PNP_EVENT, size 0x98, align 8, NetEvent @ 0x00, Buffer @ 0x08,
    BufferLength @ 0x10, NdisReserved @ 0x18, TransportReserved @ 0x38, TdiReserved @ 0x58,
    TdiClientReserved @ 0x78);
assert_layout!(NET_PNP_EVENT_NOTIFICATION, size 0xB0, align 8, Header @ 0x00,
    PortNumber @ 0x04, NetPnPEvent @ 0x08, Flags @ 0xA0, SwitchId @ 0xA4, VPortId @ 0xA8);
const _: () = assert!(NDIS_SIZEOF_NET_PNP_EVENT_NOTIFICATION_REVISION_1 == 0xA4);
const _: () = assert!(NDIS_SIZEOF_NET_PNP_EVENT_NOTIFICATION_REVISION_2 == 0xAC);

assert_layout!(WSK_PROVIDER_NDK_DISPATCH, size 0x10, align 8,
    WskOpenNdkAdapter @ 0x0, WskCloseNdkAdapter @ 0x8);
const _: () = assert!(WSKNDK_GET_WSK_PROVIDER_NDK_DISPATCH == 0x4E44_4B44);

// ---- ndiscore ----
assert_layout!(CM_PARTIAL_RESOURCE_DESCRIPTOR, size 0x14, align 4,
    Type @ 0x0, ShareDisposition @ 0x1, Flags @ 0x2, u @ 0x4);
assert_layout!(NDIS_INTERRUPT_MODERATION_PARAMETERS, size 0xC, align 4,
    Header @ 0x0, Flags @ 0x4, InterruptModeration @ 0x8);
const _: () = assert!(NDIS_SIZEOF_INTERRUPT_MODERATION_PARAMETERS_REVISION_1 == 0xC);
assert_layout!(NDIS_LINK_PARAMETERS, size 0x20, align 8, Header @ 0x0,
    MediaDuplexState @ 0x4, XmitLinkSpeed @ 0x8, RcvLinkSpeed @ 0x10, PauseFunctions @ 0x18,
    AutoNegotiationFlags @ 0x1C);
const _: () = assert!(NDIS_SIZEOF_LINK_PARAMETERS_REVISION_1 == 0x20);
assert_layout!(NDIS_STATISTICS_INFO, size 0x98, align 8, Header @ 0x0,
    SupportedStatistics @ 0x4, ifInDiscards @ 0x8, ifHCInOctets @ 0x18, ifHCInUcastPkts @ 0x20,
    ifHCOutOctets @ 0x38, ifHCOutUcastPkts @ 0x40, ifHCOutBroadcastOctets @ 0x90);
const _: () = assert!(NDIS_SIZEOF_STATISTICS_INFO_REVISION_1 == 0x98);
