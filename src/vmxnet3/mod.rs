//! The vmxnet3 hardware layer (15AD:07B0), written from docs/reference/vmxnet3.md: the
//! Ethernet half of a VMware vNIC whose function 1 is the PVRDMA device (§1), below the NDIS
//! miniport glue that will carry the IP interface (issue 24). It uses only `crate::os`.
//!
//! - [`regs`]: BAR0/BAR1 registers and commands (§3.2, §3.3);
//! - [`shared`]: DriverShared and the queue descriptors (§3.5, §3.6);
//! - [`desc`]: the ring descriptors and the decoders of what the device writes (§3.7);
//! - [`tx`]: the Tx queue (frames from scatter-gather lists, completions);
//! - [`rx`]: the Rx queue (preallocated buffers, completions, buffers lent to the consumer);
//! - [`device`]: bring-up (revision and UPT negotiation, DriverShared, ACTIVATE_DEV), MSI-X
//!   with the ISR → DPC pattern of `pvrdma::device`, events (link, queue errors), the Rx
//!   filter, statistics, reset, teardown;
//! - [`error`]: the error type, [`Vmxnet3Error`].
//!
//! What this layer does not do yet: more than one Tx and one Rx queue (no RSS), offloads
//! (checksum, TSO/LSO, LRO/RSC, VLAN insertion and stripping), jumbo frames (Rx ring 1 is left
//! absent: frames up to 2048 bytes, MTU ≤ 2030), interrupt moderation, wake-on-LAN, revisions
//! above 1 (every revision-1 layout is used whatever the device offers above it), INTx/MSI.

mod batch;
pub mod desc;
pub mod device;
pub mod error;
pub mod regs;
pub mod rx;
pub mod shared;
pub mod tx;

pub use device::{
    Config, DriverCounters, Fault, LinkState, NicClient, RxMode, Stats, TxStatus, Vmxnet3,
};
pub use error::Vmxnet3Error;
pub use rx::{RX_BUF, RxBatch, RxFrame};
pub use tx::{SendError, Sge};
