//! The adapter's GSI QP (QP1), which carries the connection manager's MADs (cm.md §2.2):
//! UD sends to QP 1 with Q_Key 0x80010000, receives of a 40-byte GRH area and a 256-byte MAD.
//!
//! [`Qp1::open`] builds it once per adapter (PASSIVE_LEVEL): its PD (whose DMA MR's key
//! covers the MAD buffers), one CQ for both queues, the GSI QP taken to RTS, and every MAD
//! buffer, allocated here and never again: `recv_depth` receive buffers of 296 bytes, all
//! posted, and `send_depth` send buffers of 256 bytes, one per SQ slot.
//!
//! - [`Qp1::send`] copies a MAD into its slot's buffer and posts one UD SEND (IRQL ≤
//!   DISPATCH_LEVEL, no allocation; one spin lock, because the connection manager sends from
//!   consumer calls and from its timer at once). A full SQ refuses the MAD: to the CM it is a
//!   lost packet, which it retransmits.
//! - Receives are polled from the CQ's notification (the CQ-notification DPC) by one poller
//!   at a time; each MAD is copied out, its buffer reposted, and only then handed to the
//!   [`MadSink`] with no lock held. Nothing the device wrote is trusted: the CQE must name
//!   this QP and the oldest outstanding slot of its queue, the length must be exactly
//!   40 + 256 bytes (a short or oversized MAD is dropped and counted), and the GRH must be an
//!   IPv4 or IPv6 header ([`Grh::parse`]).
//! - [`Qp1::close`] (PASSIVE_LEVEL) takes the QP to ERR and waits for the device's answer,
//!   after which the device has flushed every WQE and writes no buffer again (M32); then the
//!   QP, CQ, MR and PD are destroyed and the buffers freed.
#![deny(unsafe_code)]

use alloc::sync::{Arc, Weak};
use core::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, Ordering};

use crate::os::SharedDma;
use crate::os::SpinLock;
use crate::os::alloc::{try_arc, try_box};
use crate::pvrdma::PvrdmaError;
use crate::pvrdma::cq::{CqReader, CqState};
use crate::pvrdma::cqe::{CqeView, UdSource, WcFlags, wc_opcode, wc_status};
use crate::pvrdma::device::CqEvents;
use crate::pvrdma::ud::{GRH_LEN, Grh, QP1_QKEY, UdAddress};
use crate::pvrdma::verbs::{Done, MrKeys, QpModify, QpSpec, QpState, Verbs, pow2_ceil};
use crate::pvrdma::wq::{RecvWriter, SendWriter};
use crate::pvrdma::wqe::{SendFlags, Sge, SqHeader, WrOpcode};

pub use crate::cm::wire::MAD_LEN;
/// What a MAD receive's CQE must report: the GRH area and the MAD.
const RECV_LEN: usize = GRH_LEN + MAD_LEN;
/// Receive buffers start 64-byte aligned.
const RECV_STRIDE: usize = 320;
/// Marks a receive's `wr_id` (a send's has the bit clear); the low 32 bits are the WQE's
/// free-running index.
const RECV_TAG: u64 = 1 << 63;

/// Sizes of the QP1 queues (powers of two; each slot has its own MAD buffer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Qp1Config {
    /// Receive buffers, all posted at all times.
    pub recv_depth: u32,
    /// Sends in flight at most.
    pub send_depth: u32,
}

impl Default for Qp1Config {
    fn default() -> Self {
        Qp1Config {
            recv_depth: 64,
            send_depth: 64,
        }
    }
}

/// Where a MAD is sent: the peer's GID and MAC and the local GID index to send from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MadPath {
    /// The peer's GID.
    pub dgid: [u8; 16],
    /// The next hop's MAC.
    pub dmac: [u8; 6],
    /// Source GID index.
    pub sgid_index: u8,
    /// TTL / hop limit (0: the device's default).
    pub hop_limit: u8,
    /// TOS / traffic class.
    pub traffic_class: u8,
}

/// Where a received MAD came from: the GRH area and the CQE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MadSource {
    /// The GRH as received.
    pub grh: Grh,
    /// The sender's MAC (the CQE's `smac`): the reply's destination MAC.
    pub smac: [u8; 6],
    /// The sending QP (1 for a CM peer).
    pub src_qp: u32,
}

/// Receives MADs (DISPATCH_LEVEL, no driver lock held, one call at a time).
pub trait MadSink: Send + Sync {
    /// A MAD arrived.
    fn mad(&self, from: &MadSource, mad: &[u8; MAD_LEN]);
}

/// Why [`Qp1::send`] did not send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Qp1Error {
    /// Every SQ slot is in flight: the MAD is dropped (as if lost).
    QueueFull,
    /// The QP is closing or failed.
    Closed,
}

/// What QP1 counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Qp1Stats {
    /// MADs posted.
    pub sent: u64,
    /// Send completions, successful or not.
    pub send_completions: u64,
    /// Send completions with an error.
    pub send_errors: u64,
    /// MADs refused because the SQ was full.
    pub send_full: u64,
    /// MADs delivered to the sink.
    pub received: u64,
    /// Receives dropped for a length other than 40 + 256 bytes.
    pub bad_length: u64,
    /// Receives dropped for a GRH area that is no IP header.
    pub bad_grh: u64,
    /// Receive completions with an error (flushes at close included).
    pub recv_errors: u64,
    /// CQEs ignored: another QP, an unknown or out-of-order `wr_id`, an unknown opcode, or a
    /// CQ index that failed validation.
    pub bad_cqes: u64,
}

#[derive(Default)]
struct Counters {
    sent: AtomicU64,
    send_completions: AtomicU64,
    send_errors: AtomicU64,
    send_full: AtomicU64,
    received: AtomicU64,
    bad_length: AtomicU64,
    bad_grh: AtomicU64,
    recv_errors: AtomicU64,
    bad_cqes: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// Poller states: nobody polls; one polls; one polls and another notification came meanwhile.
const IDLE: u8 = 0;
const BUSY: u8 = 1;
const AGAIN: u8 = 2;

struct Inner {
    hw: Arc<Verbs>,
    pd: u32,
    dma_mr: MrKeys,
    cq: u32,
    qp: u32,
    send_depth: u32,
    recv_depth: u32,
    /// The SQ writer; its lock serializes the senders.
    sq: SpinLock<SendWriter>,
    /// Sends posted (free-running), written under `sq`'s lock.
    send_posted: AtomicU32,
    /// Send completions retired, written by the poller.
    send_retired: AtomicU32,
    /// Written by the poller only (and by `open` before the poller can run).
    rq: RecvWriter,
    recv_posted: AtomicU32,
    recv_retired: AtomicU32,
    reader: CqReader,
    poll_state: AtomicU8,
    /// The CQ's index failed validation: it is never read again.
    cq_failed: AtomicBool,
    closing: AtomicBool,
    send_bufs: SharedDma,
    recv_bufs: SharedDma,
    sink: SpinLock<Option<Arc<dyn MadSink>>>,
    counters: Counters,
}

/// The adapter's QP1 (see the module docs).
pub struct Qp1 {
    inner: Arc<Inner>,
}

/// The CQ's handler, registered with the hardware: weak, so that the hardware's table does
/// not keep QP1 alive.
struct Qp1Events(Weak<Inner>);

impl CqEvents for Qp1Events {
    fn completion(&self) {
        if let Some(q) = self.0.upgrade() {
            q.poll();
        }
    }
    fn error(&self) {
        if let Some(q) = self.0.upgrade() {
            q.cq_failed.store(true, Ordering::Release);
            bump(&q.counters.bad_cqes);
        }
    }
}

/// Runs one asynchronous seam command and waits for it (PASSIVE_LEVEL).
fn wait<T: Send + 'static>(hw: &Verbs, issue: impl FnOnce(Done<T>)) -> Result<T, PvrdmaError> {
    let cell: Arc<SpinLock<Option<Result<T, PvrdmaError>>>> =
        try_arc(SpinLock::new(None)).map_err(|_| PvrdmaError::NoMemory)?;
    let c2 = cell.clone();
    let done = try_box(move |r: Result<T, PvrdmaError>| *c2.lock() = Some(r))
        .map_err(|_| PvrdmaError::NoMemory)?
        .map_box(|b| b as Done<T>)
        .into_inner();
    issue(done);
    hw.wait_until(&|| cell.lock().is_some());
    let r = cell.lock().take();
    r.unwrap_or(Err(PvrdmaError::Timeout))
}

/// What `open` has made so far, destroyed in reverse if it fails.
struct Partial<'a> {
    hw: &'a Verbs,
    pd: Option<(u32, MrKeys)>,
    cq: Option<u32>,
    qp: Option<u32>,
}

impl Partial<'_> {
    fn disarm(&mut self) {
        (self.pd, self.cq, self.qp) = (None, None, None);
    }
}

impl Drop for Partial<'_> {
    fn drop(&mut self) {
        if let Some(qp) = self.qp.take() {
            self.hw.destroy_qp(qp);
        }
        if let Some(cq) = self.cq.take() {
            self.hw.destroy_cq(cq);
        }
        if let Some((pd, mr)) = self.pd.take() {
            self.hw.destroy_mr(mr.handle);
            self.hw.destroy_pd(pd);
        }
    }
}

impl Qp1 {
    /// Builds the adapter's QP1 and takes it to RTS (PASSIVE_LEVEL: it allocates and waits
    /// for the device). `sink` gets every MAD received until [`Qp1::close`].
    ///
    /// # Errors
    /// [`PvrdmaError::InvalidParameter`] for depths that are not powers of two in 1..=2^15 (or that the
    /// device would size differently); otherwise the first failing command's error, after
    /// what was made is destroyed.
    pub fn open(
        hw: Arc<Verbs>,
        cfg: Qp1Config,
        sink: Arc<dyn MadSink>,
    ) -> Result<Qp1, PvrdmaError> {
        let pow2 = |n: u32| n.is_power_of_two() && n <= 1 << 15;
        if !(pow2(cfg.recv_depth) && pow2(cfg.send_depth)) {
            return Err(PvrdmaError::InvalidParameter);
        }
        // CAST: ≤ 2^15 each.
        let recv_bytes = cfg.recv_depth as usize * RECV_STRIDE;
        let send_bytes = cfg.send_depth as usize * MAD_LEN;
        let recv_bufs = hw.alloc_dma(recv_bytes)?;
        let send_bufs = hw.alloc_dma(send_bytes)?;
        let h: &Verbs = &hw;
        let mut made = Partial {
            hw: h,
            pd: None,
            cq: None,
            qp: None,
        };
        let (pd, dma_mr) = wait(h, |d| h.create_pd(d))?;
        made.pd = Some((pd, dma_mr));
        let entries = cfg
            .recv_depth
            .checked_add(cfg.send_depth)
            .and_then(pow2_ceil)
            .ok_or(PvrdmaError::InvalidParameter)?;
        let cq = wait(h, |d| h.create_cq(entries, d))?;
        made.cq = Some(cq);
        let reader = h.cq_reader(cq)?;
        let spec = QpSpec {
            pd,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            max_send_wr: cfg.send_depth,
            max_recv_wr: cfg.recv_depth,
            max_send_sge: 1,
            max_recv_sge: 1,
        };
        let qp = wait(h, |d| h.create_gsi_qp(&spec, d))?;
        made.qp = Some(qp);
        let (sq, rq) = h.qp_writers(qp)?;
        let rq = rq.ok_or(PvrdmaError::InvalidParameter)?;
        if sq.entries() != cfg.send_depth || rq.entries() != cfg.recv_depth {
            return Err(PvrdmaError::InvalidParameter);
        }
        let inner = try_arc(Inner {
            hw: hw.clone(),
            pd,
            dma_mr,
            cq,
            qp,
            send_depth: cfg.send_depth,
            recv_depth: cfg.recv_depth,
            sq: SpinLock::new(sq),
            send_posted: AtomicU32::new(0),
            send_retired: AtomicU32::new(0),
            rq,
            recv_posted: AtomicU32::new(0),
            recv_retired: AtomicU32::new(0),
            reader,
            poll_state: AtomicU8::new(IDLE),
            cq_failed: AtomicBool::new(false),
            closing: AtomicBool::new(false),
            send_bufs,
            recv_bufs,
            sink: SpinLock::new(Some(sink)),
            counters: Counters::default(),
        })
        .map_err(|_| PvrdmaError::NoMemory)?;
        let events: Arc<dyn CqEvents> =
            try_arc(Qp1Events(Arc::downgrade(&inner))).map_err(|_| PvrdmaError::NoMemory)?;
        h.route_cq(cq, events, crate::os::Processor::Current)?;
        // From here a failure frees the receive buffers while the QP, still in INIT, holds
        // them posted: a QP below RTR receives nothing (M34), and its DESTROY follows.
        for i in 0..cfg.recv_depth {
            if !inner.post_recv(i) {
                return Err(PvrdmaError::Timeout);
            }
        }
        let rtr = QpModify {
            state: Some(QpState::Rtr),
            ..QpModify::default()
        };
        wait(h, |d| h.modify_qp(qp, &rtr, d))?;
        let rts = QpModify {
            state: Some(QpState::Rts),
            sq_psn: Some(0),
            ..QpModify::default()
        };
        wait(h, |d| h.modify_qp(qp, &rts, d))?;
        made.disarm();
        // Arms the CQ (and takes anything that arrived already).
        inner.poll();
        Ok(Qp1 { inner })
    }

    /// Sends `mad` on `path` to the peer's QP1 (IRQL ≤ DISPATCH_LEVEL; no allocation).
    ///
    /// # Errors
    /// [`Qp1Error::QueueFull`] when every send slot is in flight, [`Qp1Error::Closed`] once
    /// [`Qp1::close`] has begun.
    pub fn send(&self, path: &MadPath, mad: &[u8; MAD_LEN]) -> Result<(), Qp1Error> {
        self.inner.send(path, mad)
    }

    /// Polls the CQ as its notification does (for a caller that knows completions are
    /// waiting, and tests).
    pub fn poll(&self) {
        self.inner.poll();
    }

    /// The QP's device handle.
    pub fn qp_handle(&self) -> u32 {
        self.inner.qp
    }

    /// The counters.
    pub fn stats(&self) -> Qp1Stats {
        let c = &self.inner.counters;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Qp1Stats {
            sent: l(&c.sent),
            send_completions: l(&c.send_completions),
            send_errors: l(&c.send_errors),
            send_full: l(&c.send_full),
            received: l(&c.received),
            bad_length: l(&c.bad_length),
            bad_grh: l(&c.bad_grh),
            recv_errors: l(&c.recv_errors),
            bad_cqes: l(&c.bad_cqes),
        }
    }

    /// Sends in flight (posted, not yet completed).
    pub fn sends_in_flight(&self) -> u32 {
        let i = &self.inner;
        i.send_posted
            .load(Ordering::Acquire)
            .wrapping_sub(i.send_retired.load(Ordering::Acquire))
    }

    /// Stops sending and receiving, flushes the QP and destroys it with its CQ, MR and PD
    /// (PASSIVE_LEVEL: waits for the flush). The sink is dropped here and called no more
    /// once this returns, but for a call already running in the DPC.
    pub fn close(self) -> Result<(), PvrdmaError> {
        let i = &self.inner;
        i.closing.store(true, Ordering::Release);
        let sink = i.sink.lock().take();
        drop(sink);
        let h: &Verbs = &i.hw;
        let err = QpModify {
            state: Some(QpState::Err),
            ..QpModify::default()
        };
        // After the answer the device has written the flush CQEs and owns no buffer (M32).
        let flushed = wait(h, |d| h.modify_qp(i.qp, &err, d));
        i.poll();
        h.destroy_qp(i.qp);
        h.destroy_cq(i.cq);
        h.destroy_mr(i.dma_mr.handle);
        h.destroy_pd(i.pd);
        flushed
    }
}

impl Inner {
    fn send(&self, path: &MadPath, mad: &[u8; MAD_LEN]) -> Result<(), Qp1Error> {
        if self.closing.load(Ordering::Acquire) {
            return Err(Qp1Error::Closed);
        }
        let sq = self.sq.lock();
        let index = self.send_posted.load(Ordering::Relaxed);
        let in_flight = index.wrapping_sub(self.send_retired.load(Ordering::Acquire));
        if in_flight >= self.send_depth {
            drop(sq);
            bump(&self.counters.send_full);
            return Err(Qp1Error::QueueFull);
        }
        // The slot's buffer is free: the send that used it last has completed.
        // CAST: `index % send_depth` < 2^15.
        let offset = (index % self.send_depth) as usize * MAD_LEN;
        self.send_bufs.view().write_bytes(offset, mad);
        let address = UdAddress {
            remote_qpn: 1,
            remote_qkey: QP1_QKEY,
            pd: self.pd,
            dgid: path.dgid,
            dmac: path.dmac,
            sgid_index: path.sgid_index,
            hop_limit: path.hop_limit,
            traffic_class: path.traffic_class,
        };
        let header = SqHeader {
            op_word: SqHeader::op_word(WrOpcode::Send, SendFlags::SIGNALED),
            ex: 0,
            body: address.body(),
        };
        let sge = Sge {
            addr: self.send_bufs.logical().wrapping_add(offset as u64),
            length: MAD_LEN as u32,
            lkey: self.dma_mr.lkey,
        };
        let slot = sq.slot(index);
        let posted = slot.write_send(u64::from(index), &header, &[sge]);
        if posted {
            self.send_posted
                .store(index.wrapping_add(1), Ordering::Release);
            slot.hand_over(false);
        }
        drop(sq);
        if !posted {
            return Err(Qp1Error::Closed);
        }
        bump(&self.counters.sent);
        Ok(())
    }

    /// Posts receive WQE `index` (free-running) over its buffer. Called by the one poller
    /// (or `open`, before it can run).
    fn post_recv(&self, index: u32) -> bool {
        // CAST: `index % recv_depth` < 2^15.
        let offset = (index % self.recv_depth) as usize * RECV_STRIDE;
        let sge = Sge {
            addr: self.recv_bufs.logical().wrapping_add(offset as u64),
            length: RECV_LEN as u32,
            lkey: self.dma_mr.lkey,
        };
        let slot = self.rq.slot(index);
        if !slot.write_recv(RECV_TAG | u64::from(index), &[sge]) {
            return false;
        }
        self.recv_posted
            .store(index.wrapping_add(1), Ordering::Relaxed);
        slot.hand_over(false);
        true
    }

    /// One poller at a time: a notification that finds another polling leaves it to poll
    /// again, so no completion waits for a later notification.
    fn poll(&self) {
        loop {
            match self
                .poll_state
                .compare_exchange(IDLE, BUSY, Ordering::Acquire, Ordering::Acquire)
            {
                Ok(_) => break,
                Err(AGAIN) => return,
                Err(_) => {
                    if self
                        .poll_state
                        .compare_exchange(BUSY, AGAIN, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok()
                    {
                        return;
                    }
                }
            }
        }
        loop {
            self.drain();
            if !self.cq_failed.load(Ordering::Acquire) {
                self.reader.arm(false);
                // A CQE written between the drain and the arm notified no one.
                self.drain();
            }
            if self
                .poll_state
                .compare_exchange(BUSY, IDLE, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return;
            }
            self.poll_state.store(BUSY, Ordering::Release);
        }
    }

    fn drain(&self) {
        let mut head = self.reader.head();
        loop {
            if self.cq_failed.load(Ordering::Acquire) {
                return;
            }
            let n = match self.reader.ready(head) {
                CqState::Empty => return,
                CqState::Corrupt => {
                    self.reader.stop();
                    self.cq_failed.store(true, Ordering::Release);
                    bump(&self.counters.bad_cqes);
                    return;
                }
                CqState::Ready(n) => n,
            };
            for _ in 0..n {
                // Read before the slot goes back to the device.
                let cqe = self.reader.load(head);
                let from = self.reader.load_ud(head);
                head = self.reader.next(head);
                self.reader.consume(head);
                self.complete(&cqe, from);
            }
        }
    }

    fn complete(&self, cqe: &CqeView, from: UdSource) {
        if cqe.qp != u64::from(self.qp) {
            return bump(&self.counters.bad_cqes);
        }
        if cqe.wr_id & RECV_TAG == 0 {
            self.send_completed(cqe.wr_id, cqe.status);
        } else {
            self.recv_completed(cqe, from);
        }
    }

    fn send_completed(&self, wr_id: u64, status: u32) {
        let retired = self.send_retired.load(Ordering::Relaxed);
        let posted = self.send_posted.load(Ordering::Acquire);
        // Sends complete in posting order: only the oldest outstanding one may complete.
        if retired == posted || wr_id != u64::from(retired) {
            return bump(&self.counters.bad_cqes);
        }
        bump(&self.counters.send_completions);
        if status != wc_status::SUCCESS {
            bump(&self.counters.send_errors);
        }
        self.send_retired
            .store(retired.wrapping_add(1), Ordering::Release);
    }

    fn recv_completed(&self, cqe: &CqeView, src: UdSource) {
        let retired = self.recv_retired.load(Ordering::Relaxed);
        let posted = self.recv_posted.load(Ordering::Relaxed);
        if retired == posted || cqe.wr_id != RECV_TAG | u64::from(retired) {
            return bump(&self.counters.bad_cqes);
        }
        self.recv_retired
            .store(retired.wrapping_add(1), Ordering::Relaxed);
        let mad = if cqe.status != wc_status::SUCCESS {
            bump(&self.counters.recv_errors);
            None
        } else if cqe.opcode != wc_opcode::RECV {
            bump(&self.counters.bad_cqes);
            None
        } else if cqe.byte_len as usize != RECV_LEN {
            bump(&self.counters.bad_length);
            None
        } else {
            self.read_mad(retired, cqe.wc_flags)
        };
        // The buffer goes back before the sink runs, so the RQ never waits on a consumer.
        if !self.closing.load(Ordering::Acquire) && !self.post_recv(posted) {
            bump(&self.counters.bad_cqes);
        }
        let Some((grh, bytes)) = mad else { return };
        let from = MadSource {
            grh,
            smac: src.smac,
            src_qp: src.src_qp,
        };
        let sink = self.sink.lock().clone();
        if let Some(s) = sink {
            bump(&self.counters.received);
            s.mad(&from, &bytes);
        }
    }

    /// The GRH and the MAD of receive `index`, copied out of its buffer.
    fn read_mad(&self, index: u32, wc_flags: u32) -> Option<(Grh, [u8; MAD_LEN])> {
        // CAST: `index % recv_depth` < 2^15.
        let offset = (index % self.recv_depth) as usize * RECV_STRIDE;
        let view = self.recv_bufs.view();
        let mut area = [0u8; GRH_LEN];
        view.read_bytes(offset, &mut area);
        let grh = WcFlags::from_bits_truncate(wc_flags)
            .contains(WcFlags::GRH)
            .then(|| Grh::parse(&area))
            .flatten();
        let Some(grh) = grh else {
            bump(&self.counters.bad_grh);
            return None;
        };
        let mut mad = [0u8; MAD_LEN];
        view.read_bytes(offset + GRH_LEN, &mut mad);
        Some((grh, mad))
    }
}
