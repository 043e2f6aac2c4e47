//! NDK_QP over a PVRDMA RC QP (ndkpi.md §5.3, §5.5, §5.6, §5.7 NdkFastRegister/Invalidate,
//! §5.8; pvrdma.md §1 mapping, §9, §10, §12).
//!
//! Posting: validate, take the next slot and store its record (the queue's post side,
//! below), write the WQE into it ([`WqSlot::write_send`]), commit the slot, then hand it to
//! the device ([`WqSlot::hand_over`]: `prod_tail` and the doorbell, unless the request
//! carries NDK_OP_FLAG_DEFER); the ring writer never calls back into this layer. Deferred WQEs are already in the ring and share the doorbell of the
//! next non-deferred request; an inline failure first rings for them, so a chain cut short
//! by a failure still completes what it posted (§5.5). Posts take no lock (the consumer
//! serializes each queue, §5.3) and never allocate.
#![deny(unsafe_code)]

use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU8, AtomicU32, AtomicU64, Ordering};

use super::completion::{OrderedQueue, SlotCell, SlotMeta, SlotRecord, SlotTable, tag, wr_id};
use super::consumer_array::ConsumerArray;
use super::cq::Cq;
use super::error::{NdkError, NdkResult};
use super::mr::Mr;
use super::object::{
    CreateHandoff, Dispatched, Lifetime, NdkObject, ObjRef, ProviderObject, header,
};
use super::pd::{Pd, take_successor};
use super::qp_table::GraveLinks;
use super::srq::Srq;
use super::traffic::{Direction, QpTraffic};
use crate::ndkpi::*;
use crate::pvrdma::PvrdmaError;
use crate::pvrdma::verbs::{Done, QpSpec, pow2_ceil};
use crate::pvrdma::wq::{RecvWriter, SendWriter, WqKind, WqSlot, WqWriter};
use crate::pvrdma::wqe::{AccessFlags, SendFlags, Sge, SqHeader, WrOpcode};

/// Every NDK_OP_FLAG_* bit NDKPI defines.
const KNOWN_FLAGS: u32 = NDK_OP_FLAG_SILENT_SUCCESS
    | NDK_OP_FLAG_READ_FENCE
    | NDK_OP_FLAG_SEND_AND_SOLICIT_EVENT
    | NDK_OP_FLAG_ALLOW_REMOTE_READ
    | NDK_OP_FLAG_ALLOW_REMOTE_WRITE
    | NDK_OP_FLAG_INLINE
    | NDK_OP_FLAG_RDMA_READ_SINK
    | NDK_OP_FLAG_RDMA_READ_LOCAL_INVALIDATE
    | NDK_OP_FLAG_DEFER;

const COMMON: u32 = NDK_OP_FLAG_SILENT_SUCCESS | NDK_OP_FLAG_READ_FENCE | NDK_OP_FLAG_DEFER;
const SEND_FLAGS: u32 = COMMON | NDK_OP_FLAG_SEND_AND_SOLICIT_EVENT | NDK_OP_FLAG_INLINE;
const WRITE_FLAGS: u32 = COMMON | NDK_OP_FLAG_INLINE;
/// RDMA_READ_LOCAL_INVALIDATE is accepted and ignored: the capability is not reported
/// (Project decision (b)).
const READ_FLAGS: u32 = COMMON | NDK_OP_FLAG_RDMA_READ_LOCAL_INVALIDATE;
const FAST_REGISTER_FLAGS: u32 = COMMON
    | NDK_OP_FLAG_ALLOW_REMOTE_READ
    | NDK_OP_FLAG_ALLOW_REMOTE_WRITE
    | NDK_OP_FLAG_RDMA_READ_SINK;
const INVALIDATE_FLAGS: u32 = COMMON;

/// Flag check shared by the initiator requests.
///
/// # Errors
/// STATUS_INVALID_PARAMETER for a bit NDKPI does not define or that the request does not
/// take; STATUS_NOT_SUPPORTED for INLINE (MaxInlineDataSize is 0: the device has no inline
/// data, pvrdma.md §1).
pub fn check_flags(flags: u32, allowed: u32) -> NdkResult<()> {
    if flags & !KNOWN_FLAGS != 0 || flags & !allowed != 0 {
        return Err(NdkError::InvalidParameter);
    }
    if flags & NDK_OP_FLAG_INLINE != 0 {
        return Err(NdkError::NotSupported);
    }
    Ok(())
}

/// The words an initiator post of one kind writes besides its operands: its WQE
/// `opcode`/`send_flags` word ([`SqHeader::op_word`]) for each combination of
/// SILENT_SUCCESS, READ_FENCE and SEND_AND_SOLICIT_EVENT (NDK bits 0–2: SIGNALED unless
/// silent, FENCE, SOLICITED), one indexed load per request; and its operation type.
struct PostKind {
    op_words: [u64; 8],
    op: NDK_OPERATION_TYPE,
}

impl PostKind {
    #[allow(clippy::indexing_slicing)] // const evaluation: an out-of-bounds index fails the build
    const fn new(opcode: WrOpcode, op: NDK_OPERATION_TYPE) -> PostKind {
        let mut op_words = [0u64; 8];
        let mut f = 0;
        while f < 8 {
            let f32 = f as u32;
            let mut w = SendFlags::empty();
            if f32 & NDK_OP_FLAG_SILENT_SUCCESS == 0 {
                w = w.union(SendFlags::SIGNALED);
            }
            if f32 & NDK_OP_FLAG_READ_FENCE != 0 {
                w = w.union(SendFlags::FENCE);
            }
            if f32 & NDK_OP_FLAG_SEND_AND_SOLICIT_EVENT != 0 {
                w = w.union(SendFlags::SOLICITED);
            }
            op_words[f] = SqHeader::op_word(opcode, w);
            f += 1;
        }
        PostKind { op_words, op }
    }

    /// The WQE word for `flags`.
    #[inline(always)]
    fn op_word(&self, flags: u32) -> u64 {
        // The index is below 8: the fallback is never taken (and compiled away).
        self.op_words
            .get((flags & 7) as usize)
            .copied()
            .unwrap_or(0)
    }
}

const READ: PostKind = PostKind::new(WrOpcode::RdmaRead, NdkOperationTypeRead);
const WRITE: PostKind = PostKind::new(WrOpcode::RdmaWrite, NdkOperationTypeWrite);
const SEND: PostKind = PostKind::new(WrOpcode::Send, NdkOperationTypeSend);
/// SendAndInvalidate: the sender's result Type is Send too.
const SEND_INV: PostKind = PostKind::new(WrOpcode::SendWithInv, NdkOperationTypeSend);
const FAST_REGISTER: PostKind = PostKind::new(WrOpcode::FastRegMr, NdkOperationTypeFastRegister);
const INVALIDATE: PostKind = PostKind::new(WrOpcode::LocalInv, NdkOperationTypeInvalidate);

/// [`Qp::hold_for_connection`]: an open connector holds the QP.
const HELD: u8 = 1;
/// [`Qp::mark_used`]: the QP left INIT (it cannot connect again).
const USED: u8 = 2;

/// NdkCreateQp / NdkCreateQpWithSrq parameters.
pub struct QpParams {
    /// `pReceiveCq`.
    pub receive_cq: ObjRef<Cq>,
    /// `pInitiatorCq`.
    pub initiator_cq: ObjRef<Cq>,
    /// `pSrq` (NdkCreateQpWithSrq).
    pub srq: Option<ObjRef<Srq>>,
    /// `QPContext`.
    pub context: usize,
    /// `ReceiveQueueDepth` (ignored with an SRQ).
    pub receive_depth: u32,
    /// `InitiatorQueueDepth`.
    pub initiator_depth: u32,
    /// `MaxReceiveRequestSge` (ignored with an SRQ).
    pub max_receive_sge: u32,
    /// `MaxInitiatorRequestSge`.
    pub max_initiator_sge: u32,
    /// `InlineDataSize`.
    pub inline_data: u32,
}

/// Sum of the SGE lengths (u64: cannot overflow for 2^32 SGEs); out of line, the common
/// single-SGE post does not loop.
#[inline(never)]
fn total_length(sges: &[Sge]) -> u64 {
    sges.iter().map(|s| u64::from(s.length)).sum()
}

/// The post side of a queue's bookkeeping (its retire side, run by the CQ's poller, is in
/// `completion`, with the ordering both sides rely on).
impl<T: SlotTable> OrderedQueue<T> {
    /// The index of the next post, `None` when `depth` requests are outstanding (the
    /// queue's single poster calls this; a retired slot is free in the ring too, because the
    /// device consumes WQEs in order and completes a slot only after consuming it).
    #[inline(always)]
    pub(crate) fn next(&self) -> Option<u32> {
        let posted = self.posted.load(Ordering::Relaxed);
        if posted == self.limit.load(Ordering::Relaxed) {
            // The cached bound is reached: look at `retired` again. Its Acquire orders the
            // retirer's last reads of the slots it freed before our reuse of them (every
            // later post stays below this bound, so it is ordered too). `posted` − `retired`
            // ≤ `depth` always, so `posted` never passes the bound: equal means full. Inline
            // (a load, an add, a store): a call here would make the whole post save
            // registers.
            let limit = self
                .retired
                .load(Ordering::Acquire)
                .wrapping_add(self.depth);
            self.limit.store(limit, Ordering::Relaxed);
            if posted == limit {
                return None;
            }
        }
        Some(posted)
    }

    /// Publishes the slot taken at `index`: from now on a CQE may retire it. Runs between
    /// the WQE's write and its hand-over, before `prod_tail` covers it ([`WqSlot::hand_over`]).
    #[inline(always)]
    pub(crate) fn commit(&self, index: u32) {
        self.posted.store(index.wrapping_add(1), Ordering::Release);
    }
}

impl<K: WqKind> OrderedQueue<WqWriter<K, SlotCell>> {
    /// The queue's ring writer.
    #[inline(always)]
    fn writer(&self) -> &WqWriter<K, SlotCell> {
        &self.slots
    }

    /// Stores the record of the request posted at `index` (from [`Self::next`]): the
    /// consumer's RequestContext, its operation type and signalling; and returns the slot
    /// its WQE goes to. Nothing is committed: a request refused after this leaves a record
    /// nobody reads.
    #[inline(always)]
    fn take(&self, index: u32, request_context: usize, meta: SlotMeta) -> WqSlot<'_, K, SlotCell> {
        let slot = self.slots.slot(index);
        slot.record().set(request_context, meta);
        slot
    }
}

/// A queue pair.
///
/// `#[repr(C)]`, hot state first (docs/ARCHITECTURE.md "Cache footprint"): what an
/// initiator post reads and writes (admission words, transfer limit, traffic counters),
/// then what a send completion's retirement reads (the live handle, QPContext), then the
/// send queue, whose counts and ring writer start with what both read. A post so touches
/// one run of about 140 bytes of the QP and a send completion one of about 70, where the
/// compiler's order spread each over four lines or more. The rest is in no particular order.
#[repr(C)]
pub struct Qp {
    /// What an initiator request passes for its SGE count, one load and one compare
    /// (together with its flags, the whole admission of a well-formed request):
    /// MaxInitiatorRequestSge + 1 while connected, 0 while not (so that no count, not even
    /// 0, passes). Kept in step with `connected` by [`Qp::set_connected`].
    admit_send: AtomicU64,
    /// As `admit_send`, for NdkRead (bounded by MaxReadRequestSge too).
    admit_read: AtomicU64,
    max_transfer: u32,
    max_recv_sge: u32,
    /// What it moved (OID_NDK_STATISTICS).
    traffic: QpTraffic,
    /// The handle while the QP lives, `u64::MAX` after teardown: a CQ's cached QP is
    /// matched against a CQE's 64-bit `qp` with one compare, and a stale one (the device may
    /// reuse the handle) never matches.
    live_handle: AtomicU64,
    context: usize,
    /// The send queue: its bookkeeping, which owns its ring.
    sq: OrderedQueue<SendWriter<SlotCell>>,
    life: Lifetime,
    pd: ObjRef<Pd>,
    send_cq: ObjRef<Cq>,
    recv_cq: ObjRef<Cq>,
    srq: Option<ObjRef<Srq>>,
    handle: u32,
    /// The wire QP number (CREATE_QP's `qpn`), which the connection manager sends.
    qpn: u32,
    rq: Option<OrderedQueue<RecvWriter<SlotCell>>>,
    /// Links in the CQs' graveyards once torn down.
    grave: GraveLinks,
    max_send_sge: u32,
    max_read_sge: u32,
    connected: AtomicBool,
    bad_cqes: AtomicU32,
    /// Whether a connector holds it ([`HELD`]) and whether it left INIT ([`USED`]): a QP
    /// serves one connection, once (ndkpi.md §5.10).
    connection: AtomicU8,
}

impl NdkObject for Qp {
    type Ndk = NDK_QP;
    fn lifetime(&self) -> &Lifetime {
        &self.life
    }
    fn teardown(&self) {
        self.live_handle.store(u64::MAX, Ordering::Release);
        // The QP leaves its CQs' tables, and the device table's count goes to their pollers,
        // which may still be using it: they release it where they hold no QP (`qp_table`).
        if let Some(q) = self.pd.adapter().device().unregister_qp(self) {
            for cq in self.cqs() {
                cq.bury(q.clone());
            }
        }
        self.pd.adapter().hw().destroy_qp(self.handle);
    }
    fn release_antecedents(&self) {
        if let Some(srq) = &self.srq {
            srq.put();
        }
        self.recv_cq.put();
        self.send_cq.put();
        self.pd.put();
    }
}

/// Successor counts a QP under construction holds on its antecedents; released on drop
/// unless the QP took them over ([`Successors::keep`]).
struct Successors {
    pd: Option<ObjRef<Pd>>,
    icq: Option<ObjRef<Cq>>,
    rcq: Option<ObjRef<Cq>>,
    srq: Option<ObjRef<Srq>>,
}

impl Successors {
    fn take(pd: &ObjRef<Pd>, p: &QpParams) -> NdkResult<Self> {
        let mut s = Successors {
            pd: None,
            icq: None,
            rcq: None,
            srq: None,
        };
        take_successor(pd)?;
        s.pd = Some(pd.clone());
        take_successor(&p.initiator_cq)?;
        s.icq = Some(p.initiator_cq.clone());
        take_successor(&p.receive_cq)?;
        s.rcq = Some(p.receive_cq.clone());
        if let Some(srq) = &p.srq {
            take_successor(srq)?;
            s.srq = Some(srq.clone());
        }
        Ok(s)
    }

    /// The QP owns the counts now (its `release_antecedents` drops them).
    fn keep(mut self) {
        self.pd = None;
        self.icq = None;
        self.rcq = None;
        self.srq = None;
    }
}

impl Drop for Successors {
    fn drop(&mut self) {
        if let Some(s) = self.srq.take() {
            s.put();
        }
        if let Some(c) = self.rcq.take() {
            c.put();
        }
        if let Some(c) = self.icq.take() {
            c.put();
        }
        if let Some(pd) = self.pd.take() {
            pd.put();
        }
    }
}

/// A QP waiting for its CREATE_QP.
struct PendingQp {
    pd: ObjRef<Pd>,
    p: QpParams,
    counts: Successors,
}

impl PendingQp {
    /// The device QP exists: builds the NDK_QP and attaches it to its CQs.
    fn wrap(self, handle: u32) -> NdkResult<ObjRef<Qp>> {
        let PendingQp { pd, p, counts } = self;
        let adapter = pd.adapter();
        let hw = adapter.hw();
        let info = adapter.info();
        let ndk = NDK_QP {
            Header: header(adapter.version(), NdkObjectTypeQp),
            Dispatch: Qp::TABLE,
        };
        let max_recv_sge = match &p.srq {
            Some(s) => s.max_sge(),
            None => p.max_receive_sge,
        };
        let (sq_writer, rq_writer) = match hw.qp_writers(handle) {
            Ok(writers) => writers,
            Err(e) => {
                hw.destroy_qp(handle);
                return Err(e.into());
            }
        };
        // The bookkeeping keeps its slot records beside the WQE addresses of the rings.
        let sq = OrderedQueue::on_writer(p.initiator_depth, sq_writer);
        let rq = match (p.srq.is_none(), rq_writer) {
            (true, Some(w)) => OrderedQueue::on_writer(p.receive_depth, w).map(Some),
            (false, None) => Ok(None),
            _ => Err(NdkError::InsufficientResources),
        };
        let (sq, rq) = match (sq, rq) {
            (Ok(sq), Ok(rq)) => (sq, rq),
            (Err(e), _) | (_, Err(e)) => {
                hw.destroy_qp(handle);
                return Err(e);
            }
        };
        let qp = match ObjRef::try_new(
            ndk,
            Qp {
                life: Lifetime::new(),
                pd: pd.clone(),
                send_cq: p.initiator_cq.clone(),
                recv_cq: p.receive_cq.clone(),
                srq: p.srq.clone(),
                handle,
                // Before VERSION 20 the handle is the QPN (M10).
                qpn: hw.qp_number(handle).unwrap_or(handle),
                context: p.context,
                sq,
                rq,
                live_handle: AtomicU64::new(u64::from(handle)),
                grave: GraveLinks::default(),
                max_send_sge: p.max_initiator_sge,
                max_recv_sge,
                max_read_sge: p.max_initiator_sge.min(info.MaxReadRequestSge),
                max_transfer: info.MaxTransferLength,
                connected: AtomicBool::new(false),
                admit_send: AtomicU64::new(0),
                admit_read: AtomicU64::new(0),
                bad_cqes: AtomicU32::new(0),
                traffic: QpTraffic::default(),
                connection: AtomicU8::new(0),
            },
        ) {
            Ok(q) => q,
            Err(e) => {
                hw.destroy_qp(handle);
                return Err(e);
            }
        };
        // Registered by device handle so its CQs find it from a CQE in O(1).
        if let Err(e) = adapter.device().register_qp(&qp) {
            drop(qp);
            hw.destroy_qp(handle);
            return Err(e);
        }
        // Found from its CQs' own tables first (see `qp_table`).
        for cq in qp.cqs() {
            cq.bind(&qp);
        }
        counts.keep();
        Ok(qp)
    }
}

impl Qp {
    /// The CQs it completes on, each once (the send CQ first).
    fn cqs(&self) -> impl Iterator<Item = &ObjRef<Cq>> {
        let recv = !core::ptr::eq(&*self.send_cq, &*self.recv_cq);
        core::iter::once(&self.send_cq).chain(recv.then_some(&self.recv_cq))
    }

    /// The handles of the CQs its send and receive queues complete on.
    pub(crate) fn cq_handles(&self) -> (u32, u32) {
        (self.send_cq.handle(), self.recv_cq.handle())
    }

    /// Its link in the graveyard of CQ `cq` (one of its CQs).
    pub(crate) fn grave_link(&self, cq: u32) -> &AtomicPtr<ProviderObject<Qp>> {
        self.grave.link(self.send_cq.handle() == cq)
    }

    /// NdkCreateQp / NdkCreateQpWithSrq; the device commands may complete later, and the
    /// result goes to `handoff` (inline or through CreateCompletion).
    ///
    /// # Errors
    /// STATUS_INVALID_PARAMETER for a depth or SGE count above the adapter limits, inline
    /// data above MaxInlineDataSize (0), CQs of another adapter or an SRQ of another PD;
    /// STATUS_NOT_SUPPORTED for an SRQ on a device without SRQs.
    pub fn create_async(
        pd: &ObjRef<Pd>,
        p: QpParams,
        handoff: alloc::sync::Arc<CreateHandoff<Qp>>,
    ) -> NdkResult<()> {
        let adapter = pd.adapter();
        let info = adapter.info();
        if p.srq.is_some() && info.MaxSrqDepth == 0 {
            return Err(NdkError::NotSupported);
        }
        let with_rq = p.srq.is_none();
        if p.initiator_depth > info.MaxInitiatorQueueDepth
            || p.max_initiator_sge > info.MaxInitiatorRequestSge
            || p.inline_data > info.MaxInlineDataSize
            || (with_rq
                && (p.receive_depth > info.MaxReceiveQueueDepth
                    || p.max_receive_sge > info.MaxReceiveRequestSge))
        {
            return Err(NdkError::InvalidParameter);
        }
        if p.receive_cq.adapter() != adapter || p.initiator_cq.adapter() != adapter {
            return Err(NdkError::InvalidParameter);
        }
        if p.srq.as_ref().is_some_and(|s| s.pd() != pd) {
            return Err(NdkError::InvalidParameter);
        }
        let sq_ring = pow2_ceil(p.initiator_depth).ok_or(NdkError::InvalidParameter)?;
        let rq_ring = if with_rq {
            pow2_ceil(p.receive_depth).ok_or(NdkError::InvalidParameter)?
        } else {
            0
        };
        let spec = QpSpec {
            pd: pd.handle(),
            send_cq: p.initiator_cq.handle(),
            recv_cq: p.receive_cq.handle(),
            srq: p.srq.as_ref().map(|s| s.handle()),
            max_send_wr: sq_ring,
            max_recv_wr: rq_ring,
            max_send_sge: p.max_initiator_sge.max(1),
            max_recv_sge: if with_rq { p.max_receive_sge.max(1) } else { 0 },
        };
        // Successor counts: PD, both CQs (one per role), SRQ (§1.6); released by `Drop` on
        // every failure path, kept by the QP on success.
        let counts = Successors::take(pd, &p)?;
        let pending = PendingQp {
            pd: pd.clone(),
            p,
            counts,
        };
        let done = move |r: Result<u32, PvrdmaError>| {
            let made = match r {
                Ok(handle) => pending.wrap(handle),
                Err(e) => Err(e.into()),
            };
            handoff.complete(made);
        };
        let d = crate::os::alloc::try_box(done)
            .map_err(|_| NdkError::InsufficientResources)?
            .map_box(|b| b as Done<u32>)
            .into_inner();
        adapter.hw().create_qp(&spec, d);
        Ok(())
    }

    /// Device handle.
    pub fn handle(&self) -> u32 {
        self.handle
    }

    /// The wire QP number.
    pub fn qpn(&self) -> u32 {
        self.qpn
    }

    /// The adapter the QP was created on.
    pub fn adapter(&self) -> &ObjRef<super::adapter::Adapter> {
        self.pd.adapter()
    }

    /// Whether the QP's device object still exists (its close has not torn it down), so a
    /// MODIFY_QP of its handle cannot reach a QP the device made later under that handle.
    pub(crate) fn is_live(&self) -> bool {
        self.live_handle.load(Ordering::Acquire) != u64::MAX
    }

    /// The consumer's QPContext.
    pub fn context(&self) -> usize {
        self.context
    }

    /// CQEs for this QP that named no outstanding request (diagnostics).
    pub fn bad_cqes(&self) -> u32 {
        self.bad_cqes.load(Ordering::Relaxed)
    }

    /// What this QP moved so far.
    pub fn traffic(&self) -> &QpTraffic {
        &self.traffic
    }

    /// Whether initiator requests are accepted (the connection manager's RTS).
    pub fn is_connected(&self) -> bool {
        self.connected.load(Ordering::Acquire)
    }

    /// The connection reached RTS: initiator requests are accepted from now on. Called by the
    /// connection engine after its MODIFY_QP to RTS (and with `false` after ERR).
    pub fn set_connected(&self, connected: bool) {
        let admit = |max: u32| if connected { u64::from(max) + 1 } else { 0 };
        self.connected.store(connected, Ordering::Release);
        self.admit_send
            .store(admit(self.max_send_sge), Ordering::Release);
        self.admit_read
            .store(admit(self.max_read_sge), Ordering::Release);
    }

    /// Claims the QP for one connector; false if another holds it or it left INIT.
    pub(crate) fn hold_for_connection(&self) -> bool {
        self.connection
            .compare_exchange(0, HELD, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// The connector lets go of the QP (its close).
    pub(crate) fn release_from_connection(&self) {
        self.connection.fetch_and(!HELD, Ordering::AcqRel);
    }

    /// The QP is about to leave INIT (a connection's MODIFY_QP, NdkFlush): it cannot connect
    /// again.
    pub(crate) fn mark_used(&self) {
        self.connection.fetch_or(USED, Ordering::AcqRel);
    }

    /// Whether the QP left INIT.
    pub(crate) fn was_used(&self) -> bool {
        self.connection.load(Ordering::Acquire) & USED != 0
    }

    /// The device handle while the QP lives, `u64::MAX` once torn down.
    #[inline(always)]
    pub(crate) fn live_handle(&self) -> u64 {
        self.live_handle.load(Ordering::Relaxed)
    }

    /// The send queue's bookkeeping, for the poll's fast path (runs of retirements).
    #[inline(always)]
    pub(crate) fn send_book(&self) -> &OrderedQueue<SendWriter<SlotCell>> {
        &self.sq
    }

    /// Retires the request of queue `t` (a `wr_id` tag) at `index`; `None` (and counted)
    /// when the CQE names no outstanding request of this QP.
    #[inline(always)]
    pub(crate) fn retire(&self, t: u32, index: u32) -> Option<SlotRecord> {
        let rec = match t {
            tag::SQ => self.sq.retire(index),
            tag::RQ => match &self.rq {
                Some(q) => q.retire(index),
                None => None,
            },
            tag::SRQ => match &self.srq {
                Some(s) => s.retire(index),
                None => None,
            },
            _ => None,
        };
        if rec.is_none() {
            self.count_bad_cqe();
        }
        rec
    }

    #[cold]
    #[inline(never)]
    fn count_bad_cqe(&self) {
        self.bad_cqes.fetch_add(1, Ordering::Relaxed);
    }

    /// The total length check shared by every post: the total, if within the limit.
    #[inline(always)]
    fn checked_length(&self, sges: &[Sge]) -> Option<u64> {
        // No arm of its own for no SGE (total 0, rare): the total feeds a counter, and a
        // separate 0 would cost the one-SGE path a register move.
        let total = match sges {
            [one] => u64::from(one.length),
            other => total_length(other),
        };
        (total <= u64::from(self.max_transfer)).then_some(total)
    }

    /// Rings the SQ doorbell for deferred WQEs, if any (§5.5).
    fn ring_deferred(&self) {
        self.sq.writer().ring_owed();
    }

    /// An initiator request failed inline: the WQEs it would have shared a doorbell with
    /// are indicated first (§5.5), then the error is returned. Out of line: the post path
    /// keeps only the checks.
    #[cold]
    #[inline(never)]
    fn fail(&self, e: NdkError) -> NdkResult<()> {
        self.ring_deferred();
        Err(e)
    }

    /// The inline failure of a request refused by its connection state, its flags or its
    /// SGE count (`n_sge` above the limit its admission word `admit` encodes), in that order.
    #[cold]
    #[inline(never)]
    /// (The parameter order leaves the post's arguments where they arrive.)
    fn refuse(&self, admit: &AtomicU64, allowed: u32, flags: u32, n_sge: usize) -> NdkResult<()> {
        let max = if core::ptr::eq(admit, &self.admit_read) {
            self.max_read_sge
        } else {
            self.max_send_sge
        };
        let e = if !self.connected.load(Ordering::Acquire) {
            NdkError::ConnectionInvalid
        } else if let Err(e) = check_flags(flags, allowed) {
            e
        } else if n_sge > max as usize {
            NdkError::InvalidParameter
        } else {
            // Connected after the post looked: it was refused for not being connected.
            NdkError::ConnectionInvalid
        };
        self.fail(e)
    }

    /// The common initiator post: connection, flag and SGE checks, queue space, the slot
    /// record, then the writer's post: the WQE written straight into the ring, the commit,
    /// `prod_tail`, and the doorbell unless DEFER. `admit` is the request's admission word
    /// (`admit_send` or `admit_read`). `header` gets the `op_word` for `flags`, runs once the
    /// slot is known and may still refuse; `posted` runs once the WQE is in the ring, with
    /// the commit (before the device can see the WQE). `dir` says which traffic counter the
    /// request's bytes go to; `None` is for the requests that carry no SGE (fast register,
    /// invalidate), whose `sges` is empty.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn post_initiator(
        &self,
        flags: u32,
        allowed: u32,
        kind: &PostKind,
        ctx: usize,
        sgl: ConsumerArray<'_, Sge>,
        admit: &AtomicU64,
        header: impl FnOnce(u64) -> NdkResult<SqHeader>,
        posted: impl FnOnce(),
        dir: Option<Direction>,
    ) -> NdkResult<()> {
        // Two tests for "not connected", "unknown or disallowed flag", INLINE and "too many
        // SGEs"; the cold path works out which.
        let refused = flags & !(allowed & !NDK_OP_FLAG_INLINE) != 0;
        // The admission word bounds the SGE count by the QP's limit: the consumer's array
        // becomes a slice only below it.
        let sges = if refused {
            None
        } else {
            sgl.fewer_than(admit.load(Ordering::Acquire))
        };
        let Some(sges) = sges else {
            return self.refuse(admit, allowed, flags, sgl.len());
        };
        let total = match dir {
            // Fast register and invalidate: no SGE, so nothing to check or count.
            None => 0,
            Some(_) => match self.checked_length(sges) {
                Some(total) => total,
                None => return self.fail(NdkError::InvalidParameter),
            },
        };
        let Some(index) = self.sq.next() else {
            return self.fail(NdkError::InsufficientResources);
        };
        // Counted while the total is at hand (a later refusal takes it back, out of line).
        self.traffic.posted(dir, total);
        // Recorded first (a refused header leaves a record nobody reads: the slot is not
        // committed), so the record's values are dead before the header's are loaded.
        let slot = self
            .sq
            .take(index, ctx, SlotMeta::from_flags(kind.op, flags));
        let h = match header(kind.op_word(flags)) {
            Ok(h) => h,
            Err(e) => return self.withdraw(dir, sges, e),
        };
        if !slot.write_send(wr_id(tag::SQ, index), &h, sges) {
            return self.withdraw(dir, sges, NdkError::InvalidParameter);
        }
        // Committed before the device can see the WQE (`hand_over`), so a CQE for it finds
        // the slot taken.
        self.sq.commit(index);
        posted();
        slot.hand_over(flags & NDK_OP_FLAG_DEFER != 0);
        Ok(())
    }

    /// A request counted by [`Self::post_initiator`] was refused after all.
    #[cold]
    #[inline(never)]
    fn withdraw(&self, dir: Option<Direction>, sges: &[Sge], e: NdkError) -> NdkResult<()> {
        self.traffic.withdrawn(dir, total_length(sges));
        self.fail(e)
    }

    /// NdkSend, or NdkSendAndInvalidate with `invalidate` (sender Type is Send either way).
    ///
    /// # Errors
    /// STATUS_CONNECTION_INVALID, STATUS_INVALID_PARAMETER (flags, SGE count above the QP's
    /// MaxInitiatorRequestSge, total above MaxTransferLength), STATUS_NOT_SUPPORTED (INLINE),
    /// STATUS_INSUFFICIENT_RESOURCES (queue full).
    #[inline(always)]
    pub fn send(
        &self,
        ctx: usize,
        sges: ConsumerArray<'_, Sge>,
        flags: u32,
        invalidate: Option<u32>,
    ) -> NdkResult<()> {
        let (kind, ex, dir) = match invalidate {
            Some(k) => (&SEND_INV, k, Direction::SendInvalidate),
            None => (&SEND, 0, Direction::Send),
        };
        self.post_initiator(
            flags,
            SEND_FLAGS,
            kind,
            ctx,
            sges,
            &self.admit_send,
            |op_word| {
                Ok(SqHeader {
                    op_word,
                    ex,
                    body: [0; 6],
                })
            },
            || {},
            Some(dir),
        )
    }

    /// NdkRead (`read`) or NdkWrite.
    ///
    /// # Errors
    /// As [`Self::send`]; a read's SGE count is bounded by MaxReadRequestSge too.
    #[inline(always)]
    pub fn rdma(
        &self,
        read: bool,
        ctx: usize,
        sges: ConsumerArray<'_, Sge>,
        remote_addr: u64,
        rkey: u32,
        flags: u32,
    ) -> NdkResult<()> {
        let (allowed, admit, kind) = if read {
            (READ_FLAGS, &self.admit_read, &READ)
        } else {
            (WRITE_FLAGS, &self.admit_send, &WRITE)
        };
        self.post_initiator(
            flags,
            allowed,
            kind,
            ctx,
            sges,
            admit,
            |op_word| {
                Ok(SqHeader {
                    op_word,
                    ex: 0,
                    body: SqHeader::rdma_body(remote_addr, rkey),
                })
            },
            || {},
            Some(if read {
                Direction::Read
            } else {
                Direction::Write
            }),
        )
    }

    /// NdkFastRegister (§5.7).
    ///
    /// # Errors
    /// STATUS_CONNECTION_INVALID; STATUS_ACCESS_VIOLATION for remote access on an MR
    /// initialized without RemoteAccess; STATUS_INVALID_PARAMETER for flags, an MR that is not
    /// an initialized FRMR of this PD, 0 pages or more than its capacity, unaligned pages,
    /// FBO ≥ PAGE_SIZE, Length above pages·PAGE_SIZE − FBO or 4 GiB, a BaseVirtualAddress not
    /// ≡ FBO (mod PAGE_SIZE), or 0 (zero-based VAs are not supported).
    #[allow(clippy::too_many_arguments)]
    pub fn fast_register(
        &self,
        ctx: usize,
        mr: &ObjRef<Mr>,
        pages: ConsumerArray<'_, NDK_LOGICAL_ADDRESS>,
        fbo: u32,
        length: usize,
        base_va: u64,
        flags: u32,
    ) -> NdkResult<()> {
        let ticket = core::cell::Cell::new(None);
        self.post_initiator(
            flags,
            FAST_REGISTER_FLAGS,
            &FAST_REGISTER,
            ctx,
            ConsumerArray::empty(),
            &self.admit_send,
            |op_word| {
                // ALLOW_REMOTE_WRITE (0x30) contains ALLOW_LOCAL_WRITE (0x10): only 0x20 and
                // ALLOW_REMOTE_READ ask for remote access.
                let remote = flags & (NDK_OP_FLAG_ALLOW_REMOTE_READ | 0x20) != 0;
                // 0x20 alone is not an NDK flag: remote write includes local write (0x30).
                if flags & 0x20 != 0 && flags & NDK_OP_FLAG_ALLOW_LOCAL_WRITE == 0 {
                    return Err(NdkError::InvalidParameter);
                }
                // The page array becomes a slice only within the MR's capacity.
                let (t, pages) = mr.check_fast_register(&self.pd, pages, remote)?;
                // CAST: at most the MR's capacity, a u32.
                let count = pages.len() as u32;
                let page = PAGE_SIZE as u64;
                if pages.iter().any(|&a| (a as u64) & (page - 1) != 0) {
                    return Err(NdkError::InvalidParameter);
                }
                let fbo64 = u64::from(fbo);
                let span = u64::from(count) * page;
                let length64 = length as u64;
                if fbo64 >= page || length64 > span - fbo64 || length64 > u64::from(u32::MAX) {
                    return Err(NdkError::InvalidParameter);
                }
                if base_va == 0 || base_va & (page - 1) != fbo64 {
                    return Err(NdkError::InvalidParameter);
                }
                base_va
                    .checked_add(length64)
                    .ok_or(NdkError::InvalidParameter)?;
                // LOCAL_WRITE only when asked for (ALLOW_LOCAL_WRITE, contained in
                // ALLOW_REMOTE_WRITE, or RDMA_READ_SINK): the device writes receives and READ
                // results only there (pvrdma.md §14; `ndk/mr.rs`).
                let mut acc = AccessFlags::empty();
                if flags & (NDK_OP_FLAG_ALLOW_LOCAL_WRITE | NDK_OP_FLAG_RDMA_READ_SINK) != 0 {
                    acc |= AccessFlags::LOCAL_WRITE;
                }
                if flags & NDK_OP_FLAG_ALLOW_REMOTE_READ != 0 {
                    acc |= AccessFlags::REMOTE_READ;
                }
                if flags & NDK_OP_FLAG_ALLOW_REMOTE_WRITE == NDK_OP_FLAG_ALLOW_REMOTE_WRITE {
                    acc |= AccessFlags::REMOTE_WRITE;
                }
                // The slot is ours: the page list may be written now.
                let pl = self
                    .pd
                    .adapter()
                    .hw()
                    // CAST: a logical address is a 64-bit bus address.
                    .fast_reg_pages(t.handle, pages.iter().map(|&p| p as u64))
                    .map_err(NdkError::from)?;
                ticket.set(Some(t));
                Ok(SqHeader {
                    op_word,
                    ex: 0,
                    body: SqHeader::fast_reg_body(
                        base_va,
                        pl,
                        count,
                        length64 as u32,
                        acc,
                        t.new_key,
                    ),
                })
            },
            || {
                if let Some(t) = ticket.get() {
                    mr.commit_key(t.new_key);
                    self.pd
                        .adapter()
                        .device()
                        .forget_remote_invalidate(t.new_key);
                }
            },
            None,
        )
    }

    /// NdkInvalidate of a fast-registered MR (MWs do not exist, §5.7).
    ///
    /// # Errors
    /// STATUS_CONNECTION_INVALID; STATUS_INVALID_PARAMETER for flags or a target that is not
    /// a fast-register MR of this PD.
    pub fn invalidate(&self, ctx: usize, mr: &ObjRef<Mr>, flags: u32) -> NdkResult<()> {
        self.post_initiator(
            flags,
            INVALIDATE_FLAGS,
            &INVALIDATE,
            ctx,
            ConsumerArray::empty(),
            &self.admit_send,
            |op_word| {
                let key = mr.invalidate_key(&self.pd)?;
                // §5.4: a token the peer invalidated (SendAndInvalidate) cannot be
                // invalidated again.
                if self.pd.adapter().device().remotely_invalidated(key) {
                    return Err(NdkError::InvalidDeviceRequest);
                }
                Ok(SqHeader {
                    op_word,
                    ex: key,
                    body: [0; 6],
                })
            },
            || {},
            None,
        )
    }

    /// An initiator request whose target is invalid (NdkInvalidate of a non-MR header):
    /// fails like any other inline failure, deferred WQEs first.
    pub fn fail_initiator(&self, e: NdkError) -> NdkResult<()> {
        self.ring_deferred();
        if !self.connected.load(Ordering::Acquire) {
            return Err(NdkError::ConnectionInvalid);
        }
        Err(e)
    }

    /// NdkBind: memory windows are not supported (pvrdma.md §1).
    pub fn bind(&self) -> NdkResult<()> {
        self.ring_deferred();
        Err(NdkError::NotSupported)
    }

    /// NdkReceive: allowed before the connection exists (receives are pre-posted).
    ///
    /// # Errors
    /// STATUS_INVALID_DEVICE_REQUEST on a QP with an SRQ; STATUS_INVALID_PARAMETER for an SGE
    /// count above the QP's MaxReceiveRequestSge or a total above MaxTransferLength;
    /// STATUS_INSUFFICIENT_RESOURCES when the queue is full.
    #[inline(always)]
    pub fn receive(&self, ctx: usize, sgl: ConsumerArray<'_, Sge>) -> NdkResult<()> {
        let Some(rq) = &self.rq else {
            return Err(NdkError::InvalidDeviceRequest);
        };
        // The count first: no SGE is read before it passed the QP's limit.
        let Some(sges) = sgl.within(self.max_recv_sge as usize) else {
            return Err(NdkError::InvalidParameter);
        };
        let total = match sges {
            [] => 0,
            [one] => u64::from(one.length),
            many => total_length(many),
        };
        if total > u64::from(self.max_transfer) {
            return Err(NdkError::InvalidParameter);
        }
        let Some(index) = rq.next() else {
            return Err(NdkError::InsufficientResources);
        };
        let slot = rq.take(index, ctx, SlotMeta::new(NdkOperationTypeReceive, true));
        // The most the receive's CQE may report (checked at completion). CAST: at most
        // MaxTransferLength, a u32.
        slot.record().set_posted_len(total as u32);
        if !slot.write_recv(wr_id(tag::RQ, index), sges) {
            return Err(NdkError::InvalidParameter);
        }
        rq.commit(index);
        slot.hand_over(false);
        Ok(())
    }

    /// NdkFlush: MODIFY_QP → ERR; the device completes every outstanding request with
    /// WR_FLUSH_ERR, reported as STATUS_CANCELLED (§5.6, M32). Deferred WQEs are indicated
    /// first so they are flushed too.
    pub fn flush(&self) {
        self.ring_deferred();
        self.mark_used();
        self.pd.adapter().hw().flush_qp(self.handle);
    }

    /// The receive queue's bookkeeping (none with an SRQ), for the poll's fast path.
    #[inline(always)]
    pub(crate) fn recv_book(&self) -> Option<&OrderedQueue<RecvWriter<SlotCell>>> {
        self.rq.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pvrdma::wqe::WrOpcode as RefOpcode;

    /// The post tables against the WQE encoder's own opcode and flag values, and the slot
    /// record's signalling against SILENT_SUCCESS.
    #[test]
    fn post_tables_match_the_wqe_encoding() {
        let kinds = [
            (&READ, RefOpcode::RdmaRead, NdkOperationTypeRead),
            (&WRITE, RefOpcode::RdmaWrite, NdkOperationTypeWrite),
            (&SEND, RefOpcode::Send, NdkOperationTypeSend),
            (&SEND_INV, RefOpcode::SendWithInv, NdkOperationTypeSend),
            (
                &FAST_REGISTER,
                RefOpcode::FastRegMr,
                NdkOperationTypeFastRegister,
            ),
            (&INVALIDATE, RefOpcode::LocalInv, NdkOperationTypeInvalidate),
        ];
        for (kind, opcode, op) in kinds {
            assert_eq!(kind.op, op);
            for f in 0..16u32 {
                let flags = f | NDK_OP_FLAG_DEFER;
                let mut want = SendFlags::empty();
                if flags & NDK_OP_FLAG_SILENT_SUCCESS == 0 {
                    want |= SendFlags::SIGNALED;
                }
                if flags & NDK_OP_FLAG_READ_FENCE != 0 {
                    want |= SendFlags::FENCE;
                }
                if flags & NDK_OP_FLAG_SEND_AND_SOLICIT_EVENT != 0 {
                    want |= SendFlags::SOLICITED;
                }
                let w = kind.op_word(flags);
                assert_eq!(w as u32, opcode as u32, "{op:?} {flags:#x}");
                assert_eq!((w >> 32) as u32, want.bits(), "{op:?} {flags:#x}");
                let meta = SlotMeta::from_flags(op, flags);
                let signaled = flags & NDK_OP_FLAG_SILENT_SUCCESS == 0;
                assert_eq!((meta.op(), meta.signaled()), (op, signaled));
                let want = SlotMeta::new(op, signaled);
                assert_eq!((want.op(), want.signaled()), (op, signaled));
            }
        }
    }
}
