//! The CQ reader (§7, §9, §11, §12): the consumer side of a CQ ring, resolved once when the
//! CQ is created, so that reaping a CQE is a handful of loads with no lock, no table lookup
//! and no allocation: read the device's `prod_tail` (validated, M14), load CQEs, publish
//! `cons_head`. This is the one reader of CQE bytes in the driver; it hands out the raw
//! fields ([`CqeView`]) and the NDK layer validates what it uses.
//!
//! A reader keeps its buffer alive ([`Arc<PagedBuffer>`]). Polls and arms are serialized
//! per CQ (ndkpi.md §5.4), so the reader is not synchronized beyond single-word atomics.
#![allow(unsafe_code)]
#![allow(clippy::multiple_unsafe_ops_per_block)]

use alloc::sync::Arc;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU32, Ordering};

use crate::os::sync::from_device_barrier;

use super::cqe::{CQE_SIZE, CqeView, UdSource};
use super::elements::{Elements, Entry, get64};
use super::error::PvrdmaError;
use super::pdir::PagedBuffer;
use crate::os::Bell;

/// Byte offset of the CQ's ring state (`rx`: `prod_tail`, then `cons_head`) in page 0 (§9).
pub(super) const CQ_STATE: usize = 8;

/// Result of checking a CQ's `prod_tail` against our `cons_head`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CqState {
    /// CQEs ready, the count.
    Ready(u32),
    /// Nothing new.
    Empty,
    /// The device's index failed validation (M14): the ring is unusable.
    Corrupt,
}

/// A CQ's doorbells (§12): the two arms, and POLL, which a poll rings when it finds the ring
/// empty before it looks once more (Linux `pvrdma_poll_one`; a device that fetches
/// completions only when asked writes them before the POLL store returns, M48).
pub struct CqBells {
    /// CQ_ARM.
    pub arm: Bell,
    /// CQ_ARM_SOL.
    pub arm_solicited: Bell,
    /// CQ_POLL.
    pub poll: Bell,
}

/// The consumer side of a CQ ring.
pub struct CqReader {
    elements: Elements,
    // INVARIANT: point to the `rx.prod_tail` and `rx.cons_head` words of page 0 of `_buf`.
    // Two pointers, not one and `add(1)`: each comes from a reference to its own word, which
    // reaches that word only (Stacked Borrows).
    prod_tail: NonNull<AtomicU32>,
    cons_head: NonNull<AtomicU32>,
    /// Our `cons_head` in [0, 2N).
    head: AtomicU32,
    /// 2N − 1.
    wrap: u32,
    /// N, the number of CQEs, the most [`Self::ready`] accepts; 0 once [`Self::stop`]ped.
    /// Written only by `stop`: on the poll path (a corrupt index) or from the async-event
    /// DPC (CQ_ERR), concurrently with a poll, hence atomic. Relaxed: a poll that read N
    /// just before the stop returns what it found (the error callback follows), and the
    /// callback's own synchronization orders every later poll after the stop.
    n: AtomicU32,
    bells: CqBells,
    _buf: Arc<PagedBuffer>,
}

// SAFETY: the raw pointers address memory owned by `_buf` (kept alive) and shared with the
// device; all access is volatile or atomic.
unsafe impl Send for CqReader {}
// SAFETY: as for `Send`.
unsafe impl Sync for CqReader {}

impl CqReader {
    /// A reader on a CQ of `n` CQEs from page 1 of `buf`, its ring state in page 0 (`rx` @8).
    ///
    /// # Errors
    /// [`PvrdmaError::InvalidParameter`] for a ring outside the buffer;
    /// [`PvrdmaError::NoMemory`].
    pub fn new(buf: Arc<PagedBuffer>, n: u32, bells: CqBells) -> Result<CqReader, PvrdmaError> {
        if n > 1 << 30 {
            return Err(PvrdmaError::InvalidParameter);
        }
        let elements = Elements::new(&buf, 1, n, CQE_SIZE as u32)?;
        let word = |off| {
            buf.page(0)
                .and_then(|p| p.view().atomic_u32(off))
                .map(NonNull::from)
                .ok_or(PvrdmaError::InvalidParameter)
        };
        let prod_tail = word(CQ_STATE)?;
        let cons_head = word(CQ_STATE + 4)?;
        Ok(CqReader {
            elements,
            prod_tail,
            cons_head,
            head: AtomicU32::new(0),
            wrap: 2 * n - 1,
            n: AtomicU32::new(n),
            bells,
            _buf: buf,
        })
    }

    /// N.
    pub fn entries(&self) -> u32 {
        self.elements.len()
    }

    /// `prod_tail` for 0, `cons_head` otherwise.
    fn index(&self, i: usize) -> &AtomicU32 {
        let word = if i == 0 {
            self.prod_tail
        } else {
            self.cons_head
        };
        // SAFETY: type invariant.
        unsafe { word.as_ref() }
    }

    /// Our `cons_head`.
    #[inline(always)]
    pub fn head(&self) -> u32 {
        self.head.load(Ordering::Relaxed)
    }

    /// CQEs between `head` and the device's `prod_tail`, after validating it (M14: in
    /// [0, 2N) and at most N ahead); CQE reads that follow are ordered after it.
    #[inline(always)]
    pub fn ready(&self, head: u32) -> CqState {
        let tail = self.index(0).load(Ordering::Acquire);
        if tail == head {
            return CqState::Empty;
        }
        let d = tail.wrapping_sub(head) & self.wrap;
        // `wrap` is 2N − 1, all ones: `tail > wrap` is `tail ∉ [0, 2N)`.
        let n = self.n.load(Ordering::Relaxed);
        if tail > self.wrap || d > n {
            return CqState::Corrupt;
        }
        from_device_barrier();
        CqState::Ready(d)
    }

    /// For a poll that found the ring empty ([`CqState::Empty`]): the POLL doorbell, then one
    /// more look (Linux `pvrdma_poll_one`, M48): a device that writes completions only when
    /// polled has written them before the doorbell store returns. The caller keeps it out of
    /// line, so that only the empty poll pays for it.
    #[inline(always)]
    pub fn poll_device(&self, head: u32) -> CqState {
        self.bells.poll.ring();
        self.ready(head)
    }

    /// Loads the CQE at free-running index `i` (one of those [`Self::ready`] counted).
    #[inline(always)]
    pub fn load(&self, i: u32) -> CqeView {
        let p = self.elements.element(i);
        // SAFETY: `p` is a 64-byte CQE slot of the ring; the offsets are 8-aligned.
        let (w0, w1, w2, w3, w4) = unsafe {
            (
                get64(p, 0),
                get64(p, 8),
                get64(p, 16),
                get64(p, 24),
                get64(p, 32),
            )
        };
        CqeView::from_words(w0, w1, w2, w3, w4)
    }

    /// CQE `i` (one of those [`Self::ready`] counted), without taking a [`CqeRing`] first:
    /// for one CQE.
    #[inline(always)]
    pub fn at(&self, i: u32) -> CqeRef<'_> {
        CqeRef {
            // INVARIANT: element `i` of the ring, a 64-byte slot kept alive by `_buf`.
            p: self.elements.entry(i).at,
            _ring: core::marker::PhantomData,
        }
    }

    /// The three fields the completion fast path reads of CQE `i`: `wr_id`, `qp` and
    /// `status`.
    #[inline(always)]
    pub fn load_core(&self, i: u32) -> (u64, u64, u32) {
        let p = self.elements.element(i);
        // SAFETY: as in `load`.
        let (w0, w1, w2) = unsafe { (get64(p, 0), get64(p, 8), get64(p, 16)) };
        (w0, w1, CqeView::status_of(w2))
    }

    /// The ring as a poll's loop reads it ([`CqeRing`]).
    #[inline(always)]
    pub fn ring(&self) -> CqeRing<'_> {
        CqeRing {
            entries: self.elements.all(),
            wrap: self.wrap,
        }
    }

    /// Consumes every CQE before `head` (a value from [`Self::next`]): our reads of them
    /// happen before the device may reuse their slots.
    #[inline(always)]
    pub fn consume(&self, head: u32) {
        self.head.store(head, Ordering::Relaxed);
        self.index(1).store(head, Ordering::Release);
    }

    /// The index after `i`.
    #[inline(always)]
    pub fn next(&self, i: u32) -> u32 {
        i.wrapping_add(1) & self.wrap
    }

    /// Never reads the ring again: from now on [`Self::ready`] reports any index but our own
    /// `cons_head` as [`CqState::Corrupt`] (the device's index failed validation, or the
    /// device reported the CQ failed: nothing it says about the ring can be trusted, however
    /// sane it looks later, and a failed CQ returns no completions, ndkpi.md §5.4). `ready`
    /// already compares with N, so the poll gains no test. Any thread may call it.
    pub fn stop(&self) {
        self.n.store(0, Ordering::Relaxed);
    }

    /// Whether [`Self::stop`] was called.
    pub fn is_stopped(&self) -> bool {
        self.n.load(Ordering::Relaxed) == 0
    }

    /// True when CQEs are waiting (or the ring is corrupt: the caller must look).
    #[inline(always)]
    pub fn has_entries(&self) -> bool {
        // `ready` is Empty exactly when the device's index equals ours.
        self.index(0).load(Ordering::Acquire) != self.head()
    }

    /// For a ring [`Self::has_entries`] found empty: the POLL doorbell, then
    /// [`Self::has_entries`] again (see [`Self::poll_device`]). Out of line: only an arm of
    /// an empty CQ pays for it.
    #[cold]
    #[inline(never)]
    pub fn poll_has_entries(&self) -> bool {
        self.bells.poll.ring();
        self.has_entries()
    }

    /// Arms the CQ: CQ_ARM_SOL if `solicited_only`, else CQ_ARM (§12, M18).
    pub fn arm(&self, solicited_only: bool) {
        if solicited_only {
            self.bells.arm_solicited.ring();
        } else {
            self.bells.arm.ring();
        }
    }

    /// The sender of the UD or GSI receive in CQE `i` ([`UdSource`]), read where the poll
    /// reads its [`CqeView`] (before [`Self::consume`] gives the slot back).
    pub fn load_ud(&self, i: u32) -> UdSource {
        let p = self.elements.element(i);
        // SAFETY: as in `load`.
        let (w4, w6, w7) = unsafe { (get64(p, 32), get64(p, 48), get64(p, 56)) };
        UdSource::from_words(w4, w6, w7)
    }

    /// Test producer: writes `cqe` at the device's `prod_tail` and advances it, as the
    /// device would (fakes of the hardware seam use it; the driver never produces CQEs).
    #[doc(hidden)]
    pub fn produce_for_test(&self, cqe: &[u8; CQE_SIZE]) {
        let tail = self.index(0).load(Ordering::Relaxed);
        let p = self.elements.element(tail);
        for (k, b) in cqe.iter().enumerate() {
            // SAFETY: `k` < 64: inside the CQE.
            unsafe { core::ptr::write_volatile(p.add(k), *b) };
        }
        self.index(0)
            .store(tail.wrapping_add(1) & self.wrap, Ordering::Release);
    }
}

/// One CQE of the ring, for the completion fast path: each field is read where it is
/// tested, with one load (which the compiler can fold into the test), so a CQE that fails
/// a test costs no load of the fields after it. Raw as the device wrote them.
#[derive(Clone, Copy)]
pub struct CqeRef<'a> {
    // INVARIANT: a 64-byte, 8-aligned CQE slot of a ring that lives for 'a.
    p: NonNull<u8>,
    _ring: core::marker::PhantomData<&'a ()>,
}

impl CqeRef<'_> {
    /// `status` @20.
    #[inline(always)]
    pub fn status(&self) -> u32 {
        // SAFETY: inside the slot (type invariant), aligned.
        unsafe { get32(self.p.as_ptr(), 20) }
    }

    /// The low half of `qp` @8: the QP handle (Linux matches only these bits; the upper
    /// half is not ours to trust either way).
    #[inline(always)]
    pub fn handle(&self) -> u32 {
        // SAFETY: as in `status`.
        unsafe { get32(self.p.as_ptr(), 8) }
    }

    /// `wr_id` @0.
    #[inline(always)]
    pub fn wr_id(&self) -> u64 {
        // SAFETY: as in `status`.
        unsafe { get64(self.p.as_ptr(), 0) }
    }

    /// `byte_len` @24.
    #[inline(always)]
    pub fn byte_len(&self) -> u32 {
        // SAFETY: as in `status`.
        unsafe { get32(self.p.as_ptr(), 24) }
    }

    /// `wc_flags` @36 ([`super::cqe::WcFlags`]).
    #[inline(always)]
    pub fn wc_flags(&self) -> u32 {
        // SAFETY: as in `status`.
        unsafe { get32(self.p.as_ptr(), 36) }
    }
}

/// # Safety
/// `p + off` is valid for an aligned 4-byte read.
#[inline(always)]
unsafe fn get32(p: *const u8, off: usize) -> u32 {
    // SAFETY: caller contract.
    u32::from_le(unsafe { core::ptr::read_volatile(p.add(off).cast::<u32>()) })
}

/// A poll's copy of what locates a CQE: the element table (address and size) and the index
/// wrap, read once. [`CqReader`]'s own methods reload them after every atomic or volatile
/// access (the compiler must assume those change memory), which a loop over CQEs pays per
/// CQE; with this copy in registers, CQE `i` is one `and` and one load away.
#[derive(Clone, Copy)]
pub struct CqeRing<'a> {
    // INVARIANT: the reader's element table: N entries, N a power of two, each a 64-byte
    // CQE slot of the ring.
    entries: &'a [Entry<()>],
    wrap: u32,
}

impl CqeRing<'_> {
    /// The CQE at index `i`, which may run free past 2N: only its residue modulo N is used.
    #[inline(always)]
    fn element(&self, i: u32) -> NonNull<u8> {
        // N is a power of two (type invariant), so the masked index is below N.
        let at = i as usize & (self.entries.len().wrapping_sub(1));
        // SAFETY: `at` < N = `entries.len()`.
        unsafe { self.entries.get_unchecked(at) }.at
    }

    /// CQE `i` (a free-running index, one of those [`CqReader::ready`] counted).
    #[inline(always)]
    pub fn at(&self, i: u32) -> CqeRef<'_> {
        CqeRef {
            p: self.element(i),
            _ring: core::marker::PhantomData,
        }
    }

    /// A free-running index (from `head`) as a ring index in [0, 2N), for
    /// [`CqReader::consume`].
    #[inline(always)]
    pub fn wrap(&self, i: u32) -> u32 {
        i & self.wrap
    }
}

#[cfg(test)]
mod tests;
