//! The paired slot (issue 25 items 1–3): each host is a vNIC whose vmxnet3 function (the
//! Ethernet miniport, `ndis::ethernet`) carries the IP interface and registers NDK, served by
//! the PVRDMA function of the same slot (`ndis::miniport` in paired mode) through
//! `ndis::pair` (the `RdmaFunction` trait, the slot registry, `NicNdk`), over the sim's slot
//! model (one MAC, one fabric port, RoCE steered to PVRDMA: vmxnet3.md P1–P5).
//!
//! The test plays NDIS: it opens NDK by the vmxnet3 interface's IfIndex, issues the NDK PnP
//! events the adapter asks for, closes NDK_ADAPTERs when NDK is disabled; and the IP stack:
//! the vmxnet3 interface's addresses (IPv4 and IPv6) and neighbours are its resolver's.

mod common;
#[path = "common/vmx_ndis.rs"]
mod vmx_ndis;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use common::ndis::{at, decode_connections, decode_counters, statistics_buffer, v};
use common::ndk::{Adapter, Pump, QpSpec};
use common::vmx::platform_for;
use common::{DEFAULT_UAR_PFN, Mode, PlatformSink, SimBar1, SimDma, serial};
use pvrdma_host::{HostDevice, HostNicPlatform, HostPlatform};
use pvrdma_ndk::ndis::ethernet::{EthConfig, EthMiniport, EthSink};
use pvrdma_ndk::ndis::pair::{
    NdkEvents, NetInterface, NicNdk, PairRegistry, PairedNic, PciLocation, RdmaFunction,
};
use pvrdma_ndk::ndis::*;
use pvrdma_ndk::ndkpi::*;
use pvrdma_ndk::os::alloc::{AllocStats, stats};
use pvrdma_ndk::os::net::{AddressResolver, Mac, Neighbours};
use pvrdma_ndk::os::{
    DmaAllocator, DpcScheduler, InterruptHandler, NicPlatform, OsError, Platform, RegisterIo, Uar,
};
use pvrdma_sim::ObjectCounts;
use pvrdma_sim::world::{VnicConfig, World};
use vmx_ndis::HostPool;

/// Where the harness says the PVRDMA BARs are (BAR2 page 0 is the platform's UAR PFN).
fn pvrdma_resources() -> Resources {
    parse_resources(&[
        CM_PARTIAL_RESOURCE_DESCRIPTOR::memory(0xFD00_0000, 0x4000),
        CM_PARTIAL_RESOURCE_DESCRIPTOR::memory(0xFD10_0000, 0x100),
        CM_PARTIAL_RESOURCE_DESCRIPTOR::memory(DEFAULT_UAR_PFN << 12, 0x1000),
        CM_PARTIAL_RESOURCE_DESCRIPTOR::message_interrupt(0x60),
        CM_PARTIAL_RESOURCE_DESCRIPTOR::message_interrupt(0x61),
        CM_PARTIAL_RESOURCE_DESCRIPTOR::message_interrupt(0x62),
    ])
    .expect("resources")
}

fn vmxnet3_resources() -> Resources {
    parse_resources(&vmx_ndis::resource_list()).expect("resources")
}

/// BAR1 of the PVRDMA model, counting CTL = UNQUIESCE writes.
struct CountingBar1 {
    inner: Arc<SimBar1>,
    unquiesces: AtomicU32,
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

/// A register file for the resolver's platform (it needs timers and a clock only).
struct NoBar;
impl RegisterIo for NoBar {
    fn read32(&self, _off: u32) -> u32 {
        0
    }
    fn write32(&self, _off: u32, _val: u32) {}
}

/// What the vmxnet3 adapter's "NDIS" was told: link indications and NDK state changes.
#[derive(Default)]
struct EthNdis {
    links: Mutex<Vec<LinkState>>,
    ndk_changes: AtomicU32,
    frames: AtomicU32,
}

impl EthSink for EthNdis {
    fn send_complete(&self, _nbls: std::ptr::NonNull<NET_BUFFER_LIST>, _flags: u32) {
        panic!("the test sends no NBL");
    }
    fn indicate_receive(&self, _n: std::ptr::NonNull<NET_BUFFER_LIST>, _c: u32, _f: u32) {
        // The packet filter stays empty: vmxnet3 delivers nothing (RoCE goes to PVRDMA, P5).
        self.frames.fetch_add(1, Ordering::SeqCst);
    }
    fn link_state(&self, state: &LinkState) {
        self.links.lock().unwrap().push(*state);
    }
    fn pause_complete(&self) {}
    fn reset_needed(&self) {}
}

impl NdkEvents for EthNdis {
    fn ndk_state_changed(&self) {
        self.ndk_changes.fetch_add(1, Ordering::SeqCst);
    }
}

/// One vNIC: its two functions' platforms and, while started, their adapters.
struct Host {
    at: PciLocation,
    if_index: u32,
    luid: u64,
    mac: [u8; 6],
    ipv4: Ipv4Addr,
    ipv6: Ipv6Addr,
    eth_platform: Arc<HostNicPlatform>,
    eth_dma: Arc<SimDma>,
    pool: Arc<HostPool>,
    eth_ndis: Arc<EthNdis>,
    eth: Option<Arc<EthMiniport>>,
    nic: Option<Arc<NicNdk>>,
    resolver: Arc<Neighbours>,
    resolver_platform: Arc<HostPlatform>,
    pv_platform: Arc<HostPlatform>,
    pv_dma: Arc<SimDma>,
    bar1: Arc<CountingBar1>,
    model: Arc<pvrdma_sim::Device>,
    mp: Option<Arc<Miniport>>,
    pv_links: Arc<common::ndis::Indications>,
}

struct PairRig {
    world: Arc<World>,
    pump: Arc<Pump>,
    registry: Arc<PairRegistry>,
    hosts: Vec<Host>,
    baseline: AllocStats,
    _serial: MutexGuard<'static, ()>,
}

const GRACE_NS: u64 = 50_000_000;

impl PairRig {
    fn new(n: u8) -> PairRig {
        let guard = serial();
        let baseline = stats();
        let mut w = World::new(0x5EED);
        for i in 0..n {
            w.add_vnic(VnicConfig::paired(i)).expect("vNIC");
        }
        let world = Arc::new(w);
        let pump = Pump::new(world.clone(), Mode::Deterministic);
        let mut hosts = Vec::new();
        for i in 0..usize::from(n) {
            let (eth_platform, eth_dma) = platform_for(&world, i, 3, 2);
            pump.add_executor(eth_platform.executor().clone());
            let node = world.vnic(i).node().expect("a PVRDMA function");
            let model = world.node(node).device().clone();
            let pv_dma = SimDma::new(world.vnic(i).dma().clone());
            let bar1 = Arc::new(CountingBar1 {
                inner: SimBar1::new(model.clone()),
                unquiesces: AtomicU32::new(0),
            });
            let m = model.clone();
            let pv_platform = HostPlatform::new(
                HostDevice {
                    bar1: bar1.clone(),
                    dma: pv_dma.clone(),
                    doorbell: Some(Arc::new(move |off, val| m.uar_write32(off, val))),
                    uar_pfn: DEFAULT_UAR_PFN,
                    pump: Some(pump.platform_pump()),
                },
                2,
            );
            world.set_interrupt_sink(node, Arc::new(PlatformSink(Arc::downgrade(&pv_platform))));
            pump.add_platform(pv_platform.clone());
            let resolver_platform = HostPlatform::new(
                HostDevice {
                    bar1: Arc::new(NoBar),
                    dma: pv_dma.clone(),
                    doorbell: None,
                    uar_pfn: 0,
                    pump: Some(pump.platform_pump()),
                },
                1,
            );
            pump.add_platform(resolver_platform.clone());
            let rp: Arc<dyn Platform> = resolver_platform.clone();
            let resolver = Neighbours::new(rp, 16, 200_000_000).expect("resolver");
            let (ipv4, ipv6) = vmx_ndis::addrs(i);
            resolver.add_address(IpAddr::V4(ipv4)).unwrap();
            resolver.add_address(IpAddr::V6(ipv6)).unwrap();
            hosts.push(Host {
                at: PciLocation {
                    bus: 3,
                    device: i as u32,
                    function: 0,
                },
                if_index: 11 + i as u32,
                luid: (6 << 48) | (0x8000 + i as u64) << 24,
                mac: world.vnic(i).mac(),
                ipv4,
                ipv6,
                eth_platform,
                eth_dma,
                pool: Arc::new(HostPool::default()),
                eth_ndis: Arc::new(EthNdis::default()),
                eth: None,
                nic: None,
                resolver,
                resolver_platform,
                pv_platform,
                pv_dma,
                bar1,
                model,
                mp: None,
                pv_links: Arc::new(common::ndis::Indications::default()),
            });
        }
        // Every host knows every other's MACs (the IP stack's neighbour cache).
        for i in 0..hosts.len() {
            for j in 0..hosts.len() {
                if i != j {
                    let (mac, v4, v6) = (hosts[j].mac, hosts[j].ipv4, hosts[j].ipv6);
                    hosts[i]
                        .resolver
                        .set_neighbour(IpAddr::V4(v4), mac)
                        .unwrap();
                    hosts[i]
                        .resolver
                        .set_neighbour(IpAddr::V6(v6), mac)
                        .unwrap();
                }
            }
        }
        PairRig {
            world,
            pump,
            registry: Arc::new(PairRegistry::new()),
            hosts,
            baseline,
            _serial: guard,
        }
    }

    fn at_rdma(&self, i: usize) -> PciLocation {
        PciLocation {
            function: 1,
            ..self.hosts[i].at
        }
    }

    /// The vmxnet3 adapter's InitializeEx (and the restart NDIS follows it with), then its
    /// registration in the slot table.
    fn start_nic(&mut self, i: usize) {
        let h = &self.hosts[i];
        let p: Arc<dyn NicPlatform> = h.eth_platform.clone();
        let cfg = EthConfig {
            tx_ring: 64,
            rx_ring: 64,
            rx_buffers: 128,
            mac: None,
        };
        let eth = EthMiniport::initialize(p, &vmxnet3_resources(), &cfg, h.pool.clone())
            .expect("vmxnet3 InitializeEx");
        let reported = eth.link();
        eth.set_sink(h.eth_ndis.clone(), reported);
        let rp: Arc<dyn Platform> = h.resolver_platform.clone();
        let nic = NicNdk::new(
            rp,
            NetInterface {
                net_luid: h.luid,
                if_index: h.if_index,
                mac: eth.mac(),
                mtu: 1500,
            },
            h.resolver.clone(),
            true,
            reported.connected,
            GRACE_NS,
        )
        .expect("NicNdk");
        nic.set_events(Some(h.eth_ndis.clone()));
        eth.set_ndk(Some(nic.clone()));
        assert_eq!(eth.restart(), NDIS_STATUS_SUCCESS);
        let as_nic: Arc<dyn PairedNic> = nic.clone();
        self.registry.join_nic(h.at, as_nic).expect("registered");
        let h = &mut self.hosts[i];
        h.eth = Some(eth);
        h.nic = Some(nic);
        self.pump.settle();
    }

    /// The PVRDMA adapter's InitializeEx in paired mode, then its registration.
    fn start_rdma(&mut self, i: usize) {
        let mp = self.init_rdma(i);
        rdma::join(&self.registry, self.at_rdma(i), &mp).expect("registered");
        self.hosts[i].mp = Some(mp);
        self.pump.settle();
    }

    /// The PVRDMA adapter's InitializeEx in paired mode, not registered.
    fn init_rdma(&self, i: usize) -> Arc<Miniport> {
        let cfg = MiniportConfig {
            halt_grace_ns: GRACE_NS,
            paired: true,
            ..MiniportConfig::default()
        };
        let h = &self.hosts[i];
        let p: Arc<dyn Platform> = h.pv_platform.clone();
        let mp = Miniport::initialize_with(p, &pvrdma_resources(), &cfg).expect("InitializeEx");
        let reported = mp.link();
        mp.set_status_sink(h.pv_links.clone(), reported);
        mp
    }

    fn nic(&self, i: usize) -> &Arc<NicNdk> {
        self.hosts[i].nic.as_ref().expect("vmxnet3 started")
    }

    fn mp(&self, i: usize) -> &Arc<Miniport> {
        self.hosts[i].mp.as_ref().expect("PVRDMA started")
    }

    /// A run of the vmxnet3 adapter's work item: the join deferred to it, then the events
    /// it issues, in order.
    fn pnp_events(&self, i: usize) -> Vec<NET_PNP_EVENT_CODE> {
        self.nic(i).run_deferred();
        self.pump.settle();
        let mut out = Vec::new();
        while let Some(e) = self.nic(i).next_ndk_pnp_event() {
            out.push(e);
        }
        out
    }

    /// WskOpenNdkAdapter(IfIndex): NDIS finds the adapter that owns the interface and calls
    /// its OpenNDKAdapterHandler.
    fn open_by_if_index(&self, if_index: u32) -> Result<Adapter, NDIS_STATUS> {
        let (i, h) = self
            .hosts
            .iter()
            .enumerate()
            .find(|(_, h)| {
                h.nic
                    .as_ref()
                    .is_some_and(|n| n.interface().if_index == if_index)
            })
            .expect("an adapter owns the interface");
        let ptr = h.nic.as_ref().unwrap().open_ndk_adapter(v(2, 1))?;
        Ok(Adapter::from_raw(ptr, self.pump.clone(), i))
    }

    /// Parts and halts the vmxnet3 adapter; returns its NDK surface (NDIS may still close an
    /// NDK_ADAPTER through it).
    fn halt_nic(&mut self, i: usize) -> Arc<NicNdk> {
        let h = &mut self.hosts[i];
        let nic = h.nic.take().expect("started");
        let eth = h.eth.take().expect("started");
        let as_nic: Arc<dyn PairedNic> = nic.clone();
        assert!(
            self.registry
                .leave_nic(h.at, &as_nic, &*h.resolver_platform),
            "parted in time"
        );
        drop(as_nic);
        nic.halt();
        eth.set_ndk(None);
        assert_eq!(eth.pause(), NDIS_STATUS_SUCCESS);
        eth.halt();
        self.pump.settle();
        assert_eq!(
            Arc::strong_count(&eth),
            1,
            "vmxnet3 miniport still referenced"
        );
        assert_eq!(h.pool.live(), 0, "receive NBLs leaked");
        nic
    }

    fn halt_rdma(&mut self, i: usize) {
        let mp = self.hosts[i].mp.take().expect("started");
        rdma::leave_and_halt(&self.registry, self.at_rdma(i), &mp);
        self.pump.settle();
        assert!(mp.device().is_none(), "Halt let go of the device");
        // An NDK_ADAPTER NDIS has not closed yet keeps it (and its function) reachable.
        self.hosts[i].mp = None;
        drop(mp);
    }

    fn bound_gids(&self, i: usize) -> Vec<[u8; 16]> {
        let mut g: Vec<_> = self.hosts[i]
            .model
            .with_core(|c| c.gids())
            .into_iter()
            .map(|(_, e)| e.gid)
            .collect();
        g.sort();
        g
    }

    fn finish(mut self) {
        self.pump.settle();
        for i in 0..self.hosts.len() {
            if self.hosts[i].nic.is_some() {
                let nic = self.halt_nic(i);
                assert_eq!(Arc::strong_count(&nic), 1, "NicNdk still referenced");
            }
            if self.hosts[i].mp.is_some() {
                self.halt_rdma(i);
            }
        }
        let pump = self.pump.clone();
        pump.wait_for("the models to hold no object", || {
            self.hosts
                .iter()
                .all(|h| h.model.with_core(|c| c.object_counts()) == ObjectCounts::default())
        });
        pump.settle();
        assert_eq!(self.registry.occupied(), 0, "slot table empty");
        for h in &self.hosts {
            assert!(!h.model.with_core(|c| c.is_active()), "PVRDMA RESET");
            assert_eq!(h.eth_ndis.frames.load(Ordering::SeqCst), 0);
        }
        self.world.fabric().stop();
        for h in &self.hosts {
            for ex in [
                h.pv_platform.executor(),
                h.resolver_platform.executor(),
                h.eth_platform.executor(),
            ] {
                pump.wait_for("DPCs to drain", || ex.is_idle());
                ex.shutdown();
            }
            assert_eq!(h.pv_dma.live(), 0, "PVRDMA DMA regions leaked");
            assert_eq!(h.eth_dma.live(), 0, "vmxnet3 DMA regions leaked");
        }
        pump.clear_platforms();
        let hosts = std::mem::take(&mut self.hosts);
        drop(hosts);
        assert_eq!(stats(), self.baseline, "pool accounting not at baseline");
    }
}

fn v4_gid(ip: Ipv4Addr) -> [u8; 16] {
    ip.to_ipv6_mapped().octets()
}

/// Both start orders: NDK appears on the vmxnet3 adapter only, opened by its IfIndex; GIDs are
/// bound for its IPv4 and IPv6 addresses and follow address changes; the PVRDMA adapter has
/// no NDK of its own.
fn opened_by_the_vmxnet3_interface(nic_first: bool) {
    let mut rig = PairRig::new(1);
    if nic_first {
        rig.start_nic(0);
        // Alone: NDK registered but disabled (Enabled FALSE at InitializeEx, no event).
        assert!(!rig.nic(0).ndk_enabled());
        assert_eq!(rig.pnp_events(0), vec![]);
        assert_eq!(
            rig.open_by_if_index(11).err(),
            Some(NDIS_STATUS_ADAPTER_NOT_READY)
        );
        rig.start_rdma(0);
        // The PVRDMA InitializeEx recorded the join and kicked the work item.
        assert!(rig.nic(0).join_pending());
        assert!(
            rig.mp(0).interface().is_none(),
            "not attached on InitializeEx's stack"
        );
        assert_eq!(rig.pnp_events(0), vec![NetEventNDKEnable]);
        assert!(!rig.nic(0).join_pending());
    } else {
        rig.start_rdma(0);
        assert!(rig.mp(0).interface().is_none(), "no interface yet");
        rig.start_nic(0);
        // Joined by the vmxnet3 adapter's work item, not during its InitializeEx: the
        // attribute said Enabled FALSE, the work item's event enables NDK.
        assert!(!rig.nic(0).ndk_enabled());
        assert!(
            rig.mp(0).interface().is_none(),
            "not attached on InitializeEx's stack"
        );
        assert_eq!(rig.pnp_events(0), vec![NetEventNDKEnable]);
    }
    assert!(rig.registry.is_joined(rig.hosts[0].at));
    assert!(rig.nic(0).ndk_enabled());
    // The PVRDMA adapter registers no NDK: disabled, its own open refused, not enableable.
    assert!(!rig.mp(0).ndk_enabled());
    assert_eq!(
        rig.mp(0).open_ndk_adapter(v(2, 1)).err(),
        Some(NDIS_STATUS_ADAPTER_NOT_READY)
    );
    assert_eq!(
        rig.mp(0).set_oid(OID_NDK_SET_STATE, &[1]).status,
        NDIS_STATUS_NOT_SUPPORTED
    );
    // The interface attached to the RDMA function is the vmxnet3's.
    let iface = rig.mp(0).interface().expect("attached");
    assert_eq!(
        (iface.net_luid, iface.if_index, iface.mac, iface.mtu),
        (rig.hosts[0].luid, 11, rig.hosts[0].mac, 1500)
    );
    // Capabilities copied for the vmxnet3 adapter's attributes.
    let (caps, info, filled) = rig.nic(0).capabilities();
    assert!(filled);
    assert_eq!(caps.MaxQpCount, rig.mp(0).ndk_capabilities().MaxQpCount);
    assert!(caps.MaxQpCount > 0 && caps.MaxCqCount > 0);
    assert_eq!(info.MaxInitiatorQueueDepth, {
        let (_, i, _) = rig.nic(0).capabilities();
        i.MaxInitiatorQueueDepth
    });
    assert!(std::ptr::eq(
        rig.nic(0).capabilities_ptr(),
        rig.nic(0).capabilities_ptr()
    ));
    // GIDs: the vmxnet3 interface's IPv4 (v4-mapped) and IPv6 addresses, in the device.
    let h = &rig.hosts[0];
    let mut want = vec![v4_gid(h.ipv4), h.ipv6.octets()];
    want.sort();
    assert_eq!(rig.bound_gids(0), want);
    // Address changes follow: one added, one removed.
    let extra = Ipv4Addr::new(198, 18, 7, 1);
    h.resolver.add_address(IpAddr::V4(extra)).unwrap();
    rig.pump.settle();
    let mut want2 = vec![v4_gid(h.ipv4), h.ipv6.octets(), v4_gid(extra)];
    want2.sort();
    assert_eq!(rig.bound_gids(0), want2);
    h.resolver.remove_address(IpAddr::V6(h.ipv6));
    rig.pump.settle();
    let mut want3 = vec![v4_gid(h.ipv4), v4_gid(extra)];
    want3.sort();
    assert_eq!(rig.bound_gids(0), want3);
    // NDK opened by IfIndex, through the dispatch tables: a PD and a CQ.
    let a = rig.open_by_if_index(11).expect("WskOpenNdkAdapter(11)");
    let pd = a.create_pd().expect("NdkCreatePd");
    let cq = a.create_cq(16, None).expect("NdkCreateCq");
    assert_eq!(rig.nic(0).open_adapters(), 1);
    assert_eq!(rig.mp(0).open_adapters(), 1);
    // The NDK OIDs on the vmxnet3 adapter, answered by the function.
    let eth = rig.hosts[0].eth.clone().unwrap();
    let mut b = statistics_buffer();
    assert_eq!(
        eth.query_oid(OID_NDK_STATISTICS, &mut b).status,
        NDIS_STATUS_SUCCESS
    );
    assert_eq!(decode_counters(&b).ActiveConnection, 0);
    let mut l = vec![0u8; 0x10];
    l[..4].copy_from_slice(&[0x80, 1, 0x10, 0]);
    assert_eq!(
        eth.query_oid(OID_NDK_CONNECTIONS, &mut l),
        OidResult::done(0x10)
    );
    assert!(decode_connections(&l).is_empty());
    let mut list = vec![0u8; 4 * 64];
    let r = eth.query_oid(OID_GEN_SUPPORTED_LIST, &mut list);
    let oids: Vec<u32> = list[..r.bytes_done as usize]
        .chunks(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    for o in [
        OID_NDK_SET_STATE,
        OID_NDK_STATISTICS,
        OID_NDK_CONNECTIONS,
        OID_NDK_LOCAL_ENDPOINTS,
    ] {
        assert!(oids.contains(&o), "{o:#x} listed");
    }
    // OID_NDK_SET_STATE on the vmxnet3 adapter: disable, then enable, each announced.
    assert_eq!(eth.set_oid(OID_NDK_SET_STATE, &[0]), OidResult::done(1));
    assert_eq!(rig.pnp_events(0), vec![NetEventNDKDisable]);
    assert_eq!(
        rig.open_by_if_index(11).err(),
        Some(NDIS_STATUS_ADAPTER_NOT_READY)
    );
    assert_eq!(eth.set_oid(OID_NDK_SET_STATE, &[1]), OidResult::done(1));
    assert_eq!(rig.pnp_events(0), vec![NetEventNDKEnable]);
    assert!(rig.hosts[0].eth_ndis.ndk_changes.load(Ordering::SeqCst) >= 3);
    assert_eq!(cq.close(), STATUS_SUCCESS);
    assert_eq!(pd.close(), STATUS_SUCCESS);
    rig.nic(0).close_ndk_adapter(a.ptr);
    assert_eq!(rig.mp(0).open_adapters(), 0);
    drop(eth);
    rig.finish();
}

#[test]
fn ndk_is_opened_by_the_vmxnet3_if_index_vmxnet3_first() {
    opened_by_the_vmxnet3_interface(true);
}

#[test]
fn ndk_is_opened_by_the_vmxnet3_if_index_pvrdma_first() {
    opened_by_the_vmxnet3_interface(false);
}

/// Halt of either function first with NDK objects live: NDK on the vmxnet3 adapter goes
/// disabled (NetEventNDKDisable), the objects learn it (their CQ reports
/// STATUS_INTERNAL_ERROR), the consumer and NDIS close them, nothing is leaked; the function
/// that comes back re-pairs and NDK is enabled again.
fn halt_first(rdma_first: bool) {
    let mut rig = PairRig::new(1);
    rig.start_nic(0);
    rig.start_rdma(0);
    assert_eq!(rig.pnp_events(0), vec![NetEventNDKEnable]);
    let a = rig.open_by_if_index(11).expect("open");
    let cq = a.create_cq(16, None).expect("NdkCreateCq");
    cq.arm(NDK_CQ_NOTIFY_ANY);
    let nic;
    if rdma_first {
        rig.halt_rdma(0);
        nic = rig.nic(0).clone();
        assert!(!nic.has_function());
    } else {
        let mp = rig.mp(0).clone();
        nic = rig.halt_nic(0);
        // The function survives without an interface: engine stopped, GIDs unbound.
        assert!(mp.interface().is_none());
        assert!(mp.connection_engine().is_none());
        assert_eq!(rig.bound_gids(0), Vec::<[u8; 16]>::new());
    }
    rig.pump.settle();
    assert_eq!(cq.notifications(), vec![STATUS_INTERNAL_ERROR]);
    if rdma_first {
        assert_eq!(rig.pnp_events(0), vec![NetEventNDKDisable]);
        assert!(!rig.nic(0).ndk_enabled());
        assert_eq!(
            rig.open_by_if_index(11).err(),
            Some(NDIS_STATUS_ADAPTER_NOT_READY)
        );
    }
    // The consumer closes its CQ; NDIS's close of the adapter still reaches its function.
    assert_eq!(cq.close(), STATUS_SUCCESS);
    nic.close_ndk_adapter(a.ptr);
    assert_eq!(nic.open_adapters(), 0);
    drop(nic);
    rig.pump.settle();
    // The function comes back: paired again, NDK enabled, objects can be made.
    if rdma_first {
        rig.start_rdma(0);
        assert_eq!(rig.pnp_events(0), vec![NetEventNDKEnable]);
    } else {
        rig.start_nic(0);
        assert_eq!(rig.pnp_events(0), vec![NetEventNDKEnable]);
    }
    assert!(rig.registry.is_joined(rig.hosts[0].at));
    let h = &rig.hosts[0];
    let mut want = vec![v4_gid(h.ipv4), h.ipv6.octets()];
    want.sort();
    assert_eq!(rig.bound_gids(0), want);
    let a = rig.open_by_if_index(11).expect("open after the return");
    let pd = a.create_pd().expect("NdkCreatePd");
    assert_eq!(pd.close(), STATUS_SUCCESS);
    rig.nic(0).close_ndk_adapter(a.ptr);
    rig.finish();
}

#[test]
fn pvrdma_halts_first_with_live_ndk_objects() {
    halt_first(true);
}

#[test]
fn vmxnet3_halts_first_with_live_ndk_objects() {
    halt_first(false);
}

/// vmxnet3 surprise removal: the NDK objects are failed before NDIS halts the adapter.
#[test]
fn vmxnet3_surprise_removal_fails_the_ndk_objects() {
    let mut rig = PairRig::new(1);
    rig.start_rdma(0);
    rig.start_nic(0);
    let _ = rig.pnp_events(0);
    let a = rig.open_by_if_index(11).expect("open");
    let cq = a.create_cq(16, None).expect("NdkCreateCq");
    cq.arm(NDK_CQ_NOTIFY_ANY);
    rig.hosts[0]
        .eth
        .as_ref()
        .unwrap()
        .pnp_event(NdisDevicePnPEventSurpriseRemoved);
    rig.pump.settle();
    assert_eq!(cq.notifications(), vec![STATUS_INTERNAL_ERROR]);
    assert_eq!(cq.close(), STATUS_SUCCESS);
    rig.nic(0).close_ndk_adapter(a.ptr);
    rig.finish();
}

/// Link down on the vNIC: the vmxnet3 adapter indicates it, the RDMA function reports its
/// port down; link up: CTL = UNQUIESCE on the PVRDMA function, port active again; the
/// consumer closes the connection it had and connects again, and traffic flows.
#[test]
fn link_down_and_up_with_the_consumer_reconnecting() {
    let mut rig = PairRig::new(2);
    for i in 0..2 {
        rig.start_nic(i);
        rig.start_rdma(i);
        assert_eq!(rig.pnp_events(i), vec![NetEventNDKEnable]);
    }
    let (ip0, ip1) = (IpAddr::V4(rig.hosts[0].ipv4), IpAddr::V4(rig.hosts[1].ipv4));
    let a0 = rig.open_by_if_index(11).unwrap();
    let a1 = rig.open_by_if_index(12).unwrap();
    let (pd0, pd1) = (a0.create_pd().unwrap(), a1.create_pd().unwrap());
    let (cq0, cq1) = (
        a0.create_cq(64, None).unwrap(),
        a1.create_cq(64, None).unwrap(),
    );
    let listener = a1.create_listener().unwrap();
    assert_eq!(listener.listen(at(ip1, 445)), STATUS_SUCCESS);
    let connect_and_ping = |ctx: usize| {
        let q0 = pd0.create_qp(&cq0, &cq0, QpSpec::new(ctx)).unwrap();
        let q1 = pd1.create_qp(&cq1, &cq1, QpSpec::new(ctx + 1)).unwrap();
        let client = a0.create_connector().unwrap();
        let c = client.connect_raw(&q0, at(ip0, 0), at(ip1, 445), 4, 4, &[]);
        let server = listener.next_incoming();
        let acc = server.accept_raw(&q1, 4, 4, &[]);
        assert_eq!(c.wait(), STATUS_SUCCESS, "NdkConnect");
        assert_eq!(client.complete_connect(), STATUS_SUCCESS);
        assert_eq!(acc.wait(), STATUS_SUCCESS, "NdkAccept");
        // A zero-length SEND both ways over the connection.
        assert_eq!(q1.receive(0x51, &[]), STATUS_SUCCESS);
        assert_eq!(q0.send(0x50, &[], 0), STATUS_SUCCESS);
        let r = cq0.wait_results(1);
        assert_eq!(
            (r[0].Status, r[0].RequestContext as usize),
            (STATUS_SUCCESS, 0x50)
        );
        let r = cq1.wait_results(1);
        assert_eq!(
            (r[0].Status, r[0].RequestContext as usize),
            (STATUS_SUCCESS, 0x51)
        );
        (q0, q1, client, server)
    };
    let (q0, q1, client, server) = connect_and_ping(0x100);
    assert!(rig.mp(0).link().connected);
    let unq = rig.hosts[0].bar1.unquiesces.load(Ordering::SeqCst);
    let before = rig.hosts[0].eth_ndis.links.lock().unwrap().len();

    rig.world.set_vnic_link(0, false);
    rig.pump.settle();
    let links = rig.hosts[0].eth_ndis.links.lock().unwrap().clone();
    assert_eq!(links.len(), before + 1);
    assert!(!links[before].connected, "vmxnet3 indicated the link down");
    assert!(!rig.nic(0).link_up());
    assert!(
        !rig.mp(0).link().connected,
        "the RDMA function's port is down"
    );
    assert_eq!(
        rig.hosts[0].pv_links.take().last().map(|l| l.connected),
        Some(false)
    );
    // The consumer gives up the connection (its peer never hears: the link is down).
    assert_eq!(client.close(), STATUS_SUCCESS);
    assert_eq!(server.close(), STATUS_SUCCESS);
    assert_eq!(q0.close(), STATUS_SUCCESS);
    assert_eq!(q1.close(), STATUS_SUCCESS);

    rig.world.set_vnic_link(0, true);
    rig.pump.settle();
    assert!(rig.nic(0).link_up());
    assert_eq!(
        rig.hosts[0].bar1.unquiesces.load(Ordering::SeqCst),
        unq + 1,
        "one UNQUIESCE at link up"
    );
    assert_eq!(rig.mp(0).unquiesce_failures(), 0);
    assert!(rig.mp(0).link().connected, "port active again");
    // The consumer connects again over the same interfaces: traffic flows.
    let (q0, q1, client, server) = connect_and_ping(0x200);
    let d = client.disconnect_raw();
    rig.pump.wait_for("the server's DisconnectEvent", || {
        server.disconnects.count() == 1
    });
    assert_eq!(server.disconnect(), STATUS_SUCCESS);
    assert_eq!(d.wait(), STATUS_SUCCESS);
    for st in [client.close(), server.close(), q0.close(), q1.close()] {
        assert_eq!(st, STATUS_SUCCESS);
    }
    assert_eq!(listener.close(), STATUS_SUCCESS);
    for st in [cq0.close(), cq1.close(), pd0.close(), pd1.close()] {
        assert_eq!(st, STATUS_SUCCESS);
    }
    rig.nic(0).close_ndk_adapter(a0.ptr);
    rig.nic(1).close_ndk_adapter(a1.ptr);
    rig.finish();
}

/// The slot table: a second function of a kind is refused; functions of different slots
/// never join; leaving an unknown slot is harmless.
#[test]
fn the_table_joins_only_functions_of_one_slot() {
    let mut rig = PairRig::new(2);
    rig.start_nic(0);
    // Host 1's PVRDMA at bus 3 device 1: not host 0's slot.
    rig.start_rdma(1);
    assert!(!rig.registry.is_joined(rig.hosts[0].at));
    assert!(!rig.registry.is_joined(rig.hosts[1].at));
    assert!(!rig.nic(0).has_function());
    assert!(rig.mp(1).interface().is_none());
    let f: Arc<dyn pvrdma_ndk::ndis::pair::RdmaFunction> = rig.mp(1).clone();
    assert_eq!(
        rig.registry.join_rdma(rig.at_rdma(1), f.clone()),
        Err(pvrdma_ndk::ndis::pair::registry::PairError::Taken)
    );
    drop(f);
    rig.start_nic(1);
    assert!(rig.registry.is_joined(rig.hosts[1].at));
    assert_eq!(rig.pnp_events(1), vec![NetEventNDKEnable]);
    assert_eq!(rig.pnp_events(0), vec![]);
    rig.finish();
}

/// A Halt before the vmxnet3 adapter's work item ran the join (the second InitializeEx only
/// recorded it): the join is cancelled, the run that follows finds nothing to do and
/// announces nothing; the function that comes back joins on the next run.
fn halt_before_the_join_runs(rdma_halts: bool) {
    let mut rig = PairRig::new(1);
    rig.start_nic(0);
    let kicks = rig.hosts[0].eth_ndis.ndk_changes.load(Ordering::SeqCst);
    rig.start_rdma(0);
    // Recorded and the work item kicked; nothing attached yet.
    assert!(rig.registry.is_joined(rig.hosts[0].at));
    assert!(rig.nic(0).join_pending());
    assert_eq!(
        rig.hosts[0].eth_ndis.ndk_changes.load(Ordering::SeqCst),
        kicks + 1
    );
    assert!(rig.mp(0).interface().is_none());
    assert!(rig.mp(0).connection_engine().is_none());
    assert_eq!(rig.bound_gids(0), Vec::<[u8; 16]>::new());
    if rdma_halts {
        rig.halt_rdma(0);
        assert!(!rig.nic(0).join_pending(), "the Halt cancelled the join");
        // The work item's run after the Halt: no join, no event.
        assert_eq!(rig.pnp_events(0), vec![]);
        assert!(!rig.nic(0).has_function());
        assert!(!rig.nic(0).ndk_enabled());
        assert_eq!(
            rig.open_by_if_index(11).err(),
            Some(NDIS_STATUS_ADAPTER_NOT_READY)
        );
        // The function comes back: joined by the next run.
        rig.start_rdma(0);
        assert_eq!(rig.pnp_events(0), vec![NetEventNDKEnable]);
        let h = &rig.hosts[0];
        let mut want = vec![v4_gid(h.ipv4), h.ipv6.octets()];
        want.sort();
        assert_eq!(rig.bound_gids(0), want);
    } else {
        let mp = rig.mp(0).clone();
        let nic = rig.halt_nic(0);
        assert!(!nic.join_pending(), "the Halt cancelled the join");
        // A run still queued at the Halt (PnpWorker::free waits for it): nothing to do.
        assert!(!nic.run_deferred());
        assert_eq!(nic.next_ndk_pnp_event(), None);
        assert!(mp.interface().is_none());
        assert!(mp.connection_engine().is_none());
        assert_eq!(rig.bound_gids(0), Vec::<[u8; 16]>::new());
        drop(mp);
        assert_eq!(Arc::strong_count(&nic), 1, "NicNdk still referenced");
    }
    rig.finish();
}

#[test]
fn a_pvrdma_halt_before_the_join_runs_cancels_it() {
    halt_before_the_join_runs(true);
}

#[test]
fn a_vmxnet3_halt_before_the_join_runs_cancels_it() {
    halt_before_the_join_runs(false);
}

/// The PVRDMA function, with an attach that waits at a gate the test opens: the work item's
/// join is held in flight while a Halt parts the pair. Records the calls the join and the
/// parting make.
struct Gated {
    inner: Arc<Miniport>,
    open: Mutex<bool>,
    opened: Condvar,
    log: Mutex<Vec<&'static str>>,
}

impl Gated {
    fn new(inner: Arc<Miniport>) -> Arc<Gated> {
        Arc::new(Gated {
            inner,
            open: Mutex::new(false),
            opened: Condvar::new(),
            log: Mutex::new(Vec::new()),
        })
    }

    fn open_gate(&self) {
        *self.open.lock().unwrap() = true;
        self.opened.notify_all();
    }

    fn log(&self) -> Vec<&'static str> {
        self.log.lock().unwrap().clone()
    }
}

impl RdmaFunction for Gated {
    fn open_ndk(
        &self,
        p: &NDIS_OPEN_NDK_ADAPTER_PARAMETERS,
    ) -> Result<*mut NDK_ADAPTER, NDIS_STATUS> {
        self.inner.open_ndk(p)
    }
    fn close_ndk(&self, adapter: *mut NDK_ADAPTER) {
        RdmaFunction::close_ndk(&*self.inner, adapter);
    }
    fn capabilities(&self) -> (NDIS_NDK_CAPABILITIES, NDK_ADAPTER_INFO) {
        self.inner.capabilities()
    }
    fn statistics(&self) -> NDIS_NDK_PERFORMANCE_COUNTERS {
        self.inner.statistics()
    }
    fn connections(&self, buf: &mut [u8]) -> OidResult {
        self.inner.connections(buf)
    }
    fn local_endpoints(&self, buf: &mut [u8]) -> OidResult {
        self.inner.local_endpoints(buf)
    }
    fn attach_interface(
        &self,
        iface: NetInterface,
        resolver: Arc<dyn AddressResolver>,
    ) -> Result<(), NDIS_STATUS> {
        self.log.lock().unwrap().push("attach");
        let mut open = self.open.lock().unwrap();
        while !*open {
            open = self.opened.wait(open).unwrap();
        }
        drop(open);
        let r = self.inner.attach_interface(iface, resolver);
        self.log.lock().unwrap().push("attached");
        r
    }
    fn detach_interface(&self) {
        self.log.lock().unwrap().push("detach");
        self.inner.detach_interface();
    }
    fn link_changed(&self, up: bool) {
        self.inner.link_changed(up);
    }
    fn mac_changed(&self, mac: Mac) {
        self.inner.mac_changed(mac);
    }
    fn device_failed(&self) {
        self.inner.device_failed();
    }
}

/// The vmxnet3 adapter's OS services with its waits counted; `give_up` makes every wait
/// return at once with the condition's value, as one that timed out would.
struct CountedWaits {
    inner: Arc<HostPlatform>,
    waits: AtomicU32,
    give_up: AtomicBool,
}

impl Platform for CountedWaits {
    fn dma(&self) -> &Arc<dyn DmaAllocator> {
        self.inner.dma()
    }
    fn bar1(&self) -> &dyn RegisterIo {
        self.inner.bar1()
    }
    fn map_uar(&self) -> Result<Uar, OsError> {
        self.inner.map_uar()
    }
    fn uar_pfn(&self) -> u64 {
        self.inner.uar_pfn()
    }
    fn scheduler(&self) -> &Arc<dyn DpcScheduler> {
        self.inner.scheduler()
    }
    fn now_ns(&self) -> u64 {
        self.inner.now_ns()
    }
    fn connect_interrupt(&self, handler: Arc<dyn InterruptHandler>) -> Result<(), OsError> {
        self.inner.connect_interrupt(handler)
    }
    fn disconnect_interrupt(&self) {
        self.inner.disconnect_interrupt();
    }
    fn wait_until(&self, cond: &dyn Fn() -> bool, timeout_ns: u64) -> bool {
        self.waits.fetch_add(1, Ordering::SeqCst);
        if self.give_up.load(Ordering::SeqCst) {
            return cond();
        }
        self.inner.wait_until(cond, timeout_ns)
    }
}

/// A PVRDMA Halt while the vmxnet3 adapter's work item is attaching the interface (the
/// connection engine starting): the parting waits for the join to finish, then undoes it
/// (`give_up` false); or, when that wait times out, leaves the undoing to the work item,
/// which then detaches instead of offering NDK (`give_up` true). Either way NDK is never
/// offered without its function and nothing is leaked.
fn halt_during_the_join(give_up: bool) {
    let rig = PairRig::new(1);
    let h = &rig.hosts[0];
    let waits = Arc::new(CountedWaits {
        inner: h.resolver_platform.clone(),
        waits: AtomicU32::new(0),
        give_up: AtomicBool::new(give_up),
    });
    let wp: Arc<dyn Platform> = waits.clone();
    let nic = NicNdk::new(
        wp,
        NetInterface {
            net_luid: h.luid,
            if_index: h.if_index,
            mac: h.mac,
            mtu: 1500,
        },
        h.resolver.clone(),
        true,
        true,
        GRACE_NS,
    )
    .expect("NicNdk");
    nic.set_events(Some(h.eth_ndis.clone()));
    let as_nic: Arc<dyn PairedNic> = nic.clone();
    rig.registry
        .join_nic(h.at, as_nic.clone())
        .expect("registered");
    let mp = rig.init_rdma(0);
    let gated = Gated::new(mp.clone());
    let f: Arc<dyn RdmaFunction> = gated.clone();
    rig.registry
        .join_rdma(rig.at_rdma(0), f.clone())
        .expect("registered");
    assert!(nic.join_pending());
    // The work item, on its own thread: stopped at the gate inside the attach.
    let worker = {
        let nic = nic.clone();
        std::thread::spawn(move || nic.run_deferred())
    };
    rig.pump
        .wait_for("the join to reach the attach", || gated.log() == ["attach"]);
    // The PVRDMA Halt parts the pair meanwhile.
    let halt = {
        let (registry, at, f, p) = (
            rig.registry.clone(),
            rig.at_rdma(0),
            f.clone(),
            h.resolver_platform.clone(),
        );
        std::thread::spawn(move || registry.leave_rdma(at, &f, &*p))
    };
    rig.pump.wait_for("the parting to wait for the join", || {
        waits.waits.load(Ordering::SeqCst) >= 1
    });
    if give_up {
        // It gave up: returned with the join still in flight, nothing undone by it.
        assert!(
            halt.join().expect("the Halt's thread"),
            "the slot went idle"
        );
        assert_eq!(gated.log(), ["attach"]);
        gated.open_gate();
        assert!(!worker.join().expect("the work item"), "NDK not offered");
    } else {
        // Still waiting: nothing detached under the attach.
        assert_eq!(gated.log(), ["attach"]);
        gated.open_gate();
        assert!(
            worker.join().expect("the work item"),
            "the join offered NDK"
        );
        assert!(halt.join().expect("the Halt's thread"), "parted in time");
    }
    // Attached, then detached (by the parting after the join, or by the join itself).
    assert_eq!(gated.log(), ["attach", "attached", "detach"]);
    assert!(!nic.has_function());
    assert!(!nic.ndk_enabled());
    assert!(!nic.join_pending());
    // NDIS never heard an enable: nothing to announce.
    assert_eq!(nic.next_ndk_pnp_event(), None);
    assert!(mp.interface().is_none());
    assert!(mp.connection_engine().is_none());
    assert_eq!(rig.bound_gids(0), Vec::<[u8; 16]>::new());
    // Then the PVRDMA adapter halts and the vmxnet3 adapter leaves.
    drop(f);
    drop(gated);
    mp.halt();
    drop(mp);
    nic.halt();
    assert!(rig.registry.leave_nic(h.at, &as_nic, &*h.resolver_platform));
    drop(as_nic);
    assert_eq!(Arc::strong_count(&nic), 1, "NicNdk still referenced");
    drop(nic);
    rig.finish();
}

#[test]
fn a_pvrdma_halt_during_the_join_waits_for_it() {
    halt_during_the_join(false);
}

#[test]
fn a_pvrdma_halt_giving_up_on_the_join_leaves_the_undoing_to_it() {
    halt_during_the_join(true);
}
