//! The NDK object header and the ten object structures (ndkpi.md §1.2–1.5).
//!
//! Every object is `{ Header, Dispatch }`. The consumer may overwrite `Dispatch`, so the
//! provider sets it before returning the object and never calls through it (§1.5);
//! `Header` is at offset 0, so an `NDK_OBJECT_HEADER*` and its object share an address.

use core::ffi::c_void;

use super::consts::NDK_OBJECT_TYPE;
use super::dispatch::{
    NDK_ADAPTER_DISPATCH, NDK_CONNECTOR_DISPATCH, NDK_CQ_DISPATCH, NDK_LISTENER_DISPATCH,
    NDK_MR_DISPATCH, NDK_MW_DISPATCH, NDK_PD_DISPATCH, NDK_QP_DISPATCH,
    NDK_SHARED_ENDPOINT_DISPATCH, NDK_SRQ_DISPATCH,
};
use super::types::USHORT;

/// `NDK_VERSION` (ndkinfo.h, §1.2). Passed by value where a signature takes one.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct NDK_VERSION {
    pub Major: USHORT,
    pub Minor: USHORT,
}

/// `NDK_OBJECT_HEADER_RESERVED_BLOCK` (§1.3): owned by the consumer side; the provider
/// zeroes it at creation and never touches it again.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NDK_OBJECT_HEADER_RESERVED_BLOCK {
    pub rf: [*mut c_void; 4],
}

impl NDK_OBJECT_HEADER_RESERVED_BLOCK {
    /// The all-null block a provider must store at creation.
    pub const ZERO: Self = Self {
        rf: [core::ptr::null_mut(); 4],
    };
}

/// `NDK_OBJECT_HEADER` (§1.4).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NDK_OBJECT_HEADER {
    pub Version: NDK_VERSION,
    pub ObjectType: NDK_OBJECT_TYPE,
    pub NdkReserved: NDK_OBJECT_HEADER_RESERVED_BLOCK,
}

macro_rules! ndk_object {
    ($(#[$doc:meta])* $name:ident, $dispatch:ty) => {
        $(#[$doc])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug)]
        pub struct $name {
            pub Header: NDK_OBJECT_HEADER,
            pub Dispatch: *const $dispatch,
        }
    };
}

ndk_object!(
    /// `NDK_ADAPTER`: returned by OpenNDKAdapterHandler.
    NDK_ADAPTER,
    NDK_ADAPTER_DISPATCH
);
ndk_object!(
    /// `NDK_PD`: protection domain.
    NDK_PD,
    NDK_PD_DISPATCH
);
ndk_object!(
    /// `NDK_CQ`: completion queue.
    NDK_CQ,
    NDK_CQ_DISPATCH
);
ndk_object!(
    /// `NDK_MR`: memory region.
    NDK_MR,
    NDK_MR_DISPATCH
);
ndk_object!(
    /// `NDK_MW`: memory window.
    NDK_MW,
    NDK_MW_DISPATCH
);
ndk_object!(
    /// `NDK_QP`: queue pair.
    NDK_QP,
    NDK_QP_DISPATCH
);
ndk_object!(
    /// `NDK_SRQ`: shared receive queue.
    NDK_SRQ,
    NDK_SRQ_DISPATCH
);
ndk_object!(
    /// `NDK_CONNECTOR`.
    NDK_CONNECTOR,
    NDK_CONNECTOR_DISPATCH
);
ndk_object!(
    /// `NDK_LISTENER`.
    NDK_LISTENER,
    NDK_LISTENER_DISPATCH
);
ndk_object!(
    /// `NDK_SHARED_ENDPOINT`.
    NDK_SHARED_ENDPOINT,
    NDK_SHARED_ENDPOINT_DISPATCH
);
