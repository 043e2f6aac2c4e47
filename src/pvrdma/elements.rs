//! The element table of one ring (§6, §9), shared by the work-queue writer ([`super::wq`])
//! and the CQ reader ([`super::cq`]): the CPU address of every element, resolved once when
//! the ring's writer or reader is built, so a post or a poll finds element `i` with one load
//! instead of the page arithmetic.
//!
//! The buffer is allocated page by page (§6): element `i` lives at
//! `pages[(i·stride) >> 12] + (i·stride & 4095)`; strides are powers of two ≤ 4096, so an
//! element never straddles a page.
#![allow(unsafe_code)]

use crate::os::alloc::KVec;
use crate::os::dma::{PAGE_SHIFT, PAGE_SIZE};
use core::ptr::NonNull;

use super::error::PvrdmaError;
use super::pdir::PagedBuffer;

/// One element of a ring: its address, and what the ring's producer records beside it
/// (`()` for nothing), so that one index computation finds both.
pub(super) struct Entry<R> {
    pub(super) at: NonNull<u8>,
    pub(super) rec: R,
}

/// The address of every element of one ring (8 bytes per element, against 64 or more bytes
/// of element), next to the producer's record of the element, if any
/// ([`super::wq::WqWriter::with_records`]).
pub(super) struct Elements<R = ()> {
    // INVARIANT: `entries.len()` = `mask + 1`; `entries[i].at` is the CPU address of element
    // `i`, a `1 << shift`-byte, 8-aligned run inside one live page of the owning buffer.
    entries: KVec<Entry<R>>,
    /// log2 of the element size (≤ 12).
    shift: u32,
    /// N − 1 (N a power of two).
    mask: u32,
}

impl Elements {
    /// The `n` elements of `stride` bytes from page `first` of `buf`.
    pub(super) fn new(
        buf: &PagedBuffer,
        first: u32,
        n: u32,
        stride: u32,
    ) -> Result<Elements, PvrdmaError> {
        if !n.is_power_of_two() || !stride.is_power_of_two() || stride as usize > PAGE_SIZE {
            return Err(PvrdmaError::InvalidParameter);
        }
        let mut entries = KVec::try_with_capacity(n as usize)?;
        for i in 0..n {
            let off = u64::from(i) * u64::from(stride);
            let page = u32::try_from(off >> PAGE_SHIFT)
                .ok()
                .and_then(|p| first.checked_add(p))
                .and_then(|p| buf.page(p))
                .ok_or(PvrdmaError::InvalidParameter)?;
            let view = page
                .view()
                .sub((off as usize) & (PAGE_SIZE - 1), stride as usize)
                .ok_or(PvrdmaError::InvalidParameter)?;
            entries
                .push_within_capacity(Entry {
                    at: view.as_non_null(),
                    rec: (),
                })
                .map_err(|_| PvrdmaError::NoMemory)?;
        }
        Ok(Elements {
            entries,
            shift: stride.trailing_zeros(),
            mask: n - 1,
        })
    }
}

impl<R> Elements<R> {
    /// The same elements with a record each, from `rec`.
    pub(super) fn with_records<S>(
        &self,
        mut rec: impl FnMut() -> S,
    ) -> Result<Elements<S>, PvrdmaError> {
        let mut entries = KVec::try_with_capacity(self.entries.len())?;
        for e in self.entries.iter() {
            entries
                .push_within_capacity(Entry {
                    at: e.at,
                    rec: rec(),
                })
                .map_err(|_| PvrdmaError::NoMemory)?;
        }
        // INVARIANT: the same addresses, as many.
        Ok(Elements {
            entries,
            shift: self.shift,
            mask: self.mask,
        })
    }

    /// N.
    pub(super) fn len(&self) -> u32 {
        self.mask + 1
    }

    /// The entry of free-running index `i`.
    #[inline(always)]
    pub(super) fn entry(&self, i: u32) -> &Entry<R> {
        // Unchecked because it pays: a checked `get` with a cold failure measured +2.0 per
        // post (read, chain16, send, receive, fastreg) and +4.0 per CQE (poll1, poll16);
        // masking by `len - 1` instead of `mask`, +4.0 and +8 to +10.
        // SAFETY: `i & mask < entries.len()` (type invariant).
        unsafe { self.entries.get_unchecked((i & self.mask) as usize) }
    }

    /// Every entry, for a caller that finds many in a row (a poll): it reads the table's
    /// address and size once, where [`Self::entry`] reloads them after every atomic access.
    /// The length is N, a power of two (type invariant).
    #[inline(always)]
    pub(super) fn all(&self) -> &[Entry<R>] {
        &self.entries
    }

    /// The element of free-running index `i`: `stride()` bytes, 8-aligned, in a live page.
    #[inline(always)]
    pub(super) fn element(&self, i: u32) -> *mut u8 {
        self.entry(i).at.as_ptr()
    }

    /// Bytes per element.
    pub(super) fn stride(&self) -> usize {
        1 << self.shift
    }
}

/// # Safety
/// `p + off` is valid for an aligned 8-byte read.
#[inline(always)]
pub(super) unsafe fn get64(p: *const u8, off: usize) -> u64 {
    // SAFETY: caller contract: `p + off` is in the same element.
    let at = unsafe { p.add(off) };
    // SAFETY: caller contract: valid and aligned for 8 bytes.
    u64::from_le(unsafe { core::ptr::read_volatile(at.cast::<u64>()) })
}
