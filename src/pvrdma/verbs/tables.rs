//! The seam's one table per kind of device handle (PD, MR, CQ, QP, SRQ): one record per live
//! object this seam created, holding everything the seam keeps for it, filed under the handle
//! the device returned and taken out whole by its DESTROY.
//!
//! The other layers keep their own table per kind: the device (`pvrdma::device`) a CQ's,
//! QP's or SRQ's event handler, to route the events it reads off its rings; the NDK device
//! (`NdkDevice`) its live NDK objects, for device-wide events and CQE → QP lookups.
#![deny(unsafe_code)]

use alloc::boxed::Box;
use alloc::sync::Arc;
use core::sync::atomic::{AtomicU32, Ordering};

use super::commands::submit_then;
use crate::os::SpinLock;
use crate::os::alloc::{KBox, KVec, try_arc, try_box};
use crate::pvrdma::PvrdmaError;
use crate::pvrdma::cmd::{
    CmdChannel, Command, DestroyCq, DestroyMr, DestroyPd, DestroyQp, DestroySrq, ModifyQp, Reserved,
};
use crate::pvrdma::dsr::Caps;
use crate::pvrdma::pdir::PageDir;
use crate::pvrdma::queue::{CqRing, QpQueues, SrqQueue};
use crate::pvrdma::table::HandleTable;

/// A value several owners reach, behind a spin lock (the queue memory, shared by the record
/// and the DESTROY completion that frees it).
pub(super) type Locked<T> = Arc<SpinLock<T>>;

pub(super) fn locked<T>(v: T) -> Result<Locked<T>, PvrdmaError> {
    try_arc(SpinLock::new(v)).map_err(|_| PvrdmaError::NoMemory)
}

/// A live PD: its reserved DESTROY.
pub(super) struct PdRecord {
    pub(super) destroy: Reserved<DestroyPd>,
}

/// A live MR: its reserved DESTROY and, but for the PD's DMA MR, its page directory, which
/// NdkFastRegister rewrites for an FRMR (`fast_reg_pages`) and the DESTROY's completion
/// frees. Two variants rather than an optional directory, so that NdkFastRegister's lookup
/// checks one discriminant, as a table of directories alone would.
pub(super) enum MrRecord {
    /// The PD's DMA MR.
    Dma { destroy: Reserved<DestroyMr> },
    /// A normal MR or an FRMR.
    Paged {
        dir: Arc<PageDir>,
        destroy: Reserved<DestroyMr>,
    },
}

impl MrRecord {
    pub(super) fn new(dir: Option<Arc<PageDir>>, destroy: Reserved<DestroyMr>) -> MrRecord {
        match dir {
            Some(dir) => MrRecord::Paged { dir, destroy },
            None => MrRecord::Dma { destroy },
        }
    }
}

/// A live CQ: its ring, read once when the NDK CQ takes its reader (`cq_reader`), and its
/// reserved DESTROY, whose completion frees the ring.
pub(super) struct CqRecord {
    pub(super) ring: Locked<CqRing>,
    pub(super) destroy: Reserved<DestroyCq>,
}

/// A live QP: its queues, read once when the NDK QP takes its writers (`qp_writers`), its
/// reserved DESTROY, whose completion frees them, and its MODIFY_QP → ERR for NdkFlush,
/// which cannot fail either (§5.6).
///
/// The first flush takes `flush`; later ones find none and do nothing: the QP already is, or
/// is about to be, in ERR, where the device flushes every WQE posted later at its doorbell
/// (pvrdma.md M17), and this seam never moves a QP out of ERR.
pub(super) struct QpRecord {
    /// CREATE_QP's `qpn` (the number on the wire).
    pub(super) qpn: u32,
    pub(super) queues: Locked<QpQueues>,
    pub(super) destroy: Reserved<DestroyQp>,
    pub(super) flush: Option<Reserved<ModifyQp>>,
}

/// A live SRQ: its ring, read when the NDK SRQ takes its writer (`srq_writer`) and by the
/// arm-time limit check (`srq_queued`), and its reserved DESTROY, whose completion frees it.
pub(super) struct SrqRecord {
    pub(super) queue: Locked<SrqQueue>,
    pub(super) destroy: Reserved<DestroySrq>,
}

/// The record of one kind of handle.
pub(super) trait Record: Sized + Send + 'static {
    /// The kind's DESTROY command.
    type Destroy: Command;
    /// The DESTROY of object `h`.
    fn destroy_cmd(h: u32) -> Self::Destroy;
    /// The DESTROY reserved when the object was created.
    fn into_destroy(self) -> Reserved<Self::Destroy>;
    /// The kind's table.
    fn table(t: &Tables) -> &SpinLock<HandleTable<Self>>;
}

macro_rules! record {
    ($record:ident, $cmd:ident { $field:ident }, $table:ident, $destroy:pat => $reserved:ident) => {
        impl Record for $record {
            type Destroy = $cmd;
            fn destroy_cmd(h: u32) -> $cmd {
                $cmd { $field: h }
            }
            fn into_destroy(self) -> Reserved<$cmd> {
                let $destroy = self;
                $reserved
            }
            fn table(t: &Tables) -> &SpinLock<HandleTable<Self>> {
                &t.$table
            }
        }
    };
}
record!(PdRecord, DestroyPd { pd_handle }, pds, PdRecord { destroy } => destroy);
record!(CqRecord, DestroyCq { cq_handle }, cqs, CqRecord { destroy, .. } => destroy);
record!(QpRecord, DestroyQp { qp_handle }, qps, QpRecord { destroy, .. } => destroy);
record!(SrqRecord, DestroySrq { srq_handle }, srqs, SrqRecord { destroy, .. } => destroy);
record!(
    MrRecord,
    DestroyMr { mr_handle },
    mrs,
    (MrRecord::Dma { destroy } | MrRecord::Paged { destroy, .. }) => destroy
);

/// Submits the DESTROY reserved in `rec` for object `h`, allocating nothing; the rest of the
/// record is dropped (its queue memory lives on in the DESTROY's completion).
pub(super) fn kill<R: Record>(ch: &CmdChannel, h: u32, rec: R) {
    ch.submit_reserved(rec.into_destroy(), &R::destroy_cmd(h));
}

/// Memory the device may still write: the queue memory of an object whose DESTROY did not
/// succeed (timed out, or answered or refused with an error: the device may still own the
/// object), and the record of a created object whose handle could not be filed
/// ([`Tables::file`]). It is held, never freed while the device may run, and counted
/// ([`Quarantine::count`]); it is freed when the quarantine drops after the device was RESET
/// (its command channel shuts down only after the RESET, `Device` teardown), else leaked:
/// leaked memory is harmless, memory the device writes after a free is not.
pub(super) struct Quarantine {
    ch: Arc<CmdChannel>,
    held: SpinLock<KVec<KBox<dyn Send>>>,
    count: AtomicU32,
}

impl Quarantine {
    pub(super) fn new(ch: Arc<CmdChannel>) -> Quarantine {
        Quarantine {
            ch,
            held: SpinLock::new(KVec::new()),
            count: AtomicU32::new(0),
        }
    }

    /// Takes `keep` out of circulation (from the command DPC, or a CREATE's completion). When
    /// no memory is left to hold it, it is leaked instead: never dropped.
    pub(super) fn hold<K: Send + 'static>(&self, keep: K) {
        self.count.fetch_add(1, Ordering::Relaxed);
        // The box is allocated empty, so that a failed allocation cannot drop `keep`.
        let Ok(mut slot) = try_box(None::<K>) else {
            return core::mem::forget(keep);
        };
        *slot = Some(keep);
        let item = slot.map_box(|b| b as Box<dyn Send>);
        let mut held = self.held.lock();
        if held.try_reserve(1).is_err() {
            drop(held);
            return core::mem::forget(item);
        }
        if let Err(item) = held.push_within_capacity(item) {
            drop(held);
            core::mem::forget(item);
        }
    }

    /// Objects quarantined so far (diagnostics).
    pub(super) fn count(&self) -> u32 {
        self.count.load(Ordering::Relaxed)
    }
}

impl Drop for Quarantine {
    fn drop(&mut self) {
        let reset = self.ch.is_shut_down();
        let mut held = self.held.lock();
        while let Some(item) = held.pop() {
            if reset {
                drop(item);
            } else {
                core::mem::forget(item);
            }
        }
    }
}

/// Every live object the seam created, by kind and device handle. Written when a CREATE
/// completes (in the command DPC) and by DESTROY; read when an NDK object takes its ring
/// handles, by NdkFastRegister (`mrs`), NdkFlush (`qps`) and the SRQ limit check (`srqs`).
/// A DESTROY is submitted only by taking its record out, so each runs once.
pub(super) struct Tables {
    pds: SpinLock<HandleTable<PdRecord>>,
    mrs: SpinLock<HandleTable<MrRecord>>,
    cqs: SpinLock<HandleTable<CqRecord>>,
    qps: SpinLock<HandleTable<QpRecord>>,
    srqs: SpinLock<HandleTable<SrqRecord>>,
    quarantine: Arc<Quarantine>,
}

fn table<T>(bound: u32) -> Result<SpinLock<HandleTable<T>>, PvrdmaError> {
    // Handles are below `max_*` (M10), which M5 bounds by 65536.
    let t = HandleTable::new(bound.min(65536))?;
    Ok(SpinLock::new(t))
}

impl Tables {
    /// Empty tables sized by the device caps, and the quarantine of the device's memory
    /// (PASSIVE_LEVEL, at device start).
    pub(super) fn new(c: &Caps, ch: Arc<CmdChannel>) -> Result<Tables, PvrdmaError> {
        Ok(Tables {
            pds: table(c.max_pd)?,
            mrs: table(c.max_mr)?,
            cqs: table(c.max_cq)?,
            qps: table(c.max_qp)?,
            srqs: table(c.max_srq)?,
            quarantine: try_arc(Quarantine::new(ch)).map_err(|_| PvrdmaError::NoMemory)?,
        })
    }

    /// Where memory the device may still write goes ([`Quarantine`]).
    pub(super) fn quarantine(&self) -> &Arc<Quarantine> {
        &self.quarantine
    }

    /// Files `rec` under the new object's handle `h`, the handle of a CREATE response.
    ///
    /// A handle this seam cannot record (out of range, against M10, or held by a live object)
    /// fails the create with [`PvrdmaError::BadResponse`] (STATUS_INTERNAL_ERROR: a device error) and
    /// touches nothing filed: a DESTROY of `h` would destroy the live object, not the new one,
    /// and no command names the new one. The device may still be using the new object's queue
    /// memory, so the record is quarantined ([`Quarantine`]): neither its memory nor its
    /// reserved DESTROY (whose completion would free that memory) is released before the
    /// device is RESET.
    pub(super) fn file<R: Record>(&self, h: u32, rec: R) -> Result<(), PvrdmaError> {
        let filed = R::table(self).lock().try_put(h, rec);
        filed.map_err(|rec| {
            self.quarantine.hold(rec);
            PvrdmaError::BadResponse
        })
    }

    /// Objects whose memory was quarantined: a handle that could not be filed, or a DESTROY
    /// that did not succeed (diagnostics).
    pub(super) fn quarantined(&self) -> u32 {
        self.quarantine.count()
    }

    /// Takes object `h`'s record out (its DESTROY is then the caller's to submit).
    pub(super) fn take<R: Record>(&self, h: u32) -> Option<R> {
        R::table(self).lock().remove(h)
    }

    /// DESTROY for object `h` (close, or a create that failed after its CREATE), allocating
    /// nothing: the reserved one, whose completion frees the object's memory on the device's
    /// response. With no record (an object this seam did not create, or one already
    /// destroyed) the command is submitted unreserved, if it can be.
    pub(super) fn destroy<R: Record>(&self, ch: &CmdChannel, h: u32) {
        match self.take::<R>(h) {
            Some(rec) => kill(ch, h, rec),
            None => submit_then(ch, &R::destroy_cmd(h), |_| {}),
        }
    }

    /// CQ `h`'s ring (the table lock is held only for the clone).
    pub(super) fn cq_ring(&self, h: u32) -> Result<Locked<CqRing>, PvrdmaError> {
        let ring = self.cqs.lock().get(h).map(|r| r.ring.clone());
        ring.ok_or(PvrdmaError::InvalidParameter)
    }

    /// QP `h`'s queues.
    pub(super) fn qp_queues(&self, h: u32) -> Result<Locked<QpQueues>, PvrdmaError> {
        let queues = self.qps.lock().get(h).map(|r| r.queues.clone());
        queues.ok_or(PvrdmaError::InvalidParameter)
    }

    /// SRQ `h`'s ring.
    pub(super) fn srq_queue(&self, h: u32) -> Result<Locked<SrqQueue>, PvrdmaError> {
        let queue = self.srqs.lock().get(h).map(|r| r.queue.clone());
        queue.ok_or(PvrdmaError::InvalidParameter)
    }

    /// Runs `write` on MR `h`'s page directory (an FRMR's or a normal MR's; the DMA MR has
    /// none) under the table lock. The lock keeps the directory alive (a DESTROY takes the
    /// record out under it), so NdkFastRegister, which runs this in its post, counts no
    /// reference; the lock is held for the page writes only.
    #[inline(always)]
    pub(super) fn with_mr_dir<T>(
        &self,
        h: u32,
        write: impl FnOnce(&PageDir) -> Result<T, PvrdmaError>,
    ) -> Result<T, PvrdmaError> {
        match self.mrs.lock().get(h) {
            Some(MrRecord::Paged { dir, .. }) => write(dir),
            _ => Err(PvrdmaError::InvalidParameter),
        }
    }

    /// QP `h`'s wire number.
    pub(super) fn qp_number(&self, h: u32) -> Option<u32> {
        self.qps.lock().get(h).map(|r| r.qpn)
    }

    /// QP `h`'s flush, if no flush took it yet.
    pub(super) fn take_flush(&self, h: u32) -> Option<Reserved<ModifyQp>> {
        self.qps.lock().get_mut(h).and_then(|r| r.flush.take())
    }
}
