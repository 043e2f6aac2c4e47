//! `NDK_LISTENER_DISPATCH`. No listener can be created yet (connection management is a later
//! issue); the slots exist and answer STATUS_NOT_IMPLEMENTED.

use super::{close_object, not_implemented, query_extension};
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

/// `NDK_LISTENER_DISPATCH`.
pub static LISTENER_DISPATCH: NDK_LISTENER_DISPATCH = NDK_LISTENER_DISPATCH {
    NdkCloseListener: close_object::<Listener>,
    NdkQueryExtension: query_extension,
    NdkListen: listen,
    NdkGetLocalAddress: listener_address,
    NdkControlConnectEvents: control_connect_events,
};
