//! The device commands the seam issues (pvrdma.md §8–§10): each CREATE built from the NDK's
//! spec together with the queue memory it names and the object's reserved DESTROY, the QP
//! state changes, and [`submit_then`], which turns a submitted command into one completion.
//!
//! A DESTROY is reserved (command entry and completion allocated) before its CREATE is
//! submitted, and its completion owns the object's queue memory: closing an object then
//! allocates nothing and cannot fail (ndkpi.md §5.1), and the memory is freed only once the
//! device has answered the DESTROY, when it no longer touches it (style.md §6).
#![deny(unsafe_code)]

use alloc::sync::Arc;

use super::tables::{
    CqRecord, Locked, MrRecord, PdRecord, QpRecord, Quarantine, SrqRecord, locked,
};
use super::{MrSpec, QpSpec, SrqSpec};
use crate::os::SpinLock;
use crate::os::alloc::try_arc;
use crate::pvrdma::PvrdmaError;
use crate::pvrdma::cmd::{
    CmdChannel, Command, CreateCq, CreateMr, CreatePd, CreateQp, CreateSrq, ModifyQp, ModifySrq,
    QpAttr, QpAttrMask, QpState, QpType, Reserved, SrqAttr, mr_flags, srq_attr_mask,
};
use crate::pvrdma::device::Device;
use crate::pvrdma::pdir::PageDir;
use crate::pvrdma::queue::{CqRing, QpLayout, QpQueues, SrqLayout, SrqQueue};
use crate::pvrdma::wqe::AccessFlags;

/// The access a QP is created and initialized with: every NDK QP may be the target of
/// remote reads and writes (the MR keys decide what is reachable).
const QP_ACCESS: AccessFlags = AccessFlags::LOCAL_WRITE
    .union(AccessFlags::REMOTE_READ)
    .union(AccessFlags::REMOTE_WRITE);

/// Reserves a DESTROY whose completion frees `keep` (the object's queue memory) once the
/// device has let go of it: the DESTROY succeeded, or the channel shut down, which it does
/// only after the device was RESET. A DESTROY that timed out or failed leaves the object,
/// and so the memory, with the device: `keep` goes to the quarantine (if the seam is gone,
/// it is leaked: never freed under the device).
pub(super) fn reserve_destroy<C: Command, K: Send + 'static>(
    ch: &CmdChannel,
    quarantine: &Arc<Quarantine>,
    keep: K,
) -> Result<Reserved<C>, PvrdmaError> {
    // Weak: a quarantined record holds its own reserved DESTROY, and so this completion.
    let quarantine = Arc::downgrade(quarantine);
    ch.reserve::<C>(move |r| match r {
        Ok(_) | Err(PvrdmaError::Shutdown) => drop(keep),
        Err(_) => match quarantine.upgrade() {
            Some(q) => q.hold(keep),
            None => core::mem::forget(keep),
        },
    })
}

/// Submits `c` and runs `next` exactly once with its outcome: from the command-completion
/// DPC, or right away when the submit itself fails.
pub(super) fn submit_then<C, F>(ch: &CmdChannel, c: &C, next: F)
where
    C: Command,
    C::Resp: Send + 'static,
    F: FnOnce(Result<C::Resp, PvrdmaError>) + Send + 'static,
{
    let cell: Locked<Option<F>> = match try_arc(SpinLock::new(None)) {
        Ok(cell) => cell,
        Err(_) => return next(Err(PvrdmaError::NoMemory)),
    };
    *cell.lock() = Some(next);
    let in_dpc = cell.clone();
    let submitted = ch.submit(c, move |r| {
        let f = in_dpc.lock().take();
        if let Some(f) = f {
            f(r);
        }
    });
    if let Err(e) = submitted {
        let f = cell.lock().take();
        if let Some(f) = f {
            f(Err(e));
        }
    }
}

/// RESET → INIT with remote access, so receives can be pre-posted (§5.3).
pub(super) fn init_qp(h: u32) -> ModifyQp {
    ModifyQp {
        qp_handle: h,
        attr_mask: QpAttrMask::STATE
            | QpAttrMask::PKEY_INDEX
            | QpAttrMask::PORT
            | QpAttrMask::ACCESS_FLAGS,
        attr: QpAttr {
            qp_state: QpState::Init as u32,
            qp_access_flags: QP_ACCESS.bits(),
            port_num: 1,
            ..QpAttr::default()
        },
    }
}

/// Any state → ERR: the device completes every outstanding WQE with WR_FLUSH_ERR (M32).
pub(super) fn flush_qp(h: u32) -> ModifyQp {
    ModifyQp {
        qp_handle: h,
        attr_mask: QpAttrMask::STATE,
        attr: QpAttr {
            qp_state: QpState::Err as u32,
            ..QpAttr::default()
        },
    }
}

/// MODIFY_SRQ of the limit only (M44).
pub(super) fn modify_srq_limit(h: u32, limit: u32) -> ModifySrq {
    ModifySrq {
        srq_handle: h,
        attr_mask: srq_attr_mask::LIMIT,
        attr: SrqAttr {
            srq_limit: limit,
            ..SrqAttr::default()
        },
    }
}

/// The PD's DMA MR (its privileged token): LOCAL_WRITE over all of memory (M11).
pub(super) fn dma_mr(pd: u32) -> CreateMr {
    CreateMr {
        start: 0,
        length: 0,
        pdir_dma: 0,
        pd_handle: pd,
        access_flags: AccessFlags::LOCAL_WRITE,
        flags: mr_flags::DMA,
        nchunks: 0,
    }
}

/// The CREATE_PD, and the records of the PD and of its DMA MR (the DESTROYs of both,
/// reserved before the PD exists).
pub(super) fn prepare_pd(
    dev: &Device,
    q: &Arc<Quarantine>,
) -> Result<(CreatePd, (PdRecord, MrRecord)), PvrdmaError> {
    let ch = dev.cmd();
    let pd = PdRecord {
        destroy: reserve_destroy(ch, q, ())?,
    };
    let dma = MrRecord::Dma {
        destroy: reserve_destroy(ch, q, ())?,
    };
    Ok((CreatePd { ctx_handle: 0 }, (pd, dma)))
}

/// Allocates a CQ ring of `entries`, the CREATE_CQ naming it and the CQ's record (the ring
/// and its reserved DESTROY), to be filed once the device answers with the handle.
pub(super) fn prepare_cq(
    dev: &Device,
    q: &Arc<Quarantine>,
    entries: u32,
) -> Result<(CreateCq, CqRecord), PvrdmaError> {
    let ring = CqRing::alloc(dev.platform().dma(), entries)?;
    let cmd = CreateCq {
        pdir_dma: ring.pdir_dma(),
        ctx_handle: 0,
        cqe: entries,
        nchunks: ring.nchunks(),
    };
    let ring = locked(ring)?;
    let destroy = reserve_destroy(dev.cmd(), q, ring.clone())?;
    Ok((cmd, CqRecord { ring, destroy }))
}

/// Allocates a QP's queues, the CREATE_QP naming them and the QP's record (the queues, its
/// reserved DESTROY and its reserved flush).
pub(super) fn prepare_qp(
    dev: &Device,
    q: &Arc<Quarantine>,
    spec: &QpSpec,
) -> Result<(CreateQp, QpRecord), PvrdmaError> {
    let recv = match spec.srq {
        Some(_) => None,
        None => Some((spec.max_recv_wr, spec.max_recv_sge)),
    };
    let layout = QpLayout::new(spec.max_send_wr, spec.max_send_sge, recv)?;
    let queues = QpQueues::alloc(dev.platform().dma(), &layout)?;
    let cmd = CreateQp {
        pdir_dma: queues.pdir_dma(),
        pd_handle: spec.pd,
        send_cq_handle: spec.send_cq,
        recv_cq_handle: spec.recv_cq,
        srq_handle: spec.srq.unwrap_or(0),
        max_send_wr: spec.max_send_wr,
        max_recv_wr: spec.max_recv_wr,
        max_send_sge: spec.max_send_sge,
        max_recv_sge: spec.max_recv_sge,
        max_inline_data: 0,
        lkey: 0,
        access_flags: QP_ACCESS,
        total_chunks: layout.total_chunks as u16,
        send_chunks: layout.send_chunks as u16,
        max_atomic_arg: 0,
        sq_sig_all: 0,
        qp_type: QpType::Rc,
        is_srq: u8::from(spec.srq.is_some()),
    };
    let queues = locked(queues)?;
    let ch = dev.cmd();
    let flush = ch.reserve::<ModifyQp>(|_| {})?;
    let destroy = reserve_destroy(ch, q, queues.clone())?;
    let record = QpRecord {
        qpn: 0,
        queues,
        destroy,
        flush: Some(flush),
    };
    Ok((cmd, record))
}

/// Allocates an SRQ ring, the CREATE_SRQ naming it and the SRQ's record (the ring and its
/// reserved DESTROY).
pub(super) fn prepare_srq(
    dev: &Device,
    q: &Arc<Quarantine>,
    spec: &SrqSpec,
) -> Result<(CreateSrq, SrqRecord), PvrdmaError> {
    let layout = SrqLayout::new(spec.max_wr, spec.max_sge)?;
    let queue = SrqQueue::alloc(dev.platform().dma(), &layout)?;
    let cmd = CreateSrq {
        pdir_dma: queue.pdir_dma(),
        pd_handle: spec.pd,
        nchunks: queue.nchunks(),
        attr: SrqAttr {
            max_wr: spec.max_wr,
            max_sge: spec.max_sge,
            srq_limit: spec.limit,
        },
        srq_type: 0,
    };
    let queue = locked(queue)?;
    let destroy = reserve_destroy(dev.cmd(), q, queue.clone())?;
    Ok((cmd, SrqRecord { queue, destroy }))
}

/// The CREATE_MR for `spec` and the MR's record: the page directory the command names (filled
/// for a normal MR, empty for an FRMR, whose fast-register WQEs rewrite it, §9 MRs) and the
/// reserved DESTROY, which frees the directory.
pub(super) fn prepare_mr(
    dev: &Device,
    q: &Arc<Quarantine>,
    pd: u32,
    spec: &MrSpec<'_>,
) -> Result<(CreateMr, MrRecord), PvrdmaError> {
    let dir = |n: u32| -> Result<Arc<PageDir>, PvrdmaError> {
        let d = PageDir::new(dev.platform().dma(), n)?;
        try_arc(d).map_err(|_| PvrdmaError::NoMemory)
    };
    let (cmd, dir) = match *spec {
        MrSpec::Dma => (dma_mr(pd), None),
        MrSpec::FastReg { max_pages } => (
            CreateMr {
                start: 0,
                length: 0,
                pdir_dma: 0,
                pd_handle: pd,
                access_flags: AccessFlags::empty(),
                flags: mr_flags::FRMR,
                nchunks: max_pages,
            },
            Some(dir(max_pages)?),
        ),
        MrSpec::Normal {
            start,
            length,
            access,
            pages,
        } => {
            let n = u32::try_from(pages.len()).map_err(|_| PvrdmaError::InvalidParameter)?;
            let d = dir(n)?;
            for (i, &p) in pages.iter().enumerate() {
                d.set_page(i as u32, p)?;
            }
            (
                CreateMr {
                    start,
                    length,
                    pdir_dma: d.dma(),
                    pd_handle: pd,
                    access_flags: access,
                    flags: mr_flags::NORMAL,
                    nchunks: n,
                },
                Some(d),
            )
        }
    };
    let destroy = reserve_destroy(dev.cmd(), q, dir.clone())?;
    Ok((cmd, MrRecord::new(dir, destroy)))
}
