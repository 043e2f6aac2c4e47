//! The vmxnet3 paravirtual Ethernet NIC (15AD:07B0), modelled from
//! `docs/reference/vmxnet3.md` §3 and its model rules (§5: V1–V13), independently of the
//! driver crate.
//!
//! [`Vmxnet3`] is shared as `Arc` between a driver thread, the fabric and (optionally) a device
//! thread, like the PVRDMA [`crate::Device`]: all state is in [`Core`] behind one mutex;
//! register writes do their work synchronously where the interface says so (commands, MAC,
//! IMR) and never call into the host; Tx doorbells are queued and run by
//! [`Vmxnet3::process`] (deterministic mode) or the device thread; frames from the fabric are
//! received inline ([`Vmxnet3::receive_frame`]); interrupts are latched and handed to the
//! [`InterruptSink`] by [`Vmxnet3::deliver_interrupts`] or the thread.
//!
//! Everything the driver writes is validated before use (V4–V9: DriverShared, queue
//! descriptors, ring descriptors, producer indices): a bad value stops the queue or fails the
//! activation, is counted, and never panics or reaches outside DMA memory.
#![deny(unsafe_code)]

mod activate;
mod datapath;
mod intr;
pub mod layout;
#[cfg(feature = "test-utils")]
pub mod mock;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::device::Activity;
use crate::dma::DmaSpace;
use crate::fabric::{FabricHandle, PortId};
use crate::intr::InterruptSink;
use crate::le::Le;

pub use activate::{
    ActivateError, Active, DevRing, QueueStatus, RxFilter, RxQueue, RxStats, TxQueue, TxStats,
};
use layout::{bar0, bar1, cmd};

/// How a model is built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Vmxnet3Config {
    /// The permanent MAC (the vNIC's); also the current MAC at power-on.
    pub mac: [u8; 6],
    /// VRRS: bit i offers revision i + 1 (default 0x1, revision 1 only, as QEMU; V1).
    pub revisions: u32,
    /// UVRS: bit i offers UPT version i + 1 (default 0x1).
    pub upt_versions: u32,
    /// MSI-X vectors offered (at most 25).
    pub vectors: u32,
    /// GET_CONF_INTR: bits 1:0 type (3 = MSI-X), 3:2 mask mode (0 = AUTO).
    pub conf_intr: u32,
    /// GET_LINK speed (Mbps; 10000 as VMware's header, QEMU says 1000).
    pub link_speed_mbps: u32,
    /// `txThreshold` the device writes into every Tx queue at ACTIVATE (QEMU: 1).
    pub tx_threshold: u32,
    /// Test option: the device sets `updateRxProd` in every Rx queue at ACTIVATE (v7 UPT
    /// behaviour), asking the driver to write RXPROD after each refill.
    pub update_rx_prod: bool,
    /// Tx queues the device accepts.
    pub max_tx_queues: u8,
    /// Rx queues the device accepts.
    pub max_rx_queues: u8,
    /// The `type` written into Rx completions: 3 (RXCOMP, VMware's header) by default; QEMU
    /// leaves it 0 (V9).
    pub rx_completion_type: u32,
    /// ACTIVATE_DEV puts the permanent MAC back, as QEMU's does (V3); default off (the
    /// current MAC stays).
    pub activate_restores_mac: bool,
    /// Received frames shorter than this are padded with zeros to it before anything else
    /// looks at them, as QEMU pads to 60 bytes (V9); default 0 (frames arrive as sent).
    pub rx_min_frame: usize,
}

impl Vmxnet3Config {
    /// The answers QEMU's vmxnet3 (hw/net/vmxnet3.c) gives where they differ from the
    /// defaults and a driver sees them (vmxnet3.md §5 "QEMU:"): GET_CONF_INTR 0 (AUTO type,
    /// AUTO mask), 1000 Mbps, Rx completions of type 0, the permanent MAC restored at
    /// ACTIVATE_DEV, short frames padded to 60 bytes. The driver's host tests run on it
    /// without QEMU; tests/vmx_qemu.rs checks the same against QEMU itself.
    pub fn qemu() -> Self {
        Self {
            conf_intr: 0,
            link_speed_mbps: 1000,
            rx_completion_type: 0,
            activate_restores_mac: true,
            rx_min_frame: 60,
            ..Self::default()
        }
    }
}

impl Default for Vmxnet3Config {
    fn default() -> Self {
        Self {
            mac: [0x00, 0x50, 0x56, 0x00, 0x00, 0x01],
            revisions: 0x1,
            upt_versions: 0x1,
            vectors: layout::MAX_INTRS,
            conf_intr: 3,
            link_speed_mbps: 10_000,
            tx_threshold: 1,
            update_rx_prod: false,
            max_tx_queues: layout::MAX_TX_QUEUES,
            max_rx_queues: layout::MAX_RX_QUEUES,
            rx_completion_type: layout::desc::TYPE_RXCOMP,
            activate_restores_mac: false,
            rx_min_frame: 0,
        }
    }
}

/// Statistics of the model (all since creation; RESET does not clear them).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Vmxnet3Counters {
    /// Illegal register accesses (width, alignment, offset, read-only register) (V2).
    pub bad_mmio: u64,
    /// VRRS/UVRS writes that select nothing offered (V1).
    pub bad_selects: u64,
    /// BAR0 writes while the device is not active (ignored, V2).
    pub bar0_inactive: u64,
    /// Device accesses to memory outside DMA space after activation.
    pub dma_faults: u64,
    /// Commands written.
    pub commands: u64,
    /// Commands the device does not implement (read-back 0xFFFFFFFF, V12).
    pub unsupported_commands: u64,
    /// Successful ACTIVATE_DEVs.
    pub activations: u64,
    /// Failed ACTIVATE_DEVs.
    pub activate_failures: u64,
    /// Why the latest ACTIVATE_DEV failed.
    pub last_activate_error: Option<ActivateError>,
    /// UPDATE_* commands refused for a bad value (the old value stays, V12).
    pub update_failures: u64,
    /// TXPROD writes.
    pub tx_doorbells: u64,
    /// Frames sent on the fabric.
    pub tx_frames: u64,
    /// Bytes of those frames.
    pub tx_bytes: u64,
    /// Packets completed without being sent (too short or long, unsupported offload).
    pub tx_errors: u64,
    /// Packets completed without being sent because the link was down.
    pub tx_discards: u64,
    /// Tx queues stopped with an error (V8).
    pub tx_queue_errors: u64,
    /// Frames written to Rx buffers.
    pub rx_frames: u64,
    /// Bytes of those frames.
    pub rx_bytes: u64,
    /// Frames the Rx filter refused.
    pub rx_filtered: u64,
    /// Frames dropped for lack of Rx buffers.
    pub rx_out_of_buf: u64,
    /// Frames dropped because the device was not active.
    pub rx_inactive: u64,
    /// Frames dropped as too long, or for a stopped queue.
    pub rx_errors: u64,
    /// Rx queues stopped with an error (V9).
    pub rx_queue_errors: u64,
    /// Events posted in `ecr`.
    pub events: u64,
    /// Interrupts delivered, per vector.
    pub interrupts: [u64; layout::MAX_INTRS as usize],
}

/// What a MACH write changed, reported to the listener outside the lock.
type MacListener = Arc<dyn Fn([u8; 6]) + Send + Sync>;

/// The device state behind the [`Vmxnet3`] lock.
pub struct Core {
    dma: Arc<DmaSpace>,
    cfg: Vmxnet3Config,
    rev: Option<u32>,
    upt: Option<u32>,
    dsal: u32,
    dsah: u32,
    mac: [u8; 6],
    macl: u32,
    cmd_result: u32,
    conf: Option<Active>,
    running: bool,
    link_up: bool,
    vectors: intr::Vectors,
    counters: Vmxnet3Counters,
    /// Tx queues with a doorbell to serve, in order; `pending_tx` has their bits.
    work: VecDeque<u8>,
    pending_tx: u32,
    port: Option<(PortId, FabricHandle)>,
    activity: Activity,
    pass_began_at: u64,
    active_flag: Arc<AtomicBool>,
    /// A MACH write changed the MAC: reported after the lock is released.
    mac_changed: Option<[u8; 6]>,
    /// Frames sent while no fabric port is attached (unit tests read them).
    outbox: VecDeque<Vec<u8>>,
    /// Scratch of `plan_rx`: the buffers the frame being received takes.
    rx_takes: Vec<datapath::RxTake>,
    /// The Rx queue's rings as `plan_rx` left them, committed by `commit_rx`.
    rx_rings_after: [DevRing; 2],
}

impl std::fmt::Debug for Core {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("vmxnet3::Core")
            .field("running", &self.running)
            .field("link_up", &self.link_up)
            .finish_non_exhaustive()
    }
}

/// One vmxnet3 model.
pub struct Vmxnet3 {
    core: Mutex<Core>,
    cv: Condvar,
    sink: Mutex<Option<Arc<dyn InterruptSink>>>,
    mac_listener: Mutex<Option<MacListener>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    stop: AtomicBool,
    sleepers: AtomicU32,
    /// As `crate::Device`'s: the latest pass left nothing to do and nobody locked since.
    settled: AtomicBool,
}

impl std::fmt::Debug for Vmxnet3 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vmxnet3").finish_non_exhaustive()
    }
}

fn relock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Decodes `base + 8·i` register arrays: the index when `off` is one of `n` entries.
fn reg_index(off: u32, base: u32, n: u32) -> Option<u32> {
    let d = off.checked_sub(base)?;
    (d.is_multiple_of(layout::REG_ALIGN) && d / layout::REG_ALIGN < n)
        .then_some(d / layout::REG_ALIGN)
}

impl Vmxnet3 {
    /// A device in its power-on state, reaching host memory through `dma`.
    pub fn new(dma: Arc<DmaSpace>, mut cfg: Vmxnet3Config) -> Arc<Self> {
        cfg.vectors = cfg.vectors.min(layout::MAX_INTRS);
        let mac = cfg.mac;
        Arc::new(Self {
            core: Mutex::new(Core {
                dma,
                cfg,
                rev: None,
                upt: None,
                dsal: 0,
                dsah: 0,
                mac,
                macl: 0,
                cmd_result: 0,
                conf: None,
                running: false,
                link_up: true,
                vectors: intr::Vectors::default(),
                counters: Vmxnet3Counters::default(),
                work: VecDeque::new(),
                pending_tx: 0,
                port: None,
                activity: Activity::default(),
                pass_began_at: 0,
                active_flag: Arc::new(AtomicBool::new(false)),
                mac_changed: None,
                outbox: VecDeque::new(),
                rx_takes: Vec::new(),
                rx_rings_after: [DevRing::default(); 2],
            }),
            cv: Condvar::new(),
            sink: Mutex::new(None),
            mac_listener: Mutex::new(None),
            thread: Mutex::new(None),
            stop: AtomicBool::new(false),
            sleepers: AtomicU32::new(0),
            settled: AtomicBool::new(false),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Core> {
        let c = relock(&self.core);
        self.settled.store(false, Ordering::Release);
        c
    }

    fn settle_if_quiet(&self, c: &Core) {
        if c.work.is_empty()
            && c.vectors.to_deliver == 0
            && c.activity.delivering == 0
            && c.activity.consumed == c.activity.received
        {
            self.settled.store(true, Ordering::Release);
        }
    }

    /// False when a pass now would do nothing (see `crate::Device::needs_pass`).
    pub fn needs_pass(&self) -> bool {
        !self.settled.load(Ordering::Acquire)
    }

    /// Runs `f` on the locked state (harness inspection).
    pub fn with_core<R>(&self, f: impl FnOnce(&mut Core) -> R) -> R {
        f(&mut self.lock())
    }

    /// Installs the receiver of MSI-X interrupts.
    pub fn set_interrupt_sink(&self, sink: Arc<dyn InterruptSink>) {
        *relock(&self.sink) = Some(sink);
        self.settled.store(false, Ordering::Release);
    }

    /// Calls `f` with the new MAC after every MACH write that changes it (the slot uses it
    /// for the fabric's address and model rule P2). Called with no device lock held.
    pub fn set_mac_listener(&self, f: MacListener) {
        *relock(&self.mac_listener) = Some(f);
    }

    /// Connects the device to a fabric port: frames it sends leave from `port`.
    pub fn attach_port(&self, port: PortId, handle: FabricHandle) {
        self.lock().port = Some((port, handle));
    }

    /// True while the device is active (after a successful ACTIVATE_DEV, until QUIESCE_DEV or
    /// RESET_DEV), as a flag another function of the slot can read without this lock.
    pub fn active_flag(&self) -> Arc<AtomicBool> {
        relock(&self.core).active_flag.clone()
    }

    /// Snapshot of the statistics.
    pub fn counters(&self) -> Vmxnet3Counters {
        relock(&self.core).counters.clone()
    }

    /// Wakes the device thread.
    pub fn wake(&self) {
        if self.sleepers.load(Ordering::SeqCst) > 0 {
            self.cv.notify_all();
        }
    }

    fn after_write(&self, mut c: MutexGuard<'_, Core>) {
        let mac = c.mac_changed.take();
        drop(c);
        self.cv.notify_all();
        if let Some(mac) = mac {
            let l = relock(&self.mac_listener).clone();
            if let Some(l) = l {
                l(mac);
            }
        }
    }

    /// A 32-bit BAR0 read; an illegal access reads 0xFFFF_FFFF and is counted (V2).
    pub fn bar0_read32(&self, off: u32) -> u32 {
        self.bar0_read(off, 4).unwrap_or(u32::MAX)
    }

    /// A BAR0 read of `width` bytes.
    pub fn bar0_read(&self, off: u32, width: u32) -> Result<u32, crate::MmioError> {
        let mut c = self.lock();
        c.check_access(off, width)?;
        Ok(match reg_index(off, bar0::IMR, layout::MAX_INTRS) {
            // CAST: i < 25.
            Some(i) => u32::from(c.vectors.masked(i as u8)),
            None => 0,
        })
    }

    /// A 32-bit BAR0 write; an illegal access is counted and ignored.
    pub fn bar0_write32(&self, off: u32, value: u32) {
        let _ = self.bar0_write(off, 4, value);
    }

    /// A BAR0 write of `width` bytes: IMR, TXPROD, RXPROD, RXPROD2 (V2, V8, V10).
    pub fn bar0_write(&self, off: u32, width: u32, value: u32) -> Result<(), crate::MmioError> {
        let mut c = self.lock();
        c.activity.received += 1;
        let r = c.check_access(off, width);
        if r.is_ok() {
            c.bar0_store(off, value);
        }
        let tx = !c.work.is_empty();
        drop(c);
        if tx {
            self.wake();
        }
        self.cv.notify_all();
        r
    }

    /// A 32-bit BAR1 read; an illegal access reads 0xFFFF_FFFF and is counted.
    pub fn bar1_read32(&self, off: u32) -> u32 {
        self.bar1_read(off, 4).unwrap_or(u32::MAX)
    }

    /// A BAR1 read of `width` bytes.
    pub fn bar1_read(&self, off: u32, width: u32) -> Result<u32, crate::MmioError> {
        let mut c = self.lock();
        c.check_access(off, width)?;
        Ok(match off {
            bar1::VRRS => c.cfg.revisions,
            bar1::UVRS => c.cfg.upt_versions,
            bar1::DSAL => c.dsal,
            bar1::DSAH => c.dsah,
            bar1::CMD => c.cmd_result,
            bar1::MACL => u32::from_le_bytes([c.mac[0], c.mac[1], c.mac[2], c.mac[3]]),
            bar1::MACH => u32::from(c.mac[4]) | (u32::from(c.mac[5]) << 8),
            bar1::ICR => std::mem::take(&mut c.vectors.icr),
            bar1::ECR => c.shared_ecr(),
            _ => 0,
        })
    }

    /// A 32-bit BAR1 write; an illegal access is counted and ignored.
    pub fn bar1_write32(&self, off: u32, value: u32) {
        let _ = self.bar1_write(off, 4, value);
    }

    /// A BAR1 write of `width` bytes (V1, V3, V11, V12).
    pub fn bar1_write(&self, off: u32, width: u32, value: u32) -> Result<(), crate::MmioError> {
        let mut c = self.lock();
        c.activity.received += 1;
        let mut r = c.check_access(off, width);
        if r.is_ok() {
            r = c.bar1_store(off, value);
        }
        self.after_write(c);
        r
    }

    /// A frame from the fabric (the slot's demultiplexer hands over what is not RoCE): filtered
    /// and written to Rx buffers under the lock (V9). Returns whether it reached a buffer.
    pub fn receive_frame(&self, frame: &[u8]) -> bool {
        let mut c = self.lock();
        let ok = c.receive(frame);
        c.activity.effects += 1;
        let irq = c.vectors.to_deliver != 0;
        drop(c);
        if irq {
            self.wake();
        }
        ok
    }

    /// The fabric link changed: GET_LINK follows, and an active device posts LINK (V11).
    pub fn link_changed(&self, up: bool) {
        let mut c = self.lock();
        c.set_link(up);
        c.activity.effects += 1;
        drop(c);
        self.wake();
    }

    /// Runs queued Tx doorbells until none is left; returns how many ran.
    pub fn process(&self) -> usize {
        let mut c = relock(&self.core);
        self.settled.store(false, Ordering::Release);
        c.pass_began_at = c.activity.received;
        let mut n = 0;
        while let Some(q) = c.work.pop_front() {
            c.pending_tx &= !(1 << q);
            c.kick_tx(q);
            n += 1;
        }
        c.activity.effects += n as u64;
        self.settle_if_quiet(&c);
        n
    }

    /// Hands latched interrupts to the sink (no lock held during the calls); returns the
    /// delivered vector set.
    pub fn deliver_interrupts(&self) -> u32 {
        let (bits, sink, pass) = {
            let mut c = relock(&self.core);
            let pass = c.pass_began_at;
            let sink = if c.vectors.to_deliver == 0 {
                None
            } else {
                relock(&self.sink).clone()
            };
            let Some(sink) = sink else {
                c.activity.consumed = c.activity.consumed.max(pass);
                self.settle_if_quiet(&c);
                return 0;
            };
            let bits = c.vectors.take();
            for v in 0..layout::MAX_INTRS as usize {
                if bits & (1 << v) != 0 {
                    c.counters.interrupts[v] += 1;
                }
            }
            c.activity.effects += u64::from(bits.count_ones());
            c.activity.delivering += 1;
            (bits, sink, pass)
        };
        for v in 0..layout::MAX_INTRS {
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

    /// Harness accounting (see [`Activity`]).
    pub fn activity(&self) -> Activity {
        self.lock().activity
    }

    /// Asks for one more pass (see `crate::Device::request_pass`).
    pub fn request_pass(&self) -> u64 {
        let g = {
            let mut c = self.lock();
            c.activity.received += 1;
            c.activity.received
        };
        self.cv.notify_all();
        g
    }

    /// True when every write is consumed, no doorbell queued and no interrupt latched.
    pub fn is_idle(&self) -> bool {
        let c = self.lock();
        c.activity.consumed == c.activity.received
            && c.activity.delivering == 0
            && c.work.is_empty()
            && c.vectors.to_deliver == 0
    }

    /// `process` then `deliver_interrupts` until both are idle.
    pub fn run_until_idle(&self) {
        for _ in 0..10_000 {
            let n = self.process();
            let d = self.deliver_interrupts();
            if n == 0 && d == 0 {
                return;
            }
        }
    }

    /// Starts the device thread (threaded mode).
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
                if c.work.is_empty()
                    && c.vectors.to_deliver == 0
                    && c.activity.consumed == c.activity.received
                {
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

impl Drop for Vmxnet3 {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

impl Core {
    fn check_access(&mut self, off: u32, width: u32) -> Result<(), crate::MmioError> {
        if width != 4 || !off.is_multiple_of(4) {
            self.counters.bad_mmio += 1;
            return Err(crate::MmioError::BadAccess);
        }
        if off >= layout::BAR_SIZE {
            self.counters.bad_mmio += 1;
            return Err(crate::MmioError::OutOfRange);
        }
        Ok(())
    }

    /// The configuration.
    pub fn config(&self) -> &Vmxnet3Config {
        &self.cfg
    }

    /// The current MAC (MACL/MACH).
    pub fn mac(&self) -> [u8; 6] {
        self.mac
    }

    /// True while active.
    pub fn is_active(&self) -> bool {
        self.running
    }

    /// The fabric link as GET_LINK reports it.
    pub fn link_up(&self) -> bool {
        self.link_up
    }

    /// The selected revision (VRRS), if any.
    pub fn revision(&self) -> Option<u32> {
        self.rev
    }

    /// What the latest ACTIVATE_DEV read (kept until RESET_DEV).
    pub fn active(&self) -> Option<&Active> {
        self.conf.as_ref()
    }

    /// Statistics.
    pub fn counters(&self) -> &Vmxnet3Counters {
        &self.counters
    }

    /// Whether vector `i` is masked (IMR).
    pub fn vector_masked(&self, i: u8) -> bool {
        self.vectors.masked(i)
    }

    /// Whether vector `i` holds a cause raised while it was masked or disabled.
    pub fn vector_held(&self, i: u8) -> bool {
        self.vectors.held(i)
    }

    /// Takes the frames sent while no fabric port was attached.
    pub fn take_sent(&mut self) -> Vec<Vec<u8>> {
        self.outbox.drain(..).collect()
    }

    fn set_running(&mut self, on: bool) {
        self.running = on;
        self.active_flag.store(on, Ordering::SeqCst);
    }

    fn fault(&mut self) {
        self.counters.dma_faults += 1;
    }

    fn shared_ecr(&self) -> u32 {
        self.conf
            .as_ref()
            .and_then(|a| {
                self.dma
                    .read_u32(a.shared + layout::shared::ECR as u64)
                    .ok()
            })
            .unwrap_or(0)
    }

    fn bar0_store(&mut self, off: u32, value: u32) {
        if !self.running {
            self.counters.bar0_inactive += 1;
            return;
        }
        let Some(conf) = self.conf.as_ref() else {
            return;
        };
        let (auto, nintr) = (conf.auto_mask, conf.num_intrs);
        let (ntx, nrx) = (conf.txq.len() as u32, conf.rxq.len() as u32);
        if let Some(i) = reg_index(off, bar0::IMR, layout::MAX_INTRS) {
            // CAST: i < 25.
            let i = i as u8;
            if i >= nintr {
                self.counters.bad_mmio += 1;
                return;
            }
            let disable = self.disable_all();
            self.vectors.set_mask(i, value & 1 != 0, auto, disable);
        } else if let Some(q) = reg_index(off, bar0::TXPROD, 64) {
            self.counters.tx_doorbells += 1;
            if q >= ntx {
                self.counters.bad_mmio += 1;
                return;
            }
            // CAST: q < ntx ≤ 8.
            let q = q as u8;
            let size = self
                .conf
                .as_ref()
                .map_or(0, |a| a.txq[usize::from(q)].ring.size);
            if value >= size {
                self.tx_queue_error(q, layout::qerr::INVALID);
                return;
            }
            if self.pending_tx & (1 << q) == 0 {
                self.pending_tx |= 1 << q;
                self.work.push_back(q);
            }
        } else if let Some((q, ring)) = reg_index(off, bar0::RXPROD, 64)
            .map(|q| (q, 0))
            .or_else(|| reg_index(off, bar0::RXPROD2, 64).map(|q| (q, 1)))
        {
            if q >= nrx {
                self.counters.bad_mmio += 1;
                return;
            }
            // CAST: q < nrx ≤ 16.
            let q = q as u8;
            let size = self
                .conf
                .as_ref()
                .map_or(0, |a| a.rxq[usize::from(q)].rings[ring].size);
            // The device takes Rx buffers by their generation bits; the producer is checked,
            // and bounds them only when the device asked for it (`updateRxProd`, V9).
            if value >= size {
                self.rx_queue_error(q, layout::qerr::INVALID);
            } else if let Some(r) = self
                .conf
                .as_mut()
                .and_then(|a| a.rxq.get_mut(usize::from(q)))
            {
                r.prod[ring] = value;
            }
        }
    }

    fn bar1_store(&mut self, off: u32, value: u32) -> Result<(), crate::MmioError> {
        match off {
            bar1::VRRS | bar1::UVRS => {
                let offered = if off == bar1::VRRS {
                    self.cfg.revisions
                } else {
                    self.cfg.upt_versions
                };
                if value.count_ones() != 1 || value & offered == 0 {
                    self.counters.bad_selects += 1;
                    return Ok(());
                }
                let v = Some(value.trailing_zeros() + 1);
                if off == bar1::VRRS {
                    self.rev = v;
                } else {
                    self.upt = v;
                }
            }
            bar1::DSAL => self.dsal = value,
            bar1::DSAH => self.dsah = value,
            bar1::CMD => self.command(value),
            bar1::MACL => self.macl = value,
            bar1::MACH => {
                let l = self.macl.to_le_bytes();
                let mac = [l[0], l[1], l[2], l[3], value as u8, (value >> 8) as u8];
                if mac != self.mac {
                    self.mac = mac;
                    self.mac_changed = Some(mac);
                }
            }
            bar1::ECR => {
                if let Some(a) = self.conf.as_ref() {
                    let at = a.shared + layout::shared::ECR as u64;
                    match self.dma.read_u32(at) {
                        Ok(e) => {
                            if self.dma.write_u32(at, e & !value).is_err() {
                                self.fault();
                            }
                        }
                        Err(_) => self.fault(),
                    }
                }
            }
            bar1::ICR => {
                self.counters.bad_mmio += 1;
                return Err(crate::MmioError::ReadOnly);
            }
            _ => {}
        }
        Ok(())
    }

    /// DISABLE_ALL in DriverShared `intrCtrl`, read at each use (V10).
    fn disable_all(&mut self) -> bool {
        let Some(a) = self.conf.as_ref() else {
            return true;
        };
        match self
            .dma
            .read_u32(a.shared + layout::shared::INTR_CTRL as u64)
        {
            Ok(v) => v & layout::INTR_CTRL_DISABLE_ALL != 0,
            Err(_) => {
                self.fault();
                true
            }
        }
    }

    fn raise(&mut self, vector: u8) {
        let Some(auto) = self.conf.as_ref().map(|a| a.auto_mask) else {
            return;
        };
        let disable = self.disable_all();
        self.vectors.raise(vector, auto, disable);
    }

    /// Sets `bits` in DriverShared `ecr` and raises the event vector (V11).
    fn post_event(&mut self, bits: u32) {
        let Some((shared, ev)) = self.conf.as_ref().map(|a| (a.shared, a.event_intr)) else {
            return;
        };
        let at = shared + layout::shared::ECR as u64;
        let ok = match self.dma.read_u32(at) {
            Ok(e) => self.dma.write_u32(at, e | bits).is_ok(),
            Err(_) => false,
        };
        if !ok {
            self.fault();
            return;
        }
        self.counters.events += 1;
        self.raise(ev);
    }

    fn set_link(&mut self, up: bool) {
        if self.link_up == up {
            return;
        }
        self.link_up = up;
        if self.conf.is_some() {
            self.post_event(layout::ecr::LINK);
        }
    }

    fn tx_queue_error(&mut self, q: u8, code: u32) {
        let Some(t) = self
            .conf
            .as_mut()
            .and_then(|a| a.txq.get_mut(usize::from(q)))
        else {
            return;
        };
        if t.status.stopped {
            return;
        }
        t.status = QueueStatus {
            stopped: true,
            error: code,
        };
        self.counters.tx_queue_errors += 1;
        self.post_event(layout::ecr::TQERR);
    }

    fn rx_queue_error(&mut self, q: u8, code: u32) {
        let Some(r) = self
            .conf
            .as_mut()
            .and_then(|a| a.rxq.get_mut(usize::from(q)))
        else {
            return;
        };
        if r.status.stopped {
            return;
        }
        r.status = QueueStatus {
            stopped: true,
            error: code,
        };
        self.counters.rx_queue_errors += 1;
        self.post_event(layout::ecr::RQERR);
    }

    /// Reads the 720 bytes of DriverShared, for the UPDATE_* commands.
    fn read_shared(&mut self) -> Option<Vec<u8>> {
        let addr = self.conf.as_ref()?.shared;
        let mut raw = vec![0u8; layout::SHARED_LEN];
        if self.dma.read(addr, &mut raw).is_err() {
            self.fault();
            return None;
        }
        Some(raw)
    }

    /// An UPDATE_* command: `f` reads the new value from DriverShared into the active state;
    /// a refused value keeps the old one and reads back 1 (V12).
    fn update(&mut self, f: impl FnOnce(&DmaSpace, &Le<&[u8]>, &mut Active) -> bool) -> u32 {
        let Some(raw) = self.read_shared() else {
            self.counters.update_failures += 1;
            return 1;
        };
        let dma = self.dma.clone();
        let ok = self
            .conf
            .as_mut()
            .is_some_and(|a| f(&dma, &Le(&raw[..]), a));
        if ok {
            0
        } else {
            self.counters.update_failures += 1;
            1
        }
    }

    fn command(&mut self, code: u32) {
        self.counters.commands += 1;
        let perm = self.cfg.mac;
        self.cmd_result = match code {
            cmd::ACTIVATE_DEV => self.activate(),
            cmd::QUIESCE_DEV => {
                self.set_running(false);
                self.work.clear();
                self.pending_tx = 0;
                0
            }
            cmd::RESET_DEV => {
                self.reset();
                0
            }
            cmd::UPDATE_RX_MODE => self.update(|_, v, a| {
                let mode = v.u32(layout::shared::RX_MODE);
                let ok = mode & !layout::rxm::ALL == 0;
                if ok {
                    a.filter.mode = mode;
                }
                ok
            }),
            cmd::UPDATE_MAC_FILTERS => {
                self.update(|dma, v, a| match activate::read_multicast(dma, v) {
                    Ok(m) => {
                        a.filter.multicast = m;
                        true
                    }
                    Err(_) => false,
                })
            }
            cmd::UPDATE_VLAN_FILTERS => self.update(|_, v, a| {
                a.filter.vlans = activate::read_vlans(v);
                true
            }),
            cmd::UPDATE_FEATURE => self.update(|_, v, a| {
                a.features = v.u64(layout::shared::UPT_FEATURES);
                true
            }),
            c if (cmd::FIRST_SET..=cmd::LAST_SET_REV1).contains(&c) => 0,
            cmd::GET_QUEUE_STATUS => {
                self.write_queue_status();
                0
            }
            cmd::GET_STATS => {
                self.write_stats();
                0
            }
            cmd::GET_LINK => (self.cfg.link_speed_mbps << 16) | u32::from(self.link_up),
            cmd::GET_PERM_MAC_LO => u32::from_le_bytes([perm[0], perm[1], perm[2], perm[3]]),
            cmd::GET_PERM_MAC_HI => u32::from(perm[4]) | (u32::from(perm[5]) << 8),
            cmd::GET_DID_LO => layout::DEVICE_ID,
            cmd::GET_DID_HI => layout::DEVICE_REVISION,
            cmd::GET_DEV_EXTRA_INFO => 0,
            cmd::GET_CONF_INTR => self.cfg.conf_intr,
            cmd::GET_ADAPTIVE_RING_INFO => 1,
            _ => {
                self.counters.unsupported_commands += 1;
                u32::MAX
            }
        };
    }

    fn activate(&mut self) -> u32 {
        if self.running {
            return 0;
        }
        let r = if self.rev.is_none() {
            Err(ActivateError::NoRevision)
        } else if self.upt.is_none() {
            Err(ActivateError::NoUptVersion)
        } else {
            let addr = (u64::from(self.dsah) << 32) | u64::from(self.dsal);
            activate::activate(
                &self.dma,
                addr,
                activate::Limits {
                    vectors: self.cfg.vectors,
                    max_tx: self.cfg.max_tx_queues,
                    max_rx: self.cfg.max_rx_queues,
                },
            )
        };
        match r {
            Ok(a) => {
                // V7: completion rings zeroed, device-written queue fields set.
                let mut ok = true;
                for t in &a.txq {
                    ok &= zero_ring(&self.dma, &t.comp);
                    ok &= self
                        .dma
                        .write_u32(
                            t.desc + layout::txq::THRESHOLD as u64,
                            self.cfg.tx_threshold,
                        )
                        .is_ok();
                }
                for r in &a.rxq {
                    ok &= zero_ring(&self.dma, &r.comp);
                    ok &= self
                        .dma
                        .write(
                            r.desc + layout::rxq::UPDATE_RX_PROD as u64,
                            &[u8::from(self.cfg.update_rx_prod)],
                        )
                        .is_ok();
                }
                if !ok {
                    self.fault();
                }
                self.conf = Some(a);
                self.work.clear();
                self.pending_tx = 0;
                self.set_running(true);
                self.counters.activations += 1;
                // V3, QEMU's rule as an option: the permanent MAC is back.
                if self.cfg.activate_restores_mac && self.mac != self.cfg.mac {
                    self.mac = self.cfg.mac;
                    self.mac_changed = Some(self.mac);
                }
                0
            }
            Err(e) => {
                self.counters.activate_failures += 1;
                self.counters.last_activate_error = Some(e);
                1
            }
        }
    }

    fn reset(&mut self) {
        self.set_running(false);
        self.conf = None;
        self.vectors = intr::Vectors::default();
        self.work.clear();
        self.pending_tx = 0;
        self.dsal = 0;
        self.dsah = 0;
    }

    fn write_queue_status(&mut self) {
        let Some(a) = self.conf.as_ref() else {
            return;
        };
        let mut writes = Vec::new();
        for t in &a.txq {
            writes.push((t.desc + layout::txq::STOPPED as u64, t.status));
        }
        for r in &a.rxq {
            writes.push((r.desc + layout::rxq::STOPPED as u64, r.status));
        }
        for (at, s) in writes {
            let mut b = [0u8; 8];
            b[0] = u8::from(s.stopped);
            b[4..8].copy_from_slice(&s.error.to_le_bytes());
            if self.dma.write(at, &b).is_err() {
                self.fault();
            }
        }
    }

    fn write_stats(&mut self) {
        let Some(a) = self.conf.as_ref() else {
            return;
        };
        let mut writes: Vec<(u64, [u8; 80])> = Vec::new();
        for t in &a.txq {
            writes.push((t.desc + layout::txq::STATS as u64, t.stats.bytes()));
        }
        for r in &a.rxq {
            writes.push((r.desc + layout::rxq::STATS as u64, r.stats.bytes()));
        }
        for (at, b) in writes {
            if self.dma.write(at, &b).is_err() {
                self.fault();
            }
        }
    }
}

fn zero_ring(dma: &DmaSpace, r: &DevRing) -> bool {
    if r.size == 0 {
        return true;
    }
    let zeros = vec![0u8; r.size as usize * layout::DESC_SIZE as usize];
    dma.write(r.base, &zeros).is_ok()
}
