//! The vmxnet3 Ethernet miniport through its NDIS entry points on the host harness (issue 24
//! items 2 and 3): two or three simulated hosts, each running smoltcp over its miniport's
//! NBL send and receive paths, over the vmxnet3 model and the fabric. Ping (ARP + ICMPv4,
//! ND + ICMPv6) and UDP between hosts, the resolver fed by what the stack learned, link
//! down/up indications, reset with traffic in flight, the packet filter and the multicast
//! list, pause with receives lent, surprise removal, full-ring queueing, OIDs and statistics;
//! every test ends in `finish`'s leak checks.

mod common;

use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use common::Mode;
use common::vmx::eth;
use common::vmx_ndis::{EthRig, Net, Stack, StackResolver, UDP_PORT};
use pvrdma_ndk::ndis::ethernet::abi::*;
use pvrdma_ndk::ndis::ethernet::{EthConfig, EthState};
use pvrdma_ndk::ndis::*;
use pvrdma_ndk::os::net::{AddressResolver, Mac, ResolveError, resolve_done};

const ALL: u32 =
    NDIS_PACKET_TYPE_DIRECTED | NDIS_PACKET_TYPE_MULTICAST | NDIS_PACKET_TYPE_BROADCAST;

fn small() -> EthConfig {
    EthConfig {
        tx_ring: 64,
        rx_ring: 64,
        rx_buffers: 128,
        mac: None,
    }
}

fn v4(n: &Net, i: usize) -> IpAddr {
    IpAddr::V4(n.rig.host(i).ipv4)
}

fn v6(n: &Net, i: usize) -> IpAddr {
    IpAddr::V6(n.rig.host(i).ipv6)
}

/// Every send completion host `i` got so far succeeded.
fn all_sends_ok(n: &Net, i: usize) -> usize {
    let s = n.rig.host(i).ndis.take();
    for (id, st, _) in &s.completed {
        assert_eq!(*st, NDIS_STATUS_SUCCESS, "host {i}: NBL {id}");
    }
    s.completed.len()
}

fn ethertypes(frames: &[Vec<u8>]) -> Vec<u16> {
    frames
        .iter()
        .map(|f| u16::from_be_bytes([f[12], f[13]]))
        .collect()
}

fn resolve_now(
    r: &dyn AddressResolver,
    local: IpAddr,
    remote: IpAddr,
) -> Arc<Mutex<Option<Result<Mac, ResolveError>>>> {
    let got: Arc<Mutex<Option<Result<Mac, ResolveError>>>> = Arc::default();
    let g = got.clone();
    r.resolve(
        local,
        remote,
        resolve_done(move |x| *g.lock().unwrap() = Some(x)).unwrap(),
    );
    got
}

#[test]
fn ping_over_ipv4_resolves_with_arp_and_feeds_the_resolver() {
    let mut n = Net::new(Mode::Deterministic, 2, &small());
    let to = v4(&n, 1);
    let mac1 = n.rig.host(1).mac;
    // Before any traffic the resolver knows nothing: an unanswered lookup would wait.
    let early = resolve_now(&*n.rig.host(0).neighbours, v4(&n, 0), to);
    assert!(early.lock().unwrap().is_none());
    n.stacks[0].ping(to, 1, b"vmxnet3 over NDIS, v4");
    let mut pongs = Vec::new();
    assert!(n.run_until(200, |n| {
        pongs.extend(n.stacks[0].pongs());
        !pongs.is_empty()
    }));
    assert_eq!(pongs, vec![(to, 1, b"vmxnet3 over NDIS, v4".to_vec())]);
    // Host 1 saw the ARP request (broadcast) then the echo request, through its indications.
    let s1 = n.rig.host(1).ndis.take();
    let types = ethertypes(&s1.frames);
    assert_eq!(types, vec![0x0806, 0x0800], "ARP, then the echo request");
    assert_eq!(s1.frames[0][..6], [0xFF; 6]);
    assert!(s1.completed.iter().all(|c| c.1 == NDIS_STATUS_SUCCESS));
    assert_eq!(s1.completed.len(), 2, "the ARP reply and the echo reply");
    // The stack resolved host 1: the seam the connection engine uses now knows it.
    assert_eq!(*early.lock().unwrap(), Some(Ok(mac1)));
    let again = resolve_now(&*n.rig.host(0).neighbours, v4(&n, 0), to);
    assert_eq!(*again.lock().unwrap(), Some(Ok(mac1)));
    assert_eq!(all_sends_ok(&n, 0), 2, "ARP request and echo request");
    n.finish();
}

#[test]
fn ping_over_ipv6_needs_the_solicited_node_group_in_the_multicast_list() {
    let mut n = Net::new(Mode::Deterministic, 2, &small());
    let to = v6(&n, 1);
    // Host 1 forgets its groups: the neighbour solicitation (to 33:33:ff:00:00:02) is
    // filtered by its device, so host 0 never learns host 1's MAC.
    assert_eq!(n.rig.host(1).set_multicast(&[]), NDIS_STATUS_SUCCESS);
    n.stacks[0].ping(to, 7, b"v6");
    assert!(!n.run_until(300, |n| !n.stacks[0].pongs().is_empty()));
    assert!(
        n.rig.host(1).ndis.take().frames.is_empty(),
        "nothing passed host 1's filter"
    );
    let dropped = n.rig.cluster.model(1).counters().rx_filtered;
    assert!(
        dropped >= 1,
        "the model filtered the solicitation ({dropped})"
    );
    // The groups back (what tcpip.sys sets when it joins them): ND and the echo work.
    let groups = Stack::multicast_macs(n.rig.host(1));
    assert_eq!(n.rig.host(1).set_multicast(&groups), NDIS_STATUS_SUCCESS);
    n.stacks[0].ping(to, 8, b"v6 again");
    let mut pongs = Vec::new();
    assert!(n.run_until(3000, |n| {
        pongs.extend(n.stacks[0].pongs());
        pongs.iter().any(|p| p.1 == 8)
    }));
    assert!(pongs.contains(&(to, 8, b"v6 again".to_vec())));
    let s1 = n.rig.host(1).ndis.take();
    // ICMPv6 (NS, echo) only: no IPv4 or ARP.
    assert!(ethertypes(&s1.frames).iter().all(|&t| t == 0x86DD));
    assert!(s1.frames.iter().any(|f| f[0..3] == [0x33, 0x33, 0xFF]));
    let got = resolve_now(&*n.rig.host(0).neighbours, v6(&n, 0), to);
    assert_eq!(*got.lock().unwrap(), Some(Ok(n.rig.host(1).mac)));
    n.finish();
}

#[test]
fn udp_datagrams_both_ways_byte_for_byte() {
    let mut n = Net::new(Mode::Deterministic, 2, &small());
    let (a, b) = (v4(&n, 0), v6(&n, 1));
    let b4 = v4(&n, 1);
    // The largest datagrams one 1500-byte MTU carries: 1472 bytes over IPv4, 1452 over IPv6.
    let sizes = [1usize, 17, 200, 1000, 1452];
    let mut sent = Vec::new();
    for (k, &len) in sizes.iter().cycle().take(100).enumerate() {
        let d: Vec<u8> = (0..len).map(|i| (i * 7 + k) as u8).collect();
        sent.push(d);
    }
    // v4 one way, v6 the other.
    let mut got1 = Vec::new();
    let mut got0 = Vec::new();
    let a6 = v6(&n, 0);
    for d in &sent {
        let mut d4 = d.clone();
        if d4.len() == 1452 {
            d4.extend_from_slice(&[0xA5; 20]);
        }
        n.stacks[0].send_udp(b4, &d4);
        n.stacks[1].send_udp(a6, d);
        n.round();
        got1.extend(n.stacks[1].datagrams());
        got0.extend(n.stacks[0].datagrams());
    }
    let ok = n.run_until(2000, |n| {
        got1.extend(n.stacks[1].datagrams());
        got0.extend(n.stacks[0].datagrams());
        got1.len() == sent.len() && got0.len() == sent.len()
    });
    assert!(ok, "{} and {} of {}", got1.len(), got0.len(), sent.len());
    let bytes1: Vec<Vec<u8>> = got1
        .iter()
        .map(|g| {
            let mut b = g.2.clone();
            if b.len() == 1472 {
                b.truncate(1452);
            }
            b
        })
        .collect();
    let bytes0: Vec<Vec<u8>> = got0.iter().map(|g| g.2.clone()).collect();
    assert_eq!(bytes1, sent);
    assert!(got1.iter().any(|g| g.2.len() == 1472));
    assert_eq!(bytes0, sent);
    assert!(got1.iter().all(|g| g.0 == a && g.1 == UDP_PORT));
    assert!(got0.iter().all(|g| g.0 == b));
    // Statistics: the device counted what the stacks sent, all unicast but ARP/ND.
    let st = n.rig.host(0).query_u64(OID_GEN_XMIT_OK);
    assert!(st >= 101, "XMIT_OK {st}");
    assert_eq!(n.rig.host(0).query_u64(OID_GEN_XMIT_ERROR), 0);
    assert!(n.rig.host(1).query_u64(OID_GEN_RCV_OK) >= 100);
    assert!(
        all_sends_ok(&n, 1) >= 100,
        "every send of both hosts succeeded"
    );
    assert!(all_sends_ok(&n, 0) >= 100);
    // A frame longer than the MTU allows (1518 bytes with an 802.1Q tag) fails alone.
    let h0 = n.rig.host(0);
    let big = eth(n.rig.host(1).mac, h0.mac, 0x0800, 1519, 0);
    let ok = eth(n.rig.host(1).mac, h0.mac, 0x0800, 1518, 0);
    let ids = h0.send_chain(&[&big, &ok]);
    n.rig.settle();
    let c = h0.ndis.take().completed;
    assert_eq!(
        c.iter().map(|x| (x.0, x.1)).collect::<Vec<_>>(),
        vec![
            (ids[0], NDIS_STATUS_INVALID_LENGTH),
            (ids[1], NDIS_STATUS_SUCCESS)
        ]
    );
    n.finish();
}

#[test]
fn threaded_dpcs_carry_ping_and_udp() {
    let mut n = Net::new(Mode::Threaded, 3, &small());
    for (k, to) in [v4(&n, 1), v6(&n, 2), v4(&n, 2), v6(&n, 1)]
        .into_iter()
        .enumerate()
    {
        n.stacks[0].ping(to, k as u16, &[k as u8; 56]);
    }
    let mut pongs = Vec::new();
    assert!(n.run_until(5000, |n| {
        pongs.extend(n.stacks[0].pongs());
        pongs.len() == 4
    }));
    let to = v4(&n, 1);
    for d in 0..50u8 {
        n.stacks[2].send_udp(to, &[d; 300]);
    }
    let mut got = Vec::new();
    assert!(n.run_until(5000, |n| {
        got.extend(n.stacks[1].datagrams());
        got.len() == 50
    }));
    let want: Vec<Vec<u8>> = (0..50u8).map(|d| vec![d; 300]).collect();
    assert_eq!(got.into_iter().map(|g| g.2).collect::<Vec<_>>(), want);
    n.finish();
}

#[test]
fn an_unknown_neighbour_is_resolved_by_the_stack_on_request() {
    let mut n = Net::new(Mode::Deterministic, 3, &small());
    for (i, to) in [(1, v4(&n, 1)), (2, v6(&n, 2))] {
        let r = StackResolver {
            table: n.rig.host(0).neighbours.clone(),
            wanted: n.stacks[0].wanted.clone(),
        };
        let local = if to.is_ipv4() { v4(&n, 0) } else { v6(&n, 0) };
        let got = resolve_now(&r, local, to);
        let want = n.rig.host(i).mac;
        assert!(n.run_until(3000, |_| got.lock().unwrap().is_some()));
        assert_eq!(*got.lock().unwrap(), Some(Ok(want)), "{to}");
    }
    // Host 1 saw the ARP request, host 2 a neighbour solicitation (ICMPv6 type 135) to its
    // solicited-node group.
    let f1 = n.rig.host(1).ndis.take().frames;
    let f2 = n.rig.host(2).ndis.take().frames;
    assert!(ethertypes(&f1).contains(&0x0806));
    assert!(
        f2.iter().any(|f| f[..6] == [0x33, 0x33, 0xFF, 0, 0, 3]
            && f[12..14] == [0x86, 0xDD]
            && f[54] == 135),
        "{:x?}",
        ethertypes(&f2)
    );
    n.finish();
}

#[test]
fn link_down_and_up_are_indicated_once_each() {
    let mut n = Net::new(Mode::Deterministic, 2, &small());
    assert!(n.rig.host(1).mp().link().connected);
    n.rig.cluster.world.set_vnic_link(1, false);
    n.rig.settle();
    let down = n.rig.host(1).ndis.take().links;
    assert_eq!(down.len(), 1);
    assert!(!down[0].connected);
    assert_eq!(down[0].speed_bps, NDIS_LINK_SPEED_UNKNOWN);
    let (r, b) = n.rig.host(1).query(OID_GEN_MEDIA_CONNECT_STATUS, 4);
    assert_eq!(
        (r.status, b),
        (NDIS_STATUS_SUCCESS, 2u32.to_le_bytes().to_vec())
    );
    // No ping gets through a down link.
    let to = v4(&n, 1);
    n.stacks[0].ping(to, 1, b"x");
    assert!(!n.run_until(100, |n| !n.stacks[0].pongs().is_empty()));
    n.rig.cluster.world.set_vnic_link(1, true);
    n.rig.settle();
    let up = n.rig.host(1).ndis.take().links;
    assert_eq!(up.len(), 1);
    assert!(up[0].connected);
    assert_eq!(up[0].speed_bps, 10_000_000_000, "GET_LINK's 10 Gbps");
    let (r, b) = n.rig.host(1).query(OID_GEN_LINK_SPEED, 4);
    assert_eq!(r.status, NDIS_STATUS_SUCCESS);
    assert_eq!(u32::from_le_bytes(b.try_into().unwrap()), 100_000_000);
    n.stacks[0].ping(to, 2, b"y");
    assert!(n.run_until(3000, |n| n.stacks[0].pongs().iter().any(|p| p.1 == 2)));
    n.finish();
}

#[test]
fn reset_with_traffic_in_flight_completes_every_nbl_once_and_recovers() {
    let rig = EthRig::new(Mode::Deterministic, 2, &small());
    let (h0, h1) = (rig.host(0), rig.host(1));
    assert_eq!(h1.set_filter(ALL), NDIS_STATUS_SUCCESS);
    let frames: Vec<Vec<u8>> = (0..100)
        .map(|i| eth(h1.mac, h0.mac, 0x0800, 60 + i * 13, i as u8))
        .collect();
    let mut ids = Vec::new();
    for f in &frames {
        ids.push(h0.send(&[f], &[14, 40]).unwrap());
    }
    // 100 frames on a 64-descriptor ring: some wait in the FIFO, some are in the device.
    assert!(h0.mp().tx_waiting() > 0);
    assert_eq!(h0.mp().reset(), NDIS_STATUS_SUCCESS);
    rig.settle();
    let s0 = h0.ndis.take();
    let mut done: Vec<u64> = s0.completed.iter().map(|c| c.0).collect();
    done.sort();
    assert_eq!(done, ids, "every NBL completed exactly once");
    let aborted = s0
        .completed
        .iter()
        .filter(|c| c.1 == NDIS_STATUS_REQUEST_ABORTED)
        .count();
    assert!(
        s0.completed
            .iter()
            .all(|c| c.1 == NDIS_STATUS_SUCCESS || c.1 == NDIS_STATUS_REQUEST_ABORTED)
    );
    // The flags say the IRQL: the frames the reset aborted complete from the reset itself
    // (PASSIVE_LEVEL here, an NDIS work item on Windows), the sent ones from the DPC. The
    // emulated .sys run found the aborted ones flagged DISPATCH_LEVEL.
    assert!(aborted > 0, "the reset aborted frames in the device");
    for (&(id, status, _), &(fid, flags)) in s0.completed.iter().zip(&s0.completion_flags) {
        assert_eq!(id, fid);
        let want = if status == NDIS_STATUS_REQUEST_ABORTED {
            0
        } else {
            NDIS_SEND_FLAGS_DISPATCH_LEVEL
        };
        assert_eq!(
            flags, want,
            "NBL {id} completed {status:#x} with flags {flags:#x}"
        );
    }
    let got = h1.ndis.take().frames;
    // A burst can outrun host 1's ring between its DPC runs: the device counts those.
    let no_buf = rig.cluster.model(1).counters().rx_out_of_buf as usize;
    assert_eq!(
        got.len() + aborted + no_buf,
        100,
        "received, aborted or out of buffers"
    );
    // What arrived is in order and intact.
    let mut k = 0;
    for g in &got {
        while frames[k] != *g {
            k += 1;
        }
    }
    assert_eq!(h0.mp().counters().resets, 1);
    // After the reset: traffic flows, the filter still holds (DriverShared kept it).
    h0.send(&[&frames[5]], &[14]).unwrap();
    rig.settle();
    assert_eq!(h1.ndis.take().frames, vec![frames[5].clone()]);
    rig.finish();
}

#[test]
fn a_device_fault_asks_ndis_for_a_reset() {
    let rig = EthRig::new(Mode::Deterministic, 2, &small());
    let (h0, h1) = (rig.host(0), rig.host(1));
    assert_eq!(h1.set_filter(ALL), NDIS_STATUS_SUCCESS);
    // The device stops the Tx queue (TXPROD out of range, behind the driver's back).
    rig.cluster.model(0).bar0_write32(0x600, 10_000);
    rig.settle();
    assert_eq!(h0.ndis.resets_needed.load(Ordering::SeqCst), 1);
    let f = eth(h1.mac, h0.mac, 0x0800, 100, 3);
    h0.send(&[&f], &[14]).unwrap();
    rig.settle();
    assert!(
        h1.ndis.take().frames.is_empty(),
        "the queue is stopped: the frame waits"
    );
    assert_eq!(h0.mp().tx_waiting(), 1);
    // NDIS calls MiniportResetEx: the waiting frame goes out after it.
    assert_eq!(h0.mp().reset(), NDIS_STATUS_SUCCESS);
    rig.settle();
    assert_eq!(h1.ndis.take().frames, vec![f]);
    assert_eq!(h0.ndis.take().completed.len(), 1);
    rig.finish();
}

#[test]
fn the_packet_filter_and_the_multicast_list_select_what_is_indicated() {
    let rig = EthRig::new(Mode::Deterministic, 2, &small());
    let (h0, h1) = (rig.host(0), rig.host(1));
    let g1 = [0x01, 0x00, 0x5E, 0, 0, 1];
    let g2 = [0x01, 0x00, 0x5E, 0, 0, 2];
    let other = [0x02, 0, 0, 0, 0, 0x99];
    let frames = [
        eth(h1.mac, h0.mac, 0x0800, 80, 1),
        eth([0xFF; 6], h0.mac, 0x0806, 60, 2),
        eth(g1, h0.mac, 0x0800, 70, 3),
        eth(g2, h0.mac, 0x0800, 70, 4),
        eth(other, h0.mac, 0x0800, 90, 5),
    ];
    let burst = || {
        for f in &frames {
            h0.send(&[f], &[14]).unwrap();
        }
        rig.settle();
        h1.ndis.take().frames
    };
    // No filter yet (NDIS has not set one): nothing is indicated.
    assert!(burst().is_empty());
    assert_eq!(
        h1.set_filter(NDIS_PACKET_TYPE_DIRECTED),
        NDIS_STATUS_SUCCESS
    );
    assert_eq!(burst(), vec![frames[0].clone()]);
    assert_eq!(
        h1.set_filter(NDIS_PACKET_TYPE_DIRECTED | NDIS_PACKET_TYPE_BROADCAST),
        0
    );
    assert_eq!(burst(), frames[..2].to_vec());
    assert_eq!(h1.set_multicast(&[g1]), NDIS_STATUS_SUCCESS);
    assert_eq!(h1.set_filter(ALL), NDIS_STATUS_SUCCESS);
    assert_eq!(burst(), frames[..3].to_vec());
    assert_eq!(h1.set_filter(ALL | NDIS_PACKET_TYPE_ALL_MULTICAST), 0);
    assert_eq!(burst(), frames[..4].to_vec());
    assert_eq!(h1.set_filter(NDIS_PACKET_TYPE_PROMISCUOUS), 0);
    // Every group without a table entry (the fabric never floods unknown unicast, so the
    // frame to another MAC does not reach the port at all).
    assert_eq!(h1.set_multicast(&[]), NDIS_STATUS_SUCCESS);
    assert_eq!(burst(), frames[..4].to_vec());
    assert_eq!(h1.set_multicast(&[g1]), NDIS_STATUS_SUCCESS);
    // The list reads back; the OID's refusals.
    let (r, b) = h1.query(OID_802_3_MULTICAST_LIST, 64);
    assert_eq!((r.status, b), (NDIS_STATUS_SUCCESS, g1.to_vec()));
    let (r, _) = h1.query(OID_802_3_MULTICAST_LIST, 5);
    assert_eq!(
        (r.status, r.bytes_needed),
        (NDIS_STATUS_BUFFER_TOO_SHORT, 6)
    );
    let many: Vec<[u8; 6]> = (0..33).map(|i| [0x01, 0, 0x5E, 0, 1, i]).collect();
    assert_eq!(h1.set_multicast(&many), NDIS_STATUS_MULTICAST_FULL);
    assert_eq!(h1.set_multicast(&many[..32]), NDIS_STATUS_SUCCESS);
    assert_eq!(
        h1.set(OID_802_3_MULTICAST_LIST, &[1, 2, 3]),
        NDIS_STATUS_INVALID_LENGTH
    );
    assert_eq!(
        h1.set_multicast(&[h1.mac]),
        NDIS_STATUS_INVALID_DATA,
        "a unicast address"
    );
    let (_, b) = h1.query(OID_802_3_MULTICAST_LIST, 256);
    assert_eq!(b.len(), 32 * 6, "a refused list leaves the last good one");
    assert_eq!(h1.set_filter(0x8000_0000), NDIS_STATUS_NOT_SUPPORTED);
    let (_, f) = h1.query(OID_GEN_CURRENT_PACKET_FILTER, 4);
    assert_eq!(f, NDIS_PACKET_TYPE_PROMISCUOUS.to_le_bytes().to_vec());
    // Statistics by kind at the receiver: the device's counters.
    let st = vmx_ndis_stats(h1);
    assert!(
        st.ifHCInBroadcastPkts >= 3 && st.ifHCInMulticastPkts >= 3,
        "{st:?}"
    );
    rig.finish();
}

fn vmx_ndis_stats(h: &common::vmx_ndis::EthHost) -> NDIS_STATISTICS_INFO {
    pvrdma_ndk::ndis::ethernet::oid::statistics_info(h.mp())
}

#[test]
fn general_oids_answer_from_the_device() {
    let rig = EthRig::new(Mode::Deterministic, 1, &small());
    let h = rig.host(0);
    let u32q = |oid| {
        let (r, b) = h.query(oid, 4);
        assert_eq!(r.status, NDIS_STATUS_SUCCESS, "{oid:#x}");
        u32::from_le_bytes(b.try_into().unwrap())
    };
    assert_eq!(u32q(OID_GEN_MAXIMUM_FRAME_SIZE), 1500);
    assert_eq!(u32q(OID_GEN_MAXIMUM_TOTAL_SIZE), 1514);
    assert_eq!(u32q(OID_GEN_MEDIA_IN_USE), NdisMedium802_3);
    assert_eq!(u32q(OID_802_3_MAXIMUM_LIST_SIZE), 32);
    assert_eq!(
        u32q(OID_GEN_MEDIA_CONNECT_STATUS),
        MediaConnectStateConnected
    );
    let mac = rig.cluster.mac(0);
    assert_eq!(h.query(OID_802_3_CURRENT_ADDRESS, 6).1, mac.to_vec());
    assert_eq!(h.query(OID_802_3_PERMANENT_ADDRESS, 6).1, mac.to_vec());
    let (r, list) = h.query(OID_GEN_SUPPORTED_LIST, 1024);
    assert_eq!(r.status, NDIS_STATUS_SUCCESS);
    assert_eq!(
        list.len(),
        pvrdma_ndk::ndis::ethernet::oid::ETH_SUPPORTED_OIDS.len() * 4
    );
    let (r, _) = h.query(OID_GEN_STATISTICS, 8);
    assert_eq!(r.status, NDIS_STATUS_BUFFER_TOO_SHORT);
    // PowerManagementCapabilitiesEx (the general attributes', mandatory for NDIS 6.20+): no
    // wake-up, as the PVRDMA adapter's; the emulated .sys run found it NULL.
    // SAFETY: the miniport's own capabilities, alive as long as it is.
    let pm = unsafe { *h.mp().pm_capabilities_ptr() };
    assert_eq!(pm, pvrdma_ndk::ndis::caps::pm_capabilities());
    assert_eq!(
        (pm.Header.Type, pm.Header.Revision, pm.Header.Size),
        (0x80, 2, 0x3C)
    );
    // The miniport writes the header: a zeroed buffer is answered (NDIS need not fill one
    // in; the emulated .sys run found the header required).
    let len = NDIS_SIZEOF_STATISTICS_INFO_REVISION_1;
    let (r, b) = h.query(OID_GEN_STATISTICS, len as usize);
    assert_eq!(
        (r.status, r.bytes_done),
        (NDIS_STATUS_SUCCESS, u32::from(len))
    );
    assert_eq!(b[..4], [0x80, 1, len as u8, 0]);
    assert_eq!(
        h.set(OID_GEN_CURRENT_LOOKAHEAD, &1501u32.to_le_bytes()),
        NDIS_STATUS_INVALID_DATA
    );
    assert_eq!(
        h.set(OID_GEN_CURRENT_LOOKAHEAD, &128u32.to_le_bytes()),
        NDIS_STATUS_SUCCESS
    );
    assert_eq!(u32q(OID_GEN_CURRENT_LOOKAHEAD), 128);
    assert_eq!(h.query(0x0101_0999, 8).0.status, NDIS_STATUS_NOT_SUPPORTED);
    rig.finish();
}

#[test]
fn pause_pends_until_ndis_returns_every_receive_and_refuses_sends() {
    let rig = EthRig::new(Mode::Deterministic, 2, &small());
    let (h0, h1) = (rig.host(0), rig.host(1));
    assert_eq!(h1.set_filter(ALL), NDIS_STATUS_SUCCESS);
    h1.ndis.hold.store(true, Ordering::SeqCst);
    for i in 0..5 {
        h0.send(&[&eth(h1.mac, h0.mac, 0x0800, 64, i)], &[14])
            .unwrap();
    }
    rig.settle();
    assert_eq!(h1.ndis.held(), 5);
    assert_eq!(h1.mp().rx_lent(), 5);
    assert_eq!(h1.mp().pause(), NDIS_STATUS_PENDING);
    assert_eq!(h1.mp().state(), EthState::Pausing);
    // A send while pausing completes at once with NDIS_STATUS_PAUSED.
    h1.send(&[&eth(h0.mac, h1.mac, 0x0800, 64, 9)], &[14])
        .unwrap();
    let c = h1.ndis.take().completed;
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].1, NDIS_STATUS_PAUSED);
    // Frames arriving while paused are not indicated.
    h0.send(&[&eth(h1.mac, h0.mac, 0x0800, 64, 7)], &[14])
        .unwrap();
    rig.settle();
    assert_eq!(h1.ndis.pause_completes.load(Ordering::SeqCst), 0);
    h1.return_held();
    assert_eq!(h1.ndis.pause_completes.load(Ordering::SeqCst), 1);
    assert_eq!(h1.mp().state(), EthState::Paused);
    assert_eq!(h1.mp().restart(), NDIS_STATUS_SUCCESS);
    h1.ndis.hold.store(false, Ordering::SeqCst);
    let f = eth(h1.mac, h0.mac, 0x0800, 64, 8);
    h0.send(&[&f], &[14]).unwrap();
    rig.settle();
    assert_eq!(h1.ndis.take().frames.last(), Some(&f));
    rig.finish();
}

#[test]
fn surprise_removal_fails_sends_and_halts_cleanly() {
    let rig = EthRig::new(Mode::Deterministic, 2, &small());
    let (h0, h1) = (rig.host(0), rig.host(1));
    let before = rig.cluster.model(0).counters().commands;
    h0.mp().pnp_event(NdisDevicePnPEventSurpriseRemoved);
    h0.send(&[&eth(h1.mac, h0.mac, 0x0800, 64, 0)], &[14])
        .unwrap();
    let c = h0.ndis.take().completed;
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].1, NDIS_STATUS_REQUEST_ABORTED);
    assert_eq!(h0.mp().reset(), NDIS_STATUS_FAILURE);
    assert_eq!(
        rig.cluster.model(0).counters().commands,
        before,
        "no command after the removal"
    );
    // The function is gone: what the hot-unplug does to the model.
    rig.cluster.model(0).bar1_write32(0x20, 0xCAFE_0002);
    rig.finish();
}

#[test]
fn a_full_ring_queues_nbls_of_several_frames_and_sends_them_in_order() {
    let rig = EthRig::new(
        Mode::Deterministic,
        2,
        // A receive ring that holds the whole burst: the device drops nothing at host 1.
        &EthConfig {
            tx_ring: 32,
            rx_ring: 256,
            rx_buffers: 512,
            mac: None,
        },
    );
    let (h0, h1) = (rig.host(0), rig.host(1));
    assert_eq!(h1.set_filter(ALL), NDIS_STATUS_SUCCESS);
    let frames: Vec<Vec<u8>> = (0..90)
        .map(|i| eth(h1.mac, h0.mac, 0x88B5, 60 + (i * 37) % 1450, i as u8))
        .collect();
    // Three frames per NBL, cut into three MDLs each; and a chain of NBLs in one call.
    let mut ids = Vec::new();
    for c in frames[..60].chunks(3) {
        let refs: Vec<&[u8]> = c.iter().map(|f| &f[..]).collect();
        ids.push(h0.send(&refs, &[14, 60]).unwrap());
    }
    let refs: Vec<&[u8]> = frames[60..].iter().map(|f| &f[..]).collect();
    ids.extend(h0.send_chain(&refs));
    assert!(
        h0.mp().tx_waiting() > 0,
        "a 32-descriptor ring cannot take 90 frames"
    );
    rig.settle();
    assert_eq!(h1.ndis.take().frames, frames);
    let c = h0.ndis.take().completed;
    let got: Vec<u64> = c.iter().map(|x| x.0).collect();
    assert_eq!(got, ids, "completed once each, in order");
    assert!(c.iter().all(|x| x.1 == NDIS_STATUS_SUCCESS));
    assert_eq!(c.iter().map(|x| x.2).sum::<usize>(), 90);
    assert!(h0.mp().counters().tx_waited > 0);
    rig.finish();
}

#[test]
fn low_receive_buffers_are_indicated_with_the_resources_flag() {
    // 64 descriptors, 96 buffers: once NDIS holds more than 32, the ring could not be refilled.
    let rig = EthRig::new(
        Mode::Deterministic,
        2,
        &EthConfig {
            rx_buffers: 96,
            ..small()
        },
    );
    let (h0, h1) = (rig.host(0), rig.host(1));
    assert_eq!(h1.set_filter(ALL), NDIS_STATUS_SUCCESS);
    h1.ndis.hold.store(true, Ordering::SeqCst);
    for i in 0..60u8 {
        h0.send(&[&eth(h1.mac, h0.mac, 0x0800, 64, i)], &[14])
            .unwrap();
        rig.settle();
    }
    let s = h1.ndis.take();
    assert_eq!(s.frames.len(), 60);
    let flagged: u32 = s
        .indications
        .iter()
        .filter(|i| i.1 & NDIS_RECEIVE_FLAGS_RESOURCES != 0)
        .map(|i| i.0)
        .sum();
    assert!(flagged > 0, "{:?}", s.indications);
    assert!(h1.mp().rx_lent() <= 96 - 64);
    assert_eq!(h1.mp().counters().rx_low_resources, u64::from(flagged));
    h1.return_held();
    assert_eq!(h1.mp().rx_lent(), 0);
    rig.finish();
}
