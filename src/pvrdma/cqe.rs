//! Completion queue entries (§11): the 64-byte `pvrdma_cqe` decoded through a checked parse.
//! Nothing the device wrote is trusted: opcode and status go through `TryFrom` with an
//! explicit unknown arm, the QP handle is checked against a caller-supplied bound, flags and
//! lengths are checked. An error CQE carries only `wr_id`, `qp` and `status` (§16 item 10),
//! so its other fields are not interpreted.
#![deny(unsafe_code)]

use bitflags::bitflags;

use super::bytes::{get, get_u8, get_u16, get_u32, get_u64};

/// CQE size.
pub const CQE_SIZE: usize = 64;

/// `PVRDMA_WC_*` opcodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
#[allow(missing_docs)]
pub enum WcOpcode {
    Send = 0,
    RdmaWrite = 1,
    RdmaRead = 2,
    CompSwap = 3,
    FetchAdd = 4,
    BindMw = 5,
    Lso = 6,
    LocalInv = 7,
    FastRegMr = 8,
    MaskedCompSwap = 9,
    MaskedFetchAdd = 10,
    Recv = 128,
    RecvRdmaWithImm = 129,
}

impl TryFrom<u32> for WcOpcode {
    type Error = CqeError;
    fn try_from(v: u32) -> Result<Self, CqeError> {
        use WcOpcode::*;
        Ok(match v {
            0 => Send,
            1 => RdmaWrite,
            2 => RdmaRead,
            3 => CompSwap,
            4 => FetchAdd,
            5 => BindMw,
            6 => Lso,
            7 => LocalInv,
            8 => FastRegMr,
            9 => MaskedCompSwap,
            10 => MaskedFetchAdd,
            128 => Recv,
            129 => RecvRdmaWithImm,
            other => return Err(CqeError::Opcode(other)),
        })
    }
}

/// `enum pvrdma_wc_status` (numerically IB's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
#[allow(missing_docs)]
pub enum WcStatus {
    Success = 0,
    LocLenErr = 1,
    LocQpOpErr = 2,
    LocEecOpErr = 3,
    LocProtErr = 4,
    WrFlushErr = 5,
    MwBindErr = 6,
    BadRespErr = 7,
    LocAccessErr = 8,
    RemInvReqErr = 9,
    RemAccessErr = 10,
    RemOpErr = 11,
    RetryExcErr = 12,
    RnrRetryExcErr = 13,
    LocRddViolErr = 14,
    RemInvRdReqErr = 15,
    RemAbortErr = 16,
    InvEecnErr = 17,
    InvEecStateErr = 18,
    FatalErr = 19,
    RespTimeoutErr = 20,
    GeneralErr = 21,
}

impl TryFrom<u32> for WcStatus {
    type Error = CqeError;
    fn try_from(v: u32) -> Result<Self, CqeError> {
        use WcStatus::*;
        Ok(match v {
            0 => Success,
            1 => LocLenErr,
            2 => LocQpOpErr,
            3 => LocEecOpErr,
            4 => LocProtErr,
            5 => WrFlushErr,
            6 => MwBindErr,
            7 => BadRespErr,
            8 => LocAccessErr,
            9 => RemInvReqErr,
            10 => RemAccessErr,
            11 => RemOpErr,
            12 => RetryExcErr,
            13 => RnrRetryExcErr,
            14 => LocRddViolErr,
            15 => RemInvRdReqErr,
            16 => RemAbortErr,
            17 => InvEecnErr,
            18 => InvEecStateErr,
            19 => FatalErr,
            20 => RespTimeoutErr,
            21 => GeneralErr,
            other => return Err(CqeError::Status(other)),
        })
    }
}

bitflags! {
    /// `wc_flags`.
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

/// `enum pvrdma_network_type` (§16 item 12: not Linux's `rdma_network_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NetworkType {
    /// IB / RoCEv1.
    Ib = 0,
    /// RoCEv2 over IPv4.
    Ipv4 = 1,
    /// RoCEv2 over IPv6.
    Ipv6 = 2,
}

/// Why a CQE was rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CqeError {
    /// `qp` is not below the handle bound.
    Qp(u64),
    /// Unknown opcode (successful CQE).
    Opcode(u32),
    /// Unknown status.
    Status(u32),
    /// Unknown `wc_flags` bits, or WITH_IMM together with WITH_INVALIDATE.
    Flags(u32),
    /// `byte_len` above the caller's limit.
    Length(u32),
    /// `network_hdr_type` outside 0–2 while flagged valid.
    NetworkType(u8),
}

/// A rejected CQE, with its `wr_id` for diagnostics (it may be garbage too).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadCqe {
    /// Raw `wr_id`.
    pub wr_id: u64,
    /// Reason.
    pub reason: CqeError,
}

/// Limits a CQE is checked against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqeLimits {
    /// QP handles must be below this (the QP table's bound).
    pub qp_bound: u32,
    /// Largest plausible `byte_len` (the device's max message size + the 40-byte GRH area).
    pub max_byte_len: u32,
}

/// A validated CQE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cqe {
    /// From the WQE.
    pub wr_id: u64,
    /// QP handle (validated against [`CqeLimits::qp_bound`]).
    pub qp: u32,
    /// Status.
    pub status: WcStatus,
    /// Opcode; `None` only for an error CQE whose opcode is unknown.
    pub opcode: Option<WcOpcode>,
    /// Bytes transferred (0 for error CQEs).
    pub byte_len: u32,
    /// Raw bytes @28: immediate data (network order) or the invalidated key (LE).
    pub ex: [u8; 4],
    /// Source QPN.
    pub src_qp: u32,
    /// Flags (empty for error CQEs).
    pub wc_flags: WcFlags,
    /// Vendor error.
    pub vendor_err: u32,
    /// P_Key index.
    pub pkey_index: u16,
    /// Port.
    pub port_num: u8,
    /// Source MAC (valid with WITH_SMAC).
    pub smac: [u8; 6],
    /// Network header type (valid with WITH_NETWORK_HDR_TYPE).
    pub network_hdr_type: Option<NetworkType>,
}

/// The part of a validated CQE the completion path consumes: every check of [`Cqe::parse`]
/// runs (the full decode is built on this one), but the fields only diagnostics read
/// (source QP, vendor error, P_Key index, port, SMAC) are not extracted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqeCore {
    /// From the WQE.
    pub wr_id: u64,
    /// QP handle (validated against [`CqeLimits::qp_bound`]).
    pub qp: u32,
    /// Status.
    pub status: WcStatus,
    /// Opcode; `None` only for an error CQE whose opcode is unknown.
    pub opcode: Option<WcOpcode>,
    /// Bytes transferred (0 for error CQEs).
    pub byte_len: u32,
    /// Raw bytes @28: immediate data (network order) or the invalidated key (LE).
    pub ex: [u8; 4],
    /// Flags (empty for error CQEs).
    pub wc_flags: WcFlags,
    /// Network header type (valid with WITH_NETWORK_HDR_TYPE).
    pub network_hdr_type: Option<NetworkType>,
}

/// A CQE as the eight little-endian 64-bit words the ring copy loads.
pub type CqeWords = [u64; CQE_SIZE / 8];

/// The low and high 32-bit halves of a little-endian word (fields @8k and @8k+4).
const fn halves(w: u64) -> (u32, u32) {
    (w as u32, (w >> 32) as u32)
}

impl CqeCore {
    /// Decodes and validates a CQE copied out of the ring as words (copy first, then decode:
    /// the device cannot change it between check and use).
    ///
    /// # Errors
    ///
    /// [`BadCqe`] with the first failing check.
    pub fn decode(w: &CqeWords, limits: &CqeLimits) -> Result<CqeCore, BadCqe> {
        let [wr_id, qp_raw, op_status, len_ex, src_flags, _, _, w7] = *w;
        let bad = |reason| BadCqe { wr_id, reason };
        let qp = u32::try_from(qp_raw)
            .ok()
            .filter(|&q| q < limits.qp_bound)
            .ok_or(bad(CqeError::Qp(qp_raw)))?;
        let (raw_opcode, raw_status) = halves(op_status);
        let status = WcStatus::try_from(raw_status).map_err(bad)?;
        let (raw_len, ex) = halves(len_ex);
        let mut cqe = CqeCore {
            wr_id,
            qp,
            status,
            opcode: WcOpcode::try_from(raw_opcode).ok(),
            byte_len: 0,
            ex: ex.to_le_bytes(),
            wc_flags: WcFlags::empty(),
            network_hdr_type: None,
        };
        if status != WcStatus::Success {
            return Ok(cqe);
        }
        cqe.opcode = Some(WcOpcode::try_from(raw_opcode).map_err(bad)?);
        if raw_len > limits.max_byte_len {
            return Err(bad(CqeError::Length(raw_len)));
        }
        cqe.byte_len = raw_len;
        let raw_flags = halves(src_flags).1;
        let flags = WcFlags::from_bits(raw_flags).ok_or(bad(CqeError::Flags(raw_flags)))?;
        if flags.contains(WcFlags::WITH_IMM | WcFlags::WITH_INVALIDATE) {
            return Err(bad(CqeError::Flags(raw_flags)));
        }
        cqe.wc_flags = flags;
        if flags.contains(WcFlags::WITH_NETWORK_HDR_TYPE) {
            // Byte 57 is the second byte of word 7.
            let t = (w7 >> 8) as u8;
            cqe.network_hdr_type = Some(match t {
                0 => NetworkType::Ib,
                1 => NetworkType::Ipv4,
                2 => NetworkType::Ipv6,
                other => return Err(bad(CqeError::NetworkType(other))),
            });
        }
        Ok(cqe)
    }

    /// Immediate data, when WITH_IMM.
    pub fn imm_data(&self) -> Option<[u8; 4]> {
        self.wc_flags.contains(WcFlags::WITH_IMM).then_some(self.ex)
    }

    /// The remotely invalidated key (LE, M28), when WITH_INVALIDATE.
    pub fn invalidated_rkey(&self) -> Option<u32> {
        self.wc_flags
            .contains(WcFlags::WITH_INVALIDATE)
            .then_some(u32::from_le_bytes(self.ex))
    }
}

impl Cqe {
    /// Decodes a CQE copied out of the ring (copy first, then parse: the device cannot change
    /// it between check and use).
    ///
    /// # Errors
    ///
    /// [`BadCqe`] with the first failing check.
    pub fn parse(b: &[u8; CQE_SIZE], limits: &CqeLimits) -> Result<Cqe, BadCqe> {
        let mut w: CqeWords = [0; CQE_SIZE / 8];
        for (i, o) in w.iter_mut().enumerate() {
            *o = get_u64(b, i * 8);
        }
        let c = CqeCore::decode(&w, limits)?;
        Ok(Cqe {
            wr_id: c.wr_id,
            qp: c.qp,
            status: c.status,
            opcode: c.opcode,
            byte_len: c.byte_len,
            ex: c.ex,
            src_qp: get_u32(b, 32),
            wc_flags: c.wc_flags,
            vendor_err: get_u32(b, 40),
            pkey_index: get_u16(b, 44),
            port_num: get_u8(b, 50),
            smac: get(b, 51),
            network_hdr_type: c.network_hdr_type,
        })
    }

    /// Immediate data, when WITH_IMM.
    pub fn imm_data(&self) -> Option<[u8; 4]> {
        self.wc_flags.contains(WcFlags::WITH_IMM).then_some(self.ex)
    }

    /// The remotely invalidated key (LE, M28), when WITH_INVALIDATE.
    pub fn invalidated_rkey(&self) -> Option<u32> {
        self.wc_flags
            .contains(WcFlags::WITH_INVALIDATE)
            .then_some(u32::from_le_bytes(self.ex))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIM: CqeLimits = CqeLimits {
        qp_bound: 1024,
        max_byte_len: 0x8000_0028,
    };

    fn ud_recv() -> [u8; 64] {
        let mut b = [0u8; 64];
        b[0..8].copy_from_slice(&0x0102_0304_0506_0708u64.to_le_bytes());
        b[8] = 5; // qp handle
        b[16] = 128; // RECV
        b[24..28].copy_from_slice(&296u32.to_le_bytes());
        b[32] = 0x07; // src_qp
        b[36] = 0x51; // GRH | WITH_SMAC | WITH_NETWORK_HDR_TYPE
        b[50] = 1;
        b[51..57].copy_from_slice(&[0x00, 0x50, 0x56, 1, 2, 3]);
        b[57] = 1;
        b
    }

    #[test]
    fn decodes_ud_receive() {
        let c = Cqe::parse(&ud_recv(), &LIM).unwrap();
        assert_eq!(c.wr_id, 0x0102_0304_0506_0708);
        assert_eq!(c.qp, 5);
        assert_eq!(c.opcode, Some(WcOpcode::Recv));
        assert_eq!(c.status, WcStatus::Success);
        assert_eq!(c.byte_len, 296);
        assert_eq!(c.src_qp, 7);
        assert_eq!(
            c.wc_flags,
            WcFlags::GRH | WcFlags::WITH_SMAC | WcFlags::WITH_NETWORK_HDR_TYPE
        );
        assert_eq!(c.smac, [0x00, 0x50, 0x56, 1, 2, 3]);
        assert_eq!(c.network_hdr_type, Some(NetworkType::Ipv4));
        assert_eq!(c.port_num, 1);
        assert_eq!(c.imm_data(), None);
    }

    #[test]
    fn imm_and_invalidate() {
        let mut b = ud_recv();
        b[36] = 0x02;
        b[28..32].copy_from_slice(&[0xDE, 0xAD, 0xBE, 0xEF]);
        let c = Cqe::parse(&b, &LIM).unwrap();
        assert_eq!(c.imm_data(), Some([0xDE, 0xAD, 0xBE, 0xEF]));
        b[36] = 0x04;
        let c = Cqe::parse(&b, &LIM).unwrap();
        assert_eq!(c.invalidated_rkey(), Some(0xEFBE_ADDE));
        b[36] = 0x06;
        assert_eq!(Cqe::parse(&b, &LIM).unwrap_err().reason, CqeError::Flags(6));
    }

    #[test]
    fn rejects_garbage() {
        let mut b = ud_recv();
        b[16] = 11;
        assert_eq!(
            Cqe::parse(&b, &LIM).unwrap_err().reason,
            CqeError::Opcode(11)
        );
        let mut b = ud_recv();
        b[16..20].copy_from_slice(&130u32.to_le_bytes());
        assert_eq!(
            Cqe::parse(&b, &LIM).unwrap_err().reason,
            CqeError::Opcode(130)
        );
        let mut b = ud_recv();
        b[20] = 22;
        let e = Cqe::parse(&b, &LIM).unwrap_err();
        assert_eq!(e.reason, CqeError::Status(22));
        assert_eq!(e.wr_id, 0x0102_0304_0506_0708);
        let mut b = ud_recv();
        b[8..10].copy_from_slice(&1024u16.to_le_bytes());
        assert_eq!(Cqe::parse(&b, &LIM).unwrap_err().reason, CqeError::Qp(1024));
        let mut b = ud_recv();
        b[12] = 1; // high bits of `qp` set: not masked away
        assert_eq!(
            Cqe::parse(&b, &LIM).unwrap_err().reason,
            CqeError::Qp(0x1_0000_0005)
        );
        let mut b = ud_recv();
        b[37] = 1;
        assert_eq!(
            Cqe::parse(&b, &LIM).unwrap_err().reason,
            CqeError::Flags(0x151)
        );
        let mut b = ud_recv();
        b[57] = 3;
        assert_eq!(
            Cqe::parse(&b, &LIM).unwrap_err().reason,
            CqeError::NetworkType(3)
        );
        let mut b = ud_recv();
        b[24..28].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(
            Cqe::parse(&b, &LIM).unwrap_err().reason,
            CqeError::Length(u32::MAX)
        );
    }

    fn words(b: &[u8; 64]) -> CqeWords {
        core::array::from_fn(|i| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap()))
    }

    #[test]
    fn word_decode_agrees_with_the_full_parse() {
        // Every case the full parse accepts or rejects, mutated one byte at a time: the
        // narrow decode must reach the same verdict and the same fields.
        let mut cases = alloc::vec![ud_recv()];
        for (at, v) in [
            (16, 11),
            (16, 129),
            (20, 22),
            (20, 5),
            (8, 0xFF),
            (12, 1),
            (37, 1),
            (36, 0x02),
            (36, 0x04),
            (36, 0x06),
            (57, 3),
            (57, 2),
            (27, 0xFF),
        ] {
            let mut b = ud_recv();
            b[28..32].copy_from_slice(&[0xDE, 0xAD, 0xBE, 0xEF]);
            b[at] = v;
            cases.push(b);
        }
        let lim = CqeLimits {
            qp_bound: 1024,
            max_byte_len: 0x100,
        };
        for b in cases {
            for l in [LIM, lim] {
                let full = Cqe::parse(&b, &l);
                let core = CqeCore::decode(&words(&b), &l);
                match (full, core) {
                    (Ok(f), Ok(c)) => {
                        assert_eq!(
                            (f.wr_id, f.qp, f.status, f.opcode, f.byte_len, f.ex),
                            (c.wr_id, c.qp, c.status, c.opcode, c.byte_len, c.ex)
                        );
                        assert_eq!(
                            (f.wc_flags, f.network_hdr_type),
                            (c.wc_flags, c.network_hdr_type)
                        );
                        assert_eq!(f.imm_data(), c.imm_data());
                        assert_eq!(f.invalidated_rkey(), c.invalidated_rkey());
                    }
                    (Err(f), Err(c)) => assert_eq!(f, c),
                    (f, c) => panic!("full {f:?} vs narrow {c:?}"),
                }
            }
        }
        let mut b = ud_recv();
        b[36] = 0x04;
        b[28..32].copy_from_slice(&0x1234_5678u32.to_le_bytes());
        let c = CqeCore::decode(&words(&b), &LIM).unwrap();
        assert_eq!(c.invalidated_rkey(), Some(0x1234_5678));
        assert_eq!(c.network_hdr_type, None);
        assert_eq!(c.byte_len, 296);
    }

    #[test]
    fn error_cqe_keeps_only_meaningful_fields() {
        let mut b = [0xA5u8; 64];
        b[0..8].copy_from_slice(&77u64.to_le_bytes());
        b[8..16].copy_from_slice(&3u64.to_le_bytes());
        b[16..20].copy_from_slice(&999u32.to_le_bytes()); // garbage opcode
        b[20..24].copy_from_slice(&5u32.to_le_bytes()); // WR_FLUSH_ERR
        let c = Cqe::parse(&b, &LIM).unwrap();
        assert_eq!(c.status, WcStatus::WrFlushErr);
        assert_eq!((c.wr_id, c.qp, c.opcode, c.byte_len), (77, 3, None, 0));
        assert_eq!(c.wc_flags, WcFlags::empty());
        b[16..20].copy_from_slice(&128u32.to_le_bytes());
        assert_eq!(Cqe::parse(&b, &LIM).unwrap().opcode, Some(WcOpcode::Recv));
        for v in (0..=10).chain([128, 129]) {
            assert_eq!(WcOpcode::try_from(v).map(|o| o as u32), Ok(v));
        }
        for v in 0..=21 {
            assert_eq!(WcStatus::try_from(v).map(|o| o as u32), Ok(v));
        }
    }
}
