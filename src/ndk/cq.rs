//! NDK_CQ over a PVRDMA CQ (ndkpi.md §5.4; pvrdma.md §9, §11–§13, M18–M19).
//!
//! Retrieval reads CQEs straight out of the ring through the CQ's reader
//! ([`crate::pvrdma::cq::CqReader`]), maps each to its QP (the CQ's own table of its QPs by
//! handle residue, then the device's table; O(1), lock-free, no count: `qp_table`)
//! and to the posted request through that queue's slot records ([`super::completion`]).
//! Notification is the
//! arm state machine [`ArmState`]: pure logic, driven by NdkArmCq, by device notifications
//! (CQNE) and CQ errors, and by the return of each consumer callback. It lives in one atomic
//! word ([`ArmCell`]), so the notification path takes no lock of the CQ: the device's DPC
//! finds the CQ's [`CqLink`] with one table lookup and the consumer's callback runs with no
//! driver lock held.

use super::adapter::Adapter;
use super::completion::{
    Completion, RetireWindow, SlotRecord, make_result, split_wr_id, tag, to_result,
};
use super::error::{NdkError, NdkResult};
use super::object::{CreateHandoff, Dispatched, Lifetime, NdkObject, ObjRef};
use super::qp::Qp;
use super::qp_table::{CqQps, Graveyard, RawQp};
use crate::ndkpi::*;
use crate::os::Processor;
use crate::os::alloc::try_arc;
use crate::pvrdma::PvrdmaError;
use crate::pvrdma::cq::{CqReader, CqState, CqeRing};
use crate::pvrdma::cqe::{CqeView, WcFlags, wc_status};
use crate::pvrdma::device::CqEvents;
use crate::pvrdma::verbs::{Done, pow2_ceil};
use core::mem::MaybeUninit;
use core::sync::atomic::{AtomicU32, Ordering};

/// `wc_flags` WITH_IMM (pvrdma.md §11).
const WITH_IMM: u32 = WcFlags::WITH_IMM.bits();
/// `wc_flags` WITH_INVALIDATE.
const WITH_INVALIDATE: u32 = WcFlags::WITH_INVALIDATE.bits();

/// Effective arm type. The discriminants are the arm field of [`ArmState`] (0 there is
/// "not armed"), ordered so that combining two arms, or an arm with none, is `max` (§5.4
/// table).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum ArmType {
    /// NDK_CQ_NOTIFY_ERRORS: CQ errors only.
    Errors = 1,
    /// NDK_CQ_NOTIFY_SOLICITED: solicited receives and failed requests.
    Solicited = 2,
    /// NDK_CQ_NOTIFY_ANY: the next completion.
    Any = 3,
}

impl ArmType {
    /// From NdkArmCq's `Type`. NdkArmCq returns nothing, so an unknown value cannot be
    /// refused; it is taken as ANY, which at worst gives the consumer an extra callback
    /// instead of a missing one.
    pub fn from_ndk(t: ULONG) -> ArmType {
        /// By NDK_CQ_NOTIFY_* value: one load instead of a chain of compares.
        const BY_NDK: [ArmType; 3] = [ArmType::Errors, ArmType::Any, ArmType::Solicited];
        const _: () = assert!(
            NDK_CQ_NOTIFY_ERRORS == 0 && NDK_CQ_NOTIFY_ANY == 1 && NDK_CQ_NOTIFY_SOLICITED == 2
        );
        BY_NDK.get(t as usize).copied().unwrap_or(ArmType::Any)
    }

    /// The effective type when `second` is armed before `self` is satisfied: ANY wins,
    /// SOLICITED beats ERRORS (§5.4).
    pub fn combine(self, second: ArmType) -> ArmType {
        core::cmp::max(self, second)
    }

    /// What the device must be armed with (see [`ArmState::device_arm`]).
    pub fn device_arm(self) -> Option<bool> {
        match self {
            ArmType::Any => Some(false),
            ArmType::Solicited => Some(true),
            ArmType::Errors => None,
        }
    }

    fn from_bits(b: u32) -> Option<ArmType> {
        match b {
            1 => Some(ArmType::Errors),
            2 => Some(ArmType::Solicited),
            3 => Some(ArmType::Any),
            _ => None,
        }
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

/// A callback's `CqStatus` as a 2-bit code of [`ArmState`] (0 there is "none"); the only
/// statuses a CQ notification carries are these three (§5.4 CqStatus). Errors rank above
/// success.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum CqStatus {
    Success = 1,
    Overflow = 2,
    InternalError = 3,
}

impl CqStatus {
    /// Any failure but an overrun is fatal (§5.4).
    fn of_error(st: NTSTATUS) -> CqStatus {
        if st == STATUS_BUFFER_OVERFLOW {
            CqStatus::Overflow
        } else {
            CqStatus::InternalError
        }
    }

    fn from_bits(b: u32) -> Option<CqStatus> {
        match b {
            1 => Some(CqStatus::Success),
            2 => Some(CqStatus::Overflow),
            3 => Some(CqStatus::InternalError),
            _ => None,
        }
    }

    fn ntstatus(self) -> NTSTATUS {
        match self {
            CqStatus::Success => STATUS_SUCCESS,
            CqStatus::Overflow => STATUS_BUFFER_OVERFLOW,
            CqStatus::InternalError => STATUS_INTERNAL_ERROR,
        }
    }
}

/// Notification state of one CQ (§5.4): one callback per arm, only after an arm, callbacks
/// serialized (a notification due while one runs is deferred until it returns).
///
/// The state is its own packed form: the low byte (`ARM_STATE_BITS`) of an [`ArmCell`]
/// word. The `ArmState` an [`ArmCell::update`] transition edits is the cell's whole word,
/// the epoch above the state carried through untouched, so a transition is a few bit
/// operations on the word and nothing converts the state to or from it. Elsewhere (a
/// state of its own, [`ArmCell::get`]) the bits above are 0.
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct ArmState(u32);

impl ArmState {
    /// The current arm, an [`ArmType`] discriminant, or 0.
    const ARMED: u32 = 0b11;
    /// A callback is being delivered.
    const IN_CALLBACK: u32 = 1 << 2;
    /// The [`CqStatus`] of the callback due when the one in progress returns, or 0.
    const DEFERRED_SHIFT: u32 = 3;
    const DEFERRED: u32 = 0b11 << Self::DEFERRED_SHIFT;
    /// The [`CqStatus`] of the CQ's error, or 0: a CQ fails once and stays failed.
    const ERROR_SHIFT: u32 = 5;
    const ERROR: u32 = 0b11 << Self::ERROR_SHIFT;
    /// The error was delivered, or is due.
    const ERROR_REPORTED: u32 = 1 << 7;

    /// NdkArmCq with `t`; `has_entries` says whether the CQ holds unretrieved completions
    /// after the device was armed. Returns the status of a callback to deliver now.
    ///
    /// Completions already present satisfy a SOLICITED or ANY arm at once: the provider must
    /// when one was added since the last callback and may otherwise, and it cannot tell
    /// the two apart from the device ring, so it always does.
    pub fn arm(&mut self, t: ArmType, has_entries: bool) -> Option<NTSTATUS> {
        let effective = self.armed_with(t);
        self.arm_as(effective, has_entries && effective.device_arm().is_some())
    }

    /// [`arm`](Self::arm) with the arm it makes effective ([`armed_with`](Self::armed_with))
    /// and whether completions satisfy that arm at once: completions are present and the arm
    /// is one the device is armed for (SOLICITED or ANY).
    fn arm_as(&mut self, effective: ArmType, satisfied: bool) -> Option<NTSTATUS> {
        self.0 = (self.0 & !Self::ARMED) | effective as u32;
        if self.0 & Self::ERROR != 0 {
            if self.0 & Self::ERROR_REPORTED != 0 {
                return None;
            }
            self.0 |= Self::ERROR_REPORTED;
            return self.fire(self.error());
        }
        if satisfied {
            return self.fire(CqStatus::Success);
        }
        None
    }

    /// A completion or error; returns the status of a callback to deliver now.
    pub fn event(&mut self, ev: CqEvent) -> Option<NTSTATUS> {
        match ev {
            CqEvent::Completion { solicited } => {
                let armed = self.0 & Self::ARMED;
                if armed == ArmType::Any as u32 || (solicited && armed == ArmType::Solicited as u32)
                {
                    self.fire(CqStatus::Success)
                } else {
                    None
                }
            }
            CqEvent::Error(st) => {
                if self.0 & Self::ERROR != 0 {
                    return None;
                }
                let code = CqStatus::of_error(st);
                self.0 |= (code as u32) << Self::ERROR_SHIFT;
                if self.0 & Self::ARMED == 0 {
                    return None;
                }
                self.0 |= Self::ERROR_REPORTED;
                self.fire(code)
            }
        }
    }

    /// The consumer's callback returned; returns a deferred callback to deliver next.
    pub fn callback_returned(&mut self) -> Option<NTSTATUS> {
        match CqStatus::from_bits((self.0 & Self::DEFERRED) >> Self::DEFERRED_SHIFT) {
            Some(st) => {
                self.0 &= !Self::DEFERRED;
                Some(st.ntstatus())
            }
            None => {
                self.0 &= !Self::IN_CALLBACK;
                None
            }
        }
    }

    /// The callback could not be delivered (the CQ is closing): forget it.
    pub fn callback_dropped(&mut self) {
        self.0 &= !(Self::IN_CALLBACK | Self::DEFERRED);
    }

    /// What the device must be armed with: `Some(solicited_only)`, or `None` when only CQ
    /// errors are of interest (those arrive as async events, not CQNEs).
    pub fn device_arm(&self) -> Option<bool> {
        self.armed().and_then(ArmType::device_arm)
    }

    /// The current arm.
    pub fn armed(&self) -> Option<ArmType> {
        ArmType::from_bits(self.0 & Self::ARMED)
    }

    /// The arm NdkArmCq with `t` makes effective (§5.4 table).
    pub fn armed_with(&self, t: ArmType) -> ArmType {
        // The arm field is 0 or a discriminant, so `max` with `t` is the combination and
        // is one of the types.
        ArmType::from_bits(core::cmp::max(self.0 & Self::ARMED, t as u32)).unwrap_or(t)
    }

    /// Whether a callback is being delivered.
    pub fn in_callback(&self) -> bool {
        self.0 & Self::IN_CALLBACK != 0
    }

    fn error(&self) -> CqStatus {
        CqStatus::from_bits((self.0 & Self::ERROR) >> Self::ERROR_SHIFT)
            .unwrap_or(CqStatus::InternalError)
    }

    fn fire(&mut self, st: CqStatus) -> Option<NTSTATUS> {
        self.0 &= !Self::ARMED;
        if self.0 & Self::IN_CALLBACK != 0 {
            // An error outranks a plain notification if both wait.
            if self.0 & Self::DEFERRED == 0 || st != CqStatus::Success {
                self.0 = (self.0 & !Self::DEFERRED) | (st as u32) << Self::DEFERRED_SHIFT;
            }
            None
        } else {
            self.0 |= Self::IN_CALLBACK;
            Some(st.ntstatus())
        }
    }
}

impl core::fmt::Debug for ArmState {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ArmState")
            .field("armed", &self.armed())
            .field("in_callback", &self.in_callback())
            .field(
                "deferred",
                &CqStatus::from_bits((self.0 & Self::DEFERRED) >> Self::DEFERRED_SHIFT),
            )
            .field(
                "error",
                &CqStatus::from_bits((self.0 & Self::ERROR) >> Self::ERROR_SHIFT),
            )
            .field("error_reported", &(self.0 & Self::ERROR_REPORTED != 0))
            .finish()
    }
}

/// Bits of one [`ArmState`] in an [`ArmCell`] word; the bits above count device events.
const ARM_STATE_BITS: u32 = 0xFF;
/// One device event in an [`ArmCell`] word.
const ARM_EPOCH: u32 = 1 << 8;

/// One CQ's [`ArmState`] in an atomic word: every transition is a compare-and-swap of the
/// whole state, so neither NdkArmCq nor a device event takes a lock. Device events also
/// advance an epoch in the upper bits: NdkArmCq's transition, which depends on what it read
/// from the ring, fails and is redone if a notification was processed after its read (the
/// lost-wakeup window the CQ's lock used to close).
pub struct ArmCell(AtomicU32);

impl Default for ArmCell {
    fn default() -> Self {
        ArmCell(AtomicU32::new(ArmState::default().0))
    }
}

impl ArmCell {
    /// Applies `f` atomically (re-running it if the state changed meanwhile, so it must
    /// have no effect but on the state and idempotent side effects). `device_event` marks a
    /// transition by a device notification or error.
    pub fn update<R>(&self, device_event: bool, mut f: impl FnMut(&mut ArmState) -> R) -> R {
        let mut cur = self.0.load(Ordering::Acquire);
        loop {
            let mut st = ArmState(cur);
            let r = f(&mut st);
            let mut next = st.0;
            if device_event {
                next = next.wrapping_add(ARM_EPOCH);
            }
            match self
                .0
                .compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return r,
                Err(now) => cur = now,
            }
        }
    }

    /// The current state.
    pub fn get(&self) -> ArmState {
        ArmState(self.0.load(Ordering::Acquire) & ARM_STATE_BITS)
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
    arm: ArmCell,
    reader: CqReader,
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
        let a = adapter.clone();
        let done = move |r: Result<u32, PvrdmaError>| {
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
                let d: Done<u32> = b.map_box(|b| b as Done<u32>).into_inner();
                adapter.hw().create_cq(entries, d);
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
        let reader = match hw.cq_reader(handle) {
            Ok(r) => r,
            Err(e) => {
                hw.destroy_cq(handle);
                return Err(e.into());
            }
        };
        let ndk = NDK_CQ {
            Header: super::object::header(adapter.version(), NdkObjectTypeCq),
            Dispatch: Cq::TABLE,
        };
        let state = Cq {
            life: Lifetime::new(),
            adapter: adapter.clone(),
            handle,
            depth: p.depth,
            notify: p.notify,
            notify_context: p.notify_context,
            affinity: p.affinity,
            arm: ArmCell::default(),
            reader,
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

    /// Where its notifications run: the first processor of its GROUP_AFFINITY, if it has
    /// one (NdkCreateCq `Affinity`), else wherever the CQ-notification DPC runs.
    pub(crate) fn target_processor(&self) -> Processor {
        self.affinity
            .filter(|a| a.Mask != 0)
            .map_or(Processor::Current, |a| {
                Processor::from_affinity(a.Group, a.Mask as u64)
            })
    }

    /// The adapter.
    pub fn adapter(&self) -> &ObjRef<Adapter> {
        &self.adapter
    }

    /// A new QP completes on this CQ (after it was registered with the device).
    pub(crate) fn bind(&self, qp: &ObjRef<Qp>) {
        self.qps.bind(qp, qp.handle(), self.handle);
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
    pub fn get_results_ex(&self, out: &mut [MaybeUninit<NDK_RESULT_EX>]) -> usize {
        self.fill(out)
    }

    /// NdkGetCqResults: the same results without Type and the other Ex fields.
    #[inline(always)]
    pub fn get_results(&self, out: &mut [MaybeUninit<NDK_RESULT>]) -> usize {
        self.fill(out)
    }

    /// The poll. The fast path handles what a data path reaps almost always: successful
    /// signalled completions of a QP of this CQ (found at its first residue in the CQ's
    /// table), each naming the oldest outstanding request of its queue. The first CQE is
    /// peeled off here, a send only, with no call and few registers (a one-completion poll
    /// saves none); [`Self::fill_run`] takes the rest, and [`Self::fill_general`] anything
    /// else (a failure, a QP at its second residue, a CQE that does not validate).
    #[inline(always)]
    fn fill<R: CqResult>(&self, out: &mut [R]) -> usize {
        let reader = &self.reader;
        let head = reader.head();
        // Only whether a CQE is ready: the count stays out of the peel's registers, and
        // `fill_run` reads the index again (validated again).
        let ready = match reader.ready(head) {
            CqState::Ready(k) => k,
            CqState::Empty => return self.fill_after_poll(out, head),
            CqState::Corrupt => return self.corrupt(),
        };
        // More than one result to take: the loop, whose setup pays for itself.
        if ready != 1 && out.len() != 1 {
            return self.fill_many(out, head, ready as usize);
        }
        let Some(first) = out.first_mut() else {
            return 0;
        };
        let c = reader.at(head);
        if c.status() != 0 {
            return self.fill_run(out, 0, head);
        }
        // A dead QP's `u64::MAX` never matches a 32-bit handle.
        // SAFETY: this is the CQ's poller (polls are serialized, §5.4), and no reference
        // outlives this peel, which releases nothing.
        let Some(qp) = (unsafe { self.find_local(u64::from(c.handle())) }) else {
            return self.fill_run(out, 0, head);
        };
        let wr_id = c.wr_id();
        let send = qp.send_book().retire_oldest(tag::SQ, wr_id, |rec| {
            let meta = rec.meta();
            meta.signaled().then(|| (rec.request_context(), meta.op()))
        });
        let Some((request_context, op)) = send else {
            return self.fill_receive(out, head, qp, wr_id);
        };
        first.success(qp.context(), request_context, op);
        let head = reader.next(head);
        if out.len() == 1 {
            reader.consume(head);
            return 1;
        }
        self.fill_run(out, 1, head)
    }

    /// The peel for a CQE that is not a send's, out of line (the send's peel keeps its
    /// registers): CQE `head` (successful, naming `qp`, with `wr_id`) if it is the oldest
    /// outstanding receive of `qp`'s receive queue, which completes on this CQ, with a
    /// length its buffers hold, no immediate data and no invalidation (as
    /// [`Self::run_receives`] takes them); anything else goes to [`Self::fill_run`].
    #[inline(never)]
    fn fill_receive<R: CqResult>(&self, out: &mut [R], head: u32, qp: &Qp, wr_id: u64) -> usize {
        let reader = &self.reader;
        let (Some(book), Some(slot)) = (qp.recv_book(), out.first_mut()) else {
            return self.fill_run(out, 0, head);
        };
        if qp.cq_handles().1 != self.handle {
            return self.fill_run(out, 0, head);
        }
        let c = reader.at(head);
        let len = c.byte_len();
        let max = self.max_byte_len;
        let received = book.retire_oldest(tag::RQ, wr_id, |rec| {
            let sane = len <= core::cmp::min(rec.posted_len(), max)
                && c.wc_flags() & (WITH_IMM | WITH_INVALIDATE) == 0;
            sane.then(|| rec.request_context())
        });
        let Some(request_context) = received else {
            return self.fill_run(out, 0, head);
        };
        slot.received(qp.context(), request_context, len);
        qp.traffic().received(u64::from(len), false);
        let head = reader.next(head);
        if out.len() == 1 {
            reader.consume(head);
            return 1;
        }
        self.fill_run(out, 1, head)
    }

    /// The fast path after the peel: from `head` on (`n` results already in `out`), runs of
    /// CQEs of one QP's send or receive queue ([`Self::run_sends`],
    /// [`Self::run_receives`]); the first CQE that is none hands the rest of the poll to
    /// [`Self::fill_general`], as does a ring that runs dry with results still wanted. The
    /// ring's table and each run's queue state are read once, not per CQE.
    #[inline(never)]
    fn fill_run<R: CqResult>(&self, out: &mut [R], n: usize, head: u32) -> usize {
        let left = match self.reader.ready(head) {
            CqState::Ready(k) => k as usize,
            // Dry with results still wanted: POLL and one more look, out of line.
            CqState::Empty => return self.fill_general(out, n, head, 0),
            CqState::Corrupt => {
                // What the peel retired is consumed; nothing more is read.
                self.reader.consume(head);
                self.corrupt();
                return n;
            }
        };
        self.run_from(out, n, head, left)
    }

    /// [`Self::fill_run`] from the thunk's peel, which validated the ring and found `left`
    /// CQEs ready (more than one result to take).
    #[inline(never)]
    fn fill_many<R: CqResult>(&self, out: &mut [R], head: u32, left: usize) -> usize {
        self.run_from(out, 0, head, left)
    }

    /// The loop of [`Self::fill_run`] over the `left` CQEs ready from `head`.
    #[inline(always)]
    fn run_from<R: CqResult>(
        &self,
        out: &mut [R],
        mut n: usize,
        head: u32,
        mut left: usize,
    ) -> usize {
        let ring = self.reader.ring();
        // Free-running from `head`: only its residue locates a CQE.
        let mut at = head;
        while left != 0 {
            let c = ring.at(at);
            if c.status() != 0 {
                break;
            }
            let Some(dst) = out.get_mut(n..) else {
                break;
            };
            let handle = c.handle();
            // SAFETY: this CQ's poller; the reference ends with this run, and nothing here
            // releases the buried QPs.
            let Some(qp) = (unsafe { self.find_local(u64::from(handle)) }) else {
                break;
            };
            let taken = match split_wr_id(c.wr_id()).0 {
                tag::SQ => Self::run_sends(
                    ring,
                    at,
                    handle,
                    qp,
                    qp.send_book().window(tag::SQ),
                    dst,
                    left,
                ),
                // A receive on this CQ only if the QP's receives complete here (its sends
                // do, or it would not be in the table).
                tag::RQ => match qp.recv_book() {
                    Some(book) if qp.cq_handles().1 == self.handle => {
                        self.run_receives(ring, at, handle, qp, book.window(tag::RQ), dst, left)
                    }
                    _ => 0,
                },
                _ => 0,
            };
            if taken == 0 {
                break;
            }
            n += taken;
            left -= taken;
            // CAST: at most `left`, a u32 count.
            at = at.wrapping_add(taken as u32);
            if n == out.len() {
                self.reader.consume(ring.wrap(at));
                return n;
            }
        }
        self.fill_general(out, n, ring.wrap(at), left)
    }

    /// The run of CQEs from `first` that succeeded and name, in order, the oldest
    /// outstanding signalled sends of QP `qp` (device handle `handle`), whose send queue's
    /// window is `w`: at most `left` CQEs and `dst.len()` results. Returns how many; the
    /// retirements are published.
    #[inline(always)]
    fn run_sends<R: CqResult>(
        ring: CqeRing<'_>,
        first: u32,
        handle: u32,
        qp: &Qp,
        mut w: RetireWindow<'_>,
        dst: &mut [R],
        left: usize,
    ) -> usize {
        let ctx = qp.context();
        // One bound for the loop: CQEs ready, results wanted, requests outstanding.
        let budget = core::cmp::min(core::cmp::min(left, w.outstanding()), dst.len());
        let Some(dst) = dst.get_mut(..budget) else {
            return 0;
        };
        let mut at = first;
        for slot in dst.iter_mut() {
            let c = ring.at(at);
            if c.status() != 0 || c.handle() != handle {
                break;
            }
            let Some(rec) = w.oldest(c.wr_id()) else {
                break;
            };
            let (request_context, meta) = (rec.request_context(), rec.meta());
            if !meta.signaled() {
                break;
            }
            slot.success(ctx, request_context, meta.op());
            w.advance();
            at = at.wrapping_add(1);
        }
        w.close();
        at.wrapping_sub(first) as usize
    }

    /// [`Self::run_sends`] for the receive queue: each receive reports a length no larger
    /// than its buffers (and MaxTransferLength), with no immediate data and no invalidation
    /// (those take the general path); the run's bytes are counted once.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn run_receives<R: CqResult>(
        &self,
        ring: CqeRing<'_>,
        first: u32,
        handle: u32,
        qp: &Qp,
        mut w: RetireWindow<'_>,
        dst: &mut [R],
        left: usize,
    ) -> usize {
        let ctx = qp.context();
        let max = self.max_byte_len;
        let budget = core::cmp::min(core::cmp::min(left, w.outstanding()), dst.len());
        let Some(dst) = dst.get_mut(..budget) else {
            return 0;
        };
        let mut run = qp.traffic().receive_run();
        let mut at = first;
        for slot in dst.iter_mut() {
            let c = ring.at(at);
            if c.status() != 0 || c.handle() != handle {
                break;
            }
            let Some(rec) = w.oldest(c.wr_id()) else {
                break;
            };
            let len = c.byte_len();
            let (request_context, posted) = (rec.request_context(), rec.posted_len());
            if len > core::cmp::min(posted, max) || c.wc_flags() & (WITH_IMM | WITH_INVALIDATE) != 0
            {
                break;
            }
            slot.received(ctx, request_context, len);
            run.add(u64::from(len));
            w.advance();
            at = at.wrapping_add(1);
        }
        w.close();
        let taken = at.wrapping_sub(first);
        if taken != 0 {
            qp.traffic().received_run(&run);
        }
        taken as usize
    }

    /// The ring was empty: the POLL doorbell and one more look (Linux's poll, M48), out of
    /// line so that only the empty poll pays for it; what the device wrote meanwhile takes
    /// the general path.
    #[cold]
    #[inline(never)]
    fn fill_after_poll<R: CqResult>(&self, out: &mut [R], head: u32) -> usize {
        match self.reader.poll_device(head) {
            CqState::Ready(n) if !out.is_empty() => self.fill_general(out, 0, head, n as usize),
            CqState::Ready(_) | CqState::Empty => 0,
            CqState::Corrupt => self.corrupt(),
        }
    }

    /// Every CQE, from `head` on (`left` of them ready, `n` results already in `out`):
    /// QP lookup, receives, failures and validation. When the ring runs dry with results
    /// still wanted, the POLL doorbell and one more look, once (Linux's `pvrdma_poll_one`
    /// rings it whenever it finds the ring empty, M48), after publishing `cons_head` so
    /// that the device sees the room the poll made.
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
        let reader = &self.reader;
        let mut polled = false;
        loop {
            self.fill_from_ring(out, &mut n, &mut head, &mut left);
            if n == out.len() || polled {
                break;
            }
            polled = true;
            reader.consume(head);
            match reader.poll_device(head) {
                CqState::Ready(k) => left = k as usize,
                CqState::Empty => return n,
                CqState::Corrupt => {
                    self.corrupt();
                    return n;
                }
            }
        }
        reader.consume(head);
        n
    }

    /// [`Self::fill_general`]'s loop over the `left` CQEs ready from `head`, advancing both
    /// and the result count `n`; `cons_head` is the caller's to publish.
    #[inline(always)]
    fn fill_from_ring<R: CqResult>(
        &self,
        out: &mut [R],
        n: &mut usize,
        head: &mut u32,
        left: &mut usize,
    ) {
        let reader = &self.reader;
        while *n < out.len() && *left != 0 {
            let c = reader.load(*head);
            *head = reader.next(*head);
            *left -= 1;
            // SAFETY: this CQ's poller; the previous iteration's `qp` is dead, and no
            // reference outlives the poll.
            // CAST: the handle is the low half of `qp` (see `fill`).
            let Some(qp) = (unsafe { self.find_qp(u64::from(c.qp as u32)) }) else {
                self.adapter.device().count_bad_cqe();
                continue;
            };
            let (t, index) = split_wr_id(c.wr_id);
            // A QP's queue completes to one CQ: a CQE of it on the QP's other CQ would
            // complete the request twice (once per poller) or steal it.
            let (send_cq, recv_cq) = qp.cq_handles();
            if self.handle != if t == tag::SQ { send_cq } else { recv_cq } {
                self.adapter.device().count_bad_cqe();
                continue;
            }
            let Some(rec) = qp.retire(t, index) else {
                continue;
            };
            let Some(slot) = out.get_mut(*n) else {
                break;
            };
            if c.status == 0 && rec.op != NdkOperationTypeReceive {
                if rec.signaled {
                    slot.success(qp.context(), rec.request_context, rec.op);
                    *n += 1;
                }
                continue;
            }
            if self.complete_slow(qp, &rec, &c, slot) {
                *n += 1;
            }
        }
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
        // A receive reports no more than its buffers hold (its posted total), whatever
        // MaxTransferLength allows.
        let both = WITH_IMM | WITH_INVALIDATE;
        let limit = if rec.op == NdkOperationTypeReceive {
            core::cmp::min(rec.posted_len, self.max_byte_len)
        } else {
            self.max_byte_len
        };
        let sane = !ok || (c.byte_len <= limit && c.wc_flags & both != both);
        if ok && sane && rec.op == NdkOperationTypeReceive {
            qp.traffic()
                .received(u64::from(c.byte_len), c.wc_flags & WITH_INVALIDATE != 0);
        }
        let done = if sane {
            Completion {
                status: c.status,
                byte_len: if ok { c.byte_len } else { 0 },
                invalidated_rkey: (ok && c.wc_flags & WITH_INVALIDATE != 0).then_some(c.ex),
            }
        } else {
            self.adapter.device().count_bad_cqe();
            Completion {
                status: wc_status::GENERAL_ERR,
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

    /// The device's `prod_tail` failed validation (M14): the CQ fails for good (§5.4: a CQ
    /// that reported an error returns no completions). A poll starts no callback (the thunk
    /// holds no count of the CQ, `ObjRef::peek`), so STATUS_INTERNAL_ERROR is recorded here
    /// and reported by the next NdkArmCq, which is what a consumer does after a poll. (An arm
    /// on the corrupt ring, which still looks non-empty, is satisfied at once, as with
    /// completions waiting: the consumer polls, gets here and re-arms.) Before, every poll
    /// found nothing while the ring still looked non-empty, and a consumer re-arming from its
    /// callback got a STATUS_SUCCESS callback per arm, forever.
    #[cold]
    #[inline(never)]
    fn corrupt(&self) -> usize {
        // A ring already stopped (this CQ failed before) is not a new corruption.
        if self.reader.is_stopped() {
            return 0;
        }
        self.stop_ring();
        let first = self.arm.update(true, |st| {
            let first = !st.failed();
            st.fail_quietly(STATUS_INTERNAL_ERROR);
            first
        });
        if first {
            self.adapter.device().count_cq_error();
        }
        0
    }

    /// Never reads the ring again: nothing the device says of it can be trusted any more,
    /// however sane its index looks later.
    #[cold]
    #[inline(never)]
    fn stop_ring(&self) {
        self.adapter.device().count_bad_cqe();
        self.reader.stop();
    }
}

/// An NDK result type the poll fills.
trait CqResult {
    /// A successful initiator request (no bytes, no type-specific output).
    fn success(&mut self, qp_context: usize, request_context: usize, op: NDK_OPERATION_TYPE);
    /// A successful receive of `bytes` (no immediate data, no invalidation).
    fn received(&mut self, qp_context: usize, request_context: usize, bytes: u32);
    /// Any result.
    fn set(&mut self, r: &NDK_RESULT_EX);
}

// The consumer's array may be uninitialized memory: entries are only ever written whole.
impl CqResult for MaybeUninit<NDK_RESULT> {
    #[inline(always)]
    fn success(&mut self, qp_context: usize, request_context: usize, _op: NDK_OPERATION_TYPE) {
        // CAST: the contexts were PVOIDs stored as integers.
        self.write(NDK_RESULT {
            Status: STATUS_SUCCESS,
            BytesTransferred: 0,
            QPContext: qp_context as PVOID,
            RequestContext: request_context as PVOID,
        });
    }
    #[inline(always)]
    fn received(&mut self, qp_context: usize, request_context: usize, bytes: u32) {
        // CAST: as above.
        self.write(NDK_RESULT {
            Status: STATUS_SUCCESS,
            BytesTransferred: bytes,
            QPContext: qp_context as PVOID,
            RequestContext: request_context as PVOID,
        });
    }
    fn set(&mut self, r: &NDK_RESULT_EX) {
        self.write(to_result(r));
    }
}

impl CqResult for MaybeUninit<NDK_RESULT_EX> {
    #[inline(always)]
    fn success(&mut self, qp_context: usize, request_context: usize, op: NDK_OPERATION_TYPE) {
        // CAST: as above.
        self.write(NDK_RESULT_EX {
            Status: STATUS_SUCCESS,
            BytesTransferred: 0,
            QPContext: qp_context as PVOID,
            RequestContext: request_context as PVOID,
            Type: op,
            ProviderErrorCode: 0,
            TypeSpecificCompletionOutput: 0,
        });
    }
    #[inline(always)]
    fn received(&mut self, qp_context: usize, request_context: usize, bytes: u32) {
        // CAST: as above.
        self.write(NDK_RESULT_EX {
            Status: STATUS_SUCCESS,
            BytesTransferred: bytes,
            QPContext: qp_context as PVOID,
            RequestContext: request_context as PVOID,
            Type: NdkOperationTypeReceive,
            ProviderErrorCode: 0,
            TypeSpecificCompletionOutput: 0,
        });
    }
    fn set(&mut self, r: &NDK_RESULT_EX) {
        self.write(*r);
    }
}

impl ObjRef<Cq> {
    /// NdkArmCq: records the arm, arms the device, then re-checks the ring because CQEs
    /// already present never notify (pitfall 11). A notification processed meanwhile makes
    /// the transition run again (see [`ArmCell`]): arming the device twice is harmless.
    pub fn arm(&self, t: ULONG) {
        // Serialized with the polls (§5.4), and holds no QP reference.
        self.release_buried();
        let t = ArmType::from_ndk(t);
        let fire = self.arm.update(false, |st| {
            let effective = st.armed_with(t);
            let satisfied = match effective.device_arm() {
                Some(solicited_only) => {
                    self.reader.arm(solicited_only);
                    // Found empty: the POLL doorbell and one more look, as a poll does (M48).
                    self.reader.has_entries() || self.reader.poll_has_entries()
                }
                // ERRORS: the device stays unarmed and completions do not satisfy the arm,
                // so the ring need not be read.
                None => false,
            };
            st.arm_as(effective, satisfied)
        });
        if let Some(status) = fire {
            self.deliver(status);
        }
    }

    /// A device notification (CQNE) or CQ error for this CQ (from the device's DPC).
    pub fn event(&self, ev: CqEvent) {
        // The CQ's first error counts once (OID_NDK_STATISTICS CQError).
        let (fire, first_error) = self.arm.update(true, |st| {
            let first = matches!(ev, CqEvent::Error(_)) && !st.failed();
            (st.event(ev), first)
        });
        if first_error {
            self.adapter.device().count_cq_error();
        }
        if let Some(status) = fire {
            self.deliver(status);
        }
    }

    /// Calls the consumer back (no driver lock is held by any caller), then any callback
    /// that became due while it ran.
    fn deliver(&self, first: NTSTATUS) {
        // The callback counts as outstanding: a close issued meanwhile pends until it
        // returns, and after a close no callback starts (§5.2, §5.4).
        if !self.life.try_get() {
            self.arm.update(false, ArmState::callback_dropped);
            return;
        }
        let mut status = first;
        loop {
            upcall::cq_notification(self.notify, self.notify_context, status);
            // A callback deferred while this one ran does not start once the CQ is closing
            // (the consumer may have closed it from this very callback).
            let next = self.arm.update(false, |st| {
                if self.life.is_closing() {
                    st.callback_dropped();
                    None
                } else {
                    st.callback_returned()
                }
            });
            match next {
                Some(n) => status = n,
                None => break,
            }
        }
        self.put();
    }
}

/// The device's handler of one NDK CQ: a CQNE or CQ_ERR the device's DPC found under the CQ's
/// handle goes straight to the arm state (no second lookup, no lock).
struct CqLink(ObjRef<Cq>);

impl ObjRef<Cq> {
    /// The handler the device calls for this CQ's events; it keeps the CQ's memory alive
    /// until the device drops it (unrouted at teardown, by `Verbs::destroy_cq`).
    pub(crate) fn link(&self) -> NdkResult<alloc::sync::Arc<dyn CqEvents>> {
        let link: alloc::sync::Arc<dyn CqEvents> =
            try_arc(CqLink(self.clone())).map_err(|_| NdkError::InsufficientResources)?;
        Ok(link)
    }
}

impl CqEvents for CqLink {
    fn completion(&self) {
        self.0.event(CqEvent::Completion { solicited: true });
    }
    fn error(&self) {
        // CQ_ERR is raised for overflow and for a bad CQ index (M22); both stop the CQ, and
        // NDK's overrun status is the one that fits. A failed CQ returns no completions
        // (ndkpi.md §5.4): the ring is not read again, from before the callback on.
        self.0.reader.stop();
        self.0.event(CqEvent::Error(STATUS_BUFFER_OVERFLOW));
    }
}

impl ArmState {
    /// The CQ failed with `st` where no callback may start (a poll): recorded like
    /// [`CqEvent::Error`], and reported by the next [`arm`](Self::arm).
    /// Whether the CQ is in its error state.
    pub fn failed(&self) -> bool {
        self.0 & Self::ERROR != 0
    }

    pub fn fail_quietly(&mut self, st: NTSTATUS) {
        if self.0 & Self::ERROR == 0 {
            self.0 |= (CqStatus::of_error(st) as u32) << Self::ERROR_SHIFT;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec::Vec;

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
    fn an_error_found_by_a_poll_is_reported_by_the_next_arm_only() {
        let mut s = ArmState::default();
        assert_eq!(s.arm(Errors, false), None);
        s.fail_quietly(STATUS_INTERNAL_ERROR);
        assert_eq!(s.armed(), Some(Errors), "no callback from the poll");
        assert_eq!(
            s.event(CqEvent::Error(STATUS_BUFFER_OVERFLOW)),
            None,
            "fails once"
        );
        assert_eq!(s.arm(Errors, false), Some(STATUS_INTERNAL_ERROR));
        assert_eq!(s.callback_returned(), None);
        s.fail_quietly(STATUS_INTERNAL_ERROR);
        assert_eq!(s.arm(Any, true), None, "reported once");
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

    /// The state machine as plain fields: the reference the packed [`ArmState`] must match.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    struct Model {
        armed: Option<ArmType>,
        in_callback: bool,
        deferred: Option<NTSTATUS>,
        error: Option<NTSTATUS>,
        error_reported: bool,
    }

    impl Model {
        fn arm(&mut self, t: ArmType, has_entries: bool) -> Option<NTSTATUS> {
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
            if has_entries && effective != Errors {
                return self.fire(STATUS_SUCCESS);
            }
            None
        }

        fn event(&mut self, ev: CqEvent) -> Option<NTSTATUS> {
            match ev {
                CqEvent::Completion { solicited } => match self.armed {
                    Some(Any) => self.fire(STATUS_SUCCESS),
                    Some(Solicited) if solicited => self.fire(STATUS_SUCCESS),
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

        fn callback_returned(&mut self) -> Option<NTSTATUS> {
            match self.deferred.take() {
                Some(st) => Some(st),
                None => {
                    self.in_callback = false;
                    None
                }
            }
        }

        fn callback_dropped(&mut self) {
            self.in_callback = false;
            self.deferred = None;
        }

        fn device_arm(&self) -> Option<bool> {
            match self.armed {
                Some(Any) => Some(false),
                Some(Solicited) => Some(true),
                _ => None,
            }
        }

        fn fire(&mut self, st: NTSTATUS) -> Option<NTSTATUS> {
            self.armed = None;
            if self.in_callback {
                if self.deferred.is_none() || st != STATUS_SUCCESS {
                    self.deferred = Some(st);
                }
                None
            } else {
                self.in_callback = true;
                Some(st)
            }
        }

        /// The layout, written out independently of ArmState's constants.
        fn pack(&self) -> ArmState {
            let code = |s: Option<NTSTATUS>| match s {
                None => 0u32,
                Some(STATUS_SUCCESS) => 1,
                Some(STATUS_BUFFER_OVERFLOW) => 2,
                Some(_) => 3,
            };
            ArmState(
                self.armed.map_or(0, |a| a as u32)
                    | u32::from(self.in_callback) << 2
                    | code(self.deferred) << 3
                    | code(self.error) << 5
                    | u32::from(self.error_reported) << 7,
            )
        }

        fn of(s: ArmState) -> Model {
            let status = |b: u32| CqStatus::from_bits(b & 3).map(CqStatus::ntstatus);
            Model {
                armed: s.armed(),
                in_callback: s.in_callback(),
                deferred: status(s.0 >> 3),
                error: status(s.0 >> 5),
                error_reported: s.0 & ArmState::ERROR_REPORTED != 0,
            }
        }

        /// Every state the fields can hold (the five fields take 256 values, as the byte).
        fn all() -> Vec<Model> {
            let statuses = [
                None,
                Some(STATUS_SUCCESS),
                Some(STATUS_BUFFER_OVERFLOW),
                Some(STATUS_INTERNAL_ERROR),
            ];
            let mut all = Vec::new();
            for armed in [None, Some(Errors), Some(Solicited), Some(Any)] {
                for deferred in statuses {
                    for error in statuses {
                        for in_callback in [false, true] {
                            for error_reported in [false, true] {
                                all.push(Model {
                                    armed,
                                    in_callback,
                                    deferred,
                                    error,
                                    error_reported,
                                });
                            }
                        }
                    }
                }
            }
            all
        }
    }

    /// One input of the state machine, applied to both forms.
    #[derive(Clone, Copy, Debug)]
    enum Input {
        Arm(ArmType, bool),
        Event(CqEvent),
        Returned,
        Dropped,
    }

    const INPUTS: [Input; 12] = [
        Input::Arm(Errors, false),
        Input::Arm(Errors, true),
        Input::Arm(Solicited, false),
        Input::Arm(Solicited, true),
        Input::Arm(Any, false),
        Input::Arm(Any, true),
        Input::Event(CqEvent::Completion { solicited: false }),
        Input::Event(CqEvent::Completion { solicited: true }),
        Input::Event(CqEvent::Error(STATUS_BUFFER_OVERFLOW)),
        Input::Event(CqEvent::Error(STATUS_INTERNAL_ERROR)),
        Input::Returned,
        Input::Dropped,
    ];

    fn apply_model(m: &mut Model, i: Input) -> Option<NTSTATUS> {
        match i {
            Input::Arm(t, e) => m.arm(t, e),
            Input::Event(ev) => m.event(ev),
            Input::Returned => m.callback_returned(),
            Input::Dropped => {
                m.callback_dropped();
                None
            }
        }
    }

    fn apply(s: &mut ArmState, i: Input) -> Option<NTSTATUS> {
        match i {
            Input::Arm(t, e) => s.arm(t, e),
            Input::Event(ev) => s.event(ev),
            Input::Returned => s.callback_returned(),
            Input::Dropped => {
                s.callback_dropped();
                None
            }
        }
    }

    #[test]
    fn every_state_round_trips_through_the_byte() {
        let all = Model::all();
        let mut seen = [false; 256];
        for m in &all {
            let s = m.pack();
            assert_eq!(Model::of(s), *m, "{s:?}");
            assert_eq!(s.0 & !ARM_STATE_BITS, 0, "{m:?}");
            let seen = seen.get_mut(s.0 as usize).expect("in the low byte");
            assert!(!*seen, "two states share {:#04x}", s.0);
            *seen = true;
            for t in [Errors, Solicited, Any] {
                assert_eq!(s.armed_with(t), m.armed.map_or(t, |a| a.combine(t)));
            }
        }
        assert_eq!(all.len(), 256);
        assert_eq!(Model::default().pack(), ArmState::default());
        assert_eq!(ArmCell::default().0.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn every_transition_matches_the_reference_model() {
        // Every state the byte can hold, reachable or not, under every input.
        for m in Model::all() {
            for i in INPUTS {
                let (mut want, mut got) = (m, m.pack());
                let want_fire = apply_model(&mut want, i);
                assert_eq!(apply(&mut got, i), want_fire, "{m:?} {i:?}");
                assert_eq!(Model::of(got), want, "{m:?} {i:?}");
                assert_eq!(got.device_arm(), want.device_arm(), "{m:?} {i:?}");
                assert_eq!(got.armed(), want.armed, "{m:?} {i:?}");
                // In a cell, the epoch above the state rides through untouched.
                let mut in_cell = ArmState(m.pack().0 | 0xA5A5_A500);
                apply(&mut in_cell, i);
                assert_eq!(in_cell.0, got.0 | 0xA5A5_A500, "{m:?} {i:?}");
            }
        }
        let mut reachable = Vec::from([ArmState::default()]);
        let mut next = 0;
        while let Some(&s) = reachable.get(next) {
            next += 1;
            for i in INPUTS {
                let mut t = s;
                apply(&mut t, i);
                if !reachable.contains(&t) {
                    reachable.push(t);
                }
            }
        }
        for s in &reachable {
            let m = Model::of(*s);
            // What the states reachable from the initial one have in common: a callback is
            // deferred only behind one in progress, and an error is reported only once the
            // CQ has one.
            assert!(m.deferred.is_none() || m.in_callback, "{m:?}");
            assert!(!m.error_reported || m.error.is_some(), "{m:?}");
        }
    }

    #[test]
    fn cell_events_advance_the_epoch_and_keep_the_state() {
        let c = ArmCell::default();
        assert_eq!(c.update(false, |s| s.arm(Any, false)), None);
        let before = c.0.load(Ordering::SeqCst);
        assert_eq!(
            c.update(true, |s| s.event(CqEvent::Completion { solicited: true })),
            Some(STATUS_SUCCESS)
        );
        let after = c.0.load(Ordering::SeqCst);
        assert_eq!(after >> 8, (before >> 8) + 1);
        assert!(c.get().in_callback());
        assert_eq!(c.get().armed(), None);
        assert_eq!(c.update(false, ArmState::callback_returned), None);
        assert_eq!(
            c.0.load(Ordering::SeqCst) >> 8,
            after >> 8,
            "no epoch for the consumer's transitions"
        );
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
