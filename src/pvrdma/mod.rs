//! The PVRDMA hardware layer, written from docs/reference/pvrdma.md (style.md §1: file per
//! object, module per mechanism, after Linux `vmw_pvrdma`).
//!
//! - [`regs`]: BAR1 registers (§3); [`dsr`]: Device Shared Region and caps (§4);
//! - [`pdir`]: page directories (§6); [`ring`]: ring index arithmetic (§7);
//! - [`cmd`]: typed commands and the command channel (§8);
//! - [`wqe`], [`cqe`], [`eqe`]: WQE, CQE and async-event formats (§10, §11, §13): the one
//!   definition of every opcode, flag, status and field offset, which the NDK layer imports;
//! - [`uar`]: doorbell values, bound to the UAR page as the data path's `os::Bell` (§12);
//! - [`queue`]: SQ/RQ/SRQ/CQ buffers over page directories and their geometry (§9);
//! - [`wq`]: the work-queue writer (post: WQE, `prod_tail`, doorbell), the one writer of
//!   WQEs; [`cq`]: the CQ reader (poll: validated `prod_tail`, CQE fields, `cons_head`, arm),
//!   the one reader of CQEs;
//! - [`table`]: bounds-checked tables keyed by device handle;
//! - `device_enum`: the one way a C enum of the device is declared and decoded;
//! - [`device`]: bring-up, teardown, interrupts and event dispatch (§5, §13);
//! - [`verbs`]: the device's objects made and unmade by commands, their events routed, the
//!   rings of the data path handed out (§1 mapping, §8–§13), in device terms only;
//! - [`error`]: [`PvrdmaError`] and its NTSTATUS mapping.

mod bytes;
pub mod cmd;
pub mod cq;
pub mod cqe;
pub mod device;
mod device_enum;
pub mod dsr;
mod elements;
pub mod eqe;
pub mod error;
pub mod pdir;
pub mod queue;
pub mod regs;
pub mod ring;
pub mod table;
pub mod uar;
pub mod ud;
pub mod verbs;
pub mod wq;
pub mod wqe;

#[cfg(test)]
pub(crate) mod testdev;

pub use bytes::Sink;
pub use error::PvrdmaError;
