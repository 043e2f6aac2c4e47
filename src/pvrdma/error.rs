//! The device layer's error type (style.md §16).
//!
//! This layer knows device codes, not NTSTATUS: what a consumer sees is the NDK layer's
//! decision, made once, in `NdkError`'s conversion from [`PvrdmaError`] and
//! `NdkError::to_ntstatus`.
#![deny(unsafe_code)]

use crate::os::OsError;

/// Device error codes in ERR and `hdr.err` (MODEL M8).
pub mod dev_err {
    /// Success.
    pub const OK: u32 = 0;
    /// Unknown handle.
    pub const UNKNOWN_HANDLE: u32 = 2;
    /// No resources.
    pub const NO_RESOURCES: u32 = 12;
    /// Object busy (still referenced).
    pub const BUSY: u32 = 16;
    /// Invalid request.
    pub const INVALID: u32 = 22;
    /// Unsupported or unknown command.
    pub const UNSUPPORTED: u32 = 95;
}

/// Everything that can go wrong in the hardware layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PvrdmaError {
    /// Pool or DMA memory allocation failed.
    NoMemory,
    /// The VERSION register holds a version outside 18–20 (§1).
    UnsupportedVersion(u32),
    /// `caps` failed the PVRDMA_SUPPORTED check (mode, gid_types; §4) or a limit we require.
    UnsupportedDevice,
    /// ERR was non-zero after CTL = ACTIVATE (§5 step 9).
    ActivateFailed(u32),
    /// ERR was non-zero right after REQUEST (§8 step 3): the device refused the command.
    CommandRejected {
        /// Command code.
        code: u32,
        /// ERR register value.
        err: u32,
    },
    /// The response carried a non-zero `hdr.err` (M8).
    CommandFailed {
        /// Command code.
        code: u32,
        /// `hdr.err`.
        err: u8,
    },
    /// The response's `ack` was not `code | 0x80000000` (§8 step 4).
    BadAck {
        /// Command code.
        code: u32,
        /// `ack` found in the response slot.
        ack: u32,
    },
    /// No response within the command timeout.
    Timeout,
    /// The device wrote a ring index that fails validation (§7, M14).
    RingCorrupt,
    /// A work queue has no free slot.
    QueueFull,
    /// A caller-supplied value is out of range (too many SGEs, sizes over caps, ...).
    InvalidParameter,
    /// The feature is not supported by the device or by this driver.
    NotSupported,
    /// The device is being torn down; the request was not sent.
    Shutdown,
    /// A response that breaks the protocol: a handle out of range or held by a live object
    /// (M10), a CQ of another size than asked (M11).
    BadResponse,
}

impl From<OsError> for PvrdmaError {
    fn from(e: OsError) -> Self {
        match e {
            OsError::NoMemory => PvrdmaError::NoMemory,
            OsError::Unavailable => PvrdmaError::NotSupported,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_errors_convert() {
        assert_eq!(PvrdmaError::from(OsError::NoMemory), PvrdmaError::NoMemory);
        assert_eq!(
            PvrdmaError::from(OsError::Unavailable),
            PvrdmaError::NotSupported
        );
    }
}
