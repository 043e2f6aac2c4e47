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

use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard};

use common::ndis::{at, decode_connections, decode_counters, statistics_buffer, v};
use common::ndk::{Adapter, Pump, QpSpec};
use common::pair::{PairedVnic, VnicSpec};
use common::{Mode, serial};
use pvrdma_ndk::ndis::pair::{NicNdk, PairRegistry, PciLocation};
use pvrdma_ndk::ndis::*;
use pvrdma_ndk::ndkpi::*;
use pvrdma_ndk::os::alloc::{AllocStats, stats};
use pvrdma_sim::ObjectCounts;
use pvrdma_sim::world::{VnicConfig, World};

/// The vNICs (`common::pair`) and the driver-global slot table.
struct PairRig {
    world: Arc<World>,
    pump: Arc<Pump>,
    registry: Arc<PairRegistry>,
    hosts: Vec<PairedVnic>,
    baseline: AllocStats,
    _serial: MutexGuard<'static, ()>,
}

impl PairRig {
    /// `n` vNICs, neither function started; each interface holds 198.18.0.(i+1) and
    /// 2001:2::(i+1) and knows every other host's MAC (the IP stack's neighbour cache).
    fn new(n: u8) -> PairRig {
        let guard = serial();
        let baseline = stats();
        let mut w = World::new(0x5EED);
        for i in 0..n {
            w.add_vnic(VnicConfig::paired(i)).expect("vNIC");
        }
        let world = Arc::new(w);
        let pump = Pump::new(world.clone(), Mode::Deterministic);
        let hosts: Vec<PairedVnic> = (0..usize::from(n))
            .map(|i| {
                let (ipv4, ipv6) = common::vmx_ndis::addrs(i);
                let spec = VnicSpec::new(vec![IpAddr::V4(ipv4), IpAddr::V6(ipv6)]);
                PairedVnic::new(&world, i, &pump, spec)
            })
            .collect();
        for h in &hosts {
            for o in hosts.iter().filter(|o| o.at != h.at) {
                let r = &h.eth.neighbours;
                r.set_neighbour(IpAddr::V4(o.eth.ipv4), o.eth.mac).unwrap();
                r.set_neighbour(IpAddr::V6(o.eth.ipv6), o.eth.mac).unwrap();
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
        self.hosts[i].at_rdma()
    }

    /// The vmxnet3 adapter's InitializeEx, restart and registration in the slot table.
    fn start_nic(&mut self, i: usize) {
        self.hosts[i].start_nic(&self.registry);
        self.pump.settle();
    }

    /// The PVRDMA adapter's InitializeEx in paired mode, then its registration.
    fn start_rdma(&mut self, i: usize) {
        self.hosts[i].start_rdma(&self.registry);
        self.pump.settle();
    }

    fn nic(&self, i: usize) -> &Arc<NicNdk> {
        self.hosts[i].nic()
    }

    fn mp(&self, i: usize) -> &Arc<Miniport> {
        self.hosts[i].mp()
    }

    /// What NDIS's work item would issue now, in order.
    fn pnp_events(&self, i: usize) -> Vec<NET_PNP_EVENT_CODE> {
        self.hosts[i].pnp_events()
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
        let ptr = h.open(v(2, 1))?;
        Ok(Adapter::from_raw(ptr, self.pump.clone(), i))
    }

    /// Parts and halts the vmxnet3 adapter; returns its NDK surface (NDIS may still close an
    /// NDK_ADAPTER through it).
    fn halt_nic(&mut self, i: usize) -> Arc<NicNdk> {
        let nic = self.hosts[i].halt_nic(&self.registry);
        self.pump.settle();
        nic
    }

    fn halt_rdma(&mut self, i: usize) {
        self.hosts[i].halt_rdma(&self.registry);
        self.pump.settle();
    }

    fn bound_gids(&self, i: usize) -> Vec<[u8; 16]> {
        self.hosts[i].bound_gids()
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
            // The packet filter stays empty: vmxnet3 delivers nothing (RoCE goes to PVRDMA, P5).
            assert_eq!(h.eth.ndis.seen.lock().unwrap().frames.len(), 0);
        }
        self.world.fabric().stop();
        for h in &self.hosts {
            h.shut_down(&pump);
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
        assert_eq!(rig.pnp_events(0), vec![NetEventNDKEnable]);
    } else {
        rig.start_rdma(0);
        assert!(rig.mp(0).interface().is_none(), "no interface yet");
        rig.start_nic(0);
        // Joined during InitializeEx: the attribute would say Enabled TRUE; the event that
        // follows tells NDIS the same.
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
        (rig.hosts[0].luid, 11, rig.hosts[0].eth.mac, 1500)
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
    let h = &rig.hosts[0].eth;
    let mut want = vec![v4_gid(h.ipv4), h.ipv6.octets()];
    want.sort();
    assert_eq!(rig.bound_gids(0), want);
    // Address changes follow: one added, one removed.
    let extra = Ipv4Addr::new(198, 18, 7, 1);
    h.neighbours.add_address(IpAddr::V4(extra)).unwrap();
    rig.pump.settle();
    let mut want2 = vec![v4_gid(h.ipv4), h.ipv6.octets(), v4_gid(extra)];
    want2.sort();
    assert_eq!(rig.bound_gids(0), want2);
    h.neighbours.remove_address(IpAddr::V6(h.ipv6));
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
    let eth = rig.hosts[0].eth_mp().clone();
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
    assert!(rig.hosts[0].eth.ndis.ndk_changes.load(Ordering::SeqCst) >= 3);
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
    let h = &rig.hosts[0].eth;
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
        .eth_mp()
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
    let (ip0, ip1) = (
        IpAddr::V4(rig.hosts[0].eth.ipv4),
        IpAddr::V4(rig.hosts[1].eth.ipv4),
    );
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
    let unq = rig.hosts[0].bar1.unquiesces();
    let before = rig.hosts[0].eth.ndis.seen.lock().unwrap().links.len();

    rig.world.set_vnic_link(0, false);
    rig.pump.settle();
    let links = rig.hosts[0].eth.ndis.seen.lock().unwrap().links.clone();
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
        rig.hosts[0].bar1.unquiesces(),
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
