//! The provider's calls into its consumer: every NDK_FN_* callback the consumer handed over
//! (ndkpi.md §2.12, §5.1, §5.4, §5.10) is called here and nowhere else, so this file is the
//! one place to read what the provider promises when it calls back: IRQL ≤ DISPATCH_LEVEL,
//! no driver spin lock held (the host build asserts it in every test callback), and each
//! completion exactly once.
//!
//! Each function's caller keeps the object the callback is about counted for the duration
//! of the call (a close count: the consumer may close it from inside the callback, §5.2).
#![allow(unsafe_code)]

use super::*;

/// A consumer's disconnect-event callback (NdkCompleteConnect(Ex), NdkAccept(Ex)).
#[derive(Clone, Copy)]
pub enum DisconnectCallback {
    /// NDK_FN_DISCONNECT_EVENT_CALLBACK.
    Plain(NDK_FN_DISCONNECT_EVENT_CALLBACK, usize),
    /// NDK_FN_DISCONNECT_EVENT_CALLBACK_EX (NDKPI 2.1).
    Ex(NDK_FN_DISCONNECT_EVENT_CALLBACK_EX, usize),
}

/// Calls a consumer's NdkCloseCompletion.
pub(crate) fn close_completion(cb: NDK_FN_CLOSE_COMPLETION, ctx: usize) {
    // SAFETY: `cb` is the consumer's callback for this close, callable at ≤ DISPATCH_LEVEL
    // with the context it supplied (§2.12); the provider calls it exactly once.
    unsafe { cb(ctx as PVOID) }
}

/// Calls a consumer's NdkRequestCompletion.
pub(crate) fn request_completion(cb: NDK_FN_REQUEST_COMPLETION, ctx: usize, st: NTSTATUS) {
    // SAFETY: the consumer's callback for a request that returned STATUS_PENDING, callable at
    // ≤ DISPATCH_LEVEL with its context; the provider calls it exactly once.
    unsafe { cb(ctx as PVOID, st) }
}

/// Calls a consumer's NdkCreateCompletion.
pub(crate) fn create_completion(
    cb: NDK_FN_CREATE_COMPLETION,
    ctx: usize,
    st: NTSTATUS,
    obj: *mut NDK_OBJECT_HEADER,
) {
    // SAFETY: the consumer's callback for a create that returned STATUS_PENDING, callable at
    // ≤ DISPATCH_LEVEL with its context; the provider calls it exactly once.
    unsafe { cb(ctx as PVOID, st, obj) }
}

/// Calls a consumer's NdkCqNotificationCallback.
pub(crate) fn cq_notification(cb: NDK_FN_CQ_NOTIFICATION_CALLBACK, ctx: usize, st: NTSTATUS) {
    // SAFETY: the consumer's callback from NdkCreateCq, callable at ≤ DISPATCH_LEVEL with its
    // context until the CQ's close completes; the caller holds a close count.
    unsafe { cb(ctx as PVOID, st) }
}

/// Calls a consumer's NdkSrqNotificationCallback.
pub(crate) fn srq_notification(cb: NDK_FN_SRQ_NOTIFICATION_CALLBACK, ctx: usize, st: NTSTATUS) {
    // SAFETY: as for `cq_notification`, from NdkCreateSrq.
    unsafe { cb(ctx as PVOID, st) }
}

/// Calls a listener's NdkConnectEventCallback with the connector made for the request.
pub(crate) fn connect_event(
    cb: NDK_FN_CONNECT_EVENT_CALLBACK,
    ctx: usize,
    connector: *mut NDK_CONNECTOR,
) {
    // SAFETY: the consumer's callback from NdkCreateListener, callable at ≤ DISPATCH_LEVEL
    // with its context while the listener is open (the caller holds a close count); the
    // connector was just published and is the consumer's from now on.
    unsafe { cb(ctx as PVOID, connector) }
}

/// Calls a connector's disconnect-event callback (plain or Ex; reason 0, none given).
pub(crate) fn disconnect_event(cb: DisconnectCallback) {
    match cb {
        // SAFETY: the consumer's callback from NdkCompleteConnect / NdkAccept, callable at ≤
        // DISPATCH_LEVEL with its context while the connector is open (the caller holds a
        // close count); called once per connection.
        DisconnectCallback::Plain(f, ctx) => unsafe { f(ctx as PVOID) },
        // SAFETY: as above (NdkCompleteConnectEx / NdkAcceptEx).
        DisconnectCallback::Ex(f, ctx) => unsafe { f(ctx as PVOID, 0) },
    }
}
