//! Connection management on a faulty fabric and against a dead peer (issue 11), in virtual
//! time with fixed seeds: CM MADs dropped, duplicated and reordered still connect every
//! connection; an NdkConnect nobody answers fails with STATUS_IO_TIMEOUT exactly when the
//! REQ's retry budget (cm.md §6.2–6.3) runs out; and the setup-time table of the closing
//! note (`cargo test --test ndk_cm_faults -- --nocapture setup_time_table`).
//!
//! The fabric's faults cannot pick QP1's frames, so they are on only while connections are
//! being set up and torn down, when nothing but CM MADs travels — which each faulty run
//! checks: every frame a host sent in those windows is one of its engine's MAD sends.

mod common;
mod ndk_cm_mesh;

use common::Mode;
use common::ndk::{Cluster, ClusterConfig, QpSpec, engine_live, engine_stats, sa};
use ndk_cm_mesh::{Mesh, mean_max};
use pvrdma_ndk::cm::CmConfig;
use pvrdma_ndk::cm::timing::timeout_ns;
use pvrdma_ndk::ndkpi::*;
use pvrdma_sim::fabric::FaultConfig;

fn cluster(seed: u64) -> Cluster {
    Cluster::with(ClusterConfig {
        cm: true,
        seed,
        ..ClusterConfig::virtual_time(Mode::Deterministic, 2)
    })
}

/// 10% of CM MADs lost, 10% delivered twice, 10% held back by 50 µs (fifty one-way
/// latencies) so later ones pass them.
fn lossy() -> FaultConfig {
    FaultConfig::none()
        .with_drop(0.10)
        .with_duplicate(0.10)
        .with_reorder(0.10, 50_000)
}

/// MADs the engines sent and frames the hosts sent, summed over both hosts.
fn sent(c: &Cluster) -> (u64, u64) {
    (0..2).fold((0, 0), |(m, f), h| {
        (
            m + engine_stats(c.host(h)).mads_out,
            f + c.world.counters(h).port.tx.frames,
        )
    })
}

/// Runs `phase` with `faults` on both directions (if any) and returns the CM MADs sent
/// meanwhile; checks that nothing but those MADs left either host.
fn window(c: &Cluster, faults: Option<FaultConfig>, phase: impl FnOnce()) -> u64 {
    if let Some(f) = faults {
        c.world.set_pair_faults(0, 1, f);
        c.world.set_pair_faults(1, 0, f);
    }
    let (mads, frames) = sent(c);
    phase();
    let (mads2, frames2) = sent(c);
    c.world.clear_faults();
    assert_eq!(
        frames2 - frames,
        mads2 - mads,
        "only CM MADs travelled in the window"
    );
    mads2 - mads
}

/// What one run of [`connect_many`] measured.
struct Figures {
    label: String,
    connections: usize,
    /// Virtual µs from NdkConnect's issue to its completion: mean, max.
    connect_us: (f64, u64),
    /// The same to NdkAccept's completion.
    accept_us: (f64, u64),
    /// CM MADs sent by both hosts per connection while connecting, and while disconnecting.
    setup_mads: f64,
    teardown_mads: f64,
    /// Fabric faults that hit: (dropped, duplicated, reordered).
    faults: (u64, u64, u64),
}

/// `n` connections between hosts 0 and 1, alternately in each direction, every NdkConnect
/// issued before any completes; data each way; all disconnected and closed; nothing left.
/// `faults` apply while connecting and disconnecting.
fn connect_many(label: &str, seed: u64, n: usize, faults: Option<FaultConfig>) -> Figures {
    let c = cluster(seed);
    let mut mesh = Mesh::new(&c, 2);
    mesh.listen_all(&c);
    let setup_mads = window(&c, faults, || {
        for i in 0..n {
            mesh.connect(&c, i % 2, 1 - i % 2);
        }
        mesh.assert_all_outstanding();
        mesh.establish(&c);
    });
    mesh.transfer(&c);
    let teardown_mads = window(&c, faults, || mesh.disconnect(&c));
    let times = mesh.setup_times();
    let us = |ns: u64| ns / 1000;
    let fig = Figures {
        label: label.to_string(),
        connections: n,
        connect_us: mean_max(times.iter().map(|t| us(t.connect_ns))),
        accept_us: mean_max(times.iter().map(|t| us(t.accept_ns))),
        setup_mads: setup_mads as f64 / n as f64,
        teardown_mads: teardown_mads as f64 / n as f64,
        faults: (0..2).fold((0, 0, 0), |(d, u, r), h| {
            let tx = c.world.counters(h).port.tx;
            (d + tx.dropped.fault, u + tx.duplicated, r + tx.reordered)
        }),
    };
    mesh.close_links(&c);
    mesh.close(&c);
    c.finish();
    fig
}

/// Sequential connections, one at a time (the churn's cycle), for the table's first row.
fn connect_one_at_a_time(n: usize) -> Figures {
    let c = cluster(0x5EED);
    let mut mesh = Mesh::new(&c, 2);
    mesh.sides[1].listen(&c, 1);
    let mut times = Vec::new();
    let (mut setup, mut teardown) = (0, 0);
    for _ in 0..n {
        setup += window(&c, None, || {
            mesh.connect(&c, 0, 1);
            mesh.establish(&c);
        });
        times.extend(mesh.setup_times());
        mesh.transfer(&c);
        teardown += window(&c, None, || mesh.disconnect(&c));
        mesh.close_links(&c);
    }
    mesh.close(&c);
    c.finish();
    Figures {
        label: "clean, one at a time".into(),
        connections: n,
        connect_us: mean_max(times.iter().map(|t| t.connect_ns / 1000)),
        accept_us: mean_max(times.iter().map(|t| t.accept_ns / 1000)),
        setup_mads: setup as f64 / n as f64,
        teardown_mads: teardown as f64 / n as f64,
        faults: (0, 0, 0),
    }
}

/// A clean fabric: exactly REQ, REP, RTU per connection and DREQ, DREP per disconnect.
fn assert_clean(f: &Figures) {
    assert_eq!(f.setup_mads, 3.0, "{}: REQ, REP, RTU", f.label);
    assert_eq!(f.teardown_mads, 2.0, "{}: DREQ, DREP", f.label);
    assert_eq!(f.faults, (0, 0, 0));
    // No retransmission: far below the first REQ retry (6.144 s).
    assert!(f.accept_us.1 < 10_000, "{}: {:?}", f.label, f.accept_us);
    assert!(f.connect_us.1 <= f.accept_us.1);
}

#[test]
fn clean_fabric_64_connections_take_three_mads_each() {
    assert_clean(&connect_many("clean, 64 at once", 0x5EED, 64, None));
}

/// 64 connections, 32 each way, at 10% drop, 10% duplicate, 10% reorder on every CM MAD,
/// with three fixed seeds: every connection connects, moves data and disconnects.
#[test]
fn lossy_fabric_connects_every_connection() {
    for seed in [0x1055, 0xD00D, 0xBEEF] {
        let f = connect_many("lossy", seed, 64, Some(lossy()));
        let (dropped, duplicated, reordered) = f.faults;
        assert!(
            dropped > 0 && duplicated > 0 && reordered > 0,
            "seed {seed:#x}: the faults hit: {:?}",
            f.faults
        );
        assert!(f.setup_mads >= 3.0 && f.teardown_mads >= 2.0);
    }
}

/// The REQ's retry budget in virtual ns, from the engine's CM configuration (cm.md §6.3,
/// `Cm::connect`): 1 + Max CM Retries sends, each waited for 2·conv(packet lifetime) +
/// conv(CM response timeout).
fn req_budget_ns() -> (u64, u64) {
    let cfg = CmConfig::rdma_cm_defaults(1, 0, 0);
    let per_try = 2 * timeout_ns(cfg.packet_life_time) + timeout_ns(cfg.cm_response_timeout);
    let sends = 1 + u64::from(cfg.max_cm_retries);
    (sends, sends * per_try)
}

/// NdkConnect from host 0 to host 1 after `kill` silenced host 1: STATUS_IO_TIMEOUT once
/// the budget ran out (not before, and within 1 virtual ms of it), after exactly
/// 1 + Max CM Retries REQs, none of which host 1's engine saw.
fn dead_peer(kill: impl FnOnce(&Cluster), revive: impl FnOnce(&Cluster)) {
    let (sends, budget) = req_budget_ns();
    // The rdma_cm defaults: 16 sends of 6.144 s.
    assert_eq!((sends, budget), (16, 98_304_000_000));
    let c = cluster(0xDEAD);
    let h0 = c.host(0);
    let pd = h0.adapter.create_pd().unwrap();
    let cq = h0.adapter.create_cq(16, None).unwrap();
    let qp = pd.create_qp(&cq, &cq, QpSpec::new(0xD0)).unwrap();
    let before = engine_stats(c.host(1)).mads_in;
    kill(&c);
    let connector = h0.adapter.create_connector().unwrap();
    let issued = c.pump().now_ns();
    let mads = engine_stats(h0).mads_out;
    let r = connector.connect_raw(&qp, sa(h0.ip, 0), sa(c.host(1).ip, 445), 8, 8, &[]);
    assert_eq!(r.inline, STATUS_PENDING);
    assert_eq!(r.wait(), STATUS_IO_TIMEOUT, "NdkConnect to a dead peer");
    let took = c.pump().now_ns() - issued;
    assert!(
        (budget..=budget + 1_000_000).contains(&took),
        "took {took} virtual ns; the budget is {budget}"
    );
    assert_eq!(engine_stats(h0).mads_out - mads, sends, "REQs sent");
    revive(&c);
    assert_eq!(connector.close(), STATUS_SUCCESS);
    assert_eq!(qp.close(), STATUS_SUCCESS);
    assert_eq!(cq.close(), STATUS_SUCCESS);
    assert_eq!(pd.close(), STATUS_SUCCESS);
    c.settle();
    assert_eq!(
        engine_live(c.host(0)),
        (0, 0, 0, 0),
        "nothing held after the timeout"
    );
    if let Some(e) = pvrdma_ndk::ndk::connect::engine(&c.host(1).ndk) {
        assert_eq!(e.stats().mads_in, before, "host 1's engine saw no REQ");
    }
    c.finish();
}

#[test]
fn dead_peer_link_down_times_out_within_the_retry_budget() {
    dead_peer(
        |c| c.world.set_link(1, false),
        |c| c.world.set_link(1, true),
    );
}

#[test]
fn dead_peer_without_qp1_times_out_within_the_retry_budget() {
    dead_peer(|c| c.host(1).ndk.stop_connections(), |_| {});
}

#[test]
fn sixteen_connections_one_at_a_time_take_three_mads_each() {
    assert_clean(&connect_one_at_a_time(16));
}

/// The closing note's table: setup time in virtual µs (NdkConnect issued → it completes,
/// and → the passive side's NdkAccept completes) and CM MADs per connection. Its rows are
/// the runs the tests above assert on (the fabric is deterministic per seed), printed:
/// `cargo test --test ndk_cm_faults -- --ignored --nocapture setup_time_table`.
#[test]
#[ignore = "prints the setup-time table of the runs the other tests assert on"]
fn setup_time_table() {
    let rows = [
        connect_one_at_a_time(16),
        connect_many("clean, 64 at once", 0x5EED, 64, None),
        connect_many(
            "lossy 10/10/10, 64 at once, seed 0x1055",
            0x1055,
            64,
            Some(lossy()),
        ),
        connect_many(
            "lossy 10/10/10, 64 at once, seed 0xD00D",
            0xD00D,
            64,
            Some(lossy()),
        ),
    ];
    assert_clean(&rows[0]);
    assert_clean(&rows[1]);
    println!(
        "| fabric | conns | connect µs mean | max | accept µs mean | max | MADs/conn setup | teardown | dropped/dup/reordered |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for f in &rows {
        println!(
            "| {} | {} | {:.1} | {} | {:.1} | {} | {:.2} | {:.2} | {}/{}/{} |",
            f.label,
            f.connections,
            f.connect_us.0,
            f.connect_us.1,
            f.accept_us.0,
            f.accept_us.1,
            f.setup_mads,
            f.teardown_mads,
            f.faults.0,
            f.faults.1,
            f.faults.2
        );
    }
}

/// The passive side's DREP is lost. Its TIMEWAIT (conv(ack timeout) ≈ 2 s) ends before the
/// active side's DREQ comes again (6.144 s later); the connector is still open, so the CM
/// still holds the connection, in IDLE. That DREQ must still get its DREP (cm.md §6.1:
/// "a DREQ for an unknown/TIMEWAIT connection still gets a DREP"), so the active side's
/// NdkDisconnect succeeds at its first retransmission instead of failing with
/// STATUS_IO_TIMEOUT once the whole 98 s budget has gone.
#[test]
fn a_lost_drep_is_sent_again_after_timewait() {
    let c = cluster(0xD4E9);
    let mut mesh = Mesh::new(&c, 2);
    mesh.sides[1].listen(&c, 1);
    mesh.connect(&c, 0, 1);
    mesh.establish(&c);
    let link = &mesh.links[0];
    let server = link.server.as_ref().unwrap();
    let dreq_at = c.pump().now_ns();
    let client = link.client.disconnect_raw();
    assert_eq!(client.inline, STATUS_PENDING);
    c.wait_for("the passive side's DisconnectEvent", || {
        server.disconnects.count() == 1
    });
    let lost = c.world.counters(1).port.tx.dropped.fault;
    c.world
        .set_pair_faults(1, 0, FaultConfig::none().with_drop(1.0));
    assert_eq!(
        server.disconnect(),
        STATUS_SUCCESS,
        "the passive NdkDisconnect"
    );
    c.wait_for("the DREP to be lost", || {
        c.world.counters(1).port.tx.dropped.fault == lost + 1
    });
    c.world.clear_faults();
    assert_eq!(client.wait(), STATUS_SUCCESS, "the active NdkDisconnect");
    let took = c.pump().now_ns() - dreq_at;
    let per_try = 2 * timeout_ns(18) + timeout_ns(20);
    assert!(
        (per_try..per_try + 1_000_000).contains(&took),
        "answered at the first DREQ retransmission: {took} ns"
    );
    mesh.close_links(&c);
    mesh.close(&c);
    c.finish();
}
