//! What Windows configures and reads of the miniport (issue 23), through the host NDIS
//! harness: the registry keywords across restarts (Halt → InitializeEx) and
//! OID_NDK_SET_STATE, the RoCE frame size on the wire (Wireshark decodes the REQ's path MTU)
//! and in CREATE_BIND, bad values falling back with an event, the link following the port.

mod common;

use std::net::SocketAddr;

use common::Mode;
use common::ndis::*;
use common::ndk::{Adapter, CmPair, fill, verify};
use common::tshark;
use pvrdma_ndk::ndis::config::*;
use pvrdma_ndk::ndis::oid::OID_PVRDMA_ROCE_MTU;
use pvrdma_ndk::ndis::*;
use pvrdma_ndk::ndkpi::*;

const LOCAL: u32 = NDK_MR_FLAG_ALLOW_LOCAL_WRITE;

fn cfg(keys: &[(&'static str, u32)]) -> MiniportConfig {
    MiniportConfig::from_registry(&Keys(keys.to_vec()))
}

fn u32_oid(rig: &NdisRig, host: usize, oid: NDIS_OID) -> u32 {
    let mut b = [0u8; 4];
    assert_eq!(rig.query(host, oid, &mut b), OidResult::done(4), "{oid:#x}");
    u32::from_le_bytes(b)
}

/// `*NetworkDirect` 0 brings the adapter up with NDK disabled, and NDK then "cannot be
/// enabled" (Learn) until the keyword changes and the adapter restarts; 1 brings it up
/// enabled, and OID_NDK_SET_STATE disables and re-enables it with its PnP events.
#[test]
fn network_direct_takes_effect_across_restarts_and_set_state() {
    let mut rig = NdisRig::new(Mode::Deterministic, 1, &cfg(&[(KW_NETWORK_DIRECT, 0)]));
    let m = rig.mp(0);
    assert!(!m.ndk_enabled(), "NDK attributes Enabled = FALSE");
    assert!(m.config_events().is_empty(), "0 is a valid value");
    assert_eq!(
        m.open_ndk_adapter(v(2, 1)).err(),
        Some(NDIS_STATUS_ADAPTER_NOT_READY)
    );
    assert_eq!(
        m.set_oid(OID_NDK_SET_STATE, &[1]),
        OidResult::needs(NDIS_STATUS_NOT_SUPPORTED, 1),
        "*NetworkDirect = 0: NDK cannot be enabled"
    );
    assert_eq!(m.set_oid(OID_NDK_SET_STATE, &[0]), OidResult::done(1));
    assert_eq!(m.next_ndk_pnp_event(), None);

    // The administrator enables it (Enable-NetAdapterRdma rewrites the keyword and
    // restarts the adapter).
    rig.restart(0, &cfg(&[(KW_NETWORK_DIRECT, 1)])).unwrap();
    let m = rig.mp(0);
    assert!(m.ndk_enabled(), "NDK attributes Enabled = TRUE");
    let a = rig.open(0, v(2, 1));
    m.close_ndk_adapter(a.ptr);
    assert_eq!(m.set_oid(OID_NDK_SET_STATE, &[0]), OidResult::done(1));
    assert_eq!(m.next_ndk_pnp_event(), Some(NetEventNDKDisable));
    assert_eq!(
        m.open_ndk_adapter(v(2, 1)).err(),
        Some(NDIS_STATUS_ADAPTER_NOT_READY)
    );
    assert_eq!(m.set_oid(OID_NDK_SET_STATE, &[1]), OidResult::done(1));
    assert_eq!(m.next_ndk_pnp_event(), Some(NetEventNDKEnable));
    let a = rig.open(0, v(1, 2));
    m.close_ndk_adapter(a.ptr);
    assert_eq!(m.set_oid(OID_NDK_SET_STATE, &[0]), OidResult::done(1));
    assert_eq!(m.next_ndk_pnp_event(), Some(NetEventNDKDisable));

    // Disable-NetAdapterRdma: the keyword goes back to 0 and the restart obeys it, whatever
    // OID_NDK_SET_STATE said before.
    rig.restart(0, &cfg(&[(KW_NETWORK_DIRECT, 0)])).unwrap();
    assert!(!rig.mp(0).ndk_enabled());
    assert_eq!(
        rig.mp(0).open_ndk_adapter(v(2, 1)).err(),
        Some(NDIS_STATUS_ADAPTER_NOT_READY)
    );
    // A keyword removed from the registry: the INF default, enabled.
    rig.restart(0, &cfg(&[])).unwrap();
    assert!(rig.mp(0).ndk_enabled());
    let a = rig.open(0, v(2, 1));
    rig.mp(0).close_ndk_adapter(a.ptr);
    rig.finish();
}

/// Values a keyword does not allow never fail InitializeEx: the INF default is used and an
/// event says so; a technology PVRDMA does not carry turns NDK off.
#[test]
fn bad_keyword_values_fall_back_with_an_event() {
    let mut rig = NdisRig::new(
        Mode::Deterministic,
        1,
        &cfg(&[
            (KW_NETWORK_DIRECT, 7),
            (KW_NETWORK_DIRECT_TECHNOLOGY, 0),
            (KW_ROCE_FRAME_SIZE, 1500),
            (KW_JUMBO_PACKET, 65535),
        ]),
    );
    let m = rig.mp(0);
    let events: Vec<ConfigEvent> = m.config_events().iter().copied().collect();
    assert_eq!(
        events,
        [
            ConfigEvent::OutOfRange {
                keyword: Keyword::NetworkDirect,
                value: 7,
                used: 1
            },
            ConfigEvent::OutOfRange {
                keyword: Keyword::NetworkDirectTechnology,
                value: 0,
                used: 4
            },
            ConfigEvent::OutOfRange {
                keyword: Keyword::RoceFrameSize,
                value: 1500,
                used: 1024
            },
            ConfigEvent::OutOfRange {
                keyword: Keyword::JumboPacket,
                value: 65535,
                used: 1514
            },
        ]
    );
    assert!(m.ndk_enabled(), "the defaults enable NDK");
    assert_eq!(m.roce_mtu(), 1024);
    assert_eq!(u32_oid(&rig, 0, OID_PVRDMA_ROCE_MTU), 1024);
    assert_eq!(u32_oid(&rig, 0, OID_GEN_MAXIMUM_FRAME_SIZE), 1500);
    assert_eq!(u32_oid(&rig, 0, OID_GEN_MAXIMUM_TOTAL_SIZE), 1514);

    // iWARP, InfiniBand, RoCE (v1): refused, NDK off (and it cannot be enabled).
    for t in 1..=3 {
        rig.restart(0, &cfg(&[(KW_NETWORK_DIRECT_TECHNOLOGY, t)]))
            .unwrap();
        let m = rig.mp(0);
        assert!(!m.ndk_enabled(), "technology {t}");
        assert_eq!(
            m.config_events().iter().copied().collect::<Vec<_>>(),
            [ConfigEvent::UnsupportedTechnology { value: t }]
        );
        assert_eq!(
            m.set_oid(OID_NDK_SET_STATE, &[1]),
            OidResult::needs(NDIS_STATUS_NOT_SUPPORTED, 1)
        );
    }
    // RoCEv2 (4) and *JumboPacket 9014: jumbo Ethernet, nothing to log.
    rig.restart(
        0,
        &cfg(&[(KW_NETWORK_DIRECT_TECHNOLOGY, 4), (KW_JUMBO_PACKET, 9014)]),
    )
    .unwrap();
    let m = rig.mp(0);
    assert!(m.ndk_enabled() && m.config_events().is_empty());
    assert_eq!(u32_oid(&rig, 0, OID_GEN_MAXIMUM_FRAME_SIZE), 9000);
    assert_eq!(m.general_attributes().mtu, 9000);
    rig.finish();
}

/// The operational RoCE MTU is the keyword bounded by the port's active MTU (QUERY_PORT)
/// and the Ethernet MTU; a difference is logged with the value in use.
#[test]
fn the_roce_mtu_is_bounded_by_the_port_and_the_ethernet_mtu() {
    // Port 1024 (the model's default, M41).
    let mut rig = NdisRig::new(
        Mode::Deterministic,
        1,
        &cfg(&[(KW_ROCE_FRAME_SIZE, 4096), (KW_JUMBO_PACKET, 9014)]),
    );
    assert_eq!(rig.mp(0).roce_mtu(), 1024);
    assert_eq!(
        rig.mp(0)
            .config_events()
            .iter()
            .copied()
            .collect::<Vec<_>>(),
        [ConfigEvent::OperationalMtu {
            configured: 4096,
            operational: 1024
        }]
    );
    assert_eq!(u32_oid(&rig, 0, OID_PVRDMA_ROCE_MTU), 1024);
    rig.restart(0, &cfg(&[(KW_ROCE_FRAME_SIZE, 512)])).unwrap();
    assert_eq!(rig.mp(0).roce_mtu(), 512);
    assert!(rig.mp(0).config_events().is_empty());
    rig.finish();

    // Port 4096: the Ethernet MTU bounds it (1500 carries 1024, 4074 2048, 9000 4096).
    let mut opts = RigOptions::new(Mode::Deterministic, 1, &cfg(&[(KW_ROCE_FRAME_SIZE, 4096)]));
    opts.port_mtu = 5;
    let mut rig = NdisRig::with(opts);
    for (jumbo, mtu) in [(1514, 1024), (4088, 2048), (9014, 4096)] {
        rig.restart(
            0,
            &cfg(&[(KW_ROCE_FRAME_SIZE, 4096), (KW_JUMBO_PACKET, jumbo)]),
        )
        .unwrap();
        assert_eq!(rig.mp(0).roce_mtu(), mtu, "*JumboPacket {jumbo}");
        let logged = rig
            .mp(0)
            .config_events()
            .iter()
            .copied()
            .collect::<Vec<_>>();
        if mtu == 4096 {
            assert!(logged.is_empty());
        } else {
            assert_eq!(
                logged,
                [ConfigEvent::OperationalMtu {
                    configured: 4096,
                    operational: mtu
                }]
            );
        }
    }
    rig.finish();
}

/// Listener on `a1`'s host, NdkConnect from `a0`'s: the completed exchange (or the status
/// the connect ended with).
fn connect(
    rig: &NdisRig,
    a0: &Adapter,
    a1: &Adapter,
    s0: &Side,
    s1: &Side,
) -> Result<CmPair, NTSTATUS> {
    let listener = a1.create_listener().expect("NdkCreateListener");
    assert_eq!(
        listener.listen(at(rig.hosts[a1.host()].ip, 0)),
        STATUS_SUCCESS
    );
    let dst: SocketAddr = listener.local_address().expect("listener address");
    let client = a0.create_connector().expect("NdkCreateConnector");
    let c = client.connect_raw(&s0.qp, at(rig.hosts[a0.host()].ip, 0), dst, 8, 8, &[]);
    assert_eq!(c.inline, STATUS_PENDING);
    // A refused REQ never reaches the listener's consumer.
    rig.pump.settle();
    let Some(server) = listener.try_incoming() else {
        let st = c.wait();
        assert_eq!(client.close(), STATUS_SUCCESS);
        assert_eq!(listener.close(), STATUS_SUCCESS);
        return Err(st);
    };
    let acc = server.accept_raw(&s1.qp, 8, 8, &[]);
    assert_eq!(c.wait(), STATUS_SUCCESS, "NdkConnect");
    assert_eq!(client.complete_connect(), STATUS_SUCCESS);
    assert_eq!(acc.wait(), STATUS_SUCCESS, "NdkAccept");
    Ok(CmPair {
        client,
        server,
        listener,
    })
}

/// Each `*NetworkDirectRoCEFrameSize` (on a port and Ethernet that carry 4096) is the path
/// MTU of the REQ on the wire (decoded by Wireshark), of every CREATE_BIND, and of the data:
/// a SEND of three MTUs and a byte goes out as four packets.
#[test]
fn each_roce_frame_size_reaches_the_req_create_bind_and_the_data() {
    let keys = |size: u32| cfg(&[(KW_ROCE_FRAME_SIZE, size), (KW_JUMBO_PACKET, 9014)]);
    let mut opts = RigOptions::new(Mode::Deterministic, 2, &keys(1024)).engines();
    opts.port_mtu = 5;
    let mut rig = NdisRig::with(opts);
    let sizes = [256u32, 512, 1024, 2048, 4096];
    let mut captures = Vec::new();
    for (n, &size) in sizes.iter().enumerate() {
        for h in 0..2 {
            rig.restart(h, &keys(size)).unwrap();
            assert_eq!(rig.mp(h).roce_mtu(), size);
            assert_eq!(u32_oid(&rig, h, OID_PVRDMA_ROCE_MTU), size);
            assert!(rig.mp(h).config_events().is_empty());
            let binds = rig.hosts[h].model.with_core(|c| c.gids());
            assert_eq!(binds.len(), 1, "one address, one GID");
            assert_eq!(binds[0].1.mtu, size, "CREATE_BIND's mtu");
        }
        let pcap = pcap_path(&format!("mtu{size}"));
        rig.capture(&pcap);
        let (a0, a1) = (rig.open(0, v(2, 1)), rig.open(1, v(2, 1)));
        let (s0, s1) = (Side::new(&a0, 0xA0), Side::new(&a1, 0xB0));
        let pair = connect(&rig, &a0, &a1, &s0, &s1).expect("connected");
        let (m0, m1) = (
            Region::new(&rig, 0, &s0.pd, 4, 0x1000_0000, LOCAL),
            Region::new(&rig, 1, &s1.pd, 4, 0x2000_0000, LOCAL),
        );
        let len = 3 * size + 1;
        assert_eq!(s1.qp.receive(1, &[m1.sge(0, 16384)]), STATUS_SUCCESS);
        let data = fill(&m0.mem, 0, 0x40 + n as u8, len as usize);
        assert_eq!(s0.qp.send(2, &[m0.sge(0, len)], 0), STATUS_SUCCESS);
        let r = s1.cq.wait_results(1);
        assert_eq!((r[0].Status, r[0].BytesTransferred), (STATUS_SUCCESS, len));
        assert_eq!(s0.cq.wait_results(1)[0].Status, STATUS_SUCCESS);
        verify(&m1.mem, 0, &data);
        pair.disconnect_and_close();
        rig.pump.settle();
        rig.end_capture();
        m0.close();
        m1.close();
        s0.close();
        s1.close();
        rig.mp(0).close_ndk_adapter(a0.ptr);
        rig.mp(1).close_ndk_adapter(a1.ptr);
        captures.push((size, len, pcap));
    }
    rig.finish();
    // One tshark per capture, all at once: each start costs more than its decode.
    std::thread::scope(|s| {
        let decodes: Vec<_> = captures
            .iter()
            .map(|(_, _, pcap)| s.spawn(|| tshark::req_path_mtus_and_rc_sends(pcap, "10.0.0.1")))
            .collect();
        for ((size, len, pcap), d) in captures.iter().zip(decodes) {
            if let Some((mtus, ops)) = d.join().expect("the decode thread") {
                let code = u64::from(mtu_code(*size).unwrap());
                assert_eq!(
                    mtus,
                    vec![code],
                    "{size}: the REQ's path MTU as Wireshark decodes it"
                );
                // RC SEND First/Middle/Last/Only (opcodes 0, 1, 2, 4) from host 0.
                assert_eq!(
                    ops,
                    ["0", "1", "1", "2"],
                    "{size}: {len} bytes at MTU {size}"
                );
            }
            if std::env::var_os("PVRDMA_KEEP_PCAP").is_none() {
                let _ = std::fs::remove_file(pcap);
            }
        }
    });
}

/// A peer asking a larger path MTU than this side runs at is refused (REJ 26, the consumer
/// sees STATUS_CONNECTION_REFUSED); the other way round the connection runs at the smaller
/// MTU both carry.
#[test]
fn a_larger_mtu_than_the_passive_side_runs_at_is_refused() {
    let mut opts = RigOptions::new(
        Mode::Deterministic,
        2,
        &cfg(&[(KW_ROCE_FRAME_SIZE, 4096), (KW_JUMBO_PACKET, 9014)]),
    )
    .engines();
    opts.configs.push(cfg(&[(KW_ROCE_FRAME_SIZE, 1024)]));
    opts.port_mtu = 5;
    let rig = NdisRig::with(opts);
    assert_eq!((rig.mp(0).roce_mtu(), rig.mp(1).roce_mtu()), (4096, 1024));
    let (a0, a1) = (rig.open(0, v(2, 1)), rig.open(1, v(2, 1)));
    let (s0, s1) = (Side::new(&a0, 0xA0), Side::new(&a1, 0xB0));
    assert_eq!(
        connect(&rig, &a0, &a1, &s0, &s1).err(),
        Some(STATUS_CONNECTION_REFUSED),
        "REQ 4096 to a 1024 side"
    );
    // Host 1 (1024) to host 0 (4096): fresh QPs (a QP serves one connection attempt's
    // side only once it left INIT; these never did, but new ones keep the test plain).
    let (t0, t1) = (Side::new(&a0, 0xA1), Side::new(&a1, 0xB1));
    let pair = connect(&rig, &a1, &a0, &t1, &t0).expect("REQ 1024 to a 4096 side connects");
    pair.disconnect_and_close();
    for s in [s0, s1, t0, t1] {
        s.close();
    }
    rig.mp(0).close_ndk_adapter(a0.ptr);
    rig.mp(1).close_ndk_adapter(a1.ptr);
    rig.finish();
}

/// The link NDIS sees follows the port: QUERY_PORT's ACTIVE 1X EDR at InitializeEx is a
/// connected 25 Gb/s link in the general attributes; PORT_ERR indicates it down, PORT_ACTIVE
/// up again at the speed QUERY_PORT reports; a flap ends where the port ends.
#[test]
fn the_link_follows_the_port() {
    let rig = NdisRig::new(Mode::Deterministic, 1, &MiniportConfig::default());
    let up = LinkState {
        connected: true,
        speed_bps: 25_000_000_000,
    };
    let down = LinkState {
        connected: false,
        speed_bps: u64::MAX,
    };
    let g = rig.mp(0).general_attributes();
    assert_eq!(
        (
            g.media_connect_state,
            g.xmit_link_speed,
            g.rcv_link_speed,
            g.max_xmit_link_speed
        ),
        (
            MediaConnectStateConnected,
            25_000_000_000,
            25_000_000_000,
            25_000_000_000
        )
    );
    assert_eq!(rig.mp(0).link(), up);
    let ind = &rig.hosts[0].indications;
    assert!(
        ind.take().is_empty(),
        "nothing changed since the attributes"
    );

    rig.world.set_link(0, false);
    rig.pump.settle();
    assert_eq!(ind.take(), [down], "PORT_ERR");
    assert_eq!(rig.mp(0).link(), down);
    let g = rig.mp(0).general_attributes();
    assert_eq!(g.media_connect_state, MediaConnectStateDisconnected);
    rig.world.set_link(0, true);
    rig.pump.settle();
    assert_eq!(
        ind.take(),
        [up],
        "PORT_ACTIVE, and QUERY_PORT's answer agrees"
    );
    // A flap before anything ran: the events in order, the last one wins.
    rig.world.set_link(0, false);
    rig.world.set_link(0, true);
    rig.world.set_link(0, false);
    rig.pump.settle();
    assert_eq!(ind.take(), [down, up, down]);
    assert_eq!(rig.mp(0).link(), down);
    rig.world.set_link(0, true);
    rig.pump.settle();
    assert_eq!(ind.take(), [up]);
    rig.finish();
}

/// NDK on a NIC switch's vPort (NDKPI 2.0 Mode 2: a non-default SwitchId or VPortId in
/// NDIS_OPEN_NDK_ADAPTER_PARAMETERS) is not offered: refused with NDIS_STATUS_NOT_SUPPORTED,
/// never opened as the native adapter.
#[test]
fn a_non_default_switch_or_vport_is_refused() {
    let rig = NdisRig::new(Mode::Deterministic, 1, &MiniportConfig::default());
    let m = rig.mp(0);
    let p = |switch, vport| NDIS_OPEN_NDK_ADAPTER_PARAMETERS {
        Version: v(2, 1),
        SwitchId: switch,
        VPortId: vport,
    };
    for (switch, vport) in [(1, 0), (0, 1), (7, 9)] {
        assert_eq!(
            m.open_ndk_adapter_with(&p(switch, vport)).err(),
            Some(NDIS_STATUS_NOT_SUPPORTED),
            "switch {switch}, vPort {vport}"
        );
    }
    assert_eq!(m.open_adapters(), 0, "nothing was opened");
    let a = m
        .open_ndk_adapter_with(&p(0, 0))
        .expect("the default switch and vPort");
    assert_eq!(m.open_adapters(), 1);
    m.close_ndk_adapter(a);
    rig.finish();
}
