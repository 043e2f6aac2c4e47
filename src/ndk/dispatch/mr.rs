//! `NDK_MR_DISPATCH`. Every thunk follows the shared `# Safety` contract of [`super`] ("the
//! module contract").

use super::{dispatch_table, request, status};
use crate::ndk::mr::Mr;
use crate::ndk::object::ObjRef;
use crate::ndkpi::*;
use crate::os::mdl::MdlChain;

/// NdkRegisterMr: [`Mr::register`] walks the MDL chain.
///
/// # Safety
/// See the module contract.
unsafe extern "system" fn register_mr(
    pNdkMr: *mut NDK_MR,
    Mdl: *mut MDL,
    Length: SIZE_T,
    Flags: ULONG,
    RequestCompletion: NDK_FN_REQUEST_COMPLETION,
    RequestContext: PVOID,
) -> NTSTATUS {
    // SAFETY: module contract.
    let Some(mr) = (unsafe { ObjRef::<Mr>::borrow(pNdkMr) }) else {
        return STATUS_INVALID_PARAMETER;
    };
    // SAFETY: module contract: a valid, locked MDL chain with PFN arrays, which the
    // consumer leaves alone while the request is pending (§5.7); `register` reads it only
    // before it returns.
    let Some(mdl) = (unsafe { MdlChain::from_ptr(Mdl) }) else {
        return STATUS_INVALID_PARAMETER;
    };
    request(RequestCompletion, RequestContext, |req| {
        mr.register(mdl, Length, Flags, req)
    })
}

/// # Safety
/// See the module contract.
unsafe extern "system" fn deregister_mr(
    pNdkMr: *mut NDK_MR,
    _RequestCompletion: NDK_FN_REQUEST_COMPLETION,
    _RequestContext: PVOID,
) -> NTSTATUS {
    // SAFETY: module contract.
    let Some(mr) = (unsafe { ObjRef::<Mr>::borrow(pNdkMr) }) else {
        return STATUS_INVALID_PARAMETER;
    };
    status(mr.deregister())
}

/// # Safety
/// See the module contract.
unsafe extern "system" fn initialize_fast_register_mr(
    pNdkMr: *mut NDK_MR,
    AdapterPageCount: ULONG,
    RemoteAccess: BOOLEAN,
    RequestCompletion: NDK_FN_REQUEST_COMPLETION,
    RequestContext: PVOID,
) -> NTSTATUS {
    // SAFETY: module contract.
    let Some(mr) = (unsafe { ObjRef::<Mr>::borrow(pNdkMr) }) else {
        return STATUS_INVALID_PARAMETER;
    };
    request(RequestCompletion, RequestContext, |req| {
        mr.initialize_fast_register(AdapterPageCount, RemoteAccess != 0, req)
    })
}

/// # Safety
/// See the module contract.
unsafe extern "system" fn get_remote_token_from_mr(pNdkMr: *mut NDK_MR) -> UINT32 {
    // SAFETY: module contract.
    unsafe { ObjRef::<Mr>::borrow(pNdkMr) }.map_or(0, |mr| mr.remote_token())
}

/// # Safety
/// See the module contract.
unsafe extern "system" fn get_local_token_from_mr(pNdkMr: *mut NDK_MR) -> UINT32 {
    // SAFETY: module contract.
    unsafe { ObjRef::<Mr>::borrow(pNdkMr) }.map_or(0, |mr| mr.local_token())
}

dispatch_table!(MR_DISPATCH: NDK_MR_DISPATCH, NdkCloseMr: Mr {
    NdkRegisterMr: register_mr,
    NdkDeregisterMr: deregister_mr,
    NdkInitializeFastRegisterMr: initialize_fast_register_mr,
    NdkGetRemoteTokenFromMr: get_remote_token_from_mr,
    NdkGetLocalTokenFromMr: get_local_token_from_mr,
});
