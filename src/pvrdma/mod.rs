//! The PVRDMA hardware layer, written from docs/reference/pvrdma.md (style.md §1: file per
//! object, module per mechanism, after Linux `vmw_pvrdma`).
//!
//! - [`regs`]: BAR1 registers (§3); [`dsr`]: Device Shared Region and caps (§4);
//! - [`pdir`]: page directories (§6); [`ring`]: ring index arithmetic (§7);
//! - [`cmd`]: typed commands and the command channel (§8);
//! - [`wqe`], [`cqe`], [`eqe`]: WQE, CQE and async-event formats (§10, §11, §13);
//! - [`uar`]: doorbell values (§12); [`queue`]: SQ/RQ/SRQ/CQ rings over page directories (§9);
//! - [`port`]: the data path's direct view of those rings (post, poll, doorbell);
//! - [`device`]: bring-up, teardown, interrupts and event dispatch (§5, §13);
//! - [`error`]: [`PvrdmaError`] and its NTSTATUS mapping.

mod bytes;
pub mod cmd;
pub mod cqe;
pub mod device;
pub mod dsr;
pub mod eqe;
pub mod error;
pub mod pdir;
pub mod port;
pub mod queue;
pub mod regs;
pub mod ring;
pub mod table;
pub mod uar;
pub mod wqe;

#[cfg(test)]
pub(crate) mod testdev;

pub use bytes::Sink;
pub use error::PvrdmaError;
