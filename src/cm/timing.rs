//! CM time values (cm.md §6.3): an IBTA timeout exponent x means 4.096 µs × 2^x; Linux rounds
//! it with `cm_convert_to_ms` and the provider follows Linux so that both ends retransmit
//! on the same schedule.
#![deny(unsafe_code)]

/// Nanoseconds in a millisecond.
const NS_PER_MS: u64 = 1_000_000;

/// Linux `cm_convert_to_ms(x)` = 2^max(x − 8, 0) ms, in nanoseconds (20 → 4096 ms). Exponents
/// above 31 (5-bit fields cannot carry them) are clamped to 31.
pub const fn timeout_ns(x: u8) -> u64 {
    let x = if x > 31 { 31 } else { x };
    let shift = x.saturating_sub(8);
    (1u64 << shift) * NS_PER_MS
}

/// Linux `cm_ack_timeout(ca_ack_delay, packet_life_time)`: the local ACK timeout exponent for
/// a path (cm.md §6.3), capped at 31.
pub const fn ack_timeout(ca_ack_delay: u8, packet_life_time: u8) -> u8 {
    let d = ca_ack_delay;
    let mut t = packet_life_time.saturating_add(1);
    if t >= d {
        if d >= t.saturating_sub(1) {
            t = t.saturating_add(1);
        }
    } else {
        t = d.saturating_add(if t >= d.saturating_sub(1) { 1 } else { 0 });
    }
    if t > 31 { 31 } else { t }
}
