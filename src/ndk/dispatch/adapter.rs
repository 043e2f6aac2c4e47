//! `NDK_ADAPTER_DISPATCH` and CloseNDKAdapterHandler's core. Every thunk follows the shared
//! `# Safety` contract of [`super`] ("the module contract").

use super::connector::read_sockaddr;
use super::{create_async, dispatch_table, optional, publish};
use crate::ndk::adapter::{Adapter, adapter_info_bytes};
use crate::ndk::connect::connector::Connector;
use crate::ndk::connect::listener::Listener;
use crate::ndk::connect::shared_endpoint::SharedEndpoint;
use crate::ndk::cq::{Cq, CqParams};
use crate::ndk::object::ObjRef;
use crate::ndk::pd::Pd;
use crate::ndkpi::*;
use crate::os::mdl::MdlChain;

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
    let params = CqParams {
        depth: CqDepth,
        notify: CqNotification,
        notify_context: CqNotificationContext as usize,
        // SAFETY: optional input, valid by contract.
        affinity: unsafe { optional(Affinity) },
    };
    // SAFETY: module contract.
    unsafe {
        create_async(ppNdkCq, CreateCompletion, RequestContext, |h| {
            Cq::create_async(&a, params, h)
        })
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
    // SAFETY: module contract.
    unsafe {
        create_async(ppNdkPd, CreateCompletion, RequestContext, |h| {
            Pd::create_async(&a, h)
        })
    }
}

/// # Safety
/// See the module contract.
unsafe extern "system" fn create_shared_endpoint(
    pNdkAdapter: *mut NDK_ADAPTER,
    pAddress: *const SOCKADDR,
    AddressLength: ULONG,
    _CreateCompletion: NDK_FN_CREATE_COMPLETION,
    _RequestContext: PVOID,
    ppNdkSharedEndpoint: *mut *mut NDK_SHARED_ENDPOINT,
) -> NTSTATUS {
    // SAFETY: module contract.
    let Some(a) = (unsafe { ObjRef::<Adapter>::borrow(pNdkAdapter) }) else {
        return STATUS_INVALID_PARAMETER;
    };
    if ppNdkSharedEndpoint.is_null() {
        return STATUS_INVALID_PARAMETER;
    }
    if a.device().connections().is_none() {
        return STATUS_NOT_IMPLEMENTED;
    }
    // SAFETY: module contract: the address is valid for `AddressLength` bytes.
    let addr = match unsafe { read_sockaddr(pAddress, AddressLength) } {
        Ok(addr) => addr,
        Err(e) => return e.to_ntstatus(),
    };
    // SAFETY: checked non-null; valid by contract.
    unsafe { publish(SharedEndpoint::create(&a, addr), ppNdkSharedEndpoint) }
}

/// # Safety
/// See the module contract.
unsafe extern "system" fn create_connector(
    pNdkAdapter: *mut NDK_ADAPTER,
    _CreateCompletion: NDK_FN_CREATE_COMPLETION,
    _RequestContext: PVOID,
    ppNdkConnector: *mut *mut NDK_CONNECTOR,
) -> NTSTATUS {
    // SAFETY: module contract.
    let Some(a) = (unsafe { ObjRef::<Adapter>::borrow(pNdkAdapter) }) else {
        return STATUS_INVALID_PARAMETER;
    };
    if ppNdkConnector.is_null() {
        return STATUS_INVALID_PARAMETER;
    }
    // SAFETY: checked non-null; valid by contract.
    unsafe { publish(Connector::create(&a), ppNdkConnector) }
}

/// # Safety
/// See the module contract.
unsafe extern "system" fn create_listener(
    pNdkAdapter: *mut NDK_ADAPTER,
    ConnectEvent: NDK_FN_CONNECT_EVENT_CALLBACK,
    ConnectEventContext: PVOID,
    _CreateCompletion: NDK_FN_CREATE_COMPLETION,
    _RequestContext: PVOID,
    ppNdkListener: *mut *mut NDK_LISTENER,
) -> NTSTATUS {
    // SAFETY: module contract.
    let Some(a) = (unsafe { ObjRef::<Adapter>::borrow(pNdkAdapter) }) else {
        return STATUS_INVALID_PARAMETER;
    };
    if ppNdkListener.is_null() {
        return STATUS_INVALID_PARAMETER;
    }
    let made = Listener::create(&a, ConnectEvent, ConnectEventContext as usize);
    // SAFETY: checked non-null; valid by contract.
    unsafe { publish(made, ppNdkListener) }
}

/// NdkBuildLam (§5.7): [`Adapter::plan_lam`] checks the MDL chain and sizes the mapping,
/// [`Adapter::build_lam`] fills its page array; this writes the consumer's LAM. Completes
/// inline; the mapping holds no resources, so `AdapterContext` is null and NdkReleaseLam has
/// nothing to undo.
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
    if pLAMSize.is_null() || pFBO.is_null() {
        return STATUS_INVALID_PARAMETER;
    }
    // SAFETY: module contract: a valid, locked MDL chain with PFN arrays for the call.
    let Some(mdl) = (unsafe { MdlChain::from_ptr(Mdl) }) else {
        return STATUS_INVALID_PARAMETER;
    };
    let plan = match a.plan_lam(mdl, Length) {
        Ok(p) => p,
        Err(e) => return e.to_ntstatus(),
    };
    // SAFETY: non-null in/out parameter, valid by contract.
    let size = unsafe { pLAMSize.read() };
    if pNdkLAM.is_null() || size < plan.size() {
        // SAFETY: as above.
        unsafe { pLAMSize.write(plan.size()) };
        return STATUS_BUFFER_TOO_SMALL;
    }
    // CAST: the array starts at its field offset and holds `plan.pages()` entries within the
    // `size` ≥ `plan.size()` bytes of the buffer.
    // SAFETY: the buffer is valid for `size` bytes (contract), which hold the whole
    // structure (a plan maps at least one page), so the field projection is in bounds.
    let array = unsafe { &raw mut (*pNdkLAM).AdapterPageArray }.cast::<u64>();
    // SAFETY: `plan.pages()` 8-byte entries after the header, inside the consumer's buffer,
    // aligned like the structure (contract); nothing else refers to them during the call.
    let out = unsafe { core::slice::from_raw_parts_mut(array, plan.pages() as usize) };
    if let Err(e) = a.build_lam(&plan, out) {
        return e.to_ntstatus();
    }
    // SAFETY: the structure lies within the buffer (above).
    unsafe { (*pNdkLAM).AdapterContext = core::ptr::null_mut() };
    // SAFETY: as above.
    unsafe { (*pNdkLAM).AdapterPageCount = plan.pages() };
    // SAFETY: non-null in/out parameters (checked above).
    unsafe { pLAMSize.write(plan.size()) };
    // SAFETY: as above.
    unsafe { pFBO.write(plan.first_byte_offset()) };
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

dispatch_table!(ADAPTER_DISPATCH: NDK_ADAPTER_DISPATCH for Adapter {
    NdkQueryAdapterInfo: query_adapter_info,
    NdkCreateCq: create_cq,
    NdkCreatePd: create_pd,
    NdkCreateSharedEndpoint: create_shared_endpoint,
    NdkCreateConnector: create_connector,
    NdkCreateListener: create_listener,
    NdkBuildLAM: build_lam,
    NdkReleaseLAM: release_lam,
});

/// CloseNDKAdapterHandler's core: blocks (PASSIVE_LEVEL) until every object under the
/// adapter has closed and every callback on them has returned (§5.2).
///
/// # Safety
/// `adapter` was returned by [`crate::ndk::NdkDevice::open_adapter`] and is closed only
/// once, not from inside a consumer callback.
pub unsafe fn close_adapter(adapter: *mut NDK_ADAPTER) {
    // SAFETY: caller contract.
    if let Some(a) = unsafe { ObjRef::<Adapter>::borrow(adapter) } {
        a.close_blocking();
    }
}
