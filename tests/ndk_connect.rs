//! Connection management end to end (ndkpi.md §5.10–5.12, §7.4; cm.md §1.2–1.4): connectors,
//! listeners and shared endpoints driven only through their dispatch tables, between hosts of
//! the model's fabric whose connection engines speak the IB CM over QP1.

mod common;
mod ndk_dp;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use common::Mode;
use common::ndk::{
    Cluster, ClusterConfig, Connector, Listener, Qp, QpSpec, Registered, cm_connect, fill, pattern,
    sa, verify,
};
use ndk_dp::*;
use pvrdma_ndk::ndkpi::*;

/// QPs on hosts 0 and 1, not connected.
fn pair(c: &Cluster) -> Pair {
    Pair::with(c, QpSpec::new(QPC_A), QpSpec::new(QPC_B), false)
}

/// (IRD, ORD) = (max_dest_rd_atomic, max_rd_atomic) the model holds for `q`.
fn model_read_limits(c: &Cluster, q: &Qp) -> (u8, u8) {
    let h = q.handle();
    let a = c
        .host(q.host())
        .model
        .with_core(|core| core.qp_info(h))
        .expect("QP in the model")
        .attr;
    (a.max_dest_rd_atomic, a.max_rd_atomic)
}

/// Graceful disconnect as consumers do it: the client's NdkDisconnect pends until the
/// server, told by its DisconnectEvent, disconnects too (ndkpi.md §5.12).
fn part(c: &Cluster, client: &Connector, server: &Connector) {
    let d = client.disconnect_raw();
    assert_eq!(d.inline, STATUS_PENDING);
    c.wait_for("the server's DisconnectEvent", || {
        server.disconnects.count() == 1
    });
    assert_eq!(server.disconnect(), STATUS_SUCCESS);
    assert_eq!(d.wait(), STATUS_SUCCESS);
    assert_eq!(
        client.disconnects.count(),
        0,
        "no event after a local disconnect"
    );
}

fn cm_cluster(ipv6: bool) -> Cluster {
    Cluster::with(ClusterConfig {
        ipv6,
        ..ClusterConfig::cm(Mode::Deterministic, 2)
    })
}

/// One SEND each way over a connection `cm_connect` made, checked byte for byte.
fn send_both_ways(c: &Cluster, p: &Pair) {
    let ma = Registered::new(c.host(0), &p.pd_a, 1, 0x1000_0000, LOCAL);
    let mb = Registered::new(c.host(1), &p.pd_b, 1, 0x2000_0000, LOCAL);
    let ab = fill(&ma.mem, 0, 0x11, 1000);
    let ba = fill(&mb.mem, 2048, 0x22, 700);
    assert_eq!(p.qb.receive(1, &[mb.sge(0, 1024)]), STATUS_SUCCESS);
    assert_eq!(p.qa.receive(2, &[ma.sge(2048, 1024)]), STATUS_SUCCESS);
    assert_eq!(p.qa.send(3, &[ma.sge(0, 1000)], 0), STATUS_SUCCESS);
    let r = p.cq_b.wait_results(1);
    assert_eq!(res(&r[0]), (STATUS_SUCCESS, 1000, QPC_B, 1));
    let r = p.cq_a.wait_results(1);
    assert_eq!(res(&r[0]), (STATUS_SUCCESS, 0, QPC_A, 3));
    verify(&mb.mem, 0, &ab);
    assert_eq!(p.qb.send(4, &[mb.sge(2048, 700)], 0), STATUS_SUCCESS);
    let r = p.cq_a.wait_results(1);
    assert_eq!(res(&r[0]), (STATUS_SUCCESS, 700, QPC_A, 2));
    let r = p.cq_b.wait_results(1);
    assert_eq!(res(&r[0]), (STATUS_SUCCESS, 0, QPC_B, 4));
    verify(&ma.mem, 2048, &ba);
    ma.close();
    mb.close();
}

fn connect_send_disconnect(ipv6: bool, mode: Mode) {
    let c = Cluster::with(ClusterConfig {
        ipv6,
        ..ClusterConfig::cm(mode, 2)
    });
    let p = Pair::with(
        &c,
        common::ndk::QpSpec::new(QPC_A),
        common::ndk::QpSpec::new(QPC_B),
        false,
    );
    let pair = cm_connect(&c, &p.qa, &p.qb);
    let (ia, ib) = (c.host(0).ip, c.host(1).ip);
    let listen = pair.listener.local_address().unwrap();
    assert_eq!(listen.ip(), ib);
    assert!(listen.port() >= 49152, "ephemeral port {listen}");
    assert_eq!(pair.server.local_address(), Ok(listen));
    assert_eq!(pair.client.peer_address(), Ok(listen));
    let client_at = pair.client.local_address().unwrap();
    assert_eq!(client_at.ip(), ia);
    assert_eq!(pair.server.peer_address(), Ok(client_at));
    send_both_ways(&c, &p);
    pair.disconnect_and_close();
    p.close();
    c.finish();
}

#[test]
fn ipv4_connect_accept_complete_send_disconnect() {
    connect_send_disconnect(false, Mode::Deterministic);
}

/// The same with the models' own threads and the DPCs racing the consumer.
#[test]
fn ipv4_connect_send_disconnect_threaded() {
    connect_send_disconnect(false, Mode::Threaded);
}

#[test]
fn ipv6_connect_accept_complete_send_disconnect() {
    connect_send_disconnect(true, Mode::Deterministic);
}

/// Private data at exactly MaxCallerData (56) and MaxCalleeData (148) goes through and is
/// read back with NdkGetConnectionData by the RDS rules of ndkpi.md §5.10; one byte more
/// fails inline with STATUS_INVALID_BUFFER_SIZE. IRD/ORD are negotiated as cm.md §1.4 says,
/// and the model's QPs hold the effective values.
#[test]
fn private_data_limits_and_read_limit_negotiation() {
    let c = cm_cluster(false);
    let p = pair(&c);
    let (ia, ib) = (c.host(0).ip, c.host(1).ip);
    let info = c.adapter(0).query_info().unwrap();
    assert_eq!((info.MaxCallerData, info.MaxCalleeData), (56, 148));
    let l = c.adapter(1).create_listener().unwrap();
    assert_eq!(l.listen(sa(ib, 7000)), STATUS_SUCCESS);
    let client = c.adapter(0).create_connector().unwrap();
    let caller = pattern(0x31, 57);
    let over = client.connect_raw(&p.qa, sa(ia, 0), sa(ib, 7000), 3, 5, &caller);
    assert_eq!(over.inline, STATUS_INVALID_BUFFER_SIZE);
    let connect = client.connect_raw(&p.qa, sa(ia, 0), sa(ib, 7000), 3, 5, &caller[..56]);
    assert_eq!(connect.inline, STATUS_PENDING);
    let server = l.next_incoming();
    // RDS alone, then too short a buffer, then all of it.
    let d = server.connection_data(None);
    assert_eq!((d.status, d.rds, d.ird, d.ord), (STATUS_SUCCESS, 56, 5, 3));
    let d = server.connection_data(Some(10));
    assert_eq!((d.status, d.rds), (STATUS_BUFFER_TOO_SMALL, 56));
    assert_eq!(d.data, caller[..10]);
    let d = server.connection_data(Some(100));
    assert_eq!((d.status, d.rds), (STATUS_SUCCESS, 56));
    assert_eq!(d.data, caller[..56]);
    let callee = pattern(0x77, 149);
    assert_eq!(
        server.accept_raw(&p.qb, 4, 16, &callee).inline,
        STATUS_INVALID_BUFFER_SIZE
    );
    assert_eq!(server.reject(&callee), STATUS_INVALID_BUFFER_SIZE);
    let accept = server.accept_raw(&p.qb, 4, 16, &callee[..148]);
    assert_eq!(accept.inline, STATUS_PENDING);
    assert_eq!(connect.wait(), STATUS_SUCCESS);
    // The REP carries 196 bytes: the 148 given, zero-padded.
    let d = client.connection_data(Some(196));
    assert_eq!((d.status, d.rds, d.ird, d.ord), (STATUS_SUCCESS, 196, 3, 4));
    assert_eq!(d.data[..148], callee[..148]);
    assert_eq!(d.data[148..], [0u8; 48]);
    assert_eq!(client.complete_connect_ex(), STATUS_SUCCESS);
    assert_eq!(accept.wait(), STATUS_SUCCESS);
    assert_eq!(model_read_limits(&c, &p.qa), (3, 4));
    assert_eq!(model_read_limits(&c, &p.qb), (4, 3));
    // A second NdkCompleteConnect has nothing to complete.
    assert_eq!(client.complete_connect(), STATUS_CONNECTION_INVALID);
    part(&c, &client, &server);
    assert_eq!(client.disconnects.reasons(), Vec::<u32>::new());
    assert_eq!(
        client.disconnect(),
        STATUS_CONNECTION_INVALID,
        "not reusable"
    );
    assert_eq!(client.close(), STATUS_SUCCESS);
    assert_eq!(server.close(), STATUS_SUCCESS);
    assert_eq!(l.close(), STATUS_SUCCESS);
    p.close();
    c.finish();
}

/// NdConnReject: the server rejects with 148 bytes of private data; the connect fails with
/// STATUS_CONNECTION_REFUSED and the client reads the REJ's data (RDS 148).
#[test]
fn reject_with_private_data_refuses_the_connect() {
    let c = cm_cluster(false);
    let p = pair(&c);
    let (ia, ib) = (c.host(0).ip, c.host(1).ip);
    let l = c.adapter(1).create_listener().unwrap();
    assert_eq!(l.listen(sa(ib, 0)), STATUS_SUCCESS);
    let at = l.local_address().unwrap();
    let client = c.adapter(0).create_connector().unwrap();
    let connect = client.connect_raw(&p.qa, sa(ia, 0), at, 1, 1, b"hello");
    let server = l.next_incoming();
    let d = server.connection_data(Some(56));
    assert_eq!(&d.data[..5], b"hello");
    assert_eq!(d.data[5..], [0u8; 51]);
    let why = pattern(0x5A, 148);
    assert_eq!(server.reject(&why), STATUS_SUCCESS);
    assert_eq!(connect.wait(), STATUS_CONNECTION_REFUSED);
    let d = client.connection_data(Some(148));
    assert_eq!((d.status, d.rds), (STATUS_SUCCESS, 148));
    assert_eq!(d.data, why);
    assert_eq!(
        server.reject(&[]),
        STATUS_CONNECTION_INVALID,
        "rejected once"
    );
    assert_eq!(client.complete_connect(), STATUS_CONNECTION_INVALID);
    assert_eq!(server.close(), STATUS_SUCCESS);
    assert_eq!(client.close(), STATUS_SUCCESS);
    assert_eq!(l.close(), STATUS_SUCCESS);
    p.close();
    c.finish();
}

/// A port nobody listens on (REJ 8), a paused listener (ControlConnectEvents) and a closed
/// listener all refuse with STATUS_CONNECTION_REFUSED; a resumed one accepts.
#[test]
fn no_listener_paused_and_closed_listeners_refuse() {
    let c = cm_cluster(false);
    let p = pair(&c);
    let (ia, ib) = (c.host(0).ip, c.host(1).ip);
    let client = c.adapter(0).create_connector().unwrap();
    assert_eq!(
        client.connect(&p.qa, sa(ia, 0), sa(ib, 4444), 1, 1, &[]),
        STATUS_CONNECTION_REFUSED
    );
    assert_eq!(client.close(), STATUS_SUCCESS);
    let l = c.adapter(1).create_listener().unwrap();
    assert_eq!(l.listen(sa(ib, 4444)), STATUS_SUCCESS);
    l.pause(true);
    let client = c.adapter(0).create_connector().unwrap();
    assert_eq!(
        client.connect(&p.qa, sa(ia, 0), sa(ib, 4444), 1, 1, &[]),
        STATUS_CONNECTION_REFUSED
    );
    assert_eq!(client.close(), STATUS_SUCCESS);
    assert_eq!(l.incoming.calls(), 0);
    l.pause(false);
    let client = c.adapter(0).create_connector().unwrap();
    let connect = client.connect_raw(&p.qa, sa(ia, 0), sa(ib, 4444), 1, 1, &[]);
    let server = l.next_incoming();
    assert_eq!(server.reject(&[]), STATUS_SUCCESS);
    assert_eq!(connect.wait(), STATUS_CONNECTION_REFUSED);
    assert_eq!(client.close(), STATUS_SUCCESS);
    assert_eq!(server.close(), STATUS_SUCCESS);
    assert_eq!(l.close(), STATUS_SUCCESS);
    // NdConnListenClosing: the port's listener is gone.
    let client = c.adapter(0).create_connector().unwrap();
    assert_eq!(
        client.connect(&p.qa, sa(ia, 0), sa(ib, 4444), 1, 1, &[]),
        STATUS_CONNECTION_REFUSED
    );
    assert_eq!(client.close(), STATUS_SUCCESS);
    p.close();
    c.finish();
}

/// NdDualConnection and NdDualListen: a second NdConnect on a connector already connecting
/// is STATUS_CONNECTION_ACTIVE; a second listener on an address:port in use (or a connector
/// bound to it) is STATUS_SHARING_VIOLATION; the port is free again once its users close.
#[test]
fn dual_connect_and_dual_listen() {
    let c = cm_cluster(false);
    let p = pair(&c);
    let (ia, ib) = (c.host(0).ip, c.host(1).ip);
    let l = c.adapter(1).create_listener().unwrap();
    assert_eq!(l.listen(sa(ib, 445)), STATUS_SUCCESS);
    let l2 = c.adapter(1).create_listener().unwrap();
    assert_eq!(l2.listen(sa(ib, 445)), STATUS_SHARING_VIOLATION);
    let any = IpAddr::V4(Ipv4Addr::UNSPECIFIED);
    assert_eq!(l2.listen(sa(any, 445)), STATUS_SHARING_VIOLATION);
    assert_eq!(l2.listen(sa(ib, 446)), STATUS_SUCCESS);
    assert_eq!(
        l2.listen(sa(ib, 447)),
        STATUS_INVALID_DEVICE_STATE,
        "listening already"
    );
    let client = c.adapter(0).create_connector().unwrap();
    let connect = client.connect_raw(&p.qa, sa(ia, 5000), sa(ib, 445), 1, 1, &[]);
    assert_eq!(connect.inline, STATUS_PENDING);
    assert_eq!(
        client
            .connect_raw(&p.qa, sa(ia, 5001), sa(ib, 445), 1, 1, &[])
            .inline,
        STATUS_CONNECTION_ACTIVE
    );
    // The connector holds 10.0.0.1:5000.
    let other = c.adapter(0).create_connector().unwrap();
    let qa2 = p
        .pd_a
        .create_qp(&p.cq_a, &p.cq_a, QpSpec::new(QPC_A + 1))
        .unwrap();
    assert_eq!(
        other
            .connect_raw(&qa2, sa(ia, 5000), sa(ib, 445), 1, 1, &[])
            .inline,
        STATUS_SHARING_VIOLATION
    );
    let la = c.adapter(0).create_listener().unwrap();
    assert_eq!(la.listen(sa(ia, 5000)), STATUS_SHARING_VIOLATION);
    let server = l.next_incoming();
    assert_eq!(server.accept_raw(&p.qb, 1, 1, &[]).inline, STATUS_PENDING);
    assert_eq!(connect.wait(), STATUS_SUCCESS);
    assert_eq!(client.local_address(), Ok(sa(ia, 5000)));
    assert_eq!(client.complete_connect(), STATUS_SUCCESS);
    assert_eq!(
        client
            .connect_raw(&p.qa, sa(ia, 5002), sa(ib, 445), 1, 1, &[])
            .inline,
        STATUS_CONNECTION_ACTIVE
    );
    assert_eq!(client.close(), STATUS_SUCCESS);
    assert_eq!(
        la.listen(sa(ia, 5000)),
        STATUS_SUCCESS,
        "the port came back"
    );
    assert_eq!(la.close(), STATUS_SUCCESS);
    c.wait_for("the server's DisconnectEvent", || {
        server.disconnects.count() == 1
    });
    assert_eq!(server.close(), STATUS_SUCCESS);
    assert_eq!(other.close(), STATUS_SUCCESS);
    assert_eq!(l2.close(), STATUS_SUCCESS);
    assert_eq!(l.close(), STATUS_SUCCESS);
    qa2.close();
    p.close();
    c.finish();
}

/// NdInvalidIP and friends: a source address that is not the interface's is
/// STATUS_BAD_NETWORK_NAME; a destination no neighbour answers for is
/// STATUS_HOST_UNREACHABLE after the resolver's bound; an unspecified source with no
/// address of the destination's family is STATUS_NETWORK_UNREACHABLE; mixed families are
/// STATUS_INVALID_ADDRESS. The connector can connect afterwards.
#[test]
fn invalid_and_unreachable_addresses() {
    let c = cm_cluster(false);
    let p = pair(&c);
    let (ia, ib) = (c.host(0).ip, c.host(1).ip);
    let l = c.adapter(1).create_listener().unwrap();
    assert_eq!(l.listen(sa(ib, 445)), STATUS_SUCCESS);
    let client = c.adapter(0).create_connector().unwrap();
    let stranger = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 99));
    assert_eq!(
        client.connect(&p.qa, sa(stranger, 0), sa(ib, 445), 1, 1, &[]),
        STATUS_BAD_NETWORK_NAME
    );
    assert_eq!(
        client.connect(&p.qa, sa(ia, 0), sa(stranger, 445), 1, 1, &[]),
        STATUS_HOST_UNREACHABLE
    );
    let v6 = IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2));
    let any6 = IpAddr::V6(Ipv6Addr::UNSPECIFIED);
    assert_eq!(
        client.connect(&p.qa, sa(any6, 0), sa(v6, 445), 1, 1, &[]),
        STATUS_NETWORK_UNREACHABLE
    );
    assert_eq!(
        client.connect(&p.qa, sa(ia, 0), sa(v6, 445), 1, 1, &[]),
        STATUS_INVALID_ADDRESS
    );
    let bad = c.adapter(1).create_listener().unwrap();
    assert_eq!(bad.listen(sa(stranger, 445)), STATUS_INVALID_ADDRESS);
    assert_eq!(bad.close(), STATUS_SUCCESS);
    // An unspecified source takes the interface's address.
    let any = IpAddr::V4(Ipv4Addr::UNSPECIFIED);
    let connect = client.connect_raw(&p.qa, sa(any, 0), sa(ib, 445), 1, 1, &[]);
    let server = l.next_incoming();
    assert_eq!(server.peer_address().unwrap().ip(), ia);
    assert_eq!(server.accept_raw(&p.qb, 1, 1, &[]).inline, STATUS_PENDING);
    assert_eq!(connect.wait(), STATUS_SUCCESS);
    assert_eq!(client.complete_connect(), STATUS_SUCCESS);
    part(&c, &client, &server);
    assert_eq!(client.close(), STATUS_SUCCESS);
    assert_eq!(server.close(), STATUS_SUCCESS);
    assert_eq!(l.close(), STATUS_SUCCESS);
    p.close();
    c.finish();
}

/// NdReceiveConnClosed: the client disconnects; the server sees its DisconnectEvent(Ex) once
/// (reason 0) with its receive still posted, and once it disconnects the receive completes
/// STATUS_CANCELLED; the client's own posted receive is flushed by its disconnect.
#[test]
fn disconnect_event_and_flushed_receives() {
    let c = cm_cluster(false);
    let p = pair(&c);
    let (ia, ib) = (c.host(0).ip, c.host(1).ip);
    let ma = Registered::new(c.host(0), &p.pd_a, 1, 0x1000_0000, LOCAL);
    let mb = Registered::new(c.host(1), &p.pd_b, 1, 0x2000_0000, LOCAL);
    let l = c.adapter(1).create_listener().unwrap();
    assert_eq!(l.listen(sa(ib, 0)), STATUS_SUCCESS);
    let client = c.adapter(0).create_connector().unwrap();
    let connect = client.connect_raw(&p.qa, sa(ia, 0), l.local_address().unwrap(), 2, 2, &[]);
    let server = l.next_incoming();
    let accept = server.accept_ex_raw(&p.qb, 2, 2, &[]);
    assert_eq!(connect.wait(), STATUS_SUCCESS);
    assert_eq!(client.complete_connect(), STATUS_SUCCESS);
    assert_eq!(accept.wait(), STATUS_SUCCESS);
    assert_eq!(p.qa.receive(11, &[ma.sge(0, 64)]), STATUS_SUCCESS);
    assert_eq!(p.qb.receive(22, &[mb.sge(0, 64)]), STATUS_SUCCESS);
    let d = client.disconnect_raw();
    assert_eq!(d.inline, STATUS_PENDING);
    let r = p.cq_a.wait_results(1);
    assert_eq!(res(&r[0]), (STATUS_CANCELLED, 0, QPC_A, 11));
    c.wait_for("the server's DisconnectEventEx", || {
        server.disconnects.count() == 1
    });
    assert_eq!(server.disconnects.reasons(), vec![0]);
    c.settle();
    assert!(
        p.cq_b.results(1).is_empty(),
        "no flush on the peer's disconnect event"
    );
    assert_eq!(server.disconnect(), STATUS_SUCCESS);
    let r = p.cq_b.wait_results(1);
    assert_eq!(res(&r[0]), (STATUS_CANCELLED, 0, QPC_B, 22));
    assert_eq!(d.wait(), STATUS_SUCCESS);
    assert_eq!(p.qb.send(5, &[mb.sge(0, 8)], 0), STATUS_CONNECTION_INVALID);
    c.settle();
    assert_eq!(server.disconnects.count(), 1, "exactly once");
    assert_eq!(client.disconnects.count(), 0);
    assert_eq!(client.close(), STATUS_SUCCESS);
    assert_eq!(server.close(), STATUS_SUCCESS);
    assert_eq!(l.close(), STATUS_SUCCESS);
    ma.close();
    mb.close();
    p.close();
    c.finish();
}

/// Closing in every phase releases everything: a connector closed while its connect is
/// pending completes it STATUS_CANCELLED and the server's NdkAccept then fails
/// STATUS_CONNECTION_ABORTED; a listener with a delivered connector stays pending until that
/// connector closes; a connected connector closed without NdkDisconnect aborts the peer,
/// which sees its DisconnectEvent. Cluster::finish checks nothing is left (objects, model
/// QPs, GID bindings, endpoints).
#[test]
fn close_in_any_phase_releases_everything() {
    let c = cm_cluster(false);
    let p = pair(&c);
    let (ia, ib) = (c.host(0).ip, c.host(1).ip);
    let l = c.adapter(1).create_listener().unwrap();
    assert_eq!(l.listen(sa(ib, 0)), STATUS_SUCCESS);
    let at = l.local_address().unwrap();
    // Closed while connecting.
    let client = c.adapter(0).create_connector().unwrap();
    let connect = client.connect_raw(&p.qa, sa(ia, 0), at, 1, 1, &[]);
    let server = l.next_incoming();
    assert_eq!(client.close(), STATUS_SUCCESS);
    assert_eq!(connect.wait(), STATUS_CANCELLED);
    c.settle();
    assert_eq!(
        server.accept_raw(&p.qb, 1, 1, &[]).inline,
        STATUS_CONNECTION_ABORTED
    );
    assert_eq!(server.close(), STATUS_SUCCESS);
    // Closed connected, without a disconnect; the listener closes first and pends.
    let qa = p
        .pd_a
        .create_qp(&p.cq_a, &p.cq_a, QpSpec::new(QPC_A))
        .unwrap();
    let qb = p
        .pd_b
        .create_qp(&p.cq_b, &p.cq_b, QpSpec::new(QPC_B))
        .unwrap();
    let client = c.adapter(0).create_connector().unwrap();
    let connect = client.connect_raw(&qa, sa(ia, 0), at, 1, 1, &[]);
    let server = l.next_incoming();
    let accept = server.accept_raw(&qb, 1, 1, &[]);
    assert_eq!(connect.wait(), STATUS_SUCCESS);
    assert_eq!(client.complete_connect(), STATUS_SUCCESS);
    assert_eq!(accept.wait(), STATUS_SUCCESS);
    let closing = l.close_raw();
    assert_eq!(
        closing.inline, STATUS_PENDING,
        "a delivered connector is open"
    );
    assert_eq!(client.close(), STATUS_SUCCESS);
    c.wait_for("the server's DisconnectEvent", || {
        server.disconnects.count() == 1
    });
    c.settle();
    assert_eq!(closing.completions(), 0);
    assert_eq!(server.close(), STATUS_SUCCESS);
    closing.wait();
    qa.close();
    qb.close();
    p.close();
    c.finish();
}

/// A shared endpoint: two connectors to two listeners share its address:port, each holds
/// it (its close pends until they close), and the address:port is refused to a listener
/// until all are closed.
#[test]
fn shared_endpoint_is_shared_and_counted() {
    let c = cm_cluster(false);
    let p = pair(&c);
    let (ia, ib) = (c.host(0).ip, c.host(1).ip);
    let se = c.adapter(0).create_shared_endpoint(sa(ia, 0)).unwrap();
    let at = se.local_address().unwrap();
    assert_eq!(at.ip(), ia);
    assert!(at.port() >= 49152);
    let l1 = c.adapter(1).create_listener().unwrap();
    assert_eq!(l1.listen(sa(ib, 9001)), STATUS_SUCCESS);
    let l2 = c.adapter(1).create_listener().unwrap();
    assert_eq!(l2.listen(sa(ib, 9002)), STATUS_SUCCESS);
    let qa2 = p
        .pd_a
        .create_qp(&p.cq_a, &p.cq_a, QpSpec::new(QPC_A + 1))
        .unwrap();
    let qb2 = p
        .pd_b
        .create_qp(&p.cq_b, &p.cq_b, QpSpec::new(QPC_B + 1))
        .unwrap();
    let mut ends = Vec::new();
    for (qa, qb, l, port) in [(&p.qa, &p.qb, &l1, 9001), (&qa2, &qb2, &l2, 9002)] {
        let client = c.adapter(0).create_connector().unwrap();
        let connect = client.connect_shared_raw(qa, &se, sa(ib, port), 1, 1, &[]);
        let server = l.next_incoming();
        assert_eq!(server.peer_address(), Ok(at));
        let accept = server.accept_raw(qb, 1, 1, &[]);
        assert_eq!(connect.wait(), STATUS_SUCCESS);
        assert_eq!(client.complete_connect(), STATUS_SUCCESS);
        assert_eq!(accept.wait(), STATUS_SUCCESS);
        assert_eq!(client.local_address(), Ok(at));
        ends.push((client, server));
    }
    let la = c.adapter(0).create_listener().unwrap();
    assert_eq!(la.listen(at), STATUS_SHARING_VIOLATION);
    let closing = se.close_raw();
    assert_eq!(closing.inline, STATUS_PENDING, "its connectors are open");
    for (client, server) in ends.drain(..) {
        part(&c, &client, &server);
        assert_eq!(la.listen(at), STATUS_SHARING_VIOLATION);
        assert_eq!(client.close(), STATUS_SUCCESS);
        assert_eq!(server.close(), STATUS_SUCCESS);
    }
    closing.wait();
    assert_eq!(
        la.listen(at),
        STATUS_SUCCESS,
        "released with its last connector"
    );
    assert_eq!(la.close(), STATUS_SUCCESS);
    assert_eq!(l1.close(), STATUS_SUCCESS);
    assert_eq!(l2.close(), STATUS_SUCCESS);
    qa2.close();
    qb2.close();
    p.close();
    c.finish();
}

/// Ephemeral ports: every connect and listen with port 0 gets a distinct port of
/// 49152–65535 while in use, and all of them come back on close.
#[test]
fn ephemeral_ports_come_back() {
    let c = cm_cluster(false);
    let p = pair(&c);
    let (ia, ib) = (c.host(0).ip, c.host(1).ip);
    let engine = pvrdma_ndk::ndk::connect::engine(&c.host(1).ndk).unwrap();
    let mut ls = Vec::new();
    let mut ports = std::collections::BTreeSet::new();
    for _ in 0..20 {
        let l = c.adapter(1).create_listener().unwrap();
        assert_eq!(l.listen(sa(ib, 0)), STATUS_SUCCESS);
        let port = l.local_address().unwrap().port();
        assert!(port >= 49152);
        assert!(ports.insert(port), "port {port} given twice");
        ls.push(l);
    }
    assert_eq!(engine.live().3, 20);
    for l in ls {
        assert_eq!(l.close(), STATUS_SUCCESS);
    }
    assert_eq!(engine.live().3, 0);
    let ea = pvrdma_ndk::ndk::connect::engine(&c.host(0).ndk).unwrap();
    for _ in 0..5 {
        let client = c.adapter(0).create_connector().unwrap();
        assert_eq!(
            client.connect(&p.qa, sa(ia, 0), sa(ib, 1), 1, 1, &[]),
            STATUS_CONNECTION_REFUSED
        );
        assert_eq!(client.close(), STATUS_SUCCESS);
        assert_eq!(ea.live().3, 0, "the connector's port came back");
    }
    // The engines hold the driver device: let go before the leak checks.
    drop((engine, ea));
    p.close();
    c.finish();
}

/// Sequential connect / SEND / disconnect / close cycles, each on fresh QPs (a disconnected QP
/// is not reused, ndkpi.md §5.12): nothing accumulates but the CM's TIMEWAIT slots.
///
/// The QPs stay open until the end: the device hands a closed QP's number to the next QP at
/// once, and a REQ from a QPN whose last connection is still in TIMEWAIT at the peer is
/// refused as stale (REJ 10, cm.md §4.1) for ≈ 2–4 s (`reconnect_from_a_reused_qpn_*`).
#[test]
fn sequential_cycles_leave_nothing_behind() {
    let c = cm_cluster(false);
    let pd_a = c.adapter(0).create_pd().unwrap();
    let pd_b = c.adapter(1).create_pd().unwrap();
    let cq_a = c.adapter(0).create_cq(64, None).unwrap();
    let cq_b = c.adapter(1).create_cq(64, None).unwrap();
    let ma = Registered::new(c.host(0), &pd_a, 1, 0x1000_0000, LOCAL);
    let mb = Registered::new(c.host(1), &pd_b, 1, 0x2000_0000, LOCAL);
    let (ea, eb) = (
        pvrdma_ndk::ndk::connect::engine(&c.host(0).ndk).unwrap(),
        pvrdma_ndk::ndk::connect::engine(&c.host(1).ndk).unwrap(),
    );
    let mut qps = Vec::new();
    for i in 0..30u8 {
        let qa = pd_a.create_qp(&cq_a, &cq_a, QpSpec::new(QPC_A)).unwrap();
        let qb = pd_b.create_qp(&cq_b, &cq_b, QpSpec::new(QPC_B)).unwrap();
        let pair = cm_connect(&c, &qa, &qb);
        let sent = fill(&ma.mem, 0, i, 64);
        assert_eq!(qb.receive(1, &[mb.sge(0, 64)]), STATUS_SUCCESS);
        assert_eq!(qa.send(2, &[ma.sge(0, 64)], 0), STATUS_SUCCESS);
        assert_eq!(
            res(&cq_b.wait_results(1)[0]),
            (STATUS_SUCCESS, 64, QPC_B, 1)
        );
        assert_eq!(res(&cq_a.wait_results(1)[0]), (STATUS_SUCCESS, 0, QPC_A, 2));
        verify(&mb.mem, 0, &sent);
        pair.disconnect_and_close();
        qps.push((qa, qb));
        for e in [&ea, &eb] {
            let (_held, conns, listeners, endpoints) = e.live();
            assert_eq!((conns, listeners, endpoints), (0, 0, 0), "cycle {i}");
        }
    }
    let stats = ea.stats();
    assert_eq!((stats.mads_unsent, stats.release_failures), (0, 0));
    for (qa, qb) in qps {
        qa.close();
        qb.close();
    }
    drop((ea, eb));
    ma.close();
    mb.close();
    cq_a.close();
    cq_b.close();
    pd_a.close();
    pd_b.close();
    c.finish();
}

/// A QP closed and made again gets the same QPN from the device; connecting from it while
/// the peer still holds the previous connection in TIMEWAIT succeeds, as with Linux, whose
/// CM forgets a connection's remote QPN when it enters TIMEWAIT (only a live connection
/// naming the QPN makes a REQ stale).
#[test]
fn reconnect_from_a_reused_qpn_while_the_old_connection_is_in_timewait() {
    let c = cm_cluster(false);
    let p = pair(&c);
    let (ia, ib) = (c.host(0).ip, c.host(1).ip);
    let pair1 = cm_connect(&c, &p.qa, &p.qb);
    let at = pair1.listener.local_address().unwrap();
    let qpn = |q: &Qp| {
        let h = q.handle();
        c.host(q.host())
            .model
            .with_core(|core| core.qp_info(h))
            .unwrap()
            .qpn
    };
    let old = qpn(&p.qa);
    let l = c.adapter(1).create_listener().unwrap();
    assert_eq!(l.listen(sa(ib, 0)), STATUS_SUCCESS);
    let at2 = l.local_address().unwrap();
    assert_ne!(at, at2);
    pair1.disconnect_and_close();
    let Pair {
        pd_a,
        pd_b,
        cq_a,
        cq_b,
        qa,
        qb,
    } = p;
    qa.close();
    let qa = pd_a.create_qp(&cq_a, &cq_a, QpSpec::new(QPC_A)).unwrap();
    assert_eq!(qpn(&qa), old, "the device reuses the QPN");
    // The passive QP is new too: a QP connects once (the old one is in ERR).
    qb.close();
    let qb = pd_b.create_qp(&cq_b, &cq_b, QpSpec::new(QPC_B)).unwrap();
    let client = c.adapter(0).create_connector().unwrap();
    let connect = client.connect_raw(&qa, sa(ia, 0), at2, 1, 1, &[]);
    let server = l.next_incoming();
    let accept = server.accept_raw(&qb, 1, 1, &[]);
    assert_eq!(
        connect.wait(),
        STATUS_SUCCESS,
        "NdkConnect from the reused QPN"
    );
    assert_eq!(client.complete_connect(), STATUS_SUCCESS);
    assert_eq!(accept.wait(), STATUS_SUCCESS);
    assert_eq!(l.incoming.calls(), 1);
    common::ndk::CmPair {
        client,
        server,
        listener: l,
    }
    .disconnect_and_close();
    Pair {
        pd_a,
        pd_b,
        cq_a,
        cq_b,
        qa,
        qb,
    }
    .close();
    c.finish();
}

/// The address and connection-data queries before there is anything to report, and with a
/// buffer too small for the address (STATUS_BUFFER_TOO_SMALL with the size needed).
#[test]
fn queries_before_a_connection_and_short_address_buffers() {
    let c = cm_cluster(true);
    let client = c.adapter(0).create_connector().unwrap();
    assert_eq!(client.local_address(), Err(STATUS_CONNECTION_INVALID));
    assert_eq!(client.peer_address(), Err(STATUS_CONNECTION_INVALID));
    assert_eq!(
        client.connection_data(Some(56)).status,
        STATUS_CONNECTION_INVALID
    );
    let l = c.adapter(1).create_listener().unwrap();
    assert_eq!(l.local_address(), Err(STATUS_INVALID_DEVICE_STATE));
    assert_eq!(l.listen(sa(c.host(1).ip, 0)), STATUS_SUCCESS);
    let mut buf = [0u8; 28];
    // SAFETY: a live listener of this provider.
    let table = unsafe { (*l.ptr).Dispatch };
    // SAFETY: its dispatch table is a static of the provider.
    let get = unsafe { (*table).NdkGetLocalAddress };
    let mut len: ULONG = 27;
    // SAFETY: a live listener; the buffer holds `len` bytes.
    let st = unsafe { get(l.ptr, buf.as_mut_ptr().cast(), &mut len) };
    assert_eq!((st, len), (STATUS_BUFFER_TOO_SMALL, 28), "an IPv6 address");
    assert_eq!(buf, [0; 28], "nothing written");
    let mut len: ULONG = 28;
    // SAFETY: as above.
    let st = unsafe { get(l.ptr, buf.as_mut_ptr().cast(), &mut len) };
    assert_eq!((st, len), (STATUS_SUCCESS, 28));
    assert_eq!(u16::from_ne_bytes([buf[0], buf[1]]), AF_INET6);
    assert_eq!(buf[8..24], c.host(1).gid);
    let se = c
        .adapter(0)
        .create_shared_endpoint(sa(c.host(0).ip, 0))
        .unwrap();
    let any = IpAddr::V6(Ipv6Addr::UNSPECIFIED);
    assert_eq!(
        c.adapter(0).create_shared_endpoint(sa(any, 0)).err(),
        Some(STATUS_INVALID_ADDRESS)
    );
    let taken = se.local_address().unwrap();
    assert_eq!(
        c.adapter(0).create_shared_endpoint(taken).err(),
        Some(STATUS_SHARING_VIOLATION)
    );
    assert_eq!(se.close(), STATUS_SUCCESS);
    assert_eq!(l.close(), STATUS_SUCCESS);
    assert_eq!(client.close(), STATUS_SUCCESS);
    c.finish();
}

/// The MADs host `h` sent so far.
fn mads_out(c: &Cluster, h: usize) -> u64 {
    common::ndk::engine_stats(c.host(h)).mads_out
}

/// One QP serves one connector: NdkConnect and NdkAccept naming a QP another open
/// connector holds fail inline with STATUS_INVALID_DEVICE_STATE, with no MAD sent and the
/// first connection going on untouched (connector module docs).
#[test]
fn a_qp_held_by_another_connector_is_refused_inline() {
    let c = cm_cluster(false);
    let p = pair(&c);
    let (ia, ib) = (c.host(0).ip, c.host(1).ip);
    let l = c.adapter(1).create_listener().unwrap();
    assert_eq!(l.listen(sa(ib, 445)), STATUS_SUCCESS);
    let client = c.adapter(0).create_connector().unwrap();
    let connect = client.connect_raw(&p.qa, sa(ia, 0), sa(ib, 445), 1, 1, &[]);
    assert_eq!(connect.inline, STATUS_PENDING);
    let intruder = c.adapter(0).create_connector().unwrap();
    let sent = mads_out(&c, 0);
    assert_eq!(
        intruder
            .connect_raw(&p.qa, sa(ia, 0), sa(ib, 445), 1, 1, &[])
            .inline,
        STATUS_INVALID_DEVICE_STATE
    );
    assert_eq!(
        mads_out(&c, 0),
        sent,
        "nothing sent for the refused connect"
    );
    let server = l.next_incoming();
    assert_eq!(server.accept_raw(&p.qb, 1, 1, &[]).inline, STATUS_PENDING);
    assert_eq!(connect.wait(), STATUS_SUCCESS);
    assert_eq!(client.complete_connect(), STATUS_SUCCESS);
    // A second incoming connection may not take the QP the first one was accepted on.
    let qa2 = p
        .pd_a
        .create_qp(&p.cq_a, &p.cq_a, QpSpec::new(QPC_A + 1))
        .unwrap();
    let client2 = c.adapter(0).create_connector().unwrap();
    let connect2 = client2.connect_raw(&qa2, sa(ia, 0), sa(ib, 445), 1, 1, &[]);
    let server2 = l.next_incoming();
    let sent = mads_out(&c, 1);
    assert_eq!(
        server2.accept_raw(&p.qb, 1, 1, &[]).inline,
        STATUS_INVALID_DEVICE_STATE
    );
    assert_eq!(mads_out(&c, 1), sent, "nothing sent for the refused accept");
    assert_eq!(server2.reject(&[]), STATUS_SUCCESS, "still incoming");
    assert_eq!(connect2.wait(), STATUS_CONNECTION_REFUSED);
    // The first connection carries data both ways and parts as usual.
    send_both_ways(&c, &p);
    part(&c, &client, &server);
    for x in [client, server, client2, server2, intruder] {
        assert_eq!(x.close(), STATUS_SUCCESS);
    }
    assert_eq!(l.close(), STATUS_SUCCESS);
    qa2.close();
    p.close();
    c.finish();
}

/// A QP connects once (ndkpi.md §5.12): after a disconnect its QP is in ERR, and NdkConnect
/// or NdkAccept naming it fail inline with STATUS_INVALID_DEVICE_STATE before any MAD goes
/// out, instead of a REQ whose NdkCompleteConnect would fail. A connect that failed before
/// its REQ leaves its QP usable.
#[test]
fn a_qp_that_connected_once_is_refused_before_any_mad() {
    let c = cm_cluster(false);
    let p = pair(&c);
    let (ia, ib) = (c.host(0).ip, c.host(1).ip);
    cm_connect(&c, &p.qa, &p.qb).disconnect_and_close();
    let l = c.adapter(1).create_listener().unwrap();
    assert_eq!(l.listen(sa(ib, 445)), STATUS_SUCCESS);
    let client = c.adapter(0).create_connector().unwrap();
    let sent = mads_out(&c, 0);
    assert_eq!(
        client
            .connect_raw(&p.qa, sa(ia, 0), sa(ib, 445), 1, 1, &[])
            .inline,
        STATUS_INVALID_DEVICE_STATE
    );
    assert_eq!(mads_out(&c, 0), sent, "no REQ for a used QP");
    assert_eq!(l.incoming.calls(), 0);
    // A fresh QP connects; the passive side's used QP is refused, a fresh one accepted.
    let qa2 = p
        .pd_a
        .create_qp(&p.cq_a, &p.cq_a, QpSpec::new(QPC_A + 1))
        .unwrap();
    let qb2 = p
        .pd_b
        .create_qp(&p.cq_b, &p.cq_b, QpSpec::new(QPC_B + 1))
        .unwrap();
    // An unreachable destination fails before the REQ: the QP is left as it was.
    let stranger = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 99));
    assert_eq!(
        client.connect(&qa2, sa(ia, 0), sa(stranger, 445), 1, 1, &[]),
        STATUS_HOST_UNREACHABLE
    );
    let connect = client.connect_raw(&qa2, sa(ia, 0), sa(ib, 445), 1, 1, &[]);
    let server = l.next_incoming();
    let sent = mads_out(&c, 1);
    assert_eq!(
        server.accept_raw(&p.qb, 1, 1, &[]).inline,
        STATUS_INVALID_DEVICE_STATE
    );
    assert_eq!(mads_out(&c, 1), sent, "no REP for a used QP");
    let accept = server.accept_raw(&qb2, 1, 1, &[]);
    assert_eq!(connect.wait(), STATUS_SUCCESS);
    assert_eq!(client.complete_connect(), STATUS_SUCCESS);
    assert_eq!(accept.wait(), STATUS_SUCCESS);
    part(&c, &client, &server);
    assert_eq!(client.close(), STATUS_SUCCESS);
    assert_eq!(server.close(), STATUS_SUCCESS);
    assert_eq!(l.close(), STATUS_SUCCESS);
    qa2.close();
    qb2.close();
    p.close();
    c.finish();
}

/// Two connects through one shared endpoint to the same destination would be one 4-tuple:
/// the second fails inline with STATUS_ADDRESS_ALREADY_EXISTS (ndkpi.md §4.5, §5.10) and
/// sends nothing; the same connector and QP connect once the first connector closed.
#[test]
fn shared_endpoint_refuses_a_duplicate_four_tuple() {
    let c = cm_cluster(false);
    let p = pair(&c);
    let ib = c.host(1).ip;
    let se = c
        .adapter(0)
        .create_shared_endpoint(sa(c.host(0).ip, 0))
        .unwrap();
    let l = c.adapter(1).create_listener().unwrap();
    assert_eq!(l.listen(sa(ib, 9001)), STATUS_SUCCESS);
    let qa2 = p
        .pd_a
        .create_qp(&p.cq_a, &p.cq_a, QpSpec::new(QPC_A + 1))
        .unwrap();
    let qb2 = p
        .pd_b
        .create_qp(&p.cq_b, &p.cq_b, QpSpec::new(QPC_B + 1))
        .unwrap();
    let first = c.adapter(0).create_connector().unwrap();
    let connect = first.connect_shared_raw(&p.qa, &se, sa(ib, 9001), 1, 1, &[]);
    assert_eq!(connect.inline, STATUS_PENDING);
    let second = c.adapter(0).create_connector().unwrap();
    let sent = mads_out(&c, 0);
    assert_eq!(
        second
            .connect_shared_raw(&qa2, &se, sa(ib, 9001), 1, 1, &[])
            .inline,
        STATUS_ADDRESS_ALREADY_EXISTS
    );
    assert_eq!(mads_out(&c, 0), sent, "nothing sent for the duplicate");
    let server = l.next_incoming();
    let accept = server.accept_raw(&p.qb, 1, 1, &[]);
    assert_eq!(connect.wait(), STATUS_SUCCESS);
    assert_eq!(first.complete_connect(), STATUS_SUCCESS);
    assert_eq!(accept.wait(), STATUS_SUCCESS);
    assert_eq!(l.incoming.calls(), 1);
    let engine = pvrdma_ndk::ndk::connect::engine(&c.host(0).ndk).unwrap();
    assert_eq!(engine.tuples_in_use(), 1);
    part(&c, &first, &server);
    assert_eq!(first.close(), STATUS_SUCCESS);
    assert_eq!(server.close(), STATUS_SUCCESS);
    assert_eq!(engine.tuples_in_use(), 0, "given back with its connector");
    // The refused connector and its QP connect to the same destination now.
    let connect = second.connect_shared_raw(&qa2, &se, sa(ib, 9001), 1, 1, &[]);
    let server = l.next_incoming();
    let accept = server.accept_raw(&qb2, 1, 1, &[]);
    assert_eq!(connect.wait(), STATUS_SUCCESS);
    assert_eq!(second.complete_connect(), STATUS_SUCCESS);
    assert_eq!(accept.wait(), STATUS_SUCCESS);
    part(&c, &second, &server);
    assert_eq!(second.close(), STATUS_SUCCESS);
    assert_eq!(server.close(), STATUS_SUCCESS);
    assert_eq!(se.close(), STATUS_SUCCESS);
    assert_eq!(l.close(), STATUS_SUCCESS);
    assert_eq!(engine.tuples_in_use(), 0);
    // The engine holds the driver device: let go before the leak checks.
    drop(engine);
    qa2.close();
    qb2.close();
    p.close();
    c.finish();
}

/// What the victim's DisconnectEvent callback does: closes `others` (each close queues a
/// DREQ and an ERR on the CM, which no one performs while the callback runs on the thread
/// pumping), then answers the peer's DREQ with NdkDisconnect.
struct AnswerFromTheCallback {
    victim: *mut NDK_CONNECTOR,
    others: Vec<*mut NDK_CONNECTOR>,
    /// CloseCompletions of the closes that pended.
    closes: std::sync::atomic::AtomicU32,
    close_inline: Vec<NTSTATUS>,
    disconnect: std::sync::Arc<common::ndk::RequestCtx>,
    disconnect_inline: Option<NTSTATUS>,
}

fn connector_dispatch(c: *mut NDK_CONNECTOR) -> &'static NDK_CONNECTOR_DISPATCH {
    // SAFETY: a live connector (the caller's).
    let table = unsafe { (*c).Dispatch };
    // SAFETY: a connector's dispatch table is static.
    unsafe { &*table }
}

unsafe extern "system" fn count_close(ctx: PVOID) {
    // SAFETY: the context is the counter of a live `AnswerFromTheCallback`.
    let n = unsafe { &*ctx.cast::<std::sync::atomic::AtomicU32>() };
    n.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
}

unsafe extern "system" fn answer_from_the_callback(ctx: PVOID) {
    // SAFETY: the context is the test's `AnswerFromTheCallback`, which outlives the
    // connector, and nothing else touches it while the callback runs.
    let a = unsafe { &mut *ctx.cast::<AnswerFromTheCallback>() };
    let counter = std::ptr::from_ref(&a.closes) as PVOID;
    for &o in &a.others {
        // SAFETY: a live connector the test handed over to this callback, closed once.
        let st =
            unsafe { (connector_dispatch(o).NdkCloseConnector)(o.cast(), count_close, counter) };
        a.close_inline.push(st);
    }
    let rctx = std::sync::Arc::as_ptr(&a.disconnect) as PVOID;
    // SAFETY: the victim connector is live (its callback runs).
    let st = unsafe {
        (connector_dispatch(a.victim).NdkDisconnect)(a.victim, common::ndk::on_request, rctx)
    };
    a.disconnect_inline = Some(st);
}

/// A connection's two connectors: (client, server).
type Ends = (Connector, Connector);

/// `n` connections from host 0 to `l` on host 1, established, each on a QP pair of its own
/// over `p`'s PDs and CQs: the connections whose servers a DisconnectEvent callback closes
/// to fill the CM's action queue.
fn connect_others(c: &Cluster, p: &Pair, l: &Listener, n: usize) -> (Vec<(Qp, Qp)>, Vec<Ends>) {
    let (ia, ib) = (c.host(0).ip, c.host(1).ip);
    let mut qps = Vec::new();
    let mut ends = Vec::new();
    for i in 0..n {
        let qa = p
            .pd_a
            .create_qp(&p.cq_a, &p.cq_a, QpSpec::new(QPC_A + 1 + i))
            .unwrap();
        let qb = p
            .pd_b
            .create_qp(&p.cq_b, &p.cq_b, QpSpec::new(QPC_B + 1 + i))
            .unwrap();
        let client = c.adapter(0).create_connector().unwrap();
        let connect = client.connect_raw(&qa, sa(ia, 0), sa(ib, 445), 1, 1, &[]);
        let server = l.next_incoming();
        let accept = server.accept_raw(&qb, 1, 1, &[]);
        assert_eq!(connect.wait(), STATUS_SUCCESS);
        assert_eq!(client.complete_connect(), STATUS_SUCCESS);
        assert_eq!(accept.wait(), STATUS_SUCCESS);
        qps.push((qa, qb));
        ends.push((client, server));
    }
    (qps, ends)
}

/// The `victim`'s NdkAccept on `p.qb` with `on_disconnect(ctx)` as its DisconnectEvent
/// callback, and the `client`'s side of it (its pending NdkConnect), to both ends
/// connected.
fn accept_calling_back(
    c: &Cluster,
    p: &Pair,
    (client, connect): (&Connector, common::ndk::Request),
    victim: &Connector,
    on_disconnect: NDK_FN_DISCONNECT_EVENT_CALLBACK,
    ctx: PVOID,
) {
    let accepted = std::sync::Arc::new(common::ndk::RequestCtx::default());
    // SAFETY: live connector and QP; the callback context outlives the connector.
    let inline = unsafe {
        (connector_dispatch(victim.ptr).NdkAccept)(
            victim.ptr,
            p.qb.ptr,
            1,
            1,
            std::ptr::null(),
            0,
            Some(on_disconnect),
            ctx,
            common::ndk::on_request,
            std::sync::Arc::as_ptr(&accepted) as PVOID,
        )
    };
    assert_eq!(inline, STATUS_PENDING);
    assert_eq!(connect.wait(), STATUS_SUCCESS);
    assert_eq!(client.complete_connect(), STATUS_SUCCESS);
    c.wait_for("NdkAccept", || accepted.calls() == 1);
    assert_eq!(accepted.status(), Some(STATUS_SUCCESS));
}

/// Closes the clients of [`connect_others`] once each heard its DisconnectEvent (their
/// servers were closed from the callback; only the wrappers are left).
fn close_others(c: &Cluster, ends: Vec<Ends>) {
    for (client, _server) in ends {
        c.wait_for("the client's DisconnectEvent", || {
            client.disconnects.count() == 1
        });
        assert_eq!(client.close(), STATUS_SUCCESS);
    }
}

/// NdkDisconnect answering a peer's DREQ while the CM's action queue is full (here: from
/// the DisconnectEvent callback, after closing 31 connections from it) fails inline with
/// STATUS_DEVICE_BUSY and changes nothing, rather than counting the connection as done
/// without its DREP; retried, it sends the DREP and the peer's NdkDisconnect succeeds.
#[test]
fn a_disconnect_with_the_action_queue_full_keeps_the_drep_owed() {
    const OTHERS: usize = 31;
    let c = cm_cluster(false);
    let p = pair(&c);
    let (ia, ib) = (c.host(0).ip, c.host(1).ip);
    let l = c.adapter(1).create_listener().unwrap();
    assert_eq!(l.listen(sa(ib, 445)), STATUS_SUCCESS);
    let (qps, ends) = connect_others(&c, &p, &l, OTHERS);
    let client = c.adapter(0).create_connector().unwrap();
    let connect = client.connect_raw(&p.qa, sa(ia, 0), sa(ib, 445), 1, 1, &[]);
    let victim = l.next_incoming();
    let mut answer = Box::new(AnswerFromTheCallback {
        victim: victim.ptr,
        others: ends.iter().map(|(_, s)| s.ptr).collect(),
        closes: std::sync::atomic::AtomicU32::new(0),
        close_inline: Vec::new(),
        disconnect: std::sync::Arc::new(common::ndk::RequestCtx::default()),
        disconnect_inline: None,
    });
    let answer_ptr: *mut AnswerFromTheCallback = &mut *answer;
    accept_calling_back(
        &c,
        &p,
        (&client, connect),
        &victim,
        answer_from_the_callback,
        answer_ptr.cast(),
    );
    let d = client.disconnect_raw();
    assert_eq!(d.inline, STATUS_PENDING);
    c.wait_for("the victim's DisconnectEvent", || {
        // SAFETY: read after the callback returned (it sets this last).
        unsafe { (*answer_ptr).disconnect_inline.is_some() }
    });
    c.settle();
    // SAFETY: the callback ran once and returned.
    let a = unsafe { &*answer_ptr };
    assert_eq!(a.close_inline.len(), OTHERS);
    assert_eq!(
        common::ndk::engine_stats(c.host(1)).release_failures,
        0,
        "every close found room"
    );
    assert_eq!(a.disconnect_inline, Some(STATUS_DEVICE_BUSY));
    assert_eq!(a.disconnect.calls(), 0, "refused inline, no completion");
    // Retried with the queue drained: the DREP goes out and both sides are done.
    assert_eq!(victim.disconnect(), STATUS_SUCCESS);
    assert_eq!(d.wait(), STATUS_SUCCESS, "the peer got its DREP");
    let pended = a
        .close_inline
        .iter()
        .filter(|&&s| s == STATUS_PENDING)
        .count() as u32;
    let inline_ok = a
        .close_inline
        .iter()
        .filter(|&&s| s == STATUS_SUCCESS)
        .count() as u32;
    assert_eq!(pended + inline_ok, OTHERS as u32);
    c.wait_for("the closes that pended", || {
        a.closes.load(std::sync::atomic::Ordering::SeqCst) == pended
    });
    close_others(&c, ends);
    assert_eq!(client.close(), STATUS_SUCCESS);
    assert_eq!(victim.close(), STATUS_SUCCESS);
    assert_eq!(l.close(), STATUS_SUCCESS);
    drop(answer);
    for (qa, qb) in qps {
        qa.close();
        qb.close();
    }
    p.close();
    c.finish();
}

/// The RTU is lost and the client sends first (issue 22 item 6): the server's QP, waiting in
/// RTR since its REP, receives the SEND, the device raises COMM_EST (pvrdma.md M22), and the
/// connection engine takes it for the RTU: the QP moves to RTS and NdkAccept completes at
/// once, in virtual time far below the REP's 4.096 s retransmission that used to finish it
/// (the duplicate REP's answer, an RTU); the data arrives intact, and the server can answer.
#[test]
fn a_lost_rtu_is_replaced_by_the_first_data_and_accept_completes_at_once() {
    let c = Cluster::with(ClusterConfig {
        cm: true,
        ..ClusterConfig::virtual_time(Mode::Deterministic, 2)
    });
    let p = pair(&c);
    let (ia, ib) = (c.host(0).ip, c.host(1).ip);
    let l = c.adapter(1).create_listener().unwrap();
    assert_eq!(l.listen(sa(ib, 445)), STATUS_SUCCESS);
    let client = c.adapter(0).create_connector().unwrap();
    let connect = client.connect_raw(&p.qa, sa(ia, 0), sa(ib, 445), 1, 1, &[]);
    let server = l.next_incoming();
    let accept = server.accept_raw(&p.qb, 1, 1, &[]);
    assert_eq!(connect.wait(), STATUS_SUCCESS);
    assert_eq!(accept.ctx.calls(), 0, "no RTU yet");
    let ma = Registered::new(c.host(0), &p.pd_a, 1, 0x1000_0000, LOCAL);
    let mb = Registered::new(c.host(1), &p.pd_b, 1, 0x2000_0000, LOCAL);
    assert_eq!(p.qb.receive(1, &[mb.sge(0, 1024)]), STATUS_SUCCESS);
    // Every frame from host 0 to host 1 is lost while NdkCompleteConnect sends the RTU.
    let dropped = |c: &Cluster| c.world.counters(0).port.tx.dropped.fault;
    c.world
        .set_pair_faults(0, 1, pvrdma_sim::fabric::FaultConfig::none().with_drop(1.0));
    assert_eq!(client.complete_connect(), STATUS_SUCCESS);
    c.wait_for("the RTU lost", || dropped(&c) == 1);
    c.world.clear_faults();
    let start = c.pump().now_ns();
    let ab = fill(&ma.mem, 0, 0x5A, 1000);
    assert_eq!(p.qa.send(3, &[ma.sge(0, 1000)], 0), STATUS_SUCCESS);
    assert_eq!(accept.wait(), STATUS_SUCCESS, "NdkAccept");
    let took = c.pump().now_ns() - start;
    assert!(
        took < 100_000_000,
        "NdkAccept {took} ns after the data: COMM_EST, not the REP's retransmission"
    );
    assert_eq!(dropped(&c), 1, "only the RTU was lost");
    let r = p.cq_b.wait_results(1);
    assert_eq!(res(&r[0]), (STATUS_SUCCESS, 1000, QPC_B, 1));
    verify(&mb.mem, 0, &ab);
    let r = p.cq_a.wait_results(1);
    assert_eq!(res(&r[0]), (STATUS_SUCCESS, 0, QPC_A, 3));
    // The server's QP is in RTS: it answers.
    assert_eq!(p.qa.receive(2, &[ma.sge(2048, 1024)]), STATUS_SUCCESS);
    let ba = fill(&mb.mem, 2048, 0x3C, 700);
    assert_eq!(p.qb.send(4, &[mb.sge(2048, 700)], 0), STATUS_SUCCESS);
    let r = p.cq_a.wait_results(1);
    assert_eq!(res(&r[0]), (STATUS_SUCCESS, 700, QPC_A, 2));
    let r = p.cq_b.wait_results(1);
    assert_eq!(res(&r[0]), (STATUS_SUCCESS, 0, QPC_B, 4));
    verify(&ma.mem, 2048, &ba);
    part(&c, &client, &server);
    assert_eq!(client.close(), STATUS_SUCCESS);
    assert_eq!(server.close(), STATUS_SUCCESS);
    assert_eq!(l.close(), STATUS_SUCCESS);
    ma.close();
    mb.close();
    p.close();
    c.finish();
}

/// What the victim's DisconnectEvent callback does here: closes `others` (each queues a
/// DREQ and an ERR on the CM, which no one performs while the callback runs on the thread
/// pumping), then closes the victim itself, from its own callback.
struct CloseFromTheCallback {
    victim: *mut NDK_CONNECTOR,
    others: Vec<*mut NDK_CONNECTOR>,
    closes: std::sync::atomic::AtomicU32,
    close_inline: Vec<NTSTATUS>,
    victim_close: Option<NTSTATUS>,
}

unsafe extern "system" fn close_from_the_callback(ctx: PVOID) {
    // SAFETY: the context is the test's `CloseFromTheCallback`, which outlives the
    // connectors, and nothing else touches it while the callback runs.
    let a = unsafe { &mut *ctx.cast::<CloseFromTheCallback>() };
    let counter = std::ptr::from_ref(&a.closes) as PVOID;
    for &o in &a.others {
        // SAFETY: a live connector the test handed over to this callback, closed once.
        let st =
            unsafe { (connector_dispatch(o).NdkCloseConnector)(o.cast(), count_close, counter) };
        a.close_inline.push(st);
    }
    // SAFETY: the victim is live (its callback runs); closed once, here.
    let st = unsafe {
        (connector_dispatch(a.victim).NdkCloseConnector)(a.victim.cast(), count_close, counter)
    };
    a.victim_close = Some(st);
}

/// A connector closed from inside its own DisconnectEvent while the CM's action queue is
/// full (issue 22 item 7): its release cannot wait for room (the queue drains on this very
/// thread, after the callback), so the CM defers it to the next action taken with room,
/// and the connection's slot is freed once its TIMEWAIT ends. Before, the release was
/// retried 10,000 times in vain and the slot stayed owned for good (counted in
/// `release_failures`): a leak per occurrence, the table's capacity shrinking.
#[test]
fn a_connector_closed_from_its_own_disconnect_event_with_the_queue_full_frees_its_slot() {
    const OTHERS: usize = 31;
    let c = Cluster::with(ClusterConfig {
        cm: true,
        ..ClusterConfig::virtual_time(Mode::Deterministic, 2)
    });
    let p = pair(&c);
    let (ia, ib) = (c.host(0).ip, c.host(1).ip);
    let l = c.adapter(1).create_listener().unwrap();
    assert_eq!(l.listen(sa(ib, 445)), STATUS_SUCCESS);
    let (qps, ends) = connect_others(&c, &p, &l, OTHERS);
    let client = c.adapter(0).create_connector().unwrap();
    let connect = client.connect_raw(&p.qa, sa(ia, 0), sa(ib, 445), 1, 1, &[]);
    let victim = l.next_incoming();
    let mut cb = Box::new(CloseFromTheCallback {
        victim: victim.ptr,
        others: ends.iter().map(|(_, s)| s.ptr).collect(),
        closes: std::sync::atomic::AtomicU32::new(0),
        close_inline: Vec::new(),
        victim_close: None,
    });
    let cb_ptr: *mut CloseFromTheCallback = &mut *cb;
    accept_calling_back(
        &c,
        &p,
        (&client, connect),
        &victim,
        close_from_the_callback,
        cb_ptr.cast(),
    );
    let held_before = common::ndk::engine_live(c.host(1)).0;
    assert_eq!(held_before, OTHERS + 1);
    let d = client.disconnect_raw();
    assert_eq!(d.inline, STATUS_PENDING);
    c.wait_for("the victim's DisconnectEvent", || {
        // SAFETY: read after the callback returned (it sets this last).
        unsafe { (*cb_ptr).victim_close.is_some() }
    });
    // SAFETY: the callback ran once and returned.
    let a = unsafe { &*cb_ptr };
    assert_eq!(a.close_inline.len(), OTHERS);
    assert_eq!(
        a.victim_close,
        Some(STATUS_PENDING),
        "closed from its own callback"
    );
    let pended = a
        .close_inline
        .iter()
        .filter(|&&s| s == STATUS_PENDING)
        .count() as u32;
    c.wait_for("the closes that pended", || {
        a.closes.load(std::sync::atomic::Ordering::SeqCst) == pended + 1
    });
    // The victim's close told the peer (REJ/DREQ/DREP as the state asks), so the client's
    // NdkDisconnect ends; everything goes through TIMEWAIT and out of the table.
    assert_eq!(d.wait(), STATUS_SUCCESS);
    close_others(&c, ends);
    assert_eq!(client.close(), STATUS_SUCCESS);
    c.settle();
    assert_eq!(
        common::ndk::engine_stats(c.host(1)).release_failures,
        0,
        "every release performed"
    );
    assert_eq!(
        common::ndk::engine_live(c.host(1)),
        (0, 0, 1, 1),
        "no CM slot left (the listener's endpoint only)"
    );
    assert_eq!(l.close(), STATUS_SUCCESS);
    drop(victim);
    drop(cb);
    for (qa, qb) in qps {
        qa.close();
        qb.close();
    }
    p.close();
    c.finish();
}
