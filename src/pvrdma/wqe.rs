//! Work queue entries (§10): the 80-byte send WQE header with its `wr` union, the 16-byte
//! receive WQE header, SGEs, opcodes and flags. The one writer of these bytes is
//! [`super::wq`].
#![deny(unsafe_code)]

use bitflags::bitflags;

use super::device_enum::device_enum;
use crate::os::dma::PAGE_SHIFT;

/// `pvrdma_sq_wqe_hdr` size.
pub const SQ_WQE_HDR_SIZE: usize = 80;
/// `pvrdma_rq_wqe_hdr` size.
pub const RQ_WQE_HDR_SIZE: usize = 16;
/// `pvrdma_sge` size.
pub const SGE_SIZE: usize = 16;

/// SQ stride for `max_send_sge` (§9): `roundup_pow2(80 + 16·max_sge)`.
pub fn sq_stride(max_sge: u32) -> Option<u32> {
    (SQ_WQE_HDR_SIZE as u32)
        .checked_add(max_sge.checked_mul(SGE_SIZE as u32)?)?
        .checked_next_power_of_two()
}

/// RQ/SRQ stride for `max_recv_sge` (§9): `roundup_pow2(16 + 16·max_sge)`.
pub fn rq_stride(max_sge: u32) -> Option<u32> {
    (RQ_WQE_HDR_SIZE as u32)
        .checked_add(max_sge.checked_mul(SGE_SIZE as u32)?)?
        .checked_next_power_of_two()
}

device_enum! {
    /// `enum pvrdma_wr_opcode` (PVRDMA values, not IB's: §16 item 1). `PVRDMA_WR_ERROR` (16) is
    /// Linux's "no mapping" marker and is never posted, so it has no variant.
    pub enum WrOpcode: u32 {
        /// RDMA WRITE (NdkWrite).
        RdmaWrite = 0,
        /// RDMA WRITE with immediate data (not posted by the NDK layer).
        RdmaWriteWithImm = 1,
        /// SEND (NdkSend).
        Send = 2,
        /// SEND with immediate data (not posted).
        SendWithImm = 3,
        /// RDMA READ (NdkRead).
        RdmaRead = 4,
        /// Atomic compare and swap (not posted).
        AtomicCmpAndSwp = 5,
        /// Atomic fetch and add (not posted).
        AtomicFetchAndAdd = 6,
        /// Large send offload (not posted).
        Lso = 7,
        /// SEND with invalidate (NdkSendAndInvalidate).
        SendWithInv = 8,
        /// RDMA READ with local invalidate (not posted: Project decision (b)).
        RdmaReadWithInv = 9,
        /// Local invalidate (NdkInvalidate).
        LocalInv = 10,
        /// Fast-register an MR (NdkFastRegister).
        FastRegMr = 11,
        /// Masked compare and swap (not posted).
        MaskedAtomicCmpAndSwp = 12,
        /// Masked fetch and add (not posted).
        MaskedAtomicFetchAndAdd = 13,
        /// Memory-window bind (not posted: no MWs, pvrdma.md §1).
        BindMw = 14,
        /// Signature MR registration (not posted).
        RegSigMr = 15,
    }
    /// A WR opcode the driver does not know.
    unknown UnknownWrOpcode;
}

bitflags! {
    /// `enum pvrdma_send_flags`.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct SendFlags: u32 {
        /// Wait for earlier RDMA READs (NDK READ_FENCE).
        const FENCE = 1 << 0;
        /// Produce a CQE on success.
        const SIGNALED = 1 << 1;
        /// Solicited event at the receiver.
        const SOLICITED = 1 << 2;
        /// Inline data (unsupported: the NDK layer refuses NDK_OP_FLAG_INLINE).
        const INLINE = 1 << 3;
        /// IP checksum offload (ignored).
        const IP_CSUM = 1 << 4;
    }
}

bitflags! {
    /// Access flags of MRs, QPs and fast-register WQEs (§8).
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct AccessFlags: u32 {
        /// Local write.
        const LOCAL_WRITE = 1 << 0;
        /// Remote write.
        const REMOTE_WRITE = 1 << 1;
        /// Remote read.
        const REMOTE_READ = 1 << 2;
        /// Remote atomic.
        const REMOTE_ATOMIC = 1 << 3;
        /// Memory-window bind.
        const MW_BIND = 1 << 4;
        /// Zero-based addressing.
        const ZERO_BASED = 1 << 5;
        /// On-demand paging.
        const ON_DEMAND = 1 << 6;
    }
}

/// `pvrdma_sge`. `#[repr(C)]`: the same 16 bytes as `NDK_SGE` (address @0, length @8, token
/// @12), which lets the NDK layer hand a consumer's SGE array to a writer without converting it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct Sge {
    /// Address (in the MR's address space).
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// Local key.
    pub lkey: u32,
}

const _: () = {
    assert!(core::mem::size_of::<Sge>() == SGE_SIZE);
    assert!(core::mem::offset_of!(Sge, addr) == 0);
    assert!(core::mem::offset_of!(Sge, length) == 8);
    assert!(core::mem::offset_of!(Sge, lkey) == 12);
};

/// The words of a send-WQE header (§10) after `wr_id` and `num_sge`, as
/// [`super::wq::WqSlot::write_send`] stores them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SqHeader {
    /// `opcode` ([`WrOpcode`]) @16 and `send_flags` ([`SendFlags`]) @20 as one little-endian
    /// word ([`SqHeader::op_word`]): posters look it up whole in a table built at compile
    /// time.
    pub op_word: u64,
    /// `ex` @24: `imm_data` (its four bytes as they stand in the WQE) or `invalidate_rkey`
    /// (LE), or 0.
    pub ex: u32,
    /// The `wr` union as six little-endian words (@32..@80); zero where unused.
    pub body: [u64; 6],
}

impl SqHeader {
    /// The word @16: `opcode` in the low half, `send_flags` in the high half.
    pub const fn op_word(opcode: WrOpcode, send_flags: SendFlags) -> u64 {
        opcode as u64 | (send_flags.bits() as u64) << 32
    }

    /// The `rdma` union member: `remote_addr` @32, `rkey` @40.
    pub const fn rdma_body(remote_addr: u64, rkey: u32) -> [u64; 6] {
        [remote_addr, rkey as u64, 0, 0, 0, 0]
    }

    /// The `fast_reg` union member: `iova_start` @32, `pl_pdir_dma` @40, `page_shift` @48
    /// (always 12: the page lists hold 4 KiB pages), `page_list_len` @52, `length` @56,
    /// `access_flags` @60, `rkey` @64.
    pub const fn fast_reg_body(
        iova_start: u64,
        pl_pdir_dma: u64,
        page_list_len: u32,
        length: u32,
        access_flags: AccessFlags,
        rkey: u32,
    ) -> [u64; 6] {
        [
            iova_start,
            pl_pdir_dma,
            // Every page of a fast-register list is an OS page.
            PAGE_SHIFT as u64 | (page_list_len as u64) << 32,
            length as u64 | (access_flags.bits() as u64) << 32,
            rkey as u64,
            0,
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strides() {
        assert_eq!(sq_stride(1), Some(128));
        assert_eq!(sq_stride(3), Some(128));
        assert_eq!(sq_stride(4), Some(256));
        assert_eq!(sq_stride(16), Some(512));
        assert_eq!(rq_stride(1), Some(32));
        assert_eq!(rq_stride(2), Some(64));
        assert_eq!(rq_stride(16), Some(512));
        assert_eq!(sq_stride(u32::MAX), None);
    }

    #[test]
    fn every_wr_opcode_round_trips_and_no_other_is_one() {
        for v in 0..=15 {
            assert_eq!(WrOpcode::try_from(v).map(WrOpcode::as_raw), Ok(v));
        }
        assert_eq!(WrOpcode::RegSigMr.as_raw(), 15);
        // PVRDMA_WR_ERROR, Linux's "no mapping" marker, is not an opcode.
        assert_eq!(WrOpcode::try_from(16), Err(UnknownWrOpcode(16)));
        assert_eq!(WrOpcode::try_from(u32::MAX), Err(UnknownWrOpcode(u32::MAX)));
    }
}
