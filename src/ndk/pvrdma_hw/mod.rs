//! The NDK hardware seam over the PVRDMA hardware layer (pvrdma.md §1 "NDK → PVRDMA mapping",
//! §8–§13): [`PvrdmaHardware`], the [`Hardware`] the NDK objects use, over the command
//! channel, the queue rings, the UAR doorbells and the device's event tables.
//!
//! - `commands`: each CREATE built with its queue memory and its reserved DESTROY, the QP
//!   state changes, and `submit_then`, which completes a command once;
//! - `tables`: the seam's one table per kind of handle, one record per live object (its
//!   queue memory or page directory and its reserved commands);
//! - `events`: the handlers the device's DPCs call: each CQ's and SRQ's NDK object bound
//!   under its handle, device-wide events to [`NdkDevice`].
//!
//! Limits of this binding (phase 2 work still open, reported by the layer above as failures,
//! never faked):
//! - Every object command completes asynchronously (STATUS_PENDING, CreateCompletion or
//!   RequestCompletion from the command-completion DPC); DESTROY commands (object close) and
//!   NdkFlush's MODIFY_QP are submitted without waiting, and queue memory is released from
//!   the DESTROY response (the device lets go of it only then, style.md §6); a DESTROY that
//!   timed out or failed quarantines it until the device is RESET (`tables::Quarantine`,
//!   counted by [`PvrdmaHardware::quarantined`]). Each object's
//!   DESTROY (command entry and completion) is reserved when the object is created, so a
//!   close or NdkDeregisterMr allocates nothing and cannot fail (ndkpi.md §5.1);
//!   NdkDeregisterMr completes inline (its DESTROY_MR is not waited for). Queue memory is
//!   allocated in the calling thread through the OS seam's DMA allocator, which is
//!   PASSIVE_LEVEL; creates at DISPATCH_LEVEL need an asynchronous allocation there
//!   (NdisMAllocateSharedMemoryAsyncEx).
//! - QP async events (QP_FATAL, QP_ACCESS_ERR, …) are not mapped yet.
#![deny(unsafe_code)]

mod commands;
mod events;
mod modify;
mod tables;

pub use events::SrqLink;

use alloc::sync::Arc;

use self::commands::{
    dma_mr, flush_qp, init_qp, modify_srq_limit, prepare_cq, prepare_mr, prepare_pd, prepare_qp,
    prepare_srq, submit_then,
};
use self::events::DeviceHook;
use self::tables::{CqRecord, MrRecord, PdRecord, QpRecord, SrqRecord, Tables};
use super::adapter::NdkDevice;
use super::cq::Cq;
use super::error::HwError;
use super::hw::{Hardware, HwCaps, HwDone, MrKeys, MrSpec, QpSpec, SrqSpec};
use super::object::ObjRef;
use super::srq::Srq;
use crate::ndkpi::{GROUP_AFFINITY, NDK_LOGICAL_ADDRESS};
use crate::os::alloc::try_arc;
use crate::pvrdma::PvrdmaError;
use crate::pvrdma::cmd::{Command, CreateMrResp, DestroyMr};
use crate::pvrdma::cq::{CqBells, CqReader};
use crate::pvrdma::device::Device;
use crate::pvrdma::error::dev_err;
use crate::pvrdma::uar::{CqDoorbell, QpDoorbell, SrqDoorbell};
use crate::pvrdma::wq::{RecvWriter, SendWriter};

/// SGEs per request the adapter advertises at most (the NDK SGE arrays are handed to the
/// rings as they are, so this only bounds the WQE stride).
pub const MAX_POST_SGE: usize = 32;

/// The device's error as the seam reports it; the NTSTATUS a consumer sees follows from it
/// (`NdkError::to_ntstatus`).
pub fn hw_error(e: PvrdmaError) -> HwError {
    match e {
        PvrdmaError::NoMemory | PvrdmaError::QueueFull => HwError::NoResources,
        // M8: ERR (a command refused at REQUEST) and `hdr.err` carry the same codes.
        PvrdmaError::CommandFailed { err, .. } => device_code_error(u32::from(err)),
        PvrdmaError::CommandRejected { err, .. } => device_code_error(err),
        PvrdmaError::InvalidParameter | PvrdmaError::NotSupported => HwError::Invalid,
        _ => HwError::Failed,
    }
}

/// An M8 device error code as the seam reports it.
fn device_code_error(err: u32) -> HwError {
    match err {
        dev_err::NO_RESOURCES => HwError::NoResources,
        dev_err::INVALID | dev_err::UNSUPPORTED => HwError::Invalid,
        _ => HwError::Failed,
    }
}

/// The keys of a created MR.
fn mr_keys(k: &CreateMrResp) -> MrKeys {
    MrKeys {
        handle: k.mr_handle,
        lkey: k.lkey,
        rkey: k.rkey,
    }
}

/// The device and the seam's records of the objects in it, shared with the completions of
/// the commands in flight (which file and destroy records from the command DPC).
struct Seam {
    dev: Arc<Device>,
    tables: Tables,
}

impl Seam {
    /// Files `rec` under `h` (see [`Tables::file`]).
    fn file<R: tables::Record>(&self, h: u32, rec: R) -> Result<(), HwError> {
        self.tables.file(h, rec)
    }

    /// DESTROY for `h` (see [`Tables::destroy`]).
    fn destroy<R: tables::Record>(&self, h: u32) {
        self.tables.destroy::<R>(self.dev.cmd(), h);
    }
}

/// The PVRDMA device as the NDK layer's [`Hardware`].
///
/// Each kind of device handle has one table here (`Tables`: a record per object with its
/// queue memory and reserved commands), one in the device (`Device`: its event handler, for
/// CQs, QPs and SRQs) and at most one in the NDK device (`NdkDevice`: the NDK object, for
/// the kinds it looks up).
pub struct PvrdmaHardware {
    seam: Arc<Seam>,
    caps: HwCaps,
}

impl PvrdmaHardware {
    /// Wraps a started device (PASSIVE_LEVEL, at device start).
    ///
    /// # Errors
    /// [`HwError::NoResources`] when the handle tables cannot be allocated.
    pub fn new(dev: Arc<Device>) -> Result<Arc<PvrdmaHardware>, HwError> {
        let c = *dev.caps();
        let mut caps = HwCaps::from_caps(&c, dev.version());
        caps.max_sge = caps.max_sge.min(MAX_POST_SGE as u32);
        caps.max_sge_rd = caps.max_sge_rd.min(MAX_POST_SGE as u32);
        caps.max_srq_sge = caps.max_srq_sge.min(MAX_POST_SGE as u32);
        let tables = Tables::new(&c, dev.cmd().clone())?;
        let seam = try_arc(Seam { dev, tables }).map_err(|_| HwError::NoResources)?;
        try_arc(PvrdmaHardware { seam, caps }).map_err(|_| HwError::NoResources)
    }

    /// Routes device-wide events to `ndk` (called once, after [`NdkDevice::new`]).
    ///
    /// # Errors
    /// [`HwError::NoResources`] when the device-event hook cannot be allocated.
    pub fn attach(&self, ndk: &Arc<NdkDevice>) -> Result<(), HwError> {
        let hook = try_arc(DeviceHook {
            ndk: Arc::downgrade(ndk),
        })
        .map_err(|_| HwError::NoResources)?;
        self.seam.dev.set_device_events(Some(hook));
        Ok(())
    }

    fn dev(&self) -> &Device {
        &self.seam.dev
    }

    /// Objects whose memory the device may still write, held until the device is RESET
    /// (`tables::Quarantine`): created objects whose CREATE response named a handle this
    /// seam could not file (one held by a live object, or out of range, see `Tables::file`),
    /// and objects whose DESTROY timed out or failed.
    pub fn quarantined(&self) -> u32 {
        self.seam.tables.quarantined()
    }

    /// Submits a prepared CREATE and, on the device's answer (in the command DPC), has
    /// `install` file the new object's record under its handle, finish the object and
    /// complete `done`. When the CREATE cannot be prepared or fails, `done` gets the error and
    /// the record is dropped unused: its reserved DESTROY is released uncalled and its queue
    /// memory freed.
    fn create<C, R, T>(
        &self,
        prepared: Result<(C, R), HwError>,
        done: HwDone<T>,
        install: impl FnOnce(&Arc<Seam>, C::Resp, R, HwDone<T>) + Send + 'static,
    ) where
        C: Command,
        C::Resp: Send + 'static,
        R: Send + 'static,
        T: 'static,
    {
        let (cmd, rec) = match prepared {
            Ok(p) => p,
            Err(e) => return done(Err(e)),
        };
        let s = self.seam.clone();
        submit_then(self.dev().cmd(), &cmd, move |r| match r {
            Ok(resp) => install(&s, resp, rec, done),
            Err(e) => done(Err(e)),
        });
    }
}

impl Hardware for PvrdmaHardware {
    fn caps(&self) -> &HwCaps {
        &self.caps
    }

    fn create_pd_async(&self, done: HwDone<(u32, MrKeys)>) {
        let prepared = prepare_pd(self.dev(), self.seam.tables.quarantine());
        self.create(prepared, done, |s, pd, (pd_rec, dma_rec), done| {
            if let Err(e) = s.file(pd, pd_rec) {
                return done(Err(e));
            }
            let s2 = s.clone();
            submit_then(s.dev.cmd(), &dma_mr(pd), move |r| {
                match r.and_then(|k| s2.file(k.mr_handle, dma_rec).map(|()| mr_keys(&k))) {
                    Ok(keys) => done(Ok((pd, keys))),
                    Err(e) => {
                        s2.destroy::<PdRecord>(pd);
                        done(Err(e));
                    }
                }
            });
        });
    }

    fn destroy_pd(&self, pd: u32) {
        self.seam.destroy::<PdRecord>(pd);
    }

    fn create_cq_async(&self, entries: u32, _affinity: Option<GROUP_AFFINITY>, done: HwDone<u32>) {
        // The affinity is the NDK CQ's, applied when its events are routed (`bind_cq`).
        let prepared = prepare_cq(self.dev(), self.seam.tables.quarantine(), entries);
        self.create(prepared, done, move |s, resp, rec, done| {
            let h = resp.cq_handle;
            // The handle first: the CQ is ours to destroy only once it is filed under it.
            let ring = rec.ring.clone();
            if let Err(e) = s.file(h, rec) {
                return done(Err(e));
            }
            // M11: the response's `cqe` is the request's. Fewer would overflow the CQ below
            // the consumer's depth; more is not what the ring was sized for. Either is the
            // device's error, and the CQ it made is destroyed (filed above, so its DESTROY
            // frees the ring once answered).
            if resp.cqe != entries {
                s.destroy::<CqRecord>(h);
                return done(Err(HwError::Failed));
            }
            let adopted = ring.lock().set_device_entries(resp.cqe);
            done(adopted.map(|()| h).map_err(|e| {
                s.destroy::<CqRecord>(h);
                hw_error(e)
            }));
        });
    }

    fn bind_cq(&self, cq: &ObjRef<Cq>) -> Result<(), HwError> {
        events::bind_cq(self.dev(), cq)
    }

    fn destroy_cq(&self, cq: u32) {
        drop(self.dev().unregister_cq(cq));
        self.seam.destroy::<CqRecord>(cq);
    }

    fn create_mr_async(&self, pd: u32, spec: &MrSpec<'_>, done: HwDone<MrKeys>) {
        let prepared = prepare_mr(self.dev(), self.seam.tables.quarantine(), pd, spec);
        self.create(prepared, done, |s, k, rec, done| {
            done(s.file(k.mr_handle, rec).map(|()| mr_keys(&k)));
        });
    }

    fn destroy_mr(&self, mr: u32) {
        self.seam.destroy::<MrRecord>(mr);
    }

    fn try_destroy_mr(&self, mr: u32) -> Result<(), HwError> {
        let ch = self.dev().cmd();
        match self.seam.tables.take::<MrRecord>(mr) {
            // The DESTROY reserved at registration needs no memory: deregistration cannot
            // fail.
            Some(rec) => {
                tables::kill(ch, mr, rec);
                Ok(())
            }
            // Unlike `submit_then`, a command that cannot be queued (no memory for its
            // entry) is reported, not dropped: the MR then stays registered.
            None => ch
                .submit(&DestroyMr { mr_handle: mr }, |_| {})
                .map_err(hw_error),
        }
    }

    fn create_qp_async(&self, spec: &QpSpec, done: HwDone<u32>) {
        let prepared = prepare_qp(self.dev(), self.seam.tables.quarantine(), spec);
        self.create(prepared, done, |s, resp, mut rec, done| {
            let h = resp.qp_handle;
            rec.qpn = resp.qpn;
            if let Err(e) = s.file(h, rec) {
                return done(Err(e));
            }
            let s2 = s.clone();
            submit_then(s.dev.cmd(), &init_qp(h), move |r| match r {
                Ok(()) => done(Ok(h)),
                Err(e) => {
                    s2.destroy::<QpRecord>(h);
                    done(Err(e));
                }
            });
        });
    }

    fn destroy_qp(&self, qp: u32) {
        // An unused flush reservation is released uncalled; the DESTROY flushes anyway.
        self.seam.destroy::<QpRecord>(qp);
    }

    fn flush_qp(&self, qp: u32) {
        // NdkFlush may run at DISPATCH_LEVEL and cannot fail: submit the MODIFY_QP reserved
        // at create without waiting; the device writes the flush CQEs before its response
        // (M32). No reservation left means an earlier flush already took the QP to ERR.
        if let Some(f) = self.seam.tables.take_flush(qp) {
            self.dev().cmd().submit_reserved(f, &flush_qp(qp));
        }
    }

    fn create_srq_async(&self, spec: &SrqSpec, done: HwDone<u32>) {
        let prepared = prepare_srq(self.dev(), self.seam.tables.quarantine(), spec);
        self.create(prepared, done, |s, h, rec, done| {
            done(s.file(h, rec).map(|()| h));
        });
    }

    fn modify_srq_limit_async(&self, srq: u32, limit: u32, done: HwDone<()>) {
        submit_then(self.dev().cmd(), &modify_srq_limit(srq, limit), done);
    }

    fn bind_srq(&self, srq: &ObjRef<Srq>) -> Result<(), HwError> {
        events::bind_srq(self.dev(), srq)
    }

    fn srq_queued(&self, srq: u32) -> u32 {
        let queue = self.seam.tables.srq_queue(srq);
        queue.map_or(0, |q| q.lock().outstanding().unwrap_or(0))
    }

    fn destroy_srq(&self, srq: u32) {
        drop(self.dev().unregister_srq(srq));
        self.seam.destroy::<SrqRecord>(srq);
    }

    fn qp_writers(&self, qp: u32) -> Result<(SendWriter, Option<RecvWriter>), HwError> {
        let q = self.seam.tables.qp_queues(qp)?;
        let g = q.lock();
        let dev = self.dev();
        let sq =
            g.sq.writer(dev.bell(QpDoorbell::send(qp)))
                .map_err(hw_error)?;
        let rq = match &g.rq {
            Some(rq) => Some(
                rq.writer(dev.bell(QpDoorbell::recv(qp)))
                    .map_err(hw_error)?,
            ),
            None => None,
        };
        Ok((sq, rq))
    }

    fn srq_writer(&self, srq: u32) -> Result<RecvWriter, HwError> {
        let q = self.seam.tables.srq_queue(srq)?;
        q.lock()
            .writer(self.dev().bell(SrqDoorbell::recv(srq)))
            .map_err(hw_error)
    }

    fn cq_reader(&self, cq: u32) -> Result<CqReader, HwError> {
        let ring = self.seam.tables.cq_ring(cq)?;
        let dev = self.dev();
        ring.lock()
            .reader(CqBells {
                arm: dev.bell(CqDoorbell::arm(cq)),
                arm_solicited: dev.bell(CqDoorbell::arm_solicited(cq)),
                poll: dev.bell(CqDoorbell::poll(cq)),
            })
            .map_err(hw_error)
    }

    fn fast_reg_pages(&self, mr: u32, pages: &[NDK_LOGICAL_ADDRESS]) -> Result<u64, HwError> {
        self.seam.tables.with_mr_dir(mr, |dir| {
            for (i, &p) in pages.iter().enumerate() {
                // CAST: a logical address is a 64-bit bus address.
                dir.set_page(i as u32, p as u64).map_err(hw_error)?;
            }
            Ok(dir.dma())
        })
    }

    fn wait_until(&self, cond: &dyn Fn() -> bool) {
        while !self.dev().platform().wait_until(cond, 1_000_000_000) {}
    }

    // MODIFY_QP, GID binding and the QP1 plumbing: `modify.rs`.
    fn modify_qp_async(&self, qp: u32, m: &super::hw::QpModify, done: HwDone<()>) {
        self.modify_qp(qp, m, done);
    }

    fn qp_number(&self, qp: u32) -> Option<u32> {
        self.seam.tables.qp_number(qp)
    }

    fn bind_gid_async(&self, index: u32, gid: [u8; 16], done: HwDone<()>) {
        self.bind_gid(index, gid, done);
    }

    fn unbind_gid_async(&self, index: u32, gid: [u8; 16], done: HwDone<()>) {
        self.unbind_gid(index, gid, done);
    }

    fn create_gsi_qp_async(&self, spec: &QpSpec, done: HwDone<u32>) {
        self.create_gsi_qp(spec, done);
    }

    fn bind_cq_handler(
        &self,
        cq: u32,
        handler: Arc<dyn crate::pvrdma::device::CqEvents>,
    ) -> Result<(), HwError> {
        self.bind_cq_to(cq, handler)
    }

    fn alloc_dma(&self, len: usize) -> Result<crate::os::SharedDma, HwError> {
        self.alloc_shared_dma(len)
    }
}

#[cfg(test)]
mod tests;
