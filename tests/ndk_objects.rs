//! Drives the NDK provider object layer through its real dispatch tables, as a kernel
//! consumer does (read `Dispatch`, call the slot), against a recording fake of the hardware
//! seam (`pvrdma_ndk::ndk::Hardware`). Asserts exact NTSTATUS values, callback counts and
//! callback order (ndkpi.md §5), the WQEs and doorbells the posts produce (§5.5, pvrdma.md
//! §1 mapping), and the results built from CQEs (§3.3, Project decision (c)).
//!
//! The fake gives the NDK objects real rings (the crate's own queue types over host memory)
//! and one fake UAR page: the WQEs are read back out of ring memory, the doorbells come
//! through the UAR hook, and CQEs are produced into the CQ rings as the device would.

use core::ptr::{NonNull, null_mut};
use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, Weak};

use pvrdma_ndk::ndk::completion::{tag, wr_id};
use pvrdma_ndk::ndk::cq::{Cq, CqLink};
use pvrdma_ndk::ndk::hw::{HwDone, MrKeys, MrSpec, QpSpec, SrqSpec};
use pvrdma_ndk::ndk::object::ObjRef;
use pvrdma_ndk::ndk::pvrdma_hw::SrqLink;
use pvrdma_ndk::ndk::srq::Srq;
use pvrdma_ndk::ndk::{HwCaps, HwError, NdkDevice, dispatch, set_qp_connected};
use pvrdma_ndk::ndkpi::*;
use pvrdma_ndk::os::Bell;
use pvrdma_ndk::os::{DmaAllocator, DmaRegion, Uar};
use pvrdma_ndk::pvrdma::cq::{CqBells, CqReader};
use pvrdma_ndk::pvrdma::cqe::wc_status as wc;
use pvrdma_ndk::pvrdma::device::{CqEvents, SrqEvents};
use pvrdma_ndk::pvrdma::eqe::EqeType;
use pvrdma_ndk::pvrdma::queue::{CqRing, QpLayout, QpQueues, SrqLayout, SrqQueue};
use pvrdma_ndk::pvrdma::uar::{self, CqDoorbell, Doorbell, QpDoorbell, SrqDoorbell};
use pvrdma_ndk::pvrdma::wq::{RecvWqe, RecvWriter, SendWqe, SendWriter, WqKind, WqWriter};
use pvrdma_ndk::pvrdma::wqe::WrOpcode;

// ---------------------------------------------------------------- fake hardware

#[derive(Clone, Debug, PartialEq, Eq)]
struct Wqe {
    qp: u32,
    index: u32,
    wr_id: u64,
    opcode: WrOpcode,
    send_flags: u32,
    nsge: usize,
    remote_addr: u64,
    rkey: u32,
    invalidate_rkey: u32,
    /// (mr handle, iova, pages, length, access, key)
    fast_reg: Option<(u32, u64, usize, u32, u32, u32)>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Hw {
    Create(&'static str, u32),
    Destroy(&'static str, u32),
    RingSend(u32),
    RingRecv(u32),
    RingSrq(u32),
    Arm(u32, bool),
    /// CQ POLL: a poll (or an arm's re-check) found the CQ empty.
    Poll(u32),
    Flush(u32),
    SrqLimit(u32, u32),
    /// A UAR store that is none of the doorbells above: (offset, value).
    Doorbell(u32, u32),
}

/// What CREATE_MR was asked for (an owned copy of `MrSpec`).
#[derive(Clone, Debug, PartialEq, Eq)]
enum MrRec {
    Dma,
    Normal {
        start: u64,
        length: u64,
        access: u32,
        pages: Vec<u64>,
    },
    FastReg(u32),
}

/// A completion the fake device produces (encoded into a 64-byte CQE, pvrdma.md §11).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct HwCqe {
    wr_id: u64,
    qp: u32,
    status: u32,
    byte_len: u32,
    invalidated_rkey: Option<u32>,
}

/// `wc_flags` WITH_INVALIDATE (pvrdma.md §11).
const WC_WITH_INVALIDATE: u32 = 1 << 2;
/// CQE `opcode` of a receive completion (`PVRDMA_WC_RECV`).
const WC_RECV: u32 = 128;

impl HwCqe {
    /// The CQE as the device writes it: wr_id @0, qp @8, opcode @16, status @20,
    /// byte_len @24, invalidated key @28, src_qp @32, wc_flags @36.
    fn encode(&self) -> [u8; 64] {
        let mut b = [0u8; 64];
        let receive = matches!((self.wr_id >> 32) as u32, tag::RQ | tag::SRQ);
        let opcode = if receive { WC_RECV } else { 0 };
        let (flags, key) = match self.invalidated_rkey {
            Some(k) => (WC_WITH_INVALIDATE, k),
            None => (0, 0),
        };
        b[0..8].copy_from_slice(&self.wr_id.to_le_bytes());
        b[8..16].copy_from_slice(&u64::from(self.qp).to_le_bytes());
        b[16..20].copy_from_slice(&opcode.to_le_bytes());
        b[20..24].copy_from_slice(&self.status.to_le_bytes());
        b[24..28].copy_from_slice(&self.byte_len.to_le_bytes());
        b[28..32].copy_from_slice(&key.to_le_bytes());
        b[36..40].copy_from_slice(&flags.to_le_bytes());
        b
    }
}

const PAGE: usize = 4096;

/// Host DMA memory: zeroed, page-aligned std allocations with fake bus addresses.
struct HostDma {
    next: Mutex<u64>,
}

// SAFETY: every region is a fresh zeroed allocation of `len` (whole pages) bytes, aligned to
// a page, unaliased until `free`; the logical addresses are page-aligned and never reused.
unsafe impl DmaAllocator for HostDma {
    fn alloc(&self, len: usize) -> Option<DmaRegion> {
        let len = len.max(1).div_ceil(PAGE) * PAGE;
        let layout = Layout::from_size_align(len, PAGE).ok()?;
        // SAFETY: the layout has a non-zero size.
        let cpu = NonNull::new(unsafe { alloc_zeroed(layout) })?;
        let mut next = self.next.lock().unwrap();
        let logical = *next;
        *next += (len + PAGE) as u64;
        Some(DmaRegion { cpu, logical, len })
    }
    fn free(&self, region: DmaRegion) {
        let layout = Layout::from_size_align(region.len, PAGE).unwrap();
        // SAFETY: allocated by `alloc` with this layout.
        unsafe { dealloc(region.cpu.as_ptr(), layout) }
    }
}

/// The fake UAR page: host memory the doorbell stores land in, and the `Uar` over it whose
/// hook reports each store to the fake.
struct UarPage {
    uar: Uar,
    mem: NonNull<[u32; 1024]>,
}

// SAFETY: the page is only written through `Uar` (volatile stores, `Sync`), and owned here.
unsafe impl Send for UarPage {}
// SAFETY: as above.
unsafe impl Sync for UarPage {}

impl UarPage {
    fn new(hook: Arc<dyn Fn(u32, u32) + Send + Sync>) -> Arc<UarPage> {
        let mem = NonNull::from(Box::leak(Box::new([0u32; 1024])));
        // SAFETY: a 4-byte-aligned, writable 4 KiB allocation, freed only when the page (and
        // with it the `Uar`) is dropped.
        let uar = unsafe { Uar::new(mem.cast()) }.with_hook(hook);
        Arc::new(UarPage { uar, mem })
    }

    fn bell(self: &Arc<Self>, db: impl Doorbell) -> Bell {
        uar::bell_owned_by(self.clone(), |p: &UarPage| &p.uar, db)
    }
}

impl Drop for UarPage {
    fn drop(&mut self) {
        // SAFETY: leaked in `new`; the `Uar` over it goes with `self`.
        drop(unsafe { Box::from_raw(self.mem.as_ptr()) });
    }
}

/// The fake's own view of a driver-produced ring: which WQEs it has already logged.
struct Reader<K> {
    writer: WqWriter<K>,
    /// Free-running index of the next WQE to log.
    seen: u32,
    /// Bytes of a WQE worth reading (header and SGEs).
    bytes: usize,
}

impl<K: WqKind> Reader<K> {
    fn new(writer: WqWriter<K>) -> Reader<K> {
        let bytes = K::HEADER + 16 * writer.max_sge() as usize;
        Reader {
            writer,
            seen: 0,
            bytes,
        }
    }

    /// The WQEs published since the last call, by free-running index.
    fn take_new(&mut self) -> Vec<(u32, Vec<u8>)> {
        let wrap = 2 * self.writer.entries();
        let ahead = self.writer.published().wrapping_sub(self.seen) & (wrap - 1);
        (0..ahead)
            .map(|_| {
                let index = self.seen;
                let mut buf = vec![0u8; self.bytes];
                self.writer.read_element(index, &mut buf);
                self.seen = index.wrapping_add(1);
                (index, buf)
            })
            .collect()
    }
}

fn le32(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().unwrap())
}

fn le64(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().unwrap())
}

struct QpRings {
    queues: QpQueues,
    sq: Reader<SendWqe>,
    rq: Option<Reader<RecvWqe>>,
}

struct SrqRings {
    queue: SrqQueue,
    reader: Reader<RecvWqe>,
}

struct CqRings {
    ring: CqRing,
    /// The fake device's producer side of the ring.
    producer: CqReader,
}

/// `pl_pdir_dma` the fake hands out for FRMR `mr` (distinct per MR).
const PL_BASE: u64 = 0x7f00_0000_0000;

fn fake_pl(mr: u32) -> u64 {
    PL_BASE + (u64::from(mr) << 12)
}

#[derive(Default)]
struct FakeState {
    next: u32,
    log: Vec<Hw>,
    /// Send WQEs as read from the rings: (qp, free-running index, bytes).
    sq_raw: Vec<(u32, u32, Vec<u8>)>,
    recvs: Vec<(u32, u32, u64, usize)>,
    srq_wqes: Vec<(u32, u32, u64)>,
    /// Every `fast_reg_pages` call: (mr, pages).
    fast_regs: Vec<(u32, Vec<u64>)>,
    qp_rings: BTreeMap<u32, QpRings>,
    srq_rings: BTreeMap<u32, SrqRings>,
    cq_rings: BTreeMap<u32, CqRings>,
    mrs: Vec<(u32, MrRec)>,
    qps: Vec<QpSpec>,
    srqs: Vec<SrqSpec>,
    srq_queued: u32,
    /// CREATE_QP answers "no resources".
    fail_qp: bool,
    /// The event handlers `bind_cq` / `bind_srq` registered, as the device's tables hold
    /// them (removed by `destroy_cq` / `destroy_srq`).
    cq_links: BTreeMap<u32, Arc<dyn CqEvents>>,
    srq_links: BTreeMap<u32, Arc<dyn SrqEvents>>,
}

impl FakeState {
    /// Logs every WQE published since the last look, queue by queue.
    fn sync(&mut self) {
        let FakeState {
            sq_raw,
            recvs,
            srq_wqes,
            qp_rings,
            srq_rings,
            ..
        } = self;
        for (&h, q) in qp_rings.iter_mut() {
            for (index, b) in q.sq.take_new() {
                sq_raw.push((h, index, b));
            }
            if let Some(rq) = &mut q.rq {
                for (index, b) in rq.take_new() {
                    recvs.push((h, index, le64(&b, 0), le32(&b, 8) as usize));
                }
            }
        }
        for (&h, s) in srq_rings.iter_mut() {
            for (index, b) in s.reader.take_new() {
                srq_wqes.push((h, index, le64(&b, 0)));
            }
        }
    }
}

fn opcode(v: u32) -> WrOpcode {
    match v {
        0 => WrOpcode::RdmaWrite,
        2 => WrOpcode::Send,
        4 => WrOpcode::RdmaRead,
        8 => WrOpcode::SendWithInv,
        10 => WrOpcode::LocalInv,
        11 => WrOpcode::FastRegMr,
        _ => panic!("unexpected WQE opcode {v}"),
    }
}

/// Decodes a send WQE (pvrdma.md §10).
fn decode_send(qp: u32, index: u32, b: &[u8], fast_regs: &[(u32, Vec<u64>)]) -> Wqe {
    let op = opcode(le32(b, 16));
    let fast = op == WrOpcode::FastRegMr;
    let fast_reg = fast.then(|| {
        let pl = le64(b, 40);
        let mr = fast_regs
            .iter()
            .rev()
            .map(|f| f.0)
            .find(|&mr| fake_pl(mr) == pl)
            .unwrap_or_else(|| panic!("pl_pdir_dma {pl:#x} names no fast_reg_pages call"));
        assert_eq!(le32(b, 48), 12, "page_shift");
        (
            mr,
            le64(b, 32),
            le32(b, 52) as usize,
            le32(b, 56),
            le32(b, 60),
            le32(b, 64),
        )
    });
    Wqe {
        qp,
        index,
        wr_id: le64(b, 0),
        opcode: op,
        send_flags: le32(b, 20),
        nsge: le32(b, 8) as usize,
        remote_addr: if fast { 0 } else { le64(b, 32) },
        rkey: if fast { 0 } else { le32(b, 40) },
        invalidate_rkey: le32(b, 24),
        fast_reg,
    }
}

struct Fake {
    caps: HwCaps,
    st: Mutex<FakeState>,
    /// Run inside `wait_until` (stands for another thread finishing the closes).
    wait_hook: Mutex<Option<Box<dyn FnMut() + Send>>>,
    waits: Mutex<Vec<bool>>,
    dma: Arc<dyn DmaAllocator>,
    uar: Arc<UarPage>,
}

impl Fake {
    fn new(caps: HwCaps) -> Arc<Fake> {
        Arc::new_cyclic(|me: &Weak<Fake>| {
            let me = me.clone();
            let hook = Arc::new(move |off: u32, val: u32| {
                if let Some(f) = me.upgrade() {
                    f.doorbell(off, val);
                }
            });
            Fake {
                caps,
                st: Mutex::new(FakeState {
                    next: 1,
                    ..Default::default()
                }),
                wait_hook: Mutex::new(None),
                waits: Mutex::new(Vec::new()),
                dma: Arc::new(HostDma {
                    next: Mutex::new(0x7e00_0000_0000),
                }),
                uar: UarPage::new(hook),
            }
        })
    }
    /// The UAR hook: a doorbell store, decoded (pvrdma.md §12).
    fn doorbell(&self, off: u32, val: u32) {
        let h = val & 0x00FF_FFFF;
        let ev = match (off, val & !0x00FF_FFFF) {
            (0, v) if v == 1 << 30 => Hw::RingSend(h),
            (0, v) if v == 1 << 31 => Hw::RingRecv(h),
            (4, v) if v == 1 << 30 => Hw::Arm(h, false),
            (4, v) if v == 1 << 29 => Hw::Arm(h, true),
            (4, v) if v == 1 << 31 => Hw::Poll(h),
            (8, v) if v == 1 << 30 => Hw::RingSrq(h),
            _ => Hw::Doorbell(off, val),
        };
        let mut s = self.st.lock().unwrap();
        s.sync();
        s.log.push(ev);
    }
    fn handle(&self, kind: &'static str) -> u32 {
        let mut s = self.st.lock().unwrap();
        let h = s.next;
        s.next += 1;
        s.log.push(Hw::Create(kind, h));
        h
    }
    fn log(&self) -> Vec<Hw> {
        self.st.lock().unwrap().log.clone()
    }
    fn clear_log(&self) {
        self.st.lock().unwrap().log.clear();
    }
    fn count(&self, h: &Hw) -> usize {
        self.log().iter().filter(|x| *x == h).count()
    }
    /// Every send WQE ever posted, in posting order.
    fn wqes(&self) -> Vec<Wqe> {
        let mut s = self.st.lock().unwrap();
        s.sync();
        s.sq_raw
            .iter()
            .map(|(qp, index, b)| decode_send(*qp, *index, b, &s.fast_regs))
            .collect()
    }
    /// Every QP receive WQE: (qp, index, wr_id, SGEs).
    fn recvs(&self) -> Vec<(u32, u32, u64, usize)> {
        let mut s = self.st.lock().unwrap();
        s.sync();
        s.recvs.clone()
    }
    /// Every SRQ WQE: (srq, index, wr_id).
    fn srq_wqes(&self) -> Vec<(u32, u32, u64)> {
        let mut s = self.st.lock().unwrap();
        s.sync();
        s.srq_wqes.clone()
    }
    /// Every `fast_reg_pages` call: (mr, pages).
    fn fast_regs(&self) -> Vec<(u32, Vec<u64>)> {
        self.st.lock().unwrap().fast_regs.clone()
    }
    /// The device writes `cqe` into CQ `cq` and advances its `prod_tail`.
    fn push_cqe(&self, cq: u32, cqe: HwCqe) {
        self.push_raw_cqe(cq, cqe.encode());
    }
    /// The device writes the 64 bytes `cqe` into CQ `cq` and advances its `prod_tail`.
    fn push_raw_cqe(&self, cq: u32, cqe: [u8; 64]) {
        let s = self.st.lock().unwrap();
        let c = s.cq_rings.get(&cq).expect("a CQ the fake created");
        c.producer.produce_for_test(&cqe);
    }
    fn last(&self, kind: &'static str) -> u32 {
        self.log()
            .iter()
            .rev()
            .find_map(|h| match h {
                Hw::Create(k, h) if *k == kind => Some(*h),
                _ => None,
            })
            .expect("created")
    }
    fn cq_bells(&self, cq: u32) -> CqBells {
        CqBells {
            arm: self.uar.bell(CqDoorbell::arm(cq)),
            arm_solicited: self.uar.bell(CqDoorbell::arm_solicited(cq)),
            poll: self.uar.bell(CqDoorbell::poll(cq)),
        }
    }
}

/// The device's side of each CREATE, completed inline by the asynchronous commands.
impl Fake {
    fn create_pd(&self) -> Result<u32, HwError> {
        Ok(self.handle("pd"))
    }
    fn create_cq(&self, entries: u32, _aff: Option<GROUP_AFFINITY>) -> Result<u32, HwError> {
        let ring = CqRing::alloc(&self.dma, entries).map_err(|_| HwError::NoResources)?;
        let h = self.handle("cq");
        let producer = ring
            .reader(self.cq_bells(h))
            .map_err(|_| HwError::NoResources)?;
        self.st
            .lock()
            .unwrap()
            .cq_rings
            .insert(h, CqRings { ring, producer });
        Ok(h)
    }
    fn create_mr(&self, _pd: u32, spec: &MrSpec<'_>) -> Result<MrKeys, HwError> {
        let h = self.handle("mr");
        let rec = match *spec {
            MrSpec::Dma => MrRec::Dma,
            MrSpec::Normal {
                start,
                length,
                access,
                pages,
            } => MrRec::Normal {
                start,
                length,
                access,
                pages: pages.to_vec(),
            },
            MrSpec::FastReg { max_pages } => MrRec::FastReg(max_pages),
        };
        let remote = matches!(rec, MrRec::Normal { access, .. } if access & 6 != 0)
            || matches!(rec, MrRec::FastReg(_));
        self.st.lock().unwrap().mrs.push((h, rec));
        Ok(MrKeys {
            handle: h,
            lkey: h << 8,
            rkey: if remote { h << 8 } else { 0 },
        })
    }
    fn create_qp(&self, spec: &QpSpec) -> Result<u32, HwError> {
        if self.st.lock().unwrap().fail_qp {
            return Err(HwError::NoResources);
        }
        let recv = spec
            .srq
            .is_none()
            .then_some((spec.max_recv_wr, spec.max_recv_sge));
        let layout = QpLayout::new(spec.max_send_wr, spec.max_send_sge, recv)
            .map_err(|_| HwError::Invalid)?;
        let queues = QpQueues::alloc(&self.dma, &layout).map_err(|_| HwError::NoResources)?;
        let h = self.handle("qp");
        let sq = queues
            .sq
            .writer(self.uar.bell(QpDoorbell::send(h)))
            .map_err(|_| HwError::NoResources)?;
        let rq = match &queues.rq {
            Some(rq) => Some(Reader::new(
                rq.writer(self.uar.bell(QpDoorbell::recv(h)))
                    .map_err(|_| HwError::NoResources)?,
            )),
            None => None,
        };
        let mut s = self.st.lock().unwrap();
        s.qps.push(*spec);
        s.qp_rings.insert(
            h,
            QpRings {
                queues,
                sq: Reader::new(sq),
                rq,
            },
        );
        Ok(h)
    }
    fn create_srq(&self, spec: &SrqSpec) -> Result<u32, HwError> {
        let layout = SrqLayout::new(spec.max_wr, spec.max_sge).map_err(|_| HwError::Invalid)?;
        let queue = SrqQueue::alloc(&self.dma, &layout).map_err(|_| HwError::NoResources)?;
        let h = self.handle("srq");
        let writer = queue
            .writer(self.uar.bell(SrqDoorbell::recv(h)))
            .map_err(|_| HwError::NoResources)?;
        let mut s = self.st.lock().unwrap();
        s.srqs.push(*spec);
        s.srq_rings.insert(
            h,
            SrqRings {
                queue,
                reader: Reader::new(writer),
            },
        );
        Ok(h)
    }
    /// The device reads a CQNE for `cq`: its bound handler, if any, gets the completion.
    fn cq_notification(&self, cq: u32) {
        let link = self.st.lock().unwrap().cq_links.get(&cq).cloned();
        if let Some(l) = link {
            l.completion();
        }
    }
    /// CQ_ERR for `cq`.
    fn cq_error(&self, cq: u32) {
        let link = self.st.lock().unwrap().cq_links.get(&cq).cloned();
        if let Some(l) = link {
            l.error();
        }
    }
    /// An SRQ event (SRQ_LIMIT_REACHED, SRQ_ERR) for `srq`.
    fn srq_event(&self, srq: u32, kind: EqeType) {
        let link = self.st.lock().unwrap().srq_links.get(&srq).cloned();
        if let Some(l) = link {
            l.event(kind);
        }
    }
}

impl pvrdma_ndk::ndk::Hardware for Fake {
    fn caps(&self) -> &HwCaps {
        &self.caps
    }
    fn wait_until(&self, cond: &dyn Fn() -> bool) {
        self.waits.lock().unwrap().push(cond());
        if let Some(h) = self.wait_hook.lock().unwrap().as_mut() {
            h();
        }
        assert!(cond(), "the blocking close would wait forever");
    }
    fn create_pd_async(&self, done: HwDone<(u32, MrKeys)>) {
        let r = self.create_pd().and_then(|pd| {
            self.create_mr(pd, &MrSpec::Dma)
                .map(|k| (pd, k))
                .inspect_err(|_| self.destroy_pd(pd))
        });
        done(r);
    }
    fn destroy_pd(&self, pd: u32) {
        self.st.lock().unwrap().log.push(Hw::Destroy("pd", pd));
    }
    fn create_cq_async(&self, entries: u32, aff: Option<GROUP_AFFINITY>, done: HwDone<u32>) {
        done(self.create_cq(entries, aff));
    }
    fn bind_cq(&self, cq: &ObjRef<Cq>) -> Result<(), HwError> {
        let link: Arc<dyn CqEvents> = Arc::new(CqLink::new(cq));
        self.st.lock().unwrap().cq_links.insert(cq.handle(), link);
        Ok(())
    }
    fn destroy_cq(&self, cq: u32) {
        let link = self.st.lock().unwrap().cq_links.remove(&cq);
        drop(link);
        self.st.lock().unwrap().log.push(Hw::Destroy("cq", cq));
    }
    fn create_mr_async(&self, pd: u32, spec: &MrSpec<'_>, done: HwDone<MrKeys>) {
        done(self.create_mr(pd, spec));
    }
    fn destroy_mr(&self, mr: u32) {
        self.st.lock().unwrap().log.push(Hw::Destroy("mr", mr));
    }
    fn try_destroy_mr(&self, mr: u32) -> Result<(), HwError> {
        self.destroy_mr(mr);
        Ok(())
    }
    fn create_qp_async(&self, spec: &QpSpec, done: HwDone<u32>) {
        done(self.create_qp(spec));
    }
    fn destroy_qp(&self, qp: u32) {
        self.st.lock().unwrap().log.push(Hw::Destroy("qp", qp));
    }
    fn flush_qp(&self, qp: u32) {
        self.st.lock().unwrap().log.push(Hw::Flush(qp));
    }
    fn create_srq_async(&self, spec: &SrqSpec, done: HwDone<u32>) {
        done(self.create_srq(spec));
    }
    fn bind_srq(&self, srq: &ObjRef<Srq>) -> Result<(), HwError> {
        let link: Arc<dyn SrqEvents> = Arc::new(SrqLink::new(srq));
        self.st.lock().unwrap().srq_links.insert(srq.handle(), link);
        Ok(())
    }
    fn modify_srq_limit_async(&self, srq: u32, limit: u32, done: HwDone<()>) {
        self.st.lock().unwrap().log.push(Hw::SrqLimit(srq, limit));
        done(Ok(()));
    }
    fn srq_queued(&self, _srq: u32) -> u32 {
        self.st.lock().unwrap().srq_queued
    }
    fn destroy_srq(&self, srq: u32) {
        let link = self.st.lock().unwrap().srq_links.remove(&srq);
        drop(link);
        self.st.lock().unwrap().log.push(Hw::Destroy("srq", srq));
    }
    fn qp_writers(&self, qp: u32) -> Result<(SendWriter, Option<RecvWriter>), HwError> {
        let s = self.st.lock().unwrap();
        let q = s.qp_rings.get(&qp).ok_or(HwError::Invalid)?;
        let sq = q
            .queues
            .sq
            .writer(self.uar.bell(QpDoorbell::send(qp)))
            .map_err(|_| HwError::NoResources)?;
        let rq = match &q.queues.rq {
            Some(rq) => Some(
                rq.writer(self.uar.bell(QpDoorbell::recv(qp)))
                    .map_err(|_| HwError::NoResources)?,
            ),
            None => None,
        };
        Ok((sq, rq))
    }
    fn srq_writer(&self, srq: u32) -> Result<RecvWriter, HwError> {
        let s = self.st.lock().unwrap();
        let q = s.srq_rings.get(&srq).ok_or(HwError::Invalid)?;
        q.queue
            .writer(self.uar.bell(SrqDoorbell::recv(srq)))
            .map_err(|_| HwError::NoResources)
    }
    fn cq_reader(&self, cq: u32) -> Result<CqReader, HwError> {
        let s = self.st.lock().unwrap();
        let c = s.cq_rings.get(&cq).ok_or(HwError::Invalid)?;
        c.ring
            .reader(self.cq_bells(cq))
            .map_err(|_| HwError::NoResources)
    }
    fn fast_reg_pages(&self, mr: u32, pages: &[NDK_LOGICAL_ADDRESS]) -> Result<u64, HwError> {
        let mut s = self.st.lock().unwrap();
        // CAST: logical addresses are 64-bit bus addresses.
        let pages = pages.iter().map(|&p| p as u64).collect();
        s.fast_regs.push((mr, pages));
        Ok(fake_pl(mr))
    }
}

// ---------------------------------------------------------------- consumer side

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ev {
    Close(usize),
    Create(usize),
    Request(usize),
    Cq(usize, NTSTATUS),
    Srq(usize, NTSTATUS),
}

thread_local! {
    static EVENTS: RefCell<Vec<Ev>> = const { RefCell::new(Vec::new()) };
    /// A CQ the notification callback closes from inside the callback.
    static CLOSE_IN_CQ_CB: Cell<*mut NDK_CQ> = const { Cell::new(null_mut()) };
}

fn events() -> Vec<Ev> {
    EVENTS.with(|e| core::mem::take(&mut *e.borrow_mut()))
}
fn push(ev: Ev) {
    EVENTS.with(|e| e.borrow_mut().push(ev));
}

unsafe extern "system" fn close_cb(ctx: PVOID) {
    push(Ev::Close(ctx as usize));
}
unsafe extern "system" fn create_cb(ctx: PVOID, _st: NTSTATUS, _o: *mut NDK_OBJECT_HEADER) {
    push(Ev::Create(ctx as usize));
}
unsafe extern "system" fn request_cb(ctx: PVOID, _st: NTSTATUS) {
    push(Ev::Request(ctx as usize));
}
unsafe extern "system" fn cq_cb(ctx: PVOID, st: NTSTATUS) {
    push(Ev::Cq(ctx as usize, st));
    let cq = CLOSE_IN_CQ_CB.with(|c| c.replace(null_mut()));
    if !cq.is_null() {
        let r = close(cq, 77);
        push(Ev::Request(r as u32 as usize));
    }
}
unsafe extern "system" fn srq_cb(ctx: PVOID, st: NTSTATUS) {
    push(Ev::Srq(ctx as usize, st));
}

fn ctx(v: usize) -> PVOID {
    v as PVOID
}

/// The dispatch table an object carries, read the way a consumer reads it.
trait Obj {
    type D: 'static;
    fn disp(p: *mut Self) -> &'static Self::D;
}
macro_rules! obj {
    ($n:ty, $d:ty) => {
        impl Obj for $n {
            type D = $d;
            fn disp(p: *mut Self) -> &'static $d {
                // SAFETY: `p` is a live object this provider returned.
                let d = unsafe { (*p).Dispatch };
                // SAFETY: the provider's dispatch tables are statics.
                unsafe { &*d }
            }
        }
    };
}
obj!(NDK_ADAPTER, NDK_ADAPTER_DISPATCH);
obj!(NDK_PD, NDK_PD_DISPATCH);
obj!(NDK_CQ, NDK_CQ_DISPATCH);
obj!(NDK_MR, NDK_MR_DISPATCH);
obj!(NDK_QP, NDK_QP_DISPATCH);
obj!(NDK_SRQ, NDK_SRQ_DISPATCH);

fn hdr<T>(p: *mut T) -> *mut NDK_OBJECT_HEADER {
    p.cast()
}

fn header<T>(p: *mut T) -> NDK_OBJECT_HEADER {
    // SAFETY: every NDK object starts with its header.
    unsafe { p.cast::<NDK_OBJECT_HEADER>().read() }
}

/// NDK_FN_CLOSE_OBJECT through the object's own table slot 0.
fn close<T>(p: *mut T, c: usize) -> NTSTATUS {
    // SAFETY: slot 0 of every non-adapter table is the close function; `p` is live.
    let d = unsafe { p.cast::<NDK_PD>().read().Dispatch };
    // SAFETY: the first member of every table is an NDK_FN_CLOSE_OBJECT.
    let f = unsafe { d.cast::<NDK_FN_CLOSE_OBJECT>().read() };
    // SAFETY: live object, valid callback.
    unsafe { f(hdr(p), close_cb, ctx(c)) }
}

struct Env {
    fake: Arc<Fake>,
    dev: Arc<NdkDevice>,
    a: *mut NDK_ADAPTER,
}

fn env_with(caps: HwCaps) -> Env {
    let fake = Fake::new(caps);
    let dev = NdkDevice::new(fake.clone()).expect("device");
    let a = dev
        .open_adapter(NDK_VERSION { Major: 2, Minor: 0 })
        .expect("open");
    Env { fake, dev, a }
}

fn env() -> Env {
    env_with(HwCaps::MODEL_DEFAULT)
}

impl Env {
    fn info(&self) -> NDK_ADAPTER_INFO {
        // SAFETY: a zeroed NDK_ADAPTER_INFO is a valid value (integers only).
        let mut info: NDK_ADAPTER_INFO = unsafe { core::mem::zeroed() };
        let mut size = 0x68;
        // SAFETY: live adapter, buffer of `size` bytes.
        let st = unsafe {
            (NDK_ADAPTER::disp(self.a).NdkQueryAdapterInfo)(self.a, &mut info, &mut size)
        };
        assert_eq!(st, STATUS_SUCCESS);
        info
    }
    fn pd(&self) -> *mut NDK_PD {
        let mut pd = null_mut();
        // SAFETY: live adapter, valid out pointer.
        let st =
            unsafe { (NDK_ADAPTER::disp(self.a).NdkCreatePd)(self.a, create_cb, ctx(1), &mut pd) };
        assert_eq!(st, STATUS_SUCCESS);
        pd
    }
    fn cq_status(&self, depth: u32, c: usize) -> (NTSTATUS, *mut NDK_CQ) {
        let mut cq = null_mut();
        // SAFETY: live adapter, valid out pointer.
        let st = unsafe {
            (NDK_ADAPTER::disp(self.a).NdkCreateCq)(
                self.a,
                depth,
                cq_cb,
                ctx(c),
                null_mut(),
                create_cb,
                ctx(2),
                &mut cq,
            )
        };
        (st, cq)
    }
    fn cq(&self, c: usize) -> *mut NDK_CQ {
        let (st, cq) = self.cq_status(64, c);
        assert_eq!(st, STATUS_SUCCESS);
        cq
    }
    #[allow(clippy::too_many_arguments)]
    fn qp_status(
        &self,
        pd: *mut NDK_PD,
        rcq: *mut NDK_CQ,
        icq: *mut NDK_CQ,
        rq: u32,
        iq: u32,
        rsge: u32,
        isge: u32,
        inline: u32,
    ) -> (NTSTATUS, *mut NDK_QP) {
        let mut qp = null_mut();
        // SAFETY: live objects, valid out pointer.
        let st = unsafe {
            (NDK_PD::disp(pd).NdkCreateQp)(
                pd,
                rcq,
                icq,
                ctx(0x9C),
                rq,
                iq,
                rsge,
                isge,
                inline,
                create_cb,
                ctx(3),
                &mut qp,
            )
        };
        (st, qp)
    }
    fn qp(&self, pd: *mut NDK_PD, rcq: *mut NDK_CQ, icq: *mut NDK_CQ) -> *mut NDK_QP {
        let (st, qp) = self.qp_status(pd, rcq, icq, 8, 8, 4, 4, 0);
        assert_eq!(st, STATUS_SUCCESS);
        qp
    }
    fn mr(&self, pd: *mut NDK_PD, fast: bool) -> *mut NDK_MR {
        let mut mr = null_mut();
        // SAFETY: live PD, valid out pointer.
        let st = unsafe {
            (NDK_PD::disp(pd).NdkCreateMr)(pd, u8::from(fast), create_cb, ctx(4), &mut mr)
        };
        assert_eq!(st, STATUS_SUCCESS);
        mr
    }
    fn close_adapter(&self) {
        // SAFETY: opened by `env`, closed once.
        unsafe { dispatch::close_adapter(self.a) };
    }
}

fn sge(va: u64, len: u32, token: u32) -> NDK_SGE {
    NDK_SGE {
        Anonymous: NDK_SGE_0 {
            LogicalAddress: va as i64,
        },
        Length: len,
        MemoryRegionToken: token,
    }
}

fn send(qp: *mut NDK_QP, c: usize, sges: &[NDK_SGE], flags: u32) -> NTSTATUS {
    // SAFETY: live QP; `sges` holds `len` entries.
    unsafe { (NDK_QP::disp(qp).NdkSend)(qp, ctx(c), sges.as_ptr(), sges.len() as u32, flags) }
}
fn write(qp: *mut NDK_QP, c: usize, sges: &[NDK_SGE], flags: u32) -> NTSTATUS {
    // SAFETY: as for `send`.
    unsafe {
        (NDK_QP::disp(qp).NdkWrite)(
            qp,
            ctx(c),
            sges.as_ptr(),
            sges.len() as u32,
            0x1000,
            0xAB00,
            flags,
        )
    }
}
fn read(qp: *mut NDK_QP, c: usize, sges: &[NDK_SGE], flags: u32) -> NTSTATUS {
    // SAFETY: as for `send`.
    unsafe {
        (NDK_QP::disp(qp).NdkRead)(
            qp,
            ctx(c),
            sges.as_ptr(),
            sges.len() as u32,
            0x2000,
            0xCD00,
            flags,
        )
    }
}
fn receive(qp: *mut NDK_QP, c: usize, sges: &[NDK_SGE]) -> NTSTATUS {
    // SAFETY: as for `send`.
    unsafe { (NDK_QP::disp(qp).NdkReceive)(qp, ctx(c), sges.as_ptr(), sges.len() as u32) }
}
#[allow(clippy::too_many_arguments)]
fn fast_register(
    qp: *mut NDK_QP,
    c: usize,
    mr: *mut NDK_MR,
    pages: &[NDK_LOGICAL_ADDRESS],
    fbo: u32,
    len: usize,
    bva: usize,
    flags: u32,
) -> NTSTATUS {
    // SAFETY: live objects; `pages` holds `len` entries.
    unsafe {
        (NDK_QP::disp(qp).NdkFastRegister)(
            qp,
            ctx(c),
            mr,
            pages.len() as u32,
            pages.as_ptr(),
            fbo,
            len,
            bva as PVOID,
            flags,
        )
    }
}
fn connect(qp: *mut NDK_QP) {
    // SAFETY: live QP.
    unsafe { set_qp_connected(qp, true) };
}
fn results_ex(cq: *mut NDK_CQ, n: usize) -> Vec<NDK_RESULT_EX> {
    // SAFETY: a zeroed result is a valid value (integers and null pointers).
    let mut out = vec![unsafe { core::mem::zeroed::<NDK_RESULT_EX>() }; n];
    // SAFETY: live CQ, `out` holds `n` entries.
    let got = unsafe { (NDK_CQ::disp(cq).NdkGetCqResultsEx)(cq, out.as_mut_ptr(), n as u32) };
    out.truncate(got as usize);
    out
}
fn arm(cq: *mut NDK_CQ, t: u32) {
    // SAFETY: live CQ.
    unsafe { (NDK_CQ::disp(cq).NdkArmCq)(cq, t) };
}
fn cqe(qp: u32, wr_id: u64, status: u32) -> HwCqe {
    HwCqe {
        wr_id,
        qp,
        status,
        byte_len: 0,
        invalidated_rkey: None,
    }
}

// ---------------------------------------------------------------- tests

#[test]
fn open_negotiates_version_and_stamps_every_header() {
    let fake = Fake::new(HwCaps::MODEL_DEFAULT);
    let dev = NdkDevice::new(fake.clone()).expect("device");
    for (req, want) in [
        ((1, 0), (1, 2)),
        ((1, 2), (1, 2)),
        ((2, 0), (2, 1)),
        ((2, 1), (2, 1)),
    ] {
        let a = dev
            .open_adapter(NDK_VERSION {
                Major: req.0,
                Minor: req.1,
            })
            .expect("open");
        let h = header(a);
        assert_eq!((h.Version.Major, h.Version.Minor), want);
        assert_eq!(h.ObjectType, NdkObjectTypeAdapter);
        assert!(h.NdkReserved.rf.iter().all(|p| p.is_null()));
        // SAFETY: live adapter.
        let d = unsafe { (*a).Dispatch };
        assert!(core::ptr::eq(d, &dispatch::ADAPTER_DISPATCH));
        // Objects under it carry the negotiated version.
        let e = Env {
            fake: fake.clone(),
            dev: dev.clone(),
            a,
        };
        let pd = e.pd();
        let cq = e.cq(1);
        for (h, ty) in [(header(pd), NdkObjectTypePd), (header(cq), NdkObjectTypeCq)] {
            assert_eq!((h.Version.Major, h.Version.Minor), want);
            assert_eq!(h.ObjectType, ty);
        }
        assert_eq!(
            e.info().Version,
            NDK_VERSION {
                Major: want.0,
                Minor: want.1
            }
        );
        assert_eq!(close(cq, 1), STATUS_SUCCESS);
        assert_eq!(close(pd, 2), STATUS_SUCCESS);
        e.close_adapter();
    }
    for bad in [(1, 3), (2, 2), (3, 0), (0, 1)] {
        assert_eq!(
            dev.open_adapter(NDK_VERSION {
                Major: bad.0,
                Minor: bad.1
            })
            .err(),
            Some(NDIS_STATUS_BAD_VERSION)
        );
    }
    // Synchronous creates and inline closes: no completion callback at all.
    assert_eq!(events(), vec![]);
}

#[test]
fn several_adapters_per_device_are_independent() {
    let e1 = env();
    let a2 = e1
        .dev
        .open_adapter(NDK_VERSION { Major: 1, Minor: 1 })
        .expect("open");
    let e2 = Env {
        fake: e1.fake.clone(),
        dev: e1.dev.clone(),
        a: a2,
    };
    let pd1 = e1.pd();
    let pd2 = e2.pd();
    assert_eq!(header(pd2).Version, NDK_VERSION { Major: 1, Minor: 2 });
    assert_eq!(header(pd1).Version, NDK_VERSION { Major: 2, Minor: 1 });
    assert_eq!(close(pd2, 2), STATUS_SUCCESS);
    e2.close_adapter();
    assert_eq!(close(pd1, 1), STATUS_SUCCESS);
    e1.close_adapter();
    assert_eq!(
        *e1.fake.waits.lock().unwrap(),
        Vec::<bool>::new(),
        "no close had to wait"
    );
}

#[test]
fn query_adapter_info_sizes_and_values() {
    let e = env();
    let mut buf = [0xEEu8; 0x70];
    let info_ptr = buf.as_mut_ptr().cast::<NDK_ADAPTER_INFO>();
    let q = |p: *mut NDK_ADAPTER_INFO, size: u32| -> (NTSTATUS, u32) {
        let mut s = size;
        // SAFETY: live adapter; `p` is null or has 0x70 bytes.
        let st = unsafe { (NDK_ADAPTER::disp(e.a).NdkQueryAdapterInfo)(e.a, p, &mut s) };
        (st, s)
    };
    assert_eq!(q(null_mut(), 0), (STATUS_BUFFER_TOO_SMALL, 0x68));
    assert_eq!(q(info_ptr, 0x5F), (STATUS_BUFFER_TOO_SMALL, 0x68));
    assert_eq!(q(info_ptr, 0x60), (STATUS_SUCCESS, 0x60));
    assert_eq!(
        &buf[0x60..0x64],
        &[0xEE; 4],
        "RdmaTechnology not written for a 0x60 buffer"
    );
    assert_eq!(q(info_ptr, 0x70), (STATUS_SUCCESS, 0x68));
    assert_eq!(&buf[0x68..0x70], &[0xEE; 8], "nothing beyond 0x68");
    let i = e.info();
    assert_eq!(i.Version, NDK_VERSION { Major: 2, Minor: 1 });
    assert_eq!(i.RdmaTechnology, NdkRoCEv2);
    assert_eq!(i.MaxCqDepth, 65536);
    assert_eq!(i.MaxSrqDepth, 4096);
    assert_eq!(i.FRMRPageCount, 512);
    assert_eq!(i.MaxWindowSize, 0);
    assert_eq!(i.MaxInlineDataSize, 0);
    assert_eq!(i.AdapterFlags, NDK_ADAPTER_FLAG_RDMA_READ_SINK_NOT_REQUIRED);
    assert_eq!(i.AdapterFlags & NDK_ADAPTER_FLAG_CQ_RESIZE_SUPPORTED, 0);
    assert_eq!(
        i.AdapterFlags & NDK_ADAPTER_FLAG_CQ_INTERRUPT_MODERATION_SUPPORTED,
        0
    );
    e.close_adapter();
}

#[test]
fn unsupported_and_unimplemented_functions() {
    let e = env();
    let pd = e.pd();
    let cq = e.cq(1);
    let guid = GUID::default();
    let mut ext = NDK_EXTENSION_INTERFACE {
        Dispatch: core::ptr::null(),
    };
    // SAFETY: live objects, valid pointers (as for every call below).
    let st = unsafe {
        (NDK_ADAPTER::disp(e.a).NdkQueryExtension)(
            hdr(e.a),
            &guid,
            NDK_VERSION::default(),
            &mut ext,
        )
    };
    assert_eq!(st, STATUS_NOT_SUPPORTED);
    // SAFETY: as above.
    let st = unsafe {
        (NDK_PD::disp(pd).NdkQueryExtension)(hdr(pd), &guid, NDK_VERSION::default(), &mut ext)
    };
    assert_eq!(st, STATUS_NOT_SUPPORTED);
    // SAFETY: as above.
    let st = unsafe {
        (NDK_CQ::disp(cq).NdkQueryExtension)(
            hdr(cq),
            &guid,
            NDK_VERSION { Major: 1, Minor: 0 },
            &mut ext,
        )
    };
    assert_eq!(st, STATUS_NOT_SUPPORTED);
    let mut mw = null_mut();
    // SAFETY: as above.
    let st = unsafe { (NDK_PD::disp(pd).NdkCreateMw)(pd, create_cb, ctx(9), &mut mw) };
    assert_eq!(st, STATUS_NOT_SUPPORTED);
    assert!(mw.is_null());
    // SAFETY: as above.
    let st = unsafe { (NDK_CQ::disp(cq).NdkResizeCq)(cq, 128, request_cb, ctx(9)) };
    assert_eq!(st, STATUS_NOT_SUPPORTED);
    // SAFETY: as above.
    let st = unsafe { (NDK_CQ::disp(cq).NdkControlCqInterruptModeration)(cq, 20, u32::MAX) };
    assert_eq!(st, STATUS_NOT_SUPPORTED);
    let mut conn = null_mut();
    // SAFETY: as above.
    let st =
        unsafe { (NDK_ADAPTER::disp(e.a).NdkCreateConnector)(e.a, create_cb, ctx(9), &mut conn) };
    assert_eq!(st, STATUS_NOT_IMPLEMENTED);
    let mut lis = null_mut();
    // SAFETY: as above.
    let st = unsafe {
        (NDK_ADAPTER::disp(e.a).NdkCreateListener)(
            e.a,
            connect_event_cb,
            null_mut(),
            create_cb,
            ctx(9),
            &mut lis,
        )
    };
    assert_eq!(st, STATUS_NOT_IMPLEMENTED);
    let addr = SOCKADDR::default();
    let mut se = null_mut();
    // SAFETY: as above.
    let st = unsafe {
        (NDK_ADAPTER::disp(e.a).NdkCreateSharedEndpoint)(e.a, &addr, 16, create_cb, ctx(9), &mut se)
    };
    assert_eq!(st, STATUS_NOT_IMPLEMENTED);
    // Without a connection engine no connection object exists; the tables' functions refuse
    // a null object.
    let c = &dispatch::CONNECTOR_DISPATCH;
    // SAFETY: a null object is refused before anything is dereferenced.
    let st = unsafe { (c.NdkReject)(null_mut(), core::ptr::null(), 0) };
    assert_eq!(st, STATUS_INVALID_PARAMETER);
    // SAFETY: as above.
    let st = unsafe { (c.NdkDisconnect)(null_mut(), request_cb, null_mut()) };
    assert_eq!(st, STATUS_INVALID_PARAMETER);
    // SAFETY: as above.
    let st = unsafe {
        (dispatch::LISTENER_DISPATCH.NdkListen)(null_mut(), &addr, 16, request_cb, null_mut())
    };
    assert_eq!(st, STATUS_INVALID_PARAMETER);
    assert!(conn.is_null() && lis.is_null() && se.is_null());
    assert_eq!(
        events(),
        vec![],
        "no create or request completion for inline failures"
    );
    assert_eq!(close(cq, 1), STATUS_SUCCESS);
    assert_eq!(close(pd, 2), STATUS_SUCCESS);
    e.close_adapter();
}

unsafe extern "system" fn connect_event_cb(_c: PVOID, _conn: *mut NDK_CONNECTOR) {}

#[test]
fn create_cq_depth_limits() {
    let e = env();
    assert_eq!(e.cq_status(0, 1).0, STATUS_INVALID_PARAMETER);
    assert_eq!(e.cq_status(65537, 1).0, STATUS_INVALID_PARAMETER);
    let (st, cq) = e.cq_status(65536, 1);
    assert_eq!(st, STATUS_SUCCESS);
    assert_eq!(close(cq, 1), STATUS_SUCCESS);
    assert_eq!(events(), vec![]);
    e.close_adapter();
}

#[test]
fn antecedent_close_pends_until_the_last_successor_closes() {
    let e = env();
    let pd = e.pd();
    let mr = e.mr(pd, false);
    let cq = e.cq(1);
    let qp = e.qp(pd, cq, cq);
    assert_eq!(close(pd, 10), STATUS_PENDING);
    assert_eq!(close(cq, 11), STATUS_PENDING);
    assert_eq!(events(), vec![]);
    assert_eq!(close(mr, 12), STATUS_SUCCESS);
    assert_eq!(events(), vec![], "the QP still holds the PD");
    let pd_h = e.fake.last("pd");
    assert_eq!(e.fake.count(&Hw::Destroy("pd", pd_h)), 0);
    assert_eq!(close(qp, 13), STATUS_SUCCESS);
    // QP's successor counts drop after its close: CQ first, then PD (release order), each
    // CloseCompletion exactly once.
    assert_eq!(events(), vec![Ev::Close(11), Ev::Close(10)]);
    assert_eq!(e.fake.count(&Hw::Destroy("pd", pd_h)), 1);
    e.close_adapter();
    assert_eq!(events(), vec![]);
}

#[test]
fn cq_close_inside_its_notification_callback_completes_after_it_returns() {
    let e = env();
    let cq = e.cq(5);
    let cq_h = e.fake.last("cq");
    e.fake.push_cqe(cq_h, cqe(99, 1, 0));
    CLOSE_IN_CQ_CB.with(|c| c.set(cq));
    arm(cq, NDK_CQ_NOTIFY_ANY);
    // Callback, the close inside it returned PENDING (0x103), then CloseCompletion.
    assert_eq!(
        events(),
        vec![
            Ev::Cq(5, STATUS_SUCCESS),
            Ev::Request(STATUS_PENDING as u32 as usize),
            Ev::Close(77)
        ]
    );
    assert_eq!(e.fake.count(&Hw::Destroy("cq", cq_h)), 1);
    e.close_adapter();
}

#[test]
fn adapter_close_blocks_until_descendants_are_closed() {
    let e = env();
    let pd = e.pd();
    let pd_addr = pd as usize;
    *e.fake.wait_hook.lock().unwrap() = Some(Box::new(move || {
        // Another thread of the consumer finishes its closes while the adapter close waits.
        assert_eq!(close(pd_addr as *mut NDK_PD, 3), STATUS_SUCCESS);
    }));
    e.close_adapter();
    assert_eq!(
        *e.fake.waits.lock().unwrap(),
        vec![false],
        "waited once, not drained before"
    );
    assert_eq!(e.fake.count(&Hw::Destroy("pd", e.fake.last("pd"))), 1);
    assert_eq!(events(), vec![]);
}

#[test]
fn create_qp_limits_and_cq_ownership() {
    let caps = HwCaps {
        max_qp_wr: 16,
        max_sge: 4,
        ..HwCaps::MODEL_DEFAULT
    };
    let e = env_with(caps);
    let pd = e.pd();
    let cq = e.cq(1);
    for (rq, iq, rs, is, inl) in [
        (17, 8, 1, 1, 0),
        (8, 17, 1, 1, 0),
        (8, 8, 5, 1, 0),
        (8, 8, 1, 5, 0),
        (8, 8, 1, 1, 1),
    ] {
        assert_eq!(
            e.qp_status(pd, cq, cq, rq, iq, rs, is, inl).0,
            STATUS_INVALID_PARAMETER,
            "{rq} {iq} {rs} {is} {inl}"
        );
    }
    let (st, qp) = e.qp_status(pd, cq, cq, 16, 5, 4, 4, 0);
    assert_eq!(st, STATUS_SUCCESS);
    let spec = e.fake.st.lock().unwrap().qps[0];
    assert_eq!(
        (
            spec.max_send_wr,
            spec.max_recv_wr,
            spec.max_send_sge,
            spec.max_recv_sge
        ),
        (8, 16, 4, 4)
    );
    assert_eq!(spec.srq, None);
    // A CQ of another adapter is refused.
    let a2 = e
        .dev
        .open_adapter(NDK_VERSION { Major: 2, Minor: 1 })
        .expect("open");
    let e2 = Env {
        fake: e.fake.clone(),
        dev: e.dev.clone(),
        a: a2,
    };
    let cq2 = e2.cq(2);
    assert_eq!(
        e.qp_status(pd, cq2, cq, 4, 4, 1, 1, 0).0,
        STATUS_INVALID_PARAMETER
    );
    assert_eq!(close(cq2, 1), STATUS_SUCCESS);
    e2.close_adapter();
    assert_eq!(close(qp, 1), STATUS_SUCCESS);
    assert_eq!(close(cq, 1), STATUS_SUCCESS);
    assert_eq!(close(pd, 1), STATUS_SUCCESS);
    e.close_adapter();
}

#[test]
fn initiator_requests_need_a_connection_receives_do_not() {
    let e = env();
    let pd = e.pd();
    let cq = e.cq(1);
    let qp = e.qp(pd, cq, cq);
    let mr = e.mr(pd, true);
    let s = [sge(0x1000, 8, 0x100)];
    assert_eq!(send(qp, 1, &s, 0), STATUS_CONNECTION_INVALID);
    assert_eq!(write(qp, 1, &s, 0), STATUS_CONNECTION_INVALID);
    assert_eq!(read(qp, 1, &s, 0), STATUS_CONNECTION_INVALID);
    assert_eq!(
        fast_register(qp, 1, mr, &[0x1000], 0, 8, 0x1000, 0),
        STATUS_CONNECTION_INVALID
    );
    // SAFETY: live objects.
    let st = unsafe { (NDK_QP::disp(qp).NdkInvalidate)(qp, ctx(1), hdr(mr), 0) };
    assert_eq!(st, STATUS_CONNECTION_INVALID);
    // SAFETY: live QP.
    let st = unsafe { (NDK_QP::disp(qp).NdkSendAndInvalidate)(qp, ctx(1), s.as_ptr(), 1, 0, 0x55) };
    assert_eq!(st, STATUS_CONNECTION_INVALID);
    assert_eq!(e.fake.wqes(), vec![]);
    assert_eq!(receive(qp, 7, &s), STATUS_SUCCESS);
    let qp_h = e.fake.last("qp");
    assert_eq!(e.fake.recvs(), vec![(qp_h, 0, wr_id(tag::RQ, 0), 1)]);
    assert_eq!(e.fake.count(&Hw::RingRecv(qp_h)), 1);
    for p in [hdr(mr), hdr(qp)] {
        assert_eq!(close(p.cast::<NDK_PD>(), 1), STATUS_SUCCESS);
    }
    assert_eq!(close(cq, 1), STATUS_SUCCESS);
    assert_eq!(close(pd, 1), STATUS_SUCCESS);
    e.close_adapter();
}

#[test]
fn deferred_requests_share_one_doorbell_and_an_inline_failure_rings_first() {
    let e = env();
    let pd = e.pd();
    let cq = e.cq(1);
    let qp = e.qp(pd, cq, cq);
    connect(qp);
    let (qp_h, cq_h) = (e.fake.last("qp"), e.fake.last("cq"));
    e.fake.clear_log();
    let s = [sge(0x1000, 8, 0x100)];
    assert_eq!(send(qp, 1, &s, NDK_OP_FLAG_DEFER), STATUS_SUCCESS);
    assert_eq!(
        write(qp, 2, &s, NDK_OP_FLAG_DEFER | NDK_OP_FLAG_SILENT_SUCCESS),
        STATUS_SUCCESS
    );
    assert_eq!(
        e.fake.count(&Hw::RingSend(qp_h)),
        0,
        "deferred: no doorbell yet"
    );
    assert_eq!(read(qp, 3, &s, 0), STATUS_SUCCESS);
    assert_eq!(
        e.fake.log(),
        vec![Hw::RingSend(qp_h)],
        "one doorbell for three WQEs"
    );
    let w = e.fake.wqes();
    assert_eq!(w.len(), 3);
    assert_eq!(
        w.iter()
            .map(|w| (w.index, w.opcode, w.send_flags, w.wr_id))
            .collect::<Vec<_>>(),
        vec![
            (0, WrOpcode::Send, 2, wr_id(tag::SQ, 0)),
            (1, WrOpcode::RdmaWrite, 0, wr_id(tag::SQ, 1)),
            (2, WrOpcode::RdmaRead, 2, wr_id(tag::SQ, 2)),
        ]
    );
    assert_eq!(
        (w[1].remote_addr, w[1].rkey, w[2].remote_addr, w[2].rkey),
        (0x1000, 0xAB00, 0x2000, 0xCD00)
    );
    // FR(defer) → SUCCESS; then a failing request: the deferred WQE is indicated first.
    e.fake.clear_log();
    assert_eq!(
        send(qp, 4, &s, NDK_OP_FLAG_DEFER | NDK_OP_FLAG_READ_FENCE),
        STATUS_SUCCESS
    );
    assert_eq!(send(qp, 5, &s, 0x400), STATUS_INVALID_PARAMETER);
    assert_eq!(e.fake.log(), vec![Hw::RingSend(qp_h)]);
    assert_eq!(e.fake.wqes().len(), 4, "the failed request wrote nothing");
    assert_eq!(e.fake.wqes()[3].send_flags, 2 | 1, "SIGNALED | FENCE");
    // A full initiator queue is an inline failure too: deferred WQEs are rung first, and
    // the slot is not consumed. (The device ring itself cannot refuse a WQE: queue space is
    // tracked from completions.) Indexes 4..=7 fill the queue of depth 8.
    e.fake.clear_log();
    for c in 70..74 {
        assert_eq!(send(qp, c, &s, NDK_OP_FLAG_DEFER), STATUS_SUCCESS);
    }
    assert_eq!(send(qp, 8, &s, 0), STATUS_INSUFFICIENT_RESOURCES);
    assert_eq!(e.fake.log(), vec![Hw::RingSend(qp_h)]);
    assert_eq!(e.fake.wqes().len(), 8, "the refused request wrote nothing");
    // Completing index 0 frees one slot.
    e.fake
        .push_cqe(cq_h, cqe(qp_h, wr_id(tag::SQ, 0), wc::SUCCESS));
    let r = results_ex(cq, 8);
    assert_eq!(
        r.iter()
            .map(|r| r.RequestContext as usize)
            .collect::<Vec<_>>(),
        vec![1]
    );
    assert_eq!(send(qp, 9, &s, 0), STATUS_SUCCESS);
    assert_eq!(
        e.fake.wqes().last().map(|w| (w.index, w.wr_id)),
        Some((8, wr_id(tag::SQ, 8))),
        "the refused index 8 is used by the next post"
    );
    // A failure with nothing deferred rings nothing.
    e.fake.clear_log();
    assert_eq!(send(qp, 6, &s, NDK_OP_FLAG_INLINE), STATUS_NOT_SUPPORTED);
    assert_eq!(e.fake.log(), vec![]);
    assert_eq!(close(qp, 1), STATUS_SUCCESS);
    assert_eq!(close(cq, 1), STATUS_SUCCESS);
    assert_eq!(close(pd, 1), STATUS_SUCCESS);
    e.close_adapter();
}

/// The per-QP admission words (connected, and the SGE limit, in one compare) follow every
/// connect and disconnect, and each refused condition keeps its own status, in the order
/// connection, flags, SGE count; a refusal rings for the deferred requests before it.
#[test]
fn admission_follows_the_connection_and_refusals_keep_their_status() {
    let e = env();
    let pd = e.pd();
    let cq = e.cq(1);
    let qp = e.qp(pd, cq, cq); // MaxInitiatorRequestSge 4
    let qp_h = e.fake.last("qp");
    let s1 = [sge(0x1000, 8, 0x100)];
    let s4 = [sge(0x1000, 1, 1); 4];
    let s5 = [sge(0x1000, 1, 1); 5];
    let mut posted = 0;
    for round in 0..3 {
        // SAFETY: live QP.
        unsafe { set_qp_connected(qp, false) };
        assert_eq!(read(qp, 1, &s1, 0), STATUS_CONNECTION_INVALID, "{round}");
        assert_eq!(write(qp, 1, &s1, 0), STATUS_CONNECTION_INVALID);
        assert_eq!(send(qp, 1, &[], 0), STATUS_CONNECTION_INVALID, "no SGE");
        // The connection is reported before bad flags or too many SGEs.
        assert_eq!(
            write(qp, 1, &s5, NDK_OP_FLAG_INLINE),
            STATUS_CONNECTION_INVALID
        );
        assert_eq!(read(qp, 1, &s5, 0x1000), STATUS_CONNECTION_INVALID);
        assert_eq!(
            e.fake.wqes().len(),
            posted,
            "nothing posted while disconnected"
        );
        connect(qp);
        let rings = e.fake.count(&Hw::RingSend(qp_h));
        assert_eq!(read(qp, 1, &s1, NDK_OP_FLAG_DEFER), STATUS_SUCCESS);
        assert_eq!(e.fake.count(&Hw::RingSend(qp_h)), rings, "deferred");
        // Flags before the SGE count; each refusal rings for the deferred read once.
        assert_eq!(write(qp, 1, &s5, NDK_OP_FLAG_INLINE), STATUS_NOT_SUPPORTED);
        assert_eq!(e.fake.count(&Hw::RingSend(qp_h)), rings + 1);
        assert_eq!(send(qp, 1, &s5, 0x1000), STATUS_INVALID_PARAMETER);
        assert_eq!(read(qp, 1, &s5, 0), STATUS_INVALID_PARAMETER);
        assert_eq!(write(qp, 1, &s5, 0), STATUS_INVALID_PARAMETER);
        assert_eq!(e.fake.count(&Hw::RingSend(qp_h)), rings + 1, "rung once");
        // At the limit, and with none.
        assert_eq!(write(qp, 1, &s4, 0), STATUS_SUCCESS);
        assert_eq!(send(qp, 1, &[], NDK_OP_FLAG_SILENT_SUCCESS), STATUS_SUCCESS);
        assert_eq!(e.fake.count(&Hw::RingSend(qp_h)), rings + 3);
        posted += 3;
        assert_eq!(e.fake.wqes().len(), posted);
        // Retire the round, so the 4-deep queue has room in the next round: the two
        // signalled requests report, the silent one does not.
        let cq_h = e.fake.last("cq");
        for back in (1..=3).rev() {
            e.fake.push_cqe(
                cq_h,
                cqe(qp_h, wr_id(tag::SQ, (posted - back) as u32), wc::SUCCESS),
            );
        }
        assert_eq!(
            results_ex(cq, 8).len(),
            2,
            "a silent success reports nothing"
        );
    }
    // Receives never needed the connection.
    assert_eq!(receive(qp, 7, &s1), STATUS_SUCCESS);
    assert_eq!(close(qp, 1), STATUS_SUCCESS);
    assert_eq!(close(cq, 1), STATUS_SUCCESS);
    assert_eq!(close(pd, 1), STATUS_SUCCESS);
    e.close_adapter();
}

#[test]
fn work_request_flag_and_sge_validation() {
    let e = env();
    let pd = e.pd();
    let cq = e.cq(1);
    let qp = e.qp(pd, cq, cq); // MaxInitiatorRequestSge 4, MaxReceiveRequestSge 4
    connect(qp);
    let s5 = [sge(0x1000, 1, 1); 5];
    let s4 = [sge(0x1000, 1, 1); 4];
    assert_eq!(send(qp, 1, &s5, 0), STATUS_INVALID_PARAMETER);
    assert_eq!(write(qp, 1, &s5, 0), STATUS_INVALID_PARAMETER);
    assert_eq!(read(qp, 1, &s5, 0), STATUS_INVALID_PARAMETER);
    assert_eq!(receive(qp, 1, &s5), STATUS_INVALID_PARAMETER);
    assert_eq!(send(qp, 1, &s4, 0), STATUS_SUCCESS);
    // SAFETY: live QP; null SGL with a count.
    let st = unsafe { (NDK_QP::disp(qp).NdkSend)(qp, ctx(1), core::ptr::null(), 2, 0) };
    assert_eq!(st, STATUS_INVALID_PARAMETER);
    // Zero SGEs is a zero-length send.
    assert_eq!(send(qp, 1, &[], 0), STATUS_SUCCESS);
    // Unknown bits and bits the request does not take.
    assert_eq!(send(qp, 1, &s4, 0x1000), STATUS_INVALID_PARAMETER);
    assert_eq!(
        send(qp, 1, &s4, NDK_OP_FLAG_ALLOW_REMOTE_READ),
        STATUS_INVALID_PARAMETER
    );
    assert_eq!(
        write(qp, 1, &s4, NDK_OP_FLAG_SEND_AND_SOLICIT_EVENT),
        STATUS_INVALID_PARAMETER
    );
    assert_eq!(
        read(qp, 1, &s4, NDK_OP_FLAG_INLINE),
        STATUS_INVALID_PARAMETER
    );
    assert_eq!(write(qp, 1, &s4, NDK_OP_FLAG_INLINE), STATUS_NOT_SUPPORTED);
    // READ_LOCAL_INVALIDATE is accepted and ignored (Project decision (b)).
    assert_eq!(
        read(qp, 1, &s4, NDK_OP_FLAG_RDMA_READ_LOCAL_INVALIDATE),
        STATUS_SUCCESS
    );
    // Total length above MaxTransferLength.
    let big = [sge(0, 0x8000_0000, 1), sge(0, 1, 1)];
    assert_eq!(write(qp, 1, &big, 0), STATUS_INVALID_PARAMETER);
    // Bind: memory windows are not supported.
    // SAFETY: live QP; the other pointers are not used.
    let st =
        unsafe { (NDK_QP::disp(qp).NdkBind)(qp, ctx(1), null_mut(), null_mut(), null_mut(), 0, 0) };
    assert_eq!(st, STATUS_NOT_SUPPORTED);
    assert_eq!(e.fake.wqes().len(), 3);
    assert_eq!(close(qp, 1), STATUS_SUCCESS);
    assert_eq!(close(cq, 1), STATUS_SUCCESS);
    assert_eq!(close(pd, 1), STATUS_SUCCESS);
    e.close_adapter();
}

#[test]
fn fast_register_rules_and_tokens() {
    let e = env();
    let pd = e.pd();
    let cq = e.cq(1);
    let qp = e.qp(pd, cq, cq);
    connect(qp);
    let mr = e.mr(pd, true);
    let init = |pages: u32, remote: bool| -> NTSTATUS {
        // SAFETY: live MR.
        unsafe {
            (NDK_MR::disp(mr).NdkInitializeFastRegisterMr)(
                mr,
                pages,
                u8::from(remote),
                request_cb,
                ctx(8),
            )
        }
    };
    assert_eq!(init(0, false), STATUS_INVALID_PARAMETER);
    assert_eq!(init(513, false), STATUS_IMPLEMENTATION_LIMIT);
    assert_eq!(init(4, false), STATUS_SUCCESS);
    let mr_h = e.fake.last("mr");
    let pages = [0x10_0000, 0x23_0000, 0x7_7000];
    let rr = NDK_OP_FLAG_ALLOW_REMOTE_READ;
    assert_eq!(
        fast_register(qp, 1, mr, &pages, 0x10, 100, 0x5000_0010, rr),
        STATUS_ACCESS_VIOLATION
    );
    assert_eq!(
        fast_register(
            qp,
            1,
            mr,
            &pages,
            0x10,
            100,
            0x5000_0010,
            NDK_OP_FLAG_ALLOW_REMOTE_WRITE
        ),
        STATUS_ACCESS_VIOLATION
    );
    assert_eq!(init(4, true), STATUS_SUCCESS);
    let mr_h2 = e.fake.last("mr");
    assert_ne!(mr_h, mr_h2, "re-initialization replaces the FRMR");
    assert_eq!(e.fake.count(&Hw::Destroy("mr", mr_h)), 1);
    let five = [0x1000; 5];
    assert_eq!(
        fast_register(qp, 1, mr, &five, 0, 100, 0x5000_0000, rr),
        STATUS_INVALID_PARAMETER
    );
    assert_eq!(
        fast_register(qp, 1, mr, &[], 0, 100, 0x5000_0000, rr),
        STATUS_INVALID_PARAMETER
    );
    assert_eq!(
        fast_register(qp, 1, mr, &[0x1008], 0, 100, 0x5000_0000, rr),
        STATUS_INVALID_PARAMETER
    );
    assert_eq!(
        fast_register(qp, 1, mr, &pages, 0x10, 3 * 4096 - 0xF, 0x5000_0010, rr),
        STATUS_INVALID_PARAMETER
    );
    assert_eq!(
        fast_register(qp, 1, mr, &pages, 0x1000, 1, 0x5000_1000, rr),
        STATUS_INVALID_PARAMETER
    );
    assert_eq!(
        fast_register(qp, 1, mr, &pages, 0x10, 100, 0x5000_0020, rr),
        STATUS_INVALID_PARAMETER
    );
    assert_eq!(
        fast_register(qp, 1, mr, &pages, 0, 100, 0, rr),
        STATUS_INVALID_PARAMETER,
        "zero-based"
    );
    assert_eq!(
        fast_register(qp, 1, mr, &pages, 0x10, 100, 0x5000_0010, 0x20),
        STATUS_INVALID_PARAMETER
    );
    assert_eq!(
        fast_register(
            qp,
            1,
            mr,
            &pages,
            0x10,
            100,
            0x5000_0010,
            NDK_OP_FLAG_SEND_AND_SOLICIT_EVENT
        ),
        STATUS_INVALID_PARAMETER
    );
    assert_eq!(e.fake.wqes(), vec![]);
    assert_eq!(
        e.fake.fast_regs(),
        vec![],
        "no page list for a refused request"
    );
    // SAFETY: live MR.
    let key0 = unsafe { (NDK_MR::disp(mr).NdkGetRemoteTokenFromMr)(mr) };
    assert_eq!(key0, mr_h2 << 8);
    let flags = NDK_OP_FLAG_ALLOW_REMOTE_WRITE | NDK_OP_FLAG_RDMA_READ_SINK;
    assert_eq!(
        fast_register(qp, 9, mr, &pages, 0x10, 3 * 4096 - 0x10, 0x5000_0010, flags),
        STATUS_SUCCESS
    );
    // SAFETY: live MR.
    let key1 = unsafe { (NDK_MR::disp(mr).NdkGetRemoteTokenFromMr)(mr) };
    // SAFETY: live MR.
    let lkey1 = unsafe { (NDK_MR::disp(mr).NdkGetLocalTokenFromMr)(mr) };
    assert_eq!((key1, lkey1), (key0 + 1, key0 + 1), "the key byte advances");
    let w = e.fake.wqes();
    assert_eq!(w.len(), 1);
    assert_eq!(w[0].opcode, WrOpcode::FastRegMr);
    // LOCAL_WRITE | REMOTE_WRITE (IB bits 0 and 1).
    assert_eq!(
        w[0].fast_reg,
        Some((mr_h2, 0x5000_0010, 3, 3 * 4096 - 0x10, 0b011, key1))
    );
    // The page list went to the FRMR's directory, which the WQE names.
    assert_eq!(
        e.fake.fast_regs(),
        vec![(mr_h2, vec![0x10_0000, 0x23_0000, 0x7_7000])]
    );
    // Invalidate names the current key; a registered (non-fast) MR is no target.
    // SAFETY: live objects.
    let st = unsafe {
        (NDK_QP::disp(qp).NdkInvalidate)(qp, ctx(10), hdr(mr), NDK_OP_FLAG_SILENT_SUCCESS)
    };
    assert_eq!(st, STATUS_SUCCESS);
    let w = e.fake.wqes();
    assert_eq!(
        (w[1].opcode, w[1].invalidate_rkey, w[1].send_flags),
        (WrOpcode::LocalInv, key1, 0)
    );
    let plain = e.mr(pd, false);
    // SAFETY: live objects.
    let st = unsafe { (NDK_QP::disp(qp).NdkInvalidate)(qp, ctx(11), hdr(plain), 0) };
    assert_eq!(st, STATUS_INVALID_PARAMETER);
    // SAFETY: live objects; a PD header is no MR.
    let st = unsafe { (NDK_QP::disp(qp).NdkInvalidate)(qp, ctx(11), hdr(pd), 0) };
    assert_eq!(st, STATUS_INVALID_PARAMETER);
    // Register on a fast MR / initialize a normal one.
    let mdl = MDL {
        Next: null_mut(),
        Size: 0,
        MdlFlags: 0,
        AllocationProcessorNumber: 0,
        Reserved: 0,
        Process: null_mut(),
        MappedSystemVa: null_mut(),
        StartVa: 0x7000_0000 as PVOID,
        ByteCount: 0x2000,
        ByteOffset: 0,
    };
    let mut mdl = mdl;
    // SAFETY: live MR, valid MDL.
    let st =
        unsafe { (NDK_MR::disp(mr).NdkRegisterMr)(mr, &mut mdl, 0x100, 0, request_cb, ctx(1)) };
    assert_eq!(st, STATUS_INVALID_DEVICE_REQUEST);
    // SAFETY: live MR.
    let st = unsafe {
        (NDK_MR::disp(plain).NdkInitializeFastRegisterMr)(plain, 4, 0, request_cb, ctx(1))
    };
    assert_eq!(st, STATUS_INVALID_DEVICE_REQUEST);
    assert_eq!(events(), vec![]);
    for p in [hdr(mr), hdr(plain), hdr(qp)] {
        assert_eq!(close(p.cast::<NDK_PD>(), 1), STATUS_SUCCESS);
    }
    assert_eq!(close(cq, 1), STATUS_SUCCESS);
    assert_eq!(close(pd, 1), STATUS_SUCCESS);
    e.close_adapter();
}

/// An MDL followed by its PFN array, as the memory manager lays it out.
#[repr(C)]
struct MdlPfn<const N: usize> {
    mdl: MDL,
    pfn: [usize; N],
}

impl<const N: usize> MdlPfn<N> {
    fn new(start_va: usize, offset: u32, count: u32, pfn: [usize; N]) -> Self {
        MdlPfn {
            mdl: MDL {
                Next: null_mut(),
                Size: core::mem::size_of::<Self>() as i16,
                MdlFlags: MDL_PAGES_LOCKED,
                AllocationProcessorNumber: 0,
                Reserved: 0,
                Process: null_mut(),
                MappedSystemVa: null_mut(),
                StartVa: start_va as PVOID,
                ByteCount: count,
                ByteOffset: offset,
            },
            pfn,
        }
    }
    /// The MDL pointer, with provenance over the PFN array too.
    fn ptr(&mut self) -> *mut MDL {
        (self as *mut Self).cast()
    }
}

#[test]
fn register_mr_checks_the_mdl_chain_and_flags() {
    let e = env();
    let pd = e.pd();
    let mr = e.mr(pd, false);
    let mut second = MdlPfn::new(0x7000_2000, 0, 0x1000, [0x777]);
    let mut first = MdlPfn::new(0x7000_0000, 0x800, 0x1800, [0x100, 0x2A5]);
    first.mdl.Next = second.ptr();
    let reg = |mdl: *mut MDL, len: usize, flags: u32| -> NTSTATUS {
        // SAFETY: live MR, valid MDL chain with PFN arrays.
        unsafe { (NDK_MR::disp(mr).NdkRegisterMr)(mr, mdl, len, flags, request_cb, ctx(1)) }
    };
    let f = first.ptr();
    assert_eq!(
        reg(f, 0x2800, 0x10),
        STATUS_INVALID_PARAMETER,
        "unknown flag"
    );
    assert_eq!(
        reg(f, 0x2800, 0x4),
        STATUS_INVALID_PARAMETER,
        "0x4 without local write"
    );
    assert_eq!(reg(f, 0, 0), STATUS_INVALID_PARAMETER);
    assert_eq!(
        reg(f, 0x2801, 0),
        STATUS_INVALID_PARAMETER,
        "beyond the chain"
    );
    let mut gap = MdlPfn::new(0x7000_3000, 0, 0x1000, [0x778]);
    let mut broken = MdlPfn::new(0x7000_0000, 0x800, 0x1800, [0x100, 0x2A5]);
    broken.mdl.Next = gap.ptr();
    assert_eq!(
        reg(broken.ptr(), 0x1801, 0),
        STATUS_INVALID_PARAMETER,
        "not contiguous"
    );
    let flags = NDK_MR_FLAG_ALLOW_REMOTE_WRITE | NDK_MR_FLAG_ALLOW_REMOTE_READ;
    assert_eq!(reg(f, 0x2800, flags), STATUS_SUCCESS);
    let h = e.fake.last("mr");
    let spec = e.fake.st.lock().unwrap().mrs.last().map(|m| m.1.clone());
    assert_eq!(
        spec,
        Some(MrRec::Normal {
            start: 0x7000_0800,
            length: 0x2800,
            access: 0b111,
            pages: vec![0x10_0000, 0x2A_5000, 0x77_7000],
        })
    );
    // SAFETY: live MR.
    let got = unsafe { (NDK_MR::disp(mr).NdkGetLocalTokenFromMr)(mr) };
    assert_eq!(got, h << 8);
    assert_eq!(
        reg(f, 0x100, 0),
        STATUS_INVALID_DEVICE_REQUEST,
        "already registered"
    );
    // SAFETY: live MR.
    let got = unsafe { (NDK_MR::disp(mr).NdkDeregisterMr)(mr, request_cb, ctx(2)) };
    assert_eq!(got, STATUS_SUCCESS);
    assert_eq!(e.fake.count(&Hw::Destroy("mr", h)), 1);
    // SAFETY: live MR.
    let got = unsafe { (NDK_MR::disp(mr).NdkDeregisterMr)(mr, request_cb, ctx(2)) };
    assert_eq!(got, STATUS_INVALID_DEVICE_REQUEST);
    // A shorter registration takes only the pages it spans (local read only: no rkey, and
    // no LOCAL_WRITE either: the device may not write it).
    assert_eq!(reg(f, 0x800, 0), STATUS_SUCCESS);
    let spec = e.fake.st.lock().unwrap().mrs.last().map(|m| m.1.clone());
    assert_eq!(
        spec,
        Some(MrRec::Normal {
            start: 0x7000_0800,
            length: 0x800,
            access: 0b000,
            pages: vec![0x10_0000]
        })
    );
    // SAFETY: live MR.
    let got = unsafe { (NDK_MR::disp(mr).NdkGetRemoteTokenFromMr)(mr) };
    assert_eq!(got, 0);
    // Privileged token: the PD's DMA MR lkey.
    let dma = e
        .fake
        .st
        .lock()
        .unwrap()
        .mrs
        .iter()
        .find(|m| m.1 == MrRec::Dma)
        .map(|m| m.0)
        .expect("dma mr");
    let mut tok = 0;
    // SAFETY: live PD.
    unsafe { (NDK_PD::disp(pd).NdkGetPrivilegedMemoryRegionToken)(pd, &mut tok) };
    assert_eq!(tok, dma << 8);
    assert_eq!(events(), vec![]);
    assert_eq!(close(mr, 1), STATUS_SUCCESS);
    assert_eq!(close(pd, 1), STATUS_SUCCESS);
    assert_eq!(e.fake.count(&Hw::Destroy("mr", dma)), 1);
    e.close_adapter();
}

/// §5.7: whatever is wrong with the MDL chain (os::mdl's checks), NdkRegisterMr and
/// NdkBuildLam fail inline with STATUS_INVALID_PARAMETER and no device MR is made; only the
/// MDLs that hold the `Length` bytes are read, so a chain that breaks after them is fine.
#[test]
fn malformed_mdl_chains_are_invalid_parameter() {
    let e = env();
    let pd = e.pd();
    let mr = e.mr(pd, false);
    let reg = |mdl: *mut MDL, len: usize| -> NTSTATUS {
        // SAFETY: live MR; `mdl` heads a chain of live MDLs with their PFN arrays.
        unsafe { (NDK_MR::disp(mr).NdkRegisterMr)(mr, mdl, len, 0, request_cb, ctx(1)) }
    };
    let lam = |mdl: *mut MDL, len: usize| -> (NTSTATUS, u32, u64) {
        let mut buf = [0u64; 8];
        let (mut size, mut fbo) = (64u32, 0u32);
        let p = buf.as_mut_ptr().cast::<NDK_LOGICAL_ADDRESS_MAPPING>();
        // SAFETY: live adapter, MDLs as above, a 64-byte LAM buffer.
        let st = unsafe {
            (NDK_ADAPTER::disp(e.a).NdkBuildLAM)(
                e.a,
                mdl,
                len,
                Some(request_cb),
                ctx(2),
                p,
                &mut size,
                &mut fbo,
            )
        };
        (st, buf[1] as u32, buf[2])
    };
    let mrs = || e.fake.st.lock().unwrap().mrs.len();
    let before = mrs();
    let mut misaligned = MdlPfn::new(0x7000_0010, 0, 0x100, [0x1]);
    let mut big_offset = MdlPfn::new(0x7000_0000, 0x1000, 0x100, [0x1]);
    let mut empty = MdlPfn::new(0x7000_0000, 0, 0, [0x1]);
    let mut short_array = MdlPfn::new(0x7000_0000, 0, 0x2000, [0x1, 0x2]);
    short_array.mdl.Size = 0x30 + 8;
    let mut huge_pfn = MdlPfn::new(0x7000_0000, 0, 0x100, [1 << 60]);
    // The page both MDLs share names two different frames.
    let mut shared = MdlPfn::new(0x7000_0000, 0, 0x800, [0x5]);
    let mut disagrees = MdlPfn::new(0x7000_0000, 0x800, 0x800, [0x6]);
    shared.mdl.Next = disagrees.ptr();
    // A good first MDL, then one too small for its PFN array.
    let mut good = MdlPfn::new(0x7000_0000, 0, 0x1000, [0x7]);
    let mut bad_second = MdlPfn::new(0x7000_1000, 0, 0x1000, [0x8]);
    bad_second.mdl.Size = 0x30;
    good.mdl.Next = bad_second.ptr();
    for (mdl, len, what) in [
        (misaligned.ptr(), 0x100, "StartVa not page aligned"),
        (big_offset.ptr(), 0x100, "ByteOffset = PAGE_SIZE"),
        (empty.ptr(), 1, "ByteCount 0"),
        (
            short_array.ptr(),
            0x2000,
            "Size without room for the PFN array",
        ),
        (huge_pfn.ptr(), 0x100, "PFN beyond 52 bits"),
        (shared.ptr(), 0x1000, "boundary page with two PFNs"),
        (good.ptr(), 0x1001, "bad second MDL"),
    ] {
        assert_eq!(
            reg(mdl, len),
            STATUS_INVALID_PARAMETER,
            "NdkRegisterMr: {what}"
        );
        assert_eq!(
            lam(mdl, len).0,
            STATUS_INVALID_PARAMETER,
            "NdkBuildLAM: {what}"
        );
    }
    assert_eq!(mrs(), before, "no CREATE_MR for a bad chain");
    // The same chains for fewer bytes stop before the bad part.
    assert_eq!(lam(good.ptr(), 0x1000), (STATUS_SUCCESS, 1, 0x7000));
    assert_eq!(lam(shared.ptr(), 0x800), (STATUS_SUCCESS, 1, 0x5000));
    assert_eq!(reg(good.ptr(), 0x1000), STATUS_SUCCESS);
    let spec = e.fake.st.lock().unwrap().mrs.last().map(|m| m.1.clone());
    assert_eq!(
        spec,
        Some(MrRec::Normal {
            start: 0x7000_0000,
            length: 0x1000,
            // Flags 0 (local read only): no LOCAL_WRITE.
            access: 0b000,
            pages: vec![0x7000],
        })
    );
    assert_eq!(events(), vec![], "all inline: no RequestCompletion");
    assert_eq!(close(mr, 1), STATUS_SUCCESS);
    assert_eq!(close(pd, 1), STATUS_SUCCESS);
    e.close_adapter();
}

#[test]
fn build_lam_maps_pages_and_reports_the_size_it_needs() {
    let e = env();
    let mut mdl = MdlPfn::new(0x7000_0000, 0x10, 0x3000, [0x11, 0x2F, 0x13, 0x99]);
    let m = mdl.ptr();
    let lam = |buf: *mut NDK_LOGICAL_ADDRESS_MAPPING, len: usize, size: &mut u32, fbo: &mut u32| {
        // SAFETY: live adapter, valid MDL with PFNs, `buf` null or of `*size` bytes.
        unsafe {
            (NDK_ADAPTER::disp(e.a).NdkBuildLAM)(
                e.a,
                m,
                len,
                Some(request_cb),
                ctx(1),
                buf,
                size,
                fbo,
            )
        }
    };
    let (mut size, mut fbo) = (0u32, 0u32);
    assert_eq!(
        lam(null_mut(), 0x3000, &mut size, &mut fbo),
        STATUS_BUFFER_TOO_SMALL
    );
    assert_eq!(size, 0x10 + 8 * 4, "4 pages: 0x10 into the first");
    let mut buf = [0xEEEE_EEEE_EEEE_EEEEu64; 8];
    let p = buf.as_mut_ptr().cast::<NDK_LOGICAL_ADDRESS_MAPPING>();
    let mut size = 40u32;
    assert_eq!(lam(p, 0x3000, &mut size, &mut fbo), STATUS_BUFFER_TOO_SMALL);
    assert_eq!(size, 48);
    let mut size = 64u32;
    assert_eq!(lam(p, 0x3000, &mut size, &mut fbo), STATUS_SUCCESS);
    assert_eq!((size, fbo), (48, 0x10));
    assert_eq!(buf[0], 0, "AdapterContext");
    assert_eq!(buf[1] as u32, 4, "AdapterPageCount");
    assert_eq!(&buf[2..6], &[0x1_1000, 0x2_F000, 0x1_3000, 0x9_9000]);
    assert_eq!(buf[6], 0xEEEE_EEEE_EEEE_EEEE, "nothing past the mapping");
    // SAFETY: live adapter; the LAM built above.
    unsafe { (NDK_ADAPTER::disp(e.a).NdkReleaseLAM)(e.a, p) };
    // A shorter mapping takes fewer pages.
    let mut size = 64u32;
    assert_eq!(lam(p, 0xFF0, &mut size, &mut fbo), STATUS_SUCCESS);
    assert_eq!((size, buf[1] as u32, buf[2]), (0x18, 1, 0x1_1000));
    assert_eq!(
        lam(p, 0x3001, &mut size, &mut fbo),
        STATUS_INVALID_PARAMETER,
        "MDL shorter than Length"
    );
    assert_eq!(lam(p, 0, &mut size, &mut fbo), STATUS_INVALID_PARAMETER);
    assert_eq!(events(), vec![], "completed inline: no RequestCompletion");
    e.close_adapter();
}

#[test]
fn completions_become_results_in_order_with_silent_successes_skipped() {
    let e = env();
    let pd = e.pd();
    let scq = e.cq(1);
    let rcq = e.cq(2);
    let qp = e.qp(pd, rcq, scq);
    connect(qp);
    let (qp_h, scq_h, rcq_h) = (e.fake.last("qp"), e.fake.last("cq") - 1, e.fake.last("cq"));
    let s = [sge(0x1000, 8, 0x100)];
    assert_eq!(send(qp, 1, &s, 0), STATUS_SUCCESS);
    assert_eq!(write(qp, 2, &s, NDK_OP_FLAG_SILENT_SUCCESS), STATUS_SUCCESS);
    assert_eq!(read(qp, 3, &s, 0), STATUS_SUCCESS);
    // SAFETY: live QP.
    let got =
        unsafe { (NDK_QP::disp(qp).NdkSendAndInvalidate)(qp, ctx(4), s.as_ptr(), 1, 0, 0x4242) };
    assert_eq!(got, STATUS_SUCCESS);
    assert_eq!(e.fake.wqes()[3].opcode, WrOpcode::SendWithInv);
    assert_eq!(e.fake.wqes()[3].invalidate_rkey, 0x4242);
    assert_eq!(receive(qp, 10, &[sge(0x1000, 100, 0x100)]), STATUS_SUCCESS);
    assert_eq!(receive(qp, 11, &s), STATUS_SUCCESS);
    e.fake
        .push_cqe(scq_h, cqe(qp_h, wr_id(tag::SQ, 0), wc::SUCCESS));
    e.fake
        .push_cqe(scq_h, cqe(qp_h, wr_id(tag::SQ, 2), wc::SUCCESS));
    e.fake
        .push_cqe(scq_h, cqe(qp_h, wr_id(tag::SQ, 7), wc::SUCCESS)); // never posted
    e.fake
        .push_cqe(scq_h, cqe(qp_h + 50, wr_id(tag::SQ, 3), wc::SUCCESS)); // no such QP
    e.fake
        .push_cqe(scq_h, cqe(qp_h, wr_id(tag::SQ, 3), wc::SUCCESS));
    let r = results_ex(scq, 8);
    assert_eq!(r.len(), 3);
    let view: Vec<_> = r
        .iter()
        .map(|r| {
            (
                r.Status,
                r.RequestContext as usize,
                r.QPContext as usize,
                r.Type,
                r.ProviderErrorCode,
            )
        })
        .collect();
    assert_eq!(
        view,
        vec![
            (STATUS_SUCCESS, 1, 0x9C, NdkOperationTypeSend, 0),
            (STATUS_SUCCESS, 3, 0x9C, NdkOperationTypeRead, 0),
            (STATUS_SUCCESS, 4, 0x9C, NdkOperationTypeSend, 0),
        ]
    );
    assert_eq!(e.dev.bad_cqes(), 1);
    // A live QP found by its handle, but on a CQ it does not complete on: not trusted.
    let other = e.cq(3);
    let other_h = e.fake.last("cq");
    e.fake
        .push_cqe(other_h, cqe(qp_h, wr_id(tag::SQ, 3), wc::SUCCESS));
    assert_eq!(results_ex(other, 8).len(), 0);
    assert_eq!(e.dev.bad_cqes(), 2);
    let mut inv = cqe(qp_h, wr_id(tag::RQ, 0), wc::SUCCESS);
    inv.byte_len = 100;
    inv.invalidated_rkey = Some(0x7707);
    e.fake.push_cqe(rcq_h, inv);
    let mut plain = cqe(qp_h, wr_id(tag::RQ, 1), wc::LOC_LEN_ERR);
    plain.byte_len = 5;
    e.fake.push_cqe(rcq_h, plain);
    // The non-Ex form still retrieves ReceiveAndInvalidate completions.
    // SAFETY: a zeroed result is a valid value.
    let mut out = [unsafe { core::mem::zeroed::<NDK_RESULT>() }; 1];
    // SAFETY: live CQ, one entry.
    let got = unsafe { (NDK_CQ::disp(rcq).NdkGetCqResults)(rcq, out.as_mut_ptr(), 1) };
    assert_eq!(got, 1);
    assert_eq!(
        (
            out[0].Status,
            out[0].BytesTransferred,
            out[0].RequestContext as usize
        ),
        (STATUS_SUCCESS, 100, 10)
    );
    let r = results_ex(rcq, 4);
    assert_eq!(r.len(), 1);
    assert_eq!(
        (
            r[0].Status,
            r[0].Type,
            r[0].ProviderErrorCode,
            r[0].RequestContext as usize
        ),
        (
            STATUS_BUFFER_OVERFLOW,
            NdkOperationTypeReceive,
            wc::LOC_LEN_ERR,
            11
        )
    );
    assert_eq!(results_ex(rcq, 4).len(), 0);
    for p in [hdr(qp), hdr(scq), hdr(rcq), hdr(other), hdr(pd)] {
        assert_eq!(close(p.cast::<NDK_PD>(), 1), STATUS_SUCCESS);
    }
    e.close_adapter();
}

#[test]
fn receive_and_invalidate_type_and_token_in_ex_results() {
    let e = env();
    let pd = e.pd();
    let cq = e.cq(1);
    let qp = e.qp(pd, cq, cq);
    let (qp_h, cq_h) = (e.fake.last("qp"), e.fake.last("cq"));
    assert_eq!(receive(qp, 10, &[sge(0x1000, 64, 1)]), STATUS_SUCCESS);
    let mut c = cqe(qp_h, wr_id(tag::RQ, 0), wc::SUCCESS);
    c.byte_len = 64;
    c.invalidated_rkey = Some(0x1234_5601);
    e.fake.push_cqe(cq_h, c);
    let r = results_ex(cq, 2);
    assert_eq!(r.len(), 1);
    assert_eq!(
        (
            r[0].Type,
            r[0].TypeSpecificCompletionOutput,
            r[0].BytesTransferred
        ),
        (NdkOperationTypeReceiveAndInvalidate, 0x1234_5601, 64)
    );
    for p in [hdr(qp), hdr(cq), hdr(pd)] {
        assert_eq!(close(p.cast::<NDK_PD>(), 1), STATUS_SUCCESS);
    }
    e.close_adapter();
}

#[test]
fn failed_requests_map_wc_status_and_flush_cancels() {
    let e = env();
    let pd = e.pd();
    let cq = e.cq(1);
    let qp = e.qp(pd, cq, cq);
    connect(qp);
    let (qp_h, cq_h) = (e.fake.last("qp"), e.fake.last("cq"));
    let s = [sge(0x1000, 8, 0x100)];
    assert_eq!(write(qp, 1, &s, NDK_OP_FLAG_SILENT_SUCCESS), STATUS_SUCCESS);
    assert_eq!(read(qp, 2, &s, 0), STATUS_SUCCESS);
    assert_eq!(send(qp, 3, &s, NDK_OP_FLAG_SILENT_SUCCESS), STATUS_SUCCESS);
    assert_eq!(send(qp, 4, &s, NDK_OP_FLAG_DEFER), STATUS_SUCCESS);
    assert_eq!(receive(qp, 5, &s), STATUS_SUCCESS);
    e.fake.clear_log();
    // SAFETY: live QP.
    unsafe { (NDK_QP::disp(qp).NdkFlush)(qp) };
    assert_eq!(
        e.fake.log(),
        vec![Hw::RingSend(qp_h), Hw::Flush(qp_h)],
        "deferred WQE indicated, then ERR"
    );
    e.fake
        .push_cqe(cq_h, cqe(qp_h, wr_id(tag::SQ, 0), wc::REM_ACCESS_ERR));
    e.fake
        .push_cqe(cq_h, cqe(qp_h, wr_id(tag::SQ, 1), wc::REM_ACCESS_ERR));
    e.fake
        .push_cqe(cq_h, cqe(qp_h, wr_id(tag::SQ, 2), wc::WR_FLUSH_ERR));
    e.fake
        .push_cqe(cq_h, cqe(qp_h, wr_id(tag::SQ, 3), wc::RNR_RETRY_EXC_ERR));
    e.fake
        .push_cqe(cq_h, cqe(qp_h, wr_id(tag::RQ, 0), wc::WR_FLUSH_ERR));
    let r = results_ex(cq, 8);
    let view: Vec<_> = r
        .iter()
        .map(|r| {
            (
                r.Status,
                r.RequestContext as usize,
                r.Type,
                r.ProviderErrorCode,
            )
        })
        .collect();
    assert_eq!(
        view,
        vec![
            (
                STATUS_ACCESS_VIOLATION,
                1,
                NdkOperationTypeWrite,
                wc::REM_ACCESS_ERR
            ),
            (
                STATUS_REMOTE_RESOURCES,
                2,
                NdkOperationTypeRead,
                wc::REM_ACCESS_ERR
            ),
            (STATUS_CANCELLED, 3, NdkOperationTypeSend, wc::WR_FLUSH_ERR),
            (
                STATUS_IO_TIMEOUT,
                4,
                NdkOperationTypeSend,
                wc::RNR_RETRY_EXC_ERR
            ),
            (
                STATUS_CANCELLED,
                5,
                NdkOperationTypeReceive,
                wc::WR_FLUSH_ERR
            ),
        ]
    );
    for p in [hdr(qp), hdr(cq), hdr(pd)] {
        assert_eq!(close(p.cast::<NDK_PD>(), 1), STATUS_SUCCESS);
    }
    e.close_adapter();
}

#[test]
fn cq_notifications_one_per_arm_and_errors() {
    let e = env();
    let cq = e.cq(7);
    let cq_h = e.fake.last("cq");
    e.fake.clear_log();
    e.fake.cq_notification(cq_h);
    assert_eq!(events(), vec![], "never without an arm");
    arm(cq, NDK_CQ_NOTIFY_ANY);
    assert_eq!(
        e.fake.log(),
        vec![Hw::Arm(cq_h, false), Hw::Poll(cq_h)],
        "the re-check after the arm found the CQ empty: POLL, then a second look"
    );
    assert_eq!(events(), vec![], "empty CQ: waits");
    e.fake.cq_notification(cq_h);
    e.fake.cq_notification(cq_h);
    assert_eq!(
        events(),
        vec![Ev::Cq(7, STATUS_SUCCESS)],
        "one callback per arm"
    );
    e.fake.clear_log();
    arm(cq, NDK_CQ_NOTIFY_SOLICITED);
    arm(cq, NDK_CQ_NOTIFY_ERRORS);
    assert_eq!(
        e.fake.log(),
        vec![
            Hw::Arm(cq_h, true),
            Hw::Poll(cq_h),
            Hw::Arm(cq_h, true),
            Hw::Poll(cq_h)
        ],
        "ERRORS after SOLICITED stays SOLICITED"
    );
    e.fake.cq_error(cq_h);
    assert_eq!(events(), vec![Ev::Cq(7, STATUS_BUFFER_OVERFLOW)]);
    e.fake.cq_error(cq_h);
    arm(cq, NDK_CQ_NOTIFY_ANY);
    assert_eq!(events(), vec![], "the error is reported once");
    // An unknown handle is ignored.
    e.fake.cq_notification(cq_h + 100);
    assert_eq!(close(cq, 1), STATUS_SUCCESS);
    e.fake.cq_notification(cq_h);
    assert_eq!(events(), vec![], "no callback after close");
    e.close_adapter();
}

#[test]
fn srq_limits_notifications_and_completions() {
    let e = env();
    let pd = e.pd();
    let create = |depth: u32, sge: u32, thr: u32| -> (NTSTATUS, *mut NDK_SRQ) {
        let mut srq = null_mut();
        // SAFETY: live PD, valid out pointer.
        let st = unsafe {
            (NDK_PD::disp(pd).NdkCreateSrq)(
                pd,
                depth,
                sge,
                thr,
                Some(srq_cb),
                ctx(6),
                null_mut(),
                create_cb,
                ctx(1),
                &mut srq,
            )
        };
        (st, srq)
    };
    assert_eq!(create(0, 1, 0).0, STATUS_INVALID_PARAMETER);
    assert_eq!(create(4097, 1, 0).0, STATUS_INVALID_PARAMETER);
    assert_eq!(create(16, 17, 0).0, STATUS_INVALID_PARAMETER);
    let (st, srq) = create(10, 2, 3);
    assert_eq!(st, STATUS_SUCCESS);
    let srq_h = e.fake.last("srq");
    let pd_h = e.fake.last("pd");
    let spec0 = e.fake.st.lock().unwrap().srqs[0];
    assert_eq!(
        spec0,
        SrqSpec {
            pd: pd_h,
            max_wr: 16,
            max_sge: 2,
            limit: 3
        }
    );
    e.fake.srq_event(srq_h, EqeType::SrqLimitReached);
    e.fake.srq_event(srq_h, EqeType::SrqLimitReached);
    assert_eq!(events(), vec![Ev::Srq(6, STATUS_SUCCESS)], "once per arm");
    let modify = |depth: u32, thr: u32| -> NTSTATUS {
        // SAFETY: live SRQ.
        unsafe { (NDK_SRQ::disp(srq).NdkModifySrq)(srq, depth, thr, request_cb, ctx(2)) }
    };
    assert_eq!(modify(4097, 0), STATUS_INVALID_PARAMETER);
    assert_eq!(modify(17, 0), STATUS_NOT_SUPPORTED, "the ring cannot grow");
    e.fake.st.lock().unwrap().srq_queued = 1;
    e.fake.clear_log();
    assert_eq!(modify(0, 2), STATUS_SUCCESS);
    assert_eq!(e.fake.log(), vec![Hw::SrqLimit(srq_h, 2)]);
    assert_eq!(
        events(),
        vec![Ev::Srq(6, STATUS_SUCCESS)],
        "already below: notified at once"
    );
    e.fake.st.lock().unwrap().srq_queued = 5;
    assert_eq!(modify(0, 2), STATUS_SUCCESS);
    assert_eq!(events(), vec![]);
    assert_eq!(modify(0, 0), STATUS_SUCCESS, "0 keeps the arm");
    e.fake.srq_event(srq_h, EqeType::SrqLimitReached);
    assert_eq!(events(), vec![Ev::Srq(6, STATUS_SUCCESS)]);
    // Posting, the depth cap, and a QP drawing from the SRQ.
    let cq = e.cq(1);
    let mut qp = null_mut();
    // SAFETY: live objects, valid out pointer.
    let st = unsafe {
        (NDK_PD::disp(pd).NdkCreateQpWithSrq)(
            pd,
            cq,
            cq,
            srq,
            ctx(0x51),
            4,
            1,
            0,
            create_cb,
            ctx(1),
            &mut qp,
        )
    };
    assert_eq!(st, STATUS_SUCCESS);
    let spec = *e.fake.st.lock().unwrap().qps.last().expect("qp");
    assert_eq!(
        (spec.srq, spec.max_recv_wr, spec.max_recv_sge),
        (Some(srq_h), 0, 0)
    );
    assert_eq!(
        receive(qp, 1, &[sge(0, 1, 1)]),
        STATUS_INVALID_DEVICE_REQUEST
    );
    e.fake.srq_event(srq_h, EqeType::SrqErr);
    e.fake.srq_event(srq_h, EqeType::SrqErr);
    assert_eq!(
        events(),
        vec![Ev::Srq(6, STATUS_INTERNAL_ERROR)],
        "reported once"
    );
    assert_eq!(modify(0, 1), STATUS_SUCCESS);
    assert_eq!(events(), vec![], "queued 5 is not below 1");
    assert_eq!(close(srq, 9), STATUS_PENDING, "the QP holds the SRQ");
    let s = [sge(0x1000, 8, 1)];
    let srq_recv = |c: usize, s: &[NDK_SGE]| -> NTSTATUS {
        // SAFETY: live SRQ (its close is pending, calls still allowed in this test).
        unsafe { (NDK_SRQ::disp(srq).NdkSrqReceive)(srq, ctx(c), s.as_ptr(), s.len() as u32) }
    };
    assert_eq!(srq_recv(20, &[sge(0, 1, 1); 3]), STATUS_INVALID_PARAMETER);
    assert_eq!(srq_recv(20, &s), STATUS_SUCCESS);
    assert_eq!(srq_recv(21, &s), STATUS_SUCCESS);
    let wqes = e.fake.srq_wqes();
    assert_eq!(
        wqes,
        vec![
            (srq_h, 0, wr_id(tag::SRQ, 0)),
            (srq_h, 1, wr_id(tag::SRQ, 1))
        ]
    );
    // Completed out of order on the QP's receive CQ, with the QP's context (M46).
    let (qp_h, cq_h) = (e.fake.last("qp"), e.fake.last("cq"));
    e.fake
        .push_cqe(cq_h, cqe(qp_h, wr_id(tag::SRQ, 1), wc::SUCCESS));
    e.fake
        .push_cqe(cq_h, cqe(qp_h, wr_id(tag::SRQ, 1), wc::SUCCESS)); // duplicate
    e.fake
        .push_cqe(cq_h, cqe(qp_h, wr_id(tag::SRQ, 0), wc::WR_FLUSH_ERR));
    let r = results_ex(cq, 4);
    let view: Vec<_> = r
        .iter()
        .map(|r| (r.Status, r.RequestContext as usize, r.QPContext as usize))
        .collect();
    assert_eq!(
        view,
        vec![(STATUS_SUCCESS, 21, 0x51), (STATUS_CANCELLED, 20, 0x51)]
    );
    e.fake.srq_event(srq_h, EqeType::SrqLimitReached);
    e.fake.srq_event(srq_h, EqeType::SrqErr);
    assert_eq!(
        events(),
        vec![],
        "no event callback once the close has started"
    );
    assert_eq!(close(qp, 1), STATUS_SUCCESS);
    assert_eq!(
        events(),
        vec![Ev::Close(9)],
        "SRQ close completes when its QP closes"
    );
    assert_eq!(close(cq, 1), STATUS_SUCCESS);
    assert_eq!(close(pd, 1), STATUS_SUCCESS);
    e.close_adapter();
}

#[test]
fn srq_unsupported_without_device_srqs() {
    let e = env_with(HwCaps {
        max_srq: 0,
        ..HwCaps::MODEL_DEFAULT
    });
    let pd = e.pd();
    let cq = e.cq(1);
    let mut srq = null_mut();
    // SAFETY: live PD, valid out pointer.
    let st = unsafe {
        (NDK_PD::disp(pd).NdkCreateSrq)(
            pd,
            16,
            1,
            0,
            None,
            null_mut(),
            null_mut(),
            create_cb,
            ctx(1),
            &mut srq,
        )
    };
    assert_eq!(st, STATUS_NOT_SUPPORTED);
    assert_eq!(e.info().MaxSrqDepth, 0);
    assert_eq!(close(cq, 1), STATUS_SUCCESS);
    assert_eq!(close(pd, 1), STATUS_SUCCESS);
    e.close_adapter();
}

#[test]
fn device_fatal_fails_every_cq_and_srq_once() {
    let e = env();
    let pd = e.pd();
    let cq1 = e.cq(1);
    let cq2 = e.cq(2);
    let mut srq = null_mut();
    // SAFETY: live PD, valid out pointer.
    let st = unsafe {
        (NDK_PD::disp(pd).NdkCreateSrq)(
            pd,
            16,
            1,
            0,
            Some(srq_cb),
            ctx(3),
            null_mut(),
            create_cb,
            ctx(1),
            &mut srq,
        )
    };
    assert_eq!(st, STATUS_SUCCESS);
    arm(cq1, NDK_CQ_NOTIFY_ERRORS);
    e.dev.device_fatal();
    // The armed CQ and the SRQ at once; the unarmed CQ at its next arm.
    assert_eq!(
        events(),
        vec![
            Ev::Cq(1, STATUS_INTERNAL_ERROR),
            Ev::Srq(3, STATUS_INTERNAL_ERROR)
        ]
    );
    arm(cq2, NDK_CQ_NOTIFY_SOLICITED);
    assert_eq!(events(), vec![Ev::Cq(2, STATUS_INTERNAL_ERROR)]);
    e.dev.device_fatal();
    arm(cq1, NDK_CQ_NOTIFY_ANY);
    assert_eq!(events(), vec![], "reported once");
    for p in [hdr(srq), hdr(cq1), hdr(cq2), hdr(pd)] {
        assert_eq!(close(p.cast::<NDK_PD>(), 1), STATUS_SUCCESS);
    }
    e.close_adapter();
}

#[test]
fn failed_qp_create_releases_its_antecedents() {
    let e = env();
    let pd = e.pd();
    let cq = e.cq(1);
    e.fake.st.lock().unwrap().fail_qp = true;
    let (st, qp) = e.qp_status(pd, cq, cq, 4, 4, 1, 1, 0);
    assert_eq!(st, STATUS_INSUFFICIENT_RESOURCES);
    assert!(qp.is_null());
    // No successor count is left behind: both close inline.
    assert_eq!(close(cq, 1), STATUS_SUCCESS);
    assert_eq!(close(pd, 2), STATUS_SUCCESS);
    assert_eq!(events(), vec![], "inline failure: no CreateCompletion");
    e.close_adapter();
    assert_eq!(*e.fake.waits.lock().unwrap(), Vec::<bool>::new());
}

/// Events of the racing test, in one global order (callbacks run on another thread).
static RACE: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());

unsafe extern "system" fn race_cq_cb(_ctx: PVOID, _st: NTSTATUS) {
    RACE.lock().unwrap().push("notify");
    // Long enough for the close to land while the callback runs.
    std::thread::yield_now();
    RACE.lock().unwrap().push("notify-returned");
}

unsafe extern "system" fn race_close_cb(_ctx: PVOID) {
    RACE.lock().unwrap().push("close-completion");
}

#[test]
fn cq_close_racing_device_notifications_ends_with_one_close_completion() {
    for round in 0..200 {
        RACE.lock().unwrap().clear();
        let e = env();
        let mut cq = null_mut();
        // SAFETY: live adapter, valid pointers.
        let st = unsafe {
            (NDK_ADAPTER::disp(e.a).NdkCreateCq)(
                e.a,
                16,
                race_cq_cb,
                null_mut(),
                null_mut(),
                create_cb,
                null_mut(),
                &mut cq,
            )
        };
        assert_eq!(st, STATUS_SUCCESS);
        let h = e.fake.last("cq");
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let dev = e.fake.clone();
        let s2 = stop.clone();
        // The device side: CQNEs keep arriving from a DPC on another processor.
        let notifier = std::thread::spawn(move || {
            while !s2.load(std::sync::atomic::Ordering::SeqCst) {
                dev.cq_notification(h);
            }
        });
        // The consumer: a few arms, then the close (never concurrent with its own calls).
        for _ in 0..(round % 7) {
            arm(cq, NDK_CQ_NOTIFY_ANY);
        }
        // SAFETY: live CQ; slot 0 is the close.
        let st = unsafe { (NDK_CQ::disp(cq).NdkCloseCq)(hdr(cq), race_close_cb, null_mut()) };
        if st == STATUS_SUCCESS {
            RACE.lock().unwrap().push("closed-inline");
        } else {
            assert_eq!(st, STATUS_PENDING);
        }
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        notifier.join().expect("notifier");
        // The close is final on this thread: a pending close has completed by now (the
        // callback in flight has returned), an inline one had nothing in flight.
        let ev = RACE.lock().unwrap().clone();
        let ends = ev
            .iter()
            .filter(|x| **x == "close-completion" || **x == "closed-inline")
            .count();
        assert_eq!(ends, 1, "round {round}: {ev:?}");
        let last = ev.last().copied();
        assert!(
            last == Some("close-completion") || last == Some("closed-inline"),
            "round {round}: the close is the last event: {ev:?}"
        );
        let notifies = ev.iter().filter(|x| **x == "notify").count();
        let arms = round % 7;
        assert!(notifies <= arms, "at most one callback per arm: {ev:?}");
        let returned = ev.iter().filter(|x| **x == "notify-returned").count();
        assert_eq!(
            notifies, returned,
            "every callback returned before the close ended"
        );
        e.close_adapter();
    }
}

static IN_CB: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
static RELEASE_CB: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
static XLOG: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());

unsafe extern "system" fn held_cq_cb(_ctx: PVOID, _st: NTSTATUS) {
    XLOG.lock().unwrap().push("notify");
    IN_CB.store(true, std::sync::atomic::Ordering::SeqCst);
    while !RELEASE_CB.load(std::sync::atomic::Ordering::SeqCst) {
        std::thread::yield_now();
    }
    XLOG.lock().unwrap().push("notify-returned");
}

unsafe extern "system" fn held_close_cb(_ctx: PVOID) {
    XLOG.lock().unwrap().push("close-completion");
}

#[test]
fn cq_close_from_another_thread_waits_for_the_running_callback() {
    let e = env();
    let mut cq = null_mut();
    // SAFETY: live adapter, valid pointers.
    let st = unsafe {
        (NDK_ADAPTER::disp(e.a).NdkCreateCq)(
            e.a,
            16,
            held_cq_cb,
            null_mut(),
            null_mut(),
            create_cb,
            null_mut(),
            &mut cq,
        )
    };
    assert_eq!(st, STATUS_SUCCESS);
    let h = e.fake.last("cq");
    arm(cq, NDK_CQ_NOTIFY_ANY);
    let dev = e.fake.clone();
    // The CQNE DPC runs the callback on another processor and is held inside it.
    let dpc = std::thread::spawn(move || dev.cq_notification(h));
    while !IN_CB.load(std::sync::atomic::Ordering::SeqCst) {
        std::thread::yield_now();
    }
    // SAFETY: live CQ; slot 0 is the close.
    let st = unsafe { (NDK_CQ::disp(cq).NdkCloseCq)(hdr(cq), held_close_cb, null_mut()) };
    assert_eq!(st, STATUS_PENDING, "a callback is in progress");
    assert_eq!(*XLOG.lock().unwrap(), ["notify"]);
    assert_eq!(
        e.fake.count(&Hw::Destroy("cq", h)),
        0,
        "not torn down under the callback"
    );
    // Later CQNEs deliver nothing: the close has started.
    e.fake.cq_notification(h);
    RELEASE_CB.store(true, std::sync::atomic::Ordering::SeqCst);
    dpc.join().expect("dpc");
    assert_eq!(
        *XLOG.lock().unwrap(),
        ["notify", "notify-returned", "close-completion"]
    );
    assert_eq!(e.fake.count(&Hw::Destroy("cq", h)), 1);
    e.close_adapter();
}

#[test]
fn small_result_arrays_lose_no_completion() {
    let e = env();
    let pd = e.pd();
    let cq = e.cq(1);
    let qp = e.qp(pd, cq, cq);
    connect(qp);
    let (qp_h, cq_h) = (e.fake.last("qp"), e.fake.last("cq"));
    let s = [sge(0x1000, 8, 0x100)];
    for c in 1..=3 {
        assert_eq!(send(qp, c, &s, 0), STATUS_SUCCESS);
        e.fake
            .push_cqe(cq_h, cqe(qp_h, wr_id(tag::SQ, c as u32 - 1), wc::SUCCESS));
    }
    // One result at a time: the poll never takes more CQEs than results wanted.
    for c in 1..=3 {
        let r = results_ex(cq, 1);
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].RequestContext as usize, c);
    }
    assert_eq!(results_ex(cq, 1).len(), 0);
    for p in [hdr(qp), hdr(cq), hdr(pd)] {
        assert_eq!(close(p.cast::<NDK_PD>(), 1), STATUS_SUCCESS);
    }
    e.close_adapter();
}

#[test]
fn untrusted_cqes_fail_their_request_and_a_full_queue_is_reported_first() {
    let e = env();
    let pd = e.pd();
    let cq = e.cq(1);
    // Initiator queue depth 1.
    let (st, qp) = e.qp_status(pd, cq, cq, 8, 1, 4, 4, 0);
    assert_eq!(st, STATUS_SUCCESS);
    connect(qp);
    let (qp_h, cq_h) = (e.fake.last("qp"), e.fake.last("cq"));
    let max = e.info().MaxTransferLength;
    let s = [sge(0x1000, 8, 0x100)];
    // A success longer than MaxTransferLength, or claiming both immediate data and an
    // invalidation, fails its request (STATUS_INTERNAL_ERROR, GENERAL_ERR) and is counted.
    for c in 10..12 {
        assert_eq!(receive(qp, c, &s), STATUS_SUCCESS);
    }
    assert_eq!(receive(qp, 12, &[sge(0x1000, max, 0x100)]), STATUS_SUCCESS);
    let mut long = cqe(qp_h, wr_id(tag::RQ, 0), wc::SUCCESS);
    long.byte_len = max + 1;
    e.fake.push_cqe(cq_h, long);
    let mut both = cqe(qp_h, wr_id(tag::RQ, 1), wc::SUCCESS);
    both.byte_len = 8;
    both.invalidated_rkey = Some(0x4401);
    let mut raw = both.encode();
    raw[36..40].copy_from_slice(&((1u32 << 1) | (1 << 2)).to_le_bytes());
    e.fake.push_raw_cqe(cq_h, raw);
    let mut full = cqe(qp_h, wr_id(tag::RQ, 2), wc::SUCCESS);
    full.byte_len = max;
    e.fake.push_cqe(cq_h, full);
    let r = results_ex(cq, 8);
    let view: Vec<_> = r
        .iter()
        .map(|r| {
            (
                r.Status,
                r.RequestContext as usize,
                r.Type,
                r.ProviderErrorCode,
                r.BytesTransferred,
            )
        })
        .collect();
    assert_eq!(
        view,
        vec![
            (
                STATUS_INTERNAL_ERROR,
                10,
                NdkOperationTypeReceive,
                wc::GENERAL_ERR,
                0
            ),
            (
                STATUS_INTERNAL_ERROR,
                11,
                NdkOperationTypeReceive,
                wc::GENERAL_ERR,
                0
            ),
            (STATUS_SUCCESS, 12, NdkOperationTypeReceive, 0, max),
        ]
    );
    assert_eq!(e.dev.bad_cqes(), 2);
    // A full initiator queue is reported before the request's own checks.
    let plain = e.mr(pd, false);
    assert_eq!(send(qp, 1, &s, 0), STATUS_SUCCESS);
    let rr = NDK_OP_FLAG_ALLOW_REMOTE_READ;
    assert_eq!(
        fast_register(qp, 2, plain, &[0x1000], 0, 100, 0x5000_0000, rr),
        STATUS_INSUFFICIENT_RESOURCES
    );
    // SAFETY: live objects.
    let st = unsafe { (NDK_QP::disp(qp).NdkInvalidate)(qp, ctx(3), hdr(plain), 0) };
    assert_eq!(st, STATUS_INSUFFICIENT_RESOURCES);
    e.fake
        .push_cqe(cq_h, cqe(qp_h, wr_id(tag::SQ, 0), wc::SUCCESS));
    assert_eq!(results_ex(cq, 8).len(), 1);
    // With room, the same requests fail their own checks.
    assert_eq!(
        fast_register(qp, 2, plain, &[0x1000], 0, 100, 0x5000_0000, rr),
        STATUS_INVALID_PARAMETER
    );
    // SAFETY: live objects.
    let st = unsafe { (NDK_QP::disp(qp).NdkInvalidate)(qp, ctx(3), hdr(plain), 0) };
    assert_eq!(st, STATUS_INVALID_PARAMETER);
    assert_eq!(e.fake.wqes().len(), 1);
    assert_eq!(e.fake.fast_regs(), vec![]);
    assert_eq!(events(), vec![]);
    for p in [hdr(plain), hdr(qp), hdr(cq), hdr(pd)] {
        assert_eq!(close(p.cast::<NDK_PD>(), 1), STATUS_SUCCESS);
    }
    e.close_adapter();
}

/// The poll's fast path (successful send-queue completions of the QP of the previous CQE)
/// hands every other CQE to the general path without consuming it: a failure, a receive,
/// a silent success and another QP's completion interleaved with fast ones each yield
/// exactly their result, in CQE order, across polls of one result at a time too.
#[test]
fn fast_and_general_completions_interleave_in_order() {
    let e = env();
    let pd = e.pd();
    let cq = e.cq(1);
    let (st, qp) = e.qp_status(pd, cq, cq, 8, 8, 4, 4, 0);
    assert_eq!(st, STATUS_SUCCESS);
    let qp_h = e.fake.last("qp");
    let (st, qp2) = e.qp_status(pd, cq, cq, 8, 8, 4, 4, 0);
    assert_eq!(st, STATUS_SUCCESS);
    let qp2_h = e.fake.last("qp");
    let cq_h = e.fake.last("cq");
    connect(qp);
    connect(qp2);
    let s = [sge(0x1000, 8, 0x100)];
    for c in 1..=4 {
        let flags = if c == 3 {
            NDK_OP_FLAG_SILENT_SUCCESS
        } else {
            0
        };
        assert_eq!(send(qp, c, &s, flags), STATUS_SUCCESS);
    }
    assert_eq!(send(qp2, 20, &s, 0), STATUS_SUCCESS);
    assert_eq!(receive(qp, 30, &s), STATUS_SUCCESS);
    // Fills the cache with `qp`, then: a failure on `qp`, a receive, `qp2`, a silent
    // success retired by the next CQE, and a success.
    for c in [
        cqe(qp_h, wr_id(tag::SQ, 0), wc::SUCCESS),
        cqe(qp_h, wr_id(tag::SQ, 1), wc::REM_ACCESS_ERR),
        cqe(qp_h, wr_id(tag::RQ, 0), wc::SUCCESS),
        cqe(qp2_h, wr_id(tag::SQ, 0), wc::SUCCESS),
        cqe(qp_h, wr_id(tag::SQ, 3), wc::SUCCESS),
    ] {
        e.fake.push_cqe(cq_h, c);
    }
    let mut got = Vec::new();
    for _ in 0..8 {
        got.extend(
            results_ex(cq, 1)
                .iter()
                .map(|r| (r.Status, r.RequestContext as usize, r.Type)),
        );
    }
    let want_types = [
        (STATUS_SUCCESS, 1, NdkOperationTypeSend),
        (STATUS_ACCESS_VIOLATION, 2, NdkOperationTypeSend),
        (STATUS_SUCCESS, 30, NdkOperationTypeReceive),
        (STATUS_SUCCESS, 20, NdkOperationTypeSend),
        (STATUS_SUCCESS, 4, NdkOperationTypeSend),
    ];
    assert_eq!(got, want_types);
    assert_eq!(e.dev.bad_cqes(), 0);
}

/// A CQ finds its QPs by handle residue in a table of its own: two QPs whose handles
/// collide take the two residues, a third goes through the device's table. Every
/// completion still reaches its own QP in CQE order, with one-CQE and many-CQE polls, and
/// after the QP at the first residue closes, the others are still found.
#[test]
fn qps_whose_handles_collide_on_a_cq_each_get_their_completions() {
    let e = env();
    let pd = e.pd();
    let cq = e.cq(1);
    let cq_h = e.fake.last("cq");
    let spacer = e.cq(1);
    // Four QPs on `cq` whose handles are equal modulo 8 (its table has 8 entries with 3 or
    // 4 QPs bound), QPs on `spacer` in between.
    let mut qps = Vec::new();
    while qps.len() < 4 {
        let q = e.qp(pd, spacer, spacer);
        let h = e.fake.last("qp");
        if qps.first().is_none_or(|&(_, h0)| (h + 1) % 8 == h0 % 8) {
            let q = e.qp(pd, cq, cq);
            qps.push((q, e.fake.last("qp")));
        }
        let _ = q;
    }
    let hs: Vec<u32> = qps.iter().map(|&(_, h)| h).collect();
    assert!(
        hs.iter().all(|h| h % 8 == hs[0] % 8),
        "handles {hs:?} collide"
    );
    let s = [sge(0x1000, 8, 0x100)];
    for (i, &(q, _)) in qps.iter().enumerate() {
        connect(q);
        for k in 0..2 {
            assert_eq!(send(q, 10 * i + k, &s, 0), STATUS_SUCCESS);
        }
    }
    let order = [
        (3, 0),
        (0, 0),
        (2, 0),
        (1, 0),
        (1, 1),
        (3, 1),
        (0, 1),
        (2, 1),
    ];
    for &(i, k) in &order {
        e.fake
            .push_cqe(cq_h, cqe(hs[i], wr_id(tag::SQ, k as u32), wc::SUCCESS));
    }
    let mut got: Vec<usize> = Vec::new();
    for _ in 0..4 {
        got.extend(results_ex(cq, 1).iter().map(|r| r.RequestContext as usize));
    }
    got.extend(results_ex(cq, 8).iter().map(|r| r.RequestContext as usize));
    let want: Vec<usize> = order.iter().map(|&(i, k)| 10 * i + k).collect();
    assert_eq!(got, want);
    assert_eq!(e.dev.bad_cqes(), 0);

    assert_eq!(close(qps[0].0, 0), STATUS_SUCCESS);
    for (i, &(q, _)) in qps.iter().enumerate().skip(1) {
        assert_eq!(send(q, 100 + i, &s, 0), STATUS_SUCCESS);
    }
    for i in [2, 1, 3] {
        e.fake
            .push_cqe(cq_h, cqe(hs[i], wr_id(tag::SQ, 2), wc::SUCCESS));
    }
    // A CQE naming the closed QP is not trusted.
    e.fake
        .push_cqe(cq_h, cqe(hs[0], wr_id(tag::SQ, 2), wc::SUCCESS));
    let got: Vec<usize> = results_ex(cq, 8)
        .iter()
        .map(|r| r.RequestContext as usize)
        .collect();
    assert_eq!(got, vec![102, 101, 103]);
    assert_eq!(e.dev.bad_cqes(), 1);
}

/// (Status, RequestContext, Type, ProviderErrorCode, BytesTransferred) of each result.
fn outcome(r: &[NDK_RESULT_EX]) -> Vec<(NTSTATUS, usize, NDK_OPERATION_TYPE, u32, u32)> {
    r.iter()
        .map(|r| {
            (
                r.Status,
                r.RequestContext as usize,
                r.Type,
                r.ProviderErrorCode,
                r.BytesTransferred,
            )
        })
        .collect()
}

#[test]
fn a_cqe_is_accepted_only_on_the_cq_its_queue_completes_to() {
    // Send and receive CQs polled by their own threads must never see one request twice:
    // a CQE naming the QP on its other CQ is device garbage, dropped and counted, and the
    // request it names stays outstanding for its own CQ.
    let e = env();
    let pd = e.pd();
    let scq = e.cq(1);
    let rcq = e.cq(2);
    let qp = e.qp(pd, rcq, scq);
    connect(qp);
    let (qp_h, scq_h, rcq_h) = (e.fake.last("qp"), e.fake.last("cq") - 1, e.fake.last("cq"));
    let s = [sge(0x1000, 8, 0x100)];
    assert_eq!(send(qp, 1, &s, 0), STATUS_SUCCESS);
    assert_eq!(receive(qp, 10, &s), STATUS_SUCCESS);
    // The send's CQE on the receive CQ (the fast path's shape: a successful SQ CQE).
    e.fake
        .push_cqe(rcq_h, cqe(qp_h, wr_id(tag::SQ, 0), wc::SUCCESS));
    assert_eq!(outcome(&results_ex(rcq, 4)), vec![]);
    assert_eq!(e.dev.bad_cqes(), 1);
    // The receive's CQE on the send CQ.
    let mut rc = cqe(qp_h, wr_id(tag::RQ, 0), wc::SUCCESS);
    rc.byte_len = 8;
    e.fake.push_cqe(scq_h, rc);
    assert_eq!(outcome(&results_ex(scq, 4)), vec![]);
    assert_eq!(e.dev.bad_cqes(), 2);
    // Each on its own CQ completes exactly once.
    e.fake
        .push_cqe(scq_h, cqe(qp_h, wr_id(tag::SQ, 0), wc::SUCCESS));
    e.fake.push_cqe(rcq_h, rc);
    assert_eq!(
        outcome(&results_ex(scq, 4)),
        vec![(STATUS_SUCCESS, 1, NdkOperationTypeSend, 0, 0)]
    );
    assert_eq!(
        outcome(&results_ex(rcq, 4)),
        vec![(STATUS_SUCCESS, 10, NdkOperationTypeReceive, 0, 8)]
    );
    assert_eq!(e.dev.bad_cqes(), 2);
    for p in [hdr(qp), hdr(rcq), hdr(scq), hdr(pd)] {
        assert_eq!(close(p.cast::<NDK_PD>(), 1), STATUS_SUCCESS);
    }
    e.close_adapter();
}

#[test]
fn a_receive_reports_no_more_bytes_than_it_posted() {
    // 64 bytes posted, 4096 claimed (well within MaxTransferLength): the device wrote
    // past the consumer's buffers, so the request fails (STATUS_INTERNAL_ERROR,
    // GENERAL_ERR) instead of reporting bytes it cannot have placed.
    let e = env();
    let pd = e.pd();
    let cq = e.cq(1);
    let qp = e.qp(pd, cq, cq);
    let (qp_h, cq_h) = (e.fake.last("qp"), e.fake.last("cq"));
    assert!(e.info().MaxTransferLength >= 4096);
    let one = [sge(0x1000, 64, 0x100)];
    let two = [sge(0x1000, 40, 0x100), sge(0x2000, 24, 0x100)];
    for (c, s) in [
        (10, &one[..]),
        (11, &two[..]),
        (12, &one[..]),
        (13, &two[..]),
    ] {
        assert_eq!(receive(qp, c, s), STATUS_SUCCESS);
    }
    for (index, len) in [(0, 4096), (1, 65), (2, 64), (3, 64)] {
        let mut c = cqe(qp_h, wr_id(tag::RQ, index), wc::SUCCESS);
        c.byte_len = len;
        e.fake.push_cqe(cq_h, c);
    }
    let bad = (
        STATUS_INTERNAL_ERROR,
        0,
        NdkOperationTypeReceive,
        wc::GENERAL_ERR,
        0,
    );
    assert_eq!(
        outcome(&results_ex(cq, 8)),
        vec![
            (bad.0, 10, bad.2, bad.3, bad.4),
            (bad.0, 11, bad.2, bad.3, bad.4),
            (STATUS_SUCCESS, 12, NdkOperationTypeReceive, 0, 64),
            (STATUS_SUCCESS, 13, NdkOperationTypeReceive, 0, 64),
        ]
    );
    assert_eq!(e.dev.bad_cqes(), 2);
    for p in [hdr(qp), hdr(cq), hdr(pd)] {
        assert_eq!(close(p.cast::<NDK_PD>(), 1), STATUS_SUCCESS);
    }
    e.close_adapter();
}

#[test]
fn a_cqe_past_an_outstanding_signalled_slot_retires_nothing() {
    // CQEs of a queue appear in posting order (pvrdma.md §14 "Ordering"): one for slot k
    // while an earlier signalled slot is outstanding breaks that rule, so it is a corrupt
    // CQE, counted and dropped, and the earlier request still completes. Only unsignalled
    // successes retire silently ahead of a CQE.
    let e = env();
    let pd = e.pd();
    let cq = e.cq(1);
    let qp = e.qp(pd, cq, cq);
    connect(qp);
    let (qp_h, cq_h) = (e.fake.last("qp"), e.fake.last("cq"));
    let s = [sge(0x1000, 8, 0x100)];
    assert_eq!(receive(qp, 10, &s), STATUS_SUCCESS);
    assert_eq!(receive(qp, 11, &s), STATUS_SUCCESS);
    let rc = |index| {
        let mut c = cqe(qp_h, wr_id(tag::RQ, index), wc::SUCCESS);
        c.byte_len = 8;
        c
    };
    let bad_cqes = || {
        // SAFETY: a live QP of this provider, not closed before the last use below.
        unsafe { ObjRef::<pvrdma_ndk::ndk::Qp>::borrow(qp) }
            .expect("live QP")
            .bad_cqes()
    };
    // Receive #1's CQE before receive #0's.
    e.fake.push_cqe(cq_h, rc(1));
    assert_eq!(outcome(&results_ex(cq, 4)), vec![]);
    assert_eq!(bad_cqes(), 1);
    e.fake.push_cqe(cq_h, rc(0));
    e.fake.push_cqe(cq_h, rc(1));
    assert_eq!(
        outcome(&results_ex(cq, 4)),
        vec![
            (STATUS_SUCCESS, 10, NdkOperationTypeReceive, 0, 8),
            (STATUS_SUCCESS, 11, NdkOperationTypeReceive, 0, 8),
        ]
    );
    // The send queue: signalled #0, silent #1, signalled #2. #2's CQE first is corrupt
    // (#0 is signalled); after #0's, #2's retires the silent #1 with it.
    assert_eq!(send(qp, 1, &s, 0), STATUS_SUCCESS);
    assert_eq!(write(qp, 2, &s, NDK_OP_FLAG_SILENT_SUCCESS), STATUS_SUCCESS);
    assert_eq!(send(qp, 3, &s, 0), STATUS_SUCCESS);
    e.fake
        .push_cqe(cq_h, cqe(qp_h, wr_id(tag::SQ, 2), wc::SUCCESS));
    assert_eq!(outcome(&results_ex(cq, 4)), vec![]);
    assert_eq!(bad_cqes(), 2);
    e.fake
        .push_cqe(cq_h, cqe(qp_h, wr_id(tag::SQ, 0), wc::SUCCESS));
    e.fake
        .push_cqe(cq_h, cqe(qp_h, wr_id(tag::SQ, 2), wc::SUCCESS));
    assert_eq!(
        outcome(&results_ex(cq, 4)),
        vec![
            (STATUS_SUCCESS, 1, NdkOperationTypeSend, 0, 0),
            (STATUS_SUCCESS, 3, NdkOperationTypeSend, 0, 0),
        ]
    );
    assert_eq!(bad_cqes(), 2);
    assert_eq!(e.dev.bad_cqes(), 0, "each named its QP");
    for p in [hdr(qp), hdr(cq), hdr(pd)] {
        assert_eq!(close(p.cast::<NDK_PD>(), 1), STATUS_SUCCESS);
    }
    e.close_adapter();
}

#[test]
fn a_declared_count_above_its_limit_fails_before_any_entry_is_read() {
    // A careless consumer declares more entries than it passes: nSge above the QP's or SRQ's
    // SGE limit, AdapterPageCount above the MR's capacity, each over a one-entry array. Each
    // call fails with STATUS_INVALID_PARAMETER and the provider forms no slice of the declared
    // length: before, NdkReceive summed the lengths of all 1000 "SGEs" (reading far past the
    // array) and every post formed a 1000-entry slice over it, which Miri (tests/miri.sh runs
    // this test) reports as undefined behaviour.
    let e = env();
    let pd = e.pd();
    let cq = e.cq(1);
    let qp = e.qp(pd, cq, cq);
    connect(qp);
    let one = [sge(0x1000, 8, 0x100)];
    let declared = 1000;
    // SAFETY: live QP; the declared count is above every limit, so only the count is read.
    let send = unsafe { (NDK_QP::disp(qp).NdkSend)(qp, ctx(1), one.as_ptr(), declared, 0) };
    assert_eq!(send, STATUS_INVALID_PARAMETER);
    // SAFETY: as above.
    let write =
        unsafe { (NDK_QP::disp(qp).NdkWrite)(qp, ctx(2), one.as_ptr(), declared, 0x1000, 0x77, 0) };
    assert_eq!(write, STATUS_INVALID_PARAMETER);
    // SAFETY: as above.
    let read =
        unsafe { (NDK_QP::disp(qp).NdkRead)(qp, ctx(3), one.as_ptr(), declared, 0x1000, 0x77, 0) };
    assert_eq!(read, STATUS_INVALID_PARAMETER);
    // SAFETY: as above.
    let recv = unsafe { (NDK_QP::disp(qp).NdkReceive)(qp, ctx(4), one.as_ptr(), declared) };
    assert_eq!(recv, STATUS_INVALID_PARAMETER);
    let mr = e.mr(pd, true);
    // SAFETY: live MR.
    let init =
        unsafe { (NDK_MR::disp(mr).NdkInitializeFastRegisterMr)(mr, 4, 0, request_cb, ctx(8)) };
    assert_eq!(init, STATUS_SUCCESS);
    let page = [0x10_0000 as NDK_LOGICAL_ADDRESS];
    // SAFETY: live objects; 1000 is above the MR's capacity of 4, so only the count is read.
    let st = unsafe {
        (NDK_QP::disp(qp).NdkFastRegister)(
            qp,
            ctx(5),
            mr,
            declared,
            page.as_ptr(),
            0,
            100,
            0x5000_0000 as PVOID,
            NDK_OP_FLAG_ALLOW_LOCAL_WRITE,
        )
    };
    assert_eq!(st, STATUS_INVALID_PARAMETER);
    // Nothing reached the device and nothing completes.
    assert_eq!(results_ex(cq, 4).len(), 0);
    for p in [hdr(mr), hdr(qp), hdr(cq), hdr(pd)] {
        assert_eq!(close(p.cast::<NDK_PD>(), 1), STATUS_SUCCESS);
    }
    e.close_adapter();
}

#[test]
fn one_poll_takes_runs_of_two_qps_sends_and_receives_and_stops_at_a_bad_length() {
    // The poll's fast loop takes runs of one QP's queue; a run ends at another QP, the other
    // queue, or a CQE it does not take, which the general path then judges. Receive #11
    // claims more bytes than it posted: it fails (GENERAL_ERR) and is counted, and the CQEs
    // after it still complete.
    let e = env();
    let pd = e.pd();
    let cq = e.cq(1);
    let a = e.qp(pd, cq, cq);
    let a_h = e.fake.last("qp");
    let b = e.qp(pd, cq, cq);
    let b_h = e.fake.last("qp");
    let cq_h = e.fake.last("cq");
    connect(a);
    connect(b);
    let s = [sge(0x1000, 8, 0x100)];
    assert_eq!(send(a, 1, &s, 0), STATUS_SUCCESS);
    assert_eq!(read(a, 2, &s, 0), STATUS_SUCCESS);
    assert_eq!(send(b, 5, &s, 0), STATUS_SUCCESS);
    for c in [10, 11, 12] {
        assert_eq!(receive(a, c, &s), STATUS_SUCCESS);
    }
    let rc = |index, len| {
        let mut c = cqe(a_h, wr_id(tag::RQ, index), wc::SUCCESS);
        c.byte_len = len;
        c
    };
    for c in [
        cqe(a_h, wr_id(tag::SQ, 0), wc::SUCCESS),
        cqe(a_h, wr_id(tag::SQ, 1), wc::SUCCESS),
        cqe(b_h, wr_id(tag::SQ, 0), wc::SUCCESS),
        rc(0, 8),
        rc(1, 9),
        rc(2, 7),
    ] {
        e.fake.push_cqe(cq_h, c);
    }
    assert_eq!(
        outcome(&results_ex(cq, 16)),
        vec![
            (STATUS_SUCCESS, 1, NdkOperationTypeSend, 0, 0),
            (STATUS_SUCCESS, 2, NdkOperationTypeRead, 0, 0),
            (STATUS_SUCCESS, 5, NdkOperationTypeSend, 0, 0),
            (STATUS_SUCCESS, 10, NdkOperationTypeReceive, 0, 8),
            (
                STATUS_INTERNAL_ERROR,
                11,
                NdkOperationTypeReceive,
                wc::GENERAL_ERR,
                0
            ),
            (STATUS_SUCCESS, 12, NdkOperationTypeReceive, 0, 7),
        ]
    );
    assert_eq!(e.dev.bad_cqes(), 1);
    // One result at a time (the peel): a receive, then a send of the other QP.
    assert_eq!(receive(a, 13, &s), STATUS_SUCCESS);
    assert_eq!(send(b, 6, &s, 0), STATUS_SUCCESS);
    e.fake.push_cqe(cq_h, rc(3, 8));
    e.fake
        .push_cqe(cq_h, cqe(b_h, wr_id(tag::SQ, 1), wc::SUCCESS));
    assert_eq!(
        outcome(&results_ex(cq, 1)),
        vec![(STATUS_SUCCESS, 13, NdkOperationTypeReceive, 0, 8)]
    );
    assert_eq!(
        outcome(&results_ex(cq, 1)),
        vec![(STATUS_SUCCESS, 6, NdkOperationTypeSend, 0, 0)]
    );
    assert_eq!(outcome(&results_ex(cq, 1)), vec![]);
    for p in [hdr(a), hdr(b), hdr(cq), hdr(pd)] {
        assert_eq!(close(p.cast::<NDK_PD>(), 1), STATUS_SUCCESS);
    }
    e.close_adapter();
}
