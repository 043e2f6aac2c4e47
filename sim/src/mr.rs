//! Memory regions and key checks (reference §8 CREATE_MR, §9, §14; M10, M24-M27).
#![deny(unsafe_code)]

use crate::dma::{DmaFault, DmaSpace};
use crate::pdir::PagedMem;

/// Access flags (§8).
pub mod access {
    #![allow(missing_docs)]
    pub const LOCAL_WRITE: u32 = 1 << 0;
    pub const REMOTE_WRITE: u32 = 1 << 1;
    pub const REMOTE_READ: u32 = 1 << 2;
    pub const REMOTE_ATOMIC: u32 = 1 << 3;
    pub const MW_BIND: u32 = 1 << 4;
    pub const ZERO_BASED: u32 = 1 << 5;
    pub const ON_DEMAND: u32 = 1 << 6;
    /// Every defined bit.
    pub const ALL: u32 = 0x7F;

    /// IB rule: REMOTE_WRITE or REMOTE_ATOMIC requires LOCAL_WRITE.
    pub fn local_write_rule_ok(a: u32) -> bool {
        a & (REMOTE_WRITE | REMOTE_ATOMIC) == 0 || a & LOCAL_WRITE != 0
    }
}

/// CREATE_MR `flags`.
pub mod flags {
    /// All of memory, LOCAL_WRITE only.
    pub const DMA: u32 = 1 << 0;
    /// Fast-register MR.
    pub const FRMR: u32 = 1 << 1;
}

/// What kind of MR and its translation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MrKind {
    /// Registered pages: page *i* at `(start & !0xFFF) + i·4096`.
    Normal {
        /// Virtual start.
        start: u64,
        /// Length.
        length: u64,
        /// Pages.
        pages: PagedMem,
    },
    /// Bus addresses, local only, unbounded.
    Dma,
    /// Fast-register MR.
    Frmr {
        /// Page-list capacity (`nchunks`).
        capacity: u32,
        /// Registered (valid) state.
        valid: bool,
        /// Base after FAST_REG_MR.
        iova: u64,
        /// Length after FAST_REG_MR.
        length: u64,
        /// Pages copied at FAST_REG_MR (M16).
        pages: PagedMem,
    },
}

/// A device-side MR.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mr {
    /// PD handle.
    pub pd: u32,
    /// Access flags.
    pub access: u32,
    /// Current local key.
    pub lkey: u32,
    /// Current remote key.
    pub rkey: u32,
    /// Kind and translation.
    pub kind: MrKind,
}

/// Which key and right an access needs (M24).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// Local gather (no LOCAL_WRITE needed).
    LocalRead,
    /// Local scatter (LOCAL_WRITE).
    LocalWrite,
    /// Remote READ (REMOTE_READ).
    RemoteRead,
    /// Remote WRITE (REMOTE_WRITE).
    RemoteWrite,
}

impl Mr {
    /// True for an FRMR that is registered, or any other MR.
    pub fn is_valid(&self) -> bool {
        !matches!(self.kind, MrKind::Frmr { valid: false, .. })
    }

    /// Checks key, PD, validity, right and range (M24, M25). Zero-length accesses skip key and
    /// range checks, so callers skip calling this for them.
    pub fn check(&self, key: u32, pd: u32, need: Need, va: u64, len: u64) -> bool {
        let (key_ok, right) = match need {
            Need::LocalRead => (key == self.lkey, true),
            Need::LocalWrite => (key == self.lkey, self.access & access::LOCAL_WRITE != 0),
            Need::RemoteRead => (
                key == self.rkey && !matches!(self.kind, MrKind::Dma),
                self.access & access::REMOTE_READ != 0,
            ),
            Need::RemoteWrite => (
                key == self.rkey && !matches!(self.kind, MrKind::Dma),
                self.access & access::REMOTE_WRITE != 0,
            ),
        };
        if !key_ok || !right || pd != self.pd || !self.is_valid() {
            return false;
        }
        match &self.kind {
            MrKind::Dma => true,
            MrKind::Normal { start, length, .. }
            | MrKind::Frmr {
                iova: start,
                length,
                ..
            } => match (va.checked_add(len), start.checked_add(*length)) {
                (Some(end), Some(mr_end)) => va >= *start && end <= mr_end,
                _ => false,
            },
        }
    }

    fn paged(&self) -> Option<(&PagedMem, u64)> {
        match &self.kind {
            MrKind::Normal { start, pages, .. } => Some((pages, start & !0xFFF)),
            MrKind::Frmr { iova, pages, .. } => Some((pages, iova & !0xFFF)),
            MrKind::Dma => None,
        }
    }

    /// Reads MR memory at virtual address `va` (range already checked).
    pub fn read(&self, dma: &DmaSpace, va: u64, out: &mut [u8]) -> Result<(), DmaFault> {
        match self.paged() {
            Some((pages, base)) => pages.read(dma, va.wrapping_sub(base), out),
            None => dma.read(va, out),
        }
    }

    /// Writes MR memory at virtual address `va` (range already checked).
    pub fn write(&self, dma: &DmaSpace, va: u64, data: &[u8]) -> Result<(), DmaFault> {
        match self.paged() {
            Some((pages, base)) => pages.write(dma, va.wrapping_sub(base), data),
            None => dma.write(va, data),
        }
    }
}
