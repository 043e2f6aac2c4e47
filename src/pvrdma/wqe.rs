//! Work queue entries (§10): the 80-byte send WQE header with its `wr` union, the 16-byte
//! receive WQE header, SGEs, opcodes and flags. Encoders write straight into a ring slot (or
//! any [`Sink`]) and allocate nothing.
#![deny(unsafe_code)]

use bitflags::bitflags;

use super::bytes::Sink;
use super::error::PvrdmaError;

/// `pvrdma_sq_wqe_hdr` size.
pub const SQ_WQE_HDR_SIZE: usize = 80;
/// `pvrdma_rq_wqe_hdr` size.
pub const RQ_WQE_HDR_SIZE: usize = 16;
/// `pvrdma_sge` size.
pub const SGE_SIZE: usize = 16;
/// `pvrdma_av` size.
pub const AV_SIZE: usize = 40;

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

/// `enum pvrdma_wr_opcode` (PVRDMA values, not IB's: §16 item 1). `PVRDMA_WR_ERROR` (16) is
/// Linux's "no mapping" marker and is never posted, so it has no variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
#[allow(missing_docs)]
pub enum WrOpcode {
    RdmaWrite = 0,
    RdmaWriteWithImm = 1,
    Send = 2,
    SendWithImm = 3,
    RdmaRead = 4,
    AtomicCmpAndSwp = 5,
    AtomicFetchAndAdd = 6,
    Lso = 7,
    SendWithInv = 8,
    RdmaReadWithInv = 9,
    LocalInv = 10,
    FastRegMr = 11,
    MaskedAtomicCmpAndSwp = 12,
    MaskedAtomicFetchAndAdd = 13,
    BindMw = 14,
    RegSigMr = 15,
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
        /// Inline data (unsupported; encoders refuse it).
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
/// @12), which lets the NDK layer hand a consumer's SGE array to a port without converting it.
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

/// `pvrdma_av` (UD address vector).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Av {
    /// `pd_handle | port << 24` (see [`Av::port_pd`]).
    pub port_pd: u32,
    /// `traffic_class << 20 | flow_label`.
    pub sl_tclass_flowlabel: u32,
    /// Destination GID.
    pub dgid: [u8; 16],
    /// Linux sets bit 7.
    pub src_path_bits: u8,
    /// Source GID index.
    pub gid_index: u8,
    /// Static rate.
    pub stat_rate: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Destination MAC.
    pub dmac: [u8; 6],
}

impl Av {
    /// `pd_handle | port << 24`.
    pub const fn port_pd(pd_handle: u32, port: u8) -> u32 {
        (pd_handle & 0x00FF_FFFF) | ((port as u32) << 24)
    }
    /// `traffic_class << 20 | flow_label`.
    pub const fn sl_tclass_flowlabel(traffic_class: u8, flow_label: u32) -> u32 {
        ((traffic_class as u32) << 20) | (flow_label & 0xF_FFFF)
    }
}

/// The `wr.fast_reg` variant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FastReg {
    /// First byte's address in the MR's space.
    pub iova_start: u64,
    /// Page-list directory (the FRMR's own [`super::pdir::PageDir`]).
    pub pl_pdir_dma: u64,
    /// 12.
    pub page_shift: u32,
    /// Pages in the list.
    pub page_list_len: u32,
    /// Length in bytes.
    pub length: u32,
    /// Access granted.
    pub access_flags: AccessFlags,
    /// New key.
    pub rkey: u32,
}

/// The `wr` union at byte 32.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WrBody {
    /// SEND and LOCAL_INV on RC: union unused (zeroed).
    None,
    /// RDMA READ/WRITE.
    Rdma {
        /// Remote address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
    },
    /// FAST_REG_MR.
    FastReg(FastReg),
    /// UD/GSI sends.
    Ud {
        /// Destination QPN.
        remote_qpn: u32,
        /// Q_Key (bit 31 set: Linux substitutes the QP's).
        remote_qkey: u32,
        /// Address vector.
        av: Av,
    },
}

/// The `ex` word at byte 24.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ex {
    /// Zero.
    None,
    /// `imm_data`: 4 opaque network-order bytes copied unchanged (§16 item 6).
    Imm([u8; 4]),
    /// `invalidate_rkey` (LE) for SEND_WITH_INV and LOCAL_INV.
    InvalidateRkey(u32),
}

/// A send work request.
#[derive(Clone, Copy, Debug)]
pub struct SendWr<'a> {
    /// Copied into the CQE.
    pub wr_id: u64,
    /// Opcode.
    pub opcode: WrOpcode,
    /// Flags.
    pub flags: SendFlags,
    /// `ex` word.
    pub ex: Ex,
    /// Union.
    pub body: WrBody,
    /// Gather list.
    pub sges: &'a [Sge],
}

fn put_sges<S: Sink + ?Sized>(out: &mut S, base: usize, sges: &[Sge]) {
    // Each SGE is assembled in registers and handed over as one 16-byte block (one bounds
    // check and two 64-bit stores on a DMA slot).
    for (i, s) in sges.iter().enumerate() {
        let mut b = [0u8; SGE_SIZE];
        let bs: &mut [u8] = &mut b;
        bs.put_u64(0, s.addr);
        bs.put_u32(8, s.length);
        bs.put_u32(12, s.lkey);
        out.put(base + i * SGE_SIZE, &b);
    }
}

/// Encodes a send WQE (header, union, SGEs) into any sink; returns its length. The reference
/// encoder: rings are written only by [`super::port`] (`WqSlot::write_send`, fed by
/// `SqHeader::of`), whose tests compare its bytes with these.
///
/// # Errors
///
/// [`PvrdmaError::NotSupported`] for INLINE; [`PvrdmaError::InvalidParameter`] when the WQE
/// does not fit `out` (more SGEs than the stride holds).
pub fn encode_send<S: Sink + ?Sized>(out: &mut S, wr: &SendWr<'_>) -> Result<usize, PvrdmaError> {
    if wr.flags.contains(SendFlags::INLINE) {
        return Err(PvrdmaError::NotSupported);
    }
    let len = wr
        .sges
        .len()
        .checked_mul(SGE_SIZE)
        .and_then(|n| n.checked_add(SQ_WQE_HDR_SIZE))
        .ok_or(PvrdmaError::InvalidParameter)?;
    if len > out.capacity() {
        return Err(PvrdmaError::InvalidParameter);
    }
    // The header is built in a local buffer (zeroed, so unused union bytes stay 0) and
    // copied to the slot as one block: one bounds check and ten 64-bit stores instead of a
    // checked store per field.
    let mut hdr = [0u8; SQ_WQE_HDR_SIZE];
    let h: &mut [u8] = &mut hdr;
    h.put_u64(0, wr.wr_id);
    h.put_u32(8, wr.sges.len() as u32);
    h.put_u32(12, 0);
    h.put_u32(16, wr.opcode as u32);
    h.put_u32(20, wr.flags.bits());
    match wr.ex {
        Ex::None => h.put_u32(24, 0),
        Ex::Imm(b) => h.put(24, &b),
        Ex::InvalidateRkey(k) => h.put_u32(24, k),
    }
    match wr.body {
        WrBody::None => {}
        WrBody::Rdma { remote_addr, rkey } => {
            h.put_u64(32, remote_addr);
            h.put_u32(40, rkey);
        }
        WrBody::FastReg(f) => {
            h.put_u64(32, f.iova_start);
            h.put_u64(40, f.pl_pdir_dma);
            h.put_u32(48, f.page_shift);
            h.put_u32(52, f.page_list_len);
            h.put_u32(56, f.length);
            h.put_u32(60, f.access_flags.bits());
            h.put_u32(64, f.rkey);
        }
        WrBody::Ud {
            remote_qpn,
            remote_qkey,
            av,
        } => {
            h.put_u32(32, remote_qpn);
            h.put_u32(36, remote_qkey);
            let a = 40;
            h.put_u32(a, av.port_pd);
            h.put_u32(a + 4, av.sl_tclass_flowlabel);
            h.put(a + 8, &av.dgid);
            h.put_u8(a + 24, av.src_path_bits);
            h.put_u8(a + 25, av.gid_index);
            h.put_u8(a + 26, av.stat_rate);
            h.put_u8(a + 27, av.hop_limit);
            h.put(a + 28, &av.dmac);
        }
    }
    out.put(0, &hdr);
    put_sges(out, SQ_WQE_HDR_SIZE, wr.sges);
    Ok(len)
}

/// Encodes a receive WQE (RQ and SRQ share the format); returns its length. The reference
/// encoder, as [`encode_send`].
///
/// # Errors
///
/// [`PvrdmaError::InvalidParameter`] when it does not fit `out`.
pub fn encode_recv<S: Sink + ?Sized>(
    out: &mut S,
    wr_id: u64,
    sges: &[Sge],
) -> Result<usize, PvrdmaError> {
    let len = sges
        .len()
        .checked_mul(SGE_SIZE)
        .and_then(|n| n.checked_add(RQ_WQE_HDR_SIZE))
        .ok_or(PvrdmaError::InvalidParameter)?;
    if len > out.capacity() {
        return Err(PvrdmaError::InvalidParameter);
    }
    let mut hdr = [0u8; RQ_WQE_HDR_SIZE];
    let h: &mut [u8] = &mut hdr;
    h.put_u64(0, wr_id);
    h.put_u32(8, sges.len() as u32);
    out.put(0, &hdr);
    put_sges(out, RQ_WQE_HDR_SIZE, sges);
    Ok(len)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn le64(v: u64) -> [u8; 8] {
        v.to_le_bytes()
    }

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
    fn rdma_write_bytes() {
        let mut b = [0xEEu8; 128];
        let sges = [Sge {
            addr: 0x1122_3344_5566_7788,
            length: 0x100,
            lkey: 0x0000_0305,
        }];
        let n = encode_send(
            &mut b[..],
            &SendWr {
                wr_id: 0xAABB_CCDD_0011_2233,
                opcode: WrOpcode::RdmaWriteWithImm,
                flags: SendFlags::SIGNALED | SendFlags::FENCE,
                ex: Ex::Imm([0xDE, 0xAD, 0xBE, 0xEF]),
                body: WrBody::Rdma {
                    remote_addr: 0x7000_1000,
                    rkey: 0x0000_0A01,
                },
                sges: &sges,
            },
        )
        .unwrap();
        assert_eq!(n, 96);
        let mut want = [0u8; 96];
        want[0..8].copy_from_slice(&le64(0xAABB_CCDD_0011_2233));
        want[8] = 1;
        want[16] = 1;
        want[20] = 3;
        want[24..28].copy_from_slice(&[0xDE, 0xAD, 0xBE, 0xEF]);
        want[32..40].copy_from_slice(&le64(0x7000_1000));
        want[40..44].copy_from_slice(&[0x01, 0x0A, 0, 0]);
        want[80..88].copy_from_slice(&le64(0x1122_3344_5566_7788));
        want[88..92].copy_from_slice(&[0, 1, 0, 0]);
        want[92..96].copy_from_slice(&[5, 3, 0, 0]);
        assert_eq!(&b[..96], &want);
        assert!(
            b[96..].iter().all(|&x| x == 0xEE),
            "nothing written past the WQE"
        );
    }

    #[test]
    fn fast_reg_and_send_with_inv_bytes() {
        let mut b = [0xFFu8; 80];
        encode_send(
            &mut b[..],
            &SendWr {
                wr_id: 1,
                opcode: WrOpcode::FastRegMr,
                flags: SendFlags::empty(),
                ex: Ex::None,
                body: WrBody::FastReg(FastReg {
                    iova_start: 0x1_0000_0010,
                    pl_pdir_dma: 0x9000,
                    page_shift: 12,
                    page_list_len: 3,
                    length: 0x2000,
                    access_flags: AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ,
                    rkey: 0x0000_0207,
                }),
                sges: &[],
            },
        )
        .unwrap();
        let mut want = [0u8; 80];
        want[0] = 1;
        want[16] = 11;
        want[32..40].copy_from_slice(&le64(0x1_0000_0010));
        want[40..48].copy_from_slice(&le64(0x9000));
        want[48] = 12;
        want[52] = 3;
        want[56..60].copy_from_slice(&[0, 0x20, 0, 0]);
        want[60] = 5;
        want[64..68].copy_from_slice(&[7, 2, 0, 0]);
        assert_eq!(b, want);

        let mut b = [0xFFu8; 80];
        encode_send(
            &mut b[..],
            &SendWr {
                wr_id: 2,
                opcode: WrOpcode::SendWithInv,
                flags: SendFlags::SOLICITED,
                ex: Ex::InvalidateRkey(0x1234_5678),
                body: WrBody::None,
                sges: &[],
            },
        )
        .unwrap();
        assert_eq!(
            &b[16..32],
            &[8, 0, 0, 0, 4, 0, 0, 0, 0x78, 0x56, 0x34, 0x12, 0, 0, 0, 0]
        );
        assert!(b[32..80].iter().all(|&x| x == 0), "union zeroed on reuse");
    }

    #[test]
    fn ud_send_bytes() {
        let mut b = [0u8; 96];
        let mut dgid = [0u8; 16];
        dgid[10] = 0xFF;
        dgid[11] = 0xFF;
        dgid[12..].copy_from_slice(&[10, 0, 0, 2]);
        encode_send(
            &mut b[..],
            &SendWr {
                wr_id: 9,
                opcode: WrOpcode::Send,
                flags: SendFlags::SIGNALED,
                ex: Ex::None,
                body: WrBody::Ud {
                    remote_qpn: 1,
                    remote_qkey: 0x8001_0000,
                    av: Av {
                        port_pd: Av::port_pd(3, 1),
                        sl_tclass_flowlabel: Av::sl_tclass_flowlabel(0x10, 0x12345),
                        dgid,
                        src_path_bits: 0x80,
                        gid_index: 2,
                        stat_rate: 0,
                        hop_limit: 64,
                        dmac: [0x00, 0x50, 0x56, 0xAA, 0xBB, 0xCC],
                    },
                },
                sges: &[Sge {
                    addr: 0x4000,
                    length: 256,
                    lkey: 0x100,
                }],
            },
        )
        .unwrap();
        assert_eq!(&b[32..36], &[1, 0, 0, 0]);
        assert_eq!(&b[36..40], &[0, 0, 0x01, 0x80]);
        assert_eq!(&b[40..44], &[3, 0, 0, 1]);
        assert_eq!(&b[44..48], &[0x45, 0x23, 0x01, 0x01]);
        assert_eq!(&b[48..64], &dgid);
        assert_eq!(&b[64..68], &[0x80, 2, 0, 64]);
        assert_eq!(&b[68..74], &[0x00, 0x50, 0x56, 0xAA, 0xBB, 0xCC]);
        assert_eq!(&b[74..80], &[0; 6]);
        assert_eq!(
            &b[80..96],
            &[0, 0x40, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0]
        );
    }

    #[test]
    fn recv_bytes_and_capacity_checks() {
        let mut b = [0u8; 48];
        let sges = [
            Sge {
                addr: 0x10,
                length: 1,
                lkey: 2,
            },
            Sge {
                addr: 0x20,
                length: 3,
                lkey: 4,
            },
        ];
        assert_eq!(encode_recv(&mut b[..], 0x55, &sges), Ok(48));
        let mut want = [0u8; 48];
        want[0] = 0x55;
        want[8] = 2;
        want[16] = 0x10;
        want[24] = 1;
        want[28] = 2;
        want[32] = 0x20;
        want[40] = 3;
        want[44] = 4;
        assert_eq!(b, want);
        let mut small = [0u8; 32];
        assert_eq!(
            encode_recv(&mut small[..], 1, &sges),
            Err(PvrdmaError::InvalidParameter)
        );
        let mut s = [0u8; 128];
        let wr = SendWr {
            wr_id: 0,
            opcode: WrOpcode::Send,
            flags: SendFlags::INLINE,
            ex: Ex::None,
            body: WrBody::None,
            sges: &[],
        };
        assert_eq!(encode_send(&mut s[..], &wr), Err(PvrdmaError::NotSupported));
        let three = [Sge::default(); 4];
        let wr = SendWr {
            flags: SendFlags::empty(),
            sges: &three,
            ..wr
        };
        assert_eq!(
            encode_send(&mut s[..], &wr),
            Err(PvrdmaError::InvalidParameter)
        );
    }
}
