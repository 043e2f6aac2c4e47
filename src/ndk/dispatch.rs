//! The ten NDK dispatch tables and every `unsafe extern "system"` entry point behind them
//! (ndkpi.md §2; style.md §3: safe object traits, C-ABI thunks and tables built in one place,
//! like block/mq `OperationsVTable`).
//!
//! Each thunk: recovers the provider object from the object pointer (the `NDK_xxx` is at
//! offset 0 of the provider object, so no `Dispatch` read, §1.5) and takes its own counted
//! handle for the duration of the call (§5.1); turns consumer pointers into references or
//! slices after checking them for null; calls the safe object code; maps the result to
//! NTSTATUS once ([`NdkError::to_ntstatus`]). Consumer callbacks are invoked only through the
//! `call_*` helpers at the end of this file.
//!
//! Creates and requests complete inline (STATUS_SUCCESS or an inline failure, never a
//! callback) until the hardware layer's asynchronous command channel is bound.
//!
//! Shared `# Safety` contract of every thunk (the NDK consumer's side of §2.11 and §5.2): the
//! object pointer is one this provider returned, of the table's type, and its close has not
//! been issued (except by a completion callback of a call still running); every other
//! pointer is null only where NDKPI marks it optional and otherwise valid for the access the
//! parameter's annotation states, for the duration of the call.

#![allow(non_snake_case)]

use core::ffi::c_void;

use super::adapter::{Adapter, adapter_info_bytes};
use super::connector::Connector;
use super::cq::{Cq, CqParams};
use super::error::{NdkError, NdkResult};
use super::hw::Hardware;
use super::listener::Listener;
use super::mr::{MdlSpan, Mr};
use super::mw::Mw;
use super::object::{CreateHandoff, NdkObject, ObjRef, RequestHandoff};
use super::pd::Pd;
use super::qp::{Qp, QpParams};
use super::shared_endpoint::SharedEndpoint;
use super::srq::{Srq, SrqParams};
use crate::ndkpi::*;
use crate::pvrdma::wqe::Sge;

#[inline(always)]
fn status(r: NdkResult<()>) -> NTSTATUS {
    match r {
        Ok(()) => STATUS_SUCCESS,
        Err(e) => e.to_ntstatus(),
    }
}

/// Writes a created object to the consumer's out pointer.
///
/// # Safety
/// `pp` is null or valid for a pointer write.
unsafe fn publish<T: NdkObject>(r: NdkResult<ObjRef<T>>, pp: *mut *mut T::Ndk) -> NTSTATUS {
    match r {
        Ok(obj) => {
            // SAFETY: checked non-null by every caller before creating; valid by contract.
            unsafe { pp.write(obj.publish()) };
            STATUS_SUCCESS
        }
        Err(e) => e.to_ntstatus(),
    }
}

// NDK_SGE and `pvrdma_sge` are the same 16 bytes: address @0 (the VirtualAddress /
// LogicalAddress union, 64 bits either way), length @8, token @12. A consumer's SGE array is
// therefore handed to the rings as it is.
const _: () = {
    assert!(core::mem::size_of::<NDK_SGE>() == core::mem::size_of::<Sge>());
    assert!(core::mem::align_of::<NDK_SGE>() >= core::mem::align_of::<Sge>());
    assert!(core::mem::offset_of!(NDK_SGE, Length) == core::mem::offset_of!(Sge, length));
    assert!(core::mem::offset_of!(NDK_SGE, MemoryRegionToken) == core::mem::offset_of!(Sge, lkey));
    assert!(core::mem::offset_of!(Sge, addr) == 0);
};

/// The consumer's SGE array, as the rings' SGE type (same layout, asserted above).
///
/// # Safety
/// `p` is null only if `n` is 0, else valid for reads of `n` entries for the call.
#[inline(always)]
unsafe fn sgl<'a>(p: *const NDK_SGE, n: ULONG) -> NdkResult<&'a [Sge]> {
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(NdkError::InvalidParameter);
    }
    // CAST: identical layout (asserted); every bit pattern is a valid `Sge`.
    // SAFETY: non-null, and valid for `n` elements by the caller's contract.
    Ok(unsafe { core::slice::from_raw_parts(p.cast::<Sge>(), n as usize) })
}

/// An SGE's address: the `VirtualAddress`/`LogicalAddress` union as 64 bits (§3.1).
pub fn sge_address(s: &NDK_SGE) -> u64 {
    // SAFETY: both union members are 8-byte plain values at offset 0 for which every bit
    // pattern is valid, so reading either is defined.
    let v = unsafe { s.Anonymous.LogicalAddress };
    v as u64
}

/// Walks an MDL chain from `mdl` and measures how far it is virtually contiguous, stopping
/// once `length` bytes are covered (§5.7: RegisterMr and BuildLam require contiguity).
///
/// # Safety
/// `mdl` is non-null and heads a valid MDL chain for the call.
unsafe fn mdl_span(mdl: *const MDL, length: usize) -> MdlSpan {
    // SAFETY: caller contract.
    let first = unsafe { &*mdl };
    let va = MmGetMdlVirtualAddress(first) as u64;
    let mut covered = u64::from(MmGetMdlByteCount(first));
    let mut next = first.Next;
    let mut end = va.saturating_add(covered);
    while covered < length as u64 && !next.is_null() {
        // SAFETY: a non-null `Next` of a valid chain is a valid MDL.
        let m = unsafe { &*next };
        if MmGetMdlVirtualAddress(m) as u64 != end {
            break;
        }
        let n = u64::from(MmGetMdlByteCount(m));
        covered = covered.saturating_add(n);
        end = end.saturating_add(n);
        next = m.Next;
    }
    MdlSpan {
        va,
        contiguous: covered,
    }
}

/// Fills `out[i]` with the adapter logical address of page `i` of the region that starts at
/// `first.va` (pages counted from the page holding it), from the PFN arrays of the MDL chain.
/// Pages an MDL shares with its predecessor (a chain link in mid-page) land on the same
/// index.
///
/// # Errors
/// STATUS_INVALID_PARAMETER if a PFN has no logical address or a page is left unfilled.
///
/// # Safety
/// `mdl` is non-null and heads a valid chain of MDLs, each followed by its PFN array (locked
/// pages, §5.7), for the call.
unsafe fn mdl_pages(
    mdl: *const MDL,
    region_va: u64,
    hw: &dyn Hardware,
    out: &mut [u64],
) -> NdkResult<()> {
    let first_page = region_va & !(PAGE_SIZE as u64 - 1);
    let mut filled = 0usize;
    let mut m = mdl;
    while !m.is_null() && filled < out.len() {
        // SAFETY: caller contract: every link of the chain is a valid MDL.
        let cur = unsafe { &*m };
        let base = (MmGetMdlVirtualAddress(cur) as u64) & !(PAGE_SIZE as u64 - 1);
        let pfns = MmGetMdlPfnArray(cur);
        for k in 0..mdl_page_count(cur) as usize {
            let page_va = base.wrapping_add((k as u64) << PAGE_SHIFT);
            let Some(idx) = page_va
                .checked_sub(first_page)
                .map(|d| (d >> PAGE_SHIFT) as usize)
            else {
                continue;
            };
            let Some(slot) = out.get_mut(idx) else {
                break;
            };
            // SAFETY: the PFN array of `cur` holds `mdl_page_count(cur)` entries (contract).
            let pfn = unsafe { pfns.wrapping_add(k).read() };
            *slot = hw
                .page_address(pfn as u64)
                .ok_or(NdkError::InvalidParameter)?;
            filled = filled.max(idx + 1);
        }
        m = cur.Next;
    }
    if filled < out.len() {
        return Err(NdkError::InvalidParameter);
    }
    Ok(())
}

/// The page list of `length` bytes from the start of the MDL chain (RegisterMr; allocates,
/// so only on the registration path).
///
/// # Safety
/// As [`mdl_pages`].
unsafe fn mdl_page_list(
    mdl: *const MDL,
    span: &MdlSpan,
    length: usize,
    hw: &dyn Hardware,
) -> NdkResult<alloc::vec::Vec<u64>> {
    let n = super::mr::span_pages(span.va, length as u64)
        .and_then(|n| usize::try_from(n).ok())
        .ok_or(NdkError::InvalidParameter)?;
    let mut v = alloc::vec::Vec::new();
    v.try_reserve_exact(n)
        .map_err(|_| NdkError::InsufficientResources)?;
    v.resize(n, 0);
    // SAFETY: forwarded contract.
    unsafe { mdl_pages(mdl, span.va, hw, &mut v) }?;
    Ok(v)
}

// ---------------------------------------------------------------- common slots

/// NDK_FN_CLOSE_OBJECT for every object type but the adapter.
///
/// # Safety
/// See the module contract; `pNdkObject` is the header of a `T` object.
unsafe extern "system" fn close_object<T: NdkObject>(
    pNdkObject: *mut NDK_OBJECT_HEADER,
    CloseCompletion: NDK_FN_CLOSE_COMPLETION,
    RequestContext: PVOID,
) -> NTSTATUS {
    // SAFETY: module contract; the header is at offset 0 of the `T::Ndk`.
    let Some(obj) = (unsafe { ObjRef::<T>::borrow(pNdkObject.cast()) }) else {
        return STATUS_SUCCESS;
    };
    obj.close(Some((CloseCompletion, RequestContext as usize)))
}

/// NDK_FN_QUERY_EXTENSION_INTERFACE: no extension interface exists (§5.13).
///
/// # Safety
/// See the module contract (nothing is dereferenced).
unsafe extern "system" fn query_extension(
    _pNdkObject: *mut NDK_OBJECT_HEADER,
    _ExtensionInterfaceID: *const GUID,
    _ExtensionInterfaceVersion: NDK_VERSION,
    _pExtensionInterface: *mut NDK_EXTENSION_INTERFACE,
) -> NTSTATUS {
    STATUS_NOT_SUPPORTED
}

// ---------------------------------------------------------------- adapter

/// # Safety
/// See the module contract.
unsafe extern "system" fn query_adapter_info(
    pNdkAdapter: *mut NDK_ADAPTER,
    pInfo: *mut NDK_ADAPTER_INFO,
    pBufferSize: *mut ULONG,
) -> NTSTATUS {
    // SAFETY: module contract.
    let Some(a) = (unsafe { ObjRef::<Adapter>::borrow(pNdkAdapter) }) else {
        return STATUS_INVALID_PARAMETER;
    };
    if pBufferSize.is_null() {
        return STATUS_INVALID_PARAMETER;
    }
    // SAFETY: non-null; valid for read and write by contract.
    let size = unsafe { pBufferSize.read() };
    match adapter_info_bytes(!pInfo.is_null(), size) {
        Ok(n) => {
            let info = *a.info();
            // SAFETY: `pInfo` is non-null and valid for `size` ≥ `n` bytes; `n` ≤
            // size_of::<NDK_ADAPTER_INFO>(), so the source is in bounds too.
            unsafe {
                core::ptr::copy_nonoverlapping(
                    (&raw const info).cast::<u8>(),
                    pInfo.cast::<u8>(),
                    n as usize,
                )
            };
            // SAFETY: as above.
            unsafe { pBufferSize.write(n) };
            STATUS_SUCCESS
        }
        Err(required) => {
            // SAFETY: as above.
            unsafe { pBufferSize.write(required) };
            STATUS_BUFFER_TOO_SMALL
        }
    }
}

/// # Safety
/// See the module contract.
unsafe extern "system" fn create_cq(
    pNdkAdapter: *mut NDK_ADAPTER,
    CqDepth: ULONG,
    CqNotification: NDK_FN_CQ_NOTIFICATION_CALLBACK,
    CqNotificationContext: PVOID,
    Affinity: *mut GROUP_AFFINITY,
    CreateCompletion: NDK_FN_CREATE_COMPLETION,
    RequestContext: PVOID,
    ppNdkCq: *mut *mut NDK_CQ,
) -> NTSTATUS {
    // SAFETY: module contract.
    let Some(a) = (unsafe { ObjRef::<Adapter>::borrow(pNdkAdapter) }) else {
        return STATUS_INVALID_PARAMETER;
    };
    if ppNdkCq.is_null() {
        return STATUS_INVALID_PARAMETER;
    }
    let affinity = if Affinity.is_null() {
        None
    } else {
        // SAFETY: non-null optional input, valid by contract.
        Some(unsafe { Affinity.read() })
    };
    let handoff = match CreateHandoff::new(CreateCompletion, RequestContext as usize) {
        Ok(h) => h,
        Err(e) => return e.to_ntstatus(),
    };
    let params = CqParams {
        depth: CqDepth,
        notify: CqNotification,
        notify_context: CqNotificationContext as usize,
        affinity,
    };
    if let Err(e) = Cq::create_async(&a, params, handoff.clone()) {
        return e.to_ntstatus();
    }
    match handoff.finish_call() {
        // SAFETY: `ppNdkCq` checked non-null; written only for an inline result (§5.1).
        Some(r) => unsafe { publish(r, ppNdkCq) },
        None => STATUS_PENDING,
    }
}

/// # Safety
/// See the module contract.
unsafe extern "system" fn create_pd(
    pNdkAdapter: *mut NDK_ADAPTER,
    CreateCompletion: NDK_FN_CREATE_COMPLETION,
    RequestContext: PVOID,
    ppNdkPd: *mut *mut NDK_PD,
) -> NTSTATUS {
    // SAFETY: module contract.
    let Some(a) = (unsafe { ObjRef::<Adapter>::borrow(pNdkAdapter) }) else {
        return STATUS_INVALID_PARAMETER;
    };
    if ppNdkPd.is_null() {
        return STATUS_INVALID_PARAMETER;
    }
    let handoff = match CreateHandoff::new(CreateCompletion, RequestContext as usize) {
        Ok(h) => h,
        Err(e) => return e.to_ntstatus(),
    };
    if let Err(e) = Pd::create_async(&a, handoff.clone()) {
        return e.to_ntstatus();
    }
    match handoff.finish_call() {
        // SAFETY: `ppNdkPd` checked non-null; written only for an inline result (§5.1: the
        // provider must not touch it after returning STATUS_PENDING).
        Some(r) => unsafe { publish(r, ppNdkPd) },
        None => STATUS_PENDING,
    }
}

/// # Safety
/// See the module contract (nothing is dereferenced).
unsafe extern "system" fn create_shared_endpoint(
    _pNdkAdapter: *mut NDK_ADAPTER,
    _pAddress: *const SOCKADDR,
    _AddressLength: ULONG,
    _CreateCompletion: NDK_FN_CREATE_COMPLETION,
    _RequestContext: PVOID,
    _pp: *mut *mut NDK_SHARED_ENDPOINT,
) -> NTSTATUS {
    status(SharedEndpoint::create())
}

/// # Safety
/// See the module contract (nothing is dereferenced).
unsafe extern "system" fn create_connector(
    _pNdkAdapter: *mut NDK_ADAPTER,
    _CreateCompletion: NDK_FN_CREATE_COMPLETION,
    _RequestContext: PVOID,
    _pp: *mut *mut NDK_CONNECTOR,
) -> NTSTATUS {
    status(Connector::create())
}

/// # Safety
/// See the module contract (nothing is dereferenced).
unsafe extern "system" fn create_listener(
    _pNdkAdapter: *mut NDK_ADAPTER,
    _ConnectEvent: NDK_FN_CONNECT_EVENT_CALLBACK,
    _ConnectEventContext: PVOID,
    _CreateCompletion: NDK_FN_CREATE_COMPLETION,
    _RequestContext: PVOID,
    _pp: *mut *mut NDK_LISTENER,
) -> NTSTATUS {
    status(Listener::create())
}

/// NdkBuildLam (§5.7): maps the MDL's pages to adapter logical addresses
/// ([`Hardware::page_address`]) and completes inline. The mapping holds no resources, so
/// `AdapterContext` is null and NdkReleaseLam has nothing to undo.
///
/// # Safety
/// See the module contract.
unsafe extern "system" fn build_lam(
    pNdkAdapter: *mut NDK_ADAPTER,
    Mdl: *mut MDL,
    Length: SIZE_T,
    _RequestCompletion: Option<NDK_FN_REQUEST_COMPLETION>,
    _RequestContext: PVOID,
    pNdkLAM: *mut NDK_LOGICAL_ADDRESS_MAPPING,
    pLAMSize: *mut ULONG,
    pFBO: *mut ULONG,
) -> NTSTATUS {
    // SAFETY: module contract.
    let Some(a) = (unsafe { ObjRef::<Adapter>::borrow(pNdkAdapter) }) else {
        return STATUS_INVALID_PARAMETER;
    };
    if Mdl.is_null() || pLAMSize.is_null() || pFBO.is_null() || Length == 0 {
        return STATUS_INVALID_PARAMETER;
    }
    // SAFETY: non-null MDL chain, valid by contract.
    let span = unsafe { mdl_span(Mdl, Length) };
    if span.contiguous < Length as u64 {
        return STATUS_INVALID_PARAMETER;
    }
    let Ok(len32) = u32::try_from(Length) else {
        return STATUS_INVALID_PARAMETER;
    };
    let pages = ADDRESS_AND_SIZE_TO_SPAN_PAGES(span.va as usize, len32);
    let Some(required) = ndk_lam_size(pages) else {
        return STATUS_INVALID_PARAMETER;
    };
    // SAFETY: non-null in/out parameter, valid by contract.
    let size = unsafe { pLAMSize.read() };
    if pNdkLAM.is_null() || size < required {
        // SAFETY: as above.
        unsafe { pLAMSize.write(required) };
        return STATUS_BUFFER_TOO_SMALL;
    }
    // CAST: the array starts at its field offset; `size` ≥ `required` covers all entries.
    let array = pNdkLAM
        .cast::<u8>()
        .wrapping_add(core::mem::offset_of!(
            NDK_LOGICAL_ADDRESS_MAPPING,
            AdapterPageArray
        ))
        .cast::<u64>();
    // SAFETY: the consumer's buffer holds `required` bytes: `pages` entries after the header,
    // 8-byte aligned like the structure (contract).
    let out = unsafe { core::slice::from_raw_parts_mut(array, pages as usize) };
    // SAFETY: non-null MDL chain, valid by contract.
    if let Err(e) = unsafe { mdl_pages(Mdl, span.va, a.hw(), out) } {
        return e.to_ntstatus();
    }
    let context = pNdkLAM
        .cast::<u8>()
        .wrapping_add(core::mem::offset_of!(
            NDK_LOGICAL_ADDRESS_MAPPING,
            AdapterContext
        ))
        .cast::<PVOID>();
    let count = pNdkLAM
        .cast::<u8>()
        .wrapping_add(core::mem::offset_of!(
            NDK_LOGICAL_ADDRESS_MAPPING,
            AdapterPageCount
        ))
        .cast::<ULONG>();
    // SAFETY: non-null LAM of `required` bytes (checked above), fields at their offsets.
    unsafe { context.write(core::ptr::null_mut()) };
    // SAFETY: as above.
    unsafe { count.write(pages) };
    // SAFETY: non-null in/out parameters (checked above).
    unsafe { pLAMSize.write(required) };
    // SAFETY: as above.
    unsafe { pFBO.write(BYTE_OFFSET(span.va as usize)) };
    STATUS_SUCCESS
}

/// NdkReleaseLam: a LAM holds no provider resources (see [`build_lam`]).
///
/// # Safety
/// See the module contract (nothing is dereferenced).
unsafe extern "system" fn release_lam(
    _pNdkAdapter: *mut NDK_ADAPTER,
    _pNdkLAM: *mut NDK_LOGICAL_ADDRESS_MAPPING,
) {
}

/// `NDK_ADAPTER_DISPATCH`.
pub static ADAPTER_DISPATCH: NDK_ADAPTER_DISPATCH = NDK_ADAPTER_DISPATCH {
    NdkQueryExtension: query_extension,
    NdkQueryAdapterInfo: query_adapter_info,
    NdkCreateCq: create_cq,
    NdkCreatePd: create_pd,
    NdkCreateSharedEndpoint: create_shared_endpoint,
    NdkCreateConnector: create_connector,
    NdkCreateListener: create_listener,
    NdkBuildLAM: build_lam,
    NdkReleaseLAM: release_lam,
};

/// CloseNDKAdapterHandler's core: blocks (PASSIVE_LEVEL) until every object under the
/// adapter has closed and every callback on them has returned (§5.2).
///
/// # Safety
/// `adapter` was returned by [`super::NdkDevice::open_adapter`] and is closed only once, not
/// from inside a consumer callback.
pub unsafe fn close_adapter(adapter: *mut NDK_ADAPTER) {
    // SAFETY: caller contract.
    if let Some(a) = unsafe { ObjRef::<Adapter>::borrow(adapter) } {
        a.close_blocking();
    }
}

// ---------------------------------------------------------------- PD

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
    if ppNdkMr.is_null() {
        return STATUS_INVALID_PARAMETER;
    }
    let r = Mr::create(&pd, FastRegister != 0);
    // SAFETY: `ppNdkMr` checked non-null.
    unsafe { publish(r, ppNdkMr) }
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
    if ppNdkSrq.is_null() {
        return STATUS_INVALID_PARAMETER;
    }
    let affinity = if Affinity.is_null() {
        None
    } else {
        // SAFETY: non-null optional input, valid by contract.
        Some(unsafe { Affinity.read() })
    };
    let handoff = match CreateHandoff::new(CreateCompletion, RequestContext as usize) {
        Ok(h) => h,
        Err(e) => return e.to_ntstatus(),
    };
    let r = Srq::create_async(
        &pd,
        SrqParams {
            depth: SrqDepth,
            max_sge: MaxReceiveRequestSge,
            threshold: NotifyThreshold,
            notify: SrqNotification,
            notify_context: SrqNotificationContext as usize,
            affinity,
        },
        handoff.clone(),
    );
    if let Err(e) = r {
        return e.to_ntstatus();
    }
    match handoff.finish_call() {
        // SAFETY: `ppNdkSrq` checked non-null; written only for an inline result (§5.1).
        Some(r) => unsafe { publish(r, ppNdkSrq) },
        None => STATUS_PENDING,
    }
}

/// Shared by both QP creates.
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
    ReceiveQueueDepth: ULONG,
    InitiatorQueueDepth: ULONG,
    MaxReceiveRequestSge: ULONG,
    MaxInitiatorRequestSge: ULONG,
    InlineDataSize: ULONG,
    CreateCompletion: NDK_FN_CREATE_COMPLETION,
    RequestContext: PVOID,
    ppNdkQp: *mut *mut NDK_QP,
) -> NTSTATUS {
    // SAFETY: module contract.
    let Some(pd) = (unsafe { ObjRef::<Pd>::borrow(pNdkPd) }) else {
        return STATUS_INVALID_PARAMETER;
    };
    // SAFETY: module contract.
    let Some(rcq) = (unsafe { ObjRef::<Cq>::borrow(pReceiveCq) }) else {
        return STATUS_INVALID_PARAMETER;
    };
    // SAFETY: module contract.
    let Some(icq) = (unsafe { ObjRef::<Cq>::borrow(pInitiatorCq) }) else {
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
    if ppNdkQp.is_null() {
        return STATUS_INVALID_PARAMETER;
    }
    let handoff = match CreateHandoff::new(CreateCompletion, RequestContext as usize) {
        Ok(h) => h,
        Err(e) => return e.to_ntstatus(),
    };
    let r = Qp::create_async(
        &pd,
        QpParams {
            receive_cq: rcq,
            initiator_cq: icq,
            srq,
            context: QPContext as usize,
            receive_depth: ReceiveQueueDepth,
            initiator_depth: InitiatorQueueDepth,
            max_receive_sge: MaxReceiveRequestSge,
            max_initiator_sge: MaxInitiatorRequestSge,
            inline_data: InlineDataSize,
        },
        handoff.clone(),
    );
    if let Err(e) = r {
        return e.to_ntstatus();
    }
    match handoff.finish_call() {
        // SAFETY: `ppNdkQp` checked non-null; written only for an inline result (§5.1).
        Some(r) => unsafe { publish(r, ppNdkQp) },
        None => STATUS_PENDING,
    }
}

/// # Safety
/// See the module contract.
unsafe extern "system" fn create_qp(
    pNdkPd: *mut NDK_PD,
    pReceiveCq: *mut NDK_CQ,
    pInitiatorCq: *mut NDK_CQ,
    QPContext: PVOID,
    ReceiveQueueDepth: ULONG,
    InitiatorQueueDepth: ULONG,
    MaxReceiveRequestSge: ULONG,
    MaxInitiatorRequestSge: ULONG,
    InlineDataSize: ULONG,
    CreateCompletion: NDK_FN_CREATE_COMPLETION,
    RequestContext: PVOID,
    ppNdkQp: *mut *mut NDK_QP,
) -> NTSTATUS {
    // SAFETY: forwarded contract.
    unsafe {
        create_qp_common(
            pNdkPd,
            pReceiveCq,
            pInitiatorCq,
            None,
            QPContext,
            ReceiveQueueDepth,
            InitiatorQueueDepth,
            MaxReceiveRequestSge,
            MaxInitiatorRequestSge,
            InlineDataSize,
            CreateCompletion,
            RequestContext,
            ppNdkQp,
        )
    }
}

/// # Safety
/// See the module contract.
unsafe extern "system" fn create_qp_with_srq(
    pNdkPd: *mut NDK_PD,
    pReceiveCq: *mut NDK_CQ,
    pInitiatorCq: *mut NDK_CQ,
    pSrq: *mut NDK_SRQ,
    QPContext: PVOID,
    InitiatorQueueDepth: ULONG,
    MaxInitiatorRequestSge: ULONG,
    InlineDataSize: ULONG,
    CreateCompletion: NDK_FN_CREATE_COMPLETION,
    RequestContext: PVOID,
    ppNdkQp: *mut *mut NDK_QP,
) -> NTSTATUS {
    // SAFETY: forwarded contract.
    unsafe {
        create_qp_common(
            pNdkPd,
            pReceiveCq,
            pInitiatorCq,
            Some(pSrq),
            QPContext,
            0,
            InitiatorQueueDepth,
            0,
            MaxInitiatorRequestSge,
            InlineDataSize,
            CreateCompletion,
            RequestContext,
            ppNdkQp,
        )
    }
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

/// `NDK_PD_DISPATCH`.
pub static PD_DISPATCH: NDK_PD_DISPATCH = NDK_PD_DISPATCH {
    NdkClosePd: close_object::<Pd>,
    NdkQueryExtension: query_extension,
    NdkCreateMr: create_mr,
    NdkCreateMw: create_mw,
    NdkCreateSrq: create_srq,
    NdkCreateQp: create_qp,
    NdkCreateQpWithSrq: create_qp_with_srq,
    NdkGetPrivilegedMemoryRegionToken: get_privileged_token,
};

// ---------------------------------------------------------------- CQ

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
    if pResults.is_null() || nResults == 0 {
        return 0;
    }
    // SAFETY: non-null, valid for writes of `nResults` entries by contract; the provider
    // only writes whole entries.
    let out = unsafe { core::slice::from_raw_parts_mut(pResults, nResults as usize) };
    cq.get_results(out) as ULONG
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
    if pResults.is_null() || nResults == 0 {
        return 0;
    }
    // SAFETY: as in `get_cq_results`.
    let out = unsafe { core::slice::from_raw_parts_mut(pResults, nResults as usize) };
    cq.get_results_ex(out) as ULONG
}

/// `NDK_CQ_DISPATCH`.
pub static CQ_DISPATCH: NDK_CQ_DISPATCH = NDK_CQ_DISPATCH {
    NdkCloseCq: close_object::<Cq>,
    NdkQueryExtension: query_extension,
    NdkResizeCq: resize_cq,
    NdkArmCq: arm_cq,
    NdkGetCqResults: get_cq_results,
    NdkControlCqInterruptModeration: control_cq_moderation,
    NdkGetCqResultsEx: get_cq_results_ex,
};

// ---------------------------------------------------------------- MR / MW

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
    if Mdl.is_null() {
        return STATUS_INVALID_PARAMETER;
    }
    // SAFETY: non-null MDL chain, valid by contract.
    let span = unsafe { mdl_span(Mdl, Length) };
    let hw = mr.pd().adapter().hw();
    let req = match RequestHandoff::new(RequestCompletion, RequestContext as usize) {
        Ok(r) => r,
        Err(e) => return e.to_ntstatus(),
    };
    let issued = mr.register(
        span,
        Length,
        Flags,
        || {
            // SAFETY: non-null MDL chain with PFN arrays, valid by contract; called only after
            // `register` checked that the chain covers `Length` bytes.
            unsafe { mdl_page_list(Mdl, &span, Length, hw) }
        },
        req.clone(),
    );
    match issued {
        Ok(()) => req.finish_call(),
        Err(e) => e.to_ntstatus(),
    }
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
    let req = match RequestHandoff::new(RequestCompletion, RequestContext as usize) {
        Ok(r) => r,
        Err(e) => return e.to_ntstatus(),
    };
    match mr.initialize_fast_register(AdapterPageCount, RemoteAccess != 0, req.clone()) {
        Ok(()) => req.finish_call(),
        Err(e) => e.to_ntstatus(),
    }
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

/// `NDK_MR_DISPATCH`.
pub static MR_DISPATCH: NDK_MR_DISPATCH = NDK_MR_DISPATCH {
    NdkCloseMr: close_object::<Mr>,
    NdkQueryExtension: query_extension,
    NdkRegisterMr: register_mr,
    NdkDeregisterMr: deregister_mr,
    NdkInitializeFastRegisterMr: initialize_fast_register_mr,
    NdkGetRemoteTokenFromMr: get_remote_token_from_mr,
    NdkGetLocalTokenFromMr: get_local_token_from_mr,
};

/// # Safety
/// See the module contract.
unsafe extern "system" fn get_remote_token_from_mw(pNdkMw: *mut NDK_MW) -> UINT32 {
    // SAFETY: module contract.
    unsafe { ObjRef::<Mw>::borrow(pNdkMw) }.map_or(0, |mw| mw.remote_token())
}

/// `NDK_MW_DISPATCH` (no MW is ever created, see `mw.rs`).
pub static MW_DISPATCH: NDK_MW_DISPATCH = NDK_MW_DISPATCH {
    NdkCloseMw: close_object::<Mw>,
    NdkQueryExtension: query_extension,
    NdkGetRemoteTokenFromMw: get_remote_token_from_mw,
};

// ---------------------------------------------------------------- QP

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
    // SAFETY: module contract (`pSgl` holds `nSge` entries).
    match unsafe { sgl(pSgl, nSge) } {
        Ok(s) => status(qp.send(RequestContext as usize, s, Flags, None)),
        // The SGL failure path too must indicate deferred requests (§5.5).
        Err(e) => status(qp.fail_initiator(e)),
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
    let (Some(mr), false, false) = (mr, AdapterPageArray.is_null(), AdapterPageCount == 0) else {
        return status(qp.fail_initiator(NdkError::InvalidParameter));
    };
    // SAFETY: non-null, `AdapterPageCount` entries by contract.
    let pages = unsafe { core::slice::from_raw_parts(AdapterPageArray, AdapterPageCount as usize) };
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
    match unsafe { sgl(pSgl, nSge) } {
        Ok(s) => status(qp.send(RequestContext as usize, s, Flags, Some(RemoteToken))),
        Err(e) => status(qp.fail_initiator(e)),
    }
}

/// `NDK_QP_DISPATCH`.
pub static QP_DISPATCH: NDK_QP_DISPATCH = NDK_QP_DISPATCH {
    NdkCloseQp: close_object::<Qp>,
    NdkQueryExtension: query_extension,
    NdkFlush: flush,
    NdkSend: send,
    NdkReceive: receive,
    NdkBind: bind,
    NdkFastRegister: fast_register,
    NdkInvalidate: invalidate,
    NdkRead: read,
    NdkWrite: write,
    NdkSendAndInvalidate: send_and_invalidate,
};

// ---------------------------------------------------------------- SRQ

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
    let req = match RequestHandoff::new(RequestCompletion, RequestContext as usize) {
        Ok(r) => r,
        Err(e) => return e.to_ntstatus(),
    };
    match srq.modify(SrqDepth, NotifyThreshold, req.clone()) {
        Ok(()) => req.finish_call(),
        Err(e) => e.to_ntstatus(),
    }
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

/// `NDK_SRQ_DISPATCH`.
pub static SRQ_DISPATCH: NDK_SRQ_DISPATCH = NDK_SRQ_DISPATCH {
    NdkCloseSrq: close_object::<Srq>,
    NdkQueryExtension: query_extension,
    NdkModifySrq: modify_srq,
    NdkSrqReceive: srq_receive,
};

// ---------------------------------------------------------------- connection objects
// No connector, listener or shared endpoint can be created yet (connection management is a
// later issue); the slots exist and answer STATUS_NOT_IMPLEMENTED.

/// # Safety
/// Nothing is dereferenced.
unsafe extern "system" fn connect(
    _c: *mut NDK_CONNECTOR,
    _qp: *mut NDK_QP,
    _src: *const SOCKADDR,
    _srclen: ULONG,
    _dst: *const SOCKADDR,
    _dstlen: ULONG,
    _ird: ULONG,
    _ord: ULONG,
    _pd: *const c_void,
    _pdlen: ULONG,
    _rc: NDK_FN_REQUEST_COMPLETION,
    _ctx: PVOID,
) -> NTSTATUS {
    STATUS_NOT_IMPLEMENTED
}

/// # Safety
/// Nothing is dereferenced.
unsafe extern "system" fn connect_with_shared_endpoint(
    _c: *mut NDK_CONNECTOR,
    _qp: *mut NDK_QP,
    _se: *mut NDK_SHARED_ENDPOINT,
    _dst: *const SOCKADDR,
    _dstlen: ULONG,
    _ird: ULONG,
    _ord: ULONG,
    _pd: *const c_void,
    _pdlen: ULONG,
    _rc: NDK_FN_REQUEST_COMPLETION,
    _ctx: PVOID,
) -> NTSTATUS {
    STATUS_NOT_IMPLEMENTED
}

/// # Safety
/// Nothing is dereferenced.
unsafe extern "system" fn complete_connect(
    _c: *mut NDK_CONNECTOR,
    _de: Option<NDK_FN_DISCONNECT_EVENT_CALLBACK>,
    _dectx: PVOID,
    _rc: NDK_FN_REQUEST_COMPLETION,
    _ctx: PVOID,
) -> NTSTATUS {
    STATUS_NOT_IMPLEMENTED
}

/// # Safety
/// Nothing is dereferenced.
unsafe extern "system" fn accept(
    _c: *mut NDK_CONNECTOR,
    _qp: *mut NDK_QP,
    _ird: ULONG,
    _ord: ULONG,
    _pd: *const c_void,
    _pdlen: ULONG,
    _de: Option<NDK_FN_DISCONNECT_EVENT_CALLBACK>,
    _dectx: PVOID,
    _rc: NDK_FN_REQUEST_COMPLETION,
    _ctx: PVOID,
) -> NTSTATUS {
    STATUS_NOT_IMPLEMENTED
}

/// # Safety
/// Nothing is dereferenced.
unsafe extern "system" fn reject(
    _c: *mut NDK_CONNECTOR,
    _pd: *const c_void,
    _pdlen: ULONG,
) -> NTSTATUS {
    STATUS_NOT_IMPLEMENTED
}

/// # Safety
/// Nothing is dereferenced.
unsafe extern "system" fn get_connection_data(
    _c: *mut NDK_CONNECTOR,
    _ird: *mut ULONG,
    _ord: *mut ULONG,
    _pd: PVOID,
    _pdlen: *mut ULONG,
) -> NTSTATUS {
    STATUS_NOT_IMPLEMENTED
}

/// # Safety
/// Nothing is dereferenced.
unsafe extern "system" fn connector_address(
    _c: *mut NDK_CONNECTOR,
    _a: *mut SOCKADDR,
    _len: *mut ULONG,
) -> NTSTATUS {
    STATUS_NOT_IMPLEMENTED
}

/// # Safety
/// Nothing is dereferenced.
unsafe extern "system" fn disconnect(
    _c: *mut NDK_CONNECTOR,
    _rc: NDK_FN_REQUEST_COMPLETION,
    _ctx: PVOID,
) -> NTSTATUS {
    STATUS_NOT_IMPLEMENTED
}

/// # Safety
/// Nothing is dereferenced.
unsafe extern "system" fn complete_connect_ex(
    _c: *mut NDK_CONNECTOR,
    _de: Option<NDK_FN_DISCONNECT_EVENT_CALLBACK_EX>,
    _dectx: PVOID,
    _rc: NDK_FN_REQUEST_COMPLETION,
    _ctx: PVOID,
) -> NTSTATUS {
    STATUS_NOT_IMPLEMENTED
}

/// # Safety
/// Nothing is dereferenced.
unsafe extern "system" fn accept_ex(
    _c: *mut NDK_CONNECTOR,
    _qp: *mut NDK_QP,
    _ird: ULONG,
    _ord: ULONG,
    _pd: *const c_void,
    _pdlen: ULONG,
    _de: Option<NDK_FN_DISCONNECT_EVENT_CALLBACK_EX>,
    _dectx: PVOID,
    _rc: NDK_FN_REQUEST_COMPLETION,
    _ctx: PVOID,
) -> NTSTATUS {
    STATUS_NOT_IMPLEMENTED
}

/// `NDK_CONNECTOR_DISPATCH` (NDKPI 2.1, 13 slots).
pub static CONNECTOR_DISPATCH: NDK_CONNECTOR_DISPATCH = NDK_CONNECTOR_DISPATCH {
    NdkCloseConnector: close_object::<Connector>,
    NdkQueryExtension: query_extension,
    NdkConnect: connect,
    NdkConnectWithSharedEndpoint: connect_with_shared_endpoint,
    NdkCompleteConnect: complete_connect,
    NdkAccept: accept,
    NdkReject: reject,
    NdkGetConnectionData: get_connection_data,
    NdkGetLocalAddress: connector_address,
    NdkGetPeerAddress: connector_address,
    NdkDisconnect: disconnect,
    NdkCompleteConnectEx: complete_connect_ex,
    NdkAcceptEx: accept_ex,
};

/// # Safety
/// Nothing is dereferenced.
unsafe extern "system" fn listen(
    _l: *mut NDK_LISTENER,
    _a: *const SOCKADDR,
    _len: ULONG,
    _rc: NDK_FN_REQUEST_COMPLETION,
    _ctx: PVOID,
) -> NTSTATUS {
    STATUS_NOT_IMPLEMENTED
}

/// # Safety
/// Nothing is dereferenced.
unsafe extern "system" fn listener_address(
    _l: *mut NDK_LISTENER,
    _a: *mut SOCKADDR,
    _len: *mut ULONG,
) -> NTSTATUS {
    STATUS_NOT_IMPLEMENTED
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

/// # Safety
/// Nothing is dereferenced.
unsafe extern "system" fn shared_endpoint_address(
    _s: *mut NDK_SHARED_ENDPOINT,
    _a: *mut SOCKADDR,
    _len: *mut ULONG,
) -> NTSTATUS {
    STATUS_NOT_IMPLEMENTED
}

/// `NDK_SHARED_ENDPOINT_DISPATCH`.
pub static SHARED_ENDPOINT_DISPATCH: NDK_SHARED_ENDPOINT_DISPATCH = NDK_SHARED_ENDPOINT_DISPATCH {
    NdkCloseSharedEndpoint: close_object::<SharedEndpoint>,
    NdkQueryExtension: query_extension,
    NdkGetLocalAddress: shared_endpoint_address,
};

// ---------------------------------------------------------------- consumer callbacks

/// Calls a consumer's NdkCloseCompletion.
pub(crate) fn call_close_completion(cb: NDK_FN_CLOSE_COMPLETION, ctx: usize) {
    // SAFETY: `cb` is the consumer's callback for this close, callable at ≤ DISPATCH_LEVEL
    // with the context it supplied (§2.12); the provider calls it exactly once.
    unsafe { cb(ctx as PVOID) }
}

/// Calls a consumer's NdkRequestCompletion.
pub(crate) fn call_request_completion(cb: NDK_FN_REQUEST_COMPLETION, ctx: usize, st: NTSTATUS) {
    // SAFETY: the consumer's callback for a request that returned STATUS_PENDING, callable at
    // ≤ DISPATCH_LEVEL with its context; the provider calls it exactly once.
    unsafe { cb(ctx as PVOID, st) }
}

/// Calls a consumer's NdkCreateCompletion.
pub(crate) fn call_create_completion(
    cb: NDK_FN_CREATE_COMPLETION,
    ctx: usize,
    st: NTSTATUS,
    obj: *mut NDK_OBJECT_HEADER,
) {
    // SAFETY: the consumer's callback for a create that returned STATUS_PENDING, callable at
    // ≤ DISPATCH_LEVEL with its context; the provider calls it exactly once.
    unsafe { cb(ctx as PVOID, st, obj) }
}

/// Calls a consumer's NdkCqNotificationCallback.
pub(crate) fn call_cq_notification(cb: NDK_FN_CQ_NOTIFICATION_CALLBACK, ctx: usize, st: NTSTATUS) {
    // SAFETY: the consumer's callback from NdkCreateCq, callable at ≤ DISPATCH_LEVEL with its
    // context until the CQ's close completes; the caller holds a close count.
    unsafe { cb(ctx as PVOID, st) }
}

/// Calls a consumer's NdkSrqNotificationCallback.
pub(crate) fn call_srq_notification(
    cb: NDK_FN_SRQ_NOTIFICATION_CALLBACK,
    ctx: usize,
    st: NTSTATUS,
) {
    // SAFETY: as for `call_cq_notification`, from NdkCreateSrq.
    unsafe { cb(ctx as PVOID, st) }
}
