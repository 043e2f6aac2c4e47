//! The NDIS side of an NDK provider (docs/reference/ndkpi.md §6).
//!
//! [`abi`] holds the ndisndk.h / ndis.h / ntddndis.h / wskndk.h / wdm.h declarations under
//! their C names, layout asserted for x64; everything is re-exported here. The rest is the
//! portable miniport core the FFI layer (DriverEntry and the `extern "system"` handlers)
//! marshals to: [`miniport::Miniport`] (one per adapter), [`resources`] (the PCI resource
//! list), [`state`] (NDK enable/disable and the lifecycle), [`oid`] (OID requests),
//! [`caps`] (NDK capabilities and attributes), [`attributes`] (general attributes),
//! [`counters`] (the RDMA Activity counters), [`config`] (the registry keywords),
//! [`link`] (link state and speed from the port).
#![allow(non_camel_case_types, non_snake_case, non_upper_case_globals)]

pub mod abi;
pub mod attributes;
pub mod caps;
pub mod config;
pub mod counters;
/// The NDIS entry points (DriverEntry, the Miniport* handlers): FFI only.
#[cfg(target_os = "windows")]
pub mod entry;
/// The vmxnet3 Ethernet miniport (issue 24).
pub mod ethernet;
pub mod link;
pub mod lists;
pub mod miniport;
pub mod oid;
pub mod resources;
pub mod state;

#[cfg(target_pointer_width = "64")]
mod layout;

pub use abi::*;
pub use config::{ConfigEvent, ConfigEvents, Keyword, Keywords, Registry};
pub use link::{LinkState, StatusSink};
pub use miniport::{Miniport, MiniportConfig};
pub use oid::OidResult;
pub use resources::{MemRange, Resources, parse_resources};
