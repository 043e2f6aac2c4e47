//! OID requests of the vmxnet3 Ethernet adapter, with the conventions of `ndis::oid` (nothing
//! written before a request is validated nor past its buffer; short query buffers
//! NDIS_STATUS_BUFFER_TOO_SHORT with BytesNeeded; short set buffers
//! NDIS_STATUS_INVALID_LENGTH; an OID not in [`ETH_SUPPORTED_OIDS`]
//! NDIS_STATUS_NOT_SUPPORTED): the mandatory general OIDs, the 802.3 ones (addresses,
//! multicast list, the three error counters), the packet filter, and the statistics from the
//! device's UPT1 counters (GET_STATS, summed over activations) and the driver's own.
#![deny(unsafe_code)]

use super::super::abi::*;
use super::super::attributes::{SUPPORTED_PACKET_FILTERS, VENDOR_DRIVER_VERSION, VENDOR_ID};
use super::super::counters::put_header;
use super::super::oid::{OidResult, answer, answer_counter, answer_u32, read_u32, set_object};
use super::abi::*;
use super::miniport::{ETH_HEADER, ETH_MTU, EthMiniport, MAX_MULTICAST};

/// OID_GEN_VENDOR_DESCRIPTION of the Ethernet adapter (NUL-terminated ANSI).
pub const ETH_VENDOR_DESCRIPTION: &[u8] = b"VMware vmxnet3 Ethernet adapter (pvrdma-ndk)\0";

/// What the Ethernet adapter answers (its general attributes' SupportedOidList).
pub const ETH_SUPPORTED_OIDS: &[NDIS_OID] = &[
    OID_GEN_SUPPORTED_LIST,
    OID_GEN_HARDWARE_STATUS,
    OID_GEN_MEDIA_SUPPORTED,
    OID_GEN_MEDIA_IN_USE,
    OID_GEN_MAXIMUM_LOOKAHEAD,
    OID_GEN_MAXIMUM_FRAME_SIZE,
    OID_GEN_LINK_SPEED,
    OID_GEN_TRANSMIT_BUFFER_SPACE,
    OID_GEN_RECEIVE_BUFFER_SPACE,
    OID_GEN_TRANSMIT_BLOCK_SIZE,
    OID_GEN_RECEIVE_BLOCK_SIZE,
    OID_GEN_VENDOR_ID,
    OID_GEN_VENDOR_DESCRIPTION,
    OID_GEN_CURRENT_PACKET_FILTER,
    OID_GEN_CURRENT_LOOKAHEAD,
    OID_GEN_DRIVER_VERSION,
    OID_GEN_MAXIMUM_TOTAL_SIZE,
    OID_GEN_MAC_OPTIONS,
    OID_GEN_MEDIA_CONNECT_STATUS,
    OID_GEN_MAXIMUM_SEND_PACKETS,
    OID_GEN_VENDOR_DRIVER_VERSION,
    OID_GEN_LINK_PARAMETERS,
    OID_GEN_INTERRUPT_MODERATION,
    OID_GEN_XMIT_OK,
    OID_GEN_RCV_OK,
    OID_GEN_XMIT_ERROR,
    OID_GEN_RCV_ERROR,
    OID_GEN_RCV_NO_BUFFER,
    OID_GEN_STATISTICS,
    OID_802_3_PERMANENT_ADDRESS,
    OID_802_3_CURRENT_ADDRESS,
    OID_802_3_MULTICAST_LIST,
    OID_802_3_MAXIMUM_LIST_SIZE,
    OID_802_3_RCV_ERROR_ALIGNMENT,
    OID_802_3_XMIT_ONE_COLLISION,
    OID_802_3_XMIT_MORE_COLLISIONS,
];

/// What a paired adapter answers besides: the four NDK OIDs (ndkpi.md §6.6), served by the
/// slot's RDMA function (`ndis::pair::NicNdk`).
pub const NDK_OIDS: &[NDIS_OID] = &[
    OID_NDK_SET_STATE,
    OID_NDK_STATISTICS,
    OID_NDK_CONNECTIONS,
    OID_NDK_LOCAL_ENDPOINTS,
];

/// The supported-OID list of an adapter offering NDK (its general attributes and
/// OID_GEN_SUPPORTED_LIST): [`ETH_SUPPORTED_OIDS`], then [`NDK_OIDS`].
pub const ETH_NDK_SUPPORTED_OIDS: [NDIS_OID; ETH_SUPPORTED_OIDS.len() + NDK_OIDS.len()] =
    concat_oids(ETH_SUPPORTED_OIDS, NDK_OIDS);

// Only evaluated at compile time (the const above): an index out of bounds is a build error,
// never a panic at run time.
#[allow(clippy::indexing_slicing)]
const fn concat_oids<const N: usize>(a: &[NDIS_OID], b: &[NDIS_OID]) -> [NDIS_OID; N] {
    let mut out = [0; N];
    let mut i = 0;
    while i < a.len() {
        out[i] = a[i];
        i += 1;
    }
    let mut j = 0;
    while j < b.len() {
        out[i + j] = b[j];
        j += 1;
    }
    out
}

/// The statistics OID_GEN_STATISTICS fills.
pub const ETH_SUPPORTED_STATISTICS: u32 = NDIS_STATISTICS_FLAGS_VALID_DIRECTED_FRAMES_RCV
    | NDIS_STATISTICS_FLAGS_VALID_MULTICAST_FRAMES_RCV
    | NDIS_STATISTICS_FLAGS_VALID_BROADCAST_FRAMES_RCV
    | NDIS_STATISTICS_FLAGS_VALID_BYTES_RCV
    | NDIS_STATISTICS_FLAGS_VALID_RCV_DISCARDS
    | NDIS_STATISTICS_FLAGS_VALID_RCV_ERROR
    | NDIS_STATISTICS_FLAGS_VALID_DIRECTED_FRAMES_XMIT
    | NDIS_STATISTICS_FLAGS_VALID_MULTICAST_FRAMES_XMIT
    | NDIS_STATISTICS_FLAGS_VALID_BROADCAST_FRAMES_XMIT
    | NDIS_STATISTICS_FLAGS_VALID_BYTES_XMIT
    | NDIS_STATISTICS_FLAGS_VALID_XMIT_ERROR
    | NDIS_STATISTICS_FLAGS_VALID_XMIT_DISCARDS
    | NDIS_STATISTICS_FLAGS_VALID_DIRECTED_BYTES_RCV
    | NDIS_STATISTICS_FLAGS_VALID_MULTICAST_BYTES_RCV
    | NDIS_STATISTICS_FLAGS_VALID_BROADCAST_BYTES_RCV
    | NDIS_STATISTICS_FLAGS_VALID_DIRECTED_BYTES_XMIT
    | NDIS_STATISTICS_FLAGS_VALID_MULTICAST_BYTES_XMIT
    | NDIS_STATISTICS_FLAGS_VALID_BROADCAST_BYTES_XMIT;

/// UPT1 counter indices (vmxnet3.md V13): Tx / Rx unicast, multicast, broadcast packets and
/// bytes, then Tx error, discard and Rx out-of-buffers, error.
const UCAST_PKTS: usize = 2;
const UCAST_BYTES: usize = 3;
const MCAST_PKTS: usize = 4;
const MCAST_BYTES: usize = 5;
const BCAST_PKTS: usize = 6;
const BCAST_BYTES: usize = 7;
const TX_ERROR: usize = 8;
const TX_DISCARD: usize = 9;
const RX_NO_BUFFER: usize = 8;
const RX_ERROR: usize = 9;

/// NDIS_STATISTICS_INFO for the adapter.
pub fn statistics_info(m: &EthMiniport) -> NDIS_STATISTICS_INFO {
    let (s, c) = m.statistics();
    let t = |i: usize| s.tx.get(i).copied().unwrap_or(0);
    let r = |i: usize| s.rx.get(i).copied().unwrap_or(0);
    NDIS_STATISTICS_INFO {
        Header: NDIS_OBJECT_HEADER {
            Type: NDIS_OBJECT_TYPE_DEFAULT,
            Revision: NDIS_STATISTICS_INFO_REVISION_1,
            Size: NDIS_SIZEOF_STATISTICS_INFO_REVISION_1,
        },
        SupportedStatistics: ETH_SUPPORTED_STATISTICS,
        ifInDiscards: r(RX_NO_BUFFER) + c.rx_not_running,
        ifInErrors: r(RX_ERROR),
        ifHCInOctets: r(UCAST_BYTES) + r(MCAST_BYTES) + r(BCAST_BYTES),
        ifHCInUcastPkts: r(UCAST_PKTS),
        ifHCInMulticastPkts: r(MCAST_PKTS),
        ifHCInBroadcastPkts: r(BCAST_PKTS),
        ifHCOutOctets: t(UCAST_BYTES) + t(MCAST_BYTES) + t(BCAST_BYTES),
        ifHCOutUcastPkts: t(UCAST_PKTS),
        ifHCOutMulticastPkts: t(MCAST_PKTS),
        ifHCOutBroadcastPkts: t(BCAST_PKTS),
        ifOutErrors: t(TX_ERROR) + c.tx_unmappable,
        ifOutDiscards: t(TX_DISCARD),
        ifHCInUcastOctets: r(UCAST_BYTES),
        ifHCInMulticastOctets: r(MCAST_BYTES),
        ifHCInBroadcastOctets: r(BCAST_BYTES),
        ifHCOutUcastOctets: t(UCAST_BYTES),
        ifHCOutMulticastOctets: t(MCAST_BYTES),
        ifHCOutBroadcastOctets: t(BCAST_BYTES),
    }
}

fn statistics_bytes(
    s: &NDIS_STATISTICS_INFO,
) -> [u8; NDIS_SIZEOF_STATISTICS_INFO_REVISION_1 as usize] {
    let mut b = [0u8; NDIS_SIZEOF_STATISTICS_INFO_REVISION_1 as usize];
    put_header(&mut b, s.Header.Revision, s.Header.Size);
    if let Some(f) = b.get_mut(4..8) {
        f.copy_from_slice(&s.SupportedStatistics.to_le_bytes());
    }
    let fields = [
        s.ifInDiscards,
        s.ifInErrors,
        s.ifHCInOctets,
        s.ifHCInUcastPkts,
        s.ifHCInMulticastPkts,
        s.ifHCInBroadcastPkts,
        s.ifHCOutOctets,
        s.ifHCOutUcastPkts,
        s.ifHCOutMulticastPkts,
        s.ifHCOutBroadcastPkts,
        s.ifOutErrors,
        s.ifOutDiscards,
        s.ifHCInUcastOctets,
        s.ifHCInMulticastOctets,
        s.ifHCInBroadcastOctets,
        s.ifHCOutUcastOctets,
        s.ifHCOutMulticastOctets,
        s.ifHCOutBroadcastOctets,
    ];
    let at = core::mem::offset_of!(NDIS_STATISTICS_INFO, ifInDiscards);
    for (chunk, v) in b
        .get_mut(at..)
        .unwrap_or_default()
        .chunks_exact_mut(8)
        .zip(fields)
    {
        chunk.copy_from_slice(&v.to_le_bytes());
    }
    b
}

impl EthMiniport {
    /// A query OID request.
    pub fn query_oid(&self, oid: NDIS_OID, buf: &mut [u8]) -> OidResult {
        let frame = ETH_MTU + ETH_HEADER;
        let ndk = self.ndk();
        if let Some(r) = ndk.as_ref().and_then(|n| n.query_oid(oid, buf)) {
            return r;
        }
        match oid {
            OID_GEN_SUPPORTED_LIST => {
                let extra = if ndk.is_some() { NDK_OIDS } else { &[] };
                let needed = (ETH_SUPPORTED_OIDS.len() + extra.len()) * 4;
                match buf.get_mut(..needed) {
                    Some(out) => {
                        for (c, o) in out
                            .chunks_exact_mut(4)
                            .zip(ETH_SUPPORTED_OIDS.iter().chain(extra))
                        {
                            c.copy_from_slice(&o.to_le_bytes());
                        }
                        OidResult::done(needed)
                    }
                    None => OidResult::needs(NDIS_STATUS_BUFFER_TOO_SHORT, needed),
                }
            }
            OID_GEN_STATISTICS => {
                // The miniport writes the header (Learn, OID_GEN_STATISTICS): NDIS and
                // overlying drivers need not fill one in the buffer they query with.
                let s = statistics_bytes(&statistics_info(self));
                answer(buf, &s)
            }
            OID_GEN_INTERRUPT_MODERATION => {
                let mut b = [0u8; NDIS_SIZEOF_INTERRUPT_MODERATION_PARAMETERS_REVISION_1 as usize];
                put_header(
                    &mut b,
                    NDIS_INTERRUPT_MODERATION_PARAMETERS_REVISION_1,
                    NDIS_SIZEOF_INTERRUPT_MODERATION_PARAMETERS_REVISION_1,
                );
                if let Some(m) = b.get_mut(8..12) {
                    m.copy_from_slice(&NdisInterruptModerationNotSupported.to_le_bytes());
                }
                answer(buf, &b)
            }
            OID_GEN_HARDWARE_STATUS => answer_u32(buf, NdisHardwareStatusReady),
            OID_GEN_MEDIA_SUPPORTED | OID_GEN_MEDIA_IN_USE => answer_u32(buf, NdisMedium802_3),
            OID_GEN_MAXIMUM_LOOKAHEAD | OID_GEN_MAXIMUM_FRAME_SIZE => answer_u32(buf, ETH_MTU),
            OID_GEN_CURRENT_LOOKAHEAD => answer_u32(buf, self.lookahead()),
            OID_GEN_CURRENT_PACKET_FILTER => answer_u32(buf, self.packet_filter()),
            OID_GEN_LINK_SPEED => {
                // Units of 100 bps; 0 when disconnected or unknown.
                let l = self.link();
                let v = if l.connected && l.speed_bps != NDIS_LINK_SPEED_UNKNOWN {
                    u32::try_from(l.speed_bps / 100).unwrap_or(u32::MAX)
                } else {
                    0
                };
                answer_u32(buf, v)
            }
            OID_GEN_MEDIA_CONNECT_STATUS => answer_u32(buf, self.link().media_connect_state()),
            OID_GEN_MAXIMUM_TOTAL_SIZE
            | OID_GEN_TRANSMIT_BLOCK_SIZE
            | OID_GEN_RECEIVE_BLOCK_SIZE => answer_u32(buf, frame),
            OID_GEN_TRANSMIT_BUFFER_SPACE | OID_GEN_RECEIVE_BUFFER_SPACE => {
                let n = self.nic().map_or(0, |_| 256u32);
                answer_u32(buf, n * frame)
            }
            OID_GEN_MAC_OPTIONS => answer_u32(buf, MAC_OPTIONS),
            OID_GEN_MAXIMUM_SEND_PACKETS => answer_u32(buf, 1),
            OID_GEN_VENDOR_ID => answer_u32(buf, VENDOR_ID),
            OID_GEN_VENDOR_DESCRIPTION => answer(buf, ETH_VENDOR_DESCRIPTION),
            OID_GEN_DRIVER_VERSION => {
                let v = (u16::from(NDIS_MINIPORT_MAJOR_VERSION) << 8)
                    | u16::from(NDIS_MINIPORT_MINOR_VERSION);
                answer(buf, &v.to_le_bytes())
            }
            OID_GEN_VENDOR_DRIVER_VERSION => answer_u32(buf, VENDOR_DRIVER_VERSION),
            OID_GEN_XMIT_OK => {
                let s = statistics_info(self);
                answer_counter(
                    buf,
                    s.ifHCOutUcastPkts + s.ifHCOutMulticastPkts + s.ifHCOutBroadcastPkts,
                )
            }
            OID_GEN_RCV_OK => {
                let s = statistics_info(self);
                answer_counter(
                    buf,
                    s.ifHCInUcastPkts + s.ifHCInMulticastPkts + s.ifHCInBroadcastPkts,
                )
            }
            OID_GEN_XMIT_ERROR => answer_counter(buf, statistics_info(self).ifOutErrors),
            OID_GEN_RCV_ERROR => answer_counter(buf, statistics_info(self).ifInErrors),
            OID_GEN_RCV_NO_BUFFER => {
                let (s, _) = self.statistics();
                answer_counter(buf, s.rx.get(RX_NO_BUFFER).copied().unwrap_or(0))
            }
            OID_802_3_PERMANENT_ADDRESS => answer(buf, &self.permanent_mac()),
            OID_802_3_CURRENT_ADDRESS => answer(buf, &self.mac()),
            OID_802_3_MULTICAST_LIST => {
                let mut list = [[0u8; 6]; MAX_MULTICAST];
                let n = self.multicast_list(&mut list);
                let needed = n * 6;
                match buf.get_mut(..needed) {
                    Some(out) => {
                        for (c, m) in out.chunks_exact_mut(6).zip(&list) {
                            c.copy_from_slice(m);
                        }
                        OidResult::done(needed)
                    }
                    None => OidResult::needs(NDIS_STATUS_BUFFER_TOO_SHORT, needed),
                }
            }
            OID_802_3_MAXIMUM_LIST_SIZE => answer_u32(buf, MAX_MULTICAST as u32),
            // A virtual link has no alignment errors or collisions.
            OID_802_3_RCV_ERROR_ALIGNMENT
            | OID_802_3_XMIT_ONE_COLLISION
            | OID_802_3_XMIT_MORE_COLLISIONS => answer_counter(buf, 0),
            _ => OidResult::fail(NDIS_STATUS_NOT_SUPPORTED),
        }
    }

    /// A set OID request.
    pub fn set_oid(&self, oid: NDIS_OID, buf: &[u8]) -> OidResult {
        if let Some(r) = self.ndk().and_then(|n| n.set_oid(oid, buf)) {
            return r;
        }
        match oid {
            OID_GEN_CURRENT_PACKET_FILTER => match read_u32(buf) {
                None => OidResult::needs(NDIS_STATUS_INVALID_LENGTH, 4),
                Some(f) if f & !SUPPORTED_PACKET_FILTERS != 0 => {
                    OidResult::needs(NDIS_STATUS_NOT_SUPPORTED, 4)
                }
                Some(f) => match self.set_packet_filter(f) {
                    NDIS_STATUS_SUCCESS => OidResult::done(4),
                    st => OidResult::needs(st, 4),
                },
            },
            OID_GEN_CURRENT_LOOKAHEAD => match read_u32(buf) {
                None => OidResult::needs(NDIS_STATUS_INVALID_LENGTH, 4),
                Some(l) if l > ETH_MTU => OidResult::needs(NDIS_STATUS_INVALID_DATA, 4),
                Some(l) => {
                    self.set_lookahead(l);
                    OidResult::done(4)
                }
            },
            OID_802_3_MULTICAST_LIST => {
                if !buf.len().is_multiple_of(6) {
                    return OidResult::needs(NDIS_STATUS_INVALID_LENGTH, buf.len() / 6 * 6);
                }
                if buf.len() > MAX_MULTICAST * 6 {
                    return OidResult::needs(NDIS_STATUS_MULTICAST_FULL, MAX_MULTICAST * 6);
                }
                let mut list = [[0u8; 6]; MAX_MULTICAST];
                let mut n = 0;
                for (d, c) in list.iter_mut().zip(buf.chunks_exact(6)) {
                    d.copy_from_slice(c);
                    n += 1;
                }
                // Only group addresses belong in a multicast list.
                if list.get(..n).unwrap_or(&[]).iter().any(|m| m[0] & 1 == 0) {
                    return OidResult::needs(NDIS_STATUS_INVALID_DATA, buf.len());
                }
                match self.set_multicast_list(list.get(..n).unwrap_or(&[])) {
                    NDIS_STATUS_SUCCESS => OidResult::done(buf.len()),
                    st => OidResult::needs(st, buf.len()),
                }
            }
            OID_GEN_LINK_PARAMETERS => {
                set_object(buf, NDIS_SIZEOF_LINK_PARAMETERS_REVISION_1, |_| {
                    NDIS_STATUS_NOT_SUPPORTED
                })
            }
            OID_GEN_INTERRUPT_MODERATION => set_object(
                buf,
                NDIS_SIZEOF_INTERRUPT_MODERATION_PARAMETERS_REVISION_1,
                |b| match b.get(8..12).and_then(read_u32) {
                    Some(NdisInterruptModerationNotSupported) => NDIS_STATUS_SUCCESS,
                    _ => NDIS_STATUS_INVALID_DATA,
                },
            ),
            _ => OidResult::fail(NDIS_STATUS_NOT_SUPPORTED),
        }
    }

    /// A method OID request: none.
    pub fn method_oid(&self, _oid: NDIS_OID, _buf: &mut [u8], _input_len: usize) -> OidResult {
        OidResult::fail(NDIS_STATUS_NOT_SUPPORTED)
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::oid::check_header;
    use super::*;

    #[test]
    fn supported_list_has_no_duplicates() {
        for (i, o) in ETH_SUPPORTED_OIDS.iter().enumerate() {
            assert!(!ETH_SUPPORTED_OIDS[i + 1..].contains(o), "{o:#x}");
        }
    }

    #[test]
    fn header_check_is_shared() {
        assert!(check_header(&[0x80, 1, 4, 0], 4).is_ok());
    }
}
