//! vmxnet3 registers and commands (vmxnet3.md §3.2, §3.3): BAR0 ("PT") and BAR1 ("VD"), all
//! 32-bit, 8 bytes apart. Registers are typed values at fixed offsets; array registers (IMR,
//! TXPROD, RXPROD, RXPROD2) are indexed with a bounds check, so no value can name an offset
//! outside its array.
#![deny(unsafe_code)]

use crate::os::RegisterIo;

/// A 32-bit register of one BAR.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reg(pub u32);

impl Reg {
    /// Reads it.
    #[inline]
    pub fn read(self, bar: &dyn RegisterIo) -> u32 {
        bar.read32(self.0)
    }
    /// Writes it.
    #[inline]
    pub fn write(self, bar: &dyn RegisterIo, v: u32) {
        bar.write32(self.0, v);
    }
}

/// BAR1 (virtual device registers).
pub mod bar1 {
    use super::Reg;
    /// Revision report (R: mask) / selection (W: `1 << (rev - 1)`).
    pub const VRRS: Reg = Reg(0x00);
    /// UPT version report / selection.
    pub const UVRS: Reg = Reg(0x08);
    /// DriverShared address, low half.
    pub const DSAL: Reg = Reg(0x10);
    /// DriverShared address, high half.
    pub const DSAH: Reg = Reg(0x18);
    /// Command (W) and its result (R).
    pub const CMD: Reg = Reg(0x20);
    /// MAC bytes 0–3 (byte 0 in bits 7:0).
    pub const MACL: Reg = Reg(0x28);
    /// MAC bytes 4–5 (bits 15:0).
    pub const MACH: Reg = Reg(0x30);
    /// Event acknowledgement (W: the handled `ecr` bits).
    pub const ECR: Reg = Reg(0x40);
}

/// BAR0 (pass-through registers): arrays of registers 8 bytes apart.
pub mod bar0 {
    use super::Reg;

    /// Vectors of revision 1 (IMR entries).
    pub const MAX_INTRS: u32 = 25;
    /// Tx queues of revision 1.
    pub const MAX_TX_QUEUES: u32 = 8;
    /// Rx queues of revision 1.
    pub const MAX_RX_QUEUES: u32 = 16;

    const fn at(base: u32, i: u32, n: u32) -> Option<Reg> {
        if i < n { Some(Reg(base + 8 * i)) } else { None }
    }

    /// IMR of vector `i` (W 1 = mask, 0 = unmask).
    pub const fn imr(i: u32) -> Option<Reg> {
        at(0x000, i, MAX_INTRS)
    }
    /// Tx producer of queue `q`.
    pub const fn txprod(q: u32) -> Option<Reg> {
        at(0x600, q, MAX_TX_QUEUES)
    }
    /// Rx ring 0 producer of queue `q`.
    pub const fn rxprod(q: u32) -> Option<Reg> {
        at(0x800, q, MAX_RX_QUEUES)
    }
    /// Rx ring 1 producer of queue `q`.
    pub const fn rxprod2(q: u32) -> Option<Reg> {
        at(0xA00, q, MAX_RX_QUEUES)
    }
}

/// Commands written to CMD (§3.3). Only those this driver issues.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Cmd {
    /// ACTIVATE_DEV: result 0 on success.
    ActivateDev = 0xCAFE_0000,
    /// QUIESCE_DEV.
    QuiesceDev = 0xCAFE_0001,
    /// RESET_DEV: result 0 on success.
    ResetDev = 0xCAFE_0002,
    /// UPDATE_RX_MODE.
    UpdateRxMode = 0xCAFE_0003,
    /// UPDATE_MAC_FILTERS (the multicast table).
    UpdateMacFilters = 0xCAFE_0004,
    /// GET_QUEUE_STATUS: the device writes each queue descriptor's status.
    GetQueueStatus = 0xF00D_0000,
    /// GET_STATS: the device writes each queue descriptor's statistics.
    GetStats = 0xF00D_0001,
    /// GET_LINK: `speed_Mbps << 16 | up`.
    GetLink = 0xF00D_0002,
    /// GET_PERM_MAC_LO: bytes 0–3.
    GetPermMacLo = 0xF00D_0003,
    /// GET_PERM_MAC_HI: bytes 4–5.
    GetPermMacHi = 0xF00D_0004,
    /// GET_CONF_INTR: bits 1:0 type, 3:2 mask mode.
    GetConfIntr = 0xF00D_0008,
}

/// GET_CONF_INTR interrupt types (bits 1:0).
pub mod intr_type {
    /// The driver chooses.
    pub const AUTO: u32 = 0;
    /// MSI-X.
    pub const MSIX: u32 = 3;
}

/// GET_CONF_INTR mask modes (bits 3:2).
pub mod mask_mode {
    /// The device masks a vector as it fires (`autoMask`).
    pub const AUTO: u32 = 0;
}

/// MAC bytes as MACL and MACH values.
pub fn mac_to_regs(mac: [u8; 6]) -> (u32, u32) {
    (
        u32::from_le_bytes([mac[0], mac[1], mac[2], mac[3]]),
        u32::from(mac[4]) | (u32::from(mac[5]) << 8),
    )
}

/// A MAC from MACL/MACH-format values (GET_PERM_MAC_LO/HI too).
pub fn mac_from_regs(lo: u32, hi: u32) -> [u8; 6] {
    let l = lo.to_le_bytes();
    let h = hi.to_le_bytes();
    [l[0], l[1], l[2], l[3], h[0], h[1]]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn array_registers_stay_inside_their_arrays() {
        assert_eq!(bar0::imr(0), Some(Reg(0)));
        assert_eq!(bar0::imr(24), Some(Reg(0xC0)));
        assert_eq!(bar0::imr(25), None);
        assert_eq!(bar0::txprod(7), Some(Reg(0x638)));
        assert_eq!(bar0::txprod(8), None);
        assert_eq!(bar0::rxprod(15), Some(Reg(0x878)));
        assert_eq!(bar0::rxprod2(0), Some(Reg(0xA00)));
        assert_eq!(bar0::rxprod2(16), None);
        assert_eq!(bar0::imr(u32::MAX), None);
    }

    #[test]
    fn mac_round_trips_through_the_register_format() {
        let mac = [0x00, 0x50, 0x56, 0xAB, 0xCD, 0xEF];
        let (l, h) = mac_to_regs(mac);
        assert_eq!((l, h), (0xAB56_5000, 0xEFCD));
        assert_eq!(mac_from_regs(l, h), mac);
        assert_eq!(
            mac_from_regs(l, h | 0xFFFF_0000),
            mac,
            "upper MACH bits ignored"
        );
    }
}
