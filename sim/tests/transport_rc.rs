//! RC data path between two device models (reference §14 "RC operations", §11 CQE contents,
//! M23, M28, M35, M36): SEND family, WRITE family, READ, fast registration, ordering.

mod common;

use common::*;
use pvrdma_sim::testutil::SendWqe;

#[test]
fn send_one_sge_delivers_bytes_and_cqes_on_both_sides() {
    let (world, mut a, mut b) = rc_pair(1, |_| {});
    let data = pattern(1, 300);
    a.write(0, &data);
    b.recv_at(77, 0x1000, 4096);
    a.post_send(&send_wqe(&a, 11, wr::SEND, SIGNALED, 0, 300));
    world.run_until_idle();
    assert_eq!(b.read(0x1000, 300), data);
    let s = a.send_cqes();
    assert_eq!(s.len(), 1);
    assert_eq!(
        (s[0].wr_id, s[0].status, s[0].opcode, s[0].byte_len),
        (11, 0, 0, 300)
    );
    assert_eq!(s[0].qp, u64::from(a.qp.handle));
    let r = b.recv_cqes();
    assert_eq!(r.len(), 1);
    assert_eq!(
        (r[0].wr_id, r[0].status, r[0].opcode, r[0].byte_len),
        (77, 0, 128, 300)
    );
    assert_eq!(r[0].src_qp, a.qp.qpn);
    assert_eq!(r[0].qp, u64::from(b.qp.handle));
    assert_eq!((r[0].wc_flags, r[0].port_num), (0, 1));
    assert_eq!(b.qp.rq_cons(), 1);
    assert_eq!(a.qp.sq_cons(), 1);
    // The first request reached B in RTS (connect ran both to RTS first): no COMM_EST there.
    let c = world.counters(0).transport;
    assert_eq!(c.retries, 0);
    assert_eq!(c.acks_received, 1);
}

#[test]
fn send_gathers_1_to_16_sges_and_scatters_into_16() {
    let (world, mut a, mut b) = rc_pair(2, |_| {});
    for n in 1..=16u32 {
        // SGE i: 37·i + 5 bytes from scattered offsets.
        let mut w = SendWqe::new(u64::from(n), wr::SEND, SIGNALED);
        let mut expect = Vec::new();
        for i in 0..n {
            let off = u64::from(i) * 600 + 7;
            let len = 37 * i + 5;
            let d = pattern(n * 100 + i, len as usize);
            a.write(off, &d);
            expect.extend_from_slice(&d);
            w = w.sge(a.va(off), len, a.lkey());
        }
        // Receive into 16 SGEs of 64 bytes each plus one big tail SGE region.
        let mut sges = Vec::new();
        for i in 0..15u64 {
            sges.push((b.va(0x8000 + i * 100), 64, b.lkey()));
        }
        sges.push((b.va(0x9000), 8192, b.lkey()));
        b.post_recv(1000 + u64::from(n), &sges);
        a.post_send(&w);
        world.run_until_idle();
        let mut got = Vec::new();
        for i in 0..15u64 {
            got.extend_from_slice(&b.read(0x8000 + i * 100, 64));
        }
        got.extend_from_slice(&b.read(0x9000, 8192));
        assert_eq!(&got[..expect.len()], &expect[..], "n = {n}");
        let s = a.send_cqes();
        assert_eq!(s.len(), 1);
        assert_eq!((s[0].status, s[0].byte_len), (0, expect.len() as u32));
        let r = b.recv_cqes();
        assert_eq!(r.len(), 1);
        assert_eq!(
            (r[0].wr_id, r[0].byte_len),
            (1000 + u64::from(n), expect.len() as u32)
        );
    }
}

#[test]
fn multi_packet_send_at_256_byte_mtu_uses_one_psn_per_packet() {
    let (world, mut a, mut b) = rc_pair(3, |p| p.path_mtu = 1);
    let data = pattern(3, 10_000);
    a.write(0, &data);
    b.recv_at(5, 0x4000, 16_384);
    let before = world.counters(0).transport.tx_packets;
    a.post_send(&send_wqe(&a, 6, wr::SEND, SIGNALED, 0, 10_000));
    world.run_until_idle();
    // ceil(10000 / 256) = 40 packets, one ACK back.
    assert_eq!(world.counters(0).transport.tx_packets - before, 40);
    assert_eq!(world.counters(1).transport.acks_sent, 1);
    assert_eq!(b.read(0x4000, 10_000), data);
    assert_eq!(a.send_cqes()[0].byte_len, 10_000);
    assert_eq!(b.recv_cqes()[0].byte_len, 10_000);
    // The PSNs wrapped past 2^24 (start 0xFFFFF0) without a NAK.
    assert_eq!(world.counters(1).transport.naks_sent, 0);
}

#[test]
fn send_with_imm_carries_opaque_bytes_and_solicited_arm_fires() {
    let (world, mut a, mut b) = rc_pair(4, |_| {});
    a.write(0, b"hello");
    b.recv_at(1, 0x100, 64);
    b.recv_at(2, 0x200, 64);
    b.host.cqnes();
    b.host.arm_cq(b.rcq.handle, true);
    // Unsolicited first: must not notify the ARM_SOL CQ.
    let w = send_wqe(&a, 1, wr::SEND_WITH_IMM, SIGNALED, 0, 5).at(24, &[0xDE, 0xAD, 0xBE, 0xEF]);
    a.post_send(&w);
    world.run_until_idle();
    assert!(b.host.cqnes().is_empty());
    let w = send_wqe(&a, 2, wr::SEND_WITH_IMM, SIGNALED | SOLICITED, 0, 5).at(24, &[1, 2, 3, 4]);
    a.post_send(&w);
    world.run_until_idle();
    assert_eq!(b.host.cqnes(), vec![b.rcq.handle]);
    let r = b.recv_cqes();
    assert_eq!(r.len(), 2);
    assert_eq!(
        (r[0].opcode, r[0].wc_flags, r[0].imm_data),
        (128, 2, [0xDE, 0xAD, 0xBE, 0xEF])
    );
    assert_eq!(
        (r[1].opcode, r[1].wc_flags, r[1].imm_data),
        (128, 2, [1, 2, 3, 4])
    );
    assert_eq!(b.read(0x200, 5), b"hello");
}

/// Fast-registers B's FRMR over `pages` fresh pages; returns (frmr, page buffer, key).
fn fast_reg(
    world: &pvrdma_sim::world::World,
    b: &mut End,
    key_byte: u8,
    access: u32,
) -> (
    pvrdma_sim::testutil::TestMr,
    pvrdma_sim::testutil::PdirBuf,
    u32,
    u64,
) {
    let frmr = b.host.create_frmr(b.pd, 4);
    let pages = pvrdma_sim::testutil::PdirBuf::new(&b.host.dma, 4);
    let key = (frmr.rkey & !0xFF) | u32::from(key_byte);
    let iova: u64 = 0x5000_0000_0000 + 0x123;
    // fast_reg: iova_start @32, pl_pdir_dma @40, page_shift @48, page_list_len @52,
    // length @56, access @60, rkey @64.
    let w = SendWqe::new(900, wr::FAST_REG_MR, SIGNALED)
        .at(32, &iova.to_le_bytes())
        .at(40, &pages.pdir().to_le_bytes())
        .at(48, &12u32.to_le_bytes())
        .at(52, &4u32.to_le_bytes())
        .at(56, &8000u32.to_le_bytes())
        .at(60, &access.to_le_bytes())
        .at(64, &key.to_le_bytes());
    b.post_send(&w);
    world.run_until_idle();
    let c = b.send_cqes();
    assert_eq!((c[0].wr_id, c[0].status, c[0].opcode), (900, 0, 8));
    (frmr, pages, key, iova)
}

#[test]
fn send_with_inv_invalidates_the_responders_frmr_and_reports_the_key() {
    let (world, mut a, mut b) = rc_pair(5, |_| {});
    let (_frmr, _pages, key, iova) = fast_reg(&world, &mut b, 0x42, ACC_ALL);
    // A writes through the new key: works.
    a.write(0, &pattern(5, 100));
    a.post_send(&rdma(
        send_wqe(&a, 1, wr::RDMA_WRITE, SIGNALED, 0, 100),
        iova,
        key,
    ));
    world.run_until_idle();
    assert_eq!(a.send_cqes()[0].status, st::SUCCESS);
    // SEND_WITH_INV of that key (invalidate_rkey @24, LE).
    b.recv_at(3, 0x100, 64);
    a.post_send(&send_wqe(&a, 2, wr::SEND_WITH_INV, SIGNALED, 0, 8).at(24, &key.to_le_bytes()));
    world.run_until_idle();
    assert_eq!(a.send_cqes()[0].status, st::SUCCESS);
    let r = b.recv_cqes();
    assert_eq!((r[0].opcode, r[0].status, r[0].wc_flags), (128, 0, 4));
    assert_eq!(r[0].imm_data, key.to_le_bytes());
    // The key is dead now: a WRITE to it fails REM_ACCESS_ERR.
    a.post_send(&rdma(
        send_wqe(&a, 4, wr::RDMA_WRITE, SIGNALED, 0, 100),
        iova,
        key,
    ));
    world.run_until_idle();
    assert_eq!(a.send_cqes()[0].status, st::REM_ACCESS_ERR);
}

#[test]
fn send_with_inv_bad_key_fails_rem_inv_req_on_both_sides() {
    let (world, mut a, mut b) = rc_pair(6, |_| {});
    let (_frmr, _pages, key, _) = fast_reg(&world, &mut b, 0x42, ACC_ALL);
    b.recv_at(3, 0x100, 64);
    b.recv_at(4, 0x200, 64);
    let bad = key ^ 0x01;
    a.post_send(&send_wqe(&a, 2, wr::SEND_WITH_INV, SIGNALED, 0, 8).at(24, &bad.to_le_bytes()));
    a.post_send(&send_wqe(&a, 3, wr::SEND, SIGNALED, 0, 8));
    world.run_until_idle();
    let s = a.send_cqes();
    assert_eq!((s[0].wr_id, s[0].status), (2, st::REM_INV_REQ_ERR));
    assert_eq!((s[1].wr_id, s[1].status), (3, st::WR_FLUSH_ERR));
    let r = b.recv_cqes();
    assert_eq!((r[0].wr_id, r[0].status), (3, st::REM_INV_REQ_ERR));
    assert_eq!((r[1].wr_id, r[1].status), (4, st::WR_FLUSH_ERR));
    assert_eq!(a.qp_state(), 6);
    assert_eq!(b.qp_state(), 6);
}

#[test]
fn rdma_write_places_data_without_responder_cqe() {
    let (world, mut a, b) = rc_pair(7, |p| p.path_mtu = 2);
    let data = pattern(7, 5000);
    a.write(0x100, &data);
    a.post_send(&rdma(
        send_wqe(&a, 1, wr::RDMA_WRITE, SIGNALED, 0x100, 5000),
        b.va(0x3003),
        b.rkey(),
    ));
    world.run_until_idle();
    assert_eq!(b.read(0x3003, 5000), data);
    let s = a.send_cqes();
    assert_eq!((s[0].status, s[0].opcode, s[0].byte_len), (0, 1, 5000));
    assert!(b.recv_cqes().is_empty());
    assert_eq!(b.qp.rq_cons(), 0);
}

#[test]
fn rdma_write_with_imm_consumes_a_receive_and_reports_129() {
    let (world, mut a, mut b) = rc_pair(8, |p| p.path_mtu = 1);
    let data = pattern(8, 700);
    a.write(0, &data);
    b.recv_at(55, 0, 0);
    let w = rdma(
        send_wqe(&a, 1, wr::RDMA_WRITE_WITH_IMM, SIGNALED, 0, 700),
        b.va(0x2000),
        b.rkey(),
    )
    .at(24, &[9, 8, 7, 6]);
    a.post_send(&w);
    world.run_until_idle();
    assert_eq!(b.read(0x2000, 700), data);
    let r = b.recv_cqes();
    assert_eq!(r.len(), 1);
    assert_eq!(
        (r[0].wr_id, r[0].opcode, r[0].byte_len, r[0].wc_flags),
        (55, 129, 700, 2)
    );
    assert_eq!(r[0].imm_data, [9, 8, 7, 6]);
    assert_eq!(a.send_cqes()[0].opcode, 1);
}

#[test]
fn rdma_read_scatters_response_and_reports_bytes_read() {
    let (world, mut a, b) = rc_pair(9, |p| p.path_mtu = 1);
    let data = pattern(9, 3000);
    b.write(0x5000, &data);
    let w = SendWqe::new(1, wr::RDMA_READ, SIGNALED)
        .sge(a.va(0x10), 1000, a.lkey())
        .sge(a.va(0x2000), 2000, a.lkey());
    a.post_send(&rdma(w, b.va(0x5000), b.rkey()));
    world.run_until_idle();
    assert_eq!(a.read(0x10, 1000), &data[..1000]);
    assert_eq!(a.read(0x2000, 2000), &data[1000..]);
    let s = a.send_cqes();
    assert_eq!((s[0].status, s[0].opcode, s[0].byte_len), (0, 2, 3000));
}

#[test]
fn more_reads_than_max_rd_atomic_all_complete_in_order() {
    let (world, mut a, b) = rc_pair(10, |p| {
        p.max_rd_atomic = 2;
        p.max_dest_rd_atomic = 2;
    });
    for i in 0..10u64 {
        b.write(0x1000 * i, &pattern(100 + i as u32, 2000));
    }
    for i in 0..10u64 {
        let w = send_wqe(&a, i, wr::RDMA_READ, SIGNALED, 0x10000 + 0x1000 * i, 2000);
        a.post_send(&rdma(w, b.va(0x1000 * i), b.rkey()));
    }
    world.run_until_idle();
    let s = a.send_cqes();
    assert_eq!(
        s.iter().map(|c| c.wr_id).collect::<Vec<_>>(),
        (0..10).collect::<Vec<_>>()
    );
    let got: Vec<(u32, u32)> = s.iter().map(|c| (c.status, c.byte_len)).collect();
    assert_eq!(got, vec![(0, 2000); 10]);
    for i in 0..10u64 {
        assert_eq!(
            a.read(0x10000 + 0x1000 * i, 2000),
            pattern(100 + i as u32, 2000)
        );
    }
}

#[test]
fn fast_reg_key_works_remotely_and_old_key_is_dead() {
    let (world, mut a, mut b) = rc_pair(11, |_| {});
    let (frmr, pages, key, iova) = fast_reg(&world, &mut b, 0x77, ACC_ALL);
    assert_ne!(key, frmr.rkey);
    let data = pattern(11, 6000);
    a.write(0, &data);
    a.post_send(&rdma(
        send_wqe(&a, 1, wr::RDMA_WRITE, SIGNALED, 0, 6000),
        iova,
        key,
    ));
    world.run_until_idle();
    assert_eq!(a.send_cqes()[0].status, 0);
    // iova & 0xFFF = 0x123: byte iova is at offset 0x123 of page 0.
    assert_eq!(pages.data.read_vec(0x123, 6000), data);
    // READ back through the key.
    a.post_send(&rdma(
        send_wqe(&a, 2, wr::RDMA_READ, SIGNALED, 0x8000, 6000),
        iova,
        key,
    ));
    world.run_until_idle();
    assert_eq!(a.send_cqes()[0].status, 0);
    assert_eq!(a.read(0x8000, 6000), data);
    // The creation key (key byte 0) is dead.
    a.post_send(&rdma(
        send_wqe(&a, 3, wr::RDMA_WRITE, SIGNALED, 0, 16),
        iova,
        frmr.rkey,
    ));
    world.run_until_idle();
    assert_eq!(a.send_cqes()[0].status, st::REM_ACCESS_ERR);
}

#[test]
fn write_data_is_visible_before_the_following_send_completes() {
    let (world, mut a, mut b) = rc_pair(12, |p| p.path_mtu = 1);
    let data = pattern(12, 4000);
    a.write(0, &data);
    b.recv_at(1, 0x100, 64);
    a.post_send(&rdma(
        send_wqe(&a, 1, wr::RDMA_WRITE, 0, 0, 4000),
        b.va(0x8000),
        b.rkey(),
    ));
    a.post_send(&send_wqe(&a, 2, wr::SEND, SIGNALED, 0, 4));
    // Step the world and check at the moment the receive CQE appears.
    loop {
        let cq = b.recv_cqes();
        if !cq.is_empty() {
            assert_eq!(cq[0].wr_id, 1);
            assert_eq!(b.read(0x8000, 4000), data);
            break;
        }
        assert!(
            world.step(),
            "ran out of events before the receive completed"
        );
    }
    world.run_until_idle();
    // Only the signalled SEND produces a CQE; the WRITE retired silently before it.
    let s = a.send_cqes();
    assert_eq!(s.iter().map(|c| c.wr_id).collect::<Vec<_>>(), vec![2]);
    assert_eq!(a.qp.sq_cons(), 2);
}

#[test]
fn comm_est_is_posted_for_the_first_request_reaching_rtr() {
    use pvrdma_sim::testutil::RcPath;
    let world = pvrdma_sim::world::World::with_nodes(13, 2);
    let mut a = end_on(&world, 0, |_| {});
    let mut b = end_on(&world, 1, |_| {});
    let pa = RcPath::new(b.qp.qpn, world.node(1).gid(), world.node(1).mac());
    a.host.rc_connect(a.qp.handle, &pa);
    // B only to RTR: RESET→INIT→RTR by hand.
    let pb = RcPath::new(a.qp.qpn, world.node(0).gid(), world.node(0).mac());
    let r = b
        .host
        .modify_qp(b.qp.handle, 1 | (1 << 3) | (1 << 4) | (1 << 5), |q| {
            q.u32(24, 1).u32(24 + 32, 7).u8(24 + 45, 1)
        });
    assert_eq!(r.err(), 0);
    let m = 1 | (1 << 7) | (1 << 8) | (1 << 20) | (1 << 12) | (1 << 17) | (1 << 15);
    let r = b.host.modify_qp(b.qp.handle, m, |q| {
        q.u32(24, 2)
            .u32(24 + 8, 3)
            .u32(24 + 28, pb.dest_qpn)
            .u32(24 + 20, pb.rq_psn)
            .u8(24 + 43, 4)
            .u8(24 + 44, 1)
            .bytes(24 + 80, &pb.dgid)
            .u8(24 + 80 + 31, 1)
            .bytes(24 + 80 + 33, &pb.dmac)
    });
    assert_eq!(r.err(), 0);
    b.host.events();
    a.write(0, b"x");
    b.recv_at(1, 0, 16);
    b.recv_at(2, 16, 16);
    a.post_send(&send_wqe(&a, 1, wr::SEND, SIGNALED, 0, 1));
    a.post_send(&send_wqe(&a, 2, wr::SEND, SIGNALED, 0, 1));
    world.run_until_idle();
    assert_eq!(b.host.events(), vec![(ev::COMM_EST, b.qp.handle)]);
    assert_eq!(b.recv_cqes().len(), 2);
    assert_eq!(a.send_cqes().len(), 2);
}
