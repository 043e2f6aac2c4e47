//! The host harness joining the vmxnet3 hardware layer (`pvrdma_ndk::vmxnet3`) to the vmxnet3
//! model (`pvrdma_sim::vmxnet3`) on a simulated fabric: each host is a vNIC of a `World`
//! (vmxnet3 at function 0, optionally PVRDMA at function 1) with the driver probed against it.
//! Both sides are independent readings of docs/reference/vmxnet3.md.
//!
//! - [`SimBar`]: BAR0 or BAR1 `RegisterIo` over the model.
//! - [`TestClient`]: the `NicClient` a test sees: frames copied out (or kept, to test buffer
//!   loans), send completions with their status, link changes, faults.
//! - [`VmxCluster`]: N hosts; [`VmxCluster::settle`] runs the model, the fabric and the DPCs
//!   to a fixed point (deterministic), or waits for one (threaded) — never a sleep.
//! - [`VmxCluster::finish`]: teardown with leak checks (pool and DMA accounting back at the
//!   baseline, no region left in any host's DMA space).
#![allow(dead_code)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use pvrdma_host::{HostExecutor, HostNicDevice, HostNicPlatform, HostTime};
use pvrdma_ndk::os::alloc::{AllocStats, stats};
use pvrdma_ndk::os::{DmaAllocator, NicPlatform, RegisterIo};
use pvrdma_ndk::vmxnet3::{
    Config, Fault, LinkState, NicClient, RxBatch, Sge, TxStatus, Vmxnet3, Vmxnet3Error,
};
use pvrdma_sim::InterruptSink;
use pvrdma_sim::dma::DmaSpace;
use pvrdma_sim::vmxnet3::Vmxnet3 as Model;
use pvrdma_sim::world::{VnicConfig, World};

use super::{Mode, SETTLE_DEADLINE, SimDma, serial};

/// BAR `n` (0 or 1) of a vmxnet3 model.
pub struct SimBar {
    model: Arc<Model>,
    n: u32,
}

impl RegisterIo for SimBar {
    fn read32(&self, off: u32) -> u32 {
        if self.n == 0 {
            self.model.bar0_read32(off)
        } else {
            self.model.bar1_read32(off)
        }
    }
    fn write32(&self, off: u32, val: u32) {
        if self.n == 0 {
            self.model.bar0_write32(off, val);
        } else {
            self.model.bar1_write32(off, val);
        }
    }
}

/// Model interrupts → `HostNicPlatform::raise_interrupt`.
pub struct NicSink(pub Weak<HostNicPlatform>);

impl InterruptSink for NicSink {
    fn raise(&self, vector: u32) {
        if let Some(p) = self.0.upgrade() {
            p.raise_interrupt(vector);
        }
    }
}

/// Everything the driver told its client.
#[derive(Default)]
pub struct Seen {
    /// Frames, copied out of their buffers, in order.
    pub frames: Vec<Vec<u8>>,
    /// Buffers kept (when `keep` is on), with their lengths.
    pub kept: Vec<(u32, u32)>,
    /// Send completions: (token, status).
    pub sent: Vec<(u64, TxStatus)>,
    /// Link changes.
    pub links: Vec<LinkState>,
    /// Faults.
    pub faults: Vec<Fault>,
}

/// The `NicClient` of a test host.
#[derive(Default)]
pub struct TestClient {
    pub seen: Mutex<Seen>,
    /// Keep every received buffer instead of letting it go back at once.
    pub keep: AtomicBool,
    /// Calls made while this thread held a driver spin lock (must stay 0).
    pub under_lock: std::sync::atomic::AtomicU64,
}

impl TestClient {
    fn check_locks(&self) {
        if pvrdma_host::held_spin_locks() != 0 {
            self.under_lock.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl NicClient for TestClient {
    fn received(&self, batch: &RxBatch<'_>) {
        self.check_locks();
        let keep = self.keep.load(Ordering::SeqCst);
        let mut s = self.seen.lock().unwrap();
        for i in 0..batch.len() {
            let v = batch.data(i).expect("frame data");
            let mut b = vec![0u8; v.len()];
            v.read_bytes(0, &mut b);
            s.frames.push(b);
            if keep {
                assert!(batch.keep(i));
                let f = batch.frame(i).unwrap();
                s.kept.push((f.buffer, f.len));
            }
        }
    }
    fn sent(&self, tokens: &[u64], status: TxStatus) {
        self.check_locks();
        let mut s = self.seen.lock().unwrap();
        s.sent.extend(tokens.iter().map(|&t| (t, status)));
    }
    fn link_changed(&self, link: LinkState) {
        self.check_locks();
        self.seen.lock().unwrap().links.push(link);
    }
    fn device_error(&self, fault: Fault) {
        self.check_locks();
        self.seen.lock().unwrap().faults.push(fault);
    }
}

/// A page of "consumer" memory in a host's DMA space that frames are sent from (the memory an
/// NDIS NET_BUFFER's MDL would describe).
pub struct TxMem {
    pub buf: pvrdma_sim::DmaBuffer,
}

impl TxMem {
    /// `pages` pages in `space`.
    pub fn new(space: &Arc<DmaSpace>, pages: usize) -> Self {
        TxMem {
            buf: pvrdma_sim::DmaBuffer::new(space, pages),
        }
    }
    /// Writes `frame` at `off` and returns its scatter-gather list cut at `cuts`.
    pub fn sg(&self, off: usize, frame: &[u8], cuts: &[usize]) -> Vec<Sge> {
        self.buf.write(off, frame);
        let mut v = Vec::new();
        let mut at = 0;
        for &c in cuts.iter().chain(std::iter::once(&frame.len())) {
            if c > at {
                v.push(Sge {
                    addr: self.buf.bus() + (off + at) as u64,
                    len: (c - at) as u32,
                });
                at = c;
            }
        }
        v
    }
}

/// One host: a vNIC of the world, its platform, the driver.
pub struct VmxHost {
    pub vnic: usize,
    pub platform: Arc<HostNicPlatform>,
    pub dma: Arc<SimDma>,
    pub client: Arc<TestClient>,
    pub nic: Option<Vmxnet3>,
    pub tx: TxMem,
}

impl VmxHost {
    /// The driver.
    pub fn nic(&self) -> &Vmxnet3 {
        self.nic.as_ref().expect("driver not torn down")
    }
    /// Takes what the client saw so far.
    pub fn take(&self) -> Seen {
        std::mem::take(&mut *self.client.seen.lock().unwrap())
    }
}

/// Cluster options.
#[derive(Clone, Debug)]
pub struct VmxClusterConfig {
    pub mode: Mode,
    pub hosts: u8,
    /// PVRDMA at function 1 of every slot.
    pub paired: bool,
    /// Vectors granted to each host.
    pub vectors: u32,
    /// Driver configuration.
    pub driver: Config,
    /// Model configuration (MAC taken from the vNIC index).
    pub model: pvrdma_sim::vmxnet3::Vmxnet3Config,
    /// DPC processors per host.
    pub processors: u32,
    /// A MAC for one host's driver to use instead of its permanent one: (host, MAC).
    pub mac_override: Option<(usize, [u8; 6])>,
    /// Probe the driver on every host (off: the platforms only, for a harness that brings
    /// the device up itself, such as the NDIS miniport's).
    pub probe: bool,
}

impl VmxClusterConfig {
    pub fn new(mode: Mode, hosts: u8) -> Self {
        VmxClusterConfig {
            mode,
            hosts,
            paired: false,
            vectors: 3,
            driver: Config {
                tx_ring: 64,
                rx_ring: 64,
                rx_buffers: 128,
                ..Config::default()
            },
            model: pvrdma_sim::vmxnet3::Vmxnet3Config::default(),
            processors: 2,
            mac_override: None,
            probe: true,
        }
    }
}

/// Hosts on one fabric.
pub struct VmxCluster {
    pub world: World,
    pub hosts: Vec<VmxHost>,
    pub mode: Mode,
    baseline: AllocStats,
    _serial: MutexGuard<'static, ()>,
}

/// Builds the platform of vNIC `v` of `world`.
pub fn platform_for(
    world: &World,
    v: usize,
    vectors: u32,
    processors: u32,
) -> (Arc<HostNicPlatform>, Arc<SimDma>) {
    let model = world.vnic(v).vmxnet3().clone();
    let bar0 = Arc::new(SimBar {
        model: model.clone(),
        n: 0,
    });
    platform_with_bar0(world, v, vectors, processors, bar0)
}

/// As [`platform_for`] in the given time (a paired kit host's clock is the world's in
/// virtual time).
pub fn platform_with_time(
    world: &World,
    v: usize,
    vectors: u32,
    processors: u32,
    time: HostTime,
) -> (Arc<HostNicPlatform>, Arc<SimDma>) {
    let model = world.vnic(v).vmxnet3().clone();
    let bar0 = Arc::new(SimBar {
        model: model.clone(),
        n: 0,
    });
    platform_with_bar0_in(world, v, vectors, processors, bar0, time)
}

/// As [`platform_for`] with BAR0 supplied by the caller (the instruction harness defers its
/// writes so the model's work is not counted inside the driver's calls).
pub fn platform_with_bar0(
    world: &World,
    v: usize,
    vectors: u32,
    processors: u32,
    bar0: Arc<dyn RegisterIo>,
) -> (Arc<HostNicPlatform>, Arc<SimDma>) {
    platform_with_bar0_in(world, v, vectors, processors, bar0, HostTime::Wall)
}

fn platform_with_bar0_in(
    world: &World,
    v: usize,
    vectors: u32,
    processors: u32,
    bar0: Arc<dyn RegisterIo>,
    time: HostTime,
) -> (Arc<HostNicPlatform>, Arc<SimDma>) {
    let vnic = world.vnic(v);
    let model = vnic.vmxnet3().clone();
    let dma = SimDma::new(vnic.dma().clone());
    let allocator: Arc<dyn DmaAllocator> = dma.clone();
    let platform = HostNicPlatform::with_time(
        HostNicDevice {
            bars: vec![
                Some(bar0),
                Some(Arc::new(SimBar {
                    model: model.clone(),
                    n: 1,
                })),
            ],
            dma: allocator,
            vectors,
        },
        processors,
        time,
    );
    model.set_interrupt_sink(Arc::new(NicSink(Arc::downgrade(&platform))));
    (platform, dma)
}

impl VmxCluster {
    /// Builds the world and probes every host's driver (panics if a probe fails).
    pub fn new(cfg: VmxClusterConfig) -> Self {
        Self::try_new(cfg).unwrap_or_else(|(e, _)| panic!("probe failed: {e:?}"))
    }

    /// As [`VmxCluster::new`], the probe's error returned with the cluster (hosts probed so far).
    // A test helper returning the whole cluster for its leak checks: the size is no cost.
    #[allow(clippy::result_large_err)]
    pub fn try_new(cfg: VmxClusterConfig) -> Result<Self, (Vmxnet3Error, Self)> {
        let guard = serial();
        let baseline = stats();
        let mut world = World::new(0x5EED);
        for i in 0..cfg.hosts {
            let base = if cfg.paired {
                VnicConfig::paired(i)
            } else {
                VnicConfig::ethernet(i)
            };
            world
                .add_vnic(base.with_vmxnet3(cfg.model.clone()))
                .expect("vNIC");
        }
        if cfg.mode == Mode::Threaded {
            world.start_threads();
        }
        let mut c = VmxCluster {
            world,
            hosts: Vec::new(),
            mode: cfg.mode,
            baseline,
            _serial: guard,
        };
        for v in 0..usize::from(cfg.hosts) {
            let (platform, dma) = platform_for(&c.world, v, cfg.vectors, cfg.processors);
            let client = Arc::new(TestClient::default());
            let p: Arc<dyn NicPlatform> = platform.clone();
            let tx = TxMem::new(c.world.vnic(v).dma(), 16);
            let mut driver = cfg.driver;
            if let Some((h, mac)) = cfg.mac_override
                && h == v
            {
                driver.mac = Some(mac);
            }
            let r = if cfg.probe {
                Vmxnet3::probe(p, &driver, client.clone()).map(Some)
            } else {
                Ok(None)
            };
            let failed = r.as_ref().err().copied();
            c.hosts.push(VmxHost {
                vnic: v,
                platform,
                dma,
                client,
                nic: r.ok().flatten(),
                tx,
            });
            if let Some(e) = failed {
                return Err((e, c));
            }
        }
        c.settle();
        Ok(c)
    }

    /// Host `i`.
    pub fn host(&self, i: usize) -> &VmxHost {
        &self.hosts[i]
    }

    /// The vmxnet3 model of host `i`.
    pub fn model(&self, i: usize) -> &Arc<Model> {
        self.world.vnic(i).vmxnet3()
    }

    /// The MAC of host `i`'s vNIC.
    pub fn mac(&self, i: usize) -> [u8; 6] {
        self.world.vnic(i).mac()
    }

    fn executors(&self) -> Vec<&HostExecutor> {
        self.hosts
            .iter()
            .map(|h| &**h.platform.executor())
            .collect()
    }

    fn executors_idle(&self) -> bool {
        self.hosts.iter().all(|h| h.platform.executor().is_idle())
    }

    fn dpc_runs(&self) -> u64 {
        super::dpc_runs(&self.executors())
    }

    fn effects(&self) -> Vec<u64> {
        (0..self.world.vnic_count())
            .map(|i| self.model(i).activity().effects)
            .collect()
    }

    /// Deterministic: runs devices, fabric and DPCs until a round changes nothing.
    /// Threaded: waits for a round in which no model, DPC or fabric event did anything.
    pub fn settle(&self) {
        let deadline = Instant::now() + SETTLE_DEADLINE;
        loop {
            assert!(Instant::now() < deadline, "vmxnet3 cluster did not settle");
            let runs = self.dpc_runs();
            let eff = self.effects();
            if self.mode == Mode::Deterministic {
                self.world.run_until_idle();
            } else {
                let passes: Vec<u64> = (0..self.world.vnic_count())
                    .map(|i| self.model(i).request_pass())
                    .collect();
                while !(0..self.world.vnic_count()).all(|i| {
                    let a = self.model(i).activity();
                    a.consumed >= passes[i] && a.delivering == 0
                }) {
                    assert!(Instant::now() < deadline, "model pass never ran");
                    std::thread::yield_now();
                }
            }
            while !self.executors_idle() {
                assert!(Instant::now() < deadline, "DPCs did not drain");
                std::thread::yield_now();
            }
            let quiet = self.dpc_runs() == runs
                && self.effects() == eff
                && self.world.fabric().is_idle()
                && (0..self.world.vnic_count()).all(|i| self.model(i).is_idle());
            if quiet {
                return;
            }
        }
    }

    /// Host `from` sends `frame` (written to its Tx memory at `off`, cut at `cuts`).
    pub fn send(&self, from: usize, off: usize, frame: &[u8], cuts: &[usize], token: u64) {
        let h = self.host(from);
        let sg = h.tx.sg(off, frame, cuts);
        h.nic().send(&sg, token, false).expect("send");
    }

    /// Teardown with leak checks: every driver dropped (device reset, buffers freed), the
    /// world's threads stopped, the DPC executors shut down; then no DMA region is left in any
    /// host's space and the pool/DMA accounting is back at its baseline.
    pub fn finish(mut self) {
        self.settle();
        for h in &self.hosts {
            assert_eq!(
                h.client.under_lock.load(Ordering::SeqCst),
                0,
                "client called under a driver lock"
            );
            if let Some(n) = &h.nic {
                assert_eq!(n.rx_loaned(), 0, "receive buffers still lent at teardown");
            }
        }
        for h in &mut self.hosts {
            drop(h.nic.take());
        }
        self.settle();
        self.world.stop_threads();
        let deadline = Instant::now() + Duration::from_secs(20);
        for h in &self.hosts {
            while !h.platform.executor().is_idle() {
                assert!(Instant::now() < deadline, "DPCs did not drain at teardown");
                std::thread::yield_now();
            }
            h.platform.executor().shutdown();
            assert!(!h.platform.interrupt_connected());
        }
        for (i, h) in self.hosts.iter().enumerate() {
            assert_eq!(h.dma.live(), 0, "host {i}: DMA regions leaked");
            assert_eq!(h.dma.allocs(), h.dma.frees());
            assert!(
                !self.model(i).with_core(|c| c.is_active()),
                "host {i}: device left active"
            );
        }
        let hosts = std::mem::take(&mut self.hosts);
        drop(hosts);
        for i in 0..self.world.vnic_count() {
            assert_eq!(
                self.world.vnic(i).dma().region_count(),
                0,
                "vNIC {i}: regions left"
            );
        }
        assert_eq!(
            stats(),
            self.baseline,
            "pool/DMA accounting not back at baseline"
        );
    }
}

impl Drop for VmxCluster {
    fn drop(&mut self) {
        self.world.stop_threads();
        for h in &self.hosts {
            h.platform.executor().shutdown();
        }
    }
}

/// An Ethernet frame: `dst`, `src`, EtherType, then a pattern up to `len` bytes.
pub fn eth(dst: [u8; 6], src: [u8; 6], ethertype: u16, len: usize, seed: u8) -> Vec<u8> {
    let mut f = Vec::with_capacity(len);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend((14..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)));
    f
}
