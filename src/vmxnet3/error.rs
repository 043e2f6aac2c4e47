//! [`Vmxnet3Error`]: why bring-up or a reset failed.
#![deny(unsafe_code)]

use crate::os::OsError;

/// Why the vmxnet3 layer could not bring the device up (or back up after a reset).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Vmxnet3Error {
    /// The platform lacks BAR0 or BAR1.
    NoBars,
    /// VRRS offers no revision this driver implements (revision 1); the value read.
    UnsupportedRevision(u32),
    /// UVRS offers no UPT version 1; the value read.
    UnsupportedUpt(u32),
    /// RESET_DEV read back non-zero; the value.
    ResetFailed(u32),
    /// GET_CONF_INTR asks for INTx or MSI (this driver needs MSI-X); the value.
    UnsupportedInterrupts(u32),
    /// The platform granted no MSI-X vector.
    NoInterrupts,
    /// ACTIVATE_DEV read back non-zero; the value.
    ActivateFailed(u32),
    /// A configuration value out of range (ring sizes, buffer count, MTU).
    InvalidParameter,
    /// Pool or DMA memory could not be allocated.
    NoMemory,
    /// The platform refused a resource (the interrupt already connected, ...).
    Unavailable,
    /// The device answered with all ones: it is gone (surprise removal).
    DeviceGone,
}

impl From<OsError> for Vmxnet3Error {
    fn from(e: OsError) -> Self {
        match e {
            OsError::NoMemory => Vmxnet3Error::NoMemory,
            OsError::Unavailable => Vmxnet3Error::Unavailable,
        }
    }
}
