//! Completion queue entries (§11): the 64-byte `pvrdma_cqe`, its opcode, status and flag
//! values, and [`CqeView`], the fields the driver reads from it ([`super::cq::CqReader`]
//! loads them straight from the ring). Nothing the device wrote is trusted: the NDK layer
//! validates each field it uses (the QP handle through its tables, lengths, flags), and an
//! error CQE carries only `wr_id`, `qp` and `status` (§16 item 10), so its other fields are
//! not interpreted.
#![deny(unsafe_code)]

use bitflags::bitflags;

/// CQE size.
pub const CQE_SIZE: usize = 64;

/// `PVRDMA_WC_*` opcodes (`opcode` @16).
pub mod wc_opcode {
    #![allow(missing_docs)]
    pub const SEND: u32 = 0;
    pub const RDMA_WRITE: u32 = 1;
    pub const RDMA_READ: u32 = 2;
    pub const COMP_SWAP: u32 = 3;
    pub const FETCH_ADD: u32 = 4;
    pub const BIND_MW: u32 = 5;
    pub const LSO: u32 = 6;
    pub const LOCAL_INV: u32 = 7;
    pub const FAST_REG_MR: u32 = 8;
    pub const MASKED_COMP_SWAP: u32 = 9;
    pub const MASKED_FETCH_ADD: u32 = 10;
    pub const RECV: u32 = 128;
    pub const RECV_RDMA_WITH_IMM: u32 = 129;
}

/// `enum pvrdma_wc_status` (`status` @20), numerically equal to IB's.
pub mod wc_status {
    #![allow(missing_docs)]
    pub const SUCCESS: u32 = 0;
    pub const LOC_LEN_ERR: u32 = 1;
    pub const LOC_QP_OP_ERR: u32 = 2;
    pub const LOC_EEC_OP_ERR: u32 = 3;
    pub const LOC_PROT_ERR: u32 = 4;
    pub const WR_FLUSH_ERR: u32 = 5;
    pub const MW_BIND_ERR: u32 = 6;
    pub const BAD_RESP_ERR: u32 = 7;
    pub const LOC_ACCESS_ERR: u32 = 8;
    pub const REM_INV_REQ_ERR: u32 = 9;
    pub const REM_ACCESS_ERR: u32 = 10;
    pub const REM_OP_ERR: u32 = 11;
    pub const RETRY_EXC_ERR: u32 = 12;
    pub const RNR_RETRY_EXC_ERR: u32 = 13;
    pub const LOC_RDD_VIOL_ERR: u32 = 14;
    pub const REM_INV_RD_REQ_ERR: u32 = 15;
    pub const REM_ABORT_ERR: u32 = 16;
    pub const INV_EECN_ERR: u32 = 17;
    pub const INV_EEC_STATE_ERR: u32 = 18;
    pub const FATAL_ERR: u32 = 19;
    pub const RESP_TIMEOUT_ERR: u32 = 20;
    pub const GENERAL_ERR: u32 = 21;
}

bitflags! {
    /// `wc_flags` (@36).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct WcFlags: u32 {
        /// GRH area present (UD/GSI receives).
        const GRH = 1 << 0;
        /// `imm_data` valid.
        const WITH_IMM = 1 << 1;
        /// Invalidated key @28 valid.
        const WITH_INVALIDATE = 1 << 2;
        /// IP checksum ok.
        const IP_CSUM_OK = 1 << 3;
        /// `smac` valid.
        const WITH_SMAC = 1 << 4;
        /// VLAN valid.
        const WITH_VLAN = 1 << 5;
        /// `network_hdr_type` valid.
        const WITH_NETWORK_HDR_TYPE = 1 << 6;
    }
}

/// The fields of a CQE (§11) the completion path reads, raw as the device wrote them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqeView {
    /// `wr_id` @0.
    pub wr_id: u64,
    /// `qp` @8 (64 bits as written; validate before use).
    pub qp: u64,
    /// `opcode` @16 ([`wc_opcode`]).
    pub opcode: u32,
    /// `status` @20 ([`wc_status`]).
    pub status: u32,
    /// `byte_len` @24.
    pub byte_len: u32,
    /// `imm_data` / invalidated rkey @28 (LE).
    pub ex: u32,
    /// `wc_flags` @36 ([`WcFlags`]).
    pub wc_flags: u32,
}

impl CqeView {
    /// The fields from the CQE's first five little-endian 64-bit words (@0..@40).
    #[inline(always)]
    pub const fn from_words(w0: u64, w1: u64, w2: u64, w3: u64, w4: u64) -> CqeView {
        // CAST: each field is one half of its word.
        CqeView {
            wr_id: w0,
            qp: w1,
            opcode: w2 as u32,
            status: Self::status_of(w2),
            byte_len: w3 as u32,
            ex: (w3 >> 32) as u32,
            wc_flags: (w4 >> 32) as u32,
        }
    }

    /// `status`, the high half of the word @16.
    #[inline(always)]
    pub const fn status_of(w2: u64) -> u32 {
        // CAST: the high half.
        (w2 >> 32) as u32
    }
}

/// The sender of a UD or GSI receive (§11, §14 "UD and GSI"): `src_qp` @32 (24 bits) and
/// `smac` @51..57, valid with [`WcFlags::WITH_SMAC`]; QP1 replies to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdSource {
    /// The sending QP.
    pub src_qp: u32,
    /// The sender's MAC.
    pub smac: [u8; 6],
}

impl UdSource {
    /// The fields from the CQE's little-endian words @32, @48 and @56.
    #[inline(always)]
    pub const fn from_words(w4: u64, w6: u64, w7: u64) -> UdSource {
        let m = w6.to_le_bytes();
        // CAST: `src_qp` is the low half of the word @32, a 24-bit QP number.
        UdSource {
            src_qp: w4 as u32 & 0x00FF_FFFF,
            smac: [m[3], m[4], m[5], m[6], m[7], w7.to_le_bytes()[0]],
        }
    }
}
