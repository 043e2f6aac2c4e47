//! The NDK consumer kit on paired hosts (issue 25, "Done when"), where `tests/ndis_pair.rs`
//! does not already show it: each host is a paired vNIC (`ClusterConfig::paired`, the kit's
//! default: the vmxnet3 adapter carries the interface and registers NDK, the PVRDMA adapter
//! serves it), the consumer's adapter opened through the vmxnet3 adapter, neighbours resolved
//! by the hosts' IP stacks over vmxnet3 (ARP and neighbour discovery).
//!
//! - GIDs bound for the interface's IPv4 and IPv6 addresses, following address changes, and
//!   connections made over an address added later, both families.
//! - Link down and up on a vNIC with connections of both families and a request in flight:
//!   the consumer sees the failure, closes, and connects again once the link is back.
//! - Surprise removal of either function with live NDK objects (PD, CQs, MR, connected QPs,
//!   listener, connector): the objects learn it, the consumer closes them, NDIS closes the
//!   adapter, and nothing is left.
//!
//! - The rest of the kit's API on paired hosts: `Cluster::connect`, `cm_connect`, `wire`.
//!
//! Virtual time (but the kit API's cases): the CM's and the transport's waits cost no wall
//! time.

mod common;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use common::Mode;
use common::ndk::{
    Cluster, ClusterConfig, Connector, Cq, Listener, Pd, Qp, QpSpec, cm_connect, sa, wire,
};
use pvrdma_ndk::ndis::*;
use pvrdma_ndk::ndkpi::*;

fn gid(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
        IpAddr::V6(a) => a.octets(),
    }
}

fn gids(ips: &[IpAddr]) -> Vec<[u8; 16]> {
    let mut g: Vec<_> = ips.iter().map(|&ip| gid(ip)).collect();
    g.sort();
    g
}

const V4: [IpAddr; 2] = [
    IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1)),
    IpAddr::V4(Ipv4Addr::new(198, 18, 0, 2)),
];
const V6: [IpAddr; 2] = [
    IpAddr::V6(Ipv6Addr::new(0x2001, 2, 0, 0, 0, 0, 0, 1)),
    IpAddr::V6(Ipv6Addr::new(0x2001, 2, 0, 0, 0, 0, 0, 2)),
];

/// Two paired hosts, each interface holding an IPv4 and an IPv6 address (198.18.0.i+1,
/// 2001:2::i+1), in virtual time.
fn cluster() -> Cluster {
    Cluster::with(ClusterConfig {
        benchmark_addresses: true,
        ..ClusterConfig::virtual_time(Mode::Deterministic, 2)
    })
}

/// Each host's PD and CQ.
struct Side {
    pd: Pd,
    cq: Cq,
}

impl Side {
    fn new(c: &Cluster, i: usize) -> Side {
        let pd = c.adapter(i).create_pd().expect("NdkCreatePd");
        let cq = c.adapter(i).create_cq(64, None).expect("NdkCreateCq");
        Side { pd, cq }
    }

    fn close(self) {
        assert_eq!(self.cq.close(), STATUS_SUCCESS);
        assert_eq!(self.pd.close(), STATUS_SUCCESS);
    }
}

/// One connection made by the consumer: host 0's QP to a listener of host 1's.
struct Conn {
    q0: Qp,
    q1: Qp,
    client: Connector,
    server: Connector,
    listener: Listener,
}

/// NdkListen on host 1 at `to`, NdkConnect from host 0's `from`, NdkAccept,
/// NdkCompleteConnect; checks both ends' addresses, then a zero-length SEND from host 0.
fn connect(c: &Cluster, s: &[Side; 2], from: IpAddr, to: IpAddr, ctx: usize) -> Conn {
    let listener = c.adapter(1).create_listener().expect("NdkCreateListener");
    assert_eq!(
        listener.listen(sa(to, 0)),
        STATUS_SUCCESS,
        "NdkListen on {to}"
    );
    let at = listener.local_address().expect("listener address");
    let q0 = s[0]
        .pd
        .create_qp(&s[0].cq, &s[0].cq, QpSpec::new(ctx))
        .unwrap();
    let q1 = s[1]
        .pd
        .create_qp(&s[1].cq, &s[1].cq, QpSpec::new(ctx + 1))
        .unwrap();
    let client = c.adapter(0).create_connector().unwrap();
    let conn = client.connect_raw(&q0, sa(from, 0), at, 4, 4, &[]);
    let server = listener.next_incoming();
    let accept = server.accept_raw(&q1, 4, 4, &[]);
    assert_eq!(conn.wait(), STATUS_SUCCESS, "NdkConnect {from} → {to}");
    assert_eq!(client.complete_connect(), STATUS_SUCCESS);
    assert_eq!(accept.wait(), STATUS_SUCCESS, "NdkAccept");
    assert_eq!(client.peer_address().unwrap(), at);
    assert_eq!(client.local_address().unwrap().ip(), from);
    assert_eq!(server.local_address().unwrap(), at);
    assert_eq!(server.peer_address().unwrap().ip(), from);
    ping(s, &q0, &q1, ctx);
    Conn {
        q0,
        q1,
        client,
        server,
        listener,
    }
}

/// A zero-length SEND from `q0` to `q1`, both completions successful.
fn ping(s: &[Side; 2], q0: &Qp, q1: &Qp, ctx: usize) {
    assert_eq!(q1.receive(ctx + 0x11, &[]), STATUS_SUCCESS);
    assert_eq!(q0.send(ctx + 0x10, &[], 0), STATUS_SUCCESS);
    let r = s[0].cq.wait_results(1);
    assert_eq!(
        (r[0].Status, r[0].RequestContext as usize),
        (STATUS_SUCCESS, ctx + 0x10)
    );
    let r = s[1].cq.wait_results(1);
    assert_eq!(
        (
            r[0].Status,
            r[0].RequestContext as usize,
            r[0].BytesTransferred
        ),
        (STATUS_SUCCESS, ctx + 0x11, 0)
    );
}

impl Conn {
    /// Graceful: NdkDisconnect from the client, the server's on its DisconnectEvent, then
    /// every object closed.
    fn part(self, c: &Cluster) {
        let d = self.client.disconnect_raw();
        let server = &self.server;
        c.wait_for("the server's DisconnectEvent", || {
            server.disconnects.count() == 1
        });
        assert_eq!(self.server.disconnect(), STATUS_SUCCESS);
        assert_eq!(d.wait(), STATUS_SUCCESS);
        self.close();
    }

    /// Abortive: every object closed without a disconnect.
    fn close(self) {
        for st in [
            self.client.close(),
            self.server.close(),
            self.q0.close(),
            self.q1.close(),
            self.listener.close(),
        ] {
            assert_eq!(st, STATUS_SUCCESS);
        }
    }
}

/// NDK opened through the vmxnet3 adapter (by its interface), the interface attached to the
/// PVRDMA function is the vmxnet3's, the GIDs are its IPv4 and IPv6 addresses and follow
/// their changes; a connection made over each family, then over addresses added later
/// (resolved by ARP and neighbour discovery over vmxnet3); a removed address can no longer
/// be listened on or connected from.
#[test]
fn gids_follow_the_interface_addresses_and_new_addresses_carry_connections() {
    let c = cluster();
    assert!(c.is_paired());
    for i in 0..2 {
        let v = c.host(i).vnic();
        let iface = v.mp().interface().expect("interface attached");
        assert_eq!(
            (iface.net_luid, iface.if_index, iface.mac, iface.mtu),
            (v.luid, 11 + i as u32, c.host(i).mac, 1500)
        );
        assert_eq!(
            v.nic().open_adapters(),
            1,
            "the kit's adapter, through vmxnet3"
        );
        assert_eq!(v.mp().open_adapters(), 1, "served by the PVRDMA function");
        assert_eq!(v.bound_gids(), gids(&[V4[i], V6[i]]), "host {i}");
        assert!(!v.mp().ndk_enabled());
    }
    let s = [Side::new(&c, 0), Side::new(&c, 1)];
    connect(&c, &s, V4[0], V4[1], 0x100).part(&c);
    connect(&c, &s, V6[0], V6[1], 0x200).part(&c);

    // Host 1's interface gains an address of each family: a GID each.
    let (new4, new6) = (
        IpAddr::V4(Ipv4Addr::new(198, 18, 0, 12)),
        IpAddr::V6(Ipv6Addr::new(0x2001, 2, 0, 0, 0, 0, 0, 0x12)),
    );
    let r1 = c.host(1).resolver.clone().unwrap();
    r1.add_address(new4).unwrap();
    r1.add_address(new6).unwrap();
    c.settle();
    assert_eq!(
        c.host(1).vnic().bound_gids(),
        gids(&[V4[1], V6[1], new4, new6])
    );
    assert_eq!(c.host(0).vnic().bound_gids(), gids(&[V4[0], V6[0]]));
    // Host 0's stack resolves them (ARP, neighbour solicitation over vmxnet3); connections
    // to the new addresses work.
    assert!(
        c.resolve_neighbours() > 0,
        "frames through the vmxnet3 adapters"
    );
    connect(&c, &s, V4[0], new4, 0x300).part(&c);
    connect(&c, &s, V6[0], new6, 0x400).part(&c);

    // An address removed: its GID goes; it can no longer be listened on or connected from.
    r1.remove_address(V4[1]);
    c.settle();
    assert_eq!(c.host(1).vnic().bound_gids(), gids(&[V6[1], new4, new6]));
    let l = c.adapter(1).create_listener().unwrap();
    assert_eq!(l.listen(sa(V4[1], 0)), STATUS_INVALID_ADDRESS);
    assert_eq!(l.close(), STATUS_SUCCESS);
    let r0 = c.host(0).resolver.clone().unwrap();
    r0.remove_address(V6[0]);
    c.settle();
    assert_eq!(c.host(0).vnic().bound_gids(), gids(&[V4[0]]));
    let q = s[0]
        .pd
        .create_qp(&s[0].cq, &s[0].cq, QpSpec::new(0x500))
        .unwrap();
    let client = c.adapter(0).create_connector().unwrap();
    let st = client.connect(&q, sa(V6[0], 0), sa(new6, 445), 4, 4, &[]);
    // The source is no longer the interface's (os::net: STATUS_BAD_NETWORK_NAME).
    assert_eq!(
        st, STATUS_BAD_NETWORK_NAME,
        "NdkConnect from a removed address"
    );
    assert_eq!(client.close(), STATUS_SUCCESS);
    assert_eq!(q.close(), STATUS_SUCCESS);
    // The remaining addresses still carry connections.
    connect(&c, &s, V4[0], new4, 0x600).part(&c);
    // The resolvers' last holders are the hosts (finish counts their tables as freed).
    drop((r0, r1));
    let [s0, s1] = s;
    s0.close();
    s1.close();
    c.finish();
}

/// Link down on host 0's vNIC with a connection of each family: the vmxnet3 adapter
/// indicates it, the PVRDMA function's port goes down (a port error to NDK), a SEND posted
/// meanwhile fails; the consumer closes its connections. Link up: one UNQUIESCE of the PVRDMA
/// function, its port active again; the consumer connects again over both families and
/// traffic flows.
#[test]
fn link_down_and_up_with_the_consumer_reconnecting_both_families() {
    let c = cluster();
    let s = [Side::new(&c, 0), Side::new(&c, 1)];
    let a = connect(&c, &s, V4[0], V4[1], 0x100);
    let b = connect(&c, &s, V6[0], V6[1], 0x200);
    let v = c.host(0).vnic();
    let unquiesces = v.bar1.unquiesces();
    let links_before = v.eth.ndis.seen.lock().unwrap().links.len();
    v.pv_links.take();

    c.world.set_vnic_link(0, false);
    c.settle();
    let links = v.eth.ndis.seen.lock().unwrap().links.clone();
    assert_eq!(links.len(), links_before + 1, "one link indication");
    assert!(
        !links[links_before].connected,
        "vmxnet3 indicated the link down"
    );
    assert!(!v.nic().link_up());
    assert!(!v.mp().link().connected, "the RDMA function's port is down");
    assert_eq!(v.pv_links.take().last().map(|l| l.connected), Some(false));
    // A SEND posted now never reaches the peer: it fails once the transport gives up.
    assert_eq!(a.q0.send(0x1234, &[], 0), STATUS_SUCCESS);
    let r = s[0].cq.wait_results(1);
    assert_eq!(r[0].RequestContext as usize, 0x1234);
    assert_eq!(
        r[0].Status, STATUS_IO_TIMEOUT,
        "retries exhausted over a down link"
    );
    // The consumer gives the connections up (the peer never hears: the link is down).
    a.close();
    b.close();

    c.world.set_vnic_link(0, true);
    c.settle();
    assert!(v.nic().link_up());
    assert_eq!(
        v.bar1.unquiesces(),
        unquiesces + 1,
        "one UNQUIESCE at link up"
    );
    assert_eq!(v.mp().unquiesce_failures(), 0);
    assert!(v.mp().link().connected, "port active again");
    assert_eq!(v.pv_links.take().last().map(|l| l.connected), Some(true));
    // Host 1's side of the given-up connections: its QPs see the peer gone when they send;
    // the consumer reconnects over both families.
    connect(&c, &s, V4[0], V4[1], 0x300).part(&c);
    connect(&c, &s, V6[0], V6[1], 0x400).part(&c);
    let [s0, s1] = s;
    s0.close();
    s1.close();
    c.finish();
}

/// Host 0's live objects for the surprise removals: its side of a connection to host 1 (QP,
/// connector), an MR, a listener of its own, and its CQ armed.
struct Live {
    conn: Conn,
    mr: common::ndk::Mr,
    listener: Listener,
}

fn live_objects(c: &Cluster, s: &[Side; 2]) -> Live {
    let conn = connect(c, s, V4[0], V4[1], 0x100);
    let mr = s[0].pd.create_mr(true).expect("NdkCreateMr");
    let listener = c.adapter(0).create_listener().unwrap();
    assert_eq!(listener.listen(sa(V6[0], 445)), STATUS_SUCCESS);
    s[0].cq.arm(NDK_CQ_NOTIFY_ANY);
    Live { conn, mr, listener }
}

/// The consumer closes everything it had (host 1's side of the connection abortively: its
/// peer is gone), each close successful.
fn close_all(live: Live, s: [Side; 2]) {
    assert_eq!(live.listener.close(), STATUS_SUCCESS);
    assert_eq!(live.mr.close(), STATUS_SUCCESS);
    live.conn.close();
    let [s0, s1] = s;
    s0.close();
    s1.close();
}

/// The objects learned the removal: the armed CQ's notification says STATUS_INTERNAL_ERROR
/// (ndkpi.md §5.4), once.
fn failed(s: &[Side; 2]) {
    assert_eq!(s[0].cq.notifications(), vec![STATUS_INTERNAL_ERROR]);
}

/// The PVRDMA function is surprise-removed with live NDK objects: they are failed at once
/// (MiniportDevicePnPEventNotify); the consumer closes them and NDIS the adapter; NDIS halts
/// the function, which parts from the vmxnet3 adapter (NetEventNDKDisable, opens refused);
/// nothing is left.
#[test]
fn pvrdma_surprise_removal_with_live_ndk_objects() {
    let mut c = cluster();
    let s = [Side::new(&c, 0), Side::new(&c, 1)];
    let live = live_objects(&c, &s);
    c.host(0)
        .vnic()
        .mp()
        .pnp_event(NdisDevicePnPEventSurpriseRemoved);
    c.settle();
    failed(&s);
    close_all(live, s);
    let nic = c.host(0).vnic().nic().clone();
    assert_eq!(
        nic.open_adapters(),
        1,
        "the kit's adapter, open until NDIS closes it"
    );
    c.close_adapter(0);
    assert_eq!(nic.open_adapters(), 0);
    assert_eq!(c.host(0).vnic().mp().open_adapters(), 0);
    c.halt_rdma(0);
    let v = c.host(0).vnic();
    assert_eq!(v.pnp_events(), vec![NetEventNDKDisable]);
    assert!(!nic.ndk_enabled());
    assert!(!nic.has_function());
    assert_eq!(
        v.open(NDK_VERSION { Major: 2, Minor: 1 }).err(),
        Some(NDIS_STATUS_ADAPTER_NOT_READY)
    );
    assert_eq!(
        v.bound_gids(),
        Vec::<[u8; 16]>::new(),
        "GIDs unbound at Halt"
    );
    drop(nic);
    c.finish();
}

/// The vmxnet3 function is surprise-removed with live NDK objects: they are failed at once
/// (the adapter's NDK surface tells the function); the consumer closes them and NDIS the
/// adapter; NDIS halts the vmxnet3 adapter (its parting detaches the interface: engine
/// stopped, GIDs unbound); the PVRDMA function lives on with nothing left.
#[test]
fn vmxnet3_surprise_removal_with_live_ndk_objects() {
    let mut c = cluster();
    let s = [Side::new(&c, 0), Side::new(&c, 1)];
    let live = live_objects(&c, &s);
    c.host(0)
        .vnic()
        .eth_mp()
        .pnp_event(NdisDevicePnPEventSurpriseRemoved);
    c.settle();
    failed(&s);
    close_all(live, s);
    let nic = c.host(0).vnic().nic().clone();
    assert_eq!(nic.open_adapters(), 1);
    c.close_adapter(0);
    assert_eq!(nic.open_adapters(), 0);
    assert_eq!(c.host(0).vnic().mp().open_adapters(), 0);
    drop(nic);
    let nic = c.halt_nic(0);
    assert!(!nic.ndk_enabled());
    assert_eq!(std::sync::Arc::strong_count(&nic), 1, "NicNdk released");
    drop(nic);
    let v = c.host(0).vnic();
    assert!(v.mp().interface().is_none(), "interface detached");
    assert!(v.mp().connection_engine().is_none(), "engine stopped");
    assert_eq!(v.bound_gids(), Vec::<[u8; 16]>::new(), "GIDs unbound");
    c.finish();
}

/// The rest of the kit's API on paired hosts, deterministic and threaded: `Cluster::connect`
/// (the kit's own connections, parted by `finish`), `cm_connect`, and `wire` (QPs wired raw
/// beside the engines, which never see them), each carrying a SEND; `finish`'s leak checks.
fn kit_api(mode: Mode) {
    let c = Cluster::new(mode, 2);
    assert!(c.is_paired() && c.has_cm());
    let s = [Side::new(&c, 0), Side::new(&c, 1)];
    let qp = |i: usize, ctx| {
        s[i].pd
            .create_qp(&s[i].cq, &s[i].cq, QpSpec::new(ctx))
            .unwrap()
    };
    let (a, b) = (qp(0, 0x10), qp(1, 0x11));
    c.connect(&a, &b);
    ping(&s, &a, &b, 0x100);
    let (d, e) = (qp(0, 0x20), qp(1, 0x21));
    let p = cm_connect(&c, &d, &e);
    ping(&s, &d, &e, 0x200);
    p.disconnect_and_close();
    let (f, g) = (qp(0, 0x30), qp(1, 0x31));
    wire(&c, &f, &g);
    ping(&s, &f, &g, 0x300);
    for q in [d, e, f, g] {
        assert_eq!(q.close(), STATUS_SUCCESS);
    }
    // `a`'s close parts the kit's connection first (NdkDisconnect both ways).
    let [s0, s1] = s;
    assert_eq!(a.close(), STATUS_SUCCESS);
    assert_eq!(b.close(), STATUS_SUCCESS);
    s0.close();
    s1.close();
    c.finish();
}

#[test]
fn the_kit_api_on_paired_hosts_deterministic() {
    kit_api(Mode::Deterministic);
}

#[test]
fn the_kit_api_on_paired_hosts_threaded() {
    kit_api(Mode::Threaded);
}
