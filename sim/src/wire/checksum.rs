//! RFC 1071 Internet checksum, for the IPv4 header and the UDP checksum (cm.md §7.1).

/// One's-complement sum of `data` (odd length padded with a zero byte), folded to 16 bits but
/// not complemented; `acc` chains several pieces (pseudo-header, header, payload).
pub fn sum(mut acc: u32, data: &[u8]) -> u32 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        acc += u32::from(u16::from_be_bytes([c[0], c[1]]));
        acc = (acc & 0xFFFF) + (acc >> 16);
    }
    if let [last] = chunks.remainder() {
        acc += u32::from(*last) << 8;
        acc = (acc & 0xFFFF) + (acc >> 16);
    }
    acc
}

/// Complemented, folded checksum of an accumulated sum.
pub fn finish(acc: u32) -> u16 {
    let mut a = acc;
    while a > 0xFFFF {
        a = (a & 0xFFFF) + (a >> 16);
    }
    // CAST: folded to 16 bits above.
    !(a as u16)
}

/// Checksum of one buffer.
pub fn checksum(data: &[u8]) -> u16 {
    finish(sum(0, data))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc1071_example() {
        // RFC 1071 §3 example: sum of 0001 f203 f4f5 f6f7 is ddf2 (before complement).
        let d = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(finish(sum(0, &d)), !0xddf2);
        assert_eq!(checksum(&[0xff]), !0xff00);
    }
}
