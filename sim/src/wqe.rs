//! Work-queue entries, completion entries and event entries (reference §10, §11, §13).
#![deny(unsafe_code)]

use crate::le::Le;

/// Send WQE header size.
pub const SQ_HDR: usize = 80;
/// Receive WQE header size.
pub const RQ_HDR: usize = 16;
/// SGE size.
pub const SGE_SIZE: usize = 16;
/// CQE size.
pub const CQE_SIZE: usize = 64;

/// `PVRDMA_WR_*` opcodes (§10).
pub mod wr {
    #![allow(missing_docs)]
    pub const RDMA_WRITE: u32 = 0;
    pub const RDMA_WRITE_WITH_IMM: u32 = 1;
    pub const SEND: u32 = 2;
    pub const SEND_WITH_IMM: u32 = 3;
    pub const RDMA_READ: u32 = 4;
    pub const SEND_WITH_INV: u32 = 8;
    pub const LOCAL_INV: u32 = 10;
    pub const FAST_REG_MR: u32 = 11;
}

/// `send_flags` bits (§10).
pub mod send_flags {
    #![allow(missing_docs)]
    pub const FENCE: u32 = 1 << 0;
    pub const SIGNALED: u32 = 1 << 1;
    pub const SOLICITED: u32 = 1 << 2;
    pub const INLINE: u32 = 1 << 3;
}

/// `PVRDMA_WC_*` opcodes (§11).
pub mod wc {
    #![allow(missing_docs)]
    pub const SEND: u32 = 0;
    pub const RDMA_WRITE: u32 = 1;
    pub const RDMA_READ: u32 = 2;
    pub const LOCAL_INV: u32 = 7;
    pub const FAST_REG_MR: u32 = 8;
    pub const RECV: u32 = 128;
    pub const RECV_RDMA_WITH_IMM: u32 = 129;
}

/// WC status values (§11).
pub mod status {
    #![allow(missing_docs)]
    pub const SUCCESS: u32 = 0;
    pub const LOC_LEN_ERR: u32 = 1;
    pub const LOC_QP_OP_ERR: u32 = 2;
    pub const LOC_PROT_ERR: u32 = 4;
    pub const WR_FLUSH_ERR: u32 = 5;
    pub const BAD_RESP_ERR: u32 = 7;
    pub const LOC_ACCESS_ERR: u32 = 8;
    pub const REM_INV_REQ_ERR: u32 = 9;
    pub const REM_ACCESS_ERR: u32 = 10;
    pub const REM_OP_ERR: u32 = 11;
    pub const RETRY_EXC_ERR: u32 = 12;
    pub const RNR_RETRY_EXC_ERR: u32 = 13;
    pub const FATAL_ERR: u32 = 19;
    pub const GENERAL_ERR: u32 = 21;
}

/// wc_flags bits (§11).
pub mod wc_flags {
    #![allow(missing_docs)]
    pub const GRH: u32 = 1 << 0;
    pub const WITH_IMM: u32 = 1 << 1;
    pub const WITH_INVALIDATE: u32 = 1 << 2;
    pub const WITH_SMAC: u32 = 1 << 4;
    pub const WITH_NETWORK_HDR_TYPE: u32 = 1 << 6;
}

/// Async event types (`enum pvrdma_eqe_type`, §13).
pub mod event {
    #![allow(missing_docs)]
    pub const CQ_ERR: u32 = 0;
    pub const QP_FATAL: u32 = 1;
    pub const QP_REQ_ERR: u32 = 2;
    pub const QP_ACCESS_ERR: u32 = 3;
    pub const COMM_EST: u32 = 4;
    pub const DEVICE_FATAL: u32 = 8;
    pub const PORT_ACTIVE: u32 = 9;
    pub const PORT_ERR: u32 = 10;
    pub const SRQ_ERR: u32 = 14;
    pub const SRQ_LIMIT_REACHED: u32 = 15;
    pub const QP_LAST_WQE_REACHED: u32 = 16;
}

/// WC opcode a send WR opcode completes with (M35), `None` for opcodes without one.
pub fn wc_opcode_for(wr_opcode: u32) -> Option<u32> {
    Some(match wr_opcode {
        wr::SEND | wr::SEND_WITH_IMM | wr::SEND_WITH_INV => wc::SEND,
        wr::RDMA_WRITE | wr::RDMA_WRITE_WITH_IMM => wc::RDMA_WRITE,
        wr::RDMA_READ => wc::RDMA_READ,
        wr::LOCAL_INV => wc::LOCAL_INV,
        wr::FAST_REG_MR => wc::FAST_REG_MR,
        _ => return None,
    })
}

/// Scatter/gather element.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sge {
    /// Virtual (MR) address.
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// Local key.
    pub lkey: u32,
}

fn parse_sges(b: &[u8], from: usize, n: u32) -> Vec<Sge> {
    let v = Le(b);
    (0..n as usize)
        .map(|i| {
            let o = from + i * SGE_SIZE;
            Sge {
                addr: v.u64(o),
                length: v.u32(o + 8),
                lkey: v.u32(o + 12),
            }
        })
        .collect()
}

/// `wr.fast_reg` fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct FastReg {
    pub iova_start: u64,
    pub pl_pdir_dma: u64,
    pub page_shift: u32,
    pub page_list_len: u32,
    pub length: u32,
    pub access_flags: u32,
    pub rkey: u32,
}

/// UD address fields of a send WQE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct UdAddr {
    pub remote_qpn: u32,
    pub remote_qkey: u32,
    pub port_pd: u32,
    pub sl_tclass_flowlabel: u32,
    pub dgid: [u8; 16],
    pub src_path_bits: u8,
    pub gid_index: u8,
    pub stat_rate: u8,
    pub hop_limit: u8,
    pub dmac: [u8; 6],
}

/// A decoded send WQE (`pvrdma_sq_wqe_hdr` + SGEs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SqWqe {
    /// Echoed in the CQE.
    pub wr_id: u64,
    /// SGE count as posted.
    pub num_sge: u32,
    /// `PVRDMA_WR_*`.
    pub opcode: u32,
    /// `send_flags`.
    pub send_flags: u32,
    /// `imm_data` (network-order bytes, as stored) / `invalidate_rkey` (LE).
    pub ex: [u8; 4],
    /// The 48-byte `wr` union.
    pub wr: [u8; 48],
    /// SGEs (empty if `num_sge` exceeded the QP's limit).
    pub sges: Vec<Sge>,
}

impl SqWqe {
    /// Decodes a WQE slot; SGEs are read only if `num_sge ≤ max_sge`.
    pub fn parse(b: &[u8], max_sge: u32) -> Self {
        let v = Le(b);
        let num_sge = v.u32(8);
        let sges = if num_sge <= max_sge {
            parse_sges(b, SQ_HDR, num_sge)
        } else {
            Vec::new()
        };
        Self {
            wr_id: v.u64(0),
            num_sge,
            opcode: v.u32(16),
            send_flags: v.u32(20),
            ex: v.bytes(24),
            wr: v.bytes(32),
            sges,
        }
    }

    /// `invalidate_rkey` (LE u32 in `ex`).
    pub fn invalidate_rkey(&self) -> u32 {
        u32::from_le_bytes(self.ex)
    }

    /// `wr.rdma`: (remote_addr, rkey).
    pub fn rdma(&self) -> (u64, u32) {
        let v = Le(&self.wr[..]);
        (v.u64(0), v.u32(8))
    }

    /// `wr.fast_reg`.
    pub fn fast_reg(&self) -> FastReg {
        let v = Le(&self.wr[..]);
        FastReg {
            iova_start: v.u64(0),
            pl_pdir_dma: v.u64(8),
            page_shift: v.u32(16),
            page_list_len: v.u32(20),
            length: v.u32(24),
            access_flags: v.u32(28),
            rkey: v.u32(32),
        }
    }

    /// `wr.ud`.
    pub fn ud(&self) -> UdAddr {
        let v = Le(&self.wr[..]);
        UdAddr {
            remote_qpn: v.u32(0),
            remote_qkey: v.u32(4),
            port_pd: v.u32(8),
            sl_tclass_flowlabel: v.u32(12),
            dgid: v.bytes(16),
            src_path_bits: v.u8(32),
            gid_index: v.u8(33),
            stat_rate: v.u8(34),
            hop_limit: v.u8(35),
            dmac: v.bytes(36),
        }
    }

    /// Sum of SGE lengths (saturating).
    pub fn total_len(&self) -> u64 {
        self.sges.iter().map(|s| u64::from(s.length)).sum()
    }

    /// True if the WQE asked for a CQE on success.
    pub fn signaled(&self) -> bool {
        self.send_flags & send_flags::SIGNALED != 0
    }
}

/// A decoded receive WQE (RQ or SRQ).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecvWqe {
    /// Echoed in the CQE.
    pub wr_id: u64,
    /// SGE count as posted.
    pub num_sge: u32,
    /// SGEs (empty if `num_sge` exceeded the queue's limit).
    pub sges: Vec<Sge>,
}

impl RecvWqe {
    /// Decodes a receive WQE slot; SGEs are read only if `num_sge ≤ max_sge`.
    pub fn parse(b: &[u8], max_sge: u32) -> Self {
        let v = Le(b);
        let num_sge = v.u32(8);
        let sges = if num_sge <= max_sge {
            parse_sges(b, RQ_HDR, num_sge)
        } else {
            Vec::new()
        };
        Self {
            wr_id: v.u64(0),
            num_sge,
            sges,
        }
    }

    /// Sum of SGE lengths.
    pub fn capacity(&self) -> u64 {
        self.sges.iter().map(|s| u64::from(s.length)).sum()
    }
}

/// A completion entry (`pvrdma_cqe`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct Cqe {
    pub wr_id: u64,
    pub qp: u64,
    pub opcode: u32,
    pub status: u32,
    pub byte_len: u32,
    /// Opaque bytes @28: imm_data as posted, or the invalidated key (LE).
    pub imm_data: [u8; 4],
    pub src_qp: u32,
    pub wc_flags: u32,
    pub vendor_err: u32,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
    pub port_num: u8,
    pub smac: [u8; 6],
    pub network_hdr_type: u8,
}

impl Cqe {
    /// The 64-byte image.
    pub fn emit(&self) -> [u8; CQE_SIZE] {
        let mut b = Le([0u8; CQE_SIZE]);
        b.set_u64(0, self.wr_id);
        b.set_u64(8, self.qp);
        b.set_u32(16, self.opcode);
        b.set_u32(20, self.status);
        b.set_u32(24, self.byte_len);
        b.set_bytes(28, &self.imm_data);
        b.set_u32(32, self.src_qp);
        b.set_u32(36, self.wc_flags);
        b.set_u32(40, self.vendor_err);
        b.set_u16(44, self.pkey_index);
        b.set_u16(46, self.slid);
        b.set_u8(48, self.sl);
        b.set_u8(49, self.dlid_path_bits);
        b.set_u8(50, self.port_num);
        b.set_bytes(51, &self.smac);
        b.set_u8(57, self.network_hdr_type);
        b.0
    }

    /// Decodes a 64-byte image (for tests and harnesses).
    pub fn parse(b: &[u8]) -> Self {
        let v = Le(b);
        Self {
            wr_id: v.u64(0),
            qp: v.u64(8),
            opcode: v.u32(16),
            status: v.u32(20),
            byte_len: v.u32(24),
            imm_data: v.bytes(28),
            src_qp: v.u32(32),
            wc_flags: v.u32(36),
            vendor_err: v.u32(40),
            pkey_index: v.u16(44),
            slid: v.u16(46),
            sl: v.u8(48),
            dlid_path_bits: v.u8(49),
            port_num: v.u8(50),
            smac: v.bytes(51),
            network_hdr_type: v.u8(57),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cqe_fields_at_reference_offsets() {
        let c = Cqe {
            wr_id: 0x1122_3344_5566_7788,
            qp: 5,
            opcode: wc::RECV,
            status: status::WR_FLUSH_ERR,
            byte_len: 99,
            imm_data: [1, 2, 3, 4],
            src_qp: 0x101,
            wc_flags: wc_flags::WITH_IMM,
            port_num: 1,
            smac: [6, 5, 4, 3, 2, 1],
            network_hdr_type: 2,
            ..Default::default()
        };
        let b = c.emit();
        assert_eq!(b[0], 0x88);
        assert_eq!(b[8], 5);
        assert_eq!(b[16], 128);
        assert_eq!(b[20], 5);
        assert_eq!(b[24], 99);
        assert_eq!(&b[28..32], &[1, 2, 3, 4]);
        assert_eq!(b[32..36], 0x101u32.to_le_bytes());
        assert_eq!(b[36], 2);
        assert_eq!(b[50], 1);
        assert_eq!(&b[51..57], &[6, 5, 4, 3, 2, 1]);
        assert_eq!(b[57], 2);
        assert_eq!(Cqe::parse(&b), c);
    }

    #[test]
    fn sq_wqe_parses_fast_reg_union() {
        let mut b = [0u8; 128];
        b[0] = 7;
        b[8] = 1;
        b[16] = wr::FAST_REG_MR as u8;
        b[32..40].copy_from_slice(&0x1234u64.to_le_bytes());
        b[40..48].copy_from_slice(&0x7e00_0000_1000u64.to_le_bytes());
        b[48] = 12;
        b[52] = 3;
        b[56..60].copy_from_slice(&8000u32.to_le_bytes());
        b[60] = 7;
        b[64..68].copy_from_slice(&0x0000_0542u32.to_le_bytes());
        b[80..88].copy_from_slice(&0xAAu64.to_le_bytes());
        let w = SqWqe::parse(&b, 2);
        assert_eq!(w.wr_id, 7);
        assert_eq!(
            w.sges,
            vec![Sge {
                addr: 0xAA,
                length: 0,
                lkey: 0
            }]
        );
        let f = w.fast_reg();
        assert_eq!(
            f,
            FastReg {
                iova_start: 0x1234,
                pl_pdir_dma: 0x7e00_0000_1000,
                page_shift: 12,
                page_list_len: 3,
                length: 8000,
                access_flags: 7,
                rkey: 0x542
            }
        );
        assert!(SqWqe::parse(&b, 0).sges.is_empty());
    }
}
