//! Software models of the VMware PVRDMA paravirtual RDMA device and of the vmxnet3 paravirtual
//! Ethernet NIC beside it, and of a simulated Ethernet fabric joining them.
//!
//! Written from `docs/reference/pvrdma.md` and `docs/reference/vmxnet3.md`, independently of the
//! driver crate: the model
//! never imports the driver's hardware types, so a misreading of the reference on either side
//! shows up as a failing test instead of agreeing with itself.
//!
//! Module map (names mirror the hardware): [`dma`] host memory as bus addresses (the only
//! module with `unsafe`), [`regs`] BAR1, [`uar`] doorbells, [`dsr`] DSR and caps, [`ring`] ring
//! arithmetic, [`pdir`] page directories, [`cmd`] command layouts, [`wqe`] WQE/CQE/EQE layouts,
//! objects [`pd`], [`cq`], [`mr`], [`qp`], [`srq`], [`intr`] interrupts, [`counters`],
//! [`device`] (registers, command execution, queue engine, transport boundary); the network:
//! [`wire`] RoCEv2 codecs, [`fabric`] frame delivery with fault injection, [`pcap`] capture,
//! [`rng`] the seeded generator that makes runs replayable, [`transport`] the RoCEv2 RC/UD
//! transport joining a device to the fabric, [`vmxnet3`] the vmxnet3 model, [`slot`] a vNIC's
//! PCI slot (vmxnet3 at function 0, PVRDMA at function 1, one MAC, one port), and [`world`]
//! the host-facing API (N devices and vNICs on one fabric, deterministic or threaded).
#![deny(unsafe_code)]

pub mod cmd;
pub mod counters;
pub mod cq;
pub mod device;
pub mod dma;
pub mod dsr;
pub mod external;
pub mod fabric;
pub mod intr;
pub mod le;
pub mod mr;
pub mod pcap;
pub mod pd;
pub mod pdir;
pub mod qp;
pub mod regs;
pub mod ring;
pub mod rng;
pub mod slot;
pub mod srq;
pub mod transport;
pub mod uar;
pub mod vmxnet3;
pub mod wire;
pub mod world;
pub mod wqe;

#[cfg(feature = "test-utils")]
pub mod testutil;

pub use counters::Counters;
pub use device::{Activity, Core, Device, GidEntry, MmioError, ObjectCounts};
pub use dma::{DmaBuffer, DmaFault, DmaSpace};
pub use dsr::{Caps, DeviceConfig};
pub use intr::InterruptSink;
