//! Invariant CRC of a RoCEv2 packet (cm.md §7.4; rxe_icrc.c, scapy roce.py).
//!
//! Reflected CRC-32 (poly 0x04C11DB7, init and final XOR 0xFFFFFFFF, zlib `crc32`) over:
//! 8 × 0xFF (masked LRH), the IP header with the variant fields masked to all ones (IPv4 TOS,
//! TTL, checksum; IPv6 traffic class, flow label, hop limit), the UDP header with checksum
//! 0xFFFF, the BTH with byte 4 (FECN/BECN/reserved) 0xFF, then everything up to the ICRC.
//! The ICRC is appended least-significant byte first.

const fn make_table() -> [u32; 256] {
    let mut t = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        // CAST: i < 256.
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                0xEDB8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
            k += 1;
        }
        t[i] = c;
        i += 1;
    }
    t
}

static TABLE: [u32; 256] = make_table();

/// Running CRC-32 state (pre-inverted), so pieces can be fed without copying the packet.
#[derive(Clone, Copy, Debug)]
pub struct Crc32(u32);

impl Default for Crc32 {
    fn default() -> Self {
        Self::new()
    }
}

impl Crc32 {
    /// Initial state.
    pub const fn new() -> Self {
        Self(0xFFFF_FFFF)
    }

    /// Feeds bytes.
    pub fn update(&mut self, data: &[u8]) {
        let mut c = self.0;
        for &b in data {
            c = TABLE[usize::from((c as u8) ^ b)] ^ (c >> 8);
        }
        self.0 = c;
    }

    /// Final CRC value (zlib convention).
    pub const fn finish(self) -> u32 {
        !self.0
    }
}

/// zlib-compatible CRC-32 of one buffer.
pub fn crc32(data: &[u8]) -> u32 {
    let mut c = Crc32::new();
    c.update(data);
    c.finish()
}

/// Offsets of the variant fields masked in the ICRC.
const IPV4_TOS: usize = 1;
const IPV4_TTL: usize = 8;
const IPV4_CSUM: core::ops::Range<usize> = 10..12;
const UDP_CSUM: core::ops::Range<usize> = 6..8;
const BTH_FECN_BECN: usize = 4;

/// ICRC over an IP header (IPv4 of any IHL, or the 40-byte IPv6 header, chosen by its version
/// nibble), the 8-byte UDP header and `transport` = BTH through the last byte before the ICRC.
///
/// Callers pass slices they have already length-checked: `udp_header.len() == 8`,
/// `transport.len() >= 12`; a shorter piece is hashed as given (no panic).
pub fn compute(ip_header: &[u8], udp_header: &[u8], transport: &[u8]) -> u32 {
    let mut c = Crc32::new();
    c.update(&[0xFF; 8]);
    let mut ip = [0u8; 60];
    let n = ip_header.len().min(ip.len());
    ip[..n].copy_from_slice(&ip_header[..n]);
    if n >= 12 && ip[0] >> 4 == 4 {
        ip[IPV4_TOS] = 0xFF;
        ip[IPV4_TTL] = 0xFF;
        ip[IPV4_CSUM].copy_from_slice(&[0xFF, 0xFF]);
    } else if n >= 8 {
        // Version kept; traffic class (8 bits) and flow label (20 bits) all ones; hop limit.
        ip[0] |= 0x0F;
        ip[1] = 0xFF;
        ip[2] = 0xFF;
        ip[3] = 0xFF;
        ip[7] = 0xFF;
    }
    c.update(&ip[..n]);
    let mut udp = [0u8; 8];
    let n = udp_header.len().min(8);
    udp[..n].copy_from_slice(&udp_header[..n]);
    if n == 8 {
        udp[UDP_CSUM].copy_from_slice(&[0xFF, 0xFF]);
    }
    c.update(&udp[..n]);
    match transport.split_at_checked(12) {
        Some((bth, rest)) => {
            let mut b = [0u8; 12];
            b.copy_from_slice(bth);
            b[BTH_FECN_BECN] = 0xFF;
            c.update(&b);
            c.update(rest);
        }
        None => c.update(transport),
    }
    c.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32_check_value() {
        // The CRC-32/ISO-HDLC check value (zlib.crc32(b"123456789")).
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        // rxe seeds with 0xDEBB20E3 instead of hashing 8 × 0xFF first (cm.md §7.4): that is the
        // raw (pre-final-XOR) state after the 8 bytes.
        let mut c = Crc32::new();
        c.update(&[0xFF; 8]);
        assert_eq!(c.0, 0xDEBB_20E3);
    }
}
