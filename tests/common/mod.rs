//! The host harness joining the driver's hardware layer (`pvrdma_ndk::pvrdma`) to the device
//! model (`pvrdma_sim`): both are independent readings of docs/reference/pvrdma.md, so
//! every test through this harness checks one against the other.
//!
//! - [`SimDma`]: the driver's `DmaAllocator` over the model's [`DmaSpace`].
//! - [`SimBar1`]: BAR1 `RegisterIo` over the model's register file (records DSRLOW/DSRHIGH so
//!   tests can read back the DSR the driver wrote).
//! - Doorbells: `HostPlatform`'s UAR stand-in page plus a hook forwarding every store to
//!   `Device::uar_write32`.
//! - Interrupts: [`PlatformSink`] hands model vectors to `HostPlatform::raise_interrupt`.
//! - [`Mode::Deterministic`]: no device thread; device work runs only in `process()`, called by
//!   the platform's pump (command waits) and by [`Rig::settle`]. [`Mode::Threaded`]: the model's
//!   thread runs it, and [`settle_threaded`] waits on the model's own accounting
//!   (`pvrdma_sim::Activity`) and the DPC executors, never on a sleep.
//! - [`Harness`]: a rig plus a probed `pvrdma::Device`, with leak checks in
//!   [`Harness::finish`].
//!
//! Shared by integration tests and (through `#[path]`) examples and benches.
#![allow(dead_code)]

pub mod guest;
pub mod interop;
pub mod memory;
pub mod ndis;
pub mod ndk;
pub mod objects;
pub mod pair;
pub mod qtest;
pub mod smbd;
pub mod tshark;
pub mod vmx;
pub mod vmx_ndis;
pub mod wire;

use std::collections::HashMap;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use pvrdma_host::{HostDevice, HostExecutor, HostPlatform};
use pvrdma_ndk::os::alloc::{AllocStats, stats};
use pvrdma_ndk::os::dma::{DmaRegion, PAGE_SIZE};
use pvrdma_ndk::os::dpc::DpcScheduler;
use pvrdma_ndk::os::{DmaAllocator, Platform, RegisterIo};
use pvrdma_ndk::pvrdma::PvrdmaError;
use pvrdma_ndk::pvrdma::device::{Device as DrvDevice, DeviceConfig as DrvConfig};
use pvrdma_sim::fabric::Fabric;
use pvrdma_sim::{Activity, DeviceConfig, DmaSpace, InterruptSink, ObjectCounts};

/// How the model runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// No device thread: doorbell work and interrupt delivery happen only in `process()` /
    /// `deliver_interrupts()`, called from the pump and [`Rig::settle`].
    Deterministic,
    /// The model's own thread processes doorbells and delivers interrupts.
    Threaded,
}

/// Default UAR PFN: a BAR2 at 0xFE00_0000 (fits the 32-bit DSR field of VERSION 18). The
/// model does not interpret `uar_pfn` (the UAR is reached through the doorbell hook), so any
/// value is accepted; tests read the DSR back to check the driver's encoding.
pub const DEFAULT_UAR_PFN: u64 = 0xFE00_0000 >> 12;

// ---------------------------------------------------------------------------------- DMA

/// `DmaAllocator` over a [`DmaSpace`]: page-aligned zeroed host allocations registered with
/// the space; the logical address is the bus address.
pub struct SimDma {
    space: Arc<DmaSpace>,
    live: Mutex<HashMap<u64, (usize, usize)>>,
    allocs: AtomicU64,
    frees: AtomicU64,
}

impl SimDma {
    /// An allocator registering into `space`.
    pub fn new(space: Arc<DmaSpace>) -> Arc<Self> {
        Arc::new(SimDma {
            space,
            live: Mutex::new(HashMap::new()),
            allocs: AtomicU64::new(0),
            frees: AtomicU64::new(0),
        })
    }

    /// Regions allocated and not yet freed.
    pub fn live(&self) -> usize {
        self.live.lock().unwrap().len()
    }

    /// Allocations so far.
    pub fn allocs(&self) -> u64 {
        self.allocs.load(Ordering::SeqCst)
    }

    /// Frees so far.
    pub fn frees(&self) -> u64 {
        self.frees.load(Ordering::SeqCst)
    }
}

// SAFETY: each region is a fresh `alloc_zeroed` allocation of whole pages with page alignment,
// registered (so its bus address is page aligned too), unaliased, and freed only in `free`.
unsafe impl DmaAllocator for SimDma {
    fn alloc(&self, len: usize) -> Option<DmaRegion> {
        let len = len.checked_next_multiple_of(PAGE_SIZE)?.max(PAGE_SIZE);
        let layout = std::alloc::Layout::from_size_align(len, PAGE_SIZE).ok()?;
        // SAFETY: the layout has a non-zero size.
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        let cpu = NonNull::new(p)?;
        // SAFETY: `p` is valid for `len` bytes until `free` unregisters it before deallocating.
        let bus = unsafe { self.space.register(p, len) };
        self.live.lock().unwrap().insert(bus, (p as usize, len));
        self.allocs.fetch_add(1, Ordering::SeqCst);
        Some(DmaRegion {
            cpu,
            logical: bus,
            len,
        })
    }

    fn free(&self, region: DmaRegion) {
        let known = self.live.lock().unwrap().remove(&region.logical);
        assert_eq!(
            known,
            Some((region.cpu.as_ptr() as usize, region.len)),
            "free of a region this allocator did not hand out"
        );
        assert!(self.space.unregister(region.logical));
        self.frees.fetch_add(1, Ordering::SeqCst);
        let layout = std::alloc::Layout::from_size_align(region.len, PAGE_SIZE).unwrap();
        // SAFETY: allocated in `alloc` with this layout; no longer registered with the device.
        unsafe { std::alloc::dealloc(region.cpu.as_ptr(), layout) }
    }
}

// ---------------------------------------------------------------------------------- BAR1

/// BAR1 over the model, recording the DSR address written.
pub struct SimBar1 {
    dev: Arc<pvrdma_sim::Device>,
    dsr: Mutex<(u32, u32)>,
    writes: AtomicU64,
}

impl SimBar1 {
    /// BAR1 of `dev`.
    pub fn new(dev: Arc<pvrdma_sim::Device>) -> Arc<Self> {
        Arc::new(SimBar1 {
            dev,
            dsr: Mutex::new((0, 0)),
            writes: AtomicU64::new(0),
        })
    }

    /// The last DSRHIGH:DSRLOW written.
    pub fn dsr_address(&self) -> u64 {
        let (lo, hi) = *self.dsr.lock().unwrap();
        (u64::from(hi) << 32) | u64::from(lo)
    }

    /// BAR1 writes so far.
    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::SeqCst)
    }
}

impl RegisterIo for SimBar1 {
    fn read32(&self, off: u32) -> u32 {
        self.dev.bar1_read32(off)
    }
    fn write32(&self, off: u32, val: u32) {
        match off {
            0x04 => self.dsr.lock().unwrap().0 = val,
            0x08 => self.dsr.lock().unwrap().1 = val,
            _ => {}
        }
        self.writes.fetch_add(1, Ordering::SeqCst);
        self.dev.bar1_write32(off, val);
    }
}

// ---------------------------------------------------------------------------------- IRQ

/// Model interrupts → `HostPlatform::raise_interrupt` (weak: the platform owns the model
/// through BAR1, not the other way round).
pub struct PlatformSink(pub Weak<HostPlatform>);

impl InterruptSink for PlatformSink {
    fn raise(&self, vector: u32) {
        if let Some(p) = self.0.upgrade() {
            p.raise_interrupt(vector);
        }
    }
}

// ---------------------------------------------------------------------------------- settle

/// Bound on a settle: a hang, not a timing assertion.
pub const SETTLE_DEADLINE: Duration = Duration::from_secs(60);

/// DPC routines run so far on every processor of `executors`.
pub fn dpc_runs(executors: &[&HostExecutor]) -> u64 {
    executors
        .iter()
        .map(|e| (0..e.processor_count()).map(|p| e.runs_on(p)).sum::<u64>())
        .sum()
}

/// A device model a threaded settle waits on: the PVRDMA model and the vmxnet3 model keep
/// the same accounting ([`Activity`]).
pub trait Quiescent: Sync {
    /// The model's accounting.
    fn activity(&self) -> Activity;
    /// Asks for one more pass; returns the `received` count that pass covers.
    fn request_pass(&self) -> u64;
    /// Everything received consumed, nothing queued or latched.
    fn is_idle(&self) -> bool;
}

impl Quiescent for pvrdma_sim::Device {
    fn activity(&self) -> Activity {
        pvrdma_sim::Device::activity(self)
    }
    fn request_pass(&self) -> u64 {
        pvrdma_sim::Device::request_pass(self)
    }
    fn is_idle(&self) -> bool {
        pvrdma_sim::Device::is_idle(self)
    }
}

impl Quiescent for pvrdma_sim::vmxnet3::Vmxnet3 {
    fn activity(&self) -> Activity {
        pvrdma_sim::vmxnet3::Vmxnet3::activity(self)
    }
    fn request_pass(&self) -> u64 {
        pvrdma_sim::vmxnet3::Vmxnet3::request_pass(self)
    }
    fn is_idle(&self) -> bool {
        pvrdma_sim::vmxnet3::Vmxnet3::is_idle(self)
    }
}

/// Threaded mode: returns once the models (each running its device thread), the fabric
/// joining them (if any) and the hosts' DPC executors have all run out of work: everything
/// submitted so far consumed, every interrupt it raised delivered and handled, nothing in
/// flight. Panics after [`SETTLE_DEADLINE`] with the state it was stuck in.
///
/// Each round waits for the executors to go idle, asks every model for a pass and waits until
/// a whole pass that began after the request has ended (so a write a DPC made, or ring space a
/// DPC freed, has been seen), then checks that over the round no model did anything (same
/// `effects`, no write but the request), no DPC ran, and nothing is queued anywhere. A DPC may
/// ring a doorbell that makes more work, and that work more interrupts, so rounds repeat until
/// one finds the whole system quiet: a fixed point, not a guess that it is probably done.
pub fn settle_threaded(
    models: &[&dyn Quiescent],
    executors: &[&HostExecutor],
    fabric: Option<&Fabric>,
) {
    let deadline = Instant::now() + SETTLE_DEADLINE;
    let state = || {
        let acts: Vec<Activity> = models.iter().map(|m| m.activity()).collect();
        let inflight: Vec<u64> = executors.iter().map(|e| e.inflight()).collect();
        format!(
            "models {acts:?}, models idle {:?}, DPCs in flight {inflight:?}, fabric idle {:?}",
            models.iter().map(|m| m.is_idle()).collect::<Vec<_>>(),
            fabric.map(Fabric::is_idle),
        )
    };
    let until = |stage: &str, cond: &dyn Fn() -> bool| {
        while !cond() {
            assert!(
                Instant::now() < deadline,
                "threaded rig did not settle within {SETTLE_DEADLINE:?}: stuck waiting for \
                 {stage}; {}",
                state()
            );
            std::thread::yield_now();
        }
    };
    let executors_idle = || executors.iter().all(|e| e.is_idle());
    loop {
        until("the DPC executors to go idle", &executors_idle);
        let before: Vec<Activity> = models.iter().map(|m| m.activity()).collect();
        let runs = dpc_runs(executors);
        let passes: Vec<u64> = models.iter().map(|m| m.request_pass()).collect();
        until("a device pass begun after the request", &|| {
            models.iter().zip(&passes).all(|(m, &g)| {
                let a = m.activity();
                a.consumed >= g && a.delivering == 0
            })
        });
        let after: Vec<Activity> = models.iter().map(|m| m.activity()).collect();
        let models_quiet = before
            .iter()
            .zip(&after)
            .all(|(b, a)| a.effects == b.effects && a.received == b.received + 1);
        if models_quiet
            && dpc_runs(executors) == runs
            && executors_idle()
            && fabric.is_none_or(Fabric::is_idle)
            && models.iter().all(|m| m.is_idle())
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "threaded rig did not settle within {SETTLE_DEADLINE:?}: no round was quiet; {}",
            state()
        );
    }
}

/// Deterministic mode, one model without a fabric: runs the model and delivers its
/// interrupts, and waits for the DPCs they queue on `executor`, until an iteration finds
/// nothing to do on either side. Panics after [`SETTLE_DEADLINE`] (a hang).
pub fn settle_model(model: &pvrdma_sim::Device, executor: &HostExecutor) {
    let deadline = Instant::now() + SETTLE_DEADLINE;
    loop {
        assert!(Instant::now() < deadline, "the model did not settle");
        let n = model.process();
        let d = model.deliver_interrupts();
        let mut waited = false;
        while !executor.is_idle() {
            waited = true;
            assert!(Instant::now() < deadline, "DPCs did not drain");
            std::thread::yield_now();
        }
        if n == 0 && d == 0 && !waited {
            return;
        }
    }
}

// ---------------------------------------------------------------------------------- Rig

/// Serializes harness users in one test binary: allocation counters are global.
static SERIAL: Mutex<()> = Mutex::new(());

/// Takes the harness lock (the allocation counters are process-global).
pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The environment variable that runs every model of a test in lazy-completion mode
/// (pvrdma.md M48): `PVRDMA_SIM_LAZY=1 cargo test --test ndk_datapath` (CI runs the data-path
/// tests both ways).
pub const LAZY_ENV: &str = "PVRDMA_SIM_LAZY";

/// Whether [`LAZY_ENV`] asks for lazy completion.
pub fn lazy_from_env() -> bool {
    std::env::var(LAZY_ENV).is_ok_and(|v| v == "1")
}

/// Rig options.
#[derive(Clone, Debug)]
pub struct RigConfig {
    /// Model mode.
    pub mode: Mode,
    /// Simulated processors (DPC threads).
    pub processors: u32,
    /// The model's configuration.
    pub model: DeviceConfig,
    /// DSR `uar_pfn` the platform reports.
    pub uar_pfn: u64,
}

impl RigConfig {
    /// Defaults with the given mode.
    pub fn new(mode: Mode) -> Self {
        RigConfig {
            mode,
            processors: 2,
            model: DeviceConfig::default(),
            uar_pfn: DEFAULT_UAR_PFN,
        }
    }
}

/// A fresh model joined to a host platform, before the driver is probed.
pub struct Rig {
    /// The model.
    pub model: Arc<pvrdma_sim::Device>,
    /// Its bus address space.
    pub space: Arc<DmaSpace>,
    /// The driver's DMA allocator.
    pub dma: Arc<SimDma>,
    /// BAR1.
    pub bar1: Arc<SimBar1>,
    /// The platform the driver runs on.
    pub platform: Arc<HostPlatform>,
    /// Mode.
    pub mode: Mode,
    baseline: AllocStats,
    _serial: MutexGuard<'static, ()>,
}

impl Rig {
    /// Builds a model and a platform (and starts the model thread in threaded mode).
    pub fn new(cfg: RigConfig) -> Rig {
        let guard = serial();
        let baseline = stats();
        let space = Arc::new(DmaSpace::new());
        let mut model_cfg = cfg.model.clone();
        model_cfg.lazy_completion |= lazy_from_env();
        let model = pvrdma_sim::Device::new(space.clone(), model_cfg);
        let dma = SimDma::new(space.clone());
        let bar1 = SimBar1::new(model.clone());
        let m2 = model.clone();
        let pump: Option<Arc<dyn Fn() + Send + Sync>> = match cfg.mode {
            Mode::Deterministic => {
                let m = model.clone();
                Some(Arc::new(move || {
                    m.process();
                    m.deliver_interrupts();
                    std::thread::yield_now();
                }))
            }
            // The model thread does the work; waiting threads only yield. Without a pump,
            // `HostPlatform::wait_until` sleeps 50 µs per check, which the kernel rounds up
            // to a scheduler tick here (~4 ms per command).
            Mode::Threaded => Some(Arc::new(std::thread::yield_now)),
        };
        let platform = HostPlatform::new(
            HostDevice {
                bar1: bar1.clone(),
                dma: dma.clone(),
                doorbell: Some(Arc::new(move |off, val| m2.uar_write32(off, val))),
                uar_pfn: cfg.uar_pfn,
                pump,
            },
            cfg.processors,
        );
        model.set_interrupt_sink(Arc::new(PlatformSink(Arc::downgrade(&platform))));
        if cfg.mode == Mode::Threaded {
            model.start_thread();
        }
        Rig {
            model,
            space,
            dma,
            bar1,
            platform,
            mode: cfg.mode,
            baseline,
            _serial: guard,
        }
    }

    /// Probes the driver against the model.
    pub fn probe(&self, cfg: &DrvConfig<'_>) -> Result<DrvDevice, PvrdmaError> {
        let p: Arc<dyn Platform> = self.platform.clone();
        DrvDevice::probe(p, cfg)
    }

    /// Deterministic mode: runs the model and delivers its interrupts, and waits for the
    /// driver's DPCs, until an iteration finds nothing to do on either side. Threaded mode:
    /// [`settle_threaded`] over the model and the DPC executor.
    pub fn settle(&self) {
        if self.mode == Mode::Threaded {
            let model: &dyn Quiescent = &*self.model;
            settle_threaded(&[model], &[&**self.platform.executor()], None);
            return;
        }
        settle_model(&self.model, self.platform.executor());
    }

    /// Waits until `cond` holds, pumping the model in deterministic mode. Panics after 20 s
    /// (a hang, not a timing assertion).
    pub fn wait_for(&self, what: &str, cond: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !cond() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            if self.mode == Mode::Deterministic {
                self.model.process();
                self.model.deliver_interrupts();
            }
            std::thread::yield_now();
        }
    }

    /// The model's live objects.
    pub fn model_objects(&self) -> ObjectCounts {
        self.model.with_core(|c| c.object_counts())
    }

    /// Reads `len` bytes of the DSR the driver handed to the model, from `off`.
    pub fn read_dsr(&self, off: u64, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        self.space
            .read(self.bar1.dsr_address() + off, &mut v)
            .expect("DSR readable");
        v
    }

    /// Stops the model thread, the DPC executor, and checks that nothing the driver
    /// allocated is left: no region registered with the model, the allocation counters back
    /// at their value before the rig was built, every SimDma region freed.
    pub fn finish(self) {
        let ex = self.platform.executor().clone();
        let deadline = Instant::now() + Duration::from_secs(20);
        while !ex.is_idle() {
            assert!(Instant::now() < deadline, "DPCs did not drain at teardown");
            std::thread::yield_now();
        }
        self.model.stop_thread();
        ex.shutdown();
        assert_eq!(self.dma.live(), 0, "DMA regions leaked");
        assert_eq!(self.dma.allocs(), self.dma.frees());
        assert_eq!(self.space.region_count(), 0, "regions left in the DmaSpace");
        assert_eq!(self.space.bytes_registered(), 0);
        assert_eq!(
            stats(),
            self.baseline,
            "pool/DMA accounting not back at baseline"
        );
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        // Also on a failing test: the model thread holds the model alive until stopped.
        self.model.stop_thread();
        self.platform.executor().shutdown();
    }
}

/// A rig with a probed driver device.
pub struct Harness {
    /// The driver device (taken by [`Harness::finish`]).
    pub dev: Option<DrvDevice>,
    /// The rig.
    pub rig: Rig,
}

impl Harness {
    /// A fresh model in `mode` with `processors` DPC processors and `model` config, and the
    /// driver probed against it with default bring-up parameters. Panics if the probe fails.
    pub fn new(mode: Mode, processors: u32, model: DeviceConfig) -> Harness {
        let mut cfg = RigConfig::new(mode);
        cfg.processors = processors;
        cfg.model = model;
        Self::with(cfg, &DrvConfig::default())
    }

    /// Like [`Harness::new`] with full control.
    pub fn with(cfg: RigConfig, drv: &DrvConfig<'_>) -> Harness {
        let rig = Rig::new(cfg);
        let dev = rig.probe(drv).expect("probe against the model");
        Harness {
            dev: Some(dev),
            rig,
        }
    }

    /// Deterministic default: 2 processors, default model.
    pub fn deterministic() -> Harness {
        Self::new(Mode::Deterministic, 2, DeviceConfig::default())
    }

    /// The driver device.
    pub fn dev(&self) -> &DrvDevice {
        self.dev.as_ref().expect("device not torn down")
    }

    /// See [`Rig::settle`].
    pub fn settle(&self) {
        self.rig.settle();
    }

    /// Teardown with checks: the test destroyed every object it created (the model holds
    /// none), then the driver device is dropped (RESET) and the rig's leak checks run.
    pub fn finish(mut self) {
        self.rig.settle();
        assert_eq!(
            self.rig.model_objects(),
            ObjectCounts::default(),
            "objects left in the model before teardown"
        );
        drop(self.dev.take());
        assert!(
            !self.rig.model.with_core(|c| c.is_active()),
            "RESET on drop"
        );
        let Harness { rig, .. } = self;
        rig.finish();
    }
}
