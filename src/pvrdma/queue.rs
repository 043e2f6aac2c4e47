//! The queues the NDK layer drives (§7, §9): send, receive and shared receive queues
//! (driver → device) and completion queues (device → driver), each a ring in a
//! page-directory-backed buffer with the §9 layout. Post and poll allocate nothing: post =
//! check space, write the WQE into its slot (through [`super::port`], the one writer of WQE
//! bytes), `to_device_barrier`, advance `prod_tail`; the
//! caller rings one doorbell per batch ([`super::uar::ring`]). Poll = read `prod_tail`
//! (validated), `from_device_barrier`, copy and decode CQEs, advance `cons_head` once per batch.
//!
//! The driver's own index (SQ/RQ/SRQ `prod_tail`, CQ `cons_head`) is kept privately and only
//! written to shared memory; only the device's index is read back, and it is validated (M14).
#![deny(unsafe_code)]

use alloc::sync::Arc;
use core::sync::atomic::{AtomicU32, Ordering};

use crate::os::DmaAllocator;
use crate::os::alloc::try_arc;
use crate::os::dma::PAGE_SIZE;
use crate::os::sync::{from_device_barrier, to_device_barrier};

use super::cqe::{BadCqe, CQE_SIZE, Cqe, CqeLimits, CqeWords};
use super::error::PvrdmaError;
use super::pdir::{MAX_PAGES, PagedBuffer};
use super::port::{
    Bell, CqPort, RecvPort, RecvRing, SendPort, SendRing, SqHeader, WqElement, WqGeometry, WqKind,
    WqPort,
};
use super::ring::{Ring, RingCorrupt};
use super::wqe::{SendFlags, SendWr, Sge, rq_stride, sq_stride};

fn pages_for(bytes: u64) -> Option<u32> {
    u32::try_from(bytes.div_ceil(PAGE_SIZE as u64)).ok()
}

/// One work queue's geometry inside its buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WqLayout {
    /// N (a power of two).
    pub n: u32,
    /// Bytes per WQE (a power of two ≤ 4096).
    pub stride: u32,
    /// SGEs per WQE.
    pub max_sge: u32,
    /// Byte offset of WQE 0 in the buffer.
    pub offset: u32,
    /// Pages holding the WQEs.
    pub pages: u32,
}

impl WqLayout {
    fn new(n: u32, max_sge: u32, stride: Option<u32>, offset: u32) -> Result<Self, PvrdmaError> {
        let stride = stride.ok_or(PvrdmaError::InvalidParameter)?;
        if !n.is_power_of_two() || max_sge == 0 || stride as usize > PAGE_SIZE {
            return Err(PvrdmaError::InvalidParameter);
        }
        let pages =
            pages_for(u64::from(n) * u64::from(stride)).ok_or(PvrdmaError::InvalidParameter)?;
        Ok(WqLayout {
            n,
            stride,
            max_sge,
            offset,
            pages,
        })
    }
}

/// Kernel QP buffer layout (§9).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpLayout {
    /// Send queue.
    pub sq: WqLayout,
    /// Receive queue; `None` for a QP with an SRQ.
    pub rq: Option<WqLayout>,
    /// CREATE_QP `total_chunks`.
    pub total_chunks: u32,
    /// CREATE_QP `send_chunks` (SQ pages excluding the ring-state page).
    pub send_chunks: u32,
}

impl QpLayout {
    /// Layout for the given sizes (WR counts must be powers of two, SGE counts ≥ 1);
    /// `recv = None` for a QP that takes its receives from an SRQ.
    ///
    /// # Errors
    ///
    /// [`PvrdmaError::InvalidParameter`] for sizes the formulas cannot express or more than
    /// 512·512 pages (or more than a u16 of pages, the width of `total_chunks`).
    pub fn new(
        max_send_wr: u32,
        max_send_sge: u32,
        recv: Option<(u32, u32)>,
    ) -> Result<Self, PvrdmaError> {
        let sq = WqLayout::new(
            max_send_wr,
            max_send_sge,
            sq_stride(max_send_sge),
            PAGE_SIZE as u32,
        )?;
        let send_chunks = sq.pages;
        let rq = match recv {
            Some((n, sge)) => Some(WqLayout::new(
                n,
                sge,
                rq_stride(sge),
                send_chunks
                    .checked_add(1)
                    .and_then(|p| p.checked_mul(PAGE_SIZE as u32))
                    .ok_or(PvrdmaError::InvalidParameter)?,
            )?),
            None => None,
        };
        let total_chunks = 1u32
            .checked_add(send_chunks)
            .and_then(|t| t.checked_add(rq.map_or(0, |r| r.pages)))
            .ok_or(PvrdmaError::InvalidParameter)?;
        if total_chunks > MAX_PAGES || total_chunks > u32::from(u16::MAX) {
            return Err(PvrdmaError::InvalidParameter);
        }
        Ok(QpLayout {
            sq,
            rq,
            total_chunks,
            send_chunks,
        })
    }
}

/// SRQ buffer layout (§9): rdma-core's size, `4096 + 2·align(N·stride, 4096)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SrqLayout {
    /// The ring.
    pub wq: WqLayout,
    /// CREATE_SRQ `nchunks` (all pages of the buffer).
    pub nchunks: u32,
}

impl SrqLayout {
    /// Layout for `max_wr` (power of two) WQEs of `max_sge` SGEs.
    ///
    /// # Errors
    ///
    /// [`PvrdmaError::InvalidParameter`].
    pub fn new(max_wr: u32, max_sge: u32) -> Result<Self, PvrdmaError> {
        let wq = WqLayout::new(max_wr, max_sge, rq_stride(max_sge), PAGE_SIZE as u32)?;
        let nchunks = wq
            .pages
            .checked_mul(2)
            .and_then(|p| p.checked_add(1))
            .filter(|&p| p <= MAX_PAGES)
            .ok_or(PvrdmaError::InvalidParameter)?;
        Ok(SrqLayout { wq, nchunks })
    }
}

/// Ring-state byte offsets in page 0.
const TX_PROD: usize = 0;
const RX_PROD: usize = 8;

/// The common driver-produced ring (SQ, RQ, SRQ).
struct WorkQueue {
    buf: Arc<PagedBuffer>,
    ring: Ring,
    layout: WqLayout,
    /// Byte offset of this ring's `prod_tail` in page 0 (`cons_head` follows at +4).
    state: usize,
    /// Our `prod_tail`.
    tail: u32,
}

impl WorkQueue {
    fn new(buf: Arc<PagedBuffer>, layout: WqLayout, state: usize) -> Result<Self, PvrdmaError> {
        Ok(WorkQueue {
            buf,
            ring: Ring::new(layout.n).ok_or(PvrdmaError::InvalidParameter)?,
            layout,
            state,
            tail: 0,
        })
    }

    fn index(&self, off: usize) -> Option<&AtomicU32> {
        self.buf.page(0)?.view().atomic_u32(off)
    }

    fn cons_head(&self) -> Result<u32, RingCorrupt> {
        self.index(self.state + 4)
            .map(|a| a.load(Ordering::Acquire))
            .ok_or(RingCorrupt)
    }

    /// From the published `prod_tail` in shared memory, not our private copy: a data-path
    /// port ([`WqPort`]) may have posted since.
    fn outstanding(&self) -> Result<u32, RingCorrupt> {
        let tail = self
            .index(self.state)
            .map(|a| a.load(Ordering::Relaxed))
            .ok_or(RingCorrupt)?;
        self.ring.occupancy(tail, self.cons_head()?)
    }

    /// Claims the next slot: `Ok(None)` when full.
    fn next_slot(&self) -> Result<Option<u32>, RingCorrupt> {
        self.ring.has_space(self.tail, self.cons_head()?)
    }

    /// The WQE of slot `slot`, written through the port's writer for format `K` (which checks
    /// that the slot holds a `K` header and `max_sge` SGEs); `None` for a slot outside the
    /// buffer (not for a slot from [`Self::next_slot`]).
    fn wqe<K: WqKind>(&self, slot: u32) -> Option<WqElement<'_, K>> {
        let off = (self.layout.offset as usize)
            .checked_add((slot as usize).checked_mul(self.layout.stride as usize)?)?;
        let view = self.buf.view(off, self.layout.stride as usize)?;
        WqElement::on_view(view, self.layout.max_sge)
    }

    fn publish(&mut self) {
        // The WQE must be visible before the index that hands it to the device.
        to_device_barrier();
        self.tail = self.ring.inc(self.tail);
        if let Some(a) = self.index(self.state) {
            a.store(self.tail, Ordering::Release);
        }
    }

    fn post_recv(&mut self, wr_id: u64, sges: &[Sge]) -> Result<u32, PvrdmaError> {
        if sges.len() > self.layout.max_sge as usize {
            return Err(PvrdmaError::InvalidParameter);
        }
        let slot = self.next_slot()?.ok_or(PvrdmaError::QueueFull)?;
        let wqe = self
            .wqe::<RecvRing>(slot)
            .ok_or(PvrdmaError::InvalidParameter)?;
        if !wqe.slot().write_recv(wr_id, sges) {
            return Err(PvrdmaError::InvalidParameter);
        }
        self.publish();
        Ok(slot)
    }

    fn port<K: WqKind>(&self, bell: Bell) -> Result<WqPort<K>, PvrdmaError> {
        WqPort::new(
            self.buf.clone(),
            WqGeometry {
                first_page: self.layout.offset / PAGE_SIZE as u32,
                n: self.layout.n,
                stride: self.layout.stride,
                max_sge: self.layout.max_sge,
                state: self.state,
            },
            bell,
        )
    }

    fn reset(&mut self) {
        self.tail = 0;
        for off in [self.state, self.state + 4] {
            if let Some(a) = self.index(off) {
                a.store(0, Ordering::Release);
            }
        }
    }
}

macro_rules! wq_common {
    ($t:ty) => {
        impl $t {
            /// Geometry.
            pub fn layout(&self) -> WqLayout {
                self.wq.layout
            }
            /// WQEs posted and not yet consumed by the device, from our `prod_tail` and the
            /// device's validated `cons_head`.
            ///
            /// # Errors
            ///
            /// [`RingCorrupt`] when the device's index is invalid.
            pub fn outstanding(&self) -> Result<u32, RingCorrupt> {
                self.wq.outstanding()
            }
            /// Our `prod_tail`.
            pub fn prod_tail(&self) -> u32 {
                self.wq.tail
            }
            /// The device's `cons_head`, unvalidated (diagnostics; use `outstanding`).
            pub fn raw_cons_head(&self) -> u32 {
                self.wq.cons_head().unwrap_or(0)
            }
            /// Zeroes both indices (after the queue went through RESET, M33).
            pub fn reset_indices(&mut self) {
                self.wq.reset();
            }
        }
    };
}

/// A QP's send queue.
pub struct SendQueue {
    wq: WorkQueue,
}

wq_common!(SendQueue);

impl SendQueue {
    /// The data-path port on this queue (rings `bell`, the QP's SQ doorbell).
    ///
    /// # Errors
    /// [`PvrdmaError::NoMemory`]; [`PvrdmaError::InvalidParameter`] as [`WqPort::new`].
    pub fn port(&self, bell: Bell) -> Result<SendPort, PvrdmaError> {
        self.wq.port(bell)
    }

    /// Writes `wr` into the next slot and publishes it; returns the slot (for per-slot
    /// records, §16 item 10). No doorbell: the caller rings `QpDoorbell::send` once per batch.
    ///
    /// # Errors
    ///
    /// [`PvrdmaError::QueueFull`], [`PvrdmaError::InvalidParameter`] (too many SGEs),
    /// [`PvrdmaError::NotSupported`] (INLINE), [`PvrdmaError::RingCorrupt`].
    pub fn post(&mut self, wr: &SendWr<'_>) -> Result<u32, PvrdmaError> {
        if wr.sges.len() > self.wq.layout.max_sge as usize {
            return Err(PvrdmaError::InvalidParameter);
        }
        let slot = self.wq.next_slot()?.ok_or(PvrdmaError::QueueFull)?;
        if wr.flags.contains(SendFlags::INLINE) {
            return Err(PvrdmaError::NotSupported);
        }
        let wqe = self
            .wq
            .wqe::<SendRing>(slot)
            .ok_or(PvrdmaError::InvalidParameter)?;
        if !wqe.slot().write_send(wr.wr_id, &SqHeader::of(wr), wr.sges) {
            return Err(PvrdmaError::InvalidParameter);
        }
        self.wq.publish();
        Ok(slot)
    }
}

/// A QP's receive queue.
pub struct RecvQueue {
    wq: WorkQueue,
}

wq_common!(RecvQueue);

impl RecvQueue {
    /// The data-path port on this queue (rings `bell`, the QP's RQ doorbell).
    ///
    /// # Errors
    /// [`PvrdmaError::NoMemory`]; [`PvrdmaError::InvalidParameter`] as [`WqPort::new`].
    pub fn port(&self, bell: Bell) -> Result<RecvPort, PvrdmaError> {
        self.wq.port(bell)
    }
}

impl RecvQueue {
    /// Writes a receive WQE and publishes it; returns the slot. The caller rings
    /// `QpDoorbell::recv` once per batch.
    ///
    /// # Errors
    ///
    /// As [`SendQueue::post`].
    pub fn post(&mut self, wr_id: u64, sges: &[Sge]) -> Result<u32, PvrdmaError> {
        self.wq.post_recv(wr_id, sges)
    }
}

/// A shared receive queue's ring.
pub struct SrqQueue {
    wq: WorkQueue,
    nchunks: u32,
}

wq_common!(SrqQueue);

impl SrqQueue {
    /// Allocates the SRQ buffer (indices zeroed).
    ///
    /// # Errors
    ///
    /// [`PvrdmaError::NoMemory`], [`PvrdmaError::InvalidParameter`].
    pub fn alloc(dma: &Arc<dyn DmaAllocator>, layout: &SrqLayout) -> Result<Self, PvrdmaError> {
        let buf = try_arc(PagedBuffer::alloc(dma, layout.nchunks)?)?;
        Ok(SrqQueue {
            wq: WorkQueue::new(buf, layout.wq, RX_PROD)?,
            nchunks: layout.nchunks,
        })
    }

    /// The data-path port on this SRQ (rings `bell`, the SRQ doorbell).
    ///
    /// # Errors
    /// [`PvrdmaError::NoMemory`]; [`PvrdmaError::InvalidParameter`] as [`WqPort::new`].
    pub fn port(&self, bell: Bell) -> Result<RecvPort, PvrdmaError> {
        self.wq.port(bell)
    }

    /// CREATE_SRQ `pdir_dma`.
    pub fn pdir_dma(&self) -> u64 {
        self.wq.buf.pdir().dma()
    }

    /// CREATE_SRQ `nchunks`.
    pub fn nchunks(&self) -> u32 {
        self.nchunks
    }

    /// Writes a receive WQE and publishes it; the caller rings `SrqDoorbell::recv` per batch.
    ///
    /// # Errors
    ///
    /// As [`SendQueue::post`].
    pub fn post(&mut self, wr_id: u64, sges: &[Sge]) -> Result<u32, PvrdmaError> {
        self.wq.post_recv(wr_id, sges)
    }
}

/// A QP's queues in one buffer.
pub struct QpQueues {
    /// Send queue.
    pub sq: SendQueue,
    /// Receive queue (absent with an SRQ).
    pub rq: Option<RecvQueue>,
    /// Layout (CREATE_QP `total_chunks`, `send_chunks`).
    pub layout: QpLayout,
    pdir_dma: u64,
}

impl QpQueues {
    /// Allocates the QP buffer (indices zeroed).
    ///
    /// # Errors
    ///
    /// [`PvrdmaError::NoMemory`], [`PvrdmaError::InvalidParameter`].
    pub fn alloc(dma: &Arc<dyn DmaAllocator>, layout: &QpLayout) -> Result<Self, PvrdmaError> {
        let buf = try_arc(PagedBuffer::alloc(dma, layout.total_chunks)?)?;
        let pdir_dma = buf.pdir().dma();
        let rq = match layout.rq {
            Some(l) => Some(RecvQueue {
                wq: WorkQueue::new(buf.clone(), l, RX_PROD)?,
            }),
            None => None,
        };
        Ok(QpQueues {
            sq: SendQueue {
                wq: WorkQueue::new(buf, layout.sq, TX_PROD)?,
            },
            rq,
            layout: *layout,
            pdir_dma,
        })
    }

    /// CREATE_QP `pdir_dma`.
    pub fn pdir_dma(&self) -> u64 {
        self.pdir_dma
    }
}

/// A completion queue ring: 64-byte CQEs from byte 4096, device produces on `rx` (@8/@12).
pub struct CqRing {
    buf: Arc<PagedBuffer>,
    ring: Ring,
    alloc_entries: u32,
    /// Our `cons_head`.
    head: u32,
}

impl CqRing {
    /// Allocates a CQ of `entries` (a power of two) CQEs: `nchunks = 1 + ceil(64·N/4096)`.
    ///
    /// # Errors
    ///
    /// [`PvrdmaError::InvalidParameter`], [`PvrdmaError::NoMemory`].
    pub fn alloc(dma: &Arc<dyn DmaAllocator>, entries: u32) -> Result<Self, PvrdmaError> {
        if !entries.is_power_of_two() {
            return Err(PvrdmaError::InvalidParameter);
        }
        let pages = pages_for(u64::from(entries) * CQE_SIZE as u64)
            .and_then(|p| p.checked_add(1))
            .filter(|&p| p <= MAX_PAGES)
            .ok_or(PvrdmaError::InvalidParameter)?;
        Ok(CqRing {
            buf: try_arc(PagedBuffer::alloc(dma, pages)?)?,
            ring: Ring::new(entries).ok_or(PvrdmaError::InvalidParameter)?,
            alloc_entries: entries,
            head: 0,
        })
    }

    /// CREATE_CQ `pdir_dma`.
    pub fn pdir_dma(&self) -> u64 {
        self.buf.pdir().dma()
    }

    /// CREATE_CQ `nchunks`.
    pub fn nchunks(&self) -> u32 {
        self.buf.npages()
    }

    /// N.
    pub fn entries(&self) -> u32 {
        self.ring.n()
    }

    /// The data-path port on this CQ (N as set by the CREATE_CQ response), with its arm
    /// doorbells.
    ///
    /// # Errors
    /// [`PvrdmaError::NoMemory`].
    pub fn port(&self, arm: Bell, arm_solicited: Bell) -> Result<CqPort, PvrdmaError> {
        CqPort::new(self.buf.clone(), self.ring.n(), arm, arm_solicited)
    }

    /// Adopts the `cqe` of the CREATE_CQ response as N (§8), which must be a power of two no
    /// larger than the allocation.
    ///
    /// # Errors
    ///
    /// [`PvrdmaError::InvalidParameter`].
    pub fn set_device_entries(&mut self, cqe: u32) -> Result<(), PvrdmaError> {
        if !cqe.is_power_of_two() || cqe > self.alloc_entries {
            return Err(PvrdmaError::InvalidParameter);
        }
        self.ring = Ring::new(cqe).ok_or(PvrdmaError::InvalidParameter)?;
        Ok(())
    }

    fn prod_tail(&self) -> Result<u32, RingCorrupt> {
        self.buf
            .page(0)
            .and_then(|p| p.view().atomic_u32(RX_PROD))
            .map(|a| a.load(Ordering::Acquire))
            .ok_or(RingCorrupt)
    }

    /// CQEs available (validated device index).
    ///
    /// # Errors
    ///
    /// [`RingCorrupt`]: the CQ is unusable.
    pub fn pending(&self) -> Result<u32, RingCorrupt> {
        self.ring.occupancy(self.prod_tail()?, self.head)
    }

    /// Polls up to `out.len()` CQEs; returns how many entries of `out` were filled. A CQE
    /// that fails validation is reported in place as `Err(BadCqe)` and consumed.
    ///
    /// # Errors
    ///
    /// [`PvrdmaError::RingCorrupt`] when `prod_tail` fails validation.
    pub fn poll(
        &mut self,
        out: &mut [Result<Cqe, BadCqe>],
        limits: &CqeLimits,
    ) -> Result<usize, PvrdmaError> {
        self.poll_each(out.len(), limits, |i, r| {
            if let Some(o) = out.get_mut(i) {
                *o = r;
            }
        })
    }

    /// Polls up to `max` CQEs, handing the `i`-th (validated, or `Err(BadCqe)`, consumed
    /// either way) to `f(i, cqe)`; returns how many. One `cons_head` update per call.
    ///
    /// # Errors
    ///
    /// [`PvrdmaError::RingCorrupt`] when `prod_tail` fails validation.
    pub fn poll_each(
        &mut self,
        max: usize,
        limits: &CqeLimits,
        mut f: impl FnMut(usize, Result<Cqe, BadCqe>),
    ) -> Result<usize, PvrdmaError> {
        self.poll_words(max, |i, w| {
            let mut raw = [0u8; CQE_SIZE];
            for (b, w) in raw.chunks_exact_mut(8).zip(w) {
                b.copy_from_slice(&w.to_le_bytes());
            }
            f(i, Cqe::parse(&raw, limits));
        })
    }

    /// The ring walk under the poll: hands the `i`-th raw CQE (copied out, not yet
    /// validated) to `f`; every CQE handed over is consumed. One `cons_head` update per call.
    fn poll_words(
        &mut self,
        max: usize,
        mut f: impl FnMut(usize, &CqeWords),
    ) -> Result<usize, PvrdmaError> {
        let avail = self.pending()? as usize;
        if avail == 0 {
            return Ok(0);
        }
        // prod_tail was read before any CQE it publishes.
        from_device_barrier();
        let mut head = self.head;
        let mut n = 0;
        for i in 0..max.min(avail) {
            let off = PAGE_SIZE + self.ring.slot(head) as usize * CQE_SIZE;
            // One bounds check and eight 64-bit loads; a slot outside the buffer (it cannot
            // be: `slot < N` and the buffer holds N CQEs) decodes as zeroes.
            let w = self
                .buf
                .view(off, CQE_SIZE)
                .and_then(|v| v.read_words::<{ CQE_SIZE / 8 }>(0))
                .unwrap_or([0; CQE_SIZE / 8]);
            f(i, &w);
            head = self.ring.inc(head);
            n += 1;
        }
        if n != 0 {
            self.head = head;
            if let Some(a) = self
                .buf
                .page(0)
                .and_then(|p| p.view().atomic_u32(RX_PROD + 4))
            {
                // Release: our reads of the CQEs happen before the device may reuse the slots.
                a.store(head, Ordering::Release);
            }
        }
        Ok(n)
    }

    /// Our `cons_head`.
    pub fn cons_head(&self) -> u32 {
        self.head
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::os::dma::test_alloc::TestDma;
    use crate::pvrdma::cqe::{CqeError, WcOpcode};
    use crate::pvrdma::wqe::{Ex, SendFlags, WrBody, WrOpcode, encode_recv, encode_send};

    #[test]
    fn qp_layout_formulas() {
        // SQ: 64 WRs × stride 128 (1 SGE) = 2 pages; RQ: 32 × 32 = 1 page.
        let l = QpLayout::new(64, 1, Some((32, 1))).unwrap();
        assert_eq!(l.sq.stride, 128);
        assert_eq!(l.sq.pages, 2);
        assert_eq!(l.send_chunks, 2);
        assert_eq!(l.sq.offset, 4096);
        let rq = l.rq.unwrap();
        assert_eq!((rq.stride, rq.pages, rq.offset), (32, 1, 3 * 4096));
        assert_eq!(l.total_chunks, 4);
        // 16 SGEs: stride 512; 4096 WRs: 512 pages.
        let l = QpLayout::new(4096, 16, Some((4096, 16))).unwrap();
        assert_eq!((l.sq.stride, l.sq.pages, l.total_chunks), (512, 512, 1025));
        // With an SRQ: no RQ pages.
        let l = QpLayout::new(8, 2, None).unwrap();
        assert_eq!((l.total_chunks, l.send_chunks, l.rq), (2, 1, None));
        assert_eq!(
            QpLayout::new(3, 1, None),
            Err(PvrdmaError::InvalidParameter)
        );
        assert_eq!(
            QpLayout::new(4, 0, None),
            Err(PvrdmaError::InvalidParameter)
        );
        assert_eq!(
            QpLayout::new(1 << 20, 16, None),
            Err(PvrdmaError::InvalidParameter)
        );
        let s = SrqLayout::new(64, 2).unwrap();
        assert_eq!((s.wq.stride, s.wq.pages, s.nchunks), (64, 1, 3));
    }

    #[test]
    fn send_queue_posts_fill_and_drain() {
        let dma = TestDma::new_dyn();
        let layout = QpLayout::new(4, 1, Some((2, 1))).unwrap();
        let mut q = QpQueues::alloc(&dma, &layout).unwrap();
        assert_eq!(q.layout.total_chunks, 3);
        let sges = [Sge {
            addr: 0x1000,
            length: 8,
            lkey: 0x100,
        }];
        let wr = |id| SendWr {
            wr_id: id,
            opcode: WrOpcode::Send,
            flags: SendFlags::SIGNALED,
            ex: Ex::None,
            body: WrBody::None,
            sges: &sges,
        };
        for i in 0..4 {
            assert_eq!(q.sq.post(&wr(i)), Ok(i as u32));
        }
        assert_eq!(q.sq.post(&wr(9)), Err(PvrdmaError::QueueFull));
        assert_eq!(q.sq.prod_tail(), 4);
        assert_eq!(q.sq.outstanding(), Ok(4));
        let two = [sges[0]; 2];
        let mut big = wr(1);
        big.sges = &two;
        assert_eq!(q.sq.post(&big), Err(PvrdmaError::InvalidParameter));
        // Device consumes two: cons_head = 2 (@4 of page 0).
        let buf = q.sq.wq.buf.clone();
        let p0 = buf.page(0).unwrap().view();
        assert_eq!(p0.read_u32(0), 4, "prod_tail published at @0");
        p0.write_u32(4, 2);
        // INLINE: refused after the space check, nothing written or published.
        let mut inline = wr(4);
        inline.flags |= SendFlags::INLINE;
        assert_eq!(q.sq.post(&inline), Err(PvrdmaError::NotSupported));
        assert_eq!(q.sq.prod_tail(), 4);
        assert_eq!(q.sq.post(&wr(4)), Ok(0));
        // WQE 0 at byte 4096 now holds wr_id 4; WQE 1 at 4096 + 128 holds wr_id 1.
        assert_eq!(buf.view(4096, 8).unwrap().read_u64(0), 4);
        assert_eq!(buf.view(4096 + 128, 8).unwrap().read_u64(0), 1);
        assert_eq!(buf.view(4096 + 128 + 80, 8).unwrap().read_u64(0), 0x1000);
        // The bytes are the reference encoder's.
        let mut want = [0u8; 96];
        encode_send(&mut want[..], &wr(4)).unwrap();
        let mut got = [0u8; 96];
        buf.view(4096, 96).unwrap().read_bytes(0, &mut got);
        assert_eq!(got, want);
        // A corrupt device index is detected, not used.
        p0.write_u32(4, 100);
        assert_eq!(q.sq.post(&wr(5)), Err(PvrdmaError::RingCorrupt));
        p0.write_u32(4, 7); // occupancy (5 − 7) mod 8 = 6 > 4
        assert_eq!(q.sq.outstanding(), Err(RingCorrupt));
        // RQ: ring state @8/@12, WQEs after the SQ pages (page 2).
        let rq = q.rq.as_mut().unwrap();
        assert_eq!(rq.post(7, &sges), Ok(0));
        assert_eq!(p0.read_u32(8), 1);
        assert_eq!(buf.view(2 * 4096, 8).unwrap().read_u64(0), 7);
        let mut want = [0u8; 32];
        encode_recv(&mut want[..], 7, &sges).unwrap();
        let mut got = [0u8; 32];
        buf.view(2 * 4096, 32).unwrap().read_bytes(0, &mut got);
        assert_eq!(got, want);
        assert_eq!(rq.post(8, &two), Err(PvrdmaError::InvalidParameter));
        assert_eq!(rq.post(8, &sges), Ok(1));
        assert_eq!(rq.post(9, &sges), Err(PvrdmaError::QueueFull));
        rq.reset_indices();
        assert_eq!((p0.read_u32(8), p0.read_u32(12), rq.prod_tail()), (0, 0, 0));
    }

    #[test]
    fn srq_posts_on_rx_ring() {
        let dma = TestDma::new_dyn();
        let mut s = SrqQueue::alloc(&dma, &SrqLayout::new(2, 1).unwrap()).unwrap();
        assert_eq!(s.nchunks(), 3);
        assert_eq!(s.post(11, &[]), Ok(0));
        let p0 = s.wq.buf.page(0).unwrap().view();
        assert_eq!((p0.read_u32(0), p0.read_u32(8)), (0, 1));
        assert_eq!(s.wq.buf.view(4096, 16).unwrap().read_u64(0), 11);
        assert_eq!(s.post(12, &[]), Ok(1));
        assert_eq!(s.post(13, &[]), Err(PvrdmaError::QueueFull));
    }

    fn put_cqe(cq: &CqRing, slot: u32, wr_id: u64, qp: u64, opcode: u32) {
        let v = cq.buf.view(4096 + slot as usize * 64, 64).unwrap();
        v.write_u64(0, wr_id);
        v.write_u64(8, qp);
        v.write_u32(16, opcode);
    }

    fn set_tail(cq: &CqRing, v: u32) {
        cq.buf.page(0).unwrap().view().write_u32(8, v);
    }

    fn cons(cq: &CqRing) -> u32 {
        cq.buf.page(0).unwrap().view().read_u32(12)
    }

    #[test]
    fn cq_poll_batches_and_validates() {
        let dma = TestDma::new_dyn();
        let mut cq = CqRing::alloc(&dma, 4).unwrap();
        assert_eq!(cq.nchunks(), 2);
        assert_eq!(
            CqRing::alloc(&dma, 5).err(),
            Some(PvrdmaError::InvalidParameter)
        );
        let lim = CqeLimits {
            qp_bound: 16,
            max_byte_len: 1 << 20,
        };
        let mut out = [Err(BadCqe {
            wr_id: 0,
            reason: CqeError::Qp(0),
        }); 8];
        assert_eq!(cq.poll(&mut out, &lim), Ok(0));
        put_cqe(&cq, 0, 100, 3, 0);
        put_cqe(&cq, 1, 101, 99, 0); // bad QP handle
        put_cqe(&cq, 2, 102, 3, 128);
        set_tail(&cq, 3);
        assert_eq!(cq.poll(&mut out[..2], &lim), Ok(2));
        assert_eq!(out[0].unwrap().wr_id, 100);
        assert_eq!(out[1].unwrap_err().reason, CqeError::Qp(99));
        assert_eq!(cons(&cq), 2, "cons_head written once per batch");
        assert_eq!(cq.poll(&mut out, &lim), Ok(1));
        assert_eq!(out[0].unwrap().opcode, Some(WcOpcode::Recv));
        assert_eq!(cq.cons_head(), 3);
        // Wrap: slots 3, 0.
        put_cqe(&cq, 3, 103, 1, 1);
        put_cqe(&cq, 0, 104, 1, 2);
        set_tail(&cq, 5);
        assert_eq!(cq.poll(&mut out, &lim), Ok(2));
        assert_eq!((out[0].unwrap().wr_id, out[1].unwrap().wr_id), (103, 104));
        // Device claims more than N entries: corrupt.
        set_tail(&cq, 2); // (2 − 5) mod 8 = 5 > 4
        assert_eq!(cq.poll(&mut out, &lim), Err(PvrdmaError::RingCorrupt));
        set_tail(&cq, 8);
        assert_eq!(cq.pending(), Err(RingCorrupt));
        assert_eq!(cq.set_device_entries(8), Err(PvrdmaError::InvalidParameter));
        assert_eq!(cq.set_device_entries(2), Ok(()));
        assert_eq!(cq.entries(), 2);
    }
}
