//! NDK_CQ over a PVRDMA CQ (ndkpi.md §5.4; pvrdma.md §9, §11–§13, M18–M19).
//!
//! Retrieval reads CQEs straight out of the ring through the CQ's port
//! ([`crate::pvrdma::port::CqPort`]), maps each to its QP (the CQ's own table of its QPs by
//! handle residue, then the device's table; O(1), lock-free, no count: `qp_table`)
//! and to the posted request through that queue's slot records ([`super::completion`]).
//! Notification is the
//! arm state machine [`ArmState`]: pure logic, driven by NdkArmCq, by device notifications
//! (CQNE) and CQ errors, and by the return of each consumer callback.

use super::adapter::Adapter;
use super::completion::{Completion, SlotRecord, make_result, split_wr_id, tag, to_result};
use super::dispatch;
use super::error::HwError;
use super::error::{NdkError, NdkResult};
use super::hw::{HwDone, pow2_ceil};
use super::object::{CreateHandoff, Lifetime, NdkObject, ObjRef};
use super::qp::Qp;
use super::qp_table::{CqQps, Graveyard, RawQp};
use crate::ndkpi::*;
use crate::os::SpinLock;
use crate::pvrdma::port::{CqPort, CqState, CqeView};

/// `wc_flags` WITH_IMM (pvrdma.md §11).
const WITH_IMM: u32 = 1 << 1;
/// `wc_flags` WITH_INVALIDATE.
const WITH_INVALIDATE: u32 = 1 << 2;

/// Effective arm type, ordered so that combining two arms is `max` (§5.4 table).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ArmType {
    /// NDK_CQ_NOTIFY_ERRORS: CQ errors only.
    Errors,
    /// NDK_CQ_NOTIFY_SOLICITED: solicited receives and failed requests.
    Solicited,
    /// NDK_CQ_NOTIFY_ANY: the next completion.
    Any,
}

impl ArmType {
    /// From NdkArmCq's `Type`. NdkArmCq returns nothing, so an unknown value cannot be
    /// refused; it is taken as ANY, which at worst gives the consumer an extra callback
    /// instead of a missing one.
    pub fn from_ndk(t: ULONG) -> ArmType {
        match t {
            NDK_CQ_NOTIFY_ERRORS => ArmType::Errors,
            NDK_CQ_NOTIFY_SOLICITED => ArmType::Solicited,
            _ => ArmType::Any,
        }
    }

    /// The effective type when `second` is armed before `self` is satisfied: ANY wins,
    /// SOLICITED beats ERRORS (§5.4).
    pub fn combine(self, second: ArmType) -> ArmType {
        core::cmp::max(self, second)
    }
}

/// Something that may satisfy an arm.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CqEvent {
    /// A completion arrived; `solicited` if it matches a SOLICITED arm (a solicited receive
    /// or any failed request). A device CQNE counts as solicited: the device was armed with
    /// the matching type (M18).
    Completion {
        /// Matches SOLICITED.
        solicited: bool,
    },
    /// The CQ failed: STATUS_BUFFER_OVERFLOW (overrun) or STATUS_INTERNAL_ERROR.
    Error(NTSTATUS),
}

/// Notification state of one CQ (§5.4): one callback per arm, only after an arm, callbacks
/// serialized (a notification due while one runs is deferred until it returns).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ArmState {
    armed: Option<ArmType>,
    in_callback: bool,
    deferred: Option<NTSTATUS>,
    error: Option<NTSTATUS>,
    error_reported: bool,
}

impl ArmState {
    /// NdkArmCq with `t`; `has_entries` says whether the CQ holds unretrieved completions
    /// after the device was armed. Returns the status of a callback to deliver now.
    ///
    /// Completions already present satisfy a SOLICITED or ANY arm at once: the provider must
    /// when one was added since the last callback and may otherwise, and it cannot tell
    /// the two apart from the device ring, so it always does.
    pub fn arm(&mut self, t: ArmType, has_entries: bool) -> Option<NTSTATUS> {
        let effective = match self.armed {
            Some(a) => a.combine(t),
            None => t,
        };
        self.armed = Some(effective);
        if let Some(e) = self.error {
            if !self.error_reported {
                self.error_reported = true;
                return self.fire(e);
            }
            return None;
        }
        if has_entries && effective != ArmType::Errors {
            return self.fire(STATUS_SUCCESS);
        }
        None
    }

    /// A completion or error; returns the status of a callback to deliver now.
    pub fn event(&mut self, ev: CqEvent) -> Option<NTSTATUS> {
        match ev {
            CqEvent::Completion { solicited } => match self.armed {
                Some(ArmType::Any) => self.fire(STATUS_SUCCESS),
                Some(ArmType::Solicited) if solicited => self.fire(STATUS_SUCCESS),
                _ => None,
            },
            CqEvent::Error(st) => {
                if self.error.is_some() {
                    return None;
                }
                self.error = Some(st);
                if self.armed.is_some() {
                    self.error_reported = true;
                    self.fire(st)
                } else {
                    None
                }
            }
        }
    }

    /// The consumer's callback returned; returns a deferred callback to deliver next.
    pub fn callback_returned(&mut self) -> Option<NTSTATUS> {
        match self.deferred.take() {
            Some(st) => Some(st),
            None => {
                self.in_callback = false;
                None
            }
        }
    }

    /// The callback could not be delivered (the CQ is closing): forget it.
    pub fn callback_dropped(&mut self) {
        self.in_callback = false;
        self.deferred = None;
    }

    /// What the device must be armed with: `Some(solicited_only)`, or `None` when only CQ
    /// errors are of interest (those arrive as async events, not CQNEs).
    pub fn device_arm(&self) -> Option<bool> {
        match self.armed {
            Some(ArmType::Any) => Some(false),
            Some(ArmType::Solicited) => Some(true),
            _ => None,
        }
    }

    /// The current arm.
    pub fn armed(&self) -> Option<ArmType> {
        self.armed
    }

    fn fire(&mut self, st: NTSTATUS) -> Option<NTSTATUS> {
        self.armed = None;
        if self.in_callback {
            // An error outranks a plain notification if both wait.
            if self.deferred.is_none() || st != STATUS_SUCCESS {
                self.deferred = Some(st);
            }
            None
        } else {
            self.in_callback = true;
            Some(st)
        }
    }
}

/// A completion queue.
pub struct Cq {
    life: Lifetime,
    adapter: ObjRef<Adapter>,
    handle: u32,
    depth: u32,
    notify: NDK_FN_CQ_NOTIFICATION_CALLBACK,
    notify_context: usize,
    affinity: Option<GROUP_AFFINITY>,
    arm: SpinLock<ArmState>,
    port: CqPort,
    /// QPs of this CQ by handle residue: the poller's lookup.
    qps: CqQps,
    /// QPs of this CQ that tore down, until the poller lets them go.
    graveyard: Graveyard,
    /// Largest `byte_len` a receive CQE may carry (MaxTransferLength).
    max_byte_len: u32,
}

impl NdkObject for Cq {
    type Ndk = NDK_CQ;
    fn lifetime(&self) -> &Lifetime {
        &self.life
    }
    fn teardown(&self) {
        // No poll runs after the close (§5.2), and every QP of this CQ has torn down (its
        // successor count was released after): the graveyard holds them all, and each
        // holds this CQ's memory through its own handles.
        self.graveyard.drain();
        self.adapter.device().unregister_cq(self.handle);
        self.adapter.hw().destroy_cq(self.handle);
    }
    fn release_antecedents(&self) {
        self.adapter.put();
    }
}

/// NdkCreateCq parameters.
pub struct CqParams {
    /// `CqDepth`.
    pub depth: u32,
    /// `CqNotification`.
    pub notify: NDK_FN_CQ_NOTIFICATION_CALLBACK,
    /// `CqNotificationContext`.
    pub notify_context: usize,
    /// `*Affinity`, if given.
    pub affinity: Option<GROUP_AFFINITY>,
}

impl Cq {
    /// NdkCreateCq: `depth` ≤ MaxCqDepth, else STATUS_INVALID_PARAMETER (§5.4). The device
    /// command may complete later; the result goes to `handoff` (inline or through
    /// CreateCompletion).
    ///
    /// # Errors
    /// Inline failures before any command was issued.
    pub fn create_async(
        adapter: &ObjRef<Adapter>,
        p: CqParams,
        handoff: alloc::sync::Arc<CreateHandoff<Cq>>,
    ) -> NdkResult<()> {
        let max = adapter.info().MaxCqDepth;
        if p.depth == 0 || p.depth > max {
            return Err(NdkError::InvalidParameter);
        }
        let entries = pow2_ceil(p.depth).ok_or(NdkError::InvalidParameter)?;
        if !adapter.lifetime().try_get() {
            return Err(NdkError::InvalidDeviceRequest);
        }
        let affinity = p.affinity;
        let a = adapter.clone();
        let done = move |r: Result<u32, HwError>| {
            let made = match r {
                Ok(handle) => Self::wrap(&a, handle, p),
                Err(e) => Err(e.into()),
            };
            if made.is_err() {
                a.put();
            }
            handoff.complete(made);
        };
        match crate::os::alloc::try_box(done) {
            Ok(b) => {
                let d: HwDone<u32> = b.map_box(|b| b as HwDone<u32>).into_inner();
                adapter.hw().create_cq_async(entries, affinity, d);
                Ok(())
            }
            Err(_) => {
                adapter.put();
                Err(NdkError::InsufficientResources)
            }
        }
    }

    fn wrap(adapter: &ObjRef<Adapter>, handle: u32, p: CqParams) -> NdkResult<ObjRef<Cq>> {
        let hw = adapter.hw();
        let port = match hw.cq_port(handle) {
            Ok(p) => p,
            Err(e) => {
                hw.destroy_cq(handle);
                return Err(e.into());
            }
        };
        let ndk = NDK_CQ {
            Header: super::object::header(adapter.version(), NdkObjectTypeCq),
            Dispatch: &dispatch::CQ_DISPATCH,
        };
        let state = Cq {
            life: Lifetime::new(),
            adapter: adapter.clone(),
            handle,
            depth: p.depth,
            notify: p.notify,
            notify_context: p.notify_context,
            affinity: p.affinity,
            arm: SpinLock::new(ArmState::default()),
            port,
            qps: CqQps::new(),
            graveyard: Graveyard::new(handle),
            max_byte_len: adapter.info().MaxTransferLength,
        };
        let cq = match ObjRef::try_new(ndk, state) {
            Ok(cq) => cq,
            Err(e) => {
                hw.destroy_cq(handle);
                return Err(e);
            }
        };
        if let Err(e) = adapter.device().register_cq(&cq) {
            drop(cq);
            hw.destroy_cq(handle);
            return Err(e);
        }
        Ok(cq)
    }

    /// Device handle.
    pub fn handle(&self) -> u32 {
        self.handle
    }

    /// The consumer's depth.
    pub fn depth(&self) -> u32 {
        self.depth
    }

    /// The notification affinity given at creation (honoured by the CQNE DPC).
    pub fn affinity(&self) -> Option<GROUP_AFFINITY> {
        self.affinity
    }

    /// The adapter.
    pub fn adapter(&self) -> &ObjRef<Adapter> {
        &self.adapter
    }

    /// A new QP completes on this CQ (after it was registered with the device).
    pub(crate) fn bind(&self, qp: &ObjRef<Qp>) {
        self.qps.bind(qp, qp.handle());
    }

    /// A QP of this CQ tore down: it leaves the CQ's table now, and stays alive until the
    /// poller has let it go (`qp_table`).
    pub(crate) fn bury(&self, qp: ObjRef<Qp>) {
        self.qps.unbind(&qp, qp.handle());
        self.graveyard.push(qp);
    }

    /// Releases the QPs that tore down since the last time. Only where the poller holds no
    /// QP reference: NdkArmCq (never concurrent with a poll, §5.4), the start of the
    /// general path (every receive, failure and flush), a lookup in the device table, the
    /// CQ's teardown.
    #[inline(always)]
    fn release_buried(&self) {
        if !self.graveyard.is_empty() {
            self.release_buried_now();
        }
    }

    #[cold]
    #[inline(never)]
    fn release_buried_now(&self) {
        self.graveyard.drain();
    }

    /// The QP with device handle `handle` at its first residue in the CQ's own table (the
    /// fast path's lookup: no call); `None` otherwise, and [`Self::find_qp`] looks further.
    ///
    /// # Safety
    /// Called by this CQ's poller (polls are serialized, §5.4); the reference is not used
    /// after the next `release_buried` (which may release it), nor after the poll.
    #[inline(always)]
    unsafe fn find_local<'a>(&self, handle: u64) -> Option<&'a Qp> {
        let p = self.qps.find_first(handle)?;
        // SAFETY: only QPs of this CQ are in its table, each alive until this poller
        // releases it from the graveyard (`qp_table`), which the caller contract excludes.
        Some(unsafe { p.as_ref() }.state())
    }

    /// The QP with device handle `handle`, if it completes on this CQ: the CQ's own table
    /// (both residues), then the device's. O(1) and lock-free either way, whatever the
    /// number of QPs.
    ///
    /// # Safety
    /// As [`Self::find_local`], and every QP reference the caller took earlier is dead.
    #[inline(always)]
    unsafe fn find_qp<'a>(&self, handle: u64) -> Option<&'a Qp> {
        match self.qps.find(handle) {
            // SAFETY: only QPs of this CQ are in its table, each alive until this poller
            // releases it from the graveyard (`qp_table`), which the caller contract
            // excludes.
            Some(p) => Some(unsafe { p.as_ref() }.state()),
            // SAFETY: caller contract.
            None => unsafe { self.find_qp_in_device(handle) },
        }
    }

    /// [`Self::find_qp`]'s second step, out of line: the device's table, which answers only
    /// for QPs completing on this CQ.
    ///
    /// # Safety
    /// As [`Self::find_qp`].
    #[cold]
    #[inline(never)]
    unsafe fn find_qp_in_device<'a>(&self, handle: u64) -> Option<&'a Qp> {
        // No QP reference is held: the moment to release the buried ones.
        self.release_buried();
        // CAST: a handle is the low half of a CQE's `qp` (see `fill`), so this is exact.
        let p: RawQp = self
            .adapter
            .device()
            .qp_table()
            .lookup(handle as u32, self.handle)?;
        // SAFETY: `lookup` answered this CQ's poller: the QP stays alive at least until
        // this poller's next `release_buried` (`qp_table`).
        Some(unsafe { p.as_ref() }.state())
    }

    /// Retrieves up to `out.len()` results (NdkGetCqResultsEx). No allocation, no lock:
    /// CQEs are read in place, never more than results still wanted (so none is lost), and
    /// `cons_head` is published once per call.
    #[inline(always)]
    pub fn get_results_ex(&self, out: &mut [NDK_RESULT_EX]) -> usize {
        self.fill(out)
    }

    /// NdkGetCqResults: the same results without Type and the other Ex fields.
    #[inline(always)]
    pub fn get_results(&self, out: &mut [NDK_RESULT]) -> usize {
        self.fill(out)
    }

    /// The poll. The fast loop handles what a data path reaps almost always: successful
    /// initiator completions of any QP of this CQ (found at its first residue in the CQ's
    /// table). It makes no call; anything else (a receive, a failure, a QP at its second
    /// residue, a CQE that does not validate) hands the rest of the poll to
    /// [`Self::fill_general`]. The first CQE is peeled off the loop, so a run of
    /// retirements is set up only for the QP it names.
    #[inline(always)]
    fn fill<R: CqResult>(&self, out: &mut [R]) -> usize {
        let port = &self.port;
        let mut head = port.head();
        let mut left = match port.ready(head) {
            CqState::Ready(n) => n as usize,
            CqState::Empty => return 0,
            CqState::Corrupt => return self.corrupt(),
        };
        if out.is_empty() {
            return 0;
        }
        let (mut wr_id, qp_raw, status) = port.load_core(head);
        // The handle is the low half of `qp` (Linux matches only its low bits; the upper
        // half is not ours to trust either way), so a dead QP's `u64::MAX` never matches.
        let mut handle = u64::from(qp_raw as u32);
        if status != 0 {
            return self.fill_general(out, 0, head, left);
        }
        // SAFETY: this is the CQ's poller (polls are serialized, §5.4), and no reference
        // outlives the poll, which releases nothing.
        let Some(mut qp) = (unsafe { self.find_local(handle) }) else {
            return self.fill_general(out, 0, head, left);
        };
        let mut book = qp.send_book();
        let mut run = book.run(tag::SQ);
        let mut n = 0;
        loop {
            // Here the CQE at `head` succeeded and names `qp`, whose run is `run`.
            // Retires the slot: only for a CQE this loop completes.
            let Some(rec) = book.retire_in(&mut run, wr_id) else {
                book.end_run(&run);
                return self.fill_general(out, n, head, left);
            };
            if rec.signaled {
                // Never None (the loop ends when `n` reaches `out.len()`); checked rather than
                // unchecked at poll1 +2.0, poll16 +1.1 instructions.
                let Some(slot) = out.get_mut(n) else {
                    break;
                };
                slot.success(qp.context(), rec.request_context, rec.op);
                n += 1;
            }
            head = port.next(head);
            left -= 1;
            if left == 0 || n == out.len() {
                break;
            }
            let (w, qp_raw, status) = port.load_core(head);
            wr_id = w;
            if status != 0 {
                book.end_run(&run);
                return self.fill_general(out, n, head, left);
            }
            let h = u64::from(qp_raw as u32);
            if h != handle {
                // Another QP of this CQ: switch to it and stay on the fast path.
                book.end_run(&run);
                // SAFETY: as for the first CQE; `qp` is not used again.
                let Some(next) = (unsafe { self.find_local(h) }) else {
                    return self.fill_general(out, n, head, left);
                };
                qp = next;
                handle = h;
                book = qp.send_book();
                run = book.run(tag::SQ);
            }
        }
        book.end_run(&run);
        port.consume(head);
        n
    }

    /// Every CQE, from `head` on (`left` of them ready, `n` results already in `out`):
    /// QP lookup, receives, failures and validation.
    #[inline(never)]
    fn fill_general<R: CqResult>(
        &self,
        out: &mut [R],
        mut n: usize,
        mut head: u32,
        mut left: usize,
    ) -> usize {
        // `fill` holds no QP reference any more: the moment to release the buried ones.
        self.release_buried();
        let port = &self.port;
        while n < out.len() && left != 0 {
            let c = port.load(head);
            head = port.next(head);
            left -= 1;
            // SAFETY: this CQ's poller; the previous iteration's `qp` is dead, and no
            // reference outlives the poll.
            // CAST: the handle is the low half of `qp` (see `fill`).
            let Some(qp) = (unsafe { self.find_qp(u64::from(c.qp as u32)) }) else {
                self.adapter.device().count_bad_cqe();
                continue;
            };
            let (t, index) = split_wr_id(c.wr_id);
            let Some(rec) = qp.retire(t, index) else {
                continue;
            };
            let Some(slot) = out.get_mut(n) else {
                break;
            };
            if c.status == 0 && rec.op != NdkOperationTypeReceive {
                if rec.signaled {
                    slot.success(qp.context(), rec.request_context, rec.op);
                    n += 1;
                }
                continue;
            }
            if self.complete_slow(qp, &rec, &c, slot) {
                n += 1;
            }
        }
        port.consume(head);
        n
    }

    /// Receives and failures: the length and the invalidated key are validated, the WC
    /// status mapped. Returns whether `slot` was filled.
    #[inline(never)]
    fn complete_slow<R: CqResult>(
        &self,
        qp: &Qp,
        rec: &SlotRecord,
        c: &CqeView,
        slot: &mut R,
    ) -> bool {
        let ok = c.status == 0;
        // A success whose length exceeds any buffer NDK can post, or whose flags claim both
        // immediate data and an invalidation, is not trusted: the request is reported failed
        // (STATUS_INTERNAL_ERROR) instead of with device garbage.
        let both = WITH_IMM | WITH_INVALIDATE;
        let sane = !ok || (c.byte_len <= self.max_byte_len && c.wc_flags & both != both);
        let done = if sane {
            Completion {
                status: c.status,
                byte_len: if ok { c.byte_len } else { 0 },
                invalidated_rkey: (ok && c.wc_flags & WITH_INVALIDATE != 0).then_some(c.ex),
            }
        } else {
            self.adapter.device().count_bad_cqe();
            Completion {
                status: super::completion::wc::GENERAL_ERR,
                byte_len: 0,
                invalidated_rkey: None,
            }
        };
        let Some(r) = make_result(rec, &done, qp.context()) else {
            return false;
        };
        if r.Type == NdkOperationTypeReceiveAndInvalidate {
            // CAST: `make_result` widened the u32 key.
            let key = r.TypeSpecificCompletionOutput as u32;
            self.adapter.device().note_remote_invalidate(key);
        }
        slot.set(&r);
        true
    }

    /// The device's `prod_tail` failed validation (M14): nothing is read from the ring.
    #[cold]
    #[inline(never)]
    fn corrupt(&self) -> usize {
        self.adapter.device().count_bad_cqe();
        0
    }
}

/// An NDK result type the poll fills.
trait CqResult {
    /// A successful initiator request (no bytes, no type-specific output).
    fn success(&mut self, qp_context: usize, request_context: usize, op: NDK_OPERATION_TYPE);
    /// Any result.
    fn set(&mut self, r: &NDK_RESULT_EX);
}

impl CqResult for NDK_RESULT {
    #[inline(always)]
    fn success(&mut self, qp_context: usize, request_context: usize, _op: NDK_OPERATION_TYPE) {
        // CAST: the contexts were PVOIDs stored as integers.
        *self = NDK_RESULT {
            Status: STATUS_SUCCESS,
            BytesTransferred: 0,
            QPContext: qp_context as PVOID,
            RequestContext: request_context as PVOID,
        };
    }
    fn set(&mut self, r: &NDK_RESULT_EX) {
        *self = to_result(r);
    }
}

impl CqResult for NDK_RESULT_EX {
    #[inline(always)]
    fn success(&mut self, qp_context: usize, request_context: usize, op: NDK_OPERATION_TYPE) {
        // CAST: as above.
        *self = NDK_RESULT_EX {
            Status: STATUS_SUCCESS,
            BytesTransferred: 0,
            QPContext: qp_context as PVOID,
            RequestContext: request_context as PVOID,
            Type: op,
            ProviderErrorCode: 0,
            TypeSpecificCompletionOutput: 0,
        };
    }
    fn set(&mut self, r: &NDK_RESULT_EX) {
        *self = *r;
    }
}

impl ObjRef<Cq> {
    /// NdkArmCq: records the arm, arms the device, then re-checks the ring because CQEs
    /// already present never notify (pitfall 11).
    pub fn arm(&self, t: ULONG) {
        // Serialized with the polls (§5.4), and holds no QP reference.
        self.release_buried();
        let fire = {
            let mut st = self.arm.lock();
            let t = ArmType::from_ndk(t);
            let probe = st.armed().map_or(t, |a| a.combine(t));
            let solicited_only = match probe {
                ArmType::Any => Some(false),
                ArmType::Solicited => Some(true),
                ArmType::Errors => None,
            };
            if let Some(sol) = solicited_only {
                self.port.arm(sol);
            }
            st.arm(t, self.port.has_entries())
        };
        if let Some(status) = fire {
            self.deliver(status);
        }
    }

    /// A device notification (CQNE) or CQ error for this CQ (from the device's DPC).
    pub fn event(&self, ev: CqEvent) {
        let fire = self.arm.lock().event(ev);
        if let Some(status) = fire {
            self.deliver(status);
        }
    }

    fn deliver(&self, first: NTSTATUS) {
        // The callback counts as outstanding: a close issued meanwhile pends until it
        // returns, and after a close no callback starts (§5.2, §5.4).
        if !self.life.try_get() {
            self.arm.lock().callback_dropped();
            return;
        }
        let mut status = first;
        loop {
            dispatch::call_cq_notification(self.notify, self.notify_context, status);
            match self.arm.lock().callback_returned() {
                Some(next) => status = next,
                None => break,
            }
        }
        self.put();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use ArmType::*;

    #[test]
    fn combination_table() {
        // Rows: first arm; columns: ANY, ERRORS, SOLICITED (ndkpi.md §5.4).
        let table = [
            (Any, [Any, Any, Any]),
            (Errors, [Any, Errors, Solicited]),
            (Solicited, [Any, Solicited, Solicited]),
        ];
        for (first, row) in table {
            for (second, want) in [Any, Errors, Solicited].into_iter().zip(row) {
                assert_eq!(first.combine(second), want, "{first:?} then {second:?}");
            }
        }
        assert_eq!(ArmType::from_ndk(0), Errors);
        assert_eq!(ArmType::from_ndk(1), Any);
        assert_eq!(ArmType::from_ndk(2), Solicited);
        assert_eq!(ArmType::from_ndk(7), Any);
    }

    #[test]
    fn no_callback_without_arm_and_one_per_arm() {
        let mut s = ArmState::default();
        assert_eq!(s.event(CqEvent::Completion { solicited: true }), None);
        assert_eq!(s.arm(Any, false), None);
        assert_eq!(s.device_arm(), Some(false));
        assert_eq!(
            s.event(CqEvent::Completion { solicited: false }),
            Some(STATUS_SUCCESS)
        );
        assert_eq!(s.callback_returned(), None);
        // The arm was consumed.
        assert_eq!(s.event(CqEvent::Completion { solicited: false }), None);
        assert_eq!(s.device_arm(), None);
    }

    #[test]
    fn solicited_arm_ignores_unsolicited_completions() {
        let mut s = ArmState::default();
        assert_eq!(s.arm(Solicited, false), None);
        assert_eq!(s.device_arm(), Some(true));
        assert_eq!(s.event(CqEvent::Completion { solicited: false }), None);
        assert_eq!(
            s.event(CqEvent::Completion { solicited: true }),
            Some(STATUS_SUCCESS)
        );
    }

    #[test]
    fn errors_arm_fires_only_on_cq_error() {
        let mut s = ArmState::default();
        assert_eq!(
            s.arm(Errors, true),
            None,
            "completions do not satisfy ERRORS"
        );
        assert_eq!(s.device_arm(), None);
        assert_eq!(s.event(CqEvent::Completion { solicited: true }), None);
        assert_eq!(
            s.event(CqEvent::Error(STATUS_BUFFER_OVERFLOW)),
            Some(STATUS_BUFFER_OVERFLOW)
        );
        assert_eq!(s.callback_returned(), None);
        // Reported once.
        assert_eq!(s.arm(Any, true), None);
    }

    #[test]
    fn error_while_unarmed_is_reported_at_next_arm() {
        let mut s = ArmState::default();
        assert_eq!(s.event(CqEvent::Error(STATUS_INTERNAL_ERROR)), None);
        assert_eq!(s.arm(Solicited, false), Some(STATUS_INTERNAL_ERROR));
    }

    #[test]
    fn arm_with_entries_is_satisfied_at_once() {
        let mut s = ArmState::default();
        assert_eq!(s.arm(Any, true), Some(STATUS_SUCCESS));
        assert_eq!(s.callback_returned(), None);
        assert_eq!(s.arm(Solicited, true), Some(STATUS_SUCCESS));
    }

    #[test]
    fn callbacks_are_serialized() {
        let mut s = ArmState::default();
        assert_eq!(s.arm(Any, true), Some(STATUS_SUCCESS));
        // Re-armed from inside the callback with entries present: deferred, not nested.
        assert_eq!(s.arm(Any, true), None);
        assert_eq!(s.callback_returned(), Some(STATUS_SUCCESS));
        assert_eq!(s.callback_returned(), None);
        // A re-arm from inside without entries waits for a completion as usual.
        assert_eq!(s.arm(Any, false), None);
        assert_eq!(
            s.event(CqEvent::Completion { solicited: false }),
            Some(STATUS_SUCCESS)
        );
        assert_eq!(s.callback_returned(), None);
    }

    #[test]
    fn second_arm_before_satisfaction_combines() {
        let mut s = ArmState::default();
        assert_eq!(s.arm(Errors, false), None);
        assert_eq!(s.arm(Solicited, false), None);
        assert_eq!(s.armed(), Some(Solicited));
        assert_eq!(s.arm(Any, false), None);
        assert_eq!(s.armed(), Some(Any));
        assert_eq!(s.arm(Errors, false), None);
        assert_eq!(s.armed(), Some(Any));
    }
}
