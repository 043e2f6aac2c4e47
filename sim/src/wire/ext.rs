//! BTH extension headers (cm.md §7.3, pvrdma.md §14 "Wire"): RETH 16 B, AETH 4 B, ImmDt 4 B,
//! IETH 4 B, DETH 8 B, AtomicETH 28 B, AtomicAckETH 8 B, all big-endian.

use super::{Result, WireError, be24, be32, be64, put_be24};

/// Byte ranges of each extension header.
pub mod field {
    use core::ops::Range;
    /// RETH virtual address.
    pub const RETH_VA: Range<usize> = 0..8;
    /// RETH R_Key.
    pub const RETH_RKEY: Range<usize> = 8..12;
    /// RETH DMA length.
    pub const RETH_LEN: Range<usize> = 12..16;
    /// RETH length.
    pub const RETH_LEN_BYTES: usize = 16;
    /// AETH syndrome.
    pub const AETH_SYNDROME: usize = 0;
    /// AETH MSN (24 bits).
    pub const AETH_MSN: Range<usize> = 1..4;
    /// AETH length.
    pub const AETH_LEN_BYTES: usize = 4;
    /// DETH Q_Key.
    pub const DETH_QKEY: Range<usize> = 0..4;
    /// DETH reserved byte.
    pub const DETH_RSVD: usize = 4;
    /// DETH source QP (24 bits).
    pub const DETH_SRC_QP: Range<usize> = 5..8;
    /// DETH length.
    pub const DETH_LEN_BYTES: usize = 8;
    /// ImmDt / IETH length.
    pub const U32_LEN_BYTES: usize = 4;
    /// AtomicETH VA.
    pub const ATOMIC_VA: Range<usize> = 0..8;
    /// AtomicETH R_Key.
    pub const ATOMIC_RKEY: Range<usize> = 8..12;
    /// AtomicETH swap (or add) data.
    pub const ATOMIC_SWAP: Range<usize> = 12..20;
    /// AtomicETH compare data.
    pub const ATOMIC_CMP: Range<usize> = 20..28;
    /// AtomicETH length.
    pub const ATOMIC_LEN_BYTES: usize = 28;
    /// AtomicAckETH length (original remote data).
    pub const ATOMIC_ACK_LEN_BYTES: usize = 8;
}

fn need(b: &[u8], n: usize) -> Result<&[u8]> {
    b.get(..n).ok_or(WireError::Truncated)
}

fn need_mut(b: &mut [u8], n: usize) -> Result<&mut [u8]> {
    b.get_mut(..n).ok_or(WireError::Truncated)
}

/// A checked view of a RETH.
#[derive(Debug, Clone)]
pub struct RethPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> RethPacket<T> {
    /// Wraps `buffer` if it holds 16 bytes.
    pub fn new_checked(buffer: T) -> Result<Self> {
        need(buffer.as_ref(), field::RETH_LEN_BYTES)?;
        Ok(Self { buffer })
    }
    /// Virtual address.
    pub fn va(&self) -> u64 {
        be64(self.buffer.as_ref(), field::RETH_VA.start)
    }
    /// R_Key.
    pub fn rkey(&self) -> u32 {
        be32(self.buffer.as_ref(), field::RETH_RKEY.start)
    }
    /// DMA length.
    pub fn dma_len(&self) -> u32 {
        be32(self.buffer.as_ref(), field::RETH_LEN.start)
    }
}

/// RDMA extended transport header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RethRepr {
    /// Remote virtual address.
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
    /// Length of the whole RDMA operation.
    pub dma_len: u32,
}

impl RethRepr {
    /// Header length.
    pub const BUFFER_LEN: usize = field::RETH_LEN_BYTES;
    /// Parses the first 16 bytes of `b`.
    pub fn parse(b: &[u8]) -> Result<Self> {
        let p = RethPacket::new_checked(b)?;
        Ok(Self {
            va: p.va(),
            rkey: p.rkey(),
            dma_len: p.dma_len(),
        })
    }
    /// Header length.
    pub const fn buffer_len(&self) -> usize {
        Self::BUFFER_LEN
    }
    /// Writes the header into the first 16 bytes of `b`.
    pub fn emit(&self, b: &mut [u8]) -> Result<()> {
        let b = need_mut(b, Self::BUFFER_LEN)?;
        b[field::RETH_VA].copy_from_slice(&self.va.to_be_bytes());
        b[field::RETH_RKEY].copy_from_slice(&self.rkey.to_be_bytes());
        b[field::RETH_LEN].copy_from_slice(&self.dma_len.to_be_bytes());
        Ok(())
    }
}

/// NAK codes of an AETH with syndrome 011xxxxx (pvrdma.md §14).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NakCode {
    /// 0x60 PSN sequence error.
    PsnSequenceError,
    /// 0x61 invalid request.
    InvalidRequest,
    /// 0x62 remote access error.
    RemoteAccessError,
    /// 0x63 remote operational error.
    RemoteOperationalError,
    /// 0x64 invalid RD request.
    InvalidRdRequest,
    /// Any other (reserved) code.
    Reserved(u8),
}

impl NakCode {
    /// Low 5 bits of the syndrome.
    pub const fn code(self) -> u8 {
        match self {
            Self::PsnSequenceError => 0,
            Self::InvalidRequest => 1,
            Self::RemoteAccessError => 2,
            Self::RemoteOperationalError => 3,
            Self::InvalidRdRequest => 4,
            Self::Reserved(c) => c & 0x1F,
        }
    }
    const fn from_code(c: u8) -> Self {
        match c {
            0 => Self::PsnSequenceError,
            1 => Self::InvalidRequest,
            2 => Self::RemoteAccessError,
            3 => Self::RemoteOperationalError,
            4 => Self::InvalidRdRequest,
            c => Self::Reserved(c),
        }
    }
}

/// Decoded AETH syndrome (cm.md §7.3: bits 7–5 = 000 ACK, 001 RNR NAK, 011 NAK).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AethSyndrome {
    /// ACK with a credit count (0x1F = unlimited).
    Ack {
        /// Credit count code, 5 bits.
        credits: u8,
    },
    /// RNR NAK with the IB-encoded RNR timer.
    RnrNak {
        /// RNR timer code, 5 bits.
        timer: u8,
    },
    /// NAK.
    Nak(NakCode),
    /// Reserved syndrome class (bits 7–5 = 010, 1xx); the raw byte.
    Reserved(u8),
}

impl AethSyndrome {
    /// Unlimited credits.
    pub const UNLIMITED_CREDITS: u8 = 0x1F;

    /// Decodes a syndrome byte.
    pub const fn from_byte(b: u8) -> Self {
        match b >> 5 {
            0b000 => Self::Ack { credits: b & 0x1F },
            0b001 => Self::RnrNak { timer: b & 0x1F },
            0b011 => Self::Nak(NakCode::from_code(b & 0x1F)),
            _ => Self::Reserved(b),
        }
    }

    /// Encodes to the syndrome byte.
    pub const fn to_byte(self) -> u8 {
        match self {
            Self::Ack { credits } => credits & 0x1F,
            Self::RnrNak { timer } => 0x20 | (timer & 0x1F),
            Self::Nak(c) => 0x60 | c.code(),
            Self::Reserved(b) => b,
        }
    }
}

/// A checked view of an AETH.
#[derive(Debug, Clone)]
pub struct AethPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> AethPacket<T> {
    /// Wraps `buffer` if it holds 4 bytes.
    pub fn new_checked(buffer: T) -> Result<Self> {
        need(buffer.as_ref(), field::AETH_LEN_BYTES)?;
        Ok(Self { buffer })
    }
    /// Raw syndrome byte.
    pub fn syndrome(&self) -> u8 {
        self.buffer.as_ref()[field::AETH_SYNDROME]
    }
    /// Message sequence number.
    pub fn msn(&self) -> u32 {
        be24(self.buffer.as_ref(), field::AETH_MSN.start)
    }
}

/// ACK extended transport header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AethRepr {
    /// Syndrome.
    pub syndrome: AethSyndrome,
    /// Message sequence number (24 bits).
    pub msn: u32,
}

impl AethRepr {
    /// Header length.
    pub const BUFFER_LEN: usize = field::AETH_LEN_BYTES;
    /// Parses the first 4 bytes of `b`.
    pub fn parse(b: &[u8]) -> Result<Self> {
        let p = AethPacket::new_checked(b)?;
        Ok(Self {
            syndrome: AethSyndrome::from_byte(p.syndrome()),
            msn: p.msn(),
        })
    }
    /// Header length.
    pub const fn buffer_len(&self) -> usize {
        Self::BUFFER_LEN
    }
    /// Writes the header; the MSN must fit 24 bits.
    pub fn emit(&self, b: &mut [u8]) -> Result<()> {
        if self.msn > 0xFF_FFFF {
            return Err(WireError::FieldRange);
        }
        let b = need_mut(b, Self::BUFFER_LEN)?;
        b[field::AETH_SYNDROME] = self.syndrome.to_byte();
        put_be24(b, field::AETH_MSN.start, self.msn);
        Ok(())
    }
}

/// A checked view of a DETH.
#[derive(Debug, Clone)]
pub struct DethPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> DethPacket<T> {
    /// Wraps `buffer` if it holds 8 bytes.
    pub fn new_checked(buffer: T) -> Result<Self> {
        need(buffer.as_ref(), field::DETH_LEN_BYTES)?;
        Ok(Self { buffer })
    }
    /// Q_Key.
    pub fn qkey(&self) -> u32 {
        be32(self.buffer.as_ref(), field::DETH_QKEY.start)
    }
    /// Source QP.
    pub fn src_qp(&self) -> u32 {
        be24(self.buffer.as_ref(), field::DETH_SRC_QP.start)
    }
}

/// Datagram extended transport header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DethRepr {
    /// Q_Key.
    pub qkey: u32,
    /// Source QP (24 bits).
    pub src_qp: u32,
}

impl DethRepr {
    /// Header length.
    pub const BUFFER_LEN: usize = field::DETH_LEN_BYTES;
    /// Parses the first 8 bytes of `b` (the reserved byte is ignored).
    pub fn parse(b: &[u8]) -> Result<Self> {
        let p = DethPacket::new_checked(b)?;
        Ok(Self {
            qkey: p.qkey(),
            src_qp: p.src_qp(),
        })
    }
    /// Header length.
    pub const fn buffer_len(&self) -> usize {
        Self::BUFFER_LEN
    }
    /// Writes the header; the source QP must fit 24 bits.
    pub fn emit(&self, b: &mut [u8]) -> Result<()> {
        if self.src_qp > 0xFF_FFFF {
            return Err(WireError::FieldRange);
        }
        let b = need_mut(b, Self::BUFFER_LEN)?;
        b[field::DETH_QKEY].copy_from_slice(&self.qkey.to_be_bytes());
        b[field::DETH_RSVD] = 0;
        put_be24(b, field::DETH_SRC_QP.start, self.src_qp);
        Ok(())
    }
}

/// Immediate data (4 bytes, carried opaque; big-endian on the wire like every IBA field).
pub struct ImmDt;

impl ImmDt {
    /// Header length.
    pub const BUFFER_LEN: usize = field::U32_LEN_BYTES;
    /// Parses the first 4 bytes of `b`.
    pub fn parse(b: &[u8]) -> Result<u32> {
        Ok(be32(need(b, Self::BUFFER_LEN)?, 0))
    }
    /// Writes `v` into the first 4 bytes of `b`.
    pub fn emit(v: u32, b: &mut [u8]) -> Result<()> {
        need_mut(b, Self::BUFFER_LEN)?.copy_from_slice(&v.to_be_bytes());
        Ok(())
    }
}

/// Invalidate extended transport header: the R_Key to invalidate.
pub struct Ieth;

impl Ieth {
    /// Header length.
    pub const BUFFER_LEN: usize = field::U32_LEN_BYTES;
    /// Parses the first 4 bytes of `b`.
    pub fn parse(b: &[u8]) -> Result<u32> {
        Ok(be32(need(b, Self::BUFFER_LEN)?, 0))
    }
    /// Writes `rkey` into the first 4 bytes of `b`.
    pub fn emit(rkey: u32, b: &mut [u8]) -> Result<()> {
        need_mut(b, Self::BUFFER_LEN)?.copy_from_slice(&rkey.to_be_bytes());
        Ok(())
    }
}

/// Atomic extended transport header (CmpSwap / FetchAdd).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AtomicEthRepr {
    /// Remote virtual address.
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
    /// Swap (CmpSwap) or add (FetchAdd) operand.
    pub swap_add: u64,
    /// Compare operand (CmpSwap).
    pub compare: u64,
}

impl AtomicEthRepr {
    /// Header length.
    pub const BUFFER_LEN: usize = field::ATOMIC_LEN_BYTES;
    /// Parses the first 28 bytes of `b`.
    pub fn parse(b: &[u8]) -> Result<Self> {
        let b = need(b, Self::BUFFER_LEN)?;
        Ok(Self {
            va: be64(b, field::ATOMIC_VA.start),
            rkey: be32(b, field::ATOMIC_RKEY.start),
            swap_add: be64(b, field::ATOMIC_SWAP.start),
            compare: be64(b, field::ATOMIC_CMP.start),
        })
    }
    /// Header length.
    pub const fn buffer_len(&self) -> usize {
        Self::BUFFER_LEN
    }
    /// Writes the header.
    pub fn emit(&self, b: &mut [u8]) -> Result<()> {
        let b = need_mut(b, Self::BUFFER_LEN)?;
        b[field::ATOMIC_VA].copy_from_slice(&self.va.to_be_bytes());
        b[field::ATOMIC_RKEY].copy_from_slice(&self.rkey.to_be_bytes());
        b[field::ATOMIC_SWAP].copy_from_slice(&self.swap_add.to_be_bytes());
        b[field::ATOMIC_CMP].copy_from_slice(&self.compare.to_be_bytes());
        Ok(())
    }
}

/// Atomic ACK extended transport header: the original remote data.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AtomicAckEthRepr {
    /// Value at the target before the atomic operation.
    pub orig: u64,
}

impl AtomicAckEthRepr {
    /// Header length.
    pub const BUFFER_LEN: usize = field::ATOMIC_ACK_LEN_BYTES;
    /// Parses the first 8 bytes of `b`.
    pub fn parse(b: &[u8]) -> Result<Self> {
        Ok(Self {
            orig: be64(need(b, Self::BUFFER_LEN)?, 0),
        })
    }
    /// Header length.
    pub const fn buffer_len(&self) -> usize {
        Self::BUFFER_LEN
    }
    /// Writes the header.
    pub fn emit(&self, b: &mut [u8]) -> Result<()> {
        need_mut(b, Self::BUFFER_LEN)?.copy_from_slice(&self.orig.to_be_bytes());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reth_round_trip() {
        let bytes = [
            0x00, 0x00, 0x7f, 0xaa, 0xbb, 0xcc, 0x10, 0x00, 0x00, 0x01, 0x23, 0x45, 0x00, 0x00,
            0x10, 0x00,
        ];
        let r = RethRepr::parse(&bytes).unwrap();
        assert_eq!(
            r,
            RethRepr {
                va: 0x7faa_bbcc_1000,
                rkey: 0x12345,
                dma_len: 4096
            }
        );
        let mut out = [0u8; 16];
        r.emit(&mut out).unwrap();
        assert_eq!(out, bytes);
        assert_eq!(RethRepr::parse(&bytes[..15]), Err(WireError::Truncated));
        assert_eq!(r.emit(&mut [0u8; 15]), Err(WireError::Truncated));
    }

    #[test]
    fn aeth_syndromes() {
        let cases: [(u8, AethSyndrome); 9] = [
            (0x1F, AethSyndrome::Ack { credits: 0x1F }),
            (0x00, AethSyndrome::Ack { credits: 0 }),
            (0x2E, AethSyndrome::RnrNak { timer: 14 }),
            (0x60, AethSyndrome::Nak(NakCode::PsnSequenceError)),
            (0x61, AethSyndrome::Nak(NakCode::InvalidRequest)),
            (0x62, AethSyndrome::Nak(NakCode::RemoteAccessError)),
            (0x63, AethSyndrome::Nak(NakCode::RemoteOperationalError)),
            (0x64, AethSyndrome::Nak(NakCode::InvalidRdRequest)),
            (0x45, AethSyndrome::Reserved(0x45)),
        ];
        for (byte, syn) in cases {
            let bytes = [byte, 0x12, 0x34, 0x56];
            let r = AethRepr::parse(&bytes).unwrap();
            assert_eq!(
                r,
                AethRepr {
                    syndrome: syn,
                    msn: 0x12_3456
                }
            );
            let mut out = [0u8; 4];
            r.emit(&mut out).unwrap();
            assert_eq!(out, bytes);
        }
        assert_eq!(AethRepr::parse(&[0, 0, 0]), Err(WireError::Truncated));
        let r = AethRepr {
            syndrome: AethSyndrome::Ack { credits: 0 },
            msn: 0x100_0000,
        };
        assert_eq!(r.emit(&mut [0u8; 4]), Err(WireError::FieldRange));
    }

    #[test]
    fn deth_round_trip() {
        // QP1 Q_Key 0x80010000 from source QP 1 (cm.md §2.2); reserved byte ignored on parse.
        let bytes = [0x80, 0x01, 0x00, 0x00, 0xEE, 0x00, 0x00, 0x01];
        let r = DethRepr::parse(&bytes).unwrap();
        assert_eq!(
            r,
            DethRepr {
                qkey: 0x8001_0000,
                src_qp: 1
            }
        );
        let mut out = [0xFFu8; 8];
        r.emit(&mut out).unwrap();
        assert_eq!(out, [0x80, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01]);
        assert_eq!(DethRepr::parse(&bytes[..7]), Err(WireError::Truncated));
    }

    #[test]
    fn immdt_ieth_atomic() {
        let b = [0xDE, 0xAD, 0xBE, 0xEF];
        assert_eq!(ImmDt::parse(&b), Ok(0xDEAD_BEEF));
        assert_eq!(Ieth::parse(&b), Ok(0xDEAD_BEEF));
        let mut out = [0u8; 4];
        Ieth::emit(0x0102_0304, &mut out).unwrap();
        assert_eq!(out, [1, 2, 3, 4]);
        ImmDt::emit(0x0506_0708, &mut out).unwrap();
        assert_eq!(out, [5, 6, 7, 8]);
        assert_eq!(ImmDt::parse(&b[..3]), Err(WireError::Truncated));
        assert_eq!(Ieth::emit(1, &mut [0u8; 3]), Err(WireError::Truncated));

        let a = AtomicEthRepr {
            va: 1,
            rkey: 2,
            swap_add: 3,
            compare: 4,
        };
        let mut out = [0u8; 28];
        a.emit(&mut out).unwrap();
        assert_eq!(out[7], 1);
        assert_eq!(out[11], 2);
        assert_eq!(out[19], 3);
        assert_eq!(out[27], 4);
        assert_eq!(AtomicEthRepr::parse(&out), Ok(a));
        assert_eq!(AtomicEthRepr::parse(&out[..27]), Err(WireError::Truncated));
        let k = AtomicAckEthRepr {
            orig: 0x0102_0304_0506_0708,
        };
        let mut out = [0u8; 8];
        k.emit(&mut out).unwrap();
        assert_eq!(out, [1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(AtomicAckEthRepr::parse(&out), Ok(k));
    }
}
