//! The NDIS side of an NDK provider (docs/reference/ndkpi.md §6).
//!
//! [`abi`] holds the ndisndk.h / ndis.h / ntddndis.h / wskndk.h declarations under their C
//! names, layout asserted for x64; everything is re-exported here. The miniport glue that
//! uses them will live beside it.
#![allow(non_camel_case_types, non_snake_case, non_upper_case_globals)]

pub mod abi;
/// The NDIS entry points (DriverEntry, the Miniport* handlers): FFI only.
#[cfg(target_os = "windows")]
pub mod entry;
pub mod miniport;

#[cfg(target_pointer_width = "64")]
mod layout;

pub use abi::*;
