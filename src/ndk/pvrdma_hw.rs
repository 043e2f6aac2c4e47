//! [`Hardware`] over the PVRDMA hardware layer (`crate::pvrdma`): the NDK objects' device
//! seam implemented with the command channel, the queue rings and the UAR doorbells
//! (pvrdma.md §1 "NDK → PVRDMA mapping", §8–§13).
//!
//! Written for the ndkperf/benchmark issue because the data-path issue's implementation had
//! not landed; expect it to be reconciled with (or replaced by) that one at merge.
//!
//! Per-object driver state (queue rings, FRMR page lists) lives in tables indexed by the
//! device handle, each slot behind its own spin lock: posts and polls on different objects
//! never contend, and a handle from the NDK layer is bounds-checked before use (style.md §10).
//! Everything read from device memory (ring indices, CQEs) is validated by the queue types
//! (M14, §11). Hot-path methods allocate nothing and issue no command; a doorbell is
//! [`Device::ring`]: a barrier and one volatile store to the mapped UAR page.
#![deny(unsafe_code)]

use alloc::boxed::Box;
use alloc::sync::{Arc, Weak};
use core::sync::atomic::{AtomicU64, Ordering};

use super::adapter::NdkDevice;
use super::dispatch::sge_address;
use super::error::HwError;
use super::hw::{
    FastRegWqe, Hardware, HwCaps, HwCqe, MrKeys, MrSpec, QpSpec, RecvWqe, SendWqe, SrqSpec,
    WrOpcode as NdkOpcode,
};
use super::object::try_vec;
use crate::os::SpinLock;
use crate::os::alloc::try_arc;
use crate::pvrdma::PvrdmaError;
use crate::pvrdma::cmd::{
    AhAttr, CreateCq, CreateMr, CreatePd, CreateQp, CreateSrq, DestroyCq, DestroyMr, DestroyPd,
    DestroyQp, DestroySrq, ModifyQp, ModifySrq, QpAttr, QpAttrMask, QpState, QpType, SrqAttr,
    mr_flags, srq_attr_mask,
};
use crate::pvrdma::cqe::{BadCqe, CqeError, CqeLimits};
use crate::pvrdma::device::{CqEvents, Device, MAX_MSG_SZ};
use crate::pvrdma::pdir::PageDir;
use crate::pvrdma::queue::{CqRing, QpLayout, QpQueues, SrqLayout, SrqQueue};
use crate::pvrdma::uar::{CqDoorbell, QpDoorbell, SrqDoorbell};
use crate::pvrdma::wqe::{AccessFlags, Ex, FastReg, SendFlags, SendWr, Sge, WrBody, WrOpcode};

/// Most SGEs one WQE carries (the device's `max_sge` is bounded by it at open).
const MAX_SGE: usize = 16;
/// Handle tables are bounded like the NDK layer's (M5: limits ≤ 65536).
const MAX_TABLE: u32 = 65536;

fn hw_err(e: PvrdmaError) -> HwError {
    match e {
        PvrdmaError::NoMemory | PvrdmaError::QueueFull => HwError::NoResources,
        PvrdmaError::CommandFailed { err: 12, .. } => HwError::NoResources,
        PvrdmaError::CommandRejected { err: 12, .. } => HwError::NoResources,
        PvrdmaError::InvalidParameter
        | PvrdmaError::NotSupported
        | PvrdmaError::CommandFailed { .. }
        | PvrdmaError::CommandRejected { .. } => HwError::Invalid,
        _ => HwError::Failed,
    }
}

/// One QP's rings and connection identity.
struct QpRings {
    q: QpQueues,
    qpn: u32,
}

/// Where a CQNE for one CQ goes: the NDK device, once attached.
struct CqForward {
    ndk: Arc<SpinLock<Weak<NdkDevice>>>,
    handle: u32,
}

impl CqEvents for CqForward {
    fn completion(&self) {
        let ndk = self.ndk.lock().upgrade();
        if let Some(d) = ndk {
            d.cq_notification(self.handle);
        }
    }
    fn error(&self) {
        let ndk = self.ndk.lock().upgrade();
        if let Some(d) = ndk {
            d.cq_error(self.handle, true);
        }
    }
}

/// Remote end of an RC connection (what the CM learns from REQ/REP, cm.md §5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RcPeer {
    /// Remote QPN.
    pub qpn: u32,
    /// Remote GID (RoCEv2: the peer's IP address as a GID).
    pub gid: [u8; 16],
    /// Next-hop MAC.
    pub mac: [u8; 6],
    /// PSN the peer starts its send queue at (our `rq_psn`).
    pub peer_sq_psn: u32,
    /// PSN our send queue starts at (the peer's `rq_psn`).
    pub sq_psn: u32,
}

/// The PVRDMA device as the NDK layer's [`Hardware`].
pub struct PvrdmaHw {
    dev: Device,
    caps: HwCaps,
    limits: CqeLimits,
    cqs: Box<[SpinLock<Option<CqRing>>]>,
    qps: Box<[SpinLock<Option<QpRings>>]>,
    srqs: Box<[SpinLock<Option<SrqQueue>>]>,
    frmrs: Box<[SpinLock<Option<PageDir>>]>,
    ndk: Arc<SpinLock<Weak<NdkDevice>>>,
    dropped_cqes: AtomicU64,
    lost_posts: AtomicU64,
}

fn table<T>(n: u32) -> Result<Box<[SpinLock<Option<T>>]>, HwError> {
    try_vec(n.min(MAX_TABLE) as usize, || SpinLock::new(None)).map_err(|_| HwError::NoResources)
}

impl PvrdmaHw {
    /// Wraps a probed device (PASSIVE_LEVEL, at device start).
    ///
    /// # Errors
    /// [`HwError::NoResources`] when the handle tables cannot be allocated.
    pub fn new(dev: Device) -> Result<Arc<PvrdmaHw>, HwError> {
        let c = *dev.caps();
        let caps = HwCaps {
            vendor_id: c.vendor_id,
            vendor_part_id: c.vendor_part_id,
            max_mr_size: c.max_mr_size,
            max_qp_wr: c.max_qp_wr,
            max_sge: c.max_sge.min(MAX_SGE as u32),
            max_sge_rd: c.max_sge_rd.min(MAX_SGE as u32),
            max_cq: c.max_cq,
            max_cqe: c.max_cqe,
            max_qp_rd_atom: c.max_qp_rd_atom,
            max_qp_init_rd_atom: c.max_qp_init_rd_atom,
            max_srq: c.max_srq,
            max_srq_wr: c.max_srq_wr,
            max_srq_sge: c.max_srq_sge.min(MAX_SGE as u32),
            max_fast_reg_page_list_len: c.max_fast_reg_page_list_len,
            max_msg_sz: MAX_MSG_SZ,
        };
        let hw = PvrdmaHw {
            limits: dev.cqe_limits(),
            cqs: table(c.max_cq)?,
            qps: table(c.max_qp)?,
            srqs: table(c.max_srq)?,
            frmrs: table(c.max_mr)?,
            ndk: try_arc(SpinLock::new(Weak::new())).map_err(|_| HwError::NoResources)?,
            dropped_cqes: AtomicU64::new(0),
            lost_posts: AtomicU64::new(0),
            caps,
            dev,
        };
        try_arc(hw).map_err(|_| HwError::NoResources)
    }

    /// Routes CQ notifications and errors to `ndk` (after [`NdkDevice::new`]).
    pub fn attach(&self, ndk: &Arc<NdkDevice>) {
        *self.ndk.lock() = Arc::downgrade(ndk);
    }

    /// The hardware-layer device.
    pub fn device(&self) -> &Device {
        &self.dev
    }

    /// CQEs that failed validation and were dropped (diagnostics).
    pub fn dropped_cqes(&self) -> u64 {
        self.dropped_cqes.load(Ordering::Relaxed)
    }

    /// WQEs the ring refused although the NDK layer had reserved their slot (must stay 0).
    pub fn lost_posts(&self) -> u64 {
        self.lost_posts.load(Ordering::Relaxed)
    }

    /// The QPN of QP `handle` (what the CM sends in REQ/REP).
    pub fn qpn(&self, handle: u32) -> Option<u32> {
        self.qps
            .get(handle as usize)
            .and_then(|s| s.lock().as_ref().map(|q| q.qpn))
    }

    /// INIT → RTR → RTS for an RC QP towards `peer` (what the CM does on REP/RTU; the
    /// test wiring calls it directly until connection management lands). GID index 0.
    ///
    /// # Errors
    /// The device's answer to a MODIFY_QP.
    pub fn connect_rc(&self, handle: u32, peer: &RcPeer) -> Result<(), HwError> {
        type M = QpAttrMask;
        let a = QpAttr {
            rq_psn: peer.peer_sq_psn & 0x00FF_FFFF,
            sq_psn: peer.sq_psn & 0x00FF_FFFF,
            dest_qp_num: peer.qpn,
            path_mtu: 5, // 4096: the largest RoCE MTU; the port clamps it (M41)
            max_rd_atomic: self.caps.max_qp_init_rd_atom.min(16) as u8,
            max_dest_rd_atomic: self.caps.max_qp_rd_atom.min(16) as u8,
            min_rnr_timer: 1,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            port_num: 1,
            ah_attr: AhAttr {
                dgid: peer.gid,
                hop_limit: 64,
                ah_flags: 1,
                port_num: 1,
                dmac: peer.mac,
                ..AhAttr::default()
            },
            ..QpAttr::default()
        };
        self.modify_qp(
            handle,
            QpState::Rtr,
            M::AV
                | M::PATH_MTU
                | M::DEST_QPN
                | M::RQ_PSN
                | M::MAX_DEST_RD_ATOMIC
                | M::MIN_RNR_TIMER,
            a,
        )?;
        self.modify_qp(
            handle,
            QpState::Rts,
            M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::SQ_PSN | M::MAX_QP_RD_ATOMIC,
            a,
        )
    }

    fn modify_qp(
        &self,
        handle: u32,
        state: QpState,
        mask: QpAttrMask,
        attr: QpAttr,
    ) -> Result<(), HwError> {
        self.dev
            .cmd()
            .execute(&ModifyQp {
                qp_handle: handle,
                attr_mask: mask | QpAttrMask::STATE,
                attr: QpAttr {
                    qp_state: state as u32,
                    ..attr
                },
            })
            .map_err(hw_err)
    }

    fn put<T>(t: &[SpinLock<Option<T>>], handle: u32, v: T) -> Result<(), HwError> {
        let slot = t.get(handle as usize).ok_or(HwError::Failed)?;
        let mut g = slot.lock();
        if g.is_some() {
            // The device handed out a handle still in use: it misbehaves.
            return Err(HwError::Failed);
        }
        *g = Some(v);
        Ok(())
    }

    fn take<T>(t: &[SpinLock<Option<T>>], handle: u32) -> Option<T> {
        t.get(handle as usize).and_then(|s| s.lock().take())
    }

    fn sges<'s>(src: &[crate::ndkpi::NDK_SGE], buf: &'s mut [Sge; MAX_SGE]) -> &'s [Sge] {
        let n = src.len().min(MAX_SGE);
        for (d, s) in buf.iter_mut().zip(src) {
            *d = Sge {
                addr: sge_address(s),
                length: s.Length,
                lkey: s.MemoryRegionToken,
            };
        }
        buf.get(..n).unwrap_or(&[])
    }

    fn fast_reg_body(&self, f: &FastRegWqe<'_>) -> Option<WrBody> {
        let slot = self.frmrs.get(f.mr_handle as usize)?;
        let g = slot.lock();
        let pl = g.as_ref()?;
        let len = u32::try_from(f.pages.len()).ok()?;
        if len > pl.capacity() {
            return None;
        }
        for (i, p) in (0u32..).zip(f.pages) {
            pl.set_page(i, *p as u64).ok()?;
        }
        Some(WrBody::FastReg(FastReg {
            iova_start: f.iova_start,
            pl_pdir_dma: pl.dma(),
            page_shift: 12,
            page_list_len: len,
            length: f.length,
            access_flags: AccessFlags::from_bits_truncate(f.access) | AccessFlags::LOCAL_WRITE,
            rkey: f.key,
        }))
    }
}

impl Hardware for PvrdmaHw {
    fn caps(&self) -> &HwCaps {
        &self.caps
    }

    fn wait_until(&self, cond: &dyn Fn() -> bool) {
        while !self.dev.platform().wait_until(cond, 1_000_000_000) {}
    }

    fn create_pd(&self) -> Result<u32, HwError> {
        self.dev
            .cmd()
            .execute(&CreatePd { ctx_handle: 0 })
            .map_err(hw_err)
    }

    fn destroy_pd(&self, pd: u32) {
        let _ = self.dev.cmd().execute(&DestroyPd { pd_handle: pd });
    }

    fn create_cq(&self, entries: u32) -> Result<u32, HwError> {
        let mut ring = CqRing::alloc(self.dev.platform().dma(), entries).map_err(hw_err)?;
        let r = self
            .dev
            .cmd()
            .execute(&CreateCq {
                pdir_dma: ring.pdir_dma(),
                ctx_handle: 0,
                cqe: entries,
                nchunks: ring.nchunks(),
            })
            .map_err(hw_err)?;
        let undo = |e| {
            let _ = self.dev.cmd().execute(&DestroyCq {
                cq_handle: r.cq_handle,
            });
            e
        };
        ring.set_device_entries(r.cqe)
            .map_err(|e| undo(hw_err(e)))?;
        let fwd = try_arc(CqForward {
            ndk: self.ndk.clone(),
            handle: r.cq_handle,
        })
        .map_err(|_| undo(HwError::NoResources))?;
        self.dev
            .register_cq(r.cq_handle, fwd)
            .map_err(|e| undo(hw_err(e)))?;
        if let Err(e) = Self::put(&self.cqs, r.cq_handle, ring) {
            drop(self.dev.unregister_cq(r.cq_handle));
            return Err(undo(e));
        }
        Ok(r.cq_handle)
    }

    fn destroy_cq(&self, cq: u32) {
        let _ = self.dev.cmd().execute(&DestroyCq { cq_handle: cq });
        drop(self.dev.unregister_cq(cq));
        drop(Self::take(&self.cqs, cq));
    }

    fn create_mr(&self, pd: u32, spec: &MrSpec) -> Result<MrKeys, HwError> {
        let (flags, access, nchunks) = match *spec {
            MrSpec::Dma => (mr_flags::DMA, AccessFlags::LOCAL_WRITE, 0),
            MrSpec::FastReg { max_pages } => (mr_flags::FRMR, AccessFlags::empty(), max_pages),
            // The MDL's page list is not part of MrSpec yet (data-path issue).
            MrSpec::Normal { .. } => return Err(HwError::Invalid),
        };
        let pl = if flags == mr_flags::FRMR {
            Some(PageDir::new(self.dev.platform().dma(), nchunks).map_err(hw_err)?)
        } else {
            None
        };
        let r = self
            .dev
            .cmd()
            .execute(&CreateMr {
                start: 0,
                length: 0,
                pdir_dma: 0,
                pd_handle: pd,
                access_flags: access,
                flags,
                nchunks,
            })
            .map_err(hw_err)?;
        if let Some(pl) = pl
            && let Err(e) = Self::put(&self.frmrs, r.mr_handle, pl)
        {
            let _ = self.dev.cmd().execute(&DestroyMr {
                mr_handle: r.mr_handle,
            });
            return Err(e);
        }
        Ok(MrKeys {
            handle: r.mr_handle,
            lkey: r.lkey,
            rkey: r.rkey,
        })
    }

    fn destroy_mr(&self, mr: u32) {
        let _ = self.dev.cmd().execute(&DestroyMr { mr_handle: mr });
        drop(Self::take(&self.frmrs, mr));
    }

    fn create_qp(&self, spec: &QpSpec) -> Result<u32, HwError> {
        let rq = (spec.srq.is_none()).then_some((spec.max_recv_wr, spec.max_recv_sge));
        let layout = QpLayout::new(spec.max_send_wr, spec.max_send_sge, rq).map_err(hw_err)?;
        let q = QpQueues::alloc(self.dev.platform().dma(), &layout).map_err(hw_err)?;
        let total = u16::try_from(layout.total_chunks).map_err(|_| HwError::Invalid)?;
        let send = u16::try_from(layout.send_chunks).map_err(|_| HwError::Invalid)?;
        let (rwr, rsge) = rq.unwrap_or((0, 0));
        let r = self
            .dev
            .cmd()
            .execute(&CreateQp {
                pdir_dma: q.pdir_dma(),
                pd_handle: spec.pd,
                send_cq_handle: spec.send_cq,
                recv_cq_handle: spec.recv_cq,
                srq_handle: spec.srq.unwrap_or(0),
                max_send_wr: spec.max_send_wr,
                max_recv_wr: rwr,
                max_send_sge: spec.max_send_sge,
                max_recv_sge: rsge,
                max_inline_data: 0,
                lkey: 0,
                access_flags: AccessFlags::empty(),
                total_chunks: total,
                send_chunks: send,
                max_atomic_arg: 0,
                sq_sig_all: 0,
                qp_type: QpType::Rc,
                is_srq: u8::from(spec.srq.is_some()),
            })
            .map_err(hw_err)?;
        let handle = r.qp_handle;
        let init = QpAttr {
            pkey_index: 0,
            port_num: 1,
            qp_access_flags: (AccessFlags::LOCAL_WRITE
                | AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ)
                .bits(),
            ..QpAttr::default()
        };
        let done = self
            .modify_qp(
                handle,
                QpState::Init,
                QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::ACCESS_FLAGS,
                init,
            )
            .and_then(|()| Self::put(&self.qps, handle, QpRings { q, qpn: r.qpn }));
        if let Err(e) = done {
            let _ = self.dev.cmd().execute(&DestroyQp { qp_handle: handle });
            return Err(e);
        }
        Ok(handle)
    }

    fn destroy_qp(&self, qp: u32) {
        let _ = self.dev.cmd().execute(&DestroyQp { qp_handle: qp });
        drop(Self::take(&self.qps, qp));
    }

    fn flush_qp(&self, qp: u32) {
        let _ = self.modify_qp(qp, QpState::Err, QpAttrMask::empty(), QpAttr::default());
    }

    fn create_srq(&self, spec: &SrqSpec) -> Result<u32, HwError> {
        let layout = SrqLayout::new(spec.max_wr, spec.max_sge).map_err(hw_err)?;
        let q = SrqQueue::alloc(self.dev.platform().dma(), &layout).map_err(hw_err)?;
        let handle = self
            .dev
            .cmd()
            .execute(&CreateSrq {
                pdir_dma: q.pdir_dma(),
                pd_handle: spec.pd,
                nchunks: q.nchunks(),
                attr: SrqAttr {
                    max_wr: spec.max_wr,
                    max_sge: spec.max_sge,
                    srq_limit: spec.limit,
                },
                srq_type: 0,
            })
            .map_err(hw_err)?;
        if let Err(e) = Self::put(&self.srqs, handle, q) {
            let _ = self.dev.cmd().execute(&DestroySrq { srq_handle: handle });
            return Err(e);
        }
        Ok(handle)
    }

    fn modify_srq_limit(&self, srq: u32, limit: u32) -> Result<(), HwError> {
        self.dev
            .cmd()
            .execute(&ModifySrq {
                srq_handle: srq,
                attr_mask: srq_attr_mask::LIMIT,
                attr: SrqAttr {
                    max_wr: 0,
                    max_sge: 0,
                    srq_limit: limit,
                },
            })
            .map_err(hw_err)
    }

    fn srq_queued(&self, srq: u32) -> u32 {
        self.srqs
            .get(srq as usize)
            .and_then(|s| s.lock().as_ref().and_then(|q| q.outstanding().ok()))
            .unwrap_or(0)
    }

    fn destroy_srq(&self, srq: u32) {
        let _ = self.dev.cmd().execute(&DestroySrq { srq_handle: srq });
        drop(Self::take(&self.srqs, srq));
    }

    fn write_send_wqe(&self, qp: u32, _index: u32, w: &SendWqe<'_>) {
        let mut buf = [Sge::default(); MAX_SGE];
        let sges = Self::sges(w.sges, &mut buf);
        let (opcode, body, ex) = match w.opcode {
            NdkOpcode::RdmaWrite | NdkOpcode::RdmaRead => (
                if w.opcode == NdkOpcode::RdmaRead {
                    WrOpcode::RdmaRead
                } else {
                    WrOpcode::RdmaWrite
                },
                WrBody::Rdma {
                    remote_addr: w.remote_addr,
                    rkey: w.rkey,
                },
                Ex::None,
            ),
            NdkOpcode::Send => (WrOpcode::Send, WrBody::None, Ex::None),
            NdkOpcode::SendWithInv => (
                WrOpcode::SendWithInv,
                WrBody::None,
                Ex::InvalidateRkey(w.invalidate_rkey),
            ),
            NdkOpcode::LocalInv => (
                WrOpcode::LocalInv,
                WrBody::None,
                Ex::InvalidateRkey(w.invalidate_rkey),
            ),
            NdkOpcode::FastRegMr => {
                let body = w.fast_reg.as_ref().and_then(|f| self.fast_reg_body(f));
                match body {
                    Some(b) => (WrOpcode::FastRegMr, b, Ex::None),
                    None => {
                        self.lost_posts.fetch_add(1, Ordering::Relaxed);
                        return;
                    }
                }
            }
        };
        let wr = SendWr {
            wr_id: w.wr_id,
            opcode,
            flags: SendFlags::from_bits_truncate(w.send_flags)
                & (SendFlags::FENCE | SendFlags::SIGNALED | SendFlags::SOLICITED),
            ex,
            body,
            sges,
        };
        let posted = self
            .qps
            .get(qp as usize)
            .and_then(|s| s.lock().as_mut().map(|q| q.q.sq.post(&wr).is_ok()));
        if posted != Some(true) {
            self.lost_posts.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn ring_send(&self, qp: u32) {
        self.dev.ring(QpDoorbell::send(qp));
    }

    fn write_recv_wqe(&self, qp: u32, _index: u32, w: &RecvWqe<'_>) {
        let mut buf = [Sge::default(); MAX_SGE];
        let sges = Self::sges(w.sges, &mut buf);
        let posted = self.qps.get(qp as usize).and_then(|s| {
            s.lock()
                .as_mut()
                .and_then(|q| q.q.rq.as_mut())
                .map(|rq| rq.post(w.wr_id, sges).is_ok())
        });
        if posted != Some(true) {
            self.lost_posts.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn ring_recv(&self, qp: u32) {
        self.dev.ring(QpDoorbell::recv(qp));
    }

    fn write_srq_wqe(&self, srq: u32, _index: u32, w: &RecvWqe<'_>) {
        let mut buf = [Sge::default(); MAX_SGE];
        let sges = Self::sges(w.sges, &mut buf);
        let posted = self
            .srqs
            .get(srq as usize)
            .and_then(|s| s.lock().as_mut().map(|q| q.post(w.wr_id, sges).is_ok()));
        if posted != Some(true) {
            self.lost_posts.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn ring_srq(&self, srq: u32) {
        self.dev.ring(SrqDoorbell::recv(srq));
    }

    fn poll_cq(&self, cq: u32) -> Option<HwCqe> {
        let slot = self.cqs.get(cq as usize)?;
        let mut g = slot.lock();
        let ring = g.as_mut()?;
        loop {
            let mut out = [Err(BadCqe {
                wr_id: 0,
                reason: CqeError::Qp(0),
            })];
            // A corrupt `prod_tail` makes the CQ unusable: nothing more is taken from it.
            if ring.poll(&mut out, &self.limits).ok()? == 0 {
                return None;
            }
            let [first] = out;
            match first {
                Ok(c) => {
                    return Some(HwCqe {
                        wr_id: c.wr_id,
                        qp: c.qp,
                        status: c.status as u32,
                        byte_len: c.byte_len,
                        invalidated_rkey: c.invalidated_rkey(),
                    });
                }
                Err(_) => {
                    self.dropped_cqes.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }

    fn cq_has_entries(&self, cq: u32) -> bool {
        self.cqs
            .get(cq as usize)
            .and_then(|s| s.lock().as_ref().map(|r| r.pending().is_ok_and(|n| n > 0)))
            .unwrap_or(false)
    }

    fn arm_cq(&self, cq: u32, solicited_only: bool) {
        self.dev.ring(if solicited_only {
            CqDoorbell::arm_solicited(cq)
        } else {
            CqDoorbell::arm(cq)
        });
    }
}
