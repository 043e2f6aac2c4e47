//! The ten NDK dispatch tables and every `unsafe extern "system"` entry point behind them
//! (ndkpi.md §2; style.md §3: safe object traits, C-ABI thunks and tables built in one place,
//! like block/mq `OperationsVTable`), one file per table: [`adapter`], [`pd`], [`cq`],
//! [`mr`], [`mw`], [`qp`], [`srq`], [`connector`], [`listener`], [`shared_endpoint`].
//!
//! A thunk only marshals: it recovers the provider object from the object pointer (the
//! `NDK_xxx` is at offset 0 of the provider object, so no `Dispatch` read, §1.5) and takes
//! its own counted handle for the duration of the call (§5.1); turns consumer pointers into
//! references, slices or [`MdlChain`]s after checking them for null; calls the object's
//! method; maps the result to NTSTATUS once ([`NdkError::to_ntstatus`]). The work is the
//! objects'. Consumer callbacks are invoked only through [`crate::ndkpi::upcall`].
//!
//! Shared `# Safety` contract of every thunk (the NDK consumer's side of §2.11 and §5.2): the
//! object pointer is one this provider returned, of the table's type, and its close has not
//! been issued (except by a completion callback of a call still running); every other
//! pointer is null only where NDKPI marks it optional and otherwise valid for the access the
//! parameter's annotation states, for the duration of the call.
//!
//! [`MdlChain`]: crate::os::mdl::MdlChain

#![allow(non_snake_case)]

pub mod adapter;
pub mod connector;
pub mod cq;
pub mod listener;
pub mod mr;
pub mod mw;
pub mod pd;
pub mod qp;
pub mod shared_endpoint;
pub mod srq;

use alloc::sync::Arc;

use super::consumer_array::ConsumerArray;
use super::error::{NdkError, NdkResult, status};
use super::object::{CreateHandoff, NdkObject, ObjRef, RequestHandoff};
use crate::ndkpi::*;
use crate::pvrdma::wqe::Sge;

pub use adapter::{ADAPTER_DISPATCH, close_adapter};
pub use connector::CONNECTOR_DISPATCH;
pub use cq::CQ_DISPATCH;
pub use listener::LISTENER_DISPATCH;
pub use mr::MR_DISPATCH;
pub use mw::MW_DISPATCH;
pub use pd::PD_DISPATCH;
pub use qp::QP_DISPATCH;
pub use shared_endpoint::SHARED_ENDPOINT_DISPATCH;
pub use srq::SRQ_DISPATCH;

/// Writes a created object to the consumer's out pointer.
///
/// # Safety
/// `pp` is valid for a pointer write.
unsafe fn publish<T: NdkObject>(r: NdkResult<ObjRef<T>>, pp: *mut *mut T::Ndk) -> NTSTATUS {
    match r {
        Ok(obj) => {
            // SAFETY: valid by the caller's contract.
            unsafe { pp.write(obj.publish()) };
            STATUS_SUCCESS
        }
        Err(e) => e.to_ntstatus(),
    }
}

/// An inline create (NdkCreateMr): nothing is created for a null out pointer.
///
/// # Safety
/// `pp` is null or valid for a pointer write.
unsafe fn create_inline<T: NdkObject>(
    pp: *mut *mut T::Ndk,
    create: impl FnOnce() -> NdkResult<ObjRef<T>>,
) -> NTSTATUS {
    if pp.is_null() {
        return STATUS_INVALID_PARAMETER;
    }
    // SAFETY: checked non-null; valid by the caller's contract.
    unsafe { publish(create(), pp) }
}

/// A create that may complete later (§5.1): `start` gets the hand-off its completion
/// reports to; the object is written to `pp` only if it completed before the call returns.
///
/// # Safety
/// `pp` is null or valid for a pointer write until this returns.
unsafe fn create_async<T: NdkObject>(
    pp: *mut *mut T::Ndk,
    completion: NDK_FN_CREATE_COMPLETION,
    context: PVOID,
    start: impl FnOnce(Arc<CreateHandoff<T>>) -> NdkResult<()>,
) -> NTSTATUS {
    if pp.is_null() {
        return STATUS_INVALID_PARAMETER;
    }
    let handoff = match CreateHandoff::new(completion, context as usize) {
        Ok(h) => h,
        Err(e) => return e.to_ntstatus(),
    };
    if let Err(e) = start(handoff.clone()) {
        return e.to_ntstatus();
    }
    match handoff.finish_call() {
        // SAFETY: checked non-null; written only for an inline result (§5.1: the provider
        // must not touch it after returning STATUS_PENDING).
        Some(r) => unsafe { publish(r, pp) },
        None => STATUS_PENDING,
    }
}

/// A request that may complete later (NdkRegisterMr, NdkModifySrq, …): `issue` gets the
/// hand-off its completion reports to; the inline status or STATUS_PENDING is returned.
fn request(
    completion: NDK_FN_REQUEST_COMPLETION,
    context: PVOID,
    issue: impl FnOnce(Arc<RequestHandoff>) -> NdkResult<()>,
) -> NTSTATUS {
    let req = match RequestHandoff::new(completion, context as usize) {
        Ok(r) => r,
        Err(e) => return e.to_ntstatus(),
    };
    match issue(req.clone()) {
        Ok(()) => req.finish_call(),
        Err(e) => e.to_ntstatus(),
    }
}

/// An optional input structure, copied.
///
/// # Safety
/// `p` is null or valid for a read.
unsafe fn optional<T: Copy>(p: *const T) -> Option<T> {
    // SAFETY: null or valid by the caller's contract.
    unsafe { p.as_ref() }.copied()
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

/// The consumer's SGE array, as the rings' SGE type (same layout, asserted above), with its
/// count not yet checked: the QP or SRQ checks it against its limit before any slice exists.
///
/// # Safety
/// `p` is null only if `n` is 0, else valid for reads of `n` entries for the call if `n` is
/// within the queue's SGE limit (NDKPI's contract).
#[inline(always)]
unsafe fn sgl<'a>(p: *const NDK_SGE, n: ULONG) -> NdkResult<ConsumerArray<'a, Sge>> {
    // CAST: identical layout (asserted); every bit pattern is a valid `Sge`.
    // SAFETY: the caller's contract, passed on unchanged.
    unsafe { ConsumerArray::new(p.cast::<Sge>(), n as usize) }.ok_or(NdkError::InvalidParameter)
}

/// Declares `pub static $name: $table`, an NDK dispatch table: the slots listed (in ABI order)
/// after the ones every table fills alike, `$close` with [`close_object`] for `$object` (the
/// adapter's table has no close slot: adapters close through CLOSE_NDK_ADAPTER_HANDLER) and
/// `NdkQueryExtension` with [`query_extension`]; and makes it `$object`'s table
/// ([`Dispatched`]), which is how the object names it without importing this module. The
/// table's field types check every thunk.
macro_rules! dispatch_table {
    ($name:ident: $table:ident, $close:ident: $object:ident { $($slot:ident: $thunk:expr,)+ }) => {
        #[doc = concat!("`", stringify!($table), "`.")]
        pub static $name: $table = $table {
            $close: $crate::ndk::dispatch::close_object::<$object>,
            NdkQueryExtension: $crate::ndk::dispatch::query_extension,
            $($slot: $thunk,)+
        };
        $crate::ndk::dispatch::dispatch_table!(@of $object: $table = $name);
    };
    ($name:ident: $table:ident for $object:ident { $($slot:ident: $thunk:expr,)+ }) => {
        #[doc = concat!("`", stringify!($table), "`.")]
        pub static $name: $table = $table {
            NdkQueryExtension: $crate::ndk::dispatch::query_extension,
            $($slot: $thunk,)+
        };
        $crate::ndk::dispatch::dispatch_table!(@of $object: $table = $name);
    };
    (@of $object:ident: $table:ident = $name:ident) => {
        impl $crate::ndk::object::Dispatched for $object {
            type Table = $table;
            const TABLE: &'static $table = &$name;
        }
    };
}
use dispatch_table;

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
