//! RoCEv2 wire formats: Ethernet II, IPv4, IPv6, UDP, the IBA BTH and extension headers, and the
//! ICRC (`docs/reference/cm.md` §7, `pvrdma.md` §14 "Wire").
//!
//! Each header follows the smoltcp `wire` pattern (`shared/style.md` §9): a `Packet<T: AsRef<[u8]>>`
//! view whose accessors never panic once `new_checked` has succeeded, a `mod field` of byte
//! ranges, big-endian fields, and a `Repr` with `parse` / `emit` / `buffer_len`.
//! [`roce::RocePacket`] ties them together into a whole frame; its `parse` accepts arbitrary
//! bytes and returns a [`WireError`] instead of panicking.
#![deny(unsafe_code)]

pub mod bth;
pub mod checksum;
pub mod ethernet;
pub mod ext;
pub mod icrc;
pub mod ipv4;
pub mod ipv6;
pub mod opcode;
pub mod psn;
pub mod roce;
pub mod udp;

pub use bth::{BthPacket, BthRepr};
pub use ethernet::{EthernetFrame, EthernetRepr};
pub use ext::{
    AethRepr, AethSyndrome, AtomicAckEthRepr, AtomicEthRepr, DethRepr, NakCode, RethRepr,
};
pub use ipv4::{Ipv4Packet, Ipv4Repr};
pub use ipv6::{Ipv6Packet, Ipv6Repr};
pub use opcode::{ExtHeaders, ext_headers};
pub use psn::Psn;
pub use roce::{ExtRepr, Gid, IpAddrs, RocePacket};
pub use udp::{UdpPacket, UdpRepr};

/// UDP destination port assigned to RoCEv2 (IANA; cm.md §7.1).
pub const ROCEV2_UDP_PORT: u16 = 4791;

/// Why a buffer is not a valid header or frame. Every variant is reachable from untrusted bytes;
/// none of the parsers panics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WireError {
    /// The buffer is shorter than the header (or than a length field inside it says).
    Truncated,
    /// A length field is impossible (smaller than its own header, or inconsistent with an
    /// enclosing header's length).
    BadLength,
    /// Ethernet type is neither IPv4 (0x0800) nor IPv6 (0x86DD), after an optional 802.1Q tag.
    BadEthertype(u16),
    /// IP version nibble is not the one the Ethernet type announced.
    BadIpVersion(u8),
    /// IPv4 header with options (IHL ≠ 5): RoCEv2 senders never emit them (cm.md §7.1).
    Ipv4Options,
    /// IPv4 fragment (MF set or non-zero offset); RoCEv2 frames are never fragmented (DF set).
    Fragmented,
    /// IPv4 header checksum mismatch.
    BadIpChecksum,
    /// IP protocol / next header is not UDP (17).
    NotUdp(u8),
    /// UDP destination port is not 4791.
    BadUdpPort(u16),
    /// Non-zero UDP checksum that does not verify.
    BadUdpChecksum,
    /// BTH transport header version is not 0.
    BadTver(u8),
    /// BTH opcode not implemented by this model (see [`opcode::ext_headers`]).
    UnknownOpcode(u8),
    /// BTH pad count larger than the payload it pads.
    BadPad,
    /// ICRC mismatch (`computed` over the masked headers vs `found` in the frame).
    BadIcrc {
        /// ICRC computed by the receiver.
        computed: u32,
        /// ICRC carried by the frame.
        found: u32,
    },
    /// `emit`: the extension headers present do not match what the opcode requires.
    ExtMismatch,
    /// `emit`: source and destination GID differ in family (one IPv4-mapped, one not).
    MixedAddressFamily,
    /// `emit`: a field does not fit (24-bit QPN/PSN/MSN overflow, payload too large for IP).
    FieldRange,
}

impl core::fmt::Display for WireError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Truncated => write!(f, "truncated"),
            Self::BadLength => write!(f, "impossible length field"),
            Self::BadEthertype(t) => write!(f, "ethertype {t:#06x} is not IP"),
            Self::BadIpVersion(v) => write!(f, "IP version {v} does not match ethertype"),
            Self::Ipv4Options => write!(f, "IPv4 options are not supported"),
            Self::Fragmented => write!(f, "IPv4 fragment"),
            Self::BadIpChecksum => write!(f, "bad IPv4 header checksum"),
            Self::NotUdp(p) => write!(f, "IP protocol {p} is not UDP"),
            Self::BadUdpPort(p) => write!(f, "UDP port {p} is not RoCEv2 (4791)"),
            Self::BadUdpChecksum => write!(f, "bad UDP checksum"),
            Self::BadTver(v) => write!(f, "BTH TVer {v} is not 0"),
            Self::UnknownOpcode(o) => write!(f, "unknown BTH opcode {o:#04x}"),
            Self::BadPad => write!(f, "BTH pad count exceeds payload"),
            Self::BadIcrc { computed, found } => {
                write!(
                    f,
                    "bad ICRC: computed {computed:#010x}, found {found:#010x}"
                )
            }
            Self::ExtMismatch => write!(f, "extension headers do not match the opcode"),
            Self::MixedAddressFamily => write!(f, "source and destination GID families differ"),
            Self::FieldRange => write!(f, "field value out of range"),
        }
    }
}

impl std::error::Error for WireError {}

/// Result of a wire operation.
pub type Result<T> = core::result::Result<T, WireError>;

/// Reads a big-endian u16 at `at`; callers index only within ranges `check_len` validated.
pub(crate) fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// Reads a big-endian 24-bit value at `at`.
pub(crate) fn be24(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([0, b[at], b[at + 1], b[at + 2]])
}

/// Reads a big-endian u32 at `at`.
pub(crate) fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Reads a big-endian u64 at `at`.
pub(crate) fn be64(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(x)
}

/// Writes a big-endian 24-bit value (low 24 bits of `v`) at `at`.
pub(crate) fn put_be24(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 3].copy_from_slice(&v.to_be_bytes()[1..]);
}
