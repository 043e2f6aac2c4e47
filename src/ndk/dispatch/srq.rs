//! `NDK_SRQ_DISPATCH`. Every thunk follows the shared `# Safety` contract of [`super`] ("the
//! module contract").

use super::{dispatch_table, request, sgl, status};
use crate::ndk::object::ObjRef;
use crate::ndk::srq::Srq;
use crate::ndkpi::*;

/// # Safety
/// See the module contract.
unsafe extern "system" fn modify_srq(
    pNdkSrq: *mut NDK_SRQ,
    SrqDepth: ULONG,
    NotifyThreshold: ULONG,
    RequestCompletion: NDK_FN_REQUEST_COMPLETION,
    RequestContext: PVOID,
) -> NTSTATUS {
    // SAFETY: module contract.
    let Some(srq) = (unsafe { ObjRef::<Srq>::borrow(pNdkSrq) }) else {
        return STATUS_INVALID_PARAMETER;
    };
    request(RequestCompletion, RequestContext, |req| {
        srq.modify(SrqDepth, NotifyThreshold, req)
    })
}

/// # Safety
/// See the module contract.
unsafe extern "system" fn srq_receive(
    pNdkSrq: *mut NDK_SRQ,
    RequestContext: PVOID,
    pSgl: *const NDK_SGE,
    nSge: ULONG,
) -> NTSTATUS {
    // SAFETY: module contract; a post starts no callback.
    let Some(srq) = (unsafe { ObjRef::<Srq>::peek(pNdkSrq) }) else {
        return STATUS_INVALID_PARAMETER;
    };
    // SAFETY: module contract.
    let r = unsafe { sgl(pSgl, nSge) }.and_then(|s| srq.receive(RequestContext as usize, s));
    status(r)
}

dispatch_table!(SRQ_DISPATCH: NDK_SRQ_DISPATCH, NdkCloseSrq: Srq {
    NdkModifySrq: modify_srq,
    NdkSrqReceive: srq_receive,
});
