//! IPv6 fixed header as RoCEv2 uses it (cm.md §7.1): traffic class and hop limit from the
//! address vector, flow label 0, next header 17, no extension headers.

use super::{Result, WireError, be16, be32};

/// Byte ranges of the 40-byte fixed header.
pub mod field {
    use core::ops::Range;
    /// Version 4 bits | traffic class 8 | flow label 20.
    pub const VER_TC_FLOW: Range<usize> = 0..4;
    /// Payload length.
    pub const LENGTH: Range<usize> = 4..6;
    /// Next header.
    pub const NXT_HDR: usize = 6;
    /// Hop limit.
    pub const HOP_LIMIT: usize = 7;
    /// Source address.
    pub const SRC: Range<usize> = 8..24;
    /// Destination address.
    pub const DST: Range<usize> = 24..40;
    /// Header length.
    pub const HEADER_LEN: usize = 40;
}

/// A read/write view of an IPv6 packet.
#[derive(Debug, Clone)]
pub struct Ipv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
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

    /// Ensures the fixed header and the payload length fit; trailing bytes are allowed.
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < field::HEADER_LEN {
            return Err(WireError::Truncated);
        }
        if b.len() < field::HEADER_LEN + usize::from(self.payload_len()) {
            return Err(WireError::Truncated);
        }
        Ok(())
    }

    fn word0(&self) -> u32 {
        be32(self.buffer.as_ref(), 0)
    }

    /// Version nibble.
    pub fn version(&self) -> u8 {
        // CAST: 4 bits.
        (self.word0() >> 28) as u8
    }

    /// Traffic class.
    pub fn traffic_class(&self) -> u8 {
        // CAST: 8 bits.
        (self.word0() >> 20) as u8
    }

    /// Flow label (20 bits).
    pub fn flow_label(&self) -> u32 {
        self.word0() & 0xF_FFFF
    }

    /// Payload length field.
    pub fn payload_len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::LENGTH.start)
    }

    /// Next header.
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::NXT_HDR]
    }

    /// Hop limit.
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }

    /// Source address.
    pub fn src(&self) -> [u8; 16] {
        let mut a = [0; 16];
        a.copy_from_slice(&self.buffer.as_ref()[field::SRC]);
        a
    }

    /// Destination address.
    pub fn dst(&self) -> [u8; 16] {
        let mut a = [0; 16];
        a.copy_from_slice(&self.buffer.as_ref()[field::DST]);
        a
    }

    /// The 40 header bytes.
    pub fn header(&self) -> &[u8] {
        &self.buffer.as_ref()[..field::HEADER_LEN]
    }

    /// The payload, delimited by the payload length.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()
            [field::HEADER_LEN..field::HEADER_LEN + usize::from(self.payload_len())]
    }
}

/// High-level IPv6 fixed header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv6Repr {
    /// Source address.
    pub src: [u8; 16],
    /// Destination address.
    pub dst: [u8; 16],
    /// Traffic class.
    pub traffic_class: u8,
    /// Flow label (low 20 bits used).
    pub flow_label: u32,
    /// Hop limit.
    pub hop_limit: u8,
    /// Next header.
    pub next_header: u8,
    /// Payload length.
    pub payload_len: usize,
}

impl Ipv6Repr {
    /// Parses a checked packet (version 6).
    pub fn parse<T: AsRef<[u8]>>(p: &Ipv6Packet<T>) -> Result<Self> {
        p.check_len()?;
        if p.version() != 6 {
            return Err(WireError::BadIpVersion(p.version()));
        }
        Ok(Self {
            src: p.src(),
            dst: p.dst(),
            traffic_class: p.traffic_class(),
            flow_label: p.flow_label(),
            hop_limit: p.hop_limit(),
            next_header: p.next_header(),
            payload_len: usize::from(p.payload_len()),
        })
    }

    /// Header length (40).
    pub const fn buffer_len(&self) -> usize {
        field::HEADER_LEN
    }

    /// Writes the 40-byte header into the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        let len = u16::try_from(self.payload_len).map_err(|_| WireError::FieldRange)?;
        if self.flow_label > 0xF_FFFF {
            return Err(WireError::FieldRange);
        }
        let b = buf
            .get_mut(..field::HEADER_LEN)
            .ok_or(WireError::Truncated)?;
        let w0 = (6u32 << 28) | (u32::from(self.traffic_class) << 20) | self.flow_label;
        b[field::VER_TC_FLOW].copy_from_slice(&w0.to_be_bytes());
        b[field::LENGTH].copy_from_slice(&len.to_be_bytes());
        b[field::NXT_HDR] = self.next_header;
        b[field::HOP_LIMIT] = self.hop_limit;
        b[field::SRC].copy_from_slice(&self.src);
        b[field::DST].copy_from_slice(&self.dst);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HDR: [u8; 42] = [
        0x6A, 0xB0, 0x00, 0x05, 0x00, 0x02, 0x11, 0x40, // ver 6, tc 0xAB, flow 5, len 2
        0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, // src fe80::1
        0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, // dst fe80::2
        0xDE, 0xAD,
    ];

    #[test]
    fn round_trip() {
        let p = Ipv6Packet::new_checked(&HDR[..]).unwrap();
        let r = Ipv6Repr::parse(&p).unwrap();
        assert_eq!(r.traffic_class, 0xAB);
        assert_eq!(r.flow_label, 5);
        assert_eq!(r.hop_limit, 64);
        assert_eq!(r.next_header, 17);
        assert_eq!(r.payload_len, 2);
        assert_eq!(r.src[15], 1);
        assert_eq!(r.dst[15], 2);
        assert_eq!(p.payload(), &[0xDE, 0xAD]);
        let mut out = [0u8; 40];
        r.emit(&mut out).unwrap();
        assert_eq!(out[..], HDR[..40]);
    }

    #[test]
    fn rejects() {
        assert_eq!(
            Ipv6Packet::new_checked(&HDR[..39]).unwrap_err(),
            WireError::Truncated
        );
        // Payload length 3 with only 2 bytes present.
        let mut b = HDR;
        b[5] = 3;
        assert_eq!(
            Ipv6Packet::new_checked(&b[..]).unwrap_err(),
            WireError::Truncated
        );
        let mut b = HDR;
        b[0] = 0x4A;
        assert_eq!(
            Ipv6Repr::parse(&Ipv6Packet::new_unchecked(&b[..])),
            Err(WireError::BadIpVersion(4))
        );
    }
}
