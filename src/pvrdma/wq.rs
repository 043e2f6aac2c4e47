//! The work-queue writer (§7, §9, §10, §12): the producer side of a driver-produced ring (QP
//! send queue, QP receive queue, SRQ), resolved once when the queue is created, so that
//! posting a WQE is a handful of stores with no lock, no table lookup and no allocation:
//! write the WQE into its slot ([`WqSlot::write_send`], [`WqSlot::write_recv`]), then hand it
//! over: publish `prod_tail`, ring the doorbell ([`WqSlot::hand_over`]). The poster records
//! that the slot is taken between the two, with no call from here back into it. This is the
//! one writer of WQE bytes in the driver.
//!
//! The ring's WQE format is part of the writer's type ([`SendWriter`], [`RecvWriter`]): only
//! a send writer writes send WQEs, only a receive writer receive WQEs, and each writer's
//! constructor checks that its elements hold its header and its SGEs, so no safe call
//! writes past an element. A writer keeps its buffer alive ([`Arc<PagedBuffer>`]), so the
//! memory outlives every post even when the device's DESTROY response has already released
//! the queue's other owner.
//!
//! Writers are `Sync` but not internally synchronized beyond single-word atomics: each ring
//! has one producer (the consumer serializes posts per queue, ndkpi.md §5.3). Two concurrent
//! producers would interleave WQEs, never touch memory outside the ring.
//!
//! The per-slot record ([`WqWriter::with_records`]) is the one place where the hardware
//! layer carries something of the layer above: a generic `R` that the NDK layer defines and
//! fills (its request bookkeeping), kept beside each WQE address so a post finds both with
//! one index computation. The hardware layer never reads it.
#![allow(unsafe_code)]
// The accessors below store several words of one ring element in a block whose single SAFETY
// argument (the element is live, aligned and large enough) covers every word; repeating it
// per store would say the same thing ten times.
#![allow(clippy::multiple_unsafe_ops_per_block)]

use alloc::sync::Arc;
use core::marker::PhantomData;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use crate::os::dma::PAGE_SIZE;
use crate::os::sync::to_device_barrier;

use super::elements::{Elements, Entry};
use super::error::PvrdmaError;
use super::pdir::PagedBuffer;
use super::wqe::{RQ_WQE_HDR_SIZE, SGE_SIZE, SQ_WQE_HDR_SIZE, Sge, SqHeader};
use crate::os::Bell;

/// # Safety
/// `p` is valid for an aligned 8-byte write.
#[inline(always)]
unsafe fn put64(p: *mut u8, off: usize, v: u64) {
    // SAFETY: caller contract (every element offset used here is 8-aligned in a page-aligned,
    // power-of-two sized element).
    unsafe { core::ptr::write_volatile(p.add(off).cast::<u64>(), v.to_le()) }
}

/// Where a driver-produced ring lives in its buffer (§9).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WqGeometry {
    /// Page of WQE 0.
    pub first_page: u32,
    /// N (a power of two).
    pub n: u32,
    /// Bytes per WQE (a power of two ≤ 4096).
    pub stride: u32,
    /// SGEs per WQE.
    pub max_sge: u32,
    /// Byte offset of `prod_tail` in page 0 (`cons_head` follows).
    pub state: usize,
}

mod sealed {
    pub trait Sealed {}
}

/// The WQE format of a driver-produced ring, as a type: [`SendWqe`] or [`RecvWqe`]. Sealed:
/// the writer's memory safety rests on [`Self::HEADER`] being the header it stores.
pub trait WqKind: sealed::Sealed {
    /// Header bytes before the SGEs of a WQE of this format.
    const HEADER: usize;
}

/// The WQEs of a QP send queue: `pvrdma_sq_wqe_hdr` (80 bytes) and SGEs (§10).
#[derive(Debug)]
pub enum SendWqe {}

/// The WQEs of a QP receive queue or an SRQ: `pvrdma_rq_wqe_hdr` (16 bytes) and SGEs (§10).
#[derive(Debug)]
pub enum RecvWqe {}

impl sealed::Sealed for SendWqe {}
impl sealed::Sealed for RecvWqe {}

impl WqKind for SendWqe {
    const HEADER: usize = SQ_WQE_HDR_SIZE;
}

impl WqKind for RecvWqe {
    const HEADER: usize = RQ_WQE_HDR_SIZE;
}

/// The writer of a QP send queue.
pub type SendWriter<R = ()> = WqWriter<SendWqe, R>;

/// The writer of a QP receive queue or of an SRQ.
pub type RecvWriter<R = ()> = WqWriter<RecvWqe, R>;

/// The producer side of a driver-produced ring (QP SQ, QP RQ, SRQ) whose WQE format is `K`
/// ([`SendWqe`], [`RecvWqe`]), with a record of type `R` per slot for the producer's
/// bookkeeping ([`Self::with_records`]; none by default).
///
/// A send WQE is written only through a send writer, a receive WQE only through a receive
/// writer: an 80-byte send header cannot land in the smaller element of a receive ring.
///
/// ```compile_fail
/// # use pvrdma_ndk::pvrdma::wq::RecvWriter;
/// # use pvrdma_ndk::pvrdma::wqe::SqHeader;
/// fn post(rq: &RecvWriter) -> bool {
///     rq.slot(0).write_send(0, &SqHeader::default(), &[])
/// }
/// ```
///
/// ```compile_fail
/// # use pvrdma_ndk::pvrdma::wq::SendWriter;
/// fn post(sq: &SendWriter) -> bool {
///     sq.slot(0).write_recv(0, &[])
/// }
/// ```
///
/// whereas each writer writes its own format:
///
/// ```
/// # use pvrdma_ndk::pvrdma::wq::{RecvWriter, SendWriter};
/// # use pvrdma_ndk::pvrdma::wqe::SqHeader;
/// fn post(sq: &SendWriter, rq: &RecvWriter) -> bool {
///     sq.slot(0).write_send(0, &SqHeader::default(), &[]) && rq.slot(0).write_recv(0, &[])
/// }
/// ```
///
/// `#[repr(C)]`, in the order a post reads it: the element table, `prod_tail`, the wrap
/// mask, the owed-doorbell flag and the doorbell's word and value make its first 60 bytes
/// (a post's whole use of the writer, within one or two cache lines however the owner is
/// placed); what only creation, diagnostics or multi-SGE posts read comes after.
#[repr(C)]
pub struct WqWriter<K, R = ()> {
    elements: Elements<R>,
    // INVARIANT: point to this ring's `prod_tail` and `cons_head` words in page 0 of `_buf`.
    // Two pointers, not one and `add(1)`: each comes from a reference to its own word, which
    // reaches that word only (Stacked Borrows).
    prod_tail: NonNull<AtomicU32>,
    /// 2N − 1.
    wrap: u32,
    /// A post left its doorbell to a later one ([`WqSlot::hand_over`] with `defer`) and no
    /// doorbell has covered it yet. Only the ring's one producer reads or writes it.
    doorbell_owed: AtomicBool,
    bell: Bell,
    // INVARIANT: ≥ 1, and an element holds the `K::HEADER`-byte header of the writer's WQE
    // format and this many SGEs.
    /// SGEs a WQE of this ring can hold.
    max_sge: u32,
    cons_head: NonNull<AtomicU32>,
    _buf: Arc<PagedBuffer>,
    /// The WQE format (no value: `fn() -> K` so that it adds no auto-trait bound).
    _kind: PhantomData<fn() -> K>,
}

// SAFETY: the raw pointers address memory owned by `_buf` (kept alive) and shared with the
// device; all access is volatile or atomic. The records are `R`s like any other field; `K`
// is a type-level tag with no value.
unsafe impl<K, R: Send> Send for WqWriter<K, R> {}
// SAFETY: as for `Send`; only `&R` is handed out.
unsafe impl<K, R: Sync> Sync for WqWriter<K, R> {}

impl<K: WqKind> WqWriter<K> {
    /// A writer on the ring `g` of `buf`, whose WQEs have format `K`.
    ///
    /// # Errors
    /// [`PvrdmaError::InvalidParameter`] for a geometry outside the buffer, no SGE per WQE or
    /// a stride that cannot hold a `K` header and `max_sge` SGEs; [`PvrdmaError::NoMemory`].
    pub fn new(buf: Arc<PagedBuffer>, g: WqGeometry, bell: Bell) -> Result<Self, PvrdmaError> {
        let WqGeometry {
            first_page,
            n,
            stride,
            max_sge,
            state,
        } = g;
        let need = (max_sge as usize)
            .checked_mul(SGE_SIZE)
            .and_then(|b| b.checked_add(K::HEADER))
            .ok_or(PvrdmaError::InvalidParameter)?;
        if max_sge == 0 || need > stride as usize || n > 1 << 30 {
            return Err(PvrdmaError::InvalidParameter);
        }
        let elements = Elements::new(&buf, first_page, n, stride)?;
        let word = |off| {
            buf.page(0)
                .and_then(|p| p.view().atomic_u32(off))
                .filter(|_| state + 8 <= PAGE_SIZE)
                .map(NonNull::from)
                .ok_or(PvrdmaError::InvalidParameter)
        };
        let prod_tail = word(state)?;
        let cons_head = word(state + 4)?;
        Ok(WqWriter {
            elements,
            prod_tail,
            cons_head,
            wrap: 2 * n - 1,
            max_sge,
            bell,
            doorbell_owed: AtomicBool::new(false),
            _buf: buf,
            _kind: PhantomData,
        })
    }
}

impl<K, R> WqWriter<K, R> {
    /// The same writer with a record per slot, each from `rec` (allocates: creation time
    /// only). The poster keeps what it needs to know about each posted WQE there, so one
    /// index computation finds both the record and the WQE ([`Self::slot`]).
    ///
    /// # Errors
    /// [`PvrdmaError::NoMemory`].
    pub fn with_records<S>(self, rec: impl FnMut() -> S) -> Result<WqWriter<K, S>, PvrdmaError> {
        let elements = self.elements.with_records(rec)?;
        // INVARIANT: the same elements, format and SGE count.
        Ok(WqWriter {
            elements,
            prod_tail: self.prod_tail,
            cons_head: self.cons_head,
            wrap: self.wrap,
            max_sge: self.max_sge,
            bell: self.bell,
            doorbell_owed: self.doorbell_owed,
            _buf: self._buf,
            _kind: PhantomData,
        })
    }

    /// N.
    pub fn entries(&self) -> u32 {
        self.elements.len()
    }

    /// SGEs per WQE.
    pub fn max_sge(&self) -> u32 {
        self.max_sge
    }

    fn prod_tail(&self) -> &AtomicU32 {
        // SAFETY: type invariant.
        unsafe { self.prod_tail.as_ref() }
    }

    /// The record of free-running index `index`.
    #[inline(always)]
    pub fn record(&self, index: u32) -> &R {
        &self.elements.entry(index).rec
    }

    /// Slot `index` (a free-running index), resolved once for its record and its WQE.
    #[inline(always)]
    pub fn slot(&self, index: u32) -> WqSlot<'_, K, R> {
        // INVARIANT: an entry of this writer, whose elements hold a `K` WQE of `max_sge`
        // SGEs, kept alive by `self._buf` for as long as `self` is borrowed.
        WqSlot {
            writer: self,
            entry: self.elements.entry(index),
            index,
        }
    }

    /// The rest of a post once WQE `index` is written and the poster has recorded it: the
    /// barrier that orders the WQE's bytes (and the poster's record) before `prod_tail` =
    /// `index + 1 mod 2N` (§7), then the doorbell (§12) unless `defer`.
    #[inline(always)]
    fn hand_over(&self, index: u32, defer: bool) {
        self.publish(index.wrapping_add(1));
        if defer {
            self.doorbell_owed.store(true, Ordering::Relaxed);
        } else {
            self.ring_doorbell();
            self.doorbell_owed.store(false, Ordering::Relaxed);
        }
    }

    /// Rings the doorbell a deferred post left owed, if any (a chain cut short by an inline
    /// failure, a flush: what was posted still reaches the device).
    #[inline(always)]
    pub fn ring_owed(&self) {
        if self.doorbell_owed.load(Ordering::Relaxed) {
            self.ring_doorbell();
            self.doorbell_owed.store(false, Ordering::Relaxed);
        }
    }

    /// Hands every WQE before free-running index `next` to the device: barrier, then
    /// `prod_tail` = `next mod 2N` (§7).
    #[inline(always)]
    pub fn publish(&self, next: u32) {
        to_device_barrier();
        self.prod_tail().store(next & self.wrap, Ordering::Release);
    }

    /// Rings this ring's doorbell (§12).
    #[inline(always)]
    pub fn ring_doorbell(&self) {
        self.bell.ring();
    }

    /// Our `prod_tail` as last published (diagnostics and tests).
    pub fn published(&self) -> u32 {
        self.prod_tail().load(Ordering::Relaxed)
    }

    /// The device's `cons_head` as it stands (diagnostics; never used to post).
    pub fn device_cons_head(&self) -> u32 {
        // SAFETY: type invariant.
        let c = unsafe { self.cons_head.as_ref() };
        c.load(Ordering::Relaxed)
    }

    /// Copies WQE `index` out of the ring (tests and diagnostics).
    pub fn read_element(&self, index: u32, out: &mut [u8]) {
        let p = self.elements.element(index);
        for (i, o) in out.iter_mut().take(self.elements.stride()).enumerate() {
            // SAFETY: `i` < stride: inside the element.
            *o = unsafe { core::ptr::read_volatile(p.add(i)) };
        }
    }
}

/// One slot of a [`WqWriter`] of WQE format `K`: its record and its WQE (the caller owns
/// the slot: its index was retired, so the device is done with it).
pub struct WqSlot<'a, K, R> {
    writer: &'a WqWriter<K, R>,
    // INVARIANT: `entry` is `writer`'s entry of `index`: `entry.at` is 8-aligned and valid for
    // writes of a `K` header and `writer.max_sge` (≥ 1) SGEs for 'a. (The address is loaded
    // where a WQE is written, not before: a post that stores its record first keeps one
    // register free.)
    entry: &'a Entry<R>,
    /// The free-running index.
    index: u32,
}

impl<'a, K, R> WqSlot<'a, K, R> {
    /// The slot's record.
    #[inline(always)]
    pub fn record(&self) -> &'a R {
        &self.entry.rec
    }

    /// SGEs this WQE holds.
    pub fn max_sge(&self) -> u32 {
        self.writer.max_sge
    }

    /// False for more SGEs than a WQE holds. A WQE holds at least one (type invariant), so
    /// a post whose SGE count is known to be 0 or 1 compiles this away.
    #[inline(always)]
    fn fits(&self, sges: &[Sge]) -> bool {
        sges.len() <= 1 || sges.len() <= self.writer.max_sge as usize
    }
}

impl<K, R> WqSlot<'_, K, R> {
    /// Hands the WQE written in this slot ([`Self::write_send`], [`Self::write_recv`]) to
    /// the device: publishes `prod_tail` to cover it and rings the doorbell, or with `defer`
    /// leaves the doorbell owed to the next post ([`WqWriter::ring_owed`]; a receive is never
    /// deferred).
    ///
    /// The poster records that the slot is taken before this, because the device may run a
    /// WQE as soon as `prod_tail` covers it, without waiting for its doorbell (M17 runs an SQ
    /// until empty), so its CQE can be polled on another thread before the post returns.
    #[inline(always)]
    pub fn hand_over(self, defer: bool) {
        self.writer.hand_over(self.index, defer);
    }
}

impl<R> WqSlot<'_, SendWqe, R> {
    /// Writes the send WQE (§10: `wr_id` @0, `num_sge` @8, `opcode`/`send_flags` @16, `ex`
    /// @24, the `wr` union @32, SGEs @80); `false` (nothing written) for more SGEs than the
    /// ring holds.
    #[inline(always)]
    pub fn write_send(&self, wr_id: u64, h: &SqHeader, sges: &[Sge]) -> bool {
        if !self.fits(sges) {
            return false;
        }
        let p = self.entry.at.as_ptr();
        // SAFETY: `p` is a whole element of a send ring (type invariant), 80 + 16·max_sge
        // bytes at least (`SendWqe::HEADER`, checked in `WqWriter::new`), page-aligned runs
        // so every word offset is aligned.
        unsafe {
            put64(p, 0, wr_id);
            put64(p, 8, sges.len() as u64);
            put64(p, 16, h.op_word);
            put64(p, 24, u64::from(h.ex));
            let [b0, b1, b2, b3, b4, b5] = h.body;
            put64(p, 32, b0);
            put64(p, 40, b1);
            put64(p, 48, b2);
            put64(p, 56, b3);
            put64(p, 64, b4);
            put64(p, 72, b5);
        }
        // SAFETY: `sges.len() <= max_sge` (`fits`), which the element holds after the
        // header.
        unsafe { put_sges(p.add(SQ_WQE_HDR_SIZE), sges) };
        true
    }
}

impl<R> WqSlot<'_, RecvWqe, R> {
    /// Writes the receive WQE (RQ or SRQ format, §10: `wr_id` @0, `num_sge` @8, SGEs @16);
    /// `false` for too many SGEs.
    #[inline(always)]
    pub fn write_recv(&self, wr_id: u64, sges: &[Sge]) -> bool {
        if !self.fits(sges) {
            return false;
        }
        let p = self.entry.at.as_ptr();
        // SAFETY: `p` is a whole element of a receive ring (type invariant), 16 + 16·max_sge
        // bytes at least (`RecvWqe::HEADER`, checked in `WqWriter::new`), page-aligned runs
        // so every word offset is aligned; `fits` bounds the SGEs.
        unsafe {
            put64(p, 0, wr_id);
            put64(p, 8, sges.len() as u64);
            put_sges(p.add(RQ_WQE_HDR_SIZE), sges);
        }
        true
    }
}

/// # Safety
/// `p` is 8-aligned and valid for `16 · sges.len()` bytes of writes.
#[inline(always)]
unsafe fn put_sges(p: *mut u8, sges: &[Sge]) {
    match sges {
        [] => {}
        // SAFETY: caller contract (one SGE).
        [one] => unsafe { put_sge(p, 0, one) },
        // SAFETY: caller contract.
        many => unsafe { put_many_sges(p, many) },
    }
}

/// `pvrdma_sge` (§10): `addr` @0, `length` @8, `lkey` @12.
///
/// # Safety
/// `p + off` is 8-aligned and valid for 16 bytes of writes.
#[inline(always)]
unsafe fn put_sge(p: *mut u8, off: usize, s: &Sge) {
    // SAFETY: caller contract.
    unsafe {
        put64(p, off, s.addr);
        put64(p, off + 8, u64::from(s.length) | u64::from(s.lkey) << 32);
    }
}

/// [`put_sges`] for two or more SGEs, out of line.
///
/// # Safety
/// As [`put_sges`].
#[inline(never)]
unsafe fn put_many_sges(p: *mut u8, sges: &[Sge]) {
    for (i, s) in sges.iter().enumerate() {
        // SAFETY: caller contract.
        unsafe { put_sge(p, i * SGE_SIZE, s) };
    }
}

impl<K, R> WqWriter<K, R> {
    /// Every slot's record, for a reader of many in a row (the CQ poller): see
    /// [`Records`].
    #[inline(always)]
    pub fn records(&self) -> Records<'_, R> {
        Records {
            entries: self.elements.all(),
        }
    }
}

/// The records of a [`WqWriter`]'s slots, with the table's address and size read once:
/// [`WqWriter::record`] reloads them after every atomic access (the compiler must assume
/// those change memory), which a loop over many slots pays per slot.
#[derive(Clone, Copy)]
pub struct Records<'a, R> {
    // INVARIANT: the writer's element table: N entries, N a power of two.
    entries: &'a [Entry<R>],
}

impl<'a, R> Records<'a, R> {
    /// The record of free-running index `index`.
    #[inline(always)]
    pub fn get(&self, index: u32) -> &'a R {
        // N is a power of two (type invariant), so the masked index is below N.
        let at = index as usize & self.entries.len().wrapping_sub(1);
        // SAFETY: `at` < N = `entries.len()`.
        &unsafe { self.entries.get_unchecked(at) }.rec
    }
}

#[cfg(test)]
mod tests;
