//! `NDK_PD_DISPATCH`: the creates under a PD. Every thunk follows the shared `# Safety`
//! contract of [`super`] ("the module contract").

use super::{create_async, create_inline, dispatch_table, optional, status};
use crate::ndk::cq::Cq;
use crate::ndk::mr::Mr;
use crate::ndk::mw::Mw;
use crate::ndk::object::ObjRef;
use crate::ndk::pd::Pd;
use crate::ndk::qp::{Qp, QpParams};
use crate::ndk::srq::{Srq, SrqParams};
use crate::ndkpi::*;

/// # Safety
/// See the module contract.
unsafe extern "system" fn create_mr(
    pNdkPd: *mut NDK_PD,
    FastRegister: BOOLEAN,
    _CreateCompletion: NDK_FN_CREATE_COMPLETION,
    _RequestContext: PVOID,
    ppNdkMr: *mut *mut NDK_MR,
) -> NTSTATUS {
    // SAFETY: module contract.
    let Some(pd) = (unsafe { ObjRef::<Pd>::borrow(pNdkPd) }) else {
        return STATUS_INVALID_PARAMETER;
    };
    // SAFETY: module contract.
    unsafe { create_inline(ppNdkMr, || Mr::create(&pd, FastRegister != 0)) }
}

/// # Safety
/// See the module contract (nothing is dereferenced).
unsafe extern "system" fn create_mw(
    _pNdkPd: *mut NDK_PD,
    _CreateCompletion: NDK_FN_CREATE_COMPLETION,
    _RequestContext: PVOID,
    _ppNdkMw: *mut *mut NDK_MW,
) -> NTSTATUS {
    status(Mw::create())
}

/// # Safety
/// See the module contract.
unsafe extern "system" fn create_srq(
    pNdkPd: *mut NDK_PD,
    SrqDepth: ULONG,
    MaxReceiveRequestSge: ULONG,
    NotifyThreshold: ULONG,
    SrqNotification: Option<NDK_FN_SRQ_NOTIFICATION_CALLBACK>,
    SrqNotificationContext: PVOID,
    Affinity: *mut GROUP_AFFINITY,
    CreateCompletion: NDK_FN_CREATE_COMPLETION,
    RequestContext: PVOID,
    ppNdkSrq: *mut *mut NDK_SRQ,
) -> NTSTATUS {
    // SAFETY: module contract.
    let Some(pd) = (unsafe { ObjRef::<Pd>::borrow(pNdkPd) }) else {
        return STATUS_INVALID_PARAMETER;
    };
    let params = SrqParams {
        depth: SrqDepth,
        max_sge: MaxReceiveRequestSge,
        threshold: NotifyThreshold,
        notify: SrqNotification,
        notify_context: SrqNotificationContext as usize,
        // SAFETY: optional input, valid by contract.
        affinity: unsafe { optional(Affinity) },
    };
    // SAFETY: module contract.
    unsafe {
        create_async(ppNdkSrq, CreateCompletion, RequestContext, |h| {
            Srq::create_async(&pd, params, h)
        })
    }
}

/// The queue sizes of a QP create (an SRQ QP has no receive queue of its own: 0s).
struct QpSizes {
    receive_depth: ULONG,
    initiator_depth: ULONG,
    max_receive_sge: ULONG,
    max_initiator_sge: ULONG,
    inline_data: ULONG,
}

/// What both QP creates do once their arguments are gathered.
///
/// # Safety
/// See the module contract.
#[allow(clippy::too_many_arguments)]
unsafe fn create_qp_common(
    pNdkPd: *mut NDK_PD,
    pReceiveCq: *mut NDK_CQ,
    pInitiatorCq: *mut NDK_CQ,
    pSrq: Option<*mut NDK_SRQ>,
    QPContext: PVOID,
    sizes: QpSizes,
    CreateCompletion: NDK_FN_CREATE_COMPLETION,
    RequestContext: PVOID,
    ppNdkQp: *mut *mut NDK_QP,
) -> NTSTATUS {
    // SAFETY: module contract.
    let Some(pd) = (unsafe { ObjRef::<Pd>::borrow(pNdkPd) }) else {
        return STATUS_INVALID_PARAMETER;
    };
    // SAFETY: module contract.
    let Some(receive_cq) = (unsafe { ObjRef::<Cq>::borrow(pReceiveCq) }) else {
        return STATUS_INVALID_PARAMETER;
    };
    // SAFETY: module contract.
    let Some(initiator_cq) = (unsafe { ObjRef::<Cq>::borrow(pInitiatorCq) }) else {
        return STATUS_INVALID_PARAMETER;
    };
    let srq = match pSrq {
        None => None,
        // SAFETY: module contract.
        Some(p) => match unsafe { ObjRef::<Srq>::borrow(p) } {
            Some(s) => Some(s),
            None => return STATUS_INVALID_PARAMETER,
        },
    };
    let params = QpParams {
        receive_cq,
        initiator_cq,
        srq,
        context: QPContext as usize,
        receive_depth: sizes.receive_depth,
        initiator_depth: sizes.initiator_depth,
        max_receive_sge: sizes.max_receive_sge,
        max_initiator_sge: sizes.max_initiator_sge,
        inline_data: sizes.inline_data,
    };
    // SAFETY: module contract.
    unsafe {
        create_async(ppNdkQp, CreateCompletion, RequestContext, |h| {
            Qp::create_async(&pd, params, h)
        })
    }
}

/// Declares a QP-create thunk. NDK_FN_CREATE_QP and NDK_FN_CREATE_QP_WITH_SRQ (§2.11) begin
/// alike (the PD, the receive CQ, the initiator CQ) and end alike (the create completion, its
/// context, the out pointer), and both hand their arguments to [`create_qp_common`]; the
/// parameters in between are each one's own, listed in ABI order, and give the SRQ, the QP
/// context and the queue sizes. The table field's type checks the whole signature.
macro_rules! qp_create {
    (
        fn $name:ident($($param:ident: $ty:ty,)+)
        => (srq: $srq:expr, context: $context:expr, sizes: $sizes:expr $(,)?)
    ) => {
        /// # Safety
        /// See the module contract.
        unsafe extern "system" fn $name(
            pNdkPd: *mut NDK_PD,
            pReceiveCq: *mut NDK_CQ,
            pInitiatorCq: *mut NDK_CQ,
            $($param: $ty,)+
            CreateCompletion: NDK_FN_CREATE_COMPLETION,
            RequestContext: PVOID,
            ppNdkQp: *mut *mut NDK_QP,
        ) -> NTSTATUS {
            let (srq, context, sizes) = ($srq, $context, $sizes);
            // SAFETY: forwarded contract.
            unsafe {
                create_qp_common(
                    pNdkPd,
                    pReceiveCq,
                    pInitiatorCq,
                    srq,
                    context,
                    sizes,
                    CreateCompletion,
                    RequestContext,
                    ppNdkQp,
                )
            }
        }
    };
}

qp_create! {
    fn create_qp(
        QPContext: PVOID,
        ReceiveQueueDepth: ULONG,
        InitiatorQueueDepth: ULONG,
        MaxReceiveRequestSge: ULONG,
        MaxInitiatorRequestSge: ULONG,
        InlineDataSize: ULONG,
    ) => (
        srq: None,
        context: QPContext,
        sizes: QpSizes {
            receive_depth: ReceiveQueueDepth,
            initiator_depth: InitiatorQueueDepth,
            max_receive_sge: MaxReceiveRequestSge,
            max_initiator_sge: MaxInitiatorRequestSge,
            inline_data: InlineDataSize,
        },
    )
}

qp_create! {
    fn create_qp_with_srq(
        pSrq: *mut NDK_SRQ,
        QPContext: PVOID,
        InitiatorQueueDepth: ULONG,
        MaxInitiatorRequestSge: ULONG,
        InlineDataSize: ULONG,
    ) => (
        srq: Some(pSrq),
        context: QPContext,
        sizes: QpSizes {
            receive_depth: 0,
            initiator_depth: InitiatorQueueDepth,
            max_receive_sge: 0,
            max_initiator_sge: MaxInitiatorRequestSge,
            inline_data: InlineDataSize,
        },
    )
}

/// # Safety
/// See the module contract.
unsafe extern "system" fn get_privileged_token(pNdkPd: *mut NDK_PD, pToken: *mut UINT32) {
    // SAFETY: module contract.
    let Some(pd) = (unsafe { ObjRef::<Pd>::borrow(pNdkPd) }) else {
        return;
    };
    if !pToken.is_null() {
        // SAFETY: non-null out parameter, valid by contract.
        unsafe { pToken.write(pd.privileged_token()) };
    }
}

dispatch_table!(PD_DISPATCH: NDK_PD_DISPATCH, NdkClosePd: Pd {
    NdkCreateMr: create_mr,
    NdkCreateMw: create_mw,
    NdkCreateSrq: create_srq,
    NdkCreateQp: create_qp,
    NdkCreateQpWithSrq: create_qp_with_srq,
    NdkGetPrivilegedMemoryRegionToken: get_privileged_token,
});
