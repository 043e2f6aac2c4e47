//! Connection churn and many connections at once (issue 11): connectors and listeners
//! driven only through their dispatch tables between two hosts of the model's fabric, in
//! virtual time, with nothing left behind — no connector, listener or local endpoint in
//! the engines, no CM connection once TIMEWAIT has run out, no GID binding beyond the
//! interface's, no device QP, allocation stats back at their baseline
//! (`Cluster::finish`).

mod common;
mod ndk_cm_mesh;

use std::collections::HashSet;

use common::Mode;
use common::ndk::{Cluster, ClusterConfig, QpSpec, engine_live, sa};
use ndk_cm_mesh::Mesh;
use pvrdma_ndk::ndkpi::*;

fn cluster() -> Cluster {
    Cluster::with(ClusterConfig {
        cm: true,
        ..ClusterConfig::virtual_time(Mode::Deterministic, 2)
    })
}

/// `cycles` times: NdkListen on host 1, NdkConnect from host 0, NdkAccept, NdkCompleteConnect,
/// one SEND each way, NdkDisconnect on both sides, every connector, QP and the listener
/// closed; after each cycle the engines hold no connector, listener or endpoint, the
/// device no QP beyond the baseline, and the GID table what it held before.
fn churn(cycles: usize) {
    let c = cluster();
    let mut mesh = Mesh::new(&c, 2);
    let gids: Vec<_> = (0..2)
        .map(|h| c.host(h).model.with_core(|m| m.gids()))
        .collect();
    assert!(
        gids.iter().all(|g| g.len() == 1),
        "one GID per host: {gids:?}"
    );
    let mut client_ports = HashSet::new();
    let mut listen_ports = HashSet::new();
    let mut most_held = 0;
    for cycle in 0..cycles {
        mesh.sides[1].listen(&c, 1);
        mesh.connect(&c, 0, 1);
        mesh.establish(&c);
        client_ports.insert(mesh.links[0].client_at.unwrap().port());
        listen_ports.insert(mesh.sides[1].at.unwrap().port());
        mesh.transfer(&c);
        mesh.disconnect(&c);
        mesh.close_links(&c);
        mesh.sides[1].unlisten();
        for (h, want) in gids.iter().enumerate() {
            let (held, conns, listeners, endpoints) = engine_live(c.host(h));
            assert_eq!(
                (conns, listeners, endpoints),
                (0, 0, 0),
                "cycle {cycle}, host {h}: connection objects or endpoints left"
            );
            most_held = most_held.max(held);
            assert_eq!(
                c.host(h).model.with_core(|m| m.gids()),
                *want,
                "cycle {cycle}, host {h}: GID table"
            );
        }
    }
    // Ephemeral ports are handed out cyclically: every cycle took a fresh one on each side.
    assert_eq!(client_ports.len(), cycles);
    assert_eq!(listen_ports.len(), cycles);
    eprintln!(
        "{cycles} cycles in {} virtual ms; at most {most_held} CM connections held (TIMEWAIT)",
        c.pump().now_ns() / 1_000_000
    );
    mesh.close(&c);
    c.finish();
}

#[test]
fn churn_100_cycles() {
    churn(100);
}

/// The full 1,000 cycles (`.ci/run` runs it in release mode).
#[test]
#[ignore = "1,000 cycles: run in release mode (.ci/run)"]
fn churn_1000_cycles() {
    churn(1000);
}

/// 64 connections between two hosts, 32 each way, every NdkConnect issued (interleaved
/// between the hosts, so both connect to each other at once) before any completes; every
/// connection moves data, then all disconnect and close.
#[test]
fn sixty_four_simultaneous_connections_both_ways() {
    let c = cluster();
    let mut mesh = Mesh::new(&c, 2);
    mesh.listen_all(&c);
    for _ in 0..32 {
        mesh.connect(&c, 0, 1);
        mesh.connect(&c, 1, 0);
    }
    mesh.assert_all_outstanding();
    mesh.establish(&c);
    let clients: HashSet<_> = mesh.links.iter().map(|l| l.client_at.unwrap()).collect();
    assert_eq!(clients.len(), 64, "64 distinct client endpoints");
    mesh.transfer(&c);
    mesh.disconnect(&c);
    mesh.close_links(&c);
    mesh.close(&c);
    c.finish();
}

/// Churn at the consumer's pace: cycle after cycle with no pause, so virtual time never
/// runs through TIMEWAIT (≈ 2 s; every wait is for a fact, none settles). Each cycle leaves
/// one connection in TIMEWAIT on each host, holding one of the engine's slots
/// (`EngineConfig::capacity`, 256): the cycle after the table filled, NdkConnect fails
/// inline with STATUS_INSUFFICIENT_RESOURCES, leaving nothing reserved; once TIMEWAIT has
/// run out, connections succeed again. So an adapter sustains at most capacity / TIMEWAIT
/// ≈ 128 new connections a second. QPs stay open to the end: a pended close would settle
/// the cluster.
#[test]
fn churn_faster_than_timewait_fills_the_table_until_timewait_ends() {
    let c = cluster();
    let capacity = pvrdma_ndk::ndk::connect::engine(&c.host(0).ndk)
        .unwrap()
        .config()
        .capacity;
    let mut mesh = Mesh::new(&c, 2);
    mesh.sides[1].listen(&c, 1);
    let mut qps = Vec::new();
    let start = c.pump().now_ns();
    for cycle in 0..capacity {
        mesh.connect(&c, 0, 1);
        mesh.establish(&c);
        let l = mesh.links.pop().unwrap();
        let server = l.server.unwrap();
        let r = l.client.disconnect_raw();
        c.wait_for("the DisconnectEvent", || server.disconnects.count() == 1);
        assert_eq!(server.disconnect(), STATUS_SUCCESS, "cycle {cycle}");
        assert_eq!(r.wait(), STATUS_SUCCESS, "cycle {cycle}");
        assert_eq!(l.client.close(), STATUS_SUCCESS);
        assert_eq!(server.close(), STATUS_SUCCESS);
        qps.push(l.client_qp);
        qps.push(l.server_qp);
        let held = (engine_live(c.host(0)).0, engine_live(c.host(1)).0);
        assert_eq!(held, (cycle + 1, cycle + 1), "cycle {cycle}: in TIMEWAIT");
    }
    let took = c.pump().now_ns() - start;
    assert!(took < 2_000_000_000, "faster than one TIMEWAIT: {took} ns");
    // The table is full of TIMEWAIT: the next connect is refused at once.
    let side = &mesh.sides[0];
    let qp = side
        .pd
        .create_qp(&side.cq, &side.cq, QpSpec::new(0xF0))
        .unwrap();
    let connector = c.host(0).adapter.create_connector().unwrap();
    let at = mesh.sides[1].at.unwrap();
    let r = connector.connect_raw(&qp, sa(c.host(0).ip, 0), at, 8, 8, &[]);
    assert_eq!(
        r.inline, STATUS_INSUFFICIENT_RESOURCES,
        "NdkConnect, table full"
    );
    assert_eq!(
        engine_live(c.host(0)),
        (capacity, 0, 0, 0),
        "nothing reserved"
    );
    assert_eq!(connector.close(), STATUS_SUCCESS);
    assert_eq!(qp.close(), STATUS_SUCCESS);
    // Virtual time runs through every armed timer: TIMEWAIT ends.
    c.settle();
    assert_eq!(engine_live(c.host(0)).0, 0);
    assert_eq!(engine_live(c.host(1)).0, 0);
    for q in qps {
        assert_eq!(q.close(), STATUS_SUCCESS);
    }
    mesh.connect(&c, 0, 1);
    mesh.establish(&c);
    mesh.transfer(&c);
    mesh.disconnect(&c);
    mesh.close_links(&c);
    mesh.close(&c);
    c.finish();
}
