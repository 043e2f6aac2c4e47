//! `NDK_SHARED_ENDPOINT_DISPATCH`. Every thunk follows the shared `# Safety` contract of
//! [`super`] ("the module contract").

use super::connector::write_sockaddr;
use super::dispatch_table;
use crate::ndk::connect::shared_endpoint::SharedEndpoint;
use crate::ndk::object::ObjRef;
use crate::ndkpi::*;

/// # Safety
/// See the module contract.
unsafe extern "system" fn shared_endpoint_address(
    pNdkSharedEndpoint: *mut NDK_SHARED_ENDPOINT,
    pAddress: *mut SOCKADDR,
    pAddressLength: *mut ULONG,
) -> NTSTATUS {
    // SAFETY: module contract.
    let Some(s) = (unsafe { ObjRef::<SharedEndpoint>::borrow(pNdkSharedEndpoint) }) else {
        return STATUS_INVALID_PARAMETER;
    };
    // SAFETY: module contract.
    unsafe { write_sockaddr(s.local_address(), pAddress, pAddressLength) }
}

dispatch_table!(
    SHARED_ENDPOINT_DISPATCH: NDK_SHARED_ENDPOINT_DISPATCH,
    NdkCloseSharedEndpoint: SharedEndpoint {
        NdkGetLocalAddress: shared_endpoint_address,
    }
);
