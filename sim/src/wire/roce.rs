//! A whole RoCEv2 frame (cm.md §7.1): Ethernet II → IPv4/IPv6 → UDP 4791 → BTH → extension
//! headers chosen by the opcode → payload → pad to 4 → ICRC.
//!
//! Addressing follows cm.md §2.3: GIDs are IP addresses; an IPv4-mapped GID `::ffff:a.b.c.d`
//! selects IPv4 framing, any other GID IPv6. The IB traffic class travels in the IPv4 TOS /
//! IPv6 traffic class and the hop limit in the TTL / hop limit.

use core::ops::Range;

use super::bth::{self, BthPacket, BthRepr};
use super::ethernet::{ETHERTYPE_IPV4, ETHERTYPE_IPV6, EthernetFrame, EthernetRepr};
use super::ext::{AethRepr, AtomicAckEthRepr, AtomicEthRepr, DethRepr, Ieth, ImmDt, RethRepr};
use super::icrc;
use super::ipv4::{self, Ipv4Packet, Ipv4Repr, PROTO_UDP};
use super::ipv6::{self, Ipv6Packet, Ipv6Repr};
use super::opcode::{ExtHeaders, ext_headers};
use super::udp::{self, PseudoHeader, UdpPacket, UdpRepr};
use super::{ROCEV2_UDP_PORT, Result, WireError};

/// A 128-bit GID; on RoCEv2 an IP address (cm.md §2.3).
pub type Gid = [u8; 16];

/// ICRC length.
pub const ICRC_LEN: usize = 4;

/// `a.b.c.d` → `::ffff:a.b.c.d` (ib_addr.h `rdma_ip2gid`).
pub const fn gid_from_ipv4(a: [u8; 4]) -> Gid {
    [
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, a[0], a[1], a[2], a[3],
    ]
}

/// The IPv4 address of an IPv4-mapped GID, `None` for any other GID.
pub fn gid_to_ipv4(g: &Gid) -> Option<[u8; 4]> {
    if g[..10].iter().all(|&b| b == 0) && g[10] == 0xFF && g[11] == 0xFF {
        Some([g[12], g[13], g[14], g[15]])
    } else {
        None
    }
}

/// IP addresses of a frame, derived from its GIDs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IpAddrs {
    /// Both GIDs IPv4-mapped.
    V4 {
        /// Source address.
        src: [u8; 4],
        /// Destination address.
        dst: [u8; 4],
    },
    /// Both GIDs plain IPv6.
    V6 {
        /// Source address.
        src: [u8; 16],
        /// Destination address.
        dst: [u8; 16],
    },
}

impl IpAddrs {
    /// Chooses the family from the GIDs; mixed families are an error.
    pub fn from_gids(src: &Gid, dst: &Gid) -> Result<Self> {
        match (gid_to_ipv4(src), gid_to_ipv4(dst)) {
            (Some(s), Some(d)) => Ok(Self::V4 { src: s, dst: d }),
            (None, None) => Ok(Self::V6 {
                src: *src,
                dst: *dst,
            }),
            _ => Err(WireError::MixedAddressFamily),
        }
    }

    fn pseudo_header(&self) -> PseudoHeader {
        match *self {
            Self::V4 { src, dst } => PseudoHeader::V4(src, dst),
            Self::V6 { src, dst } => PseudoHeader::V6(src, dst),
        }
    }

    const fn header_len(&self) -> usize {
        match self {
            Self::V4 { .. } => ipv4::field::HEADER_LEN,
            Self::V6 { .. } => ipv6::field::HEADER_LEN,
        }
    }
}

/// The extension headers of one packet; exactly those [`ext_headers`] names for the opcode
/// must be `Some`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExtRepr {
    /// RETH (WRITE FIRST/ONLY, READ REQUEST).
    pub reth: Option<RethRepr>,
    /// AtomicETH (CmpSwap, FetchAdd).
    pub atomic_eth: Option<AtomicEthRepr>,
    /// DETH (UD).
    pub deth: Option<DethRepr>,
    /// Immediate data.
    pub immdt: Option<u32>,
    /// R_Key to invalidate.
    pub ieth: Option<u32>,
    /// AETH (ACK, READ RESPONSE FIRST/LAST/ONLY, ATOMIC ACK).
    pub aeth: Option<AethRepr>,
    /// AtomicAckETH.
    pub atomic_ack_eth: Option<AtomicAckEthRepr>,
}

impl ExtRepr {
    /// Which headers are present.
    pub const fn present(&self) -> ExtHeaders {
        ExtHeaders {
            reth: self.reth.is_some(),
            atomic_eth: self.atomic_eth.is_some(),
            deth: self.deth.is_some(),
            immdt: self.immdt.is_some(),
            ieth: self.ieth.is_some(),
            aeth: self.aeth.is_some(),
            atomic_ack_eth: self.atomic_ack_eth.is_some(),
            payload: false,
        }
    }

    /// Parses the headers `which` names from the start of `b`, in wire order.
    pub fn parse(which: ExtHeaders, b: &[u8]) -> Result<Self> {
        let mut at = 0usize;
        let mut take = |n: usize| -> Result<&[u8]> {
            let s = b.get(at..at + n).ok_or(WireError::Truncated)?;
            at += n;
            Ok(s)
        };
        let mut e = Self::default();
        if which.reth {
            e.reth = Some(RethRepr::parse(take(RethRepr::BUFFER_LEN)?)?);
        }
        if which.atomic_eth {
            e.atomic_eth = Some(AtomicEthRepr::parse(take(AtomicEthRepr::BUFFER_LEN)?)?);
        }
        if which.deth {
            e.deth = Some(DethRepr::parse(take(DethRepr::BUFFER_LEN)?)?);
        }
        if which.immdt {
            e.immdt = Some(ImmDt::parse(take(ImmDt::BUFFER_LEN)?)?);
        }
        if which.ieth {
            e.ieth = Some(Ieth::parse(take(Ieth::BUFFER_LEN)?)?);
        }
        if which.aeth {
            e.aeth = Some(AethRepr::parse(take(AethRepr::BUFFER_LEN)?)?);
        }
        if which.atomic_ack_eth {
            e.atomic_ack_eth = Some(AtomicAckEthRepr::parse(take(
                AtomicAckEthRepr::BUFFER_LEN,
            )?)?);
        }
        Ok(e)
    }

    /// Total length of the present headers.
    pub const fn buffer_len(&self) -> usize {
        self.present().len()
    }

    /// Writes the present headers in wire order.
    pub fn emit(&self, b: &mut [u8]) -> Result<()> {
        let mut rest = b;
        let mut slot = |n: usize| -> Result<&mut [u8]> {
            let (s, r) = core::mem::take(&mut rest)
                .split_at_mut_checked(n)
                .ok_or(WireError::Truncated)?;
            rest = r;
            Ok(s)
        };
        if let Some(r) = &self.reth {
            r.emit(slot(RethRepr::BUFFER_LEN)?)?;
        }
        if let Some(a) = &self.atomic_eth {
            a.emit(slot(AtomicEthRepr::BUFFER_LEN)?)?;
        }
        if let Some(d) = &self.deth {
            d.emit(slot(DethRepr::BUFFER_LEN)?)?;
        }
        if let Some(i) = self.immdt {
            ImmDt::emit(i, slot(ImmDt::BUFFER_LEN)?)?;
        }
        if let Some(k) = self.ieth {
            Ieth::emit(k, slot(Ieth::BUFFER_LEN)?)?;
        }
        if let Some(a) = &self.aeth {
            a.emit(slot(AethRepr::BUFFER_LEN)?)?;
        }
        if let Some(a) = &self.atomic_ack_eth {
            a.emit(slot(AtomicAckEthRepr::BUFFER_LEN)?)?;
        }
        Ok(())
    }
}

/// A complete RoCEv2 packet. `payload` excludes the pad bytes; `emit` derives the BTH pad count
/// from its length, `parse` strips the pad.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RocePacket<'a> {
    /// Source MAC.
    pub src_mac: [u8; 6],
    /// Destination MAC.
    pub dst_mac: [u8; 6],
    /// 802.1Q TCI, if tagged.
    pub vlan: Option<u16>,
    /// Source GID (IPv4-mapped → IPv4 framing).
    pub src_gid: Gid,
    /// Destination GID.
    pub dst_gid: Gid,
    /// IB traffic class: IPv4 TOS or IPv6 traffic class.
    pub traffic_class: u8,
    /// IB hop limit: IPv4 TTL or IPv6 hop limit.
    pub hop_limit: u8,
    /// IPv6 flow label (RoCEv2 sends 0; ignored for IPv4, parsed as 0).
    pub flow_label: u32,
    /// IPv4 identification (arbitrary; ignored for IPv6, parsed as 0).
    pub ip_ident: u16,
    /// UDP source port (ECMP entropy).
    pub udp_src_port: u16,
    /// BTH (`pad_count` is derived on emit).
    pub bth: BthRepr,
    /// Extension headers.
    pub ext: ExtRepr,
    /// Payload without pad.
    pub payload: &'a [u8],
}

/// Where each layer sits in a frame that [`RocePacket::parse`] accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// IP header.
    pub ip: Range<usize>,
    /// UDP header.
    pub udp: Range<usize>,
    /// BTH through the last pad byte (what the ICRC covers unmasked, apart from BTH byte 4).
    pub transport: Range<usize>,
    /// The ICRC.
    pub icrc: Range<usize>,
}

const fn pad_for(len: usize) -> usize {
    (4 - len % 4) % 4
}

impl<'a> RocePacket<'a> {
    /// IP addresses the GIDs select.
    pub fn ip_addrs(&self) -> Result<IpAddrs> {
        IpAddrs::from_gids(&self.src_gid, &self.dst_gid)
    }

    /// True if the frame is (or would be) IPv4.
    pub fn is_ipv4(&self) -> bool {
        gid_to_ipv4(&self.src_gid).is_some()
    }

    /// Pad bytes `emit` appends.
    pub const fn pad_len(&self) -> usize {
        pad_for(self.payload.len())
    }

    /// BTH + extension headers + payload + pad + ICRC.
    pub const fn udp_payload_len(&self) -> usize {
        bth::field::HEADER_LEN
            + self.ext.buffer_len()
            + self.payload.len()
            + self.pad_len()
            + ICRC_LEN
    }

    /// Length of the emitted frame.
    pub fn buffer_len(&self) -> usize {
        let eth = if self.vlan.is_some() { 18 } else { 14 };
        let ip = if self.is_ipv4() {
            ipv4::field::HEADER_LEN
        } else {
            ipv6::field::HEADER_LEN
        };
        eth + ip + udp::field::HEADER_LEN + self.udp_payload_len()
    }

    fn check(&self) -> Result<IpAddrs> {
        let want = ext_headers(self.bth.opcode).ok_or(WireError::UnknownOpcode(self.bth.opcode))?;
        if self.ext.present()
            != (ExtHeaders {
                payload: false,
                ..want
            })
        {
            return Err(WireError::ExtMismatch);
        }
        if !want.payload && !self.payload.is_empty() {
            return Err(WireError::ExtMismatch);
        }
        self.ip_addrs()
    }

    /// Emits the whole Ethernet frame into a new buffer.
    ///
    /// # Errors
    /// [`WireError::UnknownOpcode`], [`WireError::ExtMismatch`] (extension headers or a payload
    /// the opcode does not carry), [`WireError::MixedAddressFamily`], [`WireError::FieldRange`].
    pub fn emit(&self) -> Result<Vec<u8>> {
        let mut v = vec![0u8; self.buffer_len()];
        let n = self.emit_into(&mut v)?;
        v.truncate(n);
        Ok(v)
    }

    /// Emits the whole frame into `buf`, returning its length; every byte of `buf[..len]` is
    /// written, whatever `buf` held.
    ///
    /// # Errors
    /// As [`emit`](Self::emit), plus [`WireError::Truncated`] if `buf` is too short.
    pub fn emit_into(&self, buf: &mut [u8]) -> Result<usize> {
        self.emit_frame(buf, true)
    }

    /// Offset of the payload in the emitted frame.
    pub fn payload_offset(&self) -> usize {
        self.buffer_len() - ICRC_LEN - self.payload.len() - self.pad_len()
    }

    /// As [`emit_into`](Self::emit_into), but the payload is already in `buf` at
    /// [`payload_offset`](Self::payload_offset) (a device read it there from memory, saving a
    /// copy); `self.payload` gives only its length. Every other byte of the frame is written.
    ///
    /// # Errors
    /// As [`emit_into`](Self::emit_into).
    pub fn emit_around_payload(&self, buf: &mut [u8]) -> Result<usize> {
        self.emit_frame(buf, false)
    }

    fn emit_frame(&self, buf: &mut [u8], copy_payload: bool) -> Result<usize> {
        let addrs = self.check()?;
        let total = self.buffer_len();
        let buf = buf.get_mut(..total).ok_or(WireError::Truncated)?;
        let ethertype = match addrs {
            IpAddrs::V4 { .. } => ETHERTYPE_IPV4,
            IpAddrs::V6 { .. } => ETHERTYPE_IPV6,
        };
        let eth = EthernetRepr {
            dst: self.dst_mac,
            src: self.src_mac,
            vlan: self.vlan,
            ethertype,
        };
        // Every byte of the frame is written (headers on a zeroed area, payload, pad, ICRC), so
        // a reused buffer's old contents cannot leak onto the wire.
        let headers = total - ICRC_LEN - self.payload.len() - self.pad_len();
        buf.get_mut(..headers).ok_or(WireError::Truncated)?.fill(0);
        eth.emit(buf)?;
        let ip_at = eth.buffer_len();
        let udp_at = ip_at + addrs.header_len();
        let udp_len = udp::field::HEADER_LEN + self.udp_payload_len();
        match addrs {
            IpAddrs::V4 { src, dst } => Ipv4Repr {
                src,
                dst,
                tos: self.traffic_class,
                ttl: self.hop_limit,
                ident: self.ip_ident,
                dont_frag: true,
                protocol: PROTO_UDP,
                payload_len: udp_len,
            }
            .emit(&mut buf[ip_at..])?,
            IpAddrs::V6 { src, dst } => Ipv6Repr {
                src,
                dst,
                traffic_class: self.traffic_class,
                flow_label: self.flow_label,
                hop_limit: self.hop_limit,
                next_header: PROTO_UDP,
                payload_len: udp_len,
            }
            .emit(&mut buf[ip_at..])?,
        }
        UdpRepr {
            src_port: self.udp_src_port,
            dst_port: ROCEV2_UDP_PORT,
            payload_len: self.udp_payload_len(),
        }
        .emit(&mut buf[udp_at..])?;
        let bth_at = udp_at + udp::field::HEADER_LEN;
        // CAST: pad_for returns 0..=3.
        let bth = BthRepr {
            pad_count: self.pad_len() as u8,
            ..self.bth
        };
        bth.emit(&mut buf[bth_at..])?;
        let ext_at = bth_at + bth::field::HEADER_LEN;
        self.ext.emit(&mut buf[ext_at..])?;
        let pay_at = ext_at + self.ext.buffer_len();
        if copy_payload {
            buf[pay_at..pay_at + self.payload.len()].copy_from_slice(self.payload);
        }
        let icrc_at = total - ICRC_LEN;
        buf[pay_at + self.payload.len()..icrc_at].fill(0);
        let crc = icrc::compute(
            &buf[ip_at..udp_at],
            &buf[udp_at..bth_at],
            &buf[bth_at..icrc_at],
        );
        buf[icrc_at..].copy_from_slice(&crc.to_le_bytes());
        // The UDP checksum covers the ICRC, and the ICRC masks the UDP checksum, so it goes last.
        if let IpAddrs::V6 { .. } = addrs {
            UdpPacket::new_unchecked(&mut buf[udp_at..]).fill_checksum(&addrs.pseudo_header());
        }
        Ok(total)
    }

    /// Validates and decodes a frame. Never panics.
    ///
    /// # Errors
    /// Any [`WireError`] but the emit-only ones: lengths, versions, IPv4 checksum, protocol,
    /// UDP port and checksum, ICRC, BTH TVer, unknown opcode, pad count.
    pub fn parse(frame: &'a [u8]) -> Result<Self> {
        Ok(Self::parse_with_layout(frame)?.0)
    }

    /// [`parse`](Self::parse), also returning where each layer sits.
    pub fn parse_with_layout(frame: &'a [u8]) -> Result<(Self, Layout)> {
        let eth = EthernetFrame::new_checked(frame)?;
        let eth_repr = EthernetRepr::parse(&eth)?;
        let ip_at = eth.header_len();
        let ip_bytes = &frame[ip_at..];
        let (addrs, tc, hl, flow, ident, ip_hdr, ip_payload) = match eth_repr.ethertype {
            ETHERTYPE_IPV4 => {
                let p = Ipv4Packet::new_checked(ip_bytes)?;
                let r = Ipv4Repr::parse(&p)?;
                if r.protocol != PROTO_UDP {
                    return Err(WireError::NotUdp(r.protocol));
                }
                let a = IpAddrs::V4 {
                    src: r.src,
                    dst: r.dst,
                };
                (
                    a,
                    r.tos,
                    r.ttl,
                    0,
                    r.ident,
                    p.header().len(),
                    p.payload().len(),
                )
            }
            ETHERTYPE_IPV6 => {
                let p = Ipv6Packet::new_checked(ip_bytes)?;
                let r = Ipv6Repr::parse(&p)?;
                if r.next_header != PROTO_UDP {
                    return Err(WireError::NotUdp(r.next_header));
                }
                let a = IpAddrs::V6 {
                    src: r.src,
                    dst: r.dst,
                };
                (
                    a,
                    r.traffic_class,
                    r.hop_limit,
                    r.flow_label,
                    0,
                    40,
                    r.payload_len,
                )
            }
            t => return Err(WireError::BadEthertype(t)),
        };
        let udp_at = ip_at + ip_hdr;
        let udp_bytes = &frame[udp_at..udp_at + ip_payload];
        let u = UdpPacket::new_checked(udp_bytes)?;
        if usize::from(u.len()) != ip_payload {
            return Err(WireError::BadLength);
        }
        if u.dst_port() != ROCEV2_UDP_PORT {
            return Err(WireError::BadUdpPort(u.dst_port()));
        }
        let ur = UdpRepr::parse(&u, &addrs.pseudo_header())?;
        let transport = &udp_bytes[udp::field::HEADER_LEN..];
        if transport.len() < bth::field::HEADER_LEN + ICRC_LEN {
            return Err(WireError::Truncated);
        }
        if !transport.len().is_multiple_of(4) {
            return Err(WireError::BadLength);
        }
        let (covered, icrc_bytes) = transport.split_at(transport.len() - ICRC_LEN);
        let found =
            u32::from_le_bytes([icrc_bytes[0], icrc_bytes[1], icrc_bytes[2], icrc_bytes[3]]);
        let computed = icrc::compute(&frame[ip_at..udp_at], u.header(), covered);
        if computed != found {
            return Err(WireError::BadIcrc { computed, found });
        }
        let bp = BthPacket::new_checked(covered)?;
        let bth = BthRepr::parse(&bp)?;
        let which = ext_headers(bth.opcode).ok_or(WireError::UnknownOpcode(bth.opcode))?;
        let after_bth = &covered[bth::field::HEADER_LEN..];
        let ext = ExtRepr::parse(which, after_bth)?;
        let data = &after_bth[which.len()..];
        let pad = usize::from(bth.pad_count);
        if !which.payload && !data.is_empty() {
            return Err(WireError::BadLength);
        }
        if pad > data.len() {
            return Err(WireError::BadPad);
        }
        let (src_gid, dst_gid) = match addrs {
            IpAddrs::V4 { src, dst } => (gid_from_ipv4(src), gid_from_ipv4(dst)),
            IpAddrs::V6 { src, dst } => (src, dst),
        };
        let bth_at = udp_at + udp::field::HEADER_LEN;
        let icrc_at = bth_at + covered.len();
        let layout = Layout {
            ip: ip_at..udp_at,
            udp: udp_at..bth_at,
            transport: bth_at..icrc_at,
            icrc: icrc_at..icrc_at + ICRC_LEN,
        };
        Ok((
            Self {
                src_mac: eth_repr.src,
                dst_mac: eth_repr.dst,
                vlan: eth_repr.vlan,
                src_gid,
                dst_gid,
                traffic_class: tc,
                hop_limit: hl,
                flow_label: flow,
                ip_ident: ident,
                udp_src_port: ur.src_port,
                bth,
                ext,
                payload: &data[..data.len() - pad],
            },
            layout,
        ))
    }
}

impl core::fmt::Display for RocePacket<'_> {
    /// One trace line, e.g. `RC RDMA WRITE First qp=0x000011 psn=0x000065 ack RETH(va=0x1000
    /// rkey=0x105 len=4096) payload=40`.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let b = &self.bth;
        write!(
            f,
            "{} qp={:#08x} psn={}",
            super::opcode::name(b.opcode),
            b.dest_qp,
            b.psn
        )?;
        if b.ack_req {
            write!(f, " ack")?;
        }
        if b.solicited {
            write!(f, " se")?;
        }
        let e = &self.ext;
        if let Some(r) = e.reth {
            write!(
                f,
                " RETH(va={:#x} rkey={:#x} len={})",
                r.va, r.rkey, r.dma_len
            )?;
        }
        if let Some(d) = e.deth {
            write!(f, " DETH(qkey={:#x} src_qp={:#x})", d.qkey, d.src_qp)?;
        }
        if let Some(i) = e.immdt {
            write!(f, " ImmDt({i:#010x})")?;
        }
        if let Some(k) = e.ieth {
            write!(f, " IETH({k:#x})")?;
        }
        if let Some(a) = e.aeth {
            write!(f, " AETH({:?} msn={})", a.syndrome, a.msn)?;
        }
        if let Some(a) = e.atomic_eth {
            write!(f, " AtomicETH(va={:#x} rkey={:#x})", a.va, a.rkey)?;
        }
        if let Some(a) = e.atomic_ack_eth {
            write!(f, " AtomicAckETH({:#x})", a.orig)?;
        }
        write!(f, " payload={}", self.payload.len())
    }
}

/// The 40-byte GRH area a UD receive buffer gets (pvrdma.md M37, cm.md §2.2): the IPv6 header,
/// or 20 zero bytes followed by the IPv4 header.
///
/// # Errors
/// As [`RocePacket::parse`].
pub fn grh_area(frame: &[u8]) -> Result<[u8; 40]> {
    let (_, layout) = RocePacket::parse_with_layout(frame)?;
    let ip = frame.get(layout.ip).ok_or(WireError::Truncated)?;
    let mut g = [0u8; 40];
    let at = 40usize.checked_sub(ip.len()).ok_or(WireError::BadLength)?;
    g[at..].copy_from_slice(ip);
    Ok(g)
}

#[cfg(test)]
mod tests;
