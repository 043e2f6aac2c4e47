//! The NDK layer's error type and its one mapping to NTSTATUS (style.md §16).
//!
//! Every inline failure of a provider function is an [`NdkError`]; the dispatch thunks turn
//! it into the status NDKPI defines for the case (ndkpi.md §4.5, §5).
#![deny(unsafe_code)]

use crate::ndkpi::*;

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
    pub const fn to_ntstatus(self) -> NTSTATUS {
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

/// Failure reported by the hardware seam ([`super::hw::Hardware`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HwError {
    /// No memory, no free handle, or the device answered "no resources" (12).
    NoResources,
    /// The device refused the request as invalid (22) or unsupported (95).
    Invalid,
    /// Any other device failure (command timeout, device gone).
    Failed,
}

impl From<HwError> for NdkError {
    fn from(e: HwError) -> Self {
        match e {
            HwError::NoResources => NdkError::InsufficientResources,
            HwError::Invalid => NdkError::InvalidParameter,
            HwError::Failed => NdkError::Device,
        }
    }
}

/// Shorthand for results of provider functions.
pub type NdkResult<T> = Result<T, NdkError>;
