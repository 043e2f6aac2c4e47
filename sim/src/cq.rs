//! Completion queues (reference §9 CQ layout, §11, §13 arm semantics; M18, M40, M48).
#![deny(unsafe_code)]

use std::collections::VecDeque;

use crate::pdir::PagedMem;
use crate::ring::Ring;
use crate::wqe::Cqe;

/// Arm state of a CQ (M18): ARM wins over ARM_SOL; consumed by one CQNE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arm {
    /// Not armed.
    None,
    /// Next solicited or error completion.
    Solicited,
    /// Next completion.
    Any,
}

/// A device-side CQ.
#[derive(Clone, Debug)]
pub struct Cq {
    /// Ring pages (page 0 = ring state, CQEs from byte 4096).
    pub mem: PagedMem,
    /// N = `cqe`.
    pub ring: Ring,
    /// Device-owned producer index (published at page-0 offset 8).
    pub tail: u32,
    /// Arm state.
    pub arm: Arm,
    /// Stopped after overflow or a bad `cons_head` (M14, M40).
    pub stopped: bool,
    /// QPs using this CQ.
    pub refs: u32,
    /// Lazy completion (M48): CQEs produced but not yet written to the ring, oldest first,
    /// each with whether it is solicited (M18). Always empty with the option off.
    pub held: VecDeque<(Cqe, bool)>,
}

/// Ring-state offsets in CQ page 0.
pub const PROD_TAIL: u64 = 8;
/// Driver-written consumer index.
pub const CONS_HEAD: u64 = 12;
