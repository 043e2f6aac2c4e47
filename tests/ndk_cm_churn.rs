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
use common::ndk::{Cluster, ClusterConfig, engine_live};
use ndk_cm_mesh::Mesh;

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
