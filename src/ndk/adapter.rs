//! NDK_ADAPTER: version negotiation, adapter info, object creation, blocking close
//! (ndkpi.md §1.7 and Project decision (a), §3.7, §5.2, §5.13; pvrdma.md §1, §4).
//!
//! [`NdkDevice`] is the per-device part shared by every NDK_ADAPTER opened on the device
//! (NDIS may open several): the device's verbs, the QPs by handle for the CQ pollers, and
//! every live CQ and SRQ for device-wide events (per-object device events reach the objects
//! through the handlers their creation routed, `Verbs::route_cq` and `route_srq`).
#![deny(unsafe_code)]

use alloc::boxed::Box;
use alloc::sync::{Arc, Weak};
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::cq::{Cq, CqEvent};
use super::error::{NdkError, NdkResult};
use super::object::{Dispatched, Lifetime, NdkObject, ObjRef, try_vec};
use super::qp::Qp;
use super::qp_table::QpTable;
use super::srq::Srq;
use super::traffic::{ClosedTraffic, Traffic};
use crate::ndkpi::*;
use crate::os::SpinLock;
use crate::os::alloc::try_arc;
use crate::os::mdl::{MdlChain, MdlError, MdlRegion};
use crate::pvrdma::PvrdmaError;
use crate::pvrdma::device::{DeviceEvents, MAX_MSG_SZ};
use crate::pvrdma::dsr::Caps;
use crate::pvrdma::eqe::EqeType;
use crate::pvrdma::verbs::{Verbs, pow2_floor};

/// Highest minor version per supported major (Project decision (a)).
const fn highest_minor(major: u16) -> Option<u16> {
    match major {
        1 => Some(2),
        2 => Some(1),
        _ => None,
    }
}

/// OpenNDKAdapterHandler's version rule (§1.7): the consumer names a major and its lowest
/// usable minor; a supported major with a minor not above ours opens at our highest minor.
///
/// # Errors
/// NDIS_STATUS_BAD_VERSION for another major or a higher minor.
pub fn negotiate_version(requested: NDK_VERSION) -> Result<NDK_VERSION, NDIS_STATUS> {
    match highest_minor(requested.Major) {
        Some(minor) if requested.Minor <= minor => Ok(NDK_VERSION {
            Major: requested.Major,
            Minor: minor,
        }),
        _ => Err(NDIS_STATUS_BAD_VERSION),
    }
}

/// `LargeRequestThreshold`: a hint of the size from which RDMA READ/WRITE beats copying
/// through send/receive. 4 KiB, the Linux SMB client's `rdma_readwrite_threshold`
/// (smb-direct.md §1.4): SMB Direct's sends carry 1364 bytes, so an I/O above a page costs
/// several fragments while one registration and one RDMA operation move it (whether Windows
/// SMB reads the hint is unconfirmed; docs/DEPLOY.md).
pub const LARGE_REQUEST_THRESHOLD: u32 = 4 * 1024;
/// REQ private data (92 B) minus the rdma_cm header (36 B) (cm.md §5.2).
const MAX_CALLER_DATA: u32 = 56;
/// One limit for REP (196 B) and REJ (148 B) private data (cm.md).
const MAX_CALLEE_DATA: u32 = 148;

/// NDK_ADAPTER_INFO from the device caps (pvrdma.md §1 mapping and §4).
///
/// Depths are the largest power of two the device accepts (rings are powers of two, M11),
/// so any depth up to them can be rounded up to a ring. AdapterFlags: only
/// RDMA_READ_SINK_NOT_REQUIRED (Project decision (b)); not IN_ORDER_DMA (the host writes
/// guest memory with ordinary copies, and no PVRDMA source promises byte order of
/// placement), not CQ_RESIZE (RESIZE_CQ is unsupported, M11), not CQ_INTERRUPT_MODERATION
/// (no device control), not READ_LOCAL_INVALIDATE (Project decision (b)).
pub fn adapter_info(caps: &Caps, version: NDK_VERSION) -> NDK_ADAPTER_INFO {
    let srq = caps.max_srq != 0;
    let max_recv_sge = if srq {
        caps.max_sge.min(caps.max_srq_sge)
    } else {
        caps.max_sge
    };
    NDK_ADAPTER_INFO {
        Version: version,
        VendorId: caps.vendor_id,
        DeviceId: caps.vendor_part_id,
        MaxRegistrationSize: usize::try_from(caps.max_mr_size).unwrap_or(usize::MAX),
        MaxWindowSize: 0,
        FRMRPageCount: caps.max_fast_reg_page_list_len,
        MaxInitiatorRequestSge: caps.max_sge,
        MaxReceiveRequestSge: max_recv_sge,
        MaxReadRequestSge: caps.max_sge_rd.min(caps.max_sge),
        MaxTransferLength: MAX_MSG_SZ,
        MaxInlineDataSize: 0,
        MaxInboundReadLimit: caps.max_qp_rd_atom,
        MaxOutboundReadLimit: caps.max_qp_init_rd_atom,
        MaxReceiveQueueDepth: pow2_floor(caps.max_qp_wr),
        MaxInitiatorQueueDepth: pow2_floor(caps.max_qp_wr),
        MaxSrqDepth: if srq { pow2_floor(caps.max_srq_wr) } else { 0 },
        MaxCqDepth: pow2_floor(caps.max_cqe),
        LargeRequestThreshold: LARGE_REQUEST_THRESHOLD,
        MaxCallerData: MAX_CALLER_DATA,
        MaxCalleeData: MAX_CALLEE_DATA,
        AdapterFlags: NDK_ADAPTER_FLAG_RDMA_READ_SINK_NOT_REQUIRED,
        RdmaTechnology: NdkRoCEv2,
    }
}

/// Size of the full NDK_ADAPTER_INFO (0x68 on x64).
pub const ADAPTER_INFO_SIZE: u32 = core::mem::size_of::<NDK_ADAPTER_INFO>() as u32;
/// Size without `RdmaTechnology` (0x60 on x64), accepted from pre-NDIS-6.50 consumers.
pub const ADAPTER_INFO_SIZE_V1: u32 = NDK_ADAPTER_INFO_SIZE_WITHOUT_RDMA_TECHNOLOGY as u32;

/// NdkQueryAdapterInfo sizing (§3.7): how many bytes to write for a buffer of `size`.
///
/// # Errors
/// `Err(required)` (STATUS_BUFFER_TOO_SMALL with `*pBufferSize = required`) when there is no
/// buffer or it holds less than the pre-6.50 structure.
pub fn adapter_info_bytes(has_buffer: bool, size: u32) -> Result<u32, u32> {
    if has_buffer && size >= ADAPTER_INFO_SIZE {
        Ok(ADAPTER_INFO_SIZE)
    } else if has_buffer && size >= ADAPTER_INFO_SIZE_V1 {
        Ok(ADAPTER_INFO_SIZE_V1)
    } else {
        Err(ADAPTER_INFO_SIZE)
    }
}

/// Handle → NDK object, bounds-checked (style.md §10): every live object of one kind, for the
/// device-wide events that reach them all (DEVICE_FATAL). Per-object device events do not
/// come here: the device delivers them to the handler routed for the object, found by its
/// own lookup of the handle.
struct ObjectTable<T: NdkObject> {
    slots: SpinLock<Box<[Option<ObjRef<T>>]>>,
}

impl<T: NdkObject> ObjectTable<T> {
    fn new(n: u32) -> NdkResult<Self> {
        Ok(ObjectTable {
            slots: SpinLock::new(try_vec(n as usize, || None)?),
        })
    }

    fn insert(&self, handle: u32, obj: &ObjRef<T>) -> NdkResult<()> {
        let mut t = self.slots.lock();
        match t.get_mut(handle as usize) {
            Some(slot @ None) => {
                *slot = Some(obj.clone());
                Ok(())
            }
            // A handle outside the table or already in use: the device misbehaves.
            _ => Err(NdkError::Device),
        }
    }

    /// Files `obj` under `handle`, then has `bind` route its device events to it; when that
    /// fails, takes it out again.
    fn insert_bound(
        &self,
        handle: u32,
        obj: &ObjRef<T>,
        bind: impl FnOnce() -> Result<(), PvrdmaError>,
    ) -> NdkResult<()> {
        self.insert(handle, obj)?;
        bind().map_err(|e| {
            drop(self.remove(handle));
            e.into()
        })
    }

    fn remove(&self, handle: u32) -> Option<ObjRef<T>> {
        self.remove_with(handle, |_| {})
    }

    /// Takes the object under `handle` out, running `last` on it under the lock. The count
    /// is returned, so the object is never freed under the lock.
    fn remove_with(&self, handle: u32, last: impl FnOnce(&T)) -> Option<ObjRef<T>> {
        let mut t = self.slots.lock();
        let o = t.get_mut(handle as usize).and_then(Option::take);
        if let Some(o) = &o {
            last(o);
        }
        o
    }

    /// Folds `f` over every registered object under the lock (no clone, no allocation, no
    /// callback out of the driver).
    fn fold<A>(&self, init: A, mut f: impl FnMut(A, &T) -> A) -> A {
        let t = self.slots.lock();
        t.iter().flatten().fold(init, |a, o| f(a, o))
    }

    /// Every registered object (cloned under the lock; an allocation, so only for rare
    /// device-wide events at DISPATCH_LEVEL: the clones are handed back one at a time).
    fn for_each(&self, mut f: impl FnMut(&ObjRef<T>)) {
        let mut i = 0usize;
        loop {
            let next = {
                let t = self.slots.lock();
                let mut found = None;
                while let Some(slot) = t.get(i) {
                    i += 1;
                    if let Some(o) = slot {
                        found = Some(o.clone());
                        break;
                    }
                }
                found
            };
            match next {
                Some(o) => f(&o),
                None => return,
            }
        }
    }
}

/// The connection side of a device as the object core holds it (implemented by
/// `ndk::connect`'s engine, which the core never names): stopped when the device lets go of
/// it. `Any`, so the connection objects and the layers above find their concrete engine.
pub trait Connections: core::any::Any + Send + Sync {
    /// Stops it (PASSIVE_LEVEL, after every NDK_ADAPTER has closed).
    fn stop(&self);
}

/// Device-wide events: DEVICE_FATAL fails every CQ and SRQ of the NDK device; port events
/// are not mapped yet.
struct DeviceHook(Weak<NdkDevice>);

impl DeviceEvents for DeviceHook {
    fn port_event(&self, _kind: EqeType, _port: u32) {}
    fn device_fatal(&self) {
        if let Some(d) = self.0.upgrade() {
            d.device_fatal();
        }
    }
}

/// The NDK side of one PVRDMA device: shared by all its NDK_ADAPTERs.
///
/// It keeps at most one table per kind of handle, each described at its field (the verbs
/// keep their own per kind: queue memory, reserved commands; the device its event handlers).
pub struct NdkDevice {
    hw: Arc<Verbs>,
    /// Every live CQ, for DEVICE_FATAL ([`NdkDevice::device_fatal`]).
    cqs: ObjectTable<Cq>,
    /// Every live SRQ, for DEVICE_FATAL.
    srqs: ObjectTable<Srq>,
    /// QPs by device handle: a CQE's `qp` finds its QP here in O(1), bounds-checked and
    /// without a lock, if the QP completes on the polled CQ.
    qps: QpTable,
    /// Every live QP again, under a lock, for the traffic counters' readers (the lock-free
    /// table's entries are only safe for a CQ's own poller).
    live_qps: ObjectTable<Qp>,
    /// What closed QPs moved.
    closed_traffic: ClosedTraffic,
    /// CQs that entered their error state.
    cq_errors: AtomicU64,
    bad_cqes: AtomicU64,
    /// Per MR index: the key a peer's SendAndInvalidate last invalidated (0 = none), so a
    /// later NdkInvalidate of that token fails (ndkpi.md §5.4); the device itself accepts
    /// invalidating an invalid FRMR (M27).
    remote_invalidated: Box<[AtomicU32]>,
    /// The connection side (`ndk::connect`), between its start and
    /// [`NdkDevice::stop_connections`].
    connections: SpinLock<Option<Arc<dyn Connections>>>,
}

/// Handles are below `max_*` (M10), which M5 bounds by 65536.
const MAX_TABLE: u32 = 65536;

impl NdkDevice {
    /// Binds the NDK layer to a started device's verbs (PASSIVE_LEVEL, at device start) and
    /// routes the device-wide events to it.
    ///
    /// # Errors
    /// STATUS_INSUFFICIENT_RESOURCES.
    pub fn new(hw: Arc<Verbs>) -> NdkResult<Arc<NdkDevice>> {
        let caps = *hw.caps();
        let ndk = try_arc(NdkDevice {
            cqs: ObjectTable::new(caps.max_cq.min(MAX_TABLE))?,
            srqs: ObjectTable::new(caps.max_srq.min(MAX_TABLE))?,
            qps: QpTable::new(caps.max_qp.min(MAX_TABLE))?,
            live_qps: ObjectTable::new(caps.max_qp.min(MAX_TABLE))?,
            closed_traffic: ClosedTraffic::default(),
            cq_errors: AtomicU64::new(0),
            remote_invalidated: try_vec(caps.max_mr.min(MAX_TABLE) as usize, || AtomicU32::new(0))?,
            hw,
            bad_cqes: AtomicU64::new(0),
            connections: SpinLock::new(None),
        })
        .map_err(|_| NdkError::InsufficientResources)?;
        let hook: Arc<dyn DeviceEvents> = try_arc(DeviceHook(Arc::downgrade(&ndk)))
            .map_err(|_| NdkError::InsufficientResources)?;
        ndk.hw.route_device(Some(hook));
        Ok(ndk)
    }

    /// Installs the connection side (`ndk::connect::start`); one installed earlier is stopped.
    pub fn set_connections(&self, c: Option<Arc<dyn Connections>>) {
        let old = core::mem::replace(&mut *self.connections.lock(), c);
        if let Some(old) = old {
            old.stop();
        }
    }

    /// Stops the connection side (PASSIVE_LEVEL, after every NDK_ADAPTER has closed): QP1
    /// destroyed, every GID unbound.
    pub fn stop_connections(&self) {
        self.set_connections(None);
    }

    /// The connection side, if started (`ndk::connect::engine` is its concrete type).
    pub fn connections(&self) -> Option<Arc<dyn Connections>> {
        self.connections.lock().clone()
    }

    /// OpenNDKAdapterHandler: negotiates the version and creates an NDK_ADAPTER.
    ///
    /// # Errors
    /// NDIS_STATUS_BAD_VERSION, NDIS_STATUS_RESOURCES.
    pub fn open_adapter(
        self: &Arc<Self>,
        requested: NDK_VERSION,
    ) -> Result<*mut NDK_ADAPTER, NDIS_STATUS> {
        let version = negotiate_version(requested)?;
        let ndk = NDK_ADAPTER {
            Header: super::object::header(version, NdkObjectTypeAdapter),
            Dispatch: Adapter::TABLE,
        };
        let adapter = ObjRef::try_new(
            ndk,
            Adapter {
                life: Lifetime::new(),
                device: self.clone(),
                version,
                info: adapter_info(self.hw.caps(), version),
            },
        )
        .map_err(|_| NDIS_STATUS_RESOURCES)?;
        Ok(adapter.publish())
    }

    /// The device's verbs.
    pub fn hw(&self) -> &Verbs {
        &self.hw
    }

    /// A counted handle to the verbs (for the connection side, which outlives calls).
    pub fn hw_handle(&self) -> Arc<Verbs> {
        self.hw.clone()
    }

    /// Files `cq` under its handle and routes the CQ's device events to it (its
    /// `Verbs::destroy_cq` undoes that): a CQNE reaches the NDK CQ with the device's one
    /// lookup of the handle, on the CQ's DPC targeted at the first processor of its
    /// GROUP_AFFINITY if it has one (NdkCreateCq `Affinity`), else on the CQ-notification DPC.
    pub(crate) fn register_cq(&self, cq: &ObjRef<Cq>) -> NdkResult<()> {
        let link = cq.link()?;
        self.cqs.insert_bound(cq.handle(), cq, || {
            self.hw.route_cq(cq.handle(), link, cq.target_processor())
        })
    }

    pub(crate) fn unregister_cq(&self, handle: u32) {
        drop(self.cqs.remove(handle));
    }

    pub(crate) fn register_qp(&self, qp: &ObjRef<Qp>) -> NdkResult<()> {
        let (send_cq, recv_cq) = qp.cq_handles();
        self.live_qps.insert(qp.handle(), qp)?;
        self.qps
            .insert(qp.handle(), qp, send_cq, recv_cq)
            .inspect_err(|_| drop(self.live_qps.remove(qp.handle())))
    }

    /// Unregisters `qp`, returning the table's count of it (for its CQs' graveyards). Its
    /// traffic moves to the closed total under the table's lock, so a reader counts it once.
    pub(crate) fn unregister_qp(&self, qp: &Qp) -> Option<ObjRef<Qp>> {
        let live = self.live_qps.remove_with(qp.handle(), |q| {
            self.closed_traffic.add(q.traffic().snapshot());
        });
        drop(live);
        self.qps.remove_exact(qp.handle(), qp)
    }

    /// What every QP of this device moved, the closed ones included (OID_NDK_STATISTICS).
    /// Takes the live-QP table's lock once and allocates nothing.
    pub fn traffic(&self) -> Traffic {
        self.live_qps.fold(self.closed_traffic.get(), |t, q| {
            t.plus(q.traffic().snapshot())
        })
    }

    pub(crate) fn count_cq_error(&self) {
        self.cq_errors.fetch_add(1, Ordering::Relaxed);
    }

    /// CQs that entered their error state (overflow, device error, a corrupt ring).
    pub fn cq_errors(&self) -> u64 {
        self.cq_errors.load(Ordering::Relaxed)
    }

    /// QPs by device handle, for the CQ pollers.
    #[inline(always)]
    pub(crate) fn qp_table(&self) -> &QpTable {
        &self.qps
    }

    /// Files `srq` under its handle and routes the SRQ's device events to it (its
    /// `Verbs::destroy_srq` undoes that).
    pub(crate) fn register_srq(&self, srq: &ObjRef<Srq>) -> NdkResult<()> {
        let link = srq.link()?;
        self.srqs
            .insert_bound(srq.handle(), srq, || self.hw.route_srq(srq.handle(), link))
    }

    pub(crate) fn unregister_srq(&self, handle: u32) {
        drop(self.srqs.remove(handle));
    }

    /// A ReceiveAndInvalidate result reported `key` invalidated (M28).
    pub(crate) fn note_remote_invalidate(&self, key: u32) {
        if let Some(s) = self.remote_invalidated.get((key >> 8) as usize) {
            s.store(key, Ordering::Release);
        }
    }

    /// Whether `key` is the one a peer invalidated last for its MR index.
    pub(crate) fn remotely_invalidated(&self, key: u32) -> bool {
        self.remote_invalidated
            .get((key >> 8) as usize)
            .is_some_and(|s| key != 0 && s.load(Ordering::Acquire) == key)
    }

    /// `key` became valid (fast register, FRMR initialized): forget any earlier remote
    /// invalidation under its MR index.
    pub(crate) fn forget_remote_invalidate(&self, key: u32) {
        if let Some(s) = self.remote_invalidated.get((key >> 8) as usize) {
            s.store(0, Ordering::Release);
        }
    }

    pub(crate) fn count_bad_cqe(&self) {
        self.bad_cqes.fetch_add(1, Ordering::Relaxed);
    }

    /// CQEs dropped because they named no outstanding request (diagnostics).
    pub fn bad_cqes(&self) -> u64 {
        self.bad_cqes.load(Ordering::Relaxed)
    }

    /// DEVICE_FATAL: every CQ reports STATUS_INTERNAL_ERROR (at its next arm, or now if
    /// armed) and every SRQ with a notification callback STATUS_INTERNAL_ERROR (§5.4, §5.9).
    pub fn device_fatal(&self) {
        self.cqs
            .for_each(|cq| cq.event(CqEvent::Error(STATUS_INTERNAL_ERROR)));
        self.srqs.for_each(|srq| srq.error_event());
    }
}

/// An open NDK_ADAPTER.
pub struct Adapter {
    life: Lifetime,
    device: Arc<NdkDevice>,
    version: NDK_VERSION,
    info: NDK_ADAPTER_INFO,
}

// NDK_ADAPTER_INFO holds only integers.
impl NdkObject for Adapter {
    type Ndk = NDK_ADAPTER;
    fn lifetime(&self) -> &Lifetime {
        &self.life
    }
}

impl Adapter {
    /// The negotiated version (also in every object header under this adapter).
    pub fn version(&self) -> NDK_VERSION {
        self.version
    }

    /// The adapter info.
    pub fn info(&self) -> &NDK_ADAPTER_INFO {
        &self.info
    }

    /// The device.
    pub fn device(&self) -> &Arc<NdkDevice> {
        &self.device
    }

    /// The device's verbs.
    pub fn hw(&self) -> &Verbs {
        self.device.hw()
    }
}

/// §5.7: whatever is wrong with a consumer's MDL chain (malformed, not virtually
/// contiguous, shorter than the region) is STATUS_INVALID_PARAMETER.
pub(crate) fn mdl_error(_: MdlError) -> NdkError {
    NdkError::InvalidParameter
}

/// An NdkBuildLam request checked against its MDL chain: what the mapping holds and the
/// bytes its `NDK_LOGICAL_ADDRESS_MAPPING` needs.
#[derive(Clone, Copy, Debug)]
pub struct LamPlan<'a> {
    region: MdlRegion<'a>,
    pages: u32,
    size: u32,
}

impl LamPlan<'_> {
    /// `AdapterPageCount`: pages the region spans (at least 1).
    pub fn pages(&self) -> u32 {
        self.pages
    }

    /// `*pLAMSize`: bytes of the mapping with its page array.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// `*pFBO`: the region's offset in its first page.
    pub fn first_byte_offset(&self) -> u32 {
        self.region.first_byte_offset()
    }
}

impl Adapter {
    /// The adapter logical address of each page of `region`, in order, into `out` (one entry
    /// per page; `Verbs::page_address` maps the PFNs).
    ///
    /// # Errors
    /// STATUS_INVALID_PARAMETER if `out` is not one entry per page, a PFN is bad (see
    /// [`crate::os::mdl::MdlPages`]) or has no logical address.
    pub fn map_pages(&self, region: &MdlRegion<'_>, out: &mut [u64]) -> NdkResult<()> {
        if out.len() != region.page_count() {
            return Err(NdkError::InvalidParameter);
        }
        let mut mapped = 0usize;
        // Driven by the walk, not by `out`: its last step may still refuse a shared page.
        for page in region.pages() {
            let page = page.map_err(mdl_error)?;
            let slot = out.get_mut(mapped).ok_or(NdkError::InvalidParameter)?;
            *slot = self
                .hw()
                .page_address(page.pfn)
                .ok_or(NdkError::InvalidParameter)?;
            mapped += 1;
        }
        if mapped != out.len() {
            return Err(NdkError::InvalidParameter);
        }
        Ok(())
    }

    /// NdkBuildLam, first step (§5.7): checks that the first `length` bytes of `mdl` are a
    /// valid, virtually contiguous region and sizes its mapping.
    ///
    /// # Errors
    /// STATUS_INVALID_PARAMETER for `length` 0 or above 4 GiB, a bad chain
    /// ([`MdlChain::region`]), or a mapping whose size does not fit a ULONG.
    pub fn plan_lam<'a>(&self, mdl: MdlChain<'a>, length: usize) -> NdkResult<LamPlan<'a>> {
        let length = u32::try_from(length).map_err(|_| NdkError::InvalidParameter)?;
        let region = mdl.region(u64::from(length)).map_err(mdl_error)?;
        let pages = u32::try_from(region.page_count()).map_err(|_| NdkError::InvalidParameter)?;
        let size = ndk_lam_size(pages).ok_or(NdkError::InvalidParameter)?;
        Ok(LamPlan {
            region,
            pages,
            size,
        })
    }

    /// NdkBuildLam, second step: the adapter logical address of each page of `plan` into
    /// `out` (the LAM's `AdapterPageArray`, [`LamPlan::pages`] entries). The mapping holds
    /// no resources (nothing for NdkReleaseLam to undo).
    ///
    /// # Errors
    /// As [`Adapter::map_pages`].
    pub fn build_lam(&self, plan: &LamPlan<'_>, out: &mut [u64]) -> NdkResult<()> {
        self.map_pages(&plan.region, out)
    }
}

impl ObjRef<Adapter> {
    /// CloseNDKAdapterHandler: blocks (PASSIVE_LEVEL) until every descendant has closed and
    /// every callback on them has returned (§5.2).
    pub fn close_blocking(&self) {
        if self.close(None) == STATUS_PENDING {
            let life = &self.life;
            self.hw().wait_until(&|| life.is_drained());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The model's default caps as the verbs honour them at VERSION 20 (pvrdma.md §4).
    fn model_caps() -> Caps {
        let mut c = Caps::parse(&pvrdma_sim::dsr::Caps::default().emit([0; 6]));
        c.max_fast_reg_page_list_len = c.max_fast_reg_pages(20);
        c
    }

    fn v(major: u16, minor: u16) -> NDK_VERSION {
        NDK_VERSION {
            Major: major,
            Minor: minor,
        }
    }

    #[test]
    fn version_negotiation() {
        for m in 0..=2 {
            assert_eq!(negotiate_version(v(1, m)), Ok(v(1, 2)));
        }
        for m in 0..=1 {
            assert_eq!(negotiate_version(v(2, m)), Ok(v(2, 1)));
        }
        for bad in [v(1, 3), v(2, 2), v(0, 0), v(3, 0), v(0xFFFF, 0)] {
            assert_eq!(
                negotiate_version(bad),
                Err(NDIS_STATUS_BAD_VERSION),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn info_from_model_caps() {
        let i = adapter_info(&model_caps(), v(2, 1));
        assert_eq!(i.Version, v(2, 1));
        assert_eq!((i.VendorId, i.DeviceId), (0x15AD, 0x0820));
        assert_eq!(i.MaxRegistrationSize, 1 << 30);
        assert_eq!(i.MaxWindowSize, 0);
        assert_eq!(i.FRMRPageCount, 512);
        assert_eq!(i.MaxInitiatorRequestSge, 16);
        assert_eq!(i.MaxReceiveRequestSge, 16);
        assert_eq!(i.MaxReadRequestSge, 16);
        assert_eq!(i.MaxTransferLength, 0x8000_0000);
        assert_eq!(i.MaxInlineDataSize, 0);
        assert_eq!((i.MaxInboundReadLimit, i.MaxOutboundReadLimit), (16, 16));
        assert_eq!(
            (i.MaxReceiveQueueDepth, i.MaxInitiatorQueueDepth),
            (4096, 4096)
        );
        assert_eq!(i.MaxSrqDepth, 4096);
        assert_eq!(i.MaxCqDepth, 65536);
        assert_eq!(i.AdapterFlags, NDK_ADAPTER_FLAG_RDMA_READ_SINK_NOT_REQUIRED);
        assert_eq!(i.RdmaTechnology, NdkRoCEv2);
    }

    #[test]
    fn info_rounds_limits_down_to_powers_of_two() {
        let mut c = model_caps();
        c.max_qp_wr = 1000;
        c.max_srq_wr = 3000;
        c.max_cqe = 65535;
        c.max_srq_sge = 4;
        c.max_sge_rd = 30;
        let i = adapter_info(&c, v(1, 2));
        assert_eq!(i.MaxInitiatorQueueDepth, 512);
        assert_eq!(i.MaxSrqDepth, 2048);
        assert_eq!(i.MaxCqDepth, 32768);
        assert_eq!(i.MaxReceiveRequestSge, 4);
        assert_eq!(i.MaxReadRequestSge, 16);
        c.max_srq = 0;
        let i = adapter_info(&c, v(1, 2));
        assert_eq!(i.MaxSrqDepth, 0);
        assert_eq!(i.MaxReceiveRequestSge, 16);
    }

    #[test]
    fn info_buffer_sizing() {
        assert_eq!(ADAPTER_INFO_SIZE, 0x68);
        assert_eq!(ADAPTER_INFO_SIZE_V1, 0x60);
        assert_eq!(adapter_info_bytes(true, 0x68), Ok(0x68));
        assert_eq!(adapter_info_bytes(true, 0x100), Ok(0x68));
        assert_eq!(adapter_info_bytes(true, 0x67), Ok(0x60));
        assert_eq!(adapter_info_bytes(true, 0x60), Ok(0x60));
        assert_eq!(adapter_info_bytes(true, 0x5F), Err(0x68));
        assert_eq!(adapter_info_bytes(false, 0x68), Err(0x68));
    }
}
