use super::*;
use crate::wire::ext::{AethSyndrome, NakCode};
use crate::wire::opcode::{self, ALL};
use crate::wire::psn::Psn;

/// scapy test/contrib/roce.uts "RoCE layer" example (UC SEND Only over IPv4; scapy asserts IP
/// checksum 0xb4d5, UDP checksum 0xaca2, ICRC field 0x78f353f3 = wire bytes 78 f3 53 f3),
/// followed by the 4 bytes of Ethernet padding the test appends.
fn scapy_uc_frame() -> Vec<u8> {
    let mut f = vec![
        0x24, 0x8a, 0x07, 0xa8, 0xfa, 0x22, 0x24, 0x8a, 0x07, 0xa8, 0xfa, 0x22, 0x08,
        0x00, // eth
        0x45, 0x01, 0x00, 0x40, 0x04, 0x78, 0x40, 0x00, 0x40, 0x11, 0xb4, 0xd5, 192, 168, 0, 7,
        192, 168, 0, 7, // ipv4
        0xc0, 0x00, 0x12, 0xb7, 0x00, 0x2c, 0xac, 0xa2, // udp
        0x24, 0x60, 0xff, 0xff, 0x00, 0x00, 0x00, 0xd3, 0x00, 0xcf, 0x17, 0x10, // bth
    ];
    f.extend_from_slice(b"F0\x81\x8b\xe2\x895\xd9\x0e\x9a\x95PT\x01\xbe\x88^P\x00\x00");
    f.extend_from_slice(&[0x78, 0xf3, 0x53, 0xf3]);
    f.extend_from_slice(&[0; 4]);
    f
}

/// scapy roce.uts "RoCE CNP captured on ConnectX-4 Lx": a hardware frame whose ICRC is
/// 82 fd 00 2a (BTH byte 4 = 0x40, BECN, is masked by the ICRC).
const CX4_CNP: [u8; 74] = [
    0xe4, 0x1d, 0x2d, 0xab, 0x2b, 0xc2, 0x7c, 0xfe, 0x90, 0x64, 0x3b, 0x32, 0x08, 0x00, 0x45, 0xc2,
    0x00, 0x3c, 0x71, 0x8c, 0x40, 0x00, 0x40, 0x11, 0x91, 0x61, 0x0a, 0x00, 0x11, 0x01, 0x0a, 0x00,
    0x12, 0x01, 0x00, 0x00, 0x12, 0xb7, 0x00, 0x28, 0x00, 0x00, 0x81, 0x00, 0xff, 0xff, 0x40, 0x00,
    0x01, 0x18, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x82, 0xfd, 0x00, 0x2a,
];

#[test]
fn icrc_known_answers() {
    let f = scapy_uc_frame();
    assert_eq!(
        icrc::compute(&f[14..34], &f[34..42], &f[42..74]),
        0xF353_F378
    );
    assert_eq!(&f[74..78], &0xF353_F378u32.to_le_bytes());
    let c = &CX4_CNP;
    assert_eq!(
        icrc::compute(&c[14..34], &c[34..42], &c[42..70]),
        u32::from_le_bytes([0x82, 0xfd, 0x00, 0x2a])
    );
    // The full parser gets past every check, ICRC included, and stops at the opcode this model
    // does not implement (UC, CNP).
    assert_eq!(RocePacket::parse(&f), Err(WireError::UnknownOpcode(0x24)));
    assert_eq!(RocePacket::parse(c), Err(WireError::UnknownOpcode(0x81)));
    let mut bad = f.clone();
    bad[60] ^= 0x01;
    // Fix the UDP checksum so that the ICRC is what catches it.
    UdpPacket::new_unchecked(&mut bad[34..78])
        .fill_checksum(&PseudoHeader::V4([192, 168, 0, 7], [192, 168, 0, 7]));
    assert!(matches!(
        RocePacket::parse(&bad),
        Err(WireError::BadIcrc {
            found: 0xF353_F378,
            ..
        })
    ));
}

const MAC_A: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0A];
const MAC_B: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0B];

fn gids(v4: bool) -> (Gid, Gid) {
    if v4 {
        (gid_from_ipv4([10, 0, 0, 1]), gid_from_ipv4([10, 0, 0, 2]))
    } else {
        let mut a = [0u8; 16];
        a[0] = 0xfd;
        a[15] = 1;
        let mut b = a;
        b[15] = 2;
        (a, b)
    }
}

/// A packet of `op` with every extension header the opcode needs filled with distinct values.
fn sample(op: u8, v4: bool, payload: &[u8]) -> RocePacket<'_> {
    let w = ext_headers(op).unwrap();
    let (s, d) = gids(v4);
    RocePacket {
        src_mac: MAC_A,
        dst_mac: MAC_B,
        vlan: None,
        src_gid: s,
        dst_gid: d,
        traffic_class: 0x68,
        hop_limit: 64,
        flow_label: 0,
        ip_ident: if v4 { 0x1234 } else { 0 },
        udp_src_port: 0xC123,
        bth: BthRepr {
            opcode: op,
            solicited: op == opcode::RC_SEND_ONLY,
            mig_req: true,
            pad_count: 0,
            pkey: 0xFFFF,
            fecn: false,
            becn: false,
            dest_qp: 0x00_0123,
            ack_req: true,
            psn: Psn::new(0xFF_FFFE),
        },
        ext: ExtRepr {
            reth: w.reth.then_some(RethRepr {
                va: 0x1000_2000,
                rkey: 0x0000_0512,
                dma_len: 8192,
            }),
            atomic_eth: w.atomic_eth.then_some(AtomicEthRepr {
                va: 8,
                rkey: 9,
                swap_add: 10,
                compare: 11,
            }),
            deth: w.deth.then_some(DethRepr {
                qkey: 0x8001_0000,
                src_qp: 1,
            }),
            immdt: w.immdt.then_some(0xCAFE_F00D),
            ieth: w.ieth.then_some(0x0000_0300),
            aeth: w.aeth.then_some(AethRepr {
                syndrome: AethSyndrome::Ack { credits: 0x1F },
                msn: 77,
            }),
            atomic_ack_eth: w.atomic_ack_eth.then_some(AtomicAckEthRepr { orig: 0x55 }),
        },
        payload: if w.payload { payload } else { &[] },
    }
}

#[test]
fn every_opcode_round_trips_over_ipv4_and_ipv6() {
    let data: Vec<u8> = (0..9u8).map(|i| i.wrapping_mul(37)).collect();
    for v4 in [true, false] {
        for op in ALL {
            for n in 0..=data.len() {
                let p = sample(op, v4, &data[..n]);
                let f = p.emit().unwrap();
                assert_eq!(f.len(), p.buffer_len());
                let q =
                    RocePacket::parse(&f).unwrap_or_else(|e| panic!("{op:#x} v4={v4} n={n}: {e}"));
                let expect_pad = if p.payload.is_empty() {
                    0
                } else {
                    (4 - n % 4) % 4
                };
                assert_eq!(q.bth.pad_count as usize, expect_pad);
                assert_eq!(
                    q,
                    RocePacket {
                        bth: BthRepr {
                            pad_count: q.bth.pad_count,
                            ..p.bth
                        },
                        ..p
                    }
                );
                assert_eq!(f.len() % 2, 0);
                // Ethertype, UDP port and UDP checksum policy (cm.md §7.1).
                let e = EthernetFrame::new_checked(&f[..]).unwrap();
                let udp_at = if v4 { 34 } else { 54 };
                let u = UdpPacket::new_checked(&f[udp_at..]).unwrap();
                assert_eq!(u.dst_port(), 4791);
                if v4 {
                    assert_eq!(e.ethertype(), 0x0800);
                    assert_eq!(f[14], 0x45);
                    assert_eq!(f[20] & 0x40, 0x40, "DF");
                    assert_eq!(u.checksum(), 0);
                } else {
                    assert_eq!(e.ethertype(), 0x86DD);
                    assert_ne!(u.checksum(), 0);
                }
            }
        }
    }
}

#[test]
fn known_layout_rc_write_first_ipv4() {
    let pay = [0xAAu8; 5];
    let p = sample(opcode::RC_RDMA_WRITE_FIRST, true, &pay);
    let f = p.emit().unwrap();
    // 14 + 20 + 8 + 12 + 16 + 5 + 3 pad + 4.
    assert_eq!(f.len(), 82);
    assert_eq!(&f[16..18], &68u16.to_be_bytes(), "IPv4 total length");
    assert_eq!(&f[38..40], &48u16.to_be_bytes(), "UDP length");
    assert_eq!(
        &f[42..54],
        &[
            0x06, 0x70, 0xFF, 0xFF, 0x00, 0x00, 0x01, 0x23, 0x80, 0xFF, 0xFF, 0xFE
        ]
    );
    assert_eq!(
        &f[54..70],
        &[
            0, 0, 0, 0, 0x10, 0, 0x20, 0, 0, 0, 0x05, 0x12, 0, 0, 0x20, 0
        ]
    );
    assert_eq!(&f[70..75], &pay);
    assert_eq!(&f[75..78], &[0, 0, 0]);
    let crc = icrc::compute(&f[14..34], &f[34..42], &f[42..78]);
    assert_eq!(&f[78..], &crc.to_le_bytes());
    let (q, l) = RocePacket::parse_with_layout(&f).unwrap();
    assert_eq!(q.payload, &pay);
    assert_eq!(
        l,
        Layout {
            ip: 14..34,
            udp: 34..42,
            transport: 42..78,
            icrc: 78..82
        }
    );
}

#[test]
fn vlan_tag_and_ethernet_padding() {
    let mut p = sample(opcode::RC_SEND_ONLY, true, &[]);
    p.vlan = Some(0x2005);
    let mut f = p.emit().unwrap();
    assert_eq!(&f[12..14], &[0x81, 0x00]);
    f.extend_from_slice(&[0; 6]); // minimum-size padding after the IP packet
    assert_eq!(RocePacket::parse(&f).unwrap().vlan, Some(0x2005));
}

#[test]
fn nak_and_rnr_aeth() {
    for syn in [
        AethSyndrome::RnrNak { timer: 14 },
        AethSyndrome::Nak(NakCode::RemoteAccessError),
    ] {
        let mut p = sample(opcode::RC_ACKNOWLEDGE, false, &[]);
        p.ext.aeth = Some(AethRepr {
            syndrome: syn,
            msn: 0xFF_FFFF,
        });
        let f = p.emit().unwrap();
        assert_eq!(RocePacket::parse(&f).unwrap().ext.aeth, p.ext.aeth);
    }
}

#[test]
fn emit_rejects_inconsistent_packets() {
    let mut p = sample(opcode::RC_SEND_ONLY, true, b"x");
    p.ext.reth = Some(RethRepr::default());
    assert_eq!(p.emit(), Err(WireError::ExtMismatch));
    let p = sample(opcode::RC_RDMA_WRITE_FIRST, true, b"x");
    let mut q = p;
    q.ext.reth = None;
    assert_eq!(q.emit(), Err(WireError::ExtMismatch));
    let mut q = sample(opcode::RC_ACKNOWLEDGE, true, &[]);
    q.payload = b"data";
    assert_eq!(q.emit(), Err(WireError::ExtMismatch));
    let mut q = p;
    q.bth.opcode = 0x24;
    assert_eq!(q.emit(), Err(WireError::UnknownOpcode(0x24)));
    let mut q = p;
    q.dst_gid = gids(false).1;
    assert_eq!(q.emit(), Err(WireError::MixedAddressFamily));
    let mut q = p;
    q.bth.dest_qp = 0x100_0000;
    assert_eq!(q.emit(), Err(WireError::FieldRange));
    assert_eq!(p.emit_into(&mut [0u8; 40]), Err(WireError::Truncated));
}

fn refresh_ipv4_checksum(f: &mut [u8]) {
    crate::wire::ipv4::Ipv4Packet::new_unchecked(&mut f[14..34]).fill_checksum();
}

#[test]
fn parse_rejects_each_invalid_field() {
    let p = sample(opcode::RC_SEND_ONLY, true, b"abcd");
    let good = p.emit().unwrap();
    let mut f = good.clone();
    f[12] = 0x08;
    f[13] = 0x06;
    assert_eq!(RocePacket::parse(&f), Err(WireError::BadEthertype(0x0806)));
    let mut f = good.clone();
    f[23] = 6;
    refresh_ipv4_checksum(&mut f);
    assert_eq!(RocePacket::parse(&f), Err(WireError::NotUdp(6)));
    let mut f = good.clone();
    f[24] ^= 0xFF;
    assert_eq!(RocePacket::parse(&f), Err(WireError::BadIpChecksum));
    let mut f = good.clone();
    f[36..38].copy_from_slice(&4790u16.to_be_bytes());
    assert_eq!(RocePacket::parse(&f), Err(WireError::BadUdpPort(4790)));
    let mut f = good.clone();
    f[40..42].copy_from_slice(&[0x12, 0x34]);
    assert_eq!(RocePacket::parse(&f), Err(WireError::BadUdpChecksum));
    // UDP length disagreeing with the IP payload length.
    let mut f = good.clone();
    f[38..40].copy_from_slice(&24u16.to_be_bytes());
    assert_eq!(RocePacket::parse(&f), Err(WireError::BadLength));
    // UDP length 7: impossible.
    let mut f = good.clone();
    f[38..40].copy_from_slice(&7u16.to_be_bytes());
    assert_eq!(RocePacket::parse(&f), Err(WireError::BadLength));
    // IP total length claiming more than the frame holds.
    let mut f = good.clone();
    f[16..18].copy_from_slice(&1000u16.to_be_bytes());
    refresh_ipv4_checksum(&mut f);
    assert_eq!(RocePacket::parse(&f), Err(WireError::Truncated));
    // TVer 1 with a recomputed ICRC: the BTH check itself fires.
    let mut f = good.clone();
    f[43] |= 0x01;
    let crc = icrc::compute(&f[14..34], &f[34..42], &f[42..f.len() - 4]);
    let n = f.len();
    f[n - 4..].copy_from_slice(&crc.to_le_bytes());
    assert_eq!(RocePacket::parse(&f), Err(WireError::BadTver(1)));
    // Truncation at every length never panics and never parses.
    for n in 0..good.len() {
        assert!(RocePacket::parse(&good[..n]).is_err(), "len {n}");
    }
}

/// Re-seals a frame (ICRC only; IPv4 with UDP checksum 0) after a test edits the transport.
fn reseal_v4(f: &mut [u8]) {
    let n = f.len();
    let crc = icrc::compute(&f[14..34], &f[34..42], &f[42..n - 4]);
    f[n - 4..].copy_from_slice(&crc.to_le_bytes());
}

#[test]
fn parse_rejects_bad_pad_and_short_ext() {
    // ACK (no payload) with pad count 1 and no data: pad > data.
    let p = sample(opcode::RC_ACKNOWLEDGE, true, &[]);
    let mut f = p.emit().unwrap();
    f[43] |= 0x10;
    reseal_v4(&mut f);
    assert_eq!(RocePacket::parse(&f), Err(WireError::BadPad));
    // An ACK relabelled as WRITE FIRST: 4 bytes where a 16-byte RETH is needed.
    let mut f = p.emit().unwrap();
    f[42] = opcode::RC_RDMA_WRITE_FIRST;
    reseal_v4(&mut f);
    assert_eq!(RocePacket::parse(&f), Err(WireError::Truncated));
    // A SEND relabelled as ACK: data after the AETH where none may be.
    let p = sample(opcode::RC_SEND_ONLY, true, b"abcdefgh");
    let mut f = p.emit().unwrap();
    f[42] = opcode::RC_ACKNOWLEDGE;
    reseal_v4(&mut f);
    assert_eq!(RocePacket::parse(&f), Err(WireError::BadLength));
}

#[test]
fn every_single_byte_corruption_of_the_transport_is_detected() {
    for v4 in [true, false] {
        let p = sample(
            opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
            v4,
            b"hello, world",
        );
        let f = p.emit().unwrap();
        let (_, l) = RocePacket::parse_with_layout(&f).unwrap();
        for i in l.udp.start..f.len() {
            // BTH byte 4 (FECN/BECN) is deliberately outside the ICRC (cm.md §7.4).
            if i == l.transport.start + 4 {
                continue;
            }
            for flip in [0x01u8, 0x80, 0xFF] {
                let mut g = f.clone();
                g[i] ^= flip;
                let e = RocePacket::parse(&g).unwrap_err();
                assert!(
                    matches!(
                        e,
                        WireError::BadIcrc { .. }
                            | WireError::BadUdpChecksum
                            | WireError::BadLength
                            | WireError::Truncated
                            | WireError::BadUdpPort(_)
                    ),
                    "v4={v4} byte {i} flip {flip:#x}: {e:?}"
                );
                if i >= l.transport.start {
                    assert!(
                        matches!(e, WireError::BadIcrc { .. } | WireError::BadUdpChecksum),
                        "byte {i}: {e:?}"
                    );
                }
            }
        }
        // FECN/BECN flips are legitimate in flight and still parse.
        let mut g = f.clone();
        g[l.transport.start + 4] |= 0xC0;
        if !v4 {
            UdpPacket::new_unchecked(&mut g[l.udp.start..])
                .fill_checksum(&p.ip_addrs().unwrap().pseudo_header());
        }
        let q = RocePacket::parse(&g).unwrap();
        assert!(q.bth.fecn && q.bth.becn);
    }
}

#[test]
fn arbitrary_bytes_never_panic() {
    let mut rng = crate::rng::Rng::new(42);
    let good = sample(opcode::UD_SEND_ONLY, true, b"payload!")
        .emit()
        .unwrap();
    for _ in 0..20_000 {
        let mut f = good.clone();
        let k = rng.below(4) + 1;
        for _ in 0..k {
            let i = rng.below(f.len() as u64) as usize;
            f[i] = rng.next_u64() as u8;
        }
        let cut = rng.below(f.len() as u64 + 1) as usize;
        let _ = RocePacket::parse(&f[..cut]);
        let _ = grh_area(&f);
    }
    for len in 0..128 {
        let f: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
        assert!(RocePacket::parse(&f).is_err());
    }
}

#[test]
fn gid_mapping_and_grh_area() {
    assert_eq!(
        gid_from_ipv4([192, 168, 1, 2])[10..],
        [0xFF, 0xFF, 192, 168, 1, 2]
    );
    assert_eq!(
        gid_to_ipv4(&gid_from_ipv4([1, 2, 3, 4])),
        Some([1, 2, 3, 4])
    );
    let mut g = gid_from_ipv4([1, 2, 3, 4]);
    g[9] = 1;
    assert_eq!(gid_to_ipv4(&g), None);
    let f = sample(opcode::UD_SEND_ONLY, true, b"m").emit().unwrap();
    let a = grh_area(&f).unwrap();
    assert_eq!(a[..20], [0u8; 20]);
    assert_eq!(a[20..], f[14..34]);
    let f = sample(opcode::UD_SEND_ONLY, false, b"m").emit().unwrap();
    assert_eq!(grh_area(&f).unwrap()[..], f[14..54]);
}

#[test]
fn display_trace_line() {
    let p = sample(opcode::RC_RDMA_WRITE_FIRST, true, b"abc");
    assert_eq!(
        p.to_string(),
        "RC RDMA WRITE First qp=0x000123 psn=0xfffffe ack RETH(va=0x10002000 rkey=0x512 len=8192) payload=3"
    );
    let p = sample(opcode::RC_ACKNOWLEDGE, true, &[]);
    assert_eq!(
        p.to_string(),
        "RC Acknowledge qp=0x000123 psn=0xfffffe ack AETH(Ack { credits: 31 } msn=77) payload=0"
    );
}
