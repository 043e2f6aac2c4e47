//! RDMA CM IP addressing (cm.md §5): service IDs of the TCP port space, GIDs from IP
//! addresses (§2.3), and the 36-byte `cma_hdr` at the start of the REQ private data (§5.2).
#![deny(unsafe_code)]

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use super::WireError;
use super::wire::{be16, get_u8, put, set_be16, set_u8, slice};

/// RDMA CM service ID prefix of the TCP port space: `(0x0106 << 16)` (cma.c
/// `rdma_get_service_id`); the port fills the low 16 bits.
pub const TCP_SERVICE_ID_BASE: u64 = 0x0000_0000_0106_0000;
/// ib_cm.h `IB_CMA_SERVICE_ID`: the Annex A11 5-byte prefix with a zero protocol byte.
pub const IB_CMA_SERVICE_ID: u64 = 0x0000_0000_0100_0000;
/// ib_cm.h `IB_CMA_SERVICE_ID_MASK`: the bits the prefix occupies.
pub const IB_CMA_SERVICE_ID_MASK: u64 = 0xFFFF_FFFF_FF00_0000;

/// The service ID a Linux peer uses for TCP-space `port` (445 → 0x00000000010601BD).
pub const fn tcp_service_id(port: u16) -> u64 {
    TCP_SERVICE_ID_BASE | port as u64
}

/// The port of a TCP-space service ID; `None` for any other space.
pub const fn tcp_port(service_id: u64) -> Option<u16> {
    if service_id & !0xFFFF == TCP_SERVICE_ID_BASE {
        Some(service_id as u16)
    } else {
        None
    }
}

/// A RoCEv2 GID: an IP address (IPv4 v4-mapped, `::ffff:a.b.c.d`; IPv6 as is).
pub type Gid = [u8; 16];

/// The RoCEv2 flow label Linux's rdma_cm gives a connection (cma.c
/// `cma_get_roce_udp_flow_label`, Linux 6.1): `sport * 31 + dport`, masked to 20 bits, from
/// the active side's source and destination ports. It travels in the REQ's Primary Flow Label;
/// a RoCEv2 device derives the UDP source port of the connection's packets from it (ECMP
/// entropy, `rdma_flow_label_to_udp_sport`). An IPv6 socket's own `sin6_flowinfo` would take
/// precedence in Linux; NDK consumers pass none, so the ports decide.
pub fn roce_flow_label(src_port: u16, dst_port: u16) -> u32 {
    (u32::from(src_port) * 31 + u32::from(dst_port)) & 0xF_FFFF
}

/// `rdma_ip2gid` (ib_addr.h).
pub fn gid_from_ip(ip: IpAddr) -> Gid {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// The IP address a RoCEv2 GID stands for (a v4-mapped GID is IPv4).
pub fn ip_from_gid(gid: Gid) -> IpAddr {
    let v6 = Ipv6Addr::from(gid);
    match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(v6),
    }
}

/// Length of the cma_hdr.
pub const CMA_HDR_LEN: usize = 36;
/// The only cma_version rdma_cm sends and accepts.
pub const CMA_VERSION: u8 = 0x00;

/// The addresses a REQ's cma_hdr names, from the active side's point of view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmaAddrs {
    /// The active side's IP and source port.
    pub src: SocketAddr,
    /// The IP the active side connects to (the port is in the service ID, §5.1).
    pub dst: IpAddr,
}

/// A view of the cma_hdr (cma.c `struct cma_hdr`): version, IP version nibble, source port,
/// source and destination IP, each IP in 16 bytes (IPv4 as 12 zero bytes + address).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmaHdr<T: AsRef<[u8]>>(T);

impl<T: AsRef<[u8]>> CmaHdr<T> {
    /// Wraps `buf` without checking it.
    pub const fn new_unchecked(buf: T) -> Self {
        Self(buf)
    }

    /// Wraps `buf` after `check_len` (the REQ private data is 92 bytes: longer is fine).
    ///
    /// # Errors
    /// [`WireError::Truncated`] below 36 bytes.
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        let hdr = Self(buf);
        hdr.check_len()?;
        Ok(hdr)
    }

    /// At least 36 bytes.
    ///
    /// # Errors
    /// [`WireError::Truncated`].
    pub fn check_len(&self) -> Result<(), WireError> {
        if self.0.as_ref().len() < CMA_HDR_LEN {
            return Err(WireError::Truncated);
        }
        Ok(())
    }

    /// cma_version (byte 0).
    pub fn cma_version(&self) -> u8 {
        get_u8(self.0.as_ref(), 0)
    }
    /// IP version, the high nibble of byte 1 (4 or 6).
    pub fn ip_version(&self) -> u8 {
        get_u8(self.0.as_ref(), 1) >> 4
    }
    /// The active side's source port (bytes 2–3).
    pub fn src_port(&self) -> u16 {
        be16(self.0.as_ref(), 2)
    }
    /// The 16 source-address bytes (4–19).
    pub fn src_raw(&self) -> &[u8] {
        slice(self.0.as_ref(), 4, 16)
    }
    /// The 16 destination-address bytes (20–35).
    pub fn dst_raw(&self) -> &[u8] {
        slice(self.0.as_ref(), 20, 16)
    }
    /// The user's private data after the header (56 bytes of a REQ's 92).
    pub fn payload(&self) -> &[u8] {
        self.0.as_ref().get(CMA_HDR_LEN..).unwrap_or(&[])
    }

    /// The addresses, as `cma_save_ip_info` reads them. IPv4 takes the last 4 of the 16
    /// bytes and ignores the padding, as Linux does.
    ///
    /// # Errors
    /// [`WireError::CmaVersion`] for a version other than 0, [`WireError::CmaIpVersion`]
    /// for an IP version other than 4 or 6 (passive Linux answers both with REJ 28).
    pub fn addrs(&self) -> Result<CmaAddrs, WireError> {
        if self.cma_version() != CMA_VERSION {
            return Err(WireError::CmaVersion(self.cma_version()));
        }
        let ip = |raw: &[u8]| -> Option<IpAddr> {
            let mut b = [0u8; 16];
            b.copy_from_slice(raw.get(..16)?);
            match self.ip_version() {
                4 => {
                    let [.., a, b2, c, d] = b;
                    Some(IpAddr::V4(Ipv4Addr::new(a, b2, c, d)))
                }
                6 => Some(IpAddr::V6(Ipv6Addr::from(b))),
                _ => None,
            }
        };
        let bad = WireError::CmaIpVersion(self.ip_version());
        let src = ip(self.src_raw()).ok_or(bad)?;
        let dst = ip(self.dst_raw()).ok_or(bad)?;
        Ok(CmaAddrs {
            src: SocketAddr::new(src, self.src_port()),
            dst,
        })
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> CmaHdr<T> {
    /// Writes the header `cma_format_hdr` writes: version 0, 0x40 or 0x60, the source port,
    /// both IPs (IPv4 zero-padded, not v4-mapped: cm.md §9.2).
    ///
    /// # Errors
    /// [`WireError::AddressFamily`] when `src` and `dst` are of different families;
    /// [`WireError::Truncated`] below 36 bytes. Nothing is written then.
    pub fn emit(&mut self, addrs: &CmaAddrs) -> Result<(), WireError> {
        self.check_len()?;
        let (version, src, dst) = match (addrs.src.ip(), addrs.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => (0x40, pad_v4(s), pad_v4(d)),
            (IpAddr::V6(s), IpAddr::V6(d)) => (0x60, s.octets(), d.octets()),
            _ => return Err(WireError::AddressFamily),
        };
        let b = self.0.as_mut();
        set_u8(b, 0, CMA_VERSION);
        set_u8(b, 1, version);
        set_be16(b, 2, addrs.src.port());
        put(b, 4, &src);
        put(b, 20, &dst);
        Ok(())
    }
}

fn pad_v4(ip: Ipv4Addr) -> [u8; 16] {
    let mut b = [0u8; 16];
    if let Some(tail) = b.get_mut(12..) {
        tail.copy_from_slice(&ip.octets());
    }
    b
}
