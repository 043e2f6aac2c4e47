//! NDK_CQ over a PVRDMA CQ (ndkpi.md §5.4; pvrdma.md §9, §11–§13, M18–M19).
//!
//! Retrieval maps each CQE to its QP through the device's bounds-checked QP handle table
//! (O(1), then checked to complete on this CQ) and to the posted
//! request through that queue's slot records ([`super::completion`]). Notification is the
//! arm state machine [`ArmState`]: pure logic, driven by NdkArmCq, by device notifications
//! (CQNE) and CQ errors, and by the return of each consumer callback.
#![deny(unsafe_code)]

use super::adapter::Adapter;
use super::dispatch;
use super::error::HwError;
use super::error::{NdkError, NdkResult};
use super::hw::{HwCqe, HwDone, pow2_ceil};
use super::object::{CreateHandoff, Lifetime, NdkObject, ObjRef};
use super::qp::Qp;
use crate::ndkpi::*;
use crate::os::SpinLock;

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
}

impl NdkObject for Cq {
    type Ndk = NDK_CQ;
    fn lifetime(&self) -> &Lifetime {
        &self.life
    }
    fn teardown(&self) {
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

    /// The QP a CQE names, if it exists and completes on this CQ: an O(1) bounds-checked
    /// lookup by device handle, whatever the number of QPs sharing the CQ.
    fn find_qp(&self, qp_handle: u32) -> Option<ObjRef<Qp>> {
        self.adapter
            .device()
            .qp(qp_handle)
            .filter(|q| q.completes_on(self))
    }

    /// Retrieves up to `out.len()` results (NdkGetCqResultsEx). No allocation: CQEs are
    /// taken in batches (one ring lock and one `cons_head` update per batch, never more
    /// CQEs than results still wanted, so none is lost), and the QP of the previous CQE is
    /// reused before the QP table is consulted.
    pub fn get_results_ex(&self, out: &mut [NDK_RESULT_EX]) -> usize {
        self.fill(out.len(), |i, r| {
            if let Some(slot) = out.get_mut(i) {
                *slot = r;
            }
        })
    }

    /// NdkGetCqResults: the same results without Type and the other Ex fields.
    pub fn get_results(&self, out: &mut [NDK_RESULT]) -> usize {
        self.fill(out.len(), |i, r| {
            if let Some(slot) = out.get_mut(i) {
                *slot = super::completion::to_result(&r);
            }
        })
    }

    fn fill(&self, wanted: usize, put: impl FnMut(usize, NDK_RESULT_EX)) -> usize {
        // A consumer reaping one result (or finding none) pays for a one-entry buffer, not
        // for initialising sixteen.
        if wanted <= 1 {
            self.fill_batched::<1>(wanted, put)
        } else {
            self.fill_batched::<16>(wanted, put)
        }
    }

    fn fill_batched<const BATCH: usize>(
        &self,
        wanted: usize,
        mut put: impl FnMut(usize, NDK_RESULT_EX),
    ) -> usize {
        let hw = self.adapter.hw();
        let mut buf = [HwCqe::EMPTY; BATCH];
        let mut last: Option<ObjRef<Qp>> = None;
        let mut n = 0;
        while n < wanted {
            let want = (wanted - n).min(BATCH);
            let Some(batch) = buf.get_mut(..want) else {
                break;
            };
            let got = hw.poll_cq_batch(self.handle, batch).min(want);
            if got == 0 {
                break;
            }
            for cqe in buf.iter().take(got) {
                if last.as_ref().is_none_or(|q| q.handle() != cqe.qp) {
                    last = self.find_qp(cqe.qp);
                }
                // A CQE naming no QP of this CQ, or a slot that is not outstanding, is
                // dropped (and counted) rather than trusted (style.md §10).
                let Some(qp) = &last else {
                    self.adapter.device().count_bad_cqe();
                    continue;
                };
                if let Some(r) = qp.complete(cqe) {
                    if r.Type == NdkOperationTypeReceiveAndInvalidate {
                        // CAST: `make_result` widened the u32 key.
                        let key = r.TypeSpecificCompletionOutput as u32;
                        self.adapter.device().note_remote_invalidate(key);
                    }
                    put(n, r);
                    n += 1;
                }
            }
        }
        n
    }
}

impl ObjRef<Cq> {
    /// NdkArmCq: records the arm, arms the device, then re-checks the ring because CQEs
    /// already present never notify (pitfall 11).
    pub fn arm(&self, t: ULONG) {
        let hw = self.adapter.hw();
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
                hw.arm_cq(self.handle, sol);
            }
            st.arm(t, hw.cq_has_entries(self.handle))
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
