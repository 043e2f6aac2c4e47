//! The PVRDMA device: BAR1 registers, UAR doorbells, DSR loading and the execution loop
//! (reference §2-5, §12, §13; M1-M9, M17, M20).
//!
//! [`Device`] is shared as `Arc` between a driver thread and (optionally) a device thread. All
//! state lives in [`Core`] behind one mutex. Register writes do device work synchronously where
//! the reference says so (DSR load, commands) but never call into the host: interrupts are latched
//! and handed to the [`InterruptSink`] by [`Device::deliver_interrupts`] or the device thread.
//! Doorbell work is queued and run by [`Device::process`] (deterministic mode) or the thread.
#![deny(unsafe_code)]

mod command;
mod engine;
pub mod table;
pub mod transport;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::counters::Counters;
use crate::cq::{Arm, Cq};
use crate::dma::DmaSpace;
use crate::dsr::{self, DeviceConfig};
use crate::intr::{InterruptSink, IntrState};
use crate::le::Le;
use crate::mr::Mr;
use crate::pd::Pd;
use crate::pdir::{PagedMem, read_pdir};
use crate::qp::Qp;
use crate::regs::{self, ctl, off};
use crate::ring::Ring;
use crate::srq::Srq;
use crate::uar::Doorbell;
use table::Table;
pub use transport::{
    QpInfo, RecvCompletion, RecvWork, SendWork, TakeError, Transport, TransportInput,
};

/// An illegal MMIO access (M2). The access has no effect; `Counters::bad_mmio` counts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MmioError {
    /// Offset not 4-byte aligned or width not 4.
    BadAccess,
    /// Offset outside the BAR.
    OutOfRange,
    /// Write to a read-only register, or a REQUEST value other than 0.
    ReadOnly,
}

/// Live device objects per type ([`Core::object_counts`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ObjectCounts {
    /// Protection domains.
    pub pds: usize,
    /// Memory regions.
    pub mrs: usize,
    /// Completion queues.
    pub cqs: usize,
    /// Queue pairs.
    pub qps: usize,
    /// Shared receive queues.
    pub srqs: usize,
}

/// How far the device has got with what it was given ([`Device::activity`]). Not device
/// behaviour: a harness running the device thread uses it to wait until everything submitted
/// so far has been consumed, instead of sleeping and hoping.
///
/// A *pass* is one `process` (doorbell work and transport inputs until none is left) followed
/// by one `deliver_interrupts`; the device thread runs passes, deterministic callers call the
/// two themselves.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Activity {
    /// BAR1 and UAR writes received (legal or not), plus [`Device::request_pass`] calls.
    pub received: u64,
    /// `received` as it stood when the latest completed pass began: every write counted up to
    /// here has been acted on and the interrupts it raised have been handed to the sink.
    pub consumed: u64,
    /// Work done so far: doorbell work items and transport inputs run, interrupt vectors handed
    /// to the sink. Equal at two instants means the device did nothing in between.
    pub effects: u64,
    /// Interrupt sink calls in progress.
    pub delivering: u32,
}

/// A GID table entry (M38).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GidEntry {
    /// The GID.
    pub gid: [u8; 16],
    /// `gid_type` byte as sent.
    pub gid_type: u8,
    /// CREATE_BIND's `mtu` as sent (recorded only: the model routes by GID alone).
    pub mtu: u32,
}

/// A device-produced ring (async events or CQ notifications).
#[derive(Clone, Debug)]
pub(crate) struct DevRing {
    mem: PagedMem,
    ring: Ring,
    elem: u64,
    tail: u32,
    abandoned: bool,
}

#[derive(Clone, Copy, Debug)]
struct Slots {
    cmd: u64,
    resp: u64,
}

/// Queued doorbell work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Work {
    Sq(u32),
    Rq(u32),
    Srq(u32),
}

/// The device state, behind the [`Device`] lock. Public methods are the transport boundary
/// (see [`transport`]); everything else is crate-private.
pub struct Core {
    pub(crate) dma: Arc<DmaSpace>,
    pub(crate) cfg: DeviceConfig,
    dsr_low: u32,
    dsr_high: u32,
    slots: Option<Slots>,
    active: bool,
    err: u32,
    mac: [u8; 6],
    link_up: bool,
    pub(crate) intr: IntrState,
    pub(crate) counters: Counters,
    pub(crate) pds: Table<Pd>,
    pub(crate) mrs: Table<Mr>,
    pub(crate) cqs: Table<Cq>,
    pub(crate) qps: Table<Qp>,
    pub(crate) srqs: Table<Srq>,
    pub(crate) gids: Vec<Option<GidEntry>>,
    pub(crate) async_ring: Option<DevRing>,
    pub(crate) cqne_ring: Option<DevRing>,
    pub(crate) pending_events: VecDeque<(u32, u32)>,
    pub(crate) pending_cqnes: VecDeque<u32>,
    pub(crate) work: VecDeque<Work>,
    pub(crate) transport: Option<Box<dyn Transport>>,
    /// Test hook: see [`Core::fail_nth_command`].
    pub(crate) command_fault: Option<CommandFault>,
    /// Harness accounting (see [`Activity`]).
    activity: Activity,
    /// `activity.received` when the latest `process` began.
    pass_began_at: u64,
    /// The slot's coupling when this device is function 1 behind a vmxnet3 (vmxnet3.md P3).
    coupling: Option<Arc<crate::slot::Coupling>>,
}

/// A command error injected by a test (not device behaviour): the `countdown`-th command
/// whose code has its bit set in `mask` is answered with `code` and not executed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CommandFault {
    pub(crate) countdown: u64,
    pub(crate) code: u32,
    pub(crate) mask: u64,
}

impl std::fmt::Debug for Core {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Core")
            .field("active", &self.active)
            .field("err", &self.err)
            .field("qps", &self.qps.len())
            .field("cqs", &self.cqs.len())
            .finish_non_exhaustive()
    }
}

/// One PVRDMA device model.
pub struct Device {
    core: Mutex<Core>,
    cv: Condvar,
    sink: Mutex<Option<Arc<dyn InterruptSink>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    stop: AtomicBool,
    /// Device threads waiting on `cv`, counted under the core lock: `wake` (once per frame the
    /// fabric hands over) skips the futex call when nobody sleeps.
    sleepers: AtomicU32,
    /// True when the latest pass left nothing for another pass to do (no work, no latched
    /// interrupt, no notification waiting for ring space, every write consumed) and no one has
    /// touched the core since: [`Device::needs_pass`] reads it so the deterministic loop skips
    /// passes that would find nothing. Set only at the end of `process` or `deliver_interrupts`,
    /// under the core lock; cleared by every other core lock and by `process` on entry, so a
    /// change made under the lock is never missed. A hint for the caller's loop, not for the device thread.
    settled: AtomicBool,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device").finish_non_exhaustive()
    }
}

fn relock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Device state stays usable after a panicking test thread; the panic itself fails the test.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Device {
    /// A device in its power-on state (no DSR), reaching host memory through `dma`.
    pub fn new(dma: Arc<DmaSpace>, cfg: DeviceConfig) -> Arc<Self> {
        let mac = cfg.mac;
        let gids = vec![None; cfg.caps.gid_tbl_len as usize];
        Arc::new(Self {
            core: Mutex::new(Core {
                dma,
                cfg,
                dsr_low: 0,
                dsr_high: 0,
                slots: None,
                active: false,
                err: 0,
                mac,
                link_up: true,
                intr: IntrState::default(),
                counters: Counters::default(),
                pds: Table::default(),
                mrs: Table::default(),
                cqs: Table::default(),
                qps: Table::default(),
                srqs: Table::default(),
                gids,
                async_ring: None,
                cqne_ring: None,
                pending_events: VecDeque::new(),
                pending_cqnes: VecDeque::new(),
                work: VecDeque::new(),
                transport: None,
                command_fault: None,
                activity: Activity::default(),
                pass_began_at: 0,
                coupling: None,
            }),
            cv: Condvar::new(),
            sink: Mutex::new(None),
            thread: Mutex::new(None),
            stop: AtomicBool::new(false),
            sleepers: AtomicU32::new(0),
            settled: AtomicBool::new(false),
        })
    }

    /// The core lock for anyone that may change device state: the next pass is not skipped.
    fn lock(&self) -> MutexGuard<'_, Core> {
        let c = relock(&self.core);
        self.settled.store(false, Ordering::Release);
        c
    }

    /// Marks the device settled if the pass that ends under `c` left nothing to do.
    fn settle_if_quiet(&self, c: &Core) {
        if c.work.is_empty()
            && c.intr.to_deliver == 0
            && c.pending_events.is_empty()
            && c.pending_cqnes.is_empty()
            && c.activity.delivering == 0
            && c.activity.consumed == c.activity.received
        {
            self.settled.store(true, Ordering::Release);
        }
    }

    /// False when a `process` + `deliver_interrupts` pass now would do nothing: the previous
    /// pass left the device quiet and nothing took the core lock since (see `settled`).
    /// Transport inputs need no flag: the fabric's hand-over runs `process` itself.
    pub fn needs_pass(&self) -> bool {
        !self.settled.load(Ordering::Acquire)
    }

    /// Runs `f` on the locked state (transport, harness inspection).
    pub fn with_core<R>(&self, f: impl FnOnce(&mut Core) -> R) -> R {
        f(&mut self.lock())
    }

    /// Installs the network transport (see [`Transport`]).
    pub fn set_transport(&self, t: Box<dyn Transport>) {
        self.lock().transport = Some(t);
        self.cv.notify_all();
    }

    /// Wakes the device thread (threaded mode) so it delivers interrupts latched by work another
    /// thread ran, e.g. the fabric delivery thread handing a frame to the transport.
    pub fn wake(&self) {
        if self.sleepers.load(Ordering::SeqCst) > 0 {
            self.cv.notify_all();
        }
    }

    /// Installs the receiver of MSI-X interrupts.
    pub fn set_interrupt_sink(&self, sink: Arc<dyn InterruptSink>) {
        *relock(&self.sink) = Some(sink);
        // Interrupts latched while there was no sink are deliverable now.
        self.settled.store(false, Ordering::Release);
    }

    /// The bus address space.
    pub fn dma(&self) -> Arc<DmaSpace> {
        self.lock().dma.clone()
    }

    /// Number of MSI-X vectors (M21).
    pub fn msix_vectors(&self) -> u32 {
        regs::MSIX_VECTORS
    }

    /// Snapshot of the statistics.
    pub fn counters(&self) -> Counters {
        self.lock().counters.clone()
    }

    /// A 32-bit BAR1 read; an illegal access reads 0xFFFF_FFFF and is counted (M2).
    pub fn bar1_read32(&self, offset: u32) -> u32 {
        self.bar1_read(offset, 4).unwrap_or(u32::MAX)
    }

    /// A BAR1 read of `width` bytes; only aligned 4-byte reads are legal (M2).
    pub fn bar1_read(&self, offset: u32, width: u32) -> Result<u32, MmioError> {
        let mut c = self.lock();
        c.check_bar1(offset, width)?;
        Ok(match offset {
            off::VERSION => c.cfg.version,
            off::ERR => c.err,
            off::ICR => c.intr.read_icr(),
            off::IMR => c.intr.imr,
            off::MACL => regs::macl(c.mac),
            off::MACH => regs::mach(c.mac),
            _ => 0,
        })
    }

    /// A 32-bit BAR1 write; an illegal access is ignored and counted (M2).
    pub fn bar1_write32(&self, offset: u32, value: u32) {
        let _ = self.bar1_write(offset, 4, value);
    }

    /// A BAR1 write of `width` bytes; only aligned 4-byte writes are legal (M2).
    pub fn bar1_write(&self, offset: u32, width: u32, value: u32) -> Result<(), MmioError> {
        let mut c = self.lock();
        c.activity.received += 1;
        c.check_bar1(offset, width)?;
        let r = match offset {
            off::DSRLOW => {
                c.dsr_low = value;
                Ok(())
            }
            off::DSRHIGH => {
                c.dsr_high = value;
                c.load_dsr();
                Ok(())
            }
            off::CTL => {
                c.control(value);
                Ok(())
            }
            off::REQUEST if value == 0 => {
                c.execute_command();
                Ok(())
            }
            off::IMR => {
                c.intr.set_imr(value);
                Ok(())
            }
            off::MACL => {
                c.mac[..4].copy_from_slice(&value.to_le_bytes()[..]);
                Ok(())
            }
            off::MACH => {
                c.mac[4] = value as u8;
                c.mac[5] = (value >> 8) as u8;
                Ok(())
            }
            off::VERSION | off::ERR | off::ICR | off::REQUEST => Err(MmioError::ReadOnly),
            // Undefined registers: writes have no effect.
            _ => Ok(()),
        };
        if r.is_err() {
            c.counters.bad_mmio += 1;
        }
        drop(c);
        self.cv.notify_all();
        r
    }

    /// A 32-bit UAR (BAR2) write: a doorbell (§12). Illegal accesses are ignored and counted.
    pub fn uar_write32(&self, offset: u32, value: u32) {
        let _ = self.uar_write(offset, 4, value);
    }

    /// A UAR write of `width` bytes; only aligned 4-byte writes are legal (M2).
    pub fn uar_write(&self, offset: u32, width: u32, value: u32) -> Result<(), MmioError> {
        let mut c = self.lock();
        c.activity.received += 1;
        if width != 4 || !offset.is_multiple_of(4) {
            c.counters.bad_mmio += 1;
            return Err(MmioError::BadAccess);
        }
        if offset >= 4096 * c.cfg.caps.max_uar.max(1) {
            c.counters.bad_mmio += 1;
            return Err(MmioError::OutOfRange);
        }
        c.doorbell(Doorbell::decode(offset, value));
        drop(c);
        // The doorbell is queued under the lock above: a sleeper counted itself before it.
        self.wake();
        Ok(())
    }

    /// Harness knob, not device behaviour: acts as though every doorbell a driver could have
    /// rung for the GSI QP (QP1) had reached the device. Its SQ gets a kick (M17) when its
    /// `prod_tail` names WQEs the device has not taken, and so does its RQ in ERR, its CQs have held CQEs written
    /// (as a POLL, M48), and a CQ of it whose ring holds CQEs the driver has not consumed gets
    /// a CQNE whatever its arm (an arm that never arrived cannot leave them unseen). It adds
    /// work and notifications and takes none away: arm states are untouched, and no other QP
    /// or CQ is looked at.
    ///
    /// For a harness that hands the device only the last word stored at each UAR offset (the
    /// instruction benchmark's bare doorbells) while connection management it does not
    /// measure runs over QP1: one kick per pump is enough, since a CQE written after it is
    /// seen at the next one.
    pub fn kick_gsi_queues(&self) {
        // Not `lock`: a kick that finds nothing leaves a settled device settled, so a pump
        // spinning on it costs no pass over every QP.
        let mut c = relock(&self.core);
        if c.kick_gsi_queues() {
            c.activity.received += 1;
            self.settled.store(false, Ordering::Release);
            drop(c);
            self.wake();
        }
    }

    /// A UAR read: drivers never read the UAR; reads return all ones (M2).
    pub fn uar_read32(&self, offset: u32) -> u32 {
        let _ = offset;
        u32::MAX
    }

    /// Runs queued doorbell work (and the transport) until idle; returns the work items run.
    pub fn process(&self) -> usize {
        let mut c = relock(&self.core);
        self.pass(&mut c)
    }

    fn pass(&self, c: &mut Core) -> usize {
        self.settled.store(false, Ordering::Release);
        c.pass_began_at = c.activity.received;
        let n = c.process();
        c.activity.effects += n as u64;
        // A pass run by the fabric's hand-over that latched nothing needs no delivery either.
        self.settle_if_quiet(c);
        n
    }

    /// The fabric's hand-over: queues `input` for the transport and runs a pass, under one
    /// lock (queueing under a lock of its own cost two more round trips per frame). Without a
    /// transport the input is dropped.
    pub fn transport_input(&self, input: TransportInput) -> usize {
        let mut c = relock(&self.core);
        if let Some(t) = c.transport.as_mut() {
            t.input(input);
        }
        self.pass(&mut c)
    }

    /// Asks the transport to publish its statistics ([`Transport::publish`]). Takes the lock
    /// without unsettling the device: publishing changes nothing a pass would look at.
    pub fn publish_transport(&self) {
        let c = relock(&self.core);
        if let Some(t) = c.transport.as_ref() {
            t.publish();
        }
    }

    /// Hands latched interrupts to the sink (no lock held during the calls); returns the
    /// delivered vector set (bit i = vector i).
    pub fn deliver_interrupts(&self) -> u32 {
        let (bits, sink, pass) = {
            let mut c = relock(&self.core);
            let pass = c.pass_began_at;
            // The sink is looked up (a lock and an `Arc` clone) only when there is something
            // to hand it.
            let sink = if c.intr.to_deliver == 0 {
                None
            } else {
                relock(&self.sink).clone()
            };
            let Some(sink) = sink else {
                c.activity.consumed = c.activity.consumed.max(pass);
                self.settle_if_quiet(&c);
                return 0;
            };
            let bits = c.intr.take();
            for v in 0..3 {
                if bits & (1 << v) != 0 {
                    c.counters.interrupts[v] += 1;
                }
            }
            c.activity.effects += u64::from(bits.count_ones());
            c.activity.delivering += 1;
            (bits, sink, pass)
        };
        for v in 0..3 {
            if bits & (1 << v) != 0 {
                sink.raise(v);
            }
        }
        let mut c = relock(&self.core);
        c.activity.delivering -= 1;
        c.activity.consumed = c.activity.consumed.max(pass);
        self.settle_if_quiet(&c);
        bits
    }

    /// Snapshot of the harness accounting (see [`Activity`]).
    pub fn activity(&self) -> Activity {
        self.lock().activity
    }

    /// Asks for one more pass: counts as a write (so the device thread, if running, wakes and
    /// runs a pass) and returns the new `received`; once `activity().consumed` reaches it, a
    /// whole pass began after this call. Without a device thread the caller runs the pass.
    pub fn request_pass(&self) -> u64 {
        let g = {
            let mut c = self.lock();
            c.activity.received += 1;
            c.activity.received
        };
        self.cv.notify_all();
        g
    }

    /// True when the device has nothing left to do on its own: every write consumed, no
    /// doorbell work queued, no interrupt latched for delivery or being delivered. Work held
    /// elsewhere (frames in flight on a fabric, notifications waiting for ring space the
    /// driver has not freed) is not the device's to report.
    pub fn is_idle(&self) -> bool {
        let c = self.lock();
        c.activity.consumed == c.activity.received
            && c.activity.delivering == 0
            && c.work.is_empty()
            && c.intr.to_deliver == 0
    }

    /// `process` then `deliver_interrupts` until both are idle (deterministic mode).
    pub fn run_until_idle(&self) {
        for _ in 0..10_000 {
            let n = self.process();
            let d = self.deliver_interrupts();
            if n == 0 && d == 0 {
                return;
            }
        }
    }

    /// Starts the device thread (threaded mode): it waits for doorbells, commands and
    /// transport work and runs the same `process`/`deliver_interrupts` code.
    pub fn start_thread(self: &Arc<Self>) {
        let mut t = relock(&self.thread);
        if t.is_some() {
            return;
        }
        self.stop.store(false, Ordering::SeqCst);
        let dev = Arc::clone(self);
        *t = Some(std::thread::spawn(move || dev.thread_main()));
    }

    /// Stops and joins the device thread.
    pub fn stop_thread(&self) {
        self.stop.store(true, Ordering::SeqCst);
        self.cv.notify_all();
        let handle = relock(&self.thread).take();
        if let Some(h) = handle {
            let _ = h.join();
        }
    }

    fn thread_main(&self) {
        while !self.stop.load(Ordering::SeqCst) {
            {
                let c = self.lock();
                // A write that queued no work (a CQ arm, a command) still gets a pass, so
                // `Activity::consumed` catches up without waiting for the timeout.
                if c.work.is_empty()
                    && c.intr.to_deliver == 0
                    && c.activity.consumed == c.activity.received
                {
                    // Timeout: transport timers and rings waiting for space are polled too.
                    self.sleepers.fetch_add(1, Ordering::SeqCst);
                    let c = self.cv.wait_timeout(c, Duration::from_millis(5));
                    self.sleepers.fetch_sub(1, Ordering::SeqCst);
                    drop(c);
                }
            }
            self.process();
            self.deliver_interrupts();
        }
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

impl Core {
    fn check_bar1(&mut self, offset: u32, width: u32) -> Result<(), MmioError> {
        if width != 4 || !offset.is_multiple_of(4) {
            self.counters.bad_mmio += 1;
            return Err(MmioError::BadAccess);
        }
        if offset >= regs::BAR1_SIZE {
            self.counters.bad_mmio += 1;
            return Err(MmioError::OutOfRange);
        }
        Ok(())
    }

    /// The configuration this device was built with.
    pub fn config(&self) -> &DeviceConfig {
        &self.cfg
    }

    /// The bus address space.
    pub fn dma(&self) -> &Arc<DmaSpace> {
        &self.dma
    }

    /// Current MAC (MACL/MACH may have changed it).
    pub fn mac(&self) -> [u8; 6] {
        self.mac
    }

    /// True after a successful ACTIVATE.
    pub fn is_active(&self) -> bool {
        self.active
    }

    /// The MAC RoCE frames leave with (vmxnet3.md P2: the slot sets the vNIC's).
    pub fn set_mac(&mut self, mac: [u8; 6]) {
        self.mac = mac;
    }

    /// Joins the device to its slot's coupling (vmxnet3.md P3).
    pub fn set_coupling(&mut self, c: Option<Arc<crate::slot::Coupling>>) {
        self.coupling = c;
    }

    /// Port link state (QUERY_PORT state 4 when up).
    pub fn link_up(&self) -> bool {
        self.link_up
    }

    /// Sets the link state and posts PORT_ACTIVE / PORT_ERR (info = port 1, M22).
    pub fn set_link(&mut self, up: bool) {
        if self.link_up != up {
            self.link_up = up;
            let ty = if up {
                crate::wqe::event::PORT_ACTIVE
            } else {
                crate::wqe::event::PORT_ERR
            };
            self.post_event(ty, 1);
        }
    }

    /// Statistics.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Test hook: the `n`-th command from now (1 = the next) whose code `c` has bit `1 << c`
    /// set in `mask` fails with error `code` (e.g. 12 no resources, 22 invalid) without
    /// being executed; `n = 0` disarms. Counted only over matching commands, so a test can
    /// spare the destroys a driver cannot recover from.
    pub fn fail_nth_command(&mut self, n: u64, code: u32, mask: u64) {
        self.command_fault = (n != 0).then_some(CommandFault {
            countdown: n,
            code,
            mask,
        });
    }

    /// True while a [`Core::fail_nth_command`] failure has not been delivered yet.
    pub fn command_fault_pending(&self) -> bool {
        self.command_fault.is_some()
    }

    /// Live objects per type, for leak checks: a driver that destroyed everything it created
    /// leaves all of them at 0 (GID bindings are not objects and are not counted).
    pub fn object_counts(&self) -> ObjectCounts {
        ObjectCounts {
            pds: self.pds.len(),
            mrs: self.mrs.len(),
            cqs: self.cqs.len(),
            qps: self.qps.len(),
            srqs: self.srqs.len(),
        }
    }

    /// Number of bound GIDs.
    pub fn bound_gids(&self) -> usize {
        self.gids.iter().filter(|g| g.is_some()).count()
    }

    fn fault(&mut self) {
        self.counters.dma_faults += 1;
    }

    /// DSRHIGH written: load and check the DSR, fill caps (M4).
    fn load_dsr(&mut self) {
        self.slots = None;
        self.async_ring = None;
        self.cqne_ring = None;
        self.active = false;
        let addr = (u64::from(self.dsr_high) << 32) | u64::from(self.dsr_low);
        let mut raw = [0u8; dsr::DSR_SIZE];
        if self.dma.read(addr, &mut raw).is_err() {
            self.fault();
            return;
        }
        let v = Le(&raw[..]);
        let cmd = v.u64(dsr::field::CMD_SLOT);
        let resp = v.u64(dsr::field::RESP_SLOT);
        let page_ok =
            |a: u64, dma: &DmaSpace| a != 0 && a.is_multiple_of(4096) && dma.check(a, 4096).is_ok();
        let slots_ok = page_ok(cmd, &self.dma) && page_ok(resp, &self.dma);
        let async_ring = self.load_dev_ring(&v, dsr::field::ASYNC_RING, 8);
        let cqne_ring = self.load_dev_ring(&v, dsr::field::CQ_RING, 4);
        let caps = match (slots_ok, async_ring, cqne_ring) {
            (true, Some(a), Some(c)) => {
                self.slots = Some(Slots { cmd, resp });
                self.async_ring = Some(a);
                self.cqne_ring = Some(c);
                self.cfg.caps.emit(self.cfg.mac)
            }
            _ => [0u8; dsr::CAPS_SIZE],
        };
        if self.dma.write(addr + dsr::CAPS_OFF as u64, &caps).is_err() {
            self.fault();
        }
    }

    fn load_dev_ring(&mut self, v: &Le<&[u8]>, at: usize, elem: u64) -> Option<DevRing> {
        let num_pages = v.u32(at);
        let pdir = v.u64(at + 8);
        if !(2..=512).contains(&num_pages) {
            return None;
        }
        let pages = read_pdir(&self.dma, pdir, num_pages).ok()?;
        // Every page must be readable now; the ring is written later without a command to fail.
        if pages.iter().any(|&p| self.dma.check(p, 4096).is_err()) {
            return None;
        }
        let n = u32::try_from(u64::from(num_pages - 1) * 4096 / elem).ok()?;
        Some(DevRing {
            mem: PagedMem::new(pages),
            ring: Ring::new(n)?,
            elem,
            tail: 0,
            abandoned: false,
        })
    }

    fn control(&mut self, value: u32) {
        match value {
            ctl::ACTIVATE => {
                self.active = self.slots.is_some();
                self.err = u32::from(!self.active);
            }
            // P3: while the slot holds this function quiesced, UNQUIESCE fails.
            ctl::UNQUIESCE => {
                self.err = u32::from(self.coupling.as_ref().is_some_and(|c| c.held()))
            }
            ctl::RESET => {
                self.reset();
                self.err = 0;
            }
            _ => {
                self.counters.bad_mmio += 1;
                self.err = 1;
            }
        }
    }

    /// CTL = RESET (M7): destroy everything, stop DMA, drop interrupts, forget the DSR.
    fn reset(&mut self) {
        if let Some(mut t) = self.transport.take() {
            t.reset(self);
            self.transport = Some(t);
        }
        self.qps.clear();
        self.srqs.clear();
        self.cqs.clear();
        self.mrs.clear();
        self.pds.clear();
        self.gids.iter_mut().for_each(|g| *g = None);
        self.slots = None;
        self.async_ring = None;
        self.cqne_ring = None;
        self.pending_events.clear();
        self.pending_cqnes.clear();
        self.work.clear();
        self.intr.reset();
        self.active = false;
        self.dsr_low = 0;
        self.dsr_high = 0;
    }

    fn doorbell(&mut self, db: Doorbell) {
        match db {
            Doorbell::Qp { handle, send, recv } => {
                if send {
                    self.counters.db_qp_send += 1;
                }
                if recv {
                    self.counters.db_qp_recv += 1;
                }
                let Some(qp) = self.qps.get(handle) else {
                    self.counters.db_ignored += 1;
                    return;
                };
                if qp.state == crate::qp::QpState::Reset {
                    self.counters.db_ignored += 1;
                    return;
                }
                if recv && qp.srq.is_some() {
                    self.counters.db_ignored += 1;
                }
                if send {
                    self.work.push_back(Work::Sq(handle));
                }
                if recv && qp.srq.is_none() {
                    self.work.push_back(Work::Rq(handle));
                }
            }
            Doorbell::Cq {
                handle,
                arm,
                arm_sol,
                poll,
            } => {
                if poll {
                    self.counters.db_cq_poll += 1;
                }
                if arm {
                    self.counters.db_cq_arm += 1;
                } else if arm_sol {
                    self.counters.db_cq_arm_sol += 1;
                }
                let Some(cq) = self.cqs.get_mut(handle) else {
                    self.counters.db_ignored += 1;
                    return;
                };
                // ARM wins over ARM_SOL (M18), also across doorbells.
                if arm {
                    cq.arm = Arm::Any;
                } else if arm_sol && cq.arm == Arm::None {
                    cq.arm = Arm::Solicited;
                }
                // M48: the held CQEs are in the ring before this write returns. Written
                // after the arm is recorded, they are still CQEs present at arm time and
                // do not notify (M18).
                if poll && !cq.held.is_empty() {
                    self.write_held_cqes(handle);
                }
            }
            Doorbell::Srq { handle, recv } => {
                self.counters.db_srq += 1;
                match self.srqs.get(handle) {
                    Some(s) if recv && !s.error => self.work.push_back(Work::Srq(handle)),
                    _ => self.counters.db_ignored += 1,
                }
            }
            Doorbell::Unknown { .. } => {
                self.counters.db_ignored += 1;
                self.counters.bad_mmio += 1;
            }
        }
    }

    /// Runs queued work and the transport until idle.
    pub(crate) fn process(&mut self) -> usize {
        let mut n = 0;
        for _ in 0..1_000_000 {
            self.flush_pending_rings();
            let mut progress = false;
            if let Some(w) = self.work.pop_front() {
                n += 1;
                progress = true;
                match w {
                    Work::Sq(h) => self.kick_sq(h),
                    Work::Rq(h) => self.kick_rq(h),
                    Work::Srq(h) => self.kick_srq(h),
                }
            }
            if let Some(mut t) = self.transport.take() {
                if t.poll(self) {
                    progress = true;
                    n += 1;
                }
                self.transport = Some(t);
            }
            if !progress {
                break;
            }
        }
        n
    }
}
