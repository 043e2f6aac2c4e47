//! Device Shared Region (§4): layout, `gos_info` built by shifting (§16 item 8), and `caps`
//! parsed into a typed [`Caps`] with the `PVRDMA_SUPPORTED` acceptance check.
#![deny(unsafe_code)]

use super::bytes::{Sink, get_u8, get_u16, get_u32, get_u64};
use super::error::PvrdmaError;
use super::regs::version;

/// DSR size in bytes.
pub const DSR_SIZE: usize = 280;
/// Size of `caps`.
pub const CAPS_SIZE: usize = 208;

/// Byte offsets in the DSR.
pub mod off {
    /// u32 driver_version (W).
    pub const DRIVER_VERSION: usize = 0;
    /// u32 gos_info bitfield + u32 pad (W).
    pub const GOS_INFO: usize = 8;
    /// u64 command slot address (W).
    pub const CMD_SLOT_DMA: usize = 16;
    /// u64 response slot address (W).
    pub const RESP_SLOT_DMA: usize = 24;
    /// Async event ring `{u32 num_pages, u32 reserved, u64 pdir_dma}` (W).
    pub const ASYNC_RING_PAGES: usize = 32;
    /// CQ-notification ring, same layout (W).
    pub const CQ_RING_PAGES: usize = 48;
    /// u32 uar_pfn / u64 uar_pfn64 (W).
    pub const UAR_PFN: usize = 64;
    /// caps (R).
    pub const CAPS: usize = 72;
}

/// Guest OS information (§4 bit layout, LSB first).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GosInfo {
    /// 0 unknown, 1 = 32-bit, 2 = 64-bit (2 bits).
    pub bits: u32,
    /// 0 unknown, 1 Linux (4 bits).
    pub os_type: u32,
    /// Version (16 bits).
    pub ver: u32,
    /// Misc (10 bits).
    pub misc: u32,
}

impl GosInfo {
    /// What this driver reports (M6): 64-bit, type 0, version 0.
    pub const DRIVER: GosInfo = GosInfo {
        bits: 2,
        os_type: 0,
        ver: 0,
        misc: 0,
    };

    /// The packed u32 (fields truncated to their widths).
    pub const fn to_u32(self) -> u32 {
        (self.bits & 0x3)
            | ((self.os_type & 0xF) << 2)
            | ((self.ver & 0xFFFF) << 6)
            | ((self.misc & 0x3FF) << 22)
    }
}

/// A device ring descriptor in the DSR.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingPages {
    /// Pages including the ring-state page.
    pub num_pages: u32,
    /// Page directory address.
    pub pdir_dma: u64,
}

/// The driver-written part of the DSR.
#[derive(Clone, Copy, Debug)]
pub struct DsrInit {
    /// `gos_info`.
    pub gos_info: GosInfo,
    /// Command slot page.
    pub cmd_slot_dma: u64,
    /// Response slot page.
    pub resp_slot_dma: u64,
    /// Async event ring.
    pub async_ring: RingPages,
    /// CQ-notification ring.
    pub cq_ring: RingPages,
    /// UAR page-0 PFN.
    pub uar_pfn: u64,
    /// Device VERSION (selects the 32- or 64-bit PFN form).
    pub device_version: u32,
}

/// Fills the driver-written fields of a zeroed DSR.
///
/// # Errors
///
/// [`PvrdmaError::InvalidParameter`] when the device is older than v19 and the PFN does not
/// fit the 32-bit field.
pub fn write_dsr(dsr: &mut [u8], init: &DsrInit) -> Result<(), PvrdmaError> {
    dsr.put_u32(off::DRIVER_VERSION, version::DRIVER);
    dsr.put_u32(off::GOS_INFO, init.gos_info.to_u32());
    dsr.put_u64(off::CMD_SLOT_DMA, init.cmd_slot_dma);
    dsr.put_u64(off::RESP_SLOT_DMA, init.resp_slot_dma);
    for (o, r) in [
        (off::ASYNC_RING_PAGES, init.async_ring),
        (off::CQ_RING_PAGES, init.cq_ring),
    ] {
        dsr.put_u32(o, r.num_pages);
        dsr.put_u64(o + 8, r.pdir_dma);
    }
    if init.device_version >= version::PPN64 {
        dsr.put_u64(off::UAR_PFN, init.uar_pfn);
    } else {
        let pfn = u32::try_from(init.uar_pfn).map_err(|_| PvrdmaError::InvalidParameter)?;
        dsr.put_u32(off::UAR_PFN, pfn);
    }
    Ok(())
}

/// Device capabilities (§4 `caps`), as read after DSRHIGH.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct Caps {
    pub fw_ver: u64,
    /// Big-endian on the wire; kept as the 8 raw bytes.
    pub node_guid: [u8; 8],
    pub sys_image_guid: [u8; 8],
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub atomic_arg_sizes: u64,
    pub ex_comp_mask: u32,
    pub device_cap_flags2: u32,
    pub max_fa_bit_boundary: u32,
    pub log_max_atomic_inline_arg: u32,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub max_qp: u32,
    pub max_qp_wr: u32,
    pub device_cap_flags: u32,
    pub max_sge: u32,
    pub max_sge_rd: u32,
    pub max_cq: u32,
    pub max_cqe: u32,
    pub max_mr: u32,
    pub max_pd: u32,
    pub max_qp_rd_atom: u32,
    pub max_ee_rd_atom: u32,
    pub max_res_rd_atom: u32,
    pub max_qp_init_rd_atom: u32,
    pub max_ee_init_rd_atom: u32,
    pub max_ee: u32,
    pub max_rdd: u32,
    pub max_mw: u32,
    pub max_raw_ipv6_qp: u32,
    pub max_raw_ethy_qp: u32,
    pub max_mcast_grp: u32,
    pub max_mcast_qp_attach: u32,
    pub max_total_mcast_qp_attach: u32,
    pub max_ah: u32,
    pub max_fmr: u32,
    pub max_map_per_fmr: u32,
    pub max_srq: u32,
    pub max_srq_wr: u32,
    pub max_srq_sge: u32,
    pub max_uar: u32,
    pub gid_tbl_len: u32,
    pub max_pkeys: u16,
    pub local_ca_ack_delay: u8,
    pub phys_port_cnt: u8,
    pub mode: u8,
    pub atomic_ops: u8,
    pub bmme_flags: u8,
    pub gid_types: u8,
    /// Valid only for VERSION ≥ 18 (earlier: reserved).
    pub max_fast_reg_page_list_len: u32,
}

/// `bmme_flags` bits.
pub mod bmme {
    /// LOCAL_INV.
    pub const LOCAL_INV: u8 = 1 << 0;
    /// REMOTE_INV.
    pub const REMOTE_INV: u8 = 1 << 1;
    /// FAST_REG_WR.
    pub const FAST_REG_WR: u8 = 1 << 2;
}

/// `PVRDMA_MAX_FAST_REG_PAGES`: the fallback when `max_fast_reg_page_list_len` is not valid.
pub const MAX_FAST_REG_PAGES_FALLBACK: u32 = 128;

impl Caps {
    /// Decodes `caps` from its 208 bytes (offsets relative to `caps`).
    pub fn parse(b: &[u8]) -> Caps {
        Caps {
            fw_ver: get_u64(b, 0),
            node_guid: super::bytes::get(b, 8),
            sys_image_guid: super::bytes::get(b, 16),
            max_mr_size: get_u64(b, 24),
            page_size_cap: get_u64(b, 32),
            atomic_arg_sizes: get_u64(b, 40),
            ex_comp_mask: get_u32(b, 48),
            device_cap_flags2: get_u32(b, 52),
            max_fa_bit_boundary: get_u32(b, 56),
            log_max_atomic_inline_arg: get_u32(b, 60),
            vendor_id: get_u32(b, 64),
            vendor_part_id: get_u32(b, 68),
            hw_ver: get_u32(b, 72),
            max_qp: get_u32(b, 76),
            max_qp_wr: get_u32(b, 80),
            device_cap_flags: get_u32(b, 84),
            max_sge: get_u32(b, 88),
            max_sge_rd: get_u32(b, 92),
            max_cq: get_u32(b, 96),
            max_cqe: get_u32(b, 100),
            max_mr: get_u32(b, 104),
            max_pd: get_u32(b, 108),
            max_qp_rd_atom: get_u32(b, 112),
            max_ee_rd_atom: get_u32(b, 116),
            max_res_rd_atom: get_u32(b, 120),
            max_qp_init_rd_atom: get_u32(b, 124),
            max_ee_init_rd_atom: get_u32(b, 128),
            max_ee: get_u32(b, 132),
            max_rdd: get_u32(b, 136),
            max_mw: get_u32(b, 140),
            max_raw_ipv6_qp: get_u32(b, 144),
            max_raw_ethy_qp: get_u32(b, 148),
            max_mcast_grp: get_u32(b, 152),
            max_mcast_qp_attach: get_u32(b, 156),
            max_total_mcast_qp_attach: get_u32(b, 160),
            max_ah: get_u32(b, 164),
            max_fmr: get_u32(b, 168),
            max_map_per_fmr: get_u32(b, 172),
            max_srq: get_u32(b, 176),
            max_srq_wr: get_u32(b, 180),
            max_srq_sge: get_u32(b, 184),
            max_uar: get_u32(b, 188),
            gid_tbl_len: get_u32(b, 192),
            max_pkeys: get_u16(b, 196),
            local_ca_ack_delay: get_u8(b, 198),
            phys_port_cnt: get_u8(b, 199),
            mode: get_u8(b, 200),
            atomic_ops: get_u8(b, 201),
            bmme_flags: get_u8(b, 202),
            gid_types: get_u8(b, 203),
            max_fast_reg_page_list_len: get_u32(b, 204),
        }
    }

    /// Encodes `caps` (the inverse of [`Caps::parse`]; used by fake devices in tests).
    pub fn write(&self, b: &mut [u8]) {
        b.put_u64(0, self.fw_ver);
        b.put(8, &self.node_guid);
        b.put(16, &self.sys_image_guid);
        b.put_u64(24, self.max_mr_size);
        b.put_u64(32, self.page_size_cap);
        b.put_u64(40, self.atomic_arg_sizes);
        let u32s = [
            self.ex_comp_mask,
            self.device_cap_flags2,
            self.max_fa_bit_boundary,
            self.log_max_atomic_inline_arg,
            self.vendor_id,
            self.vendor_part_id,
            self.hw_ver,
            self.max_qp,
            self.max_qp_wr,
            self.device_cap_flags,
            self.max_sge,
            self.max_sge_rd,
            self.max_cq,
            self.max_cqe,
            self.max_mr,
            self.max_pd,
            self.max_qp_rd_atom,
            self.max_ee_rd_atom,
            self.max_res_rd_atom,
            self.max_qp_init_rd_atom,
            self.max_ee_init_rd_atom,
            self.max_ee,
            self.max_rdd,
            self.max_mw,
            self.max_raw_ipv6_qp,
            self.max_raw_ethy_qp,
            self.max_mcast_grp,
            self.max_mcast_qp_attach,
            self.max_total_mcast_qp_attach,
            self.max_ah,
            self.max_fmr,
            self.max_map_per_fmr,
            self.max_srq,
            self.max_srq_wr,
            self.max_srq_sge,
            self.max_uar,
            self.gid_tbl_len,
        ];
        for (i, v) in u32s.iter().enumerate() {
            b.put_u32(48 + 4 * i, *v);
        }
        b.put_u16(196, self.max_pkeys);
        b.put_u8(198, self.local_ca_ack_delay);
        b.put_u8(199, self.phys_port_cnt);
        b.put_u8(200, self.mode);
        b.put_u8(201, self.atomic_ops);
        b.put_u8(202, self.bmme_flags);
        b.put_u8(203, self.gid_types);
        b.put_u32(204, self.max_fast_reg_page_list_len);
    }

    /// `PVRDMA_SUPPORTED`: RoCE mode and `gid_types` exactly 1 or 2 for VERSION ≥ 18
    /// (exactly 1 for 17, which this driver refuses anyway).
    pub fn supported(&self, device_version: u32) -> bool {
        self.mode == 0
            && ((device_version == version::ROCEV1 && self.gid_types == 1)
                || (device_version >= version::ROCEV2
                    && (self.gid_types == 1 || self.gid_types == 2)))
    }

    /// Acceptance check at bring-up: `PVRDMA_SUPPORTED`, plus the limits this driver relies on
    /// (one port; handles fit 16 bits, §16 item 9).
    ///
    /// # Errors
    ///
    /// [`PvrdmaError::UnsupportedDevice`].
    pub fn check(&self, device_version: u32) -> Result<(), PvrdmaError> {
        if !self.supported(device_version)
            || self.phys_port_cnt < 1
            || self.max_qp > 65536
            || self.max_cq > 65536
            || self.max_srq > 65536
        {
            return Err(PvrdmaError::UnsupportedDevice);
        }
        Ok(())
    }

    /// `PVRDMA_GET_CAP(max_fast_reg_page_list_len)`: the field when VERSION ≥ 18 passes,
    /// else 128.
    pub fn max_fast_reg_pages(&self, device_version: u32) -> u32 {
        if device_version >= version::ROCEV2 && self.supported(device_version) {
            self.max_fast_reg_page_list_len
        } else {
            MAX_FAST_REG_PAGES_FALLBACK
        }
    }

    /// Whether all three memory-management extension bits are set (FRMR support).
    pub fn supports_frmr(&self) -> bool {
        self.bmme_flags & (bmme::LOCAL_INV | bmme::REMOTE_INV | bmme::FAST_REG_WR)
            == (bmme::LOCAL_INV | bmme::REMOTE_INV | bmme::FAST_REG_WR)
    }

    /// The model defaults of §4 (M5), for fake devices in tests.
    pub fn model_defaults() -> Caps {
        Caps {
            fw_ver: 1 << 32,
            max_mr_size: 1 << 30,
            page_size_cap: 0x1000,
            vendor_id: 0x15AD,
            vendor_part_id: 0x0820,
            hw_ver: 1,
            max_qp: 1024,
            max_qp_wr: 4096,
            max_sge: 16,
            max_sge_rd: 16,
            max_cq: 1024,
            max_cqe: 65536,
            max_mr: 16384,
            max_pd: 1024,
            max_qp_rd_atom: 16,
            max_res_rd_atom: 16384,
            max_qp_init_rd_atom: 16,
            max_ah: 1024,
            max_srq: 1024,
            max_srq_wr: 4096,
            max_srq_sge: 16,
            max_uar: 16,
            gid_tbl_len: 16,
            max_pkeys: 1,
            local_ca_ack_delay: 15,
            phys_port_cnt: 1,
            mode: 0,
            atomic_ops: 0,
            bmme_flags: 7,
            gid_types: 2,
            max_fast_reg_page_list_len: 512,
            ..Caps::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gos_info_shifts() {
        assert_eq!(GosInfo::DRIVER.to_u32(), 2);
        let g = GosInfo {
            bits: 1,
            os_type: 1,
            ver: 0xABCD,
            misc: 0x3FF,
        };
        assert_eq!(g.to_u32(), 1 | (1 << 2) | (0xABCD << 6) | (0x3FF << 22));
        let over = GosInfo {
            bits: 7,
            os_type: 0x1F,
            ver: 0x1_0000,
            misc: 0x400,
        };
        assert_eq!(over.to_u32(), 3 | (0xF << 2));
    }

    fn init(v: u32, pfn: u64) -> DsrInit {
        DsrInit {
            gos_info: GosInfo::DRIVER,
            cmd_slot_dma: 0x1111_2000,
            resp_slot_dma: 0x2222_3000,
            async_ring: RingPages {
                num_pages: 4,
                pdir_dma: 0x3_0000_4000,
            },
            cq_ring: RingPages {
                num_pages: 4,
                pdir_dma: 0x5000,
            },
            uar_pfn: pfn,
            device_version: v,
        }
    }

    #[test]
    fn dsr_bytes_at_exact_offsets() {
        let mut d = [0u8; DSR_SIZE];
        write_dsr(&mut d, &init(20, 0x1_2345_6789)).unwrap();
        let mut want = [0u8; DSR_SIZE];
        want[0] = 20;
        want[8] = 2;
        want[16..24].copy_from_slice(&0x1111_2000u64.to_le_bytes());
        want[24..32].copy_from_slice(&0x2222_3000u64.to_le_bytes());
        want[32] = 4;
        want[40..48].copy_from_slice(&0x3_0000_4000u64.to_le_bytes());
        want[48] = 4;
        want[56..64].copy_from_slice(&0x5000u64.to_le_bytes());
        want[64..72].copy_from_slice(&0x1_2345_6789u64.to_le_bytes());
        assert_eq!(d, want);
        let mut d18 = [0u8; DSR_SIZE];
        write_dsr(&mut d18, &init(18, 0xFEED)).unwrap();
        assert_eq!(&d18[64..72], &[0xED, 0xFE, 0, 0, 0, 0, 0, 0]);
        assert_eq!(
            write_dsr(&mut d18, &init(18, 1 << 32)),
            Err(PvrdmaError::InvalidParameter)
        );
    }

    #[test]
    fn caps_parse_offsets_and_acceptance() {
        let mut b = [0u8; CAPS_SIZE];
        b[0..8].copy_from_slice(&(1u64 << 32).to_le_bytes());
        b[8..16].copy_from_slice(&[0x02, 0x50, 0x56, 0xff, 0xfe, 0x00, 0x00, 0x01]);
        b[64..68].copy_from_slice(&0x15ADu32.to_le_bytes());
        b[76..80].copy_from_slice(&1024u32.to_le_bytes());
        b[88..92].copy_from_slice(&16u32.to_le_bytes());
        b[100..104].copy_from_slice(&65536u32.to_le_bytes());
        b[164..168].copy_from_slice(&1024u32.to_le_bytes());
        b[176..180].copy_from_slice(&7u32.to_le_bytes());
        b[192..196].copy_from_slice(&16u32.to_le_bytes());
        b[196..198].copy_from_slice(&1u16.to_le_bytes());
        b[199] = 1;
        b[202] = 7;
        b[203] = 2;
        b[204..208].copy_from_slice(&512u32.to_le_bytes());
        let c = Caps::parse(&b);
        assert_eq!(c.fw_ver, 1 << 32);
        assert_eq!(
            c.node_guid,
            [0x02, 0x50, 0x56, 0xff, 0xfe, 0x00, 0x00, 0x01]
        );
        assert_eq!(c.vendor_id, 0x15AD);
        assert_eq!(c.max_qp, 1024);
        assert_eq!(c.max_sge, 16);
        assert_eq!(c.max_cqe, 65536);
        assert_eq!(c.max_ah, 1024);
        assert_eq!(c.max_srq, 7);
        assert_eq!(c.gid_tbl_len, 16);
        assert_eq!(c.max_pkeys, 1);
        assert_eq!(c.phys_port_cnt, 1);
        assert_eq!(c.gid_types, 2);
        assert_eq!(c.max_fast_reg_page_list_len, 512);
        assert!(c.supports_frmr());
        assert_eq!(c.check(20), Ok(()));
        assert_eq!(c.max_fast_reg_pages(18), 512);
        let mut out = [0u8; CAPS_SIZE];
        c.write(&mut out);
        assert_eq!(out, b);

        let both = Caps { gid_types: 3, ..c };
        assert_eq!(both.check(20), Err(PvrdmaError::UnsupportedDevice));
        assert_eq!(both.max_fast_reg_pages(20), 128);
        let v1 = Caps { gid_types: 1, ..c };
        assert!(v1.supported(18) && v1.supported(17));
        assert!(!c.supported(17));
        let iwarp = Caps { mode: 1, ..c };
        assert_eq!(iwarp.check(19), Err(PvrdmaError::UnsupportedDevice));
        assert_eq!(Caps::model_defaults().check(20), Ok(()));
    }
}
