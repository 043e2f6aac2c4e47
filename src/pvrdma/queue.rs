//! The queues the NDK layer drives (§7, §9): send, receive and shared receive queues
//! (driver → device) and completion queues (device → driver), each a ring in a
//! page-directory-backed buffer with the §9 layout. This module allocates the buffers and
//! knows their geometry; the data path runs through the writer ([`super::wq`]) and the
//! reader ([`super::cq`]) each queue hands out when it is created.
#![deny(unsafe_code)]

use alloc::sync::Arc;
use core::sync::atomic::{AtomicU32, Ordering};

use crate::os::DmaAllocator;
use crate::os::alloc::try_arc;
use crate::os::dma::PAGE_SIZE;

use super::cq::{CqBells, CqReader};
use super::cqe::CQE_SIZE;
use super::error::PvrdmaError;
use super::pdir::{MAX_PAGES, PagedBuffer};
use super::ring::{Ring, RingCorrupt};
use super::wq::{RecvWriter, SendWriter, WqGeometry, WqKind, WqWriter};
use super::wqe::{rq_stride, sq_stride};
use crate::os::Bell;

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
}

impl WorkQueue {
    fn new(buf: Arc<PagedBuffer>, layout: WqLayout, state: usize) -> Result<Self, PvrdmaError> {
        Ok(WorkQueue {
            buf,
            ring: Ring::new(layout.n).ok_or(PvrdmaError::InvalidParameter)?,
            layout,
            state,
        })
    }

    fn index(&self, off: usize) -> Result<u32, RingCorrupt> {
        self.buf
            .page(0)
            .and_then(|p| p.view().atomic_u32(off))
            .map(|a: &AtomicU32| a.load(Ordering::Acquire))
            .ok_or(RingCorrupt)
    }

    /// From the `prod_tail` the writer published and the device's `cons_head`, validated.
    fn outstanding(&self) -> Result<u32, RingCorrupt> {
        self.ring
            .occupancy(self.index(self.state)?, self.index(self.state + 4)?)
    }

    fn writer<K: WqKind>(&self, bell: Bell) -> Result<WqWriter<K>, PvrdmaError> {
        WqWriter::new(
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
}

macro_rules! wq_common {
    ($t:ty) => {
        impl $t {
            /// Geometry.
            pub fn layout(&self) -> WqLayout {
                self.wq.layout
            }
            /// WQEs posted and not yet consumed by the device, from the published
            /// `prod_tail` and the device's validated `cons_head`.
            ///
            /// # Errors
            ///
            /// [`RingCorrupt`] when the device's index is invalid.
            pub fn outstanding(&self) -> Result<u32, RingCorrupt> {
                self.wq.outstanding()
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
    /// The writer of this queue (rings `bell`, the QP's SQ doorbell).
    ///
    /// # Errors
    /// [`PvrdmaError::NoMemory`]; [`PvrdmaError::InvalidParameter`] as [`WqWriter::new`].
    pub fn writer(&self, bell: Bell) -> Result<SendWriter, PvrdmaError> {
        self.wq.writer(bell)
    }
}

/// A QP's receive queue.
pub struct RecvQueue {
    wq: WorkQueue,
}

wq_common!(RecvQueue);

impl RecvQueue {
    /// The writer of this queue (rings `bell`, the QP's RQ doorbell).
    ///
    /// # Errors
    /// [`PvrdmaError::NoMemory`]; [`PvrdmaError::InvalidParameter`] as [`WqWriter::new`].
    pub fn writer(&self, bell: Bell) -> Result<RecvWriter, PvrdmaError> {
        self.wq.writer(bell)
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

    /// The writer of this SRQ (rings `bell`, the SRQ doorbell).
    ///
    /// # Errors
    /// [`PvrdmaError::NoMemory`]; [`PvrdmaError::InvalidParameter`] as [`WqWriter::new`].
    pub fn writer(&self, bell: Bell) -> Result<RecvWriter, PvrdmaError> {
        self.wq.writer(bell)
    }

    /// CREATE_SRQ `pdir_dma`.
    pub fn pdir_dma(&self) -> u64 {
        self.wq.buf.pdir().dma()
    }

    /// CREATE_SRQ `nchunks`.
    pub fn nchunks(&self) -> u32 {
        self.nchunks
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
    /// N as the device set it ([`Self::set_device_entries`]).
    entries: u32,
    alloc_entries: u32,
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
            entries,
            alloc_entries: entries,
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
        self.entries
    }

    /// The reader of this CQ (N as set by the CREATE_CQ response), with its doorbells.
    ///
    /// # Errors
    /// [`PvrdmaError::NoMemory`].
    pub fn reader(&self, bells: CqBells) -> Result<CqReader, PvrdmaError> {
        CqReader::new(self.buf.clone(), self.entries, bells)
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
        self.entries = cqe;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::os::dma::test_alloc::TestDma;
    use crate::pvrdma::uar::recording::uar;
    use crate::pvrdma::uar::{CqDoorbell, QpDoorbell, SrqDoorbell, bell};
    use crate::pvrdma::wqe::{SendFlags, Sge, SqHeader, WrOpcode};

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

    /// The writers of a QP's queues put WQEs and ring state where the §9 layout says, and
    /// `outstanding` reads the device's index back validated.
    #[test]
    fn qp_writers_follow_the_layout() {
        let dma = TestDma::new_dyn();
        let (u, _log) = uar();
        let layout = QpLayout::new(4, 1, Some((2, 1))).unwrap();
        let q = QpQueues::alloc(&dma, &layout).unwrap();
        assert_eq!(q.layout.total_chunks, 3);
        let sq = q.sq.writer(bell(u.clone(), QpDoorbell::send(7))).unwrap();
        let rq =
            q.rq.as_ref()
                .unwrap()
                .writer(bell(u, QpDoorbell::recv(7)))
                .unwrap();
        assert_eq!((sq.entries(), sq.max_sge(), rq.entries()), (4, 1, 2));
        let sges = [Sge {
            addr: 0x1000,
            length: 8,
            lkey: 0x100,
        }];
        let h = SqHeader {
            op_word: SqHeader::op_word(WrOpcode::Send, SendFlags::SIGNALED),
            ..SqHeader::default()
        };
        for i in 0..4 {
            assert!(sq.slot(i).write_send(u64::from(i), &h, &sges));
        }
        sq.publish(4);
        let buf = q.sq.wq.buf.clone();
        let p0 = buf.page(0).unwrap().view();
        assert_eq!(p0.read_u32(0), 4, "prod_tail published at @0");
        assert_eq!(q.sq.outstanding(), Ok(4));
        // Device consumes two: cons_head = 2 (@4 of page 0).
        p0.write_u32(4, 2);
        assert_eq!(q.sq.outstanding(), Ok(2));
        // WQE 4 reuses slot 0 at byte 4096; WQE 1 is at 4096 + 128, its SGE @80.
        assert!(sq.slot(4).write_send(4, &h, &sges));
        assert_eq!(buf.view(4096, 8).unwrap().read_u64(0), 4);
        assert_eq!(buf.view(4096 + 128, 8).unwrap().read_u64(0), 1);
        assert_eq!(buf.view(4096 + 128 + 80, 8).unwrap().read_u64(0), 0x1000);
        // A corrupt device index is detected, not used.
        p0.write_u32(4, 100);
        assert_eq!(q.sq.outstanding(), Err(RingCorrupt));
        sq.publish(5);
        p0.write_u32(4, 7); // occupancy (5 − 7) mod 8 = 6 > 4
        assert_eq!(q.sq.outstanding(), Err(RingCorrupt));
        // RQ: ring state @8/@12, WQEs after the SQ pages (page 2).
        assert!(rq.slot(0).write_recv(7, &sges));
        rq.publish(1);
        assert_eq!(p0.read_u32(8), 1);
        assert_eq!(buf.view(2 * 4096, 8).unwrap().read_u64(0), 7);
        assert_eq!(buf.view(2 * 4096 + 16, 8).unwrap().read_u64(0), 0x1000);
        assert_eq!(q.rq.as_ref().unwrap().outstanding(), Ok(1));
        // prod_tail wraps at 2N = 4.
        rq.publish(4);
        assert_eq!(p0.read_u32(8), 0);
    }

    #[test]
    fn srq_writer_uses_the_rx_ring_state() {
        let dma = TestDma::new_dyn();
        let (u, _log) = uar();
        let s = SrqQueue::alloc(&dma, &SrqLayout::new(2, 1).unwrap()).unwrap();
        assert_eq!(s.nchunks(), 3);
        let w = s.writer(bell(u, SrqDoorbell::recv(3))).unwrap();
        assert!(w.slot(0).write_recv(11, &[]));
        w.publish(1);
        let p0 = s.wq.buf.page(0).unwrap().view();
        assert_eq!((p0.read_u32(0), p0.read_u32(8)), (0, 1));
        assert_eq!(s.wq.buf.view(4096, 16).unwrap().read_u64(0), 11);
        assert_eq!(s.outstanding(), Ok(1));
    }

    #[test]
    fn cq_ring_geometry() {
        let dma = TestDma::new_dyn();
        let (u, _log) = uar();
        let mut cq = CqRing::alloc(&dma, 4).unwrap();
        assert_eq!((cq.nchunks(), cq.entries()), (2, 4));
        assert_eq!(
            CqRing::alloc(&dma, 5).err(),
            Some(PvrdmaError::InvalidParameter)
        );
        assert_eq!(cq.set_device_entries(8), Err(PvrdmaError::InvalidParameter));
        assert_eq!(cq.set_device_entries(3), Err(PvrdmaError::InvalidParameter));
        assert_eq!(cq.set_device_entries(2), Ok(()));
        assert_eq!(cq.entries(), 2);
        // The reader takes the device's N.
        let r = cq
            .reader(CqBells {
                arm: bell(u.clone(), CqDoorbell::arm(1)),
                arm_solicited: bell(u.clone(), CqDoorbell::arm_solicited(1)),
                poll: bell(u, CqDoorbell::poll(1)),
            })
            .unwrap();
        assert_eq!(r.entries(), 2);
    }
}
