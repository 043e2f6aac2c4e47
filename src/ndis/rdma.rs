//! The PVRDMA miniport as the RDMA function of a paired slot (`super::pair`, issue 25): it
//! implements [`RdmaFunction`] for the vmxnet3 adapter that registers NDK for it.
//!
//! - Open/close: the miniport's own NDK_ADAPTER list (Halt waits on it), without its own
//!   NDK state: a paired miniport registers no NDK of its own (`MiniportConfig::paired`),
//!   the Ethernet adapter's state decides.
//! - The interface: attaching starts the connection engine over the Ethernet interface's
//!   resolver, so its GIDs are that interface's addresses (v4-mapped and IPv6, following
//!   their changes, `ndk::connect::engine`) and the node GUID is the vNIC MAC's EUI-64
//!   (vmxnet3.md §1.3); detaching stops it (GIDs unbound, QP1 destroyed).
//! - Link: down is a port error (the link the miniport reports goes down, as a device
//!   PORT_ERR would); up writes CTL = UNQUIESCE and reads ERR (Linux's NETDEV_UP,
//!   vmxnet3.md §1.2): 0 reports the port active again, anything else keeps it down and is
//!   counted ([`Miniport::unquiesce_failures`]).
#![deny(unsafe_code)]

use alloc::sync::Arc;
use core::sync::atomic::Ordering;

use super::abi::*;
use super::counters::performance_counters;
use super::link::LinkState;
use super::miniport::Miniport;
use super::oid::OidResult;
use super::pair::{NetInterface, PairRegistry, PciLocation, RdmaFunction};
use super::state::Lifecycle;
use crate::ndkpi::{NDK_ADAPTER, NDK_ADAPTER_INFO};
use crate::os::net::{AddressResolver, Mac};

impl Miniport {
    /// The interface the paired Ethernet function attached, if any.
    pub fn interface(&self) -> Option<NetInterface> {
        *self.iface.lock()
    }

    /// Link-up UNQUIESCEs the device refused.
    pub fn unquiesce_failures(&self) -> u64 {
        self.unquiesce_failures.load(Ordering::Relaxed)
    }

    fn may_open_paired(&self) -> Result<(), NDIS_STATUS> {
        if self.state().lifecycle() == Lifecycle::Halted || self.interface().is_none() {
            Err(NDIS_STATUS_ADAPTER_NOT_READY)
        } else {
            Ok(())
        }
    }
}

impl RdmaFunction for Miniport {
    fn open_ndk(
        &self,
        p: &NDIS_OPEN_NDK_ADAPTER_PARAMETERS,
    ) -> Result<*mut NDK_ADAPTER, NDIS_STATUS> {
        if p.SwitchId != NDIS_DEFAULT_SWITCH_ID || p.VPortId != NDIS_DEFAULT_VPORT_ID {
            return Err(NDIS_STATUS_NOT_SUPPORTED);
        }
        self.may_open_paired()?;
        self.open_filed(p.Version, || self.may_open_paired())
    }

    fn close_ndk(&self, adapter: *mut NDK_ADAPTER) {
        self.close_ndk_adapter(adapter);
    }

    fn capabilities(&self) -> (NDIS_NDK_CAPABILITIES, NDK_ADAPTER_INFO) {
        (*self.ndk_capabilities(), *self.ndis_block().info())
    }

    fn statistics(&self) -> NDIS_NDK_PERFORMANCE_COUNTERS {
        performance_counters(&self.counter_source())
    }

    fn connections(&self, buf: &mut [u8]) -> OidResult {
        super::lists::connections(self.connection_engine().as_deref(), buf)
    }

    fn local_endpoints(&self, buf: &mut [u8]) -> OidResult {
        super::lists::local_endpoints(self.connection_engine().as_deref(), buf)
    }

    fn attach_interface(
        &self,
        iface: NetInterface,
        resolver: Arc<dyn AddressResolver>,
    ) -> Result<(), NDIS_STATUS> {
        if self.state().lifecycle() == Lifecycle::Halted {
            return Err(NDIS_STATUS_ADAPTER_NOT_READY);
        }
        self.detach_interface();
        self.start_connections_as(resolver, iface.mac)?;
        *self.iface.lock() = Some(iface);
        Ok(())
    }

    fn detach_interface(&self) {
        let was = self.iface.lock().take();
        if was.is_some()
            && let Some(ndk) = self.ndk_device()
        {
            ndk.stop_connections();
        }
    }

    fn link_changed(&self, up: bool) {
        if !up {
            self.update_link(LinkState::UNKNOWN);
            return;
        }
        let Some(dev) = self.device() else { return };
        match dev.unquiesce() {
            Ok(()) => self.update_link(LinkState {
                connected: true,
                speed_bps: self.port_speed_bps(),
            }),
            Err(_) => {
                self.unquiesce_failures.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn mac_changed(&self, mac: Mac) {
        // The GIDs are the interface's IP addresses (RoCEv2), which a MAC change leaves
        // alone; the node GUID of the running engine stays until the next attach.
        if let Some(i) = self.iface.lock().as_mut() {
            i.mac = mac;
        }
    }

    fn device_failed(&self) {
        if let Some(ndk) = self.ndk_device() {
            ndk.device_fatal();
        }
    }
}

/// The paired PVRDMA adapter's InitializeEx tail: registers it at `at` (if the slot's
/// Ethernet adapter is there, the join is handed to that adapter's work item).
///
/// # Errors
/// NDIS_STATUS_RESOURCES when the registry is full or the slot already has an RDMA
/// function.
pub fn join(
    registry: &PairRegistry,
    at: PciLocation,
    m: &Arc<Miniport>,
) -> Result<(), NDIS_STATUS> {
    let f: Arc<dyn RdmaFunction> = m.clone();
    registry.join_rdma(at, f).map_err(|_| NDIS_STATUS_RESOURCES)
}

/// The paired PVRDMA adapter's Halt: parted from the Ethernet adapter (which lets go of it:
/// NDK disabled there, open NDK objects failed, the interface detached), then halted.
pub fn leave_and_halt(registry: &PairRegistry, at: PciLocation, m: &Arc<Miniport>) {
    let f: Arc<dyn RdmaFunction> = m.clone();
    registry.leave_rdma(at, &f, &**m.platform());
    drop(f);
    m.halt();
}
