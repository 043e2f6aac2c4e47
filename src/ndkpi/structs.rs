//! NDKPI data structures (ndkpi.md §3.1–3.3, §3.5–3.7): SGE, completion results, the
//! logical address mapping (LAM), the extension interface and the adapter info.

use core::ffi::c_void;

use super::consts::{NDK_OPERATION_TYPE, NDK_RDMA_TECHNOLOGY};
use super::object::NDK_VERSION;
use super::types::{NDK_LOGICAL_ADDRESS, NTSTATUS, PVOID, SIZE_T, UINT32, ULONG, ULONG_PTR};

/// The anonymous address union of `NDK_SGE`: `VirtualAddress` for a normal MR token,
/// `LogicalAddress` (from NdkBuildLam) when the token is the privileged one (§3.1).
#[repr(C)]
#[derive(Clone, Copy)]
pub union NDK_SGE_0 {
    pub VirtualAddress: PVOID,
    pub LogicalAddress: NDK_LOGICAL_ADDRESS,
}

/// `NDK_SGE` (§3.1). The C union is anonymous; Rust needs a name, `Anonymous`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct NDK_SGE {
    pub Anonymous: NDK_SGE_0,
    pub Length: ULONG,
    pub MemoryRegionToken: UINT32,
}

/// `NDK_RESULT` (§3.2).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NDK_RESULT {
    pub Status: NTSTATUS,
    /// Valid only for receive completions.
    pub BytesTransferred: ULONG,
    pub QPContext: PVOID,
    pub RequestContext: PVOID,
}

/// `NDK_RESULT_EX` (§3.3), NDKPI 2.1 layout. `ProviderErrorCode` sits in what is padding
/// on x64 before 2.1, so the x64 layout is the same for every version.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NDK_RESULT_EX {
    pub Status: NTSTATUS,
    pub BytesTransferred: ULONG,
    pub QPContext: PVOID,
    pub RequestContext: PVOID,
    pub Type: NDK_OPERATION_TYPE,
    /// 0 when `Status` is success; 0 on failure means "not provided".
    pub ProviderErrorCode: ULONG,
    /// For ReceiveAndInvalidate: the invalidated token (32 bits). Undefined otherwise.
    pub TypeSpecificCompletionOutput: ULONG_PTR,
}

/// `NDK_LOGICAL_ADDRESS_MAPPING` (§3.5): variable size, `AdapterPageCount` entries in
/// `AdapterPageArray` (declared with one, as in C); see [`ndk_lam_size`].
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NDK_LOGICAL_ADDRESS_MAPPING {
    /// Reserved for the provider (e.g. its DMA mapping); the consumer must not modify it.
    pub AdapterContext: PVOID,
    pub AdapterPageCount: ULONG,
    pub AdapterPageArray: [NDK_LOGICAL_ADDRESS; 1],
}

/// Bytes of an `NDK_LOGICAL_ADDRESS_MAPPING` with `page_count` entries:
/// `FIELD_OFFSET(.., AdapterPageArray) + page_count * sizeof(NDK_LOGICAL_ADDRESS)`, as the
/// ULONG that `*pLAMSize` carries; `None` if that does not fit in a ULONG.
pub const fn ndk_lam_size(page_count: ULONG) -> Option<ULONG> {
    const HEADER: ULONG =
        core::mem::offset_of!(NDK_LOGICAL_ADDRESS_MAPPING, AdapterPageArray) as ULONG;
    const ENTRY: ULONG = core::mem::size_of::<NDK_LOGICAL_ADDRESS>() as ULONG;
    match page_count.checked_mul(ENTRY) {
        Some(bytes) => bytes.checked_add(HEADER),
        None => None,
    }
}

/// `NDK_EXTENSION_INTERFACE` (§3.6).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NDK_EXTENSION_INTERFACE {
    pub Dispatch: *const c_void,
}

/// `NDK_ADAPTER_INFO` (ndkinfo.h, §3.7).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NDK_ADAPTER_INFO {
    pub Version: NDK_VERSION,
    pub VendorId: UINT32,
    pub DeviceId: UINT32,
    pub MaxRegistrationSize: SIZE_T,
    pub MaxWindowSize: SIZE_T,
    pub FRMRPageCount: ULONG,
    pub MaxInitiatorRequestSge: ULONG,
    pub MaxReceiveRequestSge: ULONG,
    pub MaxReadRequestSge: ULONG,
    pub MaxTransferLength: ULONG,
    pub MaxInlineDataSize: ULONG,
    pub MaxInboundReadLimit: ULONG,
    pub MaxOutboundReadLimit: ULONG,
    pub MaxReceiveQueueDepth: ULONG,
    pub MaxInitiatorQueueDepth: ULONG,
    pub MaxSrqDepth: ULONG,
    pub MaxCqDepth: ULONG,
    pub LargeRequestThreshold: ULONG,
    pub MaxCallerData: ULONG,
    pub MaxCalleeData: ULONG,
    pub AdapterFlags: ULONG,
    /// Added with NDIS 6.50; older consumers may size their buffer without it.
    pub RdmaTechnology: NDK_RDMA_TECHNOLOGY,
}

/// Bytes of `NDK_ADAPTER_INFO` up to (excluding) `RdmaTechnology`: the size an
/// NDIS 6.30/6.40-era consumer may pass (§3.7, Appendix C #13).
pub const NDK_ADAPTER_INFO_SIZE_WITHOUT_RDMA_TECHNOLOGY: usize =
    core::mem::offset_of!(NDK_ADAPTER_INFO, RdmaTechnology);
