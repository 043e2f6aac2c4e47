//! Shared receive queues (reference §8, §9, §13; M43-M47).
#![deny(unsafe_code)]

use crate::pdir::PagedMem;
use crate::ring::Ring;

/// Ring-state offsets in SRQ page 0 (`rx` half).
pub const PROD_TAIL: u64 = 8;
/// Device-written consumer index.
pub const CONS_HEAD: u64 = 12;

/// A device-side SRQ.
#[derive(Clone, Debug)]
pub struct Srq {
    /// PD handle.
    pub pd: u32,
    /// Ring pages.
    pub mem: PagedMem,
    /// N = `max_wr`.
    pub ring: Ring,
    /// SGE limit.
    pub max_sge: u32,
    /// WQE stride `roundup_pow2(16 + 16·max_sge)`.
    pub stride: u32,
    /// Current limit; 0 = disarmed (M45).
    pub limit: u32,
    /// Device consumer index.
    pub head: u32,
    /// In error (M47).
    pub error: bool,
    /// QPs attached.
    pub refs: u32,
}
