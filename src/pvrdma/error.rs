//! The hardware layer's error type and its one conversion to NTSTATUS (style.md §16).
#![deny(unsafe_code)]

use crate::os::OsError;

// NTSTATUS values used by this layer, named exactly as ntstatus.h / ndkpi.h.
// TODO: switch to the `crate::ndkpi` constants once the ABI branch has merged.
/// STATUS_SUCCESS.
pub const STATUS_SUCCESS: i32 = 0;
/// STATUS_DEVICE_BUSY (a warning-class status).
pub const STATUS_DEVICE_BUSY: i32 = 0x8000_0011_u32 as i32;
/// STATUS_INVALID_HANDLE.
pub const STATUS_INVALID_HANDLE: i32 = 0xC000_0008_u32 as i32;
/// STATUS_INVALID_PARAMETER.
pub const STATUS_INVALID_PARAMETER: i32 = 0xC000_000D_u32 as i32;
/// STATUS_INSUFFICIENT_RESOURCES.
pub const STATUS_INSUFFICIENT_RESOURCES: i32 = 0xC000_009A_u32 as i32;
/// STATUS_IO_TIMEOUT.
pub const STATUS_IO_TIMEOUT: i32 = 0xC000_00B5_u32 as i32;
/// STATUS_NOT_SUPPORTED.
pub const STATUS_NOT_SUPPORTED: i32 = 0xC000_00BB_u32 as i32;
/// STATUS_ADAPTER_HARDWARE_ERROR.
pub const STATUS_ADAPTER_HARDWARE_ERROR: i32 = 0xC000_00C2_u32 as i32;
/// STATUS_INTERNAL_ERROR.
pub const STATUS_INTERNAL_ERROR: i32 = 0xC000_00E5_u32 as i32;

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
}

impl From<OsError> for PvrdmaError {
    fn from(e: OsError) -> Self {
        match e {
            OsError::NoMemory => PvrdmaError::NoMemory,
            OsError::Unavailable => PvrdmaError::NotSupported,
        }
    }
}

fn device_code_status(err: u32) -> i32 {
    match err {
        dev_err::UNKNOWN_HANDLE => STATUS_INVALID_HANDLE,
        dev_err::NO_RESOURCES => STATUS_INSUFFICIENT_RESOURCES,
        dev_err::BUSY => STATUS_DEVICE_BUSY,
        dev_err::INVALID => STATUS_INVALID_PARAMETER,
        dev_err::UNSUPPORTED => STATUS_NOT_SUPPORTED,
        _ => STATUS_ADAPTER_HARDWARE_ERROR,
    }
}

impl PvrdmaError {
    /// The NTSTATUS reported to NDK consumers and NDIS.
    pub fn to_ntstatus(self) -> i32 {
        match self {
            PvrdmaError::NoMemory => STATUS_INSUFFICIENT_RESOURCES,
            PvrdmaError::UnsupportedVersion(_) | PvrdmaError::UnsupportedDevice => {
                STATUS_NOT_SUPPORTED
            }
            PvrdmaError::ActivateFailed(_)
            | PvrdmaError::BadAck { .. }
            | PvrdmaError::RingCorrupt => STATUS_ADAPTER_HARDWARE_ERROR,
            PvrdmaError::CommandRejected { err, .. } => device_code_status(err),
            PvrdmaError::CommandFailed { err, .. } => device_code_status(u32::from(err)),
            PvrdmaError::Timeout => STATUS_IO_TIMEOUT,
            PvrdmaError::QueueFull => STATUS_INSUFFICIENT_RESOURCES,
            PvrdmaError::InvalidParameter => STATUS_INVALID_PARAMETER,
            PvrdmaError::NotSupported => STATUS_NOT_SUPPORTED,
            PvrdmaError::Shutdown => STATUS_INTERNAL_ERROR,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ntstatus_mapping() {
        assert_eq!(PvrdmaError::NoMemory.to_ntstatus() as u32, 0xC000_009A);
        assert_eq!(PvrdmaError::Timeout.to_ntstatus() as u32, 0xC000_00B5);
        let f = |err| PvrdmaError::CommandFailed { code: 9, err }.to_ntstatus() as u32;
        assert_eq!(f(22), 0xC000_000D);
        assert_eq!(f(12), 0xC000_009A);
        assert_eq!(f(95), 0xC000_00BB);
        assert_eq!(f(16), 0x8000_0011);
        assert_eq!(f(2), 0xC000_0008);
        assert_eq!(f(200), 0xC000_00C2);
        assert_eq!(
            PvrdmaError::CommandRejected { code: 1, err: 95 }.to_ntstatus() as u32,
            0xC000_00BB
        );
        assert_eq!(
            PvrdmaError::UnsupportedVersion(17).to_ntstatus() as u32,
            0xC000_00BB
        );
        assert_eq!(PvrdmaError::from(OsError::NoMemory), PvrdmaError::NoMemory);
    }
}
