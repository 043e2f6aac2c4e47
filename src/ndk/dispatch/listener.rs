//! `NDK_LISTENER_DISPATCH`. Every thunk follows the shared `# Safety` contract of [`super`]
//! ("the module contract").

use super::connector::{read_sockaddr, write_sockaddr};
use super::{dispatch_table, request};
use crate::ndk::connect::listener::Listener;
use crate::ndk::object::ObjRef;
use crate::ndkpi::*;

/// NdkListen: completes inline (no device command).
///
/// # Safety
/// See the module contract.
unsafe extern "system" fn listen(
    pNdkListener: *mut NDK_LISTENER,
    pAddress: *const SOCKADDR,
    AddressLength: ULONG,
    RequestCompletion: NDK_FN_REQUEST_COMPLETION,
    RequestContext: PVOID,
) -> NTSTATUS {
    // SAFETY: module contract.
    let Some(l) = (unsafe { ObjRef::<Listener>::borrow(pNdkListener) }) else {
        return STATUS_INVALID_PARAMETER;
    };
    // SAFETY: module contract: the address is valid for its length.
    let addr = match unsafe { read_sockaddr(pAddress, AddressLength) } {
        Ok(a) => a,
        Err(e) => return e.to_ntstatus(),
    };
    request(RequestCompletion, RequestContext, |h| {
        h.complete(l.listen(addr));
        Ok(())
    })
}

/// # Safety
/// See the module contract.
unsafe extern "system" fn listener_address(
    pNdkListener: *mut NDK_LISTENER,
    pAddress: *mut SOCKADDR,
    pAddressLength: *mut ULONG,
) -> NTSTATUS {
    // SAFETY: module contract.
    let Some(l) = (unsafe { ObjRef::<Listener>::borrow(pNdkListener) }) else {
        return STATUS_INVALID_PARAMETER;
    };
    match l.local_address() {
        // SAFETY: module contract.
        Some(a) => unsafe { write_sockaddr(a, pAddress, pAddressLength) },
        None => STATUS_INVALID_DEVICE_STATE,
    }
}

/// # Safety
/// See the module contract.
unsafe extern "system" fn control_connect_events(pNdkListener: *mut NDK_LISTENER, Pause: BOOLEAN) {
    // SAFETY: module contract.
    if let Some(l) = unsafe { ObjRef::<Listener>::borrow(pNdkListener) } {
        l.pause(Pause != 0);
    }
}

dispatch_table!(LISTENER_DISPATCH: NDK_LISTENER_DISPATCH, NdkCloseListener: Listener {
    NdkListen: listen,
    NdkGetLocalAddress: listener_address,
    NdkControlConnectEvents: control_connect_events,
});
