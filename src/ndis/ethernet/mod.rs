//! The vmxnet3 Ethernet miniport (15AD:07B0, issue 24 item 2): the NDIS glue over the
//! hardware layer `crate::vmxnet3`, a separate adapter type beside the PVRDMA one
//! ([`miniport::AdapterKind`], chosen by the PCI device ID) so one .sys serves both.
//!
//! - [`miniport`]: the portable adapter ([`EthMiniport`]): NBL send through Tx descriptors,
//!   receive indications of preallocated NBLs, pause/restart/reset/surprise removal/halt,
//!   link indications;
//! - [`oid`]: the OIDs (general, 802.3, filter, multicast list, statistics);
//! - [`nbl`]: a NET_BUFFER's MDLs as device addresses;
//! - [`abi`]: NET_BUFFER and the Ethernet data path's constants;
//! - [`resources`]: the function's PCI resources;
//! - `entry` (Windows): InitializeEx's vmxnet3 half and the handlers' (FFI).
//!
//! What it does not do: offloads (checksum, LSO, RSC, RSS, VLAN), jumbo frames, frames of
//! more than 16 pieces (they fail NDIS_STATUS_RESOURCES, counted), wake-on-LAN, a
//! MiniportShutdownEx that resets the device (it only stops register access).

pub mod abi;
/// The NDIS entry points' vmxnet3 half: FFI only.
#[cfg(target_os = "windows")]
pub mod entry;
pub mod miniport;
pub mod nbl;
pub mod oid;
pub mod resources;

pub use miniport::{
    AdapterKind, ETH_MTU, EthConfig, EthCounters, EthMiniport, EthSink, EthState, RxNblPool,
};
