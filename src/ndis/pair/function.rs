//! The interface between the Ethernet function and the RDMA function of one vNIC, in
//! device-neutral terms (smb-direct.md §5.1 item 1; WinOFED's miniports reach their HCA
//! through a queried interface the same way, smb-direct.md §1.5).
//!
//! The Ethernet side ([`super::NicNdk`]) calls it; the RDMA side (the PVRDMA miniport,
//! `ndis::rdma`) implements it. Every method may be called at PASSIVE_LEVEL unless it says
//! otherwise, never with a lock of the caller held; none calls back into the caller.
#![deny(unsafe_code)]

use alloc::sync::Arc;

use super::super::abi::*;
use super::super::oid::OidResult;
use crate::ndkpi::{NDK_ADAPTER, NDK_ADAPTER_INFO};
use crate::os::net::{AddressResolver, Mac};

/// The network interface that owns the IP addresses: the Ethernet function's, as NDIS named
/// it at its InitializeEx (`NDIS_MINIPORT_INIT_PARAMETERS.NetLuid` / `IfIndex`), with the
/// vNIC's MAC and the Ethernet MTU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NetInterface {
    /// NET_LUID (its 64-bit value).
    pub net_luid: u64,
    /// NET_IFINDEX: what WskOpenNdkAdapter names (ndkpi.md §6.9).
    pub if_index: u32,
    /// The vNIC's MAC: RoCE frames leave with it, the node GUID is its EUI-64.
    pub mac: Mac,
    /// The Ethernet MTU (bytes of IP payload).
    pub mtu: u32,
}

/// What the RDMA function offers the Ethernet function that registers NDK for it.
pub trait RdmaFunction: Send + Sync {
    /// OPEN_NDK_ADAPTER_HANDLER's work: an NDK_ADAPTER of the requested version (the NDIS
    /// 6.50 parameters: a non-default switch or vPort is refused).
    ///
    /// # Errors
    /// NDIS_STATUS_NOT_SUPPORTED, NDIS_STATUS_BAD_VERSION, NDIS_STATUS_RESOURCES,
    /// NDIS_STATUS_ADAPTER_NOT_READY (halted, or no interface attached).
    fn open_ndk(
        &self,
        p: &NDIS_OPEN_NDK_ADAPTER_PARAMETERS,
    ) -> Result<*mut NDK_ADAPTER, NDIS_STATUS>;
    /// CLOSE_NDK_ADAPTER_HANDLER's work: blocks until every object under `adapter` has
    /// closed (ndkpi.md §6.3). A pointer this function did not hand out, or already closed,
    /// is ignored. Valid after the function has halted (the adapter keeps what it needs).
    fn close_ndk(&self, adapter: *mut NDK_ADAPTER);
    /// NDIS_NDK_CAPABILITIES and the NDK_ADAPTER_INFO they describe (the caller keeps its own
    /// copy for NDIS: its `NdkInfo` pointer is the caller's to set).
    fn capabilities(&self) -> (NDIS_NDK_CAPABILITIES, NDK_ADAPTER_INFO);
    /// The RDMA Activity counters (OID_NDK_STATISTICS). IRQL ≤ DISPATCH_LEVEL.
    fn statistics(&self) -> NDIS_NDK_PERFORMANCE_COUNTERS;
    /// OID_NDK_CONNECTIONS into `buf` (the OID's layout and buffer protocol).
    fn connections(&self, buf: &mut [u8]) -> OidResult;
    /// OID_NDK_LOCAL_ENDPOINTS into `buf`.
    fn local_endpoints(&self, buf: &mut [u8]) -> OidResult;
    /// Attaches the interface that owns the IP addresses: from now on the connection
    /// engine's GIDs are `resolver`'s addresses (bound and unbound as they change) and its
    /// neighbours are resolved through it. An interface attached before is detached first.
    ///
    /// # Errors
    /// NDIS_STATUS_ADAPTER_NOT_READY (halted), NDIS_STATUS_RESOURCES, NDIS_STATUS_FAILURE.
    fn attach_interface(
        &self,
        iface: NetInterface,
        resolver: Arc<dyn AddressResolver>,
    ) -> Result<(), NDIS_STATUS>;
    /// Detaches it: the connection engine stops (its GIDs unbound, the resolver let go).
    fn detach_interface(&self);
    /// The interface's link went up or down (IRQL ≤ DISPATCH_LEVEL). Down: a port error
    /// (the link the function reports goes down). Up: the function is un-quiesced
    /// (vmxnet3.md §1.2) and its port reported active again.
    fn link_changed(&self, up: bool);
    /// The interface's MAC changed (the RoCE source MAC and node GUID of later
    /// connections; vmxnet3.md §1.3).
    fn mac_changed(&self, mac: Mac);
    /// The interface failed or vanished (surprise removal): every NDK object learns it
    /// (CQs and SRQs report STATUS_INTERNAL_ERROR) so its consumer closes it.
    fn device_failed(&self);
}
