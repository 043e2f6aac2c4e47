//! IPv4 header as RoCEv2 uses it (cm.md §7.1): IHL 5, DF set, protocol 17, checksum computed.

use super::checksum;
use super::{Result, WireError, be16};

/// IP protocol number of UDP.
pub const PROTO_UDP: u8 = 17;

/// Byte ranges of the fixed 20-byte header.
pub mod field {
    use core::ops::Range;
    /// Version (high nibble) and IHL (low nibble).
    pub const VER_IHL: usize = 0;
    /// Type of service (carries the IB traffic class).
    pub const TOS: usize = 1;
    /// Total length (header + payload).
    pub const LENGTH: Range<usize> = 2..4;
    /// Identification.
    pub const IDENT: Range<usize> = 4..6;
    /// Flags (DF 0x4000, MF 0x2000) and fragment offset.
    pub const FLG_OFF: Range<usize> = 6..8;
    /// Time to live (carries the IB hop limit).
    pub const TTL: usize = 8;
    /// Protocol.
    pub const PROTOCOL: usize = 9;
    /// Header checksum.
    pub const CHECKSUM: Range<usize> = 10..12;
    /// Source address.
    pub const SRC: Range<usize> = 12..16;
    /// Destination address.
    pub const DST: Range<usize> = 16..20;
    /// Header length without options.
    pub const HEADER_LEN: usize = 20;
}

const FLAG_DF: u16 = 0x4000;
const FLAG_MF: u16 = 0x2000;

/// A read/write view of an IPv4 packet.
#[derive(Debug, Clone)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
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

    /// Ensures `20 <= 4·IHL <= total length <= buffer length`; trailing bytes (Ethernet padding)
    /// are allowed and excluded by [`payload`](Self::payload).
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < field::HEADER_LEN {
            return Err(WireError::Truncated);
        }
        let hl = self.header_len();
        let total = usize::from(self.total_len());
        if hl < field::HEADER_LEN || total < hl {
            return Err(WireError::BadLength);
        }
        if b.len() < total {
            return Err(WireError::Truncated);
        }
        Ok(())
    }

    /// Version nibble.
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] >> 4
    }

    /// Header length in bytes (4·IHL).
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::VER_IHL] & 0x0F) * 4
    }

    /// Type of service byte.
    pub fn tos(&self) -> u8 {
        self.buffer.as_ref()[field::TOS]
    }

    /// Total length field.
    pub fn total_len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::LENGTH.start)
    }

    /// Identification field.
    pub fn ident(&self) -> u16 {
        be16(self.buffer.as_ref(), field::IDENT.start)
    }

    /// Don't-fragment flag.
    pub fn dont_frag(&self) -> bool {
        be16(self.buffer.as_ref(), field::FLG_OFF.start) & FLAG_DF != 0
    }

    /// More-fragments flag set or a non-zero fragment offset.
    pub fn is_fragment(&self) -> bool {
        let v = be16(self.buffer.as_ref(), field::FLG_OFF.start);
        v & FLAG_MF != 0 || v & 0x1FFF != 0
    }

    /// Time to live.
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }

    /// Protocol.
    pub fn protocol(&self) -> u8 {
        self.buffer.as_ref()[field::PROTOCOL]
    }

    /// Header checksum field.
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM.start)
    }

    /// Source address.
    pub fn src(&self) -> [u8; 4] {
        let mut a = [0; 4];
        a.copy_from_slice(&self.buffer.as_ref()[field::SRC]);
        a
    }

    /// Destination address.
    pub fn dst(&self) -> [u8; 4] {
        let mut a = [0; 4];
        a.copy_from_slice(&self.buffer.as_ref()[field::DST]);
        a
    }

    /// True if the header checksum verifies.
    pub fn verify_checksum(&self) -> bool {
        checksum::checksum(&self.buffer.as_ref()[..self.header_len()]) == 0
    }

    /// The header bytes (including options).
    pub fn header(&self) -> &[u8] {
        &self.buffer.as_ref()[..self.header_len()]
    }

    /// The payload, delimited by the total length (Ethernet padding excluded).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..usize::from(self.total_len())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    /// Recomputes the header checksum in place.
    pub fn fill_checksum(&mut self) {
        let hl = self.header_len();
        let b = self.buffer.as_mut();
        b[field::CHECKSUM].copy_from_slice(&[0, 0]);
        let c = checksum::checksum(&b[..hl]);
        b[field::CHECKSUM].copy_from_slice(&c.to_be_bytes());
    }
}

/// High-level IPv4 header (no options).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv4Repr {
    /// Source address.
    pub src: [u8; 4],
    /// Destination address.
    pub dst: [u8; 4],
    /// Type of service (IB traffic class).
    pub tos: u8,
    /// Time to live (IB hop limit).
    pub ttl: u8,
    /// Identification (arbitrary for RoCEv2).
    pub ident: u16,
    /// Don't-fragment flag (RoCEv2 sets it).
    pub dont_frag: bool,
    /// Protocol.
    pub protocol: u8,
    /// Payload length.
    pub payload_len: usize,
}

impl Ipv4Repr {
    /// Parses a checked packet: version 4, no options, not a fragment, checksum valid.
    pub fn parse<T: AsRef<[u8]>>(p: &Ipv4Packet<T>) -> Result<Self> {
        p.check_len()?;
        if p.version() != 4 {
            return Err(WireError::BadIpVersion(p.version()));
        }
        if p.header_len() != field::HEADER_LEN {
            return Err(WireError::Ipv4Options);
        }
        if p.is_fragment() {
            return Err(WireError::Fragmented);
        }
        if !p.verify_checksum() {
            return Err(WireError::BadIpChecksum);
        }
        Ok(Self {
            src: p.src(),
            dst: p.dst(),
            tos: p.tos(),
            ttl: p.ttl(),
            ident: p.ident(),
            dont_frag: p.dont_frag(),
            protocol: p.protocol(),
            payload_len: usize::from(p.total_len()) - field::HEADER_LEN,
        })
    }

    /// Header length (20).
    pub const fn buffer_len(&self) -> usize {
        field::HEADER_LEN
    }

    /// Writes the 20-byte header, checksum included, into the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        let total = u16::try_from(field::HEADER_LEN + self.payload_len)
            .map_err(|_| WireError::FieldRange)?;
        let b = buf
            .get_mut(..field::HEADER_LEN)
            .ok_or(WireError::Truncated)?;
        b[field::VER_IHL] = 0x45;
        b[field::TOS] = self.tos;
        b[field::LENGTH].copy_from_slice(&total.to_be_bytes());
        b[field::IDENT].copy_from_slice(&self.ident.to_be_bytes());
        let flags = if self.dont_frag { FLAG_DF } else { 0 };
        b[field::FLG_OFF].copy_from_slice(&flags.to_be_bytes());
        b[field::TTL] = self.ttl;
        b[field::PROTOCOL] = self.protocol;
        b[field::SRC].copy_from_slice(&self.src);
        b[field::DST].copy_from_slice(&self.dst);
        Ipv4Packet::new_unchecked(b).fill_checksum();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The IPv4 header of scapy's test/contrib/roce.uts example (checksum 0xb4d5 there),
    /// followed by 44 payload bytes and 2 bytes of Ethernet padding.
    fn scapy_packet() -> Vec<u8> {
        let mut v = vec![
            0x45, 0x01, 0x00, 0x40, 0x04, 0x78, 0x40, 0x00, 0x40, 0x11, 0xb4, 0xd5, 192, 168, 0, 7,
            192, 168, 0, 7,
        ];
        v.extend_from_slice(&[0x5A; 44]);
        v.extend_from_slice(&[0, 0]);
        v
    }

    #[test]
    fn parse_known_header() {
        let b = scapy_packet();
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        let r = Ipv4Repr::parse(&p).unwrap();
        assert_eq!(
            r,
            Ipv4Repr {
                src: [192, 168, 0, 7],
                dst: [192, 168, 0, 7],
                tos: 1,
                ttl: 64,
                ident: 1144,
                dont_frag: true,
                protocol: PROTO_UDP,
                payload_len: 44,
            }
        );
        assert_eq!(p.payload().len(), 44);
        let mut out = [0u8; 20];
        r.emit(&mut out).unwrap();
        assert_eq!(out[..], b[..20]);
    }

    #[test]
    fn rejects_bad_headers() {
        let b = scapy_packet();
        let mut bad = b.clone();
        bad[11] ^= 1;
        assert_eq!(
            Ipv4Repr::parse(&Ipv4Packet::new_unchecked(&bad[..])),
            Err(WireError::BadIpChecksum)
        );
        // IHL 4: shorter than the fixed header.
        let mut bad = b.clone();
        bad[0] = 0x44;
        assert_eq!(
            Ipv4Packet::new_checked(&bad[..]).unwrap_err(),
            WireError::BadLength
        );
        // Total length 19 < header length.
        let mut bad = b.clone();
        bad[2..4].copy_from_slice(&19u16.to_be_bytes());
        assert_eq!(
            Ipv4Packet::new_checked(&bad[..]).unwrap_err(),
            WireError::BadLength
        );
        // Total length beyond the buffer.
        let mut bad = b.clone();
        bad[2..4].copy_from_slice(&200u16.to_be_bytes());
        assert_eq!(
            Ipv4Packet::new_checked(&bad[..]).unwrap_err(),
            WireError::Truncated
        );
        assert_eq!(
            Ipv4Packet::new_checked(&b[..19]).unwrap_err(),
            WireError::Truncated
        );
        // Options, version 6, fragment.
        let mut bad = b.clone();
        bad[0] = 0x46;
        let mut p = Ipv4Packet::new_unchecked(&mut bad[..]);
        p.fill_checksum();
        assert_eq!(Ipv4Repr::parse(&p), Err(WireError::Ipv4Options));
        let mut bad = b.clone();
        bad[0] = 0x65;
        assert_eq!(
            Ipv4Repr::parse(&Ipv4Packet::new_unchecked(&bad[..])),
            Err(WireError::BadIpVersion(6))
        );
        let mut bad = b;
        bad[6] = 0x20;
        let mut p = Ipv4Packet::new_unchecked(&mut bad[..]);
        p.fill_checksum();
        assert_eq!(Ipv4Repr::parse(&p), Err(WireError::Fragmented));
    }

    #[test]
    fn emit_rejects_oversize() {
        let r = Ipv4Repr {
            src: [0; 4],
            dst: [0; 4],
            tos: 0,
            ttl: 0,
            ident: 0,
            dont_frag: true,
            protocol: PROTO_UDP,
            payload_len: 65_516,
        };
        assert_eq!(r.emit(&mut [0u8; 20]), Err(WireError::FieldRange));
    }
}
