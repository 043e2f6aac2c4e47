//! NDIS_NDK_PERFORMANCE_COUNTERS (the "RDMA Activity" counter set, ndkpi.md §6.6) and the
//! general statistics, from what the NDK layer counted: the traffic per QP on the wire's
//! terms (`ndk::traffic`: RoCEv2 packets, whole Ethernet frames), CQs that failed, and the
//! connection engine's counts (`ndk::connect::conn_stats`: Connect, Accept, ConnectFailure,
//! ConnectionError; ActiveConnection is the connections OID_NDK_CONNECTIONS lists).
//! Every counter is kept (MissingCounterMask 0, `caps.rs`); what the traffic counters cannot
//! see is in `ndk::traffic`'s docs.
#![deny(unsafe_code)]

use super::abi::*;
use crate::ndk::connect::conn_stats::ConnCounters;
use crate::ndk::traffic::Traffic;

/// What the counters are assembled from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CounterSource {
    pub traffic: Traffic,
    pub cq_errors: u64,
    pub connections: ConnCounters,
}

/// The NDK counter set; Reserved fields are 0 as NDIS requires.
pub fn performance_counters(s: &CounterSource) -> NDIS_NDK_PERFORMANCE_COUNTERS {
    NDIS_NDK_PERFORMANCE_COUNTERS {
        Connect: s.connections.connect,
        Accept: s.connections.accept,
        ConnectFailure: s.connections.connect_failure,
        ConnectionError: s.connections.connection_error,
        ActiveConnection: s.connections.active,
        CQError: s.cq_errors,
        RDMAInOctets: s.traffic.in_octets,
        RDMAOutOctets: s.traffic.out_octets,
        RDMAInFrames: s.traffic.in_frames,
        RDMAOutFrames: s.traffic.out_frames,
        ..NDIS_NDK_PERFORMANCE_COUNTERS::default()
    }
}

/// NDIS_NDK_STATISTICS_INFO as bytes (header, Flags 0, the counters in field order).
pub fn statistics_info_bytes(c: &NDIS_NDK_PERFORMANCE_COUNTERS) -> [u8; STATISTICS_INFO_LEN] {
    let fields = [
        c.Connect,
        c.Accept,
        c.ConnectFailure,
        c.ConnectionError,
        c.ActiveConnection,
        c.Reserved01,
        c.Reserved02,
        c.Reserved03,
        c.Reserved04,
        c.Reserved05,
        c.Reserved06,
        c.Reserved07,
        c.Reserved08,
        c.Reserved09,
        c.Reserved10,
        c.Reserved11,
        c.Reserved12,
        c.Reserved13,
        c.Reserved14,
        c.Reserved15,
        c.Reserved16,
        c.Reserved17,
        c.Reserved18,
        c.Reserved19,
        c.Reserved20,
        c.CQError,
        c.RDMAInOctets,
        c.RDMAOutOctets,
        c.RDMAInFrames,
        c.RDMAOutFrames,
    ];
    let mut b = [0u8; STATISTICS_INFO_LEN];
    put_header(
        &mut b,
        NDIS_NDK_STATISTICS_INFO_REVISION_1,
        NDIS_SIZEOF_NDK_STATISTICS_INFO_REVISION_1,
    );
    for (chunk, v) in b
        .get_mut(COUNTERS_AT..)
        .unwrap_or_default()
        .chunks_exact_mut(8)
        .zip(fields)
    {
        chunk.copy_from_slice(&v.to_le_bytes());
    }
    b
}

/// `NDIS_SIZEOF_NDK_STATISTICS_INFO_REVISION_1`.
pub const STATISTICS_INFO_LEN: usize = NDIS_SIZEOF_NDK_STATISTICS_INFO_REVISION_1 as usize;
const COUNTERS_AT: usize = core::mem::offset_of!(NDIS_NDK_STATISTICS_INFO, CounterSet);

/// The general statistics count all traffic of the adapter, NDK's included (§6.6); this
/// function has no other traffic, so they are the RDMA counters. All of it is directed
/// (RDMA is unicast).
pub const SUPPORTED_STATISTICS: u32 = NDIS_STATISTICS_FLAGS_VALID_DIRECTED_FRAMES_RCV
    | NDIS_STATISTICS_FLAGS_VALID_BYTES_RCV
    | NDIS_STATISTICS_FLAGS_VALID_DIRECTED_FRAMES_XMIT
    | NDIS_STATISTICS_FLAGS_VALID_BYTES_XMIT
    | NDIS_STATISTICS_FLAGS_VALID_DIRECTED_BYTES_RCV
    | NDIS_STATISTICS_FLAGS_VALID_DIRECTED_BYTES_XMIT;

/// `NDIS_SIZEOF_STATISTICS_INFO_REVISION_1`.
pub const GEN_STATISTICS_LEN: usize = NDIS_SIZEOF_STATISTICS_INFO_REVISION_1 as usize;

/// NDIS_STATISTICS_INFO as bytes (OID_GEN_STATISTICS).
pub fn gen_statistics_bytes(t: &Traffic) -> [u8; GEN_STATISTICS_LEN] {
    let mut s = NDIS_STATISTICS_INFO {
        SupportedStatistics: SUPPORTED_STATISTICS,
        ifHCInOctets: t.in_octets,
        ifHCInUcastPkts: t.in_frames,
        ifHCOutOctets: t.out_octets,
        ifHCOutUcastPkts: t.out_frames,
        ifHCInUcastOctets: t.in_octets,
        ifHCOutUcastOctets: t.out_octets,
        ..NDIS_STATISTICS_INFO::default()
    };
    s.Header = NDIS_OBJECT_HEADER {
        Type: NDIS_OBJECT_TYPE_DEFAULT,
        Revision: NDIS_STATISTICS_INFO_REVISION_1,
        Size: NDIS_SIZEOF_STATISTICS_INFO_REVISION_1,
    };
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
    let mut b = [0u8; GEN_STATISTICS_LEN];
    put_header(&mut b, s.Header.Revision, s.Header.Size);
    if let Some(f) = b.get_mut(4..8) {
        f.copy_from_slice(&s.SupportedStatistics.to_le_bytes());
    }
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

/// An NDIS_OBJECT_HEADER {DEFAULT, revision, size} at the start of `b`.
pub(super) fn put_header(b: &mut [u8], revision: u8, size: u16) {
    if let Some(h) = b.get_mut(..4) {
        let s = size.to_le_bytes();
        h.copy_from_slice(&[NDIS_OBJECT_TYPE_DEFAULT, revision, s[0], s[1]]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u64_at(b: &[u8], off: usize) -> u64 {
        u64::from_le_bytes(b[off..off + 8].try_into().unwrap())
    }

    #[test]
    fn statistics_info_layout() {
        let src = CounterSource {
            traffic: Traffic {
                in_octets: 11,
                in_frames: 2,
                out_octets: 33,
                out_frames: 4,
            },
            cq_errors: 5,
            connections: ConnCounters {
                connect: 7,
                accept: 8,
                connect_failure: 9,
                connection_error: 10,
                active: 6,
            },
        };
        let c = performance_counters(&src);
        let b = statistics_info_bytes(&c);
        assert_eq!(&b[..8], &[0x80, 1, 0xF8, 0, 0, 0, 0, 0]);
        // Connect..ConnectionError, then ActiveConnection at counter 4.
        for (i, want) in [7, 8, 9, 10].into_iter().enumerate() {
            assert_eq!(u64_at(&b, 8 + 8 * i), want);
        }
        assert_eq!(u64_at(&b, 8 + 0x20), 6);
        for i in 5..25 {
            assert_eq!(u64_at(&b, 8 + 8 * i), 0, "Reserved{:02}", i - 4);
        }
        assert_eq!(u64_at(&b, 8 + 0xC8), 5);
        assert_eq!(u64_at(&b, 8 + 0xD0), 11);
        assert_eq!(u64_at(&b, 8 + 0xD8), 33);
        assert_eq!(u64_at(&b, 8 + 0xE0), 2);
        assert_eq!(u64_at(&b, 8 + 0xE8), 4);
    }

    #[test]
    fn gen_statistics_layout() {
        let b = gen_statistics_bytes(&Traffic {
            in_octets: 11,
            in_frames: 2,
            out_octets: 33,
            out_frames: 4,
        });
        assert_eq!(&b[..4], &[0x80, 1, 0x98, 0]);
        assert_eq!(u32::from_le_bytes(b[4..8].try_into().unwrap()), 0x0009_0249);
        assert_eq!(
            [0x18, 0x20, 0x38, 0x40, 0x68, 0x80].map(|o| u64_at(&b, o)),
            [11, 2, 33, 4, 11, 33]
        );
        assert_eq!(u64_at(&b, 0x8), 0);
        assert_eq!(u64_at(&b, 0x90), 0);
    }
}
