//! The NDK hardware seam over the PVRDMA hardware layer (pvrdma.md §1 "NDK → PVRDMA mapping",
//! §8–§13): object commands through the command channel, WQEs into the queue rings, CQEs out
//! of the CQ rings, doorbells on UAR page 0, and device events forwarded to [`NdkDevice`].
//!
//! Limits of this binding (phase 2 work still open, reported by the layer above as failures,
//! never faked):
//! - NdkCreatePd, NdkCreateCq, NdkCreateQp(WithSrq) and NdkCreateSrq complete
//!   asynchronously (STATUS_PENDING, CreateCompletion from the command-completion DPC);
//!   DESTROY commands (object close) and NdkFlush's MODIFY_QP are submitted without
//!   waiting, and queue memory is released from the DESTROY response (the device lets go of
//!   it only then, style.md §6). Each object's DESTROY (command entry and completion) is
//!   reserved when the object is created (`Kills`), so a close or NdkDeregisterMr
//!   allocates nothing and cannot fail (ndkpi.md §5.1). NdkRegisterMr,
//!   NdkInitializeFastRegisterMr and NdkModifySrq complete the same way through
//!   RequestCompletion; NdkDeregisterMr completes inline (its DESTROY_MR is not waited for).
//!   Queue memory is allocated in the calling thread through the OS seam's DMA allocator,
//!   which is PASSIVE_LEVEL; creates at DISPATCH_LEVEL need an asynchronous allocation there
//!   (NdisMAllocateSharedMemoryAsyncEx).
//! - QP async events (QP_FATAL, QP_ACCESS_ERR, …) are not mapped yet.
#![deny(unsafe_code)]

use alloc::sync::{Arc, Weak};

use super::adapter::NdkDevice;
use super::cq::{Cq, CqLink};
use super::error::HwError;
use super::hw::{Hardware, HwCaps, HwDone, MrKeys, MrSpec, QpSpec, SrqSpec};
use super::object::ObjRef;
use crate::ndkpi::{GROUP_AFFINITY, NDK_LOGICAL_ADDRESS};
use crate::os::alloc::try_arc;
use crate::os::{Processor, SpinLock};
use crate::pvrdma::PvrdmaError;
use crate::pvrdma::cmd::{
    CmdChannel, Command, CreateCq, CreateMr, CreatePd, CreateQp, CreateSrq, DestroyCq, DestroyMr,
    DestroyPd, DestroyQp, DestroySrq, ModifyQp, ModifySrq, QpAttr, QpAttrMask, QpState, QpType,
    Reserved, SrqAttr, mr_flags, srq_attr_mask,
};
use crate::pvrdma::cq::CqReader;
use crate::pvrdma::device::{CqEvents, Device, DeviceEvents, SrqEvents};
use crate::pvrdma::eqe::EqeType;
use crate::pvrdma::error::dev_err;
use crate::pvrdma::pdir::PageDir;
use crate::pvrdma::queue::{CqRing, QpLayout, QpQueues, SrqLayout, SrqQueue};
use crate::pvrdma::table::HandleTable;
use crate::pvrdma::uar::{CqDoorbell, QpDoorbell, SrqDoorbell};
use crate::pvrdma::wq::{RecvWriter, SendWriter};
use crate::pvrdma::wqe::AccessFlags;

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

type Sink = Arc<SpinLock<Option<Weak<NdkDevice>>>>;

fn sink_device(sink: &Sink) -> Option<Arc<NdkDevice>> {
    sink.lock().as_ref().and_then(Weak::upgrade)
}

struct SrqHook {
    sink: Sink,
    handle: u32,
}

impl SrqEvents for SrqHook {
    fn event(&self, kind: EqeType) {
        let Some(d) = sink_device(&self.sink) else {
            return;
        };
        match kind {
            EqeType::SrqLimitReached => d.srq_limit_reached(self.handle),
            EqeType::SrqErr => d.srq_error(self.handle),
            _ => {}
        }
    }
}

/// Files an MR's DESTROY and page directory under its handle; on failure destroys the MR
/// (the directory is freed after the device's response).
fn file_mr(
    ch: &Arc<CmdChannel>,
    dirs: &Locked<HandleTable<Arc<PageDir>>>,
    kills: &Kills,
    r: crate::pvrdma::cmd::CreateMrResp,
    dir: Option<Arc<PageDir>>,
    kill: Reserved<DestroyMr>,
) -> Result<MrKeys, HwError> {
    let h = r.mr_handle;
    file_kill(ch, &kills.mr, h, kill, &DestroyMr { mr_handle: h })?;
    if let Some(Err(e)) = dir.map(|d| dirs.lock().insert(h, d)) {
        destroy_mr_in(ch, dirs, kills, h);
        return Err(hw_error(e));
    }
    Ok(MrKeys {
        handle: h,
        lkey: r.lkey,
        rkey: r.rkey,
    })
}

/// RESET → INIT with remote access, so receives can be pre-posted (§5.3).
fn init_qp(h: u32) -> ModifyQp {
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
fn flush_cmd(h: u32) -> ModifyQp {
    ModifyQp {
        qp_handle: h,
        attr_mask: QpAttrMask::STATE,
        attr: QpAttr {
            qp_state: QpState::Err as u32,
            ..QpAttr::default()
        },
    }
}

/// A QP's reserved commands: its DESTROY and its flush.
struct QpKills {
    destroy: Kill<DestroyQp>,
    flush: Kill<ModifyQp>,
}

/// Files both of a new QP's reservations under its handle (see [`file_kill`]); when the
/// flush cannot be filed the QP is destroyed through its just-filed DESTROY.
fn file_qp_kills(ch: &CmdChannel, kills: &Kills, h: u32, k: QpKills) -> Result<(), HwError> {
    file_kill(ch, &kills.qp, h, k.destroy, &DestroyQp { qp_handle: h })?;
    let filed = kills.flush.lock().try_put(h, k.flush);
    filed.map_err(|unused| {
        drop(unused);
        kill(ch, &kills.qp, h, &DestroyQp { qp_handle: h });
        HwError::Invalid
    })
}

/// Each live device object's DESTROY, reserved when the object was created, so that closing
/// it allocates nothing (ndkpi.md §5.1: "A close request can never fail"). A reserved
/// completion owns the object's queue memory, which it frees on the device's response
/// (style.md §6). Filed under the handle the device returned; a DESTROY is submitted only
/// by taking it out of its table, so each runs once.
struct Kills {
    pd: SpinLock<HandleTable<Reserved<DestroyPd>>>,
    mr: SpinLock<HandleTable<Reserved<DestroyMr>>>,
    cq: SpinLock<HandleTable<Reserved<DestroyCq>>>,
    qp: SpinLock<HandleTable<Reserved<DestroyQp>>>,
    srq: SpinLock<HandleTable<Reserved<DestroySrq>>>,
    /// Each QP's MODIFY_QP → ERR for NdkFlush, which cannot fail either (§5.6). The first
    /// flush takes it; later ones find none and do nothing: the QP already is, or is about
    /// to be, in ERR, where the device flushes every WQE posted later at its doorbell
    /// (pvrdma.md M17), and this seam never moves a QP out of ERR.
    flush: SpinLock<HandleTable<Reserved<ModifyQp>>>,
}

type KillTable<C> = SpinLock<HandleTable<Reserved<C>>>;
type Kill<C> = Reserved<C>;
/// A CREATE_MR, its page directory and its reserved DESTROY.
type PreparedMr = (CreateMr, Option<Arc<PageDir>>, Kill<DestroyMr>);

/// Reserves a DESTROY whose completion drops `keep` (the object's queue memory).
fn reserve_kill<C: Command, K: Send + 'static>(
    ch: &CmdChannel,
    keep: K,
) -> Result<Reserved<C>, HwError> {
    ch.reserve::<C>(move |_| drop(keep)).map_err(hw_error)
}

/// Files `kill` under the new object's handle; when the handle is out of range or taken, the
/// object is destroyed with it right away.
fn file_kill<C: Command>(
    ch: &CmdChannel,
    table: &KillTable<C>,
    h: u32,
    kill: Reserved<C>,
    cmd: &C,
) -> Result<(), HwError> {
    let filed = table.lock().try_put(h, kill);
    filed.map_err(|kill| {
        ch.submit_reserved(kill, cmd);
        HwError::Invalid
    })
}

/// Submits the DESTROY reserved for `h`, allocating nothing; false if there is none (an
/// object this seam did not create, or one already destroyed).
fn kill<C: Command>(ch: &CmdChannel, table: &KillTable<C>, h: u32, cmd: &C) -> bool {
    let k = table.lock().remove(h);
    match k {
        Some(k) => {
            ch.submit_reserved(k, cmd);
            true
        }
        None => false,
    }
}

/// DESTROY_MR for `h` (close, deregistration, or a create that failed after CREATE_MR).
fn destroy_mr_in(
    ch: &Arc<CmdChannel>,
    dirs: &Locked<HandleTable<Arc<PageDir>>>,
    kills: &Kills,
    h: u32,
) {
    let dir = dirs.lock().remove(h);
    if !kill(ch, &kills.mr, h, &DestroyMr { mr_handle: h }) {
        submit_then(ch, &DestroyMr { mr_handle: h }, move |_| drop(dir));
    }
}

/// DESTROY_QP for `h` (close, or a create that failed after CREATE_QP); the queues are freed
/// on the device's response by the reserved completion.
fn destroy_qp_in(
    ch: &Arc<CmdChannel>,
    qps: &Locked<HandleTable<Locked<QpQueues>>>,
    kills: &Kills,
    h: u32,
) {
    let q = qps.lock().remove(h);
    // An unused flush reservation is released uncalled; the DESTROY flushes anyway.
    let unused = kills.flush.lock().remove(h);
    drop(unused);
    if !kill(ch, &kills.qp, h, &DestroyQp { qp_handle: h }) {
        submit_then(ch, &DestroyQp { qp_handle: h }, move |_| drop(q));
    }
}

/// What finishing a CREATE_SRQ needs (owned, so it can run in the command DPC).
struct SrqInstall {
    dev: Arc<Device>,
    srqs: Locked<HandleTable<Locked<SrqQueue>>>,
    kills: Arc<Kills>,
    sink: Sink,
}

impl SrqInstall {
    /// Files the DESTROY and the ring under the handle and registers the event hook; on
    /// failure destroys the SRQ (the ring is freed after the device's response).
    fn install(
        &self,
        h: u32,
        q: Locked<SrqQueue>,
        kill: Reserved<DestroySrq>,
    ) -> Result<(), HwError> {
        let cmd = DestroySrq { srq_handle: h };
        file_kill(self.dev.cmd(), &self.kills.srq, h, kill, &cmd)?;
        let r = self
            .srqs
            .lock()
            .insert(h, q)
            .map_err(hw_error)
            .and_then(|()| {
                let hook = try_arc(SrqHook {
                    sink: self.sink.clone(),
                    handle: h,
                })
                .map_err(|_| HwError::NoResources)?;
                self.dev.register_srq(h, hook).map_err(hw_error)
            });
        if let Err(e) = r {
            self.destroy(h);
            return Err(e);
        }
        Ok(())
    }

    /// DESTROY_SRQ for `h`; the ring is freed on the device's response.
    fn destroy(&self, h: u32) {
        let q = self.srqs.lock().remove(h);
        let cmd = DestroySrq { srq_handle: h };
        if !kill(self.dev.cmd(), &self.kills.srq, h, &cmd) {
            submit_then(self.dev.cmd(), &cmd, move |_| drop(q));
        }
    }
}

/// What finishing a CREATE_CQ needs (owned, so it can run in the command DPC).
struct CqInstall {
    dev: Arc<Device>,
    cqs: Locked<HandleTable<Locked<CqRing>>>,
    kills: Arc<Kills>,
}

impl CqInstall {
    /// Files the DESTROY, adopts the device's entry count and files the ring under its
    /// handle (the CQ's events are routed once the NDK CQ exists, [`Hardware::bind_cq`]). On
    /// failure the CQ is destroyed, and its ring freed only after the device's DESTROY
    /// response.
    fn install(
        &self,
        ring: Locked<CqRing>,
        resp: crate::pvrdma::cmd::CreateCqResp,
        kill: Reserved<DestroyCq>,
    ) -> Result<(), HwError> {
        let h = resp.cq_handle;
        let cmd = DestroyCq { cq_handle: h };
        file_kill(self.dev.cmd(), &self.kills.cq, h, kill, &cmd)?;
        let entries = ring.lock().set_device_entries(resp.cqe);
        let r = entries
            .map_err(hw_error)
            .and_then(|()| self.cqs.lock().insert(h, ring).map_err(hw_error));
        if let Err(e) = r {
            self.destroy(h);
            return Err(e);
        }
        Ok(())
    }

    /// DESTROY_CQ for `h`; the ring is freed on the device's response.
    fn destroy(&self, h: u32) {
        let ring = self.cqs.lock().remove(h);
        let cmd = DestroyCq { cq_handle: h };
        if !kill(self.dev.cmd(), &self.kills.cq, h, &cmd) {
            submit_then(self.dev.cmd(), &cmd, move |_| drop(ring));
        }
    }
}

/// Device-wide events: DEVICE_FATAL fails every CQ and SRQ of the NDK device.
struct DeviceHook {
    sink: Sink,
}

impl DeviceEvents for DeviceHook {
    fn port_event(&self, _kind: EqeType, _port: u32) {}
    fn device_fatal(&self) {
        if let Some(d) = sink_device(&self.sink) {
            d.device_fatal();
        }
    }
}

/// A value several owners reach, behind a spin lock (the seam's tables and queues).
type Locked<T> = Arc<SpinLock<T>>;

/// Submits `c` and runs `next` exactly once with its outcome: from the command-completion
/// DPC, or right away when the submit itself fails.
fn submit_then<C, F>(ch: &Arc<CmdChannel>, c: &C, next: F)
where
    C: Command,
    C::Resp: Send + 'static,
    F: FnOnce(Result<C::Resp, HwError>) + Send + 'static,
{
    let cell: Locked<Option<F>> = match try_arc(SpinLock::new(None)) {
        Ok(cell) => cell,
        Err(_) => return next(Err(HwError::NoResources)),
    };
    *cell.lock() = Some(next);
    let in_dpc = cell.clone();
    let submitted = ch.submit(c, move |r| {
        let f = in_dpc.lock().take();
        if let Some(f) = f {
            f(r.map_err(hw_error));
        }
    });
    if let Err(e) = submitted {
        let f = cell.lock().take();
        if let Some(f) = f {
            f(Err(hw_error(e)));
        }
    }
}

fn locked<T>(v: T) -> Result<Locked<T>, HwError> {
    try_arc(SpinLock::new(v)).map_err(|_| HwError::NoResources)
}

fn dma_mr(pd: u32) -> CreateMr {
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

fn table<T>(bound: u32) -> Result<HandleTable<T>, HwError> {
    // Handles are below `max_*` (M10), which M5 bounds by 65536.
    HandleTable::new(bound.min(65536)).map_err(hw_error)
}

/// The PVRDMA device as the NDK layer's [`Hardware`].
///
/// The seam's tables, by device handle (each handle kind also has the device's event table,
/// `Device` `cqs`/`qps`/`srqs`: handle → event hook, and the NDK device's, `NdkDevice`:
/// handle → NDK object):
/// - `cqs`, `qps`, `srqs`: the queue memory, looked up once, when the NDK object takes its
///   writer or reader (`qp_writers`, `srq_writer`, `cq_reader`) and for `srq_queued`;
/// - `mr_dirs`: an MR's page directory (NdkFastRegister writes its page list there);
/// - `kills`: each object's reserved DESTROY (and a QP's flush), which also owns the queue
///   memory until the device's DESTROY response.
pub struct PvrdmaHardware {
    dev: Arc<Device>,
    caps: HwCaps,
    cqs: Locked<HandleTable<Locked<CqRing>>>,
    qps: Locked<HandleTable<Locked<QpQueues>>>,
    srqs: Locked<HandleTable<Locked<SrqQueue>>>,
    mr_dirs: Locked<HandleTable<Arc<PageDir>>>,
    kills: Arc<Kills>,
    sink: Sink,
}

impl PvrdmaHardware {
    /// Wraps a started device.
    ///
    /// # Errors
    /// [`HwError::NoResources`] when the handle tables cannot be allocated.
    pub fn new(dev: Arc<Device>) -> Result<Arc<PvrdmaHardware>, HwError> {
        let c = *dev.caps();
        let mut caps = HwCaps::from_caps(&c, dev.version());
        caps.max_sge = caps.max_sge.min(MAX_POST_SGE as u32);
        caps.max_sge_rd = caps.max_sge_rd.min(MAX_POST_SGE as u32);
        caps.max_srq_sge = caps.max_srq_sge.min(MAX_POST_SGE as u32);
        try_arc(PvrdmaHardware {
            cqs: locked(table(c.max_cq)?)?,
            qps: locked(table(c.max_qp)?)?,
            srqs: locked(table(c.max_srq)?)?,
            mr_dirs: locked(table(c.max_mr)?)?,
            kills: try_arc(Kills {
                pd: SpinLock::new(table(c.max_pd)?),
                mr: SpinLock::new(table(c.max_mr)?),
                cq: SpinLock::new(table(c.max_cq)?),
                qp: SpinLock::new(table(c.max_qp)?),
                srq: SpinLock::new(table(c.max_srq)?),
                flush: SpinLock::new(table(c.max_qp)?),
            })
            .map_err(|_| HwError::NoResources)?,
            sink: try_arc(SpinLock::new(None)).map_err(|_| HwError::NoResources)?,
            dev,
            caps,
        })
        .map_err(|_| HwError::NoResources)
    }

    /// Routes device events to `ndk` (called once, after [`NdkDevice::new`]).
    ///
    /// # Errors
    /// [`HwError::NoResources`] when the device-event hook cannot be allocated.
    pub fn attach(&self, ndk: &Arc<NdkDevice>) -> Result<(), HwError> {
        *self.sink.lock() = Some(Arc::downgrade(ndk));
        let hook = try_arc(DeviceHook {
            sink: self.sink.clone(),
        })
        .map_err(|_| HwError::NoResources)?;
        self.dev.set_device_events(Some(hook));
        Ok(())
    }

    fn exec<C: crate::pvrdma::cmd::Command>(&self, cmd: &C) -> Result<C::Resp, HwError> {
        self.dev.cmd().execute(cmd).map_err(hw_error)
    }

    /// Allocates a CQ ring (shared, so it can be filed before the device answers), the
    /// CREATE_CQ for it and its reserved DESTROY.
    fn prepare_cq(
        &self,
        entries: u32,
    ) -> Result<(Locked<CqRing>, CreateCq, Kill<DestroyCq>), HwError> {
        let dma = self.dev.platform().dma().clone();
        let ring = CqRing::alloc(&dma, entries).map_err(hw_error)?;
        let cmd = CreateCq {
            pdir_dma: ring.pdir_dma(),
            ctx_handle: 0,
            cqe: entries,
            nchunks: ring.nchunks(),
        };
        let ring = locked(ring)?;
        let kill = reserve_kill(self.dev.cmd(), ring.clone())?;
        Ok((ring, cmd, kill))
    }

    fn cq_ctx(&self) -> CqInstall {
        CqInstall {
            dev: self.dev.clone(),
            cqs: self.cqs.clone(),
            kills: self.kills.clone(),
        }
    }

    /// Allocates a QP's queues (shared, so they can be filed once the handle is known), the
    /// CREATE_QP for them and the QP's reserved DESTROY and flush.
    fn prepare_qp(&self, spec: &QpSpec) -> Result<(Locked<QpQueues>, CreateQp, QpKills), HwError> {
        let recv = match spec.srq {
            Some(_) => None,
            None => Some((spec.max_recv_wr, spec.max_recv_sge)),
        };
        let layout = QpLayout::new(spec.max_send_wr, spec.max_send_sge, recv).map_err(hw_error)?;
        let dma = self.dev.platform().dma().clone();
        let queues = QpQueues::alloc(&dma, &layout).map_err(hw_error)?;
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
        let ch = self.dev.cmd();
        let flush = ch.reserve::<ModifyQp>(|_| {}).map_err(hw_error)?;
        let destroy = reserve_kill(ch, queues.clone())?;
        Ok((queues, cmd, QpKills { destroy, flush }))
    }

    /// The CREATE_MR for `spec`, the page directory it names (filled for a normal MR,
    /// empty for an FRMR, whose fast-register WQEs rewrite it, §9 MRs) and the MR's
    /// reserved DESTROY (which frees the directory).
    fn prepare_mr(&self, pd: u32, spec: &MrSpec<'_>) -> Result<PreparedMr, HwError> {
        let (cmd, dir) = self.prepare_mr_dir(pd, spec)?;
        let kill = reserve_kill(self.dev.cmd(), dir.clone())?;
        Ok((cmd, dir, kill))
    }

    fn prepare_mr_dir(
        &self,
        pd: u32,
        spec: &MrSpec<'_>,
    ) -> Result<(CreateMr, Option<Arc<PageDir>>), HwError> {
        let dma = self.dev.platform().dma().clone();
        let dir = |n: u32| -> Result<Arc<PageDir>, HwError> {
            let d = PageDir::new(&dma, n).map_err(hw_error)?;
            try_arc(d).map_err(|_| HwError::NoResources)
        };
        Ok(match *spec {
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
                let n = u32::try_from(pages.len()).map_err(|_| HwError::Invalid)?;
                let d = dir(n)?;
                for (i, &p) in pages.iter().enumerate() {
                    d.set_page(i as u32, p).map_err(hw_error)?;
                }
                (
                    CreateMr {
                        start,
                        length,
                        pdir_dma: d.dma(),
                        pd_handle: pd,
                        access_flags: AccessFlags::from_bits_truncate(access),
                        flags: mr_flags::NORMAL,
                        nchunks: n,
                    },
                    Some(d),
                )
            }
        })
    }

    /// Allocates an SRQ ring, the CREATE_SRQ for it and its reserved DESTROY.
    fn prepare_srq(
        &self,
        spec: &SrqSpec,
    ) -> Result<(Locked<SrqQueue>, CreateSrq, Kill<DestroySrq>), HwError> {
        let layout = SrqLayout::new(spec.max_wr, spec.max_sge).map_err(hw_error)?;
        let dma = self.dev.platform().dma().clone();
        let q = SrqQueue::alloc(&dma, &layout).map_err(hw_error)?;
        let cmd = CreateSrq {
            pdir_dma: q.pdir_dma(),
            pd_handle: spec.pd,
            nchunks: q.nchunks(),
            attr: SrqAttr {
                max_wr: spec.max_wr,
                max_sge: spec.max_sge,
                srq_limit: spec.limit,
            },
            srq_type: 0,
        };
        let q = locked(q)?;
        let kill = reserve_kill(self.dev.cmd(), q.clone())?;
        Ok((q, cmd, kill))
    }

    fn srq_ctx(&self) -> SrqInstall {
        SrqInstall {
            dev: self.dev.clone(),
            srqs: self.srqs.clone(),
            kills: self.kills.clone(),
            sink: self.sink.clone(),
        }
    }

    fn cq(&self, h: u32) -> Option<Locked<CqRing>> {
        self.cqs.lock().get(h).cloned()
    }

    fn qp(&self, h: u32) -> Option<Locked<QpQueues>> {
        self.qps.lock().get(h).cloned()
    }

    fn srq(&self, h: u32) -> Option<Locked<SrqQueue>> {
        self.srqs.lock().get(h).cloned()
    }
}

const QP_ACCESS: AccessFlags = AccessFlags::LOCAL_WRITE
    .union(AccessFlags::REMOTE_READ)
    .union(AccessFlags::REMOTE_WRITE);

impl Hardware for PvrdmaHardware {
    fn caps(&self) -> &HwCaps {
        &self.caps
    }

    fn wait_until(&self, cond: &dyn Fn() -> bool) {
        while !self.dev.platform().wait_until(cond, 1_000_000_000) {}
    }

    fn create_pd(&self) -> Result<u32, HwError> {
        let ch = self.dev.cmd();
        let kill = reserve_kill::<DestroyPd, _>(ch, ())?;
        let pd = self.exec(&CreatePd { ctx_handle: 0 })?;
        file_kill(ch, &self.kills.pd, pd, kill, &DestroyPd { pd_handle: pd })?;
        Ok(pd)
    }

    fn create_pd_async(&self, done: HwDone<(u32, MrKeys)>) {
        let ch = self.dev.cmd().clone();
        let kills = self.kills.clone();
        let reserved = reserve_kill::<DestroyPd, _>(&ch, ())
            .and_then(|p| Ok((p, reserve_kill::<DestroyMr, _>(&ch, ())?)));
        let (pd_kill, mr_kill) = match reserved {
            Ok(k) => k,
            Err(e) => return done(Err(e)),
        };
        submit_then(&ch.clone(), &CreatePd { ctx_handle: 0 }, move |r| {
            let pd = match r {
                Ok(pd) => pd,
                Err(e) => return done(Err(e)),
            };
            let destroy = DestroyPd { pd_handle: pd };
            if let Err(e) = file_kill(&ch, &kills.pd, pd, pd_kill, &destroy) {
                return done(Err(e));
            }
            submit_then(&ch.clone(), &dma_mr(pd), move |r| {
                let filed = r.and_then(|k| {
                    let cmd = DestroyMr {
                        mr_handle: k.mr_handle,
                    };
                    file_kill(&ch, &kills.mr, k.mr_handle, mr_kill, &cmd).map(|()| k)
                });
                match filed {
                    Ok(k) => done(Ok((
                        pd,
                        MrKeys {
                            handle: k.mr_handle,
                            lkey: k.lkey,
                            rkey: k.rkey,
                        },
                    ))),
                    Err(e) => {
                        kill(&ch, &kills.pd, pd, &destroy);
                        done(Err(e));
                    }
                }
            });
        });
    }

    fn destroy_pd(&self, pd: u32) {
        let cmd = DestroyPd { pd_handle: pd };
        if !kill(self.dev.cmd(), &self.kills.pd, pd, &cmd) {
            submit_then(self.dev.cmd(), &cmd, |_| {});
        }
    }

    fn create_cq(&self, entries: u32, _affinity: Option<GROUP_AFFINITY>) -> Result<u32, HwError> {
        // The affinity is the NDK CQ's, applied when its events are routed (`bind_cq`).
        let (ring, cmd, kill) = self.prepare_cq(entries)?;
        let resp = self.exec(&cmd);
        let ctx = self.cq_ctx();
        match resp {
            Ok(resp) => ctx.install(ring, resp, kill).map(|()| resp.cq_handle),
            Err(e) => Err(e),
        }
    }

    fn create_cq_async(&self, entries: u32, _affinity: Option<GROUP_AFFINITY>, done: HwDone<u32>) {
        let (ring, cmd, kill) = match self.prepare_cq(entries) {
            Ok(x) => x,
            Err(e) => return done(Err(e)),
        };
        let ctx = self.cq_ctx();
        // The ring travels with the command: dropped unused if the device refuses it.
        submit_then(self.dev.cmd(), &cmd, move |r| match r {
            Ok(resp) => done(ctx.install(ring, resp, kill).map(|()| resp.cq_handle)),
            Err(e) => done(Err(e)),
        });
    }

    /// The CQ's own handler in the device's table: a CQNE reaches the NDK CQ with that one
    /// lookup, on the CQ's DPC targeted at the first processor of its GROUP_AFFINITY if it has
    /// one (NdkCreateCq `Affinity`), else on the CQ-notification DPC.
    fn bind_cq(&self, cq: &ObjRef<Cq>) -> Result<(), HwError> {
        let link: Arc<dyn CqEvents> = try_arc(CqLink::new(cq)).map_err(|_| HwError::NoResources)?;
        let target = cq
            .affinity()
            .filter(|a| a.Mask != 0)
            .map_or(Processor::Current, |a| {
                Processor::from_affinity(a.Group, a.Mask as u64)
            });
        self.dev
            .register_cq_on(cq.handle(), link, target)
            .map_err(hw_error)
    }

    fn destroy_cq(&self, cq: u32) {
        drop(self.dev.unregister_cq(cq));
        self.cq_ctx().destroy(cq);
    }

    fn create_mr(&self, pd: u32, spec: &MrSpec<'_>) -> Result<MrKeys, HwError> {
        let (cmd, dir, kill) = self.prepare_mr(pd, spec)?;
        let r = self.exec(&cmd)?;
        file_mr(self.dev.cmd(), &self.mr_dirs, &self.kills, r, dir, kill)
    }

    fn create_mr_async(&self, pd: u32, spec: &MrSpec<'_>, done: HwDone<MrKeys>) {
        let (cmd, dir, kill) = match self.prepare_mr(pd, spec) {
            Ok(x) => x,
            Err(e) => return done(Err(e)),
        };
        let ch = self.dev.cmd().clone();
        let dirs = self.mr_dirs.clone();
        let kills = self.kills.clone();
        submit_then(&ch.clone(), &cmd, move |r| match r {
            Ok(r) => done(file_mr(&ch, &dirs, &kills, r, dir, kill)),
            Err(e) => done(Err(e)),
        });
    }

    fn destroy_mr(&self, mr: u32) {
        destroy_mr_in(self.dev.cmd(), &self.mr_dirs, &self.kills, mr);
    }

    fn try_destroy_mr(&self, mr: u32) -> Result<(), HwError> {
        // The DESTROY reserved at registration needs no memory: deregistration cannot fail.
        if kill(
            self.dev.cmd(),
            &self.kills.mr,
            mr,
            &DestroyMr { mr_handle: mr },
        ) {
            drop(self.mr_dirs.lock().remove(mr));
            return Ok(());
        }
        let t = self.mr_dirs.clone();
        // Unlike `submit_then`, a command that cannot be queued (no memory for its entry)
        // is reported, not dropped: the completion is then never called.
        self.dev
            .cmd()
            .submit(&DestroyMr { mr_handle: mr }, move |_| {
                let gone = t.lock().remove(mr);
                drop(gone);
            })
            .map_err(hw_error)
    }

    fn create_qp(&self, spec: &QpSpec) -> Result<u32, HwError> {
        let (q, cmd, kill) = self.prepare_qp(spec)?;
        let ch = self.dev.cmd();
        let h = self.exec(&cmd)?.qp_handle;
        file_qp_kills(ch, &self.kills, h, kill)?;
        let filed = self.qps.lock().insert(h, q).map_err(hw_error);
        if let Err(e) = filed.and_then(|()| self.exec(&init_qp(h))) {
            destroy_qp_in(ch, &self.qps, &self.kills, h);
            return Err(e);
        }
        Ok(h)
    }

    fn create_qp_async(&self, spec: &QpSpec, done: HwDone<u32>) {
        let (q, cmd, kill) = match self.prepare_qp(spec) {
            Ok(x) => x,
            Err(e) => return done(Err(e)),
        };
        let ch = self.dev.cmd().clone();
        let qps = self.qps.clone();
        let kills = self.kills.clone();
        submit_then(&ch.clone(), &cmd, move |r| {
            let h = match r {
                Ok(resp) => resp.qp_handle,
                Err(e) => return done(Err(e)),
            };
            if let Err(e) = file_qp_kills(&ch, &kills, h, kill) {
                return done(Err(e));
            }
            if let Err(e) = qps.lock().insert(h, q).map_err(hw_error) {
                destroy_qp_in(&ch, &qps, &kills, h);
                return done(Err(e));
            }
            submit_then(&ch.clone(), &init_qp(h), move |r| match r {
                Ok(()) => done(Ok(h)),
                Err(e) => {
                    destroy_qp_in(&ch, &qps, &kills, h);
                    done(Err(e));
                }
            });
        });
    }

    fn destroy_qp(&self, qp: u32) {
        destroy_qp_in(self.dev.cmd(), &self.qps, &self.kills, qp);
    }

    fn flush_qp(&self, qp: u32) {
        // NdkFlush may run at DISPATCH_LEVEL and cannot fail: submit the MODIFY_QP reserved
        // at create without waiting; the device writes the flush CQEs before its response
        // (M32). No reservation left means an earlier flush already took the QP to ERR.
        kill(self.dev.cmd(), &self.kills.flush, qp, &flush_cmd(qp));
    }

    fn create_srq(&self, spec: &SrqSpec) -> Result<u32, HwError> {
        let (q, cmd, kill) = self.prepare_srq(spec)?;
        let h = self.exec(&cmd)?;
        self.srq_ctx().install(h, q, kill).map(|()| h)
    }

    fn create_srq_async(&self, spec: &SrqSpec, done: HwDone<u32>) {
        let (q, cmd, kill) = match self.prepare_srq(spec) {
            Ok(x) => x,
            Err(e) => return done(Err(e)),
        };
        let ctx = self.srq_ctx();
        submit_then(self.dev.cmd(), &cmd, move |r| match r {
            Ok(h) => done(ctx.install(h, q, kill).map(|()| h)),
            Err(e) => done(Err(e)),
        });
    }

    fn modify_srq_limit(&self, srq: u32, limit: u32) -> Result<(), HwError> {
        self.exec(&ModifySrq {
            srq_handle: srq,
            attr_mask: srq_attr_mask::LIMIT,
            attr: SrqAttr {
                srq_limit: limit,
                ..SrqAttr::default()
            },
        })
    }

    fn modify_srq_limit_async(&self, srq: u32, limit: u32, done: HwDone<()>) {
        let cmd = ModifySrq {
            srq_handle: srq,
            attr_mask: srq_attr_mask::LIMIT,
            attr: SrqAttr {
                srq_limit: limit,
                ..SrqAttr::default()
            },
        };
        submit_then(self.dev.cmd(), &cmd, done);
    }

    fn srq_queued(&self, srq: u32) -> u32 {
        self.srq(srq)
            .and_then(|q| q.lock().outstanding().ok())
            .unwrap_or(0)
    }

    fn destroy_srq(&self, srq: u32) {
        drop(self.dev.unregister_srq(srq));
        self.srq_ctx().destroy(srq);
    }

    fn qp_writers(&self, qp: u32) -> Result<(SendWriter, Option<RecvWriter>), HwError> {
        let q = self.qp(qp).ok_or(HwError::Invalid)?;
        let g = q.lock();
        let sq =
            g.sq.writer(self.dev.bell(QpDoorbell::send(qp)))
                .map_err(hw_error)?;
        let rq = match &g.rq {
            Some(rq) => Some(
                rq.writer(self.dev.bell(QpDoorbell::recv(qp)))
                    .map_err(hw_error)?,
            ),
            None => None,
        };
        Ok((sq, rq))
    }

    fn srq_writer(&self, srq: u32) -> Result<RecvWriter, HwError> {
        let q = self.srq(srq).ok_or(HwError::Invalid)?;
        q.lock()
            .writer(self.dev.bell(SrqDoorbell::recv(srq)))
            .map_err(hw_error)
    }

    fn cq_reader(&self, cq: u32) -> Result<CqReader, HwError> {
        let ring = self.cq(cq).ok_or(HwError::Invalid)?;
        ring.lock()
            .reader(
                self.dev.bell(CqDoorbell::arm(cq)),
                self.dev.bell(CqDoorbell::arm_solicited(cq)),
            )
            .map_err(hw_error)
    }

    fn fast_reg_pages(&self, mr: u32, pages: &[NDK_LOGICAL_ADDRESS]) -> Result<u64, HwError> {
        let dir = self
            .mr_dirs
            .lock()
            .get(mr)
            .cloned()
            .ok_or(HwError::Invalid)?;
        for (i, &p) in pages.iter().enumerate() {
            // CAST: a logical address is a 64-bit bus address.
            dir.set_page(i as u32, p as u64).map_err(hw_error)?;
        }
        Ok(dir.dma())
    }
}

#[cfg(test)]
mod tests;
