//! The NDK layer's error type and its one mapping to NTSTATUS (style.md §16).
//!
//! Every failure of a provider function, inline or reported in its completion, is an
//! [`NdkError`], and the failures of the layers below convert into it (`From<PvrdmaError>`,
//! `From<CmError>`, `From<ResolveError>`); [`NdkError::to_ntstatus`] turns it into the status
//! NDKPI defines for the case (ndkpi.md §4.5, §5), once, where the consumer is answered.
#![deny(unsafe_code)]

use crate::cm::CmError;
use crate::ndkpi::*;
use crate::os::net::ResolveError;
use crate::pvrdma::PvrdmaError;
use crate::pvrdma::error::dev_err;

/// Why a provider function failed, inline or in its completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NdkError {
    /// A parameter is out of range, null where required, above an adapter limit, or an
    /// unknown flag bit is set (STATUS_INVALID_PARAMETER).
    InvalidParameter,
    /// The feature exists in NDKPI but this provider or the device does not support it:
    /// memory windows, CQ resize, interrupt moderation, inline data, extensions
    /// (STATUS_NOT_SUPPORTED).
    NotSupported,
    /// The device runs without a connection engine (no address resolver was given at start)
    /// (STATUS_NOT_IMPLEMENTED).
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
    /// A work request on a QP that is not connected; a connection request out of turn, or
    /// before a connection exists (STATUS_CONNECTION_INVALID).
    ConnectionInvalid,
    /// An FRMR page count the device cannot hold (STATUS_IMPLEMENTATION_LIMIT).
    ImplementationLimit,
    /// The object is in the wrong state for the call: a create on a closing parent, a
    /// register on a fast-register MR, a receive on a QP with an SRQ
    /// (STATUS_INVALID_DEVICE_REQUEST).
    InvalidDeviceRequest,
    /// The device failed a command for a reason other than resources (STATUS_INTERNAL_ERROR).
    Device,
    /// Private data longer than the connection message carries
    /// (STATUS_INVALID_BUFFER_SIZE).
    InvalidBufferSize,
    /// An address of no family the provider takes, or source and destination of different
    /// families (STATUS_INVALID_ADDRESS).
    InvalidAddress,
    /// No local address of the destination's family (STATUS_NETWORK_UNREACHABLE).
    NetworkUnreachable,
    /// No neighbour answered for the destination (STATUS_HOST_UNREACHABLE).
    HostUnreachable,
    /// A source address that is not the interface's (STATUS_BAD_NETWORK_NAME).
    BadNetworkName,
    /// The connector is connecting or connected already (STATUS_CONNECTION_ACTIVE).
    ConnectionActive,
    /// The peer gave up on the connection, or rejected it after its REQ was answered
    /// (STATUS_CONNECTION_ABORTED).
    ConnectionAborted,
    /// The peer rejected the connection request (STATUS_CONNECTION_REFUSED).
    ConnectionRefused,
    /// A QP that is another connector's, or was connected once (STATUS_INVALID_DEVICE_STATE;
    /// ndkpi.md names no status for it, ND's is this one).
    InvalidDeviceState,
    /// The same 4-tuple is connected or connecting already (STATUS_ADDRESS_ALREADY_EXISTS).
    AddressAlreadyExists,
    /// A listener or an endpoint holds the address and port (STATUS_SHARING_VIOLATION).
    SharingViolation,
    /// Every port of the ephemeral range is taken (STATUS_TOO_MANY_ADDRESSES).
    TooManyAddresses,
    /// The CM's action queue stayed full (STATUS_DEVICE_BUSY).
    DeviceBusy,
    /// The peer did not answer within the CM's retries (STATUS_IO_TIMEOUT).
    IoTimeout,
    /// The request was cancelled: its object closed or its QP flushed (STATUS_CANCELLED).
    Cancelled,
}

impl NdkError {
    /// The NTSTATUS an NDK consumer sees for this error: the layer's one mapping.
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
            NdkError::InvalidBufferSize => STATUS_INVALID_BUFFER_SIZE,
            NdkError::InvalidAddress => STATUS_INVALID_ADDRESS,
            NdkError::NetworkUnreachable => STATUS_NETWORK_UNREACHABLE,
            NdkError::HostUnreachable => STATUS_HOST_UNREACHABLE,
            NdkError::BadNetworkName => STATUS_BAD_NETWORK_NAME,
            NdkError::ConnectionActive => STATUS_CONNECTION_ACTIVE,
            NdkError::ConnectionAborted => STATUS_CONNECTION_ABORTED,
            NdkError::ConnectionRefused => STATUS_CONNECTION_REFUSED,
            NdkError::InvalidDeviceState => STATUS_INVALID_DEVICE_STATE,
            NdkError::AddressAlreadyExists => STATUS_ADDRESS_ALREADY_EXISTS,
            NdkError::SharingViolation => STATUS_SHARING_VIOLATION,
            NdkError::TooManyAddresses => STATUS_TOO_MANY_ADDRESSES,
            NdkError::DeviceBusy => STATUS_DEVICE_BUSY,
            NdkError::IoTimeout => STATUS_IO_TIMEOUT,
            NdkError::Cancelled => STATUS_CANCELLED,
        }
    }
}

/// The status a request answers or completes with: STATUS_SUCCESS, or its error's.
#[inline(always)]
pub fn status(r: NdkResult<()>) -> NTSTATUS {
    match r {
        Ok(()) => STATUS_SUCCESS,
        Err(e) => e.to_ntstatus(),
    }
}

impl From<CmError> for NdkError {
    /// A consumer request the CM refused (the table in the `cm` module docs).
    fn from(e: CmError) -> Self {
        match e {
            CmError::PrivateDataTooLong => NdkError::InvalidBufferSize,
            CmError::InvalidState | CmError::UnknownConnection => NdkError::ConnectionInvalid,
            CmError::AddressInUse => NdkError::SharingViolation,
            CmError::AddressFamily => NdkError::InvalidAddress,
            CmError::TableFull | CmError::NoMemory => NdkError::InsufficientResources,
            CmError::QueueFull => NdkError::DeviceBusy,
            CmError::UnknownListener | CmError::InvalidParameter => NdkError::InvalidParameter,
        }
    }
}

impl From<ResolveError> for NdkError {
    /// A failed address resolution: a source address that is not the interface's is a bad
    /// network name; a destination no neighbour answered for is unreachable.
    fn from(e: ResolveError) -> Self {
        match e {
            ResolveError::NotLocal => NdkError::BadNetworkName,
            ResolveError::Unreachable => NdkError::HostUnreachable,
            ResolveError::NoResources => NdkError::InsufficientResources,
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
