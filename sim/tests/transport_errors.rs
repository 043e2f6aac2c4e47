//! Responder error classes, RNR, timeouts and flushes (reference §14 "Checks and outcomes",
//! "Requester response handling", "QP error state and flush"; M30-M32, M34).

mod common;

use common::*;
use pvrdma_sim::testutil::SendWqe;

const ERR: u32 = 6;
const RTS: u32 = 3;

/// Asserts A's WQE got `a_status`, B's QP went to ERR with `b_event` (if any).
fn check_remote_failure(
    world: &pvrdma_sim::world::World,
    a: &End,
    b: &End,
    a_status: u32,
    b_event: Option<u32>,
) {
    world.run_until_idle();
    let s = a.send_cqes();
    assert_eq!(s.len(), 1, "{s:?}");
    assert_eq!((s[0].wr_id, s[0].status), (1, a_status));
    assert_eq!(a.qp_state(), ERR);
    assert_eq!(b.qp_state(), ERR);
    let evs = b.host.events();
    match b_event {
        Some(e) => assert_eq!(evs, vec![(e, b.qp.handle)]),
        None => assert!(evs.is_empty(), "{evs:?}"),
    }
    assert_eq!(world.counters(1).transport.naks_sent, 1);
    assert_eq!(world.counters(0).transport.naks_received, 1);
}

#[test]
fn write_without_qp_remote_write_is_invalid_request() {
    let (world, mut a, b) = rc_pair(20, |p| p.access = 1 | 4);
    b.host.events();
    a.post_send(&rdma(
        send_wqe(&a, 1, wr::RDMA_WRITE, SIGNALED, 0, 8),
        b.va(0),
        b.rkey(),
    ));
    check_remote_failure(&world, &a, &b, st::REM_INV_REQ_ERR, Some(ev::QP_REQ_ERR));
}

#[test]
fn read_without_qp_remote_read_is_invalid_request() {
    let (world, mut a, b) = rc_pair(21, |p| p.access = 1 | 2);
    b.host.events();
    a.post_send(&rdma(
        send_wqe(&a, 1, wr::RDMA_READ, SIGNALED, 0, 8),
        b.va(0),
        b.rkey(),
    ));
    check_remote_failure(&world, &a, &b, st::REM_INV_REQ_ERR, Some(ev::QP_REQ_ERR));
}

#[test]
fn read_with_max_dest_rd_atomic_zero_is_invalid_request() {
    let (world, mut a, b) = rc_pair(22, |p| p.max_dest_rd_atomic = 0);
    b.host.events();
    a.post_send(&rdma(
        send_wqe(&a, 1, wr::RDMA_READ, SIGNALED, 0, 8),
        b.va(0),
        b.rkey(),
    ));
    check_remote_failure(&world, &a, &b, st::REM_INV_REQ_ERR, Some(ev::QP_REQ_ERR));
}

#[test]
fn write_with_unknown_rkey_is_remote_access_error() {
    let (world, mut a, b) = rc_pair(23, |_| {});
    b.host.events();
    let bad = b.rkey() ^ 0x5;
    a.post_send(&rdma(
        send_wqe(&a, 1, wr::RDMA_WRITE, SIGNALED, 0, 8),
        b.va(0),
        bad,
    ));
    check_remote_failure(&world, &a, &b, st::REM_ACCESS_ERR, Some(ev::QP_ACCESS_ERR));
}

#[test]
fn write_past_the_mr_end_is_remote_access_error_and_writes_nothing() {
    let (world, mut a, b) = rc_pair(24, |_| {});
    b.host.events();
    a.write(0, &[0xAB; 64]);
    a.post_send(&rdma(
        send_wqe(&a, 1, wr::RDMA_WRITE, SIGNALED, 0, 64),
        b.va(MR_LEN - 32),
        b.rkey(),
    ));
    check_remote_failure(&world, &a, &b, st::REM_ACCESS_ERR, Some(ev::QP_ACCESS_ERR));
    assert_eq!(b.read(MR_LEN - 32, 32), vec![0; 32]);
}

#[test]
fn read_past_the_mr_end_is_remote_access_error() {
    let (world, mut a, b) = rc_pair(25, |_| {});
    b.host.events();
    a.post_send(&rdma(
        send_wqe(&a, 1, wr::RDMA_READ, SIGNALED, 0, 64),
        b.va(MR_LEN - 63),
        b.rkey(),
    ));
    check_remote_failure(&world, &a, &b, st::REM_ACCESS_ERR, Some(ev::QP_ACCESS_ERR));
}

#[test]
fn write_to_mr_without_remote_write_is_remote_access_error() {
    let (world, mut a, b) = rc_pair(26, |_| {});
    // LOCAL_WRITE | REMOTE_READ only.
    let ro = b.host.create_mr(b.pd, 0x2_0000_0000, 4096, 1 | 4);
    b.host.events();
    a.post_send(&rdma(
        send_wqe(&a, 1, wr::RDMA_WRITE, SIGNALED, 0, 8),
        0x2_0000_0000,
        ro.rkey,
    ));
    check_remote_failure(&world, &a, &b, st::REM_ACCESS_ERR, Some(ev::QP_ACCESS_ERR));
}

#[test]
fn receive_too_small_is_loc_len_at_responder_and_rem_inv_req_at_requester() {
    let (world, mut a, mut b) = rc_pair(27, |_| {});
    b.host.events();
    b.recv_at(9, 0x100, 100);
    a.post_send(&send_wqe(&a, 1, wr::SEND, SIGNALED, 0, 101));
    check_remote_failure(&world, &a, &b, st::REM_INV_REQ_ERR, None);
    let r = b.recv_cqes();
    assert_eq!((r[0].wr_id, r[0].status), (9, st::LOC_LEN_ERR));
}

#[test]
fn malformed_receive_wqe_is_loc_qp_op_at_responder_and_rem_op_at_requester() {
    let (world, mut a, mut b) = rc_pair_with(28, |_| {}, |s| s.recv_sge = 2);
    b.host.events();
    // Stride 64 holds 3 SGEs; num_sge 3 > max_recv_sge 2.
    let sges = [
        (b.va(0), 8, b.lkey()),
        (b.va(8), 8, b.lkey()),
        (b.va(16), 8, b.lkey()),
    ];
    b.post_recv(9, &sges);
    a.post_send(&send_wqe(&a, 1, wr::SEND, SIGNALED, 0, 4));
    check_remote_failure(&world, &a, &b, st::REM_OP_ERR, None);
    let r = b.recv_cqes();
    assert_eq!((r[0].wr_id, r[0].status), (9, st::LOC_QP_OP_ERR));
}

#[test]
fn receive_sge_with_bad_lkey_is_loc_prot_at_responder_and_rem_op_at_requester() {
    let (world, mut a, mut b) = rc_pair(29, |_| {});
    b.host.events();
    b.post_recv(9, &[(b.va(0), 64, b.lkey() ^ 1)]);
    a.post_send(&send_wqe(&a, 1, wr::SEND, SIGNALED, 0, 4));
    check_remote_failure(&world, &a, &b, st::REM_OP_ERR, None);
    let r = b.recv_cqes();
    assert_eq!((r[0].wr_id, r[0].status), (9, st::LOC_PROT_ERR));
}

#[test]
fn rnr_retry_exhausted_fails_rnr_retry_exc_err_and_leaves_responder_alone() {
    let (world, mut a, b) = rc_pair(30, |p| {
        p.rnr_retry = 2;
        p.min_rnr_timer = 3;
    });
    a.post_send(&send_wqe(&a, 1, wr::SEND, SIGNALED, 0, 4));
    world.run_until_idle();
    let s = a.send_cqes();
    assert_eq!((s[0].wr_id, s[0].status), (1, st::RNR_RETRY_EXC_ERR));
    assert_eq!(a.qp_state(), ERR);
    assert_eq!(b.qp_state(), RTS);
    // The first attempt and two retries were each refused.
    assert_eq!(world.counters(1).transport.rnr_naks_sent, 3);
    assert_eq!(world.counters(0).transport.rnr_naks_received, 3);
    assert_eq!(world.counters(0).transport.rnr_retries, 2);
    // min_rnr_timer 3 = 30 µs per wait: the failure came after at least 2 waits.
    assert!(world.now_ns() >= 60_000);
}

#[test]
fn receive_posted_during_rnr_wait_lets_the_send_succeed() {
    let (world, mut a, mut b) = rc_pair(31, |p| p.min_rnr_timer = 14);
    a.write(0, b"late");
    a.post_send(&send_wqe(&a, 1, wr::SEND, SIGNALED, 0, 4));
    // 100 µs: the RNR NAK is back, the 1.28 ms RNR wait has not expired.
    world.advance_time(100_000);
    assert_eq!(world.counters(0).transport.rnr_naks_received, 1);
    assert!(a.send_cqes().is_empty());
    b.recv_at(5, 0x40, 64);
    world.run_until_idle();
    assert_eq!(a.send_cqes()[0].status, st::SUCCESS);
    let r = b.recv_cqes();
    assert_eq!((r[0].wr_id, r[0].byte_len), (5, 4));
    assert_eq!(b.read(0x40, 4), b"late");
    assert!(world.now_ns() >= 1_280_000);
}

#[test]
fn dead_link_fails_retry_exc_err_after_retry_cnt_timeouts() {
    let (world, mut a, b) = rc_pair(32, |p| {
        p.retry_cnt = 3;
        p.timeout = 8;
    });
    b.host.events();
    world.set_link(1, false);
    world.run_until_idle();
    assert_eq!(b.host.events(), vec![(ev::PORT_ERR, 1)]);
    a.post_send(&send_wqe(&a, 1, wr::SEND, SIGNALED, 0, 4));
    a.post_send(&send_wqe(&a, 2, wr::SEND, SIGNALED, 0, 4));
    world.run_until_idle();
    let s = a.send_cqes();
    assert_eq!((s[0].wr_id, s[0].status), (1, st::RETRY_EXC_ERR));
    assert_eq!((s[1].wr_id, s[1].status), (2, st::WR_FLUSH_ERR));
    let c = world.counters(0).transport;
    assert_eq!((c.timeouts, c.retries), (4, 3));
    // Two messages sent 4 times each.
    assert_eq!(c.tx_packets, 8);
    assert_eq!(c.retransmits, 6);
    // 4 timeouts of 4.096 µs · 2^8.
    assert!(world.now_ns() >= 4 * 4096 * 256);
    assert_eq!(b.qp_state(), RTS);
    world.set_link(1, true);
    world.run_until_idle();
    assert_eq!(b.host.events(), vec![(ev::PORT_ACTIVE, 1)]);
}

#[test]
fn responder_in_err_drops_packets_and_requester_times_out() {
    let (world, mut a, b) = rc_pair(33, |p| {
        p.retry_cnt = 1;
        p.timeout = 4;
    });
    let r = b.host.modify_qp(b.qp.handle, 1, |q| q.u32(24, 6));
    assert_eq!(r.err(), 0);
    a.post_send(&rdma(
        send_wqe(&a, 1, wr::RDMA_WRITE, SIGNALED, 0, 4),
        b.va(0),
        b.rkey(),
    ));
    world.run_until_idle();
    assert_eq!(a.send_cqes()[0].status, st::RETRY_EXC_ERR);
    let c = world.counters(1).transport;
    assert_eq!((c.rx_dropped, c.naks_sent, c.acks_sent), (2, 0, 0));
}

#[test]
fn requester_error_flushes_later_wqes_in_order() {
    let (world, mut a, mut b) = rc_pair(34, |_| {});
    for i in 0..4 {
        b.recv_at(100 + i, 0x100 * i, 64);
    }
    a.post_send(&send_wqe(&a, 1, wr::SEND, SIGNALED, 0, 4));
    a.post_send(&rdma(
        send_wqe(&a, 2, wr::RDMA_WRITE, SIGNALED, 0, 4),
        b.va(0),
        0xDEAD_0000,
    ));
    a.post_send(&send_wqe(&a, 3, wr::SEND, 0, 0, 4));
    a.post_send(&rdma(
        send_wqe(&a, 4, wr::RDMA_READ, SIGNALED, 0, 4),
        b.va(0),
        b.rkey(),
    ));
    a.post_send(&SendWqe::new(5, wr::SEND, SIGNALED));
    world.run_until_idle();
    let s: Vec<(u64, u32, u32)> = a
        .send_cqes()
        .iter()
        .map(|c| (c.wr_id, c.status, c.opcode))
        .collect();
    assert_eq!(
        s,
        vec![
            (1, st::SUCCESS, 0),
            (2, st::REM_ACCESS_ERR, 1),
            (3, st::WR_FLUSH_ERR, 0),
            (4, st::WR_FLUSH_ERR, 2),
            (5, st::WR_FLUSH_ERR, 0),
        ]
    );
    assert_eq!(a.qp.sq_cons(), 5);
    // B: the first SEND completed, then ERR flushed the other three receives.
    let r: Vec<(u64, u32)> = b.recv_cqes().iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(r, vec![(100, 0), (101, 5), (102, 5), (103, 5)]);
    // Posting after ERR flushes at the doorbell.
    a.post_send(&send_wqe(&a, 6, wr::SEND, SIGNALED, 0, 4));
    world.run_until_idle();
    let s = a.send_cqes();
    assert_eq!((s[0].wr_id, s[0].status), (6, st::WR_FLUSH_ERR));
}
