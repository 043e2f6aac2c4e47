//! BAR1 register map (reference §2, §3; M2, M3, M7).
#![deny(unsafe_code)]

/// BAR1 size in bytes (64 registers, M2).
pub const BAR1_SIZE: u32 = 256;
/// BAR0 (MSI-X) size in bytes (M2).
pub const BAR0_SIZE: u32 = 16 * 1024;
/// Number of MSI-X vectors (M21).
pub const MSIX_VECTORS: u32 = 3;

/// BAR1 register offsets (§3). R = read by the driver, W = written.
pub mod off {
    /// R: device version.
    pub const VERSION: u32 = 0x00;
    /// W: DSR address bits 31:0.
    pub const DSRLOW: u32 = 0x04;
    /// W: DSR address bits 63:32, written last (M4).
    pub const DSRHIGH: u32 = 0x08;
    /// W: control (ACTIVATE/UNQUIESCE/RESET).
    pub const CTL: u32 = 0x0C;
    /// W: execute the command in the slot.
    pub const REQUEST: u32 = 0x10;
    /// R: error of the last CTL/REQUEST.
    pub const ERR: u32 = 0x14;
    /// R: interrupt cause, read-to-clear (M20).
    pub const ICR: u32 = 0x18;
    /// R/W: interrupt mask (M20).
    pub const IMR: u32 = 0x1C;
    /// R/W: MAC bytes 0-3 (M3).
    pub const MACL: u32 = 0x20;
    /// R/W: MAC bytes 4-5 (M3).
    pub const MACH: u32 = 0x24;
}

/// CTL values (§3, M7).
pub mod ctl {
    /// Start the device.
    pub const ACTIVATE: u32 = 0;
    /// Link up; no effect in the model.
    pub const UNQUIESCE: u32 = 1;
    /// Destroy everything, stop DMA, forget the DSR.
    pub const RESET: u32 = 2;
}

/// Versions (§1, M1).
pub mod version {
    /// RoCEv2 GIDs.
    pub const ROCEV2: u32 = 18;
    /// 64-bit UAR PFN.
    pub const PPN64: u32 = 19;
    /// CREATE_QP response v2 with a separate qp_handle.
    pub const QPHANDLE: u32 = 20;
}

/// MACL value for `mac` (M3: byte 0 in bits 7:0).
pub fn macl(mac: [u8; 6]) -> u32 {
    u32::from_le_bytes([mac[0], mac[1], mac[2], mac[3]])
}

/// MACH value for `mac` (M3: bits 15:0 = bytes 4-5).
pub fn mach(mac: [u8; 6]) -> u32 {
    u32::from(mac[4]) | (u32::from(mac[5]) << 8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mac_register_format() {
        let mac = [0x00, 0x50, 0x56, 0xAA, 0xBB, 0xCC];
        assert_eq!(macl(mac), 0xAA56_5000);
        assert_eq!(mach(mac), 0xCCBB);
    }
}
