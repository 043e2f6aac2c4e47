//! NDK_SRQ over a PVRDMA SRQ (ndkpi.md §5.9; pvrdma.md §1 SRQ mapping, M43–M47).
//!
//! SRQ receives complete out of slot order (several QPs draw from one SRQ, M46), so each
//! posted receive takes a record from a fixed pool and its `wr_id` names the record, not
//! the ring slot; the record is freed when the CQE arrives on the consuming QP's receive CQ.
#![deny(unsafe_code)]

use core::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};

use super::completion::{SlotRecord, tag, wr_id};
use super::consumer_array::ConsumerArray;
use super::error::{NdkError, NdkResult};
use super::object::{
    CreateHandoff, Dispatched, Lifetime, NdkObject, ObjRef, RequestHandoff, header, try_vec,
};
use super::pd::{Pd, take_successor};
use crate::ndkpi::*;
use crate::os::alloc::try_arc;
use crate::pvrdma::PvrdmaError;
use crate::pvrdma::device::SrqEvents;
use crate::pvrdma::eqe::EqeType;
use crate::pvrdma::verbs::{Done, SrqSpec, pow2_ceil};
use crate::pvrdma::wq::RecvWriter;
use crate::pvrdma::wqe::Sge;

struct Record {
    busy: AtomicBool,
    context: AtomicUsize,
    /// The receive's total length (saturated): the most its CQE may report.
    posted_len: AtomicU32,
}

/// NdkCreateSrq parameters.
pub struct SrqParams {
    /// `SrqDepth`.
    pub depth: u32,
    /// `MaxReceiveRequestSge`.
    pub max_sge: u32,
    /// `NotifyThreshold`.
    pub threshold: u32,
    /// `SrqNotification`.
    pub notify: Option<NDK_FN_SRQ_NOTIFICATION_CALLBACK>,
    /// `SrqNotificationContext`.
    pub notify_context: usize,
    /// `*Affinity`.
    pub affinity: Option<GROUP_AFFINITY>,
}

/// A shared receive queue.
pub struct Srq {
    life: Lifetime,
    pd: ObjRef<Pd>,
    handle: u32,
    ring: u32,
    cap: AtomicU32,
    max_sge: u32,
    notify: Option<NDK_FN_SRQ_NOTIFICATION_CALLBACK>,
    notify_context: usize,
    affinity: Option<GROUP_AFFINITY>,
    armed: AtomicBool,
    errored: AtomicBool,
    records: alloc::boxed::Box<[Record]>,
    cursor: AtomicU32,
    outstanding: AtomicU32,
    posted: AtomicU32,
    writer: RecvWriter,
}

impl NdkObject for Srq {
    type Ndk = NDK_SRQ;
    fn lifetime(&self) -> &Lifetime {
        &self.life
    }
    fn teardown(&self) {
        let adapter = self.pd.adapter();
        adapter.device().unregister_srq(self.handle);
        adapter.hw().destroy_srq(self.handle);
    }
    fn release_antecedents(&self) {
        self.pd.put();
    }
}

impl Srq {
    /// NdkCreateSrq; the device command may complete later, and the result goes to
    /// `handoff` (inline or through CreateCompletion).
    ///
    /// # Errors
    /// STATUS_NOT_SUPPORTED without device SRQs (MaxSrqDepth 0); STATUS_INVALID_PARAMETER
    /// for a depth of 0 or above MaxSrqDepth, or SGEs above MaxReceiveRequestSge.
    pub fn create_async(
        pd: &ObjRef<Pd>,
        p: SrqParams,
        handoff: alloc::sync::Arc<CreateHandoff<Srq>>,
    ) -> NdkResult<()> {
        let adapter = pd.adapter();
        let info = adapter.info();
        if info.MaxSrqDepth == 0 {
            return Err(NdkError::NotSupported);
        }
        if p.depth == 0 || p.depth > info.MaxSrqDepth || p.max_sge > info.MaxReceiveRequestSge {
            return Err(NdkError::InvalidParameter);
        }
        let ring = pow2_ceil(p.depth).ok_or(NdkError::InvalidParameter)?;
        let records = try_vec(ring as usize, || Record {
            busy: AtomicBool::new(false),
            context: AtomicUsize::new(0),
            posted_len: AtomicU32::new(0),
        })?;
        let spec = SrqSpec {
            pd: pd.handle(),
            max_wr: ring,
            max_sge: p.max_sge.max(1),
            limit: p.threshold.min(ring),
        };
        take_successor(pd)?;
        let owner = pd.clone();
        let done = move |r: Result<u32, PvrdmaError>| {
            let made = match r {
                Ok(handle) => Self::wrap(&owner, handle, ring, records, p),
                Err(e) => Err(e.into()),
            };
            if made.is_err() {
                owner.put();
            }
            handoff.complete(made);
        };
        match crate::os::alloc::try_box(done) {
            Ok(b) => {
                let d: Done<u32> = b.map_box(|b| b as Done<u32>).into_inner();
                adapter.hw().create_srq(&spec, d);
                Ok(())
            }
            Err(_) => {
                pd.put();
                Err(NdkError::InsufficientResources)
            }
        }
    }

    fn wrap(
        pd: &ObjRef<Pd>,
        handle: u32,
        ring: u32,
        records: alloc::boxed::Box<[Record]>,
        p: SrqParams,
    ) -> NdkResult<ObjRef<Srq>> {
        let adapter = pd.adapter();
        let hw = adapter.hw();
        let writer = match hw.srq_writer(handle) {
            Ok(p) => p,
            Err(e) => {
                hw.destroy_srq(handle);
                return Err(e.into());
            }
        };
        let ndk = NDK_SRQ {
            Header: header(adapter.version(), NdkObjectTypeSrq),
            Dispatch: Srq::TABLE,
        };
        let srq = match ObjRef::try_new(
            ndk,
            Srq {
                life: Lifetime::new(),
                pd: pd.clone(),
                handle,
                ring,
                cap: AtomicU32::new(p.depth),
                max_sge: p.max_sge,
                notify: p.notify,
                notify_context: p.notify_context,
                affinity: p.affinity,
                // Armed by a non-zero threshold; no check now, the SRQ starts empty (M45).
                armed: AtomicBool::new(p.threshold > 0),
                errored: AtomicBool::new(false),
                records,
                cursor: AtomicU32::new(0),
                outstanding: AtomicU32::new(0),
                posted: AtomicU32::new(0),
                writer,
            },
        ) {
            Ok(s) => s,
            Err(e) => {
                hw.destroy_srq(handle);
                return Err(e);
            }
        };
        if let Err(e) = adapter.device().register_srq(&srq) {
            drop(srq);
            hw.destroy_srq(handle);
            return Err(e);
        }
        Ok(srq)
    }

    /// Device handle.
    pub fn handle(&self) -> u32 {
        self.handle
    }

    /// The PD.
    pub fn pd(&self) -> &ObjRef<Pd> {
        &self.pd
    }

    /// SGEs per receive.
    pub fn max_sge(&self) -> u32 {
        self.max_sge
    }

    /// The notification affinity given at creation.
    pub fn affinity(&self) -> Option<GROUP_AFFINITY> {
        self.affinity
    }

    /// NdkSrqReceive.
    ///
    /// # Errors
    /// STATUS_INVALID_PARAMETER for too many SGEs; STATUS_INSUFFICIENT_RESOURCES when the
    /// SRQ holds its depth of receives.
    pub fn receive(&self, ctx: usize, sgl: ConsumerArray<'_, Sge>) -> NdkResult<()> {
        let Some(sges) = sgl.within(self.max_sge as usize) else {
            return Err(NdkError::InvalidParameter);
        };
        // Records in flight bound the WQEs in the ring (a WQE leaves the ring when a QP
        // takes it, its record when its CQE is reaped), so a free record means a free slot.
        if self.outstanding.load(Ordering::Acquire) >= self.cap.load(Ordering::Relaxed) {
            return Err(NdkError::InsufficientResources);
        }
        let start = self.cursor.load(Ordering::Relaxed);
        let mut found = None;
        for k in 0..self.ring {
            let id = start.wrapping_add(k) & (self.ring - 1);
            if let Some(r) = self
                .records
                .get(id as usize)
                .filter(|r| !r.busy.load(Ordering::Acquire))
            {
                found = Some((id, r));
                break;
            }
        }
        let (id, rec) = found.ok_or(NdkError::InsufficientResources)?;
        let index = self.posted.load(Ordering::Relaxed);
        let total: u64 = sges.iter().map(|s| u64::from(s.length)).sum();
        rec.context.store(ctx, Ordering::Relaxed);
        rec.posted_len
            .store(u32::try_from(total).unwrap_or(u32::MAX), Ordering::Relaxed);
        rec.busy.store(true, Ordering::Release);
        let slot = self.writer.slot(index);
        if !slot.write_recv(wr_id(tag::SRQ, id), sges) {
            rec.busy.store(false, Ordering::Release);
            return Err(NdkError::InvalidParameter);
        }
        self.outstanding.fetch_add(1, Ordering::AcqRel);
        self.cursor.store(id.wrapping_add(1), Ordering::Relaxed);
        self.posted.store(index.wrapping_add(1), Ordering::Relaxed);
        slot.hand_over(false);
        Ok(())
    }

    /// Frees the record a receive CQE names; `None` if it is not outstanding.
    pub fn retire(&self, id: u32) -> Option<SlotRecord> {
        let rec = self.records.get(id as usize)?;
        let ctx = rec.context.load(Ordering::Acquire);
        let posted_len = rec.posted_len.load(Ordering::Acquire);
        if !rec.busy.swap(false, Ordering::AcqRel) {
            return None;
        }
        self.outstanding.fetch_sub(1, Ordering::AcqRel);
        Some(SlotRecord {
            request_context: ctx,
            op: NdkOperationTypeReceive,
            signaled: true,
            posted_len,
        })
    }
}

impl ObjRef<Srq> {
    /// NdkModifySrq (completes inline; pvrdma.md §1 SRQ mapping, M44, M45).
    ///
    /// # Errors
    /// STATUS_INVALID_PARAMETER above MaxSrqDepth; STATUS_NOT_SUPPORTED for a depth above
    /// the ring chosen at creation (the device cannot resize an SRQ).
    ///
    /// A non-zero threshold sends MODIFY_SRQ, which may complete later: its status goes to
    /// `req` (inline or through RequestCompletion) and the request holds a close count.
    pub fn modify(
        &self,
        depth: u32,
        threshold: u32,
        req: alloc::sync::Arc<RequestHandoff>,
    ) -> NdkResult<()> {
        let max = self.pd.adapter().info().MaxSrqDepth;
        if depth > max {
            return Err(NdkError::InvalidParameter);
        }
        if depth > self.ring {
            return Err(NdkError::NotSupported);
        }
        if depth != 0 {
            self.cap.store(depth, Ordering::Relaxed);
        }
        if threshold == 0 {
            // Keeps the threshold and the arm state: nothing to send (M45).
            req.complete(Ok(()));
            return Ok(());
        }
        if !self.life.try_get() {
            return Err(NdkError::InvalidDeviceRequest);
        }
        let me = self.clone();
        let done = move |r: Result<(), PvrdmaError>| {
            let status = match r {
                Ok(()) => {
                    me.armed.store(true, Ordering::Release);
                    // NDK wants a notification at once when the count is already below; the
                    // device never raises the event at arm time (M44), so the driver checks
                    // (M45).
                    let queued = me.pd.adapter().hw().srq_queued(me.handle);
                    if queued < threshold && me.armed.swap(false, Ordering::AcqRel) {
                        me.deliver(STATUS_SUCCESS);
                    }
                    Ok(())
                }
                Err(e) => Err(NdkError::from(e)),
            };
            req.complete(status);
            me.put();
        };
        match crate::os::alloc::try_box(done) {
            Ok(b) => {
                let d: Done<()> = b.map_box(|b| b as Done<()>).into_inner();
                let limit = threshold.min(self.ring);
                self.pd
                    .adapter()
                    .hw()
                    .modify_srq_limit(self.handle, limit, d);
                Ok(())
            }
            Err(_) => {
                self.put();
                Err(NdkError::InsufficientResources)
            }
        }
    }

    /// SRQ_LIMIT_REACHED: one notification per arm (M45).
    pub fn limit_event(&self) {
        if self.armed.swap(false, Ordering::AcqRel) {
            self.deliver(STATUS_SUCCESS);
        }
    }

    /// SRQ_ERR: the SRQ and its QPs are unusable (M47); reported once.
    pub fn error_event(&self) {
        if !self.errored.swap(true, Ordering::AcqRel) {
            self.deliver(STATUS_INTERNAL_ERROR);
        }
    }

    fn deliver(&self, status: NTSTATUS) {
        let Some(cb) = self.notify else { return };
        if !self.life.try_get() {
            return;
        }
        upcall::srq_notification(cb, self.notify_context, status);
        self.put();
    }
}

/// The device's handler of one NDK SRQ: an SRQ event the device's DPC found under the SRQ's
/// handle goes straight to the SRQ (no second lookup, no lock).
struct SrqLink(ObjRef<Srq>);

impl SrqEvents for SrqLink {
    fn event(&self, kind: EqeType) {
        match kind {
            EqeType::SrqLimitReached => self.0.limit_event(),
            EqeType::SrqErr => self.0.error_event(),
            _ => {}
        }
    }
}

impl ObjRef<Srq> {
    /// The handler the device calls for this SRQ's events; it keeps the SRQ's memory alive
    /// until the device drops it (unrouted at teardown, by `Verbs::destroy_srq`).
    pub(crate) fn link(&self) -> NdkResult<alloc::sync::Arc<dyn SrqEvents>> {
        let link: alloc::sync::Arc<dyn SrqEvents> =
            try_arc(SrqLink(self.clone())).map_err(|_| NdkError::InsufficientResources)?;
        Ok(link)
    }
}
