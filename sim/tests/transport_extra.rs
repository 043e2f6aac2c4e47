//! Go-back-N after a lost packet, local protection of READ targets, SRQ-fed RC receives over
//! the wire, RNR on WRITE_WITH_IMM and timer scaling (reference §14; M23, M29, M31, M42, M46);
//! ACKs for AckReq in the middle of a message.

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex};

use common::*;
use pvrdma_sim::fabric::FaultConfig;
use pvrdma_sim::pcap::{PcapWriter, TsResolution};
use pvrdma_sim::testutil::{Host, PdirBuf, QpSpec, RcPath, Req};
use pvrdma_sim::world::{NodeConfig, World};

#[test]
fn lost_packet_gives_one_sequence_nak_and_go_back_n_redelivers_in_order() {
    let (world, mut a, mut b) = rc_pair(50, |_| {});
    for i in 0..4u64 {
        b.recv_at(i, 0x100 * i, 64);
        a.write(0x100 * i, &[i as u8 + 1; 16]);
    }
    // Message 0 is lost on the wire; 1..3 arrive out of sequence.
    world.set_pair_faults(0, 1, FaultConfig::none().with_drop(1.0));
    a.post_send(&send_wqe(&a, 0, wr::SEND, SIGNALED, 0, 16));
    world.run_devices();
    world.clear_faults();
    for i in 1..4u64 {
        a.post_send(&send_wqe(&a, i, wr::SEND, SIGNALED, 0x100 * i, 16));
    }
    world.run_until_idle();
    let cb = world.counters(1).transport;
    assert_eq!(cb.seq_naks_sent, 1, "one NAK per gap");
    let ca = world.counters(0).transport;
    assert_eq!((ca.naks_received, ca.retries, ca.timeouts), (1, 1, 0));
    // Go-back-N resent all four.
    assert_eq!(ca.retransmits, 4);
    let r: Vec<u64> = b.recv_cqes().iter().map(|c| c.wr_id).collect();
    assert_eq!(r, vec![0, 1, 2, 3]);
    for i in 0..4u64 {
        assert_eq!(b.read(0x100 * i, 16), vec![i as u8 + 1; 16]);
    }
    assert_eq!(a.send_cqes().len(), 4);
}

#[test]
fn read_into_mr_without_local_write_fails_loc_prot_err() {
    let (world, mut a, b) = rc_pair(51, |_| {});
    let ro = a.host.create_mr(a.pd, 0x3_0000_0000, 4096, 0);
    let w = pvrdma_sim::testutil::SendWqe::new(1, wr::RDMA_READ, SIGNALED).sge(
        0x3_0000_0000,
        64,
        ro.lkey,
    );
    a.post_send(&rdma(w, b.va(0), b.rkey()));
    world.run_until_idle();
    let s = a.send_cqes();
    assert_eq!((s[0].wr_id, s[0].status), (1, st::LOC_PROT_ERR));
    assert_eq!(a.qp_state(), 6);
}

#[test]
fn rnr_on_write_with_imm_then_success_once_a_receive_is_posted() {
    let (world, mut a, mut b) = rc_pair(52, |p| {
        p.path_mtu = 1;
        p.min_rnr_timer = 10;
    });
    let data = pattern(52, 600);
    a.write(0, &data);
    let w = rdma(
        send_wqe(&a, 1, wr::RDMA_WRITE_WITH_IMM, SIGNALED, 0, 600),
        b.va(0x800),
        b.rkey(),
    )
    .at(24, &[1, 1, 2, 3]);
    a.post_send(&w);
    world.advance_time(50_000);
    assert_eq!(world.counters(0).transport.rnr_naks_received, 1);
    b.recv_at(9, 0, 0);
    world.run_until_idle();
    assert_eq!(a.send_cqes()[0].status, 0);
    let r = b.recv_cqes();
    assert_eq!(
        (r[0].wr_id, r[0].opcode, r[0].byte_len, r[0].imm_data),
        (9, 129, 600, [1, 1, 2, 3])
    );
    assert_eq!(b.read(0x800, 600), data);
}

#[test]
fn timer_scale_multiplies_the_retransmission_timeout() {
    let run = |scale: u32| {
        let mut world = World::new(53);
        for i in 0..2 {
            let mut n = NodeConfig::ipv4(i);
            n.device.timer_scale = scale;
            world.add_node(n);
        }
        let mut a = end_on(&world, 0, |_| {});
        let b = end_on(&world, 1, |_| {});
        connect(&world, &a, 0, &b, 1, |p| {
            p.timeout = 10;
            p.retry_cnt = 1;
        });
        world.set_link(1, false);
        let t0 = world.now_ns();
        a.post_send(&send_wqe(&a, 1, wr::SEND, SIGNALED, 0, 4));
        world.run_until_idle();
        assert_eq!(a.send_cqes()[0].status, st::RETRY_EXC_ERR);
        world.now_ns() - t0
    };
    let one = run(1);
    let ten = run(10);
    // Two timeouts of 4.096 µs · 2^10 each, times the scale.
    assert!(
        (2 * 4096 * 1024..2 * 4096 * 1024 + 100_000).contains(&one),
        "{one}"
    );
    assert!(
        (20 * 4096 * 1024..20 * 4096 * 1024 + 100_000).contains(&ten),
        "{ten}"
    );
}

#[test]
fn srq_feeds_two_rc_qps_and_completions_name_the_taking_qp() {
    let world = World::with_nodes(54, 2);
    let ha = Host::on(world.device(0).clone());
    let hb = Host::on(world.device(1).clone());
    ha.bind_gid(0, world.node(0).gid());
    hb.bind_gid(0, world.node(1).gid());
    let (pda, pdb) = (ha.create_pd(), hb.create_pd());
    let (cqa, cqb) = (ha.create_cq(64), hb.create_cq(64));
    // SRQ of 8 one-SGE WQEs (stride 32) on B: pdir @16, pd @24, nchunks @28, max_wr @32,
    // max_sge @36, srq_limit @40.
    let srq_buf = PdirBuf::new(&hb.dma, 3);
    let srq = hb
        .cmd_ok(
            &Req::new(17)
                .u64(16, srq_buf.pdir())
                .u32(24, pdb)
                .u32(28, 3)
                .u32(32, 8)
                .u32(36, 1),
        )
        .u32(16);
    let mra = ha.create_mr(pda, VA, 4 * 4096, ACC_ALL);
    let mrb = hb.create_mr(pdb, VA, 4 * 4096, ACC_ALL);
    let mut aq = Vec::new();
    let mut bq = Vec::new();
    for _ in 0..2 {
        aq.push(ha.create_qp(&QpSpec::rc(pda, cqa.handle, cqa.handle)));
        bq.push(hb.create_qp(&QpSpec {
            srq: Some(srq),
            ..QpSpec::rc(pdb, cqb.handle, cqb.handle)
        }));
    }
    for i in 0..2 {
        let pa = RcPath::new(bq[i].qpn, world.node(1).gid(), world.node(1).mac());
        let pb = RcPath::new(aq[i].qpn, world.node(0).gid(), world.node(0).mac());
        ha.rc_connect(aq[i].handle, &pa);
        hb.rc_connect(bq[i].handle, &pb);
    }
    world.run_until_idle();
    // Post 3 SRQ WQEs (SRQ ring prod_tail @8).
    for i in 0..3u64 {
        let mut img = vec![0u8; 32];
        img[0..8].copy_from_slice(&(500 + i).to_le_bytes());
        img[8..12].copy_from_slice(&1u32.to_le_bytes());
        img[16..24].copy_from_slice(&(VA + 0x100 * i).to_le_bytes());
        img[24..28].copy_from_slice(&64u32.to_le_bytes());
        img[28..32].copy_from_slice(&mrb.lkey.to_le_bytes());
        srq_buf.data.write(4096 + 32 * i as usize, &img);
    }
    srq_buf.data.write_u32(8, 3);
    hb.dev.uar_write32(8, srq | (1 << 30));
    let data = mra.buf.as_ref().unwrap();
    data.data.write(0, b"from-qp-one");
    data.data.write(0x40, b"from-qp-two");
    // QP 2 sends first, then QP 1, then QP 2 again.
    let order = [(1usize, 0x40u64), (0, 0), (1, 0x40)];
    for (k, &(i, off)) in order.iter().enumerate() {
        let w = pvrdma_sim::testutil::SendWqe::new(k as u64, wr::SEND, SIGNALED).sge(
            VA + off,
            11,
            mra.lkey,
        );
        aq[i].post_send(&w);
        ha.ring_sq(aq[i].handle);
        world.run_until_idle();
    }
    let r = cqb.poll();
    let got: Vec<(u64, u64, u32)> = r.iter().map(|c| (c.wr_id, c.qp, c.status)).collect();
    let (b1, b2) = (u64::from(bq[0].handle), u64::from(bq[1].handle));
    assert_eq!(got, vec![(500, b2, 0), (501, b1, 0), (502, b2, 0)]);
    let mb = mrb.buf.as_ref().unwrap();
    assert_eq!(mb.data.read_vec(0, 11), b"from-qp-two");
    assert_eq!(mb.data.read_vec(0x100, 11), b"from-qp-one");
    assert_eq!(mb.data.read_vec(0x200, 11), b"from-qp-two");
    // SRQ cons_head @12 advanced by the takes.
    assert_eq!(srq_buf.data.read_u32(12), 3);
    assert_eq!(cqa.poll().len(), 3);
}

/// READ then SEND from A; B delays its READ responses (M36). Returns whether A's READ data
/// had landed when B's receive CQE appeared.
fn read_landed_before_send(fence: bool) -> bool {
    let (world, mut a, mut b) = rc_pair(55, |_| {});
    world.set_read_response_delay(1, 200_000);
    let data = pattern(55, 512);
    b.write(0x5000, &data);
    b.recv_at(1, 0x100, 64);
    a.post_send(&rdma(
        send_wqe(&a, 10, wr::RDMA_READ, SIGNALED, 0x2000, 512),
        b.va(0x5000),
        b.rkey(),
    ));
    let flags = SIGNALED | if fence { FENCE } else { 0 };
    a.post_send(&send_wqe(&a, 11, wr::SEND, flags, 0, 4));
    let landed = loop {
        if !b.recv_cqes().is_empty() {
            break a.read(0x2000, 512) == data;
        }
        assert!(world.step(), "no receive completion");
    };
    world.run_until_idle();
    let s: Vec<(u64, u32)> = a.send_cqes().iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(s, vec![(10, 0), (11, 0)], "CQEs stay in posting order");
    assert_eq!(a.read(0x2000, 512), data);
    landed
}

#[test]
fn delayed_read_responses_expose_a_missing_fence() {
    assert!(
        !read_landed_before_send(false),
        "without FENCE the SEND overtakes the READ data"
    );
    assert!(
        read_landed_before_send(true),
        "FENCE holds the SEND until the READ completed"
    );
}

/// A multi-packet SEND into an empty receive queue: the FIRST packet gets an RNR NAK and the
/// MIDDLE one, now out of sequence, a PSN sequence NAK for the same PSN (the model's responder
/// and rxe's both send it). The requester waits out the RNR timer and resends once; the
/// sequence NAK neither resends at once nor spends the transport retry count (it did: with
/// infinite RNR retry, the SEND failed RETRY_EXC_ERR within microseconds, 7 sequence NAKs and
/// no RNR wait at all). Once a receive is posted the SEND completes.
#[test]
fn sequence_nak_behind_an_rnr_nak_waits_for_the_rnr_timer() {
    let (world, mut a, mut b) = rc_pair(54, |p| {
        p.min_rnr_timer = 14; // 1.28 ms
        p.retry_cnt = 7;
        p.rnr_retry = 7;
    });
    let data = pattern(54, 3000);
    a.write(0, &data);
    a.post_send(&send_wqe(&a, 1, wr::SEND, SIGNALED, 0, 3000));
    // Ten RNR periods: ten RNR retries, none of the transport's.
    world.advance_time(10 * 1_280_000 + 500_000);
    let ca = world.counters(0).transport;
    assert!(a.send_cqes().is_empty(), "the SEND is still waiting");
    assert_eq!(ca.rnr_retries, 10, "{ca:?}");
    assert_eq!(ca.rnr_naks_received, 11, "{ca:?}");
    assert_eq!(ca.retries, 0, "no transport retry spent: {ca:?}");
    b.recv_at(9, 0, 4096);
    world.run_until_idle();
    let s = a.send_cqes();
    assert_eq!((s[0].wr_id, s[0].status), (1, st::SUCCESS));
    let r = b.recv_cqes();
    assert_eq!((r[0].wr_id, r[0].status, r[0].byte_len), (9, 0, 3000));
    assert_eq!(b.read(0, 3000), data);
}

/// A request packet with AckReq set is acknowledged even in the middle of a message, with its
/// own PSN and the MSN of the last completed message; packets without it are not (rxe's
/// requester keeps at most 128 PSNs unacknowledged and sets AckReq every 64: without these
/// ACKs it stalls until its retransmission timer, once per 128 packets). The SEND is built
/// here as such a requester sends it and injected from node 0's port.
#[test]
fn ack_req_in_the_middle_of_a_message_is_acknowledged() {
    use pvrdma_sim::wire::opcode as op;
    use pvrdma_sim::wire::{AethSyndrome, BthRepr, ExtRepr, Psn, RocePacket};

    let (world, _a, mut b) = rc_pair(53, |_| {});
    b.recv_at(0, 0, 4096);
    let cap = Shared::default();
    let w = PcapWriter::new(
        Box::new(cap.clone()) as Box<dyn Write + Send>,
        TsResolution::Nano,
    )
    .unwrap();
    world.set_capture(Some(w));
    let first = RcPath::new(0, [0; 16], [0; 6]).rq_psn;
    let data = pattern(7, 4096);
    let (n0, n1) = (world.node(0), world.node(1));
    let steps = [
        (op::RC_SEND_FIRST, true),
        (op::RC_SEND_MIDDLE, false),
        (op::RC_SEND_MIDDLE, true),
        (op::RC_SEND_LAST, true),
    ];
    for (k, &(opcode, ack_req)) in steps.iter().enumerate() {
        let pkt = RocePacket {
            src_mac: n0.mac(),
            dst_mac: n1.mac(),
            vlan: None,
            src_gid: n0.gid(),
            dst_gid: n1.gid(),
            traffic_class: 0,
            hop_limit: 64,
            flow_label: 0,
            ip_ident: 0,
            udp_src_port: 0xC000,
            bth: BthRepr {
                opcode,
                solicited: false,
                mig_req: true,
                pad_count: 0,
                pkey: 0xFFFF,
                fecn: false,
                becn: false,
                dest_qp: b.qp.qpn,
                ack_req,
                psn: Psn::new(first + k as u32),
            },
            ext: ExtRepr::default(),
            payload: &data[k * 1024..(k + 1) * 1024],
        };
        world
            .fabric()
            .transmit(n0.port(), pkt.emit().expect("a SEND packet"));
    }
    world.run_until_idle();
    drop(world.set_capture(None));
    // The capture: 24-byte file header, then 16-byte record headers and frames.
    let cap = cap.0.lock().unwrap().clone();
    let mut acks = Vec::new();
    let mut at = 24;
    while at + 16 <= cap.len() {
        let len = u32::from_le_bytes(cap[at + 8..at + 12].try_into().unwrap()) as usize;
        let frame = &cap[at + 16..at + 16 + len];
        at += 16 + len;
        let Ok(p) = RocePacket::parse(frame) else {
            continue;
        };
        if p.src_mac == n1.mac() && p.bth.opcode == op::RC_ACKNOWLEDGE {
            let aeth = p.ext.aeth.expect("an ACK's AETH");
            assert!(
                matches!(aeth.syndrome, AethSyndrome::Ack { .. }),
                "{aeth:?}"
            );
            acks.push((p.bth.psn.value(), aeth.msn));
        }
    }
    let psn = |k: u32| Psn::new(first + k).value();
    assert_eq!(acks, vec![(psn(0), 0), (psn(2), 0), (psn(3), 1)]);
    let r = b.recv_cqes();
    assert_eq!(
        r.iter()
            .map(|c| (c.wr_id, c.status, c.byte_len))
            .collect::<Vec<_>>(),
        vec![(0, 0, 4096)]
    );
    assert_eq!(b.read(0, 4096), data);
}

/// A capture buffer the test reads after the world wrote to it.
#[derive(Clone, Default)]
struct Shared(Arc<Mutex<Vec<u8>>>);

impl Write for Shared {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
