//! Invariant CRC of a RoCEv2 packet (cm.md §7.4; rxe_icrc.c, scapy roce.py).
//!
//! Reflected CRC-32 (poly 0x04C11DB7, init and final XOR 0xFFFFFFFF, zlib `crc32`) over:
//! 8 × 0xFF (masked LRH), the IP header with the variant fields masked to all ones (IPv4 TOS,
//! TTL, checksum; IPv6 traffic class, flow label, hop limit), the UDP header with checksum
//! 0xFFFF, the BTH with byte 4 (FECN/BECN/reserved) 0xFF, then everything up to the ICRC.
//! The ICRC is appended least-significant byte first.

/// Running CRC-32 state, so pieces can be fed without copying the packet.
///
/// crc32fast picks a carry-less-multiply (PCLMULQDQ / PMULL) kernel at run time where the CPU
/// has one: the ICRC covers every payload byte, and a table loop made it half of the model's
/// instructions for a 64 KiB READ.
#[derive(Clone, Debug, Default)]
pub struct Crc32(crc32fast::Hasher);

impl Crc32 {
    /// Initial state.
    pub fn new() -> Self {
        // `Hasher::new` detects the CPU's features each time (two per packet here); a clone of
        // one made once skips that.
        static INITIAL: std::sync::OnceLock<crc32fast::Hasher> = std::sync::OnceLock::new();
        Self(INITIAL.get_or_init(crc32fast::Hasher::new).clone())
    }

    /// Feeds bytes.
    pub fn update(&mut self, data: &[u8]) {
        self.0.update(data);
    }

    /// Final CRC value (zlib convention).
    pub fn finish(self) -> u32 {
        self.0.finalize()
    }
}

/// zlib-compatible CRC-32 of one buffer.
pub fn crc32(data: &[u8]) -> u32 {
    crc32fast::hash(data)
}

/// Offsets of the variant fields masked in the ICRC.
const IPV4_TOS: usize = 1;
const IPV4_TTL: usize = 8;
const IPV4_CSUM: core::ops::Range<usize> = 10..12;
const UDP_CSUM: core::ops::Range<usize> = 6..8;
const BTH_FECN_BECN: usize = 4;

/// The masked headers of one packet: 8 + at most 60 + 8 + 12 bytes.
struct Gather {
    buf: [u8; 88],
    len: usize,
}

impl Default for Gather {
    fn default() -> Self {
        Self {
            buf: [0; 88],
            len: 0,
        }
    }
}

impl Gather {
    /// Appends `piece` (callers bound each piece, so it always fits) and returns the copy for
    /// masking.
    fn put(&mut self, piece: &[u8]) -> &mut [u8] {
        let at = self.len;
        let n = piece.len().min(self.buf.len() - at);
        self.len = at + n;
        let dst = &mut self.buf[at..at + n];
        dst.copy_from_slice(&piece[..n]);
        dst
    }

    fn bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

/// ICRC over an IP header (IPv4 of any IHL, or the 40-byte IPv6 header, chosen by its version
/// nibble), the 8-byte UDP header and `transport` = BTH through the last byte before the ICRC.
///
/// Callers pass slices they have already length-checked: `udp_header.len() == 8`,
/// `transport.len() >= 12`; a shorter piece is hashed as given (no panic).
pub fn compute(ip_header: &[u8], udp_header: &[u8], transport: &[u8]) -> u32 {
    // The masked headers are gathered into one buffer (8 + at most 60 + 8 + 12 bytes) so the
    // hasher sees two updates per packet, not five.
    let mut head = Gather::default();
    head.put(&[0xFF; 8]);
    let ip_len = ip_header.len().min(60);
    let ip = head.put(&ip_header[..ip_len]);
    if ip_len >= 12 && ip[0] >> 4 == 4 {
        ip[IPV4_TOS] = 0xFF;
        ip[IPV4_TTL] = 0xFF;
        ip[IPV4_CSUM].copy_from_slice(&[0xFF, 0xFF]);
    } else if ip_len >= 8 {
        // Version kept; traffic class (8 bits) and flow label (20 bits) all ones; hop limit.
        ip[0] |= 0x0F;
        ip[1] = 0xFF;
        ip[2] = 0xFF;
        ip[3] = 0xFF;
        ip[7] = 0xFF;
    }
    let udp_len = udp_header.len().min(8);
    let udp = head.put(&udp_header[..udp_len]);
    if udp_len == 8 {
        udp[UDP_CSUM].copy_from_slice(&[0xFF, 0xFF]);
    }
    let rest = match transport.split_at_checked(12) {
        Some((bth, rest)) => {
            head.put(bth)[BTH_FECN_BECN] = 0xFF;
            rest
        }
        None => {
            head.put(transport);
            &[]
        }
    };
    let mut c = Crc32::new();
    c.update(head.bytes());
    c.update(rest);
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
        assert_eq!(!c.finish(), 0xDEBB_20E3);
    }
}
