//! Doorbell values (§12). Call sites build a value (`QpDoorbell::send(handle)`) and ring it;
//! offsets never appear outside this file.
#![deny(unsafe_code)]

use crate::os::Uar;
use crate::os::sync::to_device_barrier;

/// `PVRDMA_UAR_HANDLE_MASK`.
pub const HANDLE_MASK: u32 = 0x00FF_FFFF;

const QP_OFFSET: u32 = 0x0;
const CQ_OFFSET: u32 = 0x4;
const SRQ_OFFSET: u32 = 0x8;
const QP_SEND: u32 = 1 << 30;
const QP_RECV: u32 = 1 << 31;
const CQ_ARM: u32 = 1 << 30;
const CQ_ARM_SOL: u32 = 1 << 29;
const CQ_POLL: u32 = 1 << 31;
const SRQ_RECV: u32 = 1 << 30;

/// A doorbell: one 32-bit value at one UAR offset.
pub trait Doorbell: Copy {
    /// Byte offset in the UAR page.
    fn offset(self) -> u32;
    /// Value to store.
    fn value(self) -> u32;
}

/// QP doorbell (UAR 0x0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpDoorbell(u32);

impl QpDoorbell {
    /// New SQ WQEs up to `prod_tail`.
    pub const fn send(handle: u32) -> Self {
        QpDoorbell((handle & HANDLE_MASK) | QP_SEND)
    }
    /// New RQ WQEs.
    pub const fn recv(handle: u32) -> Self {
        QpDoorbell((handle & HANDLE_MASK) | QP_RECV)
    }
}

impl Doorbell for QpDoorbell {
    fn offset(self) -> u32 {
        QP_OFFSET
    }
    fn value(self) -> u32 {
        self.0
    }
}

/// CQ doorbell (UAR 0x4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqDoorbell(u32);

impl CqDoorbell {
    /// Notify on the next completion.
    pub const fn arm(handle: u32) -> Self {
        CqDoorbell((handle & HANDLE_MASK) | CQ_ARM)
    }
    /// Notify on the next solicited or error completion (M18).
    pub const fn arm_solicited(handle: u32) -> Self {
        CqDoorbell((handle & HANDLE_MASK) | CQ_ARM_SOL)
    }
    /// "Found empty" hint (Linux writes it once, M17 ignores it).
    pub const fn poll(handle: u32) -> Self {
        CqDoorbell((handle & HANDLE_MASK) | CQ_POLL)
    }
}

impl Doorbell for CqDoorbell {
    fn offset(self) -> u32 {
        CQ_OFFSET
    }
    fn value(self) -> u32 {
        self.0
    }
}

/// SRQ doorbell (UAR 0x8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SrqDoorbell(u32);

impl SrqDoorbell {
    /// New SRQ WQEs up to the SRQ `prod_tail`.
    pub const fn recv(handle: u32) -> Self {
        SrqDoorbell((handle & HANDLE_MASK) | SRQ_RECV)
    }
}

impl Doorbell for SrqDoorbell {
    fn offset(self) -> u32 {
        SRQ_OFFSET
    }
    fn value(self) -> u32 {
        self.0
    }
}

/// Rings a doorbell: orders the preceding `prod_tail` update before the store (§12), then one
/// volatile 32-bit store.
#[inline]
pub fn ring(uar: &Uar, db: impl Doorbell) {
    to_device_barrier();
    uar.write32(db.offset(), db.value());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doorbell_values() {
        assert_eq!(QpDoorbell::send(5).value(), 0x4000_0005);
        assert_eq!(QpDoorbell::recv(5).value(), 0x8000_0005);
        assert_eq!(QpDoorbell::send(0x1FF_FFFF).value(), 0x40FF_FFFF);
        assert_eq!(QpDoorbell::send(1).offset(), 0);
        assert_eq!(CqDoorbell::arm(3).value(), 0x4000_0003);
        assert_eq!(CqDoorbell::arm_solicited(3).value(), 0x2000_0003);
        assert_eq!(CqDoorbell::poll(3).value(), 0x8000_0003);
        assert_eq!(CqDoorbell::arm(3).offset(), 4);
        assert_eq!(SrqDoorbell::recv(9).value(), 0x4000_0009);
        assert_eq!(SrqDoorbell::recv(9).offset(), 8);
    }
}
