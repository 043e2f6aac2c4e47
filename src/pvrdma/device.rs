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
//! Interrupts: the ISR only queues the vector's DPC ([`crate::os::Dpc`] coalesces).
//! Vector 0 completes the outstanding command, vector 1 drains the async ring and dispatches
//! typed events to the handlers registered per object, vector 2 drains the CQ-notification
//! ring and calls each CQ's notification handler. Handles read from the rings are looked up
//! in bounds-checked [`HandleTable`]s; the handler is cloned under the table lock and called
//! after the lock is released.
#![deny(unsafe_code)]

use alloc::sync::{Arc, Weak};
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

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
use super::uar::Bell;
use super::uar::{self, Doorbell};

/// `PVRDMA_NUM_RING_PAGES` (M13).
pub const DEVICE_RING_PAGES: u32 = 4;
/// CQNE size.
pub const CQNE_SIZE: usize = 4;
/// Largest message (QUERY_PORT `max_msg_sz` of the model, M41).
pub const MAX_MSG_SZ: u32 = 0x8000_0000;
/// MSI-X vectors (M21).
pub const VECTORS: u32 = 3;
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
struct DeviceRing {
    buf: PagedBuffer,
    ring: Ring,
    elem: usize,
    head: SpinLock<u32>,
    broken: AtomicBool,
}

impl DeviceRing {
    fn new(platform: &dyn Platform, elem: usize) -> Result<Self, PvrdmaError> {
        let n = (DEVICE_RING_PAGES as usize - 1) * PAGE_SIZE / elem;
        Ok(DeviceRing {
            buf: PagedBuffer::alloc(platform.dma(), DEVICE_RING_PAGES)?,
            ring: Ring::new(n as u32).ok_or(PvrdmaError::InvalidParameter)?,
            elem,
            head: SpinLock::new(0),
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
    cqs: SpinLock<HandleTable<CqEntry>>,
    qps: SpinLock<HandleTable<Arc<dyn QpEvents>>>,
    srqs: SpinLock<HandleTable<Arc<dyn SrqEvents>>>,
    device_events: SpinLock<Option<Arc<dyn DeviceEvents>>>,
    dpcs: SpinLock<Option<[Dpc; 3]>>,
    stats: SpinLock<DeviceStats>,
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

    fn drain_async(&self) {
        let ring = &self.async_ring;
        if ring.broken.load(Ordering::Acquire) {
            return;
        }
        let mut head = ring.head.lock();
        let mut budget = ring.ring.cap();
        let mut raw = [0u8; EQE_SIZE];
        loop {
            if budget == 0 {
                drop(head);
                self.requeue(VECTOR_ASYNC);
                return;
            }
            match ring.pop(&mut head, &mut raw) {
                Ok(true) => {}
                Ok(false) => return,
                Err(RingCorrupt) => {
                    ring.broken.store(true, Ordering::Release);
                    self.stats.lock().async_ring_broken = true;
                    return;
                }
            }
            budget -= 1;
            self.dispatch_event(&raw);
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
        let mut st = self.stats.lock();
        if delivered {
            st.events = st.events.wrapping_add(1);
        } else {
            st.dropped_events = st.dropped_events.wrapping_add(1);
        }
    }

    fn drain_cq_notifications(&self) {
        let ring = &self.cq_ring;
        if ring.broken.load(Ordering::Acquire) {
            return;
        }
        let mut head = ring.head.lock();
        let mut budget = ring.ring.cap();
        let mut raw = [0u8; CQNE_SIZE];
        loop {
            if budget == 0 {
                drop(head);
                self.requeue(VECTOR_CQ);
                return;
            }
            match ring.pop(&mut head, &mut raw) {
                Ok(true) => {}
                Ok(false) => return,
                Err(RingCorrupt) => {
                    ring.broken.store(true, Ordering::Release);
                    self.stats.lock().cq_ring_broken = true;
                    return;
                }
            }
            budget -= 1;
            let handle = u32::from_le_bytes(raw);
            let entry = self
                .cqs
                .lock()
                .get(handle)
                .map(|e| (e.handler.clone(), e.targeted.clone()));
            let delivered = match entry {
                // Coalesces like KeInsertQueueDpc: CQNEs arriving before the CQ's DPC runs
                // get one upcall (each arm yields at most one CQNE, M18).
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
            let mut st = self.stats.lock();
            if delivered {
                st.cq_notifications = st.cq_notifications.wrapping_add(1);
            } else {
                st.dropped_notifications = st.dropped_notifications.wrapping_add(1);
            }
        }
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
            dpcs: SpinLock::new(None),
            stats: SpinLock::new(DeviceStats::default()),
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
            cmd.execute(&CreateBind {
                mtu: 1024,
                vlan: 0xFFF,
                index: i as u32,
                new_gid: *gid,
                gid_type: 2,
            })?;
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

    /// The command channel (NDK objects submit their commands here).
    pub fn cmd(&self) -> &Arc<CmdChannel> {
        &self.shared.cmd
    }

    /// The platform.
    pub fn platform(&self) -> &Arc<dyn Platform> {
        &self.shared.platform
    }

    /// Rings a doorbell on UAR page 0.
    #[inline]
    pub fn ring(&self, db: impl Doorbell) {
        uar::ring(&self.shared.uar, db);
    }

    /// `db` bound to this device's UAR page, for a data-path port; the bell keeps the
    /// device's shared state (and with it the mapping) alive.
    pub fn bell(&self, db: impl Doorbell) -> Bell {
        Bell::owned_by(self.shared.clone(), |s| &s.uar, db)
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
        let mut s = *self.shared.stats.lock();
        for (o, c) in s.interrupts.iter_mut().zip(&self.shared.interrupts) {
            *o = c.load(Ordering::Relaxed);
        }
        s
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
