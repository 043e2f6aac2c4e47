//! PLACEHOLDER (helper "syslink"): the portable miniport core belongs to helper "ndiscore",
//! whose module replaces this file at merge. Only the signatures of the contract
//! (/work/wt/_brief/ndis_contract.md) are here, so that the FFI layer (`ndis::entry`) builds
//! and links against them; every operation fails with NDIS_STATUS_NOT_SUPPORTED.
#![allow(missing_docs)]

use alloc::sync::Arc;

use super::abi::*;
use crate::ndkpi::{NDK_ADAPTER, NDK_VERSION};

/// What InitializeEx found in the PCI resource list (already translated).
pub struct Resources {
    /// BAR0: the MSI-X table, unused by the driver.
    pub bar0: MemRange,
    /// BAR1: the registers.
    pub bar1: MemRange,
    /// BAR2: the UAR pages.
    pub bar2: MemRange,
    pub message_interrupts: u32,
}

#[derive(Clone, Copy)]
pub struct MemRange {
    pub phys: u64,
    pub len: u64,
}

/// Parses a CM_PARTIAL_RESOURCE_LIST's descriptors (memory ranges in BAR order, message
/// interrupts).
pub fn parse_resources(_list: &[CM_PARTIAL_RESOURCE_DESCRIPTOR]) -> Result<Resources, NDIS_STATUS> {
    Err(NDIS_STATUS_NOT_SUPPORTED)
}

/// The general attributes as plain values (placeholder fields).
pub struct GeneralAttributes {
    pub mtu: u32,
    pub link_speed_bps: u64,
    pub mac: [u8; 6],
}

pub struct OidResult {
    pub status: NDIS_STATUS,
    pub bytes_done: u32,
    pub bytes_needed: u32,
}

const UNSUPPORTED: OidResult = OidResult {
    status: NDIS_STATUS_NOT_SUPPORTED,
    bytes_done: 0,
    bytes_needed: 0,
};

/// One PVRDMA adapter = the MiniportAdapterContext.
pub struct Miniport {
    _platform: Arc<dyn crate::os::Platform>,
}

impl Miniport {
    pub fn initialize(
        _platform: Arc<dyn crate::os::Platform>,
        _res: &Resources,
    ) -> Result<Arc<Miniport>, NDIS_STATUS> {
        Err(NDIS_STATUS_NOT_SUPPORTED)
    }
    pub fn ndk_capabilities(&self) -> NDIS_NDK_CAPABILITIES {
        NDIS_NDK_CAPABILITIES {
            Header: NDIS_OBJECT_HEADER::default(),
            Flags: 0,
            MaxQpCount: 0,
            MaxCqCount: 0,
            MaxMrCount: 0,
            MaxPdCount: 0,
            MaxInboundReadLimit: 0,
            MaxOutboundReadLimit: 0,
            MaxMwCount: 0,
            MaxSrqCount: 0,
            MissingCounterMask: 0,
            NdkInfo: core::ptr::null_mut(),
        }
    }
    pub fn general_attributes(&self) -> GeneralAttributes {
        GeneralAttributes {
            mtu: 0,
            link_speed_bps: 0,
            mac: [0; 6],
        }
    }
    pub fn halt(&self) {}
    pub fn pause(&self) -> NDIS_STATUS {
        NDIS_STATUS_NOT_SUPPORTED
    }
    pub fn restart(&self) -> NDIS_STATUS {
        NDIS_STATUS_NOT_SUPPORTED
    }
    pub fn shutdown(&self) {}
    pub fn pnp_event(&self, _event: u32) {}
    pub fn query_oid(&self, _oid: NDIS_OID, _buf: &mut [u8]) -> OidResult {
        UNSUPPORTED
    }
    pub fn set_oid(&self, _oid: NDIS_OID, _buf: &[u8]) -> OidResult {
        UNSUPPORTED
    }
    pub fn method_oid(&self, _oid: NDIS_OID, _buf: &mut [u8], _input_len: usize) -> OidResult {
        UNSUPPORTED
    }
    pub fn open_ndk_adapter(&self, _version: NDK_VERSION) -> Result<*mut NDK_ADAPTER, NDIS_STATUS> {
        Err(NDIS_STATUS_NOT_SUPPORTED)
    }
    pub fn close_ndk_adapter(&self, _adapter: *mut NDK_ADAPTER) {}
}
