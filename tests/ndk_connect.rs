//! Connection management end to end (ndkpi.md §5.10–5.12, §7.4; cm.md §1.2–1.4): connectors,
//! listeners and shared endpoints driven only through their dispatch tables, between hosts of
//! the model's fabric whose connection engines speak the IB CM over QP1.

mod common;
mod ndk_dp;

use common::Mode;
use common::ndk::{Cluster, ClusterConfig, Registered, cm_connect, fill, sa, verify};
use ndk_dp::*;
use pvrdma_ndk::ndkpi::*;

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

fn connect_send_disconnect(ipv6: bool) {
    let c = cm_cluster(ipv6);
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
    connect_send_disconnect(false);
}

#[test]
fn ipv6_connect_accept_complete_send_disconnect() {
    connect_send_disconnect(true);
}

#[test]
fn listen_address_unused() {
    let _ = sa;
}
