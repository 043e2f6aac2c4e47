//! Completion bookkeeping and result filling (ndkpi.md §3.2–3.4, §5.3, Project decision (c);
//! pvrdma.md §11, §14, pitfall 10).
//!
//! Error CQEs carry only `wr_id`, `qp` and `status`, so each queue keeps a record per slot:
//! the consumer's RequestContext, the NDK operation type and whether the request was
//! signalled. `wr_id` = `tag << 32 | index` with the queue's free-running index. Send and
//! receive queues retire in posting order (pvrdma.md §14 "Ordering"): a CQE for index `k`
//! also retires every earlier outstanding slot, which must be unsignalled successes. A CQE
//! for `k` while an earlier signalled slot is outstanding breaks that order: it is corrupt
//! (counted as a bad CQE, like one naming no outstanding slot) and retires nothing, so the
//! earlier request still completes when its own CQE comes.
//!
//! One NDK_RESULT is produced per successful signalled request and per failed request;
//! an inline failure never reaches a queue, and a successful SILENT_SUCCESS request retires
//! silently.
#![deny(unsafe_code)]

use core::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use super::error::{NdkError, NdkResult};
use crate::ndkpi::*;
use crate::pvrdma::cqe::wc_status as wc;
use crate::pvrdma::wq::{Records, SendWriter, WqKind, WqWriter};

/// Completion status of a request from its WC status (Project decision (c) and §4.5).
///
/// - REM_ACCESS_ERR: the requester sees it both for a bad or invalidated rkey and for a
///   range outside the remote MR (pvrdma.md §14, NAK 0x62), so the two cannot be told apart.
///   The operation decides: an RDMA Read reports STATUS_REMOTE_RESOURCES, the status NdkRead
///   defines for reading past the remote region (so a read through an invalidated token
///   also reports it); Write and Send report STATUS_ACCESS_VIOLATION.
/// - RNR_RETRY_EXC_ERR, RETRY_EXC_ERR, RESP_TIMEOUT_ERR → STATUS_IO_TIMEOUT (the peer did not
///   answer in time).
/// - LOC_LEN_ERR → STATUS_BUFFER_OVERFLOW on a receive (buffer smaller than the message);
///   STATUS_INVALID_BUFFER_SIZE on an initiator request (message above the port limit).
/// - WR_FLUSH_ERR → STATUS_CANCELLED (NdkFlush, §5.6).
/// - LOC_PROT_ERR, LOC_ACCESS_ERR, MW_BIND_ERR → STATUS_ACCESS_VIOLATION (a local token or
///   range is invalid).
/// - REM_INV_REQ_ERR, REM_OP_ERR, REM_INV_RD_REQ_ERR, REM_ABORT_ERR → STATUS_REMOTE_RESOURCES
///   (ND_REMOTE_ERROR: the peer failed the request, e.g. its receive buffer was too small;
///   the QP is always created with remote read/write access, so the "QP lacks REMOTE_WRITE"
///   cause of REM_INV_REQ_ERR cannot arise from an NDK consumer).
/// - LOC_QP_OP_ERR (fast-register / invalidate rule broken at execution, a malformed WQE)
///   → STATUS_INVALID_DEVICE_REQUEST.
/// - Everything else (EEC errors, BAD_RESP, FATAL, GENERAL, unknown) → STATUS_INTERNAL_ERROR.
pub fn wc_status_to_ntstatus(status: u32, op: NDK_OPERATION_TYPE) -> NTSTATUS {
    let receive = op == NdkOperationTypeReceive || op == NdkOperationTypeReceiveAndInvalidate;
    match status {
        wc::SUCCESS => STATUS_SUCCESS,
        wc::WR_FLUSH_ERR => STATUS_CANCELLED,
        wc::REM_ACCESS_ERR if op == NdkOperationTypeRead => STATUS_REMOTE_RESOURCES,
        wc::REM_ACCESS_ERR => STATUS_ACCESS_VIOLATION,
        wc::RNR_RETRY_EXC_ERR | wc::RETRY_EXC_ERR | wc::RESP_TIMEOUT_ERR => STATUS_IO_TIMEOUT,
        wc::LOC_LEN_ERR if receive => STATUS_BUFFER_OVERFLOW,
        wc::LOC_LEN_ERR => STATUS_INVALID_BUFFER_SIZE,
        wc::LOC_PROT_ERR | wc::LOC_ACCESS_ERR | wc::MW_BIND_ERR => STATUS_ACCESS_VIOLATION,
        wc::REM_INV_REQ_ERR | wc::REM_OP_ERR | wc::REM_INV_RD_REQ_ERR | wc::REM_ABORT_ERR => {
            STATUS_REMOTE_RESOURCES
        }
        wc::LOC_QP_OP_ERR => STATUS_INVALID_DEVICE_REQUEST,
        _ => STATUS_INTERNAL_ERROR,
    }
}

/// What a queue remembers about a posted request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotRecord {
    /// The consumer's RequestContext.
    pub request_context: usize,
    /// Operation type reported in NDK_RESULT_EX.Type.
    pub op: NDK_OPERATION_TYPE,
    /// False for SILENT_SUCCESS requests.
    pub signaled: bool,
    /// A receive's total posted length: the most its CQE may report. Read only by the
    /// general path's retirement ([`OrderedQueue::retire`], the SRQ's); 0 elsewhere.
    pub posted_len: u32,
}

/// What a validated CQE says about the request it completes (pvrdma.md §11: in an error CQE
/// only the status is meaningful).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    /// `enum pvrdma_wc_status` value.
    pub status: u32,
    /// `byte_len` (receives).
    pub byte_len: u32,
    /// The key a SEND_WITH_INV invalidated (`WITH_INVALIDATE`, M28).
    pub invalidated_rkey: Option<u32>,
}

/// Builds the result of a retired request; `None` for a silent success.
///
/// Type: the record's operation, except a receive whose CQE carries an invalidated key,
/// which is ReceiveAndInvalidate with the key in TypeSpecificCompletionOutput.
/// ProviderErrorCode: the WC status on failure, 0 on success (NDKPI 2.1).
/// BytesTransferred: the CQE's `byte_len` for receives, 0 otherwise (undefined by NDK).
#[inline(always)]
pub fn make_result(rec: &SlotRecord, cqe: &Completion, qp_context: usize) -> Option<NDK_RESULT_EX> {
    let ok = cqe.status == wc::SUCCESS;
    if ok && !rec.signaled {
        return None;
    }
    let mut op = rec.op;
    let mut type_specific = 0usize;
    if let (true, true, Some(key)) = (op == NdkOperationTypeReceive, ok, cqe.invalidated_rkey) {
        op = NdkOperationTypeReceiveAndInvalidate;
        type_specific = key as usize;
    }
    Some(NDK_RESULT_EX {
        Status: wc_status_to_ntstatus(cqe.status, op),
        BytesTransferred: if op == NdkOperationTypeReceive
            || op == NdkOperationTypeReceiveAndInvalidate
        {
            cqe.byte_len
        } else {
            0
        },
        // CAST: the contexts were PVOIDs stored as integers.
        QPContext: qp_context as PVOID,
        RequestContext: rec.request_context as PVOID,
        Type: op,
        ProviderErrorCode: cqe.status,
        TypeSpecificCompletionOutput: type_specific,
    })
}

/// The NDK_RESULT view of a result.
#[inline(always)]
pub fn to_result(r: &NDK_RESULT_EX) -> NDK_RESULT {
    NDK_RESULT {
        Status: r.Status,
        BytesTransferred: r.BytesTransferred,
        QPContext: r.QPContext,
        RequestContext: r.RequestContext,
    }
}

/// Queue tags in `wr_id` bits 63..32.
pub mod tag {
    /// QP send queue: 0, so a send `wr_id` is its index and the poll's window check needs
    /// no tag constant (a `wr_id` with a non-zero upper half still fails it).
    pub const SQ: u32 = 0;
    /// QP receive queue.
    pub const RQ: u32 = 2;
    /// Shared receive queue.
    pub const SRQ: u32 = 3;
}

/// `wr_id` for slot `index` of a queue with tag `tag`.
#[inline(always)]
pub const fn wr_id(tag: u32, index: u32) -> u64 {
    ((tag as u64) << 32) | index as u64
}

/// Splits a device-written `wr_id` into (tag, index).
#[inline(always)]
pub const fn split_wr_id(wr_id: u64) -> (u32, u32) {
    ((wr_id >> 32) as u32, wr_id as u32)
}

/// A slot record's operation type and signalling, as the one word a post stores: the
/// operation type (≤ 0x8001) in bits 31..16, the request's NDK_OP_FLAG_* bits as posted in
/// bits 15..0 (every defined flag is below bit 10; only SILENT_SUCCESS, bit 0, is read
/// back). A post whose flags passed its flag check so adds a constant to the flags it
/// already holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotMeta(u32);

impl SlotMeta {
    /// The word for a request of type `op`, signalled unless SILENT_SUCCESS.
    pub const fn new(op: NDK_OPERATION_TYPE, signaled: bool) -> SlotMeta {
        SlotMeta::from_flags(
            op,
            if signaled {
                0
            } else {
                NDK_OP_FLAG_SILENT_SUCCESS
            },
        )
    }

    /// The word for a request of type `op` posted with NDK_OP_FLAG_* `flags` (signalled
    /// unless SILENT_SUCCESS; bits above 15 are dropped, the others ignored).
    #[inline(always)]
    pub const fn from_flags(op: NDK_OPERATION_TYPE, flags: u32) -> SlotMeta {
        // CAST: operation types are small non-negative values.
        SlotMeta((op.0 as u32) << 16 | flags & 0xFFFF)
    }

    /// The operation type.
    #[inline(always)]
    pub const fn op(&self) -> NDK_OPERATION_TYPE {
        // CAST: the 16 bits `from_flags` took from an NDK_OPERATION_TYPE.
        NDK_OPERATION_TYPE((self.0 >> 16) as i32)
    }

    /// False for a SILENT_SUCCESS request.
    #[inline(always)]
    pub const fn signaled(&self) -> bool {
        self.0 & NDK_OP_FLAG_SILENT_SUCCESS == 0
    }
}

/// What a queue records per slot ([`SlotRecord`] as two words): the record the writer
/// keeps beside each WQE ([`WqWriter::with_records`]).
#[derive(Debug, Default)]
pub struct SlotCell {
    context: AtomicUsize,
    /// A [`SlotMeta`].
    meta: AtomicU32,
    /// A receive's total length (in the record's padding; a send leaves it unwritten).
    posted_len: AtomicU32,
}

impl SlotCell {
    /// Stores the record of a request being posted.
    #[inline(always)]
    pub(super) fn set(&self, request_context: usize, meta: SlotMeta) {
        self.context.store(request_context, Ordering::Relaxed);
        self.meta.store(meta.0, Ordering::Relaxed);
    }

    /// Stores a receive's total length, with [`Self::set`], before the post commits.
    #[inline(always)]
    pub(super) fn set_posted_len(&self, len: u32) {
        self.posted_len.store(len, Ordering::Relaxed);
    }

    /// The record [`Self::set`] stored, without the posted length (the fast path retires
    /// only initiator requests, which report none).
    #[inline(always)]
    fn get(&self) -> SlotRecord {
        let meta = SlotMeta(self.meta.load(Ordering::Relaxed));
        SlotRecord {
            request_context: self.context.load(Ordering::Relaxed),
            op: meta.op(),
            signaled: meta.signaled(),
            posted_len: 0,
        }
    }

    /// Whether the request recorded here is signalled.
    #[inline(always)]
    fn signaled(&self) -> bool {
        self.meta().signaled()
    }

    /// The request's RequestContext.
    #[inline(always)]
    pub(super) fn request_context(&self) -> usize {
        self.context.load(Ordering::Relaxed)
    }

    /// The request's operation type and signalling.
    #[inline(always)]
    pub(super) fn meta(&self) -> SlotMeta {
        SlotMeta(self.meta.load(Ordering::Relaxed))
    }

    /// A receive's total posted length ([`Self::set_posted_len`]).
    #[inline(always)]
    pub(super) fn posted_len(&self) -> u32 {
        self.posted_len.load(Ordering::Relaxed)
    }
}

/// Where an [`OrderedQueue`] keeps its slot records: beside the WQE addresses of its ring
/// ([`WqWriter::with_records`]), so a post finds its record and its WQE with one index
/// computation.
pub trait SlotTable {
    /// The slot of free-running index `index` (modulo the table's size).
    fn slot(&self, index: u32) -> &SlotCell;
    /// The table's size (a power of two).
    fn size(&self) -> u32;
}

impl<K> SlotTable for WqWriter<K, SlotCell> {
    #[inline(always)]
    fn slot(&self, index: u32) -> &SlotCell {
        self.record(index)
    }
    fn size(&self) -> u32 {
        self.entries()
    }
}

/// A run of retirements by a queue's retirer (the poll's fast path): the slot records, the
/// `wr_id` the queue's next CQE must carry and how many requests were outstanding, read
/// once ([`OrderedQueue::window`]); [`RetireWindow::close`] publishes what the run retired.
pub struct RetireWindow<'a> {
    records: Records<'a, SlotCell>,
    /// The queue's `retired`, which [`Self::close`] publishes.
    retired: &'a AtomicU32,
    /// `tag << 32 | retired`.
    next: u64,
    /// `posted − retired` when the window was taken: the most the run may retire.
    outstanding: u32,
}

impl<'a> RetireWindow<'a> {
    /// How many requests the run may retire.
    #[inline(always)]
    pub fn outstanding(&self) -> usize {
        self.outstanding as usize
    }

    /// The record of the oldest outstanding request if `wr_id` names it exactly (tag and
    /// index); the caller retires it with [`Self::advance`], and takes no more than
    /// [`Self::outstanding`] in all. A run whose indices pass 2^32 fails here (the tag half
    /// changes), and the caller falls back to [`OrderedQueue::retire`], which works modulo
    /// 2^32.
    #[inline(always)]
    pub fn oldest(&self, wr_id: u64) -> Option<&'a SlotCell> {
        // CAST: the low half is the index.
        (wr_id == self.next).then(|| self.records.get(self.next as u32))
    }

    /// The oldest outstanding request is retired.
    #[inline(always)]
    pub fn advance(&mut self) {
        self.next = self.next.wrapping_add(1);
    }

    /// Publishes the run's retirements (the poster may reuse their slots from now on).
    #[inline(always)]
    pub fn close(&self) {
        // CAST: the low half is the index.
        self.retired.store(self.next as u32, Ordering::Release);
    }
}

/// An in-order work queue's bookkeeping (QP SQ or RQ): one poster (the consumer serializes
/// posts per queue, §5.3) and one retirer (the queue's CQ poller; polls are serialized per CQ,
/// §5.4), so atomics suffice and the hot path takes no lock. It owns its slot table, for a
/// QP queue the queue's writer (a [`SendWriter`] by default, a receive writer for an RQ).
///
/// The retire side is here; the post side (`next`, `take`, `commit`) is in `super::qp`,
/// beside the posts that use it, so a post reads in the QP and the ring writer alone. The
/// fields are visible to it for that reason only. What the two sides rely on: the poster
/// stores a slot's record, then (`commit`, Release) `posted`, before the WQE reaches the
/// device (`prod_tail`), so a retirer that sees a CQE sees the record; the retirer reads
/// records, then publishes `retired` (Release), before the poster (Acquire) reuses a slot.
///
/// `#[repr(C)]`, the counts first: both sides read them and then the start of `slots` (a
/// ring writer puts what a post and a retirement read there), so that a QP laid out for it
/// (`super::qp::Qp`) keeps them in one run of bytes.
#[repr(C)]
pub struct OrderedQueue<T = SendWriter<SlotCell>> {
    pub(super) posted: AtomicU32,
    /// The poster's bound on `posted`: `retired + depth` as of the poster's last look at
    /// `retired` (never above the true bound, since `retired` only grows). A post compares
    /// against it and reads `retired` only when it is reached.
    pub(super) limit: AtomicU32,
    pub(super) retired: AtomicU32,
    pub(super) depth: u32,
    pub(super) slots: T,
}

impl<K: WqKind> OrderedQueue<WqWriter<K, SlotCell>> {
    /// A queue accepting `depth` outstanding requests posted through `writer`, whose slots
    /// carry the slot records (allocates: creation time only).
    ///
    /// # Errors
    /// STATUS_INVALID_PARAMETER for a depth above the ring's size;
    /// STATUS_INSUFFICIENT_RESOURCES.
    pub fn on_writer(depth: u32, writer: WqWriter<K>) -> NdkResult<Self> {
        let writer = writer
            .with_records(SlotCell::default)
            .map_err(|_| NdkError::InsufficientResources)?;
        Self::new(depth, writer)
    }
}

impl<T: SlotTable> OrderedQueue<T> {
    /// A queue accepting `depth` outstanding requests, recorded in `slots`.
    ///
    /// # Errors
    /// STATUS_INVALID_PARAMETER for a depth above the table's size.
    pub fn new(depth: u32, slots: T) -> NdkResult<Self> {
        if depth > slots.size() {
            return Err(NdkError::InvalidParameter);
        }
        Ok(OrderedQueue {
            slots,
            depth,
            posted: AtomicU32::new(0),
            limit: AtomicU32::new(depth),
            retired: AtomicU32::new(0),
        })
    }

    /// The consumer's depth.
    pub fn depth(&self) -> u32 {
        self.depth
    }

    /// Requests posted and not yet retired.
    pub fn outstanding(&self) -> u32 {
        self.posted
            .load(Ordering::Relaxed)
            .wrapping_sub(self.retired.load(Ordering::Acquire))
    }

    /// Retires outstanding index `index` (and every earlier one, each an unsignalled
    /// request) and returns its record with the posted length; `None` if `index` is not
    /// outstanding or an earlier signalled request is (a device-written value that fails
    /// validation: CQEs come in posting order). The scan is bounded by the depth.
    #[inline(always)]
    pub fn retire(&self, index: u32) -> Option<SlotRecord> {
        let retired = self.retired.load(Ordering::Relaxed);
        let posted = self.posted.load(Ordering::Acquire);
        if index.wrapping_sub(retired) >= posted.wrapping_sub(retired) {
            return None;
        }
        if self.signaled_before(retired, index) {
            return None;
        }
        let slot = self.slots.slot(index);
        let mut rec = slot.get();
        rec.posted_len = slot.posted_len.load(Ordering::Relaxed);
        self.retired.store(index.wrapping_add(1), Ordering::Release);
        Some(rec)
    }

    /// Whether a signalled request is outstanding in `[from, to)`; out of line, as the
    /// usual CQE names the oldest outstanding slot and scans nothing.
    #[inline(never)]
    fn signaled_before(&self, from: u32, to: u32) -> bool {
        let mut i = from;
        while i != to {
            if self.slots.slot(i).signaled() {
                return true;
            }
            i = i.wrapping_add(1);
        }
        false
    }
}

/// The poll's fast path, on a QP queue (whose slot records are beside its WQEs).
impl<K> OrderedQueue<WqWriter<K, SlotCell>> {
    /// Retires the oldest outstanding request if `wr_id` names it exactly (tag and index)
    /// and `take` accepts its record, returning what `take` read of it (before the slot is
    /// published for reuse); `None` changes nothing, and the caller falls back to
    /// [`Self::retire`].
    #[inline(always)]
    pub fn retire_oldest<T>(
        &self,
        tag: u32,
        wr_id: u64,
        take: impl FnOnce(&SlotCell) -> Option<T>,
    ) -> Option<T> {
        let retired = self.retired.load(Ordering::Relaxed);
        if wr_id != u64::from(tag) << 32 | u64::from(retired) {
            return None;
        }
        if retired == self.posted.load(Ordering::Acquire) {
            return None;
        }
        let taken = take(self.slots.record(retired))?;
        self.retired
            .store(retired.wrapping_add(1), Ordering::Release);
        Some(taken)
    }

    /// Starts a run of retirements for `wr_id`s tagged `tag` ([`RetireWindow`]): the
    /// retired and committed counts as they stand (a post committing meanwhile is simply not
    /// seen by this run).
    #[inline(always)]
    pub fn window(&self, tag: u32) -> RetireWindow<'_> {
        let retired = self.retired.load(Ordering::Relaxed);
        let posted = self.posted.load(Ordering::Acquire);
        RetireWindow {
            records: self.slots.records(),
            retired: &self.retired,
            next: u64::from(tag) << 32 | u64::from(retired),
            outstanding: posted.wrapping_sub(retired),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::boxed::Box;

    /// A plain slot table: the queue's logic without a ring.
    struct Array(Box<[SlotCell]>);

    impl SlotTable for Array {
        fn slot(&self, index: u32) -> &SlotCell {
            &self.0[index as usize & (self.0.len() - 1)]
        }
        fn size(&self) -> u32 {
            self.0.len() as u32
        }
    }

    fn queue(depth: u32, ring: u32) -> OrderedQueue<Array> {
        let slots = (0..ring).map(|_| SlotCell::default()).collect();
        OrderedQueue::new(depth, Array(slots)).expect("queue")
    }

    /// A post's bookkeeping: the next index with `rec` recorded in its slot.
    fn reserve(q: &OrderedQueue<Array>, rec: &SlotRecord) -> NdkResult<u32> {
        let index = q.next().ok_or(NdkError::InsufficientResources)?;
        q.slots
            .slot(index)
            .set(rec.request_context, SlotMeta::new(rec.op, rec.signaled));
        Ok(index)
    }

    fn cqe(_wr_id: u64, status: u32) -> Completion {
        Completion {
            status,
            byte_len: 77,
            invalidated_rkey: None,
        }
    }

    #[test]
    fn wc_mapping_follows_project_decision_c() {
        let read = NdkOperationTypeRead;
        let write = NdkOperationTypeWrite;
        let recv = NdkOperationTypeReceive;
        let send = NdkOperationTypeSend;
        let fast_register = NdkOperationTypeFastRegister;
        for (status, op, want) in [
            (wc::SUCCESS, send, STATUS_SUCCESS),
            (wc::REM_ACCESS_ERR, read, STATUS_REMOTE_RESOURCES),
            (wc::REM_ACCESS_ERR, write, STATUS_ACCESS_VIOLATION),
            (wc::REM_ACCESS_ERR, send, STATUS_ACCESS_VIOLATION),
            (wc::RNR_RETRY_EXC_ERR, send, STATUS_IO_TIMEOUT),
            (wc::LOC_LEN_ERR, recv, STATUS_BUFFER_OVERFLOW),
            (wc::LOC_LEN_ERR, send, STATUS_INVALID_BUFFER_SIZE),
            (wc::WR_FLUSH_ERR, recv, STATUS_CANCELLED),
            (wc::WR_FLUSH_ERR, read, STATUS_CANCELLED),
            (wc::LOC_PROT_ERR, send, STATUS_ACCESS_VIOLATION),
            (wc::REM_INV_REQ_ERR, send, STATUS_REMOTE_RESOURCES),
            (
                wc::LOC_QP_OP_ERR,
                fast_register,
                STATUS_INVALID_DEVICE_REQUEST,
            ),
            (wc::FATAL_ERR, send, STATUS_INTERNAL_ERROR),
            (99, send, STATUS_INTERNAL_ERROR),
        ] {
            assert_eq!(wc_status_to_ntstatus(status, op), want, "{status} {op:?}");
        }
    }

    #[test]
    fn silent_success_yields_no_result_but_silent_failure_does() {
        let rec = SlotRecord {
            request_context: 5,
            op: NdkOperationTypeWrite,
            signaled: false,
            posted_len: 0,
        };
        assert!(make_result(&rec, &cqe(0, wc::SUCCESS), 9).is_none());
        let r = make_result(&rec, &cqe(0, wc::WR_FLUSH_ERR), 9).expect("failure reported");
        assert_eq!(r.Status, STATUS_CANCELLED);
        assert_eq!(r.ProviderErrorCode, wc::WR_FLUSH_ERR);
        assert_eq!(r.Type, NdkOperationTypeWrite);
        assert_eq!(r.RequestContext as usize, 5);
        assert_eq!(r.QPContext as usize, 9);
        assert_eq!(r.BytesTransferred, 0);
    }

    #[test]
    fn receive_and_invalidate_reports_the_key() {
        let rec = SlotRecord {
            request_context: 1,
            op: NdkOperationTypeReceive,
            signaled: true,
            posted_len: 0,
        };
        let mut c = cqe(0, wc::SUCCESS);
        c.invalidated_rkey = Some(0x1234_5601);
        let r = make_result(&rec, &c, 0).expect("result");
        assert_eq!(r.Type, NdkOperationTypeReceiveAndInvalidate);
        assert_eq!(r.TypeSpecificCompletionOutput, 0x1234_5601);
        assert_eq!(r.BytesTransferred, 77);
        assert_eq!(r.ProviderErrorCode, 0);
        assert_eq!(r.Status, STATUS_SUCCESS);
    }

    #[test]
    fn ordered_queue_retires_in_order_and_rejects_foreign_indices() {
        let q = queue(3, 4);
        let rec = |c| SlotRecord {
            request_context: c,
            op: NdkOperationTypeSend,
            signaled: c != 2,
            posted_len: 0,
        };
        for c in 1..=3 {
            let i = reserve(&q, &rec(c)).expect("space");
            q.commit(i);
        }
        assert_eq!(q.next(), None);
        assert_eq!(reserve(&q, &rec(4)), Err(NdkError::InsufficientResources));
        assert_eq!(q.retire(7), None, "never posted");
        // Not past the signalled index 0; after it, a CQE for index 2 retires the silent
        // index 1 as well.
        assert_eq!(q.retire(2), None, "index 0 is signalled and outstanding");
        assert_eq!(q.retire(0), Some(rec(1)));
        assert_eq!(q.retire(2), Some(rec(3)));
        assert_eq!(q.outstanding(), 0);
        assert_eq!(q.retire(0), None, "already retired");
        // Wraps: the ring has 4 slots.
        for c in 10..13 {
            let i = reserve(&q, &rec(c)).expect("space");
            q.commit(i);
        }
        assert_eq!(q.retire(3), Some(rec(10)));
        assert_eq!(q.retire(4), Some(rec(11)));
        assert_eq!(wr_id(tag::SQ, 4), 4, "a send wr_id is its index");
        assert_eq!(wr_id(tag::RQ, 4), 0x2_0000_0004);
        assert_eq!(split_wr_id(0x2_0000_0009), (tag::RQ, 9));
    }

    #[test]
    fn the_posting_bound_follows_retirements_and_wraps() {
        let q = queue(2, 4);
        // Free-running indices about to wrap past 2^32.
        let start = u32::MAX - 2;
        q.posted.store(start, Ordering::Relaxed);
        q.retired.store(start, Ordering::Relaxed);
        q.limit.store(start, Ordering::Relaxed); // stale: refreshed on first use
        let rec = SlotRecord {
            request_context: 7,
            op: NdkOperationTypeWrite,
            signaled: false,
            posted_len: 0,
        };
        let mut expect = start;
        for round in 0..4 {
            for _ in 0..2 {
                let i = reserve(&q, &rec).expect("space");
                assert_eq!(i, expect, "round {round}");
                q.commit(i);
                expect = expect.wrapping_add(1);
            }
            assert_eq!(q.next(), None, "depth 2 outstanding");
            assert_eq!(q.outstanding(), 2);
            // One retirement frees exactly one post.
            assert_eq!(q.retire(expect.wrapping_sub(2)), Some(rec));
            let i = reserve(&q, &rec).expect("space");
            q.commit(i);
            expect = expect.wrapping_add(1);
            assert_eq!(q.next(), None);
            assert_eq!(q.retire(expect.wrapping_sub(1)), Some(rec));
        }
        let none = queue(0, 1);
        assert_eq!(none.next(), None, "depth 0 takes nothing");
    }
}
