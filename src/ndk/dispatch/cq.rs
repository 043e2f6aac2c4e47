//! `NDK_CQ_DISPATCH`: arming and polling (two of the hot thunks). Every thunk follows the
//! shared `# Safety` contract of [`super`] ("the module contract").

use core::mem::MaybeUninit;

use super::dispatch_table;
use crate::ndk::cq::Cq;
use crate::ndk::object::ObjRef;
use crate::ndkpi::*;

/// NdkResizeCq: CQ_RESIZE_SUPPORTED is not advertised (RESIZE_CQ is unsupported, M11).
///
/// # Safety
/// See the module contract (nothing is dereferenced).
unsafe extern "system" fn resize_cq(
    _pNdkCq: *mut NDK_CQ,
    _CqDepth: ULONG,
    _RequestCompletion: NDK_FN_REQUEST_COMPLETION,
    _RequestContext: PVOID,
) -> NTSTATUS {
    STATUS_NOT_SUPPORTED
}

/// # Safety
/// See the module contract.
unsafe extern "system" fn arm_cq(pNdkCq: *mut NDK_CQ, Type: ULONG) {
    // SAFETY: module contract.
    if let Some(cq) = unsafe { ObjRef::<Cq>::borrow(pNdkCq) } {
        cq.arm(Type);
    }
}

/// The consumer's result array, for [`Cq::get_results`] and [`Cq::get_results_ex`]: memory
/// the consumer need not have initialized, so entries are `MaybeUninit` and only written.
///
/// # Safety
/// `p` is null or valid for writes of `n` entries for the call.
#[inline(always)]
unsafe fn results<'a, R>(p: *mut R, n: ULONG) -> Option<&'a mut [MaybeUninit<R>]> {
    if p.is_null() || n == 0 {
        return None;
    }
    // CAST: `MaybeUninit<R>` has `R`'s layout.
    // SAFETY: non-null, valid for writes of `n` entries by contract; as `MaybeUninit` no
    // entry is assumed initialized, and the provider only writes whole entries.
    Some(unsafe { core::slice::from_raw_parts_mut(p.cast::<MaybeUninit<R>>(), n as usize) })
}

/// # Safety
/// See the module contract.
unsafe extern "system" fn get_cq_results(
    pNdkCq: *mut NDK_CQ,
    pResults: *mut NDK_RESULT,
    nResults: ULONG,
) -> ULONG {
    // SAFETY: module contract; a poll starts no callback.
    let Some(cq) = (unsafe { ObjRef::<Cq>::peek(pNdkCq) }) else {
        return 0;
    };
    // SAFETY: module contract.
    match unsafe { results(pResults, nResults) } {
        Some(out) => cq.get_results(out) as ULONG,
        None => 0,
    }
}

/// NdkControlCqInterruptModeration: the flag is not advertised (no device control).
///
/// # Safety
/// See the module contract (nothing is dereferenced).
unsafe extern "system" fn control_cq_moderation(
    _pNdkCq: *mut NDK_CQ,
    _ModerationInterval: ULONG,
    _ModerationCount: ULONG,
) -> NTSTATUS {
    STATUS_NOT_SUPPORTED
}

/// # Safety
/// See the module contract.
unsafe extern "system" fn get_cq_results_ex(
    pNdkCq: *mut NDK_CQ,
    pResults: *mut NDK_RESULT_EX,
    nResults: ULONG,
) -> ULONG {
    // SAFETY: module contract; a poll starts no callback.
    let Some(cq) = (unsafe { ObjRef::<Cq>::peek(pNdkCq) }) else {
        return 0;
    };
    // SAFETY: module contract.
    match unsafe { results(pResults, nResults) } {
        Some(out) => cq.get_results_ex(out) as ULONG,
        None => 0,
    }
}

dispatch_table!(CQ_DISPATCH: NDK_CQ_DISPATCH, NdkCloseCq: Cq {
    NdkResizeCq: resize_cq,
    NdkArmCq: arm_cq,
    NdkGetCqResults: get_cq_results,
    NdkControlCqInterruptModeration: control_cq_moderation,
    NdkGetCqResultsEx: get_cq_results_ex,
});
