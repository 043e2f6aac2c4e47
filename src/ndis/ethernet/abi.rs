//! The Ethernet data path's NDIS declarations (ndis.h / nbl.h / ntddndis.h, x64 layouts per
//! the structure prototypes on Learn: `ns-nbl-net_buffer`, `ns-nbl-net_buffer_list`,
//! `nf-ndis-ndismindicatereceivenetbufferlists`, the 802.3 OIDs of `ntddndis.h`), beside the
//! shared `ndis::abi` (which holds the `NET_BUFFER_LIST` prefix this path reads and writes).
//! Layout only; asserted below.

use core::ffi::c_void;
use core::mem::offset_of;

use super::super::abi::{NDIS_HANDLE, NDIS_OID, NDIS_STATUS, NET_BUFFER_LIST};
use crate::os::mdl::MDL;

/// `NET_BUFFER` (one frame of a NET_BUFFER_LIST). The first 48 bytes are a union with an
/// `SLIST_HEADER`, which makes the structure 16-byte aligned on x64. `DataLength` is the
/// `ULONG` half of a `SIZE_T` union: read as the whole `usize`, its high half is 0.
#[repr(C, align(16))]
#[derive(Debug)]
pub struct NET_BUFFER {
    pub Next: *mut NET_BUFFER,
    pub CurrentMdl: *mut MDL,
    pub CurrentMdlOffset: u32,
    pub DataLength: usize,
    pub MdlChain: *mut MDL,
    pub DataOffset: u32,
    /// The end of the 48-byte union.
    pub _Pad: u32,
    pub ChecksumBias: u16,
    pub Reserved: u16,
    pub NdisPoolHandle: NDIS_HANDLE,
    pub NdisReserved: [*mut c_void; 2],
    pub ProtocolReserved: [*mut c_void; 6],
    pub MiniportReserved: [*mut c_void; 4],
    pub DataPhysicalAddress: u64,
    pub SharedMemoryInfo: *mut c_void,
}

// x64 (computed from the declaration: the 48-byte union, then the fields in order).
const _: () = {
    assert!(offset_of!(NET_BUFFER, CurrentMdl) == 0x08);
    assert!(offset_of!(NET_BUFFER, CurrentMdlOffset) == 0x10);
    assert!(offset_of!(NET_BUFFER, DataLength) == 0x18);
    assert!(offset_of!(NET_BUFFER, MdlChain) == 0x20);
    assert!(offset_of!(NET_BUFFER, DataOffset) == 0x28);
    assert!(offset_of!(NET_BUFFER, ChecksumBias) == 0x30);
    assert!(offset_of!(NET_BUFFER, NdisPoolHandle) == 0x38);
    assert!(offset_of!(NET_BUFFER, ProtocolReserved) == 0x50);
    assert!(offset_of!(NET_BUFFER, MiniportReserved) == 0x80);
    assert!(offset_of!(NET_BUFFER, DataPhysicalAddress) == 0xA0);
    assert!(core::mem::size_of::<NET_BUFFER>() == 0xB0);
    // The prefix of NET_BUFFER_LIST `ndis::abi` declares (no NetBufferListInfo array).
    assert!(offset_of!(NET_BUFFER_LIST, NdisReserved) == 0x30);
    assert!(offset_of!(NET_BUFFER_LIST, ProtocolReserved) == 0x40);
    assert!(offset_of!(NET_BUFFER_LIST, MiniportReserved) == 0x60);
    assert!(offset_of!(NET_BUFFER_LIST, Scratch) == 0x70);
    assert!(offset_of!(NET_BUFFER_LIST, SourceHandle) == 0x78);
    assert!(offset_of!(NET_BUFFER_LIST, Status) == 0x8C);
    assert!(core::mem::align_of::<NET_BUFFER_LIST>() == 16);
};

/// `NDIS_RECEIVE_FLAGS_DISPATCH_LEVEL`: the indication runs at DISPATCH_LEVEL.
pub const NDIS_RECEIVE_FLAGS_DISPATCH_LEVEL: u32 = 0x0000_0001;
/// `NDIS_RECEIVE_FLAGS_RESOURCES`: the miniport takes the NBLs back when the call returns.
pub const NDIS_RECEIVE_FLAGS_RESOURCES: u32 = 0x0000_0002;
/// `NDIS_RETURN_FLAGS_DISPATCH_LEVEL`.
pub const NDIS_RETURN_FLAGS_DISPATCH_LEVEL: u32 = 0x0000_0001;

/// `NDIS_STATUS_PAUSED`: a send while the adapter is paused or pausing.
pub const NDIS_STATUS_PAUSED: NDIS_STATUS = 0xC023_002A_u32 as i32;
/// `NDIS_STATUS_RESET_IN_PROGRESS`.
pub const NDIS_STATUS_RESET_IN_PROGRESS: NDIS_STATUS = 0xC001_000D_u32 as i32;
/// `NDIS_STATUS_MEDIA_DISCONNECTED`.
pub const NDIS_STATUS_MEDIA_DISCONNECTED: NDIS_STATUS = 0xC001_001F_u32 as i32;
/// `NDIS_STATUS_MULTICAST_FULL`.
pub const NDIS_STATUS_MULTICAST_FULL: NDIS_STATUS = 0xC001_0009_u32 as i32;

pub const OID_GEN_LINK_SPEED: NDIS_OID = 0x0001_0107;
pub const OID_GEN_DRIVER_VERSION: NDIS_OID = 0x0001_0110;
pub const OID_GEN_MAC_OPTIONS: NDIS_OID = 0x0001_0113;
pub const OID_GEN_MEDIA_CONNECT_STATUS: NDIS_OID = 0x0001_0114;
pub const OID_GEN_MAXIMUM_SEND_PACKETS: NDIS_OID = 0x0001_0115;
pub const OID_GEN_XMIT_ERROR: NDIS_OID = 0x0002_0103;
pub const OID_GEN_RCV_ERROR: NDIS_OID = 0x0002_0104;
pub const OID_GEN_RCV_NO_BUFFER: NDIS_OID = 0x0002_0105;
pub const OID_802_3_PERMANENT_ADDRESS: NDIS_OID = 0x0101_0101;
pub const OID_802_3_CURRENT_ADDRESS: NDIS_OID = 0x0101_0102;
pub const OID_802_3_MULTICAST_LIST: NDIS_OID = 0x0101_0103;
pub const OID_802_3_MAXIMUM_LIST_SIZE: NDIS_OID = 0x0101_0104;
pub const OID_802_3_RCV_ERROR_ALIGNMENT: NDIS_OID = 0x0102_0101;
pub const OID_802_3_XMIT_ONE_COLLISION: NDIS_OID = 0x0102_0102;
pub const OID_802_3_XMIT_MORE_COLLISIONS: NDIS_OID = 0x0102_0103;

/// `NDIS_MAC_OPTION_COPY_LOOKAHEAD_DATA | TRANSFERS_NOT_PEND | NO_LOOPBACK`: what an NDIS 6
/// Ethernet miniport without 802.1Q reports.
pub const MAC_OPTIONS: u32 = 0x0000_0001 | 0x0000_0004 | 0x0000_0008;

/// More `NDIS_STATISTICS_INFO.SupportedStatistics` bits (ntddndis.h).
pub const NDIS_STATISTICS_FLAGS_VALID_MULTICAST_FRAMES_RCV: u32 = 0x0000_0002;
pub const NDIS_STATISTICS_FLAGS_VALID_BROADCAST_FRAMES_RCV: u32 = 0x0000_0004;
pub const NDIS_STATISTICS_FLAGS_VALID_RCV_DISCARDS: u32 = 0x0000_0010;
pub const NDIS_STATISTICS_FLAGS_VALID_RCV_ERROR: u32 = 0x0000_0020;
pub const NDIS_STATISTICS_FLAGS_VALID_MULTICAST_FRAMES_XMIT: u32 = 0x0000_0080;
pub const NDIS_STATISTICS_FLAGS_VALID_BROADCAST_FRAMES_XMIT: u32 = 0x0000_0100;
pub const NDIS_STATISTICS_FLAGS_VALID_XMIT_ERROR: u32 = 0x0000_0400;
pub const NDIS_STATISTICS_FLAGS_VALID_XMIT_DISCARDS: u32 = 0x0000_8000;
pub const NDIS_STATISTICS_FLAGS_VALID_MULTICAST_BYTES_RCV: u32 = 0x0002_0000;
pub const NDIS_STATISTICS_FLAGS_VALID_BROADCAST_BYTES_RCV: u32 = 0x0004_0000;
pub const NDIS_STATISTICS_FLAGS_VALID_MULTICAST_BYTES_XMIT: u32 = 0x0010_0000;
pub const NDIS_STATISTICS_FLAGS_VALID_BROADCAST_BYTES_XMIT: u32 = 0x0020_0000;

/// `NET_BUFFER_LIST_POOL_PARAMETERS` (nbl.h), revision 1 (through `DataSize`): the receive
/// NBLs' pool (NdisAllocateNetBufferListPool).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NET_BUFFER_LIST_POOL_PARAMETERS {
    pub Header: super::super::abi::NDIS_OBJECT_HEADER,
    pub ProtocolId: u8,
    pub fAllocateNetBuffer: u8,
    pub ContextSize: u16,
    pub PoolTag: u32,
    pub DataSize: u32,
}
/// `NET_BUFFER_LIST_POOL_PARAMETERS_REVISION_1`.
pub const NET_BUFFER_LIST_POOL_PARAMETERS_REVISION_1: u8 = 1;
/// `NDIS_SIZEOF_NET_BUFFER_LIST_POOL_PARAMETERS_REVISION_1` (through `DataSize`).
pub const NDIS_SIZEOF_NET_BUFFER_LIST_POOL_PARAMETERS_REVISION_1: u16 = 0x10;
/// `NDIS_PROTOCOL_ID_DEFAULT`.
pub const NDIS_PROTOCOL_ID_DEFAULT: u8 = 0;

const _: () = {
    assert!(offset_of!(NET_BUFFER_LIST_POOL_PARAMETERS, ProtocolId) == 4);
    assert!(offset_of!(NET_BUFFER_LIST_POOL_PARAMETERS, ContextSize) == 6);
    assert!(offset_of!(NET_BUFFER_LIST_POOL_PARAMETERS, DataSize) == 0x0C);
    assert!(
        core::mem::size_of::<NET_BUFFER_LIST_POOL_PARAMETERS>()
            == NDIS_SIZEOF_NET_BUFFER_LIST_POOL_PARAMETERS_REVISION_1 as usize
    );
};

/// `PCI_WHICHSPACE_CONFIG`: NdisMGetBusData's configuration space.
pub const PCI_WHICHSPACE_CONFIG: u32 = 0;
