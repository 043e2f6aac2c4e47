//! Ethernet II header, with an optional 802.1Q tag (cm.md §7.1: no FCS, as in pcap).

use super::{Result, WireError, be16};

/// Ethernet type of IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// Ethernet type of IPv6.
pub const ETHERTYPE_IPV6: u16 = 0x86DD;
/// Ethernet type of an 802.1Q VLAN tag.
pub const ETHERTYPE_VLAN: u16 = 0x8100;
/// Broadcast MAC address.
pub const BROADCAST: [u8; 6] = [0xFF; 6];

/// Byte ranges of the untagged header; a tag inserts 4 bytes before the Ethernet type.
pub mod field {
    use core::ops::Range;
    /// Destination MAC.
    pub const DST: Range<usize> = 0..6;
    /// Source MAC.
    pub const SRC: Range<usize> = 6..12;
    /// Ethernet type (or 0x8100 when tagged).
    pub const ETHERTYPE: Range<usize> = 12..14;
    /// 802.1Q tag control information, when tagged.
    pub const VLAN_TCI: Range<usize> = 14..16;
    /// Inner Ethernet type, when tagged.
    pub const VLAN_ETHERTYPE: Range<usize> = 16..18;
    /// Untagged header length.
    pub const HEADER_LEN: usize = 14;
    /// Tagged header length.
    pub const TAGGED_HEADER_LEN: usize = 18;
}

/// A read/write view of an Ethernet II frame.
#[derive(Debug, Clone)]
pub struct EthernetFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Wraps a buffer without checking it; accessors may panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// Wraps a buffer after [`check_len`](Self::check_len); required for untrusted input.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let f = Self::new_unchecked(buffer);
        f.check_len()?;
        Ok(f)
    }

    /// Ensures the header (tagged or not) fits in the buffer.
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < field::HEADER_LEN {
            return Err(WireError::Truncated);
        }
        if be16(b, field::ETHERTYPE.start) == ETHERTYPE_VLAN && b.len() < field::TAGGED_HEADER_LEN {
            return Err(WireError::Truncated);
        }
        Ok(())
    }

    /// Destination MAC.
    pub fn dst(&self) -> [u8; 6] {
        let mut m = [0; 6];
        m.copy_from_slice(&self.buffer.as_ref()[field::DST]);
        m
    }

    /// Source MAC.
    pub fn src(&self) -> [u8; 6] {
        let mut m = [0; 6];
        m.copy_from_slice(&self.buffer.as_ref()[field::SRC]);
        m
    }

    /// The 802.1Q TCI, if tagged.
    pub fn vlan_tci(&self) -> Option<u16> {
        let b = self.buffer.as_ref();
        (be16(b, field::ETHERTYPE.start) == ETHERTYPE_VLAN).then(|| be16(b, field::VLAN_TCI.start))
    }

    /// The payload's Ethernet type (inner type when tagged).
    pub fn ethertype(&self) -> u16 {
        let b = self.buffer.as_ref();
        match self.vlan_tci() {
            Some(_) => be16(b, field::VLAN_ETHERTYPE.start),
            None => be16(b, field::ETHERTYPE.start),
        }
    }

    /// Header length: 14, or 18 when tagged.
    pub fn header_len(&self) -> usize {
        if self.vlan_tci().is_some() {
            field::TAGGED_HEADER_LEN
        } else {
            field::HEADER_LEN
        }
    }

    /// Everything after the header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

/// High-level Ethernet II header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EthernetRepr {
    /// Destination MAC.
    pub dst: [u8; 6],
    /// Source MAC.
    pub src: [u8; 6],
    /// 802.1Q TCI (PCP 3 | DEI 1 | VID 12) when tagged.
    pub vlan: Option<u16>,
    /// Payload Ethernet type.
    pub ethertype: u16,
}

impl EthernetRepr {
    /// Parses a checked frame.
    pub fn parse<T: AsRef<[u8]>>(f: &EthernetFrame<T>) -> Result<Self> {
        f.check_len()?;
        Ok(Self {
            dst: f.dst(),
            src: f.src(),
            vlan: f.vlan_tci(),
            ethertype: f.ethertype(),
        })
    }

    /// Header length this repr emits.
    pub const fn buffer_len(&self) -> usize {
        if self.vlan.is_some() {
            field::TAGGED_HEADER_LEN
        } else {
            field::HEADER_LEN
        }
    }

    /// Writes the header into the first [`buffer_len`](Self::buffer_len) bytes of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        let b = buf
            .get_mut(..self.buffer_len())
            .ok_or(WireError::Truncated)?;
        b[field::DST].copy_from_slice(&self.dst);
        b[field::SRC].copy_from_slice(&self.src);
        match self.vlan {
            Some(tci) => {
                b[field::ETHERTYPE].copy_from_slice(&ETHERTYPE_VLAN.to_be_bytes());
                b[field::VLAN_TCI].copy_from_slice(&tci.to_be_bytes());
                b[field::VLAN_ETHERTYPE].copy_from_slice(&self.ethertype.to_be_bytes());
            }
            None => b[field::ETHERTYPE].copy_from_slice(&self.ethertype.to_be_bytes()),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UNTAGGED: [u8; 16] = [
        0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01, 0x86, 0xDD, 0xAA, 0xBB,
    ];
    const TAGGED: [u8; 19] = [
        0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01, 0x81, 0x00, 0x60, 0x07, 0x08, 0x00, 0xCC,
    ];

    #[test]
    fn parse_untagged() {
        let f = EthernetFrame::new_checked(&UNTAGGED[..]).unwrap();
        let r = EthernetRepr::parse(&f).unwrap();
        assert_eq!(r.dst, [2, 0, 0, 0, 0, 2]);
        assert_eq!(r.src, [2, 0, 0, 0, 0, 1]);
        assert_eq!(r.vlan, None);
        assert_eq!(r.ethertype, ETHERTYPE_IPV6);
        assert_eq!(f.payload(), &[0xAA, 0xBB]);
        let mut out = [0u8; 14];
        r.emit(&mut out).unwrap();
        assert_eq!(out, UNTAGGED[..14]);
    }

    #[test]
    fn parse_tagged() {
        let f = EthernetFrame::new_checked(&TAGGED[..]).unwrap();
        let r = EthernetRepr::parse(&f).unwrap();
        assert_eq!(r.vlan, Some(0x6007));
        assert_eq!(r.ethertype, ETHERTYPE_IPV4);
        assert_eq!(f.payload(), &[0xCC]);
        let mut out = [0u8; 18];
        r.emit(&mut out).unwrap();
        assert_eq!(out, TAGGED[..18]);
    }

    #[test]
    fn short_rejected() {
        assert_eq!(
            EthernetFrame::new_checked(&UNTAGGED[..13]).unwrap_err(),
            WireError::Truncated
        );
        // A tag announced but cut off.
        assert_eq!(
            EthernetFrame::new_checked(&TAGGED[..16]).unwrap_err(),
            WireError::Truncated
        );
        let r = EthernetRepr {
            dst: [0; 6],
            src: [0; 6],
            vlan: Some(1),
            ethertype: 0x0800,
        };
        assert_eq!(r.emit(&mut [0u8; 17]), Err(WireError::Truncated));
    }
}
