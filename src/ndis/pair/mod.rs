//! The pairing of a vNIC's two functions (issue 25; `reference/smb-direct.md` §5.1, "A2";
//! `reference/vmxnet3.md` §1): the Ethernet function (vmxnet3, function 0) owns the IP
//! interface and registers NDK with NDIS, the RDMA function (PVRDMA, function 1 of the same
//! slot) serves it. Windows consumers open NDK only by IP interface (smb-direct.md §1.2), so
//! NDK must be registered by the miniport that carries the addresses.
//!
//! - [`function`]: the interface between the two, in device-neutral terms: the trait
//!   [`RdmaFunction`] (the RDMA side implements it, the Ethernet side calls it) and
//!   [`NetInterface`] (the interface that owns the IPs).
//! - [`registry`]: the driver-global table where the two adapters of one slot find each
//!   other by PCI bus and device number, in either start order, and part when either leaves
//!   ([`PairRegistry`], [`PairedNic`]).
//! - [`nic`]: the NDK surface of the Ethernet adapter ([`NicNdk`]): the NDK attributes, the
//!   open/close handlers, the NDK OIDs and the NDK enable/disable events, forwarded to the
//!   RDMA function while it is here.
//!
//! Layering inside `ndis`: this module names neither the PVRDMA miniport (`ndis::miniport`)
//! nor the Ethernet one (`ndis::ethernet`); both name it (`tests/architecture.rs`).

pub mod function;
pub mod nic;
pub mod registry;

pub use function::{NetInterface, RdmaFunction};
pub use nic::{NdkEvents, NicNdk};
pub use registry::{PairRegistry, PairedNic, PciLocation};
