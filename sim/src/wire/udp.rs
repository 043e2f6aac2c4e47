//! UDP header (cm.md §7.1): destination port 4791, length = 8 + BTH..ICRC.
//!
//! Checksum policy: cm.md §7.1 (rxe) sends checksum 0. For IPv4 we do the same; for IPv6 a zero
//! UDP checksum is only tolerated by RFC 6935 tunnels and Wireshark flags it, so
//! [`roce::RocePacket`](super::roce::RocePacket) computes it there. On receive both 0 and a
//! correct checksum are accepted; a wrong non-zero checksum is rejected.

use super::checksum;
use super::{Result, WireError, be16};

/// Byte ranges of the 8-byte header.
pub mod field {
    use core::ops::Range;
    /// Source port.
    pub const SRC_PORT: Range<usize> = 0..2;
    /// Destination port.
    pub const DST_PORT: Range<usize> = 2..4;
    /// Length (header + payload).
    pub const LENGTH: Range<usize> = 4..6;
    /// Checksum.
    pub const CHECKSUM: Range<usize> = 6..8;
    /// Header length.
    pub const HEADER_LEN: usize = 8;
}

/// Pseudo-header addresses for the UDP checksum.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PseudoHeader {
    /// IPv4 source and destination.
    V4([u8; 4], [u8; 4]),
    /// IPv6 source and destination.
    V6([u8; 16], [u8; 16]),
}

impl PseudoHeader {
    fn sum(&self, udp_len: usize) -> u32 {
        // CAST: UDP lengths are below 2^16 here (checked by callers), the v6 form takes 32 bits.
        let len = udp_len as u32;
        match self {
            Self::V4(s, d) => {
                let acc = checksum::sum(checksum::sum(0, s), d);
                checksum::sum(acc, &[0, 17]) + (len & 0xFFFF)
            }
            Self::V6(s, d) => {
                let acc = checksum::sum(checksum::sum(0, s), d);
                checksum::sum(acc, &len.to_be_bytes()) + 17
            }
        }
    }
}

/// A read/write view of a UDP datagram.
#[derive(Debug, Clone)]
pub struct UdpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
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

    /// Ensures `8 <= length field <= buffer length`.
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < field::HEADER_LEN {
            return Err(WireError::Truncated);
        }
        let len = usize::from(self.len());
        if len < field::HEADER_LEN {
            return Err(WireError::BadLength);
        }
        if b.len() < len {
            return Err(WireError::Truncated);
        }
        Ok(())
    }

    /// Source port.
    pub fn src_port(&self) -> u16 {
        be16(self.buffer.as_ref(), field::SRC_PORT.start)
    }

    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        be16(self.buffer.as_ref(), field::DST_PORT.start)
    }

    /// Length field.
    pub fn len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::LENGTH.start)
    }

    /// True when the length field covers only the header.
    pub fn is_empty(&self) -> bool {
        usize::from(self.len()) == field::HEADER_LEN
    }

    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM.start)
    }

    /// True if the checksum is 0 (absent) or verifies against `ph`.
    pub fn verify_checksum(&self, ph: &PseudoHeader) -> bool {
        if self.checksum() == 0 {
            return true;
        }
        let len = usize::from(self.len());
        let acc = checksum::sum(ph.sum(len), &self.buffer.as_ref()[..len]);
        checksum::finish(acc) == 0
    }

    /// The header bytes.
    pub fn header(&self) -> &[u8] {
        &self.buffer.as_ref()[..field::HEADER_LEN]
    }

    /// The payload, delimited by the length field.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::HEADER_LEN..usize::from(self.len())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpPacket<T> {
    /// Computes and stores the checksum (0 is sent as 0xFFFF, RFC 768).
    pub fn fill_checksum(&mut self, ph: &PseudoHeader) {
        let len = usize::from(self.len());
        let b = self.buffer.as_mut();
        b[field::CHECKSUM].copy_from_slice(&[0, 0]);
        let mut c = checksum::finish(checksum::sum(ph.sum(len), &b[..len]));
        if c == 0 {
            c = 0xFFFF;
        }
        b[field::CHECKSUM].copy_from_slice(&c.to_be_bytes());
    }
}

/// High-level UDP header; the checksum is written as 0 by `emit` (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdpRepr {
    /// Source port (ECMP entropy for RoCEv2).
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Payload length.
    pub payload_len: usize,
}

impl UdpRepr {
    /// Parses a checked datagram; verifies a non-zero checksum against `ph`.
    pub fn parse<T: AsRef<[u8]>>(p: &UdpPacket<T>, ph: &PseudoHeader) -> Result<Self> {
        p.check_len()?;
        if !p.verify_checksum(ph) {
            return Err(WireError::BadUdpChecksum);
        }
        Ok(Self {
            src_port: p.src_port(),
            dst_port: p.dst_port(),
            payload_len: usize::from(p.len()) - field::HEADER_LEN,
        })
    }

    /// Header length (8).
    pub const fn buffer_len(&self) -> usize {
        field::HEADER_LEN
    }

    /// Writes the header with checksum 0 into the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        let len = u16::try_from(field::HEADER_LEN + self.payload_len)
            .map_err(|_| WireError::FieldRange)?;
        let b = buf
            .get_mut(..field::HEADER_LEN)
            .ok_or(WireError::Truncated)?;
        b[field::SRC_PORT].copy_from_slice(&self.src_port.to_be_bytes());
        b[field::DST_PORT].copy_from_slice(&self.dst_port.to_be_bytes());
        b[field::LENGTH].copy_from_slice(&len.to_be_bytes());
        b[field::CHECKSUM].copy_from_slice(&[0, 0]);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// UDP part of scapy's test/contrib/roce.uts example: checksum 0xaca2 over the pseudo
    /// header, BTH, 20 payload bytes and the ICRC 78 f3 53 f3.
    fn scapy_udp() -> Vec<u8> {
        let mut v = vec![0xc0, 0x00, 0x12, 0xb7, 0x00, 0x2c, 0xac, 0xa2];
        v.extend_from_slice(&[
            0x24, 0x60, 0xff, 0xff, 0x00, 0x00, 0x00, 0xd3, 0x00, 0xcf, 0x17, 0x10,
        ]);
        v.extend_from_slice(b"F0\x81\x8b\xe2\x895\xd9\x0e\x9a\x95PT\x01\xbe\x88^P\x00\x00");
        v.extend_from_slice(&[0x78, 0xf3, 0x53, 0xf3]);
        v
    }

    const PH: PseudoHeader = PseudoHeader::V4([192, 168, 0, 7], [192, 168, 0, 7]);

    #[test]
    fn known_checksum() {
        let b = scapy_udp();
        let p = UdpPacket::new_checked(&b[..]).unwrap();
        assert!(p.verify_checksum(&PH));
        let r = UdpRepr::parse(&p, &PH).unwrap();
        assert_eq!(
            r,
            UdpRepr {
                src_port: 49152,
                dst_port: 4791,
                payload_len: 36
            }
        );
        let mut c = b.clone();
        r.emit(&mut c).unwrap();
        assert_eq!(UdpPacket::new_unchecked(&c[..]).checksum(), 0);
        UdpPacket::new_unchecked(&mut c[..]).fill_checksum(&PH);
        assert_eq!(c, b);
    }

    #[test]
    fn rejects() {
        let b = scapy_udp();
        let mut bad = b.clone();
        bad[20] ^= 0x10;
        assert_eq!(
            UdpRepr::parse(&UdpPacket::new_unchecked(&bad[..]), &PH),
            Err(WireError::BadUdpChecksum)
        );
        // Length 7 is smaller than the header: impossible.
        let mut bad = b.clone();
        bad[4..6].copy_from_slice(&7u16.to_be_bytes());
        assert_eq!(
            UdpPacket::new_checked(&bad[..]).unwrap_err(),
            WireError::BadLength
        );
        let mut bad = b.clone();
        bad[4..6].copy_from_slice(&45u16.to_be_bytes());
        assert_eq!(
            UdpPacket::new_checked(&bad[..]).unwrap_err(),
            WireError::Truncated
        );
        assert_eq!(
            UdpPacket::new_checked(&b[..7]).unwrap_err(),
            WireError::Truncated
        );
    }

    #[test]
    fn v6_checksum_round_trip() {
        let ph = PseudoHeader::V6([0xfe; 16], [0x20; 16]);
        let mut b = vec![0u8; 8 + 5];
        UdpRepr {
            src_port: 1,
            dst_port: 4791,
            payload_len: 5,
        }
        .emit(&mut b)
        .unwrap();
        b[8..].copy_from_slice(&[1, 2, 3, 4, 5]);
        let mut p = UdpPacket::new_unchecked(&mut b[..]);
        p.fill_checksum(&ph);
        assert_ne!(p.checksum(), 0);
        assert!(p.verify_checksum(&ph));
        assert!(!p.verify_checksum(&PseudoHeader::V6([0xfe; 16], [0x21; 16])));
    }
}
