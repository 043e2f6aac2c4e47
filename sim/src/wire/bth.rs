//! Base Transport Header, 12 bytes (cm.md §7.2).

use super::psn::Psn;
use super::{Result, WireError, be16, be24, put_be24};

/// Byte offsets of the BTH.
pub mod field {
    /// OpCode.
    pub const OPCODE: usize = 0;
    /// SE 0x80 | MigReq 0x40 | PadCnt 0x30 | TVer 0x0F.
    pub const FLAGS: usize = 1;
    /// P_Key (2 bytes).
    pub const PKEY: usize = 2;
    /// FECN 0x80 | BECN 0x40 | reserved 0x3F; masked to 0xFF in the ICRC.
    pub const FECN_BECN: usize = 4;
    /// Destination QP (3 bytes).
    pub const DEST_QP: usize = 5;
    /// AckReq 0x80 | reserved.
    pub const ACKREQ: usize = 8;
    /// PSN (3 bytes).
    pub const PSN: usize = 9;
    /// Header length.
    pub const HEADER_LEN: usize = 12;
}

/// A read/write view of a BTH and what follows it.
#[derive(Debug, Clone)]
pub struct BthPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> BthPacket<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// Wraps a buffer after [`check_len`](Self::check_len).
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Ensures the 12 header bytes are present.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < field::HEADER_LEN {
            return Err(WireError::Truncated);
        }
        Ok(())
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// OpCode.
    pub fn opcode(&self) -> u8 {
        self.b()[field::OPCODE]
    }

    /// Solicited event.
    pub fn solicited(&self) -> bool {
        self.b()[field::FLAGS] & 0x80 != 0
    }

    /// Migration request.
    pub fn mig_req(&self) -> bool {
        self.b()[field::FLAGS] & 0x40 != 0
    }

    /// Pad count (0–3).
    pub fn pad_count(&self) -> u8 {
        (self.b()[field::FLAGS] >> 4) & 0x3
    }

    /// Transport header version.
    pub fn tver(&self) -> u8 {
        self.b()[field::FLAGS] & 0x0F
    }

    /// P_Key.
    pub fn pkey(&self) -> u16 {
        be16(self.b(), field::PKEY)
    }

    /// Forward explicit congestion notification.
    pub fn fecn(&self) -> bool {
        self.b()[field::FECN_BECN] & 0x80 != 0
    }

    /// Backward explicit congestion notification.
    pub fn becn(&self) -> bool {
        self.b()[field::FECN_BECN] & 0x40 != 0
    }

    /// Destination QP number (24 bits).
    pub fn dest_qp(&self) -> u32 {
        be24(self.b(), field::DEST_QP)
    }

    /// Acknowledge request.
    pub fn ack_req(&self) -> bool {
        self.b()[field::ACKREQ] & 0x80 != 0
    }

    /// Packet sequence number.
    pub fn psn(&self) -> Psn {
        Psn::new(be24(self.b(), field::PSN))
    }

    /// Bytes after the BTH.
    pub fn payload(&self) -> &[u8] {
        &self.b()[field::HEADER_LEN..]
    }
}

/// High-level BTH.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BthRepr {
    /// OpCode (see [`super::opcode`]).
    pub opcode: u8,
    /// Solicited event.
    pub solicited: bool,
    /// Migration request (RoCE: 1 per IBTA A16, rxe sets it; ignored by receivers).
    pub mig_req: bool,
    /// Pad count; [`super::roce::RocePacket::emit`] overwrites it from the payload length.
    pub pad_count: u8,
    /// P_Key (0xFFFF on RoCE).
    pub pkey: u16,
    /// FECN.
    pub fecn: bool,
    /// BECN.
    pub becn: bool,
    /// Destination QP (24 bits).
    pub dest_qp: u32,
    /// Acknowledge request.
    pub ack_req: bool,
    /// PSN.
    pub psn: Psn,
}

impl BthRepr {
    /// Parses a checked BTH; TVer must be 0.
    pub fn parse<T: AsRef<[u8]>>(p: &BthPacket<T>) -> Result<Self> {
        p.check_len()?;
        if p.tver() != 0 {
            return Err(WireError::BadTver(p.tver()));
        }
        Ok(Self {
            opcode: p.opcode(),
            solicited: p.solicited(),
            mig_req: p.mig_req(),
            pad_count: p.pad_count(),
            pkey: p.pkey(),
            fecn: p.fecn(),
            becn: p.becn(),
            dest_qp: p.dest_qp(),
            ack_req: p.ack_req(),
            psn: p.psn(),
        })
    }

    /// Header length (12).
    pub const fn buffer_len(&self) -> usize {
        field::HEADER_LEN
    }

    /// Writes the 12-byte header; reserved bits are written as 0.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        if self.dest_qp > 0xFF_FFFF || self.pad_count > 3 {
            return Err(WireError::FieldRange);
        }
        let b = buf
            .get_mut(..field::HEADER_LEN)
            .ok_or(WireError::Truncated)?;
        b[field::OPCODE] = self.opcode;
        b[field::FLAGS] =
            (u8::from(self.solicited) << 7) | (u8::from(self.mig_req) << 6) | (self.pad_count << 4);
        b[field::PKEY..field::PKEY + 2].copy_from_slice(&self.pkey.to_be_bytes());
        b[field::FECN_BECN] = (u8::from(self.fecn) << 7) | (u8::from(self.becn) << 6);
        put_be24(b, field::DEST_QP, self.dest_qp);
        b[field::ACKREQ] = u8::from(self.ack_req) << 7;
        put_be24(b, field::PSN, self.psn.value());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// BTH of scapy's roce.uts example: UC SEND Only, MigReq, pad 2, P_Key 0xFFFF, QP 211,
    /// PSN 13571856.
    const SCAPY: [u8; 12] = [
        0x24, 0x60, 0xff, 0xff, 0x00, 0x00, 0x00, 0xd3, 0x00, 0xcf, 0x17, 0x10,
    ];
    /// The BTH of a ConnectX-4 Lx CNP capture (scapy roce.uts): BECN set, QP 0x000118.
    const CNP: [u8; 12] = [
        0x81, 0x00, 0xff, 0xff, 0x40, 0x00, 0x01, 0x18, 0x00, 0x00, 0x00, 0x00,
    ];

    #[test]
    fn parse_known() {
        let r = BthRepr::parse(&BthPacket::new_checked(&SCAPY[..]).unwrap()).unwrap();
        assert_eq!(
            r,
            BthRepr {
                opcode: 0x24,
                solicited: false,
                mig_req: true,
                pad_count: 2,
                pkey: 0xFFFF,
                fecn: false,
                becn: false,
                dest_qp: 211,
                ack_req: false,
                psn: Psn::new(13_571_856),
            }
        );
        let mut out = [0u8; 12];
        r.emit(&mut out).unwrap();
        assert_eq!(out, SCAPY);

        let r = BthRepr::parse(&BthPacket::new_checked(&CNP[..]).unwrap()).unwrap();
        assert!(r.becn && !r.fecn);
        assert_eq!(r.dest_qp, 0x118);
        let mut out = [0u8; 12];
        r.emit(&mut out).unwrap();
        assert_eq!(out, CNP);
    }

    #[test]
    fn all_flags() {
        let r = BthRepr {
            opcode: 0x0A,
            solicited: true,
            mig_req: false,
            pad_count: 3,
            pkey: 0x8001,
            fecn: true,
            becn: true,
            dest_qp: 0xAB_CDEF,
            ack_req: true,
            psn: Psn::new(0xFF_FFFF),
        };
        let mut out = [0u8; 12];
        r.emit(&mut out).unwrap();
        assert_eq!(
            out,
            [
                0x0A, 0xB0, 0x80, 0x01, 0xC0, 0xAB, 0xCD, 0xEF, 0x80, 0xFF, 0xFF, 0xFF
            ]
        );
        assert_eq!(BthRepr::parse(&BthPacket::new_unchecked(&out[..])), Ok(r));
    }

    #[test]
    fn rejects() {
        assert_eq!(
            BthPacket::new_checked(&SCAPY[..11]).unwrap_err(),
            WireError::Truncated
        );
        let mut b = SCAPY;
        b[1] |= 0x01;
        assert_eq!(
            BthRepr::parse(&BthPacket::new_unchecked(&b[..])),
            Err(WireError::BadTver(1))
        );
        let r = BthRepr {
            dest_qp: 0x100_0000,
            ..BthRepr::default()
        };
        assert_eq!(r.emit(&mut [0u8; 12]), Err(WireError::FieldRange));
    }
}
