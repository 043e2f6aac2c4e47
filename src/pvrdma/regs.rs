//! BAR1 registers as typed values with access modes (§3; style.md §5, Tock
//! `ReadOnly`/`WriteOnly`): a write-only register has no `read`, a read-only one no `write`.
//!
//! ```compile_fail
//! # fn f(io: &dyn pvrdma_ndk::os::RegisterIo) {
//! pvrdma_ndk::pvrdma::regs::DSRLOW.read(io); // write-only
//! # }
//! ```
//!
//! ```compile_fail
//! # fn f(io: &dyn pvrdma_ndk::os::RegisterIo) {
//! pvrdma_ndk::pvrdma::regs::ERR.write(io, 0); // read-only
//! # }
//! ```
//!
//! ```
//! # fn f(io: &dyn pvrdma_ndk::os::RegisterIo) {
//! let v = pvrdma_ndk::pvrdma::regs::IMR.read(io);
//! pvrdma_ndk::pvrdma::regs::IMR.write(io, v);
//! # }
//! ```
#![deny(unsafe_code)]

use core::marker::PhantomData;

use crate::os::RegisterIo;

use super::device_enum::device_enum;

/// Access-mode marker: read-only.
pub struct ReadOnly;
/// Access-mode marker: write-only.
pub struct WriteOnly;
/// Access-mode marker: read-write.
pub struct ReadWrite;

/// Modes that allow reads.
pub trait Readable {}
/// Modes that allow writes.
pub trait Writable {}
impl Readable for ReadOnly {}
impl Readable for ReadWrite {}
impl Writable for WriteOnly {}
impl Writable for ReadWrite {}

/// A 32-bit BAR1 register at a fixed offset.
pub struct Reg<A> {
    offset: u32,
    _mode: PhantomData<A>,
}

impl<A> Reg<A> {
    const fn at(offset: u32) -> Self {
        Reg {
            offset,
            _mode: PhantomData,
        }
    }
    /// Byte offset in BAR1.
    pub const fn offset(&self) -> u32 {
        self.offset
    }
}

impl<A: Readable> Reg<A> {
    /// Reads the register.
    pub fn read(&self, io: &dyn RegisterIo) -> u32 {
        io.read32(self.offset)
    }
}

impl<A: Writable> Reg<A> {
    /// Writes the register.
    pub fn write(&self, io: &dyn RegisterIo, v: u32) {
        io.write32(self.offset, v);
    }
}

/// R: device version (§1).
pub const VERSION: Reg<ReadOnly> = Reg::at(0x00);
/// W: DSR physical address bits 31:0.
pub const DSRLOW: Reg<WriteOnly> = Reg::at(0x04);
/// W: DSR physical address bits 63:32, written last (the device then loads the DSR, M4).
pub const DSRHIGH: Reg<WriteOnly> = Reg::at(0x08);
/// W: device control ([`Ctl`]).
pub const CTL: Reg<WriteOnly> = Reg::at(0x0C);
/// W: write 0 to execute the request in the command slot.
pub const REQUEST: Reg<WriteOnly> = Reg::at(0x10);
/// R: 0 = OK; read after ACTIVATE, UNQUIESCE and REQUEST.
pub const ERR: Reg<ReadOnly> = Reg::at(0x14);
/// R: interrupt cause (INTx), read-to-clear (M20).
pub const ICR: Reg<ReadOnly> = Reg::at(0x18);
/// RW: interrupt mask, bit i masks vector i.
pub const IMR: Reg<ReadWrite> = Reg::at(0x1C);
/// RW: MAC address low part (format UNCONFIRMED; unused by the driver).
pub const MACL: Reg<ReadWrite> = Reg::at(0x20);
/// RW: MAC address high part.
pub const MACH: Reg<ReadWrite> = Reg::at(0x24);

/// IMR value enabling every vector.
pub const IMR_ALL_ENABLED: u32 = 0;
/// IMR value masking every vector.
pub const IMR_ALL_MASKED: u32 = !0;

device_enum! {
    /// Values of CTL (M7).
    pub enum Ctl: u32 {
        /// Start the device after the DSR is loaded.
        Activate = 0,
        /// Resume after a quiesce (link up).
        Unquiesce = 1,
        /// Destroy everything and stop DMA before the write returns.
        Reset = 2,
    }
    /// A CTL value the driver does not know.
    unknown UnknownCtl;
}

impl Ctl {
    /// Writes this control value to CTL.
    pub fn write(self, io: &dyn RegisterIo) {
        CTL.write(io, self.as_raw());
    }
}

/// VERSION values (§1).
pub mod version {
    /// RoCEv1 only, unsupported.
    pub const ROCEV1: u32 = 17;
    /// RoCEv2 GIDs; `max_fast_reg_page_list_len` valid.
    pub const ROCEV2: u32 = 18;
    /// 64-bit UAR PFN in the DSR.
    pub const PPN64: u32 = 19;
    /// CREATE_QP response v2 with a separate `qp_handle`.
    pub const QPHANDLE: u32 = 20;
    /// What the driver writes as `driver_version`.
    pub const DRIVER: u32 = QPHANDLE;
    /// Whether this driver supports the device version.
    pub fn supported(v: u32) -> bool {
        (ROCEV2..=QPHANDLE).contains(&v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_match_section_3() {
        assert_eq!(VERSION.offset(), 0x00);
        assert_eq!(DSRLOW.offset(), 0x04);
        assert_eq!(DSRHIGH.offset(), 0x08);
        assert_eq!(CTL.offset(), 0x0C);
        assert_eq!(REQUEST.offset(), 0x10);
        assert_eq!(ERR.offset(), 0x14);
        assert_eq!(ICR.offset(), 0x18);
        assert_eq!(IMR.offset(), 0x1C);
        assert_eq!(MACL.offset(), 0x20);
        assert_eq!(MACH.offset(), 0x24);
        assert!(!version::supported(17));
        assert!(version::supported(18) && version::supported(19) && version::supported(20));
        assert!(!version::supported(21));
    }

    #[test]
    fn every_ctl_value_round_trips_and_no_other_is_one() {
        assert_eq!(
            [Ctl::Activate, Ctl::Unquiesce, Ctl::Reset].map(Ctl::as_raw),
            [0, 1, 2]
        );
        for v in 0..=2 {
            assert_eq!(Ctl::try_from(v).map(Ctl::as_raw), Ok(v));
        }
        assert_eq!(Ctl::try_from(3), Err(UnknownCtl(3)));
        assert_eq!(Ctl::try_from(u32::MAX), Err(UnknownCtl(u32::MAX)));
    }
}
