//! Bring-up, interrupts, events, the Rx filter, statistics, reset and teardown of the vmxnet3
//! function (vmxnet3.md §3.4, §3.8; model rules V1–V13), in the shape of `pvrdma::device`.
//!
//! Bring-up follows Linux/DPDK/iPXE (§3.4): VRRS/UVRS negotiation, RESET_DEV, the permanent
//! MAC, GET_CONF_INTR, DMA memory, DriverShared (intrCtrl DISABLE_ALL), the interrupt handler,
//! MACL/MACH, DSAL then DSAH, Rx buffers posted, ACTIVATE_DEV (read back 0), MACL/MACH again for
//! a configured MAC (QEMU restores the permanent one at activation), RXPROD, interrupts
//! enabled, GET_LINK. Once DSAH is written a guard makes any later failure stop the device
//! (QUIESCE_DEV, RESET_DEV) before its memory is freed; dropping the [`Vmxnet3`] does the same.
//!
//! Interrupts: up to three MSI-X vectors (Rx, Tx, events; fewer vectors share them). The ISR
//! counts, masks the vector itself when the device does not (mask mode other than AUTO), and
//! queues the vector's DPC; the DPC reaps with a budget, calls the [`NicClient`] with no driver
//! lock held, then unmasks its vector (IMR = 0) and looks once more, as Linux's NAPI poll does.
//! Events: `ecr` is acknowledged by writing it to ECR; LINK re-reads GET_LINK; TQERR/RQERR
//! read GET_QUEUE_STATUS and report a [`Fault`] (the consumer resets).
#![deny(unsafe_code)]

use alloc::sync::{Arc, Weak};
use core::cell::Cell;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::os::alloc::{KVec, try_arc};
use crate::os::dma::PAGE_SIZE;
use crate::os::sync::mmio_flush;
use crate::os::{
    DmaBuffer, Dpc, DpcHandler, InterruptHandler, NicPlatform, Processor, RegisterIo, SharedDma,
    SpinLock,
};

use super::Vmxnet3Error;
use super::batch::Batch;
use super::regs::{Cmd, Reg, bar0, bar1, intr_type, mac_from_regs, mac_to_regs, mask_mode};
use super::rx::{RX_BUF, RxBatch, RxFrame, RxQueue};
use super::shared::{self, MAX_MULTICAST, Shared as SharedPage, SharedInit};
use super::tx::{Reaped, SendError, Sge, TxQueue};

bitflags::bitflags! {
    /// `rxMode` bits (V9).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct RxMode: u32 {
        /// Unicast to the adapter's MAC.
        const UNICAST = 0x01;
        /// Multicast in the table ([`Vmxnet3::set_multicast`]).
        const MULTICAST = 0x02;
        /// Broadcast.
        const BROADCAST = 0x04;
        /// Every multicast.
        const ALL_MULTICAST = 0x08;
        /// Everything.
        const PROMISCUOUS = 0x10;
    }
}

/// Bring-up parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// MTU (60..=2030: a frame fits one 2 KiB buffer).
    pub mtu: u32,
    /// Tx ring size (a multiple of 32 in 32..=4096).
    pub tx_ring: u32,
    /// Rx ring 0 size (likewise).
    pub rx_ring: u32,
    /// Receive buffers (at least `rx_ring`; the surplus covers buffers lent to the consumer).
    pub rx_buffers: u32,
    /// A MAC to use instead of the permanent one (a network-address override).
    pub mac: Option<[u8; 6]>,
    /// The Rx filter at bring-up.
    pub rx_mode: RxMode,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            mtu: 1500,
            tx_ring: 256,
            rx_ring: 256,
            rx_buffers: 512,
            mac: None,
            rx_mode: RxMode::UNICAST.union(RxMode::BROADCAST),
        }
    }
}

impl Config {
    fn check(&self) -> Result<(), Vmxnet3Error> {
        let ring = |n: u32| n.is_multiple_of(32) && (32..=4096).contains(&n);
        let ok = ring(self.tx_ring)
            && ring(self.rx_ring)
            && (self.rx_ring..=65_535).contains(&self.rx_buffers)
            && (60..=RX_BUF - 18).contains(&self.mtu);
        if ok {
            Ok(())
        } else {
            Err(Vmxnet3Error::InvalidParameter)
        }
    }
}

/// The link as GET_LINK reports it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkState {
    /// Up.
    pub up: bool,
    /// Speed in Mbps.
    pub speed_mbps: u32,
}

impl LinkState {
    /// Decodes GET_LINK (`speed << 16 | up`); all ones (a vanished device) is down.
    fn from_reg(v: u32) -> Self {
        if v == u32::MAX {
            return LinkState::default();
        }
        LinkState {
            up: v & 1 != 0,
            speed_mbps: v >> 16,
        }
    }

    fn pack(self) -> u64 {
        (u64::from(self.up) << 32) | u64::from(self.speed_mbps)
    }

    fn unpack(v: u64) -> Self {
        LinkState {
            up: v >> 32 != 0,
            // CAST: the low 32 bits.
            speed_mbps: v as u32,
        }
    }
}

/// How a queued frame ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxStatus {
    /// The device completed it.
    Sent,
    /// A reset or the teardown dropped it.
    Aborted,
}

/// A device fault the consumer answers with a reset ([`Vmxnet3::reset`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The device stopped the Tx queue (TQERR); its `status.error`.
    TxQueueStopped(u32),
    /// The device stopped the Rx queue (RQERR); its `status.error`.
    RxQueueStopped(u32),
    /// A Tx completion failed validation.
    TxCorrupt,
    /// An Rx completion failed validation.
    RxCorrupt,
}

/// What the layer above (the NDIS miniport; the tests' hosts) hears. Every method runs in a
/// DPC at DISPATCH_LEVEL with no driver lock held, and may call back into the [`Vmxnet3`],
/// except `sent` with [`TxStatus::Aborted`] (below).
pub trait NicClient: Send + Sync {
    /// Frames arrived. Each buffer goes back to the ring when this returns unless the
    /// consumer keeps it ([`RxBatch::keep`]) and later returns it ([`Vmxnet3::return_rx`]).
    fn received(&self, batch: &RxBatch<'_>);
    /// Frames queued with [`Vmxnet3::send`] ended, in the order they were queued:
    /// [`TxStatus::Sent`] from the DPC (DISPATCH_LEVEL), [`TxStatus::Aborted`] from
    /// [`Vmxnet3::quiesce`], [`Vmxnet3::reset`] or the teardown, at PASSIVE_LEVEL (an NDIS
    /// completion must say which).
    fn sent(&self, tokens: &[u64], status: TxStatus);
    /// The link changed (an `ecr` LINK event).
    fn link_changed(&self, link: LinkState);
    /// The device or its rings failed; the data path is stopped until [`Vmxnet3::reset`].
    fn device_error(&self, fault: Fault);
}

/// Why a filter change was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FilterError {
    /// More multicast addresses than the table holds (32).
    TooMany,
    /// The device refused the value (UPDATE_* read back non-zero); the old one stays.
    Refused(u32),
}

/// UPT1 statistics of the device (GET_STATS), Tx and Rx queue.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Tx: TSO packets, TSO bytes, unicast packets, bytes, multicast packets, bytes, broadcast
    /// packets, bytes, errors, discards (header order).
    pub tx: [u64; 10],
    /// Rx: LRO packets, LRO bytes, unicast packets, bytes, multicast packets, bytes, broadcast
    /// packets, bytes, out of buffers, errors.
    pub rx: [u64; 10],
}

/// The driver's own counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DriverCounters {
    /// Frames queued.
    pub tx_frames: u64,
    /// Bytes queued.
    pub tx_bytes: u64,
    /// Sends refused for a full ring.
    pub tx_full: u64,
    /// Frames aborted by a reset or the teardown.
    pub tx_aborted: u64,
    /// Frames handed up.
    pub rx_frames: u64,
    /// Bytes handed up.
    pub rx_bytes: u64,
    /// Frames dropped: error flag, runt, spread over several buffers.
    pub rx_dropped: [u64; 3],
    /// `return_rx` of a buffer the consumer did not hold (ignored).
    pub bad_returns: u64,
    /// ISR calls per vector.
    pub interrupts: [u64; 3],
    /// Events handled (`ecr` non-zero).
    pub events: u64,
    /// Resets.
    pub resets: u64,
}

#[derive(Default)]
struct Counters {
    tx_full: AtomicU64,
    tx_aborted: AtomicU64,
    rx_dropped: [AtomicU64; 3],
    bad_returns: AtomicU64,
    interrupts: [AtomicU64; 3],
    events: AtomicU64,
    resets: AtomicU64,
}

fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

/// The revisions this driver implements (bit i = revision i + 1).
const REVISIONS: u32 = 0x1;
/// Frames per Rx reap, tokens per Tx reap.
const BATCH: usize = 64;
/// Frames or packets one DPC run takes before it requeues itself.
const BUDGET: usize = 256;
/// Vector roles.
const ROLE_RX: u8 = 1;
const ROLE_TX: u8 = 2;
const ROLE_EVENT: u8 = 4;

/// Vectors used, their roles, and the (event, Tx, Rx) vector of each.
fn assign(granted: u32) -> (u8, [u8; 3], (u8, u8, u8)) {
    match granted {
        0 | 1 => (1, [ROLE_RX | ROLE_TX | ROLE_EVENT, 0, 0], (0, 0, 0)),
        2 => (2, [ROLE_RX | ROLE_TX, ROLE_EVENT, 0], (1, 0, 0)),
        _ => (3, [ROLE_RX, ROLE_TX, ROLE_EVENT], (2, 1, 0)),
    }
}

struct Shared {
    platform: Arc<dyn NicPlatform>,
    bar0: Arc<dyn RegisterIo>,
    bar1: Arc<dyn RegisterIo>,
    /// TXPROD of queue 0.
    txprod: Reg,
    client: Arc<dyn NicClient>,
    page: SharedDma,
    tx: TxQueue,
    rx: RxQueue,
    /// One command at a time (CMD write, read-back).
    cmd: SpinLock<()>,
    /// Filter changes, serialized.
    filter: SpinLock<RxMode>,
    nvec: u8,
    roles: [u8; 3],
    /// The device masks a vector as it fires.
    auto_mask: bool,
    dpcs: SpinLock<Option<KVec<Dpc>>>,
    mac: SpinLock<[u8; 6]>,
    perm_mac: [u8; 6],
    link: AtomicU64,
    /// The teardown began: DPCs do nothing more.
    closing: AtomicBool,
    /// The device is gone (surprise removal): no more register accesses.
    removed: AtomicBool,
    counters: Counters,
}

impl Shared {
    fn bar0(&self) -> Option<&dyn RegisterIo> {
        Some(&*self.bar0)
    }

    fn bar1(&self) -> Option<&dyn RegisterIo> {
        Some(&*self.bar1)
    }

    fn page(&self) -> SharedPage<'_> {
        SharedPage(self.page.view())
    }

    /// One command: CMD write, full barrier, CMD read-back. All ones once the device is gone.
    fn command(&self, c: Cmd) -> u32 {
        if self.removed.load(Ordering::Acquire) {
            return u32::MAX;
        }
        let Some(b1) = self.bar1() else {
            return u32::MAX;
        };
        let _g = self.cmd.lock();
        bar1::CMD.write(b1, c as u32);
        mmio_flush();
        bar1::CMD.read(b1)
    }

    fn set_imr(&self, v: u32, masked: bool) {
        if self.removed.load(Ordering::Acquire) {
            return;
        }
        if let (Some(b0), Some(r)) = (self.bar0(), bar0::imr(v)) {
            r.write(b0, u32::from(masked));
        }
    }

    fn mask_all(&self) {
        self.page().set_interrupts_disabled(true);
        for v in 0..u32::from(self.nvec) {
            self.set_imr(v, true);
        }
    }

    fn unmask_all(&self) {
        self.page().set_interrupts_disabled(false);
        for v in 0..u32::from(self.nvec) {
            self.set_imr(v, false);
        }
    }

    fn refresh_link(&self) -> LinkState {
        let l = LinkState::from_reg(self.command(Cmd::GetLink));
        self.link.store(l.pack(), Ordering::Release);
        l
    }

    /// RXPROD after a refill when the device asked for it (`updateRxProd`, read each time as
    /// Linux does: the device may change it, switching between emulation and UPT).
    fn rx_prod(&self, fill: u32) {
        if self.page().update_rx_prod()
            && !self.removed.load(Ordering::Acquire)
            && let Some(r) = bar0::rxprod(0)
        {
            r.write(&*self.bar0, fill);
        }
    }

    /// Writes the MAC in use to MACL/MACH (MACH commits both).
    fn write_mac(&self, b1: &dyn RegisterIo) {
        let (l, h) = mac_to_regs(*self.mac.lock());
        bar1::MACL.write(b1, l);
        bar1::MACH.write(b1, h);
    }

    /// MAC, DriverShared address, buffers, ACTIVATE_DEV, the MAC again, RXPROD, interrupts on.
    fn activate(&self) -> Result<(), Vmxnet3Error> {
        let (Some(b0), Some(b1)) = (self.bar0(), self.bar1()) else {
            return Err(Vmxnet3Error::NoBars);
        };
        self.write_mac(b1);
        let addr = self.page.logical();
        // CAST: the two halves of the address.
        bar1::DSAL.write(b1, addr as u32);
        bar1::DSAH.write(b1, (addr >> 32) as u32);
        // Buffers are posted before activation (Linux); RXPROD after it.
        let fill = self.rx.start();
        let r = self.command(Cmd::ActivateDev);
        if r != 0 {
            self.rx.close();
            return Err(if r == u32::MAX {
                Vmxnet3Error::DeviceGone
            } else {
                Vmxnet3Error::ActivateFailed(r)
            });
        }
        // QEMU's ACTIVATE_DEV puts the permanent MAC back (vmxnet3.md V3): a configured one
        // must be written again once the device is active. Before it too, for a device that
        // takes the MAC at activation.
        if *self.mac.lock() != self.perm_mac {
            self.write_mac(b1);
        }
        if let Some(p) = bar0::rxprod(0) {
            p.write(b0, fill);
        }
        self.tx.open();
        self.unmask_all();
        Ok(())
    }

    /// Stops the data path and the device: queues closed, vectors masked, QUIESCE_DEV,
    /// RESET_DEV. After it the device writes no memory.
    fn stop(&self) {
        self.tx.close();
        self.rx.close();
        self.mask_all();
        self.command(Cmd::QuiesceDev);
        self.command(Cmd::ResetDev);
    }

    /// Ends every outstanding frame as aborted (the device is reset).
    fn abort_tx(&self) {
        let mut tokens = [0u64; BATCH];
        loop {
            let n = self.tx.take_outstanding(&mut tokens);
            let Some(done) = tokens.get(..n).filter(|d| !d.is_empty()) else {
                return;
            };
            add(&self.counters.tx_aborted, n as u64);
            self.client.sent(done, TxStatus::Aborted);
        }
    }

    /// The DPC of vector `v`.
    fn service(&self, v: u32) {
        if self.closing.load(Ordering::Acquire) {
            return;
        }
        let roles = self.roles.get(v as usize).copied().unwrap_or(0);
        if roles & ROLE_EVENT != 0 {
            self.events();
        }
        let mut again = false;
        if roles & ROLE_TX != 0 {
            again |= self.tx_reap();
        }
        if roles & ROLE_RX != 0 {
            again |= self.rx_reap();
        }
        if !again {
            self.set_imr(v, false);
            // Work that came while masked and raised nothing (a device without held causes):
            // look once more after unmasking (Linux re-checks the completion ring).
            again = (roles & ROLE_TX != 0 && self.tx.pending())
                || (roles & ROLE_RX != 0 && self.rx.pending())
                || (roles & ROLE_EVENT != 0 && self.page().ecr() != 0);
        }
        if again && let Some(d) = self.dpcs.lock().as_ref().and_then(|d| d.get(v as usize)) {
            d.queue(Processor::Current);
        }
    }

    fn events(&self) {
        let page = self.page();
        let e = page.ecr();
        if e == 0 {
            return;
        }
        add(&self.counters.events, 1);
        if !self.removed.load(Ordering::Acquire)
            && let Some(b1) = self.bar1()
        {
            bar1::ECR.write(b1, e);
        }
        if e & shared::ecr::LINK != 0 {
            let l = self.refresh_link();
            self.client.link_changed(l);
        }
        if e & (shared::ecr::TQERR | shared::ecr::RQERR) != 0 {
            self.command(Cmd::GetQueueStatus);
            let [(tstop, terr), (rstop, rerr)] = page.queue_status();
            if tstop {
                self.tx.close();
                self.client.device_error(Fault::TxQueueStopped(terr));
            }
            if rstop {
                self.rx.close();
                self.client.device_error(Fault::RxQueueStopped(rerr));
            }
        }
    }

    /// Tx completions to the client; true when the budget ran out. Out of line: the
    /// instruction harness (`benches/vmx_instructions.sh`) measures it by name.
    #[inline(never)]
    fn tx_reap(&self) -> bool {
        let mut tokens = Batch::<u64, BATCH>::new();
        let mut total = 0;
        loop {
            tokens.clear();
            let end = self.tx.reap(&mut tokens);
            let done = tokens.as_slice();
            if !done.is_empty() {
                self.client.sent(done, TxStatus::Sent);
            }
            total += done.len();
            match end {
                Reaped::Done => return false,
                Reaped::Corrupt => {
                    self.client.device_error(Fault::TxCorrupt);
                    return false;
                }
                Reaped::More if total >= BUDGET => return true,
                Reaped::More => {}
            }
        }
    }

    /// Received frames to the client; true when the budget ran out. Out of line, as
    /// `tx_reap`.
    #[inline(never)]
    fn rx_reap(&self) -> bool {
        let mut frames = Batch::<RxFrame, BATCH>::new();
        let mut total = 0;
        loop {
            frames.clear();
            let (end, drops, fill) = self.rx.reap(&mut frames);
            if drops != Default::default() {
                add(&self.counters.rx_dropped[0], u64::from(drops.error));
                add(&self.counters.rx_dropped[1], u64::from(drops.runt));
                add(&self.counters.rx_dropped[2], u64::from(drops.multi));
            }
            if let Some(f) = fill {
                self.rx_prod(f);
            }
            let got = frames.as_slice();
            if !got.is_empty() {
                let batch = RxBatch {
                    rx: &self.rx,
                    frames: got,
                    kept: Cell::new(0),
                };
                self.client.received(&batch);
                let fill = self.rx.give_back_batch(got, batch.kept.get());
                self.rx_prod(fill);
            }
            total += got.len();
            match end {
                Reaped::Done => return false,
                Reaped::Corrupt => {
                    self.client.device_error(Fault::RxCorrupt);
                    return false;
                }
                Reaped::More if total >= BUDGET => return true,
                Reaped::More => {}
            }
        }
    }
}

struct VectorDpc {
    shared: Weak<Shared>,
    vector: u32,
}

impl DpcHandler for VectorDpc {
    fn run(&self) {
        if let Some(s) = self.shared.upgrade() {
            s.service(self.vector);
        }
    }
}

struct Isr {
    dpcs: KVec<Dpc>,
    shared: Weak<Shared>,
}

impl InterruptHandler for Isr {
    fn isr(&self, vector: u32) -> bool {
        let Some(dpc) = self.dpcs.get(vector as usize) else {
            return false;
        };
        if let Some(s) = self.shared.upgrade() {
            if let Some(c) = s.counters.interrupts.get(vector as usize) {
                add(c, 1);
            }
            // Mask modes other than AUTO leave the masking to the driver.
            if !s.auto_mask {
                s.set_imr(vector, true);
            }
        }
        dpc.queue(Processor::Current);
        true
    }
}

/// Stops the device before its memory goes, when bring-up fails after DSAH.
struct StopGuard<'a> {
    shared: &'a Shared,
    armed: bool,
}

impl Drop for StopGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.shared.closing.store(true, Ordering::Release);
            self.shared.stop();
            self.shared.platform.disconnect_interrupt();
        }
    }
}

/// A brought-up vmxnet3 function.
pub struct Vmxnet3 {
    shared: Arc<Shared>,
}

impl Vmxnet3 {
    /// Brings the device up (PASSIVE_LEVEL).
    ///
    /// # Errors
    ///
    /// [`Vmxnet3Error`]: configuration, BARs, revision, UPT version, RESET_DEV, interrupt
    /// configuration, vectors, memory, the interrupt connection, ACTIVATE_DEV. Everything
    /// allocated so far is released, after the device is stopped if it knew the memory.
    pub fn probe(
        platform: Arc<dyn NicPlatform>,
        cfg: &Config,
        client: Arc<dyn NicClient>,
    ) -> Result<Vmxnet3, Vmxnet3Error> {
        cfg.check()?;
        let (Some(bar0), Some(bar1)) = (platform.bar(0), platform.bar(1)) else {
            return Err(Vmxnet3Error::NoBars);
        };
        let Some(txprod) = bar0::txprod(0) else {
            return Err(Vmxnet3Error::NoBars);
        };
        let b1 = &*bar1;
        // 1. Revision and UPT version (§3.4 step 1).
        let vrrs = bar1::VRRS.read(b1);
        if vrrs == u32::MAX {
            return Err(Vmxnet3Error::DeviceGone);
        }
        let common = vrrs & REVISIONS;
        if common == 0 {
            return Err(Vmxnet3Error::UnsupportedRevision(vrrs));
        }
        bar1::VRRS.write(b1, 1 << (31 - common.leading_zeros()));
        let uvrs = bar1::UVRS.read(b1);
        if uvrs & 1 == 0 {
            return Err(Vmxnet3Error::UnsupportedUpt(uvrs));
        }
        bar1::UVRS.write(b1, 1);
        // 2–3. Reset, MAC, interrupt configuration.
        let cmd = |c: Cmd| {
            bar1::CMD.write(b1, c as u32);
            mmio_flush();
            bar1::CMD.read(b1)
        };
        let r = cmd(Cmd::ResetDev);
        if r != 0 {
            return Err(Vmxnet3Error::ResetFailed(r));
        }
        let perm_mac = mac_from_regs(cmd(Cmd::GetPermMacLo), cmd(Cmd::GetPermMacHi));
        let conf = cmd(Cmd::GetConfIntr);
        let ty = conf & 3;
        if ty != intr_type::AUTO && ty != intr_type::MSIX {
            return Err(Vmxnet3Error::UnsupportedInterrupts(conf));
        }
        let auto_mask = (conf >> 2) & 3 == mask_mode::AUTO;
        let granted = platform.interrupt_vectors();
        if granted == 0 {
            return Err(Vmxnet3Error::NoInterrupts);
        }
        let (nvec, roles, (ev, txv, rxv)) = assign(granted);
        // 4. Memory and DriverShared.
        let dma = platform.dma().clone();
        let tx = TxQueue::new(&dma, cfg.tx_ring, cfg.mtu + 18)?;
        let rx = RxQueue::new(&dma, cfg.rx_ring, cfg.rx_buffers)?;
        let mut page = DmaBuffer::alloc(&dma, PAGE_SIZE)?;
        let (tx_ring, tx_comp) = tx.addrs();
        let (rx_ring, rx_comp) = rx.addrs();
        let page_addr = page.logical();
        shared::write_init(
            page.as_mut_slice(),
            &SharedInit {
                page: page_addr,
                tx: (tx_ring, cfg.tx_ring, tx_comp, cfg.tx_ring),
                rx: (rx_ring, cfg.rx_ring, rx_comp, cfg.rx_ring),
                mtu: cfg.mtu,
                intrs: (nvec, ev, txv, rxv),
                auto_mask,
                rx_mode: cfg.rx_mode.bits(),
            },
        );
        let shared = try_arc(Shared {
            platform: platform.clone(),
            bar0,
            bar1: bar1.clone(),
            txprod,
            client,
            page: page.share(),
            tx,
            rx,
            cmd: SpinLock::new(()),
            filter: SpinLock::new(cfg.rx_mode),
            nvec,
            roles,
            auto_mask,
            dpcs: SpinLock::new(None),
            mac: SpinLock::new(cfg.mac.unwrap_or(perm_mac)),
            perm_mac,
            link: AtomicU64::new(0),
            closing: AtomicBool::new(false),
            removed: AtomicBool::new(false),
            counters: Counters::default(),
        })?;
        let mut guard = StopGuard {
            shared: &shared,
            armed: true,
        };
        // 5. One DPC per vector, then the ISR.
        let mut dpcs = KVec::try_with_capacity(usize::from(nvec))?;
        let mut isr_dpcs = KVec::try_with_capacity(usize::from(nvec))?;
        for v in 0..u32::from(nvec) {
            let h: Arc<dyn DpcHandler> = try_arc(VectorDpc {
                shared: Arc::downgrade(&shared),
                vector: v,
            })?;
            let d = Dpc::new(platform.scheduler(), h)?;
            let _ = isr_dpcs.push_within_capacity(d.clone());
            let _ = dpcs.push_within_capacity(d);
        }
        *shared.dpcs.lock() = Some(dpcs);
        let isr: Arc<dyn InterruptHandler> = try_arc(Isr {
            dpcs: isr_dpcs,
            shared: Arc::downgrade(&shared),
        })?;
        platform.connect_interrupt(isr)?;
        // 6. Activation (V4), then the link.
        shared.activate()?;
        shared.refresh_link();
        guard.armed = false;
        drop(guard);
        Ok(Vmxnet3 { shared })
    }

    /// Queues one frame (scatter-gather list `sg`, `token` handed back by
    /// [`NicClient::sent`]); `more` says another follows at once, so the doorbell may wait
    /// (`txThreshold`). IRQL ≤ DISPATCH_LEVEL; allocates nothing.
    ///
    /// # Errors
    ///
    /// [`SendError`]; nothing was queued.
    // Out of line, as `tx_reap`.
    #[inline(never)]
    pub fn send(&self, sg: &[Sge], token: u64, more: bool) -> Result<(), SendError> {
        let s = &*self.shared;
        if s.removed.load(Ordering::Acquire) {
            return Err(SendError::Stopped);
        }
        let r = s.tx.send(s.page(), &*s.bar0, s.txprod, sg, token, more);
        if r == Err(SendError::Full) {
            add(&s.counters.tx_full, 1);
        }
        r
    }

    /// Rings the Tx doorbell if frames queued with `more` are waiting.
    pub fn flush_tx(&self) {
        let s = &*self.shared;
        if !s.removed.load(Ordering::Acquire) {
            s.tx.flush(s.page(), &*s.bar0, s.txprod);
        }
    }

    /// Buffers kept from [`NicClient::received`] come back (any IRQL ≤ DISPATCH_LEVEL). An
    /// id the consumer did not hold is ignored and counted.
    pub fn return_rx(&self, buffers: &[u32]) {
        let s = &*self.shared;
        let (fill, bad) = s.rx.give_back(buffers);
        add(&s.counters.bad_returns, u64::from(bad));
        s.rx_prod(fill);
    }

    /// The bytes of receive buffer `buffer` (the first `len`), for a consumer that kept it.
    pub fn rx_data(&self, buffer: u32, len: u32) -> Option<crate::os::DmaView<'_>> {
        self.shared.rx.view(buffer, len)
    }

    /// Logical address of receive buffer `buffer` (an NDIS consumer builds its MDLs once).
    pub fn rx_buffer_logical(&self, buffer: u32) -> Option<u64> {
        self.shared.rx.buffer_logical(buffer)
    }

    /// Receive buffers the consumer holds. Every one must be returned before the
    /// [`Vmxnet3`] is dropped (NDIS returns every indicated NBL before MiniportHaltEx).
    pub fn rx_loaned(&self) -> u32 {
        self.shared.rx.loaned()
    }

    /// Frames queued and not completed.
    pub fn tx_outstanding(&self) -> u32 {
        self.shared.tx.outstanding()
    }

    /// The Rx filter (UPDATE_RX_MODE).
    ///
    /// # Errors
    ///
    /// [`FilterError::Refused`]: the device keeps the old mode (so does the driver).
    pub fn set_rx_mode(&self, mode: RxMode) -> Result<(), FilterError> {
        let s = &*self.shared;
        let mut cur = s.filter.lock();
        s.page().set_rx_mode(mode.bits());
        match s.command(Cmd::UpdateRxMode) {
            0 => {
                *cur = mode;
                Ok(())
            }
            r => {
                s.page().set_rx_mode(cur.bits());
                Err(FilterError::Refused(r))
            }
        }
    }

    /// The current Rx mode.
    pub fn rx_mode(&self) -> RxMode {
        *self.shared.filter.lock()
    }

    /// The multicast table (UPDATE_MAC_FILTERS); takes effect with [`RxMode::MULTICAST`].
    ///
    /// # Errors
    ///
    /// [`FilterError::TooMany`] beyond 32 addresses (nothing changes), or
    /// [`FilterError::Refused`].
    pub fn set_multicast(&self, macs: &[[u8; 6]]) -> Result<(), FilterError> {
        if macs.len() > MAX_MULTICAST {
            return Err(FilterError::TooMany);
        }
        let s = &*self.shared;
        let _g = s.filter.lock();
        s.page().set_multicast(macs);
        match s.command(Cmd::UpdateMacFilters) {
            0 => Ok(()),
            r => Err(FilterError::Refused(r)),
        }
    }

    /// The MAC in use.
    pub fn mac(&self) -> [u8; 6] {
        *self.shared.mac.lock()
    }

    /// The permanent MAC (GET_PERM_MAC_LO/HI).
    pub fn permanent_mac(&self) -> [u8; 6] {
        self.shared.perm_mac
    }

    /// The link as last read (bring-up, a LINK event, a reset).
    pub fn link(&self) -> LinkState {
        LinkState::unpack(self.shared.link.load(Ordering::Acquire))
    }

    /// The device's UPT1 statistics (GET_STATS). IRQL ≤ DISPATCH_LEVEL.
    pub fn stats(&self) -> Stats {
        let s = &*self.shared;
        if s.command(Cmd::GetStats) == u32::MAX {
            return Stats::default();
        }
        let p = s.page();
        Stats {
            tx: p.stats(false),
            rx: p.stats(true),
        }
    }

    /// The driver's counts.
    pub fn counters(&self) -> DriverCounters {
        let c = &self.shared.counters;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let (tx_frames, tx_bytes) = self.shared.tx.counts();
        let (rx_frames, rx_bytes) = self.shared.rx.counts();
        DriverCounters {
            tx_frames,
            tx_bytes,
            tx_full: l(&c.tx_full),
            tx_aborted: l(&c.tx_aborted),
            rx_frames,
            rx_bytes,
            rx_dropped: [
                l(&c.rx_dropped[0]),
                l(&c.rx_dropped[1]),
                l(&c.rx_dropped[2]),
            ],
            bad_returns: l(&c.bad_returns),
            interrupts: [
                l(&c.interrupts[0]),
                l(&c.interrupts[1]),
                l(&c.interrupts[2]),
            ],
            events: l(&c.events),
            resets: l(&c.resets),
        }
    }

    /// Vectors in use.
    pub fn vectors(&self) -> u32 {
        u32::from(self.shared.nvec)
    }

    /// Stops the data path (PASSIVE_LEVEL; NDIS MiniportPause): sends refused, vectors masked,
    /// QUIESCE_DEV and RESET_DEV, every queued frame ended [`TxStatus::Aborted`]. Receive
    /// buffers the consumer holds stay with it; no frame is handed up until
    /// [`Vmxnet3::restart`].
    pub fn quiesce(&self) {
        let s = &*self.shared;
        if !s.removed.load(Ordering::Acquire) {
            s.stop();
        } else {
            s.tx.close();
            s.rx.close();
        }
        s.abort_tx();
    }

    /// Brings the data path back after [`Vmxnet3::quiesce`] (PASSIVE_LEVEL; MiniportRestart):
    /// rings rebuilt, the device activated again. Returns the link.
    ///
    /// # Errors
    ///
    /// [`Vmxnet3Error::ActivateFailed`] or [`Vmxnet3Error::DeviceGone`]: the data path stays
    /// stopped.
    pub fn restart(&self) -> Result<LinkState, Vmxnet3Error> {
        let s = &*self.shared;
        if s.removed.load(Ordering::Acquire) {
            return Err(Vmxnet3Error::DeviceGone);
        }
        s.tx.reinit();
        s.rx.reinit();
        let p = s.page();
        p.clear_ecr();
        p.clear_queue_state();
        s.activate()?;
        Ok(s.refresh_link())
    }

    /// Resets the device with traffic in flight (PASSIVE_LEVEL; NDIS MiniportResetEx, or the
    /// answer to a [`Fault`]): [`Vmxnet3::quiesce`] then [`Vmxnet3::restart`]. Returns the
    /// link.
    ///
    /// # Errors
    ///
    /// As [`Vmxnet3::restart`].
    pub fn reset(&self) -> Result<LinkState, Vmxnet3Error> {
        add(&self.shared.counters.resets, 1);
        if self.shared.removed.load(Ordering::Acquire) {
            return Err(Vmxnet3Error::DeviceGone);
        }
        self.quiesce();
        self.restart()
    }

    /// The device is gone (surprise removal): no register is touched from now on; queued
    /// frames end at the teardown.
    pub fn mark_removed(&self) {
        self.shared.removed.store(true, Ordering::Release);
        self.shared.tx.close();
        self.shared.rx.close();
    }
}

impl Drop for Vmxnet3 {
    /// Halt: DPCs stop, the device is stopped (vectors masked, QUIESCE_DEV, RESET_DEV), the
    /// interrupt disconnected, queued frames end aborted. The memory is freed when the last DPC
    /// reference goes, after the reset.
    fn drop(&mut self) {
        let s = &*self.shared;
        s.closing.store(true, Ordering::Release);
        s.stop();
        s.platform.disconnect_interrupt();
        s.abort_tx();
    }
}
