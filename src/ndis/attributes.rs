//! The general attributes InitializeEx sets (NDIS_MINIPORT_ADAPTER_GENERAL_ATTRIBUTES), as
//! plain values the FFI layer copies into the NDIS structure, and the constants the general
//! OIDs answer with.
//!
//! The PVRDMA function carries RDMA only (its Ethernet sibling is the vmxnet3 function of
//! the same slot, pvrdma.md §2): it presents itself as an 802.3 adapter with no send or
//! receive path of its own, so NDIS buffer sizes describe frames it never indicates.
#![deny(unsafe_code)]

use super::abi::*;
use super::counters::SUPPORTED_STATISTICS;
use super::link::LinkState;
use super::oid::SUPPORTED_OIDS;

pub use super::config::ETH_HEADER;
/// Packet filters OID_GEN_CURRENT_PACKET_FILTER accepts (there is no receive path to filter).
pub const SUPPORTED_PACKET_FILTERS: u32 = NDIS_PACKET_TYPE_DIRECTED
    | NDIS_PACKET_TYPE_MULTICAST
    | NDIS_PACKET_TYPE_ALL_MULTICAST
    | NDIS_PACKET_TYPE_BROADCAST
    | NDIS_PACKET_TYPE_PROMISCUOUS;
/// OID_GEN_VENDOR_ID: VMware's IEEE OUI 00-50-56 in the three low-order bytes' wire order,
/// NIC index 0 in the high byte.
pub const VENDOR_ID: u32 = u32::from_le_bytes([0x00, 0x50, 0x56, 0x00]);
/// OID_GEN_VENDOR_DESCRIPTION (NUL-terminated ANSI).
pub const VENDOR_DESCRIPTION: &[u8] = b"VMware PVRDMA RDMA adapter (pvrdma-ndk)\0";
/// OID_GEN_VENDOR_DRIVER_VERSION: major in the high word, minor in the low word.
pub const VENDOR_DRIVER_VERSION: u32 = (parse_u16(env!("CARGO_PKG_VERSION_MAJOR")) as u32) << 16
    | parse_u16(env!("CARGO_PKG_VERSION_MINOR")) as u32;

const fn parse_u16(s: &str) -> u16 {
    let mut rest = s.as_bytes();
    let mut v: u16 = 0;
    while let [c, tail @ ..] = rest {
        v = v.wrapping_mul(10).wrapping_add(c.wrapping_sub(b'0') as u16);
        rest = tail;
    }
    v
}

/// The general attributes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GeneralAttributes {
    pub media_type: u32,
    pub physical_medium_type: u32,
    pub mtu: u32,
    pub max_xmit_link_speed: u64,
    pub max_rcv_link_speed: u64,
    pub xmit_link_speed: u64,
    pub rcv_link_speed: u64,
    pub media_connect_state: u32,
    pub media_duplex_state: u32,
    pub lookahead_size: u32,
    pub max_multicast_list_size: u32,
    pub mac_address_length: u16,
    pub permanent_mac_address: [u8; 6],
    pub current_mac_address: [u8; 6],
    pub supported_packet_filters: u32,
    pub supported_statistics: u32,
    pub supported_oids: &'static [NDIS_OID],
}

impl GeneralAttributes {
    /// For a function whose MAC registers read `mac` (M3: format unconfirmed; only shown to
    /// NDIS), an Ethernet MTU of `mtu` (`*JumboPacket` less the header), the link as
    /// QUERY_PORT reported it and the port's speed as its maximum.
    pub fn new(mac: [u8; 6], mtu: u32, link: &LinkState, max_speed_bps: u64) -> Self {
        GeneralAttributes {
            media_type: NdisMedium802_3,
            physical_medium_type: NdisPhysicalMedium802_3,
            mtu,
            max_xmit_link_speed: max_speed_bps,
            max_rcv_link_speed: max_speed_bps,
            xmit_link_speed: link.speed_bps,
            rcv_link_speed: link.speed_bps,
            media_connect_state: link.media_connect_state(),
            media_duplex_state: MediaDuplexStateFull,
            lookahead_size: mtu,
            max_multicast_list_size: 0,
            mac_address_length: 6,
            permanent_mac_address: mac,
            current_mac_address: mac,
            supported_packet_filters: SUPPORTED_PACKET_FILTERS,
            supported_statistics: SUPPORTED_STATISTICS,
            supported_oids: SUPPORTED_OIDS,
        }
    }
}

/// The MAC from MACL (bytes 0–3, byte 0 in bits 7:0) and MACH (bytes 4–5) (M3).
pub fn mac_from_registers(macl: u32, mach: u32) -> [u8; 6] {
    let l = macl.to_le_bytes();
    let h = mach.to_le_bytes();
    [l[0], l[1], l[2], l[3], h[0], h[1]]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values() {
        assert_eq!(VENDOR_ID.to_le_bytes(), [0x00, 0x50, 0x56, 0x00]);
        assert_eq!(VENDOR_DRIVER_VERSION, 0x0000_0001);
        assert_eq!(VENDOR_DESCRIPTION.last(), Some(&0));
        assert_eq!(
            mac_from_registers(0x5600_5000 | 0x0c, 0xAB_29),
            [0x0c, 0x50, 0x00, 0x56, 0x29, 0xAB]
        );
        let link = LinkState {
            connected: true,
            speed_bps: 25_000_000_000,
        };
        let g = GeneralAttributes::new([1, 2, 3, 4, 5, 6], 1500, &link, 25_000_000_000);
        assert_eq!(
            (g.mtu, g.lookahead_size, g.mac_address_length),
            (1500, 1500, 6)
        );
        assert_eq!(
            (
                g.xmit_link_speed,
                g.max_rcv_link_speed,
                g.media_connect_state
            ),
            (25_000_000_000, 25_000_000_000, MediaConnectStateConnected)
        );
        assert!(g.supported_oids.contains(&OID_NDK_STATISTICS));
    }
}
