//! One paired vNIC as the host harnesses build it (issue 25): the vmxnet3 function (the
//! Ethernet miniport, `ndis::ethernet`, its "NDIS" [`HostNdis`] and its IP stack's resolver)
//! carrying the IP interface and registering NDK through `ndis::pair::NicNdk`, and the PVRDMA
//! function (`ndis::Miniport` in paired mode) serving it, both joined through a
//! `PairRegistry`, over the sim's slot model (one MAC, one fabric port, RoCE steered to
//! PVRDMA: vmxnet3.md P1–P5).
//!
//! Shared by `tests/ndis_pair.rs` (which plays NDIS around the two miniports) and the NDK
//! consumer kit's paired hosts (`ndk::ClusterConfig::paired`, the default). The harness plays
//! NDIS: InitializeEx / restart / pause / Halt of each function, the slot registration, the
//! NDK PnP events the vmxnet3 adapter asks for ([`PairedVnic::pnp_events`]) and
//! WskOpenNdkAdapter by the interface's IfIndex ([`PairedVnic::open`]).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use pvrdma_host::{HostDevice, HostNicPlatform, HostPlatform, HostTime};
use pvrdma_ndk::ndis::ethernet::{EthConfig, EthMiniport};
use pvrdma_ndk::ndis::pair::{NetInterface, NicNdk, PairRegistry, PairedNic, PciLocation};
use pvrdma_ndk::ndis::*;
use pvrdma_ndk::ndk::connect::EngineConfig;
use pvrdma_ndk::ndkpi::*;
use pvrdma_ndk::os::net::Neighbours;
use pvrdma_ndk::os::{NicPlatform, Platform, RegisterIo};
use pvrdma_sim::world::World;

use super::ndis::Indications;
use super::ndk::Pump;
use super::vmx::platform_with_time;
use super::vmx_ndis::{EthHost, HostNdis, HostPool, NoBar};
use super::{DEFAULT_UAR_PFN, PlatformSink, SimBar1, SimDma};

/// The PVRDMA function's translated resources (BAR2 page 0 is the platform's UAR PFN).
pub fn pvrdma_resources() -> Resources {
    parse_resources(&super::ndis::resource_list()).expect("PVRDMA resources")
}

/// The vmxnet3 function's translated resources.
pub fn vmxnet3_resources() -> Resources {
    parse_resources(&super::vmx_ndis::resource_list()).expect("vmxnet3 resources")
}

/// BAR1 of the PVRDMA model, counting CTL = UNQUIESCE writes.
pub struct CountingBar1 {
    /// The model's BAR1.
    pub inner: Arc<SimBar1>,
    /// CTL = UNQUIESCE writes so far.
    pub unquiesces: AtomicU32,
}

impl CountingBar1 {
    /// UNQUIESCE writes so far.
    pub fn unquiesces(&self) -> u32 {
        self.unquiesces.load(Ordering::SeqCst)
    }
}

impl RegisterIo for CountingBar1 {
    fn read32(&self, off: u32) -> u32 {
        self.inner.read32(off)
    }
    fn write32(&self, off: u32, val: u32) {
        if off == 0x0C && val == 1 {
            self.unquiesces.fetch_add(1, Ordering::SeqCst);
        }
        self.inner.write32(off, val);
    }
}

/// How a [`PairedVnic`] is built.
#[derive(Clone)]
pub struct VnicSpec {
    /// DPC processors of each function's platform.
    pub processors: u32,
    /// The hosts' time ([`Pump::host_time`]).
    pub time: HostTime,
    /// The PVRDMA function's platform runs no threads (`HostPlatform::without_threads`).
    pub thread_free: bool,
    /// The interface's IPv4 and IPv6 addresses as its "IP stack" holds them, each family
    /// optional.
    pub addresses: Vec<IpAddr>,
    /// The resolver's table size and resolution bound.
    pub resolver_entries: usize,
    pub resolve_bound_ns: u64,
    /// The resolver and the NDK surface get a platform of their own (else the PVRDMA
    /// function's: one OS under both functions).
    pub own_resolver_platform: bool,
    /// The PVRDMA miniport's configuration (`paired` is set).
    pub miniport: MiniportConfig,
    /// The connection engine's parameters (the miniport's defaults when None).
    pub engine: Option<EngineConfig>,
    /// The vmxnet3 miniport's configuration.
    pub eth: EthConfig,
    /// The Ethernet MTU of the interface.
    pub mtu: u32,
    /// The NDK surface's parting grace.
    pub grace_ns: u64,
}

impl VnicSpec {
    /// Two processors each, the wall clock, the given addresses, defaults elsewhere.
    pub fn new(addresses: Vec<IpAddr>) -> VnicSpec {
        VnicSpec {
            processors: 2,
            time: HostTime::Wall,
            thread_free: false,
            addresses,
            resolver_entries: 16,
            resolve_bound_ns: 200_000_000,
            own_resolver_platform: true,
            miniport: MiniportConfig::default(),
            engine: None,
            eth: EthConfig {
                tx_ring: 64,
                rx_ring: 64,
                rx_buffers: 128,
                mac: None,
            },
            mtu: 1500,
            grace_ns: 50_000_000,
        }
    }
}

/// One vNIC: its two functions' platforms and, while started, their adapters (see the module
/// docs). Index `i` sits at PCI bus 3, device `i`; its interface is IfIndex 11 + `i`.
pub struct PairedVnic {
    /// Function 0's location (function 1 is the PVRDMA function's).
    pub at: PciLocation,
    pub if_index: u32,
    pub luid: u64,
    /// The vmxnet3 function: its platform and DMA allocator.
    pub eth_platform: Arc<HostNicPlatform>,
    pub eth_dma: Arc<SimDma>,
    /// The vmxnet3 adapter as NDIS sees it (`mp` while started), its resolver and the
    /// platform the resolver and the NDK surface run on.
    pub eth: EthHost,
    /// The vmxnet3 adapter's NDK surface (while started).
    pub nic: Option<Arc<NicNdk>>,
    /// The PVRDMA function.
    pub pv_platform: Arc<HostPlatform>,
    pub pv_dma: Arc<SimDma>,
    pub bar1: Arc<CountingBar1>,
    pub model: Arc<pvrdma_sim::Device>,
    /// The PVRDMA adapter (while started).
    pub mp: Option<Arc<Miniport>>,
    /// Link indications of the PVRDMA adapter.
    pub pv_links: Arc<Indications>,
    spec: VnicSpec,
}

/// Host `i`'s NET_LUID (IF_TYPE_ETHERNET_CSMACD, NetLuidIndex 0x8000 + `i`).
pub fn luid(i: usize) -> u64 {
    (6 << 48) | ((0x8000 + i as u64) << 24)
}

impl PairedVnic {
    /// vNIC `i` of `world` (a paired one), its platforms registered with `pump`; neither
    /// function started.
    pub fn new(world: &Arc<World>, i: usize, pump: &Pump, spec: VnicSpec) -> PairedVnic {
        let (eth_platform, eth_dma) =
            platform_with_time(world, i, 3, spec.processors, spec.time.clone());
        pump.add_executor(eth_platform.executor().clone());
        let node = world.vnic(i).node().expect("a PVRDMA function");
        assert_eq!(node, i, "vNIC i's PVRDMA function is node i");
        let model = world.node(node).device().clone();
        let pv_dma = SimDma::new(world.vnic(i).dma().clone());
        let bar1 = Arc::new(CountingBar1 {
            inner: SimBar1::new(model.clone()),
            unquiesces: AtomicU32::new(0),
        });
        let m = model.clone();
        let build = if spec.thread_free {
            HostPlatform::without_threads
        } else {
            HostPlatform::with_time
        };
        let pv_platform = build(
            HostDevice {
                bar1: bar1.clone(),
                dma: pv_dma.clone(),
                doorbell: Some(Arc::new(move |off, val| m.uar_write32(off, val))),
                uar_pfn: DEFAULT_UAR_PFN,
                pump: Some(pump.platform_pump()),
            },
            spec.processors,
            spec.time.clone(),
        );
        world.set_interrupt_sink(node, Arc::new(PlatformSink(Arc::downgrade(&pv_platform))));
        pump.add_platform(pv_platform.clone());
        let resolver_platform = if spec.own_resolver_platform {
            let p = HostPlatform::with_time(
                HostDevice {
                    bar1: Arc::new(NoBar),
                    dma: pv_dma.clone(),
                    doorbell: None,
                    uar_pfn: 0,
                    pump: Some(pump.platform_pump()),
                },
                1,
                spec.time.clone(),
            );
            pump.add_platform(p.clone());
            p
        } else {
            pv_platform.clone()
        };
        let rp: Arc<dyn Platform> = resolver_platform.clone();
        let neighbours =
            Neighbours::new(rp, spec.resolver_entries, spec.resolve_bound_ns).expect("resolver");
        for &a in &spec.addresses {
            neighbours.add_address(a).expect("address");
        }
        let ipv4 = spec
            .addresses
            .iter()
            .find_map(|a| match a {
                IpAddr::V4(v) => Some(*v),
                IpAddr::V6(_) => None,
            })
            .unwrap_or(Ipv4Addr::UNSPECIFIED);
        let ipv6 = spec
            .addresses
            .iter()
            .find_map(|a| match a {
                IpAddr::V6(v) => Some(*v),
                IpAddr::V4(_) => None,
            })
            .unwrap_or(Ipv6Addr::UNSPECIFIED);
        let eth = EthHost {
            vnic: i,
            mp: None,
            ndis: HostNdis::new(world.vnic(i).dma()),
            pool: Arc::new(HostPool::default()),
            mac: world.vnic(i).mac(),
            ipv4,
            ipv6,
            neighbours,
            resolver_platform,
        };
        PairedVnic {
            at: PciLocation {
                bus: 3,
                device: i as u32,
                function: 0,
            },
            if_index: 11 + i as u32,
            luid: luid(i),
            eth_platform,
            eth_dma,
            eth,
            nic: None,
            pv_platform,
            pv_dma,
            bar1,
            model,
            mp: None,
            pv_links: Arc::new(Indications::default()),
            spec,
        }
    }

    /// The PVRDMA function's location: function 1 of the slot.
    pub fn at_rdma(&self) -> PciLocation {
        PciLocation {
            function: 1,
            ..self.at
        }
    }

    /// The vmxnet3 adapter (started).
    pub fn eth_mp(&self) -> &Arc<EthMiniport> {
        self.eth.mp.as_ref().expect("vmxnet3 started")
    }

    /// The NDK surface (vmxnet3 started).
    pub fn nic(&self) -> &Arc<NicNdk> {
        self.nic.as_ref().expect("vmxnet3 started")
    }

    /// The PVRDMA adapter (started).
    pub fn mp(&self) -> &Arc<Miniport> {
        self.mp.as_ref().expect("PVRDMA started")
    }

    /// The vmxnet3 adapter's InitializeEx (and the restart NDIS follows it with), then its
    /// registration in the slot table. The caller settles.
    pub fn start_nic(&mut self, registry: &PairRegistry) {
        let p: Arc<dyn NicPlatform> = self.eth_platform.clone();
        let eth = EthMiniport::initialize(
            p,
            &vmxnet3_resources(),
            &self.spec.eth,
            self.eth.pool.clone(),
        )
        .expect("vmxnet3 InitializeEx");
        let reported = eth.link();
        eth.set_sink(self.eth.ndis.clone(), reported);
        let rp: Arc<dyn Platform> = self.eth.resolver_platform.clone();
        let nic = NicNdk::new(
            rp,
            NetInterface {
                net_luid: self.luid,
                if_index: self.if_index,
                mac: eth.mac(),
                mtu: self.spec.mtu,
            },
            self.eth.neighbours.clone(),
            true,
            reported.connected,
            self.spec.grace_ns,
        )
        .expect("NicNdk");
        nic.set_events(Some(self.eth.ndis.clone()));
        eth.set_ndk(Some(nic.clone()));
        assert_eq!(eth.restart(), NDIS_STATUS_SUCCESS, "vmxnet3 restart");
        let as_nic: Arc<dyn PairedNic> = nic.clone();
        registry.join_nic(self.at, as_nic).expect("registered");
        self.eth.mp = Some(eth);
        self.nic = Some(nic);
    }

    /// The PVRDMA adapter's InitializeEx in paired mode, then its registration. The caller
    /// settles.
    pub fn start_rdma(&mut self, registry: &PairRegistry) {
        let cfg = MiniportConfig {
            halt_grace_ns: self.spec.grace_ns,
            paired: true,
            ..self.spec.miniport
        };
        let p: Arc<dyn Platform> = self.pv_platform.clone();
        let mp = Miniport::initialize_with(p, &pvrdma_resources(), &cfg)
            .unwrap_or_else(|st| panic!("PVRDMA InitializeEx: {st:#x}"));
        if let Some(e) = self.spec.engine {
            mp.set_engine_config(e);
        }
        let reported = mp.link();
        mp.set_status_sink(self.pv_links.clone(), reported);
        rdma::join(registry, self.at_rdma(), &mp).expect("registered");
        self.mp = Some(mp);
    }

    /// Parts and halts the vmxnet3 adapter (receive NBLs returned, paused, halted); returns
    /// its NDK surface (NDIS may still close an NDK_ADAPTER through it). The caller settles
    /// and checks [`PairedVnic::check_nic_released`].
    pub fn halt_nic(&mut self, registry: &PairRegistry) -> Arc<NicNdk> {
        let nic = self.nic.take().expect("vmxnet3 started");
        let as_nic: Arc<dyn PairedNic> = nic.clone();
        assert!(
            registry.leave_nic(self.at, &as_nic, &*self.eth.resolver_platform),
            "parted in time"
        );
        drop(as_nic);
        nic.halt();
        let eth = self.eth.mp.clone().expect("vmxnet3 started");
        eth.set_ndk(None);
        self.eth.ndis.hold.store(false, Ordering::SeqCst);
        self.eth.return_held();
        assert_eq!(eth.pause(), NDIS_STATUS_SUCCESS, "vmxnet3 pause");
        eth.halt();
        self.eth.mp = None;
        assert_eq!(
            Arc::strong_count(&eth),
            1,
            "vmxnet3 miniport still referenced"
        );
        drop(eth);
        assert_eq!(self.eth.pool.live(), 0, "receive NBLs leaked");
        nic
    }

    /// The PVRDMA adapter's Halt: parted from the vmxnet3 adapter, then halted. The caller
    /// settles.
    pub fn halt_rdma(&mut self, registry: &PairRegistry) {
        let mp = self.mp.take().expect("PVRDMA started");
        rdma::leave_and_halt(registry, self.at_rdma(), &mp);
        assert!(mp.device().is_none(), "Halt let go of the device");
    }

    /// What NDIS's work item would issue now, in order.
    pub fn pnp_events(&self) -> Vec<NET_PNP_EVENT_CODE> {
        let mut out = Vec::new();
        while let Some(e) = self.nic().next_ndk_pnp_event() {
            out.push(e);
        }
        out
    }

    /// OpenNDKAdapterHandler of the vmxnet3 adapter (what WskOpenNdkAdapter by this
    /// interface's IfIndex reaches).
    pub fn open(&self, version: NDK_VERSION) -> Result<*mut NDK_ADAPTER, NDIS_STATUS> {
        self.nic().open_ndk_adapter(version)
    }

    /// The GIDs bound in the PVRDMA model, sorted.
    pub fn bound_gids(&self) -> Vec<[u8; 16]> {
        let mut g: Vec<_> = self
            .model
            .with_core(|c| c.gids())
            .into_iter()
            .map(|(_, e)| e.gid)
            .collect();
        g.sort();
        g
    }

    /// The platforms' executors (PVRDMA, vmxnet3, and the resolver's if its own).
    pub fn executors(&self) -> Vec<Arc<pvrdma_host::HostExecutor>> {
        let mut v = vec![
            self.pv_platform.executor().clone(),
            self.eth_platform.executor().clone(),
        ];
        if self.spec.own_resolver_platform {
            v.push(self.eth.resolver_platform.executor().clone());
        }
        v
    }

    /// After both functions halted and the fabric stopped: the DPCs drained and the executors
    /// shut down, then no DMA region of either function left and the "NDIS" of the vmxnet3
    /// adapter clean (every send completed, every receive returned, no indication under a
    /// lock).
    pub fn shut_down(&self, pump: &Pump) {
        for ex in self.executors() {
            pump.wait_for("DPCs to drain", || ex.is_idle());
            ex.shutdown();
        }
        assert_eq!(self.pv_dma.live(), 0, "PVRDMA DMA regions leaked");
        assert_eq!(self.pv_dma.allocs(), self.pv_dma.frees());
        assert_eq!(self.eth_dma.live(), 0, "vmxnet3 DMA regions leaked");
        assert_eq!(self.eth_dma.allocs(), self.eth_dma.frees());
        let ndis = &self.eth.ndis;
        assert_eq!(
            ndis.under_lock.load(Ordering::SeqCst),
            0,
            "indication under a lock"
        );
        assert_eq!(ndis.tx_outstanding(), 0, "sent NBLs never completed");
        assert_eq!(ndis.held(), 0, "receive NBLs not returned");
        assert_eq!(self.eth.pool.live(), 0, "receive NBLs leaked");
    }
}
