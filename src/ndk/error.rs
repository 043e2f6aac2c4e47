//! The NDK layer's error type and its one mapping to NTSTATUS (style.md §16).
//!
//! Every inline failure of a provider function is an [`NdkError`]; the dispatch thunks turn
//! it into the status NDKPI defines for the case (ndkpi.md §4.5, §5).
#![deny(unsafe_code)]

use crate::ndkpi::*;
use crate::pvrdma::PvrdmaError;
use crate::pvrdma::error::dev_err;

/// Why a provider function failed inline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NdkError {
    /// A parameter is out of range, null where required, above an adapter limit, or an
    /// unknown flag bit is set (STATUS_INVALID_PARAMETER).
    InvalidParameter,
    /// The feature exists in NDKPI but this provider or the device does not support it:
    /// memory windows, CQ resize, interrupt moderation, inline data, extensions
    /// (STATUS_NOT_SUPPORTED).
    NotSupported,
    /// Not written yet: connection management (STATUS_NOT_IMPLEMENTED).
    NotImplemented,
    /// Pool, DMA memory, a device object or a queue slot is exhausted
    /// (STATUS_INSUFFICIENT_RESOURCES).
    InsufficientResources,
    /// A caller buffer is too small; the required size has been written back
    /// (STATUS_BUFFER_TOO_SMALL).
    BufferTooSmall,
    /// Remote access requested on an MR that was not initialized for it (NdkFastRegister)
    /// (STATUS_ACCESS_VIOLATION).
    AccessViolation,
    /// A work request on a QP that is not connected (STATUS_CONNECTION_INVALID).
    ConnectionInvalid,
    /// An FRMR page count the device cannot hold (STATUS_IMPLEMENTATION_LIMIT).
    ImplementationLimit,
    /// The object is in the wrong state for the call: a create on a closing parent, a
    /// register on a fast-register MR, a receive on a QP with an SRQ
    /// (STATUS_INVALID_DEVICE_REQUEST).
    InvalidDeviceRequest,
    /// The device failed a command for a reason other than resources (STATUS_INTERNAL_ERROR).
    Device,
}

impl NdkError {
    /// The NTSTATUS an NDK consumer sees for this error.
    ///
    /// Out of line: every error exit of a thunk is a tail call here, so no status constant
    /// is materialized on a success path.
    #[inline(never)]
    pub fn to_ntstatus(self) -> NTSTATUS {
        match self {
            NdkError::InvalidParameter => STATUS_INVALID_PARAMETER,
            NdkError::NotSupported => STATUS_NOT_SUPPORTED,
            NdkError::NotImplemented => STATUS_NOT_IMPLEMENTED,
            NdkError::InsufficientResources => STATUS_INSUFFICIENT_RESOURCES,
            NdkError::BufferTooSmall => STATUS_BUFFER_TOO_SMALL,
            NdkError::AccessViolation => STATUS_ACCESS_VIOLATION,
            NdkError::ConnectionInvalid => STATUS_CONNECTION_INVALID,
            NdkError::ImplementationLimit => STATUS_IMPLEMENTATION_LIMIT,
            NdkError::InvalidDeviceRequest => STATUS_INVALID_DEVICE_REQUEST,
            NdkError::Device => STATUS_INTERNAL_ERROR,
        }
    }
}

impl From<PvrdmaError> for NdkError {
    /// What a device failure is to a consumer: no memory, a full queue, or the device's
    /// "no resources" (M8 code 12) is STATUS_INSUFFICIENT_RESOURCES; a request the device
    /// refused as invalid (22) or unsupported (95), or that the verbs refused before it
    /// reached the device, is STATUS_INVALID_PARAMETER; anything else (a timeout, a device
    /// that breaks the protocol or is going away) is STATUS_INTERNAL_ERROR.
    fn from(e: PvrdmaError) -> Self {
        let code = |err: u32| match err {
            dev_err::NO_RESOURCES => NdkError::InsufficientResources,
            dev_err::INVALID | dev_err::UNSUPPORTED => NdkError::InvalidParameter,
            _ => NdkError::Device,
        };
        match e {
            PvrdmaError::NoMemory | PvrdmaError::QueueFull => NdkError::InsufficientResources,
            // M8: ERR (a command refused at REQUEST) and `hdr.err` carry the same codes.
            PvrdmaError::CommandFailed { err, .. } => code(u32::from(err)),
            PvrdmaError::CommandRejected { err, .. } => code(err),
            PvrdmaError::InvalidParameter | PvrdmaError::NotSupported => NdkError::InvalidParameter,
            _ => NdkError::Device,
        }
    }
}

/// Shorthand for results of provider functions.
pub type NdkResult<T> = Result<T, NdkError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_errors_map_to_one_ntstatus_each() {
        let st = |e: PvrdmaError| NdkError::from(e).to_ntstatus();
        assert_eq!(st(PvrdmaError::NoMemory), STATUS_INSUFFICIENT_RESOURCES);
        assert_eq!(st(PvrdmaError::QueueFull), STATUS_INSUFFICIENT_RESOURCES);
        let failed = |err| st(PvrdmaError::CommandFailed { code: 9, err });
        assert_eq!(failed(12), STATUS_INSUFFICIENT_RESOURCES);
        assert_eq!(failed(22), STATUS_INVALID_PARAMETER);
        assert_eq!(failed(95), STATUS_INVALID_PARAMETER);
        assert_eq!(failed(2), STATUS_INTERNAL_ERROR, "UNKNOWN_HANDLE");
        assert_eq!(failed(200), STATUS_INTERNAL_ERROR);
        let rejected = |err| st(PvrdmaError::CommandRejected { code: 1, err });
        assert_eq!(rejected(12), STATUS_INSUFFICIENT_RESOURCES);
        assert_eq!(rejected(22), STATUS_INVALID_PARAMETER);
        assert_eq!(rejected(95), STATUS_INVALID_PARAMETER);
        assert_eq!(rejected(16), STATUS_INTERNAL_ERROR, "BUSY");
        assert_eq!(st(PvrdmaError::InvalidParameter), STATUS_INVALID_PARAMETER);
        assert_eq!(st(PvrdmaError::Timeout), STATUS_INTERNAL_ERROR);
        assert_eq!(st(PvrdmaError::BadResponse), STATUS_INTERNAL_ERROR);
        assert_eq!(st(PvrdmaError::Shutdown), STATUS_INTERNAL_ERROR);
    }
}
