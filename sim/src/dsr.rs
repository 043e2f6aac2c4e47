//! Device Shared Region and device capabilities (reference §4; M4, M5, M41-M43), plus the
//! test-configurable [`DeviceConfig`].
#![deny(unsafe_code)]

use crate::le::Le;

/// DSR size in bytes.
pub const DSR_SIZE: usize = 280;
/// Offset of `caps` in the DSR.
pub const CAPS_OFF: usize = 72;
/// Size of `caps`.
pub const CAPS_SIZE: usize = 208;

/// DSR field offsets.
pub mod field {
    /// u32 driver_version.
    pub const DRIVER_VERSION: usize = 0;
    /// u64 gos_info.
    pub const GOS_INFO: usize = 8;
    /// u64 command slot.
    pub const CMD_SLOT: usize = 16;
    /// u64 response slot.
    pub const RESP_SLOT: usize = 24;
    /// Async ring `{u32 num_pages; u32 reserved; u64 pdir_dma}`.
    pub const ASYNC_RING: usize = 32;
    /// CQ-notification ring, same layout.
    pub const CQ_RING: usize = 48;
    /// uar_pfn (u32) / uar_pfn64 (u64).
    pub const UAR_PFN: usize = 64;
}

/// Every `caps` value (§4); defaults per M5.
#[derive(Clone, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct Caps {
    pub fw_ver: u64,
    /// `None` = EUI-64 of the MAC (M5).
    pub node_guid: Option<[u8; 8]>,
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
    pub max_ah: u32,
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
    pub max_fast_reg_page_list_len: u32,
}

impl Default for Caps {
    fn default() -> Self {
        Self {
            fw_ver: 1 << 32,
            node_guid: None,
            max_mr_size: 1 << 30,
            page_size_cap: 0x1000,
            atomic_arg_sizes: 0,
            ex_comp_mask: 0,
            device_cap_flags2: 0,
            max_fa_bit_boundary: 0,
            log_max_atomic_inline_arg: 0,
            vendor_id: 0x15AD,
            vendor_part_id: 0x0820,
            hw_ver: 1,
            max_qp: 1024,
            max_qp_wr: 4096,
            device_cap_flags: 0,
            max_sge: 16,
            max_sge_rd: 16,
            max_cq: 1024,
            max_cqe: 65536,
            max_mr: 16384,
            max_pd: 1024,
            max_qp_rd_atom: 16,
            max_ee_rd_atom: 0,
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
        }
    }
}

/// EUI-64 derived from a MAC (node GUID, stored big-endian, M5).
pub fn eui64(mac: [u8; 6]) -> [u8; 8] {
    [
        mac[0] ^ 2,
        mac[1],
        mac[2],
        0xFF,
        0xFE,
        mac[3],
        mac[4],
        mac[5],
    ]
}

impl Caps {
    /// The 208-byte `caps` image; `mac` feeds the default GUIDs.
    pub fn emit(&self, mac: [u8; 6]) -> [u8; CAPS_SIZE] {
        let mut b = Le([0u8; CAPS_SIZE]);
        let guid = self.node_guid.unwrap_or_else(|| eui64(mac));
        b.set_u64(0, self.fw_ver);
        b.set_bytes(8, &guid);
        b.set_bytes(16, &guid);
        b.set_u64(24, self.max_mr_size);
        b.set_u64(32, self.page_size_cap);
        b.set_u64(40, self.atomic_arg_sizes);
        let u32s = [
            (48, self.ex_comp_mask),
            (52, self.device_cap_flags2),
            (56, self.max_fa_bit_boundary),
            (60, self.log_max_atomic_inline_arg),
            (64, self.vendor_id),
            (68, self.vendor_part_id),
            (72, self.hw_ver),
            (76, self.max_qp),
            (80, self.max_qp_wr),
            (84, self.device_cap_flags),
            (88, self.max_sge),
            (92, self.max_sge_rd),
            (96, self.max_cq),
            (100, self.max_cqe),
            (104, self.max_mr),
            (108, self.max_pd),
            (112, self.max_qp_rd_atom),
            (116, self.max_ee_rd_atom),
            (120, self.max_res_rd_atom),
            (124, self.max_qp_init_rd_atom),
            (164, self.max_ah),
            (176, self.max_srq),
            (180, self.max_srq_wr),
            (184, self.max_srq_sge),
            (188, self.max_uar),
            (192, self.gid_tbl_len),
            (204, self.max_fast_reg_page_list_len),
        ];
        for (off, v) in u32s {
            b.set_u32(off, v);
        }
        b.set_u16(196, self.max_pkeys);
        b.set_u8(198, self.local_ca_ack_delay);
        b.set_u8(199, self.phys_port_cnt);
        b.set_u8(200, self.mode);
        b.set_u8(201, self.atomic_ops);
        b.set_u8(202, self.bmme_flags);
        b.set_u8(203, self.gid_types);
        b.0
    }
}

/// Everything a test may configure about one device model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceConfig {
    /// VERSION register: 20 (default), 19 or 18 (M1).
    pub version: u32,
    /// Port MAC (M3, and node GUID source).
    pub mac: [u8; 6],
    /// Capabilities reported in the DSR.
    pub caps: Caps,
    /// QUERY_PORT `max_mtu` = `active_mtu` (M41): 3 (1024, default) or 5 (4096).
    pub port_mtu: u32,
    /// Multiplier for every transport timer (M42), default 1.
    pub timer_scale: u32,
    /// Lazy completion (M48), off by default: CQEs reach a CQ's ring only when its POLL
    /// doorbell is written or an arm of it is satisfied.
    pub lazy_completion: bool,
}

impl Default for DeviceConfig {
    fn default() -> Self {
        Self {
            version: 20,
            mac: [0x00, 0x50, 0x56, 0x00, 0x00, 0x01],
            caps: Caps::default(),
            port_mtu: 3,
            timer_scale: 1,
            lazy_completion: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_caps_image_has_reference_values_at_offsets() {
        let mac = [0x00, 0x50, 0x56, 0x01, 0x02, 0x03];
        let c = Le(Caps::default().emit(mac));
        assert_eq!(c.u64(0), 1 << 32);
        assert_eq!(
            c.bytes::<8>(8),
            [0x02, 0x50, 0x56, 0xFF, 0xFE, 0x01, 0x02, 0x03]
        );
        assert_eq!(c.bytes::<8>(16), c.bytes::<8>(8));
        assert_eq!(c.u64(24), 1 << 30);
        assert_eq!(c.u32(64), 0x15AD);
        assert_eq!(c.u32(68), 0x0820);
        assert_eq!(c.u32(76), 1024);
        assert_eq!(c.u32(100), 65536);
        assert_eq!(c.u32(164), 1024);
        assert_eq!(c.u32(168), 0);
        assert_eq!(c.u32(176), 1024);
        assert_eq!(c.u32(192), 16);
        assert_eq!(c.u16(196), 1);
        assert_eq!(c.u8(198), 15);
        assert_eq!(c.u8(202), 7);
        assert_eq!(c.u8(203), 2);
        assert_eq!(c.u32(204), 512);
    }
}
