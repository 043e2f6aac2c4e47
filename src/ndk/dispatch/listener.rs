//! `NDK_LISTENER_DISPATCH`. No listener can be created yet (connection management is a later
//! issue); the slots exist and answer STATUS_NOT_IMPLEMENTED.

use super::{dispatch_table, not_implemented};
use crate::ndk::listener::Listener;
use crate::ndkpi::*;

not_implemented! {
    fn listen(_l: *mut NDK_LISTENER, _a: *const SOCKADDR, _len: ULONG,
        _rc: NDK_FN_REQUEST_COMPLETION, _ctx: PVOID);
    fn listener_address(_l: *mut NDK_LISTENER, _a: *mut SOCKADDR, _len: *mut ULONG);
}

/// # Safety
/// Nothing is dereferenced.
unsafe extern "system" fn control_connect_events(_l: *mut NDK_LISTENER, _pause: BOOLEAN) {}

dispatch_table!(LISTENER_DISPATCH: NDK_LISTENER_DISPATCH, NdkCloseListener: Listener {
    NdkListen: listen,
    NdkGetLocalAddress: listener_address,
    NdkControlConnectEvents: control_connect_events,
});
