//! `NDK_QP_DISPATCH`: the work-request posts (the hot thunks `send`, `receive`, `read`,
//! `fast_register`). Every thunk follows the shared `# Safety` contract of [`super`] ("the
//! module contract").

use super::{dispatch_table, sgl, status};
use crate::ndk::consumer_array::ConsumerArray;
use crate::ndk::error::{NdkError, NdkResult};
use crate::ndk::mr::Mr;
use crate::ndk::object::ObjRef;
use crate::ndk::qp::Qp;
use crate::ndkpi::*;
use crate::pvrdma::wqe::Sge;

/// Posts an initiator request over the consumer's SGL. A bad SGL fails through
/// `fail_initiator` too: that path must also indicate deferred requests (§5.5).
///
/// # Safety
/// See the module contract (`pSgl` holds `nSge` entries).
#[inline(always)]
unsafe fn initiator_post(
    qp: &Qp,
    pSgl: *const NDK_SGE,
    nSge: ULONG,
    post: impl FnOnce(ConsumerArray<'_, Sge>) -> NdkResult<()>,
) -> NTSTATUS {
    // SAFETY: module contract.
    match unsafe { sgl(pSgl, nSge) } {
        Ok(s) => status(post(s)),
        Err(e) => status(qp.fail_initiator(e)),
    }
}

/// # Safety
/// See the module contract.
unsafe extern "system" fn flush(pNdkQp: *mut NDK_QP) {
    // SAFETY: module contract.
    if let Some(qp) = unsafe { ObjRef::<Qp>::borrow(pNdkQp) } {
        qp.flush();
    }
}

/// # Safety
/// See the module contract.
unsafe extern "system" fn send(
    pNdkQp: *mut NDK_QP,
    RequestContext: PVOID,
    pSgl: *const NDK_SGE,
    nSge: ULONG,
    Flags: ULONG,
) -> NTSTATUS {
    // SAFETY: module contract; a post starts no callback.
    let Some(qp) = (unsafe { ObjRef::<Qp>::peek(pNdkQp) }) else {
        return STATUS_INVALID_PARAMETER;
    };
    // SAFETY: module contract.
    unsafe {
        initiator_post(qp, pSgl, nSge, |s| {
            qp.send(RequestContext as usize, s, Flags, None)
        })
    }
}

/// # Safety
/// See the module contract.
unsafe extern "system" fn receive(
    pNdkQp: *mut NDK_QP,
    RequestContext: PVOID,
    pSgl: *const NDK_SGE,
    nSge: ULONG,
) -> NTSTATUS {
    // SAFETY: module contract; a post starts no callback.
    let Some(qp) = (unsafe { ObjRef::<Qp>::peek(pNdkQp) }) else {
        return STATUS_INVALID_PARAMETER;
    };
    // SAFETY: module contract.
    let r = unsafe { sgl(pSgl, nSge) }.and_then(|s| qp.receive(RequestContext as usize, s));
    status(r)
}

/// # Safety
/// See the module contract (only the QP is dereferenced).
unsafe extern "system" fn bind(
    pNdkQp: *mut NDK_QP,
    _RequestContext: PVOID,
    _pMr: *mut NDK_MR,
    _pMw: *mut NDK_MW,
    _VirtualAddress: PVOID,
    _Length: SIZE_T,
    _Flags: ULONG,
) -> NTSTATUS {
    // SAFETY: module contract.
    let Some(qp) = (unsafe { ObjRef::<Qp>::borrow(pNdkQp) }) else {
        return STATUS_INVALID_PARAMETER;
    };
    status(qp.bind())
}

/// # Safety
/// See the module contract.
unsafe extern "system" fn fast_register(
    pNdkQp: *mut NDK_QP,
    RequestContext: PVOID,
    pMr: *mut NDK_MR,
    AdapterPageCount: ULONG,
    AdapterPageArray: *const NDK_LOGICAL_ADDRESS,
    FBO: ULONG,
    Length: SIZE_T,
    BaseVirtualAddress: PVOID,
    Flags: ULONG,
) -> NTSTATUS {
    // SAFETY: module contract.
    let Some(qp) = (unsafe { ObjRef::<Qp>::borrow(pNdkQp) }) else {
        return STATUS_INVALID_PARAMETER;
    };
    // SAFETY: module contract.
    let mr = unsafe { ObjRef::<Mr>::borrow(pMr) };
    // SAFETY: the module contract for `AdapterPageCount` entries; the QP checks the count
    // against the MR's capacity before it forms a slice.
    let pages = unsafe { ConsumerArray::new(AdapterPageArray, AdapterPageCount as usize) };
    let (Some(mr), Some(pages), false) = (mr, pages, AdapterPageCount == 0) else {
        return status(qp.fail_initiator(NdkError::InvalidParameter));
    };
    status(qp.fast_register(
        RequestContext as usize,
        &mr,
        pages,
        FBO,
        Length,
        BaseVirtualAddress as u64,
        Flags,
    ))
}

/// # Safety
/// See the module contract; `pNdkMrOrMw` is the header of an MR or MW of this provider.
unsafe extern "system" fn invalidate(
    pNdkQp: *mut NDK_QP,
    RequestContext: PVOID,
    pNdkMrOrMw: *mut NDK_OBJECT_HEADER,
    Flags: ULONG,
) -> NTSTATUS {
    // SAFETY: module contract.
    let Some(qp) = (unsafe { ObjRef::<Qp>::borrow(pNdkQp) }) else {
        return STATUS_INVALID_PARAMETER;
    };
    if pNdkMrOrMw.is_null() {
        return status(qp.fail_initiator(NdkError::InvalidParameter));
    }
    // Only `ObjectType` is read, through a raw pointer: the consumer owns `NdkReserved` and
    // may write it concurrently, so no reference to the whole header is formed.
    let ty_ptr = pNdkMrOrMw
        .cast::<u8>()
        .wrapping_add(core::mem::offset_of!(NDK_OBJECT_HEADER, ObjectType))
        .cast::<NDK_OBJECT_TYPE>();
    // SAFETY: a live object header of this provider (contract); `ObjectType` is written only
    // by the provider, at creation.
    let ty = unsafe { ty_ptr.read() };
    if ty != NdkObjectTypeMr {
        // No MW can exist (NdkCreateMw is not supported); anything else is not a target.
        return status(qp.fail_initiator(NdkError::InvalidParameter));
    }
    // SAFETY: the header belongs to an MR (checked type), so it is an NDK_MR of this provider.
    let Some(mr) = (unsafe { ObjRef::<Mr>::borrow(pNdkMrOrMw.cast()) }) else {
        return STATUS_INVALID_PARAMETER;
    };
    status(qp.invalidate(RequestContext as usize, &mr, Flags))
}

/// # Safety
/// See the module contract.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn rdma<const READ: bool>(
    pNdkQp: *mut NDK_QP,
    RequestContext: PVOID,
    pSgl: *const NDK_SGE,
    nSge: ULONG,
    RemoteAddress: UINT64,
    RemoteToken: UINT32,
    Flags: ULONG,
) -> NTSTATUS {
    // SAFETY: module contract; a post starts no callback.
    let Some(qp) = (unsafe { ObjRef::<Qp>::peek(pNdkQp) }) else {
        return STATUS_INVALID_PARAMETER;
    };
    if nSge != 1 {
        // SAFETY: forwarded contract; the same arguments, so this is a jump.
        return unsafe {
            rdma_any::<READ>(
                pNdkQp,
                RequestContext,
                pSgl,
                nSge,
                RemoteAddress,
                RemoteToken,
                Flags,
            )
        };
    }
    // The common single-SGE request is compiled with its length known: no loops. A null
    // SGL fails here as `rdma_any` would fail it (its own branch target: two tests and
    // jumps, where one shared target costs two flag materializations more).
    // SAFETY: module contract (`pSgl` holds one entry).
    match unsafe { sgl(pSgl, 1) } {
        Ok(s) => status(qp.rdma(
            READ,
            RequestContext as usize,
            s,
            RemoteAddress,
            RemoteToken,
            Flags,
        )),
        Err(e) => status(qp.fail_initiator(e)),
    }
}

/// [`rdma`] for any SGE count, out of line.
///
/// # Safety
/// See the module contract.
#[allow(clippy::too_many_arguments)]
#[inline(never)]
unsafe extern "system" fn rdma_any<const READ: bool>(
    pNdkQp: *mut NDK_QP,
    RequestContext: PVOID,
    pSgl: *const NDK_SGE,
    nSge: ULONG,
    RemoteAddress: UINT64,
    RemoteToken: UINT32,
    Flags: ULONG,
) -> NTSTATUS {
    // SAFETY: module contract; a post starts no callback.
    let Some(qp) = (unsafe { ObjRef::<Qp>::peek(pNdkQp) }) else {
        return STATUS_INVALID_PARAMETER;
    };
    // SAFETY: module contract.
    match unsafe { sgl(pSgl, nSge) } {
        Ok(s) => status(qp.rdma(
            READ,
            RequestContext as usize,
            s,
            RemoteAddress,
            RemoteToken,
            Flags,
        )),
        Err(e) => status(qp.fail_initiator(e)),
    }
}

/// # Safety
/// See the module contract.
unsafe extern "system" fn read(
    pNdkQp: *mut NDK_QP,
    RequestContext: PVOID,
    pSgl: *const NDK_SGE,
    nSge: ULONG,
    RemoteAddress: UINT64,
    RemoteToken: UINT32,
    Flags: ULONG,
) -> NTSTATUS {
    // SAFETY: forwarded contract.
    unsafe {
        rdma::<true>(
            pNdkQp,
            RequestContext,
            pSgl,
            nSge,
            RemoteAddress,
            RemoteToken,
            Flags,
        )
    }
}

/// # Safety
/// See the module contract.
unsafe extern "system" fn write(
    pNdkQp: *mut NDK_QP,
    RequestContext: PVOID,
    pSgl: *const NDK_SGE,
    nSge: ULONG,
    RemoteAddress: UINT64,
    RemoteToken: UINT32,
    Flags: ULONG,
) -> NTSTATUS {
    // SAFETY: forwarded contract.
    unsafe {
        rdma::<false>(
            pNdkQp,
            RequestContext,
            pSgl,
            nSge,
            RemoteAddress,
            RemoteToken,
            Flags,
        )
    }
}

/// # Safety
/// See the module contract.
unsafe extern "system" fn send_and_invalidate(
    pNdkQp: *mut NDK_QP,
    RequestContext: PVOID,
    pSgl: *const NDK_SGE,
    nSge: ULONG,
    Flags: ULONG,
    RemoteToken: UINT32,
) -> NTSTATUS {
    // SAFETY: module contract; a post starts no callback.
    let Some(qp) = (unsafe { ObjRef::<Qp>::peek(pNdkQp) }) else {
        return STATUS_INVALID_PARAMETER;
    };
    // SAFETY: module contract.
    unsafe {
        initiator_post(qp, pSgl, nSge, |s| {
            qp.send(RequestContext as usize, s, Flags, Some(RemoteToken))
        })
    }
}

dispatch_table!(QP_DISPATCH: NDK_QP_DISPATCH, NdkCloseQp: Qp {
    NdkFlush: flush,
    NdkSend: send,
    NdkReceive: receive,
    NdkBind: bind,
    NdkFastRegister: fast_register,
    NdkInvalidate: invalidate,
    NdkRead: read,
    NdkWrite: write,
    NdkSendAndInvalidate: send_and_invalidate,
});
