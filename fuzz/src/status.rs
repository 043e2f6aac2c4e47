//! The statuses each NDK call may return, from docs/reference/ndkpi.md (§4.5 "where NDKPI
//! uses it", §5.1 to §5.9). A status outside its call's set is a crash.
//!
//! STATUS_INTERNAL_ERROR ("fatal (hardware) error", §4.5) is allowed only once the target
//! has written device memory or corrupted a command (`device_broken`): a healthy device
//! never earns it.

use pvrdma_ndk::ndkpi::*;

/// Every create (§5.1, §5.4, §5.6, §5.9): the object, pending, or an inline or
/// asynchronous failure.
pub const CREATE: &[NTSTATUS] = &[
    STATUS_SUCCESS,
    STATUS_PENDING,
    STATUS_INVALID_PARAMETER,
    STATUS_INSUFFICIENT_RESOURCES,
    STATUS_NOT_SUPPORTED,
    STATUS_INVALID_DEVICE_REQUEST,
];

/// Register, deregister, initialize-fast-register, modify SRQ (§5.7, §5.9).
pub const REQUEST: &[NTSTATUS] = &[
    STATUS_SUCCESS,
    STATUS_PENDING,
    STATUS_INVALID_PARAMETER,
    STATUS_INSUFFICIENT_RESOURCES,
    STATUS_INVALID_DEVICE_REQUEST,
    STATUS_NOT_SUPPORTED,
    STATUS_ACCESS_VIOLATION,
    STATUS_IMPLEMENTATION_LIMIT,
    STATUS_DEVICE_BUSY,
];

/// A work request's inline status (§5.3, §5.7, §5.8): accepted, or refused with no
/// completion.
pub const POST: &[NTSTATUS] = &[
    STATUS_SUCCESS,
    STATUS_CONNECTION_INVALID,
    STATUS_INVALID_PARAMETER,
    STATUS_INSUFFICIENT_RESOURCES,
    STATUS_ACCESS_VIOLATION,
    STATUS_REMOTE_RESOURCES,
    STATUS_INVALID_DEVICE_REQUEST,
    STATUS_NOT_SUPPORTED,
    STATUS_INVALID_BUFFER_SIZE,
];

/// A completion's status (§4.5, §5.6, §5.8): what `wc_status_to_ntstatus` may produce for a
/// device that reports the failures the device model reports.
pub const COMPLETION: &[NTSTATUS] = &[
    STATUS_SUCCESS,
    STATUS_CANCELLED,
    STATUS_REMOTE_RESOURCES,
    STATUS_ACCESS_VIOLATION,
    STATUS_IO_TIMEOUT,
    STATUS_BUFFER_OVERFLOW,
    STATUS_INVALID_BUFFER_SIZE,
    STATUS_INVALID_DEVICE_REQUEST,
];

/// NdkCqNotificationCallback's CqStatus (§5.4).
pub const CQ_NOTIFICATION: &[NTSTATUS] = &[
    STATUS_SUCCESS,
    STATUS_BUFFER_OVERFLOW,
    STATUS_INTERNAL_ERROR,
];

/// SrqNotification's SrqStatus (§5.9).
pub const SRQ_NOTIFICATION: &[NTSTATUS] = &[STATUS_SUCCESS, STATUS_INTERNAL_ERROR];

/// Asserts `st` is in `set` (or is STATUS_INTERNAL_ERROR on a device the target broke).
#[track_caller]
pub fn check(what: &str, st: NTSTATUS, set: &[NTSTATUS], device_broken: bool) {
    assert!(
        set.contains(&st) || (device_broken && st == STATUS_INTERNAL_ERROR),
        "{what} returned {st:#010x}, not a documented status ({set:x?})"
    );
}

/// With FUZZ_TRACE set (replaying one input by hand), prints what a call returned.
pub fn trace(what: std::fmt::Arguments<'_>) {
    if std::env::var_os("FUZZ_TRACE").is_some() {
        eprintln!("{what}");
    }
}
