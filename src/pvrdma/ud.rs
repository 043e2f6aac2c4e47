//! The UD/GSI formats (§10 `ud` union member and `pvrdma_av`, §14 "UD and GSI", M37): the
//! address vector of a datagram send, and the 40-byte GRH area the device writes in front of
//! every UD receive (IPv4: 20 bytes of zero and the IPv4 header; IPv6: the IPv6 header).
#![deny(unsafe_code)]

/// `IB_QP1_QKEY` (cm.md §2): the Q_Key of QP1 (its GSI QP's, set at RESET → INIT) and of
/// every MAD sent to a peer's QP1.
pub const QP1_QKEY: u32 = 0x8001_0000;

/// Bytes of GRH area in front of a UD receive's payload.
pub const GRH_LEN: usize = 40;

/// Where a datagram goes (`ud.remote_qpn`, `ud.remote_qkey`, `ud.av`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UdAddress {
    /// Destination QP number (24 bits; 1 for QP1).
    pub remote_qpn: u32,
    /// Destination Q_Key.
    pub remote_qkey: u32,
    /// The sending QP's PD (`av.port_pd` low 24 bits).
    pub pd: u32,
    /// Destination GID.
    pub dgid: [u8; 16],
    /// Destination MAC.
    pub dmac: [u8; 6],
    /// Source GID table index.
    pub sgid_index: u8,
    /// IP hop limit / TTL (0: the device's default).
    pub hop_limit: u8,
    /// IP traffic class / TOS.
    pub traffic_class: u8,
}

impl UdAddress {
    /// The `wr` union of a UD send WQE as [`super::wqe::SqHeader::body`]'s six little-endian
    /// words (@32..@80): `remote_qpn` @32, `remote_qkey` @36, then the AV @40: `port_pd`
    /// (`pd | port 1 << 24`) @40, `sl_tclass_flowlabel` @44, `dgid` @48, `src_path_bits`
    /// @64, `gid_index` @65, `stat_rate` @66, `hop_limit` @67, `dmac` @68.
    pub fn body(&self) -> [u64; 6] {
        let word = |b: [u8; 8]| u64::from_le_bytes(b);
        let [
            g0,
            g1,
            g2,
            g3,
            g4,
            g5,
            g6,
            g7,
            g8,
            g9,
            g10,
            g11,
            g12,
            g13,
            g14,
            g15,
        ] = self.dgid;
        let [m0, m1, m2, m3, m4, m5] = self.dmac;
        let port_pd = (self.pd & 0x00FF_FFFF) | 1 << 24;
        let tclass = u32::from(self.traffic_class) << 20;
        [
            u64::from(self.remote_qpn & 0x00FF_FFFF) | u64::from(self.remote_qkey) << 32,
            u64::from(port_pd) | u64::from(tclass) << 32,
            word([g0, g1, g2, g3, g4, g5, g6, g7]),
            word([g8, g9, g10, g11, g12, g13, g14, g15]),
            word([0, self.sgid_index, 0, self.hop_limit, m0, m1, m2, m3]),
            word([m4, m5, 0, 0, 0, 0, 0, 0]),
        ]
    }
}

/// What the GRH area of a UD receive says about the datagram (never trusted further than
/// this: the version is checked, and a GID is built only from the address fields).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grh {
    /// The sender's GID (its source IP address; IPv4 as `::ffff:a.b.c.d`).
    pub sgid: [u8; 16],
    /// The GID the datagram was sent to.
    pub dgid: [u8; 16],
    /// TTL / hop limit as received.
    pub hop_limit: u8,
    /// TOS / traffic class as received.
    pub traffic_class: u8,
    /// IPv4 (true) or IPv6.
    pub ipv4: bool,
}

impl Grh {
    /// Parses a GRH area; `None` when neither an IPv4 header without options (version 4,
    /// IHL 5) at byte 20 nor an IPv6 header (version 6) at byte 0 is there.
    pub fn parse(area: &[u8; GRH_LEN]) -> Option<Grh> {
        let v4 = |a: &[u8]| -> Option<[u8; 16]> {
            let mut g = [0u8; 16];
            g[10] = 0xFF;
            g[11] = 0xFF;
            g.get_mut(12..)?.copy_from_slice(a);
            Some(g)
        };
        // Byte 0 tells them apart: an IPv6 header's is its version (6), the IPv4 area's is
        // the first of its 20 zero bytes.
        if area[0] == 0 && area[20] == 0x45 {
            Some(Grh {
                sgid: v4(area.get(32..36)?)?,
                dgid: v4(area.get(36..40)?)?,
                hop_limit: area[28],
                traffic_class: area[21],
                ipv4: true,
            })
        } else if area[0] >> 4 == 6 {
            Self::v6(area)
        } else {
            None
        }
    }

    fn v6(area: &[u8; GRH_LEN]) -> Option<Grh> {
        Some(Grh {
            sgid: area.get(8..24)?.try_into().ok()?,
            dgid: area.get(24..40)?.try_into().ok()?,
            hop_limit: area[7],
            traffic_class: (area[0] & 0x0F) << 4 | area[1] >> 4,
            ipv4: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ud_body_places_every_field_at_its_offset() {
        let a = UdAddress {
            remote_qpn: 1,
            remote_qkey: QP1_QKEY,
            pd: 7,
            dgid: core::array::from_fn(|i| i as u8 + 1),
            dmac: [0xA1, 0xA2, 0xA3, 0xA4, 0xA5, 0xA6],
            sgid_index: 3,
            hop_limit: 64,
            traffic_class: 0x28,
        };
        let mut wqe = [0u8; 80];
        for (i, w) in a.body().iter().enumerate() {
            wqe[32 + 8 * i..40 + 8 * i].copy_from_slice(&w.to_le_bytes());
        }
        assert_eq!(&wqe[32..36], &1u32.to_le_bytes());
        assert_eq!(&wqe[36..40], &0x8001_0000u32.to_le_bytes());
        assert_eq!(&wqe[40..44], &(7u32 | 1 << 24).to_le_bytes());
        assert_eq!(&wqe[44..48], &(0x28u32 << 20).to_le_bytes());
        assert_eq!(&wqe[48..64], &a.dgid);
        assert_eq!(wqe[64], 0);
        assert_eq!(wqe[65], 3);
        assert_eq!(wqe[66], 0);
        assert_eq!(wqe[67], 64);
        assert_eq!(&wqe[68..74], &a.dmac);
        assert_eq!(&wqe[74..80], &[0; 6]);
    }

    #[test]
    fn grh_of_ipv4_and_ipv6() {
        let mut a = [0u8; GRH_LEN];
        a[20] = 0x45;
        a[21] = 0x10;
        a[28] = 63;
        a[32..36].copy_from_slice(&[10, 0, 0, 2]);
        a[36..40].copy_from_slice(&[10, 0, 0, 1]);
        let g = Grh::parse(&a).expect("IPv4");
        assert!(g.ipv4);
        assert_eq!(&g.sgid[10..], &[0xFF, 0xFF, 10, 0, 0, 2]);
        assert_eq!(&g.dgid[12..], &[10, 0, 0, 1]);
        assert_eq!((g.hop_limit, g.traffic_class), (63, 0x10));

        let mut b = [0u8; GRH_LEN];
        b[0] = 0x62;
        b[1] = 0x30;
        b[7] = 9;
        b[8] = 0xFD;
        b[23] = 2;
        b[24] = 0xFD;
        // A source address byte that looks like an IPv4 header start stays IPv6.
        b[20] = 0x45;
        b[39] = 1;
        let g = Grh::parse(&b).expect("IPv6");
        assert!(!g.ipv4);
        assert_eq!((g.sgid[0], g.sgid[15], g.dgid[15]), (0xFD, 2, 1));
        assert_eq!((g.hop_limit, g.traffic_class), (9, 0x23));

        assert_eq!(Grh::parse(&[0u8; GRH_LEN]), None, "no header");
        let mut opts = a;
        opts[20] = 0x46;
        assert_eq!(Grh::parse(&opts), None, "IPv4 options do not fit");
        let mut junk = a;
        junk[0] = 0x11;
        assert_eq!(Grh::parse(&junk), None, "IPv4 needs 20 zero-led bytes");
    }
}
