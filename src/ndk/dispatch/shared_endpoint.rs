//! `NDK_SHARED_ENDPOINT_DISPATCH`. No shared endpoint can be created yet (connection
//! management is a later issue); the slots exist and answer STATUS_NOT_IMPLEMENTED.

use super::{dispatch_table, not_implemented};
use crate::ndk::shared_endpoint::SharedEndpoint;
use crate::ndkpi::*;

not_implemented! {
    fn shared_endpoint_address(_s: *mut NDK_SHARED_ENDPOINT, _a: *mut SOCKADDR, _len: *mut ULONG);
}

dispatch_table!(
    SHARED_ENDPOINT_DISPATCH: NDK_SHARED_ENDPOINT_DISPATCH,
    NdkCloseSharedEndpoint: SharedEndpoint {
        NdkGetLocalAddress: shared_endpoint_address,
    }
);
