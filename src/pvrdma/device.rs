//! Device bring-up, teardown, interrupts and event dispatch (§5, §13; style.md §13, §14).
//!
//! [`Device::probe`] follows `pvrdma_pci_probe`: VERSION check (18–20), DSR, command and
//! response slots, async-event and CQ-notification rings (4 pages each, M13), DSRLOW then
//! DSRHIGH, caps check, interrupt connection, IMR = 0, ACTIVATE + ERR, then one CREATE_BIND
//! per GID. Each step owns what it allocated; once DSRHIGH is written a reset guard makes any
//! later failure mask interrupts, disconnect them and RESET the device before the DMA memory
//! is freed. Dropping the [`Device`] does the same (`pvrdma_pci_remove`): objects must have
//! been destroyed with commands by then.
//!
//! Interrupts: the ISR only counts and queues the vector's DPC ([`crate::os::Dpc`]
//! coalesces). Vector 0 completes the outstanding command, vector 1 drains the async ring and
//! dispatches typed events to the handlers registered per object, vector 2 drains the
//! CQ-notification ring and calls each CQ's notification handler (Linux
//! `pvrdma_intrx_handler`). Both drains copy a small fixed batch of elements off the ring
//! (no lock: only the ring's DPC drains it, and `Dpc::run` serializes its runs), then
//! deliver them: each handle is looked up once
//! in its bounds-checked [`HandleTable`] (the handler is cloned under the table lock), and the
//! handler runs with no driver lock held, so it may call back into the driver (a consumer
//! callback re-arming, polling or closing its CQ). Counters are atomics.
#![deny(unsafe_code)]

use alloc::sync::{Arc, Weak};
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use crate::os::alloc::try_arc;
use crate::os::dma::PAGE_SIZE;
use crate::os::sync::{from_device_barrier, mmio_flush};
use crate::os::{
    DmaBuffer, Dpc, DpcHandler, InterruptHandler, Platform, Processor, SharedDma, SpinLock, Uar,
};

use super::cmd::{CmdChannel, CreateBind, DEFAULT_TIMEOUT_NS};
use super::dsr::{self, CAPS_SIZE, Caps, DsrInit, GosInfo, RingPages};
use super::eqe::{EQE_SIZE, Eqe, EqeType, EventTarget};
use super::error::PvrdmaError;
use super::pdir::PagedBuffer;
use super::regs::{self, Ctl, IMR_ALL_ENABLED, IMR_ALL_MASKED};
use super::ring::{Ring, RingCorrupt};
use super::table::HandleTable;
use super::uar::{self, Doorbell};
use crate::os::Bell;

/// `PVRDMA_NUM_RING_PAGES` (M13).
pub const DEVICE_RING_PAGES: u32 = 4;
/// CQNE size.
pub const CQNE_SIZE: usize = 4;
/// Largest message (QUERY_PORT `max_msg_sz` of the model, M41).
pub const MAX_MSG_SZ: u32 = 0x8000_0000;
/// MSI-X vectors (M21).
pub const VECTORS: u32 = 3;
/// CREATE_BIND's `mtu` until [`Device::set_gid_mtu`]: Linux's fixed 1024.
pub const DEFAULT_GID_MTU: u32 = 1024;
/// Vector of command responses.
pub const VECTOR_CMD: u32 = 0;
/// Vector of async events.
pub const VECTOR_ASYNC: u32 = 1;
/// Vector of CQ notifications.
pub const VECTOR_CQ: u32 = 2;

/// A CQ's event handler (DISPATCH_LEVEL).
pub trait CqEvents: Send + Sync {
    /// A CQNE named this CQ: an armed completion arrived.
    fn completion(&self);
    /// CQ_ERR: the CQ overflowed or its index was bad; it is unusable.
    fn error(&self);
}

/// A QP's event handler (DISPATCH_LEVEL): QP_FATAL, QP_REQ_ERR, QP_ACCESS_ERR, COMM_EST,
/// SQ_DRAINED, PATH_MIG, PATH_MIG_ERR, QP_LAST_WQE_REACHED.
pub trait QpEvents: Send + Sync {
    /// The event.
    fn event(&self, kind: EqeType);
}

/// An SRQ's event handler (DISPATCH_LEVEL): SRQ_ERR, SRQ_LIMIT_REACHED.
pub trait SrqEvents: Send + Sync {
    /// The event.
    fn event(&self, kind: EqeType);
}

/// Device-wide events (DISPATCH_LEVEL).
pub trait DeviceEvents: Send + Sync {
    /// PORT_ACTIVE, PORT_ERR, LID_CHANGE, PKEY_CHANGE, SM_CHANGE, CLIENT_REREGISTER,
    /// GID_CHANGE, with the port number from `info`.
    fn port_event(&self, kind: EqeType, port: u32);
    /// DEVICE_FATAL.
    fn device_fatal(&self);
}

/// Bring-up parameters.
#[derive(Clone, Copy, Debug)]
pub struct DeviceConfig<'a> {
    /// GIDs to bind at bring-up (index = position), RoCEv2.
    pub gids: &'a [[u8; 16]],
    /// Command timeout.
    pub cmd_timeout_ns: u64,
    /// `gos_info`.
    pub gos_info: GosInfo,
}

impl Default for DeviceConfig<'_> {
    fn default() -> Self {
        DeviceConfig {
            gids: &[],
            cmd_timeout_ns: DEFAULT_TIMEOUT_NS,
            gos_info: GosInfo::DRIVER,
        }
    }
}

/// Event and interrupt counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceStats {
    /// ISR calls per vector.
    pub interrupts: [u64; 3],
    /// Async events dispatched to a handler.
    pub events: u64,
    /// Async events whose type was unknown or whose handle named no registered object.
    pub dropped_events: u64,
    /// CQNEs dispatched.
    pub cq_notifications: u64,
    /// CQNEs naming no registered CQ.
    pub dropped_notifications: u64,
    /// Whether the async ring was abandoned after a bad index (M14).
    pub async_ring_broken: bool,
    /// Whether the CQ-notification ring was abandoned.
    pub cq_ring_broken: bool,
}

/// A device-produced ring (async events, CQ notifications): page 0 is the ring state with the
/// device producing on `rx` (@8/@12), elements from page 1.
///
/// One consumer: the ring is drained only by its vector's DPC routine, and [`Dpc::run`] never
/// runs one DPC's routine twice at once, whatever processors it was queued to; so `head` is
/// read and written by one drain at a time, with no lock, each run ordered after the last by
/// `Dpc::run` (`os::dpc` tests it; `cq_notifications_queued_from_two_processors_*` here).
struct DeviceRing {
    buf: PagedBuffer,
    ring: Ring,
    elem: usize,
    /// Our consumer index (`cons_head` as last published).
    head: AtomicU32,
    broken: AtomicBool,
}

impl DeviceRing {
    fn new(platform: &dyn Platform, elem: usize) -> Result<Self, PvrdmaError> {
        let n = (DEVICE_RING_PAGES as usize - 1) * PAGE_SIZE / elem;
        Ok(DeviceRing {
            buf: PagedBuffer::alloc(platform.dma(), DEVICE_RING_PAGES)?,
            ring: Ring::new(n as u32).ok_or(PvrdmaError::InvalidParameter)?,
            elem,
            head: AtomicU32::new(0),
            broken: AtomicBool::new(false),
        })
    }

    fn pages(&self) -> RingPages {
        RingPages {
            num_pages: self.buf.npages(),
            pdir_dma: self.buf.pdir().dma(),
        }
    }

    /// Pops one element into `out` (`out.len() == elem`).
    fn pop(&self, head: &mut u32, out: &mut [u8]) -> Result<bool, RingCorrupt> {
        let tail = self
            .buf
            .page(0)
            .and_then(|p| p.view().atomic_u32(8))
            .map(|a| a.load(Ordering::Acquire))
            .ok_or(RingCorrupt)?;
        let Some(slot) = self.ring.has_data(tail, *head)? else {
            return Ok(false);
        };
        from_device_barrier();
        let off = PAGE_SIZE + slot as usize * self.elem;
        if let Some(v) = self.buf.view(off, self.elem) {
            v.read_bytes(0, out);
        }
        *head = self.ring.inc(*head);
        if let Some(a) = self.buf.page(0).and_then(|p| p.view().atomic_u32(12)) {
            a.store(*head, Ordering::Release);
        }
        Ok(true)
    }
}

/// State shared by the device object, its DPCs and its ISR.
struct Shared {
    platform: Arc<dyn Platform>,
    version: u32,
    caps: Caps,
    uar: Uar,
    cmd: Arc<CmdChannel>,
    async_ring: DeviceRing,
    cq_ring: DeviceRing,
    /// Each CQ's handler (and targeted DPC), registered by the layer above once its CQ
    /// exists; read by the CQ-notification drain (CQNE) and the async drain (CQ_ERR), one
    /// lookup per element. The only table of CQ handles in this layer.
    cqs: SpinLock<HandleTable<CqEntry>>,
    /// Each QP's handler, read by the async drain (QP events). The NDK layer registers none
    /// yet (its QP events are not mapped), so QP events are counted as dropped.
    qps: SpinLock<HandleTable<Arc<dyn QpEvents>>>,
    /// Each SRQ's handler, read by the async drain (SRQ_LIMIT_REACHED, SRQ_ERR).
    srqs: SpinLock<HandleTable<Arc<dyn SrqEvents>>>,
    /// The handler of port and device-wide events (DEVICE_FATAL), read by the async drain.
    device_events: SpinLock<Option<Arc<dyn DeviceEvents>>>,
    /// CREATE_BIND's `mtu` (bytes): the RoCE MTU the layer above runs the port at (Linux
    /// always sends 1024, pvrdma.md §5 step 10; the miniport sets the operational
    /// `*NetworkDirectRoCEFrameSize` before binding any GID).
    gid_mtu: AtomicU32,
    dpcs: SpinLock<Option<[Dpc; 3]>>,
    counters: Counters,
    interrupts: [AtomicU64; 3],
    // Dropped last (declared last): the device has been RESET by then.
    _dsr: SharedDma,
}

/// A registered CQ: its handler and, when the CQ has a target processor, the DPC that runs
/// the completion handler there (NDK CreateCq `Affinity`).
struct CqEntry {
    handler: Arc<dyn CqEvents>,
    targeted: Option<(Dpc, Processor)>,
}

/// DPC routine of a targeted CQ: the completion upcall on the CQ's processor.
struct CqNotifyDpc(Arc<dyn CqEvents>);

impl DpcHandler for CqNotifyDpc {
    fn run(&self) {
        self.0.completion();
    }
}

struct VectorDpc {
    shared: Weak<Shared>,
    vector: u32,
}

impl DpcHandler for VectorDpc {
    fn run(&self) {
        let Some(s) = self.shared.upgrade() else {
            return;
        };
        match self.vector {
            VECTOR_CMD => s.cmd.on_vector0(),
            VECTOR_ASYNC => s.drain_async(),
            _ => s.drain_cq_notifications(),
        }
    }
}

struct Isr {
    dpcs: [Dpc; 3],
    shared: Weak<Shared>,
}

impl InterruptHandler for Isr {
    fn isr(&self, vector: u32) -> bool {
        let Some(dpc) = self.dpcs.get(vector as usize) else {
            return false;
        };
        if let Some(s) = self.shared.upgrade()
            && let Some(c) = s.interrupts.get(vector as usize)
        {
            c.fetch_add(1, Ordering::Relaxed);
        }
        // MSI-X: nothing to acknowledge in the device (Linux reads no ICR either).
        dpc.queue(Processor::Current);
        true
    }
}

/// Elements a drain takes off a device ring per lock hold: the lock covers only the copies
/// into this local batch (no allocation), and the handlers run after it is released.
const DRAIN_BATCH: usize = 32;

/// Event counters, updated without a lock from the DPCs.
#[derive(Default)]
struct Counters {
    events: AtomicU64,
    dropped_events: AtomicU64,
    cq_notifications: AtomicU64,
    dropped_notifications: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// How a drain pass ended.
enum Drained {
    /// The ring is empty (or was abandoned): nothing left to do.
    Empty,
    /// The batch filled: deliver it, then drain again.
    More,
    /// The DPC's budget ran out: deliver the batch, then requeue the DPC.
    Budget,
    /// The device's index failed validation (M14): the ring was abandoned just now.
    Broke,
}

/// How a whole drain ended.
enum DrainEnd {
    /// Nothing left (or the ring was abandoned earlier).
    Done,
    /// The budget ran out: requeue the DPC.
    Requeue,
    /// The ring was abandoned in this drain: the device is lost (see [`Shared::ring_broke`]).
    Broke,
}

impl DeviceRing {
    /// Copies up to `batch.len()` elements (at most `*budget`) into `batch` and returns how
    /// many, and why it stopped. A bad index abandons the ring (M14). Only the ring's DPC
    /// calls it (see [`DeviceRing`]).
    fn drain_into<const N: usize>(
        &self,
        batch: &mut [[u8; N]],
        budget: &mut u32,
    ) -> (usize, Drained) {
        let mut head = self.head.load(Ordering::Relaxed);
        let (n, why) = self.take_into(&mut head, batch, budget);
        self.head.store(head, Ordering::Relaxed);
        (n, why)
    }

    fn take_into<const N: usize>(
        &self,
        head: &mut u32,
        batch: &mut [[u8; N]],
        budget: &mut u32,
    ) -> (usize, Drained) {
        let mut n = 0;
        for slot in batch.iter_mut() {
            if *budget == 0 {
                return (n, Drained::Budget);
            }
            match self.pop(head, slot) {
                Ok(true) => {}
                Ok(false) => return (n, Drained::Empty),
                Err(RingCorrupt) => {
                    // Only the drain that abandons the ring reports it.
                    let first = !self.broken.swap(true, Ordering::AcqRel);
                    return (
                        n,
                        if first {
                            Drained::Broke
                        } else {
                            Drained::Empty
                        },
                    );
                }
            }
            *budget -= 1;
            n += 1;
        }
        (n, Drained::More)
    }

    /// Drains the ring in batches, calling `deliver` for each element with no lock held.
    fn drain<const N: usize>(&self, mut deliver: impl FnMut(&[u8; N])) -> DrainEnd {
        if self.broken.load(Ordering::Acquire) {
            return DrainEnd::Done;
        }
        let mut budget = self.ring.cap();
        let mut batch = [[0u8; N]; DRAIN_BATCH];
        loop {
            let (n, why) = self.drain_into(&mut batch, &mut budget);
            for raw in batch.iter().take(n) {
                deliver(raw);
            }
            match why {
                Drained::More => {}
                Drained::Empty => return DrainEnd::Done,
                Drained::Budget => return DrainEnd::Requeue,
                Drained::Broke => return DrainEnd::Broke,
            }
        }
    }
}

impl Shared {
    fn requeue(&self, vector: u32) {
        if let Some(d) = self
            .dpcs
            .lock()
            .as_ref()
            .and_then(|d| d.get(vector as usize))
        {
            d.queue(Processor::Current);
        }
    }

    /// Vector 1: async events, each to its object's handler.
    fn drain_async(&self) {
        match self.async_ring.drain(|raw| self.dispatch_event(raw)) {
            DrainEnd::Done => {}
            DrainEnd::Requeue => self.requeue(VECTOR_ASYNC),
            DrainEnd::Broke => self.ring_broke(),
        }
    }

    /// The async-event or CQ-notification ring was abandoned (M14): every event or
    /// notification the device writes from now on is lost, CQ_ERR and DEVICE_FATAL among
    /// them, and an armed CQ would wait forever. So the device counts as failed: the
    /// DEVICE_FATAL handler runs (once per ring), with no driver lock held.
    fn ring_broke(&self) {
        let handler = self.device_events.lock().clone();
        if let Some(d) = handler {
            d.device_fatal();
        }
    }

    fn dispatch_event(&self, raw: &[u8; EQE_SIZE]) {
        let delivered = match Eqe::parse(raw) {
            Err(_) => false,
            Ok(e) => match e.target() {
                EventTarget::Cq(h) => {
                    let handler = self.cqs.lock().get(h).map(|e| e.handler.clone());
                    handler.map(|c| c.error()).is_some()
                }
                EventTarget::Qp(h) => {
                    let handler = self.qps.lock().get(h).cloned();
                    handler.map(|q| q.event(e.kind)).is_some()
                }
                EventTarget::Srq(h) => {
                    let handler = self.srqs.lock().get(h).cloned();
                    handler.map(|q| q.event(e.kind)).is_some()
                }
                EventTarget::Port(p) => {
                    let handler = self.device_events.lock().clone();
                    handler.map(|d| d.port_event(e.kind, p)).is_some()
                }
                EventTarget::Device => {
                    let handler = self.device_events.lock().clone();
                    handler.map(|d| d.device_fatal()).is_some()
                }
            },
        };
        bump(if delivered {
            &self.counters.events
        } else {
            &self.counters.dropped_events
        });
    }

    /// Vector 2 (`pvrdma_intrx_handler`): each CQNE's CQ is looked up once, and its handler
    /// runs with no driver lock held, here or in the CQ's own DPC on its target processor.
    fn drain_cq_notifications(&self) {
        match self
            .cq_ring
            .drain(|raw: &[u8; CQNE_SIZE]| self.notify_cq(u32::from_le_bytes(*raw)))
        {
            DrainEnd::Done => {}
            DrainEnd::Requeue => self.requeue(VECTOR_CQ),
            DrainEnd::Broke => self.ring_broke(),
        }
    }

    fn notify_cq(&self, handle: u32) {
        let entry = self
            .cqs
            .lock()
            .get(handle)
            .map(|e| (e.handler.clone(), e.targeted.clone()));
        let delivered = match entry {
            // Coalesces like KeInsertQueueDpc: CQNEs arriving before the CQ's DPC runs get
            // one upcall (each arm yields at most one CQNE, M18).
            Some((_, Some((dpc, target)))) => {
                dpc.queue(target);
                true
            }
            Some((handler, None)) => {
                handler.completion();
                true
            }
            None => false,
        };
        bump(if delivered {
            &self.counters.cq_notifications
        } else {
            &self.counters.dropped_notifications
        });
    }

    fn teardown(&self) {
        let bar1 = self.platform.bar1();
        regs::IMR.write(bar1, IMR_ALL_MASKED);
        self.platform.disconnect_interrupt();
        Ctl::Reset.write(bar1);
        self.cmd.shutdown();
    }
}

/// Makes a failed bring-up reset the device before anything it may DMA to is freed.
struct ResetGuard<'a> {
    platform: &'a dyn Platform,
    cmd: Option<Arc<CmdChannel>>,
    /// Keeps the DSR and rings alive until after the RESET (fields drop after `drop`).
    keep: Option<Arc<Shared>>,
    armed: bool,
}

impl Drop for ResetGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            let bar1 = self.platform.bar1();
            regs::IMR.write(bar1, IMR_ALL_MASKED);
            self.platform.disconnect_interrupt();
            Ctl::Reset.write(bar1);
            if let Some(c) = &self.cmd {
                c.shutdown();
            }
        }
    }
}

/// An initialized PVRDMA device.
pub struct Device {
    shared: Arc<Shared>,
}

impl Device {
    /// Brings the device up (PASSIVE_LEVEL; issues blocking CREATE_BIND commands).
    ///
    /// # Errors
    ///
    /// [`PvrdmaError::UnsupportedVersion`], [`PvrdmaError::NoMemory`],
    /// [`PvrdmaError::UnsupportedDevice`] (caps), [`PvrdmaError::ActivateFailed`], or the
    /// error of a CREATE_BIND. Everything allocated so far is released, after a RESET if the
    /// device had been given the DSR.
    pub fn probe(
        platform: Arc<dyn Platform>,
        config: &DeviceConfig<'_>,
    ) -> Result<Device, PvrdmaError> {
        // 1. VERSION and the UAR.
        let version = regs::VERSION.read(platform.bar1());
        if !regs::version::supported(version) {
            return Err(PvrdmaError::UnsupportedVersion(version));
        }
        let uar = platform.map_uar()?;
        // 2–4. DSR, slots, device rings (all zeroed at allocation).
        let mut dsr_buf = DmaBuffer::alloc(platform.dma(), PAGE_SIZE)?;
        let cmd = CmdChannel::new(platform.clone(), version, config.cmd_timeout_ns)?;
        let async_ring = DeviceRing::new(&*platform, EQE_SIZE)?;
        let cq_ring = DeviceRing::new(&*platform, CQNE_SIZE)?;
        dsr::write_dsr(
            dsr_buf.as_mut_slice(),
            &DsrInit {
                gos_info: config.gos_info,
                cmd_slot_dma: cmd.cmd_slot_dma(),
                resp_slot_dma: cmd.resp_slot_dma(),
                async_ring: async_ring.pages(),
                cq_ring: cq_ring.pages(),
                uar_pfn: platform.uar_pfn(),
                device_version: version,
            },
        )?;
        let dsr = dsr_buf.share();
        // 5. DSR address, low half first; the device loads the DSR on DSRHIGH.
        let mut guard = ResetGuard {
            platform: &*platform,
            cmd: Some(cmd.clone()),
            keep: None,
            armed: true,
        };
        let bar1 = platform.bar1();
        regs::DSRLOW.write(bar1, dsr.logical() as u32);
        regs::DSRHIGH.write(bar1, (dsr.logical() >> 32) as u32);
        // The device filled caps during the DSRHIGH write; read them only after it.
        mmio_flush();
        // 6. caps.
        let mut raw_caps = [0u8; CAPS_SIZE];
        dsr.view().read_bytes(dsr::off::CAPS, &mut raw_caps);
        let caps = Caps::parse(&raw_caps);
        caps.check(version)?;
        // Handle tables sized by caps (handles are < max_*, M10).
        let cqs = HandleTable::new(caps.max_cq)?;
        let qps = HandleTable::new(caps.max_qp)?;
        let srqs = HandleTable::new(caps.max_srq)?;
        let shared = try_arc(Shared {
            platform: platform.clone(),
            version,
            caps,
            uar,
            cmd: cmd.clone(),
            async_ring,
            cq_ring,
            cqs: SpinLock::new(cqs),
            qps: SpinLock::new(qps),
            srqs: SpinLock::new(srqs),
            device_events: SpinLock::new(None),
            gid_mtu: AtomicU32::new(DEFAULT_GID_MTU),
            dpcs: SpinLock::new(None),
            counters: Counters::default(),
            interrupts: [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)],
            _dsr: dsr,
        })?;
        guard.keep = Some(shared.clone());
        // 7. Interrupts: one DPC per vector, then the ISR.
        let mk = |vector| -> Result<Dpc, PvrdmaError> {
            let h: Arc<dyn DpcHandler> = try_arc(VectorDpc {
                shared: Arc::downgrade(&shared),
                vector,
            })?;
            Ok(Dpc::new(platform.scheduler(), h)?)
        };
        let dpcs = [mk(VECTOR_CMD)?, mk(VECTOR_ASYNC)?, mk(VECTOR_CQ)?];
        *shared.dpcs.lock() = Some(dpcs.clone());
        let isr: Arc<dyn InterruptHandler> = try_arc(Isr {
            dpcs,
            shared: Arc::downgrade(&shared),
        })?;
        platform.connect_interrupt(isr)?;
        // 8. Unmask.
        regs::IMR.write(bar1, IMR_ALL_ENABLED);
        // 9. Activate.
        Ctl::Activate.write(bar1);
        mmio_flush();
        let err = regs::ERR.read(bar1);
        if err != 0 {
            return Err(PvrdmaError::ActivateFailed(err));
        }
        // 10. GIDs.
        for (i, gid) in config.gids.iter().enumerate() {
            // CAST: below the GID table's length (`DeviceConfig::gids`).
            cmd.execute(&CreateBind::roce_v2(i as u32, *gid, DEFAULT_GID_MTU))?;
        }
        guard.armed = false;
        guard.cmd = None;
        guard.keep = None;
        Ok(Device { shared })
    }

    /// Device VERSION.
    pub fn version(&self) -> u32 {
        self.shared.version
    }

    /// Capabilities read at bring-up.
    pub fn caps(&self) -> &Caps {
        &self.shared.caps
    }

    /// The `mtu` every later CREATE_BIND carries (bytes).
    pub fn set_gid_mtu(&self, bytes: u32) {
        self.shared.gid_mtu.store(bytes, Ordering::Relaxed);
    }
    /// See [`Device::set_gid_mtu`] (1024 until set).
    pub fn gid_mtu(&self) -> u32 {
        self.shared.gid_mtu.load(Ordering::Relaxed)
    }

    /// The command channel (NDK objects submit their commands here).
    pub fn cmd(&self) -> &Arc<CmdChannel> {
        &self.shared.cmd
    }

    /// The platform.
    pub fn platform(&self) -> &Arc<dyn Platform> {
        &self.shared.platform
    }

    /// `db` bound to this device's UAR page, for a data-path port; the bell keeps the
    /// device's shared state (and with it the mapping) alive.
    pub fn bell(&self, db: impl Doorbell) -> Bell {
        uar::bell_owned_by(self.shared.clone(), |s| &s.uar, db)
    }

    /// CTL = UNQUIESCE, then ERR (link up, §5).
    ///
    /// # Errors
    ///
    /// [`PvrdmaError::ActivateFailed`] with the ERR value.
    pub fn unquiesce(&self) -> Result<(), PvrdmaError> {
        let bar1 = self.shared.platform.bar1();
        Ctl::Unquiesce.write(bar1);
        mmio_flush();
        match regs::ERR.read(bar1) {
            0 => Ok(()),
            e => Err(PvrdmaError::ActivateFailed(e)),
        }
    }

    /// Registers the handler for CQ `handle` (from CREATE_CQ).
    ///
    /// # Errors
    ///
    /// [`PvrdmaError::InvalidParameter`] if the handle is out of range or taken.
    pub fn register_cq(&self, handle: u32, h: Arc<dyn CqEvents>) -> Result<(), PvrdmaError> {
        self.shared.cqs.lock().insert(
            handle,
            CqEntry {
                handler: h,
                targeted: None,
            },
        )
    }
    /// Registers the handler for CQ `handle` with a target processor: completion upcalls run
    /// in a DPC of this CQ queued to `target` (errors stay on the vector-1 DPC).
    /// [`Processor::Current`] is [`Device::register_cq`]. PASSIVE_LEVEL (allocates the DPC).
    ///
    /// # Errors
    ///
    /// As [`Device::register_cq`], or [`PvrdmaError::NoMemory`].
    pub fn register_cq_on(
        &self,
        handle: u32,
        h: Arc<dyn CqEvents>,
        target: Processor,
    ) -> Result<(), PvrdmaError> {
        let targeted = match target {
            Processor::Current => None,
            t => {
                let routine: Arc<dyn DpcHandler> = try_arc(CqNotifyDpc(h.clone()))?;
                Some((Dpc::new(self.shared.platform.scheduler(), routine)?, t))
            }
        };
        self.shared.cqs.lock().insert(
            handle,
            CqEntry {
                handler: h,
                targeted,
            },
        )
    }
    /// Unregisters a CQ (before DESTROY_CQ); returns its handler. A completion upcall already
    /// queued on the CQ's processor may still run once.
    pub fn unregister_cq(&self, handle: u32) -> Option<Arc<dyn CqEvents>> {
        self.shared.cqs.lock().remove(handle).map(|e| e.handler)
    }
    /// Registers the handler for QP `handle` (`qp_handle`, or `qpn` before v20).
    ///
    /// # Errors
    ///
    /// As [`Device::register_cq`].
    pub fn register_qp(&self, handle: u32, h: Arc<dyn QpEvents>) -> Result<(), PvrdmaError> {
        self.shared.qps.lock().insert(handle, h)
    }
    /// Unregisters a QP.
    pub fn unregister_qp(&self, handle: u32) -> Option<Arc<dyn QpEvents>> {
        self.shared.qps.lock().remove(handle)
    }
    /// Registers the handler for SRQ `handle`.
    ///
    /// # Errors
    ///
    /// As [`Device::register_cq`].
    pub fn register_srq(&self, handle: u32, h: Arc<dyn SrqEvents>) -> Result<(), PvrdmaError> {
        self.shared.srqs.lock().insert(handle, h)
    }
    /// Unregisters an SRQ.
    pub fn unregister_srq(&self, handle: u32) -> Option<Arc<dyn SrqEvents>> {
        self.shared.srqs.lock().remove(handle)
    }
    /// Sets (or clears) the device-wide event handler.
    pub fn set_device_events(&self, h: Option<Arc<dyn DeviceEvents>>) {
        *self.shared.device_events.lock() = h;
    }

    /// Counters.
    pub fn stats(&self) -> DeviceStats {
        let s = &self.shared;
        let c = &s.counters;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let [v0, v1, v2] = &s.interrupts;
        DeviceStats {
            interrupts: [load(v0), load(v1), load(v2)],
            events: load(&c.events),
            dropped_events: load(&c.dropped_events),
            cq_notifications: load(&c.cq_notifications),
            dropped_notifications: load(&c.dropped_notifications),
            async_ring_broken: s.async_ring.broken.load(Ordering::Acquire),
            cq_ring_broken: s.cq_ring.broken.load(Ordering::Acquire),
        }
    }
}

impl Drop for Device {
    /// `pvrdma_pci_remove`: IMR = ~0, disconnect the interrupt, RESET, fail pending commands;
    /// memory is freed when the last DPC reference goes.
    fn drop(&mut self) {
        self.shared.teardown();
    }
}

#[cfg(test)]
mod tests;
