//! The host NDIS harness (issue 12 item 6): the portable miniport core driven in-process
//! against the device model, the test playing NDIS. Each host's InitializeEx gets a
//! translated resource list (parsed by `parse_resources`) for a platform over its model;
//! then NDK is enabled, NDK_ADAPTERs are opened at every version, two miniport instances
//! move data over QPs wired with the test-only wiring (no connection engine here:
//! tests/ndis_connections.rs connects through it), OID_NDK_STATISTICS must equal the frames
//! and octets the messages put on the wire exactly, NDK is
//! disabled with live objects (NDIS's adapter close waits for their consumer), Halt runs,
//! and nothing is left: no model object, no DMA region, pool accounting at its baseline.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use common::ndis::*;
use common::ndk::{PSN_AB, PSN_BA, Pump, Qp, fill, verify};
use common::objects::{rc_rtr_rts, rts_attrs};
use common::{DEFAULT_UAR_PFN, Mode, PlatformSink, SimBar1, SimDma, serial};
use pvrdma_host::{HostDevice, HostPlatform};
use pvrdma_ndk::ndis::*;
use pvrdma_ndk::ndk::set_qp_connected;
use pvrdma_ndk::ndkpi::*;
use pvrdma_ndk::os::Platform;
use pvrdma_ndk::os::alloc::stats;
use pvrdma_sim::world::{NodeConfig, World};

const LOCAL: u32 = NDK_MR_FLAG_ALLOW_LOCAL_WRITE;
const REMOTE: u32 = LOCAL | NDK_MR_FLAG_ALLOW_REMOTE_READ | NDK_MR_FLAG_ALLOW_REMOTE_WRITE;

/// Test-only QP wiring (tests/common `connect`, over the miniports' devices).
fn wire(rig: &NdisRig, a: &Qp, b: &Qp) {
    let qpn = |q: &Qp| {
        let h = q.handle();
        rig.hosts[q.host()]
            .model
            .with_core(|core| core.qp_info(h))
            .expect("QP in the model")
            .qpn
    };
    let (qa, qb) = (qpn(a), qpn(b));
    for (me, peer, peer_qpn, sq, rq) in [(a, b, qb, PSN_AB, PSN_BA), (b, a, qa, PSN_BA, PSN_AB)] {
        let ph = &rig.hosts[peer.host()];
        let mut at = rts_attrs(peer_qpn);
        at.sq_psn = sq;
        at.rq_psn = rq;
        at.ah_attr.dgid = ph.gid;
        at.ah_attr.dmac = ph.mac;
        at.ah_attr.sgid_index = 0;
        let dev = rig.hosts[me.host()].mp().device().expect("device");
        rc_rtr_rts(&dev, me.handle(), at).expect("RTR/RTS");
    }
    for q in [a, b] {
        // SAFETY: a live QP of this provider.
        unsafe { set_qp_connected(q.ptr, true) };
    }
}

/// `(in frames, in octets)` and `(out frames, out octets)` on the wire's terms.
fn expect_traffic(
    c: &NDIS_NDK_PERFORMANCE_COUNTERS,
    ((in_frames, in_octets), (out_frames, out_octets)): ((u64, u64), (u64, u64)),
    what: &str,
) {
    assert_eq!(
        (
            c.RDMAInOctets,
            c.RDMAInFrames,
            c.RDMAOutOctets,
            c.RDMAOutFrames
        ),
        (in_octets, in_frames, out_octets, out_frames),
        "{what}: RDMA in octets/frames, out octets/frames"
    );
    assert_eq!(
        (
            c.Connect,
            c.Accept,
            c.ConnectFailure,
            c.ConnectionError,
            c.ActiveConnection
        ),
        (0, 0, 0, 0, 0),
        "{what}: QPs wired raw are no connection of the (absent) connection engine"
    );
    assert_eq!(c.CQError, 0, "{what}: CQ errors");
}

/// The whole lifecycle (issue 12 item 6), in deterministic and threaded mode.
fn lifecycle(mode: Mode) {
    let rig = NdisRig::new(mode, 2, &MiniportConfig::default());
    for h in 0..2 {
        let m = rig.mp(h);
        assert!(m.ndk_enabled(), "*NetworkDirect defaults to 1");
        let caps = m.ndk_capabilities();
        assert_eq!((caps.Header.Type, caps.Header.Size), (0x80, 0x38));
        // SAFETY: NdkInfo points into the live miniport.
        let info = unsafe { *caps.NdkInfo };
        assert_eq!(info.Version, v(2, 1));
        // Enabling when enabled: success, and nothing for NDIS to hear.
        assert_eq!(m.set_oid(OID_NDK_SET_STATE, &[1]), OidResult::done(1));
        assert_eq!(m.next_ndk_pnp_event(), None);
    }
    let caps_info = {
        let c = rig.mp(0).ndk_capabilities();
        // SAFETY: as above.
        unsafe { *c.NdkInfo }
    };

    // OpenNDKAdapter at every version; the consumer sees the negotiated one.
    for (asked, got) in [
        (v(1, 0), v(1, 2)),
        (v(1, 2), v(1, 2)),
        (v(2, 0), v(2, 1)),
        (v(2, 1), v(2, 1)),
    ] {
        let a = rig.open(0, asked);
        let info = a.query_info().expect("NdkQueryAdapterInfo");
        assert_eq!(info.Version, got, "opened at {asked:?}");
        assert_eq!(
            (
                info.MaxCqDepth,
                info.MaxInitiatorQueueDepth,
                info.MaxTransferLength
            ),
            (
                caps_info.MaxCqDepth,
                caps_info.MaxInitiatorQueueDepth,
                caps_info.MaxTransferLength
            ),
            "NdkInfo is what NdkQueryAdapterInfo says"
        );
        rig.mp(0).close_ndk_adapter(a.ptr);
    }
    assert_eq!(
        rig.mp(0).open_ndk_adapter(v(3, 0)).err(),
        Some(NDIS_STATUS_BAD_VERSION)
    );
    assert_eq!(rig.mp(0).open_adapters(), 0);

    // Two instances, one QP each, wired; data both ways.
    let a0 = rig.open(0, v(2, 1));
    let a1 = rig.open(1, v(2, 1));
    let s0 = Side::new(&a0, 0xA0);
    let s1 = Side::new(&a1, 0xB0);
    wire(&rig, &s0.qp, &s1.qp);
    let m0 = Region::new(&rig, 0, &s0.pd, 4, 0x1000_0000, REMOTE);
    let m1 = Region::new(&rig, 1, &s1.pd, 4, 0x2000_0000, REMOTE);
    let (send, write, read, back) = (1000u32, 5000u32, 3000u32, 17u32);
    // Host 1 posts two receives; host 0 sends 1000 bytes, host 1 answers with 17.
    assert_eq!(s1.qp.receive(1, &[m1.sge(0, 4096)]), STATUS_SUCCESS);
    assert_eq!(s0.qp.receive(2, &[m0.sge(8192, 4096)]), STATUS_SUCCESS);
    // Two SGEs (600 + 400 bytes): the count is the request's total.
    let all = fill(&m0.mem, 0, 0x31, 2048);
    let msg = [&all[..600], &all[1024..1424]].concat();
    assert_eq!(
        s0.qp.send(3, &[m0.sge(0, 600), m0.sge(1024, 400)], 0),
        STATUS_SUCCESS
    );
    let r1 = s1.cq.wait_results(1);
    assert_eq!(
        (r1[0].Status, r1[0].BytesTransferred),
        (STATUS_SUCCESS, send)
    );
    assert_eq!(s0.cq.wait_results(1)[0].Status, STATUS_SUCCESS);
    verify(&m1.mem, 0, &msg);
    let reply = fill(&m1.mem, 4096, 0x32, back as usize);
    assert_eq!(s1.qp.send(4, &[m1.sge(4096, back)], 0), STATUS_SUCCESS);
    assert_eq!(s1.cq.wait_results(1)[0].Status, STATUS_SUCCESS);
    let r0 = s0.cq.wait_results(1);
    assert_eq!(
        (r0[0].Status, r0[0].BytesTransferred),
        (STATUS_SUCCESS, back)
    );
    verify(&m0.mem, 8192, &reply);
    // Host 0 writes 5000 bytes into host 1 and reads 3000 back.
    let wdata = fill(&m0.mem, 0, 0x33, write as usize);
    assert_eq!(
        s0.qp.write(
            5,
            &[m0.sge(0, write)],
            m1.mem.va + 8192,
            m1.mr.remote_token(),
            0
        ),
        STATUS_SUCCESS
    );
    assert_eq!(s0.cq.wait_results(1)[0].Status, STATUS_SUCCESS);
    verify(&m1.mem, 8192, &wdata);
    assert_eq!(
        s0.qp.read(
            6,
            &[m0.sge(12288, read)],
            m1.mem.va + 8192,
            m1.mr.remote_token(),
            0
        ),
        STATUS_SUCCESS
    );
    assert_eq!(s0.cq.wait_results(1)[0].Status, STATUS_SUCCESS);
    verify(&m0.mem, 12288, &wdata[..read as usize]);
    rig.pump.settle();

    // On the wire's terms at the wiring's path MTU 1024, IPv4 (tests/common/ndis.rs
    // WireModel). Host 0: in = the reply received + the read's response; out = the send,
    // the write and the read's request. Host 1: in = the send received; out = the reply.
    // (A peer's write or read of host 1's memory completes nothing on host 1, so host 1
    // does not count it: host 0 does.)
    let w = WireModel::ipv4(1024);
    let (send, write, read, back) = (
        u64::from(send),
        u64::from(write),
        u64::from(read),
        u64::from(back),
    );
    let want0 = (
        total(&[w.send(back), w.read_response(read)]),
        total(&[w.send(send), w.write(write), w.read_request()]),
    );
    let want1 = (w.send(send), w.send(back));
    expect_traffic(&rig.statistics(0), want0, "host 0");
    expect_traffic(&rig.statistics(1), want1, "host 1");
    // OID_GEN_STATISTICS counts the same traffic (all of this function's traffic is RDMA).
    let mut g = vec![0u8; 0x98];
    g[..4].copy_from_slice(&[0x80, 1, 0x98, 0]);
    assert_eq!(
        rig.query(0, OID_GEN_STATISTICS, &mut g),
        OidResult::done(0x98)
    );
    let at = |o: usize| u64::from_le_bytes(g[o..o + 8].try_into().unwrap());
    assert_eq!(
        (at(0x18), at(0x20), at(0x38), at(0x40)),
        (want0.0.1, want0.0.0, want0.1.1, want0.1.0)
    );
    let mut ok = [0u8; 8];
    assert_eq!(rig.query(1, OID_GEN_XMIT_OK, &mut ok), OidResult::done(8));
    assert_eq!(u64::from_le_bytes(ok), want1.1.0, "host 1's frames out");

    // Disable NDK with the objects live: opens stop at once, NDIS hears NetEventNDKDisable
    // and closes each NDK_ADAPTER, and each close waits for its consumer to close the
    // objects under it.
    for h in 0..2 {
        assert_eq!(
            rig.mp(h).set_oid(OID_NDK_SET_STATE, &[0]),
            OidResult::done(1)
        );
        assert_eq!(
            rig.mp(h).open_ndk_adapter(v(2, 1)).err(),
            Some(NDIS_STATUS_ADAPTER_NOT_READY)
        );
        assert_eq!(rig.mp(h).next_ndk_pnp_event(), Some(NetEventNDKDisable));
        assert_eq!(rig.mp(h).next_ndk_pnp_event(), None);
    }
    let closed = [AtomicBool::new(false), AtomicBool::new(false)];
    std::thread::scope(|scope| {
        for (h, a) in [(0usize, a0.ptr as usize), (1, a1.ptr as usize)] {
            let (rig, closed) = (&rig, &closed);
            scope.spawn(move || {
                rig.mp(h).close_ndk_adapter(a as *mut NDK_ADAPTER);
                closed[h].store(true, Ordering::SeqCst);
            });
        }
        // The closes are blocked inside the provider: it has polled its condition while
        // the consumer's objects are still open.
        let polls = rig.pump.provider_polls();
        rig.pump
            .wait_for("the adapter closes to wait inside the provider", || {
                rig.pump.provider_polls() > polls + 100
            });
        assert!(!closed[0].load(Ordering::SeqCst) && !closed[1].load(Ordering::SeqCst));
        // The consumer closes its objects; the adapter closes then return.
        m0.close();
        m1.close();
        s0.close();
        s1.close();
    });
    assert!(closed.iter().all(|c| c.load(Ordering::SeqCst)));
    for h in 0..2 {
        assert_eq!(rig.mp(h).open_adapters(), 0);
    }
    // Closed QPs' traffic stays counted; no connection is active any more.
    expect_traffic(&rig.statistics(0), want0, "host 0 after close");
    expect_traffic(&rig.statistics(1), want1, "host 1 after close");
    // Re-enabling is announced; then Halt.
    assert_eq!(
        rig.mp(0).set_oid(OID_NDK_SET_STATE, &[1]),
        OidResult::done(1)
    );
    assert_eq!(rig.mp(0).next_ndk_pnp_event(), Some(NetEventNDKEnable));
    for h in 0..2 {
        assert_eq!(rig.mp(h).pause(), NDIS_STATUS_SUCCESS);
        assert_eq!(rig.mp(h).restart(), NDIS_STATUS_SUCCESS);
        rig.mp(h).halt();
        assert_eq!(
            rig.mp(h).open_ndk_adapter(v(2, 1)).err(),
            Some(NDIS_STATUS_ADAPTER_NOT_READY)
        );
    }
    rig.finish();
}

#[test]
fn lifecycle_deterministic() {
    lifecycle(Mode::Deterministic);
}

#[test]
fn lifecycle_threaded() {
    lifecycle(Mode::Threaded);
}

/// Halt with NDK objects NDIS never closed: their CQs learn the device is gone
/// (STATUS_INTERNAL_ERROR at the armed callback), Halt returns after its bounded wait, and
/// the device lives on until the consumer's last close, which frees everything.
#[test]
fn halt_with_live_objects_is_bounded_and_leaves_nothing_after_the_last_close() {
    let cfg = MiniportConfig {
        halt_grace_ns: 50_000_000,
        ..MiniportConfig::default()
    };
    let rig = NdisRig::new(Mode::Deterministic, 1, &cfg);
    let a = rig.open(0, v(2, 1));
    let s = Side::new(&a, 0xC0);
    s.cq.arm(NDK_CQ_NOTIFY_ANY);
    let started = Instant::now();
    rig.mp(0).halt();
    assert!(
        started.elapsed() < HANG,
        "Halt waited {:?}",
        started.elapsed()
    );
    rig.pump.settle();
    assert_eq!(s.cq.notifications(), vec![STATUS_INTERNAL_ERROR]);
    assert!(rig.mp(0).device().is_none());
    assert_eq!(
        rig.statistics(0).CQError,
        0,
        "after Halt the miniport reports nothing"
    );
    // The consumer closes; NDIS's close of the adapter still finds it.
    s.close();
    rig.mp(0).close_ndk_adapter(a.ptr);
    assert_eq!(rig.mp(0).open_adapters(), 0);
    rig.finish();
}

/// A CQ error counts in CQError, once per CQ.
#[test]
fn cq_errors_count_once_per_cq() {
    let rig = NdisRig::new(Mode::Deterministic, 1, &MiniportConfig::default());
    let a = rig.open(0, v(2, 1));
    let cqs = [
        a.create_cq(16, None).unwrap(),
        a.create_cq(16, None).unwrap(),
    ];
    rig.mp(0).ndk_device().unwrap().device_fatal();
    rig.mp(0).ndk_device().unwrap().device_fatal();
    rig.pump.settle();
    assert_eq!(rig.statistics(0).CQError, 2);
    for c in cqs {
        c.close();
    }
    rig.mp(0).close_ndk_adapter(a.ptr);
    rig.finish();
}

/// InitializeEx failures: too few MSI-X messages, a device the driver refuses (VERSION
/// 17): a clean NDIS_STATUS and nothing left behind.
#[test]
fn initialize_failures_leave_nothing() {
    let guard = serial();
    let baseline = stats();
    for (what, version, messages, want) in [
        ("two messages", 20, 2, NDIS_STATUS_RESOURCES),
        ("VERSION 17", 17, 3, NDIS_STATUS_NOT_SUPPORTED),
    ] {
        let mut w = World::new(1);
        let mut n = NodeConfig::ipv4(0);
        n.device.version = version;
        w.add_node(n);
        let world = Arc::new(w);
        let pump = Pump::new(world.clone(), Mode::Deterministic);
        let node = world.node(0);
        let model = node.device().clone();
        let dma = SimDma::new(node.dma().clone());
        let m = model.clone();
        let platform = HostPlatform::new(
            HostDevice {
                bar1: SimBar1::new(model.clone()),
                dma: dma.clone(),
                doorbell: Some(Arc::new(move |off, val| m.uar_write32(off, val))),
                uar_pfn: DEFAULT_UAR_PFN,
                pump: Some(pump.platform_pump()),
            },
            2,
        );
        world.set_interrupt_sink(0, Arc::new(PlatformSink(Arc::downgrade(&platform))));
        let mut res = parse_resources(&resource_list()).unwrap();
        res.message_interrupts = messages;
        let p: Arc<dyn Platform> = platform.clone();
        assert_eq!(Miniport::initialize(p, &res).err(), Some(want), "{what}");
        assert_eq!(dma.live(), 0, "{what}: DMA left");
        platform.executor().shutdown();
    }
    assert_eq!(stats(), baseline);
    drop(guard);
}

// ------------------------------------------------------------------------------ OIDs

/// Guard bytes past the buffer NDIS hands over: nothing may be written there.
const GUARD: u8 = 0xA5;

/// Runs a query with a `len`-byte buffer (prefilled with `header`, then guard bytes) and
/// checks that nothing past what the result reports was written.
fn query_with(m: &Miniport, oid: NDIS_OID, len: usize, header: &[u8]) -> (OidResult, Vec<u8>) {
    let mut b = vec![GUARD; len + 16];
    let h = header.len().min(len);
    b[..h].copy_from_slice(&header[..h]);
    let before = b.clone();
    let r = m.query_oid(oid, &mut b[..len]);
    let done = r.bytes_done as usize;
    assert!(done <= len, "{oid:#x}: BytesWritten {done} > buffer {len}");
    assert_eq!(
        &b[len..],
        &before[len..],
        "{oid:#x}: written past the buffer"
    );
    if r.status != NDIS_STATUS_SUCCESS {
        assert_eq!(done, 0);
        assert_eq!(b, before, "{oid:#x}: a failed query wrote");
    }
    b.truncate(len);
    (r, b)
}

fn header(size: u16) -> [u8; 4] {
    let s = size.to_le_bytes();
    [0x80, 1, s[0], s[1]]
}

#[test]
fn ndk_oids_with_correct_short_and_malformed_buffers() {
    let rig = NdisRig::new(Mode::Deterministic, 1, &MiniportConfig::default());
    let m = rig.mp(0);

    // OID_NDK_STATISTICS: exactly 0xF8, larger, one byte short, empty; bad headers.
    for len in [0xF8, 0x100] {
        let (r, b) = query_with(m, OID_NDK_STATISTICS, len, &header(len as u16));
        assert_eq!(r, OidResult::done(0xF8), "len {len}");
        decode_counters(&b);
        assert!(
            b[0xF8..].iter().all(|&x| x == GUARD),
            "nothing past the answer"
        );
    }
    for len in [0, 4, 0xF7] {
        let (r, _) = query_with(m, OID_NDK_STATISTICS, len, &header(0xF8));
        assert_eq!(
            r,
            OidResult::needs(NDIS_STATUS_BUFFER_TOO_SHORT, 0xF8),
            "len {len}"
        );
    }
    for (what, h) in [
        ("type", [0x81, 1, 0xF8, 0]),
        ("revision 0", [0x80, 0, 0xF8, 0]),
        ("size too small", [0x80, 1, 0xF7, 0]),
        ("size past the buffer", [0x80, 1, 0xF9, 0]),
    ] {
        let (r, _) = query_with(m, OID_NDK_STATISTICS, 0xF8, &h);
        assert_eq!(r, OidResult::fail(NDIS_STATUS_INVALID_PARAMETER), "{what}");
    }

    // OID_NDK_CONNECTIONS / OID_NDK_LOCAL_ENDPOINTS: no entry exists; the answer is the
    // 0x10-byte header with Count 0.
    for oid in [OID_NDK_CONNECTIONS, OID_NDK_LOCAL_ENDPOINTS] {
        for len in [0x10, 0x50] {
            let (r, b) = query_with(m, oid, len, &header(len as u16));
            assert_eq!(r, OidResult::done(0x10), "{oid:#x} len {len}");
            assert_eq!(
                &b[..0x10],
                &[0x80, 1, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
                "{oid:#x}: header, Flags, Count 0, not mapped to TCP"
            );
            assert!(
                b[0x10..].iter().all(|&x| x == GUARD),
                "{oid:#x}: past the answer"
            );
        }
        for len in [0, 0xF] {
            let (r, _) = query_with(m, oid, len, &header(0x10));
            assert_eq!(r, OidResult::needs(NDIS_STATUS_BUFFER_TOO_SHORT, 0x10));
        }
        for h in [[0x00, 1, 0x10, 0], [0x80, 0, 0x10, 0], [0x80, 1, 0x08, 0]] {
            let (r, _) = query_with(m, oid, 0x10, &h);
            assert_eq!(r, OidResult::fail(NDIS_STATUS_INVALID_PARAMETER), "{h:?}");
        }
    }

    // OID_NDK_SET_STATE: one BOOLEAN exactly.
    assert_eq!(
        m.set_oid(OID_NDK_SET_STATE, &[]),
        OidResult::needs(NDIS_STATUS_INVALID_LENGTH, 1)
    );
    assert_eq!(
        m.set_oid(OID_NDK_SET_STATE, &[1, 0]),
        OidResult::needs(NDIS_STATUS_INVALID_LENGTH, 1)
    );
    assert_eq!(
        m.set_oid(OID_NDK_SET_STATE, &[2]),
        OidResult::needs(NDIS_STATUS_INVALID_DATA, 1)
    );
    assert!(m.ndk_enabled(), "a rejected set changes nothing");
    assert_eq!(m.next_ndk_pnp_event(), None);
    assert_eq!(m.set_oid(OID_NDK_SET_STATE, &[0]), OidResult::done(1));
    assert_eq!(m.next_ndk_pnp_event(), Some(NetEventNDKDisable));
    // The NDK OIDs are query-only or set-only.
    assert_eq!(
        m.query_oid(OID_NDK_SET_STATE, &mut [0]),
        OidResult::fail(NDIS_STATUS_NOT_SUPPORTED)
    );
    assert_eq!(
        m.set_oid(OID_NDK_STATISTICS, &statistics_buffer()),
        OidResult::fail(NDIS_STATUS_NOT_SUPPORTED)
    );
    assert_eq!(
        m.method_oid(OID_NDK_STATISTICS, &mut statistics_buffer(), 0xF8),
        OidResult::fail(NDIS_STATUS_NOT_SUPPORTED)
    );
    rig.finish();
}

#[test]
fn network_direct_zero_reports_disabled_and_refuses_enable() {
    let cfg = MiniportConfig::network_direct(false);
    let rig = NdisRig::new(Mode::Deterministic, 1, &cfg);
    let m = rig.mp(0);
    assert!(!m.ndk_enabled());
    assert_eq!(
        m.open_ndk_adapter(v(2, 1)).err(),
        Some(NDIS_STATUS_ADAPTER_NOT_READY)
    );
    assert_eq!(
        m.set_oid(OID_NDK_SET_STATE, &[1]),
        OidResult::needs(NDIS_STATUS_NOT_SUPPORTED, 1)
    );
    assert_eq!(m.next_ndk_pnp_event(), None);
    rig.finish();
}

#[test]
fn general_oids() {
    let rig = NdisRig::new(Mode::Deterministic, 1, &MiniportConfig::default());
    let m = rig.mp(0);
    let u32_of = |b: &[u8]| u32::from_le_bytes(b[..4].try_into().unwrap());
    for (oid, want) in [
        (OID_GEN_HARDWARE_STATUS, 0),
        (OID_GEN_MEDIA_SUPPORTED, 0),
        (OID_GEN_MEDIA_IN_USE, 0),
        (OID_GEN_MAXIMUM_LOOKAHEAD, 1500),
        (OID_GEN_CURRENT_LOOKAHEAD, 1500),
        (OID_GEN_MAXIMUM_FRAME_SIZE, 1500),
        (OID_GEN_MAXIMUM_TOTAL_SIZE, 1514),
        (OID_GEN_TRANSMIT_BLOCK_SIZE, 1514),
        (OID_GEN_RECEIVE_BLOCK_SIZE, 1514),
        (OID_GEN_TRANSMIT_BUFFER_SPACE, 0),
        (OID_GEN_RECEIVE_BUFFER_SPACE, 0),
        (OID_GEN_VENDOR_ID, 0x0056_5000),
        (OID_GEN_VENDOR_DRIVER_VERSION, 1),
        (OID_GEN_CURRENT_PACKET_FILTER, 0),
    ] {
        let (r, b) = query_with(m, oid, 4, &[]);
        assert_eq!((r, u32_of(&b)), (OidResult::done(4), want), "{oid:#x}");
        let (r, _) = query_with(m, oid, 3, &[]);
        assert_eq!(
            r,
            OidResult::needs(NDIS_STATUS_BUFFER_TOO_SHORT, 4),
            "{oid:#x}"
        );
    }
    // The supported list: every OID answered here, the four NDK OIDs among them.
    let (r, _) = query_with(m, OID_GEN_SUPPORTED_LIST, 8, &[]);
    let n = r.bytes_needed as usize;
    assert_eq!(r.status, NDIS_STATUS_BUFFER_TOO_SHORT);
    let (r, b) = query_with(m, OID_GEN_SUPPORTED_LIST, n, &[]);
    assert_eq!(r, OidResult::done(n));
    let list: Vec<u32> = b.chunks(4).map(u32_of).collect();
    for o in [
        OID_NDK_SET_STATE,
        OID_NDK_STATISTICS,
        OID_NDK_CONNECTIONS,
        OID_NDK_LOCAL_ENDPOINTS,
        OID_GEN_STATISTICS,
        OID_GEN_INTERRUPT_MODERATION,
        OID_GEN_LINK_PARAMETERS,
    ] {
        assert!(list.contains(&o), "{o:#x} listed");
    }
    assert_eq!(list, m.general_attributes().supported_oids);
    // Vendor description: NUL-terminated.
    let (r, _) = query_with(m, OID_GEN_VENDOR_DESCRIPTION, 4, &[]);
    assert_eq!(r.status, NDIS_STATUS_BUFFER_TOO_SHORT);
    let (r, b) = query_with(m, OID_GEN_VENDOR_DESCRIPTION, r.bytes_needed as usize, &[]);
    assert_eq!(r.status, NDIS_STATUS_SUCCESS);
    assert_eq!(b.last(), Some(&0));
    // Statistics counters: 8 bytes, or their low half into 4.
    let (r, _) = query_with(m, OID_GEN_XMIT_OK, 4, &[]);
    assert_eq!(
        (r.status, r.bytes_done, r.bytes_needed),
        (NDIS_STATUS_SUCCESS, 4, 8)
    );
    let (r, _) = query_with(m, OID_GEN_RCV_OK, 2, &[]);
    assert_eq!(r, OidResult::needs(NDIS_STATUS_BUFFER_TOO_SHORT, 8));
    // Interrupt moderation: not supported, as an NDIS object.
    let (r, b) = query_with(m, OID_GEN_INTERRUPT_MODERATION, 12, &header(12));
    assert_eq!(r, OidResult::done(12));
    assert_eq!(b, [0x80, 1, 12, 0, 0, 0, 0, 0, 1, 0, 0, 0]);
    let (r, _) = query_with(m, OID_GEN_INTERRUPT_MODERATION, 11, &header(12));
    assert_eq!(r, OidResult::needs(NDIS_STATUS_BUFFER_TOO_SHORT, 12));
    let mut set = b.clone();
    assert_eq!(
        m.set_oid(OID_GEN_INTERRUPT_MODERATION, &set),
        OidResult::done(12)
    );
    set[8] = 2;
    assert_eq!(
        m.set_oid(OID_GEN_INTERRUPT_MODERATION, &set),
        OidResult::needs(NDIS_STATUS_INVALID_DATA, 12)
    );
    set[0] = 0;
    assert_eq!(
        m.set_oid(OID_GEN_INTERRUPT_MODERATION, &set),
        OidResult::needs(NDIS_STATUS_INVALID_PARAMETER, 12)
    );
    assert_eq!(
        m.set_oid(OID_GEN_INTERRUPT_MODERATION, &set[..11]),
        OidResult::needs(NDIS_STATUS_INVALID_LENGTH, 12)
    );
    // General statistics: a header-checked object.
    let (r, _) = query_with(m, OID_GEN_STATISTICS, 0x97, &header(0x98));
    assert_eq!(r, OidResult::needs(NDIS_STATUS_BUFFER_TOO_SHORT, 0x98));
    let (r, _) = query_with(m, OID_GEN_STATISTICS, 0x98, &[0x80, 0, 0x98, 0]);
    assert_eq!(r, OidResult::fail(NDIS_STATUS_INVALID_PARAMETER));
    // Sets: packet filter and lookahead are kept; the rest is refused as documented.
    let f = NDIS_PACKET_TYPE_DIRECTED | NDIS_PACKET_TYPE_BROADCAST;
    assert_eq!(
        m.set_oid(OID_GEN_CURRENT_PACKET_FILTER, &f.to_le_bytes()),
        OidResult::done(4)
    );
    let (_, b) = query_with(m, OID_GEN_CURRENT_PACKET_FILTER, 4, &[]);
    assert_eq!(u32_of(&b), f);
    assert_eq!(
        m.set_oid(OID_GEN_CURRENT_PACKET_FILTER, &0x40u32.to_le_bytes()),
        OidResult::needs(NDIS_STATUS_NOT_SUPPORTED, 4)
    );
    assert_eq!(
        m.set_oid(OID_GEN_CURRENT_PACKET_FILTER, &[1, 0]),
        OidResult::needs(NDIS_STATUS_INVALID_LENGTH, 4)
    );
    assert_eq!(
        m.set_oid(OID_GEN_CURRENT_LOOKAHEAD, &128u32.to_le_bytes()),
        OidResult::done(4)
    );
    let (_, b) = query_with(m, OID_GEN_CURRENT_LOOKAHEAD, 4, &[]);
    assert_eq!(u32_of(&b), 128);
    assert_eq!(
        m.set_oid(OID_GEN_CURRENT_LOOKAHEAD, &1501u32.to_le_bytes()),
        OidResult::needs(NDIS_STATUS_INVALID_DATA, 4)
    );
    let mut lp = vec![0u8; 0x20];
    lp[..4].copy_from_slice(&header(0x20));
    assert_eq!(
        m.set_oid(OID_GEN_LINK_PARAMETERS, &lp),
        OidResult::needs(NDIS_STATUS_NOT_SUPPORTED, 0x20)
    );
    assert_eq!(
        m.set_oid(OID_GEN_LINK_PARAMETERS, &lp[..0x1F]),
        OidResult::needs(NDIS_STATUS_INVALID_LENGTH, 0x20)
    );
    assert_eq!(
        m.query_oid(0x0001_0207, &mut [0; 64]),
        OidResult::fail(NDIS_STATUS_NOT_SUPPORTED),
        "an OID not answered here"
    );
    // The general attributes describe the same adapter.
    let g = m.general_attributes();
    assert_eq!(
        (g.mtu, g.lookahead_size, g.mac_address_length),
        (1500, 1500, 6)
    );
    assert_eq!(g.permanent_mac_address, rig.hosts[0].mac, "MACL/MACH (M3)");
    rig.finish();
}

/// Surprise removal tells every NDK object (STATUS_INTERNAL_ERROR at the armed CQ) before
/// NDIS closes the adapters; Shutdown resets the device without taking a lock; Halt then
/// frees everything.
#[test]
fn surprise_removal_and_shutdown() {
    let rig = NdisRig::new(Mode::Deterministic, 1, &MiniportConfig::default());
    let a = rig.open(0, v(1, 2));
    let s = Side::new(&a, 0xD0);
    s.cq.arm(NDK_CQ_NOTIFY_ANY);
    rig.mp(0).pnp_event(NdisDevicePnPEventSurpriseRemoved);
    rig.mp(0).pnp_event(0);
    rig.pump.settle();
    assert_eq!(s.cq.notifications(), vec![STATUS_INTERNAL_ERROR]);
    assert_eq!(rig.statistics(0).CQError, 1);
    s.close();
    rig.mp(0).close_ndk_adapter(a.ptr);
    // A second close of the same pointer, and one of a pointer never handed out: ignored.
    rig.mp(0).close_ndk_adapter(a.ptr);
    rig.mp(0)
        .close_ndk_adapter(std::ptr::NonNull::<NDK_ADAPTER>::dangling().as_ptr());
    rig.pump.settle();
    assert!(rig.hosts[0].model.with_core(|c| c.is_active()));
    rig.mp(0).shutdown();
    assert!(!rig.hosts[0].model.with_core(|c| c.is_active()), "RESET");
    rig.finish();
}
