//! Creating device objects through the driver's typed commands and queue types, the way the
//! NDK layer does: PDs, CQs, QPs (with the RC/UD/GSI state walk), SRQs, MRs. Each queue comes
//! with the writer or reader the NDK layer would take from it, and WQEs and CQEs go through
//! those, the driver's one data path.

use pvrdma_ndk::pvrdma::PvrdmaError;
use pvrdma_ndk::pvrdma::cmd::{
    AhAttr, CreateCq, CreatePd, CreateQp, CreateQpResp, CreateSrq, DestroyCq, DestroyPd, DestroyQp,
    DestroySrq, ModifyQp, QpAttr, QpAttrMask, QpState, QpType, SrqAttr,
};
use pvrdma_ndk::pvrdma::cq::{CqBells, CqReader, CqState};
use pvrdma_ndk::pvrdma::cqe::CqeView;
use pvrdma_ndk::pvrdma::device::Device;
use pvrdma_ndk::pvrdma::queue::{CqRing, QpLayout, QpQueues, SrqLayout, SrqQueue};
use pvrdma_ndk::pvrdma::uar::{CqDoorbell, QpDoorbell, SrqDoorbell};
use pvrdma_ndk::pvrdma::wq::{RecvWriter, SendWriter};
use pvrdma_ndk::pvrdma::wqe::{AccessFlags, Sge, SqHeader};

/// The error a device error code surfaces as: the model answers every failed command through
/// ERR right after REQUEST (M8), which the channel reports as `CommandRejected`.
pub fn dev_err(code: u32, err: u32) -> PvrdmaError {
    PvrdmaError::CommandRejected { code, err }
}

/// CREATE_PD.
pub fn create_pd(dev: &Device) -> u32 {
    dev.cmd()
        .execute(&CreatePd { ctx_handle: 0 })
        .expect("CREATE_PD")
}

/// DESTROY_PD.
pub fn destroy_pd(dev: &Device, pd: u32) {
    dev.cmd()
        .execute(&DestroyPd { pd_handle: pd })
        .expect("DESTROY_PD");
}

/// A CQ: ring, its reader and handle.
pub struct Cq {
    /// The ring.
    pub ring: CqRing,
    /// The reader (poll through it).
    pub reader: CqReader,
    /// Device handle.
    pub handle: u32,
}

impl Cq {
    /// Every CQE the device has written since the last poll, consumed (one `cons_head`
    /// update); panics on a device index that fails validation.
    pub fn poll(&self) -> Vec<CqeView> {
        let mut head = self.reader.head();
        let n = match self.reader.ready(head) {
            CqState::Ready(n) => n,
            CqState::Empty => return Vec::new(),
            CqState::Corrupt => panic!("CQ {}: device index fails validation", self.handle),
        };
        let out = (0..n)
            .map(|_| {
                let c = self.reader.load(head);
                head = self.reader.next(head);
                c
            })
            .collect();
        self.reader.consume(head);
        out
    }
}

/// CqRing + CREATE_CQ; adopts the response's `cqe`.
pub fn create_cq(dev: &Device, entries: u32) -> Result<Cq, PvrdmaError> {
    let mut ring = CqRing::alloc(dev.platform().dma(), entries)?;
    let r = dev.cmd().execute(&CreateCq {
        pdir_dma: ring.pdir_dma(),
        ctx_handle: 0,
        cqe: entries,
        nchunks: ring.nchunks(),
    })?;
    assert_eq!(r.cqe, entries, "response cqe = request (M11)");
    ring.set_device_entries(r.cqe)?;
    let reader = ring.reader(CqBells {
        arm: dev.bell(CqDoorbell::arm(r.cq_handle)),
        arm_solicited: dev.bell(CqDoorbell::arm_solicited(r.cq_handle)),
        poll: dev.bell(CqDoorbell::poll(r.cq_handle)),
    })?;
    Ok(Cq {
        ring,
        reader,
        handle: r.cq_handle,
    })
}

/// DESTROY_CQ (then the ring is freed).
pub fn destroy_cq(dev: &Device, cq: Cq) {
    dev.cmd()
        .execute(&DestroyCq {
            cq_handle: cq.handle,
        })
        .expect("DESTROY_CQ");
}

/// A QP: queues, their writers and the CREATE_QP answer.
pub struct Qp {
    /// SQ/RQ.
    pub q: QpQueues,
    /// The SQ's writer.
    pub sq: SendWriter,
    /// The RQ's writer (absent with an SRQ).
    pub rq: Option<RecvWriter>,
    /// Free-running index of the next send WQE.
    pub sq_next: u32,
    /// Free-running index of the next receive WQE.
    pub rq_next: u32,
    /// The response.
    pub resp: CreateQpResp,
    /// Type.
    pub ty: QpType,
}

impl Qp {
    /// Handle (doorbells, CQE `qp`, events).
    pub fn handle(&self) -> u32 {
        self.resp.qp_handle
    }

    /// Writes a send WQE at the next index and publishes it, without a doorbell (a batch
    /// shares the one [`Self::ring_send`] rings).
    pub fn write_send(&mut self, wr_id: u64, h: &SqHeader, sges: &[Sge]) {
        assert!(
            self.sq.slot(self.sq_next).write_send(wr_id, h, sges),
            "SGEs fit"
        );
        self.sq_next = self.sq_next.wrapping_add(1);
        self.sq.publish(self.sq_next);
    }

    /// Rings the SQ doorbell.
    pub fn ring_send(&self) {
        self.sq.ring_doorbell();
    }

    /// [`Self::write_send`], then the doorbell.
    pub fn post_send(&mut self, wr_id: u64, h: &SqHeader, sges: &[Sge]) {
        self.write_send(wr_id, h, sges);
        self.ring_send();
    }

    /// Writes a receive WQE at the next index and publishes it, without a doorbell.
    pub fn write_recv(&mut self, wr_id: u64, sges: &[Sge]) {
        let rq = self.rq.as_ref().expect("a QP with an RQ");
        assert!(rq.slot(self.rq_next).write_recv(wr_id, sges), "SGEs fit");
        self.rq_next = self.rq_next.wrapping_add(1);
        rq.publish(self.rq_next);
    }

    /// Starts the SQ again at index 0 (after the QP went through RESET, M33, which zeroed
    /// the device's `cons_head`).
    pub fn restart_sq(&mut self) {
        self.sq_next = 0;
        self.sq.publish(0);
    }
}

/// Sizes of a QP to create.
#[derive(Clone, Copy, Debug)]
pub struct QpSpec {
    /// Type.
    pub ty: QpType,
    /// PD.
    pub pd: u32,
    /// Send CQ.
    pub send_cq: u32,
    /// Receive CQ.
    pub recv_cq: u32,
    /// (max_send_wr, max_send_sge).
    pub sq: (u32, u32),
    /// (max_recv_wr, max_recv_sge), or `None` with an SRQ.
    pub rq: Option<(u32, u32)>,
    /// SRQ handle.
    pub srq: Option<u32>,
}

impl QpSpec {
    /// RC with an 8×1 SQ and 8×1 RQ on one CQ.
    pub fn rc(pd: u32, cq: u32) -> Self {
        QpSpec {
            ty: QpType::Rc,
            pd,
            send_cq: cq,
            recv_cq: cq,
            sq: (8, 1),
            rq: Some((8, 1)),
            srq: None,
        }
    }
}

/// QpQueues + CREATE_QP.
pub fn create_qp(dev: &Device, s: &QpSpec) -> Result<Qp, PvrdmaError> {
    let layout = QpLayout::new(s.sq.0, s.sq.1, s.rq)?;
    let q = QpQueues::alloc(dev.platform().dma(), &layout)?;
    let (rwr, rsge) = s.rq.unwrap_or((0, 0));
    let resp = dev.cmd().execute(&CreateQp {
        pdir_dma: q.pdir_dma(),
        pd_handle: s.pd,
        send_cq_handle: s.send_cq,
        recv_cq_handle: s.recv_cq,
        srq_handle: s.srq.unwrap_or(0),
        max_send_wr: s.sq.0,
        max_recv_wr: rwr,
        max_send_sge: s.sq.1,
        max_recv_sge: rsge,
        max_inline_data: 0,
        lkey: 0,
        access_flags: AccessFlags::empty(),
        total_chunks: layout.total_chunks as u16,
        send_chunks: layout.send_chunks as u16,
        max_atomic_arg: 0,
        sq_sig_all: 0,
        qp_type: s.ty,
        is_srq: u8::from(s.srq.is_some()),
    })?;
    let h = resp.qp_handle;
    let sq = q.sq.writer(dev.bell(QpDoorbell::send(h)))?;
    let rq = match &q.rq {
        Some(rq) => Some(rq.writer(dev.bell(QpDoorbell::recv(h)))?),
        None => None,
    };
    Ok(Qp {
        q,
        sq,
        rq,
        sq_next: 0,
        rq_next: 0,
        resp,
        ty: s.ty,
    })
}

/// DESTROY_QP; returns `events_reported`.
pub fn destroy_qp(dev: &Device, qp: Qp) -> u32 {
    dev.cmd()
        .execute(&DestroyQp {
            qp_handle: qp.handle(),
        })
        .expect("DESTROY_QP")
}

/// MODIFY_QP to `state` with `mask` (STATE added).
pub fn modify(
    dev: &Device,
    qp: u32,
    state: QpState,
    mask: QpAttrMask,
    attr: QpAttr,
) -> Result<(), PvrdmaError> {
    dev.cmd().execute(&ModifyQp {
        qp_handle: qp,
        attr_mask: mask | QpAttrMask::STATE,
        attr: QpAttr {
            qp_state: state as u32,
            ..attr
        },
    })
}

/// The attributes `to_rts` uses (distinct values, checked by QUERY_QP tests).
pub fn rts_attrs(dest_qpn: u32) -> QpAttr {
    QpAttr {
        qkey: 0x1111_2222,
        rq_psn: 0x00AB_CDEF,
        sq_psn: 0x0012_3456,
        dest_qp_num: dest_qpn,
        qp_access_flags: (AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE).bits(),
        path_mtu: 3,
        pkey_index: 0,
        port_num: 1,
        max_rd_atomic: 4,
        max_dest_rd_atomic: 5,
        min_rnr_timer: 12,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 6,
        ah_attr: AhAttr {
            dgid: [
                0xFE, 0x80, 0, 0, 0, 0, 0, 0, 2, 0x50, 0x56, 0xFF, 0xFE, 0, 0, 2,
            ],
            hop_limit: 64,
            ah_flags: 1,
            port_num: 1,
            dmac: [0, 0x50, 0x56, 0, 0, 2],
            ..AhAttr::default()
        },
        ..QpAttr::default()
    }
}

/// Attributes an RC QP needs for INIT → RTR (pvrdma.md §8 transition table).
pub const RC_RTR_MASK: QpAttrMask = QpAttrMask::AV
    .union(QpAttrMask::PATH_MTU)
    .union(QpAttrMask::DEST_QPN)
    .union(QpAttrMask::RQ_PSN)
    .union(QpAttrMask::MAX_DEST_RD_ATOMIC)
    .union(QpAttrMask::MIN_RNR_TIMER);

/// Attributes an RC QP needs for RTR → RTS (pvrdma.md §8 transition table).
pub const RC_RTS_MASK: QpAttrMask = QpAttrMask::TIMEOUT
    .union(QpAttrMask::RETRY_CNT)
    .union(QpAttrMask::RNR_RETRY)
    .union(QpAttrMask::SQ_PSN)
    .union(QpAttrMask::MAX_QP_RD_ATOMIC);

/// An RC QP in INIT to RTR, then RTS, with `attr` (the test wiring that stands in for the
/// connection manager: `attr` names the peer's QPN, GID, MAC and the PSNs).
pub fn rc_rtr_rts(dev: &Device, qp: u32, attr: QpAttr) -> Result<(), PvrdmaError> {
    modify(dev, qp, QpState::Rtr, RC_RTR_MASK, attr)?;
    modify(dev, qp, QpState::Rts, RC_RTS_MASK, attr)
}

/// RESET → INIT → RTR → RTS with the masks IB requires per type (pvrdma.md §14 table).
pub fn to_rts(dev: &Device, qp: u32, ty: QpType, dest_qpn: u32) -> Result<(), PvrdmaError> {
    let a = rts_attrs(dest_qpn);
    type M = QpAttrMask;
    let (init, rtr, rts) = match ty {
        QpType::Rc => (
            M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS,
            RC_RTR_MASK,
            RC_RTS_MASK,
        ),
        QpType::Ud => (M::PKEY_INDEX | M::PORT | M::QKEY, M::empty(), M::SQ_PSN),
        QpType::Gsi => (M::PKEY_INDEX | M::QKEY, M::empty(), M::SQ_PSN),
    };
    modify(dev, qp, QpState::Init, init, a)?;
    modify(dev, qp, QpState::Rtr, rtr, a)?;
    modify(dev, qp, QpState::Rts, rts, a)
}

/// An SRQ: ring, its writer and handle.
pub struct Srq {
    /// The ring.
    pub q: SrqQueue,
    /// Its writer.
    pub writer: RecvWriter,
    /// Free-running index of the next WQE.
    pub next: u32,
    /// Handle.
    pub handle: u32,
}

impl Srq {
    /// Writes a receive WQE at the next index and publishes it, without a doorbell.
    pub fn write(&mut self, wr_id: u64, sges: &[Sge]) {
        assert!(
            self.writer.slot(self.next).write_recv(wr_id, sges),
            "SGEs fit"
        );
        self.next = self.next.wrapping_add(1);
        self.writer.publish(self.next);
    }
}

/// SrqQueue + CREATE_SRQ.
pub fn create_srq(
    dev: &Device,
    pd: u32,
    max_wr: u32,
    max_sge: u32,
    limit: u32,
) -> Result<Srq, PvrdmaError> {
    let layout = SrqLayout::new(max_wr, max_sge)?;
    let q = SrqQueue::alloc(dev.platform().dma(), &layout)?;
    let handle = dev.cmd().execute(&CreateSrq {
        pdir_dma: q.pdir_dma(),
        pd_handle: pd,
        nchunks: q.nchunks(),
        attr: SrqAttr {
            max_wr,
            max_sge,
            srq_limit: limit,
        },
        srq_type: 0,
    })?;
    let writer = q.writer(dev.bell(SrqDoorbell::recv(handle)))?;
    Ok(Srq {
        q,
        writer,
        next: 0,
        handle,
    })
}

/// DESTROY_SRQ.
pub fn destroy_srq(dev: &Device, srq: Srq) {
    dev.cmd()
        .execute(&DestroySrq {
            srq_handle: srq.handle,
        })
        .expect("DESTROY_SRQ");
}
