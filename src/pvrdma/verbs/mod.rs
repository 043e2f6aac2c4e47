//! The device's verbs (pvrdma.md §1 "NDK → PVRDMA mapping", §8–§13): [`Verbs`], the PVRDMA
//! objects (PD, CQ, MR, QP, SRQ, GID binds) made and unmade by asynchronous commands, the
//! routing of their events, and the ring writers and readers of the data path. It speaks
//! device terms only: handles, [`QpSpec`]s and [`QpModify`]s, [`MrKeys`], [`Caps`],
//! [`PvrdmaError`]. The NDK layer above translates to and from its objects and statuses.
//!
//! - `commands`: each CREATE built with its queue memory and its reserved DESTROY, the QP
//!   state changes, and `submit_then`, which completes a command once;
//! - `tables`: one table per kind of handle, one record per live object (its queue memory or
//!   page directory and its reserved commands), and the quarantine of memory the device may
//!   still write;
//! - `modify`: MODIFY_QP from a [`QpModify`], range-checked as Linux checks it.
//!
//! Every object command completes asynchronously: [`Done`] runs from the command-completion
//! DPC (or at once when the command cannot be issued). DESTROY commands and NdkFlush's
//! MODIFY_QP are submitted without waiting; each object's DESTROY (command entry and
//! completion) is reserved when the object is created, so a destroy allocates nothing and
//! cannot fail (ndkpi.md §5.1), and queue memory is released from the DESTROY response (the
//! device lets go of it only then, style.md §6). A DESTROY that timed out or failed
//! quarantines it until the device is RESET (`tables::Quarantine`, counted by
//! [`Verbs::quarantined`]). Queue memory is allocated in the calling thread through the OS
//! seam's DMA allocator, which is PASSIVE_LEVEL; creates at DISPATCH_LEVEL need an
//! asynchronous allocation there (NdisMAllocateSharedMemoryAsyncEx).
//!
//! Events go where the layer above routes them ([`Verbs::route_cq`], [`Verbs::route_srq`],
//! [`Verbs::route_device`]), through the handler traits of [`super::device`]: the device's
//! DPC finds the handler with one lookup of the handle it read off its ring.
#![deny(unsafe_code)]

mod commands;
mod modify;
mod tables;

use alloc::boxed::Box;
use alloc::sync::Arc;

use self::commands::{
    dma_mr, flush_qp, init_qp, modify_srq_limit, prepare_cq, prepare_mr, prepare_pd, prepare_qp,
    prepare_srq, submit_then,
};
use self::tables::{CqRecord, MrRecord, PdRecord, QpRecord, SrqRecord, Tables};
use super::PvrdmaError;
use super::cmd::{Command, CreateMrResp, DestroyMr};
use super::cq::{CqBells, CqReader};
use super::device::{CqEvents, Device, DeviceEvents, SrqEvents};
use super::dsr::Caps;
use super::uar::{CqDoorbell, QpDoorbell, SrqDoorbell};
use super::wq::{RecvWriter, SendWriter};
use super::wqe::AccessFlags;
use crate::os::alloc::try_arc;
use crate::os::dma::PAGE_SIZE;
use crate::os::{DmaBuffer, Processor, SharedDma};

pub use super::cmd::QpState;

/// SGEs per request the verbs honour at most (caps the device's `max_sge` family): the NDK
/// SGE arrays are handed to the rings as they are, so this only bounds the WQE stride.
pub const MAX_POST_SGE: u32 = 32;

/// Completion of an object command: runs exactly once, at IRQL ≤ DISPATCH_LEVEL, with no
/// driver lock held (it may call back into the verbs, and what it completes may call a
/// consumer). It may run before the issuing call returns (when the command cannot be
/// issued, or the device answers at once), or later from the command-completion DPC.
pub type Done<T> = Box<dyn FnOnce(Result<T, PvrdmaError>) + Send>;

/// Kind of MR to create (pvrdma.md §1: CREATE_MR flags).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MrSpec<'a> {
    /// A PD's privileged-token MR: CREATE_MR flags DMA, LOCAL_WRITE only (M11, pitfall 13).
    Dma,
    /// A registration: flags 0 over `[start, start + length)`.
    Normal {
        /// The virtual address (an index, never dereferenced, §5.7).
        start: u64,
        /// Bytes.
        length: u64,
        /// Access rights.
        access: AccessFlags,
        /// Bus address of each page spanned, the first holding `start` (the MR's page
        /// directory, §9).
        pages: &'a [u64],
    },
    /// A fast-register MR (flags FRMR) with a page-list capacity.
    FastReg {
        /// Page-list capacity (`nchunks`).
        max_pages: u32,
    },
}

/// Keys and handle of a created MR.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MrKeys {
    /// `mr_handle`.
    pub handle: u32,
    /// `lkey`.
    pub lkey: u32,
    /// `rkey`.
    pub rkey: u32,
}

/// CREATE_QP parameters (pvrdma.md §8, §9). Counts are the ring sizes (powers of two).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpSpec {
    /// PD handle.
    pub pd: u32,
    /// Send CQ handle.
    pub send_cq: u32,
    /// Receive CQ handle.
    pub recv_cq: u32,
    /// SRQ handle for a QP created with an SRQ.
    pub srq: Option<u32>,
    /// SQ ring entries.
    pub max_send_wr: u32,
    /// RQ ring entries (0 with an SRQ).
    pub max_recv_wr: u32,
    /// SGEs per SQ WQE.
    pub max_send_sge: u32,
    /// SGEs per RQ WQE (0 with an SRQ).
    pub max_recv_sge: u32,
}

/// CREATE_SRQ parameters (pvrdma.md §1 SRQ mapping).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SrqSpec {
    /// PD handle.
    pub pd: u32,
    /// Ring entries (power of two).
    pub max_wr: u32,
    /// SGEs per WQE.
    pub max_sge: u32,
    /// Initial `srq_limit` (0 = not armed).
    pub limit: u32,
}

/// A QP's primary path for MODIFY_QP (pvrdma.md §8 `pvrdma_ah_attr`): where its packets go
/// and which GID table entry they come from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpPath {
    /// The peer's GID (its IP address as a RoCEv2 GID).
    pub dgid: [u8; 16],
    /// The next hop's MAC.
    pub dmac: [u8; 6],
    /// The index of the source GID in the GID table ([`Verbs::bind_gid`]).
    pub sgid_index: u8,
    /// IP hop limit / TTL (0: the device's default).
    pub hop_limit: u8,
    /// IP traffic class / TOS.
    pub traffic_class: u8,
    /// IPv6 flow label (20 bits).
    pub flow_label: u32,
}

/// A MODIFY_QP: each `Some` field is set, and only those (the attribute mask follows from
/// which are present, so it cannot disagree with the values). The transitions and the
/// attributes each requires are pvrdma.md §8's table; the device refuses a transition
/// without them (M39).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpModify {
    /// The new state.
    pub state: Option<QpState>,
    /// Path MTU (IB code: 1 = 256 … 5 = 4096).
    pub path_mtu: Option<u8>,
    /// The peer's QP number (24 bits).
    pub dest_qpn: Option<u32>,
    /// First PSN expected from the peer (24 bits).
    pub rq_psn: Option<u32>,
    /// First PSN sent (24 bits).
    pub sq_psn: Option<u32>,
    /// The primary path (RC INIT → RTR).
    pub path: Option<QpPath>,
    /// RDMA READs in flight as initiator (ORD).
    pub max_rd_atomic: Option<u8>,
    /// RDMA READs accepted as responder (IRD).
    pub max_dest_rd_atomic: Option<u8>,
    /// Local ACK timeout exponent (4.096 µs · 2^timeout; 0..=31).
    pub timeout: Option<u8>,
    /// Transport retries (0..=7).
    pub retry_cnt: Option<u8>,
    /// RNR retries (0..=7; 7 = infinite).
    pub rnr_retry: Option<u8>,
    /// Minimum RNR NAK timer code (0..=31).
    pub min_rnr_timer: Option<u8>,
    /// Q_Key (UD and GSI).
    pub qkey: Option<u32>,
    /// Remote access.
    pub access: Option<AccessFlags>,
    /// P_Key index (the device has one P_Key: 0).
    pub pkey_index: Option<u16>,
}

/// Largest power of two ≤ `n` (0 for 0): the ring sizes the device accepts are powers of
/// two (M11), so a limit rounds down to one.
pub const fn pow2_floor(n: u32) -> u32 {
    if n == 0 {
        0
    } else {
        1 << (31 - n.leading_zeros())
    }
}

/// Smallest power of two ≥ `n` (1 for 0), `None` above 2^31: the ring a depth needs.
pub const fn pow2_ceil(n: u32) -> Option<u32> {
    n.checked_next_power_of_two()
}

/// The keys of a created MR.
fn mr_keys(k: &CreateMrResp) -> MrKeys {
    MrKeys {
        handle: k.mr_handle,
        lkey: k.lkey,
        rkey: k.rkey,
    }
}

/// The device and the records of the objects in it, shared with the completions of the
/// commands in flight (which file and destroy records from the command DPC).
struct Seam {
    dev: Arc<Device>,
    tables: Tables,
}

impl Seam {
    /// Files `rec` under `h` (see [`Tables::file`]).
    fn file<R: tables::Record>(&self, h: u32, rec: R) -> Result<(), PvrdmaError> {
        self.tables.file(h, rec)
    }

    /// DESTROY for `h` (see [`Tables::destroy`]).
    fn destroy<R: tables::Record>(&self, h: u32) {
        self.tables.destroy::<R>(self.dev.cmd(), h);
    }
}

/// The PVRDMA device's objects, commands and rings (see the module docs).
///
/// Each kind of device handle has one table here (`Tables`: a record per object with its
/// queue memory and reserved commands) and one in the device (`Device`: its event handler,
/// for CQs, QPs and SRQs).
pub struct Verbs {
    seam: Arc<Seam>,
    caps: Caps,
}

impl Verbs {
    /// The verbs of a started device (PASSIVE_LEVEL, at device start).
    ///
    /// # Errors
    /// [`PvrdmaError::NoMemory`] when the handle tables cannot be allocated.
    pub fn new(dev: Arc<Device>) -> Result<Arc<Verbs>, PvrdmaError> {
        let c = *dev.caps();
        let mut caps = c;
        caps.max_fast_reg_page_list_len = c.max_fast_reg_pages(dev.version());
        caps.max_sge = caps.max_sge.min(MAX_POST_SGE);
        caps.max_sge_rd = caps.max_sge_rd.min(MAX_POST_SGE);
        caps.max_srq_sge = caps.max_srq_sge.min(MAX_POST_SGE);
        let tables = Tables::new(&c, dev.cmd().clone())?;
        let seam = try_arc(Seam { dev, tables })?;
        Ok(try_arc(Verbs { seam, caps })?)
    }

    /// The device limits the verbs honour (any IRQL; fixed at device start): the DSR's caps
    /// (§4) with the FRMR page limit as `PVRDMA_GET_CAP` gives it (128 unless VERSION ≥ 18)
    /// and the SGE counts at most [`MAX_POST_SGE`].
    pub fn caps(&self) -> &Caps {
        &self.caps
    }

    /// The device.
    pub fn device(&self) -> &Device {
        &self.seam.dev
    }

    fn dev(&self) -> &Device {
        &self.seam.dev
    }

    /// Objects whose memory the device may still write, held until the device is RESET
    /// (`tables::Quarantine`): created objects whose CREATE response named a handle that
    /// could not be filed (one held by a live object, or out of range, see `Tables::file`),
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
        prepared: Result<(C, R), PvrdmaError>,
        done: Done<T>,
        install: impl FnOnce(&Arc<Seam>, C::Resp, R, Done<T>) + Send + 'static,
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

    // ----- PDs and MRs -----

    /// CREATE_PD, then the PD's DMA MR (its privileged token, [`MrSpec::Dma`]); `done` gets
    /// the PD handle and the DMA MR's keys. When the DMA MR fails the PD is destroyed and
    /// `done` gets the error: no object is left behind.
    pub fn create_pd(&self, done: Done<(u32, MrKeys)>) {
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

    /// DESTROY_PD (its DMA MR is destroyed first, by [`Verbs::destroy_mr`]).
    pub fn destroy_pd(&self, pd: u32) {
        self.seam.destroy::<PdRecord>(pd);
    }

    /// CREATE_MR of `spec` in `pd`; `done` gets the keys. The spec's page list is consumed
    /// before this returns.
    pub fn create_mr(&self, pd: u32, spec: &MrSpec<'_>, done: Done<MrKeys>) {
        let prepared = prepare_mr(self.dev(), self.seam.tables.quarantine(), pd, spec);
        self.create(prepared, done, |s, k, rec, done| {
            done(s.file(k.mr_handle, rec).map(|()| mr_keys(&k)));
        });
    }

    /// DESTROY_MR (close, re-initialization of an FRMR, the PD's DMA MR).
    pub fn destroy_mr(&self, mr: u32) {
        self.seam.destroy::<MrRecord>(mr);
    }

    /// DESTROY_MR for a deregistration, which reports its outcome: `Err` when the command
    /// could not be issued, and the MR is then still registered in the device. It cannot
    /// fail for an MR these verbs created (its DESTROY is reserved).
    ///
    /// # Errors
    /// [`PvrdmaError::NoMemory`], [`PvrdmaError::Shutdown`].
    pub fn try_destroy_mr(&self, mr: u32) -> Result<(), PvrdmaError> {
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
            None => ch.submit(&DestroyMr { mr_handle: mr }, |_| {}),
        }
    }

    /// Writes `pages` (bus addresses) into FRMR `mr`'s page-list directory (§9 MRs) and
    /// returns the directory's address (`pl_pdir_dma`) for its FAST_REG_MR WQE. Runs in a
    /// post: no allocation, no command.
    ///
    /// # Errors
    /// [`PvrdmaError::InvalidParameter`] for an MR with no page list or more pages than it
    /// holds.
    #[inline(always)]
    pub fn fast_reg_pages(
        &self,
        mr: u32,
        pages: impl IntoIterator<Item = u64>,
    ) -> Result<u64, PvrdmaError> {
        self.seam.tables.with_mr_dir(mr, |dir| {
            for (i, p) in pages.into_iter().enumerate() {
                // CAST: at most the directory's capacity, a u32.
                dir.set_page(i as u32, p)?;
            }
            Ok(dir.dma())
        })
    }

    // ----- CQs -----

    /// CREATE_CQ with `entries` (a power of two); `done` gets the CQ handle.
    pub fn create_cq(&self, entries: u32, done: Done<u32>) {
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
                return done(Err(PvrdmaError::BadResponse));
            }
            let adopted = ring.lock().set_device_entries(resp.cqe);
            done(
                adopted
                    .map(|()| h)
                    .inspect_err(|_| s.destroy::<CqRecord>(h)),
            );
        });
    }

    /// Routes the device's notifications (CQNE) and errors (CQ_ERR) for `cq` to `events`:
    /// from then until [`Verbs::destroy_cq`] they arrive at DISPATCH_LEVEL with no driver lock
    /// held, completions on `target` (the CQ's own DPC, allocated here: PASSIVE_LEVEL) unless
    /// it is [`Processor::Current`].
    ///
    /// # Errors
    /// [`PvrdmaError::InvalidParameter`] for a handle out of range or routed already;
    /// [`PvrdmaError::NoMemory`].
    pub fn route_cq(
        &self,
        cq: u32,
        events: Arc<dyn CqEvents>,
        target: Processor,
    ) -> Result<(), PvrdmaError> {
        self.dev().register_cq_on(cq, events, target)
    }

    /// DESTROY_CQ; the CQ's events stop before this returns, but for a notification already
    /// queued to its processor, which may still run once.
    pub fn destroy_cq(&self, cq: u32) {
        drop(self.dev().unregister_cq(cq));
        self.seam.destroy::<CqRecord>(cq);
    }

    /// The reader of CQ `cq` (its ring and its arm doorbells).
    ///
    /// # Errors
    /// [`PvrdmaError::InvalidParameter`] for a CQ these verbs did not create;
    /// [`PvrdmaError::NoMemory`].
    pub fn cq_reader(&self, cq: u32) -> Result<CqReader, PvrdmaError> {
        let ring = self.seam.tables.cq_ring(cq)?;
        let dev = self.dev();
        ring.lock().reader(CqBells {
            arm: dev.bell(CqDoorbell::arm(cq)),
            arm_solicited: dev.bell(CqDoorbell::arm_solicited(cq)),
            poll: dev.bell(CqDoorbell::poll(cq)),
        })
    }

    // ----- QPs -----

    /// CREATE_QP (RC), then RESET → INIT; `done` gets the QP handle. When the INIT fails the
    /// QP is destroyed and `done` gets the error.
    pub fn create_qp(&self, spec: &QpSpec, done: Done<u32>) {
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

    /// DESTROY_QP.
    pub fn destroy_qp(&self, qp: u32) {
        // An unused flush reservation is released uncalled; the DESTROY flushes anyway.
        self.seam.destroy::<QpRecord>(qp);
    }

    /// MODIFY_QP → ERR for NdkFlush: the device completes every outstanding WQE with
    /// WR_FLUSH_ERR (M32). Only the first flush of a QP issues it (it was reserved at
    /// create, so it cannot fail); the QP stays in ERR.
    pub fn flush_qp(&self, qp: u32) {
        // NdkFlush may run at DISPATCH_LEVEL and cannot fail: submit the MODIFY_QP reserved
        // at create without waiting; the device writes the flush CQEs before its response
        // (M32). No reservation left means an earlier flush already took the QP to ERR.
        if let Some(f) = self.seam.tables.take_flush(qp) {
            self.dev().cmd().submit_reserved(f, &flush_qp(qp));
        }
    }

    /// The wire QP number of QP `qp` (CREATE_QP's `qpn`: from VERSION 20 it differs from
    /// the handle, pvrdma.md §8 pitfall 9). `None` for a QP these verbs do not know.
    pub fn qp_number(&self, qp: u32) -> Option<u32> {
        self.seam.tables.qp_number(qp)
    }

    /// The writers of QP `qp`: its send queue and, unless it takes receives from an SRQ, its
    /// receive queue. Posts then write WQEs, publish `prod_tail` and ring doorbells through
    /// them without calling the verbs.
    ///
    /// # Errors
    /// As [`Verbs::cq_reader`].
    pub fn qp_writers(&self, qp: u32) -> Result<(SendWriter, Option<RecvWriter>), PvrdmaError> {
        let q = self.seam.tables.qp_queues(qp)?;
        let g = q.lock();
        let dev = self.dev();
        let sq = g.sq.writer(dev.bell(QpDoorbell::send(qp)))?;
        let rq = match &g.rq {
            Some(rq) => Some(rq.writer(dev.bell(QpDoorbell::recv(qp)))?),
            None => None,
        };
        Ok((sq, rq))
    }

    // ----- SRQs -----

    /// CREATE_SRQ; `done` gets the SRQ handle.
    pub fn create_srq(&self, spec: &SrqSpec, done: Done<u32>) {
        let prepared = prepare_srq(self.dev(), self.seam.tables.quarantine(), spec);
        self.create(prepared, done, |s, h, rec, done| {
            done(s.file(h, rec).map(|()| h));
        });
    }

    /// MODIFY_SRQ `attr_mask` = LIMIT (M44).
    pub fn modify_srq_limit(&self, srq: u32, limit: u32, done: Done<()>) {
        submit_then(self.dev().cmd(), &modify_srq_limit(srq, limit), done);
    }

    /// Routes the device's SRQ_LIMIT_REACHED and SRQ_ERR for `srq` to `events` (as
    /// [`Verbs::route_cq`]), until [`Verbs::destroy_srq`].
    ///
    /// # Errors
    /// As [`Verbs::route_cq`].
    pub fn route_srq(&self, srq: u32, events: Arc<dyn SrqEvents>) -> Result<(), PvrdmaError> {
        self.dev().register_srq(srq, events)
    }

    /// WQEs posted to the SRQ and not yet taken by a QP (`prod_tail − cons_head`, M45), for
    /// the check an arm makes (the device never raises the event at arm time, M44). 0 for
    /// an unknown SRQ.
    pub fn srq_queued(&self, srq: u32) -> u32 {
        let queue = self.seam.tables.srq_queue(srq);
        queue.map_or(0, |q| q.lock().outstanding().unwrap_or(0))
    }

    /// DESTROY_SRQ; the SRQ's events stop before this returns.
    pub fn destroy_srq(&self, srq: u32) {
        drop(self.dev().unregister_srq(srq));
        self.seam.destroy::<SrqRecord>(srq);
    }

    /// The writer of SRQ `srq`.
    ///
    /// # Errors
    /// As [`Verbs::cq_reader`].
    pub fn srq_writer(&self, srq: u32) -> Result<RecvWriter, PvrdmaError> {
        let q = self.seam.tables.srq_queue(srq)?;
        q.lock().writer(self.dev().bell(SrqDoorbell::recv(srq)))
    }

    // ----- the device -----

    /// Routes device-wide events (port events, DEVICE_FATAL) to `events` (`None`: nowhere).
    pub fn route_device(&self, events: Option<Arc<dyn DeviceEvents>>) {
        self.dev().set_device_events(events);
    }

    /// `len` bytes of memory the device can read and write (the QP1 MAD buffers).
    /// PASSIVE_LEVEL, as the OS seam's allocator.
    ///
    /// # Errors
    /// [`PvrdmaError::NoMemory`].
    pub fn alloc_dma(&self, len: usize) -> Result<SharedDma, PvrdmaError> {
        Ok(DmaBuffer::alloc(self.dev().platform().dma(), len)?.share())
    }

    /// Bus address of the locked page `pfn` (an MDL PFN), for a registration's page list
    /// (IRQL ≤ DISPATCH_LEVEL): the physical address, which is what PVRDMA DMA uses when no
    /// IOMMU remaps the guest; the Windows build must route this through the DMA adapter of
    /// the OS seam (not written yet) when DMA remapping is on.
    pub fn page_address(&self, pfn: u64) -> Option<u64> {
        pfn.checked_mul(PAGE_SIZE as u64)
    }

    /// Blocks until `cond` holds (PASSIVE_LEVEL only).
    pub fn wait_until(&self, cond: &dyn Fn() -> bool) {
        while !self.dev().platform().wait_until(cond, 1_000_000_000) {}
    }
}

#[cfg(test)]
mod tests;
